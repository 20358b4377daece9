/* Structural verification of a parsed module, independent of kernels and of the text form (a
 * bytecode reader runs it too): every SSA value is defined once and before its uses (in its
 * block or an enclosing one; values of a region are not visible after it), value ids are in
 * range, regions have one block ending in the right terminator (func.return in functions,
 * stablehlo.return / sdy.return in op regions) and no terminator appears mid-block, function
 * bodies match their signatures, func.return matches the result types, and func.call names an
 * existing function with matching types. Per-op shape rules are the kernels' (lm_verify_fn). */
#ifndef LM_HLO_VERIFY_H
#define LM_HLO_VERIFY_H

#include "hlo/ir.h"

/* 0 or LOOM_VERIFY with "file:line:col: what is wrong" in err. */
int lm_module_verify(const lm_module *m, lm_err *err);

#endif
