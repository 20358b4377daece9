/* Op family: sort (StableHLO spec 'sort'), chlo.top_k and the @ApproxTopK custom call.
 *
 * sort: every 1-D slice along `dimension` of the operands is sorted together by a stable merge
 * sort of positions, using the comparator region on (lhs, rhs) pairs of every operand. A
 * comparator of key form (one operand's elements mapped alike on both sides, then compared: what
 * JAX emits for single-key sorts) is turned into per-element keys compared natively; others run
 * compiled (scalar_eval.c) when all their ops are simple ones, else through lm_exec_region. All
 * give the same permutation: the algorithm is the same and the comparator is evaluated exactly.
 * Stable sorting satisfies both is_stable values.
 *
 * chlo.top_k(operand, k): the k largest elements of each last-dimension row, in descending order,
 * and their indices (i32); equal elements keep ascending index order. Elements are ordered as
 * `compare GT, TOTALORDER` orders them (the comparator chlo's own lowering to sort uses): floats
 * by IEEE totalOrder (NaN above +inf, -0 below +0), integers by value, i1 true above false. */
#include <stdlib.h>
#include <string.h>
#include "exec/ops_util.h"
#include "exec/scalar_eval.h"

/* ---- stable merge sort of positions with a fallible comparator ---- */

typedef struct sorter {
  /* less(ctx, a, b): 1 if a sorts before b, 0 if not, negative status on error */
  int (*less)(void *ctx, int64_t a, int64_t b);
  void *ctx;
} sorter;

/* Sorts perm[n] stably; tmp[n] is scratch. Returns 0 or the comparator's error. */
static int merge_sort(const sorter *s, int64_t *perm, int64_t *tmp, int64_t n) {
  enum { RUN = 8 };
  /* insertion-sort runs */
  for (int64_t lo = 0; lo < n; lo += RUN) {
    int64_t hi = lo + RUN < n ? lo + RUN : n;
    for (int64_t i = lo + 1; i < hi; i++) {
      int64_t x = perm[i], j = i;
      while (j > lo) {
        int c = s->less(s->ctx, x, perm[j - 1]);
        if (c < 0) return c;
        if (!c) break;
        perm[j] = perm[j - 1];
        j--;
      }
      perm[j] = x;
    }
  }
  int64_t *src = perm, *dst = tmp;
  for (int64_t w = RUN; w < n; w *= 2) {
    for (int64_t lo = 0; lo < n; lo += 2 * w) {
      int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
      int64_t i = lo, j = mid, k = lo;
      while (i < mid && j < hi) {
        int c = s->less(s->ctx, src[j], src[i]); /* take the right one only if strictly before */
        if (c < 0) return c;
        dst[k++] = c ? src[j++] : src[i++];
      }
      while (i < mid) dst[k++] = src[i++];
      while (j < hi) dst[k++] = src[j++];
    }
    int64_t *t = src;
    src = dst;
    dst = t;
  }
  if (src != perm) memcpy(perm, src, (size_t)n * sizeof *perm);
  return 0;
}

/* ---- sort ---- */

typedef struct sort_ctx {
  uint32_t n;                 /* operands */
  lm_buffer *const *in;
  size_t *es;                 /* [n] element sizes */
  int64_t base, stride;       /* element (base + pos * stride) of each operand is slice position pos */
  const void **args;          /* [2n] */
  lm_sprog *sp;
  lm_body *body;
} sort_ctx;

static int sort_less(void *c_, int64_t a, int64_t b) {
  sort_ctx *c = c_;
  for (uint32_t k = 0; k < c->n; k++) {
    const char *p = c->in[k]->data;
    c->args[2 * k] = p + (c->base + a * c->stride) * (int64_t)c->es[k];
    c->args[2 * k + 1] = p + (c->base + b * c->stride) * (int64_t)c->es[k];
  }
  unsigned char r = 0;
  void *res[1] = {&r};
  if (c->sp) {
    lm_sprog_run(c->sp, c->args, res);
  } else {
    size_t one = 1;
    LM_TRY(lm_body_call(c->body, c->args, res, &one));
  }
  return r != 0;
}

