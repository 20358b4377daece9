/* Simulated workers (`loom worker --simulate N`): N lightweight workers in one process, on one
 * event loop, so a single machine can stand in for a cluster of thousands of hosts against a
 * real controller and real clients. Each simulated worker has its own control connection (HELLO,
 * authentication with the cluster secret, REGISTER_WORKER with its devices, a data-plane address
 * that names it but that no endpoint connects to, heartbeats) and its own data port (HELLO,
 * SHARD_PUT, SHARD_GET with real transfer tokens), and answers every message the controller
 * sends a worker. It executes nothing: a put's bytes are dropped (its shape is kept), a launch's
 * outputs are recorded with the shapes its program returns, and a get returns zeros of the
 * shard's shape. Programs are parsed and analyzed once per process (every simulated worker shares
 * the result), on the thread pool. Collectives cannot run (there is no data plane): a program
 * still "runs", since nothing executes. What a simulation measures is the control plane: the
 * controller's work and messages per launch, registration, health, placement, clients.
 *
 * Non-goals: numbers (results are zeros, never a computed value), memory accounting (devices
 * report nothing used), mixing with real workers in one launch (a real worker refuses to open a
 * data-plane connection to a simulated one: lm_dp_sim_address). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "common/dtype.h"
#include "common/log.h"
#include "dataplane/dataplane.h"
#include "hlo/parse.h"
#include "hlo/spmd.h"
#include "net/auth.h"
#include "net/conn.h"
#include "net/sock.h"
#include "net/token.h"
#include "worker/relay.h"
#include "worker/sim.h"

#define SIM_CONNECTING_MAX 32  /* control connections being set up at once */
#define SIM_RETRY_MS 200
#define SIM_MAX_RANK 16
#define SIM_MAX_PUT ((uint64_t)1 << 30) /* a put is received whole, then dropped */

enum { RID_HELLO = 1, RID_REGISTER = 2 };

typedef struct sim sim;
typedef struct simw simw;

/* A program, shared by every simulated worker the controller loaded it on. */
typedef struct sim_wait {
  simw *sw;
  uint64_t id;                 /* the program id it asked to load */
  uint32_t gen;                /* the worker's connection generation when it asked */
  uint64_t rid;
  struct sim_wait *next;
} sim_wait;

typedef struct sim_prog {
  uint64_t id;                 /* the program id it was first loaded as */
  bool has_digest;
  uint8_t digest[32];          /* its text's SHA-256: later program ids of the same text share it */
  int state;                   /* 0 analyzing, 1 ready, < 0 failed (the status) */
  char msg[LM_ERR_MSG_MAX];
  lm_spmd_info *info;
  char *text, *name;
  size_t len;
  int refs;                    /* simulated workers listing it, plus one while analyzing */
  sim_wait *waiters;
  uv_work_t req;
  struct sim_prog *next;
} sim_prog;

typedef struct sim_load {
  uint64_t id;                 /* the program id the controller loaded it as */
  sim_prog *p;
  struct sim_load *next;
} sim_load;

/* A shard a simulated worker holds: only its type (a put's bytes are dropped). */
typedef struct sim_shard {
  uint64_t session, array;
  uint32_t dev;
  int code;                    /* < 0: it failed (a launch with a missing input) */
  uint32_t dtype;
  int rank;
  uint64_t dims[SIM_MAX_RANK];
  struct sim_shard *next;
} sim_shard;

typedef struct sim_get {       /* a get waiting for a controller message (min_cseq) */
  lm_conn *conn;
  uint64_t rid, session, array, min_cseq;
  uint32_t dev;
  struct sim_get *next;
} sim_get;

typedef struct sim_relayed {   /* a RUN a relay forwarded, waiting for its min_cseq */
  lm_conn *conn;
  Lmw__Run *m;
  struct sim_relayed *next;
} sim_relayed;

typedef struct sim_dconn {
  simw *sw;
  lm_conn *conn;
  bool hello;
  uint32_t relay;              /* a relay's connection: its worker id + 1 */
  struct sim_dconn *prev, *next; /* the process's data connections */
} sim_dconn;

struct simw {
  sim *s;
  uint32_t idx;
  lm_conn *conn;
  uint32_t gen;
  bool started, registered, gone;
  uint32_t worker_id;
  uint8_t nonce[LM_AUTH_NONCE_SIZE];
  uint8_t proof[LM_AUTH_MAC_SIZE];
  uint8_t key[LM_TOKEN_KEY_SIZE];
  uint64_t cseq, hb_seq, first_ms;
  uv_timer_t retry;
  uv_tcp_t data_server;
  bool data_open;
  char data_addr[LM_ADDR_MAX];
  sim_shard **buckets;
  size_t nbuckets, nshards;
  sim_load *progs;
  sim_get *parked;
  lm_relay *relay;             /* this worker as a relay (hierarchical dispatch) */
  sim_relayed *relayed;        /* RUNs from relays waiting for controller messages */
};

struct sim {
  uv_loop_t loop;
  uv_signal_t sigint, sigterm;
  uv_timer_t heartbeat;
  bool heartbeat_on, stopping;
  lm_worker_config cfg;
  uint32_t n;
  simw *w;                     /* [n] */
  uint32_t next_start, connecting, registered, lost;
  struct sockaddr_storage addr;
  lm_conn_config conn_cfg;
  char host[256], data_host[LM_ADDR_MAX];
  bool have_secret;
  uint8_t secret[LM_AUTH_SECRET_SIZE];
  sim_prog *progs;
  sim_dconn *dconns;           /* open data connections (closed at stop) */
  uint8_t *zeros;              /* gets' bytes */
  size_t zeros_cap;
  uint64_t runs, puts, gets;
  int rc;
  lm_err err;
};

static void sim_stop(sim *s, int rc, const char *msg);
static void start_more(sim *s);

/* ---- shards ---- */

static size_t shard_hash(uint64_t session, uint64_t array, uint32_t dev) {
  uint64_t h = session * 0x9e3779b97f4a7c15ull ^ array * 0xc2b2ae3d27d4eb4full ^ dev;
  return (size_t)(h ^ (h >> 29));
}

static sim_shard *shard_find(simw *w, uint64_t session, uint64_t array, uint32_t dev) {
  if (!w->nbuckets) return NULL;
  for (sim_shard *x = w->buckets[shard_hash(session, array, dev) & (w->nbuckets - 1)]; x; x = x->next)
    if (x->session == session && x->array == array && x->dev == dev) return x;
  return NULL;
}

