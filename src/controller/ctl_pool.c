/* The shared pool (ctl_pool.h, docs/pool.md): configuration, admission and the queue, per-user
 * quotas, accounting, the launch watchdog, POOL_STATUS. All on the controller's loop thread.
 *
 * Admission order: classes in their configured order (highest first), FIFO within a class. The
 * first waiting session that does not fit stops admission for everyone behind it (no overtaking,
 * so a large request is not starved by small ones); a session held back only by its own user's
 * device quota does not block the others. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include "common/dtype.h"
#include "common/log.h"
#include "controller/ctl.h"

#define POOL_MAX_CLASSES 16
#define POOL_CLASS_NAME_MAX 31
#define POOL_MAX_QUOTAS 1024
#define POOL_KEEP_CLOSED 4096        /* closed sessions kept for `loom usage` */
#define POOL_UPDATE_MS 2000          /* a queued client hears from us at least this often */
#define POOL_CONFIG_MAX (1u << 20)

typedef struct pool_usage {
  double dev_s;                      /* devices x seconds of its launches */
  double held_dev_s;                 /* devices x seconds held (pool sessions) */
  uint64_t launches, failed, timed_out, bytes_in, bytes_out;
} pool_usage;

typedef struct pool_class {
  char name[POOL_CLASS_NAME_MAX + 1];
  uint32_t launch_limit_ms;          /* 0: none */
} pool_class;

typedef struct pool_quota {
  char user[LM_TOKEN_USER_MAX + 1];
  bool has_devices, has_memory, has_sessions, has_launches, has_session_memory;
  uint32_t devices, sessions, launches;
  uint64_t memory, session_memory;
} pool_quota;

enum { PS_QUEUED = 0, PS_RUNNING, PS_SHARED, PS_CLOSED,
       PS_SUSPENDING, /* preempted: its requests are held, its launches in flight finish */
       PS_SUSPENDED,   /* its devices lent to a higher class; its shards in host memory (STASH) */
       PS_RESUMING,    /* resumed on other devices: its requests still held while its programs load there */
       PS_DETACHED };  /* restored after a controller restart: its devices kept until its client resumes it */
static const char *const g_state_names[] = {"queued", "running", "shared", "closed", "suspending", "suspended",
                                            "resuming", "detached"};
/* The session holds devices as its own (its numbering applies), running or not. */
#define HAS_DEVS(s) ((s)->state == PS_RUNNING || (s)->state == PS_SUSPENDING || (s)->state == PS_SUSPENDED || \
                     (s)->state == PS_RESUMING)
/* Its devices are in use (not free for others). */
#define HOLDS(s) ((s)->state == PS_RUNNING || (s)->state == PS_SUSPENDING || (s)->state == PS_RESUMING || \
                  ((s)->state == PS_DETACHED && !(s)->det_suspended))

/* A request of a suspended session, kept until it resumes. */
typedef struct held_frame {
  lm_frame_header h;
  uint8_t *meta, *payload;
  struct held_frame *next;
} held_frame;
#define POOL_HELD_MAX_BYTES (256ull << 20)

struct pool_sess {
  peer *p;                           /* NULL once closed */
  uint64_t id;
  char user[LM_TOKEN_USER_MAX + 1];
  char name[64];
  uint32_t cls;                      /* index into the classes */
  int state;                         /* PS_* */
  uint32_t asked;                    /* devices asked for (0: shared) */
  uint32_t *devs, ndev;              /* cluster devices held (running; kept after close for the record) */
  uint64_t hello_rid;                /* queued: the HELLO to answer */
  uint64_t opened_loop_ms, admitted_loop_ms;
  uint64_t opened_unix_ms, admitted_unix_ms, closed_unix_ms;
  uint64_t last_update_ms;           /* last QUEUE_UPDATE sent */
  uint32_t position, last_position;  /* queued: place (1 first) */
  char blocked_by[160];              /* queued: why */
  uint64_t memory;                   /* bytes of its live arrays */
  uint32_t active;                   /* launches not yet freed */
  uint32_t launch_limit_ms;
  uint32_t refs;                     /* its peer, arrays and launches */
  held_frame *held, **held_tail;     /* suspended: its requests, in order */
  uint64_t held_bytes;
  uint32_t suspensions;              /* times it was preempted */
  uint32_t weight;                   /* time sharing: its share of its group's devices (0: exclusive) */
  double pass;                       /* time sharing: virtual time (stride scheduling) */
  bool replaying;                    /* its held frames are being served: do not hold them again */
  uint64_t suspended_ms;             /* total time suspended */
  uint64_t suspended_at;             /* loop ms when it was preempted */
  /* STASH (wk_stash.c): suspending, its shards go to host memory before its devices are lent */
  bool stash_sent;                   /* this suspension's STASH went out */
  uint32_t stash_wait;               /* workers yet to answer it */
  uint64_t stash_rid, stash_nrid;    /* the request ids of the last STASH sent: [rid, rid + n) */
  uint64_t stash_sent_ms;
  bool pinned;                       /* this suspension's STASH left shards in place (memory Loom does not
                                        own): it resumes on its own devices only */
  /* resuming on other devices (resume_elsewhere): the programs of its executables there */
  struct pool_mv { c_program *old, *nw; bool settled; } *mv;
  uint32_t nmv, mv_wait;             /* programs, and those not loaded (or failed) yet */
  bool mv_shards;                    /* SHARD_MOVE replies outstanding (stash_wait counts them) */
  uint64_t mv_start_ms;
  uint32_t moves;                    /* times it resumed on other devices */
  bool det_suspended;                /* PS_DETACHED: it was suspended at the restart (holds no devices) */
  bool jdirty;                       /* its devices or state changed since the journal last had them */
  uint8_t resume_secret[32];         /* queued: its HELLO_REPLY's (a journal: resumable after a restart) */
  bool has_secret;
  pool_usage u;
  pool_usage written;                /* as last written to the journal (ctl_pool_journal) */
  bool written_closed;
  bool restored;                     /* from the journal: open at the restart, not resumed (yet) */
  pool_sess *next;                   /* arrival order */
};

typedef struct ctl_pool {
  char path[512];                    /* "" : no file */
  pool_class classes[POOL_MAX_CLASSES];
  uint32_t nclasses, default_class;
  uint32_t preempt_grace_ms;         /* a waiting session preempts only after waiting this long */
  uint32_t min_run_ms;               /* a session runs this long (since admitted or resumed) before it may be preempted */
  pool_quota dflt;                   /* [quota.default] */
  pool_quota *quotas;                /* [quota.USER] */
  uint32_t nquotas;
  pool_sess *head, *tail;
  uint32_t nclosed;
  uint32_t stash_replies;            /* STASH and SHARD_MOVE answers not yet in: the sessions' stash_wait summed
                                        (worker replies skip the sessions when 0) */
  uint64_t next_tag;                 /* data-plane tags of SHARD_MOVE transfers (with POOL_TAG_BIT) */
  struct ctl *ctl;
} ctl_pool;

