"""A sharded training step, Loom's partitioner beside XLA's, in one run: a 4-layer transformer
(FSDP over "data" x tensor parallel over "model" on a 2x4 mesh), its loss-and-gradient step jitted
globally with NamedSharding. Loom: the step partitioned by Loom and run on a local cluster of 2
workers x 4 devices (`loom up`, started here), inputs already on the devices, steps chained and
waited for. XLA: the same step partitioned by XLA on 8 CPU devices in one process
(--xla_force_host_platform_device_count=8). Best time per step of several; bytes moved by
collectives per step for both (Loom's from `loom compile --explain`, XLA's counted from its
partitioned HLO with bench_partition.py's formula).

    python3 bench/bench_partition_step.py [--steps 10] [--layers 4] [--dim 128]
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
os.environ.setdefault("JAX_PLATFORMS", "cpu")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import numpy as np  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402
from bench_partition import loom_bytes, xla_bytes  # noqa: E402

LOOM = os.environ.get("LOOM_BIN") or str(ROOT / "build" / "bin" / "loom")


def init(layers, d, h):
    rng = np.random.default_rng(0)
    s = lambda *shape: (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32)  # noqa: E731
    return [{"wq": s(d, d), "wk": s(d, d), "wv": s(d, d), "wo": s(d, d), "w1": s(d, h), "w2": s(h, d)}
            for _ in range(layers)]


def block(p, x):
    q, k, v = x @ p["wq"], x @ p["wk"], x @ p["wv"]
    a = jax.nn.softmax(q @ jnp.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1]), axis=-1) @ v
    x = x + a @ p["wo"]
    x = (x - x.mean(-1, keepdims=True)) * jax.lax.rsqrt(x.var(-1, keepdims=True) + 1e-5)
    return x + jax.nn.gelu(x @ p["w1"]) @ p["w2"]


def step(params, x, y):
    def loss(params):
        h = x
        for p in params:
            h = block(p, h)
        return jnp.mean((h - y) ** 2)
    l, g = jax.value_and_grad(loss)(params)
    return l, jax.tree_util.tree_map(lambda p, g: p - 0.01 * g, params, g)


def shardings(mesh_cls, ns_cls, mesh, layers):
    col, row = ns_cls(mesh, P("data", "model")), ns_cls(mesh, P("model", "data"))
    ps = [{"wq": col, "wk": col, "wv": col, "wo": row, "w1": col, "w2": row} for _ in range(layers)]
    return ps, ns_cls(mesh, P("data", None, None)), ns_cls(mesh, P())


def best_of(f, steps):
    best = 1e9
    for _ in range(steps):
        t = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t)
    return best


def main():
    ap = argparse.ArgumentParser(description="A sharded training step (FSDP x TP, 8 devices): Loom's partitioned step "
                                 "on a 2-worker cluster beside XLA's partitioned step on 8 CPU devices, one run.")
    ap.add_argument("--steps", type=int, default=10, help="timed steps per side, best reported (default 10)")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--dim", type=int, default=128)
    a = ap.parse_args()
    d, h, L = a.dim, 4 * a.dim, a.layers
    params = init(L, d, h)
    x = np.random.default_rng(1).standard_normal((16, 32, d)).astype(np.float32)
    y = np.random.default_rng(2).standard_normal((16, 32, d)).astype(np.float32)

    # XLA on 8 CPU devices in this process
    mesh = Mesh(np.array(jax.devices()[:8]).reshape(2, 4), ("data", "model"))
    ps, bs, rep = shardings(Mesh, NamedSharding, mesh, L)
    jf = jax.jit(step, in_shardings=(ps, bs, bs), out_shardings=(rep, ps))
    dp = jax.device_put(params, ps)
    dx, dy = jax.device_put(x, bs), jax.device_put(y, bs)
    jax.block_until_ready(jf(dp, dx, dy))
    t_xla = best_of(lambda: jax.block_until_ready(jf(dp, dx, dy)), a.steps)
    lowered = jf.lower(dp, dx, dy)
    n_xla, b_xla = xla_bytes(lowered.compile().as_text())
    text = lowered.as_text()

    # Loom: the same global program, partitioned by Loom, on a local cluster
    state = tempfile.mkdtemp(prefix="loom-bench-")
    env = dict(os.environ, LOOM_STATE_DIR=state)
    subprocess.run([LOOM, "up", "--detach", "--proxy-port", "0"], env=env, check=True, capture_output=True)
    try:
        prog = Path(state) / "step.mlir"
        prog.write_text(text)
        n_loom, b_loom, fallbacks = loom_bytes(LOOM, prog)
        os.environ["LOOM_STATE_DIR"] = state
        sys.path.insert(0, str(ROOT / "build" / "python"))
        import loom.jax as lj
        lj.initialize(patch_jax=False)
        lmesh = lj.Mesh(np.arange(8).reshape(2, 4), ("data", "model"))
        lps, lbs, lrep = shardings(lj.Mesh, lj.NamedSharding, lmesh, L)
        lf = lj.jit(step, in_shardings=(lps, lbs, lbs), out_shardings=(lrep, lps))
        lp = jax.tree_util.tree_map(lambda v, s: lj.put(v, s), params, lps)
        lx, ly = lj.put(x, lbs), lj.put(y, lbs)
        loss, _ = lf(lp, lx, ly)
        loss.numpy()

        def one():
            loss, _ = lf(lp, lx, ly)
            loss.numpy()
        t_loom = best_of(one, a.steps)
        l_loom = float(loss.numpy())
        l_xla = float(jf(dp, dx, dy)[0])
    finally:
        subprocess.run([LOOM, "down"], env=env, capture_output=True)
    print(f"{L}-layer transformer step (d={d}, batch 16x32), FSDP(data=2) x TP(model=4), 8 devices; "
          f"{os.cpu_count()} cores shared by all 8 on both sides")
    print(f"{'':40s} {'step time':>12s} {'collectives':>11s} {'bytes/step':>12s} {'loss':>10s}")
    print(f"{'Loom (partitioned by Loom, 2 workers)':40s} {t_loom * 1e3:9.1f} ms {n_loom:11d} {b_loom:12.0f} {l_loom:10.5f}"
          f"   ({fallbacks} ops computed replicated)")
    print(f"{'XLA (8 CPU devices, one process)':40s} {t_xla * 1e3:9.1f} ms {n_xla:11d} {b_xla:12.0f} {l_xla:10.5f}")
    print(f"Loom / XLA: time {t_loom / t_xla:.2f}x, bytes {b_loom / b_xla:.2f}x")


if __name__ == "__main__":
    main()
