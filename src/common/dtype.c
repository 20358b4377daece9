/* Element type tables generated from LOOM_DTYPE_LIST. */
#include <string.h>
#include "common/dtype.h"

size_t lm_dtype_size(lm_dtype t) {
  switch (t) {
#define X(name, value, mlir, npy, size) case LOOM_DTYPE_##name: return size;
    LOOM_DTYPE_LIST(X)
#undef X
    default: return 0;
  }
}

const char *lm_dtype_name(lm_dtype t) {
  switch (t) {
#define X(name, value, mlir, npy, size) case LOOM_DTYPE_##name: return mlir;
    LOOM_DTYPE_LIST(X)
#undef X
    default: return "invalid";
  }
}

const char *lm_dtype_npy(lm_dtype t) {
  switch (t) {
#define X(name, value, mlir, npy, size) case LOOM_DTYPE_##name: return npy;
    LOOM_DTYPE_LIST(X)
#undef X
    default: return "";
  }
}

lm_dtype lm_dtype_from_mlir(const char *s, size_t n) {
#define X(name, value, mlir, npy, size) \
  if (n == sizeof(mlir) - 1 && memcmp(s, mlir, n) == 0) return LOOM_DTYPE_##name;
  LOOM_DTYPE_LIST(X)
#undef X
  return LOOM_DTYPE_INVALID;
}

lm_dtype lm_dtype_from_npy(const char *d) {
  /* numpy writes single-byte types with '|' and may write '=' for native order. */
  if (!d || !*d) return LOOM_DTYPE_INVALID;
  if (strcmp(d, "bfloat16") == 0) return LOOM_DTYPE_BF16;
  char c = d[0];
  const char *body = (c == '<' || c == '|' || c == '=') ? d + 1 : NULL;
  if (!body) return LOOM_DTYPE_INVALID; /* big-endian ('>') is not supported */
#define X(name, value, mlir, npy, size) \
  if (npy[0] != 'b' && strcmp(body, (npy) + 1) == 0) return LOOM_DTYPE_##name;
  LOOM_DTYPE_LIST(X)
#undef X
  return LOOM_DTYPE_INVALID;
}
