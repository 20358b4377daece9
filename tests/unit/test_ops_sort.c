/* Unit tests for sort and chlo.top_k (src/exec/sort.c) and the scalar evaluator of comparators
 * (src/exec/scalar_eval.c): JAX's canonicalizing total-order comparator, lexicographic
 * multi-operand comparators, descending sorts on other dimensions, the compiled and the generic
 * region paths against a reference, stability, and top_k ties / NaN / i1. */
#include <math.h>
#include "hlo/parse.h"
#include "test_ops_build.h"

/* %c = constant dense<v> : tensor<dt> in blk */
static uint32_t k_const(tb *b, lm_block *blk, lm_dtype dt, double v) {
  lm_type t = T0(dt);
  lm_op *op = tb_op(b, blk, LM_OP_CONSTANT, 0, NULL, 1, &t);
  lm_attr *a = tb_attr(b, op, "value");
  a->kind = LM_ATTR_DENSE;
  a->type = tb_alloc(b, sizeof(lm_type));
  *a->type = t;
  a->nbytes = lm_dtype_size(dt);
  a->data = tb_alloc(b, 16);
  lm_store_f64(a->data, dt, v);
  return op->out[0];
}

static uint32_t k_cmp(tb *b, lm_block *blk, const char *dir, const char *type, uint32_t x, uint32_t y) {
  lm_type t = T0(LOOM_DTYPE_PRED);
  uint32_t in[2] = {x, y};
  lm_op *op = tb_op(b, blk, LM_OP_COMPARE, 2, in, 1, &t);
  tb_enum(b, op, "comparison_direction", dir);
  if (type) tb_enum(b, op, "compare_type", type);
  return op->out[0];
}

static uint32_t k_bin(tb *b, lm_block *blk, lm_opcode code, lm_dtype dt, uint32_t x, uint32_t y) {
  lm_type t = T0(dt);
  uint32_t in[2] = {x, y};
  return tb_op(b, blk, code, 2, in, 1, &t)->out[0];
}

static uint32_t k_sel(tb *b, lm_block *blk, lm_dtype dt, uint32_t p, uint32_t x, uint32_t y) {
  lm_type t = T0(dt);
  uint32_t in[3] = {p, x, y};
  return tb_op(b, blk, LM_OP_SELECT, 3, in, 1, &t)->out[0];
}

/* JAX's float key canonicalization: -0 -> +0, any NaN -> the canonical NaN. */
static uint32_t k_canon(tb *b, lm_block *blk, lm_dtype dt, uint32_t x) {
  uint32_t z = k_const(b, blk, dt, 0.0);
  uint32_t x1 = k_sel(b, blk, dt, k_cmp(b, blk, "EQ", "FLOAT", x, z), k_const(b, blk, dt, 0.0), x);
  return k_sel(b, blk, dt, k_cmp(b, blk, "NE", "FLOAT", x, x), k_const(b, blk, dt, NAN), x1);
}

/* key "less" of operand pair (a, b) as JAX writes it for dt */
static uint32_t k_key_lt(tb *b, lm_block *blk, lm_dtype dt, uint32_t x, uint32_t y) {
  if (lm_dtype_is_float(dt)) return k_cmp(b, blk, "LT", "TOTALORDER", k_canon(b, blk, dt, x), k_canon(b, blk, dt, y));
  return k_cmp(b, blk, "LT", lm_dtype_is_sint(dt) ? "SIGNED" : "UNSIGNED", x, y);
}

/* Builds sort(op0..opn-1) along dim with a lexicographic comparator over operands keys[nk]
 * (JAX's multi-key form), or a plain `compare dir` on operand 0 when dir != NULL. */
