"""Parser speed: a large JAX-lowered program (a transformer training step, many layers) read by
`loom interpret --parse-only` (parse + structural verification, one process per run, so process
start is included) beside jaxlib's MLIR parser (`ir.Module.parse`, in-process, parse + MLIR's
verifier) on the same text. Best of several runs; one thread on both sides.

    python3 bench/bench_parse.py [layers] [runs]
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
import jax
import jax.numpy as jnp
from jax._src.interpreters import mlir as jmlir
from jax._src.lib.mlir import ir

LOOM = os.environ.get("LOOM_BIN") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "bin", "loom")


def program(layers):
    d, t = 64, 32

    def block(x, w):
        q, k, v, o, f1, f2 = w
        a = jax.nn.softmax((x @ q) @ (x @ k).T / 8.0, axis=-1) @ (x @ v) @ o
        x = x + a
        x = (x - x.mean(-1, keepdims=True)) / jnp.sqrt(x.var(-1, keepdims=True) + 1e-5)
        return x + jax.nn.gelu(x @ f1) @ f2

    def loss(ws, x):
        for w in ws:
            x = block(x, w)
        return (x ** 2).mean()

    ws = [tuple(jnp.ones((d, d)) for _ in range(4)) + (jnp.ones((d, 4 * d)), jnp.ones((4 * d, d))) for _ in range(layers)]
    return jax.jit(jax.value_and_grad(loss)).lower(ws, jnp.ones((t, d))).as_text()


def best(f, runs):
    ts = []
    for _ in range(runs):
        t = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t)
    return min(ts)


def main():
    ap = argparse.ArgumentParser(description="Parser speed: a JAX-lowered transformer training step read by "
                                 "`loom interpret --parse-only` beside jaxlib's MLIR parser on the same text.")
    ap.add_argument("layers", nargs="?", type=int, default=48, help="transformer layers (default 48)")
    ap.add_argument("runs", nargs="?", type=int, default=5, help="runs, best reported (default 5)")
    a = ap.parse_args()
    layers, runs = a.layers, a.runs
    text = program(layers)
    nops = text.count(" = ") + text.count("return")
    with tempfile.NamedTemporaryFile("w", suffix=".mlir", delete=False) as f:
        f.write(text)
        path = f.name
    try:
        def loom():
            p = subprocess.run([LOOM, "interpret", "--parse-only", "-q", path], capture_output=True, text=True,
                               env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
            assert p.returncode == 0, p.stdout + p.stderr
        ctx = jmlir.make_ir_context()
        t_loom = best(loom, runs)
        t_mlir = best(lambda: ir.Module.parse(text, ctx), runs)
    finally:
        os.unlink(path)
    mb = len(text) / 1e6
    print(f"program: {layers}-layer transformer training step, {mb:.1f} MB of MLIR text, ~{nops} ops")
    print(f"loom interpret --parse-only   {t_loom * 1e3:8.1f} ms  ({mb / t_loom:6.1f} MB/s, process start included)")
    print(f"jaxlib ir.Module.parse        {t_mlir * 1e3:8.1f} ms  ({mb / t_mlir:6.1f} MB/s)")


if __name__ == "__main__":
    main()
