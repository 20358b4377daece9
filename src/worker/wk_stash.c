/* STASH: a pool session preempted by a higher class gives its devices' memory back while it is
 * suspended (docs/pool.md "Preemption"). Every shard of the session this worker holds is copied
 * into plain host memory, not charged to any device, and the device buffer is let go; STASH with
 * `restore` charges each one to its device again. The copies run on the loop's thread pool.
 *
 * A shard is swapped by listing a new slot under the same key (wk_store_put), never by changing a
 * listed slot's buffer: a reader that holds the old slot keeps its old buffer. Shards whose memory
 * Loom does not own (a PJRT plugin's buffers, views) stay where they are and are counted. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/dtype.h"
#include "common/log.h"
#include "hlo/ir.h"
#include "worker/wk.h"

typedef struct stash_job {
  uv_work_t req;
  wk *w;
  uint64_t rid, session;
  bool restore;
  uint64_t moved, bytes, kept;  /* shards moved, their bytes, shards left in place */
  uint64_t failed;              /* restore: shards that did not fit their device again */
  lm_err err;                   /* the first failure */
} stash_job;

static bool movable(const lm_buffer *b) {
  return b && b->data && !b->elems && !b->base && !b->ext_release;
}

/* Moves slot x's shard to a copy charged to dev (NULL: host memory). */
static int move_one(wk_store *st, wk_slot *x, lm_device *dev, lm_err *err) {
  lm_buffer *nb = NULL;
  LM_TRY(lm_buffer_alloc(dev, &x->buf->type, &nb, err));
  memcpy(nb->data, x->buf->data, x->buf->nbytes);
  wk_slot *ns = wk_slot_new(x->session, x->array, x->dev);
  if (!ns) {
    lm_buffer_release(nb);
    return lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  }
  ns->buf = nb;
  ns->state = WK_SLOT_READY;
  ns->stashed = dev ? NULL : x->buf->dev;
  wk_store_put(st, ns); /* x (and its device buffer) goes once its readers are done */
  wk_slot_release(st, ns);
  return 0;
}

static void stash_work(uv_work_t *r) {
  stash_job *j = r->data;
  wk_store *st = &j->w->store;
  wk_slot **v;
  long n = wk_store_session_slots(st, j->session, &v);
  if (n < 0) {
    j->failed = 1; /* none of them: the list itself did not fit */
    lm_errf(&j->err, LOOM_NO_MEMORY, "out of host memory listing the session's shards");
    return;
  }
  for (long i = 0; i < n; i++) {
    wk_slot *x = v[i];
    bool want = j->restore ? x->stashed != NULL : movable(x->buf) && x->buf->dev != NULL;
    if (!want) {
      j->kept += !j->restore && x->buf && x->buf->dev;
      wk_slot_release(st, x);
      continue;
    }
    lm_err e;
    if (move_one(st, x, j->restore ? x->stashed : NULL, &e) == 0) {
      j->moved++;
      j->bytes += x->buf->nbytes;
    } else {
      j->failed++;
      if (!j->err.code) j->err = e;
    }
    wk_slot_release(st, x);
  }
  free(v);
}

static void stash_done(uv_work_t *r, int status) {
  (void)status;
  stash_job *j = r->data;
  wk *w = j->w;
  const char *what = j->restore ? "back on their devices" : "to host memory";
  if (j->err.code) {
    lm_warn("session %" PRIu64 ": %" PRIu64 " shards moved %s, %" PRIu64 " not: %s", j->session, j->moved, what,
            j->failed, j->err.msg);
    if (w->conn)
      lm_conn_send_errorf(w->conn, j->rid, j->err.code, "worker %u: %" PRIu64 " shards of session %" PRIu64
                          " could not be moved %s: %s", w->worker_id, j->failed, j->session, what, j->err.msg);
  } else {
    lm_info("session %" PRIu64 ": %" PRIu64 " shards (%" PRIu64 " bytes) moved %s%s", j->session, j->moved, j->bytes,
            what, j->kept ? " (some in memory Loom does not own stay in place)" : "");
    Lmw__Ack ack = LMW__ACK__INIT;
    ack.stash_kept = j->kept; /* such a session can resume on its own devices only */
    wk_send(w, LM_MSG_ACK, j->rid, &ack.base);
  }
  free(j);
}

