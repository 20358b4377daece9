/* Launches at the controller. A LAUNCH names an executable, input arrays and new output ids;
 * the controller checks the inputs against the executable (dtype, shape, and that each process's
 * device holds exactly the shard that process needs), gives the launch the next global sequence
 * number, creates the outputs (pending) and sends ONE RUN to each worker holding a device of the
 * launch. Its reply (LAUNCH_REPLY, or ERROR) goes out when every worker has reported RUN_DONE,
 * or at once when one fails or is lost: the other workers are then told to abort it
 * (ABORT_LAUNCH), so none waits for a collective that cannot complete. Every launch is recorded
 * in the launch log (program, inputs and outputs by id, the physical devices) for recovery. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/dtype.h"
#include "common/log.h"
#include "controller/ctl.h"

#define LM_LAUNCH_MAX_VALUES 65536 /* inputs or outputs of one launch */

static size_t bucket(uint64_t seq) { return (size_t)(seq % C_LAUNCH_BUCKETS); }
static void launch_dispatch(ctl *c, c_launch *l, lm_session *s, const Lmw__Launch *m, const uint64_t *dev_outs);

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static c_launch *find_launch(ctl *c, uint64_t seq) {
  for (c_launch *l = c->by_seq[bucket(seq)]; l; l = l->hnext)
    if (l->seq == seq) return l;
  return NULL;
}

static void type_str(lm_dtype dt, int rank, const int64_t *dims, char *buf, size_t cap) {
  size_t n = (size_t)snprintf(buf, cap, "%s[", lm_dtype_name(dt));
  for (int d = 0; d < rank && n < cap; d++) n += (size_t)snprintf(buf + n, cap - n, "%s%lld", d ? "," : "", (long long)dims[d]);
  if (n < cap) snprintf(buf + n, cap - n, "]");
}

static void region_str(int rank, const int64_t *off, const int64_t *sd, char *buf, size_t cap) {
  size_t n = (size_t)snprintf(buf, cap, "[");
  for (int d = 0; d < rank && n < cap; d++)
    n += (size_t)snprintf(buf + n, cap - n, "%s%lld:%lld", d ? ", " : "", (long long)off[d], (long long)(off[d] + sd[d]));
  if (n < cap) snprintf(buf + n, cap - n, "]");
}

/* Does array a fit input i of prog on every process's device? O(processes + the array's
 * devices): the array's shard index per device comes from a stamped scratch table. */
static int check_input(ctl *c, const c_program *prog, uint32_t i, const c_array *a, lm_err *err) {
  const lm_spmd_info *info = prog->info;
  const lm_spmd_value *v = &info->inputs[i];
  char have[160], want[160];
  bool full = a->dtype == v->global.dtype && a->rank == v->global.rank &&
              !memcmp(a->dims, v->global.dims, (size_t)a->rank * sizeof *a->dims);
  bool local = !full && info->form == LM_SPMD_REPLICAS && a->dtype == v->local.dtype && a->rank == v->local.rank &&
               !memcmp(a->dims, v->local.dims, (size_t)a->rank * sizeof *a->dims);
  if (!full && !local) {
    type_str(a->dtype, a->rank, a->dims, have, sizeof have);
    type_str(v->global.dtype, v->global.rank, v->global.dims, want, sizeof want);
    return lm_errf(err, LOOM_SHAPE_MISMATCH, "input %u (array %llu) is %s but the executable takes %s", i,
                   (unsigned long long)a->id, have, want);
  }
  if (++c->stamp == 0) { /* wrapped: no stale stamp may match */
    memset(c->dev_stamp, 0, LM_REG_MAX_DEVICES * sizeof *c->dev_stamp);
    c->stamp = 1;
  }
  for (uint32_t k = a->sh.ndev; k-- > 0;) /* the first shard on a device wins, as a search would find */
    if (a->devs[k] < LM_REG_MAX_DEVICES) c->dev_pos[a->devs[k]] = k, c->dev_stamp[a->devs[k]] = c->stamp;
  for (uint32_t p = 0; p < info->nproc; p++) {
    uint32_t dev = prog->devices[p];
    uint32_t k = dev < LM_REG_MAX_DEVICES && c->dev_stamp[dev] == c->stamp ? c->dev_pos[dev] : a->sh.ndev;
    if (k == a->sh.ndev)
      return lm_errf(err, LOOM_INVALID_ARGUMENT,
                     "input %u (array %llu) has no shard on device %u, which runs process %u of the executable", i,
                     (unsigned long long)a->id, dev, p);
    int64_t ao[LM_SHARD_MAX_RANK], as[LM_SHARD_MAX_RANK], eo[LM_SHARD_MAX_RANK], es[LM_SHARD_MAX_RANK];
    lm_sharding_shard(&a->sh, a->rank, a->dims, k, ao, as);
    if (full) {
      lm_sharding_shard(&v->sh, v->global.rank, v->global.dims, prog->proc_pos[p], eo, es);
    } else {
      memset(eo, 0, sizeof eo);
      memcpy(es, a->dims, sizeof es);
    }
    if (memcmp(ao, eo, (size_t)a->rank * sizeof *ao) || memcmp(as, es, (size_t)a->rank * sizeof *as)) {
      region_str(a->rank, ao, as, have, sizeof have);
      region_str(a->rank, eo, es, want, sizeof want);
      return lm_errf(err, LOOM_INVALID_ARGUMENT,
                     "input %u (array %llu) is sharded differently from what the executable expects: its shard on "
                     "device %u is %s, but process %u needs %s",
                     i, (unsigned long long)a->id, dev, have, p, want);
    }
  }
  return 0;
}

