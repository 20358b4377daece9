/* The controller's journal (docs/durability.md): what must survive a restart is written as
 * records (journal.h, src/proto/journal.proto) as it changes, and read back at start:
 *   workers and the virtual device map, with their epochs and transfer keys;
 *   sessions (id, user, token hash, resume-secret hash), their arrays (shape, sharding, state,
 *   producer) and executables; programs by their text; launches not finished; counters.
 * After a restart every recorded worker is lost until it registers again as itself
 * (resume_worker: same id, epoch and devices, checked against the record); its shards never left
 * it. Client requests wait meanwhile (ctl_journal_defer); launches that were in flight are sent
 * again with their sequence numbers once their workers are back (a worker that ran one answers
 * from memory, so none runs twice). Restored sessions wait for their client to resume them (HELLO
 * with the session id and its resume secret); one not resumed in --resume-wait is closed.
 * Replies to clients are held until the records queued before them are committed. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "common/dtype.h"
#include "common/log.h"
#include "controller/ctl.h"
#include "controller/journal.h"
#include "journal.pb-c.h"

#define SEQ_BLOCK 4096     /* sequence numbers reserved per meta record */
#define EPOCH_BLOCK 64

typedef struct j_reply {   /* a reply held until the journal commits up to `after` */
  peer *p;
  uint64_t after, rid, t0_ns;
  unsigned type;
  bool urge;                 /* someone waits for it (not a lazy ACK) */
  const ProtobufCMessageDescriptor *desc;
  uint8_t *buf;
  size_t n;
  struct j_reply *next;
} j_reply;

typedef struct j_detached { /* a restored session no client has resumed yet */
  lm_session *s;
  char user[LM_TOKEN_USER_MAX + 1];
  uint8_t resume_hash[32];
  struct j_detached *next;
} j_detached;

typedef struct j_frame {   /* a client request kept while restored workers come back */
  peer *p;
  lm_frame f;
  struct j_frame *next;
} j_frame;

struct ctl_jr {
  lm_journal *j;
  uv_async_t async;          /* the writer committed: send held replies */
  bool async_open;
  uv_check_t check;          /* after each loop iteration: what it staged goes to the writer, whole */
  bool check_open;
  j_reply *rhead, *rtail;
  uint64_t rmax;             /* the largest `after` of the held replies */
  atomic_bool waiting;       /* replies someone waits for are held: the writer wakes the loop after a commit */
  uint32_t nurge;            /* how many (lazy ones go out at the loop's next iteration after their commit) */
  j_detached *detached;
  j_frame *dhead, *dtail;
  bool restoring;            /* recorded workers are not all back yet */
  uint64_t deadline_ms;      /* when restoring (and unresumed sessions) give up */
  uint64_t restored_ms;      /* when the restore happened (0: nothing restored) */
  c_launch **held;           /* restored launches waiting for their workers */
  size_t nheld;
  uint64_t *await_epoch;     /* [worker id] the recorded epoch of a restored worker, 0 once back */
  uint8_t *want;             /* [worker id] 1: it was alive at the crash (restoring waits for it) */
  uint32_t nawait;
  uint64_t seq_reserved, epoch_reserved;
  uint64_t *ended;           /* launches that ended well, whose records are deleted in a batch */
  size_t nended, ended_cap;
  uint64_t nreplies, nheld_replies, held_ns; /* replies sent; those held for a commit, and for how long */
};

#define ENDED_BATCH 256      /* ... once this many ended, or on the next health tick */

/* Records are written while the controller serves; a stopping one keeps them for the restart. */
static bool on(ctl *c) { return c && c->jr && c->jr->j && !c->stopping; }

/* ---- holding replies until their state is durable ---- */

static void send_now(peer *p, uint64_t rid, unsigned type, const ProtobufCMessage *m) {
  lm_err err;
  if (lm_conn_send(p->conn, type, rid, m, NULL, 0, NULL, NULL, &err) < 0 && lm_conn_is_open(p->conn))
    lm_warn("cannot reply to %s: %s", lm_conn_peer_name(p->conn), err.msg);
}

static void flush_replies(ctl *c) {
  struct ctl_jr *jr = c->jr;
  char prob[256];
  bool failing = lm_journal_problem(jr->j, prob, sizeof prob)[0] != 0;
  uint64_t done = lm_journal_committed(jr->j);
  while (jr->rhead && (jr->rhead->after <= done || failing || c->stopping)) {
    j_reply *r = jr->rhead;
    jr->rhead = r->next;
    if (!jr->rhead) jr->rtail = NULL;
    jr->held_ns += uv_hrtime() - r->t0_ns;
    if (r->urge) jr->nurge--;
    if (r->p && lm_conn_is_open(r->p->conn)) {
      ProtobufCMessage *m = protobuf_c_message_unpack(r->desc, NULL, r->n, r->buf);
      if (m) {
        send_now(r->p, r->rid, r->type, m);
        protobuf_c_message_free_unpacked(m, NULL);
      }
    }
    free(r->buf);
    free(r);
  }
  if (!jr->rhead) jr->rmax = 0;
  if (!jr->nurge) atomic_store(&jr->waiting, false);
}

static void on_async(uv_async_t *a) { flush_replies(a->data); }

static void on_check(uv_check_t *h) {
  ctl *c = h->data;
  struct ctl_jr *jr = c->jr;
  if (!jr || !jr->j) return;
  lm_journal_publish(jr->j);
  /* replies committed meanwhile go now (lazy ones spent no wake-up of the loop) */
  if (jr->rhead && lm_journal_committed(jr->j) >= jr->rhead->after) flush_replies(c);
}

static void notify(void *arg) {
  struct ctl_jr *jr = arg;
  if (atomic_load(&jr->waiting)) uv_async_send(&jr->async);
}

void ctl_send_reply(peer *p, uint64_t rid, unsigned type, const ProtobufCMessage *m) {
  ctl_send_reply_after(p, rid, type, m, UINT64_MAX);
}

/* Holds the reply until the journal committed operation `after`; urge: it is waited for (the
 * writer commits it at once), else (a reply nobody waits for) it goes with the next commit. */
