/* Element type conversion (spec 'convert') between every pair of supported types, plus scalar
 * element readers. Common pairs have direct loops; the rest go through an exact intermediate
 * (double for floating sources, int64/uint64 for integer sources) in chunks.
 * Rules (spec 'convert', and XLA where the spec leaves it open): integer -> integer wraps;
 * float -> integer truncates toward zero and saturates to the target range, NaN -> 0;
 * anything -> i1 is `!= 0` (complex: the real part, as the reference interpreter does); i1 ->
 * anything is 0 or 1;
 * complex -> real keeps the real part; real -> complex has a zero imaginary part; float ->
 * narrower float and integer -> float round to nearest even, once. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "common/half.h"
#include "exec/ew.h"

#define CHUNK 256

/* float -> integer, truncating and saturating, NaN -> 0; lo/hi are the target's range */
static inline int64_t sat_s(double d, int bits) {
  if (d != d) return 0;
  double lim = ldexp(1.0, bits - 1);
  if (d >= lim) return (int64_t)((UINT64_C(1) << (bits - 1)) - 1);
  if (d <= -lim) return -(int64_t)((UINT64_C(1) << (bits - 1)) - 1) - 1;
  return (int64_t)d;
}
static inline uint64_t sat_u(double d, int bits) {
  if (d != d || d <= 0) return 0;
  double lim = ldexp(1.0, bits);
  if (d >= lim) return bits == 64 ? UINT64_MAX : (UINT64_C(1) << bits) - 1;
  return (uint64_t)d;
}

/* integer -> f32 rounded to odd at 24 bits: exact when it fits, else the truncation with its
 * lowest bit set, so that one more rounding to f16/bf16 is correct */
static float u64_to_f32_odd(uint64_t a) {
  if (a < (UINT64_C(1) << 24)) return (float)a;
  int sh = 64 - __builtin_clzll(a) - 24;
  uint64_t m = a >> sh;
  if (a & ((UINT64_C(1) << sh) - 1)) m |= 1;
  return ldexpf((float)m, sh);
}
static float i64_to_f32_odd(int64_t v) {
  uint64_t a = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
  float f = u64_to_f32_odd(a);
  return v < 0 ? -f : f;
}

/* ---- decode: source chunk -> exact intermediate ---- */

typedef enum { INT_S, INT_U, REAL } inter_kind;

static inter_kind kind_of(lm_dtype t) {
  if (lm_dtype_is_sint(t)) return INT_S;
  if (lm_dtype_is_uint(t) || t == LOOM_DTYPE_PRED) return INT_U;
  return REAL;
}

static void decode(const void *src, lm_dtype t, size_t n, int64_t *iv, uint64_t *uv, double *re, double *im) {
  switch (t) {
    case LOOM_DTYPE_PRED: case LOOM_DTYPE_U8: for (size_t i = 0; i < n; i++) uv[i] = ((const uint8_t *)src)[i]; break;
    case LOOM_DTYPE_U16: for (size_t i = 0; i < n; i++) uv[i] = ((const uint16_t *)src)[i]; break;
    case LOOM_DTYPE_U32: for (size_t i = 0; i < n; i++) uv[i] = ((const uint32_t *)src)[i]; break;
    case LOOM_DTYPE_U64: memcpy(uv, src, n * 8); break;
    case LOOM_DTYPE_S8: for (size_t i = 0; i < n; i++) iv[i] = ((const int8_t *)src)[i]; break;
    case LOOM_DTYPE_S16: for (size_t i = 0; i < n; i++) iv[i] = ((const int16_t *)src)[i]; break;
    case LOOM_DTYPE_S32: for (size_t i = 0; i < n; i++) iv[i] = ((const int32_t *)src)[i]; break;
    case LOOM_DTYPE_S64: memcpy(iv, src, n * 8); break;
    case LOOM_DTYPE_F16: for (size_t i = 0; i < n; i++) { re[i] = lm_f16_to_f32(((const uint16_t *)src)[i]); im[i] = 0; } break;
    case LOOM_DTYPE_BF16: for (size_t i = 0; i < n; i++) { re[i] = lm_bf16_to_f32(((const uint16_t *)src)[i]); im[i] = 0; } break;
    case LOOM_DTYPE_F32: for (size_t i = 0; i < n; i++) { re[i] = ((const float *)src)[i]; im[i] = 0; } break;
    case LOOM_DTYPE_F64: for (size_t i = 0; i < n; i++) { re[i] = ((const double *)src)[i]; im[i] = 0; } break;
    case LOOM_DTYPE_C64: for (size_t i = 0; i < n; i++) { re[i] = ((const float *)src)[2 * i]; im[i] = ((const float *)src)[2 * i + 1]; } break;
    case LOOM_DTYPE_C128: for (size_t i = 0; i < n; i++) { re[i] = ((const double *)src)[2 * i]; im[i] = ((const double *)src)[2 * i + 1]; } break;
    default: break;
  }
}