void wk_on_stash(wk *w, uint64_t rid, const Lmw__Stash *m) {
  stash_job *j = calloc(1, sizeof *j);
  if (!j) {
    if (w->conn) lm_conn_send_errorf(w->conn, rid, LOOM_NO_MEMORY, "worker %u: out of host memory", w->worker_id);
    return;
  }
  j->w = w;
  j->rid = rid;
  j->session = m->session;
  j->restore = m->restore;
  j->req.data = j;
  if (uv_queue_work(&w->loop, &j->req, stash_work, stash_done) != 0) {
    free(j);
    if (w->conn) lm_conn_send_errorf(w->conn, rid, LOOM_NO_MEMORY, "worker %u: cannot queue the move", w->worker_id);
  }
}

/* ---- SHARD_MOVE: a suspended session resumed on other devices than its own ----
 *
 * One message per worker lists its part: shards moving between two of its devices (LOCAL), leaving
 * for another worker (SEND) or arriving from one (RECV). On arrival, on the loop thread, every
 * leaving shard is unlisted (this message holds it) before any arriving one is listed, pending,
 * under its new key: a shard may leave the very key another one arrives at. Launches of the session
 * that come after read the pending slots and wait for them. The bytes move on the thread pool: all
 * receives are posted before any send, so two workers exchanging shards never wait on each other. */

#define MOVE_WAIT_MS 60000

typedef struct move_item {
  uint64_t array, tag;
  int kind;                     /* LMW__SHARD_MOVE_KIND__MOVE_* */
  uint32_t peer, from, to;
  lm_type ty;
  size_t nbytes;
  wk_slot *src;                 /* LOCAL, SEND: the shard leaving (unlisted; a reference) */
  wk_slot *dst;                 /* LOCAL, RECV: the pending slot listed in its place (a reference) */
  lm_buffer *buf;               /* LOCAL, RECV: the new buffer */
  lm_dp_req *rq;                /* SEND, RECV: the transfer */
  uint8_t scratch[2];           /* a transfer that cannot happen: the wrong length fails the other side at once */
  int rc;
  char why[200];
} move_item;

typedef struct move_job {
  uv_work_t req;
  wk *w;
  uint64_t rid, session;
  size_t n;
  move_item *it;
  uint64_t moved, bytes, failed;
  char first[300];              /* the first failure */
  int first_code;               /* and its code */
} move_job;

static void item_fail(move_item *x, int rc, const char *why) {
  if (x->rc) return;
  x->rc = rc < 0 ? rc : LOOM_INTERNAL;
  snprintf(x->why, sizeof x->why, "%.199s", why);
}

/* A new buffer on x's device for the bytes it receives or copies: 0, or -1 with x failed. */
static int dst_alloc(wk *w, move_item *x) {
  lm_err e;
  if (!x->dst) return item_fail(x, LOOM_NO_MEMORY, "out of host memory"), -1;
  if (lm_buffer_alloc(w->devs[x->to].dev, &x->ty, &x->buf, &e) < 0) return item_fail(x, e.code, e.msg), -1;
  return 0;
}

/* A transfer this side cannot serve (no shard to send, no buffer to receive into) still runs, with
 * a length the other side does not expect: that side then fails at once instead of waiting. */
static size_t wrong_len(const move_item *x) { return x->nbytes == 1 ? 2 : 1; }

/* The leaving shard, READY, in memory this worker can read, of the expected size; else why not. */
static int src_ok(const move_item *x, char *why, size_t cap) {
  const wk_slot *s = x->src;
  if (!s) return snprintf(why, cap, "this worker has no shard of it on device %u", x->from), LOOM_NOT_FOUND;
  if (s->state == WK_SLOT_FAILED) return snprintf(why, cap, "%s", s->msg ? s->msg : "the shard failed"), s->code;
  if (s->state != WK_SLOT_READY) return snprintf(why, cap, "the shard is still being computed"), LOOM_INTERNAL;
  if (!movable(s->buf))
    return snprintf(why, cap, "the shard is in memory Loom does not own (a PJRT plugin's buffer)"), LOOM_UNSUPPORTED;
  if (s->buf->nbytes != x->nbytes)
    return snprintf(why, cap, "the shard has %zu bytes, the move expects %zu", s->buf->nbytes, x->nbytes),
           LOOM_SHAPE_MISMATCH;
  return 0;
}

