/* Option parsing, connecting, formatting, output and error helpers for the `loom` subcommands. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include "cli/util.h"
#include "client/cconn.h"
#include "client/locate.h"
#include "common/dtype.h"
#include "loom/loom.h"

int cli_fail(const char *cmd, const char *fmt, ...) {
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fprintf(stderr, "loom %s: %s\n", cmd, msg);
  return 1;
}

int cli_usage_error(const char *cmd, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fprintf(stderr, "loom %s: %s (see `loom %s --help`)\n", cmd, msg, cmd);
  return 2;
}

int cli_bad_option(const char *cmd, char **argv) {
  const char *arg = optind > 0 ? argv[optind - 1] : "?";
  if (optopt && arg[0] == '-' && arg[1] != '-')
    return cli_usage_error(cmd, "unknown option or missing value for '-%c'", optopt);
  return cli_usage_error(cmd, "unknown option or missing value: '%s'", arg);
}

int cli_next_option(cli_options *o) {
  if (!o->started) {
    opterr = 0;
    optind = 1;
    o->started = true;
  }
  int ch = getopt_long(o->argc, o->argv, "h", o->opts, NULL);
  if (ch == 'h') {
    fputs(o->usage, stdout);
    o->exit = 0;
    return -1;
  }
  if (ch == '?' || ch == ':') {
    o->exit = cli_bad_option(o->cmd, o->argv);
    return -1;
  }
  if (ch != -1) return ch;
  if (o->argc - optind > o->max_operands) {
    o->exit = cli_usage_error(o->cmd, "unexpected argument '%s'", o->argv[optind + o->max_operands]);
    return -1;
  }
  return 0;
}

int cli_query_options(const char *cmd, const char *usage, int argc, char **argv, cli_query *q) {
  enum { O_CTL = 1, O_JSON, O_TIMEOUT };
  static const struct option opts[] = {
      {"controller", required_argument, 0, O_CTL},
      {"json", no_argument, 0, O_JSON},
      {"timeout", required_argument, 0, O_TIMEOUT},
      {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0},
  };
  *q = (cli_query){.timeout_s = 30};
  cli_options o = {.cmd = cmd, .usage = usage, .argc = argc, .argv = argv, .opts = opts};
  int ch;
  while ((ch = cli_next_option(&o)) > 0) {
    switch (ch) {
    case O_CTL: q->controller = optarg; break;
    case O_JSON: q->json = true; break;
    case O_TIMEOUT:
      if (cli_parse_u64(cmd, "--timeout", optarg, 1, 86400, &q->timeout_s) < 0) {
        q->exit = 2;
        return -1;
      }
      break;
    }
  }
  q->exit = o.exit;
  return ch < 0 ? -1 : 0;
}

int cli_parse_u64(const char *cmd, const char *opt, const char *s, uint64_t min, uint64_t max, uint64_t *out) {
  if (!s || !*s || strspn(s, "0123456789") != strlen(s) || strlen(s) > 19) {
    cli_usage_error(cmd, "%s wants a whole number, not '%s'", opt, s ? s : "");
    return -1;
  }
  uint64_t v = strtoull(s, NULL, 10);
  if (v < min || v > max) {
    cli_usage_error(cmd, "%s must be between %llu and %llu (got %s)", opt, (unsigned long long)min,
                    (unsigned long long)max, s);
    return -1;
  }
  *out = v;
  return 0;
}

int cli_absolute_path(const char *cmd, const char *opt, const char *path, char *out, size_t cap) {
  char cwd[4096];
  int n;
  if (!path || !*path) return cli_usage_error(cmd, "%s wants a path", opt), -1;
  if (path[0] == '/') n = snprintf(out, cap, "%s", path);
  else if (getcwd(cwd, sizeof cwd)) n = snprintf(out, cap, "%s/%s", cwd, path);
  else return cli_usage_error(cmd, "%s %s: cannot find the current directory: %s", opt, path, strerror(errno)), -1;
  if (n < 0 || (size_t)n >= cap) return cli_usage_error(cmd, "%s: the path is too long", opt), -1;
  return 0;
}

int cli_parse_size(const char *cmd, const char *opt, const char *s, uint64_t *out) {
  static const struct { const char *suf; uint64_t mul; } sufs[] = {
      {"", 1}, {"b", 1},
      {"k", 1ull << 10}, {"kib", 1ull << 10}, {"kb", 1000ull},
      {"m", 1ull << 20}, {"mib", 1ull << 20}, {"mb", 1000000ull},
      {"g", 1ull << 30}, {"gib", 1ull << 30}, {"gb", 1000000000ull},
      {"t", 1ull << 40}, {"tib", 1ull << 40}, {"tb", 1000000000000ull},
  };
  size_t digits = s ? strspn(s, "0123456789") : 0;
  if (digits == 0 || digits > 19) {
    cli_usage_error(cmd, "%s wants a byte count like 2147483648, 512M or 2GiB, not '%s'", opt, s ? s : "");
    return -1;
  }
  uint64_t v = strtoull(s, NULL, 10);
  const char *suf = s + digits;
  for (size_t i = 0; i < sizeof sufs / sizeof sufs[0]; i++) {
    if (strcasecmp(suf, sufs[i].suf) != 0) continue;
    if (v == 0 || __builtin_mul_overflow(v, sufs[i].mul, out) || *out > (1ull << 50)) {
      cli_usage_error(cmd, "%s must be between 1 byte and 1 PiB (got %s)", opt, s);
      return -1;
    }
    return 0;
  }
  cli_usage_error(cmd, "%s: unknown size suffix '%s' (use K, M, G, T or KiB, MiB, GiB, TiB)", opt, suf);
  return -1;
}

cli_pool g_cli_pool;

int cli_pool_option(const char *cmd, const char *opt, const char *val) {
  uint64_t v;
  if (!strcmp(opt, "--pool-devices")) {
    if (cli_parse_u64(cmd, opt, val, 1, 65536, &v) < 0) return -1;
    g_cli_pool.devices = (uint32_t)v;
  } else if (!strcmp(opt, "--priority")) {
    g_cli_pool.priority = val;
  } else if (!strcmp(opt, "--share-weight")) {
    if (cli_parse_u64(cmd, opt, val, 1, 1000000, &v) < 0) return -1;
    g_cli_pool.share_weight = (uint32_t)v;
  } else {
    if (cli_parse_u64(cmd, opt, val, 1, 86400000, &v) < 0) return -1;
    g_cli_pool.launch_limit_ms = (uint32_t)v;
  }
  return 0;
}

/* The waiting client's progress line (stderr, rewritten in place on a terminal). */
static void queue_line(void *arg, const loom_queue_status *s) {
  const char *cmd = arg;
  bool tty = isatty(2);
  fprintf(stderr, "%sloom %s: waiting for %u devices (%s): %u of %u in the queue, %u free, %llu s: %s%s",
          tty ? "\r\033[K" : "", cmd, s->devices, s->priority, s->position, s->queued, s->free_devices,
          (unsigned long long)(s->waited_ms / 1000), s->blocked_by, tty ? "" : "\n");
  fflush(stderr);
}

