/* Launch trace recording on the loop thread and its Chrome trace event JSON (ctl_trace.h).
 *
 * Timeline: every time is the controller's (uv_hrtime), relative to the recording's start.
 * A launch is one slice on the controller's track from its arrival to its end. Each device's
 * phases come from its worker as durations (queued, inputs, execute, report); they are placed
 * so that the report phase ends when the worker's RUN_DONE reached the controller, which puts
 * them late by the one-way message latency (tens of microseconds on one host). */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/log.h"
#include "controller/ctl.h"

/* A stopped recording a client asked for over the protocol, rendered on the thread pool. */
typedef struct trace_job {
  uv_work_t req;
  ctl *c;
  peer *client;               /* NULL once it has gone */
  uint64_t rid, max;
  ctl_trace_result *r;
  char *json;
  struct trace_job *next;
} trace_job;

struct ctl_tracer {
  bool on;
  uint64_t gen, started;
  ctl_trace_launch *done;     /* finished launches of this recording, newest first */
  uint64_t count, dropped;
  trace_job *jobs;            /* being rendered */
};

static void launch_rec_free(ctl_trace_launch *r) {
  if (!r) return;
  for (uint32_t i = 0; i < r->ndevs; i++) free(r->devs[i].spans);
  free(r->devs);
  free(r);
}

void ctl_trace_result_free(ctl_trace_result *r) {
  if (!r) return;
  for (ctl_trace_launch *l = r->launches, *n; l; l = n) {
    n = l->next;
    launch_rec_free(l);
  }
  free(r->workers);
  free(r);
}

bool ctl_trace_on(ctl *c) { return c->trace && c->trace->on; }

int ctl_trace_start(ctl *c, lm_err *err) {
  if (!c->trace && !(c->trace = calloc(1, sizeof *c->trace)))
    return lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  struct ctl_tracer *t = c->trace;
  if (t->on) return lm_errf(err, LOOM_BUSY, "a trace is already recording (loom trace stop ends it)");
  t->on = true;
  t->gen++;
  t->started = uv_hrtime();
  t->count = t->dropped = 0;
  lm_info("trace recording started");
  return 0;
}

ctl_trace_result *ctl_trace_stop(ctl *c, lm_err *err) {
  struct ctl_tracer *t = c->trace;
  if (!t || !t->on) {
    lm_errf(err, LOOM_NOT_FOUND, "no trace is recording (loom trace start begins one)");
    return NULL;
  }
  ctl_trace_result *r = calloc(1, sizeof *r);
  uint32_t nw = lm_registry_worker_count(c->reg);
  if (r) r->workers = calloc(nw ? nw : 1, sizeof *r->workers);
  if (!r || !r->workers) {
    free(r);
    lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
    return NULL;
  }
  r->nworkers = nw;
  for (uint32_t i = 0; i < nw; i++) {
    const lm_reg_worker *w = lm_registry_worker(c->reg, i);
    snprintf(r->workers[i].host, sizeof r->workers[i].host, "%s", w->host);
    snprintf(r->workers[i].slice, sizeof r->workers[i].slice, "%s", w->slice);
    r->workers[i].pid = w->pid;
  }
  for (c_launch *l = c->active; l; l = l->next) r->in_flight += l->trace != NULL;
  r->started = t->started;
  r->stopped = uv_hrtime();
  r->launches = t->done;
  r->count = t->count;
  r->dropped = t->dropped;
  t->done = NULL;
  t->on = false; /* launches still running finish unrecorded (their gen is over) */
  lm_info("trace recording stopped: %llu launches", (unsigned long long)r->count);
  return r;
}

void ctl_trace_free(ctl *c) {
  if (!c->trace) return;
  for (trace_job *j = c->trace->jobs; j; j = j->next) j->c = NULL; /* their after-work frees them */
  for (ctl_trace_launch *l = c->trace->done, *n; l; l = n) {
    n = l->next;
    launch_rec_free(l);
  }
  free(c->trace);
  c->trace = NULL;
}

void ctl_trace_launch_begin(ctl *c, c_launch *l, uint64_t arrived, const char *program, uint32_t ndev) {
  struct ctl_tracer *t = c->trace;
  if (!t || !t->on) return;
  if (t->count >= LM_TRACE_MAX_LAUNCHES) {
    t->dropped++;
    return;
  }
  ctl_trace_launch *r = calloc(1, sizeof *r);
  if (!r) {
    t->dropped++;
    return;
  }
  r->seq = l->seq;
  r->session = l->session;
  snprintf(r->program, sizeof r->program, "%s", program ? program : "");
  r->ndev = ndev;
  r->arrived = arrived ? arrived : uv_hrtime();
  r->gen = t->gen;
  l->trace = r;
}

