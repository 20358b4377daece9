/* The transfer tokens: SipHash-2-4 (OpenSSL's) of what a transfer names, under the worker's key. */
#include <pthread.h>
#include <string.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include "net/token.h"

static EVP_MAC *siphash;
static pthread_once_t siphash_once = PTHREAD_ONCE_INIT;

static void siphash_fetch(void) { siphash = EVP_MAC_fetch(NULL, "SIPHASH", NULL); }

uint64_t lm_siphash24(const uint8_t key[LM_TOKEN_KEY_SIZE], const void *data, size_t n) {
  pthread_once(&siphash_once, siphash_fetch);
  uint8_t out[8] = {0};
  size_t len = 0, size = sizeof out;
  OSSL_PARAM prm[] = {OSSL_PARAM_construct_size_t(OSSL_MAC_PARAM_SIZE, &size), OSSL_PARAM_construct_end()};
  EVP_MAC_CTX *m = siphash ? EVP_MAC_CTX_new(siphash) : NULL;
  /* on failure the value is 0, which no check accepts from a real key (both sides use this) */
  if (!m || !EVP_MAC_init(m, key, LM_TOKEN_KEY_SIZE, prm) || !EVP_MAC_update(m, data, n) ||
      !EVP_MAC_final(m, out, &len, sizeof out) || len != sizeof out)
    memset(out, 0, sizeof out);
  EVP_MAC_CTX_free(m);
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | out[i];
  return v;
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
