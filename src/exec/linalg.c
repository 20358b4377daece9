/* Ops: triangular_solve and cholesky (StableHLO spec 'triangular_solve', 'cholesky'), batched
 * over the leading dimensions, for f16/bf16/f32/f64 and complex element types.
 *
 * Both compute by substitution in double (complex double) and round once, so f16/bf16/f32 results
 * are more accurate than the element type's own arithmetic. triangular_solve reads only the
 * triangle of `a` named by `lower` (and not its diagonal when unit_diagonal); transpose_a is
 * NO_TRANSPOSE, TRANSPOSE or ADJOINT (conjugate transpose). cholesky reads only the triangle
 * named by `lower` (the input is taken as Hermitian), writes zeros in the other triangle, and
 * fills the whole matrix with NaN when the input is not positive-definite (a non-positive pivot),
 * as XLA does. Also the LAPACK custom calls jax.numpy.linalg lowers to on CPU (potrf, getrf,
 * trsm, geqrf, orgqr/ungqr; see below), computed the same way. */
#include <complex.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "exec/ops_util.h"

typedef double complex zc;

static lm_dtype part_of(lm_dtype t) { return t == LOOM_DTYPE_C64 ? LOOM_DTYPE_F32 : LOOM_DTYPE_F64; }

static zc ld(const void *base, lm_dtype dt, int64_t i) {
  size_t es = lm_dtype_size(dt);
  const char *p = (const char *)base + i * (int64_t)es;
  if (lm_dtype_is_complex(dt)) return lm_load_f64(p, part_of(dt)) + I * lm_load_f64(p + es / 2, part_of(dt));
  return lm_load_f64(p, dt);
}

static void st(void *base, lm_dtype dt, int64_t i, zc v) {
  size_t es = lm_dtype_size(dt);
  char *p = (char *)base + i * (int64_t)es;
  if (lm_dtype_is_complex(dt)) {
    lm_store_f64(p, part_of(dt), creal(v));
    lm_store_f64(p + es / 2, part_of(dt), cimag(v));
  } else {
    lm_store_f64(p, dt, creal(v));
  }
}

static bool flag(const lm_op *op, const char *name) { return lm_attr_int_or(lm_op_attr(op, name), 0) != 0; }

static bool solvable_type(lm_dtype t) { return lm_dtype_is_float(t) || lm_dtype_is_complex(t); }

/* How many matrices a [batch..., m, n] tensor holds: the product of its leading dimensions. */
static int64_t batch_count(const lm_type *t) {
  int64_t batch = 1;
  for (int d = 0; d < t->rank - 2; d++) batch *= t->dims[d];
  return batch;
}

/* The matrices of a [batch..., m, n] tensor, worked on one at a time in complex double. */
typedef struct mats {
  lm_dtype dt;
  int64_t m, n;   /* rows and columns of each matrix */
  int64_t batch;  /* how many matrices */
  zc *A;          /* [m * n] one matrix, row-major */
} mats;

static int mats_init(lm_kctx *k, const lm_type *t, mats *x) {
  x->dt = t->dtype;
  x->m = t->dims[t->rank - 2];
  x->n = t->dims[t->rank - 1];
  x->batch = batch_count(t);
  x->A = malloc((size_t)(x->m * x->n > 0 ? x->m * x->n : 1) * sizeof *x->A);
  return x->A ? 0 : lm_kerr(k, LOOM_NO_MEMORY, "out of host memory");
}

/* x->A = matrix bi of data. */
static void mats_load(mats *x, const void *data, int64_t bi) {
  for (int64_t i = 0; i < x->m * x->n; i++) x->A[i] = ld(data, x->dt, bi * x->m * x->n + i);
}

/* Matrix bi of data = x->A. */
static void mats_store(const mats *x, void *data, int64_t bi) {
  for (int64_t i = 0; i < x->m * x->n; i++) st(data, x->dt, bi * x->m * x->n + i, x->A[i]);
}

/* ---- triangular_solve ---- */

