/* `loom queue`, `loom sessions`, `loom usage`: the shared pool as the controller sees it
 * (POOL_STATUS, docs/pool.md): sessions waiting for devices in admission order, every session
 * with its class, devices and accounting, and usage per user. Text or --json. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "cli/cli.h"
#include "cli/util.h"
#include "client/cconn.h"
#include "client/locate.h"

enum { K_QUEUE, K_SESSIONS, K_USAGE };

static const char g_usage_queue[] =
    "usage: loom queue [--controller HOST:PORT] [--json]\n"
    "\n"
    "Shows the sessions waiting for the shared pool's devices, in the order they will be admitted\n"
    "(priority classes highest first, first come first served within a class), and why each waits.\n"
    "\n"
    "options:\n"
    "  --controller HOST:PORT   the controller (default: $LOOM_CONTROLLER, else the local cluster)\n"
    "  --json                   print JSON instead of text\n"
    "  --timeout SECONDS        give up after this long (default 30)\n"
    "  -h, --help               show this help\n";

static const char g_usage_sessions[] =
    "usage: loom sessions [--controller HOST:PORT] [--all] [--since WHEN] [--json]\n"
    "\n"
    "Shows the controller's sessions: user, class, state (queued, running on its own devices, shared),\n"
    "the devices it holds and its accounting: launches, device-seconds, bytes moved.\n"
    "\n"
    "options:\n"
    "  --all                    also the closed sessions the controller remembers\n"
    "  --since WHEN             with --all: only sessions open at or after WHEN (see loom usage)\n"
    "  --controller HOST:PORT   the controller (default: $LOOM_CONTROLLER, else the local cluster)\n"
    "  --json                   print JSON instead of text\n"
    "  --timeout SECONDS        give up after this long (default 30)\n"
    "  -h, --help               show this help\n";

static const char g_usage_usage[] =
    "usage: loom usage [--controller HOST:PORT] [--since WHEN] [--json]\n"
    "\n"
    "Shows what each user used of the pool: sessions and devices now, launches, device-seconds of\n"
    "launches, device-seconds held, bytes moved, over the sessions open at or after WHEN.\n"
    "\n"
    "options:\n"
    "  --since WHEN             a time ago (30s, 15m, 2h, 1d) or a Unix time in seconds (default: all\n"
    "                           the sessions the controller remembers since it started)\n"
    "  --controller HOST:PORT   the controller (default: $LOOM_CONTROLLER, else the local cluster)\n"
    "  --json                   print JSON instead of text\n"
    "  --timeout SECONDS        give up after this long (default 30)\n"
    "  -h, --help               show this help\n";

/* "30s", "15m", "2h", "1d" ago, or Unix seconds: Unix milliseconds. */
static int parse_since(const char *cmd, const char *s, uint64_t *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (end == s || errno || v < 0) return cli_usage_error(cmd, "--since wants 30s, 15m, 2h, 1d or Unix seconds, not '%s'", s);
  double mul = !strcmp(end, "s") ? 1 : !strcmp(end, "m") ? 60 : !strcmp(end, "h") ? 3600 : !strcmp(end, "d") ? 86400
               : !*end ? 0 : -1;
  if (mul < 0) return cli_usage_error(cmd, "--since: unknown unit '%s' (s, m, h or d)", end);
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  double now = (double)ts.tv_sec * 1000.0 + (double)ts.tv_nsec / 1e6;
  double when = mul == 0 ? v * 1000.0 : now - v * mul * 1000.0;
  *out = when > 0 ? (uint64_t)when : 1;
  return 0;
}

static void fmt_ids(const uint32_t *ids, size_t n, char *buf, size_t cap) {
  if (!n) {
    snprintf(buf, cap, "-");
    return;
  }
  cli_format_ids(ids, n, buf, cap);
}

static cJSON *usage_json(const Lmw__PoolUsage *u) {
  cJSON *o = cJSON_CreateObject();
  if (!u) return o;
  cJSON_AddNumberToObject(o, "device_seconds", u->device_seconds);
  cJSON_AddNumberToObject(o, "held_device_seconds", u->held_device_seconds);
  cJSON_AddNumberToObject(o, "launches", (double)u->launches);
  cJSON_AddNumberToObject(o, "launches_failed", (double)u->launches_failed);
  cJSON_AddNumberToObject(o, "launches_timed_out", (double)u->launches_timed_out);
  cJSON_AddNumberToObject(o, "bytes_in", (double)u->bytes_in);
  cJSON_AddNumberToObject(o, "bytes_out", (double)u->bytes_out);
  return o;
}

