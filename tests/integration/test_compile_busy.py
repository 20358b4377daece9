"""Compiling is heavy work and never runs on an event loop: while a large generated program (about
25 MB of StableHLO text, seconds of parsing, analysis and executor setup at the controller and then
at each worker) compiles, the controller keeps answering, the workers keep heartbeating (with a
1 s heartbeat timeout, a loop blocked for longer would get its worker declared lost), and another
session's launches keep completing. The large program then runs with the right result."""
import json
import subprocess
import time

import numpy as np

from conftest import LOOM_BIN, Cluster, run_loom

N_OPS = 400_000

SMALL = """module @small {
  func.func public @main(%a: tensor<4xf32>) -> tensor<4xf32> {
    %c = stablehlo.constant dense<2.0> : tensor<4xf32>
    %0 = stablehlo.multiply %a, %c : tensor<4xf32>
    return %0 : tensor<4xf32>
  }
}
"""


def write_big(path, n):
    """n chained adds of 1.0 to a replicated input, on 2 replicas (one device on each worker)."""
    with open(path, "w") as f:
        f.write("module @big attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 2 : i32} {\n"
                "  func.func public @main(%a: tensor<4xf32>) -> tensor<4xf32> {\n"
                "    %c = stablehlo.constant dense<1.0> : tensor<4xf32>\n"
                "    %v0 = stablehlo.add %a, %c : tensor<4xf32>\n")
        f.writelines(f"    %v{i} = stablehlo.add %v{i - 1}, %c : tensor<4xf32>\n" for i in range(1, n))
        f.write(f"    return %v{n - 1} : tensor<4xf32>\n  }}\n}}\n")


def test_launches_and_heartbeats_continue_while_a_large_program_compiles(procs, tmp_path):
    c = Cluster(procs, tmp_path)
    c.start_controller("--heartbeat-interval", "100", "--heartbeat-timeout", "1000")
    c.start_worker(2)
    c.start_worker(2)
    c.wait_devices(4)
    big = tmp_path / "big.mlir"
    write_big(big, N_OPS)
    assert big.stat().st_size > 20 << 20
    (tmp_path / "small.mlir").write_text(SMALL)
    x = np.arange(4, dtype=np.float32)
    np.save(tmp_path / "x.npy", x)
    out_big, out_small = tmp_path / "big_out", tmp_path / "small_out"

    t0 = time.monotonic()
    a = subprocess.Popen([LOOM_BIN, "run", str(big), "--input", f"0={tmp_path / 'x.npy'}", "--devices", "0,2",
                          "--output-dir", str(out_big), "--controller", c.addr, "--timeout", "240"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    small_done, worst_status = [], 0.0
    try:
        while a.poll() is None:
            # the other session: a whole compile + put + launch + get of a small program on device 1
            r = run_loom("run", str(tmp_path / "small.mlir"), "--input", f"0={tmp_path / 'x.npy'}", "--devices", "1",
                         "--output-dir", str(out_small), "--controller", c.addr, timeout=60, check=True)
            assert np.array_equal(np.load(out_small / "result_0.npy"), x * 2)
            if a.poll() is None:
                small_done.append(time.monotonic() - t0)
            # the controller answers at once, and has heard every worker within the timeout
            ts = time.monotonic()
            s = json.loads(run_loom("status", "--json", "--controller", c.addr, timeout=30, check=True).stdout)
            worst_status = max(worst_status, time.monotonic() - ts)
            assert all(w["alive"] for w in s["workers"]), s["workers"]
            assert max(w["since_heartbeat_ms"] for w in s["workers"]) < 1000, s["workers"]
        stdout, stderr = a.communicate(timeout=10)
    finally:
        if a.poll() is None:
            a.kill()
            a.wait()
    elapsed = time.monotonic() - t0
    assert a.returncode == 0, stderr
    assert np.array_equal(np.load(out_big / "result_0.npy"), np.stack([x + N_OPS] * 2))  # per replica
    print(f"large program: {elapsed:.1f} s; {len(small_done)} small launches completed meanwhile "
          f"(from {small_done[0]:.1f} s to {small_done[-1]:.1f} s); slowest status {worst_status * 1000:.0f} ms")
    assert elapsed > 2.0  # it really took seconds: the checks above ran while it compiled
    assert len(small_done) >= 3
    log = procs.log(c.controller)
    assert "lost" not in log, log[-2000:]


def test_program_over_the_payload_limit_is_refused_not_dropped(procs, tmp_path):
    """A program larger than the controller takes (--max-payload) is refused by the client with
    the reason before it is sent, instead of the controller dropping the session."""
    c = Cluster(procs, tmp_path)
    c.start_controller("--max-payload", "1M")
    c.start_worker(2)
    c.wait_devices(2)
    big = tmp_path / "big.mlir"
    write_big(big, 40_000)
    assert big.stat().st_size > 1 << 20
    r = run_loom("run", str(big), "--devices", "0,1", "--controller", c.addr)
    assert r.returncode != 0 and "--max-payload" in r.stderr, r.stderr
    assert "dropped" not in procs.log(c.controller)