static int v_triangular_solve(const lm_op *op, const lm_func *fn, lm_err *err) {
  if (op->nin != 2 || op->nout != 1) return lm_op_err(err, op, LOOM_VERIFY, "expects 2 operands and 1 result");
  for (uint32_t i = 0; i < 2; i++) LM_TRY(lm_check_tensor(op, fn, false, i, err));
  LM_TRY(lm_check_tensor(op, fn, true, 0, err));
  const lm_type *a = lm_vtype(fn, op->in[0]), *b = lm_vtype(fn, op->in[1]), *r = lm_vtype(fn, op->out[0]);
  if (!solvable_type(a->dtype)) return lm_op_err(err, op, LOOM_VERIFY, "element type %s is not a float or complex type", lm_dtype_name(a->dtype));
  if (a->dtype != b->dtype) return lm_op_err(err, op, LOOM_VERIFY, "a and b element types differ");
  if (!lm_type_equal(b, r)) return lm_op_err(err, op, LOOM_VERIFY, "result must have b's type");
  if (a->rank < 2 || a->rank != b->rank) return lm_op_err(err, op, LOOM_VERIFY, "a and b must have the same rank >= 2");
  int R = a->rank;
  if (a->dims[R - 1] != a->dims[R - 2]) return lm_op_err(err, op, LOOM_VERIFY, "a's last two dimensions must be equal");
  for (int d = 0; d < R - 2; d++)
    if (a->dims[d] != b->dims[d]) return lm_op_err(err, op, LOOM_VERIFY, "batch dimension %d differs between a and b", d);
  bool left = flag(op, "left_side");
  if (b->dims[left ? R - 2 : R - 1] != a->dims[R - 1])
    return lm_op_err(err, op, LOOM_VERIFY, "b's %s dimension must equal a's size %lld", left ? "row" : "column",
                     (long long)a->dims[R - 1]);
  const lm_attr *t = lm_op_attr(op, "transpose_a");
  const char *ts = t && t->s ? t->s : "NO_TRANSPOSE";
  if (strcmp(ts, "NO_TRANSPOSE") && strcmp(ts, "TRANSPOSE") && strcmp(ts, "ADJOINT"))
    return lm_op_err(err, op, LOOM_VERIFY, "transpose_a '%s' is not one of NO_TRANSPOSE, TRANSPOSE, ADJOINT", ts);
  return 0;
}

/* Solves op(a) x = b (left) or x op(a) = b for every matrix of the batch; tr: 0 none, 1 transpose,
 * 2 adjoint. a: [batch..., M, M]; b and out: [batch..., rows, cols]. */
static int tri_solve(lm_kctx *k, const lm_buffer *a, const lm_buffer *b, lm_buffer *out, bool left, bool lower, bool unit,
                     int tr) {
  const lm_type *at = &a->type, *bt = &b->type;
  lm_dtype dt = at->dtype;
  int R = at->rank;
  int64_t M = at->dims[R - 1], rows = bt->dims[R - 2], cols = bt->dims[R - 1], batch = batch_count(at);
  /* op(a) is lower-triangular when a is lower and not transposed, or upper and transposed */
  bool opl = tr ? !lower : lower;
  size_t na = (size_t)(M * M > 0 ? M * M : 1), nx = (size_t)(rows * cols > 0 ? rows * cols : 1);
  zc *A = malloc(na * sizeof *A), *X = malloc(nx * sizeof *X);
  if (!A || !X) { free(A); free(X); return lm_kerr(k, LOOM_NO_MEMORY, "out of host memory"); }
  for (int64_t bi = 0; bi < batch; bi++) {
    /* A = op(a) with the unused triangle zero and a unit diagonal where asked */
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < M; j++) {
        int64_t r = tr ? j : i, c = tr ? i : j; /* element of a behind A[i][j] */
        bool in_tri = lower ? r >= c : r <= c;
        zc v = 0;
        if (r == c && unit) v = 1;
        else if (in_tri) {
          v = ld(a->data, dt, bi * M * M + r * M + c);
          if (tr == 2) v = conj(v);
        }
        A[i * M + j] = v;
      }
    for (int64_t i = 0; i < rows * cols; i++) X[i] = ld(b->data, dt, bi * rows * cols + i);
    if (left) { /* A X = B, X is M x cols */
      for (int64_t s = 0; s < M; s++) {
        int64_t i = opl ? s : M - 1 - s;
        for (int64_t c = 0; c < cols; c++) {
          zc v = X[i * cols + c];
          if (opl) for (int64_t q = 0; q < i; q++) v -= A[i * M + q] * X[q * cols + c];
          else for (int64_t q = i + 1; q < M; q++) v -= A[i * M + q] * X[q * cols + c];
          X[i * cols + c] = v / A[i * M + i];
        }
      }
    } else { /* X A = B, X is rows x M: column j uses A[q][j] for q on the triangle */
      for (int64_t s = 0; s < M; s++) {
        int64_t j = opl ? M - 1 - s : s;
        for (int64_t r = 0; r < rows; r++) {
          zc v = X[r * M + j];
          if (opl) for (int64_t q = j + 1; q < M; q++) v -= X[r * M + q] * A[q * M + j];
          else for (int64_t q = 0; q < j; q++) v -= X[r * M + q] * A[q * M + j];
          X[r * M + j] = v / A[j * M + j];
        }
      }
    }
    for (int64_t i = 0; i < rows * cols; i++) st(out->data, dt, bi * rows * cols + i, X[i]);
  }
  free(A);
  free(X);
  return 0;
}

