/* Math for the elementwise engine (see ew_math.h): special functions, complex functions, raw-bit
 * float manipulation, and vectorized f32 exp/tanh/logistic/log evaluated in double precision.
 * The vector kernels are written with GCC vector extensions (portable, no intrinsics) and built
 * twice: for the baseline target and for AVX-512, chosen once at run time. */
#define _GNU_SOURCE
#include <complex.h>
#include <float.h>
#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>
#include "exec/ew_math.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

static const double k_pi = 3.14159265358979323846264338327950288;

/* ---- erf_inv ----
 * A rough closed-form start (Winitzki's approximation, ~1e-3 relative) refined by Newton steps
 * on erf(x) - y, or on erfc(x) - (1 - y) when y >= 0.5 so that values near 1 keep their relative
 * precision (1 - y is exact there). Converges to full double precision in 3-4 steps. */
double lm_erfinv(double y) {
  if (isnan(y)) return y;
  double a = fabs(y);
  if (a > 1) return NAN;
  if (a == 1) return copysign(INFINITY, y);
  if (a == 0) return y;
  const double wa = 0.147;
  double l = log1p(-a * a); /* ln(1 - y^2) */
  double t = 2 / (k_pi * wa) + l / 2;
  double x = sqrt(sqrt(t * t - l / wa) - t);
  const double two_over_sqrtpi = 1.12837916709551257390;
  bool tail = a >= 0.5;
  double q = 1 - a; /* exact for a >= 0.5 */
  for (int it = 0; it < 8; it++) {
    double f = tail ? (q - erfc(x)) : (erf(x) - a); /* both increase with x */
    double d = two_over_sqrtpi * exp(-x * x);
    if (d == 0) break;
    double step = f / d;
    /* Halley correction: f'' = -2x f' */
    step = step / (1 + x * step);
    x -= step;
    if (fabs(step) <= 1e-17 * fabs(x)) break;
  }
  return copysign(x, y);
}

/* ---- lgamma ---- */
double lm_lgamma(double x) {
  int sign;
  return lgamma_r(x, &sign);
}

/* ---- digamma ----
 * Reflection for x < 0 (psi(1-x) - pi/tan(pi x)), recurrence up to x >= 10, then the asymptotic
 * series ln x - 1/2x - sum B_2k / (2k x^2k). */
static double tanpi(double x) {
  /* tan(pi x) with x reduced exactly modulo 1 (tan has period pi). */
  double r = fmod(x, 1.0);
  if (r > 0.5) r -= 1;
  else if (r < -0.5) r += 1;
  if (r == 0.5 || r == -0.5) return INFINITY;
  return tan(k_pi * r);
}

double lm_digamma(double x) {
  if (isnan(x)) return x;
  if (x == INFINITY) return x;
  if (x == -INFINITY) return NAN;
  double acc = 0;
  if (x <= 0) {
    if (x == floor(x)) return NAN; /* poles */
    /* psi(x) = psi(1 - x) - pi / tan(pi x) */
    acc = -k_pi / tanpi(x);
    x = 1 - x;
  }
  while (x < 10) {
    acc -= 1 / x;
    x += 1;
  }
  double z = 1 / (x * x);
  /* Bernoulli terms B2k/(2k): 1/12, -1/120, 1/252, -1/240, 1/132, -691/32760, 1/12 */
  double s = z * (1.0 / 12 - z * (1.0 / 120 - z * (1.0 / 252 - z * (1.0 / 240 - z * (1.0 / 132 - z * (691.0 / 32760 - z / 12))))));
  return acc + log(x) - 0.5 / x - s;
}

/* ---- Hurwitz zeta ----
 * Direct sum of the first terms until q+N >= 16 (and at least 9 terms), then Euler-Maclaurin with
 * Bernoulli numbers B2..B26 for the tail. */
