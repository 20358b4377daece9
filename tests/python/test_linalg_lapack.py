"""The LAPACK custom calls JAX emits on CPU for jax.numpy.linalg / jax.scipy.linalg (gesdd,
syevd/heevd, geev, gees, gehrd, sytrd/hetrd: src/exec/lapack.c; potrf, getrf, trsm, geqrf, orgqr:
src/exec/linalg.c), run by `loom interpret` against jax.jit on the same inputs.

Where a factorization is not unique (signs and phases of singular and eigen vectors), the
programs return what is: singular values and eigenvalues, and reconstructions (U S V^H, V W V^H,
Z T Z^H, Q H Q^H) computed inside the program, so both sides must agree on those."""
import numpy as np
import pytest
from test_exec_vs_jax import interpret_vs_jax

jax = pytest.importorskip("jax")
jnp = jax.numpy
jsl = jax.scipy.linalg

jax.config.update("jax_enable_x64", True)


def mat(*shape, dtype=np.float32, seed=0):
    r = np.random.default_rng(seed)
    x = r.standard_normal(shape)
    if np.issubdtype(dtype, np.complexfloating):
        x = x + 1j * r.standard_normal(shape)
    return jnp.asarray(x.astype(dtype))


def hermitian(n, dtype, seed=0):
    a = np.asarray(mat(n, n, dtype=dtype, seed=seed))
    return jnp.asarray(a + a.conj().T)


TOL = {np.float32: 2e-4, np.float64: 1e-10, np.complex64: 2e-4, np.complex128: 1e-10}


def close(got, want, dtype):
    t = TOL[np.dtype(dtype).type]
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
        np.testing.assert_allclose(g, w, rtol=t, atol=t * max(1.0, float(np.abs(w).max(initial=0))))


def svd_parts(a, full):
    u, s, vt = jnp.linalg.svd(a, full_matrices=full)
    k = s.shape[-1]
    return s, (u[..., :, :k] * s[..., None, :]) @ vt[..., :k, :]


CASES = {
    "svd_full_f32": (lambda a: svd_parts(a, True), (mat(2, 5, 3),)),
    "svd_reduced_f64": (lambda a: svd_parts(a, False), (mat(4, 6, dtype=np.float64),)),
    "svd_c64": (lambda a: svd_parts(a, True), (mat(3, 3, dtype=np.complex64),)),
    "svd_wide_c128": (lambda a: svd_parts(a, False), (mat(2, 3, 5, dtype=np.complex128),)),
    "svdvals_norm2_cond": (lambda a: (jnp.linalg.svd(a, compute_uv=False), jnp.linalg.norm(a, ord=2), jnp.linalg.cond(a)),
                           (mat(6, 4, dtype=np.float64),)),
    "pinv_lstsq_rank": (lambda a, b: (jnp.linalg.pinv(a), jnp.linalg.lstsq(a, b)[0], jnp.linalg.matrix_rank(a)),
                        (mat(7, 4), mat(7, 2, seed=1))),
    "eigh_f32": (lambda a: (lambda w, v: (w, (v * w[..., None, :]) @ jnp.swapaxes(v, -1, -2).conj()))(*jnp.linalg.eigh(a)),
                 (hermitian(5, np.float32),)),
    "eigh_c64": (lambda a: (lambda w, v: (w, (v * w[..., None, :]) @ jnp.swapaxes(v, -1, -2).conj()))(*jnp.linalg.eigh(a)),
                 (hermitian(4, np.complex64),)),
    "eigvalsh_upper_f64": (lambda a: jnp.linalg.eigvalsh(a, UPLO="U"), (hermitian(6, np.float64),)),
    "schur_f64": (lambda a: (lambda t, z: (z @ t @ z.T, jnp.tril(t, -2)))(*jsl.schur(a)), (mat(5, 5, dtype=np.float64),)),
    "schur_c64": (lambda a: (lambda t, z: (z @ t @ z.conj().T, jnp.tril(t, -1)))(*jsl.schur(a)),
                  (mat(4, 4, dtype=np.complex64),)),
    "hessenberg_f32": (lambda a: (lambda h, q: (q @ h @ q.T, jnp.tril(h, -2)))(*jsl.hessenberg(a, calc_q=True)),
                       (mat(5, 5),)),
    "tridiagonal_f64": (lambda a: (lambda t: (t[1], jnp.abs(t[2])))(jax.lax.linalg.tridiagonal(a)),
                        (hermitian(5, np.float64),)),
    "tridiagonal_c128": (lambda a: (lambda t: (t[1], jnp.abs(t[2])))(jax.lax.linalg.tridiagonal(a)),
                         (hermitian(4, np.complex128),)),
    "qr_lu_solve_det_inv": (lambda a: (jnp.abs(jnp.linalg.qr(a)[1]), jnp.linalg.det(a), jnp.linalg.inv(a),
                                       jnp.linalg.solve(a, a[:, :2]), jsl.lu(a)[2], jnp.linalg.cholesky(a @ a.T + 5 * jnp.eye(4))),
                            (mat(4, 4, dtype=np.float64),)),
    "expm": (lambda a: jsl.expm(a * 0.3), (mat(4, 4, dtype=np.float64),)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_linalg_matches_jax(name):
    f, args = CASES[name]
    got, want = interpret_vs_jax(f, *args)
    close(got, want, args[0].dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.complex128])
def test_eig_eigenvalues_and_residuals(dtype):
    """Eigenvalues as a multiset, and A v = v w for the eigenvectors each side computed."""
    a = mat(6, 6, dtype=dtype, seed=3)

    def f(a):
        w, v = jnp.linalg.eig(a)
        return w, jnp.linalg.norm(a.astype(v.dtype) @ v - v * w[None, :], axis=0), jnp.linalg.eigvals(a)

    (gw, gres, gvals), (ww, _, _) = interpret_vs_jax(f, a)
    key = lambda w: np.lexsort((np.round(w.imag, 4), np.round(w.real, 4)))  # noqa: E731
    tol = TOL[np.dtype(dtype).type] * 10
    np.testing.assert_allclose(gw[key(gw)], ww[key(ww)], rtol=tol, atol=tol)
    np.testing.assert_allclose(gvals[key(gvals)], ww[key(ww)], rtol=tol, atol=tol)
    assert gres.max() < tol * 10, gres


def test_singular_input_reports_like_jax():
    """A rank-deficient and a non-finite input: whatever LAPACK reports (info), JAX's program turns
    into the same values (NaN where it failed)."""
    a = jnp.asarray(np.array([[1.0, 2.0], [2.0, 4.0]], np.float64))
    bad = jnp.asarray(np.array([[np.nan, 1.0], [1.0, 2.0]], np.float64))
    for x in (a, bad):
        got, want = interpret_vs_jax(lambda m: (jnp.linalg.svd(m, compute_uv=False), jnp.linalg.eigvalsh(m)), x)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-10, equal_nan=True)
