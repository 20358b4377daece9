/* Put and get bandwidth of arrays split over 8 devices on 2 workers (f32, dimension 0 split),
 * through the public C API against a local cluster forked from this program (bytes go from this
 * process straight to the workers, never through the controller), for each way the bytes can
 * move on one host, beside memcpy of the same size in this process:
 *   local   the worker copies between this process's buffer and the shard once
 *           (process_vm_readv/writev; LOOM_TRANSFER=local)
 *   tcp     the stream over the workers' TCP data ports, as between hosts (LOOM_TRANSFER=tcp)
 * Best of RUNS runs per size and path; puts after the first reuse the devices' recycled blocks.
 *   build/bench/bench_transfer [MAX_MIB [RUNS]]   (sizes 1 MiB .. MAX_MIB, default 256; RUNS 3) */
#include "bench_cluster.h"

static void check(loom_client *c, loom_status st, const char *what) {
  if (st == LOOM_OK) return;
  fprintf(stderr, "bench_transfer: %s: %s\n", what, loom_errmsg(c));
  exit(1);
}

/* A client whose transfers take one path (LOOM_TRANSFER is read when a client connects). */
static loom_client *connect_with(const bench_cluster *bc, const char *mode) {
  setenv("LOOM_TRANSFER", mode, 1);
  loom_client *c = bench_connect(bc);
  unsetenv("LOOM_TRANSFER");
  return c;
}

/* Best put and get times (seconds) of `runs` round trips of src through c; false (with the
 * reason printed once) when this path cannot be used here. */
static bool measure(loom_client *c, bool optional, const loom_sharding *sh, const float *src, float *dst,
                    size_t bytes, int runs, double *put_best, double *get_best) {
  int64_t dims[2] = {(int64_t)(bytes / 4 / 1024), 1024};
  *put_best = *get_best = 1e30;
  for (int rep = 0; rep < runs; rep++) {
    loom_put_args pa;
    loom_put_args_initialize(&pa);
    pa.dtype = LOOM_DTYPE_F32;
    pa.rank = 2;
    pa.dims = dims;
    pa.sharding = sh;
    pa.data = src;
    pa.data_size = bytes;
    loom_array *a;
    memset(dst, 1, bytes);
    double t0 = bench_now();
    loom_status st = loom_array_put(c, &pa, &a);
    if (st != LOOM_OK && optional && rep == 0) {
      fprintf(stderr, "bench_transfer: this path is not available here: %s\n", loom_errmsg(c));
      return false;
    }
    check(c, st, "put");
    double t1 = bench_now();
    check(c, loom_array_get(a, dst, bytes), "get");
    double t2 = bench_now();
    loom_array_release(a);
    if (t1 - t0 < *put_best) *put_best = t1 - t0;
    if (t2 - t1 < *get_best) *get_best = t2 - t1;
    if (memcmp(src, dst, bytes) != 0) {
      fprintf(stderr, "bench_transfer: data mismatch\n");
      exit(1);
    }
    usleep(200000); /* the delete reaches the workers before the next put */
  }
  return true;
}

int main(int argc, char **argv) {
  bench_help(argc, argv,
             "usage: bench_transfer [MAX_MIB [RUNS]]\n"
             "loom_array_put / loom_array_get of f32 arrays split over 8 devices on 2 workers, 1 MiB up to\n"
             "MAX_MIB, for the local path (process_vm_readv/writev) and the TCP stream, beside memcpy; best\n"
             "of RUNS (3). Forks its own cluster.\n");
  int max_mib = argc > 1 ? atoi(argv[1]) : 256;
  int runs = argc > 2 ? atoi(argv[2]) : 3;
  if (max_mib < 1) max_mib = 1;
  if (runs < 1) runs = 1;
  bench_cluster bc;
  bench_cluster_start(&bc, 2, 4, (uint64_t)1 << 30);
  loom_client *local = connect_with(&bc, "local"), *tcp = connect_with(&bc, "tcp");
  bool have_local = true;
  int32_t devs[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  loom_sharding sh;
  loom_sharding_tiled(&sh, devs, 8, 0);
  printf("GB/s, best of %d runs\n", runs);
  printf("%-10s %10s %10s %10s %10s %10s\n", "size", "local put", "local get", "tcp put", "tcp get", "memcpy");
  for (int mib = 1; mib <= max_mib; mib *= 4) {
    size_t bytes = (size_t)mib << 20;
    float *src = malloc(bytes), *dst = malloc(bytes);
    if (!src || !dst) return 1;
    for (size_t i = 0; i < bytes / 4; i++) src[i] = (float)i;
    memset(dst, 1, bytes);
    double lput = 0, lget = 0, tput, tget, cpy = 1e30;
    if (have_local) have_local = measure(local, true, &sh, src, dst, bytes, runs, &lput, &lget);
    measure(tcp, false, &sh, src, dst, bytes, runs, &tput, &tget);
    for (int rep = 0; rep < runs; rep++) {
      double t0 = bench_now();
      memcpy(dst, src, bytes);
      double t1 = bench_now();
      if (t1 - t0 < cpy) cpy = t1 - t0;
    }
    char label[32], lp[16] = "n/a", lg[16] = "n/a";
    snprintf(label, sizeof label, "%d MiB", mib);
    if (have_local) {
      snprintf(lp, sizeof lp, "%.2f", bytes / lput / 1e9);
      snprintf(lg, sizeof lg, "%.2f", bytes / lget / 1e9);
    }
    printf("%-10s %10s %10s %10.2f %10.2f %10.2f\n", label, lp, lg, bytes / tput / 1e9, bytes / tget / 1e9,
           bytes / cpy / 1e9);
    fflush(stdout);
    free(src);
    free(dst);
  }
  loom_disconnect(local);
  loom_disconnect(tcp);
  bench_cluster_stop(&bc);
  return 0;
}