/* Adds or replaces the shard's record; false when out of memory. */
static bool shard_put(simw *w, uint64_t session, uint64_t array, uint32_t dev, int code, uint32_t dtype, int rank,
                      const uint64_t *dims) {
  if (w->nshards >= w->nbuckets) { /* grow (and rehash) at load 1 */
    size_t nb = w->nbuckets ? w->nbuckets * 2 : 64;
    sim_shard **b = calloc(nb, sizeof *b);
    if (!b) return false;
    for (size_t i = 0; i < w->nbuckets; i++)
      for (sim_shard *x = w->buckets[i], *n; x; x = n) {
        n = x->next;
        size_t k = shard_hash(x->session, x->array, x->dev) & (nb - 1);
        x->next = b[k];
        b[k] = x;
      }
    free(w->buckets);
    w->buckets = b;
    w->nbuckets = nb;
  }
  sim_shard *x = shard_find(w, session, array, dev);
  if (!x) {
    if (!(x = calloc(1, sizeof *x))) return false;
    x->session = session, x->array = array, x->dev = dev;
    size_t k = shard_hash(session, array, dev) & (w->nbuckets - 1);
    x->next = w->buckets[k];
    w->buckets[k] = x;
    w->nshards++;
  }
  x->code = code;
  x->dtype = dtype;
  x->rank = rank > SIM_MAX_RANK ? SIM_MAX_RANK : rank;
  for (int d = 0; d < x->rank; d++) x->dims[d] = dims[d];
  return true;
}

/* Drops the shards of a session (array 0: all of its arrays; dev UINT32_MAX: every device). */
static void shard_drop(simw *w, uint64_t session, uint64_t array, uint32_t dev) {
  if (array && dev != UINT32_MAX) {
    size_t k = shard_hash(session, array, dev) & (w->nbuckets ? w->nbuckets - 1 : 0);
    for (sim_shard **pp = w->nbuckets ? &w->buckets[k] : NULL; pp && *pp; pp = &(*pp)->next)
      if ((*pp)->session == session && (*pp)->array == array && (*pp)->dev == dev) {
        sim_shard *x = *pp;
        *pp = x->next;
        free(x);
        w->nshards--;
        return;
      }
    return;
  }
  for (size_t i = 0; i < w->nbuckets; i++)
    for (sim_shard **pp = &w->buckets[i]; *pp;) {
      sim_shard *x = *pp;
      if (x->session == session && (!array || x->array == array)) {
        *pp = x->next;
        free(x);
        w->nshards--;
      } else {
        pp = &x->next;
      }
    }
}

static void shards_free(simw *w) {
  for (size_t i = 0; i < w->nbuckets; i++)
    for (sim_shard *x = w->buckets[i], *n; x; x = n) {
      n = x->next;
      free(x);
    }
  free(w->buckets);
  w->buckets = NULL;
  w->nbuckets = w->nshards = 0;
}

/* ---- programs ---- */

static void prog_release(sim *s, sim_prog *p) {
  if (!p || --p->refs > 0) return;
  for (sim_prog **pp = &s->progs; *pp; pp = &(*pp)->next)
    if (*pp == p) {
      *pp = p->next;
      break;
    }
  while (p->waiters) {
    sim_wait *n = p->waiters->next;
    free(p->waiters);
    p->waiters = n;
  }
  lm_spmd_info_free(p->info);
  free(p->text);
  free(p->name);
  free(p);
}

static void send_ctl(simw *w, unsigned type, uint64_t rid, const ProtobufCMessage *m) {
  lm_err err;
  if (w->conn && lm_conn_send(w->conn, type, rid, m, NULL, 0, NULL, NULL, &err) < 0 && lm_conn_is_open(w->conn))
    lm_warn("simulated worker %u: cannot send %s: %s", w->worker_id, lm_msg_name(type), err.msg);
}

static void list_prog(simw *w, uint64_t id, sim_prog *p) {
  for (sim_load **pp = &w->progs; *pp; pp = &(*pp)->next)
    if ((*pp)->id == id) { /* a reload replaces it */
      sim_load *l = *pp;
      *pp = l->next;
      prog_release(w->s, l->p);
      free(l);
      break;
    }
  sim_load *l = calloc(1, sizeof *l);
  if (!l) return;
  l->id = id;
  l->p = p;
  p->refs++;
  l->next = w->progs;
  w->progs = l;
}

/* Answers a LOAD_PROGRAM once its program is analyzed (ready or failed). */
static void answer_load(simw *w, uint64_t rid, uint64_t id, sim_prog *p) {
  if (p->state < 0) {
    char msg[LM_ERR_MSG_MAX + 64];
    snprintf(msg, sizeof msg, "worker %u cannot load it: %s", w->worker_id, p->msg);
    if (w->conn) lm_conn_send_error(w->conn, rid, p->state, msg);
    return;
  }
  list_prog(w, id, p);
  Lmw__Ack ack = LMW__ACK__INIT;
  send_ctl(w, LM_MSG_ACK, rid, &ack.base);
}

static void analyze_work(uv_work_t *req) {
  sim_prog *p = req->data;
  lm_module *mod = NULL;
  lm_err err;
  lm_parse_opts po = {.filename = p->name};
  int rc = lm_parse_module(p->text, p->len, &po, &mod, &err);
  if (rc == 0) rc = lm_spmd_analyze(mod, &p->info, &err);
  lm_module_free(mod);
  if (rc < 0) {
    p->state = rc;
    snprintf(p->msg, sizeof p->msg, "%s", err.msg);
  }
}

static void analyze_done(uv_work_t *req, int status) {
  sim_prog *p = req->data;
  sim *s = p->req.loop->data;
  if (status < 0 && p->state == 0) {
    p->state = LOOM_CANCELLED;
    snprintf(p->msg, sizeof p->msg, "loading cancelled");
  }
  if (p->state == 0) p->state = 1;
  free(p->text); /* analyzed once; nothing runs it */
  p->text = NULL;
  while (p->waiters) {
    sim_wait *x = p->waiters;
    p->waiters = x->next;
    if (!s->stopping && x->sw->conn && x->sw->gen == x->gen) answer_load(x->sw, x->rid, x->id, p);
    free(x);
  }
  prog_release(s, p);
}

