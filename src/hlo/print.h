/* The IR as StableHLO text (`loom dump`): what Loom read, whatever it read it from (text or
 * bytecode), printed so that Loom's own text parser reads it back to the same IR (tests check this
 * over the conformance corpus: print -> parse -> lm_module_dump equal). Functions are printed in
 * the pretty `func.func` form, ops in the generic `"dialect.op"(...) ({...}) {...} : (...) -> (...)`
 * form, attributes in their MLIR spelling (enums as #stablehlo<kind VALUE>, integer lists as
 * array<i64: ...>, constants as hex dense<"0x..."> blobs so every value survives exactly). Source
 * locations are not printed. */
#ifndef LM_HLO_PRINT_H
#define LM_HLO_PRINT_H

#include <stdbool.h>
#include "hlo/ir.h"

/* Returns a malloc'd NUL-terminated string (caller frees), or NULL when out of memory. */
char *lm_module_print(const lm_module *m);

/* A growing text buffer for passes that write StableHLO (the partitioner): lm_tb_put appends
 * printf-style; on allocation failure oom is set and later appends do nothing. Free s. */
typedef struct lm_textbuf {
  char *s;
  size_t n, cap;
  bool oom;
} lm_textbuf;

void lm_tb_put(lm_textbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void lm_tb_put_type(lm_textbuf *b, const lm_type *t);
/* An attribute in the spelling the parser reads back (name: the attribute's name, for enums). */
void lm_tb_put_attr(lm_textbuf *b, const lm_attr *a, const char *name);
/* op of fn in generic form, its operands and results renamed %<prefix><id> (ins/outs) and
 * retyped (in_types/out_types); its regions and attributes as they are. */
void lm_tb_put_op_as(lm_textbuf *b, const lm_func *fn, const lm_op *op, const char *prefix, const uint32_t *ins,
                     const lm_type *in_types, const uint32_t *outs, const lm_type *out_types, int indent);
/* A whole function (pretty func.func header, generic ops). */
void lm_tb_put_func(lm_textbuf *b, const lm_func *fn);
/* op of fn in generic form as it is (values named %v<id>), one line plus its regions. */
void lm_tb_put_op(lm_textbuf *b, const lm_func *fn, const lm_op *op, int indent);
/* "module @name attributes {...} {" and m's module-level ops; the caller adds functions and "}". */
void lm_tb_put_module_head(lm_textbuf *b, const lm_module *m);

#endif
