"""Faults during launches on a real cluster (2 workers x 4 devices): a worker SIGKILLed in the
middle of a launch (its future fails naming the worker, within a bounded time, while another
session's work on the other worker's devices goes on), and a frozen worker (SIGSTOP) found by
its missing heartbeats."""
import signal
import subprocess
import threading
import time

from conftest import LOOM_BIN, Cluster, devices
from dist import PROBE, PROGRAMS


def worker_proc(cluster, worker_id):
    """The started process that registered as worker_id (registration order is not start order)."""
    pid = next(d["pid"] for d in devices(cluster.addr)["devices"] if d["worker_id"] == worker_id)
    return next(p for p in cluster.workers if p.pid == pid)


class Reader:
    """Reads a process's stdout lines in the background, so waits can have deadlines."""

    def __init__(self, p):
        self.p, self.lines, self.cv = p, [], threading.Condition()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        for line in self.p.stdout:
            with self.cv:
                self.lines.append(line.rstrip("\n"))
                self.cv.notify_all()

    def wait_line(self, prefix, timeout):
        deadline = time.monotonic() + timeout
        with self.cv:
            while True:
                for line in self.lines:
                    if line.startswith(prefix):
                        return line
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no line starting with {prefix!r} within {timeout} s: {self.lines}")
                self.cv.wait(left)


def start_probe(*args):
    p = subprocess.Popen([str(PROBE), *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         stdin=subprocess.DEVNULL)
    return p, Reader(p)


def test_worker_killed_mid_launch(cluster, procs, tmp_path):
    a, ra = start_probe("wait", cluster.addr, PROGRAMS / "spin_psum_8.mlir", "0-7")
    try:
        ra.wait_line("launched", 60)
        # another session, on worker 0's devices only, queued behind the first launch there
        b = subprocess.Popen([LOOM_BIN, "run", str(PROGRAMS / "spin_4.mlir"), "--devices", "0-3", "--controller",
                              cluster.addr], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(1.5)
        t0 = time.monotonic()
        procs.kill(worker_proc(cluster, 1))
        line = ra.wait_line("done", 30)
        elapsed = time.monotonic() - t0
        assert line.startswith("done WORKER_LOST"), line
        assert "worker 1 (" in line and "was lost during the launch" in line, line
        print(f"the launch failed {elapsed * 1000:.0f} ms after the kill")
        assert elapsed < 10, f"the launch took {elapsed:.1f} s to fail"
        out, err = b.communicate(timeout=120)
        assert b.returncode == 0, err
        assert out == "[1000000 1000000 1000000 1000000]\n"
    finally:
        for p in (a,):
            if p.poll() is None:
                p.kill()
            p.wait()
    # the surviving worker's devices keep working; the lost ones are refused with the reason (a short
    # spin: the sanitizer build on a loaded machine takes tens of seconds for the long one)
    short = tmp_path / "spin_4_short.mlir"
    short.write_text((PROGRAMS / "spin_4.mlir").read_text().replace("dense<1000000>", "dense<1000>"))
    r = subprocess.run([LOOM_BIN, "run", str(short), "--devices", "4-7", "--controller",
                        cluster.addr], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "device 4 is unavailable" in r.stderr and "connection closed" in r.stderr, r.stderr
    r = subprocess.run([LOOM_BIN, "run", str(short), "--devices", "0-3", "--controller",
                        cluster.addr], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout == "[1000 1000 1000 1000]\n", r.stderr


def test_frozen_worker_fails_the_launch(procs, tmp_path):
    c = Cluster(procs, tmp_path)
    c.start_controller("--heartbeat-timeout", "2000")
    c.start_worker(4)
    c.start_worker(4)
    c.wait_devices(8)
    a, ra = start_probe("wait", c.addr, PROGRAMS / "spin_psum_8.mlir", "0-7")
    try:
        ra.wait_line("launched", 60)
        time.sleep(1.0)
        t0 = time.monotonic()
        procs.kill(worker_proc(c, 0), signal.SIGSTOP)
        line = ra.wait_line("done", 30)
        elapsed = time.monotonic() - t0
        assert line.startswith("done WORKER_LOST") and "worker 0 (" in line and "no heartbeat" in line, line
        assert elapsed < 12, f"the launch took {elapsed:.1f} s to fail"
    finally:
        if a.poll() is None:
            a.kill()
        a.wait()


def test_worker_out_of_descriptors_then_recovers(cluster, tmp_path):
    """A worker whose descriptors run out (its soft limit lowered, the rest taken by idle
    connections) refuses a client's data connection: the client is told the worker's data port
    dropped it and why that may be, not that the controller did; once descriptors are free again the same
    program, an all_reduce across both workers, runs."""
    import os
    import re
    import resource
    import socket
    import numpy as np
    from dist import EXAMPLES, loom_run
    w = worker_proc(cluster, 1)
    port = int(re.search(r"data port 127\.0\.0\.1:(\d+)", cluster.procs.log(w)).group(1))
    soft, hard = resource.prlimit(w.pid, resource.RLIMIT_NOFILE)
    held = len(os.listdir(f"/proc/{w.pid}/fd"))
    resource.prlimit(w.pid, resource.RLIMIT_NOFILE, (held + 16, hard))
    socks = []
    x = np.arange(8, dtype=np.int32)
    try:
        for _ in range(40):  # more than it has room for: the rest wait in the kernel's queue
            socks.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        time.sleep(0.5)
        r, _ = loom_run(cluster.addr, EXAMPLES / "distributed_psum.mlir", inputs=[x], tmp=tmp_path)
        assert r.returncode != 0, r.stdout
        assert "worker data port" in r.stderr and "file descriptors" in r.stderr, r.stderr
        assert "the controller closed" not in r.stderr, r.stderr
    finally:
        for s in socks:
            s.close()
        resource.prlimit(w.pid, resource.RLIMIT_NOFILE, (soft, hard))
    r, res = loom_run(cluster.addr, EXAMPLES / "distributed_psum.mlir", inputs=[x], tmp=tmp_path)
    assert r.returncode == 0, r.stderr
    assert res[0].tolist() == [140] * 8, res
