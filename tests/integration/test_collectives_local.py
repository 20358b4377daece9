"""Collectives through `loom interpret` and `interpreter.run_parallel` (processes on threads of one
process, exchanging through the data plane's shared-memory path), checked with numpy, and a JAX
shard_map program (psum, all_gather, all_to_all, ppermute, pmax, psum_scatter as JAX lowers
them) checked against JAX itself on 4 host devices. See docs/collectives.md."""
import os
import re
import subprocess

import numpy as np
import pytest

from conftest import LOOM_BIN

MLIR_TYPES = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64", np.dtype(np.float16): "f16",
              np.dtype(np.int8): "i8", np.dtype(np.int32): "i32", np.dtype(np.int64): "i64",
              np.dtype(np.uint8): "ui8", np.dtype(np.bool_): "i1", np.dtype(np.complex64): "complex<f32>"}


def ttype(shape, dtype):
    return "tensor<" + "".join(f"{d}x" for d in shape) + MLIR_TYPES[np.dtype(dtype)] + ">"


def rand(rng, shape, dtype):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(np.bool_)
    if dtype.kind in "iu":
        return rng.integers(0 if dtype.kind == "u" else -5, 6, shape).astype(dtype)
    if dtype.kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    if dtype == np.float16:
        return rng.integers(-8, 9, shape).astype(dtype)  # exact sums in f16
    return rng.standard_normal(shape).astype(dtype)


def run_parallel(tmp_path, body, R, P, inputs, out_types):
    """Runs `body` (a module fragment defining @f) on R x P processes; inputs[i] is process i's
    single argument; returns each process's results (len(out_types) per process)."""
    n = R * P
    in_types = [ttype(x.shape, x.dtype) for x in inputs]
    args = ", ".join(f"%a{i}: {t}" for i, t in enumerate(in_types))
    res_types = [t for _ in range(n) for t in out_types]
    progs = ", ".join("[" + ", ".join("@f" for _ in range(P)) + "]" for _ in range(R))
    text = (f"module {{\n{body}\n"
            f"  func.func @main({args}) -> ({', '.join(res_types)}) {{\n"
            f"    %r:{len(res_types)} = \"interpreter.run_parallel\"({', '.join(f'%a{i}' for i in range(n))}) "
            f"{{programs = [{progs}]}} : ({', '.join(in_types)}) -> ({', '.join(res_types)})\n"
            f"    return {', '.join(f'%r#{i}' for i in range(len(res_types)))} : {', '.join(res_types)}\n"
            f"  }}\n}}\n")
    prog = tmp_path / "prog.mlir"
    prog.write_text(text)
    cmd = [LOOM_BIN, "interpret", str(prog), "--output-dir", str(tmp_path / "out")]
    for i, x in enumerate(inputs):
        np.save(tmp_path / f"in{i}.npy", x)
        cmd += ["--input", str(tmp_path / f"in{i}.npy")]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, f"{r.stdout}\n{r.stderr}\n{text}"
    outs = [np.load(tmp_path / "out" / f"result_{i}.npy") for i in range(len(res_types))]
    k = len(out_types)
    return [outs[i * k:(i + 1) * k] for i in range(n)]


def body_text(op, ty):
    return (f"^bb0(%x: tensor<{ty}>, %y: tensor<{ty}>):\n"
            f"  %z = stablehlo.{op} %x, %y : tensor<{ty}>\n"
            f"  stablehlo.return %z : tensor<{ty}>\n")


NP_REDUCE = {"add": lambda xs: np.logical_or.reduce(xs) if xs[0].dtype == np.bool_ else np.sum(xs, axis=0),
             "maximum": lambda xs: np.max(xs, axis=0), "minimum": lambda xs: np.min(xs, axis=0),
             "multiply": lambda xs: np.logical_and.reduce(xs) if xs[0].dtype == np.bool_ else np.prod(xs, axis=0)}


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int32, np.int8, np.uint8, np.bool_,
                                   np.complex64])