/* ---- key form of comparators ----
 * Most comparators (all of JAX's single-key sorts) are `compare(dir, type, f(lhs_k), f(rhs_k))`
 * for one operand k and one function f applied alike to both sides (JAX canonicalizes -0 and NaN
 * first). Then comparator(i, j) = compare(key[i], key[j]) with key = f(operand k): the keys are
 * computed once per element and the merge sort compares them natively. The comparisons made are
 * exactly the comparator's, so the permutation is the same as calling the region. */

typedef struct keyform {
  uint32_t k;         /* the key operand */
  int dir, ct;        /* compare codes (lm_compare_parse) */
  lm_dtype kdt;       /* key element type */
  lm_sprog *f;        /* computes the key from lhs_k; NULL when the key is the element itself */
  uint32_t fval;
} keyform;

typedef struct dagcmp {
  const lm_block *b;
  const uint32_t *def; /* value id -> defining op index + 1 (0: not defined in the block) */
  uint32_t a0, a1;     /* the argument pair the two sides read */
  int budget;
} dagcmp;

static bool attrs_equal(const lm_op *x, const lm_op *y) {
  if (x->nattrs != y->nattrs) return false;
  for (uint32_t i = 0; i < x->nattrs; i++) {
    const lm_attr *p = &x->attrs[i].value, *q = &y->attrs[i].value;
    if (strcmp(x->attrs[i].name, y->attrs[i].name) || p->kind != q->kind) return false;
    switch (p->kind) {
      case LM_ATTR_UNIT: break;
      case LM_ATTR_BOOL: case LM_ATTR_INT: if (p->i != q->i) return false; break;
      case LM_ATTR_FLOAT: if (memcmp(&p->f, &q->f, sizeof p->f)) return false; break;
      case LM_ATTR_STRING: case LM_ATTR_SYMBOL: case LM_ATTR_ENUM:
        if (!p->s || !q->s || strcmp(p->s, q->s)) return false;
        break;
      case LM_ATTR_DENSE:
        if (!p->type || !q->type || !lm_type_equal(p->type, q->type) || p->nbytes != q->nbytes ||
            memcmp(p->data, q->data, p->nbytes))
          return false;
        break;
      default: return false; /* anything richer: not worth proving equal */
    }
  }
  return true;
}

/* True if value x (reading only argument a0) computes what value y (reading only a1) does. */
static bool same_dag(dagcmp *c, uint32_t x, uint32_t y) {
  if (--c->budget < 0) return false;
  uint32_t dx = c->def[x], dy = c->def[y];
  if (!dx || !dy) return !dx && !dy && x == c->a0 && y == c->a1;
  const lm_op *ox = &c->b->ops[dx - 1], *oy = &c->b->ops[dy - 1];
  if (ox->code != oy->code || ox->nin != oy->nin || ox->nout != 1 || oy->nout != 1 || ox->nregions || oy->nregions)
    return false;
  if (!attrs_equal(ox, oy)) return false;
  for (uint32_t i = 0; i < ox->nin; i++)
    if (!same_dag(c, ox->in[i], oy->in[i])) return false;
  return true;
}

static int mirror(int dir) { /* a OP b == b mirror(OP) a; codes EQ NE LT LE GT GE */
  static const int m[6] = {0, 1, 4, 5, 2, 3};
  return m[dir];
}

