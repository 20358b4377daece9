"""Fixtures for the integration tests: real controller and worker processes on free ports.

Every test runs with a time limit, with its own state directory (LOOM_STATE_DIR) and without
LOOM_CONTROLLER, and kills whatever it started, even when it fails. Daemons that the test did not
kill on purpose must stop cleanly on SIGTERM with status 0: under the sanitizer build that is
where leaks (LeakSanitizer exits 66) and undefined behaviour show up.
"""
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from loomtest import BUILD_DIR, LOOM_BIN, SOURCE_DIR, run_loom, time_limit, wait_for  # noqa: F401 (for the tests)

TEST_TIME_LIMIT = 150  # seconds per test, under the ctest timeout of the whole file
# ctest gives each file a timeout (tests/CMakeLists.txt) and then kills it without a report; under
# ctest, tests stop inside LOOM_TEST_FILE_BUDGET instead, so a hang is reported with its name and logs.
FILE_BUDGET = float(os.environ.get("LOOM_TEST_FILE_BUDGET", "inf"))
_FILE_START = time.monotonic()


def sanitized_build():
    """True when LOOM_BUILD_DIR is a sanitizer build (its binaries need ASan at link time)."""
    cache = BUILD_DIR / "CMakeCache.txt"
    return cache.exists() and "LOOM_SANITIZE:BOOL=ON" in cache.read_text()


def loom_package():
    """(the loom module, None) when `import loom` finds this build's Python package, else (None, why
    not): the sanitizer build has none, and another installed copy would test other code. Tests
    that use it skip with that reason: pytestmark = pytest.mark.skipif(why is not None, ...)."""
    if sanitized_build():
        return None, "the Python package is not built for the sanitizer build"
    try:
        import loom
    except ImportError as e:
        return None, f"no loom package: {e}"
    if not Path(loom.__file__).resolve().is_relative_to((BUILD_DIR / "python").resolve()):
        return None, (f"loom is imported from {loom.__file__}, not this build's package ({BUILD_DIR}/python: "
                      "scripts/install-python.sh)")
    return loom, None


def devices(addr, timeout=60):
    """The controller's device list as `loom devices --json` prints it."""
    r = run_loom("devices", "--json", "--controller", addr, timeout=timeout, check=True)
    return json.loads(r.stdout)


def pid_gone(pid):
    """True when pid no longer runs (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return True
    return stat[stat.rindex(")") + 2] in "ZX"


class Procs:
    """Processes a test started; cleanup() stops them all and reports any unclean exit."""

    def __init__(self, tmp_path):
        self.tmp = tmp_path
        self.items = []

    def start(self, args, name, env=None, prefix=()):
        """Starts `loom ARGS` (after the command words in prefix, e.g. a wrapper that execs it)
        with its output in NAME.log; cleanup() stops it and holds an unclean exit against it."""
        log = self.tmp / f"{name}.log"
        with open(log, "wb") as f:
            p = subprocess.Popen([*map(str, prefix), LOOM_BIN, *args], stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 start_new_session=True, env=env)
        p.name, p.logpath, p.expect_clean = name, log, True
        self.items.append(p)
        return p

    def log(self, p):
        return p.logpath.read_text(errors="replace")

    def kill(self, p, sig=signal.SIGKILL):
        """Sends sig on purpose: the process's exit status is then not held against it."""
        p.expect_clean = False
        os.kill(p.pid, sig)

    def cleanup(self):
        problems = []
        order = sorted(reversed(self.items), key=lambda p: "worker" not in p.name)  # workers first
        for p in order:
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
                problems.append(f"{p.name} did not stop within 20 s of SIGTERM")
                continue
            text = self.log(p)
            if p.expect_clean and (p.returncode != 0 or "runtime error:" in text or "Sanitizer" in text):
                problems.append(f"{p.name} exited with status {p.returncode}; its log ends:\n{text[-3000:]}")
        for p in self.items:
            print(f"----- {p.name} (pid {p.pid}, status {p.returncode}) -----\n{self.log(p)[-4000:]}")
        return problems


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    """A private state directory, no inherited controller address, and a time limit."""
    state = tmp_path / "state"
    monkeypatch.setenv("LOOM_STATE_DIR", str(state))
    monkeypatch.delenv("LOOM_CONTROLLER", raising=False)
    left = FILE_BUDGET - (time.monotonic() - _FILE_START)
    with time_limit(int(max(10, min(TEST_TIME_LIMIT, left)))):
        yield


