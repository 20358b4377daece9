/* Data-plane benchmark: all_reduce bus bandwidth from 4 B to 64 MiB on P worker processes x D
 * devices (default 4 x 1), flat and hierarchical (the workers labelled as H hosts, default 2:
 * 2 hosts x 2 workers), beside OpenMPI's MPI_Allreduce on P ranks of the same machine run
 * in the same invocation; then one-sided put and get bandwidth between two worker processes
 * beside a plain memcpy of the same sizes. Figures are the best of --runs sweeps.
 *
 *   build/bench/bench_dataplane [--procs P] [--devices D] [--max-bytes N] [--runs R]
 *                               [--no-mpi] [--no-keyed] [--no-hier] [--hosts H]
 *                               [--only allreduce|put]
 *
 * The all_reduce sweep runs twice: with keyless peers, and keyed as under a controller (every
 * message carries a MAC of its header proving its sender: docs/dataplane.md), side by side;
 * --no-keyed skips the second. A third sweep runs the hierarchical algorithm (docs/dataplane.md)
 * with workers 0..P/H-1 labelled host 0, and so on; --no-hier skips it.
 *
 * Worker processes are forked from this one and exchange their data-plane addresses through
 * a temporary directory, as the controller would. Results are checked, not only timed. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "bench_util.h"
#include "dataplane/dataplane.h"

static int g_procs = 4, g_devs = 1, g_runs = 3, g_mpi = 1, g_keyed_too = 1;
static int g_keyed; /* this round's workers use pair keys */
static int g_hier_too = 1, g_hosts = 2;
static int g_hier; /* this round's workers use the hierarchical algorithm */
static size_t g_max = 64u << 20;
static const char *g_only = NULL;
static char g_dir[PATH_MAX];

static void die(const char *what, const lm_err *e) {
  fprintf(stderr, "bench_dataplane[%d]: %s: %s\n", (int)getpid(), what, e ? e->msg : strerror(errno));
  _exit(2);
}

/* Publishes this worker's address and waits for all n (files addr.<i> in g_dir). */
static void exchange(lm_dp *dp, int me, int n) {
  const void *blob;
  size_t len;
  lm_dp_address(dp, &blob, &len);
  char path[PATH_MAX + 32], tmp[PATH_MAX + 32];
  snprintf(tmp, sizeof tmp, "%s/addr.%d.tmp", g_dir, me);
  snprintf(path, sizeof path, "%s/addr.%d", g_dir, me);
  FILE *f = fopen(tmp, "wb");
  if (!f || fwrite(blob, 1, len, f) != len || fclose(f) != 0) die("writing the address", NULL);
  rename(tmp, path);
  for (int i = 0; i < n; i++) {
    if (i == me) continue;
    snprintf(path, sizeof path, "%s/addr.%d", g_dir, i);
    double t0 = bench_now();
    FILE *g;
    while (!(g = fopen(path, "rb"))) {
      if (bench_now() - t0 > 60) die("waiting for the other workers' addresses", NULL);
      usleep(2000);
    }
    uint8_t buf[65536];
    size_t got = fread(buf, 1, sizeof buf, g);
    fclose(g);
    lm_err e;
    uint8_t key[LM_DP_KEY_SIZE]; /* the pair's key (the controller derives real ones) */
    for (int k = 0; k < LM_DP_KEY_SIZE; k++) key[k] = (uint8_t)((me < i ? me : i) * 17 + (me < i ? i : me) * 5 + k);
    if (lm_dp_peer_add_keyed(dp, buf, got, g_keyed ? key : NULL, NULL, &e) < 0) die("adding a peer", &e);
  }
}

/* ---- all_reduce ---- */

typedef struct ar_thread {
  lm_dp *dp;
  lm_dp_group *g;
  int proc, dev;
  double *best;   /* [nsizes] seconds per call, min over runs (rank 0 only) */
  int nsizes;
  int failed;
} ar_thread;

static size_t size_at(int i) { return (size_t)4 << (2 * i); } /* 4 B, 16 B, ... */

static int iters_for(size_t bytes) {
  size_t it = ((size_t)256 << 20) / (bytes + 4096);
  if (it > 2000) it = 2000;
  if (it < 5) it = 5;
  return (int)it;
}

