"""Sharded arrays on a real cluster (2 workers x 4 devices): put/get of every kind of sharding,
a 256 MiB round trip over 8 devices, device memory limits, and a session whose client goes away
without cleaning up having its device memory freed by the cluster."""
import re
import signal
import subprocess
import time

from conftest import wait_for
from dist import PROBE, memory_used, probe


def test_every_sharding_round_trips(cluster):
    out = probe("shardings", cluster.addr)
    for what in ["single device 5", "replicated on 8", "tiled dim 0 over 8", "tiled dim 1 over 4",
                 "mesh 2x4 both dims", "mesh 2x4 one dim over two axes", "mesh 2x4 partially replicated",
                 "rank 3 middle dim", "empty array", "scalar", "bad shardings refused"]:
        assert f"ok {what}" in out, out


def test_256_mib_round_trip_over_8_devices(cluster):
    out = probe("big", cluster.addr, 256, timeout=240)
    assert "ok big 256 MiB" in out, out
    print(out)


def test_device_memory_limits(procs, tmp_path):
    from conftest import Cluster
    c = Cluster(procs, tmp_path)
    c.start_controller()
    c.start_worker(2, memory="64M")
    c.wait_devices(2)
    out = probe("oom", c.addr)
    assert "ok too large: cannot create array" in out and "does not fit device 0" in out, out
    assert "ok out of device memory: " in out and "out of device memory" in out.split("ok out of device memory: ")[1]
    assert "ok memory freed" in out


def test_session_cleanup_frees_device_memory(cluster):
    base = memory_used(cluster.addr)
    p = subprocess.Popen([str(PROBE), "hold", cluster.addr, "16"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        # every device now holds 16 MiB more (seen at the next heartbeats)
        wait_for(lambda: all(u >= b + (16 << 20) for u, b in zip(memory_used(cluster.addr), base)), 20,
                 what="the shards to show in the devices' memory use")
        p.send_signal(signal.SIGKILL)  # the client dies without deleting anything
        p.wait(timeout=10)
        wait_for(lambda: memory_used(cluster.addr) == base, 20, what="the session's memory to be freed")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def data_port(cluster, k):
    """Worker k's data port, from its log (the worker writes the line just after the controller
    has it registered, so it may not be there yet)."""
    def find():
        m = re.search(r"data port (\S+)", cluster.procs.log(cluster.workers[k]))
        return m and m.group(1)

    return wait_for(find, 10, what=f"worker {k}'s data port in its log")


def test_worker_data_port_refuses_bad_tokens(cluster):
    import wire
    from dist import EXAMPLES, loom_run
    SHARD_PUT, SHARD_GET, PONG = 33, 34, 12
    port = data_port(cluster, 0)
    c = wire.Conn(port)
    try:
        c.handshake()
        # a get with a made-up token
        get = wire.field_varint(1, 1) + wire.field_varint(2, 5) + wire.field_varint(3, 0) + wire.field_bytes(4, b"x" * 8)
        c.send(wire.frame(SHARD_GET, get, request_id=2))
        code, msg, rid = c.expect_error()
        assert rid == 2 and code == wire.PERMISSION and "token" in msg, msg
        c.send(wire.frame(wire.PING, wire.field_varint(1, 7), request_id=3))  # the connection stays
        t, rid, _, _ = c.recv_frame()
        assert (t, rid) == (PONG, 3)
        # a put with a made-up token: refused before its payload is taken, then the connection closes
        target = wire.field_varint(1, 5) + wire.field_varint(2, 0) + wire.field_bytes(3, b"y" * 8)
        put = (wire.field_varint(1, 1) + wire.field_varint(2, 12) + wire.field_bytes(3, wire.varint(4))
               + wire.field_bytes(4, target))
        c.send(wire.frame(SHARD_PUT, put, payload=b"\0" * 16, request_id=4))
        code, msg, _ = c.expect_error()
        assert code == wire.PERMISSION and "token" in msg, msg
        c.expect_closed()
    finally:
        c.close()
    r, _ = loom_run(cluster.addr, EXAMPLES / "distributed_sum.mlir")
    assert r.stdout == "[8 8 8 8 8 8 8 8]\n"


def test_worker_data_port_refuses_payloads_it_does_not_take(cluster):
    """A payload on any message but SHARD_PUT is refused when its header arrives, before the worker
    reads (and would have to buffer) any of it: a peer announcing 1 TiB gets an error at once."""
    import wire
    from dist import EXAMPLES, loom_run
    SHARD_GET = 34
    port = data_port(cluster, 0)
    for type_ in (SHARD_GET, wire.PING):
        c = wire.Conn(port)
        try:
            c.handshake()
            c.send(wire.frame(type_, wire.field_varint(1, 7), payload=b"\0" * 64, payload_len=1 << 40,
                              request_id=5))
            code, msg, _ = c.expect_error(timeout=5)
            assert code == wire.PROTOCOL and "does not take a payload" in msg, msg
            c.expect_closed(timeout=5)
        finally:
            c.close()
    r, _ = loom_run(cluster.addr, EXAMPLES / "distributed_sum.mlir")
    assert r.stdout == "[8 8 8 8 8 8 8 8]\n"
