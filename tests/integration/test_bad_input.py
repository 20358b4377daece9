"""Hostile and broken peers against a real controller: garbage, frames over the size caps, wrong
protocol version, anything before HELLO, undecodable metadata, truncated frames and disconnects,
stalled (slowloris) frames, silent connections, bad registrations, floods of connections.
Each one gets a clear ERROR or is dropped with a logged reason, and afterwards a well-behaved
client still gets the full device list; the controller stays up and stops cleanly (no leaks)."""
import os
import select
import socket
import threading
import time

import pytest

from conftest import devices, tight_cluster, wait_for
import wire


def assert_still_serving(c):
    d = devices(c.addr)
    assert len(d["devices"]) == 8 and all(x["healthy"] for x in d["devices"])
    assert c.controller.poll() is None


@pytest.fixture
def tight(procs, tmp_path):
    """2 workers x 4 devices behind a controller with short deadlines."""
    return tight_cluster(procs, tmp_path, 4)


def test_garbage(tight, procs):
    conn = wire.Conn(tight.addr)
    conn.send(os.urandom(16) + b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    code, msg, _ = conn.expect_error()
    assert code == wire.PROTOCOL and "magic" in msg
    conn.expect_closed()
    assert_still_serving(tight)
    assert "bad frame magic" in procs.log(tight.controller)


def test_oversized_frames(tight):
    for kwargs, words in [({"meta_len": 1 << 30}, "metadata of 1073741824 bytes exceeds"),
                          ({"payload_len": 1 << 50}, "payload of 1125899906842624 bytes exceeds"),
                          ({"meta_len": 0xFFFFFFFF}, "exceeds the limit")]:
        conn = wire.Conn(tight.addr)
        conn.send(wire.frame(wire.HELLO, **kwargs))  # only the header: nothing may be allocated for it
        code, msg, _ = conn.expect_error()
        assert code == wire.PROTOCOL and words in msg, msg
        conn.expect_closed()
    # also after a good handshake
    conn = wire.Conn(tight.addr)
    conn.handshake()
    conn.send(wire.frame(wire.PING, meta_len=64 << 20))
    code, msg, _ = conn.expect_error()
    assert code == wire.PROTOCOL and "exceeds the limit" in msg
    conn.expect_closed()
    assert_still_serving(tight)


def test_wrong_version(tight, procs):
    conn = wire.Conn(tight.addr)
    conn.send(wire.frame(wire.HELLO, wire.hello(version=99), request_id=5))
    code, msg, rid = conn.expect_error()
    assert code == wire.VERSION_MISMATCH and rid == 5
    assert "protocol version 99 is not supported" in msg and "speaks version 1" in msg
    conn.expect_closed()
    assert_still_serving(tight)
    assert "protocol version 99" in procs.log(tight.controller)


def test_reserved_bits_and_type_zero(tight):
    for data in [wire.frame(wire.HELLO, wire.hello(), flags=1), wire.frame(wire.HELLO, wire.hello(), reserved=7),
                 wire.frame(0, b"")]:
        conn = wire.Conn(tight.addr)
        conn.send(data)
        code, _, _ = conn.expect_error()
        assert code == wire.PROTOCOL
        conn.expect_closed()
    assert_still_serving(tight)


def test_request_before_hello(tight):
    conn = wire.Conn(tight.addr)
    conn.send(wire.frame(wire.LIST_DEVICES, request_id=1))
    code, msg, _ = conn.expect_error()
    assert code == wire.PROTOCOL and "expected HELLO first" in msg
    conn.expect_closed()
    assert_still_serving(tight)


def test_undecodable_metadata(tight):
    conn = wire.Conn(tight.addr)
    conn.send(wire.frame(wire.HELLO, b"\xff" * 11 + b"\x01", request_id=1))
    code, msg, _ = conn.expect_error()
    assert code == wire.PROTOCOL and "does not decode" in msg
    conn.expect_closed()
    conn = wire.Conn(tight.addr)
    conn.send(wire.frame(wire.HELLO, wire.field_bytes(4, b"x" * 100)[:20], request_id=1))  # truncated field
    code, _, _ = conn.expect_error()
    assert code == wire.PROTOCOL
    conn.expect_closed()
    assert_still_serving(tight)


def test_truncated_then_disconnect(tight, procs):
    good = wire.frame(wire.HELLO, wire.hello(), request_id=1)
    for cut in [1, 7, 31, 32, len(good) - 1]:
        conn = wire.Conn(tight.addr)
        conn.send(good[:cut])
        conn.close()
    conn = wire.Conn(tight.addr)
    conn.handshake()
    conn.send(wire.frame(wire.LIST_DEVICES, request_id=2)[:40])  # half a request after HELLO
    conn.close()
    assert_still_serving(tight)
    wait_for(lambda: "disconnected in the middle of a frame" in procs.log(tight.controller), 5,
             what="the controller to log the truncated frames")


def test_slowloris_is_dropped_and_others_are_served_meanwhile(tight, procs):
    conn = wire.Conn(tight.addr)
    conn.send(wire.frame(wire.HELLO, wire.hello(), request_id=1)[:10])  # and then nothing
    t0 = time.monotonic()
    assert_still_serving(tight)  # served while the stalled frame is pending
    code, msg, _ = conn.expect_error(timeout=10)
    assert code == wire.TIMEOUT and "frame not completed" in msg
    conn.expect_closed()
    assert time.monotonic() - t0 < 5
    # After a good handshake (so the 1.5 s handshake deadline no longer applies), a byte every
    # 200 ms never completes a frame in time either: only the 500 ms frame timer can end this.
    conn = wire.Conn(tight.addr)
    conn.handshake()
    assert conn.buf == b""
    data = wire.frame(wire.PING, wire.field_varint(1, 1234), request_id=2)
    t0 = time.monotonic()
    sent = 0
    while sent < len(data):
        conn.send(data[sent:sent + 1])
        sent += 1
        readable, _, _ = select.select([conn.sock], [], [], 0.2)
        if readable:
            break
    assert sent < len(data), "the whole PING dripped through: the frame timer never fired"
    code, msg, _ = conn.expect_error(timeout=10)
    assert code == wire.TIMEOUT and "frame not completed within 500 ms" in msg, (code, msg)
    conn.expect_closed()
    assert time.monotonic() - t0 < 1.5
    assert_still_serving(tight)


def test_silent_connection_is_dropped(tight, procs):
    conn = wire.Conn(tight.addr)
    code, msg, _ = conn.expect_error(timeout=10)
    assert code == wire.TIMEOUT and "no handshake within 1500 ms" in msg
    conn.expect_closed()
    assert_still_serving(tight)


def test_unknown_type_and_wrong_role_keep_the_connection(tight):
    conn = wire.Conn(tight.addr)
    conn.handshake()
    conn.send(wire.frame(77, b"\x08\x01", request_id=9))
    code, msg, rid = conn.expect_error()
    assert code == wire.UNSUPPORTED and rid == 9 and "unknown message type 77" in msg
    conn.send(wire.frame(wire.REGISTER_WORKER, wire.register_worker(specs=[wire.device_spec(0)]), request_id=10))
    code, msg, rid = conn.expect_error()
    assert code == wire.PERMISSION and rid == 10
    conn.send(wire.frame(wire.HELLO_REPLY, b"", request_id=11))  # a reply is not a request
    code, _, rid = conn.expect_error()
    assert code == wire.PROTOCOL and rid == 11
    conn.send(wire.frame(wire.PING, wire.field_varint(1, 1234), request_id=12))
    t, rid, meta, _ = conn.recv_frame()
    assert (t, rid) == (wire.PONG, 12) and wire.parse_fields(meta)[1] == [1234]
    conn.send(wire.frame(wire.LIST_DEVICES, request_id=13))
    t, rid, meta, _ = conn.recv_frame()
    assert (t, rid) == (wire.LIST_DEVICES_REPLY, 13) and len(wire.parse_fields(meta)[1]) == 8
    conn.close()
    assert_still_serving(tight)


def test_bad_worker_registrations(tight):
    bad = [
        wire.register_worker(specs=[]),                                          # no devices
        wire.register_worker(specs=[wire.device_spec(0, kind="tpu")]),           # unsupported kind
        wire.register_worker(specs=[wire.device_spec(0), wire.device_spec(0)]),  # duplicate index
        wire.register_worker(specs=[wire.device_spec(5)]),                       # index out of range
        wire.register_worker(specs=[wire.device_spec(0, capacity=0)]),           # no memory
        wire.register_worker(host="bad host", specs=[wire.device_spec(0)]),      # unprintable name
        wire.register_worker(specs=[wire.device_spec(i) for i in range(1025)]),  # too many
    ]
    for meta in bad:
        conn = wire.Conn(tight.addr)
        conn.send(wire.frame(wire.HELLO, wire.hello(role=wire.ROLE_WORKER), request_id=1))
        assert conn.recv_frame()[0] == wire.HELLO_REPLY
        conn.send(wire.frame(wire.REGISTER_WORKER, meta, request_id=2))
        code, msg, rid = conn.expect_error()
        assert code in (wire.INVALID_ARGUMENT, wire.UNSUPPORTED) and rid == 2 and "cannot register" in msg, msg
        conn.expect_closed()
    d = devices(tight.addr)
    assert len(d["devices"]) == 8  # nothing half-registered
    # a heartbeat before registering is refused
    conn = wire.Conn(tight.addr)
    conn.send(wire.frame(wire.HELLO, wire.hello(role=wire.ROLE_WORKER), request_id=1))
    conn.recv_frame()
    conn.send(wire.frame(wire.HEARTBEAT, wire.field_varint(1, 1)))
    code, _, _ = conn.expect_error()
    assert code == wire.PERMISSION
    conn.close()
    assert_still_serving(tight)


def test_raw_worker_registers_and_loses_its_devices(tight):
    """A worker written from the protocol description alone registers, then disconnects."""
    conn = wire.Conn(tight.addr)
    conn.send(wire.frame(wire.HELLO, wire.hello(role=wire.ROLE_WORKER), request_id=1))
    assert conn.recv_frame()[0] == wire.HELLO_REPLY
    specs = [wire.device_spec(1, capacity=3 << 20), wire.device_spec(0, capacity=5 << 20)]  # any order
    conn.send(wire.frame(wire.REGISTER_WORKER, wire.register_worker(host="rawhost", pid=777, slice_name="raw",
                                                                    specs=specs), request_id=2))
    t, rid, meta, _ = conn.recv_frame()
    assert (t, rid) == (wire.REGISTER_WORKER_REPLY, 2)
    f = wire.parse_fields(meta)
    assert f[1] == [2]  # third worker
    ids = list(f[2][0])  # packed repeated uint32 (small values: one byte each)
    assert ids == [8, 9]
    d = devices(tight.addr)["devices"]
    assert [(x["host"], x["pid"], x["slice"], x["memory_capacity"]) for x in d[8:]] == [
        ("rawhost", 777, "raw", 5 << 20), ("rawhost", 777, "raw", 3 << 20)]
    conn.close()
    wait_for(lambda: not any(x["healthy"] for x in devices(tight.addr)["devices"][8:]), 2,
             what="the raw worker's devices to turn unhealthy")
    assert all(x["healthy"] for x in devices(tight.addr)["devices"][:8])


def test_many_bad_peers_at_once(tight):
    def attack(i):
        try:
            conn = wire.Conn(tight.addr)
            kind = i % 4
            if kind == 0:
                conn.send(os.urandom(200))
            elif kind == 1:
                conn.send(wire.frame(wire.HELLO, meta_len=1 << 31))
            elif kind == 2:
                conn.send(wire.frame(wire.HELLO, wire.hello(), request_id=1)[:20])
            else:
                conn.send(wire.frame(wire.HELLO, wire.hello(version=2), request_id=1))
            time.sleep(0.05)
            conn.close()
        except OSError:
            pass

    threads = [threading.Thread(target=attack, args=(i,)) for i in range(200)]
    for t in threads:
        t.start()
    assert_still_serving(tight)  # while they are at it
    for t in threads:
        t.join(30)
    assert_still_serving(tight)
    s = devices(tight.addr)
    assert s["totals"]["devices"] == 8


def test_client_that_never_reads_is_not_a_problem(tight):
    """A client pipelining requests without reading replies: the controller keeps serving others."""
    conn = wire.Conn(tight.addr)
    conn.handshake()
    req = b"".join(wire.frame(wire.LIST_DEVICES, request_id=i) for i in range(2, 2002))
    conn.sock.setblocking(False)
    try:
        conn.sock.send(req)
    except BlockingIOError:
        pass
    assert_still_serving(tight)
    conn.close()
    assert_still_serving(tight)


def test_bad_heartbeat_drops_the_worker(tight):
    conn = wire.Conn(tight.addr)
    conn.send(wire.frame(wire.HELLO, wire.hello(role=wire.ROLE_WORKER), request_id=1))
    assert conn.recv_frame()[0] == wire.HELLO_REPLY
    conn.send(wire.frame(wire.REGISTER_WORKER, wire.register_worker(specs=[wire.device_spec(0), wire.device_spec(1)]),
                         request_id=2))
    assert conn.recv_frame()[0] == wire.REGISTER_WORKER_REPLY
    good = wire.field_varint(1, 1) + wire.field_bytes(2, wire.field_varint(1, 1) + wire.field_varint(2, 4096))
    conn.send(wire.frame(wire.HEARTBEAT, good))
    wait_for(lambda: devices(tight.addr)["devices"][9]["memory_used"] == 4096, 5, what="the heartbeat's figures")
    bad = wire.field_varint(1, 2) + wire.field_bytes(2, wire.field_varint(1, 5))  # no device 5 on this worker
    conn.send(wire.frame(wire.HEARTBEAT, bad))
    code, msg, _ = conn.expect_error()
    assert code == wire.INVALID_ARGUMENT and "bad heartbeat" in msg
    conn.expect_closed()
    d = devices(tight.addr)["devices"]
    assert [x["healthy"] for x in d[8:]] == [False, False]
    assert d[8]["health_reason"].startswith("bad heartbeat")
    assert all(x["healthy"] for x in d[:8])


def test_trace_control_over_the_wire(tight):
    """TRACE_CONTROL (80): only for clients; stop without a recording and a second start are
    refused with reasons; a stop answers TRACE_RESULT (81) with the JSON as payload, or refuses a
    JSON over the max_payload the client named; the connection keeps serving throughout."""
    TRACE_CONTROL, TRACE_RESULT, ACK = 80, 81, 13
    NOT_FOUND, BUSY = -2, -19
    w = wire.Conn(tight.addr)  # a worker may not
    w.send(wire.frame(wire.HELLO, wire.hello(role=wire.ROLE_WORKER), request_id=1))
    assert w.recv_frame()[0] == wire.HELLO_REPLY
    w.send(wire.frame(TRACE_CONTROL, b"", request_id=2))
    code, msg, rid = w.expect_error()
    assert code == wire.PERMISSION and rid == 2 and "only for clients" in msg
    w.close()
    conn = wire.Conn(tight.addr)
    conn.handshake()
    stop = wire.field_varint(1, 1)
    conn.send(wire.frame(TRACE_CONTROL, stop, request_id=3))
    code, msg, rid = conn.expect_error()
    assert code == NOT_FOUND and rid == 3 and "no trace is recording" in msg
    conn.send(wire.frame(TRACE_CONTROL, b"", request_id=4))
    assert conn.recv_frame()[:2] == (ACK, 4)
    conn.send(wire.frame(TRACE_CONTROL, b"", request_id=5))
    code, msg, rid = conn.expect_error()
    assert code == BUSY and rid == 5 and "already recording" in msg
    conn.send(wire.frame(TRACE_CONTROL, stop + wire.field_varint(2, 10), request_id=6))  # 10 bytes: too small
    code, msg, rid = conn.expect_error()
    assert code == wire.UNSUPPORTED and rid == 6 and "more than this client takes" in msg, msg
    conn.send(wire.frame(TRACE_CONTROL, b"", request_id=7))
    assert conn.recv_frame()[:2] == (ACK, 7)
    conn.send(wire.frame(TRACE_CONTROL, stop, request_id=8))
    t, rid, meta, payload = conn.recv_frame()
    assert (t, rid) == (TRACE_RESULT, 8)
    import json
    trace = json.loads(payload)
    assert trace["metadata"]["launches"] == 0 and "traceEvents" in trace
    conn.send(wire.frame(TRACE_CONTROL, b"", request_id=9))  # a client that goes away mid-recording
    assert conn.recv_frame()[:2] == (ACK, 9)
    conn.send(wire.frame(TRACE_CONTROL, stop, request_id=10))
    conn.close()  # before its TRACE_RESULT: the controller drops it
    assert_still_serving(tight)


def test_ids_from_2_63_are_the_controllers(tight):
    """Array and output ids from 2^63 on name a recovery's scratch arrays (docs/elastic.md
    "Replay"): a client may not create them; the connection stays and smaller ids work."""
    conn = wire.Conn(tight.addr)
    conn.handshake()
    conn.send(wire.frame(17, wire.field_varint(1, 1 << 63) + wire.field_varint(2, 12) + wire.field_packed(3, [4]),
                         request_id=2))  # ARRAY_CREATE
    code, msg, _ = conn.expect_error()
    assert code == wire.INVALID_ARGUMENT and "reserved for the controller" in msg, msg
    conn.send(wire.frame(17, wire.field_varint(1, (1 << 63) - 1) + wire.field_varint(2, 12) + wire.field_packed(3, [4]),
                         request_id=3))
    assert conn.recv_frame()[0] == 18  # ARRAY_PLACEMENT
    conn.close()
    assert_still_serving(tight)
