/* Helpers shared by the structured-op kernels: strided copies, index loads, fast-path body
 * binops, scalar region calls, verifier checks. See ops_util.h. */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/half.h"
#include "exec/interp.h"
#include "exec/ops_util.h"

int lm_ops_generic_only = 0;

/* ---- shapes and indices ---- */

void lm_row_strides(const lm_type *t, int64_t *strides) {
  int64_t s = 1;
  for (int d = t->rank - 1; d >= 0; d--) {
    strides[d] = s;
    s *= t->dims[d];
  }
}

void lm_fill_elems(void *dst, const void *val, size_t esize, size_t n) {
  unsigned char *p = dst;
  if (n == 0) return;
  bool same = true;
  for (size_t i = 1; i < esize; i++)
    if (((const unsigned char *)val)[i] != ((const unsigned char *)val)[0]) same = false;
  if (same) { memset(p, ((const unsigned char *)val)[0], n * esize); return; }
  switch (esize) {
    case 2: { uint16_t v; memcpy(&v, val, 2); for (size_t i = 0; i < n; i++) ((uint16_t *)p)[i] = v; return; }
    case 4: { uint32_t v; memcpy(&v, val, 4); for (size_t i = 0; i < n; i++) ((uint32_t *)p)[i] = v; return; }
    case 8: { uint64_t v; memcpy(&v, val, 8); for (size_t i = 0; i < n; i++) ((uint64_t *)p)[i] = v; return; }
    default:
      /* Doubling copy: one element, then grow the filled prefix. */
      memcpy(p, val, esize);
      for (size_t done = 1; done < n;) {
        size_t k = done < n - done ? done : n - done;
        memcpy(p + done * esize, p, k * esize);
        done += k;
      }
  }
}

int64_t lm_load_index(const void *data, lm_dtype dt, int64_t i) {
  switch (dt) {
    case LOOM_DTYPE_PRED: case LOOM_DTYPE_U8: return ((const uint8_t *)data)[i];
    case LOOM_DTYPE_S8: return ((const int8_t *)data)[i];
    case LOOM_DTYPE_S16: return ((const int16_t *)data)[i];
    case LOOM_DTYPE_U16: return ((const uint16_t *)data)[i];
    case LOOM_DTYPE_S32: return ((const int32_t *)data)[i];
    case LOOM_DTYPE_U32: return ((const uint32_t *)data)[i];
    case LOOM_DTYPE_S64: return ((const int64_t *)data)[i];
    case LOOM_DTYPE_U64: {
      uint64_t v = ((const uint64_t *)data)[i];
      return v > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)v;
    }
    default: return 0;
  }
}

void lm_store_f64(void *p, lm_dtype dt, double v) {
  switch (dt) {
    case LOOM_DTYPE_F16: { uint16_t h = lm_f64_to_f16(v); memcpy(p, &h, 2); return; }
    case LOOM_DTYPE_BF16: { uint16_t h = lm_f64_to_bf16(v); memcpy(p, &h, 2); return; }
    case LOOM_DTYPE_F32: { float f = (float)v; memcpy(p, &f, 4); return; }
    case LOOM_DTYPE_F64: memcpy(p, &v, 8); return;
    case LOOM_DTYPE_C64: { float c[2] = {(float)v, 0.0f}; memcpy(p, c, 8); return; }
    case LOOM_DTYPE_C128: { double c[2] = {v, 0.0}; memcpy(p, c, 16); return; }
    default: /* integers: truncation toward zero, saturating; NaN gives 0 */
      lm_store_i64(p, dt, v != v ? 0 : v <= -9.2233720368547758e18 ? INT64_MIN : v >= 9.2233720368547758e18 ? INT64_MAX : (int64_t)v);
      return;
  }
}

void lm_store_i64(void *p, lm_dtype dt, int64_t v) {
  switch (dt) {
    case LOOM_DTYPE_PRED: *(uint8_t *)p = v != 0; return;
    case LOOM_DTYPE_S8: case LOOM_DTYPE_U8: *(uint8_t *)p = (uint8_t)v; return;
    case LOOM_DTYPE_S16: case LOOM_DTYPE_U16: { uint16_t x = (uint16_t)v; memcpy(p, &x, 2); return; }
    case LOOM_DTYPE_S32: case LOOM_DTYPE_U32: { uint32_t x = (uint32_t)v; memcpy(p, &x, 4); return; }
    case LOOM_DTYPE_S64: case LOOM_DTYPE_U64: memcpy(p, &v, 8); return;
    default: lm_store_f64(p, dt, (double)v); return;
  }
}