static uint64_t unix_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void fmt_bytes(uint64_t b, char *buf, size_t cap) {
  static const char *const u[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = (double)b;
  int i = 0;
  while (v >= 1024 && i < 5) v /= 1024, i++;
  if (i == 0) snprintf(buf, cap, "%llu B", (unsigned long long)b);
  else snprintf(buf, cap, "%.1f %s", v, u[i]);
}

/* ---- configuration: a small TOML subset ----
 *   [pool]         classes = ["prod", "interactive", "batch"]   (highest first)
 *                  default_class = "interactive"
 *   [class.NAME]   launch_limit = "10s"                          (or milliseconds; 0: none)
 *   [quota.default] / [quota.USER]
 *                  devices = 8, device_memory = "4GiB", sessions = 16, queued_launches = 1000
 * Comments start with '#'; values are integers, "strings" or ["arrays", "of strings"]. */

enum { TV_INT, TV_STR, TV_ARR };
#define TV_ARR_MAX POOL_MAX_CLASSES

typedef struct tval {
  int kind;
  uint64_t i;
  char s[256];
  char arr[TV_ARR_MAX][POOL_CLASS_NAME_MAX + 1];
  uint32_t narr;
} tval;

static char *trim(char *s) {
  while (*s == ' ' || *s == '\t') s++;
  size_t n = strlen(s);
  while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r')) s[--n] = 0;
  return s;
}

/* A quoted string at *pp (past the opening quote) into out; *pp ends past the closing quote. */
static int parse_str(const char **pp, char *out, size_t cap) {
  const char *p = *pp;
  size_t n = 0;
  while (*p && *p != '"') {
    char ch = *p++;
    if (ch == '\\') {
      if (*p != '"' && *p != '\\') return -1;
      ch = *p++;
    }
    if ((unsigned char)ch < 0x20 || n + 1 >= cap) return -1;
    out[n++] = ch;
  }
  if (*p != '"') return -1;
  out[n] = 0;
  *pp = p + 1;
  return 0;
}

static int parse_value(const char *s, tval *v, char *why, size_t wcap) {
  memset(v, 0, sizeof *v);
  if (*s == '"') {
    v->kind = TV_STR;
    s++;
    if (parse_str(&s, v->s, sizeof v->s) < 0 || *trim((char *)s)) {
      snprintf(why, wcap, "a string needs a closing quote, printable characters, at most 255 of them");
      return -1;
    }
    return 0;
  }
  if (*s == '[') {
    v->kind = TV_ARR;
    s++;
    for (;;) {
      while (*s == ' ' || *s == '\t') s++;
      if (*s == ']') break;
      if (*s != '"' || v->narr >= TV_ARR_MAX) {
        snprintf(why, wcap, "an array holds 1 to %d quoted names", TV_ARR_MAX);
        return -1;
      }
      s++;
      if (parse_str(&s, v->arr[v->narr], sizeof v->arr[0]) < 0) {
        snprintf(why, wcap, "a name in the array is not closed or longer than %d characters", POOL_CLASS_NAME_MAX);
        return -1;
      }
      v->narr++;
      while (*s == ' ' || *s == '\t') s++;
      if (*s == ',') s++;
      else if (*s != ']') {
        snprintf(why, wcap, "expected ',' or ']' in the array");
        return -1;
      }
    }
    if (*trim((char *)s + 1)) {
      snprintf(why, wcap, "unexpected text after the array");
      return -1;
    }
    return 0;
  }
  v->kind = TV_INT;
  if (!isdigit((unsigned char)*s)) {
    snprintf(why, wcap, "expected a number, a \"string\" or an [array] (got '%.40s')", s);
    return -1;
  }
  uint64_t x = 0;
  for (; *s; s++) {
    if (*s == '_') continue;
    if (!isdigit((unsigned char)*s) || x > (UINT64_MAX - 9) / 10) {
      snprintf(why, wcap, "not a whole number below 2^64");
      return -1;
    }
    x = x * 10 + (uint64_t)(*s - '0');
  }
  v->i = x;
  return 0;
}

/* "4GiB", "512M", "1000" or an integer value: bytes. */
static int value_size(const tval *v, uint64_t *out) {
  if (v->kind == TV_INT) return *out = v->i, 0;
  if (v->kind != TV_STR) return -1;
  char *end;
  errno = 0;
  unsigned long long x = strtoull(v->s, &end, 10);
  if (end == v->s || errno) return -1;
  static const struct { const char *suf; uint64_t mul; } sufs[] = {
      {"", 1}, {"b", 1}, {"k", 1ull << 10}, {"kib", 1ull << 10}, {"kb", 1000}, {"m", 1ull << 20},
      {"mib", 1ull << 20}, {"mb", 1000000}, {"g", 1ull << 30}, {"gib", 1ull << 30}, {"gb", 1000000000},
      {"t", 1ull << 40}, {"tib", 1ull << 40}, {"tb", 1000000000000ull}};
  const char *suf = end;
  while (*suf == ' ') suf++;
  for (size_t i = 0; i < sizeof sufs / sizeof sufs[0]; i++)
    if (!strcasecmp(suf, sufs[i].suf)) return __builtin_mul_overflow((uint64_t)x, sufs[i].mul, out) ? -1 : 0;
  return -1;
}

/* "10s", "500ms", "2m", "1h" or an integer (milliseconds). */
static int value_ms(const tval *v, uint32_t *out) {
  uint64_t ms;
  if (v->kind == TV_INT) {
    ms = v->i;
  } else if (v->kind == TV_STR) {
    char *end;
    errno = 0;
    double x = strtod(v->s, &end);
    if (end == v->s || errno || x < 0) return -1;
    const char *u = end;
    while (*u == ' ') u++;
    double mul = !strcmp(u, "ms") || !*u ? 1 : !strcmp(u, "s") ? 1e3 : !strcmp(u, "m") ? 60e3 : !strcmp(u, "h") ? 3600e3 : -1;
    if (mul < 0 || x * mul > 4e9) return -1;
    ms = (uint64_t)(x * mul + 0.5);
  } else {
    return -1;
  }
  if (ms > UINT32_MAX) return -1;
  *out = (uint32_t)ms;
  return 0;
}

static bool name_ok(const char *s, size_t max) {
  size_t n = strlen(s);
  if (!n || n > max) return false;
  for (size_t i = 0; i < n; i++)
    if (!isalnum((unsigned char)s[i]) && s[i] != '-' && s[i] != '_' && s[i] != '.' && s[i] != '@') return false;
  return true;
}

static int find_class(const ctl_pool *P, const char *name) {
  for (uint32_t i = 0; i < P->nclasses; i++)
    if (!strcmp(P->classes[i].name, name)) return (int)i;
  return -1;
}

static void class_list(const ctl_pool *P, char *buf, size_t cap) {
  size_t n = 0;
  buf[0] = 0;
  for (uint32_t i = 0; i < P->nclasses && n < cap; i++)
    n += (size_t)snprintf(buf + n, cap - n, "%s%s", i ? " > " : "", P->classes[i].name);
}

typedef struct class_setting {
  char name[POOL_CLASS_NAME_MAX + 1];
  uint32_t limit;
  int line;
} class_setting;

static int parse_config(ctl_pool *P, const char *path, char *text, lm_err *err) {
  char section[128] = "";
  char dflt_class[POOL_CLASS_NAME_MAX + 1] = "";
  int dflt_line = 0;
  class_setting cs[64];
  uint32_t ncs = 0;
  pool_quota *q = NULL;
  int line = 0;
  char why[200];
  for (char *ln = text, *nx; ln; ln = nx) {
    line++;
    nx = strchr(ln, '\n');
    if (nx) *nx++ = 0;
    bool in_str = false; /* cut a comment outside strings */
    for (char *s = ln; *s; s++) {
      if (*s == '"' && (s == ln || s[-1] != '\\')) in_str = !in_str;
      else if (*s == '#' && !in_str) {
        *s = 0;
        break;
      }
    }
    char *s = trim(ln);
    if (!*s) continue;
    if (*s == '[') {
      size_t n = strlen(s);
      if (s[n - 1] != ']' || n < 3 || n - 2 >= sizeof section)
        return lm_errf(err, LOOM_INVALID_ARGUMENT, "%s:%d: a section is [pool], [class.NAME] or [quota.USER]", path,
                       line);
      s[n - 1] = 0;
      snprintf(section, sizeof section, "%s", trim(s + 1));
      q = NULL;
      if (!strcmp(section, "pool")) continue;
      if (!strncmp(section, "class.", 6) && name_ok(section + 6, POOL_CLASS_NAME_MAX)) {
        if (ncs >= sizeof cs / sizeof cs[0])
          return lm_errf(err, LOOM_INVALID_ARGUMENT, "%s:%d: too many [class.*] sections", path, line);
        snprintf(cs[ncs].name, sizeof cs[ncs].name, "%.31s", section + 6);
        cs[ncs].limit = 0;
        cs[ncs].line = line;
        ncs++;
        continue;
      }
      if (!strncmp(section, "quota.", 6) && name_ok(section + 6, LM_TOKEN_USER_MAX)) {
        if (!strcmp(section + 6, "default")) {
          q = &P->dflt;
        } else {
          for (uint32_t i = 0; i < P->nquotas && !q; i++)
            if (!strcmp(P->quotas[i].user, section + 6)) q = &P->quotas[i];
          if (!q) {
            if (P->nquotas >= POOL_MAX_QUOTAS)
              return lm_errf(err, LOOM_INVALID_ARGUMENT, "%s:%d: more than %d [quota.*] sections", path, line,
                             POOL_MAX_QUOTAS);
            if (!P->quotas && !(P->quotas = calloc(POOL_MAX_QUOTAS, sizeof *P->quotas)))
              return lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
            q = &P->quotas[P->nquotas++];
            snprintf(q->user, sizeof q->user, "%.*s", (int)sizeof q->user - 1, section + 6);
          }
        }
        continue;
      }
      return lm_errf(err, LOOM_INVALID_ARGUMENT,
                     "%s:%d: unknown section [%s] (sections: [pool], [class.NAME], [quota.default], [quota.USER])", path,
                     line, section);
    }
    char *eq = strchr(s, '=');
    if (!eq) return lm_errf(err, LOOM_INVALID_ARGUMENT, "%s:%d: expected KEY = VALUE", path, line);
    *eq = 0;
    char *key = trim(s), *val = trim(eq + 1);
    tval v;
    if (parse_value(val, &v, why, sizeof why) < 0)
      return lm_errf(err, LOOM_INVALID_ARGUMENT, "%s:%d: %s: %s", path, line, key, why);
    bool ok = true, known = true;
    if (!strcmp(section, "pool")) {
      if (!strcmp(key, "classes")) {
        ok = v.kind == TV_ARR && v.narr > 0;
        for (uint32_t i = 0; ok && i < v.narr; i++) {
          ok = name_ok(v.arr[i], POOL_CLASS_NAME_MAX);
          for (uint32_t j = 0; ok && j < i; j++) ok = strcmp(v.arr[i], v.arr[j]) != 0;
        }
        if (!ok)
          return lm_errf(err, LOOM_INVALID_ARGUMENT,
                         "%s:%d: classes must be an array of 1 to %d distinct names (letters, digits, - _ .)", path,
                         line, POOL_MAX_CLASSES);
        P->nclasses = v.narr;
        for (uint32_t i = 0; i < v.narr; i++) {
          memset(&P->classes[i], 0, sizeof P->classes[i]);
          snprintf(P->classes[i].name, sizeof P->classes[i].name, "%s", v.arr[i]);
        }
      } else if (!strcmp(key, "preempt_grace")) {
        ok = value_ms(&v, &P->preempt_grace_ms) == 0;
      } else if (!strcmp(key, "min_run")) {
        ok = value_ms(&v, &P->min_run_ms) == 0;
      } else if (!strcmp(key, "default_class")) {
        ok = v.kind == TV_STR && name_ok(v.s, POOL_CLASS_NAME_MAX);
        if (ok) snprintf(dflt_class, sizeof dflt_class, "%.31s", v.s), dflt_line = line;
      } else {
        known = false;
      }
    } else if (!strncmp(section, "class.", 6)) {
      if (!strcmp(key, "launch_limit")) ok = value_ms(&v, &cs[ncs - 1].limit) == 0;
      else known = false;
    } else if (q) {
      uint64_t x = 0;
      if (!strcmp(key, "devices")) {
        ok = v.kind == TV_INT && v.i <= LM_REG_MAX_DEVICES;
        q->devices = (uint32_t)v.i, q->has_devices = true;
      } else if (!strcmp(key, "sessions")) {
        ok = v.kind == TV_INT && v.i <= 1000000;
        q->sessions = (uint32_t)v.i, q->has_sessions = true;
      } else if (!strcmp(key, "queued_launches")) {
        ok = v.kind == TV_INT && v.i <= 100000000;
        q->launches = (uint32_t)v.i, q->has_launches = true;
      } else if (!strcmp(key, "device_memory")) {
        ok = value_size(&v, &x) == 0;
        q->memory = x, q->has_memory = true;
      } else if (!strcmp(key, "session_device_memory")) {
        ok = value_size(&v, &x) == 0;
        q->session_memory = x, q->has_session_memory = true;
      } else {
        known = false;
      }
    } else {
      return lm_errf(err, LOOM_INVALID_ARGUMENT, "%s:%d: %s = ... outside a section", path, line, key);
    }
    if (!known)
      return lm_errf(err, LOOM_INVALID_ARGUMENT, "%s:%d: unknown key '%.60s' in [%s]", path, line, key, section);
    if (!ok)
      return lm_errf(err, LOOM_INVALID_ARGUMENT, "%s:%d: bad value for %s (see docs/pool.md for its form)", path, line,
                     key);
  }
  for (uint32_t i = 0; i < ncs; i++) {
    int k = find_class(P, cs[i].name);
    if (k < 0)
      return lm_errf(err, LOOM_INVALID_ARGUMENT, "%s:%d: [class.%s] names no class in [pool] classes", path,
                     cs[i].line, cs[i].name);
    P->classes[k].launch_limit_ms = cs[i].limit;
  }
  if (dflt_class[0]) {
    int k = find_class(P, dflt_class);
    if (k < 0)
      return lm_errf(err, LOOM_INVALID_ARGUMENT, "%s:%d: default_class '%s' is not one of the classes", path,
                     dflt_line, dflt_class);
    P->default_class = (uint32_t)k;
  } else {
    P->default_class = P->nclasses > 1 ? 1 : 0; /* the second: room above for urgent work */
  }
  return 0;
}

int ctl_pool_init(ctl *c, const char *path, lm_err *err) {
  ctl_pool *P = calloc(1, sizeof *P);
  if (!P) return lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  static const char *const builtin[] = {"prod", "interactive", "batch"};
  for (uint32_t i = 0; i < 3; i++) snprintf(P->classes[i].name, sizeof P->classes[i].name, "%s", builtin[i]);
  P->nclasses = 3;
  P->default_class = 1;
  P->ctl = c;
  c->pool = P;
  if (!path) return 0;
  snprintf(P->path, sizeof P->path, "%s", path);
  FILE *f = fopen(path, "rb");
  if (!f) return lm_errf(err, LOOM_IO, "cannot read the configuration file %s: %s", path, strerror(errno));
  char *text = malloc(POOL_CONFIG_MAX + 1);
  size_t n = text ? fread(text, 1, POOL_CONFIG_MAX + 1, f) : 0;
  bool bad = ferror(f);
  fclose(f);
  if (!text) return lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  if (bad || n > POOL_CONFIG_MAX) {
    free(text);
    return lm_errf(err, LOOM_INVALID_ARGUMENT, "cannot read the configuration file %s: %s", path,
                   bad ? "read error" : "larger than 1 MiB");
  }
  text[n] = 0;
  if (strlen(text) != n) {
    free(text);
    return lm_errf(err, LOOM_INVALID_ARGUMENT, "%s: the file holds a NUL byte: not a text file", path);
  }
  int rc = parse_config(P, path, text, err);
  free(text);
  if (rc == 0) {
    char cl[256];
    class_list(P, cl, sizeof cl);
    lm_info("pool configuration %s: classes %s (default %s), %u user quotas%s", path, cl,
            P->classes[P->default_class].name, P->nquotas,
            P->dflt.has_devices || P->dflt.has_memory || P->dflt.has_sessions || P->dflt.has_launches ||
                    P->dflt.has_session_memory
                ? " and a default quota"
                : "");
  }
  return rc;
}

static void held_free(pool_sess *s) {
  for (held_frame *h = s->held, *n; h; h = n) {
    n = h->next;
    free(h->meta);
    free(h->payload);
    free(h);
  }
  s->held = NULL;
  s->held_tail = &s->held;
  s->held_bytes = 0;
}

/* s waits for no STASH or SHARD_MOVE answer any more: what it waited for leaves the pool's count
 * (answers still in flight to it are no longer matched, or s is gone). */
static void stash_forget(ctl_pool *P, pool_sess *s) {
  P->stash_replies -= s->stash_wait < P->stash_replies ? s->stash_wait : P->stash_replies;
  s->stash_wait = 0;
}

static void sess_free(ctl_pool *P, pool_sess *s) {
  if (!s) return;
  stash_forget(P, s);
  held_free(s);
  memset(s->resume_secret, 0, sizeof s->resume_secret);
  free(s->mv);
  free(s->devs);
  free(s);
}

void ctl_pool_free(ctl *c) {
  ctl_pool *P = c->pool;
  if (!P) return;
  for (pool_sess *s = P->head, *n; s; s = n) {
    n = s->next;
    sess_free(P, s);
  }
  free(P->quotas);
  free(P);
  c->pool = NULL;
}

/* ---- quotas ---- */

enum { Q_DEVICES, Q_MEMORY, Q_SESSIONS, Q_LAUNCHES, Q_SESSION_MEMORY };
static const char *const g_quota_names[] = {"devices", "device_memory", "sessions", "queued_launches",
                                            "session_device_memory"};

static bool quota_has(const pool_quota *q, int kind) {
  switch (kind) {
  case Q_DEVICES: return q->has_devices;
  case Q_MEMORY: return q->has_memory;
  case Q_SESSIONS: return q->has_sessions;
  case Q_LAUNCHES: return q->has_launches;
  default: return q->has_session_memory;
  }
}

static uint64_t quota_value(const pool_quota *q, int kind) {
  switch (kind) {
  case Q_DEVICES: return q->devices;
  case Q_MEMORY: return q->memory;
  case Q_SESSIONS: return q->sessions;
  case Q_LAUNCHES: return q->launches;
  default: return q->session_memory;
  }
}

/* The user's limit of that kind (0: none) and the section it comes from. */
static uint64_t quota_of(const ctl_pool *P, const char *user, int kind, const char **from) {
  const pool_quota *qs[2] = {NULL, &P->dflt};
  for (uint32_t i = 0; i < P->nquotas; i++)
    if (!strcmp(P->quotas[i].user, user)) qs[0] = &P->quotas[i];
  for (int k = 0; k < 2; k++) {
    const pool_quota *q = qs[k];
    if (!q) continue;
    if (!quota_has(q, kind)) continue;
    *from = k == 0 ? "user" : "default";
    return quota_value(q, kind);
  }
  *from = NULL;
  return 0;
}

static const char *user_label(const char *user) { return user[0] ? user : "(anonymous)"; }

/* "quota devices = 4 of user alice ([quota.alice] in loom.toml)" */
static void quota_name(const ctl_pool *P, const char *user, int kind, uint64_t limit, const char *from, char *buf,
                       size_t cap) {
  char lim[48];
  if (kind == Q_MEMORY || kind == Q_SESSION_MEMORY) fmt_bytes(limit, lim, sizeof lim);
  else snprintf(lim, sizeof lim, "%llu", (unsigned long long)limit);
  snprintf(buf, cap, "quota %s = %s of user %.64s ([quota.%.64s] in %.200s)", g_quota_names[kind], lim, user_label(user),
           !strcmp(from, "user") ? user : "default", P->path);
}

typedef struct user_now {
  uint32_t sessions, devices, launches;
  uint64_t memory;
} user_now;

static user_now user_totals(const ctl_pool *P, const char *user) {
  user_now t = {0};
  for (const pool_sess *s = P->head; s; s = s->next) {
    if (s->state == PS_CLOSED || strcmp(s->user, user)) continue;
    t.sessions += s->state != PS_DETACHED; /* its resume counts it then */
    if (HOLDS(s)) t.devices += s->ndev;
    t.launches += s->active;
    t.memory += s->memory;
  }
  return t;
}

/* ---- admission ---- */

static void send_hello_reply(ctl *c, pool_sess *s) {
  peer *p = s->p;
  Lmw__HelloReply r = LMW__HELLO_REPLY__INIT;
  r.protocol_version = LM_PROTOCOL_VERSION;
  r.software = "loom " LOOM_VERSION_STRING;
  r.max_meta = c->cfg.conn.limits.max_meta;
  r.max_payload = c->cfg.conn.limits.max_payload;
  r.user = p->user;
  r.session_id = p->session->id;
  r.n_pool_device_ids = s->ndev;
  r.pool_device_ids = s->devs;
  r.priority = c->pool->classes[s->cls].name;
  r.queued_ms = s->admitted_loop_ms - s->opened_loop_ms;
  if (s->has_secret) {
    r.resume_secret.data = s->resume_secret;
    r.resume_secret.len = sizeof s->resume_secret;
  }
  s->jdirty = true;
  lm_err err;
  if (lm_conn_send(p->conn, LM_MSG_HELLO_REPLY, s->hello_rid, &r.base, NULL, 0, NULL, NULL, &err) < 0 &&
      lm_conn_is_open(p->conn))
    lm_warn("cannot answer session %llu's HELLO: %s", (unsigned long long)s->id, err.msg);
}

static void send_queue_update(ctl *c, pool_sess *s, uint32_t queued, uint32_t nfree) {
  Lmw__QueueUpdate u = LMW__QUEUE_UPDATE__INIT;
  u.position = s->position;
  u.queued = queued;
  u.devices = s->asked;
  u.free_devices = nfree;
  u.priority = c->pool->classes[s->cls].name;
  u.waited_ms = ctl_now_ms(c) - s->opened_loop_ms;
  u.blocked_by = s->blocked_by;
  lm_err err;
  if (lm_conn_send(s->p->conn, LM_MSG_QUEUE_UPDATE, 0, &u.base, NULL, 0, NULL, NULL, &err) < 0 &&
      lm_conn_is_open(s->p->conn))
    lm_warn("cannot send a queue update to session %llu: %s", (unsigned long long)s->id, err.msg);
  s->last_update_ms = ctl_now_ms(c);
  s->last_position = s->position;
}

/* Healthy devices that no running pool session holds, in id order, into out; their number. */
static uint32_t free_devices(ctl *c, uint32_t *out, uint32_t *ntotal) {
  uint32_t n = lm_registry_device_count(c->reg), k = 0, total = 0;
  uint8_t *held = calloc(n ? n : 1, 1);
  if (!held) return *ntotal = 0, 0;
  for (const pool_sess *s = c->pool->head; s; s = s->next)
    if (HOLDS(s))
      for (uint32_t i = 0; i < s->ndev; i++)
        if (s->devs[i] < n) held[s->devs[i]] = 1;
  for (uint32_t i = 0; i < n; i++) {
    if (!lm_registry_device_healthy(c->reg, i)) continue;
    total++;
    if (!held[i] && out) out[k++] = i;
    else if (!held[i]) k++;
  }
  free(held);
  *ntotal = total;
  return k;
}

/* Removes devs[0..n) from the free list when all of them are in it. */
/* Time sharing: g is a sharer of the devices of s (any state: a closed one's launches may still run). */
static bool on_devs(const pool_sess *g, const pool_sess *s) {
  return g->weight && s->weight && g->ndev == s->ndev && g->ndev && g->devs && s->devs &&
         !memcmp(g->devs, s->devs, g->ndev * sizeof *g->devs);
}
/* ... and running, so in its group. */
static bool same_group(const pool_sess *g, const pool_sess *s) {
  return g->state == PS_RUNNING && s->state == PS_RUNNING && on_devs(g, s);
}

/* Launches on the group's devices in flight (sent to the workers, not yet complete). */
static uint32_t group_inflight(const ctl_pool *P, const pool_sess *s) {
  uint32_t n = 0;
  for (const pool_sess *g = P->head; g; g = g->next)
    if (g == s || on_devs(g, s)) n += g->active;
  return n;
}

static bool take_devices(uint32_t *fl, uint32_t *nfree, const uint32_t *devs, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) {
    uint32_t k = 0;
    while (k < *nfree && fl[k] != devs[i]) k++;
    if (k == *nfree) return false;
  }
  for (uint32_t i = 0; i < n; i++) {
    uint32_t k = 0;
    while (fl[k] != devs[i]) k++;
    memmove(fl + k, fl + k + 1, (*nfree - k - 1) * sizeof *fl);
    (*nfree)--;
  }
  return true;
}

