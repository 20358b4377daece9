/* Tests of dot_general, dot and convolution (src/exec/dot.c): the BLAS-backed kernels against
 * the naive reference kernels on many layouts (transposes without copies, permuted operands,
 * batches, several contracting dims), every element type, mixed result types, and the spec's
 * convolution example. */
#include <complex.h>
#include "test_exec_util.h"
#include "exec/dot.h"

static lm_buffer *rand_buf(lm_type t, uint64_t seed) {
  lm_buffer *x = NULL;
  assert_int_equal(lm_buffer_alloc(NULL, &t, &x, NULL), 0);
  size_t es = lm_dtype_size(t.dtype);
  for (int64_t i = 0; i < lm_type_numel(&t); i++) {
    double v = (double)(tb_rand(&seed) % 17) - 8; /* small integers: exact in every type */
    if (t.dtype == LOOM_DTYPE_PRED) v = v > 0;
    if (lm_dtype_is_uint(t.dtype)) v = fabs(v);
    lm_store_f64((char *)x->data + i * es, t.dtype, v);
    if (lm_dtype_is_complex(t.dtype)) {
      double im = (double)(tb_rand(&seed) % 9) - 4;
      if (t.dtype == LOOM_DTYPE_C64) ((float *)x->data)[2 * i + 1] = (float)im;
      else ((double *)x->data)[2 * i + 1] = im;
    }
  }
  return x;
}

static void set_dot_dims(tb *b, lm_op *op, int nb, const int64_t *lb, const int64_t *rb, int nc, const int64_t *lc,
                         const int64_t *rc) {
  lm_attr *s = tb_struct(b, op, "dot_dimension_numbers", "stablehlo.dot");
  tb_field_ints(b, s, "lhs_batching_dimensions", nb, lb);
  tb_field_ints(b, s, "rhs_batching_dimensions", nb, rb);
  tb_field_ints(b, s, "lhs_contracting_dimensions", nc, lc);
  tb_field_ints(b, s, "rhs_contracting_dimensions", nc, rc);
}

/* Runs one dot_general and compares with lm_dot_general_ref on the same inputs. */
static void check_dot(lm_type lt, lm_type rt, lm_type ot, int nb, const int64_t *lb, const int64_t *rb, int nc,
                      const int64_t *lc, const int64_t *rc, double tol) {
  tb b;
  tb_init(&b);
  uint32_t x = tb_arg(&b, lt), y = tb_arg(&b, rt);
  uint32_t in[2] = {x, y};
  lm_op *op = tb_op(&b, b.body, LM_OP_DOT_GENERAL, 2, in, 1, &ot);
  set_dot_dims(&b, op, nb, lb, rb, nc, lc, rc);
  tb_finish(&b, 1, op->out);
  lm_buffer *args[2] = {rand_buf(lt, 11), rand_buf(rt, 23)}, *out = NULL;
  lm_err e;
  if (tx_run(&b, true, 1 << 26, args, 2, &out, NULL, &e) != 0) fail_msg("%s", e.msg);
  lm_buffer *ref = NULL;
  assert_int_equal(lm_buffer_alloc(NULL, &ot, &ref, NULL), 0);
  lm_dot_dims d = {.nb = nb, .nc = nc};
  for (int i = 0; i < nb; i++) { d.lb[i] = lb[i]; d.rb[i] = rb[i]; }
  for (int i = 0; i < nc; i++) { d.lc[i] = lc[i]; d.rc[i] = rc[i]; }
  lm_dot_general_ref(args[0], args[1], &d, ref);
  size_t es = lm_dtype_size(ot.dtype);
  for (int64_t i = 0; i < lm_type_numel(&ot); i++) {
    double a = lm_load_f64((char *)out->data + i * es, ot.dtype), w = lm_load_f64((char *)ref->data + i * es, ot.dtype);
    if (fabs(a - w) > tol * (1 + fabs(w))) fail_msg("%s element %lld: %g, want %g", lm_dtype_name(ot.dtype), (long long)i, a, w);
    if (lm_dtype_is_complex(ot.dtype)) {
      double ai = ot.dtype == LOOM_DTYPE_C64 ? ((float *)out->data)[2 * i + 1] : ((double *)out->data)[2 * i + 1];
      double wi = ot.dtype == LOOM_DTYPE_C64 ? ((float *)ref->data)[2 * i + 1] : ((double *)ref->data)[2 * i + 1];
      if (fabs(ai - wi) > tol * (1 + fabs(wi))) fail_msg("imag element %lld: %g, want %g", (long long)i, ai, wi);
    }
  }
  lm_buffer_release(args[0]);
  lm_buffer_release(args[1]);
  lm_buffer_release(out);
  lm_buffer_release(ref);
}

