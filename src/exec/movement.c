/* Op family: data movement. Kernels that only move elements (any dtype, by element size):
 * reshape, transpose, slice, dynamic_slice, dynamic_update_slice, concatenate, pad, reverse,
 * broadcast (legacy), iota, get_dimension_size, torch_index_select, and the dynamic_* forms of
 * these when their result shapes are static (dynamic_broadcast_in_dim, dynamic_iota,
 * dynamic_pad, dynamic_reshape, real_dynamic_slice). Semantics: StableHLO spec, section of each
 * op. Verifiers check every shape relation the kernels rely on, so kernels index without checks;
 * values known only at run time (start indices, dynamic shapes) are checked in the kernels. */
#include <string.h>
#include "exec/ops_util.h"

static int tensors(const lm_op *op, const lm_func *fn, lm_err *err) {
  return lm_check_tensors(op, fn, op->nin, op->nout, err);
}

static int same_elem(const lm_op *op, const lm_type *a, const lm_type *b, lm_err *err) {
  if (a->dtype != b->dtype)
    return lm_op_err(err, op, LOOM_VERIFY, "element types differ: %s and %s", lm_dtype_name(a->dtype),
                     lm_dtype_name(b->dtype));
  return 0;
}

static int shape_err(const lm_op *op, const lm_type *got, const int64_t *want, int rank, lm_err *err) {
  char a[256], b[256];
  lm_type w;
  lm_type_tensor(&w, got->dtype, rank, want);
  return lm_op_err(err, op, LOOM_VERIFY, "result type is %s, expected %s", lm_type_str(got, a, sizeof a),
                   lm_type_str(&w, b, sizeof b));
}

/* Checks that t has rank `rank` and dims want[]. */
static int expect_shape(const lm_op *op, const lm_type *t, const int64_t *want, int rank, lm_err *err) {
  bool ok = t->rank == rank;
  for (int d = 0; ok && d < rank; d++) ok = t->dims[d] == want[d];
  return ok ? 0 : shape_err(op, t, want, rank, err);
}

static size_t esz(const lm_buffer *b) { return lm_dtype_size(b->type.dtype); }

/* An integer scalar (rank 0, or one element) operand as int64. */
static int64_t scalar_index(const lm_buffer *b) { return lm_load_index(b->data, b->type.dtype, 0); }

static bool is_int_type(const lm_type *t) { return lm_dtype_is_int(t->dtype); }

/* ---- reshape (spec 'reshape') ---- */

static int v_reshape(const lm_op *op, const lm_func *fn, lm_err *err) {
  LM_TRY(lm_check_arity(op, 1, 1, err));
  LM_TRY(tensors(op, fn, err));
  const lm_type *a = lm_vtype(fn, op->in[0]), *r = lm_vtype(fn, op->out[0]);
  LM_TRY(same_elem(op, a, r, err));
  if (lm_type_numel(a) != lm_type_numel(r)) {
    char x[256], y[256];
    return lm_op_err(err, op, LOOM_VERIFY, "cannot reshape %s to %s: element counts differ",
                     lm_type_str(a, x, sizeof x), lm_type_str(r, y, sizeof y));
  }
  return 0;
}

/* The result is a view of the operand's data (row-major order is unchanged): no copy. */
static int k_reshape(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  int rc = lm_buffer_view(&k->fn->value_types[k->op->out[0]], in[0], &out[0], k->err);
  if (rc < 0) return lm_kerr(k, rc, "%s", k->err ? k->err->msg : "cannot view the operand");
  return 0;
}

/* ---- transpose (spec 'transpose') ---- */

static int v_transpose(const lm_op *op, const lm_func *fn, lm_err *err) {
  LM_TRY(lm_check_arity(op, 1, 1, err));
  LM_TRY(tensors(op, fn, err));
  const lm_type *a = lm_vtype(fn, op->in[0]), *r = lm_vtype(fn, op->out[0]);
  LM_TRY(same_elem(op, a, r, err));
  int64_t perm[LM_MAX_RANK], want[LM_MAX_RANK];
  int n = lm_op_ints(op, "permutation", perm, LM_MAX_RANK, -1, err);
  if (n < 0) return n;
  if (n != a->rank || !lm_dims_valid(perm, n, a->rank)) {
    char b[256];
    return lm_op_err(err, op, LOOM_VERIFY, "permutation %s is not a permutation of [0, %d)",
                     lm_ints_str(perm, n, b, sizeof b), a->rank);
  }
  for (int d = 0; d < n; d++) want[d] = a->dims[perm[d]];
  return expect_shape(op, r, want, n, err);
}

static int k_transpose(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  int64_t perm[LM_MAX_RANK], is[LM_MAX_RANK], os[LM_MAX_RANK], ss[LM_MAX_RANK];
  int n = lm_attr_ints(lm_op_attr(k->op, "permutation"), perm, LM_MAX_RANK);
  lm_row_strides(&in[0]->type, is);
  lm_row_strides(&out[0]->type, os);
  for (int d = 0; d < n; d++) ss[d] = is[perm[d]];
  lm_copy_strided(n, out[0]->type.dims, esz(in[0]), out[0]->data, os, in[0]->data, ss);
  return 0;
}

/* ---- slice (spec 'slice') ---- */