/* Creates output arrays that already failed (the launch was refused), so later uses say why. */
static void failed_outputs(peer *p, const Lmw__Launch *m, int code, const char *msg) {
  for (size_t j = 0; j < m->n_outputs; j++) {
    c_array *a = calloc(1, sizeof *a);
    if (!a) return;
    a->id = m->outputs[j];
    a->state = A_FAILED;
    a->code = code;
    a->msg = strdup(msg);
    lm_sharding_init(&a->sh);
    a->sh.ndev = 0; /* no shards anywhere */
    if (lm_session_add_id(p->session, a->id, H_ARRAY, a, ctl_array_destroy, NULL) < 0) ctl_array_destroy(a);
  }
}

static void log_record(ctl *c, c_launch *l, const Lmw__Launch *m) {
  c_log_entry *e = &c->log[l->seq % LM_LAUNCH_LOG_MAX];
  ctl_log_drop(c, e); /* the ring wrapped: an entry still needed goes (its arrays' refs see the new seq) */
  memset(e, 0, sizeof *e);
  e->seq = l->seq;
  e->session = l->session;
  e->program = l->prog->id;
  e->nin = (uint32_t)m->n_inputs;
  e->nout = (uint32_t)m->n_outputs;
  e->ndev = l->prog->ndev;
  e->ids = malloc((m->n_inputs + m->n_outputs + 1) * sizeof *e->ids);
  e->phys = malloc(((size_t)2 * e->ndev + 1) * sizeof *e->phys);
  if (e->ids) {
    if (m->n_inputs) memcpy(e->ids, m->inputs, m->n_inputs * sizeof *e->ids);
    if (m->n_outputs) memcpy(e->ids + m->n_inputs, m->outputs, m->n_outputs * sizeof *e->ids);
  }
  for (uint32_t i = 0; e->phys && i < e->ndev; i++) {
    e->phys[2 * i] = l->plan->proc_worker[i];
    e->phys[2 * i + 1] = l->plan->proc_local[i];
  }
  e->status = 1;
  c->log_count++;
  if (e->ids) c->log_kept++;
}

static void log_status(ctl *c, uint64_t seq, int status) {
  c_log_entry *e = &c->log[seq % LM_LAUNCH_LOG_MAX];
  if (e->seq == seq) e->status = status;
}

static void set_outputs(ctl *c, c_launch *l, int state, int code, const char *msg) {
  /* a restored launch may have no client (yet): its session is found by id */
  if (l->replay) { /* a recovery's recomputation: its outputs are the arrays it restores */
    if (state == A_FAILED) ctl_replay_failed(c, l, code, msg);
    return;
  }
  lm_session *s = l->client ? l->client->session : ctl_session_find(c, l->session);
  if (!s) return;
  for (uint32_t j = 0; j < l->nout; j++) {
    c_array *a = lm_session_get(s, l->outputs[j], H_ARRAY);
    if (!a || a->producer != l->seq || a->state != A_PENDING) continue;
    a->state = state;
    if (state == A_FAILED) {
      a->code = code;
      free(a->msg);
      a->msg = strdup(msg);
    }
  }
}

static void launch_free(ctl *c, c_launch *l) {
  for (c_launch **pp = &c->by_seq[bucket(l->seq)]; *pp; pp = &(*pp)->hnext)
    if (*pp == l) {
      *pp = l->hnext;
      break;
    }
  if (l->prev) l->prev->next = l->next;
  else c->active = l->next;
  if (l->next) l->next->prev = l->prev;
  if (l->trace) ctl_trace_launch_end(c, l, LOOM_CANCELLED);
  if (l->replay) ctl_replay_end(c, l); /* not journaled */
  else if (!c->stopping) ctl_j_launch_end(c, l); /* a stopping controller keeps it for the restart */
  if (!l->replay && l->failed && !c->stopping) { /* nothing can be replayed from it: its record goes */
    c_log_entry *e = &c->log[l->seq % LM_LAUNCH_LOG_MAX];
    if (e->seq == l->seq) ctl_log_drop(c, e);
  }
  ctl_pool_launch_end(c, l);
  ctl_program_release(c, l->prog);
  ctl_plan_release(l->plan);
  free(l->done);
  free(l->gdone);
  free(l->outputs);
  free(l->r_inputs);
  free(l);
}

void ctl_launch_abort(ctl *c, c_launch *l, const Lmw__AbortLaunch *ab, uint32_t skip) {
  if (l->relayed) { /* through the relays, after the RUNs they forwarded (a lost relay's members stop
                       when its connection to them closes) */
    for (uint32_t g = 0; g < l->plan->ngroups; g++) {
      uint32_t relay = l->workers[g * l->plan->gsize];
      if (!l->gdone[g] && relay != skip) ctl_worker_send(c, relay, LM_MSG_ABORT_LAUNCH, 0, &ab->base, NULL, 0, NULL);
    }
    return;
  }
  for (uint32_t i = 0; i < l->nworkers; i++)
    if (!l->done[i] && l->workers[i] != skip)
      ctl_worker_send(c, l->workers[i], LM_MSG_ABORT_LAUNCH, 0, &ab->base, NULL, 0, NULL);
}

/* Completes the launch now with an error (message full) and aborts it on the workers still
 * running it (reason travels in ABORT_LAUNCH); it stays active until they all report RUN_DONE. */
