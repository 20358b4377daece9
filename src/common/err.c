/* Error values: formatting, prefixing, and the status name table. */
#include <stdio.h>
#include <string.h>
#include "common/err.h"

int lm_verrf(lm_err *e, int code, const char *fmt, va_list ap) {
  if (e) {
    e->code = code;
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
  }
  return code;
}

int lm_errf(lm_err *e, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  lm_verrf(e, code, fmt, ap);
  va_end(ap);
  return code;
}

int lm_err_prefix(lm_err *e, const char *fmt, ...) {
  if (!e) return 0;
  char old[LM_ERR_MSG_MAX];
  memcpy(old, e->msg, sizeof old);
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(e->msg, sizeof e->msg, fmt, ap);
  va_end(ap);
  if (n >= 0 && (size_t)n < sizeof e->msg - 2) {
    size_t off = (size_t)n, room = sizeof e->msg - off;
    e->msg[off] = ':';
    e->msg[off + 1] = ' ';
    size_t len = strnlen(old, room - 3);
    memcpy(e->msg + off + 2, old, len);
    e->msg[off + 2 + len] = 0;
  }
  return e->code;
}

void lm_err_clear(lm_err *e) {
  if (e) { e->code = 0; e->msg[0] = 0; }
}

const char *lm_status_name(int code) {
  switch (code) {
#define X(name, value, desc) case value: return #name;
    LOOM_STATUS_LIST(X)
#undef X
  }
  return "UNKNOWN";
}

const char *lm_status_desc(int code) {
  switch (code) {
#define X(name, value, desc) case value: return desc;
    LOOM_STATUS_LIST(X)
#undef X
  }
  return "unknown status";
}
