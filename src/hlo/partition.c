/* The SPMD partitioner (partition.h, docs/partitioner.md). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "hlo/partition.h"
#include "hlo/print.h"
#include "hlo/spmd_int.h"

#define NA LM_MESH_MAX_AXES
#define MAX_TEXT (256 << 20) /* cap on the per-device program's text (and the report's) */

/* A sharding of one value: per dimension the mesh axes that split it, major to minor, -1 ends. */
typedef struct vsh {
  int8_t ax[LM_MAX_RANK][NA];
} vsh;

typedef enum red_kind { RED_NONE = 0, RED_ADD, RED_MAX, RED_MIN, RED_MUL, RED_AND, RED_OR } red_kind;
static const char *const red_op[] = {"", "stablehlo.add", "stablehlo.maximum", "stablehlo.minimum",
                                     "stablehlo.multiply", "stablehlo.and", "stablehlo.or"};

typedef struct cache_ent {
  uint32_t v, id;
  vsh s;
} cache_ent;

typedef struct pt {
  const lm_module *m;
  const lm_func *f;
  lm_sp_mesh ms;
  bool have_mesh;
  uint32_t nproc;
  uint32_t *mesh_procs; /* mesh position -> process */
  uint32_t *proc_pos;   /* process -> mesh position */
  /* per value of @main */
  vsh *ch;
  uint8_t *known, *fixed, *top;
  uint8_t *rw; /* rw[op->out[0]]: a while / case whose regions the partitioner rewrites */
  const lm_op **def;
  uint32_t *loc; /* local id of the value in sharding ch[v] */
  vsh *res_sh;   /* [nresults] */
  /* output */
  lm_textbuf out, ex;
  uint32_t nid;
  int64_t pid; /* local id of the i32 process id, -1 until needed */
  int64_t zero; /* local id of an i32 zero */
  uint32_t channel;
  double bytes_total;
  uint32_t ncoll, nfallback;
  cache_ent *cache;
  size_t ncache, capcache;
  lm_err *err;
  /* @main with its calls inlined */
  lm_func inl;
  lm_arena ar;
  lm_type *types;
  uint32_t ntypes, captypes;
} pt;

/* ---- shardings ---- */

static void vsh_clear(vsh *s) { memset(s->ax, -1, sizeof s->ax); }

static int vsh_nax(const vsh *s, int d) {
  int n = 0;
  while (n < NA && s->ax[d][n] >= 0) n++;
  return n;
}

static int64_t vsh_parts(const pt *P, const vsh *s, int d) {
  int64_t k = 1;
  for (int j = 0; j < NA && s->ax[d][j] >= 0; j++) k *= P->ms.sizes[s->ax[d][j]];
  return k;
}

static bool vsh_dim_eq(const vsh *a, int da, const vsh *b, int db) {
  for (int j = 0; j < NA; j++) {
    if (a->ax[da][j] != b->ax[db][j]) return false;
    if (a->ax[da][j] < 0) return true;
  }
  return true;
}

static bool vsh_eq(const vsh *a, const vsh *b, int rank) {
  for (int d = 0; d < rank; d++)
    if (!vsh_dim_eq(a, d, b, d)) return false;
  return true;
}

static bool vsh_is_repl(const vsh *s, int rank) {
  for (int d = 0; d < rank; d++)
    if (s->ax[d][0] >= 0) return false;
  return true;
}

static uint32_t vsh_used(const vsh *s, int rank) {
  uint32_t u = 0;
  for (int d = 0; d < rank; d++)
    for (int j = 0; j < NA && s->ax[d][j] >= 0; j++) u |= 1u << s->ax[d][j];
  return u;
}

static uint32_t dim_mask(const vsh *s, int d) {
  uint32_t u = 0;
  for (int j = 0; j < NA && s->ax[d][j] >= 0; j++) u |= 1u << s->ax[d][j];
  return u;
}

static bool is_prefix(const vsh *a, int da, const vsh *b, int db) {
  int na = vsh_nax(a, da), nb = vsh_nax(b, db);
  if (na > nb) return false;
  for (int j = 0; j < na; j++)
    if (a->ax[da][j] != b->ax[db][j]) return false;
  return true;
}

static const lm_type *vtype(const pt *P, uint32_t v) { return &P->f->value_types[v]; }

static int vrank(const pt *P, uint32_t v) {
  const lm_type *t = vtype(P, v);
  return t->kind == LM_TYPE_TENSOR ? t->rank : 0;
}

/* A dimension of size n split k ways: each shard holds ceil(n / k) elements, the last shards
 * padded past the end (as XLA does); the padding holds unspecified values. */
static void local_of(const pt *P, const lm_type *g, const vsh *s, lm_type *l) {
  *l = *g;
  if (g->kind != LM_TYPE_TENSOR) return;
  for (int d = 0; d < g->rank; d++) {
    int64_t k = vsh_parts(P, s, d);
    l->dims[d] = (g->dims[d] + k - 1) / k;
  }
}

/* True when dim d of a value of type g does not split evenly under s (its shards are padded). */
static bool uneven(const pt *P, const vsh *s, const lm_type *g, int d) {
  int64_t k = vsh_parts(P, s, d);
  return k > 1 && g->dims[d] % k != 0;
}

static bool any_uneven(const pt *P, const vsh *s, const lm_type *g) {
  if (g->kind != LM_TYPE_TENSOR) return false;
  for (int d = 0; d < g->rank; d++)
    if (uneven(P, s, g, d)) return true;
  return false;
}

static char *ts(const lm_type *t) {
  static __thread char bufs[8][512];
  static __thread int k;
  k = (k + 1) & 7;
  return lm_type_str(t, bufs[k], sizeof bufs[k]);
}

/* `[{"x"}, {}]` */
static void put_vsh(const pt *P, lm_textbuf *b, const vsh *s, int rank) {
  lm_tb_put(b, "[");
  for (int d = 0; d < rank; d++) {
    lm_tb_put(b, "%s{", d ? ", " : "");
    for (int j = 0; j < NA && s->ax[d][j] >= 0; j++) lm_tb_put(b, "%s\"%s\"", j ? ", " : "", P->ms.names[s->ax[d][j]]);
    lm_tb_put(b, "}");
  }
  lm_tb_put(b, "]");
}

static void put_axes(const pt *P, lm_textbuf *b, const int8_t *axes, int n) {
  lm_tb_put(b, "{");
  for (int j = 0; j < n; j++) lm_tb_put(b, "%s\"%s\"", j ? ", " : "", P->ms.names[axes[j]]);
  lm_tb_put(b, "}");
}

/* Drops from s what does not fit type t: axes used twice and, when `even` (the shardings of
 * @main's arguments and results, which the runtime holds as equal shards), dimensions that do
 * not split evenly (reported on the explain output when what is given). Inside the program a
 * dimension may split unevenly: its shards are padded (local_of). */
static void vsh_fit(pt *P, vsh *s, const lm_type *t, const char *what, bool even) {
  int rank = t->kind == LM_TYPE_TENSOR ? t->rank : 0;
  uint32_t used = 0;
  for (int d = 0; d < LM_MAX_RANK; d++) {
    if (d >= rank) {
      memset(s->ax[d], -1, NA);
      continue;
    }
    int n = vsh_nax(s, d);
    bool ok = true;
    uint32_t mine = 0;
    for (int j = 0; j < n; j++) {
      if ((used | mine) & (1u << s->ax[d][j])) ok = false;
      mine |= 1u << s->ax[d][j];
    }
    int64_t k = ok ? vsh_parts(P, s, d) : 1;
    if (ok && (t->dims[d] < 0 || (even && t->dims[d] % k != 0))) {
      if (what && n) {
        lm_tb_put(&P->ex, "  uneven: %s dimension %d (size %lld) does not split into %lld equal shards, and the runtime "
                          "holds arguments and results as equal shards: that dimension is replicated instead (fallback)\n",
                  what, d, (long long)t->dims[d], (long long)k);
        P->nfallback++;
      }
      ok = false;
    }
    if (!ok) {
      memset(s->ax[d], -1, NA);
      continue;
    }
    used |= dim_mask(s, d);
  }
}

static int vsh_from_attr(pt *P, const lm_attr *sh, const lm_type *t, vsh *s, const char *what, const lm_loc *loc) {
  lm_sp_mesh m2;
  LM_TRY(lm_sp_sharding_mesh(P->m, sh, &m2, loc, P->err));
  if (m2.rank == 0 && !m2.device_ids) {
    /* a mesh without axes (JAX's @empty_mesh, for scalars and other replicated values): the
     * value is whole on every device, whichever mesh the rest of the program uses */
    vsh_clear(s);
    const lm_attr *dims = lm_sp_field(sh, "dims");
    for (uint32_t d = 0; dims && dims->kind == LM_ATTR_ARRAY && d < dims->n; d++)
      if (dims->items[d].kind != LM_ATTR_ARRAY || dims->items[d].n)
        return lm_sp_loc_errf(P->err, LOOM_VERIFY, loc, "%s: a sharding over a mesh without axes splits a dimension",
                              what);
    return 0;
  }
  if (!P->have_mesh) {
    P->ms = m2;
    P->have_mesh = true;
  } else if (!lm_sp_same_mesh(&P->ms, &m2)) {
    return lm_sp_loc_errf(P->err, LOOM_UNSUPPORTED, loc, "%s: shardings over different meshes are not supported", what);
  }
  vsh_clear(s);
  const lm_attr *dims = lm_sp_field(sh, "dims");
  int rank = t->kind == LM_TYPE_TENSOR ? t->rank : 0;
  if (!dims || dims->kind != LM_ATTR_ARRAY || dims->n != (uint32_t)rank)
    return lm_sp_loc_errf(P->err, LOOM_VERIFY, loc, "%s: the sharding does not match the value's rank %d", what, rank);
  const lm_attr *unred = lm_sp_field(sh, "unreduced");
  if (unred && unred->kind == LM_ATTR_ARRAY && unred->n > 0)
    return lm_sp_loc_errf(P->err, LOOM_UNSUPPORTED, loc, "%s: unreduced shardings are not supported", what);
  for (uint32_t d = 0; d < dims->n; d++) {
    const lm_attr *ax = &dims->items[d];
    if (ax->kind != LM_ATTR_ARRAY || ax->n > NA)
      return lm_sp_loc_errf(P->err, LOOM_VERIFY, loc, "%s: malformed dimension sharding", what);
    for (uint32_t j = 0; j < ax->n; j++) {
      const char *nm = ax->items[j].s;
      if (ax->items[j].kind != LM_ATTR_STRING || !nm)
        return lm_sp_loc_errf(P->err, LOOM_VERIFY, loc, "%s: malformed axis name", what);
      if (strchr(nm, ':'))
        return lm_sp_loc_errf(P->err, LOOM_UNSUPPORTED, loc, "%s: sub-axis \"%s\" is not supported by the partitioner",
                              what, nm);
      int a = lm_sp_axis_index(&P->ms, nm);
      if (a < 0) return lm_sp_loc_errf(P->err, LOOM_VERIFY, loc, "%s: axis \"%s\" is not in the mesh", what, nm);
      s->ax[d][j] = (int8_t)a;
    }
  }
  return 0;
}

/* ---- per-op rules ---- */

typedef enum rule_kind {
  R_MAP = 0, R_DOT, R_REDUCE, R_IOTA, R_CONST, R_IDENT, R_SLICE, R_DSLICE, R_DUS, R_GATHER, R_FALLBACK
} rule_kind;

/* How an op relates its operands' dimensions to its (single) result's. */
typedef struct rule {
  rule_kind kind;
  int8_t map[8][LM_MAX_RANK]; /* operand i (< 8), dim d -> result dim, or -1 */
  bool prod[LM_MAX_RANK];     /* result dims the op can compute split */
  int64_t need[LM_MAX_RANK];  /* a size each split result dim must also divide (reshape), 0 = none */
  /* dot: contracting dim pairs; reduce: reduced dims of operand 0 */
  int ncontract;
  int lc[LM_MAX_RANK], rc[LM_MAX_RANK];
  red_kind red;
  /* results sharing one sharding (variadic reduce and sort, top_k: all of one shape) */
  uint32_t nres;
  /* reduce: inputs reduced together (the rest are their init values); gen: partial results over
   * split reduced dims are combined by gathering them and reducing again with the op's body
   * (variadic reduce with constant init values, as jnp.argmax lowers) */
  uint32_t nred_in;
  bool gen;
  /* sort / top_k: the dim sorted along (operands split there are gathered first), else -1 */
  int sort_dim;
} rule;

static bool elementwise(uint16_t c) {
  switch (c) {
    case LM_OP_ABS: case LM_OP_ADD: case LM_OP_AND: case LM_OP_ATAN2: case LM_OP_CBRT: case LM_OP_CEIL:
    case LM_OP_CLAMP: case LM_OP_COMPARE: case LM_OP_COMPLEX: case LM_OP_CONVERT: case LM_OP_COSINE:
    case LM_OP_COUNT_LEADING_ZEROS: case LM_OP_DIVIDE: case LM_OP_EXPONENTIAL: case LM_OP_EXPONENTIAL_MINUS_ONE:
    case LM_OP_FLOOR: case LM_OP_IMAG: case LM_OP_IS_FINITE: case LM_OP_LOG: case LM_OP_LOG_PLUS_ONE:
    case LM_OP_LOGISTIC: case LM_OP_MAXIMUM: case LM_OP_MINIMUM: case LM_OP_MULTIPLY: case LM_OP_NEGATE:
    case LM_OP_NOT: case LM_OP_OR: case LM_OP_POPCNT: case LM_OP_POWER: case LM_OP_REAL: case LM_OP_REDUCE_PRECISION:
    case LM_OP_REMAINDER: case LM_OP_ROUND_NEAREST_AFZ: case LM_OP_ROUND_NEAREST_EVEN: case LM_OP_RSQRT:
    case LM_OP_SELECT: case LM_OP_SHIFT_LEFT: case LM_OP_SHIFT_RIGHT_ARITHMETIC: case LM_OP_SHIFT_RIGHT_LOGICAL:
    case LM_OP_SIGN: case LM_OP_SINE: case LM_OP_SQRT: case LM_OP_SUBTRACT: case LM_OP_TAN: case LM_OP_TANH:
    case LM_OP_XOR: case LM_OP_BITCAST_CONVERT: case LM_OP_CHLO_ERF: case LM_OP_CHLO_ERF_INV: case LM_OP_CHLO_ERFC:
    case LM_OP_CHLO_LGAMMA: case LM_OP_CHLO_DIGAMMA: case LM_OP_CHLO_TAN: case LM_OP_CHLO_SINH: case LM_OP_CHLO_COSH:
    case LM_OP_CHLO_ASIN: case LM_OP_CHLO_ACOS: case LM_OP_CHLO_ATAN: case LM_OP_CHLO_ASINH: case LM_OP_CHLO_ACOSH:
    case LM_OP_CHLO_ATANH: case LM_OP_CHLO_IS_INF: case LM_OP_CHLO_IS_NEG_INF: case LM_OP_CHLO_IS_POS_INF:
    case LM_OP_CHLO_SQUARE: case LM_OP_CHLO_CONJ:
      return true;
    default:
      return false;
  }
}

/* The binary op a reduction body applies to its two arguments, or RED_NONE. */
static red_kind body_kind(const lm_op *op, uint32_t r) {
  if (op->nregions <= r || op->regions[r].nblocks != 1) return RED_NONE;
  const lm_block *b = &op->regions[r].blocks[0];
  if (b->nargs != 2 || b->nops != 2) return RED_NONE;
  const lm_op *x = &b->ops[0], *ret = &b->ops[1];
  if (x->nin != 2 || x->nout != 1 || ret->nin != 1 || ret->in[0] != x->out[0]) return RED_NONE;
  if (!((x->in[0] == b->args[0] && x->in[1] == b->args[1]) || (x->in[0] == b->args[1] && x->in[1] == b->args[0])))
    return RED_NONE;
  switch (x->code) {
    case LM_OP_ADD: return RED_ADD;
    case LM_OP_MAXIMUM: return RED_MAX;
    case LM_OP_MINIMUM: return RED_MIN;
    case LM_OP_MULTIPLY: return RED_MUL;
    case LM_OP_AND: return RED_AND;
    case LM_OP_OR: return RED_OR;
    default: return RED_NONE;
  }
}

/* True when top-level value v is a constant that is the identity of reduction k (so each shard
 * may start from it and the partial results combine to the global one). */
static bool is_identity(const pt *P, uint32_t v, red_kind k) {
  const lm_op *d = P->def[v];
  if (!d || d->code != LM_OP_CONSTANT) return false;
  const lm_attr *a = lm_op_attr(d, "value");
  if (!a || a->kind != LM_ATTR_DENSE || !a->type || a->nbytes == 0) return false;
  lm_dtype t = (lm_dtype)a->type->dtype;
  size_t es = lm_dtype_size(t);
  if (!es || a->nbytes % es) return false;
  const uint8_t *p = a->data;
  for (size_t i = 0; i < a->nbytes; i += es) {
    bool ok = false;
    if (k == RED_ADD || k == RED_OR) {
      ok = true;
      for (size_t j = 0; j < es; j++) ok = ok && p[i + j] == 0;
    } else if (t == LOOM_DTYPE_F32 || t == LOOM_DTYPE_F64) {
      double x;
      if (t == LOOM_DTYPE_F32) {
        float f;
        memcpy(&f, p + i, 4);
        x = f;
      } else {
        memcpy(&x, p + i, 8);
      }
      ok = (k == RED_MAX && isinf(x) && x < 0) || (k == RED_MIN && isinf(x) && x > 0) || (k == RED_MUL && x == 1.0);
    } else if (t == LOOM_DTYPE_S32 || t == LOOM_DTYPE_S64) {
      int64_t x;
      if (t == LOOM_DTYPE_S32) {
        int32_t y;
        memcpy(&y, p + i, 4);
        x = y;
      } else {
        memcpy(&x, p + i, 8);
      }
      int64_t lo = t == LOOM_DTYPE_S32 ? INT32_MIN : INT64_MIN, hi = t == LOOM_DTYPE_S32 ? INT32_MAX : INT64_MAX;
      ok = (k == RED_MAX && x == lo) || (k == RED_MIN && x == hi) || (k == RED_MUL && x == 1);
    } else if (t == LOOM_DTYPE_PRED) {
      ok = k == RED_AND && p[i] == 1;
    }
    if (!ok) return false;
  }
  return true;
}

static int ints(const lm_op *op, const char *name, int64_t *out, int cap) {
  const lm_attr *a = lm_op_attr(op, name);
  return a ? lm_attr_ints(a, out, cap) : -1;
}

