/* Runs @main of a StableHLO file (an MLP training step lowered by JAX, see bench_mlp.py) on
 * deterministic inputs many times and prints the best and median time per step. Keep
 * OPENBLAS_NUM_THREADS=1 for a single-threaded figure.
 *   build/bench/bench_mlp FILE.mlir [steps]      default 30 steps after 3 warm-ups */
#include <cblas.h>
#include "bench_ir.h"
#if __has_include("hlo/parse.h")
#include "hlo/parse.h"
#define HAVE_PARSER 1
#endif

static inline int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  bench_help(argc, argv,
             "usage: bench_mlp FILE.mlir [steps]\n"
             "Runs @main of a StableHLO file (bench/bench_mlp.py lowers an MLP training step) on\n"
             "deterministic inputs; prints the best and median time per step. Default 30 steps after 3\n"
             "warm-ups. Keep OPENBLAS_NUM_THREADS=1 for a single-threaded figure.\n");
  if (argc < 2) {
    fprintf(stderr, "usage: bench_mlp FILE.mlir [steps]\n");
    return 2;
  }
#ifndef HAVE_PARSER
  fprintf(stderr, "bench_mlp needs the StableHLO parser (src/hlo/parse.h), not in this build\n");
  return 2;
#else
  int steps = argc > 2 ? atoi(argv[2]) : 30;
  lm_module *m;
  lm_err err;
  if (lm_parse_file(argv[1], NULL, &m, &err) < 0) { fprintf(stderr, "%s\n", err.msg); return 1; }
  lm_program *p;
  if (lm_program_create(m, &p, &err) < 0) { fprintf(stderr, "%s\n", err.msg); return 1; }
  const lm_func *fn = lm_module_func(lm_program_module(p), "main");
  if (!fn) { fprintf(stderr, "no @main\n"); return 1; }
  lm_buffer *args[64], *outs[64];
  if (fn->nargs > 64 || fn->nresults > 64) { fprintf(stderr, "too many arguments\n"); return 1; }
  uint64_t s = 1;
  for (uint32_t i = 0; i < fn->nargs; i++) {
    if (lm_buffer_alloc(NULL, &fn->arg_types[i], &args[i], &err) < 0) { fprintf(stderr, "%s\n", err.msg); return 1; }
    size_t n = args[i]->nbytes;
    unsigned char *d = args[i]->data;
    if (fn->arg_types[i].dtype == LOOM_DTYPE_F32) {
      float *f = (float *)d;
      for (size_t j = 0; j < n / 4; j++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        f[j] = (float)((double)(s >> 40) / 16777216.0 - 0.5) * 0.1f;
      }
    } else {
      memset(d, 0, n);
    }
  }
  lm_device *dev = lm_device_create((size_t)8 << 30);
  lm_run_opts o = {.device = dev, .nthreads = 1};
  double *t = calloc((size_t)steps, sizeof *t);
  for (int r = 0; r < steps + 3; r++) {
    double t0 = bench_now();
    if (lm_program_run(p, "main", &o, args, fn->nargs, outs, fn->nresults, &err) < 0) {
      fprintf(stderr, "%s\n", err.msg);
      return 1;
    }
    double t1 = bench_now();
    for (uint32_t i = 0; i < fn->nresults; i++) lm_buffer_release(outs[i]);
    if (r >= 3) t[r - 3] = t1 - t0;
  }
  qsort(t, (size_t)steps, sizeof *t, cmp_double);
  printf("loom_step_best_ms %.3f\n", t[0] * 1e3);
  printf("loom_step_median_ms %.3f\n", t[steps / 2] * 1e3);
  printf("loom_peak_bytes %zu\n", lm_device_peak(dev));
  printf("loom_blas_core %s\n", openblas_get_corename());
  free(t);
  for (uint32_t i = 0; i < fn->nargs; i++) lm_buffer_release(args[i]);
  lm_program_destroy(p);
  lm_device_destroy(dev);
  return 0;
#endif
}
