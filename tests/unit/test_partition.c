/* The SPMD partitioner (hlo/partition.c) in one process: annotated global programs are analyzed,
 * partitioned and run as 8 processes on threads with collectives (spmd_local.h); every result is
 * compared with the same program run unpartitioned on one device. A sweep runs seven programs
 * under every combination of argument and result shardings over a 2x4 mesh, so each resharding
 * path (all_gather, all_to_all, local slices, all_reduce, reduce_scatter, fallback) meets many
 * layouts. Also: the errors, the explain report, and propagation from one annotation. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "common/sharding.h"
#include "exec/exec.h"
#include "hlo/parse.h"
#include "hlo/partition.h"
#include "hlo/spmd.h"
#include "worker/spmd_local.h"

#define MAXA 4

typedef struct garr {
  lm_type t;
  float *data;
} garr;

static lm_module *parse(const char *text, lm_err *err) {
  lm_module *m = NULL;
  if (lm_parse_module(text, strlen(text), NULL, &m, err) < 0) return NULL;
  return m;
}

/* The unpartitioned run: the program as written, on one device. */
static int run_global(const char *text, garr *in, uint32_t nin, garr *out, uint32_t nout, lm_err *err) {
  lm_module *m = parse(text, err);
  if (!m) return -1;
  lm_program *p;
  if (lm_program_create(m, &p, err) < 0) return -1;
  lm_device *dev = lm_device_create((size_t)1 << 26);
  lm_buffer *args[MAXA], *res[MAXA];
  for (uint32_t i = 0; i < nin; i++)
    assert_int_equal(lm_buffer_from_data(dev, &in[i].t, in[i].data, lm_type_nbytes(&in[i].t), &args[i], NULL), 0);
  lm_run_opts o = {.device = dev};
  int rc = lm_program_run(p, "main", &o, args, nin, res, nout, err);
  for (uint32_t j = 0; rc == 0 && j < nout; j++) {
    out[j].t = res[j]->type;
    out[j].data = malloc(lm_type_nbytes(&out[j].t) + 1);
    memcpy(out[j].data, res[j]->data, lm_type_nbytes(&out[j].t));
    lm_buffer_release(res[j]);
  }
  for (uint32_t i = 0; i < nin; i++) lm_buffer_release(args[i]);
  lm_program_destroy(p);
  lm_device_destroy(dev);
  return rc;
}

/* The partitioned run: shards in, 8 processes, shards assembled back into global results. */
static int run_partitioned(const char *text, garr *in, uint32_t nin, garr *out, uint32_t nout, lm_err *err) {
  lm_module *m = parse(text, err);
  if (!m) return -1;
  lm_spmd_info *info;
  if (lm_spmd_analyze(m, &info, err) < 0) {
    lm_module_free(m);
    return -1;
  }
  assert_true(info->partitioned);
  if (lm_spmd_localize(m, err) < 0) {
    lm_module_free(m);
    lm_spmd_info_free(info);
    return -1;
  }
  lm_program *p;
  if (lm_program_create(m, &p, err) < 0) {
    lm_spmd_info_free(info);
    return -1;
  }
  uint32_t n = info->nproc;
  lm_buffer *args[64 * MAXA], *res[64 * MAXA];
  int64_t offs[LM_MAX_RANK], sd[LM_MAX_RANK];
  for (uint32_t pos = 0; pos < n; pos++) {
    uint32_t proc = info->mesh_procs[pos];
    for (uint32_t i = 0; i < nin; i++) {
      const lm_spmd_value *v = &info->inputs[i];
      lm_sharding_shard(&v->sh, v->global.rank, v->global.dims, pos, offs, sd);
      assert_int_equal(lm_buffer_alloc(NULL, &v->local, &args[proc * nin + i], NULL), 0);
      lm_region_copy(v->global.rank, v->global.dims, offs, sd, 4, in[i].data, args[proc * nin + i]->data, true);
    }
  }
  const char *fns[64];
  for (uint32_t i = 0; i < n; i++) fns[i] = "main";
  int rc = lm_spmd_local_run(p, fns, 1, n, args, n * nin, res, n * nout, NULL, (size_t)1 << 26, NULL, err);
  for (uint32_t j = 0; rc == 0 && j < nout; j++) {
    const lm_spmd_value *v = &info->outputs[j];
    out[j].t = v->global;
    out[j].data = calloc(1, lm_type_nbytes(&v->global) + 4);
    for (uint32_t pos = 0; pos < n; pos++) {
      uint32_t proc = info->mesh_procs[pos];
      lm_sharding_shard(&v->sh, v->global.rank, v->global.dims, pos, offs, sd);
      assert_true(lm_type_equal(&res[proc * nout + j]->type, &v->local));
      lm_region_copy(v->global.rank, v->global.dims, offs, sd, 4, out[j].data, res[proc * nout + j]->data, false);
    }
  }
  for (uint32_t i = 0; i < n * nin; i++) lm_buffer_release(args[i]);
  for (uint32_t i = 0; rc == 0 && i < n * nout; i++) lm_buffer_release(res[i]);
  lm_program_destroy(p);
  lm_spmd_info_free(info);
  return rc;
}

static void fill(garr *a, lm_dtype dt, int rank, const int64_t *dims, unsigned seed) {
  lm_type_tensor(&a->t, dt, rank, dims);
  size_t n = (size_t)lm_type_numel(&a->t);
  a->data = malloc(n * 4 + 4);
  for (size_t i = 0; i < n; i++) {
    seed = seed * 1103515245u + 12345u;
    a->data[i] = (float)((int)((seed >> 16) % 17) - 8); /* small integers: sums exact in any order */
  }
}

/* Runs text both ways and compares; returns the number of mismatching elements (0 = equal). */
static size_t compare(const char *text, garr *in, uint32_t nin, uint32_t nout, const char *what) {
  garr want[MAXA] = {0}, got[MAXA] = {0};
  lm_err err;
  if (run_global(text, in, nin, want, nout, &err) < 0) fail_msg("%s: unpartitioned run: %s\n%s", what, err.msg, text);
  if (run_partitioned(text, in, nin, got, nout, &err) < 0) fail_msg("%s: partitioned run: %s\n%s", what, err.msg, text);
  size_t bad = 0;
  for (uint32_t j = 0; j < nout; j++) {
    assert_true(lm_type_equal(&want[j].t, &got[j].t));
    size_t n = (size_t)lm_type_numel(&want[j].t);
    for (size_t i = 0; i < n; i++)
      if (memcmp(&want[j].data[i], &got[j].data[i], 4)) { /* bit for bit (i32 results too) */
        if (!bad) fprintf(stderr, "%s: result %u element %zu: %g, expected %g\n", what, j, i, got[j].data[i], want[j].data[i]);
        bad++;
      }
    free(want[j].data);
    free(got[j].data);
  }
  if (bad) fprintf(stderr, "%s", text);
  return bad;
}

/* Shardings of one rank-2 value over mesh x=2, y=4 */
static const char *const k_dim_specs[] = {"{}", "{\"x\"}", "{\"y\"}", "{\"x\", \"y\"}", "{\"y\", \"x\"}"};

static void spec2(char *buf, size_t cap, int a, int b) {
  /* an axis may not appear on both dims */
  snprintf(buf, cap, "#sdy.sharding<@mesh, [%s, %s]>", k_dim_specs[a], k_dim_specs[b]);
}

