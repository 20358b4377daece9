"""Hierarchical dispatch on real `loom worker` processes (docs/scale.md "Hierarchical dispatch"):
a controller with --relay-min-workers 2 --relay-group 2 sends each launch to one relay per pair of
workers, which forwards the RUNs over the members' data ports and combines their RUN_DONEs.
Launches and collectives give the right numbers that way; a relay killed in the middle of a
launch that would never end fails it at once with an error naming the relay and its group, its
group's other member and the other group stop (no device is left busy), and the cluster's live
workers keep running launches through relays."""
import signal
import subprocess
import time

import numpy as np

from conftest import LOOM_BIN, Cluster, devices, wait_for
from dist import PROGRAMS, loom_run


def relay_cluster(procs, tmp_path, n, devices_per_worker=1):
    c = Cluster(procs, tmp_path)
    c.start_controller("--relay-min-workers", "2", "--relay-group", "2")
    for i in range(n):  # one at a time: worker i holds devices i * devices_per_worker ...
        c.start_worker(devices_per_worker)
        c.wait_devices((i + 1) * devices_per_worker)
    return c


def test_relayed_launches_and_collectives(procs, tmp_path):
    c = relay_cluster(procs, tmp_path, 4)
    rng = np.random.default_rng(16)
    t = rng.integers(-2**31, 2**31, (4, 5), dtype=np.int64).astype(np.int32)
    a = rng.integers(-2**31, 2**31, (4, 100000), dtype=np.int64).astype(np.int32)
    f = rng.standard_normal((4, 100000)).astype(np.float32)
    for _ in range(3):  # all_reduce over 4 workers, each launch through 2 relays
        r, res = loom_run(c.addr, PROGRAMS / "allreduce_4.mlir", inputs=[t, a, f], tmp=tmp_path)
        assert r.returncode == 0, r.stderr
        np.testing.assert_array_equal(res[0], np.broadcast_to(t.sum(axis=0, dtype=np.int64).astype(np.int32), (4, 5)))
        np.testing.assert_array_equal(res[1], np.broadcast_to(a.sum(axis=0, dtype=np.int64).astype(np.int32),
                                                              (4, 100000)))
        np.testing.assert_allclose(res[2], np.broadcast_to(f.astype(np.float64).sum(axis=0), (4, 100000)),
                                   rtol=1e-5, atol=1e-4)
        np.testing.assert_array_equal(res[3], np.broadcast_to(a.max(axis=0), (4, 100000)))
    x = np.arange(8, dtype=np.int32)
    r, res = loom_run(c.addr, PROGRAMS / "add_one_4.mlir", inputs=[x], tmp=tmp_path)
    assert r.returncode == 0, r.stderr
    np.testing.assert_array_equal(res[0], x + 1)
    log = procs.log(c.controller)
    assert "go through 2 relays, one per group of up to 2 workers" in log, log[-3000:]


def test_relay_killed_mid_launch(procs, tmp_path):
    c = relay_cluster(procs, tmp_path, 5)
    pid_of = {d["id"]: d["pid"] for d in devices(c.addr)["devices"]}
    wid_of = {d["id"]: d["worker_id"] for d in devices(c.addr)["devices"]}
    # never ends unless aborted: processes 0-3 on workers of devices 0-3, relayed by the workers of
    # devices 0 (group 0-1) and 2 (group 2-3)
    b = subprocess.Popen([LOOM_BIN, "run", str(PROGRAMS / "forever_local_4.mlir"), "--devices", "0-3",
                          "--controller", c.addr], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         stdin=subprocess.DEVNULL)
    try:
        time.sleep(2.0)
        assert b.poll() is None, b.communicate()
        relay = next(w for w in c.workers if w.pid == pid_of[2])
        t0 = time.monotonic()
        procs.kill(relay)
        out, err = b.communicate(timeout=60)
        elapsed = time.monotonic() - t0
    finally:
        if b.poll() is None:
            b.kill()
            b.wait()
    assert b.returncode != 0
    assert f"worker {wid_of[2]} (" in err and "the relay for workers" in err and "was lost during the launch" in err, err
    print(f"the launch failed {elapsed * 1000:.0f} ms after the relay was killed: {err.strip()}")
    assert elapsed < 10, f"the launch took {elapsed:.1f} s to fail"

    # the other devices were released by the abort (through the live relay, and through the dead
    # relay's closed connection to its other member): a launch over them runs at once, relayed
    c.wait_devices(5, healthy=4)
    x = np.arange(8, dtype=np.int32)
    r, res = loom_run(c.addr, PROGRAMS / "add_one_4.mlir", "--devices", "0,1,3,4", inputs=[x], tmp=tmp_path,
                      timeout=60)
    assert r.returncode == 0, r.stderr
    np.testing.assert_array_equal(res[0], x + 1)
    # the lost worker's device is refused with the reason
    r, _ = loom_run(c.addr, PROGRAMS / "add_one_4.mlir", "--devices", "0-3", inputs=[x], tmp=tmp_path, timeout=60)
    assert r.returncode != 0 and "unavailable" in r.stderr, r.stderr
    # the member of the dead relay's group logged why its launch stopped
    member = next(w for w in c.workers if w.pid == pid_of[3])
    wait_for(lambda: "is gone" in procs.log(member), 10,
             what="the orphaned member to stop its launch")


