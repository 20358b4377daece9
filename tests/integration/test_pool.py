"""The shared pool (docs/pool.md) against a real controller and workers: sessions that ask for
devices are admitted when their devices are free and queued otherwise (priority classes in order,
FIFO within a class), see their devices as 0..n-1, are refused with the quota named, are
accounted for (launches, device-seconds, bytes), and have runaway launches cut by the watchdog."""
import json
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import Auth, Cluster, loom_package, run_loom, wait_for
from loomtest import CHAIN_STEP_4, Chain, chain_value

# Skipped (each test, so ctest reports the file as skipped) where this build's Python package is
# not what `import loom` finds: the sanitizer build has none (test_pool_cli.py covers it there).
loom, _SKIP = loom_package()
pytestmark = pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")

PROGRAMS = Path(__file__).parent / "programs"
ADD_ONE_4 = (PROGRAMS / "add_one_4.mlir").read_text()      # i32[8] + 1 over 4 devices
FOREVER_4 = (PROGRAMS / "forever_local_4.mlir").read_text()  # never ends until cancelled


def pool_json(addr, what="sessions", *extra):
    r = run_loom(what, "--json", "--controller", addr, *extra, check=True)
    return json.loads(r.stdout)


def start(procs, tmp_path, config=None, auth=None, workers=2):
    c = Cluster(procs, tmp_path, auth)
    extra = ()
    if config is not None:
        cfg = tmp_path / "loom.toml"
        cfg.write_text(config)
        extra = ("--config", str(cfg))
    c.start_controller(*extra)
    for _ in range(workers):
        c.start_worker(4)
    c.wait_devices(4 * workers)
    return c


def test_pool_session_sees_its_devices_and_runs(procs, tmp_path):
    c = start(procs, tmp_path)
    a = loom.connect(c.addr, devices=4, priority="batch", progress=False)
    b = loom.connect(c.addr, devices=4, priority="batch", progress=False)
    try:
        assert a.pool_devices == 4 and a.priority == "batch"
        assert [d.id for d in a.devices()] == [0, 1, 2, 3] == [d.id for d in b.devices()]
        # the two sessions hold different workers' devices
        assert {d.worker_id for d in a.devices()} != {d.worker_id for d in b.devices()}
        for cl in (a, b):
            exe = cl.compile(ADD_ONE_4)
            assert list(exe.devices) == [0, 1, 2, 3]
            (out,), fut = exe.launch(np.arange(8, dtype=np.int32))
            fut.result(timeout=30)
            assert np.array_equal(out.numpy(), np.arange(1, 9, dtype=np.int32))
        # a device this session does not have is refused, naming it
        with pytest.raises(loom.errors.InvalidArgumentError, match="this session has devices 0..3"):
            a.put(np.zeros(4, np.float32), sharding=5)
        s = pool_json(c.addr)["sessions"]
        mine = {x["session"]: x for x in s}
        assert mine[a.session]["state"] == "running" and len(mine[a.session]["device_ids"]) == 4
        assert not set(mine[a.session]["device_ids"]) & set(mine[b.session]["device_ids"])
        # a shared session (no devices asked) still sees every device
        sh = loom.connect(c.addr)
        assert sh.pool_devices == 0 and len(sh.devices()) == 8
        sh.close()
    finally:
        a.close()
        b.close()


def test_queue_order_under_a_burst(procs, tmp_path):
    """50 sessions arrive while the pool is full; they are admitted prod first, then interactive,
    then batch, each class first come first served, one at a time (each wants every device)."""
    c = start(procs, tmp_path)
    holder = loom.connect(c.addr, devices=8, priority="prod", progress=False)  # the top class: never preempted
    classes = ["batch", "interactive", "prod"]
    rng = np.random.default_rng(7)
    plan = [(i, classes[int(rng.integers(3))]) for i in range(50)]
    admitted, errors = [], []
    lock = threading.Lock()

    def client(i, cls):
        try:
            cl = loom.connect(c.addr, devices=8, priority=cls, name=f"burst-{i}", progress=False, timeout=120)
            with lock:
                admitted.append(i)
            assert len(cl.devices()) == 8
            cl.close()
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(f"{i}: {e}")

    threads = []
    for i, cls in plan:  # one by one, so the arrival order is known
        t = threading.Thread(target=client, args=(i, cls), daemon=True)
        t.start()
        threads.append(t)
        wait_for(lambda: len(pool_json(c.addr, "queue")["queue"]) == i + 1, 30, what=f"session {i} in the queue")
    q = pool_json(c.addr, "queue")["queue"]
    rank = {"prod": 0, "interactive": 1, "batch": 2}
    expect = [i for i, _ in sorted(plan, key=lambda p: rank[p[1]])]  # stable: FIFO within a class
    assert [int(x["name"].split("-")[1]) for x in q] == expect
    assert [x["position"] for x in q] == list(range(1, 51))
    # text form shows it too
    assert "waiting for 8 devices to be free" in run_loom("queue", "--controller", c.addr, check=True).stdout
    holder.close()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    assert admitted == expect
    assert pool_json(c.addr, "queue")["queue"] == []


