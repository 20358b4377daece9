"""JAX programs as JAX ships them: lowered, serialized by the installed jaxlib as MLIR bytecode
portable artifacts (VHLO) at three StableHLO versions (the oldest jaxlib can write, the 12-weeks-back
version the IFRT proxy client sends, and the current one), read and run by `loom interpret`, and
compared with JAX's own results. The three files of a program must also read to the same IR
(`loom dump --ir`), and `loom dump` of a bytecode file must read back to that IR as text.
The distributed forms (pmap, shard_map) run on a real cluster through the Python client."""
import os
import subprocess
import tempfile

import numpy as np
import pytest
from loomtest import LOOM_BIN, run_loom

jax = pytest.importorskip("jax")
jnp = jax.numpy
from jaxlib.mlir.dialects import stablehlo  # noqa: E402

_R = stablehlo.StablehloCompatibilityRequirement
VERSIONS = {
    "oldest": stablehlo.get_version_from_compatibility_requirement(_R.MAX),
    "12 weeks": stablehlo.get_version_from_compatibility_requirement(_R.WEEK_12),
    "current": stablehlo.get_version_from_compatibility_requirement(_R.NONE),
}
# A program that uses something newer than the oldest version (gather batching dimensions, ...)
# cannot be written for it: it is tested at the oldest of these that jaxlib can write it for.
OLDER = ["0.20.0", "1.0.0", "1.4.0", "1.8.0", "1.12.0"]
TOL = {np.dtype(np.float32): 2e-5, np.dtype(np.float64): 1e-12, np.dtype(np.float16): 2e-3,
       np.dtype(jnp.bfloat16): 2e-2, np.dtype(np.complex64): 2e-5, np.dtype(np.complex128): 1e-12}


def rnd(*shape, dtype=np.float32, seed=0):
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape).astype(np.float32)).astype(dtype)


def ints(*shape, lo=-50, hi=50, dtype=np.int32, seed=0):
    return jnp.asarray(np.random.default_rng(seed).integers(lo, hi, shape).astype(dtype))


def _conv(x, w):
    return jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))


def _scan(xs):
    def body(c, x):
        c = c * 0.9 + jnp.tanh(x)
        return c, c.sum()
    return jax.lax.scan(body, jnp.zeros(xs.shape[1:]), xs)


def _fori(x):
    return jax.lax.fori_loop(0, 5, lambda i, a: a @ a.T * 0.1 + i, x)


def _while(n):
    return jax.lax.while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1, c[1] * 2 + c[0]), (0, 1))


def _attention(q, k, v):
    s = jnp.einsum("bqd,bkd->bqk", q, k) / jnp.sqrt(q.shape[-1])
    return jnp.einsum("bqk,bkd->bqd", jax.nn.softmax(s, axis=-1), v)


def _mlp_grad(w1, w2, x, y):
    def loss(w1, w2):
        return jnp.mean((jax.nn.gelu(x @ w1) @ w2 - y) ** 2)
    return jax.grad(loss, argnums=(0, 1))(w1, w2)


