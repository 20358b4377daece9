/* `loom controller`: run the controller daemon in the foreground (logs on stderr) until
 * SIGINT/SIGTERM. `loom up` starts one of these for a local cluster. */
#include <errno.h>
#include <getopt.h>
#include <sys/stat.h>
#include <stdio.h>
#include <string.h>
#include "cli/cli.h"
#include "cli/cluster.h"
#include "cli/util.h"
#include "common/log.h"
#include "controller/controller.h"

static const char g_usage[] =
    "usage: loom controller [--listen HOST:PORT] [options]\n"
    "\n"
    "Runs the controller: workers register their devices with it, clients connect to it.\n"
    "Stops on Ctrl-C or SIGTERM.\n"
    "\n"
    "options:\n"
    "  --listen HOST:PORT          address to listen on (default 127.0.0.1:29100; port 0 = any free port)\n"
    "  --address-file PATH         write the address actually listened on to PATH once ready\n"
    "  --heartbeat-interval MS     how often workers heartbeat (default 200)\n"
    "  --heartbeat-timeout MS      a worker silent this long is lost and fenced (default 900)\n"
    "  --handshake-timeout MS      a connection must say HELLO within this (default 5000)\n"
    "  --frame-timeout MS          a started frame must arrive within this, plus 1 s per MiB (default 10000)\n"
    "  --max-payload BYTES         largest frame payload accepted (default 64M)\n"
    "  --secret-file PATH          the cluster secret (64 hex digits, mode 0600): workers must prove\n"
    "                              they hold it (HMAC challenge both ways) before registering\n"
    "  --tokens-file PATH          client tokens (`loom token`): clients must present one in HELLO;\n"
    "                              the file is re-read when it changes\n"
    "  --insecure                  allow a non-loopback --listen without both files\n"
    "  --session-idle-timeout MS   close a session that sent nothing this long and has no launch\n"
    "                              running (default 0: never)\n"
    "  --max-sessions-per-user N   open sessions one token's user may hold (default 1024)\n"
    "  --config PATH               the shared pool's priority classes, launch limits and per-user quotas\n"
    "                              (a small TOML subset; docs/pool.md)\n"
    "  --reclaim-after MS          once fresh worker/device ids run out, reuse those of a worker lost\n"
    "                              this long (same device count, ids no longer named; default 60000)\n"
    "  --http HOST:PORT            serve HTTP there: Prometheus /metrics, /healthz (liveness),\n"
    "                              /readyz[?min_devices=N] (readiness); port 0 = any free port\n"
    "                              (default: no HTTP port; `loom up` serves one on 127.0.0.1)\n"
    "  --http-address-file PATH    write the HTTP port's address to PATH once it serves\n"
    "  --http-token-file PATH      /metrics and the dashboard need this file's token (first line,\n"
    "                              16-256 characters) as 'Authorization: Bearer TOKEN'; with\n"
    "                              --tokens-file they need that or a client token (/healthz and\n"
    "                              /readyz stay open for probes)\n"
    "  --recover-wait MS           a lost worker with no standby (`loom worker --standby`) to replace\n"
    "                              it: its launches wait this long for a new worker to join, then\n"
    "                              fail (default 0: they fail at once; docs/elastic.md)\n"
    "  --no-snapshots              do not snapshot puts or launch outputs without a replica into another\n"
    "                              worker's host memory (taken while a standby exists or --recover-wait\n"
    "                              is set)\n"
    "  --snapshot-every N          snapshot live launch outputs that only a replay could restore every N\n"
    "                              completed launches, and truncate the launch log behind them\n"
    "                              (default 100; 0: not by count)\n"
    "  --snapshot-interval MS      ... or every MS milliseconds, whichever comes first (default 10000;\n"
    "                              0: not by time; both 0: launch outputs are never snapshotted)\n"
    "  --replay-keep-mb N          arrays a client deleted that a replay of a live array still reads\n"
    "                              are kept at the workers, at most N MiB in all (default 256; 0: none)\n"
    "  --checkpoint-dir DIR        where `loom checkpoint save` writes (a directory per user below it;\n"
    "                              default $LOOM_STATE_DIR/checkpoints). With workers on several hosts it\n"
    "                              must be a shared filesystem mounted at the same path on every host\n"
    "  --admins USERS              with --tokens-file: comma-separated users who may `loom drain` and\n"
    "                              save or load checkpoints in directories they name (the IFRT proxy's\n"
    "                              persistence); without --tokens-file every client may\n"
    "  --state DIR                 keep a journal of the durable state in DIR/journal.db (SQLite, WAL):\n"
    "                              killed and restarted with the same DIR, the controller restores it,\n"
    "                              workers keep their shards and clients their sessions\n"
    "                              (docs/durability.md)\n"
    "  --resume-wait MS            with --state: how long restored workers and sessions have to come\n"
    "                              back after a restart (default 60000)\n"
    "  --relay-min-workers N       launches over N or more workers go through relays (hierarchical\n"
    "                              dispatch, docs/scale.md); default 128, 0: never\n"
    "  --relay-group K             workers per relay group (default 32)\n"
    "  -h, --help                  show this help\n"
    "\n"
    "Logs go to stderr; LOOM_LOG_LEVEL=debug|info|warn|error sets how much.\n";

