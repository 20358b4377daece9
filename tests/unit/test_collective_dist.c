/* Collectives across worker processes: real worker processes forked from the test (data-plane
 * harness, shared memory / CMA between them), each running its devices' SPMD processes on one
 * thread per device through lm_spmd_coll, as a worker does for a launch. Covers groups whose
 * members are spread over workers both contiguously and interleaved, scrambled group orders, an
 * order-sensitive custom reduction body, every collective against the spec's definition, two
 * launches back to back with their own tags, and bitwise equality of a float sum on every member
 * of every worker within a launch. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include "dataplane_harness.h"
#include "exec/exec.h"
#include "hlo/parse.h"
#include "worker/spmd_coll.h"

#define NW 2         /* workers */
#define ND 2         /* devices per worker */
#define NP (NW * ND) /* SPMD processes (replicas) */

static const char *g_text =
    "func.func @main(%x: tensor<4x2xi32>, %f: tensor<256xf32>) -> (tensor<4x2xi32>, tensor<4x2xi32>, tensor<4x4xi32>,\n"
    "    tensor<1x2xi32>, tensor<1x8xi32>, tensor<4x2xi32>, tensor<4x2xi32>, tensor<256xf32>) {\n"
    "  %sum = \"stablehlo.all_reduce\"(%x) ({\n"
    "  ^bb0(%a: tensor<i32>, %b: tensor<i32>):\n"
    "    %c = stablehlo.add %a, %b : tensor<i32>\n"
    "    stablehlo.return %c : tensor<i32>\n"
    "  }) {replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>} : (tensor<4x2xi32>) -> tensor<4x2xi32>\n"
    "  %first = \"stablehlo.all_reduce\"(%x) ({\n"
    "  ^bb0(%a: tensor<i32>, %b: tensor<i32>):\n"
    "    %z = stablehlo.constant dense<0> : tensor<i32>\n"
    "    %nz = stablehlo.compare NE, %a, %z : (tensor<i32>, tensor<i32>) -> tensor<i1>\n"
    "    %c = stablehlo.select %nz, %a, %b : tensor<i1>, tensor<i32>\n"
    "    stablehlo.return %c : tensor<i32>\n"
    "  }) {replica_groups = dense<[[3, 0, 2, 1]]> : tensor<1x4xi64>} : (tensor<4x2xi32>) -> tensor<4x2xi32>\n"
    "  %gat = \"stablehlo.all_gather\"(%x) {all_gather_dim = 1 : i64, replica_groups = dense<[[1, 3], [0, 2]]> : "
    "tensor<2x2xi64>} : (tensor<4x2xi32>) -> tensor<4x4xi32>\n"
    "  %rs = \"stablehlo.reduce_scatter\"(%x) ({\n"
    "  ^bb0(%a: tensor<i32>, %b: tensor<i32>):\n"
    "    %c = stablehlo.add %a, %b : tensor<i32>\n"
    "    stablehlo.return %c : tensor<i32>\n"
    "  }) {scatter_dimension = 0 : i64, replica_groups = dense<[[2, 0, 3, 1]]> : tensor<1x4xi64>} : "
    "(tensor<4x2xi32>) -> tensor<1x2xi32>\n"
    "  %a2a = \"stablehlo.all_to_all\"(%x) {split_dimension = 0 : i64, concat_dimension = 1 : i64, split_count = 4 : "
    "i64, replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>} : (tensor<4x2xi32>) -> tensor<1x8xi32>\n"
    "  %perm = \"stablehlo.collective_permute\"(%x) {source_target_pairs = dense<[[0, 1], [1, 2], [2, 3], [3, 0]]> : "
    "tensor<4x2xi64>} : (tensor<4x2xi32>) -> tensor<4x2xi32>\n"
    "  %bc = \"stablehlo.collective_broadcast\"(%x) {replica_groups = dense<[[2, 1, 0, 3]]> : tensor<1x4xi64>} : "
    "(tensor<4x2xi32>) -> tensor<4x2xi32>\n"
    "  %fs = \"stablehlo.all_reduce\"(%f) ({\n"
    "  ^bb0(%a: tensor<f32>, %b: tensor<f32>):\n"
    "    %c = stablehlo.add %a, %b : tensor<f32>\n"
    "    stablehlo.return %c : tensor<f32>\n"
    "  }) {replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>} : (tensor<256xf32>) -> tensor<256xf32>\n"
    "  return %sum, %first, %gat, %rs, %a2a, %perm, %bc, %fs : tensor<4x2xi32>, tensor<4x2xi32>, tensor<4x4xi32>,\n"
    "    tensor<1x2xi32>, tensor<1x8xi32>, tensor<4x2xi32>, tensor<4x2xi32>, tensor<256xf32>\n"
    "}\n";

