"""Regenerates the annotated global programs the partitioner tests run (jax.jit with NamedSharding,
no shard_map), their inputs and their unpartitioned results (the same function jitted on one
device). The tests read the checked-in files, so they do not need JAX:

    python3 tests/integration/programs/partition/gen.py [NAME...]

Each case NAME writes NAME.mlir (what `jax.jit(f, in_shardings, out_shardings).lower(...)` prints
on 8 CPU devices) and NAME.npz (in0, in1, ... and out0, out1, ...)."""
import os
import sys
from pathlib import Path

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

HERE = Path(__file__).resolve().parent
rng = np.random.default_rng(7)
WRITE = True   # bench/bench_partition.py sets False and reads CASES instead
CASES = []     # (name, f, mesh, ins, in_specs, out_specs) of every case, in order
ONLY = set(sys.argv[1:]) if __name__ == "__main__" else set()  # gen.py NAME...: write only those


def r(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def lowering(f, mesh, ins, in_specs, out_specs=None):
    """jax.jit(f, in_shardings, out_shardings).lower(*ins); where some in_specs are None, plain
    jit instead, over the other inputs put with their specs (None: a Python scalar left to JAX)."""
    shard = lambda s: NamedSharding(mesh, s)  # noqa: E731
    kw = {}
    if all(s is not None for s in in_specs):
        kw["in_shardings"] = tuple(shard(s) for s in in_specs)
    else:
        ins = [jax.device_put(a, shard(s)) if s is not None else a for a, s in zip(ins, in_specs)]
    if out_specs is not None:
        kw["out_shardings"] = jax.tree.map(shard, out_specs, is_leaf=lambda x: isinstance(x, P))
    return jax.jit(f, **kw).lower(*ins)


def case(name, f, mesh, ins, in_specs, out_specs=None):
    CASES.append((name, f, mesh, ins, in_specs, out_specs))
    if not WRITE or (ONLY and name not in ONLY):
        return
    (HERE / f"{name}.mlir").write_text(lowering(f, mesh, ins, in_specs, out_specs).as_text())
    ins = [np.asarray(jnp.asarray(a)) for a in ins]  # Python scalars as JAX types them (f32)
    with jax.default_device(jax.devices()[0]):
        outs = jax.jit(f)(*[jnp.asarray(a) for a in ins])  # unpartitioned, one device
    outs = jax.tree.leaves(outs)
    arrays = {f"in{i}": np.asarray(a) for i, a in enumerate(ins)}
    arrays.update({f"out{j}": np.asarray(o) for j, o in enumerate(outs)})
    np.savez(HERE / f"{name}.npz", **arrays)
    print("wrote", name)


def mlp(x, w1, b1, w2, b2):
    h = jax.nn.relu(x @ w1 + b1)
    return h @ w2 + b2


def main():
    devs = np.array(jax.devices())
    m8 = Mesh(devs, ("d",))
    m24 = Mesh(devs.reshape(2, 4), ("data", "model"))
    mxy = Mesh(devs.reshape(2, 4), ("x", "y"))
    none = P()

    x, w1, b1, w2, b2 = r(32, 16), r(16, 64), r(64), r(64, 8), r(8)
    case("dp_mlp", mlp, m8, [x, w1, b1, w2, b2], [P("d"), none, none, none, none], P("d"))
    case("megatron_mlp", mlp, m8, [x, w1, b1, w2, b2], [none, P(None, "d"), P("d"), P("d", None), none], none)
    case("mlp_2d", mlp, m24, [x, w1, b1, w2, b2],
         [P("data"), P(None, "model"), P("model"), P("model", None), none], P("data"))
    # FSDP: parameters split over the data axis, gathered where they are used
    case("fsdp_mlp", mlp, m8, [x, w1, b1, w2, b2], [P("d"), P("d"), P("d"), P("d"), none], P("d"))

    def loss(params, x, y):
        w1, b1, w2, b2 = params
        return jnp.mean((mlp(x, w1, b1, w2, b2) - y) ** 2)

    y = r(32, 8)
    case("dp_grad", lambda w1, b1, w2, b2, x, y: jax.grad(loss)((w1, b1, w2, b2), x, y), m8,
         [w1, b1, w2, b2, x, y], [none, none, none, none, P("d"), P("d")])
    case("tp_grad", lambda w1, b1, w2, b2, x, y: jax.value_and_grad(loss)((w1, b1, w2, b2), x, y), m24,
         [w1, b1, w2, b2, x, y], [P(None, "model"), P("model"), P("model", None), none, P("data"), P("data")])

    a, b = r(16, 32), r(32, 24)
    case("matmul_xy", lambda a, b: a @ b, mxy, [a, b], [P("x", "y"), P("y", None)], P("x", None))
    case("matmul_out_chosen", lambda a, b: a @ b, mxy, [a, b], [P("x", None), P(None, "y")])

    def constrained(a):
        h = jnp.sin(a) * 2.0
        h = jax.lax.with_sharding_constraint(h, NamedSharding(mxy, P(None, ("x", "y"))))
        return h.sum(axis=1) + 1.0

    case("constraint_mid", constrained, mxy, [a], [P("x", None)], P())
    case("sum_sharded_dim", lambda a: a.sum(axis=0), mxy, [a], [P("x", "y")], P("y"))
    case("max_sharded_dim", lambda a: jnp.max(a, axis=1), mxy, [a], [P("x", "y")])
    case("mean_all", lambda a: jnp.mean(a), m8, [a], [P(None, "d")])
    case("softmax_rows", lambda a: jax.nn.softmax(a, axis=-1), mxy, [a], [P("x", "y")], P("x", "y"))
    case("logsumexp_cols", lambda a: jax.nn.logsumexp(a, axis=0), m8, [a], [P("d", None)])
    case("iota_offsets", lambda a: a + jnp.arange(16, dtype=jnp.float32)[:, None] * 100.0
         + jnp.arange(32, dtype=jnp.float32)[None, :], mxy, [a], [P("x", "y")], P("x", "y"))
    case("transpose_reshape", lambda a: (a.T.reshape(4, 8, 16) * 3.0).sum(axis=2), mxy, [a], [P("y", "x")])
    case("where_compare_convert", lambda a: jnp.where(a > 0, a, 0.1 * a).astype(jnp.int32) + (a < -1),
         m8, [a * 10], [P("d")], P("d"))
    case("slice_concat", lambda a: jnp.concatenate([a[:, 2:10], a[:, :4] * 2.0], axis=1), m8, [a], [P("d")])
    bb, cc = r(8, 6, 12), r(8, 12, 4)
    case("batched_matmul", lambda p, q: jnp.einsum("bij,bjk->bik", p, q), mxy, [bb, cc],
         [P("x", None, "y"), P("x", "y", None)], P("x"))
    case("reshard_all_to_all", lambda a: a * 1.5, m8, [a], [P("d", None)], P(None, "d"))
    case("cumsum_fallback", lambda a: jnp.cumsum(a, axis=0), m8, [a], [P("d")], P("d"))
    # uneven: JAX refuses uneven input shardings, so the uneven splits are constraints inside
    ws = lambda v, s: jax.lax.with_sharding_constraint(v, NamedSharding(mxy, s))  # noqa: E731
    case("uneven_rows", lambda a: ws(jnp.tanh(a), P("y", None)) @ a.T, mxy, [r(10, 12)], [none])
    case("uneven_sum", lambda a: ws(a * 2.0, P(("x", "y"))).sum(axis=0), mxy, [r(12, 6)], [P("x")])
    # a scan over layers (a while loop, partitioned: the activations stay split by batch)
    ws_stack = r(3, 16, 16) * 0.3

    def scan_layers(x, ws):
        def step(h, w):
            return jnp.tanh(h @ w), None
        return jax.lax.scan(step, x, ws)[0]

    case("scan_layers", scan_layers, m24, [x, ws_stack], [P("data"), P(None, None, "model")], P("data"))

    # attention with heads split over "model" and the batch over "data"
    q, k, v = r(2, 4, 8, 16), r(2, 4, 8, 16), r(2, 4, 8, 16)

    def attention(q, k, v):
        s = jnp.einsum("bhqd,bhkd->bhqk", q, k) / 4.0
        return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, axis=-1), v)

    hs = P("data", "model")
    case("attention_heads", attention, m24, [q, k, v], [hs, hs, hs], hs)
    # sort and a cumulative sum along dims the sharding leaves whole: no communication
    case("sort_cols", lambda a: jnp.sort(a, axis=0) * 2.0, m8, [a], [P(None, "d")], P(None, "d"))
    case("cumsum_rows", lambda a: jnp.cumsum(a, axis=1), mxy, [a], [P(("x", "y"))], P(("x", "y")))
    # dynamic_update_slice over whole rows (the split rows stay split) and rematerialization
    # (jax.checkpoint: optimization_barrier in the gradient)
    case("dynamic_update_cols", lambda a, u, i: jax.lax.dynamic_update_slice(a, u, (0, i)), m8,
         [a, r(16, 4), np.int32(5)], [P("d"), P("d"), none], P("d"))
    case("remat_grad", lambda w1, b1, w2, b2, x, y: jax.grad(jax.checkpoint(loss))((w1, b1, w2, b2), x, y), m8,
         [w1, b1, w2, b2, x, y], [none, none, none, none, P("d"), P("d")])
    # lax.cond (stablehlo.case) with branches on sharded values
    case("cond_branches", lambda x, w: jax.lax.cond(x.sum() > 0, lambda x: jnp.tanh(x @ w), lambda x: -(x @ w), x),
         m24, [x, w1], [P("data"), P(None, "model")], P("data", "model"))
    case("broadcast_bias", lambda a, v: a * v[None, :] + v.sum(), mxy, [a, r(32)], [P("x", "y"), P("y")], P("x", "y"))

    # gather (an embedding lookup: table rows split over "d", ids split by batch) and scatter-add
    table, ids = r(64, 16), rng.integers(0, 64, size=(32,)).astype(np.int32)
    case("embedding_gather", lambda t, i: jnp.take(t, i, axis=0) * 2.0, m8, [table, ids], [P(None, "d"), P("d")],
         P("d"))
    case("scatter_add_rows", lambda a, i, u: a.at[i].add(u), m8, [a, rng.integers(0, 16, size=(8,)).astype(np.int32),
                                                                r(8, 32)], [P(None, "d"), none, P(None, "d")],
         P(None, "d"))
    # a convolution with the batch split (NHWC), and a 2x2 max pool and its gradient
    img, ker = r(8, 10, 10, 3), r(3, 3, 3, 4)

    def conv(x, k):
        return jax.lax.conv_general_dilated(x, k, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))

    case("conv_batch", conv, m8, [img, ker], [P("d"), none], P("d"))

    def maxpool(x):
        return jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")

    case("maxpool_batch", maxpool, m24, [r(8, 10, 10, 4)], [P("data", None, None, "model")], P("data"))
    case("maxpool_grad", lambda x: jax.grad(lambda v: maxpool(v).sum())(x), m8, [img], [P("d")], P("d"))
    # random numbers made inside a partitioned program equal the unpartitioned ones
    case("rng_inside", lambda a, k: a + jax.random.normal(jax.random.wrap_key_data(k), a.shape), mxy,
         [a, np.array([0, 42], np.uint32)], [P("x", "y"), none], P("x", "y"))
    # a fori_loop, pad, reverse, dynamic_slice and top_k along dims the sharding leaves whole
    case("fori_loop", lambda a: jax.lax.fori_loop(0, 5, lambda i, v: jnp.sin(v) + i, a), m8, [a], [P("d")], P("d"))
    case("pad_reverse", lambda a: jnp.pad(a, ((0, 0), (2, 3)))[:, ::-1] * 3.0, m8, [a], [P("d")], P("d"))
    case("dynamic_slice_cols", lambda a, i: jax.lax.dynamic_slice(a, (0, i), (16, 8)), mxy, [a, np.int32(7)],
         [P("x", "y"), none], P("x"))
    case("top_k_rows", lambda a: jax.lax.top_k(a, 3)[0], m8, [a], [P("d")], P("d"))
    # plain jit over a sharded array and a Python scalar: JAX puts the scalar on @empty_mesh
    case("scalar_on_empty_mesh", lambda a, b: a * b + 1, m8, [a, 3.0], [P("d"), None])

    # argmax / argmin (a variadic reduce of values and an iota) over split dims: each device
    # reduces its part with global indices, the partial pairs are gathered and reduced again;
    # values rounded so that ties (smallest index wins) occur across shards
    t = np.round(r(16, 32) * 1.5).astype(np.float32)
    case("argmax_split_cols", lambda a: jnp.argmax(a, axis=1), m8, [t], [P(None, "d")])
    case("argmin_2d", lambda a: (jnp.argmin(a, axis=0), jnp.min(a, axis=0)), mxy, [t], [P("x", "y")])
    case("argmax_rows_kept", lambda a: jnp.argmax(a, axis=1), m8, [t], [P("d")], P("d"))
    # argsort (a variadic sort) along a dim left whole, a sort along the split dim (gathered
    # first), top_k's values and indices along a dim left whole and along the split dim
    case("argsort_cols", lambda a: jnp.argsort(a, axis=0), m8, [t], [P(None, "d")], P(None, "d"))
    case("sort_split_dim", lambda a: jnp.sort(a, axis=1), m8, [t], [P(None, "d")])
    case("top_k_both", lambda a: jax.lax.top_k(a, 4), mxy, [t], [P(("x", "y"))], P(("x", "y")))
    case("top_k_split_dim", lambda a: jax.lax.top_k(a, 3), m8, [t], [P(None, "d")])
    # top_k of a split vector (no other dim to move the split to): each shard's top k gathered
    case("top_k_vector", lambda v: jax.lax.top_k(v, 5), mxy, [np.round(r(512) * 3).astype(np.float32)],
         [P(("x", "y"))])
    # uneven splits inside the program (10 rows or 6 columns over 4 devices, 10 rows over 8):
    # shards of ceil(n / k), the last padded; reductions and contractions over the padded dim
    # mask the padding (JAX refuses uneven argument and result shardings, so constraints); the
    # padding (zeros where a shard is cut) is made non-zero (exp, + 1, -a * a) before it is met
    u = r(10, 6)
    case("uneven_sum_rows", lambda a: ws(jnp.exp(a), P("y", None)).sum(axis=0), mxy, [u], [none])
    case("uneven_mean", lambda a: ws(a * 2.0 + 1.0, P(("x", "y"), None)).mean(), mxy, [u], [none])
    case("uneven_dot_rows", lambda a, b: ws(jnp.exp(a), P("y", None)).T @ (b + 1.0), mxy, [u, r(10, 5)], [none, none])
    case("uneven_dot_cols", lambda a, w: ws(a + 1.0, P(None, "y")) @ w, mxy, [u, r(6, 5)], [none, none])
    case("uneven_softmax", lambda a: jax.nn.softmax(ws(a, P("y", None)), axis=0), mxy, [u], [none])
    ut = np.round(u * 1.5).astype(np.float32) + 0.5  # ties (smallest index wins across shards), no zeros
    case("uneven_argmax", lambda a: (jnp.argmax(ws(-a * a, P("y", None)), axis=0), jnp.max(ws(a, P("y", None)), axis=0)),
         mxy, [ut], [none])
    case("uneven_norm_cols", lambda a: jax.nn.standardize(ws(a, P("x", "y")), axis=1), mxy, [u], [none])


if __name__ == "__main__":
    main()
