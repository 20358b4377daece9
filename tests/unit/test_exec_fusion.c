/* Tests of the interpreter's fusion of elementwise chains (src/exec/fusion.c, interp.c): fused
 * results equal unfused ones bit for bit, groups really form (few steps, low peak memory),
 * values used outside a group are materialized, broadcasts inside groups, f16 chains, scalar
 * operands, and out-of-device-memory errors. Modules are built by hand (test_ops_build.h). */
#include "test_exec_util.h"

/* ---- gelu, as jax.nn.gelu(approximate=True) lowers it ---- */

static void build_gelu(tb *b, int64_t n) {
  lm_type t = T1(LOOM_DTYPE_F32, n), s = T0(LOOM_DTYPE_F32);
  lm_block *k = b->body;
  uint32_t x = tb_arg(b, t);
  uint32_t x2 = tx_bin(b, k, LM_OP_MULTIPLY, x, x, t);
  uint32_t x3 = tx_bin(b, k, LM_OP_MULTIPLY, x2, x, t);
  uint32_t c0 = tx_bcast(b, k, tx_const_f32(b, k, 0.044715f), t, 0, NULL);
  uint32_t a = tx_bin(b, k, LM_OP_ADD, x, tx_bin(b, k, LM_OP_MULTIPLY, c0, x3, t), t);
  uint32_t c1 = tx_bcast(b, k, tx_const_f32(b, k, 0.797884583f), t, 0, NULL);
  uint32_t th = tx_un(b, k, LM_OP_TANH, tx_bin(b, k, LM_OP_MULTIPLY, c1, a, t), t);
  uint32_t c2 = tx_bcast(b, k, tx_const_f32(b, k, 1.0f), t, 0, NULL);
  uint32_t c3 = tx_bcast(b, k, tx_const_f32(b, k, 0.5f), t, 0, NULL);
  uint32_t h = tx_bin(b, k, LM_OP_MULTIPLY, c3, tx_bin(b, k, LM_OP_ADD, c2, th, t), t);
  uint32_t y = tx_bin(b, k, LM_OP_MULTIPLY, x, h, t);
  (void)s;
  tb_finish(b, 1, &y);
}

static void test_gelu_fused_equals_unfused(void **state) {
  int64_t n = 3001; /* not a multiple of the tile */
  lm_buffer *x = tx_buf_rand_f32(T1(LOOM_DTYPE_F32, n), 7, -6, 6);
  lm_buffer *yf, *yu;
  lm_err e;
  size_t peak_f, peak_u;
  tb b;
  tb_init(&b);
  build_gelu(&b, n);
  assert_int_equal(tx_run(&b, true, 1 << 20, &x, 1, &yf, &peak_f, &e), 0);
  tb_init(&b);
  build_gelu(&b, n);
  assert_int_equal(tx_run(&b, false, 1 << 20, &x, 1, &yu, &peak_u, &e), 0);
  assert_memory_equal(yf->data, yu->data, (size_t)n * 4);
  /* against a scalar evaluation with the same per-op f32 rounding */
  const float *xv = x->data, *yv = yf->data;
  for (int64_t i = 0; i < n; i++) {
    /* volatile: one rounding per op, no contraction into fused multiply-adds */
    volatile float v = xv[i];
    volatile float x2 = v * v, x3 = x2 * v, p = 0.044715f * x3, a = v + p, q = 0.797884583f * a;
    volatile float t = (float)tanh((double)q), u = 1.0f + t, h = 0.5f * u;
    float want = v * h;
    if (yv[i] != want) fail_msg("element %lld: %a, want %a", (long long)i, yv[i], want);
  }
  /* fused: one group and the return; the group keeps no intermediate in device memory */
  tb_init(&b);
  build_gelu(&b, n);
  assert_true(tx_steps(&b, true) <= 6); /* 4 scalar constants, the group, the return */
  tb_init(&b);
  build_gelu(&b, n);
  assert_true(tx_steps(&b, false) > 14);
  assert_true(peak_f <= (size_t)n * 4 + 64);       /* just the output (constants are scalars) */
  assert_true(peak_u >= 2 * (size_t)n * 4);        /* unfused materializes intermediates */
  lm_buffer_release(x);
  lm_buffer_release(yf);
  lm_buffer_release(yu);
}

