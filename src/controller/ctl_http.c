/* The controller's HTTP port (`loom controller --http HOST:PORT`): Prometheus `/metrics`,
 * liveness `/healthz` and readiness `/readyz`, and POST /trace/start|stop (`loom trace`, which
 * present a client token when the controller has --tokens-file), served by libmicrohttpd on its
 * own threads.
 *
 * The HTTP thread never touches the controller's state. It asks the loop for a fresh snapshot
 * (uv_async_send) and waits for it at most LM_HTTP_WAIT_MS; the loop copies what it needs into
 * a new lm_met_snapshot (O(workers + devices)) and publishes it under a mutex. A loop that does
 * not answer in time is what /healthz reports; /metrics then serves the previous snapshot with
 * its age. Counters are relaxed atomics the loop bumps directly (ctl_metrics.h). */
#include <errno.h>
#include <microhttpd.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "common/log.h"
#include "controller/ctl.h"
#include "controller/ctl_metrics.h"

#define LM_HTTP_WAIT_MS 2000  /* how long a request waits for the loop's snapshot */

enum { JOB_TRACE_START = 1, JOB_TRACE_STOP = 2, JOB_AUTH = 3 };
#define LM_HTTP_COOKIE_S 3600  /* the dashboard's sign-in cookie lasts this long */
#define LM_HTTP_COOKIE "loom_dashboard"
#define LM_HTTP_TOKEN_MIN 16   /* --http-token-file: its token's length limits */
#define LM_HTTP_TOKEN_MAX 256

/* Something only the loop may do, asked by a request (it waits for `done`). */
typedef struct http_job {
  int kind;
  char token[LM_TOKEN_STR_LEN + 1];
  size_t token_len;
  bool has_token;
  bool done;                  /* under mu */
  int code;
  char msg[LM_ERR_MSG_MAX];
  ctl_trace_result *trace;    /* JOB_TRACE_STOP's result */
  struct http_job *next;
} http_job;

struct ctl_http {
  ctl *ctl;                   /* touched only on the loop thread */
  struct MHD_Daemon *mhd;
  lm_met_counters counters;
  uv_async_t async;           /* HTTP thread -> loop: build a snapshot */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool closed;                /* the loop stopped answering for good (shutting down) */
  uint64_t asked, built;      /* snapshot generations asked for and built (under mu) */
  lm_met_snapshot *snap;      /* the newest snapshot (under mu; one reference held here) */
  http_job *jobs;             /* waiting for the loop (under mu) */
  lm_met_recent recent[LM_MET_RECENT]; /* loop thread only: a ring of finished launches */
  uint32_t nrecent, recent_next;
  char bound[LM_ADDR_MAX];
  bool auth;                  /* /metrics and the dashboard need a token (--tokens-file or --http-token-file) */
  bool client_tokens;         /* ... and client tokens are accepted (--tokens-file) */
  char scrape_token[LM_HTTP_TOKEN_MAX + 1]; /* --http-token-file's ("" without one) */
  size_t scrape_len;
  uint8_t cookie_key[32];     /* signs the dashboard's cookies (random per run) */
};

lm_met_counters *ctl_http_counters(ctl_http *h) { return h ? &h->counters : NULL; }
const char *ctl_http_address(const ctl_http *h) { return h ? h->bound : ""; }

/* ---- the loop side ---- */

void ctl_http_launch_done(ctl *c, const c_launch *l, lm_met_outcome how, uint64_t ns) {
  ctl_http *h = c->http;
  lm_met_launch_done(c->met, how, ns);
  lm_met_recent *r = &h->recent[h->recent_next];
  h->recent_next = (h->recent_next + 1) % LM_MET_RECENT;
  if (h->nrecent < LM_MET_RECENT) h->nrecent++;
  r->seq = l->seq;
  r->session = l->session;
  snprintf(r->program, sizeof r->program, "%s", l->prog && l->prog->name ? l->prog->name : "");
  r->ndev = l->prog ? l->prog->ndev : 0;
  r->dur_ns = ns;
  r->outcome = how;
  r->ended_ms = ctl_now_ms(c) - c->start_ms;
}

static char *dup_or_empty(const char *s) { return strdup(s ? s : ""); }

