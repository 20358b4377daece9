/* lm_collectives over lm_dp for one launch (spmd_coll.h): maps the executor's process groups to
 * data-plane groups (kept referenced for the launch, so repeated calls on a group cost one list
 * comparison), its call index to a tag, and its calls to the data plane's, one for one. */
#include "worker/spmd_coll.h"

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include "common/hash.h"
#include "exec/collective.h"

#define TAG_SEQ_BITS 24
#define MAX_LAUNCH_TAG ((uint64_t)1 << (64 - TAG_SEQ_BITS))

/* A data-plane group this launch has used, by its process-id list. */
typedef struct group_ent {
  struct group_ent *next;
  uint64_t key;            /* hash of ids */
  uint32_t n;
  uint32_t *ids;
  lm_dp_group *g;          /* one reference, released at destroy */
} group_ent;

struct lm_spmd_coll {
  lm_dp *dp;
  uint64_t self;           /* lm_dp_self(dp) */
  lm_dp_member *procs;     /* [nprocs] */
  uint32_t nprocs;
  uint64_t launch_tag;
  pthread_mutex_t mu;      /* guards groups */
  group_ent *groups;
  lm_spmd_coll_stats *stats; /* may be NULL */
};

static _Thread_local lm_spmd_coll_rec *t_rec; /* this device thread's run, while a trace records */

static const char *const g_op_names[LM_SPMD_NOPS] = {"all_reduce", "all_gather", "reduce_scatter",
                                                     "all_to_all", "collective_permute", "collective_broadcast"};

const char *lm_spmd_op_name(int op) { return op >= 0 && op < LM_SPMD_NOPS ? g_op_names[op] : "unknown"; }

void lm_spmd_coll_set_stats(lm_spmd_coll *c, lm_spmd_coll_stats *s) { c->stats = s; }

void lm_spmd_coll_record(lm_spmd_coll_rec *rec) { t_rec = rec; }

static uint64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* One call of op, begun at t0, with `bytes` operand bytes: counted in the worker's totals and
 * the thread's trace record. */
static void account(lm_spmd_coll *c, int op, uint64_t t0, uint64_t bytes) {
  uint64_t dur = mono_ns() - t0;
  if (c->stats) {
    atomic_fetch_add_explicit(&c->stats->calls[op], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&c->stats->bytes[op], bytes, memory_order_relaxed);
    atomic_fetch_add_explicit(&c->stats->nanos, dur, memory_order_relaxed);
  }
  lm_spmd_coll_rec *r = t_rec;
  if (!r) return;
  r->nanos += dur;
  r->calls++;
  r->bytes += bytes;
  if (r->nspans < LM_SPMD_MAX_SPANS) r->spans[r->nspans++] = (lm_spmd_coll_span){t0, dur, bytes, op};
}

uint64_t lm_spmd_coll_tag(uint64_t launch_tag, uint64_t seq) {
  return launch_tag << TAG_SEQ_BITS | (seq & (((uint64_t)1 << TAG_SEQ_BITS) - 1));
}

int lm_spmd_coll_create(lm_dp *dp, const lm_dp_member *procs, uint32_t nprocs, uint64_t launch_tag,
                        lm_spmd_coll **out, lm_err *err) {
  *out = NULL;
  if (!dp || !procs || nprocs == 0 || nprocs > 65535)
    return lm_errf(err, LOOM_INVALID_ARGUMENT, "spmd collectives: %u processes (1 to 65535 allowed)", nprocs);
  if (launch_tag >= MAX_LAUNCH_TAG)
    return lm_errf(err, LOOM_INVALID_ARGUMENT, "spmd collectives: launch tag %llu is not below 2^%d",
                   (unsigned long long)launch_tag, 64 - TAG_SEQ_BITS);
  for (uint32_t i = 0; i < nprocs; i++)
    for (uint32_t j = 0; j < i; j++)
      if (procs[i].worker == procs[j].worker && procs[i].device == procs[j].device)
        return lm_errf(err, LOOM_INVALID_ARGUMENT,
                       "spmd collectives: processes %u and %u both run on worker %llu device %u", j, i,
                       (unsigned long long)procs[i].worker, procs[i].device);
  lm_spmd_coll *c = calloc(1, sizeof *c);
  if (!c || !(c->procs = malloc(nprocs * sizeof *c->procs))) {
    free(c);
    return lm_errf(err, LOOM_NO_MEMORY, "spmd collectives: out of memory");
  }
  memcpy(c->procs, procs, nprocs * sizeof *procs);
  c->dp = dp;
  c->self = lm_dp_self(dp);
  c->nprocs = nprocs;
  c->launch_tag = launch_tag;
  pthread_mutex_init(&c->mu, NULL);
  *out = c;
  return 0;
}

