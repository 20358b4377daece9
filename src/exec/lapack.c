/* The LAPACK custom calls jax.numpy.linalg / jax.scipy.linalg lower to on CPU that need a real
 * eigenvalue or SVD solver, computed by LAPACK itself (the one OpenBLAS carries):
 *
 *   @lapack_{s,d,c,z}gesdd_ffi            svd, svdvals, pinv, lstsq, norm(ord=2), matrix_rank
 *   @lapack_{s,d}syevd_ffi / {c,z}heevd   eigh, eigvalsh
 *   @lapack_{s,d,c,z}geev_ffi             eig, eigvals
 *   @lapack_{s,d,c,z}gees_ffi             scipy.linalg.schur
 *   @lapack_{s,d,c,z}gehrd_ffi            scipy.linalg.hessenberg
 *   @lapack_{s,d}sytrd_ffi / {c,z}hetrd   lax.linalg.tridiagonal
 *
 * The call contract is JAX's (operands, results, and options in the mhlo.backend_config
 * dictionary as LAPACK characters); leading dimensions are batch dimensions. JAX asks XLA for
 * column-major operands through operand_layouts; Loom's buffers are row-major, so each matrix is
 * transposed into a column-major scratch copy for LAPACK and its results transposed back, which
 * gives the values XLA's runtime gives. The simpler factorizations (potrf, getrf, trsm, geqrf,
 * orgqr) are in linalg.c. */
#include <stdlib.h>
#include <string.h>
#include "exec/ops_util.h"

/* ---- LAPACK's Fortran interface (all arguments by reference; a trailing hidden length per
 * character argument, which gfortran-built libraries expect) ---- */
typedef int lp_int;
typedef lp_int (*lp_select)(const void *, const void *);
#define CH const char *
#define I const lp_int *
#define V void *
void sgesdd_(CH, I, I, V, I, V, V, I, V, I, V, I, lp_int *, lp_int *, size_t);
void dgesdd_(CH, I, I, V, I, V, V, I, V, I, V, I, lp_int *, lp_int *, size_t);
void cgesdd_(CH, I, I, V, I, V, V, I, V, I, V, I, V, lp_int *, lp_int *, size_t);
void zgesdd_(CH, I, I, V, I, V, V, I, V, I, V, I, V, lp_int *, lp_int *, size_t);
void ssyevd_(CH, CH, I, V, I, V, V, I, lp_int *, I, lp_int *, size_t, size_t);
void dsyevd_(CH, CH, I, V, I, V, V, I, lp_int *, I, lp_int *, size_t, size_t);
void cheevd_(CH, CH, I, V, I, V, V, I, V, I, lp_int *, I, lp_int *, size_t, size_t);
void zheevd_(CH, CH, I, V, I, V, V, I, V, I, lp_int *, I, lp_int *, size_t, size_t);
void sgeev_(CH, CH, I, V, I, V, V, V, I, V, I, V, I, lp_int *, size_t, size_t);
void dgeev_(CH, CH, I, V, I, V, V, V, I, V, I, V, I, lp_int *, size_t, size_t);
void cgeev_(CH, CH, I, V, I, V, V, I, V, I, V, I, V, lp_int *, size_t, size_t);
void zgeev_(CH, CH, I, V, I, V, V, I, V, I, V, I, V, lp_int *, size_t, size_t);
void sgees_(CH, CH, lp_select, I, V, I, lp_int *, V, V, V, I, V, I, lp_int *, lp_int *, size_t, size_t);
void dgees_(CH, CH, lp_select, I, V, I, lp_int *, V, V, V, I, V, I, lp_int *, lp_int *, size_t, size_t);
void cgees_(CH, CH, lp_select, I, V, I, lp_int *, V, V, I, V, I, V, lp_int *, lp_int *, size_t, size_t);
void zgees_(CH, CH, lp_select, I, V, I, lp_int *, V, V, I, V, I, V, lp_int *, lp_int *, size_t, size_t);
void sgehrd_(I, I, I, V, I, V, V, I, lp_int *);
void dgehrd_(I, I, I, V, I, V, V, I, lp_int *);
void cgehrd_(I, I, I, V, I, V, V, I, lp_int *);
void zgehrd_(I, I, I, V, I, V, V, I, lp_int *);
void ssytrd_(CH, I, V, I, V, V, V, V, I, lp_int *, size_t);
void dsytrd_(CH, I, V, I, V, V, V, V, I, lp_int *, size_t);
void chetrd_(CH, I, V, I, V, V, V, V, I, lp_int *, size_t);
void zhetrd_(CH, I, V, I, V, V, V, V, I, lp_int *, size_t);
#undef CH
#undef I
#undef V

/* Which of LAPACK's four precisions: s, d, c, z. */
typedef enum { P_S, P_D, P_C, P_Z } prec;

