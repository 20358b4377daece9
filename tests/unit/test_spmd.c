/* Unit tests for sharding arithmetic (src/common/sharding.c) and the SPMD analysis and
 * per-device rewrite (src/hlo/spmd.c), on modules as current JAX lowers them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "common/sharding.h"
#include "exec/exec.h"
#include "hlo/parse.h"
#include "hlo/spmd.h"

/* ---- sharding ---- */

static void test_sharding_regions(void **state) {
  (void)state;
  uint32_t devs[8] = {7, 6, 5, 4, 3, 2, 1, 0};
  lm_sharding s;
  lm_sharding_init(&s);
  s.mesh_rank = 2;
  s.mesh_shape[0] = 2;
  s.mesh_shape[1] = 4;
  s.ndev = 8;
  s.devices = devs;
  s.dim_axes[0][0] = 1; /* dim 0 over "y" (4), dim 1 over "x" (2) */
  s.dim_axes[1][0] = 0;
  int64_t dims[2] = {8, 6};
  assert_int_equal(lm_sharding_check(&s, 2, dims, NULL), 0);
  int64_t off[2], sd[2];
  lm_sharding_shard(&s, 2, dims, 5, off, sd); /* mesh (1, 1) */
  assert_int_equal(sd[0], 2);
  assert_int_equal(sd[1], 3);
  assert_int_equal(off[0], 2);
  assert_int_equal(off[1], 3);
  /* a region copy round trip over every shard rebuilds the array */
  int32_t g[48], back[48], shard[6];
  for (int i = 0; i < 48; i++) g[i] = i;
  memset(back, 0xff, sizeof back);
  for (uint32_t i = 0; i < 8; i++) {
    lm_sharding_shard(&s, 2, dims, i, off, sd);
    lm_region_copy(2, dims, off, sd, 4, g, shard, true);
    assert_int_equal(shard[0], off[0] * 6 + off[1]);
    lm_region_copy(2, dims, off, sd, 4, back, shard, false);
  }
  assert_memory_equal(g, back, sizeof g);
  uint64_t first;
  assert_false(lm_region_contiguous(2, dims, off, sd, &first));
  /* two axes on one dimension, major to minor */
  lm_sharding_init(&s);
  s.mesh_rank = 2;
  s.mesh_shape[0] = 2;
  s.mesh_shape[1] = 4;
  s.ndev = 8;
  s.dim_axes[0][0] = 1;
  s.dim_axes[0][1] = 0;
  int64_t d1[1] = {16};
  assert_int_equal(lm_sharding_check(&s, 1, d1, NULL), 0);
  lm_sharding_shard(&s, 1, d1, 1, off, sd); /* mesh (0, 1): index 1*2 + 0 */
  assert_int_equal(off[0], 4);
  assert_int_equal(sd[0], 2);
  assert_true(lm_region_contiguous(1, d1, off, sd, &first));
  assert_int_equal(first, 4);
}

static void test_sharding_errors(void **state) {
  (void)state;
  lm_err err;
  lm_sharding s;
  lm_sharding_init(&s);
  s.mesh_rank = 1;
  s.mesh_shape[0] = 4;
  s.ndev = 4;
  s.dim_axes[0][0] = 0;
  int64_t dims[1] = {10};
  assert_int_equal(lm_sharding_check(&s, 1, dims, &err), LOOM_INVALID_ARGUMENT);
  assert_non_null(strstr(err.msg, "does not split into 4"));
  s.ndev = 3;
  dims[0] = 8;
  assert_int_equal(lm_sharding_check(&s, 1, dims, &err), LOOM_INVALID_ARGUMENT);
  s.ndev = 4;
  s.dim_axes[0][1] = 0; /* axis twice */
  assert_int_equal(lm_sharding_check(&s, 1, dims, &err), LOOM_INVALID_ARGUMENT);
  s.dim_axes[0][1] = -1;
  s.dim_axes[1][0] = 0; /* beyond the rank */
  assert_int_equal(lm_sharding_check(&s, 1, dims, &err), LOOM_INVALID_ARGUMENT);
  s.dim_axes[1][0] = -1;
  s.dim_axes[0][0] = 3; /* no such axis */
  assert_int_equal(lm_sharding_check(&s, 1, dims, &err), LOOM_INVALID_ARGUMENT);
  uint32_t dup[4] = {0, 1, 1, 2};
  s.dim_axes[0][0] = 0;
  s.devices = dup;
  assert_int_equal(lm_sharding_check(&s, 1, dims, &err), LOOM_INVALID_ARGUMENT);
  assert_non_null(strstr(err.msg, "twice"));
}

