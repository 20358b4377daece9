"""A controller that restarts (docs/durability.md) end to end, with real processes: a controller
with a journal (`--state DIR`), two workers of 4 CPU devices, and the data-parallel training loop
of the elastic tests (tests/integration/elastic_train.py). The controller is SIGKILLed in the
middle of the loop and started again with the same --state: the loop finishes with parameters
bitwise equal to a run without the fault, no worker exits (the same processes serve before and
after), and nothing is lost. Also: repeated kills while the journal is being written, accounting
across a restart, a corrupt or truncated journal refused with an error naming the file, a full
disk (a file size limit) logged without a crash, workers of a controller that lost its journal
rejoining anew, a session resumed only with its secret (on the wire), and all of it with a
cluster secret and client tokens."""
import json
import os
import random
import resource
import signal
import subprocess
import sys
import threading
import time

import pytest

from loomtest import CHAIN_STEP_4, Chain, chain_value, run_loom, wait_for
from test_elastic import LOOM_BIN, TRAIN, Daemons, bitwise_equal


class Durable(Daemons):
    """Daemons whose controller keeps a journal and can be killed and started again on the same
    address and state directory."""

    def __init__(self, tmp):
        super().__init__(tmp)
        self.state = tmp / "ctl-state"
        self.ctl = None
        self.starts = 0

    def controller(self, *extra):
        self.extra = extra
        addr = super().controller("--state", str(self.state), *extra)
        self.ctl = self.procs[-1]
        self.starts = 1
        return addr

    def restart(self):
        """Starts the controller again (after it died) on the same address and journal."""
        self.starts += 1
        self.ctl = self.start(f"controller{self.starts}", "controller", "--listen", self.addr, "--state",
                              str(self.state), *self.extra)
        return self.ctl

    def wait_serving(self):
        """Until the (restarted) controller answers."""
        def answers():
            return run_loom("status", "--json", "--controller", self.addr).returncode == 0
        wait_for(answers, 30, what="the restarted controller")

    def kill_controller(self):
        self.ctl.send_signal(signal.SIGKILL)
        self.ctl.wait(timeout=10)


@pytest.fixture
def durable(tmp_path, monkeypatch):
    monkeypatch.setenv("LOOM_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("LOOM_CONTROLLER", raising=False)
    d = Durable(tmp_path)
    yield d
    d.stop()


def train(d, out, *extra, timeout=120, wait=True):
    env = dict(os.environ, LOOM_CONTROLLER=d.addr, JAX_PLATFORMS="cpu")
    args = [sys.executable, str(TRAIN), "--steps", "200", "--out", str(out), *map(str, extra)]
    if not wait:
        return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                stdin=subprocess.DEVNULL)
    r = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL)
    print(r.stdout, r.stderr[-3000:])
    assert r.returncode == 0, f"training failed:\n{r.stdout}\n{r.stderr[-3000:]}"
    return r


def workers_alive(d, pids):
    st = d.status()
    alive = {w["pid"] for w in st["workers"] if w["alive"]}
    return alive == set(pids), st


def test_sigkill_controller_mid_training_is_bitwise_invisible(durable, tmp_path):
    d = durable
    d.controller()
    w0, w1 = d.two_workers()
    train(d, tmp_path / "ref.npz")
    step = random.Random().randint(5, 190)
    print(f"killing the controller (pid {d.ctl.pid}) at step {step}")

    def restart_when_dead(ctl):
        ctl.wait(timeout=120)
        d.restart()

    t = threading.Thread(target=restart_when_dead, args=(d.ctl,))
    t.start()
    r = train(d, tmp_path / "kill.npz", "--kill-pid", d.ctl.pid, "--kill-step", step)
    t.join(timeout=30)
    assert f"step {step}: sent SIGKILL" in r.stdout
    assert bitwise_equal(tmp_path / "ref.npz", tmp_path / "kill.npz")
    # no worker exited: the same two processes, registered as the same workers, alive
    assert w0.poll() is None and w1.poll() is None
    ok, st = workers_alive(d, [w0.pid, w1.pid])
    assert ok, st
    assert sorted((w["id"], w["pid"]) for w in st["workers"]) == [(0, w0.pid), (1, w1.pid)]
    assert st["journal"].endswith("journal.db (ok)"), st["journal"]
    log = d.log(f"controller{d.starts}")
    assert "restored 2 workers, 1 sessions" in log, log
    assert "resumed by" in log and "worker 0 resumed" in log and "worker 1 resumed" in log, log
    for w in ("w0", "w1"):
        assert "shards kept" in d.log(w), d.log(w)
    # the session's arrays are all there: a fresh run on the same workers still works
    train(d, tmp_path / "again.npz")
    assert bitwise_equal(tmp_path / "ref.npz", tmp_path / "again.npz")