static bool spec_ok(int a, int b) {
  int ua = a == 0 ? 0 : a == 1 ? 1 : a == 2 ? 2 : 3, ub = b == 0 ? 0 : b == 1 ? 1 : b == 2 ? 2 : 3;
  return (ua & ub) == 0;
}

/* The sweep's bodies over %a: tensor<8x16xf32>, %b: tensor<16x8xf32> -> tensor<8x8xf32>. */
static const char *const k_bodies[] = {
    /* matmul, bias by iota, relu */
    "    %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<8x16xf32>, tensor<16x8xf32>) -> tensor<8x8xf32>\n"
    "    %1 = stablehlo.iota dim = 1 : tensor<8x8xf32>\n"
    "    %2 = stablehlo.add %0, %1 : tensor<8x8xf32>\n"
    "    %z = stablehlo.constant dense<0.0> : tensor<8x8xf32>\n"
    "    %r = stablehlo.maximum %2, %z : tensor<8x8xf32>\n",
    /* transpose, elementwise, reduce over a dim, broadcast back */
    "    %t = stablehlo.transpose %b, dims = [1, 0] : (tensor<16x8xf32>) -> tensor<8x16xf32>\n"
    "    %m = stablehlo.multiply %a, %t : tensor<8x16xf32>\n"
    "    %c = stablehlo.constant dense<0.0> : tensor<f32>\n"
    "    %s = stablehlo.reduce(%m init: %c) applies stablehlo.add across dimensions = [1] : (tensor<8x16xf32>, tensor<f32>) -> tensor<8xf32>\n"
    "    %i = stablehlo.iota dim = 0 : tensor<8x8xf32>\n"
    "    %bs = stablehlo.broadcast_in_dim %s, dims = [0] : (tensor<8xf32>) -> tensor<8x8xf32>\n"
    "    %r = stablehlo.subtract %bs, %i : tensor<8x8xf32>\n",
    /* reshape splitting and merging, max-reduce, slice, concatenate */
    "    %p = stablehlo.reshape %a : (tensor<8x16xf32>) -> tensor<8x2x8xf32>\n"
    "    %c = stablehlo.constant dense<0xFF800000> : tensor<f32>\n"
    "    %mx = stablehlo.reduce(%p init: %c) applies stablehlo.maximum across dimensions = [1] : (tensor<8x2x8xf32>, tensor<f32>) -> tensor<8x8xf32>\n"
    "    %q = stablehlo.slice %b [0:8, 0:4] : (tensor<16x8xf32>) -> tensor<8x4xf32>\n"
    "    %q2 = stablehlo.slice %b [8:16, 4:8] : (tensor<16x8xf32>) -> tensor<8x4xf32>\n"
    "    %cc = stablehlo.concatenate %q, %q2, dim = 1 : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x8xf32>\n"
    "    %r = stablehlo.add %mx, %cc : tensor<8x8xf32>\n",
    /* a cumulative sum (reduce_window: no rule, the fallback) and a sort-free select */
    "    %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<8x16xf32>, tensor<16x8xf32>) -> tensor<8x8xf32>\n"
    "    %c = stablehlo.constant dense<0.0> : tensor<f32>\n"
    "    %w = \"stablehlo.reduce_window\"(%0, %c) <{window_dimensions = array<i64: 8, 1>, padding = dense<[[7, 0], [0, 0]]> : tensor<2x2xi64>}> ({\n"
    "    ^bb0(%x: tensor<f32>, %y: tensor<f32>):\n"
    "      %s = stablehlo.add %x, %y : tensor<f32>\n"
    "      stablehlo.return %s : tensor<f32>\n"
    "    }) : (tensor<8x8xf32>, tensor<f32>) -> tensor<8x8xf32>\n"
    "    %zz = stablehlo.constant dense<0.0> : tensor<8x8xf32>\n"
    "    %g = stablehlo.compare GT, %w, %zz : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xi1>\n"
    "    %r = stablehlo.select %g, %w, %0 : tensor<8x8xi1>, tensor<8x8xf32>\n",
    /* dynamic_slice (rows whole), dynamic_update_slice (rows whole), optimization_barrier */
    "    %i = stablehlo.constant dense<3> : tensor<i32>\n"
    "    %z0 = stablehlo.constant dense<0> : tensor<i32>\n"
    "    %ds = \"stablehlo.dynamic_slice\"(%a, %z0, %i) {slice_sizes = array<i64: 8, 8>} : (tensor<8x16xf32>, tensor<i32>, tensor<i32>) -> tensor<8x8xf32>\n"
    "    %bt = stablehlo.transpose %b, dims = [1, 0] : (tensor<16x8xf32>) -> tensor<8x16xf32>\n"
    "    %u = stablehlo.slice %bt [0:8, 0:4] : (tensor<8x16xf32>) -> tensor<8x4xf32>\n"
    "    %d = \"stablehlo.dynamic_update_slice\"(%ds, %u, %z0, %i) : (tensor<8x8xf32>, tensor<8x4xf32>, tensor<i32>, tensor<i32>) -> tensor<8x8xf32>\n"
    "    %o:2 = \"stablehlo.optimization_barrier\"(%d, %ds) : (tensor<8x8xf32>, tensor<8x8xf32>) -> (tensor<8x8xf32>, tensor<8x8xf32>)\n"
    "    %r = stablehlo.add %o#0, %o#1 : tensor<8x8xf32>\n",
    /* a while loop carrying a counter and a matrix: transposes, reductions and resharding in
     * its body, every iteration */
    "    %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<8x16xf32>, tensor<16x8xf32>) -> tensor<8x8xf32>\n"
    "    %c0 = stablehlo.constant dense<0> : tensor<i32>\n"
    "    %w:2 = \"stablehlo.while\"(%c0, %0) ({\n"
    "    ^bb0(%ci: tensor<i32>, %ch: tensor<8x8xf32>):\n"
    "      %n = stablehlo.constant dense<3> : tensor<i32>\n"
    "      %lt = stablehlo.compare LT, %ci, %n : (tensor<i32>, tensor<i32>) -> tensor<i1>\n"
    "      stablehlo.return %lt : tensor<i1>\n"
    "    }, {\n"
    "    ^bb0(%bi: tensor<i32>, %bh: tensor<8x8xf32>):\n"
    "      %one = stablehlo.constant dense<1> : tensor<i32>\n"
    "      %i2 = stablehlo.add %bi, %one : tensor<i32>\n"
    "      %t = stablehlo.transpose %bh, dims = [1, 0] : (tensor<8x8xf32>) -> tensor<8x8xf32>\n"
    "      %h2 = stablehlo.add %bh, %t : tensor<8x8xf32>\n"
    "      %zf = stablehlo.constant dense<0.0> : tensor<f32>\n"
    "      %s = stablehlo.reduce(%h2 init: %zf) applies stablehlo.add across dimensions = [1] : (tensor<8x8xf32>, tensor<f32>) -> tensor<8xf32>\n"
    "      %bs = stablehlo.broadcast_in_dim %s, dims = [0] : (tensor<8xf32>) -> tensor<8x8xf32>\n"
    "      %h3 = stablehlo.subtract %h2, %bs : tensor<8x8xf32>\n"
    "      stablehlo.return %i2, %h3 : tensor<i32>, tensor<8x8xf32>\n"
    "    }) : (tensor<i32>, tensor<8x8xf32>) -> (tensor<i32>, tensor<8x8xf32>)\n"
    "    %r = stablehlo.multiply %w#1, %0 : tensor<8x8xf32>\n",
    /* an if whose branches use values from above and reshard them */
    "    %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<8x16xf32>, tensor<16x8xf32>) -> tensor<8x8xf32>\n"
    "    %zf = stablehlo.constant dense<0.0> : tensor<f32>\n"
    "    %s = stablehlo.reduce(%0 init: %zf) applies stablehlo.add across dimensions = [0, 1] : (tensor<8x8xf32>, tensor<f32>) -> tensor<f32>\n"
    "    %p = stablehlo.compare GT, %s, %zf : (tensor<f32>, tensor<f32>) -> tensor<i1>\n"
    "    %c = \"stablehlo.if\"(%p) ({\n"
    "      %t = stablehlo.transpose %0, dims = [1, 0] : (tensor<8x8xf32>) -> tensor<8x8xf32>\n"
    "      \"stablehlo.return\"(%t) : (tensor<8x8xf32>) -> ()\n"
    "    }, {\n"
    "      %ng = stablehlo.negate %0 : tensor<8x8xf32>\n"
    "      \"stablehlo.return\"(%ng) : (tensor<8x8xf32>) -> ()\n"
    "    }) : (tensor<i1>) -> tensor<8x8xf32>\n"
    "    %r = stablehlo.add %c, %0 : tensor<8x8xf32>\n",
};

