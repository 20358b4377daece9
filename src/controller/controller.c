/* The controller's event loop: accepting peers, the HELLO handshake, per-message handlers,
 * worker health (closed connections and heartbeat timeouts), the data-plane address book,
 * sessions, orderly shutdown. Arrays, programs and launches are in ctl_*.c (ctl.h).
 *
 * Peer rules (docs/protocol.md "Errors"):
 *   - framing errors (bad magic, a limit exceeded, stalled frame, no HELLO in time),
 *     undecodable metadata, a wrong protocol version, anything before HELLO:
 *     ERROR frame, then the peer is dropped, with the reason logged;
 *   - an unknown message type or a request the peer may not make: ERROR reply, peer kept;
 *   - a request that fails: ERROR reply with the request's id, peer kept. */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include "dataplane/dataplane.h"
#include "common/log.h"
#include "controller/ctl.h"


void lm_controller_config_default(lm_controller_config *c) {
  memset(c, 0, sizeof *c);
  c->listen = "127.0.0.1:29100";
  c->heartbeat_interval_ms = 200;
  c->heartbeat_timeout_ms = 900;
  c->max_peers = 4096;
  c->max_sessions_per_user = 1024;
  c->reclaim_after_ms = 60000;
  c->replay_keep_mb = 256;
  c->snapshot_every = 100;
  c->snapshot_interval_ms = 10000;
  c->relay_min_workers = 128;
  c->relay_group = 32;
  lm_conn_config_default(&c->conn);
}

uint64_t ctl_now_ms(ctl *c) { return uv_now(&c->loop); }

uint32_t *ctl_hold(ctl *c, const uint32_t *devs, uint32_t n) {
  for (uint32_t i = 0; i < n; i++)
    if (devs[i] < LM_REG_MAX_DEVICES) c->dev_refs[devs[i]]++;
  return c->dev_refs;
}

void ctl_release(uint32_t *held, const uint32_t *devs, uint32_t n) {
  for (uint32_t i = 0; i < n; i++)
    if (devs[i] < LM_REG_MAX_DEVICES && held[devs[i]]) held[devs[i]]--;
}
static void worker_lost(ctl *c, uint32_t id, const char *why);

void ctl_reply(peer *p, const lm_frame *f, unsigned type, const ProtobufCMessage *m) {
  ctl_send_reply(p, f->h.request_id, type, m); /* with a journal: once what it reveals is durable */
}
#define reply ctl_reply

#define reply_error(p, f, ...) ctl_reply_error(p, (f)->h.request_id, __VA_ARGS__)

int ctl_worker_send(ctl *c, uint32_t worker, unsigned type, uint64_t rid, const ProtobufCMessage *m,
                    const void *payload, uint64_t plen, lm_err *err) {
  return ctl_worker_send_ref(c, worker, type, rid, m, payload, plen, NULL, NULL, err);
}

int ctl_worker_send_ref(ctl *c, uint32_t worker, unsigned type, uint64_t rid, const ProtobufCMessage *m,
                        const void *payload, uint64_t plen, void (*release)(void *), void *release_arg, lm_err *err) {
  peer *p = worker < c->worker_peer_cap ? c->worker_peer[worker] : NULL;
  if (!p || !lm_conn_is_open(p->conn)) { /* gone: worker_lost settles what waits on it */
    if (release) release(release_arg);
    return 0;
  }
  if (type != LM_MSG_PEERS) ctl_peers_flush(c, worker); /* it learns its peers before anything naming them */
  lm_err e;
  if (lm_conn_send(p->conn, type, rid, m, payload, plen, release, release_arg, &e) < 0) {
    if (!lm_conn_is_open(p->conn)) return 0; /* the send closed it: likewise */
    lm_warn("cannot send %s to worker %u: %s", lm_msg_name(type), worker, e.msg);
    return lm_errf(err, e.code, "cannot send %s to worker %u: %s", lm_msg_name(type), worker, e.msg);
  }
  p->cseq++;
  return 0;
}

void ctl_worker_name(ctl *c, uint32_t worker, char *buf, size_t cap) {
  const lm_reg_worker *w = lm_registry_worker(c->reg, worker);
  if (w) snprintf(buf, cap, "worker %u (%s pid %u)", worker, w->host, w->pid);
  else snprintf(buf, cap, "worker %u", worker);
}

/* ---- authentication ---- */

/* Reloads the token file when it changed (a stat per client HELLO; `loom token create|revoke`
 * take effect for the next connection). A file that cannot be read refuses every client. */
static void tokens_refresh(ctl *c) {
  struct stat st;
  int64_t mt = 0, sz = -1, ino = 0;
  if (stat(c->cfg.tokens_file, &st) == 0) {
    mt = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
    sz = (int64_t)st.st_size;
    ino = (int64_t)st.st_ino;
  }
  if (c->tokens_sig.loaded && c->tokens_sig.mtime_ns == mt && c->tokens_sig.size == sz && c->tokens_sig.ino == ino)
    return;
  lm_token_store fresh;
  lm_err err;
  if (lm_tokens_load(c->cfg.tokens_file, &fresh, &err) < 0) {
    if (c->tokens_err == 0) lm_error("cannot load client tokens: %s; refusing clients until it is fixed", err.msg);
    c->tokens_err = err.code;
    snprintf(c->tokens_msg, sizeof c->tokens_msg, "the controller cannot read its token file: %.900s", err.msg);
    lm_tokens_free(&c->tokens);
  } else {
    lm_tokens_free(&c->tokens);
    c->tokens = fresh;
    c->tokens_err = 0;
    lm_debug("loaded %zu client tokens from %s", fresh.n, c->cfg.tokens_file);
  }
  c->tokens_sig.mtime_ns = mt, c->tokens_sig.size = sz, c->tokens_sig.ino = ino;
  c->tokens_sig.loaded = true;
}

/* 0 when the client's token is good (its user copied to p->user), else LOOM_PERMISSION in err. */
static int check_client(ctl *c, peer *p, const Lmw__Hello *h, lm_err *err) {
  if (!c->cfg.tokens_file) return 0;
  tokens_refresh(c);
  if (c->tokens_err < 0) return lm_errf(err, LOOM_PERMISSION, "%s", c->tokens_msg);
  const lm_token_entry *who;
  LM_TRY(lm_tokens_check(&c->tokens, h->auth_token.data, h->auth_token.len, (int64_t)time(NULL), &who, err));
  snprintf(p->user, sizeof p->user, "%s", who->user);
  return 0;
}

int ctl_check_token(ctl *c, const void *token, size_t len, lm_err *err) {
  if (!c->cfg.tokens_file) return 0;
  tokens_refresh(c);
  if (c->tokens_err < 0) return lm_errf(err, LOOM_PERMISSION, "%s", c->tokens_msg);
  const lm_token_entry *who;
  return lm_tokens_check(&c->tokens, token, len, (int64_t)time(NULL), &who, err);
}

/* A listener that other hosts can reach: anything but 127.0.0.0/8, ::1 and localhost. */
static bool listen_is_loopback(const char *addr) {
  char host[LM_ADDR_MAX];
  snprintf(host, sizeof host, "%s", addr);
  char *colon = strrchr(host, ':');
  if (!colon) return false;
  *colon = 0;
  if (!strcmp(host, "localhost") || !strcmp(host, "[::1]") || !strcmp(host, "::1")) return true;
  return !strncmp(host, "127.", 4);
}

/* ---- handlers ---- */