static void on_load(simw *w, const lm_frame *f, const Lmw__LoadProgram *m) {
  sim *s = w->s;
  if (!m->program) {
    lm_conn_send_error(w->conn, f->h.request_id, LOOM_PROTOCOL, "LOAD_PROGRAM without a program id");
    return;
  }
  bool digest = m->text_digest.len == 32;
  sim_prog *p = NULL;
  for (p = s->progs; p; p = p->next) /* by content when the controller names it, else by id */
    if (digest ? p->has_digest && !memcmp(p->digest, m->text_digest.data, 32) : p->id == m->program) break;
  if (!p && digest && !f->h.payload_len) {
    lm_conn_send_errorf(w->conn, f->h.request_id, LOOM_NOT_FOUND, "worker %u does not hold the text of program %llu",
                        w->worker_id, (unsigned long long)m->program);
    return;
  }
  if (p && p->state != 0) {
    answer_load(w, f->h.request_id, m->program, p);
    return;
  }
  sim_wait *x = calloc(1, sizeof *x);
  if (!x) goto oom;
  *x = (sim_wait){.sw = w, .id = m->program, .gen = w->gen, .rid = f->h.request_id};
  if (!p) { /* first sight in this process: analyze once, on the thread pool */
    p = calloc(1, sizeof *p);
    if (!p || !(p->text = malloc(f->h.payload_len ? f->h.payload_len : 1)) ||
        !(p->name = strdup(m->name && m->name[0] ? m->name : "<program>"))) {
      if (p) free(p->text);
      free(p);
      free(x);
      goto oom;
    }
    if (f->h.payload_len) memcpy(p->text, f->payload, f->h.payload_len);
    p->len = f->h.payload_len;
    p->id = m->program;
    if (digest) {
      p->has_digest = true;
      memcpy(p->digest, m->text_digest.data, 32);
    }
    p->refs = 1;
    p->req.data = p;
    if (uv_queue_work(&s->loop, &p->req, analyze_work, analyze_done) != 0) {
      free(p->text), free(p->name), free(p), free(x);
      goto oom;
    }
    p->next = s->progs;
    s->progs = p;
  }
  x->next = p->waiters;
  p->waiters = x;
  return;
oom:
  lm_conn_send_error(w->conn, f->h.request_id, LOOM_NO_MEMORY, "simulated worker: out of host memory");
}

static void on_unload(simw *w, uint64_t id) {
  for (sim_load **pp = &w->progs; *pp; pp = &(*pp)->next)
    if ((*pp)->id == id) {
      sim_load *l = *pp;
      *pp = l->next;
      prog_release(w->s, l->p);
      free(l);
      return;
    }
}

/* ---- launches ---- */

/* Where a RUN_DONE goes: the controller (reply NULL, !self), this worker's own relay (self), or
 * the relay connection the RUN came on (reply). */
static void run_done(simw *w, lm_conn *reply, bool self, uint64_t seq, int code, const char *msg) {
  Lmw__RunDone r = LMW__RUN_DONE__INIT;
  r.seq = seq;
  r.code = code;
  r.message = (char *)(msg ? msg : "");
  if (self) lm_relay_local_done(w->relay, &r);
  else if (reply) lm_conn_send(reply, LM_MSG_RUN_DONE, 0, &r.base, NULL, 0, NULL, NULL, NULL);
  else send_ctl(w, LM_MSG_RUN_DONE, 0, &r.base);
}

/* RUN: checks it as a real worker does, records the outputs with the program's local types
 * (or failed, when an input has no shard here), and reports at once. */
static void on_run(simw *w, const Lmw__Run *m, lm_conn *reply, bool self) {
  sim *s = w->s;
  char msg[512];
  for (size_t i = 0; i < m->n_free_ids; i++) /* deletes that waited for this RUN */
    for (uint32_t d = 0; d < s->cfg.devices; d++) shard_drop(w, m->session, m->free_ids[i], d);
  sim_load *l = w->progs;
  while (l && l->id != m->program) l = l->next;
  int code = 0;
  if (!l) {
    code = LOOM_NOT_FOUND;
    snprintf(msg, sizeof msg, "worker %u has no program %llu loaded", w->worker_id, (unsigned long long)m->program);
  }
  const lm_spmd_info *info = l ? l->p->info : NULL;
  uint64_t seen = 0; /* local indices named (devices <= 64 checked exactly; more are bounded by the count) */
  if (code == 0 && ((m->n_proc_workers && m->n_proc_workers != info->nproc) || m->n_proc_devices != m->n_proc_workers ||
                    m->n_devices == 0 || m->n_devices > s->cfg.devices))
    code = LOOM_PROTOCOL;
  for (size_t i = 0; code == 0 && i < m->n_devices; i++) {
    const Lmw__RunDevice *rd = m->devices[i];
    size_t nin = rd->n_inputs ? rd->n_inputs : m->n_inputs, nout = rd->n_outputs ? rd->n_outputs : m->n_outputs;
    bool dup = rd->local_index < 64 && (seen >> rd->local_index & 1);
    if (rd->local_index < 64) seen |= UINT64_C(1) << rd->local_index;
    if (rd->local_index >= s->cfg.devices || dup || rd->process >= info->nproc || nin != info->ninputs ||
        nout != info->noutputs)
      code = LOOM_PROTOCOL;
  }
  if (code == LOOM_PROTOCOL)
    snprintf(msg, sizeof msg, "worker %u: malformed RUN for launch %llu", w->worker_id, (unsigned long long)m->seq);
  s->runs++;
  for (size_t i = 0; i < m->n_devices; i++) {
    const Lmw__RunDevice *rd = m->devices[i];
    if (rd->local_index >= s->cfg.devices) continue;
    const uint64_t *in = rd->n_inputs ? rd->inputs : m->inputs, *out = rd->n_outputs ? rd->outputs : m->outputs;
    size_t nin = rd->n_inputs ? rd->n_inputs : m->n_inputs, nout = rd->n_outputs ? rd->n_outputs : m->n_outputs;
    for (size_t j = 0; code == 0 && j < nin; j++) {
      sim_shard *x = shard_find(w, m->session, in[j], rd->local_index);
      if (!x) {
        code = LOOM_NOT_FOUND;
        snprintf(msg, sizeof msg,
                 "worker %u device %u: array %llu (input %zu) has no shard here: it was never put, or was deleted",
                 w->worker_id, rd->local_index, (unsigned long long)in[j], j);
      } else if (x->code < 0) {
        code = x->code;
        snprintf(msg, sizeof msg, "an input's producer failed (simulated worker %u)", w->worker_id);
      }
    }
    for (size_t j = 0; j < nout; j++) {
      uint64_t dims[SIM_MAX_RANK] = {0};
      const lm_type *t = info && j < info->noutputs ? &info->outputs[j].local : NULL;
      int rank = t ? t->rank : 0;
      for (int d = 0; d < rank && d < SIM_MAX_RANK; d++) dims[d] = (uint64_t)t->dims[d];
      shard_put(w, m->session, out[j], rd->local_index, code, t ? (uint32_t)t->dtype : 0, rank, dims);
    }
  }
  run_done(w, reply, self, m->seq, code, code ? msg : NULL);
}

