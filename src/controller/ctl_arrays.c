/* Array metadata at the controller: shape, dtype, sharding, placement and readiness. Element
 * data never comes here: ARRAY_CREATE and ARRAY_LOCATE answer with where each shard lives and
 * a token for the worker, and the client transfers the bytes with the worker directly. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/dtype.h"
#include "common/log.h"
#include "controller/ctl.h"

void ctl_array_destroy(void *obj) {
  c_array *a = obj;
  if (!a) return;
  if (a->held) ctl_release(a->held, a->devs, a->nheld);
  ctl_pool_array_gone(a);
  free(a->devs);
  free(a->bk);
  free(a->msg);
  free(a->lin_in);
  free(a);
}

void ctl_sharding_to_wire(const lm_sharding *s, int rank, Lmw__Sharding *w, Lmw__DimAxes *dims, Lmw__DimAxes **dptr,
                          uint32_t *axes, uint64_t *mesh_shape) {
  lmw__sharding__init(w);
  for (int a = 0; a < s->mesh_rank; a++) mesh_shape[a] = (uint64_t)s->mesh_shape[a];
  w->n_mesh_shape = (size_t)s->mesh_rank;
  w->mesh_shape = mesh_shape;
  w->n_devices = s->ndev;
  w->devices = (uint32_t *)s->devices;
  size_t k = 0;
  for (int d = 0; d < rank; d++) {
    lmw__dim_axes__init(&dims[d]);
    dims[d].axes = axes + k;
    for (int j = 0; j < LM_MESH_MAX_AXES && s->dim_axes[d][j] >= 0; j++) axes[k++] = (uint32_t)s->dim_axes[d][j];
    dims[d].n_axes = (size_t)(axes + k - dims[d].axes);
    dptr[d] = &dims[d];
  }
  w->n_dims = (size_t)rank;
  w->dims = dptr;
}

int ctl_check_devices(ctl *c, const uint32_t *devs, uint32_t n, const char *what, lm_err *err) {
  uint32_t ndevs = lm_registry_device_count(c->reg);
  uint8_t *seen = calloc(ndevs ? ndevs : 1, 1);
  int rc = seen ? 0 : lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  for (uint32_t i = 0; rc == 0 && i < n; i++) {
    uint32_t v = devs[i];
    if (v >= ndevs)
      rc = lm_errf(err, LOOM_INVALID_ARGUMENT, "no device %u (the cluster has %u devices)", v, ndevs);
    else if (seen[v])
      rc = lm_errf(err, LOOM_INVALID_ARGUMENT, "device %u appears twice in %s", v, what);
    else if (!lm_registry_device_healthy(c->reg, v))
      rc = lm_errf(err, LOOM_WORKER_LOST, "device %u is unavailable: its worker is lost (%s)", v,
                   lm_registry_device_reason(c->reg, v));
    else
      seen[v] = 1;
  }
  free(seen);
  return rc;
}

int ctl_sharding_read(const Lmw__Sharding *w, int rank, const int64_t *dims, lm_sharding *s, uint32_t **devs_out,
                      uint32_t dev0, lm_err *err) {
  *devs_out = NULL;
  lm_sharding_init(s);
  if (!w) { /* default: the whole array on device 0 (the session's first) */
    uint32_t *d = calloc(1, sizeof *d);
    if (!d) return lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
    *d = dev0;
    s->devices = d;
    *devs_out = d;
  } else {
    if (w->n_mesh_shape > LM_MESH_MAX_AXES)
      return lm_errf(err, LOOM_INVALID_ARGUMENT, "the mesh has %zu axes (at most %d)", w->n_mesh_shape,
                     LM_MESH_MAX_AXES);
    if (w->n_dims > (size_t)rank)
      return lm_errf(err, LOOM_INVALID_ARGUMENT, "the sharding describes %zu dimensions of a rank-%d array",
                     w->n_dims, rank);
    if (w->n_devices == 0 || w->n_devices > LM_SHARD_MAX_DEVICES)
      return lm_errf(err, LOOM_INVALID_ARGUMENT, "a sharding needs 1 to %d devices (got %zu)", LM_SHARD_MAX_DEVICES,
                     w->n_devices);
    s->mesh_rank = (int32_t)w->n_mesh_shape;
    for (size_t a = 0; a < w->n_mesh_shape; a++) {
      if (w->mesh_shape[a] == 0 || w->mesh_shape[a] > LM_SHARD_MAX_DEVICES)
        return lm_errf(err, LOOM_INVALID_ARGUMENT, "mesh axis %zu has size %llu", a,
                       (unsigned long long)w->mesh_shape[a]);
      s->mesh_shape[a] = (int64_t)w->mesh_shape[a];
    }
    for (size_t d = 0; d < w->n_dims; d++) {
      const Lmw__DimAxes *da = w->dims[d];
      if (da->n_axes > LM_MESH_MAX_AXES)
        return lm_errf(err, LOOM_INVALID_ARGUMENT, "dimension %zu is split over %zu axes", d, da->n_axes);
      for (size_t j = 0; j < da->n_axes; j++) {
        if (da->axes[j] >= (uint32_t)s->mesh_rank)
          return lm_errf(err, LOOM_INVALID_ARGUMENT, "dimension %zu is split over mesh axis %u of a %d-axis mesh", d,
                         da->axes[j], s->mesh_rank);
        s->dim_axes[d][j] = (int8_t)da->axes[j];
      }
    }
    s->ndev = (uint32_t)w->n_devices;
    uint32_t *d = malloc(w->n_devices * sizeof *d);
    if (!d) return lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
    memcpy(d, w->devices, w->n_devices * sizeof *d);
    s->devices = d;
    *devs_out = d;
  }
  int rc = lm_sharding_check(s, rank, dims, err);
  if (rc < 0) {
    free(*devs_out);
    *devs_out = NULL;
  }
  return rc;
}

