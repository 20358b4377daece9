/* Cluster secret, challenge proofs, transfer keys and the client token store (net/auth.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include "net/auth.h"

int lm_auth_random(void *buf, size_t n, lm_err *err) {
  if (RAND_bytes(buf, (int)n) != 1) return lm_errf(err, LOOM_INTERNAL, "cannot get random bytes (OpenSSL RAND_bytes)");
  return 0;
}

void lm_auth_wipe(void *p, size_t n) { OPENSSL_cleanse(p, n); }

int lm_auth_equal(const void *a, const void *b, size_t n) { return CRYPTO_memcmp(a, b, n) == 0; }

/* HMAC-SHA256(key, label || a || b) with a and b LM_AUTH_NONCE_SIZE bytes each. */
static void mac3(const uint8_t *key, const char *label, const uint8_t *a, const uint8_t *b, uint8_t out[32]) {
  uint8_t msg[32 + 2 * LM_AUTH_NONCE_SIZE];
  size_t l = strlen(label);
  memcpy(msg, label, l);
  memcpy(msg + l, a, LM_AUTH_NONCE_SIZE);
  memcpy(msg + l + LM_AUTH_NONCE_SIZE, b, LM_AUTH_NONCE_SIZE);
  unsigned outlen = 32;
  if (!HMAC(EVP_sha256(), key, LM_AUTH_SECRET_SIZE, msg, l + 2 * LM_AUTH_NONCE_SIZE, out, &outlen))
    memset(out, 0, 32); /* never matches a real proof: both sides compute with the same code */
}

void lm_auth_controller_proof(const uint8_t secret[LM_AUTH_SECRET_SIZE], const uint8_t nonce[LM_AUTH_NONCE_SIZE],
                              const uint8_t challenge[LM_AUTH_NONCE_SIZE], uint8_t out[LM_AUTH_MAC_SIZE]) {
  mac3(secret, "loom-controller", nonce, challenge, out);
}

void lm_auth_worker_proof(const uint8_t secret[LM_AUTH_SECRET_SIZE], const uint8_t nonce[LM_AUTH_NONCE_SIZE],
                          const uint8_t challenge[LM_AUTH_NONCE_SIZE], uint8_t out[LM_AUTH_MAC_SIZE]) {
  mac3(secret, "loom-worker", challenge, nonce, out);
}

void lm_auth_transfer_key(const uint8_t secret[LM_AUTH_SECRET_SIZE], const uint8_t nonce[LM_AUTH_NONCE_SIZE],
                          const uint8_t challenge[LM_AUTH_NONCE_SIZE], uint8_t out[LM_TOKEN_KEY_SIZE]) {
  uint8_t full[32];
  mac3(secret, "loom-transfer", challenge, nonce, full);
  memcpy(out, full, LM_TOKEN_KEY_SIZE);
  OPENSSL_cleanse(full, sizeof full);
}

void lm_auth_pair_key(const uint8_t master[LM_AUTH_SECRET_SIZE], uint32_t a, const uint8_t key_a[LM_TOKEN_KEY_SIZE],
                      uint32_t b, const uint8_t key_b[LM_TOKEN_KEY_SIZE], uint8_t out[LM_AUTH_PAIR_KEY_SIZE]) {
  if (b < a) {
    uint32_t t = a;
    a = b;
    b = t;
    const uint8_t *tk = key_a;
    key_a = key_b;
    key_b = tk;
  }
  uint8_t msg[12 + 2 * (4 + LM_TOKEN_KEY_SIZE)], full[32];
  size_t o = 0;
  memcpy(msg, "loom-dp-pair", 12);
  o = 12;
  for (int k = 0; k < 2; k++) {
    uint32_t id = k ? b : a;
    for (int i = 0; i < 4; i++) msg[o++] = (uint8_t)(id >> (8 * i));
    memcpy(msg + o, k ? key_b : key_a, LM_TOKEN_KEY_SIZE);
    o += LM_TOKEN_KEY_SIZE;
  }
  unsigned outlen = 32;
  if (!HMAC(EVP_sha256(), master, LM_AUTH_SECRET_SIZE, msg, o, full, &outlen)) memset(full, 0, sizeof full);
  memcpy(out, full, LM_AUTH_PAIR_KEY_SIZE);
  OPENSSL_cleanse(full, sizeof full);
}

