/* Hierarchical dispatch, the relay's side: see relay.h. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/log.h"
#include "net/conn.h"
#include "net/sock.h"
#include "worker/relay.h"

enum { M_QUEUED = 0, M_SENT = 1, M_DONE = 2 };

typedef struct rl_launch {
  uint64_t seq;
  uint32_t n, pending;         /* members; members not done */
  uint32_t *workers;           /* [n] */
  uint8_t *state;              /* [n] M_* */
  Lmw__RelayMemberDone **out;  /* reports for the controller (failures, timings) */
  size_t nout, capout;
  bool dispatching;            /* lm_relay_on_run is still sending its RUNs */
  struct rl_launch *next;
} rl_launch;

typedef struct rl_item {       /* a RUN waiting for its connection to open */
  uint64_t seq;
  uint8_t *packed;             /* the Run, packed */
  size_t len;
  struct rl_item *next;
} rl_item;

typedef struct rl_link {       /* this relay's connection to one member's data port */
  lm_relay *r;
  uint32_t worker;
  lm_conn *conn;
  bool open;                   /* connected and HELLO sent */
  uint8_t token[16];
  size_t token_len;
  char err[256];               /* the member's ERROR, if it sent one */
  rl_item *head, *tail;
  struct rl_link *prev, *next;
} rl_link;

struct lm_relay {
  uv_loop_t *loop;
  const lm_relay_ops *ops;
  void *user;
  uint32_t self;
  bool stopping;
  rl_launch *launches;
  rl_link *links;
};

lm_relay *lm_relay_new(uv_loop_t *loop, const lm_relay_ops *ops, void *user) {
  lm_relay *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  r->loop = loop;
  r->ops = ops;
  r->user = user;
  r->self = UINT32_MAX;
  return r;
}

void lm_relay_set_self(lm_relay *r, uint32_t worker_id) {
  if (r) r->self = worker_id;
}

static rl_launch *find_launch(lm_relay *r, uint64_t seq) {
  for (rl_launch *l = r->launches; l; l = l->next)
    if (l->seq == seq) return l;
  return NULL;
}

static void launch_free(rl_launch *l) {
  for (size_t i = 0; i < l->nout; i++) {
    lm_msg_free(l->out[i]->done ? &l->out[i]->done->base : NULL);
    free(l->out[i]);
  }
  free(l->out);
  free(l->workers);
  free(l->state);
  free(l);
}

/* Sends RELAY_DONE once every member is done and every RUN went out. */
static void maybe_finish(lm_relay *r, rl_launch *l) {
  if (l->pending || l->dispatching) return;
  for (rl_launch **pp = &r->launches; *pp; pp = &(*pp)->next)
    if (*pp == l) {
      *pp = l->next;
      break;
    }
  Lmw__RelayDone d = LMW__RELAY_DONE__INIT;
  d.seq = l->seq;
  d.n_members = l->nout;
  d.members = l->out;
  if (!r->stopping) r->ops->send_ctl(r->user, LM_MSG_RELAY_DONE, &d.base);
  launch_free(l);
}

/* Member i is done; d (taken, may be NULL: it succeeded) goes to the controller when it failed or
 * carries timings. */
static void member_done(lm_relay *r, rl_launch *l, uint32_t i, Lmw__RunDone *d) {
  if (l->state[i] == M_DONE) {
    lm_msg_free(d ? &d->base : NULL);
    return;
  }
  l->state[i] = M_DONE;
  l->pending--;
  if (d && (d->code < 0 || d->n_timings)) {
    Lmw__RelayMemberDone *md = malloc(sizeof *md);
    if (l->nout == l->capout) {
      size_t cap = l->capout ? l->capout * 2 : 4;
      Lmw__RelayMemberDone **o = realloc(l->out, cap * sizeof *o);
      if (o) l->out = o, l->capout = cap;
    }
    if (md && l->nout < l->capout) {
      lmw__relay_member_done__init(md);
      md->worker = l->workers[i];
      md->done = d;
      l->out[l->nout++] = md;
      d = NULL;
    } else {
      free(md);
      lm_warn("relay: out of host memory keeping worker %u's report of launch %llu", l->workers[i],
              (unsigned long long)l->seq);
    }
  }
  lm_msg_free(d ? &d->base : NULL);
  maybe_finish(r, l);
}

/* A copy of d the launch can keep (freed with lm_msg_free), or NULL when out of host memory. */
static Lmw__RunDone *done_dup(const Lmw__RunDone *d) {
  size_t n = protobuf_c_message_get_packed_size(&d->base);
  uint8_t *buf = malloc(n ? n : 1);
  if (!buf) return NULL;
  protobuf_c_message_pack(&d->base, buf);
  Lmw__RunDone *out = lmw__run_done__unpack(NULL, n, buf);
  free(buf);
  return out;
}

