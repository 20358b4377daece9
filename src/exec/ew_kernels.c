/* Array kernels of the elementwise engine, one per (op, element type), and lm_ew_make() which
 * picks one for an op. Semantics are the StableHLO spec's (sections named after each op);
 * where the spec leaves a case to the implementation we do what XLA on CPU does:
 *   - integer divide by 0 gives -1 (all bits set), INT_MIN / -1 gives INT_MIN; remainder by 0
 *     gives the dividend, INT_MIN % -1 gives 0 (spec 'divide', 'remainder');
 *   - shifts by >= the bit width (or negative) give 0, or the sign for shift_right_arithmetic;
 *   - integer power with a negative exponent: 1^n = 1, (-1)^n = +-1, otherwise 0;
 *   - f16/bf16 are computed in f32 and rounded per element; f32 transcendental functions are
 *     evaluated in double and rounded once (correctly rounded for all practical purposes).
 * Built at -O3 so the simple loops vectorize. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif
#define _GNU_SOURCE
#if defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wtype-limits" /* templates compare unsigned values with 0 */
#endif
#include <complex.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "common/half.h"
#include "exec/ew.h"
#include "exec/ew_math.h"

typedef float complex c64_t;
typedef double complex c128_t;

#define KARGS void *o, const void *const *in, size_t n, const lm_ew_inst *p
#define UNUSED_T __attribute__((unused))

/* ---- integer templates ---- */

/* M(name, suffix, T, unsigned T, signed T, bits, is_signed, expr...) for the eight integer types */
#define INT_TYPES(M, name, ...)                                      \
  M(name, s8, int8_t, uint8_t, int8_t, 8, 1, __VA_ARGS__)            \
  M(name, s16, int16_t, uint16_t, int16_t, 16, 1, __VA_ARGS__)       \
  M(name, s32, int32_t, uint32_t, int32_t, 32, 1, __VA_ARGS__)       \
  M(name, s64, int64_t, uint64_t, int64_t, 64, 1, __VA_ARGS__)       \
  M(name, u8, uint8_t, uint8_t, int8_t, 8, 0, __VA_ARGS__)           \
  M(name, u16, uint16_t, uint16_t, int16_t, 16, 0, __VA_ARGS__)      \
  M(name, u32, uint32_t, uint32_t, int32_t, 32, 0, __VA_ARGS__)      \
  M(name, u64, uint64_t, uint64_t, int64_t, 64, 0, __VA_ARGS__)
#define INT_TAB(name) {name##_s8, name##_s16, name##_s32, name##_s64, name##_u8, name##_u16, name##_u32, name##_u64}

#define INT_PRELUDE(T_, UT_, ST_, BITS_, SIGNED_)                      \
  typedef T_ T UNUSED_T;                                               \
  typedef UT_ UT UNUSED_T;                                             \
  typedef ST_ ST UNUSED_T;                                             \
  enum { BITS = BITS_, SIGNED = SIGNED_ };                             \
  const T TMIN UNUSED_T = SIGNED_ ? (T)((UT)1 << (BITS_ - 1)) : 0;     \
  (void)p;

#define INT_UN(name, sfx, T_, UT_, ST_, BITS_, SIGNED_, ...)            \
  static void name##_##sfx(KARGS) {                                    \
    INT_PRELUDE(T_, UT_, ST_, BITS_, SIGNED_)                          \
    T *y = o;                                                          \
    const T *A = in[0];                                                \
    for (size_t i = 0; i < n; i++) {                                   \
      T a = A[i];                                                      \
      y[i] = (T)(__VA_ARGS__);                                         \
    }                                                                  \
  }
#define INT_BIN(name, sfx, T_, UT_, ST_, BITS_, SIGNED_, ...)           \
  static void name##_##sfx(KARGS) {                                    \
    INT_PRELUDE(T_, UT_, ST_, BITS_, SIGNED_)                          \
    T *y = o;                                                          \
    const T *A = in[0], *B = in[1];                                    \
    for (size_t i = 0; i < n; i++) {                                   \
      T a = A[i], b = B[i];                                            \
      y[i] = (T)(__VA_ARGS__);                                         \
    }                                                                  \
  }
#define DEF_INT_UN(name, ...) INT_TYPES(INT_UN, name, __VA_ARGS__)
#define DEF_INT_BIN(name, ...) INT_TYPES(INT_BIN, name, __VA_ARGS__)

/* wrapping arithmetic through uint64 (no signed overflow UB, no int promotion surprises) */
#define WRAP_ADD(a, b) ((uint64_t)(a) + (uint64_t)(b))
#define WRAP_SUB(a, b) ((uint64_t)(a) - (uint64_t)(b))
#define WRAP_MUL(a, b) ((uint64_t)(a) * (uint64_t)(b))

DEF_INT_BIN(iadd, WRAP_ADD(a, b))
DEF_INT_BIN(isub, WRAP_SUB(a, b))
DEF_INT_BIN(imul, WRAP_MUL(a, b))
DEF_INT_BIN(idiv, b == 0 ? (T)-1 : (SIGNED && b == (T)-1 && a == TMIN) ? a : (T)(a / b))
DEF_INT_BIN(irem, b == 0 ? a : (SIGNED && b == (T)-1) ? (T)0 : (T)(a % b))
/* chlo.mulhi: the high half of the double-width product */
static inline uint64_t mulhi_u64(uint64_t a, uint64_t b) { return (uint64_t)(((unsigned __int128)a * b) >> 64); }
static inline int64_t mulhi_s64(int64_t a, int64_t b) { return (int64_t)(((__int128)a * b) >> 64); }
DEF_INT_BIN(imulhi, BITS == 64 ? (SIGNED ? (T)mulhi_s64((int64_t)a, (int64_t)b) : (T)mulhi_u64((uint64_t)a, (uint64_t)b))
                               : (T)(SIGNED ? ((int64_t)a * (int64_t)b) >> BITS : (int64_t)(((uint64_t)a * (uint64_t)b) >> BITS)))
DEF_INT_BIN(imax, a > b ? a : b)
DEF_INT_BIN(imin, a < b ? a : b)
DEF_INT_BIN(iand, a & b)
DEF_INT_BIN(ior, a | b)
DEF_INT_BIN(ixor, a ^ b)
DEF_INT_BIN(ishl, (UT)b >= BITS ? (T)0 : (T)((uint64_t)(UT)a << (UT)b))
DEF_INT_BIN(ishrl, (UT)b >= BITS ? (T)0 : (T)((UT)a >> (UT)b))
DEF_INT_BIN(ishra, (UT)b >= BITS ? (T)((ST)a < 0 ? -1 : 0) : (T)((ST)a >> (UT)b))
DEF_INT_UN(ineg, WRAP_SUB(0, a))
DEF_INT_UN(iabs, (SIGNED && a < 0) ? (T)WRAP_SUB(0, a) : a)
DEF_INT_UN(inot, ~a)
DEF_INT_UN(isign, SIGNED ? (T)((a > 0) - (a < 0)) : (T)(a != 0))
DEF_INT_UN(iclz, a == 0 ? BITS : __builtin_clzll((uint64_t)(UT)a) - (64 - BITS))
DEF_INT_UN(ipopcnt, __builtin_popcountll((uint64_t)(UT)a))
DEF_INT_UN(isquare, WRAP_MUL(a, a))