/* ---- hierarchical dispatch ---- */

static void relay_run_local(void *user, const Lmw__Run *run) { on_run(user, run, NULL, true); }
static void relay_send_ctl(void *user, unsigned type, const ProtobufCMessage *m) { send_ctl(user, type, 0, m); }
static const lm_relay_ops g_relay_ops = {.run_local = relay_run_local, .send_ctl = relay_send_ctl};

/* RUNs from relays run in order once this worker has read their min_cseq controller messages. */
static void poll_relayed(simw *w) {
  while (w->relayed && w->relayed->m->min_cseq <= w->cseq) {
    sim_relayed *x = w->relayed;
    w->relayed = x->next;
    if (lm_conn_is_open(x->conn)) on_run(w, x->m, x->conn, false);
    lm_msg_free(&x->m->base);
    free(x);
  }
}

static void relayed_run(simw *w, lm_conn *conn, Lmw__Run *m) {
  sim_relayed *x = w->relayed || m->min_cseq > w->cseq ? calloc(1, sizeof *x) : NULL;
  if (!x) {
    if (!w->relayed && m->min_cseq <= w->cseq) on_run(w, m, conn, false);
    else run_done(w, conn, false, m->seq, LOOM_NO_MEMORY, "simulated worker: out of host memory");
    lm_msg_free(&m->base);
    return;
  }
  x->conn = conn;
  x->m = m;
  sim_relayed **pp = &w->relayed;
  while (*pp) pp = &(*pp)->next;
  *pp = x;
}

static void relayed_drop(simw *w, lm_conn *conn, uint64_t seq, const char *why) {
  for (sim_relayed **pp = &w->relayed; *pp;) {
    sim_relayed *x = *pp;
    if (x->conn != conn || (seq && x->m->seq != seq)) {
      pp = &x->next;
      continue;
    }
    *pp = x->next;
    if (why) run_done(w, conn, false, x->m->seq, LOOM_CANCELLED, why);
    lm_msg_free(&x->m->base);
    free(x);
  }
}

/* ---- the data port ---- */

static void serve_get(sim *s, lm_conn *c, simw *w, uint64_t rid, uint64_t session, uint64_t array, uint32_t dev) {
  sim_shard *x = shard_find(w, session, array, dev);
  if (!x) {
    lm_conn_send_errorf(c, rid, LOOM_NOT_FOUND, "array %llu has no shard on device %u of worker %u (deleted?)",
                        (unsigned long long)array, dev, w->worker_id);
    return;
  }
  if (x->code < 0) {
    lm_conn_send_errorf(c, rid, x->code, "the launch that computes array %llu failed on simulated worker %u",
                        (unsigned long long)array, w->worker_id);
    return;
  }
  uint64_t n = lm_dtype_size((lm_dtype)x->dtype);
  for (int d = 0; d < x->rank; d++) n *= x->dims[d];
  if (n > s->zeros_cap) {
    uint8_t *z = calloc(1, n);
    if (!z) {
      lm_conn_send_errorf(c, rid, LOOM_NO_MEMORY, "simulated worker: out of host memory");
      return;
    }
    free(s->zeros);
    s->zeros = z;
    s->zeros_cap = n;
  }
  Lmw__ShardGetReply r = LMW__SHARD_GET_REPLY__INIT;
  r.dtype = x->dtype;
  r.n_dims = (size_t)x->rank;
  r.dims = x->dims;
  s->gets++;
  lm_conn_send(c, LM_MSG_SHARD_GET_REPLY, rid, &r.base, n ? s->zeros : NULL, n, NULL, NULL, NULL);
}

static void poll_parked(simw *w) {
  for (sim_get **pp = &w->parked; *pp;) {
    sim_get *g = *pp;
    if (w->cseq < g->min_cseq && lm_conn_is_open(g->conn)) {
      pp = &g->next;
      continue;
    }
    *pp = g->next;
    if (lm_conn_is_open(g->conn)) serve_get(w->s, g->conn, w, g->rid, g->session, g->array, g->dev);
    free(g);
  }
}

static void on_put(sim_dconn *dc, const lm_frame *f, const Lmw__ShardPut *m) {
  simw *w = dc->sw;
  sim *s = w->s;
  uint64_t rid = f->h.request_id;
  if (!lm_dtype_valid((int)m->dtype) || m->n_dims > SIM_MAX_RANK || m->n_ranges) {
    lm_conn_send_errorf(dc->conn, rid, LOOM_INVALID_ARGUMENT, "bad shard put (dtype %u, rank %zu)", m->dtype, m->n_dims);
    return;
  }
  if (m->n_targets == 0 || m->n_targets > s->cfg.devices) {
    lm_conn_send_errorf(dc->conn, rid, LOOM_INVALID_ARGUMENT, "a put names %zu devices (1-%u)", m->n_targets,
                        s->cfg.devices);
    return;
  }
  uint64_t n = lm_dtype_size((lm_dtype)m->dtype);
  for (size_t d = 0; d < m->n_dims; d++)
    if (__builtin_mul_overflow(n, m->dims[d], &n)) n = UINT64_MAX; /* the payload (dropped with the frame) */
  if (n != f->h.payload_len) {
    lm_conn_send_errorf(dc->conn, rid, LOOM_INVALID_ARGUMENT, "the payload has %llu bytes, the shard's shape needs %llu",
                        (unsigned long long)f->h.payload_len, (unsigned long long)n);
    return;
  }
  for (size_t i = 0; i < m->n_targets; i++) {
    const Lmw__ShardTarget *t = m->targets[i];
    if (t->local_index >= s->cfg.devices ||
        !lm_token_check(w->key, LM_TOKEN_PUT, m->session, t->array, w->worker_id, t->local_index, m->dtype, m->dims,
                        m->n_dims, t->token.data, t->token.len)) {
      lm_conn_send_errorf(dc->conn, rid, LOOM_PERMISSION, "the token for array %llu on device %u is not valid",
                          (unsigned long long)t->array, t->local_index);
      return;
    }
  }
  for (size_t i = 0; i < m->n_targets; i++)
    if (!shard_put(w, m->session, m->targets[i]->array, m->targets[i]->local_index, 0, m->dtype, (int)m->n_dims,
                   m->dims)) {
      lm_conn_send_errorf(dc->conn, rid, LOOM_NO_MEMORY, "simulated worker: out of host memory");
      return;
    }
  s->puts++;
  Lmw__Ack ack = LMW__ACK__INIT;
  lm_conn_send(dc->conn, LM_MSG_ACK, rid, &ack.base, NULL, 0, NULL, NULL, NULL);
}

