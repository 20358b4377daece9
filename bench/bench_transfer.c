/* Put and get bandwidth of arrays split over 8 devices on 2 workers (f32, dimension 0 split),
 * through the public C API against a local cluster forked from this program (bytes go from this
 * process straight to the workers' data ports), beside memcpy of the same size in this process.
 * Best of 3 runs per size; puts after the first reuse the devices' recycled blocks.
 *   build/bench/bench_transfer [MAX_MIB]      (sizes 1 MiB .. MAX_MIB, default 256) */
#include "bench_cluster.h"

static void check(loom_client *c, loom_status st, const char *what) {
  if (st == LOOM_OK) return;
  fprintf(stderr, "bench_transfer: %s: %s\n", what, loom_errmsg(c));
  exit(1);
}

int main(int argc, char **argv) {
  int max_mib = argc > 1 ? atoi(argv[1]) : 256;
  if (max_mib < 1) max_mib = 1;
  bench_cluster bc;
  bench_cluster_start(&bc, 2, 4, (uint64_t)1 << 30);
  loom_client *c = bench_connect(&bc);
  int32_t devs[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  loom_sharding sh;
  loom_sharding_tiled(&sh, devs, 8, 0);
  printf("%-10s %14s %14s %14s\n", "size", "put GB/s", "get GB/s", "memcpy GB/s");
  for (int mib = 1; mib <= max_mib; mib *= 4) {
    size_t bytes = (size_t)mib << 20;
    float *src = malloc(bytes), *dst = malloc(bytes);
    if (!src || !dst) return 1;
    for (size_t i = 0; i < bytes / 4; i++) src[i] = (float)i;
    memset(dst, 1, bytes);
    int64_t dims[2] = {(int64_t)(bytes / 4 / 1024), 1024};
    double put_best = 1e30, get_best = 1e30, cpy_best = 1e30;
    for (int rep = 0; rep < 3; rep++) {
      loom_put_args pa;
      loom_put_args_initialize(&pa);
      pa.dtype = LOOM_DTYPE_F32;
      pa.rank = 2;
      pa.dims = dims;
      pa.sharding = &sh;
      pa.data = src;
      pa.data_size = bytes;
      loom_array *a;
      double t0 = bench_now();
      check(c, loom_array_put(c, &pa, &a), "put");
      double t1 = bench_now();
      check(c, loom_array_get(a, dst, bytes), "get");
      double t2 = bench_now();
      loom_array_release(a);
      memcpy(dst, src, bytes);
      double t3 = bench_now();
      memcpy(dst, src, bytes);
      double t4 = bench_now();
      if (t1 - t0 < put_best) put_best = t1 - t0;
      if (t2 - t1 < get_best) get_best = t2 - t1;
      if (t4 - t3 < cpy_best) cpy_best = t4 - t3;
      (void)t3;
      usleep(200000); /* the delete reaches the workers before the next put */
    }
    if (memcmp(src, dst, bytes) != 0) {
      fprintf(stderr, "bench_transfer: data mismatch\n");
      return 1;
    }
    char label[32];
    snprintf(label, sizeof label, "%d MiB", mib);
    printf("%-10s %14.2f %14.2f %14.2f\n", label, bytes / put_best / 1e9, bytes / get_best / 1e9,
           bytes / cpy_best / 1e9);
    free(src);
    free(dst);
  }
  loom_disconnect(c);
  bench_cluster_stop(&bc);
  return 0;
}
