/* A local cluster for the distributed benchmarks: a controller and W workers x D devices forked
 * from the benchmark itself (the same code as `loom controller` / `loom worker`), stopped at the
 * end. Header-only, included by bench_launch.c, bench_transfer.c and control_rtt.c. */
#ifndef LM_BENCH_CLUSTER_H
#define LM_BENCH_CLUSTER_H

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "bench_util.h"
#include "common/log.h"
#include "controller/controller.h"
#include "loom/loom.h"
#include "net/auth.h"
#include "worker/worker.h"

typedef struct bench_cluster {
  pid_t pids[17];
  int n;
  char addr[128];
  bool auth;                            /* a cluster secret and a client token (bench_cluster_start_auth) */
  char secret[64], tokens[64];          /* their files, removed by bench_cluster_stop */
  char token[LM_TOKEN_STR_LEN + 1];
} bench_cluster;

/* Set before starting: the controller keeps its journal there (--state; bench_journal.c); this
 * many standby workers (`loom worker --standby`, as many devices) join after the others; and the
 * controller takes no snapshots of puts (--no-snapshots). */
static const char *bench_cluster_state_dir __attribute__((unused));
static int bench_cluster_standbys __attribute__((unused));
static bool bench_cluster_no_snapshots __attribute__((unused));

static inline void bench_cluster_stop(bench_cluster *bc) {
  for (int i = bc->n - 1; i >= 0; i--) kill(bc->pids[i], SIGTERM);
  for (int i = bc->n - 1; i >= 0; i--) waitpid(bc->pids[i], NULL, 0);
  bc->n = 0;
  if (bc->auth) {
    unlink(bc->secret);
    unlink(bc->tokens);
    char lk[80];
    snprintf(lk, sizeof lk, "%s.lock", bc->tokens);
    unlink(lk);
  }
}

/* The token to present (NULL without authentication). */
static inline void bench_cluster_auth_options(const bench_cluster *bc, loom_connect_options *o) {
  if (!bc->auth) return;
  o->auth_token = bc->token;
  o->auth_token_size = strlen(bc->token);
}

/* Starts the cluster and waits until all W * D devices are listed; with auth, the controller
 * has a cluster secret (the workers prove it) and a token store (the clients present a token),
 * as `loom up` sets it up. Exits on failure. */
static inline void bench_cluster_start_auth(bench_cluster *bc, int workers, int devices, uint64_t device_memory,
                                            bool auth) {
  memset(bc, 0, sizeof *bc);
  setenv("LOOM_LOG_LEVEL", "error", 0);
  if (auth) {
    lm_err e;
    lm_token_store st = {0};
    bc->auth = true;
    snprintf(bc->secret, sizeof bc->secret, "/tmp/loom-bench-%d.secret", (int)getpid());
    snprintf(bc->tokens, sizeof bc->tokens, "/tmp/loom-bench-%d.tokens", (int)getpid());
    if (lm_auth_secret_create(bc->secret, &e) < 0 || lm_tokens_add(&st, "bench", 0, 0, "cli", bc->token, &e) < 0 ||
        lm_tokens_save(bc->tokens, &st, &e) < 0) {
      fprintf(stderr, "bench: cannot make credentials: %s\n", e.msg);
      exit(1);
    }
    lm_tokens_free(&st);
  }
  char addrfile[64];
  snprintf(addrfile, sizeof addrfile, "/tmp/loom-bench-%d.addr", (int)getpid());
  unlink(addrfile);
  pid_t ctl = fork();
  if (ctl == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    prctl(PR_SET_NAME, "b-controller"); /* (its threads are told apart in perf) */
    lm_log_init("controller");
    lm_controller_config cfg;
    lm_controller_config_default(&cfg);
    cfg.listen = "127.0.0.1:0";
    cfg.address_file = addrfile;
    if (bc->auth) cfg.secret_file = bc->secret, cfg.tokens_file = bc->tokens;
    cfg.state_dir = bench_cluster_state_dir;
    cfg.no_snapshots = bench_cluster_no_snapshots;
    lm_err e;
    _exit(lm_controller_run(&cfg, &e) < 0 ? 1 : 0);
  }
  bc->pids[bc->n++] = ctl;
  for (int t = 0; t < 500; t++) {
    FILE *f = fopen(addrfile, "r");
    if (f) {
      if (fscanf(f, "%127s", bc->addr) == 1) {
        fclose(f);
        break;
      }
      fclose(f);
    }
    usleep(10000);
  }
  unlink(addrfile);
  if (!bc->addr[0]) {
    fprintf(stderr, "bench: the controller did not start\n");
    bench_cluster_stop(bc);
    exit(1);
  }
  for (int w = 0; w < workers + bench_cluster_standbys && bc->n < 17; w++) {
    pid_t p = fork();
    if (p == 0) {
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      prctl(PR_SET_NAME, "b-worker");
      lm_log_init("worker");
      lm_worker_config cfg;
      lm_worker_config_default(&cfg);
      cfg.controller = bc->addr;
      cfg.devices = (uint32_t)devices;
      if (bc->auth) cfg.secret_file = bc->secret;
      if (device_memory) cfg.device_memory = device_memory;
      cfg.standby = w >= workers;
      lm_err e;
      _exit(lm_worker_run(&cfg, &e) < 0 ? 1 : 0);
    }
    bc->pids[bc->n++] = p;
  }
  loom_connect_options o;
  loom_connect_options_initialize(&o);
  o.address = bc->addr;
  bench_cluster_auth_options(bc, &o);
  for (int t = 0; t < 1000; t++) {
    loom_client *c;
    if (loom_connect(&o, &c) == LOOM_OK) {
      int32_t n = 0, healthy = 0;
      loom_device_count(c, &n);
      for (int32_t i = 0; i < n; i++) {
        loom_device_desc d = {.struct_size = sizeof d};
        loom_device_info(c, i, &d);
        healthy += d.healthy;
      }
      loom_disconnect(c);
      if (healthy == workers * devices) {
        usleep(100000); /* the data-plane addresses follow registration */
        return;
      }
    }
    usleep(10000);
  }
  fprintf(stderr, "bench: the workers did not register\n");
  bench_cluster_stop(bc);
  exit(1);
}

static inline void bench_cluster_start(bench_cluster *bc, int workers, int devices, uint64_t device_memory) {
  bench_cluster_start_auth(bc, workers, devices, device_memory, false);
}

static inline loom_client *bench_connect(const bench_cluster *bc) {
  loom_connect_options o;
  loom_connect_options_initialize(&o);
  o.address = bc->addr;
  bench_cluster_auth_options(bc, &o);
  o.timeout_ms = 120000;
  loom_client *c;
  if (loom_connect(&o, &c) != LOOM_OK) {
    fprintf(stderr, "bench: %s\n", loom_errmsg(NULL));
    exit(1);
  }
  return c;
}

#endif
