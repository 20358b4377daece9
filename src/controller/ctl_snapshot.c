/* Periodic snapshots of launch outputs, and the launch log truncated behind them
 * (docs/elastic.md "Snapshots of launch outputs").
 *
 * A completed launch's output with a shard that no other worker holds could only come back by
 * replaying its producer from the launch log (and, recursively, what produced its inputs). Such
 * an output counts in its producer's log entry (c_log_entry.refs, c_array.log_ref) and becomes a
 * candidate. Every --snapshot-every completed launches or --snapshot-interval ms (whichever comes
 * first), while recovery is possible (a standby, or --recover-wait) and no recovery runs, a round
 * copies each candidate still alive into its buddy's host memory (the next regular worker after
 * its holder, as for puts): SHARD_COPY to both ends with `report`, the bytes worker to worker on
 * their copy threads, so no launch waits for them. The buddy answers SNAPSHOT_KEPT. Once every
 * shard that needs one is kept, the array is restorable from its snapshot (c_array.bk): its
 * lineage is dropped (deleted inputs kept only for its replay are freed, --replay-keep-mb) and
 * its log entry is unreferenced. An entry no live or kept array needs any more (refs 0, the
 * launch over) is truncated: its ids are freed; its sequence number and status stay for the
 * state checks of ctl_recover.c. So the log holds only the launches after the last snapshot of
 * what they computed, and a recovery replays at most those.
 *
 * A round also starts early when the deleted arrays kept for replays fill half of
 * --replay-keep-mb (ctl_snap_pressure): the snapshots let them go.
 *
 * One round at a time: a round starts only when the previous one's copies are all confirmed (or
 * failed, or their workers lost), so snapshots never take more than one copy of the live arrays
 * at once. Everything runs on the loop thread. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/dtype.h"
#include "common/log.h"
#include "controller/ctl.h"

#define SNAP_CAND_MAX 65536      /* candidates waiting for a round; more start one at once */
#define SNAP_PENDING_MS 120000   /* a copy not confirmed after this is counted as failed */

typedef struct snap_key {
  uint64_t session, array;
} snap_key;

typedef struct snap_pend {       /* one shard copy in flight */
  uint64_t tag, session, array;
  uint32_t device, holder, buddy;
  uint64_t sent_ms;
} snap_pend;

struct ctl_snap {
  snap_key *cand;                /* launch outputs to snapshot at the next round (may be gone by then) */
  size_t ncand, cand_cap;
  snap_pend *pend;
  size_t npend, pend_cap;
  uint32_t since;                /* launches completed since the last round */
  uint64_t last_ms;              /* the last round */
  uint64_t arrays, bytes;        /* snapshots of launch outputs completed */
  uint64_t rounds;
  bool pressure;                 /* a round is due now (ctl_snap_pressure) */
  bool sweep;                    /* a settled array dropped its lineage: sweep the zombies once no copy is in flight */
};

int ctl_snap_init(ctl *c) {
  c->snap = calloc(1, sizeof *c->snap);
  if (!c->snap) return LOOM_NO_MEMORY;
  c->snap->last_ms = ctl_now_ms(c);
  return 0;
}

void ctl_snap_free(ctl *c) {
  if (!c->snap) return;
  free(c->snap->cand);
  free(c->snap->pend);
  free(c->snap);
  c->snap = NULL;
}

static bool snapshots_on(ctl *c) {
  return !c->cfg.no_snapshots && (c->cfg.snapshot_every || c->cfg.snapshot_interval_ms) && ctl_recovery_possible(c);
}

/* ---- the launch log ---- */

void ctl_log_drop(ctl *c, c_log_entry *e) {
  if (e->ids) {
    if (c->log_kept) c->log_kept--;
    c->log_dropped++;
  }
  free(e->ids);
  free(e->phys);
  e->ids = NULL;
  e->phys = NULL;
  e->refs = 0;
}

void ctl_log_unref(ctl *c, c_array *a) {
  if (!a->log_ref) return;
  a->log_ref = false;
  c_log_entry *e = &c->log[a->producer % LM_LAUNCH_LOG_MAX];
  if (e->seq != a->producer) return; /* the ring reused its slot */
  if (e->refs) e->refs--;
  if (e->refs == 0 && e->status != 1) ctl_log_drop(c, e);
}