/* Preempts lower-class sessions (the lowest class first, the latest admitted first) so that s
 * fits: they become SUSPENDING (their new requests held) and SUSPENDED once their launches in
 * flight are done. Returns true when it fits once they are (or were already being) suspended. */
/* A time-sharing group is preempted whole: every other running member must be of a lower class
 * than s, connected and past min_run too. */
static bool group_preemptible(const ctl_pool *P, const pool_sess *v, const pool_sess *s, uint64_t now) {
  for (const pool_sess *g = P->head; g; g = g->next)
    if (g != v && same_group(g, v) && (g->cls <= s->cls || !g->p || now - g->admitted_loop_ms < P->min_run_ms))
      return false;
  return true;
}

/* Sharer v's devices are already counted: an earlier session of the list in that state shares them. */
static bool counted_before(const ctl_pool *P, const pool_sess *v, int state) {
  for (const pool_sess *g = P->head; g && g != v; g = g->next)
    if (g->state == state && on_devs(g, v)) return true;
  return false;
}

/* v is preempted for s: its requests are held from now on; it is suspended once its launches in
 * flight are done and its shards are in host memory (pool_admit_once). */
static void suspend(ctl *c, pool_sess *v, const pool_sess *s) {
  ctl_pool *P = c->pool;
  v->state = PS_SUSPENDING;
  v->suspended_at = ctl_now_ms(c);
  v->suspensions++;
  v->u.held_dev_s += (double)v->ndev * (double)(v->suspended_at - v->admitted_loop_ms) / 1000.0;
  lm_info("session %llu (user %s, %s) is preempted for session %llu (%s)%s: its requests wait, its shards go to "
          "host memory",
          (unsigned long long)v->id, user_label(v->user), P->classes[v->cls].name, (unsigned long long)s->id,
          P->classes[s->cls].name, same_group(v, s) ? ", which time-shares its devices" : "");
}

static bool preempt_for(ctl *c, pool_sess *s, uint32_t nfree) {
  ctl_pool *P = c->pool;
  uint64_t now = ctl_now_ms(c);
  if (now - s->opened_loop_ms < P->preempt_grace_ms) return false; /* [pool] preempt_grace */
  uint32_t avail = nfree;
  for (pool_sess *v = P->head; v; v = v->next)
    if (v->state == PS_SUSPENDING && !(v->weight && counted_before(P, v, PS_SUSPENDING))) avail += v->ndev;
  if (avail >= s->asked) return true;
  pool_sess *pick[64];
  uint32_t npick = 0;
  while (avail < s->asked && npick < 64) {
    pool_sess *best = NULL;
    for (pool_sess *v = P->head; v; v = v->next) {
      if (v->state != PS_RUNNING || v->cls <= s->cls || !v->p) continue;
      if (now - v->admitted_loop_ms < P->min_run_ms) continue; /* [pool] min_run */
      if (v->weight && !group_preemptible(P, v, s, now)) continue;
      bool taken = false;
      for (uint32_t i = 0; i < npick; i++) taken |= pick[i] == v || (v->weight && on_devs(pick[i], v));
      if (taken) continue;
      if (!best || v->cls > best->cls || (v->cls == best->cls && v->admitted_loop_ms >= best->admitted_loop_ms))
        best = v;
    }
    if (!best) return false; /* nothing lower to make room with: it waits */
    pick[npick++] = best;
    avail += best->ndev;
    for (pool_sess *g = P->head; best->weight && g && npick < 64; g = g->next) /* its whole sharing group */
      if (g != best && same_group(g, best)) pick[npick++] = g;
  }
  if (avail < s->asked) return false;
  for (uint32_t i = 0; i < npick; i++) suspend(c, pick[i], s);
  return true;
}

/* Part of a sharing group: a member of a lower class than another running member of its group
 * (which has run preempt_grace there) is suspended once past min_run, so the higher class gets the
 * devices' time and memory; it resumes when no higher member runs there any more, or on other free
 * devices (pool_admit_once). Returns true when it suspended one. */
