/* Unit tests for the misc family (src/exec/misc.c): tuples, optimization_barrier, tokens,
 * replica_id / partition_id from the run options, custom_call dispatch (identity targets,
 * @shape_assertion, unknown targets named in the error, handlers registered from outside), and
 * batch_norm_inference / training / grad against a double-precision reference. */
#include <math.h>
#include "test_ops_build.h"

static void test_tuple_roundtrip(void **state) {
  tb b;
  tb_init(&b);
  lm_type t0 = T1(LOOM_DTYPE_F32, 3), t1 = T0(LOOM_DTYPE_S64);
  uint32_t ins[2] = {tb_arg(&b, t0), tb_arg(&b, t1)};
  lm_type tup = {0};
  tup.kind = LM_TYPE_TUPLE;
  tup.ntuple = 2;
  tup.tuple = tb_alloc(&b, 2 * sizeof(lm_type));
  tup.tuple[0] = t0;
  tup.tuple[1] = t1;
  lm_op *t = tb_op(&b, b.body, LM_OP_TUPLE, 2, ins, 1, &tup);
  lm_op *g = tb_op(&b, b.body, LM_OP_GET_TUPLE_ELEMENT, 1, t->out, 1, &t1);
  tb_int(&b, g, "index", 1);
  lm_type two[2] = {t0, t1};
  uint32_t bin[2] = {ins[0], g->out[0]};
  lm_op *ob = tb_op(&b, b.body, LM_OP_OPTIMIZATION_BARRIER, 2, bin, 2, two);
  tb_finish(&b, 2, ob->out);
  int64_t v = 42;
  lm_buffer *args[2] = {tb_buf_iota(t0, 1, 0), tb_buf(t1, &v)};
  tb_run_result r = tb_run(&b, args, 2);
  if (r.rc) fail_msg("%s", r.err.msg);
  assert_int_equal(*(int64_t *)r.out[1]->data, 42);
  assert_buf_eq_bytes(r.out[0], args[0]->data, 12);
  tb_run_release(&r);
  lm_buffer_release(args[0]);
  lm_buffer_release(args[1]);

  /* index out of range is refused */
  tb_init(&b);
  ins[0] = tb_arg(&b, t0);
  ins[1] = tb_arg(&b, t1);
  tup.tuple = tb_alloc(&b, 2 * sizeof(lm_type));
  tup.tuple[0] = t0;
  tup.tuple[1] = t1;
  t = tb_op(&b, b.body, LM_OP_TUPLE, 2, ins, 1, &tup);
  g = tb_op(&b, b.body, LM_OP_GET_TUPLE_ELEMENT, 1, t->out, 1, &t1);
  tb_int(&b, g, "index", 2);
  tb_finish(&b, 1, g->out);
  lm_buffer *a2[2] = {tb_buf_iota(t0, 1, 0), tb_buf(t1, &v)};
  tb_expect_error(&b, a2, 2, LOOM_VERIFY, "index 2 is outside [0, 2)");
  lm_buffer_release(a2[0]);
  lm_buffer_release(a2[1]);
}

static void test_tokens_and_ids(void **state) {
  tb b;
  tb_init(&b);
  lm_type tok = {0};
  tok.kind = LM_TYPE_TOKEN;
  lm_op *c = tb_op(&b, b.body, LM_OP_CREATE_TOKEN, 0, NULL, 1, &tok);
  uint32_t two[2] = {c->out[0], c->out[0]};
  lm_op *aa = tb_op(&b, b.body, LM_OP_AFTER_ALL, 2, two, 1, &tok);
  lm_type u = T0(LOOM_DTYPE_U32);
  lm_op *ri = tb_op(&b, b.body, LM_OP_REPLICA_ID, 0, NULL, 1, &u);
  lm_op *pi = tb_op(&b, b.body, LM_OP_PARTITION_ID, 0, NULL, 1, &u);
  uint32_t outs[3] = {aa->out[0], ri->out[0], pi->out[0]};
  tb_finish(&b, 3, outs);
  lm_run_opts o = {.replica_id = 3, .partition_id = 5};
  tb_run_result r = tb_run_opts(&b, NULL, 0, &o);
  if (r.rc) fail_msg("%s", r.err.msg);
  assert_int_equal(r.out[0]->type.kind, LM_TYPE_TOKEN);
  assert_int_equal(*(uint32_t *)r.out[1]->data, 3);
  assert_int_equal(*(uint32_t *)r.out[2]->data, 5);
  tb_run_release(&r);
}

