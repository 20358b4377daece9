/* Data plane across real processes: every collective against a reference computed here (all
 * element types for all_reduce, sizes 0/1/odd/large, subset and interleaved groups, several
 * calls in flight), bitwise determinism, point-to-point and one-sided transfers, and faults: a
 * killed peer, a peer that never comes, a mismatched call, malformed messages. */
#define _GNU_SOURCE
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/mman.h>
#include <cmocka.h>
#include "common/half.h"
#include <fcntl.h>
#include <sys/resource.h>
#include "dataplane_harness.h"
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include "dataplane/dp_internal.h" /* wire constants, for the malformed-message test */

/* ---- reference values and reductions (independent of src/dataplane/reduce.c) ---- */

/* Input element i of group rank r for (dtype, op), as a double pair (re, im); small integers,
 * so every reduction is exact in every type. */
static void ref_value(int r, size_t i, lm_dtype dt, lm_dp_op op, double *re, double *im) {
  long a = (long)r, b = (long)(i % 1000);
  *im = 0;
  switch (op) {
  case LM_DP_SUM: *re = (double)((a * 7 + b * 3) % 11) - (lm_dtype_is_uint(dt) ? 0 : 5); break;
  case LM_DP_PROD:
    *re = 1 + (double)((a + b) % 2);
    if (!lm_dtype_is_uint(dt) && (a + b) % 3 == 0) *re = -*re;
    break;
  case LM_DP_MIN:
  case LM_DP_MAX: *re = (double)((a * 37 + b * 11) % 101) - (lm_dtype_is_uint(dt) ? 0 : 50); break;
  default: *re = (double)((a * 29 + b * 17) & 0x7f); break;
  }
  if (dt == LOOM_DTYPE_PRED) *re = ((a + b) % 3) != 0;
  if (lm_dtype_is_complex(dt)) {
    if (op == LM_DP_PROD) {
      static const double z[4][2] = {{1, 0}, {0, 1}, {1, 1}, {-1, 0}};
      *re = z[(a + b) % 4][0];
      *im = z[(a + b) % 4][1];
    } else if (op == LM_DP_SUM) {
      *re = (double)((a + b) % 5) - 2;
      *im = (double)((a * 3 + b) % 7) - 3;
    } else {
      *re = (double)((a + b) % 3); /* ties in the real part test the imaginary tie-break */
      *im = (double)((a * 5 + b * 2) % 7) - 3;
    }
  }
}

static void ref_store(lm_dtype dt, void *p, size_t i, double re, double im) {
  switch (dt) {
  case LOOM_DTYPE_PRED: ((uint8_t *)p)[i] = re != 0; break;
  case LOOM_DTYPE_S8: ((int8_t *)p)[i] = (int8_t)re; break;
  case LOOM_DTYPE_S16: ((int16_t *)p)[i] = (int16_t)re; break;
  case LOOM_DTYPE_S32: ((int32_t *)p)[i] = (int32_t)re; break;
  case LOOM_DTYPE_S64: ((int64_t *)p)[i] = (int64_t)re; break;
  case LOOM_DTYPE_U8: ((uint8_t *)p)[i] = (uint8_t)re; break;
  case LOOM_DTYPE_U16: ((uint16_t *)p)[i] = (uint16_t)re; break;
  case LOOM_DTYPE_U32: ((uint32_t *)p)[i] = (uint32_t)re; break;
  case LOOM_DTYPE_U64: ((uint64_t *)p)[i] = (uint64_t)re; break;
  case LOOM_DTYPE_F16: ((uint16_t *)p)[i] = lm_f32_to_f16((float)re); break;
  case LOOM_DTYPE_BF16: ((uint16_t *)p)[i] = lm_f32_to_bf16((float)re); break;
  case LOOM_DTYPE_F32: ((float *)p)[i] = (float)re; break;
  case LOOM_DTYPE_F64: ((double *)p)[i] = re; break;
  case LOOM_DTYPE_C64: ((float *)p)[2 * i] = (float)re, ((float *)p)[2 * i + 1] = (float)im; break;
  case LOOM_DTYPE_C128: ((double *)p)[2 * i] = re, ((double *)p)[2 * i + 1] = im; break;
  default: break;
  }
}

/* acc = acc op x, exact on the small values above. */
static void ref_combine(lm_dtype dt, lm_dp_op op, double *ar, double *ai, double xr, double xi) {
  if (dt == LOOM_DTYPE_PRED) {
    bool a = *ar != 0, x = xr != 0;
    *ar = (op == LM_DP_SUM || op == LM_DP_MAX || op == LM_DP_OR) ? (a || x)
          : (op == LM_DP_XOR)                                    ? (a != x)
                                                                 : (a && x);
    return;
  }
  if (lm_dtype_is_complex(dt)) {
    if (op == LM_DP_SUM) *ar += xr, *ai += xi;
    else if (op == LM_DP_PROD) {
      double r = *ar * xr - *ai * xi, i = *ar * xi + *ai * xr;
      *ar = r, *ai = i;
    } else {
      bool less = xr < *ar || (xr == *ar && xi < *ai), eq = xr == *ar && xi == *ai;
      if (!eq && ((op == LM_DP_MIN) == less)) *ar = xr, *ai = xi;
    }
    return;
  }
  switch (op) {
  case LM_DP_SUM: *ar += xr; break;
  case LM_DP_PROD: *ar *= xr; break;
  case LM_DP_MIN: *ar = xr < *ar ? xr : *ar; break;
  case LM_DP_MAX: *ar = xr > *ar ? xr : *ar; break;
  case LM_DP_AND: *ar = (double)((long)*ar & (long)xr); break;
  case LM_DP_OR: *ar = (double)((long)*ar | (long)xr); break;
  default: *ar = (double)((long)*ar ^ (long)xr); break;
  }
}

static bool op_supported(lm_dtype dt, lm_dp_op op) {
  bool bitwise = op == LM_DP_AND || op == LM_DP_OR || op == LM_DP_XOR;
  return !(bitwise && (lm_dtype_is_float(dt) || lm_dtype_is_complex(dt)));
}

/* ---- all_reduce over every dtype and op ---- */

static const size_t ar_sizes[] = {0, 1, 7, 300, 5000};

static int ar_dtypes_dev(h_worker *w, int dev) {
  lm_dp_group *g = h_full_group(w);
  if (!g) return 1;
  uint32_t n = lm_dp_group_size(g), rank = (uint32_t)(w->proc * w->ndev + dev);
  uint64_t tag = 0;
  lm_err e;
  for (int dt = 1; dt < LOOM_DTYPE_COUNT; dt++)
    for (int op = LM_DP_SUM; op <= LM_DP_XOR; op++)
      for (size_t si = 0; si < sizeof ar_sizes / sizeof *ar_sizes; si++) {
        size_t count = ar_sizes[si], esz = lm_dtype_size(dt);
        if (count > 300 && dt != LOOM_DTYPE_F32 && dt != LOOM_DTYPE_S32 && dt != LOOM_DTYPE_BF16) continue;
        uint8_t *in = calloc(count + 1, esz), *out = calloc(count + 1, esz), *ref = calloc(count + 1, esz);
        for (size_t i = 0; i < count; i++) {
          double re, im;
          ref_value((int)rank, i, dt, op, &re, &im);
          ref_store(dt, in, i, re, im);
          double ar, ai;
          ref_value(0, i, dt, op, &ar, &ai);
          for (uint32_t r = 1; r < n; r++) {
            ref_value((int)r, i, dt, op, &re, &im);
            ref_combine(dt, op, &ar, &ai, re, im);
          }
          ref_store(dt, ref, i, ar, ai);
        }
        lm_dp_reduction red = {.dtype = dt, .op = op};
        /* half the calls in place */
        void *dst = (si & 1) ? in : out;
        int rc = lm_dp_all_reduce(g, rank, ++tag, in, dst, count, &red, NULL, &e);
        if (!op_supported(dt, op)) {
          H_CHECK(rc == LOOM_UNSUPPORTED, "%s %d: rc %d", lm_dtype_name(dt), op, rc);
        } else {
          H_CHECK(rc == 0, "%s op %d count %zu: %s", lm_dtype_name(dt), op, count, e.msg);
          if (rc == 0 && count && memcmp(dst, ref, count * esz) != 0) {
            size_t bad = 0;
            while (bad < count * esz && ((uint8_t *)dst)[bad] == ref[bad]) bad++;
            H_CHECK(0, "%s op %d count %zu: wrong result (first bad byte %zu)", lm_dtype_name(dt), op, count, bad);
          }
        }
        free(in);
        free(out);
        free(ref);
      }
  lm_dp_group_release(g);
  return 0;
}

