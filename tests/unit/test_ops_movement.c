/* Unit tests for the data-movement kernels (src/exec/movement.c): each op against a naive
 * reference on several dtypes and shapes, the spec's examples, clamping and negative padding,
 * dynamic forms, and verifier errors. */
#include "test_ops_build.h"

/* Naive multi-index helpers. */
static int64_t flat(int rank, const int64_t *dims, const int64_t *idx) {
  int64_t f = 0;
  for (int d = 0; d < rank; d++) f = f * dims[d] + idx[d];
  return f;
}

static lm_buffer *rand_buf(lm_type t, uint64_t seed) {
  lm_buffer *x = NULL;
  assert_int_equal(lm_buffer_alloc(NULL, &t, &x, NULL), 0);
  uint64_t s = seed | 1;
  for (size_t i = 0; i < x->nbytes; i++) ((unsigned char *)x->data)[i] = (unsigned char)tb_rand(&s);
  if (t.dtype == LOOM_DTYPE_PRED)
    for (size_t i = 0; i < x->nbytes; i++) ((unsigned char *)x->data)[i] &= 1;
  return x;
}

/* ---- transpose ---- */

static void check_transpose(lm_dtype dt, int rank, const int64_t *dims, const int64_t *perm) {
  tb b;
  tb_init(&b);
  lm_type ti, to;
  int64_t od[LM_MAX_RANK];
  for (int d = 0; d < rank; d++) od[d] = dims[perm[d]];
  lm_type_tensor(&ti, dt, rank, dims);
  lm_type_tensor(&to, dt, rank, od);
  uint32_t a = tb_arg(&b, ti);
  lm_op *op = tb_op(&b, b.body, LM_OP_TRANSPOSE, 1, &a, 1, &to);
  tb_ints(&b, op, "permutation", rank, perm);
  tb_finish(&b, 1, op->out);
  lm_buffer *x = rand_buf(ti, 42 + rank);
  lm_buffer *y = tb_run1(&b, &x, 1);
  size_t es = lm_dtype_size(dt);
  int64_t oi[LM_MAX_RANK] = {0}, ii[LM_MAX_RANK];
  int64_t n = lm_type_numel(&to);
  for (int64_t k = 0; k < n; k++) {
    for (int d = 0; d < rank; d++) ii[perm[d]] = oi[d];
    int64_t src = flat(rank, dims, ii);
    if (memcmp((char *)y->data + k * es, (char *)x->data + src * es, es) != 0)
      fail_msg("transpose %s rank %d: element %lld differs", lm_dtype_name(dt), rank, (long long)k);
    lm_index_next(rank, od, oi);
  }
  lm_buffer_release(x);
  lm_buffer_release(y);
}

static void test_transpose(void **state) {
  lm_dtype dts[] = {LOOM_DTYPE_PRED, LOOM_DTYPE_S8, LOOM_DTYPE_BF16, LOOM_DTYPE_F32, LOOM_DTYPE_F64, LOOM_DTYPE_C128};
  for (size_t i = 0; i < sizeof dts / sizeof *dts; i++) {
    check_transpose(dts[i], 2, (int64_t[]){37, 70}, (int64_t[]){1, 0});
    check_transpose(dts[i], 3, (int64_t[]){5, 6, 7}, (int64_t[]){2, 0, 1});
    check_transpose(dts[i], 4, (int64_t[]){3, 4, 5, 6}, (int64_t[]){1, 3, 0, 2});
    check_transpose(dts[i], 3, (int64_t[]){4, 1, 9}, (int64_t[]){0, 2, 1}); /* size-1 dims */
  }
  check_transpose(LOOM_DTYPE_F32, 2, (int64_t[]){512, 784}, (int64_t[]){1, 0});
  check_transpose(LOOM_DTYPE_F32, 2, (int64_t[]){3, 1000}, (int64_t[]){1, 0});
  check_transpose(LOOM_DTYPE_F32, 1, (int64_t[]){10}, (int64_t[]){0});
  check_transpose(LOOM_DTYPE_F32, 0, NULL, NULL);
  check_transpose(LOOM_DTYPE_F32, 3, (int64_t[]){2, 0, 3}, (int64_t[]){2, 1, 0}); /* empty */
  check_transpose(LOOM_DTYPE_S32, 5, (int64_t[]){2, 3, 4, 5, 6}, (int64_t[]){4, 2, 0, 3, 1});
}

