"""Workers serving their devices through a PJRT plugin (`loom up --backend pjrt`, XLA:CPU from
PyPI's xla-cpu-pjrt): per-device programs without collectives are compiled and run by the plugin,
programs with collectives are cut at them, the compute between through the plugin (each worker
logs which), and both give the
numbers Loom's own executor gives. A plugin that cannot be loaded stops `loom up` with its name."""
import os
import re

import numpy as np
import pytest

from conftest import run_loom
from loomtest import SOURCE_DIR

try:
    import xla_plugins
    PLUGIN = next((os.path.join(d, "xla_cpu_pjrt", "xla_cpu_pjrt.so") for d in xla_plugins.__path__
                   if os.path.exists(os.path.join(d, "xla_cpu_pjrt", "xla_cpu_pjrt.so"))), None)
except ImportError:
    PLUGIN = None

pytestmark = pytest.mark.skipif(PLUGIN is None, reason="xla-cpu-pjrt is not installed (pip install xla-cpu-pjrt)")
EXAMPLES = os.path.join(SOURCE_DIR, "examples")

SINGLE = """module @jit_f attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<3x4xf32>) -> (tensor<3x3xf32>, tensor<f32>) {
    %0 = stablehlo.sine %arg0 : tensor<3x4xf32>
    %1 = stablehlo.dot_general %0, %arg0, contracting_dims = [1] x [1] : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x3xf32>
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %2 = stablehlo.reduce(%arg0 init: %cst) applies stablehlo.add across dimensions = [0, 1] : (tensor<3x4xf32>, tensor<f32>) -> tensor<f32>
    return %1, %2 : tensor<3x3xf32>, tensor<f32>
  }
}
"""

# a convolution: the worker prints the per-device program with Loom's printer for the plugin
# (once written in a form StableHLO's parser refused, so convolutions fell back to Loom's executor)
CONV = """module @jit_conv attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<2x3x8x8xf32>, %arg1: tensor<4x3x3x3xf32>) -> tensor<2x4x8x8xf32> {
    %0 = stablehlo.convolution(%arg0, %arg1) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], window = {stride = [1, 1], pad = [[1, 1], [1, 1]], lhs_dilate = [1, 1], rhs_dilate = [1, 1], reverse = [false, true]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<2x3x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<2x4x8x8xf32>
    return %0 : tensor<2x4x8x8xf32>
  }
}
"""


def outputs(tmp_path, name, *args):
    out = tmp_path / name
    r = run_loom("run", *args, "--output-dir", str(out), timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    return [np.load(out / f) for f in sorted(os.listdir(out))]


def test_pjrt_workers(tmp_path):
    prog = tmp_path / "single.mlir"
    prog.write_text(SINGLE)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.save(tmp_path / "x.npy", x)
    conv = tmp_path / "conv.mlir"
    conv.write_text(CONV)
    rng = np.random.default_rng(0)
    np.save(tmp_path / "img.npy", rng.standard_normal((2, 3, 8, 8)).astype(np.float32))
    np.save(tmp_path / "ker.npy", rng.standard_normal((4, 3, 3, 3)).astype(np.float32))
    runs = [("single", [str(prog), "--input", f"0={tmp_path / 'x.npy'}"]),
            ("conv", [str(conv), "--input", f"0={tmp_path / 'img.npy'}", "--input", f"1={tmp_path / 'ker.npy'}"]),
            ("sum", [os.path.join(EXAMPLES, "distributed_sum.mlir")]),
            ("psum", [os.path.join(EXAMPLES, "distributed_psum.mlir"), "--input",
                      f"0={os.path.join(EXAMPLES, 'arange8.npy')}"])]
    # Loom's own executor first, as the reference
    run_loom("up", "--detach", "--proxy-port", "0", timeout=90, check=True)
    try:
        want = {name: outputs(tmp_path, "ref_" + name, *args) for name, args in runs}
    finally:
        run_loom("down", check=True)
    r = run_loom("up", "--detach", "--proxy-port", "0", "--backend", "pjrt", "--pjrt-plugin", PLUGIN, timeout=90)
    assert r.returncode == 0, r.stdout + r.stderr
    try:
        got = {name: outputs(tmp_path, "pjrt_" + name, *args) for name, args in runs}
        devices = run_loom("devices", "--json", check=True).stdout
    finally:
        run_loom("down", check=True)
    for name, _ in runs:
        assert len(got[name]) == len(want[name])
        for g, w in zip(got[name], want[name]):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got["single"][1], x.sum(), rtol=1e-6)
    assert got["sum"][0].tolist() == [8] * 8 and got["psum"][0].tolist() == [140] * 8
    assert devices.count('"cpu"') >= 8
    logs = "".join((p.read_text() for p in (tmp_path / "state").glob("worker-*.log")))
    assert "devices through PJRT plugin" in logs
    assert re.search(r"program \d+ \(\S*single\.mlir\) compiled by the PJRT plugin", logs), logs[-3000:]
    assert re.search(r"program \d+ \(\S*conv\.mlir\) compiled by the PJRT plugin", logs), logs[-3000:]
    # with collectives: cut at them, the compute on either side through the plugin (test_pjrt_cut.py)
    assert re.search(r"distributed_psum\.mlir\) cut at 1 collective: 2 segments compiled by the PJRT plugin, 1 on Loom's "
                     r"executor", logs), logs[-3000:]


def test_a_plugin_that_cannot_load_stops_loom_up(tmp_path):
    bad = tmp_path / "nope.so"
    r = run_loom("up", "--detach", "--proxy-port", "0", "--backend", "pjrt", "--pjrt-plugin", str(bad), timeout=90)
    assert r.returncode != 0
    assert "nope.so" in r.stdout + r.stderr and "cannot be loaded" in r.stdout + r.stderr, r.stdout + r.stderr
    r = run_loom("up", "--detach", "--backend", "xla", timeout=30)
    assert r.returncode == 2 and "interp or pjrt" in r.stderr