static tb build_sort(uint32_t n, const lm_type *types, int64_t dim, int nk, const int *keys, const char *dir) {
  tb b;
  tb_init(&b);
  uint32_t ins[8];
  for (uint32_t i = 0; i < n; i++) ins[i] = tb_arg(&b, types[i]);
  lm_op *op = tb_op(&b, b.body, LM_OP_SORT, n, ins, n, types);
  tb_int(&b, op, "dimension", dim);
  tb_bool(&b, op, "is_stable", 1);
  lm_type at[16];
  for (uint32_t i = 0; i < 2 * n; i++) at[i] = T0(types[i / 2].dtype);
  lm_block *blk = tb_region(&b, op, 2 * n, at);
  uint32_t r;
  if (dir) {
    r = k_cmp(&b, blk, dir, NULL, blk->args[0], blk->args[1]);
  } else {
    /* last key first: r = lt(k) or (eq(k) and r_next) */
    int q = keys[nk - 1];
    r = k_key_lt(&b, blk, types[q].dtype, blk->args[2 * q], blk->args[2 * q + 1]);
    for (int i = nk - 2; i >= 0; i--) {
      q = keys[i];
      lm_dtype dt = types[q].dtype;
      uint32_t lt = k_key_lt(&b, blk, dt, blk->args[2 * q], blk->args[2 * q + 1]);
      uint32_t eq = k_cmp(&b, blk, "EQ", lm_dtype_is_float(dt) ? "FLOAT" : NULL, blk->args[2 * q], blk->args[2 * q + 1]);
      r = k_bin(&b, blk, LM_OP_OR, LOOM_DTYPE_PRED, lt, k_bin(&b, blk, LM_OP_AND, LOOM_DTYPE_PRED, eq, r));
    }
  }
  tb_return(&b, blk, 1, &r);
  tb_finish(&b, n, op->out);
  return b;
}

/* total order key of a canonicalized float */
static double canon(double x) { return x != x ? NAN : x == 0 ? 0.0 : x; }

typedef struct rec { float f; int32_t i; int64_t pos; } rec;
static int rec_cmp(const void *pa, const void *pb) { /* by canonical f (NaN last), then position */
  const rec *a = pa, *b = pb;
  double x = canon(a->f), y = canon(b->f);
  bool xn = x != x, yn = y != y;
  if (xn != yn) return xn ? 1 : -1;
  if (!xn && x != y) return x < y ? -1 : 1;
  return a->pos < b->pos ? -1 : a->pos > b->pos;
}

static void test_sort_float_jax_comparator(void **state) {
  /* f32 keys with duplicates, -0/+0, NaNs; a second operand carries the original positions */
  const int64_t n = 300;
  lm_type types[2] = {T1(LOOM_DTYPE_F32, n), T1(LOOM_DTYPE_S32, n)};
  float *f = malloc(n * sizeof *f);
  int32_t *pos = malloc(n * sizeof *pos);
  uint64_t s = 7;
  rec *ref = malloc(n * sizeof *ref);
  for (int64_t i = 0; i < n; i++) {
    uint64_t r = tb_rand(&s) % 20;
    f[i] = r == 0 ? NAN : r == 1 ? -0.0f : r == 2 ? 0.0f : r == 3 ? -NAN : (float)((int)(r % 7) - 3) * 0.5f;
    if (r == 4) f[i] = INFINITY;
    if (r == 5) f[i] = -INFINITY;
    pos[i] = (int32_t)i;
    ref[i] = (rec){f[i], (int32_t)i, i};
  }
  qsort(ref, n, sizeof *ref, rec_cmp);
  for (int generic = 0; generic < 2; generic++) {
    tb b = build_sort(2, types, 0, 1, (int[]){0}, NULL);
    lm_buffer *args[2] = {tb_buf(types[0], f), tb_buf(types[1], pos)};
    lm_ops_generic_only = generic;
    tb_run_result r = tb_run(&b, args, 2);
    lm_ops_generic_only = 0;
    if (r.rc) fail_msg("%s", r.err.msg);
    const int32_t *gp = r.out[1]->data;
    for (int64_t i = 0; i < n; i++)
      if (gp[i] != ref[i].i) fail_msg("sort (generic=%d): position %lld holds %d, want %d", generic, (long long)i, gp[i], ref[i].i);
    tb_run_release(&r);
    lm_buffer_release(args[0]);
    lm_buffer_release(args[1]);
  }
  free(f);
  free(pos);
  free(ref);
}

