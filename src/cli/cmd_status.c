/* `loom status`: the cluster in a few lines: the controller (version, uptime, sessions), its
 * workers (host, process, slice, devices, liveness, last heartbeat), slices and totals. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/cli.h"
#include "cli/util.h"
#include "client/cconn.h"
#include "client/locate.h"

static const char g_usage[] =
    "usage: loom status [--controller HOST:PORT] [--json]\n"
    "\n"
    "Shows the cluster: the controller, its workers (host, process, slice, devices, health and last\n"
    "heartbeat), its slices, and the totals of devices and memory.\n"
    "\n"
    "options:\n"
    "  --controller HOST:PORT   the controller (default: $LOOM_CONTROLLER, else the local cluster\n"
    "                           started by `loom up`)\n"
    "  --json                   print JSON instead of text\n"
    "  --timeout SECONDS        give up after this long (default 30)\n"
    "  -h, --help               show this help\n";

typedef struct slice_sum {
  const char *name;
  uint32_t workers, alive, devices, healthy;
  uint64_t memory;
} slice_sum;

int cmd_status(int argc, char **argv) {
  const char *cmd = "status";
  cli_query q;
  if (cli_query_options(cmd, g_usage, argc, argv, &q) < 0) return q.exit;

  char addr[LM_ADDR_MAX];
  lm_err err;
  if (lm_locate_controller(q.controller, addr, sizeof addr, &err) < 0) return cli_fail(cmd, "%s", err.msg);
  int64_t tmo = (int64_t)q.timeout_s * 1000;
  lm_cconn *c;
  if (cli_open_session(addr, tmo, "loom status", &c, &err) < 0) return cli_fail(cmd, "%s", err.msg);
  Lmw__ClusterStatus sreq = LMW__CLUSTER_STATUS__INIT;
  Lmw__ListDevices dreq = LMW__LIST_DEVICES__INIT;
  ProtobufCMessage *sm = NULL, *dm = NULL;
  int rc = lm_cconn_call(c, LM_MSG_CLUSTER_STATUS, &sreq.base, LM_MSG_CLUSTER_STATUS_REPLY, tmo, NULL, NULL, &sm, &err);
  if (rc == 0)
    rc = lm_cconn_call(c, LM_MSG_LIST_DEVICES, &dreq.base, LM_MSG_LIST_DEVICES_REPLY, tmo, NULL, NULL, &dm, &err);
  lm_cconn_close(c);
  if (rc < 0) {
    lm_msg_free(sm);
    return cli_fail(cmd, "%s", err.msg);
  }
  const Lmw__ClusterStatusReply *s = (const Lmw__ClusterStatusReply *)sm;
  const Lmw__ListDevicesReply *dl = (const Lmw__ListDevicesReply *)dm;

  /* totals and per-slice sums */
  slice_sum *sl = calloc(s->n_workers ? s->n_workers : 1, sizeof *sl);
  size_t nsl = 0;
  uint32_t alive = 0, healthy = 0, standbys = 0;
  uint64_t mem = 0, mem_healthy = 0, used = 0;
  for (size_t i = 0; sl && i < s->n_workers; i++) {
    const Lmw__WorkerStatus *w = s->workers[i];
    size_t k = 0;
    while (k < nsl && strcmp(sl[k].name, w->slice) != 0) k++;
    if (k == nsl) sl[nsl++].name = w->slice;
    sl[k].workers++;
    if (w->alive) sl[k].alive++, alive++;
    if (w->alive && w->standby) standbys++;
    for (size_t j = 0; j < w->n_device_ids; j++) {
      uint32_t id = w->device_ids[j];
      if (id >= dl->n_devices) continue;
      const Lmw__Device *d = dl->devices[id];
      sl[k].devices++;
      sl[k].memory += d->memory_capacity;
      mem += d->memory_capacity;
      used += d->memory_used;
      if (d->healthy) sl[k].healthy++, healthy++, mem_healthy += d->memory_capacity;
    }
  }

  if (q.json) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "controller", addr);
    cJSON_AddStringToObject(root, "software", s->software);
    cJSON_AddNumberToObject(root, "protocol_version", s->protocol_version);
    cJSON_AddNumberToObject(root, "uptime_ms", (double)s->uptime_ms);
    cJSON_AddNumberToObject(root, "sessions", s->sessions);
    cJSON_AddNumberToObject(root, "heartbeat_timeout_ms", s->heartbeat_timeout_ms);
    cJSON_AddStringToObject(root, "recovery", s->recovery ? s->recovery : "");
    cJSON_AddNumberToObject(root, "recoveries", s->recoveries);
    cJSON_AddNumberToObject(root, "launch_log", (double)s->launch_log);
    cJSON_AddNumberToObject(root, "launch_log_dropped", (double)s->launch_log_dropped);
    cJSON_AddNumberToObject(root, "snapshots", (double)s->snapshots);
    cJSON_AddNumberToObject(root, "snapshot_bytes", (double)s->snapshot_bytes);
    cJSON_AddNumberToObject(root, "snapshots_in_flight", s->snapshots_in_flight);
    cJSON_AddStringToObject(root, "journal", s->journal ? s->journal : "");
    cJSON *ev = cJSON_AddArrayToObject(root, "events");
    for (size_t i = 0; i < s->n_events; i++) cJSON_AddItemToArray(ev, cJSON_CreateString(s->events[i]));
    cJSON *ws = cJSON_AddArrayToObject(root, "workers");
    for (size_t i = 0; i < s->n_workers; i++) {
      const Lmw__WorkerStatus *w = s->workers[i];
      cJSON *o = cJSON_CreateObject();
      cJSON_AddNumberToObject(o, "id", w->id);
      cJSON_AddStringToObject(o, "host", w->host);
      cJSON_AddNumberToObject(o, "pid", w->pid);
      cJSON_AddStringToObject(o, "slice", w->slice);
      cJSON *ids = cJSON_AddArrayToObject(o, "devices");
      for (size_t j = 0; j < w->n_device_ids; j++) cJSON_AddItemToArray(ids, cJSON_CreateNumber(w->device_ids[j]));
      cJSON_AddBoolToObject(o, "alive", w->alive);
      cJSON_AddBoolToObject(o, "standby", w->standby);
      if (w->replaced_by) cJSON_AddNumberToObject(o, "replaced_by", w->replaced_by - 1);
      cJSON_AddNumberToObject(o, "epoch", (double)w->epoch);
      cJSON_AddStringToObject(o, "reason", w->reason);
      cJSON_AddNumberToObject(o, "since_heartbeat_ms", (double)w->since_heartbeat_ms);
      cJSON_AddNumberToObject(o, "uptime_ms", (double)w->uptime_ms);
      if (w->transfers) { /* shard transfers its data port served (as of its last heartbeat) */
        const Lmw__TransferStats *x = w->transfers;
        cJSON *tr = cJSON_AddObjectToObject(o, "transfers");
        cJSON_AddNumberToObject(tr, "local_puts", (double)x->local_puts);
        cJSON_AddNumberToObject(tr, "local_put_bytes", (double)x->local_put_bytes);
        cJSON_AddNumberToObject(tr, "local_gets", (double)x->local_gets);
        cJSON_AddNumberToObject(tr, "local_get_bytes", (double)x->local_get_bytes);
        cJSON_AddNumberToObject(tr, "stream_puts", (double)x->stream_puts);
        cJSON_AddNumberToObject(tr, "stream_put_bytes", (double)x->stream_put_bytes);
        cJSON_AddNumberToObject(tr, "stream_gets", (double)x->stream_gets);
        cJSON_AddNumberToObject(tr, "stream_get_bytes", (double)x->stream_get_bytes);
        cJSON_AddNumberToObject(tr, "local_refused", (double)x->local_refused);
      }
      cJSON_AddItemToArray(ws, o);
    }
    cJSON *ss = cJSON_AddArrayToObject(root, "slices");
    for (size_t k = 0; k < nsl; k++) {
      cJSON *o = cJSON_CreateObject();
      cJSON_AddStringToObject(o, "name", sl[k].name);
      cJSON_AddNumberToObject(o, "workers", sl[k].workers);
      cJSON_AddNumberToObject(o, "alive_workers", sl[k].alive);
      cJSON_AddNumberToObject(o, "devices", sl[k].devices);
      cJSON_AddNumberToObject(o, "healthy_devices", sl[k].healthy);
      cJSON_AddNumberToObject(o, "memory_capacity", (double)sl[k].memory);
      cJSON_AddItemToArray(ss, o);
    }
    cJSON *t = cJSON_AddObjectToObject(root, "totals");
    cJSON_AddNumberToObject(t, "workers", (double)s->n_workers);
    cJSON_AddNumberToObject(t, "alive_workers", alive);
    cJSON_AddNumberToObject(t, "standby_workers", standbys);
    cJSON_AddNumberToObject(t, "slices", (double)nsl);
    cJSON_AddNumberToObject(t, "devices", (double)dl->n_devices);
    cJSON_AddNumberToObject(t, "healthy_devices", healthy);
    cJSON_AddNumberToObject(t, "memory_capacity", (double)mem);
    cJSON_AddNumberToObject(t, "healthy_memory_capacity", (double)mem_healthy);
    cJSON_AddNumberToObject(t, "memory_used", (double)used);
    cli_print_json(root);
  } else {
    char up[48], m1[32], m2[32], m3[32];
    cli_format_duration(s->uptime_ms, up, sizeof up);
    cli_format_size(mem, m1, sizeof m1);
    cli_format_size(mem_healthy, m2, sizeof m2);
    cli_format_size(used, m3, sizeof m3);
    printf("controller  %s (%s, protocol %u), up %s, %u session%s\n", addr, s->software, s->protocol_version, up,
           s->sessions, s->sessions == 1 ? "" : "s");
    if (standbys) printf("workers     %zu (%u alive, %u standby)\n", s->n_workers, alive, standbys);
    else printf("workers     %zu (%u alive)\n", s->n_workers, alive);
    printf("slices      %zu\n", nsl);
    printf("devices     %zu (%u healthy)\n", dl->n_devices, healthy);
    printf("memory      %s (%s healthy, %s in use)\n", m1, m2, m3);
    if (s->journal && *s->journal) printf("journal     %s\n", s->journal);
    if (s->recovery && *s->recovery) printf("recovery    %s\n", s->recovery);
    else if (s->recoveries) printf("recovery    none in progress (%u completed)\n", s->recoveries);
    if (s->snapshots || s->snapshots_in_flight) {
      char sb[32];
      cli_format_size(s->snapshot_bytes, sb, sizeof sb);
      printf("snapshots   %llu launch outputs (%s) in other workers' host memory, %u copies in flight\n",
             (unsigned long long)s->snapshots, sb, s->snapshots_in_flight);
    }
    if (s->launch_log || s->launch_log_dropped)
      printf("launch log  %llu entries kept for replays (%llu dropped)\n", (unsigned long long)s->launch_log,
             (unsigned long long)s->launch_log_dropped);
    if (s->n_workers) {
      printf("\n");
      cli_table t;
      cli_table_init(&t, 7);
      cli_table_row(&t, "WORKER", "HOST", "PID", "SLICE", "DEVICES", "STATE", "LAST HEARTBEAT");
      for (size_t i = 0; i < s->n_workers; i++) {
        const Lmw__WorkerStatus *w = s->workers[i];
        char id[16], pid[16], ids[256], hb[48], ago[64], state[200];
        snprintf(id, sizeof id, "%u", w->id);
        snprintf(pid, sizeof pid, "%u", w->pid);
        cli_format_ids(w->device_ids, w->n_device_ids, ids, sizeof ids);
        cli_format_duration(w->since_heartbeat_ms, hb, sizeof hb);
        snprintf(ago, sizeof ago, "%s ago", hb);
        if (w->alive && w->standby) snprintf(state, sizeof state, "standby");
        else if (w->alive) snprintf(state, sizeof state, "alive");
        else if (w->replaced_by) snprintf(state, sizeof state, "LOST (%s), replaced by worker %u", w->reason,
                                          w->replaced_by - 1);
        else snprintf(state, sizeof state, "LOST (%s)", w->reason);
        if (w->standby) snprintf(ids, sizeof ids, "(%s)", "none");
        cli_table_row(&t, id, w->host, pid, w->slice, ids, state, ago);
      }
      cli_table_print(&t);
      cli_table_free(&t);
      printf("\n");
      cli_table_init(&t, 5);
      cli_table_row(&t, "SLICE", "WORKERS", "DEVICES", "HEALTHY", "MEMORY");
      for (size_t k = 0; k < nsl; k++) {
        char a[32], b[32], cc[32], dd[32];
        snprintf(a, sizeof a, "%u (%u alive)", sl[k].workers, sl[k].alive);
        snprintf(b, sizeof b, "%u", sl[k].devices);
        snprintf(cc, sizeof cc, "%u", sl[k].healthy);
        cli_format_size(sl[k].memory, dd, sizeof dd);
        cli_table_row(&t, sl[k].name, a, b, cc, dd);
      }
      cli_table_print(&t);
      cli_table_free(&t);
    }
    if (s->n_events) {
      printf("\nrecovery events (latest last)\n");
      for (size_t i = 0; i < s->n_events; i++) printf("  %s\n", s->events[i]);
    }
  }
  free(sl);
  lm_msg_free(sm);
  lm_msg_free(dm);
  return 0;
}