static int ar_dtypes_body(h_worker *w) { return h_threads(w, w->ndev, ar_dtypes_dev); }

static void test_all_reduce_dtypes(void **state) {
  /* 3 workers (not a power of two) x 2 devices: the hierarchical path with every step */
  h_opts o = {.nproc = 3, .ndev = 2, .body = ar_dtypes_body};
  assert_int_equal(h_run(&o), 0);
}

static void test_all_reduce_dtypes_tcp(void **state) {
  /* the same over TCP only, with peer-failure handling on: what two hosts would use */
  h_opts o = {.nproc = 2, .ndev = 1, .body = ar_dtypes_body, .tls = "tcp", .peer_errors = 1};
  assert_int_equal(h_run(&o), 0);
}

/* ---- every collective on several groups ---- */

typedef struct grp {
  lm_dp_member m[32];
  uint32_t n;
} grp;

/* Groups over P workers x D devices: full, reversed, interleaved (non-contiguous per worker),
 * a subset of workers, one worker, one member. */
static int make_groups(h_worker *w, grp *gs) {
  int P = w->nproc, D = w->ndev, k = 0;
  grp *g = &gs[k++];
  g->n = 0;
  for (int p = 0; p < P; p++)
    for (int d = 0; d < D; d++) g->m[g->n++] = (lm_dp_member){H_ID(p), (uint32_t)d};
  g = &gs[k++];
  g->n = 0;
  for (int p = P - 1; p >= 0; p--)
    for (int d = D - 1; d >= 0; d--) g->m[g->n++] = (lm_dp_member){H_ID(p), (uint32_t)d};
  g = &gs[k++];
  g->n = 0;
  for (int d = 0; d < D; d++)
    for (int p = 0; p < P; p++) g->m[g->n++] = (lm_dp_member){H_ID(p), (uint32_t)d};
  g = &gs[k++];
  g->n = 0;
  for (int p = 0; p < P; p += 2)
    for (int d = 0; d < D; d++) g->m[g->n++] = (lm_dp_member){H_ID(p), (uint32_t)d};
  g = &gs[k++];
  g->n = 0;
  for (int d = D - 1; d >= 0; d--) g->m[g->n++] = (lm_dp_member){H_ID(P - 1), (uint32_t)d};
  g = &gs[k++];
  g->n = 1;
  g->m[0] = (lm_dp_member){H_ID(1), 0};
  return k;
}

static uint32_t val32(uint32_t rank, size_t i, uint32_t salt) { return rank * 1000003u + (uint32_t)i * 7919u + salt; }

/* affine maps x -> m x + c (mod 2^32) packed as (m << 32 | c); composition is associative and
 * not commutative: a custom reduction whose result shows the order of its leaves */
static int affine_combine(void *user, const void *lhs, const void *rhs, void *out, size_t count, lm_err *err) {
  const uint64_t *a = lhs, *b = rhs;
  uint64_t *o = out;
  (void)user;
  (void)err;
  for (size_t i = 0; i < count; i++) {
    uint32_t ma = (uint32_t)(a[i] >> 32), ca = (uint32_t)a[i], mb = (uint32_t)(b[i] >> 32), cb = (uint32_t)b[i];
    o[i] = ((uint64_t)(mb * ma) << 32) | (uint32_t)(mb * ca + cb); /* apply a, then b */
  }
  return 0;
}

static uint64_t affine_val(uint32_t rank, size_t i) {
  return ((uint64_t)(2 * (rank + (uint32_t)i) + 1) << 32) | (uint32_t)(rank * 31 + i + 5);
}

static const size_t coll_sizes[] = {0, 1, 13, 4099, 40000};

