/* `loom trace start|stop`: records every launch's phases per device on the controller and writes
 * them as a Chrome/Perfetto trace JSON (open it in ui.perfetto.dev or chrome://tracing). Talks
 * to the controller's HTTP port (`loom controller --http`) with libcurl, presenting the client
 * token as for every other command. */
#include <curl/curl.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "cli/cli.h"
#include "cli/util.h"
#include "client/locate.h"
#include "net/sock.h"

static const char g_usage[] =
    "usage: loom trace start [--http HOST:PORT]\n"
    "       loom trace stop --out DIR [--http HOST:PORT]\n"
    "\n"
    "Records a trace of every launch on the cluster: `start` begins recording on the controller,\n"
    "`stop` ends it and writes DIR/loom-trace-YYYYMMDD-HHMMSS.json, a Chrome trace event file with\n"
    "one track per device (phases queued, inputs, execute, report) and the controller's launches;\n"
    "open it in https://ui.perfetto.dev or chrome://tracing. docs/observability.md explains it.\n"
    "\n"
    "options:\n"
    "  --http HOST:PORT   the controller's HTTP port (default: $LOOM_HTTP, else the local cluster's,\n"
    "                     which `loom up` prints)\n"
    "  --out DIR          where `stop` writes the trace (made if missing)\n"
    "  --timeout SECONDS  give up after this long (default 60)\n"
    "  -h, --help         show this help\n"
    "\n"
    "The client token is $LOOM_TOKEN, else $LOOM_TOKEN_FILE's, else the local cluster's.\n";

typedef struct body {
  char *p;
  size_t len;
  bool too_big;
} body;

static size_t on_data(char *ptr, size_t size, size_t n, void *arg) {
  body *b = arg;
  size_t add = size * n;
  if (b->len + add > ((size_t)4 << 30)) { /* a trace of more than 4 GiB: refuse rather than swap */
    b->too_big = true;
    return 0;
  }
  char *p = realloc(b->p, b->len + add + 1);
  if (!p) return 0;
  memcpy(p + b->len, ptr, add);
  b->p = p;
  b->len += add;
  b->p[b->len] = 0;
  return add;
}

/* POSTs to http://addr/path; *status the HTTP status, out the body (malloc'd). */
static int post(const char *addr, const char *path, const char *token, long timeout_s, long *status, body *out,
                lm_err *err) {
  CURL *c = curl_easy_init();
  if (!c) return lm_errf(err, LOOM_NO_MEMORY, "cannot start libcurl");
  char url[LM_ADDR_MAX + 64], auth[512];
  snprintf(url, sizeof url, "http://%s%s", addr, path);
  struct curl_slist *h = NULL;
  if (token && *token) {
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", token);
    h = curl_slist_append(h, auth);
  }
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_POST, 1L);
  curl_easy_setopt(c, CURLOPT_POSTFIELDS, "");
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, out);
  curl_easy_setopt(c, CURLOPT_TIMEOUT, timeout_s);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_NOPROXY, "*"); /* the controller, never an HTTP proxy of the environment */
  CURLcode rc = curl_easy_perform(c);
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
  curl_slist_free_all(h);
  curl_easy_cleanup(c);
  if (auth[0]) memset(auth, 0, sizeof auth);
  if (rc != CURLE_OK)
    return lm_errf(err, LOOM_CONNECT, "cannot reach the controller's HTTP port %s: %s", addr,
                   out->too_big ? "the trace is larger than 4 GiB" : curl_easy_strerror(rc));
  return 0;
}

/* The HTTP address (explicit, $LOOM_HTTP, the local cluster's) and the controller address it
 * belongs to when known (for the token lookup; "" otherwise). */
static int locate_http(const char *explicit_addr, char *out, size_t cap, char *ctl, size_t ccap, lm_err *err) {
  ctl[0] = 0;
  const char *env = getenv("LOOM_HTTP");
  if (explicit_addr || (env && *env)) {
    snprintf(out, cap, "%s", explicit_addr ? explicit_addr : env);
    const char *c = getenv("LOOM_CONTROLLER");
    if (c) snprintf(ctl, ccap, "%s", c);
    return 0;
  }
  char dir[4096];
  LM_TRY(lm_state_dir(dir, sizeof dir, err));
  if (lm_state_get(dir, "http", out, cap, NULL) < 0 || !out[0])
    return lm_errf(err, LOOM_NOT_FOUND, "no controller HTTP port given (--http HOST:PORT or $LOOM_HTTP) and no local "
                   "cluster with one in %s (loom up serves one)", dir);
  lm_state_get(dir, "address", ctl, ccap, NULL);
  return 0;
}

