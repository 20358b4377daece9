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
  const char *in = NULL, *out = NULL;
  bool ir = false, no_verify = false;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      usage(stdout);
      return 0;
    } else if (!strcmp(argv[i], "--ir")) ir = true;
    else if (!strcmp(argv[i], "--no-verify")) no_verify = true;
    else if (!strcmp(argv[i], "-o") && i + 1 < argc) out = argv[++i];
    else if (argv[i][0] == '-' && argv[i][1]) {
      fprintf(stderr, "loom dump: unknown or incomplete option '%s'\n\n", argv[i]);
      usage(stderr);
      return 2;
    } else if (!in) in = argv[i];
    else {
      fprintf(stderr, "loom dump: one file at a time\n");
      return 2;
    }
  }
  if (!in) {
    usage(stderr);
    return 2;
  }
  size_t n;
  char *buf = cli_read_file(in, &n);
  if (!buf) {
    fprintf(stderr, "loom dump: cannot read %s: %s\n", in, strerror(errno));
    return 1;
  }
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
