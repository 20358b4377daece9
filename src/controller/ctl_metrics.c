/* Prometheus text exposition of the controller's counters and state snapshot (ctl_metrics.h).
 * Names follow the Prometheus conventions: a `loom_` prefix, base units (seconds, bytes),
 * `_total` only on counters, one HELP and TYPE line per family. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "controller/ctl_metrics.h"
#include "loom/loom.h"

static const double g_bounds[LM_MET_LAT_NB - 1] = {LM_MET_LAT_BOUNDS};

void lm_met_launch_done(lm_met_counters *m, lm_met_outcome how, uint64_t ns) {
  lm_met_inc(how == LM_MET_OK ? &m->launches_succeeded
             : how == LM_MET_CANCELLED ? &m->launches_cancelled : &m->launches_failed);
  double s = (double)ns / 1e9;
  size_t i = 0;
  while (i < LM_MET_LAT_NB - 1 && s > g_bounds[i]) i++;
  lm_met_inc(&m->lat_bucket[i]);
  atomic_fetch_add_explicit(&m->lat_sum_ns, ns, memory_order_relaxed);
}

lm_met_snapshot *lm_met_snapshot_new(uint32_t nworkers, uint32_t ndevices) {
  lm_met_snapshot *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->workers = calloc(nworkers ? nworkers : 1, sizeof *s->workers);
  s->devices = calloc(ndevices ? ndevices : 1, sizeof *s->devices);
  if (!s->workers || !s->devices) {
    free(s->workers), free(s->devices), free(s);
    return NULL;
  }
  atomic_init(&s->refs, 1);
  return s;
}

void lm_met_snapshot_ref(lm_met_snapshot *s) { atomic_fetch_add(&s->refs, 1); }

void lm_met_snapshot_unref(lm_met_snapshot *s) {
  if (!s || atomic_fetch_sub(&s->refs, 1) != 1) return;
  for (uint32_t i = 0; i < s->nworkers; i++) {
    free(s->workers[i].host);
    free(s->workers[i].slice);
    free(s->workers[i].problem);
  }
  free(s->workers);
  free(s->devices);
  free(s->session_list);
  free(s);
}

void lm_met_printf(lm_met_buf *b, const char *fmt, ...) {
  if (b->failed) return;
  for (int attempt = 0; attempt < 2; attempt++) {
    va_list ap;
    va_start(ap, fmt);
    size_t room = b->cap - b->len;
    int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? room : 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
      b->failed = true;
      return;
    }
    if ((size_t)n < room) {
      b->len += (size_t)n;
      return;
    }
    size_t cap = b->cap ? b->cap : 4096;
    while (cap - b->len <= (size_t)n) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
      b->failed = true;
      return;
    }
    b->p = p, b->cap = cap;
  }
}

void lm_met_label(lm_met_buf *b, const char *s) {
  lm_met_printf(b, "\"");
  for (const char *q = s ? s : ""; *q; q++) {
    if (*q == '\\') lm_met_printf(b, "\\\\");
    else if (*q == '"') lm_met_printf(b, "\\\"");
    else if (*q == '\n') lm_met_printf(b, "\\n");
    else lm_met_printf(b, "%c", *q);
  }
  lm_met_printf(b, "\"");
}

static void family(lm_met_buf *b, const char *name, const char *type, const char *help) {
  lm_met_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static uint64_t ld(const _Atomic uint64_t *c) { return atomic_load_explicit(c, memory_order_relaxed); }

/* `{device="3",worker="1",slice="s",host="h"}` for device d. */
static void device_labels(lm_met_buf *b, const lm_met_snapshot *s, const lm_met_device *d) {
  const lm_met_worker *w = d->worker < s->nworkers ? &s->workers[d->worker] : NULL;
  lm_met_printf(b, "{device=\"%u\",worker=\"%u\",kind=", d->id, d->worker);
  lm_met_label(b, d->kind);
  lm_met_printf(b, ",slice=");
  lm_met_label(b, w ? w->slice : "");
  lm_met_printf(b, ",host=");
  lm_met_label(b, w ? w->host : "");
  lm_met_printf(b, "}");
}


