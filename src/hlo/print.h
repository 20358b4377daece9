/* The IR as StableHLO text (`loom dump`): what Loom read, whatever it read it from (text or
 * bytecode), printed so that Loom's own text parser reads it back to the same IR (tests check this
 * over the conformance corpus: print -> parse -> lm_module_dump equal). Functions are printed in
 * the pretty `func.func` form, ops in the generic `"dialect.op"(...) ({...}) {...} : (...) -> (...)`
 * form, attributes in their MLIR spelling (enums as #stablehlo<kind VALUE>, integer lists as
 * array<i64: ...>, constants as hex dense<"0x..."> blobs so every value survives exactly). Source
 * locations are not printed. */
#ifndef LM_HLO_PRINT_H
#define LM_HLO_PRINT_H

#include "hlo/ir.h"

/* Returns a malloc'd NUL-terminated string (caller frees), or NULL when out of memory. */
char *lm_module_print(const lm_module *m);

#endif
