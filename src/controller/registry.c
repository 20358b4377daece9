/* Worker registry and virtual device table: validation of registrations, dense virtual ids,
 * heartbeats and loss. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "controller/registry.h"
#include "net/msg.h"

struct lm_registry {
  uint64_t next_epoch;    /* epochs of registrations: 1, 2, ... */
  lm_reg_worker *workers; /* [nworkers], index == id */
  uint32_t nworkers, cap_workers;
  lm_reg_device *devices; /* [ndevices], index == virtual id */
  uint32_t ndevices, cap_devices;
};

lm_registry *lm_registry_create(void) { return calloc(1, sizeof(lm_registry)); }

void lm_registry_destroy(lm_registry *r) {
  if (!r) return;
  for (uint32_t i = 0; i < r->nworkers; i++) {
    free(r->workers[i].host);
    free(r->workers[i].slice);
    free(r->workers[i].device_ids);
    free(r->workers[i].dataplane);
    free(r->workers[i].data_address);
    free(r->workers[i].capacities);
  }
  free(r->workers);
  free(r->devices);
  free(r);
}

static int grow(void **p, uint32_t *cap, uint32_t need, size_t elem) {
  if (need <= *cap) return 0;
  uint32_t c = *cap ? *cap : 8;
  while (c < need) c *= 2;
  void *q = realloc(*p, (size_t)c * elem);
  if (!q) return -1;
  *p = q;
  *cap = c;
  return 0;
}

static int validate(const lm_registry *r, const lm_worker_spec *s, lm_err *err) {
  if (!lm_msg_name_ok(s->host, LM_REG_NAME_MAX))
    return lm_errf(err, LOOM_INVALID_ARGUMENT, "worker host name must be 1-%d printable characters",
                   LM_REG_NAME_MAX);
  if (!lm_msg_name_ok(s->slice, LM_REG_NAME_MAX))
    return lm_errf(err, LOOM_INVALID_ARGUMENT, "slice name must be 1-%d printable characters without spaces",
                   LM_REG_NAME_MAX);
  if (s->ndevices == 0) return lm_errf(err, LOOM_INVALID_ARGUMENT, "a worker must register at least one device");
  if (s->ndevices > LM_REG_MAX_DEVICES_PER_WORKER)
    return lm_errf(err, LOOM_INVALID_ARGUMENT, "%u devices on one worker is more than the limit of %d", s->ndevices,
                   LM_REG_MAX_DEVICES_PER_WORKER);
  if (r->nworkers >= LM_REG_MAX_WORKERS)
    return lm_errf(err, LOOM_BUSY, "the cluster already has the maximum of %d workers", LM_REG_MAX_WORKERS);
  if (!s->standby && (uint64_t)r->ndevices + s->ndevices > LM_REG_MAX_DEVICES)
    return lm_errf(err, LOOM_BUSY, "the cluster would exceed its maximum of %d devices", LM_REG_MAX_DEVICES);
  if (s->data_address && s->data_address[0] && !lm_msg_name_ok(s->data_address, LM_REG_NAME_MAX))
    return lm_errf(err, LOOM_INVALID_ARGUMENT, "the data port address must be 1-%d printable characters",
                   LM_REG_NAME_MAX);
  if (s->dataplane_len > LM_REG_DATAPLANE_MAX)
    return lm_errf(err, LOOM_INVALID_ARGUMENT, "data-plane address of %zu bytes exceeds %d", s->dataplane_len,
                   LM_REG_DATAPLANE_MAX);
  for (uint32_t i = 0; i < s->ndevices; i++) {
    const char *k = s->kinds[i];
    if (!k || strcmp(k, "cpu") != 0)
      return lm_errf(err, LOOM_UNSUPPORTED, "device %u: kind '%.32s' is not supported (only 'cpu')", i,
                     lm_msg_name_ok(k, 32) ? k : "?");
    if (s->capacities[i] == 0) return lm_errf(err, LOOM_INVALID_ARGUMENT, "device %u: memory capacity is 0", i);
  }
  return 0;
}

