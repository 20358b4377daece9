/* Arrays in libloom: shardings, put, get, delete, queries. The controller answers where each
 * shard lives (ARRAY_CREATE / ARRAY_LOCATE, with a token per shard); the bytes then go between
 * this process and the workers' data ports directly: one SHARD_PUT per distinct shard per
 * worker (the worker copies it to its other devices that hold the same shard), sent from the
 * caller's buffer when the shard is a contiguous part of it; one SHARD_GET per distinct shard,
 * received straight into the caller's buffer when contiguous. Transfers to different workers
 * are in flight at the same time. To a worker on the same host they are local transfers
 * (SHARD_PUT_LOCAL / SHARD_GET_LOCAL): the worker copies the bytes between the caller's buffer,
 * named as memory ranges (a shard that is not contiguous as one range per row), and the device
 * buffer, once; a local transfer the kernel refuses is done again over the stream. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "client/client_int.h"
#include "common/dtype.h"

#define fail lm_client_fail
#define failf lm_client_failf

/* ---- shardings ---- */

void loom_sharding_initialize(loom_sharding *s) {
  if (!s) return;
  memset(s, 0, sizeof *s);
  s->struct_size = sizeof *s;
  memset(s->dim_axes, -1, sizeof s->dim_axes);
}

void loom_sharding_single(loom_sharding *s, const int32_t *device) {
  loom_sharding_initialize(s);
  if (!s) return;
  s->num_devices = 1;
  s->devices = device;
}

void loom_sharding_replicated(loom_sharding *s, const int32_t *devices, int32_t n) {
  loom_sharding_initialize(s);
  if (!s) return;
  s->mesh_rank = 1;
  s->mesh_shape[0] = n;
  s->num_devices = n;
  s->devices = devices;
}

void loom_sharding_tiled(loom_sharding *s, const int32_t *devices, int32_t n, int32_t dim) {
  loom_sharding_replicated(s, devices, n);
  if (s && dim >= 0 && dim < LOOM_MAX_RANK) s->dim_axes[dim][0] = 0;
}

int lm_sharding_from_public(const loom_sharding *in, int32_t rank, const int64_t *dims, lm_sharding *sh,
                            uint32_t **devs, lm_err *err) {
  *devs = NULL;
  lm_sharding_init(sh);
  if (!in) {
    *devs = calloc(1, sizeof **devs);
    if (!*devs) return lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
    sh->devices = *devs;
    return 0;
  }
  if (in->struct_size < offsetof(loom_sharding, dim_axes) + sizeof in->dim_axes || in->struct_size > (1u << 16))
    return lm_errf(err, LOOM_INVALID_ARGUMENT, "sharding.struct_size is %zu; set it with loom_sharding_initialize",
                   in->struct_size);
  if (in->mesh_rank < 0 || in->mesh_rank > LOOM_MAX_MESH_AXES)
    return lm_errf(err, LOOM_INVALID_ARGUMENT, "sharding.mesh_rank %d is outside 0..%d", in->mesh_rank,
                   LOOM_MAX_MESH_AXES);
  if (in->num_devices < 1 || in->num_devices > LM_SHARD_MAX_DEVICES || !in->devices)
    return lm_errf(err, LOOM_INVALID_ARGUMENT, "a sharding needs 1 to %d devices (num_devices %d%s)",
                   LM_SHARD_MAX_DEVICES, in->num_devices, in->devices ? "" : ", devices NULL");
  sh->mesh_rank = in->mesh_rank;
  for (int a = 0; a < in->mesh_rank; a++) sh->mesh_shape[a] = in->mesh_shape[a];
  sh->ndev = (uint32_t)in->num_devices;
  memcpy(sh->dim_axes, in->dim_axes, sizeof sh->dim_axes);
  *devs = malloc((size_t)in->num_devices * sizeof **devs);
  if (!*devs) return lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  for (int32_t i = 0; i < in->num_devices; i++) {
    if (in->devices[i] < 0) {
      free(*devs);
      *devs = NULL;
      return lm_errf(err, LOOM_INVALID_ARGUMENT, "device id %d is negative", in->devices[i]);
    }
    (*devs)[i] = (uint32_t)in->devices[i];
  }
  sh->devices = *devs;
  int rc = lm_sharding_check(sh, rank, dims, err);
  if (rc < 0) {
    free(*devs);
    *devs = NULL;
  }
  return rc;
}

void lm_sharding_to_public(const lm_sharding *sh, loom_sharding *out) {
  loom_sharding full;
  loom_sharding_initialize(&full);
  full.mesh_rank = sh->mesh_rank;
  for (int a = 0; a < sh->mesh_rank; a++) full.mesh_shape[a] = sh->mesh_shape[a];
  full.num_devices = (int32_t)sh->ndev;
  full.devices = (const int32_t *)sh->devices; /* virtual ids fit int32; same bits, same object */
  memcpy(full.dim_axes, sh->dim_axes, sizeof full.dim_axes);
  size_t keep = out->struct_size;
  memcpy(out, &full, keep < sizeof full ? keep : sizeof full);
  out->struct_size = keep;
}

/* ---- array handles ---- */

loom_array *lm_array_new(loom_client *c, uint64_t id, loom_dtype dtype, int32_t rank, const int64_t *dims,
                         const lm_sharding *sh, lm_fut *producer) {
  loom_array *a = calloc(1, sizeof *a);
  if (!a) return NULL;
  a->udevs = malloc(sh->ndev * sizeof *a->udevs);
  if (!a->udevs) {
    free(a);
    return NULL;
  }
  a->c = c;
  a->id = id;
  a->dtype = dtype;
  a->rank = rank;
  if (rank) memcpy(a->dims, dims, (size_t)rank * sizeof *dims);
  a->sh = *sh;
  memcpy(a->udevs, sh->devices, sh->ndev * sizeof *a->udevs);
  a->sh.devices = a->udevs;
  a->producer = producer ? lm_fut_ref(producer) : NULL;
  atomic_init(&a->deleted, 0);
  return a;
}

