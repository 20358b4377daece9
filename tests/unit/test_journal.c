/* Unit tests for the controller's journal (src/controller/journal.c, docs/durability.md): records
 * staged and published are committed and read back in key order; deletes (one record, and every
 * record of a k1); only published operations are committed, whole; lazy deletes ride along with
 * the next commit; a second opener of the same directory is refused; a file that is not a journal,
 * or is truncated, is refused naming it; and the registry's restore/revive used after a restart. */
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>
#include "controller/journal.h"
#include "controller/registry.h"

typedef struct seen {
  int n;
  int ns[16];
  uint64_t k1[16], k2[16];
  char v[16][32];
} seen;

static int collect(void *arg, int ns, uint64_t k1, uint64_t k2, const void *v, size_t n, lm_err *err) {
  (void)err;
  seen *s = arg;
  if (s->n < 16) {
    s->ns[s->n] = ns, s->k1[s->n] = k1, s->k2[s->n] = k2;
    snprintf(s->v[s->n], sizeof s->v[0], "%.*s", (int)n, (const char *)v);
    s->n++;
  }
  return 0;
}

static void tmpdir(char *buf, size_t cap) {
  snprintf(buf, cap, "/tmp/loom-test-journal-%d-%ld", (int)getpid(), (long)random());
}

static void wait_committed(lm_journal *j, uint64_t no) {
  for (int i = 0; i < 2000 && lm_journal_committed(j) < no; i++) usleep(1000);
  assert_true(lm_journal_committed(j) >= no);
}

static void rmdir_all(const char *dir) {
  char cmd[256];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  assert_int_equal(system(cmd), 0);
}

static void test_put_del_load(void **state) {
  (void)state;
  char dir[128];
  tmpdir(dir, sizeof dir);
  lm_journal *j;
  lm_err e;
  assert_int_equal(lm_journal_open(dir, NULL, NULL, &j, &e), 0);
  lm_journal_put(j, LM_J_ARRAY, 7, 2, "b", 1);
  lm_journal_put(j, LM_J_ARRAY, 7, 1, "a", 1);
  lm_journal_put(j, LM_J_ARRAY, 8, 1, "c", 1);
  lm_journal_put(j, LM_J_SESSION, 7, 0, "s", 1);
  uint64_t last = lm_journal_put(j, LM_J_ARRAY, 7, 1, "A", 1); /* replaces */
  assert_int_equal(lm_journal_queued(j), last);
  usleep(20000);
  assert_true(lm_journal_committed(j) < last); /* staged, not published: nothing is written */
  lm_journal_publish(j);
  wait_committed(j, last);
  uint64_t d = lm_journal_del(j, LM_J_ARRAY, 8, UINT64_MAX); /* every record of k1 = 8 */
  lm_journal_del(j, LM_J_SESSION, 7, 0);
  lm_journal_publish(j);
  wait_committed(j, d + 1);
  uint64_t commits, ops, ns;
  lm_journal_stats(j, &commits, &ops, &ns, NULL);
  assert_true(commits >= 2 && ops == 7);
  lm_journal_close(j);
  /* a second open reads them back, in key order */
  assert_int_equal(lm_journal_open(dir, NULL, NULL, &j, &e), 0);
  seen s = {0};
  assert_int_equal(lm_journal_load(j, collect, &s, &e), 0);
  assert_int_equal(s.n, 2);
  assert_int_equal(s.ns[0], LM_J_ARRAY);
  assert_int_equal(s.k1[0], 7);
  assert_int_equal(s.k2[0], 1);
  assert_string_equal(s.v[0], "A");
  assert_int_equal(s.k2[1], 2);
  assert_string_equal(s.v[1], "b");
  /* staged at close: published and committed by close */
  lm_journal_put(j, LM_J_META, 0, 0, "m", 1);
  lm_journal_close(j);
  assert_int_equal(lm_journal_open(dir, NULL, NULL, &j, &e), 0);
  memset(&s, 0, sizeof s);
  assert_int_equal(lm_journal_load(j, collect, &s, &e), 0);
  assert_int_equal(s.n, 3);
  assert_int_equal(s.ns[0], LM_J_META);
  lm_journal_close(j);
  rmdir_all(dir);
}

/* Lazy operations (deletes nobody waits for) start no commit of their own: they go with the next
 * operation that is not lazy, in order and in the same transaction, or when wanted or kicked. */
static void test_lazy_ops_ride_along(void **state) {
  (void)state;
  char dir[128];
  tmpdir(dir, sizeof dir);
  lm_journal *j;
  lm_err e;
  assert_int_equal(lm_journal_open(dir, NULL, NULL, &j, &e), 0);
  uint64_t p1 = lm_journal_put(j, LM_J_ARRAY, 1, 1, "a", 1);
  lm_journal_put(j, LM_J_ARRAY, 1, 2, "b", 1);
  lm_journal_publish(j);
  wait_committed(j, p1 + 1);
  uint64_t c0, c1, ops, ns;
  lm_journal_stats(j, &c0, &ops, &ns, NULL);
  uint64_t d = lm_journal_del_lazy(j, LM_J_ARRAY, 1, 1);
  lm_journal_publish(j);
  usleep(50000);
  assert_true(lm_journal_committed(j) < d); /* published, but nobody wants it yet */
  uint64_t p2 = lm_journal_put(j, LM_J_ARRAY, 1, 3, "c", 1);
  lm_journal_publish(j);
  wait_committed(j, p2); /* the put takes the delete along, in one transaction */
  lm_journal_stats(j, &c1, &ops, &ns, NULL);
  assert_int_equal(c1, c0 + 1);
  d = lm_journal_del_lazy(j, LM_J_ARRAY, 1, 2);
  lm_journal_publish(j);
  lm_journal_want(j, d); /* a reply waits for it */
  wait_committed(j, d);
  d = lm_journal_del_lazy(j, LM_J_ARRAY, 1, 3);
  lm_journal_kick(j); /* the periodic tick */
  wait_committed(j, d);
  lm_journal_del_lazy(j, LM_J_ARRAY, 1, 4); /* (nothing to delete) committed by close */
  lm_journal_publish(j);
  lm_journal_close(j);
  assert_int_equal(lm_journal_open(dir, NULL, NULL, &j, &e), 0);
  seen s = {0};
  assert_int_equal(lm_journal_load(j, collect, &s, &e), 0);
  assert_int_equal(s.n, 0); /* every record was deleted, lazily */
  lm_journal_close(j);
  rmdir_all(dir);
}

