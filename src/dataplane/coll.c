/* Groups and collective algorithms. A call runs in three layers: the devices of this worker
 * meet (threads of one process: they exchange buffer pointers and combine through plain
 * memory), the first local member (the leader) exchanges with the other workers' leaders, and
 * the local members pick their results up. Every reduction order is fixed by the group order
 * and the topology (docs/dataplane.md), never by arrival timing. */
#define _GNU_SOURCE
#include <inttypes.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dataplane/dp_internal.h"

#define DP_NONE UINT32_MAX
#define DP_LOCAL_SMALL (64u << 10) /* all_reduce: the leader alone folds local inputs up to this */

/* ---- groups ---- */

typedef struct dp_run {
  uint32_t first, len; /* ranks first .. first+len-1, all on one worker */
} dp_run;

struct lm_dp_group {
  struct lm_dp_group *next;   /* in lm_dp.groups */
  lm_dp *dp;
  int refs;                   /* guarded by dp->gmu */
  uint64_t key;               /* hash of the member list: the group's name on the wire */
  uint32_t n;
  lm_dp_member *m;
  uint32_t nnodes;            /* workers, in order of first appearance */
  uint64_t *node_worker;      /* [nnodes] */
  dp_peer **node_peer;        /* [nnodes] (NULL for this worker) */
  uint32_t *node_of;          /* [n] rank -> node */
  uint32_t *node_start;       /* [nnodes+1] into node_members */
  uint32_t *node_members;     /* [n] ranks grouped by node, ascending */
  uint32_t *run_start;        /* [nnodes+1] into runs */
  dp_run *runs;               /* each node's ranks as maximal contiguous runs */
  uint32_t self_node;         /* DP_NONE if no member is on this worker */
  uint32_t nlocal;            /* members on this worker */
  uint32_t *local_pos;        /* [n] rank -> position among the local members, or DP_NONE */
  bool contiguous;            /* every node's ranks form one run */
  /* the hierarchical all_reduce's plan for this worker (dp_hier_plan) */
  bool hier;                  /* all_reduce with a built-in op goes hierarchically */
  uint32_t nlev;              /* levels below the top: 1 (hosts) or 2 (hosts, then slices) */
  uint32_t lev_n[2];          /* members of this worker's group at each level (0: not in it) */
  uint32_t lev_idx[2];        /* this worker's index there (the leader is the last member) */
  uint32_t *lev_nodes[2];     /* [lev_n[l]] the members, nodes in order */
  uint32_t top_n, top_idx;    /* the top level: the last level's leaders; top_idx DP_NONE if
                                 this worker is not among them */
  uint32_t *top_nodes;        /* [top_n] */
  uint32_t *lead[2];          /* [nnodes] every node's leader at level l (its host's, then its slice's):
                                 whose blocks a leader gathers (the hierarchical all_gather) */
};

static uint64_t dp_group_key(const lm_dp_member *m, uint32_t n) {
  uint64_t h = dp_mix(0x6c6f6f6d67727570ull, n);
  for (uint32_t i = 0; i < n; i++) h = dp_mix(dp_mix(h, m[i].worker), m[i].device);
  return h ? h : 1;
}

static void dp_group_free(lm_dp_group *g) {
  if (!g) return;
  free(g->m);
  free(g->node_worker);
  free(g->node_peer);
  free(g->node_of);
  free(g->node_start);
  free(g->node_members);
  free(g->run_start);
  free(g->runs);
  free(g->local_pos);
  free(g->lev_nodes[0]);
  free(g->lev_nodes[1]);
  free(g->top_nodes);
  free(g->lead[0]);
  free(g->lead[1]);
  free(g);
}

/* The plan of the hierarchical all_reduce (docs/dataplane.md): nodes grouped by (slice, host),
 * then, when the group's nodes name more than one slice, the hosts' leaders by slice. At each
 * level a group's members are in node order and its leader is the last; the next level's
 * participants are the leaders, groups in order of first appearance. The leaders of the last
 * level form the top. Depends only on the member list and the topology keys, which every
 * worker of the group sees alike (address blobs), so all of them compute the same plan. */
static int dp_hier_plan(lm_dp_group *g, const uint64_t *host, const uint64_t *slice, int algo) {
  uint32_t P = g->nnodes;
  bool slices = false;
  for (uint32_t k = 1; k < P; k++)
    if (slice[k] != slice[0]) slices = true;
  g->nlev = slices ? 2 : 1;
  uint32_t *part = malloc(P * sizeof *part), *next = malloc(P * sizeof *next);
  uint64_t *key = malloc(P * sizeof *key);
  if (!part || !next || !key) {
    free(part);
    free(next);
    free(key);
    return LOOM_NO_MEMORY;
  }
  uint32_t np = P;
  for (uint32_t k = 0; k < P; k++) part[k] = k;
  for (uint32_t l = 0; l < g->nlev; l++)
    if (!(g->lead[l] = malloc(P * sizeof(uint32_t)))) {
      free(part), free(next), free(key);
      return LOOM_NO_MEMORY;
    }
  bool in = true; /* this worker takes part at the current level */
  uint32_t ngroups0 = 0;
  for (uint32_t l = 0; l < g->nlev; l++) {
    for (uint32_t i = 0; i < np; i++) key[i] = l == 0 ? dp_mix(host[part[i]], slice[part[i]]) : slice[part[i]];
    uint32_t nn = 0, mine = 0;
    for (uint32_t i = 0; i < np; i++) {
      bool first = true;
      for (uint32_t j = 0; j < i && first; j++)
        if (key[j] == key[i]) first = false;
      if (!first) continue;
      uint32_t last = i;
      for (uint32_t j = i; j < np; j++)
        if (key[j] == key[i]) last = j;
      next[nn++] = part[last];
      for (uint32_t j = i; j < np; j++) /* every participant of this group: its leader */
        if (key[j] == key[i]) g->lead[l][part[j]] = part[last];
    }
    if (l > 0) /* every node: the leader of its previous level's leader */
      for (uint32_t k = 0; k < P; k++) g->lead[l][k] = g->lead[l][g->lead[l - 1][k]];
    if (l == 0) ngroups0 = nn;
    if (in) {
      for (uint32_t i = 0; i < np; i++)
        if (part[i] == g->self_node) mine = i;
      uint32_t cnt = 0;
      for (uint32_t i = 0; i < np; i++)
        if (key[i] == key[mine]) cnt++;
      g->lev_nodes[l] = malloc(cnt * sizeof(uint32_t));
      if (!g->lev_nodes[l]) {
        free(part);
        free(next);
        free(key);
        return LOOM_NO_MEMORY;
      }
      g->lev_n[l] = 0;
      for (uint32_t i = 0; i < np; i++)
        if (key[i] == key[mine]) {
          if (part[i] == g->self_node) g->lev_idx[l] = g->lev_n[l];
          g->lev_nodes[l][g->lev_n[l]++] = part[i];
        }
      in = g->lev_idx[l] == g->lev_n[l] - 1;
    }
    memcpy(part, next, nn * sizeof *part);
    np = nn;
  }
  g->top_n = np;
  g->top_idx = DP_NONE;
  g->top_nodes = part;
  for (uint32_t i = 0; i < np; i++)
    if (in && part[i] == g->self_node) g->top_idx = i;
  free(next);
  free(key);
  g->hier = algo == LM_DP_COLL_HIER || (algo == LM_DP_COLL_AUTO && P > 1 && (ngroups0 > 1 || slices));
  return 0;
}

void dp_groups_free(lm_dp *dp) {
  while (dp->groups) {
    lm_dp_group *g = (lm_dp_group *)dp->groups;
    dp->groups = (dp_group_entry *)g->next;
    dp_group_free(g);
  }
}