static int hexval(int ch) {
  if (ch >= '0' && ch <= '9') return ch - '0';
  if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
  if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
  return -1;
}

static int from_hex(const char *s, size_t ndigits, uint8_t *out) {
  for (size_t i = 0; i < ndigits / 2; i++) {
    int hi = hexval((unsigned char)s[2 * i]), lo = hexval((unsigned char)s[2 * i + 1]);
    if (hi < 0 || lo < 0) return -1;
    out[i] = (uint8_t)(hi << 4 | lo);
  }
  return 0;
}

static void to_hex(const uint8_t *b, size_t n, char *out) {
  static const char d[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) out[2 * i] = d[b[i] >> 4], out[2 * i + 1] = d[b[i] & 15];
  out[2 * n] = 0;
}

/* Writes text to path through a temporary file created 0600, then rename. */
int lm_auth_write_private(const char *path, const char *text, lm_err *err) {
  char tmp[4200];
  if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= sizeof tmp)
    return lm_errf(err, LOOM_INVALID_ARGUMENT, "path too long: %s", path);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return lm_errf(err, LOOM_IO, "cannot write %s: %s", tmp, strerror(errno));
  size_t n = strlen(text), off = 0;
  int e = 0;
  while (off < n) {
    ssize_t w = write(fd, text + off, n - off);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      e = errno;
      break;
    }
    off += (size_t)w;
  }
  if (!e && fsync(fd) != 0) e = errno;
  if (close(fd) != 0 && !e) e = errno;
  if (!e && rename(tmp, path) != 0) e = errno;
  if (e) {
    unlink(tmp);
    return lm_errf(err, LOOM_IO, "cannot write %s: %s", path, strerror(e));
  }
  return 0;
}

/* Opens path for reading, refusing a file that anyone but its owner can read or write. */
static FILE *open_private(const char *path, const char *what, lm_err *err) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    lm_errf(err, errno == ENOENT ? LOOM_NOT_FOUND : LOOM_IO, "cannot read the %s %s: %s", what, path, strerror(errno));
    return NULL;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    lm_errf(err, LOOM_IO, "the %s %s is not a regular file", what, path);
    return NULL;
  }
  if (st.st_mode & 077) {
    close(fd);
    lm_errf(err, LOOM_PERMISSION, "the %s %s is accessible to other users (mode %03o); chmod 600 it", what, path,
            (unsigned)(st.st_mode & 0777));
    return NULL;
  }
  if (st.st_uid != geteuid()) {
    close(fd);
    lm_errf(err, LOOM_PERMISSION, "the %s %s belongs to another user (uid %u)", what, path, (unsigned)st.st_uid);
    return NULL;
  }
  FILE *f = fdopen(fd, "r");
  if (!f) {
    close(fd);
    lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  }
  return f;
}

int lm_auth_secret_read(const char *path, uint8_t out[LM_AUTH_SECRET_SIZE], lm_err *err) {
  FILE *f = open_private(path, "cluster secret", err);
  if (!f) return err->code;
  char line[256];
  bool ok = fgets(line, sizeof line, f) != NULL;
  fclose(f);
  if (ok) line[strcspn(line, "\r\n")] = 0;
  if (!ok || strlen(line) != 2 * LM_AUTH_SECRET_SIZE || from_hex(line, 2 * LM_AUTH_SECRET_SIZE, out) < 0)
    return lm_errf(err, LOOM_INVALID_ARGUMENT, "the cluster secret %s is not %d hex digits", path,
                   2 * LM_AUTH_SECRET_SIZE);
  return 0;
}

int lm_auth_secret_create(const char *path, lm_err *err) {
  uint8_t s[LM_AUTH_SECRET_SIZE];
  char text[2 * LM_AUTH_SECRET_SIZE + 2];
  LM_TRY(lm_auth_random(s, sizeof s, err));
  to_hex(s, sizeof s, text);
  strcat(text, "\n");
  int rc = lm_auth_write_private(path, text, err);
  OPENSSL_cleanse(s, sizeof s);
  OPENSSL_cleanse(text, sizeof text);
  return rc;
}

