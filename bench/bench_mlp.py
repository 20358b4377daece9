#!/usr/bin/env python3
"""A JAX MLP training step (batch 128, 784-512-512-10, f32; forward, backward, SGD) timed with
jax.jit on CPU (XLA) beside Loom running the same step lowered to StableHLO
(build/bench/bench_mlp). Both sides single-threaded: XLA with its intra-op parallelism and Eigen
threading off, Loom with OPENBLAS_NUM_THREADS=1, and each process pinned to one CPU.
The two sides run alternately for several rounds (the machine is shared and noisy); the
figures are the best step over all rounds and the median of the rounds' medians.

    python3 bench/bench_mlp.py [--steps N] [--rounds R] [--build build]
"""
import argparse
import os
import subprocess
import sys
import tempfile

XLA_CHILD = r"""
import os, sys, time
import jax, jax.numpy as jnp
sys.path.insert(0, os.environ["LOOM_BENCH_DIR"])
from bench_mlp import make_step
step, args = make_step()
f = jax.jit(step)
out = f(*args); jax.block_until_ready(out)
ts = []
for _ in range(int(os.environ["LOOM_BENCH_STEPS"]) + 3):
    t0 = time.perf_counter(); out = f(*args); jax.block_until_ready(out); ts.append(time.perf_counter() - t0)
ts = sorted(ts[3:])
print("xla_step_best_ms %.3f" % (ts[0] * 1e3))
print("xla_step_median_ms %.3f" % (ts[len(ts) // 2] * 1e3))
"""


def make_step():
    import jax
    import jax.numpy as jnp

    def init(key):
        ks = jax.random.split(key, 3)
        sizes = [(784, 512), (512, 512), (512, 10)]
        return [(jax.random.normal(k, s, jnp.float32) * (1.0 / s[0]) ** 0.5, jnp.zeros((s[1],), jnp.float32))
                for k, s in zip(ks, sizes)]

    def loss(params, x, y):
        h = x
        for i, (w, b) in enumerate(params):
            h = h @ w + b
            if i < len(params) - 1:
                h = jax.nn.relu(h)
        logp = jax.nn.log_softmax(h)
        return -jnp.mean(jnp.sum(logp * y, axis=-1))

    def step(params, x, y):
        l, g = jax.value_and_grad(loss)(params, x, y)
        return [(w - 0.01 * gw, b - 0.01 * gb) for (w, b), (gw, gb) in zip(params, g)], l

    params = init(jax.random.PRNGKey(0))
    x = jax.random.normal(jax.random.PRNGKey(1), (128, 784), jnp.float32)
    y = jax.nn.one_hot(jnp.arange(128) % 10, 10, dtype=jnp.float32)
    return step, (params, x, y)


def one_cpu():
    cpus = sorted(os.sched_getaffinity(0))
    return str(cpus[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--build", default=os.environ.get("LOOM_BUILD_DIR", "build"))
    a = ap.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    cpu = one_cpu()

    # lower the step to StableHLO text
    import jax
    step, args = make_step()
    text = jax.jit(step).lower(*args).as_text()
    with tempfile.NamedTemporaryFile("w", suffix=".mlir", delete=False) as f:
        f.write(text)
        path = f.name

    env = dict(os.environ, LOOM_BENCH_DIR=here, LOOM_BENCH_STEPS=str(a.steps), JAX_PLATFORMS="cpu",
               XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1",
               OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    rounds = []
    for _ in range(a.rounds):
        xla = subprocess.run(["taskset", "-c", cpu, sys.executable, "-c", XLA_CHILD], env=env, capture_output=True,
                             text=True, check=True).stdout
        loom = subprocess.run(["taskset", "-c", cpu, os.path.join(a.build, "bench", "bench_mlp"), path, str(a.steps)],
                              env=env, capture_output=True, text=True, check=True).stdout
        r = {}
        for line in (xla + loom).splitlines():
            k, v = line.split()
            r[k] = v if k.endswith("_core") else float(v)
        rounds.append(r)
    os.unlink(path)
    vals = {}
    for k in rounds[0]:
        if k.endswith("_core"):
            vals[k] = rounds[0][k]
            continue
        xs = sorted(r[k] for r in rounds)
        vals[k] = xs[0] if "best" in k or "peak" in k else xs[len(xs) // 2]
    print(f"MLP training step (batch 128, 784-512-512-10, f32), one thread on CPU {cpu}, "
          f"{a.rounds} alternating rounds of {a.steps} steps")
    print(f"  xla (jax.jit)  best {vals['xla_step_best_ms']:8.2f} ms   median {vals['xla_step_median_ms']:8.2f} ms")
    print(f"  loom           best {vals['loom_step_best_ms']:8.2f} ms   median {vals['loom_step_median_ms']:8.2f} ms"
          f"   (peak device memory {vals['loom_peak_bytes'] / 2**20:.1f} MiB, OpenBLAS core {vals['loom_blas_core']}"
          f"{', forced by OPENBLAS_CORETYPE' if os.environ.get('OPENBLAS_CORETYPE') else ''})")
    print(f"  loom / xla (best): {vals['loom_step_best_ms'] / vals['xla_step_best_ms']:.2f}x")


if __name__ == "__main__":
    sys.exit(main())
