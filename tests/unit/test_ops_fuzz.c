/* Randomized robustness tests for the structured-op verifiers and kernels: gather, scatter,
 * reduce_window, pad, slice, transpose and dynamic_slice built with random (often invalid)
 * attributes, shapes and index values. Every program must either be refused with LOOM_VERIFY /
 * LOOM_UNSUPPORTED or run to completion; under the sanitizer build any out-of-bounds access
 * fails the test. (Numerical checks are in the per-family tests.) */
#include "test_ops_build.h"

static uint64_t g_seed = 0x9e3779b97f4a7c15ull;
static int64_t rnd(int64_t lo, int64_t hi) {
  return hi <= lo ? lo : (int64_t)((uint64_t)lo + tb_rand(&g_seed) % ((uint64_t)hi - (uint64_t)lo + 1));
}

static int accepted, refused;

static void run_expect_ok_or_verify(tb *b, lm_buffer *const *args, uint32_t nargs) {
  tb_run_result r = tb_run(b, args, nargs);
  if (r.rc == 0) accepted++;
  else if (r.rc == LOOM_VERIFY || r.rc == LOOM_UNSUPPORTED || r.rc == LOOM_SHAPE_MISMATCH || r.rc == LOOM_INVALID_ARGUMENT) refused++;
  else fail_msg("unexpected status %d: %s", r.rc, r.err.msg);
  tb_run_release(&r);
}

static lm_type rand_type(lm_dtype dt, int rank, int64_t maxd) {
  int64_t d[LM_MAX_RANK];
  for (int i = 0; i < rank; i++) d[i] = rnd(0, maxd);
  lm_type t;
  lm_type_tensor(&t, dt, rank, d);
  return t;
}

static lm_buffer *rand_buf(lm_type t, int64_t lo, int64_t hi) {
  lm_buffer *x = NULL;
  assert_int_equal(lm_buffer_alloc(NULL, &t, &x, NULL), 0);
  size_t es = lm_dtype_size(t.dtype);
  for (int64_t i = 0; i < lm_type_numel(&t); i++) lm_store_i64((char *)x->data + i * es, t.dtype, rnd(lo, hi));
  return x;
}

/* Valid gather configurations (the spec's examples and an embedding lookup); the fuzzer mutates
 * them. Scatter uses the same numbers: updates take the gather result's shape. */
typedef struct gcfg {
  int orank, irank, rrank;
  int64_t odims[4], idims[4], rdims[5], sizes[4];
  int n[5];            /* counts of off, coll, obat, ibat, map */
  int64_t v[5][4];     /* off, coll, obat, ibat, map */
  int64_t ivd;
} gcfg;

static const gcfg g_base[3] = {
    {3, 3, 4, {3, 4, 2}, {2, 3, 2}, {2, 3, 2, 2}, {1, 2, 2}, {2, 1, 0, 0, 2}, {{2, 3}, {0}, {0}, {0}, {1, 0}}, 2},
    {4, 4, 5, {2, 3, 4, 2}, {2, 2, 3, 2}, {2, 2, 3, 2, 2}, {1, 1, 2, 2}, {2, 1, 1, 1, 2}, {{3, 4}, {1}, {0}, {1}, {2, 1}}, 3},
    {2, 2, 2, {10, 4}, {5, 1}, {5, 4}, {1, 4}, {1, 1, 0, 0, 1}, {{1}, {0}, {0}, {0}, {0}}, 1},
};

static void mutate(gcfg *c) {
  switch (rnd(0, 7)) {
    case 0: { int f = (int)rnd(0, 4); if (c->n[f]) c->v[f][rnd(0, c->n[f] - 1)] = rnd(-1, 5); break; }
    case 1: { int f = (int)rnd(0, 4); if (c->n[f]) c->n[f]--; else if (c->n[f] < 4) c->v[f][c->n[f]++] = rnd(0, 4); break; }
    case 2: c->ivd = rnd(-1, 5); break;
    case 3: c->rdims[rnd(0, c->rrank - 1)] = rnd(0, 5); break;
    case 4: c->sizes[rnd(0, c->orank - 1)] = rnd(-1, 5); break;
    case 5: c->idims[rnd(0, c->irank - 1)] = rnd(0, 4); break;
    case 6: c->odims[rnd(0, c->orank - 1)] = rnd(0, 5); break;
    default: c->rrank = (int)rnd(0, 5); break;
  }
}

