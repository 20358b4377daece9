"""Authentication against real daemons (docs/protocol.md "Authentication"): workers prove the
cluster secret with an HMAC challenge (the secret never crosses the wire), clients present a
token from `loom token create`, revocation and expiry count from the next connection, a user's
session sees nothing of another's, the REGISTER reply hands out no key, a worker cannot publish
another worker's data-plane address, and a controller reachable from other hosts refuses to
start without authentication. The wire side is tests/integration/wire.py (an independent
implementation), so these also check the documented handshake byte for byte."""
import json
import os
import struct
import subprocess
import time

import pytest

import wire
from conftest import LOOM_BIN, Auth, Cluster, devices, run_loom, wait_for
from dist import EXAMPLES, loom_run

REGISTER_WORKER_REPLY, WORKER_DATAPLANE = 5, 14
ARRAY_CREATE, ARRAY_PLACEMENT, ARRAY_LOCATE, SHARD_PUT, SHARD_GET, ACK = 17, 18, 19, 33, 34, 13
NOT_FOUND = -2


@pytest.fixture
def auth(tmp_path):
    return Auth(tmp_path, users=("alice", "bob"))


@pytest.fixture
def acluster(procs, tmp_path, auth, monkeypatch):
    """A controller with a secret and tokens, 2 workers x 4 devices; CLI calls present alice's token."""
    monkeypatch.setenv("LOOM_TOKEN", auth.tokens["alice"])
    c = Cluster(procs, tmp_path, auth)
    c.start_controller("--handshake-timeout", "2000")
    c.start_worker(4)
    c.start_worker(4)
    c.wait_devices(8)
    return c


def hello_as(addr, token=None, role=wire.ROLE_CLIENT, nonce=None):
    """Connects and says HELLO; returns (conn, reply frame or None when the connection closed)."""
    c = wire.Conn(addr)
    c.send(wire.frame(wire.HELLO, wire.hello(role=role, token=token if token is not None else b"", nonce=nonce),
                      request_id=1))
    return c, c.recv_frame()


def refused(addr, token=None, role=wire.ROLE_CLIENT, nonce=None):
    """The controller answers the HELLO with ERROR and closes; returns (code, message)."""
    c, f = hello_as(addr, token, role, nonce)
    try:
        assert f is not None and f[0] == wire.ERROR, f
        fields = wire.parse_fields(f[2])
        c.expect_closed()
        return wire.zigzag_decode(fields[1][0]), fields[2][0].decode()
    finally:
        c.close()


def worker_handshake(addr, secret, nonce=None):
    """HELLO as a worker with a nonce; checks the controller's proof; returns (conn, nonce, challenge)."""
    nonce = nonce or os.urandom(32)
    c, f = hello_as(addr, role=wire.ROLE_WORKER, nonce=nonce)
    assert f is not None and f[0] == wire.HELLO_REPLY, f
    fields = wire.parse_fields(f[2])
    challenge, proof = fields[11][0], fields[12][0]
    assert len(challenge) == 32
    assert proof == wire.controller_proof(secret, nonce, challenge), "the controller's proof does not verify"
    return c, nonce, challenge


def register(c, proof, host="authhost"):
    reg = wire.register_worker(host=host, pid=os.getpid(), slice_name="auth", specs=[wire.device_spec(0)], proof=proof)
    c.send(wire.frame(wire.REGISTER_WORKER, reg, request_id=2))
    return c.recv_frame()


def test_client_without_token_is_refused(acluster):
    code, msg = refused(acluster.addr)
    assert code == wire.PERMISSION and "requires a client token" in msg, msg
    code, msg = refused(acluster.addr, token=b"loom_0123456789abcdef_" + b"0" * 64)
    assert code == wire.PERMISSION and "not valid" in msg, msg
    env = {k: v for k, v in os.environ.items() if k != "LOOM_TOKEN"}
    r = run_loom("devices", "--controller", acluster.addr, env=env)
    assert r.returncode != 0 and "requires a client token" in r.stderr, r.stderr
    # a good token gets a session, and the reply names its user
    c, f = hello_as(acluster.addr, token=acluster.auth.tokens["bob"])
    assert f[0] == wire.HELLO_REPLY and wire.parse_fields(f[2])[13][0] == b"bob"
    c.close()
    assert len(devices(acluster.addr)["devices"]) == 8  # and everyone else is still served