static void test_transpose_verify(void **state) {
  tb b;
  tb_init(&b);
  lm_type ti = T2(LOOM_DTYPE_F32, 2, 3), to = T2(LOOM_DTYPE_F32, 3, 2);
  uint32_t a = tb_arg(&b, ti);
  lm_op *op = tb_op(&b, b.body, LM_OP_TRANSPOSE, 1, &a, 1, &to);
  tb_ints(&b, op, "permutation", 2, (int64_t[]){0, 0});
  tb_finish(&b, 1, op->out);
  lm_buffer *x = rand_buf(ti, 1);
  tb_expect_error(&b, &x, 1, LOOM_VERIFY, "is not a permutation");
  tb_init(&b);
  a = tb_arg(&b, ti);
  op = tb_op(&b, b.body, LM_OP_TRANSPOSE, 1, &a, 1, &ti); /* wrong result shape */
  tb_ints(&b, op, "permutation", 2, (int64_t[]){1, 0});
  tb_finish(&b, 1, op->out);
  tb_expect_error(&b, &x, 1, LOOM_VERIFY, "expected tensor<3x2xf32>");
  lm_buffer_release(x);
}

/* ---- reshape ---- */

static void test_reshape(void **state) {
  tb b;
  tb_init(&b);
  lm_type ti = T2(LOOM_DTYPE_S32, 2, 3), to = T3(LOOM_DTYPE_S32, 3, 1, 2);
  uint32_t a = tb_arg(&b, ti);
  lm_op *op = tb_op(&b, b.body, LM_OP_RESHAPE, 1, &a, 1, &to);
  tb_finish(&b, 1, op->out);
  int32_t v[6] = {1, 2, 3, 4, 5, 6};
  lm_buffer *x = tb_buf(ti, v);
  lm_buffer *y = tb_run1(&b, &x, 1);
  assert_true(lm_type_equal(&y->type, &to));
  assert_buf_eq_bytes(y, v, sizeof v);
  lm_buffer_release(y);

  /* the result is a view: no new device memory; a view of a view shares the owner */
  {
    lm_device *dev = lm_device_create(1 << 20);
    lm_buffer *own = NULL, *v1 = NULL, *v2 = NULL;
    assert_int_equal(lm_buffer_alloc(dev, &ti, &own, NULL), 0);
    size_t used = lm_device_used(dev);
    assert_int_equal(lm_buffer_view(&to, own, &v1, NULL), 0);
    lm_type flat6 = T1(LOOM_DTYPE_S32, 6), bad = T1(LOOM_DTYPE_S32, 5);
    assert_int_equal(lm_buffer_view(&flat6, v1, &v2, NULL), 0);
    assert_int_equal(lm_buffer_view(&bad, own, &(lm_buffer *){NULL}, NULL), LOOM_SHAPE_MISMATCH);
    assert_ptr_equal(v2->base, own);
    assert_ptr_equal(v2->data, own->data);
    assert_int_equal(lm_device_used(dev), used);
    lm_buffer_release(own);
    lm_buffer_release(v1);
    assert_int_equal(lm_device_used(dev), used); /* v2 still holds the storage */
    lm_buffer_release(v2);
    assert_int_equal(lm_device_used(dev), 0);
    lm_device_destroy(dev);
  }

  tb_init(&b);
  a = tb_arg(&b, ti);
  lm_type bad = T2(LOOM_DTYPE_S32, 4, 2);
  op = tb_op(&b, b.body, LM_OP_RESHAPE, 1, &a, 1, &bad);
  tb_finish(&b, 1, op->out);
  tb_expect_error(&b, &x, 1, LOOM_VERIFY, "element counts differ");
  lm_buffer_release(x);
}

/* ---- slice ---- */

