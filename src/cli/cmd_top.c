/* `loom top`: the dashboard's view in the terminal, refreshing: the cluster's totals and launch
 * rate, each worker with its slice, health and device memory, the sessions, the most recent
 * launches. Reads the controller's GET /api/status over its HTTP port (libcurl), as the
 * dashboard page does. */
#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "cli/cli.h"
#include "cli/util.h"
#include "client/locate.h"
#include "net/auth.h"
#include "net/sock.h"

static const char g_usage[] =
    "usage: loom top [--http HOST:PORT] [--interval SECONDS] [--once | --iterations N]\n"
    "\n"
    "The cluster at a glance, refreshed every --interval seconds (default 1) until Ctrl-C: totals,\n"
    "launches per second, workers by slice with health and device memory, sessions, recent\n"
    "launches with their latency. The same data as the dashboard (http://HOST:PORT/).\n"
    "\n"
    "options:\n"
    "  --http HOST:PORT       the controller's HTTP port (default: $LOOM_HTTP, else the local cluster's)\n"
    "  --interval SECONDS     between refreshes (default 1; fractions allowed, at least 0.1)\n"
    "  --once                 print one view and exit (no screen clearing)\n"
    "  --iterations N         print N views and exit\n"
    "  -h, --help             show this help\n";

typedef struct buf {
  char *p;
  size_t len;
} buf;

static size_t on_data(char *ptr, size_t size, size_t n, void *arg) {
  buf *b = arg;
  size_t add = size * n;
  if (b->len + add > ((size_t)256 << 20)) return 0; /* a status beyond 256 MiB: refuse */
  char *p = realloc(b->p, b->len + add + 1);
  if (!p) return 0;
  memcpy(p + b->len, ptr, add);
  b->p = p;
  b->len += add;
  p[b->len] = 0;
  return add;
}

static cJSON *fetch(const char *addr, const char *token, char *why, size_t cap) {
  CURL *c = curl_easy_init();
  if (!c) return snprintf(why, cap, "cannot start libcurl"), NULL;
  char url[LM_ADDR_MAX + 32], auth[600] = "";
  snprintf(url, sizeof url, "http://%s/api/status", addr);
  struct curl_slist *h = NULL;
  if (token && *token) {
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", token);
    h = curl_slist_append(h, auth);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
  }
  buf b = {0};
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
  curl_easy_setopt(c, CURLOPT_TIMEOUT, 10L);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
  CURLcode rc = curl_easy_perform(c);
  long status = 0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
  curl_easy_cleanup(c);
  curl_slist_free_all(h);
  lm_auth_wipe(auth, sizeof auth);
  cJSON *j = NULL;
  if (rc != CURLE_OK) snprintf(why, cap, "cannot reach the controller's HTTP port %s: %s", addr, curl_easy_strerror(rc));
  else if (status != 200) snprintf(why, cap, "the controller's HTTP port %s answered HTTP %ld", addr, status);
  else if (!(j = cJSON_Parse(b.p ? b.p : ""))) snprintf(why, cap, "the controller's /api/status is not JSON");
  free(b.p);
  return j;
}

static double num(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsNumber(v) ? v->valuedouble : 0;
}
static const char *str(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsString(v) ? v->valuestring : "";
}

static double finished(const cJSON *s) {
  const cJSON *l = cJSON_GetObjectItemCaseSensitive(s, "launches");
  return num(l, "succeeded") + num(l, "failed") + num(l, "cancelled");
}