/* Reads and checks a wire sharding for an array of rank dims against the device table. */
static int sharding_from_wire(ctl *c, const Lmw__Sharding *w, int rank, const int64_t *dims, lm_sharding *s,
                              uint32_t **devs_out, uint32_t dev0, lm_err *err) {
  LM_TRY(ctl_sharding_read(w, rank, dims, s, devs_out, dev0, err));
  int rc = ctl_check_devices(c, s->devices, s->ndev, "the sharding", err);
  if (rc < 0) {
    free(*devs_out);
    *devs_out = NULL;
  }
  return rc;
}

/* Fills the placement reply for array a: one location per device, with put or get tokens. */
static void placement_reply(peer *p, const lm_frame *f, const c_array *a, int kind) {
  ctl *c = p->ctl;
  uint32_t n = a->sh.ndev;
  Lmw__ShardLocation *locs = calloc(n, sizeof *locs);
  Lmw__ShardLocation **ptrs = calloc(n, sizeof *ptrs);
  uint64_t *nums = calloc((size_t)n * 2 * LM_SHARD_MAX_RANK, sizeof *nums);
  uint8_t *toks = calloc(n, LM_TOKEN_SIZE);
  if (!locs || !ptrs || !nums || !toks) {
    free(locs), free(ptrs), free(nums), free(toks);
    ctl_reply_error(p, f->h.request_id, LOOM_NO_MEMORY, "out of host memory");
    return;
  }
  for (uint32_t i = 0; i < n; i++) {
    Lmw__ShardLocation *l = &locs[i];
    lmw__shard_location__init(l);
    int64_t off[LM_SHARD_MAX_RANK], sd[LM_SHARD_MAX_RANK];
    lm_sharding_shard(&a->sh, a->rank, a->dims, i, off, sd);
    uint64_t *o = nums + (size_t)i * 2 * LM_SHARD_MAX_RANK, *dd = o + LM_SHARD_MAX_RANK;
    for (int d = 0; d < a->rank; d++) o[d] = (uint64_t)off[d], dd[d] = (uint64_t)sd[d];
    l->n_offsets = l->n_dims = (size_t)a->rank;
    l->offsets = o;
    l->dims = dd;
    const lm_reg_device *dev = lm_registry_device(c->reg, a->devs[i]);
    const lm_reg_worker *w = lm_registry_worker(c->reg, dev->worker);
    l->device = a->devs[i];
    ctl_pool_map_out(p, &l->device, 1); /* a pool session's own numbering */
    l->worker_id = dev->worker;
    l->local_index = dev->local_index;
    peer *wp = dev->worker < c->worker_peer_cap ? c->worker_peer[dev->worker] : NULL;
    bool alive = lm_registry_device_healthy(c->reg, a->devs[i]) && wp;
    l->data_address = alive ? w->data_address : "";
    if (alive) {
      int k = kind == LM_TOKEN_PUT && a->bk && a->bk[i] != LM_REG_NO_DEVICE ? LM_TOKEN_PUT_SNAP : kind;
      lm_token_make(c->worker_key[dev->worker], k, p->session->id, a->id, dev->worker, dev->local_index,
                    kind == LM_TOKEN_PUT ? (uint32_t)a->dtype : 0, kind == LM_TOKEN_PUT ? dd : NULL,
                    kind == LM_TOKEN_PUT ? (size_t)a->rank : 0, toks + (size_t)i * LM_TOKEN_SIZE);
      l->token.data = toks + (size_t)i * LM_TOKEN_SIZE;
      l->token.len = LM_TOKEN_SIZE;
      l->min_cseq = wp->cseq;
    }
    ptrs[i] = l;
  }
  Lmw__ArrayPlacement r = LMW__ARRAY_PLACEMENT__INIT;
  r.id = a->id;
  r.n_shards = n;
  r.shards = ptrs;
  ctl_reply(p, f, LM_MSG_ARRAY_PLACEMENT, &r.base);
  free(locs), free(ptrs), free(nums), free(toks);
}