static const double k_bern[] = { /* B_2k, k = 1..13 */
  1.0 / 6, -1.0 / 30, 1.0 / 42, -1.0 / 30, 5.0 / 66, -691.0 / 2730, 7.0 / 6, -3617.0 / 510,
  43867.0 / 798, -174611.0 / 330, 854513.0 / 138, -236364091.0 / 2730, 8553103.0 / 6};

double lm_zeta(double s, double q) {
  if (isnan(s) || isnan(q)) return NAN;
  if (s == 1) return INFINITY;
  if (s < 1) return NAN;
  if (q <= 0) {
    if (q == floor(q)) return INFINITY;
    if (s != floor(s)) return NAN; /* (q+k)^-s undefined for negative bases */
  }
  if (q == INFINITY) return 0;
  double sum = 0;
  int n = 0;
  double a = q;
  while (n < 9 || a < 16) {
    double t = pow(a, -s);
    sum += t;
    if (t < sum * 1e-18 && n >= 9) return sum;
    a += 1;
    n++;
    if (n > 100000) break;
  }
  /* tail: a^(1-s)/(s-1) + a^-s/2 + sum_k B2k/(2k)! * s(s+1)...(s+2k-2) a^(-s-2k+1) */
  double as = pow(a, -s);
  double tail = a * as / (s - 1) + 0.5 * as;
  double fact = 1; /* (2k)! */
  double poch = s; /* s(s+1)...(s+2k-2) */
  double ap = as / a; /* a^(-s-1) */
  for (int k = 1; k <= 13; k++) {
    fact *= (2.0 * k - 1) * (2.0 * k);
    double term = k_bern[k - 1] / fact * poch * ap;
    tail += term;
    if (fabs(term) < 1e-18 * fabs(sum + tail)) break;
    poch *= (s + 2 * k - 1) * (s + 2 * k);
    ap /= a * a;
  }
  return sum + tail;
}

double lm_polygamma(double n, double x) {
  if (isnan(n) || isnan(x)) return NAN;
  if (n != floor(n) || n < 0) return NAN;
  if (n == 0) return lm_digamma(x);
  /* psi^(n)(x) = (-1)^(n+1) n! zeta(n+1, x) */
  double fact = tgamma(n + 1);
  double z = lm_zeta(n + 1, x);
  double sign = fmod(n, 2.0) == 1.0 ? 1.0 : -1.0;
  return sign * fact * z;
}

/* ---- bessel_i1e ----
 * Power series of I1 (all terms positive) scaled by exp(-|x|) for |x| <= 20, the asymptotic
 * expansion e^x/sqrt(2 pi x) * sum (-1)^k a_k(1) / x^k beyond. */
double lm_bessel_i1e(double x) {
  if (isnan(x)) return x;
  double ax = fabs(x);
  double r;
  if (ax == INFINITY) return copysign(0.0, x);
  if (ax <= 20) {
    double h = ax / 2, h2 = h * h;
    double term = h, sum = h;
    for (int k = 1; k < 200; k++) {
      term *= h2 / ((double)k * (k + 1));
      sum += term;
      if (term < sum * 1e-17) break;
    }
    r = sum * exp(-ax);
  } else {
    /* a_k = prod_{j=1..k} (4 - (2j-1)^2) / (k! 8^k) */
    double sum = 1, term = 1;
    for (int k = 1; k < 60; k++) {
      double m = 2.0 * k - 1;
      term *= -(4 - m * m) / (k * 8.0 * ax);
      double nt = fabs(term);
      sum += term;
      if (nt < 1e-17 * fabs(sum)) break;
    }
    r = sum / sqrt(2 * k_pi * ax);
  }
  return copysign(r, x);
}

/* ---- raw-bit helpers ---- */