static void on_get(sim_dconn *dc, const lm_frame *f, const Lmw__ShardGet *m) {
  simw *w = dc->sw;
  uint64_t rid = f->h.request_id;
  if (m->n_ranges || m->local_index >= w->s->cfg.devices ||
      !lm_token_check(w->key, LM_TOKEN_GET, m->session, m->array, w->worker_id, m->local_index, 0, NULL, 0,
                      m->token.data, m->token.len)) {
    lm_conn_send_errorf(dc->conn, rid, LOOM_PERMISSION, "the token for array %llu on device %u is not valid",
                        (unsigned long long)m->array, m->local_index);
    return;
  }
  if (w->cseq >= m->min_cseq) {
    serve_get(w->s, dc->conn, w, rid, m->session, m->array, m->local_index);
    return;
  }
  sim_get *g = calloc(1, sizeof *g);
  if (!g) {
    lm_conn_send_errorf(dc->conn, rid, LOOM_NO_MEMORY, "simulated worker: out of host memory");
    return;
  }
  *g = (sim_get){.conn = dc->conn, .rid = rid, .session = m->session, .array = m->array, .min_cseq = m->min_cseq,
                 .dev = m->local_index, .next = w->parked};
  w->parked = g;
}

static void data_frame(lm_conn *c, lm_frame *f) {
  sim_dconn *dc = lm_conn_user(c);
  unsigned type = f->h.type;
  ProtobufCMessage *m;
  lm_err err;
  if (f->h.payload_len && type != LM_MSG_SHARD_PUT) {
    lm_conn_send_errorf(c, f->h.request_id, LOOM_PROTOCOL, "%s does not take a payload", lm_msg_name(type));
    return;
  }
  int rc = lm_msg_decode(f, &m, &err);
  if (rc == LOOM_UNSUPPORTED) {
    lm_conn_send_errorf(c, f->h.request_id, LOOM_UNSUPPORTED, "unknown message type %u", type);
    return;
  }
  if (rc < 0) {
    lm_conn_close_with_error(c, f->h.request_id, rc, "%s", err.msg);
    return;
  }
  if (type == LM_MSG_HELLO) {
    const Lmw__Hello *h = (const Lmw__Hello *)m;
    if (dc->hello || h->protocol_version != LM_PROTOCOL_VERSION) {
      lm_conn_close_with_error(c, f->h.request_id, LOOM_PROTOCOL, "bad HELLO (sent twice, or protocol version %u)",
                               h->protocol_version);
    } else if (h->relay_worker &&
               (!dc->sw->registered ||
                !lm_token_check(dc->sw->key, LM_TOKEN_RELAY, 0, h->relay_worker - 1, dc->sw->worker_id, 0, 0, NULL, 0,
                                h->relay_token.data, h->relay_token.len))) {
      lm_conn_close_with_error(c, f->h.request_id, LOOM_PERMISSION, "worker %u refuses worker %u as its relay: the "
                               "relay token is not valid", dc->sw->worker_id, h->relay_worker - 1);
    } else {
      dc->hello = true;
      dc->relay = h->relay_worker;
      lm_conn_set_established(c);
      Lmw__HelloReply r = LMW__HELLO_REPLY__INIT;
      r.protocol_version = LM_PROTOCOL_VERSION;
      r.software = "loom " LOOM_VERSION_STRING " (simulated worker)";
      r.max_meta = LM_FRAME_META_DEFAULT_MAX;
      r.max_payload = SIM_MAX_PUT;
      lm_conn_send(c, LM_MSG_HELLO_REPLY, f->h.request_id, &r.base, NULL, 0, NULL, NULL, NULL);
    }
  } else if (!dc->hello) {
    lm_conn_close_with_error(c, f->h.request_id, LOOM_PROTOCOL, "expected HELLO first, got %s", lm_msg_name(type));
  } else if (type == LM_MSG_SHARD_PUT) {
    on_put(dc, f, (const Lmw__ShardPut *)m);
  } else if (type == LM_MSG_SHARD_GET) {
    on_get(dc, f, (const Lmw__ShardGet *)m);
  } else if (dc->relay && type == LM_MSG_RUN) {
    relayed_run(dc->sw, c, (Lmw__Run *)m); /* takes m */
    return;
  } else if (dc->relay && type == LM_MSG_ABORT_LAUNCH) { /* a RUN that waits is answered; the others are done */
    relayed_drop(dc->sw, c, ((Lmw__AbortLaunch *)m)->seq, "aborted before it ran");
  } else if (type == LM_MSG_PING) {
    Lmw__Pong pong = LMW__PONG__INIT;
    pong.nonce = ((Lmw__Ping *)m)->nonce;
    lm_conn_send(c, LM_MSG_PONG, f->h.request_id, &pong.base, NULL, 0, NULL, NULL, NULL);
  } else {
    lm_conn_send_errorf(c, f->h.request_id, LOOM_PROTOCOL, "%s is not a request a simulated worker's data port answers",
                        lm_msg_name(type));
  }
  lm_msg_free(m);
}

static void data_close(lm_conn *c, int code, const char *reason) {
  (void)code, (void)reason;
  sim_dconn *dc = lm_conn_user(c);
  sim *s = dc->sw->s;
  if (dc->prev) dc->prev->next = dc->next;
  else s->dconns = dc->next;
  if (dc->next) dc->next->prev = dc->prev;
  if (dc->relay) relayed_drop(dc->sw, c, 0, NULL);
  for (sim_get **pp = &dc->sw->parked; *pp;) {
    sim_get *g = *pp;
    if (g->conn == c) {
      *pp = g->next;
      free(g);
    } else {
      pp = &g->next;
    }
  }
  free(dc);
}

