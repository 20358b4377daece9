/* Client connection: request ids, the table of calls in flight, the receivers and the waits.
 * Receiving is done by a small pool of threads shared by every connection of the process (each
 * thread serves its connections with epoll), not by a thread per connection: a client of 1,000
 * workers holds 1,000 data connections. Locking: `mu` guards the call table, call states and the
 * broken flag; `send_mu` keeps frames whole on the socket. A pending call belongs to the receiver
 * side (in the table or being completed); a done call belongs to its owner until lm_call_release. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include "client/cconn.h"


#define NBUCKETS 256
#define RBUF_SIZE ((size_t)64 << 10)
#define DIRECT_MIN ((size_t)16 << 10)
#define WAIT_SLICE_MS 50
#define LET_GO_MS 5000 /* how long a peer that copies into our memory gets to stop (see let_go) */

enum { CALL_PENDING = 0, CALL_DONE = 1 };

struct lm_call {
  lm_cconn *conn;
  uint64_t rid;
  int state;
  bool released;        /* the owner gave it up while pending: the receiver frees it */
  int status;
  lm_err err;           /* detail when status < 0 */
  lm_reply reply;
  bool has_reply;
  void *dst;            /* optional reply payload buffer */
  uint64_t dst_cap;
  pthread_cond_t cv;
  lm_call *next;        /* hash chain */
  /* a resumable connection (a controller with a journal) keeps each request to send it again */
  unsigned type;
  uint8_t *req;         /* header + metadata + payload, as sent */
  size_t req_len;
  uint64_t gen;         /* the connection generation it went out on (0: not sent yet) */
};

typedef struct rx_hub rx_hub;

struct lm_cconn {
  int fd;
  rx_hub *hub;                /* the receiver thread serving it; NULL until registered */
  bool rx_done;               /* under mu: the receiver is finished with it */
  pthread_cond_t rx_cv;       /* signalled when rx_done is set */
  bool draining;              /* receiver only: waiting for a peer that copies into our memory to stop */
  uint64_t drain_deadline;
  int rx_rc;                  /* receiver only: why it ends */
  lm_err rx_err;
  struct lm_cconn *drain_next; /* the hub's list of draining connections (receiver only) */
  int hub_epfd_cache;         /* the hub's epoll descriptor */
  pthread_mutex_t mu;
  pthread_mutex_t send_mu;
  pthread_cond_t sink_cv;     /* signalled when sink_call is cleared */
  lm_call *buckets[NBUCKETS];
  uint64_t next_rid;
  bool broken;
  lm_err broken_err;
  lm_err peer_err;            /* an ERROR the peer sent outside any request (why it drops us) */
  char peer[48];              /* what the peer is called in errors ("the controller", "the worker") */
  bool have_peer_err;
  lm_call *sink_call;         /* the call whose dst is being written by the receiver */
  lm_frame_reader reader;     /* receiver thread only */
  uint8_t *rbuf;
  int64_t send_timeout_ms;
  lm_interrupt_fn intr;
  void *intr_arg;
  uint64_t session_id;
  char addr[LM_ADDR_MAX];
  char software[64];
  uint64_t peer_max_payload;         /* what the peer said it accepts (HELLO_REPLY); 0: unknown */
  lm_cconn_local local;       /* from the HELLO_REPLY */
  lm_cconn_pool pool;         /* from the HELLO_REPLY */
  void (*on_queue)(void *arg, const Lmw__QueueUpdate *u); /* while HELLO waits in the pool's queue */
  void *on_queue_arg;
  atomic_bool peer_access;    /* the peer copies to and from our memory: see lm_cconn_set_peer_access */
  /* resuming the session after the controller restarts (docs/durability.md) */
  bool resumable;             /* HELLO_REPLY gave a resume secret: a broken connection reconnects */
  bool reconnecting;          /* under mu: the reconnect thread runs; requests wait in the table */
  bool closing;               /* under mu: lm_cconn_close was called */
  uint64_t gen;               /* under send_mu and mu: the connection's generation (1, 2, ...) */
  uint8_t resume_secret[32];
  char name[64];
  uint8_t *token;
  size_t token_len;
  char priority[32];
  uint32_t launch_limit_ms, share_weight, pool_devices;
  lm_frame_limits limits;
  uint64_t reconnects;        /* how many times the session was resumed */
};

void lm_reply_free(lm_reply *r) {
  if (!r) return;
  lm_msg_free(r->msg);
  if (!r->payload_external) free(r->payload);
  memset(r, 0, sizeof *r);
}

static void call_free(lm_call *call) {
  lm_reply_free(&call->reply);
  free(call->req);
  pthread_cond_destroy(&call->cv);
  free(call);
}

/* ---- call table (under mu) ---- */

static void table_insert(lm_cconn *c, lm_call *call) {
  size_t b = call->rid % NBUCKETS;
  call->next = c->buckets[b];
  c->buckets[b] = call;
}

static lm_call *table_find(lm_cconn *c, uint64_t rid, bool remove) {
  lm_call **pp = &c->buckets[rid % NBUCKETS];
  for (; *pp; pp = &(*pp)->next) {
    lm_call *call = *pp;
    if (call->rid != rid) continue;
    if (remove) {
      *pp = call->next;
      call->next = NULL;
    }
    return call;
  }
  return NULL;
}

/* Completes a call taken out of the table (under mu): wakes its owner, or frees it. */
static void complete_locked(lm_call *call) {
  call->state = CALL_DONE;
  if (call->released) call_free(call);
  else pthread_cond_broadcast(&call->cv);
}

/* ---- receiver ---- */

static void break_connection(lm_cconn *c);
static void abs_time(uint64_t ms_from_now, struct timespec *ts);

