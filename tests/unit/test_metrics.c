/* The controller's metrics module (src/controller/ctl_metrics.c): label values escaped as the
 * Prometheus text format requires, the latency histogram's buckets cumulative with count and
 * sum consistent, snapshot references, and the text buffer growing past its first block. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "controller/ctl_metrics.h"

static void test_label_escaping(void **state) {
  (void)state;
  lm_met_buf b = {0};
  lm_met_label(&b, "a\\b\"c\nd");
  assert_false(b.failed);
  assert_string_equal(b.p, "\"a\\\\b\\\"c\\nd\"");
  free(b.p);
}

static void test_histogram_is_cumulative(void **state) {
  (void)state;
  lm_met_counters *m = calloc(1, sizeof *m);
  lm_met_launch_done(m, LM_MET_OK, 50000);          /* 50 us: the first bucket */
  lm_met_launch_done(m, LM_MET_FAILED, 3000000);    /* 3 ms: le 0.005 */
  lm_met_launch_done(m, LM_MET_CANCELLED, 20000000000ull); /* 20 s: only +Inf */
  lm_met_buf b = {0};
  lm_met_render(&b, m, NULL, 0);
  assert_non_null(strstr(b.p, "loom_launch_duration_seconds_bucket{le=\"0.0001\"} 1\n"));
  assert_non_null(strstr(b.p, "loom_launch_duration_seconds_bucket{le=\"0.0025\"} 1\n"));
  assert_non_null(strstr(b.p, "loom_launch_duration_seconds_bucket{le=\"0.005\"} 2\n"));
  assert_non_null(strstr(b.p, "loom_launch_duration_seconds_bucket{le=\"10\"} 2\n"));
  assert_non_null(strstr(b.p, "loom_launch_duration_seconds_bucket{le=\"+Inf\"} 3\n"));
  assert_non_null(strstr(b.p, "loom_launch_duration_seconds_count 3\n"));
  assert_non_null(strstr(b.p, "loom_launch_duration_seconds_sum 20.003050000\n"));
  assert_non_null(strstr(b.p, "loom_launches_finished_total{state=\"succeeded\"} 1\n"));
  assert_non_null(strstr(b.p, "loom_launches_finished_total{state=\"failed\"} 1\n"));
  assert_non_null(strstr(b.p, "loom_launches_finished_total{state=\"cancelled\"} 1\n"));
  assert_null(strstr(b.p, "loom_devices")); /* no snapshot: no state metrics */
  free(b.p);
  free(m);
}

static void test_snapshot_render_and_refs(void **state) {
  (void)state;
  lm_met_counters m = {0};
  lm_met_snapshot *s = lm_met_snapshot_new(200, 2000);
  assert_non_null(s);
  s->nworkers = 200;
  for (uint32_t i = 0; i < 200; i++) {
    s->workers[i].id = i;
    s->workers[i].host = strdup("h\"x");
    s->workers[i].slice = strdup("s");
    s->workers[i].problem = strdup("");
    s->workers[i].alive = i % 2;
    s->workers[i].collectives.calls[4] = i;          /* collective_permute */
    s->workers[i].collectives.bytes[0] = 4ull * i;   /* all_reduce */
    s->workers[i].collectives.nanos = 1500000000ull;
    s->workers[i].collectives.dp_received = 7;
  }
  s->ndevices = 2000;
  for (uint32_t i = 0; i < 2000; i++) {
    s->devices[i] = (lm_met_device){.id = i, .worker = i / 10, .capacity = 1ull << 31, .used = i, .healthy = i < 1000};
    strcpy(s->devices[i].kind, "cpu");
  }
  lm_met_snapshot_ref(s);
  lm_met_snapshot_unref(s); /* still held once */
  lm_met_buf b = {0};
  lm_met_render(&b, &m, s, 1500);
  assert_false(b.failed);
  assert_true(b.len > 4096); /* grew past the first block */
  assert_non_null(strstr(b.p, "loom_workers{state=\"alive\"} 100\nloom_workers{state=\"lost\"} 100\n"));
  assert_non_null(strstr(b.p, "loom_devices{state=\"healthy\"} 1000\n"));
  assert_non_null(strstr(b.p, "loom_device_memory_used_bytes{device=\"1999\",worker=\"199\",kind=\"cpu\",slice=\"s\","
                              "host=\"h\\\"x\"} 1999\n"));
  assert_non_null(strstr(b.p, "loom_metrics_snapshot_age_seconds 1.500\n"));
  assert_non_null(strstr(b.p, "# TYPE loom_worker_collective_calls_total counter\n"));
  assert_non_null(strstr(b.p, "loom_worker_collective_calls_total{worker=\"199\",op=\"collective_permute\"} 199\n"));
  assert_non_null(strstr(b.p, "loom_worker_collective_bytes_total{worker=\"3\",op=\"all_reduce\"} 12\n"));
  assert_non_null(strstr(b.p, "loom_worker_collective_seconds_total{worker=\"0\"} 1.500000000\n"));
  assert_non_null(strstr(b.p, "loom_worker_dataplane_bytes_total{worker=\"5\",direction=\"received\"} 7\n"));
  free(b.p);
  lm_met_snapshot_unref(s);
  lm_met_snapshot_unref(NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_label_escaping),
      cmocka_unit_test(test_histogram_is_cumulative),
      cmocka_unit_test(test_snapshot_render_and_refs),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
