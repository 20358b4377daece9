/* Unit tests for the collective ops (src/exec/collective.c) run as real SPMD processes: threads of
 * this process, each with its own device, exchanging through the data plane's shared-memory path
 * (src/worker/spmd_local.c over spmd_coll.c). Every collective is checked against a reference
 * computed here from the spec's definitions (groups written out by hand from the spec's
 * examples, not recomputed by the code under test), for every element type, subgroups in
 * scrambled orders, the four process-grouping modes, every split/concat combination, built-in
 * and custom reduction bodies (compiled and generic paths); plus bitwise determinism,
 * collectives inside a while loop, the errors malformed groups get, a failing process cancelling
 * the others, and runs without collective support. */
#include <inttypes.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "exec/collective.h"
#include "exec/ops_util.h"
#include "hlo/parse.h"
#include "worker/spmd_coll.h"
#include "worker/spmd_local.h"

/* ---- harness ---- */

static const lm_dtype g_all_dtypes[] = {LOOM_DTYPE_PRED, LOOM_DTYPE_S8,  LOOM_DTYPE_S16, LOOM_DTYPE_S32, LOOM_DTYPE_S64,
                                        LOOM_DTYPE_U8,   LOOM_DTYPE_U16, LOOM_DTYPE_U32, LOOM_DTYPE_U64, LOOM_DTYPE_F16,
                                        LOOM_DTYPE_BF16, LOOM_DTYPE_F32, LOOM_DTYPE_F64, LOOM_DTYPE_C64, LOOM_DTYPE_C128};
#define NDTYPES (sizeof g_all_dtypes / sizeof g_all_dtypes[0])

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void) {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return g_rng;
}

/* Small integer values exact in every element type (complex: imaginary part -v/2, also exact). */
static double small_value(lm_dtype dt) {
  if (dt == LOOM_DTYPE_PRED) return (double)(rnd() % 2);
  if (lm_dtype_is_uint(dt)) return (double)(rnd() % 4);
  return (double)((int)(rnd() % 7) - 3);
}

static void put(unsigned char *p, lm_dtype dt, double v) {
  lm_store_f64(p, dt, v);
  if (dt == LOOM_DTYPE_C64) { float im = (float)(-v / 2); memcpy(p + 4, &im, 4); }
  if (dt == LOOM_DTYPE_C128) { double im = -v / 2; memcpy(p + 8, &im, 8); }
}

static char *type_str(lm_dtype dt, int rank, const int64_t *dims, char *buf, size_t cap) {
  lm_type t;
  lm_type_tensor(&t, dt, rank, dims);
  return lm_type_str(&t, buf, cap);
}

/* An uncharged buffer of the given type filled with small values. */
static lm_buffer *rand_buf(lm_dtype dt, int rank, const int64_t *dims) {
  lm_type t;
  lm_type_tensor(&t, dt, rank, dims);
  lm_buffer *b = NULL;
  assert_int_equal(lm_buffer_alloc(NULL, &t, &b, NULL), 0);
  size_t es = lm_dtype_size(dt), n = (size_t)lm_type_numel(&t);
  for (size_t i = 0; i < n; i++) put((unsigned char *)b->data + i * es, dt, small_value(dt));
  return b;
}

/* Parses text and runs @fn on every process of an R x P grid: args[i * nin + a] are process i's
 * arguments, res[i * nout + j] receive its results (uncharged). Returns the status. */
static int spmd(const char *text, const char *fn, uint32_t R, uint32_t P, lm_buffer **args, uint32_t nin,
                lm_buffer **res, uint32_t nout, lm_err *err) {
  lm_module *m;
  lm_parse_opts po = {.filename = "test.mlir"};
  int rc = lm_parse_module(text, strlen(text), &po, &m, err);
  if (rc < 0) return rc;
  lm_program *p;
  if ((rc = lm_program_create(m, &p, err)) < 0) return rc;
  const char *fns[64];
  for (uint32_t i = 0; i < R * P; i++) fns[i] = fn;
  rc = lm_spmd_local_run(p, fns, R, P, args, R * P * nin, res, R * P * nout, NULL, (size_t)1 << 28, NULL, err);
  lm_program_destroy(p);
  return rc;
}

static void release_all(lm_buffer **b, size_t n) {
  for (size_t i = 0; i < n; i++) {
    lm_buffer_release(b[i]);
    b[i] = NULL;
  }
}

/* ---- references (spec definitions on bytes) ---- */

/* The element count before dimension axis (outer) and from it on (inner). */
static void outer_inner(int rank, const int64_t *dims, int axis, size_t *outer, size_t *inner) {
  *outer = 1;
  *inner = 1;
  for (int d = 0; d < rank; d++) {
    if (d < axis) *outer *= (size_t)dims[d];
    else *inner *= (size_t)dims[d];
  }
}

/* concatenate(blocks[0..K), axis), each block of shape dims (spec 'concatenate'). */
static void ref_concat(unsigned char *dst, unsigned char *const *blocks, size_t K, int rank, const int64_t *dims,
                       int axis, size_t es) {
  size_t outer, inner;
  outer_inner(rank, dims, axis, &outer, &inner);
  for (size_t o = 0; o < outer; o++)
    for (size_t j = 0; j < K; j++) memcpy(dst + ((o * K + j) * inner) * es, blocks[j] + o * inner * es, inner * es);
}

/* Part j of K equal slices of src (shape dims) along axis (spec 'slice'). */
static void ref_part(unsigned char *dst, const unsigned char *src, int rank, const int64_t *dims, int axis, size_t K,
                     size_t j, size_t es) {
  size_t outer, inner;
  outer_inner(rank, dims, axis, &outer, &inner);
  size_t part = inner / K;
  for (size_t o = 0; o < outer; o++) memcpy(dst + o * part * es, src + (o * inner + j * part) * es, part * es);
}

typedef enum { R_ADD, R_MUL, R_MAX, R_MIN, R_AND, R_OR, R_XOR, R_FIRST_NZ, R_MAXABS } red_kind;
static const char *const g_red_names[] = {"add", "multiply", "maximum", "minimum", "and", "or", "xor", "first_nonzero",
                                          "max_abs"};

static double ref_combine(red_kind k, lm_dtype dt, double a, double b) {
  bool p = dt == LOOM_DTYPE_PRED;
  switch (k) {
    case R_ADD: return p ? (double)(a != 0 || b != 0) : a + b;
    case R_MUL: return p ? (double)(a != 0 && b != 0) : a * b;
    case R_MAX: return a > b ? a : b;
    case R_MIN: return a < b ? a : b;
    case R_AND: return (double)((int64_t)a & (int64_t)b);
    case R_OR: return (double)((int64_t)a | (int64_t)b);
    case R_XOR: return (double)((int64_t)a ^ (int64_t)b);
    case R_FIRST_NZ: return a != 0 ? a : b;
    case R_MAXABS: return fabs(a) > fabs(b) ? fabs(a) : fabs(b);
  }
  return 0;
}

/* dst = reduction of srcs[0..K) in order, element by element, for count elements of dt
 * (complex: both parts, for add only). */
