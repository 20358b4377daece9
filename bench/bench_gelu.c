/* The tanh gelu (as jax.nn.gelu(approximate=True) lowers it) on n f32 through Loom's executor,
 * fused into one pass, single-threaded; prints the best of several runs in milliseconds (and the
 * unfused time for comparison). bench_gelu.py runs this beside numpy evaluating the same
 * expression.   build/bench/bench_gelu [n [runs]]      default n = 16777216, 10 runs */
#include "bench_ir.h"
#include "exec/interp.h"

static void build(bi *b, int64_t n) {
  lm_type t;
  lm_type_tensor(&t, LOOM_DTYPE_F32, 1, &n);
  uint32_t x = bi_arg(b, t);
  uint32_t x3 = bi_bin(b, LM_OP_MULTIPLY, bi_bin(b, LM_OP_MULTIPLY, x, x, t), x, t);
  uint32_t a = bi_bin(b, LM_OP_ADD, x, bi_bin(b, LM_OP_MULTIPLY, bi_bcast_scalar(b, bi_const_f32(b, 0.044715f), t), x3, t), t);
  uint32_t m = bi_bin(b, LM_OP_MULTIPLY, bi_bcast_scalar(b, bi_const_f32(b, 0.797884583f), t), a, t);
  uint32_t th = bi_op(b, LM_OP_TANH, 1, &m, t)->out[0];
  uint32_t h = bi_bin(b, LM_OP_ADD, bi_bcast_scalar(b, bi_const_f32(b, 1.0f), t), th, t);
  uint32_t hh = bi_bin(b, LM_OP_MULTIPLY, bi_bcast_scalar(b, bi_const_f32(b, 0.5f), t), h, t);
  uint32_t y = bi_bin(b, LM_OP_MULTIPLY, x, hh, t);
  bi_finish(b, 1, &y);
}

static double time_it(int64_t n, int runs, bool fuse, lm_buffer *x) {
  bi b;
  bi_init(&b);
  build(&b, n);
  lm_err err;
  lm_program *p;
  lm_program_opts po = {.no_fusion = !fuse};
  if (lm_program_create_opts(b.m, &po, &p, &err) < 0) { fprintf(stderr, "%s\n", err.msg); exit(1); }
  lm_device *dev = lm_device_create((size_t)16 << 30);
  lm_run_opts o = {.device = dev, .nthreads = 1};
  double best = 1e30;
  for (int r = 0; r < runs + 1; r++) {
    lm_buffer *out = NULL;
    double t0 = bench_now();
    if (lm_program_run(p, "main", &o, &x, 1, &out, 1, &err) < 0) { fprintf(stderr, "%s\n", err.msg); exit(1); }
    double t1 = bench_now();
    lm_buffer_release(out);
    if (r > 0 && t1 - t0 < best) best = t1 - t0;
  }
  lm_program_destroy(p);
  lm_device_destroy(dev);
  return best;
}

int main(int argc, char **argv) {
  bench_help(argc, argv,
             "usage: bench_gelu [n [runs]]\n"
             "The tanh gelu on n f32 through the executor, fused and unfused, one thread; best of runs in ms.\n"
             "Default n = 16777216, 10 runs. bench/bench_gelu.py runs it beside numpy.\n");
  int64_t n = argc > 1 ? atoll(argv[1]) : 16777216;
  int runs = argc > 2 ? atoi(argv[2]) : 10;
  lm_type t;
  lm_type_tensor(&t, LOOM_DTYPE_F32, 1, &n);
  lm_buffer *x;
  lm_buffer_alloc(NULL, &t, &x, NULL);
  float *v = x->data;
  uint64_t s = 12345;
  for (int64_t i = 0; i < n; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    v[i] = (float)((s >> 40) / 16777216.0 * 8.0 - 4.0);
  }
  double fused = time_it(n, runs, true, x), unfused = time_it(n, runs, false, x);
  printf("loom_gelu_fused_ms %.3f\n", fused * 1e3);
  printf("loom_gelu_unfused_ms %.3f\n", unfused * 1e3);
  lm_buffer_release(x);
  return 0;
}