static void on_hello(peer *p, const lm_frame *f, const Lmw__Hello *h) {
  ctl *c = p->ctl;
  if (h->protocol_version != LM_PROTOCOL_VERSION) {
    lm_conn_close_with_error(p->conn, f->h.request_id, LOOM_VERSION_MISMATCH,
                             "protocol version %u is not supported: this controller speaks version %d (loom %s)",
                             h->protocol_version, LM_PROTOCOL_VERSION, LOOM_VERSION_STRING);
    return;
  }
  Lmw__HelloReply r = LMW__HELLO_REPLY__INIT;
  uint8_t secret[32]; /* a new session's resume secret: r points at it until the reply is sent, below */
  r.protocol_version = LM_PROTOCOL_VERSION;
  r.software = "loom " LOOM_VERSION_STRING;
  r.max_meta = c->cfg.conn.limits.max_meta;
  r.max_payload = c->cfg.conn.limits.max_payload;
  if (h->role == LMW__ROLE__ROLE_CLIENT) {
    lm_err aerr;
    if (check_client(c, p, h, &aerr) < 0) {
      lm_warn("refused client %s (%s): %s", lm_conn_peer_name(p->conn), h->name, aerr.msg);
      lm_conn_close_with_error(p->conn, f->h.request_id, aerr.code, "%s", aerr.msg);
      return;
    }
    r.user = p->user;
    if (c->cfg.tokens_file && c->cfg.max_sessions_per_user) {
      uint32_t mine = 0;
      for (peer *q = c->peers; q; q = q->next)
        if (q->role == ROLE_CLIENT && !strcmp(q->user, p->user)) mine++;
      if (mine >= c->cfg.max_sessions_per_user) {
        lm_warn("refused client %s: user %s already has %u sessions", lm_conn_peer_name(p->conn), p->user, mine);
        lm_conn_close_with_error(p->conn, f->h.request_id, LOOM_BUSY,
                                 "user %s already has %u open sessions, the limit (--max-sessions-per-user)", p->user,
                                 mine);
        return;
      }
    }
    lm_session *s = NULL;
    if (h->resume_session) { /* a client that lost a restarted controller continues its session */
      if (ctl_journal_resume_session(p, h, &s, &aerr) < 0) {
        lm_warn("refused client %s (%s): %s", lm_conn_peer_name(p->conn), h->name, aerr.msg);
        lm_conn_close_with_error(p->conn, f->h.request_id, aerr.code, "%s", aerr.msg);
        return;
      }
      lm_info("session %llu (%s) resumed by %s after the controller restart", (unsigned long long)s->id, s->name,
              lm_conn_peer_name(p->conn));
    } else {
      s = lm_session_create(++c->next_session, h->name, lm_conn_peer_name(p->conn), ctl_now_ms(c));
    }
    if (!s) {
      lm_conn_close_with_error(p->conn, f->h.request_id, LOOM_NO_MEMORY, "out of host memory creating a session");
      return;
    }
    p->session = s;
    p->role = ROLE_CLIENT;
    c->nsessions++;
    if (c->met) lm_met_inc(&c->met->sessions_opened);
    r.session_id = s->id;
    if (p->resumed) {
      r.resumed = true;
      r.resume_secret = h->resume_secret;
    } else if (ctl_journal_session_opened(p, h, secret)) {
      r.resume_secret.data = secret;
      r.resume_secret.len = sizeof secret;
    }
    lm_debug("session %llu opened by %s (%s)", (unsigned long long)s->id, lm_conn_peer_name(p->conn),
             s->name[0] ? s->name : "unnamed");
    int prc = ctl_pool_hello(p, f, h, &r, &aerr); /* the pool: admit now, queue, or refuse */
    if (prc < 0) {
      lm_warn("refused session %llu (%s): %s", (unsigned long long)s->id, lm_conn_peer_name(p->conn), aerr.msg);
      lm_conn_close_with_error(p->conn, f->h.request_id, aerr.code, "%s", aerr.msg);
      return;
    }
    if (prc == 0) { /* the pool answers this HELLO once the session is admitted */
      lm_conn_set_established(p->conn);
      return;
    }
  } else if (h->role == LMW__ROLE__ROLE_WORKER) {
    if (c->have_secret) { /* the challenge: the worker proves the secret in REGISTER_WORKER */
      lm_err aerr;
      if (h->auth_nonce.len != LM_AUTH_NONCE_SIZE) {
        lm_warn("refused worker %s: it did not offer to authenticate", lm_conn_peer_name(p->conn));
        lm_conn_close_with_error(p->conn, f->h.request_id, LOOM_PERMISSION,
                                 "this controller requires worker authentication: start the worker with "
                                 "--secret-file (the cluster secret)");
        return;
      }
      if (lm_auth_random(p->challenge, sizeof p->challenge, &aerr) < 0) {
        lm_conn_close_with_error(p->conn, f->h.request_id, aerr.code, "%s", aerr.msg);
        return;
      }
      memcpy(p->nonce, h->auth_nonce.data, LM_AUTH_NONCE_SIZE);
      p->challenged = true;
    }
    p->role = ROLE_WORKER;
  } else {
    lm_conn_close_with_error(p->conn, f->h.request_id, LOOM_PROTOCOL, "HELLO with unknown role %d", (int)h->role);
    return;
  }
  uint8_t proof[LM_AUTH_MAC_SIZE];
  if (p->challenged) { /* and we prove it to the worker */
    lm_auth_controller_proof(c->secret, p->nonce, p->challenge, proof);
    r.auth_challenge.data = p->challenge;
    r.auth_challenge.len = sizeof p->challenge;
    r.auth_proof.data = proof;
    r.auth_proof.len = sizeof proof;
  }
  if (p->role == ROLE_CLIENT) lm_conn_set_established(p->conn);
  /* a worker's connection is established once its registration is accepted: until then the
   * handshake deadline keeps running */
  reply(p, f, LM_MSG_HELLO_REPLY, &r.base);
}

int ctl_worker_slot(ctl *c, uint32_t id);
#define ensure_worker_slot ctl_worker_slot
int ctl_worker_slot(ctl *c, uint32_t id) {
  if (id < c->worker_peer_cap) return 0;
  uint32_t cap = c->worker_peer_cap ? c->worker_peer_cap : 16;
  while (cap <= id) cap *= 2;
  peer **q = realloc(c->worker_peer, cap * sizeof *q);
  if (!q) return -1;
  memset(q + c->worker_peer_cap, 0, (cap - c->worker_peer_cap) * sizeof *q);
  c->worker_peer = q;
  uint8_t (*k)[LM_TOKEN_KEY_SIZE] = realloc(c->worker_key, cap * sizeof *k);
  if (!k) return -1; /* worker_peer grew; worker_peer_cap did not: the next call retries */
  memset(k + c->worker_peer_cap, 0, (cap - c->worker_peer_cap) * sizeof *k);
  c->worker_key = k;
  uint64_t *la = realloc(c->lost_at, cap * sizeof *la);
  if (!la) return -1;
  memset(la + c->worker_peer_cap, 0, (cap - c->worker_peer_cap) * sizeof *la);
  c->lost_at = la;
  c->worker_peer_cap = cap;
  return 0;
}

/* A lost worker of ndev devices whose ids may go to a new worker: gone for --reclaim-after, no
 * connection, and none of its device ids named by an array or program; UINT32_MAX if none. */
static uint32_t reclaimable(ctl *c, uint32_t ndev) {
  uint64_t now = ctl_now_ms(c);
  uint32_t n = lm_registry_worker_count(c->reg);
  for (uint32_t i = 0; i < n && i < c->worker_peer_cap; i++) {
    const lm_reg_worker *w = lm_registry_worker(c->reg, i);
    if (w->state != LM_WORKER_LOST || w->standby || w->replaced_by || w->ndevices != ndev || c->worker_peer[i] ||
        !c->lost_at[i] ||
        now - c->lost_at[i] < c->cfg.reclaim_after_ms)
      continue;
    bool named = false;
    for (uint32_t d = 0; d < w->ndevices && !named; d++) named = c->dev_refs[w->device_ids[d]] != 0;
    if (!named) return i;
  }
  return UINT32_MAX;
}