static int rx_sink(void *arg, const lm_frame *f, void **dst, lm_err *err) {
  lm_cconn *c = arg;
  pthread_mutex_lock(&c->mu);
  lm_call *call = f->h.request_id ? table_find(c, f->h.request_id, false) : NULL;
  if (call && call->dst && !call->released && f->h.payload_len <= call->dst_cap) {
    *dst = call->dst;
    c->sink_call = call;
  }
  pthread_mutex_unlock(&c->mu);
  return 0;
}

static int rx_frame(void *arg, lm_frame *f, lm_err *err) {
  lm_cconn *c = arg;
  pthread_mutex_lock(&c->mu);
  lm_call *call = f->h.request_id ? table_find(c, f->h.request_id, true) : NULL;
  if (f->h.type == LM_MSG_HELLO_REPLY) c->on_queue = NULL; /* the wait is over: no callback after connect returns */
  if (c->sink_call && c->sink_call == call) {
    c->sink_call = NULL;
    pthread_cond_broadcast(&c->sink_cv);
  }
  if (!call) { /* a one-way message: an ERROR explaining why we are dropped, or the queue's progress */
    if (f->h.type == LM_MSG_ERROR) {
      lm_msg_error_status(f, &c->peer_err);
      c->have_peer_err = true;
    }
    pthread_mutex_unlock(&c->mu);
    ProtobufCMessage *qm;
    lm_err qerr;
    if (f->h.type == LM_MSG_QUEUE_UPDATE && c->on_queue && lm_msg_decode(f, &qm, &qerr) == 0) {
      c->on_queue(c->on_queue_arg, (const Lmw__QueueUpdate *)qm);
      lm_msg_free(qm);
    }
    return 0;
  }
  pthread_mutex_unlock(&c->mu);

  int status;
  lm_reply r = {0};
  if (f->h.type == LM_MSG_ERROR) {
    status = lm_msg_error_status(f, &call->err);
  } else {
    status = lm_msg_decode(f, &r.msg, &call->err);
    r.type = f->h.type;
    r.payload_len = f->h.payload_len;
    r.payload_external = f->payload_external;
    r.payload = lm_frame_take_payload(f);
    if (status == 0 && call->dst && r.payload && !r.payload_external)
      status = lm_errf(&call->err, LOOM_PROTOCOL, "reply payload of %llu bytes does not fit the %llu-byte buffer",
                       (unsigned long long)r.payload_len, (unsigned long long)call->dst_cap);
  }
  pthread_mutex_lock(&c->mu);
  call->status = status;
  if (status == 0) {
    call->reply = r;
    call->has_reply = true;
  } else {
    lm_reply_free(&r);
  }
  complete_locked(call);
  pthread_mutex_unlock(&c->mu);
  return 0;
}

static bool start_reconnect(lm_cconn *c);
static void finish_broken(lm_cconn *c);

/* The connection is gone: fail everything in flight, refuse new calls, and hand it back to
 * lm_cconn_close (a resumable one reconnects first: start_reconnect). Receiver thread. */
static void rx_finish(lm_cconn *c) {
  epoll_ctl(c->hub_epfd_cache, EPOLL_CTL_DEL, c->fd, NULL);
  if (start_reconnect(c)) return;
  finish_broken(c);
}

/* Fails everything in flight with c->rx_err (or the peer's reason) and lets lm_cconn_close go on. */
static void finish_broken(lm_cconn *c) {
  lm_err err = c->rx_err;
  pthread_mutex_lock(&c->mu);
  c->broken = true;
  c->reconnecting = false;
  if (c->have_peer_err) /* the controller said why: that is the real reason */
    lm_errf(&c->broken_err, c->peer_err.code, "%s", c->peer_err.msg);
  else
    c->broken_err = err;
  if (c->broken_err.code >= 0) c->broken_err.code = LOOM_CLOSED;
  c->sink_call = NULL;
  pthread_cond_broadcast(&c->sink_cv);
  for (size_t b = 0; b < NBUCKETS; b++) {
    while (c->buckets[b]) {
      lm_call *call = c->buckets[b];
      c->buckets[b] = call->next;
      call->status = c->broken_err.code;
      call->err = c->broken_err;
      complete_locked(call);
    }
  }
  lm_frame_reader_free(&c->reader);
  c->rx_done = true;
  pthread_cond_broadcast(&c->rx_cv);
  pthread_mutex_unlock(&c->mu); /* c may be freed from here on */
}

/* ---- receivers: RX_THREADS threads, each serving many connections through epoll ---- */

#define RX_THREADS 4
#define RX_POLL_MS 100 /* how often a receiver looks at its draining connections' deadlines */

struct rx_hub {
  pthread_mutex_t mu;        /* guards started and epfd */
  int epfd;
  bool started;
  lm_cconn *draining;        /* its thread only */
};

static rx_hub g_hubs[RX_THREADS] = {[0 ... RX_THREADS - 1] = {PTHREAD_MUTEX_INITIALIZER, -1, false, NULL}};
static atomic_uint g_next_hub;
static pthread_once_t g_atfork_once = PTHREAD_ONCE_INIT;

/* In a forked child the receiver threads do not exist: the first connection starts them again. */
static void rx_atfork_child(void) {
  for (int i = 0; i < RX_THREADS; i++) {
    pthread_mutex_init(&g_hubs[i].mu, NULL);
    if (g_hubs[i].epfd >= 0) close(g_hubs[i].epfd);
    g_hubs[i].epfd = -1;
    g_hubs[i].started = false;
    g_hubs[i].draining = NULL;
  }
}

static void rx_atfork_register(void) { pthread_atfork(NULL, NULL, rx_atfork_child); }