static prec prec_of(lm_dtype t) {
  return t == LOOM_DTYPE_F32 ? P_S : t == LOOM_DTYPE_F64 ? P_D : t == LOOM_DTYPE_C64 ? P_C : P_Z;
}
static bool lapack_type(lm_dtype t) {
  return t == LOOM_DTYPE_F32 || t == LOOM_DTYPE_F64 || t == LOOM_DTYPE_C64 || t == LOOM_DTYPE_C128;
}
static lm_dtype real_of(lm_dtype t) {
  return t == LOOM_DTYPE_C64 ? LOOM_DTYPE_F32 : t == LOOM_DTYPE_C128 ? LOOM_DTYPE_F64 : t;
}
static lm_dtype complex_of(lm_dtype t) {
  return t == LOOM_DTYPE_F32 ? LOOM_DTYPE_C64 : t == LOOM_DTYPE_F64 ? LOOM_DTYPE_C128 : t;
}

static int64_t opt_int(const lm_op *op, const char *name, int64_t dflt) {
  const lm_attr *bc = lm_op_attr(op, "mhlo.backend_config");
  if (!bc || (bc->kind != LM_ATTR_DICT && bc->kind != LM_ATTR_STRUCT)) return dflt;
  return lm_attr_int_or(lm_attrs_get(bc->fields, bc->n, name), dflt);
}

/* ---- verification: the results JAX's lowering declares, computed from the operand ---- */

/* A type with a's batch dimensions followed by `extra` (n of them) and element type dt. */
static lm_type over_batch(const lm_type *a, lm_dtype dt, int n, const int64_t *extra) {
  lm_type t;
  int64_t dims[LM_MAX_RANK];
  int nb = a->rank - 2;
  memcpy(dims, a->dims, (size_t)nb * sizeof *dims);
  for (int i = 0; i < n; i++) dims[nb + i] = extra[i];
  lm_type_tensor(&t, dt, nb + n, dims);
  return t;
}

/* Checks operand count, a (batch of) LAPACK-typed matrices (square when asked), and each result
 * against want[nout]. */
static int v_results(const lm_op *op, const lm_func *fn, const char *what, const lm_type *want, uint32_t nout,
                     lm_err *err) {
  if (op->nin != 1 || op->nout != nout)
    return lm_op_err(err, op, LOOM_VERIFY, "%s expects 1 operand and %u results", what, nout);
  for (uint32_t i = 0; i < nout; i++)
    if (!lm_type_equal(lm_vtype(fn, op->out[i]), &want[i])) {
      char have[128], exp[128];
      return lm_op_err(err, op, LOOM_VERIFY, "%s: result %u is %s, expected %s", what, i,
                       lm_type_str(lm_vtype(fn, op->out[i]), have, sizeof have), lm_type_str(&want[i], exp, sizeof exp));
    }
  return 0;
}

static int v_matrix(const lm_op *op, const lm_func *fn, const char *what, bool square, lm_err *err) {
  if (op->nin != 1) return lm_op_err(err, op, LOOM_VERIFY, "%s expects 1 operand", what);
  LM_TRY(lm_check_tensors(op, fn, 1, op->nout, err));
  const lm_type *a = lm_vtype(fn, op->in[0]);
  if (!lapack_type(a->dtype) || a->rank < 2)
    return lm_op_err(err, op, LOOM_VERIFY, "%s: the operand must be a (batch of) f32/f64/complex64/complex128 matrices", what);
  if (square && a->dims[a->rank - 1] != a->dims[a->rank - 2])
    return lm_op_err(err, op, LOOM_VERIFY, "%s needs square matrices", what);
  if (a->dims[a->rank - 1] > (1 << 20) || a->dims[a->rank - 2] > (1 << 20))
    return lm_op_err(err, op, LOOM_UNSUPPORTED, "%s: matrices over 2^20 rows or columns", what);
  return 0;
}

static int v_gesdd(const lm_op *op, const lm_func *fn, lm_err *err) {
  LM_TRY(v_matrix(op, fn, "gesdd", false, err));
  const lm_type *a = lm_vtype(fn, op->in[0]);
  int64_t m = a->dims[a->rank - 2], n = a->dims[a->rank - 1], mn = m < n ? m : n;
  int64_t mode = opt_int(op, "mode", 'A');
  if (mode != 'A' && mode != 'S' && mode != 'N') return lm_op_err(err, op, LOOM_VERIFY, "gesdd: mode must be 'A', 'S' or 'N'");
  int64_t ucols = mode == 'S' ? mn : m, vrows = mode == 'S' ? mn : n;
  if (mode == 'N' && op->nout == 5 && lm_vtype(fn, op->out[2])->rank == a->rank) { /* unused then: full or reduced */
    ucols = lm_vtype(fn, op->out[2])->dims[a->rank - 1] == mn ? mn : m;
    vrows = lm_vtype(fn, op->out[3])->rank == a->rank && lm_vtype(fn, op->out[3])->dims[a->rank - 2] == mn ? mn : n;
  }
  lm_type want[5] = {*a, over_batch(a, real_of(a->dtype), 1, &mn), over_batch(a, a->dtype, 2, (int64_t[]){m, ucols}),
                     over_batch(a, a->dtype, 2, (int64_t[]){vrows, n}), over_batch(a, LOOM_DTYPE_S32, 0, NULL)};
  return v_results(op, fn, "gesdd", want, 5, err);
}

