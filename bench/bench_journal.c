/* The steady-state cost of durability (docs/durability.md, docs/elastic.md), and what it buys.
 *   1. The controller's journal (--state): launch + wait latency of a tiny program (x -> x + 1 on
 *      i32[8], one element per device) on 8 devices of 2 workers, and the rate of chained launches
 *      issued without waiting, beside the same cluster without a journal. Both clusters run at
 *      once and are measured in alternating blocks, so both see the same load on the host; the
 *      controllers' CPU time (every thread: the journal's writer too) per launch is printed.
 *   2. Snapshots of puts: put (8 shards on 2 workers) + launch + wait, with a standby worker (each
 *      put's shards are snapshotted into another worker's host memory), beside the same cluster
 *      with --no-snapshots; interleaved the same way.
 *   3. With the journal: the controller is SIGKILLed while a client runs launch+wait in a loop,
 *      and started again at once with the same --state and address. Measured: restart -> the
 *      loop's next completed launch (workers reconnect and resume, the client resumes its session
 *      and re-sends the launch in flight), beside the loop's steady step time; and the final
 *      value of the chain is checked (every launch ran exactly once).
 *   build/bench/bench_journal [N] [KILLS]   (N launches per side, default 4000, N/4 put steps;
 *   KILLS 5, 0: skip 3) */
#include <dirent.h>
#include <pthread.h>
#include <sys/stat.h>
#include "bench_client.h"
#include "bench_cluster.h"


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

/* ---- steady state: the same work on clusters with and without the feature, interleaved ---- */

typedef struct side {
  const char *name;
  bench_cluster bc;
  loom_client *c;
  loom_executable *e;
  loom_array *x;
  double *lat;               /* every measured step, us */
  int nlat;
  double cpu_ns;             /* the controller's CPU time (all its threads) during the measured steps */
  double rate;               /* chained launches/s, best block */
} side;

/* CPU time of every thread of process pid so far (ns; /proc/PID/task/TID/schedstat). */
static double proc_cpu_ns(pid_t pid) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
  DIR *d = opendir(path);
  double t = 0;
  struct dirent *de;
  while (d && (de = readdir(d))) {
    if (de->d_name[0] == '.') continue;
    char f[128];
    snprintf(f, sizeof f, "/proc/%d/task/%.20s/schedstat", (int)pid, de->d_name);
    FILE *fp = fopen(f, "r");
    unsigned long long ns = 0;
    if (fp && fscanf(fp, "%llu", &ns) == 1) t += (double)ns;
    if (fp) fclose(fp);
  }
  if (d) closedir(d);
  return t;
}

static void side_start(side *sd, const char *name, const char *state, int standbys, bool no_snapshots, int cap) {
  memset(sd, 0, sizeof *sd);
  sd->name = name;
  bench_cluster_state_dir = state;
  bench_cluster_standbys = standbys;
  bench_cluster_no_snapshots = no_snapshots;
  bench_cluster_start(&sd->bc, 2, 4, 0);
  bench_cluster_state_dir = NULL, bench_cluster_standbys = 0, bench_cluster_no_snapshots = false;
  if (standbys) usleep(1000000); /* the standby registers after the workers (snapshots need it) */
  sd->c = connect_to(&sd->bc);
  bench_check(sd->c, loom_compile(sd->c, bench_tiny8, strlen(bench_tiny8), NULL, &sd->e), "compile");
  int32_t zeros[8] = {0};
  sd->x = bench_put_input(sd->c, sd->e, zeros, sizeof zeros);
  sd->lat = malloc((size_t)cap * sizeof *sd->lat);
  if (!sd->lat) exit(1);
}

static void side_stop(side *sd) {
  loom_array_release(sd->x);
  loom_executable_destroy(sd->e);
  loom_disconnect(sd->c);
  bench_cluster_stop(&sd->bc);
  free(sd->lat);
}

/* One step of the put benchmark: a fresh input put (8 shards over 2 workers, as a training step
 * puts its batch), the launch on it, waited for. */
static double put_step(side *sd, int i) {
  int32_t v[8];
  for (int k = 0; k < 8; k++) v[k] = i + k;
  double t0 = bench_now();
  loom_array *in = bench_put_input(sd->c, sd->e, v, sizeof v);
  loom_array *y;
  loom_future *f;
  bench_check(sd->c, loom_launch(sd->e, &in, 1, NULL, &y, 1, &f), "launch");
  bench_check(sd->c, loom_future_wait(f, -1), "wait");
  double dt = bench_now() - t0;
  loom_future_destroy(f);
  loom_array_release(in);
  loom_array_release(y);
  return dt;
}