PROGRAMS = {
    "dot": (lambda a, b: a @ b, (rnd(8, 16), rnd(16, 4, seed=1))),
    "batched_dot": (lambda a, b: jnp.einsum("bij,bjk->bik", a, b), (rnd(3, 4, 5), rnd(3, 5, 6, seed=1))),
    "dot_bf16": (lambda a, b: jnp.dot(a, b, preferred_element_type=jnp.float32),
                 (rnd(8, 16, dtype=jnp.bfloat16), rnd(16, 8, dtype=jnp.bfloat16, seed=1))),
    "conv2d": (_conv, (rnd(2, 8, 8, 3), rnd(3, 3, 3, 4, seed=1))),
    "conv_transpose": (lambda x, w: jax.lax.conv_transpose(x, w, (2, 2), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")),
                       (rnd(1, 4, 4, 2), rnd(3, 3, 2, 3, seed=1))),
    "max_pool": (lambda x: jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID"),
                 (rnd(2, 8, 8, 3),)),
    "avg_pool_same": (lambda x: jax.lax.reduce_window(x, 0.0, jax.lax.add, (3, 3), (1, 1), "SAME") / 9, (rnd(7, 9),)),
    "cumsum_cumprod": (lambda x: (jnp.cumsum(x, axis=0), jnp.cumprod(x * 0.1 + 1, axis=1)), (rnd(6, 5),)),
    "scan": (_scan, (rnd(7, 3, 4),)),
    "fori_loop": (_fori, (rnd(4, 4),)),
    "while_loop": (_while, (jnp.int32(6),)),
    "cond": (lambda p, x: jax.lax.cond(p > 0, lambda v: v * 2, lambda v: -v, x), (jnp.float32(1.5), rnd(5))),
    "switch": (lambda i, x: jax.lax.switch(i, [jnp.sin, jnp.cos, jnp.tanh], x), (jnp.int32(1), rnd(5))),
    "sort_argsort": (lambda x: (jnp.sort(x, axis=-1), jnp.argsort(x, axis=0)), (rnd(5, 7),)),
    "top_k": (lambda x: jax.lax.top_k(x, 3), (rnd(4, 10),)),
    "gather": (lambda x, i: x[i], (rnd(10, 4), jnp.array([3, 1, 7, 7, 0], dtype=jnp.int32))),
    "take_along_axis": (lambda x, i: jnp.take_along_axis(x, i, axis=1),
                        (rnd(4, 6), ints(4, 3, lo=0, hi=6))),
    "scatter_add": (lambda x, i, u: x.at[i].add(u), (rnd(8, 3), jnp.array([1, 5, 1], dtype=jnp.int32), rnd(3, 3, seed=2))),
    "scatter_set": (lambda x, u: x.at[::2, 1].set(u), (rnd(6, 4), rnd(3, seed=1))),
    "dynamic_slice_update": (lambda x, i: jax.lax.dynamic_update_slice(x, jax.lax.dynamic_slice(x, (i, 0), (2, 3)) * 2, (0, i)),
                             (rnd(6, 6), jnp.int32(2))),
    "shape_ops": (lambda x: (jnp.transpose(x, (2, 0, 1)).reshape(4, -1), jnp.concatenate([x, x[::-1]], axis=1),
                             jnp.pad(x, ((1, 0), (0, 2), (1, 1))), jnp.flip(x, 2), x[:, 1:3, ::2]), (rnd(2, 3, 4),)),
    "iota_broadcast_onehot": (lambda l: jax.nn.one_hot(l, 5) + jnp.arange(5.0)[None], (ints(6, lo=0, hi=5),)),
    "reductions": (lambda x: (x.sum(0), x.max(1), x.min(), jnp.argmax(x, 1), jnp.argmin(x, 0), jnp.prod(x[:2], 1)),
                   (rnd(5, 6),)),
    "softmax_layernorm": (lambda x, g: jax.nn.softmax(x) + (x - x.mean(-1, keepdims=True)) * jax.lax.rsqrt(x.var(-1, keepdims=True) + 1e-5) * g,
                          (rnd(4, 16), rnd(16, seed=1))),
    "transcendental": (lambda x: (jnp.exp(x), jnp.log1p(jnp.abs(x)), jnp.expm1(x), jnp.tanh(x), jax.nn.sigmoid(x),
                                  jnp.sin(x), jnp.cos(x), jnp.tan(x * 0.3), jnp.sqrt(jnp.abs(x)), jnp.cbrt(x),
                                  jax.lax.erf(x), jnp.arctan2(x, x + 2)), (rnd(33),)),
    "f16_arith": (lambda a, b: (a * b + a / (jnp.abs(b) + 1), jnp.maximum(a, b)),
                  (rnd(16, dtype=jnp.float16), rnd(16, dtype=jnp.float16, seed=1))),
    "complex": (lambda a, b: (jnp.abs(a * b), jnp.conj(a) + b, jnp.real(a) * jnp.imag(b), jnp.angle(a)),
                (rnd(6) + 1j * rnd(6, seed=1), rnd(6, seed=2) - 0.5j * rnd(6, seed=3))),
    "fft": (lambda x: (jnp.fft.fft(x), jnp.fft.rfft(jnp.real(x)), jnp.fft.ifft(x)), (rnd(8) + 1j * rnd(8, seed=1),)),
    "int32_ops": (lambda a, b: (a + b, a * b, a // (jnp.abs(b) + 1), a % (jnp.abs(b) + 1), a & b, a | b, a ^ b,
                                a << 2, a >> 1, jnp.sign(a), jnp.clip(a, -10, 10), a.max()), (ints(12), ints(12, seed=1))),
    "int8_uint8": (lambda a, b: ((a + a).astype(jnp.int8), b * 3, (b >> 2).astype(jnp.uint8), jax.lax.population_count(b)),
                   (ints(10, lo=-100, hi=100, dtype=np.int8), ints(10, lo=0, hi=255, dtype=np.uint8))),
    "bool_where": (lambda x, y: (jnp.where(x > y, x, y), jnp.logical_and(x > 0, y < 0), (x > 0).sum(), jnp.isfinite(x / y)),
                   (rnd(10), rnd(10, seed=1))),
    "random_normal": (lambda k: jax.random.normal(jax.random.wrap_key_data(k), (5, 3)), (jnp.array([0, 42], dtype=jnp.uint32),)),
    "attention": (_attention, (rnd(2, 5, 8), rnd(2, 6, 8, seed=1), rnd(2, 6, 8, seed=2))),
    "mlp_grad": (_mlp_grad, (rnd(8, 16) * 0.3, rnd(16, 4, seed=1) * 0.3, rnd(5, 8, seed=2), rnd(5, 4, seed=3))),
    "reduce_precision_clamp": (lambda x: (jax.lax.reduce_precision(x, 5, 10), jax.lax.clamp(-0.5, x, 0.5),
                                          jax.lax.select_n(x > 0, x, -x)), (rnd(12),)),
    "rng_bit_generator": (lambda k: jax.lax.rng_bit_generator(k, (4, 3), dtype=jnp.uint32),
                          (jnp.array([1, 2, 3, 4], dtype=jnp.uint32),)),
    "convert_round": (lambda x: (x.astype(jnp.int32), jnp.round(x), jnp.floor(x), jnp.ceil(x), x.astype(jnp.bfloat16),
                                 jax.lax.bitcast_convert_type(x, jnp.int32)), (rnd(11) * 4,)),
}


def _exported_text(f, args):
    """The module of f as jax.export prepares it for shipping (chlo ops expanded into StableHLO,
    the form JAX serializes), as text."""
    return jax.export.export(jax.jit(f))(*args).mlir_module()


def _serialize(text, version, path):
    """Writes the module as jaxlib serializes it for `version`; False when jaxlib cannot write it
    for that version (it uses something newer)."""
    try:
        data = stablehlo.serialize_portable_artifact_str(text, version)
    except ValueError:
        return False
    with open(path, "wb") as fh:
        fh.write(data)
    return True


def _run(path, args, d):
    out = os.path.join(d, "out-" + os.path.basename(path))
    cmd = ["interpret", path, "--output-dir", out]
    for i, a in enumerate(args):
        p = os.path.join(d, f"in{i}.npy")
        np.save(p, np.asarray(a))
        cmd += ["--input", p]
    r = run_loom(*cmd, timeout=120)
    assert r.returncode == 0, f"{os.path.basename(path)}: {r.stdout}{r.stderr}"
    return out


def _compare(got, want, what):
    assert got.shape == want.shape and got.dtype == want.dtype, (what, got.shape, got.dtype, want.shape, want.dtype)
    if want.dtype.kind in "fc" or want.dtype == jnp.bfloat16:
        t = TOL.get(want.dtype, 2e-5)
        g, w = (got.astype(np.float64), want.astype(np.float64)) if want.dtype == jnp.bfloat16 else (got, want)
        np.testing.assert_allclose(g, w, rtol=t, atol=t, err_msg=what)
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)


