/* Unit tests for the parser's constants and errors: dense elements in every spelling (lists,
 * splats, hex blobs and one-element hex splats, booleans, complex, float specials), refused
 * element types, error messages with file:line:column and what was found/expected, hostile
 * inputs (deep nesting, huge constants), and .npy round trips (src/common/npy.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <unistd.h>
#include <cmocka.h>
#include "common/half.h"
#include "common/npy.h"
#include "hlo/parse.h"

/* Parses `%c = stablehlo.constant <value> : <type>` in a function and returns the module. */
static lm_module *const_module(const char *value_and_type, const char *ret_type, int *rc, lm_err *e) {
  char text[4096];
  snprintf(text, sizeof text, "func.func @main() -> %s {\n  %%c = stablehlo.constant %s\n  return %%c : %s\n}\n", ret_type,
           value_and_type, ret_type);
  lm_module *m = NULL;
  *rc = lm_parse_module(text, strlen(text), NULL, &m, e);
  return m;
}

static const lm_attr *const_value(lm_module *m) { return lm_op_attr(&m->funcs[0].body.blocks[0].ops[0], "value"); }

/* Checks that the constant parses into the n bytes want. */
static void expect_const_bytes(const char *value_and_type, const char *ret_type, const void *want, size_t n) {
  int rc;
  lm_err e;
  lm_module *m = const_module(value_and_type, ret_type, &rc, &e);
  assert_int_equal(rc, 0);
  assert_memory_equal(const_value(m)->data, want, n);
  lm_module_free(m);
}

/* Checks that the constant is refused with code, the message containing needle (NULL: any). */
static void expect_const_error(const char *value_and_type, const char *ret_type, int code, const char *needle) {
  int rc;
  lm_err e;
  const_module(value_and_type, ret_type, &rc, &e);
  assert_int_equal(rc, code);
  if (needle) assert_non_null(strstr(e.msg, needle));
}

static void test_dense_lists_and_splats(void **state) {
  int rc;
  lm_err e;
  lm_module *m = const_module("dense<[[1, -2, 3], [4, 5, -6]]> : tensor<2x3xi32>", "tensor<2x3xi32>", &rc, &e);
  assert_int_equal(rc, 0);
  const lm_attr *v = const_value(m);
  assert_int_equal(v->kind, LM_ATTR_DENSE);
  assert_int_equal(v->nbytes, 24);
  int32_t want[6] = {1, -2, 3, 4, 5, -6};
  assert_memory_equal(v->data, want, sizeof want);
  lm_module_free(m);

  uint8_t w8[4] = {7, 7, 7, 7}; /* splat */
  expect_const_bytes("dense<7> : tensor<2x2xui8>", "tensor<2x2xui8>", w8, 4);

  uint8_t wb[3] = {1, 0, 1};
  expect_const_bytes("dense<[true, false, true]> : tensor<3xi1>", "tensor<3xi1>", wb, 3);

  m = const_module("dense<[(1.0, -2.5), (0x7FC00000, 3.0)]> : tensor<2xcomplex<f32>>", "tensor<2xcomplex<f32>>", &rc, &e);
  assert_int_equal(rc, 0);
  const float *c = const_value(m)->data;
  assert_true(c[0] == 1.0f && c[1] == -2.5f && isnan(c[2]) && c[3] == 3.0f);
  lm_module_free(m);

  /* float specials: hex bit patterns, inf and nan words, integer literals for floats */
  m = const_module("dense<[0x7F800000, -inf, nan, 1, -0.0, 1.5e-3]> : tensor<6xf32>", "tensor<6xf32>", &rc, &e);
  assert_int_equal(rc, 0);
  const float *f = const_value(m)->data;
  assert_true(isinf(f[0]) && f[0] > 0 && isinf(f[1]) && f[1] < 0 && isnan(f[2]) && f[3] == 1.0f);
  assert_true(f[4] == 0.0f && signbit(f[4]) && f[5] == 1.5e-3f);
  lm_module_free(m);

  /* f16 / bf16 stored as their bits, rounded to nearest even */
  m = const_module("dense<[1.0, 0.1, 65504.0, 0x7E00]> : tensor<4xf16>", "tensor<4xf16>", &rc, &e);
  assert_int_equal(rc, 0);
  const uint16_t *h = const_value(m)->data;
  assert_int_equal(h[0], 0x3C00);
  assert_int_equal(h[1], lm_f32_to_f16(0.1f));
  assert_int_equal(h[2], 0x7BFF);
  assert_int_equal(h[3], 0x7E00);
  lm_module_free(m);
  m = const_module("dense<[1.0, -2.0]> : tensor<2xbf16>", "tensor<2xbf16>", &rc, &e);
  assert_int_equal(rc, 0);
  h = const_value(m)->data;
  assert_int_equal(h[0], 0x3F80);
  assert_int_equal(h[1], 0xC000);
  lm_module_free(m);

  /* limits of integer types */
  m = const_module("dense<[-128, 127]> : tensor<2xi8>", "tensor<2xi8>", &rc, &e);
  assert_int_equal(rc, 0);
  lm_module_free(m);
  m = const_module("dense<[18446744073709551615]> : tensor<1xui64>", "tensor<1xui64>", &rc, &e);
  assert_int_equal(rc, 0);
  assert_true(*(const uint64_t *)const_value(m)->data == UINT64_MAX);
  lm_module_free(m);
  expect_const_error("dense<128> : tensor<i8>", "tensor<i8>", LOOM_PARSE, "does not fit i8");
  expect_const_error("dense<[-1]> : tensor<1xui32>", "tensor<1xui32>", LOOM_PARSE, NULL);
  /* empty tensors */
  m = const_module("dense<> : tensor<0xf32>", "tensor<0xf32>", &rc, &e);
  assert_int_equal(rc, 0);
  assert_int_equal(const_value(m)->nbytes, 0);
  lm_module_free(m);
}