@pytest.fixture
def procs(tmp_path):
    ps = Procs(tmp_path)
    yield ps
    problems = ps.cleanup()
    assert not problems, "\n".join(problems)


class Auth:
    """A cluster secret and a token store in tmp_path/auth, with a token per user in self.tokens."""

    def __init__(self, tmp_path, users=("alice",)):
        d = tmp_path / "auth"
        d.mkdir(mode=0o700, exist_ok=True)
        self.secret_file, self.tokens_file = d / "secret", d / "tokens"
        fd = os.open(self.secret_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.write(fd, (os.urandom(32).hex() + "\n").encode())
        os.close(fd)
        self.secret = bytes.fromhex(self.secret_file.read_text().strip())
        self.tokens = {u: self.create(u) for u in users}

    def create(self, user, *extra):
        r = run_loom("token", "create", "--user", user, "--tokens-file", str(self.tokens_file), *extra, check=True)
        return r.stdout.strip()

    def controller_args(self):
        return ["--secret-file", str(self.secret_file), "--tokens-file", str(self.tokens_file)]


class Cluster:
    """A controller and its workers, started by hand as `loom controller` / `loom worker`; with
    auth (an Auth), the controller needs the secret from workers and a token from clients."""

    def __init__(self, procs, tmp_path, auth=None):
        self.procs, self.tmp, self.auth = procs, tmp_path, auth
        self.controller, self.addr, self.workers = None, None, []

    def start_controller(self, *extra):
        addr_file = self.tmp / "controller.addr"
        if self.auth:
            extra = (*self.auth.controller_args(), *extra)
        self.controller = self.procs.start(
            ["controller", "--listen", "127.0.0.1:0", "--address-file", str(addr_file), *extra], "controller")

        def ready():
            if self.controller.poll() is not None:
                raise AssertionError(f"controller exited: {self.procs.log(self.controller)}")
            return addr_file.exists() and addr_file.read_text().strip()

        self.addr = wait_for(ready, 30, what="the controller's address file")
        return self.addr

    def start_worker(self, devices=4, slice_name=None, memory=None, extra=()):
        args = ["worker", "--controller", self.addr, "--devices", str(devices), *extra]
        if self.auth:
            args += ["--secret-file", str(self.auth.secret_file)]
        if slice_name:
            args += ["--slice", slice_name]
        if memory:
            args += ["--device-memory", str(memory)]
        w = self.procs.start(args, f"worker{len(self.workers)}")
        self.workers.append(w)
        return w

    def wait_devices(self, n, healthy=None, timeout=30):
        """Waits until the controller lists n devices (and `healthy` of them healthy)."""
        want_healthy = n if healthy is None else healthy

        def ok():
            d = devices(self.addr)
            hv = sum(1 for x in d["devices"] if x["healthy"])
            return d if len(d["devices"]) == n and hv == want_healthy else None

        return wait_for(ok, timeout, interval=0.1, what=f"{n} devices ({want_healthy} healthy)")


def tight_cluster(procs, tmp_path, devices_per_worker=4, auth=None):
    """2 workers behind a controller with short deadlines (for the hostile-input tests)."""
    c = Cluster(procs, tmp_path, auth)
    c.start_controller("--frame-timeout", "500", "--handshake-timeout", "1500")
    c.start_worker(devices_per_worker)
    c.start_worker(devices_per_worker)
    c.wait_devices(2 * devices_per_worker)
    return c


@pytest.fixture
def cluster(procs, tmp_path):
    """A controller and 2 workers x 4 devices, all registered."""
    c = Cluster(procs, tmp_path)
    c.start_controller()
    c.start_worker(4, slice_name="slice-a")
    c.start_worker(4, slice_name="slice-a")
    c.wait_devices(8)
    return c