/* Bytes of a region of shape dims (already checked not to overflow). */
static uint64_t region_bytes(loom_dtype dtype, int32_t rank, const int64_t *dims) {
  uint64_t n;
  lm_dims_numel(rank, dims, &n);
  return n * lm_dtype_size((lm_dtype)dtype);
}

static uint64_t array_bytes(const loom_array *a) { return region_bytes(a->dtype, a->rank, a->dims); }

loom_dtype loom_array_dtype(const loom_array *a) { return a ? a->dtype : LOOM_DTYPE_INVALID; }
int32_t loom_array_rank(const loom_array *a) { return a ? a->rank : 0; }
const int64_t *loom_array_dims(const loom_array *a) { return a ? a->dims : NULL; }
uint64_t loom_array_nbytes(const loom_array *a) { return a ? array_bytes(a) : 0; }
uint64_t loom_array_id(const loom_array *a) { return a ? a->id : 0; }
int loom_array_is_deleted(const loom_array *a) { return a ? atomic_load(&a->deleted) : 1; }
int32_t loom_array_num_shards(const loom_array *a) { return a ? (int32_t)a->sh.ndev : 0; }

loom_status loom_array_sharding(const loom_array *a, loom_sharding *out) {
  if (!a || !out) return failf(a ? a->c : NULL, LOOM_INVALID_ARGUMENT, "loom_array_sharding: NULL argument");
  if (out->struct_size < offsetof(loom_sharding, devices) + sizeof out->devices || out->struct_size > (1u << 16))
    return failf(a->c, LOOM_INVALID_ARGUMENT, "loom_array_sharding: out->struct_size is %zu", out->struct_size);
  lm_sharding_to_public(&a->sh, out);
  return LOOM_OK;
}

loom_status loom_array_shard_info(const loom_array *a, int32_t index, loom_shard_desc *out) {
  if (!a || !out) return failf(a ? a->c : NULL, LOOM_INVALID_ARGUMENT, "loom_array_shard_info: NULL argument");
  if (out->struct_size < offsetof(loom_shard_desc, nbytes) || out->struct_size > (1u << 16))
    return failf(a->c, LOOM_INVALID_ARGUMENT, "loom_array_shard_info: out->struct_size is %zu", out->struct_size);
  if (index < 0 || (uint32_t)index >= a->sh.ndev)
    return failf(a->c, LOOM_NOT_FOUND, "array %llu has %u shards (index %d)", (unsigned long long)a->id, a->sh.ndev,
                 index);
  loom_shard_desc full;
  memset(&full, 0, sizeof full);
  full.struct_size = sizeof full;
  full.device = (int32_t)a->udevs[index];
  full.rank = a->rank;
  lm_sharding_shard(&a->sh, a->rank, a->dims, (uint32_t)index, full.offsets, full.dims);
  full.nbytes = region_bytes(a->dtype, a->rank, full.dims);
  size_t keep = out->struct_size;
  memcpy(out, &full, keep < sizeof full ? keep : sizeof full);
  out->struct_size = keep;
  return LOOM_OK;
}

/* ---- data connections ---- */

/* The usable data connections are found by address in a table (a launch or a put over thousands
 * of workers looks one up per shard). Under data_mu. */
static size_t addr_hash(const char *s) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return (size_t)(h ^ (h >> 32));
}

static lm_dataconn **dtab_slot(loom_client *c, const char *addr) {
  lm_dataconn **pp = &c->dtab[addr_hash(addr) & (c->dtab_cap - 1)];
  while (*pp && strcmp((*pp)->addr, addr)) pp = &(*pp)->hnext;
  return pp;
}

static void dtab_remove(loom_client *c, lm_dataconn *d) {
  if (!c->dtab_cap) return;
  lm_dataconn **pp = dtab_slot(c, d->addr);
  if (*pp == d) {
    *pp = d->hnext;
    c->dtab_n--;
  }
}

static void dtab_insert(loom_client *c, lm_dataconn *d) {
  if (c->dtab_n + 1 > c->dtab_cap) { /* grow at load 1 (a failure keeps the old table: lookups stay right) */
    size_t cap = c->dtab_cap ? c->dtab_cap * 2 : 64;
    lm_dataconn **t = calloc(cap, sizeof *t);
    if (t) {
      for (size_t i = 0; i < c->dtab_cap; i++)
        for (lm_dataconn *x = c->dtab[i], *n; x; x = n) {
          n = x->hnext;
          size_t k = addr_hash(x->addr) & (cap - 1);
          x->hnext = t[k];
          t[k] = x;
        }
      free(c->dtab);
      c->dtab = t;
      c->dtab_cap = cap;
    }
  }
  if (!c->dtab_cap) return; /* no table: the connection is still listed, just not found again */
  lm_dataconn **pp = dtab_slot(c, d->addr);
  if (*pp) { /* another thread opened one meanwhile: the newer replaces it in the table */
    lm_dataconn *old = *pp;
    *pp = old->hnext;
    c->dtab_n--;
  }
  d->hnext = c->dtab[addr_hash(d->addr) & (c->dtab_cap - 1)];
  c->dtab[addr_hash(d->addr) & (c->dtab_cap - 1)] = d;
  c->dtab_n++;
}

/* The open connection to a worker's data port (opening it if needed): on the same host its local
 * socket with local transfers (unless LOOM_TRANSFER=tcp), else, or when that is not possible
 * (and LOOM_TRANSFER is not "local"), the TCP data port. */
