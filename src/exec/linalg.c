/* Ops: triangular_solve and cholesky (StableHLO spec 'triangular_solve', 'cholesky'), batched
 * over the leading dimensions, for f16/bf16/f32/f64 and complex element types.
 *
 * Both compute by substitution in double (complex double) and round once, so f16/bf16/f32 results
 * are more accurate than the element type's own arithmetic. triangular_solve reads only the
 * triangle of `a` named by `lower` (and not its diagonal when unit_diagonal); transpose_a is
 * NO_TRANSPOSE, TRANSPOSE or ADJOINT (conjugate transpose). cholesky reads only the triangle
 * named by `lower` (the input is taken as Hermitian), writes zeros in the other triangle, and
 * fills the whole matrix with NaN when the input is not positive-definite (a non-positive pivot),
 * as XLA does. */
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

static int k_triangular_solve(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  const lm_op *op = k->op;
  const lm_type *at = &in[0]->type, *bt = &in[1]->type;
  lm_dtype dt = at->dtype;
  int R = at->rank;
  int64_t M = at->dims[R - 1], rows = bt->dims[R - 2], cols = bt->dims[R - 1];
  int64_t batch = 1;
  for (int d = 0; d < R - 2; d++) batch *= at->dims[d];
  bool left = flag(op, "left_side"), lower = flag(op, "lower"), unit = flag(op, "unit_diagonal");
  const lm_attr *ta = lm_op_attr(op, "transpose_a");
  const char *ts = ta && ta->s ? ta->s : "NO_TRANSPOSE";
  int tr = !strcmp(ts, "TRANSPOSE") ? 1 : !strcmp(ts, "ADJOINT") ? 2 : 0;
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
          v = ld(in[0]->data, dt, bi * M * M + r * M + c);
          if (tr == 2) v = conj(v);
        }
        A[i * M + j] = v;
      }
    for (int64_t i = 0; i < rows * cols; i++) X[i] = ld(in[1]->data, dt, bi * rows * cols + i);
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
    for (int64_t i = 0; i < rows * cols; i++) st(out[0]->data, dt, bi * rows * cols + i, X[i]);
  }
  free(A);
  free(X);
  return 0;
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

static int k_cholesky(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  const lm_type *at = &in[0]->type;
  lm_dtype dt = at->dtype;
  int R = at->rank;
  int64_t N = at->dims[R - 1], batch = 1;
  for (int d = 0; d < R - 2; d++) batch *= at->dims[d];
  bool lower = flag(k->op, "lower");
  zc *L = malloc((size_t)(N * N > 0 ? N * N : 1) * sizeof *L);
  if (!L) return lm_kerr(k, LOOM_NO_MEMORY, "out of host memory");
  for (int64_t bi = 0; bi < batch; bi++) {
    int64_t base = bi * N * N;
    bool ok = true;
    /* L L^H = a, with a's lower triangle a[i][j] (j <= i) = conj(a[j][i]) read from the upper one
     * when lower is false; the result is then U = L^H */
    for (int64_t i = 0; i < N && ok; i++)
      for (int64_t j = 0; j <= i; j++) {
        zc s = lower ? ld(in[0]->data, dt, base + i * N + j) : conj(ld(in[0]->data, dt, base + j * N + i));
        for (int64_t q = 0; q < j; q++) s -= L[i * N + q] * conj(L[j * N + q]);
        if (i == j) {
          double d = creal(s);
          if (!(d > 0)) { ok = false; break; }
          L[i * N + i] = sqrt(d);
        } else {
          L[i * N + j] = s / L[j * N + j];
        }
      }
    for (int64_t i = 0; i < N; i++)
      for (int64_t j = 0; j < N; j++) {
        zc v;
        if (!ok) v = NAN + (lm_dtype_is_complex(dt) ? NAN * I : 0);
        else if (lower) v = j <= i ? L[i * N + j] : 0;
        else v = j >= i ? conj(L[j * N + i]) : 0;
        st(out[0]->data, dt, base + i * N + j, v);
      }
  }
  free(L);
  return 0;
}

void lm_register_linalg_kernels(void) {
  lm_kernel_register(LM_OP_TRIANGULAR_SOLVE, k_triangular_solve, v_triangular_solve, 0);
  lm_kernel_register(LM_OP_CHOLESKY, k_cholesky, v_cholesky, 0);
}
