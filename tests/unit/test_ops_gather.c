/* Unit tests for gather, scatter and dynamic_gather (src/exec/gather.c): the spec's examples
 * (with and without batching dims), random configurations against a literal transcription of the
 * spec's index formulas, clamping of gather start indices, skipping of out-of-bounds scatter
 * updates, several operands, and every body path (replace, binop fast path, generic region). */
#include "test_ops_build.h"

typedef struct cfg {
  int n_off, n_coll, n_obat, n_ibat, n_map;
  int64_t off[8], coll[8], obat[8], ibat[8], map[8];
  int64_t ivd;
} cfg;

static bool has(const int64_t *v, int n, int64_t x) {
  for (int i = 0; i < n; i++)
    if (v[i] == x) return true;
  return false;
}

static int64_t flat(const lm_type *t, const int64_t *idx) {
  int64_t f = 0;
  for (int d = 0; d < t->rank; d++) f = f * t->dims[d] + idx[d];
  return f;
}

static lm_attr *add_dims(tb *b, lm_op *op, bool scatter, const cfg *c) {
  lm_attr *s = tb_struct(b, op, scatter ? "scatter_dimension_numbers" : "dimension_numbers",
                         scatter ? "stablehlo.scatter" : "stablehlo.gather");
  tb_field_ints(b, s, scatter ? "update_window_dims" : "offset_dims", c->n_off, c->off);
  tb_field_ints(b, s, scatter ? "inserted_window_dims" : "collapsed_slice_dims", c->n_coll, c->coll);
  if (c->n_obat) {
    tb_field_ints(b, s, scatter ? "input_batching_dims" : "operand_batching_dims", c->n_obat, c->obat);
    tb_field_ints(b, s, scatter ? "scatter_indices_batching_dims" : "start_indices_batching_dims", c->n_ibat, c->ibat);
  }
  tb_field_ints(b, s, scatter ? "scatter_dims_to_operand_dims" : "start_index_map", c->n_map, c->map);
  tb_field_int(b, s, "index_vector_dim", c->ivd);
  return s;
}

/* Spec 'gather', literally: operand index of result index ri. */
static void gather_ref_index(const cfg *c, const lm_type *ot, const lm_type *it, const lm_buffer *ix, const int64_t *sizes,
                             const lm_type *rt, const int64_t *ri, int64_t *oi) {
  int64_t bidx[LM_MAX_RANK], nb = 0, offi[LM_MAX_RANK], no = 0;
  for (int d = 0; d < rt->rank; d++) {
    if (has(c->off, c->n_off, d)) offi[no++] = ri[d];
    else bidx[nb++] = ri[d];
  }
  int64_t full_start[LM_MAX_RANK] = {0}, full_bat[LM_MAX_RANK] = {0}, full_off[LM_MAX_RANK] = {0};
  for (int k = 0; k < c->n_map; k++) {
    int64_t ii[LM_MAX_RANK], q = 0;
    for (int d = 0; d < it->rank; d++) ii[d] = d == c->ivd ? k : bidx[q++];
    int64_t s = lm_load_index(ix->data, it->dtype, flat(it, ii));
    int64_t dop = c->map[k];
    full_start[dop] = lm_clamp64(s, 0, ot->dims[dop] - sizes[dop]);
  }
  for (int i = 0; i < c->n_obat; i++) full_bat[c->obat[i]] = bidx[c->ibat[i] - (c->ibat[i] < c->ivd ? 0 : 1)];
  int q = 0;
  for (int d = 0; d < ot->rank; d++)
    full_off[d] = (has(c->coll, c->n_coll, d) || has(c->obat, c->n_obat, d)) ? 0 : offi[q++];
  for (int d = 0; d < ot->rank; d++) oi[d] = full_start[d] + full_bat[d] + full_off[d];
}