void lm_spmd_coll_destroy(lm_spmd_coll *c) {
  if (!c) return;
  while (c->groups) {
    group_ent *e = c->groups;
    c->groups = e->next;
    lm_dp_group_release(e->g);
    free(e->ids);
    free(e);
  }
  pthread_mutex_destroy(&c->mu);
  free(c->procs);
  free(c);
}

/* The group of c already made for the process ids group[n] (hash key), or NULL. Call with c->mu
 * held. */
static lm_dp_group *find_group(const lm_spmd_coll *c, uint64_t key, const uint32_t *group, uint32_t n) {
  for (const group_ent *e = c->groups; e; e = e->next)
    if (e->key == key && e->n == n && !memcmp(e->ids, group, n * sizeof *group)) return e->g;
  return NULL;
}

/* The data-plane group of call k (borrowed: the launch holds a reference until destroy). */
static int get_group(lm_spmd_coll *c, const lm_coll_call *k, lm_dp_group **out, lm_err *err) {
  uint64_t key = lm_hash64(k->group, (size_t)k->size * sizeof *k->group, LM_HASH_SEED);
  pthread_mutex_lock(&c->mu);
  *out = find_group(c, key, k->group, k->size);
  pthread_mutex_unlock(&c->mu);
  if (*out) return 0;

  if (k->size == 0 || k->size > c->nprocs || k->rank >= k->size)
    return lm_errf(err, LOOM_INVALID_ARGUMENT, "%s: group of %u processes (rank %u) in a launch of %u", k->what,
                   k->size, k->rank, c->nprocs);
  lm_dp_member *m = malloc(k->size * sizeof *m);
  uint32_t *ids = malloc(k->size * sizeof *ids);
  group_ent *e = calloc(1, sizeof *e);
  lm_dp_group *g;
  int rc = 0;
  if (!m || !ids || !e) {
    rc = lm_errf(err, LOOM_NO_MEMORY, "%s: out of memory", k->what);
    goto fail;
  }
  for (uint32_t i = 0; i < k->size; i++) {
    if (k->group[i] >= c->nprocs) {
      rc = lm_errf(err, LOOM_INVALID_ARGUMENT, "%s: group names process %u; the launch has %u", k->what, k->group[i],
                   c->nprocs);
      goto fail;
    }
    m[i] = c->procs[k->group[i]];
  }
  if (m[k->rank].worker != c->self) {
    rc = lm_errf(err, LOOM_INVALID_ARGUMENT, "%s: process %u runs on worker %llu, not on this one (%llu)", k->what,
                 k->group[k->rank], (unsigned long long)m[k->rank].worker, (unsigned long long)c->self);
    goto fail;
  }
  if ((rc = lm_dp_group_get(c->dp, m, k->size, &g, err)) < 0) goto fail;
  free(m);
  memcpy(ids, k->group, k->size * sizeof *ids);
  *e = (group_ent){.key = key, .n = k->size, .ids = ids, .g = g};
  pthread_mutex_lock(&c->mu);
  *out = find_group(c, key, ids, k->size); /* another device thread got there first */
  if (!*out) {
    e->next = c->groups;
    c->groups = e;
    *out = g;
    e = NULL; /* kept */
  }
  pthread_mutex_unlock(&c->mu);
  if (e) {
    lm_dp_group_release(g);
    free(ids);
    free(e);
  }
  return 0;
fail:
  free(m);
  free(ids);
  free(e);
  return rc;
}

static lm_dp_call dp_call(const lm_coll_call *k) {
  return (lm_dp_call){.struct_size = sizeof(lm_dp_call), .cancel = k->cancel};
}

static int dp_reduction(const lm_coll_call *k, const lm_coll_reduction *r, lm_dp_reduction *out, lm_err *err) {
  _Static_assert((int)LM_COLL_SUM == (int)LM_DP_SUM && (int)LM_COLL_PROD == (int)LM_DP_PROD &&
                     (int)LM_COLL_MIN == (int)LM_DP_MIN && (int)LM_COLL_MAX == (int)LM_DP_MAX &&
                     (int)LM_COLL_AND == (int)LM_DP_AND && (int)LM_COLL_OR == (int)LM_DP_OR &&
                     (int)LM_COLL_XOR == (int)LM_DP_XOR && (int)LM_COLL_CUSTOM == (int)LM_DP_CUSTOM,
                 "lm_coll_op and lm_dp_op must agree");
  if (r->op < LM_COLL_SUM || r->op > LM_COLL_CUSTOM)
    return lm_errf(err, LOOM_INVALID_ARGUMENT, "%s: unknown reduction %d", k->what, (int)r->op);
  *out = (lm_dp_reduction){.dtype = r->dtype, .op = (lm_dp_op)r->op, .combine = r->combine, .user = r->combine_user};
  return 0;
}