/* ---- encode: intermediate -> destination chunk ---- */

#define STORE_INT(T, expr) for (size_t i = 0; i < n; i++) ((T *)dst)[i] = (T)(expr)

static void encode_from_int(void *dst, lm_dtype to, size_t n, bool sgn, const int64_t *iv, const uint64_t *uv) {
#define V (sgn ? (uint64_t)iv[i] : uv[i])
  switch (to) {
    case LOOM_DTYPE_PRED: STORE_INT(uint8_t, V != 0); break;
    case LOOM_DTYPE_S8: case LOOM_DTYPE_U8: STORE_INT(uint8_t, V); break;
    case LOOM_DTYPE_S16: case LOOM_DTYPE_U16: STORE_INT(uint16_t, V); break;
    case LOOM_DTYPE_S32: case LOOM_DTYPE_U32: STORE_INT(uint32_t, V); break;
    case LOOM_DTYPE_S64: case LOOM_DTYPE_U64: STORE_INT(uint64_t, V); break;
    case LOOM_DTYPE_F32: if (sgn) STORE_INT(float, iv[i]); else STORE_INT(float, uv[i]); break;
    case LOOM_DTYPE_F64: if (sgn) STORE_INT(double, iv[i]); else STORE_INT(double, uv[i]); break;
    case LOOM_DTYPE_F16:
      if (sgn) STORE_INT(uint16_t, lm_f32_to_f16(i64_to_f32_odd(iv[i])));
      else STORE_INT(uint16_t, lm_f32_to_f16(u64_to_f32_odd(uv[i])));
      break;
    case LOOM_DTYPE_BF16:
      if (sgn) STORE_INT(uint16_t, lm_f32_to_bf16(i64_to_f32_odd(iv[i])));
      else STORE_INT(uint16_t, lm_f32_to_bf16(u64_to_f32_odd(uv[i])));
      break;
    case LOOM_DTYPE_C64:
      for (size_t i = 0; i < n; i++) {
        ((float *)dst)[2 * i] = sgn ? (float)iv[i] : (float)uv[i];
        ((float *)dst)[2 * i + 1] = 0;
      }
      break;
    case LOOM_DTYPE_C128:
      for (size_t i = 0; i < n; i++) {
        ((double *)dst)[2 * i] = sgn ? (double)iv[i] : (double)uv[i];
        ((double *)dst)[2 * i + 1] = 0;
      }
      break;
    default: break;
  }
#undef V
}

static void encode_from_real(void *dst, lm_dtype to, size_t n, const double *re, const double *im) {
  switch (to) {
    case LOOM_DTYPE_PRED: STORE_INT(uint8_t, re[i] != 0); break; /* complex: the real part decides */
    case LOOM_DTYPE_S8: STORE_INT(int8_t, sat_s(re[i], 8)); break;
    case LOOM_DTYPE_S16: STORE_INT(int16_t, sat_s(re[i], 16)); break;
    case LOOM_DTYPE_S32: STORE_INT(int32_t, sat_s(re[i], 32)); break;
    case LOOM_DTYPE_S64: STORE_INT(int64_t, sat_s(re[i], 64)); break;
    case LOOM_DTYPE_U8: STORE_INT(uint8_t, sat_u(re[i], 8)); break;
    case LOOM_DTYPE_U16: STORE_INT(uint16_t, sat_u(re[i], 16)); break;
    case LOOM_DTYPE_U32: STORE_INT(uint32_t, sat_u(re[i], 32)); break;
    case LOOM_DTYPE_U64: STORE_INT(uint64_t, sat_u(re[i], 64)); break;
    case LOOM_DTYPE_F16: STORE_INT(uint16_t, lm_f64_to_f16(re[i])); break;
    case LOOM_DTYPE_BF16: STORE_INT(uint16_t, lm_f64_to_bf16(re[i])); break;
    case LOOM_DTYPE_F32: STORE_INT(float, re[i]); break;
    case LOOM_DTYPE_F64: STORE_INT(double, re[i]); break;
    case LOOM_DTYPE_C64:
      for (size_t i = 0; i < n; i++) { ((float *)dst)[2 * i] = (float)re[i]; ((float *)dst)[2 * i + 1] = (float)im[i]; }
      break;
    case LOOM_DTYPE_C128:
      for (size_t i = 0; i < n; i++) { ((double *)dst)[2 * i] = re[i]; ((double *)dst)[2 * i + 1] = im[i]; }
      break;
    default: break;
  }
}

