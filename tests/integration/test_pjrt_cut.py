"""Per-device programs cut at their collectives on PJRT workers (`loom up --backend pjrt`, 2 workers
x 4 devices, XLA:CPU from PyPI's xla-cpu-pjrt): the compute between collectives runs as plugin
executables, the collectives on Loom's data plane, and every result equals what Loom's own
executor gives on an interp cluster. Programs: shard_map collectives on a 2x4 mesh (all_reduce,
all_gather, reduce_scatter, all_to_all, collective_permute, partition_id), replica groups across
workers, and global jit+NamedSharding programs partitioned by Loom (MLP training steps among them).

Bitwise where the program is integer (or float values that are integers: sums exact in any
order). Float programs with dots, exp/tanh and reductions: XLA's kernels and Loom's sum in
different orders and use different polynomial approximations, so results differ by rounding:
within 2e-5 relative to the largest magnitude of the result (f32 has 6e-8 per operation; the
reductions here are at most a few thousand terms deep). Each result is also checked against the
unpartitioned JAX result the corpus stores, at test_partition's tolerance."""
import os
import re
import subprocess

import numpy as np
import pytest

from conftest import sanitized_build
from dist import PROGRAMS
from loomtest import LOOM_BIN, run_loom

try:
    import xla_plugins
    PLUGIN = next((os.path.join(d, "xla_cpu_pjrt", "xla_cpu_pjrt.so") for d in xla_plugins.__path__
                   if os.path.exists(os.path.join(d, "xla_cpu_pjrt", "xla_cpu_pjrt.so"))), None)
except ImportError:
    PLUGIN = None

pytestmark = pytest.mark.skipif(PLUGIN is None, reason="xla-cpu-pjrt is not installed (pip install xla-cpu-pjrt): "
                                "no PJRT plugin to cut programs for")
PART = PROGRAMS / "partition"


@pytest.fixture(autouse=True)
def plugin_leaks_suppressed(monkeypatch):
    """Under the sanitizer build the workers' LeakSanitizer ignores leaks inside the plugin (XLA's
    own, while compiling some of these programs: lsan_pjrt.supp); Loom's are still reported."""
    if sanitized_build():
        supp = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lsan_pjrt.supp")
        monkeypatch.setenv("LSAN_OPTIONS", f"suppressions={supp}")
# global programs (jit + NamedSharding) that Loom partitions into per-device programs with collectives
PARTITIONED = ["megatron_mlp", "fsdp_mlp", "dp_mlp", "dp_grad", "tp_grad", "mlp_2d", "matmul_xy", "softmax_rows",
               "mean_all", "reshard_all_to_all", "attention_heads", "logsumexp_cols", "embedding_gather"]


def cases(tmp_path):
    rng = np.random.default_rng(3)
    a = rng.integers(-50, 50, (8, 16)).astype(np.float32)
    n = rng.integers(-1000, 1000, (3, 8)).astype(np.int32)
    out = [("colls_2x4", PROGRAMS / "colls_2x4.mlir", [a, n], None),
           ("replica_colls_8", PROGRAMS / "replica_colls_8.mlir", [np.arange(32, dtype=np.float32).reshape(8, 4) * 0.25],
            None)]
    for name in sorted(p.stem for p in PART.glob("*.mlir")):  # every case: the listed ones must be cut
        d = np.load(PART / f"{name}.npz")
        ins = [d[f"in{i}"] for i in range(sum(k.startswith("in") for k in d.files))]
        want = [d[f"out{j}"] for j in range(sum(k.startswith("out") for k in d.files))]
        out.append((name, PART / f"{name}.mlir", ins, want))
    return out


def run_all(tmp_path, tag, cs):
    res = {}
    (tmp_path / tag).mkdir()
    for name, prog, ins, _ in cs:
        cmd = [LOOM_BIN, "run", str(prog), "--output-dir", str(tmp_path / tag / name)]
        for i, x in enumerate(ins):
            f = tmp_path / f"{name}_in{i}.npy"
            np.save(f, x)
            cmd += ["--input", f"{i}={f}"]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL)
        assert r.returncode == 0, f"{tag} {name}: {r.stdout}{r.stderr}"
        d = tmp_path / tag / name
        res[name] = [np.load(d / f"result_{k}.npy") for k in range(len(os.listdir(d)))]
    return res


def cluster(backend):
    args = ["up", "--detach", "--proxy-port", "0", "--workers", "2", "--devices-per-worker", "4"]
    if backend == "pjrt":
        args += ["--backend", "pjrt", "--pjrt-plugin", PLUGIN]
    r = run_loom(*args, timeout=90)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("part", [0, 1])