static void test_dense_hex(void **state) {
  int rc;
  lm_err e;
  /* little-endian blob of the whole tensor */
  lm_module *m = const_module("dense<\"0x0100000002000000FFFFFFFF\"> : tensor<3xi32>", "tensor<3xi32>", &rc, &e);
  assert_int_equal(rc, 0);
  int32_t w[3] = {1, 2, -1};
  assert_memory_equal(const_value(m)->data, w, sizeof w);
  lm_module_free(m);
  /* a blob of exactly one element is a splat */
  m = const_module("dense<\"0x0000803F\"> : tensor<2x2xf32>", "tensor<2x2xf32>", &rc, &e);
  assert_int_equal(rc, 0);
  const float *f = const_value(m)->data;
  assert_true(f[0] == 1.0f && f[3] == 1.0f);
  lm_module_free(m);
  /* i1 blobs hold one byte per element */
  uint8_t wb[3] = {0, 1, 0};
  expect_const_bytes("dense<\"0x000100\"> : tensor<3xi1>", "tensor<3xi1>", wb, 3);
  /* wrong sizes are errors naming both sizes */
  expect_const_error("dense<\"0x01000000020000\"> : tensor<2xi32>", "tensor<2xi32>", LOOM_PARSE,
                     "7 bytes; 8 are needed");
  expect_const_error("dense<\"0xZZ\"> : tensor<1xi8>", "tensor<1xi8>", LOOM_PARSE, NULL);
}

static void test_dense_shape_errors(void **state) {
  expect_const_error("dense<[1, 2, 3]> : tensor<2xi32>", "tensor<2xi32>", LOOM_PARSE, "too many elements");
  expect_const_error("dense<[[1], [2]]> : tensor<2x2xi32>", "tensor<2x2xi32>", LOOM_PARSE,
                     "1 elements in dimension 1 where its type has 2");
  expect_const_error("dense<[1.5]> : tensor<1xi32>", "tensor<1xi32>", LOOM_PARSE, "expected an integer");
}

static void test_unsupported_types(void **state) {
  const char *types[] = {"tensor<4xi4>", "tensor<2xui2>", "tensor<f8E4M3FN>", "tensor<3xindex>",
                         "tensor<2x!quant.uniform<i8:f32, 1.0:0>>", "tensor<*xf32>"};
  for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
    char text[512];
    snprintf(text, sizeof text, "func.func @f(%%a: %s) {\n  return\n}\n", types[i]);
    lm_module *m;
    lm_err e;
    int rc = lm_parse_module(text, strlen(text), NULL, &m, &e);
    assert_int_equal(rc, LOOM_UNSUPPORTED);
    assert_non_null(strstr(e.msg, "<string>:1:"));
  }
  lm_module *m;
  lm_err e;
  const char *t = "func.func @f(%a: tensor<4xi4>) {\n  return\n}\n";
  assert_int_equal(lm_parse_module(t, strlen(t), NULL, &m, &e), LOOM_UNSUPPORTED);
  assert_non_null(strstr(e.msg, "unsupported element type 'i4'"));
}