static void test_sweep(void **state) {
  (void)state;
  static const int64_t da[2] = {8, 16}, db[2] = {16, 8};
  garr in[2];
  fill(&in[0], LOOM_DTYPE_F32, 2, da, 1);
  fill(&in[1], LOOM_DTYPE_F32, 2, db, 2);
  char sa[128], sb[128], sr[128], text[8192];
  size_t runs = 0, bad = 0;
  for (size_t body = 0; body < sizeof k_bodies / sizeof *k_bodies; body++)
    for (int a0 = 0; a0 < 5; a0++)
      for (int a1 = 0; a1 < 5; a1++) {
      for (int bb = 0; bb < 25; bb++) {
        /* every a and b sharding; a result sharding that varies with them (all would be x 11) */
        int b0 = bb / 5, b1 = bb % 5, r0 = (a1 + b0 + 2) % 5, r1 = (a0 + 3 * b1) % 5;
        if (!spec_ok(a0, a1) || !spec_ok(b0, b1)) continue;
        if (!spec_ok(r0, r1)) r1 = 0;
        spec2(sa, sizeof sa, a0, a1);
        spec2(sb, sizeof sb, b0, b1);
        spec2(sr, sizeof sr, r0, r1);
        snprintf(text, sizeof text,
                 "module @sweep attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} {\n"
                 "  sdy.mesh @mesh = <[\"x\"=2, \"y\"=4]>\n"
                 "  func.func public @main(%%a: tensor<8x16xf32> {sdy.sharding = %s}, %%b: tensor<16x8xf32> "
                 "{sdy.sharding = %s}) -> (tensor<8x8xf32> {sdy.sharding = %s}) {\n%s"
                 "    return %%r : tensor<8x8xf32>\n  }\n}\n",
                 sa, sb, sr, k_bodies[body]);
        char what[64];
        snprintf(what, sizeof what, "body %zu a(%d,%d) b(%d,%d) r(%d,%d)", body, a0, a1, b0, b1, r0, r1);
        bad += compare(text, in, 2, 1, what) != 0;
        runs++;
      }
      }
  free(in[0].data);
  free(in[1].data);
  fprintf(stderr, "sweep: %zu partitioned runs, %zu differ from the unpartitioned run\n", runs, bad);
  assert_true(runs >= 840);
  assert_int_equal(bad, 0);
}

static const char *k_megatron =
    "module @m attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} {\n"
    "  sdy.mesh @mesh = <[\"d\"=8]>\n"
    "  func.func public @main(%x: tensor<4x8xf32>, %w1: tensor<8x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, "
    "{\"d\"}]>}, %w2: tensor<16x8xf32>) -> (tensor<4x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>}) {\n"
    "    %h = stablehlo.dot_general %x, %w1, contracting_dims = [1] x [0] : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>\n"
    "    %r = call @relu(%h) : (tensor<4x16xf32>) -> tensor<4x16xf32>\n"
    "    %y = stablehlo.dot_general %r, %w2, contracting_dims = [1] x [0] : (tensor<4x16xf32>, tensor<16x8xf32>) -> tensor<4x8xf32>\n"
    "    return %y : tensor<4x8xf32>\n"
    "  }\n"
    "  func.func private @relu(%a: tensor<4x16xf32>) -> tensor<4x16xf32> {\n"
    "    %z = stablehlo.constant dense<0.0> : tensor<4x16xf32>\n"
    "    %m = stablehlo.maximum %a, %z : tensor<4x16xf32>\n"
    "    return %m : tensor<4x16xf32>\n"
    "  }\n"
    "}\n";

/* One annotation (w1 split by columns) is enough: propagation splits w2 by rows and the hidden
 * activations by columns, so the only collective is the all_reduce of the second matmul. */
static void test_propagation_and_explain(void **state) {
  (void)state;
  lm_err err;
  lm_module *m = parse(k_megatron, &err);
  assert_non_null(m);
  lm_spmd_info *info;
  assert_int_equal(lm_spmd_analyze(m, &info, &err), 0);
  char *text = NULL, *ex = NULL;
  assert_int_equal(lm_partition(m, info, &text, &ex, &err), 0);
  assert_int_equal(info->inputs[0].local.dims[1], 8);   /* x replicated */
  assert_int_equal(info->inputs[2].local.dims[0], 2);   /* w2 split by rows: chosen by propagation */
  assert_int_equal(info->outputs[0].local.dims[0], 4);
  if (!strstr(ex, "total: 1 collectives") || !strstr(ex, "all_reduce partial results over {\"d\"}") ||
      strstr(ex, "all_gather") || strstr(ex, "fallback:"))
    fail_msg("explain:\n%s", ex);
  assert_non_null(strstr(text, "\"stablehlo.all_reduce\""));
  free(text);
  free(ex);
  lm_spmd_info_free(info);
  lm_module_free(m);
  garr in[3];
  fill(&in[0], LOOM_DTYPE_F32, 2, (int64_t[]){4, 8}, 3);
  fill(&in[1], LOOM_DTYPE_F32, 2, (int64_t[]){8, 16}, 4);
  fill(&in[2], LOOM_DTYPE_F32, 2, (int64_t[]){16, 8}, 5);
  assert_int_equal(compare(k_megatron, in, 3, 1, "megatron"), 0);
  for (int i = 0; i < 3; i++) free(in[i].data);
}

static void expect_error(const char *text, int code, const char *needle) {
  lm_err err;
  lm_module *m = parse(text, &err);
  if (!m) fail_msg("parse: %s", err.msg);
  lm_spmd_info *info = NULL;
  int rc = lm_spmd_analyze(m, &info, &err);
  if (rc != code || !strstr(err.msg, needle)) fail_msg("expected %d with '%s', got %d: %s", code, needle, rc, rc ? err.msg : "");
  assert_null(info);
  lm_module_free(m);
}