/* ---- SPMD analysis ---- */

static lm_module *parse(const char *text) {
  lm_module *m = NULL;
  lm_err err;
  int rc = lm_parse_module(text, strlen(text), NULL, &m, &err);
  if (rc < 0) fail_msg("parse: %s", err.msg);
  return m;
}

/* jax.pmap(lambda v: lax.psum(v, 'devices'), axis_name='devices') on 8 devices, jax 0.10 */
static const char *k_pmap_psum =
    "module @jit__fun attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} {\n"
    "  sdy.mesh @mesh = <[\"devices\"=8]>\n"
    "  func.func public @main(%arg0: tensor<8xi32> {sdy.sharding = #sdy.sharding<@mesh, [{\"devices\"}]>}) -> "
    "(tensor<8xi32> {jax.result_info = \"result\", sdy.sharding = #sdy.sharding<@mesh, [{\"devices\"}]>}) {\n"
    "    %0 = sdy.manual_computation(%arg0) in_shardings=[<@mesh, [{\"devices\"}]>] out_shardings=[<@mesh, "
    "[{\"devices\"}]>] manual_axes={\"devices\"} (%arg1: tensor<1xi32>) {\n"
    "      %1 = stablehlo.reshape %arg1 : (tensor<1xi32>) -> tensor<i32>\n"
    "      %2 = \"stablehlo.all_reduce\"(%1) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, "
    "replica_groups = dense<[[0, 1, 2, 3, 4, 5, 6, 7]]> : tensor<1x8xi64>, use_global_device_ids}> ({\n"
    "      ^bb0(%arg2: tensor<i32>, %arg3: tensor<i32>):\n"
    "        %4 = stablehlo.add %arg2, %arg3 : tensor<i32>\n"
    "        stablehlo.return %4 : tensor<i32>\n"
    "      }) : (tensor<i32>) -> tensor<i32>\n"
    "      %3 = stablehlo.broadcast_in_dim %2, dims = [] : (tensor<i32>) -> tensor<1xi32>\n"
    "      sdy.return %3 : tensor<1xi32>\n"
    "    } : (tensor<8xi32>) -> tensor<8xi32>\n"
    "    return %0 : tensor<8xi32>\n"
    "  }\n"
    "}\n";

/* two shard_maps in a row over a 2x4 mesh (x, y), elementwise, the second consuming the first */
static const char *k_two_maps =
    "module @m attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} {\n"
    "  sdy.mesh @mesh = <[\"x\"=2, \"y\"=4]>\n"
    "  func.func public @main(%arg0: tensor<4x8xf32>, %arg1: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {\n"
    "    %0 = sdy.manual_computation(%arg0, %arg1) in_shardings=[<@mesh, [{\"x\"}, {\"y\"}]>, <@mesh, [{}, {}]>] "
    "out_shardings=[<@mesh, [{\"x\"}, {\"y\"}]>] manual_axes={\"x\", \"y\"} (%a: tensor<2x2xf32>, %b: tensor<4x8xf32>) {\n"
    "      %s = stablehlo.slice %b [0:2, 0:2] : (tensor<4x8xf32>) -> tensor<2x2xf32>\n"
    "      %1 = stablehlo.add %a, %s : tensor<2x2xf32>\n"
    "      sdy.return %1 : tensor<2x2xf32>\n"
    "    } : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>\n"
    "    %2 = sdy.manual_computation(%0) in_shardings=[<@mesh, [{\"x\"}, {\"y\"}]>] out_shardings=[<@mesh, "
    "[{\"x\"}, {\"y\"}]>] manual_axes={\"x\", \"y\"} (%c: tensor<2x2xf32>) {\n"
    "      %3 = stablehlo.multiply %c, %c : tensor<2x2xf32>\n"
    "      sdy.return %3 : tensor<2x2xf32>\n"
    "    } : (tensor<4x8xf32>) -> tensor<4x8xf32>\n"
    "    return %2, %0 : tensor<4x8xf32>, tensor<4x8xf32>\n"
    "  }\n"
    "}\n";

