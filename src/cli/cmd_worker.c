/* `loom worker`: run a worker daemon with CPU devices in the foreground until SIGINT/SIGTERM
 * or until its controller goes away. `loom up` starts these for a local cluster. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cli/cli.h"
#include "cli/util.h"
#include "common/log.h"
#include "worker/sim.h"
#include "worker/worker.h"

static const char g_usage[] =
    "usage: loom worker --controller HOST:PORT [--devices D] [--device-memory BYTES] [--slice NAME]\n"
    "                   [--simulate N]\n"
    "\n"
    "Runs a worker with D CPU devices and registers them with the controller. Stops on Ctrl-C or\n"
    "SIGTERM, and with an error when the controller goes away. A worker the controller declared\n"
    "lost (it stalled past the heartbeat timeout) drops its state and rejoins as a standby.\n"
    "\n"
    "options:\n"
    "  --controller HOST:PORT      the controller (default: $LOOM_CONTROLLER)\n"
    "  --devices D                 number of CPU devices (default 4, at most 1024)\n"
    "  --device-memory BYTES       memory capacity of each device, e.g. 2G or 512MiB (default 2GiB)\n"
    "  --slice NAME                the slice this worker belongs to (default \"default\")\n"
    "  --connect-timeout SECONDS   keep trying to reach the controller this long (default 30)\n"
    "  --data-listen HOST:PORT     where clients put and get shards (default: this host's address\n"
    "                              toward the controller, any free port)\n"
    "  --secret-file PATH          the cluster secret to prove to a controller that has one\n"
    "                              (default: $LOOM_SECRET_FILE); the secret never crosses the wire\n"
    "  --backend interp|pjrt       who computes: Loom's executor (default), or a PJRT plugin (XLA):\n"
    "                              each per-device program without collectives or custom calls is\n"
    "                              compiled by the plugin, the rest runs on Loom's executor\n"
    "  --pjrt-plugin PATH          the plugin (default: $LOOM_PJRT_PLUGIN, else xla-cpu-pjrt's)\n"
    "  --pjrt-option K=V           a client create option for the plugin (repeat; default\n"
    "                              cpu_device_count=D)\n"
    "  --simulate N                run N simulated workers in this process instead (each with D\n"
    "                              devices, its own control connection and data port): they\n"
    "                              register, heartbeat, load programs and answer launches, puts\n"
    "                              and gets, but execute nothing (results are zeros); for\n"
    "                              measuring the control plane at scale (docs/scale.md)\n"
    "  --standby                   register as spare capacity: no virtual devices until the controller\n"
    "                              swaps it in for a lost worker of as many devices (docs/elastic.md)\n"
    "  --exit-when-fenced          exit when the controller declares this worker lost (default: drop\n"
    "                              every shard and program and rejoin as a standby)\n"
    "  -h, --help                  show this help\n"
    "\n"
    "Logs go to stderr; LOOM_LOG_LEVEL=debug|info|warn|error sets how much.\n";

int cmd_worker(int argc, char **argv) {
  const char *cmd = "worker";
  lm_worker_config cfg;
  lm_worker_config_default(&cfg);
  cfg.controller = getenv("LOOM_CONTROLLER");
  cfg.secret_file = getenv("LOOM_SECRET_FILE");
  if (cfg.secret_file && !*cfg.secret_file) cfg.secret_file = NULL;
  enum { O_CTL = 1, O_DEV, O_MEM, O_SLICE, O_CT, O_DATA, O_SECRET, O_BACKEND, O_PLUGIN, O_POPT, O_SIM, O_STANDBY, O_FENCED,
         O_EXITFENCED };
  const char *popts[64];
  cfg.pjrt_options = popts;
  static const struct option opts[] = {
      {"controller", required_argument, 0, O_CTL},
      {"devices", required_argument, 0, O_DEV},
      {"device-memory", required_argument, 0, O_MEM},
      {"slice", required_argument, 0, O_SLICE},
      {"connect-timeout", required_argument, 0, O_CT},
      {"data-listen", required_argument, 0, O_DATA},
      {"secret-file", required_argument, 0, O_SECRET},
      {"backend", required_argument, 0, O_BACKEND},
      {"pjrt-plugin", required_argument, 0, O_PLUGIN},
      {"pjrt-option", required_argument, 0, O_POPT},
      {"simulate", required_argument, 0, O_SIM},
      {"standby", no_argument, 0, O_STANDBY},
      {"fenced", required_argument, 0, O_FENCED}, /* internal: set when a fenced worker rejoins */
      {"exit-when-fenced", no_argument, 0, O_EXITFENCED},
      {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0},
  };
  cli_options o = {.cmd = cmd, .usage = g_usage, .argc = argc, .argv = argv, .opts = opts};
  int ch;
  uint64_t v;
  uint32_t simulate = 0;
  bool exit_fenced = false;
  while ((ch = cli_next_option(&o)) > 0) {
    switch (ch) {
    case O_CTL: cfg.controller = optarg; break;
    case O_DEV:
      if (cli_parse_u64(cmd, "--devices", optarg, 1, LM_WORKER_MAX_DEVICES, &v) < 0) return 2;
      cfg.devices = (uint32_t)v;
      break;
    case O_MEM:
      if (cli_parse_size(cmd, "--device-memory", optarg, &v) < 0) return 2;
      cfg.device_memory = v;
      break;
    case O_SLICE:
      if (!*optarg || strlen(optarg) > 255 || strpbrk(optarg, " \t\r\n"))
        return cli_usage_error(cmd, "--slice wants a name of 1-255 characters without spaces");
      cfg.slice = optarg;
      break;
    case O_CT:
      if (cli_parse_u64(cmd, "--connect-timeout", optarg, 0, 86400, &v) < 0) return 2;
      cfg.connect_timeout_ms = (uint32_t)(v * 1000);
      break;
    case O_DATA: cfg.data_listen = optarg; break;
    case O_SECRET: cfg.secret_file = optarg; break;
    case O_BACKEND:
      if (strcmp(optarg, "interp") && strcmp(optarg, "pjrt"))
        return cli_usage_error(cmd, "--backend is interp or pjrt, not '%s'", optarg);
      cfg.backend = optarg;
      break;
    case O_PLUGIN: cfg.pjrt_plugin = optarg; break;
    case O_SIM:
      if (cli_parse_u64(cmd, "--simulate", optarg, 1, LM_SIM_MAX_WORKERS, &v) < 0) return 2;
      simulate = (uint32_t)v;
      break;
    case O_POPT:
      if (!strchr(optarg, '=')) return cli_usage_error(cmd, "--pjrt-option wants NAME=VALUE, not '%s'", optarg);
      if (cfg.npjrt_options == 64) return cli_usage_error(cmd, "more than 64 --pjrt-option");
      popts[cfg.npjrt_options++] = optarg;
      break;
    case O_STANDBY: cfg.standby = true; break;
    case O_EXITFENCED: exit_fenced = true; break;
    case O_FENCED: {
      unsigned id;
      unsigned long long ep;
      if (sscanf(optarg, "%u:%llu", &id, &ep) != 2) return cli_usage_error(cmd, "--fenced wants ID:EPOCH");
      cfg.fenced_worker = id + 1;
      cfg.fenced_epoch = ep;
      break;
    }
    }
  }
  if (ch < 0) return o.exit;
  if (!cfg.controller || !*cfg.controller)
    return cli_usage_error(cmd, "which controller? pass --controller HOST:PORT or set LOOM_CONTROLLER");
  lm_log_init("worker");
  lm_err err;
  if (simulate) {
    if (lm_sim_run(&cfg, simulate, &err) < 0) return cli_fail(cmd, "%s", err.msg);
    return 0;
  }
  uint32_t fw = 0;
  uint64_t fe = 0;
  int rc = lm_worker_run_fenced(&cfg, &fw, &fe, &err);
  if (rc == LOOM_WORKER_LOST && fw && !exit_fenced) {
    /* Fenced: everything this process holds is stale. A fresh process drops it all at once (shards,
     * programs, data-plane state) and registers as a standby under a new epoch. */
    lm_warn("%s; dropping every shard and program and rejoining as a standby", err.msg);
    char fenced[64];
    snprintf(fenced, sizeof fenced, "%u:%llu", fw - 1, (unsigned long long)fe);
    char **nargv = calloc((size_t)argc + 6, sizeof *nargv);
    if (nargv) {
      int k = 0;
      nargv[k++] = "loom";
      nargv[k++] = "worker";
      for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--standby")) continue;
        if (!strcmp(argv[i], "--fenced")) {
          i++;
          continue;
        }
        if (!strncmp(argv[i], "--fenced=", 9)) continue;
        nargv[k++] = argv[i];
      }
      nargv[k++] = "--standby";
      nargv[k++] = "--fenced";
      nargv[k++] = fenced;
      nargv[k] = NULL;
      fflush(NULL);
      execv("/proc/self/exe", nargv);
      lm_error("cannot restart as a standby: %s", strerror(errno));
    }
  }
  if (rc < 0) return cli_fail(cmd, "%s", err.msg);
  return 0;
}