int lm_dp_group_get(lm_dp *dp, const lm_dp_member *members, uint32_t n, lm_dp_group **out, lm_err *err) {
  *out = NULL;
  if (!members || n == 0 || n > 65535)
    return lm_errf(err, LOOM_INVALID_ARGUMENT, "data plane: group of %u members (1 to 65535 allowed)", n);
  uint64_t key = dp_group_key(members, n);
  pthread_mutex_lock(&dp->gmu);
  for (lm_dp_group *g = (lm_dp_group *)dp->groups; g; g = g->next)
    if (g->key == key && g->n == n && memcmp(g->m, members, n * sizeof *members) == 0) {
      g->refs++;
      pthread_mutex_unlock(&dp->gmu);
      *out = g;
      return 0;
    }
  pthread_mutex_unlock(&dp->gmu);

  int rc = 0;
  lm_dp_group *g = calloc(1, sizeof *g);
  if (!g) return lm_errf(err, LOOM_NO_MEMORY, "data plane: out of memory");
  g->dp = dp;
  g->refs = 1;
  g->key = key;
  g->n = n;
  g->self_node = DP_NONE;
  g->m = malloc(n * sizeof *g->m);
  g->node_worker = malloc(n * sizeof *g->node_worker);
  g->node_peer = calloc(n, sizeof *g->node_peer);
  g->node_of = malloc(n * sizeof *g->node_of);
  g->node_start = calloc(n + 1, sizeof *g->node_start);
  g->node_members = malloc(n * sizeof *g->node_members);
  g->run_start = calloc(n + 1, sizeof *g->run_start);
  g->runs = malloc(n * sizeof *g->runs);
  g->local_pos = malloc(n * sizeof *g->local_pos);
  if (!g->m || !g->node_worker || !g->node_peer || !g->node_of || !g->node_start || !g->node_members ||
      !g->run_start || !g->runs || !g->local_pos) {
    rc = lm_errf(err, LOOM_NO_MEMORY, "data plane: out of memory");
    goto fail;
  }
  memcpy(g->m, members, n * sizeof *members);
  /* nodes in order of first appearance (quadratic in the number of workers: groups are small
   * next to the cost of one collective, and built once) */
  for (uint32_t i = 0; i < n; i++) {
    uint32_t k = 0;
    while (k < g->nnodes && g->node_worker[k] != members[i].worker) k++;
    if (k == g->nnodes) g->node_worker[g->nnodes++] = members[i].worker;
    g->node_of[i] = k;
    g->node_start[k + 1]++;
    for (uint32_t j = 0; j < i; j++)
      if (members[j].worker == members[i].worker && members[j].device == members[i].device) {
        rc = lm_errf(err, LOOM_INVALID_ARGUMENT,
                     "data plane: group lists worker %" PRIu64 " device %u twice (members %u and %u)",
                     members[i].worker, members[i].device, j, i);
        goto fail;
      }
    if (members[i].worker == dp->cfg.self_id && members[i].device >= dp->cfg.num_devices) {
      rc = lm_errf(err, LOOM_INVALID_ARGUMENT, "data plane: group member %u names device %u; this worker has %u", i,
                   members[i].device, dp->cfg.num_devices);
      goto fail;
    }
  }
  for (uint32_t k = 0; k < g->nnodes; k++) g->node_start[k + 1] += g->node_start[k];
  {
    uint32_t *fill = calloc(g->nnodes, sizeof *fill);
    if (!fill) {
      rc = lm_errf(err, LOOM_NO_MEMORY, "data plane: out of memory");
      goto fail;
    }
    for (uint32_t i = 0; i < n; i++) {
      uint32_t k = g->node_of[i];
      g->node_members[g->node_start[k] + fill[k]++] = i;
    }
    free(fill);
  }
  g->contiguous = true;
  uint32_t nruns = 0;
  for (uint32_t k = 0; k < g->nnodes; k++) {
    g->run_start[k] = nruns;
    for (uint32_t a = g->node_start[k]; a < g->node_start[k + 1]; a++) {
      uint32_t r = g->node_members[a];
      if (a > g->node_start[k] && g->node_members[a - 1] + 1 == r) g->runs[nruns - 1].len++;
      else g->runs[nruns++] = (dp_run){r, 1};
    }
    if (nruns - g->run_start[k] != 1) g->contiguous = false;
  }
  g->run_start[g->nnodes] = nruns;
  for (uint32_t i = 0; i < n; i++) g->local_pos[i] = DP_NONE;
  for (uint32_t k = 0; k < g->nnodes; k++)
    if (g->node_worker[k] == dp->cfg.self_id) {
      g->self_node = k;
      g->nlocal = g->node_start[k + 1] - g->node_start[k];
      for (uint32_t a = 0; a < g->nlocal; a++) g->local_pos[g->node_members[g->node_start[k] + a]] = a;
    }
  uint64_t *hk = malloc(g->nnodes * sizeof *hk), *sk = malloc(g->nnodes * sizeof *sk);
  if (!hk || !sk) {
    free(hk);
    free(sk);
    rc = lm_errf(err, LOOM_NO_MEMORY, "data plane: out of memory");
    goto fail;
  }
  pthread_mutex_lock(&dp->mu);
  for (uint32_t k = 0; k < g->nnodes; k++) {
    if (k == g->self_node) {
      hk[k] = dp->host_key;
      sk[k] = dp->slice_key;
      continue;
    }
    g->node_peer[k] = dp_peer_find_locked(dp, g->node_worker[k]);
    if (!g->node_peer[k]) {
      pthread_mutex_unlock(&dp->mu);
      free(hk);
      free(sk);
      rc = lm_errf(err, LOOM_NOT_FOUND, "data plane: group names worker %" PRIu64 ", which is not a known peer",
                   g->node_worker[k]);
      goto fail;
    }
    hk[k] = g->node_peer[k]->host_key;
    sk[k] = g->node_peer[k]->slice_key;
  }
  pthread_mutex_unlock(&dp->mu);
  if (g->self_node != DP_NONE && dp->coll_algo != LM_DP_COLL_FLAT) rc = dp_hier_plan(g, hk, sk, dp->coll_algo);
  free(hk);
  free(sk);
  if (rc) {
    rc = lm_errf(err, LOOM_NO_MEMORY, "data plane: out of memory");
    goto fail;
  }

  /* intern it (another thread may have raced us to the same list) */
  pthread_mutex_lock(&dp->gmu);
  for (lm_dp_group *h = (lm_dp_group *)dp->groups; h; h = h->next)
    if (h->key == key && h->n == n && memcmp(h->m, members, n * sizeof *members) == 0) {
      h->refs++;
      pthread_mutex_unlock(&dp->gmu);
      dp_group_free(g);
      *out = h;
      return 0;
    }
  g->next = (lm_dp_group *)dp->groups;
  dp->groups = (dp_group_entry *)g;
  pthread_mutex_unlock(&dp->gmu);
  *out = g;
  return 0;
fail:
  dp_group_free(g);
  return rc;
}

void lm_dp_group_release(lm_dp_group *g) {
  if (!g) return;
  lm_dp *dp = g->dp;
  pthread_mutex_lock(&dp->gmu);
  if (--g->refs == 0) {
    for (lm_dp_group **pp = (lm_dp_group **)&dp->groups; *pp; pp = &(*pp)->next)
      if (*pp == g) {
        *pp = g->next;
        break;
      }
    pthread_mutex_unlock(&dp->gmu);
    dp_group_free(g);
    return;
  }
  pthread_mutex_unlock(&dp->gmu);
}

uint32_t lm_dp_group_size(const lm_dp_group *g) { return g->n; }

int64_t lm_dp_group_rank(const lm_dp_group *g, uint64_t worker, uint32_t device) {
  for (uint32_t i = 0; i < g->n; i++)
    if (g->m[i].worker == worker && g->m[i].device == device) return i;
  return -1;
}

/* ---- the call context of a leader's exchange with other workers ---- */

typedef struct dp_cc {
  lm_dp *dp;
  lm_dp_group *g;
  const char *what;           /* "all_reduce", for messages */
  uint64_t tag, sig;
  int64_t deadline;
  volatile int *cancel;
  dp_req **reqs;              /* every request of the call, for clean-up */
  size_t nreq, capreq;
  int rc;                     /* first failure */
  char why[LM_ERR_MSG_MAX];
} dp_cc;

static void cc_init(dp_cc *cc, lm_dp_group *g, const char *what, uint64_t tag, uint64_t sig, int64_t deadline,
                    volatile int *cancel) {
  memset(cc, 0, sizeof *cc);
  cc->dp = g->dp;
  cc->g = g;
  cc->what = what;
  cc->tag = tag;
  cc->sig = sig;
  cc->deadline = deadline;
  cc->cancel = cancel;
}

static int cc_fail(dp_cc *cc, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int cc_fail(dp_cc *cc, int code, const char *fmt, ...) {
  if (cc->rc == 0) {
    cc->rc = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cc->why, sizeof cc->why, fmt, ap);
    va_end(ap);
  }
  return cc->rc;
}

static dp_req *cc_new(dp_cc *cc) {
  if (cc->nreq == cc->capreq) {
    size_t cap = cc->capreq ? cc->capreq * 2 : 16;
    dp_req **a = realloc(cc->reqs, cap * sizeof *a);
    if (!a) return NULL;
    cc->reqs = a;
    cc->capreq = cap;
  }
  dp_req *r = dp_req_new(DP_REQ_SEND, 0);
  if (r) cc->reqs[cc->nreq++] = r;
  return r;
}

static dp_req *cc_send(dp_cc *cc, uint32_t node, uint32_t slot, const void *buf, size_t len) {
  dp_req *r = cc_new(cc);
  if (!r) {
    cc_fail(cc, LOOM_NO_MEMORY, "out of memory");
    return NULL;
  }
  pthread_mutex_lock(&cc->dp->mu);
  dp_send_locked(cc->dp, cc->g->node_peer[node], r, DP_KIND_COLL, cc->tag, cc->g->key, slot, cc->sig, buf, len);
  pthread_mutex_unlock(&cc->dp->mu);
  return r;
}

static dp_req *cc_recv(dp_cc *cc, uint32_t node, uint32_t slot, void *buf, size_t len) {
  dp_req *r = cc_new(cc);
  if (!r) {
    cc_fail(cc, LOOM_NO_MEMORY, "out of memory");
    return NULL;
  }
  pthread_mutex_lock(&cc->dp->mu);
  dp_recv_locked(cc->dp, cc->g->node_peer[node], r, DP_KIND_COLL, cc->tag, cc->g->key, slot, cc->sig, buf, len);
  pthread_mutex_unlock(&cc->dp->mu);
  return r;
}

/* Waits for rs[0..n) (NULLs are allocation failures, already recorded). Returns cc->rc. */
static int cc_wait(dp_cc *cc, dp_req **rs, size_t n) {
  if (cc->rc) return cc->rc;
  for (size_t i = 0; i < n; i++)
    if (!rs[i]) return cc->rc ? cc->rc : cc_fail(cc, LOOM_NO_MEMORY, "out of memory");
  pthread_mutex_lock(&cc->dp->mu);
  /* watch every worker of the group: a call cannot finish if any of them died, even one this
   * worker is not waiting on right now (it may be waiting on a worker that left the call) */
  dp_peer *lost = NULL;
  int rc = dp_wait_watch_locked(cc->dp, rs, n, cc->deadline, cc->cancel, cc->g->node_peer, cc->g->nnodes, &lost);
  if (rc == LOOM_WORKER_LOST && lost) {
    char why[sizeof lost->why];
    snprintf(why, sizeof why, "%s", lost->why);
    pthread_mutex_unlock(&cc->dp->mu);
    return cc_fail(cc, rc, "%s", why);
  }
  pthread_mutex_unlock(&cc->dp->mu);
  if (rc == LOOM_TIMEOUT) {
    /* name the workers still owing us something */
    char who[256] = "";
    size_t w = 0;
    for (size_t i = 0; i < n && w < sizeof who - 32; i++)
      if (!rs[i]->done && rs[i]->peer)
        w += (size_t)snprintf(who + w, sizeof who - w, "%s%" PRIu64, w ? ", " : "", rs[i]->peer->id);
    return cc_fail(cc, rc, "timed out waiting for %s %s", strchr(who, ',') ? "workers" : "worker", who[0] ? who : "?");
  }
  if (rc == LOOM_CANCELLED) return cc_fail(cc, rc, "cancelled");
  for (size_t i = 0; i < n; i++)
    if (rs[i]->status < 0) {
      /* a peer that gave up on the call says why (its abort); that beats "request cancelled" */
      pthread_mutex_lock(&cc->dp->mu);
      const char *why = dp_retired_why_locked(cc->dp, cc->tag, cc->g->key);
      int code = why ? LOOM_CANCELLED : rs[i]->status;
      char buf[LM_ERR_MSG_MAX];
      snprintf(buf, sizeof buf, "%s", why ? why : rs[i]->why);
      pthread_mutex_unlock(&cc->dp->mu);
      return cc_fail(cc, code, "%s", buf);
    }
  return 0;
}

static int cc_wait1(dp_cc *cc, dp_req *r) { return cc_wait(cc, &r, 1); }

/* Ends the call: on failure, stops every transfer, retires the tag here and tells the other
 * workers of the group to give up on it. Frees the requests. Returns cc->rc. */
static int cc_finish(dp_cc *cc) {
  lm_dp *dp = cc->dp;
  if (cc->rc || cc->nreq) {
    pthread_mutex_lock(&dp->mu);
    if (cc->rc) {
      /* tell the others first: dropping our messages lets our sends complete */
      char why[LM_ERR_MSG_MAX + 64];
      snprintf(why, sizeof why, "%s (tag %" PRIu64 ") failed on worker %" PRIu64 ": %s", cc->what, cc->tag,
               dp->cfg.self_id, cc->why);
      dp_retire_locked(dp, cc->tag, cc->g->key, why);
      for (uint32_t k = 0; k < cc->g->nnodes; k++)
        if (k != cc->g->self_node) dp_send_abort_locked(dp, cc->g->node_peer[k], cc->tag, cc->g->key, cc->why);
      dp_drain_locked(dp, cc->reqs, cc->nreq);
    } else {
      /* every request is done when a call succeeds; be safe anyway */
      dp_wait_locked(dp, cc->reqs, cc->nreq, cc->deadline, NULL);
    }
    for (size_t i = 0; i < cc->nreq; i++) dp_req_release_locked(dp, cc->reqs[i]);
    pthread_mutex_unlock(&dp->mu);
  }
  free(cc->reqs);
  cc->reqs = NULL;
  cc->nreq = cc->capreq = 0;
  return cc->rc;
}

