/* Local transfers: a client on the same host moves shard bytes with ONE copy, made by the worker
 * between the client's memory and the shard's device buffer with process_vm_readv/writev
 * (cross-memory attach), instead of twice through a loopback socket. This file is the
 * kernel-facing half: the worker's local socket (an abstract Unix-domain socket: nothing on disk,
 * gone with the process), who the peer process is (kernel credentials, a pidfd), the access probe
 * of the handshake, checking the client's ranges, and the copy engine (chunks on libuv's thread
 * pool). wk_data.c speaks the protocol. docs/protocol.md "Local transfers" has the design. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>
#include "common/log.h"
#include "worker/wk.h"

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77 /* Linux 6.5: a pidfd of the process that connected */
#endif
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

#define CHUNK ((uint64_t)8 << 20) /* bytes per thread-pool work item */
#define IOV_BATCH 1024            /* remote iovecs per system call (IOV_MAX) */

struct wk_peer {
  atomic_int refs;
  pid_t pid;                 /* in the worker's pid namespace (SO_PEERCRED); 0: not visible */
  uid_t uid;
  int pidfd;                 /* the peer process (readable once it exited); -1: none */
  int sockfd;                /* a duplicate of the connection's socket: see wk_local_accept */
};

/* ---- the local socket ---- */

/* The pid a client under Yama ptrace_scope 1 should name with PR_SET_PTRACER: a process whose
 * descendants include every worker it talks to. Workers started by `loom up` are children of a
 * supervisor running the same binary: that one (all its workers then qualify); else this one. */
static uint32_t ptracer_pid(void) {
  char self[PATH_MAX], parent[PATH_MAX], path[64];
  ssize_t a = readlink("/proc/self/exe", self, sizeof self - 1);
  snprintf(path, sizeof path, "/proc/%d/exe", (int)getppid());
  ssize_t b = readlink(path, parent, sizeof parent - 1);
  if (a > 0 && a == b && !memcmp(self, parent, (size_t)a) && getppid() > 1) return (uint32_t)getppid();
  return (uint32_t)getpid();
}

int wk_local_start(wk *w, uv_connection_cb on_connection, lm_err *err) {
  const char *mode = getenv("LOOM_TRANSFER");
  if (mode && !strcmp(mode, "tcp")) {
    lm_info("local transfers disabled (LOOM_TRANSFER=tcp): clients use the data port only");
    return 0;
  }
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (f) {
    if (fgets(w->boot_id, sizeof w->boot_id, f)) w->boot_id[strcspn(w->boot_id, "\r\n")] = 0;
    fclose(f);
  }
  uint64_t nonce = 0;
  if (getrandom(&nonce, sizeof nonce, 0) != (ssize_t)sizeof nonce || !w->boot_id[0]) {
    lm_info("local transfers unavailable: no boot id or random source");
    return 0;
  }
  char name[64];
  snprintf(name, sizeof name, "loom-data-%d-%016llx", (int)getpid(), (unsigned long long)nonce);
  w->local_server.data = w;
  lm_err e;
  if (lm_listen_local(&w->loop, &w->local_server, name, on_connection, &e) < 0) {
    lm_info("local transfers unavailable: %s", e.msg); /* the data port still serves everyone */
    return 0;
  }
  w->local_server.data = w;
  w->local_open = true;
  w->ptracer_pid = ptracer_pid();
  snprintf(w->local_name, sizeof w->local_name, "@%s", name);
  (void)err;
  return 0;
}

void wk_local_stop(wk *w) {
  if (w->local_open) {
    uv_close((uv_handle_t *)&w->local_server, NULL);
    w->local_open = false;
  }
}

/* ---- peers ---- */

wk_peer *wk_local_accept(lm_conn *conn) {
  wk_peer *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  atomic_init(&p->refs, 1);
  p->pidfd = p->sockfd = -1;
  int fd = lm_conn_fd(conn);
  struct ucred cr;
  socklen_t cl = sizeof cr;
  if (fd >= 0 && getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) == 0) {
    p->pid = cr.pid;
    p->uid = cr.uid;
  }
  if (p->pid > 0) {
    /* The pidfd pins the identity: once it says "exited", the pid may be reused and is never
     * used again. SO_PEERPIDFD names the process that connected; on older kernels pidfd_open
     * right now is the next best thing (that process is normally still waiting for our HELLO). */
    int pfd;
    socklen_t pl = sizeof pfd;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD, &pfd, &pl) == 0 && pfd >= 0) p->pidfd = pfd;
    else p->pidfd = (int)syscall(SYS_pidfd_open, p->pid, 0);
    if (p->pidfd >= 0) fcntl(p->pidfd, F_SETFD, FD_CLOEXEC);
  }
  /* The client sees the connection end only when every descriptor of it is closed: this one is
   * closed after the last copy into its memory finished, so a client that gives up on a pending
   * transfer can wait for EOF and know nothing writes its memory any more. */
  if (fd >= 0) p->sockfd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
  return p;
}

