"""Compiling and launching on a real cluster (2 workers x 4 devices): the examples through
`loom run`, every SPMD form against numpy, 1,000 chained launches with one wait, compile-time
mismatches, bad inputs, and requests naming handles that do not exist (raw protocol)."""
import json

import numpy as np
import pytest

import wire
from dist import EXAMPLES, PROGRAMS, loom_run, probe


def test_distributed_sum_example(cluster):
    r, _ = loom_run(cluster.addr, EXAMPLES / "distributed_sum.mlir")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "[8 8 8 8 8 8 8 8]\n"
    r, _ = loom_run(cluster.addr, EXAMPLES / "distributed_sum.mlir", "--json")
    j = json.loads(r.stdout)
    assert j["form"] == "partitions" and j["devices"] == list(range(8)) and j["cached"] is True
    assert j["results"][0]["data"] == [8] * 8 and j["results"][0]["shape"] == [8]


def test_shard_map_on_a_2x4_mesh(cluster, tmp_path):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((8, 16)).astype(np.float32)
    b = rng.standard_normal(16).astype(np.float32)
    r, res = loom_run(cluster.addr, PROGRAMS / "smap_2x4.mlir", inputs=[a, b], tmp=tmp_path)
    assert r.returncode == 0, r.stderr
    np.testing.assert_array_equal(res[0], a * b[None, :] + 1)
    # the same on other devices, in another order
    r, res = loom_run(cluster.addr, PROGRAMS / "smap_2x4.mlir", "--devices", "7,6,5,4,3,2,1,0", inputs=[a, b],
                      tmp=tmp_path)
    assert r.returncode == 0, r.stderr
    np.testing.assert_array_equal(res[0], a * b[None, :] + 1)


def test_replicas(cluster, tmp_path):
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    r, res = loom_run(cluster.addr, PROGRAMS / "replicas_4.mlir", "--devices", "2-5", inputs=[x], tmp=tmp_path)
    assert r.returncode == 0, r.stderr
    np.testing.assert_array_equal(res[0], x * x + np.arange(4, dtype=np.float32)[:, None])
    # one per-replica value for every replica
    v = np.array([1, 2, 3], dtype=np.float32)
    r, res = loom_run(cluster.addr, PROGRAMS / "replicas_4.mlir", inputs=[v], tmp=tmp_path)
    assert r.returncode == 0, r.stderr
    np.testing.assert_array_equal(res[0], v[None, :] ** 2 + np.arange(4, dtype=np.float32)[:, None])


def test_single_device_program(cluster, tmp_path):
    rng = np.random.default_rng(2)
    a = rng.standard_normal((4, 6)).astype(np.float32)
    b = rng.standard_normal((6, 3)).astype(np.float32)
    for dev in ["0", "6"]:
        r, res = loom_run(cluster.addr, PROGRAMS / "single_matmul.mlir", "--devices", dev, inputs=[a, b], tmp=tmp_path)
        assert r.returncode == 0, r.stderr
        np.testing.assert_allclose(res[0], np.tanh(a @ b) + 1, rtol=1e-5, atol=1e-6)


def test_1000_chained_launches_then_one_wait(cluster):
    out = probe("chain", cluster.addr, PROGRAMS / "add_one_8.mlir", 1000, timeout=240)
    assert "ok chain 1000 launches" in out, out
    print(out)


def test_bad_inputs_get_errors(cluster):
    out = probe("errors", cluster.addr, PROGRAMS / "add_one_8.mlir")
    for what in ["deleted input refused", "wrong shape: input 0", "failure propagates", "wrong sharding: input 0",
                 "still works", "parse error:", "device count mismatch", "gspmd sharding refused"]:
        assert f"ok {what}" in out, out