static int v_slice(const lm_op *op, const lm_func *fn, lm_err *err) {
  LM_TRY(lm_check_arity(op, 1, 1, err));
  LM_TRY(tensors(op, fn, err));
  const lm_type *a = lm_vtype(fn, op->in[0]), *r = lm_vtype(fn, op->out[0]);
  LM_TRY(same_elem(op, a, r, err));
  int64_t start[LM_MAX_RANK], limit[LM_MAX_RANK], step[LM_MAX_RANK], want[LM_MAX_RANK];
  int ns = lm_op_ints(op, "start_indices", start, LM_MAX_RANK, -1, err);
  if (ns < 0) return ns;
  int nl = lm_op_ints(op, "limit_indices", limit, LM_MAX_RANK, -1, err);
  if (nl < 0) return nl;
  int nt = lm_op_ints(op, "strides", step, LM_MAX_RANK, a->rank, err);
  if (nt < 0) return nt;
  if (!lm_op_attr(op, "strides"))
    for (int d = 0; d < a->rank; d++) step[d] = 1;
  if (ns != a->rank || nl != a->rank || nt != a->rank)
    return lm_op_err(err, op, LOOM_VERIFY, "start_indices, limit_indices and strides must have %d values (the operand rank)",
                     a->rank);
  for (int d = 0; d < a->rank; d++) {
    if (start[d] < 0 || start[d] > limit[d] || limit[d] > a->dims[d])
      return lm_op_err(err, op, LOOM_VERIFY, "dimension %d: need 0 <= start (%lld) <= limit (%lld) <= size (%lld)", d,
                       (long long)start[d], (long long)limit[d], (long long)a->dims[d]);
    if (step[d] <= 0) return lm_op_err(err, op, LOOM_VERIFY, "dimension %d: stride %lld must be positive", d, (long long)step[d]);
    want[d] = limit[d] == start[d] ? 0 : (limit[d] - start[d] - 1) / step[d] + 1;
  }
  return expect_shape(op, r, want, a->rank, err);
}

/* Copies the box of out's shape from operand a starting at start[] with steps step[]. */
static void slice_copy(lm_buffer *a, lm_buffer *o, const int64_t *start, const int64_t *step) {
  int rank = a->type.rank;
  int64_t is[LM_MAX_RANK], os[LM_MAX_RANK], ss[LM_MAX_RANK], off = 0;
  lm_row_strides(&a->type, is);
  lm_row_strides(&o->type, os);
  for (int d = 0; d < rank; d++) {
    off += start[d] * is[d];
    ss[d] = is[d] * (step ? step[d] : 1);
  }
  lm_copy_strided(rank, o->type.dims, esz(a), o->data, os, (char *)a->data + off * (int64_t)esz(a), ss);
}

static int k_slice(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  int64_t start[LM_MAX_RANK], step[LM_MAX_RANK];
  int rank = in[0]->type.rank;
  lm_attr_ints(lm_op_attr(k->op, "start_indices"), start, LM_MAX_RANK);
  if (lm_attr_ints(lm_op_attr(k->op, "strides"), step, LM_MAX_RANK) != rank)
    for (int d = 0; d < rank; d++) step[d] = 1;
  slice_copy(in[0], out[0], start, step);
  return 0;
}

/* ---- dynamic_slice (spec 'dynamic_slice') ---- */

/* Start indices of dynamic_slice / dynamic_update_slice: either one integer scalar operand per
 * dimension (the StableHLO form) or a single 1-D tensor (an older form). first = index of the
 * first start operand. */
static int v_start_operands(const lm_op *op, const lm_func *fn, uint32_t first, int rank, lm_err *err) {
  uint32_t n = op->nin - first;
  if (n == 1 && rank != 1) {
    const lm_type *t = lm_vtype(fn, op->in[first]);
    if (t->rank == 1 && t->dims[0] == rank && is_int_type(t)) return 0;
  }
  if ((int)n != rank)
    return lm_op_err(err, op, LOOM_VERIFY, "expects %d start indices (the operand rank), has %u", rank, n);
  for (uint32_t i = first; i < op->nin; i++) {
    const lm_type *t = lm_vtype(fn, op->in[i]);
    if (t->kind != LM_TYPE_TENSOR || t->rank != 0 || !is_int_type(t))
      return lm_op_err(err, op, LOOM_VERIFY, "start index operand %u must be a 0-d integer tensor", i - first);
    if (i > first && t->dtype != lm_vtype(fn, op->in[first])->dtype)
      return lm_op_err(err, op, LOOM_VERIFY, "start indices must all have the same type");
  }
  return 0;
}

static void read_starts(lm_buffer *const *in, uint32_t first, uint32_t nin, int rank, int64_t *start) {
  if (nin - first == 1 && in[first]->type.rank == 1) {
    for (int d = 0; d < rank; d++) start[d] = lm_load_index(in[first]->data, in[first]->type.dtype, d);
    return;
  }
  for (int d = 0; d < rank; d++) start[d] = scalar_index(in[first + d]);
}

static int v_dynamic_slice(const lm_op *op, const lm_func *fn, lm_err *err) {
  if (op->nout != 1 || op->nin < 1) return lm_op_err(err, op, LOOM_VERIFY, "expects an operand, start indices and 1 result");
  LM_TRY(tensors(op, fn, err));
  const lm_type *a = lm_vtype(fn, op->in[0]), *r = lm_vtype(fn, op->out[0]);
  LM_TRY(same_elem(op, a, r, err));
  LM_TRY(v_start_operands(op, fn, 1, a->rank, err));
  int64_t sizes[LM_MAX_RANK];
  int n = lm_op_ints(op, "slice_sizes", sizes, LM_MAX_RANK, -1, err);
  if (n < 0) return n;
  if (n != a->rank) return lm_op_err(err, op, LOOM_VERIFY, "slice_sizes must have %d values", a->rank);
  for (int d = 0; d < n; d++)
    if (sizes[d] < 0 || sizes[d] > a->dims[d])
      return lm_op_err(err, op, LOOM_VERIFY, "slice_sizes[%d] = %lld is outside [0, %lld]", d, (long long)sizes[d],
                       (long long)a->dims[d]);
  return expect_shape(op, r, sizes, n, err);
}

