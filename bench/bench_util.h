/* Helpers shared by the benchmark programs: a monotonic clock, latency percentiles, and the TCP
 * echo process that the control-plane benchmarks measure Loom's messages against. Header-only;
 * bench_cluster.h and bench_ir.h include it. */
#ifndef LM_BENCH_UTIL_H
#define LM_BENCH_UTIL_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

/* With -h or --help among the arguments: prints usage (what the program measures and how to
 * call it) and exits 0. */
static inline void bench_help(int argc, char **argv, const char *usage) {
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
      fputs(usage, stdout);
      exit(0);
    }
}

/* Seconds on the monotonic clock. */
static inline double bench_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static inline int bench_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Sorts lat[n] (n > 0) and gives its median and 99th percentile. */
static inline void bench_percentiles(double *lat, int n, double *p50, double *p99) {
  qsort(lat, (size_t)n, sizeof *lat, bench_cmp_double);
  *p50 = lat[n / 2];
  *p99 = lat[n * 99 / 100];
}

/* Forks a process that echoes every msg-byte message (msg <= 4096) it receives over loopback TCP
 * until the connection closes; returns the connected socket (TCP_NODELAY) and the child in *pid
 * (waitpid it after closing the socket). */
static inline int bench_tcp_echo(size_t msg, pid_t *pid) {
  int l = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  bind(l, (struct sockaddr *)&a, sizeof a);
  socklen_t sl = sizeof a;
  getsockname(l, (struct sockaddr *)&a, &sl);
  listen(l, 1);
  int one = 1;
  *pid = fork();
  if (*pid == 0) {
    int fd = accept(l, NULL, NULL);
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    char buf[4096];
    for (;;) {
      size_t got = 0;
      while (got < msg) {
        ssize_t k = recv(fd, buf + got, msg - got, 0);
        if (k <= 0) _exit(0);
        got += (size_t)k;
      }
      if (send(fd, buf, msg, 0) != (ssize_t)msg) _exit(0);
    }
  }
  close(l);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  connect(fd, (struct sockaddr *)&a, sizeof a);
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

#endif