static int coll_dev(h_worker *w, int dev) {
  grp gs[8];
  int ng = make_groups(w, gs);
  lm_err e;
  uint64_t tag = 0;
  int fails = 0;
  for (int gi = 0; gi < ng; gi++) {
    grp *G = &gs[gi];
    int64_t me = -1;
    for (uint32_t i = 0; i < G->n; i++)
      if (G->m[i].worker == H_ID(w->proc) && G->m[i].device == (uint32_t)dev) me = i;
    if (me < 0) continue;
    lm_dp_group *g;
    if (lm_dp_group_get(w->dp, G->m, G->n, &g, &e) < 0) {
      H_CHECK(0, "group %d: %s", gi, e.msg);
      return 1;
    }
    uint32_t n = G->n, r = (uint32_t)me;
    for (size_t si = 0; si < sizeof coll_sizes / sizeof *coll_sizes; si++) {
      size_t c = coll_sizes[si]; /* elements of u32 per block */
      size_t B = c * 4;
      uint32_t *snd = malloc(n * B + 4), *rcv = malloc(n * B + 4), *ref = malloc(n * B + 4);
      /* all_gather */
      for (size_t i = 0; i < c; i++) snd[i] = val32(r, i, 1);
      memset(rcv, 0xee, n * B);
      int rc = lm_dp_all_gather(g, r, ++tag, snd, rcv, B, NULL, &e);
      H_CHECK(rc == 0, "all_gather g%d c%zu: %s", gi, c, e.msg);
      for (uint32_t j = 0; j < n && rc == 0; j++)
        for (size_t i = 0; i < c; i++)
          if (rcv[j * c + i] != val32(j, i, 1)) {
            H_CHECK(0, "all_gather g%d c%zu: block %u elem %zu", gi, c, j, i);
            j = n;
            break;
          }
      /* reduce_scatter (u32 sum, wrapping) */
      for (uint32_t j = 0; j < n; j++)
        for (size_t i = 0; i < c; i++) snd[j * c + i] = val32(r, j * c + i, 2);
      lm_dp_reduction sum = {.dtype = LOOM_DTYPE_U32, .op = LM_DP_SUM};
      rc = lm_dp_reduce_scatter(g, r, ++tag, snd, rcv, c, &sum, NULL, &e);
      H_CHECK(rc == 0, "reduce_scatter g%d c%zu: %s", gi, c, e.msg);
      for (size_t i = 0; i < c && rc == 0; i++) {
        uint32_t want = 0;
        for (uint32_t q = 0; q < n; q++) want += val32(q, r * c + i, 2);
        if (rcv[i] != want) {
          H_CHECK(0, "reduce_scatter g%d c%zu: elem %zu = %u, want %u", gi, c, i, rcv[i], want);
          break;
        }
      }
      /* all_to_all */
      for (uint32_t j = 0; j < n; j++)
        for (size_t i = 0; i < c; i++) snd[j * c + i] = val32(r, j * c + i, 3);
      rc = lm_dp_all_to_all(g, r, ++tag, snd, rcv, B, NULL, &e);
      H_CHECK(rc == 0, "all_to_all g%d c%zu: %s", gi, c, e.msg);
      for (uint32_t j = 0; j < n && rc == 0; j++)
        for (size_t i = 0; i < c; i++)
          if (rcv[j * c + i] != val32(j, r * c + i, 3)) {
            H_CHECK(0, "all_to_all g%d c%zu: block %u elem %zu", gi, c, j, i);
            j = n;
            break;
          }
      /* collective_permute: shift by one (in place on odd sizes), member 0 gets no data
       * when shifting by two over an odd group */
      for (int shift = 1; shift <= 2; shift++) {
        int64_t to = ((int64_t)r + shift) % n, from = ((int64_t)r + n - shift) % n;
        if (shift == 2 && n % 2 == 1) {
          if (r == n - 2 || n == 1) to = -1;
          if (r == 0) from = -1;
        }
        if (n == 1) to = from = shift == 1 ? 0 : -1;
        for (size_t i = 0; i < c; i++) snd[i] = val32(r, i, 4);
        void *out = (si & 1) ? (void *)snd : (void *)rcv;
        rc = lm_dp_collective_permute(g, r, ++tag, snd, out, B, to, from, NULL, &e);
        H_CHECK(rc == 0, "permute g%d c%zu shift %d: %s", gi, c, shift, e.msg);
        for (size_t i = 0; i < c && rc == 0; i++) {
          uint32_t want = from < 0 ? 0 : val32((uint32_t)from, i, 4);
          if (((uint32_t *)out)[i] != want) {
            H_CHECK(0, "permute g%d c%zu shift %d: elem %zu = %u, want %u", gi, c, shift, i, ((uint32_t *)out)[i],
                    want);
            break;
          }
        }
      }
      /* collective_broadcast from member 0 (the spec's source) and from the last member */
      for (int k = 0; k < 2; k++) {
        uint32_t root = k ? n - 1 : 0;
        for (size_t i = 0; i < c; i++) snd[i] = val32(r, i, 5);
        memset(rcv, 0, B);
        void *out = (r == root && k) ? (void *)snd : (void *)rcv;
        rc = lm_dp_broadcast(g, r, ++tag, root, r == root ? snd : NULL, out, B, NULL, &e);
        H_CHECK(rc == 0, "broadcast g%d c%zu root %u: %s", gi, c, root, e.msg);
        for (size_t i = 0; i < c && rc == 0; i++)
          if (((uint32_t *)out)[i] != val32(root, i, 5)) {
            H_CHECK(0, "broadcast g%d c%zu root %u: elem %zu", gi, c, root, i);
            break;
          }
      }
      /* all_reduce with a custom, non-commutative reduction: the result must be the left fold
       * in group order (any tree with that in-order traversal gives the same) */
      uint64_t *a64 = malloc(c * 8 + 8), *o64 = malloc(c * 8 + 8);
      for (size_t i = 0; i < c; i++) a64[i] = affine_val(r, i);
      lm_dp_reduction aff = {.dtype = LOOM_DTYPE_U64, .op = LM_DP_CUSTOM, .combine = affine_combine};
      rc = lm_dp_all_reduce(g, r, ++tag, a64, o64, c, &aff, NULL, &e);
      H_CHECK(rc == 0, "custom all_reduce g%d c%zu: %s", gi, c, e.msg);
      for (size_t i = 0; i < c && rc == 0; i++) {
        uint64_t acc = affine_val(0, i);
        for (uint32_t q = 1; q < n; q++) {
          uint64_t x = affine_val(q, i);
          affine_combine(NULL, &acc, &x, &acc, 1, NULL);
        }
        if (o64[i] != acc) {
          H_CHECK(0, "custom all_reduce g%d c%zu: elem %zu out of order", gi, c, i);
          break;
        }
      }
      /* the same through reduce_scatter */
      {
        uint64_t *s64 = malloc(n * c * 8 + 8);
        for (size_t i = 0; i < n * c; i++) s64[i] = affine_val(r, i);
        rc = lm_dp_reduce_scatter(g, r, ++tag, s64, o64, c, &aff, NULL, &e);
        H_CHECK(rc == 0, "custom reduce_scatter g%d c%zu: %s", gi, c, e.msg);
        for (size_t i = 0; i < c && rc == 0; i++) {
          uint64_t acc = affine_val(0, r * c + i);
          for (uint32_t q = 1; q < n; q++) {
            uint64_t x = affine_val(q, r * c + i);
            affine_combine(NULL, &acc, &x, &acc, 1, NULL);
          }
          if (o64[i] != acc) {
            H_CHECK(0, "custom reduce_scatter g%d c%zu: elem %zu out of order", gi, c, i);
            break;
          }
        }
        free(s64);
      }
      rc = lm_dp_barrier(g, r, ++tag, NULL, &e);
      H_CHECK(rc == 0, "barrier g%d: %s", gi, e.msg);
      free(a64);
      free(o64);
      free(snd);
      free(rcv);
      free(ref);
    }
    lm_dp_group_release(g);
  }
  return fails;
}

static int coll_body(h_worker *w) { return h_threads(w, w->ndev, coll_dev); }

static void test_collectives(void **state) {
  h_opts o = {.nproc = 3, .ndev = 2, .body = coll_body};
  assert_int_equal(h_run(&o), 0);
}

static void test_collectives_2x4(void **state) {
  /* the cluster shape: 2 workers x 4 devices */
  h_opts o = {.nproc = 2, .ndev = 4, .body = coll_body};
  assert_int_equal(h_run(&o), 0);
}

static void test_collectives_4x1(void **state) {
  h_opts o = {.nproc = 4, .ndev = 1, .body = coll_body};
  assert_int_equal(h_run(&o), 0);
}

/* ---- several collectives in flight on overlapping groups ---- */

static int inflight_thread(h_worker *w, int t) {
  /* thread t = stream (t / ndev) of device (t % ndev); stream 0 uses the full group, stream 1
   * the same members in reverse order; both run at once with overlapping tags */
  int dev = t % w->ndev, stream = t / w->ndev;
  grp gs[8];
  make_groups(w, gs);
  grp *G = &gs[stream];
  uint32_t r = 0;
  for (uint32_t i = 0; i < G->n; i++)
    if (G->m[i].worker == H_ID(w->proc) && G->m[i].device == (uint32_t)dev) r = i;
  lm_dp_group *g;
  lm_err e;
  if (lm_dp_group_get(w->dp, G->m, G->n, &g, &e) < 0) return 1;
  uint32_t n = G->n;
  lm_dp_reduction sum = {.dtype = LOOM_DTYPE_S64, .op = LM_DP_SUM};
  for (int it = 0; it < 60; it++) {
    size_t c = (it % 3 == 0) ? 3000 : 1 + (size_t)it;
    int64_t *a = malloc(c * 8), *b = malloc(c * 8);
    for (size_t i = 0; i < c; i++) a[i] = (int64_t)(r + 1) * (it + 1) + (int64_t)i * (stream + 1);
    int rc = lm_dp_all_reduce(g, r, (uint64_t)it, a, b, c, &sum, NULL, &e);
    H_CHECK(rc == 0, "stream %d it %d: %s", stream, it, e.msg);
    for (size_t i = 0; i < c && rc == 0; i++) {
      int64_t want = (int64_t)n * (n + 1) / 2 * (it + 1) + (int64_t)n * (int64_t)i * (stream + 1);
      if (b[i] != want) {
        H_CHECK(0, "stream %d it %d elem %zu: %" PRId64 " want %" PRId64, stream, it, i, b[i], want);
        break;
      }
    }
    free(a);
    free(b);
  }
  lm_dp_group_release(g);
  return 0;
}

static int inflight_body(h_worker *w) { return h_threads(w, 2 * w->ndev, inflight_thread); }

static void test_in_flight(void **state) {
  h_opts o = {.nproc = 2, .ndev = 2, .body = inflight_body};
  assert_int_equal(h_run(&o), 0);
}

/* ---- a slow member: the others block instead of spinning ---- */

#include <sys/resource.h>

static int slow_dev(h_worker *w, int dev) {
  lm_dp_group *g = h_full_group(w);
  uint32_t r = (uint32_t)(w->proc * w->ndev + dev);
  lm_err e;
  lm_dp_reduction sum = {.dtype = LOOM_DTYPE_S64, .op = LM_DP_SUM};
  int64_t a = r + 1, b = 0;
  struct rusage r0, r1;
  getrusage(RUSAGE_THREAD, &r0);
  double t0 = h_now();
  for (int it = 0; it < 3; it++) {
    if (w->proc == 1 && dev == 1) usleep(300000); /* this device is busy computing */
    int rc = lm_dp_all_reduce(g, r, (uint64_t)it, &a, &b, 1, &sum, NULL, &e);
    H_CHECK(rc == 0 && b == 10, "rc %d b %" PRId64 ": %s", rc, b, e.msg);
  }
  double wall = h_now() - t0;
  getrusage(RUSAGE_THREAD, &r1);
  double cpu = (r1.ru_utime.tv_sec - r0.ru_utime.tv_sec) + (r1.ru_stime.tv_sec - r0.ru_stime.tv_sec) +
               1e-6 * ((r1.ru_utime.tv_usec - r0.ru_utime.tv_usec) + (r1.ru_stime.tv_usec - r0.ru_stime.tv_usec));
  if (!(w->proc == 1 && dev == 1))
    H_CHECK(cpu < 0.5 * wall, "waiting for a slow member used %.2f s of CPU in %.2f s", cpu, wall);
  lm_dp_group_release(g);
  return 0;
}