static lm_attr *add_cfg(tb *b, lm_op *op, bool scatter, const gcfg *c) {
  static const char *gn[5] = {"offset_dims", "collapsed_slice_dims", "operand_batching_dims", "start_indices_batching_dims", "start_index_map"};
  static const char *sn[5] = {"update_window_dims", "inserted_window_dims", "input_batching_dims", "scatter_indices_batching_dims",
                              "scatter_dims_to_operand_dims"};
  lm_attr *s = tb_struct(b, op, scatter ? "scatter_dimension_numbers" : "dimension_numbers", scatter ? "stablehlo.scatter" : "stablehlo.gather");
  for (int f = 0; f < 5; f++) tb_field_ints(b, s, scatter ? sn[f] : gn[f], c->n[f], c->v[f]);
  tb_field_int(b, s, "index_vector_dim", c->ivd);
  return s;
}

static void fuzz_gather_scatter(bool scatter) {
  gcfg c = g_base[rnd(0, 2)];
  for (int m = (int)rnd(0, 2); m > 0; m--) mutate(&c);
  tb b;
  tb_init(&b);
  lm_type ot, it, rt;
  lm_type_tensor(&ot, LOOM_DTYPE_F32, c.orank, c.odims);
  lm_type_tensor(&it, rnd(0, 1) ? LOOM_DTYPE_S32 : LOOM_DTYPE_U8, c.irank, c.idims);
  lm_type_tensor(&rt, LOOM_DTYPE_F32, c.rrank, c.rdims);
  lm_buffer *x = rand_buf(ot, -5, 5), *ix = rand_buf(it, -3, 12);
  if (!scatter) {
    uint32_t ins[2] = {tb_arg(&b, ot), tb_arg(&b, it)};
    lm_op *op = tb_op(&b, b.body, LM_OP_GATHER, 2, ins, 1, &rt);
    add_cfg(&b, op, false, &c);
    tb_ints(&b, op, "slice_sizes", c.orank, c.sizes);
    tb_finish(&b, 1, op->out);
    lm_buffer *args[2] = {x, ix};
    run_expect_ok_or_verify(&b, args, 2);
  } else {
    lm_buffer *u = rand_buf(rt, -5, 5);
    uint32_t ins[3] = {tb_arg(&b, ot), tb_arg(&b, it), tb_arg(&b, rt)};
    lm_op *op = tb_op(&b, b.body, LM_OP_SCATTER, 3, ins, 1, rnd(0, 5) ? &ot : &rt);
    add_cfg(&b, op, true, &c);
    tb_binop_region(&b, op, rnd(0, 1) ? LM_OP_ADD : LM_OP_SUBTRACT, LOOM_DTYPE_F32);
    tb_finish(&b, 1, op->out);
    lm_buffer *args[3] = {x, ix, u};
    run_expect_ok_or_verify(&b, args, 3);
    lm_buffer_release(u);
  }
  lm_buffer_release(x);
  lm_buffer_release(ix);
}

static void test_fuzz_gather_scatter(void **state) {
  accepted = refused = 0;
  for (int i = 0; i < 3000; i++) fuzz_gather_scatter(i & 1);
  print_message("gather/scatter: %d accepted, %d refused\n", accepted, refused);
  assert_true(accepted > 20); /* the generator does reach valid programs */
}