int ctl_array_new(peer *p, uint64_t id, uint32_t dtype, const uint64_t *dims, size_t rank, const Lmw__Sharding *shw,
                  c_array **out, lm_err *err) {
  ctl *c = p->ctl;
  int rc = 0;
  *out = NULL;
  if (!lm_dtype_valid((int)dtype)) rc = lm_errf(err, LOOM_INVALID_ARGUMENT, "unknown dtype %u", dtype);
  else if (id >= LM_CTL_RESERVED_IDS)
    rc = lm_errf(err, LOOM_INVALID_ARGUMENT, "array id %llu is reserved for the controller (ids from 2^63 on name "
                 "a recovery's scratch arrays)", (unsigned long long)id);
  else if (rank > LM_SHARD_MAX_RANK)
    rc = lm_errf(err, LOOM_INVALID_ARGUMENT, "rank %zu is more than %d", rank, LM_SHARD_MAX_RANK);
  c_array *a = rc == 0 ? calloc(1, sizeof *a) : NULL;
  if (rc == 0 && !a) rc = lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  if (rc == 0) {
    a->id = id;
    a->dtype = (lm_dtype)dtype;
    a->rank = (int)rank;
    uint64_t numel = 1, nbytes;
    for (int d = 0; rc == 0 && d < a->rank; d++) {
      if (dims[d] > (uint64_t)INT64_MAX || __builtin_mul_overflow(numel, dims[d], &numel))
        rc = lm_errf(err, LOOM_INVALID_ARGUMENT, "the shape overflows");
      a->dims[d] = (int64_t)dims[d];
    }
    if (rc == 0 && __builtin_mul_overflow(numel, (uint64_t)lm_dtype_size(a->dtype), &nbytes))
      rc = lm_errf(err, LOOM_INVALID_ARGUMENT, "the array's size overflows");
  }
  uint32_t npool;
  const uint32_t *pool = ctl_pool_devices(p, &npool);
  if (rc == 0) rc = sharding_from_wire(c, shw, a->rank, a->dims, &a->sh, &a->devs, pool ? pool[0] : 0, err);
  if (rc == 0) { /* a shard larger than its device can never be put */
    int64_t off[LM_SHARD_MAX_RANK], sd[LM_SHARD_MAX_RANK];
    lm_sharding_shard(&a->sh, a->rank, a->dims, 0, off, sd);
    uint64_t bytes;
    lm_dims_numel(a->rank, sd, &bytes);
    bytes *= lm_dtype_size(a->dtype);
    for (uint32_t i = 0; rc == 0 && i < a->sh.ndev; i++) {
      const lm_reg_device *d = lm_registry_device(c->reg, a->devs[i]);
      if (bytes > d->memory_capacity)
        rc = lm_errf(err, LOOM_DEVICE_OUT_OF_MEMORY,
                     "a shard of %llu bytes does not fit device %u, which has %llu bytes of memory",
                     (unsigned long long)bytes, a->devs[i], (unsigned long long)d->memory_capacity);
    }
  }
  for (uint32_t i = 0; rc == 0 && i < a->sh.ndev; i++) lm_session_touch(p->session, lm_registry_device(c->reg, a->devs[i])->worker);
  if (rc == 0) rc = ctl_pool_array_add(p, a, true, err); /* the device_memory quota */
  if (rc == 0) a->held = ctl_hold(c, a->devs, a->nheld = a->sh.ndev);
  if (rc == 0) rc = lm_session_add_id(p->session, a->id, H_ARRAY, a, ctl_array_destroy, err);
  if (rc < 0) {
    ctl_array_destroy(a);
    return rc;
  }
  a->state = A_READY;
  *out = a;
  return 0;
}