static lm_op *custom_call(tb *b, const char *target, uint32_t nin, const uint32_t *ins, uint32_t nout, const lm_type *outs) {
  lm_op *op = tb_op(b, b->body, LM_OP_CUSTOM_CALL, nin, ins, nout, outs);
  tb_string(b, op, "call_target_name", target);
  return op;
}

static int double_it(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  for (int i = 0; i < 3; i++) ((float *)out[0]->data)[i] = 2 * ((float *)in[0]->data)[i];
  return 0;
}

static void test_custom_call(void **state) {
  lm_type t = T1(LOOM_DTYPE_F32, 3);
  /* identity targets */
  tb b;
  tb_init(&b);
  uint32_t a = tb_arg(&b, t);
  lm_op *s = custom_call(&b, "Sharding", 1, &a, 1, &t);
  tb_string(&b, s, "mhlo.sharding", "{replicated}");
  lm_op *m = custom_call(&b, "SPMDFullToShardShape", 1, s->out, 1, &t);
  tb_finish(&b, 1, m->out);
  lm_buffer *x = tb_buf_iota(t, 1.5, 0);
  lm_buffer *y = tb_run1(&b, &x, 1);
  assert_buf_eq_bytes(y, x->data, 12);
  lm_buffer_release(y);
  /* an unknown target is named */
  tb_init(&b);
  a = tb_arg(&b, t);
  lm_op *u = custom_call(&b, "xla_python_cpu_callback", 1, &a, 1, &t);
  tb_finish(&b, 1, u->out);
  tb_expect_error(&b, &x, 1, LOOM_UNSUPPORTED, "custom_call target 'xla_python_cpu_callback' is not supported");
  /* a shape-changing SPMD conversion needs the partitioner */
  tb_init(&b);
  a = tb_arg(&b, t);
  lm_type half = T1(LOOM_DTYPE_F32, 1);
  u = custom_call(&b, "SPMDFullToShardShape", 1, &a, 1, &half);
  tb_finish(&b, 1, u->out);
  tb_expect_error(&b, &x, 1, LOOM_UNSUPPORTED, "SPMD partitioner");
  /* a handler registered from outside (as check.c does) */
  lm_custom_call_register("test.double", double_it, NULL, 0);
  tb_init(&b);
  a = tb_arg(&b, t);
  u = custom_call(&b, "test.double", 1, &a, 1, &t);
  tb_finish(&b, 1, u->out);
  y = tb_run1(&b, &x, 1);
  assert_true(((float *)y->data)[2] == 6.0f);
  lm_buffer_release(y);
  /* @shape_assertion */
  for (int ok = 0; ok < 2; ok++) {
    tb_init(&b);
    lm_type p = T0(LOOM_DTYPE_PRED);
    uint32_t pa = tb_arg(&b, p);
    lm_op *sa = custom_call(&b, "shape_assertion", 1, &pa, 0, NULL);
    tb_string(&b, sa, "error_message", "dimension 0 must be even");
    tb_bool(&b, sa, "has_side_effect", 1);
    tb_finish(&b, 0, NULL);
    uint8_t pv = (uint8_t)ok;
    lm_buffer *pb = tb_buf(p, &pv);
    if (ok) {
      tb_run_result r = tb_run(&b, &pb, 1);
      assert_int_equal(r.rc, 0);
    } else {
      tb_expect_error(&b, &pb, 1, LOOM_INVALID_ARGUMENT, "shape assertion failed: dimension 0 must be even");
    }
    lm_buffer_release(pb);
  }
  lm_buffer_release(x);
}

/* ---- batch_norm ---- */

/* A batch_norm_* op (code) with epsilon 1e-3 and feature_index 1. */
static lm_op *bn_op(tb *b, lm_opcode code, uint32_t nin, const uint32_t *ins, uint32_t nout, const lm_type *outs) {
  lm_op *op = tb_op(b, b->body, code, nin, ins, nout, outs);
  lm_attr *e = tb_attr(b, op, "epsilon");
  e->kind = LM_ATTR_FLOAT;
  e->f = 1e-3;
  tb_int(b, op, "feature_index", 1);
  return op;
}

