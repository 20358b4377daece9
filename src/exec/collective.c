/* Op family: collective. The StableHLO collective ops (spec 'all_gather', 'all_reduce',
 * 'all_to_all', 'collective_broadcast', 'collective_permute', 'reduce_scatter', the newer
 * 'collective_reduce', and the legacy 'cross-replica-sum') on top of the hooks of collective.h.
 *
 * Each kernel forms the caller's process group from the op's attributes and the run's process
 * grid (spec 'Process groups'), checks it, lays its tensors out as the contiguous blocks the
 * hooks exchange, and calls one hook per operand. replica_id / partition_id live in misc.c.
 *
 * Conventions (Loom's reading where the spec is silent, shared with the reference interpreter's
 * tests): entries -1 in replica_groups pad ragged groups and are dropped; empty (or absent)
 * replica_groups mean one group of every id; a process in no group is an error for the ops whose
 * groups must cover every process (all_reduce, all_gather, reduce_scatter, all_to_all,
 * collective_reduce, cross-replica-sum) and gets zeros from collective_broadcast. A group of one
 * process is computed here without any hook, so single-device programs with collectives run
 * anywhere. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include "exec/collective.h"
#include "exec/interp.h"
#include "exec/ops_util.h"
#include "exec/scalar_eval.h"

#define MAX_PROCS (1u << 20)      /* processes in a grid */
#define MAX_GROUP_VALUES (1u << 22) /* entries of a replica_groups attribute */

/* ---- attributes ---- */

/* channel_id from `channel_handle = #stablehlo.channel_handle<handle = H, type = T>` (or a bare
 * integer `channel_id`); 0 when absent. */
static int64_t channel_id(const lm_op *op) {
  const lm_attr *a = lm_op_attr(op, "channel_handle");
  if (a && (a->kind == LM_ATTR_STRUCT || a->kind == LM_ATTR_DICT))
    return lm_attr_int_or(lm_attrs_get(a->fields, a->n, "handle"), 0);
  if (a) return lm_attr_int_or(a, 0);
  return lm_attr_int_or(lm_op_attr(op, "channel_id"), 0);
}

static bool unit_flag(const lm_op *op, const char *name) {
  const lm_attr *a = lm_op_attr(op, name);
  if (!a) return false;
  if (a->kind == LM_ATTR_UNIT) return true;
  return lm_attr_int_or(a, 0) != 0;
}

/* Integer attribute that must be present. */
static int int_attr(const lm_op *op, const char *name, int64_t *v, lm_err *err) {
  const lm_attr *a = lm_op_attr(op, name);
  if (!a || (a->kind != LM_ATTR_INT && a->kind != LM_ATTR_BOOL && a->kind != LM_ATTR_DENSE && a->kind != LM_ATTR_INTS))
    return lm_op_err(err, op, LOOM_VERIFY, "missing integer attribute '%s'", name);
  int64_t x[1];
  if (a->kind == LM_ATTR_INT || a->kind == LM_ATTR_BOOL) *v = a->i;
  else if (lm_attr_ints(a, x, 1) == 1) *v = x[0];
  else return lm_op_err(err, op, LOOM_VERIFY, "attribute '%s' must be one integer", name);
  return 0;
}

/* A list of integer lists (replica_groups, source_target_pairs): rows of values, flattened. */
typedef struct lists {
  int64_t *v;        /* values of every row */
  uint32_t *start;   /* [nrows + 1]: row i is v[start[i] .. start[i+1]) */
  uint32_t nrows;
  uint32_t ncols;    /* columns of a DENSE attribute (before -1 padding was dropped) */
  size_t nvals;
} lists;

static void lists_free(lists *l) {
  free(l->v);
  free(l->start);
  memset(l, 0, sizeof *l);
}

/* Reads attribute `name` of op: a rank-2 integer DENSE (rows are dim 0), or an ARRAY of integer
 * lists. drop_pad: entries -1 are padding of ragged groups and are dropped. Absent gives no rows.
 * Values other than the padding must be >= 0. */
