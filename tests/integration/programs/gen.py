"""Regenerates the JAX-lowered test programs in this folder (run with the installed JAX; the
tests read the checked-in files, so they do not need JAX themselves):

    XLA_FLAGS=--xla_force_host_platform_device_count=8 python3 tests/integration/programs/gen.py
"""
import os
from pathlib import Path

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402
from jax.sharding import Mesh, PartitionSpec as P  # noqa: E402

HERE = Path(__file__).resolve().parent


def save(name, lowered):
    (HERE / name).write_text(lowered.as_text())
    print("wrote", name)


def main():
    devs = np.array(jax.devices())
    mesh8 = Mesh(devs, ("d",))
    mesh24 = Mesh(devs.reshape(2, 4), ("x", "y"))
    # x -> x + 1, split over 8 devices (chains of launches)
    f = jax.shard_map(lambda x: x + 1, mesh=mesh8, in_specs=P("d"), out_specs=P("d"))
    save("add_one_8.mlir", jax.jit(f).lower(jnp.zeros(16, jnp.int32)))
    f = jax.shard_map(lambda x: x + 1, mesh=Mesh(devs[:4], ("d",)), in_specs=P("d"), out_specs=P("d"))
    save("add_one_4.mlir", jax.jit(f).lower(jnp.zeros(8, jnp.int32)))
    # two differently sharded inputs on a 2x4 mesh, elementwise: a * b + 1
    f = jax.shard_map(lambda a, b: a * b[None, :] + 1, mesh=mesh24, in_specs=(P("x", "y"), P("y")),
                      out_specs=P("x", "y"))
    save("smap_2x4.mlir", jax.jit(f).lower(jnp.zeros((8, 16), jnp.float32), jnp.zeros(16, jnp.float32)))
    # a single-device program: matmul and tanh
    save("single_matmul.mlir",
         jax.jit(lambda a, b: jnp.tanh(a @ b) + 1).lower(jnp.zeros((4, 6), jnp.float32), jnp.zeros((6, 3), jnp.float32)))
    # jit with sharded inputs and no shard_map: Loom's partitioner splits it
    from jax.sharding import NamedSharding
    sh = NamedSharding(mesh8, P("d"))
    save("auto_8.mlir", jax.jit(lambda a: a * 2, in_shardings=sh, out_shardings=sh).lower(jnp.zeros(16, jnp.float32)))
    # pmap with psum over its input (a real all_reduce)
    save("pmap_psum_8.mlir", jax.pmap(lambda v: lax.psum(v, "i"), axis_name="i").lower(jnp.arange(8.0)))
    # replicated work around a shard_map: the update of w outside it, on replicated values
    g = jax.shard_map(lambda w, x: lax.psum(x.sum(axis=0) * w, "d"), mesh=mesh8, in_specs=(P(), P("d")),
                      out_specs=P())
    save("outside_8.mlir", jax.jit(lambda w, x: (w - 0.5 * g(w, x), jnp.tanh(w).sum()))
         .lower(jnp.zeros(4, jnp.float32), jnp.zeros((16, 4), jnp.float32)))
    collectives(mesh24)
    mlp(mesh8)


def collectives(mesh24):
    """Every collective JAX's shard_map emits, on a 2x4 mesh (x over workers' halves, y within)."""
    def f(a, n):
        i, j = lax.axis_index("x"), lax.axis_index("y")
        return (lax.psum(a, "y"),
                lax.psum(a, ("x", "y")),
                lax.all_gather(a, "y", axis=1, tiled=True),
                lax.psum_scatter(a, "y", scatter_dimension=1, tiled=True),
                lax.all_to_all(a, "y", 0, 1, tiled=True),
                lax.ppermute(a, "y", perm=[(k, (k + 1) % 4) for k in range(4)]),
                lax.pmax(a, "x"),
                lax.pmin(n, ("x", "y")),
                lax.psum(n, "x"),
                (i * 10 + j).astype(jnp.int32).reshape(1))
    specs = (P("x", None), P(), P("x", None), P("x", "y"), P(("x", "y"), None), P("x", "y"), P(None, "y"), P(),
             P(None, ("x", "y")), P(("x", "y")))
    g = jax.shard_map(f, mesh=mesh24, in_specs=(P("x", "y"), P(None, ("x", "y"))), out_specs=specs, check_vma=False)
    save("colls_2x4.mlir", jax.jit(g).lower(jnp.zeros((8, 16), jnp.float32), jnp.zeros((3, 8), jnp.int32)))


def mlp(mesh8, steps=10):
    """A data-parallel MLP training step (per-device gradients, psum, SGD) and, as the reference,
    the losses of the same training on one device (plain JAX), with its data."""
    rng = np.random.default_rng(0)
    batch, din, dh, dout, lr = 64, 8, 16, 4, 0.1
    x = rng.standard_normal((batch, din)).astype(np.float32)
    true_w = rng.standard_normal((din, dout)).astype(np.float32)
    y = np.tanh(x @ true_w).astype(np.float32)
    params = [rng.standard_normal((din, dh)).astype(np.float32) * 0.5, np.zeros(dh, np.float32),
              rng.standard_normal((dh, dout)).astype(np.float32) * 0.5, np.zeros(dout, np.float32)]

    def loss_fn(p, xb, yb):
        h = jnp.tanh(xb @ p[0] + p[1])
        return jnp.sum((h @ p[2] + p[3] - yb) ** 2)

    def dp_step(w1, b1, w2, b2, xb, yb):  # per device: its batch shard
        p = [w1, b1, w2, b2]
        l, g = jax.value_and_grad(loss_fn)(p, xb, yb)
        g = [lax.psum(t, "d") / batch for t in g]
        l = lax.psum(l, "d") / batch
        return tuple(a - lr * b for a, b in zip(p, g)) + (l,)

    step = jax.shard_map(dp_step, mesh=mesh8, in_specs=(P(), P(), P(), P(), P("d"), P("d")),
                         out_specs=(P(), P(), P(), P(), P()), check_vma=False)
    save("mlp_dp_step_8.mlir", jax.jit(step).lower(*params, x, y))

    @jax.jit
    def one_device(w1, b1, w2, b2):
        p = [w1, b1, w2, b2]
        l, g = jax.value_and_grad(loss_fn)(p, x, y)
        return tuple(a - lr * b / batch for a, b in zip(p, g)) + (l / batch,)

    p, losses = [jnp.asarray(t) for t in params], []
    for _ in range(steps):
        *p, l = one_device(*p)
        losses.append(float(l))
    np.savez(HERE / "mlp_data.npz", x=x, y=y, w1=params[0], b1=params[1], w2=params[2], b2=params[3],
             losses=np.array(losses, np.float32))
    print("wrote mlp_data.npz: losses", losses)


if __name__ == "__main__":
    main()