static void test_dot_layouts(void **state) {
  lm_dtype f = LOOM_DTYPE_F32;
  /* [M,K] x [K,N] */
  check_dot(T2(f, 5, 7), T2(f, 7, 3), T2(f, 5, 3), 0, NULL, NULL, 1, (int64_t[]){1}, (int64_t[]){0}, 1e-6);
  /* lhs transposed [K,M], rhs transposed [N,K] */
  check_dot(T2(f, 7, 5), T2(f, 3, 7), T2(f, 5, 3), 0, NULL, NULL, 1, (int64_t[]){0}, (int64_t[]){1}, 1e-6);
  /* batch dims leading */
  check_dot(T3(f, 4, 5, 6), T3(f, 4, 6, 2), T3(f, 4, 5, 2), 1, (int64_t[]){0}, (int64_t[]){0}, 1, (int64_t[]){2},
            (int64_t[]){1}, 1e-6);
  /* batch dim in the middle (needs a permuted copy) */
  check_dot(T3(f, 5, 4, 6), T3(f, 6, 4, 2), T3(f, 4, 5, 2), 1, (int64_t[]){1}, (int64_t[]){1}, 1, (int64_t[]){2},
            (int64_t[]){0}, 1e-6);
  /* two contracting dims, given in swapped order on one side */
  check_dot(T3(f, 3, 4, 5), T3(f, 5, 4, 2), T2(f, 3, 2), 0, NULL, NULL, 2, (int64_t[]){1, 2}, (int64_t[]){1, 0}, 1e-6);
  /* outer product (no contraction), and a full contraction to a scalar */
  check_dot(T1(f, 4), T1(f, 3), T2(f, 4, 3), 0, NULL, NULL, 0, NULL, NULL, 1e-6);
  check_dot(T2(f, 4, 3), T2(f, 4, 3), T0(f), 0, NULL, NULL, 2, (int64_t[]){0, 1}, (int64_t[]){0, 1}, 1e-6);
  /* size-zero contraction gives zeros */
  check_dot(T2(f, 3, 0), T2(f, 0, 2), T2(f, 3, 2), 0, NULL, NULL, 1, (int64_t[]){1}, (int64_t[]){0}, 0);
}

static void test_dot_types(void **state) {
  lm_dtype ts[] = {LOOM_DTYPE_F64, LOOM_DTYPE_C64, LOOM_DTYPE_C128, LOOM_DTYPE_F16, LOOM_DTYPE_BF16, LOOM_DTYPE_S32,
                   LOOM_DTYPE_S8, LOOM_DTYPE_U16, LOOM_DTYPE_U64, LOOM_DTYPE_S64, LOOM_DTYPE_PRED};
  for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) {
    lm_dtype t = ts[i];
    check_dot(T2(t, 4, 3), T2(t, 3, 6), T2(t, 4, 6), 0, NULL, NULL, 1, (int64_t[]){1}, (int64_t[]){0}, 0);
    check_dot(T3(t, 2, 3, 4), T3(t, 2, 5, 3), T3(t, 2, 4, 5), 1, (int64_t[]){0}, (int64_t[]){0}, 1, (int64_t[]){1},
              (int64_t[]){2}, 0);
  }
  /* preferred element types: bf16 x bf16 -> f32, s8 x s8 -> s32 */
  check_dot(T2(LOOM_DTYPE_BF16, 4, 3), T2(LOOM_DTYPE_BF16, 3, 5), T2(LOOM_DTYPE_F32, 4, 5), 0, NULL, NULL, 1,
            (int64_t[]){1}, (int64_t[]){0}, 0);
  check_dot(T2(LOOM_DTYPE_S8, 4, 3), T2(LOOM_DTYPE_S8, 3, 5), T2(LOOM_DTYPE_S32, 4, 5), 0, NULL, NULL, 1, (int64_t[]){1},
            (int64_t[]){0}, 0);
}

