/* The worker's data port: clients connect here directly to put shards into device memory and
 * get them back, so bulk bytes never pass through the controller. Every request carries a token
 * the controller issued (net/token.h). A put's payload is received straight into the device
 * buffer allocated (and charged to the device) as soon as its metadata arrives; a get is sent
 * from the device buffer itself. A get for a shard still being computed, or named by a
 * controller message this worker has not read yet, waits ("parked") until it can be served.
 * Clients on the same host may instead connect to the local socket and, once their HELLO enabled
 * it, have the worker copy the bytes straight between their memory and the device buffer
 * (wk_local.c): same checks, same tokens, same ordering.
 *
 * Messages: HELLO -> HELLO_REPLY; SHARD_PUT (+ payload) -> ACK; SHARD_GET -> SHARD_GET_REPLY
 * (+ payload); local socket only: SHARD_PUT_LOCAL -> ACK, SHARD_GET_LOCAL -> SHARD_GET_REPLY.
 * docs/protocol.md has the details. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/log.h"
#include "worker/wk.h"

#define PARK_MAX_MS 60000 /* a get waiting longer than this for a controller message fails */

typedef struct wk_lop wk_lop;

struct wk_dconn {
  wk *w;
  lm_conn *conn;
  bool hello;
  bool local;                  /* accepted on the local socket */
  bool local_ok;               /* ... and its HELLO enabled local transfers */
  wk_peer *peer;               /* local: the client process */
  /* the put whose payload is being received */
  Lmw__ShardPut *put;
  lm_buffer **bufs;            /* [put->n_targets] */
  wk_lop *lops;                /* local transfers in flight */
  uint32_t relay;              /* a relay worker's connection (hierarchical dispatch): its id + 1 ... */
  uint64_t link;               /* ... and the link id its launches answer to; 0 otherwise */
  struct wk_dconn *prev, *next;
};

/* A get not answered yet: being checked, or parked until its shard or controller message comes. */
struct wk_parked {
  wk_dconn *dc;
  uint64_t rid;
  uint64_t session, array;
  uint32_t dev;
  uint64_t min_cseq;
  uint64_t since_ms;
  bool local;                  /* SHARD_GET_LOCAL: the shard goes into r */
  wk_ranges r;
  struct wk_parked *next;
};

/* A local transfer in flight (its copy runs on the thread pool). */
struct wk_lop {
  wk_dconn *dc;                /* NULL once the connection closed: the result is dropped */
  uint64_t rid;
  Lmw__ShardPut *put;          /* a put: the request; NULL for a get */
  lm_buffer **bufs;            /* put: [put->n_targets] new buffers; get: [1], the shard */
  size_t nbufs;
  uint64_t nbytes;
  wk_copy *cp;                 /* until the copy ends */
  struct wk_lop *prev, *next;
};

static void release_bufs(lm_buffer **bufs, size_t n) {
  for (size_t i = 0; bufs && i < n; i++) lm_buffer_release(bufs[i]);
  free(bufs);
}

static void put_state_free(wk_dconn *dc) {
  release_bufs(dc->bufs, dc->put ? dc->put->n_targets : 0);
  dc->bufs = NULL;
  lm_msg_free(dc->put ? &dc->put->base : NULL);
  dc->put = NULL;
}

#define reply_error(dc, rid, code, ...) lm_conn_send_errorf((dc)->conn, rid, code, __VA_ARGS__)

/* Checks a put of nbytes (its payload, or its ranges) and allocates its buffers, one per target
 * device, into *out ([m->n_targets], charged to the devices). */
