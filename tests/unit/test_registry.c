/* Unit tests for the controller's registry (dense stable virtual ids, validation that changes
 * nothing on failure, heartbeats, loss, expiry) and sessions (handle tables). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "controller/registry.h"
#include "controller/session.h"

static const char *g_kinds[8] = {"cpu", "cpu", "cpu", "cpu", "cpu", "cpu", "cpu", "cpu"};
static const uint64_t g_caps[8] = {1 << 20, 1 << 20, 1 << 20, 1 << 20, 1 << 20, 1 << 20, 1 << 20, 1 << 20};

static lm_worker_spec spec(const char *host, const char *slice, uint32_t n) {
  return (lm_worker_spec){.host = host, .pid = 100, .slice = slice, .ndevices = n, .kinds = g_kinds,
                          .capacities = g_caps};
}

static void test_dense_ids(void **state) {
  lm_registry *r = lm_registry_create();
  uint32_t a, b, c;
  lm_worker_spec s = spec("h1", "s0", 4);
  assert_int_equal(lm_registry_add_worker(r, &s, 1000, &a, NULL), 0);
  s = spec("h2", "s1", 3);
  s.dataplane = (const uint8_t *)"addr";
  s.dataplane_len = 4;
  assert_int_equal(lm_registry_add_worker(r, &s, 1000, &b, NULL), 0);
  assert_int_equal(a, 0);
  assert_int_equal(b, 1);
  assert_int_equal(lm_registry_device_count(r), 7);
  for (uint32_t i = 0; i < 7; i++) {
    const lm_reg_device *d = lm_registry_device(r, i);
    assert_int_equal(d->id, i);
    assert_int_equal(d->worker, i < 4 ? 0 : 1);
    assert_int_equal(d->local_index, i < 4 ? i : i - 4);
    assert_true(lm_registry_device_healthy(r, i));
    assert_string_equal(lm_registry_device_reason(r, i), "");
  }
  const lm_reg_worker *w = lm_registry_worker(r, 1);
  assert_int_equal(w->device_ids[0], 4);
  assert_int_equal(w->dataplane_len, 4);
  assert_memory_equal(w->dataplane, "addr", 4);
  /* a lost worker's ids are never reused: the next worker continues after them */
  assert_true(lm_registry_mark_lost(r, 0, "connection closed"));
  assert_false(lm_registry_mark_lost(r, 0, "again"));
  s = spec("h3", "s0", 2);
  assert_int_equal(lm_registry_add_worker(r, &s, 2000, &c, NULL), 0);
  assert_int_equal(c, 2);
  assert_int_equal(lm_registry_worker(r, 2)->device_ids[0], 7);
  assert_false(lm_registry_device_healthy(r, 0));
  assert_string_equal(lm_registry_device_reason(r, 3), "connection closed");
  assert_true(lm_registry_device_healthy(r, 4));
  assert_null(lm_registry_device(r, 9));
  assert_null(lm_registry_worker(r, 3));
  assert_false(lm_registry_device_healthy(r, 9));
  lm_registry_destroy(r);
}

static void test_validation(void **state) {
  lm_registry *r = lm_registry_create();
  uint32_t id;
  lm_err e;
  lm_worker_spec s = spec("", "s0", 1);
  assert_int_equal(lm_registry_add_worker(r, &s, 0, &id, &e), LOOM_INVALID_ARGUMENT);
  s = spec("h", "with space", 1);
  assert_int_equal(lm_registry_add_worker(r, &s, 0, &id, &e), LOOM_INVALID_ARGUMENT);
  s = spec("h", "s", 0);
  assert_int_equal(lm_registry_add_worker(r, &s, 0, &id, &e), LOOM_INVALID_ARGUMENT);
  s = spec("h", "s", LM_REG_MAX_DEVICES_PER_WORKER + 1);
  assert_int_equal(lm_registry_add_worker(r, &s, 0, &id, &e), LOOM_INVALID_ARGUMENT);
  const char *kinds[2] = {"cpu", "tpu"};
  s = spec("h", "s", 2);
  s.kinds = kinds;
  assert_int_equal(lm_registry_add_worker(r, &s, 0, &id, &e), LOOM_UNSUPPORTED);
  assert_non_null(strstr(e.msg, "tpu"));
  const uint64_t caps[2] = {1, 0};
  s = spec("h", "s", 2);
  s.capacities = caps;
  assert_int_equal(lm_registry_add_worker(r, &s, 0, &id, &e), LOOM_INVALID_ARGUMENT);
  s = spec("h", "s", 1);
  s.dataplane_len = LM_REG_DATAPLANE_MAX + 1;
  s.dataplane = calloc(1, s.dataplane_len);
  assert_int_equal(lm_registry_add_worker(r, &s, 0, &id, &e), LOOM_INVALID_ARGUMENT);
  free((void *)s.dataplane);
  char longname[300];
  memset(longname, 'a', sizeof longname - 1);
  longname[sizeof longname - 1] = 0;
  s = spec(longname, "s", 1);
  assert_int_equal(lm_registry_add_worker(r, &s, 0, &id, &e), LOOM_INVALID_ARGUMENT);
  /* none of the failures left anything behind */
  assert_int_equal(lm_registry_worker_count(r), 0);
  assert_int_equal(lm_registry_device_count(r), 0);
  lm_registry_destroy(r);
}