/* Reads what c has (until the socket would block): frames complete calls. */
static void rx_ready(rx_hub *h, lm_cconn *c) {
  lm_err err;
  lm_err_clear(&err);
  int rc = 0;
  if (c->draining) { /* the stream is broken: read and drop until the peer closes its end */
    for (;;) {
      ssize_t k = recv(c->fd, c->rbuf, RBUF_SIZE, MSG_DONTWAIT);
      if (k > 0 || (k < 0 && errno == EINTR)) continue;
      if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      break;
    }
    for (lm_cconn **pp = &h->draining; *pp; pp = &(*pp)->drain_next)
      if (*pp == c) {
        *pp = c->drain_next;
        break;
      }
    rx_finish(c);
    return;
  }
  for (;;) {
    void *p;
    size_t n;
    int w = lm_frame_reader_window(&c->reader, &p, &n, &err);
    if (w < 0) {
      rc = w;
      break;
    }
    bool direct = w == 1 && n >= DIRECT_MIN;
    ssize_t k = direct ? recv(c->fd, p, n, MSG_DONTWAIT) : recv(c->fd, c->rbuf, RBUF_SIZE, MSG_DONTWAIT);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return; /* all read: back to epoll */
    if (k <= 0) {
      /* a worker's data port drops what it cannot serve (out of descriptors) without a word */
      const char *hint = strcmp(c->peer, "the controller") ? " (it may have exited, or run out of file "
                                                             "descriptors: its log says)" : "";
      if (k == 0) rc = lm_errf(&err, LOOM_CLOSED, "%s closed the connection%s", c->peer, hint);
      else rc = lm_errf(&err, LOOM_CLOSED, "connection to %s failed: %s%s", c->peer, strerror(errno), hint);
      break;
    }
    rc = direct ? lm_frame_reader_advance(&c->reader, (size_t)k, rx_frame, c, &err)
                : lm_frame_reader_feed(&c->reader, c->rbuf, (size_t)k, rx_frame, c, &err);
    if (rc < 0) {
      lm_err_prefix(&err, "bad frame from %s", c->peer);
      break;
    }
  }
  c->rx_rc = rc;
  c->rx_err = err;
  if (atomic_load(&c->peer_access) && rc != LOOM_CLOSED) {
    /* a bad frame (or out of memory): the peer may still be copying into memory of pending
     * calls; complete them only once it closed its end (or LET_GO_MS passed) */
    break_connection(c);
    c->draining = true;
    c->drain_deadline = lm_now_ms() + LET_GO_MS;
    c->drain_next = h->draining;
    h->draining = c;
    return;
  }
  rx_finish(c);
}

static void *hub_main(void *arg) {
  rx_hub *h = arg;
  struct epoll_event ev[64];
  for (;;) {
    int n = epoll_wait(h->epfd, ev, 64, h->draining ? RX_POLL_MS : -1);
    if (n < 0 && errno != EINTR) break;
    for (int i = 0; i < n; i++) rx_ready(h, ev[i].data.ptr);
    uint64_t now = h->draining ? lm_now_ms() : 0;
    for (lm_cconn **pp = &h->draining; *pp;) {
      lm_cconn *c = *pp;
      if (now < c->drain_deadline) {
        pp = &c->drain_next;
        continue;
      }
      *pp = c->drain_next;
      rx_finish(c);
    }
  }
  return NULL;
}

/* Hands c's socket to one of the receiver threads (starting it if needed). */
static int rx_register(lm_cconn *c, lm_err *err) {
  pthread_once(&g_atfork_once, rx_atfork_register);
  rx_hub *h = &g_hubs[atomic_fetch_add(&g_next_hub, 1) % RX_THREADS];
  pthread_mutex_lock(&h->mu);
  int rc = 0;
  if (!h->started) {
    if (h->epfd < 0) h->epfd = epoll_create1(EPOLL_CLOEXEC);
    pthread_t th;
    sigset_t all, old; /* the receiver must not take the process's signals (Ctrl-C belongs to the caller) */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    if (h->epfd < 0 || pthread_create(&th, NULL, hub_main, h) != 0)
      rc = lm_errf(err, LOOM_NO_MEMORY, "cannot start a receiver thread");
    else
      pthread_detach(th), h->started = true;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
  }
  int epfd = h->epfd;
  pthread_mutex_unlock(&h->mu);
  if (rc < 0) return rc;
  c->hub = h;
  c->hub_epfd_cache = epfd;
  struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = c};
  if (epoll_ctl(epfd, EPOLL_CTL_ADD, c->fd, &ev) != 0) {
    c->hub = NULL;
    return lm_errf(err, LOOM_NO_MEMORY, "cannot watch the connection: %s", strerror(errno));
  }
  return 0;
}

/* ---- calls ---- */

/* Requests that may be sent again after a restart: the controller answers a repeat of each the
 * same way (a LAUNCH whose outputs exist is not run twice; a create of an array the session has
 * gets its placement again). */
static bool resendable(unsigned type) {
  switch (type) {
  case LM_MSG_LAUNCH: case LM_MSG_ARRAY_CREATE: case LM_MSG_ARRAY_LOCATE: case LM_MSG_ARRAY_DELETE:
  case LM_MSG_COMPILE: case LM_MSG_EXECUTABLE_DESTROY: case LM_MSG_LIST_DEVICES: case LM_MSG_CLUSTER_STATUS:
  case LM_MSG_PING: case LM_MSG_POOL_STATUS:
    return true;
  default:
    return false;
  }
}

/* Stops the stream. With a peer that copies into our memory only our sending side is closed:
 * the receiver ends when the peer closed its end, i.e. when none of its copies runs any more. */
static void break_connection(lm_cconn *c) { shutdown(c->fd, atomic_load(&c->peer_access) ? SHUT_WR : SHUT_RDWR); }