static bool key_form(const lm_op *op, const lm_func *fn, keyform *kf) {
  memset(kf, 0, sizeof *kf);
  if (lm_ops_generic_only || op->nregions != 1 || op->regions[0].nblocks != 1) return false;
  const lm_block *b = &op->regions[0].blocks[0];
  if (b->nops < 2 || b->nops > 4096 || b->nargs != 2 * op->nin) return false;
  const lm_op *ret = &b->ops[b->nops - 1];
  if (ret->nin != 1) return false;
  uint32_t *def = calloc(fn->nvalues ? fn->nvalues : 1, sizeof *def);
  if (!def) return false;
  bool ok = false;
  for (uint32_t j = 0; j + 1 < b->nops; j++)
    for (uint32_t q = 0; q < b->ops[j].nout; q++)
      if (b->ops[j].out[q] < fn->nvalues) def[b->ops[j].out[q]] = j + 1;
  uint32_t r = ret->in[0];
  const lm_op *c = r < fn->nvalues && def[r] ? &b->ops[def[r] - 1] : NULL;
  if (c && c->code == LM_OP_COMPARE && c->nin == 2) {
    const lm_attr *da = lm_op_attr(c, "comparison_direction"), *ca = lm_op_attr(c, "compare_type");
    lm_dtype kdt = fn->value_types[c->in[0]].dtype;
    int dir, ct;
    if (!lm_dtype_is_complex(kdt) && lm_compare_parse(da ? da->s : NULL, ca ? ca->s : NULL, kdt, &dir, &ct) == 0) {
      for (uint32_t k = 0; k < op->nin && !ok; k++)
        for (int sw = 0; sw < 2 && !ok; sw++) { /* sw: the rhs side reads lhs_k (operands swapped) */
          dagcmp dc = {b, def, b->args[2 * k], b->args[2 * k + 1], 4096};
          if (!same_dag(&dc, c->in[sw], c->in[1 - sw])) continue;
          kf->k = k;
          kf->dir = sw ? mirror(dir) : dir;
          kf->ct = ct;
          kf->kdt = kdt;
          kf->fval = c->in[sw];
          ok = true;
        }
    }
  }
  if (ok && kf->fval != b->args[2 * kf->k]) {
    kf->f = lm_sprog_compile_value(op, 0, fn, kf->fval);
    if (!kf->f) ok = false;
  }
  free(def);
  return ok;
}

typedef struct keyed {
  const char *keys;
  size_t es;
  int dir;
  int ct;
  lm_dtype dt;
  lm_order_fn ord;
} keyed;

static int keyed_less(void *c_, int64_t a, int64_t b) {
  keyed *c = c_;
  const char *x = c->keys + a * (int64_t)c->es, *y = c->keys + b * (int64_t)c->es;
  return lm_compare_test(c->dir, c->ord ? c->ord(x, y) : lm_order_elems(c->ct, c->dt, x, y));
}

static int64_t sort_dim(const lm_op *op, int rank) {
  int64_t d = lm_attr_int_or(lm_op_attr(op, "dimension"), -1);
  return d < 0 ? d + rank : d;
}

static int v_sort(const lm_op *op, const lm_func *fn, lm_err *err) {
  if (op->nin < 1 || op->nout != op->nin) return lm_op_err(err, op, LOOM_VERIFY, "expects N >= 1 operands and N results");
  for (uint32_t i = 0; i < op->nin; i++) {
    LM_TRY(lm_check_tensor(op, fn, false, i, err));
    LM_TRY(lm_check_tensor(op, fn, true, i, err));
  }
  const lm_type *t0 = lm_vtype(fn, op->in[0]);
  for (uint32_t i = 0; i < op->nin; i++) {
    const lm_type *t = lm_vtype(fn, op->in[i]);
    if (!lm_type_equal(t, lm_vtype(fn, op->out[i]))) return lm_op_err(err, op, LOOM_VERIFY, "result %u type differs from operand %u", i, i);
    if (t->rank != t0->rank || memcmp(t->dims, t0->dims, (size_t)t0->rank * sizeof(int64_t)) != 0)
      return lm_op_err(err, op, LOOM_VERIFY, "operands must have the same shape");
  }
  if (!lm_op_attr(op, "dimension") && t0->rank != 1) return lm_op_err(err, op, LOOM_VERIFY, "missing attribute 'dimension'");
  int64_t d = lm_op_attr(op, "dimension") ? sort_dim(op, t0->rank) : 0;
  if (d < 0 || d >= t0->rank)
    return lm_op_err(err, op, LOOM_VERIFY, "dimension %lld is outside [-%d, %d)",
                     (long long)lm_attr_int_or(lm_op_attr(op, "dimension"), 0), t0->rank, t0->rank);
  if (op->nregions != 1 || op->regions[0].nblocks != 1) return lm_op_err(err, op, LOOM_VERIFY, "expects one comparator region");
  const lm_block *b = &op->regions[0].blocks[0];
  if (b->nargs != 2 * op->nin) return lm_op_err(err, op, LOOM_VERIFY, "comparator must take %u arguments", 2 * op->nin);
  for (uint32_t i = 0; i < b->nargs; i++) {
    const lm_type *t = lm_vtype(fn, b->args[i]);
    if (t->kind != LM_TYPE_TENSOR || t->rank != 0 || t->dtype != lm_vtype(fn, op->in[i / 2])->dtype)
      return lm_op_err(err, op, LOOM_VERIFY, "comparator argument %u must be tensor<%s>", i,
                       lm_dtype_name(lm_vtype(fn, op->in[i / 2])->dtype));
  }
  lm_dtype pred = LOOM_DTYPE_PRED;
  return lm_check_region_results(op, 0, fn, 1, &pred, "comparator", err);
}