/* Builds op's rule; ops without one get R_FALLBACK. */
static void op_rule(const pt *P, const lm_op *op, rule *r) {
  memset(r, 0, sizeof *r);
  memset(r->map, -1, sizeof r->map);
  r->kind = R_FALLBACK;
  r->nres = 1;
  r->sort_dim = -1;
  bool multi = op->code == LM_OP_REDUCE || op->code == LM_OP_SORT || op->code == LM_OP_CHLO_TOP_K || op->code == LM_OP_SCATTER;
  if (!op->nout || (op->nout != 1 && !multi) || op->nout > 4 || op->nin > 8 || op->code == LM_OP_UNKNOWN) return;
  const lm_type *rt = vtype(P, op->out[0]);
  if (rt->kind != LM_TYPE_TENSOR) return;
  int rrank = rt->rank;
  for (uint32_t j = 1; j < op->nout; j++) { /* results of one shape share one sharding */
    const lm_type *t = vtype(P, op->out[j]);
    if (t->kind != LM_TYPE_TENSOR || t->rank != rrank) return;
    for (int d = 0; d < rrank; d++)
      if (t->dims[d] != rt->dims[d]) return;
  }
  r->nres = op->nout;
  for (uint32_t i = 0; i < op->nin; i++)
    if (vtype(P, op->in[i])->kind != LM_TYPE_TENSOR) return;
  int64_t v[LM_MAX_RANK], w[LM_MAX_RANK];
  if (elementwise(op->code)) {
    for (uint32_t i = 0; i < op->nin; i++) {
      const lm_type *t = vtype(P, op->in[i]);
      if (t->rank == 0) continue;
      if (t->rank != rrank) return;
      for (int d = 0; d < rrank; d++) {
        if (t->dims[d] != rt->dims[d]) return;
        r->map[i][d] = (int8_t)d;
      }
    }
    for (int d = 0; d < rrank; d++) r->prod[d] = true;
    r->kind = R_MAP;
    return;
  }
  switch (op->code) {
    case LM_OP_SDY_SHARDING_CONSTRAINT:
    case LM_OP_SDY_RESHARD:
      if (op->nin == 1) r->kind = R_IDENT;
      return;
    case LM_OP_CONSTANT:
      r->kind = R_CONST;
      return;
    case LM_OP_IOTA:
      for (int d = 0; d < rrank; d++) r->prod[d] = true;
      r->kind = R_IOTA;
      return;
    case LM_OP_BROADCAST_IN_DIM: {
      const lm_type *t = vtype(P, op->in[0]);
      int n = ints(op, "broadcast_dimensions", v, LM_MAX_RANK);
      if (n != t->rank) return;
      for (int i = 0; i < n; i++)
        if (v[i] >= 0 && v[i] < rrank && t->dims[i] == rt->dims[v[i]]) r->map[0][i] = (int8_t)v[i];
      for (int d = 0; d < rrank; d++) r->prod[d] = true;
      r->kind = R_MAP;
      return;
    }
    case LM_OP_TRANSPOSE: {
      int n = ints(op, "permutation", v, LM_MAX_RANK);
      if (n != rrank) return;
      for (int j = 0; j < n; j++) {
        if (v[j] < 0 || v[j] >= n) return;
        r->map[0][v[j]] = (int8_t)j;
        r->prod[j] = true;
      }
      r->kind = R_MAP;
      return;
    }
    case LM_OP_RESHAPE: {
      /* groups of dims with equal products; the major dim of each group keeps its sharding */
      const lm_type *t = vtype(P, op->in[0]);
      int i = 0, j = 0;
      while (i < t->rank && j < rrank) {
        int i0 = i, j0 = j;
        int64_t a = t->dims[i++], b = rt->dims[j++];
        while (a != b) {
          if (a < b && i < t->rank) a *= t->dims[i++];
          else if (b < a && j < rrank) b *= rt->dims[j++];
          else return;
        }
        /* the major dims of the group (size-1 dims skipped) keep the split, when it divides both */
        while (i0 + 1 < i && t->dims[i0] == 1) i0++;
        while (j0 + 1 < j && rt->dims[j0] == 1) j0++;
        r->map[0][i0] = (int8_t)j0;
        r->prod[j0] = true;
        r->need[j0] = t->dims[i0];
      }
      r->kind = R_MAP;
      return;
    }
    case LM_OP_DOT_GENERAL: {
      const lm_attr *dn = lm_op_attr(op, "dot_dimension_numbers");
      int64_t lb[LM_MAX_RANK], rb[LM_MAX_RANK], lc[LM_MAX_RANK], rc[LM_MAX_RANK];
      int nlb = lm_attr_ints(lm_sp_field(dn, "lhs_batching_dimensions"), lb, LM_MAX_RANK);
      int nrb = lm_attr_ints(lm_sp_field(dn, "rhs_batching_dimensions"), rb, LM_MAX_RANK);
      int nlc = lm_attr_ints(lm_sp_field(dn, "lhs_contracting_dimensions"), lc, LM_MAX_RANK);
      int nrc = lm_attr_ints(lm_sp_field(dn, "rhs_contracting_dimensions"), rc, LM_MAX_RANK);
      if (!dn || nlb < 0 || nrb != nlb || nlc < 0 || nrc != nlc || op->nin != 2) return;
      const lm_type *lt = vtype(P, op->in[0]), *rt2 = vtype(P, op->in[1]);
      bool used_l[LM_MAX_RANK] = {0}, used_r[LM_MAX_RANK] = {0};
      int o = 0;
      for (int k = 0; k < nlb; k++) {
        if (lb[k] < 0 || lb[k] >= lt->rank || rb[k] < 0 || rb[k] >= rt2->rank) return;
        r->map[0][lb[k]] = r->map[1][rb[k]] = (int8_t)o++;
        used_l[lb[k]] = used_r[rb[k]] = true;
      }
      for (int k = 0; k < nlc; k++) {
        if (lc[k] < 0 || lc[k] >= lt->rank || rc[k] < 0 || rc[k] >= rt2->rank) return;
        used_l[lc[k]] = used_r[rc[k]] = true;
        r->lc[k] = (int)lc[k];
        r->rc[k] = (int)rc[k];
      }
      r->ncontract = nlc;
      for (int d = 0; d < lt->rank; d++)
        if (!used_l[d]) r->map[0][d] = (int8_t)o++;
      for (int d = 0; d < rt2->rank; d++)
        if (!used_r[d]) r->map[1][d] = (int8_t)o++;
      if (o != rrank) return;
      for (int d = 0; d < rrank; d++) r->prod[d] = true;
      r->red = RED_ADD;
      r->kind = R_DOT;
      return;
    }
    case LM_OP_REDUCE: {
      /* nred inputs of one shape reduced together, then their nred init values */
      uint32_t nred = op->nout;
      if (op->nin != 2 * nred) return;
      const lm_type *t = vtype(P, op->in[0]);
      for (uint32_t i = 1; i < 2 * nred; i++) {
        const lm_type *u = vtype(P, op->in[i]);
        if (i >= nred ? u->rank != 0 : (u->rank != t->rank || memcmp(u->dims, t->dims, sizeof(int64_t) * (size_t)t->rank)))
          return;
      }
      int n = ints(op, "dimensions", v, LM_MAX_RANK);
      if (n < 0) return;
      bool red[LM_MAX_RANK] = {0};
      for (int k = 0; k < n; k++) {
        if (v[k] < 0 || v[k] >= t->rank) return;
        red[v[k]] = true;
        r->lc[k] = (int)v[k];
      }
      int o = 0;
      for (int d = 0; d < t->rank; d++)
        if (!red[d]) {
          for (uint32_t i = 0; i < nred; i++) r->map[i][d] = (int8_t)o;
          o++;
        }
      if (o != rrank) return;
      for (int d = 0; d < rrank; d++) r->prod[d] = true;
      r->ncontract = n;
      r->nred_in = nred;
      if (nred == 1) {
        r->red = body_kind(op, 0);
        if (r->red != RED_NONE && !is_identity(P, op->in[1], r->red)) r->red = RED_NONE;
      } else {
        /* each shard reduces its part from the init values, which the reduction's semantics
         * require to be the body's identity (applied any number of times); constants here */
        r->gen = rrank + 1 <= LM_MAX_RANK && op->nregions == 1;
        for (uint32_t i = nred; i < 2 * nred; i++)
          r->gen = r->gen && P->def[op->in[i]] && P->def[op->in[i]]->code == LM_OP_CONSTANT;
      }
      r->kind = R_REDUCE;
      return;
    }
    case LM_OP_SLICE: {
      const lm_type *t = vtype(P, op->in[0]);
      int n1 = ints(op, "start_indices", v, LM_MAX_RANK), n2 = ints(op, "limit_indices", w, LM_MAX_RANK);
      int64_t st[LM_MAX_RANK];
      int n3 = ints(op, "strides", st, LM_MAX_RANK);
      if (n1 != t->rank || n2 != t->rank || (n3 >= 0 && n3 != t->rank)) return;
      for (int d = 0; d < t->rank; d++)
        if (v[d] == 0 && w[d] == t->dims[d] && (n3 < 0 || st[d] == 1)) {
          r->map[0][d] = (int8_t)d;
          r->prod[d] = true;
        }
      r->kind = R_SLICE;
      return;
    }
    case LM_OP_DYNAMIC_SLICE: {
      const lm_type *t = vtype(P, op->in[0]);
      int n = ints(op, "slice_sizes", v, LM_MAX_RANK);
      if (n != t->rank) return;
      for (int d = 0; d < t->rank; d++)
        if (v[d] == t->dims[d]) {
          r->map[0][d] = (int8_t)d;
          r->prod[d] = true;
        }
      r->kind = R_DSLICE;
      return;
    }
    case LM_OP_DYNAMIC_UPDATE_SLICE: {
      /* dims the update covers whole keep their split (their start index is 0) */
      const lm_type *t = vtype(P, op->in[0]), *u = vtype(P, op->in[1]);
      if (op->nin < 2 || t->rank != rrank || u->rank != rrank || op->nin != (uint32_t)rrank + 2) return;
      for (int d = 0; d < rrank; d++)
        if (u->dims[d] == t->dims[d]) {
          r->map[0][d] = r->map[1][d] = (int8_t)d;
          r->prod[d] = true;
        }
      r->kind = R_DUS;
      return;
    }
    case LM_OP_CONCATENATE: {
      int64_t cd = lm_attr_int_or(lm_op_attr(op, "dimension"), -1);
      for (uint32_t i = 0; i < op->nin; i++)
        for (int d = 0; d < rrank; d++)
          if (d != cd) r->map[i][d] = (int8_t)d;
      for (int d = 0; d < rrank; d++) r->prod[d] = d != cd;
      r->kind = R_MAP;
      return;
    }
    case LM_OP_PAD: {
      int64_t lo[LM_MAX_RANK], hi[LM_MAX_RANK], in[LM_MAX_RANK];
      if (ints(op, "edge_padding_low", lo, LM_MAX_RANK) != rrank || ints(op, "edge_padding_high", hi, LM_MAX_RANK) != rrank ||
          ints(op, "interior_padding", in, LM_MAX_RANK) != rrank)
        return;
      for (int d = 0; d < rrank; d++)
        if (!lo[d] && !hi[d] && !in[d]) {
          r->map[0][d] = (int8_t)d;
          r->prod[d] = true;
        }
      r->kind = R_MAP;
      return;
    }
    case LM_OP_REDUCE_WINDOW: {
      /* dims the window leaves alone (size 1, stride 1, no padding or dilation) keep their split */
      if (op->nin != 2) return;
      int64_t wd[LM_MAX_RANK], ws[LM_MAX_RANK], bd[LM_MAX_RANK], wdl[LM_MAX_RANK], pad[2 * LM_MAX_RANK];
      if (ints(op, "window_dimensions", wd, LM_MAX_RANK) != rrank) return;
      int nws = ints(op, "window_strides", ws, LM_MAX_RANK), nbd = ints(op, "base_dilations", bd, LM_MAX_RANK);
      int nwd = ints(op, "window_dilations", wdl, LM_MAX_RANK), np = ints(op, "padding", pad, 2 * LM_MAX_RANK);
      if ((nws >= 0 && nws != rrank) || (nbd >= 0 && nbd != rrank) || (nwd >= 0 && nwd != rrank) ||
          (np >= 0 && np != 2 * rrank) || vtype(P, op->in[0])->rank != rrank)
        return;
      for (int d = 0; d < rrank; d++)
        if (wd[d] == 1 && (nws < 0 || ws[d] == 1) && (nbd < 0 || bd[d] == 1) && (nwd < 0 || wdl[d] == 1) &&
            (np < 0 || (pad[2 * d] == 0 && pad[2 * d + 1] == 0))) {
          r->map[0][d] = (int8_t)d;
          r->prod[d] = true;
        }
      r->kind = R_MAP;
      return;
    }
    case LM_OP_SORT:
    case LM_OP_CHLO_TOP_K: {
      /* operands of one shape sorted along `dimension` (top_k: the last): the other dims keep
       * their split; a split sorted dim is gathered first */
      bool tk = op->code == LM_OP_CHLO_TOP_K;
      if (tk ? op->nin != 1 || op->nout != 2 : op->nin != op->nout) return;
      int64_t sd = tk ? rrank - 1 : lm_attr_int_or(lm_op_attr(op, "dimension"), -1);
      if (sd < 0) sd += rrank;
      if (sd < 0 || sd >= rrank) return;
      for (uint32_t i = 0; i < op->nin; i++) {
        const lm_type *t = vtype(P, op->in[i]);
        if (t->rank != rrank) return;
        for (int d = 0; d < rrank; d++) {
          if (d == sd) continue;
          if (t->dims[d] != rt->dims[d]) return;
          r->map[i][d] = (int8_t)d;
          r->prod[d] = true;
        }
      }
      r->sort_dim = (int)sd;
      r->kind = R_MAP;
      return;
    }
    case LM_OP_CONVOLUTION: {
      /* the batch dim (lhs -> result) and the output features (kernel -> result) keep their split
       * when no grouping ties them to other dims */
      const lm_attr *dn = lm_op_attr(op, "dimension_numbers");
      if (op->nin != 2 || !dn || lm_attr_int_or(lm_op_attr(op, "feature_group_count"), 1) != 1 ||
          lm_attr_int_or(lm_op_attr(op, "batch_group_count"), 1) != 1)
        return;
      int64_t ib = lm_attr_int_or(lm_sp_field(dn, "input_batch_dimension"), -1);
      int64_t ko = lm_attr_int_or(lm_sp_field(dn, "kernel_output_feature_dimension"), -1);
      int64_t ob = lm_attr_int_or(lm_sp_field(dn, "output_batch_dimension"), -1);
      int64_t of = lm_attr_int_or(lm_sp_field(dn, "output_feature_dimension"), -1);
      const lm_type *lt = vtype(P, op->in[0]), *kt = vtype(P, op->in[1]);
      if (ib < 0 || ib >= lt->rank || ko < 0 || ko >= kt->rank || ob < 0 || ob >= rrank || of < 0 || of >= rrank ||
          lt->dims[ib] != rt->dims[ob] || kt->dims[ko] != rt->dims[of])
        return;
      r->map[0][ib] = (int8_t)ob;
      r->map[1][ko] = (int8_t)of;
      r->prod[ob] = r->prod[of] = true;
      r->kind = R_MAP;
      return;
    }
    case LM_OP_SELECT_AND_SCATTER: {
      /* dims the window leaves alone keep their split in operand, source and result */
      if (op->nin != 3 || vtype(P, op->in[0])->rank != rrank || vtype(P, op->in[1])->rank != rrank) return;
      int64_t wd[LM_MAX_RANK], ws[LM_MAX_RANK], pad[2 * LM_MAX_RANK];
      int nwd = ints(op, "window_dimensions", wd, LM_MAX_RANK), nws = ints(op, "window_strides", ws, LM_MAX_RANK);
      int np = ints(op, "padding", pad, 2 * LM_MAX_RANK);
      if ((nwd >= 0 && nwd != rrank) || (nws >= 0 && nws != rrank) || (np >= 0 && np != 2 * rrank)) return;
      for (int d = 0; d < rrank; d++)
        if ((nwd < 0 || wd[d] == 1) && (nws < 0 || ws[d] == 1) && (np < 0 || (pad[2 * d] == 0 && pad[2 * d + 1] == 0)) &&
            vtype(P, op->in[1])->dims[d] == rt->dims[d]) {
          r->map[0][d] = r->map[1][d] = (int8_t)d;
          r->prod[d] = true;
        }
      r->kind = R_MAP;
      return;
    }
    case LM_OP_GATHER:
    case LM_OP_SCATTER: {
      /* Operand dims sliced whole and not indexed (offset / window dims that pass through) keep
       * their split, as do the indices' batch dims (gather); the index vectors stay whole. A
       * scatter has nsc inputs of one shape, the indices, then nsc updates of one shape (up to
       * 3 of each: variadic scatter), and nsc results. */
      bool sc = op->code == LM_OP_SCATTER;
      uint32_t nsc = sc ? op->nout : 1;
      if (op->nin != (sc ? 2 * nsc + 1 : 2u) || (sc && nsc > 3)) return;
      for (uint32_t k = 1; sc && k < nsc; k++) {
        const lm_type *a = vtype(P, op->in[0]), *b = vtype(P, op->in[k]);
        const lm_type *ua = vtype(P, op->in[nsc + 1]), *ub = vtype(P, op->in[nsc + 1 + k]);
        if (a->rank != b->rank || memcmp(a->dims, b->dims, sizeof(int64_t) * (size_t)a->rank) || ua->rank != ub->rank ||
            memcmp(ua->dims, ub->dims, sizeof(int64_t) * (size_t)ua->rank))
          return;
      }
      const lm_attr *dn = lm_op_attr(op, sc ? "scatter_dimension_numbers" : "dimension_numbers");
      int64_t off[LM_MAX_RANK], coll[LM_MAX_RANK], obat[LM_MAX_RANK], ibat[LM_MAX_RANK], smap[LM_MAX_RANK];
      int noff = lm_attr_ints(lm_sp_field(dn, sc ? "update_window_dims" : "offset_dims"), off, LM_MAX_RANK);
      int ncoll = lm_attr_ints(lm_sp_field(dn, sc ? "inserted_window_dims" : "collapsed_slice_dims"), coll, LM_MAX_RANK);
      int nobat = lm_attr_ints(lm_sp_field(dn, sc ? "input_batching_dims" : "operand_batching_dims"), obat, LM_MAX_RANK);
      int nibat = lm_attr_ints(lm_sp_field(dn, sc ? "scatter_indices_batching_dims" : "start_indices_batching_dims"),
                               ibat, LM_MAX_RANK);
      int nmap = lm_attr_ints(lm_sp_field(dn, sc ? "scatter_dims_to_operand_dims" : "start_index_map"), smap, LM_MAX_RANK);
      const lm_attr *iva = lm_sp_field(dn, "index_vector_dim");
      int64_t ivd = iva ? lm_attr_int_or(iva, -1) : 0;
      const lm_type *ot = vtype(P, op->in[0]), *it = vtype(P, op->in[sc ? nsc : 1]);
      if (!dn) return;
      if (noff < 0) noff = 0;
      if (ncoll < 0) ncoll = 0;
      if (nobat < 0) nobat = 0;
      if (nibat < 0) nibat = 0;
      if (nmap < 0) nmap = 0;
      if (noff + ncoll + nobat != ot->rank || (!sc && ot->rank > LM_MAX_RANK)) return;
      int64_t ss[LM_MAX_RANK];
      if (!sc && ints(op, "slice_sizes", ss, LM_MAX_RANK) != ot->rank) return;
      const lm_type *ut = sc ? vtype(P, op->in[nsc + 1]) : rt; /* where the window dims are */
      int k = 0;
      for (int d = 0; d < ot->rank; d++) {
        bool skip = false;
        for (int j = 0; j < ncoll; j++) skip = skip || coll[j] == d;
        for (int j = 0; j < nobat; j++) skip = skip || obat[j] == d;
        if (skip) continue;
        int64_t wdim = off[k++];
        bool indexed = false;
        for (int j = 0; j < nmap; j++) indexed = indexed || smap[j] == d;
        if (indexed || wdim < 0 || wdim >= ut->rank || ut->dims[wdim] != ot->dims[d] || (!sc && ss[d] != ot->dims[d]))
          continue;
        for (uint32_t k = 0; k < nsc; k++) {
          r->map[k][d] = (int8_t)(sc ? d : wdim);
          if (sc) r->map[nsc + 1 + k][wdim] = (int8_t)d;
        }
        r->prod[sc ? d : wdim] = true;
      }
      if (!sc) { /* the indices' batch dims -> the result's non-offset dims, in order */
        int o = 0;
        for (int i = 0; i < it->rank; i++) {
          if (i == ivd) continue;
          while (o < rrank) {
            bool isoff = false;
            for (int j = 0; j < noff; j++) isoff = isoff || off[j] == o;
            if (!isoff) break;
            o++;
          }
          if (o >= rrank) return;
          bool ib = false;
          for (int j = 0; j < nibat; j++) ib = ib || ibat[j] == i;
          if (!ib && it->dims[i] == rt->dims[o]) {
            r->map[1][i] = (int8_t)o;
            r->prod[o] = true;
          }
          o++;
        }
      }
      r->kind = sc ? R_MAP : R_GATHER;
      return;
    }
    case LM_OP_REVERSE: {
      int n = ints(op, "dimensions", v, LM_MAX_RANK);
      if (n < 0) return;
      for (int d = 0; d < rrank; d++) {
        bool rev = false;
        for (int k = 0; k < n; k++) rev = rev || v[k] == d;
        if (!rev) {
          r->map[0][d] = (int8_t)d;
          r->prod[d] = true;
        }
      }
      r->kind = R_MAP;
      return;
    }
    default:
      return;
  }
}

