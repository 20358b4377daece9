/* `loom run` (placeholder until its issue lands: it says so and fails). */
#include <stdio.h>
#include "cli/cli.h"

int cmd_run(int argc, char **argv) {
  (void)argc; (void)argv;
  fprintf(stderr, "loom run: not available in this build yet\n");
  return 2;
}
