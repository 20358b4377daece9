/* In-process read time of a program file (MLIR text or bytecode, by its magic number): the best
 * of RUNS calls of lm_parse_module (read + verify) on bytes already in memory, and the heap the
 * module holds afterwards. bench/bench_parse.py runs it on the same program as text and as
 * bytecode, beside jaxlib's parser and deserializer.
 *
 *   build/bench/bench_read FILE [RUNS]          prints: <best seconds> <module arena bytes> */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bench_util.h"
#include "hlo/parse.h"

int main(int argc, char **argv) {
  bench_help(argc, argv,
             "usage: bench_read FILE [RUNS]\n"
             "Reads FILE (MLIR text or bytecode) RUNS times (default 10) with lm_parse_module, in this process;\n"
             "prints the best time in seconds and the bytes the module's arena holds.\n");
  if (argc < 2) {
    fprintf(stderr, "usage: bench_read FILE [RUNS]\n");
    return 2;
  }
  int runs = argc > 2 ? atoi(argv[2]) : 10;
  FILE *f = fopen(argv[1], "rb");
  if (!f) {
    perror(argv[1]);
    return 1;
  }
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *data = malloc((size_t)n + 1);
  if (!data || fread(data, 1, (size_t)n, f) != (size_t)n) return 1;
  fclose(f);
  double best = 1e9;
  size_t held = 0;
  for (int r = 0; r < runs; r++) {
    lm_module *m = NULL;
    lm_err e;
    lm_parse_opts o = {.filename = argv[1]};
    double t = bench_now();
    if (lm_parse_module(data, (size_t)n, &o, &m, &e) != 0) {
      fprintf(stderr, "%s\n", e.msg);
      return 1;
    }
    t = bench_now() - t;
    if (t < best) best = t;
    held = m->arena.total;
    lm_module_free(m);
  }
  printf("%.6f %zu\n", best, held);
  free(data);
  return 0;
}