static void test_dot_large_f32(void **state) {
  /* big enough for OpenBLAS's blocked paths; random floats, relative tolerance */
  lm_dtype f = LOOM_DTYPE_F32;
  check_dot(T2(f, 67, 300), T2(f, 300, 45), T2(f, 67, 45), 0, NULL, NULL, 1, (int64_t[]){1}, (int64_t[]){0}, 1e-5);
  check_dot(T2(f, 300, 67), T2(f, 45, 300), T2(f, 67, 45), 0, NULL, NULL, 1, (int64_t[]){0}, (int64_t[]){1}, 1e-5);
}

static void test_legacy_dot_and_errors(void **state) {
  tb b;
  tb_init(&b);
  lm_type v = T1(LOOM_DTYPE_F32, 3), m = T2(LOOM_DTYPE_F32, 3, 2), r = T1(LOOM_DTYPE_F32, 2);
  uint32_t x = tb_arg(&b, v), y = tb_arg(&b, m);
  uint32_t in[2] = {x, y};
  lm_op *op = tb_op(&b, b.body, LM_OP_DOT, 2, in, 1, &r);
  tb_finish(&b, 1, op->out);
  float xv[] = {1, 2, 3}, mv[] = {1, 2, 3, 4, 5, 6};
  lm_buffer *args[2] = {tb_buf(v, xv), tb_buf(m, mv)}, *out;
  lm_err e;
  assert_int_equal(tx_run(&b, true, 1 << 20, args, 2, &out, NULL, &e), 0);
  float *o = out->data;
  assert_true(o[0] == 22 && o[1] == 28);
  lm_buffer_release(out);
  /* mismatched contracting sizes are a verification error */
  tb_init(&b);
  x = tb_arg(&b, T2(LOOM_DTYPE_F32, 3, 4));
  y = tb_arg(&b, T2(LOOM_DTYPE_F32, 5, 2));
  uint32_t in2[2] = {x, y};
  lm_type rt = T2(LOOM_DTYPE_F32, 3, 2);
  op = tb_op(&b, b.body, LM_OP_DOT_GENERAL, 2, in2, 1, &rt);
  set_dot_dims(&b, op, 0, NULL, NULL, 1, (int64_t[]){1}, (int64_t[]){0});
  tb_finish(&b, 1, op->out);
  assert_int_equal(tx_run(&b, true, 1 << 20, NULL, 0, &out, NULL, &e), LOOM_VERIFY);
  assert_non_null(strstr(e.msg, "C10, C11"));
  lm_buffer_release(args[0]);
  lm_buffer_release(args[1]);
}

/* transpose(dot_general(a, b)) swapping the free dims is computed as one transposed dot */
static void build_dot_transpose(tb *b, bool extra_use) {
  lm_type at = T2(LOOM_DTYPE_F32, 5, 7), bt = T2(LOOM_DTYPE_F32, 5, 3), dt = T2(LOOM_DTYPE_F32, 7, 3), trt = T2(LOOM_DTYPE_F32, 3, 7);
  uint32_t x = tb_arg(b, at), y = tb_arg(b, bt);
  uint32_t in[2] = {x, y};
  lm_op *d = tb_op(b, b->body, LM_OP_DOT_GENERAL, 2, in, 1, &dt);
  set_dot_dims(b, d, 0, NULL, NULL, 1, (int64_t[]){0}, (int64_t[]){0});
  lm_op *t = tb_op(b, b->body, LM_OP_TRANSPOSE, 1, d->out, 1, &trt);
  tb_ints(b, t, "permutation", 2, (int64_t[]){1, 0});
  uint32_t outs[2] = {t->out[0], d->out[0]};
  tb_finish(b, extra_use ? 2 : 1, outs);
}

static void test_dot_transpose(void **state) {
  lm_buffer *args[2] = {rand_buf(T2(LOOM_DTYPE_F32, 5, 7), 3), rand_buf(T2(LOOM_DTYPE_F32, 5, 3), 4)}, *out[2];
  for (int extra = 0; extra < 2; extra++) {
    tb b;
    tb_init(&b);
    build_dot_transpose(&b, extra);
    lm_err e;
    if (tx_run(&b, true, 1 << 20, args, 2, out, NULL, &e) != 0) fail_msg("%s", e.msg);
    const float *A = args[0]->data, *B = args[1]->data, *T = out[0]->data;
    for (int i = 0; i < 3; i++)
      for (int j = 0; j < 7; j++) {
        float s = 0;
        for (int k = 0; k < 5; k++) s += A[k * 7 + j] * B[k * 3 + i];
        assert_true(fabsf(T[i * 7 + j] - s) < 1e-5f);
      }
    for (int i = 0; i < 1 + extra; i++) lm_buffer_release(out[i]);
    tb_init(&b);
    build_dot_transpose(&b, extra);
    /* fused: dot+transpose in one step, then the return; with another use both stay */
    assert_int_equal(tx_steps(&b, true), extra ? 3 : 2);
  }
  lm_buffer_release(args[0]);
  lm_buffer_release(args[1]);
}

