/* A canonical text dump of the IR, for tests and debugging (`loom interpret --dump-ir`): values
 * renumbered in definition order, attributes sorted by name, dense data summarized by a hash.
 * Two modules with the same IR dump the same, whatever text form they were read from. */
#ifndef LM_HLO_DUMP_H
#define LM_HLO_DUMP_H

#include "hlo/ir.h"

/* Returns a malloc'd NUL-terminated string (caller frees), or NULL when out of memory. */
char *lm_module_dump(const lm_module *m);

#endif