/* integer power: square-and-multiply with wrapping; negative exponents per the header */
static inline uint64_t ipow_wrap(uint64_t base, uint64_t e) {
  uint64_t r = 1;
  while (e) {
    if (e & 1) r *= base;
    base *= base;
    e >>= 1;
  }
  return r;
}
DEF_INT_BIN(ipow, (SIGNED && b < 0) ? (a == 1 ? (T)1 : a == (T)-1 ? ((b & 1) ? (T)-1 : (T)1) : (T)0)
                                     : (T)ipow_wrap((uint64_t)a, (uint64_t)(UT)b))

/* clamp(min, operand, max) = min(max(operand, min), max) (spec 'clamp') */
#define INT_CLAMP(name, sfx, T_, UT_, ST_, BITS_, SIGNED_, ...)         \
  static void name##_##sfx(KARGS) {                                    \
    T_ *y = o;                                                         \
    const T_ *L = in[0], *X = in[1], *H = in[2];                       \
    (void)p;                                                           \
    for (size_t i = 0; i < n; i++) {                                   \
      T_ v = X[i] > L[i] ? X[i] : L[i];                                \
      y[i] = v < H[i] ? v : H[i];                                      \
    }                                                                  \
  }
INT_TYPES(INT_CLAMP, iclamp, 0)

/* compare: one loop per direction so each vectorizes */
#define CMP_LOOPS(T, KEY)                                                         \
  uint8_t *y = o;                                                                 \
  const T *A = in[0], *B = in[1];                                                 \
  switch (p->dir) {                                                               \
    case LM_CMP_EQ: for (size_t i = 0; i < n; i++) y[i] = KEY(A[i]) == KEY(B[i]); break; \
    case LM_CMP_NE: for (size_t i = 0; i < n; i++) y[i] = KEY(A[i]) != KEY(B[i]); break; \
    case LM_CMP_GE: for (size_t i = 0; i < n; i++) y[i] = KEY(A[i]) >= KEY(B[i]); break; \
    case LM_CMP_GT: for (size_t i = 0; i < n; i++) y[i] = KEY(A[i]) > KEY(B[i]); break;  \
    case LM_CMP_LE: for (size_t i = 0; i < n; i++) y[i] = KEY(A[i]) <= KEY(B[i]); break; \
    default: for (size_t i = 0; i < n; i++) y[i] = KEY(A[i]) < KEY(B[i]); break;         \
  }
#define IDKEY(x) (x)
#define INT_CMP(name, sfx, T_, UT_, ST_, BITS_, SIGNED_, ...) \
  static void name##_##sfx(KARGS) { CMP_LOOPS(T_, IDKEY) }
INT_TYPES(INT_CMP, icmp, 0)

/* ---- pred (i1 stored as one byte 0/1) ---- */
static void pred_or(KARGS) { uint8_t *y = o; const uint8_t *a = in[0], *b = in[1]; (void)p; for (size_t i = 0; i < n; i++) y[i] = a[i] | b[i]; }
static void pred_and(KARGS) { uint8_t *y = o; const uint8_t *a = in[0], *b = in[1]; (void)p; for (size_t i = 0; i < n; i++) y[i] = a[i] & b[i]; }
static void pred_xor(KARGS) { uint8_t *y = o; const uint8_t *a = in[0], *b = in[1]; (void)p; for (size_t i = 0; i < n; i++) y[i] = a[i] ^ b[i]; }
static void pred_not(KARGS) { uint8_t *y = o; const uint8_t *a = in[0]; (void)p; for (size_t i = 0; i < n; i++) y[i] = a[i] ^ 1; }
static void pred_cmp(KARGS) { CMP_LOOPS(uint8_t, IDKEY) }
static void pred_clamp(KARGS) {
  uint8_t *y = o; const uint8_t *L = in[0], *X = in[1], *H = in[2]; (void)p;
  for (size_t i = 0; i < n; i++) y[i] = (uint8_t)((X[i] | L[i]) & H[i]);
}

/* ---- floating point templates ---- */

#define FLT_UN(name, e32, e64)                                             \
  static void name##_f32(KARGS) {                                          \
    float *y = o; const float *A = in[0]; (void)p;                         \
    for (size_t i = 0; i < n; i++) { float a = A[i]; y[i] = (e32); }      \
  }                                                                        \
  static void name##_f64(KARGS) {                                          \
    double *y = o; const double *A = in[0]; (void)p;                       \
    for (size_t i = 0; i < n; i++) { double a = A[i]; y[i] = (e64); }     \
  }
#define FLT_BIN(name, e32, e64)                                                      \
  static void name##_f32(KARGS) {                                                    \
    float *y = o; const float *A = in[0], *B = in[1]; (void)p;                       \
    for (size_t i = 0; i < n; i++) { float a = A[i], b = B[i]; y[i] = (e32); }      \
  }                                                                                  \
  static void name##_f64(KARGS) {                                                    \
    double *y = o; const double *A = in[0], *B = in[1]; (void)p;                     \
    for (size_t i = 0; i < n; i++) { double a = A[i], b = B[i]; y[i] = (e64); }     \
  }
/* f32 computed through the double-precision function and rounded once */
#define VIA_D(fn) ((float)fn((double)a))
#define VIA_D2(fn) ((float)fn((double)a, (double)b))
/* bool-valued: writes one byte per element */
#define FLT_PRED(name, e)                                                      \
  static void name##_f32(KARGS) {                                              \
    uint8_t *y = o; const float *A = in[0]; (void)p;                           \
    for (size_t i = 0; i < n; i++) { float a = A[i]; y[i] = (uint8_t)(e); }   \
  }                                                                            \
  static void name##_f64(KARGS) {                                              \
    uint8_t *y = o; const double *A = in[0]; (void)p;                          \
    for (size_t i = 0; i < n; i++) { double a = A[i]; y[i] = (uint8_t)(e); }  \
  }