static void reply_after(peer *p, uint64_t rid, unsigned type, const ProtobufCMessage *m, uint64_t after, bool urge) {
  ctl *c = p->ctl;
  struct ctl_jr *jr = c->jr;
  if (on(c) && after == UINT64_MAX) after = lm_journal_queued(jr->j);
  if (on(c)) jr->nreplies++;
  if (!on(c) || p->role != ROLE_CLIENT || (!jr->rhead && lm_journal_committed(jr->j) >= after)) {
    send_now(p, rid, type, m);
    return;
  }
  j_reply *r = calloc(1, sizeof *r);
  size_t n = protobuf_c_message_get_packed_size(m);
  uint8_t *buf = r ? malloc(n ? n : 1) : NULL;
  if (!r || !buf) { /* cannot hold it: send it (durability of this one reply is lost, not the reply) */
    free(r);
    send_now(p, rid, type, m);
    return;
  }
  protobuf_c_message_pack(m, buf);
  r->p = p, r->rid = rid, r->type = type, r->desc = m->descriptor, r->buf = buf, r->n = n, r->urge = urge;
  r->after = after;
  if (after > jr->rmax) jr->rmax = after;
  /* replies go in order: one that is waited for urges those before it */
  if (urge) lm_journal_want(jr->j, jr->rmax);
  r->t0_ns = uv_hrtime();
  jr->nheld_replies++;
  if (jr->rtail) jr->rtail->next = r;
  else jr->rhead = r;
  jr->rtail = r;
  if (!urge) return;
  jr->nurge++;
  atomic_store(&jr->waiting, true);
  if (lm_journal_committed(jr->j) >= jr->rmax) uv_async_send(&jr->async); /* committed meanwhile */
}

void ctl_send_reply_after(peer *p, uint64_t rid, unsigned type, const ProtobufCMessage *m, uint64_t after) {
  reply_after(p, rid, type, m, after, true);
}

void ctl_send_reply_lazy(peer *p, uint64_t rid, unsigned type, const ProtobufCMessage *m) {
  reply_after(p, rid, type, m, UINT64_MAX, false);
}

/* ---- records ---- */

static uint64_t put_msg(ctl *c, int ns, uint64_t k1, uint64_t k2, const ProtobufCMessage *m) {
  size_t n = protobuf_c_message_get_packed_size(m);
  uint8_t small[4096], *buf = n <= sizeof small ? small : malloc(n);
  if (!buf) {
    lm_error("journal: out of host memory writing a record (namespace %d): it is not written", ns);
    return 0;
  }
  protobuf_c_message_pack(m, buf);
  uint64_t no = lm_journal_put(c->jr->j, ns, k1, k2, buf, n);
  if (buf != small) free(buf);
  return no;
}

void ctl_j_meta(ctl *c) {
  if (!on(c)) return;
  struct ctl_jr *jr = c->jr;
  uint64_t epoch = lm_registry_epoch_floor(c->reg, 0);
  if (c->next_seq + SEQ_BLOCK / 2 > jr->seq_reserved) jr->seq_reserved = c->next_seq + SEQ_BLOCK;
  if (epoch + EPOCH_BLOCK / 2 > jr->epoch_reserved) jr->epoch_reserved = epoch + EPOCH_BLOCK;
  Lmj__Meta m = LMJ__META__INIT;
  m.next_session = c->next_session;
  m.next_program = c->next_program;
  m.seq_reserved = jr->seq_reserved;
  m.epoch_reserved = jr->epoch_reserved;
  m.dp_master.data = c->dp_master;
  m.dp_master.len = sizeof c->dp_master;
  put_msg(c, LM_J_META, 0, 0, &m.base);
}

/* Keeps the reservations ahead of the counters (a meta record per SEQ_BLOCK / 2 launches). */
static void meta_check(ctl *c) {
  struct ctl_jr *jr = c->jr;
  if (c->next_seq + SEQ_BLOCK / 4 > jr->seq_reserved || lm_registry_epoch_floor(c->reg, 0) + 8 > jr->epoch_reserved)
    ctl_j_meta(c);
}

void ctl_j_worker(ctl *c, uint32_t id) {
  if (!on(c)) return;
  const lm_reg_worker *w = lm_registry_worker(c->reg, id);
  if (!w) return;
  Lmj__Worker m = LMJ__WORKER__INIT;
  char *kinds[LM_REG_MAX_DEVICES_PER_WORKER];
  for (uint32_t i = 0; i < w->ndevices; i++) { /* a standby's devices have no virtual id yet */
    const lm_reg_device *d = w->device_ids[i] != LM_REG_NO_DEVICE ? lm_registry_device(c->reg, w->device_ids[i]) : NULL;
    kinds[i] = d ? (char *)d->kind : "cpu";
  }
  m.id = id;
  m.host = w->host;
  m.pid = w->pid;
  m.slice = w->slice;
  m.n_device_ids = w->ndevices;
  m.device_ids = w->device_ids;
  m.n_kinds = w->ndevices;
  m.kinds = kinds;
  m.n_capacities = w->ndevices;
  m.capacities = w->capacities;
  m.data_address = w->data_address;
  m.standby = w->standby;
  m.epoch = w->epoch;
  if (id < c->worker_peer_cap) {
    m.token_key.data = c->worker_key[id];
    m.token_key.len = LM_TOKEN_KEY_SIZE;
  }
  m.replaced_by = w->replaced_by;
  m.lost = w->state != LM_WORKER_ALIVE;
  m.reason = (char *)w->reason;
  put_msg(c, LM_J_WORKER, id, 0, &m.base);
  meta_check(c);
}

void ctl_j_array(ctl *c, uint64_t session, const c_array *a) {
  if (!on(c)) return;
  Lmw__Sharding sh;
  Lmw__DimAxes dims[LM_SHARD_MAX_RANK], *dptr[LM_SHARD_MAX_RANK];
  uint32_t axes[LM_SHARD_MAX_RANK * LM_MESH_MAX_AXES];
  uint64_t mesh[LM_MESH_MAX_AXES], d[LM_SHARD_MAX_RANK];
  ctl_sharding_to_wire(&a->sh, a->rank, &sh, dims, dptr, axes, mesh);
  Lmw__ArrayCreate ac = LMW__ARRAY_CREATE__INIT;
  ac.id = a->id;
  ac.dtype = (uint32_t)a->dtype;
  for (int i = 0; i < a->rank; i++) d[i] = (uint64_t)a->dims[i];
  ac.n_dims = (size_t)a->rank;
  ac.dims = d;
  ac.sharding = &sh;
  Lmj__Array m = LMJ__ARRAY__INIT;
  m.create = &ac;
  m.state = a->state;
  m.producer = a->producer;
  m.code = a->code;
  m.msg = a->msg ? a->msg : "";
  put_msg(c, LM_J_ARRAY, session, a->id, &m.base);
}

