/* Unit tests for fft (src/exec/fft.c): the interpreter suite's known values, every transform
 * type against a naive long-double DFT for lengths that take the mixed-radix path and the
 * Bluestein path (primes over 64), multi-dimensional round trips, and jnp.fft values (f32). */
#include <complex.h>
#include <math.h>
#include "test_ops_build.h"

static lm_buffer *run_fft(const char *type, int L, const int64_t *len, lm_type in_t, lm_type out_t, lm_buffer *x) {
  tb b;
  tb_init(&b);
  uint32_t a = tb_arg(&b, in_t);
  lm_op *op = tb_op(&b, b.body, LM_OP_FFT, 1, &a, 1, &out_t);
  tb_enum(&b, op, "fft_type", type);
  tb_ints(&b, op, "fft_length", L, len);
  tb_finish(&b, 1, op->out);
  return tb_run1(&b, &x, 1);
}

static void test_fft_known(void **state) {
  double in1[4] = {1, 2, 3, -4}, want1[4] = {4, -2, -2, 6};
  lm_buffer *x = tb_buf(T1(LOOM_DTYPE_C128, 2), in1);
  lm_buffer *y = run_fft("FFT", 1, (int64_t[]){2}, T1(LOOM_DTYPE_C128, 2), T1(LOOM_DTYPE_C128, 2), x);
  for (int i = 0; i < 4; i++) assert_true(fabs(((double *)y->data)[i] - want1[i]) < 1e-12);
  lm_buffer_release(x);
  lm_buffer_release(y);
  double in2[8] = {1, 2, 3, -4, -5, 6, -7, -8}, want2[8] = {-8, -4, 0, 20, 16, 0, -4, -8};
  x = tb_buf(T2(LOOM_DTYPE_C128, 2, 2), in2);
  y = run_fft("FFT", 2, (int64_t[]){2, 2}, T2(LOOM_DTYPE_C128, 2, 2), T2(LOOM_DTYPE_C128, 2, 2), x);
  for (int i = 0; i < 8; i++) assert_true(fabs(((double *)y->data)[i] - want2[i]) < 1e-12);
  lm_buffer_release(x);
  lm_buffer_release(y);
  /* the spec's example: a unit impulse transforms to all ones (complex<f32>) */
  float imp[8] = {1, 0, 0, 0, 0, 0, 0, 0};
  x = tb_buf(T1(LOOM_DTYPE_C64, 4), imp);
  y = run_fft("FFT", 1, (int64_t[]){4}, T1(LOOM_DTYPE_C64, 4), T1(LOOM_DTYPE_C64, 4), x);
  for (int i = 0; i < 4; i++) assert_true(((float *)y->data)[2 * i] == 1.0f && ((float *)y->data)[2 * i + 1] == 0.0f);
  lm_buffer_release(x);
  lm_buffer_release(y);
}

/* naive DFT in long double; sign -1 forward, +1 inverse (scaled) */
static void dft(const long double complex *x, long double complex *y, int64_t n, int sign) {
  for (int64_t k = 0; k < n; k++) {
    long double complex s = 0;
    for (int64_t j = 0; j < n; j++) {
      long double a = sign * 2.0L * 3.14159265358979323846264338327950288L * (long double)((j * k) % n) / (long double)n;
      s += x[j] * (cosl(a) + I * sinl(a));
    }
    y[k] = sign > 0 ? s / (long double)n : s;
  }
}

