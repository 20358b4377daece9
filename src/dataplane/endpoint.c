/* The data-plane endpoint: UCX context and worker, the address blob, peers and their liveness,
 * the message layer (active messages with a Loom header, matched in software against posted
 * receives, unexpected ones kept until their receive comes), and the wait/progress engine that
 * spins briefly and then blocks on the worker's event fd. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include "common/log.h"
#include "dataplane/dp_internal.h"

#define DP_UX_MAX_MSGS (1u << 20)          /* unexpected messages held at most */
#define DP_UX_MAX_BYTES ((size_t)1 << 30)  /* bytes of unexpected eager data kept at most */
#define DP_UX_HOLD_MIN 4096                /* eager data at least this long is held, not copied */
#define DP_RETIRED_MAX 4096
#define DP_RETIRED_AGE_NS (600ll * 1000000000ll)
#define DP_BG_IDLE_NS (5ll * 1000000)       /* devices idle this long: the background thread serves */
#define DP_DRAIN_GRACE_NS (2ll * 1000000000ll)
#define DP_SETTLE_FORCED_NS (10ll * 1000000000ll) /* after a forced close, UCX's cancels come this soon */
#define DP_SETTLE_WARN_NS (5ll * 1000000000ll)

int64_t dp_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

int64_t dp_deadline(const lm_dp *dp, const lm_dp_call *call) {
  int64_t t = dp->timeout_ns;
  if (call && call->timeout_ms > 0) t = call->timeout_ms * 1000000ll;
  return dp_now_ns() + t;
}

static void dp_abstime(int64_t deadline_ns, struct timespec *ts) {
  /* condition variables use CLOCK_MONOTONIC (see dp_cond_init) */
  ts->tv_sec = deadline_ns / 1000000000ll;
  ts->tv_nsec = deadline_ns % 1000000000ll;
}

static int dp_cond_init(pthread_cond_t *c) {
  pthread_condattr_t a;
  pthread_condattr_init(&a);
  pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
  int rc = pthread_cond_init(c, &a);
  pthread_condattr_destroy(&a);
  return rc;
}

/* ---- the map ---- */

static size_t dp_key_hash(const dp_key *k) {
  uint64_t h = dp_mix(k->src, k->tag);
  h = dp_mix(h, k->key2);
  h = dp_mix(h, ((uint64_t)k->slot << 8) | k->kind);
  return (size_t)h;
}

void dp_map_free(dp_map *m) {
  free(m->b);
  m->b = NULL;
  m->nb = m->n = 0;
}

static int dp_map_grow(dp_map *m) {
  size_t nb = m->nb ? m->nb * 2 : 64;
  dp_link **b = calloc(nb, sizeof *b);
  if (!b) return LOOM_NO_MEMORY;
  /* re-insert keeping each key's entries in order: walk old chains front to back, append */
  dp_link **tail = calloc(nb, sizeof *tail);
  if (!tail) {
    free(b);
    return LOOM_NO_MEMORY;
  }
  for (size_t i = 0; i < m->nb; i++) {
    dp_link *e = m->b[i];
    while (e) {
      dp_link *next = e->next;
      size_t j = dp_key_hash(&e->key) & (nb - 1);
      e->next = NULL;
      if (tail[j]) tail[j]->next = e;
      else b[j] = e;
      tail[j] = e;
      e = next;
    }
  }
  free(tail);
  free(m->b);
  m->b = b;
  m->nb = nb;
  return 0;
}

int dp_map_insert(dp_map *m, dp_link *e) {
  if (m->n + 1 > m->nb * 2 || m->nb == 0) {
    int rc = dp_map_grow(m);
    if (rc < 0 && m->nb == 0) return rc; /* a full table still works, only slower */
  }
  dp_link **pp = &m->b[dp_key_hash(&e->key) & (m->nb - 1)];
  while (*pp) pp = &(*pp)->next;
  e->next = NULL;
  *pp = e;
  m->n++;
  return 0;
}

dp_link *dp_map_find(const dp_map *m, const dp_key *k) {
  if (!m->nb) return NULL;
  for (dp_link *e = m->b[dp_key_hash(k) & (m->nb - 1)]; e; e = e->next)
    if (dp_key_eq(&e->key, k)) return e;
  return NULL;
}

void dp_map_remove(dp_map *m, dp_link *e) {
  dp_link **pp = &m->b[dp_key_hash(&e->key) & (m->nb - 1)];
  while (*pp && *pp != e) pp = &(*pp)->next;
  if (*pp) {
    *pp = e->next;
    m->n--;
  }
  e->next = NULL;
}

/* ---- process identity (for the address blob and same-host liveness) ---- */

/* Reads field 22 (start time) and the state letter of /proc/<pid>/stat. 0 on success. */
static int dp_proc_stat(const char *path, uint64_t *start, char *state) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  char buf[1024];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  char *p = strrchr(buf, ')'); /* the command name may hold spaces and parentheses */
  if (!p || p[1] != ' ') return -1;
  p += 2;
  *state = *p;
  /* p is at field 3; the start time is field 22 */
  for (int field = 3; field < 22; field++) {
    p = strchr(p, ' ');
    if (!p) return -1;
    p++;
  }
  *start = strtoull(p, NULL, 10);
  return 0;
}

/* 1 if the process is alive (not gone, not a zombie, same start time), 0 if not. */
static int dp_proc_alive(uint32_t pid, uint64_t start) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%u/stat", pid);
  uint64_t st;
  char state;
  if (dp_proc_stat(path, &st, &state) < 0) return 0;
  if (state == 'Z' || state == 'X') return 0;
  return st == start;
}

static void dp_boot_id(uint8_t out[16]) {
  memset(out, 0, 16);
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (!f) return;
  char s[64] = {0};
  if (fgets(s, sizeof s, f)) {
    int k = 0;
    for (char *c = s; *c && k < 32; c++) {
      int v = (*c >= '0' && *c <= '9') ? *c - '0' : (*c >= 'a' && *c <= 'f') ? *c - 'a' + 10 : -1;
      if (v < 0) continue;
      out[k / 2] |= (uint8_t)(v << ((k % 2) ? 0 : 4));
      k++;
    }
  }
  fclose(f);
}

static uint64_t dp_pidns(void) {
  struct stat st;
  if (stat("/proc/self/ns/pid", &st) < 0) return 0;
  return (uint64_t)st.st_ino;
}

/* The host key of a blob without a topology trailer: its boot id and pid namespace. */
static uint64_t dp_host_key_of(const uint8_t *b) {
  uint64_t h = dp_mix(0x686f73746b657931ull, dp_get64(b + 48));
  h = dp_mix(h, dp_get64(b + 32));
  h = dp_mix(h, dp_get64(b + 40));
  return h ? h : 1;
}

/* A topology label's key (never 0: 0 means "no slice"). */
static uint64_t dp_label_key(uint64_t seed, const char *s) {
  uint64_t h = seed;
  for (; *s; s++) h = dp_mix(h, (uint8_t)*s);
  return h ? h : 1;
}

/* ---- configuration and creation ---- */

void lm_dp_config_init(lm_dp_config *c) {
  memset(c, 0, sizeof *c);
  c->struct_size = sizeof *c;
  c->num_devices = 1;
  c->spin_us = -1;
  c->progress_thread = 1;
}

static void *dp_bg_main(void *arg);
static ucs_status_t dp_am_cb(void *arg, const void *header, size_t hlen, void *data, size_t length,
                             const ucp_am_recv_param_t *param);