int cmd_controller(int argc, char **argv) {
  const char *cmd = "controller";
  lm_controller_config cfg;
  lm_controller_config_default(&cfg);
  enum { O_LISTEN = 1, O_ADDRFILE, O_HBI, O_HBT, O_HST, O_FT, O_MAXP, O_SECRET, O_TOKENS, O_INSECURE, O_IDLE, O_MAXS, O_RECLAIM, O_HTTP, O_HTTPFILE, O_CONFIG,
         O_RECWAIT, O_NOSNAP, O_SNAPEVERY, O_SNAPINT, O_KEEPMB, O_HTTPTOK, O_CKPTDIR, O_ADMINS, O_STATE, O_RESUMEWAIT,
         O_RELAYMIN, O_RELAYGROUP };
  static const struct option opts[] = {
      {"listen", required_argument, 0, O_LISTEN},
      {"address-file", required_argument, 0, O_ADDRFILE},
      {"heartbeat-interval", required_argument, 0, O_HBI},
      {"heartbeat-timeout", required_argument, 0, O_HBT},
      {"handshake-timeout", required_argument, 0, O_HST},
      {"frame-timeout", required_argument, 0, O_FT},
      {"max-payload", required_argument, 0, O_MAXP},
      {"secret-file", required_argument, 0, O_SECRET},
      {"tokens-file", required_argument, 0, O_TOKENS},
      {"insecure", no_argument, 0, O_INSECURE},
      {"session-idle-timeout", required_argument, 0, O_IDLE},
      {"max-sessions-per-user", required_argument, 0, O_MAXS},
      {"reclaim-after", required_argument, 0, O_RECLAIM},
      {"http", required_argument, 0, O_HTTP},
      {"http-address-file", required_argument, 0, O_HTTPFILE},
      {"http-token-file", required_argument, 0, O_HTTPTOK},
      {"config", required_argument, 0, O_CONFIG},
      {"recover-wait", required_argument, 0, O_RECWAIT},
      {"no-snapshots", no_argument, 0, O_NOSNAP},
      {"snapshot-every", required_argument, 0, O_SNAPEVERY},
      {"snapshot-interval", required_argument, 0, O_SNAPINT},
      {"replay-keep-mb", required_argument, 0, O_KEEPMB},
      {"checkpoint-dir", required_argument, 0, O_CKPTDIR},
      {"admins", required_argument, 0, O_ADMINS},
      {"state", required_argument, 0, O_STATE},
      {"resume-wait", required_argument, 0, O_RESUMEWAIT},
      {"relay-min-workers", required_argument, 0, O_RELAYMIN},
      {"relay-group", required_argument, 0, O_RELAYGROUP},
      {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0},
  };
  cli_options o = {.cmd = cmd, .usage = g_usage, .argc = argc, .argv = argv, .opts = opts};
  int ch;
  uint64_t v;
  while ((ch = cli_next_option(&o)) > 0) {
    switch (ch) {
    case O_LISTEN: cfg.listen = optarg; break;
    case O_ADDRFILE: cfg.address_file = optarg; break;
    case O_SECRET: cfg.secret_file = optarg; break;
    case O_TOKENS: cfg.tokens_file = optarg; break;
    case O_INSECURE: cfg.insecure = true; break;
    case O_HTTP: cfg.http_listen = optarg; break;
    case O_HTTPFILE: cfg.http_address_file = optarg; break;
    case O_HTTPTOK: cfg.http_token_file = optarg; break;
    case O_CONFIG: cfg.pool_config = optarg; break;
    case O_IDLE:
      if (cli_parse_u64(cmd, "--session-idle-timeout", optarg, 0, 86400000, &v) < 0) return 2;
      cfg.session_idle_timeout_ms = (uint32_t)v;
      break;
    case O_RECLAIM:
      if (cli_parse_u64(cmd, "--reclaim-after", optarg, 0, 86400000, &v) < 0) return 2;
      cfg.reclaim_after_ms = (uint32_t)v;
      break;
    case O_RECWAIT:
      if (cli_parse_u64(cmd, "--recover-wait", optarg, 0, 86400000, &v) < 0) return 2;
      cfg.recover_wait_ms = (uint32_t)v;
      break;
    case O_NOSNAP: cfg.no_snapshots = true; break;
    case O_SNAPEVERY:
      if (cli_parse_u64(cmd, "--snapshot-every", optarg, 0, 1u << 30, &v) < 0) return 2;
      cfg.snapshot_every = (uint32_t)v;
      break;
    case O_SNAPINT:
      if (cli_parse_u64(cmd, "--snapshot-interval", optarg, 0, 86400000, &v) < 0) return 2;
      cfg.snapshot_interval_ms = (uint32_t)v;
      break;
    case O_KEEPMB:
      if (cli_parse_u64(cmd, "--replay-keep-mb", optarg, 0, 1u << 30, &v) < 0) return 2;
      cfg.replay_keep_mb = (uint32_t)v;
      break;
    case O_CKPTDIR: cfg.checkpoint_dir = optarg; break;
    case O_ADMINS: cfg.admins = optarg; break;
    case O_STATE: cfg.state_dir = optarg; break;
    case O_RELAYMIN:
      if (cli_parse_u64(cmd, "--relay-min-workers", optarg, 0, 1u << 20, &v) < 0) return 2;
      cfg.relay_min_workers = (uint32_t)v;
      break;
    case O_RELAYGROUP:
      if (cli_parse_u64(cmd, "--relay-group", optarg, 2, 4096, &v) < 0) return 2;
      cfg.relay_group = (uint32_t)v;
      break;
    case O_RESUMEWAIT:
      if (cli_parse_u64(cmd, "--resume-wait", optarg, 100, 86400000, &v) < 0) return 2;
      cfg.resume_wait_ms = (uint32_t)v;
      break;
    case O_MAXS:
      if (cli_parse_u64(cmd, "--max-sessions-per-user", optarg, 1, 1000000, &v) < 0) return 2;
      cfg.max_sessions_per_user = (uint32_t)v;
      break;
    case O_HBI:
      if (cli_parse_u64(cmd, "--heartbeat-interval", optarg, 10, 600000, &v) < 0) return 2;
      cfg.heartbeat_interval_ms = (uint32_t)v;
      break;
    case O_HBT:
      if (cli_parse_u64(cmd, "--heartbeat-timeout", optarg, 50, 3600000, &v) < 0) return 2;
      cfg.heartbeat_timeout_ms = (uint32_t)v;
      break;
    case O_HST:
      if (cli_parse_u64(cmd, "--handshake-timeout", optarg, 0, 3600000, &v) < 0) return 2;
      cfg.conn.handshake_timeout_ms = (uint32_t)v;
      break;
    case O_FT:
      if (cli_parse_u64(cmd, "--frame-timeout", optarg, 0, 3600000, &v) < 0) return 2;
      cfg.conn.frame_timeout_ms = (uint32_t)v;
      break;
    case O_MAXP:
      if (cli_parse_size(cmd, "--max-payload", optarg, &v) < 0) return 2;
      if (v > LM_FRAME_PAYLOAD_HARD_MAX) return cli_usage_error(cmd, "--max-payload is above the 1 TiB ceiling");
      cfg.conn.limits.max_payload = v;
      break;
    }
  }
  if (ch < 0) return o.exit;
  if (cfg.heartbeat_timeout_ms <= cfg.heartbeat_interval_ms)
    return cli_usage_error(cmd, "--heartbeat-timeout (%u ms) must be longer than --heartbeat-interval (%u ms)",
                           cfg.heartbeat_timeout_ms, cfg.heartbeat_interval_ms);
  if (cfg.http_address_file && !cfg.http_listen)
    return cli_usage_error(cmd, "--http-address-file needs --http HOST:PORT");
  if (cfg.http_token_file && !cfg.http_listen) return cli_usage_error(cmd, "--http-token-file needs --http HOST:PORT");
  lm_log_init("controller");
  lm_err err;
  char ckdir[4096];
  if (!cfg.checkpoint_dir) { /* default: under the state directory, if it can be used */
    if (cli_state_dir_ensure(ckdir, sizeof ckdir - 16, &err) < 0) {
      lm_warn("no checkpoint directory (checkpoints are refused; pass --checkpoint-dir DIR): %s", err.msg);
    } else {
      strcat(ckdir, "/checkpoints");
      if (mkdir(ckdir, 0700) != 0 && errno != EEXIST)
        lm_warn("no checkpoint directory (checkpoints are refused; pass --checkpoint-dir DIR): cannot create %s: %s",
                ckdir, strerror(errno));
      else
        cfg.checkpoint_dir = ckdir;
    }
  }
  if (lm_controller_run(&cfg, &err) < 0) return cli_fail(cmd, "%s", err.msg);
  return 0;
}