def test_repeated_sigkills_while_the_journal_is_written(durable, tmp_path):
    """kill -9 at random moments of a busy loop (every launch writes records): SQLite's atomic
    commit keeps the journal whole, each restart reads it, and the loop's result is unchanged."""
    d = durable
    d.controller()
    d.two_workers()
    train(d, tmp_path / "ref.npz")
    rng = random.Random()
    p = train(d, tmp_path / "kill.npz", "--steps", "200", wait=False)
    kills = 0
    deadline = time.time() + 90
    while p.poll() is None and kills < 3 and time.time() < deadline:
        time.sleep(rng.uniform(0.8, 1.6))
        if p.poll() is not None:
            break
        d.kill_controller()
        kills += 1
        d.restart()
        wait_for(lambda: (d.tmp / f"controller{d.starts}.log").read_text().count("listening on") > 0, 30,
                 what="the restarted controller")
    out, err = p.communicate(timeout=120)
    print(out, err[-3000:])
    assert p.returncode == 0, err[-3000:]
    assert kills >= 1, "the loop ended before the first kill"
    assert bitwise_equal(tmp_path / "ref.npz", tmp_path / "kill.npz")
    for k in range(2, d.starts + 1):
        assert "refusing to start" not in d.log(f"controller{k}")


def test_usage_survives_a_restart(durable, tmp_path):
    d = durable
    d.controller()
    d.two_workers()
    train(d, tmp_path / "a.npz")

    def train_sessions():
        u = json.loads(run_loom("usage", "--json", "--controller", d.addr, check=True).stdout)
        return [s for s in u["sessions"] if s["name"].startswith("python")]

    before = wait_for(lambda: [s for s in train_sessions() if s["state"] == "closed"], 10, what="the closed session")
    assert before[0]["usage"]["launches"] == 200
    time.sleep(0.6)  # the accounting is journaled on the next tick
    d.kill_controller()
    d.restart()
    d.wait_serving()
    after = train_sessions()
    assert [(s["session"], s["usage"]) for s in after] == [(s["session"], s["usage"]) for s in before]
    assert after[0]["closed_unix_ms"] == before[0]["closed_unix_ms"]


def journal_with_state(d, tmp_path):
    d.controller()
    d.two_workers()
    train(d, tmp_path / "a.npz")
    d.ctl.send_signal(signal.SIGTERM)  # a clean stop: the journal is whole (WAL checkpointed)
    d.ctl.wait(timeout=20)
    db = d.state / "journal.db"
    assert db.exists() and db.stat().st_size > 0
    return db