/* A large group split over 4 threads gives the same bits as one thread. */
static void test_threads(void **state) {
  int64_t n = (1 << 18) + 12345;
  lm_buffer *x = tx_buf_rand_f32(T1(LOOM_DTYPE_F32, n), 11, -5, 5), *y1, *y4;
  lm_err e;
  tb b;
  tb_init(&b);
  build_gelu(&b, n);
  assert_int_equal(tx_run_threads(&b, true, 1, 1 << 24, &x, 1, &y1, NULL, &e), 0);
  tb_init(&b);
  build_gelu(&b, n);
  assert_int_equal(tx_run_threads(&b, true, 4, 1 << 24, &x, 1, &y4, NULL, &e), 0);
  assert_memory_equal(y1->data, y4->data, (size_t)n * 4);
  lm_buffer_release(x);
  lm_buffer_release(y1);
  lm_buffer_release(y4);
}

/* ---- intermediates used outside the group, broadcasts, scalars ---- */

/* y = exp(a*b + bias[row]) * colscale[col]; also returns a*b (used outside) and reduces exp(..) */
static void build_mixed(tb *b, int64_t M, int64_t N) {
  lm_type t = T2(LOOM_DTYPE_F32, M, N), row = T1(LOOM_DTYPE_F32, N), col = T1(LOOM_DTYPE_F32, M),
          s = T0(LOOM_DTYPE_F32), r = T1(LOOM_DTYPE_F32, M);
  lm_block *k = b->body;
  uint32_t a = tb_arg(b, t), bb = tb_arg(b, t), bias = tb_arg(b, row), cs = tb_arg(b, col);
  uint32_t ab = tx_bin(b, k, LM_OP_MULTIPLY, a, bb, t);
  uint32_t biasb = tx_bcast(b, k, bias, t, 1, (int64_t[]){1});
  uint32_t e = tx_un(b, k, LM_OP_EXPONENTIAL, tx_bin(b, k, LM_OP_ADD, ab, biasb, t), t);
  uint32_t csb = tx_bcast(b, k, cs, t, 1, (int64_t[]){0});
  uint32_t y = tx_bin(b, k, LM_OP_MULTIPLY, e, csb, t);
  /* a reduce over rows of e: e must be materialized for it */
  uint32_t zero = tx_const_f32(b, k, 0.0f);
  uint32_t rin[2] = {e, zero};
  lm_op *red = tb_op(b, k, LM_OP_REDUCE, 2, rin, 1, &r);
  tb_ints(b, red, "dimensions", 1, (int64_t[]){1});
  tb_binop_region(b, red, LM_OP_ADD, LOOM_DTYPE_F32);
  /* clamp with scalar bounds and select with a scalar predicate, after the reduce */
  uint32_t lo = tx_const_f32(b, k, 0.5f), hi = tx_const_f32(b, k, 2.0f);
  uint32_t cin[3] = {lo, y, hi};
  uint32_t cl = tb_op(b, k, LM_OP_CLAMP, 3, cin, 1, &t)->out[0];
  uint8_t tr = 1;
  uint32_t pr = tx_const(b, k, T0(LOOM_DTYPE_PRED), &tr);
  uint32_t sin_[3] = {pr, cl, ab};
  uint32_t sel = tb_op(b, k, LM_OP_SELECT, 3, sin_, 1, &t)->out[0];
  (void)s;
  uint32_t outs[4] = {sel, ab, red->out[0], y};
  tb_finish(b, 4, outs);
}