int lm_cconn_start(lm_cconn *c, unsigned type, const ProtobufCMessage *m, const void *payload, uint64_t plen,
                   void *dst, uint64_t dst_cap, lm_call **out, lm_err *err) {
  *out = NULL;
  if (c->peer_max_payload && plen > c->peer_max_payload) /* it would drop the connection: refuse here */
    return lm_errf(err, LOOM_INVALID_ARGUMENT,
                   "%s carries %llu bytes, more than the %llu the peer accepts in one message (a controller's "
                   "--max-payload)", lm_msg_name(type), (unsigned long long)plen,
                   (unsigned long long)c->peer_max_payload);
  lm_call *call = calloc(1, sizeof *call);
  if (!call) return lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&call->cv, &ca);
  pthread_condattr_destroy(&ca);
  call->conn = c;
  call->dst = dst;
  call->dst_cap = dst ? dst_cap : 0;
  call->type = type;
  pthread_mutex_lock(&c->mu);
  if (c->broken) {
    if (err) *err = c->broken_err;
    int code = c->broken_err.code;
    pthread_mutex_unlock(&c->mu);
    call_free(call);
    return code;
  }
  call->rid = ++c->next_rid;
  pthread_mutex_unlock(&c->mu);

  uint8_t *head;
  size_t hlen;
  int rc = lm_msg_encode(type, call->rid, m, plen, &head, &hlen, err);
  if (rc < 0) {
    call_free(call);
    return rc;
  }
  if (c->resumable && resendable(type)) { /* kept whole, to be sent again if the controller restarts meanwhile */
    call->req = malloc(hlen + (size_t)plen);
    if (!call->req) {
      free(head);
      call_free(call);
      return lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
    }
    memcpy(call->req, head, hlen);
    if (plen) memcpy(call->req + hlen, payload, (size_t)plen);
    call->req_len = hlen + (size_t)plen;
  }
  /* listed and sent under send_mu: a reconnect (which sends the listed calls again on the new
   * connection, under send_mu too) sees each call either before it went out or after */
  pthread_mutex_lock(&c->send_mu);
  pthread_mutex_lock(&c->mu);
  if (c->broken) {
    if (err) *err = c->broken_err;
    rc = c->broken_err.code;
    pthread_mutex_unlock(&c->mu);
    pthread_mutex_unlock(&c->send_mu);
    free(head);
    call_free(call);
    return rc;
  }
  table_insert(c, call);
  bool defer = c->reconnecting; /* the reconnect sends it, or fails it if it is not resendable */
  int fd = c->fd;
  if (!defer) call->gen = c->gen;
  pthread_mutex_unlock(&c->mu);
  if (!defer) {
    struct iovec iov[2] = {{head, hlen}, {(void *)payload, (size_t)plen}};
    uint64_t deadline = c->send_timeout_ms >= 0 ? lm_now_ms() + (uint64_t)c->send_timeout_ms : 0;
    rc = lm_sock_send_all(fd, iov, plen ? 2 : 1, deadline, c->intr, c->intr_arg, err);
  }
  pthread_mutex_unlock(&c->send_mu);
  free(head);
  if (rc < 0 && call->req) { /* the stream broke: the receiver sees it, reconnects and sends the call again */
    shutdown(fd, SHUT_RDWR);
    rc = 0;
  }
  if (rc < 0) { /* part of a frame may be on the wire: the stream is no longer usable */
    /* A peer that refuses a large payload says why (an ERROR frame) and closes; the send then
     * fails. Keep reading a moment so the caller hears the peer's reason, not just "broken pipe". */
    shutdown(c->fd, SHUT_WR);
    lm_err perr;
    int prc = lm_call_wait(call, 2000, NULL, NULL, &perr);
    if (prc < 0 && prc != LOOM_TIMEOUT) {
      rc = prc;
      if (err) *err = perr;
    } else {
      lm_err_prefix(err, "sending %s to %s", lm_msg_name(type), c->addr);
    }
    break_connection(c);
  }
  if (rc < 0) {
    pthread_mutex_lock(&c->mu);
    if (table_find(c, call->rid, true) || call->state == CALL_DONE) call_free(call);
    else call->released = true; /* the receiver has it in hand and frees it */
    pthread_mutex_unlock(&c->mu);
    return rc;
  }
  *out = call;
  return 0;
}

static void abs_time(uint64_t ms_from_now, struct timespec *ts) {
  clock_gettime(CLOCK_MONOTONIC, ts);
  ts->tv_sec += (time_t)(ms_from_now / 1000);
  ts->tv_nsec += (long)(ms_from_now % 1000) * 1000000L;
  if (ts->tv_nsec >= 1000000000L) {
    ts->tv_sec++;
    ts->tv_nsec -= 1000000000L;
  }
}

int lm_call_wait(lm_call *call, int64_t timeout_ms, lm_interrupt_fn intr, void *intr_arg, lm_err *err) {
  lm_cconn *c = call->conn;
  uint64_t deadline = timeout_ms >= 0 ? lm_now_ms() + (uint64_t)timeout_ms : 0;
  pthread_mutex_lock(&c->mu);
  while (call->state != CALL_DONE) {
    if (intr) { /* the hook may take other locks (a Python binding's GIL): call it unlocked */
      pthread_mutex_unlock(&c->mu);
      int stop = intr(intr_arg);
      pthread_mutex_lock(&c->mu);
      if (stop && call->state != CALL_DONE) {
        pthread_mutex_unlock(&c->mu);
        return lm_errf(err, LOOM_CANCELLED, "interrupted while waiting for %s", c->peer);
      }
      if (call->state == CALL_DONE) break;
    }
    uint64_t slice = intr ? WAIT_SLICE_MS : 3600 * 1000;
    if (timeout_ms >= 0) {
      uint64_t now = lm_now_ms();
      if (now >= deadline) {
        pthread_mutex_unlock(&c->mu);
        return lm_errf(err, LOOM_TIMEOUT, "no reply from %s within %lld ms", c->peer, (long long)timeout_ms);
      }
      if (deadline - now < slice) slice = deadline - now;
    }
    struct timespec ts;
    abs_time(slice, &ts);
    pthread_cond_timedwait(&call->cv, &c->mu, &ts);
  }
  int status = call->status;
  if (status < 0 && err) *err = call->err;
  pthread_mutex_unlock(&c->mu);
  return status;
}

