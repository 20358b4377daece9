/* Tests of cutting a per-device program at its collectives (src/hlo/cut.c): the segments, what
 * each takes and hands on, constants copied into the segments that use them, process ids and
 * returned constants given by the runner, what stops cutting; every segment's text parses back
 * and verifies. (Running the segments through a plugin: tests/integration/test_pjrt_cut.py.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "hlo/cut.h"
#include "hlo/parse.h"

#define AR(x, t)                                                                                          \
  "%" #x "s = \"stablehlo.all_reduce\"(%" #x ") ({\n"                                                        \
  "    ^bb0(%p: tensor<f32>, %q: tensor<f32>):\n"                                                        \
  "      %t = stablehlo.add %p, %q : tensor<f32>\n"                                                      \
  "      stablehlo.return %t : tensor<f32>\n"                                                            \
  "    }) {replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>} : (" t ") -> " t "\n"

static const char *MLP =
    "module @m attributes {mhlo.num_partitions = 2 : i32, mhlo.num_replicas = 1 : i32} {\n"
    "  func.func public @main(%x: tensor<4x8xf32>, %w: tensor<8x2xf32>) -> (tensor<4x2xf32>, tensor<4x8xf32>) {\n"
    "    %c = stablehlo.constant dense<2.0> : tensor<4x2xf32>\n"
    "    %a = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : (tensor<4x8xf32>, tensor<8x2xf32>) -> tensor<4x2xf32>\n"
    "    %a2 = stablehlo.multiply %a, %c : tensor<4x2xf32>\n"
    "    " AR(a2, "tensor<4x2xf32>")
    "    %r = stablehlo.tanh %a2s : tensor<4x2xf32>\n"
    "    %r2 = stablehlo.add %r, %c : tensor<4x2xf32>\n"
    "    return %r2, %x : tensor<4x2xf32>, tensor<4x8xf32>\n"
    "  }\n"
    "}\n";

static lm_module *parse(const char *text) {
  lm_module *m = NULL;
  lm_err e;
  if (lm_parse_module(text, strlen(text), NULL, &m, &e) < 0) fail_msg("%s", e.msg);
  return m;
}

static void parses_back(const lm_cut *c) {
  for (uint32_t s = 0; s < c->nseg; s++) {
    lm_module *m = NULL;
    lm_err e;
    if (lm_parse_module(c->seg[s].text, strlen(c->seg[s].text), NULL, &m, &e) < 0)
      fail_msg("segment %u: %s\n%s", s, e.msg, c->seg[s].text);
    const lm_func *f = lm_module_func(m, "main");
    assert_non_null(f);
    assert_int_equal(f->nargs, c->seg[s].nin);
    assert_int_equal(f->nresults, c->seg[s].nout);
    lm_module_free(m);
  }
}

static bool has(const uint32_t *v, uint32_t n, uint32_t x) {
  for (uint32_t i = 0; i < n; i++)
    if (v[i] == x) return true;
  return false;
}

static void test_compute_collective_compute(void **state) {
  (void)state;
  lm_module *m = parse(MLP);
  lm_cut *c = NULL;
  const char *why = NULL;
  lm_err e;
  assert_int_equal(lm_cut_plan(m, true, &c, &why, &e), 0);
  assert_non_null(c);
  assert_int_equal(c->nseg, 3);
  assert_int_equal(c->ncollectives, 1);
  assert_int_equal(c->seg[0].kind, LM_SEG_COMPUTE);
  assert_int_equal(c->seg[1].kind, LM_SEG_COLLECTIVE);
  assert_int_equal(c->seg[2].kind, LM_SEG_COMPUTE);
  const lm_block *body = &lm_module_func(m, "main")->body.blocks[0];
  uint32_t x = body->args[0], w = body->args[1];
  /* segment 0 takes x and w, hands on a2 (used by the all_reduce) */
  assert_int_equal(c->seg[0].nin, 2);
  assert_true(has(c->seg[0].in, 2, x) && has(c->seg[0].in, 2, w));
  assert_int_equal(c->seg[0].nout, 1);
  assert_int_equal(c->seg[1].nin, 1);
  assert_int_equal(c->seg[1].in[0], c->seg[0].out[0]);
  assert_int_equal(c->seg[2].nin, 1);
  assert_int_equal(c->seg[2].in[0], c->seg[1].out[0]);
  assert_int_equal(c->seg[2].nout, 1);
  /* the constant is copied into both compute segments, not passed */
  assert_non_null(strstr(c->seg[0].text, "stablehlo.constant"));
  assert_non_null(strstr(c->seg[2].text, "stablehlo.constant"));
  assert_null(strstr(c->seg[1].text, "stablehlo.dot_general"));
  /* w's last use is segment 0; x is returned, so nobody drops it */
  assert_true(has(c->seg[0].release, c->seg[0].nrelease, w));
  assert_false(has(c->seg[0].release, c->seg[0].nrelease, x));
  assert_int_equal(c->nresults, 2);
  assert_int_equal(c->results[0], c->seg[2].out[0]);
  assert_int_equal(c->results[1], x);
  parses_back(c);
  lm_cut_free(c);
  lm_module_free(m);
}

