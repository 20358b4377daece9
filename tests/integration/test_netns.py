"""Multi-host on one machine: the controller, two workers and the client each in a network
namespace of their own (tests/integration/netns.py), so every connection is TCP between
different addresses over veth pairs, and the data plane runs over TCP (UCX_TLS=tcp).

Checked: a controller on its loopback default cannot be reached by a worker on another host; one
listening on its veth address refuses to start without authentication; with the cluster secret
and tokens it refuses workers without the secret or with a wrong one and clients without a token,
and admits the real ones; then distributed launches with collectives across both workers give
numpy's numbers."""
import os
import subprocess

import numpy as np
import pytest

from conftest import Auth, LOOM_BIN, wait_for
from dist import EXAMPLES, PROGRAMS
import netns

pytestmark = pytest.mark.skipif(netns.skip_reason() is not None, reason=str(netns.skip_reason()))


@pytest.fixture
def hosts():
    with netns.Hosts(["ctl", "w0", "w1", "cli"]) as h:
        yield h


def start_controller(procs, hosts, tmp_path, name, *args):
    f = tmp_path / f"{name}.addr"
    p = procs.start(["controller", "--address-file", f, *args], name, prefix=hosts.prefix("ctl"))

    def ready():
        if p.poll() is not None:
            return "exited"
        return f.exists() and f.read_text().strip()

    addr = wait_for(ready, 30, what=f"{name}'s address")
    return p, addr


def test_workers_and_client_on_other_hosts(hosts, procs, tmp_path):
    env = {**os.environ, "UCX_TLS": "tcp"}
    ctl_ip = hosts.addr("ctl")

    # 1. the default listener is loopback: a worker on another host cannot reach it
    p, addr = start_controller(procs, hosts, tmp_path, "loopback", "--listen", "127.0.0.1:0")
    port = addr.rsplit(":", 1)[1]
    w = procs.start(["worker", "--controller", f"{ctl_ip}:{port}", "--connect-timeout", "2", "--devices", "1"],
                    "unreachable", prefix=hosts.prefix("w0"), env=env)
    w.expect_clean = False
    assert w.wait(timeout=30) != 0
    assert f"{ctl_ip}:{port}" in procs.log(w), procs.log(w)
    procs.kill(p, 15)
    p.wait(timeout=20)

    # 2. listening beyond loopback without authentication: refused at startup
    r = hosts.run("ctl", [LOOM_BIN, "controller", "--listen", f"{ctl_ip}:0"], capture_output=True, text=True,
                  timeout=30)
    assert r.returncode != 0 and "without authentication" in r.stderr, r.stderr

    # 3. on the veth address with the cluster secret and client tokens
    auth = Auth(tmp_path)
    ctl, addr = start_controller(procs, hosts, tmp_path, "controller", "--listen", f"{ctl_ip}:0",
                               *auth.controller_args())
    assert addr.startswith(ctl_ip + ":")
    nosecret = procs.start(["worker", "--controller", addr, "--devices", "1"], "nosecret",
                           prefix=hosts.prefix("w0"), env=env)
    nosecret.expect_clean = False
    assert nosecret.wait(timeout=30) != 0
    assert "requires worker authentication" in procs.log(nosecret), procs.log(nosecret)
    wrong = tmp_path / "wrong-secret"
    fd = os.open(wrong, os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, (os.urandom(32).hex() + "\n").encode())
    os.close(fd)
    bad = procs.start(["worker", "--controller", addr, "--devices", "1", "--secret-file", wrong], "wrongsecret",
                      prefix=hosts.prefix("w1"), env=env)
    bad.expect_clean = False
    assert bad.wait(timeout=30) != 0
    assert "failed authentication" in procs.log(bad), procs.log(bad)
    for i, host in enumerate(["w0", "w1"]):
        procs.start(["worker", "--controller", addr, "--devices", "4", "--slice", f"slice-{i}", "--secret-file",
                     auth.secret_file], f"worker{i}", prefix=hosts.prefix(host), env=env)

    cenv = {**env, "LOOM_TOKEN": auth.tokens["alice"]}

    def loom(*args, e=cenv, timeout=120):
        return hosts.run("cli", [LOOM_BIN, *args], capture_output=True, text=True, timeout=timeout, env=e,
                         stdin=subprocess.DEVNULL)

    def eight():
        r = loom("devices", "--controller", addr)
        return r.returncode == 0 and r.stdout.count("healthy") >= 8 and r
    wait_for(eight, 30, interval=0.2, what="8 devices from the other hosts")
    clog = procs.log(ctl)
    for host in ("w0", "w1"):  # registered over their own veth addresses
        assert f"registered from {hosts.addr(host)}:" in clog, clog

    notoken = {k: v for k, v in cenv.items() if k != "LOOM_TOKEN"}
    r = loom("devices", "--controller", addr, e=notoken)
    assert r.returncode != 0 and "requires a client token" in r.stderr, r.stderr

    # 4. distributed launches with collectives across both hosts, from a third
    r = loom("run", EXAMPLES / "distributed_psum.mlir", "--controller", addr, "--input",
             f"0={EXAMPLES / 'arange8.npy'}")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "[140 140 140 140 140 140 140 140]\n"
    x = np.arange(8, dtype=np.float32) * 1.5
    np.save(tmp_path / "x.npy", x)
    r = loom("run", PROGRAMS / "pmap_psum_8.mlir", "--controller", addr, "--input", f"0={tmp_path / 'x.npy'}",
             "--output-dir", tmp_path / "out")
    assert r.returncode == 0, r.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "result_0.npy"), np.full(8, x.sum(), np.float32))
    # every collective shard_map emits on a 2x4 mesh spanning the two hosts
    rng = np.random.default_rng(3)
    a = rng.integers(-50, 50, (8, 16)).astype(np.float32)
    n = rng.integers(-1000, 1000, (3, 8)).astype(np.int32)
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "n.npy", n)
    r = loom("run", PROGRAMS / "colls_2x4.mlir", "--controller", addr, "--input", f"0={tmp_path / 'a.npy'}",
             "--input", f"1={tmp_path / 'n.npy'}", "--output-dir", tmp_path / "colls")
    assert r.returncode == 0, r.stderr
    blocks = a.reshape(2, 4, 4, 4)
    np.testing.assert_array_equal(np.load(tmp_path / "colls" / "result_1.npy"), blocks.sum(axis=(0, 2)))
    np.testing.assert_array_equal(np.load(tmp_path / "colls" / "result_2.npy"), a)
    np.testing.assert_array_equal(np.load(tmp_path / "colls" / "result_6.npy"), np.maximum(a[:4], a[4:]))