static int cc_reduce(dp_cc *cc, const lm_dp_reduction *red, const void *a, const void *b, void *o, size_t count) {
  if (cc->rc) return cc->rc;
  lm_err e;
  lm_err_clear(&e);
  int rc = lm_dp_reduce(red, a, b, o, count, &e);
  if (rc < 0) return cc_fail(cc, rc, "%s", e.msg);
  return 0;
}

/* ---- node-level algorithms (run by the leader) ---- */

static void dp_chunk(size_t count, uint32_t parts, uint32_t c, size_t *off, size_t *len) {
  size_t base = count / parts, rem = count % parts;
  *off = c * base + (c < rem ? c : rem);
  *len = base + (c < rem ? 1 : 0);
}

/* all_reduce among nodes by recursive doubling; dst holds this node's value on entry (src was
 * copied in) and the result on exit. The nodes are nodes[0..P) (NULL: 0..P-1), this one is
 * nodes[me]; slots start at slot0. Order: nodes pair (0,1), (2,3), ... while their count
 * exceeds a power of two, then partners at distance 1, 2, 4, ... combine with the lower node's
 * value on the left: a tree whose in-order traversal is the node order. Scratch: one buffer of
 * the message's size (used up to LOOM_DP_RD_MAX bytes). */
static int ar_rd_list(dp_cc *cc, void *dst, size_t count, const lm_dp_reduction *red, const uint32_t *nodes,
                      uint32_t P, uint32_t me, uint32_t slot0) {
#define RDN(i) (nodes ? nodes[i] : (i))
  size_t esz = lm_dtype_size(red->dtype), nbytes = count * esz;
  uint32_t pof2 = 1;
  while (pof2 * 2 <= P) pof2 *= 2;
  uint32_t rem = P - pof2;
  void *tmp = dp_scratch_get(cc->dp, nbytes);
  if (!tmp) return cc_fail(cc, LOOM_NO_MEMORY, "out of memory (%zu bytes of scratch)", nbytes);
  int64_t vr;
  if (me < 2 * rem) {
    if (me & 1) {
      dp_req *s = cc_send(cc, RDN(me - 1), slot0 + 3, dst, nbytes);
      cc_wait1(cc, s);
      vr = -1;
    } else {
      dp_req *r = cc_recv(cc, RDN(me + 1), slot0 + 3, tmp, nbytes);
      if (cc_wait1(cc, r) == 0) cc_reduce(cc, red, dst, tmp, dst, count);
      vr = me / 2;
    }
  } else {
    vr = me - rem;
  }
  if (vr >= 0) {
    for (uint32_t mask = 1, step = 0; mask < pof2 && !cc->rc; mask <<= 1, step++) {
      uint32_t vp = (uint32_t)vr ^ mask;
      uint32_t partner = vp < rem ? vp * 2 : vp + rem;
      dp_req *rs[2];
      rs[0] = cc_recv(cc, RDN(partner), slot0 + 16 + step, tmp, nbytes);
      rs[1] = cc_send(cc, RDN(partner), slot0 + 16 + step, dst, nbytes);
      if (cc_wait(cc, rs, 2)) break;
      if (vp < (uint32_t)vr) cc_reduce(cc, red, tmp, dst, dst, count);
      else cc_reduce(cc, red, dst, tmp, dst, count);
    }
  }
  if (!cc->rc && me < 2 * rem) {
    if (me & 1) cc_wait1(cc, cc_recv(cc, RDN(me - 1), slot0 + 4, dst, nbytes));
    else cc_wait1(cc, cc_send(cc, RDN(me + 1), slot0 + 4, dst, nbytes));
  }
  dp_scratch_put(cc->dp, tmp);
  return cc->rc;
#undef RDN
}

static int ar_rd(dp_cc *cc, void *dst, size_t count, const lm_dp_reduction *red) {
  return ar_rd_list(cc, dst, count, red, NULL, cc->g->nnodes, cc->g->self_node, 0);
}

/* all_reduce among nodes by a direct reduce-scatter and all-gather: node c owns chunk c of the
 * elements, receives every node's chunk c and folds them left to right in node order, then
 * sends the result to all. The reduce-scatter moves chunks in segments (dp->seg_bytes), two
 * in flight, so what is folded is still in cache. src and dst may be the same buffer. */
static int ar_pairwise(dp_cc *cc, const void *src, void *dst, size_t count, const lm_dp_reduction *red) {
  lm_dp_group *g = cc->g;
  uint32_t P = g->nnodes, me = g->self_node;
  size_t esz = lm_dtype_size(red->dtype);
  size_t seg = cc->dp->seg_bytes / esz ? cc->dp->seg_bytes / esz : 1;
  size_t moff, mlen;
  dp_chunk(count, P, me, &moff, &mlen);
  size_t nseg = (mlen + seg - 1) / seg, sbytes = seg * esz;
  bool use_tmp = src == dst && me > 0;
  /* two segment buffers per other node, and one accumulator segment */
  uint8_t *scr = dp_scratch_get(cc->dp, (2 * (size_t)(P - 1) + 1) * sbytes);
  dp_req **rr = calloc(2 * (size_t)P, sizeof *rr), **ss = NULL;
  size_t nss = 0;
  for (uint32_t c = 0; c < P; c++) {
    size_t off, len;
    dp_chunk(count, P, c, &off, &len);
    if (c != me) nss += (len + seg - 1) / seg;
  }
  ss = calloc(nss + P, sizeof *ss);
  if (!scr || !rr || !ss) {
    free(rr);
    free(ss);
    dp_scratch_put(cc->dp, scr);
    return cc_fail(cc, LOOM_NO_MEMORY, "out of memory (all_reduce scratch)");
  }
  const uint8_t *s8 = src;
  uint8_t *d8 = dst, *tmp = scr + 2 * (size_t)(P - 1) * sbytes;
#define SEGBUF(s, j) (scr + (((s) & 1) * (size_t)(P - 1) + ((j) < me ? (j) : (j) - 1)) * sbytes)
  /* reduce-scatter: everything we send, at once (large messages wait at the receiver) */
  size_t k = 0;
  for (uint32_t d = 1; d < P; d++) { /* start with the next node: spreads the load */
    uint32_t c = (me + d) % P;
    size_t off, len;
    dp_chunk(count, P, c, &off, &len);
    for (size_t q = 0; q * seg < len; q++) {
      size_t n = len - q * seg < seg ? len - q * seg : seg;
      ss[k++] = cc_send(cc, c, 0x10000u + (uint32_t)q, s8 + (off + q * seg) * esz, n * esz);
    }
  }
  for (size_t q = 0; q < nseg && q < 2; q++)
    for (uint32_t j = 0; j < P; j++)
      if (j != me) {
        size_t n = mlen - q * seg < seg ? mlen - q * seg : seg;
        rr[(q & 1) * P + j] = cc_recv(cc, j, 0x10000u + (uint32_t)q, SEGBUF(q, j), n * esz);
      }
  for (size_t q = 0; q < nseg && !cc->rc; q++) {
    size_t n = mlen - q * seg < seg ? mlen - q * seg : seg;
    uint8_t *out = d8 + (moff + q * seg) * esz;
    const uint8_t *own = s8 + (moff + q * seg) * esz;
    const void *acc = NULL;
    for (uint32_t j = 0; j < P && !cc->rc; j++) {
      const void *x = own;
      if (j != me) {
        if (cc_wait1(cc, rr[(q & 1) * P + j])) break;
        x = SEGBUF(q, j);
      }
      if (j == 0) {
        acc = x;
        continue;
      }
      void *o = (j == P - 1 || !use_tmp) ? (void *)out : (void *)tmp;
      if (cc_reduce(cc, red, acc, x, o, n)) break;
      acc = o;
    }
    /* this segment's buffers are free: receive segment q + 2 into them */
    if (!cc->rc && q + 2 < nseg)
      for (uint32_t j = 0; j < P; j++)
        if (j != me) {
          size_t n2 = mlen - (q + 2) * seg < seg ? mlen - (q + 2) * seg : seg;
          rr[(q & 1) * P + j] = cc_recv(cc, j, 0x10000u + (uint32_t)(q + 2), SEGBUF(q, j), n2 * esz);
        }
  }
#undef SEGBUF
  /* all-gather (the chunks sent above must be out before dst may be overwritten) */
  cc_wait(cc, ss, k);
  if (!cc->rc) {
    for (uint32_t j = 0; j < P; j++) {
      if (j == me) continue;
      size_t off, len;
      dp_chunk(count, P, j, &off, &len);
      rr[j] = cc_recv(cc, j, 2, d8 + off * esz, len * esz);
    }
    k = 0;
    for (uint32_t d = 1; d < P; d++) ss[k++] = cc_send(cc, (me + d) % P, 2, d8 + moff * esz, mlen * esz);
    for (uint32_t j = 0; j < P && !cc->rc; j++)
      if (j != me) cc_wait1(cc, rr[j]);
    cc_wait(cc, ss, k);
  }
  free(rr);
  free(ss);
  dp_scratch_put(cc->dp, scr);
  return cc->rc;
}

/* ---- the hierarchical all_reduce (docs/dataplane.md, "Hierarchical all_reduce") ----
 *
 * Slots: chain reduce 0x5 / broadcast 0x6 (level in bits 24-27), ring reduce-scatter 0x7 and
 * all-gather 0x8 (step in bits 16-27), recursive doubling 0x9, in the top four bits. Segment
 * numbers wrap; messages with equal slots match in the order they were sent. */
#define HS_CHAIN 0x50000000u
#define HS_BCAST 0x60000000u
#define HS_RS 0x70000000u
#define HS_AG 0x80000000u
#define HS_RD 0x90000000u

/* Waits for reqs[0..n) and empties the list. */
static int hs_flush(dp_cc *cc, dp_req **reqs, size_t *n) {
  cc_wait(cc, reqs, *n);
  *n = 0;
  return cc->rc;
}

/* Reduce to the last member of nodes[0..k) (this worker is nodes[idx]) along a chain: member i
 * takes the fold of members 0..i-1 from member i-1, segment by segment, folds its own value
 * on the right and passes the result on, so the leader (the last) gets x0 op x1 op ... op
 * x(k-1), folded left to right. src is this member's value (may be dst); members after the
 * first write the fold into dst. Scratch: two segments. */