/* chlo.ragged_dot, the three modes, against direct loops (small integers: exact) */
static lm_buffer *run_ragged(lm_type lt, lm_type rt, lm_type ot, const int64_t *dims6[6], const int *n6, const int32_t *gs,
                             int G, lm_buffer **lhs, lm_buffer **rhs) {
  tb b;
  tb_init(&b);
  lm_type gt = T1(LOOM_DTYPE_S32, G);
  uint32_t in[3] = {tb_arg(&b, lt), tb_arg(&b, rt), tb_arg(&b, gt)};
  lm_op *op = tb_op(&b, b.body, LM_OP_CHLO_RAGGED_DOT, 3, in, 1, &ot);
  lm_attr *s = tb_struct(&b, op, "ragged_dot_dimension_numbers", "chlo.ragged_dot");
  const char *names[6] = {"lhs_batching_dimensions", "rhs_batching_dimensions", "lhs_contracting_dimensions",
                          "rhs_contracting_dimensions", "lhs_ragged_dimensions", "rhs_group_dimensions"};
  for (int i = 0; i < 6; i++) tb_field_ints(&b, s, names[i], n6[i], dims6[i]);
  tb_finish(&b, 1, op->out);
  *lhs = rand_buf(lt, 31);
  *rhs = rand_buf(rt, 37);
  lm_buffer *args[3] = {*lhs, *rhs, tb_buf(gt, gs)}, *out;
  lm_err e;
  if (tx_run(&b, true, 1 << 20, args, 3, &out, NULL, &e) != 0) fail_msg("%s", e.msg);
  lm_buffer_release(args[2]);
  return out;
}

static void test_ragged_dot(void **state) {
  lm_dtype f = LOOM_DTYPE_F32;
  int32_t gs[3] = {2, 3, 1}; /* 6 of 7 rows/positions covered */
  lm_buffer *l, *r, *o;
  /* mode 1: lhs [7, 4] ragged rows, rhs [3, 4, 5] per group -> [7, 5] */
  const int64_t *d1[6] = {NULL, NULL, (int64_t[]){1}, (int64_t[]){1}, (int64_t[]){0}, (int64_t[]){0}};
  int n1[6] = {0, 0, 1, 1, 1, 1};
  o = run_ragged(T2(f, 7, 4), T3(f, 3, 4, 5), T2(f, 7, 5), d1, n1, gs, 3, &l, &r);
  const float *L = l->data, *R = r->data, *O = o->data;
  int grp[7] = {0, 0, 1, 1, 1, 2, -1};
  for (int m = 0; m < 7; m++)
    for (int n = 0; n < 5; n++) {
      float w = 0;
      for (int k = 0; k < 4 && grp[m] >= 0; k++) w += L[m * 4 + k] * R[(grp[m] * 4 + k) * 5 + n];
      assert_true(O[m * 5 + n] == w);
    }
  lm_buffer_release(l); lm_buffer_release(r); lm_buffer_release(o);
  /* mode 2: ragged contracting dim: lhs [3, 7], rhs [7, 2] -> [G=3, 3, 2] */
  const int64_t *d2[6] = {NULL, NULL, (int64_t[]){1}, (int64_t[]){0}, (int64_t[]){1}, NULL};
  int n2[6] = {0, 0, 1, 1, 1, 0};
  o = run_ragged(T2(f, 3, 7), T2(f, 7, 2), T3(f, 3, 3, 2), d2, n2, gs, 3, &l, &r);
  L = l->data; R = r->data; O = o->data;
  for (int g = 0; g < 3; g++)
    for (int m = 0; m < 3; m++)
      for (int n = 0; n < 2; n++) {
        float w = 0;
        for (int k = 0; k < 7; k++)
          if (grp[k] == g) w += L[m * 7 + k] * R[k * 2 + n];
        assert_true(O[(g * 3 + m) * 2 + n] == w);
      }
  lm_buffer_release(l); lm_buffer_release(r); lm_buffer_release(o);
  /* mode 3: ragged batch dim: lhs [7, 2, 3], rhs [7, 3, 2] -> [7, 2, 2], batch 6 beyond the groups is 0 */
  const int64_t *d3[6] = {(int64_t[]){0}, (int64_t[]){0}, (int64_t[]){2}, (int64_t[]){1}, (int64_t[]){0}, NULL};
  int n3[6] = {1, 1, 1, 1, 1, 0};
  o = run_ragged(T3(f, 7, 2, 3), T3(f, 7, 3, 2), T3(f, 7, 2, 2), d3, n3, gs, 3, &l, &r);
  L = l->data; R = r->data; O = o->data;
  for (int bb = 0; bb < 7; bb++)
    for (int m = 0; m < 2; m++)
      for (int n = 0; n < 2; n++) {
        float w = 0;
        for (int k = 0; k < 3 && grp[bb] >= 0; k++) w += L[(bb * 2 + m) * 3 + k] * R[(bb * 3 + k) * 2 + n];
        assert_true(O[(bb * 2 + m) * 2 + n] == w);
      }
  lm_buffer_release(l); lm_buffer_release(r); lm_buffer_release(o);
}