static void test_slice(void **state) {
  lm_dtype dts[] = {LOOM_DTYPE_U8, LOOM_DTYPE_F16, LOOM_DTYPE_S64, LOOM_DTYPE_C64};
  for (size_t t = 0; t < 4; t++) {
    tb b;
    tb_init(&b);
    int64_t dims[3] = {7, 9, 11}, start[3] = {1, 0, 2}, limit[3] = {7, 9, 10}, step[3] = {2, 3, 1}, od[3];
    for (int d = 0; d < 3; d++) od[d] = (limit[d] - start[d] + step[d] - 1) / step[d];
    lm_type ti = T3(dts[t], 7, 9, 11), to;
    lm_type_tensor(&to, dts[t], 3, od);
    uint32_t a = tb_arg(&b, ti);
    lm_op *op = tb_op(&b, b.body, LM_OP_SLICE, 1, &a, 1, &to);
    tb_ints(&b, op, "start_indices", 3, start);
    tb_ints(&b, op, "limit_indices", 3, limit);
    tb_ints(&b, op, "strides", 3, step);
    tb_finish(&b, 1, op->out);
    lm_buffer *x = rand_buf(ti, 7);
    lm_buffer *y = tb_run1(&b, &x, 1);
    size_t es = lm_dtype_size(dts[t]);
    int64_t oi[3] = {0}, ii[3];
    for (int64_t k = 0; k < lm_type_numel(&to); k++) {
      for (int d = 0; d < 3; d++) ii[d] = start[d] + oi[d] * step[d];
      assert_memory_equal((char *)y->data + k * es, (char *)x->data + flat(3, dims, ii) * es, es);
      lm_index_next(3, od, oi);
    }
    lm_buffer_release(x);
    lm_buffer_release(y);
  }
  /* limit beyond the dimension is refused */
  tb b;
  tb_init(&b);
  lm_type ti = T1(LOOM_DTYPE_F32, 4), to = T1(LOOM_DTYPE_F32, 3);
  uint32_t a = tb_arg(&b, ti);
  lm_op *op = tb_op(&b, b.body, LM_OP_SLICE, 1, &a, 1, &to);
  tb_ints(&b, op, "start_indices", 1, (int64_t[]){2});
  tb_ints(&b, op, "limit_indices", 1, (int64_t[]){5});
  tb_ints(&b, op, "strides", 1, (int64_t[]){1});
  tb_finish(&b, 1, op->out);
  lm_buffer *x = rand_buf(ti, 1);
  tb_expect_error(&b, &x, 1, LOOM_VERIFY, "limit");
  lm_buffer_release(x);
}

/* ---- dynamic_slice / dynamic_update_slice ---- */

static lm_buffer *scalar_i64(int64_t v) { return tb_buf(T0(LOOM_DTYPE_S64), &v); }
static lm_buffer *scalar_i32(int32_t v) { return tb_buf(T0(LOOM_DTYPE_S32), &v); }

static void test_dynamic_slice(void **state) {
  /* 4x4 operand, slice 2x3, starts (s0, s1) clamped to [0,2] x [0,1]. */
  int32_t v[16];
  for (int i = 0; i < 16; i++) v[i] = i;
  int64_t starts[][2] = {{0, 0}, {1, 1}, {-5, 3}, {3, -1}, {100, 100}};
  for (int c = 0; c < 5; c++) {
    tb b;
    tb_init(&b);
    lm_type ti = T2(LOOM_DTYPE_S32, 4, 4), to = T2(LOOM_DTYPE_S32, 2, 3);
    uint32_t ins[3] = {tb_arg(&b, ti), tb_arg(&b, T0(LOOM_DTYPE_S32)), tb_arg(&b, T0(LOOM_DTYPE_S32))};
    lm_op *op = tb_op(&b, b.body, LM_OP_DYNAMIC_SLICE, 3, ins, 1, &to);
    tb_ints(&b, op, "slice_sizes", 2, (int64_t[]){2, 3});
    tb_finish(&b, 1, op->out);
    lm_buffer *args[3] = {tb_buf(ti, v), scalar_i32((int32_t)starts[c][0]), scalar_i32((int32_t)starts[c][1])};
    lm_buffer *y = tb_run1(&b, args, 3);
    int64_t s0 = lm_clamp64(starts[c][0], 0, 2), s1 = lm_clamp64(starts[c][1], 0, 1);
    const int32_t *r = y->data;
    for (int i = 0; i < 2; i++)
      for (int j = 0; j < 3; j++) assert_int_equal(r[i * 3 + j], v[(s0 + i) * 4 + s1 + j]);
    for (int i = 0; i < 3; i++) lm_buffer_release(args[i]);
    lm_buffer_release(y);
  }
  /* Spec (C5): all start indices have the same type. */
  tb b;
  tb_init(&b);
  lm_type ti = T2(LOOM_DTYPE_S32, 4, 4), to = T2(LOOM_DTYPE_S32, 2, 3);
  uint32_t ins[3] = {tb_arg(&b, ti), tb_arg(&b, T0(LOOM_DTYPE_S64)), tb_arg(&b, T0(LOOM_DTYPE_S32))};
  lm_op *op = tb_op(&b, b.body, LM_OP_DYNAMIC_SLICE, 3, ins, 1, &to);
  tb_ints(&b, op, "slice_sizes", 2, (int64_t[]){2, 3});
  tb_finish(&b, 1, op->out);
  lm_buffer *args[3] = {tb_buf(ti, v), scalar_i64(0), scalar_i32(0)};
  tb_expect_error(&b, args, 3, LOOM_VERIFY, "same type");
  for (int i = 0; i < 3; i++) lm_buffer_release(args[i]);
}