loom_client *cli_connect(const char *cmd, const char *addr, uint64_t timeout_s) {
  char name[64];
  snprintf(name, sizeof name, "loom %s", cmd);
  loom_connect_options o;
  loom_connect_options_initialize(&o);
  o.address = addr;
  o.timeout_ms = (int64_t)timeout_s * 1000;
  o.client_name = name;
  const char *e;
  o.pool_devices = g_cli_pool.devices;
  if (!o.pool_devices && (e = getenv("LOOM_POOL_DEVICES")) && *e) o.pool_devices = (uint32_t)strtoul(e, NULL, 10);
  o.priority = g_cli_pool.priority ? g_cli_pool.priority : getenv("LOOM_PRIORITY");
  o.launch_limit_ms = g_cli_pool.launch_limit_ms;
  if (!o.launch_limit_ms && (e = getenv("LOOM_LAUNCH_LIMIT_MS")) && *e) o.launch_limit_ms = (uint32_t)strtoul(e, NULL, 10);
  o.share_weight = g_cli_pool.share_weight;
  if (!o.share_weight && (e = getenv("LOOM_SHARE_WEIGHT")) && *e) o.share_weight = (uint32_t)strtoul(e, NULL, 10);
  o.queue_progress = queue_line;
  o.queue_progress_arg = (void *)cmd;
  loom_client *c;
  if (loom_connect(&o, &c) != LOOM_OK) {
    if (o.pool_devices && isatty(2)) fprintf(stderr, "\n");
    cli_fail(cmd, "%s", loom_errmsg(NULL));
    return NULL;
  }
  if (o.pool_devices && loom_client_queued_ms(c) >= 1000)
    fprintf(stderr, "%sloom %s: admitted on %u devices (%s) after %.1f s in the queue\n", isatty(2) ? "\r\033[K" : "",
            cmd, loom_client_pool_devices(c), loom_client_priority(c), (double)loom_client_queued_ms(c) / 1000.0);
  return c;
}

