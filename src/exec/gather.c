/* Op family: gather and scatter (StableHLO spec 'gather', 'scatter', with the batching
 * dimensions of the 2024-03 batching-dims revision: operand_batching_dims /
 * start_indices_batching_dims, input_batching_dims / scatter_indices_batching_dims), and
 * dynamic_gather (gather whose slice_sizes is an operand; static result shapes only).
 *
 * gather copies one window per batch index with lm_copy_strided (start indices clamped so the
 * window fits, as the spec says). scatter applies the update computation element by element in
 * row-major order of the updates' index space, skipping each update element whose result index is
 * out of bounds (spec 'scatter': "If result_index is in bounds ... Otherwise updated_results =
 * results"). Windows fully in bounds take fast paths: a copy when the body returns the update
 * ("replace"), a vectorized loop when the body is one add/multiply/maximum/minimum/and/or/xor;
 * other bodies run compiled (scalar_eval.c) when they can, else through lm_exec_region. */
#include <stdlib.h>
#include <string.h>
#include "exec/ops_util.h"
#include "exec/scalar_eval.h"

/* ---- dimension numbers ---- */

typedef struct gdims {
  int n_off, n_coll, n_obat, n_ibat, n_map;
  int64_t off[LM_MAX_RANK];  /* gather offset_dims / scatter update_window_dims */
  int64_t coll[LM_MAX_RANK]; /* collapsed_slice_dims / inserted_window_dims */
  int64_t obat[LM_MAX_RANK]; /* operand_batching_dims / input_batching_dims */
  int64_t ibat[LM_MAX_RANK]; /* start_indices_batching_dims / scatter_indices_batching_dims */
  int64_t map[LM_MAX_RANK];  /* start_index_map / scatter_dims_to_operand_dims */
  int64_t ivd;               /* index_vector_dim */
} gdims;

static int read_dims(const lm_op *op, bool scatter, gdims *g, lm_err *err) {
  const char *aname = scatter ? "scatter_dimension_numbers" : "dimension_numbers";
  const lm_attr *s = lm_op_attr(op, aname);
  if (!s || s->kind != LM_ATTR_STRUCT) return lm_op_err(err, op, LOOM_VERIFY, "missing attribute '%s'", aname);
  memset(g, 0, sizeof *g);
  int n;
#define F(dst, cnt, field)                                                  \
  if ((n = lm_struct_ints(op, s, field, dst, LM_MAX_RANK, err)) < 0) return n; \
  cnt = n;
  F(g->off, g->n_off, scatter ? "update_window_dims" : "offset_dims");
  F(g->coll, g->n_coll, scatter ? "inserted_window_dims" : "collapsed_slice_dims");
  F(g->obat, g->n_obat, scatter ? "input_batching_dims" : "operand_batching_dims");
  F(g->ibat, g->n_ibat, scatter ? "scatter_indices_batching_dims" : "start_indices_batching_dims");
  F(g->map, g->n_map, scatter ? "scatter_dims_to_operand_dims" : "start_index_map");
#undef F
  const lm_attr *iv = lm_attrs_get(s->fields, s->n, "index_vector_dim");
  g->ivd = iv ? lm_attr_int_or(iv, -1) : 0;
  return 0;
}

/* Checks the constraints shared by gather (spec 'gather' C1-C19) and scatter (spec 'scatter'
 * C2, C9-C22) on the operand rank `orank`, indices type `it` and operand dims `odims`. */
