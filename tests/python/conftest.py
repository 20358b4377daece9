"""Fixtures for the Python package's tests: a real local cluster per test module (`loom up
--detach`: a controller and 2 workers x 4 CPU devices, its state in a temporary directory,
always `loom down` afterwards), the default loom.jax client over it, and a time limit per test.

The tests import the installed `loom` package (scripts/install-python.sh, run by `make test`,
installs it over this build's libloom); they fail at once with a clear message when the
installed package was built from another build directory.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from loomtest import BUILD_DIR, SOURCE_DIR, free_port, run_loom, time_limit, wait_for  # noqa: F401 (for the tests)

os.environ.setdefault("JAX_PLATFORMS", "cpu")
import jax  # noqa: E402

jax.config.update("jax_num_cpu_devices", 8)  # before anything starts JAX's backend

TEST_TIME_LIMIT = 120  # seconds per test

import loom  # noqa: E402

try:
    from loom import _build_info
except ImportError:  # an installation not made by setup.py's build_ext
    _build_info = None
if "LOOM_BUILD_DIR" in os.environ and _build_info is not None and \
        Path(_build_info.BUILD_DIR).resolve() != BUILD_DIR.resolve():
    raise pytest.UsageError(f"the installed loom package ({loom.__file__}) was built from {_build_info.BUILD_DIR}, not "
                            f"{BUILD_DIR}: run `make python` (scripts/install-python.sh {BUILD_DIR})")


class LocalCluster:
    """A cluster started with `loom up --detach` in its own state directory."""

    def __init__(self, state_dir, workers=2, devices_per_worker=4, device_memory=None, proxy=False):
        self.state = Path(state_dir)
        self.env = {k: v for k, v in os.environ.items() if k not in ("LOOM_CONTROLLER", "JAX_BACKEND_TARGET")}
        self.env["LOOM_STATE_DIR"] = str(self.state)
        args = ["up", "--detach", "--workers", str(workers), "--devices-per-worker", str(devices_per_worker)]
        if proxy:  # an IFRT proxy on a free port (the tests' default, LOOM_PROXY_PORT=0, starts none)
            args += ["--proxy-port", str(free_port())]
        if device_memory:
            args += ["--device-memory", str(device_memory)]
        self.up_output = run_loom(*args, env=self.env, timeout=90, check=True).stdout
        self.num_devices = workers * devices_per_worker

    def devices_json(self):
        return json.loads(run_loom("devices", "--json", env=self.env, check=True).stdout)["devices"]

    def down(self):
        return run_loom("down", env=self.env, timeout=60)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A local cluster for the whole module; LOOM_STATE_DIR points clients at it."""
    state = tmp_path_factory.mktemp("loom-state")
    mp = pytest.MonkeyPatch()
    mp.delenv("LOOM_CONTROLLER", raising=False)
    mp.setenv("LOOM_STATE_DIR", str(state))
    c = LocalCluster(state)
    try:
        yield c
    finally:
        import loom.jax
        loom.jax._closed_default()
        r = c.down()
        mp.undo()
        assert r.returncode == 0, f"loom down failed: {r.stdout}{r.stderr}"


@pytest.fixture(scope="module")
def client(cluster):
    """The default loom.jax client, connected to the module's cluster."""
    import loom.jax
    return loom.jax.initialize(patch_jax=False)


@pytest.fixture(autouse=True)
def _time_limit():
    with time_limit(TEST_TIME_LIMIT):
        yield


def python_script(code, env, argv=(), **kw):
    """Starts `python -c code ARGV...` with env (a cluster's), stdout piped, in its own process group."""
    return subprocess.Popen([sys.executable, "-c", code, *argv], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True, **kw)