static void *ar_main(void *arg) {
  ar_thread *t = arg;
  uint32_t n = (uint32_t)(g_procs * g_devs), rank = (uint32_t)(t->proc * g_devs + t->dev);
  size_t maxc = g_max / 4;
  float *a = aligned_alloc(64, maxc * 4 + 64), *b = aligned_alloc(64, maxc * 4 + 64);
  if (!a || !b) die("out of memory", NULL);
  for (size_t i = 0; i < maxc; i++) a[i] = (float)(rank + 1);
  memset(b, 0, maxc * 4);
  lm_dp_reduction sum = {.dtype = LOOM_DTYPE_F32, .op = LM_DP_SUM};
  lm_dp_reduction mx = {.dtype = LOOM_DTYPE_F64, .op = LM_DP_MAX};
  lm_err e;
  uint64_t tag = 1;
  for (int run = 0; run < g_runs; run++)
    for (int s = 0; s < t->nsizes; s++) {
      size_t bytes = size_at(s), count = bytes / 4;
      int it = iters_for(bytes);
      for (int w = 0; w < 2; w++)
        if (lm_dp_all_reduce(t->g, rank, tag++, a, b, count, &sum, NULL, &e) < 0) die("all_reduce", &e);
      if (lm_dp_barrier(t->g, rank, tag++, NULL, &e) < 0) die("barrier", &e);
      double t0 = bench_now();
      for (int i = 0; i < it; i++)
        if (lm_dp_all_reduce(t->g, rank, tag++, a, b, count, &sum, NULL, &e) < 0) die("all_reduce", &e);
      double dt = (bench_now() - t0) / it, worst;
      if (lm_dp_all_reduce(t->g, rank, tag++, &dt, &worst, 1, &mx, NULL, &e) < 0) die("all_reduce", &e);
      float want = (float)n * (n + 1) / 2;
      for (size_t i = 0; i < count; i += 1 + count / 97)
        if (b[i] != want) {
          fprintf(stderr, "bench_dataplane: wrong all_reduce result at %zu: %g, want %g\n", i, b[i], want);
          t->failed = 1;
          break;
        }
      if (rank == 0 && (run == 0 || worst < t->best[s])) t->best[s] = worst;
    }
  free(a);
  free(b);
  return NULL;
}

static void ar_worker(int me) {
  lm_dp_config c;
  lm_dp_config_init(&c);
  c.self_id = (uint64_t)me + 1;
  c.num_devices = (uint32_t)g_devs;
  c.require_keys = g_keyed;
  c.coll_algo = g_hier ? LM_DP_COLL_HIER : LM_DP_COLL_FLAT;
  char host[32];
  snprintf(host, sizeof host, "h%d", me * g_hosts / g_procs);
  if (g_hier) c.host_label = host;
  lm_dp *dp;
  lm_err e;
  if (lm_dp_create(&c, &dp, &e) < 0) die("lm_dp_create", &e);
  exchange(dp, me, g_procs);
  uint32_t n = (uint32_t)(g_procs * g_devs);
  lm_dp_member *m = calloc(n, sizeof *m);
  for (uint32_t i = 0; i < n; i++) m[i] = (lm_dp_member){.worker = i / g_devs + 1, .device = i % g_devs};
  lm_dp_group *g;
  if (lm_dp_group_get(dp, m, n, &g, &e) < 0) die("lm_dp_group_get", &e);
  int nsizes = 0;
  while (size_at(nsizes) <= g_max) nsizes++;
  double *best = calloc(nsizes, sizeof *best);
  pthread_t th[256];
  ar_thread ts[256];
  for (int d = 0; d < g_devs; d++) {
    ts[d] = (ar_thread){.dp = dp, .g = g, .proc = me, .dev = d, .best = best, .nsizes = nsizes};
    pthread_create(&th[d], NULL, ar_main, &ts[d]);
  }
  int failed = 0;
  for (int d = 0; d < g_devs; d++) {
    pthread_join(th[d], NULL);
    failed |= ts[d].failed;
  }
  if (me == 0) {
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/%s.txt", g_dir, g_hier ? "hier" : g_keyed ? "keyed" : "loom");
    FILE *f = fopen(path, "w");
    for (int s = 0; s < nsizes; s++) fprintf(f, "%zu %.9f\n", size_at(s), best[s]);
    fclose(f);
  }
  /* everyone done before anyone leaves: a barrier among the workers' device 0 */
  lm_dp_member *m0 = calloc(g_procs, sizeof *m0);
  for (int i = 0; i < g_procs; i++) m0[i] = (lm_dp_member){.worker = (uint64_t)i + 1, .device = 0};
  lm_dp_group *g0;
  if (lm_dp_group_get(dp, m0, (uint32_t)g_procs, &g0, &e) < 0 || lm_dp_barrier(g0, (uint32_t)me, 1, NULL, &e) < 0)
    die("final barrier", &e);
  lm_dp_group_release(g0);
  free(m0);
  lm_dp_group_release(g);
  lm_dp_destroy(dp);
  free(best);
  free(m);
  _exit(failed ? 3 : 0);
}