def test_worker_without_secret_is_refused(acluster, procs):
    code, msg = refused(acluster.addr, role=wire.ROLE_WORKER)
    assert code == wire.PERMISSION and "requires worker authentication" in msg, msg
    # the real worker binary, started without --secret-file, says why and exits
    p = procs.start(["worker", "--controller", acluster.addr, "--devices", "1"], "nosecret")
    p.expect_clean = False
    p.wait(timeout=30)
    assert p.returncode != 0 and "requires worker authentication" in procs.log(p), procs.log(p)
    # before authenticating, a worker may not ask anything
    c, nonce, challenge = worker_handshake(acluster.addr, acluster.auth.secret)
    c.send(wire.frame(wire.LIST_DEVICES, b"", request_id=3))
    code, msg, _ = c.expect_error()
    assert code == wire.PERMISSION and "authenticate" in msg, msg
    c.close()
    assert len(devices(acluster.addr)["devices"]) == 8


def test_wrong_secret_is_refused(acluster, procs, tmp_path):
    c, nonce, challenge = worker_handshake(acluster.addr, acluster.auth.secret)
    f = register(c, wire.worker_proof(os.urandom(32), nonce, challenge))
    assert f[0] == wire.ERROR
    assert "worker authentication failed" in wire.parse_fields(f[2])[2][0].decode()
    c.expect_closed()
    c.close()
    # a replayed proof (another connection's) does not work either: the challenge is fresh
    c1, n1, ch1 = worker_handshake(acluster.addr, acluster.auth.secret)
    c2, _, _ = worker_handshake(acluster.addr, acluster.auth.secret, nonce=n1)
    f = register(c2, wire.worker_proof(acluster.auth.secret, n1, ch1))
    assert f[0] == wire.ERROR and "authentication failed" in wire.parse_fields(f[2])[2][0].decode()
    c1.close(), c2.close()
    # the real worker with a wrong secret: it refuses the controller, whose proof does not verify
    bad = tmp_path / "bad-secret"
    fd = os.open(bad, os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, (os.urandom(32).hex() + "\n").encode())
    os.close(fd)
    p = procs.start(["worker", "--controller", acluster.addr, "--devices", "1", "--secret-file", str(bad)], "badsecret")
    p.expect_clean = False
    p.wait(timeout=30)
    assert p.returncode != 0 and "failed authentication" in procs.log(p), procs.log(p)
    # a secret file others can read is refused outright
    os.chmod(bad, 0o644)
    r = run_loom("worker", "--controller", acluster.addr, "--secret-file", str(bad))
    assert r.returncode != 0 and "chmod 600" in r.stderr, r.stderr
    d = devices(acluster.addr)
    assert len(d["devices"]) == 8 and all(x["healthy"] for x in d["devices"])


def test_the_register_reply_carries_no_key(acluster):
    c, nonce, challenge = worker_handshake(acluster.addr, acluster.auth.secret)
    f = register(c, wire.worker_proof(acluster.auth.secret, nonce, challenge))
    assert f[0] == REGISTER_WORKER_REPLY, f
    assert 4 not in wire.parse_fields(f[2]), "an authenticated worker's transfer key must not travel"
    c.close()


def test_unauthenticated_controller_gives_each_worker_its_own_key(procs, tmp_path):
    c = Cluster(procs, tmp_path)
    c.start_controller()
    keys = []
    for i in range(2):
        conn, f = hello_as(c.addr, role=wire.ROLE_WORKER)
        assert f[0] == wire.HELLO_REPLY and 11 not in wire.parse_fields(f[2])
        f = register(conn, None, host=f"h{i}")
        assert f[0] == REGISTER_WORKER_REPLY
        keys.append(wire.parse_fields(f[2])[4][0])
        conn.close()
    assert len(keys[0]) == 16 and keys[0] != keys[1], "a worker's key must not open another worker's shards"


