"""Schema-aware random frames against live daemons: a hostile client, a hostile worker and a
hostile client of a worker's data port send messages built from src/proto/wire.proto with random
field values (huge ids and dimensions, unknown dtypes, deep repeats, wrong wire types), some of
them then mangled byte by byte, under every message type. Afterwards the controller and the
workers still serve a real program, and they stop cleanly on SIGTERM (the procs fixture checks
the exit status and, in a sanitizer build, the sanitizer's reports). The cluster has
authentication on (a cluster secret and client tokens): the hostile peers authenticate first,
so the fuzzing reaches past the handshake.

The seed is fixed, so a failure replays. LOOM_WIRE_FUZZ_FRAMES (default 1500 per kind of peer)
and LOOM_WIRE_FUZZ_SEED make longer or different runs, e.g. against the sanitizer build:
    LOOM_BUILD_DIR=build-asan LOOM_WIRE_FUZZ_FRAMES=50000 \\
        python3 -m pytest tests/integration/test_wire_fuzz.py
"""
import os
import random
import re
import select
import socket
import struct
from functools import partial

import pytest

import wire
from conftest import SOURCE_DIR, Auth, devices, run_loom, tight_cluster

FRAMES = int(os.environ.get("LOOM_WIRE_FUZZ_FRAMES", "1500"))
SEED = int(os.environ.get("LOOM_WIRE_FUZZ_SEED", "20261202"))

CLIENT_TYPES = [7, 9, 11, 17, 19, 20, 21, 23, 24, 36]
WORKER_TYPES = [6, 11, 14, 29]
DATA_TYPES = [33, 34, 37, 38]
# message types whose metadata message is not named after the type
MESSAGE_OF = {1: "ErrorReply", 37: "ShardPut", 38: "ShardGet"}


def load_schema():
    """{message name: [(label, type, field number)]} and {type number: message name}."""
    text = re.sub(r"//[^\n]*", "", (SOURCE_DIR / "src" / "proto" / "wire.proto").read_text())
    messages = {}
    for name, body in re.findall(r"message\s+(\w+)\s*\{([^}]*)\}", text):
        messages[name] = [(lab.strip(), typ, int(num))
                          for lab, typ, num in re.findall(r"(repeated\s+)?(\w+)\s+\w+\s*=\s*(\d+)\s*;", body)]
    enum = re.search(r"enum\s+MsgType\s*\{([^}]*)\}", text).group(1)
    by_type = {}
    for name, num in re.findall(r"MSG_(\w+)\s*=\s*(\d+)", enum):
        camel = "".join(w.capitalize() for w in name.split("_"))
        n = int(num)
        by_type[n] = MESSAGE_OF.get(n, camel if camel in messages else None)
    return messages, by_type


INTERESTING = [0, 1, 2, 3, 7, 8, 12, 255, 256, 4095, 4096, 65535, 65536, 2**31 - 1, 2**31, 2**32 - 1, 2**32,
               2**53, 2**63 - 1, 2**63, 2**64 - 1]


class Gen:
    def __init__(self, seed, messages):
        self.r = random.Random(seed)
        self.messages = messages

    def number(self):
        r = self.r.random()
        if r < 0.45:
            return self.r.randrange(0, 10)
        if r < 0.85:
            return self.r.choice(INTERESTING)
        return self.r.getrandbits(64)

    def blob(self, limit=64):
        n = self.r.choice([0, 1, 8, 16, self.r.randrange(0, limit)])
        if self.r.random() < 0.3:
            return self.r.choice([b"127.0.0.1:1", b"@loom", b"f32", b"cpu", b"\xff" * n, b"%s%n" * 4])
        return bytes(self.r.getrandbits(8) for _ in range(n))

    def scalar(self, typ, num):
        if typ == "sint32":
            v = self.r.choice([0, -1, 1, -(2**31), 2**31 - 1, self.r.randrange(-50, 50)])
            return wire.field_varint(num, ((v << 1) ^ (v >> 31)) & 0xFFFFFFFF)  # zigzag
        if typ in ("string", "bytes"):
            return wire.field_bytes(num, self.blob())
        return wire.field_varint(num, self.number())  # uint32/uint64/bool/enums

    def value(self, typ, num, depth):
        if typ in self.messages:
            return wire.field_bytes(num, self.message(typ, depth + 1))
        return self.scalar(typ, num)

    def message(self, name, depth=0):
        out = b""
        for label, typ, num in self.messages.get(name, []):
            if self.r.random() < 0.25:
                continue  # absent
            if label:
                count = self.r.choice([0, 1, 2, 3, 8, self.r.randrange(0, 40)])
                if depth > 2:
                    count = min(count, 2)
                if typ in self.messages or typ in ("string", "bytes") or self.r.random() < 0.3:
                    for _ in range(count):
                        out += self.value(typ, num, depth)
                else:  # packed scalars, as proto3 writes them
                    out += wire.field_packed(num, [self.number() for _ in range(count)])
            else:
                out += self.value(typ, num, depth)
        if self.r.random() < 0.1:  # an unknown field, with any wire type
            out += wire.varint((self.r.randrange(16, 300) << 3) | self.r.choice([0, 1, 2, 5])) + b"\x05" * 8
        return out

    def mangle(self, data):
        data = bytearray(data)
        for _ in range(self.r.randrange(1, 4)):
            op = self.r.randrange(4)
            if op == 0 and data:
                data[self.r.randrange(len(data))] = self.r.getrandbits(8)
            elif op == 1 and data:
                del data[self.r.randrange(len(data)):]
            elif op == 2:
                data[self.r.randrange(len(data) + 1):0] = bytes([self.r.choice([0x80, 0xFF, 0x0A, 0x12, 0x07])])
            else:
                i = self.r.randrange(len(data) + 1)
                data[i:i] = data[:self.r.randrange(len(data) + 1)]  # a repeated piece
        return bytes(data)

    def frame(self, types, by_type, allow_payload=False):
        t = self.r.choice(types) if self.r.random() < 0.85 else self.r.randrange(0, 45)
        name = by_type.get(t)
        meta = self.message(name) if name else self.blob()
        if self.r.random() < 0.2:
            meta = self.mangle(meta)
        payload = b""
        if allow_payload and t in (21, 33) and self.r.random() < 0.7:
            if t == 21:
                payload = self.r.choice([b"", b"module {}", b"func.func @main() {", self.blob(256),
                                         b"module { func.func public @main(%a: tensor<4xf32>) -> tensor<4xf32> "
                                         b"{ return %a : tensor<4xf32> } }"])
            else:
                payload = bytes(self.r.choice([0, 4, 16, 32, 100]))
        rid = self.r.choice([0, 1, self.r.randrange(2, 1000), 2**64 - 1])
        return wire.frame(t, meta, payload, request_id=rid)