static void test_mixed_group_outputs(void **state) {
  int64_t M = 37, N = 129;
  lm_buffer *args[4] = {tx_buf_rand_f32(T2(LOOM_DTYPE_F32, M, N), 1, -1, 1), tx_buf_rand_f32(T2(LOOM_DTYPE_F32, M, N), 2, -1, 1),
                        tx_buf_rand_f32(T1(LOOM_DTYPE_F32, N), 3, -1, 1), tx_buf_rand_f32(T1(LOOM_DTYPE_F32, M), 4, 0, 2)};
  lm_buffer *of[4], *ou[4];
  lm_err e;
  tb b;
  tb_init(&b);
  build_mixed(&b, M, N);
  if (tx_run(&b, true, 1 << 24, args, 4, of, NULL, &e) != 0) fail_msg("%s", e.msg);
  tb_init(&b);
  build_mixed(&b, M, N);
  if (tx_run(&b, false, 1 << 24, args, 4, ou, NULL, &e) != 0) fail_msg("%s", e.msg);
  for (int i = 0; i < 4; i++) {
    assert_int_equal(of[i]->nbytes, ou[i]->nbytes);
    assert_memory_equal(of[i]->data, ou[i]->data, of[i]->nbytes);
  }
  /* check values directly */
  const float *A = args[0]->data, *B = args[1]->data, *bias = args[2]->data, *cs = args[3]->data;
  const float *sel = of[0]->data, *ab = of[1]->data, *y = of[3]->data;
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) {
      volatile float p = A[i * N + j] * B[i * N + j], q = p + bias[j];
      volatile float ex = (float)exp((double)q);
      volatile float yy = ex * cs[i];
      assert_true(ab[i * N + j] == p);
      assert_true(y[i * N + j] == yy);
      float c = yy < 0.5f ? 0.5f : yy > 2.0f ? 2.0f : yy;
      assert_true(sel[i * N + j] == c);
    }
  for (int i = 0; i < 4; i++) {
    lm_buffer_release(args[i]);
    lm_buffer_release(of[i]);
    lm_buffer_release(ou[i]);
  }
}

/* chlo.broadcast_* with numpy broadcasting inside a group; f16 chains */
static void build_chlo_f16(tb *b) {
  lm_type t = T2(LOOM_DTYPE_F16, 5, 300), r = T2(LOOM_DTYPE_F16, 1, 300), c = T2(LOOM_DTYPE_F16, 5, 1);
  lm_block *k = b->body;
  uint32_t x = tb_arg(b, t), y = tb_arg(b, r), z = tb_arg(b, c);
  uint32_t s = tx_bin(b, k, LM_OP_CHLO_BROADCAST_ADD, x, y, t);
  uint32_t m = tx_bin(b, k, LM_OP_CHLO_BROADCAST_MULTIPLY, s, z, t);
  uint32_t e = tx_un(b, k, LM_OP_TANH, m, t);
  uint32_t d = tx_bin(b, k, LM_OP_CHLO_BROADCAST_SUBTRACT, e, y, t);
  tb_finish(b, 1, &d);
}

static void test_chlo_broadcast_f16(void **state) {
  lm_buffer *args[3];
  lm_type ts[3] = {T2(LOOM_DTYPE_F16, 5, 300), T2(LOOM_DTYPE_F16, 1, 300), T2(LOOM_DTYPE_F16, 5, 1)};
  uint64_t seed = 99;
  for (int a = 0; a < 3; a++) {
    assert_int_equal(lm_buffer_alloc(NULL, &ts[a], &args[a], NULL), 0);
    uint16_t *h = args[a]->data;
    for (int64_t i = 0; i < lm_type_numel(&ts[a]); i++)
      h[i] = lm_f32_to_f16((float)((tb_rand(&seed) % 2000) / 500.0 - 2.0));
  }
  lm_buffer *of, *ou;
  lm_err e;
  tb b;
  tb_init(&b);
  build_chlo_f16(&b);
  if (tx_run(&b, true, 1 << 24, args, 3, &of, NULL, &e) != 0) fail_msg("%s", e.msg);
  tb_init(&b);
  build_chlo_f16(&b);
  if (tx_run(&b, false, 1 << 24, args, 3, &ou, NULL, &e) != 0) fail_msg("%s", e.msg);
  assert_memory_equal(of->data, ou->data, of->nbytes);
  const uint16_t *X = args[0]->data, *Y = args[1]->data, *Z = args[2]->data, *O = of->data;
  for (int i = 0; i < 5; i++)
    for (int j = 0; j < 300; j++) {
      uint16_t s = lm_f32_to_f16(lm_f16_to_f32(X[i * 300 + j]) + lm_f16_to_f32(Y[j]));
      uint16_t m = lm_f32_to_f16(lm_f16_to_f32(s) * lm_f16_to_f32(Z[i]));
      uint16_t t = lm_f32_to_f16((float)tanh((double)lm_f16_to_f32(m)));
      uint16_t d = lm_f32_to_f16(lm_f16_to_f32(t) - lm_f16_to_f32(Y[j]));
      assert_int_equal(O[i * 300 + j], d);
    }
  tb_init(&b);
  build_chlo_f16(&b);
  assert_int_equal(tx_steps(&b, true), 2); /* everything in one group */
  for (int a = 0; a < 3; a++) lm_buffer_release(args[a]);
  lm_buffer_release(of);
  lm_buffer_release(ou);
}