/* ---- tokens ---- */

bool lm_auth_user_ok(const char *u) {
  size_t n = u ? strlen(u) : 0;
  if (n == 0 || n > LM_TOKEN_USER_MAX) return false;
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)u[i];
    if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '.' ||
          ch == '_' || ch == '@' || ch == '-'))
      return false;
  }
  return true;
}

static int sha256(const void *data, size_t n, uint8_t out[32]) {
  unsigned len = 32;
  return EVP_Digest(data, n, out, &len, EVP_sha256(), NULL) == 1 ? 0 : -1;
}

static int push(lm_token_store *s, const lm_token_entry *e, lm_err *err) {
  if (s->n == s->cap) {
    size_t cap = s->cap ? s->cap * 2 : 16;
    lm_token_entry *v = realloc(s->v, cap * sizeof *v);
    if (!v) return lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
    s->v = v;
    s->cap = cap;
  }
  s->v[s->n++] = *e;
  return 0;
}

void lm_tokens_free(lm_token_store *s) {
  free(s->v);
  memset(s, 0, sizeof *s);
}

static bool id_ok(const char *id) {
  if (strlen(id) != LM_TOKEN_ID_LEN) return false;
  for (const char *p = id; *p; p++)
    if (hexval((unsigned char)*p) < 0) return false;
  return true;
}

/* File format, one token a line:
 *   v1 ID USER SHA256HEX CREATED EXPIRES REVOKED ORIGIN
 * Lines starting with '#' are comments. */
int lm_tokens_load(const char *path, lm_token_store *s, lm_err *err) {
  memset(s, 0, sizeof *s);
  lm_err e2;
  FILE *f = open_private(path, "token file", &e2);
  if (!f) {
    if (e2.code == LOOM_NOT_FOUND) return 0;
    *err = e2;
    return e2.code;
  }
  char line[512];
  int lineno = 0, rc = 0;
  while (rc == 0 && fgets(line, sizeof line, f)) {
    lineno++;
    if (line[0] == '#' || line[0] == '\n') continue;
    char ver[8], id[64], user[128], hash[128], origin[16];
    long long created, expires, revoked;
    lm_token_entry e = {0};
    if (sscanf(line, "%7s %63s %127s %127s %lld %lld %lld %15s", ver, id, user, hash, &created, &expires, &revoked,
               origin) != 8 ||
        strcmp(ver, "v1") != 0 || !id_ok(id) || !lm_auth_user_ok(user) || strlen(hash) != 64 ||
        from_hex(hash, 64, e.hash) < 0 || strlen(origin) >= sizeof e.origin) {
      rc = lm_errf(err, LOOM_INVALID_ARGUMENT, "%s:%d: not a token line", path, lineno);
      break;
    }
    snprintf(e.id, sizeof e.id, "%s", id);
    memcpy(e.user, user, strlen(user) + 1); /* lm_auth_user_ok: at most 64 */
    snprintf(e.origin, sizeof e.origin, "%s", origin);
    e.created = created, e.expires = expires, e.revoked = revoked;
    rc = push(s, &e, err);
  }
  fclose(f);
  if (rc < 0) lm_tokens_free(s);
  return rc;
}

int lm_tokens_save(const char *path, const lm_token_store *s, lm_err *err) {
  size_t cap = 128 + s->n * 256;
  char *text = malloc(cap);
  if (!text) return lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  size_t n = (size_t)snprintf(text, cap, "# loom client tokens (hashed): v1 id user sha256 created expires revoked origin\n");
  for (size_t i = 0; i < s->n; i++) {
    const lm_token_entry *e = &s->v[i];
    char hex[65];
    to_hex(e->hash, 32, hex);
    n += (size_t)snprintf(text + n, cap - n, "v1 %s %s %s %lld %lld %lld %s\n", e->id, e->user, hex,
                          (long long)e->created, (long long)e->expires, (long long)e->revoked, e->origin);
  }
  int rc = lm_auth_write_private(path, text, err);
  free(text);
  return rc;
}

