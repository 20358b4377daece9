/* Worker event loop: connect (retrying while the controller starts), HELLO, REGISTER_WORKER,
 * then the data-plane address (WORKER_DATAPLANE, once the controller gave the worker its id),
 * heartbeats every interval the controller asked for, and the controller's requests: programs,
 * launches, frees, peers; stop on a signal or when the controller goes away. */
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include "common/log.h"
#include "pjrt/pjrt.h"
#include "worker/relay.h"
#include "worker/wk.h"

#define RETRY_MS 200 /* between connection attempts while the controller is not up yet */
#define RESUME_BACKOFF_MIN_MS 50    /* reconnecting to a restarted controller: first delay ... */
#define RESUME_BACKOFF_MAX_MS 500   /* ... doubling up to this */
#define RESUME_LIMIT_MS 300000      /* give up (exit) after this long without the controller */

enum { RID_HELLO = 1, RID_REGISTER = 2 };

void lm_worker_config_default(lm_worker_config *c) {
  memset(c, 0, sizeof *c);
  c->devices = 4;
  c->device_memory = (uint64_t)2 << 30;
  c->slice = "default";
  c->connect_timeout_ms = 30000;
}

static void finish(wk *w, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void close_handles(wk *w) {
  if (w->done) return;
  w->done = true;
  w->stopping = true;
  uv_close((uv_handle_t *)&w->sigint, NULL);
  uv_close((uv_handle_t *)&w->sigterm, NULL);
  uv_close((uv_handle_t *)&w->timer, NULL);
  lm_relay_stop(w->relay);
  wk_data_stop(w);
  wk_sc_stop(w);
  wk_exec_stop(w); /* joins the device threads: nothing touches the async handle after this */
  if (w->async_open) {
    uv_close((uv_handle_t *)&w->async, NULL);
    w->async_open = false;
  }
  if (w->conn) lm_conn_close(w->conn, 0, "worker stopping");
}

/* Ends the run with rc (0 or a negative status and its message). */
static void finish(wk *w, int rc, const char *fmt, ...) {
  if (w->done) return;
  w->rc = rc;
  if (rc < 0) {
    va_list ap;
    va_start(ap, fmt);
    lm_verrf(&w->err, rc, fmt, ap);
    va_end(ap);
  }
  close_handles(w);
}

void wk_finish(wk *w, int rc, const char *msg) { finish(w, rc, "%s", msg ? msg : ""); }

void wk_send(wk *w, unsigned type, uint64_t rid, const ProtobufCMessage *m) {
  lm_err err;
  if (!w->conn) return; /* between connections: a RUN sent again is answered then (wk_exec.c) */
  if (lm_conn_send(w->conn, type, rid, m, NULL, 0, NULL, NULL, &err) < 0) {
    if (w->durable && !lm_conn_is_open(w->conn)) return; /* on_close reconnects */
    finish(w, err.code, "cannot send %s to the controller: %s", lm_msg_name(type), err.msg);
  }
}

static void on_heartbeat_tick(uv_timer_t *t) {
  wk *w = t->data;
  if (!w->conn || !w->registered) return;
  uint32_t n = w->cfg.devices;
  Lmw__DeviceStats *st = calloc(n, sizeof *st);
  Lmw__DeviceStats **ptrs = calloc(n, sizeof *ptrs);
  if (!st || !ptrs) {
    free(st), free(ptrs);
    lm_warn("out of host memory building a heartbeat");
    return;
  }
  for (uint32_t i = 0; i < n; i++) {
    lmw__device_stats__init(&st[i]);
    st[i].local_index = i;
    st[i].memory_used = lm_device_used(w->devs[i].dev);
    st[i].memory_peak = lm_device_peak(w->devs[i].dev);
    ptrs[i] = &st[i];
  }
  Lmw__TransferStats ts = LMW__TRANSFER_STATS__INIT;
  const wk_xfer_stats *x = &w->xstats;
  ts.local_puts = x->local_puts;
  ts.local_put_bytes = x->local_put_bytes;
  ts.local_gets = x->local_gets;
  ts.local_get_bytes = x->local_get_bytes;
  ts.stream_puts = x->stream_puts;
  ts.stream_put_bytes = x->stream_put_bytes;
  ts.stream_gets = x->stream_gets;
  ts.stream_get_bytes = x->stream_get_bytes;
  ts.local_refused = x->local_refused;
  Lmw__CollectiveStats cs = LMW__COLLECTIVE_STATS__INIT;
  uint64_t ccalls[LM_SPMD_NOPS], cbytes[LM_SPMD_NOPS];
  for (int i = 0; i < LM_SPMD_NOPS; i++) {
    ccalls[i] = atomic_load_explicit(&w->cstats.calls[i], memory_order_relaxed);
    cbytes[i] = atomic_load_explicit(&w->cstats.bytes[i], memory_order_relaxed);
  }
  cs.n_calls = cs.n_bytes = LM_SPMD_NOPS;
  cs.calls = ccalls;
  cs.bytes = cbytes;
  cs.nanos = atomic_load_explicit(&w->cstats.nanos, memory_order_relaxed);
  if (w->dp) /* busy: the last values again (the loop never waits for the data plane's lock) */
    lm_dp_try_bytes(w->dp, &w->dp_sent, &w->dp_received);
  cs.dataplane_bytes_sent = w->dp_sent;
  cs.dataplane_bytes_received = w->dp_received;
  Lmw__Heartbeat hb = LMW__HEARTBEAT__INIT;
  hb.sequence = ++w->heartbeat_seq;
  hb.n_devices = n;
  hb.devices = ptrs;
  hb.transfers = &ts;
  hb.collectives = &cs;
  wk_send(w, LM_MSG_HEARTBEAT, 0, &hb.base);
  free(st);
  free(ptrs);
  wk_data_poll(w); /* parked gets time out even when nothing else happens */
  wk_sc_reap(w);
}

static void send_register(wk *w) {
  uint32_t n = w->cfg.devices;
  Lmw__DeviceSpec *specs = calloc(n, sizeof *specs);
  Lmw__DeviceSpec **ptrs = calloc(n, sizeof *ptrs);
  if (!specs || !ptrs) {
    free(specs), free(ptrs);
    finish(w, LOOM_NO_MEMORY, "out of host memory registering");
    return;
  }
  for (uint32_t i = 0; i < n; i++) {
    lmw__device_spec__init(&specs[i]);
    specs[i].local_index = i;
    specs[i].kind = w->kind;
    specs[i].memory_capacity = lm_device_capacity(w->devs[i].dev);
    ptrs[i] = &specs[i];
  }
  Lmw__RegisterWorker m = LMW__REGISTER_WORKER__INIT;
  m.host = w->host;
  m.pid = (uint32_t)getpid();
  m.slice = (char *)w->cfg.slice;
  m.n_devices = n;
  m.devices = ptrs;
  m.data_address = w->data_addr;
  m.standby = w->cfg.standby;
  m.fenced_worker = w->cfg.fenced_worker;
  m.fenced_epoch = w->cfg.fenced_epoch;
  uint64_t *act = NULL;
  if (w->resuming) { /* the same worker, which kept its shards (docs/durability.md) */
    m.resume_worker = w->worker_id + 1;
    m.resume_epoch = w->epoch;
    m.resume_cseq = w->cseq;
    size_t na = 0;
    for (wk_launch *l = w->active; l; l = l->next) na++;
    act = calloc(na ? na : 1, sizeof *act);
    for (wk_launch *l = w->active; act && l; l = l->next) act[m.n_active_seqs++] = l->seq;
    m.active_seqs = act;
  }
  if (w->have_secret) {
    m.auth_proof.data = w->auth_proof;
    m.auth_proof.len = sizeof w->auth_proof;
  }
  wk_send(w, LM_MSG_REGISTER_WORKER, RID_REGISTER, &m.base);
  free(act);
  free(specs);
  free(ptrs);
}

/* The network interface that holds the IP address of "IP:PORT" (its name into out), so the data
 * plane binds where the control connection runs; false for a wildcard or an unknown address. */
static bool interface_of(const char *addr, char *out, size_t cap) {
  struct sockaddr_storage ss;
  socklen_t sl;
  lm_err e;
  if (lm_addr_resolve(addr, &ss, &sl, &e) < 0) return false;
  struct ifaddrs *ifs;
  if (getifaddrs(&ifs) != 0) return false;
  bool found = false;
  for (struct ifaddrs *i = ifs; i && !found; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != ss.ss_family) continue;
    if (ss.ss_family == AF_INET)
      found = ((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr == ((struct sockaddr_in *)&ss)->sin_addr.s_addr &&
              ((struct sockaddr_in *)&ss)->sin_addr.s_addr != htonl(INADDR_ANY);
    else if (ss.ss_family == AF_INET6)
      found = !memcmp(&((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr, &((struct sockaddr_in6 *)&ss)->sin6_addr, 16) &&
              !IN6_IS_ADDR_UNSPECIFIED(&((struct sockaddr_in6 *)&ss)->sin6_addr);
    if (found) snprintf(out, cap, "%s", i->ifa_name);
  }
  freeifaddrs(ifs);
  return found;
}

/* The data-plane endpoint needs the worker id, so it is made once registration gave one. */
static void start_dataplane(wk *w) {
  lm_dp_config dc;
  lm_dp_config_init(&dc);
  dc.self_id = w->worker_id;
  char ifname[64];
  if (interface_of(w->data_addr, ifname, sizeof ifname)) dc.net_devices = ifname;
  dc.num_devices = w->cfg.devices;
  dc.require_keys = 1; /* peers come from the controller with pair keys; messages must prove their sender */
  dc.slice_label = w->cfg.slice; /* the outer level of hierarchical collectives (LOOM_DP_HOST: the host) */
  lm_err err;
  if (lm_dp_create(&dc, &w->dp, &err) < 0) {
    w->dp = NULL;
    lm_error("no data plane (collectives between devices will fail): %s", err.msg);
    Lmw__WorkerDataplane m = LMW__WORKER_DATAPLANE__INIT; /* the controller marks our devices unhealthy */
    m.error = err.msg;
    wk_send(w, LM_MSG_WORKER_DATAPLANE, 0, &m.base);
    return;
  }
  const void *blob;
  size_t len;
  lm_dp_address(w->dp, &blob, &len);
  Lmw__WorkerDataplane m = LMW__WORKER_DATAPLANE__INIT;
  m.address.data = (uint8_t *)blob;
  m.address.len = len;
  wk_send(w, LM_MSG_WORKER_DATAPLANE, 0, &m.base);
}

static void on_peers(wk *w, const Lmw__Peers *m) {
  for (size_t i = 0; i < m->n_peers && w->dp; i++) {
    uint64_t id;
    lm_err err;
    const Lmw__Peer *pe = m->peers[i];
    const uint8_t *key = pe->pair_key.len == LM_DP_KEY_SIZE ? pe->pair_key.data : NULL; /* else refused */
    if (lm_dp_peer_add_keyed(w->dp, pe->dataplane_address.data, pe->dataplane_address.len, key, &id, &err) < 0)
      lm_warn("cannot add data-plane peer worker %u: %s", m->peers[i]->worker_id, err.msg);
    else
      lm_debug("data-plane peer worker %llu added", (unsigned long long)id);
  }
}

static void on_heartbeat_tick(uv_timer_t *t);

/* The restarted controller took this worker back as itself: same id, epoch and devices. */
static void on_resumed(wk *w, const Lmw__RegisterWorkerReply *r) {
  if (!r->resumed || r->worker_id != w->worker_id || r->epoch != w->epoch) {
    finish(w, LOOM_PROTOCOL, "the controller answered the resume of worker %u epoch %llu with worker %u epoch %llu",
           w->worker_id, (unsigned long long)w->epoch, r->worker_id, (unsigned long long)r->epoch);
    return;
  }
  if (!w->have_secret && r->token_key.len == LM_TOKEN_KEY_SIZE) memcpy(w->token_key, r->token_key.data, LM_TOKEN_KEY_SIZE);
  w->registered = true;
  w->resuming = false;
  w->durable = r->durable;
  lm_conn_set_established(w->conn);
  lm_info("resumed as worker %u (epoch %llu) with %s after %llu ms: shards kept", w->worker_id,
          (unsigned long long)w->epoch, w->cfg.controller, (unsigned long long)(uv_now(&w->loop) - w->resume_since_ms));
  const void *blob; /* the same data-plane endpoint: its address again, so the others learn it */
  size_t len;
  if (w->dp) {
    lm_dp_address(w->dp, &blob, &len);
    Lmw__WorkerDataplane m = LMW__WORKER_DATAPLANE__INIT;
    m.address.data = (uint8_t *)blob;
    m.address.len = len;
    wk_send(w, LM_MSG_WORKER_DATAPLANE, 0, &m.base);
  }
  uv_timer_start(&w->timer, on_heartbeat_tick, w->heartbeat_ms, w->heartbeat_ms);
}

static void on_registered(wk *w, const Lmw__RegisterWorkerReply *r) {
  if (w->resuming) {
    on_resumed(w, r);
    return;
  }
  if (r->n_device_ids != w->cfg.devices && !(r->standby && r->n_device_ids == 0)) {
    finish(w, LOOM_PROTOCOL, "the controller assigned %zu ids to %u devices", r->n_device_ids, w->cfg.devices);
    return;
  }
  if (w->have_secret) { /* derived in on_hello_reply; a key sent in clear is not taken */
    if (r->token_key.len) {
      finish(w, LOOM_PROTOCOL, "the controller sent a transfer key in clear although both sides hold the secret");
      return;
    }
  } else if (r->token_key.len != LM_TOKEN_KEY_SIZE) {
    finish(w, LOOM_PROTOCOL, "the controller sent a %zu-byte token key (expected %d)", r->token_key.len,
           LM_TOKEN_KEY_SIZE);
    return;
  } else {
    memcpy(w->token_key, r->token_key.data, LM_TOKEN_KEY_SIZE);
  }
  w->registered = true;
  w->worker_id = r->worker_id;
  lm_relay_set_self(w->relay, w->worker_id);
  w->epoch = r->epoch;
  w->durable = r->durable;
  w->heartbeat_ms = r->heartbeat_interval_ms ? r->heartbeat_interval_ms : 500;
  if (w->heartbeat_ms < 10) w->heartbeat_ms = 10;
  lm_conn_set_established(w->conn);
  if (r->n_device_ids)
    lm_info("registered with %s as worker %u (epoch %llu): %u devices, virtual ids %u-%u, %llu bytes each, slice %s, "
            "data port %s", w->cfg.controller, w->worker_id, (unsigned long long)w->epoch, w->cfg.devices,
            r->device_ids[0], r->device_ids[r->n_device_ids - 1], (unsigned long long)w->cfg.device_memory,
            w->cfg.slice, w->data_addr);
  else
    lm_info("registered with %s as standby worker %u (epoch %llu): %u devices of %llu bytes, slice %s, data port %s",
            w->cfg.controller, w->worker_id, (unsigned long long)w->epoch, w->cfg.devices,
            (unsigned long long)w->cfg.device_memory, w->cfg.slice, w->data_addr);
  start_dataplane(w);
  uv_timer_start(&w->timer, on_heartbeat_tick, w->heartbeat_ms, w->heartbeat_ms);
}

/* The controller's HELLO_REPLY: with a secret, check its proof, answer its challenge, derive
 * the transfer key; then register. */
static void on_hello_reply(wk *w, const Lmw__HelloReply *r) {
  if (w->have_secret) {
    if (r->auth_challenge.len != LM_AUTH_NONCE_SIZE || r->auth_proof.len != LM_AUTH_MAC_SIZE) {
      finish(w, LOOM_PERMISSION,
             "the controller %s did not authenticate itself (it has no cluster secret); refusing to join it",
             w->cfg.controller);
      return;
    }
    uint8_t want[LM_AUTH_MAC_SIZE];
    lm_auth_controller_proof(w->secret, w->nonce, r->auth_challenge.data, want);
    if (!lm_auth_equal(want, r->auth_proof.data, sizeof want)) {
      finish(w, LOOM_PERMISSION,
             "the controller %s failed authentication: it does not hold this worker's cluster secret",
             w->cfg.controller);
      return;
    }
    lm_auth_worker_proof(w->secret, w->nonce, r->auth_challenge.data, w->auth_proof);
    if (!w->resuming) /* resuming, the controller keeps the recorded key: tokens out there stay good */
      lm_auth_transfer_key(w->secret, w->nonce, r->auth_challenge.data, w->token_key);
  }
  send_register(w);
}

static void on_fenced(uv_timer_t *t) {
  wk *w = t->data;
  finish(w, LOOM_WORKER_LOST, "declared lost by the controller %s (epoch %llu fenced): %s", w->cfg.controller,
         (unsigned long long)w->epoch, w->fenced_msg);
}

static void on_frame(lm_conn *c, lm_frame *f) {
  wk *w = lm_conn_user(c);
  if (w->fenced) return;
  ProtobufCMessage *m;
  lm_err err;
  if (f->h.type == LM_MSG_ERROR) {
    lm_msg_error_status(f, &err);
    if (w->registered && err.code == LOOM_WORKER_LOST) { /* fenced: the controller went on without us */
      /* finish a moment later, so that a stop signal that came with the wake-up (SIGCONT and
       * SIGTERM together) is seen first and the worker stops instead of rejoining */
      w->fenced = true;
      snprintf(w->fenced_msg, sizeof w->fenced_msg, "%.900s", err.msg);
      uv_timer_stop(&w->timer);
      uv_timer_start(&w->timer, on_fenced, 50, 0);
    } else if (w->registered) finish(w, err.code, "lost the controller %s: %s", w->cfg.controller, err.msg);
    else if (w->resuming && err.code == LOOM_WORKER_LOST) { /* the controller cannot take us back: rejoin anew */
      w->fenced = true;
      snprintf(w->fenced_msg, sizeof w->fenced_msg, "%.900s", err.msg);
      uv_timer_stop(&w->timer);
      uv_timer_start(&w->timer, on_fenced, 50, 0);
    } else finish(w, err.code, "the controller refused this worker: %s", err.msg);
    return;
  }
  if (f->h.payload_len && f->h.type != LM_MSG_LOAD_PROGRAM && f->h.type != LM_MSG_RELAY_RUN) {
    lm_conn_close_with_error(c, f->h.request_id, LOOM_PROTOCOL, "%s does not take a payload", lm_msg_name(f->h.type));
    return;
  }
  int rc = lm_msg_decode(f, &m, &err);
  if (rc < 0) {
    lm_conn_close_with_error(c, f->h.request_id, rc, "%s", err.msg);
    return;
  }
  unsigned type = f->h.type;
  if (!w->registered) {
    if (type == LM_MSG_HELLO_REPLY && f->h.request_id == RID_HELLO) on_hello_reply(w, (Lmw__HelloReply *)m);
    else if (type == LM_MSG_REGISTER_WORKER_REPLY && f->h.request_id == RID_REGISTER)
      on_registered(w, (Lmw__RegisterWorkerReply *)m);
    else lm_warn("ignoring unexpected %s from the controller before registering", lm_msg_name(type));
    lm_msg_free(m);
    return;
  }
  switch (type) {
  case LM_MSG_PEERS: on_peers(w, (Lmw__Peers *)m); break;
  case LM_MSG_WORKER_LOST: {
    const Lmw__WorkerLost *wl = (Lmw__WorkerLost *)m;
    if (w->dp && wl->worker_id != w->worker_id) lm_dp_peer_fail(w->dp, wl->worker_id, wl->reason);
    if (wl->worker_id != w->worker_id) lm_relay_worker_lost(w->relay, wl->worker_id, wl->reason);
    break;
  }
  case LM_MSG_LOAD_PROGRAM: wk_on_load_program(w, f, (Lmw__LoadProgram *)m); break;
  case LM_MSG_UNLOAD_PROGRAM: wk_on_unload_program(w, (Lmw__UnloadProgram *)m); break;
  case LM_MSG_RUN: wk_on_run(w, (Lmw__Run *)m); break;
  case LM_MSG_ABORT_LAUNCH:
    wk_on_abort(w, (Lmw__AbortLaunch *)m);
    lm_relay_on_abort(w->relay, (Lmw__AbortLaunch *)m); /* a launch it relays: its members too */
    break;
  case LM_MSG_RELAY_RUN:
    if (w->relay) lm_relay_on_run(w->relay, f, (Lmw__RelayRun *)m);
    break;
  case LM_MSG_FREE_ARRAYS: {
    const Lmw__FreeArrays *fa = (Lmw__FreeArrays *)m;
    for (size_t i = 0; i < fa->n_ids; i++) {
      wk_store_drop_array(&w->store, fa->session, fa->ids[i], w->cfg.devices);
      wk_sc_drop(w, fa->session, fa->ids[i]);
    }
    break;
  }
  case LM_MSG_SESSION_CLOSED:
    wk_on_session_closed(w, ((Lmw__SessionClosed *)m)->session);
    wk_sc_drop(w, ((Lmw__SessionClosed *)m)->session, 0);
    break;
  case LM_MSG_SHARD_COPY: wk_on_shard_copy(w, (Lmw__ShardCopy *)m); break;
  case LM_MSG_CHECKPOINT_IO: wk_on_checkpoint_io(w, f); break;
  case LM_MSG_DRAIN: wk_on_drain(w, f->h.request_id); break;
  case LM_MSG_STASH: wk_on_stash(w, f->h.request_id, (Lmw__Stash *)m); break;
  case LM_MSG_SHARD_MOVE: wk_on_shard_move(w, f->h.request_id, (Lmw__ShardMove *)m); break;
  default: lm_warn("ignoring unexpected %s from the controller", lm_msg_name(type)); break;
  }
  lm_msg_free(m);
  w->cseq++; /* clients' gets and relayed RUNs may wait for this message (ShardGet.min_cseq, Run.min_cseq) */
  if (w->parked) wk_data_poll(w);
  if (w->relayed) wk_relayed_poll(w);
}

static void try_connect(wk *w);

/* This worker as a relay (worker/relay.h): its own part runs here, reporting to the relay. */
static void relay_run_local(void *user, const Lmw__Run *run) { wk_on_run_from(user, run, WK_LINK_SELF); }
static void relay_send_ctl(void *user, unsigned type, const ProtobufCMessage *m) { wk_send(user, type, 0, m); }

static void on_retry(uv_timer_t *t) { try_connect(t->data); }

static void on_connect(lm_conn *c) {
  wk *w = lm_conn_user(c);
  Lmw__Hello h = LMW__HELLO__INIT;
  h.protocol_version = LM_PROTOCOL_VERSION;
  h.role = LMW__ROLE__ROLE_WORKER;
  h.software = "loom " LOOM_VERSION_STRING;
  h.host = w->host;
  h.pid = (uint32_t)getpid();
  if (w->have_secret) {
    lm_err err;
    if (lm_auth_random(w->nonce, sizeof w->nonce, &err) < 0) {
      finish(w, err.code, "%s", err.msg);
      return;
    }
    h.auth_nonce.data = w->nonce;
    h.auth_nonce.len = sizeof w->nonce;
  }
  wk_send(w, LM_MSG_HELLO, RID_HELLO, &h.base);
}

static void on_close(lm_conn *c, int code, const char *reason) {
  wk *w = lm_conn_user(c);
  w->conn = NULL;
  if (w->done || w->stopping || w->fenced) return;
  if (w->registered && w->durable) { /* a controller with a journal comes back: keep everything */
    w->registered = false;
    w->resuming = true;
    w->resume_since_ms = uv_now(&w->loop);
    w->resume_backoff_ms = RESUME_BACKOFF_MIN_MS;
    uv_timer_stop(&w->timer);
    lm_warn("lost the controller %s (%s): keeping %u devices' shards and reconnecting to resume as worker %u", 
            w->cfg.controller, reason, w->cfg.devices, w->worker_id);
    uv_timer_start(&w->timer, on_retry, w->resume_backoff_ms, 0);
    return;
  }
  if (w->resuming) {
    uint64_t gone = uv_now(&w->loop) - w->resume_since_ms;
    if (gone < RESUME_LIMIT_MS) {
      lm_debug("%s; retrying in %u ms", reason, w->resume_backoff_ms);
      uv_timer_start(&w->timer, on_retry, w->resume_backoff_ms, 0);
      w->resume_backoff_ms = w->resume_backoff_ms * 2 > RESUME_BACKOFF_MAX_MS ? RESUME_BACKOFF_MAX_MS
                                                                             : w->resume_backoff_ms * 2;
      return;
    }
    finish(w, LOOM_CLOSED, "lost the controller %s and it did not come back within %d s: %s", w->cfg.controller,
           RESUME_LIMIT_MS / 1000, reason);
    return;
  }
  if (w->registered) {
    finish(w, LOOM_CLOSED, "lost the controller %s: %s", w->cfg.controller, reason);
    return;
  }
  if (code == LOOM_CONNECT && uv_now(&w->loop) - w->first_attempt_ms < w->cfg.connect_timeout_ms) {
    lm_debug("%s; retrying", reason);
    uv_timer_start(&w->timer, on_retry, RETRY_MS, 0);
    return;
  }
  finish(w, code < 0 ? code : LOOM_CONNECT, "cannot register with the controller %s: %s", w->cfg.controller, reason);
}

static const lm_conn_ops g_ops = {.on_frame = on_frame, .on_connect = on_connect, .on_close = on_close};

static void try_connect(wk *w) {
  if (w->done) return;
  w->conn = lm_conn_new(&w->loop, &g_ops, &w->conn_cfg, w);
  if (!w->conn) {
    finish(w, LOOM_NO_MEMORY, "out of host memory connecting");
    return;
  }
  lm_conn_connect(w->conn, (struct sockaddr *)&w->addr); /* failures arrive in on_close */
}

static void on_signal(uv_signal_t *s, int signum) {
  wk *w = s->data;
  lm_info("stopping (%s)", signum == SIGINT ? "SIGINT" : "SIGTERM");
  w->stopping = true;
  close_handles(w);
}

/* The data port's default address: this host's address on the route to the controller (a UDP
 * socket "connected" there sends nothing), any free port. */
static void default_data_listen(wk *w, char *buf, size_t cap) {
  snprintf(buf, cap, "127.0.0.1:0");
  int fd = socket(w->addr.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  socklen_t len = w->addr.ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
  struct sockaddr_storage local;
  socklen_t ll = sizeof local;
  if (connect(fd, (struct sockaddr *)&w->addr, len) == 0 && getsockname(fd, (struct sockaddr *)&local, &ll) == 0) {
    if (local.ss_family == AF_INET6) ((struct sockaddr_in6 *)&local)->sin6_port = 0;
    else ((struct sockaddr_in *)&local)->sin_port = 0;
    lm_addr_format((struct sockaddr *)&local, buf, cap);
  }
  close(fd);
}

/* backend pjrt: the plugin's client, with this worker's device count where the user named no
 * create options (cpu_device_count, which XLA:CPU reads; a plugin that refuses it is asked
 * again without options). Its devices 0..D-1 serve Loom's devices 0..D-1. */
static int open_pjrt(wk *w, lm_err *err) {
  const char *plugin = w->cfg.pjrt_plugin ? w->cfg.pjrt_plugin : lm_pjrt_default_plugin();
  int rc;
  if (w->cfg.npjrt_options) {
    rc = lm_pjrt_open(plugin, w->cfg.pjrt_options, w->cfg.npjrt_options, &w->pjrt, err);
  } else {
    char opt[64];
    snprintf(opt, sizeof opt, "cpu_device_count=%u", w->cfg.devices);
    const char *opts[1] = {opt};
    rc = lm_pjrt_open(plugin, opts, 1, &w->pjrt, err);
    if (rc < 0 && rc != LOOM_NOT_FOUND) rc = lm_pjrt_open(plugin, NULL, 0, &w->pjrt, err);
  }
  if (rc < 0) return rc;
  if ((uint32_t)lm_pjrt_device_count(w->pjrt) < w->cfg.devices) {
    rc = lm_errf(err, LOOM_INVALID_ARGUMENT, "PJRT plugin %s has %d devices; --devices asks for %u", plugin,
                 lm_pjrt_device_count(w->pjrt), w->cfg.devices);
    lm_pjrt_close(w->pjrt);
    w->pjrt = NULL;
    return rc;
  }
  /* the controller knows CPU devices only (the kind says what the device is, not who computes) */
  snprintf(w->kind, sizeof w->kind, "%s", lm_pjrt_platform(w->pjrt));
  if (strcmp(w->kind, "cpu")) {
    rc = lm_errf(err, LOOM_UNSUPPORTED, "PJRT plugin %s serves %s devices; Loom's controller places work on cpu "
                 "devices only so far", plugin, w->kind[0] ? w->kind : "unnamed");
    lm_pjrt_close(w->pjrt);
    w->pjrt = NULL;
    return rc;
  }
  lm_info("devices through PJRT plugin %s (%s, %d devices)", plugin, w->kind, lm_pjrt_device_count(w->pjrt));
  return 0;
}

int lm_worker_run(const lm_worker_config *cfg, lm_err *err) { return lm_worker_run_fenced(cfg, NULL, NULL, err); }

int lm_worker_run_fenced(const lm_worker_config *cfg, uint32_t *fenced_worker, uint64_t *fenced_epoch, lm_err *err) {
  if (!cfg->controller) return lm_errf(err, LOOM_INVALID_ARGUMENT, "no controller address (--controller HOST:PORT)");
  if (cfg->devices == 0 || cfg->devices > LM_WORKER_MAX_DEVICES)
    return lm_errf(err, LOOM_INVALID_ARGUMENT, "device count must be 1-%d (got %u)", LM_WORKER_MAX_DEVICES,
                   cfg->devices);
  if (cfg->device_memory == 0) return lm_errf(err, LOOM_INVALID_ARGUMENT, "device memory must be more than 0 bytes");
  if (!lm_msg_name_ok(cfg->slice, 255))
    return lm_errf(err, LOOM_INVALID_ARGUMENT, "slice name must be 1-255 printable characters without spaces");
  wk *w = calloc(1, sizeof *w);
  if (!w) return lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  w->cfg = *cfg;
  socklen_t sl;
  int rc = 0;
  if (cfg->secret_file) {
    rc = lm_auth_secret_read(cfg->secret_file, w->secret, err);
    w->have_secret = rc == 0;
  }
  if (rc == 0) rc = lm_addr_resolve(cfg->controller, &w->addr, &sl, err);
  snprintf(w->kind, sizeof w->kind, "cpu");
  if (rc == 0 && cfg->backend && !strcmp(cfg->backend, "pjrt")) rc = open_pjrt(w, err);
  else if (rc == 0 && cfg->backend && strcmp(cfg->backend, "interp"))
    rc = lm_errf(err, LOOM_INVALID_ARGUMENT, "--backend is interp or pjrt, not '%s'", cfg->backend);
  if (rc < 0) {
    lm_pjrt_close(w->pjrt);
    free(w);
    return rc;
  }
  w->devs = calloc(cfg->devices, sizeof *w->devs);
  for (uint32_t i = 0; w->devs && i < cfg->devices; i++) {
    w->devs[i].dev = lm_device_create((size_t)cfg->device_memory);
    if (!w->devs[i].dev) rc = LOOM_NO_MEMORY;
  }
  if (!w->devs || rc < 0 || wk_store_init(&w->store) < 0 || wk_sc_init(w) < 0 || uv_loop_init(&w->loop) != 0) {
    for (uint32_t i = 0; w->devs && i < cfg->devices; i++) lm_device_destroy(w->devs[i].dev);
    free(w->devs);
    wk_store_destroy(&w->store);
    wk_sc_free(w);
    free(w);
    return lm_errf(err, LOOM_NO_MEMORY, "out of host memory creating devices");
  }
  if (gethostname(w->host, sizeof w->host - 1) != 0 || !lm_msg_name_ok(w->host, 255)) strcpy(w->host, "localhost");
  signal(SIGPIPE, SIG_IGN);
  lm_conn_config_default(&w->conn_cfg);
  w->conn_cfg.handshake_timeout_ms = 0; /* we are the one who speaks first */
  /* no deadline on a frame from the controller: a busy controller finishing a partly written frame
   * (a RELAY_RUN behind a burst of launches) is not a stalled hostile peer, and dropping it would
   * end the worker; a controller that is gone closes the connection */
  w->conn_cfg.frame_timeout_ms = 0;
  /* the controller sends up to the hard cap (a RUN lists every argument per local device) */
  w->conn_cfg.limits.max_meta = LM_FRAME_META_HARD_MAX;
  uv_signal_init(&w->loop, &w->sigint);
  uv_signal_init(&w->loop, &w->sigterm);
  uv_timer_init(&w->loop, &w->timer);
  w->sigint.data = w->sigterm.data = w->timer.data = w;
  char listen[LM_ADDR_MAX];
  if (cfg->data_listen) snprintf(listen, sizeof listen, "%s", cfg->data_listen);
  else default_data_listen(w, listen, sizeof listen);
  static const lm_relay_ops relay_ops = {.run_local = relay_run_local, .send_ctl = relay_send_ctl};
  rc = wk_exec_start(w, err);
  if (rc == 0 && !(w->relay = lm_relay_new(&w->loop, &relay_ops, w))) rc = lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  if (rc == 0 && wk_sc_start(w) < 0) rc = lm_errf(err, LOOM_NO_MEMORY, "cannot start the shard copy handle");
  if (rc == 0) rc = wk_data_start(w, listen, err);
  if (rc < 0) {
    w->rc = rc;
    w->err = *err;
    close_handles(w);
  } else {
    uv_signal_start(&w->sigint, on_signal, SIGINT);
    uv_signal_start(&w->sigterm, on_signal, SIGTERM);
    w->first_attempt_ms = uv_now(&w->loop);
    try_connect(w);
  }
  uv_run(&w->loop, UV_RUN_DEFAULT);
  uv_loop_close(&w->loop);
  rc = w->rc;
  if (rc < 0 && err) *err = w->err;
  if (rc == LOOM_WORKER_LOST && w->fenced) {
    if (fenced_worker) *fenced_worker = w->worker_id + 1;
    if (fenced_epoch) *fenced_epoch = w->epoch;
  }
  lm_dp_destroy(w->dp);
  lm_relay_free(w->relay);
  wk_sc_free(w);
  wk_store_destroy(&w->store);
  for (uint32_t i = 0; i < cfg->devices; i++) lm_device_destroy(w->devs[i].dev);
  free(w->devs);
  lm_auth_wipe(w->secret, sizeof w->secret);
  lm_pjrt_close(w->pjrt);
  free(w);
  return rc;
}
