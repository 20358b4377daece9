"""Local transfers (docs/protocol.md "Local transfers"): a client on the workers' host has each
worker copy shard bytes once, straight between the client's memory and the device buffer
(process_vm_readv / process_vm_writev), instead of streaming them through a socket. Round trips
through each path (LOOM_TRANSFER=local / tcp / auto) with the data checked, the workers'
counters (`loom status --json`) proving which path carried the bytes, the fallbacks (a worker
without a local socket, a kernel or sandbox that refuses, at the handshake or at a copy), and
hostile ranges, lengths and handshakes on a worker's local socket."""
import ctypes
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

import wire
from conftest import Cluster, run_loom, wait_for
from dist import EXAMPLES, PROBE, loom_run, memory_used, probe

MIB = 1 << 20
ACK, ARRAY_CREATE, ARRAY_PLACEMENT, ARRAY_LOCATE = 13, 17, 18, 19
SHARD_PUT, SHARD_GET, SHARD_GET_REPLY, SHARD_PUT_LOCAL, SHARD_GET_LOCAL = 33, 34, 35, 37, 38
F32 = 12
COUNTERS = ["local_puts", "local_put_bytes", "local_gets", "local_get_bytes", "stream_puts", "stream_put_bytes",
            "stream_gets", "stream_get_bytes", "local_refused"]


def transfers(addr):
    """Each worker's transfer counters, as of its last heartbeat."""
    r = run_loom("status", "--json", "--controller", addr, check=True)
    import json
    return [w["transfers"] for w in json.loads(r.stdout)["workers"]]


def total(ts, key):
    return sum(t[key] for t in ts)


def settled(addr, before, check, what, timeout=20):
    """Waits until the counters (which come with heartbeats) moved from `before` as check(delta
    per counter) wants and stopped moving; returns them."""
    deadline, prev = time.monotonic() + timeout, None
    while True:
        now = transfers(addr)
        delta = {k: total(now, k) - total(before, k) for k in COUNTERS}
        if now == prev and check(delta):
            return now
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}: {delta}")
        prev = now
        time.sleep(0.7)


