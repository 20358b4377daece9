/* Unit tests for the StableHLO text parser (src/hlo/parse*.c): every op form on small inputs,
 * pretty and generic spellings giving the same IR (compared through the canonical dump), the
 * attribute normal form of ir.h, and the structural verifier. Error messages and constants are
 * in test_parse_errors.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "hlo/dump.h"
#include "hlo/parse.h"
#include "hlo/print.h"

static lm_module *parse_ok(const char *text) {
  lm_module *m = NULL;
  lm_err e;
  int rc = lm_parse_module(text, strlen(text), NULL, &m, &e);
  if (rc) fprintf(stderr, "unexpected parse error: %s\n--- input:\n%s\n", e.msg, text);
  assert_int_equal(rc, 0);
  assert_non_null(m);
  return m;
}

static char *dump_of(const char *text) {
  lm_module *m = parse_ok(text);
  char *d = lm_module_dump(m);
  assert_non_null(d);
  lm_module_free(m);
  return d;
}

/* The two texts must give the same IR. */
static void assert_same_ir(const char *a, const char *b) {
  char *da = dump_of(a), *db = dump_of(b);
  if (strcmp(da, db)) fprintf(stderr, "IR differs:\n--- first:\n%s--- second:\n%s", da, db);
  assert_string_equal(da, db);
  free(da);
  free(db);
}

#define FN(body, sig) "func.func @main" sig " {\n" body "\n}\n"

/* ---- dense_resource constants: unresolved (kept, printed back), resolved, refused ---- */

static const char RES[] = "func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {\n"
                          "  %c = stablehlo.constant dense_resource<loom_array_3_7> : tensor<2xf32>\n"
                          "  %0 = stablehlo.add %x, %c : tensor<2xf32>\n  return %0 : tensor<2xf32>\n}\n";
static const float RES_DATA[2] = {1.5f, -2.0f};
static int released;

static void res_release(void *arg) { released += arg == (void *)RES_DATA; }

static int res_resolve(void *ctx, const char *name, size_t nbytes, const void **data, void (**release)(void *),
                       void **arg, lm_err *err) {
  (void)ctx;
  if (strcmp(name, "loom_array_3_7") || nbytes != sizeof RES_DATA) return lm_errf(err, LOOM_NOT_FOUND, "no such blob");
  *data = RES_DATA;
  *release = res_release;
  *arg = (void *)RES_DATA;
  return 0;
}

static int res_refuse(void *ctx, const char *name, size_t nbytes, const void **data, void (**release)(void *),
                      void **arg, lm_err *err) {
  (void)ctx, (void)name, (void)nbytes, (void)data, (void)release, (void)arg;
  return lm_errf(err, LOOM_NOT_FOUND, "array 7 is not here");
}

static const lm_attr *res_attr(const lm_module *m) {
  const lm_op *op = &m->funcs[0].body.blocks[0].ops[0];
  assert_int_equal(op->code, LM_OP_CONSTANT);
  return lm_op_attr(op, "value");
}

static void test_dense_resource(void **state) {
  (void)state;
  lm_module *m = parse_ok(RES); /* no resolver: the name is kept, no bytes */
  const lm_attr *a = res_attr(m);
  assert_string_equal(a->resource, "loom_array_3_7");
  assert_null(a->data);
  char *t = lm_module_print(m);
  assert_non_null(strstr(t, "dense_resource<loom_array_3_7> : tensor<2xf32>"));
  free(t);
  lm_module_free(m);

  lm_parse_opts o = {.resolve = res_resolve};
  lm_err e;
  released = 0;
  assert_int_equal(lm_parse_module(RES, strlen(RES), &o, &m, &e), 0);
  a = res_attr(m);
  assert_ptr_equal(a->data, RES_DATA); /* borrowed, not copied */
  assert_int_equal(a->nbytes, sizeof RES_DATA);
  t = lm_module_print(m); /* resolved: printed with its bytes (what a PJRT plugin reads) */
  assert_non_null(strstr(t, "dense<\"0x0000C03F000000C0\">"));
  free(t);
  lm_module_free(m);
  assert_int_equal(released, 1);

  o.resolve = res_refuse;
  assert_int_not_equal(lm_parse_module(RES, strlen(RES), &o, &m, &e), 0);
  assert_non_null(strstr(e.msg, "dense_resource<loom_array_3_7>: array 7 is not here"));
}