static void on_register_worker(peer *p, const lm_frame *f, const Lmw__RegisterWorker *m) {
  ctl *c = p->ctl;
  if (p->role != ROLE_WORKER) {
    reply_error(p, f, LOOM_PERMISSION, "REGISTER_WORKER is only for workers (say role WORKER in HELLO)");
    return;
  }
  if (p->registered) {
    reply_error(p, f, LOOM_INVALID_ARGUMENT, "already registered as worker %u", p->worker_id);
    return;
  }
  if (m->dataplane_address.len) { /* it would reach the other workers unchecked (on_worker_dataplane checks) */
    lm_conn_close_with_error(p->conn, f->h.request_id, LOOM_INVALID_ARGUMENT,
                             "cannot register worker: dataplane_address must be empty (the data-plane address comes "
                             "in WORKER_DATAPLANE, once the worker knows its id)");
    return;
  }
  uint8_t key[LM_TOKEN_KEY_SIZE];
  lm_err kerr;
  if (c->have_secret) {
    uint8_t want[LM_AUTH_MAC_SIZE];
    lm_auth_worker_proof(c->secret, p->nonce, p->challenge, want);
    if (!p->challenged || m->auth_proof.len != LM_AUTH_MAC_SIZE || !lm_auth_equal(want, m->auth_proof.data, sizeof want)) {
      lm_warn("refused worker %s (host %s pid %u): wrong cluster secret", lm_conn_peer_name(p->conn), m->host, m->pid);
      lm_conn_close_with_error(p->conn, f->h.request_id, LOOM_PERMISSION,
                               "worker authentication failed: the proof does not match this cluster's secret");
      return;
    }
    lm_auth_transfer_key(c->secret, p->nonce, p->challenge, key);
  } else if (lm_auth_random(key, sizeof key, &kerr) < 0) { /* sent in the reply: no secret to derive it from */
    lm_conn_close_with_error(p->conn, f->h.request_id, kerr.code, "%s", kerr.msg);
    return;
  }
  if (m->resume_worker) { /* it kept its shards through a controller restart: it must be in the journal */
    lm_auth_wipe(key, sizeof key);
    ctl_journal_resume_worker(p, f, m);
    return;
  }
  size_t n = m->n_devices;
  if (n > LM_REG_MAX_DEVICES_PER_WORKER) {
    lm_conn_close_with_error(p->conn, f->h.request_id, LOOM_INVALID_ARGUMENT,
                             "cannot register worker: %zu devices on one worker is more than the limit of %d", n,
                             LM_REG_MAX_DEVICES_PER_WORKER);
    return;
  }
  const char **kinds = calloc(n ? n : 1, sizeof *kinds);
  uint64_t *caps = calloc(n ? n : 1, sizeof *caps);
  uint8_t *seen = calloc(n ? n : 1, 1);
  lm_err err;
  int rc = 0;
  if (!kinds || !caps || !seen) rc = lm_errf(&err, LOOM_NO_MEMORY, "out of host memory registering a worker");
  for (size_t i = 0; rc == 0 && i < n; i++) { /* devices may arrive in any order: index them */
    const Lmw__DeviceSpec *d = m->devices[i];
    if (d->local_index >= n || seen[d->local_index])
      rc = lm_errf(&err, LOOM_INVALID_ARGUMENT, "device local indices must be 0..%zu, each once (got %u)",
                   n ? n - 1 : 0, d->local_index);
    else {
      seen[d->local_index] = 1;
      kinds[d->local_index] = d->kind;
      caps[d->local_index] = d->memory_capacity;
    }
  }
  uint32_t id = 0;
  if (rc == 0) {
    lm_worker_spec spec = {.host = m->host, .pid = m->pid, .slice = m->slice, .ndevices = (uint32_t)n,
                           .kinds = kinds, .capacities = caps, .data_address = m->data_address,
                           /* a recovery waiting for capacity takes a new worker of the right size */
                           .standby = m->standby || ctl_recover_wants(c, (uint32_t)n)};
    uint32_t old = spec.standby || lm_registry_has_room(c->reg, (uint32_t)n) ? UINT32_MAX : reclaimable(c, (uint32_t)n);
    if (old != UINT32_MAX && lm_registry_reuse_worker(c->reg, old, &spec, ctl_now_ms(c), &err) == 0) {
      lm_info("reclaimed the ids of worker %u (lost %llu ms ago) for a new worker", old,
              (unsigned long long)(ctl_now_ms(c) - c->lost_at[old]));
      c->lost_at[old] = 0;
      id = old;
    } else {
      rc = lm_registry_add_worker(c->reg, &spec, ctl_now_ms(c), &id, &err);
      if (rc == LOOM_BUSY) {
        char full[LM_ERR_MSG_MAX];
        snprintf(full, sizeof full, "%.200s", err.msg);
        rc = lm_errf(&err, LOOM_BUSY, "%s, and no worker of %zu devices has been gone for %u ms (--reclaim-after) "
                     "with none of its device ids still named by an array or program", full, n,
                     c->cfg.reclaim_after_ms);
      }
    }
  }
  if (rc == 0 && ensure_worker_slot(c, id) < 0) {
    lm_registry_mark_lost(c->reg, id, "controller out of memory");
    rc = lm_errf(&err, LOOM_NO_MEMORY, "out of host memory registering a worker");
  }
  free(kinds);
  free(caps);
  free(seen);
  if (rc < 0) {
    lm_conn_close_with_error(p->conn, f->h.request_id, rc, "cannot register worker: %s", err.msg);
    return;
  }
  p->registered = true;
  p->worker_id = id;
  c->worker_peer[id] = p;
  memcpy(c->worker_key[id], key, sizeof key);
  lm_conn_set_established(p->conn);
  const lm_reg_worker *w = lm_registry_worker(c->reg, id);
  Lmw__RegisterWorkerReply r = LMW__REGISTER_WORKER_REPLY__INIT;
  r.worker_id = id;
  r.n_device_ids = w->standby ? 0 : w->ndevices;
  r.device_ids = w->device_ids;
  r.heartbeat_interval_ms = c->cfg.heartbeat_interval_ms;
  r.epoch = w->epoch;
  r.standby = w->standby;
  r.durable = c->jr != NULL;
  ctl_j_worker(c, id);
  if (!c->have_secret) { /* with a secret the worker derives the same key from the handshake */
    r.token_key.data = c->worker_key[id];
    r.token_key.len = LM_TOKEN_KEY_SIZE;
  }
  reply(p, f, LM_MSG_REGISTER_WORKER_REPLY, &r.base);
  p->cseq = 0; /* the worker counts what it reads from here on */
  if (c->met) lm_met_inc(&c->met->workers_registered);
  if (m->fenced_worker)
    lm_info("worker %u rejoins (host %s pid %u) after being fenced as worker %u epoch %llu: it dropped that state",
            id, w->host, w->pid, m->fenced_worker - 1, (unsigned long long)m->fenced_epoch);
  if (w->standby)
    lm_info("worker %u registered from %s as a standby (epoch %llu): host %s pid %u slice %s, %u devices", id,
            lm_conn_peer_name(p->conn), (unsigned long long)w->epoch, w->host, w->pid, w->slice, w->ndevices);
  else
    lm_info("worker %u registered from %s (epoch %llu): host %s pid %u slice %s, %u devices (virtual ids %u-%u)", id,
            lm_conn_peer_name(p->conn), (unsigned long long)w->epoch, w->host, w->pid, w->slice, w->ndevices,
            w->device_ids[0], w->device_ids[w->ndevices - 1]);
}

