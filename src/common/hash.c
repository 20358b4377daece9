/* FNV-1a over bytes, finalized with a 64-bit mixer so low bits are usable as table indices. */
#include "common/hash.h"

uint64_t lm_hash64(const void *data, size_t n, uint64_t seed) {
  const unsigned char *p = data;
  uint64_t h = seed;
  for (size_t i = 0; i < n; i++) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return lm_hash_mix(h);
}
