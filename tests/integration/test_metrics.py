"""The controller's HTTP port (`loom controller --http`): /metrics scraped and parsed with the
Prometheus project's own text parser (prometheus_client), names checked against Prometheus
conventions, counters that only go up across scrapes while launches run, succeed, fail and get
cancelled; state that follows the cluster (a worker killed turns its devices unhealthy);
/healthz and /readyz; and hostile HTTP requests that leave the port serving."""
import re
import socket
import urllib.error
import urllib.request

import numpy as np
import pytest

import base64
import os

from conftest import Auth, Cluster, devices, run_loom, wait_for
from dist import EXAMPLES, PROGRAMS, loom_run, probe

parser = pytest.importorskip("prometheus_client.parser", reason="prometheus_client (pip) parses the exposition")

NAME = re.compile(r"^loom_[a-z0-9_]+$")
UNITS = ("_seconds", "_bytes", "_total", "_info")


def get(url, timeout=10, headers=None, with_headers=False):
    """(status, body) of a GET (and its response headers with with_headers)."""
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            out = r.status, r.read().decode(), r.headers
    except urllib.error.HTTPError as e:
        out = e.code, e.read().decode(), e.headers
    return out if with_headers else out[:2]


def scrape(http):
    """{(sample name, frozen labels): value} and {family name: type} from one /metrics."""
    status, text = get(f"http://{http}/metrics")
    assert status == 200, text
    samples, types = {}, {}
    for fam in parser.text_string_to_metric_families(text):
        types[fam.name] = fam.type
        for s in fam.samples:
            key = (s.name, tuple(sorted(s.labels.items())))
            assert key not in samples, f"duplicate sample {key}"
            samples[key] = s.value
    # the raw text: one HELP and TYPE per family, names by convention
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, typ = line.split(" ")
            assert NAME.match(name), name
            assert name.endswith("_total") == (typ == "counter"), f"{name} is a {typ}"
            if typ == "histogram":
                assert name.endswith("_seconds") or name.endswith("_bytes"), name
    return samples, types


def value(samples, name, **labels):
    return samples[(name, tuple(sorted((k, str(v)) for k, v in labels.items())))]


def counters(samples, types):
    """Every sample of a counter or histogram family (which only go up)."""
    out = {}
    for (name, labels), v in samples.items():
        fam = re.sub(r"(_total|_bucket|_count|_sum)$", "", name)
        if types.get(fam) in ("counter", "histogram"):
            out[(name, labels)] = v
    return out


def assert_went_up(before, after):
    for k, v in before.items():
        assert k in after, f"{k} disappeared"
        assert after[k] >= v, f"{k} went down: {v} -> {after[k]}"


@pytest.fixture
def http_cluster(procs, tmp_path):
    c = Cluster(procs, tmp_path)
    c.start_controller("--http", "127.0.0.1:0", "--http-address-file", str(tmp_path / "http.addr"))
    c.http = wait_for(lambda: (tmp_path / "http.addr").exists() and (tmp_path / "http.addr").read_text().strip(), 10,
                      what="the HTTP address file")
    c.start_worker(4, slice_name="slice-a")
    c.start_worker(4, slice_name="slice-b")
    c.wait_devices(8)
    return c