int lm_dp_create(const lm_dp_config *c, lm_dp **out, lm_err *err) {
  *out = NULL;
  if (!c || c->struct_size < sizeof(lm_dp_config))
    return lm_errf(err, LOOM_INVALID_ARGUMENT, "data plane: config missing or from another version");
  if (c->num_devices < 1 || c->num_devices > 65536)
    return lm_errf(err, LOOM_INVALID_ARGUMENT, "data plane: num_devices %u out of range [1, 65536]", c->num_devices);
  lm_dp *dp = calloc(1, sizeof *dp);
  if (!dp) return lm_errf(err, LOOM_NO_MEMORY, "data plane: out of memory");
  dp->cfg = *c;
  dp->efd = -1;
  dp->timeout_ns = (c->timeout_ms > 0 ? c->timeout_ms : 300000) * 1000000ll;
  int spin = c->spin_us;
  if (spin < 0) {
    spin = 50;
    const char *e = getenv("LOOM_DP_SPIN_US");
    if (e && *e) spin = atoi(e);
    if (spin < 0) spin = 0;
  }
  dp->spin_ns = (int64_t)spin * 1000;
  dp->liveness_ns = (c->liveness_ms > 0 ? c->liveness_ms : 200) * 1000000ll;
  /* algorithm thresholds (tuning knobs, see docs/dataplane.md) */
  dp->rd_max = 16u << 10;
  dp->seg_bytes = 128u << 10;
  dp->eager_max = 64u << 10; /* measured: eager beats rendezvous for 16-64 KiB on shared memory */
  const char *v;
  if ((v = getenv("LOOM_DP_RD_MAX")) && *v) dp->rd_max = strtoull(v, NULL, 0);
  if ((v = getenv("LOOM_DP_SEG")) && *v && strtoull(v, NULL, 0) >= 64) dp->seg_bytes = strtoull(v, NULL, 0);
  if ((v = getenv("LOOM_DP_EAGER_MAX")) && *v) dp->eager_max = strtoull(v, NULL, 0);
  dp->coll_algo = c->coll_algo;
  if (dp->coll_algo == LM_DP_COLL_AUTO && (v = getenv("LOOM_DP_COLL")) && *v) {
    if (!strcmp(v, "flat")) dp->coll_algo = LM_DP_COLL_FLAT;
    else if (!strcmp(v, "hier")) dp->coll_algo = LM_DP_COLL_HIER;
    else if (strcmp(v, "auto")) {
      free(dp);
      return lm_errf(err, LOOM_INVALID_ARGUMENT, "data plane: LOOM_DP_COLL is flat, hier or auto, not '%s'", v);
    }
  }
  if (dp->coll_algo < LM_DP_COLL_AUTO || dp->coll_algo > LM_DP_COLL_HIER) {
    int a = dp->coll_algo;
    free(dp);
    return lm_errf(err, LOOM_INVALID_ARGUMENT, "data plane: coll_algo %d is not one of LM_DP_COLL_*", a);
  }
  const char *host_label = c->host_label, *slice_label = c->slice_label;
  if (!host_label && (v = getenv("LOOM_DP_HOST")) && *v) host_label = v;
  if (!slice_label && (v = getenv("LOOM_DP_SLICE")) && *v) slice_label = v;
  pthread_mutex_init(&dp->mu, NULL);
  pthread_mutex_init(&dp->gmu, NULL);
  dp->siphash = EVP_MAC_fetch(NULL, "SIPHASH", NULL); /* checked where a key needs it */
  dp_cond_init(&dp->cv);
  dp_cond_init(&dp->bg_cv);

  ucp_config_t *ucfg = NULL;
  ucs_status_t st = ucp_config_read(NULL, NULL, &ucfg);
  if (st != UCS_OK) {
    lm_errf(err, LOOM_INTERNAL, "data plane: reading the UCX configuration: %s", ucs_status_string(st));
    goto fail;
  }
  /* Dead peers are found by keepalive on transports without a connection to lose (shared
   * memory); the default interval is long. The environment still wins. */
  if (!getenv("UCX_KEEPALIVE_INTERVAL")) ucp_config_modify(ucfg, "KEEPALIVE_INTERVAL", "1s");
  /* Listen only where the worker was told to: a local cluster's data plane stays on loopback. */
  if (c->net_devices && *c->net_devices && !getenv("UCX_NET_DEVICES") &&
      ucp_config_modify(ucfg, "NET_DEVICES", c->net_devices) != UCS_OK) {
    ucp_config_release(ucfg);
    lm_errf(err, LOOM_INVALID_ARGUMENT, "data plane: UCX does not take network devices '%s'", c->net_devices);
    goto fail;
  }
  ucp_params_t p;
  memset(&p, 0, sizeof p);
  p.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  p.features = UCP_FEATURE_AM | UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP;
  p.name = "loom";
  p.mt_workers_shared = 0;
  st = ucp_init(&p, ucfg, &dp->ctx);
  ucp_config_release(ucfg);
  if (st != UCS_OK) {
    lm_errf(err, LOOM_INTERNAL, "data plane: ucp_init: %s", ucs_status_string(st));
    goto fail;
  }
  ucp_worker_params_t wp;
  memset(&wp, 0, sizeof wp);
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SERIALIZED; /* every call is made holding dp->mu */
  dp_reap_before before = {0};
  dp->reap_idle_ms = c->idle_close_ms ? c->idle_close_ms : 5000;
  if (dp->reap_idle_ms > 0) dp_reap_before_take(&before);
  st = ucp_worker_create(dp->ctx, &wp, &dp->w);
  if (st == UCS_OK && dp->reap_idle_ms > 0 && dp_reap_start(dp, &before) < 0)
    lm_log(LM_LOG_WARN, "data plane: cannot start the thread that closes idle connections to UCX's port");
  free(before.ino);
  if (st != UCS_OK) {
    lm_errf(err, LOOM_INTERNAL, "data plane: ucp_worker_create: %s", ucs_status_string(st));
    goto fail;
  }
  st = ucp_worker_get_efd(dp->w, &dp->efd);
  if (st != UCS_OK) {
    lm_errf(err, LOOM_INTERNAL, "data plane: ucp_worker_get_efd: %s", ucs_status_string(st));
    goto fail;
  }
  ucp_am_handler_param_t hp;
  memset(&hp, 0, sizeof hp);
  hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG |
                  UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
  hp.id = DP_AM_ID;
  hp.cb = dp_am_cb;
  hp.arg = dp;
  hp.flags = UCP_AM_FLAG_WHOLE_MSG;
  st = ucp_worker_set_am_recv_handler(dp->w, &hp);
  if (st != UCS_OK) {
    lm_errf(err, LOOM_INTERNAL, "data plane: setting the message handler: %s", ucs_status_string(st));
    goto fail;
  }

  /* the address blob */
  ucp_address_t *ua = NULL;
  size_t ualen = 0;
  st = ucp_worker_get_address(dp->w, &ua, &ualen);
  if (st != UCS_OK) {
    lm_errf(err, LOOM_INTERNAL, "data plane: ucp_worker_get_address: %s", ucs_status_string(st));
    goto fail;
  }
  dp->addr_len = DP_ADDR_HDR + ualen + DP_ADDR_TOPO;
  dp->addr_blob = calloc(1, dp->addr_len);
  if (!dp->addr_blob) {
    ucp_worker_release_address(dp->w, ua);
    lm_errf(err, LOOM_NO_MEMORY, "data plane: out of memory");
    goto fail;
  }
  uint8_t *b = dp->addr_blob;
  dp_put32(b, DP_ADDR_MAGIC);
  b[4] = DP_ADDR_VERSION;
  dp_put64(b + 8, c->self_id);
  dp_put32(b + 16, (uint32_t)getpid());
  dp_put32(b + 20, (uint32_t)ualen);
  uint64_t start = 0;
  char state;
  if (dp_proc_stat("/proc/self/stat", &start, &state) < 0) start = 0;
  dp_put64(b + 24, start);
  dp_boot_id(b + 32);
  dp_put64(b + 48, dp_pidns());
  memcpy(b + DP_ADDR_HDR, ua, ualen);
  ucp_worker_release_address(dp->w, ua);
  b[6] = DP_ADDR_TOPO;
  dp->host_key = host_label && *host_label ? dp_label_key(0x686f73746c61626cull, host_label) : dp_host_key_of(b);
  dp->slice_key = slice_label && *slice_label ? dp_label_key(0x736c6963656c6162ull, slice_label) : 0;
  dp_put64(b + DP_ADDR_HDR + ualen, dp->host_key);
  dp_put64(b + DP_ADDR_HDR + ualen + 8, dp->slice_key);

  if (c->progress_thread) {
    if (pthread_create(&dp->bg, NULL, dp_bg_main, dp) != 0) {
      lm_errf(err, LOOM_INTERNAL, "data plane: cannot start the progress thread");
      goto fail;
    }
    dp->has_bg = true;
  }
  *out = dp;
  return 0;
fail: {
  int code = err ? err->code : LOOM_INTERNAL;
  lm_dp_destroy(dp);
  return code ? code : LOOM_INTERNAL;
}
}

uint64_t lm_dp_self(const lm_dp *dp) { return dp->cfg.self_id; }

int lm_dp_address(lm_dp *dp, const void **blob, size_t *len) {
  *blob = dp->addr_blob;
  *len = dp->addr_len;
  return 0;
}

/* Checks an address blob's framing; 0 or LOOM_PROTOCOL. */
static int dp_blob_check(const void *blob, size_t len, lm_err *err) {
  const uint8_t *b = blob;
  if (!b || len < DP_ADDR_HDR) return lm_errf(err, LOOM_PROTOCOL, "data plane address: %zu bytes, too short", len);
  if (dp_get32(b) != DP_ADDR_MAGIC) return lm_errf(err, LOOM_PROTOCOL, "data plane address: bad magic");
  if (b[4] != DP_ADDR_VERSION)
    return lm_errf(err, LOOM_VERSION_MISMATCH, "data plane address: version %u, this build speaks %u", b[4], DP_ADDR_VERSION);
  uint32_t ulen = dp_get32(b + 20), tlen = b[6] | (uint32_t)b[7] << 8;
  if (tlen != 0 && tlen != DP_ADDR_TOPO)
    return lm_errf(err, LOOM_PROTOCOL, "data plane address: topology trailer of %u bytes (0 or %d allowed)", tlen,
                   DP_ADDR_TOPO);
  if (ulen == 0 || len < DP_ADDR_HDR + (size_t)tlen || ulen != len - DP_ADDR_HDR - tlen)
    return lm_errf(err, LOOM_PROTOCOL, "data plane address: UCX address length %u does not match the blob (%zu)", ulen,
                   len);
  return 0;
}

#define DP_SIM_UCX "loom-sim" /* a simulated worker's stand-in for a UCX address */