static void test_errors_and_uneven(void **state) {
  (void)state;
  /* GSPMD strings are not read */
  expect_error("module attributes {mhlo.num_partitions = 8 : i32} {\n"
               "  func.func @main(%a: tensor<8xf32> {mhlo.sharding = \"{devices=[8]<=[8]}\"}) -> tensor<8xf32> {\n"
               "    return %a : tensor<8xf32>\n  }\n}\n",
               LOOM_UNSUPPORTED, "GSPMD sharding");
  /* sub-axes */
  expect_error("module attributes {mhlo.num_partitions = 8 : i32} {\n"
               "  sdy.mesh @mesh = <[\"x\"=8]>\n"
               "  func.func @main(%a: tensor<8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{\"x\":(1)2}]>}) -> tensor<8xf32> {\n"
               "    return %a : tensor<8xf32>\n  }\n}\n",
               LOOM_UNSUPPORTED, "sub-axis");
  /* an axis the mesh lacks */
  expect_error("module attributes {mhlo.num_partitions = 8 : i32} {\n"
               "  sdy.mesh @mesh = <[\"x\"=8]>\n"
               "  func.func @main(%a: tensor<8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{\"q\"}]>}) -> tensor<8xf32> {\n"
               "    return %a : tensor<8xf32>\n  }\n}\n",
               LOOM_VERIFY, "not in the mesh");
  /* a mesh of another size */
  expect_error("module attributes {mhlo.num_partitions = 8 : i32} {\n"
               "  sdy.mesh @mesh = <[\"x\"=4]>\n"
               "  func.func @main(%a: tensor<8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{\"x\"}]>}) -> tensor<8xf32> {\n"
               "    return %a : tensor<8xf32>\n  }\n}\n",
               LOOM_VERIFY, "mhlo.num_partitions is 8");
  /* uneven: 10 rows do not split 8 ways: replicated instead, said so, and still right */
  const char *uneven =
      "module attributes {mhlo.num_partitions = 8 : i32} {\n"
      "  sdy.mesh @mesh = <[\"x\"=8]>\n"
      "  func.func @main(%a: tensor<10x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{\"x\"}, {}]>}) -> tensor<10x4xf32> {\n"
      "    %0 = stablehlo.multiply %a, %a : tensor<10x4xf32>\n"
      "    return %0 : tensor<10x4xf32>\n  }\n}\n";
  lm_err err;
  lm_module *m = parse(uneven, &err);
  lm_spmd_info *info;
  assert_int_equal(lm_spmd_analyze(m, &info, &err), 0);
  char *ex = NULL;
  assert_int_equal(lm_partition(m, info, NULL, &ex, &err), 0);
  assert_non_null(strstr(ex, "does not split into 8 equal shards"));
  assert_int_equal(info->inputs[0].local.dims[0], 10);
  free(ex);
  lm_spmd_info_free(info);
  lm_module_free(m);
  garr in[1];
  fill(&in[0], LOOM_DTYPE_F32, 2, (int64_t[]){10, 4}, 9);
  assert_int_equal(compare(uneven, in, 1, 1, "uneven"), 0);
  free(in[0].data);
}

/* Uneven splits inside a program (a constraint splits 10 rows or 6 columns over 4 or 8
 * devices): shards of ceil(n / k), the last ones padded. The padding is made non-zero (+7) before
 * reductions, contractions, slices, concatenations, reshapes, reverses and a while loop meet it,
 * so a missing mask or a padded element that leaks shows as a wrong number. Every combination
 * of the constraint and the argument's (even) sharding, bit for bit against the unpartitioned run;
 * among them 6 columns in blocks of 3 split into 8 shards of 1 (a collective_permute). */
static const char *const k_uneven_specs[] = {
    "[{\"y\"}, {}]", "[{\"x\", \"y\"}, {}]", "[{\"y\"}, {\"x\"}]", "[{}, {\"y\"}]", "[{\"x\"}, {\"y\"}]", "[{\"y\", \"x\"}, {}]",
    "[{\"x\"}, {}]", "[{}, {\"x\", \"y\"}]",
};
static const char *const k_uneven_args[] = {"[{}, {}]", "[{}, {\"x\"}]", "[{\"x\"}, {}]"};