static void test_heartbeat_and_expiry(void **state) {
  lm_registry *r = lm_registry_create();
  uint32_t a, b;
  lm_worker_spec s = spec("h", "s", 2);
  lm_registry_add_worker(r, &s, 1000, &a, NULL);
  lm_registry_add_worker(r, &s, 1000, &b, NULL);
  uint32_t idx[2] = {1, 0};
  uint64_t used[2] = {500, 600};
  lm_err e;
  assert_int_equal(lm_registry_heartbeat(r, a, 1500, idx, used, 2, &e), 0);
  assert_int_equal(lm_registry_device(r, 0)->memory_used, 600);
  assert_int_equal(lm_registry_device(r, 1)->memory_used, 500);
  idx[0] = 2; /* out of range: refused, nothing changed */
  assert_int_equal(lm_registry_heartbeat(r, a, 1600, idx, used, 2, &e), LOOM_INVALID_ARGUMENT);
  assert_int_equal(lm_registry_worker(r, a)->last_heartbeat_ms, 1500);
  assert_int_equal(lm_registry_heartbeat(r, 7, 1600, NULL, NULL, 0, &e), LOOM_NOT_FOUND);

  uint32_t lost[4];
  assert_int_equal(lm_registry_expire(r, 2000, 1000, lost, 4), 0); /* b: exactly 1000 ms, not yet */
  assert_int_equal(lm_registry_expire(r, 2001, 1000, lost, 4), 1);
  assert_int_equal(lost[0], b);
  assert_string_equal(lm_registry_worker(r, b)->reason, "no heartbeat");
  assert_false(lm_registry_device_healthy(r, 2));
  assert_true(lm_registry_device_healthy(r, 0));
  assert_int_equal(lm_registry_heartbeat(r, b, 2100, NULL, NULL, 0, &e), LOOM_NOT_FOUND); /* lost stays lost */
  assert_int_equal(lm_registry_expire(r, 2501, 1000, lost, 4), 1);
  assert_int_equal(lost[0], a);
  lm_registry_destroy(r);
}

static void test_expire_in_batches(void **state) {
  lm_registry *r = lm_registry_create();
  lm_worker_spec s = spec("h", "s", 1);
  uint32_t id;
  for (int i = 0; i < 10; i++) lm_registry_add_worker(r, &s, 0, &id, NULL);
  uint32_t lost[4];
  size_t total = 0, n;
  while ((n = lm_registry_expire(r, 10000, 10, lost, 4)) > 0) {
    assert_true(n <= 4);
    total += n;
  }
  assert_int_equal(total, 10);
  lm_registry_destroy(r);
}

static int g_destroyed;
static void count_destroy(void *p) {
  g_destroyed++;
  free(p);
}

static void test_session_handles(void **state) {
  lm_session *s = lm_session_create(5, "client\x01name", "1.2.3.4:5", 77);
  assert_string_equal(s->name, "client?name");
  g_destroyed = 0;
  uint64_t ids[1000];
  for (int i = 0; i < 1000; i++) {
    int *v = malloc(sizeof *v);
    *v = i;
    assert_int_equal(lm_session_add(s, 1 + (i % 2), v, count_destroy, &ids[i], NULL), 0);
    assert_true(ids[i] == (uint64_t)i + 1);
  }
  assert_int_equal(lm_session_handle_count(s), 1000);
  for (int i = 0; i < 1000; i++) {
    int *v = lm_session_get(s, ids[i], 1 + (i % 2));
    assert_non_null(v);
    assert_int_equal(*v, i);
    assert_null(lm_session_get(s, ids[i], 1 + ((i + 1) % 2))); /* wrong kind */
  }
  lm_err e;
  for (int i = 0; i < 1000; i += 2) assert_int_equal(lm_session_remove(s, ids[i], 1, &e), 0);
  assert_int_equal(g_destroyed, 500);
  assert_int_equal(lm_session_remove(s, ids[0], 1, &e), LOOM_NOT_FOUND); /* gone */
  assert_int_equal(lm_session_remove(s, 123456, 1, &e), LOOM_NOT_FOUND);
  assert_null(lm_session_get(s, ids[0], 1));
  assert_non_null(lm_session_get(s, ids[1], 2));
  /* churn: tombstones get recycled by rehashing, and ids are never reused */
  for (int i = 0; i < 5000; i++) {
    uint64_t id;
    assert_int_equal(lm_session_add(s, 3, malloc(1), count_destroy, &id, NULL), 0);
    assert_true(id > 1000);
    assert_int_equal(lm_session_remove(s, id, 3, &e), 0);
  }
  assert_int_equal(lm_session_handle_count(s), 500);
  lm_session_destroy(s); /* destroys the 500 left */
  assert_int_equal(g_destroyed, 500 + 5000 + 500);
  lm_session_destroy(NULL);
}