static void test_elementwise_forms(void **state) {
  assert_same_ir(FN("%0 = stablehlo.add %a, %b : tensor<2xf32>\n return %0 : tensor<2xf32>",
                    "(%a: tensor<2xf32>, %b: tensor<2xf32>) -> tensor<2xf32>"),
                 FN("%0 = \"stablehlo.add\"(%a, %b) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>\n"
                    " \"func.return\"(%0) : (tensor<2xf32>) -> ()",
                    "(%a: tensor<2xf32>, %b: tensor<2xf32>) -> tensor<2xf32>"));
  /* a functional type in the pretty form, unary ops, convert */
  assert_same_ir(FN("%0 = stablehlo.abs %a : (tensor<2xcomplex<f32>>) -> tensor<2xf32>\n return %0 : tensor<2xf32>",
                    "(%a: tensor<2xcomplex<f32>>) -> tensor<2xf32>"),
                 FN("%0 = \"stablehlo.abs\"(%a) : (tensor<2xcomplex<f32>>) -> tensor<2xf32>\n return %0 : tensor<2xf32>",
                    "(%a: tensor<2xcomplex<f32>>) -> tensor<2xf32>"));
  assert_same_ir(FN("%0 = stablehlo.select %p, %a, %a : tensor<2xi1>, tensor<2xf32>\n return %0 : tensor<2xf32>",
                    "(%p: tensor<2xi1>, %a: tensor<2xf32>) -> tensor<2xf32>"),
                 FN("%0 = \"stablehlo.select\"(%p, %a, %a) : (tensor<2xi1>, tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>\n"
                    " return %0 : tensor<2xf32>",
                    "(%p: tensor<2xi1>, %a: tensor<2xf32>) -> tensor<2xf32>"));
  assert_same_ir(FN("%0 = stablehlo.complex %a, %a : tensor<2xcomplex<f32>>\n return %0 : tensor<2xcomplex<f32>>",
                    "(%a: tensor<2xf32>) -> tensor<2xcomplex<f32>>"),
                 FN("%0 = \"stablehlo.complex\"(%a, %a) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xcomplex<f32>>\n"
                    " return %0 : tensor<2xcomplex<f32>>",
                    "(%a: tensor<2xf32>) -> tensor<2xcomplex<f32>>"));
}