static const lm_conn_ops g_data_ops = {.on_frame = data_frame, .on_close = data_close};

static void on_data_connection(uv_stream_t *server, int status) {
  simw *w = server->data;
  if (status < 0) return;
  lm_conn_config cfg;
  lm_conn_config_default(&cfg);
  cfg.limits.max_payload = SIM_MAX_PUT;
  sim_dconn *dc = calloc(1, sizeof *dc);
  lm_conn *conn = dc ? lm_conn_new(&w->s->loop, &g_data_ops, &cfg, dc) : NULL;
  if (!conn) {
    free(dc);
    uv_tcp_t *t = malloc(sizeof *t);
    if (t && uv_tcp_init(&w->s->loop, t) == 0) {
      uv_accept(server, (uv_stream_t *)t);
      uv_close((uv_handle_t *)t, (uv_close_cb)free);
    } else {
      free(t);
    }
    return;
  }
  dc->sw = w;
  dc->conn = conn;
  dc->next = w->s->dconns;
  if (dc->next) dc->next->prev = dc;
  w->s->dconns = dc;
  lm_conn_accept(conn, server); /* a failure closes it: data_close unlists it */
}

/* ---- the control connection ---- */

static void send_heartbeats(uv_timer_t *t) {
  sim *s = t->data;
  Lmw__Heartbeat hb = LMW__HEARTBEAT__INIT;
  Lmw__TransferStats ts = LMW__TRANSFER_STATS__INIT;
  hb.transfers = &ts;
  for (uint32_t i = 0; i < s->n; i++) {
    simw *w = &s->w[i];
    if (!w->registered || !w->conn) continue;
    hb.sequence = ++w->hb_seq;
    send_ctl(w, LM_MSG_HEARTBEAT, 0, &hb.base);
  }
}

static void on_registered(simw *w, const Lmw__RegisterWorkerReply *r) {
  sim *s = w->s;
  if (r->n_device_ids != s->cfg.devices || (!s->have_secret && r->token_key.len != LM_TOKEN_KEY_SIZE) ||
      (s->have_secret && r->token_key.len)) {
    lm_conn_close(w->conn, LOOM_PROTOCOL, "bad REGISTER_WORKER_REPLY");
    return;
  }
  if (!s->have_secret) memcpy(w->key, r->token_key.data, LM_TOKEN_KEY_SIZE);
  w->registered = true;
  w->worker_id = r->worker_id;
  lm_relay_set_self(w->relay, w->worker_id);
  w->cseq = 0;
  lm_conn_set_established(w->conn);
  s->connecting--;
  s->registered++;
  uint8_t blob[128];
  size_t len = lm_dp_sim_address(w->worker_id, blob, sizeof blob);
  Lmw__WorkerDataplane dp = LMW__WORKER_DATAPLANE__INIT;
  dp.address.data = blob;
  dp.address.len = len;
  send_ctl(w, LM_MSG_WORKER_DATAPLANE, 0, &dp.base);
  if (!s->heartbeat_on) {
    uint32_t ms = r->heartbeat_interval_ms ? r->heartbeat_interval_ms : 500;
    if (ms < 10) ms = 10;
    uv_timer_start(&s->heartbeat, send_heartbeats, ms, ms);
    s->heartbeat_on = true;
  }
  if (s->registered == s->n)
    lm_info("%u simulated workers registered with %s: %u devices each, worker ids from %u", s->n, s->cfg.controller,
            s->cfg.devices, s->w[0].worker_id);
  start_more(s);
}

static void send_register(simw *w) {
  sim *s = w->s;
  uint32_t n = s->cfg.devices;
  Lmw__DeviceSpec *specs = calloc(n, sizeof *specs);
  Lmw__DeviceSpec **ptrs = calloc(n, sizeof *ptrs);
  if (!specs || !ptrs) {
    free(specs), free(ptrs);
    lm_conn_close(w->conn, LOOM_NO_MEMORY, "out of host memory registering");
    return;
  }
  for (uint32_t i = 0; i < n; i++) {
    lmw__device_spec__init(&specs[i]);
    specs[i].local_index = i;
    specs[i].kind = "cpu";
    specs[i].memory_capacity = s->cfg.device_memory;
    ptrs[i] = &specs[i];
  }
  Lmw__RegisterWorker m = LMW__REGISTER_WORKER__INIT;
  m.host = s->host;
  m.pid = (uint32_t)getpid();
  m.slice = (char *)s->cfg.slice;
  m.n_devices = n;
  m.devices = ptrs;
  m.data_address = w->data_addr;
  if (s->have_secret) {
    m.auth_proof.data = w->proof;
    m.auth_proof.len = sizeof w->proof;
  }
  send_ctl(w, LM_MSG_REGISTER_WORKER, RID_REGISTER, &m.base);
  free(specs);
  free(ptrs);
}

static void on_hello_reply(simw *w, const Lmw__HelloReply *r) {
  sim *s = w->s;
  if (s->have_secret) {
    uint8_t want[LM_AUTH_MAC_SIZE];
    if (r->auth_challenge.len != LM_AUTH_NONCE_SIZE || r->auth_proof.len != LM_AUTH_MAC_SIZE) {
      lm_conn_close(w->conn, LOOM_PERMISSION, "the controller did not authenticate itself");
      return;
    }
    lm_auth_controller_proof(s->secret, w->nonce, r->auth_challenge.data, want);
    if (!lm_auth_equal(want, r->auth_proof.data, sizeof want)) {
      lm_conn_close(w->conn, LOOM_PERMISSION, "the controller does not hold this cluster secret");
      return;
    }
    lm_auth_worker_proof(s->secret, w->nonce, r->auth_challenge.data, w->proof);
    lm_auth_transfer_key(s->secret, w->nonce, r->auth_challenge.data, w->key);
  }
  send_register(w);
}