static int k_triangular_solve(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  const lm_op *op = k->op;
  const lm_attr *ta = lm_op_attr(op, "transpose_a");
  const char *ts = ta && ta->s ? ta->s : "NO_TRANSPOSE";
  int tr = !strcmp(ts, "TRANSPOSE") ? 1 : !strcmp(ts, "ADJOINT") ? 2 : 0;
  return tri_solve(k, in[0], in[1], out[0], flag(op, "left_side"), flag(op, "lower"), flag(op, "unit_diagonal"), tr);
}

/* ---- cholesky ---- */

static int v_cholesky(const lm_op *op, const lm_func *fn, lm_err *err) {
  if (op->nin != 1 || op->nout != 1) return lm_op_err(err, op, LOOM_VERIFY, "expects 1 operand and 1 result");
  LM_TRY(lm_check_tensor(op, fn, false, 0, err));
  LM_TRY(lm_check_tensor(op, fn, true, 0, err));
  const lm_type *a = lm_vtype(fn, op->in[0]);
  if (!solvable_type(a->dtype)) return lm_op_err(err, op, LOOM_VERIFY, "element type %s is not a float or complex type", lm_dtype_name(a->dtype));
  if (a->rank < 2 || a->dims[a->rank - 1] != a->dims[a->rank - 2])
    return lm_op_err(err, op, LOOM_VERIFY, "operand must be a (batch of) square matrices");
  if (!lm_type_equal(a, lm_vtype(fn, op->out[0]))) return lm_op_err(err, op, LOOM_VERIFY, "result must have the operand's type");
  return 0;
}

/* Cholesky of every matrix of a into out. Reads the `lower` triangle of each (Hermitian) matrix.
 * full: write zeros in the other triangle and NaN everywhere on failure (the op's contract);
 * else leave the other triangle as in a, and on failure the whole matrix (callers of potrf look at
 * info, as jax.numpy.linalg does). info[batch] (may be NULL) gets 0, or the
 * 1-based order of the first leading minor that is not positive-definite. */