static bool preempt_in_groups(ctl *c) {
  ctl_pool *P = c->pool;
  uint64_t now = ctl_now_ms(c);
  bool any = false;
  for (pool_sess *v = P->head; v; v = v->next) {
    if (v->state != PS_RUNNING || !v->weight || !v->p || now - v->admitted_loop_ms < P->min_run_ms) continue;
    pool_sess *hi = NULL;
    for (pool_sess *g = P->head; g && !hi; g = g->next)
      if (g != v && same_group(g, v) && g->p && g->cls < v->cls && now - g->admitted_loop_ms >= P->preempt_grace_ms)
        hi = g;
    if (!hi) continue;
    suspend(c, v, hi);
    any = true;
  }
  return any;
}

static void resume(ctl *c, pool_sess *s);
static void pool_admit(ctl *c);

#define POOL_STASH_WAIT_MS 30000 /* workers that do not answer a STASH by then are not waited for */

/* Sends STASH (restore: back onto the devices) to every worker holding state of s's session. */
static void send_stash(ctl *c, pool_sess *s, bool restore) {
  stash_forget(c->pool, s);
  s->stash_rid = c->next_rid;
  s->stash_nrid = 0;
  s->stash_sent_ms = ctl_now_ms(c);
  if (!restore) s->pinned = false;
  if (!s->p || !s->p->session) return;
  Lmw__Stash m = LMW__STASH__INIT;
  m.session = s->id;
  m.restore = restore;
  uint32_t nw = lm_registry_worker_count(c->reg);
  for (uint32_t w = 0; w < nw; w++) {
    if (!lm_session_touched(s->p->session, w)) continue;
    uint64_t rid = c->next_rid++;
    s->stash_nrid++;
    const lm_reg_worker *rw = lm_registry_worker(c->reg, w);
    bool connected = rw && rw->state == LM_WORKER_ALIVE && w < c->worker_peer_cap && c->worker_peer[w];
    if (connected && ctl_worker_send(c, w, LM_MSG_STASH, rid, &m.base, NULL, 0, NULL) == 0) {
      s->stash_wait++;
      c->pool->stash_replies++;
    }
  }
}

bool ctl_pool_on_reply(ctl *c, peer *w, const lm_frame *f) {
  if (!c->pool || !c->pool->stash_replies) return false;
  uint64_t rid = f->h.request_id;
  for (pool_sess *s = c->pool->head; s; s = s->next) {
    if (!s->stash_nrid || rid < s->stash_rid || rid >= s->stash_rid + s->stash_nrid) continue;
    if (f->h.type == LM_MSG_ERROR) {
      lm_err e;
      lm_msg_error_status(f, &e);
      lm_warn("session %llu: worker %u: %s", (unsigned long long)s->id, w->worker_id, e.msg);
    } else if (f->h.type == LM_MSG_ACK && f->h.meta_len && s->state == PS_SUSPENDING) {
      ProtobufCMessage *m = NULL;
      lm_err e;
      if (lm_msg_decode(f, &m, &e) == 0 && ((Lmw__Ack *)m)->stash_kept) s->pinned = true;
      if (m) lm_msg_free(m);
    }
    if (!s->stash_wait) return true;
    s->stash_wait--;
    c->pool->stash_replies--; /* (the sum of the sessions' stash_wait) */
    if (s->state == PS_SUSPENDING && !s->stash_wait) {
      pool_admit(c);
    } else if (s->mv_shards && !s->stash_wait) {
      s->mv_shards = false;
      lm_info("session %llu: its shards are on its new devices, %llu ms after it resumed there",
              (unsigned long long)s->id, (unsigned long long)(ctl_now_ms(c) - s->mv_start_ms));
    }
    return true;
  }
  return false;
}

/* ---- resuming on other devices than its own ----
 *
 * A suspended session whose devices are still lent out resumes on whatever devices are free: its
 * device i (its own numbering is unchanged) becomes nd[i]. Its arrays name the new devices from
 * then on, and every worker involved gets its part of moving the shards there (SHARD_MOVE: within
 * the worker, or to another over the data plane, from the host memory STASH put them in); its
 * executables get the same programs loaded on the new devices (from the cache or compiled anew).
 * Its requests stay held until those programs are loaded; the workers list the arriving shards as
 * pending at once, so launches that read them wait for the bytes. Launches run in the same order
 * on the same numbering of devices, so results are bitwise those of an undisturbed run. */

#define POOL_TAG_BIT (UINT64_C(1) << 62) /* SHARD_MOVE tags, apart from recovery's shard copies */

static uint32_t replay_held(pool_sess *s);
static void sess_unref(ctl_pool *P, pool_sess *s);

static bool in_list(const uint32_t *l, uint32_t n, uint32_t v) {
  for (uint32_t i = 0; i < n; i++)
    if (l[i] == v) return true;
  return false;
}

/* n of the free devices fl[0..nfree) (nfree >= n) for a session that held own[0..n): its own where
 * they are free (fewer shards move), others in id order for the rest. NULL: out of memory. */
static uint32_t *pick_devices(const uint32_t *fl, uint32_t nfree, const uint32_t *own, uint32_t n) {
  uint32_t *nd = malloc(n * sizeof *nd);
  if (!nd) return NULL;
  for (uint32_t k = 0; k < n; k++) nd[k] = in_list(fl, nfree, own[k]) ? own[k] : UINT32_MAX;
  uint32_t j = 0;
  for (uint32_t k = 0; k < n; k++) {
    if (nd[k] != UINT32_MAX) continue;
    while (j < nfree && in_list(own, n, fl[j])) j++; /* its own free ones are taken above */
    nd[k] = fl[j++];
  }
  return nd;
}

/* Drops what a move holds (the session closed while resuming): program references taken. */
static void mv_drop(ctl *c, pool_sess *s) {
  for (uint32_t k = 0; k < s->nmv; k++)
    if (s->mv[k].settled && s->mv[k].nw) ctl_program_release(c, s->mv[k].nw);
  free(s->mv);
  s->mv = NULL;
  s->nmv = s->mv_wait = 0;
}

/* Every program is loaded on the new devices (or failed there): the executables take them, and
 * the session runs. */
static void finish_move(ctl *c, pool_sess *s) {
  lm_session *ss = s->p->session;
  for (size_t i = 0; i < ss->cap; i++) {
    c_exe *e = ss->slots[i].id ? lm_session_get(ss, ss->slots[i].id, H_EXECUTABLE) : NULL;
    if (!e) continue;
    for (uint32_t k = 0; k < s->nmv; k++) {
      if (e->prog != s->mv[k].old || !s->mv[k].nw) continue;
      c_program *old = e->prog;
      e->prog = s->mv[k].nw;
      e->prog->refs++;
      ctl_j_exe(c, ss->id, ss->slots[i].id, e->prog->id);
      ctl_program_release(c, old);
      break;
    }
  }
  mv_drop(c, s);
  uint64_t now = ctl_now_ms(c);
  s->state = PS_RUNNING;
  s->stash_sent = false;
  uint32_t n = replay_held(s);
  lm_info("session %llu (user %s) runs on its new devices %llu ms after it resumed there; %u held requests replayed",
          (unsigned long long)s->id, user_label(s->user), (unsigned long long)(now - s->mv_start_ms), n);
}

static void mv_prog_done(ctl *c, c_program *p, void *arg) {
  pool_sess *s = arg;
  for (uint32_t k = 0; k < s->nmv; k++) {
    if (s->mv[k].nw != p || s->mv[k].settled) continue;
    s->mv[k].settled = true;
    if (p->state == P_READY) {
      p->refs++;
    } else {
      lm_warn("session %llu: program %s could not be loaded on its new devices (%s); launches of it will fail",
              (unsigned long long)s->id, p->name, p->msg);
      s->mv[k].nw = NULL;
    }
    if (--s->mv_wait == 0 && s->state == PS_RESUMING && s->p) finish_move(c, s);
    break;
  }
  sess_unref(c->pool, s);
}

typedef struct mv_item {
  uint32_t worker;
  Lmw__ShardMoveItem m;
  uint64_t dims[LM_SHARD_MAX_RANK];
} mv_item;

/* Whether suspended s can move now: 1 yes; 0 not yet (a compile of it is in flight: it would load
 * on the old devices; tried again at the next pass); < 0 (err) not at all: an array or program of
 * it is on a device not its own (it then waits for its own devices). */
static int move_check(ctl *c, const pool_sess *s, lm_err *err) {
  const lm_session *ss = s->p->session;
  for (const c_program *q = c->programs; q; q = q->next)
    if (q->state == P_ANALYZING || q->state == P_LOADING)
      for (const c_waiter *w = q->waiters; w; w = w->next)
        if (w->client == s->p) return 0;
  for (size_t i = 0; i < ss->cap; i++) {
    if (!ss->slots[i].id) continue;
    const c_array *a = lm_session_get(ss, ss->slots[i].id, H_ARRAY);
    const c_exe *e = a ? NULL : lm_session_get(ss, ss->slots[i].id, H_EXECUTABLE);
    for (uint32_t k = 0; a && k < a->sh.ndev; k++)
      if (!in_list(s->devs, s->ndev, a->devs[k]))
        return lm_errf(err, LOOM_UNSUPPORTED, "array %llu has a shard on device %u, not one of the session's",
                       (unsigned long long)a->id, a->devs[k]);
    const c_program *q = e ? e->prog : NULL;
    if (q && (q->state != P_READY || q->default_devices))
      return lm_errf(err, LOOM_UNSUPPORTED, "program %s is not loaded on a device list of the session", q->name);
    const uint32_t *pd = !q ? NULL : q->asked_prefix ? q->asked : q->devices;
    size_t npd = !q ? 0 : q->asked_prefix ? q->nasked : q->ndev;
    for (size_t k = 0; k < npd; k++)
      if (!in_list(s->devs, s->ndev, pd[k]))
        return lm_errf(err, LOOM_UNSUPPORTED, "program %s runs on device %u, not one of the session's", q->name, pd[k]);
  }
  return 1;
}

/* Resumes suspended s (move_check said yes) on devices nd[0..ndev) (some may be its own); false
 * (logged) when it cannot, before anything changed: it then waits for its own devices. */
