"""Devices through a PJRT plugin (src/pjrt/): XLA:CPU from PyPI's xla-cpu-pjrt, loaded by
`loom interpret --backend pjrt`. The same JAX programs run on the plugin and on Loom's own
executor, both compared with jax.jit; and the errors a user meets: no plugin, a library that is
not a plugin, a program the plugin refuses, an entry function other than @main."""
import os
import subprocess
import tempfile

import numpy as np
import pytest
from loomtest import run_loom
from test_exec_vs_jax import interpret_vs_jax

jax = pytest.importorskip("jax")
jnp = jax.numpy


def _plugin():
    try:
        import xla_plugins  # noqa: F401
    except ImportError:
        return None
    for d in xla_plugins.__path__:
        p = os.path.join(d, "xla_cpu_pjrt", "xla_cpu_pjrt.so")
        if os.path.exists(p):
            return p
    return None


PLUGIN = _plugin()
pytestmark = pytest.mark.skipif(PLUGIN is None, reason="xla-cpu-pjrt is not installed (pip install xla-cpu-pjrt)")
PJRT = ("--backend", "pjrt", "--pjrt-plugin", PLUGIN or "")


def rnd(*shape, dtype=np.float32, seed=0):
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape).astype(dtype))


def _mlp_step(w1, w2, x, y):
    def loss(w1, w2):
        return jnp.mean((jnp.tanh(x @ w1) @ w2 - y) ** 2)
    l, (g1, g2) = jax.value_and_grad(loss, argnums=(0, 1))(w1, w2)
    return l, w1 - 0.1 * g1, w2 - 0.1 * g2