/* a's data exists: READY, or a deleted array kept (a zombie: a copy of its metadata made while it
 * was pending, not updated since) whose producer completed well. */
static bool array_ready(ctl *c, const c_array *a) {
  if (a->state == A_READY) return true;
  const c_log_entry *e = &c->log[a->producer % LM_LAUNCH_LOG_MAX];
  return a->state == A_PENDING && a->producer && e->seq == a->producer && e->status == 0;
}

/* Shard k of a has a copy on another worker or a kept snapshot. */
static bool shard_safe(ctl *c, const c_array *a, uint32_t k) {
  return ctl_shard_replicated(c, a, k) || (a->bk && a->bk[k] != LM_REG_NO_DEVICE && ctl_worker_usable(c, a->bk[k]));
}

/* True when some shard of a has neither a copy on another worker nor a kept snapshot. */
static bool needs_snapshot(ctl *c, const c_array *a) {
  for (uint32_t k = 0; k < a->sh.ndev; k++)
    if (!shard_safe(c, a, k)) return true;
  return false;
}

static void snap_round(ctl *c);

static void add_cand(ctl *c, uint64_t session, uint64_t array) {
  struct ctl_snap *sn = c->snap;
  if (sn->ncand == sn->cand_cap) {
    size_t cap = sn->cand_cap ? sn->cand_cap * 2 : 64;
    snap_key *k = realloc(sn->cand, cap * sizeof *k);
    if (!k) return; /* not snapshotted: a loss replays it, as without snapshots */
    sn->cand = k, sn->cand_cap = cap;
  }
  sn->cand[sn->ncand++] = (snap_key){session, array};
}

void ctl_snap_launch_done(ctl *c, c_launch *l, lm_session *s) {
  c_log_entry *e = &c->log[l->seq % LM_LAUNCH_LOG_MAX];
  if (e->seq != l->seq) return;
  bool on = snapshots_on(c);
  for (uint32_t j = 0; s && j < l->nout; j++) { /* (deleted ones kept for a replay count too) */
    c_array *a = ctl_find_array(c, s, l->outputs[j]);
    if (!a || a->producer != l->seq || !array_ready(c, a) || a->log_ref || !a->sh.ndev || !needs_snapshot(c, a))
      continue;
    a->log_ref = true;
    e->refs++;
    if (on) add_cand(c, s->id, a->id);
  }
  if (e->refs == 0) ctl_log_drop(c, e); /* nothing it computed needs it: replicas restore them */
  struct ctl_snap *sn = c->snap;
  sn->since++;
  if (on && ((c->cfg.snapshot_every && sn->since >= c->cfg.snapshot_every) || sn->ncand >= SNAP_CAND_MAX ||
             sn->pressure))
    snap_round(c);
}

void ctl_snap_pressure(ctl *c) {
  if (c->snap) c->snap->pressure = true;
}

/* ---- rounds ---- */

static snap_pend *add_pend(ctl *c) {
  struct ctl_snap *sn = c->snap;
  if (sn->npend == sn->pend_cap) {
    size_t cap = sn->pend_cap ? sn->pend_cap * 2 : 64;
    snap_pend *p = realloc(sn->pend, cap * sizeof *p);
    if (!p) return NULL;
    sn->pend = p, sn->pend_cap = cap;
  }
  return &sn->pend[sn->npend++];
}

/* Sends the copies a's shards need; false when it has none to send (or none can be). */
static bool snapshot_array(ctl *c, lm_session *s, c_array *a) {
  bool sent = false;
  for (uint32_t k = 0; k < a->sh.ndev; k++) {
    if (shard_safe(c, a, k)) continue;
    uint32_t holder = lm_registry_device(c->reg, a->devs[k])->worker;
    uint32_t buddy = ctl_snapshot_buddy(c, holder);
    if (buddy == UINT32_MAX || !ctl_worker_usable(c, holder)) continue;
    snap_pend *p = add_pend(c);
    if (!p) break;
    *p = (snap_pend){.tag = ctl_snapshot_send(c, s, a, k, buddy, false, true), .session = s->id, .array = a->id,
                     .device = a->devs[k], .holder = holder, .buddy = buddy, .sent_ms = ctl_now_ms(c)};
    sent = true;
  }
  return sent;
}

