/* Op: rng_bit_generator (StableHLO spec 'rng_bit_generator'), bit-exact with XLA's expansion of
 * the op (RngBitGeneratorExpander over ThreeFryBitGenerator / PhiloxBitGenerator), so programs give
 * the same bits as under jax.jit on CPU:
 *   - state[0] is the key; THREE_FRY uses state[1] as a 64-bit counter, PHILOX a 128-bit counter
 *     (low, high) = (state[1], state[0]) for a 2-word state, (state[1], state[2]) for 3 words;
 *   - THREE_FRY (Threefry-2x32, 20 rounds): 64-bit outputs take one block per element (counter +
 *     row-major index); 32-bit ones split the shape in two along its first even dimension (else
 *     its first largest one) and take both words of each block for neighbouring elements there;
 *     narrower types keep the low bits of the 32-bit result;
 *   - PHILOX (Philox-4x32, 10 rounds): blocks of 4 words (2 for 64-bit outputs) in row-major order;
 *   - DEFAULT is PHILOX, XLA's CPU default;
 *   - the output state keeps the key and advances the counter by the number of blocks used.
 * Floating-point outputs receive the random bits of their width (bit patterns, as bitcast). */
#include <string.h>
#include "exec/ops_util.h"

/* ---- Threefry-2x32 ---- */

static inline uint32_t rotl32(uint32_t v, int d) { return (v << d) | (v >> (32 - d)); }

static void threefry2x32(uint32_t k0, uint32_t k1, uint32_t *x0, uint32_t *x1) {
  static const int rot[8] = {13, 15, 26, 6, 17, 29, 16, 24};
  uint32_t ks[3] = {k0, k1, 0x1BD11BDAu ^ k0 ^ k1};
  uint32_t a = *x0 + ks[0], b = *x1 + ks[1];
  for (int blk = 0; blk < 5; blk++) {
    const int *r = rot + (blk % 2) * 4;
    for (int i = 0; i < 4; i++) {
      a += b;
      b = rotl32(b, r[i]);
      b ^= a;
    }
    a += ks[(blk + 1) % 3];
    b += ks[(blk + 2) % 3] + (uint32_t)(blk + 1);
  }
  *x0 = a;
  *x1 = b;
}

/* ---- Philox-4x32 ---- */

