"""Unmodified JAX through Loom's IFRT proxy, beside its peers, in one run:
  - per-call latency of a tiny jitted function (x + 1 on one device, result fetched) and of the
    seed's pmap on 8 devices, and the chained rate without fetching: through the proxy (a `loom up`
    cluster of 2 workers x 4 devices), with Loom's own client (the same x + 1 through libloom's
    Python binding: the issue's yardstick) and with plain JAX on 8 local CPU devices;
  - host->device (jax.device_put, waited for) and device->host (np.asarray of a fresh result)
    bandwidth of a 256 MiB f32 array split over the 8 devices, through the proxy, beside Loom's own
    client (libloom's put/get through its Python binding, straight from and into numpy memory) on
    the same cluster and plain JAX on 8 local CPU devices; with the CPU time JAX's client process
    (all its threads) and the proxy spend per transfer, which shows who bounds the proxy's figure.
Each transfer client runs REPS transfers per round; ROUNDS rounds rotate which client goes first
(the machines are shared): medians over every transfer, best in brackets.
Usage: python3 bench/bench_proxy.py [N] [MiB] [--reps R] [--rounds K] [--transfers-only]"""
import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOOM = os.environ.get("LOOM_BIN", str(ROOT / "build" / "bin" / "loom"))

CLIENT = r'''
import json, os, sys, time, numpy as np
mode, n, mib, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
if mode == "proxy":
    import pathwaysutils
    pathwaysutils.initialize()
else:
    import jax
    jax.config.update("jax_num_cpu_devices", 8)
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
out = {}
def best(f, reps=3):
    return min(f() for _ in range(reps))
if n:
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
if reps:
    proxy_pid = int(os.environ.get("BENCH_PROXY_PID", "0"))
    def cpu():  # (this process, the proxy): CPU seconds, all threads
        t = os.times()
        p = 0.0
        if proxy_pid:
            f = open(f"/proc/{proxy_pid}/stat").read().rsplit(")", 1)[1].split()
            p = (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
        return t.user + t.system, p
    sh = NamedSharding(Mesh(np.array(jax.devices()[:8]), ("d",)), P("d"))
    big = np.random.default_rng(0).random((8, mib * 1024 * 256 // 8), dtype=np.float32)
    b = jax.device_put(big, sh) + 0  # compile a + 0 once
    b.block_until_ready()
    t = {k: [] for k in ("h2d_s", "d2h_s", "h2d_cpu", "d2h_cpu", "h2d_pcpu", "d2h_pcpu")}
    for _ in range(reps):
        c0 = cpu(); t0 = time.perf_counter()
        a = jax.device_put(big, sh)
        a.block_until_ready()
        t1 = time.perf_counter(); c1 = cpu()
        b = a + 0  # a fresh array: np.asarray(a) would answer from the host copy JAX keeps
        b.block_until_ready()
        c2 = cpu(); t2 = time.perf_counter()
        y = np.asarray(b)
        t3 = time.perf_counter(); c3 = cpu()
        assert y.shape == big.shape and y[-1, -1] == big[-1, -1]
        t["h2d_s"].append(t1 - t0); t["d2h_s"].append(t3 - t2)
        t["h2d_cpu"].append(c1[0] - c0[0]); t["d2h_cpu"].append(c3[0] - c2[0])
        t["h2d_pcpu"].append(c1[1] - c0[1]); t["d2h_pcpu"].append(c3[1] - c2[1])
        del a, b, y
    out.update(t)
print("RESULT " + json.dumps(out), flush=True)
'''