int lm_tokens_lock(const char *path, lm_err *err) {
  char lp[4200];
  snprintf(lp, sizeof lp, "%s.lock", path);
  int fd = open(lp, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return lm_errf(err, LOOM_IO, "cannot open %s: %s", lp, strerror(errno));
  while (flock(fd, LOCK_EX) != 0)
    if (errno != EINTR) {
      int e = errno;
      close(fd);
      return lm_errf(err, LOOM_IO, "cannot lock %s: %s", lp, strerror(e));
    }
  return fd;
}

int lm_tokens_add(lm_token_store *s, const char *user, int64_t now, int64_t expires, const char *origin, char *out,
                  lm_err *err) {
  if (!lm_auth_user_ok(user))
    return lm_errf(err, LOOM_INVALID_ARGUMENT, "user names are 1-%d of the characters A-Z a-z 0-9 . _ @ -",
                   LM_TOKEN_USER_MAX);
  lm_token_entry e = {0};
  uint8_t id[LM_TOKEN_ID_LEN / 2], sec[32];
  do {
    LM_TRY(lm_auth_random(id, sizeof id, err));
    to_hex(id, sizeof id, e.id);
  } while (lm_tokens_find(s, e.id));
  LM_TRY(lm_auth_random(sec, sizeof sec, err));
  char sechex[65];
  to_hex(sec, sizeof sec, sechex);
  snprintf(out, LM_TOKEN_STR_LEN + 1, "loom_%s_%s", e.id, sechex);
  OPENSSL_cleanse(sec, sizeof sec);
  OPENSSL_cleanse(sechex, sizeof sechex);
  if (sha256(out, LM_TOKEN_STR_LEN, e.hash) < 0) return lm_errf(err, LOOM_INTERNAL, "SHA-256 failed");
  snprintf(e.user, sizeof e.user, "%s", user);
  snprintf(e.origin, sizeof e.origin, "%s", origin);
  e.created = now;
  e.expires = expires;
  return push(s, &e, err);
}

lm_token_entry *lm_tokens_find(lm_token_store *s, const char *id) {
  size_t n = strlen(id), hits = 0;
  lm_token_entry *hit = NULL;
  if (n < 4 || n > LM_TOKEN_ID_LEN) return NULL;
  for (size_t i = 0; i < s->n; i++)
    if (strncmp(s->v[i].id, id, n) == 0) hit = &s->v[i], hits++;
  return hits == 1 ? hit : NULL;
}

int lm_tokens_check(const lm_token_store *s, const void *tok, size_t len, int64_t now, const lm_token_entry **who,
                    lm_err *err) {
  const char *t = tok;
  if (!tok || len == 0)
    return lm_errf(err, LOOM_PERMISSION,
                   "this controller requires a client token: set LOOM_TOKEN (make one with `loom token create --user "
                   "NAME` on the controller's host)");
  if (len != LM_TOKEN_STR_LEN || memcmp(t, "loom_", 5) != 0 || t[5 + LM_TOKEN_ID_LEN] != '_')
    return lm_errf(err, LOOM_PERMISSION, "the client token is malformed (expected loom_<16 hex>_<64 hex>)");
  char id[LM_TOKEN_ID_LEN + 1];
  memcpy(id, t + 5, LM_TOKEN_ID_LEN);
  id[LM_TOKEN_ID_LEN] = 0;
  uint8_t h[32];
  if (sha256(tok, len, h) < 0) return lm_errf(err, LOOM_INTERNAL, "SHA-256 failed");
  for (size_t i = 0; i < s->n; i++) {
    const lm_token_entry *e = &s->v[i];
    if (strcmp(e->id, id) != 0 || !lm_auth_equal(e->hash, h, 32)) continue;
    if (e->revoked) return lm_errf(err, LOOM_PERMISSION, "client token %s (user %s) was revoked", e->id, e->user);
    if (e->expires && now >= e->expires)
      return lm_errf(err, LOOM_PERMISSION, "client token %s (user %s) has expired", e->id, e->user);
    *who = e;
    return 0;
  }
  return lm_errf(err, LOOM_PERMISSION, "the client token is not valid for this controller");
}

void lm_sha256(const void *data, size_t n, uint8_t out[32]) {
  unsigned int len = 32;
  if (EVP_Digest(data, n, out, &len, EVP_sha256(), NULL) != 1) memset(out, 0, 32);
}