static void test_pmap_form(void **state) {
  (void)state;
  lm_module *m = parse(k_pmap_psum);
  lm_spmd_info *info;
  lm_err err;
  assert_int_equal(lm_spmd_analyze(m, &info, &err), 0);
  assert_int_equal(info->form, LM_SPMD_PARTITIONS);
  assert_int_equal(info->nproc, 8);
  assert_int_equal(info->ninputs, 1);
  assert_int_equal(info->inputs[0].global.dims[0], 8);
  assert_int_equal(info->inputs[0].local.dims[0], 1);
  assert_int_equal(info->inputs[0].sh.dim_axes[0][0], 0);
  assert_int_equal(info->outputs[0].local.dims[0], 1);
  for (uint32_t i = 0; i < 8; i++) assert_int_equal(info->inputs[0].sh.devices[i], i);
  lm_spmd_info_free(info);
  assert_int_equal(lm_spmd_localize(m, &err), 0);
  const lm_func *f = lm_module_func(m, "main");
  assert_int_equal(f->arg_types[0].dims[0], 1);
  assert_int_equal(f->result_types[0].dims[0], 1);
  assert_int_equal(f->body.blocks[0].nops, 4); /* reshape, all_reduce, broadcast, return */
  assert_int_equal(f->body.blocks[0].ops[1].code, LM_OP_ALL_REDUCE);
  lm_module_free(m);
}

static int run1(lm_program *p, lm_device *dev, int64_t part, lm_buffer **args, uint32_t nargs, lm_buffer **res,
                uint32_t nres) {
  lm_run_opts o = {.device = dev, .partition_id = part};
  lm_err err;
  int rc = lm_program_run(p, NULL, &o, args, nargs, res, nres, &err);
  if (rc < 0) fail_msg("run: %s", err.msg);
  return rc;
}

static void test_two_maps_run(void **state) {
  (void)state;
  lm_module *m = parse(k_two_maps);
  lm_spmd_info *info;
  lm_err err;
  assert_int_equal(lm_spmd_analyze(m, &info, &err), 0);
  assert_int_equal(info->form, LM_SPMD_PARTITIONS);
  assert_int_equal(info->noutputs, 2);
  assert_true(lm_sharding_is_replicated(&info->inputs[1].sh));
  assert_int_equal(info->inputs[1].local.dims[1], 8);
  assert_int_equal(lm_spmd_localize(m, &err), 0);
  lm_program *p;
  if (lm_program_create(m, &p, &err) < 0) fail_msg("create: %s", err.msg);
  lm_device *dev = lm_device_create(1 << 20);
  /* run every process on its local shard and assemble: out0 = (a + b[0:2,0:2] tiled)^2 */
  float a[32], b[32], out0[32], out1[32];
  for (int i = 0; i < 32; i++) a[i] = (float)i, b[i] = (float)(100 + i);
  int64_t gd[2] = {4, 8};
  for (uint32_t proc = 0; proc < 8; proc++) {
    int64_t off[2], sd[2];
    lm_sharding_shard(&info->inputs[0].sh, 2, gd, proc, off, sd);
    float sa[4];
    lm_region_copy(2, gd, off, sd, 4, a, sa, true);
    lm_buffer *args[2], *res[2];
    assert_int_equal(lm_buffer_from_data(dev, &info->inputs[0].local, sa, sizeof sa, &args[0], NULL), 0);
    assert_int_equal(lm_buffer_from_data(dev, &info->inputs[1].local, b, sizeof b, &args[1], NULL), 0);
    run1(p, dev, proc, args, 2, res, 2);
    lm_region_copy(2, gd, off, sd, 4, out0, res[0]->data, false);
    lm_region_copy(2, gd, off, sd, 4, out1, res[1]->data, false);
    for (int i = 0; i < 2; i++) lm_buffer_release(args[i]), lm_buffer_release(res[i]);
  }
  for (int r = 0; r < 4; r++)
    for (int c = 0; c < 8; c++) {
      float s = a[r * 8 + c] + b[(r % 2) * 8 + (c % 2)];
      assert_float_equal(out1[r * 8 + c], s, 0);
      assert_float_equal(out0[r * 8 + c], s * s, 0);
    }
  lm_program_destroy(p);
  lm_device_destroy(dev);
  lm_spmd_info_free(info);
}