static void check_gather(const cfg *c, lm_type ot, lm_type it, lm_type rt, const int64_t *sizes, lm_buffer *o, lm_buffer *ix,
                         const void *want) {
  tb b;
  tb_init(&b);
  uint32_t ins[2] = {tb_arg(&b, ot), tb_arg(&b, it)};
  lm_op *op = tb_op(&b, b.body, LM_OP_GATHER, 2, ins, 1, &rt);
  add_dims(&b, op, false, c);
  tb_ints(&b, op, "slice_sizes", ot.rank, sizes);
  tb_bool(&b, op, "indices_are_sorted", 0);
  tb_finish(&b, 1, op->out);
  lm_buffer *args[2] = {o, ix};
  lm_buffer *y = tb_run1(&b, args, 2);
  size_t es = lm_dtype_size(ot.dtype);
  if (want) assert_buf_eq_bytes(y, want, y->nbytes);
  int64_t ri[LM_MAX_RANK] = {0}, oi[LM_MAX_RANK];
  for (int64_t k = 0; k < lm_type_numel(&rt); k++) {
    gather_ref_index(c, &ot, &it, ix, sizes, &rt, ri, oi);
    if (memcmp((char *)y->data + k * es, (char *)o->data + flat(&ot, oi) * es, es) != 0)
      fail_msg("gather: result element %lld differs from the reference", (long long)k);
    lm_index_next(rt.rank, rt.dims, ri);
  }
  lm_buffer_release(y);
}

static void test_gather_spec_examples(void **state) {
  /* spec 'gather' example without batching dims */
  {
    cfg c = {.n_off = 2, .off = {2, 3}, .n_coll = 1, .coll = {0}, .n_map = 2, .map = {1, 0}, .ivd = 2};
    lm_type ot = T3(LOOM_DTYPE_S32, 3, 4, 2), it = T3(LOOM_DTYPE_S64, 2, 3, 2), rt = T4(LOOM_DTYPE_S32, 2, 3, 2, 2);
    int64_t idx[12] = {0, 0, 1, 0, 2, 1, 0, 1, 1, 1, 0, 2};
    int32_t want[24] = {1, 2, 3, 4, 3, 4, 5, 6, 13, 14, 15, 16, 9, 10, 11, 12, 11, 12, 13, 14, 17, 18, 19, 20};
    lm_buffer *o = tb_buf_iota(ot, 1, 1), *ix = tb_buf(it, idx);
    check_gather(&c, ot, it, rt, (int64_t[]){1, 2, 2}, o, ix, want);
    lm_buffer_release(o);
    lm_buffer_release(ix);
  }
  /* the batching-dims example (index [0, 9] clamps) */
  {
    cfg c = {.n_off = 2, .off = {3, 4}, .n_coll = 1, .coll = {1}, .n_obat = 1, .obat = {0}, .n_ibat = 1, .ibat = {1},
             .n_map = 2, .map = {2, 1}, .ivd = 3};
    lm_type ot = T4(LOOM_DTYPE_S32, 2, 3, 4, 2), it = T4(LOOM_DTYPE_S64, 2, 2, 3, 2), rt = T5(LOOM_DTYPE_S32, 2, 2, 3, 2, 2);
    int64_t idx[24] = {0, 0, 1, 0, 2, 1, 0, 1, 1, 1, 0, 9, 0, 0, 2, 1, 2, 2, 1, 2, 0, 1, 1, 0};
    int32_t want[48] = {1,  2,  3,  4,  3,  4,  5,  6,  13, 14, 15, 16, 33, 34, 35, 36, 35, 36, 37, 38, 41, 42, 43, 44,
                        1,  2,  3,  4,  13, 14, 15, 16, 21, 22, 23, 24, 43, 44, 45, 46, 33, 34, 35, 36, 27, 28, 29, 30};
    lm_buffer *o = tb_buf_iota(ot, 1, 1), *ix = tb_buf(it, idx);
    check_gather(&c, ot, it, rt, (int64_t[]){1, 1, 2, 2}, o, ix, want);
    lm_buffer_release(o);
    lm_buffer_release(ix);
  }
}