double lm_load_f64(const void *p, lm_dtype dt) {
  switch (dt) {
    case LOOM_DTYPE_F16: { uint16_t h; memcpy(&h, p, 2); return lm_f16_to_f64(h); }
    case LOOM_DTYPE_BF16: { uint16_t h; memcpy(&h, p, 2); return lm_bf16_to_f64(h); }
    case LOOM_DTYPE_F32: case LOOM_DTYPE_C64: { float f; memcpy(&f, p, 4); return f; }
    case LOOM_DTYPE_F64: case LOOM_DTYPE_C128: { double d; memcpy(&d, p, 8); return d; }
    case LOOM_DTYPE_U64: { uint64_t u; memcpy(&u, p, 8); return (double)u; }
    default: return (double)lm_load_index(p, dt, 0);
  }
}

/* Copies n elements of size es from src to dst with element strides ds/ss. */
static void copy_row(char *dst, int64_t ds, const char *src, int64_t ss, int64_t n, size_t es) {
  if (ds == 1 && ss == 1) {
    size_t nb = (size_t)n * es;
    if (nb > 128) { memcpy(dst, src, nb); return; }
    /* short rows (e.g. one attention head): 8-byte moves beat a memcpy call */
    size_t q = 0;
    for (; q + 8 <= nb; q += 8) { uint64_t v; memcpy(&v, src + q, 8); memcpy(dst + q, &v, 8); }
    for (; q < nb; q++) dst[q] = src[q];
    return;
  }
#define ROW(T)                                                                 \
  do {                                                                         \
    T *d_ = (T *)dst; const T *s_ = (const T *)src;                            \
    for (int64_t i = 0; i < n; i++) d_[i * ds] = s_[i * ss];                   \
  } while (0)
  switch (es) {
    case 1: ROW(uint8_t); return;
    case 2: ROW(uint16_t); return;
    case 4: ROW(uint32_t); return;
    case 8: ROW(uint64_t); return;
    default:
      for (int64_t i = 0; i < n; i++) memcpy(dst + i * ds * (int64_t)es, src + i * ss * (int64_t)es, es);
  }
#undef ROW
}

#if defined(__AVX2__)
#include <immintrin.h>
/* 8x8 f32 block: dst[p*dr + q] = src[p + q*sc] for p, q < 8. */
static inline void tr8x8_f32(float *dst, int64_t dr, const float *src, int64_t sc) {
  __m256 r0 = _mm256_loadu_ps(src + 0 * sc), r1 = _mm256_loadu_ps(src + 1 * sc);
  __m256 r2 = _mm256_loadu_ps(src + 2 * sc), r3 = _mm256_loadu_ps(src + 3 * sc);
  __m256 r4 = _mm256_loadu_ps(src + 4 * sc), r5 = _mm256_loadu_ps(src + 5 * sc);
  __m256 r6 = _mm256_loadu_ps(src + 6 * sc), r7 = _mm256_loadu_ps(src + 7 * sc);
  __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
  __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
  __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
  __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
  __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  _mm256_storeu_ps(dst + 0 * dr, _mm256_permute2f128_ps(u0, u4, 0x20));
  _mm256_storeu_ps(dst + 1 * dr, _mm256_permute2f128_ps(u1, u5, 0x20));
  _mm256_storeu_ps(dst + 2 * dr, _mm256_permute2f128_ps(u2, u6, 0x20));
  _mm256_storeu_ps(dst + 3 * dr, _mm256_permute2f128_ps(u3, u7, 0x20));
  _mm256_storeu_ps(dst + 4 * dr, _mm256_permute2f128_ps(u0, u4, 0x31));
  _mm256_storeu_ps(dst + 5 * dr, _mm256_permute2f128_ps(u1, u5, 0x31));
  _mm256_storeu_ps(dst + 6 * dr, _mm256_permute2f128_ps(u2, u6, 0x31));
  _mm256_storeu_ps(dst + 7 * dr, _mm256_permute2f128_ps(u3, u7, 0x31));
}

