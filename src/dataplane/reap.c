/* Closing idle connections to UCX's TCP port. UCX's TCP transport listens on a port of its own
 * and accepts every connection there itself: Loom sees a peer only once UCX has an endpoint and
 * a message arrives (whose MAC Loom checks), and UCX offers no hook to refuse or time out a
 * connection that never says anything. Thousands of such idle connections would exhaust the
 * worker's descriptors.
 *
 * So the data plane watches that port from the side: it notes which listening sockets the UCX
 * worker opened (the sockets that appear across ucp_worker_create), and a thread of its own looks
 * at the process's sockets every second. An accepted connection on one of those ports that has
 * not received a single byte for `idle_close_ms` is shut down (shutdown(2), not close: the
 * descriptor stays UCX's, which then sees the peer hang up and frees the connection itself). A
 * real peer's UCX sends its connection request the moment it connects, so it is never taken.
 * Connections that did send bytes are UCX's to judge (a malformed request is dropped by UCX). */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "common/log.h"
#include "dataplane/dp_internal.h"

#define REAP_PERIOD_MS 1000

/* Calls fn(fd, inode, arg) for each socket descriptor of this process. */
static void each_socket(void (*fn)(int fd, unsigned long ino, void *arg), void *arg) {
  DIR *d = opendir("/proc/self/fd");
  if (!d) return;
  int dfd = dirfd(d);
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    int fd = atoi(e->d_name);
    if (fd == dfd) continue;
    char link[64];
    ssize_t n = readlinkat(dfd, e->d_name, link, sizeof link - 1);
    if (n <= 0) continue;
    link[n] = 0;
    unsigned long ino;
    if (sscanf(link, "socket:[%lu]", &ino) == 1) fn(fd, ino, arg);
  }
  closedir(d);
}

static int tcp_local_port(int fd) {
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  if (getsockname(fd, (struct sockaddr *)&ss, &sl) < 0) return -1;
  if (ss.ss_family == AF_INET) return ntohs(((struct sockaddr_in *)&ss)->sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
  return -1;
}

static bool listening(int fd) {
  int v = 0;
  socklen_t l = sizeof v;
  return getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &v, &l) == 0 && v;
}

static void note_inode(int fd, unsigned long ino, void *arg) {
  (void)fd;
  dp_reap_before *b = arg;
  if (b->n == b->cap) {
    size_t cap = b->cap ? b->cap * 2 : 64;
    unsigned long *p = realloc(b->ino, cap * sizeof *p);
    if (!p) return;
    b->ino = p;
    b->cap = cap;
  }
  b->ino[b->n++] = ino;
}

void dp_reap_before_take(dp_reap_before *b) {
  memset(b, 0, sizeof *b);
  each_socket(note_inode, b);
}

typedef struct {
  lm_dp *dp;
  const dp_reap_before *before;
} find_arg;

static void find_listener(int fd, unsigned long ino, void *arg) {
  find_arg *a = arg;
  for (size_t i = 0; i < a->before->n; i++)
    if (a->before->ino[i] == ino) return;
  if (!listening(fd)) return;
  int port = tcp_local_port(fd);
  if (port <= 0 || a->dp->n_reap_ports == DP_REAP_PORTS) return;
  a->dp->reap_ports[a->dp->n_reap_ports++] = (uint16_t)port;
}

static bool reap_port(const lm_dp *dp, int port) {
  for (int i = 0; i < dp->n_reap_ports; i++)
    if (dp->reap_ports[i] == port) return true;
  return false;
}

typedef struct {
  lm_dp *dp;
  int closed;
} sweep_arg;

static void sweep_one(int fd, unsigned long ino, void *arg) {
  sweep_arg *a = arg;
  if (!reap_port(a->dp, tcp_local_port(fd)) || listening(fd)) return;
  struct tcp_info ti;
  socklen_t l = sizeof ti;
  memset(&ti, 0, sizeof ti);
  if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &l) < 0) return;
  if (l < offsetof(struct tcp_info, tcpi_bytes_received) + sizeof ti.tcpi_bytes_received) return;
  if (ti.tcpi_state != 1 /* TCP_ESTABLISHED */ || ti.tcpi_bytes_received != 0) return;
  if (ti.tcpi_last_data_recv < (uint32_t)a->dp->reap_idle_ms) return; /* since it was accepted */
  struct stat st; /* the descriptor may have been closed and reused since the directory was read */
  if (fstat(fd, &st) < 0 || (unsigned long)st.st_ino != ino) return;
  if (shutdown(fd, SHUT_RDWR) == 0) a->closed++;
}

static void *reap_main(void *arg) {
  lm_dp *dp = arg;
  pthread_mutex_lock(&dp->reap_mu);
  while (!dp->reap_stop) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += REAP_PERIOD_MS / 1000;
    pthread_cond_timedwait(&dp->reap_cv, &dp->reap_mu, &ts);
    if (dp->reap_stop) break;
    pthread_mutex_unlock(&dp->reap_mu);
    sweep_arg a = {dp, 0};
    each_socket(sweep_one, &a);
    if (a.closed) {
      dp->reap_closed += (uint64_t)a.closed;
      lm_log(LM_LOG_INFO, "data plane: closed %d connection(s) to UCX's port that sent nothing in %d ms (%" PRIu64
             " so far)", a.closed, dp->reap_idle_ms, dp->reap_closed);
    }
    pthread_mutex_lock(&dp->reap_mu);
  }
  pthread_mutex_unlock(&dp->reap_mu);
  return NULL;
}

int dp_reap_start(lm_dp *dp, dp_reap_before *before) {
  find_arg a = {dp, before};
  each_socket(find_listener, &a);
  free(before->ino);
  memset(before, 0, sizeof *before);
  if (dp->n_reap_ports == 0) return 0; /* no TCP transport (shared memory only): nothing to watch */
  pthread_mutex_init(&dp->reap_mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&dp->reap_cv, &ca);
  pthread_condattr_destroy(&ca);
  if (pthread_create(&dp->reap_thread, NULL, reap_main, dp) != 0) {
    pthread_cond_destroy(&dp->reap_cv);
    pthread_mutex_destroy(&dp->reap_mu);
    return -1;
  }
  dp->has_reap = true;
  return 0;
}

void dp_reap_stop(lm_dp *dp) {
  if (!dp->has_reap) return;
  pthread_mutex_lock(&dp->reap_mu);
  dp->reap_stop = true;
  pthread_cond_signal(&dp->reap_cv);
  pthread_mutex_unlock(&dp->reap_mu);
  pthread_join(dp->reap_thread, NULL);
  pthread_cond_destroy(&dp->reap_cv);
  pthread_mutex_destroy(&dp->reap_mu);
  dp->has_reap = false;
}