static bool resume_elsewhere(ctl *c, pool_sess *s, const uint32_t *nd) {
  ctl_pool *P = c->pool;
  lm_session *ss = s->p->session;
  uint32_t n = s->ndev;
  lm_err err = {0};
  size_t nshards = 0;
  int rc = 0;
  /* what it has: its arrays, and the programs of its executables */
  for (size_t i = 0; i < ss->cap && rc == 0; i++) {
    if (!ss->slots[i].id) continue;
    const c_array *a = lm_session_get(ss, ss->slots[i].id, H_ARRAY);
    const c_exe *e = a ? NULL : lm_session_get(ss, ss->slots[i].id, H_EXECUTABLE);
    if (a) nshards += a->sh.ndev;
    if (!e) continue;
    bool have = false;
    for (uint32_t k = 0; k < s->nmv && !have; k++) have = s->mv[k].old == e->prog;
    if (have) continue;
    struct pool_mv *mv = realloc(s->mv, (s->nmv + 1) * sizeof *mv);
    if (!mv) {
      rc = lm_errf(&err, LOOM_NO_MEMORY, "out of host memory");
      break;
    }
    s->mv = mv;
    s->mv[s->nmv++] = (struct pool_mv){.old = e->prog};
  }
  mv_item *it = rc == 0 ? calloc(2 * nshards + 1, sizeof *it) : NULL;
  Lmw__ShardMoveItem **ptrs = rc == 0 ? calloc(2 * nshards + 1, sizeof *ptrs) : NULL; /* one worker's items */
  uint32_t nw = lm_registry_worker_count(c->reg);
  uint32_t *cnt = rc == 0 ? calloc(nw + 1, sizeof *cnt) : NULL;
  uint8_t *restore = rc == 0 ? calloc(nw + 1, 1) : NULL;
  if (rc == 0 && (!it || !ptrs || !cnt || !restore)) rc = lm_errf(&err, LOOM_NO_MEMORY, "out of host memory");
  /* the programs there: found or compiled (a failure here leaves nothing changed) */
  for (uint32_t k = 0; k < s->nmv && rc == 0; k++) {
    c_program *np = NULL;
    int r = ctl_program_remap(c, s->mv[k].old, s->devs, nd, n, mv_prog_done, s, &np, &err);
    if (r < 0) {
      rc = r;
      break;
    }
    s->mv[k].nw = np;
    if (r == 1) {
      np->refs++;
      s->mv[k].settled = true;
    } else {
      s->refs++; /* until mv_prog_done */
      s->mv_wait++;
    }
  }
  if (rc < 0) {
    lm_warn("session %llu cannot resume on other devices (%s); it waits for its own", (unsigned long long)s->id,
            err.msg);
    mv_drop(c, s); /* programs being loaded for it settle later and find no move (mv_prog_done) */
    s->pinned = true; /* not tried again until its next suspension */
    free(it), free(ptrs), free(cnt), free(restore);
    return false;
  }
  /* its arrays name the new devices; each shard's move goes to the workers at both ends */
  size_t ni = 0;
  for (size_t i = 0; i < ss->cap; i++) {
    c_array *a = ss->slots[i].id ? lm_session_get(ss, ss->slots[i].id, H_ARRAY) : NULL;
    if (!a) continue;
    if (a->held) ctl_release(a->held, a->devs, a->sh.ndev);
    for (uint32_t k = 0; k < a->sh.ndev; k++) {
      uint32_t j = 0;
      while (s->devs[j] != a->devs[k]) j++;
      uint32_t to = nd[j];
      const lm_reg_device *od = lm_registry_device(c->reg, a->devs[k]), *td = lm_registry_device(c->reg, to);
      a->devs[k] = to;
      if (a->bk) a->bk[k] = LM_REG_NO_DEVICE; /* its snapshot (recovery) named the old device */
      if (k + 1 == a->sh.ndev) ctl_j_array(c, ss->id, a); /* the journal too, once its devices are all new */
      a->producer = 0; /* a replay of its producer (recovery) would run on the old devices */
      if (!od || !td || od->worker >= nw || td->worker >= nw) continue;
      if (od == td || (od->worker == td->worker && od->local_index == td->local_index)) {
        restore[od->worker] = 1; /* stays: back on its device (STASH restore) */
        continue;
      }
      int64_t off[LM_SHARD_MAX_RANK], sd[LM_SHARD_MAX_RANK];
      lm_sharding_shard(&a->sh, a->rank, a->dims, k, off, sd);
      uint64_t tag = POOL_TAG_BIT | ++P->next_tag;
      for (int side = 0; side < (od->worker == td->worker ? 1 : 2); side++) {
        mv_item *x = &it[ni++];
        lmw__shard_move_item__init(&x->m);
        x->m.array = a->id;
        x->m.tag = tag;
        x->m.dtype = (uint32_t)a->dtype;
        for (int d = 0; d < a->rank; d++) x->dims[d] = (uint64_t)sd[d];
        x->m.n_dims = (size_t)a->rank;
        x->m.dims = x->dims;
        x->m.from_local = od->local_index;
        x->m.to_local = td->local_index;
        if (od->worker == td->worker) {
          x->m.kind = LMW__SHARD_MOVE_KIND__MOVE_LOCAL;
          x->worker = od->worker;
        } else {
          x->m.kind = side == 0 ? LMW__SHARD_MOVE_KIND__MOVE_SEND : LMW__SHARD_MOVE_KIND__MOVE_RECV;
          x->worker = side == 0 ? od->worker : td->worker;
          x->m.peer = side == 0 ? td->worker : od->worker;
        }
        cnt[x->worker]++;
      }
    }
    if (a->held) a->held = ctl_hold(c, a->devs, a->sh.ndev);
  }
  uint32_t *old = malloc(n * sizeof *old);
  if (old) memcpy(old, s->devs, n * sizeof *old);
  memcpy(s->devs, nd, n * sizeof *nd);
  stash_forget(P, s);
  s->stash_rid = c->next_rid;
  s->stash_nrid = 0;
  s->mv_shards = true;
  uint32_t nmoved = 0, nworkers = 0;
  for (uint32_t w = 0; w < nw; w++) { /* moves first, then the STASH restore of shards that stay */
    if (!cnt[w] && !restore[w]) continue;
    const lm_reg_worker *rw = lm_registry_worker(c->reg, w);
    bool connected = rw && rw->state == LM_WORKER_ALIVE && w < c->worker_peer_cap && c->worker_peer[w];
    lm_session_touch(ss, w);
    if (cnt[w]) {
      size_t k = 0;
      for (size_t i = 0; i < ni; i++)
        if (it[i].worker == w) ptrs[k++] = &it[i].m;
      Lmw__ShardMove m = LMW__SHARD_MOVE__INIT;
      m.session = s->id;
      m.n_items = k;
      m.items = ptrs;
      uint64_t rid = c->next_rid++;
      s->stash_nrid++;
      if (connected && ctl_worker_send(c, w, LM_MSG_SHARD_MOVE, rid, &m.base, NULL, 0, NULL) == 0) {
        s->stash_wait++;
        P->stash_replies++;
        nworkers++;
      } else {
        lm_warn("session %llu: cannot send worker %u its part of moving the session's shards; the shards it was to "
                "move are lost", (unsigned long long)s->id, w);
      }
      nmoved += cnt[w];
    }
    if (restore[w]) {
      Lmw__Stash m = LMW__STASH__INIT;
      m.session = s->id;
      m.restore = true;
      uint64_t rid = c->next_rid++;
      s->stash_nrid++;
      if (connected && ctl_worker_send(c, w, LM_MSG_STASH, rid, &m.base, NULL, 0, NULL) == 0) {
        s->stash_wait++;
        P->stash_replies++;
      }
    }
  }
  free(ptrs), free(it), free(cnt), free(restore);
  uint64_t now = ctl_now_ms(c);
  s->state = PS_RESUMING;
  s->jdirty = true;
  s->suspended_ms += now - s->suspended_at;
  s->admitted_loop_ms = now; /* held_device_seconds count again from here */
  s->mv_start_ms = now;
  s->moves++;
  char from[128] = "", to[128] = "";
  for (uint32_t k = 0, a = 0, b = 0; k < n && old; k++) {
    if (a < sizeof from - 12) a += (uint32_t)snprintf(from + a, sizeof from - a, "%s%u", k ? "," : "", old[k]);
    if (b < sizeof to - 12) b += (uint32_t)snprintf(to + b, sizeof to - b, "%s%u", k ? "," : "", nd[k]);
  }
  free(old);
  lm_info("session %llu (user %s) resumes on devices %s (its own, %s, are in use) after %llu ms suspended: %u shard "
          "transfers on %u workers, %u programs to load there",
          (unsigned long long)s->id, user_label(s->user), to, from, (unsigned long long)(now - s->suspended_at),
          nmoved, nworkers, s->mv_wait);
  if (!s->mv_wait) finish_move(c, s);
  return true;
}

/* Suspended sharer s may rejoin its group, which runs on its devices: no running member there is of
 * a higher class than its own. */
static bool rejoin_ok(const ctl_pool *P, const pool_sess *s) {
  bool group = false;
  for (const pool_sess *g = P->head; g; g = g->next) {
    if (g == s || g->state != PS_RUNNING || !on_devs(g, s)) continue;
    if (g->cls < s->cls) return false;
    group = true;
  }
  return group;
}

static void pool_admit_once(ctl *c, bool *again);

static void pool_admit(ctl *c) {
  bool again = true;
  for (int i = 0; i < 4 && again; i++) pool_admit_once(c, &again);
  ctl_pool_journal(c); /* devices held now: what a resume after a restart needs */
}

static void pool_admit_once(ctl *c, bool *again) {
  ctl_pool *P = c->pool;
  *again = preempt_in_groups(c);
  /* suspensions complete once the session's launches in flight are done and its shards are in
   * host memory (or the workers did not answer in time) */
  for (pool_sess *s = P->head; s; s = s->next) {
    if (s->state != PS_SUSPENDING || s->active) continue;
    if (!s->stash_sent) {
      s->stash_sent = true;
      send_stash(c, s, false);
    }
    bool late = ctl_now_ms(c) - s->stash_sent_ms > POOL_STASH_WAIT_MS;
    if (s->stash_wait && !late) continue;
    if (s->stash_wait)
      lm_warn("session %llu: %u workers did not answer STASH within %d ms; suspending it anyway",
              (unsigned long long)s->id, s->stash_wait, POOL_STASH_WAIT_MS);
    s->state = PS_SUSPENDED;
    s->jdirty = true;
    lm_info("session %llu (user %s) suspended: devices lent to a higher class, its shards in host memory",
            (unsigned long long)s->id, user_label(s->user));
  }
  uint32_t n = lm_registry_device_count(c->reg), total;
  uint32_t *fl = malloc((n ? n : 1) * sizeof *fl);
  if (!fl) return;
  uint32_t nfree = free_devices(c, fl, &total);
  /* a suspended session resumes on its own devices (its arrays are there) once they are free and
   * no session of a higher class waits */
  for (uint32_t cls = 0; cls < P->nclasses; cls++)
    for (pool_sess *s = P->head; s; s = s->next) {
      if (s->state != PS_SUSPENDED || s->cls != cls || !s->p) continue;
      bool higher = false;
      for (pool_sess *q = P->head; q && !higher; q = q->next) higher = q->state == PS_QUEUED && q->p && q->cls < cls;
      if (higher) continue;
      if (s->weight && rejoin_ok(P, s)) { /* part of a group: no higher member runs there any more */
        resume(c, s);
        continue;
      }
      if (take_devices(fl, &nfree, s->devs, s->ndev)) {
        resume(c, s);
        for (pool_sess *g = P->head; s->weight && g; g = g->next) /* a sharing group resumes whole */
          if (g != s && g->state == PS_SUSPENDED && g->p && on_devs(g, s)) resume(c, g);
      } else if (nfree >= s->ndev) { /* on whatever devices are free; a sharing group together */
        pool_sess *grp[64];
        uint32_t ng = 0;
        grp[ng++] = s;
        for (pool_sess *g = P->head; s->weight && g && ng < 64; g = g->next)
          if (g != s && g->state == PS_SUSPENDED && g->p && on_devs(g, s)) grp[ng++] = g;
        bool ok = true;
        for (uint32_t i = 0; i < ng && ok; i++) {
          lm_err e;
          int r = grp[i]->pinned ? 0 : move_check(c, grp[i], &e);
          if (r < 0) {
            lm_warn("session %llu cannot resume on other devices (%s); it waits for its own",
                    (unsigned long long)grp[i]->id, e.msg);
            grp[i]->pinned = true; /* not tried again until its next suspension */
          }
          ok = r > 0;
        }
        uint32_t *nd = ok ? pick_devices(fl, nfree, s->devs, s->ndev) : NULL;
        bool moved = false;
        for (uint32_t i = 0; nd && i < ng; i++) moved |= resume_elsewhere(c, grp[i], nd);
        if (moved) take_devices(fl, &nfree, nd, s->ndev);
        free(nd);
      }
    }
  bool blocked = false;
  uint32_t pos = 0;
  char blocker[128] = "";
  for (uint32_t cls = 0; cls < P->nclasses; cls++) {
    for (pool_sess *s = P->head; s; s = s->next) {
      if (s->state != PS_QUEUED || s->cls != cls || !s->p) continue;
      const char *from;
      uint64_t qd = quota_of(P, s->user, Q_DEVICES, &from);
      user_now un = user_totals(P, s->user);
      if (qd && un.devices + s->asked > qd) { /* waits for its own user's sessions; blocks nobody */
        char qn[512];
        quota_name(P, s->user, Q_DEVICES, qd, from, qn, sizeof qn);
        snprintf(s->blocked_by, sizeof s->blocked_by, "%u devices held by the user's other sessions (%.100s)",
                 un.devices, qn);
        s->position = ++pos;
        continue;
      }
      pool_sess *grp = NULL; /* time sharing: a running group of as many devices to join */
      for (pool_sess *g = P->head; s->weight && g && !grp; g = g->next)
        if (g->state == PS_RUNNING && g->weight && g->ndev == s->asked && g->p) grp = g;
      if (!blocked && grp) {
        s->devs = malloc(s->asked * sizeof *s->devs);
        if (!s->devs) break;
        memcpy(s->devs, grp->devs, s->asked * sizeof *s->devs);
        s->ndev = s->asked;
        s->pass = grp->pass; /* from the group's present, neither ahead nor owed */
        for (pool_sess *g = P->head; g; g = g->next)
          if (same_group(g, s) && g->pass < s->pass) s->pass = g->pass;
        s->state = PS_RUNNING;
        s->admitted_loop_ms = ctl_now_ms(c);
        s->admitted_unix_ms = unix_ms();
        s->position = 0;
        lm_info("session %llu (user %s, %s) admitted sharing the devices of session %llu (weight %u)",
                (unsigned long long)s->id, user_label(s->user), P->classes[s->cls].name, (unsigned long long)grp->id,
                s->weight);
        send_hello_reply(c, s);
        *again = true; /* members of a lower class than its own are preempted (preempt_in_groups) */
        continue;
      }
      if (!blocked && s->asked <= nfree) {
        s->devs = malloc(s->asked * sizeof *s->devs);
        if (!s->devs) break;
        memcpy(s->devs, fl, s->asked * sizeof *fl);
        memmove(fl, fl + s->asked, (nfree - s->asked) * sizeof *fl);
        nfree -= s->asked;
        s->ndev = s->asked;
        s->state = PS_RUNNING;
        s->admitted_loop_ms = ctl_now_ms(c);
        s->admitted_unix_ms = unix_ms();
        s->position = 0;
        char ids[128];
        size_t k = 0;
        for (uint32_t i = 0; i < s->ndev && k < sizeof ids - 12; i++)
          k += (size_t)snprintf(ids + k, sizeof ids - k, "%s%u", i ? "," : "", s->devs[i]);
        lm_info("session %llu (user %s, %s) admitted on devices %s after %llu ms in the queue",
                (unsigned long long)s->id, user_label(s->user), P->classes[s->cls].name, ids,
                (unsigned long long)(s->admitted_loop_ms - s->opened_loop_ms));
        send_hello_reply(c, s);
        continue;
      }
      if (!blocked) {
        blocked = true;
        snprintf(blocker, sizeof blocker, "session %llu (%s)", (unsigned long long)s->id, P->classes[s->cls].name);
        if (preempt_for(c, s, nfree)) {
          snprintf(s->blocked_by, sizeof s->blocked_by, "waiting for lower-class sessions to be suspended");
          for (pool_sess *v = P->head; v; v = v->next) /* those with nothing in flight: at once */
            *again |= v->state == PS_SUSPENDING && !v->active;
        } else {
          snprintf(s->blocked_by, sizeof s->blocked_by, "waiting for %u devices to be free (%u of %u are)", s->asked,
                   nfree, total);
        }
      } else {
        snprintf(s->blocked_by, sizeof s->blocked_by, "behind %.100s in the queue", blocker);
      }
      s->position = ++pos;
    }
  }
  free(fl);
  uint64_t now = ctl_now_ms(c);
  for (pool_sess *s = P->head; s; s = s->next)
    if (s->state == PS_QUEUED && s->p && (s->position != s->last_position || now - s->last_update_ms >= POOL_UPDATE_MS))
      send_queue_update(c, s, pos, nfree);
}