static void on_heartbeat(peer *p, const lm_frame *f, const Lmw__Heartbeat *m) {
  ctl *c = p->ctl;
  if (p->role != ROLE_WORKER || !p->registered) {
    reply_error(p, f, LOOM_PERMISSION, "HEARTBEAT is only for registered workers");
    return;
  }
  if (ctl_recover_draining(c, p->worker_id)) return; /* handing its shards over; it leaves after */
  size_t n = m->n_devices;
  uint32_t idx[LM_REG_MAX_DEVICES_PER_WORKER];
  uint64_t used[LM_REG_MAX_DEVICES_PER_WORKER], peak[LM_REG_MAX_DEVICES_PER_WORKER];
  lm_err err;
  int rc = 0;
  if (n > LM_REG_MAX_DEVICES_PER_WORKER)
    rc = lm_errf(&err, LOOM_INVALID_ARGUMENT, "heartbeat names %zu devices; a worker has at most %d", n,
                 LM_REG_MAX_DEVICES_PER_WORKER);
  for (size_t i = 0; rc == 0 && i < n; i++) {
    idx[i] = m->devices[i]->local_index;
    used[i] = m->devices[i]->memory_used;
    peak[i] = m->devices[i]->memory_peak;
  }
  if (rc == 0) rc = lm_registry_heartbeat(c->reg, p->worker_id, ctl_now_ms(c), idx, used, n, &err);
  if (rc == 0) lm_registry_set_peaks(c->reg, p->worker_id, idx, peak, n);
  if (rc == 0 && m->transfers) {
    const Lmw__TransferStats *t = m->transfers;
    lm_reg_transfers x = {t->local_puts,  t->local_put_bytes,  t->local_gets,  t->local_get_bytes, t->stream_puts,
                          t->stream_put_bytes, t->stream_gets, t->stream_get_bytes, t->local_refused};
    rc = lm_registry_set_transfers(c->reg, p->worker_id, &x, &err);
  }
  if (rc == 0 && m->collectives) {
    const Lmw__CollectiveStats *cs = m->collectives;
    lm_reg_collectives x = {.nanos = cs->nanos, .dp_sent = cs->dataplane_bytes_sent,
                            .dp_received = cs->dataplane_bytes_received};
    for (size_t i = 0; i < cs->n_calls && i < LM_REG_COLL_OPS; i++) x.calls[i] = cs->calls[i];
    for (size_t i = 0; i < cs->n_bytes && i < LM_REG_COLL_OPS; i++) x.bytes[i] = cs->bytes[i];
    rc = lm_registry_set_collectives(c->reg, p->worker_id, &x, &err);
  }
  if (rc < 0) { /* the worker is dropped: its devices are unhealthy from now, not after the close */
    char why[LM_REG_REASON_MAX];
    snprintf(why, sizeof why, "bad heartbeat: %.140s", err.msg);
    if (lm_registry_mark_lost(c->reg, p->worker_id, why)) {
      lm_warn("worker %u lost: %s", p->worker_id, why);
      worker_lost(c, p->worker_id, why);
    }
    lm_conn_close_with_error(p->conn, f->h.request_id, rc, "%s", why);
  }
}

static void on_list_devices(peer *p, const lm_frame *f) {
  ctl *c = p->ctl;
  uint32_t n = lm_registry_device_count(c->reg);
  Lmw__Device *devs = calloc(n ? n : 1, sizeof *devs);
  Lmw__Device **ptrs = calloc(n ? n : 1, sizeof *ptrs);
  if (!devs || !ptrs) {
    free(devs), free(ptrs);
    reply_error(p, f, LOOM_NO_MEMORY, "out of host memory listing devices");
    return;
  }
  for (uint32_t i = 0; i < n; i++) {
    const lm_reg_device *d = lm_registry_device(c->reg, i);
    const lm_reg_worker *w = lm_registry_worker(c->reg, d->worker);
    Lmw__Device *o = &devs[i];
    lmw__device__init(o);
    o->id = d->id;
    o->kind = (char *)d->kind;
    o->worker_id = d->worker;
    o->local_index = d->local_index;
    o->host = w->host;
    o->pid = w->pid;
    o->slice = w->slice;
    o->memory_capacity = d->memory_capacity;
    o->memory_used = d->memory_used;
    o->memory_peak = d->memory_peak;
    o->healthy = lm_registry_device_healthy(c->reg, i);
    o->health_reason = (char *)lm_registry_device_reason(c->reg, i);
    ptrs[i] = o;
  }
  uint32_t npool;
  const uint32_t *pool = ctl_pool_devices(p, &npool);
  for (uint32_t i = 0; i < npool; i++) { /* a pool session sees its devices only, as 0..n-1 */
    ptrs[i] = &devs[pool[i]];
    ptrs[i]->id = i;
  }
  Lmw__ListDevicesReply r = LMW__LIST_DEVICES_REPLY__INIT;
  r.n_devices = pool ? npool : n;
  r.devices = ptrs;
  reply(p, f, LM_MSG_LIST_DEVICES_REPLY, &r.base);
  free(devs);
  free(ptrs);
}

static void on_cluster_status(peer *p, const lm_frame *f) {
  ctl *c = p->ctl;
  uint32_t n = lm_registry_worker_count(c->reg);
  uint64_t now = ctl_now_ms(c);
  Lmw__WorkerStatus *ws = calloc(n ? n : 1, sizeof *ws);
  Lmw__WorkerStatus **ptrs = calloc(n ? n : 1, sizeof *ptrs);
  Lmw__TransferStats *ts = calloc(n ? n : 1, sizeof *ts);
  if (!ws || !ptrs || !ts) {
    free(ws), free(ptrs), free(ts);
    reply_error(p, f, LOOM_NO_MEMORY, "out of host memory building the status");
    return;
  }
  for (uint32_t i = 0; i < n; i++) {
    const lm_reg_worker *w = lm_registry_worker(c->reg, i);
    Lmw__WorkerStatus *o = &ws[i];
    lmw__worker_status__init(o);
    o->id = w->id;
    o->host = w->host;
    o->pid = w->pid;
    o->slice = w->slice;
    o->n_device_ids = w->standby || w->replaced_by ? 0 : w->ndevices; /* a replaced worker's went on */
    o->device_ids = w->device_ids;
    o->standby = w->standby;
    o->replaced_by = w->replaced_by;
    o->epoch = w->epoch;
    o->ndevices = w->ndevices;
    o->alive = w->state == LM_WORKER_ALIVE;
    o->reason = (char *)(w->state == LM_WORKER_ALIVE ? w->problem : w->reason);
    o->since_heartbeat_ms = now >= w->last_heartbeat_ms ? now - w->last_heartbeat_ms : 0;
    o->uptime_ms = now >= w->registered_ms ? now - w->registered_ms : 0;
    const lm_reg_transfers *x = &w->transfers;
    lmw__transfer_stats__init(&ts[i]);
    ts[i].local_puts = x->local_puts;
    ts[i].local_put_bytes = x->local_put_bytes;
    ts[i].local_gets = x->local_gets;
    ts[i].local_get_bytes = x->local_get_bytes;
    ts[i].stream_puts = x->stream_puts;
    ts[i].stream_put_bytes = x->stream_put_bytes;
    ts[i].stream_gets = x->stream_gets;
    ts[i].stream_get_bytes = x->stream_get_bytes;
    ts[i].local_refused = x->local_refused;
    o->transfers = &ts[i];
    ptrs[i] = o;
  }
  Lmw__ClusterStatusReply r = LMW__CLUSTER_STATUS_REPLY__INIT;
  r.protocol_version = LM_PROTOCOL_VERSION;
  r.software = "loom " LOOM_VERSION_STRING;
  r.uptime_ms = now - c->start_ms;
  r.sessions = c->nsessions;
  r.n_workers = n;
  r.workers = ptrs;
  r.heartbeat_timeout_ms = c->cfg.heartbeat_timeout_ms;
  char rstate[LM_ERR_MSG_MAX];
  r.recovery = (char *)ctl_recover_state(c, rstate, sizeof rstate);
  const char *events[32];
  r.n_events = ctl_recover_events(c, events, 32);
  r.events = (char **)events;
  r.recoveries = ctl_recover_count(c);
  r.launch_log = c->log_kept;
  r.launch_log_dropped = c->log_dropped;
  ctl_snap_counts(c, &r.snapshots, &r.snapshot_bytes, &r.snapshots_in_flight);
  char jstate[1024];
  r.journal = (char *)ctl_journal_state(c, jstate, sizeof jstate);
  reply(p, f, LM_MSG_CLUSTER_STATUS_REPLY, &r.base);
  free(ws);
  free(ptrs);
  free(ts);
}