static int v_syevd(const lm_op *op, const lm_func *fn, lm_err *err) {
  LM_TRY(v_matrix(op, fn, "syevd/heevd", true, err));
  const lm_type *a = lm_vtype(fn, op->in[0]);
  int64_t n = a->dims[a->rank - 1], mode = opt_int(op, "mode", 'V'), uplo = opt_int(op, "uplo", 'L');
  if ((mode != 'V' && mode != 'N') || (uplo != 'L' && uplo != 'U'))
    return lm_op_err(err, op, LOOM_VERIFY, "syevd/heevd: mode must be 'V' or 'N', uplo 'L' or 'U'");
  lm_type want[3] = {*a, over_batch(a, real_of(a->dtype), 1, &n), over_batch(a, LOOM_DTYPE_S32, 0, NULL)};
  return v_results(op, fn, "syevd/heevd", want, 3, err);
}

static int v_geev(const lm_op *op, const lm_func *fn, lm_err *err) {
  LM_TRY(v_matrix(op, fn, "geev", true, err));
  const lm_type *a = lm_vtype(fn, op->in[0]);
  int64_t n = a->dims[a->rank - 1];
  int64_t l = opt_int(op, "compute_left", 'N'), r = opt_int(op, "compute_right", 'V');
  if ((l != 'N' && l != 'V') || (r != 'N' && r != 'V')) return lm_op_err(err, op, LOOM_VERIFY, "geev: compute_left/right must be 'N' or 'V'");
  lm_dtype c = complex_of(a->dtype);
  lm_type vec = over_batch(a, c, 2, (int64_t[]){n, n}), info = over_batch(a, LOOM_DTYPE_S32, 0, NULL);
  if (lm_dtype_is_complex(a->dtype)) {
    lm_type want[4] = {over_batch(a, c, 1, &n), vec, vec, info};
    return v_results(op, fn, "geev", want, 4, err);
  }
  lm_type want[5] = {over_batch(a, a->dtype, 1, &n), over_batch(a, a->dtype, 1, &n), vec, vec, info};
  return v_results(op, fn, "geev", want, 5, err);
}

static int v_gees(const lm_op *op, const lm_func *fn, lm_err *err) {
  LM_TRY(v_matrix(op, fn, "gees", true, err));
  const lm_type *a = lm_vtype(fn, op->in[0]);
  int64_t n = a->dims[a->rank - 1], mode = opt_int(op, "mode", 'V'), sort = opt_int(op, "sort", 'N');
  if (mode != 'V' && mode != 'N') return lm_op_err(err, op, LOOM_VERIFY, "gees: mode must be 'V' or 'N'");
  if (sort != 'N') return lm_op_err(err, op, LOOM_UNSUPPORTED, "gees with sorted eigenvalues (sort = '%c')", (char)sort);
  lm_type info = over_batch(a, LOOM_DTYPE_S32, 0, NULL);
  if (lm_dtype_is_complex(a->dtype)) {
    lm_type want[5] = {*a, *a, over_batch(a, a->dtype, 1, &n), info, info};
    return v_results(op, fn, "gees", want, 5, err);
  }
  lm_type want[6] = {*a, *a, over_batch(a, a->dtype, 1, &n), over_batch(a, a->dtype, 1, &n), info, info};
  return v_results(op, fn, "gees", want, 6, err);
}

static int v_gehrd(const lm_op *op, const lm_func *fn, lm_err *err) {
  LM_TRY(v_matrix(op, fn, "gehrd", true, err));
  const lm_type *a = lm_vtype(fn, op->in[0]);
  int64_t n = a->dims[a->rank - 1], nt = n > 0 ? n - 1 : 0, lo = opt_int(op, "low", 1), hi = opt_int(op, "high", n);
  if (lo < 1 || hi > (n > 0 ? n : 1) || lo > (hi > 1 ? hi : 1))
    return lm_op_err(err, op, LOOM_VERIFY, "gehrd: need 1 <= low <= high <= n (low %lld, high %lld, n %lld)", (long long)lo,
                     (long long)hi, (long long)n);
  lm_type want[3] = {*a, over_batch(a, a->dtype, 1, &nt), over_batch(a, LOOM_DTYPE_S32, 0, NULL)};
  return v_results(op, fn, "gehrd", want, 3, err);
}