static void show(const cJSON *s, double rate, bool have_rate, const char *addr) {
  const cJSON *ws = cJSON_GetObjectItemCaseSensitive(s, "workers"), *w, *d;
  const cJSON *l = cJSON_GetObjectItemCaseSensitive(s, "launches");
  uint32_t ndev = 0, ok = 0, alive = 0, nw = 0;
  double used = 0, cap = 0;
  cJSON_ArrayForEach(w, ws) {
    nw++;
    alive += cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(w, "alive"));
    cJSON_ArrayForEach(d, cJSON_GetObjectItemCaseSensitive(w, "devices")) {
      ndev++;
      ok += cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(d, "healthy"));
      used += num(d, "memory_used");
      cap += num(d, "memory_capacity");
    }
  }
  char u[32], c[32], up[32];
  cli_format_size((uint64_t)used, u, sizeof u);
  cli_format_size((uint64_t)cap, c, sizeof c);
  cli_format_duration((uint64_t)(num(s, "uptime_s") * 1000), up, sizeof up);
  printf("loom %s at %s, up %s\n", str(s, "version"), addr, up);
  printf("devices  %u (%u healthy) on %u workers (%u alive); memory %s of %s in use\n", ndev, ok, nw, alive, u, c);
  printf("launches %.0f running, %.0f succeeded, %.0f failed, %.0f cancelled, %.0f refused",
         num(l, "running"), num(l, "succeeded"), num(l, "failed"), num(l, "cancelled"), num(l, "refused"));
  if (have_rate) printf("; %.1f/s", rate);
  printf("\nsessions %d, programs %.0f\n\n", cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(s, "sessions")),
         num(s, "programs"));
  cli_table t;
  cli_table_init(&t, 7);
  cli_table_row(&t, "WORKER", "SLICE", "HOST", "PID", "STATE", "DEVICES", "MEMORY");
  cJSON_ArrayForEach(w, ws) {
    char id[16], pid[16], devs[48], mem[80], a[32], b[32];
    uint32_t n = 0, h = 0;
    double wu = 0, wc = 0;
    cJSON_ArrayForEach(d, cJSON_GetObjectItemCaseSensitive(w, "devices")) {
      n++;
      h += cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(d, "healthy"));
      wu += num(d, "memory_used");
      wc += num(d, "memory_capacity");
    }
    snprintf(id, sizeof id, "%.0f", num(w, "id"));
    snprintf(pid, sizeof pid, "%.0f", num(w, "pid"));
    snprintf(devs, sizeof devs, "%u (%u healthy)", n, h);
    cli_format_size((uint64_t)wu, a, sizeof a);
    cli_format_size((uint64_t)wc, b, sizeof b);
    snprintf(mem, sizeof mem, "%s / %s", a, b);
    bool live = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(w, "alive"));
    cli_table_row(&t, id, str(w, "slice"), str(w, "host"), pid, live ? "alive" : "lost", devs, mem);
  }
  cli_table_print(&t);
  cli_table_free(&t);
  const cJSON *rs = cJSON_GetObjectItemCaseSensitive(s, "recent"), *r;
  if (cJSON_GetArraySize(rs)) {
    printf("\n");
    cli_table_init(&t, 6);
    cli_table_row(&t, "LAUNCH", "PROGRAM", "SESSION", "DEVICES", "LATENCY", "STATE");
    int k = 0;
    cJSON_ArrayForEach(r, rs) {
      if (k++ == 10) break;
      char seq[24], ses[24], nd[16], lat[32];
      snprintf(seq, sizeof seq, "%.0f", num(r, "seq"));
      snprintf(ses, sizeof ses, "%.0f", num(r, "session"));
      snprintf(nd, sizeof nd, "%.0f", num(r, "devices"));
      snprintf(lat, sizeof lat, "%.3f ms", num(r, "latency_ms"));
      const char *prog = str(r, "program"), *slash = strrchr(prog, '/');
      cli_table_row(&t, seq, slash ? slash + 1 : prog, ses, nd, lat, str(r, "state"));
    }
    cli_table_print(&t);
    cli_table_free(&t);
  }
}

static volatile sig_atomic_t g_stop;
static void on_sig(int s) { (void)s, g_stop = 1; }

