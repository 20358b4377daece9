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
    # jit with sharded inputs and no shard_map: needs automatic partitioning
    from jax.sharding import NamedSharding
    sh = NamedSharding(mesh8, P("d"))
    save("auto_8.mlir", jax.jit(lambda a: a * 2, in_shardings=sh, out_shardings=sh).lower(jnp.zeros(16, jnp.float32)))
    # pmap with psum over its input (a real all_reduce)
    save("pmap_psum_8.mlir", jax.pmap(lambda v: lax.psum(v, "i"), axis_name="i").lower(jnp.arange(8.0)))


if __name__ == "__main__":
    main()
