/* Unit tests for triangular_solve and cholesky (src/exec/linalg.c): the interpreter suite's
 * example, every combination of left_side / lower / transpose_a / unit_diagonal checked by
 * substituting the solution back, batches, complex ADJOINT, cholesky reconstruction in both
 * triangles and NaN for a matrix that is not positive-definite; einsum / unary_einsum; the
 * @lapack_*_ffi custom calls jax.numpy.linalg lowers to on CPU (cholesky, lu, solve, inv, det, qr;
 * also checked against JAX by hand: same values, same signs). */
#include <complex.h>
#include <math.h>
#include "test_ops_build.h"

static lm_buffer *run_ts(lm_type at, lm_type bt, lm_buffer *a, lm_buffer *b, int left, int lower, int unit, const char *tr) {
  tb t;
  tb_init(&t);
  uint32_t ins[2] = {tb_arg(&t, at), tb_arg(&t, bt)};
  lm_op *op = tb_op(&t, t.body, LM_OP_TRIANGULAR_SOLVE, 2, ins, 1, &bt);
  tb_bool(&t, op, "left_side", left);
  tb_bool(&t, op, "lower", lower);
  tb_bool(&t, op, "unit_diagonal", unit);
  tb_enum(&t, op, "transpose_a", tr);
  tb_finish(&t, 1, op->out);
  lm_buffer *args[2] = {a, b};
  return tb_run1(&t, args, 2);
}

static void test_triangular_solve_example(void **state) {
  float a[9] = {2, 0, 0, 0, 4, 0, 0, 0, 5}, b[3] = {7, 8, 9};
  lm_buffer *ab = tb_buf(T2(LOOM_DTYPE_F32, 3, 3), a), *bb = tb_buf(T2(LOOM_DTYPE_F32, 3, 1), b);
  lm_buffer *x = run_ts(T2(LOOM_DTYPE_F32, 3, 3), T2(LOOM_DTYPE_F32, 3, 1), ab, bb, 1, 1, 0, "NO_TRANSPOSE");
  float want[3] = {3.5f, 2.0f, 1.8f};
  for (int i = 0; i < 3; i++) assert_true(fabsf(((float *)x->data)[i] - want[i]) < 1e-6f);
  lm_buffer_release(ab);
  lm_buffer_release(bb);
  lm_buffer_release(x);
}

static void test_triangular_solve_all(void **state) {
  const int B = 2, M = 5, N = 3;
  const char *trs[3] = {"NO_TRANSPOSE", "TRANSPOSE", "ADJOINT"};
  uint64_t s = 4;
  double complex a[2][5][5];
  for (int bi = 0; bi < B; bi++)
    for (int i = 0; i < M; i++)
      for (int j = 0; j < M; j++)
        a[bi][i][j] = (i == j ? 4.0 : 0.0) + ((double)(tb_rand(&s) % 200) / 100.0 - 1) + I * ((double)(tb_rand(&s) % 200) / 100.0 - 1);
  for (int cplx = 0; cplx < 2; cplx++)
    for (int left = 0; left < 2; left++)
      for (int lower = 0; lower < 2; lower++)
        for (int unit = 0; unit < 2; unit++)
          for (int tr = 0; tr < 3; tr++) {
            lm_dtype dt = cplx ? LOOM_DTYPE_C128 : LOOM_DTYPE_F64;
            lm_type at = T3(dt, B, M, M), bt = left ? T3(dt, B, M, N) : T3(dt, B, N, M);
            lm_buffer *ab = tb_buf_iota(at, 0, 0), *bb = tb_buf_iota(bt, 0, 0);
            int64_t nb = lm_type_numel(&bt);
            double complex *bv = malloc(nb * sizeof *bv);
            for (int64_t i = 0; i < B * M * M; i++) {
              double complex v = ((double complex *)a)[i];
              if (!cplx) v = creal(v);
              if (cplx) ((double complex *)ab->data)[i] = v;
              else ((double *)ab->data)[i] = creal(v);
            }
            for (int64_t i = 0; i < nb; i++) {
              bv[i] = (double)(i % 7) - 3 + (cplx ? I * (double)(i % 3) : 0);
              if (cplx) ((double complex *)bb->data)[i] = bv[i];
              else ((double *)bb->data)[i] = creal(bv[i]);
            }
            lm_buffer *x = run_ts(at, bt, ab, bb, left, lower, unit, trs[tr]);
            /* rebuild op(a) as the kernel must see it, multiply back */
            for (int bi = 0; bi < B; bi++) {
              double complex A[5][5];
              for (int i = 0; i < M; i++)
                for (int j = 0; j < M; j++) {
                  int r = tr ? j : i, c = tr ? i : j;
                  double complex v = (lower ? r >= c : r <= c) ? a[bi][r][c] : 0;
                  if (!cplx) v = creal(v);
                  if (r == c && unit) v = 1;
                  if (tr == 2) v = conj(v);
                  A[i][j] = v;
                }
              int rows = left ? M : N, cols = left ? N : M;
              for (int r = 0; r < rows; r++)
                for (int c = 0; c < cols; c++) {
                  double complex acc = 0;
                  for (int q = 0; q < M; q++) {
                    double complex xv = cplx ? ((double complex *)x->data)[(bi * rows + (left ? q : r)) * cols + (left ? c : q)]
                                             : ((double *)x->data)[(bi * rows + (left ? q : r)) * cols + (left ? c : q)];
                    acc += left ? A[r][q] * xv : xv * A[q][c];
                  }
                  double complex want = bv[(bi * rows + r) * cols + c];
                  if (cabs(acc - want) > 1e-9)
                    fail_msg("triangular_solve %s left=%d lower=%d unit=%d %s: residual %g", lm_dtype_name(dt), left, lower,
                             unit, trs[tr], cabs(acc - want));
                }
            }
            lm_buffer_release(ab);
            lm_buffer_release(bb);
            lm_buffer_release(x);
            free(bv);
          }
}

