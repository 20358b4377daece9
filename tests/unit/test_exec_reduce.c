/* Tests of reduce (src/exec/reduce.c): the simple-body fast path on every element type and
 * dimension pattern, compiled multi-operand bodies (argmax with ties, wide and lane schedules),
 * the region fallback, empty reductions. */
#include <complex.h>
#include "test_exec_util.h"

/* reduce(x, init) over dims with body `code`; x of type t, result type rt. */
static void build_reduce(tb *b, lm_type t, lm_type rt, int nd, const int64_t *dims, lm_opcode code, const void *init) {
  uint32_t x = tb_arg(b, t);
  uint32_t iv = tx_const(b, b->body, T0(t.dtype), init);
  uint32_t in[2] = {x, iv};
  lm_op *op = tb_op(b, b->body, LM_OP_REDUCE, 2, in, 1, &rt);
  tb_ints(b, op, "dimensions", nd, dims);
  tb_binop_region(b, op, code, t.dtype);
  tb_finish(b, 1, op->out);
}

static lm_buffer *run_reduce(lm_type t, lm_type rt, int nd, const int64_t *dims, lm_opcode code, const void *init,
                             lm_buffer *x) {
  tb b;
  tb_init(&b);
  build_reduce(&b, t, rt, nd, dims, code, init);
  lm_buffer *out = NULL;
  lm_err e;
  if (tx_run(&b, true, 1 << 26, &x, 1, &out, NULL, &e) != 0) fail_msg("%s", e.msg);
  return out;
}

static void test_sum_patterns_f32(void **state) {
  lm_type t = T3(LOOM_DTYPE_F32, 6, 37, 45);
  lm_buffer *x = tx_buf_rand_f32(t, 17, -1, 1);
  const float *v = x->data;
  float zero = 0;
  struct { int nd; int64_t dims[3]; } cases[] = {{1, {2}}, {1, {0}}, {1, {1}}, {2, {0, 2}}, {3, {0, 1, 2}}, {0, {0}}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    bool red[3] = {false, false, false};
    for (int i = 0; i < cases[c].nd; i++) red[cases[c].dims[i]] = true;
    int64_t od[3];
    int r = 0;
    for (int d = 0; d < 3; d++)
      if (!red[d]) od[r++] = t.dims[d];
    lm_type rt;
    lm_type_tensor(&rt, LOOM_DTYPE_F32, r, od);
    lm_buffer *out = run_reduce(t, rt, cases[c].nd, cases[c].dims, LM_OP_ADD, &zero, x);
    /* reference: double sums */
    int64_t n = lm_type_numel(&rt);
    double *want = calloc((size_t)n, sizeof(double));
    for (int64_t i = 0; i < 6; i++)
      for (int64_t j = 0; j < 37; j++)
        for (int64_t k = 0; k < 45; k++) {
          int64_t idx[3] = {i, j, k}, o = 0;
          for (int d = 0; d < 3; d++)
            if (!red[d]) o = o * t.dims[d] + idx[d];
          want[o] += v[(i * 37 + j) * 45 + k];
        }
    const float *got = out->data;
    for (int64_t i = 0; i < n; i++)
      if (fabs(got[i] - want[i]) > 1e-6 * (1 + fabs(want[i]))) fail_msg("case %zu element %lld: %g, want %g", c, (long long)i, got[i], want[i]);
    free(want);
    lm_buffer_release(out);
  }
  lm_buffer_release(x);
}

