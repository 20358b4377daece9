# Data-parallel MLP training in plain JAX (jax.pmap + lax.pmean of the gradients, SGD), run
# unchanged either on JAX's own CPU devices or, with pathwaysutils and JAX_PLATFORMS=proxy, on a
# Loom cluster through the IFRT proxy. Prints the loss every 10 steps and a checksum of the weights.
#   python examples/proxy/train_mlp.py --cpu      # plain JAX on 8 local CPU devices
#   JAX_PLATFORMS=proxy JAX_BACKEND_TARGET=grpc://127.0.0.1:29000 IFRT_PROXY_USE_INSECURE_GRPC_CREDENTIALS=true \
#     python examples/proxy/train_mlp.py
import sys
import numpy as np
if "--cpu" in sys.argv:
    import jax
    jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_num_cpu_devices", 8)
else:
    import pathwaysutils
    pathwaysutils.initialize()
import jax
import jax.numpy as jnp
from jax import lax

n = jax.device_count()
rng = np.random.default_rng(0)
X = rng.standard_normal((n * 32, 16)).astype(np.float32)
Y = (X @ rng.standard_normal((16, 1)).astype(np.float32) + 0.1).astype(np.float32)
params = {"w1": rng.standard_normal((16, 32)).astype(np.float32) * 0.1, "b1": np.zeros(32, np.float32),
          "w2": rng.standard_normal((32, 1)).astype(np.float32) * 0.1, "b2": np.zeros(1, np.float32)}


def loss_fn(p, x, y):
    h = jnp.tanh(x @ p["w1"] + p["b1"])
    return jnp.mean((h @ p["w2"] + p["b2"] - y) ** 2)


def step(p, x, y):
    loss, g = jax.value_and_grad(loss_fn)(p, x, y)
    g = lax.pmean(g, "d")
    return jax.tree_util.tree_map(lambda a, b: a - 0.05 * b, p, g), lax.pmean(loss, "d")


pstep = jax.pmap(step, axis_name="d")
rep = jax.tree_util.tree_map(lambda a: np.broadcast_to(a, (n,) + a.shape), params)
xs, ys = X.reshape(n, -1, 16), Y.reshape(n, -1, 1)
for i in range(30):
    rep, loss = pstep(rep, xs, ys)
    if i % 10 == 0 or i == 29:
        print(f"step {i} loss {float(np.asarray(loss)[0]):.6f}", flush=True)
print("weights checksum %.6f" % float(sum(np.asarray(v)[0].sum() for v in rep.values())), flush=True)
