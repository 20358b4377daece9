/* Shard copies between workers for elastic recovery (docs/elastic.md): the controller sends
 * SHARD_COPY to both ends; the bytes go over the data plane point to point, on a thread of
 * their own per copy (never on the loop thread). The threads are kept a while once their copy is
 * done and take the next one (puts' snapshots come in a steady stream: no thread is created per
 * copy then). A shard comes from or goes to the device store
 * (wk_store.c) or the host-memory backup store kept here: snapshots of shards that have no
 * replica on another worker, keyed by (session, array, virtual device), so that a standby can be
 * given the shard of a lost worker's device.
 *
 * The receiving side of a device copy lists a PENDING slot at once, so launches that read the
 * shard wait for it (as for any shard still being computed). A backup receiver asked to `report`
 * (the controller's periodic snapshots of launch outputs) tells the controller how the copy
 * ended (SNAPSHOT_KEPT), from the loop thread. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "common/dtype.h"
#include "common/hash.h"
#include "common/log.h"
#include "hlo/ir.h"
#include "worker/wk.h"

#define SC_WAIT_MS 60000     /* how long a send waits for its shard, and a transfer for its peer */
#define SC_BUCKETS 1024
#define SC_ACK_WAIT_MS 10000 /* a put waits this long for its snapshot, then is acknowledged anyway */
#define SC_DONE_MAX 4096     /* snapshots kept before their put was acknowledged (normally none) */
#define RECEIPT_BIT (1ull << 63)
#define SC_IDLE_MS 10000     /* a copy thread with nothing to do waits this long for the next copy ... */
#define SC_IDLE_MAX 64       /* ... unless this many wait already */

typedef struct sc_backup {
  uint64_t session, array;
  uint32_t device;           /* virtual device id */
  int refs;                  /* under sc->mu: the table's and senders' */
  void *data;
  size_t nbytes;
  struct sc_backup *next;
} sc_backup;

typedef struct sc_report {
  uint64_t session, array, tag, bytes;
  uint32_t dev;              /* virtual device */
  int code;
  char msg[200];
  struct sc_report *next;
} sc_report;

typedef struct sc_job {
  wk *w;
  uint64_t session, array, tag;
  uint32_t peer, local_index, device;
  bool send, backup, receipt, report;
  struct sc_report *rp;      /* report: made with the job, handed to the loop when the copy ends */
  int rc;                    /* the outcome (snapshot sends report it to the loop) */
  lm_type ty;
  size_t nbytes;
  wk_slot *slot;             /* receive into a device: the PENDING slot (a reference) */
  wk_slot *src;              /* send from a device: its slot when listed at the SHARD_COPY (a reference),
                                so a FREE_ARRAYS that follows cannot take it away first */
  atomic_int finished;       /* the copy is over: free it (wk_sc_reap) */
  struct sc_job *next;
} sc_job;

typedef struct sc_thread {   /* a copy thread (under sc->mu) */
  struct wk_sc *sc;
  pthread_t th;
  pthread_cond_t cv;         /* a copy was handed to it, or the worker stops */
  sc_job *job;               /* handed to it, not started yet */
  bool idle, exited;
  struct sc_thread *next, *inext; /* every thread; the idle ones */
} sc_thread;

struct wk_sc {
  pthread_mutex_t mu;
  sc_backup *buckets[SC_BUCKETS];
  uint64_t backup_bytes;
  sc_job *jobs;              /* running or finished, freed by wk_sc_reap and at stop */
  sc_thread *threads, *idle; /* copy threads, and those waiting for a copy */
  uint32_t nidle;
  volatile int stopping;     /* the data-plane calls' cancel flag */
  uv_async_t async;          /* copy threads -> loop: snapshots kept */
  bool async_open;
  struct sc_key *kept;       /* snapshots kept, reported by the threads (under mu) */
  uint32_t receipt_failures; /* copies sent for a receipt (a drain's) that failed (under mu) ... */
  char receipt_error[200];   /* ... and the first one's error */
  struct sc_report *reports; /* backup copies with `report` that ended, for the loop to send (under mu) */
  /* loop thread only */
  struct sc_waiter *waiters; /* puts waiting for their snapshots */
  struct sc_key *done;       /* kept snapshots no put waits for (yet) */
  size_t ndone;
};

