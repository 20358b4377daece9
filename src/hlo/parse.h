/* The StableHLO text reader: MLIR text as JAX prints it (pretty and generic op forms) into the
 * IR of ir.h, followed by the structural verifier (verify.h).
 *
 * Every input gets either a module or an error that says file:line:column, what was found and
 * what was expected; nothing here aborts, prints or leaks, whatever the bytes (the parser is
 * fuzzed: tests/fuzz/fuzz_parse.c). Element types outside Loom's set (f8 kinds, i2/i4,
 * quantized types, ...) are refused with LOOM_UNSUPPORTED naming the type. */
#ifndef LM_HLO_PARSE_H
#define LM_HLO_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "hlo/ir.h"

typedef struct lm_parse_opts {
  const char *filename;   /* used in messages and lm_loc.file; NULL = "<string>" (copied) */
  uint32_t first_line;    /* line number of text[0]; 0 = 1 (for a case cut out of a file) */
  size_t max_const_bytes; /* cap on one dense constant after splat expansion; 0 = 1 GiB */
  size_t max_total_bytes; /* cap on the module's whole arena; 0 = 8 GiB */
  bool no_verify;         /* skip lm_module_verify (tests of the parser alone) */
  /* Supplies the bytes of `dense_resource<NAME> : T` constants (nbytes of them, T's size): sets
   * *data (borrowed until release(arg) is called, which may be NULL) or fails with err. Without
   * a resolver they stay unresolved (data NULL, the name kept, printed back as written). */
  int (*resolve)(void *ctx, const char *name, size_t nbytes, const void **data, void (**release)(void *),
                 void **arg, lm_err *err);
  void *resolve_ctx;
} lm_parse_opts;

/* Reads a program from text[0..len) (need not be NUL-terminated): MLIR bytecode when it starts
 * with the bytecode magic number (bytecode.h: what jax.export and the IFRT proxy send), else
 * StableHLO text; never decided by a file name. On success *out owns a new module (free with
 * lm_module_free). Errors: LOOM_PARSE (syntax), LOOM_UNSUPPORTED (a type or construct Loom does
 * not run), LOOM_VERIFY (structure), LOOM_NO_MEMORY; err gets the message. */
int lm_parse_module(const char *text, size_t len, const lm_parse_opts *opts, lm_module **out, lm_err *err);

/* Reads and parses a file (opts->filename defaults to path). LOOM_IO if it cannot be read. */
int lm_parse_file(const char *path, const lm_parse_opts *opts, lm_module **out, lm_err *err);

/* One attribute or type written as text, into m's arena: the bytecode reader's path for dialects
 * that have no binary encoding (sdy). The whole string must be the attribute or type. */
int lm_parse_attr_text(lm_module *m, const char *text, size_t len, lm_attr *out, lm_err *err);
int lm_parse_type_text(lm_module *m, const char *text, size_t len, lm_type *out, lm_err *err);

#endif