static void ref_reduce(red_kind k, lm_dtype dt, unsigned char *dst, unsigned char *const *srcs, size_t K, size_t count) {
  lm_dtype ct = dt == LOOM_DTYPE_C64 ? LOOM_DTYPE_F32 : dt == LOOM_DTYPE_C128 ? LOOM_DTYPE_F64 : dt;
  if (ct != dt) count *= 2;
  size_t es = lm_dtype_size(ct);
  for (size_t i = 0; i < count; i++) {
    double acc = lm_load_f64(srcs[0] + i * es, ct);
    for (size_t j = 1; j < K; j++) acc = ref_combine(k, ct, acc, lm_load_f64(srcs[j] + i * es, ct));
    lm_store_f64(dst + i * es, ct, acc);
  }
}

/* The reduction body region text on element type ty. */
static void body_text(red_kind k, const char *ty, char *buf, size_t cap) {
  switch (k) {
    case R_FIRST_NZ:
      snprintf(buf, cap,
               "^bb0(%%a: tensor<%s>, %%b: tensor<%s>):\n"
               "  %%z = stablehlo.constant dense<0> : tensor<%s>\n"
               "  %%nz = stablehlo.compare NE, %%a, %%z : (tensor<%s>, tensor<%s>) -> tensor<i1>\n"
               "  %%c = stablehlo.select %%nz, %%a, %%b : tensor<i1>, tensor<%s>\n"
               "  stablehlo.return %%c : tensor<%s>\n",
               ty, ty, ty, ty, ty, ty, ty);
      break;
    case R_MAXABS:
      snprintf(buf, cap,
               "^bb0(%%a: tensor<%s>, %%b: tensor<%s>):\n"
               "  %%ax = stablehlo.abs %%a : tensor<%s>\n"
               "  %%ay = stablehlo.abs %%b : tensor<%s>\n"
               "  %%c = stablehlo.maximum %%ax, %%ay : tensor<%s>\n"
               "  stablehlo.return %%c : tensor<%s>\n",
               ty, ty, ty, ty, ty, ty);
      break;
    default:
      snprintf(buf, cap,
               "^bb0(%%a: tensor<%s>, %%b: tensor<%s>):\n"
               "  %%c = stablehlo.%s %%a, %%b : tensor<%s>\n"
               "  stablehlo.return %%c : tensor<%s>\n",
               ty, ty, g_red_names[k], ty, ty);
  }
}

/* ---- process-grouping layouts, groups written out from the spec's definitions ---- */

typedef struct layout {
  uint32_t R, P;
  const char *attrs;        /* replica_groups and channel attributes as written in the op */
  uint32_t ngroups, gsize;
  uint32_t groups[4][8];    /* process ids r * P + p, in group order */
} layout;

/* For ops grouped by channel_id and use_global_device_ids (all_reduce, all_gather,
 * reduce_scatter). */
static const layout g_reduce_layouts[] = {
    /* cross_replica, one group */
    {4, 1, "replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>", 1, 4, {{0, 1, 2, 3}}},
    /* cross_replica, two groups in scrambled order */
    {4, 1, "replica_groups = dense<[[3, 1], [0, 2]]> : tensor<2x2xi64>", 2, 2, {{3, 1}, {0, 2}}},
    /* cross_replica with 2 partitions: one group per (replica group, partition) */
    {2, 2, "replica_groups = dense<[[1, 0]]> : tensor<1x2xi64>", 2, 2, {{2, 0}, {3, 1}}},
    /* cross_replica_and_partition: replica group x every partition, partition-major */
    {2, 2, "replica_groups = dense<[[1, 0]]> : tensor<1x2xi64>, channel_handle = #stablehlo.channel_handle<handle = 1, type = 0>",
     1, 4, {{2, 0, 3, 1}}},
    /* flattened_ids */
    {2, 2, "replica_groups = dense<[[0, 3], [2, 1]]> : tensor<2x2xi64>, channel_handle = #stablehlo.channel_handle<handle = 5, type = 1>, use_global_device_ids",
     2, 2, {{0, 3}, {2, 1}}},
    /* empty replica_groups: every replica */
    {3, 1, "replica_groups = dense<> : tensor<0x0xi64>", 1, 3, {{0, 1, 2}}},
};
#define NREDUCE_LAYOUTS (sizeof g_reduce_layouts / sizeof g_reduce_layouts[0])

/* For ops grouped by channel_id only (all_to_all, collective_broadcast). */
static const layout g_channel_layouts[] = {
    {4, 1, "replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>", 1, 4, {{0, 1, 2, 3}}},
    {4, 1, "replica_groups = dense<[[2, 0], [3, 1]]> : tensor<2x2xi64>", 2, 2, {{2, 0}, {3, 1}}},
    /* cross_replica over 2 partitions */
    {2, 2, "replica_groups = dense<[[1, 0]]> : tensor<1x2xi64>", 2, 2, {{2, 0}, {3, 1}}},
    /* cross_partition: partition group x every replica */
    {2, 2, "replica_groups = dense<[[1, 0]]> : tensor<1x2xi64>, channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>",
     2, 2, {{1, 0}, {3, 2}}},
};
#define NCHANNEL_LAYOUTS (sizeof g_channel_layouts / sizeof g_channel_layouts[0])

/* Runs text's @f on L's processes, each on a new random dt tensor of dims[rank] (args), results in
 * res; a failed run fails the test as "label: error". Returns the number of processes. */
static uint32_t run_on_layout(const char *text, const layout *L, lm_dtype dt, int rank, const int64_t *dims,
                              lm_buffer **args, lm_buffer **res, const char *label) {
  uint32_t n = L->R * L->P;
  for (uint32_t i = 0; i < n; i++) args[i] = rand_buf(dt, rank, dims);
  lm_err err;
  if (spmd(text, "f", L->R, L->P, args, 1, res, 1, &err) < 0) fail_msg("%s: %s", label, err.msg);
  return n;
}

/* ---- all_reduce ---- */

static void check_all_reduce(lm_dtype dt, red_kind k, const layout *L) {
  char ty[64], tt[128], body[1024], text[4096];
  snprintf(ty, sizeof ty, "%s", lm_dtype_name(dt));
  int64_t dims[2] = {3, 5};
  type_str(dt, 2, dims, tt, sizeof tt);
  body_text(k, ty, body, sizeof body);
  snprintf(text, sizeof text,
           "func.func @f(%%x: %s) -> %s {\n"
           "  %%r = \"stablehlo.all_reduce\"(%%x) ({\n%s}) {%s} : (%s) -> %s\n"
           "  return %%r : %s\n}\n",
           tt, tt, body, L->attrs, tt, tt, tt);
  char label[1024];
  snprintf(label, sizeof label, "all_reduce %s %s [%s]", ty, g_red_names[k], L->attrs);
  lm_buffer *args[8], *res[8] = {0};
  uint32_t n = run_on_layout(text, L, dt, 2, dims, args, res, label);
  size_t nb = args[0]->nbytes;
  unsigned char *want = malloc(nb);
  for (uint32_t g = 0; g < L->ngroups; g++) {
    unsigned char *srcs[8];
    for (uint32_t j = 0; j < L->gsize; j++) srcs[j] = args[L->groups[g][j]]->data;
    ref_reduce(k, dt, want, srcs, L->gsize, 15);
    for (uint32_t j = 0; j < L->gsize; j++)
      if (memcmp(res[L->groups[g][j]]->data, want, nb) != 0)
        fail_msg("%s: process %u differs from the reference", label, L->groups[g][j]);
  }
  free(want);
  release_all(args, n);
  release_all(res, n);
}