def test_revoked_and_expired_tokens_are_refused(acluster, auth):
    tok = auth.create("carol")
    c, f = hello_as(acluster.addr, token=tok)
    assert f[0] == wire.HELLO_REPLY
    c.close()
    tid = tok.split("_")[1]
    listing = run_loom("token", "list", "--json", "--tokens-file", str(auth.tokens_file), check=True).stdout
    assert tid in listing and tok not in listing and tok.split("_")[2] not in listing  # only hashes are kept
    run_loom("token", "revoke", tid[:6], "--tokens-file", str(auth.tokens_file), check=True)
    code, msg = refused(acluster.addr, token=tok)
    assert code == wire.PERMISSION and "revoked" in msg and "carol" in msg, msg
    short = auth.create("dave", "--expires", "1s")
    time.sleep(1.2)
    code, msg = refused(acluster.addr, token=short)
    assert code == wire.PERMISSION and "expired" in msg, msg
    assert len(devices(acluster.addr)["devices"]) == 8  # alice's token still works


def session(addr, token):
    c, f = hello_as(addr, token=token)
    assert f[0] == wire.HELLO_REPLY, f
    return c, wire.parse_fields(f[2])[3][0]


def test_a_second_user_sees_none_of_the_first_users_arrays(acluster, auth):
    a, sa = session(acluster.addr, auth.tokens["alice"])
    b, sb = session(acluster.addr, auth.tokens["bob"])
    assert sa != sb
    # alice puts a 4 x f32 array on device 0
    a.send(wire.frame(ARRAY_CREATE, wire.field_varint(1, 77) + wire.field_varint(2, 12) + wire.field_packed(3, [4]),
                      request_id=5))
    t, _, meta, _ = a.recv_frame()
    assert t == ARRAY_PLACEMENT, meta
    shard = wire.parse_fields(wire.parse_fields(meta)[2][0])
    port, put_tok, li = shard[3][0].decode(), shard[7][0], shard.get(4, [0])[0]
    d = wire.Conn(port)
    d.handshake()
    target = wire.field_varint(1, 77) + wire.field_varint(2, li) + wire.field_bytes(3, put_tok)
    put = wire.field_varint(1, sa) + wire.field_varint(2, 12) + wire.field_packed(3, [4]) + wire.field_bytes(4, target)
    d.send(wire.frame(SHARD_PUT, put, payload=struct.pack("<4f", 1, 2, 3, 4), request_id=6))
    assert d.recv_frame()[0] == ACK
    a.send(wire.frame(ARRAY_LOCATE, wire.field_varint(1, 77), request_id=7))
    t, _, meta, _ = a.recv_frame()
    assert t == ARRAY_PLACEMENT
    get_tok = wire.parse_fields(wire.parse_fields(meta)[2][0])[7][0]
    # bob's session does not know array 77
    b.send(wire.frame(ARRAY_LOCATE, wire.field_varint(1, 77), request_id=8))
    code, msg, _ = b.expect_error()
    assert code == NOT_FOUND, msg
    # and alice's get token is worthless outside her session: in bob's session, or as a made-up one in hers
    for sess, tok in ((sb, get_tok), (sa, bytes(8)), (sa, put_tok)):
        get = wire.field_varint(1, sess) + wire.field_varint(2, 77) + wire.field_varint(3, li) + wire.field_bytes(4, tok)
        d.send(wire.frame(SHARD_GET, get, request_id=9))
        code, msg, _ = d.expect_error()
        assert code == wire.PERMISSION and "token" in msg, msg
    # alice herself reads it back
    get = wire.field_varint(1, sa) + wire.field_varint(2, 77) + wire.field_varint(3, li) + wire.field_bytes(4, get_tok)
    d.send(wire.frame(SHARD_GET, get, request_id=10))
    t, _, _, payload = d.recv_frame()
    assert t == 35 and struct.unpack("<4f", payload) == (1, 2, 3, 4)
    for x in (a, b, d):
        x.close()


