/* NumPy .npy files (format versions 1.0, 2.0 and 3.0): read into and write from plain
 * row-major little-endian element data of a Loom dtype. Mapping: bool '|b1', ints '|i1' .. '<i8'
 * and '|u1' .. '<u8', '<f2', '<f4', '<f8', '<c8', '<c16'; bfloat16 is written with the descr
 * 'bfloat16' (numpy loads it once ml_dtypes, which JAX imports, is loaded) and read from
 * 'bfloat16', or from the raw '<V2' that ml_dtypes arrays are saved as when the caller says it
 * expects bf16. Big-endian and Fortran-order files, object and string arrays are refused. */
#ifndef LM_NPY_H
#define LM_NPY_H

#include <stddef.h>
#include <stdint.h>
#include "common/dtype.h"
#include "common/err.h"

#define LM_NPY_MAX_RANK 16

typedef struct lm_npy {
  lm_dtype dtype;
  int rank;
  int64_t dims[LM_NPY_MAX_RANK];
  void *data;      /* malloc'd, nbytes long (NULL when nbytes is 0) */
  size_t nbytes;
} lm_npy;

/* Parses an .npy image buf[len]. hint is the dtype the caller expects (LOOM_DTYPE_INVALID when
 * none); it only resolves the ambiguous '<V2'. Errors: LOOM_PARSE (malformed), LOOM_UNSUPPORTED
 * (a dtype or layout Loom cannot use), LOOM_NO_MEMORY. */
int lm_npy_parse(const void *buf, size_t len, lm_dtype hint, lm_npy *out, lm_err *err);
/* Reads a file (LOOM_IO when it cannot be read; at most max_bytes, 0 = no limit). */
int lm_npy_read(const char *path, lm_dtype hint, size_t max_bytes, lm_npy *out, lm_err *err);
/* Writes data (row-major, little-endian, lm_dtype layout) as an .npy file. */
int lm_npy_write(const char *path, lm_dtype dtype, int rank, const int64_t *dims, const void *data, size_t nbytes,
                 lm_err *err);
void lm_npy_free(lm_npy *a); /* frees data; NULL is a no-op */

#endif