static void launch_end_early(ctl *c, c_launch *l, int code, const char *full, const char *reason) {
  l->failed = true;
  l->end_code = code;
  set_outputs(c, l, A_FAILED, code, full);
  if (l->client) ctl_reply_error(l->client, l->rid, code, "%s", full);
  log_status(c, l->seq, code < 0 ? code : LOOM_INTERNAL);
  Lmw__AbortLaunch ab = LMW__ABORT_LAUNCH__INIT;
  ab.seq = l->seq;
  ab.reason = (char *)reason;
  ctl_launch_abort(c, l, &ab, UINT32_MAX);
}

/* The launch failed (a worker reported an error or was lost): fail it now, abort it elsewhere. */
static void launch_fail(ctl *c, c_launch *l, int code, const char *msg) {
  if (l->failed) return;
  c->launches_failed++;
  char full[LM_ERR_MSG_MAX];
  snprintf(full, sizeof full, "launch %llu failed: %.960s", (unsigned long long)l->seq, msg);
  launch_end_early(c, l, code, full, full);
}

static void launch_worker_done(ctl *c, c_launch *l, uint32_t idx) {
  if (l->done[idx]) return;
  l->done[idx] = 1;
  if (--l->pending > 0) return;
  if (c->met)
    ctl_http_launch_done(c, l, !l->failed ? LM_MET_OK : l->end_code == LOOM_CANCELLED ? LM_MET_CANCELLED : LM_MET_FAILED,
                         uv_hrtime() - l->t0_ns);
  if (l->trace) ctl_trace_launch_end(c, l, !l->failed ? 0 : l->end_code ? l->end_code : LOOM_INTERNAL);
  if (!l->failed) {
    set_outputs(c, l, A_READY, 0, NULL);
    log_status(c, l->seq, 0);
    if (!l->replay) ctl_snap_launch_done(c, l, l->client ? l->client->session : ctl_session_find(c, l->session));
    if (l->client) {
      Lmw__LaunchReply r = LMW__LAUNCH_REPLY__INIT;
      r.seq = l->seq;
      peer *client = l->client;
      uint64_t rid = l->rid, jno = l->jno;
      launch_free(c, l);
      ctl_send_reply_after(client, rid, LM_MSG_LAUNCH_REPLY, &r.base, jno); /* once its record is durable */
      return;
    }
  }
  launch_free(c, l);
}

/* Members k0..k1-1 of l not done yet are done (their outcome is known or lost); true when the
 * last of them freed l. */
static bool settle_members(ctl *c, c_launch *l, uint32_t k0, uint32_t k1) {
  for (uint32_t k = k0; k < k1; k++) {
    if (l->done[k]) continue;
    bool last = l->pending == 1;
    launch_worker_done(c, l, k); /* the last frees l */
    if (last) return true;
  }
  return false;
}

void ctl_on_run_done(ctl *c, peer *w, const Lmw__RunDone *m) {
  c_launch *l = find_launch(c, m->seq);
  if (!l) return; /* already finished (failed elsewhere and freed) */
  uint32_t idx = ctl_plan_worker_index(l->plan, w->worker_id);
  if (idx >= l->nworkers || l->workers[idx] != w->worker_id) {
    lm_warn("worker %u reported launch %llu, which it is not part of", w->worker_id, (unsigned long long)m->seq);
    return;
  }
  if (l->trace) ctl_trace_run_done(c, l, w->worker_id, m);
  if (m->code < 0) {
    char msg[LM_ERR_MSG_MAX];
    snprintf(msg, sizeof msg, "%.900s", m->message && m->message[0] ? m->message : lm_status_desc(m->code));
    for (char *q = msg; *q; q++)
      if ((unsigned char)*q < 0x20 || *q == 0x7f) *q = ' ';
    launch_fail(c, l, m->code, msg);
  }
  launch_worker_done(c, l, idx);
}

void ctl_on_relay_done(ctl *c, peer *w, const Lmw__RelayDone *m) {
  c_launch *l = find_launch(c, m->seq);
  if (!l) return; /* already finished */
  uint32_t idx = ctl_plan_worker_index(l->plan, w->worker_id);
  if (!l->relayed || idx >= l->nworkers || l->workers[idx] != w->worker_id || idx % l->plan->gsize) {
    lm_warn("worker %u reported launch %llu as a relay, which it is not", w->worker_id, (unsigned long long)m->seq);
    return;
  }
  uint32_t g = idx / l->plan->gsize, k1 = ctl_plan_group_end(l->plan, g);
  if (l->gdone[g]) return;
  l->gdone[g] = 1;
  for (size_t j = 0; j < m->n_members; j++) { /* failures and timings, each naming its worker */
    const Lmw__RelayMemberDone *md = m->members[j];
    uint32_t k = ctl_plan_worker_index(l->plan, md->worker);
    if (!md->done || k < idx || k >= k1 || l->done[k]) continue;
    if (l->trace) ctl_trace_run_done(c, l, md->worker, md->done);
    if (md->done->code < 0) {
      char msg[LM_ERR_MSG_MAX];
      snprintf(msg, sizeof msg, "%.900s", md->done->message && md->done->message[0] ? md->done->message
                                                                                : lm_status_desc(md->done->code));
      for (char *q = msg; *q; q++)
        if ((unsigned char)*q < 0x20 || *q == 0x7f) *q = ' ';
      launch_fail(c, l, md->done->code, msg);
    }
  }
  settle_members(c, l, idx, k1); /* the others ran */
}

