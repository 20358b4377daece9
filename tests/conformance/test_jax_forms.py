"""Programs as current JAX prints them (jax.jit(f).lower(...).as_text(), also with debug_info),
lowered at test time: each parses, and its original text, the generic form and the pretty form
that jaxlib's MLIR prints give the same IR (`loom interpret --dump-ir`). One program also runs
end to end through `loom interpret --input ... --output-dir ...` against JAX's own result.
Skips when JAX is not installed."""
import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402
from loomtest import run_loom  # noqa: E402


def programs():
    """name -> jax Lowered."""
    out = {}

    def mlp_loss(params, x, y):
        h = x
        for w, b in params[:-1]:
            h = jax.nn.relu(h @ w + b)
        w, b = params[-1]
        return -jnp.mean(jnp.sum(jax.nn.log_softmax(h @ w + b) * y, axis=-1))

    def mlp_step(params, x, y):
        l, g = jax.value_and_grad(mlp_loss)(params, x, y)
        return l, jax.tree_util.tree_map(lambda p, g: p - 0.01 * g, params, g)

    params = [(jnp.ones((8, 16)), jnp.zeros(16)), (jnp.ones((16, 4)), jnp.zeros(4))]
    out["mlp_step"] = jax.jit(mlp_step).lower(params, jnp.ones((2, 8)), jnp.ones((2, 4)))

    def cnn(w, x):
        y = lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
        y = lax.reduce_window(jax.nn.relu(y), -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
        return jnp.sum(y)

    out["cnn_grad"] = jax.jit(jax.grad(cnn)).lower(jnp.ones((3, 3, 2, 4)), jnp.ones((2, 8, 8, 2)))

    def attn(q, k, v):
        p = jax.nn.softmax(jnp.einsum("bqd,bkd->bqk", q, k) / 8.0, axis=-1)
        o = jnp.einsum("bqk,bkd->bqd", p, v)
        return ((o - o.mean(-1, keepdims=True)) / jnp.sqrt(o.var(-1, keepdims=True) + 1e-5)).sum()

    x3 = jnp.ones((2, 4, 8))
    out["attention_grad"] = jax.jit(jax.value_and_grad(attn)).lower(x3, x3, x3)
    out["scan"] = jax.jit(lambda xs: lax.scan(lambda c, x: (c + x, c * x), 0.0, xs)).lower(jnp.ones(5))
    out["while"] = jax.jit(lambda n: lax.while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1, c[1] * 2.0), (0, 1.0))).lower(10)
    out["switch"] = jax.jit(lambda i, x: lax.switch(i, [lambda x: x + 1, lambda x: x * 2, jnp.sin], x)).lower(1, jnp.ones(3))
    out["sort_argmax"] = jax.jit(lambda x: (jnp.sort(x), jnp.argsort(x), jnp.argmax(x), lax.top_k(x, 2))).lower(jnp.ones(5))
    out["gather_scatter"] = jax.jit(lambda x, i: (x[i], x.at[i].add(1.0), x[1:3, ::2])).lower(jnp.ones((4, 5)), jnp.array([0, 2]))
    out["random"] = jax.jit(lambda k: (jax.random.normal(k, (3,)), jax.random.bernoulli(k, 0.5, (4,)))).lower(jax.random.PRNGKey(0))
    out["remat_grad"] = jax.jit(jax.grad(lambda x: jax.checkpoint(lambda y: jnp.sin(y) * y)(x).sum())).lower(jnp.ones(3))
    out["linalg"] = jax.jit(lambda a: (jnp.linalg.inv(a), jnp.linalg.eigh(a)[0], jnp.linalg.qr(a)[0])).lower(jnp.eye(3))
    out["approx_top_k"] = jax.jit(lambda x: lax.approx_max_k(x, 2)).lower(jnp.ones(8))  # a func ending in stablehlo.return
    out["specials"] = jax.jit(lambda x: (jnp.zeros((0, 3)), x[:0], jnp.array([2**32 - 1], jnp.uint32),
                                         jnp.array([-0.0, np.inf, -np.inf, np.nan]), jnp.array([1 + 2j], jnp.complex64),
                                         x.astype(jnp.bfloat16) * 2, x.astype(jnp.float16))).lower(jnp.ones(4))
    out["pmap_psum"] = jax.pmap(lambda x: (lax.psum(x, "i"), lax.all_gather(x, "i")), axis_name="i").lower(jnp.ones((8, 3)))
    try:
        from jax import shard_map
    except ImportError:  # older JAX
        from jax.experimental.shard_map import shard_map
    from jax.sharding import NamedSharding, PartitionSpec as P
    mesh = jax.make_mesh((4, 2), ("x", "y"))
    # psum over "x" makes the result invariant along "x", so the replication check passes as is
    f = shard_map(lambda b: lax.psum(b, "x"), mesh=mesh, in_specs=P("x", "y"), out_specs=P(None, "y"))
    arg = jax.ShapeDtypeStruct((8, 4), jnp.float32, sharding=NamedSharding(mesh, P("x", "y")))
    out["shard_map"] = jax.jit(f).lower(arg)
    return out