static void test_collective_in_a_loop_is_not_cut(void **state) {
  (void)state;
  const char *text =
      "module @m {\n"
      "  func.func public @main(%x: tensor<4xf32>) -> tensor<4xf32> {\n"
      "    %z = stablehlo.constant dense<0> : tensor<i32>\n"
      "    %one = stablehlo.constant dense<1> : tensor<i32>\n"
      "    %r:2 = stablehlo.while(%i = %z, %v = %x) : tensor<i32>, tensor<4xf32>\n"
      "      cond {\n"
      "        %c = stablehlo.compare LT, %i, %one : (tensor<i32>, tensor<i32>) -> tensor<i1>\n"
      "        stablehlo.return %c : tensor<i1>\n"
      "      } do {\n"
      "        " AR(v, "tensor<4xf32>")
      "        %j = stablehlo.add %i, %one : tensor<i32>\n"
      "        stablehlo.return %j, %vs : tensor<i32>, tensor<4xf32>\n"
      "      }\n"
      "    return %r#1 : tensor<4xf32>\n"
      "  }\n"
      "}\n";
  lm_module *m = parse(text);
  lm_cut *c = NULL;
  const char *why = NULL;
  lm_err e;
  assert_int_equal(lm_cut_plan(m, true, &c, &why, &e), 0);
  assert_null(c);
  assert_non_null(why);
  assert_non_null(strstr(why, "stablehlo.all_reduce"));
  assert_non_null(strstr(why, "inside stablehlo.while"));
  lm_module_free(m);
}

static void test_process_ids_and_returned_constants_are_given(void **state) {
  (void)state;
  const char *text =
      "module @m attributes {mhlo.num_partitions = 2 : i32} {\n"
      "  func.func public @main(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<ui32>, tensor<2xi32>) {\n"
      "    %p = stablehlo.partition_id : tensor<ui32>\n"
      "    %k = stablehlo.constant dense<[7, 9]> : tensor<2xi32>\n"
      "    %f = stablehlo.convert %p : (tensor<ui32>) -> tensor<f32>\n"
      "    %b = stablehlo.broadcast_in_dim %f, dims = [] : (tensor<f32>) -> tensor<4xf32>\n"
      "    %y = stablehlo.add %x, %b : tensor<4xf32>\n"
      "    return %y, %p, %k : tensor<4xf32>, tensor<ui32>, tensor<2xi32>\n"
      "  }\n"
      "}\n";
  lm_module *m = parse(text);
  lm_cut *c = NULL;
  const char *why = NULL;
  lm_err e;
  assert_int_equal(lm_cut_plan(m, true, &c, &why, &e), 0);
  assert_non_null(c);
  assert_int_equal(c->nseg, 1); /* no collective: one compute segment, the process id an argument */
  assert_int_equal(c->ncollectives, 0);
  assert_null(strstr(c->seg[0].text, "partition_id"));
  assert_int_equal(c->seg[0].nin, 2);
  assert_int_equal(c->ngiven, 2);
  bool part = false, konst = false;
  for (uint32_t i = 0; i < c->ngiven; i++) {
    if (c->given[i].what == LM_CUT_PARTITION_ID) part = c->given[i].value == c->results[1];
    if (c->given[i].what == LM_CUT_CONSTANT) {
      konst = c->given[i].value == c->results[2] && c->given[i].const_bytes == 8;
      assert_int_equal(((const int32_t *)c->given[i].const_data)[1], 9);
    }
  }
  assert_true(part && konst);
  parses_back(c);
  lm_cut_free(c);
  lm_module_free(m);
}