size_t lm_dp_sim_address(uint64_t id, uint8_t *out, size_t cap) {
  size_t ulen = sizeof DP_SIM_UCX - 1;
  if (cap < DP_ADDR_HDR + ulen) return 0;
  memset(out, 0, DP_ADDR_HDR);
  dp_put32(out, DP_ADDR_MAGIC);
  out[4] = DP_ADDR_VERSION;
  dp_put64(out + 8, id);
  dp_put32(out + 20, (uint32_t)ulen);
  memcpy(out + DP_ADDR_HDR, DP_SIM_UCX, ulen);
  return DP_ADDR_HDR + ulen;
}

static bool dp_blob_simulated(const uint8_t *b, size_t len) {
  return len == DP_ADDR_HDR + sizeof DP_SIM_UCX - 1 && !memcmp(b + DP_ADDR_HDR, DP_SIM_UCX, sizeof DP_SIM_UCX - 1);
}

int lm_dp_address_id(const void *blob, size_t len, uint64_t *id, lm_err *err) {
  LM_TRY(dp_blob_check(blob, len, err));
  *id = dp_get64((const uint8_t *)blob + 8);
  return 0;
}

/* ---- peers ---- */

dp_peer *dp_peer_find_locked(lm_dp *dp, uint64_t id) {
  for (dp_peer *p = dp->peers; p; p = p->next)
    if (p->id == id) return p;
  return NULL;
}

static void dp_close_ep_mode_locked(lm_dp *dp, ucp_ep_h ep, bool force) {
  if (!ep) return;
  if (dp->nclosing == dp->capclosing) {
    size_t cap = dp->capclosing ? dp->capclosing * 2 : 8;
    ucp_ep_h *a = realloc(dp->closing, cap * sizeof *a);
    if (a) dp->closing = a;
    void **r = realloc(dp->closing_req, cap * sizeof *r);
    if (r) dp->closing_req = r;
    if (!a || !r) return; /* leaks one endpoint rather than crash */
    dp->capclosing = cap;
  }
  ucp_request_param_t prm;
  memset(&prm, 0, sizeof prm);
  prm.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  prm.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
  void *req = ucp_ep_close_nbx(ep, &prm);
  if (req == NULL || UCS_PTR_IS_ERR(req)) return;
  dp->closing[dp->nclosing] = ep;
  dp->closing_req[dp->nclosing] = req;
  dp->nclosing++;
}

static void dp_close_ep_locked(lm_dp *dp, ucp_ep_h ep) { dp_close_ep_mode_locked(dp, ep, true); }

static void dp_reap_closing_locked(lm_dp *dp) {
  size_t j = 0;
  for (size_t i = 0; i < dp->nclosing; i++) {
    if (ucp_request_check_status(dp->closing_req[i]) != UCS_INPROGRESS) {
      ucp_request_free(dp->closing_req[i]);
      continue;
    }
    dp->closing[j] = dp->closing[i];
    dp->closing_req[j] = dp->closing_req[i];
    j++;
  }
  dp->nclosing = j;
}

static void dp_fail_posted_locked(lm_dp *dp, int (*match)(const dp_req *, const void *), const void *arg, int code,
                                  const char *why) {
  for (size_t i = 0; i < dp->posted.nb; i++) {
    dp_link *e = dp->posted.b[i];
    while (e) {
      dp_link *next = e->next;
      dp_req *r = (dp_req *)e;
      if (match(r, arg)) {
        dp_map_remove(&dp->posted, e);
        r->posted = false;
        dp_req_complete_locked(dp, r, code, "%s", why);
      }
      e = next;
    }
  }
}

static int dp_match_src(const dp_req *r, const void *arg) { return r->link.key.src == *(const uint64_t *)arg; }

/* A peer whose connect failed is usable again once its backoff has passed (the next use connects). */
static void dp_peer_retry_locked(dp_peer *p) {
  if (p->failed && p->retry && dp_now_ns() >= p->retry_at_ns) {
    p->failed = false;
    p->retry = false;
    p->why[0] = 0;
  }
}

void dp_peer_fail_locked(lm_dp *dp, dp_peer *p, const char *fmt, ...) {
  if (p->failed) { /* already failed; a real loss ends any retrying of a failed connect */
    if (p->retry) {
      va_list ap;
      va_start(ap, fmt);
      vsnprintf(p->why, sizeof p->why, fmt, ap);
      va_end(ap);
      p->retry = false;
    }
    return;
  }
  p->retry = false;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(p->why, sizeof p->why, fmt, ap);
  va_end(ap);
  p->failed = true;
  ucp_ep_h ep = p->ep;
  p->ep = NULL;
  dp_fail_posted_locked(dp, dp_match_src, &p->id, LOOM_WORKER_LOST, p->why);
  /* transfers in flight with it fail now; UCX may keep their request objects (never their
   * buffers: nothing reaches a dead peer) until it lets go of them */
  for (dp_req *r = dp->inflight, *next; r; r = next) {
    next = r->fl_next;
    if (r->peer == p && !r->done) dp_req_complete_locked(dp, r, LOOM_WORKER_LOST, "%s", p->why);
  }
  /* a forced close completes UCX's own pending operations (endpoints with error handling) */
  if (p->err_peer) dp_close_ep_locked(dp, ep);
  dp->ncompl++;
  pthread_cond_broadcast(&dp->cv);
}

static void dp_ep_err_cb(void *arg, ucp_ep_h ep, ucs_status_t status) {
  dp_peer *p = arg; /* peers live as long as the endpoint */
  if (p->ep != ep) return; /* an endpoint already replaced or being closed */
  dp_peer_fail_locked(p->dp, p, "worker %" PRIu64 ": connection lost (%s)", p->id, ucs_status_string(status));
}

int dp_peer_ep_locked(lm_dp *dp, dp_peer *p, ucp_ep_h *out, lm_err *err) {
  dp_peer_retry_locked(p);
  if (p->failed) return lm_errf(err, p->retry ? LOOM_CONNECT : LOOM_WORKER_LOST, "%s", p->why);
  if (!p->ep && dp_blob_simulated(p->blob, p->blob_len))
    return lm_errf(err, LOOM_UNSUPPORTED, "worker %" PRIu64 " is simulated (loom worker --simulate): it has no data plane",
                   p->id);
  if (!p->ep) {
    ucp_ep_params_t ep;
    memset(&ep, 0, sizeof ep);
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                    UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.address = (const ucp_address_t *)(p->blob + DP_ADDR_HDR);
    /* UCX (1.13) drops shared memory and CMA for endpoints that report peer failures, which
     * leaves TCP over loopback: same-host peers go without, and their death is seen through
     * /proc instead (dp_check_liveness_locked). LOOM_DP_PEER_ERRORS=1 asks for it anyway. */
    const char *force = getenv("LOOM_DP_PEER_ERRORS");
    p->err_peer = !p->same_host || (force && force[0] == '1');
    ep.err_mode = p->err_peer ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
    ep.err_handler.cb = dp_ep_err_cb;
    ep.err_handler.arg = p;
    ucs_status_t st = ucp_ep_create(dp->w, &ep, &p->ep);
    if (st != UCS_OK) {
      p->ep = NULL;
      /* perhaps passing (out of descriptors): calls with it fail now, a later use tries again */
      uint32_t k = p->connect_failures < 6 ? p->connect_failures : 6;
      int64_t backoff_ms = 100ll << k;
      if (backoff_ms > 5000) backoff_ms = 5000;
      dp_peer_fail_locked(dp, p, "worker %" PRIu64 ": cannot connect (%s); trying again after %lld ms", p->id,
                          ucs_status_string(st), (long long)backoff_ms);
      p->retry = true;
      p->retry_at_ns = dp_now_ns() + backoff_ms * 1000000ll;
      p->connect_failures++;
      return lm_errf(err, LOOM_CONNECT, "%s", p->why);
    }
    p->connect_failures = 0;
  }
  *out = p->ep;
  return 0;
}

int lm_dp_peer_add(lm_dp *dp, const void *blob, size_t len, uint64_t *peer_id, lm_err *err) {
  return lm_dp_peer_add_keyed(dp, blob, len, NULL, peer_id, err);
}

/* ---- message MACs: SipHash-2-4 with a 128-bit tag, through OpenSSL ---- */

static EVP_MAC_CTX *dp_mac_new(lm_dp *dp, const uint8_t *key, lm_err *err) {
  if (!dp->siphash) {
    lm_errf(err, LOOM_UNSUPPORTED, "data plane: this OpenSSL has no SipHash (needed to authenticate messages)");
    return NULL;
  }
  EVP_MAC_CTX *m = EVP_MAC_CTX_new(dp->siphash);
  size_t tag = DP_MAC_SIZE;
  OSSL_PARAM prm[] = {OSSL_PARAM_construct_size_t(OSSL_MAC_PARAM_SIZE, &tag), OSSL_PARAM_construct_end()};
  if (!m || !EVP_MAC_init(m, key, LM_DP_KEY_SIZE, prm)) {
    EVP_MAC_CTX_free(m);
    lm_errf(err, LOOM_INTERNAL, "data plane: cannot key a message MAC");
    return NULL;
  }
  return m;
}

