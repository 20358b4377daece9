/* Unit tests for the memory ranges of local transfers: libloom's runs of a shard's region in the
 * caller's array (checked against a byte-by-byte walk of the region) and the worker's checks of
 * the (address, length) pairs a client sends (src/worker/wk_local.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "client/client_int.h"
#include "worker/wk.h"

/* The byte addresses of region (off, sd) of array dims at base, row-major, as (address, length)
 * runs merged where consecutive: what lm_region_ranges must produce. */
static size_t brute_runs(const uint8_t *base, int rank, const int64_t *dims, const int64_t *off, const int64_t *sd,
                         size_t esize, uint64_t *words, size_t cap) {
  int64_t n = 1;
  for (int d = 0; d < rank; d++) n *= sd[d];
  size_t k = 0;
  for (int64_t e = 0; e < n; e++) {
    int64_t rest = e, lin = 0, mul = 1;
    for (int d = rank - 1; d >= 0; d--) {
      lin += (off[d] + rest % sd[d]) * mul;
      rest /= sd[d];
      mul *= dims[d];
    }
    uint64_t a = (uint64_t)(uintptr_t)(base + lin * (int64_t)esize);
    if (k && words[2 * (k - 1)] + words[2 * (k - 1) + 1] == a) {
      words[2 * (k - 1) + 1] += esize;
    } else {
      assert_true(k < cap);
      words[2 * k] = a;
      words[2 * k + 1] = esize;
      k++;
    }
  }
  return k;
}

static void check_region(int rank, const int64_t *dims, const int64_t *off, const int64_t *sd, size_t esize) {
  static uint8_t base[1 << 16];
  uint64_t want[2 * 4096], got[2 * 4096], run;
  size_t nw = brute_runs(base, rank, dims, off, sd, esize, want, 4096);
  uint64_t n = lm_region_runs(rank, dims, sd, esize, &run);
  /* lm_region_runs does not merge runs that happen to touch (a region whole in its inner
   * dimensions but split in an outer one); those must still cover the same bytes in order */
  assert_true(n >= nw && n <= 4096);
  lm_region_ranges(base, rank, dims, off, sd, esize, got);
  uint64_t total = 0;
  for (uint64_t i = 0; i < n; i++) {
    assert_int_equal(got[2 * i + 1], run);
    total += run;
  }
  size_t j = 0;
  uint64_t pos = 0; /* walk both lists byte by byte */
  for (uint64_t i = 0; i < n; i++)
    for (uint64_t b = 0; b < run; b++) {
      while (j < nw && pos >= want[2 * j + 1]) j++, pos = 0;
      assert_true(j < nw);
      assert_int_equal(got[2 * i] + b, want[2 * j] + pos);
      pos++;
    }
  uint64_t wtotal = 0;
  for (size_t i = 0; i < nw; i++) wtotal += want[2 * i + 1];
  assert_int_equal(total, wtotal);
}