static void test_second_opener_refused(void **state) {
  (void)state;
  char dir[128];
  tmpdir(dir, sizeof dir);
  lm_journal *j, *j2;
  lm_err e;
  assert_int_equal(lm_journal_open(dir, NULL, NULL, &j, &e), 0);
  assert_int_equal(lm_journal_open(dir, NULL, NULL, &j2, &e), LOOM_BUSY);
  assert_non_null(strstr(e.msg, "another controller"));
  lm_journal_close(j);
  rmdir_all(dir);
}

static void write_file(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(data, 1, n, f), n);
  fclose(f);
}

static void test_damaged_files_refused(void **state) {
  (void)state;
  char dir[128], path[160];
  tmpdir(dir, sizeof dir);
  mkdir(dir, 0700);
  snprintf(path, sizeof path, "%s/journal.db", dir);
  char junk[8192];
  for (size_t i = 0; i < sizeof junk; i++) junk[i] = (char)(i * 7 + 3);
  write_file(path, junk, sizeof junk); /* not a database */
  lm_journal *j;
  lm_err e;
  assert_true(lm_journal_open(dir, NULL, NULL, &j, &e) < 0);
  assert_non_null(strstr(e.msg, path));
  write_file(path, junk, 1000); /* not a whole number of pages */
  assert_true(lm_journal_open(dir, NULL, NULL, &j, &e) < 0);
  assert_non_null(strstr(e.msg, "truncated"));
  rmdir_all(dir);
  /* a real journal cut in half */
  assert_int_equal(lm_journal_open(dir, NULL, NULL, &j, &e), 0);
  static char big[3000];
  memset(big, 'x', sizeof big);
  for (uint64_t k = 0; k < 200; k++) lm_journal_put(j, LM_J_ARRAY, 1, k, big, sizeof big);
  lm_journal_close(j);
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  assert_true(st.st_size > 100000);
  assert_int_equal(truncate(path, st.st_size / 2), 0);
  int rc = lm_journal_open(dir, NULL, NULL, &j, &e);
  if (rc == 0) { /* page-aligned: quick_check or the read must catch it */
    seen s = {0};
    rc = lm_journal_load(j, collect, &s, &e);
    lm_journal_close(j);
  }
  assert_true(rc < 0);
  assert_non_null(strstr(e.msg, "journal.db"));
  rmdir_all(dir);
}

static void test_registry_restore_revive(void **state) {
  (void)state;
  static const char *kinds[2] = {"cpu", "cpu"};
  static uint64_t caps[2] = {1 << 20, 1 << 20};
  lm_registry *r = lm_registry_create();
  lm_worker_spec sp = {.host = "h", .pid = 5, .slice = "s", .ndevices = 2, .kinds = kinds, .capacities = caps};
  uint32_t devs0[2] = {2, 3}, devs1[2] = {0, 1};
  lm_err e;
  assert_int_equal(lm_registry_restore_worker(r, 1, &sp, devs0, 4, 0, "x", &e), LOOM_INVALID_ARGUMENT); /* order */
  assert_int_equal(lm_registry_restore_worker(r, 0, &sp, devs0, 4, 0, "waiting", &e), 0);
  assert_int_equal(lm_registry_restore_worker(r, 1, &sp, devs1, 9, 0, "waiting", &e), 0);
  assert_int_equal(lm_registry_device_count(r), 4);
  assert_int_equal(lm_registry_device(r, 2)->worker, 0);
  assert_int_equal(lm_registry_device(r, 1)->worker, 1);
  assert_false(lm_registry_device_healthy(r, 0));
  assert_string_equal(lm_registry_device_reason(r, 0), "waiting");
  assert_int_equal(lm_registry_revive(r, 1, 77, "127.0.0.1:5", 10, &e), 0);
  assert_true(lm_registry_device_healthy(r, 0) && lm_registry_device_healthy(r, 1));
  assert_int_equal(lm_registry_worker(r, 1)->epoch, 9);
  assert_int_equal(lm_registry_worker(r, 1)->pid, 77);
  assert_int_equal(lm_registry_revive(r, 1, 77, "", 10, &e), LOOM_INVALID_ARGUMENT); /* alive already */
  assert_true(lm_registry_epoch_floor(r, 0) >= 9); /* new registrations get fresh epochs */
  uint32_t id;
  assert_int_equal(lm_registry_add_worker(r, &sp, 0, &id, &e), 0);
  assert_true(lm_registry_worker(r, id)->epoch > 9);
  assert_int_equal(lm_registry_worker(r, id)->device_ids[0], 4);
  lm_registry_destroy(r);
}

int main(void) {
  srandom((unsigned)time(NULL) ^ (unsigned)getpid());
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_put_del_load),
      cmocka_unit_test(test_lazy_ops_ride_along),
      cmocka_unit_test(test_second_opener_refused),
      cmocka_unit_test(test_damaged_files_refused),
      cmocka_unit_test(test_registry_restore_revive),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
