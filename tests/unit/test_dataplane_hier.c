/* Hierarchical all_reduce (and all_gather) against the flat one, on real worker processes (forked, each with its
 * own endpoint; "hosts" and "slices" are labels given to the endpoints, so 4 processes on one
 * machine form 2 hosts x 2 workers, 3 + 1, 4 x 1, or 2 slices). For every layout the flat
 * cluster runs first and writes its results; the hierarchical cluster then checks its own:
 * int32 sum and max bitwise equal, f32 sum within rounding of the flat result and of an exact
 * (double) reference, every member and every repetition bitwise alike, and the scratch the
 * endpoint kept no larger than two segments (the flat algorithm keeps 2P-1). */
#define _GNU_SOURCE
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include "dataplane_harness.h"
#include "dataplane/dp_internal.h" /* the endpoint's scratch, for the bound */

typedef struct layout {
  const char *name;
  int ndev;
  const char *hosts[4];
  const char *slices[4];      /* NULL entries: no slices */
} layout;

typedef struct run_arg {
  const layout *l;
  const char *dir;            /* where the flat run's results go */
  int hier;                   /* 0: flat run (writes), 1: hierarchical run (checks) */
} run_arg;

/* sizes in elements: tiny, odd, at and past the 16 KiB recursive-doubling threshold (int32 /
 * f32), several segments, 6 MiB */
static const size_t sizes[] = {1, 7, 4096, 4097, 40000, 1572864};
enum { NSIZES = sizeof sizes / sizeof sizes[0] };
enum { C_I32_SUM, C_I32_MAX, C_F32_SUM, NCASES };

static uint64_t rng_next(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return *s >> 11;
}

/* input element i of member r for a case */
static void fill(int kase, uint32_t r, size_t count, void *out) {
  uint64_t s = 0x9e3779b97f4a7c15ull * (r + 1) + (uint64_t)kase * 7919;
  if (kase == C_F32_SUM) {
    float *f = out;
    for (size_t i = 0; i < count; i++)
      f[i] = (float)((double)rng_next(&s) / 9007199254740992.0 * 2e3 - 1e3) * (i % 5 ? 1.f : 1e-5f);
  } else {
    int32_t *x = out;
    for (size_t i = 0; i < count; i++) x[i] = (int32_t)(uint32_t)(rng_next(&s) >> 7); /* full range: sums wrap */
  }
}