def start_refused(d):
    r = subprocess.run([LOOM_BIN, "controller", "--listen", "127.0.0.1:0", "--state", str(d.state)],
                       capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    return r


@pytest.mark.parametrize("damage", ["truncated", "header", "page"])
def test_damaged_journal_is_refused(durable, tmp_path, damage):
    d = durable
    db = journal_with_state(d, tmp_path)
    data = bytearray(db.read_bytes())
    if damage == "truncated":
        db.write_bytes(bytes(data[: len(data) // 2 + 100]))
    elif damage == "header":
        data[0:64] = os.urandom(64)
        db.write_bytes(bytes(data))
    else:  # every page after the first overwritten with garbage
        for off in range(4096, len(data), 4096):
            data[off:off + 4096] = os.urandom(min(4096, len(data) - off))
        db.write_bytes(bytes(data))
    r = start_refused(d)
    print(r.stderr)
    assert r.returncode != 0
    assert str(db) in r.stderr or "journal.db" in r.stderr, r.stderr
    assert "refusing to start" in r.stderr or "not a database" in r.stderr, r.stderr


def test_full_disk_is_logged_and_the_controller_keeps_serving(durable, tmp_path):
    """A file size limit stands in for a full disk: commits fail, the controller says so (naming
    the journal), keeps serving, and does not crash."""
    d = durable

    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (96 << 10, 96 << 10))

    af = tmp_path / "controller.addr"
    log = open(tmp_path / "controller.log", "wb")
    p = subprocess.Popen([LOOM_BIN, "controller", "--listen", "127.0.0.1:0", "--address-file", str(af), "--state",
                          str(d.state)], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                         preexec_fn=limit, start_new_session=True)
    p.name, p.logpath = "controller", tmp_path / "controller.log"
    d.procs.append(p)
    d.addr = wait_for(lambda: af.exists() and af.read_text().strip(), 30, what="the controller")
    d.two_workers()
    train(d, tmp_path / "a.npz")
    text = d.log("controller")
    assert "cannot commit" in text and "journal.db" in text and "keeps serving" in text, text[-3000:]
    assert "cannot commit" in d.status()["journal"]  # `loom status` shows it too
    assert p.poll() is None
    assert len([w for w in d.status()["workers"] if w["alive"]]) == 2


def test_workers_rejoin_anew_when_the_journal_is_gone(durable, tmp_path):
    """A controller restarted without its journal has no record of the workers: they are told
    so, drop their state and register anew (never serve stale shards)."""
    d = durable
    d.controller()
    w0, w1 = d.two_workers()
    d.kill_controller()
    import shutil
    shutil.rmtree(d.state)
    d.restart()
    d.wait_serving()
    # (a worker told to drop its state rejoins as a standby, as after being fenced: docs/elastic.md)
    d.wait_workers(0, 2)
    for w in ("w0", "w1"):
        wait_for(lambda w=w: "cannot resume" in d.log(w), 30, what=f"{w} refused")
    st = d.status()
    assert sorted(w["pid"] for w in st["workers"] if w["alive"]) == sorted([w0.pid, w1.pid])


def test_resume_needs_the_session_secret(durable, tmp_path):
    """On the wire (docs/protocol.md "Resuming"): a session is resumed only with its secret, by one
    connection, and only from a controller that has it in its journal."""
    from loomtest import SOURCE_DIR
    sys.path.insert(0, str(SOURCE_DIR / "tests" / "integration"))
    import wire
    d = durable
    d.controller()
    c = wire.Conn(d.addr)
    f = c.handshake()
    sid, secret = f[3][0], f[17][0]
    assert len(secret) == 32
    d.kill_controller()
    c.close()
    d.restart()
    d.wait_serving()

    def resume(sec):
        k = wire.Conn(d.addr)
        k.send(wire.frame(wire.HELLO, wire.hello() + wire.field_varint(16, sid) + wire.field_bytes(17, sec),
                          request_id=1))
        return k

    k = resume(bytes(32))
    code, msg, _ = k.expect_error()
    assert code == wire.PERMISSION and "wrong resume secret" in msg, msg
    k.close()
    k = resume(secret)
    t, rid, meta, _ = k.recv_frame()
    assert t == wire.HELLO_REPLY, (t, meta)
    fields = wire.parse_fields(meta)
    assert fields[3][0] == sid and fields.get(18) == [1], fields
    k2 = resume(secret)  # the session is taken
    code, msg, _ = k2.expect_error()
    assert "another connection has it" in msg, msg
    k2.close()
    k.close()
    # a controller without a journal has nothing to resume
    p = subprocess.Popen([LOOM_BIN, "controller", "--listen", "127.0.0.1:0", "--address-file",
                          str(tmp_path / "plain.addr")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         stdin=subprocess.DEVNULL, start_new_session=True)
    p.name, p.logpath = "plain", tmp_path / "plain.addr"
    d.procs.append(p)
    plain = wait_for(lambda: (tmp_path / "plain.addr").exists() and (tmp_path / "plain.addr").read_text().strip(), 30)
    k3 = wire.Conn(plain)
    k3.send(wire.frame(wire.HELLO, wire.hello() + wire.field_varint(16, sid) + wire.field_bytes(17, secret),
                       request_id=1))
    code, msg, _ = k3.expect_error()
    assert "keeps no journal" in msg, msg
    f = wire.Conn(plain).handshake()
    assert 17 not in f  # and gives no resume secret


def make_auth(tmp_path, users):
    d = tmp_path / "auth"
    d.mkdir(mode=0o700, exist_ok=True)
    secret = d / "secret"
    fd = os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.write(fd, (os.urandom(32).hex() + "\n").encode())
    os.close(fd)
    tokens = d / "tokens"
    toks = {u: run_loom("token", "create", "--user", u, "--tokens-file", str(tokens), check=True).stdout.strip()
            for u in users}
    return secret, tokens, toks


def test_restart_with_authentication(durable, tmp_path, monkeypatch):
    """With a cluster secret and client tokens: workers resume with the transfer keys they had
    (tokens clients hold stay good), the training loop's result is bitwise unchanged, and a
    session resumes only under a token of the same user."""
    from loomtest import SOURCE_DIR
    sys.path.insert(0, str(SOURCE_DIR / "tests" / "integration"))
    import wire
    d = durable
    secret, tokens, toks = make_auth(tmp_path, ("alice", "bob"))
    monkeypatch.setenv("LOOM_TOKEN", toks["alice"])
    d.controller("--secret-file", str(secret), "--tokens-file", str(tokens))
    w0 = d.worker("w0", "--secret-file", str(secret))
    d.wait_workers(1, 0)
    w1 = d.worker("w1", "--secret-file", str(secret))
    d.wait_workers(2, 0)
    train(d, tmp_path / "ref.npz")
    step = random.Random().randint(5, 190)
    t = threading.Thread(target=lambda ctl: (ctl.wait(timeout=120), d.restart()), args=(d.ctl,))
    t.start()
    train(d, tmp_path / "kill.npz", "--kill-pid", d.ctl.pid, "--kill-step", step)
    t.join(timeout=30)
    assert bitwise_equal(tmp_path / "ref.npz", tmp_path / "kill.npz")
    assert w0.poll() is None and w1.poll() is None
    ok, st = workers_alive(d, [w0.pid, w1.pid])
    assert ok, st
    # a session of alice's, resumed under bob's token: refused; under alice's: resumed
    c = wire.Conn(d.addr)
    f = c.handshake()
    sid, sec = f[3][0], f[17][0]
    d.kill_controller()
    c.close()
    d.restart()
    d.wait_serving()

    def resume(token):
        k = wire.Conn(d.addr)
        k.send(wire.frame(wire.HELLO, wire.hello(token=token) + wire.field_varint(16, sid) +
                          wire.field_bytes(17, sec), request_id=1))
        return k

    code, msg, _ = resume(toks["bob"]).expect_error()
    assert code == wire.PERMISSION and "belongs to user 'alice'" in msg, msg
    t_, rid, meta, _ = resume(toks["alice"]).recv_frame()
    assert t_ == wire.HELLO_REPLY and wire.parse_fields(meta)[3][0] == sid


def test_loom_up_restarts_its_controller_from_the_journal(tmp_path, monkeypatch):
    """`loom up --state DIR`: the supervisor starts a controller that SIGKILL took again, on the same
    address and journal; the training loop that was running finishes bitwise equal to one without
    the fault, and `loom down` still stops everything cleanly."""
    env = {k: v for k, v in os.environ.items() if k not in ("LOOM_CONTROLLER", "LOOM_PROXY_PORT")}
    env["LOOM_STATE_DIR"] = str(tmp_path / "up-state")
    monkeypatch.setenv("LOOM_STATE_DIR", env["LOOM_STATE_DIR"])  # the training client finds its token there
    r = run_loom("up", "--detach", "--proxy-port", "0", "--state", str(tmp_path / "journal"), env=env, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    try:
        cluster = dict(line.split("=", 1) for line in (tmp_path / "up-state" / "cluster").read_text().split())
        addr, pid = cluster["address"], int(cluster["controller_pid"])
        d = type("Up", (), {"addr": addr})()
        train(d, tmp_path / "ref.npz")
        step = random.Random().randint(5, 190)
        r = train(d, tmp_path / "kill.npz", "--kill-pid", pid, "--kill-step", step)
        assert f"step {step}: sent SIGKILL" in r.stdout
        assert bitwise_equal(tmp_path / "ref.npz", tmp_path / "kill.npz")
        log = (tmp_path / "up-state" / "up.log").read_text()
        assert "restarted the controller" in log and "from its journal" in log, log
        again = dict(line.split("=", 1) for line in (tmp_path / "up-state" / "cluster").read_text().split())
        assert again["address"] == addr and int(again["controller_pid"]) != pid, again
        st = json.loads(run_loom("status", "--json", env=env, timeout=30, check=True).stdout)
        assert st["journal"].endswith("journal.db (ok)"), st["journal"]
        assert sum(w["alive"] for w in st["workers"]) == 2, st
    finally:
        dn = run_loom("down", env=env, timeout=60)
    assert dn.returncode == 0, dn.stdout + dn.stderr




def test_pool_sessions_survive_a_restart(durable, tmp_path):
    """Two pool sessions (batch on devices 0-3 and prod on 4-7 of the cluster), each in a chain of
    launches; the controller is SIGKILLed and restarted: both clients resume their sessions on the
    same devices (kept for them meanwhile), with no error, and each chain ends bitwise where an
    undisturbed one does."""
    import numpy as np
    import loom
    d = durable
    d.controller()
    d.two_workers()
    sh = loom.Sharding.named(np.arange(4), ("d",), ("d",))
    x0 = np.arange(8, dtype=np.float32) * 0.41 + 0.5
    runs = []
    for cls in ("batch", "prod"):
        cl = loom.connect(d.addr, devices=4, priority=cls, name=f"pool-{cls}", progress=False, timeout=120)
        runs.append(Chain(cl, cl.compile(CHAIN_STEP_4), x0, sh, start=False))

    def sessions():
        r = run_loom("sessions", "--json", "--controller", d.addr, check=True)
        return {s["session"]: s for s in json.loads(r.stdout)["sessions"]}

    before = sessions()
    devs = [before[r["cl"].session]["device_ids"] for r in runs]
    assert sorted(map(tuple, devs)) == [(0, 1, 2, 3), (4, 5, 6, 7)], before
    ts = [r.thread for r in runs]
    for t in ts:
        t.start()
    wait_for(lambda: all(r["n"] >= 10 for r in runs), 30, what="both chains running")
    time.sleep(0.5)  # the pool's records are journaled
    d.kill_controller()
    at = [r["n"] for r in runs]
    d.restart()
    d.wait_serving()
    wait_for(lambda: all(r["n"] >= a + 10 for r, a in zip(runs, at)), 60, what="both chains after the restart")
    after = sessions()
    for r, dv in zip(runs, devs):
        s = after[r["cl"].session]
        assert s["state"] == "running" and s["device_ids"] == dv, after
    for r in runs:
        r["stop"] = True
    for t in ts:
        t.join(60)
    assert [r["err"] for r in runs] == [None, None], [r["err"] for r in runs]
    assert "resumed after the restart on its devices" in d.log(f"controller{d.starts}")
    for r in runs:
        r["cl"].close()
    ref = loom.connect(d.addr, devices=4, progress=False, timeout=60)
    e2 = ref.compile(CHAIN_STEP_4)
    for r in runs:
        assert r["x"].tobytes() == chain_value(ref, e2, x0, sh, r["n"])
    ref.close()
