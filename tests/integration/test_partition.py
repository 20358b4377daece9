"""The SPMD partitioner end to end: global programs lowered by JAX with NamedSharding (no shard_map;
tests/integration/programs/partition/gen.py) run partitioned on a real cluster (2 workers x 4
devices: started by hand, and with `loom up --detach`), each result compared with the same function run unpartitioned on one device; and
`loom compile --explain` shows the collectives and fallbacks the partitioner chose."""
import subprocess

import numpy as np
import pytest

from conftest import LOOM_BIN
from dist import PROGRAMS, loom_run
from loomtest import run_loom

PART = PROGRAMS / "partition"
CASES = sorted(p.stem for p in PART.glob("*.mlir"))


def test_there_are_enough_cases():
    assert len(CASES) >= 40, CASES


def check_all(run, tmp_path):
    """Runs every case with run(program, inputs) -> (CompletedProcess, results) and compares."""
    failures, compared = [], 0
    for name in CASES:
        d = np.load(PART / f"{name}.npz")
        ins = [d[f"in{i}"] for i in range(sum(k.startswith("in") for k in d.files))]
        outs = [d[f"out{j}"] for j in range(sum(k.startswith("out") for k in d.files))]
        r, res = run(PART / f"{name}.mlir", ins)
        if r.returncode != 0:
            failures.append(f"{name}: loom run failed: {r.stderr.strip()}")
            continue
        if len(res) != len(outs):
            failures.append(f"{name}: {len(res)} results, expected {len(outs)}")
            continue
        for j, (got, want) in enumerate(zip(res, outs)):
            if got.shape != want.shape or got.dtype != want.dtype:
                failures.append(f"{name} result {j}: {got.dtype}{got.shape}, expected {want.dtype}{want.shape}")
            elif want.dtype.kind in "biu" and not np.array_equal(got, want):  # indices: exactly
                failures.append(f"{name} result {j}: {int((got != want).sum())} elements differ")
            elif not np.allclose(got, want, rtol=2e-4, atol=2e-4 * max(1.0, float(np.abs(want).max(initial=0)))):
                failures.append(f"{name} result {j}: max error {np.abs(got - want).max()}")
            else:
                compared += 1
    assert not failures, "\n".join(failures)
    print(f"{compared} results of {len(CASES)} programs equal the unpartitioned ones")
    assert compared >= len(CASES)


def test_partitioned_programs_match_unpartitioned(cluster, tmp_path):
    check_all(lambda prog, ins: loom_run(cluster.addr, prog, inputs=ins, tmp=tmp_path, timeout=120), tmp_path)


def test_partitioned_programs_on_a_loom_up_cluster(tmp_path):
    # the same through `loom up --detach` (2 workers x 4 devices) and `loom run` finding it
    run_loom("up", "--detach", "--workers", "2", "--devices-per-worker", "4", timeout=90, check=True)

    def run(prog, ins):
        cmd = [LOOM_BIN, "run", str(prog), "--output-dir", str(tmp_path / "out")]
        for i, a in enumerate(ins):
            np.save(tmp_path / f"in{i}.npy", a)
            cmd += ["--input", f"{i}={tmp_path / f'in{i}.npy'}"]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        res = []
        while r.returncode == 0 and (tmp_path / "out" / f"result_{len(res)}.npy").exists():
            res.append(np.load(tmp_path / "out" / f"result_{len(res)}.npy"))
        for f in (tmp_path / "out").glob("*.npy"):
            f.unlink()
        return r, res

    try:
        check_all(run, tmp_path)
    finally:
        d = run_loom("down", timeout=60)
        assert d.returncode == 0, d.stdout + d.stderr


def explain(name):
    r = run_loom("compile", "--explain", str(PART / f"{name}.mlir"), check=True)
    return r.stdout


