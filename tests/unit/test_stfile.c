/* Unit tests for src/common/stfile.c: safetensors dtype names and the block CRCs a checkpoint's
 * manifest keeps (the same CRC whether the bytes come in one piece or many). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "common/stfile.h"

static void test_dtype_names(void **state) {
  (void)state;
  assert_string_equal(lm_st_dtype_name(LOOM_DTYPE_F32), "F32");
  assert_string_equal(lm_st_dtype_name(LOOM_DTYPE_BF16), "BF16");
  assert_string_equal(lm_st_dtype_name(LOOM_DTYPE_PRED), "BOOL");
  assert_null(lm_st_dtype_name(LOOM_DTYPE_C128)); /* safetensors has no name for it: refused, not mislabelled */
  for (int d = 1; d < LOOM_DTYPE_COUNT; d++) {
    const char *n = lm_st_dtype_name((lm_dtype)d);
    if (n) assert_int_equal(lm_st_dtype_from_name(n), d);
  }
  assert_int_equal(lm_st_dtype_from_name("F8_E4M3"), LOOM_DTYPE_INVALID);
  assert_int_equal(lm_st_dtype_from_name(NULL), LOOM_DTYPE_INVALID);
}

static void test_crc_known_value(void **state) {
  (void)state;
  assert_int_equal(lm_st_crc32("123456789", 9), 0xCBF43926u); /* the CRC-32 check value */
  assert_int_equal(lm_st_crc32("", 0), 0);
  /* continued over pieces (a block read partly into a shard, partly into a side buffer) */
  assert_int_equal(lm_st_crc32_update(lm_st_crc32("1234", 4), "56789", 5), 0xCBF43926u);
  assert_int_equal(lm_st_crc32_update(lm_st_crc32_update(0, "", 0), "123456789", 9), 0xCBF43926u);
}

static void test_block_crcs_any_split(void **state) {
  (void)state;
  const uint32_t block = 1000;
  size_t n = 3500;
  uint8_t *data = malloc(n);
  for (size_t i = 0; i < n; i++) data[i] = (uint8_t)(i * 31 + 7);
  lm_st_crc whole, pieces;
  lm_st_crc_init(&whole, block);
  lm_st_crc_feed(&whole, data, n);
  lm_st_crc_end(&whole);
  assert_int_equal(whole.n, lm_st_nblocks(n, block));
  assert_int_equal(whole.n, 4);
  for (size_t b = 0; b < whole.n; b++) {
    size_t len = b * block + block > n ? n - b * block : block;
    assert_int_equal(whole.crcs[b], lm_st_crc32(data + b * block, len));
  }
  lm_st_crc_init(&pieces, block);
  size_t cuts[] = {1, 999, 1, 1, 1497, 1001};
  size_t at = 0;
  for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
    lm_st_crc_feed(&pieces, data + at, cuts[i]);
    at += cuts[i];
  }
  assert_int_equal(at, n);
  lm_st_crc_end(&pieces);
  assert_int_equal(pieces.n, whole.n);
  assert_memory_equal(pieces.crcs, whole.crcs, whole.n * sizeof *whole.crcs);
  /* a multiple of the block: no empty trailing block */
  lm_st_crc_free(&pieces);
  lm_st_crc_init(&pieces, block);
  lm_st_crc_feed(&pieces, data, 2000);
  lm_st_crc_end(&pieces);
  assert_int_equal(pieces.n, 2);
  lm_st_crc_free(&pieces);
  lm_st_crc_free(&whole);
  free(data);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_dtype_names), cmocka_unit_test(test_crc_known_value),
                                     cmocka_unit_test(test_block_crcs_any_split)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