typedef struct sc_key {
  uint64_t session, array;
  uint32_t dev;
  struct sc_key *next;
} sc_key;


typedef struct sc_waiter {
  wk_dconn *dc;
  uint64_t rid, session, array, since_ms;
  uint32_t *devs;            /* still to be kept */
  size_t n;
  struct sc_waiter *next;
} sc_waiter;

static size_t bk_bucket(uint64_t session, uint64_t array) {
  return (size_t)(lm_hash_mix(session * 0x9e3779b97f4a7c15ull ^ array) % SC_BUCKETS);
}

int wk_sc_init(wk *w) {
  w->sc = calloc(1, sizeof *w->sc);
  if (!w->sc) return LOOM_NO_MEMORY;
  pthread_mutex_init(&w->sc->mu, NULL);
  return 0;
}

static void bk_unref_locked(wk_sc *sc, sc_backup *b) {
  if (--b->refs == 0) {
    sc->backup_bytes -= b->nbytes;
    free(b->data);
    free(b);
  }
}

/* Drops backups of (session, array) (array 0: every array of the session). */
void wk_sc_drop(wk *w, uint64_t session, uint64_t array) {
  wk_sc *sc = w->sc;
  if (!sc) return;
  pthread_mutex_lock(&sc->mu);
  for (size_t b = array ? bk_bucket(session, array) : 0; b < SC_BUCKETS; b++) {
    for (sc_backup **pp = &sc->buckets[b]; *pp;) {
      sc_backup *x = *pp;
      if (x->session == session && (!array || x->array == array)) {
        *pp = x->next;
        bk_unref_locked(sc, x);
      } else {
        pp = &x->next;
      }
    }
    if (array) break;
  }
  pthread_mutex_unlock(&sc->mu);
}

uint64_t wk_sc_backup_bytes(wk *w) {
  if (!w->sc) return 0;
  pthread_mutex_lock(&w->sc->mu);
  uint64_t n = w->sc->backup_bytes;
  pthread_mutex_unlock(&w->sc->mu);
  return n;
}

static void deadline_in(struct timespec *ts, int64_t ms) {
  clock_gettime(CLOCK_REALTIME, ts);
  ts->tv_sec += ms / 1000;
  ts->tv_nsec += (ms % 1000) * 1000000;
  if (ts->tv_nsec >= 1000000000) ts->tv_sec++, ts->tv_nsec -= 1000000000;
}

/* The listed, READY slot of the job's shard (a reference), waiting for it to be put or computed. */
static int wait_slot(sc_job *j, wk_slot **out, lm_err *err) {
  wk_store *st = &j->w->store;
  struct timespec dl;
  deadline_in(&dl, SC_WAIT_MS);
  for (;;) {
    wk_slot *s = j->src ? j->src : wk_store_get(st, j->session, j->array, j->local_index);
    j->src = NULL;
    pthread_mutex_lock(&st->mu);
    if (!s && (s = wk_store_get_locked(st, j->session, j->array, j->local_index)) != NULL)
      s->refs++; /* listed in between (its broadcast came before this wait): no wait for it */
    int state = s ? s->state : -1;
    if (state == WK_SLOT_READY) {
      pthread_mutex_unlock(&st->mu);
      *out = s;
      return 0;
    }
    if (state == WK_SLOT_FAILED) {
      int code = s->code;
      pthread_mutex_unlock(&st->mu);
      wk_slot_release(st, s);
      return lm_errf(err, code, "the shard failed");
    }
    /* a slot listed from now on wakes this wait (wk_store_put broadcasts under the lock); one
     * listed but not READY yet wakes it when it is finished; the 20 ms are a backstop */
    struct timespec now, step;
    clock_gettime(CLOCK_REALTIME, &now);
    deadline_in(&step, 20);
    bool last = now.tv_sec > dl.tv_sec || (now.tv_sec == dl.tv_sec && now.tv_nsec >= dl.tv_nsec);
    if (!j->w->sc->stopping && !last) pthread_cond_timedwait(&st->cv, &st->mu, &step);
    pthread_mutex_unlock(&st->mu);
    wk_slot_release(st, s);
    if (last || j->w->sc->stopping)
      return lm_errf(err, LOOM_TIMEOUT, "array %llu has no shard on device %u after %d ms",
                     (unsigned long long)j->array, j->local_index, SC_WAIT_MS);
  }
}