static int slow_body(h_worker *w) {
  int fails = h_threads(w, w->ndev, slow_dev);
  lm_dp_stats st;
  lm_dp_get_stats(w->dp, &st);
  if (w->proc == 0) H_CHECK(st.blocks > 0, "never blocked");
  return fails;
}

static void test_slow_member(void **state) {
  h_opts o = {.nproc = 2, .ndev = 2, .body = slow_body};
  assert_int_equal(h_run(&o), 0);
}

/* ---- determinism ---- */

static uint64_t hash_bytes(const void *p, size_t n) {
  const uint8_t *b = p;
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

static int determinism_dev(h_worker *w, int dev) {
  lm_dp_group *g = h_full_group(w);
  uint32_t n = lm_dp_group_size(g), r = (uint32_t)(w->proc * w->ndev + dev);
  lm_err e;
  uint64_t tag = 0;
  const size_t sizes[] = {1000, 300000};
  for (int s = 0; s < 2; s++) {
    size_t c = sizes[s];
    float *a = malloc(c * 4), *b = malloc(c * 4), *first = malloc(c * 4);
    uint64_t seed = 0x9e3779b97f4a7c15ull * (r + 1);
    for (size_t i = 0; i < c; i++) {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      a[i] = (float)((double)(seed >> 11) / 9007199254740992.0 * 2e3 - 1e3) * (i % 7 ? 1.f : 1e-6f);
    }
    lm_dp_reduction sum = {.dtype = LOOM_DTYPE_F32, .op = LM_DP_SUM};
    for (int rep = 0; rep < 3; rep++) {
      int rc = lm_dp_all_reduce(g, r, ++tag, a, b, c, &sum, NULL, &e);
      H_CHECK(rc == 0, "all_reduce: %s", e.msg);
      if (rep == 0) memcpy(first, b, c * 4);
      else H_CHECK(memcmp(first, b, c * 4) == 0, "size %zu: repetition %d differs bitwise", c, rep);
    }
    /* every member holds the same bits, and so does every run (the parent compares) */
    uint64_t h = hash_bytes(b, c * 4), *hs = calloc(n, 8);
    if (w->arg && r == 0) {
      FILE *f = fopen((const char *)w->arg, "a");
      if (f) {
        fprintf(f, "%u %zu %016" PRIx64 "\n", n, c, h);
        fclose(f);
      }
    }
    int rc = lm_dp_all_gather(g, r, ++tag, &h, hs, 8, NULL, &e);
    H_CHECK(rc == 0, "all_gather: %s", e.msg);
    for (uint32_t j = 0; j < n && rc == 0; j++) H_CHECK(hs[j] == h, "size %zu: member %u's result differs", c, j);
    /* and it is the sum (up to rounding) */
    double *d = calloc(c, sizeof *d);
    for (uint32_t q = 0; q < n; q++) {
      uint64_t sd = 0x9e3779b97f4a7c15ull * (q + 1);
      for (size_t i = 0; i < c; i++) {
        sd = sd * 6364136223846793005ull + 1442695040888963407ull;
        d[i] += (float)((double)(sd >> 11) / 9007199254740992.0 * 2e3 - 1e3) * (i % 7 ? 1.f : 1e-6f);
      }
    }
    for (size_t i = 0; i < c; i++)
      if (fabs(d[i] - b[i]) > 1e-3 * (1 + fabs(d[i]))) {
        H_CHECK(0, "size %zu elem %zu: %g, want %g", c, i, b[i], d[i]);
        break;
      }
    free(d);
    free(hs);
    free(a);
    free(b);
    free(first);
  }
  lm_dp_group_release(g);
  return 0;
}

static int determinism_body(h_worker *w) {
  int fails = h_threads(w, w->ndev, determinism_dev);
  /* across runs too: the result hash goes to a file the parent compares */
  return fails;
}

static void test_determinism(void **state) {
  /* two clusters of each shape, started separately: the result hashes must agree */
  char path[] = "/tmp/loom-dpdet-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  for (int rep = 0; rep < 2; rep++) {
    h_opts o = {.nproc = 4, .ndev = 1, .body = determinism_body, .arg = path};
    assert_int_equal(h_run(&o), 0);
    h_opts o2 = {.nproc = 2, .ndev = 3, .body = determinism_body, .arg = path};
    assert_int_equal(h_run(&o2), 0);
  }
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  char lines[16][64];
  int nl = 0;
  while (nl < 16 && fgets(lines[nl], sizeof lines[nl], f)) nl++;
  fclose(f);
  unlink(path);
  assert_int_equal(nl, 8); /* 2 runs x 2 shapes x 2 sizes */
  for (int i = 0; i < 4; i++) assert_string_equal(lines[i], lines[i + 4]);
}

/* ---- point to point and one-sided ---- */