void ctl_on_array_create(peer *p, const lm_frame *f, const Lmw__ArrayCreate *m) {
  ctl *c = p->ctl;
  lm_err err;
  c_array *had = p->resumed ? lm_session_get(p->session, m->id, H_ARRAY) : NULL;
  if (had && had->state == A_READY && !had->producer && had->dtype == (lm_dtype)m->dtype &&
      had->rank == (int)m->n_dims) { /* re-sent after a controller restart: the same placement again */
    bool same = true;
    for (int d = 0; d < had->rank; d++) same = same && had->dims[d] == (int64_t)m->dims[d];
    if (same) {
      placement_reply(p, f, had, LM_TOKEN_PUT);
      return;
    }
  }
  c_array *a;
  int rc = ctl_array_new(p, m->id, m->dtype, m->dims, m->n_dims, m->sharding, &a, &err);
  if (rc < 0) {
    ctl_reply_error(p, f->h.request_id, rc, "cannot create array %llu: %s", (unsigned long long)m->id, err.msg);
    return;
  }
  ctl_j_array(c, p->session->id, a);
  ctl_snapshot_plan(c, a);   /* which shards get a snapshot: their put tokens say so */
  placement_reply(p, f, a, LM_TOKEN_PUT);
  ctl_snapshot_put(c, p, a); /* the copies wait for the client's bytes */
}

void ctl_on_array_locate(peer *p, const lm_frame *f, const Lmw__ArrayLocate *m) {
  ctl *c = p->ctl;
  c_array *a = lm_session_get(p->session, m->id, H_ARRAY);
  if (!a) {
    ctl_reply_error(p, f->h.request_id, LOOM_NOT_FOUND, "array %llu %s", (unsigned long long)m->id,
                    lm_session_was_deleted(p->session, m->id) ? "was deleted" : "does not exist in this session");
    return;
  }
  if (a->state == A_FAILED) {
    ctl_reply_error(p, f->h.request_id, a->code, "%s", a->msg ? a->msg : "its producer failed");
    return;
  }
  /* every distinct shard needs a holder that is alive */
  for (uint32_t i = 0; i < a->sh.ndev; i++) {
    if (lm_registry_device_healthy(c->reg, a->devs[i])) continue;
    int64_t oi[LM_SHARD_MAX_RANK], si[LM_SHARD_MAX_RANK], oj[LM_SHARD_MAX_RANK], sj[LM_SHARD_MAX_RANK];
    lm_sharding_shard(&a->sh, a->rank, a->dims, i, oi, si);
    bool covered = false;
    for (uint32_t j = 0; j < a->sh.ndev && !covered; j++) {
      if (j == i || !lm_registry_device_healthy(c->reg, a->devs[j])) continue;
      lm_sharding_shard(&a->sh, a->rank, a->dims, j, oj, sj);
      covered = !memcmp(oi, oj, (size_t)a->rank * sizeof *oi);
    }
    if (!covered) {
      char wn[160];
      ctl_worker_name(c, lm_registry_device(c->reg, a->devs[i])->worker, wn, sizeof wn);
      ctl_reply_error(p, f->h.request_id, LOOM_WORKER_LOST, "array %llu lost its shard on device %u with %s (%s)",
                      (unsigned long long)a->id, a->devs[i], wn, lm_registry_device_reason(c->reg, a->devs[i]));
      return;
    }
  }
  ctl_pool_array_located(p, a);
  placement_reply(p, f, a, LM_TOKEN_GET);
}