/* IEEE-754 maximum/minimum: NaN if either is NaN, -0 < +0 (spec 'maximum', 'minimum') */
#define FMAX(a, b) ((a) != (a) ? (a) : (b) != (b) ? (b) : (a) > (b) ? (a) : (b) > (a) ? (b) : (signbit(a) ? (b) : (a)))
#define FMIN(a, b) ((a) != (a) ? (a) : (b) != (b) ? (b) : (a) < (b) ? (a) : (b) < (a) ? (b) : (signbit(a) ? (a) : (b)))
/* spec 'sign' for floats: NaN -> NaN, +-0 -> +-0, else +-1 */
#define FSIGN(a, one) ((a) != (a) ? (a) : (a) > 0 ? (one) : (a) < 0 ? -(one) : (a))

FLT_BIN(fadd, a + b, a + b)
FLT_BIN(fsub, a - b, a - b)
FLT_BIN(fmul, a * b, a * b)
FLT_BIN(fdiv, a / b, a / b)
FLT_BIN(frem, fmodf(a, b), fmod(a, b))
FLT_BIN(fmax_, FMAX(a, b), FMAX(a, b))
FLT_BIN(fmin_, FMIN(a, b), FMIN(a, b))
FLT_BIN(fpow, VIA_D2(pow), pow(a, b))
FLT_BIN(fatan2, VIA_D2(atan2), atan2(a, b))
FLT_BIN(fnextafter, nextafterf(a, b), nextafter(a, b))
FLT_BIN(fzeta, VIA_D2(lm_zeta), lm_zeta(a, b))
FLT_BIN(fpolygamma, VIA_D2(lm_polygamma), lm_polygamma(a, b))

FLT_UN(fneg, -a, -a)
FLT_UN(fabs_, fabsf(a), fabs(a))
FLT_UN(fsign, FSIGN(a, 1.0f), FSIGN(a, 1.0))
FLT_UN(fceil, ceilf(a), ceil(a))
FLT_UN(ffloor, floorf(a), floor(a))
FLT_UN(fround_afz, roundf(a), round(a))
FLT_UN(fround_even, rintf(a), rint(a))
FLT_UN(fsqrt, sqrtf(a), sqrt(a))
FLT_UN(frsqrt, (float)(1.0 / sqrt((double)a)), 1.0 / sqrt(a))
FLT_UN(fcbrt, VIA_D(cbrt), cbrt(a))
FLT_UN(fexpm1, VIA_D(expm1), expm1(a))
FLT_UN(flog1p, VIA_D(log1p), log1p(a))
FLT_UN(fsin, VIA_D(sin), sin(a))
FLT_UN(fcos, VIA_D(cos), cos(a))
FLT_UN(ftan, VIA_D(tan), tan(a))
FLT_UN(facos, VIA_D(acos), acos(a))
FLT_UN(facosh, VIA_D(acosh), acosh(a))
FLT_UN(fasin, VIA_D(asin), asin(a))
FLT_UN(fasinh, VIA_D(asinh), asinh(a))
FLT_UN(fatan, VIA_D(atan), atan(a))
FLT_UN(fatanh, VIA_D(atanh), atanh(a))
/* chlo.sinh / chlo.cosh as CHLO decomposes them (and XLA therefore computes them), op by op in
 * the element type: sinh = |x| < 1 ? (m + m / (m + 1)) / 2 with m = expm1(x)
 *                                   : exp(x + log(1/2)) - exp(log(1/2) - x),
 * cosh = exp(x + log(1/2)) + exp(log(1/2) - x). Their results differ from the exact values by a
 * few ULP in the same way XLA's do. */
static float sinh32(float x) {
  const float lh = -0.693147182f; /* log(0.5f) */
  if (fabsf(x) < 1.0f) {
    float m = (float)expm1((double)x), d = m + 1.0f, r = m / d, s = m + r;
    return 0.5f * s;
  }
  float p = x + lh, q = lh - x;
  return lm_exp_f32(p) - lm_exp_f32(q);
}
static double sinh64(double x) {
  const double lh = -0.69314718055994530942;
  if (fabs(x) < 1.0) {
    double m = expm1(x), d = m + 1.0, r = m / d, s = m + r;
    return 0.5 * s;
  }
  return exp(x + lh) - exp(lh - x);
}
static float cosh32(float x) {
  const float lh = -0.693147182f;
  float p = x + lh, q = lh - x;
  return lm_exp_f32(p) + lm_exp_f32(q);
}
static double cosh64(double x) {
  const double lh = -0.69314718055994530942;
  return exp(x + lh) + exp(lh - x);
}
FLT_UN(fcosh, cosh32(a), cosh64(a))
FLT_UN(fsinh, sinh32(a), sinh64(a))
FLT_UN(ferf, VIA_D(erf), erf(a))
FLT_UN(ferfc, VIA_D(erfc), erfc(a))
FLT_UN(ferfinv, VIA_D(lm_erfinv), lm_erfinv(a))
FLT_UN(flgamma, VIA_D(lm_lgamma), lm_lgamma(a))
FLT_UN(fdigamma, VIA_D(lm_digamma), lm_digamma(a))
FLT_UN(fi1e, VIA_D(lm_bessel_i1e), lm_bessel_i1e(a))
FLT_UN(fsquare, a * a, a * a)
FLT_UN(fcopy, a, a)
FLT_UN(fzero, ((void)a, 0.0f), ((void)a, 0.0))
FLT_PRED(fisfinite, isfinite(a) != 0)
FLT_PRED(fisinf, isinf(a) != 0)
FLT_PRED(fisposinf, a == INFINITY)
FLT_PRED(fisneginf, a == -INFINITY)

/* the vectorized double-evaluated f32 functions */
static void fexp_f32(KARGS) { (void)p; lm_vexp_f32(o, in[0], n); }
static void ftanh_f32(KARGS) { (void)p; lm_vtanh_f32(o, in[0], n); }
static void flogistic_f32(KARGS) { (void)p; lm_vlogistic_f32(o, in[0], n); }
static void flog_f32(KARGS) { (void)p; lm_vlog_f32(o, in[0], n); }
static double logistic_d(double a) { return 1.0 / (1.0 + exp(-a)); }
static void fexp_f64(KARGS) { double *y = o; const double *A = in[0]; (void)p; for (size_t i = 0; i < n; i++) y[i] = exp(A[i]); }
static void ftanh_f64(KARGS) { double *y = o; const double *A = in[0]; (void)p; for (size_t i = 0; i < n; i++) y[i] = tanh(A[i]); }
static void flogistic_f64(KARGS) { double *y = o; const double *A = in[0]; (void)p; for (size_t i = 0; i < n; i++) y[i] = logistic_d(A[i]); }
static void flog_f64(KARGS) { double *y = o; const double *A = in[0]; (void)p; for (size_t i = 0; i < n; i++) y[i] = log(A[i]); }

