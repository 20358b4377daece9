/* The public C API (include/loom/loom.h) over the client connection (cconn.c): options,
 * connect/disconnect, errors, the device snapshot. Arrays, executables and launches are in
 * arrays.c and launch.c (client_int.h). */
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include "client/client_int.h"
#include "client/locate.h"


static _Thread_local char t_errmsg[LM_ERR_MSG_MAX]; /* loom_errmsg(NULL): the last failed connect */

loom_status lm_client_fail(loom_client *c, const lm_err *e) {
  if (c) {
    pthread_mutex_lock(&c->mu);
    snprintf(c->errmsg, sizeof c->errmsg, "%s", e->msg);
    pthread_mutex_unlock(&c->mu);
  } else {
    snprintf(t_errmsg, sizeof t_errmsg, "%s", e->msg);
  }
  return (loom_status)e->code;
}

loom_status lm_client_failf(loom_client *c, int code, const char *fmt, ...) {
  lm_err e;
  va_list ap;
  va_start(ap, fmt);
  lm_verrf(&e, code, fmt, ap);
  va_end(ap);
  return lm_client_fail(c, &e);
}
#define fail lm_client_fail
#define failf lm_client_failf

const char *loom_version(void) { return LOOM_VERSION_STRING; }
const char *loom_strerror(loom_status status) { return lm_status_desc(status); }
const char *loom_status_name(loom_status status) { return lm_status_name(status); }

void loom_connect_options_initialize(loom_connect_options *o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  o->struct_size = sizeof *o;
  o->timeout_ms = 30000;
}

typedef struct queue_relay {
  loom_queue_fn fn;
  void *arg;
} queue_relay;

/* QUEUE_UPDATE -> the caller's queue_progress (on the receiver thread, while connect waits). */
static void relay_queue(void *arg, const Lmw__QueueUpdate *u) {
  queue_relay *r = arg;
  char pri[32], why[160];
  snprintf(pri, sizeof pri, "%s", u->priority ? u->priority : "");
  snprintf(why, sizeof why, "%s", u->blocked_by ? u->blocked_by : "");
  for (char *q = why; *q; q++)
    if ((unsigned char)*q < 0x20 || *q == 0x7f) *q = ' ';
  for (char *q = pri; *q; q++)
    if ((unsigned char)*q < 0x20 || *q == 0x7f) *q = ' ';
  loom_queue_status st = {.struct_size = sizeof st, .position = u->position, .queued = u->queued,
                          .devices = u->devices, .free_devices = u->free_devices, .waited_ms = u->waited_ms,
                          .priority = pri, .blocked_by = why};
  r->fn(r->arg, &st);
}

loom_status loom_connect(const loom_connect_options *options, loom_client **out) {
  t_errmsg[0] = 0;
  if (!out) return failf(NULL, LOOM_INVALID_ARGUMENT, "loom_connect: out is NULL");
  *out = NULL;
  loom_connect_options o;
  loom_connect_options_initialize(&o);
  if (options) {
    if (options->struct_size < offsetof(loom_connect_options, timeout_ms) || options->struct_size > (1u << 16))
      return failf(NULL, LOOM_INVALID_ARGUMENT,
                   "loom_connect: options.struct_size is %zu; set it with loom_connect_options_initialize",
                   options->struct_size);
    size_t n = options->struct_size < sizeof o ? options->struct_size : sizeof o;
    memcpy(&o, options, n); /* fields a newer caller appended beyond ours are ignored */
    o.struct_size = sizeof o;
  }
  char addr[LM_ADDR_MAX];
  lm_err err;
  int xfer_mode;
  int rc = lm_xfer_mode_from_env(&xfer_mode, &err);
  if (rc == 0) rc = lm_locate_controller(o.address, addr, sizeof addr, &err);
  char token[256];
  int tn = 0;
  if (rc == 0 && (!o.auth_token || !o.auth_token_size)) /* $LOOM_TOKEN, $LOOM_TOKEN_FILE, the local cluster's */
    rc = tn = lm_locate_token(addr, token, sizeof token, &err);
  if (rc < 0) return fail(NULL, &err);
  rc = 0;
  loom_client *c = calloc(1, sizeof *c);
  if (!c) return failf(NULL, LOOM_NO_MEMORY, "out of host memory");
  pthread_mutex_init(&c->mu, NULL);
  pthread_mutex_init(&c->data_mu, NULL);
  atomic_init(&c->next_id, 1);
  c->timeout_ms = o.timeout_ms;
  c->intr = o.interrupt;
  c->intr_arg = o.interrupt_arg;
  c->xfer_mode = xfer_mode;
  lm_cconn_options co = {.timeout_ms = o.timeout_ms, .intr = o.interrupt, .intr_arg = o.interrupt_arg,
                         .name = o.client_name, .auth_token = o.auth_token, .auth_token_len = o.auth_token_size,
                         .pool_devices = o.pool_devices, .priority = o.priority,
                         .launch_limit_ms = o.launch_limit_ms, .queue_timeout_ms = o.queue_timeout_ms,
                         .share_weight = o.share_weight};
  queue_relay relay = {.fn = o.queue_progress, .arg = o.queue_progress_arg};
  if (o.queue_progress) co.on_queue = relay_queue, co.on_queue_arg = &relay;
  if (tn > 0) co.auth_token = token, co.auth_token_len = (size_t)tn;
  rc = lm_cconn_open(addr, &co, &c->conn, &err);
  if (rc == 0) {
    rc = loom_refresh_devices(c);
    if (rc < 0) lm_errf(&err, rc, "%s", c->errmsg);
  }
  if (rc < 0) {
    loom_disconnect(c);
    return fail(NULL, &err);
  }
  *out = c;
  return LOOM_OK;
}

