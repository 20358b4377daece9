/* Elastic recovery at the controller (docs/elastic.md). When a worker holding virtual devices is
 * lost, its launches in flight are taken aside (aborted on the other workers, their old sequence
 * numbers forgotten) and the lost worker is replaced:
 *
 *   1. swap: a standby of as many devices (same slice preferred; `loom worker --standby`) takes
 *      over the lost worker's virtual device ids (lm_registry_swap). With none, the recovery
 *      waits up to --recover-wait for a new worker, holding the clients' requests meanwhile;
 *   2. programs the lost worker had loaded are loaded on the replacement;
 *   3. every live shard the lost worker held is restored on the replacement: copied from a
 *      replica on another worker, else from its snapshot in another worker's host memory
 *      (puts are snapshotted when they are created), else, for an array a completed launch
 *      computed, by replaying that launch from the launch log (planned here, recursively for
 *      its inputs lost too; "replays" below); arrays with none of these fail with an error
 *      naming them and why. Copies go worker to worker (SHARD_COPY); the replacement lists the
 *      shard as pending at once, so launches that read it wait for it;
 *   4. once the programs are loaded, the replays run (in the order of the launches they
 *      recompute, on every device of each, scratch outputs on the healthy workers), then the
 *      launches taken aside are re-issued in their order with new sequence numbers (launches
 *      are deterministic: the results are bitwise the same), and the held requests are
 *      replayed. The clients' futures complete normally.
 *
 * Arrays a client deletes while a launch in flight reads them are kept ("zombies") until no
 * active launch reads them, so a re-issued launch still finds its inputs; so are deleted arrays
 * that the replay of a live array would read (lineage, within --replay-keep-mb). One recovery runs at a
 * time; workers lost meanwhile queue. Everything runs on the loop thread. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/dtype.h"
#include "common/log.h"
#include "controller/ctl.h"

enum { R_IDLE = 0, R_WAITING = 1, R_LOADING = 2 };

typedef struct c_replay c_replay_t;
static void replay_free(c_replay_t *rp);
static void dispatch_replays(ctl *c);

#define REC_EVENTS 32
#define REC_LOAD_LIMIT_MS 60000 /* the replacement must load the programs within this */

typedef struct rec_frame {
  peer *p;
  lm_frame f;                /* meta and payload are copies owned here */
  struct rec_frame *next;
} rec_frame;

typedef struct rec_lost {
  uint32_t worker;
  char why[LM_REG_REASON_MAX];
  struct rec_lost *next;
} rec_lost;

typedef struct rec_zombie {
  lm_session *session;
  c_array *a;                /* a copy of the deleted array's metadata */
  uint64_t kept_bytes;       /* > 0: kept for a replay, counted in ctl_rec.kept_bytes */
  struct rec_zombie *next;
} rec_zombie;

/* A lost array to recompute by replaying its producer (planned in rec_swap). */
enum { T_OPEN = 0, T_VISITING = 1, T_OK = 2, T_BROKEN = 3 };
typedef struct rec_target {
  lm_session *s;
  c_array *a;                /* the session's array, or a zombie's copy */
  uint32_t dev;              /* a lost shard's device (named in errors) */
  int st;                    /* T_* */
  bool lazy;                 /* a deleted array kept for replays: recomputed only if a replay needs it */
} rec_target;

/* A replay: a completed launch run again on the new device map (c_launch.replay). */
struct c_replay {
  uint64_t orig_seq;         /* the launch recomputed (its log entry) */
  lm_session *s;             /* NULL once the session is gone (not dispatched then) */
  uint64_t *in;              /* [nin] its inputs */
  uint32_t nin, nout, nproc;
  uint64_t *outs;            /* [nproc * nout] per process: the target's id on the replacement, else scratch */
  uint64_t *scratch;         /* [nout] the scratch ids, freed on the launch's workers when it is over */
  uint64_t *targets;         /* [ntargets] the arrays it restores */
  uint32_t ntargets;
  uint32_t dead;
  uint64_t began_ms;         /* the recovery's start */
  bool dispatched;
};

typedef struct rec_load {
  uint64_t rid;
  uint64_t program;
} rec_load;

struct ctl_rec {
  int phase;                 /* R_* */
  uint32_t dead, repl;       /* the lost worker and its replacement */
  char why[LM_REG_REASON_MAX];
  uint64_t began_ms, deadline_ms;
  c_launch **launches;       /* taken aside, in sequence order (unlisted, unhashed) */
  size_t nlaunches;
  rec_load *loads;
  size_t nloads, loads_pending;
  uint32_t restored, lost_arrays;
  rec_frame *dhead, *dtail;  /* client requests held while recovering */
  size_t ndeferred;
  rec_lost *queue;           /* workers lost while a recovery ran */
  rec_zombie *zombies;
  uint64_t kept_bytes;       /* zombies kept for replays (--replay-keep-mb) ... */
  uint32_t nkept;            /* ... and how many (at most REPLAY_KEEP_MAX) */
  rec_target *targets;       /* this recovery's arrays to recompute */
  size_t ntargets, targets_cap;
  c_launch **replays;        /* planned replays, in the order of the launches they recompute */
  size_t nreplays;
  uint32_t replayed;         /* arrays being recomputed */
  uint64_t next_scratch;     /* scratch ids from LM_CTL_RESERVED_IDS on */
  char events[REC_EVENTS][240];
  uint32_t nevents;          /* total written; the ring keeps the last REC_EVENTS */
  uint64_t next_tag;
  uint32_t completed;
  /* drain (a live worker handed over to a standby): one at a time */
  bool draining;             /* the recovery under way is a drain */
  uint32_t drain_worker;     /* the worker being drained, UINT32_MAX: none */
  uint32_t drain_repl;
  peer *drain_client;        /* who asked (NULL once gone) */
  uint64_t drain_rid;
  uint64_t drain_ack_rid;    /* the DRAIN sent to the worker once its devices moved (0: not yet) */
  uint64_t drain_began_ms;
  uint32_t drain_shards;
  /* a drain waiting for a standby that registered but has not published its data plane yet */
  peer *dw_client;           /* NULL: none waits */
  uint64_t dw_rid, dw_deadline_ms;
  uint32_t dw_worker;
};

static void event(ctl *c, bool warn, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void event(ctl *c, bool warn, const char *fmt, ...) {
  struct ctl_rec *r = c->rec;
  char *e = r->events[r->nevents % REC_EVENTS];
  uint64_t t = ctl_now_ms(c) - c->start_ms;
  int n = snprintf(e, sizeof r->events[0], "+%llu.%03llus ", (unsigned long long)(t / 1000),
                   (unsigned long long)(t % 1000));
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e + n, sizeof r->events[0] - (size_t)n, fmt, ap);
  va_end(ap);
  r->nevents++;
  lm_log(warn ? LM_LOG_WARN : LM_LOG_INFO, "recovery: %s", e + n);
}

int ctl_recover_init(ctl *c) {
  c->rec = calloc(1, sizeof *c->rec);
  if (c->rec) c->rec->drain_worker = UINT32_MAX;
  return c->rec ? 0 : LOOM_NO_MEMORY;
}

static void frame_free(rec_frame *fr) {
  free(fr->f.meta);
  free(fr->f.payload);
  free(fr);
}

static void zombie_free(rec_zombie *z) {
  ctl_array_destroy(z->a);
  free(z);
}

void ctl_recover_free(ctl *c) {
  struct ctl_rec *r = c->rec;
  if (!r) return;
  while (r->dhead) {
    rec_frame *n = r->dhead->next;
    frame_free(r->dhead);
    r->dhead = n;
  }
  while (r->queue) {
    rec_lost *n = r->queue->next;
    free(r->queue);
    r->queue = n;
  }
  while (r->zombies) {
    rec_zombie *n = r->zombies->next;
    zombie_free(r->zombies);
    r->zombies = n;
  }
  for (size_t i = 0; i < r->nlaunches; i++) { /* list them again: ctl_launches_free frees the active list */
    c_launch *l = r->launches[i];
    l->prev = NULL;
    l->next = c->active;
    if (c->active) c->active->prev = l;
    c->active = l;
  }
  free(r->launches);
  free(r->loads);
  for (size_t i = 0; i < r->nreplays; i++) { /* (the programs are freed wholesale) */
    replay_free(r->replays[i]->replay);
    free(r->replays[i]->r_inputs);
    free(r->replays[i]);
  }
  free(r->replays);
  free(r->targets);
  free(r);
  c->rec = NULL;
}

/* ---- helpers ---- */