static void fclamp_f32(KARGS) {
  float *y = o; const float *L = in[0], *X = in[1], *H = in[2]; (void)p;
  for (size_t i = 0; i < n; i++) { float v = FMAX(X[i], L[i]); y[i] = FMIN(v, H[i]); }
}
static void fclamp_f64(KARGS) {
  double *y = o; const double *L = in[0], *X = in[1], *H = in[2]; (void)p;
  for (size_t i = 0; i < n; i++) { double v = FMAX(X[i], L[i]); y[i] = FMIN(v, H[i]); }
}

/* compare: FLOAT uses IEEE quiet comparisons; TOTALORDER orders by the sign-magnitude bits
 * turned into two's complement keys (-NaN < -inf < ... < -0 < +0 < ... < +inf < +NaN). */
static inline int32_t tkey32(float f) { int32_t i; memcpy(&i, &f, 4); return i < 0 ? (int32_t)(i ^ INT32_MAX) : i; }
static inline int64_t tkey64(double f) { int64_t i; memcpy(&i, &f, 8); return i < 0 ? (int64_t)(i ^ INT64_MAX) : i; }
static void fcmp_f32(KARGS) {
  if (p->cmp == LM_CMPT_TOTALORDER) { CMP_LOOPS(float, tkey32) }
  else { CMP_LOOPS(float, IDKEY) }
}
static void fcmp_f64(KARGS) {
  if (p->cmp == LM_CMPT_TOTALORDER) { CMP_LOOPS(double, tkey64) }
  else { CMP_LOOPS(double, IDKEY) }
}

/* reduce_precision on the native bits of each format */
static void frp_f32(KARGS) {
  uint32_t *y = o; const uint32_t *A = in[0];
  for (size_t i = 0; i < n; i++) y[i] = (uint32_t)lm_reduce_precision_bits(A[i], 8, 23, p->ebits, p->mbits);
}
static void frp_f64(KARGS) {
  uint64_t *y = o; const uint64_t *A = in[0];
  for (size_t i = 0; i < n; i++) y[i] = lm_reduce_precision_bits(A[i], 11, 52, p->ebits, p->mbits);
}
static void frp_f16(KARGS) {
  uint16_t *y = o; const uint16_t *A = in[0];
  for (size_t i = 0; i < n; i++) y[i] = (uint16_t)lm_reduce_precision_bits(A[i], 5, 10, p->ebits, p->mbits);
}
static void frp_bf16(KARGS) {
  uint16_t *y = o; const uint16_t *A = in[0];
  for (size_t i = 0; i < n; i++) y[i] = (uint16_t)lm_reduce_precision_bits(A[i], 8, 7, p->ebits, p->mbits);
}
static void fnextafter_f16(KARGS) {
  uint16_t *y = o; const uint16_t *A = in[0], *B = in[1]; (void)p;
  for (size_t i = 0; i < n; i++) y[i] = lm_nextafter16(A[i], B[i], 5, 10);
}
static void fnextafter_bf16(KARGS) {
  uint16_t *y = o; const uint16_t *A = in[0], *B = in[1]; (void)p;
  for (size_t i = 0; i < n; i++) y[i] = lm_nextafter16(A[i], B[i], 8, 7);
}

/* f16/bf16: widen each operand chunk to f32, run the f32 kernel, round the result back */
#define WCHUNK 256
static void widen16(KARGS) {
  bool is_bf = p->in_dtype == LOOM_DTYPE_BF16;
  bool out16 = p->out_dtype == LOOM_DTYPE_F16 || p->out_dtype == LOOM_DTYPE_BF16;
  bool out_bf = p->out_dtype == LOOM_DTYPE_BF16;
  size_t osz = lm_dtype_size(p->out_dtype);
  float buf[LM_EW_MAXIN][WCHUNK], res[WCHUNK];
  for (size_t s = 0; s < n; s += WCHUNK) {
    size_t m = n - s < WCHUNK ? n - s : WCHUNK;
    const void *args[LM_EW_MAXIN];
    for (int k = 0; k < p->nin; k++) {
      const uint16_t *x = (const uint16_t *)in[k] + s;
      if (is_bf) for (size_t i = 0; i < m; i++) buf[k][i] = lm_bf16_to_f32(x[i]);
      else for (size_t i = 0; i < m; i++) buf[k][i] = lm_f16_to_f32(x[i]);
      args[k] = buf[k];
    }
    if (out16) {
      p->fn32(res, args, m, p);
      uint16_t *y = (uint16_t *)o + s;
      if (out_bf) for (size_t i = 0; i < m; i++) y[i] = lm_f32_to_bf16(res[i]);
      else for (size_t i = 0; i < m; i++) y[i] = lm_f32_to_f16(res[i]);
    } else {
      p->fn32((char *)o + s * osz, args, m, p);
    }
  }
}

/* ---- complex ----
 * Arithmetic in the element's own precision; functions evaluated in double and rounded. */
#define CPX_UN(name, e)                                                                \
  static void name##_c64(KARGS) {                                                      \
    c64_t *y = o; const c64_t *A = in[0]; (void)p;                                     \
    for (size_t i = 0; i < n; i++) { c128_t a = A[i]; y[i] = (c64_t)(e); }             \
  }                                                                                    \
  static void name##_c128(KARGS) {                                                     \
    c128_t *y = o; const c128_t *A = in[0]; (void)p;                                   \
    for (size_t i = 0; i < n; i++) { c128_t a = A[i]; y[i] = (e); }                    \
  }
#define CPX_BIN_NATIVE(name, e)                                                        \
  static void name##_c64(KARGS) {                                                      \
    c64_t *y = o; const c64_t *A = in[0], *B = in[1]; (void)p;                         \
    for (size_t i = 0; i < n; i++) { c64_t a = A[i], b = B[i]; y[i] = (e); }           \
  }                                                                                    \
  static void name##_c128(KARGS) {                                                     \
    c128_t *y = o; const c128_t *A = in[0], *B = in[1]; (void)p;                       \
    for (size_t i = 0; i < n; i++) { c128_t a = A[i], b = B[i]; y[i] = (e); }          \
  }
#define CPX_BIN(name, e)                                                               \
  static void name##_c64(KARGS) {                                                      \
    c64_t *y = o; const c64_t *A = in[0], *B = in[1]; (void)p;                         \
    for (size_t i = 0; i < n; i++) { c128_t a = A[i], b = B[i]; y[i] = (c64_t)(e); }   \
  }                                                                                    \
  static void name##_c128(KARGS) {                                                     \
    c128_t *y = o; const c128_t *A = in[0], *B = in[1]; (void)p;                       \
    for (size_t i = 0; i < n; i++) { c128_t a = A[i], b = B[i]; y[i] = (e); }          \
  }
