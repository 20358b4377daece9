"""The C client API: libloom.so exports only loom_* symbols; the documented example
(docs/examples/list_devices.c) compiles against the installed-style headers and libloom.a and runs
against a real cluster; a probe covers timeouts, interrupts, struct_size handling and threads."""
import os
import shutil
import socket
import subprocess
import threading

import pytest

from conftest import BUILD_DIR, SOURCE_DIR, sanitized_build

LIB = BUILD_DIR / "lib"
TESTS = BUILD_DIR / "tests"


def run(args, timeout=60, env=None):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout, env=env)


def test_shared_library_exports_only_loom_symbols():
    so = LIB / "libloom.so"
    assert so.exists()
    r = run(["nm", "-D", "--defined-only", so])
    assert r.returncode == 0, r.stderr
    names = []
    for line in r.stdout.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] != "A":  # "A" lines are the version node (LOOM_0)
            names.append(parts[2].split("@")[0])
    assert "loom_connect" in names and "loom_device_info" in names and "loom_strerror" in names
    stray = [n for n in names if not n.startswith("loom_")]
    assert stray == [], f"libloom.so exports non-loom symbols: {stray[:20]}"
    assert (LIB / "libloom.a").exists()


def test_example_runs_against_a_cluster(cluster):
    r = run([TESTS / "example_list_devices", cluster.addr])
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == f"8 devices at {cluster.addr}"
    assert len([l for l in lines if l.startswith("device ") and "healthy" in l]) == 8
    assert lines[-1].startswith("device 8: NOT_FOUND (no device 8")
    # without an address it uses LOOM_CONTROLLER
    r = run([TESTS / "example_list_devices"], env=dict(os.environ, LOOM_CONTROLLER=cluster.addr))
    assert r.returncode == 0 and r.stdout.startswith("8 devices")
    r = run([TESTS / "example_list_devices", "127.0.0.1:1"])
    assert r.returncode == 1
    assert r.stderr == "list_devices: cannot connect to 127.0.0.1:1: Connection refused (CONNECT)\n"


@pytest.mark.skipif(sanitized_build(), reason="the sanitizer build's libloom.a needs the ASan runtime")
def test_example_compiles_against_the_static_library(cluster, tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    assert cc, "no C compiler"
    exe = tmp_path / "list_devices"
    protobuf = run(["pkg-config", "--libs", "libprotobuf-c"]).stdout.split()
    r = run([cc, "-std=c99", "-Wall", "-Wextra", "-pedantic", "-Werror", "-I", SOURCE_DIR / "include",
             SOURCE_DIR / "docs/examples/list_devices.c", "-o", exe, LIB / "libloom.a", *protobuf, "-lpthread"])
    assert r.returncode == 0, r.stderr
    r = run([exe, cluster.addr])
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("8 devices")


@pytest.mark.skipif(not shutil.which("c++"), reason="no C++ compiler")
def test_header_is_valid_cxx(tmp_path):
    src = tmp_path / "t.cc"
    src.write_text('#include "loom/loom.h"\nint main() { return loom_version() != nullptr ? 0 : 1; }\n')
    r = run(["c++", "-fsyntax-only", "-Wall", "-I", SOURCE_DIR / "include", src])
    assert r.returncode == 0, r.stderr


def test_api_contract(cluster):
    r = run([TESTS / "capi_probe", "contract", cluster.addr])
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ok contract (8 devices)" in r.stdout


def test_api_from_many_threads(cluster):
    r = run([TESTS / "capi_probe", "threads", cluster.addr], timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.fixture
def mute_server():
    """A TCP server that accepts connections and never answers."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    conns, stop = [], threading.Event()

    def loop():
        srv.settimeout(0.1)
        while not stop.is_set():
            try:
                conns.append(srv.accept()[0])
            except OSError:
                pass

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    yield "127.0.0.1:%d" % srv.getsockname()[1]
    stop.set()
    t.join()
    for c in conns:
        c.close()
    srv.close()


def test_waits_time_out(mute_server):
    r = run([TESTS / "capi_probe", "timeout", mute_server])
    assert r.returncode == 0, r.stdout + r.stderr
    assert "no reply from the controller within 500 ms" in r.stdout


def test_waits_can_be_interrupted(mute_server):
    r = run([TESTS / "capi_probe", "interrupt", mute_server])
    assert r.returncode == 0, r.stdout + r.stderr
    assert "interrupted" in r.stdout