static void test_dynamic_update_slice(void **state) {
  /* The spec's example: starts (-1, 3) clamp to (0, 2). */
  int32_t op0[16] = {1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1}, up[4] = {1, 1, 1, 1};
  tb b;
  tb_init(&b);
  lm_type ti = T2(LOOM_DTYPE_S32, 4, 4), tu = T2(LOOM_DTYPE_S32, 2, 2);
  uint32_t ins[4] = {tb_arg(&b, ti), tb_arg(&b, tu), tb_arg(&b, T0(LOOM_DTYPE_S64)), tb_arg(&b, T0(LOOM_DTYPE_S64))};
  lm_op *op = tb_op(&b, b.body, LM_OP_DYNAMIC_UPDATE_SLICE, 4, ins, 1, &ti);
  tb_finish(&b, 1, op->out);
  lm_buffer *args[4] = {tb_buf(ti, op0), tb_buf(tu, up), scalar_i64(-1), scalar_i64(3)};
  lm_buffer *y = tb_run1(&b, args, 4);
  for (int i = 0; i < 16; i++) assert_int_equal(((int32_t *)y->data)[i], 1);
  /* the operand is not modified */
  assert_int_equal(((int32_t *)args[0]->data)[2], 0);
  for (int i = 0; i < 4; i++) lm_buffer_release(args[i]);
  lm_buffer_release(y);

  /* c128 update in the middle of a 3-D operand */
  tb_init(&b);
  ti = T3(LOOM_DTYPE_C128, 3, 4, 5);
  tu = T3(LOOM_DTYPE_C128, 2, 2, 2);
  uint32_t ins2[4] = {tb_arg(&b, ti), tb_arg(&b, tu), tb_arg(&b, T0(LOOM_DTYPE_U8)), tb_arg(&b, T0(LOOM_DTYPE_U8))};
  uint32_t i3 = tb_arg(&b, T0(LOOM_DTYPE_U8));
  uint32_t ins3[5] = {ins2[0], ins2[1], ins2[2], ins2[3], i3};
  op = tb_op(&b, b.body, LM_OP_DYNAMIC_UPDATE_SLICE, 5, ins3, 1, &ti);
  tb_finish(&b, 1, op->out);
  uint8_t s[3] = {1, 1, 200};
  lm_buffer *a2[5] = {tb_buf_iota(ti, 1, 0), tb_buf_iota(tu, -1, -1), tb_buf(T0(LOOM_DTYPE_U8), &s[0]),
                      tb_buf(T0(LOOM_DTYPE_U8), &s[1]), tb_buf(T0(LOOM_DTYPE_U8), &s[2])};
  y = tb_run1(&b, a2, 5);
  const double *r = y->data; /* (re, im) pairs */
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 4; j++)
      for (int k = 0; k < 5; k++) {
        int f = (i * 4 + j) * 5 + k;
        bool in = i >= 1 && i < 3 && j >= 1 && j < 3 && k >= 3; /* k start 200 clamps to 3 */
        double want = in ? -1.0 - (((i - 1) * 2 + (j - 1)) * 2 + (k - 3)) : f;
        assert_true(r[2 * f] == want && r[2 * f + 1] == 0.0);
      }
  for (int i = 0; i < 5; i++) lm_buffer_release(a2[i]);
  lm_buffer_release(y);
}

/* dynamic_update_slice writes in place when its operand dies there (device peak shows it), and
 * copies when the operand is still used (here: also returned) or is a function argument. */