static void test_all_reduce_every_dtype(void **state) {
  for (size_t d = 0; d < NDTYPES; d++) {
    lm_dtype dt = g_all_dtypes[d];
    bool cplx = lm_dtype_is_complex(dt), bits = lm_dtype_is_int(dt) || dt == LOOM_DTYPE_PRED;
    for (red_kind k = R_ADD; k <= R_XOR; k++) {
      if (cplx && k != R_ADD) continue;                 /* the reference orders only reals */
      if (!bits && k >= R_AND) continue;                /* bitwise ops are for integers and i1 */
      if (lm_dtype_is_uint(dt) && k == R_MUL) continue; /* fine too, but keeps the run short */
      for (size_t l = 0; l < NREDUCE_LAYOUTS; l += (dt == LOOM_DTYPE_F32 || dt == LOOM_DTYPE_S32) ? 1 : 3)
        check_all_reduce(dt, k, &g_reduce_layouts[l]);
    }
  }
}

static void test_all_reduce_custom_bodies(void **state) {
  const lm_dtype dts[] = {LOOM_DTYPE_F32, LOOM_DTYPE_S32, LOOM_DTYPE_F64, LOOM_DTYPE_S8, LOOM_DTYPE_BF16};
  for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++)
    for (size_t l = 0; l < NREDUCE_LAYOUTS; l++) {
      check_all_reduce(dts[d], R_FIRST_NZ, &g_reduce_layouts[l]); /* compiled body, order-sensitive */
      check_all_reduce(dts[d], R_MAXABS, &g_reduce_layouts[l]);   /* generic body (abs is not compiled) */
    }
  /* the generic path of a built-in body gives the same bits as the built-in op */
  lm_ops_generic_only = 1;
  check_all_reduce(LOOM_DTYPE_S64, R_ADD, &g_reduce_layouts[1]);
  check_all_reduce(LOOM_DTYPE_F16, R_MAX, &g_reduce_layouts[3]);
  check_all_reduce(LOOM_DTYPE_PRED, R_ADD, &g_reduce_layouts[0]);
  lm_ops_generic_only = 0;
}

/* Random f32 inputs (not exact): every member gets the same bits, every run the same bits, and the
 * built-in and generic (body-evaluating) paths agree bit for bit. */
static void test_all_reduce_deterministic(void **state) {
  const char *text =
      "func.func @f(%x: tensor<1000xf32>) -> tensor<1000xf32> {\n"
      "  %r = \"stablehlo.all_reduce\"(%x) ({\n"
      "  ^bb0(%a: tensor<f32>, %b: tensor<f32>):\n"
      "    %c = stablehlo.add %a, %b : tensor<f32>\n"
      "    stablehlo.return %c : tensor<f32>\n"
      "  }) {replica_groups = dense<[[0, 1, 2, 3, 4]]> : tensor<1x5xi64>} : (tensor<1000xf32>) -> tensor<1000xf32>\n"
      "  return %r : tensor<1000xf32>\n}\n";
  int64_t dims[1] = {1000};
  lm_buffer *args[5], *res[5] = {0}, *first[5] = {0};
  for (int i = 0; i < 5; i++) {
    args[i] = rand_buf(LOOM_DTYPE_F32, 1, dims);
    float *f = args[i]->data;
    for (int j = 0; j < 1000; j++) f[j] = (float)((double)(rnd() % 2000001) / 7919.0 - 126.3);
  }
  lm_err err;
  for (int rep = 0; rep < 4; rep++) {
    lm_ops_generic_only = rep == 3;
    int rc = spmd(text, "f", 5, 1, args, 1, rep ? res : first, 1, &err);
    lm_ops_generic_only = 0;
    if (rc < 0) fail_msg("%s", err.msg);
    for (int i = 0; i < 5; i++) assert_memory_equal((rep ? res : first)[i]->data, first[0]->data, 4000);
    if (rep) release_all(res, 5);
  }
  /* and the value is a sum in some order: close to the double-precision sum */
  const float *r = first[0]->data;
  for (int j = 0; j < 1000; j++) {
    double s = 0;
    for (int i = 0; i < 5; i++) s += ((float *)args[i]->data)[j];
    assert_true(fabs(r[j] - s) <= 1e-4 * (fabs(s) + 1));
  }
  release_all(first, 5);
  release_all(args, 5);
}

/* ---- all_gather ---- */

static void check_all_gather(lm_dtype dt, int dim, const layout *L) {
  int64_t dims[3] = {2, 3, 2}, rdims[3] = {2, 3, 2};
  rdims[dim] *= L->gsize;
  char tt[128], rt[128], text[2048];
  type_str(dt, 3, dims, tt, sizeof tt);
  type_str(dt, 3, rdims, rt, sizeof rt);
  snprintf(text, sizeof text,
           "func.func @f(%%x: %s) -> %s {\n"
           "  %%r = \"stablehlo.all_gather\"(%%x) {all_gather_dim = %d : i64, %s} : (%s) -> %s\n"
           "  return %%r : %s\n}\n",
           tt, rt, dim, L->attrs, tt, rt, rt);
  char label[1024];
  snprintf(label, sizeof label, "all_gather %s dim %d [%s]", lm_dtype_name(dt), dim, L->attrs);
  lm_buffer *args[8], *res[8] = {0};
  uint32_t n = run_on_layout(text, L, dt, 3, dims, args, res, label);
  size_t nb = res[0]->nbytes;
  unsigned char *want = malloc(nb);
  for (uint32_t g = 0; g < L->ngroups; g++) {
    unsigned char *blocks[8];
    for (uint32_t j = 0; j < L->gsize; j++) blocks[j] = args[L->groups[g][j]]->data;
    ref_concat(want, blocks, L->gsize, 3, dims, dim, lm_dtype_size(dt));
    for (uint32_t j = 0; j < L->gsize; j++)
      if (memcmp(res[L->groups[g][j]]->data, want, nb) != 0)
        fail_msg("%s: process %u differs", label, L->groups[g][j]);
  }
  free(want);
  release_all(args, n);
  release_all(res, n);
}

static void test_all_gather(void **state) {
  const lm_dtype dts[] = {LOOM_DTYPE_F32, LOOM_DTYPE_S8, LOOM_DTYPE_C128, LOOM_DTYPE_BF16, LOOM_DTYPE_PRED};
  for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++)
    for (int dim = 0; dim < 3; dim++)
      for (size_t l = 0; l < NREDUCE_LAYOUTS; l++) check_all_gather(dts[d], dim, &g_reduce_layouts[l]);
}

/* ---- reduce_scatter ---- */

/* Operand shape of the reduce_scatter checks; a scatter dimension must divide by the group size. */
static const int64_t g_rs_dims[3] = {4, 4, 3};