int lm_registry_add_worker(lm_registry *r, const lm_worker_spec *s, uint64_t now_ms, uint32_t *out_id, lm_err *err) {
  LM_TRY(validate(r, s, err));
  if (grow((void **)&r->workers, &r->cap_workers, r->nworkers + 1, sizeof *r->workers) < 0 ||
      grow((void **)&r->devices, &r->cap_devices, r->ndevices + s->ndevices, sizeof *r->devices) < 0)
    return lm_errf(err, LOOM_NO_MEMORY, "out of host memory registering a worker");
  lm_reg_worker w = {0};
  w.id = r->nworkers;
  w.host = strdup(s->host);
  w.slice = strdup(s->slice);
  w.device_ids = calloc(s->ndevices, sizeof *w.device_ids);
  w.data_address = strdup(s->data_address ? s->data_address : "");
  w.capacities = malloc(s->ndevices * sizeof *w.capacities);
  if (w.capacities) memcpy(w.capacities, s->capacities, s->ndevices * sizeof *w.capacities);
  if (s->dataplane_len) {
    w.dataplane = malloc(s->dataplane_len);
    if (w.dataplane) memcpy(w.dataplane, s->dataplane, s->dataplane_len);
  }
  if (!w.host || !w.slice || !w.device_ids || !w.data_address || !w.capacities || (s->dataplane_len && !w.dataplane)) {
    free(w.host), free(w.slice), free(w.device_ids), free(w.dataplane), free(w.data_address), free(w.capacities);
    return lm_errf(err, LOOM_NO_MEMORY, "out of host memory registering a worker");
  }
  w.dataplane_len = s->dataplane_len;
  w.pid = s->pid;
  w.ndevices = s->ndevices;
  w.state = LM_WORKER_ALIVE;
  w.registered_ms = w.last_heartbeat_ms = now_ms;
  w.epoch = ++r->next_epoch;
  w.standby = s->standby;
  for (uint32_t i = 0; s->standby && i < s->ndevices; i++) w.device_ids[i] = LM_REG_NO_DEVICE;
  for (uint32_t i = 0; !s->standby && i < s->ndevices; i++) {
    lm_reg_device *d = &r->devices[r->ndevices];
    memset(d, 0, sizeof *d);
    d->id = r->ndevices;
    d->worker = w.id;
    d->local_index = i;
    strcpy(d->kind, "cpu");
    d->memory_capacity = s->capacities[i];
    w.device_ids[i] = d->id;
    r->ndevices++;
  }
  r->workers[r->nworkers++] = w;
  *out_id = w.id;
  return 0;
}

bool lm_registry_has_room(const lm_registry *r, uint32_t ndevices) {
  return r->nworkers < LM_REG_MAX_WORKERS && (uint64_t)r->ndevices + ndevices <= LM_REG_MAX_DEVICES;
}

int lm_registry_reuse_worker(lm_registry *r, uint32_t id, const lm_worker_spec *s, uint64_t now_ms, lm_err *err) {
  if (id >= r->nworkers) return lm_errf(err, LOOM_NOT_FOUND, "no worker %u", id);
  lm_reg_worker *w = &r->workers[id];
  if (w->state != LM_WORKER_LOST || w->ndevices != s->ndevices || w->standby || w->replaced_by || s->standby)
    return lm_errf(err, LOOM_INVALID_ARGUMENT, "worker %u's slot cannot be reused", id);
  if (!s->host || !s->slice || !lm_msg_name_ok(s->host, LM_REG_NAME_MAX) || !lm_msg_name_ok(s->slice, LM_REG_NAME_MAX))
    return lm_errf(err, LOOM_INVALID_ARGUMENT, "host and slice names must be 1-%d printable characters", LM_REG_NAME_MAX);
  for (uint32_t i = 0; i < s->ndevices; i++) {
    if (!s->kinds[i] || strcmp(s->kinds[i], "cpu") != 0)
      return lm_errf(err, LOOM_UNSUPPORTED, "device %u: only kind 'cpu' is supported", i);
    if (s->capacities[i] == 0) return lm_errf(err, LOOM_INVALID_ARGUMENT, "device %u: memory capacity is 0", i);
  }
  char *host = strdup(s->host), *slice = strdup(s->slice), *da = strdup(s->data_address ? s->data_address : "");
  if (!host || !slice || !da) {
    free(host), free(slice), free(da);
    return lm_errf(err, LOOM_NO_MEMORY, "out of host memory registering a worker");
  }
  free(w->host), free(w->slice), free(w->data_address), free(w->dataplane);
  w->host = host, w->slice = slice, w->data_address = da;
  w->dataplane = NULL, w->dataplane_len = 0;
  w->pid = s->pid;
  w->state = LM_WORKER_ALIVE;
  w->reason[0] = 0;
  w->problem[0] = 0;
  w->registered_ms = w->last_heartbeat_ms = now_ms;
  w->epoch = ++r->next_epoch;
  memset(&w->transfers, 0, sizeof w->transfers);
  memset(&w->collectives, 0, sizeof w->collectives);
  for (uint32_t i = 0; i < s->ndevices; i++) {
    w->capacities[i] = s->capacities[i];
    lm_reg_device *d = &r->devices[w->device_ids[i]];
    d->memory_capacity = s->capacities[i];
    d->memory_used = 0;
  }
  return 0;
}