void ctl_launches_worker_lost(ctl *c, uint32_t worker, const char *why) {
  char wn[160], msg[LM_ERR_MSG_MAX];
  ctl_worker_name(c, worker, wn, sizeof wn);
  c_launch *l = c->active;
  while (l) {
    c_launch *n = l->next;
    uint32_t i = ctl_plan_worker_index(l->plan, worker);
    if (i < l->nworkers && l->workers[i] == worker && l->relayed && i % l->plan->gsize == 0 &&
        !l->gdone[i / l->plan->gsize]) { /* a relay: its whole group's outcome is lost with it */
      uint32_t g = i / l->plan->gsize, k1 = ctl_plan_group_end(l->plan, g);
      snprintf(msg, sizeof msg, "%s, the relay for workers %u-%u of the launch (%u workers), was lost during the "
               "launch: %s", wn, l->workers[i], l->workers[k1 - 1], k1 - i, why);
      launch_fail(c, l, LOOM_WORKER_LOST, msg);
      l->gdone[g] = 1;
      settle_members(c, l, i, k1); /* may free l */
    } else if (i < l->nworkers && l->workers[i] == worker && !l->done[i]) {
      snprintf(msg, sizeof msg, "%s was lost during the launch: %s", wn, why);
      launch_fail(c, l, LOOM_WORKER_LOST, msg);
      launch_worker_done(c, l, i); /* may free l */
    }
    l = n;
  }
}

void ctl_launch_cut(ctl *c, c_launch *l, int code, const char *full, const char *reason) {
  if (l->failed) return;
  c->launches_failed++;
  launch_end_early(c, l, code, full, reason);
}

void ctl_on_cancel_launch(peer *p, const lm_frame *f, const Lmw__CancelLaunch *m) {
  ctl *c = p->ctl;
  /* the session's launch with that LAUNCH request id; not found: it already completed (its reply
   * went out before this ACK) or was refused, and there is nothing to do */
  for (c_launch *l = c->active; l; l = l->next) {
    if (l->client != p || l->rid != m->launch || l->failed) continue;
    char full[LM_ERR_MSG_MAX];
    snprintf(full, sizeof full, "launch %llu was cancelled by the client", (unsigned long long)l->seq);
    lm_debug("session %llu cancelled launch %llu", (unsigned long long)l->session, (unsigned long long)l->seq);
    launch_end_early(c, l, LOOM_CANCELLED, full, "cancelled by the client");
    break;
  }
  Lmw__Ack ack = LMW__ACK__INIT;
  ctl_reply(p, f, LM_MSG_ACK, &ack.base);
}

void ctl_launch_unhash(ctl *c, c_launch *l) {
  for (c_launch **pp = &c->by_seq[bucket(l->seq)]; *pp; pp = &(*pp)->hnext)
    if (*pp == l) {
      *pp = l->hnext;
      break;
    }
  l->hnext = NULL;
}

void ctl_launch_reissue(ctl *c, c_launch *l) {
  c_log_entry *e = &c->log[l->seq % LM_LAUNCH_LOG_MAX];
  if (l->replay) { /* a recomputation interrupted by another loss: what it was to restore fails */
    l->prev = NULL, l->next = c->active;
    if (c->active) c->active->prev = l;
    c->active = l;
    ctl_launch_abandon(c, l, LOOM_WORKER_LOST, "a worker it ran on was lost while it recomputed lost shards");
    return;
  }
  if (e->seq != l->seq || !e->ids || !l->client) {
    l->prev = NULL, l->next = c->active; /* launch_free unlists it */
    if (c->active) c->active->prev = l;
    c->active = l;
    ctl_launch_abandon(c, l, LOOM_WORKER_LOST, "its record in the launch log is gone, so it cannot be re-issued");
    return;
  }
  uint64_t old = l->seq;
  ctl_j_launch_del(c, old); /* recorded again under its new number when sent */
  uint64_t *ids = e->ids;
  e->ids = NULL; /* taken: log_record frees the slot's arrays when it reuses it */
  if (c->log_kept) c->log_kept--;
  Lmw__Launch m = LMW__LAUNCH__INIT;
  m.n_inputs = e->nin;
  m.inputs = ids;
  m.n_outputs = e->nout;
  m.outputs = ids + e->nin;
  l->seq = ++c->next_seq;
  for (uint32_t j = 0; j < l->nout; j++) { /* its outputs now come from the new sequence number */
    c_array *a = lm_session_get(l->client->session, l->outputs[j], H_ARRAY);
    if (a && a->producer == old) a->producer = l->seq;
  }
  free(l->done); /* launch_dispatch makes it again for the plan it uses (one flag per worker) */
  l->done = NULL;
  l->failed = false;
  /* not listed (the recovery took it aside): launch_dispatch lists it afresh */
  lm_info("launch %llu re-issued as launch %llu", (unsigned long long)old, (unsigned long long)l->seq);
  launch_dispatch(c, l, l->client->session, &m, NULL);
  free(ids);
}

void ctl_launch_abandon(ctl *c, c_launch *l, int code, const char *why) {
  char full[LM_ERR_MSG_MAX];
  snprintf(full, sizeof full, "launch %llu failed: %.960s", (unsigned long long)l->seq, why);
  c->launches_failed++;
  l->failed = true;
  set_outputs(c, l, A_FAILED, code, full);
  if (l->client) ctl_reply_error(l->client, l->rid, code, "%s", full);
  log_status(c, l->seq, code);
  launch_free(c, l);
}

bool ctl_launch_reads(ctl *c, uint64_t session, uint64_t array) {
  for (c_launch *l = c->active; l; l = l->next) {
    if (l->session != session) continue;
    if (l->replay) {
      for (uint32_t i = 0; i < l->r_nin; i++)
        if (l->r_inputs[i] == array) return true;
      continue;
    }
    const c_log_entry *e = &c->log[l->seq % LM_LAUNCH_LOG_MAX];
    if (e->seq != l->seq || !e->ids) return true; /* cannot tell: keep it */
    for (uint32_t i = 0; i < e->nin; i++)
      if (e->ids[i] == array) return true;
  }
  return false;
}