static cJSON *session_json(const Lmw__PoolSession *s) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "session", (double)s->id);
  cJSON_AddStringToObject(o, "user", s->user);
  cJSON_AddStringToObject(o, "name", s->name);
  cJSON_AddStringToObject(o, "priority", s->priority);
  cJSON_AddStringToObject(o, "state", s->state);
  cJSON_AddNumberToObject(o, "devices_asked", s->devices_asked);
  cJSON *d = cJSON_AddArrayToObject(o, "device_ids");
  for (size_t i = 0; i < s->n_device_ids; i++) cJSON_AddItemToArray(d, cJSON_CreateNumber(s->device_ids[i]));
  if (!strcmp(s->state, "queued")) {
    cJSON_AddNumberToObject(o, "position", s->position);
    cJSON_AddStringToObject(o, "blocked_by", s->blocked_by);
  }
  cJSON_AddNumberToObject(o, "opened_unix_ms", (double)s->opened_unix_ms);
  cJSON_AddNumberToObject(o, "admitted_unix_ms", (double)s->admitted_unix_ms);
  cJSON_AddNumberToObject(o, "closed_unix_ms", (double)s->closed_unix_ms);
  cJSON_AddNumberToObject(o, "launch_limit_ms", s->launch_limit_ms);
  cJSON_AddNumberToObject(o, "launches_active", s->launches_active);
  cJSON_AddNumberToObject(o, "suspensions", s->suspensions);
  cJSON_AddNumberToObject(o, "moves", s->moves);
  cJSON_AddNumberToObject(o, "share_weight", s->share_weight);
  cJSON_AddNumberToObject(o, "suspended_ms", (double)s->suspended_ms);
  cJSON_AddItemToObject(o, "usage", usage_json(s->usage));
  return o;
}

static const char *who(const char *user) { return user && user[0] ? user : "-"; }

