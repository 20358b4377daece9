/* Op family: windowed reductions. reduce_window (StableHLO spec 'reduce_window': window
 * dimensions, strides, base and window dilations, padding, several operands) and
 * select_and_scatter (spec 'select_and_scatter').
 *
 * reduce_window: results[:][r] = init, then body(acc, x) for every element x of the window of r in
 * row-major window order, where padding and base-dilation holes contribute the init value (the
 * spec pads with init_values). With one operand and a body that is one add/multiply/maximum/
 * minimum/and/or/xor, rows along the last dimension are accumulated with a vectorized binop;
 * other bodies run compiled (scalar_eval.c) or through lm_exec_region.
 *
 * select_and_scatter: result = init; for each source index in row-major order, the window's
 * selected operand element is found by folding `select` over the window's in-bounds elements in
 * row-major order (keep the current one where select(current, next) is true), then
 * result[selected] = scatter(result[selected], source[i]). A window of padding only selects
 * nothing (the spec leaves it open, openxla/stablehlo#731). */
#include <stdlib.h>
#include <string.h>
#include "exec/ops_util.h"
#include "exec/scalar_eval.h"

typedef struct wparams {
  int rank;
  int64_t wdim[LM_MAX_RANK], stride[LM_MAX_RANK], bdil[LM_MAX_RANK], wdil[LM_MAX_RANK];
  int64_t lo[LM_MAX_RANK], hi[LM_MAX_RANK];
} wparams;

/* Reads the window attributes of op for operands of rank `rank`; dilations only where allowed. */
static int read_window(const lm_op *op, int rank, bool dilations, wparams *w, lm_err *err) {
  w->rank = rank;
  int n = lm_op_ints(op, "window_dimensions", w->wdim, LM_MAX_RANK, -1, err);
  if (n < 0) return n;
  if (n != rank) return lm_op_err(err, op, LOOM_VERIFY, "window_dimensions must have %d values", rank);
  struct { const char *name; int64_t *v; } opt[3] = {{"window_strides", w->stride}, {"base_dilations", w->bdil},
                                                     {"window_dilations", w->wdil}};
  for (int i = 0; i < 3; i++) {
    if (!dilations && i > 0) {
      for (int d = 0; d < rank; d++) opt[i].v[d] = 1;
      continue;
    }
    n = lm_op_ints(op, opt[i].name, opt[i].v, LM_MAX_RANK, 0, err);
    if (n < 0) return n;
    if (n == 0 && !lm_op_attr(op, opt[i].name))
      for (int d = 0; d < rank; d++) opt[i].v[d] = 1;
    else if (n != rank)
      return lm_op_err(err, op, LOOM_VERIFY, "%s must have %d values", opt[i].name, rank);
  }
  int64_t pad[2 * LM_MAX_RANK];
  const lm_attr *pa = lm_op_attr(op, "padding");
  n = pa ? lm_attr_ints(pa, pad, 2 * LM_MAX_RANK) : 0;
  if (pa && (n != 2 * rank) && !(n == 0 && rank == 0))
    return lm_op_err(err, op, LOOM_VERIFY, "padding must be a %dx2 list of integers", rank);
  for (int d = 0; d < rank; d++) {
    w->lo[d] = pa ? pad[2 * d] : 0;
    w->hi[d] = pa ? pad[2 * d + 1] : 0;
    const int64_t big = INT64_C(1) << 40;
    if (w->wdim[d] <= 0)
      return lm_op_err(err, op, LOOM_VERIFY, "window_dimensions[%d] = %lld must be positive", d, (long long)w->wdim[d]);
    if (w->stride[d] <= 0 || w->bdil[d] <= 0 || w->wdil[d] <= 0)
      return lm_op_err(err, op, LOOM_VERIFY, "strides and dilations must be positive (dimension %d)", d);
    if (w->wdim[d] > big || w->stride[d] > big || w->bdil[d] > big || w->wdil[d] > big || w->lo[d] < -big ||
        w->lo[d] > big || w->hi[d] < -big || w->hi[d] > big)
      return lm_op_err(err, op, LOOM_VERIFY, "window attributes of dimension %d are out of range", d);
  }
  return 0;
}