/* n steps on each side, in blocks of `block` alternating between them (the host's load drifts;
 * both see the same), after `warm` unmeasured ones each. puts: put_step, else launch + wait. */
static void interleave(side *a, side *b, int n, int block, bool puts) {
  side *s2[2] = {a, b};
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < 100; i++) puts ? put_step(s2[k], i) : bench_step(s2[k]->c, s2[k]->e, &s2[k]->x);
  for (int done = 0, round = 0; done < n; done += block, round++) {
    int m = n - done < block ? n - done : block;
    for (int k = 0; k < 2; k++) {
      side *sd = s2[(k + round) % 2];
      double c0 = proc_cpu_ns(sd->bc.pids[0]);
      for (int i = 0; i < m; i++)
        sd->lat[sd->nlat++] = 1e6 * (puts ? put_step(sd, done + i) : bench_step(sd->c, sd->e, &sd->x));
      sd->cpu_ns += proc_cpu_ns(sd->bc.pids[0]) - c0;
    }
    if (!puts) /* and the chained rate, alternately too */
      for (int k = 0; k < 2; k++) {
        side *sd = s2[(k + round) % 2];
        double r = m / bench_chain(sd->c, sd->e, &sd->x, m);
        if (r > sd->rate) sd->rate = r;
      }
  }
}

static void print_side(side *sd, bool puts) {
  double p50, p99;
  int n = sd->nlat;
  bench_percentiles(sd->lat, n, &p50, &p99);
  double cpu = sd->cpu_ns / 1e3 / n;
  if (puts)
    printf("%-34s p50 %7.1f us  p99 %7.1f us  controller CPU %5.1f us/step\n", sd->name, p50, p99, cpu);
  else
    printf("%-34s p50 %7.1f us  p99 %7.1f us  controller CPU %5.1f us/launch  chained %6.0f launches/s\n", sd->name,
           p50, p99, cpu, sd->rate);
}

static void print_cost(side *on, side *off) {
  double p50a, p99a, p50b, p99b;
  bench_percentiles(on->lat, on->nlat, &p50a, &p99a);
  bench_percentiles(off->lat, off->nlat, &p50b, &p99b);
  printf("%-34s p50 %+6.1f%%  controller CPU %+5.1f us", "cost", 100.0 * (p50a / p50b - 1),
         (on->cpu_ns / on->nlat - off->cpu_ns / off->nlat) / 1e3);
  if (on->rate > 0) printf("  chained %+6.1f%%", 100.0 * (off->rate / on->rate - 1));
  printf("\n");
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
             "Launch latency with the controller's journal (--state) on and off, put + launch latency with\n"
             "snapshots of puts on and off, and the time from a controller restart (after SIGKILL) to the\n"
             "next completed launch of a running loop.\n");
  int n = argc > 1 ? atoi(argv[1]) : 4000;
  int kills = argc > 2 ? atoi(argv[2]) : 5;
  char dir[96], state[128];
  snprintf(dir, sizeof dir, "/tmp/loom-bench-journal-%d", (int)getpid());
  mkdir(dir, 0700);

  /* 1. the journal: launch + wait, and chained launches */
  side on, off;
  snprintf(state, sizeof state, "%s/state", dir);
  side_start(&on, "journal on (--state)", state, 0, false, n);
  side_start(&off, "peer: no journal", NULL, 0, false, n);
  interleave(&on, &off, n, 200, false);
  printf("launch + wait of a tiny program on 8 devices of 2 workers, %d launches each, interleaved in blocks "
         "of 200\n", n);
  print_side(&on, false);
  print_side(&off, false);
  print_cost(&on, &off);
  side_stop(&on);
  side_stop(&off);

  /* 2. snapshots of puts: put + launch + wait, with a standby (snapshots) beside --no-snapshots */
  int np = n / 4;
  side snap, nosnap;
  side_start(&snap, "snapshots on (1 standby)", NULL, 1, false, np);
  side_start(&nosnap, "peer: --no-snapshots (1 standby)", NULL, 1, true, np);
  interleave(&snap, &nosnap, np, 50, true);
  printf("put of 8 shards (2 workers) + launch + wait, %d steps each, interleaved in blocks of 50\n", np);
  print_side(&snap, true);
  print_side(&nosnap, true);
  print_cost(&snap, &nosnap);
  side_stop(&snap);
  side_stop(&nosnap);
  if (kills <= 0) {
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "bench_journal: could not remove %s\n", dir);
    return 0;
  }

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
