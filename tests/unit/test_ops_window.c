/* Unit tests for reduce_window and select_and_scatter (src/exec/window.c): the spec's examples,
 * random window configurations (strides, base and window dilations, positive and negative
 * padding) against a literal reference of the spec's definition (pad with init, dilate, slice,
 * fold), the vectorized binop path against the generic region path, two-operand bodies. */
#include "test_ops_build.h"

typedef struct wcfg {
  int rank;
  int64_t dims[4], wdim[4], stride[4], bdil[4], wdil[4], lo[4], hi[4];
} wcfg;

static void out_dims(const wcfg *c, int64_t *od) {
  for (int d = 0; d < c->rank; d++) {
    int64_t dil = c->dims[d] == 0 ? 0 : (c->dims[d] - 1) * c->bdil[d] + 1;
    int64_t padded = c->lo[d] + dil + c->hi[d];
    int64_t dw = (c->wdim[d] - 1) * c->wdil[d] + 1;
    od[d] = (padded <= 0 || dw > padded) ? 0 : (padded - dw) / c->stride[d] + 1;
  }
}

static void add_window_attrs(tb *b, lm_op *op, const wcfg *c, bool dil) {
  tb_ints(b, op, "window_dimensions", c->rank, c->wdim);
  tb_ints(b, op, "window_strides", c->rank, c->stride);
  if (dil) {
    tb_ints(b, op, "base_dilations", c->rank, c->bdil);
    tb_ints(b, op, "window_dilations", c->rank, c->wdil);
  }
  int64_t pad[8];
  for (int d = 0; d < c->rank; d++) { pad[2 * d] = c->lo[d]; pad[2 * d + 1] = c->hi[d]; }
  tb_dense_i64(b, op, "padding", c->rank, 2, pad);
}

/* Reference: the padded-and-dilated input value at padded position p (init where padding/hole). */
static double padded_at(const wcfg *c, const double *x, const int64_t *p, double init) {
  int64_t f = 0;
  for (int d = 0; d < c->rank; d++) {
    int64_t q = p[d] - c->lo[d];
    if (q < 0 || q % c->bdil[d] || q / c->bdil[d] >= c->dims[d]) return init;
    f = f * c->dims[d] + q / c->bdil[d];
  }
  return x[f];
}

static double fold(lm_opcode op, double a, double b) {
  switch (op) {
    case LM_OP_ADD: return a + b;
    case LM_OP_MAXIMUM: return a > b ? a : b;
    case LM_OP_MINIMUM: return a < b ? a : b;
    default: return a * b;
  }
}

static void check_reduce_window(const wcfg *c, lm_opcode bop, lm_dtype dt, double init, bool generic) {
  int64_t od[4];
  out_dims(c, od);
  lm_type it, ot;
  lm_type_tensor(&it, dt, c->rank, c->dims);
  lm_type_tensor(&ot, dt, c->rank, od);
  tb b;
  tb_init(&b);
  uint32_t ins[2] = {tb_arg(&b, it), tb_arg(&b, T0(dt))};
  lm_op *op = tb_op(&b, b.body, LM_OP_REDUCE_WINDOW, 2, ins, 1, &ot);
  add_window_attrs(&b, op, c, true);
  tb_binop_region(&b, op, bop, dt);
  tb_finish(&b, 1, op->out);
  int64_t n = lm_type_numel(&it), no = lm_type_numel(&ot);
  double *x = malloc((n + 1) * sizeof *x);
  uint64_t s = 5;
  lm_buffer *args[2] = {tb_buf_iota(it, 0, 0), tb_buf_iota(T0(dt), 0, init)};
  size_t es = lm_dtype_size(dt);
  for (int64_t i = 0; i < n; i++) {
    x[i] = (double)(tb_rand(&s) % 9) - 4;
    if (bop == LM_OP_MULTIPLY) x[i] = x[i] > 0 ? 2 : x[i] < 0 ? -1 : 1;
    lm_store_f64((char *)args[0]->data + i * es, dt, x[i]);
  }
  lm_ops_generic_only = generic;
  lm_buffer *y = tb_run1(&b, args, 2);
  lm_ops_generic_only = 0;
  int64_t r[4] = {0};
  for (int64_t o = 0; o < no; o++, lm_index_next(c->rank, od, r)) {
    double acc = init;
    int64_t k[4] = {0};
    int64_t wn = 1;
    for (int d = 0; d < c->rank; d++) wn *= c->wdim[d];
    for (int64_t q = 0; q < wn; q++, lm_index_next(c->rank, c->wdim, k)) {
      int64_t p[4];
      for (int d = 0; d < c->rank; d++) p[d] = r[d] * c->stride[d] + k[d] * c->wdil[d];
      unsigned char tmp[16];
      lm_store_f64(tmp, dt, fold(bop, acc, padded_at(c, x, p, init))); /* wrap / round like the dtype */
      acc = lm_load_f64(tmp, dt);
    }
    double got = lm_load_f64((char *)y->data + o * es, dt);
    if (got != acc) fail_msg("reduce_window %s%s: result %lld is %g, want %g", lm_dtype_name(dt), generic ? " generic" : "",
                             (long long)o, got, acc);
  }
  lm_buffer_release(y);
  lm_buffer_release(args[0]);
  lm_buffer_release(args[1]);
  free(x);
}

