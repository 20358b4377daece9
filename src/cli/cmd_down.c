/* `loom down` (placeholder until its issue lands: it says so and fails). */
#include <stdio.h>
#include "cli/cli.h"

int cmd_down(int argc, char **argv) {
  (void)argc; (void)argv;
  fprintf(stderr, "loom down: not available in this build yet\n");
  return 2;
}
