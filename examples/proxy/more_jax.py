# Everyday JAX through Loom's IFRT proxy (run like tpu_workload.py): sharded host->device
# transfers, shard_map with a collective, donation, jit, grad, scalars, device_get.
import numpy as np
import pathwaysutils
pathwaysutils.initialize()
import jax
import jax.numpy as jnp
from jax import lax, shard_map
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

n = jax.device_count()
x = np.arange(n, dtype=np.float32)
print("pmap psum:", np.asarray(jax.pmap(lambda v: lax.psum(v, "i"), axis_name="i")(x)).tolist(), flush=True)
mesh = Mesh(np.array(jax.devices()).reshape(2, n // 2), ("x", "y"))
a = jax.device_put(np.arange(64, dtype=np.float32).reshape(8, 8), NamedSharding(mesh, P("x", "y")))
print("put and get back:", bool((np.asarray(a) == np.arange(64).reshape(8, 8)).all()), flush=True)
f = shard_map(lambda blk: lax.psum(blk.sum(keepdims=True), ("x", "y")), mesh=mesh, in_specs=P("x", "y"), out_specs=P())
print("shard_map psum:", np.asarray(jax.jit(f)(a)).tolist(), flush=True)
print("donated:", np.asarray(jax.jit(lambda v: v * 2, donate_argnums=0)(jnp.ones((4,)))).tolist(), flush=True)
e = jax.jit(lambda v: jnp.sin(v) + 1)(jnp.arange(5.0))
print("jit sin matches numpy:", bool(np.allclose(np.asarray(e), np.sin(np.arange(5.0)) + 1, rtol=1e-6)), flush=True)
print("grad:", np.asarray(jax.grad(lambda w: jnp.sum(w * w))(jnp.arange(3.0))).tolist(), flush=True)
print("scalar:", float(jnp.float32(3.5) * 2), flush=True)
y = jax.device_put(jax.device_put(jnp.arange(4), jax.devices()[2]), jax.devices()[5])
print("moved:", np.asarray(y + 1).tolist(), [d.id for d in y.devices()], flush=True)
print("pmap output:", str(jax.pmap(lambda v: v * 2)(jnp.arange(8.0))), flush=True)