static void snap_round(ctl *c) {
  struct ctl_snap *sn = c->snap;
  if (sn->npend || !ctl_recover_idle(c)) return; /* after the copies in flight, or the recovery */
  sn->since = 0;
  sn->pressure = false;
  sn->last_ms = ctl_now_ms(c);
  if (!snapshots_on(c)) {
    sn->ncand = 0;
    return;
  }
  size_t narrays = 0;
  lm_session *s = NULL;
  for (size_t i = 0; i < sn->ncand; i++) {
    snap_key *k = &sn->cand[i];
    if (!s || s->id != k->session) s = ctl_session_find(c, k->session);
    if (!s) continue;
    /* live, or deleted but kept because a launch running now reads it and a replay of what that
     * computes would too (a chain's head when the client sent the next launch and the delete before
     * this one's completion reached the controller): its snapshot frees the links before it. Older
     * kept links are freed by the snapshot of a later one; deleted for good: not snapshotted. */
    c_array *a = ctl_find_array(c, s, k->array);
    if (!a || !array_ready(c, a) || !a->log_ref) continue;
    if (lm_session_get(s, k->array, H_ARRAY) != a && !(a->lin_refs && ctl_launch_reads(c, s->id, a->id))) continue;
    narrays += snapshot_array(c, s, a);
  }
  sn->ncand = 0;
  if (narrays) {
    sn->rounds++;
    lm_debug("snapshot round %llu: %zu launch outputs (%zu shard copies) to their buddies' host memory",
             (unsigned long long)sn->rounds, narrays, sn->npend);
  }
}

/* The last copy of (session, array) ended: the array is restorable from its snapshot, or goes back
 * to the candidates when a shard still has none. */
static void array_settled(ctl *c, uint64_t session, uint64_t array) {
  struct ctl_snap *sn = c->snap;
  for (size_t i = 0; i < sn->npend; i++)
    if (sn->pend[i].session == session && sn->pend[i].array == array) return; /* more to come */
  lm_session *s = ctl_session_find(c, session);
  c_array *a = s ? ctl_find_array(c, s, array) : NULL;
  if (!a || !array_ready(c, a)) return;
  if (needs_snapshot(c, a)) {
    if (a->log_ref) add_cand(c, session, array); /* the next round */
    return;
  }
  sn->arrays++;
  for (uint32_t k = 0; k < a->sh.ndev; k++) {
    int64_t off[LM_SHARD_MAX_RANK], sd[LM_SHARD_MAX_RANK];
    if (!a->bk || a->bk[k] == LM_REG_NO_DEVICE) continue;
    lm_sharding_shard(&a->sh, a->rank, a->dims, k, off, sd);
    uint64_t n = (uint64_t)lm_dtype_size(a->dtype);
    for (int d = 0; d < a->rank; d++) n *= (uint64_t)sd[d];
    sn->bytes += n;
  }
  /* restorable without a replay: what only its replay needed can go */
  ctl_lineage_drop(c, s, a);
  ctl_log_unref(c, a);
  sn->sweep = true; /* the deleted arrays kept for its replay may go (copies_settled) */
}

/* Once no copy is in flight (a round ended), the zombies that the settled arrays' lineage kept
 * may go: one sweep per round, not one per copy. */
static void copies_settled(ctl *c) {
  struct ctl_snap *sn = c->snap;
  if (sn->npend || !sn->sweep) return;
  sn->sweep = false;
  ctl_zombies_sweep(c);
}

static void free_at(ctl *c, uint32_t worker, uint64_t session, uint64_t array) {
  Lmw__FreeArrays fa = LMW__FREE_ARRAYS__INIT;
  fa.session = session;
  fa.n_ids = 1;
  fa.ids = &array;
  ctl_worker_send(c, worker, LM_MSG_FREE_ARRAYS, 0, &fa.base, NULL, 0, NULL);
}