void ctl_launches_client_gone(ctl *c, peer *p) {
  for (c_launch *l = c->active; l; l = l->next)
    if (l->client == p) l->client = NULL;
}

void ctl_launches_free(ctl *c) {
  while (c->active) {
    c_launch *l = c->active;
    l->prog->refs++; /* programs are freed wholesale next; do not let eviction run */
    launch_free(c, l);
  }
  for (size_t i = 0; c->log && i < LM_LAUNCH_LOG_MAX; i++) ctl_log_drop(c, &c->log[i]);
  free(c->log);
  c->log = NULL;
  free(c->dev_pos), free(c->dev_stamp);
  c->dev_pos = c->dev_stamp = NULL;
}

static void plan_unref(void *arg) { ctl_plan_release(arg); }

/* Hierarchical dispatch: one RELAY_RUN per group, to its relay (run: what every member's RUN
 * shares; the group's members, devices and tokens are the plan's encoded RelayGroup). Each member
 * runs its RUN only after reading what the controller sent it before (min_cseq). */
static void relay_dispatch(ctl *c, c_launch *l, lm_session *s, Lmw__Run *run) {
  c_plan *plan = l->plan;
  uint32_t gs = plan->gsize;
  /* per member of a group: its frees, a pointer to them, its min_cseq (one allocation) */
  Lmw__RelayFrees *fr = calloc(gs, sizeof *fr + sizeof(Lmw__RelayFrees *) + sizeof(uint64_t));
  Lmw__RelayFrees **frp = fr ? (Lmw__RelayFrees **)(fr + gs) : NULL;
  uint64_t *mincs = fr ? (uint64_t *)(frp + gs) : NULL;
  lm_err err;
  for (uint32_t g = 0; g < plan->ngroups; g++) {
    uint32_t k0 = g * gs, k1 = ctl_plan_group_end(plan, g);
    int src = 0;
    Lmw__RelayRun rr = LMW__RELAY_RUN__INIT;
    if (!fr) src = lm_errf(&err, LOOM_NO_MEMORY, "out of host memory at the controller");
    for (uint32_t k = k0; src == 0 && k < k1; k++) {
      uint32_t w = l->workers[k];
      const uint64_t *ids; /* the member's own list, unchanged until ctl_frees_sent (the members are distinct
                              workers, and nothing here adds frees) */
      size_t nf = ctl_frees_for_run(c, w, s->id, &ids); /* (may send another session's frees first) */
      if (nf) {
        Lmw__RelayFrees *f = &fr[rr.n_frees];
        lmw__relay_frees__init(f);
        f->member = k - k0;
        f->n_ids = nf;
        f->ids = (uint64_t *)ids;
        frp[rr.n_frees++] = f;
      }
      if (k > k0) ctl_peers_flush(c, w); /* it learns its peers before the RUN (the relay's flush on send) */
      peer *wp = w < c->worker_peer_cap ? c->worker_peer[w] : NULL;
      mincs[k - k0] = wp ? wp->cseq : 0;
    }
    if (src == 0) {
      rr.run = run;
      rr.n_min_cseq = k1 - k0;
      rr.min_cseq = mincs;
      rr.frees = frp;
      plan->refs++; /* the payload is sent from the plan's memory */
      src = ctl_worker_send_ref(c, l->workers[k0], LM_MSG_RELAY_RUN, 0, &rr.base, plan->gblob[g], plan->gblen[g],
                                plan_unref, plan, &err);
    }
    for (size_t j = 0; src == 0 && j < rr.n_frees; j++) ctl_frees_sent(c, l->workers[k0 + frp[j]->member]);
    if (src < 0) { /* fail it; the groups from g on never got it (the last worker done frees l) */
      for (uint32_t h = plan->ngroups; h-- > g;) l->gdone[h] = 1; /* (nothing to abort there) */
      launch_fail(c, l, err.code, err.msg);
      settle_members(c, l, k0, l->nworkers); /* may free l */
      break;
    }
  }
  free(fr);
}

/* Sends one RUN per worker holding a device of l (its devices, and where every process runs, for
 * collectives), after listing l as active and recording it in the launch log. m gives the inputs
 * and outputs. Used for new launches and for launches re-issued by a recovery (ctl_recover.c). */