/* real-valued results of complex operands (abs, real, imag) */
#define CPX_TO_REAL(name, e)                                                           \
  static void name##_c64(KARGS) {                                                      \
    float *y = o; const c64_t *A = in[0]; (void)p;                                     \
    for (size_t i = 0; i < n; i++) { c128_t a = A[i]; y[i] = (float)(e); }             \
  }                                                                                    \
  static void name##_c128(KARGS) {                                                     \
    double *y = o; const c128_t *A = in[0]; (void)p;                                   \
    for (size_t i = 0; i < n; i++) { c128_t a = A[i]; y[i] = (e); }                    \
  }

CPX_BIN_NATIVE(cadd, a + b)
CPX_BIN_NATIVE(csub, a - b)
CPX_BIN_NATIVE(cmul, a * b)
CPX_BIN_NATIVE(cdiv, a / b)
CPX_BIN(cpow, lm_cpow(a, b))
CPX_BIN(catan2, lm_catan2(a, b))
CPX_UN(cneg, -a)
CPX_UN(cconj, conj(a))
CPX_UN(csign, lm_csign(a))
CPX_UN(cexp, lm_cexp(a))
CPX_UN(cexpm1, lm_cexpm1(a))
CPX_UN(clog, lm_clog(a))
CPX_UN(clog1p, lm_clog1p(a))
CPX_UN(clogistic, lm_clogistic(a))
CPX_UN(csqrt, lm_csqrt(a))
CPX_UN(crsqrt, lm_crsqrt(a))
CPX_UN(ccbrt, lm_ccbrt(a))
CPX_UN(csin, csin(a))
CPX_UN(ccos, ccos(a))
CPX_UN(ctan, ctan(a))
CPX_UN(ctanh, ctanh(a))
CPX_UN(cacos, cacos(a))
CPX_UN(cacosh, cacosh(a))
CPX_UN(casin, casin(a))
CPX_UN(casinh, casinh(a))
CPX_UN(catan, catan(a))
CPX_UN(catanh, catanh(a))
CPX_UN(ccosh, cexp(a + log(0.5)) + cexp(log(0.5) - a))
CPX_UN(csinh, cexp(a + log(0.5)) - cexp(log(0.5) - a))
CPX_TO_REAL(cabs, hypot(creal(a), cimag(a)))
CPX_TO_REAL(creal_, creal(a))
CPX_TO_REAL(cimag_, cimag(a))

static void csquare_c64(KARGS) { c64_t *y = o; const c64_t *A = in[0]; (void)p; for (size_t i = 0; i < n; i++) y[i] = A[i] * A[i]; }
static void csquare_c128(KARGS) { c128_t *y = o; const c128_t *A = in[0]; (void)p; for (size_t i = 0; i < n; i++) y[i] = A[i] * A[i]; }

/* lexicographic order on (real, imag) for compare/max/min/clamp (spec 'compare', 'maximum') */
#define CLESS(a, b) (creal(a) < creal(b) || (creal(a) == creal(b) && cimag(a) < cimag(b)))
#define CEQ(a, b) (creal(a) == creal(b) && cimag(a) == cimag(b))
#define CPX_CMP(sfx, T)                                                              \
  static void ccmp_##sfx(KARGS) {                                                    \
    uint8_t *y = o; const T *A = in[0], *B = in[1];                                  \
    for (size_t i = 0; i < n; i++) {                                                 \
      T a = A[i], b = B[i];                                                          \
      bool r;                                                                        \
      switch (p->dir) {                                                              \
        case LM_CMP_EQ: r = CEQ(a, b); break;                                        \
        case LM_CMP_NE: r = !CEQ(a, b); break;                                       \
        case LM_CMP_GE: r = CLESS(b, a) || CEQ(a, b); break;                         \
        case LM_CMP_GT: r = CLESS(b, a); break;                                      \
        case LM_CMP_LE: r = CLESS(a, b) || CEQ(a, b); break;                         \
        default: r = CLESS(a, b); break;                                             \
      }                                                                              \
      y[i] = r;                                                                      \
    }                                                                                \
  }                                                                                  \
  static void cmax_##sfx(KARGS) {                                                    \
    T *y = o; const T *A = in[0], *B = in[1]; (void)p;                               \
    for (size_t i = 0; i < n; i++) y[i] = CLESS(A[i], B[i]) ? B[i] : A[i];           \
  }                                                                                  \
  static void cmin_##sfx(KARGS) {                                                    \
    T *y = o; const T *A = in[0], *B = in[1]; (void)p;                               \
    for (size_t i = 0; i < n; i++) y[i] = CLESS(B[i], A[i]) ? B[i] : A[i];           \
  }                                                                                  \
  static void cclamp_##sfx(KARGS) {                                                  \
    T *y = o; const T *L = in[0], *X = in[1], *H = in[2]; (void)p;                   \
    for (size_t i = 0; i < n; i++) {                                                 \
      T v = CLESS(X[i], L[i]) ? L[i] : X[i];                                         \
      y[i] = CLESS(H[i], v) ? H[i] : v;                                              \
    }                                                                                \
  }
CPX_CMP(c64, c64_t)
CPX_CMP(c128, c128_t)

/* complex(lhs, rhs) (spec 'complex') */
static void mkcomplex_f32(KARGS) {
  float *y = o; const float *A = in[0], *B = in[1]; (void)p;
  for (size_t i = 0; i < n; i++) { y[2 * i] = A[i]; y[2 * i + 1] = B[i]; }
}
static void mkcomplex_f64(KARGS) {
  double *y = o; const double *A = in[0], *B = in[1]; (void)p;
  for (size_t i = 0; i < n; i++) { y[2 * i] = A[i]; y[2 * i + 1] = B[i]; }
}

/* select(pred, on_true, on_false) by element size (spec 'select') */
#define SEL(bytes, T)                                                            \
  static void sel_##bytes(KARGS) {                                               \
    T *y = o; const uint8_t *c = in[0]; const T *a = in[1], *b = in[2]; (void)p; \
    for (size_t i = 0; i < n; i++) y[i] = c[i] ? a[i] : b[i];                    \
  }
typedef struct { uint64_t lo, hi; } u128_t;
SEL(1, uint8_t)
SEL(2, uint16_t)
SEL(4, uint32_t)
SEL(8, uint64_t)
SEL(16, u128_t)