static void test_sort_lexicographic(void **state) {
  /* keys (i32 a, f32 c) with the third operand b carried along: sorted by a, then c; stable */
  const int64_t n = 100;
  lm_type types[3] = {T1(LOOM_DTYPE_S32, n), T1(LOOM_DTYPE_S32, n), T1(LOOM_DTYPE_F32, n)};
  int32_t *a = malloc(n * 4), *bb = malloc(n * 4);
  float *c = malloc(n * 4);
  uint64_t s = 3;
  for (int64_t i = 0; i < n; i++) {
    a[i] = (int32_t)(tb_rand(&s) % 5) - 2;
    bb[i] = (int32_t)i;
    c[i] = (float)(tb_rand(&s) % 4);
  }
  for (int generic = 0; generic < 2; generic++) {
    tb b = build_sort(3, types, 0, 2, (int[]){0, 2}, NULL);
    lm_buffer *args[3] = {tb_buf(types[0], a), tb_buf(types[1], bb), tb_buf(types[2], c)};
    lm_ops_generic_only = generic;
    tb_run_result r = tb_run(&b, args, 3);
    lm_ops_generic_only = 0;
    if (r.rc) fail_msg("%s", r.err.msg);
    const int32_t *ra = r.out[0]->data, *rb = r.out[1]->data;
    const float *rc = r.out[2]->data;
    for (int64_t i = 0; i < n; i++) {
      assert_int_equal(ra[i], a[rb[i]]);
      assert_true(rc[i] == c[rb[i]]);
      if (i > 0) {
        bool ordered = ra[i - 1] < ra[i] || (ra[i - 1] == ra[i] && (rc[i - 1] < rc[i] || (rc[i - 1] == rc[i] && rb[i - 1] < rb[i])));
        if (!ordered) fail_msg("lexicographic sort (generic=%d) out of order at %lld", generic, (long long)i);
      }
    }
    tb_run_release(&r);
    for (int i = 0; i < 3; i++) lm_buffer_release(args[i]);
  }
  free(a);
  free(bb);
  free(c);
}

static void test_sort_descending_dim(void **state) {
  /* u16 [4, 6, 3] sorted descending along dimension -2 (= 1) */
  lm_type t = T3(LOOM_DTYPE_U16, 4, 6, 3);
  uint16_t v[72];
  uint64_t s = 11;
  for (int i = 0; i < 72; i++) v[i] = (uint16_t)(tb_rand(&s) % 50000);
  tb b = build_sort(1, &t, -2, 0, NULL, "GT");
  lm_buffer *x = tb_buf(t, v);
  lm_buffer *y = tb_run1(&b, &x, 1);
  const uint16_t *r = y->data;
  for (int i = 0; i < 4; i++)
    for (int k = 0; k < 3; k++) {
      int cnt_in = 0, cnt_out = 0;
      for (int j = 0; j < 6; j++) {
        if (j) assert_true(r[(i * 6 + j - 1) * 3 + k] >= r[(i * 6 + j) * 3 + k]);
        cnt_in += v[(i * 6 + j) * 3 + k];
        cnt_out += r[(i * 6 + j) * 3 + k];
      }
      assert_int_equal(cnt_in, cnt_out); /* same multiset (sum as a cheap check) */
    }
  lm_buffer_release(x);
  lm_buffer_release(y);
}

/* Comparators close to the key form: mirrored operands (a key form), and sides that differ (not
 * one: must still be evaluated as written). Each runs on every path and must agree. */