/* bodies over %e = constraint(%a) + 7 (tensor<10x6xf32>) and %w: tensor<6x5xf32>; nout results */
static const struct {
  int nout;
  const char *res, *body;
} k_uneven_bodies[] = {
    /* sums and a max over each dim (the reduced dims' padding masked with the init value) */
    {2, "tensor<6xf32>, tensor<10xf32>",
     "    %z = stablehlo.constant dense<0.0> : tensor<f32>\n"
     "    %ni = stablehlo.constant dense<0xFF800000> : tensor<f32>\n"
     "    %s0 = stablehlo.reduce(%e init: %z) applies stablehlo.add across dimensions = [0] : (tensor<10x6xf32>, tensor<f32>) -> tensor<6xf32>\n"
     "    %m0 = stablehlo.reduce(%e init: %ni) applies stablehlo.maximum across dimensions = [0] : (tensor<10x6xf32>, tensor<f32>) -> tensor<6xf32>\n"
     "    %s1 = stablehlo.reduce(%e init: %z) applies stablehlo.add across dimensions = [1] : (tensor<10x6xf32>, tensor<f32>) -> tensor<10xf32>\n"
     "    %r0 = stablehlo.add %s0, %m0 : tensor<6xf32>\n"
     "    return %r0, %s1 : tensor<6xf32>, tensor<10xf32>\n"},
    /* contractions over the uneven dim (masked with zeros) and along it */
    {2, "tensor<6x6xf32>, tensor<10x5xf32>",
     "    %d = stablehlo.dot_general %e, %e, contracting_dims = [0] x [0] : (tensor<10x6xf32>, tensor<10x6xf32>) -> tensor<6x6xf32>\n"
     "    %f = stablehlo.dot_general %e, %w, contracting_dims = [1] x [0] : (tensor<10x6xf32>, tensor<6x5xf32>) -> tensor<10x5xf32>\n"
     "    return %d, %f : tensor<6x6xf32>, tensor<10x5xf32>\n"},
    /* argmax along dim 0 with the max (a variadic reduce: both inputs masked with their init) */
    {2, "tensor<6xf32>, tensor<6xi32>",
     "    %i = stablehlo.iota dim = 0 : tensor<10x6xi32>\n"
     "    %c0 = stablehlo.constant dense<0xFF800000> : tensor<f32>\n"
     "    %c1 = stablehlo.constant dense<0> : tensor<i32>\n"
     "    %m:2 = stablehlo.reduce(%e init: %c0), (%i init: %c1) across dimensions = [0] : (tensor<10x6xf32>, "
     "tensor<10x6xi32>, tensor<f32>, tensor<i32>) -> (tensor<6xf32>, tensor<6xi32>)\n"
     "     reducer(%p1: tensor<f32>, %p3: tensor<f32>) (%p2: tensor<i32>, %p4: tensor<i32>)  {\n"
     "      %2 = stablehlo.compare GT, %p1, %p3, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>\n"
     "      %5 = stablehlo.compare EQ, %p1, %p3, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>\n"
     "      %6 = stablehlo.compare LT, %p2, %p4, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>\n"
     "      %7 = stablehlo.and %5, %6 : tensor<i1>\n"
     "      %8 = stablehlo.or %2, %7 : tensor<i1>\n"
     "      %9 = stablehlo.select %8, %p1, %p3 : tensor<i1>, tensor<f32>\n"
     "      %10 = stablehlo.select %8, %p2, %p4 : tensor<i1>, tensor<i32>\n"
     "      stablehlo.return %9, %10 : tensor<f32>, tensor<i32>\n"
     "    }\n"
     "    return %m#0, %m#1 : tensor<6xf32>, tensor<6xi32>\n"},
    /* a slice and a concatenation along the uneven dim, a reverse, a reshape, a transpose */
    {4, "tensor<17x6xf32>, tensor<10x6xf32>, tensor<60xf32>, tensor<6x10xf32>",
     "    %s = stablehlo.slice %e [2:9, 0:6] : (tensor<10x6xf32>) -> tensor<7x6xf32>\n"
     "    %cc = stablehlo.concatenate %e, %s, dim = 0 : (tensor<10x6xf32>, tensor<7x6xf32>) -> tensor<17x6xf32>\n"
     "    %rv = stablehlo.reverse %e, dims = [0] : tensor<10x6xf32>\n"
     "    %rs = stablehlo.reshape %e : (tensor<10x6xf32>) -> tensor<60xf32>\n"
     "    %t = stablehlo.transpose %e, dims = [1, 0] : (tensor<10x6xf32>) -> tensor<6x10xf32>\n"
     "    return %cc, %rv, %rs, %t : tensor<17x6xf32>, tensor<10x6xf32>, tensor<60xf32>, tensor<6x10xf32>\n"},
    /* a contraction's partial results scattered into an uneven split (padded first), squared and
     * summed over that dim */
    {2, "tensor<10x5xf32>, tensor<5xf32>",
     "    %g = stablehlo.dot_general %e, %w, contracting_dims = [1] x [0] : (tensor<10x6xf32>, tensor<6x5xf32>) -> tensor<10x5xf32>\n"
     "    %gc = sdy.sharding_constraint %g <@mesh, [{\"y\"}, {}]> : tensor<10x5xf32>\n"
     "    %h = stablehlo.multiply %gc, %gc : tensor<10x5xf32>\n"
     "    %z = stablehlo.constant dense<0.0> : tensor<f32>\n"
     "    %s = stablehlo.reduce(%h init: %z) applies stablehlo.add across dimensions = [0] : (tensor<10x5xf32>, tensor<f32>) -> tensor<5xf32>\n"
     "    return %h, %s : tensor<10x5xf32>, tensor<5xf32>\n"},
    /* a while loop carrying the uneven value, reducing over it every iteration */
    {1, "tensor<10x6xf32>",
     "    %c0 = stablehlo.constant dense<0> : tensor<i32>\n"
     "    %w2:2 = \"stablehlo.while\"(%c0, %e) ({\n"
     "    ^bb0(%ci: tensor<i32>, %ch: tensor<10x6xf32>):\n"
     "      %n = stablehlo.constant dense<3> : tensor<i32>\n"
     "      %lt = stablehlo.compare LT, %ci, %n : (tensor<i32>, tensor<i32>) -> tensor<i1>\n"
     "      stablehlo.return %lt : tensor<i1>\n"
     "    }, {\n"
     "    ^bb0(%bi: tensor<i32>, %bh: tensor<10x6xf32>):\n"
     "      %one = stablehlo.constant dense<1> : tensor<i32>\n"
     "      %i2 = stablehlo.add %bi, %one : tensor<i32>\n"
     "      %h2 = stablehlo.add %bh, %bh : tensor<10x6xf32>\n"
     "      %zf = stablehlo.constant dense<0.0> : tensor<f32>\n"
     "      %s = stablehlo.reduce(%h2 init: %zf) applies stablehlo.add across dimensions = [0] : (tensor<10x6xf32>, tensor<f32>) -> tensor<6xf32>\n"
     "      %bs = stablehlo.broadcast_in_dim %s, dims = [1] : (tensor<6xf32>) -> tensor<10x6xf32>\n"
     "      %h3 = stablehlo.subtract %h2, %bs : tensor<10x6xf32>\n"
     "      stablehlo.return %i2, %h3 : tensor<i32>, tensor<10x6xf32>\n"
     "    }) : (tensor<i32>, tensor<10x6xf32>) -> (tensor<i32>, tensor<10x6xf32>)\n"
     "    return %w2#1 : tensor<10x6xf32>\n"},
    /* an iota with its shard offsets, a sort and a cumulative sum along the other dim, a
     * dynamic_slice, a sum from a non-identity init (its dim gathered first, padding cut off),
     * a gather of rows, a contraction over the padded dim and an op without a rule after it
     * (cholesky, replicated) */
    {4, "tensor<6xf32>, tensor<10x3xf32>, tensor<4x6xf32>, tensor<6x6xf32>",
     "    %io = stablehlo.iota dim = 0 : tensor<10x6xf32>\n"
     "    %a1 = stablehlo.add %e, %io : tensor<10x6xf32>\n"
     "    %st = \"stablehlo.sort\"(%a1) <{dimension = 1 : i64, is_stable = true}> ({\n"
     "    ^bb0(%p1: tensor<f32>, %p2: tensor<f32>):\n"
     "      %2 = stablehlo.compare LT, %p1, %p2, TOTALORDER : (tensor<f32>, tensor<f32>) -> tensor<i1>\n"
     "      stablehlo.return %2 : tensor<i1>\n"
     "    }) : (tensor<10x6xf32>) -> tensor<10x6xf32>\n"
     "    %one = stablehlo.constant dense<1.0> : tensor<f32>\n"
     "    %s = stablehlo.reduce(%st init: %one) applies stablehlo.add across dimensions = [0] : (tensor<10x6xf32>, tensor<f32>) -> tensor<6xf32>\n"
     "    %zc = stablehlo.constant dense<0.0> : tensor<f32>\n"
     "    %cw = \"stablehlo.reduce_window\"(%st, %zc) <{window_dimensions = array<i64: 1, 6>, padding = dense<[[0, 0], [5, 0]]> : tensor<2x2xi64>}> ({\n"
     "    ^bb0(%x: tensor<f32>, %y: tensor<f32>):\n"
     "      %ss = stablehlo.add %x, %y : tensor<f32>\n"
     "      stablehlo.return %ss : tensor<f32>\n"
     "    }) : (tensor<10x6xf32>, tensor<f32>) -> tensor<10x6xf32>\n"
     "    %z0 = stablehlo.constant dense<0> : tensor<i32>\n"
     "    %i2 = stablehlo.constant dense<2> : tensor<i32>\n"
     "    %ds = \"stablehlo.dynamic_slice\"(%cw, %z0, %i2) {slice_sizes = array<i64: 10, 3>} : (tensor<10x6xf32>, tensor<i32>, tensor<i32>) -> tensor<10x3xf32>\n"
     "    %ix = stablehlo.constant dense<[[9], [0], [4], [7]]> : tensor<4x1xi32>\n"
     "    %g = \"stablehlo.gather\"(%cw, %ix) {dimension_numbers = #stablehlo.gather<offset_dims = [1], collapsed_slice_dims = [0], "
     "start_index_map = [0], index_vector_dim = 1>, slice_sizes = array<i64: 1, 6>} : (tensor<10x6xf32>, tensor<4x1xi32>) -> tensor<4x6xf32>\n"
     "    %sq = stablehlo.dot_general %cw, %cw, contracting_dims = [0] x [0] : (tensor<10x6xf32>, tensor<10x6xf32>) -> tensor<6x6xf32>\n"
     "    %fb = stablehlo.cholesky %sq, lower = true : tensor<6x6xf32>\n"
     "    return %s, %ds, %g, %fb : tensor<6xf32>, tensor<10x3xf32>, tensor<4x6xf32>, tensor<6x6xf32>\n"},
};