def dataplane_blob(worker_id):
    """A well-formed data-plane address blob (src/dataplane/endpoint.c) naming worker_id."""
    ucx = os.urandom(40)
    hdr = bytearray(56)
    struct.pack_into("<I", hdr, 0, 0x41444d4c)
    hdr[4] = 1
    struct.pack_into("<QII", hdr, 8, worker_id, os.getpid(), len(ucx))
    return bytes(hdr) + ucx


def test_forged_dataplane_address_is_refused(acluster):
    # an address at registration (before the worker has an id) is not taken either
    c, nonce, challenge = worker_handshake(acluster.addr, acluster.auth.secret)
    reg = wire.register_worker(host="forger", pid=1, slice_name="auth", specs=[wire.device_spec(0)],
                               proof=wire.worker_proof(acluster.auth.secret, nonce, challenge))
    c.send(wire.frame(wire.REGISTER_WORKER, reg + wire.field_bytes(5, dataplane_blob(0)), request_id=2))
    code, msg, _ = c.expect_error()
    assert code == wire.INVALID_ARGUMENT and "dataplane_address must be empty" in msg, msg
    c.close()
    c, nonce, challenge = worker_handshake(acluster.addr, acluster.auth.secret)
    f = register(c, wire.worker_proof(acluster.auth.secret, nonce, challenge))
    assert f[0] == REGISTER_WORKER_REPLY
    me = wire.parse_fields(f[2]).get(1, [0])[0]
    assert me == 2
    # worker 2 publishes worker 0's identity: it would receive the collectives meant for worker 0
    c.send(wire.frame(WORKER_DATAPLANE, wire.field_bytes(1, dataplane_blob(0))))
    code, msg, _ = c.expect_error()
    assert code == wire.PERMISSION and "names worker 0" in msg, msg
    c.expect_closed()
    c.close()
    log = lambda: acluster.procs.log(acluster.controller)
    wait_for(lambda: "sent a data-plane address of worker 0" in log(), 10, what="the controller's warning")
    # the real workers' collectives are untouched
    r, _ = loom_run(acluster.addr, EXAMPLES / "distributed_sum.mlir", "--devices", "0-7")
    assert r.returncode == 0 and r.stdout == "[8 8 8 8 8 8 8 8]\n", r.stderr


def test_listen_beyond_loopback_needs_authentication(tmp_path, auth):
    def start(*extra):
        return subprocess.run([LOOM_BIN, "controller", "--listen", "0.0.0.0:0", *extra], capture_output=True,
                              text=True, timeout=5, stdin=subprocess.DEVNULL)

    r = start()
    assert r.returncode != 0 and "without authentication" in r.stderr and "--insecure" in r.stderr, r.stderr
    r = start("--secret-file", str(auth.secret_file))  # workers, but not clients
    assert r.returncode != 0 and "without authentication" in r.stderr, r.stderr
    for extra in (("--insecure",), tuple(auth.controller_args())):
        addr_file = tmp_path / "a.addr"
        p = subprocess.Popen([LOOM_BIN, "controller", "--listen", "0.0.0.0:0", "--address-file", str(addr_file), *extra],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True)
        try:
            wait_for(lambda: addr_file.exists() and addr_file.read_text().strip(), 10, what="the controller to listen")
        finally:
            p.terminate()
            out = p.communicate(timeout=20)[0]
        assert p.returncode == 0, out
        if extra == ("--insecure",):
            assert "without a cluster secret" in out, out
        addr_file.unlink()