/* A worker is lost (once): other workers hear it; a recovery takes its launches in flight (a
 * standby replaces it: ctl_recover.c), else they fail; loads in progress fail. */
static void worker_lost(ctl *c, uint32_t id, const char *why) {
  if (c->stopping) return;
  if (c->met) lm_met_inc(&c->met->workers_lost);
  if (id < c->worker_peer_cap) c->lost_at[id] = ctl_now_ms(c);
  ctl_frees_worker_lost(c, id);
  ctl_ckpt_worker_lost(c, id);
  Lmw__WorkerLost wl = LMW__WORKER_LOST__INIT;
  wl.worker_id = id;
  wl.reason = (char *)why;
  for (uint32_t i = 0; i < c->worker_peer_cap; i++)
    if (c->worker_peer[i] && i != id) ctl_worker_send(c, i, LM_MSG_WORKER_LOST, 0, &wl.base, NULL, 0, NULL);
  ctl_j_worker(c, id);
  ctl_snap_worker_lost(c, id);
  ctl_recover_worker_lost(c, id, why); /* takes the launches it re-issues out of the active list */
  ctl_launches_worker_lost(c, id, why);
  ctl_programs_worker_lost(c, id, why);
}

/* A worker's data-plane address: kept in the registry, sent to the others, and the others' to it. */
static void on_worker_dataplane(peer *p, const lm_frame *f, const Lmw__WorkerDataplane *m) {
  ctl *c = p->ctl;
  if (p->role != ROLE_WORKER || !p->registered) {
    reply_error(p, f, LOOM_PERMISSION, "WORKER_DATAPLANE is only for registered workers");
    return;
  }
  lm_err err;
  if (!m->address.len && m->error && *m->error) { /* its data plane did not start: its devices cannot take part */
    char why[LM_REG_REASON_MAX];
    snprintf(why, sizeof why, "data plane did not start: %.120s", m->error);
    lm_warn("worker %u: %s; its devices are unhealthy", p->worker_id, why);
    lm_registry_set_problem(c->reg, p->worker_id, why, NULL);
    return;
  }
  uint64_t claimed;
  if (lm_dp_address_id(m->address.data, m->address.len, &claimed, &err) < 0) {
    lm_warn("worker %u: bad data-plane address: %s", p->worker_id, err.msg);
    return;
  }
  if (claimed != p->worker_id) { /* it would receive the collectives meant for another worker */
    lm_warn("worker %u sent a data-plane address of worker %llu: dropping it", p->worker_id,
            (unsigned long long)claimed);
    lm_conn_close_with_error(p->conn, f->h.request_id, LOOM_PERMISSION,
                             "the data-plane address names worker %llu, but this is worker %u",
                             (unsigned long long)claimed, p->worker_id);
    return;
  }
  if (lm_registry_set_dataplane(c->reg, p->worker_id, m->address.data, m->address.len, &err) < 0) {
    lm_warn("worker %u: bad data-plane address: %s", p->worker_id, err.msg);
    return;
  }
  /* each pair gets its own key: the new worker learns the others' at once (one PEERS), and each
   * of them learns the new one's in its next batch (ctl_peers.c) */
  uint32_t n = lm_registry_worker_count(c->reg), k = 0;
  uint32_t *ids = calloc(n ? n : 1, sizeof *ids);
  for (uint32_t i = 0; ids && i < n; i++) {
    const lm_reg_worker *w = lm_registry_worker(c->reg, i);
    if (i == p->worker_id || w->state != LM_WORKER_ALIVE || !w->dataplane_len || !c->worker_peer[i]) continue;
    ctl_peers_announce(c, i, p->worker_id);
    ids[k++] = i;
  }
  for (uint32_t i = 0; i < k; i++) ctl_peers_announce(c, p->worker_id, ids[i]);
  ctl_peers_flush(c, p->worker_id);
  free(ids);
  ctl_recover_capacity(c); /* a recovery waiting for a worker may take this one */
  ctl_journal_progress(c); /* a restore waiting for its workers may be complete now */
}

void ctl_dispatch(peer *p, lm_frame *f);