void ctl_on_snapshot_kept(ctl *c, peer *w, const Lmw__SnapshotKept *m) {
  struct ctl_snap *sn = c->snap;
  uint32_t wid = w->worker_id;
  size_t i = 0;
  while (i < sn->npend && !(sn->pend[i].tag == m->tag && sn->pend[i].buddy == wid)) i++;
  bool asked = i < sn->npend; /* else given up on (a late answer), or not asked for */
  if (asked) sn->pend[i] = sn->pend[--sn->npend];
  lm_session *s = ctl_session_find(c, m->session);
  c_array *a = s ? ctl_find_array(c, s, m->array) : NULL;
  if (m->code == 0 && !s) { /* the session ended while it was copied: its SESSION_CLOSED came first */
    Lmw__SessionClosed sc = LMW__SESSION_CLOSED__INIT;
    sc.session = m->session;
    ctl_worker_send(c, wid, LM_MSG_SESSION_CLOSED, 0, &sc.base, NULL, 0, NULL);
  } else if (m->code == 0 && !a) { /* deleted while it was copied: its FREE_ARRAYS may have come first */
    free_at(c, wid, m->session, m->array);
  } else if (m->code == 0) {
    bool ok = false; /* the buddy keeps one copy per device (an array may repeat a device) */
    for (uint32_t k = 0; k < a->sh.ndev; k++)
      ok |= a->devs[k] == m->device && lm_registry_device(c->reg, a->devs[k])->worker != wid;
    if (ok && !a->bk && (a->bk = malloc(a->sh.ndev * sizeof *a->bk)))
      for (uint32_t j = 0; j < a->sh.ndev; j++) a->bk[j] = LM_REG_NO_DEVICE;
    for (uint32_t k = 0; ok && a->bk && k < a->sh.ndev; k++)
      if (a->devs[k] == m->device) a->bk[k] = wid;
    if (!ok) lm_warn("worker %u reported a snapshot of array %llu on device %u, which it cannot keep: ignored", wid,
                     (unsigned long long)m->array, m->device);
  } else if (asked) {
    lm_info("snapshot of array %llu (device %u) into worker %u's host memory failed: %s",
            (unsigned long long)m->array, m->device, wid, m->message);
  }
  if (asked || (a && m->code == 0)) array_settled(c, m->session, m->array);
  copies_settled(c);
  if (sn->npend == 0 && ((c->cfg.snapshot_every && sn->since >= c->cfg.snapshot_every) || sn->pressure)) snap_round(c);
}

/* Copies from or to a lost worker will not be confirmed: they failed. */
void ctl_snap_worker_lost(ctl *c, uint32_t worker) {
  struct ctl_snap *sn = c->snap;
  if (!sn) return;
  for (size_t i = 0; i < sn->npend;) {
    snap_pend p = sn->pend[i];
    if (p.buddy != worker && p.holder != worker) {
      i++;
      continue;
    }
    sn->pend[i] = sn->pend[--sn->npend];
    array_settled(c, p.session, p.array);
  }
  copies_settled(c);
}

void ctl_snap_tick(ctl *c) {
  struct ctl_snap *sn = c->snap;
  uint64_t now = ctl_now_ms(c);
  for (size_t i = 0; i < sn->npend;) {
    snap_pend p = sn->pend[i];
    if (now - p.sent_ms < SNAP_PENDING_MS) {
      i++;
      continue;
    }
    lm_warn("snapshot of array %llu (device %u) into worker %u's host memory not confirmed after %d ms: given up",
            (unsigned long long)p.array, p.device, p.buddy, SNAP_PENDING_MS);
    sn->pend[i] = sn->pend[--sn->npend];
    array_settled(c, p.session, p.array);
  }
  copies_settled(c);
  if (sn->ncand && c->cfg.snapshot_interval_ms && now - sn->last_ms >= c->cfg.snapshot_interval_ms) snap_round(c);
  else if (sn->ncand && ((c->cfg.snapshot_every && sn->since >= c->cfg.snapshot_every) || sn->pressure))
    snap_round(c); /* deferred */
}

void ctl_snap_counts(ctl *c, uint64_t *arrays, uint64_t *bytes, uint32_t *inflight) {
  struct ctl_snap *sn = c->snap;
  *arrays = sn ? sn->arrays : 0;
  *bytes = sn ? sn->bytes : 0;
  *inflight = sn ? (uint32_t)sn->npend : 0;
}
