/* `loom devices`: the cluster's devices as one machine, through the public C API (loom.h):
 * virtual id, kind, worker (host and process), slice, memory and health; totals below. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/cli.h"
#include "cli/util.h"
#include "client/cconn.h"
#include "client/locate.h"
#include "loom/loom.h"

static const char g_usage[] =
    "usage: loom devices [--controller HOST:PORT] [--json]\n"
    "\n"
    "Lists every device of the cluster: virtual id, kind, worker (host and process), slice,\n"
    "memory capacity and use, health; then the totals, and the standby workers (spare capacity\n"
    "that holds no virtual devices until it replaces a lost worker).\n"
    "\n"
    "options:\n"
    "  --controller HOST:PORT   the controller (default: $LOOM_CONTROLLER, else the local cluster\n"
    "                           started by `loom up`)\n"
    "  --json                   print JSON instead of a table\n"
    "  --timeout SECONDS        give up after this long (default 30)\n"
    "  -h, --help               show this help\n";

/* The cluster status (for its standby workers, which hold no virtual devices and so are not in
 * the device list), or NULL when it cannot be had. Free with lm_msg_free. */
static Lmw__ClusterStatusReply *cluster_status(const char *addr, int timeout_s) {
  lm_err err;
  int64_t tmo = (int64_t)timeout_s * 1000;
  lm_cconn *c;
  if (cli_open_session(addr, tmo, "loom devices", &c, &err) < 0) return NULL;
  Lmw__ClusterStatus req = LMW__CLUSTER_STATUS__INIT;
  ProtobufCMessage *m = NULL;
  int rc = lm_cconn_call(c, LM_MSG_CLUSTER_STATUS, &req.base, LM_MSG_CLUSTER_STATUS_REPLY, tmo, NULL, NULL,
                         &m, &err);
  lm_cconn_close(c);
  return rc == 0 ? (Lmw__ClusterStatusReply *)m : NULL;
}

/* Distinct values among n strings (n small: quadratic is fine). */
static size_t count_distinct(const char **v, size_t n) {
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    size_t j = 0;
    while (j < i && strcmp(v[j], v[i]) != 0) j++;
    if (j == i) k++;
  }
  return k;
}