static void philox4x32(uint32_t k0, uint32_t k1, uint32_t x[4]) {
  for (int round = 0; round < 10; round++) {
    uint64_t p0 = (uint64_t)x[0] * 0xD2511F53u, p1 = (uint64_t)x[2] * 0xCD9E8D57u;
    uint32_t y0 = (uint32_t)(p1 >> 32) ^ x[1] ^ k0, y1 = (uint32_t)p1;
    uint32_t y2 = (uint32_t)(p0 >> 32) ^ x[3] ^ k1, y3 = (uint32_t)p0;
    x[0] = y0;
    x[1] = y1;
    x[2] = y2;
    x[3] = y3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
}

/* Writes v (a 32- or 64-bit word) truncated to es bytes at element i of out. */
static inline void put_bits(void *out, size_t es, int64_t i, uint64_t v) {
  memcpy((char *)out + i * (int64_t)es, &v, es); /* little-endian: the low es bytes */
}

typedef enum { ALG_THREEFRY, ALG_PHILOX } alg_t;

static int algorithm(const lm_op *op, alg_t *a) {
  const lm_attr *at = lm_op_attr(op, "rng_algorithm");
  const char *s = at && at->s ? at->s : "DEFAULT";
  if (!strcmp(s, "THREE_FRY")) *a = ALG_THREEFRY;
  else if (!strcmp(s, "PHILOX") || !strcmp(s, "DEFAULT")) *a = ALG_PHILOX;
  else return -1;
  return 0;
}

static int v_rng_bit_generator(const lm_op *op, const lm_func *fn, lm_err *err) {
  if (op->nin != 1 || op->nout != 2) return lm_op_err(err, op, LOOM_VERIFY, "expects 1 operand and 2 results");
  LM_TRY(lm_check_tensor(op, fn, false, 0, err));
  LM_TRY(lm_check_tensor(op, fn, true, 0, err));
  LM_TRY(lm_check_tensor(op, fn, true, 1, err));
  const lm_type *st = lm_vtype(fn, op->in[0]), *os = lm_vtype(fn, op->out[0]), *o = lm_vtype(fn, op->out[1]);
  alg_t a;
  if (algorithm(op, &a) < 0) {
    const lm_attr *at = lm_op_attr(op, "rng_algorithm");
    return lm_op_err(err, op, LOOM_VERIFY, "unknown rng_algorithm '%s'", at && at->s ? at->s : "?");
  }
  if (st->rank != 1 || st->dtype != LOOM_DTYPE_U64) return lm_op_err(err, op, LOOM_VERIFY, "initial_state must be a 1-d ui64 tensor");
  if (!lm_type_equal(st, os)) return lm_op_err(err, op, LOOM_VERIFY, "output_state must have the type of initial_state");
  int64_t n = st->dims[0];
  if (a == ALG_THREEFRY && n != 2) return lm_op_err(err, op, LOOM_VERIFY, "THREE_FRY needs a state of 2 words, got %lld", (long long)n);
  if (a == ALG_PHILOX && n != 2 && n != 3)
    return lm_op_err(err, op, LOOM_VERIFY, "PHILOX needs a state of 2 or 3 words, got %lld", (long long)n);
  if (!(lm_dtype_is_int(o->dtype) || lm_dtype_is_float(o->dtype)))
    return lm_op_err(err, op, LOOM_UNSUPPORTED, "output element type %s is not supported (integer or float types are)",
                     lm_dtype_name(o->dtype));
  return 0;
}

static void threefry_run(uint64_t key, uint64_t *ctr, lm_buffer *out) {
  const lm_type *t = &out->type;
  size_t es = lm_dtype_size(t->dtype);
  uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
  int64_t n = lm_type_numel(t);
  if (es == 8) {
    for (int64_t i = 0; i < n; i++) {
      uint64_t c = *ctr + (uint64_t)i;
      uint32_t x0 = (uint32_t)c, x1 = (uint32_t)(c >> 32);
      threefry2x32(k0, k1, &x0, &x1);
      put_bits(out->data, es, i, (uint64_t)x0 | ((uint64_t)x1 << 32));
    }
    *ctr += (uint64_t)n;
    return;
  }
  /* 32 bits and narrower: two halves of the shape along split dim s */
  if (t->rank == 0) {
    uint32_t x0 = (uint32_t)*ctr, x1 = (uint32_t)(*ctr >> 32);
    threefry2x32(k0, k1, &x0, &x1);
    put_bits(out->data, es, 0, x0);
    *ctr += 1;
    return;
  }
  int s = -1;
  for (int d = 0; d < t->rank && s < 0; d++)
    if (t->dims[d] % 2 == 0) s = d;
  if (s < 0) {
    s = 0;
    for (int d = 1; d < t->rank; d++)
      if (t->dims[d] > t->dims[s]) s = d;
  }
  int64_t half[LM_MAX_RANK], strides[LM_MAX_RANK], idx[LM_MAX_RANK] = {0};
  memcpy(half, t->dims, sizeof half);
  half[s] = (t->dims[s] + 1) / 2;
  lm_row_strides(t, strides);
  int64_t nh = 1;
  for (int d = 0; d < t->rank; d++) nh *= half[d];
  for (int64_t l = 0; l < nh; l++) {
    uint64_t c = *ctr + (uint64_t)l;
    uint32_t x0 = (uint32_t)c, x1 = (uint32_t)(c >> 32);
    threefry2x32(k0, k1, &x0, &x1);
    int64_t off = 0;
    for (int d = 0; d < t->rank; d++) off += (d == s ? 2 * idx[d] : idx[d]) * strides[d];
    put_bits(out->data, es, off, x0);
    if (2 * idx[s] + 1 < t->dims[s]) put_bits(out->data, es, off + strides[s], x1);
    lm_index_next(t->rank, half, idx);
  }
  *ctr += (uint64_t)nh;
}

static void philox_run(uint64_t key, uint64_t *lo, uint64_t *hi, lm_buffer *out) {
  const lm_type *t = &out->type;
  size_t es = lm_dtype_size(t->dtype);
  uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
  int64_t n = lm_type_numel(t);
  int per = es == 8 ? 2 : 4; /* elements per 128-bit block */
  int64_t nv = (n + per - 1) / per;
  for (int64_t i = 0; i < nv; i++) {
    uint64_t l = *lo + (uint64_t)i, h = *hi + (l < *lo ? 1 : 0);
    uint32_t x[4] = {(uint32_t)l, (uint32_t)(l >> 32), (uint32_t)h, (uint32_t)(h >> 32)};
    philox4x32(k0, k1, x);
    if (per == 2) {
      if (2 * i < n) put_bits(out->data, es, 2 * i, (uint64_t)x[0] | ((uint64_t)x[1] << 32));
      if (2 * i + 1 < n) put_bits(out->data, es, 2 * i + 1, (uint64_t)x[2] | ((uint64_t)x[3] << 32));
    } else {
      for (int j = 0; j < 4 && 4 * i + j < n; j++) put_bits(out->data, es, 4 * i + j, x[j]);
    }
  }
  uint64_t nl = *lo + (uint64_t)nv;
  if (nl < *lo) *hi += 1;
  *lo = nl;
}

static int k_rng_bit_generator(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  alg_t a = ALG_PHILOX;
  algorithm(k->op, &a);
  const uint64_t *st = in[0]->data;
  uint64_t *ns = out[0]->data;
  int64_t n = in[0]->type.dims[0];
  uint64_t key = st[0];
  if (a == ALG_THREEFRY) {
    uint64_t ctr = st[1];
    threefry_run(key, &ctr, out[1]);
    ns[0] = key;
    ns[1] = ctr;
  } else {
    uint64_t lo = st[1], hi = n >= 3 ? st[2] : st[0];
    philox_run(key, &lo, &hi, out[1]);
    ns[0] = key;
    ns[1] = lo;
    if (n >= 3) ns[2] = hi;
  }
  return 0;
}

void lm_register_rng_kernels(void) {
  lm_kernel_register(LM_OP_RNG_BIT_GENERATOR, k_rng_bit_generator, v_rng_bit_generator, 0);
}