static int p2p_body(h_worker *w) {
  lm_err e;
  uint64_t peer = H_ID(1 - w->proc);
  const size_t sizes[] = {0, 1, 100, 70000, 3u << 20};
  int fails = 0;
  for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
    size_t n = sizes[s];
    uint8_t *a = malloc(n + 1), *b = malloc(n + 1);
    for (size_t i = 0; i < n; i++) a[i] = (uint8_t)(i * 7 + w->proc);
    /* both send and receive at once; receives posted in the reverse tag order */
    lm_dp_req *r1, *r2, *sx;
    uint8_t small = 0, one = (uint8_t)(40 + w->proc);
    H_CHECK(lm_dp_irecv(w->dp, peer, 2 * s + 1, &small, 1, &r2, &e) == 0, "%s", e.msg);
    H_CHECK(lm_dp_irecv(w->dp, peer, 2 * s, b, n, &r1, &e) == 0, "%s", e.msg);
    H_CHECK(lm_dp_isend(w->dp, peer, 2 * s, a, n, &sx, &e) == 0, "%s", e.msg);
    H_CHECK(lm_dp_send(w->dp, peer, 2 * s + 1, &one, 1, NULL, &e) == 0, "%s", e.msg);
    H_CHECK(lm_dp_wait(w->dp, sx, NULL, &e) == 0, "%s", e.msg);
    H_CHECK(lm_dp_wait(w->dp, r1, NULL, &e) == 0, "%s", e.msg);
    H_CHECK(lm_dp_wait(w->dp, r2, NULL, &e) == 0, "%s", e.msg);
    H_CHECK(small == 40 + (1 - w->proc), "tagged message mixed up: %u", small);
    for (size_t i = 0; i < n; i++)
      if (b[i] != (uint8_t)(i * 7 + (1 - w->proc))) {
        H_CHECK(0, "p2p %zu bytes: byte %zu wrong", n, i);
        break;
      }
    free(a);
    free(b);
  }
  /* a length mismatch is an error for the receiver, not a crash or a hang */
  uint8_t buf[64] = {0};
  if (w->proc == 0) {
    H_CHECK(lm_dp_send(w->dp, peer, 1000, buf, 10, NULL, &e) == 0, "%s", e.msg);
  } else {
    int rc = lm_dp_recv(w->dp, peer, 1000, buf, 12, NULL, &e);
    H_CHECK(rc == LOOM_PROTOCOL && strstr(e.msg, "10 bytes") && strstr(e.msg, "expected 12"), "rc %d: %s", rc, e.msg);
  }
  /* one-sided: each registers a region; the other puts into it and gets it back */
  size_t R = 1u << 20;
  uint8_t *region = calloc(1, R), *loc = malloc(R), *back = malloc(R);
  lm_dp_mem *mem;
  H_CHECK(lm_dp_mem_register(w->dp, region, R, &mem, &e) == 0, "%s", e.msg);
  const void *blob;
  size_t blen;
  lm_dp_mem_blob(mem, &blob, &blen);
  char name[32];
  snprintf(name, sizeof name, "mem.%d", w->proc);
  h_write_file(w->dir, name, blob, blen);
  uint8_t pb[4096];
  snprintf(name, sizeof name, "mem.%d", 1 - w->proc);
  long pl = h_read_file(w->dir, name, pb, sizeof pb, 20);
  H_CHECK(pl > 0, "no memory blob from the peer");
  for (size_t i = 0; i < R; i++) loc[i] = (uint8_t)(i * 13 + w->proc);
  size_t off = 1000 + 17 * w->proc, len = 300000;
  H_CHECK(lm_dp_put(w->dp, peer, pb, (size_t)pl, off, loc, len, NULL, &e) == 0, "put: %s", e.msg);
  memset(back, 0, R);
  H_CHECK(lm_dp_get(w->dp, peer, pb, (size_t)pl, off, back, len, NULL, &e) == 0, "get: %s", e.msg);
  H_CHECK(memcmp(back, loc, len) == 0, "get did not return what put wrote");
  /* bounds and ownership are checked before anything moves */
  int rc = lm_dp_put(w->dp, peer, pb, (size_t)pl, R - 10, loc, 11, NULL, &e);
  H_CHECK(rc == LOOM_INVALID_ARGUMENT && strstr(e.msg, "outside"), "rc %d: %s", rc, e.msg);
  rc = lm_dp_get(w->dp, peer, pb, (size_t)pl, UINT64_MAX - 2, back, 8, NULL, &e);
  H_CHECK(rc == LOOM_INVALID_ARGUMENT, "rc %d: %s", rc, e.msg);
  rc = lm_dp_get(w->dp, H_ID(w->proc), pb, (size_t)pl, 0, back, 8, NULL, &e);
  H_CHECK(rc == LOOM_INVALID_ARGUMENT && strstr(e.msg, "belongs to"), "rc %d: %s", rc, e.msg);
  rc = lm_dp_get(w->dp, peer, pb, 20, 0, back, 8, NULL, &e);
  H_CHECK(rc == LOOM_PROTOCOL, "rc %d: %s", rc, e.msg);
  /* wait until the peer has used our region before dropping it */
  uint8_t x = 1;
  H_CHECK(lm_dp_send(w->dp, peer, 5000, &x, 1, NULL, &e) == 0, "%s", e.msg);
  H_CHECK(lm_dp_recv(w->dp, peer, 5000, &x, 1, NULL, &e) == 0, "%s", e.msg);
  /* the peer's put landed in our region */
  for (size_t i = 0; i < len; i++) {
    size_t poff = 1000 + 17 * (1 - w->proc);
    if (region[poff + i] != (uint8_t)(i * 13 + (1 - w->proc))) {
      H_CHECK(0, "region byte %zu not what the peer put", i);
      break;
    }
  }
  lm_dp_mem_deregister(mem);
  free(region);
  free(loc);
  free(back);
  return fails;
}

/* ---- a failed connect is tried again after a backoff (a worker briefly out of descriptors) ---- */

static int reconnect_body(h_worker *w) {
  lm_err e;
  uint64_t peer = H_ID(1 - w->proc);
  int fails = 0;
  uint8_t x = 7;
  if (w->proc == 0) {
    int lowest = 0; /* the lowest free descriptor: with the limit there, no new one can be made */
    while (fcntl(lowest, F_GETFD) != -1) lowest++;
    struct rlimit old, low;
    getrlimit(RLIMIT_NOFILE, &old);
    low = old;
    low.rlim_cur = (rlim_t)lowest;
    setrlimit(RLIMIT_NOFILE, &low);
    int rc = lm_dp_send(w->dp, peer, 1, &x, 1, NULL, &e);
    setrlimit(RLIMIT_NOFILE, &old);
    H_CHECK(rc == LOOM_CONNECT && strstr(e.msg, "cannot connect"), "out of descriptors: rc %d: %s", rc, e.msg);
    rc = lm_dp_send(w->dp, peer, 1, &x, 1, NULL, &e); /* within the backoff: refused at once, saying when */
    H_CHECK(rc == LOOM_CONNECT && strstr(e.msg, "trying again after 100 ms"), "rc %d: %s", rc, e.msg);
    usleep(200000);
    rc = lm_dp_send(w->dp, peer, 2, &x, 1, NULL, &e); /* descriptors are back: it connects */
    H_CHECK(rc == 0, "after the backoff: rc %d: %s", rc, e.msg);
  } else {
    uint8_t y = 0;
    int rc = lm_dp_recv(w->dp, peer, 2, &y, 1, NULL, &e);
    H_CHECK(rc == 0 && y == 7, "rc %d: %s", rc, e.msg);
  }
  return fails;
}

static void test_reconnect_after_failed_connect(void **state) {
  h_opts o = {.nproc = 2, .ndev = 1, .body = reconnect_body, .tls = "tcp", .peer_errors = 1};
  assert_int_equal(h_run(&o), 0);
}

static void test_p2p(void **state) {
  h_opts o = {.nproc = 2, .ndev = 1, .body = p2p_body};
  assert_int_equal(h_run(&o), 0);
}

static void test_p2p_tcp(void **state) {
  h_opts o = {.nproc = 2, .ndev = 1, .body = p2p_body, .tls = "tcp", .peer_errors = 1};
  assert_int_equal(h_run(&o), 0);
}

/* ---- faults ---- */

#define VICTIM 2

/* All workers loop over all_reduce (small and rendezvous-sized); the parent kills VICTIM
 * once everyone has done a few; the others must fail within a bounded time, naming it. */
static int killed_body(h_worker *w) {
  lm_dp_group *g = h_full_group(w);
  uint32_t r = (uint32_t)w->proc;
  lm_err e;
  size_t big = 1 << 18;
  float *a = calloc(big, 4), *b = calloc(big, 4);
  lm_dp_reduction sum = {.dtype = LOOM_DTYPE_F32, .op = LM_DP_SUM};
  lm_dp_call call = {.struct_size = sizeof call, .timeout_ms = 60000};
  double t_fail = 0;
  int rc = 0;
  for (uint64_t it = 0;; it++) {
    if (it == 20) {
      char name[32];
      snprintf(name, sizeof name, "ready.%d", w->proc);
      h_write_file(w->dir, name, "1", 1);
    }
    double t0 = h_now();
    rc = lm_dp_all_reduce(g, r, it, a, b, (it % 2) ? big : 3, &sum, &call, &e);
    if (rc) {
      t_fail = h_now() - t0;
      break;
    }
    if (it > 2000000) break;
  }
  char victim[64];
  snprintf(victim, sizeof victim, "worker %d", (int)H_ID(VICTIM));
  H_CHECK(rc == LOOM_WORKER_LOST || rc == LOOM_CANCELLED, "rc %d: %s", rc, e.msg);
  H_CHECK(strstr(e.msg, victim) != NULL, "error does not name %s: %s", victim, e.msg);
  H_CHECK(t_fail < 10.0, "took %.1f s to notice", t_fail);
  fprintf(stderr, "[worker %d] after the kill: %s (%.2f s)\n", (int)H_ID(w->proc), e.msg, t_fail);
  /* the endpoint still works between the survivors */
  lm_dp_member m[2] = {{H_ID(0), 0}, {H_ID(1), 0}};
  lm_dp_group *g2;
  H_CHECK(lm_dp_group_get(w->dp, m, 2, &g2, &e) == 0, "%s", e.msg);
  float x = 1, y = 0;
  H_CHECK(lm_dp_all_reduce(g2, r, 1ull << 40, &x, &y, 1, &sum, NULL, &e) == 0, "survivors: %s", e.msg);
  H_CHECK(y == 2, "survivors' sum %g", y);
  lm_dp_group_release(g2);
  lm_dp_group_release(g);
  free(a);
  free(b);
  return 0;
}