static void test_fft_vs_naive(void **state) {
  int64_t lens[] = {1, 2, 3, 8, 12, 60, 67, 128, 130, 257, 1000};
  uint64_t s = 21;
  for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
    int64_t n = lens[li];
    double *xin = malloc(2 * n * sizeof *xin);
    long double complex *xc = malloc(n * sizeof *xc), *yc = malloc(n * sizeof *yc);
    for (int64_t i = 0; i < n; i++) {
      xin[2 * i] = (double)(tb_rand(&s) % 2001) / 1000.0 - 1;
      xin[2 * i + 1] = (double)(tb_rand(&s) % 2001) / 1000.0 - 1;
      xc[i] = xin[2 * i] + I * xin[2 * i + 1];
    }
    for (int inv = 0; inv < 2; inv++) {
      dft(xc, yc, n, inv ? 1 : -1);
      lm_buffer *x = tb_buf(T1(LOOM_DTYPE_C128, n), xin);
      lm_buffer *y = run_fft(inv ? "IFFT" : "FFT", 1, &n, T1(LOOM_DTYPE_C128, n), T1(LOOM_DTYPE_C128, n), x);
      const double *r = y->data;
      double tol = 1e-13 * (double)n;
      for (int64_t k = 0; k < n; k++)
        if (fabs(r[2 * k] - (double)creall(yc[k])) > tol || fabs(r[2 * k + 1] - (double)cimagl(yc[k])) > tol)
          fail_msg("%s n=%lld: element %lld is (%g, %g), want (%g, %g)", inv ? "IFFT" : "FFT", (long long)n, (long long)k,
                   r[2 * k], r[2 * k + 1], (double)creall(yc[k]), (double)cimagl(yc[k]));
      lm_buffer_release(x);
      lm_buffer_release(y);
    }
    /* RFFT of the real parts, IRFFT back */
    double *re = malloc(n * sizeof *re);
    for (int64_t i = 0; i < n; i++) { re[i] = xin[2 * i]; xc[i] = re[i]; }
    dft(xc, yc, n, -1);
    int64_t h = n / 2 + 1;
    lm_buffer *x = tb_buf(T1(LOOM_DTYPE_F64, n), re);
    lm_buffer *y = run_fft("RFFT", 1, &n, T1(LOOM_DTYPE_F64, n), T1(LOOM_DTYPE_C128, h), x);
    for (int64_t k = 0; k < h; k++) {
      assert_true(fabs(((double *)y->data)[2 * k] - (double)creall(yc[k])) < 1e-13 * n);
      assert_true(fabs(((double *)y->data)[2 * k + 1] - (double)cimagl(yc[k])) < 1e-13 * n);
    }
    lm_buffer *z = run_fft("IRFFT", 1, &n, T1(LOOM_DTYPE_C128, h), T1(LOOM_DTYPE_F64, n), y);
    for (int64_t i = 0; i < n; i++) assert_true(fabs(((double *)z->data)[i] - re[i]) < 1e-13 * n);
    lm_buffer_release(x);
    lm_buffer_release(y);
    lm_buffer_release(z);
    free(re);
    free(xin);
    free(xc);
    free(yc);
  }
}

static void test_irfft_drops_dc_imag(void **state) {
  /* n = 6: the imaginary parts of X[0] and X[3] do not contribute */
  double spec[8] = {3, 5, 1, 2, -1, 0.5, 2, 7};
  lm_buffer *x = tb_buf(T1(LOOM_DTYPE_C128, 4), spec);
  lm_buffer *y = run_fft("IRFFT", 1, (int64_t[]){6}, T1(LOOM_DTYPE_C128, 4), T1(LOOM_DTYPE_F64, 6), x);
  long double complex full[6] = {3, 1 + 2 * I, -1 + 0.5 * I, 2, -1 - 0.5 * I, 1 - 2 * I}, out[6];
  dft(full, out, 6, 1);
  for (int i = 0; i < 6; i++) assert_true(fabs(((double *)y->data)[i] - (double)creall(out[i])) < 1e-14);
  lm_buffer_release(x);
  lm_buffer_release(y);
}