static int v_sytrd(const lm_op *op, const lm_func *fn, lm_err *err) {
  LM_TRY(v_matrix(op, fn, "sytrd/hetrd", true, err));
  const lm_type *a = lm_vtype(fn, op->in[0]);
  int64_t n = a->dims[a->rank - 1], nt = n > 0 ? n - 1 : 0, uplo = opt_int(op, "uplo", 'L');
  if (uplo != 'L' && uplo != 'U') return lm_op_err(err, op, LOOM_VERIFY, "sytrd/hetrd: uplo must be 'L' or 'U'");
  lm_type want[5] = {*a, over_batch(a, real_of(a->dtype), 1, &n), over_batch(a, real_of(a->dtype), 1, &nt),
                     over_batch(a, a->dtype, 1, &nt), over_batch(a, LOOM_DTYPE_S32, 0, NULL)};
  return v_results(op, fn, "sytrd/hetrd", want, 5, err);
}

/* ---- kernels ---- */

/* Copies matrix bi of a row-major [batch..., m, n] buffer into column-major dst (leading
 * dimension m), or back. */
static void to_colmajor(void *dst, const void *src, int64_t bi, int64_t m, int64_t n, size_t es) {
  const char *s = (const char *)src + (size_t)(bi * m * n) * es;
  char *d = dst;
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) memcpy(d + (size_t)(i + j * m) * es, s + (size_t)(i * n + j) * es, es);
}
static void from_colmajor(void *dst, const void *src, int64_t bi, int64_t m, int64_t n, int64_t ld, size_t es) {
  char *d = (char *)dst + (size_t)(bi * m * n) * es;
  const char *s = src;
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) memcpy(d + (size_t)(i * n + j) * es, s + (size_t)(i + j * ld) * es, es);
}

static int64_t nbatch(const lm_type *a) {
  int64_t b = 1;
  for (int d = 0; d < a->rank - 2; d++) b *= a->dims[d];
  return b;
}

/* The optimal workspace LAPACK reported in work[0] (its real part), at least `least`. */
static lp_int ws_size(const void *work, prec p, lp_int least) {
  double v = p == P_S || p == P_C ? (double)*(const float *)work : *(const double *)work;
  lp_int w = (lp_int)(v + 0.5);
  return w > least ? w : least;
}

/* One allocation for a kernel's scratch arrays; NULL (with an error) when the host is out. */
static void *scratch(lm_kctx *k, size_t bytes) {
  void *p = calloc(1, bytes ? bytes : 1);
  if (!p) lm_errf(k->err, LOOM_NO_MEMORY, "out of host memory for LAPACK workspace (%zu bytes)", bytes);
  return p;
}

/* The work array LAPACK asked for in its workspace query (q, its first element), of *lw
 * elements of es bytes. On failure mem (the kernel's other scratch) is freed and NULL returned. */
static void *workspace(lm_kctx *k, const void *q, prec p, size_t es, lp_int *lw, void *mem) {
  *lw = ws_size(q, p, 1);
  void *w = scratch(k, (size_t)*lw * es);
  if (!w) free(mem);
  return w;
}

static void zero_outputs(lm_buffer **out, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) memset(out[i]->data, 0, lm_type_nbytes(&out[i]->type));
}

