/* libFuzzer target for the .npy reader (src/common/npy.c): malformed headers and truncated data
 * must give errors, never a crash or an over-read. Corpus: tests/fuzz/corpus/npy. */
#include <stddef.h>
#include <stdint.h>
#include "common/npy.h"

int lm_fuzz_npy_one(const uint8_t *data, size_t size) {
  lm_npy a;
  lm_err e;
  if (lm_npy_parse(data, size, size & 1 ? LOOM_DTYPE_BF16 : LOOM_DTYPE_INVALID, &a, &e) == 0) lm_npy_free(&a);
  return 0;
}

#ifndef LM_FUZZ_NO_MAIN
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return lm_fuzz_npy_one(data, size); }
#endif