static int k_dynamic_slice(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  int rank = in[0]->type.rank;
  int64_t start[LM_MAX_RANK];
  read_starts(in, 1, k->op->nin, rank, start);
  /* Spec: start indices are clamped to [0, dim - slice_size]. */
  for (int d = 0; d < rank; d++) start[d] = lm_clamp64(start[d], 0, in[0]->type.dims[d] - out[0]->type.dims[d]);
  slice_copy(in[0], out[0], start, NULL);
  return 0;
}

/* ---- dynamic_update_slice (spec 'dynamic_update_slice') ---- */

static int v_dynamic_update_slice(const lm_op *op, const lm_func *fn, lm_err *err) {
  if (op->nout != 1 || op->nin < 2)
    return lm_op_err(err, op, LOOM_VERIFY, "expects an operand, an update, start indices and 1 result");
  LM_TRY(tensors(op, fn, err));
  const lm_type *a = lm_vtype(fn, op->in[0]), *u = lm_vtype(fn, op->in[1]), *r = lm_vtype(fn, op->out[0]);
  LM_TRY(same_elem(op, a, u, err));
  LM_TRY(expect_shape(op, r, a->dims, a->rank, err));
  LM_TRY(same_elem(op, a, r, err));
  if (u->rank != a->rank) return lm_op_err(err, op, LOOM_VERIFY, "update rank %d differs from operand rank %d", u->rank, a->rank);
  for (int d = 0; d < a->rank; d++)
    if (u->dims[d] > a->dims[d])
      return lm_op_err(err, op, LOOM_VERIFY, "update dimension %d (%lld) is larger than the operand's (%lld)", d,
                       (long long)u->dims[d], (long long)a->dims[d]);
  return v_start_operands(op, fn, 2, a->rank, err);
}

/* Updates the operand in place when the operand dies here (lm_input_donatable), else a copy. */
static int k_dynamic_update_slice(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  lm_buffer *a = in[0], *u = in[1];
  if (lm_input_donatable(k, 0) && u != a && u->base != a) {
    out[0] = lm_buffer_retain(a);
  } else {
    LM_TRY(lm_kalloc(k, &k->fn->value_types[k->op->out[0]], &out[0]));
    if (out[0]->nbytes) memcpy(out[0]->data, a->data, out[0]->nbytes);
  }
  lm_buffer *o = out[0];
  int rank = a->type.rank;
  int64_t start[LM_MAX_RANK], os[LM_MAX_RANK], us[LM_MAX_RANK], off = 0;
  read_starts(in, 2, k->op->nin, rank, start);
  lm_row_strides(&o->type, os);
  lm_row_strides(&u->type, us);
  for (int d = 0; d < rank; d++) {
    start[d] = lm_clamp64(start[d], 0, a->type.dims[d] - u->type.dims[d]);
    off += start[d] * os[d];
  }
  lm_copy_strided(rank, u->type.dims, esz(a), (char *)o->data + off * (int64_t)esz(a), os, u->data, us);
  return 0;
}

/* ---- concatenate (spec 'concatenate') ---- */

static int v_concatenate(const lm_op *op, const lm_func *fn, lm_err *err) {
  if (op->nout != 1 || op->nin < 1) return lm_op_err(err, op, LOOM_VERIFY, "expects at least 1 operand and 1 result");
  LM_TRY(tensors(op, fn, err));
  const lm_type *a = lm_vtype(fn, op->in[0]), *r = lm_vtype(fn, op->out[0]);
  const lm_attr *da = lm_op_attr(op, "dimension");
  if (!da) return lm_op_err(err, op, LOOM_VERIFY, "missing attribute 'dimension'");
  int64_t dim = lm_attr_int_or(da, -1);
  if (dim < 0 || dim >= a->rank)
    return lm_op_err(err, op, LOOM_VERIFY, "dimension %lld is outside [0, %d)", (long long)dim, a->rank);
  int64_t want[LM_MAX_RANK];
  memcpy(want, a->dims, sizeof want);
  want[dim] = 0;
  for (uint32_t i = 0; i < op->nin; i++) {
    const lm_type *t = lm_vtype(fn, op->in[i]);
    LM_TRY(same_elem(op, a, t, err));
    if (t->rank != a->rank) return lm_op_err(err, op, LOOM_VERIFY, "operand %u has rank %d, operand 0 has %d", i, t->rank, a->rank);
    for (int d = 0; d < a->rank; d++)
      if (d != dim && t->dims[d] != a->dims[d])
        return lm_op_err(err, op, LOOM_VERIFY, "operand %u differs from operand 0 in dimension %d", i, d);
    want[dim] += t->dims[dim];
  }
  LM_TRY(same_elem(op, a, r, err));
  return expect_shape(op, r, want, a->rank, err);
}