/* A lost worker's slot (worker id and device ids) goes to a new worker of as many devices. */
static void test_reuse_slot(void **state) {
  lm_registry *r = lm_registry_create();
  uint32_t a, b;
  lm_worker_spec s = spec("h1", "s0", 4);
  assert_int_equal(lm_registry_add_worker(r, &s, 1000, &a, NULL), 0);
  s = spec("h2", "s0", 2);
  assert_int_equal(lm_registry_add_worker(r, &s, 1000, &b, NULL), 0);
  assert_true(lm_registry_has_room(r, 4));
  lm_err e;
  s = spec("h3", "s9", 4);
  assert_int_equal(lm_registry_reuse_worker(r, a, &s, 2000, &e), LOOM_INVALID_ARGUMENT); /* alive */
  assert_true(lm_registry_mark_lost(r, a, "gone"));
  s = spec("h3", "s9", 3);
  assert_int_equal(lm_registry_reuse_worker(r, a, &s, 2000, &e), LOOM_INVALID_ARGUMENT); /* other size */
  s = spec("h3", "s9", 4);
  assert_int_equal(lm_registry_reuse_worker(r, a, &s, 2000, &e), 0);
  const lm_reg_worker *w = lm_registry_worker(r, a);
  assert_string_equal(w->host, "h3");
  assert_string_equal(w->slice, "s9");
  assert_int_equal(w->state, LM_WORKER_ALIVE);
  assert_int_equal(w->device_ids[0], 0);
  assert_int_equal(lm_registry_device_count(r), 6);
  for (uint32_t i = 0; i < 4; i++) assert_true(lm_registry_device_healthy(r, i));
  assert_int_equal(lm_registry_heartbeat(r, a, 2500, NULL, NULL, 0, &e), 0);
  lm_registry_destroy(r);
}

static void test_counters_never_go_down(void **state) {
  lm_registry *r = lm_registry_create();
  uint32_t a;
  lm_worker_spec s = spec("h", "s", 2);
  lm_registry_add_worker(r, &s, 1000, &a, NULL);
  lm_err e;
  lm_reg_transfers t = {.stream_puts = 5, .stream_put_bytes = 500};
  assert_int_equal(lm_registry_set_transfers(r, a, &t, &e), 0);
  t = (lm_reg_transfers){.stream_puts = 2, .stream_put_bytes = 900, .local_gets = 1};
  assert_int_equal(lm_registry_set_transfers(r, a, &t, &e), 0);
  const lm_reg_worker *w = lm_registry_worker(r, a);
  assert_int_equal(w->transfers.stream_puts, 5);
  assert_int_equal(w->transfers.stream_put_bytes, 900);
  assert_int_equal(w->transfers.local_gets, 1);
  lm_reg_collectives c = {.calls = {4, 0, 0, 0, 0, 1}, .bytes = {16}, .nanos = 100, .dp_sent = 8};
  assert_int_equal(lm_registry_set_collectives(r, a, &c, &e), 0);
  c = (lm_reg_collectives){.calls = {3, 2}, .bytes = {8}, .nanos = 200, .dp_received = 9};
  assert_int_equal(lm_registry_set_collectives(r, a, &c, &e), 0);
  assert_int_equal(w->collectives.calls[0], 4);
  assert_int_equal(w->collectives.calls[1], 2);
  assert_int_equal(w->collectives.calls[5], 1);
  assert_int_equal(w->collectives.bytes[0], 16);
  assert_int_equal(w->collectives.nanos, 200);
  assert_int_equal(w->collectives.dp_sent, 8);
  assert_int_equal(w->collectives.dp_received, 9);
  assert_int_equal(lm_registry_set_collectives(r, 9, &c, &e), LOOM_NOT_FOUND);
  lm_registry_destroy(r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_dense_ids),           cmocka_unit_test(test_validation),
      cmocka_unit_test(test_heartbeat_and_expiry), cmocka_unit_test(test_expire_in_batches),
      cmocka_unit_test(test_session_handles),      cmocka_unit_test(test_reuse_slot),
      cmocka_unit_test(test_counters_never_go_down),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