static void test_error_positions(void **state) {
  lm_module *m;
  lm_err e;
  lm_parse_opts o = {.filename = "prog.mlir", .first_line = 10};
  const char *t = "func.func @f(%a: tensor<2xf32>) -> tensor<2xf32> {\n  %0 = stablehlo.add %a %a : tensor<2xf32>\n  return %0 : tensor<2xf32>\n}\n";
  assert_int_equal(lm_parse_module(t, strlen(t), &o, &m, &e), LOOM_PARSE);
  assert_string_equal(e.msg, "prog.mlir:11:25: expected ':' and the op's type, found '%a'");
  t = "func.func @f() {\n  %0 = stablehlo.constant dense<1> : tensor<i32>\n  return %1 : tensor<i32>\n}\n";
  assert_int_equal(lm_parse_module(t, strlen(t), NULL, &m, &e), LOOM_PARSE);
  assert_string_equal(e.msg, "<string>:3:10: use of undefined SSA value '%1'");
  t = "func.func @f(%a: tensor<2xf32>) -> tensor<2xf32> {\n  %0 = stablehlo.add %a, %a : tensor<3xf32>\n  return %0 : tensor<3xf32>\n}\n";
  assert_int_equal(lm_parse_module(t, strlen(t), NULL, &m, &e), LOOM_VERIFY);
  assert_non_null(strstr(e.msg, "<string>:2:22: stablehlo.add: operand '%a' has type tensor<2xf32>, but the op's signature says tensor<3xf32>"));
  t = "func.func @f() {\n  %0 = stablehlo.frobnicate 1 : tensor<i32>\n  return\n}\n";
  assert_int_equal(lm_parse_module(t, strlen(t), NULL, &m, &e), LOOM_UNSUPPORTED);
  assert_non_null(strstr(e.msg, "<string>:2:8: op 'stablehlo.frobnicate'"));
  t = "func.func @f() {\n  return\n";
  assert_int_equal(lm_parse_module(t, strlen(t), NULL, &m, &e), LOOM_PARSE);
  assert_non_null(strstr(e.msg, "found end of input"));
  t = "func.func @f() {\n  \"stablehlo.unknown_op\"() : () -> ()\n  return\n}\n"; /* unknown ops parse in generic form */
  assert_int_equal(lm_parse_module(t, strlen(t), NULL, &m, &e), 0);
  assert_int_equal(m->funcs[0].body.blocks[0].ops[0].code, LM_OP_UNKNOWN);
  assert_string_equal(m->funcs[0].body.blocks[0].ops[0].name, "stablehlo.unknown_op");
  lm_module_free(m);
}

static void test_hostile_inputs(void **state) {
  lm_module *m;
  lm_err e;
  /* deep nesting of attributes and regions is capped, not a stack overflow */
  size_t n = 100000;
  char *t = malloc(2 * n + 64);
  strcpy(t, "module attributes {a = ");
  size_t k = strlen(t);
  for (size_t i = 0; i < n; i++) t[k++] = '[';
  t[k] = 0;
  assert_int_equal(lm_parse_module(t, k, NULL, &m, &e), LOOM_PARSE);
  assert_non_null(strstr(e.msg, "nesting deeper than"));
  free(t);
  /* a huge splat is refused by the constant cap before any allocation */
  const char *big = "func.func @f() {\n  %0 = stablehlo.constant dense<1.0> : tensor<100000x100000x100000xf32>\n  return\n}\n";
  assert_int_equal(lm_parse_module(big, strlen(big), NULL, &m, &e), LOOM_UNSUPPORTED);
  lm_parse_opts o = {.max_const_bytes = 1024};
  const char *mid = "func.func @f() {\n  %0 = stablehlo.constant dense<1.0> : tensor<1000xf32>\n  return\n}\n";
  assert_int_equal(lm_parse_module(mid, strlen(mid), &o, &m, &e), LOOM_UNSUPPORTED);
  assert_non_null(strstr(e.msg, "1024-byte limit"));
  /* NUL bytes and garbage */
  const char junk[] = "func.func @f() {\n\0\xff\x01 }";
  assert_int_equal(lm_parse_module(junk, sizeof junk - 1, NULL, &m, &e), LOOM_PARSE);
  /* a rank beyond LM_MAX_RANK */
  const char *rank = "func.func @f(%a: tensor<1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1xf32>) {\n  return\n}\n";
  assert_int_equal(lm_parse_module(rank, strlen(rank), NULL, &m, &e), LOOM_UNSUPPORTED);
  /* `%x#k` out of range */
  const char *idx = "func.func @f(%a: tensor<f32>) -> tensor<f32> {\n  return %a#3 : tensor<f32>\n}\n";
  assert_int_equal(lm_parse_module(idx, strlen(idx), NULL, &m, &e), LOOM_PARSE);
  assert_non_null(strstr(e.msg, "out of range"));
}