static int run_children(void (*fn)(int), int n) {
  pid_t pids[256];
  for (int i = 0; i < n; i++) {
    pids[i] = fork();
    if (pids[i] == 0) {
      alarm(900);
      fn(i);
      _exit(0);
    }
  }
  int bad = 0;
  for (int i = 0; i < n; i++) {
    int st;
    waitpid(pids[i], &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) bad = 1;
  }
  return bad;
}

static int run_mpi(const char *self, double *mpi, int nsizes) {
  char exe[PATH_MAX], dir[PATH_MAX];
  snprintf(dir, sizeof dir, "%s", self);
  snprintf(exe, sizeof exe, "%s/bench_dataplane_mpi", dirname(dir));
  if (access(exe, X_OK) != 0) {
    fprintf(stderr, "bench_dataplane: %s not built (MPI not found at configure time); skipping MPI\n", exe);
    return -1;
  }
  char cmd[PATH_MAX * 2];
  snprintf(cmd, sizeof cmd,
           "mpirun --allow-run-as-root --oversubscribe --bind-to none -np %d %s %zu %d 2>/dev/null", g_procs, exe,
           g_max, g_runs);
  FILE *p = popen(cmd, "r");
  if (!p) return -1;
  size_t sz;
  double sec;
  int got = 0;
  while (fscanf(p, "%zu %lf", &sz, &sec) == 2)
    for (int s = 0; s < nsizes; s++)
      if (size_at(s) == sz) {
        mpi[s] = sec;
        got++;
      }
  int st = pclose(p);
  if (st != 0 || got == 0) {
    fprintf(stderr, "bench_dataplane: mpirun failed (status %d)\n", st);
    return -1;
  }
  return 0;
}

static void fmt_size(size_t b, char *out, size_t cap) {
  if (b >= (1u << 20)) snprintf(out, cap, "%zu MiB", b >> 20);
  else if (b >= 1024) snprintf(out, cap, "%zu KiB", b >> 10);
  else snprintf(out, cap, "%zu B", b);
}

static void clear_addresses(void) {
  for (int i = 0; i < g_procs; i++) {
    char p[PATH_MAX + 32];
    snprintf(p, sizeof p, "%s/addr.%d", g_dir, i);
    unlink(p);
  }
}

static void read_times(const char *name, double *t, int nsizes) {
  char path[PATH_MAX + 32];
  snprintf(path, sizeof path, "%s/%s.txt", g_dir, name);
  FILE *f = fopen(path, "r");
  size_t sz;
  double sec;
  while (f && fscanf(f, "%zu %lf", &sz, &sec) == 2)
    for (int s = 0; s < nsizes; s++)
      if (size_at(s) == sz) t[s] = sec;
  if (f) fclose(f);
}

