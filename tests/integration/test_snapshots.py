"""Periodic snapshots of launch outputs and the launch log truncated behind them (docs/elastic.md
"Snapshots of launch outputs"), with real processes: a controller, two workers of 4 CPU devices,
a standby, and a C client (snap_probe) running a long chain x[i+1] = g(x[i]) over 8 devices,
each x[i] deleted once the next launch is sent. So a lost shard of the chain's head can only
come back from a snapshot, or by replaying the chain from the last one.

- after a snapshot round, SIGKILL worker 1: the head comes back bitwise equal, and the recovery
  replays only the launches after the snapshot (the controller's recovery event counts them);
  the same with the launches pipelined (each input deleted before the launch reading it completes);
  the control run without snapshots replays the whole chain, bitwise equal too;
- over a long loop the launch log and the deleted arrays kept for replays stay bounded (`loom
  status --json`, devices' memory_used); without snapshots both grow with the chain.
"""
import json
import os
import re
import signal
import subprocess

import pytest

from conftest import BUILD_DIR, Cluster, run_loom, wait_for

PROBE = BUILD_DIR / "tests" / "snap_probe"
N = 4096  # f32 elements of the chain's array (16 KiB; 2 KiB per device)

pytestmark = pytest.mark.skipif(not PROBE.exists(), reason=f"{PROBE} is not built")

# g(y) = y * y * 0.001 + cos(y) on each shard: elementwise, values stay in [-1, 1.002]
G_BODY = """      %c = stablehlo.constant dense<0.001> : tensor<f32>
      %cb = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<f32>) -> tensor<{k}xf32>
      %sq = stablehlo.multiply %a, %a : tensor<{k}xf32>
      %m = stablehlo.multiply %sq, %cb : tensor<{k}xf32>
      %co = stablehlo.cosine %a : tensor<{k}xf32>
      %r = stablehlo.add %m, %co : tensor<{k}xf32>"""


def chain_program(n):
    k = n // 8
    return f"""module @g attributes {{mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32}} {{
  sdy.mesh @mesh = <["d"=8]> {{stablehlo.mesh = {{axes = [{{name = "d", size = 8 : i64}}]}}}}
  func.func public @main(%arg0: tensor<{n}xf32>) -> (tensor<{n}xf32> {{jax.result_info = "result"}}) {{
    %0 = sdy.manual_computation(%arg0) in_shardings=[<@mesh, [{{"d"}}]>] out_shardings=[<@mesh, [{{"d"}}]>] manual_axes={{"d"}} (%a: tensor<{k}xf32>) {{
{G_BODY.format(k=k)}
      sdy.return %r : tensor<{k}xf32>
    }} : (tensor<{n}xf32>) -> tensor<{n}xf32>
    return %0 : tensor<{n}xf32>
  }}
}}
"""


