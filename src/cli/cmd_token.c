/* `loom token create|list|revoke`: client tokens for a controller started with --tokens-file
 * (`loom up` starts its controller with the state directory's `tokens`). The store keeps only
 * SHA-256 hashes; a token is printed once, when it is made. The controller re-reads the file
 * when it changes, so a new or revoked token counts from the next connection. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include "cli/cli.h"
#include "cli/cluster.h"
#include "cli/util.h"
#include "client/locate.h"
#include "net/auth.h"

static const char g_usage[] =
    "usage: loom token create --user NAME [--expires DURATION] [--tokens-file PATH]\n"
    "       loom token list [--json] [--tokens-file PATH]\n"
    "       loom token revoke ID [--tokens-file PATH]\n"
    "\n"
    "Client tokens: a client presents one when it connects (LOOM_TOKEN=..., or LOOM_TOKEN_FILE=PATH);\n"
    "the controller refuses clients without a valid one. `create` prints the new token once (only\n"
    "its hash is kept); `list` shows every token's id, user, times and state; `revoke` ends one\n"
    "(ID: its id, or a unique prefix of 4 or more digits) from the next connection on.\n"
    "\n"
    "options:\n"
    "  --user NAME           who the token is for (1-64 of A-Z a-z 0-9 . _ @ -)\n"
    "  --expires DURATION    it stops working after this long: 90s, 30m, 12h, 7d (default: never)\n"
    "  --tokens-file PATH    the controller's token store (default: the state directory's `tokens`,\n"
    "                        which `loom up` gives its controller)\n"
    "  --json                `list` as JSON\n"
    "  -h, --help            show this help\n";

static int parse_duration(const char *s, int64_t *out) {
  char *end;
  long long v = strtoll(s, &end, 10);
  if (end == s || v <= 0) return -1;
  long long mul = 1;
  if (!strcmp(end, "") || !strcmp(end, "s")) mul = 1;
  else if (!strcmp(end, "m")) mul = 60;
  else if (!strcmp(end, "h")) mul = 3600;
  else if (!strcmp(end, "d")) mul = 86400;
  else return -1;
  if (v > 100LL * 365 * 86400 / mul) return -1;
  *out = (int64_t)(v * mul);
  return 0;
}

static void fmt_time(int64_t t, char *buf, size_t cap) {
  if (!t) {
    snprintf(buf, cap, "-");
    return;
  }
  time_t tt = (time_t)t;
  struct tm tm;
  strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&tt, &tm));
}

static const char *state_of(const lm_token_entry *e, int64_t now) {
  if (e->revoked) return "revoked";
  if (e->expires && now >= e->expires) return "expired";
  return "valid";
}

int cmd_token(int argc, char **argv) {
  const char *cmd = "token";
  if (argc < 2) {
    fputs(g_usage, stderr);
    return 2;
  }
  const char *sub = argv[1];
  if (!strcmp(sub, "--help") || !strcmp(sub, "-h") || !strcmp(sub, "help")) {
    fputs(g_usage, stdout);
    return 0;
  }
  if (strcmp(sub, "create") && strcmp(sub, "list") && strcmp(sub, "revoke"))
    return cli_usage_error(cmd, "unknown subcommand '%s' (create, list, revoke)", sub);
  enum { O_USER = 1, O_EXPIRES, O_FILE, O_JSON };
  static const struct option opts[] = {
      {"user", required_argument, 0, O_USER},
      {"expires", required_argument, 0, O_EXPIRES},
      {"tokens-file", required_argument, 0, O_FILE},
      {"json", no_argument, 0, O_JSON},
      {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0},
  };
  const char *user = NULL, *file = NULL;
  int64_t expires_in = 0;
  bool json = false;
  bool revoke = !strcmp(sub, "revoke"), create = !strcmp(sub, "create");
  cli_options o = {.cmd = cmd, .usage = g_usage, .argc = argc - 1, .argv = argv + 1, .opts = opts,
                   .max_operands = revoke ? 1 : 0};
  int ch;
  while ((ch = cli_next_option(&o)) > 0) {
    switch (ch) {
    case O_USER: user = optarg; break;
    case O_EXPIRES:
      if (parse_duration(optarg, &expires_in) < 0)
        return cli_usage_error(cmd, "--expires wants a duration like 90s, 30m, 12h or 7d (got '%s')", optarg);
      break;
    case O_FILE: file = optarg; break;
    case O_JSON: json = true; break;
    }
  }
  if (ch < 0) return o.exit;
  int nargs = argc - 1 - optind;
  char **args = argv + 1 + optind;
  if (revoke && nargs != 1) return cli_usage_error(cmd, "which token? loom token revoke ID");
  if (create && !user) return cli_usage_error(cmd, "whose token? pass --user NAME");
  if (create && !lm_auth_user_ok(user))
    return cli_usage_error(cmd, "--user wants 1-%d of the characters A-Z a-z 0-9 . _ @ -", LM_TOKEN_USER_MAX);
  if (!create && (user || expires_in)) return cli_usage_error(cmd, "--user and --expires are for `create`");

  char path[4200];
  lm_err err;
  if (!file) {
    char dir[4096];
    if (create || revoke) {
      if (cli_state_dir_ensure(dir, sizeof dir, &err) < 0) return cli_fail(cmd, "%s", err.msg);
    } else if (lm_state_dir(dir, sizeof dir, &err) < 0) {
      return cli_fail(cmd, "%s", err.msg);
    }
    snprintf(path, sizeof path, "%s/%s", dir, LM_TOKENS_FILE);
    file = path;
  }
  int64_t now = (int64_t)time(NULL);
  int lk = -1;
  if ((create || revoke) && (lk = lm_tokens_lock(file, &err)) < 0) return cli_fail(cmd, "%s", err.msg);
  lm_token_store st;
  int rc = 0;
  if (lm_tokens_load(file, &st, &err) < 0) {
    if (lk >= 0) close(lk);
    return cli_fail(cmd, "%s", err.msg);
  }
  if (create) {
    char tok[LM_TOKEN_STR_LEN + 1];
    rc = lm_tokens_add(&st, user, now, expires_in ? now + expires_in : 0, "cli", tok, &err);
    if (rc == 0) rc = lm_tokens_save(file, &st, &err);
    if (rc == 0) {
      printf("%s\n", tok);
      fflush(stdout);
      fprintf(stderr, "loom token: made token %s for %s%s (shown once; clients pass it as LOOM_TOKEN)\n",
              st.v[st.n - 1].id, user, expires_in ? ", expiring" : "");
      lm_auth_wipe(tok, sizeof tok);
    }
  } else if (revoke) {
    lm_token_entry *e = lm_tokens_find(&st, args[0]);
    if (!e) {
      rc = lm_errf(&err, LOOM_NOT_FOUND, "no token %s in %s (or the prefix names more than one)", args[0], file);
    } else if (e->revoked) {
      fprintf(stderr, "loom token: token %s (user %s) was already revoked\n", e->id, e->user);
    } else {
      e->revoked = now;
      rc = lm_tokens_save(file, &st, &err);
      if (rc == 0) fprintf(stderr, "loom token: revoked token %s (user %s)\n", e->id, e->user);
    }
  } else if (json) {
    cJSON *root = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(root, "tokens");
    for (size_t i = 0; i < st.n; i++) {
      const lm_token_entry *e = &st.v[i];
      cJSON *t = cJSON_CreateObject();
      cJSON_AddStringToObject(t, "id", e->id);
      cJSON_AddStringToObject(t, "user", e->user);
      cJSON_AddNumberToObject(t, "created", (double)e->created);
      cJSON_AddNumberToObject(t, "expires", (double)e->expires);
      cJSON_AddNumberToObject(t, "revoked", (double)e->revoked);
      cJSON_AddStringToObject(t, "state", state_of(e, now));
      cJSON_AddStringToObject(t, "origin", e->origin);
      cJSON_AddItemToArray(arr, t);
    }
    cli_print_json(root);
  } else {
    cli_table t;
    cli_table_init(&t, 6);
    cli_table_row(&t, "ID", "USER", "CREATED", "EXPIRES", "STATE", "MADE BY");
    for (size_t i = 0; i < st.n; i++) {
      const lm_token_entry *e = &st.v[i];
      char c[32], x[32];
      fmt_time(e->created, c, sizeof c);
      fmt_time(e->expires, x, sizeof x);
      cli_table_row(&t, e->id, e->user, c, x, state_of(e, now),
                    !strcmp(e->origin, "up") ? "loom up" : "loom token");
    }
    cli_table_print(&t);
    cli_table_free(&t);
  }
  lm_tokens_free(&st);
  if (lk >= 0) close(lk);
  if (rc < 0) return cli_fail(cmd, "%s", err.msg);
  return 0;
}