static int check_dims(const lm_op *op, bool scatter, const gdims *g, int orank, const int64_t *odims,
                      const lm_type *it, lm_err *err) {
  char b1[128];
  const char *off = scatter ? "update_window_dims" : "offset_dims";
  const char *coll = scatter ? "inserted_window_dims" : "collapsed_slice_dims";
  const char *obat = scatter ? "input_batching_dims" : "operand_batching_dims";
  const char *ibat = scatter ? "scatter_indices_batching_dims" : "start_indices_batching_dims";
  const char *map = scatter ? "scatter_dims_to_operand_dims" : "start_index_map";
  if (!lm_dtype_is_int(it->dtype)) return lm_op_err(err, op, LOOM_VERIFY, "indices must have an integer element type");
  if (orank != g->n_off + g->n_coll + g->n_obat)
    return lm_op_err(err, op, LOOM_VERIFY, "operand rank %d must equal size(%s) + size(%s) + size(%s) = %d", orank, off,
                     coll, obat, g->n_off + g->n_coll + g->n_obat);
  if (g->ivd < 0 || g->ivd > it->rank)
    return lm_op_err(err, op, LOOM_VERIFY, "index_vector_dim %lld is outside [0, %d]", (long long)g->ivd, it->rank);
  int64_t nvec = g->ivd < it->rank ? it->dims[g->ivd] : 1;
  if (g->n_map != nvec)
    return lm_op_err(err, op, LOOM_VERIFY, "%s has %d values but the index vectors have %lld", map, g->n_map, (long long)nvec);
  if (!lm_dims_sorted(g->off, g->n_off)) return lm_op_err(err, op, LOOM_VERIFY, "%s must be sorted and unique", off);
  int64_t cb[2 * LM_MAX_RANK];
  memcpy(cb, g->coll, (size_t)g->n_coll * sizeof *cb);
  memcpy(cb + g->n_coll, g->obat, (size_t)g->n_obat * sizeof *cb);
  if (!lm_dims_valid(cb, g->n_coll + g->n_obat, orank))
    return lm_op_err(err, op, LOOM_VERIFY, "%s and %s must be unique dims of the operand", coll, obat);
  if (!lm_dims_sorted(g->coll, g->n_coll)) return lm_op_err(err, op, LOOM_VERIFY, "%s must be sorted", coll);
  if (!lm_dims_sorted(g->obat, g->n_obat)) return lm_op_err(err, op, LOOM_VERIFY, "%s must be sorted", obat);
  if (!lm_dims_valid(g->ibat, g->n_ibat, it->rank))
    return lm_op_err(err, op, LOOM_VERIFY, "%s %s must be unique dims of the indices", ibat,
                     lm_ints_str(g->ibat, g->n_ibat, b1, sizeof b1));
  if (lm_dims_contains(g->ibat, g->n_ibat, g->ivd))
    return lm_op_err(err, op, LOOM_VERIFY, "index_vector_dim must not be in %s", ibat);
  if (g->n_obat != g->n_ibat) return lm_op_err(err, op, LOOM_VERIFY, "%s and %s must have the same size", obat, ibat);
  for (int i = 0; i < g->n_obat; i++)
    if (odims[g->obat[i]] != it->dims[g->ibat[i]])
      return lm_op_err(err, op, LOOM_VERIFY, "batching dimension %d: operand size %lld differs from indices size %lld", i,
                       (long long)odims[g->obat[i]], (long long)it->dims[g->ibat[i]]);
  int64_t mb[2 * LM_MAX_RANK];
  memcpy(mb, g->map, (size_t)g->n_map * sizeof *mb);
  memcpy(mb + g->n_map, g->obat, (size_t)g->n_obat * sizeof *mb);
  if (!lm_dims_valid(mb, g->n_map + g->n_obat, orank))
    return lm_op_err(err, op, LOOM_VERIFY, "%s must be unique dims of the operand, distinct from %s", map, obat);
  return 0;
}

/* The operand dims that are window (offset) dims, in order: those not collapsed/inserted and not
 * batching. Returns their count. */
static int window_dims(const gdims *g, int orank, int64_t *wd) {
  int n = 0;
  for (int d = 0; d < orank; d++)
    if (!lm_dims_contains(g->coll, g->n_coll, d) && !lm_dims_contains(g->obat, g->n_obat, d)) wd[n++] = d;
  return n;
}