static int lists_read(const lm_op *op, const char *name, bool drop_pad, lists *l, lm_err *err) {
  memset(l, 0, sizeof *l);
  const lm_attr *a = lm_op_attr(op, name);
  if (!a) return 0;
  int64_t rows, cols = -1;
  size_t total;
  if (a->kind == LM_ATTR_DENSE) {
    if (!a->type || a->type->kind != LM_TYPE_TENSOR || !(lm_dtype_is_int(a->type->dtype)) ||
        (a->type->rank != 2 && !(a->type->rank == 1 && a->type->dims[0] == 0)))
      return lm_op_err(err, op, LOOM_VERIFY, "'%s' must be a 2-dimensional integer tensor constant", name);
    rows = a->type->dims[0];
    cols = a->type->rank == 2 ? a->type->dims[1] : 0;
    if (rows < 0 || cols < 0 || (cols && rows > (int64_t)MAX_GROUP_VALUES / cols))
      return lm_op_err(err, op, LOOM_VERIFY, "'%s' has too many values (at most %u)", name, MAX_GROUP_VALUES);
    total = (size_t)(rows * cols);
  } else if (a->kind == LM_ATTR_ARRAY) {
    rows = a->n;
    total = 0;
    for (uint32_t i = 0; i < a->n; i++) {
      const lm_attr *it = &a->items[i];
      if (it->kind != LM_ATTR_ARRAY && it->kind != LM_ATTR_INTS && !(it->kind == LM_ATTR_DENSE && it->type))
        return lm_op_err(err, op, LOOM_VERIFY, "'%s' row %u is not a list of integers", name, i);
      size_t n = it->kind == LM_ATTR_DENSE ? (size_t)lm_type_numel(it->type) : it->n;
      total += n;
      if (total > MAX_GROUP_VALUES)
        return lm_op_err(err, op, LOOM_VERIFY, "'%s' has too many values (at most %u)", name, MAX_GROUP_VALUES);
    }
  } else {
    return lm_op_err(err, op, LOOM_VERIFY, "'%s' must be a 2-dimensional integer tensor constant", name);
  }
  if (rows > (int64_t)MAX_GROUP_VALUES)
    return lm_op_err(err, op, LOOM_VERIFY, "'%s' has too many rows (at most %u)", name, MAX_GROUP_VALUES);
  l->v = malloc((total ? total : 1) * sizeof *l->v);
  l->start = calloc((size_t)rows + 1, sizeof *l->start);
  if (!l->v || !l->start) {
    lists_free(l);
    return lm_op_err(err, op, LOOM_NO_MEMORY, "out of host memory");
  }
  l->nrows = (uint32_t)rows;
  l->ncols = cols < 0 ? 0 : (uint32_t)cols;
  if (a->kind == LM_ATTR_DENSE) {
    if (total && lm_attr_ints(a, l->v, (int)total) != (int)total) {
      lists_free(l);
      return lm_op_err(err, op, LOOM_VERIFY, "'%s' must be a 2-dimensional integer tensor constant", name);
    }
    for (int64_t r = 0; r <= rows; r++) l->start[r] = (uint32_t)(r * cols);
  } else {
    size_t at = 0;
    for (uint32_t i = 0; i < a->n; i++) {
      const lm_attr *it = &a->items[i];
      size_t n = it->kind == LM_ATTR_DENSE ? (size_t)lm_type_numel(it->type) : it->n;
      if (n && lm_attr_ints(it, l->v + at, (int)n) != (int)n) {
        lists_free(l);
        return lm_op_err(err, op, LOOM_VERIFY, "'%s' row %u is not a list of integers", name, i);
      }
      at += n;
      l->start[i + 1] = (uint32_t)at;
    }
  }
  l->nvals = total;
  /* drop padding, check signs */
  size_t w = 0;
  for (uint32_t r = 0; r < l->nrows; r++) {
    uint32_t s = l->start[r], e = l->start[r + 1];
    l->start[r] = (uint32_t)w;
    for (uint32_t i = s; i < e; i++) {
      int64_t x = l->v[i];
      if (x == -1 && drop_pad) continue;
      if (x < 0) {
        int64_t bad = x;
        lists_free(l);
        return lm_op_err(err, op, LOOM_VERIFY, "'%s' holds %lld; ids are >= 0%s", name, (long long)bad,
                         drop_pad ? " (-1 only pads ragged groups)" : "");
      }
      l->v[w++] = x;
    }
  }
  l->start[l->nrows] = (uint32_t)w;
  l->nvals = w;
  return 0;
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

/* True (and *dup the repeated value) if some value of v[n] appears twice. */
static bool has_duplicate(const int64_t *v, size_t n, int64_t *dup) {
  if (n < 2) return false;
  int64_t *s = malloc(n * sizeof *s);
  if (!s) return false; /* cannot check: the run-time group search still finds a unique position */
  memcpy(s, v, n * sizeof *s);
  qsort(s, n, sizeof *s, cmp_i64);
  bool found = false;
  for (size_t i = 1; i < n && !found; i++)
    if (s[i] == s[i - 1]) { *dup = s[i]; found = true; }
  free(s);
  return found;
}

/* Checks replica_groups at compile time (spec C: unique values, ids >= 0). */
static int verify_groups(const lm_op *op, lm_err *err) {
  lists l;
  LM_TRY(lists_read(op, "replica_groups", true, &l, err));
  int64_t dup;
  bool bad = has_duplicate(l.v, l.nvals, &dup);
  lists_free(&l);
  if (bad) return lm_op_err(err, op, LOOM_VERIFY, "replica_groups lists %lld more than once", (long long)dup);
  return 0;
}

/* ---- process groups (spec 'Process groups') ---- */

typedef enum gmode {
  GM_CROSS_REPLICA,
  GM_CROSS_PARTITION,
  GM_CROSS_REPLICA_AND_PARTITION,
  GM_FLATTENED_IDS,
} gmode;

static const char *const g_mode_names[] = {"cross_replica", "cross_partition", "cross_replica_and_partition",
                                           "flattened_ids"};

/* all_gather, all_reduce, reduce_scatter, collective_reduce: by channel_id and
 * use_global_device_ids. */
static gmode mode_reduce(const lm_op *op) {
  bool ugdi = unit_flag(op, "use_global_device_ids");
  if (channel_id(op) <= 0) return GM_CROSS_REPLICA; /* ugdi without a channel is refused by the verifier */
  return ugdi ? GM_FLATTENED_IDS : GM_CROSS_REPLICA_AND_PARTITION;
}

/* all_to_all, collective_permute, collective_broadcast: by channel_id only. */
static gmode mode_channel(const lm_op *op) { return channel_id(op) > 0 ? GM_CROSS_PARTITION : GM_CROSS_REPLICA; }

typedef struct pgroup {
  uint32_t *ids;  /* process ids (replica_id * num_partitions + partition_id) in group order */
  uint32_t n;
  uint32_t rank;  /* the caller's index */
  bool member;    /* false: the caller is in no group (ids is NULL) */
} pgroup;

/* The run's grid and the caller's place in it. */
static int grid(lm_kctx *k, int64_t *R, int64_t *P, int64_t *r, int64_t *p) {
  *R = k->opts->num_replicas;
  *P = k->opts->num_partitions;
  *r = k->opts->replica_id;
  *p = k->opts->partition_id;
  if (*R < 1 || *P < 1 || *R > (int64_t)MAX_PROCS || *P > (int64_t)MAX_PROCS / *R)
    return lm_kerr(k, LOOM_INVALID_ARGUMENT, "process grid of %lld replicas x %lld partitions is not supported",
                   (long long)*R, (long long)*P);
  if (*r < 0 || *r >= *R || *p < 0 || *p >= *P)
    return lm_kerr(k, LOOM_INVALID_ARGUMENT, "process (%lld, %lld) is outside the %lld x %lld process grid",
                   (long long)*r, (long long)*p, (long long)*R, (long long)*P);
  return 0;
}

/* Forms the caller's process group from the groups in l (ids of the mode's kind; no rows = one
 * group of every id). must_cover: the groups must cover every id of the mode (else an error on
 * every process alike); otherwise a caller in no group gets member = false. */
static int form_group(lm_kctx *k, const lists *l, gmode mode, bool must_cover, const char *attr, pgroup *g) {
  memset(g, 0, sizeof *g);
  int64_t R, P, r, p;
  LM_TRY(grid(k, &R, &P, &r, &p));
  int64_t bound = mode == GM_CROSS_PARTITION ? P : mode == GM_FLATTENED_IDS ? R * P : R;
  int64_t key = mode == GM_CROSS_PARTITION ? p : mode == GM_FLATTENED_IDS ? r * P + p : r;
  const char *what = mode == GM_CROSS_PARTITION ? "partition" : mode == GM_FLATTENED_IDS ? "process" : "replica";
  for (size_t i = 0; i < l->nvals; i++)
    if (l->v[i] >= bound)
      return lm_kerr(k, LOOM_INVALID_ARGUMENT, "%s names %s %lld, but the run has %lld %ss (%s groups)", attr, what,
                     (long long)l->v[i], (long long)bound, what, g_mode_names[mode]);
  int64_t dup;
  if (has_duplicate(l->v, l->nvals, &dup))
    return lm_kerr(k, LOOM_INVALID_ARGUMENT, "%s lists %s %lld more than once", attr, what, (long long)dup);
  if (must_cover && l->nrows > 0 && (int64_t)l->nvals != bound)
    return lm_kerr(k, LOOM_INVALID_ARGUMENT,
                   "%s cover %zu of the run's %lld %ss; every %s must be in a group (%s groups)", attr, l->nvals,
                   (long long)bound, what, what, g_mode_names[mode]);
  /* the row holding key */
  const int64_t *row = NULL;
  uint32_t len = 0;
  if (l->nrows == 0) {
    len = (uint32_t)bound;
  } else {
    for (uint32_t i = 0; i < l->nrows && !row; i++)
      for (uint32_t j = l->start[i]; j < l->start[i + 1]; j++)
        if (l->v[j] == key) {
          row = l->v + l->start[i];
          len = l->start[i + 1] - l->start[i];
          break;
        }
    if (!row) {
      if (must_cover)
        return lm_kerr(k, LOOM_INVALID_ARGUMENT, "%s %lld is in no group of %s", what, (long long)key, attr);
      return 0; /* member = false */
    }
  }
  uint32_t n = mode == GM_CROSS_REPLICA_AND_PARTITION ? len * (uint32_t)P : len;
  g->ids = malloc((n ? n : 1) * sizeof *g->ids);
  if (!g->ids) return lm_kerr(k, LOOM_NO_MEMORY, "out of host memory");
  g->n = n;
  uint32_t at = 0;
#define ID(j) (row ? row[j] : (int64_t)(j))
  switch (mode) {
    case GM_CROSS_REPLICA:
      for (uint32_t j = 0; j < len; j++) g->ids[at++] = (uint32_t)(ID(j) * P + p);
      break;
    case GM_CROSS_PARTITION:
      for (uint32_t j = 0; j < len; j++) g->ids[at++] = (uint32_t)(r * P + ID(j));
      break;
    case GM_CROSS_REPLICA_AND_PARTITION:
      for (int64_t q = 0; q < P; q++)
        for (uint32_t j = 0; j < len; j++) g->ids[at++] = (uint32_t)(ID(j) * P + q);
      break;
    case GM_FLATTENED_IDS:
      for (uint32_t j = 0; j < len; j++) g->ids[at++] = (uint32_t)ID(j);
      break;
  }
#undef ID
  uint32_t self = (uint32_t)(r * P + p);
  g->rank = UINT32_MAX;
  for (uint32_t j = 0; j < n; j++)
    if (g->ids[j] == self) g->rank = j;
  if (g->rank == UINT32_MAX) { /* cannot happen: the row holds key */
    free(g->ids);
    g->ids = NULL;
    return lm_kerr(k, LOOM_INTERNAL, "process %u not found in its own group", self);
  }
  g->member = true;
  return 0;
}

/* The caller's group for op from its replica_groups. */
static int op_group(lm_kctx *k, gmode mode, bool must_cover, pgroup *g) {
  lists l;
  LM_TRY(lists_read(k->op, "replica_groups", true, &l, k->err));
  int rc = form_group(k, &l, mode, must_cover, "replica_groups", g);
  lists_free(&l);
  return rc;
}

static void pgroup_free(pgroup *g) {
  free(g->ids);
  g->ids = NULL;
}

/* ---- calling the hooks ---- */

static const struct lm_collectives *hooks(lm_kctx *k) { return k->opts->coll; }

/* True if h has hook `field` set (a table older than this header may end before it). */
#define HAS_HOOK(h, field)                                                                          \
  ((h) && (h)->struct_size >= offsetof(struct lm_collectives, field) + sizeof((h)->field) && (h)->field)

/* Fails unless the run has the hook (`have`) (a group of more than one process needs one). */
static int need_hook(lm_kctx *k, bool have, const pgroup *g) {
  if (have) return 0;
  return lm_kerr(k, LOOM_UNSUPPORTED,
                 "needs a group of %u processes, and this run has no collective support (run the program on a "
                 "cluster, or through interpreter.run_parallel)",
                 g->n);
}

static lm_coll_call make_call(lm_kctx *k, const pgroup *g, uint64_t seq) {
  return (lm_coll_call){.group = g->ids, .size = g->n, .rank = g->rank, .seq = seq, .cancel = k->opts->cancel,
                        .what = k->op->name};
}

/* Prefixes a hook's error with the op and its location. */
static int hook_err(lm_kctx *k, int rc) {
  if (rc < 0)
    lm_err_prefix(k->err, "%s at %s:%u:%u", k->op->name, k->op->loc.file ? k->op->loc.file : "<unknown>",
                  k->op->loc.line, k->op->loc.col);
  return rc;
}

/* The next sequence number of the run: every process consumes one per collective call it makes or
 * skips (a group of one), in program order, so equal calls carry equal numbers everywhere. */
static uint64_t next_seq(lm_kctx *k) { return k->rs->coll_seq++; }

/* ---- reductions ---- */

typedef struct combine_ctx {
  lm_kctx *k;
  size_t es;          /* element bytes */
  lm_sprog *sp;       /* compiled body, or NULL */
  lm_body body;       /* the generic path when sp is NULL */
  bool has_body;
} combine_ctx;

/* lm_coll_combine_fn: out[i] = body(lhs[i], rhs[i]), element by element through the compiled body
 * or the region itself (spec 'reduce': the body applied to a pair). */
static int combine_cb(void *user, const void *lhs, const void *rhs, void *out, size_t count, lm_err *err) {
  combine_ctx *c = user;
  _Alignas(16) unsigned char tmp[16];
  const unsigned char *a = lhs, *b = rhs;
  unsigned char *o = out;
  size_t es = c->es;
  for (size_t i = 0; i < count; i++) {
    const void *args[2] = {a + i * es, b + i * es};
    void *res[1] = {tmp};
    if (c->sp) {
      lm_sprog_run(c->sp, args, res);
    } else {
      int rc = lm_body_call(&c->body, args, res, &es);
      if (rc < 0) {
        if (err && err != c->k->err) lm_errf(err, rc, "%s", c->k->err->msg);
        return rc;
      }
    }
    memcpy(o + i * es, tmp, es);
  }
  return 0;
}

/* Chooses how the op's reduction body (region 0) combines elements of dtype dt: a built-in op
 * when the body is one binary op of its arguments, else the combine callback. */
static int setup_reduction(lm_kctx *k, lm_dtype dt, combine_ctx *cc, lm_coll_reduction *red) {
  memset(cc, 0, sizeof *cc);
  memset(red, 0, sizeof *red);
  red->dtype = dt;
  lm_coll_op op = 0;
  bool bitwise_ok = lm_dtype_is_int(dt) || lm_dtype_is_pred(dt);
  switch (lm_region_simple_binop(k->op, 0, k->fn)) {
    case LM_OP_ADD: op = LM_COLL_SUM; break;
    case LM_OP_MULTIPLY: op = LM_COLL_PROD; break;
    case LM_OP_MINIMUM: op = LM_COLL_MIN; break;
    case LM_OP_MAXIMUM: op = LM_COLL_MAX; break;
    case LM_OP_AND: op = bitwise_ok ? LM_COLL_AND : 0; break;
    case LM_OP_OR: op = bitwise_ok ? LM_COLL_OR : 0; break;
    case LM_OP_XOR: op = bitwise_ok ? LM_COLL_XOR : 0; break;
    default: break;
  }
  if (lm_ops_generic_only) op = 0;
  if (op) {
    red->op = op;
    return 0;
  }
  cc->k = k;
  cc->es = lm_dtype_size(dt);
  if (cc->es == 0 || cc->es > 16) return lm_kerr(k, LOOM_UNSUPPORTED, "element type %s", lm_dtype_name(dt));
  cc->sp = lm_sprog_compile(k->op, 0, k->fn, 1);
  if (!cc->sp) {
    LM_TRY(lm_body_init(&cc->body, k, 0, 1));
    cc->has_body = true;
  }
  red->op = LM_COLL_CUSTOM;
  red->combine = combine_cb;
  red->combine_user = cc;
  return 0;
}

static void combine_free(combine_ctx *cc) {
  if (cc->sp) lm_sprog_free(cc->sp);
  if (cc->has_body) lm_body_free(&cc->body);
  cc->sp = NULL;
  cc->has_body = false;
}

/* Verifies region 0 as a reduction body on element type dt: (tensor<dt>, tensor<dt>) -> tensor<dt>
 * (spec all_reduce C5). */
static int verify_body(const lm_op *op, const lm_func *fn, lm_dtype dt, lm_err *err) {
  if (op->nregions != 1 || op->regions[0].nblocks != 1)
    return lm_op_err(err, op, LOOM_VERIFY, "expects one reduction body region");
  const lm_block *b = &op->regions[0].blocks[0];
  if (b->nargs != 2) return lm_op_err(err, op, LOOM_VERIFY, "reduction body takes %u arguments; 2 expected", b->nargs);
  for (uint32_t i = 0; i < 2; i++) {
    const lm_type *t = lm_vtype(fn, b->args[i]);
    if (t->kind != LM_TYPE_TENSOR || t->rank != 0 || t->dtype != dt)
      return lm_op_err(err, op, LOOM_VERIFY, "reduction body argument %u must be tensor<%s>", i, lm_dtype_name(dt));
  }
  return lm_check_region_results(op, 0, fn, 1, &dt, "reduction body", err);
}

/* ---- layout: blocks of bytes ---- */

/* dst[o][j] = src[j][o] for o < outer, j < K, blocks of `inner` bytes (gathering K blocks of
 * shape [outer][inner] into [outer][K][inner]). */
static void interleave(void *dst, const void *src, size_t outer, size_t K, size_t inner) {
  unsigned char *d = dst;
  const unsigned char *s = src;
  for (size_t o = 0; o < outer; o++)
    for (size_t j = 0; j < K; j++) memcpy(d + (o * K + j) * inner, s + (j * outer + o) * inner, inner);
}

/* dst[j][o] = src[o][j]: the inverse (splitting [outer][K][inner] into K blocks [outer][inner]). */
static void deinterleave(void *dst, const void *src, size_t outer, size_t K, size_t inner) {
  unsigned char *d = dst;
  const unsigned char *s = src;
  for (size_t j = 0; j < K; j++)
    for (size_t o = 0; o < outer; o++) memcpy(d + (j * outer + o) * inner, s + (o * K + j) * inner, inner);
}

/* Elements before dimension d (outer) and from d on (inner) of t. */
static void split_at(const lm_type *t, int d, size_t *outer, size_t *inner) {
  size_t o = 1, i = 1;
  for (int x = 0; x < t->rank; x++) {
    if (x < d) o *= (size_t)t->dims[x];
    else i *= (size_t)t->dims[x];
  }
  *outer = o;
  *inner = i;
}

/* Scratch of n bytes (host memory; freed by the caller). */
static int scratch(lm_kctx *k, size_t n, void **out) {
  *out = malloc(n ? n : 1);
  return *out ? 0 : lm_kerr(k, LOOM_NO_MEMORY, "out of host memory (%zu bytes of scratch)", n);
}

/* ---- verifiers shared by the ops ---- */

/* Spec C4/C5 of all_gather / all_reduce / reduce_scatter: use_global_device_ids needs a channel. */
static int verify_reduce_mode(const lm_op *op, lm_err *err) {
  if (unit_flag(op, "use_global_device_ids") && channel_id(op) <= 0)
    return lm_op_err(err, op, LOOM_VERIFY, "use_global_device_ids needs a channel_handle with handle > 0");
  return verify_groups(op, err);
}

static int verify_same_types(const lm_op *op, const lm_func *fn, lm_err *err) {
  if (op->nin != op->nout || op->nin == 0)
    return lm_op_err(err, op, LOOM_VERIFY, "expects as many results as operands (at least one), has %u and %u",
                     op->nin, op->nout);
  LM_TRY(lm_check_tensors(op, fn, op->nin, op->nout, err));
  return lm_check_results_like_operands(op, fn, err);
}

/* ---- all_reduce, cross-replica-sum, collective_reduce ---- */

static int do_all_reduce(lm_kctx *k, const pgroup *g, const lm_coll_reduction *red, const void *send, void *recv,
                         size_t count) {
  uint64_t seq = next_seq(k);
  size_t bytes = count * lm_dtype_size(red->dtype);
  if (bytes == 0) return 0;
  if (g->n == 1) {
    if (recv != send) memcpy(recv, send, bytes);
    return 0;
  }
  const struct lm_collectives *h = hooks(k);
  LM_TRY(need_hook(k, HAS_HOOK(h, all_reduce), g));
  lm_coll_call c = make_call(k, g, seq);
  return hook_err(k, h->all_reduce(k->opts->coll_user, &c, send, recv, count, red, k->err));
}

/* spec 'all_reduce' (and 'collective_reduce' when to_root: the result lands on the group's first
 * process, the others get zeros). */
static int reduce_kernel(lm_kctx *k, lm_buffer *const *in, lm_buffer **out, bool to_root) {
  pgroup g;
  LM_TRY(op_group(k, mode_reduce(k->op), true, &g));
  combine_ctx cc;
  lm_coll_reduction red;
  int rc = setup_reduction(k, (lm_dtype)in[0]->type.dtype, &cc, &red);
  for (uint32_t i = 0; rc == 0 && i < k->op->nin; i++) {
    size_t count = (size_t)lm_type_numel(&in[i]->type);
    rc = do_all_reduce(k, &g, &red, in[i]->data, out[i]->data, count);
    if (rc == 0 && to_root && g.rank != 0 && out[i]->nbytes) memset(out[i]->data, 0, out[i]->nbytes);
  }
  combine_free(&cc);
  pgroup_free(&g);
  return rc;
}

static int k_all_reduce(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) { return reduce_kernel(k, in, out, false); }
static int k_collective_reduce(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  return reduce_kernel(k, in, out, true);
}

static int v_all_reduce(const lm_op *op, const lm_func *fn, lm_err *err) {
  LM_TRY(verify_same_types(op, fn, err));
  lm_dtype dt = (lm_dtype)lm_vtype(fn, op->in[0])->dtype;
  for (uint32_t i = 1; i < op->nin; i++)
    if (lm_vtype(fn, op->in[i])->dtype != dt)
      return lm_op_err(err, op, LOOM_VERIFY, "operand %u is of %s, operand 0 of %s: one reduction body serves both", i,
                       lm_dtype_name((lm_dtype)lm_vtype(fn, op->in[i])->dtype), lm_dtype_name(dt));
  LM_TRY(verify_body(op, fn, dt, err));
  return verify_reduce_mode(op, err);
}

/* The legacy "stablehlo.cross-replica-sum" (XLA CrossReplicaSum): a sum over cross_replica
 * groups. */
static int k_cross_replica_sum(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  pgroup g;
  LM_TRY(op_group(k, GM_CROSS_REPLICA, true, &g));
  int rc = 0;
  for (uint32_t i = 0; rc == 0 && i < k->op->nin; i++) {
    lm_coll_reduction red = {.dtype = (lm_dtype)in[i]->type.dtype, .op = LM_COLL_SUM};
    rc = do_all_reduce(k, &g, &red, in[i]->data, out[i]->data, (size_t)lm_type_numel(&in[i]->type));
  }
  pgroup_free(&g);
  return rc;
}

static int v_cross_replica_sum(const lm_op *op, const lm_func *fn, lm_err *err) {
  LM_TRY(verify_same_types(op, fn, err));
  return verify_groups(op, err);
}

/* ---- all_gather (spec 'all_gather') ---- */

/* True when big and small have one element type and shape but in dimension d, where big's size
 * is a whole multiple of small's (and 0 when small's is). */
static bool grown_in_dim(const lm_type *big, const lm_type *small, int64_t d) {
  if (big->rank != small->rank || big->dtype != small->dtype) return false;
  for (int x = 0; x < small->rank; x++) {
    bool ok = x == d ? (small->dims[x] == 0 ? big->dims[x] == 0 : big->dims[x] % small->dims[x] == 0)
                     : big->dims[x] == small->dims[x];
    if (!ok) return false;
  }
  return true;
}

/* The shapes of all_gather (each result is its operand grown in dimension all_gather_dim) or,
 * when scatter, of reduce_scatter (each operand is its result grown in scatter_dimension, and the
 * operands share one element type): the shape constraints of spec 'all_gather' and 'reduce_scatter'. */
static int verify_gather_scatter_shapes(const lm_op *op, const lm_func *fn, bool scatter, lm_err *err) {
  if (op->nin != op->nout || op->nin == 0)
    return lm_op_err(err, op, LOOM_VERIFY, "expects as many results as operands (at least one)");
  LM_TRY(lm_check_tensors(op, fn, op->nin, op->nout, err));
  const char *dim_attr = scatter ? "scatter_dimension" : "all_gather_dim";
  int64_t d;
  LM_TRY(int_attr(op, dim_attr, &d, err));
  lm_dtype dt = (lm_dtype)lm_vtype(fn, op->in[0])->dtype;
  for (uint32_t i = 0; i < op->nin; i++) {
    const lm_type *t = lm_vtype(fn, op->in[i]), *r = lm_vtype(fn, op->out[i]);
    if (scatter && t->dtype != dt) return lm_op_err(err, op, LOOM_VERIFY, "operands must share one element type");
    if (d < 0 || d >= t->rank)
      return lm_op_err(err, op, LOOM_VERIFY, "%s %lld is outside [0, %d) of operand %u", dim_attr, (long long)d,
                       t->rank, i);
    if (!(scatter ? grown_in_dim(t, r, d) : grown_in_dim(r, t, d))) {
      char a[256], b[256];
      return lm_op_err(err, op, LOOM_VERIFY,
                       "result %u is %s; for operand %s it must differ only in dimension %lld, by a whole factor", i,
                       lm_type_str(r, a, sizeof a), lm_type_str(t, b, sizeof b), (long long)d);
    }
  }
  return 0;
}

static int v_all_gather(const lm_op *op, const lm_func *fn, lm_err *err) {
  LM_TRY(verify_gather_scatter_shapes(op, fn, false, err));
  return verify_reduce_mode(op, err);
}

static int k_all_gather(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  int64_t d = lm_attr_int_or(lm_op_attr(k->op, "all_gather_dim"), 0);
  pgroup g;
  LM_TRY(op_group(k, mode_reduce(k->op), true, &g));
  int rc = 0;
  for (uint32_t i = 0; rc == 0 && i < k->op->nin; i++) {
    const lm_type *t = &in[i]->type;
    uint64_t seq = next_seq(k);
    if (out[i]->type.dims[d] != t->dims[d] * (int64_t)g.n) {
      char a[256], b[256];
      rc = lm_kerr(k, LOOM_SHAPE_MISMATCH, "result %u is %s, but gathering operand %s from a group of %u processes "
                   "gives %lld in dimension %lld", i, lm_type_str(&out[i]->type, a, sizeof a),
                   lm_type_str(t, b, sizeof b), g.n, (long long)(t->dims[d] * (int64_t)g.n), (long long)d);
      break;
    }
    size_t bytes = in[i]->nbytes;
    if (bytes == 0) continue;
    if (g.n == 1) {
      memcpy(out[i]->data, in[i]->data, bytes);
      continue;
    }
    const struct lm_collectives *h = hooks(k);
    if ((rc = need_hook(k, HAS_HOOK(h, all_gather), &g)) < 0) break;
    size_t outer, inner;
    split_at(t, (int)d, &outer, &inner);
    void *tmp = out[i]->data;
    if (outer > 1 && (rc = scratch(k, out[i]->nbytes, &tmp)) < 0) break;
    lm_coll_call c = make_call(k, &g, seq);
    rc = hook_err(k, h->all_gather(k->opts->coll_user, &c, in[i]->data, tmp, bytes, k->err));
    if (rc == 0 && outer > 1) interleave(out[i]->data, tmp, outer, g.n, bytes / outer);
    if (tmp != out[i]->data) free(tmp);
  }
  pgroup_free(&g);
  return rc;
}

/* ---- reduce_scatter (spec 'reduce_scatter') ---- */

static int v_reduce_scatter(const lm_op *op, const lm_func *fn, lm_err *err) {
  LM_TRY(verify_gather_scatter_shapes(op, fn, true, err));
  LM_TRY(verify_body(op, fn, (lm_dtype)lm_vtype(fn, op->in[0])->dtype, err));
  return verify_reduce_mode(op, err);
}

static int k_reduce_scatter(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  int64_t d = lm_attr_int_or(lm_op_attr(k->op, "scatter_dimension"), 0);
  pgroup g;
  LM_TRY(op_group(k, mode_reduce(k->op), true, &g));
  combine_ctx cc;
  lm_coll_reduction red;
  int rc = setup_reduction(k, (lm_dtype)in[0]->type.dtype, &cc, &red);
  for (uint32_t i = 0; rc == 0 && i < k->op->nin; i++) {
    const lm_type *t = &in[i]->type;
    uint64_t seq = next_seq(k);
    if (t->dims[d] != out[i]->type.dims[d] * (int64_t)g.n) {
      char a[256], b[256];
      rc = lm_kerr(k, LOOM_SHAPE_MISMATCH, "operand %u is %s; scattering dimension %lld over a group of %u processes "
                   "needs %lld there, as result %s says", i, lm_type_str(t, b, sizeof b), (long long)d, g.n,
                   (long long)(out[i]->type.dims[d] * (int64_t)g.n), lm_type_str(&out[i]->type, a, sizeof a));
      break;
    }
    size_t count = (size_t)lm_type_numel(&out[i]->type);
    if (in[i]->nbytes == 0 || count == 0) continue;
    if (g.n == 1) {
      memcpy(out[i]->data, in[i]->data, out[i]->nbytes);
      continue;
    }
    const struct lm_collectives *h = hooks(k);
    if ((rc = need_hook(k, HAS_HOOK(h, reduce_scatter), &g)) < 0) break;
    size_t outer, inner;
    split_at(t, (int)d, &outer, &inner);
    const void *send = in[i]->data;
    void *tmp = NULL;
    if (outer > 1) {
      if ((rc = scratch(k, in[i]->nbytes, &tmp)) < 0) break;
      deinterleave(tmp, in[i]->data, outer, g.n, out[i]->nbytes / outer);
      send = tmp;
    }
    lm_coll_call c = make_call(k, &g, seq);
    rc = hook_err(k, h->reduce_scatter(k->opts->coll_user, &c, send, out[i]->data, count, &red, k->err));
    free(tmp);
  }
  combine_free(&cc);
  pgroup_free(&g);
  return rc;
}

/* ---- all_to_all (spec 'all_to_all') ---- */

static int v_all_to_all(const lm_op *op, const lm_func *fn, lm_err *err) {
  if (op->nin != op->nout || op->nin == 0)
    return lm_op_err(err, op, LOOM_VERIFY, "expects as many results as operands (at least one)");
  LM_TRY(lm_check_tensors(op, fn, op->nin, op->nout, err));
  int64_t s, c, n;
  LM_TRY(int_attr(op, "split_dimension", &s, err));
  LM_TRY(int_attr(op, "concat_dimension", &c, err));
  LM_TRY(int_attr(op, "split_count", &n, err));
  if (n <= 0 || n > (int64_t)MAX_PROCS)
    return lm_op_err(err, op, LOOM_VERIFY, "split_count %lld must be in [1, %u]", (long long)n, MAX_PROCS);
  for (uint32_t i = 0; i < op->nin; i++) {
    const lm_type *t = lm_vtype(fn, op->in[i]), *r = lm_vtype(fn, op->out[i]);
    if (s < 0 || s >= t->rank || c < 0 || c >= t->rank)
      return lm_op_err(err, op, LOOM_VERIFY, "split_dimension %lld / concat_dimension %lld outside [0, %d) of operand %u",
                       (long long)s, (long long)c, t->rank, i);
    if (t->dims[s] % n != 0)
      return lm_op_err(err, op, LOOM_VERIFY, "dimension %lld of operand %u (%lld) is not a multiple of split_count %lld",
                       (long long)s, i, (long long)t->dims[s], (long long)n);
    bool ok = r->rank == t->rank && r->dtype == t->dtype;
    for (int x = 0; ok && x < t->rank; x++) {
      int64_t want = t->dims[x];
      if (x == s) want /= n;
      if (x == c) want *= n;
      ok = r->dims[x] == want;
    }
    if (!ok) {
      char a[256], b[256];
      return lm_op_err(err, op, LOOM_VERIFY, "result %u is %s; operand %s split %lld ways along %lld and concatenated "
                       "along %lld gives another shape", i, lm_type_str(r, a, sizeof a), lm_type_str(t, b, sizeof b),
                       (long long)n, (long long)s, (long long)c);
    }
  }
  return verify_groups(op, err);
}

static int k_all_to_all(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  int64_t s = lm_attr_int_or(lm_op_attr(k->op, "split_dimension"), 0);
  int64_t cd = lm_attr_int_or(lm_op_attr(k->op, "concat_dimension"), 0);
  int64_t n = lm_attr_int_or(lm_op_attr(k->op, "split_count"), 1);
  pgroup g;
  LM_TRY(op_group(k, mode_channel(k->op), true, &g));
  int rc = 0;
  if (n != (int64_t)g.n)
    rc = lm_kerr(k, LOOM_INVALID_ARGUMENT, "split_count is %lld, but the caller's process group has %u processes",
                 (long long)n, g.n);
  for (uint32_t i = 0; rc == 0 && i < k->op->nin; i++) {
    const lm_type *t = &in[i]->type;
    uint64_t seq = next_seq(k);
    size_t bytes = in[i]->nbytes;
    if (bytes == 0) continue;
    size_t K = g.n, blk = bytes / K, es = lm_dtype_size((lm_dtype)t->dtype);
    /* send blocks: operand viewed as [outer_s][K][chunk] -> [K][outer_s][chunk] */
    size_t outer_s, inner_s;
    split_at(t, (int)s, &outer_s, &inner_s);
    /* result: K received blocks of shape B (operand with dim s / K) concatenated along cd */
    lm_type B = *t;
    B.dims[s] /= (int64_t)K;
    size_t outer_c, inner_c;
    split_at(&B, (int)cd, &outer_c, &inner_c);
    if (K == 1) {
      memcpy(out[i]->data, in[i]->data, bytes);
      continue;
    }
    const struct lm_collectives *h = hooks(k);
    if ((rc = need_hook(k, HAS_HOOK(h, all_to_all), &g)) < 0) break;
    void *send = in[i]->data, *recv = out[i]->data, *t1 = NULL, *t2 = NULL;
    if (outer_s > 1) {
      if ((rc = scratch(k, bytes, &t1)) < 0) break;
      deinterleave(t1, in[i]->data, outer_s, K, blk / outer_s);
      send = t1;
    }
    if (outer_c > 1) {
      if ((rc = scratch(k, bytes, &t2)) < 0) { free(t1); break; }
      recv = t2;
    }
    lm_coll_call c = make_call(k, &g, seq);
    rc = hook_err(k, h->all_to_all(k->opts->coll_user, &c, send, recv, blk, k->err));
    if (rc == 0 && outer_c > 1) interleave(out[i]->data, t2, outer_c, K, inner_c * es);
    free(t1);
    free(t2);
  }
  pgroup_free(&g);
  return rc;
}

/* ---- collective_permute (spec 'collective_permute') ---- */

static int v_collective_permute(const lm_op *op, const lm_func *fn, lm_err *err) {
  LM_TRY(verify_same_types(op, fn, err));
  if (!lm_op_attr(op, "source_target_pairs"))
    return lm_op_err(err, op, LOOM_VERIFY, "missing attribute 'source_target_pairs'");
  lists l;
  LM_TRY(lists_read(op, "source_target_pairs", false, &l, err));
  int rc = 0;
  int64_t *col = malloc((l.nrows ? l.nrows : 1) * sizeof *col);
  if (!col) rc = lm_op_err(err, op, LOOM_NO_MEMORY, "out of host memory");
  for (uint32_t r = 0; rc == 0 && r < l.nrows; r++)
    if (l.start[r + 1] - l.start[r] != 2)
      rc = lm_op_err(err, op, LOOM_VERIFY, "source_target_pairs must be an N x 2 tensor (row %u has %u values)", r,
                     l.start[r + 1] - l.start[r]);
  for (int side = 0; rc == 0 && side < 2; side++) {
    for (uint32_t r = 0; r < l.nrows; r++) col[r] = l.v[2 * r + side];
    int64_t dup;
    if (has_duplicate(col, l.nrows, &dup))
      rc = lm_op_err(err, op, LOOM_VERIFY, "%s %lld appears twice in source_target_pairs", side ? "target" : "source",
                     (long long)dup);
  }
  free(col);
  lists_free(&l);
  return rc;
}

static int k_collective_permute(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  gmode mode = mode_channel(k->op);
  int64_t R, P, r, p;
  LM_TRY(grid(k, &R, &P, &r, &p));
  lists l;
  LM_TRY(lists_read(k->op, "source_target_pairs", false, &l, k->err));
  /* the group: every replica of this partition (cross_replica) or every partition of this replica
   * (cross_partition), in id order; pairs name members by that id */
  int64_t bound = mode == GM_CROSS_PARTITION ? P : R, self = mode == GM_CROSS_PARTITION ? p : r;
  int64_t send_to = -1, recv_from = -1;
  int rc = 0;
  for (uint32_t i = 0; i < l.nrows; i++) {
    int64_t a = l.v[2 * i], b = l.v[2 * i + 1];
    if (a >= bound || b >= bound) {
      rc = lm_kerr(k, LOOM_INVALID_ARGUMENT, "source_target_pairs names %s %lld, but the run has %lld",
                   mode == GM_CROSS_PARTITION ? "partition" : "replica", (long long)(a >= bound ? a : b),
                   (long long)bound);
      break;
    }
    if (a == self) send_to = b;
    if (b == self) recv_from = a;
  }
  lists_free(&l);
  pgroup g = {0};
  if (rc == 0) {
    lists all = {0};
    rc = form_group(k, &all, mode, true, "source_target_pairs", &g);
  }
  for (uint32_t i = 0; rc == 0 && i < k->op->nin; i++) {
    uint64_t seq = next_seq(k);
    size_t bytes = in[i]->nbytes;
    if (bytes == 0) continue;
    if (g.n == 1) {
      if (recv_from == 0) memcpy(out[i]->data, in[i]->data, bytes);
      else memset(out[i]->data, 0, bytes);
      continue;
    }
    const struct lm_collectives *h = hooks(k);
    if ((rc = need_hook(k, HAS_HOOK(h, collective_permute), &g)) < 0) break;
    lm_coll_call c = make_call(k, &g, seq);
    rc = hook_err(k, h->collective_permute(k->opts->coll_user, &c, in[i]->data, out[i]->data, bytes, send_to,
                                           recv_from, k->err));
  }
  pgroup_free(&g);
  return rc;
}

/* ---- collective_broadcast (spec 'collective_broadcast') ---- */

/* Operands: data tensors, then (with has_dynamic_root) a rank-1 integer tensor holding, for each
 * data operand, the index in the group of the process whose value everyone receives; without it
 * that process is the group's first. */
static int v_collective_broadcast(const lm_op *op, const lm_func *fn, lm_err *err) {
  bool dyn = unit_flag(op, "has_dynamic_root");
  uint32_t nd = op->nin - (dyn ? 1 : 0);
  if (op->nin < (dyn ? 2u : 1u) || op->nout != nd)
    return lm_op_err(err, op, LOOM_VERIFY, "expects %s and one result per data operand",
                     dyn ? "data operands followed by a root operand" : "one or more operands");
  LM_TRY(lm_check_tensors(op, fn, op->nin, op->nout, err));
  for (uint32_t i = 0; i < nd; i++)
    if (!lm_type_equal(lm_vtype(fn, op->in[i]), lm_vtype(fn, op->out[i])))
      return lm_op_err(err, op, LOOM_VERIFY, "result %u differs from operand %u's type", i, i);
  if (dyn) {
    const lm_type *t = lm_vtype(fn, op->in[nd]);
    if (!lm_dtype_is_int((lm_dtype)t->dtype) || t->rank != 1 || t->dims[0] != (int64_t)nd)
      return lm_op_err(err, op, LOOM_VERIFY, "the root operand must be a tensor<%uxi32> (one root per data operand)", nd);
  }
  return verify_groups(op, err);
}

static int k_collective_broadcast(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  bool dyn = unit_flag(k->op, "has_dynamic_root");
  uint32_t nd = k->op->nin - (dyn ? 1 : 0);
  pgroup g;
  LM_TRY(op_group(k, mode_channel(k->op), false, &g));
  int rc = 0;
  for (uint32_t i = 0; rc == 0 && i < nd; i++) {
    uint64_t seq = next_seq(k);
    size_t bytes = in[i]->nbytes;
    if (bytes == 0) continue;
    if (!g.member) { /* in no group: zeros */
      memset(out[i]->data, 0, bytes);
      continue;
    }
    int64_t root = dyn ? lm_load_index(in[nd]->data, (lm_dtype)in[nd]->type.dtype, i) : 0;
    if (root < 0 || root >= (int64_t)g.n) {
      rc = lm_kerr(k, LOOM_INVALID_ARGUMENT, "root %lld for operand %u is outside the process group of %u", (long long)root,
                   i, g.n);
      break;
    }
    if (g.n == 1) {
      memcpy(out[i]->data, in[i]->data, bytes);
      continue;
    }
    const struct lm_collectives *h = hooks(k);
    if ((rc = need_hook(k, HAS_HOOK(h, broadcast), &g)) < 0) break;
    lm_coll_call c = make_call(k, &g, seq);
    rc = hook_err(k, h->broadcast(k->opts->coll_user, &c, (uint32_t)root, in[i]->data, out[i]->data, bytes, k->err));
  }
  pgroup_free(&g);
  return rc;
}

/* ---- registration ---- */

void lm_register_collective_kernels(void) {
  lm_kernel_register(LM_OP_ALL_REDUCE, k_all_reduce, v_all_reduce, 0);
  lm_kernel_register(LM_OP_COLLECTIVE_REDUCE, k_collective_reduce, v_all_reduce, 0);
  lm_kernel_register(LM_OP_CROSS_REPLICA_SUM, k_cross_replica_sum, v_cross_replica_sum, 0);
  lm_kernel_register(LM_OP_ALL_GATHER, k_all_gather, v_all_gather, 0);
  lm_kernel_register(LM_OP_REDUCE_SCATTER, k_reduce_scatter, v_reduce_scatter, 0);
  lm_kernel_register(LM_OP_ALL_TO_ALL, k_all_to_all, v_all_to_all, 0);
  lm_kernel_register(LM_OP_COLLECTIVE_PERMUTE, k_collective_permute, v_collective_permute, 0);
  lm_kernel_register(LM_OP_COLLECTIVE_BROADCAST, k_collective_broadcast, v_collective_broadcast, 0);
}