static bool worker_usable(ctl *c, uint32_t id) {
  const lm_reg_worker *w = lm_registry_worker(c->reg, id);
  return w && w->state == LM_WORKER_ALIVE && !w->problem[0] && id < c->worker_peer_cap && c->worker_peer[id] &&
         w->dataplane_len > 0;
}

/* An alive standby with ndev devices and a data plane, preferring the slice `slice`. */
static uint32_t find_standby(ctl *c, uint32_t ndev, const char *slice) {
  uint32_t n = lm_registry_worker_count(c->reg), best = UINT32_MAX;
  for (uint32_t i = 0; i < n; i++) {
    const lm_reg_worker *w = lm_registry_worker(c->reg, i);
    if (!w->standby || w->ndevices != ndev || !worker_usable(c, i)) continue;
    if (!strcmp(w->slice, slice)) return i;
    if (best == UINT32_MAX) best = i;
  }
  return best;
}

/* A standby that registered but whose data plane is not known yet (WORKER_DATAPLANE follows the
 * registration): a recovery waits for it (briefly) rather than failing at once. */
#define PENDING_STANDBY_WAIT_MS 5000
static bool standby_pending(ctl *c, uint32_t ndev) {
  uint32_t n = lm_registry_worker_count(c->reg);
  for (uint32_t i = 0; i < n; i++) {
    const lm_reg_worker *w = lm_registry_worker(c->reg, i);
    if (w->standby && w->ndevices == ndev && w->state == LM_WORKER_ALIVE && !w->problem[0] && !w->dataplane_len &&
        i < c->worker_peer_cap && c->worker_peer[i])
      return true;
  }
  return false;
}

static bool recovery_possible(ctl *c) {
  if (c->cfg.recover_wait_ms) return true;
  uint32_t n = lm_registry_worker_count(c->reg);
  for (uint32_t i = 0; i < n; i++)
    if (lm_registry_worker(c->reg, i)->standby && worker_usable(c, i)) return true;
  return false;
}

static void link_active(ctl *c, c_launch *l) {
  l->prev = NULL;
  l->next = c->active;
  if (c->active) c->active->prev = l;
  c->active = l;
}

static void unlink_active(ctl *c, c_launch *l) {
  if (l->prev) l->prev->next = l->next;
  else c->active = l->next;
  if (l->next) l->next->prev = l->prev;
  l->prev = l->next = NULL;
}

static int cmp_launch(const void *a, const void *b) {
  uint64_t x = (*(c_launch *const *)a)->seq, y = (*(c_launch *const *)b)->seq;
  return x < y ? -1 : x > y;
}

static bool same_region(const c_array *a, uint32_t i, uint32_t j) {
  int64_t oi[LM_SHARD_MAX_RANK], si[LM_SHARD_MAX_RANK], oj[LM_SHARD_MAX_RANK], sj[LM_SHARD_MAX_RANK];
  lm_sharding_shard(&a->sh, a->rank, a->dims, i, oi, si);
  lm_sharding_shard(&a->sh, a->rank, a->dims, j, oj, sj);
  return !memcmp(oi, oj, (size_t)a->rank * sizeof *oi) && !memcmp(si, sj, (size_t)a->rank * sizeof *si);
}

/* Marks a failed with that status and message (its clients' gets and launches see them). */
static void array_fail(c_array *a, int code, const char *msg) {
  a->state = A_FAILED;
  a->code = code;
  free(a->msg);
  a->msg = strdup(msg);
}

static uint32_t dev_worker(ctl *c, uint32_t v) { return lm_registry_device(c->reg, v)->worker; }

/* Sends the two halves of a shard copy: from (src, its device src_local or its snapshot of
 * device v) to (dst, its device dst_local or a snapshot of device v); receipt: dst confirms to src
 * that it kept the bytes; report: dst tells the controller how it ended (SNAPSHOT_KEPT). Returns
 * the copy's tag. */
static uint64_t send_copy(ctl *c, lm_session *s, const c_array *a, uint32_t k, uint32_t src, bool src_backup,
                          uint32_t src_local, uint32_t dst, bool dst_backup, uint32_t dst_local, bool receipt,
                          bool report) {
  int64_t off[LM_SHARD_MAX_RANK], sd[LM_SHARD_MAX_RANK];
  lm_sharding_shard(&a->sh, a->rank, a->dims, k, off, sd);
  uint64_t dims[LM_SHARD_MAX_RANK];
  for (int d = 0; d < a->rank; d++) dims[d] = (uint64_t)sd[d];
  uint64_t tag = ++c->rec->next_tag;
  Lmw__ShardCopy m = LMW__SHARD_COPY__INIT;
  m.session = s->id;
  m.array = a->id;
  m.tag = tag;
  m.device = a->devs[k];
  m.dtype = (uint32_t)a->dtype;
  m.n_dims = (size_t)a->rank;
  m.dims = dims;
  m.receipt = receipt;
  m.report = report;
  m.send = true;
  m.peer = dst;
  m.backup = src_backup;
  m.local_index = src_local;
  ctl_worker_send(c, src, LM_MSG_SHARD_COPY, 0, &m.base, NULL, 0, NULL);
  m.send = false;
  m.peer = src;
  m.backup = dst_backup;
  m.local_index = dst_local;
  ctl_worker_send(c, dst, LM_MSG_SHARD_COPY, 0, &m.base, NULL, 0, NULL);
  lm_session_touch(s, src);
  lm_session_touch(s, dst);
  return tag;
}

/* The next usable regular worker after `holder` (in id order, wrapping), or UINT32_MAX. */
static uint32_t pick_buddy(ctl *c, uint32_t holder) {
  uint32_t n = lm_registry_worker_count(c->reg);
  for (uint32_t k = 1; k < n; k++) {
    uint32_t i = (holder + k) % n;
    if (!lm_registry_worker(c->reg, i)->standby && worker_usable(c, i)) return i;
  }
  return UINT32_MAX;
}

/* (also for ctl_snapshot.c) */
bool ctl_shard_replicated(ctl *c, const c_array *a, uint32_t k) {
  uint32_t hw = dev_worker(c, a->devs[k]);
  for (uint32_t j = 0; j < a->sh.ndev; j++)
    if (j != k && dev_worker(c, a->devs[j]) != hw && same_region(a, k, j)) return true;
  return false;
}

/* Chooses a buddy for shard k of a (a->bk[k]) when it has no replica on another worker. */
static bool plan_shard(ctl *c, c_array *a, uint32_t k) {
  if (ctl_shard_replicated(c, a, k)) return false; /* a replica elsewhere */
  uint32_t hw = dev_worker(c, a->devs[k]);
  uint32_t buddy = pick_buddy(c, hw);
  if (buddy == UINT32_MAX || !worker_usable(c, hw)) return false;
  if (!a->bk) {
    a->bk = malloc(a->sh.ndev * sizeof *a->bk);
    if (!a->bk) return false;
    for (uint32_t j = 0; j < a->sh.ndev; j++) a->bk[j] = LM_REG_NO_DEVICE;
  }
  a->bk[k] = buddy;
  return true;
}

/* Snapshots shard k of a into buddy's host memory (also for ctl_snapshot.c). */
uint64_t ctl_snapshot_send(ctl *c, lm_session *s, const c_array *a, uint32_t k, uint32_t buddy, bool receipt,
                           bool report) {
  return send_copy(c, s, a, k, dev_worker(c, a->devs[k]), false, lm_registry_device(c->reg, a->devs[k])->local_index,
                   buddy, true, 0, receipt, report);
}

void ctl_snapshot_plan(ctl *c, c_array *a) {
  if (c->cfg.no_snapshots || !recovery_possible(c)) return;
  for (uint32_t k = 0; k < a->sh.ndev; k++) plan_shard(c, a, k);
}

void ctl_snapshot_put(ctl *c, peer *p, c_array *a) {
  for (uint32_t k = 0; a->bk && k < a->sh.ndev; k++)
    if (a->bk[k] != LM_REG_NO_DEVICE) ctl_snapshot_send(c, p->session, a, k, a->bk[k], true, false);
}

/* ---- shared with ctl_snapshot.c ---- */

bool ctl_worker_usable(ctl *c, uint32_t id) { return worker_usable(c, id); }
bool ctl_recovery_possible(ctl *c) { return recovery_possible(c); }
bool ctl_recover_idle(ctl *c) { return c->rec && c->rec->phase == R_IDLE && c->rec->drain_worker == UINT32_MAX; }
uint32_t ctl_snapshot_buddy(ctl *c, uint32_t holder) { return pick_buddy(c, holder); }


/* ---- zombies ---- */