void loom_disconnect(loom_client *c) {
  if (!c) return;
  lm_cconn_close(c->conn);
  lm_client_close_data(c);
  pthread_mutex_destroy(&c->data_mu);
  lm_msg_free(c->devices ? &c->devices->base : NULL);
  pthread_mutex_destroy(&c->mu);
  free(c);
}

const char *loom_errmsg(const loom_client *c) { return c ? c->errmsg : t_errmsg; }

const char *loom_client_address(const loom_client *c) { return c ? lm_cconn_address(c->conn) : ""; }
uint64_t loom_client_session(const loom_client *c) { return c ? lm_cconn_session_id(c->conn) : 0; }
uint32_t loom_client_pool_devices(const loom_client *c) { return c ? lm_cconn_pool_info(c->conn)->ndevices : 0; }
const char *loom_client_priority(const loom_client *c) { return c ? lm_cconn_pool_info(c->conn)->priority : ""; }
uint64_t loom_client_queued_ms(const loom_client *c) { return c ? lm_cconn_pool_info(c->conn)->queued_ms : 0; }

loom_status loom_refresh_devices(loom_client *c) {
  if (!c) return failf(NULL, LOOM_INVALID_ARGUMENT, "loom_refresh_devices: client is NULL");
  Lmw__ListDevices req = LMW__LIST_DEVICES__INIT;
  ProtobufCMessage *m;
  lm_err err;
  int rc = lm_cconn_call(c->conn, LM_MSG_LIST_DEVICES, &req.base, LM_MSG_LIST_DEVICES_REPLY, c->timeout_ms, c->intr,
                         c->intr_arg, &m, &err);
  if (rc < 0) return fail(c, &err);
  Lmw__ListDevicesReply *r = (Lmw__ListDevicesReply *)m;
  for (size_t i = 0; i < r->n_devices; i++) /* the contract: ids are 0..n-1 in order */
    if (r->devices[i]->id != i) {
      lm_msg_free(m);
      return failf(c, LOOM_PROTOCOL, "the controller's device list is out of order at %zu", i);
    }
  if (r->n_devices > INT32_MAX) {
    lm_msg_free(m);
    return failf(c, LOOM_PROTOCOL, "the controller reported too many devices");
  }
  pthread_mutex_lock(&c->mu);
  Lmw__ListDevicesReply *old = c->devices;
  c->devices = r;
  pthread_mutex_unlock(&c->mu);
  lm_msg_free(old ? &old->base : NULL);
  return LOOM_OK;
}

loom_status loom_device_count(loom_client *c, int32_t *out_count) {
  if (!c || !out_count) return failf(c, LOOM_INVALID_ARGUMENT, "loom_device_count: NULL argument");
  pthread_mutex_lock(&c->mu);
  *out_count = c->devices ? (int32_t)c->devices->n_devices : 0;
  pthread_mutex_unlock(&c->mu);
  return LOOM_OK;
}