static int killed_parent(pid_t *pids, int n, const char *dir, void *arg) {
  char buf[4];
  for (int i = 0; i < n; i++) {
    char name[32];
    snprintf(name, sizeof name, "ready.%d", i);
    if (h_read_file(dir, name, buf, sizeof buf, 60) < 0) {
      fprintf(stderr, "killed_parent: worker %d never got ready\n", i);
      return 1;
    }
  }
  usleep(20000);
  kill(pids[VICTIM], SIGKILL);
  return 0;
}

static int killed_survivors_body(h_worker *w) {
  if (w->proc == VICTIM) {
    /* the victim runs the same loop until it is killed */
    killed_body(w);
    _exit(0);
  }
  return killed_body(w);
}

static void test_killed_peer(void **state) {
  h_opts o = {.nproc = 3, .ndev = 1, .body = killed_survivors_body, .parent = killed_parent,
              .expect_killed = 1u << VICTIM};
  assert_int_equal(h_run(&o), 0);
}

static void test_killed_peer_tcp(void **state) {
  h_opts o = {.nproc = 3, .ndev = 1, .body = killed_survivors_body, .parent = killed_parent,
              .expect_killed = 1u << VICTIM, .tls = "tcp", .peer_errors = 1};
  assert_int_equal(h_run(&o), 0);
}

/* A peer that never joins: the call times out naming it; a mismatched call fails at once. */
static int timeout_body(h_worker *w) {
  lm_dp_group *g = h_full_group(w);
  uint32_t r = (uint32_t)w->proc;
  lm_err e;
  int32_t a[16] = {1}, b[16];
  lm_dp_reduction sum = {.dtype = LOOM_DTYPE_S32, .op = LM_DP_SUM};
  if (w->proc == 0) {
    lm_dp_call call = {.struct_size = sizeof call, .timeout_ms = 300};
    double t0 = h_now();
    int rc = lm_dp_all_reduce(g, r, 1, a, b, 4, &sum, &call, &e);
    double dt = h_now() - t0;
    H_CHECK(rc == LOOM_TIMEOUT, "rc %d: %s", rc, e.msg);
    H_CHECK(strstr(e.msg, "worker 11") != NULL, "does not name the missing worker: %s", e.msg);
    H_CHECK(dt < 5, "took %.1f s", dt);
  }
  /* both: tag 2 with different counts */
  double t0 = h_now();
  int rc = lm_dp_all_reduce(g, r, 2, a, b, w->proc == 0 ? 4 : 5, &sum, NULL, &e);
  H_CHECK(rc == LOOM_PROTOCOL || rc == LOOM_CANCELLED, "rc %d: %s", rc, e.msg);
  H_CHECK(strstr(e.msg, "different call") != NULL, "%s", e.msg);
  H_CHECK(h_now() - t0 < 5, "mismatch took %.1f s", h_now() - t0);
  /* and the pair still works afterwards */
  rc = lm_dp_all_reduce(g, r, 3, a, b, 4, &sum, NULL, &e);
  H_CHECK(rc == 0 && b[0] == 2, "rc %d b0 %d: %s", rc, b[0], e.msg);
  lm_dp_group_release(g);
  return 0;
}

static void test_timeout_and_mismatch(void **state) {
  h_opts o = {.nproc = 2, .ndev = 1, .body = timeout_body};
  assert_int_equal(h_run(&o), 0);
}

/* Worker 1 sends malformed active messages straight through UCX; worker 0 must drop them,
 * count them and keep serving. */
static void raw_send(ucp_worker_h wk, ucp_ep_h ep, const void *hdr, size_t hlen, const void *data, size_t len,
                     uint32_t flags) {
  ucp_request_param_t prm;
  memset(&prm, 0, sizeof prm);
  prm.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  prm.flags = flags;
  void *st = ucp_am_send_nbx(ep, DP_AM_ID, hdr, hlen, data, len, &prm);
  if (st == NULL || UCS_PTR_IS_ERR(st)) return;
  double t0 = h_now();
  while (ucp_request_check_status(st) == UCS_INPROGRESS && h_now() - t0 < 1) ucp_worker_progress(wk);
  ucp_request_free(st);
}

/* A UCX endpoint to worker 0 that bypasses Loom's data plane (for hostile messages). */
static int raw_connect(h_worker *w, ucp_context_h *ctx, ucp_worker_h *wk, ucp_ep_h *ep) {
  uint8_t blob[65536];
  long n = h_read_file(w->dir, "addr.0", blob, sizeof blob, 10);
  ucp_params_t p = {.field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_AM};
  ucp_worker_params_t wp = {0};
  H_CHECK(ucp_init(&p, NULL, ctx) == UCS_OK, "ucp_init");
  H_CHECK(ucp_worker_create(*ctx, &wp, wk) == UCS_OK, "worker");
  ucp_ep_params_t ep_p = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS,
                          .address = (const ucp_address_t *)(blob + DP_ADDR_HDR)};
  if (n <= DP_ADDR_HDR || ucp_ep_create(*wk, &ep_p, ep) != UCS_OK) {
    H_CHECK(0, "cannot reach worker 0 with raw UCX");
    return -1;
  }
  return 0;
}

static void raw_close(ucp_context_h ctx, ucp_worker_h wk, ucp_ep_h ep) {
  ucp_request_param_t cp = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS, .flags = UCP_EP_CLOSE_FLAG_FORCE};
  void *cr = ucp_ep_close_nbx(ep, &cp);
  if (cr && !UCS_PTR_IS_ERR(cr)) {
    while (ucp_request_check_status(cr) == UCS_INPROGRESS) ucp_worker_progress(wk);
    ucp_request_free(cr);
  }
  ucp_worker_destroy(wk);
  ucp_cleanup(ctx);
}

static int malformed_body(h_worker *w) {
  lm_err e;
  uint64_t peer = H_ID(1 - w->proc);
  uint8_t x = 0;
  if (w->proc == 1) {
    ucp_context_h ctx;
    ucp_worker_h wk;
    ucp_ep_h ep;
    if (raw_connect(w, &ctx, &wk, &ep) < 0) return 1;
    uint8_t hdr[DP_HDR_SIZE + 8];
    static uint8_t big[1 << 20];
    memset(hdr, 0, sizeof hdr);
    raw_send(wk, ep, hdr, 10, "abc", 3, 0);                       /* short header */
    raw_send(wk, ep, hdr, DP_HDR_SIZE, "abc", 3, 0);              /* bad magic */
    dp_put32(hdr, DP_MAGIC);
    hdr[4] = DP_VERSION;
    hdr[5] = 9;
    raw_send(wk, ep, hdr, DP_HDR_SIZE, "abc", 3, 0);              /* unknown kind */
    hdr[5] = DP_KIND_ABORT;
    raw_send(wk, ep, hdr, DP_HDR_SIZE, big, 4096, 0);             /* oversized abort */
    hdr[4] = 77;
    raw_send(wk, ep, hdr, DP_HDR_SIZE, big, sizeof big, UCP_AM_SEND_FLAG_RNDV); /* bad, rendezvous */
    raw_send(wk, ep, hdr, DP_HDR_SIZE + 8, big, 100, 0);          /* long header */
    /* a well-formed point-to-point message with the wrong length for worker 0's receive */
    memset(hdr, 0, sizeof hdr);
    dp_put32(hdr, DP_MAGIC);
    hdr[4] = DP_VERSION;
    hdr[5] = DP_KIND_P2P;
    dp_put64(hdr + 8, H_ID(1));
    dp_put64(hdr + 16, 77);
    raw_send(wk, ep, hdr, DP_HDR_SIZE, big, 5, 0);
    /* ... and a huge one for a receive nobody posts, by rendezvous */
    dp_put64(hdr + 16, 78);
    raw_send(wk, ep, hdr, DP_HDR_SIZE, big, sizeof big, UCP_AM_SEND_FLAG_RNDV);
    raw_close(ctx, wk, ep);
    H_CHECK(lm_dp_send(w->dp, peer, 1, &x, 1, NULL, &e) == 0, "%s", e.msg);
    H_CHECK(lm_dp_recv(w->dp, peer, 2, &x, 1, NULL, &e) == 0, "%s", e.msg);
  } else {
    uint8_t buf[16];
    lm_dp_call call = {.struct_size = sizeof call, .timeout_ms = 20000};
    int rc = lm_dp_recv(w->dp, peer, 77, buf, 4, &call, &e);
    H_CHECK(rc == LOOM_PROTOCOL, "rc %d: %s", rc, e.msg);
    H_CHECK(lm_dp_recv(w->dp, peer, 1, &x, 1, NULL, &e) == 0, "%s", e.msg);
    lm_dp_stats st;
    lm_dp_get_stats(w->dp, &st);
    H_CHECK(st.dropped >= 5, "dropped %" PRIu64, st.dropped);
    H_CHECK(lm_dp_send(w->dp, peer, 2, &x, 1, NULL, &e) == 0, "%s", e.msg);
  }
  return 0;
}