static bool rec_reads(ctl *c, uint64_t session, uint64_t array) {
  struct ctl_rec *r = c->rec;
  for (size_t i = 0; i < r->nlaunches; i++) {
    c_launch *l = r->launches[i];
    if (l->session != session) continue;
    const c_log_entry *e = &c->log[l->seq % LM_LAUNCH_LOG_MAX];
    if (e->seq != l->seq || !e->ids) return true;
    for (uint32_t j = 0; j < e->nin; j++)
      if (e->ids[j] == array) return true;
  }
  return false;
}

/* The bytes a's shards take on the workers (every shard, replicas included). */
static uint64_t shard_bytes(const c_array *a) {
  uint64_t total = 0;
  for (uint32_t k = 0; k < a->sh.ndev; k++) {
    int64_t off[LM_SHARD_MAX_RANK], sd[LM_SHARD_MAX_RANK];
    lm_sharding_shard(&a->sh, a->rank, a->dims, k, off, sd);
    uint64_t n = (uint64_t)lm_dtype_size(a->dtype);
    for (int d = 0; d < a->rank; d++) n *= (uint64_t)sd[d];
    total += n;
  }
  return total;
}

/* Array id of session s: live, or kept (a zombie); NULL if neither. */
c_array *ctl_find_array(ctl *c, lm_session *s, uint64_t id) {
  c_array *a = lm_session_get(s, id, H_ARRAY);
  if (a || !c->rec) return a;
  for (rec_zombie *z = c->rec->zombies; z; z = z->next)
    if (z->session == s && z->a->id == id) return z->a;
  return NULL;
}

/* True when some shard of a has no shard of the same region on another worker. */
static bool at_risk(ctl *c, const c_array *a) {
  for (uint32_t k = 0; k < a->sh.ndev; k++)
    if (!ctl_shard_replicated(c, a, k)) return true;
  return false;
}

void ctl_lineage_note(ctl *c, lm_session *s, c_array *a, const uint64_t *in, size_t nin) {
  if (!nin || !a->sh.ndev || a->lin_in || !at_risk(c, a)) return;
  a->lin_in = malloc(nin * sizeof *a->lin_in);
  if (!a->lin_in) return; /* its inputs are then not kept for it: a replay may find one gone */
  memcpy(a->lin_in, in, nin * sizeof *in);
  a->nlin = (uint32_t)nin;
  for (size_t i = 0; i < nin; i++) {
    c_array *x = ctl_find_array(c, s, in[i]);
    if (x) x->lin_refs++;
  }
}

void ctl_lineage_drop(ctl *c, lm_session *s, c_array *a) {
  for (uint32_t i = 0; i < a->nlin; i++) {
    c_array *x = ctl_find_array(c, s, a->lin_in[i]);
    if (x && x->lin_refs) x->lin_refs--;
  }
  free(a->lin_in);
  a->lin_in = NULL;
  a->nlin = 0;
}

#define REPLAY_KEEP_MAX 4096 /* deleted arrays kept for replays, whatever their size */

static void unkeep(struct ctl_rec *r, rec_zombie *z) {
  if (!z->kept_bytes) return;
  r->kept_bytes -= z->kept_bytes < r->kept_bytes ? z->kept_bytes : r->kept_bytes;
  if (r->nkept) r->nkept--;
  z->kept_bytes = 0;
}

/* Takes the bytes of zombie z into the replay budget: false when they do not fit. */
static bool keep_for_replay(ctl *c, rec_zombie *z) {
  struct ctl_rec *r = c->rec;
  uint64_t b = shard_bytes(z->a), cap = (uint64_t)c->cfg.replay_keep_mb << 20;
  if (!b) b = 1;
  if (!recovery_possible(c)) return false; /* no standby to recover onto, none waited for: nothing to replay */
  if (r->kept_bytes + b > cap / 2) ctl_snap_pressure(c); /* a snapshot round frees what it keeps */
  if (r->kept_bytes + b > cap || r->nkept >= REPLAY_KEEP_MAX) {
    lm_info("session %llu deleted array %llu, which a replay of a live array reads: not kept (%u arrays, %llu "
            "bytes kept already; at most %d arrays and --replay-keep-mb %u MiB)", (unsigned long long)z->session->id,
            (unsigned long long)z->a->id, r->nkept, (unsigned long long)r->kept_bytes, REPLAY_KEEP_MAX,
            c->cfg.replay_keep_mb);
    return false;
  }
  r->nkept++;
  r->kept_bytes += b;
  z->kept_bytes = b;
  return true;
}

bool ctl_zombie_keep(ctl *c, lm_session *s, c_array *a) {
  struct ctl_rec *r = c->rec;
  if (!r || a->state == A_FAILED || !a->sh.ndev) return false;
  bool reads = ctl_launch_reads(c, s->id, a->id) || rec_reads(c, s->id, a->id);
  if (!reads && !a->lin_refs) return false;
  rec_zombie *z = calloc(1, sizeof *z);
  c_array *b = calloc(1, sizeof *b);
  uint32_t *devs = malloc(a->sh.ndev * sizeof *devs);
  uint32_t *bk = a->bk ? malloc(a->sh.ndev * sizeof *bk) : NULL;
  if (!z || !b || !devs || (a->bk && !bk)) {
    free(z), free(b), free(devs), free(bk);
    return false; /* freed now, as without recovery */
  }
  *b = *a;
  memcpy(devs, a->devs, a->sh.ndev * sizeof *devs);
  if (bk) memcpy(bk, a->bk, a->sh.ndev * sizeof *bk);
  b->devs = devs;
  b->sh.devices = devs;
  b->bk = bk;
  b->msg = NULL;
  b->pool = NULL; /* the session's array (destroyed next) un-charges the pool once */
  b->pool_bytes = 0;
  b->held = ctl_hold(c, devs, b->nheld = a->sh.ndev);
  z->session = s;
  z->a = b;
  if (!reads && !keep_for_replay(c, z)) {
    b->lin_in = NULL; /* still a's */
    zombie_free(z);
    return false;
  }
  a->lin_in = NULL; /* moved: its inputs count the kept copy */
  a->nlin = 0;
  z->next = r->zombies;
  r->zombies = z;
  return true;
}

/* One pass of sweep_zombies; true when it freed something. */
static bool sweep_once(ctl *c) {
  struct ctl_rec *r = c->rec;
  bool freed = false;
  for (rec_zombie **pp = &r->zombies; *pp;) {
    rec_zombie *z = *pp;
    if (ctl_launch_reads(c, z->session->id, z->a->id) ||
        (z->a->lin_refs && z->a->state != A_FAILED && (z->kept_bytes || keep_for_replay(c, z)))) {
      pp = &z->next;
      continue;
    }
    *pp = z->next;
    Lmw__FreeArrays fa = LMW__FREE_ARRAYS__INIT;
    fa.session = z->session->id;
    fa.n_ids = 1;
    fa.ids = &z->a->id;
    uint32_t last = UINT32_MAX;
    for (uint32_t i = 0; i < z->a->sh.ndev; i++) {
      uint32_t w = dev_worker(c, z->a->devs[i]);
      if (w != last) ctl_worker_send(c, w, LM_MSG_FREE_ARRAYS, 0, &fa.base, NULL, 0, NULL);
      last = w;
      if (z->a->bk && z->a->bk[i] != LM_REG_NO_DEVICE && z->a->bk[i] != w)
        ctl_worker_send(c, z->a->bk[i], LM_MSG_FREE_ARRAYS, 0, &fa.base, NULL, 0, NULL);
    }
    unkeep(r, z);
    ctl_lineage_drop(c, z->session, z->a); /* its own inputs may go now */
    ctl_log_unref(c, z->a);
    zombie_free(z);
    freed = true;
  }
  return freed;
}

/* Frees (at the workers) the zombies no active launch reads any more and no replay may need
 * (or that no longer fit the replay budget). A zombie freed drops its lineage, which may free
 * the zombies of its inputs. The list is newest deleted first, not newest computed: an input
 * deleted after what was computed from it comes earlier in the list and is passed before its
 * last reference goes, so passes repeat while one frees. */
static void sweep_zombies(ctl *c) {
  if (c->rec->phase != R_IDLE) return;
  while (sweep_once(c)) {
  }
}

void ctl_zombies_sweep(ctl *c) {
  if (c->rec) sweep_zombies(c);
}

/* ---- the recovery ---- */

static void rec_process_queue(ctl *c);