static int k_gesdd(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  const lm_type *a = &in[0]->type;
  prec p = prec_of(a->dtype);
  size_t es = lm_dtype_size(a->dtype), rs = lm_dtype_size(real_of(a->dtype));
  lp_int m = (lp_int)a->dims[a->rank - 2], n = (lp_int)a->dims[a->rank - 1], mn = m < n ? m : n, mx = m > n ? m : n;
  char jobz = (char)opt_int(k->op, "mode", 'A');
  lp_int ucols = jobz == 'S' ? mn : m, vrows = jobz == 'S' ? mn : n, ldu = m > 1 ? m : 1, ldvt = vrows > 1 ? vrows : 1;
  zero_outputs(out, 5);
  if (m == 0 || n == 0) return 0;
  size_t nrwork = p >= P_C ? (size_t)(jobz == 'N' ? 7 * mn : mn * (5 * mn + 7 > 2 * mx + 2 * mn + 1 ? 5 * mn + 7 : 2 * mx + 2 * mn + 1)) : 0;
  size_t bytes = (size_t)m * n * es + (size_t)mn * rs + (size_t)ldu * ucols * es + (size_t)ldvt * n * es + 8 * (size_t)mn * sizeof(lp_int) +
                 nrwork * rs + 2 * es;
  char *mem = scratch(k, bytes);
  if (!mem) return LOOM_NO_MEMORY;
  char *A = mem, *S = A + (size_t)m * n * es, *U = S + (size_t)mn * rs, *VT = U + (size_t)ldu * ucols * es;
  lp_int *iwork = (lp_int *)(VT + (size_t)ldvt * n * es);
  char *rwork = (char *)(iwork + 8 * mn), *q = rwork + nrwork * rs;
  lp_int info = 0, lda = m, lw = -1;
#define GESDD(W, LW)                                                                                          \
  switch (p) {                                                                                                \
    case P_S: sgesdd_(&jobz, &m, &n, A, &lda, S, U, &ldu, VT, &ldvt, W, LW, iwork, &info, 1); break;         \
    case P_D: dgesdd_(&jobz, &m, &n, A, &lda, S, U, &ldu, VT, &ldvt, W, LW, iwork, &info, 1); break;         \
    case P_C: cgesdd_(&jobz, &m, &n, A, &lda, S, U, &ldu, VT, &ldvt, W, LW, rwork, iwork, &info, 1); break;  \
    case P_Z: zgesdd_(&jobz, &m, &n, A, &lda, S, U, &ldu, VT, &ldvt, W, LW, rwork, iwork, &info, 1); break;  \
  }
  GESDD(q, &lw);
  void *work = workspace(k, q, p, es, &lw, mem);
  if (!work) return LOOM_NO_MEMORY;
  int32_t *infos = out[4]->data;
  for (int64_t bi = 0, nb = nbatch(a); bi < nb; bi++) {
    to_colmajor(A, in[0]->data, bi, m, n, es);
    GESDD(work, &lw);
    infos[bi] = info;
    from_colmajor(out[0]->data, A, bi, m, n, m, es);
    memcpy((char *)out[1]->data + (size_t)(bi * mn) * rs, S, (size_t)mn * rs);
    if (jobz != 'N') {
      from_colmajor(out[2]->data, U, bi, m, ucols, ldu, es);
      from_colmajor(out[3]->data, VT, bi, vrows, n, ldvt, es);
    }
  }
#undef GESDD
  free(work);
  free(mem);
  return 0;
}

static int k_syevd(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  const lm_type *a = &in[0]->type;
  prec p = prec_of(a->dtype);
  size_t es = lm_dtype_size(a->dtype), rs = lm_dtype_size(real_of(a->dtype));
  lp_int n = (lp_int)a->dims[a->rank - 1], lda = n > 1 ? n : 1;
  char jobz = (char)opt_int(k->op, "mode", 'V'), uplo = (char)opt_int(k->op, "uplo", 'L');
  zero_outputs(out, 3);
  if (n == 0) return 0;
  char *mem = scratch(k, (size_t)n * n * es + (size_t)n * rs + 4 * es);
  if (!mem) return LOOM_NO_MEMORY;
  char *A = mem, *W = A + (size_t)n * n * es, *q = W + (size_t)n * rs;
  lp_int info = 0, lw = -1, lrw = -1, liw = -1, qi = 0;
  char qr[16];
#define SYEVD(WK, LW, RW, LRW, IW, LIW)                                                       \
  switch (p) {                                                                                \
    case P_S: ssyevd_(&jobz, &uplo, &n, A, &lda, W, WK, LW, IW, LIW, &info, 1, 1); break;     \
    case P_D: dsyevd_(&jobz, &uplo, &n, A, &lda, W, WK, LW, IW, LIW, &info, 1, 1); break;     \
    case P_C: cheevd_(&jobz, &uplo, &n, A, &lda, W, WK, LW, RW, LRW, IW, LIW, &info, 1, 1); break; \
    case P_Z: zheevd_(&jobz, &uplo, &n, A, &lda, W, WK, LW, RW, LRW, IW, LIW, &info, 1, 1); break; \
  }
  SYEVD(q, &lw, qr, &lrw, &qi, &liw);
  lw = ws_size(q, p, 1);
  lrw = p >= P_C ? ws_size(qr, p == P_C ? P_S : P_D, 1) : 0;
  liw = qi > 1 ? qi : 1;
  char *work = scratch(k, (size_t)lw * es + (size_t)lrw * rs + (size_t)liw * sizeof(lp_int));
  if (!work) {
    free(mem);
    return LOOM_NO_MEMORY;
  }
  char *rwork = work + (size_t)lw * es;
  lp_int *iwork = (lp_int *)(rwork + (size_t)lrw * rs);
  int32_t *infos = out[2]->data;
  for (int64_t bi = 0, nb = nbatch(a); bi < nb; bi++) {
    to_colmajor(A, in[0]->data, bi, n, n, es);
    SYEVD(work, &lw, rwork, &lrw, iwork, &liw);
    infos[bi] = info;
    from_colmajor(out[0]->data, A, bi, n, n, n, es);
    memcpy((char *)out[1]->data + (size_t)(bi * n) * rs, W, (size_t)n * rs);
  }
#undef SYEVD
  free(work);
  free(mem);
  return 0;
}