@pytest.mark.parametrize("op", ["add", "maximum", "minimum", "multiply"])
def test_all_reduce(tmp_path, dtype, op):
    rng = np.random.default_rng(7)
    shape = (6, 5)
    xs = [rand(rng, shape, dtype) for _ in range(4)]
    ty = MLIR_TYPES[np.dtype(dtype)]
    t = ttype(shape, dtype)
    body = (f"func.func @f(%v: {t}) -> {t} {{\n"
            f"  %r = \"stablehlo.all_reduce\"(%v) ({{\n{body_text(op, ty)}}}) "
            f"{{replica_groups = dense<[[2, 0], [3, 1]]> : tensor<2x2xi64>}} : ({t}) -> {t}\n"
            f"  return %r : {t}\n}}")
    got = run_parallel(tmp_path, body, 4, 1, xs, [t])
    for members in ([2, 0], [3, 1]):
        want = NP_REDUCE[op]([xs[m] for m in members]).astype(dtype)
        for m in members:
            if np.dtype(dtype).kind in "fc":
                np.testing.assert_allclose(got[m][0], want, rtol=1e-6)
            else:
                np.testing.assert_array_equal(got[m][0], want)


def test_all_reduce_large_and_cross_replica_and_partition(tmp_path):
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal((256, 64)).astype(np.float32) for _ in range(4)]
    t = ttype((256, 64), np.float32)
    body = (f"func.func @f(%v: {t}) -> {t} {{\n"
            f"  %r = \"stablehlo.all_reduce\"(%v) ({{\n{body_text('add', 'f32')}}}) "
            f"{{replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>, "
            f"channel_handle = #stablehlo.channel_handle<handle = 1, type = 0>}} : ({t}) -> {t}\n"
            f"  return %r : {t}\n}}")
    got = run_parallel(tmp_path, body, 2, 2, xs, [t])
    want = xs[0] + xs[2] + xs[1] + xs[3]  # group order (0,0), (1,0), (0,1), (1,1)
    for i in range(4):
        np.testing.assert_allclose(got[i][0], want, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(got[i][0], got[0][0])  # bitwise the same on every member


@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.bool_, np.complex64])
@pytest.mark.parametrize("dim", [0, 1, 2])
def test_all_gather(tmp_path, dtype, dim):
    rng = np.random.default_rng(dim)
    shape = (2, 3, 2)
    xs = [rand(rng, shape, dtype) for _ in range(4)]
    rshape = list(shape)
    rshape[dim] *= 4
    t, rt = ttype(shape, dtype), ttype(rshape, dtype)
    body = (f"func.func @f(%v: {t}) -> {rt} {{\n"
            f"  %r = \"stablehlo.all_gather\"(%v) {{all_gather_dim = {dim} : i64, "
            f"replica_groups = dense<[[3, 0, 2, 1]]> : tensor<1x4xi64>}} : ({t}) -> {rt}\n"
            f"  return %r : {rt}\n}}")
    got = run_parallel(tmp_path, body, 4, 1, xs, [rt])
    want = np.concatenate([xs[3], xs[0], xs[2], xs[1]], axis=dim)
    for i in range(4):
        np.testing.assert_array_equal(got[i][0], want)


@pytest.mark.parametrize("dim", [0, 1])
def test_reduce_scatter(tmp_path, dim):
    rng = np.random.default_rng(3)
    shape = (4, 6)
    xs = [rand(rng, shape, np.int32) for _ in range(4)]
    rshape = list(shape)
    rshape[dim] //= 2
    t, rt = ttype(shape, np.int32), ttype(rshape, np.int32)
    body = (f"func.func @f(%v: {t}) -> {rt} {{\n"
            f"  %r = \"stablehlo.reduce_scatter\"(%v) ({{\n{body_text('add', 'i32')}}}) "
            f"{{scatter_dimension = {dim} : i64, replica_groups = dense<[[1, 0], [2, 3]]> : tensor<2x2xi64>}} "
            f": ({t}) -> {rt}\n"
            f"  return %r : {rt}\n}}")
    got = run_parallel(tmp_path, body, 4, 1, xs, [rt])
    for group in ([1, 0], [2, 3]):
        total = xs[group[0]] + xs[group[1]]
        parts = np.split(total, 2, axis=dim)
        for j, m in enumerate(group):
            np.testing.assert_array_equal(got[m][0], parts[j])