void ctl_j_array_del(ctl *c, uint64_t session, uint64_t id) {
  if (on(c)) lm_journal_del_lazy(c->jr->j, LM_J_ARRAY, session, id); /* its ACK is lazy too */
}

void ctl_j_program(ctl *c, const c_program *p) {
  if (!on(c)) return;
  Lmj__Program m = LMJ__PROGRAM__INIT;
  m.id = p->id;
  m.name = p->name;
  m.text.data = (uint8_t *)p->text;
  m.text.len = p->len;
  m.n_asked = p->nasked;
  m.asked = p->asked;
  m.default_devices = p->default_devices;
  m.asked_prefix = p->asked_prefix;
  m.fingerprint = p->fingerprint;
  put_msg(c, LM_J_PROGRAM, p->id, 0, &m.base);
}

void ctl_j_program_del(ctl *c, uint64_t id) {
  if (on(c)) lm_journal_del(c->jr->j, LM_J_PROGRAM, id, 0);
}

void ctl_j_exe(ctl *c, uint64_t session, uint64_t id, uint64_t program) {
  if (!on(c)) return;
  Lmj__Executable m = LMJ__EXECUTABLE__INIT;
  m.program = program;
  put_msg(c, LM_J_EXECUTABLE, session, id, &m.base);
}

void ctl_j_exe_del(ctl *c, uint64_t session, uint64_t id) {
  if (on(c)) lm_journal_del(c->jr->j, LM_J_EXECUTABLE, session, id);
}

void ctl_j_launch(ctl *c, const c_launch *l, const Lmw__Launch *m) {
  if (!on(c)) return;
  Lmj__Launch r = LMJ__LAUNCH__INIT;
  r.seq = l->seq;
  r.session = l->session;
  r.program = l->prog->id;
  r.n_inputs = m->n_inputs;
  r.inputs = m->inputs;
  r.n_outputs = m->n_outputs;
  r.outputs = m->outputs;
  ((c_launch *)l)->jno = put_msg(c, LM_J_LAUNCH, l->seq, 0, &r.base);
  meta_check(c);
}

/* The records of launches that ended well go in one batch (a record left behind by a crash only
 * makes the restarted controller send that launch again, which its workers answer from memory). */
static void flush_ended(ctl *c) {
  struct ctl_jr *jr = c->jr;
  for (size_t i = 0; i < jr->nended; i++) lm_journal_del_lazy(jr->j, LM_J_LAUNCH, jr->ended[i], 0);
  jr->nended = 0;
}

void ctl_j_launch_end(ctl *c, const c_launch *l) {
  if (!on(c)) return;
  struct ctl_jr *jr = c->jr;
  if (!l->failed) {
    if (jr->nended == jr->ended_cap) {
      size_t cap = jr->ended_cap ? jr->ended_cap * 2 : ENDED_BATCH;
      uint64_t *e = realloc(jr->ended, cap * sizeof *e);
      if (!e) {
        lm_journal_del(jr->j, LM_J_LAUNCH, l->seq, 0);
        return;
      }
      jr->ended = e, jr->ended_cap = cap;
    }
    jr->ended[jr->nended++] = l->seq;
    if (jr->nended >= ENDED_BATCH) flush_ended(c);
    return;
  }
  if (l->failed) { /* its outputs failed: say so (a finished launch's pending outputs read as ready) */
    lm_session *s = ctl_session_find(c, l->session);
    for (uint32_t j = 0; s && j < l->nout; j++) {
      c_array *a = lm_session_get(s, l->outputs[j], H_ARRAY);
      if (a && a->producer == l->seq) ctl_j_array(c, l->session, a);
    }
  }
  lm_journal_del(c->jr->j, LM_J_LAUNCH, l->seq, 0);
}

void ctl_j_launch_del(ctl *c, uint64_t seq) {
  if (on(c)) lm_journal_del(c->jr->j, LM_J_LAUNCH, seq, 0);
}

void ctl_j_usage(ctl *c, uint64_t session, const char *user, const char *name, const char *priority,
                 uint64_t opened_unix_ms, uint64_t closed_unix_ms, uint32_t asked, const Lmw__PoolUsage *u,
                 const ctl_j_pool *jp) {
  if (!on(c)) return;
  Lmj__Usage m = LMJ__USAGE__INIT;
  m.session = session;
  m.user = (char *)user;
  m.name = (char *)name;
  m.priority = (char *)priority;
  m.opened_unix_ms = opened_unix_ms;
  m.closed_unix_ms = closed_unix_ms;
  m.usage = (Lmw__PoolUsage *)u;
  m.devices_asked = asked;
  if (jp && jp->ndev) {
    m.n_device_ids = jp->ndev;
    m.device_ids = (uint32_t *)jp->devs;
    m.share_weight = jp->weight;
    m.suspended = jp->suspended;
    m.launch_limit_ms = jp->launch_limit_ms;
  }
  put_msg(c, LM_J_USAGE, session, 0, &m.base);
}

void ctl_j_usage_del(ctl *c, uint64_t session) {
  if (on(c)) lm_journal_del(c->jr->j, LM_J_USAGE, session, 0);
}

/* ---- sessions ---- */

lm_session *ctl_session_find(ctl *c, uint64_t id) {
  for (peer *p = c->peers; p; p = p->next)
    if (p->role == ROLE_CLIENT && p->session && p->session->id == id) return p->session;
  if (c->jr)
    for (j_detached *d = c->jr->detached; d; d = d->next)
      if (d->s->id == id) return d->s;
  return NULL;
}

bool ctl_journal_session_opened(peer *p, const Lmw__Hello *h, uint8_t secret[32]) {
  ctl *c = p->ctl;
  if (!on(c)) return false;
  lm_err err;
  if (lm_auth_random(secret, 32, &err) < 0) {
    lm_warn("session %llu: %s; it cannot be resumed after a restart", (unsigned long long)p->session->id, err.msg);
    return false;
  }
  uint8_t th[32], rh[32];
  lm_sha256(secret, 32, rh);
  Lmj__Session m = LMJ__SESSION__INIT;
  m.id = p->session->id;
  m.user = p->user;
  m.name = p->session->name;
  if (h->auth_token.len) {
    lm_sha256(h->auth_token.data, h->auth_token.len, th);
    m.token_hash.data = th;
    m.token_hash.len = sizeof th;
  }
  m.resume_hash.data = rh;
  m.resume_hash.len = sizeof rh;
  m.opened_unix_ms = (uint64_t)time(NULL) * 1000;
  put_msg(c, LM_J_SESSION, m.id, 0, &m.base);
  ctl_j_meta(c);
  return true;
}