static bool dp_mac(dp_peer *p, const uint8_t *h, uint8_t *tag) {
  size_t n = 0;
  return p->mac && EVP_MAC_init(p->mac, NULL, 0, NULL) && EVP_MAC_update(p->mac, h, DP_MAC_OFF) &&
         EVP_MAC_final(p->mac, tag, &n, DP_MAC_SIZE) && n == DP_MAC_SIZE;
}

void dp_mac_put_locked(dp_peer *p, uint8_t *h) {
  if (!dp_mac(p, h, h + DP_MAC_OFF)) memset(h + DP_MAC_OFF, 0, DP_MAC_SIZE);
}

bool dp_mac_ok_locked(dp_peer *p, const uint8_t *h) {
  uint8_t tag[DP_MAC_SIZE];
  return dp_mac(p, h, tag) && CRYPTO_memcmp(tag, h + DP_MAC_OFF, DP_MAC_SIZE) == 0;
}

int lm_dp_peer_add_keyed(lm_dp *dp, const void *blob, size_t len, const uint8_t *key, uint64_t *peer_id,
                         lm_err *err) {
  LM_TRY(dp_blob_check(blob, len, err));
  const uint8_t *b = blob;
  uint64_t id = dp_get64(b + 8);
  if (peer_id) *peer_id = id;
  if (id == dp->cfg.self_id) return 0;
  if (!key && dp->cfg.require_keys)
    return lm_errf(err, LOOM_PERMISSION, "data plane: peer worker %" PRIu64 " comes without a key (this endpoint "
                   "accepts only authenticated peers)", id);
  EVP_MAC_CTX *mac = key ? dp_mac_new(dp, key, err) : NULL;
  if (key && !mac) return err->code;
  uint8_t *copy = malloc(len);
  if (!copy) {
    EVP_MAC_CTX_free(mac);
    return lm_errf(err, LOOM_NO_MEMORY, "data plane: out of memory");
  }
  memcpy(copy, blob, len);
  uint8_t my_boot[16];
  memcpy(my_boot, dp->addr_blob + 32, 16);
  static const uint8_t zero[16];
  bool same = memcmp(b + 32, my_boot, 16) == 0 && memcmp(my_boot, zero, 16) != 0 &&
              dp_get64(b + 48) == dp_get64(dp->addr_blob + 48) && dp_get64(b + 48) != 0;

  pthread_mutex_lock(&dp->mu);
  dp_peer *p = dp_peer_find_locked(dp, id);
  if (!p) {
    p = calloc(1, sizeof *p);
    if (!p) {
      pthread_mutex_unlock(&dp->mu);
      free(copy);
      EVP_MAC_CTX_free(mac);
      return lm_errf(err, LOOM_NO_MEMORY, "data plane: out of memory");
    }
    p->id = id;
    p->dp = dp;
    p->next = dp->peers;
    dp->peers = p;
  } else if (!p->failed && p->blob && p->blob_len == len && memcmp(p->blob, blob, len) == 0 && (p->mac != NULL) == (mac != NULL)) {
    /* the same address again (the key too: a new key comes with a new registration, hence a
     * new blob) */
    EVP_MAC_CTX *old = p->mac;
    p->mac = mac;
    pthread_mutex_unlock(&dp->mu);
    EVP_MAC_CTX_free(old);
    free(copy);
    return 0;
  } else {
    /* a restarted worker, or one declared dead that is back: start over with a new connection */
    ucp_ep_h old = p->ep;
    p->ep = NULL;
    dp_close_ep_locked(dp, old);
    free(p->blob);
    p->generation++;
  }
  EVP_MAC_CTX_free(p->mac);
  p->mac = mac;
  p->blob = copy;
  p->blob_len = len;
  p->pid = dp_get32(b + 16);
  p->start_time = dp_get64(b + 24);
  p->same_host = same;
  if (b[6]) {
    p->host_key = dp_get64(b + len - DP_ADDR_TOPO);
    p->slice_key = dp_get64(b + len - DP_ADDR_TOPO + 8);
  } else {
    p->host_key = dp_host_key_of(b);
    p->slice_key = 0;
  }
  p->failed = false;
  p->retry = false;
  p->connect_failures = 0;
  p->why[0] = 0;
  pthread_mutex_unlock(&dp->mu);
  return 0;
}

int lm_dp_peer_fail(lm_dp *dp, uint64_t peer_id, const char *why) {
  pthread_mutex_lock(&dp->mu);
  dp_peer *p = dp_peer_find_locked(dp, peer_id);
  if (p) {
    dp_peer_fail_locked(dp, p, "worker %" PRIu64 " lost: %s", peer_id, why ? why : "declared dead");
    if (dp->in_poll) ucp_worker_signal(dp->w);
  }
  pthread_mutex_unlock(&dp->mu);
  return p ? 0 : LOOM_NOT_FOUND;
}

int lm_dp_peer_status(lm_dp *dp, uint64_t peer_id, lm_err *err) {
  pthread_mutex_lock(&dp->mu);
  dp_peer *p = dp_peer_find_locked(dp, peer_id);
  int rc = 0;
  if (p) dp_peer_retry_locked(p);
  if (!p) rc = lm_errf(err, LOOM_NOT_FOUND, "data plane: worker %" PRIu64 " is not a known peer", peer_id);
  else if (p->failed) rc = lm_errf(err, LOOM_WORKER_LOST, "%s", p->why);
  pthread_mutex_unlock(&dp->mu);
  return rc;
}

/* ---- requests ---- */

dp_req *dp_req_new(int type, size_t payload) {
  dp_req *r = calloc(1, sizeof *r + payload);
  if (r) r->type = type;
  return r;
}

static void dp_inflight_add(lm_dp *dp, dp_req *r, void *ucx) {
  r->ucx = ucx;
  r->fl_prev = NULL;
  r->fl_next = dp->inflight;
  if (dp->inflight) dp->inflight->fl_prev = r;
  dp->inflight = r;
}

static void dp_inflight_del(lm_dp *dp, dp_req *r) {
  if (r->fl_prev) r->fl_prev->fl_next = r->fl_next;
  else if (dp->inflight == r) dp->inflight = r->fl_next;
  if (r->fl_next) r->fl_next->fl_prev = r->fl_prev;
  r->fl_prev = r->fl_next = NULL;
  r->ucx = NULL;
}

void dp_req_release_locked(lm_dp *dp, dp_req *r) {
  if (r->ucx) r->autofree = true;
  else free(r);
}

void dp_req_complete_locked(lm_dp *dp, dp_req *r, int status, const char *fmt, ...) {
  if (r->done) return;
  r->done = true;
  r->status = status;
  if (status != 0 && fmt) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->why, sizeof r->why, fmt, ap);
    va_end(ap);
  }
  dp->ncompl++;
  if (r->autofree && !r->ucx) free(r);
}

static int dp_ucs_code(ucs_status_t st) {
  switch (st) {
  case UCS_ERR_CANCELED: return LOOM_CANCELLED;
  case UCS_ERR_TIMED_OUT:
  case UCS_ERR_ENDPOINT_TIMEOUT: return LOOM_TIMEOUT;
  case UCS_ERR_NO_MEMORY: return LOOM_NO_MEMORY;
  case UCS_ERR_MESSAGE_TRUNCATED:
  case UCS_ERR_INVALID_PARAM: return LOOM_PROTOCOL;
  default: return LOOM_WORKER_LOST;
  }
}

static void dp_req_ucx_done_locked(lm_dp *dp, dp_req *r, ucs_status_t st) {
  r->ucx_cb = true;
  dp_inflight_del(dp, r);
  if (r->done) { /* failed already (its peer died): nobody waits any more */
    if (r->autofree) free(r);
    return;
  }
  if (st == UCS_OK) dp_req_complete_locked(dp, r, 0, NULL);
  else
    dp_req_complete_locked(dp, r, dp_ucs_code(st), "worker %" PRIu64 ": transfer failed (%s)",
                           r->peer ? r->peer->id : 0, ucs_status_string(st));
}

void dp_req_track_locked(lm_dp *dp, dp_req *r, void *st, const char *what) {
  /* UCX may complete an operation through its callback before the call that started it
   * returns (one that fails at once on a failed endpoint): the callback freed the handle */
  if (r->ucx_cb) return;
  if (st == NULL) dp_req_complete_locked(dp, r, 0, NULL);
  else if (UCS_PTR_IS_ERR(st))
    dp_req_complete_locked(dp, r, dp_ucs_code(UCS_PTR_STATUS(st)), "worker %" PRIu64 ": %s failed (%s)",
                           r->peer ? r->peer->id : 0, what, ucs_status_string(UCS_PTR_STATUS(st)));
  else dp_inflight_add(dp, r, st);
  if (dp->in_poll) ucp_worker_signal(dp->w);
}

void dp_req_send_cb(void *request, ucs_status_t status, void *user_data) {
  dp_req *r = user_data;
  ucp_request_free(request);
  dp_req_ucx_done_locked(r->peer->dp, r, status);
}

static void dp_send_cb(void *request, ucs_status_t status, void *user_data) {
  dp_req *r = user_data;
  ucp_request_free(request);
  dp_req_ucx_done_locked(r->peer->dp, r, status);
}