/* Number of windows per dimension (spec 'reduce_window' C15); false if a padded size < 0. */
static bool num_windows(const wparams *w, const int64_t *dims, int64_t *out) {
  for (int d = 0; d < w->rank; d++) {
    int64_t dil = 0, padded, dw = 0;
    if (dims[d] > 0 && (__builtin_mul_overflow(dims[d] - 1, w->bdil[d], &dil) || __builtin_add_overflow(dil, 1, &dil)))
      return false;
    if (__builtin_add_overflow(dil, w->lo[d], &padded) || __builtin_add_overflow(padded, w->hi[d], &padded)) return false;
    if (w->wdim[d] > 0 && (__builtin_mul_overflow(w->wdim[d] - 1, w->wdil[d], &dw) || __builtin_add_overflow(dw, 1, &dw)))
      return false;
    if (padded < 0 || padded > (INT64_C(1) << 50) || dw > (INT64_C(1) << 50)) return false;
    out[d] = (padded == 0 || dw > padded) ? 0 : (padded - dw) / w->stride[d] + 1;
  }
  return true;
}

/* Operand index along dimension d for result index r and window position k, or -1 when it falls
 * on padding or a base-dilation hole. */
static inline int64_t win_src(const wparams *w, const int64_t *dims, int d, int64_t r, int64_t k) {
  int64_t q = r * w->stride[d] + k * w->wdil[d] - w->lo[d];
  if (q < 0) return -1;
  if (w->bdil[d] != 1) {
    if (q % w->bdil[d]) return -1;
    q /= w->bdil[d];
  }
  return q < dims[d] ? q : -1;
}

/* ---- reduce_window ---- */

static int v_reduce_window(const lm_op *op, const lm_func *fn, lm_err *err) {
  if (op->nin < 2 || op->nin % 2 || op->nout != op->nin / 2)
    return lm_op_err(err, op, LOOM_VERIFY, "expects N inputs, N init values and N results");
  uint32_t n = op->nout;
  LM_TRY(lm_check_tensors(op, fn, op->nin, n, err));
  const lm_type *a = lm_vtype(fn, op->in[0]);
  wparams w;
  LM_TRY(read_window(op, a->rank, true, &w, err));
  int64_t want[LM_MAX_RANK];
  if (!num_windows(&w, a->dims, want)) return lm_op_err(err, op, LOOM_VERIFY, "padding gives a negative or too large size");
  for (uint32_t i = 0; i < n; i++) {
    const lm_type *t = lm_vtype(fn, op->in[i]), *iv = lm_vtype(fn, op->in[n + i]), *r = lm_vtype(fn, op->out[i]);
    if (t->rank != a->rank || memcmp(t->dims, a->dims, (size_t)a->rank * sizeof(int64_t)) != 0)
      return lm_op_err(err, op, LOOM_VERIFY, "inputs must have the same shape");
    if (iv->rank != 0 || iv->dtype != t->dtype)
      return lm_op_err(err, op, LOOM_VERIFY, "init value %u must be a 0-d tensor of the input's element type", i);
    bool ok = r->rank == a->rank && r->dtype == t->dtype;
    for (int d = 0; ok && d < a->rank; d++) ok = r->dims[d] == want[d];
    if (!ok) {
      char x[256], y[256];
      lm_type wt;
      lm_type_tensor(&wt, t->dtype, a->rank, want);
      return lm_op_err(err, op, LOOM_VERIFY, "result %u is %s, expected %s", i, lm_type_str(r, x, sizeof x),
                       lm_type_str(&wt, y, sizeof y));
    }
  }
  if (op->nregions != 1 || op->regions[0].nblocks != 1 || op->regions[0].blocks[0].nargs != 2 * n)
    return lm_op_err(err, op, LOOM_VERIFY, "expects a body region taking %u arguments", 2 * n);
  const lm_block *b = &op->regions[0].blocks[0];
  for (uint32_t i = 0; i < 2 * n; i++) {
    const lm_type *t = lm_vtype(fn, b->args[i]);
    if (t->kind != LM_TYPE_TENSOR || t->rank != 0 || t->dtype != lm_vtype(fn, op->in[i % n])->dtype)
      return lm_op_err(err, op, LOOM_VERIFY, "body argument %u must be tensor<%s>", i,
                       lm_dtype_name(lm_vtype(fn, op->in[i % n])->dtype));
  }
  lm_dtype dts[LM_MAX_RANK];
  if (n > LM_MAX_RANK) return lm_op_err(err, op, LOOM_VERIFY, "more than %d inputs", LM_MAX_RANK);
  for (uint32_t i = 0; i < n; i++) dts[i] = lm_vtype(fn, op->in[i])->dtype;
  return lm_check_region_results(op, 0, fn, n, dts, "body", err);
}