static int check_put(wk_dconn *dc, const Lmw__ShardPut *m, uint64_t nbytes_given, lm_buffer ***out, lm_err *err) {
  wk *w = dc->w;
  *out = NULL;
  if (!dc->hello) return lm_errf(err, LOOM_PROTOCOL, "SHARD_PUT before HELLO");
  if (!lm_dtype_valid((int)m->dtype) || m->n_dims > LM_MAX_RANK)
    return lm_errf(err, LOOM_INVALID_ARGUMENT, "bad shard type (dtype %u, rank %zu)", m->dtype, m->n_dims);
  if (m->n_targets == 0 || m->n_targets > w->cfg.devices)
    return lm_errf(err, LOOM_INVALID_ARGUMENT, "a put names %zu devices (1-%u)", m->n_targets, w->cfg.devices);
  uint64_t numel = 1;
  for (size_t i = 0; i < m->n_dims; i++)
    if (m->dims[i] > INT64_MAX || __builtin_mul_overflow(numel, m->dims[i], &numel))
      return lm_errf(err, LOOM_INVALID_ARGUMENT, "shard shape overflows");
  uint64_t nbytes;
  if (__builtin_mul_overflow(numel, (uint64_t)lm_dtype_size((lm_dtype)m->dtype), &nbytes) || nbytes != nbytes_given)
    return lm_errf(err, LOOM_INVALID_ARGUMENT, "the %s %llu bytes, the shard's shape needs %llu",
                   m->n_ranges ? "ranges hold" : "payload has", (unsigned long long)nbytes_given,
                   (unsigned long long)nbytes);
  for (size_t i = 0; i < m->n_targets; i++) {
    const Lmw__ShardTarget *t = m->targets[i];
    if (t->local_index >= w->cfg.devices)
      return lm_errf(err, LOOM_INVALID_ARGUMENT, "no device %u on worker %u", t->local_index, w->worker_id);
    for (size_t j = 0; j < i; j++)
      if (m->targets[j]->local_index == t->local_index && m->targets[j]->array == t->array)
        return lm_errf(err, LOOM_INVALID_ARGUMENT, "a put names device %u twice", t->local_index);
    if (!lm_token_check(w->token_key, LM_TOKEN_PUT, m->session, t->array, w->worker_id, t->local_index, m->dtype,
                        m->dims, m->n_dims, t->token.data, t->token.len) &&
        !lm_token_check(w->token_key, LM_TOKEN_PUT_SNAP, m->session, t->array, w->worker_id, t->local_index, m->dtype,
                        m->dims, m->n_dims, t->token.data, t->token.len))
      return lm_errf(err, LOOM_PERMISSION, "the token for array %llu on device %u is not valid",
                     (unsigned long long)t->array, t->local_index);
  }
  if (wk_store_session_closed(&w->store, m->session)) /* after the tokens: only its owner hears this */
    return lm_errf(err, LOOM_NOT_FOUND, "session %llu is closed", (unsigned long long)m->session);
  lm_type ty;
  int64_t dims[LM_MAX_RANK];
  for (size_t i = 0; i < m->n_dims; i++) dims[i] = (int64_t)m->dims[i];
  lm_type_tensor(&ty, (lm_dtype)m->dtype, (int)m->n_dims, dims);
  lm_buffer **bufs = calloc(m->n_targets, sizeof *bufs);
  if (!bufs) return lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  for (size_t i = 0; i < m->n_targets; i++) {
    uint32_t dev = m->targets[i]->local_index;
    int rc = lm_buffer_alloc(w->devs[dev].dev, &ty, &bufs[i], err);
    if (rc < 0) {
      lm_err_prefix(err, "worker %u device %u", w->worker_id, dev);
      release_bufs(bufs, m->n_targets);
      return rc;
    }
  }
  *out = bufs;
  return 0;
}

/* Lists the put's shards (the slots take the buffers, set to NULL). */
static int store_put(wk *w, const Lmw__ShardPut *m, lm_buffer **bufs, lm_err *err) {
  if (wk_store_session_closed(&w->store, m->session)) /* closed while the bytes were on their way */
    return lm_errf(err, LOOM_NOT_FOUND, "session %llu is closed", (unsigned long long)m->session);
  for (size_t i = 0; i < m->n_targets; i++) {
    wk_slot *s = wk_slot_new(m->session, m->targets[i]->array, m->targets[i]->local_index);
    if (!s) return lm_errf(err, LOOM_NO_MEMORY, "out of host memory on worker %u", w->worker_id);
    wk_slot_finish(&w->store, s, bufs[i], 0, NULL);
    bufs[i] = NULL;
    wk_store_put(&w->store, s);
    wk_slot_release(&w->store, s);
  }
  return 0;
}