static void test_attribute_forms(void **state) {
  assert_same_ir(FN("%0 = stablehlo.compare  GT, %a, %b,  FLOAT : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xi1>\n"
                    " return %0 : tensor<2xi1>",
                    "(%a: tensor<2xf32>, %b: tensor<2xf32>) -> tensor<2xi1>"),
                 FN("%0 = \"stablehlo.compare\"(%a, %b) {comparison_direction = #stablehlo<comparison_direction GT>,"
                    " compare_type = #stablehlo<comparison_type FLOAT>} : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xi1>\n"
                    " return %0 : tensor<2xi1>",
                    "(%a: tensor<2xf32>, %b: tensor<2xf32>) -> tensor<2xi1>"));
  assert_same_ir(FN("%0 = stablehlo.broadcast_in_dim %a, dims = [1] : (tensor<3xf32>) -> tensor<2x3xf32>\n"
                    " %1 = stablehlo.transpose %0, dims = [1, 0] : (tensor<2x3xf32>) -> tensor<3x2xf32>\n"
                    " %2 = stablehlo.slice %1 [0:3:2, 1:2] : (tensor<3x2xf32>) -> tensor<2x1xf32>\n"
                    " %3 = stablehlo.iota dim = 0 : tensor<4xi32>\n"
                    " %4 = stablehlo.pad %a, %s, low = [1], high = [0], interior = [1] : (tensor<3xf32>, tensor<f32>) -> tensor<6xf32>\n"
                    " %5 = stablehlo.concatenate %a, %a, dim = 0 : (tensor<3xf32>, tensor<3xf32>) -> tensor<6xf32>\n"
                    " %6 = stablehlo.reverse %a, dims = [0] : tensor<3xf32>\n"
                    " %7 = stablehlo.dynamic_slice %a, %i, sizes = [2] : (tensor<3xf32>, tensor<i32>) -> tensor<2xf32>\n"
                    " %8 = stablehlo.reduce_precision %a, format = e5m10 : tensor<3xf32>\n"
                    " return %2 : tensor<2x1xf32>",
                    "(%a: tensor<3xf32>, %s: tensor<f32>, %i: tensor<i32>) -> tensor<2x1xf32>"),
                 FN("%0 = \"stablehlo.broadcast_in_dim\"(%a) <{broadcast_dimensions = array<i64: 1>}> : (tensor<3xf32>) -> tensor<2x3xf32>\n"
                    " %1 = \"stablehlo.transpose\"(%0) <{permutation = array<i64: 1, 0>}> : (tensor<2x3xf32>) -> tensor<3x2xf32>\n"
                    " %2 = \"stablehlo.slice\"(%1) <{start_indices = array<i64: 0, 1>, limit_indices = array<i64: 3, 2>,"
                    " strides = array<i64: 2, 1>}> : (tensor<3x2xf32>) -> tensor<2x1xf32>\n"
                    " %3 = \"stablehlo.iota\"() <{iota_dimension = 0 : i64}> : () -> tensor<4xi32>\n"
                    " %4 = \"stablehlo.pad\"(%a, %s) <{edge_padding_low = array<i64: 1>, edge_padding_high = array<i64: 0>,"
                    " interior_padding = array<i64: 1>}> : (tensor<3xf32>, tensor<f32>) -> tensor<6xf32>\n"
                    " %5 = \"stablehlo.concatenate\"(%a, %a) <{dimension = 0 : i64}> : (tensor<3xf32>, tensor<3xf32>) -> tensor<6xf32>\n"
                    " %6 = \"stablehlo.reverse\"(%a) <{dimensions = array<i64: 0>}> : (tensor<3xf32>) -> tensor<3xf32>\n"
                    " %7 = \"stablehlo.dynamic_slice\"(%a, %i) <{slice_sizes = array<i64: 2>}> : (tensor<3xf32>, tensor<i32>) -> tensor<2xf32>\n"
                    " %8 = \"stablehlo.reduce_precision\"(%a) <{exponent_bits = 5 : i32, mantissa_bits = 10 : i32}> : (tensor<3xf32>) -> tensor<3xf32>\n"
                    " return %2 : tensor<2x1xf32>",
                    "(%a: tensor<3xf32>, %s: tensor<f32>, %i: tensor<i32>) -> tensor<2x1xf32>"));
}