static int k_sort(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  const lm_op *op = k->op;
  uint32_t n = op->nin;
  const lm_type *t = &in[0]->type;
  int rank = t->rank;
  int64_t dim = lm_op_attr(op, "dimension") ? sort_dim(op, rank) : 0;
  int64_t len = t->dims[dim];
  if (lm_type_numel(t) == 0) return 0;
  int64_t strides[LM_MAX_RANK], outer[LM_MAX_RANK], idx[LM_MAX_RANK] = {0};
  lm_row_strides(t, strides);
  memcpy(outer, t->dims, sizeof outer);
  outer[dim] = 1;

  sort_ctx c = {.n = n, .in = in, .stride = strides[dim]};
  keyform kf = {0};
  char *keys = NULL;
  keyed kc = {0};
  lm_body body;
  bool have_body = false;
  int rc = 0;
  c.es = calloc(n, sizeof *c.es);
  c.args = calloc(2 * n, sizeof *c.args);
  int64_t *perm = malloc((size_t)len * sizeof *perm), *tmp = malloc((size_t)len * sizeof *tmp);
  if (!c.es || !c.args || !perm || !tmp) { rc = lm_kerr(k, LOOM_NO_MEMORY, "out of host memory"); goto done; }
  for (uint32_t i = 0; i < n; i++) c.es[i] = lm_dtype_size(in[i]->type.dtype);
  if (key_form(op, k->fn, &kf)) {
    kc.es = lm_dtype_size(kf.kdt);
    kc.dir = kf.dir;
    kc.ct = kf.ct;
    kc.dt = kf.kdt;
    kc.ord = lm_order_get(kf.ct, kf.kdt);
    keys = malloc((size_t)(len ? len : 1) * kc.es);
    if (!keys) { lm_sprog_free(kf.f); rc = lm_kerr(k, LOOM_NO_MEMORY, "out of host memory"); goto done; }
    kc.keys = keys;
  } else if (!(c.sp = lm_sprog_compile(op, 0, k->fn, 1))) {
    rc = lm_body_init(&body, k, 0, 1);
    if (rc < 0) goto done;
    have_body = true;
    c.body = &body;
  }
  sorter s = {sort_less, &c};
  sorter ks = {keyed_less, &kc};
  do {
    c.base = 0;
    for (int d = 0; d < rank; d++) c.base += idx[d] * strides[d];
    for (int64_t i = 0; i < len; i++) perm[i] = i;
    if (keys) {
      const char *src = in[kf.k]->data;
      size_t es = c.es[kf.k];
      for (int64_t i = 0; i < len; i++) {
        const char *e = src + (c.base + i * c.stride) * (int64_t)es;
        if (!kf.f) {
          memcpy(keys + i * (int64_t)kc.es, e, kc.es);
        } else {
          for (uint32_t q = 0; q < 2 * n; q++) c.args[q] = e; /* the key reads lhs_k only */
          void *res[1] = {keys + i * (int64_t)kc.es};
          lm_sprog_run(kf.f, c.args, res);
        }
      }
      rc = merge_sort(&ks, perm, tmp, len);
    } else {
      rc = merge_sort(&s, perm, tmp, len);
    }
    if (rc < 0) goto done;
    for (uint32_t q = 0; q < n; q++) {
      size_t es = c.es[q];
      const char *src = in[q]->data;
      char *dst = out[q]->data;
      for (int64_t i = 0; i < len; i++)
        memcpy(dst + (c.base + i * c.stride) * (int64_t)es, src + (c.base + perm[i] * c.stride) * (int64_t)es, es);
    }
  } while (lm_index_next(rank, outer, idx));
done:
  if (have_body) lm_body_free(&body);
  if (keys) lm_sprog_free(kf.f);
  free(keys);
  lm_sprog_free(c.sp);
  free(c.es);
  free(c.args);
  free(perm);
  free(tmp);
  return rc;
}

