"""`loom interpret` itself, on small files written here: PASS / FAIL / UNSUPPORTED / ERROR per
`// -----` case with file:line, the summary line, exit statuses, --json, --function, and the
check semantics (exact, tolerance, ULP, NaN, complex)."""
import json
import os

from loomtest import run_loom

CASES = """\
func.func @passes() {
  %0 = stablehlo.constant dense<[1.0, 2.0]> : tensor<2xf32>
  %1 = stablehlo.add %0, %0 : tensor<2xf32>
  check.expect_eq_const %1, dense<[2.0, 4.0]> : tensor<2xf32>
  func.return
}

// -----

func.func @fails() {
  %0 = stablehlo.constant dense<[[1, 2], [3, 4]]> : tensor<2x2xi32>
  check.expect_eq_const %0, dense<[[1, 2], [3, 5]]> : tensor<2x2xi32>
  func.return
}

// -----

func.func @unsupported_type() {
  %0 = stablehlo.constant dense<[1, 2]> : tensor<2xi4>
  func.return
}

// -----

func.func @syntax_error() {
  %0 = stablehlo.add %x : tensor<f32>
  func.return
}
"""


def run(*args, text=None, tmp_path=None, name="t.mlir"):
    path = None
    if text is not None:
        path = tmp_path / name
        path.write_text(text)
        args = (*args, str(path))
    return run_loom("interpret", *args), path


def test_statuses_and_summary(tmp_path):
    p, path = run(text=CASES, tmp_path=tmp_path)
    lines = p.stdout.splitlines()
    assert p.returncode == 1, p.stdout + p.stderr
    assert lines[0].startswith("PASS") and f"{path}:1 @passes" in lines[0]
    assert lines[1].startswith("FAIL") and f"{path}:10 @fails" in lines[1]
    assert "mismatch at index [1, 1]: actual 4, expected 5" in lines[1]
    assert lines[2].startswith("UNSUPPORTED") and "unsupported element type 'i4'" in lines[2]
    assert lines[3].startswith("ERROR") and f"{path}:25:" in lines[3] and "undefined SSA value '%x'" in lines[3]
    assert lines[4] == "4 cases in 1 file: 1 passed, 1 failed, 1 unsupported, 1 errors"


def test_json_and_quiet(tmp_path):
    p, _ = run("--json", text=CASES, tmp_path=tmp_path)
    objs = [json.loads(l) for l in p.stdout.splitlines()]
    assert [o["status"] for o in objs[:-1]] == ["PASS", "FAIL", "UNSUPPORTED", "ERROR"]
    assert objs[-1]["summary"] == {"files": 1, "cases": 4, "pass": 1, "fail": 1, "unsupported": 1, "error": 1}
    p, _ = run("--quiet", text=CASES, tmp_path=tmp_path)
    assert [l.split()[0] for l in p.stdout.splitlines()] == ["FAIL", "ERROR", "4"]


def test_only_passing_exits_zero(tmp_path):
    ok = CASES.split("// -----")[0] + "// -----\n" + CASES.split("// -----")[2]
    p, _ = run(text=ok, tmp_path=tmp_path)
    assert p.returncode == 0, p.stdout
    assert "1 passed, 0 failed, 1 unsupported" in p.stdout


CHECKS = """\
func.func @main() {
  %a = stablehlo.constant dense<[1.0, 0x7FC00000, 0x7F800000]> : tensor<3xf32>
  %b = stablehlo.constant dense<[1.00001, 0x7FC00001, 0x7F800000]> : tensor<3xf32>
  check.expect_almost_eq %a, %b : tensor<3xf32>
  check.expect_close %a, %b, max_ulp_difference = 100 : tensor<3xf32>, tensor<3xf32>
  %c = stablehlo.constant dense<[(1.0, 2.0)]> : tensor<1xcomplex<f64>>
  check.expect_almost_eq_const %c, dense<[(1.00005, 2.0)]> : tensor<1xcomplex<f64>>
  stablehlo.custom_call @check.expect_almost_eq(%a, %b) {has_side_effect = true} : (tensor<3xf32>, tensor<3xf32>) -> ()
  func.return
}
"""


