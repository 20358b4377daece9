#!/usr/bin/env python3
"""Time from a worker's SIGKILL to the next completed training step, Loom beside torchrun.

Loom: a controller, 2 workers x 4 CPU devices and 1 standby (`loom worker --standby`), at the
defaults (heartbeat 200/900 ms); the data-parallel MLP loop of tests/integration/elastic_train.py
(16-32-32-4, batch 64 over 8 devices, a new batch put every step). One worker is SIGKILLed right
after step K is issued; the standby takes over its devices, the lost shards are restored, step K
is re-issued. Measured: kill -> step K completed, beside the median step time.

torchrun (torch.distributed.elastic, CPU, gloo): the same model and batch as a DDP job of 2
processes that saves a checkpoint after every step (the best case for a restart); one process is
SIGKILLed at step K; the elastic agent restarts the group (--max-restarts), which reloads the
checkpoint and goes on. Measured the same way: kill -> the next completed step. When torch is not
installed the peer is skipped, and the reason printed.

    python3 bench/bench_recovery.py [--steps 200] [--kill-step 100] [--repeat 3]
"""
import argparse
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILD = Path(os.environ.get("LOOM_BUILD_DIR", ROOT / "build"))
LOOM = os.environ.get("LOOM_BIN", str(BUILD / "bin" / "loom"))
TRAIN = ROOT / "tests" / "integration" / "elastic_train.py"


def wait_file(path, timeout=30):
    t = time.monotonic() + timeout
    while time.monotonic() < t:
        if path.exists() and path.read_text().strip():
            return path.read_text().strip()
        time.sleep(0.05)
    raise RuntimeError(f"timed out waiting for {path}")


def loom_status(addr):
    r = subprocess.run([LOOM, "status", "--json", "--controller", addr], capture_output=True, text=True, timeout=30)
    return json.loads(r.stdout)


def loom_once(tmp, steps, kill_step, standby=True):
    """(kill -> next step ms, median step ms); kill_step < 0: no kill (steady state only)."""
    procs = []
    env = dict(os.environ, LOOM_STATE_DIR=str(tmp / "state"))
    env.pop("LOOM_CONTROLLER", None)

    def start(name, *args):
        p = subprocess.Popen([LOOM, *args], stdout=open(tmp / f"{name}.log", "wb"), stderr=subprocess.STDOUT,
                             start_new_session=True, env=env)
        procs.append(p)
        return p

    try:
        af = tmp / "addr"
        start("controller", "controller", "--listen", "127.0.0.1:0", "--address-file", str(af))
        addr = wait_file(af)

        def wait_workers(n):
            t = time.monotonic() + 30
            while sum(w["alive"] for w in loom_status(addr)["workers"]) < n:
                if time.monotonic() > t:
                    raise RuntimeError("workers did not register")
                time.sleep(0.05)

        wargs = ["worker", "--controller", addr, "--devices", "4", "--device-memory", "256M"]
        start("w0", *wargs)
        wait_workers(1)
        victim = start("w1", *wargs)
        wait_workers(2)
        if standby:
            start("s0", *wargs, "--standby")
            wait_workers(3)
        tenv = dict(env, LOOM_CONTROLLER=addr, JAX_PLATFORMS="cpu",
                    PYTHONPATH=os.pathsep.join(filter(None, [str(BUILD / "python"), os.environ.get("PYTHONPATH")])))
        kill = ["--kill-pid", str(victim.pid), "--kill-step", str(kill_step)] if kill_step >= 0 else []
        r = subprocess.run([sys.executable, str(TRAIN), "--steps", str(steps), "--out", str(tmp / "p.npz"),
                            "--times", str(tmp / "t.json"), *kill], capture_output=True, text=True, env=tenv,
                           timeout=300)
        if r.returncode != 0:
            raise RuntimeError(f"the Loom training run failed:\n{r.stdout}\n{r.stderr[-2000:]}")
        times = dict(json.load(open(tmp / "t.json")))
        steps_t = [times[i] for i in sorted(times)]
        step_ms = statistics.median(b - a for a, b in zip(steps_t, steps_t[1:])) * 1000
        if kill_step < 0:
            return None, step_ms
        kill_t = float(re.search(r"sent SIGKILL to \d+ at ([0-9.]+) s", r.stdout).group(1))
        after = min(t for t in times.values() if t > kill_t)
        return (after - kill_t) * 1000, step_ms
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()