bool lm_call_done(lm_call *call) {
  pthread_mutex_lock(&call->conn->mu);
  bool done = call->state == CALL_DONE;
  pthread_mutex_unlock(&call->conn->mu);
  return done;
}

uint64_t lm_call_request_id(const lm_call *call) { return call->rid; } /* set before sending, never changed */

int lm_call_take_reply(lm_call *call, lm_reply *out, lm_err *err) {
  lm_cconn *c = call->conn;
  pthread_mutex_lock(&c->mu);
  int rc = 0;
  if (call->state != CALL_DONE) rc = lm_errf(err, LOOM_INTERNAL, "call not complete");
  else if (call->status < 0) {
    rc = call->status;
    if (err) *err = call->err;
  } else if (!call->has_reply) rc = lm_errf(err, LOOM_INTERNAL, "reply already taken");
  else {
    *out = call->reply;
    memset(&call->reply, 0, sizeof call->reply);
    call->has_reply = false;
  }
  pthread_mutex_unlock(&c->mu);
  return rc;
}

void lm_call_release(lm_call *call) {
  if (!call) return;
  lm_cconn *c = call->conn;
  pthread_mutex_lock(&c->mu);
  if (call->state == CALL_DONE) {
    call_free(call);
  } else {
    call->released = true; /* the receiver frees it when its reply (or the end) comes */
    if (atomic_load(&c->peer_access)) { /* the peer may be copying the call's memory: see let_go */
      break_connection(c);
      struct timespec ts;
      abs_time(LET_GO_MS, &ts);
      while (!c->broken && pthread_cond_timedwait(&c->sink_cv, &c->mu, &ts) != ETIMEDOUT) {}
      if (!c->broken) { /* a stuck peer: stop reading too; it checks our hang-up before every copy */
        shutdown(c->fd, SHUT_RDWR);
        while (!c->broken) pthread_cond_wait(&c->sink_cv, &c->mu);
      }
    } else if (c->sink_call == call) { /* its buffer is being written: stop the stream, wait for the writer */
      break_connection(c);
      while (c->sink_call == call) pthread_cond_wait(&c->sink_cv, &c->mu);
    }
  }
  pthread_mutex_unlock(&c->mu);
}

int lm_cconn_call(lm_cconn *c, unsigned type, const ProtobufCMessage *m, unsigned expect, int64_t timeout_ms,
                  lm_interrupt_fn intr, void *intr_arg, ProtobufCMessage **reply_msg, lm_err *err) {
  *reply_msg = NULL;
  lm_call *call;
  LM_TRY(lm_cconn_start(c, type, m, NULL, 0, NULL, 0, &call, err));
  int rc = lm_call_wait(call, timeout_ms, intr, intr_arg, err);
  lm_reply r = {0};
  if (rc == 0) rc = lm_call_take_reply(call, &r, err);
  lm_call_release(call);
  if (rc < 0) return rc;
  if (r.type != expect) {
    lm_reply_free(&r);
    return lm_errf(err, LOOM_PROTOCOL, "%s answered %s with %s (expected %s)", c->peer, lm_msg_name(type),
                   lm_msg_name(r.type), lm_msg_name(expect));
  }
  *reply_msg = r.msg;
  r.msg = NULL;
  lm_reply_free(&r);
  return 0;
}

/* ---- open / close ---- */

/* Copies s if it is printable ASCII and fits; else leaves "". */
static void copy_printable(char *dst, size_t cap, const char *s) {
  dst[0] = 0;
  size_t n = s ? strnlen(s, cap) : 0;
  if (n == 0 || n >= cap) return;
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] >= 0x7f) return;
  memcpy(dst, s, n);
  dst[n] = 0;
}

static void save_local(lm_cconn_local *l, const Lmw__HelloReply *hr) {
  copy_printable(l->socket, sizeof l->socket, hr->local_socket);
  if (l->socket[0] != '@' || !l->socket[1]) l->socket[0] = 0;
  copy_printable(l->boot_id, sizeof l->boot_id, hr->boot_id);
  l->ptracer_pid = hr->ptracer_pid;
  l->transfer = hr->local_transfer;
  size_t n = hr->local_refused ? strnlen(hr->local_refused, sizeof l->refused - 1) : 0;
  for (size_t i = 0; i < n; i++) /* a peer's text, shown to users: one line */
    l->refused[i] = (unsigned char)hr->local_refused[i] < 0x20 || hr->local_refused[i] == 0x7f ? ' ' : hr->local_refused[i];
  l->refused[n] = 0;
}