/* Replays the held client requests, in their order. */
static void replay_deferred(ctl *c) {
  struct ctl_rec *r = c->rec;
  rec_frame *fr = r->dhead;
  r->dhead = r->dtail = NULL;
  r->ndeferred = 0;
  while (fr) {
    rec_frame *n = fr->next;
    if (fr->p) ctl_dispatch(fr->p, &fr->f); /* may hold it again if a new recovery began */
    frame_free(fr);
    fr = n;
  }
}

static void replays_clear(ctl *c, const char *why);

static void rec_reset(ctl *c) {
  struct ctl_rec *r = c->rec;
  replays_clear(c, "the recovery did not complete");
  free(r->launches);
  free(r->loads);
  r->launches = NULL;
  r->loads = NULL;
  r->nlaunches = r->nloads = r->loads_pending = 0;
  r->restored = r->lost_arrays = 0;
  r->phase = R_IDLE;
}

/* The recovery cannot complete: its launches fail with msg. */
/* Gives the recovery up: the held launches fail with msg, and the lost worker's reason gains
 * note (msg when NULL), so requests held meanwhile, and later ones, that name its devices say why
 * nothing took them over. */
static void drain_end(ctl *c, int code, const char *msg);

static void rec_fail_note(ctl *c, const char *msg, const char *note) {
  struct ctl_rec *r = c->rec;
  event(c, true, "giving up on worker %u: %s", r->dead, msg);
  if (r->draining) {
    r->draining = false;
    drain_end(c, LOOM_WORKER_LOST, msg);
  }
  lm_registry_note_lost(c->reg, r->dead, note ? note : msg);
  replays_clear(c, msg);
  for (size_t i = 0; i < r->nlaunches; i++) {
    link_active(c, r->launches[i]);
    ctl_launch_abandon(c, r->launches[i], LOOM_WORKER_LOST, msg);
  }
  rec_reset(c);
  replay_deferred(c);
  rec_process_queue(c);
}

static void rec_fail(ctl *c, const char *msg) { rec_fail_note(c, msg, NULL); }

static void rec_finish(ctl *c) {
  struct ctl_rec *r = c->rec;
  size_t n = r->nlaunches, re = 0;
  c_launch **ls = r->launches;
  r->launches = NULL;
  r->nlaunches = 0;
  uint32_t replayed = r->replayed;
  size_t nreplays = r->nreplays;
  dispatch_replays(c);
  for (size_t i = 0; i < n; i++) {
    if (!ls[i]->client) { /* its client is gone: nobody waits for it */
      link_active(c, ls[i]);
      ctl_launch_abandon(c, ls[i], LOOM_CANCELLED, "its client is gone");
      continue;
    }
    ctl_launch_reissue(c, ls[i]);
    re++;
  }
  free(ls);
  r->completed++;
  if (c->met) lm_met_inc(&c->met->recoveries);
  if (r->draining) {
    event(c, false, "worker %u took over drained worker %u in %llu ms: %u shards being copied, %zu launches re-issued",
          r->repl, r->dead, (unsigned long long)(ctl_now_ms(c) - r->began_ms), r->restored, re);
    Lmw__Drain dm = LMW__DRAIN__INIT;
    dm.worker = r->dead;
    r->drain_ack_rid = c->next_rid++;
    r->drain_repl = r->repl;
    if (ctl_worker_send(c, r->dead, LM_MSG_DRAIN, r->drain_ack_rid, &dm.base, NULL, 0, NULL) < 0) r->drain_ack_rid = 0;
    r->draining = false;
  } else {
    event(c, false, "worker %u replaced lost worker %u in %llu ms: %u shards restored, %u arrays being recomputed "
          "by %zu replays, %zu launches re-issued%s", r->repl, r->dead,
          (unsigned long long)(ctl_now_ms(c) - r->began_ms), r->restored, replayed, nreplays, re,
          r->lost_arrays ? ", some arrays could not be restored" : "");
  }
  rec_reset(c);
  replay_deferred(c);
  rec_process_queue(c);
}

/* The state of a as far as restoring goes: a deleted array kept for a launch in flight (a
 * zombie) was copied while pending and is not updated when its producer completes, so a pending
 * array whose producer is not being re-issued is judged by the launch log. */
static int state_of(ctl *c, const c_array *a) {
  struct ctl_rec *r = c->rec;
  if (a->state != A_PENDING) return a->state;
  for (size_t i = 0; i < r->nlaunches; i++)
    if (r->launches[i]->seq == a->producer) return A_PENDING; /* re-issued: it computes it again */
  const c_log_entry *e = &c->log[a->producer % LM_LAUNCH_LOG_MAX];
  if (e->seq == a->producer && e->status == 0) return A_READY;
  if (e->seq == a->producer && e->status < 0) return A_FAILED;
  return A_PENDING;
}

/* Array a lost its shard on device dev and cannot get it back (why): it fails with an error naming it. */
static void fail_lost(ctl *c, lm_session *s, c_array *a, uint32_t dev, const char *why) {
  struct ctl_rec *r = c->rec;
  char msg[LM_ERR_MSG_MAX];
  snprintf(msg, sizeof msg,
           "array %llu lost its shard on device %u with worker %u (%s): it has no replica on another worker and "
           "no snapshot to restore it from, and %.600s",
           (unsigned long long)a->id, dev, r->dead, r->why, why);
  event(c, true, "session %llu: %s", (unsigned long long)s->id, msg);
  array_fail(a, LOOM_WORKER_LOST, msg);
  r->lost_arrays++;
}

/* True when a (READY, computed by a launch) has a shard on the replacement with neither a replica
 * on a usable worker nor a snapshot: it is then recomputed by replaying its producer. */
static bool needs_replay(ctl *c, const c_array *a) {
  struct ctl_rec *r = c->rec;
  if (!a->producer) return false;
  for (uint32_t k = 0; k < a->sh.ndev; k++) {
    if (dev_worker(c, a->devs[k]) != r->repl) continue;
    bool src = a->bk && a->bk[k] != LM_REG_NO_DEVICE && a->bk[k] != r->repl && worker_usable(c, a->bk[k]);
    for (uint32_t j = 0; j < a->sh.ndev && !src; j++) {
      uint32_t w = dev_worker(c, a->devs[j]);
      src = j != k && w != r->repl && worker_usable(c, w) && same_region(a, k, j);
    }
    if (!src) return true;
  }
  return false;
}

static void add_target(ctl *c, lm_session *s, c_array *a, bool lazy) {
  struct ctl_rec *r = c->rec;
  if (r->ntargets == r->targets_cap) {
    size_t cap = r->targets_cap ? r->targets_cap * 2 : 16;
    rec_target *t = realloc(r->targets, cap * sizeof *t);
    if (!t) {
      fail_lost(c, s, a, a->devs[0], "the controller ran out of host memory planning its recomputation");
      return;
    }
    r->targets = t, r->targets_cap = cap;
  }
  uint32_t dev = a->devs[0];
  for (uint32_t k = 0; k < a->sh.ndev; k++)
    if (dev_worker(c, a->devs[k]) == r->repl) {
      dev = a->devs[k];
      break;
    }
  r->targets[r->ntargets++] = (rec_target){.s = s, .a = a, .dev = dev, .st = T_OPEN, .lazy = lazy};
}

/* Restores array a's shards that lived on the lost worker's devices (now the replacement's). */
static void restore_array(ctl *c, lm_session *s, c_array *a, bool zombie) {
  struct ctl_rec *r = c->rec;
  int state = state_of(c, a);
  if (state == A_FAILED) return;
  bool checked = false;
  for (uint32_t k = 0; k < a->sh.ndev; k++) {
    uint32_t hw = dev_worker(c, a->devs[k]);
    if (hw != r->repl) {
      if (a->bk && a->bk[k] == r->dead && state == A_READY) { /* its snapshot was lost: take another */
        a->bk[k] = LM_REG_NO_DEVICE;
        if (plan_shard(c, a, k)) ctl_snapshot_send(c, s, a, k, a->bk[k], false, false);
      }
      continue;
    }
    if (state == A_PENDING) continue; /* its producer is re-issued and computes it */
    if (!r->draining && !checked && (checked = true) && needs_replay(c, a)) { /* recomputed, every lost shard at once */
      add_target(c, s, a, zombie && !rec_reads(c, s->id, a->id)); /* (a re-issued launch reads it: now) */
      return;
    }
    uint32_t dst_local = lm_registry_device(c->reg, a->devs[k])->local_index;
    if (r->draining) { /* the drained worker still holds every shard: straight from it, with a receipt */
      send_copy(c, s, a, k, r->dead, false, dst_local, r->repl, false, dst_local, true, false);
      r->restored++;
      r->drain_shards++;
      continue;
    }
    uint32_t src = UINT32_MAX, src_local = 0;
    for (uint32_t j = 0; j < a->sh.ndev && src == UINT32_MAX; j++) {
      uint32_t w = dev_worker(c, a->devs[j]);
      if (j == k || w == r->repl || !worker_usable(c, w) || !same_region(a, k, j)) continue;
      src = w;
      src_local = lm_registry_device(c->reg, a->devs[j])->local_index;
    }
    if (src != UINT32_MAX) {
      send_copy(c, s, a, k, src, false, src_local, r->repl, false, dst_local, false, false);
      r->restored++;
    } else if (a->bk && a->bk[k] != LM_REG_NO_DEVICE && a->bk[k] != r->repl && worker_usable(c, a->bk[k])) {
      send_copy(c, s, a, k, a->bk[k], true, 0, r->repl, false, dst_local, false, false);
      r->restored++;
    } else {
      fail_lost(c, s, a, a->devs[k], "it was put or loaded, not computed by a launch that could be replayed");
      return;
    }
  }
}