static void uneven_text(char *text, size_t cap, const char *arg, const char *spec, int body) {
  snprintf(text, cap,
           "module @uneven attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} {\n"
           "  sdy.mesh @mesh = <[\"x\"=2, \"y\"=4]>\n"
           "  func.func public @main(%%a: tensor<10x6xf32> {sdy.sharding = #sdy.sharding<@mesh, %s>}, %%w: tensor<6x5xf32>) "
           "-> (%s) {\n"
           "    %%c = sdy.sharding_constraint %%a <@mesh, %s> : tensor<10x6xf32>\n"
           "    %%k0 = stablehlo.constant dense<7.0> : tensor<f32>\n"
           "    %%k = stablehlo.broadcast_in_dim %%k0, dims = [] : (tensor<f32>) -> tensor<10x6xf32>\n"
           "    %%e = stablehlo.add %%c, %%k : tensor<10x6xf32>\n%s"
           "  }\n}\n",
           arg, k_uneven_bodies[body].res, spec, k_uneven_bodies[body].body);
}

static void test_uneven_sweep(void **state) {
  (void)state;
  garr in[2];
  fill(&in[0], LOOM_DTYPE_F32, 2, (int64_t[]){10, 6}, 11);
  fill(&in[1], LOOM_DTYPE_F32, 2, (int64_t[]){6, 5}, 12);
  char text[8192];
  size_t runs = 0, bad = 0;
  for (size_t b = 0; b < sizeof k_uneven_bodies / sizeof *k_uneven_bodies; b++)
    for (size_t s = 0; s < sizeof k_uneven_specs / sizeof *k_uneven_specs; s++)
      for (size_t a = 0; a < sizeof k_uneven_args / sizeof *k_uneven_args; a++) {
        uneven_text(text, sizeof text, k_uneven_args[a], k_uneven_specs[s], (int)b);
        char what[96];
        snprintf(what, sizeof what, "uneven body %zu constraint %zu argument %zu", b, s, a);
        bad += compare(text, in, 2, (uint32_t)k_uneven_bodies[b].nout, what) != 0;
        runs++;
      }
  fprintf(stderr, "uneven sweep: %zu partitioned runs, %zu differ from the unpartitioned run\n", runs, bad);
  free(in[0].data);
  free(in[1].data);
  assert_int_equal(bad, 0);
}

/* The plan for a sum over 10 rows split 4 ways: local blocks of 3 rows (the last holds 1 row
 * and 2 of padding), the padding masked with the init value, one all_reduce of the partial
 * sums; nothing gathered, nothing replicated. */
static void test_uneven_plan(void **state) {
  (void)state;
  char text[8192];
  uneven_text(text, sizeof text, k_uneven_args[0], k_uneven_specs[0], 0);
  lm_err err;
  lm_module *m = parse(text, &err);
  assert_non_null(m);
  lm_spmd_info *info;
  assert_int_equal(lm_spmd_analyze(m, &info, &err), 0);
  char *out = NULL, *ex = NULL;
  assert_int_equal(lm_partition(m, info, &out, &ex, &err), 0);
  if (!strstr(ex, "local tensor<3x6xf32>") || !strstr(ex, "padding of its uneven reduced dims masked with the init value") ||
      !strstr(ex, "all_reduce partial results over {\"y\"}") || !strstr(ex, "0 fallbacks") || strstr(ex, "uneven:"))
    fail_msg("explain:\n%s", ex);
  assert_non_null(strstr(out, "\"stablehlo.select\""));
  free(out);
  free(ex);
  lm_spmd_info_free(info);
  lm_module_free(m);
  /* the dot contracting over the uneven rows: masked with zeros, partial results all_reduced */
  uneven_text(text, sizeof text, k_uneven_args[0], k_uneven_specs[0], 1);
  m = parse(text, &err);
  assert_non_null(m);
  assert_int_equal(lm_spmd_analyze(m, &info, &err), 0);
  assert_int_equal(lm_partition(m, info, NULL, &ex, &err), 0);
  if (!strstr(ex, "padding of its uneven contracting dims masked with zeros") || !strstr(ex, "0 fallbacks"))
    fail_msg("explain:\n%s", ex);
  free(ex);
  lm_spmd_info_free(info);
  lm_module_free(m);
  /* 6 columns in 2 blocks of 3 (over "x") split into 8 shards of 1 (over "x", "y"): each shard
   * lies inside one block: a collective_permute moves the one shard (column 3) whose process
   * lacks its block; the others are local slices */
  uneven_text(text, sizeof text, k_uneven_args[1], "[{}, {\"x\", \"y\"}]", 0);
  m = parse(text, &err);
  assert_non_null(m);
  assert_int_equal(lm_spmd_analyze(m, &info, &err), 0);
  assert_int_equal(lm_partition(m, info, &out, &ex, &err), 0);
  if (!strstr(ex, "collective_permute operand dim 1 into uneven shards over {\"y\"}: 5 bytes received per device, 40 in all") ||
      strstr(ex, "all_gather operand"))
    fail_msg("explain:\n%s", ex);
  assert_non_null(strstr(out, "\"stablehlo.collective_permute\""));
  free(out);
  free(ex);
  lm_spmd_info_free(info);
  lm_module_free(m);
}

/* Variadic reduce (argmax / argmin as jnp lowers them: values and an iota of indices reduced
 * together by a comparator), variadic sort (argsort) and chlo.top_k, over a 2x4 mesh under every
 * sharding of the operand: bit for bit equal to the unpartitioned run (the small integers of
 * fill() tie often, so the smallest-index rule is exercised). */