int ctl_arrays_delete(peer *p, const uint64_t *del_ids, size_t n_del) {
  ctl *c = p->ctl;
  uint32_t nw = lm_registry_worker_count(c->reg);
  /* one FREE_ARRAYS per worker for the whole request */
  uint64_t **ids = calloc(nw ? nw : 1, sizeof *ids);
  size_t *cnt = calloc(nw ? nw : 1, sizeof *cnt);
  if (!ids || !cnt) {
    free(ids), free(cnt);
    return LOOM_NO_MEMORY;
  }
  for (size_t k = 0; k < n_del; k++) {
    c_array *a = lm_session_get(p->session, del_ids[k], H_ARRAY);
    if (!a) continue; /* deleting twice (or something unknown) is not an error */
    if (ctl_zombie_keep(c, p->session, a)) { /* a launch in flight or a replay reads it: freed after */
      lm_session_forget(p->session, a->id, H_ARRAY, NULL);
      ctl_j_array_del(c, p->session->id, del_ids[k]);
      continue;
    }
    ctl_lineage_drop(c, p->session, a); /* its inputs need not be kept for it any more */
    ctl_log_unref(c, a);                /* nor its producer's log entry */
    for (uint32_t i = 0; i < 2 * a->sh.ndev; i++) { /* its shards, then its snapshots */
      uint32_t w = i < a->sh.ndev ? lm_registry_device(c->reg, a->devs[i])->worker
                                  : (a->bk ? a->bk[i - a->sh.ndev] : LM_REG_NO_DEVICE);
      if (w >= nw) continue;
      if (cnt[w] && ids[w][cnt[w] - 1] == a->id) continue;
      if (cnt[w] == 0 || (cnt[w] >= 8 && (cnt[w] & (cnt[w] - 1)) == 0)) { /* 8, 16, 32, ... */
        uint64_t *g = realloc(ids[w], (cnt[w] ? cnt[w] * 2 : 8) * sizeof *g);
        if (!g) continue;
        ids[w] = g;
      }
      ids[w][cnt[w]++] = a->id;
    }
    lm_session_forget(p->session, a->id, H_ARRAY, NULL);
    ctl_j_array_del(c, p->session->id, del_ids[k]);
  }
  for (uint32_t w = 0; w < nw; w++) {
    if (!cnt[w]) continue;
    ctl_free_later(c, w, p->session->id, ids[w], cnt[w]); /* with its next RUN, or in a moment */
    free(ids[w]);
  }
  free(ids);
  free(cnt);
  return 0;
}

void ctl_on_array_delete(peer *p, const lm_frame *f, const Lmw__ArrayDelete *m) {
  if (ctl_arrays_delete(p, m->ids, m->n_ids) < 0) {
    ctl_reply_error(p, f->h.request_id, LOOM_NO_MEMORY, "out of host memory deleting %zu arrays", m->n_ids);
    return;
  }
  Lmw__Ack ack = LMW__ACK__INIT;
  ctl_send_reply_lazy(p, f->h.request_id, LM_MSG_ACK, &ack.base); /* clients do not wait for it */
}