static int bench_allreduce(const char *self) {
  int nsizes = 0;
  while (size_at(nsizes) <= g_max) nsizes++;
  for (int round = 0; round < 3; round++) {
    if ((round == 1 && !g_keyed_too) || (round == 2 && !g_hier_too)) continue;
    g_keyed = round == 1;
    g_hier = round == 2;
    clear_addresses();
    if (run_children(ar_worker, g_procs)) {
      fprintf(stderr, "bench_dataplane: a Loom worker failed%s\n", g_keyed ? " (keyed)" : g_hier ? " (hierarchical)" : "");
      return 1;
    }
  }
  g_keyed = g_hier = 0;
  double *loom = calloc(nsizes, sizeof *loom), *mpi = calloc(nsizes, sizeof *mpi), *keyed = calloc(nsizes, sizeof *keyed);
  double *hier = calloc(nsizes, sizeof *hier);
  read_times("loom", loom, nsizes);
  if (g_keyed_too) read_times("keyed", keyed, nsizes);
  if (g_hier_too) read_times("hier", hier, nsizes);
  int have_mpi = g_mpi && g_devs == 1 ? run_mpi(self, mpi, nsizes) == 0 : 0;
  int n = g_procs * g_devs;
  double bw = 2.0 * (n - 1) / n;
  printf("\nall_reduce f32 sum, %d processes x %d devices (best of %d; busbw = 2(n-1)/n * bytes / time)\n", g_procs,
         g_devs, g_runs);
  if (g_hier_too) printf("(Loom: flat; hier: hierarchical, the workers labelled as %d hosts)\n", g_hosts);
  printf("%10s | %12s %12s |", "size", "Loom us", "Loom GB/s");
  if (g_keyed_too) printf(" %12s %9s |", "keyed us", "keyed/Loom");
  if (g_hier_too) printf(" %12s %12s %9s |", "hier us", "hier GB/s", "hier/MPI");
  if (have_mpi) printf(" %12s %12s | %9s", "MPI us", "MPI GB/s", "Loom/MPI");
  printf("\n");
  for (int s = 0; s < nsizes; s++) {
    char b[32];
    fmt_size(size_at(s), b, sizeof b);
    printf("%10s | %12.2f %12.3f |", b, loom[s] * 1e6, bw * size_at(s) / loom[s] / 1e9);
    if (g_keyed_too) printf(" %12.2f %9.2fx |", keyed[s] * 1e6, keyed[s] / loom[s]);
    if (g_hier_too) {
      printf(" %12.2f %12.3f", hier[s] * 1e6, bw * size_at(s) / hier[s] / 1e9);
      if (have_mpi && mpi[s] > 0) printf(" %8.2fx |", mpi[s] / hier[s]);
      else printf(" %9s |", "-");
    }
    if (have_mpi && mpi[s] > 0)
      printf(" %12.2f %12.3f | %8.2fx", mpi[s] * 1e6, bw * size_at(s) / mpi[s] / 1e9, mpi[s] / loom[s]);
    printf("\n");
  }
  if (g_keyed_too)
    printf("(keyed: peers with pair keys, every message's sender proven by a MAC, as under a controller;\n"
           " keyed/Loom > 1: the MACs cost that much)\n");
  printf("(Loom/MPI, hier/MPI > 1: Loom is faster)\n");
  free(loom);
  free(mpi);
  free(keyed);
  free(hier);
  return 0;
}

/* ---- put / get ---- */

static void put_worker(int me) {
  lm_dp_config c;
  lm_dp_config_init(&c);
  c.self_id = (uint64_t)me + 1;
  lm_dp *dp;
  lm_err e;
  if (lm_dp_create(&c, &dp, &e) < 0) die("lm_dp_create", &e);
  exchange(dp, me, 2);
  uint8_t *region = aligned_alloc(64, g_max);
  uint8_t *local = aligned_alloc(64, g_max), *local2 = aligned_alloc(64, g_max);
  if (!region || !local || !local2) die("out of memory", NULL);
  memset(region, me + 1, g_max);
  memset(local, 7, g_max);
  memset(local2, 0, g_max);
  lm_dp_mem *mem;
  if (lm_dp_mem_register(dp, region, g_max, &mem, &e) < 0) die("lm_dp_mem_register", &e);
  const void *blob;
  size_t blen;
  lm_dp_mem_blob(mem, &blob, &blen);
  uint8_t peer_blob[4096];
  /* swap memory blobs by two-sided messages: length, then the blob */
  uint64_t peer = me == 0 ? 2 : 1;
  uint64_t mylen = blen, plen = 0;
  for (int step = 0; step < 2; step++) {
    if ((step == 0) == (me == 0)) {
      if (lm_dp_send(dp, peer, 1, &mylen, 8, NULL, &e) < 0 || lm_dp_send(dp, peer, 2, blob, blen, NULL, &e) < 0)
        die("send", &e);
    } else {
      if (lm_dp_recv(dp, peer, 1, &plen, 8, NULL, &e) < 0) die("recv", &e);
      if (plen > sizeof peer_blob) die("memory blob too long", NULL);
      if (lm_dp_recv(dp, peer, 2, peer_blob, plen, NULL, &e) < 0) die("recv", &e);
    }
  }
  if (me == 0) {
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/put.txt", g_dir);
    FILE *f = fopen(path, "w");
    for (size_t sz = 4096; sz <= g_max; sz *= 4) {
      int it = iters_for(sz);
      double bp = 1e9, bg = 1e9, bm = 1e9;
      for (int run = 0; run < g_runs; run++) {
        double t0 = bench_now();
        for (int i = 0; i < it; i++)
          if (lm_dp_put(dp, peer, peer_blob, plen, 0, local, sz, NULL, &e) < 0) die("put", &e);
        double tp = (bench_now() - t0) / it;
        t0 = bench_now();
        for (int i = 0; i < it; i++)
          if (lm_dp_get(dp, peer, peer_blob, plen, 0, local2, sz, NULL, &e) < 0) die("get", &e);
        double tg = (bench_now() - t0) / it;
        t0 = bench_now();
        for (int i = 0; i < it; i++) {
          memcpy(local2, local, sz);
          __asm__ __volatile__("" ::"r"(local2) : "memory");
        }
        double tm = (bench_now() - t0) / it;
        if (tp < bp) bp = tp;
        if (tg < bg) bg = tg;
        if (tm < bm) bm = tm;
      }
      /* the get brought back what the put wrote */
      for (size_t i = 0; i < sz; i += 4093)
        if (local2[i] != 7) {
          fprintf(stderr, "bench_dataplane: get returned %u at %zu, want 7\n", local2[i], i);
          _exit(3);
        }
      fprintf(f, "%zu %.9f %.9f %.9f\n", sz, bp, bg, bm);
    }
    fclose(f);
    uint8_t done = 1;
    lm_dp_send(dp, peer, 3, &done, 1, NULL, &e);
  } else {
    uint8_t done = 0;
    lm_dp_call call = {.struct_size = sizeof call, .timeout_ms = 600000};
    if (lm_dp_recv(dp, peer, 3, &done, 1, &call, &e) < 0) die("recv", &e);
  }
  lm_dp_mem_deregister(mem);
  lm_dp_destroy(dp);
  free(region);
  free(local);
  free(local2);
  _exit(0);
}

