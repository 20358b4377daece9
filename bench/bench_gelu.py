#!/usr/bin/env python3
"""The tanh gelu on 16M f32: numpy evaluating the expression beside Loom's fused executor
(build/bench/bench_gelu), both single-threaded. The two sides alternate for a few rounds (the
machine is shared and noisy) and each reports its best run.

    python3 bench/bench_gelu.py [--n N] [--runs R] [--rounds K] [--build build]
"""
import argparse
import os
import subprocess
import sys
import time

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=16 * 1024 * 1024)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--build", default=os.environ.get("LOOM_BUILD_DIR", "build"))
    a = ap.parse_args()

    rng = np.random.default_rng(0)
    x = rng.uniform(-4, 4, a.n).astype(np.float32)
    c0, c1 = np.float32(0.044715), np.float32(0.7978845608)

    def gelu(x):
        return np.float32(0.5) * x * (np.float32(1) + np.tanh(c1 * (x + c0 * x * x * x)))

    gelu(x)  # warm-up
    exe = os.path.join(a.build, "bench", "bench_gelu")
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    best = 1e30
    loom = {}
    for _ in range(a.rounds):
        for _ in range(a.runs):
            t0 = time.perf_counter()
            gelu(x)
            best = min(best, time.perf_counter() - t0)
        out = subprocess.run([exe, str(a.n), str(a.runs)], capture_output=True, text=True, env=env, check=True).stdout
        for line in out.splitlines():
            if line.strip():
                k, v = line.split()
                loom[k] = min(loom.get(k, 1e30), float(v))

    print(f"gelu (tanh form) on {a.n} f32, single thread, best of {a.rounds} x {a.runs} runs")
    print(f"  numpy              {best * 1e3:8.2f} ms")
    print(f"  loom fused         {loom['loom_gelu_fused_ms']:8.2f} ms")
    print(f"  loom unfused       {loom['loom_gelu_unfused_ms']:8.2f} ms")
    print(f"  numpy / loom fused: {best * 1e3 / loom['loom_gelu_fused_ms']:.2f}x")


if __name__ == "__main__":
    sys.exit(main())