/* The dims of t (gather's result, scatter's updates) that are not offset / update window dims,
 * in order: their indices bd[n], sizes bsz[n], and the dim of the indices each one walks (the
 * index vector dim skipped) bix[n]. Returns n. */
static int batch_dims(const gdims *g, const lm_type *t, int64_t *bd, int64_t *bsz, int64_t *bix) {
  int n = 0;
  for (int d = 0; d < t->rank; d++)
    if (!lm_dims_contains(g->off, g->n_off, d)) bd[n++] = d;
  for (int j = 0; j < n; j++) {
    bsz[j] = t->dims[bd[j]];
    bix[j] = j < g->ivd ? j : j + 1;
  }
  return n;
}

/* Expected result shape of gather (spec 'gather' C22) into want; returns its rank or -1. */
static int gather_shape(const gdims *g, int orank, const int64_t *sizes, const lm_type *it, int64_t *want) {
  int64_t batch[LM_MAX_RANK], wd[LM_MAX_RANK];
  int nb = 0;
  for (int d = 0; d < it->rank; d++)
    if (d != g->ivd) batch[nb++] = it->dims[d];
  int nw = window_dims(g, orank, wd);
  int rrank = nb + nw;
  if (rrank > LM_MAX_RANK || nw != g->n_off) return -1;
  int bi = 0, wi = 0;
  for (int d = 0; d < rrank; d++) {
    if (wi < g->n_off && g->off[wi] == d) want[d] = sizes[wd[wi++]];
    else if (bi < nb) want[d] = batch[bi++];
    else return -1;
  }
  return wi == g->n_off && bi == nb ? rrank : -1;
}

static int check_gather(const lm_op *op, const gdims *g, const lm_type *ot, const lm_type *it, const lm_type *rt,
                        const int64_t *sizes, int nsizes, lm_err *err) {
  LM_TRY(check_dims(op, false, g, ot->rank, ot->dims, it, err));
  if (nsizes != ot->rank) return lm_op_err(err, op, LOOM_VERIFY, "slice_sizes must have %d values", ot->rank);
  for (int d = 0; d < ot->rank; d++)
    if (sizes[d] < 0 || sizes[d] > ot->dims[d])
      return lm_op_err(err, op, LOOM_VERIFY, "slice_sizes[%d] = %lld is outside [0, %lld]", d, (long long)sizes[d],
                       (long long)ot->dims[d]);
  for (int i = 0; i < g->n_coll; i++)
    if (sizes[g->coll[i]] > 1) return lm_op_err(err, op, LOOM_VERIFY, "collapsed dimension %lld has slice size > 1", (long long)g->coll[i]);
  for (int i = 0; i < g->n_obat; i++)
    if (sizes[g->obat[i]] > 1) return lm_op_err(err, op, LOOM_VERIFY, "batching dimension %lld has slice size > 1", (long long)g->obat[i]);
  for (int i = 0; i < g->n_off; i++)
    if (g->off[i] < 0 || g->off[i] >= rt->rank) return lm_op_err(err, op, LOOM_VERIFY, "offset_dims must be in [0, %d)", rt->rank);
  if (ot->dtype != rt->dtype) return lm_op_err(err, op, LOOM_VERIFY, "operand and result element types differ");
  int64_t want[LM_MAX_RANK];
  int r = gather_shape(g, ot->rank, sizes, it, want);
  bool ok = r == rt->rank;
  for (int d = 0; ok && d < r; d++) ok = want[d] == rt->dims[d];
  if (!ok) {
    char a[256], b[256];
    if (r < 0) return lm_op_err(err, op, LOOM_VERIFY, "offset_dims do not fit the result %s", lm_type_str(rt, a, sizeof a));
    lm_type w;
    lm_type_tensor(&w, rt->dtype, r, want);
    return lm_op_err(err, op, LOOM_VERIFY, "result type is %s, expected %s", lm_type_str(rt, a, sizeof a),
                     lm_type_str(&w, b, sizeof b));
  }
  return 0;
}

