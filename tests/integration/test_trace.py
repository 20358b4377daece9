"""`loom trace start|stop` against a real cluster: a trace recorded around a known launch (the
seed's psum across 2 workers x 4 devices) holds that launch on the controller's track and, on
each of the 8 devices' tracks, its phases in order (queued, transfer in, execute, transfer out,
report) inside the launch's span, and its all_reduce call inside execute, also when the launch
goes through a relay (hierarchical dispatch: the timings come back in RELAY_DONE); launches
before the start are not in it; misuse and a missing or bad token are refused with reasons."""
import json
import os

import pytest

from conftest import Auth, Cluster, run_loom, wait_for
from dist import EXAMPLES, loom_run


def http_cluster(procs, tmp_path, auth=None, extra=()):
    c = Cluster(procs, tmp_path, auth)
    f = tmp_path / "http.addr"
    c.start_controller("--http", "127.0.0.1:0", "--http-address-file", str(f), *extra)
    c.http = wait_for(lambda: f.exists() and f.read_text().strip(), 10, what="the HTTP address")
    c.start_worker(4, slice_name="s0")
    c.start_worker(4, slice_name="s1")
    return c


@pytest.mark.parametrize("relay", [False, True], ids=["direct", "relayed"])
def test_trace_covers_a_known_launch(procs, tmp_path, relay):
    c = http_cluster(procs, tmp_path, extra=("--relay-min-workers", "2") if relay else ())
    c.wait_devices(8)
    r, _ = loom_run(c.addr, EXAMPLES / "distributed_sum.mlir")  # before the recording: not in it
    assert r.returncode == 0, r.stderr
    r = run_loom("trace", "stop", "--out", tmp_path / "t", "--http", c.http)
    assert r.returncode == 1 and "no trace is recording" in r.stderr, r.stderr
    r = run_loom("trace", "start", "--http", c.http, check=True)
    assert "recording a trace" in r.stdout
    r = run_loom("trace", "start", "--http", c.http)
    assert r.returncode == 1 and "already recording" in r.stderr, r.stderr
    r, _ = loom_run(c.addr, EXAMPLES / "distributed_psum.mlir", "--input", f"0={EXAMPLES / 'arange8.npy'}")
    assert r.returncode == 0 and r.stdout == "[140 140 140 140 140 140 140 140]\n", r.stderr
    if relay:
        assert "go through 1 relays" in procs.log(c.controller), procs.log(c.controller)[-2000:]
    r = run_loom("trace", "stop", "--out", tmp_path / "t", "--http", c.http, check=True)
    assert "(1 launches" in r.stdout, r.stdout
    files = list((tmp_path / "t").glob("loom-trace-*.json"))
    assert len(files) == 1
    trace = json.loads(files[0].read_text())
    assert trace["metadata"]["launches"] == 1 and trace["metadata"]["dropped_launches"] == 0
    ev = trace["traceEvents"]
    launches = [e for e in ev if e.get("cat") == "launch"]
    assert len(launches) == 1
    la = launches[0]
    assert la["ph"] == "X" and "distributed_psum.mlir" in la["name"] and la["args"]["status"] == "OK"
    assert la["args"]["devices"] == 8 and la["args"]["workers"] == 2 and la["dur"] > 0
    begin, end = la["ts"], la["ts"] + la["dur"]
    names = {(e["name"], e["pid"], e.get("tid", 0)): e["args"]["name"] for e in ev if e["ph"] == "M"}
    phases = {}
    for e in ev:
        if e.get("cat") == "device":
            assert e["args"]["seq"] == la["args"]["seq"]
            phases.setdefault(e["args"]["device"], []).append(e)
    assert sorted(phases) == list(range(8)), sorted(phases)
    colls = {}
    for e in ev:
        if e.get("cat") == "collective":
            assert e["args"]["seq"] == la["args"]["seq"]
            colls.setdefault(e["args"]["device"], []).append(e)
    for dev, ps in phases.items():
        assert [p["name"] for p in ps] == ["queued", "transfer in", "execute", "transfer out", "report"]
        # the psum's all_reduce: one call of one i32 per device, inside its execute, same track
        ex = ps[2]
        assert ex["args"]["collective_calls"] == 1 and ex["args"]["collective_bytes"] == 4, ex
        assert 0 < ex["args"]["collective_us"] <= ex["dur"] + 1
        [co] = colls[dev]
        assert co["name"] == "all_reduce" and co["args"]["bytes"] == 4
        assert (co["pid"], co["tid"]) == (ex["pid"], ex["tid"])
        assert ex["ts"] - 1 <= co["ts"] and co["ts"] + co["dur"] <= ex["ts"] + ex["dur"] + 1, (co, ex)
        t = ps[0]["ts"]
        for p in ps:  # back to back, in order, within the launch (1 us of rounding)
            assert abs(p["ts"] - t) < 1 and p["dur"] >= 0
            t = p["ts"] + p["dur"]
            assert begin - 1 <= p["ts"] and p["ts"] + p["dur"] <= end + 1, (p, la)
        assert ps[2]["dur"] > 0  # the program ran
        pid, tid = ps[0]["pid"], ps[0]["tid"]
        assert names[("thread_name", pid, tid)] == f"device {dev} (local {dev % 4})"
        assert names[("process_name", pid, 0)].startswith(f"worker {dev // 4} (") and "slice s" in names[("process_name", pid, 0)]


def test_trace_needs_a_token_when_clients_do(procs, tmp_path, monkeypatch):
    auth = Auth(tmp_path)
    c = http_cluster(procs, tmp_path, auth)
    monkeypatch.delenv("LOOM_TOKEN", raising=False)
    r = run_loom("trace", "start", "--http", c.http)
    assert r.returncode == 1 and "HTTP 401" in r.stderr and "requires a client token" in r.stderr, r.stderr
    env = {**os.environ, "LOOM_TOKEN": "loom_0123456789abcdef_" + "0" * 64}
    r = run_loom("trace", "start", "--http", c.http, env=env)
    assert r.returncode == 1 and "HTTP 401" in r.stderr, r.stderr
    env["LOOM_TOKEN"] = auth.tokens["alice"]
    run_loom("trace", "start", "--http", c.http, env=env, check=True)
    r = run_loom("trace", "stop", "--out", tmp_path / "t", "--http", c.http, env=env, check=True)
    assert "(0 launches" in r.stdout


def test_trace_usage_errors(tmp_path):
    assert run_loom("trace").returncode == 2
    r = run_loom("trace", "stop", "--http", "127.0.0.1:1")
    assert r.returncode == 2 and "--out" in r.stderr
    r = run_loom("trace", "start", "--http", "127.0.0.1:1")
    assert r.returncode == 1 and "cannot reach the controller's HTTP port" in r.stderr, r.stderr