static void test_types_and_ops(void **state) {
  /* i32 sum wraps; product; max/min; and/or/xor */
  int32_t iv[] = {INT32_MAX, 1, 5, -7, 3, 2};
  lm_type it = T2(LOOM_DTYPE_S32, 2, 3), ir = T1(LOOM_DTYPE_S32, 2);
  lm_buffer *x = tb_buf(it, iv);
  int32_t z = 0, one = 1, mn = INT32_MIN, mx = INT32_MAX, all = -1;
  lm_buffer *o = run_reduce(it, ir, 1, (int64_t[]){1}, LM_OP_ADD, &z, x);
  assert_true(((int32_t *)o->data)[0] == INT32_MIN + 5 && ((int32_t *)o->data)[1] == -2);
  lm_buffer_release(o);
  o = run_reduce(it, ir, 1, (int64_t[]){1}, LM_OP_MULTIPLY, &one, x);
  assert_true(((int32_t *)o->data)[0] == (int32_t)(5u * (uint32_t)INT32_MAX) && ((int32_t *)o->data)[1] == -42);
  lm_buffer_release(o);
  o = run_reduce(it, ir, 1, (int64_t[]){1}, LM_OP_MAXIMUM, &mn, x);
  assert_true(((int32_t *)o->data)[0] == INT32_MAX && ((int32_t *)o->data)[1] == 3);
  lm_buffer_release(o);
  o = run_reduce(it, ir, 1, (int64_t[]){1}, LM_OP_MINIMUM, &mx, x);
  assert_true(((int32_t *)o->data)[0] == 1 && ((int32_t *)o->data)[1] == -7);
  lm_buffer_release(o);
  o = run_reduce(it, ir, 1, (int64_t[]){1}, LM_OP_AND, &all, x);
  assert_true(((int32_t *)o->data)[0] == (INT32_MAX & 1 & 5) && ((int32_t *)o->data)[1] == (-7 & 3 & 2));
  lm_buffer_release(o);
  o = run_reduce(it, ir, 1, (int64_t[]){1}, LM_OP_XOR, &z, x);
  assert_true(((int32_t *)o->data)[1] == (-7 ^ 3 ^ 2));
  lm_buffer_release(o);
  lm_buffer_release(x);
  /* u8 max is unsigned */
  uint8_t uv[] = {200, 3}, u0 = 0;
  x = tb_buf(T1(LOOM_DTYPE_U8, 2), uv);
  o = run_reduce(T1(LOOM_DTYPE_U8, 2), T0(LOOM_DTYPE_U8), 1, (int64_t[]){0}, LM_OP_MAXIMUM, &u0, x);
  assert_int_equal(((uint8_t *)o->data)[0], 200);
  lm_buffer_release(o);
  lm_buffer_release(x);
  /* i1: add is or, multiply is and */
  uint8_t pv[] = {0, 1, 0, 0, 1, 1}, f = 0, t1 = 1;
  lm_type pt = T2(LOOM_DTYPE_PRED, 2, 3), pr = T1(LOOM_DTYPE_PRED, 2);
  x = tb_buf(pt, pv);
  o = run_reduce(pt, pr, 1, (int64_t[]){1}, LM_OP_ADD, &f, x);
  assert_true(((uint8_t *)o->data)[0] == 1 && ((uint8_t *)o->data)[1] == 1);
  lm_buffer_release(o);
  o = run_reduce(pt, pr, 1, (int64_t[]){1}, LM_OP_MULTIPLY, &t1, x);
  assert_true(((uint8_t *)o->data)[0] == 0 && ((uint8_t *)o->data)[1] == 0);
  lm_buffer_release(o);
  lm_buffer_release(x);
  /* f32 max propagates NaN, min orders -0 < +0 */
  float fv[] = {1, NAN, 3, -0.0f, 0.0f, 0.0f}, ninf = -INFINITY, pinf = INFINITY;
  lm_type ft = T2(LOOM_DTYPE_F32, 2, 3), fr = T1(LOOM_DTYPE_F32, 2);
  x = tb_buf(ft, fv);
  o = run_reduce(ft, fr, 1, (int64_t[]){1}, LM_OP_MAXIMUM, &ninf, x);
  assert_true(isnan(((float *)o->data)[0]) && ((float *)o->data)[1] == 0 && !signbit(((float *)o->data)[1]));
  lm_buffer_release(o);
  o = run_reduce(ft, fr, 1, (int64_t[]){1}, LM_OP_MINIMUM, &pinf, x);
  assert_true(isnan(((float *)o->data)[0]) && signbit(((float *)o->data)[1]));
  lm_buffer_release(o);
  lm_buffer_release(x);
  /* f16 sum: accumulated wide, rounded once */
  uint16_t hv[4] = {lm_f32_to_f16(1.0f), lm_f32_to_f16(0x1p-11f), lm_f32_to_f16(0x1p-11f), lm_f32_to_f16(0x1p-11f)};
  uint16_t h0 = 0;
  x = tb_buf(T1(LOOM_DTYPE_F16, 4), hv);
  o = run_reduce(T1(LOOM_DTYPE_F16, 4), T0(LOOM_DTYPE_F16), 1, (int64_t[]){0}, LM_OP_ADD, &h0, x);
  assert_int_equal(((uint16_t *)o->data)[0], lm_f32_to_f16(1.0f + 3 * 0x1p-11f));
  lm_buffer_release(o);
  lm_buffer_release(x);
  /* complex sum */
  double complex cv[] = {CMPLX(1, 2), CMPLX(3, -4)}, c0 = 0;
  x = tb_buf(T1(LOOM_DTYPE_C128, 2), cv);
  o = run_reduce(T1(LOOM_DTYPE_C128, 2), T0(LOOM_DTYPE_C128), 1, (int64_t[]){0}, LM_OP_ADD, &c0, x);
  assert_true(((double complex *)o->data)[0] == CMPLX(4, -2));
  lm_buffer_release(o);
  lm_buffer_release(x);
  /* empty reduction: the init value */
  float init = 7;
  lm_type et = T2(LOOM_DTYPE_F32, 3, 0);
  assert_int_equal(lm_buffer_alloc(NULL, &et, &x, NULL), 0);
  o = run_reduce(et, T1(LOOM_DTYPE_F32, 3), 1, (int64_t[]){1}, LM_OP_ADD, &init, x);
  for (int i = 0; i < 3; i++) assert_true(((float *)o->data)[i] == 7);
  lm_buffer_release(o);
  lm_buffer_release(x);
}