static void move_work(uv_work_t *r) {
  move_job *j = r->data;
  wk *w = j->w;
  lm_dp_call call = {.struct_size = sizeof call, .timeout_ms = MOVE_WAIT_MS, .cancel = wk_sc_cancel_flag(w)};
  lm_err e;
  char why[200];
  for (size_t i = 0; i < j->n; i++) { /* every receive first */
    move_item *x = &j->it[i];
    if (x->kind != LMW__SHARD_MOVE_KIND__MOVE_RECV) continue;
    void *into = x->scratch;
    size_t len = wrong_len(x);
    if (dst_alloc(w, x) == 0) into = x->buf->data, len = x->nbytes;
    if (lm_dp_irecv(w->dp, x->peer, x->tag, into, len, &x->rq, &e) < 0) x->rq = NULL, item_fail(x, e.code, e.msg);
  }
  for (size_t i = 0; i < j->n; i++) {
    move_item *x = &j->it[i];
    if (x->kind == LMW__SHARD_MOVE_KIND__MOVE_RECV) continue;
    int rc = src_ok(x, why, sizeof why);
    if (rc < 0) item_fail(x, rc, why);
    if (x->kind == LMW__SHARD_MOVE_KIND__MOVE_SEND) {
      const void *from = rc == 0 ? x->src->buf->data : x->scratch;
      size_t len = rc == 0 ? x->nbytes : wrong_len(x);
      if (lm_dp_isend(w->dp, x->peer, x->tag, from, len, &x->rq, &e) < 0) x->rq = NULL, item_fail(x, e.code, e.msg);
    } else if (rc == 0 && dst_alloc(w, x) == 0) {
      memcpy(x->buf->data, x->src->buf->data, x->nbytes);
    }
  }
  for (size_t i = 0; i < j->n; i++) {
    move_item *x = &j->it[i];
    if (x->rq && lm_dp_wait(w->dp, x->rq, &call, &e) < 0) item_fail(x, e.code, e.msg);
    x->rq = NULL;
    if (x->dst) {
      if (x->rc == 0) {
        wk_slot_finish(&w->store, x->dst, x->buf, 0, NULL);
      } else {
        char msg[LM_ERR_MSG_MAX];
        snprintf(msg, sizeof msg, "worker %u could not move array %llu's shard to its device %u (the session resumed on "
                 "other devices): %s", w->worker_id, (unsigned long long)x->array, x->to, x->why);
        wk_slot_finish(&w->store, x->dst, NULL, x->rc, msg);
        lm_buffer_release(x->buf);
      }
      x->buf = NULL;
    }
    if (x->rc == 0) {
      j->moved++;
      j->bytes += x->nbytes;
    } else if (!j->failed++) {
      j->first_code = x->rc;
      snprintf(j->first, sizeof j->first, "array %llu (%s device %u%s%u): %s", (unsigned long long)x->array,
               x->kind == LMW__SHARD_MOVE_KIND__MOVE_RECV ? "to" : "from",
               x->kind == LMW__SHARD_MOVE_KIND__MOVE_RECV ? x->to : x->from,
               x->kind == LMW__SHARD_MOVE_KIND__MOVE_LOCAL ? ", to device " : x->kind == LMW__SHARD_MOVE_KIND__MOVE_SEND
                                                                         ? ", to worker " : ", from worker ",
               x->kind == LMW__SHARD_MOVE_KIND__MOVE_LOCAL ? x->to : x->peer, x->why);
    }
  }
}

static void move_job_free(move_job *j) {
  for (size_t i = 0; i < j->n; i++) {
    wk_slot_release(&j->w->store, j->it[i].src);
    wk_slot_release(&j->w->store, j->it[i].dst);
    lm_buffer_release(j->it[i].buf);
  }
  free(j->it);
  free(j);
}

static void move_done(uv_work_t *r, int status) {
  (void)status;
  move_job *j = r->data;
  wk *w = j->w;
  if (j->failed) {
    lm_warn("session %" PRIu64 ": %" PRIu64 " shards moved to other devices, %" PRIu64 " not: %s", j->session,
            j->moved, j->failed, j->first);
    if (w->conn)
      lm_conn_send_errorf(w->conn, j->rid, j->first_code, "worker %u: %" PRIu64 " shards of session %" PRIu64
                          " could not be moved to other devices; the first: %s", w->worker_id, j->failed, j->session,
                          j->first);
  } else {
    lm_info("session %" PRIu64 ": %" PRIu64 " shards (%" PRIu64 " bytes) moved to other devices", j->session, j->moved,
            j->bytes);
    Lmw__Ack ack = LMW__ACK__INIT;
    wk_send(w, LM_MSG_ACK, j->rid, &ack.base);
  }
  move_job_free(j);
}