/* The part of result sharding R the op can compute directly (dims it can split, each split
 * dividing what the rule needs), minus the axes in `minus`. */
static void producible(const pt *P, const rule *r, const lm_type *rt, const vsh *R, uint32_t minus, vsh *A) {
  vsh_clear(A);
  for (int d = 0; d < rt->rank; d++) {
    if (!r->prod[d]) continue;
    int n = vsh_nax(R, d);
    bool ok = true;
    for (int j = 0; j < n; j++)
      if (minus & (1u << R->ax[d][j])) ok = false;
    int64_t k = vsh_parts(P, R, d);
    /* a reshape's dim may split unevenly (padded) only where its operand dim has its size */
    bool same = !r->need[d] || r->need[d] == rt->dims[d];
    if (!ok || (!same && (rt->dims[d] % k || r->need[d] % k))) continue;
    memcpy(A->ax[d], R->ax[d], NA);
  }
}

/* Sort / top_k with operand 0 split along the sorted dim over axes X: appends X to the split of
 * another dim of A (one that splits evenly that far), so that the operands reach A by an
 * all_to_all instead of a gather and each device sorts whole rows. False when none fits. */
static bool sort_move(const pt *P, const rule *r, const lm_type *rt, uint32_t in0, vsh *A) {
  int sd = r->sort_dim;
  const vsh *S = &P->ch[in0];
  int nx = vsh_nax(S, sd);
  if (sd < 0 || !nx || (dim_mask(S, sd) & vsh_used(A, rt->rank)) || uneven(P, S, vtype(P, in0), sd)) return false;
  for (int d = 0; d < rt->rank; d++) {
    int n = vsh_nax(A, d);
    if (d == sd || !r->prod[d] || n + nx > NA || rt->dims[d] % (vsh_parts(P, A, d) * vsh_parts(P, S, sd))) continue;
    memcpy(&A->ax[d][n], S->ax[sd], (size_t)nx);
    return true;
  }
  return false;
}

/* The sharding operand i (type t) needs to compute result sharding A (result type rt). A dim
 * keeps an uneven split (padded alike) only where it has its result dim's size. */
static void operand_need(const pt *P, const rule *r, uint32_t i, const lm_type *t, const lm_type *rt, const vsh *A,
                         vsh *O) {
  vsh_clear(O);
  if (i >= 8) return;
  for (int d = 0; d < t->rank; d++) {
    int rd = r->map[i][d];
    if (rd < 0) continue;
    int64_t k = vsh_parts(P, A, rd);
    if ((t->dims[d] % k || rt->dims[rd] % k) && t->dims[d] != rt->dims[rd]) continue;
    memcpy(O->ax[d], A->ax[rd], NA);
  }
}

/* ---- while loops: partitioned like straight-line code, their carried values keeping one
 * sharding through the loop ---- */

/* A while the partitioner rewrites: cond and body of one block each, taking the carried values,
 * cond returning one value and body as many as it carries. */
static bool while_ok(const lm_op *op) {
  if (op->code != LM_OP_WHILE || op->nin != op->nout || !op->nin || op->nregions != 2 || op->nin > 4096) return false;
  for (int r = 0; r < 2; r++) {
    if (op->regions[r].nblocks != 1) return false;
    const lm_block *b = &op->regions[r].blocks[0];
    if (b->nargs != op->nin || !b->nops) return false;
    const lm_op *ret = &b->ops[b->nops - 1];
    if (ret->code != LM_OP_RETURN || ret->nin != (r == 0 ? 1 : op->nin)) return false;
  }
  return true;
}

/* A case / if the partitioner rewrites: branches of one block each without arguments (they use
 * values from above), each returning the op's results; the branch index or predicate a scalar. */
static bool case_ok(const lm_op *op) {
  if ((op->code != LM_OP_CASE && op->code != LM_OP_IF) || op->nin != 1 || !op->nregions || !op->nout) return false;
  for (uint32_t r = 0; r < op->nregions; r++) {
    if (op->regions[r].nblocks != 1) return false;
    const lm_block *b = &op->regions[r].blocks[0];
    if (b->nargs || !b->nops) return false;
    const lm_op *ret = &b->ops[b->nops - 1];
    if (ret->code != LM_OP_RETURN || ret->nin != op->nout) return false;
  }
  return true;
}

/* Marks the values the partitioner rewrites (P->top) and their defining ops: a block's, and
 * those inside the while loops it rewrites. */
static void mark_block(pt *P, const lm_block *b, int depth) {
  for (uint32_t a = 0; a < b->nargs; a++) P->top[b->args[a]] = 1;
  for (uint32_t k = 0; k < b->nops; k++) {
    const lm_op *op = &b->ops[k];
    for (uint32_t j = 0; j < op->nout; j++) {
      P->top[op->out[j]] = 1;
      P->def[op->out[j]] = op;
    }
    if (depth < 32 && (while_ok(op) || case_ok(op))) {
      P->rw[op->out[0]] = 1;
      for (uint32_t r = 0; r < op->nregions; r++) mark_block(P, &op->regions[r].blocks[0], depth + 1);
    }
  }
}

/* ---- propagation ---- */

static bool set_if_new(pt *P, uint32_t v, vsh *s) {
  if (P->known[v] || !P->top[v]) return false;
  vsh_fit(P, s, vtype(P, v), NULL, false);
  if (vsh_is_repl(s, vrank(P, v))) return false;
  P->ch[v] = *s;
  P->known[v] = 1;
  return true;
}

static bool prop_block(pt *P, const lm_block *b);

static bool prop_op(pt *P, const lm_op *op, bool fwd) {
  if (while_ok(op) && P->rw[op->out[0]]) {
    /* operand i, cond's and body's argument i, body's result i and result i share a sharding */
    const lm_block *cb = &op->regions[0].blocks[0], *bb = &op->regions[1].blocks[0];
    const lm_op *bret = &bb->ops[bb->nops - 1];
    bool changed = false;
    for (uint32_t i = 0; i < op->nin; i++) {
      uint32_t g[5] = {op->in[i], cb->args[i], bb->args[i], bret->in[i], op->out[i]};
      int from = -1;
      for (int k = 0; k < 5 && from < 0; k++) {
        int j = fwd ? k : 4 - k;
        if (P->known[g[j]]) from = j;
      }
      if (from < 0) continue;
      for (int k = 0; k < 5; k++)
        if (!P->known[g[k]]) {
          vsh s2 = P->ch[g[from]];
          changed |= set_if_new(P, g[k], &s2);
        }
    }
    changed |= prop_block(P, bb);
    changed |= prop_block(P, cb);
    return changed;
  }
  if (case_ok(op) && P->rw[op->out[0]]) {
    /* result i and every branch's result i share a sharding */
    bool changed = false;
    for (uint32_t i = 0; i < op->nout; i++) {
      uint32_t v = op->out[i];
      for (uint32_t r = 0; r < op->nregions; r++) {
        const lm_block *b = &op->regions[r].blocks[0];
        uint32_t u = b->ops[b->nops - 1].in[i];
        uint32_t a = fwd ? u : v, c = fwd ? v : u;
        if (P->known[a] && !P->known[c]) {
          vsh s2 = P->ch[a];
          changed |= set_if_new(P, c, &s2);
        }
      }
    }
    for (uint32_t r = 0; r < op->nregions; r++) changed |= prop_block(P, &op->regions[r].blocks[0]);
    return changed;
  }
  if (op->code == LM_OP_OPTIMIZATION_BARRIER && op->nin == op->nout) { /* result i is operand i */
    bool changed = false;
    for (uint32_t i = 0; i < op->nin; i++) {
      uint32_t a = fwd ? op->in[i] : op->out[i], b = fwd ? op->out[i] : op->in[i];
      if (P->known[a] && !P->known[b]) {
        vsh s = P->ch[a];
        changed |= set_if_new(P, b, &s);
      }
    }
    return changed;
  }
  rule r;
  op_rule(P, op, &r);
  bool changed = false;
  if (r.kind == R_IDENT) {
    if (op->nin == 1 && op->nout == 1 && !P->known[op->in[0]] && P->known[op->out[0]]) {
      vsh s = P->ch[op->out[0]];
      changed |= set_if_new(P, op->in[0], &s);
    }
    return changed;
  }
  if (r.kind == R_FALLBACK || r.kind == R_CONST || r.kind == R_IOTA) return false;
  uint32_t out = op->out[0];
  const lm_type *rt = vtype(P, out);
  if (r.nres > 1) { /* results of one shape share a sharding: an unknown one takes a known one's */
    int kj = -1;
    for (uint32_t j = 0; j < r.nres && kj < 0; j++)
      if (P->known[op->out[j]]) kj = (int)j;
    if (kj >= 0) {
      for (uint32_t j = 0; j < r.nres; j++) {
        vsh s2 = P->ch[op->out[kj]];
        changed |= set_if_new(P, op->out[j], &s2);
      }
      out = op->out[kj];
    }
  }
  if (fwd && (r.nred_in > 1 || (r.sort_dim >= 0 && op->nin > 1))) {
    /* inputs reduced or sorted together take each other's split (the iota of an argmax or an
     * argsort is then made split, with its global offsets, instead of whole) */
    uint32_t n = r.nred_in > 1 ? r.nred_in : op->nin;
    for (uint32_t i = 0; i < n; i++) {
      if (!P->known[op->in[i]]) continue;
      for (uint32_t k = 0; k < n; k++) {
        vsh s2 = P->ch[op->in[i]];
        changed |= set_if_new(P, op->in[k], &s2);
      }
      break;
    }
  }
  if (fwd && r.kind == R_DOT) { /* an operand takes the other's split of contracting dims */
    for (int i = 0; i < 2; i++) {
      uint32_t v = op->in[i], other = op->in[1 - i];
      if (P->known[v] || !P->known[other]) continue;
      vsh O;
      vsh_clear(&O);
      uint32_t used = 0;
      for (int k = 0; k < r.ncontract; k++) {
        int my = i == 0 ? r.lc[k] : r.rc[k], their = i == 0 ? r.rc[k] : r.lc[k];
        uint32_t m = dim_mask(&P->ch[other], their);
        if (!m || (used & m)) continue;
        memcpy(O.ax[my], P->ch[other].ax[their], NA);
        used |= m;
      }
      changed |= set_if_new(P, v, &O);
    }
  }
  if (fwd && !P->known[out]) {
    vsh s;
    vsh_clear(&s);
    uint32_t used = 0;
    for (uint32_t i = 0; i < op->nin && i < 8; i++) {
      if (!P->known[op->in[i]]) continue;
      const vsh *o = &P->ch[op->in[i]];
      const lm_type *t = vtype(P, op->in[i]);
      for (int d = 0; d < t->rank; d++) {
        int rd = r.map[i][d];
        if (rd < 0 || !r.prod[rd] || s.ax[rd][0] >= 0 || o->ax[d][0] < 0) continue;
        uint32_t m = dim_mask(o, d);
        if (used & m) continue;
        int64_t k = vsh_parts(P, o, d);
        if (t->dims[d] != rt->dims[rd] && (rt->dims[rd] % k || (r.need[rd] && r.need[rd] % k))) continue;
        memcpy(s.ax[rd], o->ax[d], NA);
        used |= m;
      }
    }
    /* a sort along a split dim: its result split the all_to_all way (sort_move) */
    if (r.sort_dim >= 0 && P->known[op->in[0]]) sort_move(P, &r, rt, op->in[0], &s);
    for (uint32_t j = 0; j < r.nres; j++) {
      vsh s2 = s;
      changed |= set_if_new(P, op->out[j], &s2);
    }
  }
  if (!fwd && P->known[out]) {
    vsh A;
    producible(P, &r, rt, &P->ch[out], 0, &A);
    for (uint32_t i = 0; i < op->nin && i < 8; i++) {
      uint32_t v = op->in[i];
      if (P->known[v]) continue;
      vsh O;
      operand_need(P, &r, i, vtype(P, v), rt, &A, &O);
      /* dot: a contracting dim takes the other side's sharding */
      if (r.kind == R_DOT) {
        uint32_t other = op->in[1 - i];
        if (P->known[other]) {
          uint32_t used = vsh_used(&O, vtype(P, v)->rank);
          for (int k = 0; k < r.ncontract; k++) {
            int my = i == 0 ? r.lc[k] : r.rc[k], their = i == 0 ? r.rc[k] : r.lc[k];
            uint32_t m = dim_mask(&P->ch[other], their);
            if (!m || (used & m)) continue;
            memcpy(O.ax[my], P->ch[other].ax[their], NA);
            used |= m;
          }
        }
      }
      changed |= set_if_new(P, v, &O);
    }
  }
  return changed;
}

/* One forward and one backward pass over a block; true when a sharding was set. */
static bool prop_block(pt *P, const lm_block *b) {
  bool changed = false;
  for (uint32_t k = 0; k < b->nops; k++) changed |= prop_op(P, &b->ops[k], true);
  for (uint32_t k = b->nops; k-- > 0;) changed |= prop_op(P, &b->ops[k], false);
  return changed;
}

static void propagate(pt *P, const lm_block *body) {
  for (int iter = 0; iter < 64; iter++)
    if (!prop_block(P, body)) break;
}

/* ---- emission ---- */

static uint32_t nid(pt *P) { return P->nid++; }

/* The replica groups of a collective over mesh axes `axes` (in that order): one group per
 * position of the other axes, members ordered row-major over `axes`. */
static void put_groups(pt *P, const int8_t *axes, int nax, int64_t *gsize) {
  int64_t n = 1;
  for (int j = 0; j < nax; j++) n *= P->ms.sizes[axes[j]];
  int64_t ng = P->ms.ndev / n;
  *gsize = n;
  uint32_t *g = calloc((size_t)P->ms.ndev, sizeof *g);
  if (!g) {
    P->out.oom = true;
    return;
  }
  int64_t coord[NA];
  for (int64_t pos = 0; pos < P->ms.ndev; pos++) {
    int64_t x = pos;
    for (int a = P->ms.rank - 1; a >= 0; a--) {
      coord[a] = x % P->ms.sizes[a];
      x /= P->ms.sizes[a];
    }
    int64_t wi = 0, gi = 0;
    for (int j = 0; j < nax; j++) wi = wi * P->ms.sizes[axes[j]] + coord[axes[j]];
    for (int a = 0; a < P->ms.rank; a++) {
      bool in = false;
      for (int j = 0; j < nax; j++) in = in || axes[j] == a;
      if (!in) gi = gi * P->ms.sizes[a] + coord[a];
    }
    g[gi * n + wi] = P->mesh_procs[pos];
  }
  lm_tb_put(&P->out, "replica_groups = dense<[");
  for (int64_t i = 0; i < ng; i++) {
    lm_tb_put(&P->out, "%s[", i ? ", " : "");
    for (int64_t j = 0; j < n; j++) lm_tb_put(&P->out, "%s%u", j ? ", " : "", g[i * n + j]);
    lm_tb_put(&P->out, "]");
  }
  lm_tb_put(&P->out, "]> : tensor<%lldx%lldxi64>, channel_handle = #stablehlo.channel_handle<handle = %u, type = 1>, "
                     "use_global_device_ids",
            (long long)ng, (long long)n, ++P->channel);
  free(g);
}

static void put_region(pt *P, red_kind k, lm_dtype dt) {
  uint32_t a = nid(P), b = nid(P), c = nid(P);
  const char *t = lm_dtype_name(dt);
  lm_tb_put(&P->out, " ({\n    ^bb0(%%p%u: tensor<%s>, %%p%u: tensor<%s>):\n", a, t, b, t);
  lm_tb_put(&P->out, "      %%p%u = \"%s\"(%%p%u, %%p%u) : (tensor<%s>, tensor<%s>) -> tensor<%s>\n", c, red_op[k], a, b, t,
            t, t);
  lm_tb_put(&P->out, "      \"stablehlo.return\"(%%p%u) : (tensor<%s>) -> ()\n  })", c, t);
}