void ctl_trace_launch_sent(c_launch *l) {
  if (l->trace) {
    l->trace->sent = uv_hrtime();
    l->trace->nworkers = l->nworkers;
  }
}

/* min(v, *left), taken from *left: a peer's durations cannot add up past what is left. */
static uint64_t cap(uint64_t v, uint64_t *left) {
  uint64_t r = v < *left ? v : *left;
  *left -= r;
  return r;
}

void ctl_trace_run_done(ctl *c, c_launch *l, uint32_t worker, const Lmw__RunDone *m) {
  ctl_trace_launch *r = l->trace;
  if (!r) return;
  uint64_t now = uv_hrtime();
  r->nreported++;
  const lm_reg_worker *w = lm_registry_worker(c->reg, worker);
  for (size_t i = 0; i < m->n_timings && i < 1024; i++) {
    const Lmw__DeviceTiming *dt = m->timings[i];
    if (!w || dt->local_index >= w->ndevices) continue; /* a lying worker's entry is left out */
    if (r->ndevs == r->cap) {
      uint32_t cap = r->cap ? 2 * r->cap : 8;
      ctl_trace_dev *d = realloc(r->devs, cap * sizeof *d);
      if (!d) return;
      r->devs = d, r->cap = cap;
    }
    /* durations from a peer: each capped at the time since the launch arrived, so a bad value
     * cannot push a phase before the recording or overflow */
    uint64_t span = now - r->arrived;
    ctl_trace_dev *d = &r->devs[r->ndevs++];
    d->worker = worker;
    d->local_index = dt->local_index;
    d->device = w->device_ids[dt->local_index];
    d->done = now;
    uint64_t left = span;
    d->report = cap(dt->report_ns, &left);
    d->transfer_out = cap(dt->transfer_out_ns, &left);
    d->execute = cap(dt->execute_ns, &left);
    d->inputs = cap(dt->inputs_ns, &left);
    d->queued = cap(dt->queued_ns, &left);
    d->coll_ns = dt->collective_ns < d->execute ? dt->collective_ns : d->execute;
    d->coll_calls = dt->collective_calls;
    d->coll_bytes = dt->collective_bytes;
    d->nspans = 0;
    d->spans = NULL;
    size_t want = dt->n_collectives < LM_TRACE_MAX_SPANS ? dt->n_collectives : LM_TRACE_MAX_SPANS;
    if (want && !(d->spans = calloc(want, sizeof *d->spans))) want = 0; /* without memory: no spans */
    for (size_t k = 0; k < dt->n_collectives && d->nspans < want; k++) {
      const Lmw__CollectiveSpan *cs = dt->collectives[k];
      if (cs->start_ns > d->execute || cs->op >= 6) continue; /* outside its execute, or no such op */
      ctl_trace_span *o = &d->spans[d->nspans++];
      o->start = cs->start_ns;
      o->dur = cs->dur_ns < d->execute - cs->start_ns ? cs->dur_ns : d->execute - cs->start_ns;
      o->bytes = cs->bytes;
      o->op = cs->op;
    }
  }
}

void ctl_trace_launch_end(ctl *c, c_launch *l, int code) {
  ctl_trace_launch *r = l->trace;
  if (!r) return;
  l->trace = NULL;
  struct ctl_tracer *t = c->trace;
  if (!t || !t->on || r->gen != t->gen) {
    launch_rec_free(r);
    return;
  }
  r->ended = uv_hrtime();
  r->code = code;
  r->next = t->done;
  t->done = r;
  t->count++;
}

/* ---- JSON (the HTTP thread) ---- */

static double us(uint64_t t, uint64_t base) { return t >= base ? (double)(t - base) / 1e3 : 0; }

static cJSON *event(cJSON *arr, const char *name, const char *cat, int pid, int tid, double ts, double dur) {
  cJSON *e = cJSON_CreateObject();
  if (!e) return NULL;
  cJSON_AddStringToObject(e, "name", name);
  cJSON_AddStringToObject(e, "cat", cat);
  cJSON_AddStringToObject(e, "ph", "X");
  cJSON_AddNumberToObject(e, "ts", ts);
  cJSON_AddNumberToObject(e, "dur", dur);
  cJSON_AddNumberToObject(e, "pid", pid);
  cJSON_AddNumberToObject(e, "tid", tid);
  cJSON_AddItemToArray(arr, e);
  return e;
}

