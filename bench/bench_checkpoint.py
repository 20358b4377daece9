#!/usr/bin/env python3
"""Checkpoint save and load throughput (GB/s), Loom beside numpy and safetensors on this machine.

Loom: a controller and 2 workers x 4 CPU devices it starts itself; SIZE (default 1 GiB) of f32 in
4 arrays, each tiled over the 8 devices. Measured, best of RUNS:
  save            Client.checkpoint_save: both workers write their shards as safetensors files
                  in parallel (fsync'd, a CRC-32 per 1 MiB block), then the manifest;
  load (same)     Client.checkpoint_load onto the sharding it was saved with;
  load (reshard)  onto 4 devices of one worker, tiled along the other dimension (every worker
                  reads only the byte ranges its new shards need, each block's CRC checked).
The files are in the page cache (just written), as for the peers.
Peers, same bytes, same process, same directory: numpy `np.save` of each array (+ fsync) and
`np.load`; safetensors' own `safetensors.numpy.save_file` (+ fsync) and `load_file`.

    python3 bench/bench_checkpoint.py [--size-mib 1024] [--runs 3] [--dir DIR]
"""
import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
BUILD = Path(os.environ.get("LOOM_BUILD_DIR", ROOT / "build"))
LOOM = os.environ.get("LOOM_BIN", str(BUILD / "bin" / "loom"))
sys.path.insert(0, str(BUILD / "python"))


def wait_file(path, timeout=30):
    t = time.monotonic() + timeout
    while time.monotonic() < t:
        if path.exists() and path.read_text().strip():
            return path.read_text().strip()
        time.sleep(0.05)
    raise RuntimeError(f"timed out waiting for {path}")


def best(fn, runs):
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return min(ts)


def fsync_path(p):
    fd = os.open(p, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--dir", help="where the files go (default: a temporary directory under /tmp)")
    args = ap.parse_args()
    import loom
    from loom import Sharding

    tmp = Path(tempfile.mkdtemp(prefix="loom-bench-ckpt-", dir=args.dir))
    env = dict(os.environ, LOOM_STATE_DIR=str(tmp / "state"))
    env.pop("LOOM_CONTROLLER", None)
    procs = []

    def start(name, *a):
        p = subprocess.Popen([LOOM, *a], stdout=open(tmp / f"{name}.log", "wb"), stderr=subprocess.STDOUT,
                             start_new_session=True, env=env)
        procs.append(p)
        return p

    total = args.size_mib << 20
    narr = 4
    rows = 1024
    cols = total // 4 // narr // rows
    shard_mib = total / 8 / 2**20
    mem = f"{int(shard_mib * narr * 3 + 64)}M"  # the saved arrays, a load, a resharded load
    try:
        af = tmp / "addr"
        start("controller", "controller", "--listen", "127.0.0.1:0", "--address-file", str(af), "--checkpoint-dir",
              str(tmp / "ck"), "--max-payload", "1G", "--heartbeat-timeout", "20000")  # (a loaded machine)
        addr = wait_file(af)
        for i in range(2):
            start(f"w{i}", "worker", "--controller", addr, "--devices", "4", "--device-memory", mem)
        c = loom.connect(addr, timeout=120)
        t = time.monotonic() + 30
        while len(c.devices(refresh=True)) < 8:
            if time.monotonic() > t:
                logs = "".join((tmp / f"w{i}.log").read_text(errors="replace")[-800:] for i in range(2))
                raise RuntimeError(f"the workers did not register:\n{logs}")
            time.sleep(0.1)
        rng = np.random.default_rng(0)
        host = {f"p{i}": rng.standard_normal((rows, cols), dtype=np.float32) for i in range(narr)}
        nbytes = sum(a.nbytes for a in host.values())
        arrs = {k: c.put(v, Sharding.tiled(range(8), 0)) for k, v in host.items()}
        print(f"{nbytes / 2**30:.2f} GiB of f32 in {narr} arrays [{rows}, {cols}], tiled over 8 devices "
              f"(2 workers x 4); best of {args.runs}; files in {tmp}", flush=True)

        def lsave():
            c.checkpoint_save("bench", arrs)

        loaded = []

        def lload(sh=None):
            r = c.checkpoint_load("bench", list(host), shardings=sh)
            for a in r.values():
                a.block_until_ready()
            loaded.append(r)
            for a in r.values():
                a.delete()

        t_save = best(lsave, args.runs)
        t_load = best(lload, args.runs)
        resh = {k: Sharding.tiled([0, 1, 2, 3], 1) for k in host}
        t_resh = best(lambda: lload(resh), args.runs)
        chk = c.checkpoint_load("bench", ["p0"], shardings={"p0": Sharding.tiled([4, 5], 1)})["p0"].numpy()
        assert chk.tobytes() == host["p0"].tobytes(), "the checkpoint does not hold the bytes put"
        for a in arrs.values():
            a.delete()
        c.close()

        # peers
        peer = tmp / "peer"
        peer.mkdir()

        def npsave():
            for k, v in host.items():
                p = peer / f"{k}.npy"
                np.save(p, v)
                fsync_path(p)

        def npload():
            for k in host:
                np.load(peer / f"{k}.npy")

        from safetensors.numpy import load_file, save_file

        def stsave():
            save_file(host, str(peer / "all.safetensors"))
            fsync_path(peer / "all.safetensors")

        def stload():
            load_file(str(peer / "all.safetensors"))

        t_npsave, t_npload = best(npsave, args.runs), best(npload, args.runs)
        t_stsave, t_stload = best(stsave, args.runs), best(stload, args.runs)
        gb = nbytes / 1e9
        print(f"{'':34s}{'seconds':>10s}{'GB/s':>10s}")
        for name, s in [("loom checkpoint_save", t_save), ("numpy np.save (+fsync)", t_npsave),
                        ("safetensors save_file (+fsync)", t_stsave), ("loom checkpoint_load (same)", t_load),
                        ("loom checkpoint_load (reshard 4)", t_resh), ("numpy np.load", t_npload),
                        ("safetensors load_file", t_stload)]:
            print(f"{name:34s}{s:10.3f}{gb / s:10.2f}")
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