static void note_bytes(pt *P, double per_dev) {
  double total = per_dev * (double)P->ms.ndev;
  P->bytes_total += total;
  P->ncoll++;
  lm_tb_put(&P->ex, ": %.0f bytes received per device, %.0f in all\n", per_dev, total);
}

/* The i32 process id (partition_id), emitted once. */
static uint32_t pid(pt *P) {
  if (P->pid < 0) {
    uint32_t u = nid(P);
    P->pid = nid(P);
    lm_tb_put(&P->out, "    %%p%u = \"stablehlo.partition_id\"() : () -> tensor<ui32>\n", u);
    lm_tb_put(&P->out, "    %%p%lld = \"stablehlo.convert\"(%%p%u) : (tensor<ui32>) -> tensor<i32>\n", (long long)P->pid, u);
  }
  return (uint32_t)P->pid;
}

static uint32_t zero(pt *P) {
  if (P->zero < 0) {
    P->zero = nid(P);
    lm_tb_put(&P->out, "    %%p%lld = \"stablehlo.constant\"() {value = dense<0> : tensor<i32>} : () -> tensor<i32>\n",
              (long long)P->zero);
  }
  return (uint32_t)P->zero;
}

/* Ends the constant table `table` (one i32 per process) whose values were just written and picks
 * this process's entry from it by partition_id `id` into `res` (through the slice `sl`). */
static uint32_t table_pick(pt *P, uint32_t id, uint32_t table, uint32_t sl, uint32_t res) {
  lm_tb_put(&P->out, "]> : tensor<%uxi32>} : () -> tensor<%uxi32>\n", P->nproc, P->nproc);
  lm_tb_put(&P->out,
            "    %%p%u = \"stablehlo.dynamic_slice\"(%%p%u, %%p%u) {slice_sizes = array<i64: 1>} : (tensor<%uxi32>, "
            "tensor<i32>) -> tensor<1xi32>\n",
            sl, table, id, P->nproc);
  lm_tb_put(&P->out, "    %%p%u = \"stablehlo.reshape\"(%%p%u) : (tensor<1xi32>) -> tensor<i32>\n", res, sl);
  return res;
}

/* This process's index along `axes` (row-major over them) times `scale`, as an i32 scalar. */
static uint32_t index_along(pt *P, const int8_t *axes, int nax, int64_t scale) {
  uint32_t id = pid(P);
  uint32_t table = nid(P), sl = nid(P), res = nid(P);
  lm_tb_put(&P->out, "    %%p%u = \"stablehlo.constant\"() {value = dense<[", table);
  for (uint32_t p = 0; p < P->nproc; p++) {
    int64_t pos = P->proc_pos[p], coord[NA], x = pos;
    for (int a = P->ms.rank - 1; a >= 0; a--) {
      coord[a] = x % P->ms.sizes[a];
      x /= P->ms.sizes[a];
    }
    int64_t idx = 0;
    for (int j = 0; j < nax; j++) idx = idx * P->ms.sizes[axes[j]] + coord[axes[j]];
    lm_tb_put(&P->out, "%s%lld", p ? ", " : "", (long long)(idx * scale));
  }
  return table_pick(P, id, table, sl, res);
}

static void put_axes_ex(pt *P, const int8_t *axes, int n) { put_axes(P, &P->ex, axes, n); }

/* vals[p] for this process p, as an i32 scalar (a constant table indexed by partition_id). */
static uint32_t proc_value(pt *P, const int64_t *vals) {
  uint32_t id = pid(P);
  uint32_t table = nid(P), sl = nid(P), res = nid(P);
  lm_tb_put(&P->out, "    %%p%u = \"stablehlo.constant\"() {value = dense<[", table);
  for (uint32_t p = 0; p < P->nproc; p++) lm_tb_put(&P->out, "%s%lld", p ? ", " : "", (long long)vals[p]);
  return table_pick(P, id, table, sl, res);
}

static void mesh_coord(const pt *P, int64_t pos, int64_t *coord) {
  for (int a = P->ms.rank - 1; a >= 0; a--) {
    coord[a] = pos % P->ms.sizes[a];
    pos /= P->ms.sizes[a];
  }
}

static int64_t coord_index(const pt *P, const int64_t *coord, const int8_t *axes, int nax) {
  int64_t idx = 0;
  for (int j = 0; j < nax; j++) idx = idx * P->ms.sizes[axes[j]] + coord[axes[j]];
  return idx;
}

static uint32_t pad_dim(pt *P, uint32_t id, lm_type *t, int d, int64_t n);

/* A plan to split dim d further, from C's split (axes A, blocks of b1) to T's (A then more
 * axes E, blocks of b2), where one of them is uneven so local slices do not line up: each
 * target block lies inside one source block, taken from the process that holds it (itself
 * where it can, else one of the processes along E holding that block, each sending once) by a
 * collective_permute. Per process p: src[p] the process it receives from (-1: none, or itself
 * when self[p]), send_off[p] / self_off[p] the offsets along d in its local block of what it
 * sends / keeps. False when some target block straddles two source blocks. */
typedef struct perm_plan {
  int64_t *src, *send_off, *self_off, *self;
  int64_t need; /* local length along d the slices reach (the block padded to it) */
  uint32_t npairs;
} perm_plan;

static void perm_free(perm_plan *pl) {
  free(pl->src);
  pl->src = NULL;
}

static bool perm_plan_make(pt *P, const lm_type *g, const vsh *C, const vsh *T, int d, perm_plan *pl) {
  memset(pl, 0, sizeof *pl);
  uint32_t np = P->nproc;
  int na = vsh_nax(C, d), nt = vsh_nax(T, d);
  int64_t n = g->dims[d], pc = vsh_parts(P, C, d), ptt = vsh_parts(P, T, d);
  int64_t b1 = (n + pc - 1) / pc, b2 = (n + ptt - 1) / ptt;
  if (!na || nt <= na || !is_prefix(C, d, T, d) || b2 <= 0) return false;
  int64_t *mem = calloc(5 * (size_t)np, sizeof *mem);
  if (!mem) return false;
  pl->src = mem;
  pl->send_off = mem + np;
  pl->self_off = mem + 2 * np;
  pl->self = mem + 3 * np;
  int64_t *sending = mem + 4 * np; /* 1 when process p already sends */
  pl->need = b1;
  for (uint32_t p = 0; p < np; p++) pl->src[p] = -1;
  int64_t coord[NA], sc[NA];
  for (uint32_t t = 0; t < np; t++) {
    mesh_coord(P, P->proc_pos[t], coord);
    int64_t j = coord_index(P, coord, T->ax[d], nt), lo = j * b2;
    if (lo >= n) continue; /* all padding: receives nothing (zeros) */
    int64_t hi = lo + b2 < n ? lo + b2 : n, i = lo / b1;
    if ((hi - 1) / b1 != i) {
      perm_free(pl);
      return false;
    }
    int64_t off = lo - i * b1;
    if (off + b2 > pl->need) pl->need = off + b2;
    if (coord_index(P, coord, C->ax[d], na) == i) {
      pl->self[t] = 1;
      pl->self_off[t] = off;
      continue;
    }
    /* a process along E (same coordinates elsewhere) holding block i, not sending yet */
    memcpy(sc, coord, sizeof sc);
    int64_t rest = i;
    for (int k = na - 1; k >= 0; k--) {
      sc[C->ax[d][k]] = rest % P->ms.sizes[C->ax[d][k]];
      rest /= P->ms.sizes[C->ax[d][k]];
    }
    int64_t ne = ptt / pc, found = -1;
    for (int64_t e = 0; e < ne && found < 0; e++) {
      int64_t x = e;
      for (int k = nt - 1; k >= na; k--) {
        sc[T->ax[d][k]] = x % P->ms.sizes[T->ax[d][k]];
        x /= P->ms.sizes[T->ax[d][k]];
      }
      int64_t pos = 0;
      for (int a = 0; a < P->ms.rank; a++) pos = pos * P->ms.sizes[a] + sc[a];
      uint32_t s = P->mesh_procs[pos];
      if (!sending[s]) found = s;
    }
    if (found < 0) {
      perm_free(pl);
      return false;
    }
    sending[found] = 1;
    pl->src[t] = found;
    pl->send_off[found] = off;
    pl->npairs++;
  }
  return true;
}

/* Carries out perm_plan_make's plan on local value id (local type *lt, dim d); *lt gets the
 * new local type. */
static uint32_t perm_apply(pt *P, uint32_t id, lm_type *lt, const lm_type *g, int d, int64_t b2, const perm_plan *pl,
                           const int8_t *axes, int nax, const char *what) {
  if (pl->need > lt->dims[d]) id = pad_dim(P, id, lt, d, pl->need);
  lm_type o = *lt;
  o.dims[d] = b2;
  bool anyself = false;
  for (uint32_t p = 0; p < P->nproc; p++) anyself |= pl->self[p] != 0;
  uint32_t offs[2] = {0, 0}, sl[2] = {0, 0};
  for (int w = 0; w < 2; w++) {
    if (w == 0 ? !pl->npairs : !anyself) continue;
    uint32_t off = proc_value(P, w == 0 ? pl->send_off : pl->self_off);
    offs[w] = off;
    sl[w] = nid(P);
    lm_tb_put(&P->out, "    %%p%u = \"stablehlo.dynamic_slice\"(%%p%u", sl[w], id);
    for (int e = 0; e < lt->rank; e++) lm_tb_put(&P->out, ", %%p%u", e == d ? off : zero(P));
    lm_tb_put(&P->out, ") {slice_sizes = array<i64");
    for (int e = 0; e < lt->rank; e++) lm_tb_put(&P->out, "%s %lld", e ? "," : ":", (long long)o.dims[e]);
    lm_tb_put(&P->out, ">} : (%s", ts(lt));
    for (int e = 0; e < lt->rank; e++) lm_tb_put(&P->out, ", tensor<i32>");
    lm_tb_put(&P->out, ") -> %s\n", ts(&o));
  }
  (void)offs;
  uint32_t res = anyself ? sl[1] : 0;
  if (pl->npairs) {
    uint32_t r = nid(P);
    lm_tb_put(&P->out, "    %%p%u = \"stablehlo.collective_permute\"(%%p%u) {source_target_pairs = dense<[", r, sl[0]);
    uint32_t k = 0;
    for (uint32_t t = 0; t < P->nproc; t++)
      if (pl->src[t] >= 0 && !pl->self[t])
        lm_tb_put(&P->out, "%s[%lld, %u]", k++ ? ", " : "", (long long)pl->src[t], t);
    lm_tb_put(&P->out, "]> : tensor<%ux2xi64>, channel_handle = #stablehlo.channel_handle<handle = %u, type = 1>} : (%s) -> %s\n",
              pl->npairs, ++P->channel, ts(&o), ts(&o));
    lm_tb_put(&P->ex, "    collective_permute %s dim %d into uneven shards over ", what, d);
    put_axes_ex(P, axes, nax);
    size_t es = lm_dtype_size((lm_dtype)g->dtype);
    note_bytes(P, (double)pl->npairs * (double)lm_type_numel(&o) * (double)es / (double)P->ms.ndev);
    res = r;
    if (anyself) { /* processes keeping their own block take the local slice instead */
      uint32_t flag = proc_value(P, pl->self), c0 = zero(P), pr = nid(P), bp = nid(P), se = nid(P);
      lm_type pt_ = o;
      pt_.dtype = LOOM_DTYPE_PRED;
      lm_tb_put(&P->out,
                "    %%p%u = \"stablehlo.compare\"(%%p%u, %%p%u) {comparison_direction = #stablehlo<comparison_direction NE>, "
                "compare_type = #stablehlo<comparison_type SIGNED>} : (tensor<i32>, tensor<i32>) -> tensor<i1>\n",
                pr, flag, c0);
      lm_tb_put(&P->out, "    %%p%u = \"stablehlo.broadcast_in_dim\"(%%p%u) {broadcast_dimensions = array<i64>} : "
                         "(tensor<i1>) -> %s\n",
                bp, pr, ts(&pt_));
      lm_tb_put(&P->out, "    %%p%u = \"stablehlo.select\"(%%p%u, %%p%u, %%p%u) : (%s, %s, %s) -> %s\n", se, bp, sl[1], r,
                ts(&pt_), ts(&o), ts(&o), ts(&o));
      res = se;
    }
  } else {
    lm_tb_put(&P->ex, "    local slice %s dim %d into uneven shards (no communication)\n", what, d);
  }
  *lt = o;
  return res;
}

/* A scalar constant of dtype dt: zero (or false). */
static uint32_t zero_of(pt *P, lm_dtype dt) {
  uint32_t r = nid(P);
  const char *v = lm_dtype_is_pred(dt) ? "false" : lm_dtype_is_complex(dt) ? "(0.000000e+00,0.000000e+00)"
                                                 : lm_dtype_is_float(dt) ? "0.000000e+00" : "0";
  lm_tb_put(&P->out, "    %%p%u = \"stablehlo.constant\"() {value = dense<%s> : tensor<%s>} : () -> tensor<%s>\n", r, v,
            lm_dtype_name(dt), lm_dtype_name(dt));
  return r;
}

/* Pads local value id (type *t) at the end of dim d to size n (zeros); *t gets the new type. */
static uint32_t pad_dim(pt *P, uint32_t id, lm_type *t, int d, int64_t n) {
  uint32_t z = zero_of(P, (lm_dtype)t->dtype), r = nid(P);
  lm_type o = *t;
  o.dims[d] = n;
  lm_tb_put(&P->out, "    %%p%u = \"stablehlo.pad\"(%%p%u, %%p%u) {edge_padding_low = array<i64", r, id, z);
  for (int e = 0; e < t->rank; e++) lm_tb_put(&P->out, "%s 0", e ? "," : ":");
  lm_tb_put(&P->out, ">, edge_padding_high = array<i64");
  for (int e = 0; e < t->rank; e++) lm_tb_put(&P->out, "%s %lld", e ? "," : ":", (long long)(e == d ? n - t->dims[d] : 0));
  lm_tb_put(&P->out, ">, interior_padding = array<i64");
  for (int e = 0; e < t->rank; e++) lm_tb_put(&P->out, "%s 0", e ? "," : ":");
  lm_tb_put(&P->out, ">} : (%s, tensor<%s>) -> %s\n", ts(t), lm_dtype_name((lm_dtype)t->dtype), ts(&o));
  *t = o;
  return r;
}

/* Keeps the first n elements of dim d of local value id (type *t); *t gets the new type. */
static uint32_t trim_dim(pt *P, uint32_t id, lm_type *t, int d, int64_t n) {
  uint32_t r = nid(P);
  lm_type o = *t;
  o.dims[d] = n;
  lm_tb_put(&P->out, "    %%p%u = \"stablehlo.slice\"(%%p%u) {start_indices = array<i64", r, id);
  for (int e = 0; e < t->rank; e++) lm_tb_put(&P->out, "%s 0", e ? "," : ":");
  lm_tb_put(&P->out, ">, limit_indices = array<i64");
  for (int e = 0; e < t->rank; e++) lm_tb_put(&P->out, "%s %lld", e ? "," : ":", (long long)o.dims[e]);
  lm_tb_put(&P->out, ">, strides = array<i64");
  for (int e = 0; e < t->rank; e++) lm_tb_put(&P->out, "%s 1", e ? "," : ":");
  lm_tb_put(&P->out, ">} : (%s) -> %s\n", ts(t), ts(&o));
  *t = o;
  return r;
}

/* Local value id (type lt, global type g, sharding S) with the padding of the dims in `dims`
 * (a bit per dim; those split unevenly) replaced by scalar `fill` (a local id of element type):
 * a mask from each dim's global index (iota plus this shard's offset) below the dim's size. */
static uint32_t mask_pad(pt *P, uint32_t id, const lm_type *lt, const lm_type *g, const vsh *S, uint32_t dims,
                         uint32_t fill) {
  lm_type it = *lt, pt_ = *lt;
  it.dtype = LOOM_DTYPE_S32;
  pt_.dtype = LOOM_DTYPE_PRED;
  int64_t pred = -1;
  for (int d = 0; d < g->rank; d++) {
    if (!(dims & (1u << d)) || !uneven(P, S, g, d)) continue;
    uint32_t io = nid(P), bo = nid(P), gi = nid(P), lim = nid(P), c = nid(P);
    uint32_t off = index_along(P, S->ax[d], vsh_nax(S, d), lt->dims[d]);
    lm_tb_put(&P->out, "    %%p%u = \"stablehlo.iota\"() {iota_dimension = %d : i64} : () -> %s\n", io, d, ts(&it));
    lm_tb_put(&P->out, "    %%p%u = \"stablehlo.broadcast_in_dim\"(%%p%u) {broadcast_dimensions = array<i64>} : "
                       "(tensor<i32>) -> %s\n",
              bo, off, ts(&it));
    lm_tb_put(&P->out, "    %%p%u = \"stablehlo.add\"(%%p%u, %%p%u) : (%s, %s) -> %s\n", gi, io, bo, ts(&it), ts(&it),
              ts(&it));
    lm_tb_put(&P->out, "    %%p%u = \"stablehlo.constant\"() {value = dense<%lld> : %s} : () -> %s\n", lim,
              (long long)g->dims[d], ts(&it), ts(&it));
    lm_tb_put(&P->out,
              "    %%p%u = \"stablehlo.compare\"(%%p%u, %%p%u) {comparison_direction = #stablehlo<comparison_direction LT>, "
              "compare_type = #stablehlo<comparison_type SIGNED>} : (%s, %s) -> %s\n",
              c, gi, lim, ts(&it), ts(&it), ts(&pt_));
    if (pred >= 0) {
      uint32_t a = nid(P);
      lm_tb_put(&P->out, "    %%p%u = \"stablehlo.and\"(%%p%lld, %%p%u) : (%s, %s) -> %s\n", a, (long long)pred, c,
                ts(&pt_), ts(&pt_), ts(&pt_));
      c = a;
    }
    pred = c;
  }
  if (pred < 0) return id;
  uint32_t fb = nid(P), r = nid(P);
  const char *dn = lm_dtype_name((lm_dtype)lt->dtype);
  lm_tb_put(&P->out, "    %%p%u = \"stablehlo.broadcast_in_dim\"(%%p%u) {broadcast_dimensions = array<i64>} : "
                     "(tensor<%s>) -> %s\n",
            fb, fill, dn, ts(lt));
  lm_tb_put(&P->out, "    %%p%u = \"stablehlo.select\"(%%p%lld, %%p%u, %%p%u) : (%s, %s, %s) -> %s\n", r, (long long)pred,
            id, fb, ts(&pt_), ts(lt), ts(lt), ts(lt));
  return r;
}

