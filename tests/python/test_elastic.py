"""Elastic recovery (docs/elastic.md) end to end: a controller, two workers of 4 CPU devices and
standbys as real processes, and a 200-step data-parallel training loop in a Python client
(tests/integration/elastic_train.py). A worker is SIGKILLed (or SIGSTOPped long enough to be
fenced) at a random step while launches are in flight; the final parameters must be bitwise equal
to those of a run without the fault. Also: no standby and a new worker joining, no standby and
the wait running out (a clear error), and an array that has no replica and no snapshot (an error
naming it)."""
import json
import os
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from loomtest import SOURCE_DIR, run_loom, wait_for

LOOM_BIN = os.environ.get("LOOM_BIN", str(SOURCE_DIR / "build" / "bin" / "loom"))
TRAIN = SOURCE_DIR / "tests" / "integration" / "elastic_train.py"


class Daemons:
    """A controller and workers started by hand, each logging to a file; stopped at the end."""

    def __init__(self, tmp):
        self.tmp, self.procs, self.addr = tmp, [], None

    def start(self, name, *args):
        log = open(self.tmp / f"{name}.log", "wb")
        p = subprocess.Popen([LOOM_BIN, *args], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             start_new_session=True)
        p.name, p.logpath = name, self.tmp / f"{name}.log"
        self.procs.append(p)
        return p

    def controller(self, *extra):
        af = self.tmp / "controller.addr"
        self.start("controller", "controller", "--listen", "127.0.0.1:0", "--address-file", str(af), *extra)
        self.addr = wait_for(lambda: af.exists() and af.read_text().strip(), 30, what="the controller")
        return self.addr

    def worker(self, name, *extra):
        return self.start(name, "worker", "--controller", self.addr, "--devices", "4", "--device-memory", "256M",
                          *extra)

    def two_workers(self):
        """Workers w0 and w1 registered in that order (worker ids 0 and 1, devices 0-3 and 4-7)."""
        w0 = self.worker("w0")
        self.wait_workers(1, 0)
        w1 = self.worker("w1")
        self.wait_workers(2, 0)
        return w0, w1

    def status(self):
        return json.loads(run_loom("status", "--json", "--controller", self.addr, check=True).stdout)

    def wait_workers(self, regular, standby):
        def ready():
            ws = self.status()["workers"]
            return (sum(w["alive"] and not w["standby"] for w in ws) >= regular and
                    sum(w["alive"] and w["standby"] for w in ws) >= standby)
        wait_for(ready, 30, what=f"{regular} workers and {standby} standbys")

    def log(self, name):
        return (self.tmp / f"{name}.log").read_text(errors="replace")

    def stop(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for p in self.procs:
            print(f"----- {p.name} (pid {p.pid}, status {p.returncode}) -----\n{p.logpath.read_text()[-3000:]}")


@pytest.fixture
def daemons(tmp_path, monkeypatch):
    monkeypatch.setenv("LOOM_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("LOOM_CONTROLLER", raising=False)
    d = Daemons(tmp_path)
    yield d
    d.stop()


def train(d, out, *extra, check=True, timeout=90):
    env = dict(os.environ, LOOM_CONTROLLER=d.addr, JAX_PLATFORMS="cpu")
    r = subprocess.run([sys.executable, str(TRAIN), "--steps", "200", "--out", str(out), *map(str, extra)],
                       capture_output=True, text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL)
    print(r.stdout, r.stderr[-3000:])
    if check:
        assert r.returncode == 0, f"training failed:\n{r.stdout}\n{r.stderr[-3000:]}"
    return r


_REFERENCE = {}


def reference(d, tmp_path):
    """The final parameters of a run without a fault (the same on any cluster of 8 devices: computed
    once per module)."""
    if "path" not in _REFERENCE:
        train(d, tmp_path / "ref.npz")
        _REFERENCE["path"] = tmp_path / "ref.npz"
    return _REFERENCE["path"]


def bitwise_equal(a, b):
    x, y = np.load(a), np.load(b)
    return sorted(x.files) == sorted(y.files) and all(
        x[k].dtype == y[k].dtype and x[k].tobytes() == y[k].tobytes() for k in x.files)


def test_standby_registers_without_devices(daemons):
    daemons.controller()
    daemons.worker("w0")
    daemons.wait_workers(1, 0)
    daemons.worker("s0", "--standby")
    daemons.wait_workers(1, 1)
    st = daemons.status()
    sb = [w for w in st["workers"] if w["standby"]]
    assert len(sb) == 1 and sb[0]["devices"] == [] and sb[0]["alive"]
    assert st["totals"]["devices"] == 4 and st["totals"]["standby_workers"] == 1
    text = run_loom("status", "--controller", daemons.addr, check=True).stdout
    assert "standby" in text and "1 standby" in text
    # the standby's devices are not the client's: 4 devices, all on worker 0
    dj = json.loads(run_loom("devices", "--json", "--controller", daemons.addr, check=True).stdout)
    devs = dj["devices"]
    assert len(devs) == 4 and {d["worker_id"] for d in devs} == {0} and sb[0]["id"] == 1
    assert dj["standbys"] == [{"worker_id": 1, "host": sb[0]["host"], "pid": sb[0]["pid"], "slice": "default",
                               "devices": 4}]
    assert "standby: worker 1" in run_loom("devices", "--controller", daemons.addr, check=True).stdout


def test_sigkill_at_a_random_step_with_a_standby_is_bitwise_invisible(daemons, tmp_path):
    http = tmp_path / "http.addr"
    daemons.controller("--http", "127.0.0.1:0", "--http-address-file", str(http))
    _, w1 = daemons.two_workers()
    daemons.worker("s0", "--standby")
    daemons.wait_workers(2, 1)
    ref = reference(daemons, tmp_path)
    step = random.Random().randint(5, 190)
    print(f"killing worker w1 at step {step}")
    r = train(daemons, tmp_path / "kill.npz", "--kill-pid", w1.pid, "--kill-step", step)
    assert f"step {step}: sent SIGKILL" in r.stdout
    assert bitwise_equal(ref, tmp_path / "kill.npz")
    st = daemons.status()
    assert st["recoveries"] == 1, st
    lost = [w for w in st["workers"] if not w["alive"]]
    assert len(lost) == 1 and lost[0]["pid"] == w1.pid and "replaced_by" in lost[0]
    assert any("replaced lost worker" in e for e in st["events"]), st["events"]
    assert st["totals"]["healthy_devices"] == 8
    import urllib.request  # the recovery shows in the controller's Prometheus metrics too
    metrics = urllib.request.urlopen(f"http://{http.read_text().strip()}/metrics", timeout=10).read().decode()
    assert "\nloom_recoveries_total 1\n" in metrics and "\nloom_workers_lost_total 1\n" in metrics, metrics[-2000:]
    # a second kill, of the worker that took over, with no standby left and no wait: clear error
    new = [w for w in st["workers"] if w["alive"] and w["id"] == lost[0]["replaced_by"]][0]
    r = train(daemons, tmp_path / "kill2.npz", "--kill-pid", new["pid"], "--kill-step", 20, check=False)
    # (a launch names the lost worker, a put placed after the loss its unavailable device, and a put
    # racing the kill the data port that dropped it)
    assert r.returncode != 0 and any(w in r.stderr for w in ("was lost", "is lost", "worker data port")), \
        r.stderr[-2000:]


def test_two_kills_in_sequence_with_two_standbys(daemons, tmp_path):
    daemons.controller()
    w0, w1 = daemons.two_workers()
    daemons.worker("s0", "--standby")
    daemons.worker("s1", "--standby")
    daemons.wait_workers(2, 2)
    ref = reference(daemons, tmp_path)
    rng = random.Random()
    k1 = rng.randint(5, 95)
    k2 = rng.randint(k1 + 10, 190)
    print(f"killing w1 at step {k1}, w0 at step {k2}")
    train(daemons, tmp_path / "kill.npz", "--kill-pid", w1.pid, "--kill-step", k1, "--kill2-pid", w0.pid,
          "--kill2-step", k2)
    assert bitwise_equal(ref, tmp_path / "kill.npz")
    st = daemons.status()
    assert st["recoveries"] == 2, st["events"]
    assert st["totals"]["healthy_devices"] == 8 and st["totals"]["standby_workers"] == 0


def test_no_standby_then_a_new_worker_joins(daemons, tmp_path):
    daemons.controller("--recover-wait", "30000")
    _, w1 = daemons.two_workers()
    ref = reference(daemons, tmp_path)
    env = dict(os.environ, LOOM_CONTROLLER=daemons.addr, JAX_PLATFORMS="cpu")
    t = subprocess.Popen([sys.executable, str(TRAIN), "--steps", "200", "--out", str(tmp_path / "kill.npz"),
                          "--kill-pid", str(w1.pid), "--kill-step", "60"], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    # the session waits, visibly
    st = wait_for(lambda: (s := daemons.status())["recovery"].startswith("waiting") and s, 30,
                  what="the recovery to wait for a worker")
    assert "replace lost worker" in st["recovery"], st["recovery"]
    assert "waiting for a worker" in run_loom("status", "--controller", daemons.addr, check=True).stdout
    time.sleep(0.5)
    assert t.poll() is None  # still waiting, not failed
    daemons.worker("w2")  # a plain worker: taken as the replacement
    out, err = t.communicate(timeout=60)
    print(out, err[-3000:])
    assert t.returncode == 0, err[-3000:]
    assert bitwise_equal(ref, tmp_path / "kill.npz")
    assert daemons.status()["recoveries"] == 1


def test_no_standby_and_the_wait_runs_out(daemons, tmp_path):
    daemons.controller("--recover-wait", "1000")
    _, w1 = daemons.two_workers()
    r = train(daemons, tmp_path / "kill.npz", "--kill-pid", w1.pid, "--kill-step", 30, check=False)
    assert r.returncode != 0
    assert "no standby or new worker of 4 devices replaced it within 1000 ms (--recover-wait)" in r.stderr, \
        r.stderr[-2000:]


def test_sigstop_until_fenced_then_sigcont(daemons, tmp_path):
    daemons.controller()  # default heartbeat timeout (900 ms)
    _, w1 = daemons.two_workers()
    daemons.worker("s0", "--standby")
    daemons.wait_workers(2, 1)
    ref = reference(daemons, tmp_path)
    train(daemons, tmp_path / "stop.npz", "--kill-pid", w1.pid, "--kill-step", 70, "--kill-signal", "STOP",
          "--cont-after", "2.5")
    assert bitwise_equal(ref, tmp_path / "stop.npz")
    # the stopped worker woke up fenced, dropped its state and came back as a standby (same process)
    wait_for(lambda: "rejoining as a standby" in daemons.log("w1"), 20, what="the fenced worker to rejoin")
    st = wait_for(lambda: (s := daemons.status()) and any(w["standby"] and w["alive"] and w["pid"] == w1.pid
                                                           for w in s["workers"]) and s, 20,
                  what="the fenced worker registered as a standby")
    old = [w for w in st["workers"] if w["pid"] == w1.pid and not w["alive"]]
    assert old and old[0]["reason"] == "no heartbeat" and "replaced_by" in old[0]
    assert "fenced as worker" in daemons.log("controller")


def test_a_lost_shard_with_no_replica_and_no_snapshot_names_the_array(daemons, tmp_path):
    import loom
    daemons.controller("--no-snapshots")
    _, w1 = daemons.two_workers()
    daemons.worker("s0", "--standby")
    daemons.wait_workers(2, 1)
    c = loom.connect(daemons.addr)
    try:
        x = np.arange(64, dtype=np.float32)
        a = c.put(x, loom.Sharding.tiled(range(8), 0))
        rep = c.put(x, loom.Sharding.replicated(range(8)))
        os.kill(w1.pid, signal.SIGKILL)
        wait_for(lambda: daemons.status()["recoveries"] == 1, 20, what="the recovery")
        with pytest.raises(loom.LoomError) as e:
            a.numpy()
        assert f"array {a.id} lost its shard on device 4" in str(e.value) and "no snapshot" in str(e.value)
        np.testing.assert_array_equal(rep.numpy(), x)  # restored from its replicas
    finally:
        c.close()


# ---- replay: lost arrays computed by completed launches are recomputed from the launch log ----

def _manual_8(n, body, name):
    """A shard_map-style program over 8 devices: f32[n] tiled on dimension 0, body on each shard."""
    k = n // 8
    return f"""module @{name} attributes {{mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32}} {{
  sdy.mesh @mesh = <["d"=8]> {{stablehlo.mesh = {{axes = [{{name = "d", size = 8 : i64}}]}}}}
  func.func public @main(%arg0: tensor<{n}xf32>) -> (tensor<{n}xf32> {{jax.result_info = "result"}}) {{
    %0 = sdy.manual_computation(%arg0) in_shardings=[<@mesh, [{{"d"}}]>] out_shardings=[<@mesh, [{{"d"}}]>] manual_axes={{"d"}} (%a: tensor<{k}xf32>) {{
{body.format(k=k)}
      sdy.return %r : tensor<{k}xf32>
    }} : (tensor<{n}xf32>) -> tensor<{n}xf32>
    return %0 : tensor<{n}xf32>
  }}
}}
"""


# f(x) = sin(x) * 1.37 + psum(sum of the shard): a collective over all 8 devices, so a replay runs
# on every device of the launch, the healthy workers' included
F_BODY = """      %c = stablehlo.constant dense<1.37> : tensor<f32>
      %cb = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<f32>) -> tensor<{k}xf32>
      %s = stablehlo.sine %a : tensor<{k}xf32>
      %m = stablehlo.multiply %s, %cb : tensor<{k}xf32>
      %z = stablehlo.constant dense<0.0> : tensor<f32>
      %sum = stablehlo.reduce(%a init: %z) applies stablehlo.add across dimensions = [0] : (tensor<{k}xf32>, tensor<f32>) -> tensor<f32>
      %ps = "stablehlo.all_reduce"(%sum) <{{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3, 4, 5, 6, 7]]> : tensor<1x8xi64>, use_global_device_ids}}> ({{
      ^bb0(%p: tensor<f32>, %q: tensor<f32>):
        %t = stablehlo.add %p, %q : tensor<f32>
        stablehlo.return %t : tensor<f32>
      }}) : (tensor<f32>) -> tensor<f32>
      %pb = stablehlo.broadcast_in_dim %ps, dims = [] : (tensor<f32>) -> tensor<{k}xf32>
      %r = stablehlo.add %m, %pb : tensor<{k}xf32>"""
# g(y) = y * y * 0.001 + cos(y)
G_BODY = """      %c = stablehlo.constant dense<0.001> : tensor<f32>
      %cb = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<f32>) -> tensor<{k}xf32>
      %sq = stablehlo.multiply %a, %a : tensor<{k}xf32>
      %m = stablehlo.multiply %sq, %cb : tensor<{k}xf32>
      %co = stablehlo.cosine %a : tensor<{k}xf32>
      %r = stablehlo.add %m, %co : tensor<{k}xf32>"""


def _fetch(a):
    """Every shard fetched from its worker now (Array.numpy() caches what it fetched once)."""
    return np.concatenate([a.shard(i) for i in range(8)]).tobytes()


def _replay_cluster(daemons, *controller_flags):
    # --recover-wait: puts are snapshotted even before the standby's data plane is known; periodic
    # snapshots of launch outputs off: these tests are about replays (tests/integration/test_snapshots.py
    # tests the snapshots)
    daemons.controller("--recover-wait", "30000", "--snapshot-every", "0", "--snapshot-interval", "0",
                       *controller_flags)
    _, w1 = daemons.two_workers()
    daemons.worker("s0", "--standby")
    daemons.wait_workers(2, 1)
    return w1


def test_replay_recomputes_lost_launch_outputs_bitwise(daemons):
    """x = put (snapshotted); y = f(x); z = g(y); t = g(z); z deleted (kept for the replay). Worker 1
    (devices 4-7) is SIGKILLed: y is recomputed by replaying f (x restored from its snapshot), t by
    replaying g(z), which needs z, itself recomputed from y first. Values bitwise as before."""
    import loom
    n = 4096
    w1 = _replay_cluster(daemons)
    c = loom.connect(daemons.addr)
    try:
        f = c.compile(_manual_8(n, F_BODY, "f"), name="f")
        g = c.compile(_manual_8(n, G_BODY, "g"), name="g")
        xs = np.random.default_rng(7).standard_normal(n).astype(np.float32)
        x = c.put(xs, loom.Sharding.tiled(range(8), 0))
        y = f(x)
        z = g(y)
        t = g(z)
        before = {"y": _fetch(y), "t": _fetch(t), "u": _fetch(g(t))}
        z.delete()
        os.kill(w1.pid, signal.SIGKILL)
        wait_for(lambda: daemons.status()["recoveries"] == 1, 30, what="the recovery")
        assert _fetch(y) == before["y"]
        assert _fetch(t) == before["t"]
        assert _fetch(g(t)) == before["u"]  # a later launch reads the recomputed shards
        log = daemons.log("controller")
        assert "recomputed by replaying it" in log and "recomputed its lost shards" in log, log[-3000:]
    finally:
        c.close()


def test_replay_chain_broken_by_a_deleted_input_names_the_arrays(daemons):
    """With --replay-keep-mb 0 nothing deleted is kept: y = f(x) with x deleted cannot be replayed
    after worker 1 is lost, and the error names y, the launch and x; a put with a snapshot and an
    array computed from live inputs are still restored (bitwise)."""
    import loom
    n = 4096
    w1 = _replay_cluster(daemons, "--replay-keep-mb", "0")
    c = loom.connect(daemons.addr)
    try:
        f = c.compile(_manual_8(n, F_BODY, "f"), name="f")
        xs = np.random.default_rng(3).standard_normal(n).astype(np.float32)
        x = c.put(xs, loom.Sharding.tiled(range(8), 0))
        x2 = c.put(xs * 2, loom.Sharding.tiled(range(8), 0))
        y, y2 = f(x), f(x2)
        y2_before = _fetch(y2)
        _fetch(y)
        xid = x.id
        x.delete()
        os.kill(w1.pid, signal.SIGKILL)
        wait_for(lambda: daemons.status()["recoveries"] == 1, 30, what="the recovery")
        with pytest.raises(loom.LoomError) as e:
            _fetch(y)
        msg = str(e.value)
        assert f"array {y.id} lost its shard on device 4" in msg, msg
        assert f"read array {xid}, which the client deleted and which was not kept" in msg, msg
        assert _fetch(y2) == y2_before
        assert _fetch(x2) == (xs * 2).tobytes()
    finally:
        c.close()


def test_replay_of_an_input_lost_without_snapshot_fails_naming_it(daemons):
    """--no-snapshots: x (a put) is lost for good, so y = f(x) cannot be recomputed: both errors say
    why (y's names x)."""
    import loom
    n = 4096
    w1 = _replay_cluster(daemons, "--no-snapshots")
    c = loom.connect(daemons.addr)
    try:
        f = c.compile(_manual_8(n, F_BODY, "f"), name="f")
        xs = np.arange(n, dtype=np.float32)
        x = c.put(xs, loom.Sharding.tiled(range(8), 0))
        y = f(x)
        _fetch(y)
        os.kill(w1.pid, signal.SIGKILL)
        wait_for(lambda: daemons.status()["recoveries"] == 1, 30, what="the recovery")
        with pytest.raises(loom.LoomError) as e:
            _fetch(x)
        assert "was put or loaded, not computed by a launch" in str(e.value), str(e.value)
        with pytest.raises(loom.LoomError) as e:
            _fetch(y)
        msg = str(e.value)
        assert f"array {y.id} lost its shard on device 4" in msg and f"read array {x.id}, which failed" in msg, msg
    finally:
        c.close()


def test_deleted_inputs_are_kept_for_replays_until_their_dependents_go(daemons):
    """y = f(x) has shards no other worker holds, so deleting x keeps its shards at the workers (a
    replay of y reads x); deleting y frees both. A deleted array nothing depends on is freed at once
    (the control)."""
    import loom
    n = 1 << 20  # 4 MiB of f32
    _replay_cluster(daemons)
    c = loom.connect(daemons.addr)

    def used():
        devs = json.loads(run_loom("devices", "--json", "--controller", daemons.addr, check=True).stdout)["devices"]
        return sum(d["memory_used"] for d in devs)

    def settles_at(want, what):
        wait_for(lambda: abs(used() - want) < (1 << 20), 20, what=what)

    try:
        f = c.compile(_manual_8(n, F_BODY, "f"), name="f")
        base = used()
        free = c.put(np.ones(n, np.float32), loom.Sharding.tiled(range(8), 0))
        settles_at(base + 4 * n, "the put's shards to be counted")
        free.delete()
        settles_at(base, "a deleted array nothing depends on to be freed")
        x = c.put(np.ones(n, np.float32), loom.Sharding.tiled(range(8), 0))
        y = f(x)
        y.block_until_ready()
        settles_at(base + 8 * n, "x and y to be counted")
        x.delete()
        time.sleep(1.5)  # heartbeats report memory every 200 ms
        assert abs(used() - (base + 8 * n)) < (1 << 20), "x was freed though y's replay reads it"
        y.delete()
        settles_at(base, "x to be freed once y is gone")
    finally:
        c.close()


def test_relay_killed_with_a_standby_is_bitwise_invisible(daemons, tmp_path):
    """Hierarchical dispatch (docs/scale.md): every launch goes through worker w0 as the relay of
    both workers; w0 is killed at a random step, the standby replaces it, the launches in flight
    are re-issued (through the new plan's relay) and the training ends as without the fault."""
    daemons.controller("--relay-min-workers", "2")
    w0, _ = daemons.two_workers()
    daemons.worker("s0", "--standby")
    daemons.wait_workers(2, 1)
    ref = reference(daemons, tmp_path)
    step = random.Random().randint(5, 190)
    print(f"killing the relay, worker w0, at step {step}")
    r = train(daemons, tmp_path / "kill.npz", "--kill-pid", w0.pid, "--kill-step", step)
    assert f"step {step}: sent SIGKILL" in r.stdout
    assert bitwise_equal(ref, tmp_path / "kill.npz")
    st = daemons.status()
    assert st["recoveries"] == 1, st
    assert "go through 1 relays" in daemons.log("controller")