int cmd_trace(int argc, char **argv) {
  const char *cmd = "trace";
  enum { O_HTTP = 1, O_OUT, O_TIMEOUT };
  static const struct option opts[] = {
      {"http", required_argument, 0, O_HTTP},
      {"out", required_argument, 0, O_OUT},
      {"timeout", required_argument, 0, O_TIMEOUT},
      {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0},
  };
  cli_options o = {.cmd = cmd, .usage = g_usage, .argc = argc, .argv = argv, .opts = opts, .max_operands = 1};
  const char *http = NULL, *outdir = NULL;
  uint64_t timeout_s = 60;
  int ch;
  while ((ch = cli_next_option(&o)) > 0) {
    switch (ch) {
    case O_HTTP: http = optarg; break;
    case O_OUT: outdir = optarg; break;
    case O_TIMEOUT:
      if (cli_parse_u64(cmd, "--timeout", optarg, 1, 86400, &timeout_s) < 0) return 2;
      break;
    }
  }
  if (ch < 0) return o.exit;
  if (optind >= argc) return cli_usage_error(cmd, "say start or stop");
  const char *what = argv[optind];
  bool start = !strcmp(what, "start");
  if (!start && strcmp(what, "stop")) return cli_usage_error(cmd, "say start or stop, not '%s'", what);
  if (!start && !outdir) return cli_usage_error(cmd, "stop needs --out DIR");
  if (start && outdir) return cli_usage_error(cmd, "--out goes with stop");

  lm_err err;
  char addr[LM_ADDR_MAX], ctl[LM_ADDR_MAX], token[256];
  if (locate_http(http, addr, sizeof addr, ctl, sizeof ctl, &err) < 0) return cli_fail(cmd, "%s", err.msg);
  int tn = lm_locate_token(ctl[0] ? ctl : addr, token, sizeof token, &err);
  if (tn < 0) return cli_fail(cmd, "%s", err.msg);
  if (curl_global_init(CURL_GLOBAL_DEFAULT) != 0) return cli_fail(cmd, "cannot start libcurl");
  body b = {0};
  long status = 0;
  int rc = post(addr, start ? "/trace/start" : "/trace/stop", tn > 0 ? token : NULL, (long)timeout_s, &status, &b, &err);
  memset(token, 0, sizeof token);
  curl_global_cleanup();
  if (rc < 0) {
    free(b.p);
    return cli_fail(cmd, "%s", err.msg);
  }
  if (status != 200) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%.*s", (int)(b.len < 900 ? b.len : 900), b.p ? b.p : "");
    msg[strcspn(msg, "\n")] = 0;
    free(b.p);
    return cli_fail(cmd, "the controller refused (HTTP %ld): %s", status, msg[0] ? msg : "no reason given");
  }
  if (start) {
    free(b.p);
    printf("recording a trace on %s; `loom trace stop --out DIR` writes it\n", addr);
    return 0;
  }
  if (mkdir(outdir, 0777) < 0 && errno != EEXIST) {
    free(b.p);
    return cli_fail(cmd, "cannot make %s: %s", outdir, strerror(errno));
  }
  char name[64], path[4200], tmp[4300];
  time_t now = time(NULL);
  struct tm tm;
  gmtime_r(&now, &tm);
  strftime(name, sizeof name, "loom-trace-%Y%m%d-%H%M%S.json", &tm);
  snprintf(path, sizeof path, "%s/%s", outdir, name);
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
  FILE *f = fopen(tmp, "w");
  bool ok = f && fwrite(b.p, 1, b.len, f) == b.len;
  if (f && fclose(f) != 0) ok = false;
  if (!ok || rename(tmp, path) != 0) {
    int e = errno;
    unlink(tmp);
    free(b.p);
    return cli_fail(cmd, "cannot write %s: %s", path, strerror(e));
  }
  const char *n = strstr(b.p, "\"launches\":"); /* the metadata's count */
  unsigned long long launches = n ? strtoull(n + 11, NULL, 10) : 0;
  printf("wrote %s (%llu launches, %zu bytes); open it in https://ui.perfetto.dev\n", path, launches, b.len);
  free(b.p);
  return 0;
}