/* ---- replays: lost arrays recomputed from the launch log ---- */

#define REPLAY_MAX_DEPTH 256 /* launches in one chain of recomputations */

static rec_target *target_of(ctl *c, const c_array *a) {
  struct ctl_rec *r = c->rec;
  for (size_t i = 0; i < r->ntargets; i++)
    if (r->targets[i].a == a) return &r->targets[i];
  return NULL;
}

static void replay_free(c_replay_t *rp) {
  if (!rp) return;
  free(rp->in), free(rp->outs), free(rp->scratch), free(rp->targets);
  free(rp);
}

/* The planned replay of launch seq, made when first needed (NULL: out of memory). */
static c_launch *replay_for(ctl *c, lm_session *s, const c_log_entry *e, c_program *prog) {
  struct ctl_rec *r = c->rec;
  for (size_t i = 0; i < r->nreplays; i++)
    if (r->replays[i]->replay->orig_seq == e->seq) return r->replays[i];
  c_launch **ls = realloc(r->replays, (r->nreplays + 1) * sizeof *ls);
  if (!ls) return NULL;
  r->replays = ls;
  c_launch *l = calloc(1, sizeof *l);
  c_replay_t *rp = calloc(1, sizeof *rp);
  uint32_t nproc = prog->info->nproc;
  if (l && rp) {
    rp->in = malloc((e->nin + 1) * sizeof *rp->in);
    rp->outs = malloc(((size_t)nproc * e->nout + 1) * sizeof *rp->outs);
    rp->scratch = malloc((e->nout + 1) * sizeof *rp->scratch);
    rp->targets = malloc((e->nout + 1) * sizeof *rp->targets);
  }
  uint64_t *rin = malloc((e->nin + 1) * sizeof *rin); /* what it reads, as a launch (ctl_launch_reads) */
  if (!l || !rp || !rp->in || !rp->outs || !rp->scratch || !rp->targets || !rin) {
    free(l);
    free(rin);
    replay_free(rp);
    return NULL;
  }
  rp->orig_seq = e->seq;
  rp->s = s;
  rp->nin = e->nin, rp->nout = e->nout, rp->nproc = nproc;
  memcpy(rp->in, e->ids, e->nin * sizeof *rp->in);
  for (uint32_t j = 0; j < e->nout; j++) {
    if (!r->next_scratch) r->next_scratch = LM_CTL_RESERVED_IDS;
    rp->scratch[j] = ++r->next_scratch;
    for (uint32_t p = 0; p < nproc; p++) rp->outs[(size_t)p * e->nout + j] = rp->scratch[j];
  }
  rp->dead = r->dead;
  rp->began_ms = r->began_ms;
  l->session = s->id;
  l->prog = prog;
  prog->refs++;
  l->replay = rp;
  memcpy(rin, e->ids, e->nin * sizeof *rin);
  l->r_inputs = rin;
  l->r_nin = e->nin;
  r->replays[r->nreplays++] = l;
  return l;
}

/* Can target t be recomputed? Resolves its producer's inputs (recursively for inputs lost too)
 * and plans the replays; a broken chain fails the array with the reason. */
static int resolve(ctl *c, rec_target *t, int depth) {
  if (t->st == T_OK || t->st == T_BROKEN) return t->st;
  if (!t->s || !t->a) return t->st = T_BROKEN; /* its session is gone */
  c_array *a = t->a;
  lm_session *s = t->s;
  char why[LM_ERR_MSG_MAX];
  why[0] = 0;
  t->st = T_VISITING;
  const c_log_entry *e = &c->log[a->producer % LM_LAUNCH_LOG_MAX];
  c_program *prog = NULL;
  unsigned long long seq = (unsigned long long)a->producer;
  if (depth > REPLAY_MAX_DEPTH)
    snprintf(why, sizeof why, "recomputing it needs a chain of more than %d launches", REPLAY_MAX_DEPTH);
  else if (e->seq != a->producer || !e->ids || e->session != s->id)
    snprintf(why, sizeof why, "launch %llu, which computed it, is no longer in the launch log (it keeps the last %d "
             "launches, and starts empty when the controller restarts)", seq, LM_LAUNCH_LOG_MAX);
  else if (e->status != 0)
    snprintf(why, sizeof why, "launch %llu, which computed it, did not complete", seq);
  else if (!(prog = ctl_program_find(c, e->program)) || prog->state != P_READY || !prog->info ||
           prog->info->nproc != e->ndev)
    snprintf(why, sizeof why, "the program of launch %llu, which computed it, is no longer loaded", seq);
  for (uint32_t i = 0; !why[0] && i < e->nin; i++) {
    c_array *x = ctl_find_array(c, s, e->ids[i]);
    unsigned long long xid = (unsigned long long)e->ids[i];
    if (!x) {
      snprintf(why, sizeof why, "launch %llu, which computed it, read array %llu, which the client deleted and which "
               "was not kept for a replay (at most --replay-keep-mb %u MiB are kept)", seq, xid,
               c->cfg.replay_keep_mb);
      break;
    }
    rec_target *xt = target_of(c, x);
    if (xt) {
      if (xt->st == T_VISITING || resolve(c, xt, depth + 1) == T_BROKEN)
        snprintf(why, sizeof why, "launch %llu, which computed it, read array %llu, which was lost too and cannot "
                 "be recomputed", seq, xid);
    } else if (state_of(c, x) == A_FAILED) {
      snprintf(why, sizeof why, "launch %llu, which computed it, read array %llu, which failed: %.400s", seq, xid,
               x->msg ? x->msg : "its producer failed");
    }
  }
  c_launch *l = why[0] ? NULL : replay_for(c, s, e, prog);
  if (!why[0] && !l) snprintf(why, sizeof why, "the controller ran out of host memory planning its recomputation");
  if (why[0]) {
    fail_lost(c, s, a, t->dev, why);
    return t->st = T_BROKEN;
  }
  c_replay_t *rp = l->replay;
  uint32_t j = 0;
  while (j < e->nout && e->ids[e->nin + j] != a->id) j++;
  if (j == e->nout) { /* (the log says it computed something else: cannot happen) */
    fail_lost(c, s, a, t->dev, "its launch's record in the log does not list it");
    return t->st = T_BROKEN;
  }
  for (uint32_t p = 0; p < rp->nproc; p++) /* its shards on the replacement get its own id */
    if (dev_worker(c, prog->devices[p]) == c->rec->repl) rp->outs[(size_t)p * rp->nout + j] = a->id;
  rp->targets[rp->ntargets++] = a->id;
  c->rec->replayed++;
  return t->st = T_OK;
}

static int cmp_replay(const void *x, const void *y) {
  uint64_t a = (*(c_launch *const *)x)->replay->orig_seq, b = (*(c_launch *const *)y)->replay->orig_seq;
  return a < b ? -1 : a > b;
}

static void plan_replays(ctl *c) {
  struct ctl_rec *r = c->rec;
  for (size_t i = 0; i < r->ntargets; i++)
    if (!r->targets[i].lazy) resolve(c, &r->targets[i], 0);
  for (size_t i = 0; i < r->ntargets; i++) { /* kept arrays no replay needed: their lost shards stay lost */
    rec_target *t = &r->targets[i];
    if (t->st != T_OPEN || !t->a) continue;
    char msg[LM_ERR_MSG_MAX];
    snprintf(msg, sizeof msg, "array %llu (deleted, kept for replays) lost its shard on device %u with worker %u (%s), "
             "and no replay needed it then", (unsigned long long)t->a->id, t->dev, r->dead, r->why);
    lm_debug("recovery: session %llu: %s", (unsigned long long)t->s->id, msg);
    array_fail(t->a, LOOM_WORKER_LOST, msg);
  }
  /* a launch before the ones reading what it computes: inputs come from earlier launches */
  if (r->nreplays) qsort(r->replays, r->nreplays, sizeof *r->replays, cmp_replay);
  for (size_t i = 0; i < r->nreplays; i++) {
    c_replay_t *rp = r->replays[i]->replay;
    event(c, false, "session %llu: %u arrays of launch %llu lost with worker %u are recomputed by replaying it",
          (unsigned long long)rp->s->id, rp->ntargets, (unsigned long long)rp->orig_seq, r->dead);
  }
}

