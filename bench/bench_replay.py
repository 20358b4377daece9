#!/usr/bin/env python3
"""Recovery of a lost array by replay (recomputing it from the launch log) beside recovery from a
snapshot, for the same array size (docs/elastic.md "Replay").

Each round starts a fresh cluster: a controller, 2 workers x 4 CPU devices and 1 standby. An f32
array of --mib MiB is tiled over the 8 devices (half of it on worker 1):

  snapshot  x = put(...)              its shards are snapshotted into the other worker's host memory
  replay    y = f(x)                  a launch output: no snapshot; f is elementwise plus an
                                      all_reduce over the 8 devices
  chain     y = f(x); z = g(y); del y z's replay needs y, itself recomputed first (two replays)

Worker 1 is SIGKILLed and the array is fetched shard by shard; measured: kill -> every shard
fetched (what a client waiting on it sees), beside the same fetch before the kill, and for the replays the controller's own figure
(kill -> the last replay completed, from its recovery events). Also: f's and g's steady launch
time on the healthy cluster, the floor of what a replay costs beyond the restore of its inputs.

Long chains (docs/elastic.md "Snapshots of launch outputs"): x[i+1] = h(x[i]) for --long launches
(h elementwise, f32 of --long-mib MiB), each x[i] deleted as the chain goes, then worker 1 is
SIGKILLed: recovery from the last periodic snapshot (--snapshot-every --every) beside the full
replay of the chain (snapshots of launch outputs off, every deleted link kept for the replay).
And the steady-state cost of the snapshots on launch latency: the median launch of a chain on
--steady-mib MiB with snapshots off, at the defaults (every 100 launches or 10 s) and every --every.

    python3 bench/bench_replay.py [--mib 64] [--repeat 3] [--long 210] [--long-mib 2] [--every 25]
                                  [--steady-mib 16] [--steady 200] [--steady-repeat 5]
                                  [--only long|steady|short]
"""
import argparse
import os
import re
import signal
import statistics
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
import loom  # noqa: E402


def program(n, body, name):
    k = n // 8
    return f"""module @{name} attributes {{mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32}} {{
  sdy.mesh @mesh = <["d"=8]> {{stablehlo.mesh = {{axes = [{{name = "d", size = 8 : i64}}]}}}}
  func.func public @main(%arg0: tensor<{n}xf32>) -> (tensor<{n}xf32> {{jax.result_info = "result"}}) {{
    %0 = sdy.manual_computation(%arg0) in_shardings=[<@mesh, [{{"d"}}]>] out_shardings=[<@mesh, [{{"d"}}]>] manual_axes={{"d"}} (%a: tensor<{k}xf32>) {{
{body.format(k=k)}
      sdy.return %r : tensor<{k}xf32>
    }} : (tensor<{n}xf32>) -> tensor<{n}xf32>
    return %0 : tensor<{n}xf32>
  }}
}}
"""


F = """      %c = stablehlo.constant dense<1.37> : tensor<f32>
      %cb = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<f32>) -> tensor<{k}xf32>
      %m = stablehlo.multiply %a, %cb : tensor<{k}xf32>
      %z = stablehlo.constant dense<0.0> : tensor<f32>
      %sum = stablehlo.reduce(%a init: %z) applies stablehlo.add across dimensions = [0] : (tensor<{k}xf32>, tensor<f32>) -> tensor<f32>
      %ps = "stablehlo.all_reduce"(%sum) <{{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3, 4, 5, 6, 7]]> : tensor<1x8xi64>, use_global_device_ids}}> ({{
      ^bb0(%p: tensor<f32>, %q: tensor<f32>):
        %t = stablehlo.add %p, %q : tensor<f32>
        stablehlo.return %t : tensor<f32>
      }}) : (tensor<f32>) -> tensor<f32>
      %pb = stablehlo.broadcast_in_dim %ps, dims = [] : (tensor<f32>) -> tensor<{k}xf32>
      %r = stablehlo.add %m, %pb : tensor<{k}xf32>"""
G = """      %c = stablehlo.constant dense<0.001> : tensor<f32>
      %cb = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<f32>) -> tensor<{k}xf32>
      %sq = stablehlo.multiply %a, %a : tensor<{k}xf32>
      %r = stablehlo.add %sq, %cb : tensor<{k}xf32>"""


# h(y) = y * y * 0.001 + cos(y): values stay in [-1, 1.002] however long the chain
H = """      %c = stablehlo.constant dense<0.001> : tensor<f32>
      %cb = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<f32>) -> tensor<{k}xf32>
      %sq = stablehlo.multiply %a, %a : tensor<{k}xf32>
      %m = stablehlo.multiply %sq, %cb : tensor<{k}xf32>
      %co = stablehlo.cosine %a : tensor<{k}xf32>
      %r = stablehlo.add %m, %co : tensor<{k}xf32>"""