static void on_frame(lm_conn *conn, lm_frame *f) {
  peer *p = lm_conn_user(conn);
  ctl *c = p->ctl;
  unsigned type = f->h.type;
  p->last_ms = ctl_now_ms(c);
  if (ctl_recover_defer(c, p, f)) return; /* replayed once the recovery is over */
  if (p->role == ROLE_NEW && type != LM_MSG_HELLO) {
    lm_conn_close_with_error(conn, f->h.request_id, LOOM_PROTOCOL, "expected HELLO first, got %s (type %u)",
                             lm_msg_name(type), type);
    return;
  }
  if (p->role == ROLE_WORKER && !p->registered && p->challenged && type != LM_MSG_REGISTER_WORKER) {
    lm_conn_close_with_error(conn, f->h.request_id, LOOM_PERMISSION,
                             "a worker must authenticate (REGISTER_WORKER with its proof) before %s",
                             lm_msg_name(type));
    return;
  }
  if (p->role != ROLE_NEW && type == LM_MSG_HELLO) {
    lm_conn_close_with_error(conn, f->h.request_id, LOOM_PROTOCOL, "HELLO sent twice");
    return;
  }
  if (p->role == ROLE_CLIENT && ctl_journal_defer(c, p, f)) return; /* workers are coming back after a restart */
  if (p->role == ROLE_CLIENT && ctl_pool_hold(p, f)) return; /* suspended: served when it resumes */
  if (p->role == ROLE_CLIENT && ctl_pool_queued(p) && type != LM_MSG_PING) {
    reply_error(p, f, LOOM_BUSY, "this session is waiting in the pool's queue for its devices; %s is served once it "
                "is admitted", lm_msg_name(type));
    return;
  }
  if (f->h.payload_len && type != LM_MSG_COMPILE) { /* only COMPILE carries a payload (the text) */
    reply_error(p, f, LOOM_PROTOCOL, "%s does not take a payload (%llu bytes sent)", lm_msg_name(type),
                (unsigned long long)f->h.payload_len);
    return;
  }
  ProtobufCMessage *m;
  lm_err err;
  int rc = lm_msg_decode(f, &m, &err);
  if (rc == LOOM_UNSUPPORTED) { /* a newer peer's message: refuse it, keep the peer */
    reply_error(p, f, LOOM_UNSUPPORTED, "unknown message type %u", type);
    return;
  }
  if (rc < 0) {
    lm_conn_close_with_error(conn, f->h.request_id, rc, "%s", err.msg);
    return;
  }
  if (p->role == ROLE_CLIENT && (type == LM_MSG_ARRAY_CREATE || type == LM_MSG_COMPILE || type == LM_MSG_CHECKPOINT) &&
      ctl_pool_rewrite(p, type, m, &err) < 0) { /* a pool session's own device ids -> the cluster's */
    reply_error(p, f, err.code, "%s", err.msg);
    lm_msg_free(m);
    return;
  }
  switch (type) {
  case LM_MSG_HELLO: on_hello(p, f, (Lmw__Hello *)m); break;
  case LM_MSG_REGISTER_WORKER: on_register_worker(p, f, (Lmw__RegisterWorker *)m); break;
  case LM_MSG_HEARTBEAT: on_heartbeat(p, f, (Lmw__Heartbeat *)m); break;
  case LM_MSG_LIST_DEVICES: on_list_devices(p, f); break;
  case LM_MSG_CLUSTER_STATUS: on_cluster_status(p, f); break;
  case LM_MSG_POOL_STATUS:
    if (p->role == ROLE_CLIENT) ctl_pool_on_status(p, f, (Lmw__PoolStatus *)m);
    else reply_error(p, f, LOOM_PERMISSION, "POOL_STATUS is only for clients");
    break;
  case LM_MSG_PING: {
    Lmw__Pong pong = LMW__PONG__INIT;
    pong.nonce = ((Lmw__Ping *)m)->nonce;
    reply(p, f, LM_MSG_PONG, &pong.base);
    break;
  }
  case LM_MSG_WORKER_DATAPLANE: on_worker_dataplane(p, f, (Lmw__WorkerDataplane *)m); break;
  case LM_MSG_TRACE_CONTROL:
    if (p->role == ROLE_CLIENT) ctl_on_trace_control(p, f, (Lmw__TraceControl *)m);
    else reply_error(p, f, LOOM_PERMISSION, "TRACE_CONTROL is only for clients");
    break;
  case LM_MSG_RUN_DONE:
    if (p->role == ROLE_WORKER && p->registered) ctl_on_run_done(c, p, (Lmw__RunDone *)m);
    else reply_error(p, f, LOOM_PERMISSION, "RUN_DONE is only for registered workers");
    break;
  case LM_MSG_SNAPSHOT_KEPT:
    if (p->role == ROLE_WORKER && p->registered) ctl_on_snapshot_kept(c, p, (Lmw__SnapshotKept *)m);
    else reply_error(p, f, LOOM_PERMISSION, "SNAPSHOT_KEPT is only for registered workers");
    break;
  case LM_MSG_RELAY_DONE:
    if (p->role == ROLE_WORKER && p->registered) ctl_on_relay_done(c, p, (Lmw__RelayDone *)m);
    else reply_error(p, f, LOOM_PERMISSION, "RELAY_DONE is only for registered workers");
    break;
  case LM_MSG_CHECKPOINT_IO_REPLY:
  case LM_MSG_ACK:
  case LM_MSG_ERROR:
    if (p->role == ROLE_WORKER && p->registered && f->h.request_id && ctl_ckpt_on_reply(c, p, f)) break;
    if (type == LM_MSG_CHECKPOINT_IO_REPLY) {
      lm_warn("%s sent an unsolicited CHECKPOINT_IO_REPLY", lm_conn_peer_name(conn));
      break;
    }
    if (p->role == ROLE_WORKER && p->registered && f->h.request_id && ctl_recover_on_reply(c, p, f)) break;
    if (p->role == ROLE_WORKER && p->registered && f->h.request_id && ctl_pool_on_reply(c, p, f)) break;
    if (p->role == ROLE_WORKER && p->registered && f->h.request_id) ctl_on_load_reply(c, p, f);
    else if (type == LM_MSG_ERROR) {
      lm_err e;
      lm_msg_error_status(f, &e);
      lm_warn("%s sent an unsolicited ERROR: %s", lm_conn_peer_name(conn), e.msg);
    }
    break;
  case LM_MSG_ARRAY_CREATE:
  case LM_MSG_ARRAY_LOCATE:
  case LM_MSG_ARRAY_DELETE:
  case LM_MSG_COMPILE:
  case LM_MSG_EXECUTABLE_DESTROY:
  case LM_MSG_LAUNCH:
  case LM_MSG_CANCEL_LAUNCH:
    if (p->role != ROLE_CLIENT) {
      reply_error(p, f, LOOM_PERMISSION, "%s is only for clients", lm_msg_name(type));
      break;
    }
    if (type == LM_MSG_ARRAY_CREATE) ctl_on_array_create(p, f, (Lmw__ArrayCreate *)m);
    else if (type == LM_MSG_ARRAY_LOCATE) ctl_on_array_locate(p, f, (Lmw__ArrayLocate *)m);
    else if (type == LM_MSG_ARRAY_DELETE) ctl_on_array_delete(p, f, (Lmw__ArrayDelete *)m);
    else if (type == LM_MSG_COMPILE) ctl_on_compile(p, f, (Lmw__Compile *)m);
    else if (type == LM_MSG_EXECUTABLE_DESTROY) ctl_on_executable_destroy(p, f, (Lmw__ExecutableDestroy *)m);
    else if (type == LM_MSG_LAUNCH) ctl_on_launch(p, f, (Lmw__Launch *)m);
    else ctl_on_cancel_launch(p, f, (Lmw__CancelLaunch *)m);
    break;
  case LM_MSG_CHECKPOINT:
    if (p->role == ROLE_CLIENT) ctl_on_checkpoint(p, f, (Lmw__Checkpoint *)m);
    else reply_error(p, f, LOOM_PERMISSION, "CHECKPOINT is only for clients");
    break;
  case LM_MSG_DRAIN:
    if (p->role == ROLE_CLIENT) ctl_on_drain(p, f, (Lmw__Drain *)m);
    else reply_error(p, f, LOOM_PERMISSION, "DRAIN is only for clients");
    break;
  default:
    reply_error(p, f, LOOM_PROTOCOL, "%s is not a request the controller answers", lm_msg_name(type));
    break;
  }
  lm_msg_free(m);
}

void ctl_dispatch(peer *p, lm_frame *f) {
  if (lm_conn_is_open(p->conn)) on_frame(p->conn, f);
}