static void test_dot_and_conv(void **state) {
  assert_same_ir(
      FN("%0 = stablehlo.dot_general %a, %b, batching_dims = [0] x [0], contracting_dims = [2] x [1],"
         " precision = [DEFAULT, HIGHEST] : (tensor<2x3x4xf32>, tensor<2x4x5xf32>) -> tensor<2x3x5xf32>\n"
         " return %0 : tensor<2x3x5xf32>",
         "(%a: tensor<2x3x4xf32>, %b: tensor<2x4x5xf32>) -> tensor<2x3x5xf32>"),
      FN("%0 = \"stablehlo.dot_general\"(%a, %b) <{dot_dimension_numbers = #stablehlo.dot<lhs_batching_dimensions = [0],"
         " rhs_batching_dimensions = [0], lhs_contracting_dimensions = [2], rhs_contracting_dimensions = [1]>,"
         " precision_config = [#stablehlo<precision DEFAULT>, #stablehlo<precision HIGHEST>]}>"
         " : (tensor<2x3x4xf32>, tensor<2x4x5xf32>) -> tensor<2x3x5xf32>\n return %0 : tensor<2x3x5xf32>",
         "(%a: tensor<2x3x4xf32>, %b: tensor<2x4x5xf32>) -> tensor<2x3x5xf32>"));
  /* empty batching dims are omitted in the generic form */
  assert_same_ir(FN("%0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<3x4xf32>, tensor<4x5xf32>) -> tensor<3x5xf32>\n"
                    " return %0 : tensor<3x5xf32>",
                    "(%a: tensor<3x4xf32>, %b: tensor<4x5xf32>) -> tensor<3x5xf32>"),
                 FN("%0 = \"stablehlo.dot_general\"(%a, %b) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [1],"
                    " rhs_contracting_dimensions = [0]>}> : (tensor<3x4xf32>, tensor<4x5xf32>) -> tensor<3x5xf32>\n"
                    " return %0 : tensor<3x5xf32>",
                    "(%a: tensor<3x4xf32>, %b: tensor<4x5xf32>) -> tensor<3x5xf32>"));
  assert_same_ir(
      FN("%0 = stablehlo.convolution(%x, %w) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f], window = {stride = [1, 1],"
         " pad = [[1, 1], [0, 2]], lhs_dilate = [1, 1], rhs_dilate = [1, 1], reverse = [false, false]}"
         " {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<1x4x4x2xf32>, tensor<3x3x2x5xf32>) -> tensor<1x4x4x5xf32>\n"
         " return %0 : tensor<1x4x4x5xf32>",
         "(%x: tensor<1x4x4x2xf32>, %w: tensor<3x3x2x5xf32>) -> tensor<1x4x4x5xf32>"),
      FN("%0 = \"stablehlo.convolution\"(%x, %w) <{batch_group_count = 1 : i64, dimension_numbers = #stablehlo.conv<[b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]>,"
         " feature_group_count = 1 : i64, lhs_dilation = array<i64: 1, 1>, padding = dense<[[1, 1], [0, 2]]> : tensor<2x2xi64>,"
         " rhs_dilation = array<i64: 1, 1>, window_reversal = array<i1: false, false>, window_strides = array<i64: 1, 1>}>"
         " : (tensor<1x4x4x2xf32>, tensor<3x3x2x5xf32>) -> tensor<1x4x4x5xf32>\n return %0 : tensor<1x4x4x5xf32>",
         "(%x: tensor<1x4x4x2xf32>, %w: tensor<3x3x2x5xf32>) -> tensor<1x4x4x5xf32>"));
  /* the conv normal form (ir.h) */
  lm_module *m = parse_ok(FN("%0 = stablehlo.convolution(%x, %w) dim_numbers = [b, f, 0]x[o, i, 0]->[b, f, 0], window = {}"
                             " : (tensor<1x2x5xf32>, tensor<3x2x2xf32>) -> tensor<1x3x4xf32>\n return %0 : tensor<1x3x4xf32>",
                             "(%x: tensor<1x2x5xf32>, %w: tensor<3x2x2xf32>) -> tensor<1x3x4xf32>"));
  const lm_attr *dn = lm_op_attr(&m->funcs[0].body.blocks[0].ops[0], "dimension_numbers");
  assert_non_null(dn);
  assert_int_equal(dn->kind, LM_ATTR_STRUCT);
  assert_string_equal(dn->s, "stablehlo.conv");
  assert_int_equal(lm_attr_int_or(lm_attrs_get(dn->fields, dn->n, "input_feature_dimension"), -1), 1);
  assert_int_equal(lm_attr_int_or(lm_attrs_get(dn->fields, dn->n, "kernel_output_feature_dimension"), -1), 0);
  int64_t sp[4];
  assert_int_equal(lm_attr_ints(lm_attrs_get(dn->fields, dn->n, "output_spatial_dimensions"), sp, 4), 1);
  assert_int_equal(sp[0], 2);
  lm_module_free(m);
}

