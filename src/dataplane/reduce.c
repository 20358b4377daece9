/* Elementwise reductions for collectives: out = lhs op rhs for every element type the executor
 * has, with StableHLO's semantics for add, multiply, minimum, maximum, and, or, xor (spec
 * sections of those ops), and the caller's combine function for any other reduction body.
 * f16/bf16 are computed in f32 and rounded once per step, which is the exact IEEE result. */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "common/half.h"
#include "dataplane/dp_internal.h"

static const char *dp_op_name(lm_dp_op op) {
  switch (op) {
  case LM_DP_SUM: return "sum";
  case LM_DP_PROD: return "prod";
  case LM_DP_MIN: return "min";
  case LM_DP_MAX: return "max";
  case LM_DP_AND: return "and";
  case LM_DP_OR: return "or";
  case LM_DP_XOR: return "xor";
  case LM_DP_CUSTOM: return "custom";
  }
  return "?";
}

int lm_dp_reduction_check(const lm_dp_reduction *red, lm_err *err) {
  if (!red) return lm_errf(err, LOOM_INVALID_ARGUMENT, "data plane: no reduction given");
  if (!lm_dtype_valid(red->dtype))
    return lm_errf(err, LOOM_INVALID_ARGUMENT, "data plane: invalid element type %d", (int)red->dtype);
  if (red->op < LM_DP_SUM || red->op > LM_DP_CUSTOM)
    return lm_errf(err, LOOM_INVALID_ARGUMENT, "data plane: invalid reduction %d", (int)red->op);
  if (red->op == LM_DP_CUSTOM) {
    if (!red->combine) return lm_errf(err, LOOM_INVALID_ARGUMENT, "data plane: custom reduction without a function");
    return 0;
  }
  bool bitwise = red->op == LM_DP_AND || red->op == LM_DP_OR || red->op == LM_DP_XOR;
  if (bitwise && (lm_dtype_is_float(red->dtype) || lm_dtype_is_complex(red->dtype)))
    return lm_errf(err, LOOM_UNSUPPORTED, "data plane: reduction '%s' is not defined for %s", dp_op_name(red->op),
                   lm_dtype_name(red->dtype));
  return 0;
}

/* IEEE-754 (2019) maximum/minimum: a NaN operand gives NaN; -0 < +0. */
#define DP_FMAX(T, a, b)                                                                     \
  ((a) != (a) ? (a) : (b) != (b) ? (b)                                                       \
   : (a) == (b) ? (signbit(a) ? (b) : (a))                                                   \
   : (a) > (b)  ? (a)                                                                        \
                : (b))
#define DP_FMIN(T, a, b)                                                                     \
  ((a) != (a) ? (a) : (b) != (b) ? (b)                                                       \
   : (a) == (b) ? (signbit(a) ? (a) : (b))                                                   \
   : (a) < (b)  ? (a)                                                                        \
                : (b))

/* Integers: sum and product wrap (computed unsigned: signed overflow is undefined in C). */
#define DP_INT_KERNELS(T, U)                                                                 \
  static void dp_red_##T(lm_dp_op op, const T *a, const T *b, T *o, size_t n) {             \
    switch (op) {                                                                            \
    case LM_DP_SUM:                                                                          \
      for (size_t i = 0; i < n; i++) o[i] = (T)((U)a[i] + (U)b[i]);                          \
      break;                                                                                 \
    case LM_DP_PROD:                                                                         \
      for (size_t i = 0; i < n; i++) o[i] = (T)((U)a[i] * (U)b[i]);                          \
      break;                                                                                 \
    case LM_DP_MIN:                                                                          \
      for (size_t i = 0; i < n; i++) o[i] = a[i] < b[i] ? a[i] : b[i];                       \
      break;                                                                                 \
    case LM_DP_MAX:                                                                          \
      for (size_t i = 0; i < n; i++) o[i] = a[i] > b[i] ? a[i] : b[i];                       \
      break;                                                                                 \
    case LM_DP_AND:                                                                          \
      for (size_t i = 0; i < n; i++) o[i] = a[i] & b[i];                                     \
      break;                                                                                 \
    case LM_DP_OR:                                                                           \
      for (size_t i = 0; i < n; i++) o[i] = a[i] | b[i];                                     \
      break;                                                                                 \
    case LM_DP_XOR:                                                                          \
      for (size_t i = 0; i < n; i++) o[i] = a[i] ^ b[i];                                     \
      break;                                                                                 \
    default: break;                                                                          \
    }                                                                                        \
  }