loom_status loom_device_info(loom_client *c, int32_t id, loom_device_desc *out) {
  if (!c || !out) return failf(c, LOOM_INVALID_ARGUMENT, "loom_device_info: NULL argument");
  if (out->struct_size < offsetof(loom_device_desc, kind) || out->struct_size > (1u << 16))
    return failf(c, LOOM_INVALID_ARGUMENT, "loom_device_info: out->struct_size is %zu; set it to sizeof(loom_device_desc)",
                 out->struct_size);
  pthread_mutex_lock(&c->mu);
  size_t n = c->devices ? c->devices->n_devices : 0;
  if (id < 0 || (size_t)id >= n) {
    pthread_mutex_unlock(&c->mu);
    return failf(c, LOOM_NOT_FOUND, "no device %d (the cluster has %zu devices, ids 0-%zd)", id, n, (ssize_t)n - 1);
  }
  const Lmw__Device *d = c->devices->devices[id];
  loom_device_desc full = {
      .struct_size = sizeof full,
      .id = (int32_t)d->id,
      .kind = d->kind,
      .worker_id = (int32_t)d->worker_id,
      .local_index = (int32_t)d->local_index,
      .worker_host = d->host,
      .worker_pid = d->pid,
      .slice = d->slice,
      .memory_capacity = d->memory_capacity,
      .memory_used = d->memory_used,
      .healthy = d->healthy ? 1 : 0,
      .health_reason = d->health_reason,
      .memory_peak = d->memory_peak,
  };
  pthread_mutex_unlock(&c->mu);
  size_t keep = out->struct_size;
  memcpy(out, &full, keep < sizeof full ? keep : sizeof full); /* older callers get the prefix they know */
  out->struct_size = keep;
  return LOOM_OK;
}

/* ---- traces ---- */

loom_status loom_trace_start(loom_client *c) {
  if (!c) return lm_client_failf(NULL, LOOM_INVALID_ARGUMENT, "loom_trace_start: client is NULL");
  Lmw__TraceControl req = LMW__TRACE_CONTROL__INIT;
  ProtobufCMessage *m;
  lm_err err;
  int rc = lm_cconn_call(c->conn, LM_MSG_TRACE_CONTROL, &req.base, LM_MSG_ACK, c->timeout_ms, c->intr, c->intr_arg,
                         &m, &err);
  if (rc < 0) return lm_client_fail(c, &err);
  lm_msg_free(m);
  return LOOM_OK;
}

loom_status loom_trace_stop(loom_client *c, char **out_json, size_t *out_len) {
  if (!c || !out_json || !out_len) return lm_client_failf(c, LOOM_INVALID_ARGUMENT, "loom_trace_stop: NULL argument");
  *out_json = NULL;
  *out_len = 0;
  Lmw__TraceControl req = LMW__TRACE_CONTROL__INIT;
  req.stop = true;
  req.max_payload = LM_FRAME_PAYLOAD_DEFAULT_MAX; /* what this connection takes */
  lm_err err;
  lm_call *call;
  int rc = lm_cconn_start(c->conn, LM_MSG_TRACE_CONTROL, &req.base, NULL, 0, NULL, 0, &call, &err);
  if (rc < 0) return lm_client_fail(c, &err);
  rc = lm_call_wait(call, c->timeout_ms, c->intr, c->intr_arg, &err);
  lm_reply r = {0};
  if (rc == 0) rc = lm_call_take_reply(call, &r, &err);
  lm_call_release(call);
  if (rc < 0) return lm_client_fail(c, &err);
  if (r.type != LM_MSG_TRACE_RESULT || r.payload_external) {
    lm_reply_free(&r);
    return lm_client_failf(c, LOOM_PROTOCOL, "the controller answered TRACE_CONTROL with %s", lm_msg_name(r.type));
  }
  char *json = malloc((size_t)r.payload_len + 1);
  if (!json) {
    lm_reply_free(&r);
    return lm_client_failf(c, LOOM_NO_MEMORY, "out of host memory");
  }
  if (r.payload_len) memcpy(json, r.payload, (size_t)r.payload_len);
  json[r.payload_len] = 0;
  *out_json = json;
  *out_len = (size_t)r.payload_len;
  lm_reply_free(&r);
  return LOOM_OK;
}