static int k_concatenate(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  lm_buffer *o = out[0];
  int rank = o->type.rank;
  int64_t dim = lm_attr_int_or(lm_op_attr(k->op, "dimension"), 0);
  int64_t os[LM_MAX_RANK], is[LM_MAX_RANK], pos = 0;
  size_t es = esz(o);
  lm_row_strides(&o->type, os);
  for (uint32_t i = 0; i < k->op->nin; i++) {
    lm_row_strides(&in[i]->type, is);
    lm_copy_strided(rank, in[i]->type.dims, es, (char *)o->data + pos * os[dim] * (int64_t)es, os, in[i]->data, is);
    pos += in[i]->type.dims[dim];
  }
  return 0;
}

/* ---- pad (spec 'pad') ---- */

/* Result dims of pad; false if a dim would be negative. */
static bool pad_dims(const lm_type *a, const int64_t *lo, const int64_t *hi, const int64_t *in, int64_t *want) {
  for (int d = 0; d < a->rank; d++) {
    int64_t n = a->dims[d], v;
    if (__builtin_mul_overflow(n > 0 ? n - 1 : 0, in[d], &v) || __builtin_add_overflow(v, n, &v) ||
        __builtin_add_overflow(v, lo[d], &v) || __builtin_add_overflow(v, hi[d], &v) || v < 0)
      return false;
    want[d] = v;
  }
  return true;
}

static int v_pad(const lm_op *op, const lm_func *fn, lm_err *err) {
  LM_TRY(lm_check_arity(op, 2, 1, err));
  LM_TRY(tensors(op, fn, err));
  const lm_type *a = lm_vtype(fn, op->in[0]), *p = lm_vtype(fn, op->in[1]), *r = lm_vtype(fn, op->out[0]);
  LM_TRY(same_elem(op, a, p, err));
  LM_TRY(same_elem(op, a, r, err));
  if (p->rank != 0) return lm_op_err(err, op, LOOM_VERIFY, "padding_value must be a 0-d tensor");
  int64_t lo[LM_MAX_RANK], hi[LM_MAX_RANK], inner[LM_MAX_RANK], want[LM_MAX_RANK];
  int n1 = lm_op_ints(op, "edge_padding_low", lo, LM_MAX_RANK, -1, err);
  if (n1 < 0) return n1;
  int n2 = lm_op_ints(op, "edge_padding_high", hi, LM_MAX_RANK, -1, err);
  if (n2 < 0) return n2;
  int n3 = lm_op_ints(op, "interior_padding", inner, LM_MAX_RANK, -1, err);
  if (n3 < 0) return n3;
  if (n1 != a->rank || n2 != a->rank || n3 != a->rank)
    return lm_op_err(err, op, LOOM_VERIFY, "edge_padding_low, edge_padding_high and interior_padding must have %d values",
                     a->rank);
  for (int d = 0; d < a->rank; d++) {
    if (inner[d] < 0) return lm_op_err(err, op, LOOM_VERIFY, "interior_padding[%d] = %lld is negative", d, (long long)inner[d]);
    if (lo[d] < -(INT64_C(1) << 40) || lo[d] > (INT64_C(1) << 40) || hi[d] < -(INT64_C(1) << 40) ||
        hi[d] > (INT64_C(1) << 40) || inner[d] > (INT64_C(1) << 40))
      return lm_op_err(err, op, LOOM_VERIFY, "padding in dimension %d is out of range", d);
  }
  if (!pad_dims(a, lo, hi, inner, want)) return lm_op_err(err, op, LOOM_VERIFY, "padding gives a negative or too large dimension size");
  return expect_shape(op, r, want, a->rank, err);
}

/* pad semantics with the paddings given as values; the caller has checked shapes. */
static void pad_run(lm_buffer *a, lm_buffer *pv, lm_buffer *o, const int64_t *lo, const int64_t *inner) {
  int rank = a->type.rank;
  size_t es = esz(a);
  int64_t n = lm_type_numel(&o->type);
  lm_fill_elems(o->data, pv->data, es, (size_t)n);
  int64_t is[LM_MAX_RANK], os[LM_MAX_RANK], ss[LM_MAX_RANK], ds[LM_MAX_RANK], cnt[LM_MAX_RANK];
  int64_t soff = 0, doff = 0;
  lm_row_strides(&a->type, is);
  lm_row_strides(&o->type, os);
  for (int d = 0; d < rank; d++) {
    int64_t step = inner[d] + 1, out = o->type.dims[d];
    /* operand indices j with 0 <= lo + j*step < out */
    int64_t j0 = lo[d] < 0 ? (-lo[d] + step - 1) / step : 0;
    int64_t j1 = out - 1 - lo[d] < 0 ? 0 : (out - 1 - lo[d]) / step + 1;
    if (j1 > a->type.dims[d]) j1 = a->type.dims[d];
    if (j1 <= j0) return; /* nothing of the operand survives */
    cnt[d] = j1 - j0;
    soff += j0 * is[d];
    doff += (lo[d] + j0 * step) * os[d];
    ss[d] = is[d];
    ds[d] = os[d] * step;
  }
  lm_copy_strided(rank, cnt, es, (char *)o->data + doff * (int64_t)es, ds, (char *)a->data + soff * (int64_t)es, ss);
}

static int k_pad(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  int64_t lo[LM_MAX_RANK], inner[LM_MAX_RANK];
  lm_attr_ints(lm_op_attr(k->op, "edge_padding_low"), lo, LM_MAX_RANK);
  lm_attr_ints(lm_op_attr(k->op, "interior_padding"), inner, LM_MAX_RANK);
  pad_run(in[0], in[1], out[0], lo, inner);
  return 0;
}