static void dp_recv_am_cb(void *request, ucs_status_t status, size_t length, void *user_data) {
  dp_req *r = user_data;
  ucp_request_free(request);
  dp_req_ucx_done_locked(r->peer->dp, r, status);
}

void dp_send_locked(lm_dp *dp, dp_peer *p, dp_req *r, uint32_t kind, uint64_t tag, uint64_t key2, uint32_t slot,
                    uint64_t sig, const void *buf, size_t len) {
  r->type = DP_REQ_SEND;
  r->peer = p;
  r->len = len;
  r->buf = (void *)buf;
  uint8_t *h = r->hdr;
  memset(h, 0, DP_HDR_SIZE);
  dp_put32(h, DP_MAGIC);
  h[4] = DP_VERSION;
  h[5] = (uint8_t)kind;
  dp_put64(h + 8, dp->cfg.self_id);
  dp_put64(h + 16, tag);
  dp_put64(h + 24, key2);
  dp_put32(h + 32, slot);
  dp_put64(h + 40, sig);
  dp_mac_put_locked(p, h);
  ucp_ep_h ep;
  lm_err e;
  if (dp_peer_ep_locked(dp, p, &ep, &e) < 0) {
    dp_req_complete_locked(dp, r, e.code, "%s", e.msg);
    return;
  }
  ucp_request_param_t prm;
  memset(&prm, 0, sizeof prm);
  prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  prm.cb.send = dp_send_cb;
  prm.user_data = r;
  if (len && len <= dp->eager_max) {
    prm.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
    prm.flags = UCP_AM_SEND_FLAG_EAGER;
  }
  r->ucx_cb = false;
  void *st = ucp_am_send_nbx(ep, DP_AM_ID, r->hdr, DP_HDR_SIZE, buf, len, &prm);
  dp->stats.msgs_sent++;
  dp->stats.bytes_sent += len;
  dp_req_track_locked(dp, r, st, "send");
}

static void dp_ux_unlink(lm_dp *dp, dp_unexp *u) {
  if (u->age_prev) u->age_prev->age_next = u->age_next;
  else dp->ux_old = u->age_next;
  if (u->age_next) u->age_next->age_prev = u->age_prev;
  else dp->ux_new = u->age_prev;
  dp_map_remove(&dp->unexp, &u->link);
  if (u->mode != DP_UX_RNDV) dp->ux_bytes -= u->len;
}

/* Frees an unexpected entry whose data nobody will receive. */
static void dp_ux_drop(lm_dp *dp, dp_unexp *u) {
  if (u->mode == DP_UX_HELD || u->mode == DP_UX_RNDV) ucp_am_data_release(dp->w, u->data);
  free(u);
}

/* Hands message data to receive r. mode: DP_UX_COPY (data valid only now), DP_UX_HELD (UCX data
 * kept alive), DP_UX_RNDV (UCX rendezvous descriptor). in_cb: called from the message callback,
 * whose return value this is (UCX then owns what we did not take). */
static ucs_status_t dp_deliver_locked(lm_dp *dp, dp_req *r, void *data, size_t len, int mode, uint64_t sig,
                                      bool in_cb) {
  uint64_t src = r->link.key.src;
  if (sig != r->sig || len != r->len) {
    if (sig != r->sig)
      dp_req_complete_locked(dp, r, LOOM_PROTOCOL,
                             "worker %" PRIu64 " made a different call with the same tag %" PRIu64
                             " (its sizes or operation differ from this worker's)",
                             src, r->link.key.tag);
    else
      dp_req_complete_locked(dp, r, LOOM_PROTOCOL, "worker %" PRIu64 " sent %zu bytes for tag %" PRIu64 ", expected %zu",
                             src, len, r->link.key.tag, r->len);
    if (!in_cb && mode != DP_UX_COPY) ucp_am_data_release(dp->w, data);
    /* rendezvous: an error status makes the sender's send fail as well */
    return (in_cb && mode == DP_UX_RNDV) ? UCS_ERR_INVALID_PARAM : UCS_OK;
  }
  dp->stats.msgs_recv++;
  dp->stats.bytes_recv += len;
  if (mode == DP_UX_RNDV) {
    ucp_request_param_t prm;
    memset(&prm, 0, sizeof prm);
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    prm.cb.recv_am = dp_recv_am_cb;
    prm.user_data = r;
    r->ucx_cb = false;
    void *st = ucp_am_recv_data_nbx(dp->w, data, r->buf, len, &prm);
    dp_req_track_locked(dp, r, st, "receive");
    return UCS_INPROGRESS;
  }
  if (len) memcpy(r->buf, data, len);
  if (!in_cb && mode == DP_UX_HELD) ucp_am_data_release(dp->w, data);
  dp_req_complete_locked(dp, r, 0, NULL);
  return UCS_OK;
}

static dp_retired *dp_retired_find(lm_dp *dp, uint64_t tag, uint64_t key2) {
  if (!dp->retired.n) return NULL;
  dp_key k = {.tag = tag, .key2 = key2};
  return (dp_retired *)dp_map_find(&dp->retired, &k);
}

const char *dp_retired_why_locked(lm_dp *dp, uint64_t tag, uint64_t key2) {
  dp_retired *t = dp_retired_find(dp, tag, key2);
  return t ? t->why : NULL;
}

void dp_recv_locked(lm_dp *dp, dp_peer *p, dp_req *r, uint32_t kind, uint64_t tag, uint64_t key2, uint32_t slot,
                    uint64_t sig, void *buf, size_t len) {
  r->type = DP_REQ_RECV;
  r->peer = p;
  r->buf = buf;
  r->len = len;
  r->sig = sig;
  r->link.key = (dp_key){.src = p->id, .tag = tag, .key2 = key2, .slot = slot, .kind = kind};
  dp_peer_retry_locked(p);
  /* what arrived before the peer failed is still good */
  dp_unexp *u;
  while ((u = (dp_unexp *)dp_map_find(&dp->unexp, &r->link.key)) && u->unverified) {
    if (dp_mac_ok_locked(p, u->hdr)) {
      u->unverified = false;
      break;
    }
    dp_ux_unlink(dp, u); /* it did not come from that worker: look again */
    dp_ux_drop(dp, u);
    dp->stats.dropped++;
    dp->stats.forged++;
  }
  if (u && !(p->failed && u->mode == DP_UX_RNDV)) {
    dp_ux_unlink(dp, u);
    dp_deliver_locked(dp, r, u->data, u->len, u->mode, u->sig, false);
    free(u);
    if (r->ucx && dp->in_poll) ucp_worker_signal(dp->w); /* a rendezvous to drive */
    return;
  }
  if (p->failed) {
    dp_req_complete_locked(dp, r, LOOM_WORKER_LOST, "%s", p->why);
    return;
  }
  if (kind == DP_KIND_COLL) {
    dp_retired *t = dp_retired_find(dp, tag, key2);
    if (t) {
      dp_req_complete_locked(dp, r, LOOM_CANCELLED, "%s", t->why);
      return;
    }
  }
  if (dp_map_insert(&dp->posted, &r->link) < 0) {
    dp_req_complete_locked(dp, r, LOOM_NO_MEMORY, "data plane: out of memory posting a receive");
    return;
  }
  r->posted = true;
}

void dp_req_cancel_locked(lm_dp *dp, dp_req *r) {
  /* Only a receive still waiting for its message is withdrawn. A transfer UCX has started is
   * left to finish: cancelling a send halfway could leave the peer's receive (which writes
   * into its caller's buffer) waiting forever, and a receive under way writes into ours. */
  if (r->done || !r->posted) return;
  dp_map_remove(&dp->posted, &r->link);
  r->posted = false;
  dp_req_complete_locked(dp, r, LOOM_CANCELLED, "cancelled");
}

/* ---- retiring failed collectives ---- */

static int dp_match_tagkey(const dp_req *r, const void *arg) {
  const dp_key *k = arg;
  return r->link.key.kind == DP_KIND_COLL && r->link.key.tag == k->tag && r->link.key.key2 == k->key2;
}

void dp_retire_locked(lm_dp *dp, uint64_t tag, uint64_t key2, const char *why) {
  dp_key k = {.tag = tag, .key2 = key2};
  if (!dp_retired_find(dp, tag, key2)) {
    dp_retired *t = calloc(1, sizeof *t);
    if (t) {
      t->link.key = k;
      t->t_ns = dp_now_ns();
      snprintf(t->why, sizeof t->why, "%s", why);
      if (dp_map_insert(&dp->retired, &t->link) == 0) {
        if (dp->ret_new) dp->ret_new->age_next = t;
        else dp->ret_old = t;
        dp->ret_new = t;
        if (dp->retired.n > DP_RETIRED_MAX) {
          dp_retired *o = dp->ret_old;
          dp->ret_old = o->age_next;
          if (!dp->ret_old) dp->ret_new = NULL;
          dp_map_remove(&dp->retired, &o->link);
          free(o);
        }
      } else {
        free(t);
      }
    }
  }
  dp_fail_posted_locked(dp, dp_match_tagkey, &k, LOOM_CANCELLED, why);
  /* drop what already arrived for it */
  for (dp_unexp *u = dp->ux_old; u;) {
    dp_unexp *next = u->age_next;
    if (u->link.key.kind == DP_KIND_COLL && u->link.key.tag == tag && u->link.key.key2 == key2) {
      dp_ux_unlink(dp, u);
      dp_ux_drop(dp, u);
    }
    u = next;
  }
  pthread_cond_broadcast(&dp->cv);
}