void ctl_journal_session_closed(ctl *c, uint64_t id) {
  if (!on(c) || c->stopping) return; /* a stopping controller keeps its sessions for the restart */
  lm_journal_del(c->jr->j, LM_J_SESSION, id, 0);
  lm_journal_del(c->jr->j, LM_J_ARRAY, id, UINT64_MAX);
  lm_journal_del(c->jr->j, LM_J_EXECUTABLE, id, UINT64_MAX);
}

int ctl_journal_resume_session(peer *p, const Lmw__Hello *h, lm_session **out, lm_err *err) {
  ctl *c = p->ctl;
  *out = NULL;
  if (!on(c))
    return lm_errf(err, LOOM_NOT_FOUND, "cannot resume session %llu: this controller keeps no journal (--state), so "
                   "nothing survived its restart", (unsigned long long)h->resume_session);
  j_detached **pp = &c->jr->detached;
  for (; *pp && (*pp)->s->id != h->resume_session; pp = &(*pp)->next) {}
  j_detached *d = *pp;
  if (!d)
    return lm_errf(err, LOOM_NOT_FOUND, "cannot resume session %llu: %s", (unsigned long long)h->resume_session,
                   ctl_session_find(c, h->resume_session) ? "another connection has it"
                                                          : "the journal has no such session (closed, or not "
                                                            "resumed within --resume-wait after the restart)");
  uint8_t rh[32];
  lm_sha256(h->resume_secret.data, h->resume_secret.len, rh);
  if (h->resume_secret.len != 32 || !lm_auth_equal(rh, d->resume_hash, 32))
    return lm_errf(err, LOOM_PERMISSION, "cannot resume session %llu: wrong resume secret",
                   (unsigned long long)h->resume_session);
  if (strcmp(d->user, p->user))
    return lm_errf(err, LOOM_PERMISSION, "cannot resume session %llu: it belongs to user '%s', the token names '%s'",
                   (unsigned long long)h->resume_session, d->user, p->user);
  int prc = ctl_pool_resume_check(c, h->resume_session, h->pool_devices, err);
  if (prc < 0) return prc;
  *pp = d->next;
  *out = d->s;
  free(d);
  p->resumed = true;
  return 0;
}

/* A restored session nobody resumed: closed like a client that went away. */
static void close_detached(ctl *c, j_detached *d) {
  lm_info("restored session %llu (%s) was not resumed within %u ms: closing it", (unsigned long long)d->s->id,
          d->s->name, c->cfg.resume_wait_ms);
  for (size_t i = 0; i < c->jr->nheld; i++) /* its launches are dropped with it */
    if (c->jr->held[i] && c->jr->held[i]->session == d->s->id) {
      c_launch *l = c->jr->held[i];
      c->jr->held[i] = NULL;
      ctl_launch_abandon(c, l, LOOM_CANCELLED, "its session was not resumed after the controller restart");
    }
  Lmw__SessionClosed sc = LMW__SESSION_CLOSED__INIT;
  sc.session = d->s->id;
  for (uint32_t i = 0; i < c->worker_peer_cap; i++)
    if (c->worker_peer[i] && lm_session_touched(d->s, i))
      ctl_worker_send(c, i, LM_MSG_SESSION_CLOSED, 0, &sc.base, NULL, 0, NULL);
  ctl_journal_session_closed(c, d->s->id);
  ctl_pool_detached_closed(c, d->s->id); /* a pool session's devices kept for it are free again */
  lm_session_destroy(d->s);
  free(d);
}

bool ctl_journal_detached(ctl *c, uint64_t session) {
  if (!on(c)) return false;
  for (const j_detached *d = c->jr->detached; d; d = d->next)
    if (d->s->id == session) return true;
  return false;
}

/* ---- workers ---- */

static bool worker_back(ctl *c, uint32_t id) {
  const lm_reg_worker *w = lm_registry_worker(c->reg, id);
  return w && w->state == LM_WORKER_ALIVE && w->dataplane_len && id < c->worker_peer_cap && c->worker_peer[id];
}

void ctl_journal_resume_worker(peer *p, const lm_frame *f, const Lmw__RegisterWorker *m) {
  ctl *c = p->ctl;
  struct ctl_jr *jr = c->jr;
  uint32_t id = m->resume_worker - 1;
  const lm_reg_worker *w = lm_registry_worker(c->reg, id);
  char why[256] = "";
  if (!on(c)) snprintf(why, sizeof why, "this controller keeps no journal (--state)");
  else if (!w || id >= jr->nawait || !jr->await_epoch[id])
    snprintf(why, sizeof why, "its journal has no worker %u waiting to come back", id);
  else if (jr->await_epoch[id] != m->resume_epoch)
    snprintf(why, sizeof why, "worker %u had epoch %llu, not %llu", id, (unsigned long long)jr->await_epoch[id],
             (unsigned long long)m->resume_epoch);
  else if (w->ndevices != m->n_devices || strcmp(w->host, m->host) || strcmp(w->slice, m->slice) ||
           w->standby != m->standby)
    snprintf(why, sizeof why, "worker %u was %s slice %s with %u devices%s, not %s slice %s with %zu", id, w->host,
             w->slice, w->ndevices, w->standby ? " (standby)" : "", m->host, m->slice, m->n_devices);
  lm_err err;
  if (!why[0] && lm_registry_revive(c->reg, id, m->pid, m->data_address, ctl_now_ms(c), &err) < 0)
    snprintf(why, sizeof why, "%.200s", err.msg);
  if (why[0]) { /* it drops its state and registers as a new worker (like a fenced one) */
    lm_warn("refused worker %s (host %s pid %u) resuming as worker %u: %s", lm_conn_peer_name(p->conn), m->host, m->pid,
            id, why);
    lm_conn_close_with_error(p->conn, f->h.request_id, LOOM_WORKER_LOST,
                             "cannot resume as worker %u: %s; drop the old state and register anew", id, why);
    return;
  }
  jr->await_epoch[id] = 0;
  p->registered = true;
  p->worker_id = id;
  c->worker_peer[id] = p;
  c->lost_at[id] = 0;
  lm_conn_set_established(p->conn);
  Lmw__RegisterWorkerReply r = LMW__REGISTER_WORKER_REPLY__INIT;
  r.worker_id = id;
  r.n_device_ids = w->standby ? 0 : w->ndevices;
  r.device_ids = w->device_ids;
  r.heartbeat_interval_ms = c->cfg.heartbeat_interval_ms;
  r.epoch = w->epoch;
  r.standby = w->standby;
  r.durable = true;
  r.resumed = true;
  if (!c->have_secret) { /* the recorded key: tokens clients hold stay good */
    r.token_key.data = c->worker_key[id];
    r.token_key.len = LM_TOKEN_KEY_SIZE;
  }
  ctl_reply(p, f, LM_MSG_REGISTER_WORKER_REPLY, &r.base);
  p->cseq = m->resume_cseq; /* the worker goes on counting: gets waiting on min_cseq still match */
  ctl_j_worker(c, id);
  /* launches it runs that the journal does not have (sent before their record was committed):
   * nobody will ever wait for them, and one in a collective would hold its devices forever */
  for (size_t i = 0; i < m->n_active_seqs; i++) {
    uint64_t seq = m->active_seqs[i];
    bool known = ctl_journal_held_launch(c, seq) != NULL;
    for (c_launch *l = c->active; l && !known; l = l->next) known = l->seq == seq;
    if (known) continue;
    Lmw__AbortLaunch ab = LMW__ABORT_LAUNCH__INIT;
    ab.seq = seq;
    ab.reason = "the controller restarted and its journal has no record of this launch (the client sends it again)";
    ctl_worker_send(c, id, LM_MSG_ABORT_LAUNCH, 0, &ab.base, NULL, 0, NULL);
    lm_info("worker %u: aborted launch %llu, which the journal does not have", id, (unsigned long long)seq);
  }
  lm_info("worker %u resumed from %s (host %s pid %u, epoch %llu) after the controller restart: it kept its shards",
          id, lm_conn_peer_name(p->conn), w->host, w->pid, (unsigned long long)w->epoch);
}