#define SELF ((lm_spmd_coll *)user)
#define TAG(k) lm_spmd_coll_tag(SELF->launch_tag, (k)->seq)

static int h_all_reduce(void *user, const lm_coll_call *k, const void *send, void *recv, size_t count,
                        const lm_coll_reduction *r, lm_err *err) {
  lm_dp_group *g;
  lm_dp_reduction red;
  LM_TRY(dp_reduction(k, r, &red, err));
  LM_TRY(get_group(SELF, k, &g, err));
  lm_dp_call call = dp_call(k);
  uint64_t t0 = mono_ns();
  int rc = lm_dp_all_reduce(g, k->rank, TAG(k), send, recv, count, &red, &call, err);
  account(SELF, LM_SPMD_ALL_REDUCE, t0, count * lm_dtype_size(r->dtype));
  return rc;
}

static int h_all_gather(void *user, const lm_coll_call *k, const void *send, void *recv, size_t bytes, lm_err *err) {
  lm_dp_group *g;
  LM_TRY(get_group(SELF, k, &g, err));
  lm_dp_call call = dp_call(k);
  uint64_t t0 = mono_ns();
  int rc = lm_dp_all_gather(g, k->rank, TAG(k), send, recv, bytes, &call, err);
  account(SELF, LM_SPMD_ALL_GATHER, t0, bytes);
  return rc;
}

static int h_reduce_scatter(void *user, const lm_coll_call *k, const void *send, void *recv, size_t count,
                            const lm_coll_reduction *r, lm_err *err) {
  lm_dp_group *g;
  lm_dp_reduction red;
  LM_TRY(dp_reduction(k, r, &red, err));
  LM_TRY(get_group(SELF, k, &g, err));
  lm_dp_call call = dp_call(k);
  uint64_t t0 = mono_ns();
  int rc = lm_dp_reduce_scatter(g, k->rank, TAG(k), send, recv, count, &red, &call, err);
  account(SELF, LM_SPMD_REDUCE_SCATTER, t0, (uint64_t)k->size * count * lm_dtype_size(r->dtype));
  return rc;
}

static int h_all_to_all(void *user, const lm_coll_call *k, const void *send, void *recv, size_t bytes, lm_err *err) {
  lm_dp_group *g;
  LM_TRY(get_group(SELF, k, &g, err));
  lm_dp_call call = dp_call(k);
  uint64_t t0 = mono_ns();
  int rc = lm_dp_all_to_all(g, k->rank, TAG(k), send, recv, bytes, &call, err);
  account(SELF, LM_SPMD_ALL_TO_ALL, t0, (uint64_t)k->size * bytes);
  return rc;
}

static int h_collective_permute(void *user, const lm_coll_call *k, const void *send, void *recv, size_t bytes,
                                int64_t send_to, int64_t recv_from, lm_err *err) {
  lm_dp_group *g;
  LM_TRY(get_group(SELF, k, &g, err));
  lm_dp_call call = dp_call(k);
  uint64_t t0 = mono_ns();
  int rc = lm_dp_collective_permute(g, k->rank, TAG(k), send, recv, bytes, send_to, recv_from, &call, err);
  account(SELF, LM_SPMD_COLLECTIVE_PERMUTE, t0, send_to >= 0 ? bytes : 0);
  return rc;
}

static int h_broadcast(void *user, const lm_coll_call *k, uint32_t root, const void *send, void *recv, size_t bytes,
                       lm_err *err) {
  lm_dp_group *g;
  LM_TRY(get_group(SELF, k, &g, err));
  lm_dp_call call = dp_call(k);
  uint64_t t0 = mono_ns();
  int rc = lm_dp_broadcast(g, k->rank, TAG(k), root, send, recv, bytes, &call, err);
  account(SELF, LM_SPMD_BROADCAST, t0, k->rank == root ? bytes : 0);
  return rc;
}

#undef SELF
#undef TAG

static const struct lm_collectives g_hooks = {
    .struct_size = sizeof(struct lm_collectives),
    .all_reduce = h_all_reduce,
    .all_gather = h_all_gather,
    .reduce_scatter = h_reduce_scatter,
    .all_to_all = h_all_to_all,
    .collective_permute = h_collective_permute,
    .broadcast = h_broadcast,
};

void lm_spmd_coll_opts(lm_spmd_coll *c, lm_run_opts *opts) {
  opts->coll = &g_hooks;
  opts->coll_user = c;
}