static const char *const k_arg_bodies[] = {
    /* argmax along dim 1 and the max itself */
    "    %i = stablehlo.iota dim = 1 : tensor<8x16xi32>\n"
    "    %c0 = stablehlo.constant dense<0xFF800000> : tensor<f32>\n"
    "    %c1 = stablehlo.constant dense<0> : tensor<i32>\n"
    "    %r:2 = stablehlo.reduce(%a init: %c0), (%i init: %c1) across dimensions = [1] : (tensor<8x16xf32>, "
    "tensor<8x16xi32>, tensor<f32>, tensor<i32>) -> (tensor<8xf32>, tensor<8xi32>)\n"
    "     reducer(%p1: tensor<f32>, %p3: tensor<f32>) (%p2: tensor<i32>, %p4: tensor<i32>)  {\n"
    "      %2 = stablehlo.compare GT, %p1, %p3, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>\n"
    "      %3 = stablehlo.compare NE, %p1, %p1, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>\n"
    "      %4 = stablehlo.or %2, %3 : tensor<i1>\n"
    "      %5 = stablehlo.compare EQ, %p1, %p3, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>\n"
    "      %6 = stablehlo.compare LT, %p2, %p4, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>\n"
    "      %7 = stablehlo.and %5, %6 : tensor<i1>\n"
    "      %8 = stablehlo.or %4, %7 : tensor<i1>\n"
    "      %9 = stablehlo.select %4, %p1, %p3 : tensor<i1>, tensor<f32>\n"
    "      %10 = stablehlo.select %8, %p2, %p4 : tensor<i1>, tensor<i32>\n"
    "      stablehlo.return %9, %10 : tensor<f32>, tensor<i32>\n"
    "    }\n"
    "    return %r#0, %r#1 : tensor<8xf32>, tensor<8xi32>\n",
    /* argmin along dim 0 (both dims reduced by the sweep's shardings at times) */
    "    %i = stablehlo.iota dim = 0 : tensor<8x16xi32>\n"
    "    %c0 = stablehlo.constant dense<0x7F800000> : tensor<f32>\n"
    "    %c1 = stablehlo.constant dense<0> : tensor<i32>\n"
    "    %r:2 = stablehlo.reduce(%a init: %c0), (%i init: %c1) across dimensions = [0] : (tensor<8x16xf32>, "
    "tensor<8x16xi32>, tensor<f32>, tensor<i32>) -> (tensor<16xf32>, tensor<16xi32>)\n"
    "     reducer(%p1: tensor<f32>, %p3: tensor<f32>) (%p2: tensor<i32>, %p4: tensor<i32>)  {\n"
    "      %2 = stablehlo.compare LT, %p1, %p3, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>\n"
    "      %3 = stablehlo.compare NE, %p1, %p1, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>\n"
    "      %4 = stablehlo.or %2, %3 : tensor<i1>\n"
    "      %5 = stablehlo.compare EQ, %p1, %p3, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>\n"
    "      %6 = stablehlo.compare LT, %p2, %p4, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>\n"
    "      %7 = stablehlo.and %5, %6 : tensor<i1>\n"
    "      %8 = stablehlo.or %4, %7 : tensor<i1>\n"
    "      %9 = stablehlo.select %4, %p1, %p3 : tensor<i1>, tensor<f32>\n"
    "      %10 = stablehlo.select %8, %p2, %p4 : tensor<i1>, tensor<i32>\n"
    "      stablehlo.return %9, %10 : tensor<f32>, tensor<i32>\n"
    "    }\n"
    "    return %r#0, %r#1 : tensor<16xf32>, tensor<16xi32>\n",
    /* argsort along dim 0: a stable variadic sort of the values and an iota */
    "    %i = stablehlo.iota dim = 0 : tensor<8x16xi32>\n"
    "    %r:2 = \"stablehlo.sort\"(%a, %i) <{dimension = 0 : i64, is_stable = true}> ({\n"
    "    ^bb0(%p1: tensor<f32>, %p2: tensor<f32>, %p3: tensor<i32>, %p4: tensor<i32>):\n"
    "      %2 = stablehlo.compare LT, %p1, %p2, TOTALORDER : (tensor<f32>, tensor<f32>) -> tensor<i1>\n"
    "      stablehlo.return %2 : tensor<i1>\n"
    "    }) : (tensor<8x16xf32>, tensor<8x16xi32>) -> (tensor<8x16xf32>, tensor<8x16xi32>)\n"
    "    return %r#0, %r#1 : tensor<8x16xf32>, tensor<8x16xi32>\n",
    /* top_k along the last dim */
    "    %v, %x = chlo.top_k(%a, k = 3) : tensor<8x16xf32> -> (tensor<8x3xf32>, tensor<8x3xi32>)\n"
    "    return %v, %x : tensor<8x3xf32>, tensor<8x3xi32>\n",
    /* a variadic scatter into rows (a sum of values and a max of integers, row 5 twice): the
     * columns keep their split in both inputs, both updates and both results */
    "    %ii = stablehlo.iota dim = 0 : tensor<8x16xi32>\n"
    "    %u = stablehlo.slice %a [2:6, 0:16] : (tensor<8x16xf32>) -> tensor<4x16xf32>\n"
    "    %iu = stablehlo.iota dim = 1 : tensor<4x16xi32>\n"
    "    %ix = stablehlo.constant dense<[[5], [1], [5], [7]]> : tensor<4x1xi32>\n"
    "    %r:2 = \"stablehlo.scatter\"(%a, %ii, %ix, %u, %iu) <{scatter_dimension_numbers = #stablehlo.scatter<"
    "update_window_dims = [1], inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>}> ({\n"
    "    ^bb0(%x0: tensor<f32>, %x1: tensor<i32>, %y0: tensor<f32>, %y1: tensor<i32>):\n"
    "      %s0 = stablehlo.add %x0, %y0 : tensor<f32>\n"
    "      %s1 = stablehlo.maximum %x1, %y1 : tensor<i32>\n"
    "      stablehlo.return %s0, %s1 : tensor<f32>, tensor<i32>\n"
    "    }) : (tensor<8x16xf32>, tensor<8x16xi32>, tensor<4x1xi32>, tensor<4x16xf32>, tensor<4x16xi32>) -> "
    "(tensor<8x16xf32>, tensor<8x16xi32>)\n"
    "    return %r#0, %r#1 : tensor<8x16xf32>, tensor<8x16xi32>\n",
};
static const char *const k_arg_results[] = {"tensor<8xf32>, tensor<8xi32>", "tensor<16xf32>, tensor<16xi32>",
                                            "tensor<8x16xf32>, tensor<8x16xi32>", "tensor<8x3xf32>, tensor<8x3xi32>",
                                            "tensor<8x16xf32>, tensor<8x16xi32>"};

static char *arg_program(size_t body, int a0, int a1, char *text, size_t cap) {
  char sa[128];
  spec2(sa, sizeof sa, a0, a1);
  snprintf(text, cap,
           "module @argsweep attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} {\n"
           "  sdy.mesh @mesh = <[\"x\"=2, \"y\"=4]>\n"
           "  func.func public @main(%%a: tensor<8x16xf32> {sdy.sharding = %s}) -> (%s) {\n%s  }\n}\n",
           sa, k_arg_results[body], k_arg_bodies[body]);
  return text;
}

static char *explain_of(const char *text, lm_spmd_info **infop) {
  lm_err err;
  lm_module *m = parse(text, &err);
  if (!m) fail_msg("parse: %s", err.msg);
  lm_spmd_info *info;
  assert_int_equal(lm_spmd_analyze(m, &info, &err), 0);
  char *ex = NULL;
  if (lm_partition(m, info, NULL, &ex, &err) < 0) fail_msg("partition: %s", err.msg);
  lm_module_free(m);
  *infop = info;
  return ex;
}

static void test_variadic_sweep(void **state) {
  (void)state;
  garr in[1];
  fill(&in[0], LOOM_DTYPE_F32, 2, (int64_t[]){8, 16}, 11);
  char text[8192];
  size_t runs = 0, bad = 0;
  for (size_t body = 0; body < sizeof k_arg_bodies / sizeof *k_arg_bodies; body++)
    for (int a0 = 0; a0 < 5; a0++)
      for (int a1 = 0; a1 < 5; a1++) {
        if (!spec_ok(a0, a1)) continue;
        arg_program(body, a0, a1, text, sizeof text);
        char what[64];
        snprintf(what, sizeof what, "variadic body %zu a(%d,%d)", body, a0, a1);
        bad += compare(text, in, 1, 2, what) != 0;
        runs++;
        /* no fallback to replication, and the operand is never gathered where the op can
         * work on its parts (every case but a split sorted dim, or scattered-into rows) */
        lm_spmd_info *info;
        char *ex = explain_of(text, &info);
        bool sorted_split = (body == 2 && a0) || (body == 3 && a1);
        bool rows_split = body == 4 && a0;
        if (strstr(ex, "fallback:") || (!sorted_split && !rows_split && strstr(ex, "all_gather operand")) ||
            (sorted_split && !strstr(ex, "sorted along split dim")))
          fail_msg("%s explain:\n%s", what, ex);
        free(ex);
        lm_spmd_info_free(info);
      }
  free(in[0].data);
  fprintf(stderr, "variadic sweep: %zu partitioned runs, %zu differ from the unpartitioned run\n", runs, bad);
  assert_true(runs >= 55);
  assert_int_equal(bad, 0);
}

