"""Unmodified JAX through Loom's IFRT proxy, beside its peers, in one run:
  - per-call latency of a tiny jitted function (x + 1 on one device, result fetched) and of the
    seed's pmap on 8 devices, and the chained rate without fetching: through the proxy (a `loom up`
    cluster of 2 workers x 4 devices) and with plain JAX on 8 local CPU devices;
  - host->device and device->host time of a 64 MiB f32 array on one device through the proxy,
    beside Loom's own Python client (`loom.connect().put` / `.get`) on the same cluster.
Best of several runs (the machines are shared). Usage: python3 bench/bench_proxy.py [N] [MiB]"""
import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOOM = os.environ.get("LOOM_BIN", str(ROOT / "build" / "bin" / "loom"))
N = int(sys.argv[1]) if len(sys.argv) > 1 else 200
MIB = int(sys.argv[2]) if len(sys.argv) > 2 else 64

CLIENT = r'''
import json, sys, time, numpy as np
mode, n, mib = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
if mode == "proxy":
    import pathwaysutils
    pathwaysutils.initialize()
else:
    import jax
    jax.config.update("jax_num_cpu_devices", 8)
import jax, jax.numpy as jnp
from jax import lax
out = {}
def best(f, reps=3):
    return min(f() for _ in range(reps))
inc = jax.jit(lambda v: v + 1)
x = jnp.zeros((1,), jnp.float32)
np.asarray(inc(x))
def fetched():
    t = time.perf_counter()
    for _ in range(n):
        np.asarray(inc(x))
    return (time.perf_counter() - t) / n
def chained():
    t = time.perf_counter()
    y = x
    for _ in range(n):
        y = inc(y)
    y.block_until_ready()
    return (time.perf_counter() - t) / n
out["jit_fetched_us"] = best(fetched) * 1e6
out["jit_chained_us"] = best(chained) * 1e6
pm = jax.pmap(lambda v: lax.psum(v, "d"), axis_name="d")
xs = np.arange(8, dtype=np.float32)
np.asarray(pm(xs))
def pmapped():
    t = time.perf_counter()
    for _ in range(max(n // 4, 1)):
        np.asarray(pm(xs))
    return (time.perf_counter() - t) / max(n // 4, 1)
out["pmap_fetched_us"] = best(pmapped) * 1e6
if mode == "proxy":
    big = np.random.rand(mib * 1024 * 256).astype(np.float32)
    def h2d():
        t = time.perf_counter(); a = jax.device_put(big, jax.devices()[0]); a.block_until_ready()
        out["_a"] = a
        return time.perf_counter() - t
    out["h2d_s"] = best(h2d)
    a = out.pop("_a")
    def d2h():
        b = a + 0
        b.block_until_ready()
        t = time.perf_counter(); y = np.asarray(b); dt = time.perf_counter() - t
        assert y.shape == big.shape
        return dt
    out["d2h_s"] = best(d2h)
print("RESULT " + json.dumps(out), flush=True)
'''

LOOM_CLIENT = r'''
import json, sys, time, numpy as np, loom
mib = int(sys.argv[1])
c = loom.connect()
big = np.random.rand(mib * 1024 * 256).astype(np.float32)
h, d = [], []
for _ in range(3):
    t = time.perf_counter(); a = c.put(big); h.append(time.perf_counter() - t)
    t = time.perf_counter(); y = a.numpy(); d.append(time.perf_counter() - t)
print("RESULT " + json.dumps({"h2d_s": min(h), "d2h_s": min(d)}), flush=True)
'''


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(args, env, timeout=900):
    r = subprocess.run(args, capture_output=True, text=True, env=env, timeout=timeout)
    line = next((l for l in r.stdout.splitlines() if l.startswith("RESULT ")), None)
    if not line:
        raise SystemExit(f"{args[:3]} failed:\n{r.stdout}\n{r.stderr[-3000:]}")
    return json.loads(line[7:])


def main():
    if "-h" in sys.argv or "--help" in sys.argv:
        print(__doc__)
        return
    state = tempfile.mkdtemp(prefix="bench-proxy-")
    env = {k: v for k, v in os.environ.items() if k not in ("LOOM_CONTROLLER", "JAX_PLATFORMS")}
    env["LOOM_STATE_DIR"] = state
    port = free_port()
    subprocess.run([LOOM, "up", "--detach", "--proxy-port", str(port)], env=env, check=True, capture_output=True)
    try:
        penv = dict(env, JAX_PLATFORMS="proxy", JAX_BACKEND_TARGET=f"grpc://127.0.0.1:{port}",
                    IFRT_PROXY_USE_INSECURE_GRPC_CREDENTIALS="true")
        proxy = run([sys.executable, "-c", CLIENT, "proxy", str(N), str(MIB)], penv)
        jaxcpu = run([sys.executable, "-c", CLIENT, "cpu", str(N), str(MIB)], dict(env, JAX_PLATFORMS="cpu"))
        lc = run([sys.executable, "-c", LOOM_CLIENT, str(MIB)], env)
    finally:
        subprocess.run([LOOM, "down"], env=env, capture_output=True)
    print(f"{'':36}{'Loom IFRT proxy':>18}{'plain JAX (8 CPU)':>20}")
    for k, what in (("jit_fetched_us", "jit x+1, 1 device, fetched (us)"), ("jit_chained_us", "jit x+1 chained (us/call)"),
                    ("pmap_fetched_us", "pmap psum, 8 devices, fetched (us)")):
        print(f"{what:36}{proxy[k]:>18.0f}{jaxcpu[k]:>20.0f}")
    print(f"\n{'':36}{'Loom IFRT proxy':>18}{'Loom client':>20}")
    for k in ("h2d_s", "d2h_s"):
        print(f"{MIB} MiB {k[:3]} (MiB/s){'':20}{MIB / proxy[k]:>18.0f}{MIB / lc[k]:>20.0f}")


if __name__ == "__main__":
    main()