static int chol(lm_kctx *k, const lm_buffer *a, lm_buffer *out, bool lower, bool full, int32_t *info) {
  const lm_type *at = &a->type;
  lm_dtype dt = at->dtype;
  int R = at->rank;
  int64_t N = at->dims[R - 1], batch = batch_count(at);
  zc *L = malloc((size_t)(N * N > 0 ? N * N : 1) * sizeof *L);
  if (!L) return lm_kerr(k, LOOM_NO_MEMORY, "out of host memory");
  for (int64_t bi = 0; bi < batch; bi++) {
    int64_t base = bi * N * N, bad = 0;
    /* L L^H = a, with a's lower triangle a[i][j] (j <= i) = conj(a[j][i]) read from the upper one
     * when lower is false; the result is then U = L^H */
    for (int64_t i = 0; i < N && !bad; i++)
      for (int64_t j = 0; j <= i; j++) {
        zc s = lower ? ld(a->data, dt, base + i * N + j) : conj(ld(a->data, dt, base + j * N + i));
        for (int64_t q = 0; q < j; q++) s -= L[i * N + q] * conj(L[j * N + q]);
        if (i == j) {
          double d = creal(s);
          if (!(d > 0)) { bad = i + 1; break; }
          L[i * N + i] = sqrt(d);
        } else {
          L[i * N + j] = s / L[j * N + j];
        }
      }
    if (info) info[bi] = (int32_t)bad;
    for (int64_t i = 0; i < N; i++)
      for (int64_t j = 0; j < N; j++) {
        bool mine = lower ? j <= i : j >= i;
        zc v;
        if (bad && full) v = NAN + (lm_dtype_is_complex(dt) ? NAN * I : 0);
        else if (bad || !mine) v = full ? 0 : ld(a->data, dt, base + i * N + j); /* failed potrf: input kept */
        else v = lower ? L[i * N + j] : conj(L[j * N + i]);
        st(out->data, dt, base + i * N + j, v);
      }
  }
  free(L);
  return 0;
}

static int k_cholesky(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  return chol(k, in[0], out[0], flag(k->op, "lower"), true, NULL);
}

/* ---- LAPACK custom calls as jax.numpy.linalg lowers them on CPU ----
 * @lapack_{s,d,c,z}{potrf,getrf,trsm,geqrf}_ffi and @lapack_{s,d}orgqr_ffi / @lapack_{c,z}ungqr_ffi,
 * with their options in the mhlo.backend_config
 * dictionary as LAPACK characters (uplo 'L'/'U', side 'L'/'R', trans_x 'N'/'T'/'C', diag
 * 'U'/'N'); leading dimensions are batch dimensions. The operand_layouts ask XLA for
 * column-major data so that LAPACK sees the logical matrices; these handlers work on the logical
 * (row-major) matrices directly, so the results are the same values. */

static int64_t cfg_char(const lm_op *op, const char *name, int64_t dflt) {
  const lm_attr *bc = lm_op_attr(op, "mhlo.backend_config");
  if (!bc || (bc->kind != LM_ATTR_DICT && bc->kind != LM_ATTR_STRUCT)) return dflt;
  return lm_attr_int_or(lm_attrs_get(bc->fields, bc->n, name), dflt);
}

/* True when v is of element type dt with a's batch dimensions, followed by one dimension of size
 * last (last < 0: none; v is over the batch only): info, pivot and tau results. */
static bool over_batch(const lm_type *v, lm_dtype dt, const lm_type *a, int64_t last) {
  int nb = a->rank - 2;
  if (v->dtype != dt || v->rank != nb + (last >= 0) || memcmp(v->dims, a->dims, (size_t)nb * sizeof *a->dims)) return false;
  return last < 0 || v->dims[nb] == last;
}

static int v_lapack_common(const lm_op *op, const lm_func *fn, uint32_t nin, uint32_t nout, lm_err *err) {
  if (op->nin != nin || op->nout != nout)
    return lm_op_err(err, op, LOOM_VERIFY, "custom_call expects %u operand(s) and %u result(s)", nin, nout);
  LM_TRY(lm_check_tensors(op, fn, nin, nout, err));
  const lm_type *a = lm_vtype(fn, op->in[0]);
  if (!solvable_type(a->dtype) || a->dtype == LOOM_DTYPE_F16 || a->dtype == LOOM_DTYPE_BF16 || a->rank < 2)
    return lm_op_err(err, op, LOOM_VERIFY, "operand must be a (batch of) f32/f64/complex matrices");
  return 0;
}