int lm_registry_heartbeat(lm_registry *r, uint32_t worker, uint64_t now_ms, const uint32_t *local_index,
                          const uint64_t *used, size_t nused, lm_err *err) {
  if (worker >= r->nworkers) return lm_errf(err, LOOM_NOT_FOUND, "no worker %u", worker);
  lm_reg_worker *w = &r->workers[worker];
  if (w->state != LM_WORKER_ALIVE) return lm_errf(err, LOOM_NOT_FOUND, "worker %u is lost (%s)", worker, w->reason);
  for (size_t i = 0; used && i < nused; i++) {
    uint32_t li = local_index ? local_index[i] : (uint32_t)i;
    if (li >= w->ndevices)
      return lm_errf(err, LOOM_INVALID_ARGUMENT, "heartbeat names device %u of a worker with %u devices", li,
                     w->ndevices);
  }
  for (size_t i = 0; used && i < nused; i++) {
    uint32_t li = local_index ? local_index[i] : (uint32_t)i;
    if (w->device_ids[li] != LM_REG_NO_DEVICE) r->devices[w->device_ids[li]].memory_used = used[i];
  }
  w->last_heartbeat_ms = now_ms;
  return 0;
}

void lm_registry_set_peaks(lm_registry *r, uint32_t worker, const uint32_t *local_index, const uint64_t *peak,
                           size_t n) {
  if (worker >= r->nworkers) return;
  const lm_reg_worker *w = &r->workers[worker];
  for (size_t i = 0; i < n; i++)
    if (local_index[i] < w->ndevices && w->device_ids[local_index[i]] != LM_REG_NO_DEVICE)
      r->devices[w->device_ids[local_index[i]]].memory_peak = peak[i];
}

static void keep_max(uint64_t *have, const uint64_t *got, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (got[i] > have[i]) have[i] = got[i];
}

int lm_registry_set_transfers(lm_registry *r, uint32_t worker, const lm_reg_transfers *t, lm_err *err) {
  if (worker >= r->nworkers) return lm_errf(err, LOOM_NOT_FOUND, "no worker %u", worker);
  _Static_assert(sizeof(lm_reg_transfers) == 9 * sizeof(uint64_t), "lm_reg_transfers is all counters");
  keep_max((uint64_t *)&r->workers[worker].transfers, (const uint64_t *)t, 9);
  return 0;
}

int lm_registry_set_collectives(lm_registry *r, uint32_t worker, const lm_reg_collectives *c, lm_err *err) {
  if (worker >= r->nworkers) return lm_errf(err, LOOM_NOT_FOUND, "no worker %u", worker);
  _Static_assert(sizeof(lm_reg_collectives) == (2 * LM_REG_COLL_OPS + 3) * sizeof(uint64_t),
                 "lm_reg_collectives is all counters");
  keep_max((uint64_t *)&r->workers[worker].collectives, (const uint64_t *)c, 2 * LM_REG_COLL_OPS + 3);
  return 0;
}

int lm_registry_set_dataplane(lm_registry *r, uint32_t worker, const uint8_t *blob, size_t len, lm_err *err) {
  if (worker >= r->nworkers) return lm_errf(err, LOOM_NOT_FOUND, "no worker %u", worker);
  if (len == 0 || len > LM_REG_DATAPLANE_MAX)
    return lm_errf(err, LOOM_INVALID_ARGUMENT, "data-plane address of %zu bytes (1-%d)", len, LM_REG_DATAPLANE_MAX);
  uint8_t *copy = malloc(len);
  if (!copy) return lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  memcpy(copy, blob, len);
  free(r->workers[worker].dataplane);
  r->workers[worker].dataplane = copy;
  r->workers[worker].dataplane_len = len;
  return 0;
}

bool lm_registry_mark_lost(lm_registry *r, uint32_t worker, const char *reason) {
  if (worker >= r->nworkers || r->workers[worker].state == LM_WORKER_LOST) return false;
  lm_reg_worker *w = &r->workers[worker];
  w->state = LM_WORKER_LOST;
  size_t n = strnlen(reason ? reason : "", sizeof w->reason - 1);
  memcpy(w->reason, reason ? reason : "", n);
  w->reason[n] = 0;
  if (!n) strcpy(w->reason, "lost");
  return true;
}

