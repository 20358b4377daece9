/* libFuzzer target for the MLIR bytecode reader: any bytes must give a module or an error, never a
 * crash, hang, leak or unbounded allocation. Inputs without the magic number get it prepended, so
 * the fuzzer spends its time inside the reader. Built with LOOM_FUZZ=ON (clang):
 * build-fuzz/tests/fuzz/fuzz_bytecode tests/fuzz/corpus/bytecode (seeds: gen_bytecode_seeds.py).
 * The corpus is replayed in the normal test run (test_fuzz_replay.c). A module that reads is also
 * printed and read back as text, which must succeed: what the reader accepts, the printer and the
 * text parser must handle too. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "hlo/bytecode.h"
#include "hlo/dump.h"
#include "hlo/parse.h"
#include "hlo/print.h"

int lm_fuzz_bytecode_one(const uint8_t *data, size_t size) {
  uint8_t *buf = NULL;
  if (!lm_is_bytecode(data, size)) {
    buf = malloc(size + 4);
    if (!buf) return 0;
    memcpy(buf, "ML\xefR", 4);
    memcpy(buf + 4, data, size);
    data = buf;
    size += 4;
  }
  lm_parse_opts o = {.filename = "fuzz.mlirbc", .max_const_bytes = 1 << 20, .max_total_bytes = 64 << 20};
  lm_module *m = NULL;
  lm_err e;
  if (lm_parse_module((const char *)data, size, &o, &m, &e) == 0) {
    char *d = lm_module_dump(m);
    char *t = lm_module_print(m);
    lm_module *m2 = NULL;
    lm_parse_opts o2 = {.filename = "printed.mlir", .max_const_bytes = 1 << 22, .max_total_bytes = 256 << 20};
    if (t && lm_parse_module(t, strlen(t), &o2, &m2, &e) != 0) abort(); /* printed text must read back */
    lm_module_free(m2);
    free(t);
    free(d);
    lm_module_free(m);
  }
  free(buf);
  return 0;
}

#ifndef LM_FUZZ_NO_MAIN
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return lm_fuzz_bytecode_one(data, size); }
#endif