/* argmax over dim 1 of [O, R] as JAX lowers it: (value, index) pairs, ties to the lower index */
static void build_argmax(tb *b, int64_t O, int64_t R, bool via_call, lm_dtype vt, lm_dtype xt) {
  lm_type t = T2(vt, O, R), it = T2(xt, O, R), rv = T1(vt, O), ri = T1(xt, O);
  lm_type sf = T0(vt), si = T0(xt);
  if (via_call) {
    /* a helper function the body calls: forces the element-by-element region path */
    tx_begin_func(b, "pick");
    uint32_t av = tb_arg(b, sf), ai = tb_arg(b, si), bv = tb_arg(b, sf), bi = tb_arg(b, si);
    uint32_t gt = tx_cmp(b, b->body, "GT", av, bv, sf), eq = tx_cmp(b, b->body, "EQ", av, bv, sf);
    uint32_t lt = tx_cmp(b, b->body, "LT", ai, bi, si);
    lm_type ps = T0(LOOM_DTYPE_PRED);
    uint32_t take = tx_bin(b, b->body, LM_OP_OR, gt, tx_bin(b, b->body, LM_OP_AND, eq, lt, ps), ps);
    uint32_t s1[3] = {take, av, bv}, s2[3] = {take, ai, bi};
    uint32_t outs[2] = {tb_op(b, b->body, LM_OP_SELECT, 3, s1, 1, &sf)->out[0], tb_op(b, b->body, LM_OP_SELECT, 3, s2, 1, &si)->out[0]};
    tb_finish(b, 2, outs);
    tx_end_func(b);
  }
  uint32_t x = tb_arg(b, t);
  lm_op *io = tb_op(b, b->body, LM_OP_IOTA, 0, NULL, 1, &it);
  tb_int(b, io, "iota_dimension", 1);
  unsigned char lowest[16], zero[16];
  lm_store_f64(lowest, vt, lm_dtype_is_float(vt) ? -INFINITY : -1e300); /* saturates to the type's minimum */
  lm_store_f64(zero, xt, 0);
  uint32_t in[4] = {x, io->out[0], tx_const(b, b->body, sf, lowest), tx_const(b, b->body, si, zero)};
  lm_type rts[2] = {rv, ri};
  lm_op *op = tb_op(b, b->body, LM_OP_REDUCE, 4, in, 2, rts);
  tb_ints(b, op, "dimensions", 1, (int64_t[]){1});
  lm_type args[4] = {sf, si, sf, si};
  lm_block *blk = tb_region(b, op, 4, args);
  uint32_t av = blk->args[0], ai = blk->args[1], bv = blk->args[2], bi = blk->args[3];
  if (via_call) {
    lm_type rs[2] = {sf, si};
    lm_op *c = tb_op(b, blk, LM_OP_FUNC_CALL, 4, blk->args, 2, rs);
    tb_symbol(b, c, "callee", "pick");
    tb_return(b, blk, 2, c->out);
  } else {
    uint32_t gt = tx_cmp(b, blk, "GT", av, bv, sf), eq = tx_cmp(b, blk, "EQ", av, bv, sf), lt = tx_cmp(b, blk, "LT", ai, bi, si);
    lm_type ps = T0(LOOM_DTYPE_PRED);
    uint32_t take = tx_bin(b, blk, LM_OP_OR, gt, tx_bin(b, blk, LM_OP_AND, eq, lt, ps), ps);
    uint32_t s1[3] = {take, av, bv}, s2[3] = {take, ai, bi};
    uint32_t outs[2] = {tb_op(b, blk, LM_OP_SELECT, 3, s1, 1, &sf)->out[0], tb_op(b, blk, LM_OP_SELECT, 3, s2, 1, &si)->out[0]};
    tb_return(b, blk, 2, outs);
  }
  tb_finish(b, 2, op->out);
}