/* ---- reverse (spec 'reverse') ---- */

static int v_reverse(const lm_op *op, const lm_func *fn, lm_err *err) {
  LM_TRY(lm_check_arity(op, 1, 1, err));
  LM_TRY(tensors(op, fn, err));
  const lm_type *a = lm_vtype(fn, op->in[0]), *r = lm_vtype(fn, op->out[0]);
  LM_TRY(same_elem(op, a, r, err));
  int64_t dims[LM_MAX_RANK];
  int n = lm_op_ints(op, "dimensions", dims, LM_MAX_RANK, -1, err);
  if (n < 0) return n;
  if (!lm_dims_valid(dims, n, a->rank)) {
    char b[256];
    return lm_op_err(err, op, LOOM_VERIFY, "dimensions %s must be unique and in [0, %d)", lm_ints_str(dims, n, b, sizeof b),
                     a->rank);
  }
  return expect_shape(op, r, a->dims, a->rank, err);
}

static int k_reverse(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  int64_t dims[LM_MAX_RANK], is[LM_MAX_RANK], ss[LM_MAX_RANK], os[LM_MAX_RANK], off = 0;
  int n = lm_attr_ints(lm_op_attr(k->op, "dimensions"), dims, LM_MAX_RANK);
  int rank = in[0]->type.rank;
  lm_row_strides(&in[0]->type, is);
  lm_row_strides(&out[0]->type, os);
  memcpy(ss, is, sizeof ss);
  if (lm_type_numel(&in[0]->type) == 0) return 0;
  for (int i = 0; i < n; i++) {
    int64_t d = dims[i];
    off += (in[0]->type.dims[d] - 1) * is[d];
    ss[d] = -is[d];
  }
  size_t es = esz(in[0]);
  lm_copy_strided(rank, in[0]->type.dims, es, out[0]->data, os, (char *)in[0]->data + off * (int64_t)es, ss);
  return 0;
}

/* ---- broadcast (legacy 'broadcast': result shape = broadcast_sizes ++ operand shape) ---- */

static int v_broadcast(const lm_op *op, const lm_func *fn, lm_err *err) {
  LM_TRY(lm_check_arity(op, 1, 1, err));
  LM_TRY(tensors(op, fn, err));
  const lm_type *a = lm_vtype(fn, op->in[0]), *r = lm_vtype(fn, op->out[0]);
  LM_TRY(same_elem(op, a, r, err));
  int64_t sizes[LM_MAX_RANK], want[LM_MAX_RANK];
  int n = lm_op_ints(op, "broadcast_sizes", sizes, LM_MAX_RANK, -1, err);
  if (n < 0) return n;
  if (n + a->rank > LM_MAX_RANK) return lm_op_err(err, op, LOOM_VERIFY, "result rank over %d", LM_MAX_RANK);
  for (int d = 0; d < n; d++) {
    if (sizes[d] < 0) return lm_op_err(err, op, LOOM_VERIFY, "broadcast_sizes[%d] is negative", d);
    want[d] = sizes[d];
  }
  for (int d = 0; d < a->rank; d++) want[n + d] = a->dims[d];
  return expect_shape(op, r, want, n + a->rank, err);
}

/* out[...] = a[...] where a's dims map to out dims map[d] (size-1 dims of a broadcast). */
static void broadcast_run(lm_buffer *a, lm_buffer *o, const int64_t *map) {
  int64_t is[LM_MAX_RANK], os[LM_MAX_RANK], ss[LM_MAX_RANK] = {0};
  lm_row_strides(&a->type, is);
  lm_row_strides(&o->type, os);
  for (int d = 0; d < a->type.rank; d++)
    if (a->type.dims[d] != 1) ss[map[d]] = is[d];
  lm_copy_strided(o->type.rank, o->type.dims, esz(a), o->data, os, a->data, ss);
}

static int k_broadcast(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  int64_t map[LM_MAX_RANK];
  int lead = out[0]->type.rank - in[0]->type.rank;
  for (int d = 0; d < in[0]->type.rank; d++) map[d] = lead + d;
  broadcast_run(in[0], out[0], map);
  return 0;
}

/* ---- iota (spec 'iota') ---- */

static int v_iota_common(const lm_op *op, const lm_func *fn, lm_err *err) {
  const lm_type *r = lm_vtype(fn, op->out[0]);
  const lm_attr *a = lm_op_attr(op, "iota_dimension");
  if (!a) return lm_op_err(err, op, LOOM_VERIFY, "missing attribute 'iota_dimension'");
  int64_t d = lm_attr_int_or(a, -1);
  if (d < 0 || d >= r->rank)
    return lm_op_err(err, op, LOOM_VERIFY, "iota_dimension %lld is outside [0, %d)", (long long)d, r->rank);
  return 0;
}

static int v_iota(const lm_op *op, const lm_func *fn, lm_err *err) {
  LM_TRY(lm_check_arity(op, 0, 1, err));
  LM_TRY(tensors(op, fn, err));
  return v_iota_common(op, fn, err);
}