/* A planned replay never sent: released (its targets fail with why when not NULL). */
static void replay_discard(ctl *c, c_launch *l, const char *why) {
  c_replay_t *rp = l->replay;
  for (uint32_t i = 0; why && rp->s && i < rp->ntargets; i++) {
    c_array *a = ctl_find_array(c, rp->s, rp->targets[i]);
    if (!a || a->state == A_FAILED) continue;
    char msg[LM_ERR_MSG_MAX];
    snprintf(msg, sizeof msg, "array %llu was lost with worker %u and could not be recomputed: %.800s",
             (unsigned long long)a->id, rp->dead, why);
    array_fail(a, LOOM_WORKER_LOST, msg);
  }
  ctl_program_release(c, l->prog);
  replay_free(rp);
  free(l->r_inputs);
  free(l);
}

static void replays_clear(ctl *c, const char *why) {
  struct ctl_rec *r = c->rec;
  for (size_t i = 0; i < r->nreplays; i++) replay_discard(c, r->replays[i], why);
  free(r->replays);
  free(r->targets);
  r->replays = NULL;
  r->targets = NULL;
  r->nreplays = r->ntargets = r->targets_cap = 0;
  r->replayed = 0;
}

/* The programs are loaded on the replacement: the replays go, in order, before the re-issued
 * launches (which may read what they recompute). */
static void dispatch_replays(ctl *c) {
  struct ctl_rec *r = c->rec;
  size_t n = r->nreplays;
  c_launch **ls = r->replays;
  r->replays = NULL;
  r->nreplays = 0;
  for (size_t i = 0; i < n; i++) {
    c_launch *l = ls[i];
    c_replay_t *rp = l->replay;
    if (!rp->s) {
      replay_discard(c, l, NULL);
      continue;
    }
    rp->dispatched = true;
    ctl_launch_replay(c, l, rp->s, rp->in, rp->nin, rp->outs, rp->nout);
  }
  free(ls);
  if (n) ctl_j_meta(c); /* the sequence numbers they took */
}

void ctl_replay_failed(ctl *c, c_launch *l, int code, const char *msg) {
  c_replay_t *rp = l->replay;
  if (!rp->s) return;
  for (uint32_t i = 0; i < rp->ntargets; i++) {
    c_array *a = ctl_find_array(c, rp->s, rp->targets[i]);
    if (!a || a->state == A_FAILED) continue;
    char full[LM_ERR_MSG_MAX];
    snprintf(full, sizeof full, "array %llu was lost with worker %u and recomputing it (launch %llu replayed as "
             "launch %llu) failed: %.700s", (unsigned long long)a->id, rp->dead, (unsigned long long)rp->orig_seq,
             (unsigned long long)l->seq, msg);
    array_fail(a, code, full);
  }
}

void ctl_replay_end(ctl *c, c_launch *l) {
  c_replay_t *rp = l->replay;
  l->replay = NULL;
  if (rp->s && !c->stopping) {
    for (uint32_t k = 0; k < l->nworkers; k++) /* the copies nobody asked for */
      ctl_free_later(c, l->workers[k], rp->s->id, rp->scratch, rp->nout);
    if (c->rec)
      event(c, l->failed, "session %llu: launch %llu replayed as launch %llu %s (%u arrays) %llu ms after worker %u "
            "was lost", (unsigned long long)rp->s->id, (unsigned long long)rp->orig_seq, (unsigned long long)l->seq,
            l->failed ? "failed" : "recomputed its lost shards", rp->ntargets,
            (unsigned long long)(ctl_now_ms(c) - rp->began_ms), rp->dead);
  }
  replay_free(rp);
}

/* The replacement is known: swap the device map, load the programs, restore the shards. */
static void rec_swap(ctl *c, uint32_t repl) {
  struct ctl_rec *r = c->rec;
  lm_err err;
  if (lm_registry_swap(c->reg, r->dead, repl, &err) < 0) {
    rec_fail(c, err.msg);
    return;
  }
  r->repl = repl;
  r->phase = R_LOADING;
  ctl_j_worker(c, r->dead); /* the device map changed */
  ctl_j_worker(c, repl);
  const lm_reg_worker *w = lm_registry_worker(c->reg, repl), *d = lm_registry_worker(c->reg, r->dead);
  event(c, false, "worker %u (%s pid %u, slice %s) takes over devices %u-%u of lost worker %u (%s)", repl, w->host,
        w->pid, w->slice, d->device_ids[0], d->device_ids[d->ndevices - 1], r->dead, r->why);
  /* programs */
  size_t np = 0;
  for (c_program *p = c->programs; p; p = p->next) np++;
  r->loads = calloc(np ? np : 1, sizeof *r->loads);
  for (c_program *p = c->programs; p && r->loads; p = p->next) {
    if (p->state != P_READY) continue;
    for (uint32_t i = 0; i < p->nloads; i++) {
      if (p->loads[i].worker != r->dead) continue;
      p->loads[i].worker = repl;
      Lmw__LoadProgram lp = LMW__LOAD_PROGRAM__INIT;
      lp.program = p->id;
      lp.name = p->name;
      uint64_t rid = c->next_rid++;
      if (ctl_worker_send(c, repl, LM_MSG_LOAD_PROGRAM, rid, &lp.base, p->text, p->len, &err) < 0) break;
      r->loads[r->nloads].rid = rid;
      r->loads[r->nloads].program = p->id;
      r->nloads++;
      r->loads_pending++;
      break;
    }
  }
  /* shards */
  for (peer *p = c->peers; p; p = p->next) {
    if (p->role != ROLE_CLIENT || !p->session) continue;
    lm_session *s = p->session;
    for (size_t i = 0; i < s->cap; i++) {
      c_array *a = s->slots[i].id ? lm_session_get(s, s->slots[i].id, H_ARRAY) : NULL; /* skips deleted slots */
      if (a) restore_array(c, s, a, false);
    }
  }
  for (rec_zombie *z = r->zombies; z; z = z->next) restore_array(c, z->session, z->a, true);
  plan_replays(c);
  if (r->loads_pending == 0) rec_finish(c);
}

static void rec_begin(ctl *c, uint32_t dead, const char *why, uint32_t standby) {
  struct ctl_rec *r = c->rec;
  r->dead = dead;
  snprintf(r->why, sizeof r->why, "%s", why);
  r->began_ms = ctl_now_ms(c);
  /* the launches to re-issue: those the lost worker took part in, and every later launch of the
   * same sessions (they may read what those compute) */
  size_t n = 0;
  for (c_launch *l = c->active; l; l = l->next) n++;
  r->launches = calloc(n ? n : 1, sizeof *r->launches);
  r->nlaunches = 0;
  for (c_launch *l = c->active; l && r->launches; l = l->next) {
    if (l->failed) continue;
    for (uint32_t i = 0; i < l->nworkers; i++)
      if (l->workers[i] == dead) {
        r->launches[r->nlaunches++] = l;
        break;
      }
  }
  size_t direct = r->nlaunches;
  for (c_launch *l = c->active; l && r->launches; l = l->next) {
    if (l->failed) continue;
    bool in = false, later = false;
    for (size_t i = 0; i < direct; i++) {
      in |= r->launches[i] == l;
      later |= r->launches[i]->session == l->session && r->launches[i]->seq < l->seq;
    }
    if (!in && later) r->launches[r->nlaunches++] = l;
  }
  if (r->nlaunches) qsort(r->launches, r->nlaunches, sizeof *r->launches, cmp_launch);
  Lmw__AbortLaunch ab = LMW__ABORT_LAUNCH__INIT;
  char reason[LM_REG_REASON_MAX + 64];
  snprintf(reason, sizeof reason, "worker %u was %s (%s); the launch is re-issued after recovery", dead,
           r->draining ? "drained" : "lost", why);
  ab.reason = reason;
  for (size_t i = 0; i < r->nlaunches; i++) {
    c_launch *l = r->launches[i];
    ab.seq = l->seq;
    ctl_launch_abort(c, l, &ab, r->draining ? UINT32_MAX : dead); /* (a drained worker is alive: it stops them too) */
    unlink_active(c, l);
    ctl_launch_unhash(c, l);
  }
  const lm_reg_worker *d = lm_registry_worker(c->reg, dead);
  event(c, !r->draining, "worker %u (%s pid %u) %s: %s; %zu launches in flight held for re-issue", dead, d->host,
        d->pid, r->draining ? "being drained" : "lost", why, r->nlaunches);
  if (standby != UINT32_MAX) {
    rec_swap(c, standby);
  } else {
    r->phase = R_WAITING;
    r->deadline_ms = r->began_ms + (c->cfg.recover_wait_ms ? c->cfg.recover_wait_ms : PENDING_STANDBY_WAIT_MS);
    if (c->cfg.recover_wait_ms)
      event(c, true, "no standby of %u devices: waiting up to %u ms for a worker to replace worker %u "
            "(--recover-wait)", d->ndevices, c->cfg.recover_wait_ms, dead);
    else
      event(c, true, "a standby of %u devices is still starting its data plane: waiting up to %u ms for it to "
            "replace worker %u", d->ndevices, PENDING_STANDBY_WAIT_MS, dead);
  }
}