def drain(sock):
    """Reads whatever the daemon sent; False once it closed the connection."""
    while True:
        r, _, _ = select.select([sock], [], [], 0)
        if not r:
            return True
        try:
            if not sock.recv(1 << 16):
                return False
        except (ConnectionError, OSError):
            return False


class Peer:
    """One hostile peer: reconnects (and handshakes again) whenever the daemon drops it."""

    def __init__(self, addr, hello):
        self.addr, self.hello = addr, hello
        self.conn = None
        self.drops = 0

    def send(self, data):
        for _ in range(3):
            if self.conn is None:
                self.conn = wire.Conn(self.addr)
                self.hello(self.conn)
            try:
                self.conn.send(data)
                if not drain(self.conn.sock):
                    raise ConnectionError("closed")
                return
            except (ConnectionError, OSError, socket.timeout):
                self.drops += 1
                self.close()

    def close(self):
        if self.conn is not None:
            try:
                self.conn.close()
            except OSError:
                pass
            self.conn = None


def client_hello(conn):
    conn.send(wire.frame(wire.HELLO, wire.hello(), request_id=1))
    t, _, _, _ = conn.recv_frame()
    assert t == wire.HELLO_REPLY


def worker_hello(conn, secret):
    nonce = os.urandom(32)
    conn.send(wire.frame(wire.HELLO, wire.hello(role=wire.ROLE_WORKER, nonce=nonce), request_id=1))
    t, _, meta, _ = conn.recv_frame()
    assert t == wire.HELLO_REPLY
    challenge = wire.parse_fields(meta)[11][0]
    reg = wire.register_worker(host="fuzzhost", pid=os.getpid(), slice_name="fuzz",
                               specs=[wire.device_spec(0, capacity=1 << 20)],
                               proof=wire.worker_proof(secret, nonce, challenge))
    conn.send(wire.frame(wire.REGISTER_WORKER, reg, request_id=2))
    f = conn.recv_frame()
    assert f and f[0] == wire.REGISTER_WORKER_REPLY, f  # authenticated: the fuzzing starts past the handshake


def data_address(addr):
    """A worker's data port, from the placement of a real array."""
    c = wire.Conn(addr)
    client_hello(c)
    create = wire.field_varint(1, 77) + wire.field_varint(2, 12) + wire.field_packed(3, [4])
    c.send(wire.frame(17, create, request_id=5))
    t, _, meta, _ = c.recv_frame()
    assert t == 18, meta
    shard = wire.parse_fields(wire.parse_fields(meta)[2][0])
    c.close()
    return shard[3][0].decode()


@pytest.fixture
def small_cluster(procs, tmp_path, monkeypatch):
    auth = Auth(tmp_path)
    monkeypatch.setenv("LOOM_TOKEN", auth.tokens["alice"])  # every client here presents it
    return tight_cluster(procs, tmp_path, 2, auth)


@pytest.mark.parametrize("kind", ["client", "worker", "data_port"])
def test_random_frames(small_cluster, kind):
    c = small_cluster
    messages, by_type = load_schema()
    assert len(messages) > 40 and by_type[24] == "Launch", "cannot read src/proto/wire.proto"
    g = Gen(SEED * 3 + ["client", "worker", "data_port"].index(kind), messages)
    if kind == "client":
        peers = [Peer(c.addr, client_hello) for _ in range(3)]
        types, payload = CLIENT_TYPES, True
    elif kind == "worker":
        peers = [Peer(c.addr, partial(worker_hello, secret=c.auth.secret))]
        types, payload = WORKER_TYPES, False
    else:
        daddr = data_address(c.addr)
        peers = [Peer(daddr, client_hello) for _ in range(2)]
        types, payload = DATA_TYPES, True
    for i in range(FRAMES):
        g.r.choice(peers).send(g.frame(types, by_type, allow_payload=payload))
        if i % 500 == 499:
            assert c.controller.poll() is None, "the controller died"
            assert all(w.poll() is None for w in c.workers), "a worker died"
    for p in peers:
        p.close()
    print(f"{kind}: {FRAMES} frames, dropped and reconnected {sum(p.drops for p in peers)} times")
    # everyone still serves: the device list, and a real program on every device
    assert c.controller.poll() is None and all(w.poll() is None for w in c.workers)
    d = devices(c.addr)
    assert sum(1 for x in d["devices"] if x["healthy"]) == 4, d
    prog = SOURCE_DIR / "tests" / "integration" / "programs" / "spin_4.mlir"
    r = run_loom("run", str(prog), "--devices", "0-3", "--controller", c.addr, timeout=120)
    assert r.returncode == 0 and r.stdout == "[1000000 1000000 1000000 1000000]\n", r.stderr
