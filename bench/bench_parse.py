"""Parser speed: a large JAX-lowered program (a transformer training step, many layers) read by
`loom interpret --parse-only` (parse + structural verification, one process per run, so process
start is included) beside jaxlib's MLIR parser (`ir.Module.parse`, in-process, parse + MLIR's
verifier) on the same text; and the same program as the MLIR bytecode portable artifact JAX sends
(VHLO at StableHLO 1.13.7, as the IFRT proxy client writes it) read by Loom's bytecode reader
beside jaxlib's `stablehlo.deserialize_portable_artifact` (bytecode -> VHLO -> StableHLO). Best of
several runs; one thread on both sides. Peak memory: the maxrss of a Loom process, and what a
jaxlib process grows by while it reads (its import is not counted).


    python3 bench/bench_parse.py [layers] [runs]
"""
import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
import jax
import jax.numpy as jnp
from jax._src.interpreters import mlir as jmlir
from jax._src.lib.mlir import ir
from jax._src.lib import _jax
from jaxlib.mlir.dialects import stablehlo

LOOM = os.environ.get("LOOM_BIN") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "bin", "loom")
BENCH_READ = os.path.join(os.path.dirname(LOOM), "..", "bench", "bench_read")


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


# Loom runs are timed from a small launcher process: a child forked from this process (JAX loaded)
# would carry its size into the child's peak RSS and its fork time into the timing.
LAUNCHER = """
import os, subprocess, sys, time
best_t, rss = 1e9, 0
for _ in range(int(sys.argv[1])):
    t = time.perf_counter()
    p = subprocess.Popen(sys.argv[2:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    err = p.stderr.read()
    _, status, ru = os.wait4(p.pid, 0)
    dt = time.perf_counter() - t
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(err.decode(errors="replace"))
    best_t, rss = min(best_t, dt), max(rss, ru.ru_maxrss)
print(best_t, rss / 1024)
"""


def loom_runs(path, runs):
    """Best seconds and peak RSS (MB) of `loom interpret --parse-only` processes."""
    p = subprocess.run([sys.executable, "-S", "-c", LAUNCHER, str(runs), LOOM, "interpret", "--parse-only", "-q", path],
                       capture_output=True, text=True, env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    assert p.returncode == 0, p.stdout + p.stderr
    t, rss = p.stdout.split()
    return float(t), float(rss)


# jaxlib's peak while it reads: the high-water mark is reset after the import (clear_refs 5).
JAX_MEM = """
import os, sys
os.environ.setdefault("JAX_PLATFORMS", "cpu")
from jax._src.interpreters import mlir as jmlir
from jax._src.lib.mlir import ir
from jaxlib.mlir.dialects import stablehlo
data = open(sys.argv[2], "rb").read()
ctx = jmlir.make_ir_context()
def kb(field):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1])
base = kb("VmRSS:")
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
m = ir.Module.parse(data.decode(), ctx) if sys.argv[1] == "text" else stablehlo.deserialize_portable_artifact(ctx, data)
print((kb("VmHWM:") - base) / 1024)
"""


def loom_inproc(path, runs):
    """Best in-process read seconds (lm_parse_module on bytes in memory) and the IR's arena bytes."""
    p = subprocess.run([BENCH_READ, path, str(max(runs, 10))], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    t, held = p.stdout.split()
    return float(t), int(held) / 1e6


def jax_mem(kind, path):
    p = subprocess.run([sys.executable, "-c", JAX_MEM, kind, path], capture_output=True, text=True)
    return float(p.stdout.split()[-1]) if p.returncode == 0 else float("nan")


def main():
    ap = argparse.ArgumentParser(description="Parser speed: a JAX-lowered transformer training step read by "
                                 "`loom interpret --parse-only` (text and bytecode) beside jaxlib's MLIR parser and "
                                 "portable-artifact deserializer on the same program.")
    ap.add_argument("layers", nargs="?", type=int, default=48, help="transformer layers (default 48)")
    ap.add_argument("runs", nargs="?", type=int, default=5, help="runs, best reported (default 5)")
    a = ap.parse_args()
    layers, runs = a.layers, a.runs
    text = program(layers)
    blob = _jax.mlir.serialize_portable_artifact(text, "1.13.7", True)  # as jaxlib's proxy client does
    nops = text.count(" = ") + text.count("return")
    tmp = tempfile.mkdtemp()
    tpath, bpath = os.path.join(tmp, "step.mlir"), os.path.join(tmp, "step.mlirbc")
    with open(tpath, "w") as f:
        f.write(text)
    with open(bpath, "wb") as f:
        f.write(blob)
    try:
        ctx = jmlir.make_ir_context()
        lt, lb = loom_runs(tpath, runs), loom_runs(bpath, runs)
        it, ib = loom_inproc(tpath, runs), loom_inproc(bpath, runs)
        t_mlir = best(lambda: ir.Module.parse(text, ctx), runs)
        t_bc = best(lambda: stablehlo.deserialize_portable_artifact(ctx, blob), runs)
        m_text, m_bc = jax_mem("text", tpath), jax_mem("bytecode", bpath)
    finally:
        for f in (tpath, bpath):
            os.unlink(f)
        os.rmdir(tmp)
    mb, bmb = len(text) / 1e6, len(blob) / 1e6
    print(f"program: {layers}-layer transformer training step, ~{nops} ops: {mb:.1f} MB of MLIR text, "
          f"{bmb:.2f} MB of bytecode (VHLO, StableHLO 1.13.7)")
    print(f"{'':44s} {'read':>10s} {'peak memory':>14s}")
    print(f"{'Loom bytecode reader (lm_parse_module)':44s} {ib[0] * 1e3:7.1f} ms {ib[1]:10.1f} MB   (in process; memory: the IR's arena)")
    print(f"{'jaxlib deserialize_portable_artifact':44s} {t_bc * 1e3:7.1f} ms {m_bc:10.1f} MB   (in process; growth while reading)")
    print(f"{'Loom text parser (lm_parse_module)':44s} {it[0] * 1e3:7.1f} ms {it[1]:10.1f} MB   (in process; memory: the IR's arena)")
    print(f"{'jaxlib ir.Module.parse (text)':44s} {t_mlir * 1e3:7.1f} ms {m_text:10.1f} MB   (in process; growth while reading)")
    print(f"{'loom interpret --parse-only (bytecode)':44s} {lb[0] * 1e3:7.1f} ms {lb[1]:10.1f} MB   (whole process: start, read, verify; peak RSS)")
    print(f"{'loom interpret --parse-only (text)':44s} {lt[0] * 1e3:7.1f} ms {lt[1]:10.1f} MB   (whole process: start, read, verify; peak RSS)")
    print(f"bytecode: Loom's reader {t_bc / ib[0]:.1f}x jaxlib's deserializer, {it[0] / ib[0]:.1f}x Loom's text parser")


if __name__ == "__main__":
    main()