static void test_dynamic_update_slice_in_place(void **state) {
  const int64_t n = 1 << 20; /* 4 MiB of f32 */
  for (int keep = 0; keep < 3; keep++) {
    tb b;
    tb_init(&b);
    lm_type t = T1(LOOM_DTYPE_F32, n), ut = T1(LOOM_DTYPE_F32, 4), it = T0(LOOM_DTYPE_S32);
    uint32_t arg = tb_arg(&b, t), u = tb_arg(&b, ut), i = tb_arg(&b, it);
    uint32_t base = arg;
    if (keep != 2) { /* keep 2: update the function argument itself */
      lm_op *io = tb_op(&b, b.body, LM_OP_IOTA, 0, NULL, 1, &t);
      tb_int(&b, io, "iota_dimension", 0);
      base = io->out[0];
    }
    uint32_t ins[3] = {base, u, i};
    lm_op *d = tb_op(&b, b.body, LM_OP_DYNAMIC_UPDATE_SLICE, 3, ins, 1, &t);
    uint32_t rets[2] = {d->out[0], base};
    tb_finish(&b, keep == 1 ? 2 : 1, rets);
    lm_program *p = NULL;
    lm_err err;
    assert_int_equal(lm_program_create(b.m, &p, &err), 0);
    lm_device *dev = lm_device_create((size_t)1 << 30);
    float uv[4] = {-1, -2, -3, -4};
    int32_t at = 10;
    lm_buffer *args[3] = {tb_buf_iota(t, 2, 0), tb_buf(ut, uv), tb_buf(it, &at)};
    lm_buffer *res[2] = {NULL, NULL};
    lm_run_opts o = {.device = dev};
    if (lm_program_run(p, "main", &o, args, 3, res, keep == 1 ? 2 : 1, &err) != 0) fail_msg("%s", err.msg);
    const float *r = res[0]->data;
    for (int64_t q = 0; q < 20; q++) {
      float base_v = keep == 2 ? 2.0f * q : (float)q;
      assert_true(r[q] == (q >= 10 && q < 14 ? uv[q - 10] : base_v));
    }
    if (keep == 1) assert_true(((float *)res[1]->data)[11] == 11.0f); /* the operand is unchanged */
    if (keep == 2) assert_true(((float *)args[0]->data)[11] == 22.0f); /* so is the caller's argument */
    size_t peak = lm_device_peak(dev);
    if (keep == 0) assert_true(peak < (size_t)(1.5 * 4 * n)); /* one 4 MiB buffer, not two */
    else if (keep == 1) assert_true(peak >= (size_t)(2 * 4 * n));
    for (int q = 0; q < 2; q++) lm_buffer_release(res[q]);
    for (int q = 0; q < 3; q++) lm_buffer_release(args[q]);
    lm_program_destroy(p);
    lm_device_destroy(dev);
  }
}

/* ---- concatenate ---- */

static void test_concatenate(void **state) {
  tb b;
  tb_init(&b);
  lm_type t0 = T3(LOOM_DTYPE_F32, 2, 1, 3), t1 = T3(LOOM_DTYPE_F32, 2, 4, 3), t2 = T3(LOOM_DTYPE_F32, 2, 0, 3),
          to = T3(LOOM_DTYPE_F32, 2, 5, 3);
  uint32_t ins[3] = {tb_arg(&b, t0), tb_arg(&b, t1), tb_arg(&b, t2)};
  lm_op *op = tb_op(&b, b.body, LM_OP_CONCATENATE, 3, ins, 1, &to);
  tb_int(&b, op, "dimension", 1);
  tb_finish(&b, 1, op->out);
  lm_buffer *args[3] = {tb_buf_iota(t0, 1, 100), tb_buf_iota(t1, 1, 200), tb_buf_iota(t2, 1, 300)};
  lm_buffer *y = tb_run1(&b, args, 3);
  const float *r = y->data;
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 5; j++)
      for (int k = 0; k < 3; k++) {
        float want = j == 0 ? 100 + i * 3 + k : 200 + (i * 4 + j - 1) * 3 + k;
        assert_true(r[(i * 5 + j) * 3 + k] == want);
      }
  for (int i = 0; i < 3; i++) lm_buffer_release(args[i]);
  lm_buffer_release(y);
}

/* ---- pad ---- */

