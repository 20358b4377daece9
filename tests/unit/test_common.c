/* Unit tests for src/common: errors, dtypes, f16/bf16 conversion, arena. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <cmocka.h>
#include "common/arena.h"
#include "common/dtype.h"
#include "common/err.h"
#include "common/half.h"

static void test_err(void **state) {
  lm_err e;
  lm_err_clear(&e);
  assert_int_equal(lm_errf(&e, LOOM_NOT_FOUND, "no array %d", 7), LOOM_NOT_FOUND);
  assert_string_equal(e.msg, "no array 7");
  lm_err_prefix(&e, "session %d", 3);
  assert_string_equal(e.msg, "session 3: no array 7");
  assert_string_equal(lm_status_name(LOOM_DEVICE_OUT_OF_MEMORY), "DEVICE_OUT_OF_MEMORY");
  assert_string_equal(lm_status_name(12345), "UNKNOWN");
  assert_int_equal(lm_errf(NULL, LOOM_IO, "ignored"), LOOM_IO); /* NULL err is allowed */
}

static void test_dtype(void **state) {
  assert_int_equal(lm_dtype_from_mlir("f32", 3), LOOM_DTYPE_F32);
  assert_int_equal(lm_dtype_from_mlir("ui16", 4), LOOM_DTYPE_U16);
  assert_int_equal(lm_dtype_from_mlir("complex<f64>", 12), LOOM_DTYPE_C128);
  assert_int_equal(lm_dtype_from_mlir("f8E4M3FN", 8), LOOM_DTYPE_INVALID);
  assert_int_equal(lm_dtype_size(LOOM_DTYPE_C64), 8);
  assert_int_equal(lm_dtype_from_npy("<f4"), LOOM_DTYPE_F32);
  assert_int_equal(lm_dtype_from_npy("|b1"), LOOM_DTYPE_PRED);
  assert_int_equal(lm_dtype_from_npy("|u1"), LOOM_DTYPE_U8);
  assert_int_equal(lm_dtype_from_npy(">f4"), LOOM_DTYPE_INVALID);
  assert_true(lm_dtype_is_float(LOOM_DTYPE_BF16));
  assert_false(lm_dtype_is_float(LOOM_DTYPE_C64));
}

static void test_half(void **state) {
  /* Every f16 value round-trips through f32. */
  for (uint32_t h = 0; h < 0x10000; h++) {
    float f = lm_f16_to_f32((uint16_t)h);
    if (isnan(f)) continue;
    assert_int_equal(lm_f32_to_f16(f), h);
  }
  assert_int_equal(lm_f32_to_f16(65504.0f), 0x7bff);
  assert_int_equal(lm_f32_to_f16(65519.0f), 0x7bff); /* below the rounding boundary */
  assert_int_equal(lm_f32_to_f16(65520.0f), 0x7c00); /* rounds to inf */
  assert_int_equal(lm_f32_to_f16(5.9604644775390625e-08f), 0x0001); /* smallest subnormal */
  assert_int_equal(lm_f32_to_f16(2.98023223876953125e-08f), 0x0000); /* half of it: ties to even */
  assert_int_equal(lm_f32_to_f16(1.0f + 1.0f / 2048), 0x3c00);     /* tie -> even */
  assert_int_equal(lm_f32_to_f16(1.0f + 3.0f / 2048), 0x3c02);     /* tie -> even (up) */
  assert_int_equal(lm_f32_to_bf16(1.0f), 0x3f80);
  assert_int_equal(lm_f32_to_bf16(lm_bits_f32(0x3f808000u)), 0x3f80); /* tie -> even */
  assert_int_equal(lm_f32_to_bf16(lm_bits_f32(0x3f818000u)), 0x3f82);
  assert_true(isnan(lm_bf16_to_f32(lm_f32_to_bf16(NAN))));
  /* f64 -> f16 without double rounding: 1 + 2^-11 + 2^-40 must round up. */
  assert_int_equal(lm_f64_to_f16(1.0 + 1.0 / 2048 + 1.0 / 1099511627776.0), 0x3c01);
}

static void test_arena(void **state) {
  lm_arena a;
  lm_arena_init(&a, 128);
  char *p = lm_arena_alloc(&a, 100);
  char *q = lm_arena_alloc(&a, 1000); /* bigger than a chunk */
  assert_non_null(p);
  assert_non_null(q);
  assert_int_equal(((uintptr_t)q) % 16, 0);
  assert_null(lm_arena_array(&a, SIZE_MAX / 2, 4)); /* overflow is refused, not wrapped */
  assert_string_equal(lm_arena_strndup(&a, "abcdef", 3), "abc");
  lm_arena_free(&a);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_err), cmocka_unit_test(test_dtype), cmocka_unit_test(test_half),
      cmocka_unit_test(test_arena)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
