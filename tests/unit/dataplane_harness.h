/* Test harness for the data plane: runs a "cluster" of worker processes (forked from the test,
 * each with its own UCX endpoint and one thread per device), exchanging their addresses
 * through a temporary directory as the controller would. Every child has an alarm; the parent
 * kills whatever outlives the deadline and removes the directory. Header-only, for
 * tests/unit/test_dataplane*.c. */
#ifndef LM_TEST_DATAPLANE_HARNESS_H
#define LM_TEST_DATAPLANE_HARNESS_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "dataplane/dataplane.h"
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#define H_LEAK_CHECK() __lsan_do_recoverable_leak_check() /* children leave by _exit */
#else
#define H_LEAK_CHECK() 0
#endif

#define H_MAXPROC 8
#define H_ID(proc) ((uint64_t)(proc) + 10) /* worker ids are not process indices on purpose */

typedef struct h_worker {
  int proc, nproc, ndev;
  lm_dp *dp;
  char dir[PATH_MAX];
  void *arg;                  /* the test's */
} h_worker;

typedef struct h_opts {
  int nproc, ndev;
  int timeout_ms;             /* the endpoints' default wait timeout (0: 20000) */
  const char *tls;            /* UCX_TLS for the children, or NULL */
  int peer_errors;            /* LOOM_DP_PEER_ERRORS=1 in the children */
  int (*body)(h_worker *w);   /* in each child; returns the number of failed checks */
  /* in the parent while the children run (may kill some); returns failed checks */
  int (*parent)(pid_t *pids, int n, const char *dir, void *arg);
  void *arg;
  int deadline_s;             /* the whole run (0: 90) */
  uint32_t expect_killed;     /* bit i: child i is expected to die by SIGKILL */
  int keyed;                  /* peers added with pair keys (h_pair_key), endpoints require them */
  int late_peer;              /* > 0: proc 0 adds this proc only when its body calls h_add_peer */
  const char *const *hosts;   /* [nproc] host labels (lm_dp_config.host_label), or NULL */
  const char *const *slices;  /* [nproc] slice labels, or NULL */
  int coll;                   /* lm_dp_config.coll_algo */
  const int *colls;           /* [nproc] per-process coll_algo instead, or NULL */
} h_opts;

/* The test's data-plane key of processes a and b (what the controller derives in a cluster). */
static inline void h_pair_key(int a, int b, uint8_t key[LM_DP_KEY_SIZE]) {
  int lo = a < b ? a : b, hi = a < b ? b : a;
  for (int i = 0; i < LM_DP_KEY_SIZE; i++) key[i] = (uint8_t)(0x5a ^ (lo * 31 + hi * 7 + i * 13));
}


static atomic_int h_fails;

