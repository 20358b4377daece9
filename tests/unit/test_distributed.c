/* Unit tests for the pieces of the distributed runtime that need no processes: transfer tokens
 * (SipHash-2-4 against its published test vector), client-chosen session handle ids and their
 * deleted marks, the registry's data-plane addresses. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "controller/registry.h"
#include "controller/session.h"
#include "net/token.h"

static void test_siphash_vector(void **state) {
  (void)state;
  /* Aumasson & Bernstein, SipHash paper, appendix A: key 00..0f, message 00..0e */
  uint8_t key[16], msg[15];
  for (int i = 0; i < 16; i++) key[i] = (uint8_t)i;
  for (int i = 0; i < 15; i++) msg[i] = (uint8_t)i;
  assert_true(lm_siphash24(key, msg, 15) == 0xa129ca6149be45e5ull);
  assert_true(lm_siphash24(key, msg, 0) == 0x726fdb47dd0e0e31ull);
}

static void test_tokens(void **state) {
  (void)state;
  uint8_t key[16] = {1, 2, 3}, other[16] = {9};
  uint64_t dims[2] = {4, 8}, dims2[2] = {4, 9};
  uint8_t tok[LM_TOKEN_SIZE];
  lm_token_make(key, LM_TOKEN_PUT, 7, 11, 1, 2, 12, dims, 2, tok);
  assert_true(lm_token_check(key, LM_TOKEN_PUT, 7, 11, 1, 2, 12, dims, 2, tok, sizeof tok));
  assert_false(lm_token_check(other, LM_TOKEN_PUT, 7, 11, 1, 2, 12, dims, 2, tok, sizeof tok));   /* key */
  assert_false(lm_token_check(key, LM_TOKEN_GET, 7, 11, 1, 2, 12, dims, 2, tok, sizeof tok));     /* kind */
  assert_false(lm_token_check(key, LM_TOKEN_PUT, 8, 11, 1, 2, 12, dims, 2, tok, sizeof tok));     /* session */
  assert_false(lm_token_check(key, LM_TOKEN_PUT, 7, 12, 1, 2, 12, dims, 2, tok, sizeof tok));     /* array */
  assert_false(lm_token_check(key, LM_TOKEN_PUT, 7, 11, 0, 2, 12, dims, 2, tok, sizeof tok));     /* worker */
  assert_false(lm_token_check(key, LM_TOKEN_PUT, 7, 11, 1, 3, 12, dims, 2, tok, sizeof tok));     /* device */
  assert_false(lm_token_check(key, LM_TOKEN_PUT, 7, 11, 1, 2, 12, dims2, 2, tok, sizeof tok));    /* shape */
  assert_false(lm_token_check(key, LM_TOKEN_PUT, 7, 11, 1, 2, 12, dims, 1, tok, sizeof tok));     /* rank */
  assert_false(lm_token_check(key, LM_TOKEN_PUT, 7, 11, 1, 2, 12, dims, 2, tok, 7));              /* length */
  assert_false(lm_token_check(key, LM_TOKEN_PUT, 7, 11, 1, 2, 12, dims, 2, NULL, 8));
}

static int g_destroyed;
static void count_destroy(void *p) {
  g_destroyed++;
  free(p);
}

static void test_session_client_ids(void **state) {
  (void)state;
  lm_session *s = lm_session_create(3, "c", "p", 0);
  lm_err e;
  assert_int_equal(lm_session_add_id(s, 0, 1, NULL, NULL, &e), LOOM_INVALID_ARGUMENT);
  assert_int_equal(lm_session_add_id(s, 5, 1, malloc(1), count_destroy, &e), 0);
  void *dup = malloc(1);
  assert_int_equal(lm_session_add_id(s, 5, 1, dup, count_destroy, &e), LOOM_INVALID_ARGUMENT);
  free(dup); /* not taken */
  assert_true(lm_session_has(s, 5));
  assert_false(lm_session_was_deleted(s, 5));
  assert_int_equal(lm_session_forget(s, 5, 1, &e), 0);
  assert_int_equal(g_destroyed, 1);
  assert_false(lm_session_has(s, 5));
  assert_true(lm_session_was_deleted(s, 5));
  assert_int_equal(lm_session_add_id(s, 5, 1, NULL, NULL, &e), LOOM_INVALID_ARGUMENT); /* never reused */
  /* controller-chosen ids skip the client's */
  assert_int_equal(lm_session_add_id(s, 1, 2, malloc(1), count_destroy, &e), 0);
  uint64_t id;
  assert_int_equal(lm_session_add(s, 2, malloc(1), count_destroy, &id, &e), 0);
  assert_int_not_equal(id, 1);
  assert_int_not_equal(id, 5);
  for (uint64_t i = 100; i < 5100; i++) { /* growth keeps the deleted marks */
    assert_int_equal(lm_session_add_id(s, i, 1, NULL, NULL, &e), 0);
    assert_int_equal(lm_session_forget(s, i, 1, &e), 0);
  }
  for (uint64_t i = 100; i < 5100; i++) assert_true(lm_session_was_deleted(s, i));
  assert_true(lm_session_was_deleted(s, 5));
  lm_session_destroy(s);
  assert_int_equal(g_destroyed, 3);
}

static void test_registry_dataplane(void **state) {
  (void)state;
  lm_registry *r = lm_registry_create();
  const char *kinds[1] = {"cpu"};
  uint64_t caps[1] = {1 << 20};
  lm_worker_spec sp = {.host = "h", .pid = 1, .slice = "s", .ndevices = 1, .kinds = kinds, .capacities = caps,
                       .data_address = "127.0.0.1:5000"};
  uint32_t id;
  assert_int_equal(lm_registry_add_worker(r, &sp, 0, &id, NULL), 0);
  assert_string_equal(lm_registry_worker(r, id)->data_address, "127.0.0.1:5000");
  lm_err e;
  assert_int_equal(lm_registry_set_dataplane(r, id, (const uint8_t *)"blob", 4, &e), 0);
  assert_int_equal(lm_registry_worker(r, id)->dataplane_len, 4);
  assert_int_equal(lm_registry_set_dataplane(r, id, (const uint8_t *)"x", 0, &e), LOOM_INVALID_ARGUMENT);
  assert_int_equal(lm_registry_set_dataplane(r, 9, (const uint8_t *)"x", 1, &e), LOOM_NOT_FOUND);
  sp.data_address = "bad address";
  assert_int_equal(lm_registry_add_worker(r, &sp, 0, &id, &e), LOOM_INVALID_ARGUMENT);
  lm_registry_destroy(r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_siphash_vector),
      cmocka_unit_test(test_tokens),
      cmocka_unit_test(test_session_client_ids),
      cmocka_unit_test(test_registry_dataplane),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