static void *job_main(void *arg) {
  sc_job *j = arg;
  wk *w = j->w;
  wk_sc *sc = w->sc;
  lm_err err = {0};
  int rc = 0;
  lm_dp_call call = {.struct_size = sizeof call, .timeout_ms = SC_WAIT_MS, .cancel = &sc->stopping};
  uint8_t rcpt[2] = {0, 0};
  lm_dp_req *rq = NULL;
  if (j->send && j->receipt && lm_dp_irecv(w->dp, j->peer, j->tag | RECEIPT_BIT, rcpt, 1, &rq, &err) < 0) rq = NULL;
  if (j->send && !j->backup) {
    wk_slot *s = NULL;
    rc = wait_slot(j, &s, &err);
    if (rc == 0 && s->buf->nbytes != j->nbytes)
      rc = lm_errf(&err, LOOM_SHAPE_MISMATCH, "the shard has %zu bytes, the copy expects %zu", s->buf->nbytes,
                   j->nbytes);
    if (rc == 0) rc = lm_dp_send(w->dp, j->peer, j->tag, s->buf->data, j->nbytes, &call, &err);
    else if (!sc->stopping) { /* a message of the wrong length makes the receiver fail now, not at its deadline */
      lm_err e2;
      lm_dp_send(w->dp, j->peer, j->tag, rcpt, j->nbytes == 1 ? 2 : 1, &call, &e2);
    }
    wk_slot_release(&w->store, s);
  } else if (j->send) {
    pthread_mutex_lock(&sc->mu);
    sc_backup *b = sc->buckets[bk_bucket(j->session, j->array)];
    while (b && !(b->session == j->session && b->array == j->array && b->device == j->device)) b = b->next;
    if (b) b->refs++;
    pthread_mutex_unlock(&sc->mu);
    if (!b) rc = lm_errf(&err, LOOM_NOT_FOUND, "no snapshot of device %u's shard", j->device);
    else if (b->nbytes != j->nbytes) rc = lm_errf(&err, LOOM_SHAPE_MISMATCH, "the snapshot has %zu bytes", b->nbytes);
    else rc = lm_dp_send(w->dp, j->peer, j->tag, b->data, j->nbytes, &call, &err);
    if (rc < 0 && rc != LOOM_WORKER_LOST && !sc->stopping) { /* tell the receiver at once (see above) */
      lm_err e2;
      uint8_t z[2] = {0, 0};
      lm_dp_send(w->dp, j->peer, j->tag, z, j->nbytes == 1 ? 2 : 1, &call, &e2);
    }
    if (b) {
      pthread_mutex_lock(&sc->mu);
      bk_unref_locked(sc, b);
      pthread_mutex_unlock(&sc->mu);
    }
  } else if (!j->backup) {
    lm_buffer *buf = NULL;
    rc = lm_buffer_alloc(w->devs[j->local_index].dev, &j->ty, &buf, &err);
    if (rc == 0 && j->nbytes) rc = lm_dp_recv(w->dp, j->peer, j->tag, buf->data, j->nbytes, &call, &err);
    if (rc == 0) {
      wk_slot_finish(&w->store, j->slot, buf, 0, NULL);
    } else {
      lm_buffer_release(buf);
      char msg[LM_ERR_MSG_MAX];
      snprintf(msg, sizeof msg, "worker %u could not restore array %llu on device %u from worker %u: %.700s",
               w->worker_id, (unsigned long long)j->array, j->local_index, j->peer, err.msg);
      wk_slot_finish(&w->store, j->slot, NULL, rc, msg);
    }
    if (j->receipt && !sc->stopping) { /* a drain: the sender leaves only once the shard is here */
      lm_err e2;
      uint8_t one[2] = {1, 1};
      lm_dp_send(w->dp, j->peer, j->tag | RECEIPT_BIT, one, rc == 0 ? 1 : 2, &call, &e2);
    }
  } else {
    sc_backup *b = calloc(1, sizeof *b);
    if (b) b->data = malloc(j->nbytes ? j->nbytes : 1);
    if (!b || !b->data) rc = lm_errf(&err, LOOM_NO_MEMORY, "out of host memory for a %zu-byte snapshot", j->nbytes);
    if (rc == 0 && j->nbytes) rc = lm_dp_recv(w->dp, j->peer, j->tag, b->data, j->nbytes, &call, &err);
    if (rc == 0) {
      b->session = j->session, b->array = j->array, b->device = j->device, b->nbytes = j->nbytes, b->refs = 1;
      pthread_mutex_lock(&sc->mu);
      size_t k = bk_bucket(j->session, j->array);
      for (sc_backup **pp = &sc->buckets[k]; *pp; pp = &(*pp)->next) /* replace an older one */
        if ((*pp)->session == b->session && (*pp)->array == b->array && (*pp)->device == b->device) {
          sc_backup *old = *pp;
          *pp = old->next;
          bk_unref_locked(sc, old);
          break;
        }
      b->next = sc->buckets[k];
      sc->buckets[k] = b;
      sc->backup_bytes += b->nbytes;
      pthread_mutex_unlock(&sc->mu);
      b = NULL;
    }
    if (b) free(b->data);
    free(b);
    sc_report *rp = j->rp;
    j->rp = NULL;
    if (rp) { /* the loop thread sends it to the controller */
      rp->session = j->session, rp->array = j->array, rp->tag = j->tag, rp->dev = j->device;
      rp->code = rc, rp->bytes = rc == 0 ? j->nbytes : 0;
      if (rc < 0) snprintf(rp->msg, sizeof rp->msg, "%.190s", err.msg);
      pthread_mutex_lock(&sc->mu);
      rp->next = sc->reports;
      sc->reports = rp;
      pthread_mutex_unlock(&sc->mu);
      uv_async_send(&sc->async);
    }
    if (j->receipt && !sc->stopping) { /* 1 byte: kept; 2 bytes (a length mismatch there): not kept */
      lm_err e2;
      uint8_t one[2] = {1, 1};
      lm_dp_send(w->dp, j->peer, j->tag | RECEIPT_BIT, one, rc == 0 ? 1 : 2, &call, &e2);
    }
  }
  if (rq) { /* the holder waits for the buddy's receipt: only then is the snapshot kept */
    lm_err e2;
    int r2 = lm_dp_wait(w->dp, rq, &call, &e2);
    if (rc == 0 && r2 < 0) rc = lm_errf(&err, r2, "no receipt for the snapshot: %s", e2.msg);
  }
  j->rc = rc;
  if (!j->send && !j->backup) uv_async_send(&sc->async); /* gets parked on the shard can be served */
  if (j->send && j->receipt) { /* report to the loop: a put may wait for it */
    sc_key *k = malloc(sizeof *k);
    if (k) {
      k->session = j->session, k->array = j->array, k->dev = j->local_index;
      pthread_mutex_lock(&sc->mu);
      k->next = sc->kept;
      sc->kept = k;
      pthread_mutex_unlock(&sc->mu);
      uv_async_send(&sc->async);
    }
  }
  if (rc < 0 && j->send && j->receipt) {
    pthread_mutex_lock(&sc->mu);
    if (!sc->receipt_failures++)
      snprintf(sc->receipt_error, sizeof sc->receipt_error, "array %llu to worker %u: %.150s",
               (unsigned long long)j->array, j->peer, err.msg);
    pthread_mutex_unlock(&sc->mu);
  }
  if (rc < 0 && !sc->stopping)
    lm_warn("shard copy (tag %llu, array %llu, %s worker %u) failed: %s", (unsigned long long)j->tag,
            (unsigned long long)j->array, j->send ? "to" : "from", j->peer, err.msg);
  else if (rc == 0)
    lm_debug("shard copy (tag %llu, array %llu, %zu bytes) %s worker %u done", (unsigned long long)j->tag,
             (unsigned long long)j->array, j->nbytes, j->send ? "to" : "from", j->peer);
  if (j->slot) wk_slot_release(&w->store, j->slot);
  j->slot = NULL;
  wk_slot_release(&w->store, j->src); /* (a send that failed before waiting for it) */
  j->src = NULL;
  atomic_store(&j->finished, 1);
  return NULL;
}

