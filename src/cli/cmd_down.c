/* `loom down`: stop the local cluster that `loom up --detach` started. Signals its supervisor,
 * which stops the workers and the controller in order; then makes sure that none of the
 * recorded processes is left, killing stragglers, and reports what the supervisor found. */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/cli.h"
#include "cli/cluster.h"
#include "cli/util.h"
#include "client/locate.h"
#include "net/sock.h"

static const char g_usage[] =
    "usage: loom down [--timeout SECONDS]\n"
    "\n"
    "Stops the local cluster started with `loom up --detach` (the one recorded in the state\n"
    "directory: $LOOM_STATE_DIR, else $XDG_RUNTIME_DIR/loom, else /tmp/loom-$UID) and waits until\n"
    "none of its processes is left.\n"
    "\n"
    "options:\n"
    "  --timeout SECONDS   how long to wait for an orderly stop before killing (default 30)\n"
    "  -h, --help          show this help\n";

typedef struct proc {
  long pid;
  uint64_t start;
} proc;

/* Parses "pid:start,pid:start" into at most max entries. */
static size_t parse_procs(const char *s, proc *out, size_t max) {
  size_t n = 0;
  while (s && *s && n < max) {
    char *end;
    long pid = strtol(s, &end, 10);
    uint64_t start = 0;
    if (*end == ':') start = strtoull(end + 1, &end, 10);
    if (pid > 0) out[n++] = (proc){pid, start};
    s = strchr(end, ',');
    if (s) s++;
  }
  return n;
}

int cmd_down(int argc, char **argv) {
  const char *cmd = "down";
  uint64_t timeout_s = 30;
  static const struct option opts[] = {
      {"timeout", required_argument, 0, 1},
      {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0},
  };
  cli_options o = {.cmd = cmd, .usage = g_usage, .argc = argc, .argv = argv, .opts = opts};
  int ch;
  while ((ch = cli_next_option(&o)) > 0)
    if (cli_parse_u64(cmd, "--timeout", optarg, 1, 86400, &timeout_s) < 0) return 2; /* the only option */
  if (ch < 0) return o.exit;

  char dir[4096], addr[LM_ADDR_MAX] = "?", v[8192];
  lm_err err;
  if (lm_state_dir(dir, sizeof dir, &err) < 0) return cli_fail(cmd, "%s", err.msg);
  if (lm_state_get(dir, "supervisor_pid", v, sizeof v, &err) < 0)
    return cli_fail(cmd, "no local cluster is running (nothing recorded in %s)", dir);
  proc sup = {strtol(v, NULL, 10), 0};
  if (lm_state_get(dir, "supervisor_start", v, sizeof v, NULL) == 0) sup.start = strtoull(v, NULL, 10);
  lm_state_get(dir, "address", addr, sizeof addr, NULL);
  proc kids[257];
  size_t nkids = 0;
  if (lm_state_get(dir, "controller_pid", v, sizeof v, NULL) == 0) {
    kids[0].pid = strtol(v, NULL, 10);
    kids[0].start = 0;
    if (lm_state_get(dir, "controller_start", v, sizeof v, NULL) == 0) kids[0].start = strtoull(v, NULL, 10);
    nkids = 1;
  }
  if (lm_state_get(dir, "workers", v, sizeof v, NULL) == 0) nkids += parse_procs(v, kids + nkids, 256);

  bool was_running = lm_proc_alive(sup.pid, sup.start);
  bool orderly = true;
  if (was_running) {
    cli_remove_file(dir, CLI_STOP_FILE);
    kill((pid_t)sup.pid, SIGTERM);
    if (!cli_wait_gone(sup.pid, sup.start, timeout_s * 1000)) {
      orderly = false;
      kill((pid_t)sup.pid, SIGKILL);
      cli_wait_gone(sup.pid, sup.start, 5000);
    }
  }
  /* Whatever the supervisor did, none of the cluster's processes may stay behind. */
  size_t stragglers = 0;
  for (size_t i = 0; i < nkids; i++) {
    if (!lm_proc_alive(kids[i].pid, kids[i].start) || kids[i].start == 0) continue;
    stragglers++;
    kill((pid_t)kids[i].pid, SIGKILL);
    if (!cli_wait_gone(kids[i].pid, kids[i].start, 5000))
      fprintf(stderr, "loom down: process %ld does not go away\n", kids[i].pid);
  }
  char stop[4096] = "";
  char path[4200];
  snprintf(path, sizeof path, "%s/%s", dir, CLI_STOP_FILE);
  FILE *f = fopen(path, "r");
  if (f) {
    size_t n = fread(stop, 1, sizeof stop - 1, f);
    stop[n] = 0;
    fclose(f);
    cli_remove_file(dir, CLI_STOP_FILE);
  }
  cli_remove_file(dir, LM_STATE_FILE);
  cli_remove_file(dir, "controller.addr");
  if (!was_running) {
    if (stragglers) fprintf(stderr, "loom down: killed %zu leftover process%s\n", stragglers, stragglers == 1 ? "" : "es");
    printf("loom down: the local cluster (controller %s) was not running any more; cleaned up its state\n", addr);
    return 0;
  }
  int rc = 0;
  if (!orderly) {
    fprintf(stderr, "loom down: the cluster did not stop within %llu s and was killed (logs in %s)\n",
            (unsigned long long)timeout_s, dir);
    rc = 1;
  }
  if (stragglers) {
    fprintf(stderr, "loom down: killed %zu process%s the supervisor left behind\n", stragglers,
            stragglers == 1 ? "" : "es");
    rc = 1;
  }
  if (stop[0] && strcmp(stop, "ok\n") != 0) {
    fprintf(stderr, "loom down: %s", stop);
    rc = 1;
  }
  printf("loom down: stopped the local cluster (controller %s, %zu worker%s)\n", addr, nkids ? nkids - 1 : 0,
         nkids == 2 ? "" : "s");
  return rc;
}
