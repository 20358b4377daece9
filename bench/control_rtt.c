/* Control-plane round trips: Loom's client connection to a real controller (PING -> PONG through
 * the frame reader, protobuf and the libuv loop), beside the floor of the same exchange: a plain
 * TCP ping-pong of equally sized messages between two processes on this machine.
 *   build/bench/control_rtt [N]      (N round trips per measurement, default 20000)
 * Prints p50/p99 latency of sequential round trips and the rate of N pipelined requests. */
#include <pthread.h>
#include "bench_cluster.h"
#include "client/cconn.h"

static double now_us(void) { return bench_now() * 1e6; }

static void report(const char *what, double *lat, int n, double pipelined_s, int np) {
  double p50, p99;
  bench_percentiles(lat, n, &p50, &p99);
  printf("%-28s p50 %6.1f us   p99 %6.1f us   pipelined %8.0f req/s\n", what, p50, p99, np / pipelined_s);
}

struct rx_arg {
  int fd;
  size_t want;
};

static void *drain(void *p) {
  struct rx_arg *a = p;
  char big[65536];
  size_t got = 0;
  while (got < a->want) {
    ssize_t k = recv(a->fd, big, sizeof big, 0);
    if (k <= 0) break;
    got += (size_t)k;
  }
  return NULL;
}

/* The peer: a process echoing fixed-size messages over TCP. */
static void plain_tcp(int n, size_t msg) {
  pid_t pid;
  int fd = bench_tcp_echo(msg, &pid);
  char buf[256] = {0};
  double *lat = malloc(sizeof(double) * (size_t)n);
  for (int i = 0; i < n; i++) {
    double t0 = now_us();
    send(fd, buf, msg, 0);
    size_t got = 0;
    while (got < msg) got += (size_t)recv(fd, buf + got, msg - got, 0);
    lat[i] = now_us() - t0;
  }
  /* pipelined: all requests sent while a second thread reads the replies, as the client does */
  struct rx_arg ra = {fd, msg * (size_t)n};
  pthread_t th;
  double t0 = now_us();
  pthread_create(&th, NULL, drain, &ra);
  for (int i = 0; i < n; i++) send(fd, buf, msg, 0);
  pthread_join(th, NULL);
  double dt = (now_us() - t0) / 1e6;
  report("plain TCP ping-pong", lat, n, dt, n);
  free(lat);
  close(fd);
  waitpid(pid, NULL, 0);
}

int main(int argc, char **argv) {
  bench_help(argc, argv,
             "usage: control_rtt [N]\n"
             "Control-plane round trips (PING/PONG) from a client to a real controller, beside a plain TCP\n"
             "ping-pong of equal messages: p50/p99 of sequential round trips and the rate of N pipelined\n"
             "requests. N default 20000.\n");
  int n = argc > 1 ? atoi(argv[1]) : 20000;
  if (n < 100) n = 100;
  bench_cluster bc; /* a controller alone */
  bench_cluster_start(&bc, 0, 0, 0);
  lm_cconn *c;
  lm_err e;
  lm_cconn_options o = {.timeout_ms = 10000};
  if (lm_cconn_open(bc.addr, &o, &c, &e) < 0) {
    fprintf(stderr, "control_rtt: cannot reach the controller: %s\n", e.msg);
    bench_cluster_stop(&bc);
    return 1;
  }
  Lmw__Ping ping = LMW__PING__INIT;
  ping.nonce = 1;
  uint8_t *frame;
  size_t flen;
  lm_msg_encode(LM_MSG_PING, 1, &ping.base, 0, &frame, &flen, NULL);
  free(frame);
  printf("control-plane round trips, %d each, frame of %zu bytes\n", n, flen);
  double *lat = malloc(sizeof(double) * (size_t)n);
  for (int i = 0; i < n; i++) {
    double t0 = now_us();
    ProtobufCMessage *m;
    if (lm_cconn_call(c, LM_MSG_PING, &ping.base, LM_MSG_PONG, 10000, NULL, NULL, &m, &e) < 0) {
      fprintf(stderr, "control_rtt: %s\n", e.msg);
      return 1;
    }
    lm_msg_free(m);
    lat[i] = now_us() - t0;
  }
  lm_call **calls = malloc(sizeof *calls * (size_t)n);
  double t0 = now_us();
  for (int i = 0; i < n; i++) lm_cconn_start(c, LM_MSG_PING, &ping.base, NULL, 0, NULL, 0, &calls[i], NULL);
  for (int i = 0; i < n; i++) {
    lm_call_wait(calls[i], 10000, NULL, NULL, NULL);
    lm_call_release(calls[i]);
  }
  double dt = (now_us() - t0) / 1e6;
  report("loom client -> controller", lat, n, dt, n);
  free(calls);
  free(lat);
  lm_cconn_close(c);
  bench_cluster_stop(&bc);
  plain_tcp(n, flen);
  return 0;
}
