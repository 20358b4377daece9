/* Launch cost versus cluster size, on simulated workers (`loom worker --simulate`, which execute
 * nothing): a real controller and a real client, and W simulated workers x 8 devices in one
 * process, for W in 8, 64, 256, 1024. Per cluster size: the latency of one launch of a shard_map
 * program over every device (x -> x + 1 on one element per device; launch, wait, repeat), the
 * controller's CPU time per launch (user + system, and user alone: the rest is the kernel's TCP
 * work, which on loopback includes the receiving end's), and the bytes the controller
 * writes per launch (its RUN messages and the reply), and the rate of N chained launches issued
 * without waiting (then one wait). The peer is the paper's figure: Pathways
 * matched multi-controller JAX on 128 TPUs while its dispatch stayed under 2.3 ms per step.
 * The controller's CPU per launch has its idle CPU (heartbeats, 1 s interval) over the same wall
 * time taken out
 * (Barham et al., "Pathways", MLSys 2022, section 5.2), printed beside every row.
 * Each size runs twice: direct dispatch (one RUN per worker) and hierarchical dispatch (one
 * RELAY_RUN per group of 32 workers, whose relay forwards the RUNs and combines the RUN_DONEs;
 * docs/scale.md), in the same run.
 *   build/bench/bench_scale [N] [W...]   (N launches per size, default 200; sizes default 8 64 256 1024)
 *   LOOM_BENCH_RELAY=direct|relay runs one mode only; LOOM_BENCH_RELAY_GROUP=K sets the group size */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include "bench_client.h"
#include "common/log.h"
#include "controller/controller.h"
#include "loom/loom.h"
#include "worker/sim.h"
#include "worker/worker.h"

#define DEVICES 8
#define PATHWAYS_BUDGET_MS 2.3

static void check(loom_client *c, loom_status st, const char *what) {
  if (st == LOOM_OK) return;
  fprintf(stderr, "bench_scale: %s: %s\n", what, loom_errmsg(c));
  exit(1);
}

/* A shard_map program over p devices: x -> x + 1, one element per device. */
static char *step_program(int p) {
  char *t = malloc(4096);
  snprintf(t, 4096,
           "module @step attributes {mhlo.num_partitions = %d : i32, mhlo.num_replicas = 1 : i32} {\n"
           "  sdy.mesh @mesh = <[\"d\"=%d]>\n"
           "  func.func public @main(%%arg0: tensor<%dxi32>) -> tensor<%dxi32> {\n"
           "    %%0 = sdy.manual_computation(%%arg0) in_shardings=[<@mesh, [{\"d\"}]>] out_shardings=[<@mesh, "
           "[{\"d\"}]>] manual_axes={\"d\"} (%%a: tensor<1xi32>) {\n"
           "      %%c = stablehlo.constant dense<1> : tensor<1xi32>\n"
           "      %%1 = stablehlo.add %%a, %%c : tensor<1xi32>\n"
           "      sdy.return %%1 : tensor<1xi32>\n"
           "    } : (tensor<%dxi32>) -> tensor<%dxi32>\n"
           "    return %%0 : tensor<%dxi32>\n  }\n}\n",
           p, p, p, p, p, p, p);
  return t;
}

/* CPU seconds (user + system, and user alone) and bytes written (wchar) of a process so far. */
static void proc_usage(pid_t pid, double *cpu_s, double *user_s, double *wbytes) {
  char path[64], buf[2048];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  *cpu_s = 0, *user_s = 0, *wbytes = 0;
  if (f) {
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    char *p = strrchr(buf, ')');
    unsigned long ut = 0, st = 0;
    /* after the name: state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime */
    if (p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) == 2)
      *cpu_s = (double)(ut + st) / (double)sysconf(_SC_CLK_TCK), *user_s = (double)ut / (double)sysconf(_SC_CLK_TCK);
  }
  snprintf(path, sizeof path, "/proc/%d/io", (int)pid);
  f = fopen(path, "r");
  if (f) {
    while (fgets(buf, sizeof buf, f))
      if (!strncmp(buf, "wchar:", 6)) *wbytes = strtod(buf + 6, NULL);
    fclose(f);
  }
}