/* ---- deferring client requests while workers come back ---- */

bool ctl_journal_defer(ctl *c, peer *p, const lm_frame *f) {
  if (!on(c) || !c->jr->restoring || p->role != ROLE_CLIENT) return false;
  switch (f->h.type) {
  case LM_MSG_ARRAY_CREATE: case LM_MSG_ARRAY_LOCATE: case LM_MSG_ARRAY_DELETE: case LM_MSG_COMPILE:
  case LM_MSG_EXECUTABLE_DESTROY: case LM_MSG_LAUNCH: case LM_MSG_CANCEL_LAUNCH: break;
  default: return false;
  }
  j_frame *fr = calloc(1, sizeof *fr);
  if (!fr) return false;
  fr->p = p;
  fr->f.h = f->h;
  fr->f.meta = malloc(f->h.meta_len + 1);
  fr->f.payload = f->h.payload_len ? malloc((size_t)f->h.payload_len) : NULL;
  if (!fr->f.meta || (f->h.payload_len && !fr->f.payload)) {
    free(fr->f.meta), free(fr->f.payload), free(fr);
    return false;
  }
  if (f->h.meta_len) memcpy(fr->f.meta, f->meta, f->h.meta_len);
  fr->f.meta[f->h.meta_len] = 0;
  if (f->h.payload_len) memcpy(fr->f.payload, f->payload, (size_t)f->h.payload_len);
  if (c->jr->dtail) c->jr->dtail->next = fr;
  else c->jr->dhead = fr;
  c->jr->dtail = fr;
  return true;
}

void ctl_journal_client_gone(ctl *c, peer *p) {
  if (!c->jr) return;
  for (j_reply *r = c->jr->rhead; r; r = r->next)
    if (r->p == p) r->p = NULL;
  for (j_frame *fr = c->jr->dhead; fr; fr = fr->next)
    if (fr->p == p) fr->p = NULL;
}

c_launch *ctl_journal_held_launch(ctl *c, uint64_t seq) {
  if (!c->jr) return NULL;
  for (size_t i = 0; i < c->jr->nheld; i++)
    if (c->jr->held[i] && c->jr->held[i]->seq == seq) return c->jr->held[i];
  return NULL;
}

/* Restored launches whose workers are all back go out; once every recorded worker is back (or the
 * wait is over) the requests kept meanwhile are served, in order. */
static void restore_progress(ctl *c) {
  struct ctl_jr *jr = c->jr;
  bool timeout = ctl_now_ms(c) >= jr->deadline_ms;
  for (size_t i = 0; i < jr->nheld; i++) {
    c_launch *l = jr->held[i];
    if (!l) continue;
    bool ready = true;
    for (uint32_t k = 0; ready && l->prog->plan && k < l->prog->plan->nworkers; k++)
      ready = worker_back(c, l->prog->plan->workers[k]);
    if (!ready && !timeout) continue;
    jr->held[i] = NULL;
    if (ready) ctl_launch_resume(c, l);
    else ctl_launch_abandon(c, l, LOOM_WORKER_LOST, "a worker it ran on did not come back after the controller "
                            "restart (--resume-wait)");
  }
  size_t left = 0;
  for (size_t i = 0; i < jr->nheld; i++) left += jr->held[i] != NULL;
  if (!left) jr->nheld = 0;
  if (!jr->restoring) return;
  bool all = true;
  for (uint32_t i = 0; all && i < jr->nawait; i++) {
    const lm_reg_worker *w = lm_registry_worker(c->reg, i);
    if (jr->want[i] && !w->standby && !w->replaced_by && !worker_back(c, i)) all = false;
  }
  if (!all && !timeout) return;
  if (timeout && !all)
    for (uint32_t i = 0; i < jr->nawait; i++)
      if (jr->await_epoch[i]) {
        lm_warn("worker %u did not come back within %u ms of the controller restart: it stays lost", i,
                c->cfg.resume_wait_ms);
        lm_registry_note_lost(c->reg, i, "did not come back after the controller restart");
        c->lost_at[i] = ctl_now_ms(c);
        jr->await_epoch[i] = 0;
      }
  jr->restoring = false;
  lm_info("restore complete: %s%llu ms after the restart", all ? "every worker is back, " : "",
          (unsigned long long)(ctl_now_ms(c) - jr->restored_ms));
  j_frame *fr = jr->dhead;
  jr->dhead = jr->dtail = NULL;
  while (fr) {
    j_frame *n = fr->next;
    if (fr->p) ctl_dispatch(fr->p, &fr->f);
    free(fr->f.meta), free(fr->f.payload), free(fr);
    fr = n;
  }
}