/* ---- convolution ---- */

typedef struct conv_spec {
  int64_t ib, ifd, is[3], ki, ko, ks[3], ob, of, os[3];
  int ns;
  int64_t stride[3], pad[6], ldil[3], rdil[3], rev[3], G, BG;
} conv_spec;

static lm_op *conv_op(tb *b, uint32_t x, uint32_t y, lm_type ot, const conv_spec *c) {
  uint32_t in[2] = {x, y};
  lm_op *op = tb_op(b, b->body, LM_OP_CONVOLUTION, 2, in, 1, &ot);
  lm_attr *s = tb_attr(b, op, "dimension_numbers");
  s->kind = LM_ATTR_STRUCT;
  s->s = "stablehlo.conv";
  s->fields = tb_alloc(b, 12 * sizeof(lm_named_attr));
  const char *in_names[] = {"input_batch_dimension", "input_feature_dimension", "kernel_input_feature_dimension",
                            "kernel_output_feature_dimension", "output_batch_dimension", "output_feature_dimension"};
  int64_t in_vals[] = {c->ib, c->ifd, c->ki, c->ko, c->ob, c->of};
  for (int i = 0; i < 6; i++) {
    s->fields[s->n].name = in_names[i];
    memset(&s->fields[s->n].value, 0, sizeof(lm_attr));
    s->fields[s->n].value.kind = LM_ATTR_INT;
    s->fields[s->n].value.i = in_vals[i];
    s->n++;
  }
  const char *ln[] = {"input_spatial_dimensions", "kernel_spatial_dimensions", "output_spatial_dimensions"};
  const int64_t *lv[] = {c->is, c->ks, c->os};
  for (int i = 0; i < 3; i++) {
    s->fields[s->n].name = ln[i];
    s->fields[s->n].value = tb_ints_value(b, c->ns, lv[i]);
    s->n++;
  }
  tb_ints(b, op, "window_strides", c->ns, c->stride);
  tb_dense_i64(b, op, "padding", c->ns, 2, c->pad);
  tb_ints(b, op, "lhs_dilation", c->ns, c->ldil);
  tb_ints(b, op, "rhs_dilation", c->ns, c->rdil);
  tb_ints(b, op, "window_reversal", c->ns, c->rev);
  tb_int(b, op, "feature_group_count", c->G);
  tb_int(b, op, "batch_group_count", c->BG);
  return op;
}