static void test_gather_random(void **state) {
  uint64_t seed = 12345;
  /* embedding lookup: operand [10, 4], indices [5, 1] (ivd 1), some out of range (clamped) */
  {
    cfg c = {.n_off = 1, .off = {1}, .n_coll = 1, .coll = {0}, .n_map = 1, .map = {0}, .ivd = 1};
    lm_type ot = T2(LOOM_DTYPE_BF16, 10, 4), it = T2(LOOM_DTYPE_S32, 5, 1), rt = T2(LOOM_DTYPE_BF16, 5, 4);
    int32_t idx[5] = {3, 9, -4, 12, 0};
    lm_buffer *o = tb_buf_iota(ot, 1, 0), *ix = tb_buf(it, idx);
    check_gather(&c, ot, it, rt, (int64_t[]){1, 4}, o, ix, NULL);
    lm_buffer_release(o);
    lm_buffer_release(ix);
  }
  /* index_vector_dim 0, window in two dims, implicit trailing dims, unsigned 64-bit indices */
  {
    cfg c = {.n_off = 2, .off = {0, 2}, .n_coll = 1, .coll = {1}, .n_map = 2, .map = {2, 0}, .ivd = 0};
    lm_type ot = T3(LOOM_DTYPE_C64, 6, 5, 7), it = T3(LOOM_DTYPE_U64, 2, 3, 2), rt = T4(LOOM_DTYPE_C64, 3, 3, 4, 2);
    uint64_t idx[12];
    for (int i = 0; i < 12; i++) idx[i] = tb_rand(&seed) % 9;
    idx[5] = UINT64_MAX; /* saturates, then clamps */
    lm_buffer *o = tb_buf_iota(ot, 1, 0), *ix = tb_buf(it, idx);
    check_gather(&c, ot, it, rt, (int64_t[]){3, 1, 4}, o, ix, NULL);
    lm_buffer_release(o);
    lm_buffer_release(ix);
  }
  /* index_vector_dim == rank (scalar indices), batching dims in the middle */
  {
    cfg c = {.n_off = 1, .off = {2}, .n_coll = 1, .coll = {2}, .n_obat = 1, .obat = {0}, .n_ibat = 1, .ibat = {1},
             .n_map = 1, .map = {2}, .ivd = 2};
    lm_type ot = T3(LOOM_DTYPE_S8, 3, 4, 5), it = T2(LOOM_DTYPE_S16, 2, 3), rt = T3(LOOM_DTYPE_S8, 2, 3, 4);
    int16_t idx[6] = {0, 4, 2, -1, 3, 7};
    lm_buffer *o = tb_buf_iota(ot, 1, -60), *ix = tb_buf(it, idx);
    check_gather(&c, ot, it, rt, (int64_t[]){1, 4, 1}, o, ix, NULL);
    lm_buffer_release(o);
    lm_buffer_release(ix);
  }
  /* empty indices */
  {
    cfg c = {.n_off = 1, .off = {1}, .n_coll = 1, .coll = {0}, .n_map = 1, .map = {0}, .ivd = 1};
    lm_type ot = T2(LOOM_DTYPE_F32, 10, 4), it = T2(LOOM_DTYPE_S32, 0, 1), rt = T2(LOOM_DTYPE_F32, 0, 4);
    lm_buffer *o = tb_buf_iota(ot, 1, 0), *ix = tb_buf(it, NULL);
    check_gather(&c, ot, it, rt, (int64_t[]){1, 4}, o, ix, NULL);
    lm_buffer_release(o);
    lm_buffer_release(ix);
  }
}

static void test_gather_verify(void **state) {
  cfg c = {.n_off = 1, .off = {1}, .n_coll = 1, .coll = {0}, .n_map = 1, .map = {0}, .ivd = 1};
  lm_type ot = T2(LOOM_DTYPE_F32, 10, 4), it = T2(LOOM_DTYPE_S32, 5, 1), bad = T2(LOOM_DTYPE_F32, 5, 3);
  tb b;
  tb_init(&b);
  uint32_t ins[2] = {tb_arg(&b, ot), tb_arg(&b, it)};
  lm_op *op = tb_op(&b, b.body, LM_OP_GATHER, 2, ins, 1, &bad);
  add_dims(&b, op, false, &c);
  tb_ints(&b, op, "slice_sizes", 2, (int64_t[]){1, 4});
  tb_finish(&b, 1, op->out);
  lm_buffer *args[2] = {tb_buf_iota(ot, 1, 0), tb_buf_iota(it, 0, 0)};
  tb_expect_error(&b, args, 2, LOOM_VERIFY, "expected tensor<5x4xf32>");
  tb_init(&b);
  ins[0] = tb_arg(&b, ot);
  ins[1] = tb_arg(&b, it);
  lm_type rt = T2(LOOM_DTYPE_F32, 5, 4);
  op = tb_op(&b, b.body, LM_OP_GATHER, 2, ins, 1, &rt);
  add_dims(&b, op, false, &c);
  tb_ints(&b, op, "slice_sizes", 2, (int64_t[]){2, 4}); /* collapsed dim with size 2 */
  tb_finish(&b, 1, op->out);
  tb_expect_error(&b, args, 2, LOOM_VERIFY, "slice size > 1");
  lm_buffer_release(args[0]);
  lm_buffer_release(args[1]);
}