static void ctl_frame(lm_conn *c, lm_frame *f) {
  simw *w = lm_conn_user(c);
  ProtobufCMessage *m;
  lm_err err;
  unsigned type = f->h.type;
  if (type == LM_MSG_ERROR) {
    lm_msg_error_status(f, &err);
    lm_conn_close(c, err.code, "%s %s", w->registered ? "the controller dropped it:" : "the controller refused it:",
                  err.msg);
    return;
  }
  if (f->h.payload_len && type != LM_MSG_LOAD_PROGRAM && type != LM_MSG_RELAY_RUN) {
    lm_conn_close_with_error(c, f->h.request_id, LOOM_PROTOCOL, "%s does not take a payload", lm_msg_name(type));
    return;
  }
  int rc = lm_msg_decode(f, &m, &err);
  if (rc < 0) {
    lm_conn_close_with_error(c, f->h.request_id, rc, "%s", err.msg);
    return;
  }
  if (!w->registered) {
    if (type == LM_MSG_HELLO_REPLY && f->h.request_id == RID_HELLO) on_hello_reply(w, (Lmw__HelloReply *)m);
    else if (type == LM_MSG_REGISTER_WORKER_REPLY && f->h.request_id == RID_REGISTER)
      on_registered(w, (Lmw__RegisterWorkerReply *)m);
    lm_msg_free(m);
    return;
  }
  switch (type) {
  case LM_MSG_PEERS: break; /* no data plane to tell */
  case LM_MSG_WORKER_LOST: lm_relay_worker_lost(w->relay, ((Lmw__WorkerLost *)m)->worker_id, ((Lmw__WorkerLost *)m)->reason); break;
  case LM_MSG_RELAY_RUN: lm_relay_on_run(w->relay, f, (Lmw__RelayRun *)m); break;
  case LM_MSG_LOAD_PROGRAM: on_load(w, f, (Lmw__LoadProgram *)m); break;
  case LM_MSG_UNLOAD_PROGRAM: on_unload(w, ((Lmw__UnloadProgram *)m)->program); break;
  case LM_MSG_RUN: on_run(w, (Lmw__Run *)m, NULL, false); break;
  case LM_MSG_ABORT_LAUNCH: lm_relay_on_abort(w->relay, (Lmw__AbortLaunch *)m); break; /* its own RUN is done */
  case LM_MSG_FREE_ARRAYS: {
    const Lmw__FreeArrays *fa = (Lmw__FreeArrays *)m;
    for (size_t i = 0; i < fa->n_ids; i++)
      for (uint32_t d = 0; d < w->s->cfg.devices; d++) shard_drop(w, fa->session, fa->ids[i], d);
    break;
  }
  case LM_MSG_SESSION_CLOSED: shard_drop(w, ((Lmw__SessionClosed *)m)->session, 0, UINT32_MAX); break;
  default: lm_warn("simulated worker %u: ignoring unexpected %s", w->worker_id, lm_msg_name(type)); break;
  }
  lm_msg_free(m);
  w->cseq++;
  if (w->parked) poll_parked(w);
  if (w->relayed) poll_relayed(w);
}

static void ctl_connected(lm_conn *c) {
  simw *w = lm_conn_user(c);
  sim *s = w->s;
  Lmw__Hello h = LMW__HELLO__INIT;
  h.protocol_version = LM_PROTOCOL_VERSION;
  h.role = LMW__ROLE__ROLE_WORKER;
  h.software = "loom " LOOM_VERSION_STRING " (simulated worker)";
  h.host = s->host;
  h.pid = (uint32_t)getpid();
  if (s->have_secret) {
    lm_err err;
    if (lm_auth_random(w->nonce, sizeof w->nonce, &err) < 0) {
      lm_conn_close(c, err.code, "%s", err.msg);
      return;
    }
    h.auth_nonce.data = w->nonce;
    h.auth_nonce.len = sizeof w->nonce;
  }
  send_ctl(w, LM_MSG_HELLO, RID_HELLO, &h.base);
}

static void connect_one(simw *w);

static void on_retry(uv_timer_t *t) { connect_one(t->data); }

static void ctl_closed(lm_conn *c, int code, const char *reason) {
  simw *w = lm_conn_user(c);
  sim *s = w->s;
  w->conn = NULL;
  w->gen++;
  if (s->stopping) return;
  if (w->registered) { /* a worker that loses its controller ends, as a real one does */
    w->registered = false;
    w->gone = true;
    s->registered--;
    s->lost++;
    lm_warn("simulated worker %u lost the controller: %s", w->worker_id, reason);
    if (s->registered == 0 && s->connecting == 0) sim_stop(s, LOOM_CLOSED, "every simulated worker lost the controller");
    return;
  }
  if (code == LOOM_CONNECT && uv_now(&s->loop) - w->first_ms < s->cfg.connect_timeout_ms) {
    uv_timer_start(&w->retry, on_retry, SIM_RETRY_MS, 0);
    return;
  }
  s->connecting--;
  char msg[LM_ERR_MSG_MAX];
  snprintf(msg, sizeof msg, "simulated worker %u cannot register with %s: %.800s", w->idx, s->cfg.controller, reason);
  sim_stop(s, code < 0 ? code : LOOM_CONNECT, msg);
}

static const lm_conn_ops g_ctl_ops = {.on_frame = ctl_frame, .on_connect = ctl_connected, .on_close = ctl_closed};

static void connect_one(simw *w) {
  sim *s = w->s;
  if (s->stopping) return;
  w->conn = lm_conn_new(&s->loop, &g_ctl_ops, &s->conn_cfg, w);
  if (!w->conn) {
    sim_stop(s, LOOM_NO_MEMORY, "out of host memory connecting");
    return;
  }
  lm_conn_connect(w->conn, (struct sockaddr *)&s->addr);
}

/* Keeps up to SIM_CONNECTING_MAX registrations in flight until every worker has started. */
static void start_more(sim *s) {
  while (!s->stopping && s->next_start < s->n && s->connecting < SIM_CONNECTING_MAX) {
    simw *w = &s->w[s->next_start++];
    lm_err err;
    char listen[LM_ADDR_MAX + 8];
    snprintf(listen, sizeof listen, "%s:0", s->data_host);
    w->data_server.data = w;
    if (lm_listen(&s->loop, &w->data_server, listen, on_data_connection, w->data_addr, sizeof w->data_addr, &err) < 0) {
      sim_stop(s, err.code, err.msg);
      return;
    }
    w->data_server.data = w;
    w->data_open = true;
    if (!(w->relay = lm_relay_new(&s->loop, &g_relay_ops, w))) {
      sim_stop(s, LOOM_NO_MEMORY, "out of host memory");
      return;
    }
    uv_timer_init(&s->loop, &w->retry);
    w->retry.data = w;
    w->started = true;
    w->first_ms = uv_now(&s->loop);
    s->connecting++;
    connect_one(w);
  }
}