@pytest.mark.parametrize("name,must,must_not", [
    ("dp_mlp", ["0 collectives", "0 fallbacks"], ["all_gather", "all_reduce"]),
    ("megatron_mlp", ["1 collectives", "all_reduce partial results over {\"d\"}"], ["all_gather", "fallback:"]),
    ("mlp_2d", ["all_reduce partial results over {\"model\"}"], ["all_gather", "fallback:"]),
    ("matmul_xy", ["all_reduce partial results over {\"y\"}"], ["all_gather"]),
    ("dp_grad", ["all_reduce partial results over {\"d\"}"], ["all_gather", "fallback:"]),
    ("fsdp_mlp", ["contracting dims gathered", "all_gather operand 1 dim 0 over {\"d\"}", "made again"],
     ["fallback:"]),
    ("sort_cols", ["0 collectives", "0 fallbacks"], []),
    ("cumsum_rows", ["0 collectives", "0 fallbacks"], []),
    ("dynamic_update_cols", ["0 collectives", "0 fallbacks"], []),
    ("remat_grad", ["all_reduce partial results over {\"d\"}", "stablehlo.optimization_barrier"], ["fallback:"]),
    ("cond_branches", ["branch 0:", "branch 1:"], ["fallback:"]),
    ("scan_layers", ["body of the while loop", "all_gather operand 0 dim 1 over {\"model\"}"], ["fallback:"]),
    ("attention_heads", ["0 collectives", "0 fallbacks"], []),
    ("reshard_all_to_all", ["all_to_all", "1 collectives"], ["all_gather"]),
    ("cumsum_fallback", ["all_gather operand 0 dim 0 over {\"d\"}"], ["fallback:"]),
    # uneven splits (10 rows over 4 devices, 10 over 8, 6 columns over 4): padded shards, the
    # padding masked where a reduction or a contraction meets it; nothing replicated
    ("uneven_rows", ["-> local tensor<3x12xf32>", "padding of dim 0 cut off after the gather", "0 fallbacks"],
     ["uneven:"]),
    ("uneven_sum_rows", ["-> local tensor<3x6xf32>", "operand 0: padding of its uneven reduced dims masked with the init value",
                         "total: 1 collectives moving 288 bytes", "0 fallbacks"], ["all_gather", "uneven:"]),
    ("uneven_mean", ["-> local tensor<2x6xf32>", "masked with the init value",
                     "all_reduce partial results over {\"x\", \"y\"}", "0 fallbacks"], ["all_gather"]),
    ("uneven_dot_rows", ["operand 0: padding of its uneven contracting dims masked with zeros",
                         "operand 1: padding of its uneven contracting dims masked with zeros",
                         "all_reduce partial results over {\"y\"}", "0 fallbacks"], ["all_gather"]),
    ("uneven_softmax", ["masked with the init value", "0 fallbacks"], ["fallback:"]),
    ("uneven_argmax", ["operand 1: padding of its uneven reduced dims masked with the init value",
                       "partial results combined over {\"y\"}: gathered, then reduced again", "0 fallbacks"],
     ["all_gather operand"]),
    # 12 rows in 2 blocks of 6 (over "x") constrained to 8 shards of 2 (over "x", "y"): each shard
    # lies inside one block, so one collective_permute brings the shard a process lacks
    ("uneven_sum", ["collective_permute operand dim 0 into uneven shards over {\"y\"}: 6 bytes received per device",
                    "total: 2 collectives moving 384 bytes", "0 fallbacks"], ["all_gather"]),
    ("uneven_norm_cols", ["-> local tensor<5x2xf32>", "masked with the init value", "0 fallbacks"], ["fallback:"]),
    ("conv_batch", ["0 collectives", "0 fallbacks"], []),
    ("maxpool_grad", ["0 collectives", "0 fallbacks"], []),
    ("scatter_add_rows", ["0 collectives", "0 fallbacks"], []),
    ("embedding_gather", ["0 fallbacks"], ["fallback:"]),
    ("rng_inside", ["0 collectives", "0 fallbacks"], []),
    ("top_k_rows", ["0 collectives", "0 fallbacks"], []),
    # argmax / argmin over split dims: the operand stays split (local blocks), each device reduces
    # its part, the partial (value, index) pairs are gathered and reduced again
    ("argmax_split_cols", ["argument 0 tensor<16x32xf32> [{}, {\"d\"}] -> local tensor<16x4xf32>",
                           "iota offset by this shard's position along dim 1",
                           "partial results combined over {\"d\"}: gathered, then reduced again",
                           "total: 2 collectives moving 7168 bytes", "0 fallbacks"], ["all_gather operand"]),
    ("argmin_2d", ["-> local tensor<8x8xf32>", "partial results combined over {\"x\"}",
                   "all_reduce partial results over {\"x\"}", "0 fallbacks"], ["all_gather operand"]),
    ("argmax_rows_kept", ["0 collectives", "0 fallbacks"], []),
    ("argsort_cols", ["0 collectives", "0 fallbacks"], []),
    ("top_k_both", ["0 collectives", "0 fallbacks"], []),
    # along the split dim: the split moves to the rows by one all_to_all (the operand is never
    # gathered whole), each device sorts its rows whole
    ("sort_split_dim", ["sorted along split dim 1: its split moved to dim 0 by all_to_all",
                        "all_to_all operand 0 dim 1 -> dim 0 over {\"d\"}: 224 bytes", "total: 1 collectives",
                        "0 fallbacks"], ["all_gather"]),
    ("top_k_split_dim", ["sorted along split dim 1: its split moved to dim 0 by all_to_all",
                         "result 1 tensor<16x3xi32> [{\"d\"}, {}] -> local tensor<2x3xi32>", "total: 1 collectives",
                         "0 fallbacks"], ["all_gather"]),
    ("top_k_vector", ["each shard's top 5 (indices made global) gathered over {\"x\", \"y\"}",
                      "total: 2 collectives moving 2240 bytes", "0 fallbacks"], ["all_gather operand"]),
    ("iota_offsets", ["iota offset", "0 collectives"], []),
    ("sum_sharded_dim", ["all_reduce partial results over {\"x\"}"], ["all_gather"]),
])
def test_explain_names_collectives_and_fallbacks(name, must, must_not):
    out = explain(name)
    for s in must:
        assert s in out, f"{s!r} not in:\n{out}"
    for s in must_not:
        assert s not in out, f"{s!r} in:\n{out}"