/* ---- gather ---- */

static int v_gather(const lm_op *op, const lm_func *fn, lm_err *err) {
  if (op->nin != 2 || op->nout != 1) return lm_op_err(err, op, LOOM_VERIFY, "expects 2 operands and 1 result");
  for (uint32_t i = 0; i < 2; i++) LM_TRY(lm_check_tensor(op, fn, false, i, err));
  LM_TRY(lm_check_tensor(op, fn, true, 0, err));
  gdims g;
  LM_TRY(read_dims(op, false, &g, err));
  int64_t sizes[LM_MAX_RANK];
  int n = lm_op_ints(op, "slice_sizes", sizes, LM_MAX_RANK, -1, err);
  if (n < 0) return n;
  return check_gather(op, &g, lm_vtype(fn, op->in[0]), lm_vtype(fn, op->in[1]), lm_vtype(fn, op->out[0]), sizes, n, err);
}

static void gather_run(const gdims *g, const lm_buffer *o, const lm_buffer *ix, lm_buffer *r, const int64_t *sizes) {
  const lm_type *ot = &o->type, *it = &ix->type, *rt = &r->type;
  size_t es = lm_dtype_size(ot->dtype);
  int64_t os[LM_MAX_RANK], is[LM_MAX_RANK], rs[LM_MAX_RANK];
  lm_row_strides(ot, os);
  lm_row_strides(it, is);
  lm_row_strides(rt, rs);
  /* batch dims of the result, and for each the indices dim it walks */
  int64_t bdims[LM_MAX_RANK], bsz[LM_MAX_RANK], bix[LM_MAX_RANK];
  int nb = batch_dims(g, rt, bdims, bsz, bix);
  /* window: operand dims wd[] <-> result dims off[] */
  int64_t wd[LM_MAX_RANK], wsz[LM_MAX_RANK], wos[LM_MAX_RANK], wrs[LM_MAX_RANK];
  int nw = window_dims(g, ot->rank, wd);
  for (int j = 0; j < nw; j++) {
    wsz[j] = sizes[wd[j]];
    wos[j] = os[wd[j]];
    wrs[j] = rs[g->off[j]];
  }
  for (int j = 0; j < nw; j++)
    if (wsz[j] == 0) return;
  for (int j = 0; j < nb; j++)
    if (bsz[j] == 0) return;
  int64_t vstride = g->ivd < it->rank ? is[g->ivd] : 0;
  int64_t bi[LM_MAX_RANK] = {0};
  do {
    int64_t ioff = 0, roff = 0, ooff = 0;
    for (int j = 0; j < nb; j++) {
      ioff += bi[j] * is[bix[j]];
      roff += bi[j] * rs[bdims[j]];
    }
    for (int k = 0; k < g->n_map; k++) {
      int64_t d = g->map[k];
      int64_t s = lm_load_index(ix->data, it->dtype, ioff + k * vstride);
      ooff += lm_clamp64(s, 0, ot->dims[d] - sizes[d]) * os[d];
    }
    for (int i = 0; i < g->n_obat; i++) {
      int64_t ds = g->ibat[i];
      ooff += bi[ds - (ds < g->ivd ? 0 : 1)] * os[g->obat[i]];
    }
    lm_copy_strided(nw, wsz, es, (char *)r->data + roff * (int64_t)es, wrs, (const char *)o->data + ooff * (int64_t)es,
                    wos);
  } while (lm_index_next(nb, bsz, bi));
}

static int k_gather(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  gdims g;
  int64_t sizes[LM_MAX_RANK];
  LM_TRY(read_dims(k->op, false, &g, k->err));
  lm_attr_ints(lm_op_attr(k->op, "slice_sizes"), sizes, LM_MAX_RANK);
  gather_run(&g, in[0], in[1], out[0], sizes);
  return 0;
}