static void test_reduce_window_spec_example(void **state) {
  /* input [[1,2],[3,4],[5,6]], init 0, window [2,1], strides [4,1], base dil [2,1], window dil [3,1],
   * padding [[2,1],[0,0]] -> [[0,0],[3,4]] */
  wcfg c = {.rank = 2, .dims = {3, 2}, .wdim = {2, 1}, .stride = {4, 1}, .bdil = {2, 1}, .wdil = {3, 1}, .lo = {2, 0}, .hi = {1, 0}};
  tb b;
  tb_init(&b);
  lm_type it = T2(LOOM_DTYPE_S32, 3, 2), ot = T2(LOOM_DTYPE_S32, 2, 2);
  uint32_t ins[2] = {tb_arg(&b, it), tb_arg(&b, T0(LOOM_DTYPE_S32))};
  lm_op *op = tb_op(&b, b.body, LM_OP_REDUCE_WINDOW, 2, ins, 1, &ot);
  add_window_attrs(&b, op, &c, true);
  tb_binop_region(&b, op, LM_OP_ADD, LOOM_DTYPE_S32);
  tb_finish(&b, 1, op->out);
  lm_buffer *args[2] = {tb_buf_iota(it, 1, 1), tb_buf_iota(T0(LOOM_DTYPE_S32), 0, 0)};
  lm_buffer *y = tb_run1(&b, args, 2);
  int32_t want[4] = {0, 0, 3, 4};
  assert_buf_eq_bytes(y, want, sizeof want);
  lm_buffer_release(y);
  lm_buffer_release(args[0]);
  lm_buffer_release(args[1]);
}

static void test_reduce_window_random(void **state) {
  wcfg cs[] = {
      /* 2x2 max pool, stride 2 */
      {.rank = 2, .dims = {6, 8}, .wdim = {2, 2}, .stride = {2, 2}, .bdil = {1, 1}, .wdil = {1, 1}},
      /* 3x3 same-padding pool with stride 1 */
      {.rank = 2, .dims = {5, 7}, .wdim = {3, 3}, .stride = {1, 1}, .bdil = {1, 1}, .wdil = {1, 1}, .lo = {1, 1}, .hi = {1, 1}},
      /* cumulative sum pattern: window n with n-1 low padding */
      {.rank = 1, .dims = {9}, .wdim = {9}, .stride = {1}, .bdil = {1}, .wdil = {1}, .lo = {8}, .hi = {0}},
      /* dilations, negative padding, 3-D */
      {.rank = 3, .dims = {4, 5, 6}, .wdim = {2, 3, 2}, .stride = {1, 2, 3}, .bdil = {2, 1, 3}, .wdil = {1, 2, 2},
       .lo = {1, -1, 2}, .hi = {0, 2, -3}},
      {.rank = 2, .dims = {3, 10}, .wdim = {1, 4}, .stride = {1, 3}, .bdil = {1, 2}, .wdil = {1, 1}, .lo = {0, 3}, .hi = {0, 1}},
  };
  lm_opcode ops[] = {LM_OP_ADD, LM_OP_MAXIMUM, LM_OP_MINIMUM, LM_OP_MULTIPLY};
  lm_dtype dts[] = {LOOM_DTYPE_F32, LOOM_DTYPE_S32, LOOM_DTYPE_BF16, LOOM_DTYPE_F64, LOOM_DTYPE_S8};
  for (size_t i = 0; i < sizeof cs / sizeof *cs; i++)
    for (size_t o = 0; o < 4; o++)
      for (size_t t = 0; t < 5; t++) {
        double init = ops[o] == LM_OP_ADD ? (t == 0 ? 0.5 : 1) : ops[o] == LM_OP_MULTIPLY ? 1 : ops[o] == LM_OP_MAXIMUM ? -100 : 100;
        check_reduce_window(&cs[i], ops[o], dts[t], init, false);
        if (t < 2 && o < 2) check_reduce_window(&cs[i], ops[o], dts[t], init, true);
      }
}