static tb build_custom_sort(lm_type t, int variant) {
  tb b;
  tb_init(&b);
  uint32_t a = tb_arg(&b, t);
  lm_op *op = tb_op(&b, b.body, LM_OP_SORT, 1, &a, 1, &t);
  tb_int(&b, op, "dimension", 0);
  lm_type at[2] = {T0(t.dtype), T0(t.dtype)};
  lm_block *blk = tb_region(&b, op, 2, at);
  uint32_t r;
  if (variant == 0) {
    r = k_cmp(&b, blk, "GT", NULL, blk->args[1], blk->args[0]); /* ascending, written mirrored */
  } else {
    lm_op *ng = tb_op(&b, blk, LM_OP_NEGATE, 1, &blk->args[1], 1, &at[0]);
    r = k_cmp(&b, blk, "LT", NULL, blk->args[0], ng->out[0]); /* a < -b: not a key form */
  }
  tb_return(&b, blk, 1, &r);
  tb_finish(&b, 1, op->out);
  return b;
}

static void test_sort_key_form_edges(void **state) {
  lm_type t = T1(LOOM_DTYPE_S32, 40);
  int32_t v[40];
  uint64_t sd = 5;
  for (int i = 0; i < 40; i++) v[i] = (int32_t)(tb_rand(&sd) % 21) - 10;
  for (int variant = 0; variant < 2; variant++) {
    lm_buffer *res[2];
    for (int generic = 0; generic < 2; generic++) {
      tb b = build_custom_sort(t, variant);
      lm_buffer *x = tb_buf(t, v);
      lm_ops_generic_only = generic;
      res[generic] = tb_run1(&b, &x, 1);
      lm_ops_generic_only = 0;
      lm_buffer_release(x);
    }
    assert_buf_eq_bytes(res[0], res[1]->data, sizeof v);
    if (variant == 0)
      for (int i = 1; i < 40; i++) assert_true(((int32_t *)res[0]->data)[i - 1] <= ((int32_t *)res[0]->data)[i]);
    lm_buffer_release(res[0]);
    lm_buffer_release(res[1]);
  }
}

static void test_sort_verify(void **state) {
  lm_type t = T2(LOOM_DTYPE_F32, 2, 3);
  tb b = build_sort(1, &t, 2, 0, NULL, "LT");
  lm_buffer *x = tb_buf_iota(t, 1, 0);
  tb_expect_error(&b, &x, 1, LOOM_VERIFY, "dimension 2 is outside");
  /* a comparator that does not return i1 is refused before anything runs */
  tb_init(&b);
  uint32_t a = tb_arg(&b, t);
  lm_op *op = tb_op(&b, b.body, LM_OP_SORT, 1, &a, 1, &t);
  tb_int(&b, op, "dimension", 0);
  lm_type at[2] = {T0(LOOM_DTYPE_F32), T0(LOOM_DTYPE_F32)};
  lm_block *blk = tb_region(&b, op, 2, at);
  tb_return(&b, blk, 1, &blk->args[0]);
  tb_finish(&b, 1, op->out);
  tb_expect_error(&b, &x, 1, LOOM_VERIFY, "comparator result 0 must be tensor<i1>");
  lm_buffer_release(x);
}

static void test_compare_elems(void **state) {
  float a = -0.0f, b = 0.0f, qn = NAN, nqn = -NAN, inf = INFINITY;
  assert_int_equal(lm_compare_elems("LT", "TOTALORDER", LOOM_DTYPE_F32, &a, &b), 1);
  assert_int_equal(lm_compare_elems("LT", "FLOAT", LOOM_DTYPE_F32, &a, &b), 0);
  assert_int_equal(lm_compare_elems("EQ", "FLOAT", LOOM_DTYPE_F32, &a, &b), 1);
  assert_int_equal(lm_compare_elems("GT", "TOTALORDER", LOOM_DTYPE_F32, &qn, &inf), 1);
  assert_int_equal(lm_compare_elems("LT", "TOTALORDER", LOOM_DTYPE_F32, &nqn, &a), 1);
  assert_int_equal(lm_compare_elems("NE", "FLOAT", LOOM_DTYPE_F32, &qn, &qn), 1);
  assert_int_equal(lm_compare_elems("EQ", NULL, LOOM_DTYPE_F32, &qn, &qn), 0);
  int8_t m = -1, p = 1;
  assert_int_equal(lm_compare_elems("LT", NULL, LOOM_DTYPE_S8, &m, &p), 1);
  assert_int_equal(lm_compare_elems("LT", "TOTALORDER", LOOM_DTYPE_S8, &m, &p), 1);
  assert_int_equal(lm_compare_elems("LT", "UNSIGNED", LOOM_DTYPE_S8, &m, &p), 0);
  uint16_t h1 = 0xbc00 /* -1 */, h2 = 0x3c00 /* 1 */;
  assert_int_equal(lm_compare_elems("LT", "TOTALORDER", LOOM_DTYPE_BF16, &h2, &h1), 0);
  assert_int_equal(lm_compare_elems("LT", "FLOAT", LOOM_DTYPE_F16, &h1, &h2), 1);
  float c1[2] = {1, 2}, c2[2] = {1, 3};
  assert_int_equal(lm_compare_elems("EQ", NULL, LOOM_DTYPE_C64, c1, c2), 0);
  assert_int_equal(lm_compare_elems("LT", NULL, LOOM_DTYPE_C64, c1, c2), -1);
}

