/* Unit tests for net/auth.c: the challenge proofs and transfer keys (both sides agree, every
 * input matters), the secret file (format, permissions), and the client token store (add,
 * check, revoke, expire, malformed files and tokens). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>
#include "net/auth.h"

static void tmp_path(char *buf, size_t cap, const char *name) {
  snprintf(buf, cap, "/tmp/loom-test-auth-%ld-%s", (long)getpid(), name);
}

static void test_proofs(void **state) {
  uint8_t secret[32], other[32], nonce[32], ch[32], a[32], b[32];
  memset(secret, 1, sizeof secret);
  memset(other, 2, sizeof other);
  memset(nonce, 3, sizeof nonce);
  memset(ch, 4, sizeof ch);
  lm_auth_controller_proof(secret, nonce, ch, a);
  lm_auth_worker_proof(secret, nonce, ch, b);
  assert_false(lm_auth_equal(a, b, 32)); /* the two directions differ: one cannot be echoed as the other */
  lm_auth_worker_proof(other, nonce, ch, a);
  assert_false(lm_auth_equal(a, b, 32));
  ch[31] ^= 1;
  lm_auth_worker_proof(secret, nonce, ch, a);
  assert_false(lm_auth_equal(a, b, 32));
  ch[31] ^= 1;
  lm_auth_worker_proof(secret, nonce, ch, a);
  assert_true(lm_auth_equal(a, b, 32));
  uint8_t k1[LM_TOKEN_KEY_SIZE], k2[LM_TOKEN_KEY_SIZE];
  lm_auth_transfer_key(secret, nonce, ch, k1);
  nonce[0] ^= 1;
  lm_auth_transfer_key(secret, nonce, ch, k2);
  assert_memory_not_equal(k1, k2, sizeof k1);
  assert_memory_not_equal(k1, b, sizeof k1); /* not the proof that travels */
}

static void test_secret_file(void **state) {
  char p[256];
  tmp_path(p, sizeof p, "secret");
  lm_err e;
  uint8_t s1[32], s2[32];
  assert_int_equal(lm_auth_secret_create(p, &e), 0);
  struct stat st;
  assert_int_equal(stat(p, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0600);
  assert_int_equal(lm_auth_secret_read(p, s1, &e), 0);
  assert_int_equal(lm_auth_secret_create(p, &e), 0);
  assert_int_equal(lm_auth_secret_read(p, s2, &e), 0);
  assert_memory_not_equal(s1, s2, 32);
  chmod(p, 0640);
  assert_int_equal(lm_auth_secret_read(p, s1, &e), LOOM_PERMISSION);
  assert_non_null(strstr(e.msg, "chmod 600"));
  chmod(p, 0600);
  FILE *f = fopen(p, "w");
  fputs("abc\n", f);
  fclose(f);
  assert_int_equal(lm_auth_secret_read(p, s1, &e), LOOM_INVALID_ARGUMENT);
  unlink(p);
  assert_int_equal(lm_auth_secret_read(p, s1, &e), LOOM_NOT_FOUND);
}

static void test_tokens(void **state) {
  char p[256];
  tmp_path(p, sizeof p, "tokens");
  unlink(p);
  lm_err e;
  lm_token_store s;
  assert_int_equal(lm_tokens_load(p, &s, &e), 0); /* no file: empty */
  assert_int_equal(s.n, 0);
  char t1[LM_TOKEN_STR_LEN + 1], t2[LM_TOKEN_STR_LEN + 1];
  assert_int_equal(lm_tokens_add(&s, "bad name", 100, 0, "cli", t1, &e), LOOM_INVALID_ARGUMENT);
  assert_int_equal(lm_tokens_add(&s, "alice", 100, 0, "cli", t1, &e), 0);
  assert_int_equal(lm_tokens_add(&s, "bob", 100, 200, "up", t2, &e), 0);
  assert_int_equal(strlen(t1), LM_TOKEN_STR_LEN);
  assert_int_equal(lm_tokens_save(p, &s, &e), 0);
  lm_tokens_free(&s);
  assert_int_equal(lm_tokens_load(p, &s, &e), 0);
  assert_int_equal(s.n, 2);
  const lm_token_entry *who;
  assert_int_equal(lm_tokens_check(&s, t1, strlen(t1), 150, &who, &e), 0);
  assert_string_equal(who->user, "alice");
  assert_int_equal(lm_tokens_check(&s, t2, strlen(t2), 150, &who, &e), 0);
  assert_string_equal(who->user, "bob");
  assert_int_equal(lm_tokens_check(&s, t2, strlen(t2), 200, &who, &e), LOOM_PERMISSION); /* expired */
  assert_non_null(strstr(e.msg, "expired"));
  char forged[LM_TOKEN_STR_LEN + 1];
  memcpy(forged, t1, sizeof forged);
  forged[LM_TOKEN_STR_LEN - 1] = forged[LM_TOKEN_STR_LEN - 1] == '0' ? '1' : '0';
  assert_int_equal(lm_tokens_check(&s, forged, strlen(forged), 150, &who, &e), LOOM_PERMISSION);
  assert_non_null(strstr(e.msg, "not valid"));
  assert_int_equal(lm_tokens_check(&s, "", 0, 150, &who, &e), LOOM_PERMISSION);
  assert_non_null(strstr(e.msg, "requires a client token"));
  assert_int_equal(lm_tokens_check(&s, "loom_x", 6, 150, &who, &e), LOOM_PERMISSION);
  assert_non_null(strstr(e.msg, "malformed"));
  /* revoke by a prefix of the id */
  char prefix[8];
  memcpy(prefix, t1 + 5, 6);
  prefix[6] = 0;
  lm_token_entry *ent = lm_tokens_find(&s, prefix);
  assert_non_null(ent);
  assert_null(lm_tokens_find(&s, "ab")); /* too short to name one */
  ent->revoked = 160;
  assert_int_equal(lm_tokens_check(&s, t1, strlen(t1), 170, &who, &e), LOOM_PERMISSION);
  assert_non_null(strstr(e.msg, "revoked"));
  /* the file holds hashes only */
  FILE *f = fopen(p, "r");
  char buf[4096];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  assert_null(strstr(buf, t1 + 22));
  /* a malformed line is an error naming the line */
  f = fopen(p, "a");
  fputs("v1 nonsense\n", f);
  fclose(f);
  lm_tokens_free(&s);
  assert_int_equal(lm_tokens_load(p, &s, &e), LOOM_INVALID_ARGUMENT);
  assert_non_null(strstr(e.msg, ":4:"));
  unlink(p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_proofs),
      cmocka_unit_test(test_secret_file),
      cmocka_unit_test(test_tokens),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