static int payload_sink(lm_conn *c, const lm_frame *f, void **dst, lm_err *err) {
  wk_dconn *dc = lm_conn_user(c);
  /* Nothing else takes a payload: refuse it before any byte of it is read, or a peer could make
   * this worker buffer up to the hard frame limit (the stream fails; the client hears why). */
  if (f->h.type != LM_MSG_SHARD_PUT)
    return lm_errf(err, LOOM_PROTOCOL, "%s does not take a payload", lm_msg_name(f->h.type));
  ProtobufCMessage *m;
  LM_TRY(lm_msg_decode(f, &m, err));
  put_state_free(dc);
  Lmw__ShardPut *pm = (Lmw__ShardPut *)m;
  int rc = pm->n_ranges ? lm_errf(err, LOOM_PROTOCOL, "SHARD_PUT carries no ranges (SHARD_PUT_LOCAL does)")
                        : check_put(dc, pm, f->h.payload_len, &dc->bufs, err);
  if (rc < 0) {
    lm_msg_free(m);
    return rc; /* the stream fails: the client hears why, then the connection closes */
  }
  dc->put = pm;
  *dst = dc->bufs[0]->data;
  return 0;
}

static void send_ack(wk_dconn *dc, uint64_t rid) {
  Lmw__Ack ack = LMW__ACK__INIT;
  lm_conn_send(dc->conn, LM_MSG_ACK, rid, &ack.base, NULL, 0, NULL, NULL, NULL);
}

void wk_data_ack(wk_dconn *dc, uint64_t rid) { send_ack(dc, rid); }

/* Acknowledges a stored put, or (its tokens say the controller snapshots it: LM_TOKEN_PUT_SNAP)
 * once the snapshots are kept in another worker's host memory (wk_shardcopy.c). */
static void put_ack(wk_dconn *dc, uint64_t rid, const Lmw__ShardPut *m) {
  wk *w = dc->w;
  uint32_t snap[LM_WORKER_MAX_DEVICES];
  size_t n = 0;
  for (size_t i = 0; i < m->n_targets && n < LM_WORKER_MAX_DEVICES; i++) {
    const Lmw__ShardTarget *t = m->targets[i];
    if (lm_token_check(w->token_key, LM_TOKEN_PUT_SNAP, m->session, t->array, w->worker_id, t->local_index, m->dtype,
                       m->dims, m->n_dims, t->token.data, t->token.len))
      snap[n++] = t->local_index;
  }
  if (n) wk_sc_defer_ack(w, dc, rid, m->session, m->targets[0]->array, snap, n);
  else send_ack(dc, rid);
}

static void finish_put(wk_dconn *dc, const lm_frame *f) {
  wk *w = dc->w;
  lm_err err;
  if (!dc->put) { /* an empty shard (no payload, so no sink call) */
    ProtobufCMessage *m;
    int rc = lm_msg_decode(f, &m, &err);
    if (rc == 0) {
      Lmw__ShardPut *pm = (Lmw__ShardPut *)m;
      rc = pm->n_ranges ? lm_errf(&err, LOOM_PROTOCOL, "SHARD_PUT carries no ranges (SHARD_PUT_LOCAL does)")
                        : check_put(dc, pm, f->h.payload_len, &dc->bufs, &err);
      if (rc == 0) dc->put = pm;
      else lm_msg_free(m);
    }
    if (rc < 0) {
      reply_error(dc, f->h.request_id, rc, "%s", err.msg);
      return;
    }
  }
  Lmw__ShardPut *m = dc->put;
  for (size_t i = 1; i < m->n_targets; i++) /* the other devices that hold the same shard */
    if (dc->bufs[i]->nbytes) memcpy(dc->bufs[i]->data, dc->bufs[0]->data, dc->bufs[0]->nbytes);
  uint64_t nbytes = dc->bufs[0]->nbytes;
  int rc = store_put(w, m, dc->bufs, &err);
  if (rc < 0) {
    put_state_free(dc);
    reply_error(dc, f->h.request_id, rc, "%s", err.msg);
    return;
  }
  w->xstats.stream_puts++;
  w->xstats.stream_put_bytes += nbytes;
  put_ack(dc, f->h.request_id, m);
  put_state_free(dc);
}

/* ---- local transfers ---- */

static void lop_free(wk_lop *op) {
  release_bufs(op->bufs, op->nbufs);
  lm_msg_free(op->put ? &op->put->base : NULL);
  free(op);
}

static void lop_unlink(wk_lop *op) {
  wk_dconn *dc = op->dc;
  if (!dc) return;
  if (op->prev) op->prev->next = op->next;
  else dc->lops = op->next;
  if (op->next) op->next->prev = op->prev;
  op->dc = NULL;
}