/* One per-op collective counter family (calls, or operand bytes) of every worker. */
static void coll_family(lm_met_buf *b, const lm_met_snapshot *s, const char *name, const char *help, bool bytes) {
  static const char *const ops[LM_REG_COLL_OPS] = {"all_reduce", "all_gather", "reduce_scatter",
                                                    "all_to_all", "collective_permute", "collective_broadcast"};
  family(b, name, "counter", help);
  for (uint32_t i = 0; i < s->nworkers; i++)
    for (int k = 0; k < LM_REG_COLL_OPS; k++)
      lm_met_printf(b, "%s{worker=\"%u\",op=\"%s\"} %llu\n", name, s->workers[i].id, ops[k],
                    (unsigned long long)(bytes ? s->workers[i].collectives.bytes[k] : s->workers[i].collectives.calls[k]));
}

void lm_met_render(lm_met_buf *b, const lm_met_counters *m, const lm_met_snapshot *s, uint64_t age_ms) {
  family(b, "loom_build_info", "gauge", "Loom's version, as a label; always 1.");
  lm_met_printf(b, "loom_build_info{version=\"%s\"} 1\n", LOOM_VERSION_STRING);

  family(b, "loom_launches_started_total", "counter",
         "Launches given a sequence number and sent to their workers.");
  lm_met_printf(b, "loom_launches_started_total %llu\n", (unsigned long long)ld(&m->launches_started));
  family(b, "loom_launches_refused_total", "counter",
         "Launches refused before they started (bad arguments, unhealthy devices, out of memory).");
  lm_met_printf(b, "loom_launches_refused_total %llu\n", (unsigned long long)ld(&m->launches_refused));
  family(b, "loom_launches_finished_total", "counter", "Launches finished, by how they ended.");
  lm_met_printf(b, "loom_launches_finished_total{state=\"succeeded\"} %llu\n",
                (unsigned long long)ld(&m->launches_succeeded));
  lm_met_printf(b, "loom_launches_finished_total{state=\"failed\"} %llu\n", (unsigned long long)ld(&m->launches_failed));
  lm_met_printf(b, "loom_launches_finished_total{state=\"cancelled\"} %llu\n",
                (unsigned long long)ld(&m->launches_cancelled));

  family(b, "loom_launch_duration_seconds", "histogram",
         "Time from a launch's arrival at the controller to the last of its workers reporting it done.");
  uint64_t cum = 0;
  for (size_t i = 0; i < LM_MET_LAT_NB; i++) {
    cum += ld(&m->lat_bucket[i]);
    if (i < LM_MET_LAT_NB - 1) lm_met_printf(b, "loom_launch_duration_seconds_bucket{le=\"%g\"} %llu\n", g_bounds[i],
                                             (unsigned long long)cum);
    else lm_met_printf(b, "loom_launch_duration_seconds_bucket{le=\"+Inf\"} %llu\n", (unsigned long long)cum);
  }
  lm_met_printf(b, "loom_launch_duration_seconds_sum %.9f\n", (double)ld(&m->lat_sum_ns) / 1e9);
  lm_met_printf(b, "loom_launch_duration_seconds_count %llu\n", (unsigned long long)cum);

  family(b, "loom_workers_registered_total", "counter", "Worker registrations accepted.");
  lm_met_printf(b, "loom_workers_registered_total %llu\n", (unsigned long long)ld(&m->workers_registered));
  family(b, "loom_workers_lost_total", "counter", "Workers lost (connection closed, no heartbeat, bad heartbeat).");
  lm_met_printf(b, "loom_workers_lost_total %llu\n", (unsigned long long)ld(&m->workers_lost));
  family(b, "loom_recoveries_total", "counter", "Lost workers whose devices a standby took over (docs/elastic.md).");
  lm_met_printf(b, "loom_recoveries_total %llu\n", (unsigned long long)ld(&m->recoveries));
  family(b, "loom_sessions_opened_total", "counter", "Client sessions opened.");
  lm_met_printf(b, "loom_sessions_opened_total %llu\n", (unsigned long long)ld(&m->sessions_opened));

  if (!s) return;
  family(b, "loom_metrics_snapshot_age_seconds", "gauge",
         "Age of the state snapshot served (grows when the controller's event loop does not answer).");
  lm_met_printf(b, "loom_metrics_snapshot_age_seconds %.3f\n", (double)age_ms / 1e3);
  family(b, "loom_controller_uptime_seconds", "gauge", "Time since the controller started.");
  lm_met_printf(b, "loom_controller_uptime_seconds %.3f\n", (double)s->uptime_ms / 1e3);
  family(b, "loom_sessions", "gauge", "Open client sessions.");
  lm_met_printf(b, "loom_sessions %u\n", s->sessions);
  family(b, "loom_connections", "gauge", "Open connections (workers, clients, handshakes in progress).");
  lm_met_printf(b, "loom_connections %u\n", s->peers);
  family(b, "loom_programs", "gauge", "Compiled programs held by the controller.");
  lm_met_printf(b, "loom_programs %u\n", s->programs);
  family(b, "loom_launches_running", "gauge", "Launches started and not yet finished (the launch queue's depth).");
  lm_met_printf(b, "loom_launches_running %u\n", s->launches_running);

  uint32_t alive = 0, healthy = 0;
  for (uint32_t i = 0; i < s->nworkers; i++) alive += s->workers[i].alive;
  for (uint32_t i = 0; i < s->ndevices; i++) healthy += s->devices[i].healthy;
  family(b, "loom_workers", "gauge", "Registered workers by state.");
  lm_met_printf(b, "loom_workers{state=\"alive\"} %u\nloom_workers{state=\"lost\"} %u\n", alive, s->nworkers - alive);
  family(b, "loom_devices", "gauge", "Devices by health.");
  lm_met_printf(b, "loom_devices{state=\"healthy\"} %u\nloom_devices{state=\"unhealthy\"} %u\n", healthy,
                s->ndevices - healthy);

  family(b, "loom_worker_up", "gauge", "1 while the worker is connected and heartbeating, else 0.");
  for (uint32_t i = 0; i < s->nworkers; i++) {
    const lm_met_worker *w = &s->workers[i];
    lm_met_printf(b, "loom_worker_up{worker=\"%u\",slice=", w->id);
    lm_met_label(b, w->slice);
    lm_met_printf(b, ",host=");
    lm_met_label(b, w->host);
    lm_met_printf(b, ",pid=\"%u\"} %d\n", w->pid, w->alive ? 1 : 0);
  }
  family(b, "loom_worker_heartbeat_age_seconds", "gauge", "Time since the worker's last heartbeat.");
  for (uint32_t i = 0; i < s->nworkers; i++)
    lm_met_printf(b, "loom_worker_heartbeat_age_seconds{worker=\"%u\"} %.3f\n", s->workers[i].id,
                  (double)s->workers[i].since_heartbeat_ms / 1e3);
  family(b, "loom_worker_transfers_total", "counter",
         "Shard transfers the worker's data port served, by path (local: cross-memory attach; stream: over "
         "the connection) and direction (put: host to device; get: device to host).");
  for (uint32_t i = 0; i < s->nworkers; i++) {
    const lm_reg_transfers *t = &s->workers[i].transfers;
    uint32_t id = s->workers[i].id;
    lm_met_printf(b,
                  "loom_worker_transfers_total{worker=\"%u\",path=\"local\",direction=\"put\"} %llu\n"
                  "loom_worker_transfers_total{worker=\"%u\",path=\"local\",direction=\"get\"} %llu\n"
                  "loom_worker_transfers_total{worker=\"%u\",path=\"stream\",direction=\"put\"} %llu\n"
                  "loom_worker_transfers_total{worker=\"%u\",path=\"stream\",direction=\"get\"} %llu\n",
                  id, (unsigned long long)t->local_puts, id, (unsigned long long)t->local_gets, id,
                  (unsigned long long)t->stream_puts, id, (unsigned long long)t->stream_gets);
  }
  family(b, "loom_worker_transfer_bytes_total", "counter",
         "Bytes moved by the worker's data port, by path and direction (as loom_worker_transfers_total).");
  for (uint32_t i = 0; i < s->nworkers; i++) {
    const lm_reg_transfers *t = &s->workers[i].transfers;
    uint32_t id = s->workers[i].id;
    lm_met_printf(b,
                  "loom_worker_transfer_bytes_total{worker=\"%u\",path=\"local\",direction=\"put\"} %llu\n"
                  "loom_worker_transfer_bytes_total{worker=\"%u\",path=\"local\",direction=\"get\"} %llu\n"
                  "loom_worker_transfer_bytes_total{worker=\"%u\",path=\"stream\",direction=\"put\"} %llu\n"
                  "loom_worker_transfer_bytes_total{worker=\"%u\",path=\"stream\",direction=\"get\"} %llu\n",
                  id, (unsigned long long)t->local_put_bytes, id, (unsigned long long)t->local_get_bytes, id,
                  (unsigned long long)t->stream_put_bytes, id, (unsigned long long)t->stream_get_bytes);
  }

  coll_family(b, s, "loom_worker_collective_calls_total",
              "Collective calls the worker's devices made in launches, by op (one per device and operand).", false);
  coll_family(b, s, "loom_worker_collective_bytes_total",
              "Operand bytes the worker's devices put into collective calls, by op (docs/observability.md).", true);
  family(b, "loom_worker_collective_seconds_total", "counter",
         "Time the worker's devices spent inside collective calls, summed over devices.");
  for (uint32_t i = 0; i < s->nworkers; i++)
    lm_met_printf(b, "loom_worker_collective_seconds_total{worker=\"%u\"} %.9f\n", s->workers[i].id,
                  (double)s->workers[i].collectives.nanos / 1e9);
  family(b, "loom_worker_dataplane_bytes_total", "counter",
         "Bytes the worker's data plane sent to and received from other workers (collectives between workers, "
         "shard copies).");
  for (uint32_t i = 0; i < s->nworkers; i++)
    lm_met_printf(b,
                  "loom_worker_dataplane_bytes_total{worker=\"%u\",direction=\"sent\"} %llu\n"
                  "loom_worker_dataplane_bytes_total{worker=\"%u\",direction=\"received\"} %llu\n",
                  s->workers[i].id, (unsigned long long)s->workers[i].collectives.dp_sent, s->workers[i].id,
                  (unsigned long long)s->workers[i].collectives.dp_received);

  family(b, "loom_device_healthy", "gauge", "1 while the device can run launches, else 0.");
  for (uint32_t i = 0; i < s->ndevices; i++) {
    lm_met_printf(b, "loom_device_healthy");
    device_labels(b, s, &s->devices[i]);
    lm_met_printf(b, " %d\n", s->devices[i].healthy ? 1 : 0);
  }
  family(b, "loom_device_memory_capacity_bytes", "gauge", "The device's memory capacity.");
  for (uint32_t i = 0; i < s->ndevices; i++) {
    lm_met_printf(b, "loom_device_memory_capacity_bytes");
    device_labels(b, s, &s->devices[i]);
    lm_met_printf(b, " %llu\n", (unsigned long long)s->devices[i].capacity);
  }
  family(b, "loom_device_memory_used_bytes", "gauge", "Device memory in use at the worker's last heartbeat.");
  for (uint32_t i = 0; i < s->ndevices; i++) {
    lm_met_printf(b, "loom_device_memory_used_bytes");
    device_labels(b, s, &s->devices[i]);
    lm_met_printf(b, " %llu\n", (unsigned long long)s->devices[i].used);
  }
  family(b, "loom_device_memory_peak_bytes", "gauge",
         "The most device memory in use at once since its worker started (launch temporaries included).");
  for (uint32_t i = 0; i < s->ndevices; i++) {
    lm_met_printf(b, "loom_device_memory_peak_bytes");
    device_labels(b, s, &s->devices[i]);
    lm_met_printf(b, " %llu\n", (unsigned long long)s->devices[i].peak);
  }
}
