/* What the launch benchmarks do with libloom: put a program's first input, launch and wait one
 * step at a time, and launch a chain without waiting. A failed call ends the benchmark, naming it. */
#ifndef LOOM_BENCH_CLIENT_H
#define LOOM_BENCH_CLIENT_H

#include <stdio.h>
#include <stdlib.h>
#include "bench_util.h"
#include "loom/loom.h"

/* x + 1 over 8 devices, one s32 element each (shard_map): the launch benchmarks' tiny program. */
static const char *const bench_tiny8 __attribute__((unused)) =
    "module @tiny attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} {\n"
    "  sdy.mesh @mesh = <[\"d\"=8]>\n"
    "  func.func public @main(%arg0: tensor<8xi32>) -> tensor<8xi32> {\n"
    "    %0 = sdy.manual_computation(%arg0) in_shardings=[<@mesh, [{\"d\"}]>] out_shardings=[<@mesh, [{\"d\"}]>] "
    "manual_axes={\"d\"} (%a: tensor<1xi32>) {\n"
    "      %c = stablehlo.constant dense<1> : tensor<1xi32>\n"
    "      %1 = stablehlo.add %a, %c : tensor<1xi32>\n"
    "      sdy.return %1 : tensor<1xi32>\n"
    "    } : (tensor<8xi32>) -> tensor<8xi32>\n"
    "    return %0 : tensor<8xi32>\n  }\n}\n";

static inline void bench_check(loom_client *c, loom_status st, const char *what) {
  if (st == LOOM_OK) return;
  fprintf(stderr, "%s: %s\n", what, loom_errmsg(c));
  exit(1);
}

/* Puts data (nbytes of s32) as executable e's input 0, laid out as e takes it. */
static inline loom_array *bench_put_input(loom_client *c, loom_executable *e, const void *data, size_t nbytes) {
  loom_array_spec spec = {.struct_size = sizeof spec};
  loom_sharding sh;
  loom_sharding_initialize(&sh);
  bench_check(c, loom_executable_input(e, 0, &spec, &sh), "executable input");
  loom_put_args pa;
  loom_put_args_initialize(&pa);
  pa.dtype = LOOM_DTYPE_S32;
  pa.rank = 1;
  pa.dims = spec.dims;
  pa.sharding = &sh;
  pa.data = data;
  pa.data_size = nbytes;
  loom_array *x;
  bench_check(c, loom_array_put(c, &pa, &x), "put");
  return x;
}

/* One launch of e on *x, waited for; *x becomes its output. Returns the seconds it took. */
static inline double bench_step(loom_client *c, loom_executable *e, loom_array **x) {
  loom_array *y;
  loom_future *f;
  double t0 = bench_now();
  bench_check(c, loom_launch(e, x, 1, NULL, &y, 1, &f), "launch");
  bench_check(c, loom_future_wait(f, -1), "wait");
  double dt = bench_now() - t0;
  loom_future_destroy(f);
  loom_array_release(*x);
  *x = y;
  return dt;
}

/* n launches of e chained on *x, issued without waiting, then one wait. Returns the seconds. */
static inline double bench_chain(loom_client *c, loom_executable *e, loom_array **x, int n) {
  loom_future *last = NULL;
  double t0 = bench_now();
  for (int i = 0; i < n; i++) {
    loom_array *y;
    loom_future *f;
    bench_check(c, loom_launch(e, x, 1, NULL, &y, 1, &f), "launch");
    loom_array_release(*x);
    *x = y;
    loom_future_destroy(last);
    last = f;
  }
  bench_check(c, loom_future_wait(last, -1), "wait");
  double dt = bench_now() - t0;
  loom_future_destroy(last);
  return dt;
}

/* Latency of n launches of e on *x, each waited for (after `warm` unmeasured ones): p50 and p99 in
 * microseconds; and the best rate (launches/s) of 3 chains of n issued without waiting. */
static inline void bench_latency_rate(loom_client *c, loom_executable *e, loom_array **x, int n, int warm,
                                      double *p50_us, double *p99_us, double *rate) {
  double *lat = malloc((size_t)n * sizeof *lat);
  if (!lat) exit(1);
  for (int i = -warm; i < n; i++) {
    double dt = bench_step(c, e, x);
    if (i >= 0) lat[i] = dt * 1e6;
  }
  bench_percentiles(lat, n, p50_us, p99_us);
  free(lat);
  double best = 1e30;
  for (int rep = 0; rep < 3; rep++) {
    double dt = bench_chain(c, e, x, n);
    if (dt < best) best = dt;
  }
  *rate = n / best;
}

#endif