int cmd_devices(int argc, char **argv) {
  const char *cmd = "devices";
  cli_query q;
  if (cli_query_options(cmd, g_usage, argc, argv, &q) < 0) return q.exit;
  loom_client *c = cli_connect(cmd, q.controller, q.timeout_s);
  if (!c) return 1;
  int32_t n = 0;
  loom_device_count(c, &n);
  loom_device_desc *d = calloc(n ? (size_t)n : 1, sizeof *d);
  const char **slices = calloc(n ? (size_t)n : 1, sizeof *slices);
  if (!d || !slices) {
    free(d), free(slices);
    loom_disconnect(c);
    return cli_fail(cmd, "out of memory");
  }
  uint64_t cap_total = 0, cap_healthy = 0, used_total = 0;
  int32_t healthy = 0;
  size_t nworkers = 0;
  for (int32_t i = 0; i < n; i++) {
    d[i].struct_size = sizeof d[i];
    if (loom_device_info(c, i, &d[i]) != LOOM_OK) {
      int rc = cli_fail(cmd, "%s", loom_errmsg(c));
      free(d), free(slices);
      loom_disconnect(c);
      return rc;
    }
    cap_total += d[i].memory_capacity;
    used_total += d[i].memory_used;
    if (d[i].healthy) healthy++, cap_healthy += d[i].memory_capacity;
  }
  /* Workers and slices: one slice name per distinct worker (a worker is in exactly one slice). */
  int32_t max_worker = -1;
  for (int32_t i = 0; i < n; i++)
    if (d[i].worker_id > max_worker) max_worker = d[i].worker_id;
  unsigned char *seen = calloc((size_t)max_worker + 2, 1);
  for (int32_t i = 0; seen && i < n; i++)
    if (d[i].worker_id >= 0 && !seen[d[i].worker_id]) {
      seen[d[i].worker_id] = 1;
      slices[nworkers++] = d[i].slice;
    }
  free(seen);
  size_t nslices = count_distinct(slices, nworkers);
  Lmw__ClusterStatusReply *st = cluster_status(loom_client_address(c), q.timeout_s);
  if (q.json) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "controller", loom_client_address(c));
    cJSON *arr = cJSON_AddArrayToObject(root, "devices");
    for (int32_t i = 0; i < n; i++) {
      cJSON *o2 = cJSON_CreateObject();
      cJSON_AddNumberToObject(o2, "id", d[i].id);
      cJSON_AddStringToObject(o2, "kind", d[i].kind);
      cJSON_AddNumberToObject(o2, "worker_id", d[i].worker_id);
      cJSON_AddNumberToObject(o2, "local_index", d[i].local_index);
      cJSON_AddStringToObject(o2, "host", d[i].worker_host);
      cJSON_AddNumberToObject(o2, "pid", (double)d[i].worker_pid);
      cJSON_AddStringToObject(o2, "slice", d[i].slice);
      cJSON_AddNumberToObject(o2, "memory_capacity", (double)d[i].memory_capacity);
      cJSON_AddNumberToObject(o2, "memory_used", (double)d[i].memory_used);
      cJSON_AddNumberToObject(o2, "memory_peak", (double)d[i].memory_peak);
      cJSON_AddBoolToObject(o2, "healthy", d[i].healthy);
      cJSON_AddStringToObject(o2, "health_reason", d[i].health_reason);
      cJSON_AddItemToArray(arr, o2);
    }
    cJSON *sb = cJSON_AddArrayToObject(root, "standbys"); /* spare workers: no virtual devices (docs/elastic.md) */
    for (size_t i = 0; st && i < st->n_workers; i++) {
      const Lmw__WorkerStatus *w = st->workers[i];
      if (!w->standby || !w->alive) continue;
      cJSON *o2 = cJSON_CreateObject();
      cJSON_AddNumberToObject(o2, "worker_id", w->id);
      cJSON_AddStringToObject(o2, "host", w->host);
      cJSON_AddNumberToObject(o2, "pid", w->pid);
      cJSON_AddStringToObject(o2, "slice", w->slice);
      cJSON_AddNumberToObject(o2, "devices", w->ndevices);
      cJSON_AddItemToArray(sb, o2);
    }
    cJSON *t = cJSON_AddObjectToObject(root, "totals");
    cJSON_AddNumberToObject(t, "devices", n);
    cJSON_AddNumberToObject(t, "healthy_devices", healthy);
    cJSON_AddNumberToObject(t, "workers", (double)nworkers);
    cJSON_AddNumberToObject(t, "slices", (double)nslices);
    cJSON_AddNumberToObject(t, "memory_capacity", (double)cap_total);
    cJSON_AddNumberToObject(t, "healthy_memory_capacity", (double)cap_healthy);
    cJSON_AddNumberToObject(t, "memory_used", (double)used_total);
    cli_print_json(root);
  } else {
    cli_table t;
    cli_table_init(&t, 9);
    cli_table_row(&t, "ID", "KIND", "WORKER", "HOST", "PID", "SLICE", "MEMORY", "USED", "HEALTH");
    for (int32_t i = 0; i < n; i++) {
      char id[16], w[16], pid[24], mem[32], used[32], health[200];
      snprintf(id, sizeof id, "%d", d[i].id);
      snprintf(w, sizeof w, "%d", d[i].worker_id);
      snprintf(pid, sizeof pid, "%lld", (long long)d[i].worker_pid);
      cli_format_size(d[i].memory_capacity, mem, sizeof mem);
      cli_format_size(d[i].memory_used, used, sizeof used);
      if (d[i].healthy) snprintf(health, sizeof health, "healthy");
      else snprintf(health, sizeof health, "UNHEALTHY (%s)", d[i].health_reason);
      cli_table_row(&t, id, d[i].kind, w, d[i].worker_host, pid, d[i].slice, mem, used, health);
    }
    cli_table_print(&t);
    cli_table_free(&t);
    char cap[32], hcap[32];
    cli_format_size(cap_total, cap, sizeof cap);
    cli_format_size(cap_healthy, hcap, sizeof hcap);
    printf("\n%d device%s (%d healthy) on %zu worker%s in %zu slice%s; %s of device memory (%s healthy); "
           "controller %s\n",
           n, n == 1 ? "" : "s", healthy, nworkers, nworkers == 1 ? "" : "s", nslices, nslices == 1 ? "" : "s", cap,
           hcap, loom_client_address(c));
    for (size_t i = 0; st && i < st->n_workers; i++) {
      const Lmw__WorkerStatus *w = st->workers[i];
      if (w->standby && w->alive)
        printf("standby: worker %u (%s pid %u, slice %s) with %u devices, ready to replace a lost worker\n", w->id,
               w->host, w->pid, w->slice, w->ndevices);
    }
  }
  lm_msg_free(st ? &st->base : NULL);
  free(d);
  free(slices);
  loom_disconnect(c);
  return 0;
}