def dump(path):
    p = run_loom("interpret", "--dump-ir", path)
    assert p.returncode == 0, p.stdout + p.stderr
    return "\n".join(l for l in p.stdout.splitlines() if not l.startswith("// ") and not l.startswith("PASS")
                     and " case" not in l)


@pytest.fixture(scope="module")
def lowered():
    return programs()


def test_forms_give_same_ir(lowered, tmp_path):
    from jax._src.interpreters import mlir as jmlir
    from jax._src.lib.mlir import ir
    ctx = jmlir.make_ir_context()
    for name, low in lowered.items():
        text = low.as_text()
        m = ir.Module.parse(text, ctx)
        forms = {"orig": text, "generic": m.operation.get_asm(print_generic_op_form=True), "pretty": m.operation.get_asm(),
                 "debug": low.as_text(debug_info=True)}
        dumps = {}
        for k, t in forms.items():
            f = tmp_path / f"{name}.{k}.mlir"
            f.write_text(t)
            dumps[k] = dump(str(f))
        assert dumps["orig"] == dumps["generic"], name
        assert dumps["orig"] == dumps["pretty"], name
        assert dumps["orig"] == dumps["debug"], name


def test_run_with_npy_inputs(tmp_path):
    def f(w, b, x):
        return jnp.tanh(x @ w + b), jnp.argmax(x, axis=1)

    rng = np.random.default_rng(0)
    args = [rng.standard_normal((8, 4)).astype(np.float32), rng.standard_normal(4).astype(np.float32),
            rng.standard_normal((3, 8)).astype(np.float32)]
    prog = tmp_path / "f.mlir"
    prog.write_text(jax.jit(f).lower(*args).as_text())
    inputs = []
    for i, a in enumerate(args):
        np.save(tmp_path / f"in{i}.npy", a)
        inputs += ["--input", str(tmp_path / f"in{i}.npy")]
    out = tmp_path / "out"
    p = run_loom("interpret", str(prog), *inputs, "--output-dir", str(out))
    assert p.returncode == 0, p.stdout + p.stderr
    want = jax.jit(f)(*args)
    got0, got1 = np.load(out / "result_0.npy"), np.load(out / "result_1.npy")
    assert got0.dtype == np.float32 and got0.shape == (3, 4)
    np.testing.assert_allclose(got0, np.asarray(want[0]), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got1, np.asarray(want[1]))
    # a wrong shape is refused with a message naming both types
    np.save(tmp_path / "bad.npy", np.zeros((2, 2), np.float32))
    p = run_loom("interpret", str(prog), "--input", str(tmp_path / "bad.npy"), *inputs[2:])
    assert p.returncode != 0 and "tensor<2x2xf32>" in p.stdout and "tensor<8x4xf32>" in p.stdout