/* ---- chlo.top_k ---- */

static int v_top_k(const lm_op *op, const lm_func *fn, lm_err *err) {
  if (op->nin != 1 || op->nout != 2) return lm_op_err(err, op, LOOM_VERIFY, "expects 1 operand and 2 results");
  LM_TRY(lm_check_tensor(op, fn, false, 0, err));
  LM_TRY(lm_check_tensor(op, fn, true, 0, err));
  LM_TRY(lm_check_tensor(op, fn, true, 1, err));
  const lm_type *a = lm_vtype(fn, op->in[0]), *v = lm_vtype(fn, op->out[0]), *ix = lm_vtype(fn, op->out[1]);
  const lm_attr *ka = lm_op_attr(op, "k");
  if (!ka) return lm_op_err(err, op, LOOM_VERIFY, "missing attribute 'k'");
  int64_t kk = lm_attr_int_or(ka, -1);
  if (a->rank < 1) return lm_op_err(err, op, LOOM_VERIFY, "operand must have rank >= 1");
  if (lm_dtype_is_complex(a->dtype)) return lm_op_err(err, op, LOOM_VERIFY, "complex operands cannot be ordered");
  if (kk < 0 || kk > a->dims[a->rank - 1])
    return lm_op_err(err, op, LOOM_VERIFY, "k = %lld is outside [0, %lld]", (long long)kk, (long long)a->dims[a->rank - 1]);
  int64_t want[LM_MAX_RANK];
  memcpy(want, a->dims, sizeof want);
  want[a->rank - 1] = kk;
  for (int r = 0; r < 2; r++) {
    const lm_type *t = r ? ix : v;
    bool ok = t->rank == a->rank && memcmp(t->dims, want, (size_t)a->rank * sizeof(int64_t)) == 0;
    if (!ok) return lm_op_err(err, op, LOOM_VERIFY, "result %d must have the operand's shape with k in the last dimension", r);
  }
  if (v->dtype != a->dtype) return lm_op_err(err, op, LOOM_VERIFY, "values must have the operand's element type");
  if (ix->dtype != LOOM_DTYPE_S32) return lm_op_err(err, op, LOOM_VERIFY, "indices must be i32");
  return 0;
}

typedef struct topk_ctx {
  const char *row;
  size_t es;
  lm_dtype dt;
} topk_ctx;

static int topk_before(void *c_, int64_t a, int64_t b) {
  topk_ctx *c = c_;
  return lm_compare_elems("GT", "TOTALORDER", c->dt, c->row + a * (int64_t)c->es, c->row + b * (int64_t)c->es);
}

static int k_top_k(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  const lm_type *t = &in[0]->type;
  int64_t n = t->dims[t->rank - 1], kk = out[0]->type.dims[t->rank - 1];
  int64_t rows = n ? lm_type_numel(t) / n : 0;
  if (kk == 0 || rows == 0) return 0;
  topk_ctx c = {.es = lm_dtype_size(t->dtype), .dt = t->dtype};
  int64_t *perm = malloc((size_t)n * sizeof *perm), *tmp = malloc((size_t)n * sizeof *tmp);
  if (!perm || !tmp) {
    free(perm);
    free(tmp);
    return lm_kerr(k, LOOM_NO_MEMORY, "out of host memory");
  }
  sorter s = {topk_before, &c};
  for (int64_t r = 0; r < rows; r++) {
    c.row = (const char *)in[0]->data + r * n * (int64_t)c.es;
    for (int64_t i = 0; i < n; i++) perm[i] = i;
    merge_sort(&s, perm, tmp, n); /* cannot fail: the comparator is native */
    for (int64_t i = 0; i < kk; i++) {
      memcpy((char *)out[0]->data + (r * kk + i) * (int64_t)c.es, c.row + perm[i] * (int64_t)c.es, c.es);
      ((int32_t *)out[1]->data)[r * kk + i] = (int32_t)perm[i];
    }
  }
  free(perm);
  free(tmp);
  return 0;
}

