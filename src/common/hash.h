/* 64-bit non-cryptographic hashing (FNV-1a with a final mix) for fingerprints and tables. */
#ifndef LM_HASH_H
#define LM_HASH_H

#include <stddef.h>
#include <stdint.h>

#define LM_HASH_SEED 0xcbf29ce484222325ull
uint64_t lm_hash64(const void *data, size_t n, uint64_t seed);
static inline uint64_t lm_hash_mix(uint64_t h) {
  h ^= h >> 33; h *= 0xff51afd7ed558ccdull; h ^= h >> 33; h *= 0xc4ceb9fe1a85ec53ull; h ^= h >> 33;
  return h;
}

#endif