def test_loom_up_is_authenticated(tmp_path, monkeypatch):
    state = tmp_path / "state"
    monkeypatch.delenv("LOOM_TOKEN", raising=False)
    r = run_loom("up", "--detach", "--workers", "1", "--devices-per-worker", "2", timeout=90)
    assert r.returncode == 0, r.stderr
    try:
        for name in ("secret", "token", "tokens"):
            assert (os.stat(state / name).st_mode & 0o777) == 0o600, name
        addr = (state / "controller.addr").read_text().strip()
        assert len(devices(addr)["devices"]) == 2  # the local token is found without being told
        # another state directory (another user's view): no token, refused
        env = dict(os.environ, LOOM_STATE_DIR=str(tmp_path / "other"))
        r = run_loom("devices", "--controller", addr, env=env)
        assert r.returncode != 0 and "requires a client token" in r.stderr, r.stderr
        listing = run_loom("token", "list", check=True).stdout
        assert "loom up" in listing
    finally:
        run_loom("down", timeout=60)


def test_idle_and_excess_sessions(procs, tmp_path, auth, monkeypatch):
    monkeypatch.setenv("LOOM_TOKEN", auth.tokens["alice"])
    c = Cluster(procs, tmp_path, auth)
    c.start_controller("--session-idle-timeout", "400", "--max-sessions-per-user", "2", "--handshake-timeout", "1000")
    # a user's sessions are capped; another user is not affected
    a1, _ = session(c.addr, auth.tokens["alice"])
    a2, _ = session(c.addr, auth.tokens["alice"])
    code, msg = refused(c.addr, token=auth.tokens["alice"])
    assert code == -19 and "alice already has 2 open sessions" in msg, msg  # BUSY
    b1, _ = session(c.addr, auth.tokens["bob"])
    # an idle session is closed with the reason; one that keeps asking stays
    t0 = time.monotonic()
    while time.monotonic() - t0 < 1.2:
        b1.send(wire.frame(wire.PING, wire.field_varint(1, 1), request_id=3))
        assert b1.recv_frame()[0] == wire.PONG
        time.sleep(0.1)
    code, msg, _ = a1.expect_error(timeout=5)
    assert code == wire.TIMEOUT and "--session-idle-timeout" in msg, msg
    a1.expect_closed()
    b1.send(wire.frame(wire.PING, wire.field_varint(1, 1), request_id=4))
    assert b1.recv_frame()[0] == wire.PONG
    # connections that never authenticate are closed within the handshake deadline
    idle = [wire.Conn(c.addr) for _ in range(50)]
    half = [hello_as(c.addr, role=wire.ROLE_WORKER, nonce=os.urandom(32))[0] for _ in range(5)]
    for x in idle + half:
        x.expect_closed(timeout=10)  # the deadline is 1 s
    for x in (a1, a2, b1, *idle, *half):
        x.close()


def test_ids_of_long_gone_workers_are_reclaimed(procs, tmp_path):
    """Fresh ids run out (64 workers x 1024 devices = the 65,536 virtual device ids); a worker
    lost for --reclaim-after gives its ids to the next worker of as many devices, once no array
    names them; until then the refusal names the limit."""
    c = Cluster(procs, tmp_path)
    c.start_controller("--reclaim-after", "800", "--heartbeat-timeout", "600000", "--heartbeat-interval", "100000")
    specs = [wire.device_spec(i) for i in range(1024)]

    def join(host):
        conn, f = hello_as(c.addr, role=wire.ROLE_WORKER)
        assert f[0] == wire.HELLO_REPLY
        conn.send(wire.frame(wire.REGISTER_WORKER, wire.register_worker(host=host, pid=1, specs=specs), request_id=2))
        f = conn.recv_frame(timeout=30)
        return conn, f

    workers = []
    for i in range(64):
        conn, f = join(f"h{i}")
        assert f[0] == REGISTER_WORKER_REPLY, f
        workers.append(conn)
    conn, f = join("extra")
    assert f[0] == wire.ERROR
    msg = wire.parse_fields(f[2])[2][0].decode()
    assert "maximum of 65536 devices" in msg and "--reclaim-after" in msg, msg
    conn.close()
    # a client names worker 3's first device in an array, then worker 3 goes away
    cl, _ = session(c.addr, None)
    sharding = wire.field_packed(2, [3 * 1024])
    cl.send(wire.frame(ARRAY_CREATE, wire.field_varint(1, 5) + wire.field_varint(2, 12) + wire.field_packed(3, [4]) +
                       wire.field_bytes(4, sharding), request_id=3))
    assert cl.recv_frame()[0] == ARRAY_PLACEMENT
    workers[3].close()
    time.sleep(1.0)
    conn, f = join("held")  # past the grace period, but the array still names device 3072
    assert f[0] == wire.ERROR and "--reclaim-after" in wire.parse_fields(f[2])[2][0].decode()
    conn.close()
    cl.send(wire.frame(20, wire.field_packed(1, [5]), request_id=4))  # ARRAY_DELETE
    assert cl.recv_frame()[0] == ACK
    conn, f = join("reborn")
    assert f[0] == REGISTER_WORKER_REPLY, f
    r = wire.parse_fields(f[2])
    assert r[1][0] == 3 and wire.unpack_varints(r[2][0])[0] == 3072, "worker 3's ids, reclaimed"
    st = json.loads(run_loom("status", "--json", "--controller", c.addr, check=True).stdout)
    w3 = [w for w in st["workers"] if w["id"] == 3][0]
    assert w3["host"] == "reborn" and w3["alive"], w3
    for x in (conn, cl, *workers):
        x.close()


