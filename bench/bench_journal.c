/* The controller's journal (--state, docs/durability.md): what it costs and what it buys.
 *   1. Launch latency of a tiny program (x -> x + 1 on i32[8], one element per device) on 8
 *      devices of 2 workers, with the journal on beside the same cluster without one, measured
 *      alternately (off, on, off, on: the best of each) in the same run; and the rate of chained
 *      launches issued without waiting.
 *   2. With the journal: the controller is SIGKILLed while a client runs launch+wait in a loop,
 *      and started again at once with the same --state and address. Measured: restart -> the
 *      loop's next completed launch (workers reconnect and resume, the client resumes its session
 *      and re-sends the launch in flight), beside the loop's steady step time; and the final
 *      value of the chain is checked (every launch ran exactly once).
 *   build/bench/bench_journal [N] [KILLS]   (N launches per measurement, default 2000; KILLS 5) */
#include <pthread.h>
#include <sys/stat.h>
#include "bench_client.h"
#include "bench_cluster.h"


typedef struct result {
  double p50_us, p99_us, rate;
} result;

static loom_client *connect_to(bench_cluster *bc) {
  loom_connect_options o;
  loom_connect_options_initialize(&o);
  o.address = bc->addr;
  loom_client *c;
  if (loom_connect(&o, &c) != LOOM_OK) {
    fprintf(stderr, "bench_journal: cannot connect\n");
    exit(1);
  }
  return c;
}

static result measure(int n, const char *state) {
  bench_cluster bc;
  bench_cluster_state_dir = state;
  bench_cluster_start(&bc, 2, 4, 0);
  loom_client *c = connect_to(&bc);
  loom_executable *e;
  bench_check(c, loom_compile(c, bench_tiny8, strlen(bench_tiny8), NULL, &e), "compile");
  int32_t zeros[8] = {0};
  loom_array *x = bench_put_input(c, e, zeros, sizeof zeros);
  result r = {0};
  bench_latency_rate(c, e, &x, n, 100, &r.p50_us, &r.p99_us, &r.rate);
  loom_array_release(x);
  loom_executable_destroy(e);
  loom_disconnect(c);
  bench_cluster_stop(&bc);
  return r;
}

/* ---- kill and restart ---- */

typedef struct loop_state {
  loom_client *c;
  loom_executable *e;
  loom_array *x;
  pthread_mutex_t mu;
  double last_done;     /* bench_now() of the latest completed step */
  long steps;
  volatile int stop;
} loop_state;

static void *loop_main(void *arg) {
  loop_state *s = arg;
  while (!s->stop) {
    bench_step(s->c, s->e, &s->x);
    pthread_mutex_lock(&s->mu);
    s->last_done = bench_now();
    s->steps++;
    pthread_mutex_unlock(&s->mu);
  }
  return NULL;
}