static lm_buffer *run_chol(lm_type t, lm_buffer *a, int lower) {
  tb b;
  tb_init(&b);
  uint32_t x = tb_arg(&b, t);
  lm_op *op = tb_op(&b, b.body, LM_OP_CHOLESKY, 1, &x, 1, &t);
  tb_bool(&b, op, "lower", lower);
  tb_finish(&b, 1, op->out);
  return tb_run1(&b, &a, 1);
}

static void test_cholesky(void **state) {
  const int N = 4;
  /* a = L0 L0^H for a known complex L0; garbage in the unused triangle must be ignored */
  double complex L0[4][4] = {{2, 0, 0, 0}, {1 + I, 3, 0, 0}, {-1, 0.5 * I, 1.5, 0}, {0.25, 1, -2 + I, 1}};
  double complex a[16];
  for (int i = 0; i < N; i++)
    for (int j = 0; j < N; j++) {
      double complex s = 0;
      for (int q = 0; q < N; q++) s += L0[i][q] * conj(L0[j][q]);
      a[i * N + j] = s;
    }
  for (int lower = 0; lower < 2; lower++) {
    double complex in[16];
    memcpy(in, a, sizeof in);
    for (int i = 0; i < N; i++)
      for (int j = 0; j < N; j++)
        if (lower ? j > i : j < i) in[i * N + j] = 99 + 99 * I; /* unused triangle */
    lm_buffer *x = tb_buf(T2(LOOM_DTYPE_C128, N, N), in);
    lm_buffer *y = run_chol(T2(LOOM_DTYPE_C128, N, N), x, lower);
    const double complex *r = y->data;
    for (int i = 0; i < N; i++)
      for (int j = 0; j < N; j++) {
        double complex want = lower ? L0[i][j] : conj(L0[j][i]);
        if (cabs(r[i * N + j] - want) > 1e-12) fail_msg("cholesky lower=%d: (%d,%d) differs", lower, i, j);
      }
    lm_buffer_release(x);
    lm_buffer_release(y);
  }
  /* f32 batch with one matrix not positive-definite: that one becomes NaN */
  float m[2][4] = {{4, 2, 2, 5}, {1, 2, 2, 1}};
  lm_buffer *x = tb_buf(T3(LOOM_DTYPE_F32, 2, 2, 2), m);
  lm_buffer *y = run_chol(T3(LOOM_DTYPE_F32, 2, 2, 2), x, 1);
  const float *r = y->data;
  assert_true(r[0] == 2 && r[1] == 0 && r[2] == 1 && r[3] == 2);
  for (int i = 4; i < 8; i++) assert_true(isnan(r[i]));
  lm_buffer_release(x);
  lm_buffer_release(y);
}