void dp_send_abort_locked(lm_dp *dp, dp_peer *p, uint64_t tag, uint64_t key2, const char *why) {
  if (p->failed) return;
  size_t n = strlen(why);
  if (n > DP_ABORT_MAX) n = DP_ABORT_MAX;
  dp_req *r = dp_req_new(DP_REQ_SEND, n);
  if (!r) return;
  memcpy(r->payload, why, n);
  dp_send_locked(dp, p, r, DP_KIND_ABORT, tag, key2, 0, 0, r->payload, n);
  dp_req_release_locked(dp, r); /* nobody waits for it: freed now, or once UCX lets go of it */
}

/* ---- the message callback ---- */

static ucs_status_t dp_am_cb(void *arg, const void *header, size_t hlen, void *data, size_t length,
                             const ucp_am_recv_param_t *param) {
  lm_dp *dp = arg;
  bool rndv = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
  bool can_hold = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_DATA) != 0;
  const uint8_t *h = header;
  if (hlen != DP_HDR_SIZE || !h || dp_get32(h) != DP_MAGIC || h[4] != DP_VERSION) {
    dp->stats.dropped++;
    return rndv ? UCS_ERR_INVALID_PARAM : UCS_OK;
  }
  uint32_t kind = h[5];
  dp_key k = {.src = dp_get64(h + 8), .tag = dp_get64(h + 16), .key2 = dp_get64(h + 24), .slot = dp_get32(h + 32),
              .kind = kind};
  uint64_t sig = dp_get64(h + 40);
  /* the sender id must be proven where that peer has a key (always, under a controller) */
  dp_peer *from = dp_peer_find_locked(dp, k.src);
  /* a sender not known yet (its PEERS entry, sent to us as to it, may arrive after its first
   * message): kept unverified until a receive for it takes it, when its key is known */
  bool unverified = !from && dp->cfg.require_keys && kind != DP_KIND_ABORT;
  if (!unverified && ((from && from->mac) || dp->cfg.require_keys) && (!from || !dp_mac_ok_locked(from, h))) {
    dp->stats.dropped++;
    dp->stats.forged++;
    return rndv ? UCS_ERR_INVALID_PARAM : UCS_OK;
  }
  if (kind == DP_KIND_ABORT) {
    if (rndv || length > DP_ABORT_MAX) {
      dp->stats.dropped++;
      return rndv ? UCS_ERR_INVALID_PARAM : UCS_OK;
    }
    char reason[DP_ABORT_MAX + 1];
    for (size_t i = 0; i < length; i++) {
      char c = ((const char *)data)[i];
      reason[i] = (c >= 32 && c < 127) ? c : '?';
    }
    reason[length] = 0;
    char why[DP_ABORT_MAX + 64];
    snprintf(why, sizeof why, "worker %" PRIu64 " abandoned the call: %s", k.src, reason);
    dp_retire_locked(dp, k.tag, k.key2, why);
    return UCS_OK;
  }
  if (kind != DP_KIND_COLL && kind != DP_KIND_P2P) {
    dp->stats.dropped++;
    return rndv ? UCS_ERR_INVALID_PARAM : UCS_OK;
  }
  dp_link *e = dp_map_find(&dp->posted, &k);
  if (e) {
    dp_req *r = (dp_req *)e;
    dp_map_remove(&dp->posted, e);
    r->posted = false;
    return dp_deliver_locked(dp, r, data, length, rndv ? DP_UX_RNDV : DP_UX_COPY, sig, true);
  }
  if (kind == DP_KIND_COLL && dp_retired_find(dp, k.tag, k.key2)) {
    dp->stats.dropped++;
    return rndv ? UCS_ERR_CANCELED : UCS_OK;
  }
  int mode = rndv ? DP_UX_RNDV : (can_hold && length >= DP_UX_HOLD_MIN) ? DP_UX_HELD : DP_UX_COPY;
  if (dp->unexp.n >= DP_UX_MAX_MSGS || (mode != DP_UX_RNDV && dp->ux_bytes + length > DP_UX_MAX_BYTES)) {
    dp->stats.dropped++;
    return rndv ? UCS_ERR_NO_MEMORY : UCS_OK;
  }
  dp_unexp *u = malloc(sizeof *u + (mode == DP_UX_COPY ? length : 0));
  if (!u) {
    dp->stats.dropped++;
    return rndv ? UCS_ERR_NO_MEMORY : UCS_OK;
  }
  memset(u, 0, sizeof *u);
  u->link.key = k;
  u->mode = mode;
  u->sig = sig;
  u->len = length;
  u->t_ns = dp_now_ns();
  u->unverified = unverified;
  if (unverified) memcpy(u->hdr, h, DP_HDR_SIZE);
  if (mode == DP_UX_COPY) {
    if (length) memcpy(u->inline_data, data, length);
    u->data = u->inline_data;
  } else {
    u->data = data;
  }
  if (mode != DP_UX_RNDV) dp->ux_bytes += length;
  if (dp_map_insert(&dp->unexp, &u->link) < 0) {
    free(u);
    dp->stats.dropped++;
    return rndv ? UCS_ERR_NO_MEMORY : UCS_OK;
  }
  u->age_prev = dp->ux_new;
  if (dp->ux_new) dp->ux_new->age_next = u;
  else dp->ux_old = u;
  dp->ux_new = u;
  dp->stats.unexpected++;
  return mode == DP_UX_COPY ? UCS_OK : UCS_INPROGRESS;
}

/* ---- housekeeping ---- */

static void dp_housekeep_locked(lm_dp *dp, int64_t now) {
  if (dp->nclosing) dp_reap_closing_locked(dp);
  if (now < dp->next_purge_ns) return;
  dp->next_purge_ns = now + 1000000000ll;
  /* unexpected messages nobody asked for long after any call could have waited for them */
  int64_t age = 2 * dp->timeout_ns;
  if (age < 60ll * 1000000000ll) age = 60ll * 1000000000ll;
  while (dp->ux_old && now - dp->ux_old->t_ns > age) {
    dp_unexp *u = dp->ux_old;
    dp_ux_unlink(dp, u);
    dp_ux_drop(dp, u);
    dp->stats.dropped++;
  }
  while (dp->ret_old && now - dp->ret_old->t_ns > DP_RETIRED_AGE_NS) {
    dp_retired *o = dp->ret_old;
    dp->ret_old = o->age_next;
    if (!dp->ret_old) dp->ret_new = NULL;
    dp_map_remove(&dp->retired, &o->link);
    free(o);
  }
}

static void dp_check_peer_locked(lm_dp *dp, dp_peer *p) {
  if (!p || p->failed || !p->same_host) return;
  if (!dp_proc_alive(p->pid, p->start_time))
    dp_peer_fail_locked(dp, p, "worker %" PRIu64 " (pid %u on this host) exited", p->id, p->pid);
}

static void dp_check_liveness_locked(lm_dp *dp, dp_req *const *reqs, size_t n, dp_peer *const *watch,
                                     size_t nwatch) {
  for (size_t i = 0; i < n; i++)
    if (!reqs[i]->done) dp_check_peer_locked(dp, reqs[i]->peer);
  for (size_t i = 0; i < nwatch; i++) dp_check_peer_locked(dp, watch[i]);
}

/* ---- waiting ----
 *
 * One thread at a time holds the progress role: it calls ucp_worker_progress, spins (yielding
 * the CPU) for spin_ns after the last event, then arms the worker and blocks in poll() on its
 * event fd with mu released. Other waiters sleep on cv and are woken when completions happen
 * or the role is free. The background thread takes the role only when no device thread has
 * waited for DP_BG_IDLE_NS, and gives it back as soon as one wants it. */

/* settle: wait until UCX holds none of the requests' buffers (see dp_settle_locked) instead of
 * until they are done */
static int dp_wait_core_locked(lm_dp *dp, dp_req *const *reqs, size_t n, int64_t deadline, volatile int *cancel,
                               dp_peer *const *watch, size_t nwatch, dp_peer **lost, bool settle);

int dp_wait_locked(lm_dp *dp, dp_req *const *reqs, size_t n, int64_t deadline, volatile int *cancel) {
  return dp_wait_core_locked(dp, reqs, n, deadline, cancel, NULL, 0, NULL, false);
}

int dp_wait_watch_locked(lm_dp *dp, dp_req *const *reqs, size_t n, int64_t deadline, volatile int *cancel,
                         dp_peer *const *watch, size_t nwatch, dp_peer **lost) {
  return dp_wait_core_locked(dp, reqs, n, deadline, cancel, watch, nwatch, lost, false);
}

static bool dp_req_settled(const dp_req *r) { return !r->ucx || r->orphan; }