static int hs_chain(dp_cc *cc, const uint32_t *nodes, uint32_t k, uint32_t idx, uint32_t lev, const void *src,
                    void *dst, size_t count, const lm_dp_reduction *red) {
  size_t esz = lm_dtype_size(red->dtype);
  if (k == 1) {
    if (src != dst) memcpy(dst, src, count * esz);
    return 0;
  }
  size_t seg = cc->dp->seg_bytes / esz ? cc->dp->seg_bytes / esz : 1, nseg = (count + seg - 1) / seg;
  uint32_t base = HS_CHAIN | lev << 24;
  const uint8_t *s8 = src;
  uint8_t *d8 = dst;
  dp_req **sends = calloc(nseg + 1, sizeof *sends), *rr[2] = {NULL, NULL};
  uint8_t *buf = idx > 0 ? dp_scratch_get(cc->dp, 2 * seg * esz) : NULL;
  if (!sends || (idx > 0 && !buf)) {
    free(sends);
    dp_scratch_put(cc->dp, buf);
    return cc_fail(cc, LOOM_NO_MEMORY, "out of memory (all_reduce chain)");
  }
  size_t ns = 0;
  if (idx == 0) {
    for (size_t q = 0; q < nseg && !cc->rc; q++) {
      size_t n = count - q * seg < seg ? count - q * seg : seg;
      sends[ns++] = cc_send(cc, nodes[1], base | (uint32_t)(q & 0xffffff), s8 + q * seg * esz, n * esz);
    }
  } else {
    for (size_t q = 0; q < nseg && q < 2; q++) {
      size_t n = count - q * seg < seg ? count - q * seg : seg;
      rr[q] = cc_recv(cc, nodes[idx - 1], base | (uint32_t)(q & 0xffffff), buf + q * seg * esz, n * esz);
    }
    for (size_t q = 0; q < nseg && !cc->rc; q++) {
      size_t n = count - q * seg < seg ? count - q * seg : seg;
      uint8_t *in = buf + (q & 1) * seg * esz;
      if (cc_wait1(cc, rr[q & 1])) break;
      if (cc_reduce(cc, red, in, s8 + q * seg * esz, d8 + q * seg * esz, n)) break;
      if (idx + 1 < k) sends[ns++] = cc_send(cc, nodes[idx + 1], base | (uint32_t)(q & 0xffffff), d8 + q * seg * esz, n * esz);
      if (q + 2 < nseg) {
        size_t n2 = count - (q + 2) * seg < seg ? count - (q + 2) * seg : seg;
        rr[q & 1] = cc_recv(cc, nodes[idx - 1], base | (uint32_t)((q + 2) & 0xffffff), in, n2 * esz);
      }
    }
  }
  hs_flush(cc, sends, &ns);
  free(sends);
  dp_scratch_put(cc->dp, buf);
  return cc->rc;
}

/* Broadcast buf from the last member of nodes[0..k) to the others: a binomial tree rooted
 * there. Receives land in buf; no scratch. */
static int hs_bcast(dp_cc *cc, const uint32_t *nodes, uint32_t k, uint32_t idx, uint32_t lev, void *buf,
                    size_t nbytes) {
  if (k == 1 || cc->rc) return cc->rc;
  uint32_t root = k - 1, vr = (idx + k - root) % k, mask = 1, slot = HS_BCAST | lev << 24;
  while (mask < k && !(vr & mask)) mask <<= 1;
  if (vr != 0 && cc_wait1(cc, cc_recv(cc, nodes[((vr & ~mask) + root) % k], slot, buf, nbytes))) return cc->rc;
  if (vr == 0) {
    mask = 1;
    while (mask < k) mask <<= 1;
  }
  dp_req *rs[32];
  size_t n = 0;
  for (mask >>= 1; mask > 0 && n < 32; mask >>= 1)
    if (vr + mask < k) rs[n++] = cc_send(cc, nodes[(vr + mask + root) % k], slot, buf, nbytes);
  return hs_flush(cc, rs, &n);
}

/* all_reduce among nodes[0..M) (this worker is nodes[me]) by a ring: M-1 reduce-scatter steps
 * (at step s node i sends chunk i-s to node i+1 and folds chunk i-s-1 coming from node i-1,
 * the incoming partial on the left), so chunk c is folded x_c, x_(c+1), ..., x_(c-1) left to
 * right; then M-1 all-gather steps. dst holds this node's value and, at the end, the result.
 * Scratch: two segments, whatever M. */
static int hs_ring(dp_cc *cc, const uint32_t *nodes, uint32_t M, uint32_t me, void *dst, size_t count,
                   const lm_dp_reduction *red) {
  size_t esz = lm_dtype_size(red->dtype);
  size_t seg = cc->dp->seg_bytes / esz ? cc->dp->seg_bytes / esz : 1;
  uint32_t right = nodes[(me + 1) % M], left = nodes[(me + M - 1) % M];
  uint8_t *d8 = dst, *buf = dp_scratch_get(cc->dp, 2 * seg * esz);
  size_t maxc = count / M + 1, cap = (maxc + seg - 1) / seg + 2;
  dp_req **sends = calloc(cap, sizeof *sends);
  if (!buf || !sends) {
    free(sends);
    dp_scratch_put(cc->dp, buf);
    return cc_fail(cc, LOOM_NO_MEMORY, "out of memory (all_reduce ring)");
  }
  size_t ns = 0;
  for (uint32_t s = 0; s + 1 < M && !cc->rc; s++) {
    uint32_t cs = (me + M - s % M) % M, cr = (me + 2 * M - s % M - 1) % M;
    uint32_t base = HS_RS | (s & 0xfff) << 16;
    size_t so, sl, ro, rl;
    dp_chunk(count, M, cs, &so, &sl);
    dp_chunk(count, M, cr, &ro, &rl);
    for (size_t q = 0; q * seg < sl && !cc->rc; q++) {
      size_t n = sl - q * seg < seg ? sl - q * seg : seg;
      sends[ns++] = cc_send(cc, right, base | (uint32_t)(q & 0xffff), d8 + (so + q * seg) * esz, n * esz);
    }
    size_t nseg = (rl + seg - 1) / seg;
    dp_req *rr[2] = {NULL, NULL};
    for (size_t q = 0; q < nseg && q < 2; q++) {
      size_t n = rl - q * seg < seg ? rl - q * seg : seg;
      rr[q] = cc_recv(cc, left, base | (uint32_t)(q & 0xffff), buf + q * seg * esz, n * esz);
    }
    for (size_t q = 0; q < nseg && !cc->rc; q++) {
      size_t n = rl - q * seg < seg ? rl - q * seg : seg;
      uint8_t *in = buf + (q & 1) * seg * esz, *own = d8 + (ro + q * seg) * esz;
      if (cc_wait1(cc, rr[q & 1])) break;
      if (cc_reduce(cc, red, in, own, own, n)) break;
      if (q + 2 < nseg) {
        size_t n2 = rl - (q + 2) * seg < seg ? rl - (q + 2) * seg : seg;
        rr[q & 1] = cc_recv(cc, left, base | (uint32_t)((q + 2) & 0xffff), in, n2 * esz);
      }
    }
    hs_flush(cc, sends, &ns);
  }
  for (uint32_t s = 0; s + 1 < M && !cc->rc; s++) {
    uint32_t cs = (me + 1 + M - s % M) % M, cr = (me + M - s % M) % M, slot = HS_AG | (s & 0xfff) << 16;
    size_t so, sl, ro, rl;
    dp_chunk(count, M, cs, &so, &sl);
    dp_chunk(count, M, cr, &ro, &rl);
    dp_req *rs[2];
    size_t n = 0;
    if (rl) rs[n++] = cc_recv(cc, left, slot, d8 + ro * esz, rl * esz);
    if (sl) rs[n++] = cc_send(cc, right, slot, d8 + so * esz, sl * esz);
    cc_wait(cc, rs, n);
  }
  free(sends);
  dp_scratch_put(cc->dp, buf);
  return cc->rc;
}

/* Hierarchical all_reduce of a built-in operation: chain reduce inside each host (then each
 * slice), the top level's leaders all-reduce by recursive doubling (up to LOOM_DP_RD_MAX
 * bytes) or a ring, then binomial broadcasts back down. */
static int ar_hier(dp_cc *cc, const void *src, void *dst, size_t count, const lm_dp_reduction *red) {
  lm_dp_group *g = cc->g;
  size_t esz = lm_dtype_size(red->dtype), nbytes = count * esz;
  const void *own = src;
  uint32_t l;
  for (l = 0; l < g->nlev; l++) {
    if (hs_chain(cc, g->lev_nodes[l], g->lev_n[l], g->lev_idx[l], l, own, dst, count, red)) return cc->rc;
    own = dst;
    if (g->lev_idx[l] + 1 != g->lev_n[l]) break; /* not this level's leader */
  }
  if (l == g->nlev) {
    if (g->top_n > 1) {
      if (nbytes <= cc->dp->rd_max || count < g->top_n)
        ar_rd_list(cc, dst, count, red, g->top_nodes, g->top_n, g->top_idx, HS_RD);
      else
        hs_ring(cc, g->top_nodes, g->top_n, g->top_idx, dst, count, red);
    }
    l = g->nlev - 1;
  }
  for (int32_t b = (int32_t)l; b >= 0 && !cc->rc; b--)
    hs_bcast(cc, g->lev_nodes[b], g->lev_n[b], g->lev_idx[b], (uint32_t)b, dst, nbytes);
  return cc->rc;
}

static int ar_nodes(dp_cc *cc, const void *src, void *dst, size_t count, const lm_dp_reduction *red) {
  size_t esz = lm_dtype_size(red->dtype);
  if (cc->g->nnodes == 1) {
    if (src != dst && count) memcpy(dst, src, count * esz);
    return 0;
  }
  if (cc->g->hier && red->op != LM_DP_CUSTOM) return ar_hier(cc, src, dst, count, red);
  if (count * esz <= cc->dp->rd_max || count < cc->g->nnodes) {
    if (src != dst && count) memcpy(dst, src, count * esz);
    return ar_rd(cc, dst, count, red);
  }
  return ar_pairwise(cc, src, dst, count, red);
}

/* ---- the hierarchical all_gather (docs/dataplane.md) ----
 *
 * Up: each level's members send their leader the blocks they hold (their own node's, then, at
 * the slice level, their host's), one message per run of ranks; the top level's leaders send
 * each other what they hold; then the whole result goes back down each level by the binomial
 * broadcast of the all_reduce. No scratch: blocks land in their place in the result. */
#define HS_AGUP 0xA0000000u
#define HS_AGTOP 0xB0000000u

/* Posts sends to (or receives from) node peer of the runs of every node under `who` at level lev
 * (lev < 0: who's own); rs must have room (ag_count). */
static void ag_runs(dp_cc *cc, uint32_t peer, bool send, int lev, uint32_t who, uint32_t slot, uint8_t *b,
                    size_t bytes, dp_req **rs, size_t *k) {
  lm_dp_group *g = cc->g;
  for (uint32_t n = 0; n < g->nnodes && !cc->rc; n++) {
    if (lev < 0 ? n != who : g->lead[lev][n] != who) continue;
    for (uint32_t q = g->run_start[n]; q < g->run_start[n + 1]; q++) {
      dp_run r = g->runs[q];
      uint32_t sl = slot | (r.first & 0xffffff);
      rs[(*k)++] = send ? cc_send(cc, peer, sl, b + (size_t)r.first * bytes, (size_t)r.len * bytes)
                        : cc_recv(cc, peer, sl, b + (size_t)r.first * bytes, (size_t)r.len * bytes);
    }
  }
}