/* ---- scatter ---- */

typedef enum { B_ADD, B_MUL, B_MAX, B_MIN, B_REPLACE, B_SUB, B_KEEP_MAX_ADD } bodyk;

/* Adds the update_computation region for n operands of dtypes dt[]. */
static void scatter_body(tb *b, lm_op *op, bodyk k, uint32_t n, const lm_dtype *dt) {
  lm_type at[8];
  for (uint32_t i = 0; i < 2 * n; i++) at[i] = T0(dt[i % n]);
  lm_block *blk = tb_region(b, op, 2 * n, at);
  if (k == B_REPLACE) { tb_return(b, blk, n, blk->args + n); return; }
  if (k == B_KEEP_MAX_ADD) { /* two operands: (max(a0, u0), a1 + u1) */
    uint32_t x0[2] = {blk->args[0], blk->args[2]}, x1[2] = {blk->args[1], blk->args[3]};
    lm_op *m = tb_op(b, blk, LM_OP_MAXIMUM, 2, x0, 1, &at[0]);
    lm_op *a = tb_op(b, blk, LM_OP_ADD, 2, x1, 1, &at[1]);
    uint32_t r[2] = {m->out[0], a->out[0]};
    tb_return(b, blk, 2, r);
    return;
  }
  lm_opcode code = k == B_ADD ? LM_OP_ADD : k == B_MUL ? LM_OP_MULTIPLY : k == B_MAX ? LM_OP_MAXIMUM
                 : k == B_MIN ? LM_OP_MINIMUM : LM_OP_SUBTRACT;
  lm_op *x = tb_op(b, blk, code, 2, blk->args, 1, &at[0]);
  tb_return(b, blk, 1, x->out);
}

static double combine(bodyk k, double a, double u) {
  switch (k) {
    case B_ADD: return a + u;
    case B_MUL: return a * u;
    case B_MAX: return a > u ? a : u;
    case B_MIN: return a < u ? a : u;
    case B_SUB: return a - u;
    default: return u;
  }
}

/* Spec 'scatter' literally, on doubles, one operand: updates in row-major order. */
static void scatter_ref(const cfg *c, bodyk k, lm_dtype dt, const lm_type *rt, double *res, const lm_type *it, const lm_buffer *ix,
                        const lm_type *ut, const double *upd) {
  int64_t ui[LM_MAX_RANK] = {0};
  for (int64_t q = 0; q < lm_type_numel(ut); q++, lm_index_next(ut->rank, ut->dims, ui)) {
    int64_t sidx[LM_MAX_RANK], ns = 0, widx[LM_MAX_RANK], nw = 0;
    for (int d = 0; d < ut->rank; d++) {
      if (has(c->off, c->n_off, d)) widx[nw++] = ui[d];
      else sidx[ns++] = ui[d];
    }
    int64_t fs[LM_MAX_RANK] = {0}, fb[LM_MAX_RANK] = {0}, fw[LM_MAX_RANK] = {0}, ri[LM_MAX_RANK];
    for (int s = 0; s < c->n_map; s++) {
      int64_t ii[LM_MAX_RANK], p = 0;
      for (int d = 0; d < it->rank; d++) ii[d] = d == c->ivd ? s : sidx[p++];
      fs[c->map[s]] = lm_load_index(ix->data, it->dtype, flat(it, ii));
    }
    for (int i = 0; i < c->n_obat; i++) fb[c->obat[i]] = sidx[c->ibat[i] - (c->ibat[i] < c->ivd ? 0 : 1)];
    int p = 0;
    for (int d = 0; d < rt->rank; d++) fw[d] = (has(c->coll, c->n_coll, d) || has(c->obat, c->n_obat, d)) ? 0 : widx[p++];
    bool inb = true;
    for (int d = 0; d < rt->rank; d++) {
      if (__builtin_add_overflow(fs[d], fb[d] + fw[d], &ri[d]) || ri[d] < 0 || ri[d] >= rt->dims[d]) inb = false;
    }
    if (!inb) continue;
    int64_t f = flat(rt, ri);
    unsigned char tmp[16];
    lm_store_f64(tmp, dt, combine(k, res[f], upd[q])); /* round or wrap as the dtype does */
    res[f] = lm_load_f64(tmp, dt);
  }
}