static int hier_dev(h_worker *w, int dev) {
  run_arg *a = w->arg;
  uint32_t n = (uint32_t)(w->nproc * w->ndev), r = (uint32_t)(w->proc * w->ndev + dev);
  lm_dp_member m[16];
  for (uint32_t i = 0; i < n; i++) m[i] = (lm_dp_member){H_ID(i / w->ndev), i % (uint32_t)w->ndev};
  lm_dp_group *g;
  lm_err e;
  if (lm_dp_group_get(w->dp, m, n, &g, &e) < 0) {
    H_CHECK(0, "group: %s", e.msg);
    return 1;
  }
  uint64_t tag = 0;
  for (int kase = 0; kase < NCASES; kase++)
    for (int si = 0; si < NSIZES; si++) {
      size_t c = sizes[si], nb = c * 4;
      uint8_t *in = malloc(nb), *out = malloc(nb), *first = malloc(nb), *flat = a->hier ? malloc(nb) : NULL;
      fill(kase, r, c, in);
      lm_dp_reduction red = {.dtype = kase == C_F32_SUM ? LOOM_DTYPE_F32 : LOOM_DTYPE_S32,
                             .op = kase == C_I32_MAX ? LM_DP_MAX : LM_DP_SUM};
      for (int rep = 0; rep < 2; rep++) {
        /* in place every other time */
        int rc;
        if (rep == 1) {
          memcpy(out, in, nb);
          rc = lm_dp_all_reduce(g, r, ++tag, out, out, c, &red, NULL, &e);
        } else {
          rc = lm_dp_all_reduce(g, r, ++tag, in, out, c, &red, NULL, &e);
        }
        H_CHECK(rc == 0, "%s case %d size %zu: %s", a->l->name, kase, c, e.msg);
        if (rc) goto next;
        if (rep == 0) memcpy(first, out, nb);
        else H_CHECK(memcmp(first, out, nb) == 0, "%s case %d size %zu: repetition differs", a->l->name, kase, c);
      }
      char name[64];
      snprintf(name, sizeof name, "res.%d.%zu.%u", kase, c, r);
      if (!a->hier) {
        H_CHECK(h_write_file(a->dir, name, out, nb) == 0, "writing %s", name);
        goto next;
      }
      /* every member's flat result, against this member's hierarchical one */
      for (uint32_t q = 0; q < n; q++) {
        snprintf(name, sizeof name, "res.%d.%zu.%u", kase, c, q);
        long got = h_read_file(a->dir, name, flat, nb, 1);
        H_CHECK(got == (long)nb, "reading the flat result %s (%ld bytes)", name, got);
        if (got != (long)nb) goto next;
        if (kase != C_F32_SUM) {
          H_CHECK(memcmp(flat, out, nb) == 0, "%s: int32 %s size %zu: hierarchical differs from flat (member %u)",
                  a->l->name, kase == C_I32_MAX ? "max" : "sum", c, q);
          continue;
        }
        /* floats: the sums are in another order; both within rounding of the exact sum */
        if (q > 0) continue; /* every flat member holds the same bits (tested elsewhere) */
        float *hf = (float *)out, *ff = (float *)flat, *x = malloc(nb);
        double *sum = calloc(c, sizeof *sum), *abs_ = calloc(c, sizeof *abs_);
        for (uint32_t p = 0; p < n; p++) {
          fill(kase, p, c, x);
          for (size_t i = 0; i < c; i++) {
            sum[i] += x[i];
            abs_[i] += fabs(x[i]);
          }
        }
        int bad = 0;
        for (size_t i = 0; i < c && bad < 3; i++) {
          double tol = 2.0 * n * 6e-8 * abs_[i] + 1e-30;
          if (fabs(hf[i] - sum[i]) > tol || fabs(hf[i] - ff[i]) > 2 * tol) {
            H_CHECK(0, "%s: f32 sum size %zu elem %zu: hierarchical %.9g, flat %.9g, exact %.9g", a->l->name, c, i,
                    hf[i], ff[i], sum[i]);
            bad++;
          }
        }
        free(x);
        free(sum);
        free(abs_);
      }
    next:
      free(in);
      free(out);
      free(first);
      free(flat);
    }
  /* all_gather (hierarchical in the second run): every member gets every rank's block, exactly */
  static const size_t gsizes[] = {1, 1000, 300000};
  for (size_t si = 0; si < sizeof gsizes / sizeof gsizes[0]; si++) {
    size_t nb = gsizes[si];
    uint8_t *in = malloc(nb), *out = malloc(nb * n);
    for (size_t i = 0; i < nb; i++) in[i] = (uint8_t)(r * 37 + i * 13 + si);
    for (int rep = 0; rep < 2; rep++) {
      memset(out, 0xee, nb * n);
      int rc = lm_dp_all_gather(g, r, ++tag, in, out, nb, NULL, &e);
      H_CHECK(rc == 0, "%s all_gather size %zu: %s", a->l->name, nb, e.msg);
      if (rc) break;
      int bad = 0;
      for (uint32_t q = 0; q < n && !bad; q++)
        for (size_t i = 0; i < nb && !bad; i++)
          if (out[q * nb + i] != (uint8_t)(q * 37 + i * 13 + si)) {
            H_CHECK(0, "%s all_gather size %zu (%s): member %u's block wrong at byte %zu", a->l->name, nb,
                    a->hier ? "hierarchical" : "flat", q, i);
            bad = 1;
          }
    }
    free(in);
    free(out);
  }
  lm_dp_group_release(g);
  return 0;
}