static void test_regions(void **state) {
  /* reduce: `applies` form against the generic region */
  assert_same_ir(
      FN("%0 = stablehlo.reduce(%a init: %z) applies stablehlo.add across dimensions = [1] : (tensor<2x3xf32>, tensor<f32>) -> tensor<2xf32>\n"
         " return %0 : tensor<2xf32>",
         "(%a: tensor<2x3xf32>, %z: tensor<f32>) -> tensor<2xf32>"),
      FN("%0 = \"stablehlo.reduce\"(%a, %z) <{dimensions = array<i64: 1>}> ({\n ^bb0(%x: tensor<f32>, %y: tensor<f32>):\n"
         "  %s = stablehlo.add %x, %y : tensor<f32>\n  stablehlo.return %s : tensor<f32>\n })"
         " : (tensor<2x3xf32>, tensor<f32>) -> tensor<2xf32>\n return %0 : tensor<2xf32>",
         "(%a: tensor<2x3xf32>, %z: tensor<f32>) -> tensor<2xf32>"));
  /* reduce with a `reducer` body over two inputs (block arguments interleave) */
  assert_same_ir(
      FN("%0:2 = stablehlo.reduce(%a init: %z), (%i init: %j) across dimensions = [0] : (tensor<3xf32>, tensor<3xi32>, tensor<f32>, tensor<i32>)"
         " -> (tensor<f32>, tensor<i32>)\n  reducer(%p: tensor<f32>, %q: tensor<f32>) (%r: tensor<i32>, %s: tensor<i32>) {\n"
         "  %m = stablehlo.maximum %p, %q : tensor<f32>\n  %n = stablehlo.minimum %r, %s : tensor<i32>\n"
         "  stablehlo.return %m, %n : tensor<f32>, tensor<i32>\n }\n return %0#1 : tensor<i32>",
         "(%a: tensor<3xf32>, %i: tensor<3xi32>, %z: tensor<f32>, %j: tensor<i32>) -> tensor<i32>"),
      FN("%0:2 = \"stablehlo.reduce\"(%a, %i, %z, %j) <{dimensions = array<i64: 0>}> ({\n"
         " ^bb0(%p: tensor<f32>, %r: tensor<i32>, %q: tensor<f32>, %s: tensor<i32>):\n"
         "  %m = stablehlo.maximum %p, %q : tensor<f32>\n  %n = stablehlo.minimum %r, %s : tensor<i32>\n"
         "  stablehlo.return %m, %n : tensor<f32>, tensor<i32>\n }) : (tensor<3xf32>, tensor<3xi32>, tensor<f32>, tensor<i32>)"
         " -> (tensor<f32>, tensor<i32>)\n return %0#1 : tensor<i32>",
         "(%a: tensor<3xf32>, %i: tensor<3xi32>, %z: tensor<f32>, %j: tensor<i32>) -> tensor<i32>"));
  /* while with cond/do regions sharing iterArg names; values from above used inside */
  assert_same_ir(
      FN("%0:2 = stablehlo.while(%it = %a, %acc = %b) : tensor<i32>, tensor<f32>\n cond {\n"
         "  %c = stablehlo.compare LT, %it, %n, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>\n  stablehlo.return %c : tensor<i1>\n"
         " } do {\n  %d = stablehlo.add %acc, %b : tensor<f32>\n  stablehlo.return %it, %d : tensor<i32>, tensor<f32>\n }\n"
         " return %0#1 : tensor<f32>",
         "(%a: tensor<i32>, %b: tensor<f32>, %n: tensor<i32>) -> tensor<f32>"),
      FN("%0:2 = \"stablehlo.while\"(%a, %b) ({\n ^bb0(%it: tensor<i32>, %acc: tensor<f32>):\n"
         "  %c = \"stablehlo.compare\"(%it, %n) <{comparison_direction = #stablehlo<comparison_direction LT>,"
         " compare_type = #stablehlo<comparison_type SIGNED>}> : (tensor<i32>, tensor<i32>) -> tensor<i1>\n"
         "  \"stablehlo.return\"(%c) : (tensor<i1>) -> ()\n }, {\n ^bb0(%it: tensor<i32>, %acc: tensor<f32>):\n"
         "  %d = stablehlo.add %acc, %b : tensor<f32>\n  stablehlo.return %it, %d : tensor<i32>, tensor<f32>\n })"
         " : (tensor<i32>, tensor<f32>) -> (tensor<i32>, tensor<f32>)\n return %0#1 : tensor<f32>",
         "(%a: tensor<i32>, %b: tensor<f32>, %n: tensor<i32>) -> tensor<f32>"));
  /* case: regions without a block header, names reused in sibling regions */
  lm_module *m = parse_ok(
      FN("%0 = \"stablehlo.case\"(%i) ({\n  %c = stablehlo.constant dense<1.0> : tensor<f32>\n  stablehlo.return %c : tensor<f32>\n"
         " }, {\n  %c = stablehlo.constant dense<2.0> : tensor<f32>\n  stablehlo.return %c : tensor<f32>\n })"
         " : (tensor<i32>) -> tensor<f32>\n return %0 : tensor<f32>",
         "(%i: tensor<i32>) -> tensor<f32>"));
  const lm_op *c = &m->funcs[0].body.blocks[0].ops[0];
  assert_int_equal(c->code, LM_OP_CASE);
  assert_int_equal(c->nregions, 2);
  assert_int_equal(c->regions[1].blocks[0].nops, 2);
  lm_module_free(m);
}