static int v_potrf(const lm_op *op, const lm_func *fn, lm_err *err) {
  LM_TRY(v_lapack_common(op, fn, 1, 2, err));
  const lm_type *a = lm_vtype(fn, op->in[0]), *info = lm_vtype(fn, op->out[1]);
  if (a->dims[a->rank - 1] != a->dims[a->rank - 2] || !lm_type_equal(a, lm_vtype(fn, op->out[0])))
    return lm_op_err(err, op, LOOM_VERIFY, "potrf needs square matrices and a result of the operand's type");
  if (!over_batch(info, LOOM_DTYPE_S32, a, -1))
    return lm_op_err(err, op, LOOM_VERIFY, "potrf's info result must be i32 over the batch dimensions");
  int64_t u = cfg_char(op, "uplo", 'L');
  if (u != 'L' && u != 'U') return lm_op_err(err, op, LOOM_VERIFY, "uplo must be 'L' or 'U'");
  return 0;
}

static int k_potrf(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  return chol(k, in[0], out[0], cfg_char(k->op, "uplo", 'L') == 'L', false, out[1]->data);
}

static int v_trsm(const lm_op *op, const lm_func *fn, lm_err *err) {
  LM_TRY(v_lapack_common(op, fn, 2, 1, err));
  const lm_type *a = lm_vtype(fn, op->in[0]), *b = lm_vtype(fn, op->in[1]);
  int R = a->rank;
  bool left = cfg_char(op, "side", 'L') == 'L';
  if (b->rank != R || a->dims[R - 1] != a->dims[R - 2] || b->dtype != a->dtype || !lm_type_equal(b, lm_vtype(fn, op->out[0])) ||
      memcmp(a->dims, b->dims, (size_t)(R - 2) * 8) || b->dims[left ? R - 2 : R - 1] != a->dims[R - 1])
    return lm_op_err(err, op, LOOM_VERIFY, "trsm operand shapes do not fit (a square, b matching on the solved side)");
  int64_t t = cfg_char(op, "trans_x", 'N');
  if (t != 'N' && t != 'T' && t != 'C') return lm_op_err(err, op, LOOM_VERIFY, "trans_x must be 'N', 'T' or 'C'");
  return 0;
}

static int k_trsm(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  int64_t t = cfg_char(k->op, "trans_x", 'N');
  return tri_solve(k, in[0], in[1], out[0], cfg_char(k->op, "side", 'L') == 'L', cfg_char(k->op, "uplo", 'L') == 'L',
                   cfg_char(k->op, "diag", 'N') == 'U', t == 'T' ? 1 : t == 'C' ? 2 : 0);
}

static int v_getrf(const lm_op *op, const lm_func *fn, lm_err *err) {
  LM_TRY(v_lapack_common(op, fn, 1, 3, err));
  const lm_type *a = lm_vtype(fn, op->in[0]), *piv = lm_vtype(fn, op->out[1]), *info = lm_vtype(fn, op->out[2]);
  int R = a->rank;
  int64_t mn = a->dims[R - 1] < a->dims[R - 2] ? a->dims[R - 1] : a->dims[R - 2];
  if (!lm_type_equal(a, lm_vtype(fn, op->out[0]))) return lm_op_err(err, op, LOOM_VERIFY, "getrf's LU result must have the operand's type");
  if (!over_batch(piv, LOOM_DTYPE_S32, a, mn))
    return lm_op_err(err, op, LOOM_VERIFY, "getrf's pivots must be i32 [batch..., min(m, n)]");
  if (!over_batch(info, LOOM_DTYPE_S32, a, -1))
    return lm_op_err(err, op, LOOM_VERIFY, "getrf's info result must be i32 over the batch dimensions");
  return 0;
}

/* LU with partial pivoting, LAPACK getrf's contract: row j is swapped with the row of the first
 * largest |a[i][j]| (|re| + |im| for complex, as icamax) at or below it, ipiv 1-based; a zero
 * pivot sets info to its 1-based column (first one) and the elimination continues. */