int lm_cconn_open(const char *addr, const lm_cconn_options *opts, lm_cconn **out, lm_err *err) {
  *out = NULL;
  lm_cconn_options o = {.timeout_ms = 30000};
  if (opts) o = *opts;
  lm_cconn *c = calloc(1, sizeof *c);
  if (!c || !(c->rbuf = malloc(RBUF_SIZE))) {
    free(c);
    return lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  }
  snprintf(c->addr, sizeof c->addr, "%s", addr);
  snprintf(c->peer, sizeof c->peer, "%s", o.peer ? o.peer : "the controller");
  c->send_timeout_ms = o.timeout_ms;
  c->intr = o.intr;
  c->intr_arg = o.intr_arg;
  c->on_queue = o.on_queue;
  c->on_queue_arg = o.on_queue_arg;
  c->fd = -1;
  pthread_mutex_init(&c->mu, NULL);
  pthread_mutex_init(&c->send_mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&c->sink_cv, &ca);
  pthread_cond_init(&c->rx_cv, &ca);
  pthread_condattr_destroy(&ca);
  lm_frame_limits lim = o.limits;
  if (!lim.max_meta) lim.max_meta = LM_FRAME_META_HARD_MAX;
  if (!lim.max_payload) lim.max_payload = LM_FRAME_PAYLOAD_DEFAULT_MAX;
  lm_frame_reader_init(&c->reader, &lim);
  c->reader.sink = rx_sink;
  c->reader.sink_arg = c;

  int rc = lm_sock_connect(addr, o.timeout_ms, o.intr, o.intr_arg, &c->fd, err);
  if (rc == 0 && o.on_connected) rc = o.on_connected(o.on_connected_arg, c->fd, err);
  if (rc == 0) rc = rx_register(c, err);
  if (rc == 0) {
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    Lmw__Hello h = LMW__HELLO__INIT;
    h.protocol_version = LM_PROTOCOL_VERSION;
    h.role = LMW__ROLE__ROLE_CLIENT;
    h.software = "loom " LOOM_VERSION_STRING;
    h.host = host;
    h.pid = (uint32_t)getpid();
    h.name = (char *)(o.name ? o.name : "");
    h.auth_token.data = (uint8_t *)o.auth_token;
    h.auth_token.len = o.auth_token ? o.auth_token_len : 0;
    h.local_offer = o.local_offer;
    if (o.local_probe) {
      h.local_probe_address = (uint64_t)(uintptr_t)o.local_probe;
      h.local_probe.data = (uint8_t *)o.local_probe;
      h.local_probe.len = LM_LOCAL_PROBE_SIZE;
    }
    h.pool_devices = o.pool_devices;
    h.priority = (char *)(o.priority ? o.priority : "");
    h.launch_limit_ms = o.launch_limit_ms;
    h.share_weight = o.share_weight;
    ProtobufCMessage *rm;
    int64_t hello_ms = o.pool_devices ? (o.queue_timeout_ms > 0 ? o.queue_timeout_ms : -1) : o.timeout_ms;
    rc = lm_cconn_call(c, LM_MSG_HELLO, &h.base, LM_MSG_HELLO_REPLY, hello_ms, o.intr, o.intr_arg, &rm, err);
    if (rc == LOOM_TIMEOUT && o.pool_devices)
      rc = lm_errf(err, LOOM_TIMEOUT, "the session waited %lld ms in the pool's queue for %u devices without being "
                   "admitted (the queue timeout)", (long long)o.queue_timeout_ms, o.pool_devices);
    if (rc == 0) {
      Lmw__HelloReply *hr = (Lmw__HelloReply *)rm;
      c->pool.ndevices = (uint32_t)hr->n_pool_device_ids;
      copy_printable(c->pool.priority, sizeof c->pool.priority, hr->priority);
      c->pool.queued_ms = hr->queued_ms;
      c->session_id = hr->session_id;
      c->peer_max_payload = hr->max_payload;
      const char *rc_env = getenv("LOOM_RECONNECT");
      if (hr->resume_secret.len == sizeof c->resume_secret && !(rc_env && !strcmp(rc_env, "0"))) {
        /* a controller with a journal: this session survives its restart (docs/durability.md) */
        memcpy(c->resume_secret, hr->resume_secret.data, sizeof c->resume_secret);
        snprintf(c->name, sizeof c->name, "%s", o.name ? o.name : "");
        snprintf(c->priority, sizeof c->priority, "%s", o.priority ? o.priority : "");
        c->launch_limit_ms = o.launch_limit_ms;
        c->share_weight = o.share_weight;
        c->pool_devices = o.pool_devices; /* a pool session gets its devices back (docs/pool.md) */
        c->limits = lim;
        if (o.auth_token && o.auth_token_len && (c->token = malloc(o.auth_token_len))) {
          memcpy(c->token, o.auth_token, o.auth_token_len);
          c->token_len = o.auth_token_len;
        }
        c->resumable = !(o.auth_token && o.auth_token_len) || c->token;
      }
      snprintf(c->software, sizeof c->software, "%s", hr->software);
      save_local(&c->local, hr);
      if (hr->protocol_version != LM_PROTOCOL_VERSION)
        rc = lm_errf(err, LOOM_VERSION_MISMATCH, "%s speaks protocol version %u, this client %d", c->peer,
                     hr->protocol_version, LM_PROTOCOL_VERSION);
      lm_msg_free(rm);
    }
  }
  if (rc < 0) {
    lm_cconn_close(c);
    return rc;
  }
  *out = c;
  return 0;
}