static void put_local_done(int code, const char *msg, void *arg) {
  wk_lop *op = arg;
  wk_dconn *dc = op->dc;
  lop_unlink(op);
  op->cp = NULL;
  if (dc) {
    wk *w = dc->w;
    lm_err err;
    int rc = code;
    if (rc < 0) lm_errf(&err, rc, "%s", msg);
    else rc = store_put(w, op->put, op->bufs, &err);
    if (rc == 0) {
      w->xstats.local_puts++;
      w->xstats.local_put_bytes += op->nbytes;
      put_ack(dc, op->rid, op->put);
    } else {
      if (rc == LOOM_UNSUPPORTED) w->xstats.local_refused++;
      reply_error(dc, op->rid, rc, "worker %u: %s", w->worker_id, err.msg);
    }
  }
  lop_free(op);
}

/* Starts a local copy for op (added to dc's list); on failure op is freed and the error sent. */
static void lop_start(wk_dconn *dc, wk_lop *op, bool to_peer, wk_ranges *r, wk_copy_done_fn done) {
  op->dc = dc;
  op->next = dc->lops;
  if (dc->lops) dc->lops->prev = op;
  dc->lops = op;
  lm_err err;
  if (wk_copy_start(&dc->w->loop, dc->peer, to_peer, op->bufs, op->nbufs, op->nbytes, r, done, op, &op->cp, &err) < 0) {
    lop_unlink(op);
    reply_error(dc, op->rid, err.code, "%s", err.msg);
    lop_free(op);
  }
}

static void on_put_local(wk_dconn *dc, const lm_frame *f, Lmw__ShardPut *m) {
  wk *w = dc->w;
  uint64_t rid = f->h.request_id;
  if (!dc->local_ok) {
    reply_error(dc, rid, LOOM_PERMISSION, "local transfers are not enabled on this connection to worker %u",
                w->worker_id);
    lm_msg_free(&m->base);
    return;
  }
  wk_ranges r;
  lm_buffer **bufs = NULL;
  lm_err err;
  int rc = wk_local_ranges(m->ranges, m->n_ranges, &r, &err);
  if (rc == 0) {
    rc = check_put(dc, m, r.total, &bufs, &err);
    if (rc < 0) wk_ranges_free(&r);
  }
  if (rc < 0) {
    reply_error(dc, rid, rc, "%s", err.msg);
    lm_msg_free(&m->base);
    return;
  }
  if (r.total == 0) { /* an empty shard: nothing to copy */
    rc = store_put(w, m, bufs, &err);
    release_bufs(bufs, m->n_targets);
    if (rc < 0) reply_error(dc, rid, rc, "%s", err.msg);
    else put_ack(dc, rid, m);
    lm_msg_free(&m->base);
    return;
  }
  wk_lop *op = calloc(1, sizeof *op);
  if (!op) {
    wk_ranges_free(&r);
    release_bufs(bufs, m->n_targets);
    lm_msg_free(&m->base);
    reply_error(dc, rid, LOOM_NO_MEMORY, "out of host memory on worker %u", w->worker_id);
    return;
  }
  op->rid = rid;
  op->put = m;
  op->bufs = bufs;
  op->nbufs = m->n_targets;
  op->nbytes = r.total;
  lop_start(dc, op, false, &r, put_local_done);
}

static void release_buffer(void *arg) { lm_buffer_release(arg); }

static void parked_free(wk_parked *p) {
  wk_ranges_free(&p->r);
  free(p);
}

static void get_reply_meta(const lm_buffer *buf, Lmw__ShardGetReply *r, uint64_t dims[LM_MAX_RANK]) {
  lmw__shard_get_reply__init(r);
  for (int i = 0; i < buf->type.rank; i++) dims[i] = (uint64_t)buf->type.dims[i];
  r->dtype = buf->type.dtype;
  r->n_dims = (size_t)buf->type.rank;
  r->dims = dims;
}

