/* `loom interpret` (placeholder until its issue lands: it says so and fails). */
#include <stdio.h>
#include "cli/cli.h"

int cmd_interpret(int argc, char **argv) {
  (void)argc; (void)argv;
  fprintf(stderr, "loom interpret: not available in this build yet\n");
  return 2;
}