/* Direct loops for the pairs that show up in hot paths. Returns false when there is none. */
static bool convert_fast(void *out, lm_dtype to, const void *in, lm_dtype from, size_t n) {
#define PAIR(a, b) ((a) * 32 + (b))
  switch (PAIR(from, to)) {
    case PAIR(LOOM_DTYPE_F32, LOOM_DTYPE_F64): for (size_t i = 0; i < n; i++) ((double *)out)[i] = ((const float *)in)[i]; return true;
    case PAIR(LOOM_DTYPE_F64, LOOM_DTYPE_F32): for (size_t i = 0; i < n; i++) ((float *)out)[i] = (float)((const double *)in)[i]; return true;
    case PAIR(LOOM_DTYPE_F16, LOOM_DTYPE_F32): for (size_t i = 0; i < n; i++) ((float *)out)[i] = lm_f16_to_f32(((const uint16_t *)in)[i]); return true;
    case PAIR(LOOM_DTYPE_BF16, LOOM_DTYPE_F32): for (size_t i = 0; i < n; i++) ((float *)out)[i] = lm_bf16_to_f32(((const uint16_t *)in)[i]); return true;
    case PAIR(LOOM_DTYPE_F32, LOOM_DTYPE_F16): for (size_t i = 0; i < n; i++) ((uint16_t *)out)[i] = lm_f32_to_f16(((const float *)in)[i]); return true;
    case PAIR(LOOM_DTYPE_F32, LOOM_DTYPE_BF16): for (size_t i = 0; i < n; i++) ((uint16_t *)out)[i] = lm_f32_to_bf16(((const float *)in)[i]); return true;
    case PAIR(LOOM_DTYPE_S32, LOOM_DTYPE_F32): for (size_t i = 0; i < n; i++) ((float *)out)[i] = (float)((const int32_t *)in)[i]; return true;
    case PAIR(LOOM_DTYPE_S32, LOOM_DTYPE_S64): for (size_t i = 0; i < n; i++) ((int64_t *)out)[i] = ((const int32_t *)in)[i]; return true;
    case PAIR(LOOM_DTYPE_S64, LOOM_DTYPE_S32): for (size_t i = 0; i < n; i++) ((int32_t *)out)[i] = (int32_t)((const int64_t *)in)[i]; return true;
    case PAIR(LOOM_DTYPE_U32, LOOM_DTYPE_S32): case PAIR(LOOM_DTYPE_S32, LOOM_DTYPE_U32): memmove(out, in, n * 4); return true;
    case PAIR(LOOM_DTYPE_PRED, LOOM_DTYPE_F32): for (size_t i = 0; i < n; i++) ((float *)out)[i] = ((const uint8_t *)in)[i]; return true;
    case PAIR(LOOM_DTYPE_PRED, LOOM_DTYPE_S32): for (size_t i = 0; i < n; i++) ((int32_t *)out)[i] = ((const uint8_t *)in)[i]; return true;
    case PAIR(LOOM_DTYPE_F32, LOOM_DTYPE_PRED): for (size_t i = 0; i < n; i++) ((uint8_t *)out)[i] = ((const float *)in)[i] != 0; return true;
    case PAIR(LOOM_DTYPE_S32, LOOM_DTYPE_PRED): for (size_t i = 0; i < n; i++) ((uint8_t *)out)[i] = ((const int32_t *)in)[i] != 0; return true;
    case PAIR(LOOM_DTYPE_F32, LOOM_DTYPE_S32):
      for (size_t i = 0; i < n; i++) {
        float f = ((const float *)in)[i];
        ((int32_t *)out)[i] = f != f ? 0 : f >= 2147483648.0f ? INT32_MAX : f <= -2147483648.0f ? INT32_MIN : (int32_t)f;
      }
      return true;
    default: return false;
  }
#undef PAIR
}

void lm_convert_array(void *out, lm_dtype to, const void *in, lm_dtype from, size_t n) {
  if (to == from) { memmove(out, in, n * lm_dtype_size(to)); return; }
  if (convert_fast(out, to, in, from, n)) return;
  int64_t iv[CHUNK];
  uint64_t uv[CHUNK];
  double re[CHUNK], im[CHUNK];
  size_t isz = lm_dtype_size(from), osz = lm_dtype_size(to);
  inter_kind k = kind_of(from);
  for (size_t s = 0; s < n; s += CHUNK) {
    size_t m = n - s < CHUNK ? n - s : CHUNK;
    const char *src = (const char *)in + s * isz;
    char *dst = (char *)out + s * osz;
    decode(src, from, m, iv, uv, re, im);
    if (k == REAL) encode_from_real(dst, to, m, re, im);
    else encode_from_int(dst, to, m, k == INT_S, iv, uv);
  }
}

int64_t lm_elem_as_i64(const void *p, lm_dtype t, size_t i) {
  int64_t v = 0;
  lm_convert_array(&v, LOOM_DTYPE_S64, (const char *)p + i * lm_dtype_size(t), t, 1);
  return v;
}