static int hier_body(h_worker *w) {
  int fails = h_threads(w, w->ndev, hier_dev);
  run_arg *a = w->arg;
  if (a->hier) {
    /* bounded scratch: at most two segments (or the recursive-doubling buffer), whatever P */
    size_t cap = 0, bound = 2 * w->dp->seg_bytes > w->dp->rd_max ? 2 * w->dp->seg_bytes : w->dp->rd_max;
    for (int i = 0; i < DP_SCRATCH_SLOTS; i++)
      if (w->dp->scratch[i].cap > cap) cap = w->dp->scratch[i].cap;
    H_CHECK(cap <= bound, "%s: the endpoint kept %zu bytes of scratch (bound %zu)", a->l->name, cap, bound);
  }
  return fails;
}

static void run_layout(const layout *l) {
  char dir[] = "/tmp/loom-dphier-XXXXXX";
  assert_non_null(mkdtemp(dir));
  run_arg fa = {.l = l, .dir = dir, .hier = 0}, ha = {.l = l, .dir = dir, .hier = 1};
  h_opts o = {.nproc = 4, .ndev = l->ndev, .body = hier_body, .hosts = l->hosts,
              .slices = l->slices[0] ? l->slices : NULL, .coll = LM_DP_COLL_FLAT, .arg = &fa, .deadline_s = 100};
  int fails = h_run(&o);
  if (fails == 0) {
    o.coll = LM_DP_COLL_HIER;
    o.arg = &ha;
    fails = h_run(&o);
  }
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  assert_int_equal(fails, 0);
}

static void test_hosts_2x2(void **state) {
  static const layout l = {"2x2", 1, {"a", "a", "b", "b"}, {0}};
  run_layout(&l);
}

static void test_hosts_2x2_interleaved_2dev(void **state) {
  /* the hosts' workers are not adjacent in the group, and each worker has two devices */
  static const layout l = {"2x2 interleaved x 2 devices", 2, {"a", "b", "a", "b"}, {0}};
  run_layout(&l);
}

static void test_hosts_3_1(void **state) {
  static const layout l = {"3+1", 1, {"a", "a", "a", "b"}, {0}};
  run_layout(&l);
}

static void test_hosts_4x1(void **state) {
  static const layout l = {"4x1", 1, {"a", "b", "c", "d"}, {0}};
  run_layout(&l);
}

static void test_slices(void **state) {
  /* slice x: hosts h0 and h1; slice y: host h2 with two workers */
  static const layout l = {"2 slices", 1, {"h0", "h1", "h2", "h2"}, {"x", "x", "y", "y"}};
  run_layout(&l);
}

/* A worker configured flat among hierarchical ones: a clear error, not mixed messages. */
static int mixed_body(h_worker *w) {
  lm_dp_group *g = h_full_group(w);
  lm_err e;
  int32_t x[100] = {0}, y[100];
  lm_dp_reduction red = {.dtype = LOOM_DTYPE_S32, .op = LM_DP_SUM};
  lm_dp_call call = {.struct_size = sizeof call, .timeout_ms = 3000};
  int rc = lm_dp_all_reduce(g, (uint32_t)w->proc, 1, x, y, 100, &red, &call, &e);
  H_CHECK(rc != 0, "a flat worker among hierarchical ones: the call succeeded");
  lm_dp_group_release(g);
  return 0;
}

static void test_mixed_config_fails(void **state) {
  static const char *const hosts[] = {"a", "a", "b", "b"};
  static const int colls[] = {LM_DP_COLL_HIER, LM_DP_COLL_HIER, LM_DP_COLL_HIER, LM_DP_COLL_FLAT};
  h_opts o = {.nproc = 4, .ndev = 1, .body = mixed_body, .hosts = hosts, .colls = colls, .deadline_s = 30};
  assert_int_equal(h_run(&o), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_hosts_2x2), cmocka_unit_test(test_hosts_2x2_interleaved_2dev),
      cmocka_unit_test(test_hosts_3_1), cmocka_unit_test(test_hosts_4x1),
      cmocka_unit_test(test_slices),    cmocka_unit_test(test_mixed_config_fails),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