def test_metrics_follow_launches_and_workers(http_cluster, tmp_path):
    c = http_cluster
    s0, types = scrape(c.http)
    assert types["loom_launch_duration_seconds"] == "histogram"
    assert value(s0, "loom_devices", state="healthy") == 8
    assert value(s0, "loom_workers", state="alive") == 2
    assert value(s0, "loom_workers_registered_total") == 2
    for dev in devices(c.addr)["devices"]:
        d = dev["id"]
        labels = dict(device=d, worker=dev["worker_id"], kind="cpu", slice=dev["slice"], host=dev["host"])
        assert value(s0, "loom_device_healthy", **labels) == 1
        assert value(s0, "loom_device_memory_capacity_bytes", **labels) > 0
    assert value(s0, "loom_launches_started_total") == 0

    # three launches that succeed (each one session), then one refused (wrong input shape)
    for _ in range(3):
        r, _ = loom_run(c.addr, EXAMPLES / "distributed_sum.mlir")
        assert r.returncode == 0, r.stderr
    r, _ = loom_run(c.addr, PROGRAMS / "pmap_psum_8.mlir", inputs=[np.zeros(3, np.float32)], tmp=tmp_path)
    assert r.returncode != 0
    s1, types = scrape(c.http)
    assert_went_up(counters(s0, types), counters(s1, types))
    assert value(s1, "loom_launches_started_total") == 3
    assert value(s1, "loom_launches_finished_total", state="succeeded") == 3
    assert value(s1, "loom_launch_duration_seconds_count") == 3
    assert value(s1, "loom_launch_duration_seconds_sum") > 0
    assert value(s1, "loom_launch_duration_seconds_bucket", le="+Inf") == 3
    assert value(s1, "loom_sessions_opened_total") >= 4
    assert value(s1, "loom_launches_running") == 0
    # loom run's arrays went through the workers' data ports (the counts come with heartbeats)
    def moved():
        return sum(v for (n, _), v in scrape(c.http)[0].items() if n == "loom_worker_transfer_bytes_total")
    wait_for(lambda: moved() >= 4 * 8, 10, what="the transfers in the workers' heartbeats")

    # a launch cancelled while it runs (the probe also refuses one and runs more)
    probe("cancel", c.addr, PROGRAMS / "forever_8.mlir", PROGRAMS / "forever_local_4.mlir",
          PROGRAMS / "add_one_8.mlir", timeout=180)
    s2, _ = scrape(c.http)
    assert_went_up(counters(s1, types), counters(s2, types))
    assert value(s2, "loom_launches_finished_total", state="cancelled") >= 1
    assert value(s2, "loom_launches_refused_total") >= 2

    # a worker dies: its devices turn unhealthy, readiness for 8 devices goes, liveness stays
    assert get(f"http://{c.http}/readyz?min_devices=8")[0] == 200
    c.procs.kill(c.workers[1])
    wait_for(lambda: value(scrape(c.http)[0], "loom_workers", state="lost") == 1, 20, what="the worker lost")
    s3, _ = scrape(c.http)
    assert_went_up(counters(s2, types), counters(s3, types))
    assert value(s3, "loom_devices", state="unhealthy") == 4
    assert value(s3, "loom_workers_lost_total") == 1
    dead = next(d for d in devices(c.addr)["devices"] if d["pid"] == c.workers[1].pid)
    assert value(s3, "loom_worker_up", worker=dead["worker_id"], slice=dead["slice"], host=dead["host"],
                 pid=c.workers[1].pid) == 0
    st, body = get(f"http://{c.http}/readyz?min_devices=8")
    assert st == 503 and "4 of 8 devices healthy" in body, body
    assert get(f"http://{c.http}/readyz?min_devices=4")[0] == 200
    assert get(f"http://{c.http}/healthz") == (200, "ok\n")