def test_compile_prints_a_program_loom_reads_back(tmp_path):
    p = tmp_path / "local.mlir"
    run_loom("compile", "--print", str(PART / "megatron_mlp.mlir"), "-o", str(p), check=True)
    text = p.read_text()
    assert "stablehlo.all_reduce" in text and "tensor<16x8xf32>" in text, text
    r = run_loom("dump", str(p), check=True)
    assert "func.func public @main" in r.stdout


def test_compile_summary_and_errors(tmp_path):
    r = run_loom("compile", str(PART / "matmul_out_chosen.mlir"), check=True)
    assert "form partitions (partitioned by Loom), 8 processes" in r.stdout, r.stdout
    # the result sharding Loom chose (no annotation): rows over x, columns over y
    assert "result 0: tensor<16x24xf32> -> local tensor<8x6xf32>, sharding [{axis0}, {axis1}]" in r.stdout, r.stdout
    r = run_loom("compile", "--explain", str(PROGRAMS / "add_one_8.mlir"), check=True)  # shard_map: as before
    assert "form partitions, 8 processes" in r.stdout and "nothing to explain" in r.stdout, r.stdout
    bad = tmp_path / "gspmd.mlir"
    bad.write_text('module attributes {mhlo.num_partitions = 8 : i32} {\n'
                   '  func.func @main(%a: tensor<8xf32> {mhlo.sharding = "{devices=[8]<=[8]}"}) -> tensor<8xf32> {\n'
                   '    return %a : tensor<8xf32>\n  }\n}\n')
    r = run_loom("compile", "--explain", str(bad))
    assert r.returncode == 1 and "GSPMD sharding" in r.stderr, r.stderr