static void check_conv(lm_type lt, lm_type rt, lm_type ot, const conv_spec *c, double tol) {
  tb b;
  tb_init(&b);
  uint32_t x = tb_arg(&b, lt), y = tb_arg(&b, rt);
  lm_op *op = conv_op(&b, x, y, ot, c);
  tb_finish(&b, 1, op->out);
  lm_conv cv;
  lm_err e;
  if (lm_conv_get(op, &lt, &rt, &ot, &cv, &e) != 0) fail_msg("%s", e.msg);
  lm_buffer *args[2] = {rand_buf(lt, 5), rand_buf(rt, 9)}, *out = NULL, *ref = NULL;
  if (tx_run(&b, true, 1 << 26, args, 2, &out, NULL, &e) != 0) fail_msg("%s", e.msg);
  assert_int_equal(lm_buffer_alloc(NULL, &ot, &ref, NULL), 0);
  lm_conv_ref(args[0], args[1], &cv, ref);
  size_t es = lm_dtype_size(ot.dtype);
  for (int64_t i = 0; i < lm_type_numel(&ot); i++) {
    double a = lm_load_f64((char *)out->data + i * es, ot.dtype), w = lm_load_f64((char *)ref->data + i * es, ot.dtype);
    if (fabs(a - w) > tol * (1 + fabs(w))) fail_msg("conv element %lld: %g, want %g", (long long)i, a, w);
  }
  lm_buffer_release(args[0]);
  lm_buffer_release(args[1]);
  lm_buffer_release(out);
  lm_buffer_release(ref);
}

