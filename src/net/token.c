/* SipHash-2-4 and the transfer tokens built on it. */
#include <string.h>
#include "net/token.h"

static uint64_t rd64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                   \
  do {                                                             \
    v0 += v1; v1 = ROTL(v1, 13); v1 ^= v0; v0 = ROTL(v0, 32);      \
    v2 += v3; v3 = ROTL(v3, 16); v3 ^= v2;                         \
    v0 += v3; v3 = ROTL(v3, 21); v3 ^= v0;                         \
    v2 += v1; v1 = ROTL(v1, 17); v1 ^= v2; v2 = ROTL(v2, 32);      \
  } while (0)

uint64_t lm_siphash24(const uint8_t key[LM_TOKEN_KEY_SIZE], const void *data, size_t n) {
  const uint8_t *in = data;
  uint64_t k0 = rd64(key), k1 = rd64(key + 8);
  uint64_t v0 = 0x736f6d6570736575ull ^ k0, v1 = 0x646f72616e646f6dull ^ k1;
  uint64_t v2 = 0x6c7967656e657261ull ^ k0, v3 = 0x7465646279746573ull ^ k1;
  size_t full = n & ~(size_t)7;
  for (size_t i = 0; i < full; i += 8) {
    uint64_t m = rd64(in + i);
    v3 ^= m;
    SIPROUND;
    SIPROUND;
    v0 ^= m;
  }
  uint64_t b = (uint64_t)n << 56;
  for (size_t i = 0; i < (n & 7); i++) b |= (uint64_t)in[full + i] << (8 * i);
  v3 ^= b;
  SIPROUND;
  SIPROUND;
  v0 ^= b;
  v2 ^= 0xff;
  SIPROUND;
  SIPROUND;
  SIPROUND;
  SIPROUND;
  return v0 ^ v1 ^ v2 ^ v3;
}

static void put64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t token_of(const uint8_t key[LM_TOKEN_KEY_SIZE], int kind, uint64_t session, uint64_t array,
                         uint32_t worker, uint32_t local_index, uint32_t dtype, const uint64_t *dims, size_t rank) {
  uint8_t buf[8 * (6 + 17)];
  size_t n = 0;
  if (rank > 16) rank = 17; /* never valid; still hashed distinctly */
  put64(buf + n, (uint64_t)kind), n += 8;
  put64(buf + n, session), n += 8;
  put64(buf + n, array), n += 8;
  put64(buf + n, (uint64_t)worker << 32 | local_index), n += 8;
  put64(buf + n, dtype), n += 8;
  put64(buf + n, rank), n += 8;
  for (size_t i = 0; i < rank && i < 16; i++) put64(buf + n, dims[i]), n += 8;
  return lm_siphash24(key, buf, n);
}

void lm_token_make(const uint8_t key[LM_TOKEN_KEY_SIZE], int kind, uint64_t session, uint64_t array,
                   uint32_t worker, uint32_t local_index, uint32_t dtype, const uint64_t *dims, size_t rank,
                   uint8_t out[LM_TOKEN_SIZE]) {
  put64(out, token_of(key, kind, session, array, worker, local_index, dtype, dims, rank));
}

int lm_token_check(const uint8_t key[LM_TOKEN_KEY_SIZE], int kind, uint64_t session, uint64_t array,
                   uint32_t worker, uint32_t local_index, uint32_t dtype, const uint64_t *dims, size_t rank,
                   const uint8_t *tok, size_t len) {
  if (len != LM_TOKEN_SIZE || !tok) return 0;
  uint8_t want[LM_TOKEN_SIZE];
  lm_token_make(key, kind, session, array, worker, local_index, dtype, dims, rank, want);
  uint8_t diff = 0;
  for (size_t i = 0; i < LM_TOKEN_SIZE; i++) diff |= (uint8_t)(want[i] ^ tok[i]);
  return diff == 0;
}