static void test_module_and_calls(void **state) {
  const char *pretty =
      "#loc1 = loc(\"x\")\n"
      "module @jit_f attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 2 : i32} {\n"
      "  func.func public @main(%arg0: tensor<2xf32> {mhlo.sharding = \"{replicated}\"} loc(\"x\")) -> (tensor<2xf32> {jax.result_info = \"\"}) {\n"
      "    %0:2 = call @g(%arg0) : (tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>) loc(#loc1)\n"
      "    %1 = func.call @g2(%0#1) : (tensor<2xf32>) -> tensor<2xf32>\n"
      "    return %1 : tensor<2xf32>\n  }\n"
      "  func.func private @g(%a: tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>) {\n    return %a, %a : tensor<2xf32>, tensor<2xf32>\n  }\n"
      "  func.func private @g2(%a: tensor<2xf32>) -> tensor<2xf32> {\n    return %a : tensor<2xf32>\n  }\n"
      "}\n#loc2 = loc(\"y\"(#loc1))\n";
  const char *generic =
      "\"builtin.module\"() <{sym_name = \"jit_f\"}> ({\n"
      "  \"func.func\"() <{arg_attrs = [{mhlo.sharding = \"{replicated}\"}], function_type = (tensor<2xf32>) -> tensor<2xf32>,"
      " res_attrs = [{jax.result_info = \"\"}], sym_name = \"main\", sym_visibility = \"public\"}> ({\n"
      "  ^bb0(%arg0: tensor<2xf32>):\n"
      "    %0:2 = \"func.call\"(%arg0) <{callee = @g}> : (tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>)\n"
      "    %1 = \"func.call\"(%0#1) <{callee = @g2}> : (tensor<2xf32>) -> tensor<2xf32>\n"
      "    \"func.return\"(%1) : (tensor<2xf32>) -> ()\n  }) : () -> ()\n"
      "  \"func.func\"() <{function_type = (tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>), sym_name = \"g\", sym_visibility = \"private\"}> ({\n"
      "  ^bb0(%a: tensor<2xf32>):\n    \"func.return\"(%a, %a) : (tensor<2xf32>, tensor<2xf32>) -> ()\n  }) : () -> ()\n"
      "  \"func.func\"() <{function_type = (tensor<2xf32>) -> tensor<2xf32>, sym_name = \"g2\", sym_visibility = \"private\"}> ({\n"
      "  ^bb0(%a: tensor<2xf32>):\n    \"func.return\"(%a) : (tensor<2xf32>) -> ()\n  }) : () -> ()\n"
      "}) {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 2 : i32} : () -> ()\n";
  assert_same_ir(pretty, generic);
  lm_module *m = parse_ok(pretty);
  assert_string_equal(m->name, "jit_f");
  assert_int_equal(lm_attr_int_or(lm_module_attr(m, "mhlo.num_replicas"), 0), 2);
  assert_int_equal(m->nfuncs, 3);
  assert_true(m->funcs[0].is_public);
  assert_false(m->funcs[1].is_public);
  const lm_attr *sh = lm_attrs_get(m->funcs[0].arg_attrs[0].fields, m->funcs[0].arg_attrs[0].n, "mhlo.sharding");
  assert_non_null(sh);
  assert_int_equal(sh->kind, LM_ATTR_STRING);
  assert_string_equal(sh->s, "{replicated}");
  lm_module_free(m);
}

