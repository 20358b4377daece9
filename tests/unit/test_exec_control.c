/* Tests of control flow (src/exec/control.c) and map: while with a fused body, if, case with
 * out-of-range indexes, func.call, composite, map with a compiled body and with a body that
 * needs the element-by-element path. */
#include "test_exec_util.h"

static void test_while(void **state) {
  /* i = 0, s = 0; while (i < 10) { s += i * i; i += 1 }  -> s = 285 */
  tb b;
  tb_init(&b);
  lm_type si = T0(LOOM_DTYPE_S32);
  int32_t zero = 0, ten = 10, one = 1;
  uint32_t i0 = tx_const(&b, b.body, si, &zero), lim = tx_const(&b, b.body, si, &ten);
  uint32_t in[2] = {i0, i0};
  lm_type ts[2] = {si, si};
  lm_op *w = tb_op(&b, b.body, LM_OP_WHILE, 2, in, 2, ts);
  lm_block *cond = tb_region(&b, w, 2, ts);
  uint32_t c = tx_cmp(&b, cond, "LT", cond->args[0], lim, si); /* uses a value from outside */
  tb_return(&b, cond, 1, &c);
  lm_block *body = tb_region(&b, w, 2, ts);
  uint32_t sq = tx_bin(&b, body, LM_OP_MULTIPLY, body->args[0], body->args[0], si);
  uint32_t s2 = tx_bin(&b, body, LM_OP_ADD, body->args[1], sq, si);
  uint32_t i2 = tx_bin(&b, body, LM_OP_ADD, body->args[0], tx_const(&b, body, si, &one), si);
  uint32_t ret[2] = {i2, s2};
  tb_return(&b, body, 2, ret);
  tb_finish(&b, 2, w->out);
  lm_buffer *out[2];
  lm_err e;
  if (tx_run(&b, true, 1 << 20, NULL, 0, out, NULL, &e) != 0) fail_msg("%s", e.msg);
  assert_int_equal(*(int32_t *)out[0]->data, 10);
  assert_int_equal(*(int32_t *)out[1]->data, 285);
  lm_buffer_release(out[0]);
  lm_buffer_release(out[1]);
}

/* case(index) over three branches returning 10, 20, 30 */
static int32_t run_case(int32_t idx) {
  tb b;
  tb_init(&b);
  lm_type si = T0(LOOM_DTYPE_S32);
  uint32_t x = tb_arg(&b, si);
  lm_op *c = tb_op(&b, b.body, LM_OP_CASE, 1, &x, 1, &si);
  for (int r = 0; r < 3; r++) {
    lm_block *br = tb_region(&b, c, 0, NULL);
    int32_t v = 10 * (r + 1);
    uint32_t k = tx_const(&b, br, si, &v);
    tb_return(&b, br, 1, &k);
  }
  tb_finish(&b, 1, c->out);
  lm_buffer *arg = tb_buf(si, &idx), *out;
  lm_err e;
  if (tx_run(&b, true, 1 << 20, &arg, 1, &out, NULL, &e) != 0) fail_msg("%s", e.msg);
  int32_t r = *(int32_t *)out->data;
  lm_buffer_release(out);
  lm_buffer_release(arg);
  return r;
}

static void test_case_if(void **state) {
  assert_int_equal(run_case(0), 10);
  assert_int_equal(run_case(1), 20);
  assert_int_equal(run_case(2), 30);
  assert_int_equal(run_case(-1), 30); /* out of range: the last branch (spec 'case') */
  assert_int_equal(run_case(7), 30);
  for (int p = 0; p < 2; p++) {
    tb b;
    tb_init(&b);
    lm_type ps = T0(LOOM_DTYPE_PRED), t = T1(LOOM_DTYPE_F32, 3);
    uint32_t pr = tb_arg(&b, ps), x = tb_arg(&b, t);
    lm_op *op = tb_op(&b, b.body, LM_OP_IF, 1, &pr, 1, &t);
    lm_block *tb_ = tb_region(&b, op, 0, NULL);
    uint32_t d = tx_bin(&b, tb_, LM_OP_ADD, x, x, t);
    tb_return(&b, tb_, 1, &d);
    lm_block *fb = tb_region(&b, op, 0, NULL);
    uint32_t n = tx_un(&b, fb, LM_OP_NEGATE, x, t);
    tb_return(&b, fb, 1, &n);
    tb_finish(&b, 1, op->out);
    uint8_t pv = (uint8_t)p;
    float xv[] = {1, 2, 3};
    lm_buffer *args[2] = {tb_buf(ps, &pv), tb_buf(t, xv)}, *out;
    lm_err e;
    if (tx_run(&b, true, 1 << 20, args, 2, &out, NULL, &e) != 0) fail_msg("%s", e.msg);
    float *o = out->data;
    if (p) assert_true(o[0] == 2 && o[2] == 6);
    else assert_true(o[0] == -1 && o[2] == -3);
    lm_buffer_release(out);
    lm_buffer_release(args[0]);
    lm_buffer_release(args[1]);
  }
}