const char *ctl_journal_state(ctl *c, char *buf, size_t cap) {
  if (!c->jr || !c->jr->j) return "";
  struct ctl_jr *jr = c->jr;
  char prob[512];
  lm_journal_problem(jr->j, prob, sizeof prob);
  uint32_t waiting = 0, sessions = 0;
  for (uint32_t i = 0; i < jr->nawait; i++) waiting += jr->await_epoch[i] != 0;
  for (j_detached *d = jr->detached; d; d = d->next) sessions++;
  size_t n = (size_t)snprintf(buf, cap, "%s", lm_journal_path(jr->j));
  if (prob[0]) n += (size_t)snprintf(buf + (n < cap ? n : cap), n < cap ? cap - n : 0, " (%s)", prob);
  else if (jr->restoring)
    n += (size_t)snprintf(buf + (n < cap ? n : cap), n < cap ? cap - n : 0,
                          " (restoring: %u workers and %u sessions not back yet)", waiting, sessions);
  else if (sessions)
    n += (size_t)snprintf(buf + (n < cap ? n : cap), n < cap ? cap - n : 0,
                          " (ok; %u restored sessions not resumed yet)", sessions);
  else
    snprintf(buf + (n < cap ? n : cap), n < cap ? cap - n : 0, " (ok)");
  return buf;
}

void ctl_journal_progress(ctl *c) {
  if (on(c) && (c->jr->restoring || c->jr->nheld)) restore_progress(c);
}

void ctl_journal_tick(ctl *c) {
  if (!on(c)) return;
  struct ctl_jr *jr = c->jr;
  if (jr->restoring || jr->nheld) restore_progress(c);
  if (jr->detached && ctl_now_ms(c) >= jr->deadline_ms && !jr->restoring) {
    while (jr->detached) {
      j_detached *d = jr->detached;
      jr->detached = d->next;
      close_detached(c, d);
    }
  }
  if (jr->rhead) flush_replies(c); /* a failing journal still lets replies through */
  if (jr->nended) flush_ended(c);
  ctl_pool_journal(c);
  lm_journal_kick(jr->j); /* lazy operations wait a tick at most */
}

/* ---- restoring ---- */

typedef struct j_load {
  ctl *c;
  Lmj__Meta *meta;
  Lmj__Worker **workers; size_t nworkers;
  Lmj__Session **sessions; size_t nsessions;
  Lmj__Array **arrays; uint64_t *array_session; size_t narrays;
  Lmj__Program **programs; size_t nprograms;
  Lmj__Executable **exes; uint64_t *exe_session, *exe_id; size_t nexes;
  Lmj__Launch **launches; size_t nlaunches;
} j_load;

static int push(void ***v, size_t *n, void *x) {
  void **q = realloc(*v, (*n + 1) * sizeof *q);
  if (!q) return -1;
  q[(*n)++] = x;
  *v = q;
  return 0;
}

static int push_u64(uint64_t **v, size_t n, uint64_t x) {
  uint64_t *q = realloc(*v, (n + 1) * sizeof *q);
  if (!q) return -1;
  q[n] = x;
  *v = q;
  return 0;
}

static int load_one(void *arg, int ns, uint64_t k1, uint64_t k2, const void *v, size_t n, lm_err *err) {
  j_load *L = arg;
  const ProtobufCMessageDescriptor *d = ns == LM_J_META ? &lmj__meta__descriptor
                                        : ns == LM_J_WORKER ? &lmj__worker__descriptor
                                        : ns == LM_J_SESSION ? &lmj__session__descriptor
                                        : ns == LM_J_ARRAY ? &lmj__array__descriptor
                                        : ns == LM_J_PROGRAM ? &lmj__program__descriptor
                                        : ns == LM_J_EXECUTABLE ? &lmj__executable__descriptor
                                        : ns == LM_J_LAUNCH ? &lmj__launch__descriptor
                                        : ns == LM_J_USAGE ? &lmj__usage__descriptor : NULL;
  if (!d) return 0; /* a newer controller's record: not ours to read */
  ProtobufCMessage *m = protobuf_c_message_unpack(d, NULL, n, v);
  if (!m)
    return lm_errf(err, LOOM_IO, "journal %s: record (%d, %llu, %llu) cannot be decoded: refusing to start rather "
                   "than serve state it cannot trust", lm_journal_path(L->c->jr->j), ns, (unsigned long long)k1,
                   (unsigned long long)k2);
  int rc = 0;
  switch (ns) {
  case LM_J_META: if (L->meta) protobuf_c_message_free_unpacked(&L->meta->base, NULL); L->meta = (Lmj__Meta *)m; break;
  case LM_J_WORKER: rc = push((void ***)&L->workers, &L->nworkers, m); break;
  case LM_J_SESSION: rc = push((void ***)&L->sessions, &L->nsessions, m); break;
  case LM_J_ARRAY:
    rc = push_u64(&L->array_session, L->narrays, k1);
    if (rc == 0) rc = push((void ***)&L->arrays, &L->narrays, m);
    break;
  case LM_J_PROGRAM: rc = push((void ***)&L->programs, &L->nprograms, m); break;
  case LM_J_EXECUTABLE:
    rc = push_u64(&L->exe_session, L->nexes, k1);
    if (rc == 0) rc = push_u64(&L->exe_id, L->nexes, k2);
    if (rc == 0) rc = push((void ***)&L->exes, &L->nexes, m);
    break;
  case LM_J_LAUNCH: rc = push((void ***)&L->launches, &L->nlaunches, m); break;
  case LM_J_USAGE: {
    const Lmj__Usage *u = (const Lmj__Usage *)m;
    ctl_j_pool jp = {.devs = u->device_ids, .ndev = (uint32_t)u->n_device_ids, .weight = u->share_weight,
                     .launch_limit_ms = u->launch_limit_ms, .suspended = u->suspended};
    ctl_pool_restore_usage(L->c, u->session, u->user, u->name, u->priority, u->opened_unix_ms, u->closed_unix_ms,
                           u->devices_asked, u->usage, &jp);
    protobuf_c_message_free_unpacked(m, NULL);
    break;
  }
  default: protobuf_c_message_free_unpacked(m, NULL); break;
  }
  if (rc < 0) {
    protobuf_c_message_free_unpacked(m, NULL);
    return lm_errf(err, LOOM_NO_MEMORY, "out of host memory reading the journal");
  }
  return 0;
}