/* Reshards local value `id` (global type g) from S to T; returns the new local id. A dim split
 * unevenly (padded shards) is gathered whole (its padding cut off) before it splits another way,
 * and padded before a whole dim is sliced into uneven shards. */
static uint32_t reshard(pt *P, uint32_t id, const lm_type *g, const vsh *S, const vsh *T, const char *what) {
  if (g->kind != LM_TYPE_TENSOR) return id;
  int rank = g->rank;
  vsh C = *S;
  if (vsh_eq(&C, T, rank)) return id;
  size_t es = lm_dtype_size((lm_dtype)g->dtype);
  /* all_to_all: dim d gathered while another dim d2 splits further over the same axes (even
   * splits only) */
  for (int d = 0; d < rank; d++) {
    int n = vsh_nax(&C, d);
    if (!n || T->ax[d][0] >= 0 || uneven(P, &C, g, d) || uneven(P, T, g, d)) continue;
    for (int d2 = 0; d2 < rank; d2++) {
      if (d2 == d || !is_prefix(&C, d2, T, d2) || uneven(P, T, g, d2)) continue;
      int n2 = vsh_nax(&C, d2), nt = vsh_nax(T, d2);
      if (nt - n2 < n || memcmp(&T->ax[d2][n2], C.ax[d], (size_t)n)) continue;
      if (g->dims[d2] % (vsh_parts(P, &C, d2) * vsh_parts(P, &C, d))) continue;
      lm_type in, out;
      local_of(P, g, &C, &in);
      vsh N = C; /* d2 gains d's axes (a further split of d2, if T has one, is a local slice) */
      memcpy(&N.ax[d2][n2], C.ax[d], (size_t)n);
      memset(N.ax[d], -1, NA);
      local_of(P, g, &N, &out);
      uint32_t r = nid(P);
      int64_t gs;
      lm_tb_put(&P->out, "    %%p%u = \"stablehlo.all_to_all\"(%%p%u) {split_dimension = %d : i64, concat_dimension = %d : i64, "
                         "split_count = %lld : i64, ",
                r, id, d2, d, (long long)vsh_parts(P, &C, d));
      put_groups(P, C.ax[d], n, &gs);
      lm_tb_put(&P->out, "} : (%s) -> %s\n", ts(&in), ts(&out));
      lm_tb_put(&P->ex, "    all_to_all %s dim %d -> dim %d over ", what, d, d2);
      put_axes_ex(P, C.ax[d], n);
      note_bytes(P, (double)lm_type_numel(&in) * (double)es * (double)(gs - 1) / (double)gs);
      id = r;
      C = N;
      break;
    }
  }
  /* gather dims whose current split is not a prefix of the target's, or that change an uneven
   * split (padded shards do not split further by local slices) */
  for (int d = 0; d < rank; d++) {
    int n = vsh_nax(&C, d);
    if (!n || (is_prefix(&C, d, T, d) && (vsh_dim_eq(&C, d, T, d) || (!uneven(P, &C, g, d) && !uneven(P, T, g, d)))))
      continue;
    perm_plan pl;
    if (perm_plan_make(P, g, &C, T, d, &pl)) { /* split further by a collective_permute below */
      perm_free(&pl);
      continue;
    }
    lm_type in, out;
    local_of(P, g, &C, &in);
    vsh N = C;
    memset(N.ax[d], -1, NA);
    local_of(P, g, &N, &out);
    uint32_t r = nid(P);
    int64_t gs;
    lm_type gt = in; /* what the all_gather makes: padded shards end to end */
    gt.dims[d] = in.dims[d] * vsh_parts(P, &C, d);
    lm_tb_put(&P->out, "    %%p%u = \"stablehlo.all_gather\"(%%p%u) {all_gather_dim = %d : i64, ", r, id, d);
    put_groups(P, C.ax[d], n, &gs);
    lm_tb_put(&P->out, "} : (%s) -> %s\n", ts(&in), ts(&gt));
    lm_tb_put(&P->ex, "    all_gather %s dim %d over ", what, d);
    put_axes_ex(P, C.ax[d], n);
    note_bytes(P, (double)lm_type_numel(&gt) * (double)es * (double)(gs - 1) / (double)gs);
    if (gt.dims[d] != out.dims[d]) {
      r = trim_dim(P, r, &gt, d, out.dims[d]);
      lm_tb_put(&P->ex, "    padding of dim %d cut off after the gather\n", d);
    }
    id = r;
    C = N;
  }
  /* split further: slice this process's part of its local block (a dim that splits unevenly
   * is whole here, and padded to the shards' total first) */
  bool any = false;
  uint32_t offs[LM_MAX_RANK];
  lm_type in, out;
  local_of(P, g, &C, &in);
  local_of(P, g, T, &out);
  for (int d = 0; d < rank; d++) {
    int n = vsh_nax(&C, d), nt = vsh_nax(T, d);
    perm_plan pl;
    if (!n || nt <= n || (!uneven(P, &C, g, d) && !uneven(P, T, g, d)) || !perm_plan_make(P, g, &C, T, d, &pl)) continue;
    id = perm_apply(P, id, &in, g, d, out.dims[d], &pl, &T->ax[d][n], nt - n, what);
    perm_free(&pl);
    memcpy(C.ax[d], T->ax[d], NA);
  }
  for (int d = 0; d < rank; d++) {
    int n = vsh_nax(&C, d), nt = vsh_nax(T, d);
    if (nt == n) {
      offs[d] = zero(P);
      continue;
    }
    any = true;
    int64_t k = vsh_parts(P, T, d) / vsh_parts(P, &C, d);
    if (in.dims[d] < out.dims[d] * k) {
      id = pad_dim(P, id, &in, d, out.dims[d] * k);
      lm_tb_put(&P->ex, "    %s dim %d padded to %lld before it splits into %lld shards of %lld\n", what, d,
                (long long)in.dims[d], (long long)k, (long long)out.dims[d]);
    }
    offs[d] = index_along(P, &T->ax[d][n], nt - n, out.dims[d]);
  }
  if (any) {
    uint32_t r = nid(P);
    lm_tb_put(&P->out, "    %%p%u = \"stablehlo.dynamic_slice\"(%%p%u", r, id);
    for (int d = 0; d < rank; d++) lm_tb_put(&P->out, ", %%p%u", offs[d]);
    lm_tb_put(&P->out, ") {slice_sizes = array<i64");
    for (int d = 0; d < rank; d++) lm_tb_put(&P->out, "%s %lld", d ? "," : ":", (long long)out.dims[d]);
    lm_tb_put(&P->out, ">} : (%s", ts(&in));
    for (int d = 0; d < rank; d++) lm_tb_put(&P->out, ", tensor<i32>");
    lm_tb_put(&P->out, ") -> %s\n", ts(&out));
    lm_tb_put(&P->ex, "    local slice %s to ", what);
    put_vsh(P, &P->ex, T, rank);
    lm_tb_put(&P->ex, " (no communication)\n");
    id = r;
  }
  return id;
}

/* iota op (global type rt) made in sharding A: a split iota_dimension adds this shard's offset
 * to a vector along it, then broadcasts (no full-size temporaries). Returns the local id. */
static uint32_t emit_iota(pt *P, const lm_op *op, const lm_type *rt, const vsh *A) {
  int64_t idim = lm_attr_int_or(lm_op_attr(op, "iota_dimension"), 0);
  lm_type ot;
  local_of(P, rt, A, &ot);
  uint32_t res = nid(P);
  if (!(idim >= 0 && idim < rt->rank && A->ax[idim][0] >= 0)) {
    lm_tb_put(&P->out, "    %%p%u = \"stablehlo.iota\"() {iota_dimension = %lld : i64} : () -> %s\n", res, (long long)idim,
              ts(&ot));
    return res;
  }
  uint32_t off = index_along(P, A->ax[idim], vsh_nax(A, (int)idim), ot.dims[idim]);
  uint32_t cv = nid(P), bc = nid(P), sum = nid(P);
  lm_type vt;
  lm_type_tensor(&vt, (lm_dtype)rt->dtype, 1, &ot.dims[idim]);
  const char *dn = lm_dtype_name((lm_dtype)rt->dtype);
  lm_tb_put(&P->out, "    %%p%u = \"stablehlo.iota\"() {iota_dimension = 0 : i64} : () -> %s\n", res, ts(&vt));
  lm_tb_put(&P->out, "    %%p%u = \"stablehlo.convert\"(%%p%u) : (tensor<i32>) -> tensor<%s>\n", cv, off, dn);
  lm_tb_put(&P->out, "    %%p%u = \"stablehlo.broadcast_in_dim\"(%%p%u) {broadcast_dimensions = array<i64>} : "
                     "(tensor<%s>) -> %s\n",
            bc, cv, dn, ts(&vt));
  lm_tb_put(&P->out, "    %%p%u = \"stablehlo.add\"(%%p%u, %%p%u) : (%s, %s) -> %s\n", sum, res, bc, ts(&vt), ts(&vt),
            ts(&vt));
  uint32_t b = nid(P);
  lm_tb_put(&P->out, "    %%p%u = \"stablehlo.broadcast_in_dim\"(%%p%u) {broadcast_dimensions = array<i64: %lld>} : "
                     "(%s) -> %s\n",
            b, sum, (long long)idim, ts(&vt), ts(&ot));
  lm_tb_put(&P->ex, "    iota offset by this shard's position along dim %lld\n", (long long)idim);
  return b;
}

/* Local id of top-level value v in sharding T (cached). */
static uint32_t get(pt *P, uint32_t v, const vsh *T, const char *what) {
  int rank = vrank(P, v);
  if (vsh_eq(&P->ch[v], T, rank)) return P->loc[v];
  for (size_t i = 0; i < P->ncache; i++)
    if (P->cache[i].v == v && vsh_eq(&P->cache[i].s, T, rank)) return P->cache[i].id;
  uint32_t id;
  const lm_op *d = P->def[v];
  bool local = true; /* T is reached from v's sharding by local slices alone */
  for (int k = 0; k < rank; k++) local = local && is_prefix(&P->ch[v], k, T, k);
  if (!local && d && d->code == LM_OP_IOTA && d->nout == 1 && vtype(P, v)->kind == LM_TYPE_TENSOR) {
    /* an iota is made again in T where it is needed: no communication */
    lm_tb_put(&P->ex, "    %s: iota made again in ", what);
    put_vsh(P, &P->ex, T, rank);
    lm_tb_put(&P->ex, " instead of moving it\n");
    id = emit_iota(P, d, vtype(P, v), T);
  } else if (!local && d && d->code == LM_OP_BROADCAST_IN_DIM && d->nin == 1 && P->top[d->in[0]] &&
      lm_type_numel(vtype(P, d->in[0])) < lm_type_numel(vtype(P, v))) {
    /* a broadcast is cheaper to make again in T from its (smaller) operand than to move */
    rule r;
    op_rule(P, d, &r);
    vsh A, O;
    producible(P, &r, vtype(P, v), T, 0, &A);
    operand_need(P, &r, 0, vtype(P, d->in[0]), vtype(P, v), &A, &O);
    uint32_t in = get(P, d->in[0], &O, "operand of a broadcast made again");
    lm_type it, ot;
    local_of(P, vtype(P, d->in[0]), &O, &it);
    local_of(P, vtype(P, v), &A, &ot);
    uint32_t b = nid(P);
    lm_tb_put_op_as(&P->out, P->f, d, "p", &in, &it, &b, &ot, 4);
    lm_tb_put(&P->ex, "    %s: broadcast_in_dim made again in ", what);
    put_vsh(P, &P->ex, &A, rank);
    lm_tb_put(&P->ex, " from its operand instead of moving it\n");
    id = reshard(P, b, vtype(P, v), &A, T, what);
  } else {
    id = reshard(P, P->loc[v], vtype(P, v), &P->ch[v], T, what);
  }
  if (P->ncache == P->capcache) {
    size_t nc = P->capcache ? P->capcache * 2 : 64;
    cache_ent *c = realloc(P->cache, nc * sizeof *c);
    if (!c) {
      P->out.oom = true;
      return id;
    }
    P->cache = c;
    P->capcache = nc;
  }
  P->cache[P->ncache++] = (cache_ent){.v = v, .id = id, .s = *T};
  return id;
}

/* Combines partial results (local id, sharding A, summed over axes part[0..np)) into sharding T. */
static uint32_t combine(pt *P, uint32_t id, const lm_type *g, const vsh *A, const int8_t *part, int np, red_kind k,
                        const vsh *T) {
  size_t es = lm_dtype_size((lm_dtype)g->dtype);
  uint32_t pm = 0;
  for (int j = 0; j < np; j++) pm |= 1u << part[j];
  /* reduce_scatter when T is A with exactly the partial axes appended on one dim */
  for (int d = 0; d < g->rank; d++) {
    int n = vsh_nax(A, d), nt = vsh_nax(T, d);
    if (nt - n != np || !is_prefix(A, d, T, d)) continue;
    uint32_t m = 0;
    for (int j = n; j < nt; j++) m |= 1u << T->ax[d][j];
    if (m != pm) continue;
    bool rest = true;
    for (int d2 = 0; d2 < g->rank; d2++)
      if (d2 != d && !vsh_dim_eq(A, d2, T, d2)) rest = false;
    if (!rest) continue;
    lm_type in, out;
    local_of(P, g, A, &in);
    local_of(P, g, T, &out);
    int64_t kk = vsh_parts(P, T, d) / vsh_parts(P, A, d);
    if (in.dims[d] != out.dims[d] * kk) { /* T splits dim d unevenly: pad a whole dim first */
      if (n) continue;
      id = pad_dim(P, id, &in, d, out.dims[d] * kk);
      lm_tb_put(&P->ex, "    partial results padded along dim %d to %lld\n", d, (long long)in.dims[d]);
    }
    uint32_t r = nid(P);
    int64_t gs;
    lm_tb_put(&P->out, "    %%p%u = \"stablehlo.reduce_scatter\"(%%p%u)", r, id);
    put_region(P, k, (lm_dtype)g->dtype);
    lm_tb_put(&P->out, " {scatter_dimension = %d : i64, ", d);
    put_groups(P, &T->ax[d][n], np, &gs);
    lm_tb_put(&P->out, "} : (%s) -> %s\n", ts(&in), ts(&out));
    lm_tb_put(&P->ex, "    reduce_scatter partial results over ");
    put_axes_ex(P, &T->ax[d][n], np);
    lm_tb_put(&P->ex, " into dim %d", d);
    note_bytes(P, (double)lm_type_numel(&in) * (double)es * (double)(gs - 1) / (double)gs);
    return r;
  }
  lm_type lt;
  local_of(P, g, A, &lt);
  uint32_t r = nid(P);
  int64_t gs;
  lm_tb_put(&P->out, "    %%p%u = \"stablehlo.all_reduce\"(%%p%u)", r, id);
  put_region(P, k, (lm_dtype)g->dtype);
  lm_tb_put(&P->out, " {");
  put_groups(P, part, np, &gs);
  lm_tb_put(&P->out, "} : (%s) -> %s\n", ts(&lt), ts(&lt));
  lm_tb_put(&P->ex, "    all_reduce partial results over ");
  put_axes_ex(P, part, np);
  note_bytes(P, 2.0 * (double)lm_type_numel(&lt) * (double)es * (double)(gs - 1) / (double)gs);
  return reshard(P, r, g, A, T, "result");
}

static void ex_op_head(pt *P, const lm_op *op, uint32_t k) {
  lm_tb_put(&P->ex, "op %u %s", k, op->name);
  if (op->loc.file) lm_tb_put(&P->ex, " (%s:%u:%u)", op->loc.file, op->loc.line, op->loc.col);
  lm_tb_put(&P->ex, "\n");
  for (uint32_t j = 0; j < op->nout; j++) {
    const lm_type *t = vtype(P, op->out[j]);
    if (t->kind != LM_TYPE_TENSOR) continue;
    lm_type l;
    local_of(P, t, &P->ch[op->out[j]], &l);
    lm_tb_put(&P->ex, "  result %u %s ", j, ts(t));
    put_vsh(P, &P->ex, &P->ch[op->out[j]], t->rank);
    lm_tb_put(&P->ex, " -> local %s%s\n", ts(&l), any_uneven(P, &P->ch[op->out[j]], t) ? " (last shards padded)" : "");
  }
}

/* Regions of op must not use values of @main from outside (those are global values). */
static bool captures(const pt *P, const lm_op *op, bool inner) {
  if (inner)
    for (uint32_t i = 0; i < op->nin; i++)
      if (P->top[op->in[i]]) return true;
  for (uint32_t r = 0; r < op->nregions; r++)
    for (uint32_t b = 0; b < op->regions[r].nblocks; b++)
      for (uint32_t k = 0; k < op->regions[r].blocks[b].nops; k++)
        if (captures(P, &op->regions[r].blocks[b].ops[k], true)) return true;
  return false;
}

static int lower_fallback(pt *P, const lm_op *op) {
  if (captures(P, op, false))
    return lm_sp_loc_errf(P->err, LOOM_UNSUPPORTED, &op->loc,
                          "%s uses values of @main inside its regions: the partitioner needs them passed as operands",
                          op->name);
  uint32_t *ins = malloc((op->nin + op->nout + 1) * sizeof *ins), *outs = ins ? ins + op->nin : NULL;
  lm_type *it = malloc((op->nin + op->nout + 1) * sizeof *it), *ot = it ? it + op->nin : NULL;
  if (!ins || !it) {
    free(ins);
    free(it);
    return lm_errf(P->err, LOOM_NO_MEMORY, "out of host memory");
  }
  bool gathered = false;
  for (uint32_t i = 0; i < op->nin; i++) {
    uint32_t v = op->in[i];
    vsh R;
    vsh_clear(&R);
    if (!vsh_is_repl(&P->ch[v], vrank(P, v))) gathered = true;
    char what[48];
    snprintf(what, sizeof what, "operand %u", i);
    ins[i] = get(P, v, &R, what);
    it[i] = *vtype(P, v);
  }
  for (uint32_t j = 0; j < op->nout; j++) {
    outs[j] = nid(P);
    ot[j] = *vtype(P, op->out[j]);
  }
  lm_tb_put_op_as(&P->out, P->f, op, "p", ins, it, outs, ot, 4);
  bool sharded_out = false;
  for (uint32_t j = 0; j < op->nout; j++) sharded_out |= !vsh_is_repl(&P->ch[op->out[j]], vrank(P, op->out[j]));
  if (op->code != LM_OP_CONSTANT) {
    lm_tb_put(&P->ex, "    fallback: no partitioning rule for %s here: computed replicated%s\n", op->name,
              gathered ? " (sharded operands gathered first)" : "");
    if (gathered || sharded_out) P->nfallback++;
  }
  for (uint32_t j = 0; j < op->nout; j++) {
    vsh R;
    vsh_clear(&R);
    P->loc[op->out[j]] = reshard(P, outs[j], vtype(P, op->out[j]), &R, &P->ch[op->out[j]], "result");
  }
  free(ins);
  free(it);
  return 0;
}