static void launch_dispatch(ctl *c, c_launch *l, lm_session *s, const Lmw__Launch *m, const uint64_t *dev_outs) {
  c_program *prog = l->prog;
  lm_err err;
  int rc = 0;
  if (!ctl_plan_current(c, prog)) { /* its devices moved (hot swap): plan again, and every RUN carries
                                       the map from now on */
    rc = ctl_plan_build(c, prog, &err);
    prog->map_in_run = true;
  }
  const c_plan *plan = prog->plan;
  /* one RUN per worker: only its own processes; the inputs and outputs once per RUN; where every
   * process runs went in LOAD_PROGRAM (unless the devices moved since) */
  uint32_t n = prog->ndev, maxd = 0;
  for (uint32_t k = 0; rc == 0 && k < plan->nworkers; k++)
    if (plan->wfirst[k + 1] - plan->wfirst[k] > maxd) maxd = plan->wfirst[k + 1] - plan->wfirst[k];
  Lmw__RunDevice *rdev = rc ? NULL : calloc(maxd ? maxd : 1, sizeof *rdev);
  Lmw__RunDevice **rptr = rc ? NULL : calloc(maxd ? maxd : 1, sizeof *rptr);
  if (rc == 0 && !l->done) l->done = calloc(plan->nworkers ? plan->nworkers : 1, 1);
  l->relayed = rc == 0 && plan->ngroups && !dev_outs; /* a replay gives each process its own outputs: direct */
  free(l->gdone);
  l->gdone = l->relayed ? calloc(plan->ngroups, 1) : NULL;
  if (l->relayed && !l->gdone) rc = lm_errf(&err, LOOM_NO_MEMORY, "out of host memory at the controller");
  if (rc == 0 && (!rdev || !rptr || !l->done)) rc = lm_errf(&err, LOOM_NO_MEMORY, "out of host memory at the controller");
  if (l->plan != plan) { /* a re-issue after a hot swap drops the old plan */
    ctl_plan_release(l->plan);
    l->plan = rc ? NULL : prog->plan;
    if (l->plan) l->plan->refs++;
  }
  if (rc < 0) { /* listed first: abandoning it unlists and frees it */
    free(rdev), free(rptr);
    l->prev = NULL, l->next = c->active;
    if (c->active) c->active->prev = l;
    c->active = l;
    l->nworkers = 0;
    ctl_launch_abandon(c, l, err.code, err.msg);
    return;
  }
  l->nworkers = plan->nworkers;
  l->workers = plan->workers;
  for (uint32_t k = 0; k < l->nworkers; k++) lm_session_touch(s, l->workers[k]); /* they will hold its outputs */
  l->pending = l->nworkers;
  l->hnext = c->by_seq[bucket(l->seq)];
  c->by_seq[bucket(l->seq)] = l;
  l->next = c->active;
  if (c->active) c->active->prev = l;
  c->active = l;
  if (!l->replay) { /* a replay is no new value: the log keeps the launch it recomputes */
    log_record(c, l, m);
    ctl_j_launch(c, l, m);
  }
  ctl_trace_launch_sent(l);
  Lmw__Run run = LMW__RUN__INIT;
  run.seq = l->seq;
  run.session = s->id;
  run.program = prog->id;
  run.devices = rptr;
  run.n_inputs = m->n_inputs;
  run.inputs = m->inputs;
  run.n_outputs = m->n_outputs;
  run.outputs = m->outputs;
  if (prog->map_in_run && prog->needs_map) {
    run.n_proc_workers = run.n_proc_devices = n;
    run.proc_workers = plan->proc_worker;
    run.proc_devices = plan->proc_local;
  }
  run.want_timings = l->trace != NULL;
  if (l->relayed) {
    free(rdev), free(rptr);
    relay_dispatch(c, l, s, &run);
    return;
  }
  for (uint32_t k = 0; k < l->nworkers; k++) {
    size_t nd = 0;
    for (uint32_t j = plan->wfirst[k]; j < plan->wfirst[k + 1]; j++) {
      uint32_t i = plan->wprocs[j];
      Lmw__RunDevice *rd = &rdev[nd];
      lmw__run_device__init(rd);
      rd->local_index = plan->proc_local[i];
      rd->process = i;
      if (dev_outs) { /* a replay: each process's own output ids */
        rd->n_outputs = m->n_outputs;
        rd->outputs = (uint64_t *)dev_outs + (size_t)i * m->n_outputs;
      }
      rptr[nd++] = rd;
    }
    run.n_devices = nd;
    run.n_free_ids = ctl_frees_for_run(c, l->workers[k], s->id, (const uint64_t **)&run.free_ids);
    int src = ctl_worker_send(c, l->workers[k], LM_MSG_RUN, 0, &run.base, NULL, 0, &err);
    if (src == 0 && run.n_free_ids) ctl_frees_sent(c, l->workers[k]);
    if (src < 0) {
      /* fail it; the workers from k on never got it and never answer (the last may free l) */
      launch_fail(c, l, err.code, err.msg);
      for (uint32_t j = l->nworkers; j-- > k;) launch_worker_done(c, l, j);
      break;
    }
  }
  free(rdev), free(rptr);
}