/* Runs scatter of one operand (dtype dt, integer-valued data so every dtype is exact) with body k,
 * against the reference; generic = force the region path. */
static void check_scatter(const cfg *c, bodyk k, lm_dtype dt, lm_type rt, lm_type it, lm_type ut, const void *idx,
                          bool generic) {
  rt.dtype = ut.dtype = dt;
  tb b;
  tb_init(&b);
  uint32_t ins[3] = {tb_arg(&b, rt), tb_arg(&b, it), tb_arg(&b, ut)};
  lm_op *op = tb_op(&b, b.body, LM_OP_SCATTER, 3, ins, 1, &rt);
  add_dims(&b, op, true, c);
  tb_bool(&b, op, "indices_are_sorted", 0);
  tb_bool(&b, op, "unique_indices", 0);
  scatter_body(&b, op, k, 1, &dt);
  tb_finish(&b, 1, op->out);
  int64_t nr = lm_type_numel(&rt), nu = lm_type_numel(&ut);
  double *res = calloc((size_t)nr + 1, sizeof(double)), *upd = calloc((size_t)nu + 1, sizeof(double));
  lm_buffer *args[3] = {tb_buf_iota(rt, 0, 0), tb_buf(it, idx), tb_buf_iota(ut, 0, 0)};
  size_t es = lm_dtype_size(dt);
  uint64_t seed = 99;
  for (int64_t i = 0; i < nr; i++) {
    res[i] = (double)(tb_rand(&seed) % 7) - (lm_dtype_is_uint(dt) ? 0 : 3);
    if (dt == LOOM_DTYPE_PRED) res[i] = res[i] > 0;
    lm_store_f64((char *)args[0]->data + i * es, dt, res[i]);
  }
  for (int64_t i = 0; i < nu; i++) {
    upd[i] = (double)(tb_rand(&seed) % 5) - (lm_dtype_is_uint(dt) ? 0 : 2);
    if (dt == LOOM_DTYPE_PRED) upd[i] = upd[i] > 0;
    lm_store_f64((char *)args[2]->data + i * es, dt, upd[i]);
  }
  scatter_ref(c, k, dt, &rt, res, &it, args[1], &ut, upd);
  lm_ops_generic_only = generic;
  lm_buffer *y = tb_run1(&b, args, 3);
  lm_ops_generic_only = 0;
  for (int64_t i = 0; i < nr; i++) {
    double got = lm_load_f64((char *)y->data + i * es, dt), want = res[i];
    if (dt == LOOM_DTYPE_PRED) want = want != 0;
    if (got != want)
      fail_msg("scatter %s body %d%s: element %lld is %g, want %g", lm_dtype_name(dt), k, generic ? " (generic)" : "",
               (long long)i, got, want);
  }
  for (int i = 0; i < 3; i++) lm_buffer_release(args[i]);
  lm_buffer_release(y);
  free(res);
  free(upd);
}