/* Its held requests run, in order, as if they had just arrived; their number. */
static uint32_t replay_held(pool_sess *s) {
  held_frame *h = s->held;
  uint32_t n = 0;
  s->held = NULL;
  s->held_tail = &s->held;
  s->held_bytes = 0;
  peer *p = s->p;
  while (h) {
    held_frame *next = h->next;
    if (s->p == p && s->state == PS_RUNNING && lm_conn_is_open(p->conn)) {
      lm_frame f = {.h = h->h, .meta = h->meta, .payload = h->payload, .payload_external = true};
      ctl_replay_frame(p, &f);
      n++;
    }
    free(h->meta);
    free(h->payload);
    free(h);
    h = next;
  }
  return n;
}

/* Back on its devices: its held requests run, in order, as if they had just arrived. */
static void resume(ctl *c, pool_sess *s) {
  uint64_t now = ctl_now_ms(c);
  s->state = PS_RUNNING;
  s->jdirty = true;
  s->stash_sent = false;
  bool found = false; /* rejoining a group that ran on: from its present, neither ahead nor owed */
  for (pool_sess *g = c->pool->head; s->weight && g; g = g->next)
    if (g != s && same_group(g, s) && (!found || g->pass < s->pass)) s->pass = g->pass, found = true;
  send_stash(c, s, true); /* before the held requests: each worker moves the shards back first */
  s->suspended_ms += now - s->suspended_at;
  s->admitted_loop_ms = now; /* held_device_seconds count again from here */
  uint32_t n = replay_held(s);
  lm_info("session %llu (user %s) resumed on its devices after %llu ms; %u held requests replayed",
          (unsigned long long)s->id, user_label(s->user), (unsigned long long)(now - s->suspended_at), n);
}

/* Stride scheduling over a sharing group: while the group has no launch in flight, the member
 * with the least virtual time (pass) and a held LAUNCH gets it sent; its pass grows by
 * 1/weight. Frames held behind a LAUNCH are served up to its next LAUNCH. */
static void share_dispatch(ctl *c, pool_sess *any) {
  ctl_pool *P = c->pool;
  static bool busy;
  if (busy) return; /* a replayed launch that completes at once comes back here */
  busy = true;
  for (int guard = 0; guard < 1024 && group_inflight(P, any) == 0; guard++) {
    pool_sess *best = NULL;
    for (pool_sess *g = P->head; g; g = g->next)
      if (g->state == PS_RUNNING && (g == any || on_devs(g, any)) && g->held && g->p && (!best || g->pass < best->pass))
        best = g;
    if (!best) break;
    peer *p = best->p;
    best->replaying = true;
    bool launched = false;
    while (best->held && best->p == p && best->state == PS_RUNNING) {
      held_frame *h = best->held;
      if (h->h.type == LM_MSG_LAUNCH && launched) break; /* the next one waits its turn */
      best->held = h->next;
      if (!best->held) best->held_tail = &best->held;
      best->held_bytes -= h->h.meta_len + h->h.payload_len;
      if (h->h.type == LM_MSG_LAUNCH) {
        launched = true;
        best->pass += 1.0 / best->weight;
      }
      lm_frame f = {.h = h->h, .meta = h->meta, .payload = h->payload, .payload_external = true};
      if (lm_conn_is_open(p->conn)) ctl_replay_frame(p, &f);
      free(h->meta);
      free(h->payload);
      free(h);
    }
    best->replaying = false;
  }
  busy = false;
}

int ctl_pool_hold(peer *p, const lm_frame *f) {
  pool_sess *s = p->pool;
  unsigned t = f->h.type;
  if (s && s->weight && s->state == PS_RUNNING && !s->replaying) {
    /* time sharing: a LAUNCH waits while the group runs one; what follows it waits behind it */
    bool hold = s->held != NULL;
    if (!hold && t == LM_MSG_LAUNCH) {
      if (group_inflight(p->ctl->pool, s) == 0) {
        s->pass += 1.0 / s->weight;
        return 0; /* the devices are idle: at once */
      }
      hold = true;
    }
    if (!hold) return 0;
  } else if (!s || (s->state != PS_SUSPENDING && s->state != PS_SUSPENDED && s->state != PS_RESUMING)) {
    return 0;
  }
  if (t == LM_MSG_PING || t == LM_MSG_LIST_DEVICES || t == LM_MSG_CLUSTER_STATUS || t == LM_MSG_POOL_STATUS) return 0;
  if (s->held_bytes + f->h.meta_len + f->h.payload_len > POOL_HELD_MAX_BYTES) {
    lm_conn_send_errorf(p->conn, f->h.request_id, LOOM_BUSY,
                        "the session is suspended (preempted by a higher priority class) and holds %llu bytes of "
                        "requests already; %s is refused",
                        (unsigned long long)s->held_bytes, lm_msg_name(t));
    return 1;
  }
  held_frame *h = calloc(1, sizeof *h);
  if (h) {
    h->h = f->h;
    h->meta = malloc(f->h.meta_len ? f->h.meta_len : 1);
    h->payload = f->h.payload_len && f->payload ? malloc(f->h.payload_len) : NULL;
  }
  if (!h || !h->meta || (f->h.payload_len && f->payload && !h->payload)) {
    if (h) free(h->meta), free(h->payload);
    free(h);
    lm_conn_send_errorf(p->conn, f->h.request_id, LOOM_NO_MEMORY, "out of host memory holding a suspended session's request");
    return 1;
  }
  if (f->h.meta_len) memcpy(h->meta, f->meta, f->h.meta_len);
  if (h->payload) memcpy(h->payload, f->payload, f->h.payload_len);
  *s->held_tail = h;
  s->held_tail = &h->next;
  s->held_bytes += f->h.meta_len + f->h.payload_len;
  return 1;
}

int ctl_pool_hello(peer *p, const lm_frame *f, const Lmw__Hello *h, Lmw__HelloReply *r, lm_err *err) {
  ctl *c = p->ctl;
  ctl_pool *P = c->pool;
  int cls = (int)P->default_class;
  char cl[256];
  if (h->priority && h->priority[0]) {
    if (!lm_msg_name_ok(h->priority, POOL_CLASS_NAME_MAX))
      return lm_errf(err, LOOM_INVALID_ARGUMENT, "the priority class must be 1 to %d printable characters",
                     POOL_CLASS_NAME_MAX);
    cls = find_class(P, h->priority);
    if (cls < 0) {
      class_list(P, cl, sizeof cl);
      return lm_errf(err, LOOM_INVALID_ARGUMENT, "unknown priority class '%.40s' (the classes are %s)", h->priority, cl);
    }
  }
  const char *from;
  char qn[512];
  user_now un = user_totals(P, p->user);
  uint64_t q = quota_of(P, p->user, Q_SESSIONS, &from);
  if (q && un.sessions >= q) {
    quota_name(P, p->user, Q_SESSIONS, q, from, qn, sizeof qn);
    return lm_errf(err, LOOM_BUSY, "user %s already has %u open sessions: %s", user_label(p->user), un.sessions, qn);
  }
  uint32_t asked = h->pool_devices;
  bool kept = false; /* resumed after a restart, its devices kept for it: they need not be healthy yet (its
                        workers may come back after it) nor fit the quota again */
  for (const pool_sess *o = P->head; o && !kept && p->resumed; o = o->next)
    kept = o->restored && o->state == PS_DETACHED && o->id == p->session->id;
  if (asked && !kept) {
    uint32_t total;
    free_devices(c, NULL, &total);
    if (asked > total)
      return lm_errf(err, LOOM_INVALID_ARGUMENT, "the session asks for %u devices but the cluster has %u healthy devices",
                     asked, total);
    q = quota_of(P, p->user, Q_DEVICES, &from);
    if (q && asked > q) {
      quota_name(P, p->user, Q_DEVICES, q, from, qn, sizeof qn);
      return lm_errf(err, LOOM_BUSY, "the session asks for %u devices, more than the %s", asked, qn);
    }
  }
  pool_sess *s = calloc(1, sizeof *s);
  if (!s) return lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  for (pool_sess **pp = &P->head, *prev = NULL; *pp; prev = *pp, pp = &(*pp)->next) {
    pool_sess *o = *pp; /* a session resumed after a restart: its accounting goes on from the journal's */
    if (!o->restored || o->id != p->session->id || o->refs) continue;
    s->u = o->u;
    s->written = o->u;
    if (o->state == PS_DETACHED && o->asked == h->pool_devices) { /* and its devices, kept for it */
      s->devs = o->devs;
      s->ndev = o->ndev;
      o->devs = NULL;
      s->weight = o->weight;
      s->det_suspended = o->det_suspended;
      s->launch_limit_ms = o->launch_limit_ms;
      s->suspensions = o->det_suspended;
    }
    *pp = o->next;
    if (P->tail == o) P->tail = prev;
    if (o->state == PS_CLOSED) P->nclosed--;
    sess_free(P, o);
    break;
  }
  s->p = p;
  s->id = p->session->id;
  snprintf(s->user, sizeof s->user, "%s", p->user);
  snprintf(s->name, sizeof s->name, "%s", p->session->name);
  s->cls = (uint32_t)cls;
  s->asked = asked;
  s->opened_loop_ms = ctl_now_ms(c);
  s->opened_unix_ms = unix_ms();
  if (!s->ndev) s->weight = asked ? h->share_weight : 0;
  s->refs = 1;
  s->held_tail = &s->held;
  uint32_t cl_lim = P->classes[cls].launch_limit_ms;
  if (!s->ndev)
    s->launch_limit_ms = !cl_lim ? h->launch_limit_ms : !h->launch_limit_ms || h->launch_limit_ms > cl_lim
                                                            ? cl_lim : h->launch_limit_ms;
  if (P->tail) P->tail->next = s;
  else P->head = s;
  P->tail = s;
  p->pool = s;
  if (!asked) {
    s->state = PS_SHARED;
    s->admitted_loop_ms = s->opened_loop_ms;
    s->admitted_unix_ms = s->opened_unix_ms;
    r->priority = P->classes[cls].name;
    return 1;
  }
  if (s->ndev) { /* resumed after a restart: on the devices it held, or suspended as it was */
    s->state = s->det_suspended ? PS_SUSPENDED : PS_RUNNING;
    s->admitted_loop_ms = s->suspended_at = ctl_now_ms(c);
    s->admitted_unix_ms = unix_ms();
    s->stash_sent = s->det_suspended;
    s->jdirty = true;
    r->n_pool_device_ids = s->ndev;
    r->pool_device_ids = s->devs;
    r->priority = P->classes[cls].name;
    lm_info("session %llu (user %s, %s) resumed after the restart %s devices", (unsigned long long)s->id,
            user_label(s->user), P->classes[cls].name, s->det_suspended ? "suspended, off its" : "on its");
    if (s->det_suspended) pool_admit(c);
    return 1;
  }
  s->state = PS_QUEUED;
  s->hello_rid = f->h.request_id;
  if (r->resume_secret.len == sizeof s->resume_secret) { /* for the reply it gets once admitted */
    memcpy(s->resume_secret, r->resume_secret.data, sizeof s->resume_secret);
    s->has_secret = true;
  }
  s->last_position = UINT32_MAX; /* the first pass tells it where it stands */
  pool_admit(c);
  if (s->state == PS_QUEUED)
    lm_info("session %llu (user %s, %s) waits for %u devices: %s", (unsigned long long)s->id, user_label(s->user),
            P->classes[cls].name, asked, s->blocked_by);
  return 0;
}