static void check_pad(lm_dtype dt, int rank, const int64_t *dims, const int64_t *lo, const int64_t *hi,
                      const int64_t *in) {
  tb b;
  tb_init(&b);
  int64_t od[LM_MAX_RANK];
  for (int d = 0; d < rank; d++) od[d] = dims[d] + (dims[d] ? (dims[d] - 1) * in[d] : 0) + lo[d] + hi[d];
  lm_type ti, to;
  lm_type_tensor(&ti, dt, rank, dims);
  lm_type_tensor(&to, dt, rank, od);
  uint32_t ins[2] = {tb_arg(&b, ti), tb_arg(&b, T0(dt))};
  lm_op *op = tb_op(&b, b.body, LM_OP_PAD, 2, ins, 1, &to);
  tb_ints(&b, op, "edge_padding_low", rank, lo);
  tb_ints(&b, op, "edge_padding_high", rank, hi);
  tb_ints(&b, op, "interior_padding", rank, in);
  tb_finish(&b, 1, op->out);
  lm_buffer *args[2] = {tb_buf_iota(ti, 1, 1), tb_buf_iota(T0(dt), 0, -7)};
  lm_buffer *y = tb_run1(&b, args, 2);
  size_t es = lm_dtype_size(dt);
  int64_t oi[LM_MAX_RANK] = {0}, ii[LM_MAX_RANK];
  for (int64_t k = 0; k < lm_type_numel(&to); k++) {
    bool from = true;
    for (int d = 0; d < rank; d++) {
      int64_t t = oi[d] - lo[d];
      if (t < 0 || t % (in[d] + 1) != 0 || t / (in[d] + 1) >= dims[d]) from = false;
      else ii[d] = t / (in[d] + 1);
    }
    const void *want = from ? (char *)args[0]->data + flat(rank, dims, ii) * es : args[1]->data;
    if (memcmp((char *)y->data + k * es, want, es) != 0) fail_msg("pad: element %lld differs", (long long)k);
    lm_index_next(rank, od, oi);
  }
  lm_buffer_release(args[0]);
  lm_buffer_release(args[1]);
  lm_buffer_release(y);
}

static void test_pad(void **state) {
  /* The spec's example. */
  check_pad(LOOM_DTYPE_S32, 2, (int64_t[]){2, 3}, (int64_t[]){0, 1}, (int64_t[]){2, 1}, (int64_t[]){1, 2});
  /* Negative edge padding removes elements, also from the interior-padded operand. */
  check_pad(LOOM_DTYPE_F32, 2, (int64_t[]){5, 4}, (int64_t[]){-1, -3}, (int64_t[]){-2, 2}, (int64_t[]){0, 1});
  check_pad(LOOM_DTYPE_BF16, 3, (int64_t[]){3, 4, 2}, (int64_t[]){2, -2, 0}, (int64_t[]){-4, 1, -1}, (int64_t[]){2, 3, 0});
  check_pad(LOOM_DTYPE_C64, 1, (int64_t[]){6}, (int64_t[]){-5}, (int64_t[]){-1}, (int64_t[]){0}); /* all removed */
  check_pad(LOOM_DTYPE_PRED, 1, (int64_t[]){0}, (int64_t[]){2}, (int64_t[]){1}, (int64_t[]){3}); /* empty operand */
  check_pad(LOOM_DTYPE_F64, 0, NULL, NULL, NULL, NULL);
}

/* ---- reverse, broadcast, iota, get_dimension_size ---- */

static void test_reverse(void **state) {
  tb b;
  tb_init(&b);
  lm_type t = T3(LOOM_DTYPE_S16, 3, 4, 5);
  uint32_t a = tb_arg(&b, t);
  lm_op *op = tb_op(&b, b.body, LM_OP_REVERSE, 1, &a, 1, &t);
  tb_ints(&b, op, "dimensions", 2, (int64_t[]){2, 0});
  tb_finish(&b, 1, op->out);
  lm_buffer *x = tb_buf_iota(t, 1, 0);
  lm_buffer *y = tb_run1(&b, &x, 1);
  const int16_t *r = y->data;
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 4; j++)
      for (int k = 0; k < 5; k++) assert_int_equal(r[(i * 4 + j) * 5 + k], ((2 - i) * 4 + j) * 5 + (4 - k));
  lm_buffer_release(x);
  lm_buffer_release(y);
}

static void test_broadcast(void **state) {
  tb b;
  tb_init(&b);
  lm_type ti = T2(LOOM_DTYPE_U32, 2, 3), to = T4(LOOM_DTYPE_U32, 4, 2, 2, 3);
  uint32_t a = tb_arg(&b, ti);
  lm_op *op = tb_op(&b, b.body, LM_OP_BROADCAST, 1, &a, 1, &to);
  tb_ints(&b, op, "broadcast_sizes", 2, (int64_t[]){4, 2});
  tb_finish(&b, 1, op->out);
  lm_buffer *x = tb_buf_iota(ti, 1, 10);
  lm_buffer *y = tb_run1(&b, &x, 1);
  for (int i = 0; i < 48; i++) assert_int_equal(((uint32_t *)y->data)[i], 10 + i % 6);
  lm_buffer_release(x);
  lm_buffer_release(y);
}

