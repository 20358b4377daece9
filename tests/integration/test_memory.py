"""Per-device peak memory of a partitioned FSDP training step (programs/memory/gen.py: 8 layers
of 512x512 f32 weights, split over 8 devices along their first dimension), read from the
devices' high-water marks (`loom devices --json` memory_peak: everything charged to a device at
once since its worker started, launch temporaries included).

Replicated, the step holds every parameter (8 MiB) as input and again as output. Partitioned,
each device must hold its eighth of the parameters in and out, plus what FSDP gathers for the
layer at hand (its full weight, and that weight's full gradient before the reduce-scatter) and
the activations; never the whole model. This is a property of the partitioner and of the
executor's freeing of temporaries, not a timing. Also: an argmax and a top_k over an 8 MiB operand
split by columns hold a few 1 MiB blocks per device, never the operand."""
import time
from pathlib import Path

import numpy as np

from conftest import devices
from dist import loom_run

PROGRAM = Path(__file__).parent / "programs" / "memory" / "fsdp_step_8.mlir"
LAYERS, D, BATCH, NDEV = 8, 512, 64, 8
MiB = 1 << 20


def peaks(addr):
    return [d["memory_peak"] for d in devices(addr)["devices"]]


def test_fsdp_step_peak_memory_is_a_shard_of_the_model(cluster, tmp_path):
    rng = np.random.default_rng(3)
    ins = []
    for _ in range(LAYERS):
        ins += [(rng.standard_normal((D, D)) / np.sqrt(D)).astype(np.float32), np.zeros(D, np.float32)]
    x = rng.standard_normal((BATCH, D)).astype(np.float32)
    y = np.tanh(rng.standard_normal((BATCH, D))).astype(np.float32)
    ins += [x, y]
    before = peaks(cluster.addr)
    r, res = loom_run(cluster.addr, PROGRAM, inputs=ins, tmp=tmp_path, timeout=180)
    assert r.returncode == 0, r.stderr
    assert len(res) == 2 * LAYERS + 1 and np.isfinite(res[-1]).all()
    time.sleep(0.8)  # the workers' next heartbeats carry the peaks
    after = peaks(cluster.addr)
    assert len(after) == NDEV and all(p > 0 for p in after), after

    weight = D * D * 4
    params = LAYERS * (weight + D * 4)
    acts = (LAYERS + 2) * BATCH * D * 4  # every layer's activation kept for the backward pass, x and y
    bound = 2 * params / NDEV + 2 * weight + acts
    print(f"per-device peak {max(after) / MiB:.2f} MiB (before the step {max(before) / MiB:.2f}); "
          f"parameters {params / MiB:.2f} MiB; bound {bound / MiB:.2f} MiB; "
          f"a replicated step holds at least {2 * params / MiB:.2f} MiB")
    assert max(after) <= bound, (after, bound)
    assert max(after) < params, "a device held the whole model at once"


ROWS, COLS = 256, 8192
OPERAND = ROWS * COLS * 4  # 8 MiB of f32, split by columns: a 1 MiB block per device


def test_argmax_and_top_k_over_split_columns_hold_a_block_per_device(cluster, tmp_path):
    # jnp.argmax (a variadic reduce of the values and an iota) over the split dim, then lax.top_k
    # along it (the split moved to the rows by an all_to_all): each device holds its block of the
    # operand, its block of the iota (i32) and, for top_k, its block of rows; replicated, a device
    # would hold the 8 MiB operand and an 8 MiB iota
    rng = np.random.default_rng(5)
    a = np.round(rng.standard_normal((ROWS, COLS)) * 4).astype(np.float32)  # ties across shards
    prog = PROGRAM.parent / "argmax_cols_8.mlir"
    r, res = loom_run(cluster.addr, prog, inputs=[a], tmp=tmp_path, timeout=180)
    assert r.returncode == 0, r.stderr
    assert np.array_equal(res[0], np.argmax(a, axis=1).astype(np.int32)) and np.array_equal(res[1], a.max(axis=1))
    time.sleep(0.8)
    argmax_peak = max(peaks(cluster.addr))
    r, res = loom_run(cluster.addr, PROGRAM.parent / "top_k_cols_8.mlir", inputs=[a], tmp=tmp_path, timeout=180)
    assert r.returncode == 0, r.stderr
    order = np.argsort(-a, axis=1, kind="stable")[:, :4]
    assert np.array_equal(res[1], order.astype(np.int32))
    assert np.array_equal(res[0], np.take_along_axis(a, order, axis=1))
    time.sleep(0.8)
    top_k_peak = max(peaks(cluster.addr))
    block = OPERAND // NDEV
    print(f"per-device peak after argmax {argmax_peak / MiB:.2f} MiB, after top_k {top_k_peak / MiB:.2f} MiB; "
          f"block {block / MiB:.2f} MiB, operand {OPERAND / MiB:.2f} MiB")
    # argmax: the operand's block, the iota's block and the reduce kernel's transposed copies of
    # both (its layout for many outputs); top_k: the block in, the all_to_all's block of rows and
    # the kernel's temporaries. Never the whole operand (replicated: 8 MiB, 16 with the iota)
    assert argmax_peak <= 4 * block + MiB // 4, argmax_peak
    assert top_k_peak <= 4 * block + MiB // 4, top_k_peak
    assert max(argmax_peak, top_k_peak) < OPERAND, "a device held the whole operand"