def test_enough_programs():
    assert len(PROGRAMS) >= 30


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_program_at_three_versions(name):
    f, args = PROGRAMS[name]
    text = _exported_text(f, args)
    want = [np.asarray(w) for w in jax.tree_util.tree_leaves(jax.jit(f)(*args))]
    flat = jax.tree_util.tree_leaves(args)
    irs = {}
    with tempfile.TemporaryDirectory() as d:
        for label, version in VERSIONS.items():
            path = os.path.join(d, f"{name}.{version}.mlirbc")
            written = _serialize(text, version, path)
            for older in OLDER if label == "oldest" else []:
                if written:
                    break
                version = older
                path = os.path.join(d, f"{name}.{version}.mlirbc")
                written = _serialize(text, version, path)
            assert written, f"jaxlib could not serialize {name} for StableHLO {version} ({label})"
            with open(path, "rb") as fh:
                assert fh.read(4) == b"ML\xefR"
            out = _run(path, flat, d)
            got = [np.load(os.path.join(out, f"result_{i}.npy"), allow_pickle=False) for i in range(len(want))]
            assert not os.path.exists(os.path.join(out, f"result_{len(want)}.npy"))
            for i, (g, w) in enumerate(zip(got, want)):
                _compare(g, w, f"{name} at StableHLO {version} ({label}), result {i}")
            irs[version] = run_loom("dump", "--ir", path, check=True).stdout.split("\n", 1)[1]
            # the text loom dump prints reads back to the same IR
            txt = os.path.join(d, f"{name}.{version}.txt.mlir")
            run_loom("dump", path, "-o", txt, check=True)
            assert run_loom("dump", "--ir", txt, check=True).stdout.split("\n", 1)[1] == irs[version]
    first = next(iter(irs.values()))
    for version, ir in irs.items():
        assert ir == first, f"{name}: the IR read from StableHLO {version} differs from {next(iter(irs))}"


