"""A jitted function that closes over a large array (JAX writes the array into the program), run
once with its result fetched: through Loom's IFRT proxy (a `loom up` cluster of 2 workers x 4
devices; the proxy's compile puts the constant as an array, docs/scale.md "Large constants")
beside plain JAX on this host's CPU, in one run; and the controller's peak resident memory, which
must not grow with the constant. Usage: python3 bench/bench_constants.py [MiB ...] (default 64 256 953)"""
import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOOM = os.environ.get("LOOM_BIN", str(ROOT / "build" / "bin" / "loom"))
SIZES = [int(a) for a in sys.argv[1:] if a.isdigit()] or [64, 256, 953]

CLIENT = r'''
import json, sys, time, numpy as np
mode, mib = sys.argv[1], int(sys.argv[2])
if mode == "proxy":
    import pathwaysutils
    pathwaysutils.initialize()
import jax, jax.numpy as jnp
rows = mib * 256
w = np.random.default_rng(0).standard_normal((rows, 1024)).astype(np.float32)
x = np.ones(1024, np.float32)
t = time.perf_counter()
y = np.asarray(jax.jit(lambda v: w @ v)(x))
first = time.perf_counter() - t
ok = bool(np.allclose(y, w @ x, rtol=1e-3, atol=1e-2))
print("RESULT " + json.dumps({"first_s": first, "ok": ok}), flush=True)
'''


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(args, env, timeout=1800):
    r = subprocess.run(args, capture_output=True, text=True, env=env, timeout=timeout)
    line = next((l for l in r.stdout.splitlines() if l.startswith("RESULT ")), None)
    if not line:
        err = [l for l in r.stderr.splitlines() if "Error" in l or "error" in l] or r.stderr.strip().splitlines() or ["?"]
        return {"first_s": float("nan"), "ok": False, "error": err[-1][:300]}
    return json.loads(line[7:])


def hwm_mib(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main():
    if "-h" in sys.argv or "--help" in sys.argv:
        print(__doc__)
        return
    state = Path(tempfile.mkdtemp(prefix="bench-constants-"))
    env = {k: v for k, v in os.environ.items() if k not in ("LOOM_CONTROLLER", "JAX_PLATFORMS")}
    env["LOOM_STATE_DIR"] = str(state)
    port = free_port()
    subprocess.run([LOOM, "up", "--detach", "--proxy-port", str(port), "--device-memory", str(4 << 30)], env=env,
                   check=True, capture_output=True)
    rows = []
    try:
        info = dict(l.split("=", 1) for l in (state / "cluster").read_text().split() if "=" in l)
        cpid = int(info["controller_pid"]) if "controller_pid" in info else None
        penv = dict(env, JAX_PLATFORMS="proxy", JAX_BACKEND_TARGET=f"grpc://127.0.0.1:{port}",
                    IFRT_PROXY_USE_INSECURE_GRPC_CREDENTIALS="true")
        for mib in SIZES:
            p = run([sys.executable, "-c", CLIENT, "proxy", str(mib)], penv)
            j = run([sys.executable, "-c", CLIENT, "cpu", str(mib)], dict(env, JAX_PLATFORMS="cpu"))
            rows.append((mib, p, j, hwm_mib(cpid) if cpid else float("nan")))
    finally:
        subprocess.run([LOOM, "down"], env=env, capture_output=True)
    print(f"{'closure':>10}{'Loom IFRT proxy (s)':>22}{'plain JAX CPU (s)':>20}{'controller peak RSS':>22}")
    for mib, p, j, h in rows:
        ps = f"{p['first_s']:.2f}" + ("" if p["ok"] else " WRONG/FAILED")
        print(f"{mib:>6} MiB{ps:>22}{j['first_s']:>20.2f}{h:>18.0f} MiB")
        if p.get("error"):
            print(f"{'':10}proxy: {p['error']}")


if __name__ == "__main__":
    main()