static int lower_rule(pt *P, const lm_op *op, const rule *rp, int mode);

/* Bytes lower_rule would move for op, without writing anything. */
static double dry_cost(pt *P, const lm_op *op, const rule *r, int mode) {
  lm_textbuf out = P->out, ex = P->ex;
  uint32_t nid = P->nid, channel = P->channel, ncoll = P->ncoll, nfb = P->nfallback;
  int64_t pid = P->pid, zero = P->zero;
  double bytes = P->bytes_total;
  size_t ncache = P->ncache;
  uint32_t loc[4];
  for (uint32_t j = 0; j < op->nout && j < 4; j++) loc[j] = P->loc[op->out[j]];
  memset(&P->out, 0, sizeof P->out);
  memset(&P->ex, 0, sizeof P->ex);
  int rc = lower_rule(P, op, r, mode);
  double cost = rc < 0 ? 1e300 : P->bytes_total - bytes;
  free(P->out.s);
  free(P->ex.s);
  P->out = out;
  P->ex = ex;
  P->nid = nid;
  P->channel = channel;
  P->ncoll = ncoll;
  P->nfallback = nfb;
  P->pid = pid;
  P->zero = zero;
  P->bytes_total = bytes;
  P->ncache = ncache;
  for (uint32_t j = 0; j < op->nout && j < 4; j++) P->loc[op->out[j]] = loc[j];
  return cost;
}

static int lower_op(pt *P, const lm_op *op, uint32_t k);

/* Lowers a region's ops (all but its terminator) and returns the ids of the terminator's
 * operands resharded to sh[i] (NULL: replicated). Reshards made inside stay inside. */
static int lower_region(pt *P, const lm_block *b, const vsh *sh, const lm_type *lt, uint32_t *ids) {
  size_t ncache = P->ncache;
  for (uint32_t k = 0; k + 1 < b->nops; k++) LM_TRY(lower_op(P, &b->ops[k], k));
  const lm_op *ret = &b->ops[b->nops - 1];
  vsh R;
  vsh_clear(&R);
  for (uint32_t i = 0; i < ret->nin; i++) ids[i] = get(P, ret->in[i], sh ? &sh[i] : &R, "carried value");
  lm_tb_put(&P->out, "    \"stablehlo.return\"(");
  for (uint32_t i = 0; i < ret->nin; i++) lm_tb_put(&P->out, "%s%%p%u", i ? ", " : "", ids[i]);
  lm_tb_put(&P->out, ") : (");
  for (uint32_t i = 0; i < ret->nin; i++) {
    lm_type l;
    if (lt) l = lt[i];
    else l = *vtype(P, ret->in[i]);
    lm_tb_put(&P->out, "%s%s", i ? ", " : "", ts(&l));
  }
  lm_tb_put(&P->out, ") -> ()\n");
  P->ncache = ncache;
  return 0;
}

static int lower_while(pt *P, const lm_op *op) {
  uint32_t n = op->nin;
  const lm_block *cb = &op->regions[0].blocks[0], *bb = &op->regions[1].blocks[0];
  vsh *carried = malloc(n * sizeof *carried);
  lm_type *lt = malloc(n * sizeof *lt);
  uint32_t *ins = malloc(3 * (size_t)n * sizeof *ins), *outs = ins ? ins + n : NULL, *tmp = ins ? ins + 2 * n : NULL;
  int rc = 0;
  if (!carried || !lt || !ins) rc = lm_errf(P->err, LOOM_NO_MEMORY, "out of host memory");
  for (uint32_t i = 0; rc == 0 && i < n; i++) {
    carried[i] = P->ch[op->out[i]];
    P->ch[cb->args[i]] = P->ch[bb->args[i]] = carried[i];
    ins[i] = get(P, op->in[i], &carried[i], "carried value");
    local_of(P, vtype(P, op->out[i]), &carried[i], &lt[i]);
    outs[i] = nid(P);
  }
  if (rc == 0) {
    lm_tb_put(&P->out, "    ");
    for (uint32_t i = 0; i < n; i++) lm_tb_put(&P->out, "%s%%p%u", i ? ", " : "", outs[i]);
    lm_tb_put(&P->out, " = \"stablehlo.while\"(");
    for (uint32_t i = 0; i < n; i++) lm_tb_put(&P->out, "%s%%p%u", i ? ", " : "", ins[i]);
    lm_tb_put(&P->out, ") ({\n");
    for (int r = 0; rc == 0 && r < 2; r++) {
      const lm_block *b = r ? bb : cb;
      if (r) lm_tb_put(&P->out, "    }, {\n");
      lm_tb_put(&P->out, "    ^bb0(");
      for (uint32_t i = 0; i < n; i++) {
        P->loc[b->args[i]] = nid(P);
        lm_tb_put(&P->out, "%s%%p%u: %s", i ? ", " : "", P->loc[b->args[i]], ts(&lt[i]));
      }
      lm_tb_put(&P->out, "):\n");
      lm_tb_put(&P->ex, "  %s of the while loop:\n", r ? "body" : "condition");
      rc = lower_region(P, b, r ? carried : NULL, r ? lt : NULL, tmp);
    }
    lm_tb_put(&P->out, "    }) : (");
    for (uint32_t i = 0; i < n; i++) lm_tb_put(&P->out, "%s%s", i ? ", " : "", ts(&lt[i]));
    lm_tb_put(&P->out, ") -> (");
    for (uint32_t i = 0; i < n; i++) lm_tb_put(&P->out, "%s%s", i ? ", " : "", ts(&lt[i]));
    lm_tb_put(&P->out, ")\n");
    lm_tb_put(&P->ex, "  end of the while loop\n");
    for (uint32_t i = 0; i < n; i++) P->loc[op->out[i]] = outs[i];
  }
  free(carried);
  free(lt);
  free(ins);
  return rc;
}

static int lower_case(pt *P, const lm_op *op) {
  uint32_t n = op->nout;
  vsh *sh = malloc((n + 1) * sizeof *sh);
  lm_type *lt = malloc((n + 1) * sizeof *lt);
  uint32_t *outs = malloc((2 * (size_t)n + 1) * sizeof *outs), *tmp = outs ? outs + n : NULL;
  if (!sh || !lt || !outs) {
    free(sh);
    free(lt);
    free(outs);
    return lm_errf(P->err, LOOM_NO_MEMORY, "out of host memory");
  }
  vsh R;
  vsh_clear(&R);
  uint32_t sel = get(P, op->in[0], &R, "branch index");
  for (uint32_t i = 0; i < n; i++) {
    sh[i] = P->ch[op->out[i]];
    local_of(P, vtype(P, op->out[i]), &sh[i], &lt[i]);
    outs[i] = nid(P);
  }
  lm_tb_put(&P->out, "    ");
  for (uint32_t i = 0; i < n; i++) lm_tb_put(&P->out, "%s%%p%u", i ? ", " : "", outs[i]);
  lm_tb_put(&P->out, "%s\"%s\"(%%p%u) (", n ? " = " : "", op->name, sel);
  int rc = 0;
  for (uint32_t r = 0; rc == 0 && r < op->nregions; r++) {
    lm_tb_put(&P->out, "%s{\n", r ? ", " : "");
    lm_tb_put(&P->ex, "  branch %u:\n", r);
    rc = lower_region(P, &op->regions[r].blocks[0], sh, lt, tmp);
    lm_tb_put(&P->out, "    }");
  }
  lm_tb_put(&P->out, ") : (%s) -> (", ts(vtype(P, op->in[0])));
  for (uint32_t i = 0; i < n; i++) lm_tb_put(&P->out, "%s%s", i ? ", " : "", ts(&lt[i]));
  lm_tb_put(&P->out, ")\n");
  lm_tb_put(&P->ex, "  end of the branches\n");
  for (uint32_t i = 0; i < n; i++) P->loc[op->out[i]] = outs[i];
  free(sh);
  free(lt);
  free(outs);
  return rc;
}

static int lower_op(pt *P, const lm_op *op, uint32_t k) {
  if (op->code == LM_OP_FUNC_RETURN) {
    lm_tb_put(&P->ex, "return\n");
    uint32_t *ids = malloc((op->nin + 1) * sizeof *ids);
    if (!ids) return lm_errf(P->err, LOOM_NO_MEMORY, "out of host memory");
    for (uint32_t j = 0; j < op->nin; j++) {
      char what[48];
      snprintf(what, sizeof what, "result %u", j);
      ids[j] = get(P, op->in[j], &P->res_sh[j], what);
    }
    lm_tb_put(&P->out, "    \"func.return\"(");
    for (uint32_t j = 0; j < op->nin; j++) lm_tb_put(&P->out, "%s%%p%u", j ? ", " : "", ids[j]);
    free(ids);
    lm_tb_put(&P->out, ") : (");
    for (uint32_t j = 0; j < op->nin; j++) {
      lm_type l;
      local_of(P, vtype(P, op->in[j]), &P->res_sh[j], &l);
      lm_tb_put(&P->out, "%s%s", j ? ", " : "", ts(&l));
    }
    lm_tb_put(&P->out, ") -> ()\n");
    return 0;
  }
  ex_op_head(P, op, k);
  if (while_ok(op) && P->rw[op->out[0]]) return lower_while(P, op);
  if (case_ok(op) && P->rw[op->out[0]]) return lower_case(P, op);
  if (op->code == LM_OP_OPTIMIZATION_BARRIER && op->nin == op->nout) {
    uint32_t *ids = malloc((2 * op->nin + 1) * sizeof *ids);
    lm_type *ty = malloc((op->nin + 1) * sizeof *ty);
    if (!ids || !ty) {
      free(ids);
      free(ty);
      return lm_errf(P->err, LOOM_NO_MEMORY, "out of host memory");
    }
    for (uint32_t i = 0; i < op->nin; i++) {
      ids[i] = get(P, op->in[i], &P->ch[op->out[i]], "operand");
      local_of(P, vtype(P, op->out[i]), &P->ch[op->out[i]], &ty[i]);
      ids[op->nin + i] = nid(P);
      P->loc[op->out[i]] = ids[op->nin + i];
    }
    lm_tb_put_op_as(&P->out, P->f, op, "p", ids, ty, ids + op->nin, ty, 4);
    free(ids);
    free(ty);
    return 0;
  }
  rule r;
  op_rule(P, op, &r);
  if (r.kind == R_IDENT) {
    P->loc[op->out[0]] = get(P, op->in[0], &P->ch[op->out[0]], "operand");
    return 0;
  }
  if (r.kind == R_FALLBACK || r.kind == R_CONST) return lower_fallback(P, op);
  int mode = 1;
  if (r.kind == R_DOT) {
    /* keep contracting splits (partial results, then combined) or gather them first: the
     * one that moves fewer bytes, counting every reshard on the way */
    double keep = dry_cost(P, op, &r, 1), gather = dry_cost(P, op, &r, 0);
    if (gather < keep) {
      mode = 0;
      lm_tb_put(&P->ex, "    contracting dims gathered: %.0f bytes in all, against %.0f to keep them split\n", gather,
                keep);
    }
  }
  if (r.sort_dim >= 0 && P->ch[op->in[0]].ax[r.sort_dim][0] >= 0) {
    /* a split sorted dim: moved onto another dim by all_to_all, gathered, or (top_k) each
     * shard's candidates gathered: fewest bytes wins */
    double move = dry_cost(P, op, &r, 1), gather = dry_cost(P, op, &r, 0);
    double cand = op->code == LM_OP_CHLO_TOP_K ? dry_cost(P, op, &r, 2) : 1e300;
    mode = cand < move && cand < gather ? 2 : move < gather ? 1 : 0;
    if (cand < 1e300)
      lm_tb_put(&P->ex,
                "    sorted dim %d is split: %.0f bytes in all to move it onto another dim, %.0f to gather it, %.0f to "
                "gather each shard's top k\n",
                r.sort_dim, move, gather, cand);
    else if (move != gather)
      lm_tb_put(&P->ex, "    sorted dim %d is split: %.0f bytes in all to move it onto another dim, %.0f to gather it\n",
                r.sort_dim, move, gather);
  }
  return lower_rule(P, op, &r, mode);
}

/* top_k along a split last dim (axes X): each shard takes its own top k (indices offset to
 * global ones), those candidates are gathered over X in shard order and sorted again (stable,
 * by value), and the first k kept. Every element of the global top k is among its shard's top k,
 * and among equal values the shard order is the index order, so the result is top_k's exactly.
 * LOOM_UNSUPPORTED (no output) when a shard holds fewer than k elements or the type has no such
 * order. */
static int lower_top_k_cand(pt *P, const lm_op *op, const rule *r) {
  const lm_type *rt = vtype(P, op->out[0]), *t = vtype(P, op->in[0]);
  int sd = r->sort_dim;
  const vsh *S = &P->ch[op->in[0]];
  int nx = vsh_nax(S, sd);
  lm_dtype dt = (lm_dtype)t->dtype;
  const char *ct = lm_dtype_is_float(dt) ? "TOTALORDER" : lm_dtype_is_sint(dt) ? "SIGNED" : lm_dtype_is_uint(dt) ? "UNSIGNED" : NULL;
  int64_t kx = vsh_parts(P, S, sd), k = rt->dims[sd];
  if (!nx || !ct || t->dims[sd] % kx || t->dims[sd] / kx < k)
    return lm_errf(P->err, LOOM_UNSUPPORTED, "no top_k candidates plan here");
  vsh A, O;
  producible(P, r, rt, &P->ch[op->out[0]], dim_mask(S, sd), &A);
  operand_need(P, r, 0, t, rt, &A, &O);
  memcpy(O.ax[sd], S->ax[sd], NA);
  uint32_t in = get(P, op->in[0], &O, "operand 0");
  lm_type it, ol[2], og[2];
  local_of(P, t, &O, &it);
  local_of(P, rt, &A, &ol[0]);
  local_of(P, vtype(P, op->out[1]), &A, &ol[1]);
  lm_tb_put(&P->ex, "    top_k along split dim %d: each shard's top %lld (indices made global) gathered over ", sd,
            (long long)k);
  put_axes_ex(P, S->ax[sd], nx);
  lm_tb_put(&P->ex, ", sorted again and the first %lld kept\n", (long long)k);
  uint32_t loc[2] = {nid(P), nid(P)};
  lm_tb_put_op_as(&P->out, P->f, op, "p", &in, &it, loc, ol, 4);
  /* global indices: + this shard's offset along the dim */
  uint32_t off = index_along(P, S->ax[sd], nx, it.dims[sd]), bc = nid(P), gi = nid(P);
  lm_tb_put(&P->out, "    %%p%u = \"stablehlo.broadcast_in_dim\"(%%p%u) {broadcast_dimensions = array<i64>} : "
                     "(tensor<i32>) -> %s\n",
            bc, off, ts(&ol[1]));
  lm_tb_put(&P->out, "    %%p%u = \"stablehlo.add\"(%%p%u, %%p%u) : (%s, %s) -> %s\n", gi, loc[1], bc, ts(&ol[1]),
            ts(&ol[1]), ts(&ol[1]));
  loc[1] = gi;
  uint32_t g[2];
  for (int j = 0; j < 2; j++) {
    int64_t gs;
    og[j] = ol[j];
    og[j].dims[sd] = k * kx;
    g[j] = nid(P);
    lm_tb_put(&P->out, "    %%p%u = \"stablehlo.all_gather\"(%%p%u) {all_gather_dim = %d : i64, ", g[j], loc[j], sd);
    put_groups(P, S->ax[sd], nx, &gs);
    lm_tb_put(&P->out, "} : (%s) -> ", ts(&ol[j]));
    lm_tb_put(&P->out, "%s\n", ts(&og[j]));
    lm_tb_put(&P->ex, "    all_gather top_k %s over ", j ? "indices" : "values");
    put_axes_ex(P, S->ax[sd], nx);
    note_bytes(P, (double)lm_type_numel(&og[j]) * (double)lm_dtype_size((lm_dtype)og[j].dtype) * (double)(gs - 1) /
                      (double)gs);
  }
  uint32_t sv = nid(P), a = nid(P), b = nid(P), c = nid(P), d = nid(P), cmp = nid(P);
  const char *vn = lm_dtype_name(dt);
  lm_tb_put(&P->out, "    %%p%u:2 = \"stablehlo.sort\"(%%p%u, %%p%u) ({\n", sv, g[0], g[1]);
  lm_tb_put(&P->out, "    ^bb0(%%p%u: tensor<%s>, %%p%u: tensor<%s>, %%p%u: tensor<i32>, %%p%u: tensor<i32>):\n", a, vn, b, vn,
            c, d);
  lm_tb_put(&P->out,
            "      %%p%u = \"stablehlo.compare\"(%%p%u, %%p%u) {comparison_direction = #stablehlo<comparison_direction GT>, "
            "compare_type = #stablehlo<comparison_type %s>} : (tensor<%s>, tensor<%s>) -> tensor<i1>\n",
            cmp, a, b, ct, vn, vn);
  lm_tb_put(&P->out, "      \"stablehlo.return\"(%%p%u) : (tensor<i1>) -> ()\n    }) {dimension = %d : i64, is_stable = true} : ",
            cmp, sd);
  lm_tb_put(&P->out, "(%s, ", ts(&og[0]));
  lm_tb_put(&P->out, "%s) -> ", ts(&og[1]));
  lm_tb_put(&P->out, "(%s, ", ts(&og[0]));
  lm_tb_put(&P->out, "%s)\n", ts(&og[1]));
  for (int j = 0; j < 2; j++) {
    uint32_t sl = nid(P);
    lm_tb_put(&P->out, "    %%p%u = \"stablehlo.slice\"(%%p%u#%d) {start_indices = array<i64", sl, sv, j);
    for (int e = 0; e < rt->rank; e++) lm_tb_put(&P->out, "%s 0", e ? "," : ":");
    lm_tb_put(&P->out, ">, limit_indices = array<i64");
    for (int e = 0; e < rt->rank; e++) lm_tb_put(&P->out, "%s %lld", e ? "," : ":", (long long)ol[j].dims[e]);
    lm_tb_put(&P->out, ">, strides = array<i64");
    for (int e = 0; e < rt->rank; e++) lm_tb_put(&P->out, "%s 1", e ? "," : ":");
    lm_tb_put(&P->out, ">} : (%s) -> ", ts(&og[j]));
    lm_tb_put(&P->out, "%s\n", ts(&ol[j]));
    P->loc[op->out[j]] = reshard(P, sl, vtype(P, op->out[j]), &A, &P->ch[op->out[j]], "result");
  }
  return 0;
}