static wk_peer *peer_ref(wk_peer *p) {
  atomic_fetch_add(&p->refs, 1);
  return p;
}

void wk_peer_release(wk_peer *p) {
  if (!p || atomic_fetch_sub(&p->refs, 1) != 1) return;
  if (p->pidfd >= 0) close(p->pidfd);
  if (p->sockfd >= 0) close(p->sockfd);
  free(p);
}

/* True while the peer process has not exited (its pid still names it). */
static bool peer_alive(const wk_peer *p) {
  if (p->pidfd < 0) return false;
  struct pollfd q = {.fd = p->pidfd, .events = POLLIN};
  int n;
  do n = poll(&q, 1, 0);
  while (n < 0 && errno == EINTR);
  return n == 0;
}

/* True once the client shut its end of the connection: it gave up on what it asked (a timeout, an
 * interrupt) and may reuse that memory. Seen by the kernel at once, before the loop reads the EOF. */
static bool peer_hung_up(const wk_peer *p) {
  if (p->sockfd < 0) return true;
  struct pollfd q = {.fd = p->sockfd, .events = POLLRDHUP};
  int n;
  do n = poll(&q, 1, 0);
  while (n < 0 && errno == EINTR);
  return n > 0 && (q.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

static const char *access_hint(int e) {
  return e == EPERM || e == EACCES ? " (the kernel refused: a different user, Yama ptrace_scope, or a seccomp filter)"
         : e == ENOSYS             ? " (not available in this kernel or sandbox)"
                                   : "";
}

bool wk_local_hello(const wk_peer *p, const Lmw__Hello *h, char *why, size_t cap) {
  if (!p) return snprintf(why, cap, "out of host memory"), false;
  if (p->pid <= 0) return snprintf(why, cap, "the client's process is not visible from the worker's pid namespace"), false;
  if (p->uid != geteuid())
    return snprintf(why, cap, "the client runs as uid %u, the worker as uid %u", (unsigned)p->uid, (unsigned)geteuid()),
           false;
  if (p->pidfd < 0) return snprintf(why, cap, "cannot follow the client's process (no pidfd: Linux 5.3 or later)"), false;
  if (p->sockfd < 0) return snprintf(why, cap, "out of file descriptors"), false;
  if (h->local_probe.len != LM_LOCAL_PROBE_SIZE || !h->local_probe_address)
    return snprintf(why, cap, "the HELLO has no %d-byte probe", LM_LOCAL_PROBE_SIZE), false;
  uint8_t got[LM_LOCAL_PROBE_SIZE];
  struct iovec l = {got, sizeof got}, r = {(void *)(uintptr_t)h->local_probe_address, sizeof got};
  ssize_t n = process_vm_readv(p->pid, &l, 1, &r, 1, 0);
  if (n < 0) {
    int e = errno;
    return snprintf(why, cap, "process_vm_readv: %s%s", strerror(e), access_hint(e)), false;
  }
  if (!peer_alive(p)) return snprintf(why, cap, "the client's process exited"), false;
  if (n != (ssize_t)sizeof got || memcmp(got, h->local_probe.data, sizeof got))
    return snprintf(why, cap, "the probe in the client's memory does not match its HELLO"), false;
  return true;
}

/* ---- ranges ---- */

int wk_local_ranges(const uint64_t *words, size_t nwords, wk_ranges *out, lm_err *err) {
  memset(out, 0, sizeof *out);
  if (nwords % 2) return lm_errf(err, LOOM_INVALID_ARGUMENT, "ranges must be (address, length) pairs: %zu numbers", nwords);
  size_t n = nwords / 2;
  if (n > LM_LOCAL_MAX_RANGES)
    return lm_errf(err, LOOM_INVALID_ARGUMENT, "%zu ranges (at most %d)", n, LM_LOCAL_MAX_RANGES);
  if (n) {
    out->iov = malloc(n * sizeof *out->iov);
    out->start = malloc(n * sizeof *out->start);
    if (!out->iov || !out->start) {
      wk_ranges_free(out);
      return lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
    }
  }
  uint64_t total = 0;
  for (size_t i = 0; i < n; i++) {
    uint64_t a = words[2 * i], len = words[2 * i + 1], end;
    /* the kernel confines every access to the client's own address space; these checks keep
     * the arithmetic (and the byte count the worker commits to) exact */
    if (len == 0 || len > (uint64_t)SSIZE_MAX || __builtin_add_overflow(a, len, &end) || end > (uint64_t)UINTPTR_MAX ||
        __builtin_add_overflow(total, len, &total)) {
      wk_ranges_free(out);
      return lm_errf(err, LOOM_INVALID_ARGUMENT, "range %zu (address 0x%llx, %llu bytes) is not a valid range", i,
                     (unsigned long long)a, (unsigned long long)len);
    }
    out->start[i] = total - len;
    out->iov[i].iov_base = (void *)(uintptr_t)a;
    out->iov[i].iov_len = (size_t)len;
  }
  out->n = n;
  out->total = total;
  return 0;
}

void wk_ranges_free(wk_ranges *r) {
  free(r->iov);
  free(r->start);
  memset(r, 0, sizeof *r);
}

/* ---- the copy engine ---- */

struct wk_copy {
  uv_loop_t *loop;
  wk_peer *peer;              /* a reference */
  bool to_peer;               /* get: buffer -> ranges; put: ranges -> bufs */
  uint8_t **bufs;             /* [nbufs]: put: bufs[0] gets the bytes, the others copies; get: bufs[0] */
  size_t nbufs;
  uint64_t nbytes;
  wk_ranges r;                /* owned */
  atomic_int stop;            /* cancelled or failed: chunks not started are skipped */
  uint32_t nchunks, left;     /* left: loop thread only */
  pthread_mutex_t mu;         /* guards code/msg */
  int code;                   /* first failure */
  char msg[LM_ERR_MSG_MAX];
  wk_copy_done_fn done;
  void *arg;
  struct copy_work *works;    /* [nchunks] */
};

struct copy_work {            /* one chunk: bytes [idx * CHUNK, (idx + 1) * CHUNK) */
  uv_work_t req;              /* first: the callbacks get &req */
  wk_copy *cp;
  uint32_t idx;
};

static void copy_fail(wk_copy *cp, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void copy_fail(wk_copy *cp, int code, const char *fmt, ...) {
  pthread_mutex_lock(&cp->mu);
  if (!cp->code) {
    cp->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cp->msg, sizeof cp->msg, fmt, ap);
    va_end(ap);
  }
  pthread_mutex_unlock(&cp->mu);
  atomic_store(&cp->stop, 1);
}

/* Copies bytes [lo, hi) of the shard between the local buffer and the client's ranges. */
static void copy_span(wk_copy *cp, uint64_t lo, uint64_t hi) {
  const wk_ranges *r = &cp->r;
  /* the first range holding byte lo */
  size_t a = 0, b = r->n;
  while (b - a > 1) {
    size_t m = a + (b - a) / 2;
    if (r->start[m] <= lo) a = m;
    else b = m;
  }
  struct iovec rem[IOV_BATCH];
  while (lo < hi) {
    if (atomic_load(&cp->stop)) return;
    if (!peer_alive(cp->peer)) return copy_fail(cp, LOOM_CLOSED, "the client's process exited during the transfer");
    if (peer_hung_up(cp->peer)) return copy_fail(cp, LOOM_CANCELLED, "the client gave up on the transfer");
    size_t k = 0;
    uint64_t pos = lo;
    for (size_t i = a; i < r->n && k < IOV_BATCH && pos < hi; i++, k++) {
      uint64_t off = pos - r->start[i], len = r->iov[i].iov_len - off;
      if (len > hi - pos) len = hi - pos;
      rem[k].iov_base = (uint8_t *)r->iov[i].iov_base + off;
      rem[k].iov_len = (size_t)len;
      pos += len;
    }
    struct iovec loc = {cp->bufs[0] + lo, (size_t)(pos - lo)};
    ssize_t n = cp->to_peer ? process_vm_writev(cp->peer->pid, &loc, 1, rem, (unsigned long)k, 0)
                            : process_vm_readv(cp->peer->pid, &loc, 1, rem, (unsigned long)k, 0);
    int e = errno;
    if (!peer_alive(cp->peer)) return copy_fail(cp, LOOM_CLOSED, "the client's process exited during the transfer");
    const char *fn = cp->to_peer ? "process_vm_writev" : "process_vm_readv";
    if (n < 0 && e == EINTR) continue;
    if (n < 0 && (e == EPERM || e == EACCES || e == ENOSYS))
      return copy_fail(cp, LOOM_UNSUPPORTED, "local transfer refused: %s: %s%s", fn, strerror(e), access_hint(e));
    if (n < 0 && e == ESRCH) return copy_fail(cp, LOOM_CLOSED, "the client's process exited during the transfer");
    if (n < 0 && e == EFAULT)
      return copy_fail(cp, LOOM_INVALID_ARGUMENT, "the client's memory at bytes %llu-%llu of the shard is not %s",
                       (unsigned long long)lo, (unsigned long long)pos, cp->to_peer ? "writable" : "readable");
    if (n < 0) return copy_fail(cp, LOOM_IO, "%s: %s", fn, strerror(e));
    if (n == 0)
      return copy_fail(cp, LOOM_INVALID_ARGUMENT, "the client's memory at byte %llu of the shard is not %s",
                       (unsigned long long)lo, cp->to_peer ? "writable" : "readable");
    /* replicas on other devices of this worker: copies of what just arrived */
    for (size_t j = 1; !cp->to_peer && j < cp->nbufs; j++) memcpy(cp->bufs[j] + lo, cp->bufs[0] + lo, (size_t)n);
    lo += (uint64_t)n;
    while (a < r->n && r->start[a] + r->iov[a].iov_len <= lo) a++; /* a partial copy resumes mid-range */
  }
}

static void work_cb(uv_work_t *req) {
  struct copy_work *w = (struct copy_work *)req;
  wk_copy *cp = w->cp;
  uint64_t lo = (uint64_t)w->idx * CHUNK, hi = lo + CHUNK < cp->nbytes ? lo + CHUNK : cp->nbytes;
  if (!atomic_load(&cp->stop)) copy_span(cp, lo, hi);
}

static void copy_free(wk_copy *cp) {
  wk_peer_release(cp->peer);
  wk_ranges_free(&cp->r);
  free(cp->bufs);
  free(cp->works);
  pthread_mutex_destroy(&cp->mu);
  free(cp);
}

static void after_cb(uv_work_t *req, int status) {
  struct copy_work *w = (struct copy_work *)req;
  wk_copy *cp = w->cp;
  if (status < 0) copy_fail(cp, LOOM_CANCELLED, "transfer cancelled");
  if (--cp->left) return;
  int code = cp->code;
  if (!code && atomic_load(&cp->stop)) code = LOOM_CANCELLED, snprintf(cp->msg, sizeof cp->msg, "transfer cancelled");
  cp->done(code, code ? cp->msg : NULL, cp->arg);
  copy_free(cp);
}

int wk_copy_start(uv_loop_t *loop, wk_peer *peer, bool to_peer, lm_buffer *const *bufs, size_t nbufs, uint64_t nbytes,
                  wk_ranges *r, wk_copy_done_fn done, void *arg, wk_copy **out, lm_err *err) {
  *out = NULL;
  if (r->total != nbytes || !nbytes || !nbufs || !peer)
    return lm_errf(err, LOOM_INTERNAL, "copy of %llu bytes over ranges of %llu", (unsigned long long)nbytes,
                   (unsigned long long)r->total);
  wk_copy *cp = calloc(1, sizeof *cp);
  uint64_t nch = (nbytes + CHUNK - 1) / CHUNK;
  if (cp) cp->works = calloc(nch, sizeof *cp->works);
  if (cp) cp->bufs = malloc(nbufs * sizeof *cp->bufs);
  if (!cp || !cp->works || !cp->bufs) {
    if (cp) free(cp->works), free(cp->bufs);
    free(cp);
    return lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  }
  for (size_t i = 0; i < nbufs; i++) cp->bufs[i] = bufs[i]->data;
  cp->loop = loop;
  cp->peer = peer_ref(peer);
  cp->to_peer = to_peer;
  cp->nbufs = nbufs;
  cp->nbytes = nbytes;
  cp->r = *r;
  memset(r, 0, sizeof *r);
  atomic_init(&cp->stop, 0);
  pthread_mutex_init(&cp->mu, NULL);
  cp->done = done;
  cp->arg = arg;
  cp->nchunks = (uint32_t)nch;
  for (uint32_t i = 0; i < cp->nchunks; i++) {
    cp->works[i].cp = cp;
    cp->works[i].idx = i;
    int rc = uv_queue_work(loop, &cp->works[i].req, work_cb, after_cb);
    if (rc < 0) { /* only with bad arguments; those queued finish (skipped) and report */
      copy_fail(cp, LOOM_INTERNAL, "cannot queue a copy: %s", uv_strerror(rc));
      if (i == 0) {
        copy_free(cp);
        return lm_errf(err, LOOM_INTERNAL, "cannot queue a copy: %s", uv_strerror(rc));
      }
      break;
    }
    cp->left++;
  }
  *out = cp;
  return 0;
}

void wk_copy_cancel(wk_copy *cp) {
  if (cp) atomic_store(&cp->stop, 1);
}