/* 4x4 64-bit block: dst[p*dr + q] = src[p + q*sc] for p, q < 4. */
static inline void tr4x4_64(double *dst, int64_t dr, const double *src, int64_t sc) {
  __m256d r0 = _mm256_loadu_pd(src + 0 * sc), r1 = _mm256_loadu_pd(src + 1 * sc);
  __m256d r2 = _mm256_loadu_pd(src + 2 * sc), r3 = _mm256_loadu_pd(src + 3 * sc);
  __m256d t0 = _mm256_unpacklo_pd(r0, r1), t1 = _mm256_unpackhi_pd(r0, r1);
  __m256d t2 = _mm256_unpacklo_pd(r2, r3), t3 = _mm256_unpackhi_pd(r2, r3);
  _mm256_storeu_pd(dst + 0 * dr, _mm256_permute2f128_pd(t0, t2, 0x20));
  _mm256_storeu_pd(dst + 1 * dr, _mm256_permute2f128_pd(t1, t3, 0x20));
  _mm256_storeu_pd(dst + 2 * dr, _mm256_permute2f128_pd(t0, t2, 0x31));
  _mm256_storeu_pd(dst + 3 * dr, _mm256_permute2f128_pd(t1, t3, 0x31));
}
#endif

/* dst[i*dr + j] = src[i + j*sc] for i < ni, j < nj (dst rows contiguous, src columns contiguous),
 * in square tiles so both sides stay in cache; 4- and 8-byte elements use 8x8 / 4x4 register
 * transposes where AVX2 is available. */
static void transpose_2d(char *dst, int64_t dr, const char *src, int64_t sc, int64_t ni, int64_t nj, size_t es) {
  enum { TILE = 32 };
#if defined(__AVX2__)
  if (es == 4 || es == 8) {
    int64_t B = es == 4 ? 8 : 4;
    for (int64_t i0 = 0; i0 < ni; i0 += TILE) {
      int64_t i1 = i0 + TILE < ni ? i0 + TILE : ni;
      for (int64_t j0 = 0; j0 < nj; j0 += TILE) {
        int64_t j1 = j0 + TILE < nj ? j0 + TILE : nj;
        int64_t ib = i0 + (i1 - i0) / B * B, jb = j0 + (j1 - j0) / B * B;
        if (es == 4) {
          float *d = (float *)dst;
          const float *sp = (const float *)src;
          for (int64_t i = i0; i < ib; i += 8)
            for (int64_t j = j0; j < jb; j += 8) tr8x8_f32(d + i * dr + j, dr, sp + i + j * sc, sc);
        } else {
          double *d = (double *)dst;
          const double *sp = (const double *)src;
          for (int64_t i = i0; i < ib; i += 4)
            for (int64_t j = j0; j < jb; j += 4) tr4x4_64(d + i * dr + j, dr, sp + i + j * sc, sc);
        }
        for (int64_t i = i0; i < i1; i++) /* edges */
          for (int64_t j = (i < ib ? jb : j0); j < j1; j++)
            memcpy(dst + (i * dr + j) * (int64_t)es, src + (i + j * sc) * (int64_t)es, es);
      }
    }
    return;
  }
#endif
#define TR(T)                                                                          \
  do {                                                                                 \
    T *d_ = (T *)dst; const T *s_ = (const T *)src;                                    \
    for (int64_t i0 = 0; i0 < ni; i0 += TILE) {                                        \
      int64_t i1 = i0 + TILE < ni ? i0 + TILE : ni;                                    \
      for (int64_t j0 = 0; j0 < nj; j0 += TILE) {                                      \
        int64_t j1 = j0 + TILE < nj ? j0 + TILE : nj;                                  \
        for (int64_t i = i0; i < i1; i++) {                                            \
          T *dp = d_ + i * dr; const T *sp = s_ + i;                                   \
          for (int64_t j = j0; j < j1; j++) dp[j] = sp[j * sc];                        \
        }                                                                              \
      }                                                                                \
    }                                                                                  \
  } while (0)
  switch (es) {
    case 1: TR(uint8_t); return;
    case 2: TR(uint16_t); return;
    case 4: TR(uint32_t); return;
    case 8: TR(uint64_t); return;
    default:
      for (int64_t i = 0; i < ni; i++)
        for (int64_t j = 0; j < nj; j++)
          memcpy(dst + (i * dr + j) * (int64_t)es, src + (i + j * sc) * (int64_t)es, es);
  }
#undef TR
}