static void test_scatter_spec_examples(void **state) {
  /* spec 'scatter' example; [0, 9]-like out-of-bounds windows are skipped */
  cfg c = {.n_off = 2, .off = {2, 3}, .n_coll = 1, .coll = {0}, .n_map = 2, .map = {1, 0}, .ivd = 2};
  lm_type rt = T3(LOOM_DTYPE_S64, 3, 4, 2), it = T3(LOOM_DTYPE_S64, 2, 3, 2), ut = T4(LOOM_DTYPE_S64, 2, 3, 2, 2);
  int64_t idx[12] = {0, 2, 1, 0, 2, 1, 0, 1, 1, 0, 0, 9};
  tb b;
  tb_init(&b);
  uint32_t ins[3] = {tb_arg(&b, rt), tb_arg(&b, it), tb_arg(&b, ut)};
  lm_op *op = tb_op(&b, b.body, LM_OP_SCATTER, 3, ins, 1, &rt);
  add_dims(&b, op, true, &c);
  lm_dtype dt = LOOM_DTYPE_S64;
  scatter_body(&b, op, B_ADD, 1, &dt);
  tb_finish(&b, 1, op->out);
  lm_buffer *args[3] = {tb_buf_iota(rt, 1, 1), tb_buf(it, idx), tb_buf_iota(ut, 0, 1)};
  lm_buffer *y = tb_run1(&b, args, 3);
  int64_t want[24] = {1, 2, 5, 6, 7, 8, 7, 8, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 21, 22, 23, 24};
  assert_buf_eq_bytes(y, want, sizeof want);
  /* inputs are not modified */
  assert_int_equal(((int64_t *)args[0]->data)[2], 3);
  lm_buffer_release(y);
  for (int i = 0; i < 3; i++) lm_buffer_release(args[i]);

  /* the batching-dims example of the interpreter tests */
  cfg cb = {.n_off = 2, .off = {3, 4}, .n_coll = 1, .coll = {1}, .n_obat = 1, .obat = {0}, .n_ibat = 1, .ibat = {1},
            .n_map = 2, .map = {2, 1}, .ivd = 3};
  lm_type rt2 = T4(LOOM_DTYPE_S64, 2, 3, 4, 2), it2 = T4(LOOM_DTYPE_S64, 2, 2, 3, 2), ut2 = T5(LOOM_DTYPE_S64, 2, 2, 3, 2, 2);
  int64_t idx2[24] = {0, 0, 1, 0, 2, 1, 0, 1, 1, 1, 0, 9, 0, 0, 2, 1, 2, 2, 1, 2, 0, 1, 1, 0};
  int64_t want2[48] = {3,  4,  6,  7,  6,  7,  7,  8,  9,  10, 11, 12, 15, 16, 17, 18, 17, 18, 19, 20, 22, 23, 24, 25,
                       25, 26, 28, 29, 30, 31, 31, 32, 35, 36, 38, 39, 38, 39, 39, 40, 41, 42, 44, 45, 46, 47, 47, 48};
  for (int generic = 0; generic < 2; generic++) {
    tb_init(&b);
    uint32_t in2[3] = {tb_arg(&b, rt2), tb_arg(&b, it2), tb_arg(&b, ut2)};
    op = tb_op(&b, b.body, LM_OP_SCATTER, 3, in2, 1, &rt2);
    add_dims(&b, op, true, &cb);
    scatter_body(&b, op, B_ADD, 1, &dt);
    tb_finish(&b, 1, op->out);
    lm_buffer *a2[3] = {tb_buf_iota(rt2, 1, 1), tb_buf(it2, idx2), tb_buf_iota(ut2, 0, 1)};
    lm_ops_generic_only = generic;
    y = tb_run1(&b, a2, 3);
    lm_ops_generic_only = 0;
    assert_buf_eq_bytes(y, want2, sizeof want2);
    lm_buffer_release(y);
    for (int i = 0; i < 3; i++) lm_buffer_release(a2[i]);
  }
}