static void test_custom_call_and_tests_ops(void **state) {
  lm_module *m = parse_ok(FN("%0 = stablehlo.constant dense<[1, 2]> : tensor<2xi32>\n"
                             " stablehlo.custom_call @check.expect_eq(%0, %0) {has_side_effect = true} : (tensor<2xi32>, tensor<2xi32>) -> ()\n"
                             " check.expect_eq_const %0, dense<[1, 2]> : tensor<2xi32>\n"
                             " check.expect_almost_eq %0, %0, tolerance = 0.5 : tensor<2xi32>\n"
                             " check.expect_close %0, %0, max_ulp_difference = 3 : tensor<2xi32>, tensor<2xi32>\n"
                             " check.expect_almost_eq_const %0, dense<1> : tensor<2xi32> {tolerance = 0.1 : f64}\n"
                             " return",
                             "()"));
  const lm_block *b = &m->funcs[0].body.blocks[0];
  const lm_attr *t = lm_op_attr(&b->ops[1], "call_target_name");
  assert_non_null(t);
  assert_int_equal(t->kind, LM_ATTR_STRING);
  assert_string_equal(t->s, "check.expect_eq");
  assert_int_equal(b->ops[2].code, LM_OP_CHECK_EXPECT_EQ_CONST);
  assert_int_equal(lm_op_attr(&b->ops[2], "value")->kind, LM_ATTR_DENSE);
  assert_true(lm_op_attr(&b->ops[3], "tolerance")->f == 0.5);
  assert_int_equal(lm_attr_int_or(lm_op_attr(&b->ops[4], "max_ulp_difference"), 0), 3);
  assert_true(lm_op_attr(&b->ops[5], "tolerance")->f == 0.1);
  lm_module_free(m);
}

static void test_sdy(void **state) {
  const char *pretty =
      "module @m attributes {mhlo.num_partitions = 8 : i32} {\n"
      "  sdy.mesh @mesh = <[\"x\"=4, \"y\"=2]>\n"
      "  func.func public @main(%arg0: tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{\"x\"}, {\"y\", ?}]>}) -> tensor<2x4xf32> {\n"
      "    %c = sdy.sharding_constraint %arg0 <@mesh, [{\"x\"}, {}]> : tensor<8x4xf32>\n"
      "    %0 = sdy.manual_computation(%c) in_shardings=[<@mesh, [{\"x\"}, {\"y\"}]>] out_shardings=[<@mesh, [{}, {\"y\"}]>]"
      " manual_axes={\"x\", \"y\"} (%arg1: tensor<2x2xf32>) {\n"
      "      sdy.return %arg1 : tensor<2x2xf32>\n    } : (tensor<8x4xf32>) -> tensor<2x4xf32>\n"
      "    return %0 : tensor<2x4xf32>\n  }\n}\n";
  const char *generic =
      "module @m attributes {mhlo.num_partitions = 8 : i32} {\n"
      "  \"sdy.mesh\"() <{mesh = #sdy.mesh<[\"x\"=4, \"y\"=2]>, sym_name = \"mesh\"}> : () -> ()\n"
      "  func.func public @main(%arg0: tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{\"x\"}, {\"y\", ?}]>}) -> tensor<2x4xf32> {\n"
      "    %c = \"sdy.sharding_constraint\"(%arg0) <{sharding = #sdy.sharding<@mesh, [{\"x\"}, {}]>}> : (tensor<8x4xf32>) -> tensor<8x4xf32>\n"
      "    %0 = \"sdy.manual_computation\"(%c) <{in_shardings = #sdy.sharding_per_value<[<@mesh, [{\"x\"}, {\"y\"}]>]>,"
      " manual_axes = #sdy<manual_axes{\"x\", \"y\"}>, out_shardings = #sdy.sharding_per_value<[<@mesh, [{}, {\"y\"}]>]>}> ({\n"
      "    ^bb0(%arg1: tensor<2x2xf32>):\n      \"sdy.return\"(%arg1) : (tensor<2x2xf32>) -> ()\n    }) : (tensor<8x4xf32>) -> tensor<2x4xf32>\n"
      "    return %0 : tensor<2x4xf32>\n  }\n}\n";
  assert_same_ir(pretty, generic);
  lm_module *m = parse_ok(pretty);
  assert_int_equal(m->nops, 1);
  assert_int_equal(m->ops[0].code, LM_OP_SDY_MESH);
  const lm_attr *mesh = lm_op_attr(&m->ops[0], "mesh");
  assert_int_equal(mesh->kind, LM_ATTR_STRUCT);
  int64_t sizes[4];
  assert_int_equal(lm_attr_ints(lm_attrs_get(mesh->fields, mesh->n, "axis_sizes"), sizes, 4), 2);
  assert_int_equal(sizes[0], 4);
  assert_int_equal(lm_op_attr(&m->ops[0], "sym_name")->kind, LM_ATTR_SYMBOL);
  const lm_attr *sh = lm_attrs_get(m->funcs[0].arg_attrs[0].fields, m->funcs[0].arg_attrs[0].n, "sdy.sharding");
  const lm_attr *dims = lm_attrs_get(sh->fields, sh->n, "dims");
  assert_int_equal(dims->n, 2);
  assert_int_equal(dims->items[1].n, 1); /* the open marker `?` is dropped */
  assert_string_equal(dims->items[1].items[0].s, "y");
  const lm_op *mc = &m->funcs[0].body.blocks[0].ops[1];
  assert_int_equal(mc->code, LM_OP_SDY_MANUAL_COMPUTATION);
  assert_int_equal(lm_op_attr(mc, "manual_axes")->n, 2);
  assert_int_equal(lm_op_attr(mc, "in_shardings")->items[0].kind, LM_ATTR_STRUCT);
  lm_module_free(m);
}