static void test_iota(void **state) {
  lm_dtype dts[] = {LOOM_DTYPE_S32, LOOM_DTYPE_U8, LOOM_DTYPE_F32, LOOM_DTYPE_BF16, LOOM_DTYPE_C64, LOOM_DTYPE_F64};
  for (size_t t = 0; t < 6; t++)
    for (int dim = 0; dim < 3; dim++) {
      tb b;
      tb_init(&b);
      lm_type to = T3(dts[t], 3, 4, 5);
      lm_op *op = tb_op(&b, b.body, LM_OP_IOTA, 0, NULL, 1, &to);
      tb_int(&b, op, "iota_dimension", dim);
      tb_finish(&b, 1, op->out);
      lm_buffer *y = tb_run1(&b, NULL, 0);
      size_t es = lm_dtype_size(dts[t]);
      int64_t idx[3] = {0};
      for (int k = 0; k < 60; k++) {
        assert_true(lm_load_f64((char *)y->data + k * es, dts[t]) == (double)idx[dim]);
        lm_index_next(3, to.dims, idx);
      }
      lm_buffer_release(y);
    }
}

static void test_get_dimension_size(void **state) {
  tb b;
  tb_init(&b);
  lm_type ti = T3(LOOM_DTYPE_F32, 2, 7, 3), to = T0(LOOM_DTYPE_S32);
  uint32_t a = tb_arg(&b, ti);
  lm_op *op = tb_op(&b, b.body, LM_OP_GET_DIMENSION_SIZE, 1, &a, 1, &to);
  tb_int(&b, op, "dimension", 1);
  tb_finish(&b, 1, op->out);
  lm_buffer *x = tb_buf_iota(ti, 1, 0);
  lm_buffer *y = tb_run1(&b, &x, 1);
  assert_int_equal(*(int32_t *)y->data, 7);
  lm_buffer_release(x);
  lm_buffer_release(y);
}

/* ---- dynamic forms ---- */

static void test_dynamic_forms(void **state) {
  /* dynamic_reshape with the matching shape, then a mismatching one (run-time error). */
  for (int bad = 0; bad < 2; bad++) {
    tb b;
    tb_init(&b);
    lm_type ti = T2(LOOM_DTYPE_F32, 2, 3), to = T1(LOOM_DTYPE_F32, 6), ts = T1(LOOM_DTYPE_S64, 1);
    uint32_t ins[2] = {tb_arg(&b, ti), tb_arg(&b, ts)};
    lm_op *op = tb_op(&b, b.body, LM_OP_DYNAMIC_RESHAPE, 2, ins, 1, &to);
    tb_finish(&b, 1, op->out);
    int64_t shape = bad ? 5 : 6;
    lm_buffer *args[2] = {tb_buf_iota(ti, 1, 0), tb_buf(ts, &shape)};
    if (bad) {
      tb_expect_error(&b, args, 2, LOOM_SHAPE_MISMATCH, "output_shape[0] = 5");
    } else {
      lm_buffer *y = tb_run1(&b, args, 2);
      assert_buf_eq_bytes(y, args[0]->data, 24);
      lm_buffer_release(y);
    }
    lm_buffer_release(args[0]);
    lm_buffer_release(args[1]);
  }
  /* dynamic_broadcast_in_dim [3] -> [2, 3] */
  {
    tb b;
    tb_init(&b);
    lm_type ti = T1(LOOM_DTYPE_S8, 3), to = T2(LOOM_DTYPE_S8, 2, 3), ts = T1(LOOM_DTYPE_S32, 2);
    uint32_t ins[2] = {tb_arg(&b, ti), tb_arg(&b, ts)};
    lm_op *op = tb_op(&b, b.body, LM_OP_DYNAMIC_BROADCAST_IN_DIM, 2, ins, 1, &to);
    tb_ints(&b, op, "broadcast_dimensions", 1, (int64_t[]){1});
    tb_finish(&b, 1, op->out);
    int32_t shape[2] = {2, 3};
    int8_t v[3] = {1, 2, 3}, want[6] = {1, 2, 3, 1, 2, 3};
    lm_buffer *args[2] = {tb_buf(ti, v), tb_buf(ts, shape)};
    lm_buffer *y = tb_run1(&b, args, 2);
    assert_buf_eq_bytes(y, want, 6);
    lm_buffer_release(y);
    lm_buffer_release(args[0]);
    lm_buffer_release(args[1]);
  }
  /* dynamic_iota and real_dynamic_slice and dynamic_pad */
  {
    tb b;
    tb_init(&b);
    lm_type ts = T1(LOOM_DTYPE_S64, 1), to = T1(LOOM_DTYPE_S32, 4);
    uint32_t in = tb_arg(&b, ts);
    lm_op *op = tb_op(&b, b.body, LM_OP_DYNAMIC_IOTA, 1, &in, 1, &to);
    tb_int(&b, op, "iota_dimension", 0);
    lm_type ts2 = T1(LOOM_DTYPE_S64, 1), tr = T1(LOOM_DTYPE_S32, 2);
    uint32_t s = tb_arg(&b, ts2), l = tb_arg(&b, ts2), st = tb_arg(&b, ts2);
    uint32_t ins[4] = {op->out[0], s, l, st};
    lm_op *sl = tb_op(&b, b.body, LM_OP_REAL_DYNAMIC_SLICE, 4, ins, 1, &tr);
    uint32_t pv = tb_arg(&b, T0(LOOM_DTYPE_S32));
    uint32_t lo = tb_arg(&b, ts2), hi = tb_arg(&b, ts2), inr = tb_arg(&b, ts2);
    lm_type tp = T1(LOOM_DTYPE_S32, 5);
    uint32_t pins[5] = {sl->out[0], pv, lo, hi, inr};
    lm_op *pd = tb_op(&b, b.body, LM_OP_DYNAMIC_PAD, 5, pins, 1, &tp);
    tb_finish(&b, 1, pd->out);
    int64_t n = 4, v1 = 1, v4 = 4, v2 = 2, plo = 1, phi = 1, pin = 1;
    int32_t p = -1;
    lm_buffer *args[9] = {tb_buf(ts, &n), tb_buf(ts2, &v1), tb_buf(ts2, &v4), tb_buf(ts2, &v2), tb_buf(T0(LOOM_DTYPE_S32), &p),
                          tb_buf(ts2, &plo), tb_buf(ts2, &phi), tb_buf(ts2, &pin)};
    lm_buffer *y = tb_run1(&b, args, 8);
    int32_t want[5] = {-1, 1, -1, 3, -1}; /* iota [0,1,2,3] sliced [1:4:2] = [1,3], padded */
    assert_buf_eq_bytes(y, want, sizeof want);
    lm_buffer_release(y);
    for (int i = 0; i < 8; i++) lm_buffer_release(args[i]);
  }
}

