"""Loom's wire format written independently in Python (docs/protocol.md), for tests that talk to a
real controller byte by byte: well-formed frames, and every kind of malformed one."""
import hashlib
import hmac
import os
import socket
import struct
import time

MAGIC = 0x4D4F4F4C
HEADER = struct.Struct("<IHHIIQQ")  # magic, type, flags, meta_len, reserved, payload_len, request_id
assert HEADER.size == 32

ERROR, HELLO, HELLO_REPLY, REGISTER_WORKER, REGISTER_WORKER_REPLY, HEARTBEAT = 1, 2, 3, 4, 5, 6
LIST_DEVICES, LIST_DEVICES_REPLY, CLUSTER_STATUS, CLUSTER_STATUS_REPLY, PING, PONG = 7, 8, 9, 10, 11, 12
ROLE_CLIENT, ROLE_WORKER = 1, 2
PROTOCOL_VERSION = 1

# loom_status codes (include/loom/loom_status.h)
INVALID_ARGUMENT, UNSUPPORTED, PROTOCOL, TIMEOUT, VERSION_MISMATCH, PERMISSION = -1, -3, -9, -11, -15, -20


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field_varint(num, value):
    return varint(num << 3) + varint(value)


def field_bytes(num, data):
    if isinstance(data, str):
        data = data.encode()
    return varint((num << 3) | 2) + varint(len(data)) + data


def field_packed(num, values):
    """A packed repeated varint field (repeated uint64 / uint32)."""
    return field_bytes(num, b"".join(varint(v) for v in values))


def unpack_varints(data):
    """The values of a packed repeated varint field."""
    out, i = [], 0
    while i < len(data):
        v, i = _read_varint(data, i)
        out.append(v)
    return out


def hello(version=PROTOCOL_VERSION, role=ROLE_CLIENT, name="wire test", token=None, nonce=None):
    """HELLO's metadata; token: a client token (field 3), else $LOOM_TOKEN for clients (the
    authenticated test clusters set it); nonce: a worker's half of the challenge (field 11)."""
    if token is None and role == ROLE_CLIENT:
        token = os.environ.get("LOOM_TOKEN", "")
    m = field_varint(1, version) + field_varint(2, role) + field_bytes(7, name)
    if token:
        m += field_bytes(3, token)
    if nonce:
        m += field_bytes(11, nonce)
    return m


# Worker authentication (docs/protocol.md "Authentication"): HMAC-SHA256 under the cluster secret.
def auth_mac(secret, label, a, b):
    return hmac.new(secret, label + a + b, hashlib.sha256).digest()


def controller_proof(secret, nonce, challenge):
    return auth_mac(secret, b"loom-controller", nonce, challenge)


def worker_proof(secret, nonce, challenge):
    return auth_mac(secret, b"loom-worker", challenge, nonce)


def transfer_key(secret, nonce, challenge):
    return auth_mac(secret, b"loom-transfer", challenge, nonce)[:16]


def read_secret(path):
    return bytes.fromhex(open(path).read().strip())


def device_spec(index, kind="cpu", capacity=1 << 20):
    return field_varint(1, index) + field_bytes(2, kind) + field_varint(3, capacity)


def register_worker(host="testhost", pid=1, slice_name="s", specs=(), proof=None):
    m = field_bytes(1, host) + field_varint(2, pid) + field_bytes(3, slice_name)
    for s in specs:
        m += field_bytes(4, s)
    if proof:
        m += field_bytes(7, proof)
    return m


def frame(type_, meta=b"", payload=b"", request_id=0, flags=0, reserved=0, meta_len=None, payload_len=None,
          magic=MAGIC):
    h = HEADER.pack(magic, type_, flags, len(meta) if meta_len is None else meta_len, reserved,
                    len(payload) if payload_len is None else payload_len, request_id)
    return h + meta + payload


def parse_fields(meta):
    """Decodes protobuf wire fields into {number: [values]} (varints as ints, others as bytes)."""
    out, i = {}, 0
    while i < len(meta):
        key, i = _read_varint(meta, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _read_varint(meta, i)
        elif wt == 2:
            n, i = _read_varint(meta, i)
            v, i = meta[i:i + n], i + n
        else:
            raise ValueError(f"unexpected wire type {wt}")
        out.setdefault(num, []).append(v)
    return out


def _read_varint(b, i):
    shift = v = 0
    while True:
        c = b[i]
        i += 1
        v |= (c & 0x7F) << shift
        shift += 7
        if not c & 0x80:
            return v, i


def zigzag_decode(n):
    return (n >> 1) ^ -(n & 1)


class Conn:
    """A raw connection to the controller."""

    def __init__(self, addr, timeout=10):
        if addr.startswith("@"):  # a worker's local socket: the abstract Unix-domain name
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(timeout)
            self.sock.connect("\0" + addr[1:])
        else:
            host, port = addr.rsplit(":", 1)
            self.sock = socket.create_connection((host, int(port)), timeout=timeout)
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def send(self, data):
        self.sock.sendall(data)

    def recv_frame(self, timeout=10):
        """Returns (type, request_id, meta, payload), or None when the peer closed the connection."""
        self.sock.settimeout(timeout)
        while True:
            if len(self.buf) >= 32:
                magic, t, flags, ml, res, pl, rid = HEADER.unpack(self.buf[:32])
                assert magic == MAGIC, f"bad magic from the controller: {magic:#x}"
                if len(self.buf) >= 32 + ml + pl:
                    meta = self.buf[32:32 + ml]
                    payload = self.buf[32 + ml:32 + ml + pl]
                    self.buf = self.buf[32 + ml + pl:]
                    return t, rid, meta, payload
            try:
                chunk = self.sock.recv(65536)
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                return None
            self.buf += chunk

    def expect_error(self, timeout=10):
        """Reads one frame that must be ERROR; returns (code, message, request_id)."""
        f = self.recv_frame(timeout)
        assert f is not None, "connection closed without an ERROR frame"
        t, rid, meta, _ = f
        assert t == ERROR, f"expected ERROR, got type {t}"
        fields = parse_fields(meta)
        code = zigzag_decode(fields.get(1, [0])[0])
        msg = fields.get(2, [b""])[0].decode()
        return code, msg, rid

    def expect_closed(self, timeout=10):
        """The controller must close the connection (after any frames it still sends)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                f = self.recv_frame(max(0.1, deadline - time.monotonic()))
            except TimeoutError:
                continue
            if f is None:
                return True
        raise AssertionError("the controller did not close the connection")

    def handshake(self, extra=b""):
        """HELLO (with extra fields appended) and its reply's fields."""
        self.send(frame(HELLO, hello() + extra, request_id=1))
        t, rid, meta, _ = self.recv_frame()
        assert (t, rid) == (HELLO_REPLY, 1), (t, rid)
        return parse_fields(meta)

    def close(self):
        self.sock.close()