static void test_verifier(void **state) {
  static const struct {
    const char *text;
    int code;            /* what lm_parse_module returns */
    const char *needle;  /* in the message */
  } cases[] = {
      /* values from an enclosing block are visible in a region; a region's values are not visible after it */
      {FN("%0 = \"stablehlo.case\"(%i) ({\n  %c = stablehlo.constant dense<1.0> : tensor<f32>\n"
          "  stablehlo.return %c : tensor<f32>\n }) : (tensor<i32>) -> tensor<f32>\n return %c : tensor<f32>",
          "(%i: tensor<i32>) -> tensor<f32>"),
       LOOM_PARSE, "undefined SSA value '%c'"},
      {FN("%0 = stablehlo.add %a, %a : tensor<f32>", "(%a: tensor<f32>) -> tensor<f32>"), LOOM_VERIFY,
       "must end with func.return"},
      {FN("return %a : tensor<f32>", "(%a: tensor<f32>) -> tensor<i32>"), LOOM_VERIFY, "<string>:2:1"},
      {FN("%0 = call @nope(%a) : (tensor<f32>) -> tensor<f32>\n return %0 : tensor<f32>",
          "(%a: tensor<f32>) -> tensor<f32>"),
       LOOM_VERIFY, "@nope, which is not defined"},
      {"func.func @f() { return }\nfunc.func @f() { return }\n", LOOM_VERIFY, "defined twice"},
      {FN("return %a : tensor<f32>\n return %a : tensor<f32>", "(%a: tensor<f32>) -> tensor<f32>"), LOOM_VERIFY,
       "middle of a block"},
      {FN("%a = stablehlo.constant dense<1.0> : tensor<f32>\n return %a : tensor<f32>", "(%a: tensor<f32>) -> tensor<f32>"),
       LOOM_PARSE, "redefinition of SSA value '%a'"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    lm_module *m;
    lm_err e;
    assert_int_equal(lm_parse_module(cases[i].text, strlen(cases[i].text), NULL, &m, &e), cases[i].code);
    assert_non_null(strstr(e.msg, cases[i].needle));
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_elementwise_forms), cmocka_unit_test(test_attribute_forms),
      cmocka_unit_test(test_dot_and_conv),      cmocka_unit_test(test_regions),
      cmocka_unit_test(test_module_and_calls),  cmocka_unit_test(test_custom_call_and_tests_ops),
      cmocka_unit_test(test_sdy),               cmocka_unit_test(test_verifier),
      cmocka_unit_test(test_dense_resource),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