static int cmp_uptr(const void *a, const void *b) {
  uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
  return x < y ? -1 : x > y;
}

static lm_met_snapshot *build_snapshot(ctl *c) {
  uint32_t nw = lm_registry_worker_count(c->reg), nd = lm_registry_device_count(c->reg);
  lm_met_snapshot *s = lm_met_snapshot_new(nw, nd);
  if (!s) return NULL;
  uint64_t now = ctl_now_ms(c);
  s->taken_ms = lm_now_ms();
  s->uptime_ms = now - c->start_ms;
  s->sessions = c->nsessions;
  s->peers = c->npeers;
  for (c_program *p = c->programs; p; p = p->next) s->programs++;
  for (c_launch *l = c->active; l; l = l->next) s->launches_running++;
  ctl_http *h = c->http;
  for (uint32_t i = 0; i < h->nrecent; i++) /* newest first */
    s->recent[s->nrecent++] = h->recent[(h->recent_next + LM_MET_RECENT - 1 - i) % LM_MET_RECENT];
  /* launches running per session: the active launches' clients, sorted, counted by binary search */
  uintptr_t *owners = calloc(s->launches_running ? s->launches_running : 1, sizeof *owners);
  size_t nown = 0;
  for (c_launch *l = c->active; l && owners; l = l->next) owners[nown++] = (uintptr_t)l->client;
  if (owners) qsort(owners, nown, sizeof *owners, cmp_uptr);
  s->session_list = calloc(c->nsessions ? c->nsessions : 1, sizeof *s->session_list);
  for (peer *p = c->peers; p && s->session_list; p = p->next) {
    if (p->role != ROLE_CLIENT || !p->session || s->nsession_list == c->nsessions) continue;
    lm_met_session *o = &s->session_list[s->nsession_list++];
    o->id = p->session->id;
    snprintf(o->name, sizeof o->name, "%s", p->session->name);
    snprintf(o->peer, sizeof o->peer, "%s", p->session->peer);
    snprintf(o->user, sizeof o->user, "%s", p->user);
    o->age_ms = now - p->session->opened_ms;
    size_t lo = 0, hi = nown;
    while (lo < hi) { /* the first owner >= p */
      size_t mid = (lo + hi) / 2;
      if (owners[mid] < (uintptr_t)p) lo = mid + 1;
      else hi = mid;
    }
    while (lo < nown && owners[lo] == (uintptr_t)p) o->running++, lo++;
  }
  free(owners);
  for (uint32_t i = 0; i < nw; i++, s->nworkers++) {
    const lm_reg_worker *w = lm_registry_worker(c->reg, i);
    lm_met_worker *o = &s->workers[i];
    o->id = w->id;
    o->pid = w->pid;
    o->ndevices = w->ndevices;
    o->alive = w->state == LM_WORKER_ALIVE;
    o->since_heartbeat_ms = now >= w->last_heartbeat_ms ? now - w->last_heartbeat_ms : 0;
    o->transfers = w->transfers;
    o->collectives = w->collectives;
    o->host = dup_or_empty(w->host);
    o->slice = dup_or_empty(w->slice);
    o->problem = dup_or_empty(o->alive ? w->problem : w->reason);
    if (!o->host || !o->slice || !o->problem) {
      s->nworkers++;
      lm_met_snapshot_unref(s);
      return NULL;
    }
  }
  for (uint32_t i = 0; i < nd; i++, s->ndevices++) {
    const lm_reg_device *d = lm_registry_device(c->reg, i);
    lm_met_device *o = &s->devices[i];
    o->id = d->id;
    o->worker = d->worker;
    o->local_index = d->local_index;
    snprintf(o->kind, sizeof o->kind, "%s", d->kind);
    o->capacity = d->memory_capacity;
    o->used = d->memory_used;
    o->peak = d->memory_peak;
    o->healthy = lm_registry_device_healthy(c->reg, i);
  }
  return s;
}