DP_INT_KERNELS(int8_t, uint8_t)
DP_INT_KERNELS(int16_t, uint16_t)
DP_INT_KERNELS(int32_t, uint32_t)
DP_INT_KERNELS(int64_t, uint64_t)
DP_INT_KERNELS(uint8_t, uint8_t)
DP_INT_KERNELS(uint16_t, uint16_t)
DP_INT_KERNELS(uint32_t, uint32_t)
DP_INT_KERNELS(uint64_t, uint64_t)

#define DP_FLOAT_KERNELS(T)                                                                  \
  static void dp_red_##T(lm_dp_op op, const T *a, const T *b, T *o, size_t n) {             \
    switch (op) {                                                                            \
    case LM_DP_SUM:                                                                          \
      for (size_t i = 0; i < n; i++) o[i] = a[i] + b[i];                                     \
      break;                                                                                 \
    case LM_DP_PROD:                                                                         \
      for (size_t i = 0; i < n; i++) o[i] = a[i] * b[i];                                     \
      break;                                                                                 \
    case LM_DP_MIN:                                                                          \
      for (size_t i = 0; i < n; i++) {                                                       \
        T x = a[i], y = b[i];                                                                \
        o[i] = DP_FMIN(T, x, y);                                                             \
      }                                                                                      \
      break;                                                                                 \
    case LM_DP_MAX:                                                                          \
      for (size_t i = 0; i < n; i++) {                                                       \
        T x = a[i], y = b[i];                                                                \
        o[i] = DP_FMAX(T, x, y);                                                             \
      }                                                                                      \
      break;                                                                                 \
    default: break;                                                                          \
    }                                                                                        \
  }
DP_FLOAT_KERNELS(float)
DP_FLOAT_KERNELS(double)

/* 16-bit floats: widen, compute, round back. FROM widens an element to f32, TO rounds back. */
#define DP_HALF_KERNELS(NAME, FROM, TO)                                                      \
  static void dp_red_##NAME(lm_dp_op op, const uint16_t *a, const uint16_t *b, uint16_t *o,     \
                            size_t n) {                                                      \
    switch (op) {                                                                            \
    case LM_DP_SUM:                                                                          \
      for (size_t i = 0; i < n; i++) {                                                       \
        float x = FROM(a[i]), y = FROM(b[i]);                                                \
        o[i] = TO(x + y);                                                                    \
      }                                                                                      \
      break;                                                                                 \
    case LM_DP_PROD:                                                                         \
      for (size_t i = 0; i < n; i++) {                                                       \
        float x = FROM(a[i]), y = FROM(b[i]);                                                \
        o[i] = TO(x * y);                                                                    \
      }                                                                                      \
      break;                                                                                 \
    case LM_DP_MIN:                                                                          \
      for (size_t i = 0; i < n; i++) {                                                       \
        float x = FROM(a[i]), y = FROM(b[i]);                                                \
        o[i] = TO(DP_FMIN(float, x, y));                                                     \
      }                                                                                      \
      break;                                                                                 \
    default: /* LM_DP_MAX (lm_dp_reduction_check refuses the bitwise ops on floats) */      \
      for (size_t i = 0; i < n; i++) {                                                       \
        float x = FROM(a[i]), y = FROM(b[i]);                                                \
        o[i] = TO(DP_FMAX(float, x, y));                                                     \
      }                                                                                      \
      break;                                                                                 \
    }                                                                                        \
  }
DP_HALF_KERNELS(f16, lm_f16_to_f32, lm_f32_to_f16)
DP_HALF_KERNELS(bf16, lm_bf16_to_f32, lm_f32_to_bf16)

/* Complex (re, im pairs): sum; product by the textbook formula (what XLA computes, not C's
 * Annex G rules); min/max compare (re, im) lexicographically, a NaN part wins. Each element's
 * four inputs are read before its two outputs are written (out may be lhs or rhs). */