static void test_npy_round_trip(void **state) {
  char path[] = "/tmp/loom_test_npy_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  lm_err e;
  struct { lm_dtype d; int rank; int64_t dims[3]; } cases[] = {
      {LOOM_DTYPE_F32, 2, {2, 3}}, {LOOM_DTYPE_PRED, 1, {5}}, {LOOM_DTYPE_C128, 0, {0}}, {LOOM_DTYPE_F16, 3, {1, 2, 2}},
      {LOOM_DTYPE_BF16, 1, {3}},   {LOOM_DTYPE_U64, 1, {0}},  {LOOM_DTYPE_S8, 1, {4}},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    size_t numel = 1;
    for (int i = 0; i < cases[c].rank; i++) numel *= (size_t)cases[c].dims[i];
    size_t nbytes = numel * lm_dtype_size(cases[c].d);
    unsigned char *data = malloc(nbytes + 1);
    for (size_t i = 0; i < nbytes; i++) data[i] = cases[c].d == LOOM_DTYPE_PRED ? (unsigned char)(i & 1) : (unsigned char)(i * 7 + 1);
    assert_int_equal(lm_npy_write(path, cases[c].d, cases[c].rank, cases[c].dims, data, nbytes, &e), 0);
    lm_npy a;
    assert_int_equal(lm_npy_read(path, LOOM_DTYPE_INVALID, 0, &a, &e), 0);
    assert_int_equal(a.dtype, cases[c].d);
    assert_int_equal(a.rank, cases[c].rank);
    for (int i = 0; i < a.rank; i++) assert_int_equal(a.dims[i], cases[c].dims[i]);
    assert_int_equal(a.nbytes, nbytes);
    if (nbytes) assert_memory_equal(a.data, data, nbytes);
    lm_npy_free(&a);
    free(data);
  }
  /* ml_dtypes' bfloat16 arrays are saved as raw '<V2': read as bf16 when that is expected */
  static const char v2[] = "\x93NUMPY\x01\x00\x36\x00{'descr': '<V2', 'fortran_order': False, 'shape': (1,), }    \n\x80\x3f";
  lm_npy a;
  assert_int_equal(lm_npy_parse(v2, sizeof v2 - 1, LOOM_DTYPE_BF16, &a, &e), 0);
  assert_int_equal(a.dtype, LOOM_DTYPE_BF16);
  lm_npy_free(&a);
  assert_int_equal(lm_npy_parse(v2, sizeof v2 - 1, LOOM_DTYPE_INVALID, &a, &e), LOOM_UNSUPPORTED);
  static const char fortran[] = "\x93NUMPY\x01\x00\x36\x00{'descr': '<f4', 'fortran_order': True, 'shape': (1,), }     \n\0\0\0\0";
  assert_int_equal(lm_npy_parse(fortran, sizeof fortran - 1, LOOM_DTYPE_INVALID, &a, &e), LOOM_UNSUPPORTED);
  static const char trunc[] = "\x93NUMPY\x01\x00\x36\x00{'descr': '<f4', 'fortran_order': False, 'shape': (9,), }    \n\0\0";
  assert_int_equal(lm_npy_parse(trunc, sizeof trunc - 1, LOOM_DTYPE_INVALID, &a, &e), LOOM_PARSE);
  assert_non_null(strstr(e.msg, "truncated"));
  static const char be[] = "\x93NUMPY\x01\x00\x36\x00{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }    \n\0\0\0\0";
  assert_int_equal(lm_npy_parse(be, sizeof be - 1, LOOM_DTYPE_INVALID, &a, &e), LOOM_UNSUPPORTED);
  assert_int_equal(lm_npy_parse("\x93NUMPY", 6, LOOM_DTYPE_INVALID, &a, &e), LOOM_PARSE);
  unlink(path);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_dense_lists_and_splats), cmocka_unit_test(test_dense_hex),
      cmocka_unit_test(test_dense_shape_errors),     cmocka_unit_test(test_unsupported_types),
      cmocka_unit_test(test_error_positions),        cmocka_unit_test(test_hostile_inputs),
      cmocka_unit_test(test_npy_round_trip),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