static void test_malformed_messages(void **state) {
  h_opts o = {.nproc = 2, .ndev = 1, .body = malformed_body};
  assert_int_equal(h_run(&o), 0);
}

/* Keyed endpoints (as under a controller): worker 2 knows only its own pair keys. It sends
 * worker 0 messages claiming to come from worker 1, for the tag worker 0 is about to receive
 * from worker 1 on, with a forged MAC, no MAC, and a MAC under its own key with worker 0. Worker
 * 0 must drop all three (counted as forged) and get worker 1's real message, and all_reduce
 * among the three must still be exact. */
static int spoof_body(h_worker *w) {
  lm_err e;
  uint8_t x = 0;
  if (w->proc == 2) {
    ucp_context_h ctx;
    ucp_worker_h wk;
    ucp_ep_h ep;
    if (raw_connect(w, &ctx, &wk, &ep) < 0) return 1;
    uint8_t hdr[DP_HDR_SIZE], forged[8] = {6, 6, 6, 6, 6, 6, 6, 6};
    memset(hdr, 0, sizeof hdr);
    dp_put32(hdr, DP_MAGIC);
    hdr[4] = DP_VERSION;
    hdr[5] = DP_KIND_P2P;
    dp_put64(hdr + 8, H_ID(1)); /* "from worker 1" */
    dp_put64(hdr + 16, 5);
    raw_send(wk, ep, hdr, DP_HDR_SIZE, forged, sizeof forged, 0); /* no MAC */
    memset(hdr + DP_MAC_OFF, 0x77, DP_MAC_SIZE);
    raw_send(wk, ep, hdr, DP_HDR_SIZE, forged, sizeof forged, 0); /* a made-up MAC */
    dp_peer self = {0};             /* a MAC under the key worker 2 does have (with worker 0) */
    uint8_t k02[LM_DP_KEY_SIZE];
    h_pair_key(0, 2, k02);
    EVP_MAC *sip = EVP_MAC_fetch(NULL, "SIPHASH", NULL);
    size_t tag = DP_MAC_SIZE;
    OSSL_PARAM prm[] = {OSSL_PARAM_construct_size_t(OSSL_MAC_PARAM_SIZE, &tag), OSSL_PARAM_construct_end()};
    self.mac = EVP_MAC_CTX_new(sip);
    H_CHECK(self.mac && EVP_MAC_init(self.mac, k02, sizeof k02, prm), "siphash");
    dp_mac_put_locked(&self, hdr);
    raw_send(wk, ep, hdr, DP_HDR_SIZE, forged, sizeof forged, 0);
    EVP_MAC_CTX_free(self.mac);
    EVP_MAC_free(sip);
    raw_close(ctx, wk, ep);
    h_write_file(w->dir, "spoofed", "1", 1);
  } else if (w->proc == 1) {
    char b[4];
    H_CHECK(h_read_file(w->dir, "spoofed", b, sizeof b, 30) >= 0, "worker 2 never spoofed");
    usleep(200000); /* let the forgeries arrive first */
    uint64_t real = 0x0102030405060708ull;
    H_CHECK(lm_dp_send(w->dp, H_ID(0), 5, &real, sizeof real, NULL, &e) == 0, "%s", e.msg);
  } else {
    uint64_t got = 0;
    H_CHECK(lm_dp_recv(w->dp, H_ID(1), 5, &got, sizeof got, NULL, &e) == 0, "%s", e.msg);
    H_CHECK(got == 0x0102030405060708ull, "worker 0 took a forged message: %016" PRIx64, got);
    lm_dp_stats st;
    lm_dp_get_stats(w->dp, &st);
    H_CHECK(st.forged >= 3, "forged %" PRIu64 " (dropped %" PRIu64 ")", st.forged, st.dropped);
  }
  /* the three together, keyed */
  lm_dp_group *g = h_full_group(w);
  int32_t a[4] = {w->proc + 1, 2, 3, 4}, b[4];
  lm_dp_reduction sum = {.dtype = LOOM_DTYPE_S32, .op = LM_DP_SUM};
  H_CHECK(lm_dp_all_reduce(g, (uint32_t)w->proc, 9, a, b, 4, &sum, NULL, &e) == 0, "%s", e.msg);
  H_CHECK(b[0] == 6 && b[1] == 6 && b[3] == 12, "sum %d %d %d", b[0], b[1], b[3]);
  lm_dp_group_release(g);
  (void)x;
  return 0;
}

/* A keyed worker 0 learns of worker 1 only after worker 1's first message arrived (the controller's
 * PEERS messages to the two can arrive in either order): the message waits unverified and is
 * taken once the key is known. Worker 2 first sends a forgery of it (claiming worker 1, a made-up
 * MAC), which arrives earlier and must be dropped when the real one is taken. */
static int late_peer_body(h_worker *w) {
  lm_err e;
  char b[4];
  uint64_t real = 0x1122334455667788ull, got = 0;
  if (w->proc == 2) {
    ucp_context_h ctx;
    ucp_worker_h wk;
    ucp_ep_h ep;
    if (raw_connect(w, &ctx, &wk, &ep) < 0) return 1;
    uint8_t hdr[DP_HDR_SIZE], forged[8] = {9, 9, 9, 9, 9, 9, 9, 9};
    memset(hdr, 0, sizeof hdr);
    dp_put32(hdr, DP_MAGIC);
    hdr[4] = DP_VERSION;
    hdr[5] = DP_KIND_P2P;
    dp_put64(hdr + 8, H_ID(1));
    dp_put64(hdr + 16, 5);
    memset(hdr + DP_MAC_OFF, 0x42, DP_MAC_SIZE);
    raw_send(wk, ep, hdr, DP_HDR_SIZE, forged, sizeof forged, 0);
    raw_close(ctx, wk, ep);
    h_write_file(w->dir, "spoofed", "1", 1);
  } else if (w->proc == 1) {
    H_CHECK(h_read_file(w->dir, "spoofed", b, sizeof b, 30) >= 0, "worker 2 never spoofed");
    H_CHECK(lm_dp_send(w->dp, H_ID(0), 5, &real, sizeof real, NULL, &e) == 0, "%s", e.msg);
    h_write_file(w->dir, "sent", "1", 1);
  } else {
    H_CHECK(h_read_file(w->dir, "sent", b, sizeof b, 30) >= 0, "worker 1 never sent");
    usleep(200000); /* both messages are here, from a sender this endpoint does not know yet */
    H_CHECK(h_add_peer(w, 1) == 0, "adding worker 1 late");
    H_CHECK(lm_dp_recv(w->dp, H_ID(1), 5, &got, sizeof got, NULL, &e) == 0, "%s", e.msg);
    H_CHECK(got == real, "worker 0 took %016" PRIx64 ", not worker 1's message", got);
    lm_dp_stats st;
    lm_dp_get_stats(w->dp, &st);
    H_CHECK(st.forged >= 1, "forged %" PRIu64, st.forged);
  }
  return 0;
}

static void test_late_peer_keeps_its_early_message(void **state) {
  h_opts o = {.nproc = 3, .ndev = 1, .body = late_peer_body, .keyed = 1, .late_peer = 1};
  assert_int_equal(h_run(&o), 0);
}