void lm_cconn_close(lm_cconn *c) {
  if (!c) return;
  pthread_mutex_lock(&c->mu);
  c->closing = true; /* no reconnect from now on */
  pthread_cond_broadcast(&c->rx_cv);
  if (c->fd >= 0) shutdown(c->fd, SHUT_RDWR); /* its receiver sees the end and lets go of it */
  pthread_mutex_unlock(&c->mu);
  if (c->hub) {
    pthread_mutex_lock(&c->mu);
    while (!c->rx_done) pthread_cond_wait(&c->rx_cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
  } else {
    lm_frame_reader_free(&c->reader);
  }
  if (c->fd >= 0) close(c->fd);
  pthread_mutex_destroy(&c->mu);
  pthread_mutex_destroy(&c->send_mu);
  pthread_cond_destroy(&c->sink_cv);
  pthread_cond_destroy(&c->rx_cv);
  free(c->rbuf);
  for (size_t i = 0; c->token && i < c->token_len; i++) ((volatile uint8_t *)c->token)[i] = 0; /* no copy of it stays */
  free(c->token);
  free(c);
}

uint64_t lm_cconn_session_id(const lm_cconn *c) { return c->session_id; }
const char *lm_cconn_address(const lm_cconn *c) { return c->addr; }
const char *lm_cconn_server_software(const lm_cconn *c) { return c->software; }

const lm_cconn_local *lm_cconn_local_info(const lm_cconn *c) { return &c->local; }
const lm_cconn_pool *lm_cconn_pool_info(const lm_cconn *c) { return &c->pool; }

void lm_cconn_set_peer_access(lm_cconn *c) { atomic_store(&c->peer_access, true); }

bool lm_cconn_ok(lm_cconn *c, lm_err *err) {
  pthread_mutex_lock(&c->mu);
  bool ok = !c->broken;
  if (!ok && err) *err = c->broken_err;
  pthread_mutex_unlock(&c->mu);
  return ok;
}

/* ---- resuming the session after the controller restarts (docs/durability.md) ---- */

#define RECONNECT_DEFAULT_MS 60000
#define RESUME_HELLO_RID 1

typedef struct hello_wait {
  int rc;
  bool got;
  lm_err err;
  uint64_t max_payload;
} hello_wait;

static int hello_frame(void *arg, lm_frame *f, lm_err *err) {
  (void)err;
  hello_wait *hw = arg;
  if (f->h.request_id != RESUME_HELLO_RID && f->h.type != LM_MSG_ERROR) return 0;
  hw->got = true;
  if (f->h.type == LM_MSG_ERROR) {
    hw->rc = lm_msg_error_status(f, &hw->err);
    return 1;
  }
  ProtobufCMessage *m;
  hw->rc = lm_msg_decode(f, &m, &hw->err);
  if (hw->rc == 0 && f->h.type != LM_MSG_HELLO_REPLY)
    hw->rc = lm_errf(&hw->err, LOOM_PROTOCOL, "the controller answered HELLO with %s", lm_msg_name(f->h.type));
  else if (hw->rc == 0 && !((Lmw__HelloReply *)m)->resumed)
    hw->rc = lm_errf(&hw->err, LOOM_PROTOCOL, "the controller did not resume the session");
  else if (hw->rc == 0)
    hw->max_payload = ((Lmw__HelloReply *)m)->max_payload;
  if (hw->rc == 0 || f->h.type == LM_MSG_HELLO_REPLY) lm_msg_free(m);
  return 1;
}

/* HELLO with the session's id and resume secret on a new connection, answered before this
 * returns (the receiver does not watch fd yet). */
static int resume_hello(lm_cconn *c, int fd, lm_err *err) {
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  Lmw__Hello h = LMW__HELLO__INIT;
  h.protocol_version = LM_PROTOCOL_VERSION;
  h.role = LMW__ROLE__ROLE_CLIENT;
  h.software = "loom " LOOM_VERSION_STRING;
  h.host = host;
  h.pid = (uint32_t)getpid();
  h.name = c->name;
  h.auth_token.data = c->token;
  h.auth_token.len = c->token_len;
  h.priority = c->priority;
  h.launch_limit_ms = c->launch_limit_ms;
  h.share_weight = c->share_weight;
  h.pool_devices = c->pool_devices;
  h.resume_session = c->session_id;
  h.resume_secret.data = c->resume_secret;
  h.resume_secret.len = sizeof c->resume_secret;
  uint8_t *head;
  size_t hlen;
  LM_TRY(lm_msg_encode(LM_MSG_HELLO, RESUME_HELLO_RID, &h.base, 0, &head, &hlen, err));
  struct iovec iov = {head, hlen};
  uint64_t deadline = lm_now_ms() + 5000;
  int rc = lm_sock_send_all(fd, &iov, 1, deadline, NULL, NULL, err);
  free(head);
  if (rc < 0) return LOOM_CLOSED;
  lm_frame_reader r;
  lm_frame_reader_init(&r, &c->limits);
  hello_wait hw = {0};
  uint8_t buf[4096];
  deadline = lm_now_ms() + 10000;
  while (!hw.got && rc == 0) {
    uint64_t now = lm_now_ms();
    if (now >= deadline) {
      rc = lm_errf(err, LOOM_TIMEOUT, "no answer to HELLO");
      break;
    }
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    int pr = poll(&pfd, 1, (int)(deadline - now));
    if (pr < 0 && errno == EINTR) continue;
    if (pr <= 0) continue;
    ssize_t k = recv(fd, buf, sizeof buf, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      rc = lm_errf(err, LOOM_CLOSED, "%s closed the connection during HELLO", c->peer);
      break;
    }
    if (lm_frame_reader_feed(&r, buf, (size_t)k, hello_frame, &hw, err) < 0) rc = LOOM_PROTOCOL;
  }
  lm_frame_reader_free(&r);
  if (rc == 0 && hw.rc < 0) {
    if (err) *err = hw.err;
    rc = hw.rc;
  }
  if (rc == 0 && hw.max_payload) c->peer_max_payload = hw.max_payload;
  return rc;
}

static int cmp_rid(const void *a, const void *b) {
  uint64_t x = (*(lm_call *const *)a)->rid, y = (*(lm_call *const *)b)->rid;
  return x < y ? -1 : x > y;
}


/* The new connection is resumed: it replaces the old one, and every request waiting goes out on
 * it in the order it was first made. Then the receiver watches it. */
static void switch_over(lm_cconn *c, int fd) {
  pthread_mutex_lock(&c->send_mu);
  pthread_mutex_lock(&c->mu);
  int old = c->fd;
  c->fd = fd;
  c->gen++;
  lm_frame_reader_init(&c->reader, &c->limits);
  c->reader.sink = rx_sink;
  c->reader.sink_arg = c;
  c->rx_rc = 0;
  lm_err_clear(&c->rx_err);
  size_t n = 0;
  for (size_t b = 0; b < NBUCKETS; b++)
    for (lm_call *call = c->buckets[b]; call; call = call->next) n++;
  lm_call **calls = calloc(n ? n : 1, sizeof *calls);
  size_t k = 0;
  for (size_t b = 0; calls && b < NBUCKETS; b++)
    for (lm_call *call = c->buckets[b]; call; call = call->next) calls[k++] = call;
  if (calls) qsort(calls, k, sizeof *calls, cmp_rid);
  for (size_t i = 0; i < k; i++) { /* what cannot be repeated safely fails, clearly */
    lm_call *call = calls[i];
    if (call->req && resendable(call->type)) continue;
    table_find(c, call->rid, true);
    call->status = lm_errf(&call->err, LOOM_CLOSED, "the connection to %s broke while %s was in flight; the session "
                           "was resumed after the controller restarted, but %s is not sent again (it may or may not "
                           "have taken effect)", c->peer, lm_msg_name(call->type), lm_msg_name(call->type));
    complete_locked(call);
    calls[i] = NULL;
  }
  c->reconnecting = false;
  c->reconnects++;
  bool closing = c->closing;
  pthread_mutex_unlock(&c->mu);
  close(old);
  uint64_t deadline = lm_now_ms() + 30000;
  for (size_t i = 0; i < k; i++) {
    if (!calls[i]) continue;
    struct iovec iov = {calls[i]->req, calls[i]->req_len};
    calls[i]->gen = c->gen;
    lm_err e;
    if (lm_sock_send_all(fd, &iov, 1, deadline, NULL, NULL, &e) < 0) {
      shutdown(fd, SHUT_RDWR); /* broke again: the receiver sees it and reconnects once more */
      break;
    }
  }
  free(calls);
  pthread_mutex_unlock(&c->send_mu);
  if (closing) shutdown(fd, SHUT_RDWR); /* the receiver sees the end at once */
  /* last: once the receiver watches fd, it may finish with c (and lm_cconn_close free it) */
  struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = c};
  if (epoll_ctl(c->hub_epfd_cache, EPOLL_CTL_ADD, fd, &ev) != 0) {
    lm_errf(&c->rx_err, LOOM_NO_MEMORY, "cannot watch the new connection to %s: %s", c->addr, strerror(errno));
    finish_broken(c);
  }
}

