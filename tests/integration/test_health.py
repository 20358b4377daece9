"""Worker health: a worker killed with SIGKILL (its connection closes) or frozen with SIGSTOP (its
heartbeats stop) turns its devices unhealthy, the other devices stay healthy, and virtual ids are
never reused."""
import json
import signal
import time

from conftest import Cluster, devices, run_loom, wait_for


def _health(addr):
    return [(x["id"], x["pid"], x["healthy"], x["health_reason"]) for x in devices(addr)["devices"]]


def test_sigkill_makes_devices_unhealthy_within_2s(cluster, procs):
    victim, survivor = cluster.workers[1], cluster.workers[0]
    before = _health(cluster.addr)
    victim_ids = [i for i, pid, _, _ in before if pid == victim.pid]
    assert len(victim_ids) == 4
    t0 = time.monotonic()
    procs.kill(victim, signal.SIGKILL)

    def unhealthy():
        h = _health(cluster.addr)
        return h if all(not ok for i, _, ok, _ in h if i in victim_ids) else None

    h = wait_for(unhealthy, 2.0, interval=0.02, what="the killed worker's devices to turn unhealthy")
    elapsed = time.monotonic() - t0
    assert elapsed < 2.0
    for i, pid, ok, reason in h:
        if i in victim_ids:
            assert reason == "connection closed"
        else:
            assert ok and pid == survivor.pid  # the others stay healthy
    s = json.loads(run_loom("status", "--json", "--controller", cluster.addr, check=True).stdout)
    assert [w["alive"] for w in s["workers"] if w["pid"] == victim.pid] == [False]
    assert s["totals"]["healthy_devices"] == 4 and s["totals"]["devices"] == 8
    print(f"unhealthy after {elapsed * 1000:.0f} ms")


def test_stopped_heartbeats_make_devices_unhealthy(procs, tmp_path):
    c = Cluster(procs, tmp_path)
    c.start_controller("--heartbeat-interval", "100", "--heartbeat-timeout", "1500")
    a = c.start_worker(2)
    b = c.start_worker(2)
    c.wait_devices(4)
    time.sleep(2.0)  # longer than the timeout: heartbeats keep both alive
    assert all(ok for _, _, ok, _ in _health(c.addr))
    procs.kill(b, signal.SIGSTOP)  # frozen: connection open, no heartbeats
    t0 = time.monotonic()
    h = wait_for(lambda: (lambda h: h if sum(ok for _, _, ok, _ in h) == 2 else None)(_health(c.addr)), 8,
                 what="the frozen worker to be declared lost")
    assert time.monotonic() - t0 < 4.0  # the timeout plus one health check and one poll
    for _, pid, ok, reason in h:
        assert ok == (pid == a.pid)
        if pid == b.pid:
            assert reason == "no heartbeat"
    # thawed, the worker finds it was declared lost (fenced), drops its state and rejoins as a
    # standby, in the same process (docs/elastic.md)
    b.send_signal(signal.SIGCONT)
    wait_for(lambda: "rejoining as a standby" in procs.log(b), 20, what="the fenced worker to rejoin")
    wait_for(lambda: "fenced as worker" in procs.log(c.controller), 20, what="the controller to see it rejoin")
    assert b.poll() is None
    assert "no heartbeat" in procs.log(c.controller)


def test_virtual_ids_are_stable_and_never_reused(cluster, procs):
    victim = cluster.workers[0]
    procs.kill(victim, signal.SIGKILL)
    cluster.wait_devices(8, healthy=4)
    cluster.start_worker(4, slice_name="slice-b")
    d = cluster.wait_devices(12, healthy=8)
    ids = [x["id"] for x in d["devices"]]
    assert ids == list(range(12))
    new = [x for x in d["devices"] if x["slice"] == "slice-b"]
    assert [x["id"] for x in new] == [8, 9, 10, 11]  # after the lost worker's, not in place of them
    assert all(x["healthy"] for x in new)
    assert all(x["healthy"] == (x["pid"] != victim.pid) for x in d["devices"])


def test_controller_stops_cleanly_with_workers_attached(cluster, procs):
    """SIGTERM to the controller: it stops (status 0), and its workers notice and stop too."""
    cluster.controller.send_signal(signal.SIGTERM)
    assert cluster.controller.wait(timeout=20) == 0
    for w in cluster.workers:
        assert w.wait(timeout=20) == 1
        w.expect_clean = False
        assert "lost the controller" in procs.log(w)
