/* IEEE binary16 (f16) and bfloat16 conversions, bit-exact, round-to-nearest-even.
 * f64 -> 16-bit goes through f32 with round-to-odd, which avoids double rounding. */
#ifndef LM_HALF_H
#define LM_HALF_H

#include <stdint.h>
#include <string.h>

static inline uint32_t lm_f32_bits(float f) { uint32_t x; memcpy(&x, &f, 4); return x; }
static inline float lm_bits_f32(uint32_t x) { float f; memcpy(&f, &x, 4); return f; }

static inline float lm_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ff;
  if (e == 0) {
    float f = (float)m * 5.9604644775390625e-08f; /* m * 2^-24, exact */
    return lm_bits_f32(lm_f32_bits(f) | sign);
  }
  if (e == 31) return lm_bits_f32(sign | 0x7f800000u | (m << 13));
  return lm_bits_f32(sign | ((e + 112) << 23) | (m << 13));
}

static inline uint16_t lm_f32_to_f16(float f) {
  uint32_t x = lm_f32_bits(f);
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
  uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) /* inf, or NaN kept quiet with its top payload bits */
    return sign | 0x7c00 | (ax > 0x7f800000u ? (0x200 | ((ax >> 13) & 0x3ff)) : 0);
  if (ax >= 0x477ff000u) return sign | 0x7c00; /* >= 65520 rounds to inf */
  if (ax < 0x38800000u) {                      /* below 2^-14: f16 subnormal or zero */
    if (ax < 0x33000000u) return sign;         /* <= 2^-25 rounds to zero */
    uint32_t e = ax >> 23, m = (ax & 0x7fffff) | 0x800000;
    uint32_t s = 126 - e, r = m >> s, rem = m & ((1u << s) - 1), half = 1u << (s - 1);
    if (rem > half || (rem == half && (r & 1))) r++;
    return sign | (uint16_t)r;
  }
  uint32_t v = ax - 0x38000000u;
  v = (v + 0xfff + ((v >> 13) & 1)) >> 13;
  return sign | (uint16_t)v;
}

static inline float lm_bf16_to_f32(uint16_t b) { return lm_bits_f32((uint32_t)b << 16); }

static inline uint16_t lm_f32_to_bf16(float f) {
  uint32_t x = lm_f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40); /* quiet NaN */
  return (uint16_t)((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

/* f64 -> f32 rounding to odd: exact when representable, else the truncation with its lowest
 * bit set. A later rounding to a format with fewer bits then rounds as if from f64. */
static inline float lm_f64_to_f32_odd(double d) {
  float f = (float)d;
  if ((double)f == d || d != d) return f;
  uint32_t x = lm_f32_bits(f);
  if (__builtin_fabs((double)f) > __builtin_fabs(d)) x--; /* step back toward zero */
  return lm_bits_f32(x | 1);
}

static inline double lm_f16_to_f64(uint16_t h) { return (double)lm_f16_to_f32(h); }
static inline double lm_bf16_to_f64(uint16_t b) { return (double)lm_bf16_to_f32(b); }
static inline uint16_t lm_f64_to_f16(double d) { return lm_f32_to_f16(lm_f64_to_f32_odd(d)); }
static inline uint16_t lm_f64_to_bf16(double d) { return lm_f32_to_bf16(lm_f64_to_f32_odd(d)); }

#endif