static void load_free(j_load *L) {
#define FREE_ALL(v, n)                                                              \
  do {                                                                              \
    for (size_t i_ = 0; i_ < (n); i_++) protobuf_c_message_free_unpacked(&(v)[i_]->base, NULL); \
    free(v);                                                                        \
  } while (0)
  if (L->meta) protobuf_c_message_free_unpacked(&L->meta->base, NULL);
  FREE_ALL(L->workers, L->nworkers);
  FREE_ALL(L->sessions, L->nsessions);
  FREE_ALL(L->arrays, L->narrays);
  FREE_ALL(L->programs, L->nprograms);
  FREE_ALL(L->exes, L->nexes);
  FREE_ALL(L->launches, L->nlaunches);
  free(L->array_session), free(L->exe_session), free(L->exe_id);
#undef FREE_ALL
}

static j_detached *find_detached(ctl *c, uint64_t id) {
  for (j_detached *d = c->jr->detached; d; d = d->next)
    if (d->s->id == id) return d;
  return NULL;
}

/* An array from its record (devices as recorded; their workers come back later). */
static int restore_array(ctl *c, lm_session *s, const Lmj__Array *ja, bool pending, lm_err *err) {
  const Lmw__ArrayCreate *m = ja->create;
  if (!m || !m->sharding || m->n_dims > LM_SHARD_MAX_RANK || !lm_dtype_valid((int)m->dtype))
    return lm_errf(err, LOOM_IO, "array record of session %llu is invalid", (unsigned long long)s->id);
  c_array *a = calloc(1, sizeof *a);
  if (!a) return lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  a->id = m->id;
  a->dtype = (lm_dtype)m->dtype;
  a->rank = (int)m->n_dims;
  for (int d = 0; d < a->rank; d++) a->dims[d] = (int64_t)m->dims[d];
  lm_err e;
  int rc = ctl_sharding_read(m->sharding, a->rank, a->dims, &a->sh, &a->devs, 0, &e);
  if (rc < 0) {
    free(a);
    return lm_errf(err, rc == LOOM_NO_MEMORY ? rc : LOOM_IO, "array record of session %llu is invalid: %s",
                   (unsigned long long)s->id, e.msg);
  }
  uint32_t *devs = a->devs, ndevs = lm_registry_device_count(c->reg);
  for (uint32_t i = 0; rc == 0 && i < a->sh.ndev; i++)
    if (devs[i] >= ndevs) rc = lm_errf(err, LOOM_IO, "array %llu names device %u, which the journal does not have",
                                       (unsigned long long)a->id, devs[i]);
  if (rc < 0) {
    ctl_array_destroy(a);
    return rc;
  }
  a->state = ja->state == A_FAILED ? A_FAILED : pending ? A_PENDING : A_READY;
  a->code = ja->code;
  a->msg = ja->msg && ja->msg[0] ? strdup(ja->msg) : NULL;
  a->producer = ja->producer;
  a->held = ctl_hold(c, devs, a->nheld = a->sh.ndev);
  for (uint32_t i = 0; i < a->sh.ndev; i++) lm_session_touch(s, lm_registry_device(c->reg, devs[i])->worker);
  if (lm_session_add_id(s, a->id, H_ARRAY, a, ctl_array_destroy, err) < 0) {
    ctl_array_destroy(a);
    return -1;
  }
  return 0;
}

static int restore(ctl *c, j_load *L, lm_err *err) {
  struct ctl_jr *jr = c->jr;
  int rc = 0;
  if (L->meta) {
    c->next_session = L->meta->next_session;
    if (L->meta->next_program > c->next_program) c->next_program = L->meta->next_program;
    c->next_seq = L->meta->seq_reserved; /* numbers below may have gone out before the crash */
    jr->seq_reserved = L->meta->seq_reserved;
    lm_registry_epoch_floor(c->reg, L->meta->epoch_reserved);
    jr->epoch_reserved = L->meta->epoch_reserved;
    if (L->meta->dp_master.len == sizeof c->dp_master) /* pair keys the workers hold stay the same */
      memcpy(c->dp_master, L->meta->dp_master.data, sizeof c->dp_master);
  }
  jr->nawait = (uint32_t)L->nworkers;
  jr->await_epoch = calloc(L->nworkers ? L->nworkers : 1, sizeof *jr->await_epoch);
  jr->want = calloc(L->nworkers ? L->nworkers : 1, 1);
  if (!jr->await_epoch || !jr->want) return lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  for (size_t i = 0; rc == 0 && i < L->nworkers; i++) {
    const Lmj__Worker *w = L->workers[i];
    if (w->n_device_ids != w->n_capacities || w->n_kinds != w->n_device_ids) {
      rc = lm_errf(err, LOOM_IO, "journal %s: worker %u's record is invalid", lm_journal_path(jr->j), w->id);
      break;
    }
    lm_worker_spec spec = {.host = w->host, .pid = w->pid, .slice = w->slice, .ndevices = (uint32_t)w->n_device_ids,
                           .kinds = (const char *const *)w->kinds, .capacities = w->capacities,
                           .data_address = w->data_address, .standby = w->standby};
    const char *why = w->lost && !w->replaced_by ? w->reason : "waiting to reconnect after the controller restart";
    if (w->lost && w->replaced_by) why = w->reason;
    rc = lm_registry_restore_worker(c->reg, w->id, &spec, w->device_ids, w->epoch, w->replaced_by, why, err);
    if (rc == 0 && ctl_worker_slot(c, w->id) < 0) rc = lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
    if (rc == 0 && w->token_key.len == LM_TOKEN_KEY_SIZE) memcpy(c->worker_key[w->id], w->token_key.data, LM_TOKEN_KEY_SIZE);
    /* a worker lost before the restart stays lost; the others may come back as themselves */
    if (rc == 0 && !w->lost) jr->await_epoch[w->id] = w->epoch, jr->want[w->id] = 1;
    if (rc == 0 && w->lost) c->lost_at[w->id] = ctl_now_ms(c);
  }
  if (rc < 0) return rc;
  for (size_t i = 0; i < L->nprograms; i++) {
    lm_err perr;
    c_program *p = ctl_program_restore(c, L->programs[i], &perr);
    if (!p) lm_warn("program %llu (%s) from the journal is not restored: %s", (unsigned long long)L->programs[i]->id,
                    L->programs[i]->name, perr.msg);
  }
  for (size_t i = 0; i < L->nsessions; i++) {
    const Lmj__Session *js = L->sessions[i];
    j_detached *d = calloc(1, sizeof *d);
    lm_session *s = d ? lm_session_create(js->id, js->name, "restored", ctl_now_ms(c)) : NULL;
    if (!s) {
      free(d);
      return lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
    }
    d->s = s;
    snprintf(d->user, sizeof d->user, "%s", js->user);
    if (js->resume_hash.len == 32) memcpy(d->resume_hash, js->resume_hash.data, 32);
    d->next = jr->detached;
    jr->detached = d;
    if (js->id > c->next_session) c->next_session = js->id;
  }
  for (size_t i = 0; i < L->nexes; i++) {
    j_detached *d = find_detached(c, L->exe_session[i]);
    c_program *p = ctl_program_find(c, L->exes[i]->program);
    lm_err e2;
    if (!d || !p || ctl_exe_restore(c, d->s, L->exe_id[i], p, &e2) < 0)
      lm_warn("executable %llu of session %llu is not restored (%s)", (unsigned long long)L->exe_id[i],
              (unsigned long long)L->exe_session[i], !d ? "no session" : !p ? "its program is not restored" : e2.msg);
  }
  for (size_t i = 0; i < L->narrays; i++) {
    j_detached *d = find_detached(c, L->array_session[i]);
    if (!d) continue;
    bool pending = false;
    for (size_t k = 0; k < L->nlaunches && L->arrays[i]->producer; k++)
      pending = pending || L->launches[k]->seq == L->arrays[i]->producer;
    lm_err e2;
    if (restore_array(c, d->s, L->arrays[i], pending, &e2) < 0)
      lm_warn("array %llu of session %llu is not restored: %s",
              (unsigned long long)(L->arrays[i]->create ? L->arrays[i]->create->id : 0),
              (unsigned long long)L->array_session[i], e2.msg);
  }
  jr->held = calloc(L->nlaunches ? L->nlaunches : 1, sizeof *jr->held);
  if (!jr->held) return lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  for (size_t i = 0; i < L->nlaunches; i++) {
    const Lmj__Launch *jl = L->launches[i];
    j_detached *d = find_detached(c, jl->session);
    c_program *p = ctl_program_find(c, jl->program);
    c_launch *l = d && p ? ctl_launch_restore(c, d->s, p, jl->seq, jl->inputs, jl->n_inputs, jl->outputs,
                                              jl->n_outputs) : NULL;
    if (l) jr->held[jr->nheld++] = l;
    else lm_warn("launch %llu from the journal cannot be restored (%s)", (unsigned long long)jl->seq,
                 !d ? "no session" : !p ? "no program" : "out of memory");
  }
  return 0;
}

