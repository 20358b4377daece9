/* Printing arrays the way numpy does by default (np.array2string): elements aligned in columns,
 * nested brackets, rows wrapped at 75 characters, arrays over 1000 elements summarized with
 * "...", floats with at most 8 fractional digits (fewer when fewer identify the value), bools as
 * True/False. Also a JSON form. Used by `loom run`. */
#ifndef LM_CLI_NDPRINT_H
#define LM_CLI_NDPRINT_H

#include <stdint.h>
#include <stdio.h>
#include "common/dtype.h"

/* Prints data (row-major, little-endian, dtype layout) of the given shape to f, numpy style,
 * without a trailing newline. */
void nd_print(FILE *f, lm_dtype dtype, int rank, const int64_t *dims, const void *data);
/* Prints the elements as a nested JSON array (non-finite floats as "nan", "inf", "-inf"
 * strings; complex as [re, im]; bf16/f16 as numbers). */
void nd_print_json(FILE *f, lm_dtype dtype, int rank, const int64_t *dims, const void *data);

#endif