static int ag_hier(dp_cc *cc, void *buf, size_t bytes) {
  lm_dp_group *g = cc->g;
  uint32_t me = g->self_node, l;
  size_t nr = g->run_start[g->nnodes], k = 0;
  dp_req **rs = NULL;
  int below = -1; /* the level whose group this worker leads (-1: none: it holds its own blocks) */
  for (l = 0; l < g->nlev && !cc->rc; l++) {
    uint32_t n = g->lev_n[l], idx = g->lev_idx[l];
    const uint32_t *nodes = g->lev_nodes[l];
    if (n > 1) {
      size_t need = idx + 1 < n ? nr : nr * (n - 1); /* runs sent or received, at most */
      free(rs);
      if (!(rs = calloc(need + 1, sizeof *rs))) return cc_fail(cc, LOOM_NO_MEMORY, "out of memory (all_gather)");
      k = 0;
      if (idx + 1 < n) ag_runs(cc, nodes[n - 1], true, below, me, HS_AGUP | l << 24, buf, bytes, rs, &k);
      else
        for (uint32_t j = 0; j + 1 < n; j++)
          ag_runs(cc, nodes[j], false, below, nodes[j], HS_AGUP | l << 24, buf, bytes, rs, &k);
      hs_flush(cc, rs, &k);
    }
    if (idx + 1 != n) break; /* not this level's leader: the result comes down */
    below = (int)l;
  }
  if (l == g->nlev && !cc->rc) {
    if (g->top_n > 1) {
      free(rs);
      if (!(rs = calloc(2 * nr * g->top_n + 1, sizeof *rs))) return cc_fail(cc, LOOM_NO_MEMORY, "out of memory (all_gather)");
      k = 0;
      for (uint32_t t = 0; t < g->top_n; t++) {
        if (t == g->top_idx) continue;
        ag_runs(cc, g->top_nodes[t], false, below, g->top_nodes[t], HS_AGTOP, buf, bytes, rs, &k);
        ag_runs(cc, g->top_nodes[t], true, below, me, HS_AGTOP, buf, bytes, rs, &k);
      }
      hs_flush(cc, rs, &k);
    }
    l = g->nlev - 1;
  }
  free(rs);
  for (int32_t b = (int32_t)l; b >= 0 && !cc->rc; b--)
    hs_bcast(cc, g->lev_nodes[b], g->lev_n[b], g->lev_idx[b], (uint32_t)b, buf, (size_t)g->n * bytes);
  return cc->rc;
}

/* all_gather among nodes: buf (n blocks) holds this node's members' blocks; on exit all. One
 * message per contiguous run of ranks per pair of nodes. */
static int ag_nodes(dp_cc *cc, void *buf, size_t bytes) {
  lm_dp_group *g = cc->g;
  uint32_t P = g->nnodes, me = g->self_node;
  uint8_t *b = buf;
  size_t nr = g->run_start[P], mine0 = g->run_start[me], mine1 = g->run_start[me + 1];
  dp_req **rs = calloc(nr * 2 + 2 * (size_t)P * (mine1 - mine0) + 1, sizeof *rs);
  if (!rs) return cc_fail(cc, LOOM_NO_MEMORY, "out of memory");
  size_t k = 0;
  for (uint32_t j = 0; j < P; j++) {
    if (j == me) continue;
    for (uint32_t q = g->run_start[j]; q < g->run_start[j + 1]; q++) {
      dp_run r = g->runs[q];
      rs[k++] = cc_recv(cc, j, r.first, b + (size_t)r.first * bytes, (size_t)r.len * bytes);
    }
  }
  for (uint32_t d = 1; d < P; d++) {
    uint32_t j = (me + d) % P;
    for (size_t q = mine0; q < mine1; q++) {
      dp_run r = g->runs[q];
      rs[k++] = cc_send(cc, j, r.first, b + (size_t)r.first * bytes, (size_t)r.len * bytes);
    }
  }
  cc_wait(cc, rs, k);
  free(rs);
  return cc->rc;
}

/* ---- local meeting points ---- */

typedef struct dp_meet {
  dp_link link;               /* in lm_dp.meets, key (tag, group key) */
  uint32_t nlocal, arrived, left;
  uint32_t ending;            /* members that reached dp_end (stopped touching shared buffers) */
  uint64_t sig;
  const char *what;
  int status;                 /* first failure of any local member */
  char why[LM_ERR_MSG_MAX];
  pthread_cond_t cv;
  uint32_t bar_count;
  _Atomic uint32_t bar_gen;
  _Atomic int failed;         /* status != 0, readable without the lock */
  bool *joined;
  const void **send;
  void **recv;
  int64_t *a0, *a1;
  void *shared;               /* a buffer the leader shares (scratch) */
  void *small;                /* a result buffer owned by the meeting point (freed with it) */
} dp_meet;

static void meet_free(dp_meet *m) {
  pthread_cond_destroy(&m->cv);
  free(m->small);
  free(m);
}

void dp_meets_free(lm_dp *dp) {
  /* meeting points some device never reached (their calls failed) */
  for (size_t i = 0; i < dp->meets.nb; i++)
    for (dp_link *e = dp->meets.b[i], *next; e; e = next) {
      next = e->next;
      meet_free((dp_meet *)e);
    }
  dp_map_free(&dp->meets);
}

void dp_meets_wake(lm_dp *dp) {
  pthread_mutex_lock(&dp->gmu);
  for (size_t i = 0; dp->meets.n && i < dp->meets.nb; i++)
    for (dp_link *e = dp->meets.b[i]; e; e = e->next) pthread_cond_broadcast(&((dp_meet *)e)->cv);
  pthread_mutex_unlock(&dp->gmu);
}

/* Records a failure of the local call (first one wins) and wakes everyone. gmu held. */
static void meet_fail_locked(dp_meet *m, int code, const char *why) {
  if (m->status == 0) {
    m->status = code;
    snprintf(m->why, sizeof m->why, "%s", why);
    atomic_store(&m->failed, 1);
  }
  pthread_cond_broadcast(&m->cv);
}

static void meet_fail(lm_dp *dp, dp_meet *m, int code, const char *why) {
  pthread_mutex_lock(&dp->gmu);
  meet_fail_locked(m, code, why);
  pthread_mutex_unlock(&dp->gmu);
}

/* Waits until all local members have reached this barrier (or the call failed). The cancel
 * flag is read on every wake-up: lm_dp_wake (dp_meets_wake) brings one at once; without it a
 * waiter looks every quarter of the liveness interval (50 ms by default). */
static int meet_barrier(lm_dp *dp, dp_meet *m, int64_t deadline, volatile int *cancel) {
  pthread_mutex_lock(&dp->gmu);
  if (m->status) {
    pthread_mutex_unlock(&dp->gmu);
    return m->status;
  }
  uint32_t gen = atomic_load(&m->bar_gen);
  if (++m->bar_count == m->nlocal) {
    m->bar_count = 0;
    atomic_store(&m->bar_gen, gen + 1);
    pthread_cond_broadcast(&m->cv);
    pthread_mutex_unlock(&dp->gmu);
    return 0;
  }
  pthread_mutex_unlock(&dp->gmu);
  int64_t spin_until = dp_now_ns() + dp->spin_ns;
  while (atomic_load(&m->bar_gen) == gen && !atomic_load(&m->failed) && dp_now_ns() < spin_until) sched_yield();
  pthread_mutex_lock(&dp->gmu);
  while (atomic_load(&m->bar_gen) == gen && m->status == 0) {
    int64_t t = dp_now_ns();
    if (t >= deadline) {
      char why[256];
      snprintf(why, sizeof why, "timed out waiting for the other devices of this worker to join the %s", m->what);
      meet_fail_locked(m, LOOM_TIMEOUT, why);
      break;
    }
    if (cancel && *cancel) {
      meet_fail_locked(m, LOOM_CANCELLED, "cancelled");
      break;
    }
    int64_t tick = dp->liveness_ns / 4;
    int64_t until = t + tick < deadline ? t + tick : deadline;
    struct timespec ts = {until / 1000000000ll, until % 1000000000ll};
    pthread_cond_timedwait(&m->cv, &dp->gmu, &ts);
  }
  int rc = atomic_load(&m->bar_gen) != gen ? 0 : m->status;
  pthread_mutex_unlock(&dp->gmu);
  return rc;
}

/* Joins (creating if first) the meeting point of (g, tag), registers this member's buffers and
 * waits for all local members. On failure *out is still set (the caller must meet_leave). */
static int meet_join(lm_dp_group *g, uint64_t tag, uint64_t sig, const char *what, uint32_t lpos, const void *send,
                     void *recv, int64_t a0, int64_t a1, int64_t deadline, volatile int *cancel, dp_meet **out) {
  lm_dp *dp = g->dp;
  dp_key k = {.tag = tag, .key2 = g->key};
  pthread_mutex_lock(&dp->gmu);
  dp_meet *m = (dp_meet *)dp_map_find(&dp->meets, &k);
  if (!m) {
    size_t L = g->nlocal;
    size_t sz = sizeof *m + L * (sizeof(bool) + 2 * sizeof(void *) + 2 * sizeof(int64_t)) + 64;
    m = calloc(1, sz);
    if (!m) {
      pthread_mutex_unlock(&dp->gmu);
      *out = NULL;
      return LOOM_NO_MEMORY;
    }
    uint8_t *p = (uint8_t *)(m + 1);
    m->send = (const void **)p;
    p += L * sizeof(void *);
    m->recv = (void **)p;
    p += L * sizeof(void *);
    m->a0 = (int64_t *)p;
    p += L * sizeof(int64_t);
    m->a1 = (int64_t *)p;
    p += L * sizeof(int64_t);
    m->joined = (bool *)p;
    m->link.key = k;
    m->nlocal = (uint32_t)L;
    m->sig = sig;
    m->what = what;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&m->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (dp_map_insert(&dp->meets, &m->link) < 0) {
      pthread_mutex_unlock(&dp->gmu);
      meet_free(m);
      *out = NULL;
      return LOOM_NO_MEMORY;
    }
  }
  *out = m;
  m->arrived++;
  if (m->joined[lpos]) {
    char why[256];
    snprintf(why, sizeof why, "rank %u joined the %s (tag %" PRIu64 ") twice", g->node_members[g->node_start[g->self_node] + lpos],
             what, tag);
    meet_fail_locked(m, LOOM_INVALID_ARGUMENT, why);
  } else if (sig != m->sig) {
    char why[256];
    snprintf(why, sizeof why, "devices of this worker made different calls (%s and %s) with tag %" PRIu64, m->what,
             what, tag);
    meet_fail_locked(m, LOOM_INVALID_ARGUMENT, why);
  }
  m->joined[lpos] = true;
  m->send[lpos] = send;
  m->recv[lpos] = recv;
  m->a0[lpos] = a0;
  m->a1[lpos] = a1;
  pthread_mutex_unlock(&dp->gmu);
  return meet_barrier(dp, m, deadline, cancel);
}

static void meet_leave(lm_dp *dp, dp_meet *m) {
  if (!m) return;
  pthread_mutex_lock(&dp->gmu);
  if (++m->left == m->nlocal) {
    dp_map_remove(&dp->meets, &m->link);
    pthread_mutex_unlock(&dp->gmu);
    meet_free(m);
    return;
  }
  pthread_mutex_unlock(&dp->gmu);
}

