"""Whole programs on one device, three ways in one run: Loom's own executor
(`loom interpret --repeat`), XLA through a PJRT plugin driven by Loom (`loom interpret --backend
pjrt`, PyPI's xla-cpu-pjrt), and plain JAX (jax.jit on the CPU). Best time per step of several
runs, inputs already in memory; Loom's figures exclude process start and compile, as JAX's
exclude its compile. Thread counts: each side uses what it uses by default on this machine
(Loom's executor: --threads N; XLA: its own pool), printed with the results. Peak device memory
is what Loom's device budget saw: for the PJRT column only the results copied back (the plugin
holds its own temporaries).

    python3 bench/bench_pjrt.py [--runs 5] [--threads N]

The programs are the ones the PJRT issue names: a 64 MiB elementwise chain, an MLP training step,
a transformer block forward+backward and a nearest-neighbour distance over 8,192 points."""
import argparse
import os
import subprocess
import tempfile
import time

import numpy as np

os.environ.setdefault("JAX_PLATFORMS", "cpu")
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

LOOM = os.environ.get("LOOM_BIN") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "bin", "loom")


def rnd(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def mlp_step(w1, w2, x, y):
    def loss(w1, w2):
        return jnp.mean((jax.nn.gelu(x @ w1) @ w2 - y) ** 2)
    l, (g1, g2) = jax.value_and_grad(loss, argnums=(0, 1))(w1, w2)
    return l, w1 - 0.01 * g1, w2 - 0.01 * g2


def block_step(q, k, v, o, f1, f2, x):
    def loss(q, k, v, o, f1, f2):
        a = jax.nn.softmax((x @ q) @ (x @ k).T / 8.0, axis=-1) @ (x @ v) @ o
        h = x + a
        h = (h - h.mean(-1, keepdims=True)) / jnp.sqrt(h.var(-1, keepdims=True) + 1e-5)
        return jnp.mean((h + jax.nn.gelu(h @ f1) @ f2) ** 2)
    return jax.value_and_grad(loss, argnums=(0, 1, 2, 3, 4, 5))(q, k, v, o, f1, f2)


def distance(p):
    d2 = (p * p).sum(1)[:, None] + (p * p).sum(1)[None, :] - 2 * p @ p.T
    return jnp.argmin(d2 + jnp.eye(p.shape[0]) * 1e9, axis=1)


def programs():
    d = 256
    return {
        "elementwise 64 MiB": (lambda a, b: jnp.tanh(a) * b + jnp.exp(-a * a), (rnd(4096, 4096), rnd(4096, 4096, seed=1))),
        "MLP step (512x1024x256)": (mlp_step, (rnd(1024, 2048) * 0.03, rnd(2048, 256, seed=1) * 0.03, rnd(512, 1024, seed=2),
                                               rnd(512, 256, seed=3))),
        "transformer block fwd+bwd": (block_step, tuple(rnd(d, d, seed=i) * 0.05 for i in range(4)) +
                                      (rnd(d, 4 * d, seed=5) * 0.05, rnd(4 * d, d, seed=6) * 0.05, rnd(128, d, seed=7))),
        "distance 8192 points": (distance, (rnd(8192, 16),)),
    }


def loom_time(path, inputs, runs, extra):
    cmd = [LOOM, "interpret", path, "--repeat", str(runs), "-q", *extra]
    for i in inputs:
        cmd += ["--input", i]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    line = [l for l in p.stderr.splitlines() if "best of" in l]
    if p.returncode != 0 or not line:
        return None, (p.stdout + p.stderr).strip().splitlines()[-1][:120] if (p.stdout + p.stderr).strip() else "failed"
    ms = float(line[0].split("runs ")[1].split(" ms")[0])
    mem = line[0].split("peak device memory ")[1].rstrip(")")
    return ms, mem


def main():
    ap = argparse.ArgumentParser(description="Whole programs on one device: Loom's executor, XLA through a PJRT plugin "
                                 "driven by Loom, and plain JAX, in one run.")
    ap.add_argument("--runs", type=int, default=5, help="runs per program, best reported (default 5)")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="threads for Loom's executor (default: all cores)")
    a = ap.parse_args()
    print(f"machine: {os.cpu_count()} cores; Loom's executor --threads {a.threads}; XLA (plugin and JAX) its own pool")
    print(f"{'program':30s} {'Loom executor':>16s} {'Loom + PJRT (XLA)':>18s} {'JAX (XLA)':>11s}   peak device memory (executor / pjrt)")
    for name, (f, args) in programs().items():
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "p.mlir")
            with open(path, "w") as fh:
                fh.write(jax.jit(f).lower(*args).as_text())
            inputs = []
            for i, x in enumerate(args):
                inputs.append(os.path.join(d, f"in{i}.npy"))
                np.save(inputs[-1], x)
            ours, mem1 = loom_time(path, inputs, a.runs, ["--threads", str(a.threads), "--device-memory", "8G"])
            pj, mem2 = loom_time(path, inputs, a.runs, ["--backend", "pjrt", "--device-memory", "8G"])
        jf = jax.jit(f)
        dev = [jnp.asarray(x) for x in args]
        jax.block_until_ready(jf(*dev))
        best = 1e9
        for _ in range(a.runs):
            t = time.perf_counter()
            jax.block_until_ready(jf(*dev))
            best = min(best, time.perf_counter() - t)
        fmt = lambda v: f"{v:10.1f} ms" if v is not None else "n/a"  # noqa: E731
        print(f"{name:30s} {fmt(ours):>16s} {fmt(pj):>18s} {best * 1e3:8.1f} ms   "
              f"{mem1 if ours is not None else '-'} / {mem2 if pj is not None else '-'}")
        for who, v, why in (("Loom executor", ours, mem1), ("Loom + PJRT", pj, mem2)):
            if v is None:
                print(f"    {who}: {why}")


if __name__ == "__main__":
    main()