def run_probe(mode_env, *args, timeout=240):
    env = dict(os.environ, LOOM_TRANSFER=mode_env)
    return subprocess.run([str(PROBE), *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, env=env)


def probe_ok(mode_env, *args, timeout=240):
    r = run_probe(mode_env, *args, timeout=timeout)
    assert r.returncode == 0, f"dist_probe {args} with LOOM_TRANSFER={mode_env} failed:\n{r.stdout}\n{r.stderr}"
    return r.stdout


def test_round_trips_through_each_path(cluster):
    """The same shardings and regions round trip exactly through the local path and through TCP;
    the counters say which path carried the bytes; auto takes the local path on one host."""
    addr = cluster.addr
    t0 = transfers(addr)
    for m in ("shardings", "regions"):
        out = probe_ok("local", m, addr)
        assert "ok " in out and "failed" not in out, out
    t1 = settled(addr, t0, lambda d: d["local_put_bytes"] > 40 * MIB and d["local_get_bytes"] > 80 * MIB,
                 "local transfers in the counters")
    d = {k: total(t1, k) - total(t0, k) for k in COUNTERS}
    assert d["stream_puts"] == d["stream_gets"] == d["local_refused"] == 0, d
    for m in ("shardings", "regions"):
        probe_ok("tcp", m, addr)
    t2 = settled(addr, t1, lambda d: d["stream_put_bytes"] > 40 * MIB and d["stream_get_bytes"] > 80 * MIB,
                 "stream transfers in the counters")
    d2 = {k: total(t2, k) - total(t1, k) for k in COUNTERS}
    assert d2["local_puts"] == d2["local_gets"] == 0, d2
    # the same bytes both ways: every round trip of both runs was checked element by element
    assert d2["stream_put_bytes"] == d["local_put_bytes"] and d2["stream_get_bytes"] == d["local_get_bytes"], (d, d2)
    probe_ok("auto", "regions", addr)
    settled(addr, t2, lambda d: d["local_put_bytes"] > 40 * MIB and d["stream_puts"] == 0, "auto taking the local path")
    # the CLI and every other client of the library go the same way
    r, _ = loom_run(addr, EXAMPLES / "distributed_sum.mlir")
    assert r.stdout == "[8 8 8 8 8 8 8 8]\n", r.stderr


def test_256_mib_round_trip_local(cluster):
    addr = cluster.addr
    t0 = transfers(addr)
    out = probe_ok("local", "big", addr, 256)
    assert "ok big 256 MiB" in out, out
    print(out)
    settled(addr, t0, lambda d: d["local_put_bytes"] == 256 * MIB and d["local_get_bytes"] == 256 * MIB
            and d["local_puts"] == 8 and d["local_gets"] == 8 and d["stream_put_bytes"] == 0, "256 MiB each way")


def test_worker_without_local_socket(procs, tmp_path):
    """A worker that offers no local socket (LOOM_TRANSFER=tcp on it, or an older one): auto
    clients stream; a client that insists on local transfers gets a clear error."""
    c = Cluster(procs, tmp_path)
    c.start_controller()
    for i in range(2):
        c.workers.append(procs.start(["worker", "--controller", c.addr, "--devices", "4"], f"worker{i}",
                                     env=dict(os.environ, LOOM_TRANSFER="tcp")))
    c.wait_devices(8)
    t0 = transfers(c.addr)
    probe_ok("auto", "regions", c.addr)
    settled(c.addr, t0, lambda d: d["stream_put_bytes"] > 40 * MIB and d["local_puts"] == 0, "stream transfers")
    r = run_probe("local", "big", c.addr, 1)
    assert r.returncode != 0
    assert "LOOM_TRANSFER=local, but local transfers are not possible: the worker offers no local socket" in r.stderr, \
        r.stderr
    assert "local transfers disabled (LOOM_TRANSFER=tcp)" in procs.log(c.workers[0])


def start_denied_worker(procs, c, syscall, name):
    """A worker whose process_vm_readv or process_vm_writev fails with EPERM (a seccomp filter)."""
    p = procs.start(["worker", "--controller", c.addr, "--devices", "4"], name, prefix=(PROBE, "deny", syscall))
    c.workers.append(p)
    return p


def test_kernel_refusals_fall_back(procs, tmp_path):
    """Worker 0 cannot read other processes at all (refused at the handshake: its probe read
    fails); worker 1 can read but not write them (refused at the first get: the client does that
    get again over the stream, and streams to worker 1 from then on). LOOM_TRANSFER=auto gets
    every byte right; LOOM_TRANSFER=local reports the kernel's refusal."""
    c = Cluster(procs, tmp_path)
    c.start_controller()
    w0 = start_denied_worker(procs, c, "process_vm_readv", "worker0")
    c.wait_devices(4)
    start_denied_worker(procs, c, "process_vm_writev", "worker1")
    c.wait_devices(8)
    t0 = transfers(c.addr)
    probe_ok("auto", "regions", c.addr)
    probe_ok("auto", "shardings", c.addr)
    t1 = settled(c.addr, t0, lambda d: d["local_refused"] >= 1 and d["stream_get_bytes"] > 40 * MIB,
                 "the refusals in the counters")
    w0c, w1c = (t1[i] for i in range(2))
    assert w0c["local_puts"] == w0c["local_gets"] == 0 and w0c["stream_puts"] > 0, w0c
    assert w1c["local_puts"] >= 1 and w1c["local_gets"] == 0 and w1c["local_refused"] >= 1, w1c
    assert w1c["stream_gets"] > 0, w1c
    assert re.search(r"local transfers refused to local pid \d+: process_vm_readv: Operation not permitted",
                     procs.log(w0)), procs.log(w0)
    r = run_probe("local", "big", c.addr, 8)
    assert r.returncode != 0
    assert "process_vm_readv: Operation not permitted" in r.stderr or "process_vm_writev" in r.stderr, r.stderr
    assert "seccomp" in r.stderr, r.stderr


# ---- the wire, on a worker's local socket ----


class Session:
    """A client session on the controller, over the wire: arrays and their transfer tokens."""

    def __init__(self, addr):
        self.conn = wire.Conn(addr)
        self.id = self.conn.handshake()[3][0]
        self.rid = 10

    def request(self, t, meta):
        self.rid += 1
        self.conn.send(wire.frame(t, meta, request_id=self.rid))
        f = self.conn.recv_frame()
        assert f is not None and f[1] == self.rid, f
        return f

    def placement(self, t, meta):
        typ, _, m, _ = self.request(t, meta)
        assert typ == ARRAY_PLACEMENT, (typ, wire.parse_fields(m))
        shard = wire.parse_fields(wire.parse_fields(m)[2][0])
        return {"address": shard[3][0].decode(), "token": shard[7][0], "min_cseq": shard.get(8, [0])[0],
                "local_index": shard.get(4, [0])[0]}

    def create(self, array, n, device=0):
        """An f32 array of n elements on one device; its put location and token."""
        sharding = wire.field_packed(2, [device])
        meta = (wire.field_varint(1, array) + wire.field_varint(2, F32) + wire.field_packed(3, [n])
                + wire.field_bytes(4, sharding))
        return self.placement(ARRAY_CREATE, meta)

    def locate(self, array):
        return self.placement(ARRAY_LOCATE, wire.field_varint(1, array))


def local_hello(probe_addr=None, probe=None):
    extra = b""
    if probe_addr is not None:
        extra = wire.field_varint(9, probe_addr) + wire.field_bytes(10, probe)
    return extra


def open_local(sock_name, buf=None):
    """A connection to the local socket whose HELLO carries a probe in this process's memory."""
    probe = os.urandom(16)
    keep = ctypes.create_string_buffer(probe, 16) if buf is None else buf
    lc = wire.Conn(sock_name)
    reply = lc.handshake(local_hello(ctypes.addressof(keep), probe))
    return lc, reply, keep


def put_local_meta(session, array, n, token, ranges, local_index=0):
    target = wire.field_varint(1, array) + wire.field_varint(2, local_index) + wire.field_bytes(3, token)
    words = [x for r in ranges for x in r]
    return (wire.field_varint(1, session) + wire.field_varint(2, F32) + wire.field_packed(3, [n])
            + wire.field_bytes(4, target) + (wire.field_packed(5, words) if words else b""))


def get_local_meta(session, array, loc, ranges):
    words = [x for r in ranges for x in r]
    return (wire.field_varint(1, session) + wire.field_varint(2, array) + wire.field_varint(3, loc["local_index"])
            + wire.field_bytes(4, loc["token"]) + wire.field_varint(5, loc["min_cseq"])
            + (wire.field_packed(6, words) if words else b""))


def expect_error(conn, rid, code, *words):
    got, msg, r = conn.expect_error()
    assert r == rid and got == code, (r, got, msg)
    for w in words:
        assert w in msg, msg
    return msg


def test_hostile_local_requests(cluster):
    """Every malformed or lying request on the local socket gets a clear error; the worker writes
    only its own buffer for that shard and only the client's declared ranges, and keeps serving."""
    s = Session(cluster.addr)
    loc = s.create(1, 1024)
    tcp = wire.Conn(loc["address"])
    reply = tcp.handshake(wire.field_varint(8, 1))  # local_offer
    sock = reply[6][0].decode()
    assert sock.startswith("@loom-data-") and reply[7][0], reply
    # local requests on the TCP data port: never enabled there
    tcp.send(wire.frame(SHARD_PUT_LOCAL, put_local_meta(s.id, 1, 1024, loc["token"], [(4096, 4096)]), request_id=2))
    expect_error(tcp, 2, wire.PERMISSION, "not enabled")

    # handshakes that do not prove access
    lc = wire.Conn(sock)
    r = lc.handshake(local_hello(16, os.urandom(16)))  # an address that is not mapped
    assert 9 not in r and b"Bad address" in r[10][0], r
    lc.close()
    other = ctypes.create_string_buffer(os.urandom(16), 16)
    lc = wire.Conn(sock)
    r = lc.handshake(local_hello(ctypes.addressof(other), os.urandom(16)))  # bytes that are not there
    assert 9 not in r and b"does not match" in r[10][0], r
    lc.send(wire.frame(SHARD_PUT_LOCAL, put_local_meta(s.id, 1, 1024, loc["token"], [(4096, 4096)]), request_id=3))
    expect_error(lc, 3, wire.PERMISSION, "not enabled")
    lc.close()

    data = (ctypes.c_float * 1024)(*[i * 0.5 for i in range(1024)])
    base = ctypes.addressof(data)
    # a payload on a local put: refused as its header arrives (nothing of it is read), and the
    # connection closes
    lc, r, _probe = open_local(sock)
    lc.send(wire.frame(SHARD_PUT_LOCAL, put_local_meta(s.id, 1, 1024, loc["token"], [(base, 4096)]),
                       payload=b"\0" * 4096, request_id=99))
    code, msg, _ = lc.expect_error()
    assert code == wire.PROTOCOL and "does not take a payload" in msg, msg
    lc.expect_closed()
    lc.close()

    lc, r, _probe = open_local(sock)
    assert r[9][0] == 1 and 10 not in r, r
    rid = 100
    bad = [
        ([(base, 4092)], "ranges hold 4092 bytes, the shard's shape needs 4096"),
        ([(base, 2048), (base + 2048, 2049)], "ranges hold 4097 bytes"),
        ([(base, 0), (base, 4096)], "is not a valid range"),
        ([(2**64 - 2048, 4096)], "is not a valid range"),
    ]
    for ranges, words in bad:
        rid += 1
        lc.send(wire.frame(SHARD_PUT_LOCAL, put_local_meta(s.id, 1, 1024, loc["token"], ranges), request_id=rid))
        expect_error(lc, rid, wire.INVALID_ARGUMENT, words)
    rid += 1  # an odd number of words
    meta = put_local_meta(s.id, 1, 1024, loc["token"], []) + wire.field_packed(5, [base, 4096, 7])
    lc.send(wire.frame(SHARD_PUT_LOCAL, meta, request_id=rid))
    expect_error(lc, rid, wire.INVALID_ARGUMENT, "pairs")
    rid += 1  # too many ranges
    lc.send(wire.frame(SHARD_PUT_LOCAL, put_local_meta(s.id, 1, 1024, loc["token"], [(base, 1)] * 65537),
                       request_id=rid))
    expect_error(lc, rid, wire.INVALID_ARGUMENT, "65537 ranges (at most 65536)")
    rid += 1  # memory the client does not have
    lc.send(wire.frame(SHARD_PUT_LOCAL, put_local_meta(s.id, 1, 1024, loc["token"], [(4096, 4096)]), request_id=rid))
    expect_error(lc, rid, wire.INVALID_ARGUMENT, "not readable")
    rid += 1  # a range that runs off the end of what is mapped: a readable page, then none
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    page = os.sysconf("SC_PAGE_SIZE")
    two = libc.mmap(None, 2 * page, 3, 0x22, -1, 0)  # PROT_READ|WRITE, MAP_PRIVATE|ANONYMOUS
    assert two not in (None, ctypes.c_void_p(-1).value)
    assert libc.mprotect(ctypes.c_void_p(two + page), page, 0) == 0
    lc.send(wire.frame(SHARD_PUT_LOCAL, put_local_meta(s.id, 1, 1024, loc["token"], [(two + page - 2048, 4096)]),
                       request_id=rid))
    expect_error(lc, rid, wire.INVALID_ARGUMENT, "not readable")
    rid += 1  # a forged token
    lc.send(wire.frame(SHARD_PUT_LOCAL, put_local_meta(s.id, 1, 1024, b"x" * 8, [(base, 4096)]), request_id=rid))
    expect_error(lc, rid, wire.PERMISSION, "token")
    rid += 1  # a token for another shape
    lc.send(wire.frame(SHARD_PUT_LOCAL, put_local_meta(s.id, 1, 512, loc["token"], [(base, 2048)]), request_id=rid))
    expect_error(lc, rid, wire.PERMISSION, "token")
    rid += 1  # ranges on a streamed put
    lc.send(wire.frame(SHARD_PUT, put_local_meta(s.id, 1, 1024, loc["token"], [(base, 4096)]), request_id=rid))
    expect_error(lc, rid, wire.PROTOCOL, "SHARD_PUT carries no ranges")

    # a good one, split into three ranges out of order in memory: the worker reads them in order
    rid += 1
    split = [(base + 3000, 1096), (base, 1000), (base + 1000, 2000)]
    lc.send(wire.frame(SHARD_PUT_LOCAL, put_local_meta(s.id, 1, 1024, loc["token"], split), request_id=rid))
    t, r_, _, _ = lc.recv_frame()
    assert (t, r_) == (ACK, rid)
    raw = bytes(data)
    want = raw[3000:4096] + raw[0:1000] + raw[1000:3000]
    g = s.locate(1)
    tcp.send(wire.frame(SHARD_GET, get_local_meta(s.id, 1, g, []), request_id=3))
    t, r_, meta, payload = tcp.recv_frame()
    assert (t, r_) == (SHARD_GET_REPLY, 3) and payload == want
    # gets into this process's memory
    out = ctypes.create_string_buffer(b"\xee" * 8192, 8192)
    ob = ctypes.addressof(out)
    for ranges, code, words in [
        ([(ob, 4095)], wire.INVALID_ARGUMENT, "ranges hold 4095 bytes, the shard of array 1"),
        ([(8192, 4096)], wire.INVALID_ARGUMENT, "not writable"),
        ([(two + page - 1024, 4096)], wire.INVALID_ARGUMENT, "not writable"),
        ([(2**63, 2**63), (ob, 4096)], wire.INVALID_ARGUMENT, "not a valid range"),
    ]:
        rid += 1
        lc.send(wire.frame(SHARD_GET_LOCAL, get_local_meta(s.id, 1, g, ranges), request_id=rid))
        expect_error(lc, rid, code, words)
    assert out.raw == b"\xee" * 8192  # a refused get wrote nothing
    rid += 1
    lc.send(wire.frame(SHARD_GET_LOCAL, get_local_meta(s.id, 1, g, [(ob + 4096, 2048), (ob, 2048)]), request_id=rid))
    t, r_, meta, payload = lc.recv_frame()
    f = wire.parse_fields(meta)
    assert (t, r_, payload) == (SHARD_GET_REPLY, rid, b"") and f[3] == [4096] and f[1] == [F32], f
    assert out.raw[4096:6144] == want[:2048] and out.raw[:2048] == want[2048:] and out.raw[2048:4096] == b"\xee" * 2048
    assert out.raw[6144:] == b"\xee" * 2048
    rid += 1  # a get token for another array
    lc.send(wire.frame(SHARD_GET_LOCAL, get_local_meta(s.id, 2, g, [(ob, 4096)]), request_id=rid))
    expect_error(lc, rid, wire.PERMISSION, "token")

    # the connection, the worker and the cluster still serve
    lc.send(wire.frame(wire.PING, wire.field_varint(1, 9), request_id=rid + 1))
    assert lc.recv_frame()[:2] == (wire.PONG, rid + 1)

    # a client that gives up on a big get half-closes; the worker stops copying before its next
    # system call, closes only once no copy runs, and nothing is written after that
    n = 16 << 20  # floats: 64 MiB
    big = s.create(3, n)
    src = ctypes.create_string_buffer(4 * n)
    rid += 2
    lc.send(wire.frame(SHARD_PUT_LOCAL, put_local_meta(s.id, 3, n, big["token"], [(ctypes.addressof(src), 4 * n)]),
                       request_id=rid))
    assert lc.recv_frame(timeout=60)[:2] == (ACK, rid)
    dst = ctypes.create_string_buffer(4 * n)
    rid += 1
    lc.send(wire.frame(SHARD_GET_LOCAL, get_local_meta(s.id, 3, s.locate(3), [(ctypes.addressof(dst), 4 * n)]),
                       request_id=rid))
    lc.sock.shutdown(socket.SHUT_WR)
    t0 = time.monotonic()
    while lc.recv_frame(timeout=30) is not None:  # the reply, or an ERROR (the copy was stopped), then EOF
        pass
    assert time.monotonic() - t0 < 10
    snap = dst.raw
    time.sleep(0.3)
    assert dst.raw == snap
    lc.close()
    tcp.close()
    s.conn.close()
    r, _ = loom_run(cluster.addr, EXAMPLES / "distributed_sum.mlir")
    assert r.stdout == "[8 8 8 8 8 8 8 8]\n", r.stderr
    probe_ok("local", "big", cluster.addr, 4)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a client as another user")
def test_another_user_is_refused(cluster):
    s = Session(cluster.addr)
    loc = s.create(1, 16)
    tcp = wire.Conn(loc["address"])
    sock = tcp.handshake(wire.field_varint(8, 1))[6][0].decode()
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: another user, talking to the worker's local socket
        try:
            os.setuid(65534)
            probe = os.urandom(16)
            buf = ctypes.create_string_buffer(probe, 16)
            c = wire.Conn(sock)
            r = c.handshake(wire.field_varint(9, ctypes.addressof(buf)) + wire.field_bytes(10, probe))
            os.write(wfd, f"{r.get(9)} {r[10][0].decode()}".encode())
        except BaseException as e:  # noqa: BLE001 (reported by the parent)
            os.write(wfd, f"child failed: {e!r}".encode())
        os._exit(0)
    os.close(wfd)
    with os.fdopen(rfd) as f:
        out = f.read()
    os.waitpid(pid, 0)
    tcp.close()
    s.conn.close()
    assert out.startswith("None the client runs as uid 65534, the worker as uid 0"), out


def local_sockets():
    with open("/proc/net/unix") as f:
        return {line.split()[-1] for line in f if "@loom-data-" in line}


def test_nothing_left_behind(procs, tmp_path):
    """The local socket lives in the abstract namespace: no file, gone with its worker, even one
    killed with SIGKILL; local transfers create no shared memory at all."""
    shm = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    c = Cluster(procs, tmp_path)
    c.start_controller()
    w = c.start_worker(8)
    c.wait_devices(8)
    wait_for(lambda: any(f"@loom-data-{w.pid}-" in n for n in local_sockets()), 10, what="the local socket")
    probe_ok("local", "big", c.addr, 16)
    if os.path.isdir("/dev/shm"):
        assert set(os.listdir("/dev/shm")) <= shm
    procs.kill(w)
    w.wait(timeout=10)
    assert not any(f"@loom-data-{w.pid}-" in n for n in local_sockets())


def test_clients_killed_mid_transfer(cluster):
    """Clients that die while workers copy to and from their memory: the workers notice (the copy
    fails or is dropped), free the shards with the session, and go on serving."""
    base = memory_used(cluster.addr)
    for delay in (0.05, 0.2, 0.4, 0.8):
        p = subprocess.Popen([str(PROBE), "big", cluster.addr, "256"], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, env=dict(os.environ, LOOM_TRANSFER="local"))
        time.sleep(delay)
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=30)
    wait_for(lambda: memory_used(cluster.addr) == base, 30, what="the killed sessions' memory to be freed")
    probe_ok("local", "shardings", cluster.addr)
    for w in cluster.workers:
        assert w.poll() is None