static void iota_run(lm_buffer *o, int64_t dim) {
  const lm_type *t = &o->type;
  size_t es = lm_dtype_size(t->dtype);
  int64_t inner = 1, outer = 1, n = t->dims[dim];
  for (int d = dim + 1; d < t->rank; d++) inner *= t->dims[d];
  for (int d = 0; d < dim; d++) outer *= t->dims[d];
  if (inner == 0 || outer == 0 || n == 0) return;
  char *p = o->data;
  /* First block: each value repeated `inner` times; then the block repeats `outer` times. */
  unsigned char v[16];
  for (int64_t i = 0; i < n; i++) {
    lm_store_i64(v, t->dtype, i);
    lm_fill_elems(p + (size_t)(i * inner) * es, v, es, (size_t)inner);
  }
  size_t block = (size_t)(n * inner) * es;
  for (int64_t j = 1; j < outer; j++) memcpy(p + (size_t)j * block, p, block);
}

static int k_iota(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  iota_run(out[0], lm_attr_int_or(lm_op_attr(k->op, "iota_dimension"), 0));
  return 0;
}

/* ---- get_dimension_size (spec 'get_dimension_size') ---- */

static int v_get_dimension_size(const lm_op *op, const lm_func *fn, lm_err *err) {
  LM_TRY(lm_check_arity(op, 1, 1, err));
  LM_TRY(tensors(op, fn, err));
  const lm_type *a = lm_vtype(fn, op->in[0]), *r = lm_vtype(fn, op->out[0]);
  int64_t d = lm_attr_int_or(lm_op_attr(op, "dimension"), -1);
  if (d < 0 || d >= a->rank) return lm_op_err(err, op, LOOM_VERIFY, "dimension %lld is outside [0, %d)", (long long)d, a->rank);
  if (r->rank != 0 || !is_int_type(r)) return lm_op_err(err, op, LOOM_VERIFY, "result must be a 0-d integer tensor");
  return 0;
}

static int k_get_dimension_size(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  int64_t d = lm_attr_int_or(lm_op_attr(k->op, "dimension"), 0);
  lm_store_i64(out[0]->data, out[0]->type.dtype, in[0]->type.dims[d]);
  return 0;
}

/* ---- dynamic forms with static result shapes ---- */

/* Reads a 1-D integer shape operand and checks it equals the static shape of t. */
static int check_shape_operand(lm_kctx *k, const lm_buffer *s, const lm_type *t, const char *what) {
  int64_t n = lm_type_numel(&s->type);
  if (n != t->rank) return lm_kerr(k, LOOM_SHAPE_MISMATCH, "%s has %lld values for a rank-%d result", what, (long long)n, t->rank);
  for (int d = 0; d < t->rank; d++) {
    int64_t v = lm_load_index(s->data, s->type.dtype, d);
    if (v != t->dims[d])
      return lm_kerr(k, LOOM_SHAPE_MISMATCH, "%s[%d] = %lld but the result type has %lld", what, d, (long long)v,
                     (long long)t->dims[d]);
  }
  return 0;
}

static int v_shape_operand(const lm_op *op, const lm_func *fn, uint32_t i, lm_err *err) {
  const lm_type *t = lm_vtype(fn, op->in[i]);
  if (t->kind != LM_TYPE_TENSOR || t->rank != 1 || !is_int_type(t))
    return lm_op_err(err, op, LOOM_VERIFY, "operand %u must be a 1-d integer tensor", i);
  return 0;
}

static int v_dynamic_broadcast_in_dim(const lm_op *op, const lm_func *fn, lm_err *err) {
  LM_TRY(lm_check_arity(op, 2, 1, err));
  LM_TRY(tensors(op, fn, err));
  LM_TRY(v_shape_operand(op, fn, 1, err));
  const lm_type *a = lm_vtype(fn, op->in[0]), *r = lm_vtype(fn, op->out[0]);
  LM_TRY(same_elem(op, a, r, err));
  int64_t map[LM_MAX_RANK];
  int n = lm_op_ints(op, "broadcast_dimensions", map, LM_MAX_RANK, -1, err);
  if (n < 0) return n;
  if (n != a->rank || !lm_dims_valid(map, n, r->rank))
    return lm_op_err(err, op, LOOM_VERIFY, "broadcast_dimensions must map the %d operand dims to distinct result dims",
                     a->rank);
  for (int d = 0; d < n; d++)
    if (a->dims[d] != 1 && a->dims[d] != r->dims[map[d]])
      return lm_op_err(err, op, LOOM_VERIFY, "operand dimension %d (%lld) cannot broadcast to %lld", d,
                       (long long)a->dims[d], (long long)r->dims[map[d]]);
  return 0;
}

static int k_dynamic_broadcast_in_dim(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  LM_TRY(check_shape_operand(k, in[1], &out[0]->type, "output_dimensions"));
  int64_t map[LM_MAX_RANK];
  lm_attr_ints(lm_op_attr(k->op, "broadcast_dimensions"), map, LM_MAX_RANK);
  broadcast_run(in[0], out[0], map);
  return 0;
}

static int v_dynamic_iota(const lm_op *op, const lm_func *fn, lm_err *err) {
  LM_TRY(lm_check_arity(op, 1, 1, err));
  LM_TRY(tensors(op, fn, err));
  LM_TRY(v_shape_operand(op, fn, 0, err));
  return v_iota_common(op, fn, err);
}

static int k_dynamic_iota(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  LM_TRY(check_shape_operand(k, in[0], &out[0]->type, "output_shape"));
  return k_iota(k, in, out);
}