/* einsum / unary_einsum against direct loops */
static void test_einsum(void **state) {
  tb b;
  tb_init(&b);
  lm_type at = T3(LOOM_DTYPE_F32, 2, 3, 4), bt = T3(LOOM_DTYPE_F32, 2, 4, 5), rt = T3(LOOM_DTYPE_F32, 2, 3, 5);
  uint32_t ins[2] = {tb_arg(&b, at), tb_arg(&b, bt)};
  lm_op *op = tb_op(&b, b.body, LM_OP_EINSUM, 2, ins, 1, &rt);
  tb_string(&b, op, "einsum_config", "bij,bjk->bik");
  tb_finish(&b, 1, op->out);
  lm_buffer *args[2] = {tb_buf_iota(at, 0.5, -3), tb_buf_iota(bt, -0.25, 2)};
  lm_buffer *y = tb_run1(&b, args, 2);
  const float *x0 = args[0]->data, *x1 = args[1]->data, *r = y->data;
  for (int bb = 0; bb < 2; bb++)
    for (int i = 0; i < 3; i++)
      for (int k = 0; k < 5; k++) {
        double s = 0;
        for (int j = 0; j < 4; j++) s += (double)x0[(bb * 3 + i) * 4 + j] * x1[(bb * 4 + j) * 5 + k];
        assert_true(fabs(r[(bb * 3 + i) * 5 + k] - s) < 1e-4);
      }
  lm_buffer_release(y);
  lm_buffer_release(args[0]);
  lm_buffer_release(args[1]);
  /* unary: trace of the diagonal and a transpose of the rest: "iij->ji" */
  tb_init(&b);
  lm_type ut = T3(LOOM_DTYPE_S32, 3, 3, 2), ot = T2(LOOM_DTYPE_S32, 2, 3);
  uint32_t u = tb_arg(&b, ut);
  op = tb_op(&b, b.body, LM_OP_UNARY_EINSUM, 1, &u, 1, &ot);
  tb_string(&b, op, "einsum_config", "iij->ji");
  tb_finish(&b, 1, op->out);
  lm_buffer *x = tb_buf_iota(ut, 1, 0);
  y = tb_run1(&b, &x, 1);
  for (int j = 0; j < 2; j++)
    for (int i = 0; i < 3; i++) assert_int_equal(((int32_t *)y->data)[j * 3 + i], (i * 3 + i) * 2 + j);
  lm_buffer_release(y);
  /* an ellipsis is refused by name */
  tb_init(&b);
  u = tb_arg(&b, ut);
  op = tb_op(&b, b.body, LM_OP_UNARY_EINSUM, 1, &u, 1, &ut);
  tb_string(&b, op, "einsum_config", "...->...");
  tb_finish(&b, 1, op->out);
  tb_expect_error(&b, &x, 1, LOOM_UNSUPPORTED, "ellipsis");
  lm_buffer_release(x);
}

/* @lapack_*_ffi custom calls (as jax.numpy.linalg lowers on CPU) */
static lm_op *lapack_call(tb *b, const char *target, uint32_t nin, const uint32_t *ins, uint32_t nout, const lm_type *outs,
                          const char *const *keys, const int64_t *chars, int nkeys) {
  lm_op *op = tb_op(b, b->body, LM_OP_CUSTOM_CALL, nin, ins, nout, outs);
  tb_string(b, op, "call_target_name", target);
  lm_attr *d = tb_attr(b, op, "mhlo.backend_config");
  d->kind = LM_ATTR_DICT;
  d->fields = tb_alloc(b, 4 * sizeof(lm_named_attr));
  for (int i = 0; i < nkeys; i++) {
    d->fields[i].name = keys[i];
    d->fields[i].value.kind = LM_ATTR_INT;
    d->fields[i].value.i = chars[i];
  }
  d->n = (uint32_t)nkeys;
  return op;
}

