/* What authentication costs: the same cluster (a controller and 2 workers x 4 devices, forked
 * from this program) with authentication off, then on (a cluster secret the workers prove, a
 * client token checked on HELLO: what `loom up` sets up), measured the same way in one run:
 *   - connect: loom_connect + loom_disconnect (HELLO, the token check, the device list), p50/p99;
 *   - launch: a tiny program on 8 devices, launch + wait one at a time, p50/p99, and the rate of
 *     N chained launches issued without waiting;
 *   - put+get: an i32[8] array over 8 devices (one element each) put and read back, p50.
 * The peer of each "on" figure is the "off" figure beside it. Best of 2 rounds per mode.
 *   build/bench/bench_auth [N]      (N per measurement, default 1000) */
#include "bench_client.h"
#include "bench_cluster.h"


static void check(loom_client *c, loom_status st, const char *what) {
  if (st == LOOM_OK) return;
  fprintf(stderr, "bench_auth: %s: %s\n", what, loom_errmsg(c));
  exit(1);
}

typedef struct figures {
  double conn_p50, conn_p99;   /* us */
  double launch_p50, launch_p99;
  double rate;                 /* chained launches per second */
  double xfer_p50;             /* put + get, us */
} figures;

static void keep_best(figures *best, const figures *f) {
  if (f->conn_p50 < best->conn_p50) best->conn_p50 = f->conn_p50, best->conn_p99 = f->conn_p99;
  if (f->launch_p50 < best->launch_p50) best->launch_p50 = f->launch_p50, best->launch_p99 = f->launch_p99;
  if (f->rate > best->rate) best->rate = f->rate;
  if (f->xfer_p50 < best->xfer_p50) best->xfer_p50 = f->xfer_p50;
}

static figures measure(const bench_cluster *bc, int n) {
  figures r = {0};
  double *lat = malloc((size_t)n * sizeof *lat);
  loom_connect_options o;
  loom_connect_options_initialize(&o);
  o.address = bc->addr;
  bench_cluster_auth_options(bc, &o);
  for (int i = -20; i < n; i++) {
    loom_client *c;
    double t0 = bench_now();
    check(NULL, loom_connect(&o, &c), "connect");
    loom_disconnect(c);
    if (i >= 0) lat[i] = (bench_now() - t0) * 1e6;
  }
  bench_percentiles(lat, n, &r.conn_p50, &r.conn_p99);

  loom_client *c = bench_connect(bc);
  loom_executable *e;
  check(c, loom_compile(c, bench_tiny8, strlen(bench_tiny8), NULL, &e), "compile");
  int32_t v[8] = {0};
  loom_array_spec spec = {.struct_size = sizeof spec};
  loom_sharding sh;
  loom_sharding_initialize(&sh);
  loom_executable_input(e, 0, &spec, &sh);
  loom_put_args pa;
  loom_put_args_initialize(&pa);
  pa.dtype = LOOM_DTYPE_S32;
  pa.rank = 1;
  pa.dims = spec.dims;
  pa.sharding = &sh;
  pa.data = v;
  pa.data_size = sizeof v;
  for (int i = -20; i < n; i++) { /* put + get */
    loom_array *a;
    double t0 = bench_now();
    check(c, loom_array_put(c, &pa, &a), "put");
    check(c, loom_array_get(a, v, sizeof v), "get");
    if (i >= 0) lat[i] = (bench_now() - t0) * 1e6;
    loom_array_release(a);
  }
  double dummy;
  bench_percentiles(lat, n, &r.xfer_p50, &dummy);
  loom_array *x = bench_put_input(c, e, v, sizeof v);
  for (int i = -50; i < n; i++) { /* launch + wait */
    double dt = bench_step(c, e, &x);
    if (i >= 0) lat[i] = dt * 1e6;
  }
  bench_percentiles(lat, n, &r.launch_p50, &r.launch_p99);
  r.rate = n / bench_chain(c, e, &x, n); /* chained */
  check(c, loom_array_get(x, v, sizeof v), "get");
  loom_array_release(x);
  loom_executable_destroy(e);
  loom_disconnect(c);
  free(lat);
  return r;
}

int main(int argc, char **argv) {
  bench_help(argc, argv,
             "usage: bench_auth [N]\n"
             "Connect, launch (8 devices over 2 workers) and put+get latency with authentication off and on\n"
             "(a cluster secret and a client token, as `loom up` sets up), side by side from one run.\n"
             "N per measurement, default 1000.\n");
  int n = argc > 1 ? atoi(argv[1]) : 1000;
  if (n < 100) n = 100;
  figures best[2];
  for (int m = 0; m < 2; m++) best[m] = (figures){1e30, 1e30, 1e30, 1e30, 0, 1e30};
  for (int round = 0; round < 2; round++)
    for (int m = 0; m < 2; m++) { /* off, on, off, on: the machine's drift hits both */
      bench_cluster bc;
      bench_cluster_start_auth(&bc, 2, 4, 0, m == 1);
      figures f = measure(&bc, n);
      bench_cluster_stop(&bc);
      keep_best(&best[m], &f);
    }
  const figures *off = &best[0], *on = &best[1];
  printf("authentication cost: 2 workers x 4 CPU devices, N=%d, best of 2 rounds each\n", n);
  printf("%-28s %12s %12s %8s\n", "", "auth off", "auth on", "on/off");
  printf("%-28s %12.1f %12.1f %8.3f\n", "connect p50 (us)", off->conn_p50, on->conn_p50, on->conn_p50 / off->conn_p50);
  printf("%-28s %12.1f %12.1f %8.3f\n", "connect p99 (us)", off->conn_p99, on->conn_p99, on->conn_p99 / off->conn_p99);
  printf("%-28s %12.1f %12.1f %8.3f\n", "launch+wait p50 (us)", off->launch_p50, on->launch_p50,
         on->launch_p50 / off->launch_p50);
  printf("%-28s %12.1f %12.1f %8.3f\n", "launch+wait p99 (us)", off->launch_p99, on->launch_p99,
         on->launch_p99 / off->launch_p99);
  printf("%-28s %12.0f %12.0f %8.3f\n", "chained launches / s", off->rate, on->rate, on->rate / off->rate);
  printf("%-28s %12.1f %12.1f %8.3f\n", "put+get i32[8] p50 (us)", off->xfer_p50, on->xfer_p50,
         on->xfer_p50 / off->xfer_p50);
  return 0;
}