static int dp_wait_core_locked(lm_dp *dp, dp_req *const *reqs, size_t n, int64_t deadline, volatile int *cancel,
                               dp_peer *const *watch, size_t nwatch, dp_peer **lost, bool settle) {
  size_t i = 0;
  bool prog = false;
  int rc = 0;
  int64_t spin_until = 0, next_live = dp_now_ns() + dp->liveness_ns;
  uint64_t seen = dp->ncompl;
  dp->nwaiting++;
  for (;;) {
    while (i < n && (settle ? dp_req_settled(reqs[i]) : reqs[i]->done)) i++;
    if (i == n) break;
    int64_t t = dp_now_ns();
    if (t >= deadline) {
      rc = LOOM_TIMEOUT;
      break;
    }
    if (cancel && *cancel) {
      rc = LOOM_CANCELLED;
      break;
    }
    size_t w = 0;
    while (w < nwatch && !(watch[w] && watch[w]->failed)) w++;
    if (w < nwatch) {
      if (lost) *lost = watch[w];
      rc = LOOM_WORKER_LOST;
      break;
    }
    if (t >= next_live) {
      dp_check_liveness_locked(dp, reqs + i, n - i, watch, nwatch);
      next_live = t + dp->liveness_ns;
      continue;
    }
    if (!prog) {
      if (!dp->progressing) {
        dp->progressing = true;
        dp->progress_bg = false;
        prog = true;
        spin_until = t + dp->spin_ns;
      } else {
        if (dp->progress_bg) {
          dp->handover = true;
          if (dp->in_poll) ucp_worker_signal(dp->w);
        }
        int64_t until = deadline < next_live ? deadline : next_live;
        struct timespec ts;
        dp_abstime(until, &ts);
        pthread_cond_timedwait(&dp->cv, &dp->mu, &ts);
        continue;
      }
    }
    unsigned np = ucp_worker_progress(dp->w);
    if (dp->nclosing) dp_reap_closing_locked(dp);
    if (dp->ncompl != seen) {
      seen = dp->ncompl;
      if (dp->nwaiting > 1) pthread_cond_broadcast(&dp->cv);
    }
    if (np) {
      spin_until = t + dp->spin_ns;
      continue;
    }
    if (t < spin_until) {
      pthread_mutex_unlock(&dp->mu);
      sched_yield();
      pthread_mutex_lock(&dp->mu);
      continue;
    }
    dp_housekeep_locked(dp, t);
    ucs_status_t st = ucp_worker_arm(dp->w);
    if (st == UCS_ERR_BUSY) continue;
    int64_t until = deadline < next_live ? deadline : next_live;
    int ms = (int)((until - t) / 1000000) + 1;
    dp->in_poll = true;
    dp->stats.blocks++;
    pthread_mutex_unlock(&dp->mu);
    if (st == UCS_OK) {
      struct pollfd pfd = {.fd = dp->efd, .events = POLLIN};
      poll(&pfd, 1, ms);
    } else {
      struct timespec ts = {0, 1000000}; /* cannot arm: nap instead of spinning */
      nanosleep(&ts, NULL);
    }
    pthread_mutex_lock(&dp->mu);
    dp->in_poll = false;
    spin_until = dp_now_ns() + dp->spin_ns;
  }
  if (prog) {
    dp->progressing = false;
    if (dp->nwaiting > 1) pthread_cond_broadcast(&dp->cv);
  }
  dp->nwaiting--;
  dp->dev_last_ns = dp_now_ns();
  return rc;
}

/* Makes a failed call safe to return from: once it returns, UCX touches none of the call's
 * buffers, so the caller may free or reuse them (a late rendezvous writing into a freed shard,
 * or into a scratch buffer a later call reuses, is what this prevents).
 *
 * A transfer UCX has started ends only when the peer does its part. A peer with error handling
 * (another host) that has not done it is treated as lost: its endpoint is closed by force, which
 * makes UCX cancel every transfer with it, and it is failed until the controller adds it again.
 * A peer on this host has no such endpoint (see dp_peer_ep_locked) and cannot be cut off
 * safely: the call waits for it to do its part or for its process to be gone (a stopped
 * process holds the call; it is logged once as a warning). lm_dp_shutdown ends the wait. */
void dp_settle_locked(lm_dp *dp, dp_req *const *reqs, size_t n) {
  int64_t t0 = dp_now_ns();
  bool warned = false;
  for (;;) {
    dp_peer *held = NULL;
    for (size_t i = 0; i < n; i++) {
      dp_req *r = reqs[i];
      if (dp_req_settled(r)) continue;
      dp_peer *p = r->peer;
      if (!p || dp->quitting) {
        r->orphan = true;
      } else if (p->err_peer) {
        dp_peer_fail_locked(dp, p, "worker %" PRIu64 " did not finish a transfer of a call that ended; "
                                   "its connection was closed", p->id); /* no-op if failed already */
        /* UCX completes the cancelled requests through their callbacks; one it never completes
         * after this long is left to it (it holds no buffer of a closed endpoint's peer) */
        if (dp_now_ns() - t0 > DP_SETTLE_FORCED_NS) r->orphan = true;
        else held = p;
      } else if (p->same_host && !dp_proc_alive(p->pid, p->start_time)) {
        r->orphan = true; /* its process is gone: nothing will move data for it any more */
      } else {
        held = p;
      }
    }
    if (!held) return;
    if (!warned && !held->err_peer && dp_now_ns() - t0 > DP_SETTLE_WARN_NS) {
      lm_warn("data plane: waiting for worker %" PRIu64 " (pid %u) to finish transfers of a call that ended, "
              "before their buffers can be reused",
              held->id, held->pid);
      warned = true;
    }
    dp_wait_core_locked(dp, reqs, n, dp_now_ns() + dp->liveness_ns, NULL, NULL, 0, NULL, true);
  }
}

void dp_drain_locked(lm_dp *dp, dp_req *const *reqs, size_t n) {
  for (size_t i = 0; i < n; i++) dp_req_cancel_locked(dp, reqs[i]);
  /* Peers that were told to give up release our sends (their dropped rendezvous messages are
   * acknowledged) within the grace period; what still runs after it is settled. */
  dp_wait_locked(dp, reqs, n, dp_now_ns() + DP_DRAIN_GRACE_NS, NULL);
  dp_settle_locked(dp, reqs, n);
}

void lm_dp_shutdown(lm_dp *dp) {
  if (!dp) return;
  pthread_mutex_lock(&dp->mu);
  dp->quitting = true;
  pthread_cond_broadcast(&dp->cv);
  if (dp->in_poll && !dp->progress_bg) ucp_worker_signal(dp->w);
  pthread_mutex_unlock(&dp->mu);
}

/* ---- waking blocked waiters (lm_dp_wake) ----
 *
 * The caller has set some call's cancel flag before this. Each waiter reads its flag holding
 * mu (endpoint waits) or gmu (local barriers) and releases that lock only by blocking on a
 * condition variable or, for the progress role, after setting in_poll. Taking each lock here
 * therefore orders the wake after any check that missed the flag: such a waiter is already
 * blocked, and the broadcast or the worker signal reaches it. A waiter whose flag is not set
 * re-checks and blocks again (a bounded, yielding spin of spin_ns at most for the one that
 * was in poll). */
void lm_dp_wake(lm_dp *dp) {
  if (!dp) return;
  pthread_mutex_lock(&dp->mu);
  if (dp->nwaiting) {
    pthread_cond_broadcast(&dp->cv);
    /* a device thread blocked in poll holds the progress role; the background thread never
     * runs a call, so it is left alone */
    if (dp->in_poll && !dp->progress_bg) ucp_worker_signal(dp->w);
  }
  pthread_mutex_unlock(&dp->mu);
  dp_meets_wake(dp);
}

/* ---- the background thread ---- */

static void *dp_bg_main(void *arg) {
  lm_dp *dp = arg;
  pthread_mutex_lock(&dp->mu);
  while (!dp->stop) {
    int64_t t = dp_now_ns();
    if (dp->nwaiting > 0 || dp->progressing || t - dp->dev_last_ns < DP_BG_IDLE_NS) {
      struct timespec ts;
      dp_abstime(t + DP_BG_IDLE_NS, &ts);
      pthread_cond_timedwait(&dp->bg_cv, &dp->mu, &ts);
      continue;
    }
    dp->progressing = true;
    dp->progress_bg = true;
    dp->handover = false;
    for (;;) {
      while (ucp_worker_progress(dp->w)) {
      }
      dp_housekeep_locked(dp, dp_now_ns());
      if (dp->nwaiting) pthread_cond_broadcast(&dp->cv);
      if (dp->stop || dp->handover || dp->nwaiting > 0) break;
      ucs_status_t st = ucp_worker_arm(dp->w);
      if (st == UCS_ERR_BUSY) continue;
      dp->in_poll = true;
      pthread_mutex_unlock(&dp->mu);
      if (st == UCS_OK) {
        struct pollfd pfd = {.fd = dp->efd, .events = POLLIN};
        poll(&pfd, 1, 1000);
      } else {
        struct timespec ts = {0, 5000000};
        nanosleep(&ts, NULL);
      }
      pthread_mutex_lock(&dp->mu);
      dp->in_poll = false;
    }
    dp->progressing = false;
    dp->progress_bg = false;
    dp->handover = false;
    pthread_cond_broadcast(&dp->cv);
  }
  pthread_mutex_unlock(&dp->mu);
  return NULL;
}