static void check_reduce_scatter(lm_dtype dt, red_kind k, int dim, const layout *L) {
  int64_t dims[3], rdims[3];
  memcpy(dims, g_rs_dims, sizeof dims);
  memcpy(rdims, g_rs_dims, sizeof rdims);
  if (dims[dim] % L->gsize)
    fail_msg("reduce_scatter %s %s dim %d [%s]: dimension %" PRId64 " does not divide by group size %u (bad test case)",
             lm_dtype_name(dt), g_red_names[k], dim, L->attrs, dims[dim], L->gsize);
  rdims[dim] /= L->gsize;
  char ty[64], tt[128], rt[128], body[1024], text[4096];
  snprintf(ty, sizeof ty, "%s", lm_dtype_name(dt));
  type_str(dt, 3, dims, tt, sizeof tt);
  type_str(dt, 3, rdims, rt, sizeof rt);
  body_text(k, ty, body, sizeof body);
  snprintf(text, sizeof text,
           "func.func @f(%%x: %s) -> %s {\n"
           "  %%r = \"stablehlo.reduce_scatter\"(%%x) ({\n%s}) {scatter_dimension = %d : i64, %s} : (%s) -> %s\n"
           "  return %%r : %s\n}\n",
           tt, rt, body, dim, L->attrs, tt, rt, rt);
  char label[1024];
  snprintf(label, sizeof label, "reduce_scatter %s %s dim %d [%s]", ty, g_red_names[k], dim, L->attrs);
  lm_buffer *args[8], *res[8] = {0};
  uint32_t n = run_on_layout(text, L, dt, 3, dims, args, res, label);
  size_t es = lm_dtype_size(dt), nb = res[0]->nbytes, count = nb / es;
  unsigned char *want = malloc(nb), *parts[8];
  for (uint32_t g = 0; g < L->ngroups; g++)
    for (uint32_t j = 0; j < L->gsize; j++) { /* member j gets the reduction of everyone's part j */
      for (uint32_t s = 0; s < L->gsize; s++) {
        parts[s] = malloc(nb);
        ref_part(parts[s], args[L->groups[g][s]]->data, 3, dims, dim, L->gsize, j, es);
      }
      ref_reduce(k, dt, want, parts, L->gsize, count);
      for (uint32_t s = 0; s < L->gsize; s++) free(parts[s]);
      if (memcmp(res[L->groups[g][j]]->data, want, nb) != 0)
        fail_msg("%s: process %u differs", label, L->groups[g][j]);
    }
  free(want);
  release_all(args, n);
  release_all(res, n);
}

static void test_reduce_scatter(void **state) {
  for (int dim = 0; dim < 3; dim++)
    for (size_t l = 0; l < NREDUCE_LAYOUTS; l++) {
      if (g_rs_dims[dim] % g_reduce_layouts[l].gsize) continue; /* not a valid reduce_scatter */
      check_reduce_scatter(LOOM_DTYPE_F32, R_ADD, dim, &g_reduce_layouts[l]);
      check_reduce_scatter(LOOM_DTYPE_S16, R_MAX, dim, &g_reduce_layouts[l]);
      check_reduce_scatter(LOOM_DTYPE_F64, R_FIRST_NZ, dim, &g_reduce_layouts[l]);
      check_reduce_scatter(LOOM_DTYPE_S32, R_MAXABS, dim, &g_reduce_layouts[l]);
    }
  check_reduce_scatter(LOOM_DTYPE_C64, R_ADD, 1, &g_reduce_layouts[0]);
  check_reduce_scatter(LOOM_DTYPE_PRED, R_MUL, 0, &g_reduce_layouts[1]);
  check_reduce_scatter(LOOM_DTYPE_F16, R_ADD, 1, &g_reduce_layouts[2]);
}

/* ---- all_to_all ---- */

/* Operand shape of the all_to_all checks; a split dimension must divide by the group size. */
static const int64_t g_a2a_dims[3] = {4, 2, 4};

static void check_all_to_all(lm_dtype dt, int sd, int cd, const layout *L) {
  int64_t dims[3], rdims[3];
  memcpy(dims, g_a2a_dims, sizeof dims);
  memcpy(rdims, dims, sizeof dims);
  uint32_t K = L->gsize;
  if (dims[sd] % K)
    fail_msg("all_to_all %s split %d concat %d [%s]: dimension %" PRId64 " does not divide by group size %u (bad test case)",
             lm_dtype_name(dt), sd, cd, L->attrs, dims[sd], K);
  rdims[sd] /= K;
  rdims[cd] *= K;
  char tt[128], rt[128], text[2048];
  type_str(dt, 3, dims, tt, sizeof tt);
  type_str(dt, 3, rdims, rt, sizeof rt);
  snprintf(text, sizeof text,
           "func.func @f(%%x: %s) -> %s {\n"
           "  %%r = \"stablehlo.all_to_all\"(%%x) {split_dimension = %d : i64, concat_dimension = %d : i64, "
           "split_count = %u : i64, %s} : (%s) -> %s\n"
           "  return %%r : %s\n}\n",
           tt, rt, sd, cd, K, L->attrs, tt, rt, rt);
  char label[1024];
  snprintf(label, sizeof label, "all_to_all %s split %d concat %d [%s]", lm_dtype_name(dt), sd, cd, L->attrs);
  lm_buffer *args[8], *res[8] = {0};
  uint32_t n = run_on_layout(text, L, dt, 3, dims, args, res, label);
  size_t es = lm_dtype_size(dt), nb = res[0]->nbytes;
  int64_t pdims[3];
  memcpy(pdims, dims, sizeof dims);
  pdims[sd] /= K;
  unsigned char *want = malloc(nb), *parts[8];
  for (uint32_t g = 0; g < L->ngroups; g++)
    for (uint32_t j = 0; j < K; j++) { /* receiver j: part j of every sender, concatenated in group order */
      for (uint32_t s = 0; s < K; s++) {
        parts[s] = malloc(nb / K);
        ref_part(parts[s], args[L->groups[g][s]]->data, 3, dims, sd, K, j, es);
      }
      ref_concat(want, parts, K, 3, pdims, cd, es);
      for (uint32_t s = 0; s < K; s++) free(parts[s]);
      if (memcmp(res[L->groups[g][j]]->data, want, nb) != 0)
        fail_msg("%s: process %u differs", label, L->groups[g][j]);
    }
  free(want);
  release_all(args, n);
  release_all(res, n);
}

static void test_all_to_all(void **state) {
  for (int sd = 0; sd < 3; sd++)
    for (int cd = 0; cd < 3; cd++)
      for (size_t l = 0; l < NCHANNEL_LAYOUTS; l++) {
        if (g_a2a_dims[sd] % g_channel_layouts[l].gsize) continue; /* not a valid all_to_all */
        check_all_to_all(LOOM_DTYPE_F32, sd, cd, &g_channel_layouts[l]);
      }
  check_all_to_all(LOOM_DTYPE_C128, 2, 0, &g_channel_layouts[0]);
  check_all_to_all(LOOM_DTYPE_PRED, 0, 1, &g_channel_layouts[1]);
  check_all_to_all(LOOM_DTYPE_U16, 2, 2, &g_channel_layouts[3]);
}

/* ---- collective_permute ---- */

static void check_permute(const char *pairs_attr, uint32_t R, uint32_t P, const int *src_of) {
  char text[2048];
  snprintf(text, sizeof text,
           "func.func @f(%%x: tensor<2x3xi32>) -> tensor<2x3xi32> {\n"
           "  %%r = \"stablehlo.collective_permute\"(%%x) {%s} : (tensor<2x3xi32>) -> tensor<2x3xi32>\n"
           "  return %%r : tensor<2x3xi32>\n}\n",
           pairs_attr);
  int64_t dims[2] = {2, 3};
  uint32_t n = R * P;
  lm_buffer *args[8], *res[8] = {0};
  for (uint32_t i = 0; i < n; i++) args[i] = rand_buf(LOOM_DTYPE_S32, 2, dims);
  lm_err err;
  if (spmd(text, "f", R, P, args, 1, res, 1, &err) < 0) fail_msg("collective_permute [%s]: %s", pairs_attr, err.msg);
  int32_t zero[6] = {0};
  for (uint32_t i = 0; i < n; i++) {
    const void *want = src_of[i] < 0 ? (const void *)zero : args[src_of[i]]->data;
    if (memcmp(res[i]->data, want, 24) != 0) fail_msg("collective_permute [%s]: process %u differs", pairs_attr, i);
  }
  release_all(args, n);
  release_all(res, n);
}

