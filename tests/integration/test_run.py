"""`loom run` on a real cluster: numpy's printing of the results, --json, --output-dir,
--devices, and its usage errors."""
import json
import subprocess

import numpy as np
import pytest

from conftest import LOOM_BIN
from dist import EXAMPLES, PROGRAMS, loom_run

MLIR = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64", np.dtype(np.int32): "i32",
        np.dtype(np.int64): "i64", np.dtype(np.uint8): "ui8", np.dtype(np.bool_): "i1", np.dtype(np.int8): "i8"}


def literal(x):
    if x.ndim == 0:
        v = x.item()
        return ("true" if v else "false") if x.dtype == np.bool_ else repr(float(v)) if x.dtype.kind == "f" else str(v)
    return "[" + ", ".join(literal(r) for r in x) + "]"


def const_program(tmp_path, x):
    """A single-device program returning x, written as a dense constant."""
    t = "tensor<" + "".join(f"{d}x" for d in x.shape) + MLIR[x.dtype] + ">"
    p = tmp_path / "const.mlir"
    p.write_text(f"module {{\n  func.func public @main() -> {t} {{\n    %c = stablehlo.constant dense<{literal(x)}> : {t}\n"
                 f"    return %c : {t}\n  }}\n}}\n")
    return p


@pytest.mark.parametrize("x", [
    np.array([8] * 8, np.int32),
    np.array([1.5, 2.0, 3.25, -0.5], np.float32),
    np.array([0.1, 0.2, 100.0], np.float64),
    np.array([[1, 2, 3], [40, 50, 60]], np.int64),
    np.array([True, False, True]),
    np.array([1e-5, 1.0, 3.0], np.float32),
    np.array([-7, 0, 120], np.int8),
    np.arange(24, dtype=np.int32).reshape(2, 3, 4),
    np.arange(40, dtype=np.int32) * 1000,
], ids=lambda x: f"{x.dtype}{list(x.shape)}")
def test_prints_like_numpy(cluster, tmp_path, x):
    r, _ = loom_run(cluster.addr, const_program(tmp_path, x))
    assert r.returncode == 0, r.stderr
    assert r.stdout == str(x) + "\n"


def test_summarizes_large_arrays_like_numpy(cluster, tmp_path):
    x = np.arange(2000, dtype=np.int32)
    r, _ = loom_run(cluster.addr, const_program(tmp_path, x))
    assert r.returncode == 0, r.stderr
    assert r.stdout == str(x) + "\n"


def test_json_output_dir_and_devices(cluster, tmp_path):
    x = np.arange(16, dtype=np.int32)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "out"
    r = subprocess.run([LOOM_BIN, "run", str(PROGRAMS / "add_one_8.mlir"), "--input", str(tmp_path / "x.npy"),
                        "--devices", "7,6,5,4,3,2,1,0", "--output-dir", str(out), "--json", "--controller",
                        cluster.addr], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert j["devices"] == [7, 6, 5, 4, 3, 2, 1, 0] and j["num_partitions"] == 8 and j["sequence"] >= 1
    assert j["results"][0] == {"type": "i32[16]", "dtype": "<i4", "shape": [16], "data": list(range(1, 17))}
    np.testing.assert_array_equal(np.load(out / "result_0.npy"), x + 1)


def test_usage_errors(cluster, tmp_path):
    r = subprocess.run([LOOM_BIN, "run", "--help"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and "usage: loom run FILE.mlir" in r.stdout
    r = subprocess.run([LOOM_BIN, "run"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "which program" in r.stderr
    r = subprocess.run([LOOM_BIN, "run", str(EXAMPLES / "distributed_sum.mlir"), "--devices", "3-1"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "--devices" in r.stderr
    r, _ = loom_run(cluster.addr, tmp_path / "missing.mlir")
    assert r.returncode == 1 and "cannot read" in r.stderr
    r, _ = loom_run(cluster.addr, PROGRAMS / "add_one_8.mlir")
    assert r.returncode == 1 and "takes 1 argument" in r.stderr and "--input" in r.stderr
    r = subprocess.run([LOOM_BIN, "run", str(PROGRAMS / "add_one_8.mlir"), "--input", "5=x.npy", "--controller",
                        cluster.addr], capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and "no argument 5" in r.stderr