static void meta(cJSON *arr, const char *what, int pid, int tid, const char *name) {
  cJSON *e = cJSON_CreateObject();
  if (!e) return;
  cJSON_AddStringToObject(e, "name", what);
  cJSON_AddStringToObject(e, "ph", "M");
  cJSON_AddNumberToObject(e, "pid", pid);
  cJSON_AddNumberToObject(e, "tid", tid);
  cJSON *a = cJSON_AddObjectToObject(e, "args");
  if (a) cJSON_AddStringToObject(a, "name", name);
  cJSON_AddItemToArray(arr, e);
}

char *ctl_trace_json(const ctl_trace_result *r) {
  cJSON *root = cJSON_CreateObject();
  cJSON *ev = root ? cJSON_AddArrayToObject(root, "traceEvents") : NULL;
  if (!ev) {
    cJSON_Delete(root);
    return NULL;
  }
  uint64_t base = r->started;
  /* pid 1: the controller (one track of launches); pid 2 + W: worker W, one track per device */
  meta(ev, "process_name", 1, 0, "controller");
  meta(ev, "thread_name", 1, 0, "launches");
  char name[256];
  uint8_t *named = calloc((size_t)r->nworkers * 1024 + 1, 1); /* (worker, local) tracks named */
  for (uint32_t i = 0; i < r->nworkers; i++) {
    snprintf(name, sizeof name, "worker %u (%s pid %u, slice %s)", i, r->workers[i].host, r->workers[i].pid,
             r->workers[i].slice);
    meta(ev, "process_name", 2 + (int)i, 0, name);
  }
  static const char *phase[5] = {"queued", "transfer in", "execute", "transfer out", "report"};
  static const char *coll_op[6] = {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "collective_permute",
                                   "collective_broadcast"};
  for (const ctl_trace_launch *l = r->launches; l; l = l->next) {
    snprintf(name, sizeof name, "launch %llu %s", (unsigned long long)l->seq, l->program);
    cJSON *e = event(ev, name, "launch", 1, 0, us(l->arrived, base), us(l->ended, l->arrived));
    cJSON *a = e ? cJSON_AddObjectToObject(e, "args") : NULL;
    if (a) {
      cJSON_AddNumberToObject(a, "seq", (double)l->seq);
      cJSON_AddNumberToObject(a, "session", (double)l->session);
      cJSON_AddStringToObject(a, "program", l->program);
      cJSON_AddNumberToObject(a, "devices", l->ndev);
      cJSON_AddNumberToObject(a, "workers", l->nworkers);
      cJSON_AddNumberToObject(a, "dispatch_us", us(l->sent, l->arrived));
      cJSON_AddStringToObject(a, "status", l->code ? lm_status_name(l->code) : "OK");
    }
    for (uint32_t i = 0; i < l->ndevs; i++) {
      const ctl_trace_dev *d = &l->devs[i];
      int pid = 2 + (int)d->worker, tid = (int)d->local_index;
      if (named && d->worker < r->nworkers && d->local_index < 1024 &&
          !named[(size_t)d->worker * 1024 + d->local_index]) {
        named[(size_t)d->worker * 1024 + d->local_index] = 1;
        snprintf(name, sizeof name, "device %u (local %u)", d->device, d->local_index);
        meta(ev, "thread_name", pid, tid, name);
      }
      uint64_t dur[5] = {d->queued, d->inputs, d->execute, d->transfer_out, d->report};
      uint64_t t = d->done - d->report - d->transfer_out - d->execute - d->inputs - d->queued;
      for (int k = 0; k < 5; t += dur[k], k++) {
        cJSON *pe = event(ev, phase[k], "device", pid, tid, us(t, base), (double)dur[k] / 1e3);
        cJSON *pa = pe ? cJSON_AddObjectToObject(pe, "args") : NULL;
        if (pa) {
          cJSON_AddNumberToObject(pa, "seq", (double)l->seq);
          cJSON_AddNumberToObject(pa, "device", d->device);
        }
        if (k != 2 || !pa) continue;
        /* execute: its collective calls, as slices inside it on the same track */
        cJSON_AddNumberToObject(pa, "collective_us", (double)d->coll_ns / 1e3);
        cJSON_AddNumberToObject(pa, "collective_calls", (double)d->coll_calls);
        cJSON_AddNumberToObject(pa, "collective_bytes", (double)d->coll_bytes);
        if (d->coll_calls > d->nspans)
          cJSON_AddNumberToObject(pa, "collectives_not_shown", (double)(d->coll_calls - d->nspans));
        for (uint32_t k2 = 0; k2 < d->nspans; k2++) {
          const ctl_trace_span *sp = &d->spans[k2];
          cJSON *ce = event(ev, coll_op[sp->op], "collective", pid, tid, us(t + sp->start, base), (double)sp->dur / 1e3);
          cJSON *ca = ce ? cJSON_AddObjectToObject(ce, "args") : NULL;
          if (ca) {
            cJSON_AddNumberToObject(ca, "seq", (double)l->seq);
            cJSON_AddNumberToObject(ca, "device", d->device);
            cJSON_AddNumberToObject(ca, "bytes", (double)sp->bytes);
          }
        }
      }
    }
  }
  free(named);
  cJSON_AddStringToObject(root, "displayTimeUnit", "ns");
  cJSON *m = cJSON_AddObjectToObject(root, "metadata");
  if (m) {
    cJSON_AddStringToObject(m, "producer", "loom " LOOM_VERSION_STRING);
    cJSON_AddNumberToObject(m, "launches", (double)r->count);
    cJSON_AddNumberToObject(m, "dropped_launches", (double)r->dropped);
    cJSON_AddNumberToObject(m, "in_flight_at_stop", (double)r->in_flight);
    cJSON_AddNumberToObject(m, "duration_us", us(r->stopped, r->started));
  }
  char *out = cJSON_PrintUnformatted(root);
  cJSON_Delete(root);
  return out;
}