/* dynamic_gather: slice_sizes is operand 2; checked against the static result at run time. */
static int v_dynamic_gather(const lm_op *op, const lm_func *fn, lm_err *err) {
  if (op->nin != 3 || op->nout != 1) return lm_op_err(err, op, LOOM_VERIFY, "expects 3 operands and 1 result");
  for (uint32_t i = 0; i < 3; i++) LM_TRY(lm_check_tensor(op, fn, false, i, err));
  LM_TRY(lm_check_tensor(op, fn, true, 0, err));
  const lm_type *ot = lm_vtype(fn, op->in[0]), *st = lm_vtype(fn, op->in[2]);
  if (st->rank != 1 || st->dims[0] != ot->rank || !lm_dtype_is_int(st->dtype))
    return lm_op_err(err, op, LOOM_VERIFY, "slice_sizes operand must be a 1-d integer tensor of %d values", ot->rank);
  gdims g;
  LM_TRY(read_dims(op, false, &g, err));
  return check_dims(op, false, &g, ot->rank, ot->dims, lm_vtype(fn, op->in[1]), err);
}

static int k_dynamic_gather(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  gdims g;
  int64_t sizes[LM_MAX_RANK];
  LM_TRY(read_dims(k->op, false, &g, k->err));
  int rank = in[0]->type.rank;
  for (int d = 0; d < rank; d++) sizes[d] = lm_load_index(in[2]->data, in[2]->type.dtype, d);
  LM_TRY(check_gather(k->op, &g, &in[0]->type, &in[1]->type, &out[0]->type, sizes, rank, k->err));
  gather_run(&g, in[0], in[1], out[0], sizes);
  return 0;
}

/* ---- scatter ---- */