/* ---- @ApproxTopK custom call (jax.lax.approx_max_k / approx_min_k) ----
 * XLA's CPU backend runs it as its fallback, an exact top-k: sort the operands along
 * reduction_dim with the comparator function named by called_computations (the sort's comparator
 * convention: (lhs0, rhs0, lhs1, rhs1, ...) -> i1), keep the first top_k. The init values only
 * matter to the approximate TPU algorithm. Results must have top_k in reduction_dim
 * (aggregate_to_topk). */

static int64_t cfg_int(const lm_op *op, const char *name, int64_t dflt) {
  const lm_attr *bc = lm_op_attr(op, "mhlo.backend_config");
  if (!bc || (bc->kind != LM_ATTR_DICT && bc->kind != LM_ATTR_STRUCT)) return dflt;
  return lm_attr_int_or(lm_attrs_get(bc->fields, bc->n, name), dflt);
}

static const char *approx_comparator(const lm_op *op) {
  const lm_attr *cc = lm_op_attr(op, "called_computations");
  if (!cc) return NULL;
  if (cc->kind == LM_ATTR_SYMBOL) return cc->s;
  if (cc->kind == LM_ATTR_ARRAY && cc->n == 1 && (cc->items[0].kind == LM_ATTR_SYMBOL || cc->items[0].kind == LM_ATTR_STRING))
    return cc->items[0].s;
  return NULL;
}

static int v_approx_top_k(const lm_op *op, const lm_func *fn, lm_err *err) {
  if (op->nin < 2 || op->nin % 2 || op->nout != op->nin / 2)
    return lm_op_err(err, op, LOOM_VERIFY, "@ApproxTopK expects N operands, N init values and N results");
  uint32_t n = op->nout;
  LM_TRY(lm_check_tensors(op, fn, op->nin, n, err));
  const lm_type *a = lm_vtype(fn, op->in[0]);
  int64_t rd = cfg_int(op, "reduction_dim", -1), k = cfg_int(op, "top_k", -1);
  if (rd < 0) rd += a->rank;
  if (rd < 0 || rd >= a->rank) return lm_op_err(err, op, LOOM_VERIFY, "@ApproxTopK reduction_dim is outside the operand rank");
  if (k < 0 || k > a->dims[rd]) return lm_op_err(err, op, LOOM_VERIFY, "@ApproxTopK top_k is outside [0, %lld]", (long long)a->dims[rd]);
  if (!approx_comparator(op)) return lm_op_err(err, op, LOOM_VERIFY, "@ApproxTopK needs one comparator in called_computations");
  for (uint32_t i = 0; i < n; i++) {
    const lm_type *t = lm_vtype(fn, op->in[i]), *r = lm_vtype(fn, op->out[i]);
    bool ok = t->rank == a->rank && r->rank == a->rank && r->dtype == t->dtype;
    for (int d = 0; ok && d < a->rank; d++) ok = t->dims[d] == a->dims[d] && r->dims[d] == (d == rd ? k : a->dims[d]);
    if (!ok) return lm_op_err(err, op, LOOM_UNSUPPORTED, "@ApproxTopK result %u must be operand %u with top_k in reduction_dim", i, i);
  }
  return 0;
}

typedef struct approx_ctx {
  lm_kctx *k;
  uint32_t n;
  lm_buffer *const *in;
  int64_t base, stride;
  const void **args;   /* [2n] */
  lm_sprog *sp;
  const char *fname;
  lm_buffer **scal;    /* [2n] scalar buffers for the function-call path */
} approx_ctx;

static int approx_less(void *c_, int64_t a, int64_t b) {
  approx_ctx *c = c_;
  for (uint32_t q = 0; q < c->n; q++) {
    size_t es = lm_dtype_size(c->in[q]->type.dtype);
    const char *p = c->in[q]->data;
    c->args[2 * q] = p + (c->base + a * c->stride) * (int64_t)es;
    c->args[2 * q + 1] = p + (c->base + b * c->stride) * (int64_t)es;
  }
  unsigned char r = 0;
  if (c->sp) {
    void *res[1] = {&r};
    lm_sprog_run(c->sp, c->args, res);
    return r != 0;
  }
  for (uint32_t q = 0; q < 2 * c->n; q++) memcpy(c->scal[q]->data, c->args[q], c->scal[q]->nbytes);
  lm_buffer *out = NULL;
  LM_TRY(lm_exec_call(c->k, c->fname, c->scal, 2 * c->n, &out, 1));
  int v = out->type.kind == LM_TYPE_TENSOR && out->nbytes == 1 ? ((unsigned char *)out->data)[0] != 0 : -1;
  lm_buffer_release(out);
  return v < 0 ? lm_kerr(c->k, LOOM_VERIFY, "@ApproxTopK comparator must return tensor<i1>") : v;
}