/* byte copies (same-size bitcast_convert, identity ops) */
#define COPY(bytes, T) \
  static void copy_##bytes(KARGS) { T *y = o; const T *a = in[0]; (void)p; for (size_t i = 0; i < n; i++) y[i] = a[i]; }
COPY(1, uint8_t)
COPY(2, uint16_t)
COPY(4, uint32_t)
COPY(8, uint64_t)
COPY(16, u128_t)

static void convert_any(KARGS) { lm_convert_array(o, (lm_dtype)p->out_dtype, in[0], (lm_dtype)p->in_dtype, n); }

/* ---- the table ---- */

enum { OUT_SAME = 0, OUT_PRED, OUT_REAL, OUT_COMPLEX };

typedef struct ew_entry {
  lm_ew_fn pred;
  lm_ew_fn ints[8];   /* s8 s16 s32 s64 u8 u16 u32 u64 */
  lm_ew_fn f32, f64;  /* f16/bf16 go through widen16 -> f32 unless given below */
  lm_ew_fn f16, bf16;
  lm_ew_fn c64, c128;
  uint8_t out;        /* OUT_*: result element type relative to the operand's */
  uint8_t nin;
} ew_entry;

#define F(name) .f32 = name##_f32, .f64 = name##_f64
#define C(name) .c64 = name##_c64, .c128 = name##_c128
#define INTS(name) .ints = INT_TAB(name)

static const ew_entry g_tab[LM_OP_COUNT] = {
  [LM_OP_ADD] = {.pred = pred_or, INTS(iadd), F(fadd), C(cadd), .nin = 2},
  [LM_OP_SUBTRACT] = {INTS(isub), F(fsub), C(csub), .nin = 2},
  [LM_OP_MULTIPLY] = {.pred = pred_and, INTS(imul), F(fmul), C(cmul), .nin = 2},
  [LM_OP_DIVIDE] = {INTS(idiv), F(fdiv), C(cdiv), .nin = 2},
  [LM_OP_REMAINDER] = {INTS(irem), F(frem), .nin = 2},
  [LM_OP_POWER] = {INTS(ipow), F(fpow), C(cpow), .nin = 2},
  [LM_OP_MAXIMUM] = {.pred = pred_or, INTS(imax), F(fmax_), .c64 = cmax_c64, .c128 = cmax_c128, .nin = 2},
  [LM_OP_MINIMUM] = {.pred = pred_and, INTS(imin), F(fmin_), .c64 = cmin_c64, .c128 = cmin_c128, .nin = 2},
  [LM_OP_ATAN2] = {F(fatan2), C(catan2), .nin = 2},
  [LM_OP_AND] = {.pred = pred_and, INTS(iand), .nin = 2},
  [LM_OP_OR] = {.pred = pred_or, INTS(ior), .nin = 2},
  [LM_OP_XOR] = {.pred = pred_xor, INTS(ixor), .nin = 2},
  [LM_OP_SHIFT_LEFT] = {INTS(ishl), .nin = 2},
  [LM_OP_SHIFT_RIGHT_LOGICAL] = {INTS(ishrl), .nin = 2},
  [LM_OP_SHIFT_RIGHT_ARITHMETIC] = {INTS(ishra), .nin = 2},
  [LM_OP_COMPARE] = {.pred = pred_cmp, INTS(icmp), F(fcmp), .c64 = ccmp_c64, .c128 = ccmp_c128, .out = OUT_PRED, .nin = 2},
  [LM_OP_COMPLEX] = {F(mkcomplex), .out = OUT_COMPLEX, .nin = 2},
  [LM_OP_CHLO_MULHI] = {INTS(imulhi), .nin = 2},
  [LM_OP_CHLO_NEXT_AFTER] = {F(fnextafter), .f16 = fnextafter_f16, .bf16 = fnextafter_bf16, .nin = 2},
  [LM_OP_CHLO_POLYGAMMA] = {F(fpolygamma), .nin = 2},
  [LM_OP_CHLO_ZETA] = {F(fzeta), .nin = 2},
  [LM_OP_CLAMP] = {.pred = pred_clamp, INTS(iclamp), F(fclamp), .c64 = cclamp_c64, .c128 = cclamp_c128, .nin = 3},

  [LM_OP_ABS] = {INTS(iabs), F(fabs_), C(cabs), .out = OUT_REAL, .nin = 1},
  [LM_OP_NEGATE] = {INTS(ineg), F(fneg), C(cneg), .nin = 1},
  [LM_OP_SIGN] = {INTS(isign), F(fsign), C(csign), .nin = 1},
  [LM_OP_NOT] = {.pred = pred_not, INTS(inot), .nin = 1},
  [LM_OP_COUNT_LEADING_ZEROS] = {INTS(iclz), .nin = 1},
  [LM_OP_POPCNT] = {INTS(ipopcnt), .nin = 1},
  [LM_OP_CEIL] = {F(fceil), .nin = 1},
  [LM_OP_FLOOR] = {F(ffloor), .nin = 1},
  [LM_OP_ROUND_NEAREST_AFZ] = {F(fround_afz), .nin = 1},
  [LM_OP_ROUND_NEAREST_EVEN] = {F(fround_even), .nin = 1},
  [LM_OP_IS_FINITE] = {F(fisfinite), .out = OUT_PRED, .nin = 1},
  [LM_OP_CHLO_IS_INF] = {F(fisinf), .out = OUT_PRED, .nin = 1},
  [LM_OP_CHLO_IS_POS_INF] = {F(fisposinf), .out = OUT_PRED, .nin = 1},
  [LM_OP_CHLO_IS_NEG_INF] = {F(fisneginf), .out = OUT_PRED, .nin = 1},
  [LM_OP_EXPONENTIAL] = {F(fexp), C(cexp), .nin = 1},
  [LM_OP_EXPONENTIAL_MINUS_ONE] = {F(fexpm1), C(cexpm1), .nin = 1},
  [LM_OP_LOG] = {F(flog), C(clog), .nin = 1},
  [LM_OP_LOG_PLUS_ONE] = {F(flog1p), C(clog1p), .nin = 1},
  [LM_OP_LOGISTIC] = {F(flogistic), C(clogistic), .nin = 1},
  [LM_OP_SQRT] = {F(fsqrt), C(csqrt), .nin = 1},
  [LM_OP_RSQRT] = {F(frsqrt), C(crsqrt), .nin = 1},
  [LM_OP_CBRT] = {F(fcbrt), C(ccbrt), .nin = 1},
  [LM_OP_SINE] = {F(fsin), C(csin), .nin = 1},
  [LM_OP_COSINE] = {F(fcos), C(ccos), .nin = 1},
  [LM_OP_TAN] = {F(ftan), C(ctan), .nin = 1},
  [LM_OP_CHLO_TAN] = {F(ftan), C(ctan), .nin = 1},
  [LM_OP_TANH] = {F(ftanh), C(ctanh), .nin = 1},
  [LM_OP_CHLO_ACOS] = {F(facos), C(cacos), .nin = 1},
  [LM_OP_CHLO_ACOSH] = {F(facosh), C(cacosh), .nin = 1},
  [LM_OP_CHLO_ASIN] = {F(fasin), C(casin), .nin = 1},
  [LM_OP_CHLO_ASINH] = {F(fasinh), C(casinh), .nin = 1},
  [LM_OP_CHLO_ATAN] = {F(fatan), C(catan), .nin = 1},
  [LM_OP_CHLO_ATANH] = {F(fatanh), C(catanh), .nin = 1},
  [LM_OP_CHLO_COSH] = {F(fcosh), C(ccosh), .nin = 1},
  [LM_OP_CHLO_SINH] = {F(fsinh), C(csinh), .nin = 1},
  [LM_OP_CHLO_ERF] = {F(ferf), .nin = 1},
  [LM_OP_CHLO_ERFC] = {F(ferfc), .nin = 1},
  [LM_OP_CHLO_ERF_INV] = {F(ferfinv), .nin = 1},
  [LM_OP_CHLO_LGAMMA] = {F(flgamma), .nin = 1},
  [LM_OP_CHLO_DIGAMMA] = {F(fdigamma), .nin = 1},
  [LM_OP_CHLO_BESSEL_I1E] = {F(fi1e), .nin = 1},
  [LM_OP_CHLO_CONJ] = {F(fcopy), C(cconj), .nin = 1},
  [LM_OP_CHLO_SQUARE] = {INTS(isquare), F(fsquare), .c64 = csquare_c64, .c128 = csquare_c128, .nin = 1},
  [LM_OP_REAL] = {F(fcopy), C(creal_), .out = OUT_REAL, .nin = 1},
  [LM_OP_IMAG] = {F(fzero), C(cimag_), .out = OUT_REAL, .nin = 1},
  [LM_OP_REDUCE_PRECISION] = {F(frp), .f16 = frp_f16, .bf16 = frp_bf16, .nin = 1},
};

