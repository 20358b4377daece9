"""Helpers shared by the pytest suites' conftests (tests/integration, tests/python): where the build
under test is, running the `loom` command, waiting for a condition, and a time limit per test.

Importable as `loomtest` from any test directory: pytest puts tests/ on sys.path when it loads
tests/conftest.py (the rootdir's pytest.ini makes it a conftest of every test file)."""
import os
import signal
import socket
import subprocess
import threading
import time
from contextlib import contextmanager
from pathlib import Path

SOURCE_DIR = Path(os.environ.get("LOOM_SOURCE_DIR", Path(__file__).resolve().parents[1]))
BUILD_DIR = Path(os.environ.get("LOOM_BUILD_DIR", SOURCE_DIR / "build"))
LOOM_BIN = os.environ.get("LOOM_BIN", str(BUILD_DIR / "bin" / "loom"))


def run_loom(*args, timeout=60, check=False, env=None):
    """Runs `loom ARGS` to completion; returns the CompletedProcess (text mode). With check, a
    non-zero exit fails with the command's output."""
    r = subprocess.run([LOOM_BIN, *args], capture_output=True, text=True, timeout=timeout, env=env,
                       stdin=subprocess.DEVNULL)
    if check and r.returncode != 0:
        raise AssertionError(f"loom {' '.join(args)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return r


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(cond, timeout, interval=0.05, what="condition"):
    """Polls cond() until it returns a truthy value, which is returned; fails after timeout s."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


@contextmanager
def time_limit(seconds):
    """Raises TimeoutError in the block once it has run for `seconds` (SIGALRM)."""
    def on_alarm(signum, frame):
        raise TimeoutError(f"test exceeded its {seconds} s limit")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


# One step of a chain on 4 devices: x * 1.0001 + sin(x) on each quarter of an (8,) f32 array
# (elementwise: bitwise the same wherever it runs).
CHAIN_STEP_4 = """
module @step attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["d"=4]>
  func.func public @main(%arg0: tensor<8xf32>) -> tensor<8xf32> {
    %0 = sdy.manual_computation(%arg0) in_shardings=[<@mesh, [{"d"}]>] out_shardings=[<@mesh, [{"d"}]>] manual_axes={"d"} (%a: tensor<2xf32>) {
      %c = stablehlo.constant dense<1.0001> : tensor<2xf32>
      %m = stablehlo.multiply %a, %c : tensor<2xf32>
      %s = stablehlo.sine %a : tensor<2xf32>
      %r = stablehlo.add %m, %s : tensor<2xf32>
      sdy.return %r : tensor<2xf32>
    } : (tensor<8xf32>) -> tensor<8xf32>
    return %0 : tensor<8xf32>
  }
}
"""


class Chain(dict):
    """A chain of launches on a thread of its own: x = put(x0, sharding), then x, = exe.launch(x)
    until ["stop"] is set; ["n"] counts the launches done, ["x"] is the last value (numpy) once
    stopped, ["err"] what failed (checked by the test). ["cl"] and ["exe"] are the client and the
    executable. .thread runs it: started at once unless start=False."""

    def __init__(self, client, exe, x0, sharding, start=True):
        super().__init__(cl=client, exe=exe, n=0, stop=False, err=None, x=None)
        self.x0, self.sharding = x0, sharding
        self.thread = threading.Thread(target=self._run, daemon=True)
        if start:
            self.thread.start()

    def _run(self):
        try:
            x = self["cl"].put(self.x0, sharding=self.sharding)
            while not self["stop"]:
                (x,), fut = self["exe"].launch(x)
                fut.result(timeout=120)
                self["n"] += 1
            self["x"] = x.numpy()
        except Exception as e:  # noqa: BLE001 (the test checks ["err"])
            self["err"] = e


def chain_value(client, exe, x0, sharding, n):
    """The bytes a chain (see Chain) ends with after n launches when nothing disturbs it: x0 put
    with sharding, then exe launched n times in a row on client."""
    y = client.put(x0, sharding=sharding)
    for _ in range(n):
        (y,), f = exe.launch(y)
        f.result(timeout=30)
    return y.numpy().tobytes()