def test_metrics_count_collectives(http_cluster):
    """A psum over 2 workers x 4 devices: each worker's devices make 4 all_reduce calls of one i32
    (16 operand bytes), and the two data planes move bytes between the workers; the heartbeats
    carry them to /metrics, as counters that only go up."""
    c = http_cluster
    s0, types = scrape(c.http)
    for fam in ("loom_worker_collective_calls_total", "loom_worker_collective_bytes_total",
                "loom_worker_collective_seconds_total", "loom_worker_dataplane_bytes_total"):
        assert types[fam.removesuffix("_total")] == "counter", fam
    workers = sorted({int(dict(l)["worker"]) for (n, l) in s0 if n == "loom_worker_up"})
    assert len(workers) == 2
    for w in workers:
        assert value(s0, "loom_worker_collective_calls_total", worker=w, op="all_reduce") == 0
    r, _ = loom_run(c.addr, EXAMPLES / "distributed_psum.mlir", "--input", f"0={EXAMPLES / 'arange8.npy'}")
    assert r.returncode == 0 and r.stdout == "[140 140 140 140 140 140 140 140]\n", r.stderr

    def counted():
        s, _ = scrape(c.http)
        return all(value(s, "loom_worker_collective_calls_total", worker=w, op="all_reduce") == 4
                   for w in workers) and s
    s1 = wait_for(counted, 20, what="the workers' heartbeats to carry the all_reduce calls")
    assert_went_up(counters(s0, types), counters(s1, types))
    for w in workers:
        assert value(s1, "loom_worker_collective_bytes_total", worker=w, op="all_reduce") == 16
        assert value(s1, "loom_worker_collective_calls_total", worker=w, op="all_gather") == 0
        assert value(s1, "loom_worker_collective_seconds_total", worker=w) > 0
        assert value(s1, "loom_worker_dataplane_bytes_total", worker=w, direction="sent") > 0
        assert value(s1, "loom_worker_dataplane_bytes_total", worker=w, direction="received") > 0
    # every family the issue names is there
    for fam in ("loom_devices", "loom_device_healthy", "loom_worker_up", "loom_sessions",
                "loom_launches_finished", "loom_launches_started", "loom_launches_running",
                "loom_launch_duration_seconds", "loom_worker_transfer_bytes", "loom_worker_collective_bytes",
                "loom_device_memory_used_bytes", "loom_device_memory_capacity_bytes", "loom_device_memory_peak_bytes",
                "loom_recoveries"):
        assert fam in types, fam


def test_a_lying_workers_counters_never_go_down(http_cluster):
    """A worker (written from the protocol alone) heartbeats collective totals, then smaller ones and
    more op entries than there are ops: /metrics keeps the largest values and ignores the extras."""
    import wire
    c = http_cluster
    conn = wire.Conn(c.addr)
    conn.send(wire.frame(wire.HELLO, wire.hello(role=wire.ROLE_WORKER), request_id=1))
    assert conn.recv_frame()[0] == wire.HELLO_REPLY
    conn.send(wire.frame(wire.REGISTER_WORKER, wire.register_worker(specs=[wire.device_spec(0)]), request_id=2))
    t, _, meta, _ = conn.recv_frame()
    assert t == wire.REGISTER_WORKER_REPLY
    wid = wire.parse_fields(meta)[1][0]

    def hb(seq, calls, nbytes, nanos, sent):
        coll = (wire.field_packed(1, calls) + wire.field_packed(2, nbytes) + wire.field_varint(3, nanos) +
                wire.field_varint(4, sent))
        conn.send(wire.frame(wire.HEARTBEAT, wire.field_varint(1, seq) + wire.field_bytes(4, coll)))

    hb(1, [7, 1, 0, 0, 0, 2], [700, 8, 0, 0, 0, 16], 3_000_000_000, 5000)
    s1 = wait_for(lambda: (lambda s: value(s, "loom_worker_collective_calls_total", worker=wid, op="all_reduce") == 7
                           and s)(scrape(c.http)[0]), 10, what="the raw worker's heartbeat")
    assert value(s1, "loom_worker_collective_bytes_total", worker=wid, op="collective_broadcast") == 16
    assert value(s1, "loom_worker_collective_seconds_total", worker=wid) == 3.0
    assert value(s1, "loom_worker_dataplane_bytes_total", worker=wid, direction="sent") == 5000
    hb(2, [1] * 100, [1] * 100, 1, 1)  # lower, and 100 entries
    hb(3, [9], [900], 0, 0)            # all_reduce up again, the rest lower
    wait_for(lambda: value(scrape(c.http)[0], "loom_worker_collective_calls_total", worker=wid, op="all_reduce") == 9,
             10, what="the third heartbeat")
    s2, types = scrape(c.http)
    assert_went_up(counters(s1, types), counters(s2, types))
    assert value(s2, "loom_worker_collective_calls_total", worker=wid, op="collective_broadcast") == 2
    assert value(s2, "loom_worker_dataplane_bytes_total", worker=wid, direction="sent") == 5000
    assert conn.sock.fileno() >= 0
    conn.close()


