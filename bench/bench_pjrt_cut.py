"""Partitioned training steps on 8 devices (2 workers x 4), three ways in one run: Loom's own
executor on every worker (`loom up`, backend interp), XLA through the PJRT plugin with each
per-device program cut at its collectives (`loom up --backend pjrt`: the compute between
collectives as plugin executables, the collectives on Loom's data plane), and plain JAX/XLA on 8
CPU devices in one process (--xla_force_host_platform_device_count=8). Two more columns: pjrt with
LOOM_PJRT_CUT=0, the PJRT backend as it was before cutting (programs with collectives ran whole
on Loom's executor), and pjrt with cutting but LOOM_PJRT_COPY_RESULTS=1 (every plugin result
copied into a Loom buffer instead of handed over: what the handover saves).

Both steps are jitted globally with NamedSharding on a 2x4 ("data", "model") mesh and partitioned
by Loom (XLA's own partitioner for the JAX row): an MLP step (data parallel x tensor parallel,
Megatron-style) and bench_partition_step.py's transformer step (FSDP x TP). Best time per step of
several, inputs already on the devices, each step waited for; the loss of every side printed to
show they compute the same thing.

    python3 bench/bench_pjrt_cut.py [--steps 10] [--layers 2] [--dim 128] [--mlp-dim 512]
"""
import argparse
import json
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
import bench_partition_step as tb  # noqa: E402

LOOM = os.environ.get("LOOM_BIN") or str(ROOT / "build" / "bin" / "loom")


def mlp_init(d, h):
    rng = np.random.default_rng(0)
    s = lambda *shape: (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32)  # noqa: E731
    return {"w1": s(d, h), "b1": np.zeros(h, np.float32), "w2": s(h, d), "b2": np.zeros(d, np.float32)}


def mlp_step(p, x, y):
    def loss(p):
        h = jax.nn.gelu(x @ p["w1"] + p["b1"])
        return jnp.mean((h @ p["w2"] + p["b2"] - y) ** 2)
    l, g = jax.value_and_grad(loss)(p)
    return l, jax.tree_util.tree_map(lambda a, b: a - 0.01 * b, p, g)


def mlp_shardings(ns, mesh):
    ps = {"w1": ns(mesh, P(None, "model")), "b1": ns(mesh, P("model")), "w2": ns(mesh, P("model", None)),
          "b2": ns(mesh, P())}
    return ps, ns(mesh, P("data", None)), ns(mesh, P())


def problems(a):
    d, h = a.mlp_dim, 4 * a.mlp_dim
    rng = np.random.default_rng(1)
    mx, my = rng.standard_normal((256, d)).astype(np.float32), rng.standard_normal((256, d)).astype(np.float32)
    td, L = a.dim, a.layers
    tx = np.random.default_rng(1).standard_normal((16, 32, td)).astype(np.float32)
    ty = np.random.default_rng(2).standard_normal((16, 32, td)).astype(np.float32)
    return {
        f"MLP step (batch 256, {d}x{h}), DP x TP": (mlp_step, mlp_init(d, h), mx, my, mlp_shardings),
        f"{L}-layer transformer step (d={td}), FSDP x TP": (
            tb.step, tb.init(L, td, 4 * td), tx, ty,
            lambda ns, mesh: tb.shardings(None, ns, mesh, L)),
    }


def loom_side(a):
    """Child process: the problems on the running cluster ($LOOM_STATE_DIR); prints JSON."""
    sys.path.insert(0, str(ROOT / "build" / "python"))
    import loom.jax as lj
    lj.initialize(patch_jax=False)
    mesh = lj.Mesh(np.arange(8).reshape(2, 4), ("data", "model"))
    out = {}
    for name, (f, params, x, y, shard) in problems(a).items():
        ps, bs, rep = shard(lj.NamedSharding, mesh)
        lf = lj.jit(f, in_shardings=(ps, bs, bs), out_shardings=(rep, ps))
        lp = jax.tree_util.tree_map(lambda v, s: lj.put(v, s), params, ps)
        lx, ly = lj.put(x, bs), lj.put(y, bs)
        loss, _ = lf(lp, lx, ly)
        loss.numpy()

        def one():
            loss, _ = lf(lp, lx, ly)
            loss.numpy()
        out[name] = (tb.best_of(one, a.steps), float(lf(lp, lx, ly)[0].numpy()))
    print(json.dumps(out))


