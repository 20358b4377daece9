/* The worker's data port: clients connect here directly to put shards into device memory and
 * get them back, so bulk bytes never pass through the controller. Every request carries a token
 * the controller issued (net/token.h). A put's payload is received straight into the device
 * buffer allocated (and charged to the device) as soon as its metadata arrives; a get is sent
 * from the device buffer itself. A get for a shard still being computed, or named by a
 * controller message this worker has not read yet, waits ("parked") until it can be served.
 *
 * Messages: HELLO -> HELLO_REPLY; SHARD_PUT (+ payload) -> ACK; SHARD_GET -> SHARD_GET_REPLY
 * (+ payload). docs/protocol.md has the details. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/log.h"
#include "worker/wk.h"

#define PARK_MAX_MS 60000 /* a get waiting longer than this for a controller message fails */

struct wk_dconn {
  wk *w;
  lm_conn *conn;
  bool hello;
  /* the put whose payload is being received */
  Lmw__ShardPut *put;
  lm_buffer **bufs;            /* [put->n_targets] */
  struct wk_dconn *prev, *next;
};

struct wk_parked {
  wk_dconn *dc;
  uint64_t rid;
  uint64_t session, array;
  uint32_t dev;
  uint64_t min_cseq;
  uint64_t since_ms;
  struct wk_parked *next;
};

static void put_state_free(wk_dconn *dc) {
  if (dc->bufs)
    for (size_t i = 0; dc->put && i < dc->put->n_targets; i++) lm_buffer_release(dc->bufs[i]);
  free(dc->bufs);
  dc->bufs = NULL;
  lm_msg_free(dc->put ? &dc->put->base : NULL);
  dc->put = NULL;
}