/* Replicated work outside the manual computations (a constant fed in whole, a reduction of a
 * replicated result) runs on every process. */
static const char *k_outside =
    "module attributes {mhlo.num_partitions = 4 : i32} {\n"
    "  sdy.mesh @mesh = <[\"x\"=4]>\n"
    "  func.func @main(%a: tensor<8xf32>, %s: tensor<f32>) -> (tensor<f32>, tensor<8xf32>) {\n"
    "    %c = stablehlo.constant dense<2.0> : tensor<2xf32>\n"
    "    %0:2 = sdy.manual_computation(%a, %c) in_shardings=[<@mesh, [{\"x\"}]>, <@mesh, [{}]>] "
    "out_shardings=[<@mesh, []>, <@mesh, [{\"x\"}]>] manual_axes={\"x\"} (%b: tensor<2xf32>, %k: tensor<2xf32>) {\n"
    "      %m = stablehlo.multiply %b, %k : tensor<2xf32>\n"
    "      %z = stablehlo.constant dense<0.0> : tensor<f32>\n"
    "      %r = stablehlo.reduce(%k init: %z) applies stablehlo.add across dimensions = [0] : (tensor<2xf32>, tensor<f32>) -> tensor<f32>\n"
    "      sdy.return %r, %m : tensor<f32>, tensor<2xf32>\n"
    "    } : (tensor<8xf32>, tensor<2xf32>) -> (tensor<f32>, tensor<8xf32>)\n"
    "    %t = stablehlo.add %0#0, %s : tensor<f32>\n"
    "    return %t, %0#1 : tensor<f32>, tensor<8xf32>\n"
    "  }\n"
    "}\n";

static void test_replicated_outside(void **state) {
  (void)state;
  lm_module *m = parse(k_outside);
  lm_spmd_info *info;
  lm_err err;
  if (lm_spmd_analyze(m, &info, &err) < 0) fail_msg("analyze: %s", err.msg);
  assert_true(lm_sharding_is_replicated(&info->inputs[1].sh));
  assert_true(lm_sharding_is_replicated(&info->outputs[0].sh));
  assert_int_equal(info->outputs[1].local.dims[0], 2);
  if (lm_spmd_localize(m, &err) < 0) fail_msg("localize: %s", err.msg);
  lm_program *p;
  if (lm_program_create(m, &p, &err) < 0) fail_msg("create: %s", err.msg);
  lm_device *dev = lm_device_create(1 << 20);
  float a[2] = {1, 2}, s = 10;
  lm_buffer *args[2], *res[2];
  assert_int_equal(lm_buffer_from_data(dev, &info->inputs[0].local, a, sizeof a, &args[0], NULL), 0);
  assert_int_equal(lm_buffer_from_data(dev, &info->inputs[1].local, &s, sizeof s, &args[1], NULL), 0);
  run1(p, dev, 1, args, 2, res, 2);
  assert_float_equal(*(float *)res[0]->data, 14.0f, 0); /* 2 + 2 + 10 */
  assert_float_equal(((float *)res[1]->data)[1], 4.0f, 0);
  for (int i = 0; i < 2; i++) lm_buffer_release(args[i]), lm_buffer_release(res[i]);
  lm_program_destroy(p);
  lm_device_destroy(dev);
  lm_spmd_info_free(info);
}

static void expect_error(const char *text, int code, const char *needle) {
  lm_module *m = parse(text);
  lm_spmd_info *info = (lm_spmd_info *)1;
  lm_err err;
  int rc = lm_spmd_analyze(m, &info, &err);
  if (rc != code || !strstr(err.msg, needle)) fail_msg("expected %d with '%s', got %d: %s", code, needle, rc, err.msg);
  assert_null(info);
  lm_module_free(m);
}