typedef struct row {
  int workers;
  bool relay;
  double p50_ms, p99_ms, cpu_ms, user_ms, kbytes, start_s, rate, compile_s;
} row;

static row measure(int workers, int n, bool relay, int group) {
  row r = {.workers = workers, .relay = relay};
  char addrfile[64];
  snprintf(addrfile, sizeof addrfile, "/tmp/loom-bench-scale-%d.addr", (int)getpid());
  unlink(addrfile);
  double t0 = bench_now();
  pid_t ctl = fork();
  if (ctl == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    lm_log_init("controller");
    lm_controller_config cfg;
    lm_controller_config_default(&cfg);
    cfg.listen = "127.0.0.1:0";
    cfg.address_file = addrfile;
    cfg.heartbeat_timeout_ms = 30000; /* thousands of workers in one process on a shared machine */
    cfg.heartbeat_interval_ms = 1000;
    cfg.relay_min_workers = relay ? 2 : 0;
    cfg.relay_group = (uint32_t)group;
    lm_err e;
    _exit(lm_controller_run(&cfg, &e) < 0 ? 1 : 0);
  }
  char addr[128] = "";
  for (int t = 0; t < 500 && !addr[0]; t++) {
    FILE *f = fopen(addrfile, "r");
    if (f) {
      if (fscanf(f, "%127s", addr) != 1) addr[0] = 0;
      fclose(f);
    }
    if (!addr[0]) usleep(10000);
  }
  unlink(addrfile);
  if (!addr[0]) {
    fprintf(stderr, "bench_scale: the controller did not start\n");
    exit(1);
  }
  pid_t sim = fork();
  if (sim == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    lm_log_init("sim");
    lm_worker_config cfg;
    lm_worker_config_default(&cfg);
    cfg.controller = addr;
    cfg.devices = DEVICES;
    lm_err e;
    _exit(lm_sim_run(&cfg, (uint32_t)workers, &e) < 0 ? 1 : 0);
  }
  loom_connect_options o;
  loom_connect_options_initialize(&o);
  o.address = addr;
  loom_client *c = NULL;
  int want = workers * DEVICES;
  for (int t = 0; t < 12000; t++) {
    if (!c && loom_connect(&o, &c) != LOOM_OK) c = NULL;
    if (c) {
      int32_t nd = 0;
      loom_device_count(c, &nd);
      if (nd == want) break;
      loom_disconnect(c); /* the device list is read once per connection */
      c = NULL;
    }
    usleep(10000);
  }
  if (!c) {
    fprintf(stderr, "bench_scale: %d simulated workers did not register\n", workers);
    exit(1);
  }
  r.start_s = bench_now() - t0;
  char *text = step_program(want);
  loom_executable *e;
  double tc = bench_now();
  check(c, loom_compile(c, text, strlen(text), NULL, &e), "compile");
  r.compile_s = bench_now() - tc;
  free(text);
  int32_t *zeros = calloc((size_t)want, sizeof *zeros);
  loom_array *x = bench_put_input(c, e, zeros, (size_t)want * sizeof *zeros);
  free(zeros);
  double *lat = malloc((size_t)n * sizeof *lat);
  double cpu0 = 0, u0 = 0, w0 = 0, cpu1, u1, w1, t1 = 0;
  /* the controller's CPU while idle (heartbeats of every worker), subtracted below: a slow launch
   * on a loaded machine would otherwise be charged for the heartbeats that arrived meanwhile */
  double ic0, iu0, iw0, ic1, iu1, iw1, it0 = bench_now();
  proc_usage(ctl, &ic0, &iu0, &iw0);
  usleep(2000000);
  proc_usage(ctl, &ic1, &iu1, &iw1);
  double idle_rate = (ic1 - ic0) / (bench_now() - it0), idle_urate = (iu1 - iu0) / (bench_now() - it0);
  for (int i = -20; i < n; i++) {
    if (i == 0) proc_usage(ctl, &cpu0, &u0, &w0), t1 = bench_now();
    double dt = bench_step(c, e, &x);
    if (i >= 0) lat[i] = dt * 1e3;
  }
  proc_usage(ctl, &cpu1, &u1, &w1);
  double wall = bench_now() - t1;
  cpu1 -= idle_rate * wall;
  u1 -= idle_urate * wall;
  bench_percentiles(lat, n, &r.p50_ms, &r.p99_ms);
  /* chained: n launches issued without waiting, then one wait (the controller pipelines them) */
  r.rate = n / bench_chain(c, e, &x, n);
  /* the releases' FREE_ARRAYS are part of each step, as in a training loop */
  r.cpu_ms = (cpu1 - cpu0) * 1e3 / n;
  r.user_ms = (u1 - u0) * 1e3 / n; /* the rest is the kernel's TCP work, both ends of loopback */
  r.kbytes = (w1 - w0) / 1024.0 / n;
  loom_array_release(x);
  loom_executable_destroy(e);
  loom_disconnect(c);
  free(lat);
  kill(sim, SIGTERM);
  waitpid(sim, NULL, 0);
  kill(ctl, SIGTERM);
  waitpid(ctl, NULL, 0);
  return r;
}