static void build_argmax(tb *b) {
  tb_init(b);
  lm_type it = T1(LOOM_DTYPE_F32, 7), ii = T1(LOOM_DTYPE_S32, 7), ot = T1(LOOM_DTYPE_F32, 3), oi = T1(LOOM_DTYPE_S32, 3);
  uint32_t ins[4] = {tb_arg(b, it), tb_arg(b, ii), tb_arg(b, T0(LOOM_DTYPE_F32)), tb_arg(b, T0(LOOM_DTYPE_S32))};
  lm_type outs[2] = {ot, oi};
  lm_op *op = tb_op(b, b->body, LM_OP_REDUCE_WINDOW, 4, ins, 2, outs);
  tb_ints(b, op, "window_dimensions", 1, (int64_t[]){3});
  tb_ints(b, op, "window_strides", 1, (int64_t[]){2});
  lm_type at[4] = {T0(LOOM_DTYPE_F32), T0(LOOM_DTYPE_S32), T0(LOOM_DTYPE_F32), T0(LOOM_DTYPE_S32)};
  lm_block *blk = tb_region(b, op, 4, at);
  /* keep acc if acc >= x else take x */
  lm_type pt = T0(LOOM_DTYPE_PRED);
  uint32_t cin[2] = {blk->args[0], blk->args[2]};
  lm_op *cmp = tb_op(b, blk, LM_OP_COMPARE, 2, cin, 1, &pt);
  tb_enum(b, cmp, "comparison_direction", "GE");
  uint32_t s0[3] = {cmp->out[0], blk->args[0], blk->args[2]}, s1[3] = {cmp->out[0], blk->args[1], blk->args[3]};
  lm_op *v = tb_op(b, blk, LM_OP_SELECT, 3, s0, 1, &at[0]);
  lm_op *ix = tb_op(b, blk, LM_OP_SELECT, 3, s1, 1, &at[1]);
  uint32_t ret[2] = {v->out[0], ix->out[0]};
  tb_return(b, blk, 2, ret);
  tb_finish(b, 2, op->out);
}

static void test_reduce_window_two_operands(void **state) {
  /* (max value, index of max) pooling over windows of 3, stride 2; compiled and region bodies */
  float xv[7] = {3, 1, 4, 1, 5, 9, 2};
  float ninf = -1e30f;
  int32_t neg = -1;
  for (int generic = 0; generic < 2; generic++) {
    tb b;
    build_argmax(&b);
    lm_buffer *args[4] = {tb_buf(T1(LOOM_DTYPE_F32, 7), xv), tb_buf_iota(T1(LOOM_DTYPE_S32, 7), 1, 0),
                          tb_buf(T0(LOOM_DTYPE_F32), &ninf), tb_buf(T0(LOOM_DTYPE_S32), &neg)};
    lm_ops_generic_only = generic;
    tb_run_result r = tb_run(&b, args, 4);
    lm_ops_generic_only = 0;
    if (r.rc) fail_msg("%s", r.err.msg);
    float wv[3] = {4, 5, 9};
    int32_t wi[3] = {2, 4, 5};
    assert_buf_eq_bytes(r.out[0], wv, sizeof wv);
    assert_buf_eq_bytes(r.out[1], wi, sizeof wi);
    tb_run_release(&r);
    for (int i = 0; i < 4; i++) lm_buffer_release(args[i]);
  }
}