static int v_scatter(const lm_op *op, const lm_func *fn, lm_err *err) {
  if (op->nin < 3 || op->nin % 2 != 1 || op->nout != (op->nin - 1) / 2)
    return lm_op_err(err, op, LOOM_VERIFY, "expects N inputs, indices, N updates and N results");
  uint32_t n = op->nout;
  LM_TRY(lm_check_tensors(op, fn, op->nin, n, err));
  gdims g;
  LM_TRY(read_dims(op, true, &g, err));
  const lm_type *in0 = lm_vtype(fn, op->in[0]), *it = lm_vtype(fn, op->in[n]), *up0 = lm_vtype(fn, op->in[n + 1]);
  LM_TRY(check_dims(op, true, &g, in0->rank, in0->dims, it, err));
  char a[256], b[256];
  for (uint32_t i = 0; i < n; i++) {
    const lm_type *ti = lm_vtype(fn, op->in[i]), *tu = lm_vtype(fn, op->in[n + 1 + i]), *tr = lm_vtype(fn, op->out[i]);
    if (ti->rank != in0->rank || memcmp(ti->dims, in0->dims, (size_t)in0->rank * sizeof(int64_t)) != 0)
      return lm_op_err(err, op, LOOM_VERIFY, "inputs must have the same shape");
    if (tu->rank != up0->rank || memcmp(tu->dims, up0->dims, (size_t)up0->rank * sizeof(int64_t)) != 0)
      return lm_op_err(err, op, LOOM_VERIFY, "updates must have the same shape");
    if (tu->dtype != ti->dtype)
      return lm_op_err(err, op, LOOM_VERIFY, "update %u element type %s differs from input's %s", i, lm_dtype_name(tu->dtype),
                       lm_dtype_name(ti->dtype));
    if (!lm_type_equal(ti, tr))
      return lm_op_err(err, op, LOOM_VERIFY, "result %u is %s, expected %s", i, lm_type_str(tr, a, sizeof a),
                       lm_type_str(ti, b, sizeof b));
  }
  /* updates shape (spec C4): scatter dims from the indices, window dims from the inputs */
  if (!lm_dims_sorted(g.off, g.n_off) || !lm_dims_valid(g.off, g.n_off, up0->rank))
    return lm_op_err(err, op, LOOM_VERIFY, "update_window_dims must be sorted, unique dims of the updates");
  int64_t wd[LM_MAX_RANK];
  int nw = window_dims(&g, in0->rank, wd);
  int nsd = it->rank - (g.ivd < it->rank ? 1 : 0);
  if (up0->rank != nsd + nw)
    return lm_op_err(err, op, LOOM_VERIFY, "updates rank %d must be %d (scatter dims) + %d (window dims)", up0->rank, nsd, nw);
  int si = 0, wi = 0;
  for (int d = 0; d < up0->rank; d++) {
    if (wi < g.n_off && g.off[wi] == d) {
      if (up0->dims[d] < 0 || up0->dims[d] > in0->dims[wd[wi]])
        return lm_op_err(err, op, LOOM_VERIFY, "update window dimension %d (%lld) exceeds input dimension %lld (%lld)", d,
                         (long long)up0->dims[d], (long long)wd[wi], (long long)in0->dims[wd[wi]]);
      wi++;
    } else {
      int idim = si < g.ivd ? si : si + 1;
      if (up0->dims[d] != it->dims[idim])
        return lm_op_err(err, op, LOOM_VERIFY, "update scatter dimension %d (%lld) differs from indices dimension %d (%lld)",
                         d, (long long)up0->dims[d], idim, (long long)it->dims[idim]);
      si++;
    }
  }
  /* body: (tensor<E0>..., tensor<E0>...) -> (tensor<E0>...) */
  if (op->nregions != 1 || op->regions[0].nblocks != 1)
    return lm_op_err(err, op, LOOM_VERIFY, "expects one update_computation region");
  const lm_block *blk = &op->regions[0].blocks[0];
  if (blk->nargs != 2 * n) return lm_op_err(err, op, LOOM_VERIFY, "update_computation must take %u arguments", 2 * n);
  for (uint32_t i = 0; i < 2 * n; i++) {
    const lm_type *t = lm_vtype(fn, blk->args[i]);
    if (t->kind != LM_TYPE_TENSOR || t->rank != 0 || t->dtype != lm_vtype(fn, op->in[i % n])->dtype)
      return lm_op_err(err, op, LOOM_VERIFY, "update_computation argument %u must be tensor<%s>", i,
                       lm_dtype_name(lm_vtype(fn, op->in[i % n])->dtype));
  }
  lm_dtype dts[LM_MAX_RANK];
  if (n > LM_MAX_RANK) return lm_op_err(err, op, LOOM_VERIFY, "more than %d inputs", LM_MAX_RANK);
  for (uint32_t i = 0; i < n; i++) dts[i] = lm_vtype(fn, op->in[i])->dtype;
  return lm_check_region_results(op, 0, fn, n, dts, "update_computation", err);
}

/* Applies fn over the box sizes[rank] of acc (strides as) with x (strides xs). */
static void apply_box(lm_binop_fn f, int rank, const int64_t *sizes, char *acc, const int64_t *as, const char *x,
                      const int64_t *xs, size_t es) {
  if (rank == 0) { f(acc, x, 1, 1, 1); return; }
  int64_t idx[LM_MAX_RANK] = {0};
  int last = rank - 1;
  do {
    int64_t ao = 0, xo = 0;
    for (int d = 0; d < last; d++) { ao += idx[d] * as[d]; xo += idx[d] * xs[d]; }
    f(acc + ao * (int64_t)es, x + xo * (int64_t)es, sizes[last], as[last], xs[last]);
  } while (lm_index_next(last, sizes, idx));
}

typedef enum { BODY_REPLACE, BODY_BINOP, BODY_GENERIC } body_kind;