int main(int argc, char **argv) {
  bench_help(argc, argv,
             "usage: bench_scale [N] [W...]\n"
             "Launch latency, controller CPU and bytes per launch of a shard_map program over every device\n"
             "of W simulated workers x 8 devices (loom worker --simulate), beside the 2.3 ms dispatch budget\n"
             "of the Pathways paper. N launches per size (default 200); sizes default to 8 64 256 1024.\n");
  int n = argc > 1 ? atoi(argv[1]) : 200;
  if (n < 20) n = 20;
  int sizes[16] = {8, 64, 256, 1024}, ns = 4;
  if (argc > 2) {
    ns = 0;
    for (int i = 2; i < argc && ns < 16; i++) sizes[ns++] = atoi(argv[i]);
  }
  setenv("LOOM_LOG_LEVEL", "error", 0);
  const char *mode = getenv("LOOM_BENCH_RELAY");
  bool do_direct = !mode || strcmp(mode, "relay"), do_relay = !mode || strcmp(mode, "direct");
  int group = getenv("LOOM_BENCH_RELAY_GROUP") ? atoi(getenv("LOOM_BENCH_RELAY_GROUP")) : 32;
  if (group < 2) group = 32;
  printf("launch of x -> x + 1 over every device, %d launches per size (controller + simulated workers x %d devices)\n",
         n, DEVICES);
  printf("%8s %8s %8s %10s %10s %12s %12s %12s %12s %8s %10s   %s\n", "workers", "devices", "dispatch", "p50 ms", "p99 ms",
         "ctl CPU ms", "ctl user ms", "ctl KiB out", "chained/s", "start s", "compile s", "peer: Pathways budget");
  for (int i = 0; i < ns * 2; i++) {
    bool relay = i % 2;
    if ((relay && !do_relay) || (!relay && !do_direct)) continue;
    row r = measure(sizes[i / 2], n, relay, group);
    printf("%8d %8d %8s %10.3f %10.3f %12.3f %12.3f %12.1f %12.0f %8.1f %10.2f   %.1f ms (%s)\n", r.workers,
           r.workers * DEVICES, r.relay ? "relay" : "direct", r.p50_ms, r.p99_ms, r.cpu_ms, r.user_ms, r.kbytes, r.rate, r.start_s, r.compile_s, PATHWAYS_BUDGET_MS,
           r.cpu_ms <= PATHWAYS_BUDGET_MS ? "ctl CPU within" : "ctl CPU over");
    fflush(stdout);
  }
  return 0;
}