/* Vectorized one-operand binop path. */
static void reduce_window_binop(const wparams *w, lm_binop_fn f, const lm_buffer *in, const lm_buffer *init, lm_buffer *out) {
  const lm_type *it = &in->type, *ot = &out->type;
  int rank = it->rank;
  size_t es = lm_dtype_size(it->dtype);
  int64_t nout = lm_type_numel(ot);
  lm_fill_elems(out->data, init->data, es, (size_t)nout);
  if (nout == 0) return;
  if (rank == 0) { f(out->data, in->data, 1, 1, 1); return; }
  int64_t is[LM_MAX_RANK];
  lm_row_strides(it, is);
  int last = rank - 1;
  int64_t nl = ot->dims[last];
  int64_t rows_dims[LM_MAX_RANK];
  memcpy(rows_dims, ot->dims, sizeof rows_dims);
  int64_t k[LM_MAX_RANK] = {0};
  do { /* window positions, row-major */
    int64_t r[LM_MAX_RANK] = {0};
    int64_t row = 0;
    do { /* result rows (all dims but the last) */
      int64_t off = 0;
      bool valid = true;
      for (int d = 0; d < last; d++) {
        int64_t s = win_src(w, it->dims, d, r[d], k[d]);
        if (s < 0) { valid = false; break; }
        off += s * is[d];
      }
      char *acc = (char *)out->data + row * nl * (int64_t)es;
      if (!valid) {
        f(acc, init->data, nl, 1, 0);
      } else if (w->bdil[last] == 1) {
        /* valid j: 0 <= j*stride + c < dims[last], c = k*wdil - lo */
        int64_t s = w->stride[last], c = k[last] * w->wdil[last] - w->lo[last], n = it->dims[last];
        int64_t j0 = c >= 0 ? 0 : (-c + s - 1) / s;
        int64_t j1 = n - 1 - c < 0 ? 0 : (n - 1 - c) / s + 1;
        if (j0 > nl) j0 = nl;
        if (j1 > nl) j1 = nl;
        if (j1 < j0) j1 = j0;
        if (j0 > 0) f(acc, init->data, j0, 1, 0);
        if (j1 > j0) f(acc + j0 * (int64_t)es, (const char *)in->data + (off + j0 * s + c) * (int64_t)es, j1 - j0, 1, s);
        if (nl > j1) f(acc + j1 * (int64_t)es, init->data, nl - j1, 1, 0);
      } else {
        for (int64_t j = 0; j < nl; j++) {
          int64_t s = win_src(w, it->dims, last, j, k[last]);
          f(acc + j * (int64_t)es, s < 0 ? init->data : (const char *)in->data + (off + s) * (int64_t)es, 1, 1, 1);
        }
      }
      row++;
    } while (lm_index_next(last, rows_dims, r));
  } while (lm_index_next(rank, w->wdim, k));
}