void lm_registry_note_lost(lm_registry *r, uint32_t worker, const char *note) {
  if (worker >= r->nworkers || r->workers[worker].state != LM_WORKER_LOST || !note || !note[0]) return;
  lm_reg_worker *w = &r->workers[worker];
  size_t n = strlen(w->reason);
  snprintf(w->reason + n, sizeof w->reason - n, "; %s", note);
}

size_t lm_registry_expire(lm_registry *r, uint64_t now_ms, uint64_t timeout_ms, uint32_t *lost, size_t max) {
  size_t n = 0;
  for (uint32_t i = 0; i < r->nworkers; i++) {
    lm_reg_worker *w = &r->workers[i];
    if (w->state != LM_WORKER_ALIVE || now_ms < w->last_heartbeat_ms || now_ms - w->last_heartbeat_ms <= timeout_ms)
      continue;
    if (lost && n >= max) break; /* the caller comes back for the rest */
    lm_registry_mark_lost(r, i, "no heartbeat");
    if (lost) lost[n] = i;
    n++;
  }
  return n;
}

int lm_registry_swap(lm_registry *r, uint32_t dead, uint32_t standby, lm_err *err) {
  if (dead >= r->nworkers || standby >= r->nworkers || dead == standby)
    return lm_errf(err, LOOM_INVALID_ARGUMENT, "no such pair of workers (%u, %u)", dead, standby);
  lm_reg_worker *d = &r->workers[dead], *s = &r->workers[standby];
  if (d->state != LM_WORKER_LOST || d->standby || d->replaced_by)
    return lm_errf(err, LOOM_INVALID_ARGUMENT, "worker %u is not a lost worker holding devices", dead);
  if (s->state != LM_WORKER_ALIVE || !s->standby || s->problem[0])
    return lm_errf(err, LOOM_INVALID_ARGUMENT, "worker %u is not a usable standby", standby);
  if (s->ndevices != d->ndevices)
    return lm_errf(err, LOOM_INVALID_ARGUMENT, "standby worker %u has %u devices, lost worker %u had %u", standby,
                   s->ndevices, dead, d->ndevices);
  for (uint32_t i = 0; i < d->ndevices; i++) {
    lm_reg_device *dev = &r->devices[d->device_ids[i]];
    dev->worker = standby;
    dev->local_index = i;
    dev->memory_capacity = s->capacities[i];
    dev->memory_used = 0;
    s->device_ids[i] = d->device_ids[i];
  }
  s->standby = false;
  d->replaced_by = standby + 1;
  return 0;
}

uint32_t lm_registry_worker_count(const lm_registry *r) { return r->nworkers; }
uint32_t lm_registry_device_count(const lm_registry *r) { return r->ndevices; }

const lm_reg_worker *lm_registry_worker(const lm_registry *r, uint32_t id) {
  return id < r->nworkers ? &r->workers[id] : NULL;
}

const lm_reg_device *lm_registry_device(const lm_registry *r, uint32_t id) {
  return id < r->ndevices ? &r->devices[id] : NULL;
}

bool lm_registry_device_healthy(const lm_registry *r, uint32_t id) {
  if (id >= r->ndevices) return false;
  const lm_reg_worker *w = &r->workers[r->devices[id].worker];
  return w->state == LM_WORKER_ALIVE && !w->problem[0];
}

int lm_registry_set_problem(lm_registry *r, uint32_t worker, const char *reason, lm_err *err) {
  if (worker >= r->nworkers) return lm_errf(err, LOOM_NOT_FOUND, "no worker %u", worker);
  lm_reg_worker *w = &r->workers[worker];
  snprintf(w->problem, sizeof w->problem, "%s", reason && *reason ? reason : "unusable");
  return 0;
}

const char *lm_registry_device_reason(const lm_registry *r, uint32_t id) {
  if (id >= r->ndevices) return "no such device";
  const lm_reg_worker *w = &r->workers[r->devices[id].worker];
  return w->state == LM_WORKER_ALIVE ? w->problem : w->reason;
}

/* ---- restoring from the controller's journal (ctl_journal.c) ---- */

