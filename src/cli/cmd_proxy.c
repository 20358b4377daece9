/* `loom proxy`: the IFRT proxy server in the foreground, so that unmodified JAX programs
 * (JAX_PLATFORMS=proxy) run on a Loom cluster. `loom up` starts one beside its controller. */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include "cli/cli.h"
#include "cli/util.h"
#include "common/log.h"
#include "proxy/proxy.h"

static const char g_usage[] =
    "usage: loom proxy [--listen HOST:PORT] [--controller HOST:PORT] [options]\n"
    "\n"
    "Serves JAX's IFRT proxy protocol (gRPC) and runs what JAX asks for on a Loom cluster; each\n"
    "client session is one Loom session. Point JAX at it with\n"
    "  JAX_PLATFORMS=proxy JAX_BACKEND_TARGET=grpc://HOST:PORT IFRT_PROXY_USE_INSECURE_GRPC_CREDENTIALS=true\n"
    "Stops on Ctrl-C or SIGTERM.\n"
    "\n"
    "options:\n"
    "  --listen HOST:PORT        address to listen on (default 127.0.0.1:29000; port 0 = any free port)\n"
    "  --controller HOST:PORT    the cluster's controller (default: $LOOM_CONTROLLER, else the local cluster)\n"
    "  --address-file PATH       write the address actually listened on to PATH once ready\n"
    "  --host-buffer-wait MS     how long a request waits for its host buffer to arrive (default 60000)\n"
    "  --pool-devices N          each JAX session asks the shared pool for N devices and sees only them\n"
    "                            (it waits in the controller's queue until they are free; docs/pool.md)\n"
    "  --priority CLASS          ... in this priority class\n"
    "  --share-weight W          ... time-sharing them with other weighted sessions in proportion to W\n"
    "  --trace-dir DIR           where JAX's profiler requests (jax.profiler.start_trace/stop_trace with\n"
    "                            pathwaysutils) leave Loom's launch trace: DIR/SESSION/loom-trace.json\n"
    "                            (default: $LOOM_TRACE_DIR, else the state directory's traces/)\n"
    "  -h, --help                show this help\n"
    "\n"
    "Logs go to stderr; LOOM_LOG_LEVEL=debug|info|warn|error sets how much. docs/proxy.md lists\n"
    "the supported requests and JAX versions.\n";

static volatile sig_atomic_t g_stop;
static void on_signal(int sig) { (void)sig; g_stop = 1; }

int cmd_proxy(int argc, char **argv) {
  const char *cmd = "proxy";
  px_options po = {.listen = "127.0.0.1:29000", .host_buffer_wait_ms = 60000, .stop = &g_stop};
  enum { O_LISTEN = 1, O_CTL, O_ADDRFILE, O_HBW, O_POOL, O_PRIO, O_WEIGHT, O_TRACEDIR };
  static const struct option opts[] = {
      {"listen", required_argument, 0, O_LISTEN},
      {"controller", required_argument, 0, O_CTL},
      {"address-file", required_argument, 0, O_ADDRFILE},
      {"host-buffer-wait", required_argument, 0, O_HBW},
      {"pool-devices", required_argument, 0, O_POOL},
      {"priority", required_argument, 0, O_PRIO},
      {"share-weight", required_argument, 0, O_WEIGHT},
      {"trace-dir", required_argument, 0, O_TRACEDIR},
      {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0},
  };
  cli_options o = {.cmd = cmd, .usage = g_usage, .argc = argc, .argv = argv, .opts = opts};
  int ch;
  uint64_t v;
  while ((ch = cli_next_option(&o)) > 0) {
    switch (ch) {
    case O_LISTEN: po.listen = optarg; break;
    case O_CTL: po.controller = optarg; break;
    case O_ADDRFILE: po.address_file = optarg; break;
    case O_TRACEDIR: po.trace_dir = optarg; break;
    case O_POOL:
      if (cli_parse_u64(cmd, "--pool-devices", optarg, 1, 65536, &v) < 0) return 2;
      po.pool_devices = (uint32_t)v;
      break;
    case O_PRIO: po.priority = optarg; break;
    case O_WEIGHT:
      if (cli_parse_u64(cmd, "--share-weight", optarg, 1, 1000000, &v) < 0) return 2;
      po.share_weight = (uint32_t)v;
      break;
    case O_HBW:
      if (cli_parse_u64(cmd, "--host-buffer-wait", optarg, 1, 3600000, &v) < 0) return 2;
      po.host_buffer_wait_ms = (int64_t)v;
      break;
    }
  }
  if (ch < 0) return o.exit;
  lm_log_init("proxy");
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);
  lm_err err;
  if (px_serve(&po, &err) < 0) return cli_fail(cmd, "%s", err.msg);
  return 0;
}