bool ctl_pool_queued(const peer *p) { return p->pool && p->pool->state == PS_QUEUED; }

static void sess_unref(ctl_pool *P, pool_sess *s) {
  if (!s || --s->refs > 0 || s->state != PS_CLOSED) return;
  /* kept for the record; the oldest closed ones go once there are too many */
  while (P->nclosed > POOL_KEEP_CLOSED) {
    pool_sess *prev = NULL, *o = P->head;
    while (o && !(o->state == PS_CLOSED && o->refs == 0)) prev = o, o = o->next;
    if (!o) break;
    if (prev) prev->next = o->next;
    else P->head = o->next;
    if (P->tail == o) P->tail = prev;
    P->nclosed--;
    ctl_j_usage_del(P->ctl, o->id);
    sess_free(P, o);
  }
}

void ctl_pool_client_gone(ctl *c, peer *p) {
  pool_sess *s = p->pool;
  if (!s) return;
  p->pool = NULL;
  s->p = NULL;
  uint64_t now = ctl_now_ms(c);
  if (s->state == PS_RUNNING || s->state == PS_RESUMING)
    s->u.held_dev_s += (double)s->ndev * (double)(now - s->admitted_loop_ms) / 1000.0;
  mv_drop(c, s);
  if (s->state == PS_SUSPENDING || s->state == PS_SUSPENDED) s->suspended_ms += now - s->suspended_at;
  if (s->state == PS_QUEUED) s->position = 0;
  held_free(s);
  s->state = PS_CLOSED;
  s->closed_unix_ms = unix_ms();
  c->pool->nclosed++;
  ctl_pool_journal(c); /* its final accounting */
  sess_unref(c->pool, s);
  if (!c->stopping) pool_admit(c);
}

/* ---- device numbering ---- */

const uint32_t *ctl_pool_devices(const peer *p, uint32_t *n) {
  const pool_sess *s = p->pool;
  if (!s || !HAS_DEVS(s)) return *n = 0, NULL;
  *n = s->ndev;
  return s->devs;
}

static int map_in(const pool_sess *s, uint32_t *devs, size_t n, const char *what, lm_err *err) {
  for (size_t i = 0; i < n; i++) {
    if (devs[i] >= s->ndev)
      return lm_errf(err, LOOM_INVALID_ARGUMENT, "%s names device %u, but this session has devices 0..%u (it asked the pool for %u)",
                     what, devs[i], s->ndev - 1, s->ndev);
    devs[i] = s->devs[devs[i]];
  }
  return 0;
}

int ctl_pool_rewrite(peer *p, unsigned type, ProtobufCMessage *m, lm_err *err) {
  const pool_sess *s = p->pool;
  if (!s || !HAS_DEVS(s)) return 0;
  if (type == LM_MSG_ARRAY_CREATE) {
    Lmw__ArrayCreate *a = (Lmw__ArrayCreate *)m;
    if (a->sharding) return map_in(s, a->sharding->devices, a->sharding->n_devices, "the sharding", err);
  } else if (type == LM_MSG_COMPILE) {
    Lmw__Compile *cm = (Lmw__Compile *)m;
    return map_in(s, cm->devices, cm->n_devices, "the device list", err);
  } else if (type == LM_MSG_CHECKPOINT) {
    Lmw__Checkpoint *ck = (Lmw__Checkpoint *)m;
    for (size_t i = 0; i < ck->n_entries; i++)
      if (ck->entries[i]->sharding)
        LM_TRY(map_in(s, ck->entries[i]->sharding->devices, ck->entries[i]->sharding->n_devices, "the sharding", err));
  }
  return 0;
}

void ctl_pool_map_out(const peer *p, uint32_t *devs, size_t n) {
  const pool_sess *s = p ? p->pool : NULL;
  if (!s || !HAS_DEVS(s)) return;
  for (size_t i = 0; i < n; i++)
    for (uint32_t k = 0; k < s->ndev; k++)
      if (s->devs[k] == devs[i]) {
        devs[i] = k;
        break;
      }
}

/* ---- accounting ---- */

/* Bytes of an array's shards: its largest (first) shard times its devices. */
static uint64_t sharded_bytes(const lm_sharding *sh, int rank, const int64_t *dims, lm_dtype dt, uint32_t ndev) {
  int64_t off[LM_SHARD_MAX_RANK], sd[LM_SHARD_MAX_RANK];
  lm_sharding_shard(sh, rank, dims, 0, off, sd);
  uint64_t numel, b;
  if (lm_dims_numel(rank, sd, &numel) < 0 || __builtin_mul_overflow(numel, (uint64_t)lm_dtype_size(dt), &b) ||
      __builtin_mul_overflow(b, (uint64_t)ndev, &b))
    return UINT64_MAX;
  return b;
}

static uint64_t array_bytes(const c_array *a) {
  if (!a->sh.ndev) return 0;
  return sharded_bytes(&a->sh, a->rank, a->dims, a->dtype, a->sh.ndev);
}

static int check_memory(const ctl_pool *P, const pool_sess *s, uint64_t more, const char *what, lm_err *err) {
  const char *from;
  uint64_t q = quota_of(P, s->user, Q_SESSION_MEMORY, &from); /* each session's own share */
  if (q && (more > q || s->memory > q - more)) {
    char qn[512], have[32], want[32];
    quota_name(P, s->user, Q_SESSION_MEMORY, q, from, qn, sizeof qn);
    fmt_bytes(s->memory, have, sizeof have);
    fmt_bytes(more, want, sizeof want);
    return lm_errf(err, LOOM_DEVICE_OUT_OF_MEMORY, "%s needs %s of device memory; session %llu holds %s already: %s",
                   what, want, (unsigned long long)s->id, have, qn);
  }
  q = quota_of(P, s->user, Q_MEMORY, &from);
  if (!q) return 0;
  user_now un = user_totals(P, s->user);
  if (more <= q && un.memory <= q - more) return 0;
  char qn[512], have[32], want[32];
  quota_name(P, s->user, Q_MEMORY, q, from, qn, sizeof qn);
  fmt_bytes(un.memory, have, sizeof have);
  fmt_bytes(more, want, sizeof want);
  return lm_errf(err, LOOM_DEVICE_OUT_OF_MEMORY, "%s needs %s of device memory; user %s holds %s already: %s", what,
                 want, user_label(s->user), have, qn);
}

int ctl_pool_array_add(peer *p, c_array *a, bool check, lm_err *err) {
  pool_sess *s = p->pool;
  if (!s) return 0;
  uint64_t b = array_bytes(a);
  if (check) {
    char what[64];
    snprintf(what, sizeof what, "array %llu", (unsigned long long)a->id);
    LM_TRY(check_memory(p->ctl->pool, s, b, what, err));
    s->u.bytes_in += b;
  }
  a->pool = s;
  a->pool_bytes = b;
  s->memory += b;
  s->refs++;
  return 0;
}

/* The pool of the controller an array belongs to is not reachable from the array: closed
 * sessions are only freed by sess_unref with the pool, so the last unref here just counts. */
void ctl_pool_array_gone(c_array *a) {
  pool_sess *s = a->pool;
  if (!s) return;
  a->pool = NULL;
  s->memory -= a->pool_bytes < s->memory ? a->pool_bytes : s->memory;
  if (s->refs) s->refs--;
}

void ctl_pool_array_located(peer *p, const c_array *a) {
  if (p->pool) p->pool->u.bytes_out += array_bytes(a);
}

int ctl_pool_launch_check(peer *p, const c_program *prog, lm_err *err) {
  pool_sess *s = p->pool;
  if (!s) return 0;
  ctl_pool *P = p->ctl->pool;
  const char *from;
  uint64_t q = quota_of(P, s->user, Q_LAUNCHES, &from);
  if (q) {
    user_now un = user_totals(P, s->user);
    if (un.launches >= q) {
      char qn[512];
      quota_name(P, s->user, Q_LAUNCHES, q, from, qn, sizeof qn);
      return lm_errf(err, LOOM_BUSY, "user %s has %u launches queued or running: %s", user_label(s->user), un.launches,
                     qn);
    }
  }
  uint64_t out = 0;
  const lm_spmd_info *info = prog->info;
  for (uint32_t j = 0; j < info->noutputs; j++) {
    const lm_spmd_value *v = &info->outputs[j];
    uint64_t b = sharded_bytes(&v->sh, v->global.rank, v->global.dims, (lm_dtype)v->global.dtype, info->nproc);
    out = b > UINT64_MAX - out ? UINT64_MAX : out + b;
  }
  return check_memory(P, s, out, "the launch's outputs", err);
}

void ctl_pool_launch_start(peer *p, c_launch *l) {
  l->started_ns = uv_hrtime();
  pool_sess *s = p->pool;
  if (!s) return;
  l->pool = s;
  s->refs++;
  s->active++;
  s->u.launches++;
}

void ctl_pool_launch_end(ctl *c, c_launch *l) {
  pool_sess *s = l->pool;
  if (!s) return;
  l->pool = NULL;
  s->u.dev_s += (double)l->prog->ndev * (double)(uv_hrtime() - l->started_ns) / 1e9;
  if (l->failed) s->u.failed++;
  if (s->active) s->active--;
  if (s->state == PS_SUSPENDING && !s->active && c->pool && !c->stopping) pool_admit(c); /* its devices are free now */
  if (s->weight && c->pool && !c->stopping) share_dispatch(c, s); /* the group's next */
  if (c->pool) sess_unref(c->pool, s);
  else if (s->refs) s->refs--;
}

/* ---- the tick: admission, progress, watchdog ---- */