static void test_collective_permute(void **state) {
  /* a ring over 4 replicas */
  check_permute("source_target_pairs = dense<[[0, 1], [1, 2], [2, 3], [3, 0]]> : tensor<4x2xi64>", 4, 1,
                (const int[]){3, 0, 1, 2});
  /* partial: replica 1 and 2 receive nothing (zeros), a self loop on 3 */
  check_permute("source_target_pairs = dense<[[0, 3], [3, 0], [2, 2]]> : tensor<3x2xi64>", 4, 1,
                (const int[]){3, -1, 2, 0});
  /* cross_replica on 2 x 2: pairs of replicas inside each partition; process = r * 2 + p */
  check_permute("source_target_pairs = dense<[[1, 0]]> : tensor<1x2xi64>", 2, 2, (const int[]){2, 3, -1, -1});
  /* cross_partition on 2 x 2 */
  check_permute("source_target_pairs = dense<[[0, 1], [1, 0]]> : tensor<2x2xi64>, channel_handle = "
                "#stablehlo.channel_handle<handle = 2, type = 1>",
                2, 2, (const int[]){1, 0, 3, 2});
  /* no pairs: zeros everywhere */
  check_permute("source_target_pairs = dense<> : tensor<0x2xi64>", 2, 1, (const int[]){-1, -1});
}

/* ---- collective_broadcast ---- */

static void check_broadcast(const layout *L, const int *src_of) {
  char text[2048];
  snprintf(text, sizeof text,
           "func.func @f(%%x: tensor<3xf64>, %%y: tensor<2xi8>) -> (tensor<3xf64>, tensor<2xi8>) {\n"
           "  %%r:2 = \"stablehlo.collective_broadcast\"(%%x, %%y) {%s} : (tensor<3xf64>, tensor<2xi8>) -> "
           "(tensor<3xf64>, tensor<2xi8>)\n"
           "  return %%r#0, %%r#1 : tensor<3xf64>, tensor<2xi8>\n}\n",
           L->attrs);
  int64_t d3[1] = {3}, d2[1] = {2};
  uint32_t n = L->R * L->P;
  lm_buffer *args[16], *res[16] = {0};
  for (uint32_t i = 0; i < n; i++) {
    args[2 * i] = rand_buf(LOOM_DTYPE_F64, 1, d3);
    args[2 * i + 1] = rand_buf(LOOM_DTYPE_S8, 1, d2);
  }
  lm_err err;
  if (spmd(text, "f", L->R, L->P, args, 2, res, 2, &err) < 0) fail_msg("collective_broadcast [%s]: %s", L->attrs, err.msg);
  double z3[3] = {0};
  int8_t z2[2] = {0};
  for (uint32_t i = 0; i < n; i++) {
    int s = src_of[i];
    if (memcmp(res[2 * i]->data, s < 0 ? (void *)z3 : args[2 * s]->data, 24) ||
        memcmp(res[2 * i + 1]->data, s < 0 ? (void *)z2 : args[2 * s + 1]->data, 2))
      fail_msg("collective_broadcast [%s]: process %u differs", L->attrs, i);
  }
  release_all(args, 2 * n);
  release_all(res, 2 * n);
}

static void test_collective_broadcast(void **state) {
  check_broadcast(&g_channel_layouts[0], (const int[]){0, 0, 0, 0});
  check_broadcast(&g_channel_layouts[1], (const int[]){2, 3, 2, 3});
  check_broadcast(&g_channel_layouts[2], (const int[]){2, 3, 2, 3});
  check_broadcast(&g_channel_layouts[3], (const int[]){1, 1, 3, 3});
  /* processes in no group get zeros */
  layout part = {4, 1, "replica_groups = dense<[[2, 1]]> : tensor<1x2xi64>", 1, 2, {{2, 1}}};
  check_broadcast(&part, (const int[]){-1, 2, 2, -1});
}

/* ---- collective_reduce, cross-replica-sum, variadic operands ---- */

static void test_reduce_to_root_and_legacy_sum(void **state) {
  const char *text =
      "func.func @f(%x: tensor<4xi64>, %y: tensor<2xi64>) -> (tensor<4xi64>, tensor<2xi64>, tensor<4xi64>) {\n"
      "  %r:2 = \"stablehlo.collective_reduce\"(%x, %y) ({\n"
      "  ^bb0(%a: tensor<i64>, %b: tensor<i64>):\n"
      "    %c = stablehlo.add %a, %b : tensor<i64>\n"
      "    stablehlo.return %c : tensor<i64>\n"
      "  }) {replica_groups = dense<[[2, 0], [1, 3]]> : tensor<2x2xi64>} : (tensor<4xi64>, tensor<2xi64>) -> "
      "(tensor<4xi64>, tensor<2xi64>)\n"
      "  %s = \"stablehlo.cross-replica-sum\"(%x) {replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>} : "
      "(tensor<4xi64>) -> tensor<4xi64>\n"
      "  return %r#0, %r#1, %s : tensor<4xi64>, tensor<2xi64>, tensor<4xi64>\n}\n";
  int64_t d4[1] = {4}, d2[1] = {2};
  lm_buffer *args[8], *res[12] = {0};
  for (int i = 0; i < 4; i++) {
    args[2 * i] = rand_buf(LOOM_DTYPE_S64, 1, d4);
    args[2 * i + 1] = rand_buf(LOOM_DTYPE_S64, 1, d2);
  }
  lm_err err;
  if (spmd(text, "f", 4, 1, args, 2, res, 3, &err) < 0) fail_msg("%s", err.msg);
  const int root_of[4] = {2, 1, 2, 1}, other[4] = {0, 3, 0, 3};
  for (int i = 0; i < 4; i++) {
    int64_t *x = res[3 * i]->data, *y = res[3 * i + 1]->data, *s = res[3 * i + 2]->data;
    bool root = root_of[i] == i;
    for (int j = 0; j < 4; j++) {
      int64_t sum = ((int64_t *)args[2 * root_of[i]]->data)[j] + ((int64_t *)args[2 * other[i]]->data)[j];
      assert_int_equal(x[j], root ? sum : 0);
      int64_t all = 0;
      for (int q = 0; q < 4; q++) all += ((int64_t *)args[2 * q]->data)[j];
      assert_int_equal(s[j], all);
    }
    for (int j = 0; j < 2; j++) {
      int64_t sum = ((int64_t *)args[2 * root_of[i] + 1]->data)[j] + ((int64_t *)args[2 * other[i] + 1]->data)[j];
      assert_int_equal(y[j], root ? sum : 0);
    }
  }
  release_all(args, 8);
  release_all(res, 12);
}