/* A copy thread: runs the copies handed to it; waits for the next one SC_IDLE_MS, then ends. */
static void *runner(void *arg) {
  sc_thread *t = arg;
  wk_sc *sc = t->sc;
  pthread_mutex_lock(&sc->mu);
  for (;;) {
    sc_job *j = t->job;
    if (j) {
      t->job = NULL;
      pthread_mutex_unlock(&sc->mu);
      job_main(j); /* (j may be freed once it returns: it is finished) */
      pthread_mutex_lock(&sc->mu);
      continue;
    }
    if (sc->stopping || sc->nidle >= SC_IDLE_MAX) break;
    t->idle = true;
    t->inext = sc->idle;
    sc->idle = t;
    sc->nidle++;
    struct timespec dl;
    deadline_in(&dl, SC_IDLE_MS);
    int rc = 0;
    while (!t->job && !sc->stopping && rc != ETIMEDOUT) rc = pthread_cond_timedwait(&t->cv, &sc->mu, &dl);
    if (t->idle) { /* not taken off the idle list by a dispatch: leave it */
      for (sc_thread **pp = &sc->idle; *pp; pp = &(*pp)->inext)
        if (*pp == t) {
          *pp = t->inext;
          break;
        }
      t->idle = false;
      sc->nidle--;
    }
    if (!t->job) break;
  }
  t->exited = true; /* joined by wk_sc_reap or at stop */
  pthread_mutex_unlock(&sc->mu);
  return NULL;
}