#define DP_COMPLEX_KERNELS(T)                                                                \
  static void dp_redc_##T(lm_dp_op op, const T *a, const T *b, T *o, size_t n) {            \
    switch (op) {                                                                            \
    case LM_DP_SUM:                                                                          \
      for (size_t i = 0; i < n; i++) {                                                       \
        T ar = a[2 * i], ai = a[2 * i + 1], br = b[2 * i], bi = b[2 * i + 1];                \
        o[2 * i] = ar + br;                                                                  \
        o[2 * i + 1] = ai + bi;                                                              \
      }                                                                                      \
      break;                                                                                 \
    case LM_DP_PROD:                                                                         \
      for (size_t i = 0; i < n; i++) {                                                       \
        T ar = a[2 * i], ai = a[2 * i + 1], br = b[2 * i], bi = b[2 * i + 1];                \
        o[2 * i] = ar * br - ai * bi;                                                        \
        o[2 * i + 1] = ar * bi + ai * br;                                                    \
      }                                                                                      \
      break;                                                                                 \
    default: { /* LM_DP_MIN, LM_DP_MAX */                                                    \
      bool want_less = op == LM_DP_MIN;                                                      \
      for (size_t i = 0; i < n; i++) {                                                       \
        T ar = a[2 * i], ai = a[2 * i + 1], br = b[2 * i], bi = b[2 * i + 1];                \
        bool an = ar != ar || ai != ai, bn = br != br || bi != bi;                           \
        bool a_less = ar < br || (ar == br && ai < bi);                                      \
        bool pick_a = an ? true : bn ? false : want_less == a_less;                          \
        if (!an && !bn && ar == br && ai == bi) pick_a = true;                               \
        o[2 * i] = pick_a ? ar : br;                                                         \
        o[2 * i + 1] = pick_a ? ai : bi;                                                     \
      }                                                                                      \
      break;                                                                                 \
    }                                                                                        \
    }                                                                                        \
  }
DP_COMPLEX_KERNELS(float)
DP_COMPLEX_KERNELS(double)

/* i1: one byte per element, nonzero is true; results are 0 or 1. */
static void dp_red_pred(lm_dp_op op, const uint8_t *a, const uint8_t *b, uint8_t *o, size_t n) {
  switch (op) {
  case LM_DP_SUM: case LM_DP_MAX: case LM_DP_OR:
    for (size_t i = 0; i < n; i++) {
      bool x = a[i] != 0, y = b[i] != 0;
      o[i] = x || y;
    }
    break;
  case LM_DP_PROD: case LM_DP_MIN: case LM_DP_AND:
    for (size_t i = 0; i < n; i++) {
      bool x = a[i] != 0, y = b[i] != 0;
      o[i] = x && y;
    }
    break;
  default: /* LM_DP_XOR */
    for (size_t i = 0; i < n; i++) {
      bool x = a[i] != 0, y = b[i] != 0;
      o[i] = x != y;
    }
    break;
  }
}

int lm_dp_reduce(const lm_dp_reduction *red, const void *lhs, const void *rhs, void *out, size_t count, lm_err *err) {
  LM_TRY(lm_dp_reduction_check(red, err));
  if (count == 0) return 0;
  if (red->op == LM_DP_CUSTOM) {
    int rc = red->combine(red->user, lhs, rhs, out, count, err);
    if (rc < 0 && err && !err->msg[0]) lm_errf(err, rc, "data plane: the reduction function failed");
    return rc < 0 ? rc : 0;
  }
  lm_dp_op op = red->op;
  switch (red->dtype) {
  case LOOM_DTYPE_PRED: dp_red_pred(op, lhs, rhs, out, count); break;
  case LOOM_DTYPE_S8: dp_red_int8_t(op, lhs, rhs, out, count); break;
  case LOOM_DTYPE_S16: dp_red_int16_t(op, lhs, rhs, out, count); break;
  case LOOM_DTYPE_S32: dp_red_int32_t(op, lhs, rhs, out, count); break;
  case LOOM_DTYPE_S64: dp_red_int64_t(op, lhs, rhs, out, count); break;
  case LOOM_DTYPE_U8: dp_red_uint8_t(op, lhs, rhs, out, count); break;
  case LOOM_DTYPE_U16: dp_red_uint16_t(op, lhs, rhs, out, count); break;
  case LOOM_DTYPE_U32: dp_red_uint32_t(op, lhs, rhs, out, count); break;
  case LOOM_DTYPE_U64: dp_red_uint64_t(op, lhs, rhs, out, count); break;
  case LOOM_DTYPE_F16: dp_red_f16(op, lhs, rhs, out, count); break;
  case LOOM_DTYPE_BF16: dp_red_bf16(op, lhs, rhs, out, count); break;
  case LOOM_DTYPE_F32: dp_red_float(op, lhs, rhs, out, count); break;
  case LOOM_DTYPE_F64: dp_red_double(op, lhs, rhs, out, count); break;
  case LOOM_DTYPE_C64: dp_redc_float(op, lhs, rhs, out, count); break;
  case LOOM_DTYPE_C128: dp_redc_double(op, lhs, rhs, out, count); break;
  default: return lm_errf(err, LOOM_UNSUPPORTED, "data plane: element type %s", lm_dtype_name(red->dtype));
  }
  return 0;
}