static int bench_put(void) {
  if (run_children(put_worker, 2)) {
    fprintf(stderr, "bench_dataplane: a put worker failed\n");
    return 1;
  }
  char path[PATH_MAX + 32];
  snprintf(path, sizeof path, "%s/put.txt", g_dir);
  FILE *f = fopen(path, "r");
  if (!f) return 1;
  printf("\none-sided put / get between 2 worker processes vs memcpy in one process (best of %d)\n", g_runs);
  printf("%10s | %10s %10s | %10s %10s | %10s %10s\n", "size", "put us", "put GB/s", "get us", "get GB/s",
         "memcpy us", "memcpy GB/s");
  size_t sz;
  double p, gt, m;
  while (fscanf(f, "%zu %lf %lf %lf", &sz, &p, &gt, &m) == 4) {
    char b[32];
    fmt_size(sz, b, sizeof b);
    printf("%10s | %10.2f %10.2f | %10.2f %10.2f | %10.2f %10.2f\n", b, p * 1e6, sz / p / 1e9, gt * 1e6,
           sz / gt / 1e9, m * 1e6, sz / m / 1e9);
  }
  fclose(f);
  return 0;
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--procs") && i + 1 < argc) g_procs = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--devices") && i + 1 < argc) g_devs = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--runs") && i + 1 < argc) g_runs = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--max-bytes") && i + 1 < argc) g_max = strtoull(argv[++i], NULL, 0);
    else if (!strcmp(argv[i], "--no-mpi")) g_mpi = 0;
    else if (!strcmp(argv[i], "--no-keyed")) g_keyed_too = 0;
    else if (!strcmp(argv[i], "--no-hier")) g_hier_too = 0;
    else if (!strcmp(argv[i], "--hosts") && i + 1 < argc) g_hosts = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--only") && i + 1 < argc) g_only = argv[++i];
    else {
      fprintf(stderr, "usage: %s [--procs P] [--devices D] [--max-bytes N] [--runs R] [--no-mpi] [--no-keyed] [--no-hier] [--hosts H] [--only allreduce|put]\n",
              argv[0]);
      return 2;
    }
  }
  if (g_procs < 2 || g_procs > 64 || g_devs < 1 || g_devs > 64 || g_runs < 1 || g_max < 4 || g_hosts < 1 ||
      g_hosts > g_procs) {
    fprintf(stderr, "bench_dataplane: bad arguments\n");
    return 2;
  }
  snprintf(g_dir, sizeof g_dir, "/tmp/loom-bench-XXXXXX");
  if (!mkdtemp(g_dir)) {
    perror("mkdtemp");
    return 1;
  }
  int rc = 0;
  if (!g_only || !strcmp(g_only, "allreduce")) rc |= bench_allreduce(argv[0]);
  if (!g_only || !strcmp(g_only, "put")) {
    clear_addresses();
    rc |= bench_put();
  }
  char cmd[PATH_MAX + 16];
  snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
  if (system(cmd) != 0) fprintf(stderr, "bench_dataplane: could not remove %s\n", g_dir);
  return rc;
}