void wk_on_shard_move(wk *w, uint64_t rid, const Lmw__ShardMove *m) {
  char why[200] = "";
  size_t bad = 0;
  for (size_t i = 0; i < m->n_items && !why[0]; i++) { /* all checked before anything moves */
    const Lmw__ShardMoveItem *x = m->items[i];
    bool from = x->kind != LMW__SHARD_MOVE_KIND__MOVE_RECV, to = x->kind != LMW__SHARD_MOVE_KIND__MOVE_SEND;
    uint64_t nb = lm_dtype_valid((int)x->dtype) ? (uint64_t)lm_dtype_size((lm_dtype)x->dtype) : 0;
    bad = i;
    if (x->kind < LMW__SHARD_MOVE_KIND__MOVE_LOCAL || x->kind > LMW__SHARD_MOVE_KIND__MOVE_RECV)
      snprintf(why, sizeof why, "unknown kind %d", (int)x->kind);
    else if (!nb) snprintf(why, sizeof why, "unknown dtype %u", x->dtype);
    else if (x->n_dims > LM_MAX_RANK) snprintf(why, sizeof why, "rank %zu", x->n_dims);
    else if ((from && x->from_local >= w->cfg.devices) || (to && x->to_local >= w->cfg.devices))
      snprintf(why, sizeof why, "no device %u on this worker", from && x->from_local >= w->cfg.devices ? x->from_local
                                                                                                       : x->to_local);
    else if (x->kind != LMW__SHARD_MOVE_KIND__MOVE_LOCAL && x->peer == w->worker_id)
      snprintf(why, sizeof why, "a transfer with itself");
    else if (x->kind != LMW__SHARD_MOVE_KIND__MOVE_LOCAL && !w->dp)
      snprintf(why, sizeof why, "this worker has no data plane");
    for (size_t d = 0; !why[0] && d < x->n_dims; d++)
      if (x->dims[d] > (uint64_t)INT64_MAX || __builtin_mul_overflow(nb, x->dims[d], &nb) || nb > ((uint64_t)1 << 40))
        snprintf(why, sizeof why, "the shard's size overflows");
  }
  move_job *j = why[0] ? NULL : calloc(1, sizeof *j);
  if (j) j->it = calloc(m->n_items ? m->n_items : 1, sizeof *j->it);
  int code = LOOM_PROTOCOL; /* a malformed item, or: */
  if (!why[0] && (!j || !j->it)) {
    free(j);
    j = NULL;
    code = LOOM_NO_MEMORY;
    snprintf(why, sizeof why, "out of host memory");
  }
  if (why[0]) {
    lm_warn("refusing SHARD_MOVE of session %" PRIu64 " (item %zu): %s", m->session, bad, why);
    if (w->conn)
      lm_conn_send_errorf(w->conn, rid, code, "worker %u: SHARD_MOVE item %zu: %s", w->worker_id, bad, why);
    return;
  }
  j->w = w;
  j->rid = rid;
  j->session = m->session;
  j->n = m->n_items;
  for (size_t i = 0; i < j->n; i++) {
    const Lmw__ShardMoveItem *mi = m->items[i];
    move_item *x = &j->it[i];
    x->array = mi->array, x->tag = mi->tag, x->kind = (int)mi->kind, x->peer = mi->peer;
    x->from = mi->from_local, x->to = mi->to_local;
    int64_t dims[LM_MAX_RANK];
    uint64_t nb = (uint64_t)lm_dtype_size((lm_dtype)mi->dtype);
    for (size_t d = 0; d < mi->n_dims; d++) dims[d] = (int64_t)mi->dims[d], nb *= mi->dims[d];
    lm_type_tensor(&x->ty, (lm_dtype)mi->dtype, (int)mi->n_dims, dims);
    x->nbytes = (size_t)nb;
    if (x->kind != LMW__SHARD_MOVE_KIND__MOVE_RECV) x->src = wk_store_take(&w->store, j->session, x->array, x->from);
  }
  for (size_t i = 0; i < j->n; i++) { /* only once every leaving shard is out of the table */
    move_item *x = &j->it[i];
    if (x->kind == LMW__SHARD_MOVE_KIND__MOVE_SEND) continue;
    x->dst = wk_slot_new(j->session, x->array, x->to);
    if (x->dst) wk_store_put(&w->store, x->dst);
  }
  j->req.data = j;
  if (uv_queue_work(&w->loop, &j->req, move_work, move_done) != 0) {
    for (size_t i = 0; i < j->n; i++)
      if (j->it[i].dst) wk_slot_finish(&w->store, j->it[i].dst, NULL, LOOM_NO_MEMORY, "cannot queue the shard move");
    if (w->conn) lm_conn_send_errorf(w->conn, rid, LOOM_NO_MEMORY, "worker %u: cannot queue the move", w->worker_id);
    move_job_free(j);
  }
}