def test_export_serialized_runs():
    """jax.export's own serialized artifact (a flatbuffer holding the bytecode module): the module
    bytes inside it are what Loom reads."""
    from jax import export
    f = lambda x: jnp.sin(x) * 2 + x.sum()  # noqa: E731
    x = rnd(6)
    exp = export.export(jax.jit(f))(x)
    bc = exp.mlir_module_serialized
    assert bc[:4] == b"ML\xefR"
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "exported.bin")
        with open(path, "wb") as fh:
            fh.write(bc)
        out = _run(path, [x], d)
        _compare(np.load(os.path.join(out, "result_0.npy")), np.asarray(jax.jit(f)(x)), "jax.export")


def _mixed(text, version):
    """Bytecode as JAX writes modules that hold sdy ops (shard_map, pmap): VHLO mixed with the sdy
    dialect ("mixed serialization", what jax.export and the IFRT proxy client send)."""
    from jax._src.lib import _jax
    return _jax.mlir.serialize_portable_artifact(text, version, True)


def test_distributed_forms_through_client(client):
    """shard_map and pmap programs as bytecode at the three versions, compiled and launched on the
    cluster's 8 devices by the Python client (the bytes JAX's proxy client would send)."""
    from jax.sharding import Mesh, PartitionSpec as P
    try:
        from jax import shard_map
    except ImportError:
        from jax.experimental.shard_map import shard_map
    n = client.device_count()
    mesh = Mesh(np.array(jax.devices()[:n]), ("d",))
    sm = jax.jit(shard_map(lambda x: jax.lax.psum(x * x, "d"), mesh=mesh, in_specs=P("d"), out_specs=P()))
    pm = jax.pmap(lambda v: jax.lax.psum(v, "i") * v, axis_name="i")
    x = jnp.arange(n * 2, dtype=jnp.float32)
    xp = jnp.arange(n * 3, dtype=jnp.float32).reshape(n, 3)
    for f, arg in ((sm, x), (pm, xp)):
        text = f.lower(arg).as_text()
        want = np.asarray(f(arg))
        for version in VERSIONS.values():
            data = _mixed(text, version)
            assert data[:4] == b"ML\xefR"
            exe = client.compile(data)
            got = exe(np.asarray(arg))
            got = got[0] if isinstance(got, (list, tuple)) else got
            np.testing.assert_allclose(np.asarray(got).reshape(want.shape), want, rtol=1e-6)


PROXY_CAPTURES = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "shared",
                                               "ifrt-proxy", "capture"))


def _proxy_programs():
    if not os.path.isdir(PROXY_CAPTURES):
        return []
    out = []
    for session in sorted(os.listdir(PROXY_CAPTURES)):
        d = os.path.join(PROXY_CAPTURES, session, "programs")
        if os.path.isdir(d):
            out += [os.path.join(d, f) for f in sorted(os.listdir(d)) if f.endswith(".program.bin")
                    and os.path.exists(os.path.join(d, f.replace(".program.bin", ".mlir")))]
    return out


@pytest.mark.skipif(not _proxy_programs(), reason=f"{PROXY_CAPTURES} is absent (captured IFRT proxy sessions live outside the project)")
def test_proxy_client_programs_read_as_their_text():
    """The programs jaxlib's IFRT proxy client sent in the captured sessions (bytecode exactly as
    on the wire, StableHLO 1.13.7, VHLO mixed with sdy) read to the IR of their text form."""
    progs = _proxy_programs()
    for path in progs:
        with open(path, "rb") as f:
            assert f.read(4) == b"ML\xefR", path
        ir_bc = run_loom("dump", "--ir", path, check=True).stdout.split("\n", 1)[1]
        ir_txt = run_loom("dump", "--ir", path.replace(".program.bin", ".mlir"), check=True).stdout.split("\n", 1)[1]
        assert ir_bc == ir_txt, path
    assert len(progs) >= 5
