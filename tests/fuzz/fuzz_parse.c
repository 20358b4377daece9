/* libFuzzer target for the StableHLO text parser: any bytes must give a module or an error, never
 * a crash, hang or leak. Built with LOOM_FUZZ=ON (clang): build-fuzz/tests/fuzz/fuzz_parse
 * tests/fuzz/corpus/parse. The corpus is replayed in the normal test run (test_fuzz_replay.c). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "hlo/dump.h"
#include "hlo/parse.h"
#include "hlo/partition.h"
#include "hlo/spmd.h"

/* Parses one input with small caps (so a fuzzer cannot ask for gigabytes) and, when it parses,
 * also walks it through the dump to touch every part of the IR, and through the SPMD analysis;
 * an annotated global program is partitioned, and the per-device program the partitioner writes
 * must parse again (abort otherwise: a finding). */
int lm_fuzz_parse_one(const uint8_t *data, size_t size) {
  lm_parse_opts o = {.filename = "fuzz.mlir", .max_const_bytes = 1 << 20, .max_total_bytes = 64 << 20};
  lm_module *m = NULL;
  lm_err e;
  if (lm_parse_module((const char *)data, size, &o, &m, &e) == 0) {
    char *d = lm_module_dump(m);
    free(d);
    lm_spmd_info *info = NULL;
    if (lm_spmd_analyze(m, &info, &e) == 0 && info->partitioned && info->nproc <= 64) {
      char *text = NULL, *ex = NULL;
      if (lm_partition(m, info, &text, &ex, &e) == 0) {
        lm_module *m2 = NULL;
        lm_parse_opts o2 = {.filename = "partitioned.mlir"};
        if (lm_parse_module(text, strlen(text), &o2, &m2, &e) < 0) abort();
        lm_module_free(m2);
      }
      free(text);
      free(ex);
    }
    lm_spmd_info_free(info);
    lm_module_free(m);
  }
  return 0;
}

#ifndef LM_FUZZ_NO_MAIN
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return lm_fuzz_parse_one(data, size); }
#endif