class Probe:
    """snap_probe driven line by line."""

    def __init__(self, addr, tmp_path, n=N):
        prog = tmp_path / "g.mlir"
        prog.write_text(chain_program(n))
        self.p = subprocess.Popen([str(PROBE), addr, str(prog), str(n)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)

    def ask(self, line):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()
        out = self.p.stdout.readline().strip()
        assert out and not out.startswith("error"), f"snap_probe {line!r}: {out!r}"
        return out.split()

    def run(self, k):
        return self.ask(f"run {k}")

    def digest(self):
        return self.ask("digest")[1]

    def close(self):
        if self.p.poll() is None:
            try:
                self.p.stdin.write("quit\n")
                self.p.stdin.flush()
            except BrokenPipeError:
                pass
            try:
                self.p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()


def status(addr):
    return json.loads(run_loom("status", "--json", "--controller", addr, check=True).stdout)


def memory_used(addr):
    r = run_loom("devices", "--json", "--controller", addr, check=True)
    return sum(d["memory_used"] for d in json.loads(r.stdout)["devices"])


def cluster_with_standby(procs, tmp_path, *flags):
    c = Cluster(procs, tmp_path)
    # --recover-wait: recovery is possible (snapshots are taken) before the standby's data plane is known
    c.start_controller("--recover-wait", "30000", *flags)
    c.start_worker(4, memory="256M")
    c.wait_devices(4)
    c.start_worker(4, memory="256M")
    c.wait_devices(8)
    c.start_worker(4, memory="256M", extra=("--standby",))

    def standby_ready():  # registered, with its data plane known (recovery is possible then)
        ws = status(c.addr)["workers"]
        return any(w["alive"] and w["standby"] for w in ws)
    wait_for(standby_ready, 30, what="the standby")
    return c


def snapshots_settled(addr, at_least):
    def ok():
        s = status(addr)
        return s if s["snapshots"] >= at_least and s["snapshots_in_flight"] == 0 else None
    return wait_for(ok, 30, what=f"{at_least} snapshots confirmed")


def replays_of_the_recovery(ctl_log):
    m = re.findall(r"replaced lost worker 1 in \d+ ms: (\d+) shards restored, (\d+) arrays being recomputed by "
                   r"(\d+) replays", ctl_log)
    assert len(m) == 1, ctl_log[-4000:]
    return int(m[0][0]), int(m[0][2])


def test_a_chain_comes_back_from_its_snapshot_replaying_only_the_launches_after_it(procs, tmp_path):
    c = cluster_with_standby(procs, tmp_path, "--snapshot-every", "20", "--snapshot-interval", "0")
    probe = Probe(c.addr, tmp_path)
    try:
        probe.run(40)                     # rounds at launches 20 and 40
        s = snapshots_settled(c.addr, 2)  # the head (x40) is in worker 0's and 1's host memory
        probe.run(13)                     # x41..x53: replayable only from x40
        before = probe.digest()
        procs.kill(c.workers[1])
        wait_for(lambda: status(c.addr)["recoveries"] == 1, 60, what="the recovery")
        assert probe.digest() == before   # bitwise equal, fetched from the workers
        restored, replays = replays_of_the_recovery(procs.log(c.controller))
        assert 1 <= replays <= 13, replays  # not the 53 launches of the whole chain
        assert restored >= 4                # x40's 4 lost shards came from its snapshot
        probe.run(5)                        # the chain goes on from the recomputed head
        assert s["launch_log"] <= 40
    finally:
        probe.close()


def test_a_pipelined_chain_deleted_before_its_launches_complete(procs, tmp_path):
    """The client sends each launch and deletes its input before the previous launch completes
    (as the Python client does): every link is a deleted array kept for the replay when its
    launch completes. Its log entry must stay, the head is snapshotted while kept, and the chain
    comes back bitwise, replaying at most the launches since the last snapshot."""
    c = cluster_with_standby(procs, tmp_path, "--snapshot-every", "20", "--snapshot-interval", "0")
    probe = Probe(c.addr, tmp_path)
    try:
        for _ in range(3):
            probe.ask("pipe 20")
        s = snapshots_settled(c.addr, 2)
        assert s["launch_log"] <= 40, s
        probe.ask("pipe 11")
        before = probe.digest()
        procs.kill(c.workers[1])
        wait_for(lambda: status(c.addr)["recoveries"] == 1, 60, what="the recovery")
        assert probe.digest() == before
        _, replays = replays_of_the_recovery(procs.log(c.controller))
        assert 1 <= replays <= 40, replays  # not the 71 launches of the whole chain
        probe.ask("pipe 5")
    finally:
        probe.close()


def test_without_snapshots_the_whole_chain_is_replayed(procs, tmp_path):
    """The control: the same chain with snapshots of launch outputs off replays every launch."""
    c = cluster_with_standby(procs, tmp_path, "--snapshot-every", "0", "--snapshot-interval", "0")
    probe = Probe(c.addr, tmp_path)
    try:
        probe.run(53)
        assert status(c.addr)["snapshots"] == 0
        before = probe.digest()
        procs.kill(c.workers[1])
        wait_for(lambda: status(c.addr)["recoveries"] == 1, 60, what="the recovery")
        assert probe.digest() == before
        _, replays = replays_of_the_recovery(procs.log(c.controller))
        assert replays == 53, replays
    finally:
        probe.close()


def test_the_launch_log_and_kept_arrays_stay_bounded_over_a_long_loop(procs, tmp_path):
    """400 launches with a round every 25: the log keeps at most the launches since the last
    confirmed snapshot (plus one round in flight), and the deleted links of the chain kept for
    replays are freed behind each snapshot. Without snapshots (second cluster) all 400 stay."""
    n = 1 << 16  # 256 KiB per array
    c = cluster_with_standby(procs, tmp_path, "--snapshot-every", "25", "--snapshot-interval", "0")
    probe = Probe(c.addr, tmp_path, n)
    try:
        base = memory_used(c.addr)
        peak_log = 0
        for _ in range(16):
            probe.run(25)
            peak_log = max(peak_log, status(c.addr)["launch_log"])
        s = snapshots_settled(c.addr, 10)
        assert peak_log <= 60, peak_log
        assert s["launch_log"] <= 60 and s["launch_log_dropped"] >= 340, s
        # heartbeats report memory every 200 ms: the kept links are a few, not 400 (100 MiB)
        wait_for(lambda: memory_used(c.addr) - base < 80 * 4 * n, 20, what="kept arrays freed")
        after = probe.digest()
        assert len(after) == 16
    finally:
        probe.close()


def test_no_snapshots_keeps_the_whole_chain_in_the_log(procs, tmp_path):
    c = cluster_with_standby(procs, tmp_path, "--no-snapshots")
    probe = Probe(c.addr, tmp_path)
    try:
        probe.run(120)
        s = status(c.addr)
        assert s["snapshots"] == 0 and s["launch_log"] == 120, s
    finally:
        probe.close()


def test_loom_up_passes_its_snapshot_flags_on(tmp_path, monkeypatch):
    """`loom up --standby 1 --snapshot-every 10 --snapshot-interval 0`: its controller takes a
    round every 10 launches of the chain (at the defaults, 100 launches or 10 s, 35 launches take
    none)."""
    for k in ("LOOM_CONTROLLER", "LOOM_TOKEN"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("LOOM_STATE_DIR", str(tmp_path / "state"))  # the probe finds the cluster's token there
    run_loom("up", "--detach", "--proxy-port", "0", "--standby", "1", "--snapshot-every", "10",
             "--snapshot-interval", "0", timeout=120, check=True)
    probe = None
    try:
        addr = (tmp_path / "state" / "controller.addr").read_text().strip()
        probe = Probe(addr, tmp_path)
        probe.run(35)
        s = snapshots_settled(addr, 3)
        assert s["launch_log"] <= 20, s
    finally:
        if probe:
            probe.close()
        run_loom("down", timeout=60)