bool ctl_recover_worker_lost(ctl *c, uint32_t worker, const char *why) {
  struct ctl_rec *r = c->rec;
  if (!r || c->stopping) return false;
  const lm_reg_worker *w = lm_registry_worker(c->reg, worker);
  if (!w) return false;
  if (w->standby) {
    event(c, true, "standby worker %u (%s pid %u) lost: %s", worker, w->host, w->pid, why);
    return false;
  }
  if (r->phase != R_IDLE) {
    if (r->phase == R_LOADING && worker == r->repl) { /* the replacement itself */
      rec_fail(c, "its replacement was lost during the recovery");
      return false; /* the replacement's own launches fail as before */
    }
    rec_lost *q = calloc(1, sizeof *q);
    if (!q) return false;
    q->worker = worker;
    snprintf(q->why, sizeof q->why, "%s", why);
    rec_lost **pp = &r->queue;
    while (*pp) pp = &(*pp)->next;
    *pp = q;
    event(c, true, "worker %u lost (%s) while recovering from worker %u: queued", worker, why, r->dead);
    return true;
  }
  uint32_t standby = find_standby(c, w->ndevices, w->slice);
  if (standby == UINT32_MAX && !c->cfg.recover_wait_ms && !standby_pending(c, w->ndevices)) return false;
  rec_begin(c, worker, why, standby);
  return true;
}

static void rec_process_queue(ctl *c) {
  struct ctl_rec *r = c->rec;
  while (r->phase == R_IDLE && r->queue) {
    rec_lost *q = r->queue;
    r->queue = q->next;
    if (!ctl_recover_worker_lost(c, q->worker, q->why)) ctl_launches_worker_lost(c, q->worker, q->why);
    free(q);
  }
}

bool ctl_recover_wants(ctl *c, uint32_t ndev) {
  struct ctl_rec *r = c->rec;
  return r && r->phase == R_WAITING && lm_registry_worker(c->reg, r->dead)->ndevices == ndev;
}

static void drain_retry(ctl *c, bool done);

void ctl_recover_capacity(ctl *c) {
  struct ctl_rec *r = c->rec;
  if (r && r->phase == R_IDLE) drain_retry(c, false);
  if (!r || r->phase != R_WAITING) return;
  const lm_reg_worker *d = lm_registry_worker(c->reg, r->dead);
  uint32_t s = find_standby(c, d->ndevices, d->slice);
  if (s != UINT32_MAX) rec_swap(c, s);
}

bool ctl_recover_on_reply(ctl *c, peer *w, const lm_frame *f) {
  struct ctl_rec *r = c->rec;
  if (r && r->drain_ack_rid && f->h.request_id == r->drain_ack_rid && w->worker_id == r->drain_worker) {
    if (f->h.type == LM_MSG_ERROR) {
      lm_err err;
      lm_msg_error_status(f, &err);
      drain_end(c, err.code, err.msg);
    } else {
      drain_end(c, 0, NULL);
    }
    return true;
  }
  if (!r || r->phase != R_LOADING || w->worker_id != r->repl) return false;
  for (size_t i = 0; i < r->nloads; i++) {
    if (r->loads[i].rid != f->h.request_id || !f->h.request_id) continue;
    r->loads[i].rid = 0;
    if (f->h.type == LM_MSG_ERROR) {
      lm_err err;
      lm_msg_error_status(f, &err);
      char msg[LM_ERR_MSG_MAX];
      snprintf(msg, sizeof msg, "replacement worker %u cannot load program %llu: %.800s", r->repl,
               (unsigned long long)r->loads[i].program, err.msg);
      rec_fail(c, msg);
      return true;
    }
    if (--r->loads_pending == 0) rec_finish(c);
    return true;
  }
  return false;
}

bool ctl_recover_defer(ctl *c, peer *p, const lm_frame *f) {
  struct ctl_rec *r = c->rec;
  if (!r || r->phase == R_IDLE || p->role != ROLE_CLIENT) return false;
  switch (f->h.type) {
  case LM_MSG_ARRAY_CREATE: case LM_MSG_ARRAY_LOCATE: case LM_MSG_ARRAY_DELETE: case LM_MSG_COMPILE:
  case LM_MSG_EXECUTABLE_DESTROY: case LM_MSG_LAUNCH: case LM_MSG_CANCEL_LAUNCH: case LM_MSG_CHECKPOINT:
  case LM_MSG_DRAIN: break;
  default: return false;
  }
  rec_frame *fr = calloc(1, sizeof *fr);
  if (!fr) return false;
  fr->p = p;
  fr->f.h = f->h;
  fr->f.meta = malloc(f->h.meta_len ? f->h.meta_len : 1);
  fr->f.payload = f->h.payload_len ? malloc((size_t)f->h.payload_len) : NULL;
  if (!fr->f.meta || (f->h.payload_len && !fr->f.payload)) {
    frame_free(fr);
    return false;
  }
  if (f->h.meta_len) memcpy(fr->f.meta, f->meta, f->h.meta_len);
  if (f->h.payload_len) memcpy(fr->f.payload, f->payload, (size_t)f->h.payload_len);
  if (r->dtail) r->dtail->next = fr;
  else r->dhead = fr;
  r->dtail = fr;
  r->ndeferred++;
  return true;
}

void ctl_recover_client_gone(ctl *c, peer *p) {
  struct ctl_rec *r = c->rec;
  if (!r) return;
  lm_session *s = p->session;
  for (size_t i = 0; s && i < s->cap; i++) { /* its arrays' launch log entries are not needed any more */
    c_array *a = s->slots[i].id ? lm_session_get(s, s->slots[i].id, H_ARRAY) : NULL;
    if (a && a->log_ref) ctl_log_unref(c, a);
  }
  if (r->drain_client == p) r->drain_client = NULL;
  if (r->dw_client == p) r->dw_client = NULL;
  for (rec_frame *fr = r->dhead; fr; fr = fr->next)
    if (fr->p == p) fr->p = NULL;
  for (size_t i = 0; i < r->nlaunches; i++)
    if (r->launches[i]->client == p) r->launches[i]->client = NULL;
  for (size_t i = 0; i < r->nreplays; i++) /* not dispatched: the session's shards are gone */
    if (r->replays[i]->replay->s == p->session) r->replays[i]->replay->s = NULL;
  for (size_t i = 0; i < r->ntargets; i++)
    if (r->targets[i].s == p->session) r->targets[i].s = NULL, r->targets[i].a = NULL;
  for (c_launch *l = c->active; l; l = l->next) /* dispatched ones end as usual (their RUN_DONEs come) */
    if (l->replay && l->replay->s == p->session) l->replay->s = NULL;
  for (rec_zombie **pp = &r->zombies; *pp;) { /* the workers drop the session's shards themselves */
    rec_zombie *z = *pp;
    if (z->session == p->session) {
      *pp = z->next;
      unkeep(r, z);
      ctl_log_unref(c, z->a);
      zombie_free(z);
    } else {
      pp = &z->next;
    }
  }
}