static void test_batch_norm(void **state) {
  /* operand [2, 3, 4] f32, feature_index 1 */
  const int P = 2, F = 3, Q = 4;
  lm_type xt = T3(LOOM_DTYPE_F32, P, F, Q), ft = T1(LOOM_DTYPE_F32, F);
  float x[24], gy[24], sc[3] = {1.5f, -0.5f, 2}, of[3] = {0.1f, 0.2f, -0.3f}, mu[3] = {0.5f, -1, 0}, var[3] = {2, 0.5f, 1};
  uint64_t s = 9;
  for (int i = 0; i < 24; i++) {
    x[i] = (float)((int)(tb_rand(&s) % 17) - 8) * 0.25f;
    gy[i] = (float)((int)(tb_rand(&s) % 11) - 5) * 0.5f;
  }
  double eps = (double)1e-3f;
  /* inference */
  {
    tb b;
    tb_init(&b);
    uint32_t ins[5] = {tb_arg(&b, xt), tb_arg(&b, ft), tb_arg(&b, ft), tb_arg(&b, ft), tb_arg(&b, ft)};
    lm_op *op = bn_op(&b, LM_OP_BATCH_NORM_INFERENCE, 5, ins, 1, &xt);
    tb_finish(&b, 1, op->out);
    lm_buffer *args[5] = {tb_buf(xt, x), tb_buf(ft, sc), tb_buf(ft, of), tb_buf(ft, mu), tb_buf(ft, var)};
    lm_buffer *y = tb_run1(&b, args, 5);
    for (int p = 0; p < P; p++)
      for (int f = 0; f < F; f++)
        for (int q = 0; q < Q; q++) {
          int i = (p * F + f) * Q + q;
          double want = (x[i] - mu[f]) / sqrt(var[f] + eps) * sc[f] + of[f];
          assert_true(fabs(((float *)y->data)[i] - want) < 1e-5);
        }
    lm_buffer_release(y);
    for (int i = 0; i < 5; i++) lm_buffer_release(args[i]);
  }
  /* training */
  {
    tb b;
    tb_init(&b);
    uint32_t ins[3] = {tb_arg(&b, xt), tb_arg(&b, ft), tb_arg(&b, ft)};
    lm_type outs[3] = {xt, ft, ft};
    lm_op *op = bn_op(&b, LM_OP_BATCH_NORM_TRAINING, 3, ins, 3, outs);
    tb_finish(&b, 3, op->out);
    lm_buffer *args[3] = {tb_buf(xt, x), tb_buf(ft, sc), tb_buf(ft, of)};
    tb_run_result r = tb_run(&b, args, 3);
    if (r.rc) fail_msg("%s", r.err.msg);
    for (int f = 0; f < F; f++) {
      double m = 0, v = 0;
      for (int p = 0; p < P; p++)
        for (int q = 0; q < Q; q++) m += x[(p * F + f) * Q + q];
      m /= P * Q;
      for (int p = 0; p < P; p++)
        for (int q = 0; q < Q; q++) v += (x[(p * F + f) * Q + q] - m) * (x[(p * F + f) * Q + q] - m);
      v /= P * Q;
      assert_true(fabs(((float *)r.out[1]->data)[f] - m) < 1e-6);
      assert_true(fabs(((float *)r.out[2]->data)[f] - v) < 1e-6);
      for (int p = 0; p < P; p++)
        for (int q = 0; q < Q; q++) {
          int i = (p * F + f) * Q + q;
          assert_true(fabs(((float *)r.out[0]->data)[i] - ((x[i] - m) / sqrt(v + eps) * sc[f] + of[f])) < 1e-5);
        }
    }
    tb_run_release(&r);
    for (int i = 0; i < 3; i++) lm_buffer_release(args[i]);
  }
  /* grad: compare with a finite-difference-free closed form written out directly */
  {
    tb b;
    tb_init(&b);
    uint32_t ins[5] = {tb_arg(&b, xt), tb_arg(&b, ft), tb_arg(&b, ft), tb_arg(&b, ft), tb_arg(&b, xt)};
    lm_type outs[3] = {xt, ft, ft};
    lm_op *op = bn_op(&b, LM_OP_BATCH_NORM_GRAD, 5, ins, 3, outs);
    tb_finish(&b, 3, op->out);
    lm_buffer *args[5] = {tb_buf(xt, x), tb_buf(ft, sc), tb_buf(ft, mu), tb_buf(ft, var), tb_buf(xt, gy)};
    tb_run_result r = tb_run(&b, args, 5);
    if (r.rc) fail_msg("%s", r.err.msg);
    for (int f = 0; f < F; f++) {
      double sd = sqrt(var[f] + eps), n = P * Q, sg = 0, sgx = 0;
      for (int p = 0; p < P; p++)
        for (int q = 0; q < Q; q++) {
          int i = (p * F + f) * Q + q;
          sg += gy[i];
          sgx += gy[i] * (x[i] - mu[f]) / sd;
        }
      assert_true(fabs(((float *)r.out[2]->data)[f] - sg) < 1e-5);
      assert_true(fabs(((float *)r.out[1]->data)[f] - sgx) < 1e-4);
      for (int p = 0; p < P; p++)
        for (int q = 0; q < Q; q++) {
          int i = (p * F + f) * Q + q;
          double xh = (x[i] - mu[f]) / sd;
          double want = sc[f] / sd * (gy[i] - sg / n - xh * sgx / n);
          assert_true(fabs(((float *)r.out[0]->data)[i] - want) < 1e-4);
        }
    }
    tb_run_release(&r);
    for (int i = 0; i < 5; i++) lm_buffer_release(args[i]);
  }
}

