/* STASH: a pool session preempted by a higher class gives its devices' memory back while it is
 * suspended (docs/pool.md "Preemption"). Every shard of the session this worker holds is copied
 * into plain host memory, not charged to any device, and the device buffer is let go; STASH with
 * `restore` charges each one to its device again. The copies run on the loop's thread pool.
 *
 * A shard is swapped by listing a new slot under the same key (wk_store_put), never by changing a
 * listed slot's buffer: a reader that holds the old slot keeps its old buffer. Shards whose memory
 * Loom does not own (a PJRT plugin's buffers, views) stay where they are and are counted. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include "common/log.h"
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