static void on_close(lm_conn *conn, int code, const char *reason) {
  peer *p = lm_conn_user(conn);
  ctl *c = p->ctl;
  if (p->role == ROLE_WORKER && p->registered) {
    const lm_reg_worker *w = lm_registry_worker(c->reg, p->worker_id);
    char why[LM_REG_REASON_MAX];
    if (c->stopping) snprintf(why, sizeof why, "controller stopped");
    else if (code == LOOM_CLOSED) snprintf(why, sizeof why, "connection closed");
    else snprintf(why, sizeof why, "%s", reason);
    c->worker_peer[p->worker_id] = NULL;
    if (lm_registry_mark_lost(c->reg, p->worker_id, why)) {
      if (w->standby)
        lm_log(c->stopping ? LM_LOG_INFO : LM_LOG_WARN, "standby worker %u (%s pid %u) lost: %s", w->id, w->host,
               w->pid, code == LOOM_CLOSED ? reason : why);
      else
        lm_log(c->stopping ? LM_LOG_INFO : LM_LOG_WARN, "worker %u (%s pid %u) lost: %s; devices %u-%u are unhealthy",
               w->id, w->host, w->pid, code == LOOM_CLOSED ? reason : why, w->device_ids[0],
               w->device_ids[w->ndevices - 1]);
      worker_lost(c, p->worker_id, why);
    } else {
      lm_info("worker %u disconnected (%s)", w->id, reason);
      ctl_ckpt_worker_lost(c, p->worker_id);
      ctl_snap_worker_lost(c, p->worker_id); /* (a drained worker: copies it was part of are over) */
      ctl_recover_drain_gone(c, p->worker_id);
    }
  } else if (p->role == ROLE_CLIENT) {
    lm_debug("session %llu closed: %s", (unsigned long long)p->session->id, reason);
    if (code != 0 && code != LOOM_CLOSED) lm_warn("session %llu dropped: %s", (unsigned long long)p->session->id, reason);
    ctl_launches_client_gone(c, p);
    ctl_programs_client_gone(c, p);
    ctl_recover_client_gone(c, p);
    ctl_trace_client_gone(c, p);
    ctl_ckpt_client_gone(c, p);
    ctl_journal_client_gone(c, p);
    ctl_journal_session_closed(c, p->session->id);
    if (!c->stopping) { /* the workers free the session's shards */
      Lmw__SessionClosed sc = LMW__SESSION_CLOSED__INIT;
      sc.session = p->session->id;
      for (uint32_t i = 0; i < c->worker_peer_cap; i++) /* only workers that hold something of it */
        if (c->worker_peer[i] && lm_session_touched(p->session, i))
          ctl_worker_send(c, i, LM_MSG_SESSION_CLOSED, 0, &sc.base, NULL, 0, NULL);
    }
    lm_session_destroy(p->session);
    c->nsessions--;
    ctl_pool_client_gone(c, p); /* after its arrays went: frees its devices, admits the next */
  } else if (code != 0 && !c->stopping) {
    lm_warn("dropped %s before its handshake: %s", lm_conn_peer_name(conn), reason);
  }
  if (p->role == ROLE_WORKER && !p->registered && code != 0 && code != LOOM_CLOSED && !c->stopping)
    lm_warn("dropped worker connection %s: %s", lm_conn_peer_name(conn), reason);
  if (p->prev) p->prev->next = p->next;
  else c->peers = p->next;
  if (p->next) p->next->prev = p->prev;
  c->npeers--;
  free(p);
}

static const lm_conn_ops g_peer_ops = {.on_frame = on_frame, .on_close = on_close};

void ctl_replay_frame(peer *p, lm_frame *f) { on_frame(p->conn, f); }

static void on_connection(uv_stream_t *server, int status) {
  ctl *c = server->data;
  if (status < 0) {
    lm_warn("accept failed: %s", uv_strerror(status));
    return;
  }
  peer *p = calloc(1, sizeof *p);
  lm_conn *conn = p ? lm_conn_new(&c->loop, &g_peer_ops, &c->cfg.conn, p) : NULL;
  if (!conn) { /* accept and drop, so the backlog does not stay full */
    free(p);
    uv_tcp_t *t = malloc(sizeof *t);
    if (t && uv_tcp_init(&c->loop, t) == 0) {
      uv_accept(server, (uv_stream_t *)t);
      uv_close((uv_handle_t *)t, (uv_close_cb)free);
    } else {
      free(t);
    }
    lm_error("out of host memory accepting a connection");
    return;
  }
  p->ctl = c;
  p->conn = conn;
  p->next = c->peers;
  if (c->peers) c->peers->prev = p;
  c->peers = p;
  c->npeers++;
  if (lm_conn_accept(conn, server) < 0) return; /* on_close frees p */
  if (c->npeers > c->cfg.max_peers)
    lm_conn_close_with_error(conn, 0, LOOM_BUSY, "too many connections (limit %u)", c->cfg.max_peers);
}

/* Closes client sessions that sent nothing for --session-idle-timeout and have no launch running. */
static void expire_idle_sessions(ctl *c) {
  uint32_t limit = c->cfg.session_idle_timeout_ms;
  uint64_t now = ctl_now_ms(c);
  if (!limit) return;
  for (peer *p = c->peers, *next; p; p = next) {
    next = p->next; /* closing does not free p before its close callback, but stay safe */
    if (p->role != ROLE_CLIENT || !lm_conn_is_open(p->conn) || now - p->last_ms < limit || ctl_pool_queued(p)) continue;
    bool busy = false;
    for (c_launch *l = c->active; l && !busy; l = l->next) busy = l->client == p;
    if (busy) continue;
    lm_info("session %llu (%s) idle for %u ms: closing it", (unsigned long long)p->session->id, p->session->name,
            limit);
    lm_conn_close_with_error(p->conn, 0, LOOM_TIMEOUT,
                             "session closed after %u ms without a request (--session-idle-timeout)", limit);
  }
}

static void on_health_tick(uv_timer_t *t) {
  ctl *c = t->data;
  expire_idle_sessions(c);
  ctl_pool_tick(c);
  ctl_recover_tick(c);
  ctl_snap_tick(c);
  ctl_journal_tick(c);
  uint32_t lost[64];
  size_t n;
  /* Timers run before the loop reads its sockets: after a stall of the controller itself (a
   * loaded host), heartbeats that did arrive are still unread. Such a tick declares nobody lost;
   * it counts as a heartbeat of every worker, whose next one is read right after. */
  uint64_t now = ctl_now_ms(c), gap = now - c->last_tick_ms;
  c->last_tick_ms = now;
  if (gap > c->cfg.heartbeat_timeout_ms / 2) {
    uint32_t nw = lm_registry_worker_count(c->reg);
    for (uint32_t i = 0; i < nw; i++)
      if (lm_registry_worker(c->reg, i)->state == LM_WORKER_ALIVE)
        lm_registry_heartbeat(c->reg, i, now, NULL, NULL, 0, NULL);
    lm_debug("the controller's loop was stalled for %llu ms: no worker is declared lost on this tick",
             (unsigned long long)gap);
    return;
  }
  do {
    n = lm_registry_expire(c->reg, ctl_now_ms(c), c->cfg.heartbeat_timeout_ms, lost, 64);
    for (size_t i = 0; i < n; i++) {
      const lm_reg_worker *w = lm_registry_worker(c->reg, lost[i]);
      if (w->standby)
        lm_warn("standby worker %u (%s pid %u) lost: no heartbeat for %u ms", w->id, w->host, w->pid,
                c->cfg.heartbeat_timeout_ms);
      else
        lm_warn("worker %u (%s pid %u) lost: no heartbeat for %u ms; devices %u-%u are unhealthy", w->id, w->host,
                w->pid, c->cfg.heartbeat_timeout_ms, w->device_ids[0], w->device_ids[w->ndevices - 1]);
      peer *p = w->id < c->worker_peer_cap ? c->worker_peer[w->id] : NULL;
      if (p) c->worker_peer[w->id] = NULL; /* fenced: nothing more is sent to it or taken from it */
      worker_lost(c, w->id, "no heartbeat");
      if (p) {
        lm_conn_close_with_error(p->conn, 0, LOOM_WORKER_LOST, "no heartbeat for %u ms: declared lost",
                                 c->cfg.heartbeat_timeout_ms);
      }
    }
  } while (n == 64);
}

static void begin_stop(ctl *c, const char *why) {
  if (c->stopping) return;
  c->stopping = true;
  lm_info("stopping (%s)", why);
  uv_close((uv_handle_t *)&c->server, NULL);
  uv_close((uv_handle_t *)&c->sigint, NULL);
  uv_close((uv_handle_t *)&c->sigterm, NULL);
  uv_close((uv_handle_t *)&c->health, NULL);
  ctl_frees_stop(c);
  ctl_peers_stop(c);
  ctl_http_close(c);
  ctl_journal_stop(c);
  for (peer *p = c->peers; p; p = p->next) lm_conn_close(p->conn, 0, "controller shutting down");
}

static void on_signal(uv_signal_t *s, int signum) { begin_stop(s->data, signum == SIGINT ? "SIGINT" : "SIGTERM"); }