def test_check_semantics(tmp_path):
    p, _ = run(text=CHECKS, tmp_path=tmp_path)
    assert p.returncode == 0, p.stdout
    # 3 ULP is the default limit of expect_close; 1.00001 is 84 ULP from 1.0
    strict = CHECKS.replace(", max_ulp_difference = 100", "")
    p, _ = run(text=strict, tmp_path=tmp_path, name="strict.mlir")
    assert p.returncode == 1 and "check.expect_close: mismatch at index [0]" in p.stdout
    # infinities must match exactly
    inf = CHECKS.replace("0x7F800000]> : tensor<3xf32>\n  check.expect_almost_eq", "0xFF800000]> : tensor<3xf32>\n  check.expect_almost_eq")
    p, _ = run(text=inf, tmp_path=tmp_path, name="inf.mlir")
    assert p.returncode == 1 and "index [2]" in p.stdout


def test_function_selection_and_errors(tmp_path):
    two = "func.func @a() {\n  func.return\n}\nfunc.func @b(%x: tensor<f32>) -> tensor<f32> {\n  return %x : tensor<f32>\n}\n"
    p, _ = run(text=two, tmp_path=tmp_path)
    assert p.returncode == 0 and "PASS" in p.stdout and "@a" in p.stdout and "@b" not in p.stdout
    p, _ = run("--function", "b", text=two, tmp_path=tmp_path)
    assert "UNSUPPORTED" in p.stdout and "--input" in p.stdout
    p, _ = run("--function", "nope", text=two, tmp_path=tmp_path)
    assert p.returncode == 1 and "no such function" in p.stdout
    p = run_loom("interpret", "--bogus")
    assert p.returncode == 2 and "unknown" in p.stderr
    p = run_loom("interpret", "--help")
    assert p.returncode == 0 and "--output-dir" in p.stdout
    p = run_loom("interpret", str(tmp_path / "missing.mlir"))
    assert p.returncode == 1 and "ERROR" in p.stdout


def test_device_memory_budget(tmp_path):
    big = ("func.func @main() {\n  %0 = stablehlo.constant dense<1.0> : tensor<1024x1024xf32>\n"
           "  %1 = stablehlo.add %0, %0 : tensor<1024x1024xf32>\n  check.expect_eq %1, %1 : tensor<1024x1024xf32>\n  func.return\n}\n")
    p, _ = run("--device-memory", "1M", text=big, tmp_path=tmp_path)
    assert p.returncode == 1 and "out of device memory" in p.stdout.lower(), p.stdout
    p, _ = run("--device-memory", "64M", text=big, tmp_path=tmp_path)
    assert p.returncode == 0, p.stdout


PROBES = """\
func.func @main() {
  %a = stablehlo.constant dense<[1, 2]> : tensor<2xi32>
  %b = interpreter.probe %a, probe_id = "x/y" : tensor<2xi32>
  %c = stablehlo.add %b, %b : tensor<2xi32>
  %d = interpreter.probe %c, probe_id = "x/y" : tensor<2xi32>
  check.expect_serialized_eq %a, probe_id = "x/y" : tensor<2xi32>
  check.expect_serialized_eq %c, probe_id = "x/y", iter = 1 : tensor<2xi32>
  func.return
}
"""


def test_probes(tmp_path):
    p, _ = run(text=PROBES, tmp_path=tmp_path)
    assert p.returncode == 0, p.stdout
    keep = tmp_path / "probes"
    keep.mkdir()
    p, _ = run("--probe-dir", str(keep), text=PROBES, tmp_path=tmp_path)
    assert p.returncode == 0, p.stdout
    assert sorted(os.listdir(keep)) == ["x%2Fy.0.npy", "x%2Fy.1.npy"]
    bad = PROBES.replace("iter = 1", "iter = 2")
    p, _ = run(text=bad, tmp_path=tmp_path, name="bad.mlir")
    assert p.returncode == 1 and "no value number 2" in p.stdout