/* ---- the common frame of every collective ----
 *
 * A call is described by a dp_call: what it does per phase is in the op functions below.
 * The view gives the local members' buffers (one member: the caller's own). */

typedef struct dp_view {
  uint32_t L;                 /* local members */
  uint32_t lpos;              /* the caller's position */
  const uint32_t *ranks;      /* [L] their ranks, ascending */
  const void *const *send;
  void *const *recv;
  const int64_t *a0, *a1;
  dp_meet *m;                 /* NULL when L == 1 */
} dp_view;

typedef struct dp_ctx {
  lm_dp *dp;
  lm_dp_group *g;
  uint32_t rank;
  uint64_t tag, sig;
  const char *what;
  int64_t deadline;
  volatile int *cancel;
  dp_view v;
  dp_cc cc;                   /* the leader's */
  lm_err *err;
} dp_ctx;

static int dp_check_common(lm_dp_group *g, uint32_t rank, const char *what, lm_err *err) {
  if (!g) return lm_errf(err, LOOM_INVALID_ARGUMENT, "data plane: %s without a group", what);
  if (rank >= g->n)
    return lm_errf(err, LOOM_INVALID_ARGUMENT, "data plane: %s: rank %u out of range (group of %u)", what, rank, g->n);
  if (g->local_pos[rank] == DP_NONE)
    return lm_errf(err, LOOM_INVALID_ARGUMENT,
                   "data plane: %s: rank %u is worker %" PRIu64 " device %u, not a device of this worker (%" PRIu64 ")",
                   what, rank, g->m[rank].worker, g->m[rank].device, g->dp->cfg.self_id);
  return 0;
}

/* Sets up ctx and, with several local members, joins the meeting point. */
static int dp_begin(dp_ctx *c, lm_dp_group *g, uint32_t rank, uint64_t tag, uint64_t sig, const char *what,
                    const void *send, void *recv, int64_t a0, int64_t a1, const lm_dp_call *call, lm_err *err,
                    const void **s1, void **r1, int64_t *a01, int64_t *a11) {
  memset(c, 0, sizeof *c);
  c->dp = g->dp;
  c->g = g;
  c->rank = rank;
  c->tag = tag;
  c->sig = sig;
  c->what = what;
  c->err = err;
  c->deadline = dp_deadline(g->dp, call);
  c->cancel = call ? call->cancel : NULL;
  c->v.L = g->nlocal;
  c->v.lpos = g->local_pos[rank];
  c->v.ranks = g->node_members + g->node_start[g->self_node];
  if (c->v.lpos == 0) cc_init(&c->cc, g, what, tag, sig, c->deadline, c->cancel);
  if (g->nlocal == 1) {
    *s1 = send;
    *r1 = recv;
    *a01 = a0;
    *a11 = a1;
    c->v.send = s1;
    c->v.recv = r1;
    c->v.a0 = a01;
    c->v.a1 = a11;
    return 0;
  }
  int rc = meet_join(g, tag, sig, what, c->v.lpos, send, recv, a0, a1, c->deadline, c->cancel, &c->v.m);
  if (c->v.m) {
    c->v.send = c->v.m->send;
    c->v.recv = c->v.m->recv;
    c->v.a0 = c->v.m->a0;
    c->v.a1 = c->v.m->a1;
  }
  return rc;
}

static bool dp_leader(const dp_ctx *c) { return c->v.lpos == 0; }

/* Local barrier; no-op with one local member. */
static int dp_sync(dp_ctx *c) {
  if (!c->v.m) return 0;
  return meet_barrier(c->dp, c->v.m, c->deadline, c->cancel);
}

/* Records a failure seen by this member so the other local members stop too. */
static void dp_local_fail(dp_ctx *c, int code, const char *why) {
  if (c->v.m) meet_fail(c->dp, c->v.m, code, why);
}

/* Ends the call for this member and builds its error message. rc: this member's own result. */
static int dp_end(dp_ctx *c, int rc) {
  lm_dp *dp = c->dp;
  char why[LM_ERR_MSG_MAX];
  why[0] = 0;
  if (rc == 0 && c->v.m && atomic_load(&c->v.m->failed)) rc = LOOM_INTERNAL;
  if (dp_leader(c)) {
    if (rc && !c->cc.rc) {
      /* a local failure: the other workers must hear of it too */
      const char *w = "a device of this worker failed the call";
      if (c->v.m) {
        pthread_mutex_lock(&dp->gmu);
        if (c->v.m->status) {
          rc = c->v.m->status;
          snprintf(why, sizeof why, "%s", c->v.m->why);
          w = why;
        }
        pthread_mutex_unlock(&dp->gmu);
      }
      cc_fail(&c->cc, rc, "%s", w);
    }
    int crc = cc_finish(&c->cc);
    if (crc && !rc) rc = crc;
    if (crc) snprintf(why, sizeof why, "%s", c->cc.why);
  }
  if (c->v.m) {
    dp_meet *m = c->v.m;
    pthread_mutex_lock(&dp->gmu);
    if (rc && !m->status) meet_fail_locked(m, rc, why[0] ? why : lm_status_desc(rc));
    if (m->status) {
      if (!rc || !why[0]) {
        rc = m->status;
        snprintf(why, sizeof why, "%s", m->why);
      }
    }
    /* A failed call ends between barriers: other local members may still be in a phase that
     * reads or writes this member's buffers (a fold over every input, a copy out of the
     * leader's result, the leader's exchange receiving into them). Wait until every member
     * that joined has stopped too; the failure makes their barriers return at once, so this
     * lasts at most the rest of their current phase. (A successful call ends with a barrier
     * after which nobody touches another member's buffers.) */
    m->ending++;
    pthread_cond_broadcast(&m->cv);
    while (rc && m->ending < m->arrived) pthread_cond_wait(&m->cv, &dp->gmu);
    pthread_mutex_unlock(&dp->gmu);
    meet_leave(dp, m);
    c->v.m = NULL;
  }
  if (rc) {
    if (!why[0]) snprintf(why, sizeof why, "%s", lm_status_desc(rc));
    return lm_errf(c->err, rc, "data plane: %s (tag %" PRIu64 ", group of %u, rank %u): %s", c->what, c->tag,
                   c->g->n, c->rank, why);
  }
  return 0;
}

/* After the leader's exchange: publish its failure to the local members. */
static void dp_leader_done(dp_ctx *c) {
  if (c->cc.rc && c->v.m) meet_fail(c->dp, c->v.m, c->cc.rc, c->cc.why);
}

/* Elements [lo, hi) of count that local member lpos handles in a split phase (cache-line
 * aligned boundaries). */
static void dp_slice(size_t count, size_t esz, uint32_t L, uint32_t t, size_t *lo, size_t *hi) {
  size_t align = esz >= 64 ? 1 : 64 / esz;
  size_t units = (count + align - 1) / align;
  size_t a = units * t / L, b = units * (t + 1) / L;
  *lo = a * align < count ? a * align : count;
  *hi = b * align < count ? b * align : count;
}

/* out[0..n) = fold of xs[0..nx)[off .. off+n) left to right (elements of esz bytes). out may
 * alias xs[0] + off. */
static int dp_fold(const lm_dp_reduction *red, const void *const *xs, uint32_t nx, size_t off, size_t n, void *out,
                   lm_err *e) {
  size_t esz = lm_dtype_size(red->dtype);
  const uint8_t *x0 = (const uint8_t *)xs[0] + off * esz;
  if (n == 0) return 0;
  if (nx == 1) {
    if (out != x0) memcpy(out, x0, n * esz);
    return 0;
  }
  const void *acc = x0;
  for (uint32_t i = 1; i < nx; i++) {
    LM_TRY(lm_dp_reduce(red, acc, (const uint8_t *)xs[i] + off * esz, out, n, e));
    acc = out;
  }
  return 0;
}

static uint64_t dp_sig(uint64_t kind, uint64_t a, uint64_t b, uint64_t c) {
  return dp_mix(dp_mix(dp_mix(dp_mix(0x5349475f4c4f4f4dull, kind), a), b), c);
}

static int dp_size_check(size_t a, size_t b, size_t *out, const char *what, lm_err *err) {
  if (lm_mul_size(a, b, out) < 0)
    return lm_errf(err, LOOM_INVALID_ARGUMENT, "data plane: %s: size %zu x %zu overflows", what, a, b);
  return 0;
}

/* ---- all_reduce ---- */

static int dp_ar_gather_fold(dp_ctx *c, size_t count, const lm_dp_reduction *red);

int lm_dp_all_reduce(lm_dp_group *g, uint32_t rank, uint64_t tag, const void *send, void *recv, size_t count,
                     const lm_dp_reduction *red, const lm_dp_call *call, lm_err *err) {
  LM_TRY(dp_check_common(g, rank, "all_reduce", err));
  LM_TRY(lm_dp_reduction_check(red, err));
  size_t esz = lm_dtype_size(red->dtype), nbytes;
  LM_TRY(dp_size_check(count, esz, &nbytes, "all_reduce", err));
  if (count == 0) return 0;
  if (!send || !recv) return lm_errf(err, LOOM_INVALID_ARGUMENT, "data plane: all_reduce: NULL buffer");
  dp_ctx c;
  const void *s1;
  void *r1;
  int64_t x0, x1;
  /* the thresholds pick the algorithm: workers configured differently must not match */
  uint64_t sig = dp_sig(1, count, red->dtype,
                        dp_mix(dp_mix(dp_mix(red->op, g->dp->rd_max), g->dp->seg_bytes),
                               g->hier && red->op != LM_DP_CUSTOM));
  int rc = dp_begin(&c, g, rank, tag, sig, "all_reduce", send, recv, 0, 0, call, err, &s1, &r1, &x0, &x1);
  if (rc) return dp_end(&c, rc);
  if (red->op == LM_DP_CUSTOM && !g->contiguous) return dp_end(&c, dp_ar_gather_fold(&c, count, red));
  uint32_t L = c.v.L, t = c.v.lpos;
  void *nb = c.v.recv[0]; /* the node's value is built in the leader's result buffer */
  lm_err e;
  lm_err_clear(&e);
  if (L > 1 && nbytes <= DP_LOCAL_SMALL) {
    /* small: the leader folds alone into a buffer the meeting point owns, so the others copy
     * the result and leave without a last barrier (two barriers instead of four) */
    if (dp_leader(&c)) {
      void *buf = malloc(nbytes);
      if (!buf) dp_local_fail(&c, LOOM_NO_MEMORY, "out of memory");
      else {
        c.v.m->small = buf;
        rc = dp_fold(red, c.v.send, L, 0, count, buf, &e);
        if (rc) dp_local_fail(&c, rc, e.msg);
        else {
          ar_nodes(&c.cc, buf, buf, count, red);
          dp_leader_done(&c);
        }
      }
    }
    if ((rc = dp_sync(&c)) == 0) memcpy(recv, c.v.m->small, nbytes);
    return dp_end(&c, rc);
  }
  if (L > 1) {
    size_t lo, hi;
    dp_slice(count, esz, L, t, &lo, &hi);
    rc = dp_fold(red, c.v.send, L, lo, hi - lo, (uint8_t *)nb + lo * esz, &e);
    if (rc) {
      dp_local_fail(&c, rc, e.msg);
      return dp_end(&c, rc);
    }
    if ((rc = dp_sync(&c))) return dp_end(&c, rc);
  }
  if (dp_leader(&c)) {
    ar_nodes(&c.cc, L > 1 ? nb : send, nb, count, red);
    dp_leader_done(&c);
  }
  if (L > 1) {
    if ((rc = dp_sync(&c))) return dp_end(&c, rc);
    if (t > 0 && recv != nb) memcpy(recv, nb, nbytes);
    rc = dp_sync(&c); /* the leader's buffer stays until everyone copied */
  }
  return dp_end(&c, rc);
}