static void test_torch_index_select(void **state) {
  /* operand [2, 4, 3], index [2, 2] with batch_dims 1, dim 1 -> result [2, 2, 3] */
  tb b;
  tb_init(&b);
  lm_type ta = T3(LOOM_DTYPE_F32, 2, 4, 3), ti = T2(LOOM_DTYPE_S32, 2, 2), to = T3(LOOM_DTYPE_F32, 2, 2, 3);
  uint32_t ins[2] = {tb_arg(&b, ta), tb_arg(&b, ti)};
  lm_op *op = tb_op(&b, b.body, LM_OP_TORCH_INDEX_SELECT, 2, ins, 1, &to);
  tb_int(&b, op, "dim", 1);
  tb_int(&b, op, "batch_dims", 1);
  tb_finish(&b, 1, op->out);
  int32_t idx[4] = {3, 0, 1, 1};
  lm_buffer *args[2] = {tb_buf_iota(ta, 1, 0), tb_buf(ti, idx)};
  lm_buffer *y = tb_run1(&b, args, 2);
  const float *r = y->data;
  for (int bb = 0; bb < 2; bb++)
    for (int i = 0; i < 2; i++)
      for (int k = 0; k < 3; k++) assert_true(r[(bb * 2 + i) * 3 + k] == (float)((bb * 4 + idx[bb * 2 + i]) * 3 + k));
  lm_buffer_release(y);
  lm_buffer_release(args[0]);
  lm_buffer_release(args[1]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_transpose),        cmocka_unit_test(test_transpose_verify),
      cmocka_unit_test(test_reshape),          cmocka_unit_test(test_slice),
      cmocka_unit_test(test_dynamic_slice),    cmocka_unit_test(test_dynamic_update_slice),
      cmocka_unit_test(test_dynamic_update_slice_in_place),
      cmocka_unit_test(test_concatenate),      cmocka_unit_test(test_pad),
      cmocka_unit_test(test_reverse),          cmocka_unit_test(test_broadcast),
      cmocka_unit_test(test_iota),             cmocka_unit_test(test_get_dimension_size),
      cmocka_unit_test(test_dynamic_forms),    cmocka_unit_test(test_torch_index_select),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
