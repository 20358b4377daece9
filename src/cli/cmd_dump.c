/* `loom dump`: prints the program Loom reads from a file (StableHLO text or MLIR bytecode) as
 * StableHLO text that Loom's own parser reads back to the same IR: the tool to reach for when a
 * program from JAX misbehaves (what did Loom actually read?). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/cli.h"
#include "cli/util.h"
#include "hlo/bytecode.h"
#include "hlo/dump.h"
#include "hlo/parse.h"
#include "hlo/print.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: loom dump [options] FILE\n"
          "\n"
          "Prints the module Loom reads from FILE as StableHLO text (functions in pretty form, ops in\n"
          "generic form), which `loom interpret`, `loom run` and Loom's parser read back to the same IR.\n"
          "FILE may be MLIR text or MLIR bytecode (a VHLO portable artifact as jax.export and the IFRT\n"
          "proxy send it); the format is recognised by the file's first bytes, not by its name.\n"
          "\n"
          "options:\n"
          "  --ir          print Loom's canonical IR dump instead (values renumbered, attributes sorted,\n"
          "                constants summarized by size and hash): equal dumps mean equal IR\n"
          "  --no-verify   print the module even if the structural verifier rejects it\n"
          "  -o FILE       write to FILE instead of standard output\n"
          "  --help        this text\n");
}

int cmd_dump(int argc, char **argv) {
  const char *in, *out;
  bool ir = false, no_verify = false;
  const cli_flag flags[] = {{"ir", &ir}, {"no-verify", &no_verify}};
  int st = cli_one_file_args("dump", argc, argv, flags, 2, usage, &in, &out);
  if (st >= 0) return st;
  size_t n;
  char *buf = cli_read_input("dump", in, &n);
  if (!buf) return 1;
  lm_parse_opts po = {.filename = in, .no_verify = no_verify};
  lm_module *m;
  lm_err err;
  int rc = lm_parse_module(buf, n, &po, &m, &err);
  char header[256] = "";
  uint64_t ver;
  char producer[96];
  if (lm_bytecode_header((const uint8_t *)buf, n, &ver, producer, sizeof producer) == 0)
    snprintf(header, sizeof header, "// %s: MLIR bytecode version %llu, written by %s\n", in, (unsigned long long)ver,
             producer[0] ? producer : "(no producer)");
  else
    snprintf(header, sizeof header, "// %s: MLIR text\n", in);
  free(buf);
  if (rc < 0) {
    fprintf(stderr, "loom dump: %s\n", err.msg);
    return 1;
  }
  char *s = ir ? lm_module_dump(m) : lm_module_print(m);
  lm_module_free(m);
  if (!s) {
    fprintf(stderr, "loom dump: out of host memory\n");
    return 1;
  }
  FILE *f = out ? fopen(out, "w") : stdout;
  if (!f) {
    fprintf(stderr, "loom dump: cannot write %s: %s\n", out, strerror(errno));
    free(s);
    return 1;
  }
  fputs(header, f);
  fputs(s, f);
  free(s);
  if (out && fclose(f) != 0) {
    fprintf(stderr, "loom dump: error writing %s\n", out);
    return 1;
  }
  return 0;
}