/* all_reduce for a custom body on a group whose workers' members interleave: every worker
 * gathers all inputs and folds them in group order (the spec's in-order schedule). */
static int dp_ar_gather_fold(dp_ctx *c, size_t count, const lm_dp_reduction *red) {
  lm_dp_group *g = c->g;
  size_t esz = lm_dtype_size(red->dtype), nbytes = count * esz, total;
  if (lm_mul_size(nbytes, g->n, &total) < 0) return LOOM_INVALID_ARGUMENT;
  int rc;
  if (!c->v.m) { /* one local member: all in this thread */
    uint8_t *s = dp_scratch_get(c->dp, total);
    if (!s) return cc_fail(&c->cc, LOOM_NO_MEMORY, "out of memory for the gathered inputs");
    memcpy(s + (size_t)c->rank * nbytes, c->v.send[0], nbytes);
    ag_nodes(&c->cc, s, nbytes);
    const void **xs = malloc(g->n * sizeof *xs);
    if (!xs) cc_fail(&c->cc, LOOM_NO_MEMORY, "out of memory");
    if (!c->cc.rc) {
      for (uint32_t i = 0; i < g->n; i++) xs[i] = s + (size_t)i * nbytes;
      lm_err e;
      lm_err_clear(&e);
      rc = dp_fold(red, xs, g->n, 0, count, c->v.recv[0], &e);
      if (rc) cc_fail(&c->cc, rc, "%s", e.msg);
    }
    free(xs);
    dp_scratch_put(c->dp, s);
    return c->cc.rc;
  }
  if (dp_leader(c)) {
    c->v.m->shared = dp_scratch_get(c->dp, total); /* published by the barrier below */
    if (!c->v.m->shared) dp_local_fail(c, LOOM_NO_MEMORY, "out of memory for the gathered inputs");
  }
  if ((rc = dp_sync(c))) goto out;
  uint8_t *s = c->v.m->shared;
  memcpy(s + (size_t)c->rank * nbytes, c->v.send[c->v.lpos], nbytes);
  if ((rc = dp_sync(c))) goto out;
  if (dp_leader(c)) {
    ag_nodes(&c->cc, s, nbytes);
    dp_leader_done(c);
  }
  if ((rc = dp_sync(c))) goto out;
  {
    size_t lo, hi;
    dp_slice(count, esz, c->v.L, c->v.lpos, &lo, &hi);
    const void **xs = malloc(g->n * sizeof *xs);
    if (!xs) {
      dp_local_fail(c, LOOM_NO_MEMORY, "out of memory");
      rc = LOOM_NO_MEMORY;
      goto out;
    }
    for (uint32_t i = 0; i < g->n; i++) xs[i] = s + (size_t)i * nbytes;
    lm_err e;
    lm_err_clear(&e);
    /* each member folds its slice straight into its own result, then copies the rest */
    rc = dp_fold(red, xs, g->n, lo, hi - lo, (uint8_t *)c->v.recv[c->v.lpos] + lo * esz, &e);
    free(xs);
    if (rc) {
      dp_local_fail(c, rc, e.msg);
      goto out;
    }
    if ((rc = dp_sync(c))) goto out;
    for (uint32_t u = 0; u < c->v.L; u++) {
      if (u == c->v.lpos) continue;
      size_t a, b;
      dp_slice(count, esz, c->v.L, u, &a, &b);
      memcpy((uint8_t *)c->v.recv[c->v.lpos] + a * esz, (uint8_t *)c->v.recv[u] + a * esz, (b - a) * esz);
    }
    rc = dp_sync(c);
  }
out:
  if (dp_leader(c) && c->v.m) {
    /* everyone passed the last barrier (or the call failed): the scratch can go */
    dp_scratch_put(c->dp, c->v.m->shared);
    c->v.m->shared = NULL;
  }
  return rc;
}

/* ---- all_gather ---- */

int lm_dp_all_gather(lm_dp_group *g, uint32_t rank, uint64_t tag, const void *send, void *recv, size_t bytes,
                     const lm_dp_call *call, lm_err *err) {
  LM_TRY(dp_check_common(g, rank, "all_gather", err));
  size_t total;
  LM_TRY(dp_size_check(bytes, g->n, &total, "all_gather", err));
  if (bytes == 0) return 0;
  if (!send || !recv) return lm_errf(err, LOOM_INVALID_ARGUMENT, "data plane: all_gather: NULL buffer");
  if ((const uint8_t *)send < (uint8_t *)recv + total && (uint8_t *)recv < (const uint8_t *)send + bytes)
    return lm_errf(err, LOOM_INVALID_ARGUMENT, "data plane: all_gather: send and receive buffers overlap");
  dp_ctx c;
  const void *s1;
  void *r1;
  int64_t x0, x1;
  int rc = dp_begin(&c, g, rank, tag, dp_sig(2, bytes, 0, g->hier), "all_gather", send, recv, 0, 0, call, err, &s1,
                    &r1, &x0, &x1);
  if (rc) return dp_end(&c, rc);
  uint32_t L = c.v.L;
  uint8_t *R = c.v.recv[0];
  if (g->nnodes == 1) {
    /* one worker: every member copies every block into its own result */
    for (uint32_t u = 0; u < L; u++)
      memcpy((uint8_t *)recv + (size_t)c.v.ranks[u] * bytes, c.v.send[u], bytes);
    return dp_end(&c, dp_sync(&c));
  }
  /* the leader's result gathers this worker's blocks, then everything */
  memcpy(R + (size_t)rank * bytes, send, bytes);
  if ((rc = dp_sync(&c))) return dp_end(&c, rc);
  if (dp_leader(&c)) {
    if (g->hier) ag_hier(&c.cc, R, bytes); /* in levels: hosts, slices (docs/dataplane.md) */
    else ag_nodes(&c.cc, R, bytes);
    dp_leader_done(&c);
  }
  if (L > 1) {
    if ((rc = dp_sync(&c))) return dp_end(&c, rc);
    if (c.v.lpos > 0) memcpy(recv, R, total);
    rc = dp_sync(&c);
  }
  return dp_end(&c, rc);
}

/* ---- reduce_scatter ---- */

int lm_dp_reduce_scatter(lm_dp_group *g, uint32_t rank, uint64_t tag, const void *send, void *recv, size_t count,
                         const lm_dp_reduction *red, const lm_dp_call *call, lm_err *err) {
  LM_TRY(dp_check_common(g, rank, "reduce_scatter", err));
  LM_TRY(lm_dp_reduction_check(red, err));
  size_t esz = lm_dtype_size(red->dtype), blk, total;
  LM_TRY(dp_size_check(count, esz, &blk, "reduce_scatter", err));
  LM_TRY(dp_size_check(blk, g->n, &total, "reduce_scatter", err));
  if (count == 0) return 0;
  if (!send || !recv) return lm_errf(err, LOOM_INVALID_ARGUMENT, "data plane: reduce_scatter: NULL buffer");
  if ((const uint8_t *)send < (uint8_t *)recv + blk && (uint8_t *)recv < (const uint8_t *)send + total)
    return lm_errf(err, LOOM_INVALID_ARGUMENT, "data plane: reduce_scatter: send and receive buffers overlap");
  if (red->op == LM_DP_CUSTOM && !g->contiguous) {
    /* a custom body over interleaved workers: the in-order all_reduce of everything, then
     * this member's block (costlier, but the order is the spec's) */
    uint8_t *all = malloc(total);
    if (!all) return lm_errf(err, LOOM_NO_MEMORY, "data plane: reduce_scatter: out of memory");
    int rc = lm_dp_all_reduce(g, rank, tag, send, all, count * g->n, red, call, err);
    if (rc == 0) memcpy(recv, all + (size_t)rank * blk, blk);
    free(all);
    return rc;
  }
  dp_ctx c;
  const void *s1;
  void *r1;
  int64_t x0, x1;
  int rc = dp_begin(&c, g, rank, tag, dp_sig(3, count, red->dtype, red->op), "reduce_scatter", send, recv, 0, 0,
                    call, err, &s1, &r1, &x0, &x1);
  if (rc) return dp_end(&c, rc);
  uint32_t L = c.v.L, P = g->nnodes, me = g->self_node;
  lm_err e;
  lm_err_clear(&e);
  if (P == 1) {
    /* each member folds its own block over the local members */
    rc = dp_fold(red, c.v.send, L, (size_t)rank * count, count, recv, &e);
    if (rc) dp_local_fail(&c, rc, e.msg);
    int rc2 = dp_sync(&c); /* others read our send buffer until here */
    return dp_end(&c, rc ? rc : rc2);
  }
  /* the node's partial sums of all n blocks: the caller's own send with one local member,
   * else a shared scratch filled slice by slice */
  const uint8_t *S = send;
  if (L > 1) {
    if (dp_leader(&c)) {
      c.v.m->shared = dp_scratch_get(c.dp, total);
      if (!c.v.m->shared) dp_local_fail(&c, LOOM_NO_MEMORY, "out of memory for partial sums");
    }
    if ((rc = dp_sync(&c))) goto out;
    S = c.v.m->shared;
    size_t lo, hi;
    dp_slice(count * g->n, esz, L, c.v.lpos, &lo, &hi);
    rc = dp_fold(red, c.v.send, L, lo, hi - lo, (uint8_t *)S + lo * esz, &e);
    if (rc) {
      dp_local_fail(&c, rc, e.msg);
      goto out;
    }
    if ((rc = dp_sync(&c))) goto out;
  }
  if (dp_leader(&c)) {
    dp_cc *cc = &c.cc;
    size_t mine = g->node_start[me + 1] - g->node_start[me]; /* == L */
    size_t per = mine * blk;                                 /* this node's blocks from one node */
    uint8_t *T = dp_scratch_get(c.dp, (P - 1) * per);
    dp_req **rs = calloc((size_t)P * (g->run_start[P] + 1), sizeof *rs);
    if (!T || !rs) cc_fail(cc, LOOM_NO_MEMORY, "out of memory");
    size_t k = 0;
    /* receive every other node's partials of our members' blocks, packed run after run */
    for (uint32_t j = 0; j < P && !cc->rc; j++) {
      if (j == me) continue;
      uint8_t *dst = T + (j < me ? j : j - 1) * per;
      for (uint32_t q = g->run_start[me]; q < g->run_start[me + 1]; q++) {
        dp_run r = g->runs[q];
        rs[k++] = cc_recv(cc, j, r.first, dst, (size_t)r.len * blk);
        dst += (size_t)r.len * blk;
      }
    }
    for (uint32_t d = 1; d < P && !cc->rc; d++) {
      uint32_t j = (me + d) % P;
      for (uint32_t q = g->run_start[j]; q < g->run_start[j + 1]; q++) {
        dp_run r = g->runs[q];
        rs[k++] = cc_send(cc, j, r.first, S + (size_t)r.first * blk, (size_t)r.len * blk);
      }
    }
    cc_wait(cc, rs, k);
    /* fold each local member's block over nodes in order, into its result */
    const void **xs = malloc(P * sizeof *xs);
    if (!xs) cc_fail(cc, LOOM_NO_MEMORY, "out of memory");
    for (uint32_t u = 0; u < L && !cc->rc; u++) {
      uint32_t r = c.v.ranks[u];
      for (uint32_t j = 0; j < P; j++)
        xs[j] = j == me ? S + (size_t)r * blk : T + (j < me ? j : j - 1) * per + (size_t)u * blk;
      int frc = dp_fold(red, xs, P, 0, count, c.v.recv[u], &e);
      if (frc) cc_fail(cc, frc, "%s", e.msg);
    }
    free(xs);
    free(rs);
    dp_scratch_put(c.dp, T);
    dp_leader_done(&c);
  }
  rc = dp_sync(&c);
out:
  if (L > 1 && dp_leader(&c) && c.v.m) {
    dp_scratch_put(c.dp, c.v.m->shared);
    c.v.m->shared = NULL;
  }
  return dp_end(&c, rc);
}

