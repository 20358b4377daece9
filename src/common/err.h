/* Errors as values: a status code (loom_status, negative on error) plus a message.
 * Functions that can fail return int (0 or a negative LOOM_* code) and take an optional
 * `lm_err *` that receives the human-readable detail. Nothing here prints or aborts. */
#ifndef LM_ERR_H
#define LM_ERR_H

#include <stdarg.h>
#include "loom/loom_status.h"

#define LM_ERR_MSG_MAX 1024

typedef struct lm_err {
  int code;                   /* 0 or a negative loom_status */
  char msg[LM_ERR_MSG_MAX];   /* NUL-terminated detail, "" when code == 0 */
} lm_err;

/* Sets *e (if e != NULL) to code and the formatted message; returns code. */
int lm_errf(lm_err *e, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int lm_verrf(lm_err *e, int code, const char *fmt, va_list ap);
/* Prepends "prefix: " to an existing message (annotating as the error propagates). */
int lm_err_prefix(lm_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void lm_err_clear(lm_err *e);

/* "INVALID_ARGUMENT" and "invalid argument" for a code; "UNKNOWN" for an unknown one. */
const char *lm_status_name(int code);
const char *lm_status_desc(int code);

/* Propagate a failing int status. */
#define LM_TRY(expr)                  \
  do {                                \
    int lm__rc = (expr);              \
    if (lm__rc < 0) return lm__rc;    \
  } while (0)

/* Overflow-checked size arithmetic for sizes that came from a peer or a file. */
static inline int lm_mul_size(size_t a, size_t b, size_t *out) { return __builtin_mul_overflow(a, b, out) ? -1 : 0; }
static inline int lm_add_size(size_t a, size_t b, size_t *out) { return __builtin_add_overflow(a, b, out) ? -1 : 0; }

#endif