/* Process i's input x (4x2, with zeros) and f (random-looking floats), the same in every child. */
static int32_t xin(int proc, int k) { return ((proc * 7 + k * 3) % 5) - 1; }
static float fin(int proc, int k) {
  uint32_t h = (uint32_t)(proc * 2654435761u) ^ (uint32_t)(k * 40503u + 12345u);
  h ^= h >> 13;
  h *= 0x5bd1e995u;
  h ^= h >> 15;
  return (float)((double)(h % 2000003u) / 997.0 - 1000.0);
}

typedef struct launch {
  const lm_program *prog;
  lm_spmd_coll *coll;
  const lm_dp_member *procs;
  uint64_t tag;
} launch;

typedef struct dev_arg {
  h_worker *w;
  launch *l;
} dev_arg;

static launch *g_launch;

/* The process that runs on (this worker, dev) in launch l. */
static int proc_of(h_worker *w, const launch *l, int dev) {
  for (int i = 0; i < NP; i++)
    if (l->procs[i].worker == H_ID(w->proc) && l->procs[i].device == (uint32_t)dev) return i;
  return -1;
}

static int check_results(int p, lm_buffer **r, h_worker *w) {
  int fails0 = atomic_load(&h_fails);
  int32_t x[NP][8];
  for (int q = 0; q < NP; q++)
    for (int k = 0; k < 8; k++) x[q][k] = xin(q, k);
  const int32_t *sum = r[0]->data, *first = r[1]->data, *gat = r[2]->data, *rs = r[3]->data, *a2a = r[4]->data,
                *perm = r[5]->data, *bc = r[6]->data;
  const int order[4] = {3, 0, 2, 1};
  for (int k = 0; k < 8; k++) {
    int32_t s = 0, f = 0;
    for (int q = 0; q < NP; q++) s += x[q][k];
    for (int j = 0; j < 4 && f == 0; j++) f = x[order[j]][k];
    H_CHECK(sum[k] == s, "process %d: sum[%d] = %d, want %d", p, k, sum[k], s);
    H_CHECK(first[k] == f, "process %d: first[%d] = %d, want %d", p, k, first[k], f);
    H_CHECK(perm[k] == x[(p + 3) % 4][k], "process %d: permute[%d]", p, k);
    H_CHECK(bc[k] == x[2][k], "process %d: broadcast[%d]", p, k);
  }
  /* all_gather along dim 1 in groups [1, 3] and [0, 2]: row i = x[g0][i, :] ++ x[g1][i, :] */
  int g0 = p % 2 ? 1 : 0, g1 = p % 2 ? 3 : 2;
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 4; j++) {
      int32_t want = j < 2 ? x[g0][i * 2 + j] : x[g1][i * 2 + j - 2];
      H_CHECK(gat[i * 4 + j] == want, "process %d: all_gather[%d][%d]", p, i, j);
    }
  /* reduce_scatter in group [2, 0, 3, 1]: member m gets row m of the sum */
  const int rsg[4] = {2, 0, 3, 1};
  int m = 0;
  while (rsg[m] != p) m++;
  for (int j = 0; j < 2; j++) {
    int32_t s = 0;
    for (int q = 0; q < NP; q++) s += x[q][m * 2 + j];
    H_CHECK(rs[j] == s, "process %d: reduce_scatter[%d] = %d, want %d", p, j, rs[j], s);
  }
  /* all_to_all split rows, concat columns: block q (columns 2q, 2q+1) = row p of sender q */
  for (int q = 0; q < NP; q++)
    for (int j = 0; j < 2; j++) H_CHECK(a2a[q * 2 + j] == x[q][p * 2 + j], "process %d: all_to_all[%d]", p, q * 2 + j);
  /* the float sum: close to the exact sum; bitwise equality across members is checked by child 0 */
  const float *fs = r[7]->data;
  for (int k = 0; k < 256; k++) {
    double s = 0;
    for (int q = 0; q < NP; q++) s += fin(q, k);
    H_CHECK(fabs(fs[k] - s) <= 1e-3 * (fabs(s) + 1), "process %d: float sum[%d]", p, k);
  }
  char name[64];
  snprintf(name, sizeof name, "fsum.%llu.%d", (unsigned long long)g_launch->tag, p);
  H_CHECK(h_write_file(w->dir, name, fs, 1024) == 0, "writing %s", name);
  return atomic_load(&h_fails) - fails0;
}