static void get_local_done(int code, const char *msg, void *arg) {
  wk_lop *op = arg;
  wk_dconn *dc = op->dc;
  lop_unlink(op);
  op->cp = NULL;
  if (dc) {
    wk *w = dc->w;
    if (code == 0) {
      w->xstats.local_gets++;
      w->xstats.local_get_bytes += op->nbytes;
      Lmw__ShardGetReply r;
      uint64_t dims[LM_MAX_RANK];
      get_reply_meta(op->bufs[0], &r, dims);
      r.written = op->nbytes;
      lm_conn_send(dc->conn, LM_MSG_SHARD_GET_REPLY, op->rid, &r.base, NULL, 0, NULL, NULL, NULL);
    } else {
      if (code == LOOM_UNSUPPORTED) w->xstats.local_refused++;
      reply_error(dc, op->rid, code, "worker %u: %s", w->worker_id, msg);
    }
  }
  lop_free(op);
}

/* Sends a ready shard: over the connection, or (local) copied into the client's ranges. */
static void serve_get(wk_dconn *dc, wk_parked *p, lm_buffer *buf) {
  wk *w = dc->w;
  Lmw__ShardGetReply r;
  uint64_t dims[LM_MAX_RANK];
  get_reply_meta(buf, &r, dims);
  if (!p->local) {
    w->xstats.stream_gets++;
    w->xstats.stream_get_bytes += buf->nbytes;
    if (buf->nbytes)
      lm_conn_send(dc->conn, LM_MSG_SHARD_GET_REPLY, p->rid, &r.base, buf->data, buf->nbytes, release_buffer, buf, NULL);
    else {
      lm_conn_send(dc->conn, LM_MSG_SHARD_GET_REPLY, p->rid, &r.base, NULL, 0, NULL, NULL, NULL);
      lm_buffer_release(buf);
    }
    return;
  }
  if (p->r.total != buf->nbytes) {
    reply_error(dc, p->rid, LOOM_INVALID_ARGUMENT,
                "the ranges hold %llu bytes, the shard of array %llu on device %u of worker %u has %llu",
                (unsigned long long)p->r.total, (unsigned long long)p->array, p->dev, w->worker_id,
                (unsigned long long)buf->nbytes);
    lm_buffer_release(buf);
    return;
  }
  if (!buf->nbytes) { /* an empty shard: nothing to write */
    lm_conn_send(dc->conn, LM_MSG_SHARD_GET_REPLY, p->rid, &r.base, NULL, 0, NULL, NULL, NULL);
    lm_buffer_release(buf);
    return;
  }
  wk_lop *op = calloc(1, sizeof *op);
  lm_buffer **bufs = malloc(sizeof *bufs);
  if (!op || !bufs) {
    free(op), free(bufs);
    lm_buffer_release(buf);
    reply_error(dc, p->rid, LOOM_NO_MEMORY, "out of host memory on worker %u", w->worker_id);
    return;
  }
  bufs[0] = buf;
  op->rid = p->rid;
  op->bufs = bufs;
  op->nbufs = 1;
  op->nbytes = buf->nbytes;
  lop_start(dc, op, true, &p->r, get_local_done);
}

/* Tries to answer a get: 1 when answered (data or error), 0 when it must wait. */
static int try_get(wk_parked *p) {
  wk_dconn *dc = p->dc;
  wk *w = dc->w;
  if (w->cseq < p->min_cseq) return 0;
  wk_slot *s = wk_store_get(&w->store, p->session, p->array, p->dev);
  if (!s) {
    reply_error(dc, p->rid, LOOM_NOT_FOUND, "array %llu has no shard on device %u of worker %u (deleted?)",
                (unsigned long long)p->array, p->dev, w->worker_id);
    return 1;
  }
  pthread_mutex_lock(&w->store.mu);
  int state = s->state;
  lm_buffer *buf = state == WK_SLOT_READY ? lm_buffer_retain(s->buf) : NULL;
  int code = s->code;
  char msg[LM_ERR_MSG_MAX];
  snprintf(msg, sizeof msg, "%s", s->msg ? s->msg : "failed");
  pthread_mutex_unlock(&w->store.mu);
  wk_slot_release(&w->store, s);
  if (state == WK_SLOT_PENDING) return 0;
  if (state == WK_SLOT_FAILED) {
    reply_error(dc, p->rid, code, "%s", msg);
    return 1;
  }
  serve_get(dc, p, buf);
  return 1;
}