/* Combines the partial results of a variadic reduce (local ids ids[], local types lt[]) over the
 * partial axes part[0..np): each is gathered over those axes along a new major dim, and the op's
 * body reduces that dim again from the init values (local ids init[], types it[]). ids[] get the
 * combined results. */
static int combine_gen(pt *P, const lm_op *op, const rule *r, uint32_t *ids, const lm_type *lt, const uint32_t *init,
                       const lm_type *it, const int8_t *part, int np) {
  uint32_t n = r->nres, g[4];
  lm_type gt[4];
  lm_tb_put(&P->ex, "    partial results combined over ");
  put_axes_ex(P, part, np);
  lm_tb_put(&P->ex, ": gathered, then reduced again with the op's body\n");
  for (uint32_t j = 0; j < n; j++) {
    lm_type one = lt[j];
    one.rank = lt[j].rank + 1;
    one.dims[0] = 1;
    for (int d = 0; d < lt[j].rank; d++) one.dims[d + 1] = lt[j].dims[d];
    uint32_t rs = nid(P);
    lm_tb_put(&P->out, "    %%p%u = \"stablehlo.reshape\"(%%p%u) : (%s) -> ", rs, ids[j], ts(&lt[j]));
    lm_tb_put(&P->out, "%s\n", ts(&one));
    gt[j] = one;
    g[j] = nid(P);
    int64_t gs;
    lm_tb_put(&P->out, "    %%p%u = \"stablehlo.all_gather\"(%%p%u) {all_gather_dim = 0 : i64, ", g[j], rs);
    put_groups(P, part, np, &gs);
    gt[j].dims[0] = gs;
    lm_tb_put(&P->out, "} : (%s) -> ", ts(&one));
    lm_tb_put(&P->out, "%s\n", ts(&gt[j]));
    lm_tb_put(&P->ex, "    all_gather partial result %u over ", j);
    put_axes_ex(P, part, np);
    note_bytes(P, (double)lm_type_numel(&gt[j]) * (double)lm_dtype_size((lm_dtype)gt[j].dtype) * (double)(gs - 1) /
                      (double)gs);
  }
  /* the op again, reducing the gathered dim 0 */
  lm_op c = *op;
  lm_named_attr at[32];
  int64_t zero_dim = 0;
  if (op->nattrs > 32) return lm_errf(P->err, LOOM_UNSUPPORTED, "a reduce with %u attributes", op->nattrs);
  memcpy(at, op->attrs, sizeof(lm_named_attr) * op->nattrs);
  for (uint32_t a = 0; a < op->nattrs; a++)
    if (!strcmp(at[a].name, "dimensions")) {
      at[a].value.kind = LM_ATTR_INTS;
      at[a].value.n = 1;
      at[a].value.ints = &zero_dim;
    }
  c.attrs = at;
  uint32_t ins[8], outs[4];
  lm_type its[8];
  for (uint32_t j = 0; j < n; j++) {
    ins[j] = g[j];
    its[j] = gt[j];
    ins[n + j] = init[j];
    its[n + j] = it[j];
    outs[j] = nid(P);
  }
  lm_tb_put_op_as(&P->out, P->f, &c, "p", ins, its, outs, lt, 4);
  for (uint32_t j = 0; j < n; j++) ids[j] = outs[j];
  return 0;
}

static int lower_rule(pt *P, const lm_op *op, const rule *rp, int mode) {
  if (mode == 2) return lower_top_k_cand(P, op, rp);
  bool partial = mode == 1;
  rule r = *rp;
  uint32_t out = op->out[0];
  const lm_type *rt = vtype(P, out);
  const vsh *R = &P->ch[out];
  /* partial axes: contracting / reduced dims keep the operands' splits when they can */
  int8_t part[NA];
  int np = 0;
  uint32_t pm = 0;
  vsh cl, cr; /* lhs / rhs (reduce: operand) splits of contracting dims */
  vsh_clear(&cl);
  vsh_clear(&cr);
  if (partial && (r.kind == R_DOT || r.kind == R_REDUCE) && (r.red != RED_NONE || r.gen)) {
    for (int c = 0; c < r.ncontract; c++) {
      const vsh *src = &P->ch[op->in[0]];
      int sd = r.lc[c];
      if (r.kind == R_DOT && src->ax[sd][0] < 0) {
        src = &P->ch[op->in[1]];
        sd = r.rc[c];
      }
      for (uint32_t i = 1; r.kind == R_REDUCE && i < r.nred_in && src->ax[sd][0] < 0; i++) src = &P->ch[op->in[i]];
      uint32_t m = dim_mask(src, sd);
      if (!m || (pm & m)) continue;
      memcpy(cl.ax[r.lc[c]], src->ax[sd], NA);
      if (r.kind == R_DOT) memcpy(cr.ax[r.rc[c]], src->ax[sd], NA);
      for (int j = 0; j < NA && src->ax[sd][j] >= 0; j++) part[np++] = src->ax[sd][j];
      pm |= m;
    }
  }
  vsh A;
  producible(P, &r, rt, R, pm, &A);
  uint32_t ins[8];
  lm_type it[8];
  vsh osh[8];
  int moved = -1; /* the dim that takes the sorted dim's split */
  if (partial && r.sort_dim >= 0) sort_move(P, &r, rt, op->in[0], &A);
  if (r.sort_dim >= 0) {
    uint32_t xm = dim_mask(&P->ch[op->in[0]], r.sort_dim);
    for (int d = 0; d < rt->rank && xm; d++)
      if (d != r.sort_dim && (dim_mask(&A, d) & xm) == xm) moved = d;
  }
  if (moved >= 0)
    lm_tb_put(&P->ex, "    sorted along split dim %d: its split moved to dim %d by all_to_all, rows sorted whole on each device\n",
              r.sort_dim, moved);
  else if (r.sort_dim >= 0)
    for (uint32_t i = 0; i < op->nin; i++)
      if (P->ch[op->in[i]].ax[r.sort_dim][0] >= 0) {
        lm_tb_put(&P->ex, "    sorted along split dim %d: operands gathered along it, then sorted whole on every device\n",
                  r.sort_dim);
        break;
      }
  for (uint32_t i = 0; i < op->nin; i++) {
    uint32_t v = op->in[i];
    const lm_type *t = vtype(P, v);
    vsh O;
    operand_need(P, &r, i, t, rt, &A, &O);
    if (r.kind == R_DOT || (r.kind == R_REDUCE && i < r.nred_in)) {
      const vsh *c = i == 0 || r.kind == R_REDUCE ? &cl : &cr;
      for (int d = 0; d < t->rank; d++)
        if (c->ax[d][0] >= 0) memcpy(O.ax[d], c->ax[d], NA);
    }
    if ((r.kind == R_DSLICE && i > 0) || (r.kind == R_DUS && i > 1)) vsh_clear(&O);
    char what[48];
    snprintf(what, sizeof what, "operand %u", i);
    ins[i] = get(P, v, &O, what);
    local_of(P, t, &O, &it[i]);
    osh[i] = O;
  }
  /* contracting / reduced dims split unevenly: their padding masked with zeros (dot) or the
   * init value, the reduction's identity (reduce), so that it adds nothing to the partial
   * results */
  for (uint32_t i = 0; np && i < (r.kind == R_DOT ? 2u : r.kind == R_REDUCE ? r.nred_in : 0u); i++) {
    const lm_type *t = vtype(P, op->in[i]);
    const vsh *c = i == 0 || r.kind == R_REDUCE ? &cl : &cr;
    uint32_t md = 0;
    for (int d = 0; d < t->rank; d++)
      if (c->ax[d][0] >= 0 && uneven(P, &osh[i], t, d)) md |= 1u << d;
    if (!md) continue;
    uint32_t fill = r.kind == R_DOT ? zero_of(P, (lm_dtype)t->dtype) : ins[r.nred_in + i];
    ins[i] = mask_pad(P, ins[i], &it[i], t, &osh[i], md, fill);
    lm_tb_put(&P->ex, "    operand %u: padding of its uneven %s dims masked with %s\n", i,
              r.kind == R_DOT ? "contracting" : "reduced", r.kind == R_DOT ? "zeros" : "the init value");
  }
  lm_type ot, ots[4];
  local_of(P, rt, &A, &ot);
  uint32_t res = nid(P), ress[4];
  if (r.nres > 1) { /* one op, several results of one shape (variadic reduce and sort, top_k) */
    ress[0] = res;
    for (uint32_t j = 0; j < r.nres; j++) {
      if (j) ress[j] = nid(P);
      local_of(P, vtype(P, op->out[j]), &A, &ots[j]);
    }
    lm_tb_put_op_as(&P->out, P->f, op, "p", ins, it, ress, ots, 4);
    if (np) LM_TRY(combine_gen(P, op, &r, ress, ots, ins + r.nred_in, it + r.nred_in, part, np));
    for (uint32_t j = 0; j < r.nres; j++)
      P->loc[op->out[j]] = reshard(P, ress[j], vtype(P, op->out[j]), &A, &P->ch[op->out[j]], "result");
    return 0;
  }
  if (r.kind == R_SLICE || r.kind == R_DSLICE) {
    const lm_type *t = vtype(P, op->in[0]);
    int64_t st[LM_MAX_RANK], li[LM_MAX_RANK], sd[LM_MAX_RANK];
    if (r.kind == R_SLICE) {
      ints(op, "start_indices", st, LM_MAX_RANK);
      ints(op, "limit_indices", li, LM_MAX_RANK);
      if (ints(op, "strides", sd, LM_MAX_RANK) < 0)
        for (int d = 0; d < t->rank; d++) sd[d] = 1;
      for (int d = 0; d < t->rank; d++)
        if (r.map[0][d] >= 0) li[d] = it[0].dims[d];
      lm_tb_put(&P->out, "    %%p%u = \"stablehlo.slice\"(%%p%u) {start_indices = array<i64", res, ins[0]);
      for (int d = 0; d < t->rank; d++) lm_tb_put(&P->out, "%s %lld", d ? "," : ":", (long long)st[d]);
      lm_tb_put(&P->out, ">, limit_indices = array<i64");
      for (int d = 0; d < t->rank; d++) lm_tb_put(&P->out, "%s %lld", d ? "," : ":", (long long)li[d]);
      lm_tb_put(&P->out, ">, strides = array<i64");
      for (int d = 0; d < t->rank; d++) lm_tb_put(&P->out, "%s %lld", d ? "," : ":", (long long)sd[d]);
      lm_tb_put(&P->out, ">} : (%s) -> %s\n", ts(&it[0]), ts(&ot));
    } else {
      /* a sharded dim is sliced whole: its start index must be 0 locally (the spec clamps it
       * to 0 globally, since the slice covers the dim) */
      uint32_t idx[8];
      for (uint32_t i = 1; i < op->nin; i++) idx[i] = r.map[0][i - 1] >= 0 && A.ax[i - 1][0] >= 0 ? zero(P) : ins[i];
      lm_tb_put(&P->out, "    %%p%u = \"stablehlo.dynamic_slice\"(%%p%u", res, ins[0]);
      for (uint32_t i = 1; i < op->nin; i++) lm_tb_put(&P->out, ", %%p%u", idx[i]);
      lm_tb_put(&P->out, ") {slice_sizes = array<i64");
      for (int d = 0; d < t->rank; d++) lm_tb_put(&P->out, "%s %lld", d ? "," : ":", (long long)ot.dims[d]);
      lm_tb_put(&P->out, ">} : (%s", ts(&it[0]));
      for (uint32_t i = 1; i < op->nin; i++) lm_tb_put(&P->out, ", %s", ts(vtype(P, op->in[i])));
      lm_tb_put(&P->out, ") -> %s\n", ts(&ot));
    }
  } else if (r.kind == R_DUS) {
    uint32_t idx[8];
    for (uint32_t i = 2; i < op->nin; i++) idx[i] = r.map[0][i - 2] >= 0 && A.ax[i - 2][0] >= 0 ? zero(P) : ins[i];
    lm_tb_put(&P->out, "    %%p%u = \"stablehlo.dynamic_update_slice\"(%%p%u, %%p%u", res, ins[0], ins[1]);
    for (uint32_t i = 2; i < op->nin; i++) lm_tb_put(&P->out, ", %%p%u", idx[i]);
    lm_tb_put(&P->out, ") : (%s, %s", ts(&it[0]), ts(&it[1]));
    for (uint32_t i = 2; i < op->nin; i++) lm_tb_put(&P->out, ", %s", ts(vtype(P, op->in[i])));
    lm_tb_put(&P->out, ") -> %s\n", ts(&ot));
  } else if (r.kind == R_IOTA) {
    res = emit_iota(P, op, rt, &A);
  } else if (r.kind == R_GATHER) {
    /* slice_sizes of the split operand dims become their local sizes */
    lm_op g = *op;
    lm_named_attr at[32];
    int64_t ss[LM_MAX_RANK];
    if (op->nattrs > 32) return lm_errf(P->err, LOOM_UNSUPPORTED, "a gather with %u attributes", op->nattrs);
    memcpy(at, op->attrs, sizeof(lm_named_attr) * op->nattrs);
    for (uint32_t a = 0; a < op->nattrs; a++) {
      if (strcmp(at[a].name, "slice_sizes") || at[a].value.kind != LM_ATTR_INTS || (int)at[a].value.n != it[0].rank)
        continue;
      for (int d = 0; d < it[0].rank; d++) ss[d] = r.map[0][d] >= 0 ? it[0].dims[d] : at[a].value.ints[d];
      at[a].value.ints = ss;
    }
    g.attrs = at;
    lm_tb_put_op_as(&P->out, P->f, &g, "p", ins, it, &res, &ot, 4);
  } else {
    lm_tb_put_op_as(&P->out, P->f, op, "p", ins, it, &res, &ot, 4);
  }
  if (np) P->loc[out] = combine(P, res, rt, &A, part, np, r.red, R);
  else P->loc[out] = reshard(P, res, rt, &A, R, "result");
  return 0;
}

/* ---- inlining: func.call ops in @main are replaced by their callees' bodies, so the rules see
 * through the small private functions JAX emits (relu, _where, ...) ---- */

static int64_t new_values(pt *P, uint32_t n) {
  if (P->ntypes + (uint64_t)n > (1u << 30)) return -1;
  if (P->ntypes + n > P->captypes) {
    uint32_t nc = P->captypes ? P->captypes : 256;
    while (nc < P->ntypes + n) nc *= 2;
    lm_type *t = realloc(P->types, (size_t)nc * sizeof *t);
    if (!t) return -1;
    P->types = t;
    P->captypes = nc;
  }
  uint32_t base = P->ntypes;
  P->ntypes += n;
  return base;
}

typedef struct oplist {
  lm_op *ops;
  uint32_t n, cap;
} oplist;

static int push_op(oplist *l, const lm_op *op) {
  if (l->n == l->cap) {
    uint32_t nc = l->cap ? l->cap * 2 : 64;
    lm_op *o = realloc(l->ops, (size_t)nc * sizeof *o);
    if (!o) return -1;
    l->ops = o;
    l->cap = nc;
  }
  l->ops[l->n++] = *op;
  return 0;
}

static int inline_body(pt *P, const lm_func *fn, uint32_t *map, oplist *l, uint32_t **ret, uint32_t *nret, int depth);

/* Appends op to l through map, or, for a call to a function of the module, the callee's body
 * (its results mapped to what it returns). */
static int copy_or_inline(pt *P, const lm_op *op, uint32_t *map, oplist *l, int depth);

static int copy_op(pt *P, const lm_op *op, lm_op *o, uint32_t *map, int depth) {
  *o = *op;
  o->in = lm_arena_array(&P->ar, op->nin ? op->nin : 1, sizeof *o->in);
  o->out = lm_arena_array(&P->ar, op->nout ? op->nout : 1, sizeof *o->out);
  o->regions = op->nregions ? lm_arena_array(&P->ar, op->nregions, sizeof *o->regions) : NULL;
  if (!o->in || !o->out || (op->nregions && !o->regions)) return -1;
  for (uint32_t i = 0; i < op->nin; i++) o->in[i] = map[op->in[i]];
  for (uint32_t i = 0; i < op->nout; i++) o->out[i] = map[op->out[i]];
  for (uint32_t r = 0; r < op->nregions; r++) {
    o->regions[r].nblocks = op->regions[r].nblocks;
    o->regions[r].blocks = lm_arena_array(&P->ar, op->regions[r].nblocks ? op->regions[r].nblocks : 1, sizeof(lm_block));
    if (!o->regions[r].blocks) return -1;
    for (uint32_t k = 0; k < op->regions[r].nblocks; k++) {
      const lm_block *b = &op->regions[r].blocks[k];
      lm_block *ob = &o->regions[r].blocks[k];
      ob->nargs = b->nargs;
      ob->args = lm_arena_array(&P->ar, b->nargs ? b->nargs : 1, sizeof *ob->args);
      if (!ob->args) return -1;
      for (uint32_t i = 0; i < b->nargs; i++) ob->args[i] = map[b->args[i]];
      oplist l = {0};
      for (uint32_t j = 0; j < b->nops; j++)
        if (copy_or_inline(P, &b->ops[j], map, &l, depth) < 0) {
          free(l.ops);
          return -1;
        }
      ob->nops = l.n;
      ob->ops = lm_arena_array(&P->ar, l.n ? l.n : 1, sizeof *ob->ops);
      if (!ob->ops) {
        free(l.ops);
        return -1;
      }
      if (l.n) memcpy(ob->ops, l.ops, l.n * sizeof *ob->ops);
      free(l.ops);
    }
  }
  return 0;
}

static int copy_or_inline(pt *P, const lm_op *op, uint32_t *map, oplist *l, int depth) {
  const lm_attr *callee = op->code == LM_OP_FUNC_CALL ? lm_op_attr(op, "callee") : NULL;
  const lm_func *cf = callee && callee->s ? lm_module_func(P->m, callee->s) : NULL;
  if (cf && depth < 16 && cf->body.nblocks == 1 && cf->body.blocks[0].nops && cf->body.blocks[0].nargs == op->nin &&
      cf->nresults == op->nout) {
    int64_t base = new_values(P, cf->nvalues);
    uint32_t *cmap = base < 0 ? NULL : malloc((cf->nvalues ? cf->nvalues : 1) * sizeof *cmap);
    if (!cmap) return -1;
    for (uint32_t v = 0; v < cf->nvalues; v++) {
      cmap[v] = (uint32_t)base + v;
      P->types[base + v] = cf->value_types[v];
    }
    for (uint32_t i = 0; i < op->nin; i++) cmap[cf->body.blocks[0].args[i]] = map[op->in[i]];
    uint32_t *r = NULL, nr = 0;
    int rc = inline_body(P, cf, cmap, l, &r, &nr, depth + 1);
    free(cmap);
    if (rc < 0 || nr != op->nout) return -1;
    for (uint32_t j = 0; j < op->nout; j++) map[op->out[j]] = r[j];
    return 0;
  }
  lm_op o;
  if (copy_op(P, op, &o, map, depth) < 0 || push_op(l, &o) < 0) return -1;
  return 0;
}