def test_compile_time_mismatches(cluster, tmp_path):
    r, _ = loom_run(cluster.addr, PROGRAMS / "add_one_8.mlir", "--devices", "0-5", inputs=[np.zeros(16, np.int32)],
                    tmp=tmp_path)
    assert r.returncode == 1 and "runs 8 processes (1 replica x 8 partitions) but 6 devices were given" in r.stderr
    # a global program with sharding annotations is partitioned (tests/integration/test_partition.py)
    r, res = loom_run(cluster.addr, PROGRAMS / "auto_8.mlir", inputs=[np.arange(16, dtype=np.float32)], tmp=tmp_path)
    assert r.returncode == 0, r.stderr
    np.testing.assert_array_equal(res[0], np.arange(16, dtype=np.float32) * 2)
    bad = tmp_path / "nodivide.mlir"
    bad.write_text((PROGRAMS / "add_one_8.mlir").read_text().replace("tensor<16xi32>", "tensor<12xi32>"))
    r, _ = loom_run(cluster.addr, bad, inputs=[np.zeros(12, np.int32)], tmp=tmp_path)
    assert r.returncode == 1 and "does not split into 8 equal shards" in r.stderr, r.stderr
    r, _ = loom_run(cluster.addr, PROGRAMS / "add_one_8.mlir", inputs=[np.zeros(8, np.int32)], tmp=tmp_path)
    assert r.returncode == 1 and "argument 0 is i32[16]" in r.stderr, r.stderr
    big = tmp_path / "big.mlir"
    big.write_text((PROGRAMS / "add_one_8.mlir").read_text().replace('"d"=8', '"d"=16')
                   .replace("num_partitions = 8", "num_partitions = 16").replace("tensor<16xi32>", "tensor<32xi32>"))
    r, _ = loom_run(cluster.addr, big, inputs=[np.zeros(32, np.int32)], tmp=tmp_path)
    assert r.returncode == 1 and "needs 16 devices" in r.stderr and "the cluster has 8" in r.stderr, r.stderr


def test_unknown_handles_over_the_wire(cluster):
    LAUNCH, ARRAY_LOCATE, ARRAY_DELETE, ACK, CANCEL_LAUNCH = 24, 19, 20, 13, 36
    c = wire.Conn(cluster.addr)
    try:
        c.handshake()
        # a launch of an executable that does not exist, with inputs that do not exist
        meta = wire.field_varint(1, 77) + wire.field_varint(2, 5) + wire.field_varint(3, 9)
        c.send(wire.frame(LAUNCH, meta, request_id=2))
        code, msg, rid = c.expect_error()
        assert rid == 2 and code == -2 and "executable 77 does not exist" in msg, msg
        # locating an array that does not exist
        c.send(wire.frame(ARRAY_LOCATE, wire.field_varint(1, 123), request_id=3))
        code, msg, rid = c.expect_error()
        assert rid == 3 and code == -2 and "array 123 does not exist" in msg, msg
        # deleting it is not an error
        c.send(wire.frame(ARRAY_DELETE, wire.field_varint(1, 123), request_id=4))
        t, rid, _, _ = c.recv_frame()
        assert (t, rid) == (ACK, 4)
        # cancelling the refused launch, or one never sent: nothing to do, ACK (and nothing else)
        for launch_rid, rid in ((2, 6), (999, 7)):
            c.send(wire.frame(CANCEL_LAUNCH, wire.field_varint(1, launch_rid), request_id=rid))
            t, got, _, _ = c.recv_frame()
            assert (t, got) == (ACK, rid)
        # a worker's message from a client is refused, the client stays
        c.send(wire.frame(29, wire.field_varint(1, 1), request_id=5))  # RUN_DONE
        code, msg, rid = c.expect_error()
        assert rid == 5 and code == wire.PERMISSION
    finally:
        c.close()
    r, _ = loom_run(cluster.addr, EXAMPLES / "distributed_sum.mlir")
    assert r.stdout == "[8 8 8 8 8 8 8 8]\n"


def test_replicated_work_outside_shard_map(cluster, tmp_path):
    rng = np.random.default_rng(4)
    w = rng.standard_normal(4).astype(np.float32)
    x = rng.integers(-3, 4, (16, 4)).astype(np.float32)
    r, res = loom_run(cluster.addr, PROGRAMS / "outside_8.mlir", inputs=[w, x], tmp=tmp_path)
    assert r.returncode == 0, r.stderr
    np.testing.assert_allclose(res[0], w - 0.5 * (x.sum(axis=0) * w), rtol=1e-6)
    np.testing.assert_allclose(res[1], np.tanh(w).sum(), rtol=1e-5)


def test_cancel_running_and_queued_launches(cluster):
    """loom_future_cancel: a launch looping forever (with an all_reduce per iteration) on all 8
    devices stops, a launch queued behind it on devices of both workers is dropped, consumers of
    the cancelled output fail with LOOM_CANCELLED, and the devices run the next launch."""
    out = probe("cancel", cluster.addr, PROGRAMS / "forever_8.mlir", PROGRAMS / "forever_local_4.mlir",
                PROGRAMS / "add_one_8.mlir", timeout=180)
    for what in ["running and queued", "queued launch cancelled: launch", "running launch cancelled in",
                 "consumer issued before the cancel:", "cancelling again: CANCELLED", "consumer issued after the cancel:",
                 "next launch on the same devices done", "cancelling a finished launch: OK",
                 "cancelling a refused launch: SHAPE_MISMATCH", "cancelled from another thread:", "devices free again"]:
        assert f"ok {what}" in out, out
    print(out)