static void reply_error(wk_dconn *dc, uint64_t rid, int code, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void reply_error(wk_dconn *dc, uint64_t rid, int code, const char *fmt, ...) {
  char msg[LM_ERR_MSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  lm_conn_send_error(dc->conn, rid, code, msg);
}

/* Checks a put and allocates its buffers (one per target device). */
static int prepare_put(wk_dconn *dc, Lmw__ShardPut *m, uint64_t payload_len, lm_err *err) {
  wk *w = dc->w;
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
  if (__builtin_mul_overflow(numel, (uint64_t)lm_dtype_size((lm_dtype)m->dtype), &nbytes) || nbytes != payload_len)
    return lm_errf(err, LOOM_INVALID_ARGUMENT, "the payload has %llu bytes, the shard's shape needs %llu",
                   (unsigned long long)payload_len, (unsigned long long)nbytes);
  for (size_t i = 0; i < m->n_targets; i++) {
    const Lmw__ShardTarget *t = m->targets[i];
    if (t->local_index >= w->cfg.devices)
      return lm_errf(err, LOOM_INVALID_ARGUMENT, "no device %u on worker %u", t->local_index, w->worker_id);
    for (size_t j = 0; j < i; j++)
      if (m->targets[j]->local_index == t->local_index && m->targets[j]->array == t->array)
        return lm_errf(err, LOOM_INVALID_ARGUMENT, "a put names device %u twice", t->local_index);
    if (!lm_token_check(w->token_key, LM_TOKEN_PUT, m->session, t->array, w->worker_id, t->local_index, m->dtype,
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
  dc->bufs = calloc(m->n_targets, sizeof *dc->bufs);
  if (!dc->bufs) return lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  dc->put = m;
  for (size_t i = 0; i < m->n_targets; i++) {
    uint32_t dev = m->targets[i]->local_index;
    int rc = lm_buffer_alloc(w->devs[dev].dev, &ty, &dc->bufs[i], err);
    if (rc < 0) {
      lm_err_prefix(err, "worker %u device %u", w->worker_id, dev);
      return rc;
    }
  }
  return 0;
}

static int payload_sink(lm_conn *c, const lm_frame *f, void **dst, lm_err *err) {
  wk_dconn *dc = lm_conn_user(c);
  if (f->h.type != LM_MSG_SHARD_PUT) return 0; /* nothing else takes a payload: refused in on_frame */
  ProtobufCMessage *m;
  LM_TRY(lm_msg_decode(f, &m, err));
  put_state_free(dc);
  int rc = prepare_put(dc, (Lmw__ShardPut *)m, f->h.payload_len, err);
  if (rc < 0) {
    if (!dc->put) lm_msg_free(m);
    put_state_free(dc);
    return rc; /* the stream fails: the client hears why, then the connection closes */
  }
  *dst = dc->bufs[0]->data;
  return 0;
}

static void finish_put(wk_dconn *dc, const lm_frame *f) {
  wk *w = dc->w;
  if (!dc->put) { /* an empty shard (no payload, so no sink call) */
    ProtobufCMessage *m;
    lm_err err;
    int rc = lm_msg_decode(f, &m, &err);
    if (rc == 0) {
      rc = prepare_put(dc, (Lmw__ShardPut *)m, f->h.payload_len, &err);
      if (rc < 0 && !dc->put) lm_msg_free(m);
    }
    if (rc < 0) {
      put_state_free(dc);
      reply_error(dc, f->h.request_id, rc, "%s", err.msg);
      return;
    }
  }
  Lmw__ShardPut *m = dc->put;
  for (size_t i = 1; i < m->n_targets; i++) /* the other devices that hold the same shard */
    if (dc->bufs[i]->nbytes) memcpy(dc->bufs[i]->data, dc->bufs[0]->data, dc->bufs[0]->nbytes);
  for (size_t i = 0; i < m->n_targets; i++) {
    wk_slot *s = wk_slot_new(m->session, m->targets[i]->array, m->targets[i]->local_index);
    if (!s) {
      put_state_free(dc);
      reply_error(dc, f->h.request_id, LOOM_NO_MEMORY, "out of host memory on worker %u", w->worker_id);
      return;
    }
    wk_slot_finish(&w->store, s, dc->bufs[i], 0, NULL);
    dc->bufs[i] = NULL;
    wk_store_put(&w->store, s);
    wk_slot_release(&w->store, s);
  }
  put_state_free(dc);
  Lmw__Ack ack = LMW__ACK__INIT;
  lm_conn_send(dc->conn, LM_MSG_ACK, f->h.request_id, &ack.base, NULL, 0, NULL, NULL, NULL);
}

static void release_buffer(void *arg) { lm_buffer_release(arg); }

/* Tries to answer a get: 1 when answered (data or error), 0 when it must wait. */
static int try_get(wk_dconn *dc, uint64_t rid, uint64_t session, uint64_t array, uint32_t dev, uint64_t min_cseq) {
  wk *w = dc->w;
  if (w->cseq < min_cseq) return 0;
  wk_slot *s = wk_store_get(&w->store, session, array, dev);
  if (!s) {
    reply_error(dc, rid, LOOM_NOT_FOUND, "array %llu has no shard on device %u of worker %u (deleted?)",
                (unsigned long long)array, dev, w->worker_id);
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
    reply_error(dc, rid, code, "%s", msg);
    return 1;
  }
  Lmw__ShardGetReply r = LMW__SHARD_GET_REPLY__INIT;
  uint64_t dims[LM_MAX_RANK];
  for (int i = 0; i < buf->type.rank; i++) dims[i] = (uint64_t)buf->type.dims[i];
  r.dtype = buf->type.dtype;
  r.n_dims = buf->type.rank;
  r.dims = dims;
  lm_err err;
  if (buf->nbytes) lm_conn_send(dc->conn, LM_MSG_SHARD_GET_REPLY, rid, &r.base, buf->data, buf->nbytes,
                                release_buffer, buf, &err);
  else {
    lm_conn_send(dc->conn, LM_MSG_SHARD_GET_REPLY, rid, &r.base, NULL, 0, NULL, NULL, &err);
    lm_buffer_release(buf);
  }
  return 1;
}

static void on_get(wk_dconn *dc, const lm_frame *f, const Lmw__ShardGet *m) {
  wk *w = dc->w;
  if (m->local_index >= w->cfg.devices) {
    reply_error(dc, f->h.request_id, LOOM_INVALID_ARGUMENT, "no device %u on worker %u", m->local_index, w->worker_id);
    return;
  }
  if (!lm_token_check(w->token_key, LM_TOKEN_GET, m->session, m->array, w->worker_id, m->local_index, 0, NULL, 0,
                      m->token.data, m->token.len)) {
    reply_error(dc, f->h.request_id, LOOM_PERMISSION, "the token for array %llu on device %u is not valid",
                (unsigned long long)m->array, m->local_index);
    return;
  }
  if (try_get(dc, f->h.request_id, m->session, m->array, m->local_index, m->min_cseq)) return;
  wk_parked *p = calloc(1, sizeof *p);
  if (!p) {
    reply_error(dc, f->h.request_id, LOOM_NO_MEMORY, "out of host memory on worker %u", w->worker_id);
    return;
  }
  *p = (wk_parked){.dc = dc, .rid = f->h.request_id, .session = m->session, .array = m->array,
                   .dev = m->local_index, .min_cseq = m->min_cseq, .since_ms = uv_now(&w->loop)};
  p->next = w->parked;
  w->parked = p;
}

void wk_data_poll(wk *w) {
  wk_parked **pp = &w->parked;
  uint64_t now = uv_now(&w->loop);
  while (*pp) {
    wk_parked *p = *pp;
    int done = try_get(p->dc, p->rid, p->session, p->array, p->dev, p->min_cseq);
    if (!done && w->cseq < p->min_cseq && now - p->since_ms > PARK_MAX_MS) {
      reply_error(p->dc, p->rid, LOOM_TIMEOUT, "worker %u did not hear from the controller about array %llu in time",
                  w->worker_id, (unsigned long long)p->array);
      done = 1;
    }
    if (done) {
      *pp = p->next;
      free(p);
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
    free(p);
  }
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
    const Lmw__Hello *h = (const Lmw__Hello *)m;
    if (h->protocol_version != LM_PROTOCOL_VERSION) {
      lm_conn_close_with_error(c, f->h.request_id, LOOM_VERSION_MISMATCH,
                               "protocol version %u is not supported: this worker speaks version %d",
                               h->protocol_version, LM_PROTOCOL_VERSION);
    } else if (dc->hello) {
      lm_conn_close_with_error(c, f->h.request_id, LOOM_PROTOCOL, "HELLO sent twice");
    } else {
      dc->hello = true;
      lm_conn_set_established(c);
      Lmw__HelloReply r = LMW__HELLO_REPLY__INIT;
      r.protocol_version = LM_PROTOCOL_VERSION;
      r.software = "loom " LOOM_VERSION_STRING;
      r.max_meta = LM_FRAME_META_DEFAULT_MAX;
      r.max_payload = LM_FRAME_PAYLOAD_HARD_MAX;
      lm_conn_send(c, LM_MSG_HELLO_REPLY, f->h.request_id, &r.base, NULL, 0, NULL, NULL, NULL);
    }
  } else if (!dc->hello) {
    lm_conn_close_with_error(c, f->h.request_id, LOOM_PROTOCOL, "expected HELLO first, got %s", lm_msg_name(type));
  } else if (type == LM_MSG_SHARD_GET) {
    on_get(dc, f, (const Lmw__ShardGet *)m);
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
      free(p);
    } else {
      pp = &(*pp)->next;
    }
  }
  put_state_free(dc);
  if (dc->prev) dc->prev->next = dc->next;
  else w->dconns = dc->next;
  if (dc->next) dc->next->prev = dc->prev;
  free(dc);
}

static const lm_conn_ops g_data_ops = {.on_frame = on_frame, .payload_sink = payload_sink, .on_close = on_close};

static void on_connection(uv_stream_t *server, int status) {
  wk *w = server->data;
  if (status < 0) return;
  lm_conn_config cfg;
  lm_conn_config_default(&cfg);
  cfg.limits.max_payload = LM_FRAME_PAYLOAD_HARD_MAX; /* shards are checked against device memory */
  cfg.max_out_bytes = 0;  /* replies are shard buffers sent in place: no copies pile up */
  wk_dconn *dc = calloc(1, sizeof *dc);
  lm_conn *conn = dc ? lm_conn_new(&w->loop, &g_data_ops, &cfg, dc) : NULL;
  if (!conn) {
    free(dc);
    uv_tcp_t *t = malloc(sizeof *t);
    if (t && uv_tcp_init(&w->loop, t) == 0) {
      uv_accept(server, (uv_stream_t *)t);
      uv_close((uv_handle_t *)t, (uv_close_cb)free);
    } else {
      free(t);
    }
    return;
  }
  dc->w = w;
  dc->conn = conn;
  dc->next = w->dconns;
  if (w->dconns) w->dconns->prev = dc;
  w->dconns = dc;
  lm_conn_accept(conn, server);
}

int wk_data_start(wk *w, const char *listen, lm_err *err) {
  w->data_server.data = w;
  LM_TRY(lm_listen(&w->loop, &w->data_server, listen, on_connection, w->data_addr, sizeof w->data_addr, err));
  w->data_server.data = w;
  w->data_open = true;
  return 0;
}

void wk_data_stop(wk *w) {
  if (w->data_open) {
    uv_close((uv_handle_t *)&w->data_server, NULL);
    w->data_open = false;
  }
  for (wk_dconn *dc = w->dconns; dc; dc = dc->next) lm_conn_close(dc->conn, 0, "worker stopping");
}