BIG = """module @big attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["d"=4]>
  func.func public @main() -> tensor<4x524288xf32> {
    %0 = sdy.manual_computation() in_shardings=[] out_shardings=[<@mesh, [{"d"}, {}]>] manual_axes={"d"} () {
      %c = stablehlo.constant dense<1.0> : tensor<1x524288xf32>
      sdy.return %c : tensor<1x524288xf32>
    } : () -> tensor<4x524288xf32>
    return %0 : tensor<4x524288xf32>
  }
}
"""


def test_member_failure_and_loss_through_relay(procs, tmp_path):
    """A member (not a relay) that fails or dies: the error names it, as with direct dispatch."""
    c = Cluster(procs, tmp_path)
    c.start_controller("--relay-min-workers", "2", "--relay-group", "2")
    for i in range(5):  # worker of device 3: a member of the second group, with 1 MiB per device
        c.start_worker(1, memory="1MiB" if i == 3 else None)
        c.wait_devices(i + 1)
    d = devices(c.addr)["devices"]
    pid_of, wid_of = {x["id"]: x["pid"] for x in d}, {x["id"]: x["worker_id"] for x in d}
    big = tmp_path / "big.mlir"
    big.write_text(BIG)  # 2 MiB per device: too much for device 3 only
    r, _ = loom_run(c.addr, big, "--devices", "0-3", tmp=tmp_path, timeout=60)
    assert r.returncode != 0 and f"worker {wid_of[3]}" in r.stderr and "out of device memory" in r.stderr, r.stderr

    b = subprocess.Popen([LOOM_BIN, "run", str(PROGRAMS / "forever_local_4.mlir"), "--devices", "0-3",
                          "--controller", c.addr], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         stdin=subprocess.DEVNULL)
    try:
        time.sleep(2.0)
        assert b.poll() is None, b.communicate()
        t0 = time.monotonic()
        procs.kill(next(w for w in c.workers if w.pid == pid_of[1]))  # the first group's member
        _, err = b.communicate(timeout=60)
        elapsed = time.monotonic() - t0
    finally:
        if b.poll() is None:
            b.kill()
            b.wait()
    assert b.returncode != 0 and f"worker {wid_of[1]} (" in err and "was lost during the launch" in err, err
    assert elapsed < 10, f"the launch took {elapsed:.1f} s to fail"
    c.wait_devices(5, healthy=4)
    x = np.arange(8, dtype=np.int32)  # the aborted launch released every live device
    r, res = loom_run(c.addr, PROGRAMS / "add_one_4.mlir", "--devices", "0,2,3,4", inputs=[x], tmp=tmp_path,
                      timeout=60)
    assert r.returncode == 0, r.stderr
    np.testing.assert_array_equal(res[0], x + 1)


def test_relay_hello_needs_the_controllers_token(procs, tmp_path):
    """Only a relay the controller named may forward RUNs to a worker's data port."""
    import re
    import wire
    c = relay_cluster(procs, tmp_path, 2, devices_per_worker=2)
    w = c.workers[1]
    data = wait_for(lambda: (re.search(r"data port (\S+)", procs.log(w)) or [None, None])[1], 10, what="the data port")
    # a relay HELLO with a made-up token, claiming to be worker 0: refused, connection closed
    conn = wire.Conn(data)
    conn.send(wire.frame(wire.HELLO, wire.hello(role=wire.ROLE_WORKER) + wire.field_varint(18, 1) +
                         wire.field_bytes(19, b"\x01" * 8), request_id=1))
    code, msg, _ = conn.expect_error()
    assert code == wire.PERMISSION and "relay token is not valid" in msg, msg
    conn.expect_closed()
    # a client connection (no relay) cannot send RUN
    conn = wire.Conn(data)
    conn.send(wire.frame(wire.HELLO, wire.hello(), request_id=1))
    t, _, _, _ = conn.recv_frame()
    assert t == wire.HELLO_REPLY
    conn.send(wire.frame(28, wire.field_varint(1, 7), request_id=2))  # RUN{seq 7}
    code, msg, _ = conn.expect_error()
    assert code == wire.PROTOCOL and "RUN is not a request" in msg, msg
    # the worker still serves launches through its relay
    x = np.arange(8, dtype=np.int32)
    r, res = loom_run(c.addr, PROGRAMS / "add_one_4.mlir", inputs=[x], tmp=tmp_path)
    assert r.returncode == 0, r.stderr
    np.testing.assert_array_equal(res[0], x + 1)
    assert "go through 1 relays" in procs.log(c.controller)


def test_relayed_collectives_hierarchical(procs, tmp_path):
    """Relayed launches of every shard_map collective on 4 workers x 2 devices labelled as 2 hosts,
    with the data plane's hierarchical algorithms forced (all_reduce and all_gather in levels)."""
    import os
    from test_collectives import test_replica_groups_across_workers, test_shard_map_collectives_on_a_2x4_mesh
    c = Cluster(procs, tmp_path)
    c.start_controller("--relay-min-workers", "2", "--relay-group", "2")
    for i in range(4):
        env = dict(os.environ, LOOM_DP_COLL="hier", LOOM_DP_HOST="h%d" % (i // 2))
        c.workers.append(procs.start(["worker", "--controller", c.addr, "--devices", "2"], f"worker{i}", env=env))
        c.wait_devices(2 * (i + 1))
    test_shard_map_collectives_on_a_2x4_mesh(c, tmp_path)
    test_replica_groups_across_workers(c, tmp_path)
    assert "go through 2 relays" in procs.log(c.controller)