/* A RunDone of our own making (a copy the launch can keep). */
static Lmw__RunDone *made_done(uint64_t seq, int code, const char *msg) {
  Lmw__RunDone d = LMW__RUN_DONE__INIT;
  d.seq = seq;
  d.code = code;
  d.message = (char *)msg;
  return done_dup(&d);
}

static void member_failed(lm_relay *r, rl_launch *l, uint32_t i, int code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void member_failed(lm_relay *r, rl_launch *l, uint32_t i, int code, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  Lmw__RunDone *d = made_done(l->seq, code, msg);
  if (d) {
    member_done(r, l, i, d);
    return;
  }
  lm_warn("relay: launch %llu, worker %u: %s (out of host memory reporting it)", (unsigned long long)l->seq,
          l->workers[i], msg);
  l->state[i] = M_DONE;
  l->pending--;
  maybe_finish(r, l);
}

/* Every launch's members on worker fail with why (their connection closed, or they were lost). */
static void fail_worker(lm_relay *r, uint32_t worker, int code, const char *why) {
  rl_launch *l = r->launches;
  while (l) {
    rl_launch *n = l->next; /* member_done may free l */
    for (uint32_t i = 0; i < l->n; i++)
      if (l->workers[i] == worker && l->state[i] != M_DONE) {
        member_failed(r, l, i, code, "worker %u: %s", worker, why);
        break;
      }
    l = n;
  }
}

static void link_free(rl_link *k) {
  while (k->head) {
    rl_item *it = k->head;
    k->head = it->next;
    free(it->packed);
    free(it);
  }
  free(k);
}

static void link_frame(lm_conn *c, lm_frame *f) {
  rl_link *k = lm_conn_user(c);
  lm_relay *r = k->r;
  if (f->h.type == LM_MSG_ERROR) {
    lm_err err;
    lm_msg_error_status(f, &err);
    snprintf(k->err, sizeof k->err, "%.250s", err.msg);
    lm_conn_close(c, err.code, "%s", err.msg);
    return;
  }
  if (f->h.type == LM_MSG_HELLO_REPLY) {
    lm_conn_set_established(c);
    return;
  }
  if (f->h.type != LM_MSG_RUN_DONE || f->h.payload_len) {
    lm_conn_close(c, LOOM_PROTOCOL, "worker %u sent the relay %s", k->worker, lm_msg_name(f->h.type));
    return;
  }
  ProtobufCMessage *m;
  lm_err err;
  if (lm_msg_decode(f, &m, &err) < 0) {
    lm_conn_close(c, LOOM_PROTOCOL, "worker %u: %s", k->worker, err.msg);
    return;
  }
  Lmw__RunDone *d = (Lmw__RunDone *)m;
  rl_launch *l = find_launch(r, d->seq);
  uint32_t i = 0;
  while (l && i < l->n && !(l->workers[i] == k->worker && l->state[i] == M_SENT)) i++;
  if (!l || i == l->n) { /* aborted here already, or not ours */
    lm_msg_free(m);
    return;
  }
  member_done(r, l, i, d);
}

static void link_close(lm_conn *c, int code, const char *reason) {
  (void)code;
  rl_link *k = lm_conn_user(c);
  lm_relay *r = k->r;
  if (k->prev) k->prev->next = k->next;
  else r->links = k->next;
  if (k->next) k->next->prev = k->prev;
  if (!r->stopping) {
    char why[600];
    snprintf(why, sizeof why, "the relay (worker %u) lost its connection to it: %s", r->self,
             k->err[0] ? k->err : reason);
    fail_worker(r, k->worker, LOOM_WORKER_LOST, why);
  }
  link_free(k);
}

static int send_run(rl_link *k, const Lmw__Run *run, lm_err *err) {
  return lm_conn_send(k->conn, LM_MSG_RUN, 0, &run->base, NULL, 0, NULL, NULL, err);
}

static void link_connected(lm_conn *c) {
  rl_link *k = lm_conn_user(c);
  lm_relay *r = k->r;
  Lmw__Hello h = LMW__HELLO__INIT;
  h.protocol_version = LM_PROTOCOL_VERSION;
  h.role = LMW__ROLE__ROLE_WORKER;
  h.software = "loom " LOOM_VERSION_STRING " (relay)";
  h.relay_worker = r->self + 1;
  h.relay_token.data = k->token;
  h.relay_token.len = k->token_len;
  lm_err err;
  if (lm_conn_send(c, LM_MSG_HELLO, 1, &h.base, NULL, 0, NULL, NULL, &err) < 0) return; /* closes: link_close */
  k->open = true;
  while (k->head) { /* the RUNs that waited, in order */
    rl_item *it = k->head;
    k->head = it->next;
    if (!k->head) k->tail = NULL;
    rl_launch *l = find_launch(r, it->seq);
    uint32_t i = 0;
    while (l && i < l->n && !(l->workers[i] == k->worker && l->state[i] == M_QUEUED)) i++;
    if (l && i < l->n) {
      Lmw__Run *run = lmw__run__unpack(NULL, it->len, it->packed);
      if (!run || send_run(k, run, &err) < 0) member_failed(r, l, i, LOOM_WORKER_LOST, "worker %u: the relay cannot "
                                                            "forward its RUN: %s", k->worker, run ? err.msg : "no memory");
      else l->state[i] = M_SENT;
      lm_msg_free(run ? &run->base : NULL);
    }
    free(it->packed);
    free(it);
  }
}

static const lm_conn_ops g_link_ops = {.on_frame = link_frame, .on_connect = link_connected, .on_close = link_close};

static rl_link *link_get(lm_relay *r, const Lmw__RelayMember *mem, lm_err *err) {
  for (rl_link *k = r->links; k; k = k->next)
    if (k->worker == mem->worker) return k;
  struct sockaddr_storage ss;
  socklen_t sl;
  if (!mem->data_address || lm_addr_resolve(mem->data_address, &ss, &sl, err) < 0) {
    if (!mem->data_address) lm_errf(err, LOOM_PROTOCOL, "no data port address");
    return NULL;
  }
  rl_link *k = calloc(1, sizeof *k);
  lm_conn_config cfg;
  lm_conn_config_default(&cfg);
  cfg.handshake_timeout_ms = 0;
  if (!k || !(k->conn = lm_conn_new(r->loop, &g_link_ops, &cfg, k))) {
    free(k);
    lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
    return NULL;
  }
  k->r = r;
  k->worker = mem->worker;
  k->token_len = mem->token.len < sizeof k->token ? mem->token.len : sizeof k->token;
  if (k->token_len) memcpy(k->token, mem->token.data, k->token_len);
  k->next = r->links;
  if (k->next) k->next->prev = k;
  r->links = k;
  lm_conn_connect(k->conn, (struct sockaddr *)&ss); /* a failure arrives in link_close */
  return k;
}

/* Queues run until the link opens; false when out of memory. */
static bool queue_run(rl_link *k, uint64_t seq, const Lmw__Run *run) {
  rl_item *it = calloc(1, sizeof *it);
  size_t n = protobuf_c_message_get_packed_size(&run->base);
  if (!it || !(it->packed = malloc(n ? n : 1))) {
    free(it);
    return false;
  }
  it->len = protobuf_c_message_pack(&run->base, it->packed);
  it->seq = seq;
  if (k->tail) k->tail->next = it;
  else k->head = it;
  k->tail = it;
  return true;
}

static void refuse(lm_relay *r, uint64_t seq, const char *msg) {
  Lmw__RunDone d = LMW__RUN_DONE__INIT;
  d.seq = seq;
  d.code = LOOM_PROTOCOL;
  d.message = (char *)msg;
  Lmw__RelayMemberDone md = LMW__RELAY_MEMBER_DONE__INIT, *mdp = &md;
  md.worker = r->self;
  md.done = &d;
  Lmw__RelayDone out = LMW__RELAY_DONE__INIT;
  out.seq = seq;
  out.n_members = 1;
  out.members = &mdp;
  r->ops->send_ctl(r->user, LM_MSG_RELAY_DONE, &out.base);
}

void lm_relay_on_run(lm_relay *r, const lm_frame *f, const Lmw__RelayRun *m) {
  uint64_t seq = m->run ? m->run->seq : 0;
  char msg[300];
  if (m->run && find_launch(r, seq)) return; /* sent again (a restarted controller): it reports when done */
  Lmw__RelayGroup *g = f->h.payload_len ? lmw__relay_group__unpack(NULL, f->h.payload_len, f->payload) : NULL;
  bool ok = m->run && g && g->n_members && m->n_min_cseq == g->n_members;
  for (size_t i = 0; ok && i < m->n_frees; i++) ok = m->frees[i]->member < g->n_members;
  if (!ok) {
    snprintf(msg, sizeof msg, "worker %u (relay): malformed RELAY_RUN for launch %llu", r->self, (unsigned long long)seq);
    refuse(r, seq, msg);
    lm_msg_free(g ? &g->base : NULL);
    return;
  }
  rl_launch *l = calloc(1, sizeof *l);
  if (l) {
    l->workers = calloc(g->n_members, sizeof *l->workers);
    l->state = calloc(g->n_members, 1);
  }
  if (!l || !l->workers || !l->state) {
    if (l) free(l->workers), free(l->state);
    free(l);
    snprintf(msg, sizeof msg, "worker %u (relay): out of host memory relaying launch %llu", r->self,
             (unsigned long long)seq);
    refuse(r, seq, msg);
    lm_msg_free(&g->base);
    return;
  }
  l->seq = seq;
  l->n = l->pending = (uint32_t)g->n_members;
  for (uint32_t i = 0; i < l->n; i++) l->workers[i] = g->members[i]->worker;
  l->dispatching = true;
  l->next = r->launches;
  r->launches = l;
  for (uint32_t i = 0; i < l->n; i++) {
    const Lmw__RelayMember *mem = g->members[i];
    Lmw__Run run = *m->run;
    run.n_devices = mem->n_devices;
    run.devices = mem->devices;
    run.n_free_ids = 0;
    run.free_ids = NULL;
    for (size_t j = 0; j < m->n_frees; j++)
      if (m->frees[j]->member == i) run.n_free_ids = m->frees[j]->n_ids, run.free_ids = m->frees[j]->ids;
    run.min_cseq = m->min_cseq[i];
    if (mem->worker == r->self) {
      l->state[i] = M_SENT;
      r->ops->run_local(r->user, &run); /* may report at once: member_done waits for dispatching */
      continue;
    }
    lm_err err;
    rl_link *k = link_get(r, mem, &err);
    if (!k) {
      member_failed(r, l, i, LOOM_WORKER_LOST, "worker %u: the relay (worker %u) cannot reach its data port %s: %s",
                    mem->worker, r->self, mem->data_address ? mem->data_address : "", err.msg);
    } else if (k->open) {
      if (send_run(k, &run, &err) < 0)
        member_failed(r, l, i, LOOM_WORKER_LOST, "worker %u: the relay (worker %u) cannot forward its RUN: %s",
                      mem->worker, r->self, err.msg);
      else l->state[i] = M_SENT;
    } else if (!queue_run(k, seq, &run)) {
      member_failed(r, l, i, LOOM_NO_MEMORY, "worker %u: the relay (worker %u) is out of host memory", mem->worker,
                    r->self);
    }
  }
  l->dispatching = false;
  lm_msg_free(&g->base);
  maybe_finish(r, l);
}

void lm_relay_local_done(lm_relay *r, const Lmw__RunDone *d) {
  rl_launch *l = find_launch(r, d->seq);
  uint32_t i = 0;
  while (l && i < l->n && l->workers[i] != r->self) i++;
  if (!l || i == l->n || l->state[i] == M_DONE) return;
  Lmw__RunDone *copy = NULL;
  if (d->code < 0 || d->n_timings) { /* kept for the controller: a copy */
    copy = done_dup(d);
    if (!copy && d->code < 0) {
      member_failed(r, l, i, d->code, "worker %u: %.400s", r->self, d->message ? d->message : "failed");
      return;
    }
  }
  member_done(r, l, i, copy);
}

void lm_relay_on_abort(lm_relay *r, const Lmw__AbortLaunch *m) {
  rl_launch *l = r ? find_launch(r, m->seq) : NULL;
  if (!l) return;
  for (uint32_t i = 0; i < l->n; i++) {
    if (l->state[i] == M_DONE || l->workers[i] == r->self) continue;
    rl_link *k = r->links;
    while (k && k->worker != l->workers[i]) k = k->next;
    if (l->state[i] == M_QUEUED || !k) { /* never reached it: nothing to stop */
      member_failed(r, l, i, LOOM_CANCELLED, "launch %llu was aborted before it reached worker %u: %.300s",
                    (unsigned long long)l->seq, l->workers[i], m->reason ? m->reason : "");
      if (!(l = find_launch(r, m->seq))) return; /* that was the last member */
      continue;
    }
    lm_conn_send(k->conn, LM_MSG_ABORT_LAUNCH, 0, &m->base, NULL, 0, NULL, NULL, NULL);
  }
}

void lm_relay_worker_lost(lm_relay *r, uint32_t worker, const char *why) {
  if (!r) return;
  char msg[400];
  snprintf(msg, sizeof msg, "lost (the controller says: %.300s)", why ? why : "");
  fail_worker(r, worker, LOOM_WORKER_LOST, msg);
  for (rl_link *k = r->links; k; k = k->next)
    if (k->worker == worker) lm_conn_close(k->conn, LOOM_WORKER_LOST, "worker %u lost", worker);
}

void lm_relay_stop(lm_relay *r) {
  if (!r) return;
  r->stopping = true;
  for (rl_link *k = r->links; k; k = k->next) lm_conn_close(k->conn, 0, "relay stopping");
}

void lm_relay_free(lm_relay *r) {
  if (!r) return;
  while (r->launches) {
    rl_launch *l = r->launches;
    r->launches = l->next;
    launch_free(l);
  }
  while (r->links) { /* not closed through the loop (it never ran): the connections go with it */
    rl_link *k = r->links;
    r->links = k->next;
    link_free(k);
  }
  free(r);
}