static void *reconnect_main(void *arg) {
  lm_cconn *c = arg;
  const char *env = getenv("LOOM_RECONNECT_TIMEOUT_MS");
  uint64_t limit = env && *env ? strtoull(env, NULL, 10) : RECONNECT_DEFAULT_MS;
  uint64_t t0 = lm_now_ms(), backoff = 50;
  lm_err err = c->rx_err;
  for (;;) {
    pthread_mutex_lock(&c->mu);
    bool closing = c->closing;
    pthread_mutex_unlock(&c->mu);
    if (closing) {
      lm_errf(&err, LOOM_CLOSED, "the connection was closed while reconnecting to %s", c->addr);
      break;
    }
    int fd = -1;
    lm_err e;
    int rc = lm_sock_connect(c->addr, 2000, NULL, NULL, &fd, &e);
    if (rc == 0) {
      rc = resume_hello(c, fd, &e);
      if (rc == 0) {
        switch_over(c, fd);
        return NULL;
      }
      close(fd);
      if (rc == LOOM_NOT_FOUND || rc == LOOM_PERMISSION || rc == LOOM_UNSUPPORTED || rc == LOOM_VERSION_MISMATCH) {
        lm_errf(&err, rc, "lost the connection to %s and it cannot resume session %llu: %s", c->addr,
                (unsigned long long)c->session_id, e.msg);
        break;
      }
    }
    if (lm_now_ms() - t0 >= limit) {
      lm_errf(&err, LOOM_CLOSED, "lost the connection to %s and could not resume the session within %llu ms "
              "(LOOM_RECONNECT_TIMEOUT_MS): %s", c->addr, (unsigned long long)limit, e.msg);
      break;
    }
    pthread_mutex_lock(&c->mu);
    struct timespec ts;
    abs_time(backoff, &ts);
    if (!c->closing) pthread_cond_timedwait(&c->rx_cv, &c->mu, &ts);
    pthread_mutex_unlock(&c->mu);
    backoff = backoff * 2 > 500 ? 500 : backoff * 2;
  }
  c->rx_err = err;
  pthread_mutex_lock(&c->mu);
  c->have_peer_err = false; /* the reason is ours */
  pthread_mutex_unlock(&c->mu);
  finish_broken(c);
  return NULL;
}

static bool start_reconnect(lm_cconn *c) {
  if (!c->resumable) return false;
  pthread_mutex_lock(&c->mu);
  bool go = !c->closing && !c->have_peer_err && c->rx_rc == LOOM_CLOSED;
  if (go) c->reconnecting = true;
  pthread_mutex_unlock(&c->mu);
  if (!go) return false;
  lm_frame_reader_free(&c->reader);
  c->sink_call = NULL;
  pthread_t th;
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  bool ok = pthread_create(&th, NULL, reconnect_main, c) == 0;
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (!ok) {
    pthread_mutex_lock(&c->mu);
    c->reconnecting = false;
    pthread_mutex_unlock(&c->mu);
    return false;
  }
  pthread_detach(th);
  return true;
}

uint64_t lm_cconn_reconnects(lm_cconn *c) {
  pthread_mutex_lock(&c->mu);
  uint64_t n = c->reconnects;
  pthread_mutex_unlock(&c->mu);
  return n;
}