static int k_reduce_window(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  const lm_op *op = k->op;
  uint32_t n = op->nout;
  const lm_type *it = &in[0]->type, *ot = &out[0]->type;
  wparams w;
  LM_TRY(read_window(op, it->rank, true, &w, k->err));
  if (n == 1) {
    lm_opcode bop = lm_region_simple_binop(op, 0, k->fn);
    lm_binop_fn f = bop != LM_OP_UNKNOWN ? lm_binop_lookup(bop, it->dtype) : NULL;
    if (f) {
      reduce_window_binop(&w, f, in[0], in[1], out[0]);
      return 0;
    }
  }
  /* general path: per result element, fold the window */
  int rc = 0;
  lm_sprog *sp = lm_sprog_compile(op, 0, k->fn, n);
  lm_body body;
  bool have_body = false;
  const void **args = calloc(2 * n, sizeof *args);
  void **res = calloc(n, sizeof *res);
  size_t *rsz = calloc(n, sizeof *rsz);
  unsigned char *acc = calloc(n, 16);
  if (!args || !res || !rsz || !acc) { rc = lm_kerr(k, LOOM_NO_MEMORY, "out of host memory"); goto done; }
  if (!sp) {
    rc = lm_body_init(&body, k, 0, n);
    if (rc < 0) goto done;
    have_body = true;
  }
  int rank = it->rank;
  int64_t is[LM_MAX_RANK];
  lm_row_strides(it, is);
  for (uint32_t i = 0; i < n; i++) {
    rsz[i] = lm_dtype_size(out[i]->type.dtype);
    res[i] = acc + 16 * i;
    args[i] = acc + 16 * i;
  }
  int64_t nout = lm_type_numel(ot), wn = 1;
  for (int d = 0; d < rank; d++) wn *= w.wdim[d];
  int64_t r[LM_MAX_RANK] = {0};
  for (int64_t o = 0; o < nout; o++, lm_index_next(rank, ot->dims, r)) {
    for (uint32_t i = 0; i < n; i++) memcpy(acc + 16 * i, in[n + i]->data, rsz[i]);
    int64_t kw[LM_MAX_RANK] = {0};
    for (int64_t q = 0; q < wn; q++, lm_index_next(rank, w.wdim, kw)) {
      int64_t off = 0;
      bool valid = true;
      for (int d = 0; d < rank && valid; d++) {
        int64_t s = win_src(&w, it->dims, d, r[d], kw[d]);
        if (s < 0) valid = false;
        else off += s * is[d];
      }
      for (uint32_t i = 0; i < n; i++)
        args[n + i] = valid ? (const char *)in[i]->data + off * (int64_t)rsz[i] : in[n + i]->data;
      if (sp) lm_sprog_run(sp, args, res);
      else if ((rc = lm_body_call(&body, args, res, rsz)) < 0) goto done;
    }
    for (uint32_t i = 0; i < n; i++) memcpy((char *)out[i]->data + o * (int64_t)rsz[i], acc + 16 * i, rsz[i]);
  }
done:
  if (have_body) lm_body_free(&body);
  lm_sprog_free(sp);
  free(args);
  free(res);
  free(rsz);
  free(acc);
  return rc;
}

/* ---- select_and_scatter ---- */

static int v_select_and_scatter(const lm_op *op, const lm_func *fn, lm_err *err) {
  if (op->nin != 3 || op->nout != 1) return lm_op_err(err, op, LOOM_VERIFY, "expects 3 operands and 1 result");
  for (uint32_t i = 0; i < 3; i++) LM_TRY(lm_check_tensor(op, fn, false, i, err));
  LM_TRY(lm_check_tensor(op, fn, true, 0, err));
  const lm_type *a = lm_vtype(fn, op->in[0]), *s = lm_vtype(fn, op->in[1]), *iv = lm_vtype(fn, op->in[2]),
                *r = lm_vtype(fn, op->out[0]);
  wparams w;
  LM_TRY(read_window(op, a->rank, false, &w, err));
  int64_t want[LM_MAX_RANK];
  if (!num_windows(&w, a->dims, want)) return lm_op_err(err, op, LOOM_VERIFY, "padding gives a negative or too large size");
  if (s->dtype != a->dtype || iv->dtype != a->dtype || iv->rank != 0)
    return lm_op_err(err, op, LOOM_VERIFY, "source and init_value must have the operand's element type (init 0-d)");
  bool ok = s->rank == a->rank;
  for (int d = 0; ok && d < a->rank; d++) ok = s->dims[d] == want[d];
  if (!ok) return lm_op_err(err, op, LOOM_VERIFY, "source shape must be the number of windows");
  if (!lm_type_equal(a, r)) return lm_op_err(err, op, LOOM_VERIFY, "result type must equal the operand type");
  if (op->nregions != 2) return lm_op_err(err, op, LOOM_VERIFY, "expects select and scatter regions");
  for (uint32_t q = 0; q < 2; q++) {
    if (op->regions[q].nblocks != 1 || op->regions[q].blocks[0].nargs != 2)
      return lm_op_err(err, op, LOOM_VERIFY, "%s region must take 2 arguments", q ? "scatter" : "select");
    const lm_block *b = &op->regions[q].blocks[0];
    for (uint32_t i = 0; i < 2; i++) {
      const lm_type *t = lm_vtype(fn, b->args[i]);
      if (t->kind != LM_TYPE_TENSOR || t->rank != 0 || t->dtype != a->dtype)
        return lm_op_err(err, op, LOOM_VERIFY, "%s region arguments must be tensor<%s>", q ? "scatter" : "select",
                         lm_dtype_name(a->dtype));
    }
  }
  lm_dtype pred = LOOM_DTYPE_PRED, e = a->dtype;
  LM_TRY(lm_check_region_results(op, 0, fn, 1, &pred, "select", err));
  return lm_check_region_results(op, 1, fn, 1, &e, "scatter", err);
}