static void test_spoofed_sender(void **state) {
  h_opts o = {.nproc = 3, .ndev = 1, .body = spoof_body, .keyed = 1};
  assert_int_equal(h_run(&o), 0);
}

/* ---- a call that ends while its transfer is under way ----
 *
 * Worker 0 sends 32 MiB to worker 1, which the parent has frozen with SIGSTOP; the send times
 * out. When lm_dp_send returns, UCX must hold nothing of the buffer, since the caller frees it
 * at once (here with munmap, so a late read or write would fault). Over TCP with peer errors
 * (another host) the frozen worker is cut off: the call returns within its timeout and the
 * grace period. On this host (shared memory) it cannot be cut off safely, so the call waits
 * until the frozen worker is let go and finishes the transfer, which then arrives intact. */

#define AB_LEN ((size_t)32 << 20)

typedef struct {
  int remote; /* 1: TCP with peer errors */
} ab_arg;

static int abandon_body(h_worker *w) {
  const ab_arg *a = w->arg;
  lm_err e;
  uint8_t x = 1;
  char buf[8];
  if (w->proc == 0) {
    /* connect first, so that the transfer below is the only thing that can be held */
    for (int p = 1; p <= 2; p++) {
      H_CHECK(lm_dp_send(w->dp, H_ID(p), 1, &x, 1, NULL, &e) == 0, "%s", e.msg);
      H_CHECK(lm_dp_recv(w->dp, H_ID(p), 2, &x, 1, NULL, &e) == 0, "%s", e.msg);
    }
    H_CHECK(h_read_file(w->dir, "stopped", buf, sizeof buf, 30) >= 0, "never stopped");
    uint8_t *big = mmap(NULL, AB_LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    H_CHECK(big != MAP_FAILED, "mmap");
    for (size_t i = 0; i < AB_LEN; i += 4096) big[i] = (uint8_t)(i >> 12);
    lm_dp_call call = {.struct_size = sizeof call, .timeout_ms = 300};
    double t0 = h_now();
    int rc = lm_dp_send(w->dp, H_ID(1), 7, big, AB_LEN, &call, &e);
    double dt = h_now() - t0;
    lm_dp_stats st;
    lm_dp_get_stats(w->dp, &st);
    H_CHECK(rc == LOOM_TIMEOUT, "rc %d: %s", rc, e.msg);
    H_CHECK(st.held == 0, "UCX still holds %" PRIu64 " transfer(s) of a call that returned", st.held);
    munmap(big, AB_LEN);
    fprintf(stderr, "[worker 0] send to the frozen worker returned after %.2f s: %s\n", dt, e.msg);
    if (a->remote) H_CHECK(dt < 5, "took %.1f s", dt);
    else H_CHECK(dt > 1.5, "returned after %.2f s, before the frozen worker was let go", dt);
    h_write_file(w->dir, "sent", "1", 1);
    /* keep serving while the thawed worker tries to finish the transfer, then talk to worker 2 */
    H_CHECK(lm_dp_recv(w->dp, H_ID(2), 3, &x, 1, NULL, &e) == 0, "worker 2 after: %s", e.msg);
    H_CHECK(lm_dp_send(w->dp, H_ID(2), 4, &x, 1, NULL, &e) == 0, "worker 2 after: %s", e.msg);
    lm_dp_get_stats(w->dp, &st);
    H_CHECK(st.held == 0, "UCX holds %" PRIu64 " transfer(s) at the end", st.held);
  } else if (w->proc == 1) {
    H_CHECK(lm_dp_recv(w->dp, H_ID(0), 1, &x, 1, NULL, &e) == 0, "%s", e.msg);
    H_CHECK(lm_dp_send(w->dp, H_ID(0), 2, &x, 1, NULL, &e) == 0, "%s", e.msg);
    h_write_file(w->dir, "ready.1", "1", 1);
    H_CHECK(h_read_file(w->dir, "resumed", buf, sizeof buf, 60) >= 0, "never resumed");
    uint8_t *got = malloc(AB_LEN);
    lm_dp_call call = {.struct_size = sizeof call, .timeout_ms = 5000};
    int rc = lm_dp_recv(w->dp, H_ID(0), 7, got, AB_LEN, &call, &e);
    if (a->remote) {
      H_CHECK(rc < 0, "the transfer of a call that ended and was cut off arrived");
    } else {
      H_CHECK(rc == 0, "rc %d: %s", rc, e.msg);
      size_t bad = 0;
      for (size_t i = 0; rc == 0 && i < AB_LEN; i += 4096) bad += got[i] != (uint8_t)(i >> 12);
      H_CHECK(bad == 0, "%zu pages wrong", bad);
    }
    free(got);
    h_write_file(w->dir, "victim.done", "1", 1);
  } else {
    H_CHECK(lm_dp_recv(w->dp, H_ID(0), 1, &x, 1, NULL, &e) == 0, "%s", e.msg);
    H_CHECK(lm_dp_send(w->dp, H_ID(0), 2, &x, 1, NULL, &e) == 0, "%s", e.msg);
    H_CHECK(h_read_file(w->dir, "victim.done", buf, sizeof buf, 60) >= 0, "victim never done");
    H_CHECK(lm_dp_send(w->dp, H_ID(0), 3, &x, 1, NULL, &e) == 0, "%s", e.msg);
    H_CHECK(lm_dp_recv(w->dp, H_ID(0), 4, &x, 1, NULL, &e) == 0, "%s", e.msg);
  }
  return 0;
}

static int abandon_parent(pid_t *pids, int n, const char *dir, void *arg) {
  const ab_arg *a = arg;
  char buf[8];
  (void)n;
  if (h_read_file(dir, "ready.1", buf, sizeof buf, 60) < 0) return 1;
  kill(pids[1], SIGSTOP);
  h_write_file(dir, "stopped", "1", 1);
  if (a->remote) {
    if (h_read_file(dir, "sent", buf, sizeof buf, 30) < 0) {
      kill(pids[1], SIGCONT);
      return 1;
    }
  } else {
    sleep(4); /* past the grace period: worker 0 must still be waiting */
  }
  kill(pids[1], SIGCONT);
  h_write_file(dir, "resumed", "1", 1);
  return 0;
}

static void test_abandoned_transfer_local(void **state) {
  ab_arg a = {.remote = 0};
  h_opts o = {.nproc = 3, .ndev = 1, .body = abandon_body, .parent = abandon_parent, .arg = &a, .deadline_s = 60};
  assert_int_equal(h_run(&o), 0);
}

static void test_abandoned_transfer_tcp(void **state) {
  ab_arg a = {.remote = 1};
  h_opts o = {.nproc = 3, .ndev = 1, .body = abandon_body, .parent = abandon_parent, .arg = &a, .deadline_s = 60,
              .tls = "tcp", .peer_errors = 1};
  assert_int_equal(h_run(&o), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_all_reduce_dtypes), cmocka_unit_test(test_all_reduce_dtypes_tcp),
      cmocka_unit_test(test_collectives),       cmocka_unit_test(test_collectives_2x4),
      cmocka_unit_test(test_collectives_4x1),
      cmocka_unit_test(test_in_flight),         cmocka_unit_test(test_slow_member),
      cmocka_unit_test(test_determinism),
      cmocka_unit_test(test_p2p),               cmocka_unit_test(test_p2p_tcp),
      cmocka_unit_test(test_reconnect_after_failed_connect),
      cmocka_unit_test(test_killed_peer),       cmocka_unit_test(test_killed_peer_tcp),
      cmocka_unit_test(test_timeout_and_mismatch), cmocka_unit_test(test_malformed_messages),
      cmocka_unit_test(test_spoofed_sender), cmocka_unit_test(test_late_peer_keeps_its_early_message),
      cmocka_unit_test(test_abandoned_transfer_local), cmocka_unit_test(test_abandoned_transfer_tcp),
  };
  if (getenv("LOOM_TEST_FILTER")) cmocka_set_test_filter(getenv("LOOM_TEST_FILTER")); /* e.g. "*killed*" */
  return cmocka_run_group_tests(tests, NULL, NULL);
}