static int dataconn(loom_client *c, const char *addr, lm_dataconn **out, lm_err *err) {
  pthread_mutex_lock(&c->data_mu);
  lm_dataconn *d = c->dtab_cap ? *dtab_slot(c, addr) : NULL;
  if (d && !lm_cconn_ok(d->conn, NULL)) {
    d->broken = true; /* another thread may still hold it: closed at disconnect */
    dtab_remove(c, d);
    d = NULL;
  }
  if (d) {
    *out = d;
    pthread_mutex_unlock(&c->data_mu);
    return 0;
  }
  pthread_mutex_unlock(&c->data_mu);
  lm_cconn_options o = {.timeout_ms = c->timeout_ms, .intr = c->intr, .intr_arg = c->intr_arg, .name = "data", .peer = "the worker"};
  o.limits.max_payload = LM_FRAME_PAYLOAD_HARD_MAX; /* shards land in the caller's buffers */
  o.local_offer = c->xfer_mode != LM_XFER_TCP;
  lm_cconn *conn, *lc = NULL;
  int rc = lm_cconn_open(addr, &o, &conn, err);
  if (rc < 0) {
    lm_err_prefix(err, "worker data port %s", addr);
    return rc;
  }
  bool held = false;
  if (c->xfer_mode != LM_XFER_TCP) {
    lm_err lerr;
    rc = lm_local_connect(c, conn, &lc, &held, &lerr);
    if (rc == 0) { /* the local socket replaces the data port */
      lm_cconn_close(conn);
      conn = lc;
    } else if (c->xfer_mode == LM_XFER_LOCAL || rc == LOOM_CANCELLED) {
      lm_cconn_close(conn);
      if (rc == LOOM_CANCELLED) *err = lerr;
      else lm_errf(err, rc, "worker data port %s: LOOM_TRANSFER=local, but local transfers are not possible: %s", addr,
                   lerr.msg);
      return rc;
    }
  }
  lm_dataconn *n = calloc(1, sizeof *n);
  if (!n) {
    lm_cconn_close(conn);
    if (held) lm_local_ptracer_release();
    return lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  }
  snprintf(n->addr, sizeof n->addr, "%s", addr);
  n->conn = conn;
  atomic_init(&n->local, lc != NULL);
  n->ptracer_held = held;
  pthread_mutex_lock(&c->data_mu);
  n->next = c->dataconns;
  c->dataconns = n;
  dtab_insert(c, n);
  pthread_mutex_unlock(&c->data_mu);
  *out = n;
  return 0;
}

void lm_client_close_data(loom_client *c) {
  lm_dataconn *d = c->dataconns;
  while (d) {
    lm_dataconn *n = d->next;
    lm_cconn_close(d->conn);
    if (d->ptracer_held) lm_local_ptracer_release();
    free(d);
    d = n;
  }
  c->dataconns = NULL;
  free(c->dtab);
  c->dtab = NULL;
  c->dtab_cap = c->dtab_n = 0;
}

/* Waits for a call; its status (and message) into *rc / *err. */
static void wait_call(loom_client *c, lm_call *call, int *rc, lm_err *err) {
  *rc = call ? lm_call_wait(call, c->timeout_ms, c->intr, c->intr_arg, err) : 0;
}

/* Whether a region that is not contiguous is better sent as ranges of the caller's memory than
 * staged: not too many runs, and runs long enough for the copy to stream. */
static bool ranges_fit(uint64_t nruns, uint64_t run_bytes) {
  return nruns <= LM_LOCAL_MAX_RANGES && run_bytes >= 1024;
}

static bool same_region(const Lmw__ShardLocation *a, const Lmw__ShardLocation *b) {
  return a->n_offsets == b->n_offsets &&
         (!a->n_offsets || !memcmp(a->offsets, b->offsets, a->n_offsets * sizeof *a->offsets));
}

static void array_delete_remote(loom_client *c, uint64_t id) {
  Lmw__ArrayDelete d = LMW__ARRAY_DELETE__INIT;
  d.n_ids = 1;
  d.ids = &id;
  lm_call *call;
  if (lm_cconn_start(c->conn, LM_MSG_ARRAY_DELETE, &d.base, NULL, 0, NULL, 0, &call, NULL) == 0)
    lm_call_release(call); /* ordered before anything sent later; nobody needs the answer */
}

/* ---- put ---- */

void loom_put_args_initialize(loom_put_args *a) {
  if (!a) return;
  memset(a, 0, sizeof *a);
  a->struct_size = sizeof *a;
}

typedef struct put_group {
  size_t first;                      /* index of the first device with this (worker, region) */
  size_t ntargets;
  Lmw__ShardTarget *targets;
  Lmw__ShardTarget **tptr;
  int64_t off[LOOM_MAX_RANK], sd[LOOM_MAX_RANK];
  uint64_t bytes;
  const void *payload;               /* the shard's bytes, contiguous (the caller's, or staging) ... */
  const void *base;                  /* ... or NULL: it is region (off, sd) of the caller's array here */
  void *staging;                     /* a copy of a shard that is not contiguous */
  uint64_t *ranges;                  /* local: (address, length) pairs */
  lm_dataconn *d;
  bool local;                        /* sent as SHARD_PUT_LOCAL */
  lm_call *call;
  int rc;
  lm_err err;
} put_group;

/* Sends group g's shard: SHARD_PUT_LOCAL (the worker reads it from here) when the connection has
 * local transfers, else SHARD_PUT with the bytes as payload (staged first if not contiguous). */