/* argmax over a split dim: each device reduces its own block (the iota made with this shard's
 * offsets, not whole), then the partial (value, index) pairs are gathered and reduced again. */
static void test_argmax_plan(void **state) {
  (void)state;
  char text[8192];
  lm_spmd_info *info;
  char *ex = explain_of(arg_program(0, 1, 2, text, sizeof text), &info); /* [{"x"}, {"y"}] */
  assert_int_equal(info->inputs[0].local.dims[0], 4);
  assert_int_equal(info->inputs[0].local.dims[1], 4);
  if (!strstr(ex, "iota offset by this shard's position along dim 1") ||
      !strstr(ex, "partial results combined over {\"y\"}: gathered, then reduced again with the op's body") ||
      !strstr(ex, "all_gather partial result 0 over {\"y\"}: 48 bytes received per device") ||
      !strstr(ex, "all_gather partial result 1 over {\"y\"}") || !strstr(ex, "total: 2 collectives") ||
      strstr(ex, "fallback:") || strstr(ex, "all_gather operand"))
    fail_msg("explain:\n%s", ex);
  assert_int_equal(info->outputs[1].local.dims[0], 4); /* the rows' split is kept: [{"x"}] */
  free(ex);
  lm_spmd_info_free(info);
  /* along a dim the sharding leaves whole: no communication at all */
  ex = explain_of(arg_program(0, 3, 0, text, sizeof text), &info); /* [{"x", "y"}, {}] */
  if (!strstr(ex, "total: 0 collectives") || strstr(ex, "fallback:")) fail_msg("explain:\n%s", ex);
  assert_int_equal(info->outputs[0].local.dims[0], 1);
  free(ex);
  lm_spmd_info_free(info);
  /* top_k along a split last dim: the split moves to the rows by an all_to_all (no gather) */
  ex = explain_of(arg_program(3, 0, 3, text, sizeof text), &info);
  if (!strstr(ex, "sorted along split dim 1: its split moved to dim 0 by all_to_all") ||
      !strstr(ex, "all_to_all operand 0 dim 1 -> dim 0 over {\"x\", \"y\"}") || strstr(ex, "all_gather") ||
      strstr(ex, "fallback:"))
    fail_msg("explain:\n%s", ex);
  assert_int_equal(info->outputs[1].local.dims[0], 1);
  free(ex);
  lm_spmd_info_free(info);
  /* argsort along split rows with the results fixed to the operand's sharding: the values moved
   * by all_to_all there and both results back (the iota of indices made again in the moved
   * sharding, not moved) instead of a gather of the whole operand; bit for bit */
  static const char *fixed =
      "module @s attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} {\n"
      "  sdy.mesh @mesh = <[\"x\"=2, \"y\"=4]>\n"
      "  func.func public @main(%%a: tensor<8x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{\"y\"}, {}]>}) -> "
      "(tensor<8x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{\"y\"}, {}]>}, tensor<8x16xi32> {sdy.sharding = "
      "#sdy.sharding<@mesh, [{\"y\"}, {}]>}) {\n%s  }\n}\n";
  snprintf(text, sizeof text, fixed, k_arg_bodies[2]);
  ex = explain_of(text, &info);
  if (!strstr(ex, "sorted along split dim 0: its split moved to dim 1 by all_to_all") ||
      !strstr(ex, "all_to_all result 0 dim 1 -> dim 0 over {\"y\"}") ||
      !strstr(ex, "operand 1: iota made again in [{}, {\"y\"}] instead of moving it") || strstr(ex, "all_to_all operand 1") ||
      strstr(ex, "all_gather") || strstr(ex, "fallback:"))
    fail_msg("explain:\n%s", ex);
  free(ex);
  lm_spmd_info_free(info);
  garr in[1];
  fill(&in[0], LOOM_DTYPE_F32, 2, (int64_t[]){8, 16}, 12);
  assert_int_equal(compare(text, in, 1, 2, "argsort with fixed results"), 0);
  free(in[0].data);
}

/* top_k along a split dim no other dim can take the split of (a vector; 3 rows over 2, 4 or 8
 * processes): each shard's top k gathered and selected again, bit for bit equal to top_k over the
 * whole (ties between shards included: the values are small integers). */
static void test_top_k_candidates(void **state) {
  (void)state;
  static const char *const specs[] = {"{\"x\"}", "{\"y\"}", "{\"x\", \"y\"}", "{\"y\", \"x\"}"};
  static const char *const shapes[][3] = {{"64", "3", "[%s]"}, {"3x256", "3x5", "[{}, %s]"}};
  char text[4096], sh[128];
  size_t runs = 0;
  for (int sp = 0; sp < 2; sp++)
    for (int i = 0; i < 4; i++) {
      snprintf(sh, sizeof sh, shapes[sp][2], specs[i]);
      int k = sp ? 5 : 3;
      snprintf(text, sizeof text,
               "module @t attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} {\n"
               "  sdy.mesh @mesh = <[\"x\"=2, \"y\"=4]>\n"
               "  func.func public @main(%%a: tensor<%sxf32> {sdy.sharding = #sdy.sharding<@mesh, %s>}) -> "
               "(tensor<%sxf32>, tensor<%sxi32>) {\n"
               "    %%v, %%x = chlo.top_k(%%a, k = %d) : tensor<%sxf32> -> (tensor<%sxf32>, tensor<%sxi32>)\n"
               "    return %%v, %%x : tensor<%sxf32>, tensor<%sxi32>\n  }\n}\n",
               shapes[sp][0], sh, shapes[sp][1], shapes[sp][1], k, shapes[sp][0], shapes[sp][1], shapes[sp][1],
               shapes[sp][1], shapes[sp][1]);
      lm_spmd_info *info;
      char *ex = explain_of(text, &info);
      if (!strstr(ex, "indices made global) gathered over") || !strstr(ex, "all_gather top_k indices over") ||
          strstr(ex, "all_gather operand") || strstr(ex, "fallback:"))
        fail_msg("explain:\n%s\n%s", ex, text);
      free(ex);
      lm_spmd_info_free(info);
      garr in[1];
      fill(&in[0], LOOM_DTYPE_F32, sp + 1, sp ? (int64_t[]){3, 256} : (int64_t[]){64}, 13 + (unsigned)i);
      assert_int_equal(compare(text, in, 1, 2, "top_k candidates"), 0);
      free(in[0].data);
      runs++;
    }
  assert_int_equal(runs, 8);
}

int main(void) {
  lm_spmd_local_register();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_propagation_and_explain),
      cmocka_unit_test(test_errors_and_uneven),
      cmocka_unit_test(test_uneven_sweep),
      cmocka_unit_test(test_uneven_plan),
      cmocka_unit_test(test_sweep),
      cmocka_unit_test(test_variadic_sweep),
      cmocka_unit_test(test_argmax_plan),
      cmocka_unit_test(test_top_k_candidates),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