void ctl_recover_tick(ctl *c) {
  struct ctl_rec *r = c->rec;
  if (!r) return;
  uint64_t now = ctl_now_ms(c);
  if (r->dw_client && now >= r->dw_deadline_ms) drain_retry(c, true);
  if (r->phase == R_WAITING && now >= r->deadline_ms) {
    char msg[LM_ERR_MSG_MAX], note[LM_REG_REASON_MAX];
    const lm_reg_worker *d = lm_registry_worker(c->reg, r->dead);
    snprintf(note, sizeof note, "no standby or new worker of %u devices replaced it within %u ms (--recover-wait)",
             d->ndevices, c->cfg.recover_wait_ms ? c->cfg.recover_wait_ms : PENDING_STANDBY_WAIT_MS);
    snprintf(msg, sizeof msg, "worker %u (%s pid %u) was lost (%s) and %s; its devices' shards are gone", r->dead,
             d->host, d->pid, r->why, note);
    rec_fail_note(c, msg, note);
  } else if (r->phase == R_LOADING && now - r->began_ms > REC_LOAD_LIMIT_MS) {
    rec_fail(c, "the replacement worker did not load the programs in time");
  }
  sweep_zombies(c);
}

const char *ctl_recover_state(ctl *c, char *buf, size_t cap) {
  struct ctl_rec *r = c->rec;
  buf[0] = 0;
  if (!r || r->phase == R_IDLE) return buf;
  uint64_t now = ctl_now_ms(c);
  if (r->phase == R_WAITING)
    snprintf(buf, cap,
             "waiting for a worker of %u devices to replace lost worker %u (%s): %llu ms left, %zu launches and %zu "
             "requests held",
             lm_registry_worker(c->reg, r->dead)->ndevices, r->dead, r->why,
             (unsigned long long)(r->deadline_ms > now ? r->deadline_ms - now : 0), r->nlaunches, r->ndeferred);
  else
    snprintf(buf, cap, "worker %u replacing lost worker %u: loading %zu programs, %u shards being restored", r->repl,
             r->dead, r->loads_pending, r->restored);
  return buf;
}

size_t ctl_recover_events(ctl *c, const char **out, size_t max) {
  struct ctl_rec *r = c->rec;
  if (!r) return 0;
  uint32_t have = r->nevents < REC_EVENTS ? r->nevents : REC_EVENTS;
  size_t n = 0;
  for (uint32_t i = r->nevents - have; i < r->nevents && n < max; i++) out[n++] = r->events[i % REC_EVENTS];
  return n;
}

uint32_t ctl_recover_count(ctl *c) { return c->rec ? c->rec->completed : 0; }

/* ---- drain ---- */

/* The drain is over: answer its client (code 0: done) and forget it. */
static void drain_end(ctl *c, int code, const char *msg) {
  struct ctl_rec *r = c->rec;
  if (r->drain_worker == UINT32_MAX) return;
  uint32_t dw = r->drain_worker;
  if (code == 0) {
    event(c, false, "worker %u drained onto worker %u in %llu ms (%u shards moved); it is released", dw,
          r->drain_repl, (unsigned long long)(ctl_now_ms(c) - r->drain_began_ms), r->drain_shards);
    Lmw__WorkerLost wl = LMW__WORKER_LOST__INIT; /* the others forget its data plane */
    wl.worker_id = dw;
    wl.reason = "drained";
    for (uint32_t i = 0; i < c->worker_peer_cap; i++)
      if (c->worker_peer[i] && i != dw) ctl_worker_send(c, i, LM_MSG_WORKER_LOST, 0, &wl.base, NULL, 0, NULL);
  } else {
    event(c, true, "draining worker %u failed: %s", dw, msg);
  }
  if (r->drain_client) {
    if (code == 0) {
      char json[256];
      snprintf(json, sizeof json, "{\"worker\":%u,\"replaced_by\":%u,\"shards\":%u,\"ms\":%llu}", dw, r->drain_repl,
               r->drain_shards, (unsigned long long)(ctl_now_ms(c) - r->drain_began_ms));
      Lmw__CheckpointReply rep = LMW__CHECKPOINT_REPLY__INIT;
      rep.json = json;
      ctl_send_reply(r->drain_client, r->drain_rid, LM_MSG_CHECKPOINT_REPLY, &rep.base);
    } else {
      ctl_reply_error(r->drain_client, r->drain_rid, code, "draining worker %u failed: %s", dw, msg);
    }
  }
  r->drain_worker = UINT32_MAX;
  r->drain_client = NULL;
  r->drain_ack_rid = 0;
  r->drain_shards = 0;
}

bool ctl_recover_draining(ctl *c, uint32_t worker) {
  return c->rec && c->rec->drain_worker != UINT32_MAX && c->rec->drain_worker == worker;
}

void ctl_recover_drain_gone(ctl *c, uint32_t worker) {
  struct ctl_rec *r = c->rec;
  if (!r || r->drain_worker != worker) return;
  if (r->draining) { /* still recovering: what it was to copy now fails, as for a lost worker */
    r->draining = false;
  }
  drain_end(c, LOOM_WORKER_LOST, "the worker disconnected before its shards were copied");
}

static void drain_start(ctl *c, peer *p, uint64_t rid, uint32_t worker, bool may_wait);

void ctl_on_drain(peer *p, const lm_frame *f, const Lmw__Drain *m) {
  drain_start(p->ctl, p, f->h.request_id, m->worker, true);
}

/* A drain that waited for a standby's data plane: try it again (done: the wait is over). */
static void drain_retry(ctl *c, bool done) {
  struct ctl_rec *r = c->rec;
  if (!r->dw_client) return;
  const lm_reg_worker *w = lm_registry_worker(c->reg, r->dw_worker);
  if (!done && w && find_standby(c, w->ndevices, w->slice) == UINT32_MAX) return;
  peer *p = r->dw_client;
  r->dw_client = NULL;
  drain_start(c, p, r->dw_rid, r->dw_worker, false);
}

static void drain_start(ctl *c, peer *p, uint64_t rid, uint32_t worker, bool may_wait) {
  struct ctl_rec *r = c->rec;
  const Lmw__Drain mm = {.worker = worker}, *m = &mm;
  if (!ctl_is_admin(c, p)) {
    ctl_reply_error(p, rid, LOOM_PERMISSION, "draining a worker needs an admin (user '%s' is not in the controller's "
                    "--admins)", p->user);
    return;
  }
  const lm_reg_worker *w = lm_registry_worker(c->reg, m->worker);
  if (!w) {
    ctl_reply_error(p, rid, LOOM_NOT_FOUND, "no worker %u", m->worker);
    return;
  }
  char wn[160];
  ctl_worker_name(c, m->worker, wn, sizeof wn);
  if (w->standby || w->state != LM_WORKER_ALIVE || !worker_usable(c, m->worker)) {
    ctl_reply_error(p, rid, LOOM_INVALID_ARGUMENT, "%s cannot be drained: it %s", wn,
                    w->standby ? "is a standby (it holds no devices)" : w->state != LM_WORKER_ALIVE ? "is lost"
                                                                                                   : "is not usable");
    return;
  }
  if (r->phase != R_IDLE || r->drain_worker != UINT32_MAX) {
    ctl_reply_error(p, rid, LOOM_BUSY, "a recovery or another drain is in progress; try again when it is over");
    return;
  }
  for (c_program *prog = c->programs; prog; prog = prog->next)
    if (prog->state == P_LOADING || prog->state == P_ANALYZING) {
      ctl_reply_error(p, rid, LOOM_BUSY, "programs are being compiled or loaded; try again in a moment");
      return;
    }
  uint32_t standby = find_standby(c, w->ndevices, w->slice);
  if (standby == UINT32_MAX && may_wait && !r->dw_client && standby_pending(c, w->ndevices)) {
    r->dw_client = p; /* a standby that just registered: its data plane comes in a moment */
    r->dw_rid = rid;
    r->dw_worker = m->worker;
    r->dw_deadline_ms = ctl_now_ms(c) + PENDING_STANDBY_WAIT_MS;
    return;
  }
  if (standby == UINT32_MAX) {
    ctl_reply_error(p, rid, LOOM_NOT_FOUND,
                    "no standby of %u devices to drain %s onto: start one with `loom worker --standby` (or `loom up "
                    "--standby 1`)", w->ndevices, wn);
    return;
  }
  char why[LM_REG_REASON_MAX];
  snprintf(why, sizeof why, "drained (its devices moved to worker %u)", standby);
  lm_registry_mark_lost(c->reg, m->worker, why);
  ctl_frees_worker_lost(c, m->worker);
  r->drain_worker = m->worker;
  r->drain_client = p;
  r->drain_rid = rid;
  r->drain_began_ms = ctl_now_ms(c);
  r->draining = true;
  event(c, false, "draining %s onto standby worker %u (asked by session %llu)", wn, standby,
        (unsigned long long)p->session->id);
  rec_begin(c, m->worker, "drained", standby);
}