static int put_send(loom_client *c, const loom_put_args *a, put_group *g, lm_err *err) {
  size_t esize = lm_dtype_size((lm_dtype)a->dtype);
  uint64_t udims[LOOM_MAX_RANK];
  for (int d = 0; d < a->rank; d++) udims[d] = (uint64_t)g->sd[d];
  Lmw__ShardPut m = LMW__SHARD_PUT__INIT;
  m.session = lm_cconn_session_id(c->conn);
  m.dtype = (uint32_t)a->dtype;
  m.n_dims = (size_t)a->rank;
  m.dims = udims;
  m.n_targets = g->ntargets;
  m.targets = g->tptr;
  g->local = atomic_load(&g->d->local);
  if (g->local) {
    uint64_t run = g->bytes, nruns = g->bytes ? 1 : 0;
    if (!g->payload) nruns = lm_region_runs(a->rank, a->dims, g->sd, esize, &run);
    free(g->ranges);
    g->ranges = malloc((nruns ? nruns : 1) * 2 * sizeof *g->ranges);
    if (!g->ranges) return lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
    if (g->payload && nruns) g->ranges[0] = (uint64_t)(uintptr_t)g->payload, g->ranges[1] = g->bytes;
    else if (nruns) lm_region_ranges(g->base, a->rank, a->dims, g->off, g->sd, esize, g->ranges);
    m.n_ranges = (size_t)nruns * 2;
    m.ranges = g->ranges;
    return lm_cconn_start(g->d->conn, LM_MSG_SHARD_PUT_LOCAL, &m.base, NULL, 0, NULL, 0, &g->call, err);
  }
  if (!g->payload) { /* planned as ranges: the stream needs the bytes in one piece */
    g->staging = malloc(g->bytes ? g->bytes : 1);
    if (!g->staging)
      return lm_errf(err, LOOM_NO_MEMORY, "out of host memory staging a shard of %llu bytes", (unsigned long long)g->bytes);
    lm_region_copy(a->rank, a->dims, g->off, g->sd, esize, (void *)g->base, g->staging, true);
    g->payload = g->staging;
  }
  return lm_cconn_start(g->d->conn, LM_MSG_SHARD_PUT, &m.base, g->payload, g->bytes, NULL, 0, &g->call, err);
}

static int do_put(loom_client *c, const loom_put_args *a, const lm_sharding *sh, uint64_t id,
                  const Lmw__ArrayPlacement *pl, lm_err *err) {
  size_t esize = lm_dtype_size((lm_dtype)a->dtype);
  size_t n = pl->n_shards;
  put_group *g = calloc(n, sizeof *g);
  size_t *group_of = calloc(n, sizeof *group_of);
  int rc = 0;
  if (!g || !group_of) rc = lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  size_t ng = 0;
  for (size_t i = 0; rc == 0 && i < n; i++) {
    const Lmw__ShardLocation *l = pl->shards[i];
    if (!l->data_address[0] || l->n_dims != (size_t)a->rank || l->n_offsets != (size_t)a->rank) {
      rc = lm_errf(err, LOOM_PROTOCOL, "the controller's placement of shard %zu is malformed", i);
      break;
    }
    int64_t off[LOOM_MAX_RANK], sd[LOOM_MAX_RANK];
    lm_sharding_shard(sh, a->rank, a->dims, (uint32_t)i, off, sd);
    for (int d = 0; d < a->rank; d++)
      if ((uint64_t)off[d] != l->offsets[d] || (uint64_t)sd[d] != l->dims[d])
        rc = lm_errf(err, LOOM_PROTOCOL, "the controller placed shard %zu elsewhere than the sharding says", i);
    size_t k = 0;
    while (k < ng && !(pl->shards[g[k].first]->worker_id == l->worker_id && same_region(pl->shards[g[k].first], l))) k++;
    if (k == ng) g[ng++].first = i;
    group_of[i] = k;
    g[k].ntargets++;
  }
  for (size_t k = 0; rc == 0 && k < ng; k++) {
    g[k].targets = calloc(g[k].ntargets, sizeof *g[k].targets);
    g[k].tptr = calloc(g[k].ntargets, sizeof *g[k].tptr);
    if (!g[k].targets || !g[k].tptr) rc = lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
    g[k].ntargets = 0;
  }
  for (size_t i = 0; rc == 0 && i < n; i++) {
    put_group *gr = &g[group_of[i]];
    Lmw__ShardTarget *t = &gr->targets[gr->ntargets];
    lmw__shard_target__init(t);
    t->array = id;
    t->local_index = pl->shards[i]->local_index;
    t->token = pl->shards[i]->token;
    gr->tptr[gr->ntargets++] = t;
  }
  /* send every group, then wait for every answer */
  for (size_t k = 0; rc == 0 && k < ng; k++) {
    put_group *gr = &g[k];
    const Lmw__ShardLocation *l = pl->shards[gr->first];
    lm_sharding_shard(sh, a->rank, a->dims, (uint32_t)gr->first, gr->off, gr->sd);
    uint64_t first;
    gr->bytes = region_bytes(a->dtype, a->rank, gr->sd);
    rc = dataconn(c, l->data_address, &gr->d, err);
    if (rc == 0 && a->shard_data) {
      gr->payload = a->shard_data[gr->first];
      if (!gr->payload && gr->bytes) rc = lm_errf(err, LOOM_INVALID_ARGUMENT, "shard_data[%zu] is NULL", gr->first);
    } else if (rc == 0 && lm_region_contiguous(a->rank, a->dims, gr->off, gr->sd, &first)) {
      gr->payload = (const uint8_t *)a->data + first * esize;
    } else if (rc == 0) {
      uint64_t run, nruns = lm_region_runs(a->rank, a->dims, gr->sd, esize, &run);
      gr->base = a->data;
      if (!atomic_load(&gr->d->local) || !ranges_fit(nruns, run)) { /* staged: one copy here */
        gr->staging = malloc(gr->bytes ? gr->bytes : 1);
        if (!gr->staging) {
          rc = lm_errf(err, LOOM_NO_MEMORY, "out of host memory staging a shard of %llu bytes",
                       (unsigned long long)gr->bytes);
          break;
        }
        lm_region_copy(a->rank, a->dims, gr->off, gr->sd, esize, (void *)a->data, gr->staging, true);
        gr->payload = gr->staging;
      }
    }
    if (rc == 0) rc = put_send(c, a, gr, err);
    if (rc < 0) lm_err_prefix(err, "putting shard %zu on device %u (worker %u)", gr->first, l->device, l->worker_id);
  }
  for (size_t k = 0; g && k < ng; k++) wait_call(c, g[k].call, &g[k].rc, &g[k].err);
  /* a local put the kernel refused goes again over the stream (LOOM_TRANSFER=auto) */
  for (size_t k = 0; rc == 0 && c->xfer_mode == LM_XFER_AUTO && k < ng; k++) {
    if (!g[k].local || g[k].rc != LOOM_UNSUPPORTED) continue;
    atomic_store(&g[k].d->local, false);
    lm_call_release(g[k].call);
    g[k].call = NULL;
    g[k].rc = put_send(c, a, &g[k], &g[k].err);
    if (g[k].rc == 0) wait_call(c, g[k].call, &g[k].rc, &g[k].err);
  }
  for (size_t k = 0; rc == 0 && g && k < ng; k++)
    if (g[k].rc < 0) {
      rc = g[k].rc;
      *err = g[k].err;
      const Lmw__ShardLocation *l = pl->shards[g[k].first];
      lm_err_prefix(err, "putting shard %zu on device %u (worker %u)", g[k].first, l->device, l->worker_id);
    }
  for (size_t k = 0; g && k < ng; k++) { /* releasing a pending local call waits until the worker let go */
    lm_call_release(g[k].call);
    free(g[k].targets);
    free(g[k].tptr);
    free(g[k].staging);
    free(g[k].ranges);
  }
  free(g), free(group_of);
  return rc;
}

