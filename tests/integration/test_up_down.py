"""`loom up` / `loom down`: a local cluster from one command, found by the client commands
through the state directory, stopped with no process left behind (detached and foreground)."""
import json
import os
import re
import signal
import subprocess
import time
from contextlib import contextmanager

import pytest

from conftest import LOOM_BIN, pid_gone, run_loom, wait_for


def state(state_dir):
    """The `cluster` state file as a dict."""
    out = {}
    for line in (state_dir / "cluster").read_text().splitlines():
        k, _, v = line.partition("=")
        out[k] = v
    return out


def cluster_pids(st):
    pids = [int(st["supervisor_pid"]), int(st["controller_pid"])]
    pids += [int(x.split(":")[0]) for x in st["workers"].split(",") if x]
    return pids


@contextmanager
def foreground_up(tmp_path, *args):
    """`loom up ARGS` in the foreground, its output in tmp_path/up.out: yields the process once the
    cluster is up, and kills it at the end if it is still running."""
    log = tmp_path / "up.out"
    with open(log, "w") as out:
        p = subprocess.Popen([LOOM_BIN, "up", *args], stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            wait_for(lambda: "controller:" in log.read_text(), 60, what="the cluster to be up")
            yield p
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()


def processes_mentioning(text):
    """Live processes whose command line contains text (the controller names the state dir)."""
    found = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmd and not pid_gone(int(p)):
            found.append((int(p), cmd))
    return found


@pytest.fixture
def state_dir(tmp_path):
    d = tmp_path / "state"
    yield d
    # whatever happened, nothing of this test's cluster may survive it
    if (d / "cluster").exists():
        run_loom("down", timeout=60)
        try:
            for pid in cluster_pids(state(d)):
                if not pid_gone(pid):
                    os.kill(pid, signal.SIGKILL)
        except (OSError, KeyError, ValueError):
            pass
    for pid, _ in processes_mentioning(str(d)):
        os.kill(pid, signal.SIGKILL)


def test_up_detach_devices_down_leaves_nothing(state_dir):
    r = run_loom("up", "--detach", "--workers", "2", "--devices-per-worker", "4", timeout=120)
    assert r.returncode == 0, r.stderr
    m = re.search(r"^controller: (\S+)$", r.stdout, re.M)
    assert m, r.stdout
    addr = m.group(1)
    assert "8 devices on 2 workers" in r.stdout
    st = state(state_dir)
    assert st["address"] == addr
    pids = cluster_pids(st)
    assert len(pids) == 4 and not any(pid_gone(p) for p in pids)

    # the client commands find the local cluster without being told
    d = json.loads(run_loom("devices", "--json", check=True).stdout)
    assert [x["id"] for x in d["devices"]] == list(range(8))
    assert d["controller"] == addr and all(x["healthy"] for x in d["devices"])
    assert {x["pid"] for x in d["devices"]} == set(pids[2:])
    s = json.loads(run_loom("status", "--json", check=True).stdout)
    assert s["totals"]["workers"] == 2 and s["totals"]["devices"] == 8

    # a second cluster in the same state directory is refused
    r2 = run_loom("up", "--detach", timeout=60)
    assert r2.returncode == 1 and "already running" in r2.stderr and addr in r2.stderr

    t0 = time.monotonic()
    r = run_loom("down", timeout=60)
    assert r.returncode == 0, r.stderr
    assert "stopped the local cluster" in r.stdout
    assert time.monotonic() - t0 < 30
    wait_for(lambda: all(pid_gone(p) for p in pids), 5, what="every cluster process to be gone")
    assert processes_mentioning(str(state_dir)) == []
    assert not (state_dir / "cluster").exists()
    assert (state_dir / "controller.log").exists() and (state_dir / "worker-1.log").exists()

    # nothing is running any more
    r = run_loom("down", timeout=30)
    assert r.returncode == 1 and "no local cluster is running" in r.stderr
    r = run_loom("devices", timeout=30)
    assert r.returncode == 1 and "no local cluster is running" in r.stderr


def test_up_with_slices_and_memory(state_dir):
    r = run_loom("up", "--detach", "--workers", "4", "--devices-per-worker", "1", "--slices", "2",
                 "--device-memory", "256M", timeout=120)
    assert r.returncode == 0, r.stderr
    s = json.loads(run_loom("status", "--json", check=True).stdout)
    assert {x["name"]: x["workers"] for x in s["slices"]} == {"slice-0": 2, "slice-1": 2}
    d = json.loads(run_loom("devices", "--json", check=True).stdout)
    assert [x["memory_capacity"] for x in d["devices"]] == [256 << 20] * 4
    assert run_loom("down", timeout=60).returncode == 0


def test_foreground_up_stops_on_ctrl_c(state_dir, tmp_path):
    with foreground_up(tmp_path, "--workers", "2", "--devices-per-worker", "2") as p:
        pids = cluster_pids(state(state_dir))
        assert len(json.loads(run_loom("devices", "--json", check=True).stdout)["devices"]) == 4
        p.send_signal(signal.SIGINT)
        assert p.wait(timeout=60) == 0
    text = (tmp_path / "up.out").read_text()
    assert "Ctrl-C stops it" in text and "stopped the controller and 2 workers" in text
    assert all(pid_gone(x) for x in pids)
    assert not (state_dir / "cluster").exists()


def test_foreground_up_reports_a_dead_worker(state_dir, tmp_path):
    with foreground_up(tmp_path, "--workers", "2", "--devices-per-worker", "1") as p:
        st = state(state_dir)
        victim = int(st["workers"].split(",")[1].split(":")[0])
        os.kill(victim, signal.SIGKILL)
        wait_for(lambda: "its devices are unhealthy now" in (tmp_path / "up.out").read_text(), 10,
                 what="the supervisor to report the dead worker")
        d = json.loads(run_loom("devices", "--json", check=True).stdout)
        assert [x["healthy"] for x in d["devices"] if x["pid"] == victim] == [False]
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=60) == 0
    assert all(pid_gone(x) for x in cluster_pids(st))


def test_up_fails_clearly_when_the_port_is_taken(state_dir):
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    port = s.getsockname()[1]
    try:
        r = run_loom("up", "--detach", "--listen", f"127.0.0.1:{port}", timeout=120)
    finally:
        s.close()
    assert r.returncode == 1
    assert "controller exited" in r.stderr and "in use" in r.stderr, r.stderr
    assert not (state_dir / "cluster").exists()
    assert processes_mentioning(str(state_dir)) == []


def test_killed_supervisor_takes_the_cluster_with_it(state_dir):
    r = run_loom("up", "--detach", "--workers", "2", "--devices-per-worker", "1", timeout=120)
    assert r.returncode == 0, r.stderr
    st = state(state_dir)
    pids = cluster_pids(st)
    os.kill(pids[0], signal.SIGKILL)  # the supervisor, without a chance to clean up
    wait_for(lambda: all(pid_gone(p) for p in pids[1:]), 10, what="the orphaned daemons to stop")
    r = run_loom("devices", timeout=30)
    assert r.returncode == 1 and "no longer running" in r.stderr
    r = run_loom("down", timeout=30)
    assert r.returncode == 0 and "was not running" in r.stdout
    assert not (state_dir / "cluster").exists()
    # and a new cluster can start in the same state directory
    r = run_loom("up", "--detach", "--workers", "1", "--devices-per-worker", "1", timeout=120)
    assert r.returncode == 0, r.stderr
    assert run_loom("down", timeout=60).returncode == 0