static void test_lapack_custom_calls(void **state) {
  /* getrf: [[1, 2], [3, 4]] pivots on row 2; [[0, 0], [0, 1]] has a zero pivot (info 1) */
  float m[2][4] = {{1, 2, 3, 4}, {0, 0, 0, 1}};
  tb b;
  tb_init(&b);
  lm_type at = T3(LOOM_DTYPE_F32, 2, 2, 2), pt = T2(LOOM_DTYPE_S32, 2, 2), it = T1(LOOM_DTYPE_S32, 2);
  uint32_t a = tb_arg(&b, at);
  lm_type outs[3] = {at, pt, it};
  lm_op *op = lapack_call(&b, "lapack_sgetrf_ffi", 1, &a, 3, outs, NULL, NULL, 0);
  tb_finish(&b, 3, op->out);
  lm_buffer *x = tb_buf(at, m);
  tb_run_result r = tb_run(&b, &x, 1);
  if (r.rc) fail_msg("%s", r.err.msg);
  const float *lu = r.out[0]->data;
  const int32_t *piv = r.out[1]->data, *info = r.out[2]->data;
  assert_true(lu[0] == 3 && lu[1] == 4 && fabsf(lu[2] - 1.0f / 3) < 1e-7f && fabsf(lu[3] - (2 - 4.0f / 3)) < 1e-6f);
  assert_int_equal(piv[0], 2);
  assert_int_equal(piv[1], 2);
  assert_int_equal(info[0], 0);
  assert_int_equal(piv[2], 1);
  assert_int_equal(info[1], 1);
  tb_run_release(&r);
  lm_buffer_release(x);
  /* potrf: info reports the failing minor; the lower triangle holds L, the upper keeps the input */
  float sp[2][4] = {{4, 7, 2, 5}, {1, 0, 0, -1}};
  tb_init(&b);
  lm_type ft = T3(LOOM_DTYPE_F32, 2, 2, 2);
  a = tb_arg(&b, ft);
  lm_type o2[2] = {ft, it};
  op = lapack_call(&b, "lapack_spotrf_ffi", 1, &a, 2, o2, (const char *[]){"uplo"}, (int64_t[]){'L'}, 1);
  tb_finish(&b, 2, op->out);
  x = tb_buf(ft, sp);
  r = tb_run(&b, &x, 1);
  if (r.rc) fail_msg("%s", r.err.msg);
  const float *l = r.out[0]->data;
  assert_true(l[0] == 2 && l[1] == 7 && l[2] == 1 && l[3] == 2);
  assert_int_equal(((int32_t *)r.out[1]->data)[0], 0);
  assert_int_equal(((int32_t *)r.out[1]->data)[1], 2);
  tb_run_release(&r);
  lm_buffer_release(x);
  /* trsm: side L, uplo U, trans N, diag N on [[2, 1], [0, 4]] x = [[4], [8]] -> [[1], [2]] */
  float ua[4] = {2, 1, 0, 4}, ub[2] = {4, 8};
  tb_init(&b);
  lm_type mt = T2(LOOM_DTYPE_F32, 2, 2), bt = T2(LOOM_DTYPE_F32, 2, 1);
  uint32_t ins[2] = {tb_arg(&b, mt), tb_arg(&b, bt)};
  op = lapack_call(&b, "lapack_strsm_ffi", 2, ins, 1, &bt, (const char *[]){"side", "uplo", "trans_x", "diag"},
                   (int64_t[]){'L', 'U', 'N', 'N'}, 4);
  tb_finish(&b, 1, op->out);
  lm_buffer *args[2] = {tb_buf(mt, ua), tb_buf(bt, ub)};
  lm_buffer *y = tb_run1(&b, args, 2);
  assert_true(((float *)y->data)[0] == 1 && ((float *)y->data)[1] == 2);
  lm_buffer_release(y);
  lm_buffer_release(args[0]);
  lm_buffer_release(args[1]);
  /* geqrf + orgqr of [[3], [4]]: R = -5, tau = 1.6, v = [1, 0.5]; Q = [[-0.6], [-0.8]] (LAPACK's signs) */
  double qa[2] = {3, 4};
  tb_init(&b);
  lm_type qt = T2(LOOM_DTYPE_F64, 2, 1), tt1 = T1(LOOM_DTYPE_F64, 1);
  a = tb_arg(&b, qt);
  lm_type qo[2] = {qt, tt1};
  lm_op *g = lapack_call(&b, "lapack_dgeqrf_ffi", 1, &a, 2, qo, NULL, NULL, 0);
  lm_op *o = lapack_call(&b, "lapack_dorgqr_ffi", 2, g->out, 1, &qt, NULL, NULL, 0);
  uint32_t res[3] = {g->out[0], g->out[1], o->out[0]};
  tb_finish(&b, 3, res);
  x = tb_buf(qt, qa);
  r = tb_run(&b, &x, 1);
  if (r.rc) fail_msg("%s", r.err.msg);
  const double *rr = r.out[0]->data, *tau = r.out[1]->data, *q = r.out[2]->data;
  assert_true(fabs(rr[0] + 5) < 1e-15 && fabs(rr[1] - 0.5) < 1e-15 && fabs(tau[0] - 1.6) < 1e-15);
  assert_true(fabs(q[0] + 0.6) < 1e-15 && fabs(q[1] + 0.8) < 1e-15);
  tb_run_release(&r);
  lm_buffer_release(x);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_triangular_solve_example),
      cmocka_unit_test(test_triangular_solve_all),
      cmocka_unit_test(test_cholesky),
      cmocka_unit_test(test_einsum),
      cmocka_unit_test(test_lapack_custom_calls),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
