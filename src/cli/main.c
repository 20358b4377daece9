/* `loom`: one binary for the cluster daemons, the client commands and the local runner. */
#include <stdio.h>
#include <string.h>
#include "cli/cli.h"

typedef struct command {
  const char *name;
  int (*fn)(int argc, char **argv);
  const char *summary;
} command;

static const command g_commands[] = {
    {"up", cmd_up, "start a local cluster (controller + workers) and wait until it is ready"},
    {"down", cmd_down, "stop the local cluster started with `loom up --detach`"},
    {"controller", cmd_controller, "run the controller daemon"},
    {"worker", cmd_worker, "run a worker daemon with CPU devices"},
    {"devices", cmd_devices, "list the cluster's devices (the unified view)"},
    {"status", cmd_status, "show the cluster's workers, slices and totals"},
    {"queue", cmd_queue, "show the sessions waiting for the shared pool's devices, in admission order"},
    {"sessions", cmd_sessions, "show the sessions: user, priority class, devices, launches, device-seconds"},
    {"usage", cmd_usage, "show the pool's accounting per user (device-seconds, launches, bytes)"},
    {"token", cmd_token, "make, list and revoke client tokens (who may connect to the controller)"},
    {"checkpoint", cmd_checkpoint, "list, show, verify and remove checkpoints (arrays saved as safetensors)"},
    {"drain", cmd_drain, "move a worker's devices and shards to a standby, then release it"},
    {"array", cmd_array, "put a .npy file on the devices as a sharded array, get it back, delete it"},
    {"run", cmd_run, "compile a StableHLO program and run it on the cluster"},
    {"top", cmd_top, "the cluster at a glance in the terminal, refreshing (the dashboard's view)"},
    {"trace", cmd_trace, "record every launch's phases per device as a Perfetto/Chrome trace"},
    {"proxy", cmd_proxy, "serve JAX's IFRT proxy protocol (JAX_PLATFORMS=proxy) on the cluster"},
    {"interpret", cmd_interpret, "run StableHLO files on this machine, without a cluster"},
    {"dump", cmd_dump, "print the program Loom reads from a file (text or bytecode) as StableHLO text"},
    {"compile", cmd_compile, "show how a program runs across devices; --explain the partitioner's choices"},
};

static void usage(FILE *f) {
  fprintf(f, "usage: loom <command> [options]\n\ncommands:\n");
  for (size_t i = 0; i < sizeof g_commands / sizeof g_commands[0]; i++)
    fprintf(f, "  %-11s %s\n", g_commands[i].name, g_commands[i].summary);
  fprintf(f, "\n`loom <command> --help` describes a command's options.\n");
}

int main(int argc, char **argv) {
  if (argc < 2) { usage(stderr); return 2; }
  const char *c = argv[1];
  if (!strcmp(c, "--help") || !strcmp(c, "-h") || !strcmp(c, "help")) { usage(stdout); return 0; }
  if (!strcmp(c, "--version") || !strcmp(c, "version")) { printf("loom %s\n", LOOM_VERSION_STRING); return 0; }
  for (size_t i = 0; i < sizeof g_commands / sizeof g_commands[0]; i++)
    if (!strcmp(c, g_commands[i].name)) return g_commands[i].fn(argc - 1, argv + 1);
  fprintf(stderr, "loom: unknown command '%s'\n\n", c);
  usage(stderr);
  return 2;
}