/* Whether a transfer a worker's data port dropped (the worker died after the controller placed or
 * located the array) goes again, after a pause: by then the controller knows, and it holds the
 * new request while a standby takes the devices over, or fails it naming the lost worker. Three
 * more tries, 100, 400 and 1600 ms apart (the controller's heartbeat timeout is 900 ms). */
static bool retry_pause(loom_client *c, int attempt) {
  if (attempt >= 3 || (c->intr && c->intr(c->intr_arg))) return false;
  uint32_t ms = 100u << (2 * attempt);
  struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
  return true;
}

static bool dropped_rc(int rc) { return rc == LOOM_CLOSED || rc == LOOM_CONNECT; }

/* One try of a put: a new id, the controller's placement, the shards sent; on failure what
 * landed is freed, and *dropped says whether a worker's data port dropped the connection. */
static int put_placed(loom_client *c, const loom_put_args *a, const lm_sharding *sh, uint32_t *devs, uint64_t *idp,
                      bool *dropped, lm_err *err) {
  uint64_t id = *idp = atomic_fetch_add(&c->next_id, 1);
  /* ask the controller where the shards go */
  Lmw__ArrayCreate m = LMW__ARRAY_CREATE__INIT;
  uint64_t udims[LOOM_MAX_RANK];
  for (int d = 0; d < a->rank; d++) udims[d] = (uint64_t)a->dims[d];
  m.id = id;
  m.dtype = (uint32_t)a->dtype;
  m.n_dims = (size_t)a->rank;
  m.dims = udims;
  Lmw__Sharding ws = LMW__SHARDING__INIT;
  Lmw__DimAxes dims[LOOM_MAX_RANK], *dptr[LOOM_MAX_RANK];
  uint32_t axes[LOOM_MAX_RANK * LOOM_MAX_MESH_AXES];
  uint64_t mesh[LOOM_MAX_MESH_AXES];
  ws.n_mesh_shape = (size_t)sh->mesh_rank;
  for (int i = 0; i < sh->mesh_rank; i++) mesh[i] = (uint64_t)sh->mesh_shape[i];
  ws.mesh_shape = mesh;
  ws.n_devices = sh->ndev;
  ws.devices = devs;
  size_t na = 0;
  for (int d = 0; d < a->rank; d++) {
    lmw__dim_axes__init(&dims[d]);
    dims[d].axes = axes + na;
    for (int j = 0; j < LOOM_MAX_MESH_AXES && sh->dim_axes[d][j] >= 0; j++) axes[na++] = (uint32_t)sh->dim_axes[d][j];
    dims[d].n_axes = (size_t)(axes + na - dims[d].axes);
    dptr[d] = &dims[d];
  }
  ws.n_dims = (size_t)a->rank;
  ws.dims = dptr;
  m.sharding = &ws;
  ProtobufCMessage *rm;
  int rc = lm_cconn_call(c->conn, LM_MSG_ARRAY_CREATE, &m.base, LM_MSG_ARRAY_PLACEMENT, c->timeout_ms, c->intr,
                         c->intr_arg, &rm, err);
  if (rc == 0) {
    const Lmw__ArrayPlacement *pl = (const Lmw__ArrayPlacement *)rm;
    if (pl->id != id || pl->n_shards != sh->ndev) rc = lm_errf(err, LOOM_PROTOCOL, "the controller's placement does not match");
    else *dropped = dropped_rc(rc = do_put(c, a, sh, id, pl, err));
    lm_msg_free(rm);
    if (rc < 0) array_delete_remote(c, id); /* frees whatever shards did land */
  }
  return rc;
}