def test_cut_programs_equal_the_interpreter(tmp_path, part):
    # the corpus in two halves (each test has its own time limit): the two collective programs
    # and every other partition case in the first, the rest in the second
    cs = cases(tmp_path)
    cs = cs[:2] + cs[2::2] if part == 0 else cs[3::2]
    cluster("interp")
    try:
        want = run_all(tmp_path, "interp", cs)
    finally:
        run_loom("down", check=True)
    cluster("pjrt")
    try:
        got = run_all(tmp_path, "pjrt", cs)
        got2 = run_all(tmp_path, "pjrt2", cs[:1]) if part == 0 else {}  # the same launch again: bitwise the same
    finally:
        run_loom("down", check=True)
    logs = "".join(p.read_text() for p in (tmp_path / "state").glob("worker-*.log"))
    failures = []
    for name, prog, _, ref in cs:
        g, w = got[name], want[name]
        if len(g) != len(w):
            failures.append(f"{name}: {len(g)} results, the interpreter gave {len(w)}")
            continue
        for j, (x, y) in enumerate(zip(g, w)):
            if x.dtype != y.dtype or x.shape != y.shape:
                failures.append(f"{name} result {j}: {x.dtype}{x.shape}, interpreter {y.dtype}{y.shape}")
            elif x.dtype.kind in "iub" or name in ("colls_2x4", "replica_colls_8"):
                if x.tobytes() != y.tobytes():
                    failures.append(f"{name} result {j}: not bitwise equal to the interpreter's")
            elif not np.allclose(x, y, rtol=0, atol=2e-5 * max(1.0, float(np.abs(y).max(initial=0)))):
                failures.append(f"{name} result {j}: max difference {np.abs(x - y).max()} from the interpreter's")
            if ref is not None and not np.allclose(x, ref[j], rtol=2e-4, atol=2e-4 * max(1.0, float(np.abs(ref[j]).max()))):
                failures.append(f"{name} result {j}: max error {np.abs(x - ref[j]).max()} against JAX")
        # each program was cut and its compute went to the plugin: this fails if cutting is off
        # (replica_colls_8 is collectives only, nothing of it to compile; the other cases may have
        # no collectives or keep them in loops)
        if name not in PARTITIONED and name != "colls_2x4":
            continue
        m = re.search(rf"\({re.escape(str(prog))}\) cut at (\d+) collectives?: (\d+) segments? compiled by the PJRT plugin",
                      logs)
        if not m or int(m.group(2)) < 1:
            failures.append(f"{name}: not cut at its collectives (worker logs: "
                            f"{[l for l in logs.splitlines() if name in l][:2]})")
    for x, y in zip(got2.get("colls_2x4", []), got.get("colls_2x4", [])):
        assert x.tobytes() == y.tobytes()
    assert not failures, "\n".join(failures)


# an all_reduce inside a while loop: not cut (the loop would have to be cut too); runs whole on
# Loom's executor, and the log says why
LOOP_PSUM = """module @loop_psum attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["d"=8]>
  func.func public @main(%x: tensor<8x4xf32>) -> tensor<8x4xf32> {
    %0 = sdy.manual_computation(%x) in_shardings=[<@mesh, [{"d"}, {}]>] out_shardings=[<@mesh, [{"d"}, {}]>] manual_axes={"d"} (%a: tensor<1x4xf32>) {
      %zero = stablehlo.constant dense<0> : tensor<i32>
      %one = stablehlo.constant dense<1> : tensor<i32>
      %n = stablehlo.constant dense<3> : tensor<i32>
      %r:2 = stablehlo.while(%i = %zero, %v = %a) : tensor<i32>, tensor<1x4xf32>
        cond {
          %c = stablehlo.compare LT, %i, %n : (tensor<i32>, tensor<i32>) -> tensor<i1>
          stablehlo.return %c : tensor<i1>
        } do {
          %s = "stablehlo.all_reduce"(%v) ({
          ^bb0(%p: tensor<f32>, %q: tensor<f32>):
            %t = stablehlo.add %p, %q : tensor<f32>
            stablehlo.return %t : tensor<f32>
          }) {replica_groups = dense<[[0, 1, 2, 3, 4, 5, 6, 7]]> : tensor<1x8xi64>, use_global_device_ids,
              channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>} : (tensor<1x4xf32>) -> tensor<1x4xf32>
          %h = stablehlo.add %s, %v : tensor<1x4xf32>
          %j = stablehlo.add %i, %one : tensor<i32>
          stablehlo.return %j, %h : tensor<i32>, tensor<1x4xf32>
        }
      sdy.return %r#1 : tensor<1x4xf32>
    } : (tensor<8x4xf32>) -> tensor<8x4xf32>
    return %0 : tensor<8x4xf32>
  }
}
"""

