/* libFuzzer target for the StableHLO text parser: any bytes must give a module or an error, never
 * a crash, hang or leak. Built with LOOM_FUZZ=ON (clang): build-fuzz/tests/fuzz/fuzz_parse
 * tests/fuzz/corpus/parse. The corpus is replayed in the normal test run (test_fuzz_replay.c). */
#include <stddef.h>
#include <stdint.h>
#include "hlo/dump.h"
#include "hlo/parse.h"
#include <stdlib.h>

/* Parses one input with small caps (so a fuzzer cannot ask for gigabytes) and, when it parses,
 * also walks it through the dump to touch every part of the IR. */
int lm_fuzz_parse_one(const uint8_t *data, size_t size) {
  lm_parse_opts o = {.filename = "fuzz.mlir", .max_const_bytes = 1 << 20, .max_total_bytes = 64 << 20};
  lm_module *m = NULL;
  lm_err e;
  if (lm_parse_module((const char *)data, size, &o, &m, &e) == 0) {
    char *d = lm_module_dump(m);
    free(d);
    lm_module_free(m);
  }
  return 0;
}

#ifndef LM_FUZZ_NO_MAIN
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return lm_fuzz_parse_one(data, size); }
#endif