static void test_conv_spec_example(void **state) {
  /* spec 'convolution' example: lhs_dilation 2, stride 4 */
  tb b;
  tb_init(&b);
  lm_type lt = T4(LOOM_DTYPE_S32, 1, 4, 4, 1), rt = T4(LOOM_DTYPE_S32, 3, 3, 1, 1), ot = T4(LOOM_DTYPE_S32, 1, 2, 2, 1);
  uint32_t x = tb_arg(&b, lt), y = tb_arg(&b, rt);
  conv_spec c = {.ib = 0, .ifd = 3, .is = {1, 2}, .ki = 2, .ko = 3, .ks = {0, 1}, .ob = 0, .of = 3, .os = {1, 2}, .ns = 2,
                 .stride = {4, 4}, .ldil = {2, 2}, .rdil = {1, 1}, .G = 1, .BG = 1};
  lm_op *op = conv_op(&b, x, y, ot, &c);
  tb_finish(&b, 1, op->out);
  int32_t lv[] = {1, 2, 5, 6, 3, 4, 7, 8, 10, 11, 14, 15, 12, 13, 16, 17}, rv[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  lm_buffer *args[2] = {tb_buf(lt, lv), tb_buf(rt, rv)}, *out;
  lm_err e;
  if (tx_run(&b, true, 1 << 20, args, 2, &out, NULL, &e) != 0) fail_msg("%s", e.msg);
  int32_t want[] = {10, 26, 46, 62};
  assert_memory_equal(out->data, want, sizeof want);
  lm_buffer_release(out);
  lm_buffer_release(args[0]);
  lm_buffer_release(args[1]);
}

static void test_conv_variants(void **state) {
  lm_dtype f = LOOM_DTYPE_F32;
  /* NHWC x HWIO -> NHWC, stride 2, padding */
  conv_spec a = {.ib = 0, .ifd = 3, .is = {1, 2}, .ki = 2, .ko = 3, .ks = {0, 1}, .ob = 0, .of = 3, .os = {1, 2}, .ns = 2,
                 .stride = {2, 1}, .pad = {1, 1, 0, 2}, .ldil = {1, 1}, .rdil = {1, 1}, .G = 1, .BG = 1};
  check_conv(T4(f, 2, 7, 6, 3), T4(f, 3, 3, 3, 4), T4(f, 2, 4, 6, 4), &a, 1e-6);
  /* NCHW x OIHW -> NCHW with rhs dilation and window reversal */
  conv_spec b = {.ib = 0, .ifd = 1, .is = {2, 3}, .ki = 1, .ko = 0, .ks = {2, 3}, .ob = 0, .of = 1, .os = {2, 3}, .ns = 2,
                 .stride = {1, 1}, .pad = {0, 0, 0, 0}, .ldil = {1, 1}, .rdil = {2, 1}, .rev = {1, 0}, .G = 1, .BG = 1};
  check_conv(T4(f, 1, 2, 8, 5), T4(f, 3, 2, 2, 3), T4(f, 1, 3, 6, 3), &b, 1e-6);
  /* depthwise: feature_group_count = channels */
  conv_spec g = {.ib = 0, .ifd = 2, .is = {1}, .ki = 1, .ko = 2, .ks = {0}, .ob = 0, .of = 2, .os = {1}, .ns = 1,
                 .stride = {1}, .pad = {1, 1}, .ldil = {1}, .rdil = {1}, .G = 4, .BG = 1};
  check_conv(T3(f, 2, 9, 4), T3(f, 3, 1, 8), T3(f, 2, 9, 8), &g, 1e-6);
  /* batch_group_count (weight gradient of a grouped conv), lhs dilation and negative padding */
  conv_spec h = {.ib = 0, .ifd = 2, .is = {1}, .ki = 1, .ko = 2, .ks = {0}, .ob = 0, .of = 2, .os = {1}, .ns = 1,
                 .stride = {1}, .pad = {-1, 2}, .ldil = {2}, .rdil = {1}, .G = 1, .BG = 2};
  check_conv(T3(f, 4, 5, 3), T3(f, 2, 3, 6), T3(f, 2, 9, 6), &h, 1e-6);
  /* 3 spatial dims, f64, and f16 / bf16 / complex through the same path */
  conv_spec d3 = {.ib = 0, .ifd = 4, .is = {1, 2, 3}, .ki = 3, .ko = 4, .ks = {0, 1, 2}, .ob = 0, .of = 4, .os = {1, 2, 3},
                  .ns = 3, .stride = {1, 2, 1}, .pad = {0, 0, 1, 0, 0, 1}, .ldil = {1, 1, 1}, .rdil = {1, 1, 1}, .G = 1, .BG = 1};
  check_conv(T5(LOOM_DTYPE_F64, 1, 4, 5, 3, 2), T5(LOOM_DTYPE_F64, 2, 2, 2, 2, 3), T5(LOOM_DTYPE_F64, 1, 3, 3, 3, 3), &d3, 1e-12);
  check_conv(T4(LOOM_DTYPE_F16, 2, 7, 6, 3), T4(LOOM_DTYPE_F16, 3, 3, 3, 4), T4(LOOM_DTYPE_F16, 2, 4, 6, 4), &a, 1e-3);
  check_conv(T4(LOOM_DTYPE_C64, 2, 7, 6, 3), T4(LOOM_DTYPE_C64, 3, 3, 3, 4), T4(LOOM_DTYPE_C64, 2, 4, 6, 4), &a, 1e-6);
  check_conv(T4(LOOM_DTYPE_S8, 2, 7, 6, 3), T4(LOOM_DTYPE_S8, 3, 3, 3, 4), T4(LOOM_DTYPE_S8, 2, 4, 6, 4), &a, 0);
  /* large enough for the im2col + gemm path: NHWC, grouped, NCHW with dilations, bf16 */
  conv_spec big = {.ib = 0, .ifd = 3, .is = {1, 2}, .ki = 2, .ko = 3, .ks = {0, 1}, .ob = 0, .of = 3, .os = {1, 2}, .ns = 2,
                   .stride = {1, 1}, .pad = {1, 1, 1, 1}, .ldil = {1, 1}, .rdil = {1, 1}, .G = 1, .BG = 1};
  check_conv(T4(f, 4, 16, 16, 8), T4(f, 3, 3, 8, 16), T4(f, 4, 16, 16, 16), &big, 1e-5);
  check_conv(T4(LOOM_DTYPE_BF16, 4, 16, 16, 8), T4(LOOM_DTYPE_BF16, 3, 3, 8, 16), T4(LOOM_DTYPE_F32, 4, 16, 16, 16), &big, 1e-5);
  conv_spec bigg = big;
  bigg.G = 4;
  check_conv(T4(f, 4, 16, 16, 32), T4(f, 3, 3, 8, 16), T4(f, 4, 16, 16, 16), &bigg, 1e-5);
  conv_spec bign = {.ib = 0, .ifd = 1, .is = {2, 3}, .ki = 1, .ko = 0, .ks = {2, 3}, .ob = 0, .of = 1, .os = {2, 3}, .ns = 2,
                    .stride = {2, 1}, .pad = {2, 1, 0, 0}, .ldil = {2, 1}, .rdil = {1, 2}, .rev = {0, 1}, .G = 1, .BG = 2};
  check_conv(T4(f, 4, 16, 12, 20), T4(f, 32, 16, 3, 3), T4(f, 2, 32, 12, 16), &bign, 1e-5);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_dot_layouts),       cmocka_unit_test(test_dot_types),
      cmocka_unit_test(test_dot_large_f32),     cmocka_unit_test(test_legacy_dot_and_errors),
      cmocka_unit_test(test_dot_transpose),     cmocka_unit_test(test_ragged_dot),
      cmocka_unit_test(test_conv_spec_example), cmocka_unit_test(test_conv_variants),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