/* Appends fn's body ops (with ids through map) to l, inlining calls; *ret gets the (mapped)
 * values fn returns. At depth 0 (@main) the return is appended too. */
static int inline_body(pt *P, const lm_func *fn, uint32_t *map, oplist *l, uint32_t **ret, uint32_t *nret, int depth) {
  const lm_block *b = &fn->body.blocks[0];
  for (uint32_t k = 0; k < b->nops; k++) {
    const lm_op *op = &b->ops[k];
    if (k + 1 == b->nops) { /* the terminator */
      lm_op o;
      if (copy_op(P, op, &o, map, depth) < 0) return -1;
      *ret = o.in;
      *nret = o.nin;
      if (depth == 0 && push_op(l, &o) < 0) return -1;
      break;
    }
    if (copy_or_inline(P, op, map, l, depth) < 0) return -1;
  }
  return 0;
}

static int inline_calls(pt *P) {
  const lm_func *f = P->f;
  lm_arena_init(&P->ar, 0);
  int64_t base = new_values(P, f->nvalues);
  uint32_t *map = base < 0 ? NULL : malloc((f->nvalues ? f->nvalues : 1) * sizeof *map);
  if (!map) return lm_errf(P->err, LOOM_NO_MEMORY, "out of host memory");
  for (uint32_t v = 0; v < f->nvalues; v++) {
    map[v] = v;
    P->types[v] = f->value_types[v];
  }
  oplist l = {0};
  uint32_t *r, nr;
  int rc = inline_body(P, f, map, &l, &r, &nr, 0);
  free(map);
  lm_block *b = lm_arena_alloc(&P->ar, sizeof *b);
  lm_op *ops = l.n ? lm_arena_array(&P->ar, l.n, sizeof *ops) : NULL;
  if (rc < 0 || !b || !ops) {
    free(l.ops);
    return lm_errf(P->err, LOOM_NO_MEMORY, "out of host memory inlining calls");
  }
  memcpy(ops, l.ops, l.n * sizeof *ops);
  free(l.ops);
  *b = f->body.blocks[0];
  b->ops = ops;
  b->nops = l.n;
  P->inl = *f;
  P->inl.body.blocks = b;
  P->inl.nvalues = P->ntypes;
  P->inl.value_types = P->types;
  P->f = &P->inl;
  return 0;
}

/* ---- driver ---- */

bool lm_partition_wanted(const lm_module *m) {
  int64_t r = lm_attr_int_or(lm_module_attr(m, "mhlo.num_replicas"), 1);
  int64_t p = lm_attr_int_or(lm_module_attr(m, "mhlo.num_partitions"), 1);
  if (r != 1 || p <= 1) return false;
  const lm_func *f = lm_module_func(m, "main");
  if (!f || f->body.nblocks != 1) return false;
  for (uint32_t i = 0; i < m->nfuncs; i++) {
    const lm_block *b = &m->funcs[i].body.blocks[0];
    if (!m->funcs[i].body.nblocks) continue;
    for (uint32_t k = 0; k < b->nops; k++)
      if (b->ops[k].code == LM_OP_SDY_MANUAL_COMPUTATION) return false;
  }
  return true;
}

static int mesh_procs(pt *P) {
  uint32_t n = (uint32_t)P->ms.ndev;
  P->mesh_procs = calloc(n, sizeof *P->mesh_procs);
  P->proc_pos = calloc(n, sizeof *P->proc_pos);
  uint8_t *seen = calloc(n, 1);
  int rc = 0;
  if (!P->mesh_procs || !P->proc_pos || !seen) rc = lm_errf(P->err, LOOM_NO_MEMORY, "out of host memory");
  for (uint32_t i = 0; rc == 0 && i < n; i++) {
    int64_t id = i;
    if (P->ms.device_ids) {
      if (P->ms.device_ids->kind != LM_ATTR_INTS || P->ms.device_ids->n != n) {
        rc = lm_errf(P->err, LOOM_VERIFY, "the mesh's device_ids must list %u ids", n);
        break;
      }
      id = P->ms.device_ids->ints[i];
    }
    if (id < 0 || id >= (int64_t)n || seen[id]) {
      rc = lm_errf(P->err, LOOM_VERIFY, "the mesh's device_ids must be a permutation of 0..%u", n - 1);
      break;
    }
    seen[id] = 1;
    P->mesh_procs[i] = (uint32_t)id;
    P->proc_pos[id] = i;
  }
  free(seen);
  return rc;
}

static const lm_attr *arg_sharding(const lm_attr *dict, const char **gspmd) {
  if (!dict || dict->kind != LM_ATTR_DICT) return NULL;
  const lm_attr *s = lm_attrs_get(dict->fields, dict->n, "sdy.sharding");
  const lm_attr *g = lm_attrs_get(dict->fields, dict->n, "mhlo.sharding");
  if (g && g->kind == LM_ATTR_STRING) *gspmd = g->s;
  return s && s->kind == LM_ATTR_STRUCT ? s : NULL;
}

static int check_gspmd(const char *g, const char *what, const lm_loc *loc, lm_err *err) {
  if (!g) return 0;
  if (!strcmp(g, "{replicated}") || !strcmp(g, "{maximal device=0}")) return 0;
  return lm_sp_loc_errf(err, LOOM_UNSUPPORTED, loc,
                        "%s has the GSPMD sharding %s: the partitioner reads Shardy shardings (sdy.sharding, what "
                        "JAX emits by default) only",
                        what, g);
}

static void to_sharding(const pt *P, const vsh *s, int rank, lm_sharding *o) {
  lm_sharding_init(o);
  o->mesh_rank = P->ms.rank;
  for (int a = 0; a < P->ms.rank; a++) o->mesh_shape[a] = P->ms.sizes[a];
  o->ndev = (uint32_t)P->ms.ndev;
  for (int d = 0; d < rank; d++) memcpy(o->dim_axes[d], s->ax[d], NA);
}

static int run(pt *P, lm_spmd_info *info) {
  const lm_module *m = P->m;
  LM_TRY(inline_calls(P));
  const lm_func *f = P->f;
  const lm_block *body = &f->body.blocks[0];
  const lm_op *ret = &body->ops[body->nops - 1];
  if (ret->code != LM_OP_FUNC_RETURN || ret->nin != f->nresults)
    return lm_sp_loc_errf(P->err, LOOM_VERIFY, &f->loc, "@main must end with func.return of its %u results", f->nresults);
  size_t nv = f->nvalues ? f->nvalues : 1;
  P->ch = calloc(nv, sizeof *P->ch);
  P->known = calloc(nv, 1);
  P->fixed = calloc(nv, 1);
  P->top = calloc(nv, 1);
  P->rw = calloc(nv, 1);
  P->def = calloc(nv, sizeof *P->def);
  P->loc = calloc(nv, sizeof *P->loc);
  P->res_sh = calloc(f->nresults ? f->nresults : 1, sizeof *P->res_sh);
  if (!P->ch || !P->known || !P->fixed || !P->top || !P->rw || !P->def || !P->loc || !P->res_sh)
    return lm_errf(P->err, LOOM_NO_MEMORY, "out of host memory");
  for (size_t v = 0; v < nv; v++) vsh_clear(&P->ch[v]);
  for (uint32_t j = 0; j < f->nresults; j++) vsh_clear(&P->res_sh[j]);
  mark_block(P, body, 0);
  char what[96];
  /* the mesh: the first sharding's; every other must use the same */
  for (uint32_t i = 0; i < f->nargs + f->nresults; i++) {
    bool in = i < f->nargs;
    const char *g = NULL;
    const lm_attr *sa = arg_sharding(in ? (f->arg_attrs ? &f->arg_attrs[i] : NULL)
                                        : (f->result_attrs ? &f->result_attrs[i - f->nargs] : NULL),
                                     &g);
    snprintf(what, sizeof what, "%s %u of main", in ? "argument" : "result", in ? i : i - f->nargs);
    LM_TRY(check_gspmd(g, what, &f->loc, P->err));
    const lm_type *t = in ? &f->arg_types[i] : &f->result_types[i - f->nargs];
    LM_TRY(lm_sp_check_tensor(t, what, &f->loc, P->err));
    if (!sa) continue;
    vsh s;
    LM_TRY(vsh_from_attr(P, sa, t, &s, what, &f->loc));
    if (in) {
      P->ch[body->args[i]] = s;
      P->known[body->args[i]] = P->fixed[body->args[i]] = 1;
    } else {
      P->res_sh[i - f->nargs] = s; /* seeds propagation after the arguments' */
    }
  }
  for (uint32_t k = 0; k < body->nops; k++) {
    const lm_op *op = &body->ops[k];
    if (op->code == LM_OP_SDY_MANUAL_COMPUTATION)
      return lm_sp_loc_errf(P->err, LOOM_UNSUPPORTED, &op->loc, "sdy.manual_computation in a partitioned program");
    const lm_attr *g = lm_op_attr(op, "mhlo.sharding");
    if (g && g->kind == LM_ATTR_STRING) LM_TRY(check_gspmd(g->s, op->name, &op->loc, P->err));
    if ((op->code == LM_OP_SDY_SHARDING_CONSTRAINT || op->code == LM_OP_SDY_RESHARD) && op->nout == 1) {
      const lm_attr *sa = lm_op_attr(op, "sharding");
      if (!sa || sa->kind != LM_ATTR_STRUCT)
        return lm_sp_loc_errf(P->err, LOOM_VERIFY, &op->loc, "%s without a sharding", op->name);
      vsh s;
      LM_TRY(vsh_from_attr(P, sa, vtype(P, op->out[0]), &s, op->name, &op->loc));
      P->ch[op->out[0]] = s;
      P->known[op->out[0]] = P->fixed[op->out[0]] = 1;
    }
  }
  if (!P->have_mesh) { /* nothing is sharded: a one-axis mesh over every process */
    static const char *const all = "_all";
    P->ms.rank = 1;
    P->ms.names[0] = all;
    P->ms.sizes[0] = (int64_t)P->nproc;
    P->ms.ndev = (int64_t)P->nproc;
  }
  if (P->ms.ndev != (int64_t)P->nproc)
    return lm_errf(P->err, LOOM_VERIFY, "the mesh%s%s has %lld devices but mhlo.num_partitions is %u", P->ms.sym ? " @" : "",
                   P->ms.sym ? P->ms.sym : "", (long long)P->ms.ndev, P->nproc);
  LM_TRY(mesh_procs(P));
  lm_tb_put(&P->ex, "mesh%s%s: [", P->ms.sym ? " @" : "", P->ms.sym ? P->ms.sym : "");
  for (int a = 0; a < P->ms.rank; a++)
    lm_tb_put(&P->ex, "%s\"%s\"=%lld", a ? ", " : "", P->ms.names[a], (long long)P->ms.sizes[a]);
  lm_tb_put(&P->ex, "], %u processes\n", P->nproc);
  /* fixed shardings that do not split evenly */
  for (uint32_t a = 0; a < body->nargs; a++) {
    snprintf(what, sizeof what, "argument %u", a);
    vsh_fit(P, &P->ch[body->args[a]], vtype(P, body->args[a]), what, true);
  }
  for (uint32_t j = 0; j < f->nresults; j++) {
    snprintf(what, sizeof what, "result %u", j);
    vsh_fit(P, &P->res_sh[j], &f->result_types[j], what, true);
  }
  for (uint32_t k = 0; k < body->nops; k++) {
    const lm_op *op = &body->ops[k];
    if (op->code == LM_OP_SDY_SHARDING_CONSTRAINT || op->code == LM_OP_SDY_RESHARD) {
      snprintf(what, sizeof what, "%s (op %u)", op->name, k);
      vsh_fit(P, &P->ch[op->out[0]], vtype(P, op->out[0]), what, false);
    }
  }
  /* propagation: from arguments and constraints, then from the results' annotations */
  propagate(P, body);
  for (uint32_t j = 0; j < f->nresults; j++) {
    uint32_t v = ret->in[j];
    if (!P->known[v] && P->top[v] && !vsh_is_repl(&P->res_sh[j], vrank(P, v))) {
      P->ch[v] = P->res_sh[j];
      P->known[v] = 1;
    }
  }
  propagate(P, body);
  /* results without an annotation take their value's sharding (its even splits: the runtime
   * holds arguments and results as equal shards), as do arguments without one */
  for (uint32_t j = 0; j < f->nresults; j++) {
    const char *g = NULL;
    if (!arg_sharding(f->result_attrs ? &f->result_attrs[j] : NULL, &g)) {
      P->res_sh[j] = P->ch[ret->in[j]];
      if (any_uneven(P, &P->res_sh[j], &f->result_types[j])) {
        vsh_fit(P, &P->res_sh[j], &f->result_types[j], NULL, true);
        lm_tb_put(&P->ex, "  result %u: its value splits a dimension unevenly; the result keeps its even splits only "
                          "(the runtime holds arguments and results as equal shards)\n", j);
      }
    }
  }
  for (uint32_t a = 0; a < body->nargs; a++)
    if (any_uneven(P, &P->ch[body->args[a]], vtype(P, body->args[a]))) {
      vsh_fit(P, &P->ch[body->args[a]], vtype(P, body->args[a]), NULL, true);
      lm_tb_put(&P->ex, "  argument %u: its uses split a dimension unevenly; the argument keeps its even splits only "
                        "(the runtime holds arguments and results as equal shards)\n", a);
    }
  /* info */
  for (uint32_t i = 0; i < f->nargs; i++) {
    lm_spmd_value *pv = &info->inputs[i];
    pv->global = f->arg_types[i];
    to_sharding(P, &P->ch[body->args[i]], pv->global.rank, &pv->sh);
    pv->sh.devices = P->mesh_procs;
    local_of(P, &pv->global, &P->ch[body->args[i]], &pv->local);
  }
  for (uint32_t j = 0; j < f->nresults; j++) {
    lm_spmd_value *pv = &info->outputs[j];
    pv->global = f->result_types[j];
    to_sharding(P, &P->res_sh[j], pv->global.rank, &pv->sh);
    pv->sh.devices = P->mesh_procs;
    local_of(P, &pv->global, &P->res_sh[j], &pv->local);
  }
  /* lowering */
  lm_tb_put(&P->out, "module");
  if (m->name) lm_tb_put(&P->out, " @%s", m->name);
  lm_tb_put(&P->out, " attributes {mhlo.num_partitions = %u : i32, mhlo.num_replicas = 1 : i32} {\n", P->nproc);
  for (uint32_t i = 0; i < m->nfuncs; i++)
    if (strcmp(m->funcs[i].name, "main")) lm_tb_put_func(&P->out, &m->funcs[i]);
  lm_tb_put(&P->out, "  func.func public @main(");
  for (uint32_t a = 0; a < body->nargs; a++) {
    uint32_t v = body->args[a];
    P->loc[v] = nid(P);
    lm_tb_put(&P->out, "%s%%p%u: %s", a ? ", " : "", P->loc[v], ts(&info->inputs[a].local));
    lm_tb_put(&P->ex, "argument %u %s ", a, ts(&info->inputs[a].global));
    put_vsh(P, &P->ex, &P->ch[v], info->inputs[a].global.rank);
    lm_tb_put(&P->ex, " -> local %s\n", ts(&info->inputs[a].local));
  }
  lm_tb_put(&P->out, ") -> (");
  for (uint32_t j = 0; j < f->nresults; j++) lm_tb_put(&P->out, "%s%s", j ? ", " : "", ts(&info->outputs[j].local));
  lm_tb_put(&P->out, ") {\n");
  pid(P); /* up front: while bodies use them too, and values made inside a region stay there */
  zero(P);
  for (uint32_t k = 0; k < body->nops; k++) {
    LM_TRY(lower_op(P, &body->ops[k], k));
    if (P->out.n > MAX_TEXT || P->ex.n > MAX_TEXT)
      return lm_errf(P->err, LOOM_UNSUPPORTED, "the partitioned program would exceed %d MiB of text", MAX_TEXT >> 20);
  }
  lm_tb_put(&P->out, "  }\n}\n");
  for (uint32_t j = 0; j < f->nresults; j++) {
    lm_tb_put(&P->ex, "result %u %s ", j, ts(&info->outputs[j].global));
    put_vsh(P, &P->ex, &P->res_sh[j], info->outputs[j].global.rank);
    lm_tb_put(&P->ex, " -> local %s\n", ts(&info->outputs[j].local));
  }
  lm_tb_put(&P->ex, "total: %u collectives moving %.0f bytes per launch, %u fallbacks to replication\n", P->ncoll,
            P->bytes_total, P->nfallback);
  if (P->out.oom || P->ex.oom) return lm_errf(P->err, LOOM_NO_MEMORY, "out of host memory writing the partitioned program");
  return 0;
}

int lm_partition(const lm_module *m, lm_spmd_info *info, char **local_text, char **explain, lm_err *err) {
  if (local_text) *local_text = NULL;
  if (explain) *explain = NULL;
  const lm_func *f = lm_module_func(m, "main");
  if (!f || f->body.nblocks != 1 || !f->body.blocks[0].nops) return lm_errf(err, LOOM_VERIFY, "the module has no @main");
  pt P = {.m = m, .f = f, .err = err, .pid = -1, .zero = -1, .nproc = info->nproc};
  int rc = run(&P, info);
  if (rc == 0) {
    free(info->mesh_procs);
    info->mesh_procs = P.mesh_procs;
    P.mesh_procs = NULL;
    for (uint32_t i = 0; i < info->ninputs; i++) info->inputs[i].sh.devices = info->mesh_procs;
    for (uint32_t j = 0; j < info->noutputs; j++) info->outputs[j].sh.devices = info->mesh_procs;
    if (local_text) {
      *local_text = P.out.s;
      P.out.s = NULL;
    }
    if (explain) {
      *explain = P.ex.s;
      P.ex.s = NULL;
    }
  }
  free(P.out.s);
  free(P.ex.s);
  free(P.mesh_procs);
  free(P.proc_pos);
  free(P.ch);
  free(P.known);
  free(P.fixed);
  free(P.top);
  free(P.rw);
  free(P.def);
  free(P.loc);
  free(P.res_sh);
  free(P.cache);
  free(P.types);
  lm_arena_free(&P.ar);
  return rc;
}