uint64_t lm_reduce_precision_bits(uint64_t bits, int ebits, int mbits, int to_ebits, int to_mbits) {
  int width = 1 + ebits + mbits;
  uint64_t one = 1;
  uint64_t sign_mask = one << (width - 1);
  uint64_t exp_mask = ((one << ebits) - 1) << mbits;
  uint64_t man_mask = (one << mbits) - 1;
  uint64_t abs_bits = bits & ~sign_mask;
  bool is_nan = (abs_bits & exp_mask) == exp_mask && (abs_bits & man_mask) != 0;
  uint64_t x = bits;
  if (to_mbits < mbits) {
    /* round to nearest even at bit (mbits - to_mbits), then clear the dropped bits */
    int drop = mbits - to_mbits;
    uint64_t last = one << drop;
    uint64_t bias = (last >> 1) - 1 + ((x >> drop) & 1);
    x = (x + bias) & ~(last - 1);
  }
  if (to_ebits < ebits) {
    int64_t ebias = (int64_t)((one << (ebits - 1)) - 1);
    int64_t max_e = (int64_t)((one << (to_ebits - 1)) - 1);
    int64_t min_e = 1 - max_e;
    uint64_t e = (x & exp_mask) >> mbits; /* biased */
    uint64_t s = x & sign_mask;
    if ((int64_t)e > ebias + max_e) x = s | exp_mask;          /* overflow to inf */
    else if ((int64_t)e <= ebias + min_e - 1) x = s;            /* underflow to zero */
  }
  if (is_nan) {
    /* a NaN stays the same NaN when the target format has mantissa bits to hold one; with none
     * it becomes an infinity of its sign (as XLA and the reference interpreter do) */
    x = to_mbits > 0 ? bits : (bits & sign_mask) | exp_mask;
  }
  return x;
}

uint16_t lm_nextafter16(uint16_t x, uint16_t y, int ebits, int mbits) {
  uint16_t sign = 0x8000, exp_mask = (uint16_t)(((1u << ebits) - 1) << mbits), man_mask = (uint16_t)((1u << mbits) - 1);
  bool xnan = (x & exp_mask) == exp_mask && (x & man_mask);
  bool ynan = (y & exp_mask) == exp_mask && (y & man_mask);
  if (xnan) return x;
  if (ynan) return y;
  if (((x | y) & ~sign) == 0) return y; /* +-0 and +-0: y */
  if (x == y) return y;
  if ((x & ~sign) == 0) return (uint16_t)((y & sign) | 1); /* smallest subnormal toward y */
  /* ordering via sign-magnitude: moving away from zero increments the magnitude */
  bool xneg = x & sign, yneg = y & sign;
  bool y_greater = yneg != xneg ? !yneg : (xneg ? (y & ~sign) < (x & ~sign) : (y & ~sign) > (x & ~sign));
  bool away = y_greater != xneg; /* positive x moving up, or negative x moving down */
  return away ? (uint16_t)(x + 1) : (uint16_t)(x - 1);
}

/* ---- complex ---- */

double complex lm_csqrt(double complex z) { return csqrt(z); }
double complex lm_crsqrt(double complex z) { return 1.0 / csqrt(z); }

double complex lm_ccbrt(double complex z) {
  double re = creal(z), im = cimag(z);
  if (im == 0 && !isnan(re) && !(re < 0)) return lm_cmplx(cbrt(re), im);
  return cexp(clog(z) / 3.0);
}

double complex lm_cexp(double complex z) { return cexp(z); }

double complex lm_cexpm1(double complex z) {
  /* re = expm1(x) cos y - 2 sin^2(y/2), im = e^x sin y: no cancellation near 0 */
  double x = creal(z), y = cimag(z);
  if (y == 0 && !isnan(x)) return lm_cmplx(expm1(x), y);
  double s = sin(y / 2);
  double re = expm1(x) * cos(y) - 2 * s * s;
  double im = exp(x) * sin(y);
  if (!isfinite(x) || !isfinite(y)) {
    double complex e = cexp(z);
    return lm_cmplx(creal(e) - 1, cimag(e));
  }
  return lm_cmplx(re, im);
}

double complex lm_clog(double complex z) { return clog(z); }