/* Collectives inside a while loop: every iteration is a new call on the same group. */
static void test_collectives_in_while(void **state) {
  const char *text =
      "func.func @f(%x: tensor<3xi64>) -> tensor<3xi64> {\n"
      "  %zero = stablehlo.constant dense<0> : tensor<i64>\n"
      "  %r:2 = stablehlo.while(%i = %zero, %v = %x) : tensor<i64>, tensor<3xi64>\n"
      "  cond {\n"
      "    %n = stablehlo.constant dense<6> : tensor<i64>\n"
      "    %c = stablehlo.compare LT, %i, %n : (tensor<i64>, tensor<i64>) -> tensor<i1>\n"
      "    stablehlo.return %c : tensor<i1>\n"
      "  } do {\n"
      "    %one = stablehlo.constant dense<1> : tensor<i64>\n"
      "    %j = stablehlo.add %i, %one : tensor<i64>\n"
      "    %s = \"stablehlo.all_reduce\"(%v) ({\n"
      "    ^bb0(%a: tensor<i64>, %b: tensor<i64>):\n"
      "      %c = stablehlo.add %a, %b : tensor<i64>\n"
      "      stablehlo.return %c : tensor<i64>\n"
      "    }) {replica_groups = dense<[[0, 1], [2, 3]]> : tensor<2x2xi64>} : (tensor<3xi64>) -> tensor<3xi64>\n"
      "    %p = \"stablehlo.collective_permute\"(%s) {source_target_pairs = dense<[[0, 2], [2, 0], [1, 3], [3, 1]]> : "
      "tensor<4x2xi64>} : (tensor<3xi64>) -> tensor<3xi64>\n"
      "    stablehlo.return %j, %p : tensor<i64>, tensor<3xi64>\n"
      "  }\n"
      "  return %r#1 : tensor<3xi64>\n}\n";
  int64_t d[1] = {3};
  lm_buffer *args[4], *res[4] = {0};
  int64_t v[4][3];
  for (int i = 0; i < 4; i++) {
    args[i] = rand_buf(LOOM_DTYPE_S64, 1, d);
    memcpy(v[i], args[i]->data, 24);
  }
  lm_err err;
  if (spmd(text, "f", 4, 1, args, 1, res, 1, &err) < 0) fail_msg("%s", err.msg);
  for (int it = 0; it < 6; it++) {
    int64_t s[4][3];
    for (int j = 0; j < 3; j++) {
      s[0][j] = s[1][j] = v[0][j] + v[1][j];
      s[2][j] = s[3][j] = v[2][j] + v[3][j];
    }
    for (int j = 0; j < 3; j++) {
      v[0][j] = s[2][j];
      v[2][j] = s[0][j];
      v[1][j] = s[3][j];
      v[3][j] = s[1][j];
    }
  }
  for (int i = 0; i < 4; i++) assert_memory_equal(res[i]->data, v[i], 24);
  release_all(args, 4);
  release_all(res, 4);
}

/* ---- errors ---- */

static int expect_error(const char *text, uint32_t R, uint32_t P, int code, const char *needle) {
  int64_t d[1] = {4};
  lm_buffer *args[8], *res[8] = {0};
  for (uint32_t i = 0; i < R * P; i++) args[i] = rand_buf(LOOM_DTYPE_F32, 1, d);
  lm_err err = {0};
  int rc = spmd(text, "f", R, P, args, 1, res, 1, &err);
  release_all(args, R * P);
  release_all(res, R * P);
  if (rc != code) fail_msg("expected status %d, got %d: %s", code, rc, err.msg);
  if (needle && !strstr(err.msg, needle)) fail_msg("expected '%s' in: %s", needle, err.msg);
  return rc;
}

#define AR_TEXT(ATTRS)                                                                                         \
  "func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {\n"                                                       \
  "  %r = \"stablehlo.all_reduce\"(%x) ({\n"                                                                   \
  "  ^bb0(%a: tensor<f32>, %b: tensor<f32>):\n"                                                                \
  "    %c = stablehlo.add %a, %b : tensor<f32>\n"                                                              \
  "    stablehlo.return %c : tensor<f32>\n"                                                                    \
  "  }) {" ATTRS "} : (tensor<4xf32>) -> tensor<4xf32>\n"                                                      \
  "  return %r : tensor<4xf32>\n}\n"

static void test_group_errors(void **state) {
  /* compile time */
  expect_error(AR_TEXT("replica_groups = dense<[[0, 1], [1, 2]]> : tensor<2x2xi64>"), 3, 1, LOOM_VERIFY,
               "more than once");
  expect_error(AR_TEXT("replica_groups = dense<[[0, -2]]> : tensor<1x2xi64>"), 2, 1, LOOM_VERIFY, "-2");
  expect_error(AR_TEXT("replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>, use_global_device_ids"), 2, 1, LOOM_VERIFY,
               "use_global_device_ids");
  expect_error(AR_TEXT("replica_groups = dense<[0, 1]> : tensor<2xi64>"), 2, 1, LOOM_VERIFY, "2-dimensional");
  /* run time: against the grid */
  expect_error(AR_TEXT("replica_groups = dense<[[0, 1, 2]]> : tensor<1x3xi64>"), 2, 1, LOOM_INVALID_ARGUMENT,
               "replica 2, but the run has 2");
  expect_error(AR_TEXT("replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>"), 3, 1, LOOM_INVALID_ARGUMENT,
               "cover 2 of the run's 3 replicas");
  expect_error(AR_TEXT("replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>, channel_handle = "
                       "#stablehlo.channel_handle<handle = 1, type = 1>, use_global_device_ids"),
               2, 2, LOOM_INVALID_ARGUMENT, "flattened_ids");
  /* shapes that do not fit the group */
  expect_error("func.func @f(%x: tensor<4xf32>) -> tensor<8xf32> {\n"
               "  %r = \"stablehlo.all_gather\"(%x) {all_gather_dim = 0 : i64, replica_groups = dense<[[0, 1, 2]]> : "
               "tensor<1x3xi64>} : (tensor<4xf32>) -> tensor<8xf32>\n"
               "  return %r : tensor<8xf32>\n}\n",
               3, 1, LOOM_SHAPE_MISMATCH, "group of 3");
  expect_error("func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {\n"
               "  %r = \"stablehlo.all_to_all\"(%x) {split_dimension = 0 : i64, concat_dimension = 0 : i64, "
               "split_count = 2 : i64, replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>} : (tensor<4xf32>) -> "
               "tensor<4xf32>\n"
               "  return %r : tensor<4xf32>\n}\n",
               4, 1, LOOM_INVALID_ARGUMENT, "split_count is 2");
  expect_error("func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {\n"
               "  %r = \"stablehlo.all_to_all\"(%x) {split_dimension = 0 : i64, concat_dimension = 0 : i64, "
               "split_count = 3 : i64} : (tensor<4xf32>) -> tensor<4xf32>\n"
               "  return %r : tensor<4xf32>\n}\n",
               3, 1, LOOM_VERIFY, "not a multiple");
  expect_error("func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {\n"
               "  %r = \"stablehlo.collective_permute\"(%x) {source_target_pairs = dense<[[0, 1], [1, 1]]> : "
               "tensor<2x2xi64>} : (tensor<4xf32>) -> tensor<4xf32>\n"
               "  return %r : tensor<4xf32>\n}\n",
               2, 1, LOOM_VERIFY, "target 1 appears twice");
  expect_error("func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {\n"
               "  %r = \"stablehlo.collective_permute\"(%x) {source_target_pairs = dense<[[0, 5]]> : "
               "tensor<1x2xi64>} : (tensor<4xf32>) -> tensor<4xf32>\n"
               "  return %r : tensor<4xf32>\n}\n",
               2, 1, LOOM_INVALID_ARGUMENT, "replica 5");
  /* a reduction body of the wrong element type */
  expect_error("func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {\n"
               "  %r = \"stablehlo.all_reduce\"(%x) ({\n"
               "  ^bb0(%a: tensor<i32>, %b: tensor<i32>):\n"
               "    %c = stablehlo.add %a, %b : tensor<i32>\n"
               "    stablehlo.return %c : tensor<i32>\n"
               "  }) {replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>} : (tensor<4xf32>) -> tensor<4xf32>\n"
               "  return %r : tensor<4xf32>\n}\n",
               2, 1, LOOM_VERIFY, "tensor<f32>");
}