/* ---- select_and_scatter ---- */

static void build_sas(tb *b, const wcfg *c, lm_dtype dt, const char *dir, lm_opcode scatter) {
  int64_t od[4];
  out_dims(c, od);
  lm_type at, st;
  lm_type_tensor(&at, dt, c->rank, c->dims);
  lm_type_tensor(&st, dt, c->rank, od);
  tb_init(b);
  uint32_t ins[3] = {tb_arg(b, at), tb_arg(b, st), tb_arg(b, T0(dt))};
  lm_op *op = tb_op(b, b->body, LM_OP_SELECT_AND_SCATTER, 3, ins, 1, &at);
  add_window_attrs(b, op, c, false);
  lm_type s2[2] = {T0(dt), T0(dt)};
  lm_block *sel = tb_region(b, op, 2, s2);
  lm_type pt = T0(LOOM_DTYPE_PRED);
  lm_op *cmp = tb_op(b, sel, LM_OP_COMPARE, 2, sel->args, 1, &pt);
  tb_enum(b, cmp, "comparison_direction", dir);
  tb_return(b, sel, 1, cmp->out);
  tb_binop_region(b, op, scatter, dt);
  tb_finish(b, 1, op->out);
}

static void test_select_and_scatter_spec_example(void **state) {
  wcfg c = {.rank = 2, .dims = {4, 2}, .wdim = {3, 1}, .stride = {2, 1}, .bdil = {1, 1}, .wdil = {1, 1}, .lo = {0, 0}, .hi = {1, 0}};
  for (int generic = 0; generic < 2; generic++) {
    tb b;
    build_sas(&b, &c, LOOM_DTYPE_S32, "GE", LM_OP_ADD);
    int32_t a[8] = {1, 5, 2, 5, 3, 6, 4, 4}, s[4] = {5, 6, 7, 8}, z = 0;
    lm_buffer *args[3] = {tb_buf(T2(LOOM_DTYPE_S32, 4, 2), a), tb_buf(T2(LOOM_DTYPE_S32, 2, 2), s), tb_buf(T0(LOOM_DTYPE_S32), &z)};
    lm_ops_generic_only = generic;
    lm_buffer *y = tb_run1(&b, args, 3);
    lm_ops_generic_only = 0;
    int32_t want[8] = {0, 0, 0, 0, 5, 14, 7, 0};
    assert_buf_eq_bytes(y, want, sizeof want);
    lm_buffer_release(y);
    for (int i = 0; i < 3; i++) lm_buffer_release(args[i]);
  }
}

