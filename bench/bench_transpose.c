/* Transpose benchmark: Loom's strided copy (the transpose kernel's core, src/exec/ops_util.c)
 * beside OpenBLAS's out-of-place matrix transpose (cblas_somatcopy) and a plain memcpy of the
 * same bytes, single-threaded, for the shapes an MLP backward pass transposes.
 *   build/bench/bench_transpose [reps]                                                         */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bench_util.h"
#include "exec/ops_util.h"

int main(int argc, char **argv) {
  bench_help(argc, argv,
             "usage: bench_transpose [reps]\n"
             "Loom's strided copy (the transpose kernel) beside cblas_somatcopy and memcpy of the same\n"
             "bytes, single-threaded, for the shapes an MLP backward pass transposes.\n");
  int reps = argc > 1 ? atoi(argv[1]) : 200;
  int64_t shapes[][2] = {{512, 512}, {784, 512}, {512, 784}, {128, 784}, {2048, 2048}};
  openblas_set_num_threads(1);
  printf("%-12s %12s %12s %12s   (microseconds per transpose, f32)\n", "shape", "loom", "openblas", "memcpy");
  for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
    int64_t r = shapes[s][0], c = shapes[s][1];
    float *a = aligned_alloc(64, (size_t)(r * c * 4)), *b = aligned_alloc(64, (size_t)(r * c * 4)); /* as lm_buffer data */
    for (int64_t i = 0; i < r * c; i++) a[i] = (float)i;
    int64_t dims[2] = {c, r}, ds[2] = {r, 1}, ss[2] = {1, c};
    int n = (int)(reps * (512 * 512) / (r * c)) + 1;
    double tl = 1e30, to = 1e30, tm = 1e30, t0; /* best of 5 runs of n each: the machine is shared */
    for (int rep = 0; rep < 5; rep++) {
      t0 = bench_now();
      for (int i = 0; i < n; i++) lm_copy_strided(2, dims, 4, b, ds, a, ss);
      if ((bench_now() - t0) / n < tl) tl = (bench_now() - t0) / n;
      t0 = bench_now();
      for (int i = 0; i < n; i++) cblas_somatcopy(CblasRowMajor, CblasTrans, (int)r, (int)c, 1.0f, a, (int)c, b, (int)r);
      if ((bench_now() - t0) / n < to) to = (bench_now() - t0) / n;
      t0 = bench_now();
      for (int i = 0; i < n; i++) memcpy(b, a, r * c * 4);
      if ((bench_now() - t0) / n < tm) tm = (bench_now() - t0) / n;
    }
    lm_copy_strided(2, dims, 4, b, ds, a, ss);
    for (int64_t i = 0; i < r; i++)
      for (int64_t j = 0; j < c; j++)
        if (b[j * r + i] != a[i * c + j]) { fprintf(stderr, "wrong result\n"); return 1; }
    char name[32];
    snprintf(name, sizeof name, "%lldx%lld", (long long)r, (long long)c);
    printf("%-12s %12.1f %12.1f %12.1f\n", name, tl * 1e6, to * 1e6, tm * 1e6);
    free(a);
    free(b);
  }
  return 0;
}