static void test_forms_and_errors(void **state) {
  (void)state;
  /* replicas: per-replica T is [R, T...] globally */
  lm_module *m = parse("module attributes {mhlo.num_replicas = 4 : i32} {\n"
                       "  func.func @main(%a: tensor<3xf32>) -> tensor<3xf32> {\n"
                       "    return %a : tensor<3xf32>\n  }\n}\n");
  lm_spmd_info *info;
  lm_err err;
  assert_int_equal(lm_spmd_analyze(m, &info, &err), 0);
  assert_int_equal(info->form, LM_SPMD_REPLICAS);
  assert_int_equal(info->nproc, 4);
  assert_int_equal(info->inputs[0].global.rank, 2);
  assert_int_equal(info->inputs[0].global.dims[0], 4);
  assert_int_equal(info->inputs[0].global.dims[1], 3);
  lm_spmd_info_free(info);
  lm_module_free(m);
  /* an annotated global program: the partitioner's (tests/unit/test_partition.c) */
  m = parse("module attributes {mhlo.num_partitions = 8 : i32} {\n"
            "  sdy.mesh @mesh = <[\"x\"=8]>\n"
            "  func.func @main(%a: tensor<8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{\"x\"}]>}) -> tensor<8xf32> {\n"
            "    %0 = stablehlo.add %a, %a : tensor<8xf32>\n"
            "    return %0 : tensor<8xf32>\n  }\n}\n");
  assert_int_equal(lm_spmd_analyze(m, &info, &err), 0);
  assert_int_equal(info->form, LM_SPMD_PARTITIONS);
  assert_true(info->partitioned);
  assert_int_equal(info->inputs[0].local.dims[0], 1);
  assert_int_equal(info->outputs[0].local.dims[0], 1); /* propagated from the argument */
  lm_spmd_info_free(info);
  lm_module_free(m);
  /* an op outside the manual computation */
  expect_error("module attributes {mhlo.num_partitions = 2 : i32} {\n"
               "  sdy.mesh @mesh = <[\"x\"=2]>\n"
               "  func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {\n"
               "    %s = stablehlo.sine %a : tensor<4xf32>\n"
               "    %0 = sdy.manual_computation(%s) in_shardings=[<@mesh, [{\"x\"}]>] out_shardings=[<@mesh, [{\"x\"}]>] "
               "manual_axes={\"x\"} (%b: tensor<2xf32>) {\n"
               "      sdy.return %b : tensor<2xf32>\n"
               "    } : (tensor<4xf32>) -> tensor<4xf32>\n"
               "    return %0 : tensor<4xf32>\n  }\n}\n",
               LOOM_UNSUPPORTED, "slicing it per device");
  /* a sharded value used outside */
  expect_error("module attributes {mhlo.num_partitions = 2 : i32} {\n"
               "  sdy.mesh @mesh = <[\"x\"=2]>\n"
               "  func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {\n"
               "    %0 = sdy.manual_computation(%a) in_shardings=[<@mesh, [{\"x\"}]>] out_shardings=[<@mesh, [{\"x\"}]>] "
               "manual_axes={\"x\"} (%b: tensor<2xf32>) {\n"
               "      sdy.return %b : tensor<2xf32>\n"
               "    } : (tensor<4xf32>) -> tensor<4xf32>\n"
               "    %s = stablehlo.sine %0 : tensor<4xf32>\n"
               "    return %s : tensor<4xf32>\n  }\n}\n",
               LOOM_UNSUPPORTED, "uses a sharded value");
  /* a replicated constant passed sharded */
  expect_error("module attributes {mhlo.num_partitions = 2 : i32} {\n"
               "  sdy.mesh @mesh = <[\"x\"=2]>\n"
               "  func.func @main() -> tensor<4xf32> {\n"
               "    %c = stablehlo.constant dense<1.0> : tensor<4xf32>\n"
               "    %0 = sdy.manual_computation(%c) in_shardings=[<@mesh, [{\"x\"}]>] out_shardings=[<@mesh, [{\"x\"}]>] "
               "manual_axes={\"x\"} (%b: tensor<2xf32>) {\n"
               "      sdy.return %b : tensor<2xf32>\n"
               "    } : (tensor<4xf32>) -> tensor<4xf32>\n"
               "    return %0 : tensor<4xf32>\n  }\n}\n",
               LOOM_UNSUPPORTED, "slicing it per device is not supported");
  /* a shape that does not divide */
  expect_error("module attributes {mhlo.num_partitions = 4 : i32} {\n"
               "  sdy.mesh @mesh = <[\"x\"=4]>\n"
               "  func.func @main(%a: tensor<6xf32>) -> tensor<6xf32> {\n"
               "    %0 = sdy.manual_computation(%a) in_shardings=[<@mesh, [{\"x\"}]>] out_shardings=[<@mesh, [{}]>] "
               "manual_axes={\"x\"} (%b: tensor<1xf32>) {\n"
               "      %c = stablehlo.constant dense<0.0> : tensor<6xf32>\n"
               "      sdy.return %c : tensor<6xf32>\n"
               "    } : (tensor<6xf32>) -> tensor<6xf32>\n"
               "    return %0 : tensor<6xf32>\n  }\n}\n",
               LOOM_VERIFY, "does not split into 4");
  /* mesh size against num_partitions */
  expect_error("module attributes {mhlo.num_partitions = 8 : i32} {\n"
               "  sdy.mesh @mesh = <[\"x\"=4]>\n"
               "  func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {\n"
               "    %0 = sdy.manual_computation(%a) in_shardings=[<@mesh, [{\"x\"}]>] out_shardings=[<@mesh, [{\"x\"}]>] "
               "manual_axes={\"x\"} (%b: tensor<1xf32>) {\n"
               "      sdy.return %b : tensor<1xf32>\n"
               "    } : (tensor<4xf32>) -> tensor<4xf32>\n"
               "    return %0 : tensor<4xf32>\n  }\n}\n",
               LOOM_VERIFY, "mhlo.num_partitions is 8");
  /* partially manual */
  expect_error("module attributes {mhlo.num_partitions = 4 : i32} {\n"
               "  sdy.mesh @mesh = <[\"x\"=2, \"y\"=2]>\n"
               "  func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {\n"
               "    %0 = sdy.manual_computation(%a) in_shardings=[<@mesh, [{\"x\"}]>] out_shardings=[<@mesh, [{\"x\"}]>] "
               "manual_axes={\"x\"} (%b: tensor<2xf32>) {\n"
               "      sdy.return %b : tensor<2xf32>\n"
               "    } : (tensor<4xf32>) -> tensor<4xf32>\n"
               "    return %0 : tensor<4xf32>\n  }\n}\n",
               LOOM_UNSUPPORTED, "axis \"y\" automatic");
  /* a wrong local type in the body */
  expect_error("module attributes {mhlo.num_partitions = 2 : i32} {\n"
               "  sdy.mesh @mesh = <[\"x\"=2]>\n"
               "  func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {\n"
               "    %0 = sdy.manual_computation(%a) in_shardings=[<@mesh, [{\"x\"}]>] out_shardings=[<@mesh, [{}]>] "
               "manual_axes={\"x\"} (%b: tensor<4xf32>) {\n"
               "      sdy.return %b : tensor<4xf32>\n"
               "    } : (tensor<4xf32>) -> tensor<4xf32>\n"
               "    return %0 : tensor<4xf32>\n  }\n}\n",
               LOOM_VERIFY, "local shards of tensor<2xf32>");
  /* device_ids permute the mesh */
  m = parse("module attributes {mhlo.num_partitions = 4 : i32} {\n"
            "  sdy.mesh @mesh = <[\"x\"=4], device_ids=[3, 2, 1, 0]>\n"
            "  func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {\n"
            "    %0 = sdy.manual_computation(%a) in_shardings=[<@mesh, [{\"x\"}]>] out_shardings=[<@mesh, [{\"x\"}]>] "
            "manual_axes={\"x\"} (%b: tensor<1xf32>) {\n"
            "      sdy.return %b : tensor<1xf32>\n"
            "    } : (tensor<4xf32>) -> tensor<4xf32>\n"
            "    return %0 : tensor<4xf32>\n  }\n}\n");
  assert_int_equal(lm_spmd_analyze(m, &info, &err), 0);
  assert_int_equal(info->mesh_procs[0], 3);
  assert_int_equal(info->inputs[0].sh.devices[3], 0);
  lm_spmd_info_free(info);
  lm_module_free(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sharding_regions), cmocka_unit_test(test_sharding_errors),
      cmocka_unit_test(test_pmap_form),        cmocka_unit_test(test_two_maps_run),
      cmocka_unit_test(test_forms_and_errors), cmocka_unit_test(test_replicated_outside),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