# a self-checking program: the segment before the all_reduce holds a check op, which the plugin's
# parser does not know: the plugin refuses that segment, Loom's executor runs it (the check
# included), the segment after the all_reduce still goes to the plugin
CHECK_PSUM = """module @check_psum attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["d"=8]>
  func.func public @main(%x: tensor<8x4xf32>) -> tensor<8x4xf32> {
    %0 = sdy.manual_computation(%x) in_shardings=[<@mesh, [{"d"}, {}]>] out_shardings=[<@mesh, [{"d"}, {}]>] manual_axes={"d"} (%a: tensor<1x4xf32>) {
      %y = stablehlo.multiply %a, %a : tensor<1x4xf32>
      %z = stablehlo.abs %y : tensor<1x4xf32>
      "check.expect_eq"(%y, %z) : (tensor<1x4xf32>, tensor<1x4xf32>) -> ()
      %s = "stablehlo.all_reduce"(%y) ({
      ^bb0(%p: tensor<f32>, %q: tensor<f32>):
        %t = stablehlo.add %p, %q : tensor<f32>
        stablehlo.return %t : tensor<f32>
      }) {replica_groups = dense<[[0, 1, 2, 3, 4, 5, 6, 7]]> : tensor<1x8xi64>, use_global_device_ids,
          channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>} : (tensor<1x4xf32>) -> tensor<1x4xf32>
      %u = stablehlo.subtract %s, %a : tensor<1x4xf32>
      sdy.return %u : tensor<1x4xf32>
    } : (tensor<8x4xf32>) -> tensor<8x4xf32>
    return %0 : tensor<8x4xf32>
  }
}
"""


def test_what_is_not_cut_or_not_compiled_runs_on_loom(tmp_path):
    (tmp_path / "loop_psum.mlir").write_text(LOOP_PSUM)
    (tmp_path / "check_psum.mlir").write_text(CHECK_PSUM)
    x = np.arange(32, dtype=np.float32).reshape(8, 4) - 7
    spd = np.random.default_rng(0).standard_normal((8, 4, 4)).astype(np.float32)
    cs = [("loop_psum", tmp_path / "loop_psum.mlir", [x], None), ("check_psum", tmp_path / "check_psum.mlir", [x], None),
          ("cholesky_psum", PROGRAMS / "cholesky_psum_8.mlir", [spd], None)]
    cluster("interp")
    try:
        want = run_all(tmp_path, "interp", cs)
    finally:
        run_loom("down", check=True)
    cluster("pjrt")
    try:
        got = run_all(tmp_path, "pjrt", cs)
    finally:
        run_loom("down", check=True)
    logs = "".join(p.read_text() for p in (tmp_path / "state").glob("worker-*.log"))
    # sums of integers: exact in any order
    assert got["loop_psum"][0].tobytes() == want["loop_psum"][0].tobytes()
    v = x.copy()
    for _ in range(3):
        v = v + v.sum(axis=0)
    np.testing.assert_array_equal(got["loop_psum"][0], v)
    assert got["check_psum"][0].tobytes() == want["check_psum"][0].tobytes()
    np.testing.assert_array_equal(got["check_psum"][0], (x * x).sum(axis=0) - x)
    np.testing.assert_allclose(got["cholesky_psum"][0], want["cholesky_psum"][0], rtol=0,
                               atol=2e-5 * np.abs(want["cholesky_psum"][0]).max())
    assert re.search(r"loop_psum\.mlir\) runs on Loom's executor, not the PJRT plugin: stablehlo\.all_reduce \(line \d+\) "
                     r"is inside stablehlo\.while", logs), logs[-3000:]
    assert re.search(r"check_psum\.mlir\): segment 0 runs on Loom's executor, not the PJRT plugin: PJRT plugin \S+: "
                     r"PJRT_Client_Compile", logs), logs[-3000:]
    assert re.search(r"check_psum\.mlir\) cut at 1 collective: 1 segment compiled by the PJRT plugin, 2 on Loom's executor",
                     logs), logs[-3000:]
    assert re.search(r"cholesky_psum_8\.mlir\): segment 0 runs on Loom's executor, not the PJRT plugin: it has custom "
                     r"calls", logs), logs[-3000:]
    assert re.search(r"cholesky_psum_8\.mlir\) cut at 1 collective: 1 segment compiled by the PJRT plugin", logs), logs[-3000:]