static pid_t start_controller(const char *addr, const char *state) {
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    lm_log_init("controller");
    lm_controller_config cfg;
    lm_controller_config_default(&cfg);
    cfg.listen = addr;
    cfg.state_dir = state;
    lm_err e;
    _exit(lm_controller_run(&cfg, &e) < 0 ? 1 : 0);
  }
  return pid;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  bench_help(argc, argv,
             "usage: bench_journal [N] [KILLS]\n"
             "Launch latency with the controller's journal (--state) on and off, and the time from a\n"
             "controller restart (after SIGKILL) to the next completed launch of a running loop.\n");
  int n = argc > 1 ? atoi(argv[1]) : 2000;
  int kills = argc > 2 ? atoi(argv[2]) : 5;
  char dir[96], state[128];
  snprintf(dir, sizeof dir, "/tmp/loom-bench-journal-%d", (int)getpid());
  mkdir(dir, 0700);
  result off[2], on[2];
  for (int rep = 0; rep < 2; rep++) {
    off[rep] = measure(n, NULL);
    snprintf(state, sizeof state, "%s/state%d", dir, rep);
    on[rep] = measure(n, state);
  }
  result bo = off[0].p50_us < off[1].p50_us ? off[0] : off[1], bj = on[0].p50_us < on[1].p50_us ? on[0] : on[1];
  if (off[1].rate > bo.rate) bo.rate = off[1].rate;
  if (on[1].rate > bj.rate) bj.rate = on[1].rate;
  printf("launch of a tiny program on 8 devices of 2 workers, %d launches per measurement (best of 2 runs)\n", n);
  printf("%-34s p50 %7.1f us  p99 %7.1f us  chained %8.0f launches/s\n", "journal on (--state)", bj.p50_us, bj.p99_us,
         bj.rate);
  printf("%-34s p50 %7.1f us  p99 %7.1f us  chained %8.0f launches/s\n", "peer: no journal", bo.p50_us, bo.p99_us,
         bo.rate);
  printf("%-34s p50 %+6.1f%%  chained %+6.1f%%\n", "cost of the journal", 100.0 * (bj.p50_us / bo.p50_us - 1),
         100.0 * (bo.rate / bj.rate - 1));

  /* kill and restart */
  snprintf(state, sizeof state, "%s/restart", dir);
  bench_cluster bc;
  bench_cluster_state_dir = state;
  bench_cluster_start(&bc, 2, 4, 0);
  loop_state s = {0};
  pthread_mutex_init(&s.mu, NULL);
  s.c = connect_to(&bc);
  bench_check(s.c, loom_compile(s.c, bench_tiny8, strlen(bench_tiny8), NULL, &s.e), "compile");
  int32_t zeros[8] = {0};
  s.x = bench_put_input(s.c, s.e, zeros, sizeof zeros);
  pthread_t th;
  pthread_create(&th, NULL, loop_main, &s);
  double *gap = calloc((size_t)kills + 1, sizeof *gap);
  usleep(500000);
  pthread_mutex_lock(&s.mu);
  long before = s.steps;
  pthread_mutex_unlock(&s.mu);
  double t_steady0 = bench_now();
  usleep(500000);
  pthread_mutex_lock(&s.mu);
  double step_us = (bench_now() - t_steady0) * 1e6 / (double)(s.steps - before);
  pthread_mutex_unlock(&s.mu);
  for (int k = 0; k < kills; k++) {
    kill(bc.pids[0], SIGKILL);
    waitpid(bc.pids[0], NULL, 0);
    double t_restart = bench_now();
    bc.pids[0] = start_controller(bc.addr, state);
    for (;;) {
      usleep(1000);
      pthread_mutex_lock(&s.mu);
      double last = s.last_done;
      pthread_mutex_unlock(&s.mu);
      if (last > t_restart) {
        gap[k] = (last - t_restart) * 1e3;
        break;
      }
      if (bench_now() - t_restart > 120) {
        fprintf(stderr, "bench_journal: no launch completed within 120 s of the restart\n");
        exit(1);
      }
    }
    usleep(300000);
  }
  s.stop = 1;
  pthread_join(th, NULL);
  int32_t v[8];
  bench_check(s.c, loom_array_get(s.x, v, sizeof v), "get");
  int ok = 1;
  for (int i = 0; i < 8; i++) ok = ok && v[i] == (int32_t)s.steps;
  if (kills < 1) kills = 1; /* (gap[0] stays 0) */
  qsort(gap, (size_t)kills, sizeof *gap, cmp_d);
  printf("controller SIGKILLed and restarted %d times under a launch+wait loop (2 workers x 4 devices)\n", kills);
  printf("%-34s median %7.1f ms  max %7.1f ms\n", "restart -> next completed launch", gap[kills / 2], gap[kills - 1]);
  printf("%-34s %7.1f us\n", "peer: the loop's steady step", step_us);
  printf("%-34s %ld launches, every element %s\n", "chain after the restarts", s.steps,
         ok ? "equal to the count (each ran once)" : "WRONG");
  loom_array_release(s.x);
  loom_executable_destroy(s.e);
  loom_disconnect(s.c);
  bench_cluster_stop(&bc);
  char cmd[160];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) fprintf(stderr, "bench_journal: could not remove %s\n", dir);
  free(gap);
  return ok ? 0 : 1;
}