class Cluster:
    def __init__(self, tmp, mib, *flags):
        self.tmp, self.procs = Path(tmp), []
        env = dict(os.environ, LOOM_STATE_DIR=str(self.tmp / "state"))
        env.pop("LOOM_CONTROLLER", None)
        self.env = env
        af = self.tmp / "addr"
        self.start("controller", "controller", "--listen", "127.0.0.1:0", "--address-file", str(af),
                   "--recover-wait", "30000", *flags)
        self.addr = self.wait(lambda: af.exists() and af.read_text().strip())
        mem = f"{max(256, 6 * mib)}M"
        for name, extra in (("w0", []), ("w1", []), ("s0", ["--standby"])):
            p = self.start(name, "worker", "--controller", self.addr, "--devices", "4", "--device-memory", mem, *extra)
            if name == "w1":
                self.w1 = p
            self.wait(lambda n=len(self.procs) - 1: self.workers() >= n)

    def start(self, name, *args):
        log = open(self.tmp / f"{name}.log", "wb")
        p = subprocess.Popen([LOOM, *args], stdout=log, stderr=subprocess.STDOUT, env=self.env,
                             stdin=subprocess.DEVNULL, start_new_session=True)
        self.procs.append(p)
        return p

    def workers(self):
        r = subprocess.run([LOOM, "status", "--json", "--controller", self.addr], capture_output=True, text=True,
                           env=self.env)
        if r.returncode:
            return 0
        import json
        return sum(w["alive"] for w in json.loads(r.stdout)["workers"])

    def log(self):
        return (self.tmp / "controller.log").read_text(errors="replace")

    @staticmethod
    def wait(fn, timeout=30):
        t = time.monotonic() + timeout
        while time.monotonic() < t:
            v = fn()
            if v:
                return v
            time.sleep(0.05)
        raise TimeoutError("the cluster did not start")

    def stop(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def fetch(a):
    return np.concatenate([a.shard(i) for i in range(8)])


def one(case, mib):
    n = mib * (1 << 20) // 4 // 8 * 8
    with tempfile.TemporaryDirectory(prefix="bench-replay-") as tmp:
        cl = Cluster(tmp, mib)
        try:
            c = loom.connect(cl.addr)
            f = c.compile(program(n, F, "f"), name="f")
            g = c.compile(program(n, G, "g"), name="g")
            xs = np.random.default_rng(1).standard_normal(n).astype(np.float32)
            x = c.put(xs, loom.Sharding.tiled(range(8), 0))
            steady = []
            if case == "snapshot":
                target = x
            elif case == "replay":
                for _ in range(3):
                    t0 = time.perf_counter()
                    f(x).block_until_ready()
                    steady.append(time.perf_counter() - t0)
                target = f(x)
                target.block_until_ready()
            else:
                y = f(x)
                target = g(y)
                target.block_until_ready()
                y.delete()
            t0 = time.perf_counter()
            before = fetch(target).tobytes()
            plain = time.perf_counter() - t0
            t0 = time.perf_counter()
            cl.w1.send_signal(signal.SIGKILL)
            after = fetch(target).tobytes()
            took = time.perf_counter() - t0
            assert after == before, "the recovered array differs"
            m = re.findall(r"recomputed its lost shards \(\d+ arrays\) (\d+) ms after", cl.log())
            ctl_ms = max(map(int, m)) if m else None
            c.close()
            return took, ctl_ms, (statistics.median(steady) if steady else None), plain
        finally:
            cl.stop()


def chain(mib, launches, flags, kill):
    """A chain of launches of h on a fresh cluster (controller flags); returns the median launch
    (s), and with kill: kill -> head fetched (s), the controller's kill -> last replay done (ms),
    and how many launches the recovery replayed."""
    n = mib * (1 << 20) // 4 // 8 * 8
    with tempfile.TemporaryDirectory(prefix="bench-replay-") as tmp:
        cl = Cluster(tmp, mib * (launches // 4 + 8) if kill else mib, *flags)
        try:
            c = loom.connect(cl.addr)
            h = c.compile(program(n, H, "h"), name="h")
            x = c.put(np.random.default_rng(2).standard_normal(n).astype(np.float32), loom.Sharding.tiled(range(8), 0))
            times = []
            for _ in range(launches):
                t0 = time.perf_counter()
                y = h(x)
                x.delete()
                y.block_until_ready()
                times.append(time.perf_counter() - t0)
                x = y
            res = [statistics.median(times)]
            if kill:
                before = fetch(x).tobytes()
                t0 = time.perf_counter()
                cl.w1.send_signal(signal.SIGKILL)
                after = fetch(x).tobytes()
                res.append(time.perf_counter() - t0)
                assert after == before, "the recovered array differs"
                log = cl.log()
                m = re.findall(r"recomputed its lost shards \(\d+ arrays\) (\d+) ms after", log)
                res.append(max(map(int, m)) if m else None)
                m = re.findall(r"arrays being recomputed by (\d+) replays", log)
                res.append(int(m[-1]) if m else None)
            c.close()
            return res
        finally:
            cl.stop()


def long_chains(a):
    L, mib = a.long, a.long_mib
    print(f"\nlong chain: {L} launches of h (elementwise) on f32 of {mib} MiB tiled over 8 devices, each link deleted"
          f" as it goes; worker 1 SIGKILLed after the last; median of {a.repeat} fresh clusters per mode")
    keep = str(L * mib * 2 + 64)
    modes = {f"snapshots every {a.every}": ["--snapshot-every", str(a.every), "--snapshot-interval", "0"],
             "no snapshots (full replay)": ["--snapshot-every", "0", "--snapshot-interval", "0",
                                            "--replay-keep-mb", keep]}
    res = {k: [] for k in modes}
    for r in range(a.repeat):
        for k in (list(modes) if r % 2 == 0 else list(modes)[::-1]):
            res[k].append(chain(mib, L, modes[k], True))
    print(f"{'mode':28} {'launches replayed':>17} {'kill->fetched ms':>17} {'controller kill->replayed ms':>29} "
          f"{'launch ms':>10}")
    for k, rs in res.items():
        ctl = [r[2] for r in rs if r[2] is not None]
        print(f"{k:28} {statistics.median(r[3] or 0 for r in rs):17.0f} {statistics.median(r[1] for r in rs) * 1e3:17.1f}"
              f" {(f'{statistics.median(ctl):.0f}' if ctl else '-'):>29} {statistics.median(r[0] for r in rs) * 1e3:10.2f}",
              flush=True)


def steady(a):
    mib, L = a.steady_mib, a.steady
    print(f"\nsteady state: median launch of a {L}-launch chain of h on f32 of {mib} MiB (each link deleted), 1 standby;"
          f" median (min-max) of {a.steady_repeat} fresh clusters per setting, order rotated")
    modes = {"snapshots of launch outputs off": ["--snapshot-every", "0", "--snapshot-interval", "0"],
             "defaults (every 100 or 10 s)": [],
             f"every {a.every}": ["--snapshot-every", str(a.every)]}
    res = {k: [] for k in modes}
    names = list(modes)
    for r in range(a.steady_repeat):
        for k in names[r % 3:] + names[:r % 3]:
            res[k].append(chain(mib, L, modes[k], False)[0])
    base = statistics.median(res[names[0]])
    for k in names:
        m = statistics.median(res[k])
        print(f"{k:32} {m * 1e3:8.2f} ms ({min(res[k]) * 1e3:.2f}-{max(res[k]) * 1e3:.2f})"
              f"{'' if k == names[0] else f'  {(m / base - 1) * 100:+.1f}% beside off'}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mib", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--long", type=int, default=210)
    ap.add_argument("--long-mib", type=int, default=2)
    ap.add_argument("--every", type=int, default=25)
    ap.add_argument("--steady-mib", type=int, default=16)
    ap.add_argument("--steady", type=int, default=200)
    ap.add_argument("--steady-repeat", type=int, default=5)
    ap.add_argument("--only", choices=["short", "long", "steady"])
    a = ap.parse_args()
    if a.only in (None, "long"):
        long_chains(a)
    if a.only in (None, "steady"):
        steady(a)
    if a.only not in (None, "short"):
        return
    print(f"array f32 of {a.mib} MiB tiled over 8 devices of 2 workers; worker 1 (half the array) SIGKILLed;"
          f" median of {a.repeat} fresh clusters per case")
    print(f"{'case':10} {'kill->fetched ms':>17} {'fetch, no fault ms':>19} {'controller: kill->replayed ms':>30} "
          f"{'steady f launch ms':>19}")
    cases = ["snapshot", "replay", "chain"]
    res = {k: [] for k in cases}
    for r in range(a.repeat):  # each round rotates which case goes first (the machine's load drifts)
        for case in cases[r % 3:] + cases[:r % 3]:
            res[case].append(one(case, a.mib))
    for case in cases:
        rs = res[case]
        took = statistics.median(r[0] for r in rs) * 1e3
        ctl = [r[1] for r in rs if r[1] is not None]
        st = [r[2] for r in rs if r[2] is not None]
        plain = statistics.median(r[3] for r in rs) * 1e3
        print(f"{case:10} {took:17.1f} {plain:19.1f} {(f'{statistics.median(ctl):.0f}' if ctl else '-'):>30} "
              f"{(f'{statistics.median(st) * 1e3:.1f}' if st else '-'):>19}", flush=True)

if __name__ == "__main__":
    main()
