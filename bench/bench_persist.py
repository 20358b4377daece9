#!/usr/bin/env python3
"""Persistence through the IFRT proxy beside Loom's own checkpoints (seconds, GB/s), one cluster.

`loom up` (controller, 2 workers x 4 CPU devices, the IFRT proxy) with its own state directory;
SIZE (default 256 MiB) of f32 in 4 arrays, each tiled along dimension 0 over the 8 devices.
Measured, best of RUNS, files in the page cache (just written) for both:
  persistence write   an unmodified JAX client (JAX_PLATFORMS=proxy, pathwaysutils 0.1.13):
                      helper.write_arrays(...).result(): one bulk request, run as one Loom
                      checkpoint per array in LOCATION/NAME (docs/proxy.md "Persistence")
  persistence read    helper.read_arrays into the sharding written, and resharded onto 4
                      devices tiled along dimension 1 (the future's result waited for)
  checkpoint_save     Loom's Python client (libloom's loom_checkpoint_save) of the same arrays,
                      one checkpoint of 4 arrays; checkpoint_load the same two ways.
Both end in the same worker code (safetensors written by the workers in parallel, fsync'd, a
CRC-32 per 1 MiB block); the difference is one checkpoint per array, and the JAX client's path.

    python3 bench/bench_persist.py [--size-mib 256] [--runs 3] [--dir DIR]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
BUILD = Path(os.environ.get("LOOM_BUILD_DIR", ROOT / "build"))
LOOM = os.environ.get("LOOM_BIN", str(BUILD / "bin" / "loom"))
sys.path.insert(0, str(BUILD / "python"))

CLIENT = textwrap.dedent("""
    import datetime, json, sys, time
    import numpy as np
    import pathwaysutils
    pathwaysutils.initialize()
    import jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    from pathwaysutils.persistence import helper
    loc, rows, cols, narr, runs = sys.argv[1], *map(int, sys.argv[2:6])
    T = datetime.timedelta(seconds=600)
    devs = jax.devices()
    sh = NamedSharding(Mesh(np.array(devs), ("d",)), P("d"))
    resh = NamedSharding(Mesh(np.array(devs[:4]), ("d",)), P(None, "d"))
    rng = np.random.default_rng(0)
    host = [rng.standard_normal((rows, cols), dtype=np.float32) for _ in range(narr)]
    arrs = [jax.device_put(h, sh) for h in host]
    jax.block_until_ready(arrs)
    names = [f"p{i}" for i in range(narr)]

    def best(fn):
        ts = []
        for _ in range(runs):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        return min(ts)

    def read(s, d):
        out, fut = helper.read_arrays(loc, names, [np.dtype(np.float32)] * narr, [(rows, cols)] * narr,
                                      [s] * narr, d, T)
        fut.result()
        return out

    w = best(lambda: helper.write_arrays(loc, names, arrs, T).result())
    r = best(lambda: read(sh, devs))
    rr = best(lambda: read(resh, devs[:4]))
    ok = all(np.array_equal(np.asarray(a), h) for a, h in zip(read(resh, devs[:4]), host))
    print("RESULT " + json.dumps({"write": w, "read": r, "reshard": rr, "ok": ok}))
""")


def best(fn, runs):
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return min(ts)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mib", type=int, default=256)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--dir", help="where the files go (default: a temporary directory under /tmp)")
    args = ap.parse_args()
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    tmp = Path(tempfile.mkdtemp(prefix="loom-bench-persist-", dir=args.dir))
    env = dict(os.environ, LOOM_STATE_DIR=str(tmp / "state"))
    for k in ("LOOM_CONTROLLER", "LOOM_PROXY_PORT"):
        env.pop(k, None)
    narr, rows = 4, 1024
    cols = (args.size_mib << 20) // 4 // narr // rows
    nbytes = narr * rows * cols * 4
    try:
        subprocess.run([LOOM, "up", "--detach", "--workers", "2", "--devices-per-worker", "4", "--proxy-port",
                        str(port)], env=env, check=True, capture_output=True, timeout=180)
        print(f"{nbytes / 2**20:.0f} MiB of f32 in {narr} arrays [{rows}, {cols}], tiled over 8 devices "
              f"(2 workers x 4); best of {args.runs}; files in {tmp}", flush=True)
        script = tmp / "client.py"
        script.write_text(CLIENT)
        jenv = dict(env, JAX_PLATFORMS="proxy", JAX_BACKEND_TARGET=f"grpc://127.0.0.1:{port}",
                    IFRT_PROXY_USE_INSECURE_GRPC_CREDENTIALS="true")
        r = subprocess.run([sys.executable, str(script), str(tmp / "persist"), str(rows), str(cols), str(narr),
                            str(args.runs)], env=jenv, capture_output=True, text=True, timeout=1800)
        lines = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
        if r.returncode != 0 or not lines:
            raise RuntimeError("the JAX client failed:\n" + r.stdout[-2000:] + r.stderr[-3000:])
        px = json.loads(lines[-1][7:])
        assert px["ok"], "persistence did not read back the bytes written"

        os.environ["LOOM_STATE_DIR"] = env["LOOM_STATE_DIR"]
        os.environ.pop("LOOM_CONTROLLER", None)
        import loom
        from loom import Sharding
        c = loom.connect(timeout=120)
        rng = np.random.default_rng(0)
        host = {f"p{i}": rng.standard_normal((rows, cols), dtype=np.float32) for i in range(narr)}
        arrs = {k: c.put(v, Sharding.tiled(range(8), 0)) for k, v in host.items()}

        def lload(sh=None):
            out = c.checkpoint_load("bench", list(host), shardings=sh)
            for a in out.values():
                a.block_until_ready()
                a.delete()

        t_save = best(lambda: c.checkpoint_save("bench", arrs), args.runs)
        t_load = best(lload, args.runs)
        t_resh = best(lambda: lload({k: Sharding.tiled([0, 1, 2, 3], 1) for k in host}), args.runs)
        c.close()
        gb = nbytes / 1e9
        print(f"{'':44s}{'seconds':>10s}{'GB/s':>10s}")
        for name, t in [("persistence write_arrays (JAX, proxy)", px["write"]),
                        ("loom checkpoint_save (Python client)", t_save),
                        ("persistence read_arrays (same sharding)", px["read"]),
                        ("loom checkpoint_load (same sharding)", t_load),
                        ("persistence read_arrays (reshard 4)", px["reshard"]),
                        ("loom checkpoint_load (reshard 4)", t_resh)]:
            print(f"{name:44s}{t:10.3f}{gb / t:10.2f}")
    finally:
        subprocess.run([LOOM, "down"], env=env, capture_output=True, timeout=120)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