bool lm_ew_is_elementwise(lm_opcode code) {
  code = lm_ew_plain_code(code);
  if ((unsigned)code >= LM_OP_COUNT) return false;
  if (code == LM_OP_SELECT || code == LM_OP_CONVERT) return true;
  return g_tab[code].nin != 0;
}

lm_opcode lm_ew_plain_code(lm_opcode code) {
  switch (code) {
    case LM_OP_CHLO_BROADCAST_ADD: return LM_OP_ADD;
    case LM_OP_CHLO_BROADCAST_AND: return LM_OP_AND;
    case LM_OP_CHLO_BROADCAST_ATAN2: return LM_OP_ATAN2;
    case LM_OP_CHLO_BROADCAST_COMPARE: return LM_OP_COMPARE;
    case LM_OP_CHLO_BROADCAST_COMPLEX: return LM_OP_COMPLEX;
    case LM_OP_CHLO_BROADCAST_DIVIDE: return LM_OP_DIVIDE;
    case LM_OP_CHLO_BROADCAST_MAXIMUM: return LM_OP_MAXIMUM;
    case LM_OP_CHLO_BROADCAST_MINIMUM: return LM_OP_MINIMUM;
    case LM_OP_CHLO_BROADCAST_MULTIPLY: return LM_OP_MULTIPLY;
    case LM_OP_CHLO_BROADCAST_NEXT_AFTER: return LM_OP_CHLO_NEXT_AFTER;
    case LM_OP_CHLO_BROADCAST_OR: return LM_OP_OR;
    case LM_OP_CHLO_BROADCAST_POLYGAMMA: return LM_OP_CHLO_POLYGAMMA;
    case LM_OP_CHLO_BROADCAST_POWER: return LM_OP_POWER;
    case LM_OP_CHLO_BROADCAST_REMAINDER: return LM_OP_REMAINDER;
    case LM_OP_CHLO_BROADCAST_SELECT: return LM_OP_SELECT;
    case LM_OP_CHLO_BROADCAST_SHIFT_LEFT: return LM_OP_SHIFT_LEFT;
    case LM_OP_CHLO_BROADCAST_SHIFT_RIGHT_ARITHMETIC: return LM_OP_SHIFT_RIGHT_ARITHMETIC;
    case LM_OP_CHLO_BROADCAST_SHIFT_RIGHT_LOGICAL: return LM_OP_SHIFT_RIGHT_LOGICAL;
    case LM_OP_CHLO_BROADCAST_SUBTRACT: return LM_OP_SUBTRACT;
    case LM_OP_CHLO_BROADCAST_XOR: return LM_OP_XOR;
    case LM_OP_CHLO_BROADCAST_ZETA: return LM_OP_CHLO_ZETA;
    default: return code;
  }
}

static int parse_dir(const char *s) {
  static const char *names[] = {"EQ", "NE", "GE", "GT", "LE", "LT"};
  for (int i = 0; i < 6; i++)
    if (s && strcmp(s, names[i]) == 0) return i;
  return -1;
}

static int parse_cmp_type(const char *s) {
  if (!s) return LM_CMPT_NONE;
  if (strcmp(s, "FLOAT") == 0) return LM_CMPT_FLOAT;
  if (strcmp(s, "TOTALORDER") == 0) return LM_CMPT_TOTALORDER;
  if (strcmp(s, "SIGNED") == 0) return LM_CMPT_SIGNED;
  if (strcmp(s, "UNSIGNED") == 0) return LM_CMPT_UNSIGNED;
  return -1;
}

static lm_dtype real_of(lm_dtype t) {
  return t == LOOM_DTYPE_C64 ? LOOM_DTYPE_F32 : t == LOOM_DTYPE_C128 ? LOOM_DTYPE_F64 : t;
}

static lm_ew_fn by_size(size_t sz, bool select) {
  switch (sz) {
    case 1: return select ? sel_1 : copy_1;
    case 2: return select ? sel_2 : copy_2;
    case 4: return select ? sel_4 : copy_4;
    case 8: return select ? sel_8 : copy_8;
    case 16: return select ? sel_16 : copy_16;
    default: return NULL;
  }
}

static int unsupported(lm_err *err, const lm_op *op, lm_opcode code, lm_dtype t, const char *why) {
  const char *name = op ? op->name : lm_opcode_name(code);
  if (op)
    return lm_op_err(err, op, LOOM_UNSUPPORTED, "element type %s is not supported%s%s", lm_dtype_name(t),
                     why ? ": " : "", why ? why : "");
  return lm_errf(err, LOOM_UNSUPPORTED, "%s: element type %s is not supported%s%s", name, lm_dtype_name(t),
                 why ? ": " : "", why ? why : "");
}