static void test_scatter_random(void **state) {
  /* windows of 2x2 into [5, 6, 7] at row/col starts, some partly or fully out of bounds */
  cfg c1 = {.n_off = 2, .off = {1, 2}, .n_coll = 1, .coll = {0}, .n_map = 2, .map = {0, 2}, .ivd = 1};
  lm_type rt1 = T3(LOOM_DTYPE_F32, 5, 6, 7), it1 = T2(LOOM_DTYPE_S32, 6, 2), ut1 = T3(LOOM_DTYPE_F32, 6, 6, 3);
  int32_t idx1[12] = {0, 0, 4, 4, 4, 6, -1, 0, 2, 5, 0, 0}; /* (4,6): window cols 6..8 partly out */
  /* scalar indices (ivd = rank), duplicates: embedding-gradient style */
  cfg c2 = {.n_off = 1, .off = {1}, .n_coll = 1, .coll = {0}, .n_map = 1, .map = {0}, .ivd = 1};
  lm_type rt2 = T2(LOOM_DTYPE_F32, 8, 3), it2 = T1(LOOM_DTYPE_S64, 10), ut2 = T2(LOOM_DTYPE_F32, 10, 3);
  int64_t idx2[10] = {1, 7, 1, 3, 8, INT64_MIN, 0, 7, INT64_MAX, 2}; /* hostile extremes are out of bounds */
  /* batching dims with index_vector_dim in the middle */
  cfg c3 = {.n_off = 1, .off = {2}, .n_coll = 1, .coll = {1}, .n_obat = 1, .obat = {0}, .n_ibat = 1, .ibat = {2},
            .n_map = 1, .map = {1}, .ivd = 1};
  lm_type rt3 = T3(LOOM_DTYPE_F32, 3, 5, 4), it3 = T3(LOOM_DTYPE_U8, 2, 1, 3), ut3 = T3(LOOM_DTYPE_F32, 2, 3, 4);
  uint8_t idx3[6] = {0, 4, 2, 4, 4, 9};
  lm_dtype dts[] = {LOOM_DTYPE_F32, LOOM_DTYPE_F64, LOOM_DTYPE_BF16, LOOM_DTYPE_F16, LOOM_DTYPE_S32,
                    LOOM_DTYPE_U8,  LOOM_DTYPE_S64, LOOM_DTYPE_S8,   LOOM_DTYPE_U64};
  bodyk ks[] = {B_ADD, B_MUL, B_MAX, B_MIN, B_REPLACE};
  for (size_t t = 0; t < sizeof dts / sizeof *dts; t++)
    for (size_t q = 0; q < 5; q++) {
      check_scatter(&c1, ks[q], dts[t], rt1, it1, ut1, idx1, false);
      check_scatter(&c2, ks[q], dts[t], rt2, it2, ut2, idx2, false);
      check_scatter(&c3, ks[q], dts[t], rt3, it3, ut3, idx3, false);
    }
  /* generic region path (needs add/max/... kernels: the elementwise family's or stand-ins) */
  lm_dtype gd[] = {LOOM_DTYPE_F32, LOOM_DTYPE_S32};
  bodyk gk[] = {B_ADD, B_MAX, B_REPLACE, B_SUB};
  for (size_t t = 0; t < 2; t++)
    for (size_t q = 0; q < 4; q++) {
      check_scatter(&c1, gk[q], gd[t], rt1, it1, ut1, idx1, true);
      check_scatter(&c2, gk[q], gd[t], rt2, it2, ut2, idx2, true);
      check_scatter(&c3, gk[q], gd[t], rt3, it3, ut3, idx3, true);
    }
  /* subtract has no fast path: generic even without forcing */
  check_scatter(&c2, B_SUB, LOOM_DTYPE_S32, rt2, it2, ut2, idx2, false);
  /* i1: add = or, multiply = and */
  check_scatter(&c2, B_REPLACE, LOOM_DTYPE_PRED, rt2, it2, ut2, idx2, false);
}

static void test_scatter_two_operands(void **state) {
  /* (max, add) body over an f32 and an s32 operand; and replace with two operands */
  cfg c = {.n_off = 1, .off = {1}, .n_coll = 1, .coll = {0}, .n_map = 1, .map = {0}, .ivd = 1};
  for (int q = 0; q < 4; q++) {
    int rep = q % 2, generic = q / 2;
    tb b;
    tb_init(&b);
    lm_type r0 = T2(LOOM_DTYPE_F32, 4, 2), r1 = T2(LOOM_DTYPE_S32, 4, 2), it = T1(LOOM_DTYPE_S32, 3);
    lm_type u0 = T2(LOOM_DTYPE_F32, 3, 2), u1 = T2(LOOM_DTYPE_S32, 3, 2);
    uint32_t ins[5] = {tb_arg(&b, r0), tb_arg(&b, r1), tb_arg(&b, it), tb_arg(&b, u0), tb_arg(&b, u1)};
    lm_type outs[2] = {r0, r1};
    lm_op *op = tb_op(&b, b.body, LM_OP_SCATTER, 5, ins, 2, outs);
    add_dims(&b, op, true, &c);
    lm_dtype dt[2] = {LOOM_DTYPE_F32, LOOM_DTYPE_S32};
    scatter_body(&b, op, rep ? B_REPLACE : B_KEEP_MAX_ADD, 2, dt);
    tb_finish(&b, 2, op->out);
    int32_t idx[3] = {2, 0, 2};
    float f0[8] = {1, 8, 2, 7, 3, 6, 4, 5}, fu[6] = {9, 0, 5, 5, 1, 10};
    int32_t i0[8] = {1, 2, 3, 4, 5, 6, 7, 8}, iu[6] = {10, 20, 30, 40, 50, 60};
    lm_buffer *args[5] = {tb_buf(r0, f0), tb_buf(r1, i0), tb_buf(it, idx), tb_buf(u0, fu), tb_buf(u1, iu)};
    lm_ops_generic_only = generic;
    tb_run_result r = tb_run(&b, args, 5);
    lm_ops_generic_only = 0;
    if (r.rc) fail_msg("%s", r.err.msg);
    float wf[2][8] = {{5, 8, 2, 7, 9, 10, 4, 5}, {5, 5, 2, 7, 1, 10, 4, 5}};
    int32_t wi[2][8] = {{31, 42, 3, 4, 65, 86, 7, 8}, {30, 40, 3, 4, 50, 60, 7, 8}};
    assert_buf_eq_bytes(r.out[0], wf[rep], sizeof wf[rep]);
    assert_buf_eq_bytes(r.out[1], wi[rep], sizeof wi[rep]);
    tb_run_release(&r);
    for (int i = 0; i < 5; i++) lm_buffer_release(args[i]);
  }
}

