/* Unit tests for hot swap in the registry (docs/elastic.md): standbys hold no virtual devices,
 * lm_registry_swap moves a lost worker's virtual ids to a standby local index for local index,
 * refuses pairs that do not fit, and epochs are unique per registration. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "controller/registry.h"

static const char *g_kinds[4] = {"cpu", "cpu", "cpu", "cpu"};
static uint64_t g_caps[4] = {1 << 20, 1 << 20, 1 << 20, 1 << 20};

static uint32_t add(lm_registry *r, uint32_t ndev, bool standby, const char *slice) {
  lm_worker_spec sp = {.host = "h", .pid = 1, .slice = slice, .ndevices = ndev, .kinds = g_kinds,
                       .capacities = g_caps, .standby = standby};
  uint32_t id;
  lm_err e;
  assert_int_equal(lm_registry_add_worker(r, &sp, 0, &id, &e), 0);
  return id;
}

static void test_standby_has_no_devices(void **state) {
  (void)state;
  lm_registry *r = lm_registry_create();
  uint32_t a = add(r, 4, false, "s");
  uint32_t s = add(r, 4, true, "s");
  assert_int_equal(lm_registry_device_count(r), 4);
  const lm_reg_worker *w = lm_registry_worker(r, s);
  assert_true(w->standby);
  for (uint32_t i = 0; i < 4; i++) assert_int_equal(w->device_ids[i], LM_REG_NO_DEVICE);
  assert_true(lm_registry_worker(r, a)->epoch != w->epoch);
  /* a standby's heartbeat with memory figures touches no virtual device */
  uint32_t li[4] = {0, 1, 2, 3};
  uint64_t used[4] = {5, 5, 5, 5};
  assert_int_equal(lm_registry_heartbeat(r, s, 10, li, used, 4, NULL), 0);
  for (uint32_t v = 0; v < 4; v++) assert_int_equal(lm_registry_device(r, v)->memory_used, 0);
  lm_registry_destroy(r);
}

static void test_swap_moves_the_virtual_devices(void **state) {
  (void)state;
  lm_registry *r = lm_registry_create();
  add(r, 4, false, "s");
  uint32_t b = add(r, 4, false, "s");
  uint32_t s = add(r, 4, true, "s");
  lm_err e;
  /* only a lost worker can be replaced */
  assert_int_equal(lm_registry_swap(r, b, s, &e), LOOM_INVALID_ARGUMENT);
  assert_true(lm_registry_mark_lost(r, b, "connection closed"));
  for (uint32_t v = 4; v < 8; v++) assert_false(lm_registry_device_healthy(r, v));
  assert_int_equal(lm_registry_swap(r, b, s, &e), 0);
  for (uint32_t v = 4; v < 8; v++) {
    const lm_reg_device *d = lm_registry_device(r, v);
    assert_int_equal(d->worker, s);
    assert_int_equal(d->local_index, v - 4);
    assert_true(lm_registry_device_healthy(r, v));
  }
  assert_false(lm_registry_worker(r, s)->standby);
  assert_int_equal(lm_registry_worker(r, s)->device_ids[3], 7);
  assert_int_equal(lm_registry_worker(r, b)->replaced_by, s + 1);
  /* twice: the lost worker was replaced already, and the standby is one no more */
  assert_int_equal(lm_registry_swap(r, b, s, &e), LOOM_INVALID_ARGUMENT);
  assert_int_equal(lm_registry_device_count(r), 8);
  lm_registry_destroy(r);
}

static void test_swap_refuses_what_does_not_fit(void **state) {
  (void)state;
  lm_registry *r = lm_registry_create();
  uint32_t a = add(r, 4, false, "s");
  uint32_t small = add(r, 2, true, "s");
  uint32_t big = add(r, 4, true, "s");
  lm_err e;
  assert_true(lm_registry_mark_lost(r, a, "no heartbeat"));
  assert_int_equal(lm_registry_swap(r, a, small, &e), LOOM_INVALID_ARGUMENT);
  assert_non_null(strstr(e.msg, "2 devices"));
  assert_true(lm_registry_mark_lost(r, big, "connection closed")); /* a lost standby is no use */
  assert_int_equal(lm_registry_swap(r, a, big, &e), LOOM_INVALID_ARGUMENT);
  assert_int_equal(lm_registry_swap(r, a, 99, &e), LOOM_INVALID_ARGUMENT);
  assert_int_equal(lm_registry_swap(r, a, a, &e), LOOM_INVALID_ARGUMENT);
  /* a lost standby's slot is never reused for the ids of another worker */
  lm_worker_spec sp = {.host = "h", .pid = 2, .slice = "s", .ndevices = 4, .kinds = g_kinds, .capacities = g_caps};
  assert_int_equal(lm_registry_reuse_worker(r, big, &sp, 0, &e), LOOM_INVALID_ARGUMENT);
  lm_registry_destroy(r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_standby_has_no_devices),
      cmocka_unit_test(test_swap_moves_the_virtual_devices),
      cmocka_unit_test(test_swap_refuses_what_does_not_fit),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