/* Real geev returns eigenvectors packed in real columns (a conjugate pair j, j+1 as Re, Im); JAX's
 * contract wants them as complex vectors. src is column-major [n, n]; dst row-major complex. */
static void unpack_real_vectors(void *dst, const void *src, const void *wi, int64_t bi, lp_int n, prec p) {
  bool dbl = p == P_D;
  size_t rs = dbl ? 8 : 4;
#define RV(i, j) (dbl ? ((const double *)src)[(i) + (int64_t)(j) * n] : (double)((const float *)src)[(i) + (int64_t)(j) * n])
#define WI(j) (dbl ? ((const double *)wi)[j] : (double)((const float *)wi)[j])
  char *d = (char *)dst + (size_t)(bi * n * n) * 2 * rs;
  for (lp_int j = 0; j < n; j++) {
    bool pair = WI(j) != 0 && j + 1 < n;
    for (lp_int i = 0; i < n; i++) {
      double re = RV(i, j), im = pair ? RV(i, j + 1) : 0;
      char *e0 = d + (size_t)(i * n + j) * 2 * rs, *e1 = e0 + 2 * rs;
      if (dbl) {
        double v0[2] = {re, im}, v1[2] = {re, -im};
        memcpy(e0, v0, sizeof v0);
        if (pair) memcpy(e1, v1, sizeof v1);
      } else {
        float v0[2] = {(float)re, (float)im}, v1[2] = {(float)re, (float)-im};
        memcpy(e0, v0, sizeof v0);
        if (pair) memcpy(e1, v1, sizeof v1);
      }
    }
    if (pair) j++;
  }
#undef RV
#undef WI
}

static int k_geev(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  const lm_type *a = &in[0]->type;
  prec p = prec_of(a->dtype);
  bool cplx = p >= P_C;
  uint32_t nout = cplx ? 4 : 5;
  size_t es = lm_dtype_size(a->dtype), rs = lm_dtype_size(real_of(a->dtype));
  lp_int n = (lp_int)a->dims[a->rank - 1], lda = n > 1 ? n : 1;
  char jl = (char)opt_int(k->op, "compute_left", 'N'), jr = (char)opt_int(k->op, "compute_right", 'V');
  zero_outputs(out, nout);
  if (n == 0) return 0;
  size_t bytes = (size_t)n * n * es * 3 + (size_t)n * es * 2 + (size_t)2 * n * rs + 2 * es;
  char *mem = scratch(k, bytes);
  if (!mem) return LOOM_NO_MEMORY;
  char *A = mem, *VL = A + (size_t)n * n * es, *VR = VL + (size_t)n * n * es, *W1 = VR + (size_t)n * n * es;
  char *W2 = W1 + (size_t)n * es, *rwork = W2 + (size_t)n * es, *q = rwork + (size_t)2 * n * rs;
  lp_int info = 0, lw = -1;
#define GEEV(WK, LW)                                                                                       \
  switch (p) {                                                                                             \
    case P_S: sgeev_(&jl, &jr, &n, A, &lda, W1, W2, VL, &lda, VR, &lda, WK, LW, &info, 1, 1); break;       \
    case P_D: dgeev_(&jl, &jr, &n, A, &lda, W1, W2, VL, &lda, VR, &lda, WK, LW, &info, 1, 1); break;       \
    case P_C: cgeev_(&jl, &jr, &n, A, &lda, W1, VL, &lda, VR, &lda, WK, LW, rwork, &info, 1, 1); break;    \
    case P_Z: zgeev_(&jl, &jr, &n, A, &lda, W1, VL, &lda, VR, &lda, WK, LW, rwork, &info, 1, 1); break;    \
  }
  GEEV(q, &lw);
  void *work = workspace(k, q, p, es, &lw, mem);
  if (!work) return LOOM_NO_MEMORY;
  int32_t *infos = out[nout - 1]->data;
  lm_buffer *vl = out[nout - 3], *vr = out[nout - 2];
  for (int64_t bi = 0, nb = nbatch(a); bi < nb; bi++) {
    to_colmajor(A, in[0]->data, bi, n, n, es);
    GEEV(work, &lw);
    infos[bi] = info;
    memcpy((char *)out[0]->data + (size_t)(bi * n) * es, W1, (size_t)n * es);
    if (cplx) {
      if (jl == 'V') from_colmajor(vl->data, VL, bi, n, n, n, es);
      if (jr == 'V') from_colmajor(vr->data, VR, bi, n, n, n, es);
    } else {
      memcpy((char *)out[1]->data + (size_t)(bi * n) * es, W2, (size_t)n * es);
      if (jl == 'V') unpack_real_vectors(vl->data, VL, W2, bi, n, p);
      if (jr == 'V') unpack_real_vectors(vr->data, VR, W2, bi, n, p);
    }
  }
#undef GEEV
  free(work);
  free(mem);
  return 0;
}