double complex lm_clog1p(double complex z) {
  /* log(1+z): re = log|1+z| = 0.5 log1p(2x + x^2 + y^2) near 0, im = atan2(y, 1+x) */
  double x = creal(z), y = cimag(z);
  if (!isfinite(x) || !isfinite(y)) return clog(1.0 + z);
  double ax = fabs(x), ay = fabs(y);
  double re;
  if (ax < 0.5 && ay < 0.5) re = 0.5 * log1p(x * (2 + x) + y * y);
  else re = log(hypot(1 + x, y));
  return lm_cmplx(re, atan2(y, 1 + x));
}

double complex lm_clogistic(double complex z) { return 1.0 / (1.0 + cexp(-z)); }

double complex lm_cpow(double complex a, double complex b) {
  double ar = creal(a), ai = cimag(a), br = creal(b), bi = cimag(b);
  if (ar == 0 && ai == 0) {
    if (br == 0 && bi == 0) return lm_cmplx(1, 0);
    if (br > 0) return lm_cmplx(0, 0);
    if (br < 0) return lm_cmplx(INFINITY, 0);
    return lm_cmplx(NAN, NAN);
  }
  return cexp(b * clog(a));
}

double complex lm_catan2(double complex a, double complex b) {
  /* atan2(a, b) = -i log((b + i a) / sqrt(b^2 + a^2)) */
  double complex num = b + I * a;
  double complex den = csqrt(b * b + a * a);
  return -I * clog(num / den);
}

double complex lm_csign(double complex z) {
  double re = creal(z), im = cimag(z);
  if (isnan(re) || isnan(im)) return lm_cmplx(NAN, NAN);
  if (re == 0 && im == 0) return lm_cmplx(0, 0);
  if (isinf(re) || isinf(im)) {
    /* direction of an infinite value */
    double r = isinf(re) ? copysign(1.0, re) : 0, i = isinf(im) ? copysign(1.0, im) : 0;
    double m = hypot(r, i);
    return lm_cmplx(r / m, i / m);
  }
  double m = hypot(re, im);
  return lm_cmplx(re / m, im / m);
}

/* ---- vectorized f32 kernels ----
 * ew_vmath.inc holds the kernels, written over vectors of VW doubles; it is included twice: with
 * 4 lanes for the baseline target (AVX2) and with 8 lanes for AVX-512, chosen once at run time. */

#define VW 4
#define VSUF _base
#include "exec/ew_vmath.inc"
#undef VW
#undef VSUF

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define HAVE_AVX512_CLONE 1
#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx512vl,avx512bw,avx2,fma")
#define VW 8
#define VSUF _512
#include "exec/ew_vmath.inc"
#undef VW
#undef VSUF
#pragma GCC pop_options
#endif

/* 1 when the AVX-512 versions may run, decided once. */
static int use_512(void) {
#ifdef HAVE_AVX512_CLONE
  static _Atomic int cached = -1;
  int v = atomic_load_explicit(&cached, memory_order_relaxed);
  if (v < 0) {
    __builtin_cpu_init();
    v = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw");
    atomic_store_explicit(&cached, v, memory_order_relaxed);
  }
  return v;
#else
  return 0;
#endif
}

#ifdef HAVE_AVX512_CLONE
#define DISPATCH(name)                                              \
  void lm_v##name##_f32(float *y, const float *x, size_t n) {       \
    if (use_512()) name##_arr_512(y, x, n);                         \
    else name##_arr_base(y, x, n);                                  \
  }
#else
#define DISPATCH(name) \
  void lm_v##name##_f32(float *y, const float *x, size_t n) { (void)use_512; name##_arr_base(y, x, n); }
#endif
DISPATCH(exp)
DISPATCH(tanh)
DISPATCH(logistic)
DISPATCH(log)

float lm_exp_f32(float x) { float y; lm_vexp_f32(&y, &x, 1); return y; }
