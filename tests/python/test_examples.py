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