int lm_registry_restore_worker(lm_registry *r, uint32_t id, const lm_worker_spec *s, const uint32_t *device_ids,
                               uint64_t epoch, uint32_t replaced_by, const char *reason, lm_err *err) {
  if (id != r->nworkers)
    return lm_errf(err, LOOM_INVALID_ARGUMENT, "worker %u recorded out of order (expected %u)", id, r->nworkers);
  if (!lm_msg_name_ok(s->host, LM_REG_NAME_MAX) || !lm_msg_name_ok(s->slice, LM_REG_NAME_MAX) || !s->ndevices ||
      s->ndevices > LM_REG_MAX_DEVICES_PER_WORKER || r->nworkers >= LM_REG_MAX_WORKERS)
    return lm_errf(err, LOOM_INVALID_ARGUMENT, "worker %u's record is invalid", id);
  uint32_t maxdev = r->ndevices;
  for (uint32_t i = 0; i < s->ndevices; i++) {
    if (device_ids[i] != LM_REG_NO_DEVICE && device_ids[i] >= LM_REG_MAX_DEVICES)
      return lm_errf(err, LOOM_INVALID_ARGUMENT, "worker %u's record names device %u", id, device_ids[i]);
    if (device_ids[i] != LM_REG_NO_DEVICE && device_ids[i] + 1 > maxdev) maxdev = device_ids[i] + 1;
  }
  if (grow((void **)&r->workers, &r->cap_workers, r->nworkers + 1, sizeof *r->workers) < 0 ||
      grow((void **)&r->devices, &r->cap_devices, maxdev, sizeof *r->devices) < 0)
    return lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  lm_reg_worker w = {0};
  w.id = id;
  w.host = strdup(s->host);
  w.slice = strdup(s->slice);
  w.device_ids = malloc(s->ndevices * sizeof *w.device_ids);
  w.data_address = strdup(s->data_address ? s->data_address : "");
  w.capacities = malloc(s->ndevices * sizeof *w.capacities);
  if (!w.host || !w.slice || !w.device_ids || !w.data_address || !w.capacities) {
    free(w.host), free(w.slice), free(w.device_ids), free(w.data_address), free(w.capacities);
    return lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  }
  memcpy(w.device_ids, device_ids, s->ndevices * sizeof *w.device_ids);
  memcpy(w.capacities, s->capacities, s->ndevices * sizeof *w.capacities);
  w.pid = s->pid;
  w.ndevices = s->ndevices;
  w.state = LM_WORKER_LOST;
  snprintf(w.reason, sizeof w.reason, "%s", reason && *reason ? reason : "lost");
  w.epoch = epoch;
  w.standby = s->standby;
  w.replaced_by = replaced_by;
  if (epoch > r->next_epoch) r->next_epoch = epoch;
  for (uint32_t d = r->ndevices; d < maxdev; d++) { /* filled by the worker that holds it */
    memset(&r->devices[d], 0, sizeof r->devices[d]);
    r->devices[d].id = d;
    r->devices[d].worker = id;
    strcpy(r->devices[d].kind, "cpu");
  }
  if (maxdev > r->ndevices) r->ndevices = maxdev;
  if (!s->standby && !replaced_by)
    for (uint32_t i = 0; i < s->ndevices; i++) {
      lm_reg_device *d = &r->devices[device_ids[i]];
      d->worker = id;
      d->local_index = i;
      d->memory_capacity = s->capacities[i];
    }
  r->workers[r->nworkers++] = w;
  return 0;
}

int lm_registry_revive(lm_registry *r, uint32_t id, uint32_t pid, const char *data_address, uint64_t now_ms,
                       lm_err *err) {
  if (id >= r->nworkers) return lm_errf(err, LOOM_NOT_FOUND, "no worker %u", id);
  lm_reg_worker *w = &r->workers[id];
  if (w->state != LM_WORKER_LOST) return lm_errf(err, LOOM_INVALID_ARGUMENT, "worker %u is connected already", id);
  if (data_address && *data_address && !lm_msg_name_ok(data_address, LM_REG_NAME_MAX))
    return lm_errf(err, LOOM_INVALID_ARGUMENT, "the data port address must be 1-%d printable characters",
                   LM_REG_NAME_MAX);
  char *da = strdup(data_address ? data_address : "");
  if (!da) return lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  free(w->data_address);
  w->data_address = da;
  free(w->dataplane);
  w->dataplane = NULL, w->dataplane_len = 0;
  w->pid = pid;
  w->state = LM_WORKER_ALIVE;
  w->reason[0] = 0;
  w->problem[0] = 0;
  w->registered_ms = w->last_heartbeat_ms = now_ms;
  return 0;
}

uint64_t lm_registry_epoch_floor(lm_registry *r, uint64_t floor) {
  if (floor > r->next_epoch) r->next_epoch = floor;
  return r->next_epoch;
}