/* Lists j and hands it to an idle copy thread, or to a new one. 0, or < 0 (j is not listed). */
static int dispatch(wk_sc *sc, sc_job *j) {
  pthread_mutex_lock(&sc->mu);
  j->next = sc->jobs;
  sc->jobs = j;
  sc_thread *t = sc->idle;
  if (t) {
    sc->idle = t->inext;
    sc->nidle--;
    t->idle = false;
    t->job = j;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&sc->mu);
    return 0;
  }
  t = calloc(1, sizeof *t);
  int rc = t ? 0 : -1;
  if (t) {
    pthread_cond_init(&t->cv, NULL);
    t->sc = sc;
    t->job = j;
    t->next = sc->threads; /* listed before it runs: stop joins it */
    sc->threads = t;
    if (pthread_create(&t->th, NULL, runner, t) != 0) {
      sc->threads = t->next;
      pthread_cond_destroy(&t->cv);
      free(t);
      rc = -1;
    }
  }
  if (rc < 0) sc->jobs = j->next; /* (listed first above: nothing else took it meanwhile) */
  pthread_mutex_unlock(&sc->mu);
  return rc;
}

void wk_on_shard_copy(wk *w, const Lmw__ShardCopy *m) {
  wk_sc_reap(w);
  lm_err err;
  int rc = 0;
  uint64_t nbytes = 0;
  if (!w->dp || !w->sc) rc = lm_errf(&err, LOOM_UNSUPPORTED, "this worker has no data plane");
  else if (m->peer == w->worker_id) rc = lm_errf(&err, LOOM_PROTOCOL, "a shard copy with itself");
  else if (!lm_dtype_valid((int)m->dtype)) rc = lm_errf(&err, LOOM_PROTOCOL, "unknown dtype %u", m->dtype);
  else if (m->n_dims > LM_MAX_RANK) rc = lm_errf(&err, LOOM_PROTOCOL, "rank %zu", m->n_dims);
  else if (!m->backup && m->local_index >= w->cfg.devices)
    rc = lm_errf(&err, LOOM_PROTOCOL, "no device %u on this worker", m->local_index);
  if (rc == 0) {
    nbytes = (uint64_t)lm_dtype_size((lm_dtype)m->dtype);
    for (size_t d = 0; rc == 0 && d < m->n_dims; d++)
      if (m->dims[d] > (uint64_t)INT64_MAX || __builtin_mul_overflow(nbytes, m->dims[d], &nbytes) ||
          nbytes > ((uint64_t)1 << 40))
        rc = lm_errf(&err, LOOM_PROTOCOL, "the shard's size overflows");
  }
  sc_job *j = rc == 0 ? calloc(1, sizeof *j) : NULL;
  if (rc == 0 && !j) rc = lm_errf(&err, LOOM_NO_MEMORY, "out of host memory");
  if (rc < 0) {
    lm_warn("ignoring SHARD_COPY of array %llu: %s", (unsigned long long)m->array, err.msg);
    return;
  }
  j->w = w;
  j->session = m->session, j->array = m->array, j->tag = m->tag;
  j->peer = m->peer, j->local_index = m->local_index, j->device = m->device;
  j->send = m->send, j->backup = m->backup, j->receipt = m->receipt;
  j->report = m->report && !m->send && m->backup;
  if (j->report && !(j->rp = calloc(1, sizeof *j->rp))) {
    free(j);
    lm_warn("ignoring SHARD_COPY of array %llu: out of host memory", (unsigned long long)m->array);
    return;
  }
  j->nbytes = (size_t)nbytes;
  int64_t dims[LM_MAX_RANK];
  for (size_t d = 0; d < m->n_dims; d++) dims[d] = (int64_t)m->dims[d];
  lm_type_tensor(&j->ty, (lm_dtype)m->dtype, (int)m->n_dims, dims);
  if (!m->send && !m->backup) { /* launches that read it wait for it from now on */
    j->slot = wk_slot_new(m->session, m->array, m->local_index);
    if (!j->slot) {
      free(j->rp);
      free(j);
      lm_warn("out of host memory restoring array %llu", (unsigned long long)m->array);
      return;
    }
    wk_store_put(&w->store, j->slot);
  }
  if (m->send && !m->backup) /* taken now: frees that arrive after this message come after the copy */
    j->src = wk_store_get(&w->store, m->session, m->array, m->local_index);
  if (dispatch(w->sc, j) != 0) {
    wk_slot_release(&w->store, j->src);
    if (j->slot) {
      wk_slot_finish(&w->store, j->slot, NULL, LOOM_NO_MEMORY, "cannot start a thread to restore the shard");
      wk_slot_release(&w->store, j->slot);
    }
    free(j->rp);
    free(j);
    lm_warn("cannot start a shard copy thread");
    return;
  }
}

