"""Helpers for the distributed tests: the C probe (tests/integration/dist_probe.c), `loom run`
with .npy inputs and outputs, and the test programs in tests/integration/programs/."""
import subprocess
from pathlib import Path

import numpy as np

from conftest import BUILD_DIR, LOOM_BIN, SOURCE_DIR, devices

PROGRAMS = SOURCE_DIR / "tests" / "integration" / "programs"
EXAMPLES = SOURCE_DIR / "examples"
PROBE = BUILD_DIR / "tests" / "dist_probe"


def probe(*args, timeout=120, check=True):
    """Runs dist_probe; returns its stdout. Fails the test (with its output) when it fails."""
    r = subprocess.run([str(PROBE), *map(str, args)], capture_output=True, text=True, timeout=timeout,
                       stdin=subprocess.DEVNULL)
    if check and r.returncode != 0:
        raise AssertionError(f"dist_probe {' '.join(map(str, args))} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return r.stdout


def loom_run(addr, program, *args, inputs=(), tmp=None, timeout=120):
    """`loom run PROGRAM --controller ADDR` with numpy inputs; returns (CompletedProcess, [results])."""
    cmd = [LOOM_BIN, "run", str(program), "--controller", addr, *map(str, args)]
    for i, a in enumerate(inputs):
        p = Path(tmp) / f"in{i}.npy"
        np.save(p, a)
        cmd += ["--input", f"{i}={p}"]
    out_dir = None
    if tmp is not None:
        out_dir = Path(tmp) / "results"
        cmd += ["--output-dir", str(out_dir)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    results = []
    if r.returncode == 0 and out_dir is not None:
        k = 0
        while (out_dir / f"result_{k}.npy").exists():
            results.append(np.load(out_dir / f"result_{k}.npy"))
            k += 1
        for f in out_dir.glob("*.npy"):
            f.unlink()
    return r, results


def memory_used(addr):
    """Bytes in use per device at the controller's last heartbeat."""
    return [d["memory_used"] for d in devices(addr)["devices"]]