void lm_copy_strided(int rank, const int64_t *dims, size_t esize, void *dst, const int64_t *dst_strides,
                     const void *src, const int64_t *src_strides) {
  int64_t n[LM_MAX_RANK], ds[LM_MAX_RANK], ss[LM_MAX_RANK];
  int r = 0;
  for (int d = 0; d < rank; d++) {
    if (dims[d] == 0) return;
    if (dims[d] == 1) continue;
    /* Merge into the previous (outer) dim when the pair is contiguous on both sides. */
    if (r > 0 && ds[r - 1] == dst_strides[d] * dims[d] && ss[r - 1] == src_strides[d] * dims[d]) {
      n[r - 1] *= dims[d];
      ds[r - 1] = dst_strides[d];
      ss[r - 1] = src_strides[d];
      continue;
    }
    n[r] = dims[d];
    ds[r] = dst_strides[d];
    ss[r] = src_strides[d];
    r++;
  }
  char *dp = dst;
  const char *sp = src;
  int64_t es = (int64_t)esize;
  if (r == 0) { memcpy(dp, sp, esize); return; }

  /* Transpose pattern: the fastest dst dim is contiguous in dst, some other dim is contiguous in
   * src. Tile over that pair; loop the rest. */
  int last = r - 1, tj = -1;
  if (ds[last] == 1 && ss[last] != 1)
    for (int d = 0; d < last; d++)
      if (ss[d] == 1) { tj = d; break; }
  if (tj >= 0 && n[tj] >= 4 && n[last] >= 4) {
    int64_t idx[LM_MAX_RANK] = {0};
    int64_t on[LM_MAX_RANK], ods[LM_MAX_RANK], oss[LM_MAX_RANK];
    int orank = 0;
    for (int d = 0; d < last; d++)
      if (d != tj) { on[orank] = n[d]; ods[orank] = ds[d]; oss[orank] = ss[d]; orank++; }
    do {
      int64_t doff = 0, soff = 0;
      for (int d = 0; d < orank; d++) { doff += idx[d] * ods[d]; soff += idx[d] * oss[d]; }
      /* dst[i*ds[tj] + j] = src[i + j*ss[last]] with i over dim tj, j over dim last */
      transpose_2d(dp + doff * es, ds[tj], sp + soff * es, ss[last], n[tj], n[last], esize);
    } while (lm_index_next(orank, on, idx));
    return;
  }

  int64_t idx[LM_MAX_RANK] = {0};
  int64_t doff = 0, soff = 0;
  for (;;) {
    copy_row(dp + doff * es, ds[last], sp + soff * es, ss[last], n[last], esize);
    int d = last - 1;
    for (; d >= 0; d--) {
      if (++idx[d] < n[d]) { doff += ds[d]; soff += ss[d]; break; }
      idx[d] = 0;
      doff -= ds[d] * (n[d] - 1);
      soff -= ss[d] * (n[d] - 1);
    }
    if (d < 0) break;
  }
}

bool lm_input_donatable(const lm_kctx *k, uint32_t i) {
  if (!k->pop || !k->frame || i >= k->op->nin || lm_ops_generic_only) return false;
  uint32_t v = k->op->in[i];
  const lm_buffer *b = k->frame[v];
  if (!b || b->base || b->type.kind != LM_TYPE_TENSOR || atomic_load(&((lm_buffer *)b)->refcount) != 1) return false;
  for (uint32_t j = 0; j < k->op->nin; j++)
    if (j != i && k->op->in[j] == v) return false;
  const lm_plan_op *po = k->pop;
  for (uint32_t r = 0; r < po->nrelease; r++)
    if (po->release[r] == v) return true;
  return false;
}

/* ---- fast-path binops ---- */

typedef struct { float re, im; } c64;
typedef struct { double re, im; } c128;