TORCH_JOB = r'''
import os, sys, time, torch, torch.distributed as dist
from torch import nn
steps, ckpt, log = int(sys.argv[1]), sys.argv[2], sys.argv[3]
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4))
start = 0
if os.path.exists(ckpt):
    state = torch.load(ckpt)
    model.load_state_dict(state["model"])
    start = state["step"] + 1
ddp = nn.parallel.DistributedDataParallel(model)
opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
g = torch.Generator().manual_seed(1)
x_all = torch.randn(8 * 64, 16, generator=g)
y_all = torch.tanh(x_all @ torch.randn(16, 4, generator=g))
per = 64 // world
for i in range(start, steps):
    b = i % 8
    x = x_all[b * 64 + rank * per:b * 64 + (rank + 1) * per]
    y = y_all[b * 64 + rank * per:b * 64 + (rank + 1) * per]
    opt.zero_grad()
    loss = ((ddp(x) - y) ** 2).mean()
    loss.backward()
    opt.step()
    if rank == 0:
        tmp = ckpt + ".tmp"
        torch.save({"model": model.state_dict(), "step": i}, tmp)
        os.replace(tmp, ckpt)
        with open(log, "a") as f:
            f.write(f"{i} {time.time()} {os.getpid()}\n")
    dist.barrier()
dist.destroy_process_group()
'''


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def torch_once(tmp, steps, kill_step):
    job = tmp / "ddp_job.py"
    job.write_text(TORCH_JOB)
    ckpt, log = tmp / "ckpt.pt", tmp / "steps.log"
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc-per-node=2",
                "--max-restarts=3", "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{free_port()}",
                str(job), str(steps), str(ckpt), str(log)]
    p = subprocess.Popen(torchrun, stdout=open(tmp / "torchrun.log", "wb"), stderr=subprocess.STDOUT,
                         start_new_session=True)
    try:
        kill_t = None
        deadline = time.monotonic() + 240
        while p.poll() is None and time.monotonic() < deadline:
            lines = log.read_text().split() if log.exists() else []
            rows = [lines[k:k + 3] for k in range(0, len(lines) - 2, 3)]
            if kill_t is None and rows and int(rows[-1][0]) >= kill_step:
                pid = int(rows[-1][2])
                kill_t = time.time()
                os.kill(pid, signal.SIGKILL)
            time.sleep(0.002)
        if p.poll() is None:
            raise RuntimeError("the torchrun job did not finish within 240 s of its start")
        rows = [l.split() for l in log.read_text().splitlines()]
        if kill_t is None:
            raise RuntimeError("the torch job ended before the kill step")
        after = min(float(r[1]) for r in rows if float(r[1]) > kill_t)
        ts = [float(r[1]) for r in rows]
        step_ms = statistics.median(b - a for a, b in zip(ts, ts[1:]) if b - a < 1.0) * 1000
        return (after - kill_t) * 1000, step_ms
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--kill-step", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    loom, peer, plain, snap = [], [], [], []
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="bench-recovery-") as d:
            loom.append(loom_once(Path(d), args.steps, args.kill_step))
        with tempfile.TemporaryDirectory(prefix="bench-recovery-") as d:  # steady state, no standby: no snapshots
            plain.append(loom_once(Path(d), args.steps, -1, standby=False)[1])
        with tempfile.TemporaryDirectory(prefix="bench-recovery-") as d:  # steady state with a standby: snapshots
            snap.append(loom_once(Path(d), args.steps, -1, standby=True)[1])
    try:
        import torch  # noqa: F401
        have_torch = None
    except ImportError as e:
        have_torch = f"torch is not installed ({e}); `pip install torch` from PyPI brings CUDA wheels of several GB"
    peer_failed = []
    if have_torch is None:
        for _ in range(args.repeat):
            with tempfile.TemporaryDirectory(prefix="bench-recovery-torch-") as d:
                try:
                    peer.append(torch_once(Path(d), args.steps, args.kill_step))
                except (RuntimeError, OSError, ValueError) as e:
                    peer_failed.append(str(e))
    print(f"recovery from a SIGKILLed worker, MLP 16-32-32-4, batch 64, {args.steps} steps, kill at step "
          f"{args.kill_step}, {args.repeat} runs each (median)")
    print(f"{'':34}{'kill -> next step done':>24}{'steady step':>14}")
    lr, ls = statistics.median(r for r, _ in loom), statistics.median(s for _, s in loom)
    print(f"{'loom (2x4 devices + 1 standby)':34}{lr:>21.1f} ms{ls:>11.2f} ms")
    p_ms, s_ms = statistics.median(plain), statistics.median(snap)
    print(f"steady step without recovery (no standby): {p_ms:.2f} ms; with a standby (puts snapshotted, "
          f"acknowledged once kept): {s_ms:.2f} ms ({(s_ms / p_ms - 1) * 100:+.1f}%)")
    if peer:
        pr, ps = statistics.median(r for r, _ in peer), statistics.median(s for _, s in peer)
        print(f"{'torchrun DDP (2 procs, gloo, ckpt)':34}{pr:>21.1f} ms{ps:>11.2f} ms")
        print(f"loom recovers {pr / lr:.1f}x faster")
    elif have_torch:
        print(f"torchrun: skipped: {have_torch}")
    if peer_failed:
        print(f"torchrun: {len(peer_failed)} of {args.repeat} runs did not recover: {peer_failed[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