loom_status loom_array_put(loom_client *c, const loom_put_args *a, loom_array **out) {
  if (!out) return failf(c, LOOM_INVALID_ARGUMENT, "loom_array_put: out is NULL");
  *out = NULL;
  if (!c || !a) return failf(c, LOOM_INVALID_ARGUMENT, "loom_array_put: NULL argument");
  if (a->struct_size < offsetof(loom_put_args, shard_data) || a->struct_size > (1u << 16))
    return failf(c, LOOM_INVALID_ARGUMENT, "loom_array_put: args.struct_size is %zu; use loom_put_args_initialize",
                 a->struct_size);
  loom_put_args args;
  loom_put_args_initialize(&args);
  memcpy(&args, a, a->struct_size < sizeof args ? a->struct_size : sizeof args);
  a = &args;
  if (!lm_dtype_valid((int)a->dtype)) return failf(c, LOOM_INVALID_ARGUMENT, "loom_array_put: unknown dtype %d", (int)a->dtype);
  if (a->rank < 0 || a->rank > LOOM_MAX_RANK || (a->rank && !a->dims))
    return failf(c, LOOM_INVALID_ARGUMENT, "loom_array_put: rank %d (0..%d) with%s dims", a->rank, LOOM_MAX_RANK,
                 a->dims ? "" : "out");
  uint64_t numel, nbytes;
  if (lm_dims_numel(a->rank, a->dims, &numel) < 0 ||
      __builtin_mul_overflow(numel, (uint64_t)lm_dtype_size((lm_dtype)a->dtype), &nbytes))
    return failf(c, LOOM_INVALID_ARGUMENT, "loom_array_put: a negative dimension or a size that overflows");
  if (!!a->data == !!a->shard_data && nbytes)
    return failf(c, LOOM_INVALID_ARGUMENT, "loom_array_put: give either data or shard_data");
  if (a->data && a->data_size != nbytes)
    return failf(c, LOOM_INVALID_ARGUMENT, "loom_array_put: data_size is %zu but the array has %llu bytes",
                 a->data_size, (unsigned long long)nbytes);
  lm_sharding sh;
  uint32_t *devs;
  lm_err err;
  if (lm_sharding_from_public(a->sharding, a->rank, a->dims, &sh, &devs, &err) < 0) {
    lm_err_prefix(&err, "loom_array_put");
    return fail(c, &err);
  }
  /* A worker that dies between the placement and the upload (its data port drops us) is retried
   * with a new placement: by then the controller knows, and a standby has its devices or the
   * placement fails naming the lost worker. */
  int rc;
  uint64_t id = 0;
  for (int attempt = 0;; attempt++) {
    bool dropped = false;
    rc = put_placed(c, a, &sh, devs, &id, &dropped, &err);
    if (!dropped || !retry_pause(c, attempt)) break;
  }
  loom_array *arr = rc == 0 ? lm_array_new(c, id, a->dtype, a->rank, a->dims, &sh, NULL) : NULL;
  if (rc == 0 && !arr) {
    array_delete_remote(c, id);
    rc = lm_errf(&err, LOOM_NO_MEMORY, "out of host memory");
  }
  free(devs);
  if (rc < 0) return fail(c, &err);
  *out = arr;
  return LOOM_OK;
}

/* ---- get ---- */

typedef struct get_part {
  size_t shard;                      /* the location it comes from */
  void *dst;                         /* where the bytes land, contiguous (the caller's, or staging) ... */
  void *base;                        /* ... or NULL: region (off, sd) of the caller's array here (local) */
  void *staging;
  uint64_t bytes;
  int64_t off[LOOM_MAX_RANK], sd[LOOM_MAX_RANK];
  uint64_t *ranges;                  /* local: (address, length) pairs */
  lm_dataconn *d;
  bool local;                        /* asked with SHARD_GET_LOCAL */
  lm_call *call;
  int rc;
  lm_err err;
} get_part;

static int locate(loom_array *a, Lmw__ArrayPlacement **out, lm_err *err) {
  loom_client *c = a->c;
  if (atomic_load(&a->deleted))
    return lm_errf(err, LOOM_NOT_FOUND, "array %llu was deleted", (unsigned long long)a->id);
  if (a->producer) {
    int rc = lm_fut_wait(a->producer, -1, err);
    if (rc < 0) return rc;
  }
  Lmw__ArrayLocate m = LMW__ARRAY_LOCATE__INIT;
  m.id = a->id;
  ProtobufCMessage *rm;
  LM_TRY(lm_cconn_call(c->conn, LM_MSG_ARRAY_LOCATE, &m.base, LM_MSG_ARRAY_PLACEMENT, c->timeout_ms, c->intr,
                       c->intr_arg, &rm, err));
  Lmw__ArrayPlacement *pl = (Lmw__ArrayPlacement *)rm;
  if (pl->n_shards != a->sh.ndev) {
    lm_msg_free(rm);
    return lm_errf(err, LOOM_PROTOCOL, "the controller's placement of array %llu does not match its sharding",
                   (unsigned long long)a->id);
  }
  for (size_t i = 0; i < pl->n_shards; i++)
    if (pl->shards[i]->n_offsets != (size_t)a->rank || pl->shards[i]->n_dims != (size_t)a->rank) {
      lm_msg_free(rm);
      return lm_errf(err, LOOM_PROTOCOL, "the controller's placement of array %llu is malformed",
                     (unsigned long long)a->id);
    }
  *out = pl;
  return 0;
}

/* Asks for part p: SHARD_GET_LOCAL (the worker writes the bytes here) when the connection has
 * local transfers, else SHARD_GET with the payload received into p->dst (a staging buffer is
 * made first when the part was planned as ranges). */