static inline float maxf_(float a, float b) {
  if (a != a) return a;
  if (b != b) return b;
  if (a == b) return signbit(a) ? b : a;
  return a > b ? a : b;
}
static inline float minf_(float a, float b) {
  if (a != a) return a;
  if (b != b) return b;
  if (a == b) return signbit(a) ? a : b;
  return a < b ? a : b;
}
static inline double maxd_(double a, double b) {
  if (a != a) return a;
  if (b != b) return b;
  if (a == b) return signbit(a) ? b : a;
  return a > b ? a : b;
}
static inline double mind_(double a, double b) {
  if (a != a) return a;
  if (b != b) return b;
  if (a == b) return signbit(a) ? a : b;
  return a < b ? a : b;
}
#define CPLX_OPS(C, F)                                                                           \
  static inline C C##_add(C a, C b) { return (C){a.re + b.re, a.im + b.im}; }                  \
  static inline C C##_mul(C a, C b) { return (C){a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re}; } \
  static inline bool C##_nan(C a) { return a.re != a.re || a.im != a.im; }                     \
  static inline C C##_max(C a, C b) {                                                          \
    if (C##_nan(a)) return a;                                                                  \
    if (C##_nan(b)) return b;                                                                  \
    return (a.re > b.re || (a.re == b.re && a.im >= b.im)) ? a : b;                            \
  }                                                                                            \
  static inline C C##_min(C a, C b) {                                                          \
    if (C##_nan(a)) return a;                                                                  \
    if (C##_nan(b)) return b;                                                                  \
    return (a.re < b.re || (a.re == b.re && a.im <= b.im)) ? a : b;                            \
  }
CPLX_OPS(c64, float)
CPLX_OPS(c128, double)

#define DEF_LOOP(NAME, T, EXPR)                                                                 \
  static void NAME(void *acc_, const void *x_, int64_t n, int64_t as, int64_t xs) {             \
    T *acc = acc_;                                                                             \
    const T *x = x_;                                                                           \
    if (as == 1 && xs == 1) {                                                                  \
      for (int64_t i = 0; i < n; i++) { T a = acc[i], b = x[i]; acc[i] = (EXPR); }             \
    } else {                                                                                   \
      for (int64_t i = 0; i < n; i++) { T a = acc[i * as], b = x[i * xs]; acc[i * as] = (EXPR); } \
    }                                                                                          \
  }

/* i1 */
DEF_LOOP(pred_or, uint8_t, (uint8_t)((a | b) != 0))
DEF_LOOP(pred_and, uint8_t, (uint8_t)((a & b) != 0))
DEF_LOOP(pred_xor, uint8_t, (uint8_t)((a ^ b) != 0))
/* integers: add/mul/bitwise are sign-agnostic in two's complement */
#define INT_LOOPS(W, UT, ST)                                                   \
  DEF_LOOP(u##W##_add, UT, (UT)((uint64_t)a + (uint64_t)b))                   \
  DEF_LOOP(u##W##_mul, UT, (UT)((uint64_t)a * (uint64_t)b))                   \
  DEF_LOOP(u##W##_and, UT, (UT)(a & b))                                       \
  DEF_LOOP(u##W##_or, UT, (UT)(a | b))                                        \
  DEF_LOOP(u##W##_xor, UT, (UT)(a ^ b))                                       \
  DEF_LOOP(u##W##_max, UT, (a > b ? a : b))                                   \
  DEF_LOOP(u##W##_min, UT, (a < b ? a : b))                                   \
  DEF_LOOP(s##W##_max, ST, (a > b ? a : b))                                   \
  DEF_LOOP(s##W##_min, ST, (a < b ? a : b))
INT_LOOPS(8, uint8_t, int8_t)
INT_LOOPS(16, uint16_t, int16_t)
INT_LOOPS(32, uint32_t, int32_t)
INT_LOOPS(64, uint64_t, int64_t)
/* floats */
DEF_LOOP(f32_add, float, a + b)
DEF_LOOP(f32_mul, float, a * b)
DEF_LOOP(f32_max, float, maxf_(a, b))
DEF_LOOP(f32_min, float, minf_(a, b))
DEF_LOOP(f64_add, double, a + b)
DEF_LOOP(f64_mul, double, a * b)
DEF_LOOP(f64_max, double, maxd_(a, b))
DEF_LOOP(f64_min, double, mind_(a, b))
DEF_LOOP(f16_add, uint16_t, lm_f32_to_f16(lm_f16_to_f32(a) + lm_f16_to_f32(b)))
DEF_LOOP(f16_mul, uint16_t, lm_f32_to_f16(lm_f16_to_f32(a) * lm_f16_to_f32(b)))
DEF_LOOP(f16_max, uint16_t, lm_f32_to_f16(maxf_(lm_f16_to_f32(a), lm_f16_to_f32(b))))
DEF_LOOP(f16_min, uint16_t, lm_f32_to_f16(minf_(lm_f16_to_f32(a), lm_f16_to_f32(b))))
DEF_LOOP(bf16_add, uint16_t, lm_f32_to_bf16(lm_bf16_to_f32(a) + lm_bf16_to_f32(b)))
DEF_LOOP(bf16_mul, uint16_t, lm_f32_to_bf16(lm_bf16_to_f32(a) * lm_bf16_to_f32(b)))
DEF_LOOP(bf16_max, uint16_t, lm_f32_to_bf16(maxf_(lm_bf16_to_f32(a), lm_bf16_to_f32(b))))
DEF_LOOP(bf16_min, uint16_t, lm_f32_to_bf16(minf_(lm_bf16_to_f32(a), lm_bf16_to_f32(b))))
DEF_LOOP(c64_addl, c64, c64_add(a, b))
DEF_LOOP(c64_mull, c64, c64_mul(a, b))
DEF_LOOP(c64_maxl, c64, c64_max(a, b))
DEF_LOOP(c64_minl, c64, c64_min(a, b))
DEF_LOOP(c128_addl, c128, c128_add(a, b))
DEF_LOOP(c128_mull, c128, c128_mul(a, b))
DEF_LOOP(c128_maxl, c128, c128_max(a, b))
DEF_LOOP(c128_minl, c128, c128_min(a, b))

lm_binop_fn lm_binop_lookup(lm_opcode op, lm_dtype dt) {
  if (lm_ops_generic_only) return NULL;
#define INTS(W)                                                                     \
  switch (op) {                                                                     \
    case LM_OP_ADD: return u##W##_add;                                              \
    case LM_OP_MULTIPLY: return u##W##_mul;                                         \
    case LM_OP_AND: return u##W##_and;                                              \
    case LM_OP_OR: return u##W##_or;                                                \
    case LM_OP_XOR: return u##W##_xor;                                              \
    case LM_OP_MAXIMUM: return sgn ? s##W##_max : u##W##_max;                       \
    case LM_OP_MINIMUM: return sgn ? s##W##_min : u##W##_min;                       \
    default: return NULL;                                                           \
  }
  bool sgn = lm_dtype_is_sint(dt);
  switch (dt) {
    case LOOM_DTYPE_PRED:
      switch (op) {
        case LM_OP_ADD: case LM_OP_OR: case LM_OP_MAXIMUM: return pred_or;
        case LM_OP_MULTIPLY: case LM_OP_AND: case LM_OP_MINIMUM: return pred_and;
        case LM_OP_XOR: return pred_xor;
        default: return NULL;
      }
    case LOOM_DTYPE_S8: case LOOM_DTYPE_U8: INTS(8)
    case LOOM_DTYPE_S16: case LOOM_DTYPE_U16: INTS(16)
    case LOOM_DTYPE_S32: case LOOM_DTYPE_U32: INTS(32)
    case LOOM_DTYPE_S64: case LOOM_DTYPE_U64: INTS(64)
#define FLOATS(P, SUF)                                                              \
  switch (op) {                                                                     \
    case LM_OP_ADD: return P##_add##SUF;                                            \
    case LM_OP_MULTIPLY: return P##_mul##SUF;                                       \
    case LM_OP_MAXIMUM: return P##_max##SUF;                                        \
    case LM_OP_MINIMUM: return P##_min##SUF;                                        \
    default: return NULL;                                                           \
  }
    case LOOM_DTYPE_F16: FLOATS(f16, )
    case LOOM_DTYPE_BF16: FLOATS(bf16, )
    case LOOM_DTYPE_F32: FLOATS(f32, )
    case LOOM_DTYPE_F64: FLOATS(f64, )
    case LOOM_DTYPE_C64: FLOATS(c64, l)
    case LOOM_DTYPE_C128: FLOATS(c128, l)
    default: return NULL;
  }
#undef INTS
#undef FLOATS
}

bool lm_region_returns_second_half(const lm_op *op, uint32_t r) {
  if (lm_ops_generic_only || r >= op->nregions || op->regions[r].nblocks != 1) return false;
  const lm_block *b = &op->regions[r].blocks[0];
  if (b->nops != 1 || b->nargs % 2 != 0 || b->nargs == 0) return false;
  const lm_op *ret = &b->ops[0];
  uint32_t n = b->nargs / 2;
  if (ret->nin != n) return false;
  for (uint32_t i = 0; i < n; i++)
    if (ret->in[i] != b->args[n + i]) return false;
  return true;
}

/* ---- scalar region calls ---- */

int lm_body_init(lm_body *b, lm_kctx *k, uint32_t region, uint32_t nres) {
  memset(b, 0, sizeof *b);
  b->k = k;
  b->region = region;
  if (region >= k->op->nregions || k->op->regions[region].nblocks != 1)
    return lm_kerr(k, LOOM_VERIFY, "missing body region %u", region);
  const lm_block *blk = &k->op->regions[region].blocks[0];
  b->nargs = blk->nargs;
  b->nres = nres;
  b->args = calloc(b->nargs ? b->nargs : 1, sizeof *b->args);
  b->res = calloc(nres ? nres : 1, sizeof *b->res);
  b->arg_size = calloc(b->nargs ? b->nargs : 1, sizeof *b->arg_size);
  if (!b->args || !b->res || !b->arg_size) {
    lm_body_free(b);
    return lm_kerr(k, LOOM_NO_MEMORY, "out of host memory");
  }
  for (uint32_t i = 0; i < b->nargs; i++) {
    const lm_type *t = &k->fn->value_types[blk->args[i]];
    if (t->kind != LM_TYPE_TENSOR || lm_type_numel(t) != 1) {
      char ts[128];
      lm_body_free(b);
      return lm_kerr(k, LOOM_VERIFY, "body region %u argument %u has type %s; a scalar tensor is expected", region,
                     i, lm_type_str(t, ts, sizeof ts));
    }
    int rc = lm_kalloc(k, t, &b->args[i]);
    if (rc < 0) { lm_body_free(b); return rc; }
    b->arg_size[i] = b->args[i]->nbytes;
  }
  return 0;
}

int lm_body_call(lm_body *b, const void *const *args, void *const *res, const size_t *res_size) {
  lm_kctx *k = b->k;
  for (uint32_t i = 0; i < b->nargs; i++) {
    if (atomic_load(&b->args[i]->refcount) != 1) { /* still referenced elsewhere: use a fresh one */
      lm_type t = b->args[i]->type;
      lm_buffer_release(b->args[i]);
      b->args[i] = NULL;
      LM_TRY(lm_kalloc(k, &t, &b->args[i]));
    }
    memcpy(b->args[i]->data, args[i], b->arg_size[i]);
  }
  LM_TRY(lm_exec_region(k, b->region, b->args, b->nargs, b->res, b->nres));
  int rc = 0;
  for (uint32_t i = 0; i < b->nres; i++) {
    lm_buffer *r = b->res[i];
    if (rc == 0 && (r->type.kind != LM_TYPE_TENSOR || r->nbytes != res_size[i]))
      rc = lm_kerr(k, LOOM_VERIFY, "body region %u result %u has %zu bytes; %zu expected", b->region, i, r->nbytes,
                   res_size[i]);
    if (rc == 0) memcpy(res[i], r->data, res_size[i]);
    lm_buffer_release(r);
    b->res[i] = NULL;
  }
  return rc;
}

void lm_body_free(lm_body *b) {
  if (b->args)
    for (uint32_t i = 0; i < b->nargs; i++) lm_buffer_release(b->args[i]);
  if (b->res)
    for (uint32_t i = 0; i < b->nres; i++) lm_buffer_release(b->res[i]);
  free(b->args);
  free(b->res);
  free(b->arg_size);
  memset(b, 0, sizeof *b);
}

/* ---- verifier helpers ---- */

static int attr_ints(const lm_op *op, const lm_attr *a, const char *name, int64_t *out, int cap, lm_err *err) {
  int n = lm_attr_ints(a, out, cap);
  if (n < 0)
    return lm_op_err(err, op, LOOM_VERIFY, "attribute '%s' must be a list of at most %d integers", name, cap);
  return n;
}

int lm_op_ints(const lm_op *op, const char *name, int64_t *out, int cap, int dflt_absent, lm_err *err) {
  const lm_attr *a = lm_op_attr(op, name);
  if (!a) {
    if (dflt_absent < 0) return lm_op_err(err, op, LOOM_VERIFY, "missing attribute '%s'", name);
    return dflt_absent;
  }
  return attr_ints(op, a, name, out, cap, err);
}

int lm_struct_ints(const lm_op *op, const lm_attr *s, const char *field, int64_t *out, int cap, lm_err *err) {
  if (!s) return 0;
  const lm_attr *a = lm_attrs_get(s->fields, s->n, field);
  if (!a) return 0;
  if (a->kind == LM_ATTR_INT) {
    if (cap < 1) return lm_op_err(err, op, LOOM_VERIFY, "'%s' has too many values", field);
    out[0] = a->i;
    return 1;
  }
  return attr_ints(op, a, field, out, cap, err);
}

int lm_check_arity(const lm_op *op, uint32_t nin, uint32_t nout, lm_err *err) {
  if (op->nin != nin || op->nout != nout)
    return lm_op_err(err, op, LOOM_VERIFY, "expects %u operand(s) and %u result(s), has %u and %u", nin, nout,
                     op->nin, op->nout);
  return 0;
}

int lm_check_tensor(const lm_op *op, const lm_func *fn, bool result, uint32_t i, lm_err *err) {
  const lm_type *t = &fn->value_types[result ? op->out[i] : op->in[i]];
  if (t->kind != LM_TYPE_TENSOR)
    return lm_op_err(err, op, LOOM_VERIFY, "%s %u must be a tensor", result ? "result" : "operand", i);
  if (!lm_type_is_static(t)) {
    char ts[256];
    return lm_op_err(err, op, LOOM_UNSUPPORTED, "%s %u has dynamic shape %s; only static shapes are supported",
                     result ? "result" : "operand", i, lm_type_str(t, ts, sizeof ts));
  }
  return 0;
}

int lm_check_tensors(const lm_op *op, const lm_func *fn, uint32_t nin, uint32_t nout, lm_err *err) {
  for (uint32_t i = 0; i < nin; i++) LM_TRY(lm_check_tensor(op, fn, false, i, err));
  for (uint32_t i = 0; i < nout; i++) LM_TRY(lm_check_tensor(op, fn, true, i, err));
  return 0;
}

int lm_check_results_like_operands(const lm_op *op, const lm_func *fn, lm_err *err) {
  for (uint32_t i = 0; i < op->nout; i++) {
    const lm_type *t = lm_vtype(fn, op->in[i]), *r = lm_vtype(fn, op->out[i]);
    if (!lm_type_equal(t, r)) {
      char a[256], b[256];
      return lm_op_err(err, op, LOOM_VERIFY, "result %u is %s but operand %u is %s", i, lm_type_str(r, a, sizeof a), i,
                       lm_type_str(t, b, sizeof b));
    }
  }
  return 0;
}

int lm_check_region_results(const lm_op *op, uint32_t r, const lm_func *fn, uint32_t n, const lm_dtype *dts,
                            const char *what, lm_err *err) {
  if (r >= op->nregions || op->regions[r].nblocks != 1 || op->regions[r].blocks[0].nops == 0)
    return lm_op_err(err, op, LOOM_VERIFY, "missing %s region", what);
  const lm_block *b = &op->regions[r].blocks[0];
  const lm_op *ret = &b->ops[b->nops - 1];
  if (ret->nin != n) return lm_op_err(err, op, LOOM_VERIFY, "%s must return %u value(s), returns %u", what, n, ret->nin);
  for (uint32_t i = 0; i < n; i++) {
    const lm_type *t = &fn->value_types[ret->in[i]];
    if (t->kind != LM_TYPE_TENSOR || t->rank != 0 || t->dtype != dts[i])
      return lm_op_err(err, op, LOOM_VERIFY, "%s result %u must be tensor<%s>", what, i, lm_dtype_name(dts[i]));
  }
  return 0;
}

bool lm_dims_valid(const int64_t *v, int n, int64_t bound) {
  for (int i = 0; i < n; i++) {
    if (v[i] < 0 || v[i] >= bound) return false;
    for (int j = 0; j < i; j++)
      if (v[j] == v[i]) return false;
  }
  return true;
}

bool lm_dims_sorted(const int64_t *v, int n) {
  for (int i = 1; i < n; i++)
    if (v[i - 1] >= v[i]) return false;
  return true;
}

bool lm_dims_contains(const int64_t *v, int n, int64_t x) {
  for (int i = 0; i < n; i++)
    if (v[i] == x) return true;
  return false;
}

const char *lm_ints_str(const int64_t *v, int n, char *buf, size_t cap) {
  size_t off = 0;
  if (cap == 0) return buf;
  buf[0] = 0;
  off += (size_t)snprintf(buf, cap, "[");
  for (int i = 0; i < n && off < cap; i++)
    off += (size_t)snprintf(buf + off, cap - off, "%s%lld", i ? ", " : "", (long long)v[i]);
  if (off < cap) snprintf(buf + off, cap - off, "]");
  return buf;
}