void ctl_on_launch(peer *p, const lm_frame *f, const Lmw__Launch *m) {
  ctl *c = p->ctl;
  if (ctl_launch_again(p, f, m)) return; /* re-sent after a controller restart */
  uint64_t t0 = c->met || c->trace ? uv_hrtime() : 0;
  lm_session *s = p->session;
  uint64_t rid = f->h.request_id;
  lm_err err;
  if (!c->dev_pos) { /* the input check's scratch, made at the first launch */
    c->dev_pos = malloc(LM_REG_MAX_DEVICES * sizeof *c->dev_pos);
    c->dev_stamp = calloc(LM_REG_MAX_DEVICES, sizeof *c->dev_stamp);
    if (!c->dev_pos || !c->dev_stamp) {
      free(c->dev_pos), free(c->dev_stamp);
      c->dev_pos = c->dev_stamp = NULL;
      ctl_reply_error(p, rid, LOOM_NO_MEMORY, "out of host memory");
      return;
    }
  }
  if (m->n_inputs > LM_LAUNCH_MAX_VALUES || m->n_outputs > LM_LAUNCH_MAX_VALUES) {
    ctl_reply_error(p, rid, LOOM_INVALID_ARGUMENT, "a launch takes at most %d inputs and outputs (got %zu and %zu)",
                    LM_LAUNCH_MAX_VALUES, m->n_inputs, m->n_outputs);
    return;
  }
  /* the new ids must be new (and distinct): otherwise nothing can be created for them */
  uint64_t *sorted = malloc((m->n_outputs + 1) * sizeof *sorted);
  if (!sorted) {
    ctl_reply_error(p, rid, LOOM_NO_MEMORY, "out of host memory");
    return;
  }
  if (m->n_outputs) memcpy(sorted, m->outputs, m->n_outputs * sizeof *sorted);
  qsort(sorted, m->n_outputs, sizeof *sorted, cmp_u64);
  for (size_t j = 0; j < m->n_outputs; j++) {
    uint64_t id = sorted[j];
    if (!id || (j && sorted[j - 1] == id) || lm_session_has(s, id) || lm_session_was_deleted(s, id)) {
      free(sorted);
      ctl_reply_error(p, rid, LOOM_INVALID_ARGUMENT, "output id %llu is not new in this session",
                      (unsigned long long)id);
      return;
    }
    if (id >= LM_CTL_RESERVED_IDS) {
      free(sorted);
      ctl_reply_error(p, rid, LOOM_INVALID_ARGUMENT, "output id %llu is reserved for the controller (ids from 2^63 "
                      "on name a recovery's scratch arrays)", (unsigned long long)id);
      return;
    }
  }
  free(sorted);
  int rc = 0;
  c_exe *e = lm_session_get(s, m->executable, H_EXECUTABLE);
  c_program *prog = e ? e->prog : NULL;
  if (!e)
    rc = lm_errf(&err, LOOM_NOT_FOUND, "executable %llu %s", (unsigned long long)m->executable,
                 lm_session_was_deleted(s, m->executable) ? "was destroyed" : "does not exist in this session");
  else if (m->n_inputs != prog->info->ninputs || m->n_outputs != prog->info->noutputs)
    rc = lm_errf(&err, LOOM_INVALID_ARGUMENT, "%s takes %u inputs and returns %u outputs (got %zu and %zu)",
                 prog->name, prog->info->ninputs, prog->info->noutputs, m->n_inputs, m->n_outputs);
  for (size_t i = 0; rc == 0 && i < m->n_inputs; i++) {
    c_array *a = lm_session_get(s, m->inputs[i], H_ARRAY);
    if (!a)
      rc = lm_errf(&err, LOOM_NOT_FOUND, "input %zu: array %llu %s", i, (unsigned long long)m->inputs[i],
                   lm_session_was_deleted(s, m->inputs[i]) ? "was deleted" : "does not exist in this session");
    else if (a->state == A_FAILED) /* the producer's error, as it is: chains do not nest messages */
      rc = lm_errf(&err, a->code, "%s", a->msg ? a->msg : "an input's producer failed");
    else
      rc = check_input(c, prog, (uint32_t)i, a, &err);
  }
  if (rc == 0 && !ctl_plan_current(c, prog)) { /* its devices moved (hot swap): plan again, and
                                                 every RUN carries the map from now on */
    rc = ctl_plan_build(c, prog, &err);
    prog->map_in_run = true;
  }
  const c_plan *plan = prog ? prog->plan : NULL;
  for (uint32_t k = 0; rc == 0 && k < plan->nworkers; k++) { /* health is per worker */
    const lm_reg_worker *rw = lm_registry_worker(c->reg, plan->workers[k]);
    if (rw->state == LM_WORKER_ALIVE && !rw->problem[0]) continue;
    uint32_t i = plan->wprocs[plan->wfirst[k]]; /* name its first process's device */
    char wn[160];
    ctl_worker_name(c, plan->workers[k], wn, sizeof wn);
    rc = lm_errf(&err, LOOM_WORKER_LOST, "device %u (process %u) is unavailable: %s is lost (%s)", prog->devices[i], i,
                 wn, lm_registry_device_reason(c->reg, prog->devices[i]));
  }
  if (rc == 0) rc = ctl_pool_launch_check(p, prog, &err); /* quotas: queued_launches, device_memory */
  c_launch *l = NULL;
  if (rc == 0) {
    l = calloc(1, sizeof *l);
    if (l) {
      l->done = calloc(plan->nworkers ? plan->nworkers : 1, 1);
      l->outputs = calloc(m->n_outputs + 1, sizeof *l->outputs);
    }
    if (!l || !l->done || !l->outputs) {
      if (l) free(l->done), free(l->outputs);
      free(l);
      l = NULL;
      rc = lm_errf(&err, LOOM_NO_MEMORY, "out of host memory");
    }
  }
  if (rc < 0) {
    if (c->met) lm_met_inc(&c->met->launches_refused);
    failed_outputs(p, m, rc, err.msg);
    ctl_reply_error(p, rid, rc, "%s", err.msg);
    return;
  }
  const lm_spmd_info *info = prog->info;
  l->seq = ++c->next_seq;
  l->client = p;
  l->rid = rid;
  l->session = s->id;
  l->prog = prog;
  prog->refs++;
  l->nout = (uint32_t)m->n_outputs;
  if (m->n_outputs) memcpy(l->outputs, m->outputs, m->n_outputs * sizeof *l->outputs);
  c->launches_total++;
  l->t0_ns = t0;
  if (c->met) lm_met_inc(&c->met->launches_started);
  /* outputs exist from now on, pending */
  uint32_t *mesh_devs = calloc(info->nproc, sizeof *mesh_devs);
  for (uint32_t pos = 0; mesh_devs && pos < info->nproc; pos++) mesh_devs[pos] = prog->devices[info->mesh_procs[pos]];
  for (uint32_t j = 0; j < l->nout; j++) {
    const lm_spmd_value *v = &info->outputs[j];
    c_array *a = calloc(1, sizeof *a);
    uint32_t *devs = malloc(info->nproc * sizeof *devs);
    if (!a || !devs || !mesh_devs) {
      free(a), free(devs);
      continue; /* its later uses will find no such array */
    }
    memcpy(devs, mesh_devs, info->nproc * sizeof *devs);
    a->id = l->outputs[j];
    a->dtype = (lm_dtype)v->global.dtype;
    a->rank = v->global.rank;
    memcpy(a->dims, v->global.dims, sizeof a->dims);
    a->sh = v->sh;
    a->sh.devices = devs;
    a->devs = devs;
    a->state = A_PENDING;
    a->producer = l->seq;
    a->held = ctl_hold(c, devs, a->nheld = info->nproc);
    ctl_pool_array_add(p, a, false, NULL);
    if (lm_session_add_id(s, a->id, H_ARRAY, a, ctl_array_destroy, NULL) < 0) {
      ctl_array_destroy(a);
    } else {
      ctl_j_array(c, s->id, a); /* pending: it is ready once its launch record is gone */
      ctl_lineage_note(c, s, a, m->inputs, m->n_inputs);
    }
  }
  free(mesh_devs);
  ctl_pool_launch_start(p, l);
  if (c->trace) ctl_trace_launch_begin(c, l, t0, prog->name, prog->ndev);
  launch_dispatch(c, l, s, m, NULL);
}