/* ---- all_to_all ---- */

int lm_dp_all_to_all(lm_dp_group *g, uint32_t rank, uint64_t tag, const void *send, void *recv, size_t bytes,
                     const lm_dp_call *call, lm_err *err) {
  LM_TRY(dp_check_common(g, rank, "all_to_all", err));
  size_t total;
  LM_TRY(dp_size_check(bytes, g->n, &total, "all_to_all", err));
  if (bytes == 0) return 0;
  if (!send || !recv) return lm_errf(err, LOOM_INVALID_ARGUMENT, "data plane: all_to_all: NULL buffer");
  if ((const uint8_t *)send < (uint8_t *)recv + total && (uint8_t *)recv < (const uint8_t *)send + total)
    return lm_errf(err, LOOM_INVALID_ARGUMENT, "data plane: all_to_all: send and receive buffers overlap");
  dp_ctx c;
  const void *s1;
  void *r1;
  int64_t x0, x1;
  int rc = dp_begin(&c, g, rank, tag, dp_sig(4, bytes, 0, 0), "all_to_all", send, recv, 0, 0, call, err, &s1, &r1,
                    &x0, &x1);
  if (rc) return dp_end(&c, rc);
  uint32_t L = c.v.L, n = g->n, me = g->self_node;
  /* blocks between local members: each member fetches its own */
  for (uint32_t u = 0; u < L; u++) {
    uint32_t i = c.v.ranks[u];
    memcpy((uint8_t *)recv + (size_t)i * bytes, (const uint8_t *)c.v.send[u] + (size_t)rank * bytes, bytes);
  }
  if (dp_leader(&c) && g->nnodes > 1) {
    dp_cc *cc = &c.cc;
    size_t remote = n - L;
    dp_req **rs = calloc(2 * (size_t)L * remote + 1, sizeof *rs);
    if (!rs) cc_fail(cc, LOOM_NO_MEMORY, "out of memory");
    size_t k = 0;
    for (uint32_t i = 0; i < n && !cc->rc; i++) {
      uint32_t ni = g->node_of[i];
      if (ni == me) continue;
      for (uint32_t u = 0; u < L; u++) /* block i -> local u */
        rs[k++] = cc_recv(cc, ni, i * n + c.v.ranks[u], (uint8_t *)c.v.recv[u] + (size_t)i * bytes, bytes);
    }
    for (uint32_t d = 1; d < g->nnodes && !cc->rc; d++) {
      uint32_t nj = (me + d) % g->nnodes;
      for (uint32_t a = g->node_start[nj]; a < g->node_start[nj + 1]; a++) {
        uint32_t j = g->node_members[a];
        for (uint32_t u = 0; u < L; u++)
          rs[k++] = cc_send(cc, nj, c.v.ranks[u] * n + j, (const uint8_t *)c.v.send[u] + (size_t)j * bytes, bytes);
      }
    }
    cc_wait(cc, rs, k);
    free(rs);
    dp_leader_done(&c);
  }
  rc = dp_sync(&c);
  return dp_end(&c, rc);
}

/* ---- collective_permute ---- */

int lm_dp_collective_permute(lm_dp_group *g, uint32_t rank, uint64_t tag, const void *send, void *recv,
                             size_t bytes, int64_t send_to, int64_t recv_from, const lm_dp_call *call, lm_err *err) {
  LM_TRY(dp_check_common(g, rank, "collective_permute", err));
  if (send_to < -1 || send_to >= (int64_t)g->n || recv_from < -1 || recv_from >= (int64_t)g->n)
    return lm_errf(err, LOOM_INVALID_ARGUMENT,
                   "data plane: collective_permute: send_to %" PRId64 " / recv_from %" PRId64 " out of range (group of %u)",
                   send_to, recv_from, g->n);
  if (bytes == 0) return 0;
  if ((send_to >= 0 && !send) || !recv)
    return lm_errf(err, LOOM_INVALID_ARGUMENT, "data plane: collective_permute: NULL buffer");
  /* sending from a buffer that is also being received into: keep a copy of what goes out */
  void *staged = NULL;
  if (send_to >= 0 && (const uint8_t *)send < (uint8_t *)recv + bytes &&
      (uint8_t *)recv < (const uint8_t *)send + bytes) {
    staged = malloc(bytes);
    if (!staged) return lm_errf(err, LOOM_NO_MEMORY, "data plane: collective_permute: out of memory");
    memcpy(staged, send, bytes);
    send = staged;
  }
  dp_ctx c;
  const void *s1;
  void *r1;
  int64_t x0, x1;
  int rc = dp_begin(&c, g, rank, tag, dp_sig(5, bytes, 0, 0), "collective_permute", send, recv, send_to, recv_from,
                    call, err, &s1, &r1, &x0, &x1);
  if (rc) {
    rc = dp_end(&c, rc);
    free(staged);
    return rc;
  }
  uint32_t L = c.v.L, me = g->self_node;
  /* check the local pairs agree */
  if (recv_from >= 0 && g->node_of[recv_from] == me &&
      c.v.a0[g->local_pos[recv_from]] != (int64_t)rank) {
    char why[200];
    snprintf(why, sizeof why, "rank %u expects data from rank %" PRId64 ", which sends to %" PRId64, rank, recv_from,
             c.v.a0[g->local_pos[recv_from]]);
    dp_local_fail(&c, LOOM_INVALID_ARGUMENT, why);
    rc = dp_end(&c, LOOM_INVALID_ARGUMENT);
    free(staged);
    return rc;
  }
  if (recv_from < 0) memset(recv, 0, bytes);
  else if (g->node_of[recv_from] == me) memcpy(recv, c.v.send[g->local_pos[recv_from]], bytes);
  if (dp_leader(&c) && g->nnodes > 1) {
    dp_cc *cc = &c.cc;
    dp_req **rs = calloc(2 * (size_t)L + 1, sizeof *rs);
    if (!rs) cc_fail(cc, LOOM_NO_MEMORY, "out of memory");
    size_t k = 0;
    for (uint32_t u = 0; u < L && !cc->rc; u++) {
      int64_t s = c.v.a1[u], t = c.v.a0[u];
      if (s >= 0 && g->node_of[s] != me) rs[k++] = cc_recv(cc, g->node_of[s], (uint32_t)s, c.v.recv[u], bytes);
      if (t >= 0 && g->node_of[t] != me) rs[k++] = cc_send(cc, g->node_of[t], c.v.ranks[u], c.v.send[u], bytes);
    }
    cc_wait(cc, rs, k);
    free(rs);
    dp_leader_done(&c);
  }
  rc = dp_sync(&c);
  rc = dp_end(&c, rc);
  free(staged);
  return rc;
}

/* ---- collective_broadcast ---- */

int lm_dp_broadcast(lm_dp_group *g, uint32_t rank, uint64_t tag, uint32_t root, const void *send, void *recv,
                    size_t bytes, const lm_dp_call *call, lm_err *err) {
  LM_TRY(dp_check_common(g, rank, "collective_broadcast", err));
  if (root >= g->n)
    return lm_errf(err, LOOM_INVALID_ARGUMENT, "data plane: collective_broadcast: root %u out of range (group of %u)",
                   root, g->n);
  if (bytes == 0) return 0;
  if (!recv || (rank == root && !send))
    return lm_errf(err, LOOM_INVALID_ARGUMENT, "data plane: collective_broadcast: NULL buffer");
  dp_ctx c;
  const void *s1;
  void *r1;
  int64_t x0, x1;
  int rc = dp_begin(&c, g, rank, tag, dp_sig(6, bytes, root, 0), "collective_broadcast", send, recv, 0, 0, call, err,
                    &s1, &r1, &x0, &x1);
  if (rc) return dp_end(&c, rc);
  uint32_t P = g->nnodes, me = g->self_node, R = g->node_of[root];
  const void *src = me == R ? c.v.send[g->local_pos[root]] : c.v.recv[0];
  if (dp_leader(&c) && P > 1) {
    /* binomial tree over the nodes, rooted at the root's node */
    dp_cc *cc = &c.cc;
    uint32_t vr = (me + P - R) % P, mask = 1;
    while (mask < P && !(vr & mask)) mask <<= 1;
    if (vr != 0) cc_wait1(cc, cc_recv(cc, (R + (vr & ~mask)) % P, 0, c.v.recv[0], bytes));
    if (vr == 0) {
      mask = 1;
      while (mask < P) mask <<= 1;
    }
    dp_req **rs = calloc(32, sizeof *rs);
    size_t k = 0;
    if (!rs) cc_fail(cc, LOOM_NO_MEMORY, "out of memory");
    for (mask >>= 1; mask > 0 && !cc->rc; mask >>= 1)
      if (vr + mask < P) rs[k++] = cc_send(cc, (R + vr + mask) % P, 0, src, bytes);
    cc_wait(cc, rs, k);
    free(rs);
    dp_leader_done(&c);
  }
  if ((rc = dp_sync(&c))) return dp_end(&c, rc);
  if (recv != src) memcpy(recv, src, bytes);
  rc = dp_sync(&c); /* the source stays until everyone copied */
  return dp_end(&c, rc);
}

int lm_dp_barrier(lm_dp_group *g, uint32_t rank, uint64_t tag, const lm_dp_call *call, lm_err *err) {
  uint8_t one = 1, out = 0;
  lm_dp_reduction red = {.dtype = LOOM_DTYPE_U8, .op = LM_DP_OR};
  return lm_dp_all_reduce(g, rank, tag, &one, &out, 1, &red, call, err);
}