static int k_getrf(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  mats x;
  LM_TRY(mats_init(k, &in[0]->type, &x));
  zc *A = x.A;
  int64_t m = x.m, n = x.n, mn = m < n ? m : n;
  int32_t *piv = out[1]->data, *info = out[2]->data;
  bool cplx = lm_dtype_is_complex(x.dt);
  for (int64_t bi = 0; bi < x.batch; bi++) {
    mats_load(&x, in[0]->data, bi);
    info[bi] = 0;
    for (int64_t j = 0; j < mn; j++) {
      int64_t p = j;
      double best = -1;
      for (int64_t i = j; i < m; i++) {
        zc v = A[i * n + j];
        double mag = cplx ? fabs(creal(v)) + fabs(cimag(v)) : fabs(creal(v));
        if (mag > best) { best = mag; p = i; }
      }
      piv[bi * mn + j] = (int32_t)(p + 1);
      if (A[p * n + j] != 0) {
        if (p != j)
          for (int64_t c = 0; c < n; c++) { zc t = A[j * n + c]; A[j * n + c] = A[p * n + c]; A[p * n + c] = t; }
        for (int64_t i = j + 1; i < m; i++) A[i * n + j] /= A[j * n + j];
      } else if (info[bi] == 0) {
        info[bi] = (int32_t)(j + 1);
      }
      for (int64_t i = j + 1; i < m; i++)
        for (int64_t c = j + 1; c < n; c++) A[i * n + c] -= A[i * n + j] * A[j * n + c];
    }
    mats_store(&x, out[0]->data, bi);
  }
  free(A);
  return 0;
}

/* geqrf: Householder QR, LAPACK's convention (dlarfg / zlarfg): for column j, beta =
 * -sign(re(alpha)) * |(alpha, x)|, tau = (beta - alpha) / beta, v = [1, x / (alpha - beta)]; R
 * above the diagonal, v below it, H(j)^H applied to the trailing columns. */
static int v_geqrf(const lm_op *op, const lm_func *fn, lm_err *err) {
  LM_TRY(v_lapack_common(op, fn, 1, 2, err));
  const lm_type *a = lm_vtype(fn, op->in[0]), *tau = lm_vtype(fn, op->out[1]);
  int R = a->rank;
  int64_t mn = a->dims[R - 1] < a->dims[R - 2] ? a->dims[R - 1] : a->dims[R - 2];
  if (!lm_type_equal(a, lm_vtype(fn, op->out[0])) || !over_batch(tau, a->dtype, a, mn))
    return lm_op_err(err, op, LOOM_VERIFY, "geqrf returns the operand's type and taus [batch..., min(m, n)]");
  return 0;
}

static int k_geqrf(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  mats x;
  LM_TRY(mats_init(k, &in[0]->type, &x));
  zc *A = x.A;
  int64_t m = x.m, n = x.n, mn = m < n ? m : n;
  for (int64_t bi = 0; bi < x.batch; bi++) {
    mats_load(&x, in[0]->data, bi);
    for (int64_t j = 0; j < mn; j++) {
      zc alpha = A[j * n + j], tau = 0;
      double xn = 0;
      for (int64_t i = j + 1; i < m; i++) xn = hypot(xn, cabs(A[i * n + j]));
      if (!(xn == 0 && cimag(alpha) == 0)) {
        double beta = hypot(hypot(creal(alpha), cimag(alpha)), xn);
        if (creal(alpha) >= 0) beta = -beta;
        tau = (beta - creal(alpha)) / beta - I * (cimag(alpha) / beta);
        zc sc = 1.0 / (alpha - beta);
        for (int64_t i = j + 1; i < m; i++) A[i * n + j] *= sc;
        A[j * n + j] = beta;
        /* apply H^H = I - conj(tau) v v^H to A[j:, j+1:] */
        for (int64_t c = j + 1; c < n; c++) {
          zc w = A[j * n + c];
          for (int64_t i = j + 1; i < m; i++) w += conj(A[i * n + j]) * A[i * n + c];
          w *= conj(tau);
          A[j * n + c] -= w;
          for (int64_t i = j + 1; i < m; i++) A[i * n + c] -= A[i * n + j] * w;
        }
      }
      st(out[1]->data, x.dt, bi * mn + j, tau);
    }
    mats_store(&x, out[0]->data, bi);
  }
  free(A);
  return 0;
}