def listening_addresses(pid):
    """The (ip, port) pairs process pid listens on over TCP/IPv4 (from /proc, no tools needed)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    out = []
    with open(f"/proc/{pid}/net/tcp") as f:
        for line in f.readlines()[1:]:
            parts = line.split()
            if parts[3] == "0A" and parts[9] in inodes:  # LISTEN
                ip_hex, port_hex = parts[1].split(":")
                ip = ".".join(str(b) for b in reversed(bytes.fromhex(ip_hex)))
                out.append((ip, int(port_hex, 16)))
    return out


def test_a_local_cluster_listens_on_loopback_only(acluster):
    """Data port and UCX data plane of a worker whose controller is on loopback stay there too."""
    r, _ = loom_run(acluster.addr, EXAMPLES / "distributed_sum.mlir", "--devices", "0-7")
    assert r.returncode == 0 and r.stdout == "[8 8 8 8 8 8 8 8]\n", r.stderr  # the data plane is up and works
    for w in acluster.workers:
        addrs = listening_addresses(w.pid)
        assert len(addrs) >= 2, addrs  # the data port and UCX's
        assert all(ip.startswith("127.") for ip, _ in addrs), addrs


def test_a_worker_whose_data_plane_cannot_start_is_unhealthy(procs, tmp_path):
    c = Cluster(procs, tmp_path)
    c.start_controller()
    c.start_worker(2)
    env = dict(os.environ, UCX_TLS="no_such_transport")  # UCX refuses to start
    procs.start(["worker", "--controller", c.addr, "--devices", "2"], "nodp", env=env)

    def sick():
        d = devices(c.addr)["devices"]
        return d if len(d) == 4 and sum(x["healthy"] for x in d) == 2 else None

    d = wait_for(sick, 30, what="the second worker's devices, unhealthy")
    bad = [x for x in d if not x["healthy"]]
    assert all("data plane did not start" in x["health_reason"] for x in bad), bad
    prog = EXAMPLES.parent / "tests" / "integration" / "programs" / "spin_4.mlir"
    r = run_loom("run", str(prog), "--devices", ",".join(str(x["id"]) for x in d), "--controller", c.addr)
    assert r.returncode != 0 and "data plane did not start" in r.stderr, r.stderr


def test_a_thousand_idle_connections_lock_nobody_out(acluster):
    """1,000 idle TCP connections to the controller's port and to each of a worker's ports (its
    data port and UCX's): a real client still runs a distributed program meanwhile and after, and
    every port closes the idle ones: the controller's and the data port by their handshake
    timeouts (2 s and 5 s, accepted as the listen backlog lets them in), UCX's port by the data
    plane's watcher (connections that never sent a byte for 5 s are shut down: src/dataplane/reap.c)."""
    import resource
    import socket
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = 4 * 1000 + 256
    if hard != resource.RLIM_INFINITY and hard < need:
        pytest.skip(f"needs {need} file descriptors, the hard limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, need), hard))
    host, port = acluster.addr.rsplit(":", 1)
    w = acluster.workers[0]
    # its data port, and UCX's once its data plane is up (after registration: wait for both)
    wait_for(lambda: len(listening_addresses(w.pid)) >= 2, 30, what="the worker's data port and UCX's port")
    wports = [p for ip, p in listening_addresses(w.pid)]
    targets = [(host, int(port))] + [("127.0.0.1", p) for p in wports]
    socks = {t: [] for t in targets}
    try:
        for t in targets:
            for _ in range(1000):
                socks[t].append(socket.create_connection(t, timeout=10))
        r, _ = loom_run(acluster.addr, EXAMPLES / "distributed_sum.mlir", "--devices", "0-7")
        assert r.returncode == 0 and r.stdout == "[8 8 8 8 8 8 8 8]\n", r.stderr

        def closed(s):
            s.setblocking(False)
            try:
                return s.recv(65536) == b""
            except BlockingIOError:
                return False
            except OSError:
                return True

        # the controller's port and the worker's data port drop connections that never say HELLO
        ctl_idle = socks[targets[0]]
        n_open = lambda: sum(not closed(s) for s in ctl_idle)  # noqa: E731
        try:
            wait_for(lambda: n_open() == 0, 30, what="the controller closing 1,000 idle connections")
        except AssertionError:
            raise AssertionError(f"{n_open()} of 1,000 idle connections to the controller still open after 30 s")
        import re
        m = re.search(r"data port 127\.0\.0\.1:(\d+)", acluster.procs.log(w))
        assert m, acluster.procs.log(w)
        data = socks[("127.0.0.1", int(m.group(1)))]
        t0 = time.monotonic()
        wait_for(lambda: all(closed(s) for s in data), 90, what="the worker's data port closing 1,000 idle connections")
        print(f"data port: 1,000 idle connections closed after {time.monotonic() - t0:.1f} s more")
        ucx = [t for t in targets[1:] if t[1] != int(m.group(1))]
        assert ucx, f"no UCX port among the worker's listening ports {wports}"
        for t in ucx:
            t0 = time.monotonic()
            wait_for(lambda: all(closed(s) for s in socks[t]), 60,
                     what=f"the worker closing 1,000 idle connections to UCX's port {t[1]}")
            print(f"UCX port {t[1]}: 1,000 idle connections closed after {time.monotonic() - t0:.1f} s more")
        r, _ = loom_run(acluster.addr, EXAMPLES / "distributed_sum.mlir", "--devices", "0-7")
        assert r.returncode == 0 and r.stdout == "[8 8 8 8 8 8 8 8]\n", r.stderr
    finally:
        for ss in socks.values():
            for s in ss:
                s.close()


def test_only_admins_name_checkpoint_directories(acluster, auth, tmp_path):
    """A checkpoint in a directory the client names (the proxy's persistence) is written by the
    workers as the cluster's user: with tokens, only --admins may ask for one (alice is none here),
    and never to remove one."""
    c, _ = session(acluster.addr, auth.tokens["alice"])
    target = tmp_path / "elsewhere"
    for op, rid in ((1, 2), (2, 3), (6, 4)):  # save, load, remove
        m = wire.field_varint(1, op) + wire.field_bytes(4, str(target).encode())
        if op == 1:
            m += wire.field_bytes(3, wire.field_bytes(1, b"x") + wire.field_varint(2, 1))
        c.send(wire.frame(64, m, request_id=rid))  # CHECKPOINT
        code, msg, r = c.expect_error()
        assert r == rid, (r, msg)
        if op == 6:
            assert code == wire.INVALID_ARGUMENT and "save, load, show or verify only" in msg, msg
        else:
            assert code == wire.PERMISSION and "only admins" in msg, msg
    assert not target.exists()
    c.close()