LOOM_CLIENT = r'''
import json, sys, time, numpy as np, loom
mib, reps, n = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
c = loom.connect()
out = {}
if n:  # the same x + 1 on one device, through libloom: launch and fetch, and chained launches
    inc = c.compile("""
func.func public @main(%x: tensor<1xf32>) -> tensor<1xf32> {
  %one = stablehlo.constant dense<1.0> : tensor<1xf32>
  %y = stablehlo.add %x, %one : tensor<1xf32>
  return %y : tensor<1xf32>
}""", devices=[0])
    x = c.put(np.zeros((1,), np.float32), 0)
    inc(x).numpy()
    def fetched():
        t = time.perf_counter()
        for _ in range(n):
            inc(x).numpy()
        return (time.perf_counter() - t) / n
    def chained():
        t = time.perf_counter()
        y = x
        for _ in range(n):
            y = inc(y)
        y.numpy()
        return (time.perf_counter() - t) / n
    out["jit_fetched_us"] = min(fetched() for _ in range(3)) * 1e6
    out["jit_chained_us"] = min(chained() for _ in range(3)) * 1e6
sh = loom.Sharding((8,), range(8), ((0,),))
big = np.random.default_rng(0).random((8, mib * 1024 * 256 // 8), dtype=np.float32)
h, d = [], []
for _ in range(reps):
    t = time.perf_counter(); a = c.put(big, sh); h.append(time.perf_counter() - t)
    t = time.perf_counter(); y = a.numpy(); d.append(time.perf_counter() - t)  # a fresh numpy array each time
    assert y[-1, -1] == big[-1, -1]
    del a, y
out.update(h2d_s=h, d2h_s=d)
print("RESULT " + json.dumps(out), flush=True)
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


def proxy_pid(port):
    """The pid of the `loom proxy` listening on port (for its CPU time), 0 if not found."""
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                cmd = open(f"/proc/{d}/cmdline", "rb").read().split(b"\0")
            except OSError:
                continue
            if b"proxy" in cmd and f"127.0.0.1:{port}".encode() in cmd:
                return int(d)
    return 0


def med(v):
    v = sorted(v)
    return v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2


def main():
    if "-h" in sys.argv or "--help" in sys.argv:
        print(__doc__)
        return
    args = [a for a in sys.argv[1:]]
    def opt(name, default):
        if name in args:
            i = args.index(name)
            v = args[i + 1]
            del args[i:i + 2]
            return int(v)
        return default
    reps, rounds = opt("--reps", 4), opt("--rounds", 2)
    only = "--transfers-only" in args
    args = [a for a in args if a != "--transfers-only"]
    n = 0 if only else (int(args[0]) if args else 200)
    mib = int(args[1]) if len(args) > 1 else 256
    state = tempfile.mkdtemp(prefix="bench-proxy-")
    env = {k: v for k, v in os.environ.items() if k not in ("LOOM_CONTROLLER", "JAX_PLATFORMS")}
    env["LOOM_STATE_DIR"] = state
    port = free_port()
    subprocess.run([LOOM, "up", "--detach", "--proxy-port", str(port), "--device-memory", "4G"], env=env, check=True,
                   capture_output=True)
    res = {"proxy": [], "loom": [], "cpu": []}
    try:
        penv = dict(env, JAX_PLATFORMS="proxy", JAX_BACKEND_TARGET=f"grpc://127.0.0.1:{port}",
                    IFRT_PROXY_USE_INSECURE_GRPC_CREDENTIALS="true", BENCH_PROXY_PID=str(proxy_pid(port)))
        cenv = dict(env, JAX_PLATFORMS="cpu")
        cmds = {"proxy": lambda r: run([sys.executable, "-c", CLIENT, "proxy", str(n if r == 0 else 0), str(mib), str(reps)], penv),
                "cpu": lambda r: run([sys.executable, "-c", CLIENT, "cpu", str(n if r == 0 else 0), str(mib), str(reps)], cenv),
                "loom": lambda r: run([sys.executable, "-c", LOOM_CLIENT, str(mib), str(reps), str(n if r == 0 else 0)], env)}
        order = ["proxy", "loom", "cpu"]
        for r in range(rounds):
            for k in order[r % 3:] + order[:r % 3]:
                res[k].append(cmds[k](r))
    finally:
        subprocess.run([LOOM, "down"], env=env, capture_output=True)
    proxy, jaxcpu, lc = res["proxy"][0], res["cpu"][0], res["loom"][0]
    if n:
        print(f"{'':36}{'Loom IFRT proxy':>18}{'Loom client':>14}{'plain JAX (8 CPU)':>20}{'proxy/client':>14}")
        for k, what in (("jit_fetched_us", "jit x+1, 1 device, fetched (us)"), ("jit_chained_us", "jit x+1 chained (us/call)"),
                        ("pmap_fetched_us", "pmap psum, 8 devices, fetched (us)")):
            c = f"{lc[k]:>14.0f}" if k in lc else f"{'-':>14}"
            ratio = f"{proxy[k] / lc[k]:>13.1f}x" if k in lc else ""
            print(f"{what:36}{proxy[k]:>18.0f}{c}{jaxcpu[k]:>20.0f}{ratio}")
        print()
    def col(k, key):
        v = [x for r in res[k] for x in r.get(key, [])]
        return v
    print(f"{mib} MiB f32 over 8 devices, MiB/s,   {rounds} round(s) x {reps} transfers: median [best]")
    print(f"{'':22}{'Loom IFRT proxy':>20}{'Loom client':>20}{'plain JAX (8 CPU)':>20}{'proxy/client':>14}")
    for key, what in (("h2d_s", "host -> device"), ("d2h_s", "device -> host")):
        cells, meds = [], {}
        for k in ("proxy", "loom", "cpu"):
            v = col(k, key)
            meds[k] = mib / med(v)
            cells.append(f"{mib / med(v):.0f} [{mib / min(v):.0f}]")
        print(f"{what:22}{cells[0]:>20}{cells[1]:>20}{cells[2]:>20}{meds['proxy'] / meds['loom']:>13.0%}")
    print("\nCPU per transfer through the proxy (ms, median): the JAX client process (all threads) and the proxy;")
    print("the Loom client's whole transfer (wall) for scale")
    for key, what in (("h2d", "host -> device"), ("d2h", "device -> host")):
        print(f"{what:22}JAX client {med(col('proxy', key + '_cpu')) * 1e3:6.0f}   proxy {med(col('proxy', key + '_pcpu')) * 1e3:6.0f}"
              f"   Loom client wall {med(col('loom', key + '_s')) * 1e3:6.0f}")


if __name__ == "__main__":
    main()
