/* Math for the elementwise engine: special functions the C library lacks (erf_inv, digamma,
 * polygamma, Hurwitz zeta, bessel_i1e), complex functions with the edge cases StableHLO/XLA
 * expect, reduce_precision on raw bits, and vectorized f32 kernels (exp, tanh, logistic, log)
 * that evaluate in double precision and round once, so they are correctly rounded but for rare
 * near-halfway cases. Pure functions; no state. */
#ifndef LM_EXEC_EW_MATH_H
#define LM_EXEC_EW_MATH_H

#include <complex.h>
#include <stddef.h>
#include <stdint.h>

/* ---- real, double precision (also used for f32 by rounding the double result) ---- */
double lm_erfinv(double y);            /* inverse of erf; +-inf at +-1, NaN outside [-1, 1] */
double lm_digamma(double x);           /* psi(x); NaN at non-positive integers */
double lm_zeta(double s, double q);    /* Hurwitz zeta sum_k (q+k)^-s; s > 1, q > 0 */
double lm_polygamma(double n, double x); /* psi^(n)(x), n a non-negative integer */
double lm_bessel_i1e(double x);        /* exp(-|x|) * I1(x) */
double lm_lgamma(double x);            /* log|Gamma(x)|, thread-safe */

/* reduce_precision (spec 'reduce_precision') on the raw bits of a float with `ebits`/`mbits`
 * exponent/mantissa bits (f16: 5/10, bf16: 8/7, f32: 8/23, f64: 11/52). */
uint64_t lm_reduce_precision_bits(uint64_t bits, int ebits, int mbits, int to_ebits, int to_mbits);
/* nextafter on the raw bits of an IEEE format with ebits/mbits (f16/bf16). */
uint16_t lm_nextafter16(uint16_t x, uint16_t y, int ebits, int mbits);

/* ---- complex, double precision ---- */
/* re + i im, exact for any values (infinities and NaNs included); CMPLX is not everywhere. */
static inline double complex lm_cmplx(double re, double im) {
  union { double complex z; double p[2]; } u;
  u.p[0] = re;
  u.p[1] = im;
  return u.z;
}
double complex lm_csqrt(double complex z);
double complex lm_crsqrt(double complex z);
double complex lm_ccbrt(double complex z);
double complex lm_cexp(double complex z);
double complex lm_cexpm1(double complex z);
double complex lm_clog(double complex z);
double complex lm_clog1p(double complex z);
double complex lm_clogistic(double complex z);
double complex lm_cpow(double complex a, double complex b);
double complex lm_catan2(double complex a, double complex b);
double complex lm_csign(double complex z);

/* ---- vectorized f32 kernels (double-precision evaluation), y may alias x ---- */
void lm_vexp_f32(float *y, const float *x, size_t n);
void lm_vtanh_f32(float *y, const float *x, size_t n);
void lm_vlogistic_f32(float *y, const float *x, size_t n);
void lm_vlog_f32(float *y, const float *x, size_t n);
/* Scalar version of lm_vexp_f32 (identical results). */
float lm_exp_f32(float x);

#endif