static int k_approx_top_k(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  const lm_op *op = k->op;
  uint32_t n = op->nout;
  const lm_type *t = &in[0]->type;
  int rank = t->rank;
  int64_t rd = cfg_int(op, "reduction_dim", -1);
  if (rd < 0) rd += rank;
  int64_t kk = out[0]->type.dims[rd], len = t->dims[rd];
  if (lm_type_numel(&out[0]->type) == 0) return 0;
  approx_ctx c = {.k = k, .n = n, .in = in, .fname = approx_comparator(op)};
  const lm_func *cf = lm_module_func(lm_program_module(k->prog), c.fname);
  if (!cf) return lm_kerr(k, LOOM_NOT_FOUND, "@ApproxTopK comparator @%s is not in the module", c.fname);
  if (cf->nargs != 2 * n) return lm_kerr(k, LOOM_VERIFY, "@ApproxTopK comparator @%s must take %u arguments", c.fname, 2 * n);
  int rc = 0;
  int64_t strides[LM_MAX_RANK], ostr[LM_MAX_RANK], outer[LM_MAX_RANK], idx[LM_MAX_RANK] = {0};
  lm_row_strides(t, strides);
  lm_row_strides(&out[0]->type, ostr);
  memcpy(outer, t->dims, sizeof outer);
  outer[rd] = 1;
  c.stride = strides[rd];
  c.args = calloc(2 * n, sizeof *c.args);
  c.scal = calloc(2 * n, sizeof *c.scal);
  int64_t *perm = malloc((size_t)len * sizeof *perm), *tmp = malloc((size_t)len * sizeof *tmp);
  if (!c.args || !c.scal || !perm || !tmp) { rc = lm_kerr(k, LOOM_NO_MEMORY, "out of host memory"); goto done; }
  c.sp = lm_sprog_compile_func(cf, 1);
  if (!c.sp)
    for (uint32_t q = 0; q < 2 * n && rc == 0; q++) rc = lm_kalloc(k, &cf->arg_types[q], &c.scal[q]);
  if (rc < 0) goto done;
  for (uint32_t q = 0; !c.sp && q < 2 * n; q++)
    if (c.scal[q]->nbytes != lm_dtype_size(in[q / 2]->type.dtype)) {
      rc = lm_kerr(k, LOOM_VERIFY, "@ApproxTopK comparator argument %u has the wrong type", q);
      goto done;
    }
  sorter s = {approx_less, &c};
  do {
    int64_t ob = 0;
    c.base = 0;
    for (int d = 0; d < rank; d++) {
      c.base += idx[d] * strides[d];
      ob += idx[d] * ostr[d];
    }
    for (int64_t i = 0; i < len; i++) perm[i] = i;
    if ((rc = merge_sort(&s, perm, tmp, len)) < 0) goto done;
    for (uint32_t q = 0; q < n; q++) {
      size_t es = lm_dtype_size(in[q]->type.dtype);
      for (int64_t i = 0; i < kk; i++)
        memcpy((char *)out[q]->data + (ob + i * ostr[rd]) * (int64_t)es,
               (const char *)in[q]->data + (c.base + perm[i] * c.stride) * (int64_t)es, es);
    }
  } while (lm_index_next(rank, outer, idx));
done:
  for (uint32_t q = 0; c.scal && q < 2 * n; q++) lm_buffer_release(c.scal[q]);
  free(c.scal);
  free(c.args);
  lm_sprog_free(c.sp);
  free(perm);
  free(tmp);
  return rc;
}

void lm_register_sort_kernels(void) {
  lm_kernel_register(LM_OP_SORT, k_sort, v_sort, 0);
  lm_kernel_register(LM_OP_CHLO_TOP_K, k_top_k, v_top_k, 0);
  lm_custom_call_register("ApproxTopK", k_approx_top_k, v_approx_top_k, 0);
}
