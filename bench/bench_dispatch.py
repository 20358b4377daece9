"""Dispatch overhead of a tiny launch from Python, beside the same launches from C.

Starts a local cluster (2 workers x 4 devices; or uses $LOOM_CONTROLLER), lowers two tiny
programs with JAX (x + 1 on one device, f32[4]; and pmap(x + 1) over 8 devices, f32[8, 4]),
and measures each from three clients on the same cluster in one run:
  C          build/bench/bench_dispatch (libloom called directly)
  Executable loom.Executable.launch (the binding plus its thin Python layer)
  loom.jax   a loom.jax function call (pytree flattening, signature cache, then the same launch)
Figures: issue = client time per launch when N chained launches are issued without waiting;
chain = wall time per launch until the last completed; rtt = one launch then wait, p50/p99.

    python3 bench/bench_dispatch.py [N]        (N launches per measurement, default 2000)
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
BUILD = Path(os.environ.get("LOOM_BUILD_DIR", ROOT / "build"))
LOOM = BUILD / "bin" / "loom"


def measure(call, x, n):
    for _ in range(20):
        call(x)[1].wait()
    t0 = time.perf_counter()
    y = x
    for _ in range(n):
        y, fut = call(y)
    t1 = time.perf_counter()
    fut.wait()
    t2 = time.perf_counter()
    lat = []
    for _ in range(n // 4):
        a = time.perf_counter()
        call(x)[1].wait()
        lat.append(time.perf_counter() - a)
    lat.sort()
    return {"issue_us": (t1 - t0) / n * 1e6, "chain_us": (t2 - t0) / n * 1e6,
            "rtt_p50_us": lat[len(lat) // 2] * 1e6, "rtt_p99_us": lat[len(lat) * 99 // 100] * 1e6}


def main():
    ap = argparse.ArgumentParser(description="Dispatch overhead of a tiny launch from Python (loom.Executable, "
                                 "loom.jax) beside the same launches from C (build/bench/bench_dispatch), on a "
                                 "local cluster it starts (or $LOOM_CONTROLLER).")
    ap.add_argument("n", nargs="?", type=int, default=2000, help="launches per measurement (default 2000)")
    n = ap.parse_args().n
    state = None
    if not os.environ.get("LOOM_CONTROLLER"):
        state = tempfile.mkdtemp(prefix="loom-bench-")
        os.environ["LOOM_STATE_DIR"] = state
        subprocess.run([str(LOOM), "up", "--detach"], check=True, stdout=subprocess.DEVNULL)
    try:
        import loom.jax
        client = loom.jax.initialize(patch_jax=False)
        progs = [
            ("x+1, 1 device, f32[4]", loom.jax.jit(lambda x: x + 1), np.zeros(4, np.float32)),
            ("pmap x+1, 8 devices, f32[8,4]", loom.jax.pmap(lambda x: x + 1), np.zeros((8, 4), np.float32)),
        ]
        print(f"{n} launches per measurement; best of 3 runs; microseconds per launch")
        print(f"{'program':32} {'client':11} {'issue':>8} {'chain':>8} {'rtt p50':>8} {'rtt p99':>8}")
        for name, fn, x0 in progs:
            exe = fn.executable(x0)
            with tempfile.NamedTemporaryFile("w", suffix=".mlir", delete=False) as f:
                f.write(fn.lower(x0))
            rows = {}
            for _ in range(3):
                r = subprocess.run([str(BUILD / "bench" / "bench_dispatch"), f.name, str(n)], capture_output=True,
                                   text=True, check=True)
                rows.setdefault("C", []).append(json.loads(r.stdout))
                x = exe.launch(x0)[0][0]  # x0 put with the program's sharding
                x.block_until_ready()
                rows.setdefault("Executable", []).append(
                    measure(lambda a: (lambda o: (o[0][0], o[1]))(exe.launch(a)), x, n))
                rows.setdefault("loom.jax", []).append(measure(lambda a: fn.launch(a), x, n))
            os.unlink(f.name)
            for who, runs in rows.items():
                best = {k: min(r[k] for r in runs) for k in runs[0]}
                print(f"{name:32} {who:11} {best['issue_us']:8.1f} {best['chain_us']:8.1f} "
                      f"{best['rtt_p50_us']:8.1f} {best['rtt_p99_us']:8.1f}")
        loom.jax._closed_default()
    finally:
        if state:
            subprocess.run([str(LOOM), "down"], stdout=subprocess.DEVNULL)


if __name__ == "__main__":
    main()