/* ---- memory ---- */

static void build_chain(tb *b, int64_t n, int len) {
  lm_type t = T1(LOOM_DTYPE_F32, n);
  lm_block *k = b->body;
  uint32_t x = tb_arg(b, t), v = x;
  for (int i = 0; i < len; i++) v = tx_bin(b, k, i % 2 ? LM_OP_ADD : LM_OP_MULTIPLY, v, x, t);
  tb_finish(b, 1, &v);
}

static void test_out_of_device_memory(void **state) {
  int64_t n = 1 << 16;
  lm_buffer *x = tx_buf_rand_f32(T1(LOOM_DTYPE_F32, n), 5, -1, 1), *y = NULL;
  lm_err e;
  tb b;
  /* fused: needs one output buffer only */
  tb_init(&b);
  build_chain(&b, n, 12);
  size_t peak;
  assert_int_equal(tx_run(&b, true, (size_t)n * 4, &x, 1, &y, &peak, &e), 0);
  assert_true(peak <= (size_t)n * 4);
  lm_buffer_release(y);
  /* unfused: two live intermediates at a time do not fit: a clean error naming the op */
  tb_init(&b);
  build_chain(&b, n, 12);
  int rc = tx_run(&b, false, (size_t)n * 4 + 100, &x, 1, &y, NULL, &e);
  assert_int_equal(rc, LOOM_DEVICE_OUT_OF_MEMORY);
  assert_non_null(strstr(e.msg, "out of device memory"));
  assert_non_null(strstr(e.msg, "stablehlo."));
  /* and with no room for the output either */
  tb_init(&b);
  build_chain(&b, n, 3);
  assert_int_equal(tx_run(&b, true, 1000, &x, 1, &y, NULL, &e), LOOM_DEVICE_OUT_OF_MEMORY);
  lm_buffer_release(x);
}

/* A huge shape fails cleanly instead of overflowing size computations. */
static void test_huge_shape(void **state) {
  tb b;
  tb_init(&b);
  lm_type t = T2(LOOM_DTYPE_F32, INT64_C(1) << 40, INT64_C(1) << 30);
  lm_block *k = b.body;
  uint32_t c = tx_const_f32(&b, k, 1.0f);
  uint32_t v = tx_bcast(&b, k, c, t, 0, NULL);
  uint32_t w = tx_bin(&b, k, LM_OP_ADD, v, v, t);
  tb_finish(&b, 1, &w);
  lm_buffer *y = NULL;
  lm_err e;
  int rc = tx_run(&b, true, 1 << 20, NULL, 0, &y, NULL, &e);
  assert_int_equal(rc, LOOM_DEVICE_OUT_OF_MEMORY);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_gelu_fused_equals_unfused),
      cmocka_unit_test(test_threads),
      cmocka_unit_test(test_mixed_group_outputs),
      cmocka_unit_test(test_chlo_broadcast_f16),
      cmocka_unit_test(test_out_of_device_memory),
      cmocka_unit_test(test_huge_shape),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
