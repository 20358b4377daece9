/* `loom status` (placeholder until its issue lands: it says so and fails). */
#include <stdio.h>
#include "cli/cli.h"

int cmd_status(int argc, char **argv) {
  (void)argc; (void)argv;
  fprintf(stderr, "loom status: not available in this build yet\n");
  return 2;
}