/* Writes "HOST:PORT\n" to path via a temporary file and rename, so readers never see half. */
int ctl_write_address_file(const char *path, const char *bound, lm_err *err) {
  char addr[LM_ADDR_MAX + 8];
  snprintf(addr, sizeof addr, "%s", bound);
  if (!strncmp(addr, "0.0.0.0:", 8)) snprintf(addr, sizeof addr, "127.0.0.1:%s", bound + 8);
  else if (!strncmp(addr, "[::]:", 5)) snprintf(addr, sizeof addr, "[::1]:%s", bound + 5);
  size_t n = strlen(path);
  char *tmp = malloc(n + 32);
  if (!tmp) return lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  snprintf(tmp, n + 32, "%s.tmp.%ld", path, (long)getpid());
  FILE *fp = fopen(tmp, "w");
  int ok = fp && fprintf(fp, "%s\n", addr) > 0;
  if (fp && fclose(fp) != 0) ok = 0;
  if (!ok || rename(tmp, path) != 0) {
    int e = errno;
    unlink(tmp);
    free(tmp);
    return lm_errf(err, LOOM_IO, "cannot write the address file %s: %s", path, strerror(e));
  }
  free(tmp);
  return 0;
}

int lm_controller_run(const lm_controller_config *cfg, lm_err *err) {
  ctl *c = calloc(1, sizeof *c);
  if (!c) return lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  c->cfg = *cfg;
  if (!c->cfg.heartbeat_interval_ms) c->cfg.heartbeat_interval_ms = 200;
  if (!c->cfg.heartbeat_timeout_ms) c->cfg.heartbeat_timeout_ms = 900;
  if (!c->cfg.max_peers) c->cfg.max_peers = 4096;
  c->reg = lm_registry_create();
  int rc = 0;
  if (!c->reg || uv_loop_init(&c->loop) != 0) {
    lm_registry_destroy(c->reg);
    free(c);
    return lm_errf(err, LOOM_NO_MEMORY, "cannot create the event loop");
  }
  signal(SIGPIPE, SIG_IGN);
  c->start_ms = ctl_now_ms(c);
  c->next_program = 1;
  c->next_rid = 1;
  c->log = calloc(LM_LAUNCH_LOG_MAX, sizeof *c->log);
  c->dev_refs = calloc(LM_REG_MAX_DEVICES, sizeof *c->dev_refs);
  if (!c->log || !c->dev_refs || ctl_recover_init(c) < 0 || ctl_snap_init(c) < 0) rc = lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  if (rc == 0) rc = lm_auth_random(c->dp_master, sizeof c->dp_master, err);
  if (rc == 0 && c->cfg.secret_file) {
    rc = lm_auth_secret_read(c->cfg.secret_file, c->secret, err);
    c->have_secret = rc == 0;
  }
  if (rc == 0) rc = ctl_pool_init(c, c->cfg.pool_config, err);
  if (rc == 0) rc = ctl_ckpt_init(c, err);
  if (rc == 0 && c->cfg.tokens_file) {
    tokens_refresh(c);
    if (c->tokens_err < 0) rc = lm_errf(err, c->tokens_err, "%s", c->tokens_msg);
  }
  if (rc == 0) rc = ctl_journal_start(c, err); /* --state: restore what the journal holds */
  if (rc == 0 && !listen_is_loopback(c->cfg.listen) && !(c->cfg.secret_file && c->cfg.tokens_file) &&
      !c->cfg.insecure)
    rc = lm_errf(err, LOOM_PERMISSION,
                 "refusing to listen on %s, reachable from other hosts, without authentication: pass "
                 "--secret-file and --tokens-file (`loom up` makes both), or --insecure to accept anyone",
                 c->cfg.listen);
  if (rc < 0) {
    c->stopping = true; /* nothing below is a change to record */
    if (c->jr) ctl_journal_stop(c), uv_run(&c->loop, UV_RUN_DEFAULT);
    ctl_launches_free(c);
    ctl_journal_free(c);
    ctl_programs_free(c);
    free(c->worker_peer), free(c->worker_key), free(c->lost_at);
    ctl_pool_free(c);
    ctl_ckpt_free(c);
    ctl_recover_free(c);
    ctl_snap_free(c);
    free(c->log);
    free(c->dev_refs);
    lm_tokens_free(&c->tokens);
    uv_loop_close(&c->loop);
    lm_registry_destroy(c->reg);
    free(c);
    return rc;
  }
  if (!listen_is_loopback(c->cfg.listen) && !(c->cfg.secret_file && c->cfg.tokens_file))
    lm_warn("listening on %s without %s: anyone who can reach it %s (--insecure)", c->cfg.listen,
            c->cfg.secret_file ? "client tokens" : "a cluster secret",
            c->cfg.secret_file ? "can open sessions" : "can register workers");
  c->server.data = c;
  rc = lm_listen(&c->loop, &c->server, c->cfg.listen, on_connection, c->bound, sizeof c->bound, err);
  if (rc == 0) {
    c->server.data = c;
    if (c->cfg.address_file) rc = ctl_write_address_file(c->cfg.address_file, c->bound, err);
    if (rc == 0 && c->cfg.http_listen) {
      rc = ctl_http_start(c, err);
      if (rc == 0 && c->cfg.http_address_file)
        rc = ctl_write_address_file(c->cfg.http_address_file, ctl_http_address(c->http), err);
      if (rc == 0) {
        c->met = ctl_http_counters(c->http);
        if (!listen_is_loopback(ctl_http_address(c->http)))
          lm_warn("serving HTTP (metrics, health) on %s, reachable from other hosts, without authentication",
                  ctl_http_address(c->http));
        lm_info("serving HTTP on %s: /metrics, /healthz, /readyz", ctl_http_address(c->http));
      }
      if (rc < 0) ctl_http_close(c);
    }
    if (rc < 0) uv_close((uv_handle_t *)&c->server, NULL);
  }
  if (rc == 0) {
    uv_signal_init(&c->loop, &c->sigint);
    uv_signal_init(&c->loop, &c->sigterm);
    c->sigint.data = c->sigterm.data = c;
    uv_signal_start(&c->sigint, on_signal, SIGINT);
    uv_signal_start(&c->sigterm, on_signal, SIGTERM);
    uv_timer_init(&c->loop, &c->health);
    c->health.data = c;
    uint32_t tick = c->cfg.heartbeat_timeout_ms / 4;
    if (tick > 250) tick = 250;
    if (tick < 10) tick = 10;
    c->last_tick_ms = ctl_now_ms(c);
    uv_timer_start(&c->health, on_health_tick, tick, tick);
    lm_info("listening on %s (protocol %d, heartbeat timeout %u ms, workers %s, clients %s)", c->bound,
            LM_PROTOCOL_VERSION, c->cfg.heartbeat_timeout_ms,
            c->have_secret ? "prove the cluster secret" : "unauthenticated",
            c->cfg.tokens_file ? "need a token" : "unauthenticated");
  }
  uv_run(&c->loop, UV_RUN_DEFAULT); /* until stopped; on a failed start, just finishes closes */
  if (uv_loop_close(&c->loop) != 0) lm_warn("event loop closed with handles still open");
  if (rc == 0) lm_info("stopped");
  ctl_http_free(c);
  ctl_ckpt_free(c);
  ctl_recover_free(c);
  ctl_snap_free(c);
  ctl_launches_free(c);
  ctl_journal_free(c); /* after the launches (its restored ones are listed), before the programs */
  ctl_trace_free(c);
  ctl_programs_free(c);
  ctl_frees_free(c);
  ctl_peers_free(c);
  ctl_pool_free(c);
  lm_registry_destroy(c->reg);
  free(c->worker_peer);
  free(c->worker_key);
  free(c->lost_at);
  free(c->dev_refs);
  lm_tokens_free(&c->tokens);
  lm_auth_wipe(c->secret, sizeof c->secret);
  free(c);
  return rc;
}