/* Without collective support (plain lm_program_run): groups of one process still run; larger ones
 * are refused as unsupported, naming the op. */
static void test_without_hooks(void **state) {
  const char *one = AR_TEXT("replica_groups = dense<[[0]]> : tensor<1x1xi64>");
  const char *two = AR_TEXT("replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>");
  const char *texts[2] = {one, two};
  for (int t = 0; t < 2; t++) {
    lm_module *m;
    lm_err err;
    lm_parse_opts po = {0};
    assert_int_equal(lm_parse_module(texts[t], strlen(texts[t]), &po, &m, &err), 0);
    lm_program *p;
    assert_int_equal(lm_program_create(m, &p, &err), 0);
    lm_device *dev = lm_device_create(1 << 20);
    int64_t d[1] = {4};
    lm_buffer *x = rand_buf(LOOM_DTYPE_F32, 1, d), *r = NULL;
    lm_run_opts o = {.device = dev, .num_replicas = t + 1};
    int rc = lm_program_run(p, "f", &o, &x, 1, &r, 1, &err);
    if (t == 0) {
      assert_int_equal(rc, 0);
      assert_memory_equal(r->data, x->data, 16);
    } else {
      assert_int_equal(rc, LOOM_UNSUPPORTED);
      assert_non_null(strstr(err.msg, "stablehlo.all_reduce"));
      assert_non_null(strstr(err.msg, "no collective support"));
    }
    lm_buffer_release(r);
    lm_buffer_release(x);
    lm_program_destroy(p);
    lm_device_destroy(dev);
  }
}

/* The executor's view through a recording hook table: process groups as process ids in spec
 * order, the caller's rank, and one sequence number per call (per operand), consumed also where no
 * hook is called (a group of one, a process in no group), so every process counts alike. */
typedef struct rec_call {
  uint32_t group[8], size, rank;
  uint64_t seq;
  lm_coll_op op;
} rec_call;
static rec_call g_rec[16];
static int g_nrec;

static int rec_all_reduce(void *user, const lm_coll_call *c, const void *send, void *recv, size_t count,
                          const lm_coll_reduction *red, lm_err *err) {
  rec_call *r = &g_rec[g_nrec++];
  memcpy(r->group, c->group, c->size * sizeof *c->group);
  r->size = c->size;
  r->rank = c->rank;
  r->seq = c->seq;
  r->op = red->op;
  memcpy(recv, send, count * lm_dtype_size(red->dtype));
  return 0;
}

