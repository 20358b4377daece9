/* A long chain of launches for the snapshot tests (tests/integration/test_snapshots.py) and the
 * replay benchmark: x0 = put (f32[n] tiled over devices 0..7), x[i+1] = program(x[i]), each
 * x[i] deleted once the launch reading it is sent. Driven by lines on stdin:
 *   run K      K more launches, each waited for; prints "ok SEQ US" (the last launch's sequence
 *              number, and the mean microseconds per launch, launch to completion)
 *   pipe K     K more launches sent at once, each input deleted right after the launch reading
 *              it (before it completes), then the last waited for; prints "ok SEQ US" 
 *   digest     fetches the current array shard by shard from the workers; prints "digest HEX"
 *              (FNV-1a 64 of its bytes) and the milliseconds the fetch took
 *   quit
 * Errors print "error MESSAGE" (and the probe exits 1).
 *   snap_probe ADDR PROGRAM_FILE N */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "loom/loom.h"

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int fail(loom_client *c, const char *what, const char *msg) {
  printf("error %s: %s\n", what, msg ? msg : (c ? loom_errmsg(c) : ""));
  fflush(stdout);
  return 1;
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: snap_probe ADDR PROGRAM_FILE N\n");
    return 2;
  }
  long n = strtol(argv[3], NULL, 10);
  if (n < 8 || n % 8) {
    fprintf(stderr, "snap_probe: N must be a positive multiple of 8\n");
    return 2;
  }
  FILE *pf = fopen(argv[2], "rb");
  if (!pf) return fail(NULL, "open", argv[2]);
  static char text[1 << 16];
  size_t len = fread(text, 1, sizeof text, pf);
  fclose(pf);

  loom_client *c = NULL;
  loom_connect_options o;
  loom_connect_options_initialize(&o);
  o.address = argv[1];
  if (loom_connect(&o, &c) != LOOM_OK) return fail(c, "connect", NULL);
  loom_executable *exe = NULL;
  if (loom_compile(c, text, len, NULL, &exe) != LOOM_OK) return fail(c, "compile", NULL);

  float *host = malloc((size_t)n * sizeof *host);
  if (!host) return fail(c, "malloc", "out of memory");
  for (long i = 0; i < n; i++) host[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
  int32_t devs[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  int64_t dims[1] = {n};
  loom_sharding sh;
  loom_sharding_tiled(&sh, devs, 8, 0);
  loom_put_args pa;
  loom_put_args_initialize(&pa);
  pa.dtype = LOOM_DTYPE_F32;
  pa.rank = 1;
  pa.dims = dims;
  pa.sharding = &sh;
  pa.data = host;
  pa.data_size = (size_t)n * sizeof *host;
  loom_array *x = NULL;
  if (loom_array_put(c, &pa, &x) != LOOM_OK) return fail(c, "put", NULL);

  char line[256];
  while (fgets(line, sizeof line, stdin)) {
    long k = 0;
    int pipe = 0;
    if (sscanf(line, "run %ld", &k) == 1 || (pipe = sscanf(line, "pipe %ld", &k) == 1)) {
      uint64_t seq = 0;
      double t0 = now_us();
      for (long i = 0; i < k; i++) {
        loom_array *y = NULL;
        loom_future *fu = NULL;
        if (loom_launch(exe, &x, 1, NULL, &y, 1, &fu) != LOOM_OK) return fail(c, "launch", NULL);
        loom_array_delete(x);
        loom_array_release(x);
        x = y;
        if (pipe && i + 1 < k) { /* not waited for: its output is deleted by the next turn */
          loom_future_destroy(fu);
          continue;
        }
        if (loom_future_wait(fu, 120000) != LOOM_OK) return fail(c, "launch", loom_future_errmsg(fu));
        seq = loom_future_sequence(fu);
        loom_future_destroy(fu);
      }
      printf("ok %llu %.1f\n", (unsigned long long)seq, k ? (now_us() - t0) / (double)k : 0.0);
    } else if (!strncmp(line, "digest", 6)) {
      double t0 = now_us();
      size_t per = (size_t)n / 8 * sizeof(float);
      for (int s = 0; s < 8; s++)
        if (loom_array_get_shard(x, s, (char *)host + (size_t)s * per, per) != LOOM_OK) return fail(c, "get", NULL);
      double ms = (now_us() - t0) / 1e3;
      uint64_t h = 0xcbf29ce484222325ull;
      const unsigned char *b = (const unsigned char *)host;
      for (size_t i = 0; i < (size_t)n * sizeof *host; i++) h = (h ^ b[i]) * 0x100000001b3ull;
      printf("digest %016llx %.1f\n", (unsigned long long)h, ms);
    } else if (!strncmp(line, "quit", 4)) {
      break;
    } else {
      printf("error unknown command\n");
    }
    fflush(stdout);
  }
  loom_array_release(x);
  loom_executable_destroy(exe);
  free(host);
  loom_disconnect(c);
  return 0;
}