/* orgqr / ungqr: the first n columns of H(0) H(1) ... H(k-1) from geqrf's reflectors (dorg2r). */
static int v_orgqr(const lm_op *op, const lm_func *fn, lm_err *err) {
  LM_TRY(v_lapack_common(op, fn, 2, 1, err));
  const lm_type *a = lm_vtype(fn, op->in[0]), *tau = lm_vtype(fn, op->in[1]);
  int R = a->rank;
  if (!lm_type_equal(a, lm_vtype(fn, op->out[0])) || tau->dtype != a->dtype || tau->rank != R - 1 ||
      memcmp(tau->dims, a->dims, (size_t)(R - 2) * 8) || tau->dims[R - 2] > a->dims[R - 1] || a->dims[R - 1] > a->dims[R - 2])
    return lm_op_err(err, op, LOOM_VERIFY, "orgqr needs a [batch..., m, n] (n <= m) and taus [batch..., k <= n]");
  return 0;
}

static int k_orgqr(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  mats x;
  LM_TRY(mats_init(k, &in[0]->type, &x));
  zc *A = x.A;
  int64_t m = x.m, n = x.n, kk = in[1]->type.dims[in[0]->type.rank - 2]; /* reflectors per matrix */
  for (int64_t bi = 0; bi < x.batch; bi++) {
    mats_load(&x, in[0]->data, bi);
    for (int64_t c = kk; c < n; c++) /* columns past the reflectors start as unit vectors */
      for (int64_t i = 0; i < m; i++) A[i * n + c] = i == c ? 1 : 0;
    for (int64_t j = kk - 1; j >= 0; j--) {
      zc tau = ld(in[1]->data, x.dt, bi * kk + j);
      if (j < n - 1) { /* apply H(j) = I - tau v v^H to A[j:, j+1:] */
        A[j * n + j] = 1;
        for (int64_t c = j + 1; c < n; c++) {
          zc w = 0;
          for (int64_t i = j; i < m; i++) w += conj(A[i * n + j]) * A[i * n + c];
          w *= tau;
          for (int64_t i = j; i < m; i++) A[i * n + c] -= A[i * n + j] * w;
        }
      }
      for (int64_t i = j + 1; i < m; i++) A[i * n + j] *= -tau;
      A[j * n + j] = 1.0 - tau;
      for (int64_t i = 0; i < j; i++) A[i * n + j] = 0;
    }
    mats_store(&x, out[0]->data, bi);
  }
  free(A);
  return 0;
}

void lm_register_linalg_kernels(void) {
  lm_kernel_register(LM_OP_TRIANGULAR_SOLVE, k_triangular_solve, v_triangular_solve, 0);
  lm_kernel_register(LM_OP_CHOLESKY, k_cholesky, v_cholesky, 0);
  static const char *const potrf[] = {"lapack_spotrf_ffi", "lapack_dpotrf_ffi", "lapack_cpotrf_ffi", "lapack_zpotrf_ffi"};
  static const char *const getrf[] = {"lapack_sgetrf_ffi", "lapack_dgetrf_ffi", "lapack_cgetrf_ffi", "lapack_zgetrf_ffi"};
  static const char *const trsm[] = {"lapack_strsm_ffi", "lapack_dtrsm_ffi", "lapack_ctrsm_ffi", "lapack_ztrsm_ffi"};
  static const char *const geqrf[] = {"lapack_sgeqrf_ffi", "lapack_dgeqrf_ffi", "lapack_cgeqrf_ffi", "lapack_zgeqrf_ffi"};
  static const char *const orgqr[] = {"lapack_sorgqr_ffi", "lapack_dorgqr_ffi", "lapack_cungqr_ffi", "lapack_zungqr_ffi"};
  for (int i = 0; i < 4; i++) {
    lm_custom_call_register(geqrf[i], k_geqrf, v_geqrf, 0);
    lm_custom_call_register(orgqr[i], k_orgqr, v_orgqr, 0);
    lm_custom_call_register(potrf[i], k_potrf, v_potrf, 0);
    lm_custom_call_register(getrf[i], k_getrf, v_getrf, 0);
    lm_custom_call_register(trsm[i], k_trsm, v_trsm, 0);
  }
}