int lm_ew_make(lm_opcode code, int nin, const lm_dtype *in, lm_dtype out, const lm_op *attr_op, lm_ew_inst *inst,
               lm_err *err) {
  memset(inst, 0, sizeof *inst);
  code = lm_ew_plain_code(code);
  inst->code = (uint16_t)code;
  inst->nin = (uint8_t)nin;
  inst->in_dtype = (uint8_t)in[0];
  inst->in2_dtype = (uint8_t)(nin > 1 ? in[1] : in[0]);
  inst->out_dtype = (uint8_t)out;
  lm_dtype t = in[0];
  if (code == LM_OP_CONVERT) {
    if (nin != 1) return lm_errf(err, LOOM_VERIFY, "convert takes one operand");
    inst->fn = convert_any;
    return 0;
  }
  if (code == LM_OP_BITCAST_CONVERT) {
    if (lm_dtype_size(t) != lm_dtype_size(out) || lm_dtype_is_complex(t) != lm_dtype_is_complex(out))
      return unsupported(err, attr_op, code, t, "element sizes differ");
    inst->fn = by_size(lm_dtype_size(t), false);
    return 0;
  }
  if (code == LM_OP_SELECT) {
    if (nin != 3 || in[0] != LOOM_DTYPE_PRED || in[1] != in[2] || out != in[1])
      return lm_errf(err, LOOM_VERIFY, "select needs (i1, T, T) -> T operands");
    inst->in_dtype = (uint8_t)in[1];
    inst->fn = by_size(lm_dtype_size(in[1]), true);
    return inst->fn ? 0 : unsupported(err, attr_op, code, in[1], NULL);
  }
  if ((unsigned)code >= LM_OP_COUNT || g_tab[code].nin == 0)
    return lm_errf(err, LOOM_UNSUPPORTED, "%s is not an elementwise op", lm_opcode_name(code));
  const ew_entry *e = &g_tab[code];
  if (e->nin != nin) return lm_errf(err, LOOM_VERIFY, "%s takes %d operands, %d given", lm_opcode_name(code), e->nin, nin);
  for (int k = 1; k < nin; k++)
    if (in[k] != t)
      return lm_errf(err, LOOM_VERIFY, "%s: operands have different element types (%s, %s)", lm_opcode_name(code),
                     lm_dtype_name(t), lm_dtype_name(in[k]));
  /* result element type */
  lm_dtype want = t;
  if (e->out == OUT_PRED) want = LOOM_DTYPE_PRED;
  else if (e->out == OUT_REAL) want = real_of(t);
  else if (e->out == OUT_COMPLEX) want = t == LOOM_DTYPE_F32 ? LOOM_DTYPE_C64 : t == LOOM_DTYPE_F64 ? LOOM_DTYPE_C128 : LOOM_DTYPE_INVALID;
  if (want == LOOM_DTYPE_INVALID) return unsupported(err, attr_op, code, t, NULL);
  if (out != want)
    return lm_errf(err, LOOM_VERIFY, "%s: result element type %s, expected %s", lm_opcode_name(code), lm_dtype_name(out),
                   lm_dtype_name(want));
  if (code == LM_OP_COMPARE) {
    const lm_attr *d = attr_op ? lm_op_attr(attr_op, "comparison_direction") : NULL;
    int dir = d ? parse_dir(d->s) : -1;
    if (dir < 0) return lm_errf(err, LOOM_VERIFY, "compare needs a comparison_direction (EQ, NE, GE, GT, LE, LT)");
    const lm_attr *ct = attr_op ? lm_op_attr(attr_op, "compare_type") : NULL;
    int cmp = parse_cmp_type(ct ? ct->s : NULL);
    if (cmp < 0) return lm_errf(err, LOOM_VERIFY, "unknown compare_type '%s'", ct->s ? ct->s : "");
    if (cmp == LM_CMPT_TOTALORDER && !lm_dtype_is_float(t))
      return lm_errf(err, LOOM_VERIFY, "compare_type TOTALORDER needs a floating-point operand, got %s", lm_dtype_name(t));
    inst->dir = (uint8_t)dir;
    inst->cmp = (uint8_t)cmp;
  }
  if (code == LM_OP_REDUCE_PRECISION) {
    int64_t eb = lm_attr_int_or(attr_op ? lm_op_attr(attr_op, "exponent_bits") : NULL, -1);
    int64_t mb = lm_attr_int_or(attr_op ? lm_op_attr(attr_op, "mantissa_bits") : NULL, -1);
    if (eb < 1 || mb < 0 || eb > 64 || mb > 64)
      return lm_errf(err, LOOM_VERIFY, "reduce_precision needs exponent_bits >= 1 and mantissa_bits >= 0");
    inst->ebits = (int32_t)eb;
    inst->mbits = (int32_t)mb;
  }
  lm_ew_fn fn = NULL;
  switch (t) {
    case LOOM_DTYPE_PRED: fn = e->pred; break;
    case LOOM_DTYPE_S8: case LOOM_DTYPE_S16: case LOOM_DTYPE_S32: case LOOM_DTYPE_S64:
    case LOOM_DTYPE_U8: case LOOM_DTYPE_U16: case LOOM_DTYPE_U32: case LOOM_DTYPE_U64:
      fn = e->ints[t - LOOM_DTYPE_S8];
      break;
    case LOOM_DTYPE_F32: fn = e->f32; break;
    case LOOM_DTYPE_F64: fn = e->f64; break;
    case LOOM_DTYPE_F16: case LOOM_DTYPE_BF16: {
      lm_ew_fn native = t == LOOM_DTYPE_F16 ? e->f16 : e->bf16;
      if (native) fn = native;
      else if (e->f32) { fn = widen16; inst->fn32 = e->f32; }
      break;
    }
    case LOOM_DTYPE_C64: fn = e->c64; break;
    case LOOM_DTYPE_C128: fn = e->c128; break;
    default: break;
  }
  if (code == LM_OP_COMPARE && lm_dtype_is_int(t)) {
    /* an explicit compare_type overrides the signedness of the element type */
    if (inst->cmp == LM_CMPT_UNSIGNED && lm_dtype_is_sint(t)) fn = e->ints[t - LOOM_DTYPE_S8 + 4];
    if (inst->cmp == LM_CMPT_SIGNED && lm_dtype_is_uint(t)) fn = e->ints[t - LOOM_DTYPE_U8];
  }
  if (!fn) return unsupported(err, attr_op, code, t, NULL);
  inst->fn = fn;
  return 0;
}