static int k_gees(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  const lm_type *a = &in[0]->type;
  prec p = prec_of(a->dtype);
  bool cplx = p >= P_C;
  uint32_t nout = cplx ? 5 : 6;
  size_t es = lm_dtype_size(a->dtype), rs = lm_dtype_size(real_of(a->dtype));
  lp_int n = (lp_int)a->dims[a->rank - 1], lda = n > 1 ? n : 1;
  char jobvs = (char)opt_int(k->op, "mode", 'V'), sort = 'N';
  zero_outputs(out, nout);
  if (n == 0) return 0;
  size_t bytes = (size_t)n * n * es * 2 + (size_t)n * es * 2 + (size_t)n * rs + (size_t)n * sizeof(lp_int) + 2 * es;
  char *mem = scratch(k, bytes);
  if (!mem) return LOOM_NO_MEMORY;
  char *A = mem, *VS = A + (size_t)n * n * es, *W1 = VS + (size_t)n * n * es, *W2 = W1 + (size_t)n * es;
  char *rwork = W2 + (size_t)n * es;
  lp_int *bwork = (lp_int *)(rwork + (size_t)n * rs);
  char *q = (char *)(bwork + n);
  lp_int info = 0, lw = -1, sdim = 0;
#define GEES(WK, LW)                                                                                                    \
  switch (p) {                                                                                                          \
    case P_S: sgees_(&jobvs, &sort, NULL, &n, A, &lda, &sdim, W1, W2, VS, &lda, WK, LW, bwork, &info, 1, 1); break;     \
    case P_D: dgees_(&jobvs, &sort, NULL, &n, A, &lda, &sdim, W1, W2, VS, &lda, WK, LW, bwork, &info, 1, 1); break;     \
    case P_C: cgees_(&jobvs, &sort, NULL, &n, A, &lda, &sdim, W1, VS, &lda, WK, LW, rwork, bwork, &info, 1, 1); break;  \
    case P_Z: zgees_(&jobvs, &sort, NULL, &n, A, &lda, &sdim, W1, VS, &lda, WK, LW, rwork, bwork, &info, 1, 1); break;  \
  }
  GEES(q, &lw);
  void *work = workspace(k, q, p, es, &lw, mem);
  if (!work) return LOOM_NO_MEMORY;
  int32_t *sdims = out[nout - 2]->data, *infos = out[nout - 1]->data;
  for (int64_t bi = 0, nb = nbatch(a); bi < nb; bi++) {
    to_colmajor(A, in[0]->data, bi, n, n, es);
    GEES(work, &lw);
    sdims[bi] = sdim;
    infos[bi] = info;
    from_colmajor(out[0]->data, A, bi, n, n, n, es);
    if (jobvs == 'V') from_colmajor(out[1]->data, VS, bi, n, n, n, es);
    memcpy((char *)out[2]->data + (size_t)(bi * n) * es, W1, (size_t)n * es);
    if (!cplx) memcpy((char *)out[3]->data + (size_t)(bi * n) * es, W2, (size_t)n * es);
  }
#undef GEES
  free(work);
  free(mem);
  return 0;
}

static int k_gehrd(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  const lm_type *a = &in[0]->type;
  prec p = prec_of(a->dtype);
  size_t es = lm_dtype_size(a->dtype);
  lp_int n = (lp_int)a->dims[a->rank - 1], lda = n > 1 ? n : 1, nt = n > 0 ? n - 1 : 0;
  lp_int lo = (lp_int)opt_int(k->op, "low", 1), hi = (lp_int)opt_int(k->op, "high", n);
  zero_outputs(out, 3);
  if (n == 0) return 0;
  char *mem = scratch(k, (size_t)n * n * es + (size_t)n * es + 2 * es);
  if (!mem) return LOOM_NO_MEMORY;
  char *A = mem, *TAU = A + (size_t)n * n * es, *q = TAU + (size_t)n * es;
  lp_int info = 0, lw = -1;
#define GEHRD(WK, LW)                                                       \
  switch (p) {                                                              \
    case P_S: sgehrd_(&n, &lo, &hi, A, &lda, TAU, WK, LW, &info); break;    \
    case P_D: dgehrd_(&n, &lo, &hi, A, &lda, TAU, WK, LW, &info); break;    \
    case P_C: cgehrd_(&n, &lo, &hi, A, &lda, TAU, WK, LW, &info); break;    \
    case P_Z: zgehrd_(&n, &lo, &hi, A, &lda, TAU, WK, LW, &info); break;    \
  }
  GEHRD(q, &lw);
  void *work = workspace(k, q, p, es, &lw, mem);
  if (!work) return LOOM_NO_MEMORY;
  int32_t *infos = out[2]->data;
  for (int64_t bi = 0, nb = nbatch(a); bi < nb; bi++) {
    to_colmajor(A, in[0]->data, bi, n, n, es);
    GEHRD(work, &lw);
    infos[bi] = info;
    from_colmajor(out[0]->data, A, bi, n, n, n, es);
    memcpy((char *)out[1]->data + (size_t)(bi * nt) * es, TAU, (size_t)nt * es);
  }
#undef GEHRD
  free(work);
  free(mem);
  return 0;
}