static void on_get(wk_dconn *dc, const lm_frame *f, const Lmw__ShardGet *m, bool local) {
  wk *w = dc->w;
  uint64_t rid = f->h.request_id;
  if (local && !dc->local_ok) {
    reply_error(dc, rid, LOOM_PERMISSION, "local transfers are not enabled on this connection to worker %u",
                w->worker_id);
    return;
  }
  if (!local && m->n_ranges) {
    reply_error(dc, rid, LOOM_PROTOCOL, "SHARD_GET carries no ranges (SHARD_GET_LOCAL does)");
    return;
  }
  if (m->local_index >= w->cfg.devices) {
    reply_error(dc, rid, LOOM_INVALID_ARGUMENT, "no device %u on worker %u", m->local_index, w->worker_id);
    return;
  }
  if (!lm_token_check(w->token_key, LM_TOKEN_GET, m->session, m->array, w->worker_id, m->local_index, 0, NULL, 0,
                      m->token.data, m->token.len)) {
    reply_error(dc, rid, LOOM_PERMISSION, "the token for array %llu on device %u is not valid",
                (unsigned long long)m->array, m->local_index);
    return;
  }
  wk_parked *p = calloc(1, sizeof *p);
  if (!p) {
    reply_error(dc, rid, LOOM_NO_MEMORY, "out of host memory on worker %u", w->worker_id);
    return;
  }
  *p = (wk_parked){.dc = dc, .rid = rid, .session = m->session, .array = m->array, .dev = m->local_index,
                   .min_cseq = m->min_cseq, .since_ms = uv_now(&w->loop), .local = local};
  lm_err err;
  if (local && wk_local_ranges(m->ranges, m->n_ranges, &p->r, &err) < 0) {
    reply_error(dc, rid, err.code, "%s", err.msg);
    free(p);
    return;
  }
  if (try_get(p)) {
    parked_free(p);
    return;
  }
  p->next = w->parked;
  w->parked = p;
}

void wk_data_poll(wk *w) {
  wk_parked **pp = &w->parked;
  uint64_t now = uv_now(&w->loop);
  while (*pp) {
    wk_parked *p = *pp;
    int done = try_get(p);
    if (!done && w->cseq < p->min_cseq && now - p->since_ms > PARK_MAX_MS) {
      reply_error(p->dc, p->rid, LOOM_TIMEOUT, "worker %u did not hear from the controller about array %llu in time",
                  w->worker_id, (unsigned long long)p->array);
      done = 1;
    }
    if (done) {
      *pp = p->next;
      parked_free(p);
    } else {
      pp = &p->next;
    }
  }
}

void wk_data_session_closed(wk *w, uint64_t session) {
  wk_parked **pp = &w->parked;
  while (*pp) {
    wk_parked *p = *pp;
    if (p->session != session) {
      pp = &p->next;
      continue;
    }
    reply_error(p->dc, p->rid, LOOM_NOT_FOUND, "session %llu is closed", (unsigned long long)session);
    *pp = p->next;
    parked_free(p);
  }
}

static void on_hello(wk_dconn *dc, const lm_frame *f, const Lmw__Hello *h) {
  wk *w = dc->w;
  lm_conn *c = dc->conn;
  if (h->protocol_version != LM_PROTOCOL_VERSION) {
    lm_conn_close_with_error(c, f->h.request_id, LOOM_VERSION_MISMATCH,
                             "protocol version %u is not supported: this worker speaks version %d",
                             h->protocol_version, LM_PROTOCOL_VERSION);
    return;
  }
  if (dc->hello) {
    lm_conn_close_with_error(c, f->h.request_id, LOOM_PROTOCOL, "HELLO sent twice");
    return;
  }
  if (h->relay_worker) { /* a relay forwarding RUNs: the controller's token says it may */
    if (dc->local || !w->registered ||
        !lm_token_check(w->token_key, LM_TOKEN_RELAY, 0, h->relay_worker - 1, w->worker_id, 0, 0, NULL, 0,
                        h->relay_token.data, h->relay_token.len)) {
      lm_conn_close_with_error(c, f->h.request_id, LOOM_PERMISSION, "worker %u refuses worker %u as its relay: the "
                               "relay token is not valid", w->worker_id, h->relay_worker - 1);
      return;
    }
    dc->relay = h->relay_worker;
    dc->link = ++w->next_link;
  }
  dc->hello = true;
  lm_conn_set_established(c);
  Lmw__HelloReply r = LMW__HELLO_REPLY__INIT;
  r.protocol_version = LM_PROTOCOL_VERSION;
  r.software = "loom " LOOM_VERSION_STRING;
  r.max_meta = LM_FRAME_META_DEFAULT_MAX;
  r.max_payload = LM_FRAME_PAYLOAD_HARD_MAX;
  char why[LM_ERR_MSG_MAX] = "";
  if (!dc->local && h->local_offer && w->local_open) { /* the way to the local socket */
    r.local_socket = w->local_name;
    r.boot_id = w->boot_id;
    r.ptracer_pid = w->ptracer_pid;
  }
  if (dc->local && (h->local_probe.len || h->local_probe_address)) {
    dc->local_ok = wk_local_hello(dc->peer, h, why, sizeof why);
    r.local_transfer = dc->local_ok;
    if (!dc->local_ok) {
      r.local_refused = why;
      lm_info("local transfers refused to %s: %s", lm_conn_peer_name(c), why);
    }
  }
  lm_conn_send(c, LM_MSG_HELLO_REPLY, f->h.request_id, &r.base, NULL, 0, NULL, NULL, NULL);
}