static int v_dynamic_reshape(const lm_op *op, const lm_func *fn, lm_err *err) {
  LM_TRY(lm_check_arity(op, 2, 1, err));
  LM_TRY(tensors(op, fn, err));
  LM_TRY(v_shape_operand(op, fn, 1, err));
  const lm_type *a = lm_vtype(fn, op->in[0]), *r = lm_vtype(fn, op->out[0]);
  LM_TRY(same_elem(op, a, r, err));
  if (lm_type_numel(a) != lm_type_numel(r)) return lm_op_err(err, op, LOOM_VERIFY, "element counts differ");
  return 0;
}

static int k_dynamic_reshape(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  LM_TRY(check_shape_operand(k, in[1], &k->fn->value_types[k->op->out[0]], "output_shape"));
  return k_reshape(k, in, out);
}

static int v_dynamic_pad(const lm_op *op, const lm_func *fn, lm_err *err) {
  LM_TRY(lm_check_arity(op, 5, 1, err));
  LM_TRY(tensors(op, fn, err));
  const lm_type *a = lm_vtype(fn, op->in[0]), *p = lm_vtype(fn, op->in[1]), *r = lm_vtype(fn, op->out[0]);
  LM_TRY(same_elem(op, a, p, err));
  LM_TRY(same_elem(op, a, r, err));
  if (p->rank != 0) return lm_op_err(err, op, LOOM_VERIFY, "padding_value must be a 0-d tensor");
  if (r->rank != a->rank) return lm_op_err(err, op, LOOM_VERIFY, "result rank differs from the operand rank");
  for (uint32_t i = 2; i < 5; i++) {
    LM_TRY(v_shape_operand(op, fn, i, err));
    if (lm_vtype(fn, op->in[i])->dims[0] != a->rank)
      return lm_op_err(err, op, LOOM_VERIFY, "padding operand %u must have %d values", i, a->rank);
  }
  return 0;
}

static int k_dynamic_pad(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  int rank = in[0]->type.rank;
  int64_t lo[LM_MAX_RANK], hi[LM_MAX_RANK], inner[LM_MAX_RANK], want[LM_MAX_RANK];
  for (int d = 0; d < rank; d++) {
    lo[d] = lm_load_index(in[2]->data, in[2]->type.dtype, d);
    hi[d] = lm_load_index(in[3]->data, in[3]->type.dtype, d);
    inner[d] = lm_load_index(in[4]->data, in[4]->type.dtype, d);
    const int64_t big = INT64_C(1) << 40;
    if (inner[d] < 0 || inner[d] > big || lo[d] < -big || lo[d] > big || hi[d] < -big || hi[d] > big)
      return lm_kerr(k, LOOM_INVALID_ARGUMENT, "padding in dimension %d is out of range", d);
  }
  if (!pad_dims(&in[0]->type, lo, hi, inner, want) || memcmp(want, out[0]->type.dims, (size_t)rank * sizeof *want) != 0)
    return lm_kerr(k, LOOM_SHAPE_MISMATCH, "the paddings do not give the static result shape");
  pad_run(in[0], in[1], out[0], lo, inner);
  return 0;
}

static int v_real_dynamic_slice(const lm_op *op, const lm_func *fn, lm_err *err) {
  LM_TRY(lm_check_arity(op, 4, 1, err));
  LM_TRY(tensors(op, fn, err));
  const lm_type *a = lm_vtype(fn, op->in[0]), *r = lm_vtype(fn, op->out[0]);
  LM_TRY(same_elem(op, a, r, err));
  if (r->rank != a->rank) return lm_op_err(err, op, LOOM_VERIFY, "result rank differs from the operand rank");
  for (uint32_t i = 1; i < 4; i++) {
    LM_TRY(v_shape_operand(op, fn, i, err));
    if (lm_vtype(fn, op->in[i])->dims[0] != a->rank)
      return lm_op_err(err, op, LOOM_VERIFY, "operand %u must have %d values", i, a->rank);
  }
  return 0;
}

static int k_real_dynamic_slice(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  int rank = in[0]->type.rank;
  int64_t start[LM_MAX_RANK], step[LM_MAX_RANK];
  for (int d = 0; d < rank; d++) {
    start[d] = lm_load_index(in[1]->data, in[1]->type.dtype, d);
    int64_t limit = lm_load_index(in[2]->data, in[2]->type.dtype, d);
    step[d] = lm_load_index(in[3]->data, in[3]->type.dtype, d);
    if (start[d] < 0 || start[d] > limit || limit > in[0]->type.dims[d] || step[d] <= 0)
      return lm_kerr(k, LOOM_INVALID_ARGUMENT, "dimension %d: start %lld, limit %lld, stride %lld are out of range", d,
                     (long long)start[d], (long long)limit, (long long)step[d]);
    if ((limit == start[d] ? 0 : (limit - start[d] - 1) / step[d] + 1) != out[0]->type.dims[d])
      return lm_kerr(k, LOOM_SHAPE_MISMATCH, "dimension %d: the slice does not give the static result size %lld", d,
                     (long long)out[0]->type.dims[d]);
  }
  slice_copy(in[0], out[0], start, step);
  return 0;
}

/* ---- torch_index_select: gather along `dim` with `batch_dims` leading batch dimensions ----
 * result[b..., i..., r...] = operand[b..., index[b..., i...], r...]; result shape is
 * operand.shape[:dim] ++ index.shape[batch_dims:] ++ operand.shape[dim+1:]. Indices are clamped
 * into range as gather clamps its start indices. */