static void test_select_and_scatter_random(void **state) {
  /* max-pool gradient: select GE (first max wins), scatter add; reference computed directly */
  wcfg cs[] = {
      {.rank = 2, .dims = {6, 6}, .wdim = {2, 2}, .stride = {2, 2}, .bdil = {1, 1}, .wdil = {1, 1}},
      {.rank = 2, .dims = {5, 7}, .wdim = {3, 3}, .stride = {2, 1}, .bdil = {1, 1}, .wdil = {1, 1}, .lo = {1, 1}, .hi = {1, 0}},
      {.rank = 3, .dims = {2, 4, 5}, .wdim = {1, 3, 2}, .stride = {1, 1, 2}, .bdil = {1, 1, 1}, .wdil = {1, 1, 1}, .lo = {0, 2, 0}, .hi = {0, 0, 1}},
  };
  for (size_t i = 0; i < sizeof cs / sizeof *cs; i++)
    for (int generic = 0; generic < 2; generic++) {
      const wcfg *c = &cs[i];
      int64_t od[4];
      out_dims(c, od);
      lm_type at, st;
      lm_type_tensor(&at, LOOM_DTYPE_F32, c->rank, c->dims);
      lm_type_tensor(&st, LOOM_DTYPE_F32, c->rank, od);
      tb b;
      build_sas(&b, c, LOOM_DTYPE_F32, "GE", LM_OP_ADD);
      int64_t n = lm_type_numel(&at), ns = lm_type_numel(&st);
      float *x = malloc(n * 4), *sv = malloc(ns * 4), *want = calloc(n, 4);
      uint64_t s = 17 + i;
      for (int64_t q = 0; q < n; q++) x[q] = (float)(tb_rand(&s) % 5);
      for (int64_t q = 0; q < ns; q++) sv[q] = (float)(q + 1);
      for (int64_t q = 0; q < n; q++) want[q] = 0.25f;
      int64_t si[4] = {0};
      for (int64_t q = 0; q < ns; q++, lm_index_next(c->rank, od, si)) {
        int64_t best = -1, k[4] = {0}, wn = 1;
        for (int d = 0; d < c->rank; d++) wn *= c->wdim[d];
        for (int64_t t = 0; t < wn; t++, lm_index_next(c->rank, c->wdim, k)) {
          int64_t f = 0;
          bool ok = true;
          for (int d = 0; d < c->rank; d++) {
            int64_t p = si[d] * c->stride[d] + k[d] - c->lo[d];
            if (p < 0 || p >= c->dims[d]) ok = false;
            f = f * c->dims[d] + p;
          }
          if (ok && (best < 0 || x[f] > x[best])) best = f;
        }
        if (best >= 0) want[best] += sv[q];
      }
      float init = 0.25f;
      lm_buffer *args[3] = {tb_buf(at, x), tb_buf(st, sv), tb_buf(T0(LOOM_DTYPE_F32), &init)};
      lm_ops_generic_only = generic;
      lm_buffer *y = tb_run1(&b, args, 3);
      lm_ops_generic_only = 0;
      assert_buf_eq_bytes(y, want, n * 4);
      lm_buffer_release(y);
      for (int q = 0; q < 3; q++) lm_buffer_release(args[q]);
      free(x);
      free(sv);
      free(want);
    }
}

static void test_window_verify(void **state) {
  wcfg c = {.rank = 1, .dims = {5}, .wdim = {2}, .stride = {0}, .bdil = {1}, .wdil = {1}};
  tb b;
  tb_init(&b);
  lm_type it = T1(LOOM_DTYPE_F32, 5), ot = T1(LOOM_DTYPE_F32, 4);
  uint32_t ins[2] = {tb_arg(&b, it), tb_arg(&b, T0(LOOM_DTYPE_F32))};
  lm_op *op = tb_op(&b, b.body, LM_OP_REDUCE_WINDOW, 2, ins, 1, &ot);
  add_window_attrs(&b, op, &c, true);
  tb_binop_region(&b, op, LM_OP_ADD, LOOM_DTYPE_F32);
  tb_finish(&b, 1, op->out);
  lm_buffer *args[2] = {tb_buf_iota(it, 1, 0), tb_buf_iota(T0(LOOM_DTYPE_F32), 0, 0)};
  tb_expect_error(&b, args, 2, LOOM_VERIFY, "must be positive");
  c.stride[0] = 1;
  tb_init(&b);
  ins[0] = tb_arg(&b, it);
  ins[1] = tb_arg(&b, T0(LOOM_DTYPE_F32));
  lm_type bad = T1(LOOM_DTYPE_F32, 3);
  op = tb_op(&b, b.body, LM_OP_REDUCE_WINDOW, 2, ins, 1, &bad);
  add_window_attrs(&b, op, &c, true);
  tb_binop_region(&b, op, LM_OP_ADD, LOOM_DTYPE_F32);
  tb_finish(&b, 1, op->out);
  tb_expect_error(&b, args, 2, LOOM_VERIFY, "expected tensor<4xf32>");
  lm_buffer_release(args[0]);
  lm_buffer_release(args[1]);
}

int main(void) {
  tb_ensure_stub_kernels();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reduce_window_spec_example), cmocka_unit_test(test_reduce_window_random),
      cmocka_unit_test(test_reduce_window_two_operands), cmocka_unit_test(test_select_and_scatter_spec_example),
      cmocka_unit_test(test_select_and_scatter_random),  cmocka_unit_test(test_window_verify),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