def test_http_port_refuses_bad_requests_and_keeps_serving(http_cluster):
    c = http_cluster
    base = f"http://{c.http}"
    assert get(base + "/nope")[0] == 404
    assert get(base + "/readyz?min_devices=x")[0] == 400
    assert get(base + "/readyz?min_devices=99999999999")[0] == 400
    req = urllib.request.Request(base + "/metrics", data=b"x" * 100, method="POST")
    try:
        urllib.request.urlopen(req, timeout=10)
        raise AssertionError("POST accepted")
    except urllib.error.HTTPError as e:
        assert e.code == 405
    host, port = c.http.rsplit(":", 1)
    for junk in [b"\x00\xff garbage\r\n\r\n", b"GET /metrics HTTP/1.1\r\nHost: x\r\nX: " + b"a" * 100000 + b"\r\n\r\n",
                 b"GET /metrics HTTP/1.1\r\n", b"GET " + b"/" * 70000 + b" HTTP/1.1\r\n\r\n"]:
        with socket.create_connection((host, int(port)), timeout=10) as s:
            try:
                s.sendall(junk)
                s.shutdown(socket.SHUT_WR)
                s.recv(1000)
            except OSError:
                pass
    # many at once, half-open ones included: the port and the controller keep serving
    socks = [socket.create_connection((host, int(port)), timeout=10) for _ in range(20)]
    for s in socks[:10]:
        s.sendall(b"GET /metr")
    assert get(base + "/healthz")[0] == 200
    for s in socks:
        s.close()
    scrape(c.http)
    assert run_loom("devices", "--controller", c.addr).returncode == 0


def test_controller_http_flags(procs, tmp_path):
    r = run_loom("controller", "--http-address-file", str(tmp_path / "x"))
    assert r.returncode == 2 and "--http-address-file needs --http" in r.stderr
    # a port in use is a clear startup error
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = run_loom("controller", "--listen", "127.0.0.1:0", "--http", f"127.0.0.1:{port}", timeout=30)
        assert r.returncode != 0 and "cannot serve HTTP on 127.0.0.1:" in r.stderr, r.stderr


def test_loom_top_shows_the_cluster(http_cluster):
    c = http_cluster
    r, _ = loom_run(c.addr, EXAMPLES / "distributed_sum.mlir")
    assert r.returncode == 0, r.stderr
    r = run_loom("top", "--http", c.http, "--iterations", "2", "--interval", "0.2", check=True)
    views = r.stdout.split("\n\nloom ")
    assert len(views) == 2, r.stdout
    assert "devices  8 (8 healthy) on 2 workers (2 alive)" in views[0], r.stdout
    assert "1 succeeded" in views[0] and "/s" in views[1] and "/s" not in views[0].splitlines()[2]
    assert "distributed_sum.mlir" in views[0] and "succeeded" in views[0]
    for slice_name in ("slice-a", "slice-b"):
        assert slice_name in views[0]
    c.procs.kill(c.workers[0])
    wait_for(lambda: "(4 healthy)" in run_loom("top", "--http", c.http, "--once").stdout, 20, what="top to show it")
    r = run_loom("top", "--once", "--http", "127.0.0.1:1")
    assert r.returncode == 1 and "cannot reach the controller's HTTP port" in r.stderr, r.stderr


