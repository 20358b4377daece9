"""Loom's executor against XLA on JAX-lowered programs: each function is lowered with
jax.jit(f).lower(...).as_text(), run by `loom interpret --input ... --output-dir ...` on the
same inputs, and compared with jax's own results (tolerances per element type below).
Covers fused elementwise chains, reductions (argmax), dots, convolutions, control flow and
mixed precision as JAX emits them for training steps."""
import os
import tempfile

import numpy as np
import pytest
from loomtest import run_loom

jax = pytest.importorskip("jax")
jnp = jax.numpy

TOL = {np.float32: 2e-5, np.float64: 1e-12, np.float16: 2e-3, jnp.bfloat16: 2e-2}


def interpret_vs_jax(f, *args, loom_args=()):
    """Runs f lowered by JAX through `loom interpret` (with loom_args, e.g. a backend) and under
    jax.jit; returns (got, want) as lists of numpy arrays, one per output leaf."""
    lowered = jax.jit(f).lower(*args)
    text = lowered.as_text()
    flat = jax.tree_util.tree_leaves(args)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "prog.mlir")
        with open(path, "w") as fh:
            fh.write(text)
        cmd = ["interpret", path, "--output-dir", os.path.join(d, "out"), *loom_args]
        for i, a in enumerate(flat):
            p = os.path.join(d, f"in{i}.npy")
            np.save(p, np.asarray(a))
            cmd += ["--input", p]
        r = run_loom(*cmd, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        want = jax.tree_util.tree_leaves(jax.jit(f)(*args))
        got = [np.load(os.path.join(d, "out", f"result_{i}.npy"), allow_pickle=False) for i in range(len(want))]
    return got, [np.asarray(w) for w in want]


def check(f, *args, tol=None):
    got, want = interpret_vs_jax(f, *args)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
        if np.issubdtype(w.dtype, np.floating) or np.issubdtype(w.dtype, np.complexfloating) or w.dtype == jnp.bfloat16:
            t = tol or TOL.get(w.dtype.type, 2e-5)
            gf, wf = g.astype(np.float64) if w.dtype == jnp.bfloat16 else g, w.astype(np.float64) if w.dtype == jnp.bfloat16 else w
            np.testing.assert_allclose(gf, wf, rtol=t, atol=t)
        else:
            np.testing.assert_array_equal(g, w)


def rnd(*shape, dtype=np.float32, seed=0):
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape).astype(np.float32)).astype(dtype)


def test_mlp_training_step():
    def step(params, x, y):
        def loss(params):
            h = x
            for i, (w, b) in enumerate(params):
                h = h @ w + b
                if i < len(params) - 1:
                    h = jax.nn.relu(h)
            return -jnp.mean(jnp.sum(jax.nn.log_softmax(h) * y, axis=-1))
        l, g = jax.value_and_grad(loss)(params)
        return [(w - 0.01 * gw, b - 0.01 * gb) for (w, b), (gw, gb) in zip(params, g)], l
    params = [(rnd(64, 32, seed=1) * 0.1, rnd(32, seed=2) * 0.1), (rnd(32, 10, seed=3) * 0.1, rnd(10, seed=4) * 0.1)]
    x = rnd(16, 64, seed=5)
    y = jax.nn.one_hot(jnp.arange(16) % 10, 10)
    check(step, params, x, y, tol=1e-4)


def test_gelu_layernorm_softmax():
    def f(x, g, b):
        h = jax.nn.gelu(x, approximate=True) + jax.nn.gelu(x, approximate=False)
        m = jnp.mean(h, axis=-1, keepdims=True)
        v = jnp.var(h, axis=-1, keepdims=True)
        h = (h - m) * jax.lax.rsqrt(v + 1e-5) * g + b
        return jax.nn.softmax(h, axis=-1), jnp.argmax(h, axis=-1), jax.nn.sigmoid(h).sum()
    check(f, rnd(8, 33), rnd(33, seed=1), rnd(33, seed=2), tol=1e-4)


def test_attention_bf16_and_f16():
    def attn(q, k, v):
        s = jnp.einsum("bqd,bkd->bqk", q, k) / jnp.sqrt(jnp.asarray(q.shape[-1], q.dtype))
        return jnp.einsum("bqk,bkd->bqd", jax.nn.softmax(s, axis=-1), v)
    for dt in (jnp.bfloat16, jnp.float16):
        q, k, v = (rnd(2, 5, 8, seed=s, dtype=dt) for s in range(3))
        check(attn, q, k, v, tol=5e-2 if dt == jnp.bfloat16 else 5e-3)


def test_cnn_step():
    def step(w, x):
        def loss(w):
            h = jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
            h = jax.nn.relu(h)
            h = jax.lax.reduce_window(h, -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
            return jnp.sum(h ** 2)
        return jax.grad(loss)(w)
    check(step, rnd(3, 3, 4, 8, seed=1) * 0.1, rnd(2, 8, 8, 4, seed=2), tol=1e-3)


def test_control_flow():
    def f(x, n):
        def body(i, c):
            return jnp.where(c > 1.0, c * 0.5, c + jnp.sin(c)) + i.astype(c.dtype)
        y = jax.lax.fori_loop(0, n, body, x)
        z = jax.lax.cond(y.sum() > 0, lambda t: jnp.exp(-t), lambda t: jnp.tanh(t), y)
        idx = jnp.clip(n, 0, 2)
        return jax.lax.switch(idx, [lambda t: t + 1, lambda t: t * 2, lambda t: -t], z), jax.lax.cumsum(x, axis=0)
    check(f, rnd(7, 3), jnp.int32(5), tol=1e-5)


def test_integer_and_bits():
    def f(a, b):
        return (a // b, a % b, a << (b & 7), a >> (b & 7), jax.lax.population_count(a), a.astype(jnp.float32),
                jnp.maximum(a, b), jnp.sum(a * b), (a.astype(jnp.float32) / 3).astype(jnp.int8))
    a = jnp.asarray(np.random.default_rng(1).integers(-100, 100, (5, 6)), jnp.int32)
    b = jnp.asarray(np.random.default_rng(2).integers(1, 9, (5, 6)), jnp.int32)
    check(f, a, b)