void ctl_launch_replay(ctl *c, c_launch *l, lm_session *s, const uint64_t *in, uint32_t nin, const uint64_t *outs,
                       uint32_t nout) {
  Lmw__Launch m = LMW__LAUNCH__INIT;
  m.n_inputs = nin;
  m.inputs = (uint64_t *)in;
  m.n_outputs = nout;
  m.outputs = (uint64_t *)outs; /* (every RunDevice lists its own) */
  l->seq = ++c->next_seq;
  l->t0_ns = uv_hrtime();
  launch_dispatch(c, l, s, &m, outs);
}

/* ---- restored launches (ctl_journal.c) ---- */

c_launch *ctl_launch_restore(ctl *c, lm_session *s, c_program *prog, uint64_t seq, const uint64_t *in, size_t nin,
                             const uint64_t *out, size_t nout) {
  if (!prog->info || nin != prog->info->ninputs || nout != prog->info->noutputs) return NULL;
  c_launch *l = calloc(1, sizeof *l);
  if (!l) return NULL;
  l->outputs = calloc(nout + 1, sizeof *l->outputs);
  l->r_inputs = calloc(nin + 1, sizeof *l->r_inputs);
  if (!l->outputs || !l->r_inputs) {
    free(l->outputs), free(l->r_inputs), free(l);
    return NULL;
  }
  if (nout) memcpy(l->outputs, out, nout * sizeof *out);
  if (nin) memcpy(l->r_inputs, in, nin * sizeof *in);
  l->r_nin = (uint32_t)nin;
  l->nout = (uint32_t)nout;
  l->seq = seq;
  l->session = s->id;
  l->prog = prog;
  prog->refs++;
  l->t0_ns = uv_hrtime();
  /* listed (not hashed, no plan: nothing waits on a worker for it) until it is sent again */
  l->next = c->active;
  if (c->active) c->active->prev = l;
  c->active = l;
  return l;
}

void ctl_launch_resume(ctl *c, c_launch *l) {
  if (l->prev) l->prev->next = l->next; /* launch_dispatch lists it afresh */
  else c->active = l->next;
  if (l->next) l->next->prev = l->prev;
  l->prev = l->next = NULL;
  lm_session *s = ctl_session_find(c, l->session);
  if (!s) {
    l->next = c->active;
    if (c->active) c->active->prev = l;
    c->active = l;
    ctl_launch_abandon(c, l, LOOM_CANCELLED, "its session is gone");
    return;
  }
  Lmw__Launch m = LMW__LAUNCH__INIT;
  m.n_inputs = l->r_nin;
  m.inputs = l->r_inputs;
  m.n_outputs = l->nout;
  m.outputs = l->outputs;
  lm_info("launch %llu of session %llu sent again after the controller restart", (unsigned long long)l->seq,
          (unsigned long long)l->session);
  launch_dispatch(c, l, s, &m, NULL);
}

bool ctl_launch_again(peer *p, const lm_frame *f, const Lmw__Launch *m) {
  ctl *c = p->ctl;
  if (!p->resumed || !m->n_outputs) return false;
  c_array *a = lm_session_get(p->session, m->outputs[0], H_ARRAY);
  if (!a || !a->producer) return false;
  c_launch *l = find_launch(c, a->producer);
  if (!l) l = ctl_journal_held_launch(c, a->producer);
  if (l && !l->failed) { /* still running (or waiting for its workers): its reply goes to this request */
    l->client = p;
    l->rid = f->h.request_id;
    return true;
  }
  if (a->state == A_READY) {
    Lmw__LaunchReply r = LMW__LAUNCH_REPLY__INIT;
    r.seq = a->producer;
    ctl_send_reply(p, f->h.request_id, LM_MSG_LAUNCH_REPLY, &r.base);
  } else if (a->state == A_FAILED) {
    ctl_reply_error(p, f->h.request_id, a->code, "%s", a->msg ? a->msg : "the launch failed");
  } else {
    ctl_reply_error(p, f->h.request_id, LOOM_INTERNAL, "launch %llu (output array %llu) was lost in the controller "
                    "restart", (unsigned long long)a->producer, (unsigned long long)a->id);
  }
  return true;
}
