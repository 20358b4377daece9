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
 *      (puts are snapshotted when they are created); arrays with neither fail with an error
 *      naming them. Copies go worker to worker (SHARD_COPY); the replacement lists the shard
 *      as pending at once, so launches that read it wait for it;
 *   4. once the programs are loaded, the launches taken aside are re-issued in their order with
 *      new sequence numbers (launches are deterministic: the results are bitwise the same), and
 *      the held requests are replayed. The clients' futures complete normally.
 *
 * Arrays a client deletes while a launch in flight reads them are kept ("zombies") until no
 * active launch reads them, so a re-issued launch still finds its inputs. One recovery runs at a
 * time; workers lost meanwhile queue. Everything runs on the loop thread. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/dtype.h"
#include "common/log.h"
#include "controller/ctl.h"

enum { R_IDLE = 0, R_WAITING = 1, R_LOADING = 2 };

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
  struct rec_zombie *next;
} rec_zombie;

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

static uint32_t dev_worker(ctl *c, uint32_t v) { return lm_registry_device(c->reg, v)->worker; }

/* Sends the two halves of a shard copy: from (src, its device src_local or its snapshot of
 * device v) to (dst, its device dst_local or a snapshot of device v). */
static void send_copy(ctl *c, lm_session *s, const c_array *a, uint32_t k, uint32_t src, bool src_backup,
                      uint32_t src_local, uint32_t dst, bool dst_backup, uint32_t dst_local, bool receipt) {
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

/* Chooses a buddy for shard k of a (a->bk[k]) when it has no replica on another worker. */
static bool plan_shard(ctl *c, c_array *a, uint32_t k) {
  uint32_t hw = dev_worker(c, a->devs[k]);
  for (uint32_t j = 0; j < a->sh.ndev; j++)
    if (j != k && dev_worker(c, a->devs[j]) != hw && same_region(a, k, j)) return false; /* a replica elsewhere */
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

/* Snapshots shard k of a into its buddy's host memory (planned in a->bk[k]). */
static void snapshot_shard(ctl *c, lm_session *s, c_array *a, uint32_t k, bool receipt) {
  send_copy(c, s, a, k, dev_worker(c, a->devs[k]), false, lm_registry_device(c->reg, a->devs[k])->local_index,
            a->bk[k], true, 0, receipt);
}

void ctl_snapshot_plan(ctl *c, c_array *a) {
  if (c->cfg.no_snapshots || !recovery_possible(c)) return;
  for (uint32_t k = 0; k < a->sh.ndev; k++) plan_shard(c, a, k);
}

void ctl_snapshot_put(ctl *c, peer *p, c_array *a) {
  for (uint32_t k = 0; a->bk && k < a->sh.ndev; k++)
    if (a->bk[k] != LM_REG_NO_DEVICE) snapshot_shard(c, p->session, a, k, true);
}

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

bool ctl_zombie_keep(ctl *c, lm_session *s, const c_array *a) {
  struct ctl_rec *r = c->rec;
  if (!r || a->state == A_FAILED || !a->sh.ndev) return false;
  if (!ctl_launch_reads(c, s->id, a->id) && !rec_reads(c, s->id, a->id)) return false;
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
  b->held = ctl_hold(c, devs, b->nheld = a->sh.ndev);
  z->session = s;
  z->a = b;
  z->next = r->zombies;
  r->zombies = z;
  return true;
}

/* Frees (at the workers) the zombies no active launch reads any more. */
static void sweep_zombies(ctl *c) {
  struct ctl_rec *r = c->rec;
  if (r->phase != R_IDLE) return;
  for (rec_zombie **pp = &r->zombies; *pp;) {
    rec_zombie *z = *pp;
    if (ctl_launch_reads(c, z->session->id, z->a->id)) {
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
    zombie_free(z);
  }
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

static void rec_reset(ctl *c) {
  struct ctl_rec *r = c->rec;
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
    event(c, false, "worker %u replaced lost worker %u in %llu ms: %u shards restored, %zu launches re-issued%s",
          r->repl, r->dead, (unsigned long long)(ctl_now_ms(c) - r->began_ms), r->restored, re,
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

/* Restores array a's shards that lived on the lost worker's devices (now the replacement's). */
static void restore_array(ctl *c, lm_session *s, c_array *a) {
  struct ctl_rec *r = c->rec;
  int state = state_of(c, a);
  if (state == A_FAILED) return;
  for (uint32_t k = 0; k < a->sh.ndev; k++) {
    uint32_t hw = dev_worker(c, a->devs[k]);
    if (hw != r->repl) {
      if (a->bk && a->bk[k] == r->dead && state == A_READY) { /* its snapshot was lost: take another */
        a->bk[k] = LM_REG_NO_DEVICE;
        if (plan_shard(c, a, k)) snapshot_shard(c, s, a, k, false);
      }
      continue;
    }
    if (state == A_PENDING) continue; /* its producer is re-issued and computes it */
    uint32_t dst_local = lm_registry_device(c->reg, a->devs[k])->local_index;
    if (r->draining) { /* the drained worker still holds every shard: straight from it, with a receipt */
      send_copy(c, s, a, k, r->dead, false, dst_local, r->repl, false, dst_local, true);
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
      send_copy(c, s, a, k, src, false, src_local, r->repl, false, dst_local, false);
      r->restored++;
    } else if (a->bk && a->bk[k] != LM_REG_NO_DEVICE && a->bk[k] != r->repl && worker_usable(c, a->bk[k])) {
      send_copy(c, s, a, k, a->bk[k], true, 0, r->repl, false, dst_local, false);
      r->restored++;
    } else {
      char msg[LM_ERR_MSG_MAX];
      snprintf(msg, sizeof msg,
               "array %llu lost its shard on device %u with worker %u (%s): it has no replica on another worker and "
               "no snapshot to restore it from",
               (unsigned long long)a->id, a->devs[k], r->dead, r->why);
      event(c, true, "session %llu: %s", (unsigned long long)s->id, msg);
      a->state = A_FAILED;
      a->code = LOOM_WORKER_LOST;
      free(a->msg);
      a->msg = strdup(msg);
      r->lost_arrays++;
      return;
    }
  }
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
      if (a) restore_array(c, s, a);
    }
  }
  for (rec_zombie *z = r->zombies; z; z = z->next) restore_array(c, z->session, z->a);
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
    for (uint32_t k = 0; k < l->nworkers; k++) /* (a drained worker is alive: it stops them too) */
      if ((l->workers[k] != dead || r->draining) && !l->done[k])
        ctl_worker_send(c, l->workers[k], LM_MSG_ABORT_LAUNCH, 0, &ab.base, NULL, 0, NULL);
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
  if (r->drain_client == p) r->drain_client = NULL;
  if (r->dw_client == p) r->dw_client = NULL;
  for (rec_frame *fr = r->dhead; fr; fr = fr->next)
    if (fr->p == p) fr->p = NULL;
  for (size_t i = 0; i < r->nlaunches; i++)
    if (r->launches[i]->client == p) r->launches[i]->client = NULL;
  for (rec_zombie **pp = &r->zombies; *pp;) { /* the workers drop the session's shards themselves */
    rec_zombie *z = *pp;
    if (z->session == p->session) {
      *pp = z->next;
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