static int k_scatter(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  const lm_op *op = k->op;
  uint32_t n = op->nout;
  gdims g;
  LM_TRY(read_dims(op, true, &g, k->err));
  lm_buffer *ix = in[n];
  lm_buffer *const *up = in + n + 1;
  const lm_type *rt = &in[0]->type, *it = &ix->type, *ut = &up[0]->type; /* results have the inputs' types */
  /* results: the inputs themselves where they die here (in place), else copies */
  for (uint32_t i = 0; i < n; i++) {
    bool mine = lm_input_donatable(k, i);
    for (uint32_t j = n; j < op->nin && mine; j++)
      if (in[j] == in[i] || in[j]->base == in[i]) mine = false;
    if (mine) {
      out[i] = lm_buffer_retain(in[i]);
    } else {
      LM_TRY(lm_kalloc(k, &k->fn->value_types[op->out[i]], &out[i]));
      if (out[i]->nbytes) memcpy(out[i]->data, in[i]->data, out[i]->nbytes);
    }
  }

  body_kind kind = BODY_GENERIC;
  lm_binop_fn f = NULL;
  if (lm_region_returns_second_half(op, 0)) kind = BODY_REPLACE;
  else if (n == 1) {
    lm_opcode bop = lm_region_simple_binop(op, 0, k->fn);
    if (bop != LM_OP_UNKNOWN && (f = lm_binop_lookup(bop, rt->dtype))) kind = BODY_BINOP;
  }
  lm_body body;
  bool have_body = false;
  void **argp = NULL, **resp = NULL;
  size_t *ressz = NULL;
  int rc = 0;
  lm_sprog *sp = NULL;
  if (kind == BODY_GENERIC) {
    sp = lm_sprog_compile(op, 0, k->fn, n);
    if (!sp) {
      LM_TRY(lm_body_init(&body, k, 0, n));
      have_body = true;
    }
    argp = calloc(2 * n, sizeof *argp);
    resp = calloc(n, sizeof *resp);
    ressz = calloc(n, sizeof *ressz);
    if (!argp || !resp || !ressz) { rc = lm_kerr(k, LOOM_NO_MEMORY, "out of host memory"); goto done; }
    for (uint32_t i = 0; i < n; i++) ressz[i] = lm_dtype_size(out[i]->type.dtype);
  }

  int64_t rs[LM_MAX_RANK], is[LM_MAX_RANK], us[LM_MAX_RANK];
  lm_row_strides(rt, rs);
  lm_row_strides(it, is);
  lm_row_strides(ut, us);
  /* update scatter dims and the indices dim each walks */
  int64_t sdims[LM_MAX_RANK], ssz[LM_MAX_RANK], six[LM_MAX_RANK];
  int ns = batch_dims(&g, ut, sdims, ssz, six);
  /* window: input dims wd[] <-> update dims off[] */
  int64_t wd[LM_MAX_RANK], wsz[LM_MAX_RANK], wrs[LM_MAX_RANK], wus[LM_MAX_RANK];
  int nw = window_dims(&g, rt->rank, wd);
  int64_t wnum = 1;
  for (int j = 0; j < nw; j++) {
    wsz[j] = ut->dims[g.off[j]];
    wrs[j] = rs[wd[j]];
    wus[j] = us[g.off[j]];
    wnum *= wsz[j];
  }
  if (wnum == 0 || lm_type_numel(ut) == 0) goto done;
  int64_t vstride = g.ivd < it->rank ? is[g.ivd] : 0;
  int64_t si[LM_MAX_RANK] = {0};
  int64_t base[LM_MAX_RANK];
  do {
    int64_t ioff = 0, uoff = 0;
    for (int j = 0; j < ns; j++) {
      ioff += si[j] * is[six[j]];
      uoff += si[j] * us[sdims[j]];
    }
    for (int d = 0; d < rt->rank; d++) base[d] = 0;
    /* indices far outside any dimension clamp to +-2^62: still out of bounds, and adding window
     * offsets cannot overflow */
    for (int q = 0; q < g.n_map; q++)
      base[g.map[q]] = lm_clamp64(lm_load_index(ix->data, it->dtype, ioff + q * vstride), -(INT64_C(1) << 62), INT64_C(1) << 62);
    for (int i = 0; i < g.n_obat; i++) {
      int64_t ds = g.ibat[i];
      base[g.obat[i]] = si[ds - (ds < g.ivd ? 0 : 1)];
    }
    /* whole window in bounds? (window sizes are 1 on inserted and batching dims) */
    bool inb = true;
    for (int d = 0; d < rt->rank && inb; d++) {
      int64_t w = 1;
      for (int j = 0; j < nw; j++)
        if (wd[j] == d) w = wsz[j];
      if (base[d] < 0 || base[d] > rt->dims[d] - w) inb = false;
    }
    int64_t roff = 0;
    if (inb) {
      for (int d = 0; d < rt->rank; d++) roff += base[d] * rs[d];
      if (kind == BODY_REPLACE) {
        for (uint32_t i = 0; i < n; i++) {
          size_t es = lm_dtype_size(out[i]->type.dtype);
          lm_copy_strided(nw, wsz, es, (char *)out[i]->data + roff * (int64_t)es, wrs,
                          (const char *)up[i]->data + uoff * (int64_t)es, wus);
        }
        continue;
      }
      if (kind == BODY_BINOP) {
        size_t es = lm_dtype_size(rt->dtype);
        apply_box(f, nw, wsz, (char *)out[0]->data + roff * (int64_t)es, wrs, (const char *)up[0]->data + uoff * (int64_t)es,
                  wus, es);
        continue;
      }
    }
    /* element by element, skipping result indices out of bounds */
    int64_t wi[LM_MAX_RANK] = {0};
    do {
      bool ok = true;
      int64_t ro = 0, uo = uoff;
      for (int d = 0; d < rt->rank; d++) {
        int64_t v = base[d];
        for (int j = 0; j < nw; j++)
          if (wd[j] == d) v += wi[j];
        if (v < 0 || v >= rt->dims[d]) { ok = false; break; }
        ro += v * rs[d];
      }
      if (!ok) continue;
      for (int j = 0; j < nw; j++) uo += wi[j] * wus[j];
      if (kind == BODY_REPLACE) {
        for (uint32_t i = 0; i < n; i++) {
          size_t es = lm_dtype_size(out[i]->type.dtype);
          memcpy((char *)out[i]->data + ro * (int64_t)es, (const char *)up[i]->data + uo * (int64_t)es, es);
        }
      } else if (kind == BODY_BINOP) {
        size_t es = lm_dtype_size(rt->dtype);
        f((char *)out[0]->data + ro * (int64_t)es, (const char *)up[0]->data + uo * (int64_t)es, 1, 1, 1);
      } else {
        for (uint32_t i = 0; i < n; i++) {
          size_t es = lm_dtype_size(out[i]->type.dtype);
          argp[i] = (char *)out[i]->data + ro * (int64_t)es;
          argp[n + i] = (char *)up[i]->data + uo * (int64_t)es;
          resp[i] = argp[i];
        }
        if (sp) {
          lm_sprog_run(sp, (const void *const *)argp, resp);
        } else {
          rc = lm_body_call(&body, (const void *const *)argp, resp, ressz);
          if (rc < 0) goto done;
        }
      }
    } while (lm_index_next(nw, wsz, wi));
  } while (lm_index_next(ns, ssz, si));

done:
  if (have_body) lm_body_free(&body);
  lm_sprog_free(sp);
  free(argp);
  free(resp);
  free(ressz);
  return rc;
}

void lm_register_gather_kernels(void) {
  lm_kernel_register(LM_OP_GATHER, k_gather, v_gather, 0);
  lm_kernel_register(LM_OP_DYNAMIC_GATHER, k_dynamic_gather, v_dynamic_gather, 0);
  lm_kernel_register(LM_OP_SCATTER, k_scatter, v_scatter, LM_KF_OWN_OUTPUTS);
}
