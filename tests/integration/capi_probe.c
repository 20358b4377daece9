/* Exercises corners of the C client API against whatever address the test gives it; each mode
 * prints "ok" lines the test checks (tests/integration/test_c_api.py).
 *   capi_probe contract ADDR      argument checks, struct_size handling, errors, refresh
 *   capi_probe timeout ADDR       connect to a peer that never answers: LOOM_TIMEOUT in time
 *   capi_probe interrupt ADDR     the same, stopped by the interrupt hook: LOOM_CANCELLED
 *   capi_probe threads ADDR       8 threads refreshing and reading one client at once */
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include "loom/loom.h"

#define CHECK(cond)                                                         \
  do {                                                                      \
    if (!(cond)) {                                                          \
      fprintf(stderr, "capi_probe: check failed at line %d: %s\n", __LINE__, #cond); \
      return 1;                                                             \
    }                                                                       \
  } while (0)

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* An older caller's view of loom_device_desc: the fields up to memory_capacity only. */
typedef struct old_desc {
  size_t struct_size;
  int32_t id;
  const char *kind;
  int32_t worker_id;
  int32_t local_index;
  const char *worker_host;
  int64_t worker_pid;
  const char *slice;
  uint64_t memory_capacity;
} old_desc;

static int contract(const char *addr) {
  loom_client *c = (loom_client *)1;
  loom_connect_options o;
  loom_connect_options_initialize(&o);
  CHECK(o.struct_size == sizeof o && o.timeout_ms > 0);
  o.struct_size = 3; /* not initialized properly */
  CHECK(loom_connect(&o, &c) == LOOM_INVALID_ARGUMENT && c == NULL);
  CHECK(strstr(loom_errmsg(NULL), "struct_size") != NULL);
  CHECK(loom_connect(NULL, NULL) == LOOM_INVALID_ARGUMENT);
  loom_connect_options_initialize(&o);
  o.address = "127.0.0.1:notaport";
  CHECK(loom_connect(&o, &c) == LOOM_INVALID_ARGUMENT && c == NULL);
  CHECK(strstr(loom_errmsg(NULL), "port") != NULL);
  o.address = addr;
  CHECK(loom_connect(&o, &c) == LOOM_OK && c != NULL);
  CHECK(strcmp(loom_errmsg(c), "") == 0);
  CHECK(loom_client_session(c) != 0);
  CHECK(strcmp(loom_client_address(c), addr) == 0);
  int32_t n = -1;
  CHECK(loom_device_count(c, &n) == LOOM_OK && n > 0);
  CHECK(loom_device_count(c, NULL) == LOOM_INVALID_ARGUMENT);
  loom_device_desc d;
  memset(&d, 0, sizeof d);
  CHECK(loom_device_info(c, 0, &d) == LOOM_INVALID_ARGUMENT); /* struct_size 0 */
  d.struct_size = sizeof d;
  CHECK(loom_device_info(c, -1, &d) == LOOM_NOT_FOUND);
  CHECK(loom_device_info(c, n, &d) == LOOM_NOT_FOUND);
  CHECK(strstr(loom_errmsg(c), "no device") != NULL);
  for (int32_t i = 0; i < n; i++) {
    CHECK(loom_device_info(c, i, &d) == LOOM_OK);
    CHECK(d.id == i && strcmp(d.kind, "cpu") == 0 && d.memory_capacity > 0 && d.struct_size == sizeof d);
  }
  old_desc od = {.struct_size = sizeof od};
  CHECK(loom_device_info(c, 0, (loom_device_desc *)&od) == LOOM_OK); /* fills only what an old caller has (ASan checks) */
  CHECK(od.struct_size == sizeof od && od.id == 0 && od.memory_capacity > 0);
  CHECK(loom_refresh_devices(c) == LOOM_OK);
  CHECK(loom_device_count(c, &n) == LOOM_OK && n > 0);
  CHECK(strcmp(loom_strerror(LOOM_VERSION_MISMATCH), "protocol version mismatch") == 0);
  CHECK(strcmp(loom_status_name(LOOM_TIMEOUT), "TIMEOUT") == 0);
  CHECK(strcmp(loom_version(), "") != 0);
  loom_disconnect(c);
  loom_disconnect(NULL);
  printf("ok contract (%d devices)\n", n);
  return 0;
}

static int timeout_mode(const char *addr) {
  loom_connect_options o;
  loom_connect_options_initialize(&o);
  o.address = addr;
  o.timeout_ms = 500;
  loom_client *c;
  double t0 = now_s();
  loom_status st = loom_connect(&o, &c);
  double dt = now_s() - t0;
  CHECK(st == LOOM_TIMEOUT && c == NULL);
  CHECK(dt >= 0.45 && dt < 5.0);
  printf("ok timeout after %.2f s: %s\n", dt, loom_errmsg(NULL));
  return 0;
}

static double g_t0;
static int calls;
static int stop_after_300ms(void *arg) {
  calls++;
  return now_s() - g_t0 > 0.3;
}

static int interrupt_mode(const char *addr) {
  loom_connect_options o;
  loom_connect_options_initialize(&o);
  o.address = addr;
  o.timeout_ms = -1; /* no limit: only the hook ends the wait */
  o.interrupt = stop_after_300ms;
  loom_client *c;
  g_t0 = now_s();
  loom_status st = loom_connect(&o, &c);
  double dt = now_s() - g_t0;
  CHECK(st == LOOM_CANCELLED && c == NULL);
  CHECK(dt >= 0.3 && dt < 5.0 && calls >= 3);
  printf("ok interrupted after %.2f s (%d polls): %s\n", dt, calls, loom_errmsg(NULL));
  return 0;
}

static void *hammer(void *arg) {
  loom_client *c = arg;
  for (int k = 0; k < 50; k++) {
    if (loom_refresh_devices(c) != LOOM_OK) return (void *)1;
    int32_t n;
    loom_device_count(c, &n);
    loom_device_desc d = {.struct_size = sizeof d};
    if (n > 0 && loom_device_info(c, k % n, &d) != LOOM_OK) return (void *)1;
  }
  return NULL;
}

static int threads_mode(const char *addr) {
  loom_connect_options o;
  loom_connect_options_initialize(&o);
  o.address = addr;
  loom_client *c;
  CHECK(loom_connect(&o, &c) == LOOM_OK);
  pthread_t t[8];
  for (int i = 0; i < 8; i++) pthread_create(&t[i], NULL, hammer, c);
  int bad = 0;
  for (int i = 0; i < 8; i++) {
    void *r;
    pthread_join(t[i], &r);
    bad += r != NULL;
  }
  loom_disconnect(c);
  CHECK(bad == 0);
  printf("ok threads\n");
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: capi_probe contract|timeout|interrupt|threads ADDR\n");
    return 2;
  }
  if (!strcmp(argv[1], "contract")) return contract(argv[2]);
  if (!strcmp(argv[1], "timeout")) return timeout_mode(argv[2]);
  if (!strcmp(argv[1], "interrupt")) return interrupt_mode(argv[2]);
  if (!strcmp(argv[1], "threads")) return threads_mode(argv[2]);
  return 2;
}