static void check_argmax_t(int64_t O, int64_t R, bool via_call, lm_dtype vt, lm_dtype xt) {
  lm_type t = T2(vt, O, R);
  lm_buffer *x = NULL;
  assert_int_equal(lm_buffer_alloc(NULL, &t, &x, NULL), 0);
  size_t ves = lm_dtype_size(vt), xes = lm_dtype_size(xt);
  uint64_t s = 3;
  for (int64_t i = 0; i < O * R; i++) lm_store_f64((char *)x->data + i * ves, vt, (double)(tb_rand(&s) % 50)); /* ties */
  tb b;
  tb_init(&b);
  build_argmax(&b, O, R, via_call, vt, xt);
  lm_buffer *out[2];
  lm_err e;
  if (tx_run(&b, true, 1 << 26, &x, 1, out, NULL, &e) != 0) fail_msg("%s", e.msg);
  for (int64_t o = 0; o < O; o++) {
    int64_t best = 0;
    double bv = lm_load_f64((char *)x->data + o * R * ves, vt);
    for (int64_t r = 1; r < R; r++) {
      double v = lm_load_f64((char *)x->data + (o * R + r) * ves, vt);
      if (v > bv) { best = r; bv = v; }
    }
    int64_t mi = lm_load_index((char *)out[1]->data + o * xes, xt, 0);
    double mv = lm_load_f64((char *)out[0]->data + o * ves, vt);
    if (mi != best || mv != bv)
      fail_msg("O=%lld R=%lld output %lld: index %lld value %g, want %lld", (long long)O, (long long)R, (long long)o,
               (long long)mi, mv, (long long)best);
  }
  lm_buffer_release(out[0]);
  lm_buffer_release(out[1]);
  lm_buffer_release(x);
}

static void check_argmax(int64_t O, int64_t R, bool via_call) { check_argmax_t(O, R, via_call, LOOM_DTYPE_F32, LOOM_DTYPE_S32); }

static void test_argmax(void **state) {
  check_argmax_t(5, 7, false, LOOM_DTYPE_S16, LOOM_DTYPE_S64);   /* mixed element sizes, wide path */
  check_argmax_t(300, 3, false, LOOM_DTYPE_S8, LOOM_DTYPE_S64);
  check_argmax_t(3, 700, false, LOOM_DTYPE_BF16, LOOM_DTYPE_U16);
  check_argmax(300, 7, false);   /* wide: all outputs at once */
  check_argmax(3, 1000, false);  /* lanes: contiguous chunks folded, then combined pairwise */
  check_argmax(1, 257, false);
  check_argmax(5, 33, true);     /* body calls a function: element-by-element region path */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sum_patterns_f32),
      cmocka_unit_test(test_types_and_ops),
      cmocka_unit_test(test_argmax),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