int cli_parse_devices(const char *s, int32_t *out, int cap) {
  int n = 0;
  const char *p = s;
  while (*p) {
    char *end;
    errno = 0;
    long a = strtol(p, &end, 10);
    if (end == p || errno || a < 0 || a > 65535) return -1;
    long b = a;
    p = end;
    if (*p == '-') {
      b = strtol(p + 1, &end, 10);
      if (end == p + 1 || errno || b < a || b > 65535) return -1;
      p = end;
    }
    for (long v = a; v <= b; v++) {
      if (n >= cap) return -1;
      out[n++] = (int32_t)v;
    }
    if (*p == ',') p++;
    else if (*p) return -1;
  }
  return n;
}

void cli_format_size(uint64_t b, char *buf, size_t cap) {
  static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  double v = (double)b;
  while (v >= 1024 && u < 5) v /= 1024, u++;
  if (u == 0) snprintf(buf, cap, "%llu B", (unsigned long long)b);
  else if (v == (double)(uint64_t)v) snprintf(buf, cap, "%.0f %s", v, units[u]);
  else snprintf(buf, cap, "%.1f %s", v, units[u]);
}

void cli_format_duration(uint64_t ms, char *buf, size_t cap) {
  if (ms < 60000) snprintf(buf, cap, "%.1f s", ms / 1000.0);
  else if (ms < 3600000) snprintf(buf, cap, "%llu min %llu s", (unsigned long long)(ms / 60000),
                                  (unsigned long long)(ms / 1000 % 60));
  else snprintf(buf, cap, "%llu h %llu min", (unsigned long long)(ms / 3600000),
                (unsigned long long)(ms / 60000 % 60));
}

void cli_format_ids(const uint32_t *ids, size_t n, char *buf, size_t cap) {
  size_t off = 0;
  buf[0] = 0;
  for (size_t i = 0; i < n && off < cap;) {
    size_t j = i;
    while (j + 1 < n && ids[j + 1] == ids[j] + 1) j++;
    int k = j > i ? snprintf(buf + off, cap - off, "%s%u-%u", off ? "," : "", ids[i], ids[j])
                  : snprintf(buf + off, cap - off, "%s%u", off ? "," : "", ids[i]);
    if (k < 0) break;
    off += (size_t)k;
    i = j + 1;
  }
  if (n == 0) snprintf(buf, cap, "-");
}

void cli_format_type(loom_dtype dtype, int rank, const int64_t *dims, char *buf, size_t cap) {
  size_t n = (size_t)snprintf(buf, cap, "%s[", lm_dtype_name(dtype));
  for (int d = 0; d < rank && n < cap; d++) n += (size_t)snprintf(buf + n, cap - n, "%s%lld", d ? "," : "", (long long)dims[d]);
  if (n < cap) snprintf(buf + n, cap - n, "]");
}

void cli_table_init(cli_table *t, size_t ncols) {
  memset(t, 0, sizeof *t);
  t->ncols = ncols;
}