def run_cluster(a, backend, cut=True, copy=False):
    state = tempfile.mkdtemp(prefix=f"loom-bench-cut-{backend}-")
    env = dict(os.environ, LOOM_STATE_DIR=state)
    env.pop("XLA_FLAGS", None)  # this process's 8 host devices are JAX's; the workers' plugins make their own
    if os.environ.get("LOOM_BENCH_WORKER_XLA_FLAGS"):
        env["XLA_FLAGS"] = os.environ["LOOM_BENCH_WORKER_XLA_FLAGS"]
    if not cut:
        env["LOOM_PJRT_CUT"] = "0"
    if copy:
        env["LOOM_PJRT_COPY_RESULTS"] = "1"
    up = [LOOM, "up", "--detach", "--proxy-port", "0", "--workers", "2", "--devices-per-worker", "4"]
    if backend == "pjrt":
        up += ["--backend", "pjrt"]
    subprocess.run(up, env=env, check=True, capture_output=True)
    try:
        r = subprocess.run([sys.executable, __file__, "--side", "--steps", str(a.steps), "--layers", str(a.layers),
                            "--dim", str(a.dim), "--mlp-dim", str(a.mlp_dim)], env=env, capture_output=True, text=True,
                           timeout=1800)
        if r.returncode != 0:
            raise SystemExit(f"the {backend} side failed:\n{r.stdout}{r.stderr}")
        res = json.loads(r.stdout.strip().splitlines()[-1])
        logs = "".join(p.read_text() for p in Path(state).glob("worker-*.log"))
        cuts = sorted({ln.split("worker I ")[-1] for ln in logs.splitlines() if " cut at " in ln})
        return res, cuts
    finally:
        subprocess.run([LOOM, "down"], env=env, capture_output=True)


def main():
    ap = argparse.ArgumentParser(description="Partitioned training steps on 8 devices: Loom's executor, Loom + PJRT cut "
                                 "at collectives, plain JAX, in one run.")
    ap.add_argument("--steps", type=int, default=10, help="timed steps per side, best reported (default 10)")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--dim", type=int, default=128, help="transformer width (default 128)")
    ap.add_argument("--mlp-dim", type=int, default=512, help="MLP width d (hidden 4d; default 512)")
    ap.add_argument("--side", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.side:
        return loom_side(a)
    mesh = Mesh(np.array(jax.devices()[:8]).reshape(2, 4), ("data", "model"))
    jres = {}
    for name, (f, params, x, y, shard) in problems(a).items():
        ps, bs, rep = shard(NamedSharding, mesh)
        jf = jax.jit(f, in_shardings=(ps, bs, bs), out_shardings=(rep, ps))
        dp, dx, dy = jax.device_put(params, ps), jax.device_put(x, bs), jax.device_put(y, bs)
        jax.block_until_ready(jf(dp, dx, dy))
        jres[name] = (tb.best_of(lambda: jax.block_until_ready(jf(dp, dx, dy)), a.steps), float(jf(dp, dx, dy)[0]))
    interp, _ = run_cluster(a, "interp")
    before, _ = run_cluster(a, "pjrt", cut=False)
    copied, _ = run_cluster(a, "pjrt", copy=True)
    pjrt, cuts = run_cluster(a, "pjrt")
    print(f"8 devices (2 workers x 4 for Loom, one process for JAX); {os.cpu_count()} cores shared by all of them")
    print(f"{'':44s} {'Loom interp':>12s} {'pjrt, no cut':>13s} {'cut, copied':>12s} {'pjrt + cut':>11s} "
          f"{'JAX (XLA)':>10s}  {'cut/JAX':>7s} {'interp/cut':>10s}")
    for name in jres:
        ti, li = interp[name]
        tn, _ = before[name]
        tk, _ = copied[name]
        tc, lc = pjrt[name]
        tj, lj_ = jres[name]
        print(f"{name:44s} {ti * 1e3:9.1f} ms {tn * 1e3:10.1f} ms {tk * 1e3:9.1f} ms {tc * 1e3:8.1f} ms "
              f"{tj * 1e3:7.1f} ms  {tc / tj:6.2f}x {ti / tc:9.2f}x")
        print(f"{'  loss':44s} {li:12.6f} {'':13s} {'':12s} {lc:11.6f} {lj_:10.6f}")
    print("what the PJRT workers logged:")
    for c in cuts:
        print("  " + c)


if __name__ == "__main__":
    main()