static int get_send(loom_array *a, const Lmw__ShardLocation *l, get_part *p, lm_err *err) {
  loom_client *c = a->c;
  size_t esize = lm_dtype_size((lm_dtype)a->dtype);
  Lmw__ShardGet m = LMW__SHARD_GET__INIT;
  m.session = lm_cconn_session_id(c->conn);
  m.array = a->id;
  m.local_index = l->local_index;
  m.token = l->token;
  m.min_cseq = l->min_cseq;
  p->local = atomic_load(&p->d->local);
  if (p->local) {
    uint64_t run = p->bytes, nruns = p->bytes ? 1 : 0;
    if (!p->dst) nruns = lm_region_runs(a->rank, a->dims, p->sd, esize, &run);
    free(p->ranges);
    p->ranges = malloc((nruns ? nruns : 1) * 2 * sizeof *p->ranges);
    if (!p->ranges) return lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
    if (p->dst && nruns) p->ranges[0] = (uint64_t)(uintptr_t)p->dst, p->ranges[1] = p->bytes;
    else if (nruns) lm_region_ranges(p->base, a->rank, a->dims, p->off, p->sd, esize, p->ranges);
    m.n_ranges = (size_t)nruns * 2;
    m.ranges = p->ranges;
    return lm_cconn_start(p->d->conn, LM_MSG_SHARD_GET_LOCAL, &m.base, NULL, 0, NULL, 0, &p->call, err);
  }
  if (!p->dst) {
    p->staging = malloc(p->bytes ? p->bytes : 1);
    if (!p->staging) return lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
    p->dst = p->staging;
  }
  return lm_cconn_start(p->d->conn, LM_MSG_SHARD_GET, &m.base, NULL, 0, p->dst, p->bytes, &p->call, err);
}

/* Checks that part p's reply is its shard: the right type, dtype and size, in the right place. */
static void get_check(loom_array *a, const Lmw__ShardLocation *l, get_part *p) {
  lm_reply r;
  p->rc = lm_call_take_reply(p->call, &r, &p->err);
  if (p->rc < 0) return;
  const Lmw__ShardGetReply *gr = r.type == LM_MSG_SHARD_GET_REPLY ? (const Lmw__ShardGetReply *)r.msg : NULL;
  /* the same elements (a replica's shard may come without the leading dimension of 1) */
  uint64_t numel = 1;
  bool ok = gr && gr->dtype == (uint32_t)a->dtype && gr->n_dims <= LOOM_MAX_RANK;
  for (size_t d = 0; ok && d < gr->n_dims; d++) ok = !__builtin_mul_overflow(numel, gr->dims[d], &numel);
  ok = ok && numel * lm_dtype_size((lm_dtype)a->dtype) == p->bytes;
  if (p->local) ok = ok && r.payload_len == 0 && gr->written == p->bytes;
  else ok = ok && r.payload_len == p->bytes && (!p->bytes || r.payload_external);
  if (!ok)
    p->rc = lm_errf(&p->err, LOOM_PROTOCOL, "worker %u sent a shard of array %llu that does not match it", l->worker_id,
                    (unsigned long long)a->id);
  lm_reply_free(&r);
}

static int get_parts(loom_array *a, const Lmw__ArrayPlacement *pl, get_part *parts, size_t np, lm_err *err) {
  loom_client *c = a->c;
  int rc = 0;
  for (size_t k = 0; rc == 0 && k < np; k++) rc = get_send(a, pl->shards[parts[k].shard], &parts[k], err);
  for (size_t k = 0; k < np; k++) {
    wait_call(c, parts[k].call, &parts[k].rc, &parts[k].err);
    if (parts[k].call && parts[k].rc == 0) get_check(a, pl->shards[parts[k].shard], &parts[k]);
  }
  /* a local get the kernel refused goes again over the stream (LOOM_TRANSFER=auto) */
  for (size_t k = 0; rc == 0 && c->xfer_mode == LM_XFER_AUTO && k < np; k++) {
    get_part *p = &parts[k];
    if (!p->local || p->rc != LOOM_UNSUPPORTED) continue;
    atomic_store(&p->d->local, false);
    lm_call_release(p->call);
    p->call = NULL;
    p->rc = get_send(a, pl->shards[p->shard], p, &p->err);
    if (p->rc == 0) wait_call(c, p->call, &p->rc, &p->err);
    if (p->rc == 0) get_check(a, pl->shards[p->shard], p);
  }
  for (size_t k = 0; rc == 0 && k < np; k++)
    if (parts[k].rc < 0) {
      rc = parts[k].rc;
      *err = parts[k].err;
    }
  for (size_t k = 0; k < np; k++) { /* releasing a pending local call waits until the worker let go */
    lm_call_release(parts[k].call);
    parts[k].call = NULL;
  }
  return rc;
}

/* Plans where part p lands: straight in the caller's dst when contiguous, or (local) as ranges
 * of it when they fit, else in a staging buffer copied out afterwards. */
static int get_plan(loom_array *a, const Lmw__ArrayPlacement *pl, get_part *p, void *dst, lm_err *err) {
  size_t esize = lm_dtype_size((lm_dtype)a->dtype);
  lm_sharding_shard(&a->sh, a->rank, a->dims, (uint32_t)p->shard, p->off, p->sd);
  uint64_t first, run;
  p->bytes = region_bytes(a->dtype, a->rank, p->sd);
  LM_TRY(dataconn(a->c, pl->shards[p->shard]->data_address, &p->d, err));
  if (lm_region_contiguous(a->rank, a->dims, p->off, p->sd, &first)) {
    p->dst = (uint8_t *)dst + first * esize;
  } else if (atomic_load(&p->d->local) && ranges_fit(lm_region_runs(a->rank, a->dims, p->sd, esize, &run), run)) {
    p->base = dst;
  } else {
    p->staging = malloc(p->bytes ? p->bytes : 1);
    if (!p->staging) return lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
    p->dst = p->staging;
  }
  return 0;
}