static void test_fft_multi_dim_roundtrip(void **state) {
  /* [3, 10, 7] f32: RFFT over the last two dims, IRFFT back; and FFT/IFFT over three dims */
  lm_type rt = T3(LOOM_DTYPE_F32, 3, 10, 7), ct = T3(LOOM_DTYPE_C64, 3, 10, 4);
  lm_buffer *x = tb_buf_iota(rt, 0.01, -0.5);
  for (int i = 0; i < 210; i++) ((float *)x->data)[i] = sinf((float)i * 0.37f) + 0.1f * (float)(i % 7);
  int64_t len[2] = {10, 7};
  lm_buffer *y = run_fft("RFFT", 2, len, rt, ct, x);
  lm_buffer *z = run_fft("IRFFT", 2, len, ct, rt, y);
  for (int i = 0; i < 210; i++) assert_true(fabsf(((float *)z->data)[i] - ((float *)x->data)[i]) < 1e-5f);
  /* RFFT over 2 dims equals the first 4 columns of the complex FFT over 2 dims */
  lm_type ft = T3(LOOM_DTYPE_C64, 3, 10, 7);
  lm_buffer *xc = tb_buf_iota(ft, 0, 0);
  for (int i = 0; i < 210; i++) ((float *)xc->data)[2 * i] = ((float *)x->data)[i];
  lm_buffer *f = run_fft("FFT", 2, len, ft, ft, xc);
  for (int a = 0; a < 30; a++)
    for (int c = 0; c < 4; c++)
      for (int p = 0; p < 2; p++)
        assert_true(fabsf(((float *)f->data)[2 * (a * 7 + c) + p] - ((float *)y->data)[2 * (a * 4 + c) + p]) < 1e-5f);
  lm_buffer *f3 = run_fft("FFT", 3, (int64_t[]){3, 10, 7}, ft, ft, xc);
  lm_buffer *g = run_fft("IFFT", 3, (int64_t[]){3, 10, 7}, ft, ft, f3);
  lm_buffer_release(f3);
  for (int i = 0; i < 420; i++) assert_true(fabsf(((float *)g->data)[i] - ((float *)xc->data)[i]) < 1e-5f);
  lm_buffer_release(x);
  lm_buffer_release(y);
  lm_buffer_release(z);
  lm_buffer_release(xc);
  lm_buffer_release(f);
  lm_buffer_release(g);
}

static void test_fft_vs_jax(void **state) {
  /* jnp.fft.rfft of (arange(12) * 0.37 - 1.1) as f32 (XLA CPU), see test_ops_jax_values.py;
   * XLA computes in f32, Loom in double, so they agree to a few f32 ulps of the largest term */
  float x[12];
  for (int i = 0; i < 12; i++) x[i] = (float)i * 0.37f - 1.1f;
  double want[7][2] = {{11.219999313354492, 0.0},
                       {-2.2200002670288086, 8.285152435302734},
                       {-2.2199997901916504, 3.8451526165008545},
                       {-2.2199997901916504, 2.2200002670288086},
                       {-2.2200002670288086, 1.2817175388336182},
                       {-2.2199997901916504, 0.5948469638824463},
                       {-2.220000743865967, 0.0}};
  lm_buffer *b = tb_buf(T1(LOOM_DTYPE_F32, 12), x);
  lm_buffer *y = run_fft("RFFT", 1, (int64_t[]){12}, T1(LOOM_DTYPE_F32, 12), T1(LOOM_DTYPE_C64, 7), b);
  for (int k = 0; k < 7; k++)
    for (int p = 0; p < 2; p++) assert_true(fabs(((float *)y->data)[2 * k + p] - want[k][p]) < 4 * 9.6e-7);
  lm_buffer_release(b);
  lm_buffer_release(y);
}

static void test_fft_verify(void **state) {
  tb b;
  tb_init(&b);
  lm_type it = T1(LOOM_DTYPE_F32, 8), ot = T1(LOOM_DTYPE_C64, 4);
  uint32_t a = tb_arg(&b, it);
  lm_op *op = tb_op(&b, b.body, LM_OP_FFT, 1, &a, 1, &ot);
  tb_enum(&b, op, "fft_type", "RFFT");
  tb_ints(&b, op, "fft_length", 1, (int64_t[]){8});
  tb_finish(&b, 1, op->out);
  lm_buffer *x = tb_buf_iota(it, 1, 0);
  tb_expect_error(&b, &x, 1, LOOM_VERIFY, "result dimension 0 is 4, expected 5");
  lm_buffer_release(x);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fft_known),          cmocka_unit_test(test_fft_vs_naive),
      cmocka_unit_test(test_irfft_drops_dc_imag), cmocka_unit_test(test_fft_multi_dim_roundtrip),
      cmocka_unit_test(test_fft_vs_jax),         cmocka_unit_test(test_fft_verify),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
