"""The shared pool through the `loom` command only (so the sanitizer build runs it too): a session
waiting in the queue behind a running one, admitted when that one's client goes away in the middle
of a launch; `loom queue`, `loom sessions`, `loom usage`; a runaway launch cut by the watchdog."""
import json
import signal
import subprocess
from pathlib import Path

import numpy as np

from conftest import Cluster, run_loom, wait_for
from loomtest import LOOM_BIN

PROGRAMS = Path(__file__).parent / "programs"

CONFIG = """
[pool]
classes = ["prod", "batch"]   # highest first
default_class = "batch"
[class.batch]
launch_limit = "1500ms"
"""


def as_json(addr, what, *extra):
    return json.loads(run_loom(what, "--json", "--controller", addr, *extra, check=True).stdout)


def test_queue_admission_and_watchdog_from_the_cli(procs, tmp_path):
    cfg = tmp_path / "loom.toml"
    cfg.write_text(CONFIG)
    c = Cluster(procs, tmp_path)
    c.start_controller("--config", str(cfg))
    c.start_worker(4)
    c.wait_devices(4)
    x = tmp_path / "x.npy"
    np.save(x, np.arange(8, dtype=np.int32))
    hold = subprocess.Popen([LOOM_BIN, "run", str(PROGRAMS / "forever_local_4.mlir"), "--pool-devices", "4",
                             "--priority", "prod", "--controller", c.addr], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: any(s["state"] == "running" and s["usage"]["launches"] == 1
                             for s in as_json(c.addr, "sessions")["sessions"]), 30, what="the holder running")
        wait = subprocess.Popen([LOOM_BIN, "run", str(PROGRAMS / "add_one_4.mlir"), "--input", str(x),
                                 "--pool-devices", "4", "--controller", c.addr], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        q = wait_for(lambda: as_json(c.addr, "queue")["queue"], 30, what="the second run in the queue")
        assert q[0]["position"] == 1 and q[0]["priority"] == "batch" and q[0]["devices_asked"] == 4
        assert "waiting for 4 devices to be free (0 of 4 are)" in q[0]["blocked_by"]
        text = run_loom("queue", "--controller", c.addr, check=True).stdout
        assert "POS" in text and "batch" in text
        # a queued client may not make requests (nothing to test from the CLI); its holder goes away
        hold.send_signal(signal.SIGINT)
        hold.communicate(timeout=30)
        out, err = wait.communicate(timeout=60)
        assert wait.returncode == 0, err
        assert "[1 2 3 4 5 6 7 8]" in out
        assert "waiting for 4 devices (batch): 1 of 1 in the queue" in err
    finally:
        for p in (hold,):
            if p.poll() is None:
                p.kill()
                p.wait()
    r = run_loom("run", str(PROGRAMS / "forever_local_4.mlir"), "--pool-devices", "4", "--controller", c.addr,
                 timeout=60)
    assert r.returncode != 0
    assert "past its session's limit of 1500 ms (class batch): the watchdog cancelled it" in r.stderr
    # a cut launch is counted once its workers report it stopped (just after its client hears)
    u = wait_for(lambda: (lambda u: u if u["users"][0]["usage"]["launches_failed"] >= 2 else None)(
        as_json(c.addr, "usage")), 10, what="the runaway launch accounted")
    (me,) = u["users"]
    assert me["usage"]["launches"] == 3 and me["usage"]["launches_timed_out"] == 1
    assert me["usage"]["device_seconds"] > 4 * 1.5
    sessions = as_json(c.addr, "sessions", "--all")["sessions"]
    assert sum(s["state"] == "closed" for s in sessions) >= 3
    assert [x["name"] for x in u["classes"]] == ["prod", "batch"] and u["classes"][1]["launch_limit_ms"] == 1500


def test_queued_session_on_the_wire(procs, tmp_path):
    """Byte by byte: a HELLO asking for devices waits for its reply; meanwhile QUEUE_UPDATE comes,
    requests are refused (the connection kept), PING is served; odd requests are refused at once;
    a queued client that goes away leaves the queue."""
    import wire
    c = Cluster(procs, tmp_path)
    c.start_controller()
    c.start_worker(4)
    c.wait_devices(4)
    holder = wire.Conn(c.addr)
    holder.send(wire.frame(wire.HELLO, wire.hello() + wire.field_varint(12, 4), request_id=1))
    t, rid, meta, _ = holder.recv_frame()
    assert (t, rid) == (wire.HELLO_REPLY, 1) and wire.unpack_varints(wire.parse_fields(meta)[14][0]) == [0, 1, 2, 3]
    waiter = wire.Conn(c.addr)
    waiter.send(wire.frame(wire.HELLO, wire.hello() + wire.field_varint(12, 2) + wire.field_bytes(13, "batch"),
                           request_id=1))
    t, rid, meta, _ = waiter.recv_frame()
    assert (t, rid) == (60, 0)  # QUEUE_UPDATE
    f = wire.parse_fields(meta)
    assert f[1] == [1] and f[3] == [2] and f[5] == [b"batch"]
    waiter.send(wire.frame(wire.LIST_DEVICES, request_id=2))
    code, msg, rid = waiter.expect_error()
    assert code == -19 and rid == 2 and "waiting in the pool's queue" in msg
    waiter.send(wire.frame(wire.PING, wire.field_varint(1, 7), request_id=3))
    while True:  # periodic QUEUE_UPDATEs may come first
        t, rid, _, _ = waiter.recv_frame()
        if t != 60:
            break
    assert (t, rid) == (wire.PONG, 3)
    for extra, want in ((wire.field_varint(12, 1 << 31), "but the cluster has 4"),
                        (wire.field_varint(12, 1) + wire.field_bytes(13, "x\x01y"), "printable"),
                        (wire.field_varint(12, 1) + wire.field_bytes(13, "gold"), "unknown priority class 'gold'")):
        bad = wire.Conn(c.addr)
        bad.send(wire.frame(wire.HELLO, wire.hello() + extra, request_id=1))
        code, msg, _ = bad.expect_error()
        assert want in msg, msg
        bad.expect_closed()
    assert len(as_json(c.addr, "queue")["queue"]) == 1
    waiter.close()
    wait_for(lambda: not as_json(c.addr, "queue")["queue"], 10, what="the queue empty")
    holder.close()
    r = run_loom("run", str(PROGRAMS / "forever_local_4.mlir"), "--pool-devices", "4", "--launch-limit", "300",
                 "--controller", c.addr, timeout=60)
    assert r.returncode != 0 and "limit of 300 ms" in r.stderr  # a client's own limit, no class limit


def test_jax_through_the_proxy_in_the_pool(procs, tmp_path):
    """`loom proxy --pool-devices 4 --priority batch`: an unmodified JAX program sees the 4 devices
    its session was given, computes on them, and the session shows in `loom sessions`."""
    import os
    import sys
    import pytest
    pytest.importorskip("grpc")
    pytest.importorskip("jax")
    pytest.importorskip("pathwaysutils")
    c = Cluster(procs, tmp_path)
    c.start_controller()
    c.start_worker(4)
    c.start_worker(4)
    c.wait_devices(8)
    addr_file = tmp_path / "proxy.addr"
    procs.start(["proxy", "--listen", "127.0.0.1:0", "--address-file", str(addr_file), "--controller", c.addr,
                 "--pool-devices", "4", "--priority", "batch"], "proxy")
    paddr = wait_for(lambda: addr_file.exists() and addr_file.read_text().strip(), 30, what="the proxy's address")
    script = tmp_path / "job.py"
    script.write_text("import jax, jax.numpy as jnp, pathwaysutils\n"
                      "pathwaysutils.initialize()\n"
                      "print('devices', len(jax.devices()))\n"
                      "print('sum', float((jnp.arange(8.0) * 2).sum()))\n")
    env = {k: v for k, v in os.environ.items() if k != "LOOM_CONTROLLER"}
    env.update(JAX_PLATFORMS="proxy", JAX_BACKEND_TARGET=f"grpc://{paddr}", IFRT_PROXY_USE_INSECURE_GRPC_CREDENTIALS="true")
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=240, env=env,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "devices 4" in r.stdout and "sum 56.0" in r.stdout
    s = [x for x in as_json(c.addr, "sessions", "--all")["sessions"] if x["name"].startswith("ifrt-proxy session")]
    assert s and all(x["devices_asked"] == 4 and x["priority"] == "batch" for x in s)


def test_jax_session_picks_its_pool_request_through_the_proxy(procs, tmp_path):
    """One `loom proxy` (no pool flags), two JAX programs each naming their own request in the
    session metadata (ClientConnectionOptions.initialization_data: loom.pool_devices,
    loom.priority): each sees its own number of devices and shows in `loom sessions` with its class;
    a malformed loom.* attribute ends the session with an error naming it."""
    import os
    import sys
    import pytest
    pytest.importorskip("grpc")
    pytest.importorskip("jax")
    c = Cluster(procs, tmp_path)
    c.start_controller()
    c.start_worker(4)
    c.wait_devices(4)
    addr_file = tmp_path / "proxy.addr"
    px = procs.start(["proxy", "--listen", "127.0.0.1:0", "--address-file", str(addr_file), "--controller",
                      c.addr], "proxy")
    paddr = wait_for(lambda: addr_file.exists() and addr_file.read_text().strip(), 30, what="the proxy's address")
    script = tmp_path / "job.py"
    script.write_text("import sys, json, jax, jax.numpy as jnp\n"
                      "from jax.extend import backend\n"
                      "from jax.extend.backend import ifrt_proxy\n"
                      "data = json.loads(sys.argv[1])\n"
                      "data = {k: v.encode() if isinstance(v, str) else v for k, v in data.items()}\n"
                      "def make():\n"
                      "    o = ifrt_proxy.ClientConnectionOptions()\n"
                      "    o.initialization_data = data\n"
                      "    o.connection_timeout_in_seconds = 8  # a refused session is retried until then\n"
                      "    return ifrt_proxy.get_client(jax.config.read('jax_backend_target'), o)\n"
                      "backend.register_backend_factory('proxy', make, priority=-1)\n"
                      "print('devices', len(jax.devices()), flush=True)\n"
                      "print('sum', float((jnp.arange(8.0) * 2).sum()), flush=True)\n")
    env = {k: v for k, v in os.environ.items() if k != "LOOM_CONTROLLER"}
    env.update(JAX_PLATFORMS="proxy", JAX_BACKEND_TARGET=f"grpc://{paddr}", IFRT_PROXY_USE_INSECURE_GRPC_CREDENTIALS="true")

    def job(data):
        return subprocess.run([sys.executable, str(script), json.dumps(data)], capture_output=True, text=True,
                              timeout=240, env=env, stdin=subprocess.DEVNULL)

    for n, cls in ((2, "prod"), (1, "batch")):
        r = job({"loom.pool_devices": n, "loom.priority": cls, "other.tool": "ignored"})
        assert r.returncode == 0, r.stderr[-3000:]
        assert f"devices {n}" in r.stdout and "sum 56.0" in r.stdout, r.stdout
    s = [x for x in as_json(c.addr, "sessions", "--all")["sessions"] if x["name"].startswith("ifrt-proxy session")]
    assert {(x["devices_asked"], x["priority"]) for x in s} >= {(2, "prod"), (1, "batch")}, s
    r = job({"loom.pool_devices": "two"})
    assert r.returncode != 0
    assert "loom.pool_devices must be an integer" in r.stderr + procs.log(px), r.stderr[-2000:]
    r = job({"loom.pool_devics": 2})
    assert r.returncode != 0
    assert "unknown Loom attribute 'loom.pool_devics'" in r.stderr + procs.log(px), r.stderr[-2000:]
