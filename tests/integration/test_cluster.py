"""A real controller with workers started by hand: the unified device view, status, discovery of
the controller, and the commands' help and errors."""
import json
import os
import time

from conftest import LOOM_BIN, devices, run_loom, wait_for


def test_eight_devices_with_distinct_virtual_ids(cluster):
    d = cluster.wait_devices(8)
    ids = [x["id"] for x in d["devices"]]
    assert ids == list(range(8))  # dense, distinct, in order
    pids = {x["pid"] for x in d["devices"]}
    assert pids == {w.pid for w in cluster.workers}  # each device names the process that holds it
    per_worker = {}
    for x in d["devices"]:
        assert x["kind"] == "cpu" and x["healthy"] and x["health_reason"] == ""
        assert x["memory_capacity"] == 2 << 30 and x["slice"] == "slice-a"
        per_worker.setdefault(x["worker_id"], []).append(x["local_index"])
    assert sorted(per_worker) == [0, 1]
    assert all(sorted(v) == [0, 1, 2, 3] for v in per_worker.values())  # physical identity kept apart
    t = d["totals"]
    assert (t["devices"], t["healthy_devices"], t["workers"], t["slices"]) == (8, 8, 2, 1)
    assert t["memory_capacity"] == 8 * (2 << 30)
    assert d["controller"] == cluster.addr


def test_device_memory_and_slices(procs, tmp_path):
    from conftest import Cluster
    c = Cluster(procs, tmp_path)
    c.start_controller()
    c.start_worker(2, slice_name="east", memory="512M")
    c.wait_devices(2)
    c.start_worker(3, slice_name="west", memory="1GiB")
    d = c.wait_devices(5)
    assert [x["memory_capacity"] for x in d["devices"]] == [512 << 20] * 2 + [1 << 30] * 3
    assert [x["slice"] for x in d["devices"]] == ["east"] * 2 + ["west"] * 3
    s = json.loads(run_loom("status", "--json", "--controller", c.addr, check=True).stdout)
    assert s["totals"]["slices"] == 2 and s["totals"]["devices"] == 5 and s["totals"]["alive_workers"] == 2
    assert {x["name"]: x["devices"] for x in s["slices"]} == {"east": 2, "west": 3}
    assert [w["devices"] for w in s["workers"]] == [[0, 1], [2, 3, 4]]
    assert s["protocol_version"] == 1 and s["software"].startswith("loom ")


def test_text_output(cluster):
    r = run_loom("devices", "--controller", cluster.addr, check=True)
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["ID", "KIND", "WORKER", "HOST", "PID", "SLICE", "MEMORY", "USED", "HEALTH"]
    rows = [l.split() for l in lines[1:9]]
    assert [int(r[0]) for r in rows] == list(range(8))
    assert all(r[-1] == "healthy" for r in rows)
    assert "8 devices (8 healthy) on 2 workers in 1 slice" in r.stdout
    s = run_loom("status", "--controller", cluster.addr, check=True).stdout
    assert "workers     2 (2 alive)" in s and "devices     8 (8 healthy)" in s
    assert "slice-a" in s and "0-3" in s and "4-7" in s


def test_controller_found_from_environment(cluster):
    env = dict(os.environ, LOOM_CONTROLLER=cluster.addr)
    r = run_loom("devices", "--json", env=env, check=True)
    assert len(json.loads(r.stdout)["devices"]) == 8
    # --controller wins over the environment
    env["LOOM_CONTROLLER"] = "127.0.0.1:1"
    r = run_loom("status", "--json", "--controller", cluster.addr, env=env, check=True)
    assert json.loads(r.stdout)["totals"]["devices"] == 8


def test_sessions_are_counted_and_closed(cluster):
    s = json.loads(run_loom("status", "--json", "--controller", cluster.addr, check=True).stdout)
    assert s["sessions"] == 1  # just this status command's own session


def test_every_command_answers_help():
    for cmd in ["up", "down", "controller", "worker", "devices", "status"]:
        r = run_loom(cmd, "--help", timeout=30)
        assert r.returncode == 0, (cmd, r.stderr)
        assert r.stdout.startswith(f"usage: loom {cmd}"), (cmd, r.stdout)
    r = run_loom("--help", timeout=30)
    assert r.returncode == 0 and "devices" in r.stdout


def test_usage_errors_are_one_line():
    cases = [
        ("devices", "--bogus"), ("up", "--workers", "0"), ("up", "--workers", "2", "--slices", "3"),
        ("worker", "--controller", "127.0.0.1:1", "--devices", "x"), ("worker", "--device-memory", "12XB"),
        ("controller", "--heartbeat-timeout", "100", "--heartbeat-interval", "500"), ("status", "extra"),
        ("worker",),
    ]
    for args in cases:
        r = run_loom(*args, timeout=30)
        assert r.returncode == 2, (args, r.returncode, r.stderr)
        assert r.stderr.startswith(f"loom {args[0]}: ") and r.stderr.count("\n") == 1, (args, r.stderr)


def test_client_errors_without_a_controller(tmp_path):
    r = run_loom("devices", timeout=30)  # no --controller, no LOOM_CONTROLLER, no local cluster
    assert r.returncode == 1
    assert "no local cluster is running" in r.stderr and r.stderr.count("\n") == 1
    r = run_loom("status", "--controller", "127.0.0.1:1", timeout=30)
    assert r.returncode == 1 and "cannot connect to 127.0.0.1:1" in r.stderr
    r = run_loom("devices", "--controller", "nonsense", timeout=30)
    assert r.returncode == 1 and "HOST:PORT" in r.stderr


def test_worker_without_controller_gives_up(tmp_path):
    t0 = time.monotonic()
    r = run_loom("worker", "--controller", "127.0.0.1:1", "--connect-timeout", "1", timeout=30)
    assert r.returncode == 1
    assert "cannot register with the controller 127.0.0.1:1" in r.stderr
    assert time.monotonic() - t0 < 15


def test_worker_waits_for_a_late_controller(procs, tmp_path):
    """A worker started before its controller keeps trying and registers once it is up."""
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # a free port for a moment; the controller takes it below
    addr = f"127.0.0.1:{port}"
    procs.start(["worker", "--controller", addr, "--devices", "2"], "early-worker")
    time.sleep(0.5)
    procs.start(["controller", "--listen", addr], "late-controller")
    wait_for(lambda: _count(addr) == 2, 30, interval=0.2, what="the early worker's devices")


def _count(addr):
    r = run_loom("devices", "--json", "--controller", addr, timeout=30)
    return len(json.loads(r.stdout)["devices"]) if r.returncode == 0 else -1


def test_second_controller_on_the_same_port_fails(cluster):
    r = run_loom("controller", "--listen", cluster.addr, timeout=30)
    assert r.returncode == 1
    assert "cannot listen on" in r.stderr and "in use" in r.stderr
