/* Element type helpers over the public loom_dtype enum (include/loom/loom_dtype.h):
 * sizes, names in MLIR and numpy spellings, classification. */
#ifndef LM_DTYPE_H
#define LM_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include "loom/loom_dtype.h"

typedef loom_dtype lm_dtype;

size_t lm_dtype_size(lm_dtype t);          /* bytes per element; 0 for INVALID */
const char *lm_dtype_name(lm_dtype t);     /* MLIR spelling: "f32", "ui8", "complex<f32>" */
const char *lm_dtype_npy(lm_dtype t);      /* numpy descr: "<f4"; "bfloat16" has none */
/* Parses an MLIR element type spelling of length n; LOOM_DTYPE_INVALID if not one of ours. */
lm_dtype lm_dtype_from_mlir(const char *s, size_t n);
lm_dtype lm_dtype_from_npy(const char *descr);

static inline bool lm_dtype_is_pred(lm_dtype t) { return t == LOOM_DTYPE_PRED; }
static inline bool lm_dtype_is_sint(lm_dtype t) { return t >= LOOM_DTYPE_S8 && t <= LOOM_DTYPE_S64; }
static inline bool lm_dtype_is_uint(lm_dtype t) { return t >= LOOM_DTYPE_U8 && t <= LOOM_DTYPE_U64; }
static inline bool lm_dtype_is_int(lm_dtype t) { return lm_dtype_is_sint(t) || lm_dtype_is_uint(t); }
static inline bool lm_dtype_is_float(lm_dtype t) { return t >= LOOM_DTYPE_F16 && t <= LOOM_DTYPE_F64; }
static inline bool lm_dtype_is_complex(lm_dtype t) { return t == LOOM_DTYPE_C64 || t == LOOM_DTYPE_C128; }
static inline bool lm_dtype_valid(int t) { return t > LOOM_DTYPE_INVALID && t < LOOM_DTYPE_COUNT; }
/* Bit width of integer/float types (1 for PRED); for complex, of the whole element. */
static inline int lm_dtype_bits(lm_dtype t) { return t == LOOM_DTYPE_PRED ? 1 : (int)(8 * lm_dtype_size(t)); }

#endif