static void on_frame(lm_conn *c, lm_frame *f) {
  wk_dconn *dc = lm_conn_user(c);
  wk *w = dc->w;
  unsigned type = f->h.type;
  if (type == LM_MSG_SHARD_PUT) {
    finish_put(dc, f);
    return;
  }
  if (f->h.payload_len) {
    reply_error(dc, f->h.request_id, LOOM_PROTOCOL, "%s does not take a payload", lm_msg_name(type));
    return;
  }
  ProtobufCMessage *m;
  lm_err err;
  int rc = lm_msg_decode(f, &m, &err);
  if (rc == LOOM_UNSUPPORTED) {
    reply_error(dc, f->h.request_id, LOOM_UNSUPPORTED, "unknown message type %u", type);
    return;
  }
  if (rc < 0) {
    lm_conn_close_with_error(c, f->h.request_id, rc, "%s", err.msg);
    return;
  }
  if (type == LM_MSG_HELLO) {
    on_hello(dc, f, (const Lmw__Hello *)m);
  } else if (!dc->hello) {
    lm_conn_close_with_error(c, f->h.request_id, LOOM_PROTOCOL, "expected HELLO first, got %s", lm_msg_name(type));
  } else if (type == LM_MSG_SHARD_GET || type == LM_MSG_SHARD_GET_LOCAL) {
    on_get(dc, f, (const Lmw__ShardGet *)m, type == LM_MSG_SHARD_GET_LOCAL);
  } else if (type == LM_MSG_SHARD_PUT_LOCAL) {
    on_put_local(dc, f, (Lmw__ShardPut *)m); /* takes m */
    return;
  } else if (dc->relay && type == LM_MSG_RUN) {
    wk_relayed_run(w, dc->link, (Lmw__Run *)m); /* takes m */
    return;
  } else if (dc->relay && type == LM_MSG_ABORT_LAUNCH) {
    wk_relayed_abort(w, dc->link, (const Lmw__AbortLaunch *)m);
  } else if (type == LM_MSG_PING) {
    Lmw__Pong pong = LMW__PONG__INIT;
    pong.nonce = ((Lmw__Ping *)m)->nonce;
    lm_conn_send(c, LM_MSG_PONG, f->h.request_id, &pong.base, NULL, 0, NULL, NULL, NULL);
  } else {
    reply_error(dc, f->h.request_id, LOOM_PROTOCOL, "%s is not a request the data port of worker %u answers",
                lm_msg_name(type), w->worker_id);
  }
  lm_msg_free(m);
}

static void on_close(lm_conn *c, int code, const char *reason) {
  wk_dconn *dc = lm_conn_user(c);
  wk *w = dc->w;
  if (code != 0 && code != LOOM_CLOSED && !w->stopping)
    lm_debug("data connection %s closed: %s", lm_conn_peer_name(c), reason);
  wk_parked **pp = &w->parked;
  while (*pp) {
    if ((*pp)->dc == dc) {
      wk_parked *p = *pp;
      *pp = p->next;
      parked_free(p);
    } else {
      pp = &(*pp)->next;
    }
  }
  if (dc->relay && !w->stopping) {
    char why[LM_ERR_MSG_MAX];
    snprintf(why, sizeof why, "its relay, worker %u, is gone (%.300s)", dc->relay - 1, reason);
    wk_relay_link_gone(w, dc->link, why);
  }
  put_state_free(dc);
  wk_sc_conn_gone(w, dc);
  /* copies in flight stop between chunks; their results are dropped when they end, and the
   * client sees the socket close only then (the peer holds a duplicate of it) */
  while (dc->lops) {
    wk_lop *op = dc->lops;
    wk_copy_cancel(op->cp);
    lop_unlink(op);
  }
  wk_peer_release(dc->peer);
  if (dc->prev) dc->prev->next = dc->next;
  else w->dconns = dc->next;
  if (dc->next) dc->next->prev = dc->prev;
  free(dc);
}