static int k_sytrd(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  const lm_type *a = &in[0]->type;
  prec p = prec_of(a->dtype);
  size_t es = lm_dtype_size(a->dtype), rs = lm_dtype_size(real_of(a->dtype));
  lp_int n = (lp_int)a->dims[a->rank - 1], lda = n > 1 ? n : 1, nt = n > 0 ? n - 1 : 0;
  char uplo = (char)opt_int(k->op, "uplo", 'L');
  zero_outputs(out, 5);
  if (n == 0) return 0;
  char *mem = scratch(k, (size_t)n * n * es + (size_t)n * rs * 2 + (size_t)n * es + 2 * es);
  if (!mem) return LOOM_NO_MEMORY;
  char *A = mem, *D = A + (size_t)n * n * es, *E = D + (size_t)n * rs, *TAU = E + (size_t)n * rs, *q = TAU + (size_t)n * es;
  lp_int info = 0, lw = -1;
#define SYTRD(WK, LW)                                                          \
  switch (p) {                                                                 \
    case P_S: ssytrd_(&uplo, &n, A, &lda, D, E, TAU, WK, LW, &info, 1); break; \
    case P_D: dsytrd_(&uplo, &n, A, &lda, D, E, TAU, WK, LW, &info, 1); break; \
    case P_C: chetrd_(&uplo, &n, A, &lda, D, E, TAU, WK, LW, &info, 1); break; \
    case P_Z: zhetrd_(&uplo, &n, A, &lda, D, E, TAU, WK, LW, &info, 1); break; \
  }
  SYTRD(q, &lw);
  void *work = workspace(k, q, p, es, &lw, mem);
  if (!work) return LOOM_NO_MEMORY;
  int32_t *infos = out[4]->data;
  for (int64_t bi = 0, nb = nbatch(a); bi < nb; bi++) {
    to_colmajor(A, in[0]->data, bi, n, n, es);
    SYTRD(work, &lw);
    infos[bi] = info;
    from_colmajor(out[0]->data, A, bi, n, n, n, es);
    memcpy((char *)out[1]->data + (size_t)(bi * n) * rs, D, (size_t)n * rs);
    memcpy((char *)out[2]->data + (size_t)(bi * nt) * rs, E, (size_t)nt * rs);
    memcpy((char *)out[3]->data + (size_t)(bi * nt) * es, TAU, (size_t)nt * es);
  }
#undef SYTRD
  free(work);
  free(mem);
  return 0;
}

void lm_register_lapack_kernels(void) {
  static const char *const gesdd[] = {"lapack_sgesdd_ffi", "lapack_dgesdd_ffi", "lapack_cgesdd_ffi", "lapack_zgesdd_ffi"};
  static const char *const syevd[] = {"lapack_ssyevd_ffi", "lapack_dsyevd_ffi", "lapack_cheevd_ffi", "lapack_zheevd_ffi"};
  static const char *const geev[] = {"lapack_sgeev_ffi", "lapack_dgeev_ffi", "lapack_cgeev_ffi", "lapack_zgeev_ffi"};
  static const char *const gees[] = {"lapack_sgees_ffi", "lapack_dgees_ffi", "lapack_cgees_ffi", "lapack_zgees_ffi"};
  static const char *const gehrd[] = {"lapack_sgehrd_ffi", "lapack_dgehrd_ffi", "lapack_cgehrd_ffi", "lapack_zgehrd_ffi"};
  static const char *const sytrd[] = {"lapack_ssytrd_ffi", "lapack_dsytrd_ffi", "lapack_chetrd_ffi", "lapack_zhetrd_ffi"};
  for (int i = 0; i < 4; i++) {
    lm_custom_call_register(gesdd[i], k_gesdd, v_gesdd, 0);
    lm_custom_call_register(syevd[i], k_syevd, v_syevd, 0);
    lm_custom_call_register(geev[i], k_geev, v_geev, 0);
    lm_custom_call_register(gees[i], k_gees, v_gees, 0);
    lm_custom_call_register(gehrd[i], k_gehrd, v_gehrd, 0);
    lm_custom_call_register(sytrd[i], k_sytrd, v_sytrd, 0);
  }
}