static void test_hook_view(void **state) {
  const char *text =
      "func.func @f(%x: tensor<2xf32>, %y: tensor<3xf32>) -> (tensor<2xf32>, tensor<3xf32>, tensor<2xf32>) {\n"
      "  %r:2 = \"stablehlo.all_reduce\"(%x, %y) ({\n"
      "  ^bb0(%a: tensor<f32>, %b: tensor<f32>):\n"
      "    %c = stablehlo.maximum %b, %a : tensor<f32>\n"
      "    stablehlo.return %c : tensor<f32>\n"
      "  }) {replica_groups = dense<[[3, 1], [2, 0]]> : tensor<2x2xi64>, channel_handle = "
      "#stablehlo.channel_handle<handle = 1, type = 0>} : (tensor<2xf32>, tensor<3xf32>) -> (tensor<2xf32>, "
      "tensor<3xf32>)\n"
      "  %g = \"stablehlo.all_gather\"(%x) {all_gather_dim = 0 : i64, replica_groups = dense<[[0], [1], [2], [3]]> : "
      "tensor<4x1xi64>} : (tensor<2xf32>) -> tensor<2xf32>\n"
      "  %b = \"stablehlo.collective_broadcast\"(%x) {replica_groups = dense<[[0, 2]]> : tensor<1x2xi64>} : "
      "(tensor<2xf32>) -> tensor<2xf32>\n"
      "  %s = \"stablehlo.all_reduce\"(%b) ({\n"
      "  ^bb0(%a: tensor<f32>, %e: tensor<f32>):\n"
      "    %c = stablehlo.subtract %a, %e : tensor<f32>\n"
      "    stablehlo.return %c : tensor<f32>\n"
      "  }) {replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>} : (tensor<2xf32>) -> tensor<2xf32>\n"
      "  return %s, %r#1, %g : tensor<2xf32>, tensor<3xf32>, tensor<2xf32>\n}\n";
  lm_module *m;
  lm_err err;
  lm_parse_opts po = {0};
  assert_int_equal(lm_parse_module(text, strlen(text), &po, &m, &err), 0);
  lm_program *p;
  if (lm_program_create(m, &p, &err) < 0) fail_msg("%s", err.msg);
  /* a table from an older header that ends before all_gather: all_reduce only */
  struct lm_collectives h = {.struct_size = offsetof(struct lm_collectives, all_gather), .all_reduce = rec_all_reduce,
                             .all_gather = (void *)1};
  lm_device *dev = lm_device_create(1 << 20);
  int64_t d2[1] = {2}, d3[1] = {3};
  lm_buffer *args[2] = {rand_buf(LOOM_DTYPE_F32, 1, d2), rand_buf(LOOM_DTYPE_F32, 1, d3)}, *res[3] = {0};
  /* process (replica 1, partition 1) of a 4 x 2 grid */
  lm_run_opts o = {.device = dev, .replica_id = 1, .partition_id = 1, .num_replicas = 4, .num_partitions = 2,
                   .coll = &h};
  g_nrec = 0;
  int rc = lm_program_run(p, "f", &o, args, 2, res, 3, &err);
  if (rc < 0) fail_msg("%s", err.msg);
  assert_int_equal(g_nrec, 3);
  /* cross_replica_and_partition of [3, 1]: (3,0) (1,0) (3,1) (1,1) = 6 2 7 3; the caller is 3 */
  for (int i = 0; i < 2; i++) {
    assert_int_equal(g_rec[i].size, 4);
    assert_memory_equal(g_rec[i].group, ((uint32_t[]){6, 2, 7, 3}), 16);
    assert_int_equal(g_rec[i].rank, 3);
    assert_int_equal(g_rec[i].seq, (uint64_t)i);
    assert_int_equal(g_rec[i].op, LM_COLL_MAX); /* maximum(b, a) is still the built-in maximum */
  }
  /* all_gather of a group of one (seq 2) and a broadcast the caller is not part of (seq 3) call
   * no hook; the last all_reduce is cross_replica in partition 1: 1 3 5 7, with a custom body */
  assert_int_equal(g_rec[2].seq, 4);
  assert_int_equal(g_rec[2].size, 4);
  assert_memory_equal(g_rec[2].group, ((uint32_t[]){1, 3, 5, 7}), 16);
  assert_int_equal(g_rec[2].rank, 1);
  assert_int_equal(g_rec[2].op, LM_COLL_CUSTOM);
  float zeros[2] = {0, 0};
  assert_memory_equal(res[0]->data, zeros, 8); /* the broadcast gave zeros, passed through */
  assert_memory_equal(res[1]->data, args[1]->data, 12);
  assert_memory_equal(res[2]->data, args[0]->data, 8);
  release_all(res, 3);
  release_all(args, 2);
  lm_program_destroy(p);

  /* a group of two needs the all_gather hook, which the short table does not have */
  const char *ag = "func.func @f(%x: tensor<2xf32>) -> tensor<4xf32> {\n"
                   "  %g = \"stablehlo.all_gather\"(%x) {all_gather_dim = 0 : i64, replica_groups = dense<[[0, 1], "
                   "[2, 3]]> : tensor<2x2xi64>} : (tensor<2xf32>) -> tensor<4xf32>\n"
                   "  return %g : tensor<4xf32>\n}\n";
  assert_int_equal(lm_parse_module(ag, strlen(ag), &po, &m, &err), 0);
  assert_int_equal(lm_program_create(m, &p, &err), 0);
  args[0] = rand_buf(LOOM_DTYPE_F32, 1, d2);
  assert_int_equal(lm_program_run(p, "f", &o, args, 1, res, 1, &err), LOOM_UNSUPPORTED);
  assert_non_null(strstr(err.msg, "stablehlo.all_gather"));
  release_all(args, 1);
  lm_program_destroy(p);
  lm_device_destroy(dev);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* interpreter.run_parallel, and a process that fails while the others wait in a collective: the
 * run fails with that process's error at once (the others are cancelled), not after a timeout. */
static void test_run_parallel_and_failure(void **state) {
  lm_spmd_local_register();
  const char *text =
      "module {\n"
      "  func.func @good(%x: tensor<2xi32>) -> tensor<2xi32> {\n"
      "    %r = \"stablehlo.all_reduce\"(%x) ({\n"
      "    ^bb0(%a: tensor<i32>, %b: tensor<i32>):\n"
      "      %c = stablehlo.add %a, %b : tensor<i32>\n"
      "      stablehlo.return %c : tensor<i32>\n"
      "    }) {replica_groups = dense<[[0, 1, 2]]> : tensor<1x3xi64>} : (tensor<2xi32>) -> tensor<2xi32>\n"
      "    return %r : tensor<2xi32>\n"
      "  }\n"
      "  func.func @bad(%x: tensor<2xi32>) -> tensor<2xi32> {\n"
      "    check.expect_eq_const %x, dense<[7, 7]> : tensor<2xi32>\n"
      "    return %x : tensor<2xi32>\n"
      "  }\n"
      "  func.func @main() -> (tensor<2xi32>, tensor<2xi32>, tensor<2xi32>) {\n"
      "    %a = stablehlo.constant dense<[1, 2]> : tensor<2xi32>\n"
      "    %b = stablehlo.constant dense<[10, 20]> : tensor<2xi32>\n"
      "    %r:3 = \"interpreter.run_parallel\"(%a, %b, %a) {programs = [[@good], [@good], [@PROG]]} :\n"
      "        (tensor<2xi32>, tensor<2xi32>, tensor<2xi32>) -> (tensor<2xi32>, tensor<2xi32>, tensor<2xi32>)\n"
      "    return %r#0, %r#1, %r#2 : tensor<2xi32>, tensor<2xi32>, tensor<2xi32>\n"
      "  }\n"
      "}\n";
  for (int bad = 0; bad < 2; bad++) {
    char buf[4096];
    const char *at = strstr(text, "@PROG");
    snprintf(buf, sizeof buf, "%.*s@%s%s", (int)(at - text), text, bad ? "bad" : "good", at + 5);
    lm_module *m;
    lm_err err;
    lm_parse_opts po = {0};
    assert_int_equal(lm_parse_module(buf, strlen(buf), &po, &m, &err), 0);
    lm_program *p;
    if (lm_program_create(m, &p, &err) < 0) fail_msg("%s", err.msg);
    lm_device *dev = lm_device_create(1 << 24);
    lm_buffer *r[3] = {0};
    lm_run_opts o = {.device = dev};
    double t0 = now_s();
    int rc = lm_program_run(p, "main", &o, NULL, 0, r, 3, &err);
    double dt = now_s() - t0;
    if (!bad) {
      if (rc < 0) fail_msg("%s", err.msg);
      for (int i = 0; i < 3; i++) {
        int32_t *v = r[i]->data;
        assert_int_equal(v[0], 12);
        assert_int_equal(v[1], 24);
      }
    } else {
      assert_int_equal(rc, LOOM_CHECK_FAILED);
      assert_non_null(strstr(err.msg, "process 2 (replica 2, partition 0) @bad"));
      assert_true(dt < 10.0);
    }
    release_all(r, 3);
    assert_int_equal(lm_device_used(dev), 0);
    lm_program_destroy(p);
    lm_device_destroy(dev);
  }
}

/* lm_spmd_coll's own checks and tag layout. */
static void test_spmd_coll_api(void **state) {
  assert_int_equal(lm_spmd_coll_tag(5, 3), (5ull << 24) | 3);
  assert_int_equal(lm_spmd_coll_tag(5, (1ull << 24) + 3), (5ull << 24) | 3);
  lm_dp_config c;
  lm_dp_config_init(&c);
  c.self_id = 7;
  c.num_devices = 2;
  c.progress_thread = 0;
  lm_dp *dp;
  lm_err err;
  assert_int_equal(lm_dp_create(&c, &dp, &err), 0);
  lm_spmd_coll *sc = NULL;
  lm_dp_member dup[2] = {{7, 0}, {7, 0}}, ok[2] = {{7, 0}, {7, 1}};
  assert_int_equal(lm_spmd_coll_create(dp, dup, 2, 1, &sc, &err), LOOM_INVALID_ARGUMENT);
  assert_int_equal(lm_spmd_coll_create(dp, ok, 0, 1, &sc, &err), LOOM_INVALID_ARGUMENT);
  assert_int_equal(lm_spmd_coll_create(dp, ok, 2, 1ull << 40, &sc, &err), LOOM_INVALID_ARGUMENT);
  assert_int_equal(lm_spmd_coll_create(dp, ok, 2, 9, &sc, &err), 0);
  lm_run_opts o = {0};
  lm_spmd_coll_opts(sc, &o);
  assert_non_null(o.coll);
  assert_ptr_equal(o.coll_user, sc);
  lm_spmd_coll_destroy(sc);
  lm_spmd_coll_destroy(NULL);
  lm_dp_destroy(dp);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_all_reduce_every_dtype),
      cmocka_unit_test(test_all_reduce_custom_bodies),
      cmocka_unit_test(test_all_reduce_deterministic),
      cmocka_unit_test(test_all_gather),
      cmocka_unit_test(test_reduce_scatter),
      cmocka_unit_test(test_all_to_all),
      cmocka_unit_test(test_collective_permute),
      cmocka_unit_test(test_collective_broadcast),
      cmocka_unit_test(test_reduce_to_root_and_legacy_sum),
      cmocka_unit_test(test_collectives_in_while),
      cmocka_unit_test(test_group_errors),
      cmocka_unit_test(test_without_hooks),
      cmocka_unit_test(test_hook_view),
      cmocka_unit_test(test_run_parallel_and_failure),
      cmocka_unit_test(test_spmd_coll_api),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
