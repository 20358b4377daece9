/* `loom compile`: what Loom makes of a program for the cluster, without running it: its SPMD form,
 * the global and per-device types and shardings of its arguments and results, and for annotated
 * global programs (jax.jit with NamedSharding) the partitioner's report (--explain) or the
 * per-device program it writes (--print). No cluster needed. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/cli.h"
#include "cli/util.h"
#include "hlo/parse.h"
#include "hlo/partition.h"
#include "hlo/print.h"
#include "hlo/spmd.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: loom compile [options] FILE\n"
          "\n"
          "Reads a program (StableHLO text or MLIR bytecode), analyzes how it runs across devices and\n"
          "prints its form and the sharding of each argument and result. A global program with\n"
          "sharding annotations (sdy.sharding, mhlo.num_partitions = N, no shard_map) is partitioned:\n"
          "every value gets a sharding and each process runs its local part (docs/partitioner.md).\n"
          "\n"
          "options:\n"
          "  --explain     per op: the sharding chosen, each collective inserted and the bytes it\n"
          "                moves, every fallback to computing an op replicated\n"
          "  --print       print the per-device program (StableHLO text) instead\n"
          "  -o FILE       write to FILE instead of standard output\n"
          "  --help        this text\n");
}

static void put_value(FILE *o, const char *kind, uint32_t i, const lm_spmd_value *v) {
  char g[256], l[256];
  fprintf(o, "%s %u: %s -> local %s, sharding [", kind, i, lm_type_str(&v->global, g, sizeof g),
          lm_type_str(&v->local, l, sizeof l));
  for (int d = 0; d < v->global.rank; d++) {
    fprintf(o, "%s{", d ? ", " : "");
    for (int j = 0; j < LM_MESH_MAX_AXES && v->sh.dim_axes[d][j] >= 0; j++)
      fprintf(o, "%saxis%d", j ? ", " : "", v->sh.dim_axes[d][j]);
    fprintf(o, "}");
  }
  fprintf(o, "]\n");
}

int cmd_compile(int argc, char **argv) {
  const char *in, *out;
  bool explain = false, print = false;
  const cli_flag flags[] = {{"explain", &explain}, {"print", &print}};
  int st = cli_one_file_args("compile", argc, argv, flags, 2, usage, &in, &out);
  if (st >= 0) return st;
  size_t n;
  char *buf = cli_read_input("compile", in, &n);
  if (!buf) return 1;
  lm_parse_opts po = {.filename = in};
  lm_module *m = NULL;
  lm_spmd_info *info = NULL;
  lm_err err;
  char *text = NULL, *report = NULL;
  int rc = lm_parse_module(buf, n, &po, &m, &err);
  free(buf);
  if (rc == 0) rc = lm_spmd_analyze(m, &info, &err);
  if (rc == 0 && info->partitioned && (explain || print)) rc = lm_partition(m, info, &text, &report, &err);
  if (rc < 0) {
    fprintf(stderr, "loom compile: %s\n", err.msg);
    lm_module_free(m);
    lm_spmd_info_free(info);
    return 1;
  }
  FILE *o = out ? fopen(out, "w") : stdout;
  if (!o) {
    fprintf(stderr, "loom compile: cannot write %s: %s\n", out, strerror(errno));
    rc = -1;
  } else if (print) {
    if (text) fputs(text, o);
    else {
      char *s = lm_module_print(m); /* not partitioned: the program each process runs as written */
      if (s) fputs(s, o);
      free(s);
    }
  } else {
    fprintf(o, "%s: form %s%s, %u process%s\n", in, lm_spmd_form_name(info->form),
            info->partitioned ? " (partitioned by Loom)" : "", info->nproc, info->nproc == 1 ? "" : "es");
    if (explain && report) fputs(report, o);
    else {
      for (uint32_t i = 0; i < info->ninputs; i++) put_value(o, "argument", i, &info->inputs[i]);
      for (uint32_t j = 0; j < info->noutputs; j++) put_value(o, "result", j, &info->outputs[j]);
      if (explain) fprintf(o, "(not partitioned by Loom: nothing to explain)\n");
    }
  }
  if (o && out) fclose(o);
  free(text);
  free(report);
  lm_module_free(m);
  lm_spmd_info_free(info);
  return rc < 0 ? 1 : 0;
}