static void run_top_k(lm_type t, int64_t k, const void *data, lm_buffer **vals, lm_buffer **idx) {
  tb b;
  tb_init(&b);
  lm_type vt = t, it = t;
  vt.dims[t.rank - 1] = k;
  it.dims[t.rank - 1] = k;
  it.dtype = LOOM_DTYPE_S32;
  uint32_t a = tb_arg(&b, t);
  lm_type outs[2] = {vt, it};
  lm_op *op = tb_op(&b, b.body, LM_OP_CHLO_TOP_K, 1, &a, 2, outs);
  tb_int(&b, op, "k", k);
  tb_finish(&b, 2, op->out);
  lm_buffer *x = tb_buf(t, data);
  tb_run_result r = tb_run(&b, &x, 1);
  if (r.rc) fail_msg("%s", r.err.msg);
  *vals = r.out[0];
  *idx = r.out[1];
  lm_buffer_release(x);
}

static void test_top_k(void **state) {
  float f[2][6] = {{1, 5, NAN, 5, -0.0f, 0.0f}, {-1, -2, -3, -4, -5, -6}};
  lm_buffer *v, *ix;
  run_top_k(T2(LOOM_DTYPE_F32, 2, 6), 4, f, &v, &ix);
  const float *rv = v->data;
  const int32_t *ri = ix->data;
  int32_t wi[8] = {2, 1, 3, 0, 0, 1, 2, 3};
  for (int i = 0; i < 8; i++) assert_int_equal(ri[i], wi[i]);
  assert_true(isnan(rv[0]) && rv[1] == 5 && rv[2] == 5 && rv[3] == 1 && rv[4] == -1 && rv[7] == -4);
  lm_buffer_release(v);
  lm_buffer_release(ix);
  /* -0 sorts below +0 */
  run_top_k(T1(LOOM_DTYPE_F32, 6), 6, f[0], &v, &ix);
  assert_int_equal(((int32_t *)ix->data)[4], 5);
  assert_int_equal(((int32_t *)ix->data)[5], 4);
  lm_buffer_release(v);
  lm_buffer_release(ix);
  uint8_t bo[5] = {0, 1, 0, 1, 1};
  run_top_k(T1(LOOM_DTYPE_PRED, 5), 4, bo, &v, &ix);
  int32_t wb[4] = {1, 3, 4, 0};
  assert_memory_equal(ix->data, wb, sizeof wb);
  lm_buffer_release(v);
  lm_buffer_release(ix);
  int8_t i8[3] = {1, -3, -4}; /* signed order (a conformance case) */
  run_top_k(T1(LOOM_DTYPE_S8, 3), 2, i8, &v, &ix);
  assert_int_equal(((int8_t *)v->data)[0], 1);
  assert_int_equal(((int8_t *)v->data)[1], -3);
  lm_buffer_release(v);
  lm_buffer_release(ix);
  uint64_t u[4] = {UINT64_MAX, 3, 1ull << 63, 3};
  run_top_k(T1(LOOM_DTYPE_U64, 4), 2, u, &v, &ix);
  assert_true(((uint64_t *)v->data)[0] == UINT64_MAX && ((uint64_t *)v->data)[1] == 1ull << 63);
  lm_buffer_release(v);
  lm_buffer_release(ix);
}