static void sim_stop(sim *s, int rc, const char *msg) {
  if (s->stopping) return;
  s->stopping = true;
  if (rc < 0 && s->rc == 0) {
    s->rc = rc;
    lm_errf(&s->err, rc, "%s", msg);
  }
  uv_close((uv_handle_t *)&s->sigint, NULL);
  uv_close((uv_handle_t *)&s->sigterm, NULL);
  uv_close((uv_handle_t *)&s->heartbeat, NULL);
  for (uint32_t i = 0; i < s->n; i++) {
    simw *w = &s->w[i];
    if (!w->started) continue;
    uv_close((uv_handle_t *)&w->retry, NULL);
    if (w->data_open) uv_close((uv_handle_t *)&w->data_server, NULL);
    w->data_open = false;
    if (w->conn) lm_conn_close(w->conn, 0, "worker stopping");
    lm_relay_stop(w->relay);
  }
  for (sim_dconn *dc = s->dconns, *n; dc; dc = n) {
    n = dc->next;
    lm_conn_close(dc->conn, 0, "worker stopping");
  }
}

static void on_signal(uv_signal_t *h, int signum) {
  sim *s = h->data;
  lm_info("stopping %u simulated workers (%s): %llu runs, %llu puts, %llu gets served", s->n,
          signum == SIGINT ? "SIGINT" : "SIGTERM", (unsigned long long)s->runs, (unsigned long long)s->puts,
          (unsigned long long)s->gets);
  sim_stop(s, 0, NULL);
}

static void close_walk(uv_handle_t *h, void *arg) {
  (void)arg;
  if (!uv_is_closing(h)) uv_close(h, NULL);
}

int lm_sim_run(const lm_worker_config *cfg, uint32_t n, lm_err *err) {
  if (n == 0 || n > LM_SIM_MAX_WORKERS)
    return lm_errf(err, LOOM_INVALID_ARGUMENT, "--simulate takes 1-%d workers (got %u)", LM_SIM_MAX_WORKERS, n);
  if (cfg->devices == 0 || cfg->devices > LM_WORKER_MAX_DEVICES)
    return lm_errf(err, LOOM_INVALID_ARGUMENT, "device count must be 1-%d (got %u)", LM_WORKER_MAX_DEVICES,
                   cfg->devices);
  if (cfg->backend && strcmp(cfg->backend, "interp"))
    return lm_errf(err, LOOM_INVALID_ARGUMENT, "simulated workers execute nothing: --backend does not apply");
  sim *s = calloc(1, sizeof *s);
  if (!s || !(s->w = calloc(n, sizeof *s->w))) {
    free(s);
    return lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  }
  s->cfg = *cfg;
  s->n = n;
  socklen_t sl;
  int rc = 0;
  if (cfg->secret_file) {
    rc = lm_auth_secret_read(cfg->secret_file, s->secret, err);
    s->have_secret = rc == 0;
  }
  if (rc == 0) rc = lm_addr_resolve(cfg->controller, &s->addr, &sl, err);
  snprintf(s->data_host, sizeof s->data_host, "127.0.0.1");
  if (rc == 0 && cfg->data_listen) { /* its host; each simulated worker takes a free port there */
    snprintf(s->data_host, sizeof s->data_host, "%s", cfg->data_listen);
    char *colon = strrchr(s->data_host, ':');
    if (colon && strcmp(colon, ":0") != 0)
      rc = lm_errf(err, LOOM_INVALID_ARGUMENT, "with --simulate, --data-listen takes HOST or HOST:0 (each simulated "
                   "worker listens on a free port)");
    else if (colon) *colon = 0;
  }
  if (rc < 0 || uv_loop_init(&s->loop) != 0) {
    if (rc == 0) rc = lm_errf(err, LOOM_INTERNAL, "cannot create the event loop");
    free(s->w);
    free(s);
    return rc;
  }
  s->loop.data = s;
  for (uint32_t i = 0; i < n; i++) s->w[i].s = s, s->w[i].idx = i;
  if (gethostname(s->host, sizeof s->host - 1) != 0 || !lm_msg_name_ok(s->host, 255)) strcpy(s->host, "localhost");
  signal(SIGPIPE, SIG_IGN);
  lm_conn_config_default(&s->conn_cfg);
  s->conn_cfg.handshake_timeout_ms = 0;
  /* no deadline on a frame from the controller: a busy controller finishing a partly written frame
   * (a RELAY_RUN behind a burst of launches) is not a stalled hostile peer, and dropping it would
   * end the worker; a controller that is gone closes the connection */
  s->conn_cfg.frame_timeout_ms = 0;
  s->conn_cfg.limits.max_meta = LM_FRAME_META_HARD_MAX;
  uv_signal_init(&s->loop, &s->sigint);
  uv_signal_init(&s->loop, &s->sigterm);
  uv_timer_init(&s->loop, &s->heartbeat);
  s->sigint.data = s->sigterm.data = s->heartbeat.data = s;
  uv_signal_start(&s->sigint, on_signal, SIGINT);
  uv_signal_start(&s->sigterm, on_signal, SIGTERM);
  lm_info("starting %u simulated workers x %u devices against %s", n, cfg->devices, cfg->controller);
  start_more(s);
  uv_run(&s->loop, UV_RUN_DEFAULT);
  uv_walk(&s->loop, close_walk, NULL);
  uv_run(&s->loop, UV_RUN_DEFAULT);
  uv_loop_close(&s->loop);
  rc = s->rc;
  if (rc < 0 && err) *err = s->err;
  for (uint32_t i = 0; i < n; i++) {
    simw *w = &s->w[i];
    shards_free(w);
    while (w->progs) {
      sim_load *l = w->progs;
      w->progs = l->next;
      prog_release(s, l->p);
      free(l);
    }
    while (w->parked) {
      sim_get *g = w->parked;
      w->parked = g->next;
      free(g);
    }
    while (w->relayed) {
      sim_relayed *x = w->relayed;
      w->relayed = x->next;
      lm_msg_free(&x->m->base);
      free(x);
    }
    lm_relay_free(w->relay);
  }
  while (s->progs) { /* analyses cut short by the stop */
    sim_prog *p = s->progs;
    p->refs = 1;
    prog_release(s, p);
  }
  lm_auth_wipe(s->secret, sizeof s->secret);
  free(s->zeros);
  free(s->w);
  free(s);
  return rc;
}