static void test_fuzz_window_pad_slice(void **state) {
  accepted = refused = 0;
  for (int it = 0; it < 3000; it++) {
    tb b;
    tb_init(&b);
    int rank = (int)rnd(0, 3);
    lm_type at = rand_type(LOOM_DTYPE_S16, rank, 5), rt = rand_type(LOOM_DTYPE_S16, rank, 6);
    lm_buffer *x = rand_buf(at, -9, 9), *pv = rand_buf(T0(LOOM_DTYPE_S16), 0, 0);
    int64_t v1[4], v2[4], v3[4], v4[4], v5[8];
    for (int d = 0; d < 4; d++) { v1[d] = rnd(-2, 4); v2[d] = rnd(-2, 4); v3[d] = rnd(-1, 3); v4[d] = rnd(-1, 3); }
    for (int d = 0; d < 8; d++) v5[d] = rnd(-3, 3);
    int kind = it % 5;
    uint32_t a = tb_arg(&b, at);
    lm_op *op;
    if (kind == 0) {
      uint32_t p = tb_arg(&b, T0(LOOM_DTYPE_S16));
      uint32_t ins[2] = {a, p};
      op = tb_op(&b, b.body, LM_OP_REDUCE_WINDOW, 2, ins, 1, &rt);
      tb_ints(&b, op, "window_dimensions", rank, v3);
      tb_ints(&b, op, "window_strides", rank, v4);
      tb_ints(&b, op, "base_dilations", rank, v2);
      tb_ints(&b, op, "window_dilations", rank, v1);
      tb_dense_i64(&b, op, "padding", rank, 2, v5);
      tb_binop_region(&b, op, rnd(0, 1) ? LM_OP_MAXIMUM : LM_OP_SUBTRACT, LOOM_DTYPE_S16);
      tb_finish(&b, 1, op->out);
      lm_buffer *args[2] = {x, pv};
      run_expect_ok_or_verify(&b, args, 2);
    } else if (kind == 1) {
      uint32_t p = tb_arg(&b, T0(LOOM_DTYPE_S16));
      uint32_t ins[2] = {a, p};
      op = tb_op(&b, b.body, LM_OP_PAD, 2, ins, 1, &rt);
      tb_ints(&b, op, "edge_padding_low", rank, v1);
      tb_ints(&b, op, "edge_padding_high", rank, v2);
      tb_ints(&b, op, "interior_padding", rank, v4);
      tb_finish(&b, 1, op->out);
      lm_buffer *args[2] = {x, pv};
      run_expect_ok_or_verify(&b, args, 2);
    } else if (kind == 2) {
      op = tb_op(&b, b.body, LM_OP_SLICE, 1, &a, 1, &rt);
      tb_ints(&b, op, "start_indices", rank, v1);
      tb_ints(&b, op, "limit_indices", rank, v2);
      tb_ints(&b, op, "strides", rank, v3);
      tb_finish(&b, 1, op->out);
      run_expect_ok_or_verify(&b, &x, 1);
    } else if (kind == 3) {
      op = tb_op(&b, b.body, LM_OP_TRANSPOSE, 1, &a, 1, &rt);
      for (int d = 0; d < rank; d++) v4[d] = rnd(0, rank);
      tb_ints(&b, op, "permutation", rank, v4);
      tb_finish(&b, 1, op->out);
      run_expect_ok_or_verify(&b, &x, 1);
    } else {
      uint32_t ins[5] = {a};
      lm_buffer *args[5] = {x};
      for (int d = 0; d < rank; d++) {
        ins[1 + d] = tb_arg(&b, T0(LOOM_DTYPE_S64));
        int64_t sv = rnd(INT64_MIN / 2, INT64_MAX / 2) >> (int)rnd(0, 62);
        args[1 + d] = tb_buf(T0(LOOM_DTYPE_S64), &sv);
      }
      op = tb_op(&b, b.body, LM_OP_DYNAMIC_SLICE, 1 + rank, ins, 1, &rt);
      tb_ints(&b, op, "slice_sizes", rank, rt.dims);
      tb_finish(&b, 1, op->out);
      run_expect_ok_or_verify(&b, args, 1 + rank);
      for (int d = 0; d < rank; d++) lm_buffer_release(args[1 + d]);
    }
    lm_buffer_release(x);
    lm_buffer_release(pv);
  }
  print_message("window/pad/slice/transpose/dynamic_slice: %d accepted, %d refused\n", accepted, refused);
  assert_true(accepted > 50);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fuzz_gather_scatter),
      cmocka_unit_test(test_fuzz_window_pad_slice),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