#define H_CHECK(cond, ...)                                                   \
  do {                                                                       \
    if (!(cond)) {                                                           \
      fprintf(stderr, "[pid %d] %s:%d: check failed: %s: ", (int)getpid(),   \
              __FILE__, __LINE__, #cond);                                    \
      fprintf(stderr, __VA_ARGS__);                                          \
      fprintf(stderr, "\n");                                                 \
      atomic_fetch_add(&h_fails, 1);                                         \
    }                                                                        \
  } while (0)

static inline double h_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static inline int h_write_file(const char *dir, const char *name, const void *data, size_t len) {
  char tmp[PATH_MAX + 64], path[PATH_MAX + 64];
  snprintf(tmp, sizeof tmp, "%s/%s.tmp", dir, name);
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(tmp, "wb");
  if (!f) return -1;
  size_t w = fwrite(data, 1, len, f);
  if (fclose(f) != 0 || w != len) return -1;
  return rename(tmp, path);
}

/* Reads dir/name (waiting up to wait_s for it to appear); returns bytes read or -1. */
static inline long h_read_file(const char *dir, const char *name, void *buf, size_t cap, double wait_s) {
  char path[PATH_MAX + 64];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  double t0 = h_now();
  FILE *f;
  while (!(f = fopen(path, "rb"))) {
    if (h_now() - t0 > wait_s) return -1;
    usleep(2000);
  }
  size_t n = fread(buf, 1, cap, f);
  fclose(f);
  return (long)n;
}

static inline void h_child(const h_opts *o, int proc, const char *dir) {
  alarm((unsigned)(o->deadline_s ? o->deadline_s : 90) + 5);
  if (o->tls) setenv("UCX_TLS", o->tls, 1);
  if (o->peer_errors) setenv("LOOM_DP_PEER_ERRORS", "1", 1);
  h_worker w = {.proc = proc, .nproc = o->nproc, .ndev = o->ndev, .arg = o->arg};
  snprintf(w.dir, sizeof w.dir, "%s", dir);
  lm_dp_config c;
  lm_dp_config_init(&c);
  c.self_id = H_ID(proc);
  c.num_devices = (uint32_t)o->ndev;
  c.timeout_ms = o->timeout_ms ? o->timeout_ms : 20000;
  c.require_keys = o->keyed;
  c.host_label = o->hosts ? o->hosts[proc] : NULL;
  c.slice_label = o->slices ? o->slices[proc] : NULL;
  c.coll_algo = o->colls ? o->colls[proc] : o->coll;
  lm_err e;
  if (lm_dp_create(&c, &w.dp, &e) < 0) {
    fprintf(stderr, "child %d: lm_dp_create: %s\n", proc, e.msg);
    _exit(2);
  }
  const void *blob;
  size_t len;
  lm_dp_address(w.dp, &blob, &len);
  char name[32];
  snprintf(name, sizeof name, "addr.%d", proc);
  if (h_write_file(dir, name, blob, len) < 0) _exit(2);
  for (int i = 0; i < o->nproc; i++) {
    if (i == proc || (proc == 0 && i == o->late_peer)) continue;
    uint8_t buf[65536];
    snprintf(name, sizeof name, "addr.%d", i);
    long n = h_read_file(dir, name, buf, sizeof buf, 30);
    uint64_t id = 0;
    uint8_t key[LM_DP_KEY_SIZE];
    h_pair_key(proc, i, key);
    if (n < 0 || lm_dp_peer_add_keyed(w.dp, buf, (size_t)n, o->keyed ? key : NULL, &id, &e) < 0 || id != H_ID(i)) {
      fprintf(stderr, "child %d: adding peer %d: %s\n", proc, i, n < 0 ? "no address" : e.msg);
      _exit(2);
    }
  }
  int fails = o->body(&w);
  fails += atomic_load(&h_fails);
  lm_dp_destroy(w.dp);
  if (H_LEAK_CHECK()) {
    fprintf(stderr, "child %d: leaks\n", proc);
    fails++;
  }
  _exit(fails ? 1 : 0);
}

/* Runs the cluster; returns the number of failures (children that failed, checks in the
 * parent hook, the deadline). */
static inline int h_run(const h_opts *o) {
  char dir[] = "/tmp/loom-dptest-XXXXXX";
  if (!mkdtemp(dir)) return 1;
  fflush(stdout);
  fflush(stderr);
  pid_t pids[H_MAXPROC];
  for (int i = 0; i < o->nproc; i++) {
    pids[i] = fork();
    if (pids[i] == 0) h_child(o, i, dir);
  }
  int fails = 0;
  if (o->parent) fails += o->parent(pids, o->nproc, dir, o->arg);
  double deadline = h_now() + (o->deadline_s ? o->deadline_s : 90);
  int left = o->nproc, status[H_MAXPROC] = {0};
  bool done[H_MAXPROC] = {0};
  while (left > 0) {
    int st;
    pid_t p = waitpid(-1, &st, WNOHANG);
    if (p > 0) {
      for (int i = 0; i < o->nproc; i++)
        if (pids[i] == p) {
          done[i] = true;
          status[i] = st;
          left--;
        }
      continue;
    }
    if (h_now() > deadline) {
      fprintf(stderr, "harness: deadline passed, killing the cluster\n");
      for (int i = 0; i < o->nproc; i++)
        if (!done[i]) kill(pids[i], SIGKILL);
      fails++;
      deadline = h_now() + 30;
    }
    usleep(5000);
  }
  for (int i = 0; i < o->nproc; i++) {
    int st = status[i];
    bool killed = WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL;
    if (o->expect_killed & (1u << i)) {
      if (!killed) {
        fprintf(stderr, "harness: child %d should have been killed (status 0x%x)\n", i, st);
        fails++;
      }
    } else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      fprintf(stderr, "harness: child %d failed (%s %d)\n", i, WIFEXITED(st) ? "exit" : "signal",
              WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
      fails++;
    }
  }
  char cmd[PATH_MAX + 16];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) fprintf(stderr, "harness: could not remove %s\n", dir);
  return fails;
}

/* Runs fn(w, dev) on one thread per device of this worker and joins them. */
typedef struct h_thr {
  h_worker *w;
  int dev;
  int (*fn)(h_worker *, int);
  int fails;
} h_thr;

static void *h_thr_main(void *a) {
  h_thr *t = a;
  t->fails = t->fn(t->w, t->dev);
  return NULL;
}

static inline int h_threads(h_worker *w, int n, int (*fn)(h_worker *, int)) {
  pthread_t th[64];
  h_thr ts[64];
  for (int d = 0; d < n; d++) {
    ts[d] = (h_thr){.w = w, .dev = d, .fn = fn};
    pthread_create(&th[d], NULL, h_thr_main, &ts[d]);
  }
  int fails = 0;
  for (int d = 0; d < n; d++) {
    pthread_join(th[d], NULL);
    fails += ts[d].fails;
  }
  return fails;
}

/* The group of every device of every worker, ordered by (proc, dev). */
/* Adds proc i as a peer of w now, keyed (for a late_peer run). 0 on success. */
static inline int h_add_peer(h_worker *w, int i) {
  uint8_t buf[65536], key[LM_DP_KEY_SIZE];
  char name[32];
  snprintf(name, sizeof name, "addr.%d", i);
  long n = h_read_file(w->dir, name, buf, sizeof buf, 30);
  lm_err e;
  h_pair_key(w->proc, i, key);
  if (n < 0 || lm_dp_peer_add_keyed(w->dp, buf, (size_t)n, key, NULL, &e) < 0) return -1;
  return 0;
}

static inline lm_dp_group *h_full_group(h_worker *w) {
  lm_dp_member m[H_MAXPROC * 16];
  int n = 0;
  for (int p = 0; p < w->nproc; p++)
    for (int d = 0; d < w->ndev; d++) m[n++] = (lm_dp_member){H_ID(p), (uint32_t)d};
  lm_dp_group *g = NULL;
  lm_err e;
  if (lm_dp_group_get(w->dp, m, (uint32_t)n, &g, &e) < 0) {
    fprintf(stderr, "group: %s\n", e.msg);
    return NULL;
  }
  return g;
}

#endif
