"""The examples run on a local cluster as a user runs them: examples/tpu_workload.py (the seed
how-to's program) prints the devices and `Distributed result: [8 8 8 8 8 8 8 8]`;
examples/train_mlp.py trains data-parallel with a decreasing loss matching plain JAX."""
import subprocess
import sys

from conftest import SOURCE_DIR


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