static void test_custom_calls_keep_a_segment_on_loom(void **state) {
  (void)state;
  const char *text =
      "module @m {\n"
      "  func.func public @main(%x: tensor<4xf32>) -> tensor<4xf32> {\n"
      "    %y = func.call @helper(%x) : (tensor<4xf32>) -> tensor<4xf32>\n"
      "    " AR(y, "tensor<4xf32>")
      "    %z = stablehlo.negate %ys : tensor<4xf32>\n"
      "    return %z : tensor<4xf32>\n"
      "  }\n"
      "  func.func private @helper(%a: tensor<4xf32>) -> tensor<4xf32> {\n"
      "    %b = stablehlo.custom_call @foo(%a) : (tensor<4xf32>) -> tensor<4xf32>\n"
      "    return %b : tensor<4xf32>\n"
      "  }\n"
      "  func.func private @unused(%a: tensor<4xf32>) -> tensor<4xf32> {\n"
      "    return %a : tensor<4xf32>\n"
      "  }\n"
      "}\n";
  lm_module *m = parse(text);
  lm_cut *c = NULL;
  const char *why = NULL;
  lm_err e;
  assert_int_equal(lm_cut_plan(m, false, &c, &why, &e), 0);
  assert_non_null(c);
  assert_int_equal(c->nseg, 3);
  assert_non_null(c->seg[0].loom_only);
  assert_true(c->seg[0].effects);
  assert_null(c->seg[2].loom_only);
  /* each segment carries the functions it reaches, and only those */
  assert_non_null(strstr(c->seg[0].text, "@helper"));
  assert_null(strstr(c->seg[2].text, "@helper"));
  assert_null(strstr(c->seg[0].text, "@unused"));
  parses_back(c);
  lm_cut_free(c);
  lm_module_free(m);
}

/* FSDP's shape: each layer gathers its weight, then multiplies. The gathers need only arguments, so
 * they all run first, in one collective segment, and the layers' compute in one segment after:
 * two segments, not four. */
static void test_collectives_go_as_early_as_their_inputs_allow(void **state) {
  (void)state;
  const char *text =
      "module @m attributes {mhlo.num_partitions = 2 : i32} {\n"
      "  func.func public @main(%x: tensor<4x8xf32>, %w1: tensor<4x8xf32>, %w2: tensor<4x8xf32>) -> tensor<4x8xf32> {\n"
      "    %g1 = \"stablehlo.all_gather\"(%w1) {all_gather_dim = 0 : i64, replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>} : (tensor<4x8xf32>) -> tensor<8x8xf32>\n"
      "    %d1 = stablehlo.dot_general %x, %g1, contracting_dims = [1] x [0] : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>\n"
      "    %g2 = \"stablehlo.all_gather\"(%w2) {all_gather_dim = 0 : i64, replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>} : (tensor<4x8xf32>) -> tensor<8x8xf32>\n"
      "    %d2 = stablehlo.dot_general %d1, %g2, contracting_dims = [1] x [0] : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>\n"
      "    return %d2 : tensor<4x8xf32>\n"
      "  }\n"
      "}\n";
  lm_module *m = parse(text);
  lm_cut *c = NULL;
  const char *why = NULL;
  lm_err e;
  assert_int_equal(lm_cut_plan(m, true, &c, &why, &e), 0);
  assert_non_null(c);
  assert_int_equal(c->ncollectives, 2);
  assert_int_equal(c->nseg, 2);
  assert_int_equal(c->seg[0].kind, LM_SEG_COLLECTIVE);
  assert_int_equal(c->seg[0].nops, 2);
  assert_int_equal(c->seg[1].kind, LM_SEG_COMPUTE);
  assert_int_equal(c->seg[1].nops, 2);
  assert_int_equal(c->seg[1].nin, 3); /* x and both gathered weights */
  /* the gathers keep their program order */
  const char *t = c->seg[0].text, *a = strstr(t, "all_gather"), *b = a ? strstr(a + 1, "all_gather") : NULL;
  assert_non_null(b);
  parses_back(c);
  lm_cut_free(c);
  lm_module_free(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_compute_collective_compute),
      cmocka_unit_test(test_collective_in_a_loop_is_not_cut),
      cmocka_unit_test(test_process_ids_and_returned_constants_are_given),
      cmocka_unit_test(test_custom_calls_keep_a_segment_on_loom),
      cmocka_unit_test(test_collectives_go_as_early_as_their_inputs_allow),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