int ctl_journal_start(ctl *c, lm_err *err) {
  if (!c->cfg.state_dir) return 0;
  if (!c->cfg.resume_wait_ms) c->cfg.resume_wait_ms = 60000;
  struct ctl_jr *jr = calloc(1, sizeof *jr);
  if (!jr) return lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  c->jr = jr;
  uv_async_init(&c->loop, &jr->async, on_async);
  jr->async.data = c;
  jr->async_open = true;
  uv_check_init(&c->loop, &jr->check);
  jr->check.data = c;
  uv_check_start(&jr->check, on_check);
  jr->check_open = true;
  int rc = lm_journal_open(c->cfg.state_dir, notify, jr, &jr->j, err);
  j_load L = {.c = c};
  if (rc == 0) rc = lm_journal_load(jr->j, load_one, &L, err);
  bool any = L.meta || L.nworkers || L.nsessions;
  if (rc == 0) rc = restore(c, &L, err);
  size_t nw = L.nworkers, ns = L.nsessions, na = L.narrays, np = L.nprograms, nl = L.nlaunches;
  load_free(&L);
  if (rc < 0) return rc; /* ctl_journal_free cleans up */
  jr->restored_ms = ctl_now_ms(c);
  jr->deadline_ms = jr->restored_ms + c->cfg.resume_wait_ms;
  for (uint32_t i = 0; i < jr->nawait; i++) jr->restoring = jr->restoring || jr->await_epoch[i];
  ctl_j_meta(c); /* the new reservations, and the data-plane key of a new journal */
  if (any)
    lm_info("journal %s: restored %zu workers, %zu sessions, %zu arrays, %zu programs, %zu launches in flight; "
            "waiting up to %u ms for workers and clients to come back", lm_journal_path(jr->j), nw, ns, na, np, nl,
            c->cfg.resume_wait_ms);
  else
    lm_info("journal %s: new (nothing to restore)", lm_journal_path(jr->j));
  return 0;
}

void ctl_journal_stop(ctl *c) {
  struct ctl_jr *jr = c->jr;
  if (!jr) return;
  if (jr->j) flush_replies(c);
  if (jr->async_open) uv_close((uv_handle_t *)&jr->async, NULL);
  jr->async_open = false;
  if (jr->check_open) uv_close((uv_handle_t *)&jr->check, NULL);
  jr->check_open = false;
}

void ctl_journal_free(ctl *c) {
  struct ctl_jr *jr = c->jr;
  if (!jr) return;
  if (jr->j) {
    uint64_t commits, ops, ns, cpu;
    lm_journal_stats(jr->j, &commits, &ops, &ns, &cpu);
    lm_journal_close(jr->j); /* commits what is queued */
    if (commits)
      lm_info("journal: %llu commits of %llu records, %.1f us per commit (%.1f us of CPU); %llu of %llu replies "
              "held for a commit, %.1f us on average", (unsigned long long)commits, (unsigned long long)ops,
              (double)ns / 1e3 / (double)commits, (double)cpu / 1e3 / (double)commits,
              (unsigned long long)jr->nheld_replies, (unsigned long long)jr->nreplies,
              jr->nheld_replies ? (double)jr->held_ns / 1e3 / (double)jr->nheld_replies : 0.0);
  }
  while (jr->rhead) {
    j_reply *r = jr->rhead;
    jr->rhead = r->next;
    free(r->buf), free(r);
  }
  while (jr->dhead) {
    j_frame *fr = jr->dhead;
    jr->dhead = fr->next;
    free(fr->f.meta), free(fr->f.payload), free(fr);
  }
  while (jr->detached) {
    j_detached *d = jr->detached;
    jr->detached = d->next;
    lm_session_destroy(d->s);
    free(d);
  }
  free(jr->held); /* the launches themselves are listed as active: ctl_launches_free freed them */
  free(jr->await_epoch);
  free(jr->want);
  free(jr->ended);
  free(jr);
  c->jr = NULL;
}
