/* Launch throughput and latency of a tiny program (x -> x + 1 on i32[8], one element per
 * device) on 8 devices over 2 workers (4 devices each), through the public C API against a
 * local cluster forked from this program; beside its peer from the same run: the floor of the
 * messages a launch needs, two plain TCP round trips between processes (client -> controller
 * -> worker and back), measured the same way.
 *   build/bench/bench_launch [N]      (N launches per measurement, default 2000) */
#include "bench_client.h"
#include "bench_cluster.h"


static const char *k_tiny1 =
    "module @tiny1 {\n"
    "  func.func public @main(%a: tensor<8xi32>) -> tensor<8xi32> {\n"
    "    %c = stablehlo.constant dense<1> : tensor<8xi32>\n"
    "    %1 = stablehlo.add %a, %c : tensor<8xi32>\n"
    "    return %1 : tensor<8xi32>\n  }\n}\n";

static void check(loom_client *c, loom_status st, const char *what) {
  if (st == LOOM_OK) return;
  fprintf(stderr, "bench_launch: %s: %s\n", what, loom_errmsg(c));
  exit(1);
}

typedef struct result {
  double p50_us, p99_us, rate;
} result;

static result measure(loom_client *c, const char *text, int n) {
  loom_executable *e;
  check(c, loom_compile(c, text, strlen(text), NULL, &e), "compile");
  int32_t zeros[8] = {0};
  loom_array *x = bench_put_input(c, e, zeros, sizeof zeros);
  result r = {0};
  /* latency: launch, wait, one at a time; throughput: n chained launches, then one wait */
  bench_latency_rate(c, e, &x, n, 50, &r.p50_us, &r.p99_us, &r.rate);
  int32_t v[8];
  check(c, loom_array_get(x, v, sizeof v), "get");
  loom_array_release(x);
  loom_executable_destroy(e);
  return r;
}

/* The peer: a ping-pong of 64-byte messages over TCP between two processes. */
static void tcp_rtt(int n, double *p50, double *p99) {
  char buf[64] = {0};
  pid_t pid;
  int s = bench_tcp_echo(sizeof buf, &pid);
  double *lat = malloc((size_t)n * sizeof *lat);
  for (int i = -100; i < n; i++) {
    double t0 = bench_now();
    for (int hop = 0; hop < 2; hop++) { /* two round trips per launch */
      send(s, buf, sizeof buf, 0);
      size_t got = 0;
      while (got < sizeof buf) {
        ssize_t k = recv(s, buf + got, sizeof buf - got, 0);
        if (k <= 0) break;
        got += (size_t)k;
      }
    }
    if (i >= 0) lat[i] = (bench_now() - t0) * 1e6;
  }
  close(s);
  waitpid(pid, NULL, 0);
  bench_percentiles(lat, n, p50, p99);
  free(lat);
}

int main(int argc, char **argv) {
  bench_help(argc, argv,
             "usage: bench_launch [N]\n"
             "Launch latency (p50/p99) and chained throughput of a tiny program on 8 devices over 2 workers\n"
             "and on 1 device, against a cluster forked by this program, beside two plain TCP round trips.\n"
             "N launches per measurement, default 2000.\n");
  int n = argc > 1 ? atoi(argv[1]) : 2000;
  if (n < 100) n = 100;
  bench_cluster bc;
  bench_cluster_start(&bc, 2, 4, 0);
  loom_client *c = bench_connect(&bc);
  result r8 = measure(c, bench_tiny8, n);
  result r1 = measure(c, k_tiny1, n);
  loom_disconnect(c);
  bench_cluster_stop(&bc);
  double tp50, tp99;
  tcp_rtt(n, &tp50, &tp99);
  printf("launch of a tiny program, %d launches per measurement (controller + 2 workers x 4 devices)\n", n);
  printf("%-44s p50 %7.1f us  p99 %7.1f us  chained %8.0f launches/s\n", "loom, 8 devices on 2 workers", r8.p50_us,
         r8.p99_us, r8.rate);
  printf("%-44s p50 %7.1f us  p99 %7.1f us  chained %8.0f launches/s\n", "loom, 1 device", r1.p50_us, r1.p99_us,
         r1.rate);
  printf("%-44s p50 %7.1f us  p99 %7.1f us\n", "peer: 2 TCP round trips (64 B, 2 processes)", tp50, tp99);
  return 0;
}