static int v_torch_index_select(const lm_op *op, const lm_func *fn, lm_err *err) {
  LM_TRY(lm_check_arity(op, 2, 1, err));
  LM_TRY(tensors(op, fn, err));
  const lm_type *a = lm_vtype(fn, op->in[0]), *ix = lm_vtype(fn, op->in[1]), *r = lm_vtype(fn, op->out[0]);
  LM_TRY(same_elem(op, a, r, err));
  if (!is_int_type(ix)) return lm_op_err(err, op, LOOM_VERIFY, "index must be an integer tensor");
  int64_t dim = lm_attr_int_or(lm_op_attr(op, "dim"), -1), bd = lm_attr_int_or(lm_op_attr(op, "batch_dims"), 0);
  if (dim < 0 || dim >= a->rank) return lm_op_err(err, op, LOOM_VERIFY, "dim %lld is outside [0, %d)", (long long)dim, a->rank);
  if (bd < 0 || bd > dim || bd > ix->rank) return lm_op_err(err, op, LOOM_VERIFY, "batch_dims %lld is invalid", (long long)bd);
  int64_t want[LM_MAX_RANK];
  int n = 0;
  if (a->rank - 1 + ix->rank - bd > LM_MAX_RANK) return lm_op_err(err, op, LOOM_VERIFY, "result rank too large");
  for (int d = 0; d < dim; d++) want[n++] = a->dims[d];
  for (int d = (int)bd; d < ix->rank; d++) want[n++] = ix->dims[d];
  for (int d = (int)dim + 1; d < a->rank; d++) want[n++] = a->dims[d];
  for (int d = 0; d < bd; d++)
    if (ix->dims[d] != a->dims[d]) return lm_op_err(err, op, LOOM_VERIFY, "batch dimension %d differs between operand and index", d);
  return expect_shape(op, r, want, n, err);
}

static int k_torch_index_select(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  lm_buffer *a = in[0], *ix = in[1], *o = out[0];
  int64_t dim = lm_attr_int_or(lm_op_attr(k->op, "dim"), 0), bd = lm_attr_int_or(lm_op_attr(k->op, "batch_dims"), 0);
  size_t es = esz(a);
  /* View as [B, pre, D, post] for the operand and [B, I] for the index. */
  int64_t B = 1, pre = 1, D = a->type.dims[dim], post = 1, I = 1;
  for (int d = 0; d < bd; d++) B *= a->type.dims[d];
  for (int d = (int)bd; d < dim; d++) pre *= a->type.dims[d];
  for (int d = (int)dim + 1; d < a->type.rank; d++) post *= a->type.dims[d];
  for (int d = (int)bd; d < ix->type.rank; d++) I *= ix->type.dims[d];
  if (D == 0 || lm_type_numel(&o->type) == 0) return 0;
  const char *src = a->data;
  char *dst = o->data;
  size_t row = (size_t)post * es;
  for (int64_t b = 0; b < B; b++)
    for (int64_t p = 0; p < pre; p++)
      for (int64_t i = 0; i < I; i++) {
        int64_t j = lm_clamp64(lm_load_index(ix->data, ix->type.dtype, b * I + i), 0, D - 1);
        memcpy(dst + (size_t)(((b * pre + p) * I + i) * post) * es, src + (size_t)(((b * pre + p) * D + j) * post) * es, row);
      }
  return 0;
}

void lm_register_movement_kernels(void) {
  lm_kernel_register(LM_OP_RESHAPE, k_reshape, v_reshape, LM_KF_OWN_OUTPUTS);
  lm_kernel_register(LM_OP_TRANSPOSE, k_transpose, v_transpose, 0);
  lm_kernel_register(LM_OP_SLICE, k_slice, v_slice, 0);
  lm_kernel_register(LM_OP_DYNAMIC_SLICE, k_dynamic_slice, v_dynamic_slice, 0);
  lm_kernel_register(LM_OP_DYNAMIC_UPDATE_SLICE, k_dynamic_update_slice, v_dynamic_update_slice, LM_KF_OWN_OUTPUTS);
  lm_kernel_register(LM_OP_CONCATENATE, k_concatenate, v_concatenate, 0);
  lm_kernel_register(LM_OP_PAD, k_pad, v_pad, 0);
  lm_kernel_register(LM_OP_REVERSE, k_reverse, v_reverse, 0);
  lm_kernel_register(LM_OP_BROADCAST, k_broadcast, v_broadcast, 0);
  lm_kernel_register(LM_OP_IOTA, k_iota, v_iota, 0);
  lm_kernel_register(LM_OP_GET_DIMENSION_SIZE, k_get_dimension_size, v_get_dimension_size, 0);
  lm_kernel_register(LM_OP_DYNAMIC_BROADCAST_IN_DIM, k_dynamic_broadcast_in_dim, v_dynamic_broadcast_in_dim, 0);
  lm_kernel_register(LM_OP_DYNAMIC_IOTA, k_dynamic_iota, v_dynamic_iota, 0);
  lm_kernel_register(LM_OP_DYNAMIC_RESHAPE, k_dynamic_reshape, v_dynamic_reshape, LM_KF_OWN_OUTPUTS);
  lm_kernel_register(LM_OP_DYNAMIC_PAD, k_dynamic_pad, v_dynamic_pad, 0);
  lm_kernel_register(LM_OP_REAL_DYNAMIC_SLICE, k_real_dynamic_slice, v_real_dynamic_slice, 0);
  lm_kernel_register(LM_OP_TORCH_INDEX_SELECT, k_torch_index_select, v_torch_index_select, 0);
}