volatile int *wk_sc_cancel_flag(wk *w) { return w->sc ? &w->sc->stopping : NULL; }

bool wk_sc_sending(wk *w) {
  wk_sc *sc = w->sc;
  if (!sc) return false;
  bool busy = false;
  pthread_mutex_lock(&sc->mu);
  for (sc_job *j = sc->jobs; j && !busy; j = j->next) busy = j->send && !atomic_load(&j->finished);
  pthread_mutex_unlock(&sc->mu);
  return busy;
}

uint32_t wk_sc_receipt_failures(wk *w, char *first, size_t cap) {
  wk_sc *sc = w->sc;
  if (!sc) return 0;
  pthread_mutex_lock(&sc->mu);
  uint32_t n = sc->receipt_failures;
  snprintf(first, cap, "%s", sc->receipt_error);
  pthread_mutex_unlock(&sc->mu);
  return n;
}

void wk_sc_stop(wk *w) {
  wk_sc *sc = w->sc;
  if (!sc) return;
  __atomic_store_n(&sc->stopping, 1, __ATOMIC_SEQ_CST);
  lm_dp_wake(w->dp);
  pthread_mutex_lock(&w->store.mu); /* wake senders waiting for a slot */
  pthread_cond_broadcast(&w->store.cv);
  pthread_mutex_unlock(&w->store.mu);
  pthread_mutex_lock(&sc->mu);
  for (sc_thread *t = sc->threads; t; t = t->next) pthread_cond_signal(&t->cv); /* the idle ones end */
  sc_thread *threads = sc->threads;
  sc->threads = NULL;
  pthread_mutex_unlock(&sc->mu);
  while (threads) { /* each ends its copy (they see stopping) */
    sc_thread *n = threads->next;
    pthread_join(threads->th, NULL);
    pthread_cond_destroy(&threads->cv);
    free(threads);
    threads = n;
  }
  pthread_mutex_lock(&sc->mu);
  sc_job *jobs = sc->jobs;
  sc->jobs = NULL;
  pthread_mutex_unlock(&sc->mu);
  while (jobs) {
    sc_job *n = jobs->next;
    free(jobs->rp);
    free(jobs);
    jobs = n;
  }
  if (sc->async_open) { /* no thread sends on it any more */
    uv_close((uv_handle_t *)&sc->async, NULL);
    sc->async_open = false;
  }
}