static void test_call_composite(void **state) {
  tb b;
  tb_init(&b);
  lm_type t = T1(LOOM_DTYPE_F64, 4);
  tx_begin_func(&b, "fma1");
  uint32_t a = tb_arg(&b, t), c = tb_arg(&b, t);
  double onev = 1;
  uint32_t one = tx_bcast(&b, b.body, tx_const(&b, b.body, T0(LOOM_DTYPE_F64), &onev), t, 0, NULL);
  uint32_t r = tx_bin(&b, b.body, LM_OP_ADD, tx_bin(&b, b.body, LM_OP_MULTIPLY, a, c, t), one, t);
  tb_finish(&b, 1, &r);
  tx_end_func(&b);
  uint32_t x = tb_arg(&b, t), y = tb_arg(&b, t);
  uint32_t in[2] = {x, y};
  lm_op *call = tb_op(&b, b.body, LM_OP_FUNC_CALL, 2, in, 1, &t);
  tb_symbol(&b, call, "callee", "fma1");
  uint32_t in2[2] = {call->out[0], y};
  lm_op *comp = tb_op(&b, b.body, LM_OP_COMPOSITE, 2, in2, 1, &t);
  tb_string(&b, comp, "name", "my.fma");
  tb_symbol(&b, comp, "decomposition", "fma1");
  tb_finish(&b, 1, comp->out);
  double xv[] = {1, 2, 3, 4}, yv[] = {2, 2, 2, 2};
  lm_buffer *args[2] = {tb_buf(t, xv), tb_buf(t, yv)}, *out;
  lm_err e;
  if (tx_run(&b, true, 1 << 20, args, 2, &out, NULL, &e) != 0) fail_msg("%s", e.msg);
  double *o = out->data;
  for (int i = 0; i < 4; i++) assert_true(o[i] == (xv[i] * 2 + 1) * 2 + 1);
  lm_buffer_release(out);
  /* a call to a missing function is an error naming it */
  tb_init(&b);
  x = tb_arg(&b, t);
  call = tb_op(&b, b.body, LM_OP_FUNC_CALL, 1, &x, 1, &t);
  tb_symbol(&b, call, "callee", "nowhere");
  tb_finish(&b, 1, call->out);
  assert_int_equal(tx_run(&b, true, 1 << 20, args, 1, &out, NULL, &e), LOOM_NOT_FOUND);
  assert_non_null(strstr(e.msg, "nowhere"));
  lm_buffer_release(args[0]);
  lm_buffer_release(args[1]);
}

static void test_map(void **state) {
  for (int via_call = 0; via_call < 2; via_call++) {
    tb b;
    tb_init(&b);
    lm_type t = T2(LOOM_DTYPE_S64, 2, 2), s = T0(LOOM_DTYPE_S64);
    if (via_call) {
      tx_begin_func(&b, "mul");
      uint32_t p = tb_arg(&b, s), q = tb_arg(&b, s);
      uint32_t r = tx_bin(&b, b.body, LM_OP_MULTIPLY, p, q, s);
      tb_finish(&b, 1, &r);
      tx_end_func(&b);
    }
    uint32_t x = tb_arg(&b, t), y = tb_arg(&b, t);
    uint32_t in[2] = {x, y};
    lm_op *m = tb_op(&b, b.body, LM_OP_MAP, 2, in, 1, &t);
    tb_ints(&b, m, "dimensions", 2, (int64_t[]){0, 1});
    lm_type args_t[2] = {s, s};
    lm_block *blk = tb_region(&b, m, 2, args_t);
    if (via_call) {
      lm_op *c = tb_op(&b, blk, LM_OP_FUNC_CALL, 2, blk->args, 1, &s);
      tb_symbol(&b, c, "callee", "mul");
      tb_return(&b, blk, 1, c->out);
    } else {
      uint32_t r = tx_bin(&b, blk, LM_OP_MULTIPLY, blk->args[0], blk->args[1], s);
      tb_return(&b, blk, 1, &r);
    }
    tb_finish(&b, 1, m->out);
    int64_t xv[] = {0, 1, 2, 3}, yv[] = {4, 5, 6, 7};
    lm_buffer *args[2] = {tb_buf(t, xv), tb_buf(t, yv)}, *out;
    lm_err e;
    if (tx_run(&b, true, 1 << 20, args, 2, &out, NULL, &e) != 0) fail_msg("%s", e.msg);
    int64_t want[] = {0, 5, 12, 21}; /* spec 'map' example */
    assert_memory_equal(out->data, want, sizeof want);
    lm_buffer_release(out);
    lm_buffer_release(args[0]);
    lm_buffer_release(args[1]);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_while),
      cmocka_unit_test(test_case_if),
      cmocka_unit_test(test_call_composite),
      cmocka_unit_test(test_map),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