static int run_device(h_worker *w, int dev) {
  launch *l = g_launch;
  int p = proc_of(w, l, dev);
  if (p < 0) return 0;
  lm_device *d = lm_device_create(1 << 24);
  lm_type xt, ft;
  lm_type_tensor(&xt, LOOM_DTYPE_S32, 2, (int64_t[]){4, 2});
  lm_type_tensor(&ft, LOOM_DTYPE_F32, 1, (int64_t[]){256});
  int32_t xv[8];
  float fv[256];
  for (int k = 0; k < 8; k++) xv[k] = xin(p, k);
  for (int k = 0; k < 256; k++) fv[k] = fin(p, k);
  lm_buffer *args[2] = {0}, *res[8] = {0};
  lm_err err;
  lm_buffer_from_data(d, &xt, xv, sizeof xv, &args[0], &err);
  lm_buffer_from_data(d, &ft, fv, sizeof fv, &args[1], &err);
  lm_run_opts o = {.device = d, .replica_id = p, .partition_id = 0, .num_replicas = NP, .num_partitions = 1};
  lm_spmd_coll_opts(l->coll, &o);
  int rc = lm_program_run(l->prog, "main", &o, args, 2, res, 8, &err);
  int fails = 0;
  if (rc < 0) {
    fprintf(stderr, "[worker %d dev %d] process %d: %s\n", w->proc, dev, p, err.msg);
    fails++;
  } else {
    fails += check_results(p, res, w);
  }
  for (int i = 0; i < 8; i++) lm_buffer_release(res[i]);
  lm_buffer_release(args[0]);
  lm_buffer_release(args[1]);
  lm_device_destroy(d);
  return fails;
}

static int body(h_worker *w) {
  lm_module *m;
  lm_err err;
  lm_parse_opts po = {0};
  if (lm_parse_module(g_text, strlen(g_text), &po, &m, &err) < 0) {
    fprintf(stderr, "parse: %s\n", err.msg);
    return 1;
  }
  lm_program *prog;
  if (lm_program_create(m, &prog, &err) < 0) {
    fprintf(stderr, "program: %s\n", err.msg);
    return 1;
  }
  /* launch 1: processes contiguous per worker; launch 2: interleaved over the workers */
  lm_dp_member contiguous[NP], interleaved[NP];
  for (int i = 0; i < NP; i++) {
    contiguous[i] = (lm_dp_member){H_ID(i / ND), (uint32_t)(i % ND)};
    interleaved[i] = (lm_dp_member){H_ID(i % NW), (uint32_t)(i / NW)};
  }
  const lm_dp_member *maps[2] = {contiguous, interleaved};
  int fails = 0;
  for (int li = 0; li < 2; li++) {
    launch l = {.prog = prog, .procs = maps[li], .tag = 1000 + (uint64_t)li};
    if (lm_spmd_coll_create(w->dp, l.procs, NP, l.tag, &l.coll, &err) < 0) {
      fprintf(stderr, "spmd_coll: %s\n", err.msg);
      fails++;
      continue;
    }
    g_launch = &l;
    fails += h_threads(w, w->ndev, run_device);
    lm_spmd_coll_destroy(l.coll);
  }
  /* every member of every worker computed the same float sum in a launch (the order may differ
   * between placements: the data plane groups the built-in reductions by worker) */
  if (w->proc == 0) {
    float ref[256], got[256];
    for (int li = 0; li < 2; li++)
      for (int p = 0; p < NP; p++) {
        char name[64];
        snprintf(name, sizeof name, "fsum.%d.%d", 1000 + li, p);
        long n = h_read_file(w->dir, name, got, sizeof got, 30);
        H_CHECK(n == 1024, "reading %s", name);
        if (p == 0) memcpy(ref, got, sizeof ref);
        else H_CHECK(memcmp(ref, got, sizeof ref) == 0, "float sum of launch %d process %d differs bitwise", li, p);
      }
  }
  lm_program_destroy(prog);
  return fails;
}

static void test_collectives_across_workers(void **state) {
  h_opts o = {.nproc = NW, .ndev = ND, .body = body, .deadline_s = 90};
  assert_int_equal(h_run(&o), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_collectives_across_workers),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