/* ---- TRACE_CONTROL (loop thread; the JSON is built on the thread pool) ---- */

static void render_work(uv_work_t *req) {
  trace_job *j = req->data;
  j->json = ctl_trace_json(j->r);
}

static void render_done(uv_work_t *req, int status) {
  trace_job *j = req->data;
  ctl *c = j->c;
  if (c && c->trace) { /* off the list */
    for (trace_job **pp = &c->trace->jobs; *pp; pp = &(*pp)->next)
      if (*pp == j) {
        *pp = j->next;
        break;
      }
  }
  peer *p = c ? j->client : NULL;
  if (p && lm_conn_is_open(p->conn)) {
    size_t len = j->json ? strlen(j->json) : 0;
    if (status != 0 || !j->json) {
      ctl_reply_error(p, j->rid, LOOM_NO_MEMORY, "out of host memory writing the trace");
    } else if (len > j->max) {
      ctl_reply_error(p, j->rid, LOOM_UNSUPPORTED,
                      "the trace's JSON is %zu bytes, more than this client takes (%llu): stop it over the HTTP "
                      "port instead (loom trace stop --out DIR)", len, (unsigned long long)j->max);
    } else {
      Lmw__TraceResult m = LMW__TRACE_RESULT__INIT;
      m.launches = j->r->count;
      m.dropped = j->r->dropped;
      lm_err err;
      char *json = j->json;
      j->json = NULL; /* the connection frees it once sent */
      if (lm_conn_send(p->conn, LM_MSG_TRACE_RESULT, j->rid, &m.base, json, len, free, json, &err) < 0 &&
          lm_conn_is_open(p->conn))
        lm_warn("cannot send the trace to %s: %s", lm_conn_peer_name(p->conn), err.msg);
    }
  }
  free(j->json);
  ctl_trace_result_free(j->r);
  free(j);
}

void ctl_on_trace_control(peer *p, const lm_frame *f, const Lmw__TraceControl *m) {
  ctl *c = p->ctl;
  lm_err err;
  if (!m->stop) {
    if (ctl_trace_start(c, &err) < 0) {
      ctl_reply_error(p, f->h.request_id, err.code, "%s", err.msg);
      return;
    }
    Lmw__Ack ack = LMW__ACK__INIT;
    ctl_reply(p, f, LM_MSG_ACK, &ack.base);
    return;
  }
  trace_job *j = calloc(1, sizeof *j);
  if (!j) {
    ctl_reply_error(p, f->h.request_id, LOOM_NO_MEMORY, "out of host memory");
    return;
  }
  if (!(j->r = ctl_trace_stop(c, &err))) {
    free(j);
    ctl_reply_error(p, f->h.request_id, err.code, "%s", err.msg);
    return;
  }
  j->c = c;
  j->client = p;
  j->rid = f->h.request_id;
  j->max = m->max_payload ? m->max_payload : LM_FRAME_PAYLOAD_DEFAULT_MAX;
  j->req.data = j;
  if (uv_queue_work(&c->loop, &j->req, render_work, render_done) != 0) {
    ctl_trace_result_free(j->r);
    free(j);
    ctl_reply_error(p, f->h.request_id, LOOM_INTERNAL, "cannot queue the trace's rendering");
    return;
  }
  j->next = c->trace->jobs;
  c->trace->jobs = j;
}

void ctl_trace_client_gone(ctl *c, peer *p) {
  for (trace_job *j = c->trace ? c->trace->jobs : NULL; j; j = j->next)
    if (j->client == p) j->client = NULL;
}