void wk_sc_free(wk *w) {
  wk_sc *sc = w->sc;
  if (!sc) return;
  while (sc->kept) {
    sc_key *n = sc->kept->next;
    free(sc->kept);
    sc->kept = n;
  }
  while (sc->done) {
    sc_key *n = sc->done->next;
    free(sc->done);
    sc->done = n;
  }
  while (sc->reports) {
    sc_report *n = sc->reports->next;
    free(sc->reports);
    sc->reports = n;
  }
  while (sc->waiters) {
    sc_waiter *n = sc->waiters->next;
    free(sc->waiters->devs);
    free(sc->waiters);
    sc->waiters = n;
  }
  for (size_t b = 0; b < SC_BUCKETS; b++)
    while (sc->buckets[b]) {
      sc_backup *x = sc->buckets[b];
      sc->buckets[b] = x->next;
      free(x->data);
      free(x);
    }
  pthread_mutex_destroy(&sc->mu);
  free(sc);
  w->sc = NULL;
}

static void expire_waiters(wk *w);

void wk_sc_reap(wk *w) {
  wk_sc *sc = w->sc;
  if (!sc) return;
  expire_waiters(w);
  sc_job *done = NULL;
  sc_thread *gone = NULL;
  pthread_mutex_lock(&sc->mu);
  for (sc_thread **pp = &sc->threads; *pp;) { /* threads that ended (idle too long) */
    sc_thread *t = *pp;
    if (t->exited) {
      *pp = t->next;
      t->next = gone;
      gone = t;
    } else {
      pp = &t->next;
    }
  }
  for (sc_job **pp = &sc->jobs; *pp;) {
    sc_job *j = *pp;
    if (atomic_load(&j->finished)) {
      *pp = j->next;
      j->next = done;
      done = j;
    } else {
      pp = &j->next;
    }
  }
  pthread_mutex_unlock(&sc->mu);
  while (done) {
    sc_job *n = done->next;
    free(done->rp);
    free(done);
    done = n;
  }
  while (gone) {
    sc_thread *n = gone->next;
    pthread_join(gone->th, NULL);
    pthread_cond_destroy(&gone->cv);
    free(gone);
    gone = n;
  }
}

/* ---- puts acknowledged once their snapshots are kept ---- */

static void waiter_free(sc_waiter *x) {
  free(x->devs);
  free(x);
}

/* Crosses (session, array, dev) off the waiters; true when one waited for it. */
static bool cross_off(wk *w, uint64_t session, uint64_t array, uint32_t dev) {
  wk_sc *sc = w->sc;
  for (sc_waiter **pp = &sc->waiters; *pp; pp = &(*pp)->next) {
    sc_waiter *x = *pp;
    if (x->session != session || x->array != array) continue;
    for (size_t i = 0; i < x->n; i++) {
      if (x->devs[i] != dev) continue;
      x->devs[i] = x->devs[--x->n];
      if (x->n == 0) {
        *pp = x->next;
        wk_data_ack(x->dc, x->rid);
        waiter_free(x);
      }
      return true;
    }
  }
  return false;
}

