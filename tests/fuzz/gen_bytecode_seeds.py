"""Writes the seed inputs of the bytecode fuzzer (tests/fuzz/corpus/bytecode/): small JAX programs
serialized by the installed jaxlib as MLIR bytecode at several StableHLO versions (bytecode format
versions 0 to 6), plain VHLO and mixed with sdy (shard_map, pmap). Run once by hand:
    python3 tests/fuzz/gen_bytecode_seeds.py
The fuzzer adds what it finds to the same folder; test_fuzz_replay replays all of it."""
import hashlib
import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
import jax  # noqa: E402

jax.config.update("jax_num_cpu_devices", 4)
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax._src.lib import _jax  # noqa: E402
from jax.sharding import Mesh, PartitionSpec as P  # noqa: E402
from jaxlib.mlir.dialects import stablehlo  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "bytecode")
x = jnp.ones((4, 3), jnp.float32)
progs = {
    "add": (lambda a: a + 1, (x,)),
    "dot_reduce": (lambda a: (a @ a.T).sum(0), (x,)),
    "while_sort": (lambda a: jax.lax.fori_loop(0, 3, lambda i, v: jnp.sort(v * 2, axis=0), a), (x,)),
    "gather_scatter": (lambda a, i: a.at[i].add(a[i] * 2), (x, jnp.array([0, 2], jnp.int32))),
    "conv": (lambda a, w: jax.lax.conv(a, w, (1, 1), "SAME"), (jnp.ones((1, 2, 5, 5)), jnp.ones((3, 2, 3, 3)))),
    "types": (lambda a: (a.astype(jnp.bfloat16), a.astype(jnp.int8), a > 0, a.astype(jnp.complex64)), (x,)),
    "cond_iota": (lambda p: jax.lax.cond(p, lambda: jnp.arange(5), lambda: jnp.arange(5) * 2), (jnp.bool_(True),)),
}
os.makedirs(OUT, exist_ok=True)


def save(data):
    with open(os.path.join(OUT, hashlib.sha1(data).hexdigest()), "wb") as f:
        f.write(data)


for name, (f, args) in progs.items():
    text = jax.export.export(jax.jit(f))(*args).mlir_module()
    for v in ("0.9.0", "0.14.0", "1.0.0", "1.13.7", "1.17.0"):
        try:
            save(stablehlo.serialize_portable_artifact_str(text, v))
        except ValueError:
            pass
mesh = Mesh(np.array(jax.devices()), ("d",))
try:
    from jax import shard_map
except ImportError:
    from jax.experimental.shard_map import shard_map
sm = jax.jit(shard_map(lambda a: jax.lax.psum(a * a, "d"), mesh=mesh, in_specs=P("d"), out_specs=P()))
pm = jax.pmap(lambda v: jax.lax.all_gather(v, "i"), axis_name="i")
for f, arg in ((sm, jnp.ones(8)), (pm, jnp.ones((4, 2)))):
    for v in ("0.9.0", "1.13.7", "1.17.0"):
        save(_jax.mlir.serialize_portable_artifact(f.lower(arg).as_text(), v, True))
print(len(os.listdir(OUT)), "seeds in", OUT)
