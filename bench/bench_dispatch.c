/* The C side of bench/bench_dispatch.py: what a tiny launch costs a C client of libloom, the
 * floor the Python binding is measured against. Runs one program (a StableHLO file whose single
 * input and output have the same type, so launches chain) on a running cluster:
 *   build/bench/bench_dispatch FILE.mlir [N]      (N launches per measurement, default 2000)
 * Prints one line of JSON: issue_us (client time per launch when N chained launches are issued
 * without waiting), chain_us (wall time per launch of that chain, until the last completed),
 * rtt_p50_us / rtt_p99_us (one launch, then wait for it, repeated). Uses only loom.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bench_util.h"
#include "loom/loom.h"

static double now_us(void) { return bench_now() * 1e6; }

static int die(loom_client *c, const char *what) {
  fprintf(stderr, "bench_dispatch: %s: %s\n", what, loom_errmsg(c));
  return 1;
}

int main(int argc, char **argv) {
  bench_help(argc, argv,
             "usage: bench_dispatch FILE.mlir [N]\n"
             "What a tiny launch costs a C client of libloom, on the running cluster (LOOM_CONTROLLER):\n"
             "prints one JSON line (issue_us, chain_us, rtt_p50_us, rtt_p99_us). N launches per measurement,\n"
             "default 2000. bench/bench_dispatch.py runs it beside the Python client.\n");
  if (argc < 2) {
    fprintf(stderr, "usage: bench_dispatch FILE.mlir [N]\n");
    return 2;
  }
  int n = argc > 2 ? atoi(argv[2]) : 2000;
  if (n < 10) n = 10;
  FILE *f = fopen(argv[1], "rb");
  if (!f) {
    perror(argv[1]);
    return 1;
  }
  static char text[1 << 20];
  size_t len = fread(text, 1, sizeof text, f);
  fclose(f);

  loom_client *c;
  if (loom_connect(NULL, &c) != LOOM_OK) return die(NULL, "connect");
  loom_executable *exe;
  if (loom_compile(c, text, len, NULL, &exe) != LOOM_OK) return die(c, "compile");
  loom_array_spec spec = {.struct_size = sizeof spec};
  loom_sharding sh = {.struct_size = sizeof sh};
  if (loom_executable_input(exe, 0, &spec, &sh) != LOOM_OK) return die(c, "input");
  size_t esize = spec.dtype == LOOM_DTYPE_F64 || spec.dtype == LOOM_DTYPE_S64 ? 8 : 4;
  size_t numel = 1;
  for (int d = 0; d < spec.rank; d++) numel *= (size_t)spec.dims[d];
  void *zeros = calloc(numel ? numel : 1, esize);
  loom_put_args put;
  loom_put_args_initialize(&put);
  put.dtype = spec.dtype;
  put.rank = spec.rank;
  put.dims = spec.dims;
  put.sharding = &sh;
  put.data = zeros;
  put.data_size = numel * esize;
  loom_array *x;
  if (loom_array_put(c, &put, &x) != LOOM_OK) return die(c, "put");

  /* warm up */
  for (int i = 0; i < 20; i++) {
    loom_array *y;
    loom_future *fu;
    if (loom_launch(exe, &x, 1, NULL, &y, 1, &fu) != LOOM_OK) return die(c, "launch");
    loom_future_wait(fu, -1);
    loom_future_destroy(fu);
    loom_array_release(y);
  }

  /* N chained launches issued without waiting, then one wait */
  loom_array **ys = calloc((size_t)n, sizeof *ys);
  loom_future *last = NULL;
  double t0 = now_us();
  loom_array *in = x;
  for (int i = 0; i < n; i++) {
    loom_future *fu;
    if (loom_launch(exe, &in, 1, NULL, &ys[i], 1, &fu) != LOOM_OK) return die(c, "launch");
    if (last) loom_future_destroy(last);
    if (i > 0) loom_array_release(ys[i - 1]); /* as a Python client drops it: launches issued still see it */
    last = fu;
    in = ys[i];
  }
  double t1 = now_us();
  if (loom_future_wait(last, -1) != LOOM_OK) return die(c, "wait");
  double t2 = now_us();
  loom_future_destroy(last);
  loom_array_release(ys[n - 1]);

  /* round trips: launch, wait */
  int m = n / 4;
  double *lat = calloc((size_t)m, sizeof *lat);
  for (int i = 0; i < m; i++) {
    loom_array *y;
    loom_future *fu;
    double a = now_us();
    if (loom_launch(exe, &x, 1, NULL, &y, 1, &fu) != LOOM_OK) return die(c, "launch");
    if (loom_future_wait(fu, -1) != LOOM_OK) return die(c, "wait");
    lat[i] = now_us() - a;
    loom_future_destroy(fu);
    loom_array_release(y);
  }
  double p50, p99;
  bench_percentiles(lat, m, &p50, &p99);
  printf("{\"issue_us\": %.2f, \"chain_us\": %.2f, \"rtt_p50_us\": %.1f, \"rtt_p99_us\": %.1f}\n", (t1 - t0) / n,
         (t2 - t0) / n, p50, p99);
  free(lat);
  free(ys);
  free(zeros);
  loom_array_release(x);
  loom_executable_destroy(exe);
  loom_disconnect(c);
  return 0;
}