/* ---- scratch buffers ---- */

void *dp_scratch_get(lm_dp *dp, size_t len) {
  if (len == 0) len = 1;
  pthread_mutex_lock(&dp->gmu);
  dp_scratch *best = NULL, *spare = NULL;
  for (int i = 0; i < DP_SCRATCH_SLOTS; i++) {
    dp_scratch *s = &dp->scratch[i];
    if (s->busy) continue;
    if (s->p && s->cap >= len && (!best || s->cap < best->cap)) best = s;
    if (!spare || (!s->p && spare->p) || (s->p && spare->p && s->cap < spare->cap)) spare = s;
  }
  void *p = NULL;
  if (best) {
    best->busy = true;
    p = best->p;
  } else if (spare) {
    free(spare->p);
    spare->p = NULL;
    spare->cap = 0;
    if (posix_memalign(&spare->p, 64, len) == 0) {
      spare->cap = len;
      spare->busy = true;
      p = spare->p;
    } else {
      spare->p = NULL;
    }
  } else {
    void *q = NULL;
    if (posix_memalign(&q, 64, len) == 0) p = q; /* all slots busy: a one-off buffer */
  }
  pthread_mutex_unlock(&dp->gmu);
  return p;
}

void dp_scratch_put(lm_dp *dp, void *p) {
  if (!p) return;
  pthread_mutex_lock(&dp->gmu);
  for (int i = 0; i < DP_SCRATCH_SLOTS; i++)
    if (dp->scratch[i].p == p) {
      dp->scratch[i].busy = false;
      pthread_mutex_unlock(&dp->gmu);
      return;
    }
  pthread_mutex_unlock(&dp->gmu);
  free(p);
}

/* ---- destruction ---- */

void lm_dp_destroy(lm_dp *dp) {
  if (!dp) return;
  dp_reap_stop(dp);
  if (dp->has_bg) {
    pthread_mutex_lock(&dp->mu);
    dp->stop = true;
    pthread_cond_broadcast(&dp->bg_cv);
    if (dp->in_poll) ucp_worker_signal(dp->w);
    pthread_mutex_unlock(&dp->mu);
    pthread_join(dp->bg, NULL);
  }
  if (dp->w) {
    pthread_mutex_lock(&dp->mu);
    /* a flushing close delivers what is still queued (a peer may be waiting for it) */
    for (dp_peer *p = dp->peers; p; p = p->next) {
      ucp_ep_h ep = p->ep;
      p->ep = NULL;
      dp_close_ep_mode_locked(dp, ep, false);
    }
    int64_t until = dp_now_ns() + DP_DRAIN_GRACE_NS;
    while (dp->nclosing && dp_now_ns() < until) {
      ucp_worker_progress(dp->w);
      dp_reap_closing_locked(dp);
    }
    while (dp->ux_old) {
      dp_unexp *u = dp->ux_old;
      dp_ux_unlink(dp, u);
      dp_ux_drop(dp, u);
    }
    pthread_mutex_unlock(&dp->mu);
  }
  while (dp->ret_old) {
    dp_retired *o = dp->ret_old;
    dp->ret_old = o->age_next;
    free(o);
  }
  dp_map_free(&dp->retired);
  dp_map_free(&dp->unexp);
  dp_map_free(&dp->posted);
  dp_groups_free(dp);
  dp_meets_free(dp);
  for (int i = 0; i < DP_SCRATCH_SLOTS; i++) free(dp->scratch[i].p);
  if (dp->w) ucp_worker_destroy(dp->w);
  if (dp->ctx) ucp_cleanup(dp->ctx);
  while (dp->inflight) { /* requests UCX never completed: their memory, at least */
    dp_req *r = dp->inflight;
    dp_inflight_del(dp, r);
    free(r);
  }
  while (dp->peers) {
    dp_peer *p = dp->peers;
    dp->peers = p->next;
    EVP_MAC_CTX_free(p->mac);
    free(p->blob);
    free(p);
  }
  EVP_MAC_free(dp->siphash);
  free(dp->closing);
  free(dp->closing_req);
  free(dp->addr_blob);
  pthread_cond_destroy(&dp->cv);
  pthread_cond_destroy(&dp->bg_cv);
  pthread_mutex_destroy(&dp->mu);
  pthread_mutex_destroy(&dp->gmu);
  free(dp);
}

/* ---- point to point ---- */

struct lm_dp_req {
  dp_req r;
};

static int dp_p2p_post(lm_dp *dp, uint64_t peer, uint64_t tag, void *buf, size_t len, bool send, lm_dp_req **out,
                       lm_err *err) {
  *out = NULL;
  if (len && !buf) return lm_errf(err, LOOM_INVALID_ARGUMENT, "data plane: NULL buffer of %zu bytes", len);
  dp_req *r = dp_req_new(send ? DP_REQ_SEND : DP_REQ_RECV, 0);
  if (!r) return lm_errf(err, LOOM_NO_MEMORY, "data plane: out of memory");
  pthread_mutex_lock(&dp->mu);
  dp_peer *p = dp_peer_find_locked(dp, peer);
  if (!p) {
    pthread_mutex_unlock(&dp->mu);
    free(r);
    return lm_errf(err, LOOM_NOT_FOUND, "data plane: worker %" PRIu64 " is not a known peer", peer);
  }
  if (send) dp_send_locked(dp, p, r, DP_KIND_P2P, tag, 0, 0, 0, buf, len);
  else dp_recv_locked(dp, p, r, DP_KIND_P2P, tag, 0, 0, 0, buf, len);
  pthread_mutex_unlock(&dp->mu);
  *out = (lm_dp_req *)r;
  return 0;
}

int lm_dp_isend(lm_dp *dp, uint64_t peer, uint64_t tag, const void *buf, size_t len, lm_dp_req **out, lm_err *err) {
  return dp_p2p_post(dp, peer, tag, (void *)buf, len, true, out, err);
}

int lm_dp_irecv(lm_dp *dp, uint64_t peer, uint64_t tag, void *buf, size_t len, lm_dp_req **out, lm_err *err) {
  return dp_p2p_post(dp, peer, tag, buf, len, false, out, err);
}

int lm_dp_wait(lm_dp *dp, lm_dp_req *req, const lm_dp_call *call, lm_err *err) {
  if (!req) return lm_errf(err, LOOM_INVALID_ARGUMENT, "data plane: NULL request");
  dp_req *r = &req->r;
  int64_t deadline = dp_deadline(dp, call);
  pthread_mutex_lock(&dp->mu);
  int rc = dp_wait_locked(dp, &r, 1, deadline, call ? call->cancel : NULL);
  const char *what = r->type == DP_REQ_SEND ? "send to" : "receive from";
  uint64_t peer = r->peer ? r->peer->id : 0, tag = r->type == DP_REQ_SEND ? dp_get64(r->hdr + 16) : r->link.key.tag;
  if (rc < 0) {
    dp_drain_locked(dp, &r, 1);
    lm_errf(err, rc, "data plane: %s worker %" PRIu64 " (tag %" PRIu64 ") %s", what, peer, tag,
            rc == LOOM_TIMEOUT ? "timed out" : "cancelled");
  } else if (r->status < 0) {
    dp_settle_locked(dp, &r, 1);
    rc = lm_errf(err, r->status, "data plane: %s worker %" PRIu64 " (tag %" PRIu64 "): %s", what, peer, tag, r->why);
  }
  dp_req_release_locked(dp, r);
  pthread_mutex_unlock(&dp->mu);
  return rc;
}

int lm_dp_send(lm_dp *dp, uint64_t peer, uint64_t tag, const void *buf, size_t len, const lm_dp_call *call,
               lm_err *err) {
  lm_dp_req *r;
  LM_TRY(lm_dp_isend(dp, peer, tag, buf, len, &r, err));
  return lm_dp_wait(dp, r, call, err);
}

int lm_dp_recv(lm_dp *dp, uint64_t peer, uint64_t tag, void *buf, size_t len, const lm_dp_call *call, lm_err *err) {
  lm_dp_req *r;
  LM_TRY(lm_dp_irecv(dp, peer, tag, buf, len, &r, err));
  return lm_dp_wait(dp, r, call, err);
}

void lm_dp_get_stats(lm_dp *dp, lm_dp_stats *s) {
  pthread_mutex_lock(&dp->mu);
  *s = dp->stats;
  s->held = s->orphaned = 0;
  for (const dp_req *r = dp->inflight; r; r = r->fl_next) {
    s->held++;
    s->orphaned += r->orphan;
  }
  pthread_mutex_unlock(&dp->mu);
}

int lm_dp_try_bytes(lm_dp *dp, uint64_t *sent, uint64_t *received) {
  if (pthread_mutex_trylock(&dp->mu) != 0) return LOOM_BUSY;
  *sent = dp->stats.bytes_sent;
  *received = dp->stats.bytes_recv;
  pthread_mutex_unlock(&dp->mu);
  return 0;
}