static void test_scatter_verify(void **state) {
  cfg c = {.n_off = 1, .off = {1}, .n_coll = 1, .coll = {0}, .n_map = 1, .map = {0}, .ivd = 1};
  tb b;
  tb_init(&b);
  lm_type rt = T2(LOOM_DTYPE_F32, 4, 2), it = T1(LOOM_DTYPE_S32, 3), ut = T2(LOOM_DTYPE_F32, 3, 3);
  uint32_t ins[3] = {tb_arg(&b, rt), tb_arg(&b, it), tb_arg(&b, ut)};
  lm_op *op = tb_op(&b, b.body, LM_OP_SCATTER, 3, ins, 1, &rt);
  add_dims(&b, op, true, &c);
  lm_dtype dt = LOOM_DTYPE_F32;
  scatter_body(&b, op, B_ADD, 1, &dt);
  tb_finish(&b, 1, op->out);
  lm_buffer *args[3] = {tb_buf_iota(rt, 0, 0), tb_buf_iota(it, 0, 0), tb_buf_iota(ut, 0, 0)};
  tb_expect_error(&b, args, 3, LOOM_VERIFY, "exceeds input dimension");
  for (int i = 0; i < 3; i++) lm_buffer_release(args[i]);
}

static void test_dynamic_gather(void **state) {
  cfg c = {.n_off = 1, .off = {1}, .n_coll = 1, .coll = {0}, .n_map = 1, .map = {0}, .ivd = 1};
  for (int bad = 0; bad < 2; bad++) {
    tb b;
    tb_init(&b);
    lm_type ot = T2(LOOM_DTYPE_S32, 5, 3), it = T2(LOOM_DTYPE_S32, 2, 1), st = T1(LOOM_DTYPE_S64, 2), rt = T2(LOOM_DTYPE_S32, 2, 2);
    uint32_t ins[3] = {tb_arg(&b, ot), tb_arg(&b, it), tb_arg(&b, st)};
    lm_op *op = tb_op(&b, b.body, LM_OP_DYNAMIC_GATHER, 3, ins, 1, &rt);
    add_dims(&b, op, false, &c);
    tb_finish(&b, 1, op->out);
    int32_t idx[2] = {4, 1};
    int64_t sz[2] = {1, bad ? 3 : 2};
    lm_buffer *args[3] = {tb_buf_iota(ot, 1, 0), tb_buf(it, idx), tb_buf(st, sz)};
    if (bad) {
      tb_expect_error(&b, args, 3, LOOM_VERIFY, "expected tensor<2x3xi32>");
    } else {
      lm_buffer *y = tb_run1(&b, args, 3);
      int32_t want[4] = {12, 13, 3, 4};
      assert_buf_eq_bytes(y, want, sizeof want);
      lm_buffer_release(y);
    }
    for (int i = 0; i < 3; i++) lm_buffer_release(args[i]);
  }
}

int main(void) {
  tb_ensure_stub_kernels();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_gather_spec_examples), cmocka_unit_test(test_gather_random),
      cmocka_unit_test(test_gather_verify),        cmocka_unit_test(test_scatter_spec_examples),
      cmocka_unit_test(test_scatter_random),       cmocka_unit_test(test_scatter_two_operands),
      cmocka_unit_test(test_scatter_verify),       cmocka_unit_test(test_dynamic_gather),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
