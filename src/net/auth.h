/* Authentication: the cluster secret that workers prove they hold (an HMAC-SHA256 challenge in
 * both directions, so the secret never crosses the wire), the per-worker transfer keys derived
 * from that exchange, and the store of client tokens (`loom token`), kept hashed in a file of
 * the controller's state directory. The cryptography is OpenSSL's (HMAC-SHA256, SHA-256,
 * RAND_bytes, CRYPTO_memcmp); the handshake is described in docs/protocol.md "Authentication". */
#ifndef LM_NET_AUTH_H
#define LM_NET_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "common/err.h"
#include "net/token.h"

#define LM_AUTH_SECRET_SIZE 32 /* the cluster secret, bytes (hex in its file) */
#define LM_AUTH_NONCE_SIZE 32  /* each side's half of the challenge */
#define LM_AUTH_MAC_SIZE 32    /* HMAC-SHA256 */

/* n cryptographically random bytes (OpenSSL RAND_bytes). */
int lm_auth_random(void *buf, size_t n, lm_err *err);
/* Overwrites n bytes at p with zeros in a way the compiler keeps (OPENSSL_cleanse). */
void lm_auth_wipe(void *p, size_t n);
/* 1 when a and b (n bytes each) are equal; time independent of where they differ. */
int lm_auth_equal(const void *a, const void *b, size_t n);

/* The controller's proof to a worker: HMAC(secret, "loom-controller" || nonce || challenge). */
void lm_auth_controller_proof(const uint8_t secret[LM_AUTH_SECRET_SIZE], const uint8_t nonce[LM_AUTH_NONCE_SIZE],
                              const uint8_t challenge[LM_AUTH_NONCE_SIZE], uint8_t out[LM_AUTH_MAC_SIZE]);
/* The worker's proof to the controller: HMAC(secret, "loom-worker" || challenge || nonce). */
void lm_auth_worker_proof(const uint8_t secret[LM_AUTH_SECRET_SIZE], const uint8_t nonce[LM_AUTH_NONCE_SIZE],
                          const uint8_t challenge[LM_AUTH_NONCE_SIZE], uint8_t out[LM_AUTH_MAC_SIZE]);
/* The worker's transfer key for this registration: HMAC(secret, "loom-transfer" || challenge ||
 * nonce), first 16 bytes. Both sides compute it; it never travels. */
void lm_auth_transfer_key(const uint8_t secret[LM_AUTH_SECRET_SIZE], const uint8_t nonce[LM_AUTH_NONCE_SIZE],
                          const uint8_t challenge[LM_AUTH_NONCE_SIZE], uint8_t out[LM_TOKEN_KEY_SIZE]);

/* The data-plane key of workers a and b (either order): HMAC(master, "loom-dp-pair" || lo ||
 * key_lo || hi || key_hi), first LM_AUTH_PAIR_KEY_SIZE bytes, with lo < hi the two ids and key_x
 * worker x's transfer key of its current registration (so a new registration makes new pair
 * keys). master is the controller's own random secret: workers get only their pairs' keys. */
#define LM_AUTH_PAIR_KEY_SIZE 16
void lm_auth_pair_key(const uint8_t master[LM_AUTH_SECRET_SIZE], uint32_t a, const uint8_t key_a[LM_TOKEN_KEY_SIZE],
                      uint32_t b, const uint8_t key_b[LM_TOKEN_KEY_SIZE], uint8_t out[LM_AUTH_PAIR_KEY_SIZE]);

/* Writes text to path (mode 0600; a temporary file, then rename). */
int lm_auth_write_private(const char *path, const char *text, lm_err *err);
/* Reads a secret file (64 hex digits and a newline). Refuses a file that others can read. */
int lm_auth_secret_read(const char *path, uint8_t out[LM_AUTH_SECRET_SIZE], lm_err *err);
/* Writes a fresh random secret to path (mode 0600, atomically). */
int lm_auth_secret_create(const char *path, lm_err *err);

/* ---- client tokens ----
 * A token is "loom_" ID "_" SECRET: ID 16 hex digits (names it in `loom token list|revoke`),
 * SECRET 64 hex digits. The store keeps, per token, its id, user, SHA-256 of the whole token,
 * creation, expiry and revocation times (Unix seconds, 0 = never) and who made it ("up" for
 * `loom up`'s token for the local user, "cli" for `loom token create`). */
#define LM_TOKEN_ID_LEN 16
#define LM_TOKEN_STR_LEN (5 + LM_TOKEN_ID_LEN + 1 + 64)
#define LM_TOKEN_USER_MAX 64

typedef struct lm_token_entry {
  char id[LM_TOKEN_ID_LEN + 1];
  char user[LM_TOKEN_USER_MAX + 1];
  uint8_t hash[32];               /* SHA-256 of the token string */
  int64_t created, expires, revoked;
  char origin[8];                 /* "up" or "cli" */
} lm_token_entry;

typedef struct lm_token_store {
  lm_token_entry *v;
  size_t n, cap;
} lm_token_store;

/* SHA-256 of data[0..n) (programs' content addresses). */
void lm_sha256(const void *data, size_t n, uint8_t out[32]);

/* A user name: 1-64 of [A-Za-z0-9._@-]. */
bool lm_auth_user_ok(const char *user);
/* Loads the store at path; a missing file is an empty store. Malformed lines are errors. */
int lm_tokens_load(const char *path, lm_token_store *s, lm_err *err);
/* Writes the store to path (mode 0600, atomically). */
int lm_tokens_save(const char *path, const lm_token_store *s, lm_err *err);
void lm_tokens_free(lm_token_store *s);
/* Takes an exclusive lock for a read-modify-write of the store (path ".lock"); returns the fd to
 * close, or < 0 with err set. */
int lm_tokens_lock(const char *path, lm_err *err);
/* Adds a new token for user (expires: Unix seconds, 0 = never); the token string (NUL-terminated,
 * LM_TOKEN_STR_LEN characters) goes to out, which holds LM_TOKEN_STR_LEN + 1 bytes. */
int lm_tokens_add(lm_token_store *s, const char *user, int64_t now, int64_t expires, const char *origin,
                  char *out, lm_err *err);
/* The entry whose id is id (a prefix of 4 or more digits names it when unique), else NULL. */
lm_token_entry *lm_tokens_find(lm_token_store *s, const char *id);
/* Checks a token a client presented: 0 and *who = its entry, or LOOM_PERMISSION with the reason
 * (no token, malformed, unknown, revoked, expired) in err. */
int lm_tokens_check(const lm_token_store *s, const void *tok, size_t len, int64_t now, const lm_token_entry **who,
                    lm_err *err);

#endif