static void parts_free(get_part *parts, size_t np) {
  for (size_t k = 0; parts && k < np; k++) {
    free(parts[k].staging);
    free(parts[k].ranges);
  }
  free(parts);
}

/* One try of a get: the controller's placement, then one part per distinct region from a holder
 * that is alive; *dropped says whether a worker's data port dropped the connection. */
static int get_placed(loom_array *a, void *dst, bool *dropped, lm_err *err) {
  Lmw__ArrayPlacement *pl;
  LM_TRY(locate(a, &pl, err));
  size_t esize = lm_dtype_size((lm_dtype)a->dtype);
  size_t n = pl->n_shards, np = 0;
  int rc = 0;
  get_part *parts = calloc(n ? n : 1, sizeof *parts);
  if (!parts) rc = lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  for (size_t i = 0; rc == 0 && i < n; i++) {
    const Lmw__ShardLocation *l = pl->shards[i];
    if (!l->data_address[0]) continue;
    bool have = false;
    for (size_t k = 0; k < np && !have; k++) have = same_region(pl->shards[parts[k].shard], l);
    if (have) continue;
    parts[np].shard = i;
    rc = get_plan(a, pl, &parts[np++], dst, err);
  }
  if (rc == 0) rc = get_parts(a, pl, parts, np, err);
  *dropped = dropped_rc(rc);
  for (size_t k = 0; rc == 0 && k < np; k++)
    if (parts[k].staging && parts[k].dst == parts[k].staging)
      lm_region_copy(a->rank, a->dims, parts[k].off, parts[k].sd, esize, dst, parts[k].staging, false);
  parts_free(parts, np);
  lm_msg_free(&pl->base);
  return rc;
}

loom_status loom_array_get(loom_array *a, void *dst, size_t dst_size) {
  if (!a || (!dst && dst_size)) return failf(a ? a->c : NULL, LOOM_INVALID_ARGUMENT, "loom_array_get: NULL argument");
  loom_client *c = a->c;
  uint64_t nbytes = array_bytes(a);
  if (dst_size < nbytes)
    return failf(c, LOOM_INVALID_ARGUMENT, "loom_array_get: the buffer has %zu bytes, array %llu needs %llu", dst_size,
                 (unsigned long long)a->id, (unsigned long long)nbytes);
  lm_err err;
  int rc;
  for (int attempt = 0;; attempt++) {
    bool dropped = false;
    rc = get_placed(a, dst, &dropped, &err);
    if (!dropped || !retry_pause(c, attempt)) break;
  }
  if (rc < 0) return fail(c, &err);
  return LOOM_OK;
}

loom_status loom_array_get_shard(loom_array *a, int32_t index, void *dst, size_t dst_size) {
  if (!a || (!dst && dst_size)) return failf(a ? a->c : NULL, LOOM_INVALID_ARGUMENT, "loom_array_get_shard: NULL argument");
  loom_client *c = a->c;
  if (index < 0 || (uint32_t)index >= a->sh.ndev)
    return failf(c, LOOM_NOT_FOUND, "array %llu has %u shards (index %d)", (unsigned long long)a->id, a->sh.ndev, index);
  get_part p;
  memset(&p, 0, sizeof p);
  p.shard = (size_t)index;
  lm_sharding_shard(&a->sh, a->rank, a->dims, (uint32_t)index, p.off, p.sd);
  p.bytes = region_bytes(a->dtype, a->rank, p.sd);
  if (dst_size < p.bytes)
    return failf(c, LOOM_INVALID_ARGUMENT, "loom_array_get_shard: the buffer has %zu bytes, the shard needs %llu",
                 dst_size, (unsigned long long)p.bytes);
  p.dst = dst;
  lm_err err;
  int rc;
  for (int attempt = 0;; attempt++) {
    Lmw__ArrayPlacement *pl;
    if ((rc = locate(a, &pl, &err)) < 0) break;
    if (!pl->shards[index]->data_address[0])
      rc = lm_errf(&err, LOOM_WORKER_LOST, "the shard of array %llu on device %u is lost with its worker",
                   (unsigned long long)a->id, pl->shards[index]->device);
    if (rc == 0) rc = dataconn(c, pl->shards[index]->data_address, &p.d, &err);
    if (rc == 0) rc = get_parts(a, pl, &p, 1, &err);
    lm_msg_free(&pl->base);
    free(p.ranges);
    free(p.staging);
    p.ranges = NULL;
    p.staging = NULL;
    p.dst = dst;
    if (!dropped_rc(rc) || !retry_pause(c, attempt)) break;
  }
  if (rc < 0) return fail(c, &err);
  return LOOM_OK;
}

loom_status loom_array_block_until_ready(loom_array *a, int64_t timeout_ms) {
  if (!a) return failf(NULL, LOOM_INVALID_ARGUMENT, "loom_array_block_until_ready: array is NULL");
  if (!a->producer) return LOOM_OK;
  lm_err err;
  int rc = lm_fut_wait(a->producer, timeout_ms, &err);
  if (rc < 0) return fail(a->c, &err);
  return LOOM_OK;
}

loom_status loom_array_delete(loom_array *a) {
  if (!a) return failf(NULL, LOOM_INVALID_ARGUMENT, "loom_array_delete: array is NULL");
  if (atomic_exchange(&a->deleted, 1)) return LOOM_OK;
  array_delete_remote(a->c, a->id);
  return LOOM_OK;
}

void loom_array_release(loom_array *a) {
  if (!a) return;
  loom_array_delete(a);
  lm_fut_unref(a->producer);
  free(a->udevs);
  free(a);
}