static void run_job(ctl *c, http_job *j) {
  lm_err err;
  j->code = 0;
  if (c->cfg.tokens_file && !j->has_token) {
    j->code = lm_errf(&err, LOOM_PERMISSION, "this controller requires a client token: send it as "
                      "'Authorization: Bearer TOKEN' (loom trace does, from LOOM_TOKEN or the local cluster's)");
  } else if (ctl_check_token(c, j->token, j->token_len, &err) < 0) {
    j->code = err.code;
  } else if (j->kind == JOB_AUTH) {
    j->code = 0; /* the token is a valid client token */
  } else if (j->kind == JOB_TRACE_START) {
    j->code = ctl_trace_start(c, &err);
  } else {
    j->trace = ctl_trace_stop(c, &err);
    if (!j->trace) j->code = err.code;
  }
  if (j->code < 0) snprintf(j->msg, sizeof j->msg, "%s", err.msg);
}

static void on_async(uv_async_t *a) {
  ctl_http *h = a->data;
  pthread_mutex_lock(&h->mu);
  uint64_t gen = h->asked;
  http_job *jobs = h->jobs;
  h->jobs = NULL;
  pthread_mutex_unlock(&h->mu);
  for (http_job *j = jobs; j; j = j->next) run_job(h->ctl, j);
  if (jobs) {
    pthread_mutex_lock(&h->mu);
    for (http_job *j = jobs, *n; j; j = n) {
      n = j->next;
      j->done = true; /* j belongs to its request's thread from here */
    }
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
  }
  lm_met_snapshot *s = build_snapshot(h->ctl);
  pthread_mutex_lock(&h->mu);
  if (s) {
    lm_met_snapshot_unref(h->snap);
    h->snap = s;
  }
  h->built = gen; /* without memory the waiters get the old one rather than wait out the timeout */
  pthread_cond_broadcast(&h->cv);
  pthread_mutex_unlock(&h->mu);
}

/* ---- the HTTP thread ---- */

/* A snapshot for this request (a reference, or NULL when there has never been one); *fresh says
 * whether the loop built it for this request. */