static void test_region_runs(void **state) {
  (void)state;
  { /* contiguous: leading rows */
    int64_t dims[2] = {8, 12}, off[2] = {2, 0}, sd[2] = {3, 12};
    uint64_t run;
    assert_int_equal(lm_region_runs(2, dims, sd, 4, &run), 1);
    assert_int_equal(run, 3 * 12 * 4);
    check_region(2, dims, off, sd, 4);
  }
  { /* split along dimension 1: one run per row */
    int64_t dims[2] = {8, 12}, off[2] = {0, 6}, sd[2] = {8, 3};
    uint64_t run;
    assert_int_equal(lm_region_runs(2, dims, sd, 4, &run), 8);
    assert_int_equal(run, 12);
    check_region(2, dims, off, sd, 4);
  }
  { /* rank 3, middle dimension split: runs span the whole last dimension */
    int64_t dims[3] = {4, 6, 8}, off[3] = {0, 3, 0}, sd[3] = {4, 3, 8};
    uint64_t run;
    assert_int_equal(lm_region_runs(3, dims, sd, 2, &run), 4);
    assert_int_equal(run, 3 * 8 * 2);
    check_region(3, dims, off, sd, 2);
  }
  { /* both dimensions split (a mesh) */
    int64_t dims[2] = {16, 20}, off[2] = {8, 5}, sd[2] = {8, 5};
    check_region(2, dims, off, sd, 8);
  }
  { /* rank 4, inner two whole */
    int64_t dims[4] = {3, 4, 5, 6}, off[4] = {1, 2, 0, 0}, sd[4] = {2, 2, 5, 6};
    check_region(4, dims, off, sd, 1);
  }
  { /* a scalar and an empty region */
    int64_t none[1] = {0};
    uint64_t run;
    assert_int_equal(lm_region_runs(0, NULL, NULL, 4, &run), 1);
    assert_int_equal(run, 4);
    int64_t dims[1] = {0}, sd[1] = {0};
    assert_int_equal(lm_region_runs(1, dims, sd, 4, &run), 0);
    (void)none;
  }
}

static void expect_bad(const uint64_t *w, size_t n, const char *what) {
  wk_ranges r;
  lm_err err;
  assert_int_equal(wk_local_ranges(w, n, &r, &err), LOOM_INVALID_ARGUMENT);
  assert_non_null(strstr(err.msg, what));
  assert_null(r.iov);
}

static void test_worker_checks_ranges(void **state) {
  (void)state;
  wk_ranges r;
  lm_err err;
  uint64_t ok[6] = {0x1000, 100, 0x5000, 28, 0x2000, 4};
  assert_int_equal(wk_local_ranges(ok, 6, &r, &err), 0);
  assert_int_equal(r.n, 3);
  assert_int_equal(r.total, 132);
  assert_int_equal(r.start[0], 0);
  assert_int_equal(r.start[1], 100);
  assert_int_equal(r.start[2], 128);
  assert_ptr_equal(r.iov[1].iov_base, (void *)0x5000);
  wk_ranges_free(&r);
  assert_int_equal(wk_local_ranges(NULL, 0, &r, &err), 0); /* an empty shard */
  assert_int_equal(r.total, 0);
  wk_ranges_free(&r);
  uint64_t odd[3] = {0x1000, 8, 0x2000};
  expect_bad(odd, 3, "pairs");
  uint64_t zero[4] = {0x1000, 8, 0x2000, 0};
  expect_bad(zero, 4, "range 1");
  uint64_t wrap[2] = {UINT64_MAX - 10, 100};
  expect_bad(wrap, 2, "not a valid range");
  uint64_t huge[2] = {0x1000, (uint64_t)1 << 63};
  expect_bad(huge, 2, "not a valid range");
  uint64_t sum[4] = {0x1000, ((uint64_t)1 << 63) - 1, 0x2000, ((uint64_t)1 << 63) - 1}; /* the total overflows too */
  uint64_t sum3[6] = {0x1000, ((uint64_t)1 << 63) - 1, 0x2000, ((uint64_t)1 << 63) - 1, 0x3000, 4};
  assert_int_equal(wk_local_ranges(sum, 4, &r, &err), 0);
  wk_ranges_free(&r);
  expect_bad(sum3, 6, "range 2");
  size_t many = 2 * ((size_t)LM_LOCAL_MAX_RANGES + 1);
  uint64_t *w = calloc(many, sizeof *w);
  assert_non_null(w);
  for (size_t i = 0; i < many; i += 2) w[i] = 0x1000, w[i + 1] = 1;
  expect_bad(w, many, "at most 65536");
  assert_int_equal(wk_local_ranges(w, many - 2, &r, &err), 0);
  assert_int_equal(r.total, LM_LOCAL_MAX_RANGES);
  wk_ranges_free(&r);
  free(w);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_region_runs),
      cmocka_unit_test(test_worker_checks_ranges),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