void ctl_pool_tick(ctl *c) {
  if (!c->pool) return;
  for (pool_sess *s = c->pool->head; s; s = s->next) /* restored, but its session was not (or is gone) */
    if (s->state == PS_DETACHED && !ctl_journal_detached(c, s->id)) {
      ctl_pool_detached_closed(c, s->id);
      break; /* the rest at the next tick */
    }
  pool_admit(c);
  uint64_t now = uv_hrtime();
  for (c_launch *l = c->active; l; l = l->next) {
    pool_sess *s = l->pool;
    if (!s || l->failed || !s->launch_limit_ms || (now - l->started_ns) / 1000000 <= s->launch_limit_ms) continue;
    char full[LM_ERR_MSG_MAX], reason[160];
    snprintf(full, sizeof full,
             "launch %llu ran for %llu ms, past its session's limit of %u ms (class %s): the watchdog cancelled it "
             "and freed its devices",
             (unsigned long long)l->seq, (unsigned long long)((now - l->started_ns) / 1000000), s->launch_limit_ms,
             c->pool->classes[s->cls].name);
    snprintf(reason, sizeof reason, "ran past its session's limit of %u ms (the watchdog)", s->launch_limit_ms);
    lm_warn("session %llu: %s", (unsigned long long)s->id, full);
    s->u.timed_out++;
    ctl_launch_cut(c, l, LOOM_TIMEOUT, full, reason);
  }
}

/* ---- POOL_STATUS ---- */

static void usage_to_wire(const pool_usage *u, double held_extra, Lmw__PoolUsage *w) {
  lmw__pool_usage__init(w);
  w->device_seconds = u->dev_s;
  w->held_device_seconds = u->held_dev_s + held_extra;
  w->launches = u->launches;
  w->launches_failed = u->failed;
  w->launches_timed_out = u->timed_out;
  w->bytes_in = u->bytes_in;
  w->bytes_out = u->bytes_out;
}

static void usage_add(pool_usage *a, const pool_usage *b, double held_extra) {
  a->dev_s += b->dev_s;
  a->held_dev_s += b->held_dev_s + held_extra;
  a->launches += b->launches;
  a->failed += b->failed;
  a->timed_out += b->timed_out;
  a->bytes_in += b->bytes_in;
  a->bytes_out += b->bytes_out;
}

void ctl_pool_on_status(peer *p, const lm_frame *f, const Lmw__PoolStatus *m) {
  ctl *c = p->ctl;
  ctl_pool *P = c->pool;
  uint64_t now = ctl_now_ms(c);
  size_t n = 0;
  for (pool_sess *s = P->head; s; s = s->next) n++;
  Lmw__PoolSession *ss = calloc(n ? n : 1, sizeof *ss);
  Lmw__PoolSession **sp = calloc(n ? n : 1, sizeof *sp);
  Lmw__PoolUsage *su = calloc(n ? n : 1, sizeof *su);
  Lmw__PoolUser *us = calloc(n ? n : 1, sizeof *us);
  Lmw__PoolUser **up = calloc(n ? n : 1, sizeof *up);
  Lmw__PoolUsage *uu = calloc(n ? n : 1, sizeof *uu);
  pool_usage *acc = calloc(n ? n : 1, sizeof *acc);
  Lmw__PoolClass cls[POOL_MAX_CLASSES], *cp[POOL_MAX_CLASSES];
  if (!ss || !sp || !su || !us || !up || !uu || !acc) {
    free(ss), free(sp), free(su), free(us), free(up), free(uu), free(acc);
    ctl_reply_error(p, f->h.request_id, LOOM_NO_MEMORY, "out of host memory");
    return;
  }
  size_t k = 0, nu = 0;
  /* queued first, in their order; then the others in arrival order */
  for (int pass = 0; pass < 2; pass++) {
    uint32_t want = 1;
    for (;;) {
      pool_sess *s = P->head;
      if (pass == 0) {
        while (s && !(s->state == PS_QUEUED && s->p && s->position == want)) s = s->next;
        if (!s) break;
        want++;
      }
      for (; s; s = s->next) {
        if (pass == 1 && s->state == PS_QUEUED && s->p) continue;
        if (s->state == PS_CLOSED && m->since_unix_ms && s->closed_unix_ms < m->since_unix_ms) continue;
        double held = s->state == PS_RUNNING || s->state == PS_RESUMING ? (double)s->ndev * (double)(now - s->admitted_loop_ms) / 1000.0 : 0;
        Lmw__PoolSession *o = &ss[k];
        lmw__pool_session__init(o);
        o->id = s->id;
        o->user = s->user;
        o->name = s->name;
        o->priority = P->classes[s->cls].name;
        o->state = (char *)g_state_names[s->state];
        o->devices_asked = s->asked;
        o->n_device_ids = s->ndev;
        o->device_ids = s->devs;
        o->position = s->state == PS_QUEUED ? s->position : 0;
        o->blocked_by = s->state == PS_QUEUED ? s->blocked_by : "";
        o->suspensions = s->suspensions;
        o->share_weight = s->weight;
        o->moves = s->moves;
        o->suspended_ms = s->suspended_ms + (s->state == PS_SUSPENDING || s->state == PS_SUSPENDED ? now - s->suspended_at : 0);
        o->opened_unix_ms = s->opened_unix_ms;
        o->admitted_unix_ms = s->admitted_unix_ms;
        o->closed_unix_ms = s->closed_unix_ms;
        o->launch_limit_ms = s->launch_limit_ms;
        o->launches_active = s->active;
        usage_to_wire(&s->u, held, &su[k]);
        o->usage = &su[k];
        sp[k] = o;
        k++;
        size_t ui = 0;
        while (ui < nu && strcmp(us[ui].user, s->user)) ui++;
        if (ui == nu) {
          lmw__pool_user__init(&us[nu]);
          us[nu].user = s->user;
          user_now t = user_totals(P, s->user);
          us[nu].sessions = t.sessions;
          us[nu].devices = t.devices;
          us[nu].memory = t.memory;
          up[nu] = &us[nu];
          nu++;
        }
        usage_add(&acc[ui], &s->u, held);
        if (pass == 0) break;
      }
      if (pass == 1) break;
    }
  }
  for (size_t i = 0; i < nu; i++) {
    usage_to_wire(&acc[i], 0, &uu[i]);
    us[i].usage = &uu[i];
  }
  for (uint32_t i = 0; i < P->nclasses; i++) {
    lmw__pool_class__init(&cls[i]);
    cls[i].name = P->classes[i].name;
    cls[i].rank = i;
    cls[i].launch_limit_ms = P->classes[i].launch_limit_ms;
    cp[i] = &cls[i];
  }
  uint32_t total, nfree = free_devices(c, NULL, &total);
  Lmw__PoolStatusReply r = LMW__POOL_STATUS_REPLY__INIT;
  r.total_devices = total;
  r.free_devices = nfree;
  r.n_classes = P->nclasses;
  r.classes = cp;
  r.n_sessions = k;
  r.sessions = sp;
  r.n_users = nu;
  r.users = up;
  r.config = P->path;
  ctl_reply(p, f, LM_MSG_POOL_STATUS_REPLY, &r.base);
  free(ss), free(sp), free(su), free(us), free(up), free(uu), free(acc);
}

/* ---- accounting across restarts (the journal, ctl_journal.c) ---- */

void ctl_pool_journal(ctl *c) {
  ctl_pool *P = c->pool;
  if (!P || !c->jr || c->stopping) return;
  for (pool_sess *s = P->head; s; s = s->next) {
    bool closed = s->state == PS_CLOSED;
    if (!memcmp(&s->u, &s->written, sizeof s->u) && closed == s->written_closed && !s->jdirty) continue;
    Lmw__PoolUsage w;
    usage_to_wire(&s->u, 0, &w);
    bool held = HAS_DEVS(s) || s->state == PS_DETACHED; /* what a resume after a restart needs */
    ctl_j_pool jp = {.devs = s->devs, .ndev = held ? s->ndev : 0, .weight = s->weight,
                     .launch_limit_ms = s->launch_limit_ms,
                     .suspended = s->state == PS_SUSPENDED || (s->state == PS_DETACHED && s->det_suspended)};
    ctl_j_usage(c, s->id, s->user, s->name, P->classes[s->cls].name, s->opened_unix_ms,
                closed ? s->closed_unix_ms : 0, s->asked, &w, &jp);
    s->jdirty = false;
    s->written = s->u;
    s->written_closed = closed;
  }
}

void ctl_pool_restore_usage(ctl *c, uint64_t id, const char *user, const char *name, const char *priority,
                            uint64_t opened_unix_ms, uint64_t closed_unix_ms, uint32_t asked,
                            const Lmw__PoolUsage *w, const ctl_j_pool *jp) {
  ctl_pool *P = c->pool;
  pool_sess *s = P ? calloc(1, sizeof *s) : NULL;
  if (!s) return;
  if (!closed_unix_ms && asked && jp && jp->ndev == asked && (s->devs = malloc(asked * sizeof *s->devs))) {
    memcpy(s->devs, jp->devs, asked * sizeof *s->devs); /* open and holding devices: kept for its client */
    s->ndev = asked;
    s->weight = jp->weight;
    s->launch_limit_ms = jp->launch_limit_ms;
    s->det_suspended = jp->suspended;
  }
  s->id = id;
  snprintf(s->user, sizeof s->user, "%s", user ? user : "");
  snprintf(s->name, sizeof s->name, "%s", name ? name : "");
  for (uint32_t k = 0; k < P->nclasses; k++)
    if (priority && !strcmp(P->classes[k].name, priority)) s->cls = k;
  s->asked = asked;
  s->opened_unix_ms = opened_unix_ms;
  s->admitted_unix_ms = opened_unix_ms;
  s->closed_unix_ms = closed_unix_ms ? closed_unix_ms : unix_ms(); /* open at the restart: closed then,
                                                                      unless its client resumes it */
  s->restored = !closed_unix_ms;
  s->state = PS_CLOSED;
  s->held_tail = &s->held;
  if (w) {
    s->u.dev_s = w->device_seconds;
    s->u.held_dev_s = w->held_device_seconds;
    s->u.launches = w->launches;
    s->u.failed = w->launches_failed;
    s->u.timed_out = w->launches_timed_out;
    s->u.bytes_in = w->bytes_in;
    s->u.bytes_out = w->bytes_out;
  }
  s->written = s->u;
  s->written_closed = !s->restored;
  if (s->ndev) {
    s->state = PS_DETACHED;
    s->closed_unix_ms = 0;
    s->written_closed = false;
  }
  if (P->tail) P->tail->next = s;
  else P->head = s;
  P->tail = s;
  if (s->state == PS_CLOSED) P->nclosed++;
}

int ctl_pool_resume_check(ctl *c, uint64_t id, uint32_t asked, lm_err *err) {
  const pool_sess *o = NULL;
  for (const pool_sess *q = c->pool ? c->pool->head : NULL; q && !o; q = q->next)
    if (q->restored && q->id == id) o = q;
  if (o && o->state == PS_DETACHED && o->asked != asked)
    return lm_errf(err, LOOM_INVALID_ARGUMENT, "cannot resume session %llu: it held %u devices of the pool, the "
                   "resuming client asks for %u", (unsigned long long)id, o->asked, asked);
  if (asked && (!o || o->state != PS_DETACHED))
    return lm_errf(err, LOOM_UNSUPPORTED, "cannot resume session %llu: it held no devices of the pool at the "
                   "restart (it waited in the queue, which is not restored: docs/durability.md)",
                   (unsigned long long)id);
  return 0;
}

void ctl_pool_detached_closed(ctl *c, uint64_t id) {
  ctl_pool *P = c->pool;
  for (pool_sess *s = P ? P->head : NULL; s; s = s->next) {
    if (s->state != PS_DETACHED || s->id != id) continue;
    s->state = PS_CLOSED;
    s->closed_unix_ms = unix_ms();
    P->nclosed++;
    lm_info("session %llu was not resumed after the restart: the %u devices kept for it are free", (unsigned long long)id,
            s->ndev);
    ctl_pool_journal(c);
    if (!c->stopping) pool_admit(c);
    return;
  }
}