PROGRAMS = {
    "elementwise": (lambda a, b: jnp.exp(a) * b + jnp.sin(a - b), (rnd(64, 32), rnd(64, 32, seed=1))),
    "dot_reduce": (lambda a, b: ((a @ b).sum(0), jnp.max(a, axis=1)), (rnd(16, 8), rnd(8, 4, seed=1))),
    "mlp_step": (_mlp_step, (rnd(8, 16) * 0.3, rnd(16, 4, seed=1) * 0.3, rnd(5, 8, seed=2), rnd(5, 4, seed=3))),
    "conv": (lambda x, w: jax.lax.conv_general_dilated(x, w, (1, 1), "SAME"), (rnd(2, 3, 8, 8), rnd(4, 3, 3, 3, seed=1))),
    "scan_while": (lambda x: jax.lax.fori_loop(0, 5, lambda i, v: jnp.tanh(v @ x) + i, x), (rnd(6, 6) * 0.5,)),
    "sort_gather": (lambda x, i: (jnp.sort(x, axis=-1), x[i]), (rnd(5, 7), jnp.array([4, 0, 2], dtype=jnp.int32))),
    "int_bool_f64": (lambda a, b: ((a * 3) // 2, a > 1, b.astype(jnp.float64) * 2.5), (jnp.arange(12, dtype=jnp.int32),
                                                                                    rnd(3, 2))),
    "bf16_complex": (lambda a, c: (a.astype(jnp.bfloat16) * 2, c * jnp.conj(c)), (rnd(4, 4), rnd(3) + 1j * rnd(3, seed=2))),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_pjrt_matches_jax_and_loom(name):
    f, args = PROGRAMS[name]
    got, want = interpret_vs_jax(f, *args, loom_args=PJRT)
    ours, _ = interpret_vs_jax(f, *args)
    for g, o, w in zip(got, ours, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
        if np.issubdtype(w.dtype, np.inexact) or w.dtype == jnp.bfloat16:
            g64, o64, w64 = (v.astype(np.complex128 if np.iscomplexobj(v) else np.float64) for v in (g, o, w))
            np.testing.assert_allclose(g64, w64, rtol=1e-5, atol=1e-5)  # XLA through the plugin = XLA under JAX
            np.testing.assert_allclose(o64, w64, rtol=2e-2 if w.dtype == jnp.bfloat16 else 1e-4, atol=1e-4)
        else:
            np.testing.assert_array_equal(g, w)
            np.testing.assert_array_equal(o, w)


def test_bytecode_through_pjrt():
    """A portable artifact (bytecode) goes to the plugin as it is."""
    from jax._src.lib import _jax
    text = jax.jit(lambda a: a * 2 + 1).lower(jnp.ones(4, jnp.float32)).as_text()
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "p.mlirbc")
        with open(p, "wb") as f:
            f.write(_jax.mlir.serialize_portable_artifact(text, "1.13.7", True))
        x = os.path.join(d, "x.npy")
        np.save(x, np.arange(4, dtype=np.float32))
        r = run_loom("interpret", p, "--input", x, *PJRT, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "[1, 3, 5, 7]" in r.stdout


def _program(d, text):
    p = os.path.join(d, "p.mlir")
    with open(p, "w") as f:
        f.write(text)
    return p


def test_errors_name_the_plugin_and_the_call():
    text = jax.jit(lambda a: a + 1).lower(jnp.ones(4, jnp.float32)).as_text()
    with tempfile.TemporaryDirectory() as d:
        p = _program(d, text)
        x = os.path.join(d, "x.npy")
        np.save(x, np.ones(4, np.float32))
        r = run_loom("interpret", p, "--input", x, "--backend", "pjrt", "--pjrt-plugin", os.path.join(d, "none.so"))
        assert r.returncode == 2 and "cannot be loaded" in r.stderr, r.stderr
        libm = subprocess.run(["sh", "-c", "ldconfig -p | grep -m1 'libm.so.6 ' | sed 's/.*=> //'"], capture_output=True,
                              text=True).stdout.strip()
        r = run_loom("interpret", p, "--input", x, "--backend", "pjrt", "--pjrt-plugin", libm)
        assert r.returncode == 2 and "not a PJRT plugin" in r.stderr and "GetPjrtApi" in r.stderr, r.stderr
        r = run_loom("interpret", p, "--input", x, "--backend", "xla")
        assert r.returncode == 2 and "interp or pjrt" in r.stderr, r.stderr
        r = run_loom("interpret", p, "--input", x, *PJRT, "--pjrt-option", "novalue")
        assert r.returncode == 2 and "name=value" in r.stderr, r.stderr
        # a custom call XLA does not know: the plugin's compile error, named
        bad = _program(d, 'func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {\n'
                          '  %0 = stablehlo.custom_call @no_such_target(%a) : (tensor<4xf32>) -> tensor<4xf32>\n'
                          '  return %0 : tensor<4xf32>\n}\n')
        r = run_loom("interpret", bad, "--input", x, *PJRT)
        assert r.returncode != 0 or "UNSUPPORTED" in r.stdout, r.stdout + r.stderr
        out = r.stdout + r.stderr
        assert "no_such_target" in out, out
        # jaxlib registers the LAPACK handlers JAX's CPU programs call; the bare plugin has none
        # (Loom's executor runs them: test_linalg_lapack.py)
        svd = _program(d, jax.jit(lambda a: jnp.linalg.svd(a, compute_uv=False)).lower(jnp.ones((4, 4), jnp.float32)).as_text())
        np.save(x, np.eye(4, dtype=np.float32))
        r = run_loom("interpret", svd, "--input", x, *PJRT)
        assert r.returncode != 0 and "PJRT_Client_Compile" in r.stdout and "lapack_sgesdd_ffi" in r.stdout, r.stdout
        # only @main goes to the plugin
        np.save(x, np.ones(4, np.float32))
        two = _program(d, 'func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {\n  return %a : tensor<4xf32>\n}\n')
        r = run_loom("interpret", two, "--input", x, *PJRT)
        assert "runs @main only" in r.stdout + r.stderr, r.stdout + r.stderr