def test_metrics_and_dashboard_need_a_token_when_the_cluster_has_authentication(procs, tmp_path, monkeypatch):
    """With --tokens-file (and --http-token-file), /metrics, / and /api/status answer 401 without a
    token or with a wrong one, 200 with a client token, the scrape token, or the token as HTTP Basic
    password (a browser's way); /healthz and /readyz stay open for probes."""
    auth = Auth(tmp_path)
    scrape_token = os.urandom(24).hex()
    tok_file = tmp_path / "http.token"
    tok_file.write_text(scrape_token + "\n")
    c = Cluster(procs, tmp_path, auth)
    c.start_controller("--http", "127.0.0.1:0", "--http-address-file", str(tmp_path / "http.addr"),
                       "--http-token-file", str(tok_file))
    c.http = wait_for(lambda: (tmp_path / "http.addr").exists() and (tmp_path / "http.addr").read_text().strip(), 10,
                      what="the HTTP address file")
    c.start_worker(4)
    monkeypatch.setenv("LOOM_TOKEN", auth.tokens["alice"])
    c.wait_devices(4)
    monkeypatch.delenv("LOOM_TOKEN")
    base = f"http://{c.http}"
    forged = "loom_0123456789abcdef_" + "0" * 64
    for path in ("/metrics", "/", "/api/status"):
        st, body, hdr = get(base + path, with_headers=True)
        assert st == 401 and "requires authentication" in body, (path, st, body)
        assert any(v.startswith("Basic") for v in hdr.get_all("WWW-Authenticate")), hdr
        for bad in (forged, scrape_token[:-1] + "x", "short"):
            st, body = get(base + path, headers={"Authorization": f"Bearer {bad}"})
            assert st == 401 and "not accepted" in body, (path, bad, st, body)
        st, body = get(base + path, headers={"Authorization": "Token abc"})
        assert st == 401 and "must be 'Bearer TOKEN'" in body, body
        for good in (auth.tokens["alice"], scrape_token):
            st, body = get(base + path, headers={"Authorization": f"Bearer {good}"})
            assert st == 200, (path, st, body)
        basic = base64.b64encode(f"anyone:{scrape_token}".encode()).decode()
        assert get(base + path, headers={"Authorization": f"Basic {basic}"})[0] == 200
    st, body = get(base + "/metrics", headers={"Authorization": f"Bearer {auth.tokens['alice']}"})
    assert "loom_devices{state=\"healthy\"} 4" in body
    # the page signs the browser in with a cookie for its own /api/status polls (not for /metrics)
    st, _, hdr = get(base + "/", headers={"Authorization": f"Bearer {scrape_token}"}, with_headers=True)
    cookie = hdr["Set-Cookie"].split(";")[0]
    assert st == 200 and cookie.startswith("loom_dashboard=") and "HttpOnly" in hdr["Set-Cookie"]
    assert get(base + "/api/status", headers={"Cookie": cookie})[0] == 200
    assert get(base + "/metrics", headers={"Cookie": cookie})[0] == 401
    expiry, mac = cookie.split("=", 1)[1].split(".")
    for forged in (f"{int(expiry) + 1}.{mac}", f"{expiry}.{'0' * 64}", f"1.{mac}", "x", f"{expiry}.{mac[:-1]}"):
        assert get(base + "/api/status", headers={"Cookie": f"loom_dashboard={forged}"})[0] == 401, forged
    # a revoked client token stops working at once
    run_loom("token", "revoke", auth.tokens["alice"].split("_")[1], "--tokens-file", str(auth.tokens_file), check=True)
    st, _ = get(base + "/metrics", headers={"Authorization": f"Bearer {auth.tokens['alice']}"})
    assert st == 401
    # the probes need nothing
    assert get(base + "/healthz") == (200, "ok\n")
    assert get(base + "/readyz?min_devices=4")[0] == 200
    # loom top sends the token it finds ($LOOM_TOKEN)
    r = run_loom("top", "--once", "--http", c.http, env={**os.environ, "LOOM_TOKEN": scrape_token})
    assert r.returncode == 0 and "4 (4 healthy)" in r.stdout, r.stdout + r.stderr
    r = run_loom("top", "--once", "--http", c.http, env={k: v for k, v in os.environ.items() if k != "LOOM_TOKEN"})
    assert r.returncode != 0 and "401" in r.stderr, r.stderr


def test_http_token_file_is_checked(procs, tmp_path):
    bad = tmp_path / "short.token"
    bad.write_text("abc\n")
    r = run_loom("controller", "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0", "--http-token-file", str(bad),
                 timeout=20)
    assert r.returncode != 0 and "16 to 256 printable characters" in r.stderr, r.stderr
    r = run_loom("controller", "--http-token-file", str(bad))
    assert r.returncode == 2 and "needs --http" in r.stderr