static int k_select_and_scatter(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  const lm_op *op = k->op;
  lm_buffer *a = in[0], *src = in[1], *init = in[2], *r = out[0];
  const lm_type *at = &a->type;
  int rank = at->rank;
  size_t es = lm_dtype_size(at->dtype);
  wparams w;
  LM_TRY(read_window(op, rank, false, &w, k->err));
  lm_fill_elems(r->data, init->data, es, (size_t)lm_type_numel(at));
  int64_t ns = lm_type_numel(&src->type);
  if (ns == 0) return 0;
  int rc = 0;
  lm_sprog *ssel = lm_sprog_compile(op, 0, k->fn, 1), *ssct = NULL;
  lm_binop_fn sf = NULL;
  lm_opcode bop = lm_region_simple_binop(op, 1, k->fn);
  if (bop != LM_OP_UNKNOWN) sf = lm_binop_lookup(bop, at->dtype);
  if (!sf) ssct = lm_sprog_compile(op, 1, k->fn, 1);
  lm_body bsel, bsct;
  bool hsel = false, hsct = false;
  if (!ssel) {
    if ((rc = lm_body_init(&bsel, k, 0, 1)) < 0) goto done;
    hsel = true;
  }
  if (!sf && !ssct) {
    if ((rc = lm_body_init(&bsct, k, 1, 1)) < 0) goto done;
    hsct = true;
  }
  int64_t is[LM_MAX_RANK];
  lm_row_strides(at, is);
  int64_t wn = 1;
  for (int d = 0; d < rank; d++) wn *= w.wdim[d];
  int64_t si[LM_MAX_RANK] = {0};
  for (int64_t q = 0; q < ns; q++, lm_index_next(rank, src->type.dims, si)) {
    int64_t sel = -1, kw[LM_MAX_RANK] = {0};
    for (int64_t t = 0; t < wn; t++, lm_index_next(rank, w.wdim, kw)) {
      int64_t off = 0;
      bool valid = true;
      for (int d = 0; d < rank && valid; d++) {
        int64_t s = win_src(&w, at->dims, d, si[d], kw[d]);
        if (s < 0) valid = false;
        else off += s * is[d];
      }
      if (!valid) continue;
      if (sel < 0) { sel = off; continue; }
      const void *args[2] = {(const char *)a->data + sel * (int64_t)es, (const char *)a->data + off * (int64_t)es};
      unsigned char keep = 0;
      void *res[1] = {&keep};
      if (ssel) lm_sprog_run(ssel, args, res);
      else {
        size_t one = 1;
        if ((rc = lm_body_call(&bsel, args, res, &one)) < 0) goto done;
      }
      if (!keep) sel = off;
    }
    if (sel < 0) continue;
    char *dst = (char *)r->data + sel * (int64_t)es;
    const char *sv = (const char *)src->data + q * (int64_t)es;
    if (sf) {
      sf(dst, sv, 1, 1, 1);
    } else {
      const void *args[2] = {dst, sv};
      void *res[1] = {dst};
      if (ssct) lm_sprog_run(ssct, args, res);
      else if ((rc = lm_body_call(&bsct, args, res, &es)) < 0) goto done;
    }
  }
done:
  if (hsel) lm_body_free(&bsel);
  if (hsct) lm_body_free(&bsct);
  lm_sprog_free(ssel);
  lm_sprog_free(ssct);
  return rc;
}

void lm_register_window_kernels(void) {
  lm_kernel_register(LM_OP_REDUCE_WINDOW, k_reduce_window, v_reduce_window, 0);
  lm_kernel_register(LM_OP_SELECT_AND_SCATTER, k_select_and_scatter, v_select_and_scatter, 0);
}