/* @ApproxTopK as jax.lax.approx_max_k lowers it on CPU (parsed from text), on the compiled and the
 * function-call comparator paths */
static void test_approx_top_k(void **state) {
  static const char text[] =
      "module {\n"
      "  func.func private @cmp(%a: tensor<f32>, %b: tensor<f32>, %c: tensor<i32>, %d: tensor<i32>) -> tensor<i1> {\n"
      "    %0 = stablehlo.compare GT, %a, %b : (tensor<f32>, tensor<f32>) -> tensor<i1>\n"
      "    return %0 : tensor<i1>\n"
      "  }\n"
      "  func.func @main(%x: tensor<2x6xf32>) -> (tensor<2x3xf32>, tensor<2x3xi32>) {\n"
      "    %i = stablehlo.iota dim = 1 : tensor<2x6xi32>\n"
      "    %c = stablehlo.constant dense<-1> : tensor<i32>\n"
      "    %cst = stablehlo.constant dense<0xFF800000> : tensor<f32>\n"
      "    %r:2 = stablehlo.custom_call @ApproxTopK(%x, %i, %cst, %c) {called_computations = [@cmp], "
      "mhlo.backend_config = {aggregate_to_topk = true, is_fallback = true, recall_target = 0.95 : f32, "
      "reduction_dim = 1 : i64, reduction_input_size_override = -1 : i64, top_k = 3 : i64}} : "
      "(tensor<2x6xf32>, tensor<2x6xi32>, tensor<f32>, tensor<i32>) -> (tensor<2x3xf32>, tensor<2x3xi32>)\n"
      "    return %r#0, %r#1 : tensor<2x3xf32>, tensor<2x3xi32>\n"
      "  }\n"
      "}\n";
  float x[12] = {3, 9, 1, 9, 4, 0, -1, -2, -3, -4, -5, -6};
  for (int generic = 0; generic < 2; generic++) {
    lm_module *m = NULL;
    lm_err err;
    if (lm_parse_module(text, sizeof text - 1, NULL, &m, &err) != 0) fail_msg("%s", err.msg);
    lm_program *p = NULL;
    if (lm_program_create(m, &p, &err) != 0) fail_msg("%s", err.msg);
    lm_device *dev = lm_device_create(1 << 20);
    lm_buffer *a = tb_buf(T2(LOOM_DTYPE_F32, 2, 6), x), *res[2] = {NULL, NULL};
    lm_run_opts o = {.device = dev};
    lm_ops_generic_only = generic;
    int rc = lm_program_run(p, "main", &o, &a, 1, res, 2, &err);
    lm_ops_generic_only = 0;
    if (rc) fail_msg("%s", err.msg);
    float wv[6] = {9, 9, 4, -1, -2, -3};
    int32_t wi[6] = {1, 3, 4, 0, 1, 2};
    assert_buf_eq_bytes(res[0], wv, sizeof wv);
    assert_buf_eq_bytes(res[1], wi, sizeof wi);
    lm_buffer_release(res[0]);
    lm_buffer_release(res[1]);
    lm_buffer_release(a);
    lm_program_destroy(p);
    lm_device_destroy(dev);
  }
}

int main(void) {
  tb_ensure_stub_kernels();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sort_float_jax_comparator), cmocka_unit_test(test_sort_lexicographic),
      cmocka_unit_test(test_sort_descending_dim),       cmocka_unit_test(test_sort_verify),
      cmocka_unit_test(test_sort_key_form_edges),       cmocka_unit_test(test_approx_top_k),
      cmocka_unit_test(test_compare_elems),             cmocka_unit_test(test_top_k),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
