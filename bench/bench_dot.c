/* dot_general f32 M x K x N through Loom's executor beside a direct OpenBLAS sgemm call, in the
 * same process (so both use the same OpenBLAS thread count: OPENBLAS_NUM_THREADS). Runs are
 * interleaved; the best of each is reported (the machine is shared and noisy).
 *   build/bench/bench_dot [M K N [runs]]      default 1024 1024 1024, 15 runs */
#include <cblas.h>
#include "bench_ir.h"

int main(int argc, char **argv) {
  bench_help(argc, argv,
             "usage: bench_dot [M K N [runs]]\n"
             "dot_general f32 MxK . KxN through the executor beside a direct cblas_sgemm, same process and\n"
             "threads (OPENBLAS_NUM_THREADS); best of runs. Default 1024 1024 1024, 15 runs.\n");
  int64_t M = argc > 3 ? atoll(argv[1]) : 1024, K = argc > 3 ? atoll(argv[2]) : 1024, N = argc > 3 ? atoll(argv[3]) : 1024;
  int runs = argc > 4 ? atoi(argv[4]) : 15;
  bi b;
  bi_init(&b);
  lm_type lt, rt, ot;
  lm_type_tensor(&lt, LOOM_DTYPE_F32, 2, (int64_t[]){M, K});
  lm_type_tensor(&rt, LOOM_DTYPE_F32, 2, (int64_t[]){K, N});
  lm_type_tensor(&ot, LOOM_DTYPE_F32, 2, (int64_t[]){M, N});
  uint32_t in[2] = {bi_arg(&b, lt), bi_arg(&b, rt)};
  lm_op *op = bi_op(&b, LM_OP_DOT_GENERAL, 2, in, ot);
  lm_attr *s = bi_attr(&b, op, "dot_dimension_numbers");
  s->kind = LM_ATTR_STRUCT;
  s->s = "stablehlo.dot";
  s->fields = bi_alloc(&b, 4 * sizeof(lm_named_attr));
  const char *names[4] = {"lhs_batching_dimensions", "rhs_batching_dimensions", "lhs_contracting_dimensions",
                          "rhs_contracting_dimensions"};
  int64_t lc = 1, rc = 0;
  for (int i = 0; i < 4; i++) {
    s->fields[i].name = names[i];
    s->fields[i].value = bi_ints(&b, i < 2 ? 0 : 1, i == 2 ? &lc : &rc);
  }
  s->n = 4;
  bi_finish(&b, 1, op->out);

  lm_err err;
  lm_program *p;
  if (lm_program_create(b.m, &p, &err) < 0) { fprintf(stderr, "%s\n", err.msg); return 1; }
  lm_device *dev = lm_device_create((size_t)8 << 30);
  lm_buffer *args[2];
  lm_buffer_alloc(NULL, &lt, &args[0], NULL);
  lm_buffer_alloc(NULL, &rt, &args[1], NULL);
  float *A = args[0]->data, *B = args[1]->data;
  for (int64_t i = 0; i < M * K; i++) A[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
  for (int64_t i = 0; i < K * N; i++) B[i] = (float)((i * 104729) % 1000) / 1000.0f - 0.5f;
  float *C = aligned_alloc(64, (size_t)(M * N) * 4);
  lm_run_opts o = {.device = dev};
  double best_loom = 1e30, best_blas = 1e30;
  for (int r = 0; r < runs + 1; r++) {
    double t0 = bench_now();
    lm_buffer *out = NULL;
    if (lm_program_run(p, "main", &o, args, 2, &out, 1, &err) < 0) { fprintf(stderr, "%s\n", err.msg); return 1; }
    double t1 = bench_now();
    lm_buffer_release(out);
    double t2 = bench_now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)M, (blasint)N, (blasint)K, 1.0f, A, (blasint)K, B,
                (blasint)N, 0.0f, C, (blasint)N);
    double t3 = bench_now();
    if (r == 0) continue; /* warm-up */
    if (t1 - t0 < best_loom) best_loom = t1 - t0;
    if (t3 - t2 < best_blas) best_blas = t3 - t2;
  }
  double gf = 2.0 * M * N * K * 1e-9;
  printf("dot_general f32 %lldx%lldx%lld (openblas threads: %d, best of %d)\n", (long long)M, (long long)K, (long long)N,
         openblas_get_num_threads(), runs);
  printf("  loom dot_general   %8.2f ms  %7.1f GFLOP/s\n", best_loom * 1e3, gf / best_loom);
  printf("  openblas sgemm     %8.2f ms  %7.1f GFLOP/s\n", best_blas * 1e3, gf / best_blas);
  printf("  loom / sgemm speed: %.1f%%\n", 100.0 * best_blas / best_loom);
  free(C);
  lm_buffer_release(args[0]);
  lm_buffer_release(args[1]);
  lm_program_destroy(p);
  lm_device_destroy(dev);
  return 0;
}