/* dynamic_conv: a 1-D convolution [b, 0, f] x [0, i, o] whose padding comes from an operand */
static void test_dynamic_conv(void **state) {
  for (int bad = 0; bad < 2; bad++) {
    tb b;
    tb_init(&b);
    lm_type lt = T3(LOOM_DTYPE_F32, 1, 4, 1), kt = T3(LOOM_DTYPE_F32, 3, 1, 1), pt = T2(LOOM_DTYPE_S64, 1, 2),
            rt = T3(LOOM_DTYPE_F32, 1, 4, 1);
    uint32_t ins[3] = {tb_arg(&b, lt), tb_arg(&b, kt), tb_arg(&b, pt)};
    lm_op *op = tb_op(&b, b.body, LM_OP_DYNAMIC_CONV, 3, ins, 1, &rt);
    lm_attr *dn = tb_struct(&b, op, "dimension_numbers", "stablehlo.conv");
    tb_field_int(&b, dn, "input_batch_dimension", 0);
    tb_field_int(&b, dn, "input_feature_dimension", 2);
    tb_field_ints(&b, dn, "input_spatial_dimensions", 1, (int64_t[]){1});
    tb_field_int(&b, dn, "kernel_input_feature_dimension", 1);
    tb_field_int(&b, dn, "kernel_output_feature_dimension", 2);
    tb_field_ints(&b, dn, "kernel_spatial_dimensions", 1, (int64_t[]){0});
    tb_field_int(&b, dn, "output_batch_dimension", 0);
    tb_field_int(&b, dn, "output_feature_dimension", 2);
    tb_field_ints(&b, dn, "output_spatial_dimensions", 1, (int64_t[]){1});
    tb_finish(&b, 1, op->out);
    float x[4] = {1, 2, 3, 4}, w[3] = {1, 10, 100};
    int64_t pad[2] = {1, bad ? 2 : 1};
    lm_buffer *args[3] = {tb_buf(lt, x), tb_buf(kt, w), tb_buf(pt, pad)};
    if (bad) {
      tb_expect_error(&b, args, 3, LOOM_VERIFY, "");
    } else {
      lm_buffer *y = tb_run1(&b, args, 3);
      float want[4] = {0 * 1 + 1 * 10 + 2 * 100, 1 + 20 + 300, 2 + 30 + 400, 3 + 40 + 0};
      assert_buf_eq_bytes(y, want, sizeof want);
      lm_buffer_release(y);
    }
    for (int i = 0; i < 3; i++) lm_buffer_release(args[i]);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_tuple_roundtrip),
      cmocka_unit_test(test_tokens_and_ids),
      cmocka_unit_test(test_custom_call),
      cmocka_unit_test(test_batch_norm),
      cmocka_unit_test(test_dynamic_conv),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
