"""loom.jax against JAX on the CPU: each function is lowered by JAX, run on the local cluster by
Loom, and compared with jax.jit's result on one CPU device within the tolerance stated beside it
(rtol, atol as in numpy.testing.assert_allclose; 0 means bitwise). Then the SPMD forms: pmap with
psum, and shard_map collectives on a 2x4 mesh over both workers; then the errors."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import loom
import loom.jax as lj
from loom.jax import P

rng = np.random.default_rng(42)


def f32(*shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def mlp_params(sizes):
    return [{"w": f32(m, n, scale=1 / np.sqrt(m)), "b": f32(n, scale=0.1)} for m, n in zip(sizes[:-1], sizes[1:])]


def mlp(params, x):
    for layer in params[:-1]:
        x = jax.nn.gelu(x @ layer["w"] + layer["b"])
    return x @ params[-1]["w"] + params[-1]["b"]


def mlp_loss(params, x, y):
    return jnp.mean((mlp(params, x) - y) ** 2)


def layer_norm(x, g, b):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) * lax.rsqrt(v + 1e-5) * g + b


def rnn_scan(w, xs):
    def cell(h, x):
        h = jnp.tanh(h @ w + x)
        return h, h.sum()
    return lax.scan(cell, jnp.zeros(w.shape[0], jnp.float32), xs)


def newton_sqrt(x):
    def body(c):
        i, y = c
        return i + 1, 0.5 * (y + x / y)
    return lax.while_loop(lambda c: c[0] < 30, body, (0, jnp.ones_like(x)))[1]


def collatz_steps(n):
    return lax.while_loop(lambda c: c[0] != 1, lambda c: (jnp.where(c[0] % 2 == 0, c[0] // 2, 3 * c[0] + 1),
                                                          c[1] + 1), (n, 0))[1]


def conv(x, k):
    return lax.conv_general_dilated(x, k, window_strides=(1, 1), padding="SAME",
                                    dimension_numbers=("NHWC", "HWIO", "NHWC"))


MLP_PARAMS = mlp_params([16, 32, 32, 4])
X16, Y4 = f32(24, 16), f32(24, 4)

# (name, function, arguments, rtol, atol)
CASES = [
    ("elementwise_transcendental", lambda x: jnp.sin(x) * jnp.exp(-x * x) + jnp.log1p(jnp.abs(x)) - jnp.tanh(x),
     (f32(64, 33),), 2e-6, 2e-6),
    ("elementwise_pow_sqrt", lambda x: jnp.sqrt(jnp.abs(x)) + jnp.power(jnp.abs(x) + 1, 1.7) - lax.rsqrt(x * x + 1),
     (f32(257),), 2e-6, 2e-6),
    ("integer_arithmetic", lambda a, b: ((a * 3 + b) // 7) % 5 - (a >> 2) ^ (b & 0xFF),
     (rng.integers(-1000, 1000, 100).astype(np.int32), rng.integers(1, 1000, 100).astype(np.int32)), 0, 0),
    ("compare_select", lambda x, y: jnp.where(x > y, x - y, jnp.minimum(x, y) * 0.1).clip(-0.5, 2.0),
     (f32(40, 8), f32(40, 8)), 0, 0),
    ("gelu_erf", lambda x: jax.nn.gelu(x, approximate=False) + jax.scipy.special.erf(x) + jax.nn.sigmoid(x),
     (f32(300),), 3e-6, 3e-6),
    ("reductions", lambda x: (x.sum(0), x.mean(1), x.max(), x.min(1), jnp.prod(x[:4, :4] + 1.5, 1)),
     (f32(37, 29),), 2e-5, 2e-5),
    ("argmax_argmin", lambda x: (jnp.argmax(x, 1), jnp.argmin(x, 0)), (f32(17, 23),), 0, 0),
    ("cumsum_cumprod", lambda x: (jnp.cumsum(x, 0), jnp.cumprod(1 + x * 0.01, 1)), (f32(20, 12),), 2e-5, 2e-5),
    ("logsumexp", lambda x: jax.nn.logsumexp(x, axis=-1), (f32(16, 50, scale=5),), 2e-6, 2e-6),
    ("matmul", lambda a, b: a @ b, (f32(64, 48), f32(48, 40)), 2e-5, 2e-5),
    ("matmul_f64_accum_int", lambda a, b: jnp.matmul(a, b), (rng.integers(-50, 50, (12, 9)).astype(np.int32),
                                                             rng.integers(-50, 50, (9, 7)).astype(np.int32)), 0, 0),
    ("einsum_batched", lambda a, b: jnp.einsum("bij,bjk->bik", a, b), (f32(4, 8, 16), f32(4, 16, 5)), 2e-5, 2e-5),
    ("einsum_contract", lambda a, b: jnp.einsum("abc,cd,ad->b", a, b, a[:, 0, :4]), (f32(6, 5, 4), f32(4, 4)),
     2e-5, 2e-5),
    ("softmax", lambda x: jax.nn.softmax(x, axis=-1), (f32(8, 100, scale=4),), 2e-6, 1e-7),
    ("layer_norm", layer_norm, (f32(10, 64, scale=3), f32(64), f32(64)), 2e-5, 2e-5),
    ("mlp_forward", mlp, (MLP_PARAMS, X16), 2e-5, 2e-5),
    ("mlp_grad", jax.grad(mlp_loss), (MLP_PARAMS, X16, Y4), 1e-4, 1e-5),
    ("mlp_value_and_grad_jacobian", lambda x: jax.jacrev(lambda v: jnp.tanh(v) * v.sum())(x), (f32(6),), 2e-6, 2e-6),
    ("lax_scan_rnn", rnn_scan, (f32(8, 8, scale=0.3), f32(12, 8)), 2e-5, 2e-5),
    ("while_loop_newton", newton_sqrt, (np.abs(f32(50)) + 0.1,), 2e-6, 0),
    ("while_loop_collatz", collatz_steps, (np.int32(27),), 0, 0),
    ("cond", lambda p, x: lax.cond(p > 0, lambda v: v * 2 + 1, lambda v: jnp.sin(v), x),
     (np.float32(-1.0), f32(7)), 1e-6, 1e-6),
    ("switch", lambda i, x: lax.switch(i, [jnp.sin, jnp.cos, jnp.exp], x), (np.int32(2), f32(9)), 1e-6, 1e-6),
    ("gather_indexing", lambda x, i: (x[i], x[:, i[:3]], x[i, 2:5], jnp.take_along_axis(x[:8], i[:, None] % 6, 1)),
     (f32(10, 6), rng.integers(0, 10, 8).astype(np.int32)), 0, 0),
    ("scatter_add_set", lambda x, i, v: (x.at[i].add(v), x.at[i].set(v * 2), x.at[i, 1].max(v[:, 0])),
     (f32(10, 3), np.array([1, 4, 4, 9], np.int32), f32(4, 3)), 1e-6, 1e-6),
    ("dynamic_slice_update", lambda x, s: lax.dynamic_update_slice(x, lax.dynamic_slice(x, (s, 0), (2, 4)) * 10,
                                                                   (0, s)),
     (f32(6, 8), np.int32(3)), 0, 0),
    ("random_threefry", lambda k: (jax.random.normal(k, (5, 7)), jax.random.uniform(jax.random.fold_in(k, 3), (11,)),
                                   jax.random.randint(k, (6,), 0, 100)),
     (np.asarray(jax.random.PRNGKey(1234)),), 1e-6, 1e-6),
    ("random_split_bits", lambda k: jax.random.bits(jax.random.split(k, 3)[2], (4, 4)),
     (np.asarray(jax.random.PRNGKey(7)),), 0, 0),
    ("convolution", conv, (f32(2, 9, 9, 3), f32(3, 3, 3, 5)), 2e-5, 2e-5),
    ("conv_grad", jax.grad(lambda x, k: (conv(x, k) ** 2).sum(), argnums=1), (f32(1, 6, 6, 2), f32(3, 3, 2, 3)),
     1e-4, 1e-5),
    ("sort_topk", lambda x: (jnp.sort(x, 1), jnp.argsort(x[0]), lax.top_k(x, 3)[0]), (f32(5, 20),), 0, 0),
    ("reshape_transpose_concat", lambda x: jnp.concatenate([x.T.reshape(4, -1), jnp.flip(x, 0).reshape(4, -1)], 1),
     (f32(6, 10),), 0, 0),
    ("vmap_dot", jax.vmap(lambda a, b: jnp.dot(a, b) / (1 + jnp.linalg.norm(a))), (f32(9, 5), f32(9, 5)), 2e-6, 2e-6),
    ("linalg_solve", lambda a, b: jnp.linalg.solve(a @ a.T + 4 * jnp.eye(5), b), (f32(5, 5), f32(5, 2)), 1e-4, 1e-5),
    ("bfloat16_matmul", lambda a, b: (a.astype(jnp.bfloat16) @ b.astype(jnp.bfloat16)).astype(jnp.float32),
     (f32(16, 32), f32(32, 8)), 1e-2, 1e-2),
]


@pytest.mark.parametrize("name,fn,args,rtol,atol", CASES, ids=[c[0] for c in CASES])
def test_matches_jax(client, name, fn, args, rtol, atol):
    want = jax.jit(fn)(*args)
    got = lj.jit(fn)(*args)
    want_leaves, want_tree = jax.tree_util.tree_flatten(want)
    got_leaves, got_tree = jax.tree_util.tree_flatten(got)
    assert got_tree == want_tree
    for g, w in zip(got_leaves, want_leaves):
        assert isinstance(g, loom.Array)
        assert g.shape == w.shape and g.dtype == w.dtype, (g, w)
        np.testing.assert_allclose(np.asarray(g, dtype=np.float64) if g.dtype == jnp.bfloat16 else g.numpy(),
                                   np.asarray(w, dtype=np.float64) if w.dtype == jnp.bfloat16 else np.asarray(w),
                                   rtol=rtol, atol=atol, err_msg=name)


def test_enough_functions():
    assert len(CASES) >= 25


def test_jit_reuses_compilation_and_chains(client):
    f = lj.jit(lambda x, s: x * s + 1)
    x = np.arange(5, dtype=np.float32)
    y = f(x, 2.0)
    y = f(y, 3.0)  # the output passes back without a copy
    assert len(f._cache) == 1
    np.testing.assert_allclose(y.numpy(), (x * 2 + 1) * 3 + 1)
    g = lj.jit(lambda x, n: x * n, static_argnums=1)
    np.testing.assert_allclose(g(x, 4).numpy(), x * 4)
    np.testing.assert_allclose(g(x, 5).numpy(), x * 5)
    assert len(g._cache) == 2
    h = lj.jit(lambda x: x + 1, device=5)
    assert h(x).sharding.devices == (5,)


def test_pmap_psum(client):
    n = client.device_count()
    f = lj.pmap(lambda v: lax.psum(1, "devices"), axis_name="devices")
    np.testing.assert_array_equal(f(jnp.arange(n)).numpy(), np.full(n, n))
    g = lj.pmap(lambda x, s: (lax.psum(x * s, "i"), lax.all_gather(x, "i"), lax.pmean(x, "i")), axis_name="i",
                in_axes=(0, None))
    x = f32(n, 3)
    s, gathered, mean = g(x, np.float32(2))
    want = jax.pmap(lambda x, s: (lax.psum(x * s, "i"), lax.all_gather(x, "i"), lax.pmean(x, "i")), axis_name="i",
                    in_axes=(0, None))(x, np.float32(2))
    np.testing.assert_allclose(s.numpy(), want[0], rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(gathered.numpy(), want[1])
    np.testing.assert_allclose(mean.numpy(), want[2], rtol=1e-6, atol=1e-6)
    four = lj.pmap(lambda v: v * lax.axis_index("i"), axis_name="i")(np.ones((4, 2), np.float32))
    np.testing.assert_array_equal(four.numpy(), np.arange(4)[:, None] * np.ones((4, 2)))
    other = lj.pmap(lambda v: lax.psum(v, "i"), axis_name="i", devices=[7, 2, 5])(np.arange(3.0, dtype=np.float32))
    np.testing.assert_array_equal(other.numpy(), [3, 3, 3])
    assert other.sharding.devices == (7, 2, 5)


@pytest.fixture(scope="module")
def mesh(client):
    # Rows are the workers (devices 0-3 on one, 4-7 on the other), so "y" collectives stay
    # inside a worker and "x" ones cross between workers.
    return lj.Mesh(np.arange(8).reshape(2, 4), ("x", "y"))


def test_shard_map_collectives_2x4(client, mesh):
    def body(a):
        g = lax.all_gather(a, "y", tiled=True)
        s = lax.psum_scatter(a, "x", scatter_dimension=1, tiled=True)
        p = lax.ppermute(a, "y", perm=[(i, (i + 1) % 4) for i in range(4)])
        t = lax.all_to_all(a, "y", 1, 1, tiled=True)
        q = lax.ppermute(a, "x", perm=[(0, 1), (1, 0)])
        r = lax.psum(a, ("x", "y"))
        return g, s, p, t, q, r

    specs = dict(mesh=mesh, in_specs=P("x", "y"),
                 out_specs=(P("x", None), P("x", "y"), P("x", "y"), P("x", "y"), P("x", "y"), P()), check_vma=False)
    x = f32(4, 16)
    got = lj.shard_map(body, **specs)(x)
    want = jax.jit(jax.shard_map(body, **specs))(x)
    assert len(got) == len(want) == 6, (len(got), len(want))
    for name, g, w in zip(["all_gather", "psum_scatter", "ppermute", "all_to_all", "ppermute_x", "psum_xy"], got,
                          want):
        np.testing.assert_allclose(g.numpy(), np.asarray(w), rtol=1e-6, atol=1e-6, err_msg=name)
    # Inputs placed with a NamedSharding pass without a copy; outputs carry the mesh layout.
    xs = lj.put(x, lj.NamedSharding(mesh, P("x", "y")))
    assert xs.sharding.mesh_shape == (2, 4)
    again = lj.shard_map(body, **specs)(xs)
    np.testing.assert_allclose(again[0].numpy(), np.asarray(want[0]), rtol=1e-6, atol=1e-6)


def test_shard_map_data_parallel_grad(client, mesh):
    flat = lj.Mesh(np.arange(8), ("data",))
    params = mlp_params([16, 8, 4])
    x, y = f32(64, 16), f32(64, 4)

    def step(p, x, y):
        loss, g = jax.value_and_grad(lambda q: lax.pmean(mlp_loss(q, x, y), "data"))(p)
        return loss, g

    got_loss, got_g = lj.shard_map(step, mesh=flat, in_specs=(P(), P("data"), P("data")), out_specs=(P(), P()))(
        params, x, y)
    want_loss, want_g = jax.value_and_grad(mlp_loss)(params, x, y)
    np.testing.assert_allclose(float(got_loss), float(want_loss), rtol=1e-5)
    got_leaves, got_tree = jax.tree_util.tree_flatten(got_g)
    want_leaves, want_tree = jax.tree_util.tree_flatten(want_g)
    assert got_tree == want_tree, (got_tree, want_tree)
    for g, w in zip(got_leaves, want_leaves):
        np.testing.assert_allclose(g.numpy(), np.asarray(w), rtol=1e-4, atol=1e-6)


def test_unsupported_op_is_a_clear_error(client):
    """A host callback (a Python function called from the program) is a custom call Loom's
    workers cannot run: the error names it."""
    cb = lambda a: jax.pure_callback(np.sin, jax.ShapeDtypeStruct(a.shape, a.dtype), a)  # noqa: E731
    with pytest.raises(loom.UnsupportedError, match="xla_ffi_python_cpu_callback"):
        lj.jit(cb)(f32(4, 4))


def test_lapack_linalg_on_the_cluster(client):
    """svd and eigh (LAPACK custom calls, src/exec/lapack.c) through loom.jax on the cluster."""
    a = f32(6, 4)
    s = lj.jit(lambda m: jnp.linalg.svd(m, compute_uv=False))(a)
    np.testing.assert_allclose(s.numpy(), np.asarray(jnp.linalg.svd(a, compute_uv=False)), rtol=1e-4)
    h = a.T @ a
    w = lj.jit(jnp.linalg.eigvalsh)(h)
    np.testing.assert_allclose(w.numpy(), np.asarray(jnp.linalg.eigvalsh(h)), rtol=1e-4, atol=1e-4)


def test_wrong_shaped_input_is_a_clear_error(client):
    f = lj.jit(lambda a, b: a @ b)
    with pytest.raises(TypeError, match="dot_general"):  # JAX refuses it while lowering
        f(f32(3, 4), f32(5, 2))
    exe = f.executable(f32(3, 4), f32(4, 2))
    with pytest.raises(loom.ShapeMismatchError, match=r"\(4, 3\)"):
        exe(f32(4, 3), f32(4, 2))
    y, fut = exe.launch(client.put(f32(4, 3)), client.put(f32(4, 2)))
    with pytest.raises(loom.ShapeMismatchError, match="input 0"):
        fut.wait(timeout=30)


@pytest.mark.parametrize("order", ["identity", "permuted"])
def test_jit_with_named_shardings_is_partitioned(client, order):
    # no shard_map: Loom's partitioner splits the global program (docs/partitioner.md); on a mesh
    # whose device order is not the identity, too
    ids = np.arange(8) if order == "identity" else np.array([6, 4, 5, 7, 2, 0, 3, 1])
    mesh = lj.Mesh(ids.reshape(2, 4), ("x", "y"))
    f = lj.jit(lambda a, b: jnp.tanh(a @ b) * 2, in_shardings=(lj.NamedSharding(mesh, P("x", "y")),
                                                               lj.NamedSharding(mesh, P("y", None))),
               out_shardings=lj.NamedSharding(mesh, P("x", None)))
    a, b = f32(4, 8), f32(8, 6)
    y = f(a, b)
    np.testing.assert_allclose(y.numpy(), np.tanh(a @ b) * 2, rtol=1e-5, atol=1e-5)
    g = lj.jit(lambda a: (a * 3).sum(axis=0), in_shardings=lj.NamedSharding(mesh, P("x", "y")))
    np.testing.assert_allclose(g(a).numpy(), (a * 3).sum(axis=0), rtol=1e-5, atol=1e-5)


def test_plain_jit_over_sharded_arrays_is_partitioned(client, mesh):
    # no in_shardings: the loom.Arrays' layouts go into the lowering, Loom partitions the program
    a, w = f32(8, 16), f32(16, 4)
    xa = lj.put(a, lj.NamedSharding(mesh, P("x", "y")))
    xw = lj.put(w, lj.NamedSharding(mesh, P("y", None)))
    f = lj.jit(lambda a, w: jax.nn.relu(a @ w).sum(axis=1))
    y = f(xa, xw)
    np.testing.assert_allclose(y.numpy(), np.maximum(a @ w, 0).sum(axis=1), rtol=1e-5, atol=1e-5)
    exe = f.executable(xa, xw)
    assert exe.form == "partitions" and len(exe.devices) == 8
    assert exe.inputs[0].sharding.dim_axes == ((0,), (1,))  # as put
    # a single-device array still runs on one device
    assert lj.jit(lambda v: v * 2)(np.ones(3, np.float32)).numpy().tolist() == [2, 2, 2]


def _ws(spec):
    return lambda v: jax.lax.with_sharding_constraint(v, lj.NamedSharding(_UNEVEN_MESH[0], spec))


_UNEVEN_MESH = []
# 10 rows over the 4 devices of "y" (or 8 of ("x", "y")), 6 columns over 4; the padding (zeros
# where a shard is cut) made non-zero (exp, + 1, -a * a) before a reduction or contraction meets it
_UNEVEN = {
    "sum": lambda a: _ws(P("y", None))(jnp.exp(a)).sum(axis=0),
    "mean": lambda a: _ws(P(("x", "y"), None))(a * 2.0 + 1.0).mean(),
    "dot_rows": lambda a: _ws(P("y", None))(jnp.exp(a)).T @ (a + 1.0),
    "dot_cols": lambda a: _ws(P(None, "y"))(a + 1.0) @ a.T,
    "softmax_rows": lambda a: jax.nn.softmax(_ws(P("y", None))(a), axis=0),
    "argmax_rows": lambda a: (jnp.argmax(_ws(P("y", None))(-a * a), axis=0), jnp.max(_ws(P("y", None))(a), axis=0)),
    "logsumexp_cols": lambda a: jax.nn.logsumexp(_ws(P("x", "y"))(a), axis=1),
}


@pytest.mark.parametrize("name", sorted(_UNEVEN))
def test_uneven_splits_inside_a_program(client, mesh, name):
    # JAX refuses uneven argument and result shardings, so the uneven splits are constraints
    # inside the program: Loom pads the shards (ceil(10 / 4) = 3 rows, the last holding 1) as
    # XLA does and masks the padding where a reduction or a contraction meets it. The same
    # function through JAX on the CPU (XLA's partitioner, 8 CPU devices) gives the reference.
    _UNEVEN_MESH[:] = [mesh]
    fn = _UNEVEN[name]
    x = np.round(f32(10, 6) * 3) / 2 + 0.25  # ties in argmax (-a * a), across shards too; no zeros
    rep = lj.NamedSharding(mesh, P())  # the ops before a constraint then run on its padded shards
    f = lj.jit(fn, in_shardings=rep)
    exe = f.executable(x)
    assert exe.form == "partitions" and len(exe.devices) == 8
    got = jax.tree.leaves(f(x))
    want = jax.tree.leaves(jax.jit(fn, in_shardings=rep)(x))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g = g.numpy()
        assert g.shape == w.shape and g.dtype == w.dtype
        if g.dtype.kind in "iu":
            np.testing.assert_array_equal(g, np.asarray(w))
        else:
            np.testing.assert_allclose(g, np.asarray(w), rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("spec", [P("x", "y"), P(("x", "y")), P(("y", "x")), P(None, "x"), P("y"), P()],
                         ids=str)
def test_named_sharding_places_shards_where_jax_does(client, spec):
    # A mesh whose device order is not the identity: the mapping must follow mesh.devices.
    mesh = lj.Mesh(np.array([[6, 4, 5, 7], [2, 0, 3, 1]]), ("x", "y"))
    ns = lj.NamedSharding(mesh, spec)
    x = np.arange(8 * 16, dtype=np.int32).reshape(8, 16)
    a = lj.put(x, ns)
    want = {d.id: tuple(s.start or 0 for s in idx) for d, idx in ns.devices_indices_map(x.shape).items()}
    got = {dev: tuple(offs) for dev, offs, dims in a.shards_info()}
    assert got == want
    for i, (dev, offs, dims) in enumerate(a.shards_info()):
        np.testing.assert_array_equal(a.shard(i), x[tuple(slice(o, o + n) for o, n in zip(offs, dims))])


def test_shard_map_on_a_permuted_mesh(client):
    mesh = lj.Mesh(np.array([[6, 4, 5, 7], [2, 0, 3, 1]]), ("x", "y"))

    def body(a):
        me = (lax.axis_index("x") * 4 + lax.axis_index("y")).astype(jnp.float32)
        return a * 100 + me, lax.ppermute(a, "x", perm=[(0, 1), (1, 0)]) + lax.psum(a, "y")

    specs = dict(mesh=mesh, in_specs=P("x", "y"), out_specs=(P("x", "y"), P("x", "y")))
    x = f32(4, 8)
    got = lj.shard_map(body, **specs)(x)
    want = jax.jit(jax.shard_map(body, **specs))(x)
    assert len(got) == len(want) == 2, (len(got), len(want))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), np.asarray(w), rtol=1e-6, atol=1e-6)
    assert [d for d, _, _ in got[0].shards_info()] == [6, 4, 5, 7, 2, 0, 3, 1]


def _tblock(p, x):
    q, k, v = x @ p["wq"], x @ p["wk"], x @ p["wv"]
    a = jax.nn.softmax(q @ jnp.swapaxes(k, -1, -2) / 4.0, axis=-1) @ v
    x = x + a @ p["wo"]
    x = (x - x.mean(-1, keepdims=True)) * lax.rsqrt(x.var(-1, keepdims=True) + 1e-5)
    return x + jax.nn.gelu(x @ p["w1"]) @ p["w2"]


def _adam_step(p, m, v, x, y, t):
    loss, g = jax.value_and_grad(lambda p: jnp.mean((_tblock(p, x) - y) ** 2))(p)
    tm = jax.tree_util.tree_map
    m = tm(lambda m, g: 0.9 * m + 0.1 * g, m, g)
    v = tm(lambda v, g: 0.999 * v + 0.001 * g * g, v, g)
    p = tm(lambda p, m, v: p - 0.01 * (m / (1 - 0.9 ** t)) / (jnp.sqrt(v / (1 - 0.999 ** t)) + 1e-8), p, m, v)
    return loss, p, m, v


def test_fsdp_tp_training_loop_matches_jax(client):
    """20 Adam steps of a small transformer block, parameters split FSDP (data) x TP (model) on a
    2x4 mesh over both workers, jitted globally and partitioned by Loom: the losses follow
    single-device JAX's."""
    d, h = 16, 32
    names = ("wq", "wk", "wv", "wo", "w1", "w2")
    shapes = ((d, d), (d, d), (d, d), (d, d), (d, h), (h, d))
    p0 = {n: f32(*s, scale=1 / np.sqrt(s[0])) for n, s in zip(names, shapes)}
    zeros = {n: np.zeros_like(a) for n, a in p0.items()}
    x, y = f32(8, 8, d), f32(8, 8, d)

    ref, (p, m, v) = [], (p0, zeros, zeros)
    jstep = jax.jit(_adam_step)
    for t in range(1, 21):
        loss, p, m, v = jstep(p, m, v, x, y, np.float32(t))
        ref.append(float(loss))

    mesh = lj.Mesh(np.arange(8).reshape(2, 4), ("data", "model"))
    col, row = lj.NamedSharding(mesh, P("data", "model")), lj.NamedSharding(mesh, P("model", "data"))
    ps = {"wq": col, "wk": col, "wv": col, "wo": row, "w1": col, "w2": row}
    batch, rep = lj.NamedSharding(mesh, P("data", None, None)), lj.NamedSharding(mesh, P())
    step = lj.jit(_adam_step, in_shardings=(ps, ps, ps, batch, batch, rep), out_shardings=(rep, ps, ps, ps))
    got, (p, m, v) = [], (p0, zeros, zeros)
    for t in range(1, 21):
        loss, p, m, v = step(p, m, v, x, y, np.float32(t))
        got.append(float(loss.numpy()))
    assert step.executable(p, m, v, x, y, np.float32(1)).form == "partitions"
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)
    assert got[-1] < got[0] * 0.6  # it trains