int cmd_top(int argc, char **argv) {
  const char *cmd = "top";
  enum { O_HTTP = 1, O_INTERVAL, O_ONCE, O_ITER };
  static const struct option opts[] = {
      {"http", required_argument, 0, O_HTTP},       {"interval", required_argument, 0, O_INTERVAL},
      {"once", no_argument, 0, O_ONCE},             {"iterations", required_argument, 0, O_ITER},
      {"help", no_argument, 0, 'h'},                {0, 0, 0, 0},
  };
  cli_options o = {.cmd = cmd, .usage = g_usage, .argc = argc, .argv = argv, .opts = opts};
  const char *http = NULL;
  double interval = 1;
  uint64_t iterations = 0;
  int ch;
  while ((ch = cli_next_option(&o)) > 0) {
    switch (ch) {
    case O_HTTP: http = optarg; break;
    case O_INTERVAL: {
      char *end;
      interval = strtod(optarg, &end);
      if (*end || !(interval >= 0.1 && interval <= 3600))
        return cli_usage_error(cmd, "--interval is seconds from 0.1 to 3600, not '%s'", optarg);
      break;
    }
    case O_ONCE: iterations = 1; break;
    case O_ITER:
      if (cli_parse_u64(cmd, "--iterations", optarg, 1, 1000000, &iterations) < 0) return 2;
      break;
    }
  }
  if (ch < 0) return o.exit;
  char addr[LM_ADDR_MAX], dir[4096];
  lm_err err;
  const char *env = getenv("LOOM_HTTP");
  if (http || (env && *env)) {
    snprintf(addr, sizeof addr, "%s", http ? http : env);
  } else {
    if (lm_state_dir(dir, sizeof dir, &err) < 0) return cli_fail(cmd, "%s", err.msg);
    if (lm_state_get(dir, "http", addr, sizeof addr, NULL) < 0 || !addr[0])
      return cli_fail(cmd, "no controller HTTP port given (--http HOST:PORT or $LOOM_HTTP) and no local cluster "
                      "with one in %s (loom up serves one)", dir);
  }
  /* the token, for a controller with authentication: $LOOM_TOKEN, $LOOM_TOKEN_FILE's, the local cluster's */
  char token[512], ctl_addr[LM_ADDR_MAX] = "";
  const char *ce = getenv("LOOM_CONTROLLER");
  if (ce && *ce) snprintf(ctl_addr, sizeof ctl_addr, "%s", ce);
  else if (lm_state_dir(dir, sizeof dir, &err) == 0) lm_state_get(dir, "address", ctl_addr, sizeof ctl_addr, NULL);
  int tn = lm_locate_token(ctl_addr[0] ? ctl_addr : addr, token, sizeof token, &err);
  if (tn < 0) return cli_fail(cmd, "%s", err.msg);
  if (curl_global_init(CURL_GLOBAL_DEFAULT) != 0) return cli_fail(cmd, "cannot start libcurl");
  signal(SIGINT, on_sig);
  signal(SIGTERM, on_sig);
  bool clear = iterations != 1 && isatty(STDOUT_FILENO);
  double last_done = 0;
  struct timespec last_t = {0};
  bool have_last = false;
  int rc = 0;
  for (uint64_t i = 0; !g_stop && (!iterations || i < iterations); i++) {
    if (i) {
      struct timespec ts = {(time_t)interval, (long)((interval - (double)(time_t)interval) * 1e9)};
      while (nanosleep(&ts, &ts) != 0 && !g_stop) {}
      if (g_stop) break;
    }
    char why[512];
    cJSON *s = fetch(addr, tn > 0 ? token : NULL, why, sizeof why);
    if (!s) {
      rc = cli_fail(cmd, "%s", why);
      break;
    }
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    double done = finished(s);
    double dt = (double)(now.tv_sec - last_t.tv_sec) + (double)(now.tv_nsec - last_t.tv_nsec) / 1e9;
    if (clear) printf("\033[H\033[2J");
    else if (i) printf("\n");
    show(s, have_last && dt > 0 ? (done - last_done) / dt : 0, have_last, addr);
    fflush(stdout);
    last_done = done, last_t = now, have_last = true;
    cJSON_Delete(s);
  }
  curl_global_cleanup();
  lm_auth_wipe(token, sizeof token);
  return rc;
}