int wk_data_link_send(wk *w, uint64_t link, unsigned type, const ProtobufCMessage *m) {
  for (wk_dconn *dc = w->dconns; dc; dc = dc->next)
    if (dc->link == link) return lm_conn_send(dc->conn, type, 0, m, NULL, 0, NULL, NULL, NULL);
  return 0;
}

static const lm_conn_ops g_data_ops = {.on_frame = on_frame, .payload_sink = payload_sink, .on_close = on_close};

/* Refuses a pending connection we cannot serve (out of memory): accept it and close it. */
static void refuse_connection(wk *w, uv_stream_t *server, bool local) {
  uv_stream_t *t = malloc(local ? sizeof(uv_pipe_t) : sizeof(uv_tcp_t));
  int rc = !t ? -1 : local ? uv_pipe_init(&w->loop, (uv_pipe_t *)t, 0) : uv_tcp_init(&w->loop, (uv_tcp_t *)t);
  if (rc == 0) {
    uv_accept(server, t);
    uv_close((uv_handle_t *)t, (uv_close_cb)free);
  } else {
    free(t);
  }
}

static void accept_connection(uv_stream_t *server, int status, bool local) {
  wk *w = server->data;
  if (status < 0) { /* libuv has refused the connection (EMFILE: by its reserve descriptor) */
    static uint64_t last_ms;
    uint64_t now = uv_now(&w->loop);
    if (!last_ms || now - last_ms >= 10000) {
      lm_warn("cannot accept a %s data connection: %s%s", local ? "local" : "TCP", uv_strerror(status),
              status == UV_EMFILE || status == UV_ENFILE ? " (out of file descriptors: raise `ulimit -n`)" : "");
      last_ms = now;
    }
    return;
  }
  lm_conn_config cfg;
  lm_conn_config_default(&cfg);
  cfg.limits.max_payload = LM_FRAME_PAYLOAD_HARD_MAX; /* shards are checked against device memory */
  cfg.max_out_bytes = 0;  /* replies are shard buffers sent in place: no copies pile up */
  wk_dconn *dc = calloc(1, sizeof *dc);
  lm_conn *conn = !dc ? NULL : local ? lm_conn_new_local(&w->loop, &g_data_ops, &cfg, dc)
                                     : lm_conn_new(&w->loop, &g_data_ops, &cfg, dc);
  if (!conn) {
    free(dc);
    refuse_connection(w, server, local);
    return;
  }
  dc->w = w;
  dc->conn = conn;
  dc->local = local;
  dc->next = w->dconns;
  if (w->dconns) w->dconns->prev = dc;
  w->dconns = dc;
  if (lm_conn_accept(conn, server) == 0 && local) dc->peer = wk_local_accept(conn); /* NULL: refused at HELLO */
}

static void on_connection(uv_stream_t *server, int status) { accept_connection(server, status, false); }
static void on_local_connection(uv_stream_t *server, int status) { accept_connection(server, status, true); }

int wk_data_start(wk *w, const char *listen, lm_err *err) {
  w->data_server.data = w;
  LM_TRY(lm_listen(&w->loop, &w->data_server, listen, on_connection, w->data_addr, sizeof w->data_addr, err));
  w->data_server.data = w;
  w->data_open = true;
  return wk_local_start(w, on_local_connection, err);
}

void wk_data_stop(wk *w) {
  if (w->data_open) {
    uv_close((uv_handle_t *)&w->data_server, NULL);
    w->data_open = false;
  }
  wk_local_stop(w);
  for (wk_dconn *dc = w->dconns; dc; dc = dc->next) lm_conn_close(dc->conn, 0, "worker stopping");
}