void cli_table_row(cli_table *t, ...) {
  if (t->nrows == t->cap) {
    size_t cap = t->cap ? t->cap * 2 : 16;
    char **c = realloc(t->cells, cap * t->ncols * sizeof *c);
    if (!c) return;
    t->cells = c;
    t->cap = cap;
  }
  va_list ap;
  va_start(ap, t);
  for (size_t i = 0; i < t->ncols; i++) {
    const char *s = va_arg(ap, const char *);
    t->cells[t->nrows * t->ncols + i] = strdup(s ? s : "");
  }
  va_end(ap);
  t->nrows++;
}

void cli_table_print(const cli_table *t) {
  size_t w[32] = {0};
  for (size_t r = 0; r < t->nrows; r++)
    for (size_t c = 0; c < t->ncols && c < 32; c++) {
      const char *s = t->cells[r * t->ncols + c];
      size_t n = s ? strlen(s) : 0;
      if (n > w[c]) w[c] = n;
    }
  for (size_t r = 0; r < t->nrows; r++) {
    for (size_t c = 0; c < t->ncols && c < 32; c++) {
      const char *s = t->cells[r * t->ncols + c];
      if (c + 1 == t->ncols) printf("%s", s ? s : "");
      else printf("%-*s  ", (int)w[c], s ? s : "");
    }
    printf("\n");
  }
}

void cli_table_free(cli_table *t) {
  for (size_t i = 0; i < t->nrows * t->ncols; i++) free(t->cells[i]);
  free(t->cells);
  memset(t, 0, sizeof *t);
}

void cli_print_json(cJSON *root) {
  char *s = cJSON_Print(root);
  if (s) printf("%s\n", s);
  free(s);
  cJSON_Delete(root);
}

void cli_json_string(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
    else if (ch < 0x20) fprintf(f, "\\u%04x", ch);
    else fputc(ch, f);
  }
  fputc('"', f);
}

char *cli_read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap);
  int err = buf ? 0 : ENOMEM;
  while (!err) {
    size_t k = fread(buf + n, 1, cap - n, f);
    n += k;
    if (n < cap) {
      if (ferror(f)) err = errno ? errno : EIO;
      break;
    }
    char *b2 = realloc(buf, cap * 2);
    if (!b2) err = ENOMEM;
    else buf = b2, cap *= 2;
  }
  fclose(f);
  if (err) {
    free(buf);
    errno = err;
    return NULL;
  }
  *len = n;
  return buf;
}

double cli_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int cli_one_file_args(const char *cmd, int argc, char **argv, const cli_flag *flags, int nflags,
                      void (*usage)(FILE *), const char **in, const char **out) {
  *in = *out = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      return 0;
    }
    int k = 0;
    while (k < nflags && !(a[0] == '-' && a[1] == '-' && !strcmp(a + 2, flags[k].name))) k++;
    if (k < nflags) *flags[k].set = true;
    else if (!strcmp(a, "-o") && i + 1 < argc) *out = argv[++i];
    else if (a[0] == '-' && a[1]) {
      fprintf(stderr, "loom %s: unknown or incomplete option '%s'\n\n", cmd, a);
      usage(stderr);
      return 2;
    } else if (!*in) *in = a;
    else {
      fprintf(stderr, "loom %s: one file at a time\n", cmd);
      return 2;
    }
  }
  if (!*in) {
    usage(stderr);
    return 2;
  }
  return -1;
}

char *cli_read_input(const char *cmd, const char *path, size_t *len) {
  char *buf = cli_read_file(path, len);
  if (!buf) fprintf(stderr, "loom %s: cannot read %s: %s\n", cmd, path, strerror(errno));
  return buf;
}

int cli_open_session(const char *addr, int64_t timeout_ms, const char *name, lm_cconn **out, lm_err *err) {
  char token[256];
  int tn = lm_locate_token(addr, token, sizeof token, err);
  if (tn < 0) return tn;
  lm_cconn_options co = {.timeout_ms = timeout_ms, .name = name};
  co.auth_token = tn ? token : NULL;
  co.auth_token_len = (size_t)tn;
  return lm_cconn_open(addr, &co, out, err);
}