@pytest.mark.parametrize("split,concat", [(0, 1), (1, 0), (1, 1), (0, 0)])
def test_all_to_all_cross_partition(tmp_path, split, concat):
    rng = np.random.default_rng(11)
    shape = (4, 8)
    xs = [rand(rng, shape, np.float64) for _ in range(4)]
    rshape = list(shape)
    rshape[split] //= 4
    rshape[concat] *= 4
    t, rt = ttype(shape, np.float64), ttype(rshape, np.float64)
    body = (f"func.func @f(%v: {t}) -> {rt} {{\n"
            f"  %r = \"stablehlo.all_to_all\"(%v) {{split_dimension = {split} : i64, concat_dimension = {concat} : i64, "
            f"split_count = 4 : i64, replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>, "
            f"channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>}} : ({t}) -> {rt}\n"
            f"  return %r : {rt}\n}}")
    got = run_parallel(tmp_path, body, 1, 4, xs, [rt])
    for j in range(4):
        want = np.concatenate([np.split(xs[s], 4, axis=split)[j] for s in range(4)], axis=concat)
        np.testing.assert_array_equal(got[j][0], want)


def test_collective_permute_and_broadcast(tmp_path):
    rng = np.random.default_rng(5)
    xs = [rand(rng, (3, 2), np.float32) for _ in range(4)]
    t = ttype((3, 2), np.float32)
    body = (f"func.func @f(%v: {t}) -> ({t}, {t}) {{\n"
            f"  %p = \"stablehlo.collective_permute\"(%v) {{source_target_pairs = dense<[[0, 1], [1, 2], [2, 3]]> : "
            f"tensor<3x2xi64>}} : ({t}) -> {t}\n"
            f"  %b = \"stablehlo.collective_broadcast\"(%v) {{replica_groups = dense<[[1, 3]]> : tensor<1x2xi64>}} "
            f": ({t}) -> {t}\n"
            f"  return %p, %b : {t}, {t}\n}}")
    got = run_parallel(tmp_path, body, 4, 1, xs, [t, t])
    zero = np.zeros((3, 2), np.float32)
    for i, src in enumerate([None, 0, 1, 2]):
        np.testing.assert_array_equal(got[i][0], zero if src is None else xs[src])
    for i, src in enumerate([None, 1, None, 1]):
        np.testing.assert_array_equal(got[i][1], zero if src is None else xs[src])


def test_jax_shard_map_program(tmp_path):
    """The collectives JAX emits for a shard_map over a 2 x 2 mesh, run on 4 in-process partitions
    with the manual computation's body as each process's function, against JAX's own results."""
    os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    from jax.sharding import Mesh, PartitionSpec as Ps
    try:
        from jax import shard_map
    except ImportError:
        from jax.experimental.shard_map import shard_map
    if len(jax.devices()) < 4:
        pytest.skip("JAX was initialized before 4 host devices could be requested")
    mesh = Mesh(np.array(jax.devices()[:4]).reshape(2, 2), ("x", "y"))

    def f(a):
        return (jax.lax.psum(a, "x"), jax.lax.all_gather(a, "y", axis=1, tiled=True),
                jax.lax.all_to_all(a, "x", 0, 1, tiled=True), jax.lax.ppermute(a, "y", [(0, 1), (1, 0)]),
                jax.lax.pmax(a, ("x", "y")), jax.lax.psum_scatter(a, "y", scatter_dimension=0, tiled=True))

    sf = jax.jit(shard_map(f, mesh=mesh, in_specs=Ps("x", "y"), out_specs=(Ps("x", "y"),) * 6))
    x = np.random.default_rng(2).standard_normal((8, 8)).astype(np.float32)
    text = sf.lower(jnp.asarray(x)).as_text()
    want = [np.asarray(o) for o in sf(jnp.asarray(x))]
    m = re.search(r"manual_axes=\{[^}]*\} \((%\w+): ([^)]*)\) \{\n(.*?)\n\s*sdy\.return (.*?) : (.*?)\n", text, re.S)
    assert m, text
    arg, argty, body, rets, retty = m.groups()
    out_types = [s.strip() for s in retty.split(", ")]
    fn = (f"func.func @f({arg}: {argty}) -> ({retty}) {{\n{body}\n  return {rets} : {retty}\n}}")
    shards = [x[4 * i:4 * i + 4, 4 * j:4 * j + 4] for i in range(2) for j in range(2)]  # partition i*2+j
    got = run_parallel(tmp_path, fn, 1, 4, shards, out_types)
    for k, w in enumerate(want):
        h, wd = w.shape[0] // 2, w.shape[1] // 2
        for i in range(2):
            for j in range(2):
                np.testing.assert_array_equal(got[i * 2 + j][k], w[h * i:h * (i + 1), wd * j:wd * (j + 1)],
                                              err_msg=f"result {k}, partition {i * 2 + j}")