static int pool_cmd(int kind, int argc, char **argv) {
  const char *cmd = kind == K_QUEUE ? "queue" : kind == K_SESSIONS ? "sessions" : "usage";
  const char *usage = kind == K_QUEUE ? g_usage_queue : kind == K_SESSIONS ? g_usage_sessions : g_usage_usage;
  const char *ctl_addr = NULL;
  bool json = false, all = false;
  uint64_t timeout_s = 30, since = 0;
  enum { O_CTL = 1, O_JSON, O_TIMEOUT, O_SINCE, O_ALL };
  static const struct option opts_q[] = {{"controller", required_argument, 0, O_CTL}, {"json", no_argument, 0, O_JSON},
                                         {"timeout", required_argument, 0, O_TIMEOUT}, {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
  static const struct option opts_s[] = {{"controller", required_argument, 0, O_CTL}, {"json", no_argument, 0, O_JSON},
                                         {"timeout", required_argument, 0, O_TIMEOUT}, {"since", required_argument, 0, O_SINCE},
                                         {"all", no_argument, 0, O_ALL}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
  static const struct option opts_u[] = {{"controller", required_argument, 0, O_CTL}, {"json", no_argument, 0, O_JSON},
                                         {"timeout", required_argument, 0, O_TIMEOUT}, {"since", required_argument, 0, O_SINCE},
                                         {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
  cli_options o = {.cmd = cmd, .usage = usage, .argc = argc, .argv = argv,
                   .opts = kind == K_QUEUE ? opts_q : kind == K_SESSIONS ? opts_s : opts_u};
  int ch;
  while ((ch = cli_next_option(&o)) > 0) {
    switch (ch) {
    case O_CTL: ctl_addr = optarg; break;
    case O_JSON: json = true; break;
    case O_ALL: all = true; break;
    case O_TIMEOUT:
      if (cli_parse_u64(cmd, "--timeout", optarg, 1, 86400, &timeout_s) < 0) return 2;
      break;
    case O_SINCE:
      if (parse_since(cmd, optarg, &since) < 0) return 2;
      break;
    }
  }
  if (ch < 0) return o.exit;
  if (since && kind == K_SESSIONS) all = true;

  char addr[LM_ADDR_MAX];
  lm_err err;
  if (lm_locate_controller(ctl_addr, addr, sizeof addr, &err) < 0) return cli_fail(cmd, "%s", err.msg);
  int64_t tmo = (int64_t)timeout_s * 1000;
  char name[32];
  snprintf(name, sizeof name, "loom %s", cmd);
  lm_cconn *c;
  if (cli_open_session(addr, tmo, name, &c, &err) < 0) return cli_fail(cmd, "%s", err.msg);
  Lmw__PoolStatus req = LMW__POOL_STATUS__INIT;
  req.since_unix_ms = since;
  uint64_t self = lm_cconn_session_id(c);
  ProtobufCMessage *rm = NULL;
  int rc = lm_cconn_call(c, LM_MSG_POOL_STATUS, &req.base, LM_MSG_POOL_STATUS_REPLY, tmo, NULL, NULL, &rm, &err);
  lm_cconn_close(c);
  if (rc < 0) return cli_fail(cmd, "%s", err.msg);
  const Lmw__PoolStatusReply *r = (const Lmw__PoolStatusReply *)rm;

  char classes[256] = "";
  size_t cn = 0;
  for (size_t i = 0; i < r->n_classes && cn < sizeof classes; i++)
    cn += (size_t)snprintf(classes + cn, sizeof classes - cn, "%s%s", i ? " > " : "", r->classes[i]->name);
  uint32_t nqueued = 0;
  for (size_t i = 0; i < r->n_sessions; i++) nqueued += !strcmp(r->sessions[i]->state, "queued");

  if (json) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddNumberToObject(root, "total_devices", r->total_devices);
    cJSON_AddNumberToObject(root, "free_devices", r->free_devices);
    cJSON_AddStringToObject(root, "config", r->config);
    cJSON *ca = cJSON_AddArrayToObject(root, "classes");
    for (size_t i = 0; i < r->n_classes; i++) {
      cJSON *x = cJSON_CreateObject();
      cJSON_AddStringToObject(x, "name", r->classes[i]->name);
      cJSON_AddNumberToObject(x, "launch_limit_ms", r->classes[i]->launch_limit_ms);
      cJSON_AddItemToArray(ca, x);
    }
    if (kind == K_USAGE) {
      if (since) cJSON_AddNumberToObject(root, "since_unix_ms", (double)since);
      cJSON *ua = cJSON_AddArrayToObject(root, "users");
      for (size_t i = 0; i < r->n_users; i++) {
        const Lmw__PoolUser *u = r->users[i];
        cJSON *x = cJSON_CreateObject();
        cJSON_AddStringToObject(x, "user", u->user);
        cJSON_AddNumberToObject(x, "sessions_open", u->sessions);
        cJSON_AddNumberToObject(x, "devices_held", u->devices);
        cJSON_AddNumberToObject(x, "memory_bytes", (double)u->memory);
        cJSON_AddItemToObject(x, "usage", usage_json(u->usage));
        cJSON_AddItemToArray(ua, x);
      }
      cJSON *sa = cJSON_AddArrayToObject(root, "sessions");
      for (size_t i = 0; i < r->n_sessions; i++)
        if (r->sessions[i]->id != self) cJSON_AddItemToArray(sa, session_json(r->sessions[i]));
    } else {
      cJSON *sa = cJSON_AddArrayToObject(root, kind == K_QUEUE ? "queue" : "sessions");
      for (size_t i = 0; i < r->n_sessions; i++) {
        const Lmw__PoolSession *s = r->sessions[i];
        if (s->id == self) continue; /* this command's own session */
        if (kind == K_QUEUE && strcmp(s->state, "queued")) continue;
        if (kind == K_SESSIONS && !all && !strcmp(s->state, "closed")) continue;
        cJSON_AddItemToArray(sa, session_json(s));
      }
    }
    cli_print_json(root); /* frees root */
    lm_msg_free(rm);
    return 0;
  }

  printf("pool: %u devices, %u free; classes %s; %u waiting%s%s\n", r->total_devices, r->free_devices, classes, nqueued,
         r->config[0] ? "; config " : "", r->config);
  cli_table t;
  char b[8][96];
  if (kind == K_QUEUE) {
    if (!nqueued) {
      printf("no session is waiting\n");
    } else {
      cli_table_init(&t, 7);
      cli_table_row(&t, "POS", "SESSION", "USER", "CLASS", "DEVICES", "WAITED", "WHY");
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      uint64_t now = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
      for (size_t i = 0; i < r->n_sessions; i++) {
        const Lmw__PoolSession *s = r->sessions[i];
        if (strcmp(s->state, "queued")) continue;
        snprintf(b[0], sizeof b[0], "%u", s->position);
        snprintf(b[1], sizeof b[1], "%llu", (unsigned long long)s->id);
        snprintf(b[2], sizeof b[2], "%u", s->devices_asked);
        cli_format_duration(now > s->opened_unix_ms ? now - s->opened_unix_ms : 0, b[3], sizeof b[3]);
        cli_table_row(&t, b[0], b[1], who(s->user), s->priority, b[2], b[3], s->blocked_by);
      }
      cli_table_print(&t);
      cli_table_free(&t);
    }
  } else if (kind == K_SESSIONS) {
    cli_table_init(&t, 11);
    cli_table_row(&t, "SESSION", "USER", "NAME", "CLASS", "STATE", "DEVICES", "LAUNCHES", "DEVICE-S", "HELD-DEVICE-S",
                  "IN", "OUT");
    for (size_t i = 0; i < r->n_sessions; i++) {
      const Lmw__PoolSession *s = r->sessions[i];
      if (s->id == self || (!all && !strcmp(s->state, "closed"))) continue;
      const Lmw__PoolUsage *u = s->usage;
      snprintf(b[0], sizeof b[0], "%llu", (unsigned long long)s->id);
      if (!strcmp(s->state, "queued")) snprintf(b[1], sizeof b[1], "(%u asked)", s->devices_asked);
      else if (!strcmp(s->state, "shared")) snprintf(b[1], sizeof b[1], "all");
      else fmt_ids(s->device_ids, s->n_device_ids, b[1], sizeof b[1]);
      snprintf(b[2], sizeof b[2], "%llu", (unsigned long long)(u ? u->launches : 0));
      snprintf(b[3], sizeof b[3], "%.2f", u ? u->device_seconds : 0);
      snprintf(b[4], sizeof b[4], "%.2f", u ? u->held_device_seconds : 0);
      cli_format_size(u ? u->bytes_in : 0, b[5], sizeof b[5]);
      cli_format_size(u ? u->bytes_out : 0, b[6], sizeof b[6]);
      cli_table_row(&t, b[0], who(s->user), s->name[0] ? s->name : "-", s->priority, s->state, b[1], b[2], b[3], b[4],
                    b[5], b[6]);
    }
    cli_table_print(&t);
    cli_table_free(&t);
  } else {
    cli_table_init(&t, 10);
    cli_table_row(&t, "USER", "OPEN", "DEVICES", "LAUNCHES", "FAILED", "TIMED-OUT", "DEVICE-S", "HELD-DEVICE-S", "IN",
                  "OUT");
    for (size_t i = 0; i < r->n_users; i++) {
      const Lmw__PoolUser *x = r->users[i];
      const Lmw__PoolUsage *u = x->usage;
      snprintf(b[0], sizeof b[0], "%u", x->sessions);
      snprintf(b[1], sizeof b[1], "%u", x->devices);
      snprintf(b[2], sizeof b[2], "%llu", (unsigned long long)(u ? u->launches : 0));
      snprintf(b[3], sizeof b[3], "%llu", (unsigned long long)(u ? u->launches_failed : 0));
      snprintf(b[4], sizeof b[4], "%llu", (unsigned long long)(u ? u->launches_timed_out : 0));
      snprintf(b[5], sizeof b[5], "%.2f", u ? u->device_seconds : 0);
      snprintf(b[6], sizeof b[6], "%.2f", u ? u->held_device_seconds : 0);
      char in[32], out[32];
      cli_format_size(u ? u->bytes_in : 0, in, sizeof in);
      cli_format_size(u ? u->bytes_out : 0, out, sizeof out);
      cli_table_row(&t, who(x->user), b[0], b[1], b[2], b[3], b[4], b[5], b[6], in, out);
    }
    cli_table_print(&t);
    cli_table_free(&t);
  }
  lm_msg_free(rm);
  return 0;
}

int cmd_queue(int argc, char **argv) { return pool_cmd(K_QUEUE, argc, argv); }
int cmd_sessions(int argc, char **argv) { return pool_cmd(K_SESSIONS, argc, argv); }
int cmd_usage(int argc, char **argv) { return pool_cmd(K_USAGE, argc, argv); }