static void on_kept(uv_async_t *a) {
  wk *w = a->data;
  wk_sc *sc = w->sc;
  if (w->parked) wk_data_poll(w);
  pthread_mutex_lock(&sc->mu);
  sc_key *k = sc->kept;
  sc->kept = NULL;
  sc_report *rp = sc->reports;
  sc->reports = NULL;
  pthread_mutex_unlock(&sc->mu);
  while (rp) { /* snapshots of launch outputs: the controller counts them kept (or takes them again) */
    sc_report *n = rp->next;
    Lmw__SnapshotKept m = LMW__SNAPSHOT_KEPT__INIT;
    m.session = rp->session, m.array = rp->array, m.device = rp->dev, m.tag = rp->tag;
    m.code = rp->code, m.message = rp->msg, m.bytes = rp->bytes;
    wk_send(w, LM_MSG_SNAPSHOT_KEPT, 0, &m.base);
    free(rp);
    rp = n;
  }
  while (k) {
    sc_key *n = k->next;
    if (cross_off(w, k->session, k->array, k->dev)) {
      free(k);
    } else { /* kept before its put was acknowledged here (or for a put already given up on) */
      k->next = sc->done;
      sc->done = k;
      if (++sc->ndone > SC_DONE_MAX) { /* drop the oldest */
        sc_key **pp = &sc->done;
        while ((*pp)->next) pp = &(*pp)->next;
        free(*pp);
        *pp = NULL;
        sc->ndone--;
      }
    }
    k = n;
  }
}

int wk_sc_start(wk *w) {
  wk_sc *sc = w->sc;
  if (uv_async_init(&w->loop, &sc->async, on_kept) != 0) return LOOM_NO_MEMORY;
  sc->async.data = w;
  sc->async_open = true;
  return 0;
}

void wk_sc_defer_ack(wk *w, wk_dconn *dc, uint64_t rid, uint64_t session, uint64_t array, const uint32_t *devs,
                     size_t n) {
  wk_sc *sc = w->sc;
  sc_waiter *x = calloc(1, sizeof *x);
  if (x) x->devs = malloc(n * sizeof *x->devs);
  if (!x || !x->devs) {
    if (x) free(x);
    wk_data_ack(dc, rid);
    return;
  }
  x->dc = dc, x->rid = rid, x->session = session, x->array = array, x->since_ms = uv_now(&w->loop);
  for (size_t i = 0; i < n; i++) {
    bool kept = false;
    for (sc_key **pp = &sc->done; *pp && !kept; pp = &(*pp)->next) {
      sc_key *k = *pp;
      if (k->session == session && k->array == array && k->dev == devs[i]) {
        *pp = k->next;
        free(k);
        sc->ndone--;
        kept = true;
        break;
      }
    }
    if (!kept) x->devs[x->n++] = devs[i];
  }
  if (x->n == 0) {
    wk_data_ack(dc, rid);
    waiter_free(x);
    return;
  }
  x->next = sc->waiters;
  sc->waiters = x;
}

void wk_sc_conn_gone(wk *w, wk_dconn *dc) {
  wk_sc *sc = w->sc;
  if (!sc) return;
  for (sc_waiter **pp = &sc->waiters; *pp;) {
    sc_waiter *x = *pp;
    if (x->dc == dc) {
      *pp = x->next;
      waiter_free(x);
    } else {
      pp = &x->next;
    }
  }
}

/* Puts whose snapshot did not come (its buddy was lost, the controller could not send the copy)
 * are acknowledged anyway after SC_ACK_WAIT_MS: the shard itself is stored. */
static void expire_waiters(wk *w) {
  wk_sc *sc = w->sc;
  uint64_t now = uv_now(&w->loop);
  for (sc_waiter **pp = &sc->waiters; *pp;) {
    sc_waiter *x = *pp;
    if (now - x->since_ms < SC_ACK_WAIT_MS) {
      pp = &x->next;
      continue;
    }
    lm_warn("array %llu: no snapshot kept after %d ms; acknowledging the put without one",
            (unsigned long long)x->array, SC_ACK_WAIT_MS);
    *pp = x->next;
    wk_data_ack(x->dc, x->rid);
    waiter_free(x);
  }
}