def test_waiting_client_prints_progress(procs, tmp_path):
    c = start(procs, tmp_path, workers=1)
    holder = loom.connect(c.addr, devices=4, priority="prod", progress=False)
    x = tmp_path / "x.npy"
    np.save(x, np.arange(8, dtype=np.int32))
    import subprocess
    from loomtest import LOOM_BIN
    p = subprocess.Popen([LOOM_BIN, "run", str(PROGRAMS / "add_one_4.mlir"), "--input", str(x), "--pool-devices", "4",
                          "--priority", "batch", "--controller", c.addr], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    wait_for(lambda: pool_json(c.addr, "queue")["queue"], 30, what="the run in the queue")
    time.sleep(2.5)  # at least one periodic update
    holder.close()
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    assert "[1 2 3 4 5 6 7 8]" in out
    assert "waiting for 4 devices (batch): 1 of 1 in the queue" in err
    assert "admitted on 4 devices (batch)" in err


QUOTAS = """
# classes, highest first
[pool]
classes = ["prod", "interactive", "batch"]
default_class = "batch"

[quota.default]
devices = 8
sessions = 3

[quota.alice]
devices = 4
sessions = 2
device_memory = "1KiB"
queued_launches = 1
"""


def test_quota_refusals_name_the_quota(procs, tmp_path, monkeypatch):
    auth = Auth(tmp_path, users=("alice", "bob", "ops"))
    monkeypatch.setenv("LOOM_TOKEN", auth.tokens["ops"])  # the CLI's own sessions
    c = start(procs, tmp_path, config=QUOTAS, auth=auth)
    ta, tb = auth.tokens["alice"], auth.tokens["bob"]
    with pytest.raises(loom.errors.BusyError, match=r"asks for 8 devices, more than the quota devices = 4 of user alice"):
        loom.connect(c.addr, token=ta, devices=8, progress=False)
    with pytest.raises(loom.errors.InvalidArgumentError, match="unknown priority class 'urgent'"):
        loom.connect(c.addr, token=tb, devices=1, priority="urgent", progress=False)
    with pytest.raises(loom.errors.InvalidArgumentError, match="asks for 9 devices but the cluster has 8"):
        loom.connect(c.addr, token=tb, devices=9, progress=False)
    a = loom.connect(c.addr, token=ta, devices=4, progress=False)
    assert a.priority == "batch"  # default_class
    # device_memory: 1 KiB for alice
    small = a.put(np.zeros(64, np.int32))  # 256 bytes
    with pytest.raises(loom.errors.DeviceOutOfMemoryError, match=r"quota device_memory = 1.0 KiB of user alice"):
        a.put(np.zeros(512, np.int32))
    small.delete()
    # queued_launches: one at a time for alice
    exe = a.compile(FOREVER_4)
    _, fut = exe.launch()
    with pytest.raises(loom.errors.BusyError, match=r"quota queued_launches = 1 of user alice"):
        exe.launch()[1].result(timeout=30)
    fut.cancel()
    # sessions: alice may hold 2
    a2 = loom.connect(c.addr, token=ta, progress=False)
    with pytest.raises(loom.errors.BusyError, match=r"quota sessions = 2 of user alice \(\[quota.alice\]"):
        loom.connect(c.addr, token=ta, progress=False)
    # bob has the default quota: 8 devices minus alice's 4 wait; 4 fit now
    b = loom.connect(c.addr, token=tb, devices=4, progress=False)
    assert b.pool_devices == 4
    for cl in (a, a2, b):
        cl.close()


def test_time_sharing_sessions_split_device_memory(procs, tmp_path):
    """`session_device_memory` gives each session its own share of device memory: two sessions
    time-sharing the same devices each hold up to 1 KiB, whatever the other holds."""
    c = start(procs, tmp_path, config='[quota.default]\nsession_device_memory = "1KiB"\n')
    a = loom.connect(c.addr, devices=4, weight=1, progress=False)
    b = loom.connect(c.addr, devices=4, weight=2, progress=False)
    try:
        sa = {x["session"]: x for x in pool_json(c.addr)["sessions"]}
        assert sa[a.session]["device_ids"] == sa[b.session]["device_ids"]  # the same devices
        xa = a.put(np.arange(192, dtype=np.int32))  # 768 bytes
        with pytest.raises(loom.errors.DeviceOutOfMemoryError,
                           match=rf"session {a.session} holds 768 B already: quota session_device_memory = 1.0 KiB"):
            a.put(np.zeros(128, np.int32))
        xb = b.put(np.arange(192, dtype=np.int32))  # b has a share of its own
        assert np.array_equal(xa.numpy(), xb.numpy())
        xa.delete()
        a.put(np.zeros(128, np.int32)).block_until_ready(timeout=30)  # freed: fits again
    finally:
        a.close()
        b.close()


def test_bad_config_is_refused_with_the_line(procs, tmp_path):
    cfg = tmp_path / "bad.toml"
    cfg.write_text('[pool]\nclasses = ["a", "b"]\n[quota.bob]\ndevices = "many"\n')
    r = run_loom("controller", "--listen", "127.0.0.1:0", "--config", str(cfg), timeout=30)
    assert r.returncode != 0 and "bad.toml:4: bad value for devices" in r.stderr
    cfg.write_text('[pool]\nclasses = ["a"]\n[class.b]\nlaunch_limit = "1s"\n')
    r = run_loom("controller", "--listen", "127.0.0.1:0", "--config", str(cfg), timeout=30)
    assert r.returncode != 0 and "bad.toml:3: [class.b] names no class" in r.stderr


def test_accounting(procs, tmp_path):
    c = start(procs, tmp_path, workers=1)
    t0 = time.monotonic()
    cl = loom.connect(c.addr, devices=4, priority="interactive", name="acct", progress=False)
    exe = cl.compile(ADD_ONE_4)
    x = cl.put(np.arange(8, dtype=np.int32), sharding=loom.Sharding.named(np.arange(4), ("d",), ("d",)))
    for _ in range(5):
        (out,), fut = exe.launch(x)
        fut.result(timeout=30)
        assert np.array_equal(out.numpy(), np.arange(1, 9, dtype=np.int32))
    time.sleep(0.5)
    s = next(x for x in pool_json(c.addr)["sessions"] if x["session"] == cl.session)
    u = s["usage"]
    assert u["launches"] == 5 and u["launches_failed"] == 0
    assert u["bytes_in"] == 32  # the put: 8 x int32
    assert u["bytes_out"] == 5 * 32  # five gets of the result
    assert 0 < u["device_seconds"] < 4 * (time.monotonic() - t0)
    assert 4 * 0.5 <= u["held_device_seconds"] <= 4 * (time.monotonic() - t0) + 0.5
    cl.close()
    usage = pool_json(c.addr, "usage")
    (me,) = [x for x in usage["users"] if x["user"] == ""]
    assert me["usage"]["launches"] == 5 and me["usage"]["bytes_out"] == 160
    closed = next(x for x in usage["sessions"] if x["session"] == s["session"])
    assert closed["state"] == "closed" and closed["closed_unix_ms"] >= closed["opened_unix_ms"]
    # --since after it closed leaves it out
    time.sleep(1.2)
    later = pool_json(c.addr, "usage", "--since", "1s")
    assert all(x["session"] != s["session"] for x in later["sessions"])
    assert "acct" in run_loom("sessions", "--all", "--controller", c.addr, check=True).stdout


WATCHDOG = """
[pool]
classes = ["prod", "batch"]
[class.batch]
launch_limit = "1s"
"""


def test_watchdog_cuts_a_runaway_launch_and_frees_the_devices(procs, tmp_path):
    c = start(procs, tmp_path, config=WATCHDOG, workers=1)
    cl = loom.connect(c.addr, devices=4, priority="batch", progress=False)
    exe = cl.compile(FOREVER_4)
    t0 = time.monotonic()
    _, fut = exe.launch()
    with pytest.raises(loom.errors.TimeoutError, match=r"past its session's limit of 1000 ms \(class batch\): the watchdog"):
        fut.result(timeout=30)
    assert time.monotonic() - t0 < 10
    # the devices work again for the same session ...
    (out,), f2 = cl.compile(ADD_ONE_4).launch(np.arange(8, dtype=np.int32))
    f2.result(timeout=30)
    assert np.array_equal(out.numpy(), np.arange(1, 9, dtype=np.int32))
    s = next(x for x in pool_json(c.addr)["sessions"] if x["session"] == cl.session)
    assert s["usage"]["launches_timed_out"] == 1 and s["launch_limit_ms"] == 1000
    cl.close()
    # ... and for the next session; a prod session has no limit, a client may set a lower one
    p = loom.connect(c.addr, devices=4, priority="prod", launch_limit=0.5, progress=False)
    _, fut = p.compile(FOREVER_4).launch()
    with pytest.raises(loom.errors.TimeoutError, match="limit of 500 ms"):
        fut.result(timeout=30)
    p.close()




def test_preemption_suspends_and_resumes_bitwise(procs, tmp_path):
    """A batch session in the middle of a chain of launches is suspended for a prod session that
    needs its devices, then resumes by itself: its client sees no error and its result is bitwise
    the result of the same chain run undisturbed."""
    c = start(procs, tmp_path, workers=1)
    b = loom.connect(c.addr, devices=4, priority="batch", name="victim", progress=False, timeout=120)
    exe = b.compile(CHAIN_STEP_4)
    sh = loom.Sharding.named(np.arange(4), ("d",), ("d",))
    x0 = np.arange(8, dtype=np.float32) * 0.37 + 0.5
    state = Chain(b, exe, x0, sh)
    t = state.thread
    wait_for(lambda: state["n"] >= 5, 30, what="the batch chain running")
    t0 = time.monotonic()
    p = loom.connect(c.addr, devices=4, priority="prod", name="urgent", progress=False)
    waited = time.monotonic() - t0
    assert waited < 10
    s = {x["session"]: x for x in pool_json(c.addr)["sessions"]}
    assert s[b.session]["state"] == "suspended" and s[b.session]["suspensions"] == 1
    assert s[p.session]["device_ids"] == s[b.session]["device_ids"]
    n_at = state["n"]
    (out,), fut = p.compile(ADD_ONE_4).launch(np.arange(8, dtype=np.int32))
    fut.result(timeout=30)
    assert np.array_equal(out.numpy(), np.arange(1, 9, dtype=np.int32))
    time.sleep(0.5)
    assert state["n"] <= n_at + 1  # held while suspended
    p.close()
    wait_for(lambda: state["n"] >= n_at + 5, 30, what="the batch chain resumed")
    state["stop"] = True
    t.join(60)
    assert state["err"] is None, state["err"]
    s = {x["session"]: x for x in pool_json(c.addr)["sessions"]}
    assert s[b.session]["state"] == "running" and s[b.session]["suspended_ms"] > 0
    count = state["n"]
    b.close()
    ref = loom.connect(c.addr, devices=4, progress=False)
    e2 = ref.compile(CHAIN_STEP_4)
    assert state["x"].tobytes() == chain_value(ref, e2, x0, sh, count)
    ref.close()
    print(f"preempted after a {waited * 1000:.0f} ms wait; chain of {count} launches bitwise equal")


def test_a_suspended_session_gives_back_its_device_memory(procs, tmp_path):
    """Preempted, a batch session's shards move to host memory (STASH), so the prod session that
    took its devices can use their memory too: with 64 MiB devices, batch's 40 MiB per device and
    prod's 40 MiB per device fit only because batch's left. Resumed, batch's array is bitwise what
    it put, back on its devices, and its launches run."""
    c = Cluster(procs, tmp_path)
    c.start_controller()
    c.start_worker(4, memory="64MiB")
    c.wait_devices(4)
    sh = loom.Sharding.named(np.arange(4), ("d",), ("d",))
    x = np.random.default_rng(7).standard_normal((4, 10 << 20 >> 2), dtype=np.float32)  # 10 MiB rows
    x = np.repeat(x, 4, axis=1)  # 40 MiB per device
    b = loom.connect(c.addr, devices=4, priority="batch", name="victim", progress=False, timeout=120)
    xb = b.put(x, sharding=sh)
    xb.block_until_ready(timeout=60)

    def in_use():
        return sum(d["memory_used"] for d in json.loads(run_loom("devices", "--json", "--controller", c.addr,
                                                                  check=True).stdout)["devices"])

    wait_for(lambda: in_use() >= 160 << 20, 10, what="batch's shards counted")
    p = loom.connect(c.addr, devices=4, priority="prod", name="urgent", progress=False, timeout=120)
    s = {v["session"]: v for v in pool_json(c.addr)["sessions"]}
    assert s[b.session]["state"] == "suspended", s
    xp = p.put(-x, sharding=sh)  # refused as out of device memory if batch's shards were still there
    xp.block_until_ready(timeout=60)
    (out,), fut = p.compile(ADD_ONE_4).launch(np.arange(8, dtype=np.int32))
    fut.result(timeout=30)
    assert np.array_equal(xp.numpy(), -x)
    assert "moved to host memory" in procs.log(c.workers[0])
    p.close()
    wait_for(lambda: {v["session"]: v for v in pool_json(c.addr)["sessions"]}[b.session]["state"] == "running", 30,
             what="the batch session resumed")
    assert xb.numpy().tobytes() == x.tobytes()
    (out,), fut = b.compile(ADD_ONE_4).launch(np.arange(8, dtype=np.int32))
    fut.result(timeout=30)
    assert np.array_equal(out.numpy(), np.arange(1, 9, dtype=np.int32))
    wait_for(lambda: "moved back on their devices" in procs.log(c.workers[0]), 10, what="the shards moved back")
    wait_for(lambda: in_use() >= 160 << 20, 10, what="batch's shards charged to their devices again")
    b.close()


def test_a_sharing_group_is_preempted_and_resumes_whole(procs, tmp_path):
    """Two batch sessions time-sharing 4 devices, each in a chain of launches, are suspended
    together for a prod session that needs the devices, and resume together when it is done: no
    error in either client, and each chain's result bitwise that of the same chain undisturbed."""
    c = start(procs, tmp_path, workers=1)
    sh = loom.Sharding.named(np.arange(4), ("d",), ("d",))
    x0 = np.arange(8, dtype=np.float32) * 0.37 + 0.5
    runs = []
    for w in (1, 2):
        cl = loom.connect(c.addr, devices=4, weight=w, priority="batch", progress=False, timeout=120)
        runs.append(Chain(cl, cl.compile(CHAIN_STEP_4), x0, sh, start=False))
    ts = [r.thread for r in runs]
    for t in ts:
        t.start()
    wait_for(lambda: all(r["n"] >= 5 for r in runs), 30, what="both sharing chains running")
    p = loom.connect(c.addr, devices=4, priority="prod", name="urgent", progress=False, timeout=60)
    st = {x["session"]: x for x in pool_json(c.addr)["sessions"]}
    assert [st[r["cl"].session]["state"] for r in runs] == ["suspended", "suspended"], st
    at = [r["n"] for r in runs]
    (out,), fut = p.compile(ADD_ONE_4).launch(np.arange(8, dtype=np.int32))
    fut.result(timeout=30)
    assert np.array_equal(out.numpy(), np.arange(1, 9, dtype=np.int32))
    time.sleep(0.5)
    assert all(r["n"] <= a + 1 for r, a in zip(runs, at))  # held while suspended
    p.close()
    wait_for(lambda: all(r["n"] >= a + 5 for r, a in zip(runs, at)), 30, what="both chains resumed")
    for r in runs:
        r["stop"] = True
    for t in ts:
        t.join(60)
    assert [r["err"] for r in runs] == [None, None], [r["err"] for r in runs]
    st = {x["session"]: x for x in pool_json(c.addr)["sessions"]}
    assert all(st[r["cl"].session]["state"] == "running" and st[r["cl"].session]["suspensions"] == 1 for r in runs), st
    for r in runs:
        r["cl"].close()
    ref = loom.connect(c.addr, devices=4, progress=False)
    e2 = ref.compile(CHAIN_STEP_4)
    for r in runs:
        assert r["x"].tobytes() == chain_value(ref, e2, x0, sh, r["n"])
    ref.close()


def spin_program(nd, k):
    return (PROGRAMS / "spin_4.mlir").read_text().replace("dense<1000000>", f"dense<{k}>") if nd == 4 else None


def test_time_sharing_in_proportion_to_weights(procs, tmp_path):
    """Three sessions with weights 1, 2 and 4 share the same 4 devices, each keeping launches queued:
    over a window where all are busy, their launches go in proportion 1:2:4 (within 10%)."""
    c = start(procs, tmp_path, workers=1)
    prog = spin_program(4, 3000)
    assert "dense<3000>" in prog
    clients = [loom.connect(c.addr, devices=4, weight=w, name=f"w{w}", progress=False) for w in (1, 2, 4)]
    assert len({tuple(x["device_ids"]) for x in pool_json(c.addr)["sessions"] if x["name"].startswith("w")}) == 1
    stop = threading.Event()
    errors = []

    def pump(cl):
        try:
            exe = cl.compile(prog)
            futs = [exe.launch()[1] for _ in range(6)]
            while not stop.is_set():
                futs.pop(0).result(timeout=60)
                futs.append(exe.launch()[1])
            for f in futs:
                f.result(timeout=60)
        except Exception as e:  # noqa: BLE001 (checked below)
            errors.append(e)

    ts = [threading.Thread(target=pump, args=(cl,), daemon=True) for cl in clients]
    for t in ts:
        t.start()

    def counts():
        by = {x["session"]: x["usage"]["launches"] for x in pool_json(c.addr)["sessions"]}
        return [by[cl.session] for cl in clients]

    time.sleep(2.0)
    a = counts()
    t0 = time.monotonic()  # a window of at least 8 s and 140 launches (slower builds take longer)
    while True:
        time.sleep(1.0)
        b = counts()
        if (time.monotonic() - t0 >= 8 and sum(b) - sum(a) >= 140) or time.monotonic() - t0 > 40:
            break
    stop.set()
    for t in ts:
        t.join(60)
    assert not errors, errors
    d = [y - x for x, y in zip(a, b)]
    total = sum(d)
    assert total >= 70, d  # enough launches for the ratio to mean something
    for w, n in zip((1, 2, 4), d):
        share = n / total
        assert abs(share - w / 7) <= 0.1 * w / 7, (d, [round(x / total, 3) for x in d])
    print(f"launches by weight 1:2:4 -> {d[0]}:{d[1]}:{d[2]}")
    for cl in clients:
        cl.close()


def test_preemption_waits_for_grace_and_minimum_run(procs, tmp_path):
    cfg = '[pool]\nclasses = ["prod", "batch"]\npreempt_grace = "1s"\nmin_run = "2500ms"\n'
    c = start(procs, tmp_path, config=cfg, workers=1)
    b = loom.connect(c.addr, devices=4, priority="batch", progress=False)
    t0 = time.monotonic()
    p = loom.connect(c.addr, devices=4, priority="prod", progress=False)
    waited = time.monotonic() - t0
    assert 2.3 <= waited <= 8, waited  # the victim's minimum run (2.5 s since its admission) bounds it
    assert p.queued_ms >= 2000
    s = {x["session"]: x for x in pool_json(c.addr)["sessions"]}
    assert s[b.session]["state"] == "suspended"
    p.close()
    wait_for(lambda: {x["session"]: x for x in pool_json(c.addr)["sessions"]}[b.session]["state"] == "running", 10,
             what="the victim resumed")
    # resumed just now: its minimum run starts again; a prod session also waits its grace first
    t0 = time.monotonic()
    p2 = loom.connect(c.addr, devices=4, priority="prod", progress=False)
    assert 2.0 <= time.monotonic() - t0 <= 8
    p2.close()
    b.close()