static lm_met_snapshot *get_snapshot(ctl_http *h, bool *fresh) {
  pthread_mutex_lock(&h->mu);
  *fresh = false;
  if (!h->closed) {
    uint64_t want = ++h->asked;
    uv_async_send(&h->async);
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += LM_HTTP_WAIT_MS / 1000;
    until.tv_nsec += (long)(LM_HTTP_WAIT_MS % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
    while (!h->closed && h->built < want)
      if (pthread_cond_timedwait(&h->cv, &h->mu, &until) == ETIMEDOUT) break;
    *fresh = h->built >= want;
  }
  lm_met_snapshot *s = h->snap;
  if (s) lm_met_snapshot_ref(s);
  pthread_mutex_unlock(&h->mu);
  return s;
}

static enum MHD_Result respond(struct MHD_Connection *conn, unsigned status, const char *type, char *body,
                               size_t len) {
  struct MHD_Response *r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
  if (!r) {
    free(body);
    return MHD_NO;
  }
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
  MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
  enum MHD_Result rc = MHD_queue_response(conn, status, r);
  MHD_destroy_response(r);
  return rc;
}

static enum MHD_Result respond_text(struct MHD_Connection *conn, unsigned status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static enum MHD_Result respond_text(struct MHD_Connection *conn, unsigned status, const char *fmt, ...) {
  char text[1024];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  char *body = n < 0 ? NULL : strdup(text);
  if (!body) return MHD_NO;
  return respond(conn, status, "text/plain; charset=utf-8", body, strlen(body));
}

static enum MHD_Result serve_metrics(ctl_http *h, struct MHD_Connection *conn) {
  bool fresh;
  lm_met_snapshot *s = get_snapshot(h, &fresh);
  lm_met_buf b = {0};
  lm_met_render(&b, &h->counters, s, s ? lm_now_ms() - s->taken_ms : 0);
  lm_met_snapshot_unref(s);
  if (b.failed) {
    free(b.p);
    return respond_text(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of host memory rendering the metrics\n");
  }
  return respond(conn, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", b.p, b.len);
}

/* /readyz[?min_devices=N]: the loop answers, and (with N) at least N devices are healthy. */
static enum MHD_Result serve_probe(ctl_http *h, struct MHD_Connection *conn, bool ready) {
  bool fresh;
  lm_met_snapshot *s = get_snapshot(h, &fresh);
  enum MHD_Result rc;
  if (!fresh) {
    rc = respond_text(conn, MHD_HTTP_SERVICE_UNAVAILABLE, "%s\n",
                      h->closed ? "the controller is stopping"
                                : "the controller's event loop did not answer within 2 s");
  } else if (!ready) {
    rc = respond_text(conn, MHD_HTTP_OK, "ok\n");
  } else {
    const char *want = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "min_devices");
    char *end = NULL;
    unsigned long need = want ? strtoul(want, &end, 10) : 0;
    uint32_t healthy = 0;
    for (uint32_t i = 0; s && i < s->ndevices; i++) healthy += s->devices[i].healthy;
    if (want && (!*want || *end || need > LM_REG_MAX_DEVICES))
      rc = respond_text(conn, MHD_HTTP_BAD_REQUEST, "min_devices must be a number of devices up to %d\n",
                        LM_REG_MAX_DEVICES);
    else if (healthy < need)
      rc = respond_text(conn, MHD_HTTP_SERVICE_UNAVAILABLE, "not ready: %u of %lu devices healthy\n", healthy, need);
    else
      rc = respond_text(conn, MHD_HTTP_OK, "ready: %u devices healthy on %u workers\n", healthy, s ? s->nworkers : 0);
  }
  lm_met_snapshot_unref(s);
  return rc;
}

/* Runs j on the loop and waits for it (the loop answers quickly; at shutdown close answers). */
static void do_job(ctl_http *h, http_job *j) {
  pthread_mutex_lock(&h->mu);
  if (h->closed) {
    j->done = true;
    j->code = LOOM_CANCELLED;
    snprintf(j->msg, sizeof j->msg, "the controller is stopping");
  } else {
    j->next = h->jobs;
    h->jobs = j;
    uv_async_send(&h->async);
  }
  while (!j->done) pthread_cond_wait(&h->cv, &h->mu);
  pthread_mutex_unlock(&h->mu);
}

static unsigned http_status(int code) {
  switch (code) {
  case LOOM_PERMISSION: return MHD_HTTP_UNAUTHORIZED;
  case LOOM_BUSY:
  case LOOM_NOT_FOUND: return MHD_HTTP_CONFLICT;
  case LOOM_NO_MEMORY: return MHD_HTTP_INSUFFICIENT_STORAGE;
  default: return MHD_HTTP_SERVICE_UNAVAILABLE;
  }
}

static enum MHD_Result serve_trace(ctl_http *h, struct MHD_Connection *conn, int kind) {
  http_job j;
  memset(&j, 0, sizeof j);
  j.kind = kind;
  const char *auth = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
  if (auth) {
    if (strncmp(auth, "Bearer ", 7) || strlen(auth + 7) > LM_TOKEN_STR_LEN)
      return respond_text(conn, MHD_HTTP_UNAUTHORIZED, "the Authorization header must be 'Bearer TOKEN'\n");
    j.has_token = true;
    j.token_len = strlen(auth + 7);
    memcpy(j.token, auth + 7, j.token_len);
  }
  do_job(h, &j);
  lm_auth_wipe(j.token, sizeof j.token);
  if (j.code < 0) return respond_text(conn, http_status(j.code), "%s\n", j.msg);
  if (kind == JOB_TRACE_START) return respond_text(conn, MHD_HTTP_OK, "recording\n");
  char *json = ctl_trace_json(j.trace); /* heavy for long traces: on this thread, not the loop */
  ctl_trace_result_free(j.trace);
  if (!json) return respond_text(conn, MHD_HTTP_INSUFFICIENT_STORAGE, "out of host memory writing the trace\n");
  return respond(conn, MHD_HTTP_OK, "application/json", json, strlen(json));
}

/* The Authorization header's token: `Bearer TOKEN`, or HTTP Basic with the token as password (what
 * a browser sends for the dashboard after asking for it; the user name is ignored). Copies it to
 * out (NUL-terminated); returns its length, 0 if there is none, -1 if malformed or too long. */
static int credential(struct MHD_Connection *conn, char *out, size_t cap) {
  const char *auth = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
  if (!auth) return 0;
  if (!strncmp(auth, "Bearer ", 7)) {
    size_t n = strlen(auth + 7);
    if (n == 0 || n >= cap) return -1;
    memcpy(out, auth + 7, n + 1);
    return (int)n;
  }
  if (strncmp(auth, "Basic ", 6)) return -1;
  char *pass = NULL;
  char *user = MHD_basic_auth_get_username_password(conn, &pass);
  int n = -1;
  if (user && pass && strlen(pass) > 0 && strlen(pass) < cap) {
    n = (int)strlen(pass);
    memcpy(out, pass, (size_t)n + 1);
  }
  if (pass) {
    lm_auth_wipe(pass, strlen(pass));
    MHD_free(pass);
  }
  if (user) MHD_free(user);
  return n;
}

static enum MHD_Result respond_401(struct MHD_Connection *conn, const char *why) {
  char text[512];
  snprintf(text, sizeof text,
           "%s: send 'Authorization: Bearer TOKEN' with a client token (loom token create) or the token of the "
           "controller's --http-token-file (a browser asks for it: any user name, the token as password)\n",
           why);
  char *body = strdup(text);
  if (!body) return MHD_NO;
  struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
  if (!r) {
    free(body);
    return MHD_NO;
  }
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; charset=utf-8");
  MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer realm=\"loom\"");
  MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Basic realm=\"loom\", charset=\"UTF-8\"");
  enum MHD_Result rc = MHD_queue_response(conn, MHD_HTTP_UNAUTHORIZED, r);
  MHD_destroy_response(r);
  return rc;
}

/* The dashboard's cookie: "EXPIRY.MAC", MAC = hex HMAC-SHA256(cookie_key, "loom-dashboard " EXPIRY)
 * with EXPIRY in Unix seconds. A browser that signed in with a token gets one with the page, so
 * the page's own requests (fetch /api/status) need no credentials of their own. */
static void cookie_mac(const ctl_http *h, const char *expiry, char out[65]) {
  char msg[64];
  int n = snprintf(msg, sizeof msg, "loom-dashboard %s", expiry);
  uint8_t mac[32];
  unsigned len = 0;
  HMAC(EVP_sha256(), h->cookie_key, sizeof h->cookie_key, (const uint8_t *)msg, (size_t)n, mac, &len);
  for (unsigned i = 0; i < 32; i++) snprintf(out + 2 * i, 3, "%02x", mac[i]);
}

static bool cookie_ok(const ctl_http *h, struct MHD_Connection *conn) {
  const char *v = MHD_lookup_connection_value(conn, MHD_COOKIE_KIND, LM_HTTP_COOKIE);
  const char *dot = v ? strchr(v, '.') : NULL;
  if (!dot || dot - v > 20 || strlen(dot + 1) != 64) return false;
  char expiry[24], mac[65];
  memcpy(expiry, v, (size_t)(dot - v));
  expiry[dot - v] = 0;
  char *end;
  long long t = strtoll(expiry, &end, 10);
  if (*end || t < (long long)time(NULL)) return false;
  cookie_mac(h, expiry, mac);
  return lm_auth_equal(mac, dot + 1, 64);
}

/* Whether the request may read /metrics or the dashboard; when not, *why says so. The dashboard
 * (dash) also takes its cookie. */
static bool authorized(ctl_http *h, struct MHD_Connection *conn, bool dash, const char **why) {
  if (!h->auth) return true;
  if (dash && cookie_ok(h, conn)) return true;
  char tok[LM_HTTP_TOKEN_MAX + 1];
  int n = credential(conn, tok, sizeof tok);
  bool ok = false;
  *why = n == 0 ? "this controller requires authentication" : "the token is not accepted";
  if (n < 0) *why = "the Authorization header must be 'Bearer TOKEN' or Basic with the token as password";
  if (n > 0 && h->scrape_len) ok = (size_t)n == h->scrape_len && lm_auth_equal(tok, h->scrape_token, (size_t)n);
  if (n > 0 && !ok && h->client_tokens && (size_t)n <= LM_TOKEN_STR_LEN) {
    http_job j;
    memset(&j, 0, sizeof j);
    j.kind = JOB_AUTH;
    j.has_token = true;
    j.token_len = (size_t)n;
    memcpy(j.token, tok, (size_t)n);
    do_job(h, &j);
    lm_auth_wipe(j.token, sizeof j.token);
    ok = j.code == 0;
  }
  lm_auth_wipe(tok, sizeof tok);
  return ok;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **state) {
  (void)version, (void)upload;
  ctl_http *h = cls;
  static int started, had_body;
  if (!*state) { /* the headers: answer once the whole request (and any body) is in */
    *state = &started;
    return MHD_YES;
  }
  if (*upload_size) { /* no request here takes a body: read and drop it */
    *upload_size = 0;
    *state = &had_body;
    return MHD_YES;
  }
  bool post = !strcmp(method, MHD_HTTP_METHOD_POST);
  bool trace = post && (!strcmp(url, "/trace/start") || !strcmp(url, "/trace/stop"));
  if (!trace && strcmp(method, MHD_HTTP_METHOD_GET) && strcmp(method, MHD_HTTP_METHOD_HEAD))
    return respond_text(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET and HEAD are served here (and POST /trace/...)\n");
  if (*state == &had_body) return respond_text(conn, MHD_HTTP_BAD_REQUEST, "requests here take no body\n");
  if (trace) return serve_trace(h, conn, strcmp(url, "/trace/start") ? JOB_TRACE_STOP : JOB_TRACE_START);
  /* the probes stay open (kubelets and load balancers send no token); they show no state */
  if (!strcmp(url, "/healthz")) return serve_probe(h, conn, false);
  if (!strcmp(url, "/readyz")) return serve_probe(h, conn, true);
  const char *why;
  bool dash = !strcmp(url, "/") || !strcmp(url, "/api/status");
  if (!authorized(h, conn, dash, &why)) return respond_401(conn, why);
  if (!strcmp(url, "/metrics")) return serve_metrics(h, conn);
  if (!strcmp(url, "/")) {
    char *page = strdup(lm_dashboard_html);
    if (!page) return MHD_NO;
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(page), page, MHD_RESPMEM_MUST_FREE);
    if (!r) {
      free(page);
      return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/html; charset=utf-8");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    if (h->auth) { /* signed in: the page's requests carry this cookie for the next hour */
      char expiry[24], mac[65], cookie[192];
      snprintf(expiry, sizeof expiry, "%lld", (long long)time(NULL) + LM_HTTP_COOKIE_S);
      cookie_mac(h, expiry, mac);
      snprintf(cookie, sizeof cookie, LM_HTTP_COOKIE "=%s.%s; Path=/; Max-Age=%d; HttpOnly; SameSite=Strict", expiry,
               mac, LM_HTTP_COOKIE_S);
      MHD_add_response_header(r, MHD_HTTP_HEADER_SET_COOKIE, cookie);
    }
    enum MHD_Result rc = MHD_queue_response(conn, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return rc;
  }
  if (!strcmp(url, "/api/status")) {
    bool fresh;
    lm_met_snapshot *s = get_snapshot(h, &fresh);
    char *json = lm_met_status_json(&h->counters, s, s ? lm_now_ms() - s->taken_ms : 0);
    lm_met_snapshot_unref(s);
    if (!json) return respond_text(conn, MHD_HTTP_INSUFFICIENT_STORAGE, "out of host memory\n");
    return respond(conn, MHD_HTTP_OK, "application/json", json, strlen(json));
  }
  return respond_text(conn, MHD_HTTP_NOT_FOUND, "no such page: %s\n", url);
}

/* ---- start and stop (loop thread) ---- */

/* --http-token-file: its first line, LM_HTTP_TOKEN_MIN..MAX printable characters. */
static int read_scrape_token(ctl_http *h, const char *path, lm_err *err) {
  FILE *f = fopen(path, "r");
  if (!f) return lm_errf(err, LOOM_IO, "cannot read the HTTP token file %s: %s", path, strerror(errno));
  char line[LM_HTTP_TOKEN_MAX + 8];
  bool got = fgets(line, sizeof line, f) != NULL;
  fclose(f);
  size_t n = got ? strcspn(line, "\r\n") : 0;
  while (n && (line[n - 1] == ' ' || line[n - 1] == '\t')) n--;
  bool printable = true;
  for (size_t i = 0; i < n; i++) printable &= line[i] > ' ' && line[i] < 127;
  if (n < LM_HTTP_TOKEN_MIN || n > LM_HTTP_TOKEN_MAX || !printable) {
    lm_auth_wipe(line, sizeof line);
    return lm_errf(err, LOOM_INVALID_ARGUMENT,
                   "the HTTP token file %s must hold one token of %d to %d printable characters (no spaces) on its "
                   "first line", path, LM_HTTP_TOKEN_MIN, LM_HTTP_TOKEN_MAX);
  }
  memcpy(h->scrape_token, line, n);
  h->scrape_token[n] = 0;
  h->scrape_len = n;
  lm_auth_wipe(line, sizeof line);
  return 0;
}

int ctl_http_start(ctl *c, lm_err *err) {
  const char *addr = c->cfg.http_listen;
  struct sockaddr_storage ss;
  socklen_t sl;
  LM_TRY(lm_addr_resolve(addr, &ss, &sl, err));
  ctl_http *h = calloc(1, sizeof *h);
  if (!h) return lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  h->ctl = c;
  h->client_tokens = c->cfg.tokens_file != NULL;
  h->auth = h->client_tokens || c->cfg.http_token_file;
  if (lm_auth_random(h->cookie_key, sizeof h->cookie_key, err) < 0) {
    free(h);
    return err->code;
  }
  if (c->cfg.http_token_file && read_scrape_token(h, c->cfg.http_token_file, err) < 0) {
    free(h);
    return err->code;
  }
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_mutex_init(&h->mu, NULL);
  pthread_cond_init(&h->cv, &ca);
  pthread_condattr_destroy(&ca);
  uv_async_init(&c->loop, &h->async, on_async);
  h->async.data = h;
  unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION;
  if (ss.ss_family == AF_INET6) flags |= MHD_USE_IPv6;
  h->mhd = MHD_start_daemon(flags, 0, NULL, NULL, on_request, h, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)64, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)10, MHD_OPTION_END);
  if (!h->mhd) {
    int e = errno;
    c->http = h; /* the async handle is closed with the loop's other handles */
    h->closed = true;
    return lm_errf(err, LOOM_IO, "cannot serve HTTP on %s: %s", addr, e ? strerror(e) : "libmicrohttpd refused");
  }
  const union MHD_DaemonInfo *di = MHD_get_daemon_info(h->mhd, MHD_DAEMON_INFO_BIND_PORT);
  char host[LM_ADDR_MAX];
  uint16_t port = 0;
  lm_addr_split(addr, host, sizeof host, &port, NULL);
  if (di && di->port) port = di->port;
  snprintf(h->bound, sizeof h->bound, strchr(host, ':') ? "[%s]:%u" : "%s:%u", host, (unsigned)port);
  c->http = h;
  return 0;
}

void ctl_http_close(ctl *c) {
  ctl_http *h = c->http;
  if (!h) return;
  pthread_mutex_lock(&h->mu);
  h->closed = true;
  for (http_job *j = h->jobs; j; j = j->next) {
    j->code = LOOM_CANCELLED;
    snprintf(j->msg, sizeof j->msg, "the controller is stopping");
    j->done = true;
  }
  h->jobs = NULL;
  pthread_cond_broadcast(&h->cv);
  pthread_mutex_unlock(&h->mu);
  if (!uv_is_closing((uv_handle_t *)&h->async)) uv_close((uv_handle_t *)&h->async, NULL);
}

void ctl_http_free(ctl *c) {
  ctl_http *h = c->http;
  if (!h) return;
  if (h->mhd) MHD_stop_daemon(h->mhd); /* joins its threads: no request is in flight after this */
  lm_met_snapshot_unref(h->snap);
  lm_auth_wipe(h->scrape_token, sizeof h->scrape_token);
  lm_auth_wipe(h->cookie_key, sizeof h->cookie_key);
  pthread_mutex_destroy(&h->mu);
  pthread_cond_destroy(&h->cv);
  free(h);
  c->http = NULL;
}
