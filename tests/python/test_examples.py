"""The examples run on a local cluster (with its IFRT proxy) as a user runs them:
examples/tpu_workload.py (the seed how-to's program, loom.jax.initialize() in place of
pathwaysutils) prints the devices and `Distributed result: [8 8 8 8 8 8 8 8]`;
examples/train_mlp.py trains data-parallel through the proxy with a decreasing loss matching plain
JAX. loom.jax.initialize() falls back to its patched jax.devices()/jax.pmap, saying why, where
there is no proxy or JAX started first."""
import subprocess
import sys

import pytest

from conftest import SOURCE_DIR, LocalCluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LocalCluster(tmp_path_factory.mktemp("loom-state"), proxy=True)
    try:
        yield c
    finally:
        r = c.down()
        assert r.returncode == 0, f"loom down failed: {r.stdout}{r.stderr}"


@pytest.fixture(scope="module")
def cluster_without_proxy(tmp_path_factory):
    c = LocalCluster(tmp_path_factory.mktemp("loom-state"))
    try:
        yield c
    finally:
        c.down()


def run_example(cluster, name, *args, timeout=150):
    r = subprocess.run([sys.executable, str(SOURCE_DIR / "examples" / name), *args], env=cluster.env,
                       capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, f"{name} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"
    return r.stdout, r.stderr


def test_tpu_workload(cluster):
    out, _ = run_example(cluster, "tpu_workload.py")
    lines = out.splitlines()
    assert lines[0] == "Available devices: 8"
    assert lines[1].startswith("Device details: [LoomDevice(id=0,") and "id=7" in lines[1]
    assert lines[-1] == "Distributed result: [8 8 8 8 8 8 8 8]"


def test_train_mlp(cluster):
    out, err = run_example(cluster, "train_mlp.py", "--steps", "60")
    assert "match" in out and "MISMATCH" not in out and "loss decreased" in out, out
    assert "60/60" in err  # the progress bar reached the end


TOO_LATE = """
import warnings, numpy as np, jax, jax.numpy as jnp
jnp.ones(3).block_until_ready()  # JAX's backend starts with one CPU device
import loom.jax
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    loom.jax.initialize()
print("warned:", any("JAX_NUM_CPU_DEVICES=8" in str(x.message) for x in w))
print("jit:", loom.jax.jit(lambda x: x + 1)(np.ones(2)))
try:
    jax.pmap(lambda v: v * 2)(np.arange(8.0))
except RuntimeError as e:
    print("pmap:", e)
"""


def test_jax_configured_too_late_says_so(cluster):
    r = subprocess.run([sys.executable, "-c", TOO_LATE], env=cluster.env, capture_output=True, text=True,
                       timeout=120, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "warned: True" and lines[1] == "jit: [2. 2.]", r.stdout
    assert lines[2].startswith("pmap: pmap(<lambda>): JAX's CPU backend started with 1 device(s)"), r.stdout
    assert "loom.jax.initialize() before the first JAX computation" in lines[2]


THROUGH_PROXY = """
import warnings, numpy as np
warnings.simplefilter("error")            # the proxy path must not fall back
import loom.jax, jax, jax.numpy as jnp
orig = jax.devices
target = loom.jax.initialize()
print("target:", target.startswith("grpc://127.0.0.1:"))
print("unpatched:", jax.devices is orig, len(jax.devices()))
x = jnp.arange(8.0)
g = jax.grad(lambda v: jnp.sum(v * v))(x)  # plain JAX transformations over cluster arrays
print("array:", isinstance(g, jax.Array), np.asarray(g).tolist() == (2 * np.arange(8.0)).tolist())
print("on:", sorted(d.id for d in g.devices()), type(g.devices().pop()).__name__)
"""


def test_initialize_points_jax_at_the_proxy(cluster):
    r = subprocess.run([sys.executable, "-c", THROUGH_PROXY], env=cluster.env, capture_output=True, text=True,
                       timeout=120, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["target: True", "unpatched: True 8", "array: True True", "on: [0] Device"], \
        r.stdout + r.stderr


NO_PROXY = """
import warnings, numpy as np
import loom.jax, jax
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    c = loom.jax.initialize()
print("fell back:", any("runs no IFRT proxy" in str(x.message) for x in w), type(c).__name__)
print("pmap:", np.asarray(jax.pmap(lambda v: v * 2)(np.arange(8.0))).tolist())
try:
    loom.jax.initialize(proxy="127.0.0.1:1")
except RuntimeError as e:
    print("late:", "already started" in str(e))
"""


def test_initialize_without_a_proxy_falls_back(cluster_without_proxy):
    r = subprocess.run([sys.executable, "-c", NO_PROXY], env=cluster_without_proxy.env, capture_output=True,
                       text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["fell back: True Client",
                                     "pmap: [0.0, 2.0, 4.0, 6.0, 8.0, 10.0, 12.0, 14.0]", "late: True"], \
        r.stdout + r.stderr
