/* One IfrtSession stream = one Loom session. A worker thread per session takes the client's
 * IfrtRequests in order, runs them as libloom calls on the cluster (blocking calls are fine
 * here: this is not an I/O thread) and answers each with the IfrtResponse that echoes its op_id.
 *
 * Objects by handle: arrays (a Loom array, or one shard of one: what
 * DisassembleIntoSingleDeviceArrays hands out), executables and futures. Client-chosen handles
 * are below 2^48 and echoed as given; handles this server makes start at 2^48. When the stream
 * ends, everything the session held is freed and its Loom session closed.
 *
 * Requests not listed in handle() get UNIMPLEMENTED naming the request (docs/proxy.md). */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "common/arena.h"
#include "client/locate.h"
#include "common/log.h"
#include "hlo/ir.h"
#include "hlo/parse.h"
#include "loom/loom.h"
#include "proxy/proxy.h"
#include "proxy/plugin.h"
#include "loom/compile_options_subset.pb-c.h"
#include "xla/pjrt/proto/executable_metadata.pb-c.h"
#include "xla/python/ifrt_proxy/common/grpc_ifrt_service.pb-c.h"
#include "xla/python/ifrt_proxy/common/ifrt_service.pb-c.h"
#include "xla/python/pjrt_ifrt/xla_sharding.pb-c.h"
#include "xla/python/ifrt/sharding_serdes.pb-c.h"

/* protobuf-c's INIT macros for messages with oneofs trip -Wmissing-braces; the deprecated
 * LoadedExecutable{Delete,IsDeleted} requests are still sent by clients and answered. */
#pragma GCC diagnostic ignored "-Wmissing-braces"
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

#define SERVER_HANDLE_BASE ((uint64_t)1 << 48)

/* ---- a small u64 -> pointer map (open addressing, tombstones) ---- */

typedef struct pmap {
  uint64_t *keys; /* 0 = empty, UINT64_MAX = removed */
  void **vals;
  size_t cap, used, live;
} pmap;

static size_t pm_slot(uint64_t k, size_t cap) { return (size_t)((k * 0x9E3779B97F4A7C15ull) >> 17) & (cap - 1); }

static void *pm_get(const pmap *m, uint64_t k) {
  if (!m->cap || k == 0 || k == UINT64_MAX) return NULL;
  for (size_t i = pm_slot(k, m->cap);; i = (i + 1) & (m->cap - 1)) {
    if (m->keys[i] == k) return m->vals[i];
    if (m->keys[i] == 0) return NULL;
  }
}

static int pm_put(pmap *m, uint64_t k, void *v);

static int pm_grow(pmap *m) {
  pmap n = {.cap = m->cap ? m->cap * 2 : 64};
  while (n.cap < m->live * 4) n.cap *= 2;
  n.keys = calloc(n.cap, sizeof *n.keys);
  n.vals = calloc(n.cap, sizeof *n.vals);
  if (!n.keys || !n.vals) {
    free(n.keys);
    free(n.vals);
    return -1;
  }
  for (size_t i = 0; i < m->cap; i++)
    if (m->keys[i] && m->keys[i] != UINT64_MAX) pm_put(&n, m->keys[i], m->vals[i]);
  free(m->keys);
  free(m->vals);
  *m = n;
  return 0;
}

/* Inserts or replaces; returns the value it replaced (or NULL) through *old if given. */
static int pm_put(pmap *m, uint64_t k, void *v) {
  if (k == 0 || k == UINT64_MAX) return -1;
  if ((m->used + 1) * 2 > m->cap && pm_grow(m) < 0) return -1;
  size_t tomb = SIZE_MAX;
  for (size_t i = pm_slot(k, m->cap);; i = (i + 1) & (m->cap - 1)) {
    if (m->keys[i] == k) {
      m->vals[i] = v;
      return 0;
    }
    if (m->keys[i] == UINT64_MAX && tomb == SIZE_MAX) tomb = i;
    if (m->keys[i] == 0) {
      if (tomb != SIZE_MAX) i = tomb;
      else m->used++;
      m->keys[i] = k;
      m->vals[i] = v;
      m->live++;
      return 0;
    }
  }
}

static void *pm_del(pmap *m, uint64_t k) {
  if (!m->cap || k == 0 || k == UINT64_MAX) return NULL;
  for (size_t i = pm_slot(k, m->cap);; i = (i + 1) & (m->cap - 1)) {
    if (m->keys[i] == k) {
      m->keys[i] = UINT64_MAX;
      m->live--;
      return m->vals[i];
    }
    if (m->keys[i] == 0) return NULL;
  }
}

/* ---- session objects ---- */

typedef struct base {          /* a Loom array shared by the views made of it */
  int refs;
  loom_array *arr;
} base;

typedef struct parray {
  base *b;
  int32_t shard;               /* -1: the whole array; else the shard on sharding device index shard */
  loom_dtype dtype;
  int32_t rank;
  int64_t dims[LOOM_MAX_RANK];
  bool deleted;
  int32_t *ilist;              /* the IFRT device list the client knows it by (its sharding's */
  int32_t nilist;              /* devices, in that sharding's order): CopyArrays maps by position */
  int err;                     /* nonzero: an error array (the request that was to make it failed; */
  char *errmsg;                /* every use fails the same way), with no data (b == NULL) */
} parray;

typedef struct pexec {
  loom_executable *exe;
  int32_t num_inputs, num_outputs, num_devices;
  int32_t *devices;
  bool *donated;               /* [num_inputs]: the program donates that input (JAX's donate_argnums) */
  int32_t num_donated;
  bool deleted;
  /* a PluginProgram with a profileRequest (pathwaysutils' jax.profiler.start_trace/stop_trace):
   * its first execute starts Loom's launch trace, its second stops it and writes the file */
  bool profile;
  bool xprof;                  /* the request has xprofTraceOptions: each execute returns one (1,) array */
  int calls;                   /* executes so far */
  char *request;               /* the profileRequest object as JSON (written beside the trace) */
  char session_name[72];       /* the trace's directory under the trace dir */
  px_persist *persist;         /* a persistence write or read (plugin.c) */
  px_reshard *reshard;         /* a reshardRequest (plugin.c): each argument moved into a new sharding */
} pexec;

typedef struct pfuture {
  int code;                    /* gRPC code: PX_OK or an error (once known) */
  char *msg;
  loom_future *lf;             /* a launch still to be waited for, or NULL */
} pfuture;

typedef struct qitem {
  struct qitem *next;
  size_t len;
  uint8_t data[];
} qitem;

struct px_session {
  px_stream *st;
  const px_options *opts;
  uint64_t id;
  int protocol;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  qitem *head, *tail;
  int closing;                 /* 0 open, 1 the client half-closed, 2 the stream died */
  atomic_int refs;             /* the stream's and the worker thread's: the struct lives until both let go */
  loom_client *client;
  pmap arrays, execs, futures;
  uint64_t next_handle;
  lm_arena ar;                 /* the response being built */
  parray **trash;              /* destructed arrays, freed once the answer is sent (the client */
  size_t ntrash, trash_cap;    /* batches destructs at exit and should not wait for the frees) */
  char err[2048];              /* the current request's error message */
  /* the shared pool, per session: the client's session metadata (loom.* attributes of its
   * initialization_data) where it gives them, else the proxy's flags */
  uint32_t pool_devices, share_weight, launch_limit_ms;
  bool has_pool_devices, has_share_weight, has_priority;
  char priority[32];
  char md_err[256];            /* metadata refused: the session ends with this error */
};

static uint64_t new_handle(px_session *s) { return s->next_handle++; }

static uint64_t now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* A copy of str in the response's arena. */
static char *astr(px_session *s, const char *str) { return lm_arena_strndup(&s->ar, str, strlen(str)); }

static void base_unref(base *b) {
  if (!b || --b->refs > 0) return;
  loom_array_release(b->arr);
  free(b);
}

static void parray_free(parray *a) {
  if (!a) return;
  base_unref(a->b);
  free(a->ilist);
  free(a->errmsg);
  free(a);
}

static int32_t *dup_ids(const int32_t *p, int32_t n) {
  int32_t *d = malloc(sizeof(int32_t) * (size_t)(n > 0 ? n : 1));
  if (d && n > 0) memcpy(d, p, sizeof(int32_t) * (size_t)n);
  return d;
}

/* Deletes a's data; the handle stays (IsArrayDeleted), the data goes when no view needs it. */
static void parray_delete(parray *a) {
  if (a->deleted) return;
  a->deleted = true;
  base_unref(a->b);
  a->b = NULL;
}

static void pexec_free(pexec *e) {
  if (!e) return;
  free(e->request);
  px_persist_free(e->persist);
  px_reshard_free(e->reshard);
  loom_executable_destroy(e->exe);
  free(e->devices);
  free(e->donated);
  free(e);
}

static void pfuture_free(pfuture *f) {
  if (!f) return;
  loom_future_destroy(f->lf);
  free(f->msg);
  free(f);
}

/* Registers a future under h: done with code/msg, or (lf != NULL, owned) a launch's completion. */
static void future_put(px_session *s, uint64_t h, int code, const char *msg, loom_future *lf) {
  pfuture *f = calloc(1, sizeof *f);
  if (!f) {
    loom_future_destroy(lf);
    return;
  }
  f->code = code;
  f->msg = msg ? strdup(msg) : NULL;
  f->lf = lf;
  pfuture *old = pm_get(&s->futures, h);
  if (pm_put(&s->futures, h, f) < 0) pfuture_free(f);
  else if (old) pfuture_free(old);
}

/* A new handle whose future is already done, successfully (deletes, compiles). */
static uint64_t ready_future(px_session *s) {
  uint64_t h = new_handle(s);
  future_put(s, h, PX_OK, NULL, NULL);
  return h;
}

/* The future's outcome, waiting for its launch if it has one. */
static int future_code(pfuture *f) {
  if (f->lf) {
    int st = loom_future_wait(f->lf, -1);
    if (st != LOOM_OK) {
      char m[1200];
      snprintf(m, sizeof m, "Execute: %s", loom_future_errmsg(f->lf)[0] ? loom_future_errmsg(f->lf) : loom_strerror(st));
      f->code = px_code_of(st);
      free(f->msg);
      f->msg = strdup(m);
    }
    loom_future_destroy(f->lf);
    f->lf = NULL;
  }
  return f->code;
}

/* Error helper: formats s->err and returns the code. */
static int fail(px_session *s, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(px_session *s, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(s->err, sizeof s->err, fmt, ap);
  va_end(ap);
  return code;
}

static int loom_fail(px_session *s, int st, const char *what) {
  return fail(s, px_code_of(st), "%s: %s", what, loom_errmsg(s->client));
}

/* ---- dtype and sharding conversion ---- */

static const struct { int ifrt; loom_dtype loom; } g_dtypes[] = {
    {1, LOOM_DTYPE_PRED}, {2, LOOM_DTYPE_S8},    {3, LOOM_DTYPE_S16},  {4, LOOM_DTYPE_S32},  {5, LOOM_DTYPE_S64},
    {6, LOOM_DTYPE_U8},   {7, LOOM_DTYPE_U16},   {8, LOOM_DTYPE_U32},  {9, LOOM_DTYPE_U64},  {10, LOOM_DTYPE_F16},
    {11, LOOM_DTYPE_F32}, {12, LOOM_DTYPE_F64},  {16, LOOM_DTYPE_BF16}, {15, LOOM_DTYPE_C64}, {18, LOOM_DTYPE_C128},
};

static loom_dtype dtype_from_ifrt(int k) {
  for (size_t i = 0; i < sizeof g_dtypes / sizeof g_dtypes[0]; i++)
    if (g_dtypes[i].ifrt == k) return g_dtypes[i].loom;
  return LOOM_DTYPE_INVALID;
}

static int dtype_to_ifrt(loom_dtype d) {
  for (size_t i = 0; i < sizeof g_dtypes / sizeof g_dtypes[0]; i++)
    if (g_dtypes[i].loom == d) return g_dtypes[i].ifrt;
  return 0;
}

static size_t dtype_size(loom_dtype d) {
  switch (d) {
#define SZ(name, value, mlir, npy, size) case LOOM_DTYPE_##name: return size;
    LOOM_DTYPE_LIST(SZ)
#undef SZ
  default: return 0;
  }
}

#define NEW(T, INIT) ({ T *p_ = lm_arena_alloc(&s->ar, sizeof(T)); T t_ = INIT; *p_ = t_; p_; })
#define ARR(T, n) ((T *)lm_arena_array(&s->ar, (n) ? (n) : 1, sizeof(T)))

/* The OpSharding of sh, whose devices are named by their index in list[0..nlist). */
static Xla__OpSharding *opsharding_of(px_session *s, const loom_sharding *sh, int32_t rank, const int32_t *list,
                                      int32_t nlist) {
  Xla__OpSharding *o = NEW(Xla__OpSharding, XLA__OP_SHARDING__INIT);
  o->has_type = 1;
  bool any = false;
  for (int32_t d = 0; d < rank; d++) any |= sh->dim_axes[d][0] >= 0;
  if (sh->num_devices <= 1 || !any) {
    o->type = XLA__OP_SHARDING__TYPE__REPLICATED;
    return o;
  }
  o->type = XLA__OP_SHARDING__TYPE__OTHER;
  bool used[LOOM_MAX_MESH_AXES] = {0};
  int64_t tdims[LOOM_MAX_RANK + 1];
  for (int32_t d = 0; d < rank; d++) {
    tdims[d] = 1;
    for (int j = 0; j < LOOM_MAX_MESH_AXES && sh->dim_axes[d][j] >= 0; j++) {
      tdims[d] *= sh->mesh_shape[sh->dim_axes[d][j]];
      used[sh->dim_axes[d][j]] = true;
    }
  }
  int64_t rep = 1;
  for (int a = 0; a < sh->mesh_rank; a++)
    if (!used[a]) rep *= sh->mesh_shape[a];
  int nt = rank + (rep > 1);
  if (rep > 1) {
    tdims[rank] = rep;
    o->has_replicate_on_last_tile_dim = 1;
    o->replicate_on_last_tile_dim = 1;
  }
  o->n_tile_assignment_dimensions = (size_t)nt;
  o->tile_assignment_dimensions = ARR(int64_t, nt);
  memcpy(o->tile_assignment_dimensions, tdims, sizeof(int64_t) * (size_t)nt);
  o->n_tile_assignment_devices = (size_t)sh->num_devices;
  o->tile_assignment_devices = ARR(int64_t, sh->num_devices);
  /* Walk the mesh row-major; each position's tile coordinates give its slot. */
  int64_t pos[LOOM_MAX_MESH_AXES] = {0};
  for (int32_t lin = 0; lin < sh->num_devices; lin++) {
    int64_t coord[LOOM_MAX_RANK + 1];
    for (int32_t d = 0; d < rank; d++) {
      coord[d] = 0;
      for (int j = 0; j < LOOM_MAX_MESH_AXES && sh->dim_axes[d][j] >= 0; j++)
        coord[d] = coord[d] * sh->mesh_shape[sh->dim_axes[d][j]] + pos[sh->dim_axes[d][j]];
    }
    if (rep > 1) {
      coord[rank] = 0;
      for (int a = 0; a < sh->mesh_rank; a++)
        if (!used[a]) coord[rank] = coord[rank] * sh->mesh_shape[a] + pos[a];
    }
    int64_t flat = 0;
    for (int t = 0; t < nt; t++) flat = flat * tdims[t] + coord[t];
    int32_t idx = 0;
    while (idx < nlist && list[idx] != sh->devices[lin]) idx++;
    o->tile_assignment_devices[flat] = idx < nlist ? idx : sh->devices[lin];
    for (int a = sh->mesh_rank - 1; a >= 0; a--) { /* next mesh position */
      if (++pos[a] < sh->mesh_shape[a]) break;
      pos[a] = 0;
    }
  }
  return o;
}

/* An IFRT ShardingProto for sh: SingleDeviceSharding for one device, else HloSharding over list. */
static Xla__Ifrt__ShardingProto *sharding_proto(px_session *s, const loom_sharding *sh, int32_t rank,
                                                const int32_t *list, int32_t nlist) {
  Xla__Ifrt__Serialized *ser = NEW(Xla__Ifrt__Serialized, XLA__IFRT__SERIALIZED__INIT);
  const ProtobufCMessage *m;
  if (sh->num_devices <= 1) {
    Xla__Ifrt__SingleDeviceShardingProto *p =
        NEW(Xla__Ifrt__SingleDeviceShardingProto, XLA__IFRT__SINGLE_DEVICE_SHARDING_PROTO__INIT);
    p->has_device_id = 1;
    p->device_id = sh->devices[0];
    p->memory_kind = "device";
    ser->type_name = "xla::ifrt::SingleDeviceSharding";
    m = &p->base;
  } else {
    Xla__Ifrt__HloShardingProto *p = NEW(Xla__Ifrt__HloShardingProto, XLA__IFRT__HLO_SHARDING_PROTO__INIT);
    Xla__Ifrt__DeviceListProto *dl = NEW(Xla__Ifrt__DeviceListProto, XLA__IFRT__DEVICE_LIST_PROTO__INIT);
    dl->n_device_ids = (size_t)nlist;
    dl->device_ids = ARR(int32_t, nlist);
    memcpy(dl->device_ids, list, sizeof(int32_t) * (size_t)nlist);
    p->devices = dl;
    p->memory_kind = "device";
    p->xla_op_sharding = opsharding_of(s, sh, rank, list, nlist);
    ser->type_name = "xla::ifrt::HloSharding";
    m = &p->base;
  }
  size_t n = protobuf_c_message_get_packed_size(m);
  ser->has_data = 1;
  ser->data.len = n;
  ser->data.data = lm_arena_alloc(&s->ar, n ? n : 1);
  protobuf_c_message_pack(m, ser->data.data);
  Xla__Ifrt__ShardingProto *sp = NEW(Xla__Ifrt__ShardingProto, XLA__IFRT__SHARDING_PROTO__INIT);
  sp->serialized_sharding = ser;
  return sp;
}

/* Parses an IFRT ShardingProto for an array of rank `rank` into a loom_sharding whose devices
 * live in devs[] (room for 4096). */
static int sharding_from_proto(px_session *s, const Xla__Ifrt__ShardingProto *sp, int32_t rank, loom_sharding *sh,
                               int32_t *devs, int32_t cap, int32_t *list_out, int32_t *nlist_out) {
  loom_sharding_initialize(sh);
  *nlist_out = 0;
  if (!sp || !sp->serialized_sharding || !sp->serialized_sharding->type_name)
    return fail(s, PX_INVALID_ARGUMENT, "the array has no sharding");
  const Xla__Ifrt__Serialized *ser = sp->serialized_sharding;
  const char *t = ser->type_name;
  if (!strcmp(t, "xla::ifrt::SingleDeviceSharding")) {
    Xla__Ifrt__SingleDeviceShardingProto *p =
        xla__ifrt__single_device_sharding_proto__unpack(NULL, ser->data.len, ser->data.data);
    if (!p) return fail(s, PX_INVALID_ARGUMENT, "a SingleDeviceSharding that does not parse");
    devs[0] = list_out[0] = p->device_id;
    *nlist_out = 1;
    xla__ifrt__single_device_sharding_proto__free_unpacked(p, NULL);
    sh->num_devices = 1;
    sh->devices = devs;
    return 0;
  }
  if (strcmp(t, "xla::ifrt::HloSharding"))
    return fail(s, PX_UNIMPLEMENTED, "sharding type %s is not supported by the Loom proxy", t);
  Xla__Ifrt__HloShardingProto *p = xla__ifrt__hlo_sharding_proto__unpack(NULL, ser->data.len, ser->data.data);
  if (!p) return fail(s, PX_INVALID_ARGUMENT, "an HloSharding that does not parse");
  int rc = 0;
  const Xla__OpSharding *o = p->xla_op_sharding;
  int32_t nlist = p->devices ? (int32_t)p->devices->n_device_ids : 0;
  const int32_t *list = nlist ? p->devices->device_ids : NULL;
  if (nlist < 1 || nlist > cap || !o) {
    rc = fail(s, PX_INVALID_ARGUMENT, "an HloSharding with %d devices", nlist);
    goto out;
  }
  memcpy(list_out, list, sizeof(int32_t) * (size_t)nlist);
  *nlist_out = nlist;
  int type = o->has_type ? o->type : XLA__OP_SHARDING__TYPE__REPLICATED;
  if (type == XLA__OP_SHARDING__TYPE__REPLICATED) {
    memcpy(devs, list, sizeof(int32_t) * (size_t)nlist);
    loom_sharding_replicated(sh, devs, nlist);
    goto out;
  }
  if (type == XLA__OP_SHARDING__TYPE__MAXIMAL && o->n_tile_assignment_devices == 1 &&
      o->tile_assignment_devices[0] >= 0 && o->tile_assignment_devices[0] < nlist) {
    devs[0] = list[o->tile_assignment_devices[0]];
    sh->num_devices = 1;
    sh->devices = devs;
    goto out;
  }
  if (type != XLA__OP_SHARDING__TYPE__OTHER || o->n_last_tile_dims) {
    rc = fail(s, PX_UNIMPLEMENTED, "OpSharding type %d (last_tile_dims %zu) is not supported by the Loom proxy", type,
              o->n_last_tile_dims);
    goto out;
  }
  size_t nt = o->n_tile_assignment_dimensions;
  size_t want = (size_t)rank + (o->replicate_on_last_tile_dim ? 1 : 0);
  if (nt != want || nt > LOOM_MAX_MESH_AXES) {
    rc = fail(s, nt != want ? PX_INVALID_ARGUMENT : PX_UNIMPLEMENTED,
              "an OpSharding with %zu tile dimensions for a rank-%d array (Loom meshes have at most %d axes)", nt, rank,
              LOOM_MAX_MESH_AXES);
    goto out;
  }
  int64_t total = 1;
  for (size_t i = 0; i < nt; i++) {
    if (o->tile_assignment_dimensions[i] < 1 || o->tile_assignment_dimensions[i] > 4096) {
      rc = fail(s, PX_INVALID_ARGUMENT, "an OpSharding tile dimension of %" PRId64, o->tile_assignment_dimensions[i]);
      goto out;
    }
    total *= o->tile_assignment_dimensions[i];
    if (total > nlist) break;
  }
  if (total != nlist) {
    rc = fail(s, PX_INVALID_ARGUMENT, "an OpSharding with %" PRId64 "+ tiles over %d devices", total, nlist);
    goto out;
  }
  /* The tile -> device index order: explicit, or iota(reshape_dims) transposed by perm. */
  if (o->n_tile_assignment_devices) {
    if ((int64_t)o->n_tile_assignment_devices != total) {
      rc = fail(s, PX_INVALID_ARGUMENT, "an OpSharding lists %zu devices for %" PRId64 " tiles",
                o->n_tile_assignment_devices, total);
      goto out;
    }
    for (int64_t i = 0; i < total; i++) {
      int64_t d = o->tile_assignment_devices[i];
      if (d < 0 || d >= nlist) {
        rc = fail(s, PX_INVALID_ARGUMENT, "an OpSharding names device index %" PRId64 " of %d", d, nlist);
        goto out;
      }
      devs[i] = list[d];
    }
  } else {
    size_t nr = o->n_iota_reshape_dims;
    if (nr == 0 || nr > 16 || o->n_iota_transpose_perm != nr) {
      rc = fail(s, PX_INVALID_ARGUMENT, "an OpSharding with neither tile devices nor a valid iota form");
      goto out;
    }
    int64_t rd[16], prod = 1, strides[16];
    bool seen[16] = {0};
    for (size_t i = 0; i < nr; i++) {
      rd[i] = o->iota_reshape_dims[i];
      int32_t pi = o->iota_transpose_perm[i];
      if (rd[i] < 1 || pi < 0 || (size_t)pi >= nr || seen[pi]) {
        rc = fail(s, PX_INVALID_ARGUMENT, "an OpSharding with a bad iota form");
        goto out;
      }
      seen[pi] = true;
      prod *= rd[i];
      if (prod > total) break;
    }
    if (prod != total) {
      rc = fail(s, PX_INVALID_ARGUMENT, "an OpSharding whose iota form has %" PRId64 " devices, not %" PRId64, prod,
                total);
      goto out;
    }
    strides[nr - 1] = 1;
    for (size_t i = nr - 1; i > 0; i--) strides[i - 1] = strides[i] * rd[i];
    /* output position (row-major over the transposed dims) -> source index */
    int64_t idx[16] = {0};
    for (int64_t k = 0; k < total; k++) {
      int64_t src = 0;
      for (size_t i = 0; i < nr; i++) src += idx[i] * strides[o->iota_transpose_perm[i]];
      devs[k] = list[src];
      for (size_t i = nr; i-- > 0;) {
        if (++idx[i] < rd[o->iota_transpose_perm[i]]) break;
        idx[i] = 0;
      }
    }
  }
  sh->mesh_rank = (int32_t)nt;
  for (size_t i = 0; i < nt; i++) sh->mesh_shape[i] = o->tile_assignment_dimensions[i];
  for (int32_t d = 0; d < rank; d++) sh->dim_axes[d][0] = (int8_t)d;
  sh->num_devices = nlist;
  sh->devices = devs;
out:
  xla__ifrt__hlo_sharding_proto__free_unpacked(p, NULL);
  return rc;
}

/* ---- arrays ---- */

static parray *array_get(px_session *s, uint64_t h, int *rc) {
  parray *a = pm_get(&s->arrays, h);
  if (a && a->err) *rc = fail(s, a->err, "%s", a->errmsg ? a->errmsg : "the array's producer failed"), a = NULL;
  else if (!a) *rc = fail(s, PX_NOT_FOUND, "array handle %" PRIu64 " is not known in session %" PRIu64, h, s->id);
  else if (a->deleted) *rc = fail(s, PX_INVALID_ARGUMENT, "array handle %" PRIu64 " was deleted", h), a = NULL;
  return a;
}

static int array_add(px_session *s, uint64_t h, parray *a) {
  parray *old = pm_get(&s->arrays, h);
  if (pm_put(&s->arrays, h, a) < 0) {
    parray_free(a);
    return fail(s, PX_RESOURCE_EXHAUSTED, "out of memory");
  }
  if (old && old != a) parray_free(old);
  return 0;
}

/* The Loom shard slot of sharding sh held by device dev, or -1. */
static int32_t slot_of(const loom_sharding *sh, int32_t dev) {
  for (int32_t k = 0; k < sh->num_devices; k++)
    if (sh->devices[k] == dev) return k;
  return -1;
}

/* A view of shard i of a's Loom array (or of a itself when it is one device already). */
static parray *array_view(px_session *s, parray *a, int32_t i, int *rc) {
  parray *v = calloc(1, sizeof *v);
  if (!v) {
    *rc = fail(s, PX_RESOURCE_EXHAUSTED, "out of memory");
    return NULL;
  }
  *v = *a;
  v->b->refs++;
  v->nilist = 1;
  v->ilist = dup_ids(a->ilist, 1);
  if (!v->ilist) {
    parray_free(v);
    *rc = fail(s, PX_RESOURCE_EXHAUSTED, "out of memory");
    return NULL;
  }
  if (a->shard < 0) {
    loom_shard_desc d = {.struct_size = sizeof d};
    if (loom_array_shard_info(a->b->arr, i, &d) != LOOM_OK) {
      parray_free(v);
      *rc = fail(s, PX_INTERNAL, "the array has no shard %d", i);
      return NULL;
    }
    v->shard = i;
    v->rank = d.rank;
    memcpy(v->dims, d.dims, sizeof v->dims);
    v->ilist[0] = d.device;
  }
  return v;
}

/* The device holding a single-device array or view. */
static int32_t array_device(const parray *a) {
  loom_shard_desc d = {.struct_size = sizeof d};
  loom_array_shard_info(a->b->arr, a->shard < 0 ? 0 : a->shard, &d);
  return d.device;
}

static size_t array_bytes(const parray *a) {
  size_t n = dtype_size(a->dtype);
  for (int32_t i = 0; i < a->rank; i++) n *= (size_t)a->dims[i];
  return n;
}

/* loom_array_put of a whole array (data, n bytes) or of one buffer per shard (shard_data). */
static int put_array(px_session *s, loom_dtype dt, int32_t rank, const int64_t *dims, const loom_sharding *sh,
                     const void *data, size_t n, const void *const *shard_data, loom_array **out) {
  loom_put_args pa;
  loom_put_args_initialize(&pa);
  pa.dtype = dt;
  pa.rank = rank;
  pa.dims = dims;
  pa.sharding = sh;
  pa.data = data;
  pa.data_size = n;
  pa.shard_data = shard_data;
  return loom_array_put(s->client, &pa, out);
}

/* A whole Loom array for a (views are copied into their own array on their device). */
static loom_array *array_whole(px_session *s, parray *a, int *rc) {
  if (a->shard < 0) return a->b->arr;
  size_t n = array_bytes(a);
  void *buf = malloc(n ? n : 1);
  if (!buf) {
    *rc = fail(s, PX_RESOURCE_EXHAUSTED, "out of memory");
    return NULL;
  }
  int st = loom_array_get_shard(a->b->arr, a->shard, buf, n);
  loom_array *out = NULL;
  if (st == LOOM_OK) {
    int32_t dev = array_device(a);
    loom_sharding sh;
    loom_sharding_single(&sh, &dev);
    st = put_array(s, a->dtype, a->rank, a->dims, &sh, buf, n, NULL, &out);
  }
  free(buf);
  if (st != LOOM_OK) {
    *rc = loom_fail(s, st, "copying a shard into its own array");
    return NULL;
  }
  base *b = calloc(1, sizeof *b);
  if (!b) {
    loom_array_release(out);
    *rc = fail(s, PX_RESOURCE_EXHAUSTED, "out of memory");
    return NULL;
  }
  b->refs = 1;
  b->arr = out;
  base_unref(a->b);
  a->b = b;
  a->shard = -1;
  return out;
}

static bool dense_strides(const parray *a, const Xla__Ifrt__Proto__ByteStrides *bs) {
  if (!bs) return true;
  if ((int32_t)bs->n_strides != a->rank) return false;
  int64_t st = (int64_t)dtype_size(a->dtype);
  for (int32_t i = a->rank - 1; i >= 0; i--) {
    if (a->dims[i] > 1 && bs->strides[i] != st) return false;
    st *= a->dims[i];
  }
  return true;
}

/* ---- the requests ---- */

typedef Xla__Ifrt__Proxy__IfrtRequest Req;
typedef Xla__Ifrt__Proxy__IfrtResponse Resp;

static int do_init(px_session *s, Resp *r) {
  int st = loom_refresh_devices(s->client);
  int32_t n = 0;
  if (st == LOOM_OK) st = loom_device_count(s->client, &n);
  if (st != LOOM_OK) return loom_fail(s, st, "listing the cluster's devices");
  Xla__Ifrt__Proxy__InitResponse *o = NEW(Xla__Ifrt__Proxy__InitResponse, XLA__IFRT__PROXY__INIT_RESPONSE__INIT);
  o->has_session_id = 1;
  o->session_id = s->id;
  o->platform_name = "cpu"; /* JAX lowers with its CPU rules: Loom's devices run StableHLO on CPUs */
  o->platform_version = astr(s, "loom " LOOM_VERSION_STRING);
  o->has_platform_id = 1;
  o->has_process_index = 1;
  o->runtime_type = "loom";
  o->n_all_devices = o->n_memories = (size_t)n;
  o->all_devices = ARR(Xla__Ifrt__Proxy__InitResponse__Device *, n);
  o->memories = ARR(Xla__Ifrt__Proxy__InitResponse__Memory *, n);
  o->n_addressable_device_ids = o->n_primary_device_ids = (size_t)n;
  o->addressable_device_ids = ARR(int32_t, n);
  o->primary_device_ids = ARR(int32_t, n);
  char slices[64][64];
  int nslices = 0;
  for (int32_t i = 0; i < n; i++) {
    loom_device_desc d = {.struct_size = sizeof d};
    if ((st = loom_device_info(s->client, i, &d)) != LOOM_OK) return loom_fail(s, st, "reading a device");
    /* slice_index: the slice's position among the slices in device order (pathwaysutils groups by it) */
    int si = 0;
    while (si < nslices && strcmp(slices[si], d.slice)) si++;
    if (si == nslices && nslices < 64) snprintf(slices[nslices++], sizeof slices[0], "%s", d.slice);
    Xla__Ifrt__Proxy__InitResponse__Device *dv =
        NEW(Xla__Ifrt__Proxy__InitResponse__Device, XLA__IFRT__PROXY__INIT_RESPONSE__DEVICE__INIT);
    dv->has_id = dv->has_local_device_id = dv->has_local_hardware_id = dv->has_default_memory_id = 1;
    dv->id = dv->local_device_id = dv->default_memory_id = i;
    dv->local_hardware_id = d.local_index;
    dv->platform_name = "cpu";
    dv->device_kind = astr(s, d.kind);
    dv->n_memory_ids = 1;
    dv->memory_ids = ARR(int32_t, 1);
    dv->memory_ids[0] = i;
    char buf[512];
    snprintf(buf, sizeof buf, "loom:%d", i);
    dv->debug_string = astr(s, buf);
    snprintf(buf, sizeof buf, "LoomDevice(id=%d, worker=%d, slice=%s)", i, d.worker_id, d.slice);
    dv->to_string = astr(s, buf);
    Xla__Ifrt__AttributeMapProto *am = NEW(Xla__Ifrt__AttributeMapProto, XLA__IFRT__ATTRIBUTE_MAP_PROTO__INIT);
    am->n_attributes = 4;
    am->attributes = ARR(Xla__Ifrt__AttributeMapProto__AttributesEntry *, 4);
    const char *keys[4] = {"slice_index", "worker_id", "local_index", "host"};
    int64_t ivals[3] = {si, d.worker_id, d.local_index};
    for (int k = 0; k < 4; k++) {
      Xla__Ifrt__AttributeMapProto__AttributesEntry *e =
          NEW(Xla__Ifrt__AttributeMapProto__AttributesEntry, XLA__IFRT__ATTRIBUTE_MAP_PROTO__ATTRIBUTES_ENTRY__INIT);
      Xla__Ifrt__AttributeMapProto__Value *v =
          NEW(Xla__Ifrt__AttributeMapProto__Value, XLA__IFRT__ATTRIBUTE_MAP_PROTO__VALUE__INIT);
      e->key = (char *)keys[k];
      if (k < 3) {
        v->value_case = XLA__IFRT__ATTRIBUTE_MAP_PROTO__VALUE__VALUE_INT64_VALUE;
        v->int64_value = ivals[k];
      } else {
        v->value_case = XLA__IFRT__ATTRIBUTE_MAP_PROTO__VALUE__VALUE_STRING_VALUE;
        char *h = astr(s, d.worker_host);
        v->string_value.data = (uint8_t *)h;
        v->string_value.len = strlen(h);
      }
      e->value = v;
      am->attributes[k] = e;
    }
    dv->attributes = am;
    o->all_devices[i] = dv;
    Xla__Ifrt__Proxy__InitResponse__Memory *m =
        NEW(Xla__Ifrt__Proxy__InitResponse__Memory, XLA__IFRT__PROXY__INIT_RESPONSE__MEMORY__INIT);
    m->has_id = m->has_kind_id = 1;
    m->id = i;
    m->kind_id = 1;
    m->memory_space_kind = "device";
    m->n_device_ids = 1;
    m->device_ids = ARR(int32_t, 1);
    m->device_ids[0] = i;
    snprintf(buf, sizeof buf, "device:%d", i);
    m->debug_string = astr(s, buf);
    snprintf(buf, sizeof buf, "LoomMemory(device=%d)", i);
    m->to_string = astr(s, buf);
    o->memories[i] = m;
    o->addressable_device_ids[i] = o->primary_device_ids[i] = i;
  }
  r->response_case = XLA__IFRT__PROXY__IFRT_RESPONSE__RESPONSE_INIT_RESPONSE;
  r->init_response = o;
  return 0;
}

/* Which inputs the program donates (its main's argument attributes; Loom compiled it already, so
 * it parses). Donated inputs are deleted once a launch has taken them, as JAX expects. */
static void find_donated(pexec *e, const char *prog, size_t len) {
  lm_module *m = NULL;
  lm_err err;
  lm_parse_opts po = {.no_verify = true};
  if (lm_parse_module(prog, len, &po, &m, &err) != 0) return;
  const lm_func *fn = lm_module_func(m, "main");
  if (fn && (int32_t)fn->nargs == e->num_inputs && e->num_inputs > 0 &&
      (e->donated = calloc((size_t)e->num_inputs, sizeof *e->donated)) != NULL)
    for (int32_t i = 0; i < e->num_inputs; i++)
      if ((e->donated[i] = lm_func_arg_donated(fn, (uint32_t)i))) e->num_donated++;
  lm_module_free(m);
}

static int compile_plugin(px_session *s, const Xla__Ifrt__Proxy__CompileRequest *q, Resp *r);

/* The CompileResponse for executable e listed under handle h (a ready future with it). */
static Xla__Ifrt__Proxy__CompileResponse *compile_reply(px_session *s, Resp *r, uint64_t h, const char *name,
                                                        const pexec *e) {
  Xla__Ifrt__Proxy__CompileResponse *o =
      NEW(Xla__Ifrt__Proxy__CompileResponse, XLA__IFRT__PROXY__COMPILE_RESPONSE__INIT);
  o->has_loaded_executable_handle = 1;
  o->loaded_executable_handle = h;
  o->name = astr(s, name);
  o->has_num_devices = 1;
  o->num_devices = e->num_devices;
  o->n_device_ids = o->n_addressable_device_ids = (size_t)e->num_devices;
  o->device_ids = o->addressable_device_ids = e->devices;
  o->has_ready_future_handle = 1;
  o->ready_future_handle = ready_future(s);
  r->response_case = XLA__IFRT__PROXY__IFRT_RESPONSE__RESPONSE_COMPILE_RESPONSE;
  r->compile_response = o;
  return o;
}

static int do_compile(px_session *s, const Xla__Ifrt__Proxy__CompileRequest *q, Resp *r) {
  if (!q->program || !q->program->type_name) return fail(s, PX_INVALID_ARGUMENT, "Compile without a program");
  if (!strcmp(q->program->type_name, "xla::ifrt::PluginProgram")) return compile_plugin(s, q, r);
  if (strcmp(q->program->type_name, "xla::ifrt::XlaProgram"))
    return fail(s, PX_UNIMPLEMENTED, "Compile: program type %s is not supported by the Loom proxy",
                q->program->type_name);
  if (q->n_host_callbacks)
    return fail(s, PX_UNIMPLEMENTED,
                "Compile: host callbacks (jax.debug.print, jax.debug.callback, pure_callback) are not supported by "
                "the Loom proxy yet");
  int32_t devs[4096], ndev = 0;
  int64_t nrep = 1, npart = 1;
  if (q->compile_options && q->compile_options->has_data) {
    Loom__Ifrtsub__XlaCompileOptions *co = loom__ifrtsub__xla_compile_options__unpack(
        NULL, q->compile_options->data.len, q->compile_options->data.data);
    if (!co) return fail(s, PX_INVALID_ARGUMENT, "Compile: the compile options do not parse");
    const Loom__Ifrtsub__ExecutableBuildOptions *b =
        co->compile_options ? co->compile_options->executable_build_options : NULL;
    if (b && b->has_num_replicas) nrep = b->num_replicas;
    if (b && b->has_num_partitions) npart = b->num_partitions;
    const Xla__DeviceAssignmentProto *da = b ? b->device_assignment : NULL;
    int rc = 0;
    if (nrep < 1 || npart < 1 || nrep * npart > 4096) {
      rc = fail(s, PX_INVALID_ARGUMENT, "Compile: %" PRId64 " replicas x %" PRId64 " partitions", nrep, npart);
    } else if (da) {
      if ((int64_t)da->n_computation_devices != npart) {
        rc = fail(s, PX_INVALID_ARGUMENT, "Compile: a device assignment for %zu partitions, not %" PRId64,
                  da->n_computation_devices, npart);
      } else {
        for (int64_t rr = 0; rr < nrep && !rc; rr++)
          for (int64_t p = 0; p < npart && !rc; p++) {
            const Xla__DeviceAssignmentProto__ComputationDevice *cd = da->computation_devices[p];
            if ((int64_t)cd->n_replica_device_ids != nrep) rc = fail(s, PX_INVALID_ARGUMENT, "Compile: a ragged device assignment");
            else devs[ndev++] = (int32_t)cd->replica_device_ids[rr];
          }
      }
    }
    loom__ifrtsub__xla_compile_options__free_unpacked(co, NULL);
    if (rc) return rc;
  }
  char name[64];
  uint64_t h = new_handle(s);
  snprintf(name, sizeof name, "program%" PRIu64, h - SERVER_HANDLE_BASE);
  loom_compile_options lo;
  loom_compile_options_initialize(&lo);
  lo.devices = ndev ? devs : NULL;
  lo.num_devices = ndev;
  lo.name = name;
  loom_executable *exe = NULL;
  int st = loom_compile(s->client, (const char *)q->program->data.data, q->program->data.len, &lo, &exe);
  if (st != LOOM_OK) return loom_fail(s, st, "Compile");
  loom_executable_info info = {.struct_size = sizeof info};
  loom_executable_info_get(exe, &info);
  pexec *e = calloc(1, sizeof *e);
  int32_t *dl = malloc(sizeof(int32_t) * (size_t)(info.num_devices ? info.num_devices : 1));
  if (!e || !dl || pm_put(&s->execs, h, e) < 0) {
    free(e);
    free(dl);
    loom_executable_destroy(exe);
    return fail(s, PX_RESOURCE_EXHAUSTED, "out of memory");
  }
  memcpy(dl, info.devices, sizeof(int32_t) * (size_t)info.num_devices);
  *e = (pexec){.exe = exe, .num_inputs = info.num_inputs, .num_outputs = info.num_outputs,
               .num_devices = info.num_devices, .devices = dl};
  find_donated(e, (const char *)q->program->data.data, q->program->data.len);
  Xla__Ifrt__Proxy__CompileResponse *o = compile_reply(s, r, h, name, e);
  char fp[32];
  snprintf(fp, sizeof fp, "%016" PRIx64, info.fingerprint);
  o->fingerprint_case = XLA__IFRT__PROXY__COMPILE_RESPONSE__FINGERPRINT_FINGERPRINT_VALUE;
  o->fingerprint_value.data = (uint8_t *)astr(s, fp);
  o->fingerprint_value.len = strlen(fp);
  return 0;
}

static pexec *exec_get(px_session *s, uint64_t h, int *rc) {
  pexec *e = pm_get(&s->execs, h);
  if (!e) *rc = fail(s, PX_NOT_FOUND, "executable handle %" PRIu64 " is not known in session %" PRIu64, h, s->id);
  return e;
}

static Tensorflow__StatusProto *status_proto(px_session *s, int code, const char *msg) {
  Tensorflow__StatusProto *p = NEW(Tensorflow__StatusProto, TENSORFLOW__STATUS_PROTO__INIT);
  p->has_code = 1;
  p->code = (Tensorflow__Error__Code)code;
  p->message = astr(s, msg);
  return p;
}

/* The parts of LoadedExecutableMetadata every executable shares, and the reply: layouts as error
 * statuses (the client then uses the default dense row-major layouts), the donated inputs (none
 * unless the caller fills them), no compiled memory statistics. */
static int metadata_reply(px_session *s, Xla__Ifrt__Proxy__LoadedExecutableMetadataResponse *o, Resp *r) {
  o->parameter_layouts_case = XLA__IFRT__PROXY__LOADED_EXECUTABLE_METADATA_RESPONSE__PARAMETER_LAYOUTS_PARAMETER_LAYOUTS_ERROR;
  o->parameter_layouts_error = status_proto(s, PX_UNIMPLEMENTED, "Loom uses the default layouts");
  o->output_layouts_case = XLA__IFRT__PROXY__LOADED_EXECUTABLE_METADATA_RESPONSE__OUTPUT_LAYOUTS_OUTPUT_LAYOUTS_ERROR;
  o->output_layouts_error = status_proto(s, PX_UNIMPLEMENTED, "Loom uses the default layouts");
  o->donated_input_indices_oneof_case =
      XLA__IFRT__PROXY__LOADED_EXECUTABLE_METADATA_RESPONSE__DONATED_INPUT_INDICES_ONEOF_DONATED_INPUT_INDICES;
  if (!o->donated_input_indices)
    o->donated_input_indices = NEW(Xla__Ifrt__Proxy__LoadedExecutableMetadataResponse__DonatedInputIndices,
                                   XLA__IFRT__PROXY__LOADED_EXECUTABLE_METADATA_RESPONSE__DONATED_INPUT_INDICES__INIT);
  o->compiled_memory_stats_oneof_case =
      XLA__IFRT__PROXY__LOADED_EXECUTABLE_METADATA_RESPONSE__COMPILED_MEMORY_STATS_ONEOF_COMPILED_MEMORY_STATS_ERROR;
  o->compiled_memory_stats_error = status_proto(s, PX_UNIMPLEMENTED, "not available from Loom");
  r->response_case = XLA__IFRT__PROXY__IFRT_RESPONSE__RESPONSE_LOADED_EXECUTABLE_METADATA_RESPONSE;
  r->loaded_executable_metadata_response = o;
  return 0;
}

/* A profile, persistence or reshard executable's metadata: no input shardings; its outputs (with
 * xprofTraceOptions one (1,) array; a read's or a reshard's arrays) in device memory with the
 * default layout. */
static int profile_metadata(px_session *s, const pexec *e, Xla__Ifrt__Proxy__LoadedExecutableMetadataResponse *o,
                            Resp *r) {
  Xla__Ifrt__Proxy__LoadedExecutableMetadataResponse__OutputMemoryKind *mk =
      NEW(Xla__Ifrt__Proxy__LoadedExecutableMetadataResponse__OutputMemoryKind,
          XLA__IFRT__PROXY__LOADED_EXECUTABLE_METADATA_RESPONSE__OUTPUT_MEMORY_KIND__INIT);
  if (e->num_outputs) {
    Xla__Ifrt__Proxy__LoadedExecutableMetadataResponse__MemoryKindList *ml =
        NEW(Xla__Ifrt__Proxy__LoadedExecutableMetadataResponse__MemoryKindList,
            XLA__IFRT__PROXY__LOADED_EXECUTABLE_METADATA_RESPONSE__MEMORY_KIND_LIST__INIT);
    ml->n_memory_kinds = (size_t)e->num_outputs;
    ml->memory_kinds = ARR(char *, e->num_outputs);
    for (int32_t i = 0; i < e->num_outputs; i++) ml->memory_kinds[i] = "device";
    mk->n_memory_kind_lists = 1;
    mk->memory_kind_lists = ARR(Xla__Ifrt__Proxy__LoadedExecutableMetadataResponse__MemoryKindList *, 1);
    mk->memory_kind_lists[0] = ml;
  }
  o->output_memory_kinds = mk;
  return metadata_reply(s, o, r);
}

static int do_metadata(px_session *s, const Xla__Ifrt__Proxy__LoadedExecutableMetadataRequest *q, Resp *r) {
  int rc = 0;
  pexec *e = exec_get(s, q->loaded_executable_handle, &rc);
  if (!e) return rc;
  typedef Xla__Ifrt__Proxy__LoadedExecutableMetadataResponse M;
  M *o = NEW(M, XLA__IFRT__PROXY__LOADED_EXECUTABLE_METADATA_RESPONSE__INIT);
  if (e->profile || e->persist || e->reshard) return profile_metadata(s, e, o, r);
  if (e->num_devices > 1) {
    for (int io = 0; io < 2; io++) {
      int32_t n = io ? e->num_outputs : e->num_inputs;
      Xla__Ifrt__Proxy__LoadedExecutableMetadataResponse__ShardingList *l =
          NEW(Xla__Ifrt__Proxy__LoadedExecutableMetadataResponse__ShardingList,
              XLA__IFRT__PROXY__LOADED_EXECUTABLE_METADATA_RESPONSE__SHARDING_LIST__INIT);
      l->n_shardings = (size_t)n;
      l->shardings = ARR(Xla__OpSharding *, n);
      for (int32_t i = 0; i < n; i++) {
        loom_array_spec sp = {.struct_size = sizeof sp};
        loom_sharding sh = {.struct_size = sizeof sh};
        int st = io ? loom_executable_output(e->exe, i, &sp, &sh) : loom_executable_input(e->exe, i, &sp, &sh);
        if (st != LOOM_OK) return fail(s, PX_INTERNAL, "executable metadata: %s", loom_strerror(st));
        l->shardings[i] = opsharding_of(s, &sh, sp.rank, e->devices, e->num_devices);
      }
      if (io) o->output_shardings = l;
      else o->parameter_shardings = l;
    }
  }
  Xla__Ifrt__Proxy__LoadedExecutableMetadataResponse__OutputMemoryKind *mk =
      NEW(Xla__Ifrt__Proxy__LoadedExecutableMetadataResponse__OutputMemoryKind,
          XLA__IFRT__PROXY__LOADED_EXECUTABLE_METADATA_RESPONSE__OUTPUT_MEMORY_KIND__INIT);
  Xla__Ifrt__Proxy__LoadedExecutableMetadataResponse__MemoryKindList *ml =
      NEW(Xla__Ifrt__Proxy__LoadedExecutableMetadataResponse__MemoryKindList,
          XLA__IFRT__PROXY__LOADED_EXECUTABLE_METADATA_RESPONSE__MEMORY_KIND_LIST__INIT);
  ml->n_memory_kinds = (size_t)e->num_outputs;
  ml->memory_kinds = ARR(char *, e->num_outputs);
  for (int32_t i = 0; i < e->num_outputs; i++) ml->memory_kinds[i] = "device";
  mk->n_memory_kind_lists = 1;
  mk->memory_kind_lists = ARR(Xla__Ifrt__Proxy__LoadedExecutableMetadataResponse__MemoryKindList *, 1);
  mk->memory_kind_lists[0] = ml;
  o->output_memory_kinds = mk;
  o->donated_input_indices = NEW(Xla__Ifrt__Proxy__LoadedExecutableMetadataResponse__DonatedInputIndices,
                                 XLA__IFRT__PROXY__LOADED_EXECUTABLE_METADATA_RESPONSE__DONATED_INPUT_INDICES__INIT);
  if (e->num_donated) {
    o->donated_input_indices->donated_input_indices = ARR(uint32_t, e->num_donated);
    for (int32_t i = 0; i < e->num_inputs; i++)
      if (e->donated[i])
        o->donated_input_indices->donated_input_indices[o->donated_input_indices->n_donated_input_indices++] = (uint32_t)i;
  }
  return metadata_reply(s, o, r);
}

/* The launch has taken its inputs: the donated ones (those the client did not mark
 * non-donatable) are deleted, as DeleteArray would (the launch still reads them first: Loom
 * orders a session's deletes after its launches). */
static void donate_inputs(px_session *s, const pexec *e, const Xla__Ifrt__Proxy__LoadedExecutableExecuteRequest *q) {
  if (!e->num_donated) return;
  const Xla__Ifrt__ExecuteOptionsProto *xo = q->execute_options;
  for (int32_t i = 0; i < e->num_inputs; i++) {
    if (!e->donated[i]) continue;
    bool keep = false;
    for (size_t k = 0; xo && k < xo->n_non_donatable_input_indices && !keep; k++)
      keep = xo->non_donatable_input_indices[k] == i;
    parray *a = keep ? NULL : pm_get(&s->arrays, q->args_handles[i]);
    if (a && !a->err) parray_delete(a);
  }
}

/* ---- PluginProgram: pathwaysutils' side channel ----
 * data = "__serialized_plugin_program " + JSON. {"profileRequest": {...}} (the profiler's
 * start_trace/stop_trace), persistence write/read requests and reshard requests (plugin.c) are
 * served; anything else gets UNIMPLEMENTED naming it. */

#define PLUGIN_PREFIX "__serialized_plugin_program "

static int add_new_array(px_session *s, const parray *t, loom_array *arr, uint64_t *h, const int32_t *list,
                         int32_t nlist);
static uint8_t *fetch(px_session *s, parray *a, size_t *n, int *rc);

/* A session name safe as one path component: [A-Za-z0-9_.-], 1..64, not starting with a dot. */
static bool safe_name(const char *n) {
  size_t len = strlen(n);
  if (len == 0 || len > 64 || n[0] == '.') return false;
  for (const char *c = n; *c; c++)
    if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '_' ||
          *c == '-' || *c == '.'))
      return false;
  return true;
}

/* Answers a PluginProgram's compile with e, registered under a new handle (e is freed on failure). */
static int plugin_compiled(px_session *s, pexec *e, const char *name, Resp *r) {
  uint64_t h = new_handle(s);
  if (pm_put(&s->execs, h, e) < 0) {
    pexec_free(e);
    return fail(s, PX_RESOURCE_EXHAUSTED, "out of memory");
  }
  compile_reply(s, r, h, name, e); /* execute_sharded wants each argument in one shard per device */
  return 0;
}

/* e->devices: every device items[0..n) name, in the order first named; 0 or a failure. */
static int plugin_devices(px_session *s, pexec *e, const px_persist_item *items, int32_t n) {
  size_t all = 0;
  for (int32_t i = 0; i < n; i++) all += (size_t)items[i].ndevices;
  e->devices = malloc(sizeof(int32_t) * (all ? all : 1));
  pmap seen = {0};
  bool oom = !e->devices;
  for (int32_t i = 0; !oom && i < n; i++)
    for (int32_t k = 0; !oom && k < items[i].ndevices; k++) {
      int32_t d = items[i].devices[k];
      if (pm_get(&seen, (uint64_t)d + 1)) continue;
      oom = pm_put(&seen, (uint64_t)d + 1, e) < 0;
      e->devices[e->num_devices++] = d;
    }
  free(seen.keys);
  free(seen.vals);
  return oom ? fail(s, PX_RESOURCE_EXHAUSTED, "out of memory") : 0;
}

/* A persistence write (its arguments are the arrays) or read (its outputs are), or (pp NULL) a
 * reshard: n arguments in, the same n arrays out in their new shardings. */
static int compile_items(px_session *s, px_persist *pp, px_reshard *rp, Resp *r) {
  pexec *e = calloc(1, sizeof *e);
  if (!e) {
    px_persist_free(pp);
    px_reshard_free(rp);
    return fail(s, PX_RESOURCE_EXHAUSTED, "out of memory");
  }
  e->persist = pp;
  e->reshard = rp;
  int32_t n = pp ? pp->n : rp->n;
  /* a reshard's devices are its arguments' (JAX's execute_sharded wants every argument to have
   * a shard on each of the executable's devices; the results go where outSharding says) */
  int rc = plugin_devices(s, e, pp ? pp->items : rp->in, n);
  if (rc) {
    pexec_free(e);
    return rc;
  }
  e->num_inputs = !pp || pp->write ? n : 0;
  e->num_outputs = !pp || !pp->write ? n : 0;
  return plugin_compiled(s, e, !pp ? "loom_reshard" : pp->write ? "loom_persistence_write" : "loom_persistence_read", r);
}

static int compile_plugin(px_session *s, const Xla__Ifrt__Proxy__CompileRequest *q, Resp *r) {
  const char *what = "Compile (PluginProgram)";
  size_t len = q->program->has_data ? q->program->data.len : 0, plen = strlen(PLUGIN_PREFIX);
  const char *data = (const char *)q->program->data.data;
  if (len < plen || memcmp(data, PLUGIN_PREFIX, plen))
    return fail(s, PX_INVALID_ARGUMENT, "%s: the program does not start with '%s'", what, PLUGIN_PREFIX);
  cJSON *root = cJSON_ParseWithLength(data + plen, len - plen);
  if (!root || !cJSON_IsObject(root)) {
    cJSON_Delete(root);
    return fail(s, PX_INVALID_ARGUMENT, "%s: its JSON %s", what, root ? "is not an object" : "does not parse");
  }
  px_persist *pp = NULL;
  int prc = px_persist_parse(root, &pp, s->err, sizeof s->err);
  if (prc != 1) {
    cJSON_Delete(root);
    return prc ? prc : compile_items(s, pp, NULL, r);
  }
  px_reshard *rp = NULL;
  if ((prc = px_reshard_parse(root, &rp, s->err, sizeof s->err)) != 1) {
    cJSON_Delete(root);
    return prc ? prc : compile_items(s, NULL, rp, r);
  }
  cJSON *req = cJSON_GetObjectItemCaseSensitive(root, "profileRequest");
  if (req && !cJSON_IsObject(req)) {
    cJSON_Delete(root);
    return fail(s, PX_INVALID_ARGUMENT, "%s: profileRequest must be a JSON object", what);
  }
  if (!req) {
    const char *key = root->child && root->child->string ? root->child->string : "(empty)";
    int rc = fail(s, PX_UNIMPLEMENTED, "%s: %.100s is not supported by the Loom proxy (profileRequest, persistence and reshard requests are)", what,
                  key);
    cJSON_Delete(root);
    return rc;
  }
  pexec *e = calloc(1, sizeof *e);
  if (!e) {
    cJSON_Delete(root);
    return fail(s, PX_RESOURCE_EXHAUSTED, "out of memory");
  }
  e->profile = true;
  const cJSON *xo = cJSON_GetObjectItemCaseSensitive(req, "xprofTraceOptions");
  e->xprof = xo != NULL;
  const cJSON *sn = xo ? cJSON_GetObjectItemCaseSensitive(xo, "traceSessionName") : NULL;
  if (cJSON_IsString(sn) && safe_name(sn->valuestring)) {
    snprintf(e->session_name, sizeof e->session_name, "%s", sn->valuestring);
  } else { /* the time, as pathwaysutils names sessions */
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(e->session_name, sizeof e->session_name, "%Y_%m_%d_%H_%M_%S", &tm);
  }
  e->request = cJSON_PrintUnformatted(req);
  e->num_outputs = e->xprof ? 1 : 0;
  cJSON_Delete(root);
  if (!e->request) {
    pexec_free(e);
    return fail(s, PX_RESOURCE_EXHAUSTED, "out of memory");
  }
  return plugin_compiled(s, e, "loom_profile", r);
}

/* Creates dir and its parents (mode 0755 for the ones made). */
static int make_dirs(const char *dir) {
  char p[4096];
  if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p) return -1;
  for (char *c = p + 1; *c; c++)
    if (*c == '/') {
      *c = 0;
      if (mkdir(p, 0755) < 0 && errno != EEXIST) return -1;
      *c = '/';
    }
  return mkdir(p, 0755) < 0 && errno != EEXIST ? -1 : 0;
}

static int write_file(const char *path, const char *data, size_t len) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  bool ok = fwrite(data, 1, len, f) == len;
  return fclose(f) == 0 && ok ? 0 : -1;
}

/* Stops Loom's trace and writes it (and the request) under the trace dir; *where gets the path. */
static int profile_stop(px_session *s, pexec *e, char *where, size_t cap) {
  const char *what = "Execute (profileRequest, stop)";
  char dir[4096];
  lm_err err;
  const char *env = getenv("LOOM_TRACE_DIR");
  if (s->opts->trace_dir) snprintf(dir, sizeof dir, "%s", s->opts->trace_dir);
  else if (env && *env) snprintf(dir, sizeof dir, "%s", env);
  else if (lm_state_dir(dir, sizeof dir, &err) == 0) strncat(dir, "/traces", sizeof dir - strlen(dir) - 1);
  else return fail(s, PX_FAILED_PRECONDITION, "%s: no trace directory (--trace-dir): %s", what, err.msg);
  char *json = NULL;
  size_t len = 0;
  int st = loom_trace_stop(s->client, &json, &len);
  if (st != LOOM_OK) return loom_fail(s, st, what);
  char sub[4200], path[4300];
  snprintf(sub, sizeof sub, "%s/%s", dir, e->session_name);
  int rc = 0;
  if (make_dirs(sub) < 0) {
    rc = fail(s, PX_FAILED_PRECONDITION, "%s: cannot create %s: %s", what, sub, strerror(errno));
  } else {
    snprintf(path, sizeof path, "%s/profile-request.json", sub);
    if (write_file(path, e->request, strlen(e->request)) < 0)
      rc = fail(s, PX_FAILED_PRECONDITION, "%s: cannot write %s: %s", what, path, strerror(errno));
    snprintf(path, sizeof path, "%s/loom-trace.json", sub);
    if (!rc && write_file(path, json, len) < 0)
      rc = fail(s, PX_FAILED_PRECONDITION, "%s: cannot write %s: %s", what, path, strerror(errno));
  }
  free(json);
  if (!rc) {
    snprintf(where, cap, "%s", path);
    lm_info("session %" PRIu64 ": profile trace written to %s (%zu bytes)", s->id, path, len);
  }
  return rc;
}


typedef Xla__Ifrt__Proxy__LoadedExecutableExecuteResponse__Output ExecOutput;

/* An execute's output: array handle h of dtype dt and shape dims, in sharding sh over the IFRT
 * device list list[0..nlist). */
static ExecOutput *exec_output(px_session *s, loom_dtype dt, int32_t rank, const int64_t *dims,
                               const loom_sharding *sh, const int32_t *list, int32_t nlist, uint64_t h) {
  ExecOutput *op = NEW(ExecOutput, XLA__IFRT__PROXY__LOADED_EXECUTABLE_EXECUTE_RESPONSE__OUTPUT__INIT);
  op->dtype = NEW(Xla__Ifrt__DTypeProto, XLA__IFRT__DTYPE_PROTO__INIT);
  op->dtype->has_kind = 1;
  op->dtype->kind = (Xla__Ifrt__DTypeProto__Kind)dtype_to_ifrt(dt);
  op->shape = NEW(Xla__Ifrt__ShapeProto, XLA__IFRT__SHAPE_PROTO__INIT);
  op->shape->n_dims = (size_t)rank;
  op->shape->dims = ARR(int64_t, rank);
  memcpy(op->shape->dims, dims, sizeof(int64_t) * (size_t)rank);
  op->sharding = sharding_proto(s, sh, rank, list, nlist);
  op->has_array_handle = 1;
  op->array_handle = h;
  return op;
}

/* The profile executable's execute: the first starts the trace, the second stops and writes it.
 * With xprofTraceOptions each returns one int32 (1,) array on the first device, as pathwaysutils
 * expects (it waits for it: the trace has started, or is written, when it is ready). */
static int execute_profile(px_session *s, pexec *e, const Xla__Ifrt__Proxy__LoadedExecutableExecuteRequest *q,
                           Resp *r) {
  if (q->n_args_handles) return fail(s, PX_INVALID_ARGUMENT, "Execute (profileRequest): takes no arguments");
  if (q->n_result_array_handle && (int32_t)q->n_result_array_handle != e->num_outputs)
    return fail(s, PX_INVALID_ARGUMENT, "Execute (profileRequest): %zu result handles for %d outputs",
                q->n_result_array_handle, e->num_outputs);
  if (e->calls >= 2)
    return fail(s, PX_FAILED_PRECONDITION,
                "Execute (profileRequest): this request already started and stopped its trace (compile a new one)");
  char where[4400] = "";
  int rc;
  if (e->calls == 0) {
    int st = loom_trace_start(s->client);
    rc = st == LOOM_OK ? 0 : loom_fail(s, st, "Execute (profileRequest, start)");
    if (!rc) lm_info("session %" PRIu64 ": profile trace recording (session %s)", s->id, e->session_name);
  } else {
    rc = profile_stop(s, e, where, sizeof where);
  }
  if (rc) return rc;
  e->calls++;
  Xla__Ifrt__Proxy__LoadedExecutableExecuteResponse *o =
      NEW(Xla__Ifrt__Proxy__LoadedExecutableExecuteResponse, XLA__IFRT__PROXY__LOADED_EXECUTABLE_EXECUTE_RESPONSE__INIT);
  if (e->xprof) {
    int32_t dev = 0, zero = 0;
    int64_t dims[1] = {1};
    loom_sharding sh;
    loom_sharding_single(&sh, &dev);
    loom_array *arr = NULL;
    int st = put_array(s, LOOM_DTYPE_S32, 1, dims, &sh, &zero, sizeof zero, NULL, &arr);
    if (st != LOOM_OK) return loom_fail(s, st, "Execute (profileRequest): its result array");
    parray t = {.dtype = LOOM_DTYPE_S32, .rank = 1, .dims = {1}};
    uint64_t h = q->n_result_array_handle ? q->result_array_handle[0] : 0;
    if ((rc = add_new_array(s, &t, arr, &h, &dev, 1)) != 0) return rc;
    o->n_outputs = 1;
    o->outputs = ARR(ExecOutput *, 1);
    o->outputs[0] = exec_output(s, LOOM_DTYPE_S32, 1, dims, &sh, &dev, 1, h);
  }
  if (q->has_result_status_handle && q->result_status_handle) {
    future_put(s, q->result_status_handle, PX_OK, NULL, NULL);
    o->has_status_handle = 1;
    o->status_handle = q->result_status_handle;
  }
  r->response_case = XLA__IFRT__PROXY__IFRT_RESPONSE__RESPONSE_LOADED_EXECUTABLE_EXECUTE_RESPONSE;
  r->loaded_executable_execute_response = o;
  return 0;
}

/* A plugin request's sharding (an xla.OpSharding over its device ids) for a rank-`rank` array:
 * *sh, with its devices in d[0..cap) and the IFRT list in d[cap..2 cap). */
static int item_sharding(px_session *s, const px_persist_item *it, int32_t rank, loom_sharding *sh, int32_t *d,
                         int32_t cap, int32_t *nlist) {
  uint8_t *hs = NULL;
  size_t hl = 0;
  int rc = px_persist_sharding(it, &hs, &hl, s->err, sizeof s->err);
  if (rc) return rc;
  Xla__Ifrt__Serialized ser = XLA__IFRT__SERIALIZED__INIT;
  ser.type_name = "xla::ifrt::HloSharding";
  ser.has_data = 1;
  ser.data.data = hs;
  ser.data.len = hl;
  Xla__Ifrt__ShardingProto sp = XLA__IFRT__SHARDING_PROTO__INIT;
  sp.serialized_sharding = &ser;
  rc = sharding_from_proto(s, &sp, rank, sh, d, cap, d + cap, nlist);
  free(hs);
  return rc;
}

/* Answers an execute that has already run whole (a plugin program's) with o: its status future
 * is done, under the client's handle, else one of ours (the client then fetches it). */
static int execute_done(px_session *s, const Xla__Ifrt__Proxy__LoadedExecutableExecuteRequest *q,
                        Xla__Ifrt__Proxy__LoadedExecutableExecuteResponse *o, Resp *r) {
  uint64_t fh = q->has_result_status_handle && q->result_status_handle ? q->result_status_handle : new_handle(s);
  future_put(s, fh, PX_OK, NULL, NULL);
  o->has_status_handle = 1;
  o->status_handle = fh;
  r->response_case = XLA__IFRT__PROXY__IFRT_RESPONSE__RESPONSE_LOADED_EXECUTABLE_EXECUTE_RESPONSE;
  r->loaded_executable_execute_response = o;
  return 0;
}

/* A persistence execute: runs the whole write or read before answering (the status future is
 * then done; an error fails the execute itself, so no output handle is left dangling). A write
 * takes the arrays as its arguments; a read's outputs are the arrays in the shardings asked. */
static int execute_persist(px_session *s, pexec *e, const Xla__Ifrt__Proxy__LoadedExecutableExecuteRequest *q,
                           Resp *r) {
  const px_persist *p = e->persist;
  const char *what = p->write ? "Execute (persistence write)" : "Execute (persistence read)";
  if ((int32_t)q->n_args_handles != e->num_inputs)
    return fail(s, PX_INVALID_ARGUMENT, "%s: %zu arguments for %d arrays", what, q->n_args_handles, e->num_inputs);
  if (q->n_result_array_handle && (int32_t)q->n_result_array_handle != e->num_outputs)
    return fail(s, PX_INVALID_ARGUMENT, "%s: %zu result handles for %d arrays", what, q->n_result_array_handle,
                e->num_outputs);
  loom_array **arrs = calloc((size_t)p->n, sizeof *arrs);
  loom_sharding *shs = calloc((size_t)p->n, sizeof *shs);
  const loom_sharding **shp = calloc((size_t)p->n, sizeof *shp);
  size_t *off = calloc((size_t)p->n + 1, sizeof *off); /* item i's devices at dv[off[i]..], its list after them */
  for (int32_t i = 0; off && i < p->n; i++) off[i + 1] = off[i] + 2 * (size_t)p->items[i].ndevices;
  int32_t *dv = off ? calloc(off[p->n] + 1, sizeof *dv) : NULL, *nlist = calloc((size_t)p->n, sizeof *nlist);
  int rc = !arrs || !shs || !shp || !off || !dv || !nlist ? fail(s, PX_RESOURCE_EXHAUSTED, "out of memory") : 0;
  if (!rc && p->write) {
    for (int32_t i = 0; i < p->n && !rc; i++) {
      parray *a = array_get(s, q->args_handles[i], &rc);
      if (a) arrs[i] = array_whole(s, a, &rc);
    }
    if (!rc) rc = px_persist_write(s->client, p, arrs, s->err, sizeof s->err);
  } else if (!rc) {
    for (int32_t i = 0; i < p->n && !rc; i++) {
      int32_t *d = dv + off[i], nd = p->items[i].ndevices;
      rc = item_sharding(s, &p->items[i], p->items[i].rank, &shs[i], d, nd, &nlist[i]);
      if (rc) {
        char m[sizeof s->err];
        snprintf(m, sizeof m, "%s", s->err);
        rc = fail(s, rc, "%s of array '%.200s': %s", what, p->items[i].name, m);
      }
      shp[i] = &shs[i];
    }
    if (!rc) rc = px_persist_read(s->client, p, shp, arrs, s->err, sizeof s->err);
  }
  Xla__Ifrt__Proxy__LoadedExecutableExecuteResponse *o =
      NEW(Xla__Ifrt__Proxy__LoadedExecutableExecuteResponse, XLA__IFRT__PROXY__LOADED_EXECUTABLE_EXECUTE_RESPONSE__INIT);
  if (!rc && !p->write) {
    o->n_outputs = (size_t)p->n;
    o->outputs = ARR(ExecOutput *, p->n);
    for (int32_t i = 0; i < p->n; i++) {
      loom_array *arr = arrs[i];
      arrs[i] = NULL;
      if (rc) { /* registering an earlier one failed: the rest are released */
        loom_array_release(arr);
        continue;
      }
      const px_persist_item *it = &p->items[i];
      parray t = {.dtype = it->dtype, .rank = it->rank};
      memcpy(t.dims, it->dims, sizeof t.dims);
      const int32_t *list = dv + off[i] + p->items[i].ndevices;
      uint64_t h = q->n_result_array_handle ? q->result_array_handle[i] : 0;
      if ((rc = add_new_array(s, &t, arr, &h, list, nlist[i])) != 0) continue;
      loom_sharding sh = {.struct_size = sizeof sh};
      loom_array_sharding(arr, &sh);
      o->outputs[i] = exec_output(s, t.dtype, t.rank, t.dims, &sh, list, nlist[i], h);
    }
  }
  for (int32_t i = 0; !p->write && arrs && i < p->n; i++) loom_array_release(arrs[i]);
  free(arrs), free(shs), free(shp), free(off), free(dv), free(nlist);
  if (rc) return rc;
  if (p->write) lm_info("session %" PRIu64 ": persistence wrote %d arrays", s->id, p->n);
  else lm_info("session %" PRIu64 ": persistence read %d arrays", s->id, p->n);
  return execute_done(s, q, o, r);
}


/* A reshard execute: each argument's values move into its output sharding (they pass through the
 * proxy, as ReshardArrays' do: get, then put), and the execute answers once every new array is in
 * device memory. With donateInput the arguments are deleted after. */
static int execute_reshard(px_session *s, pexec *e, const Xla__Ifrt__Proxy__LoadedExecutableExecuteRequest *q,
                           Resp *r) {
  const px_reshard *p = e->reshard;
  const char *what = "Execute (reshardRequest)";
  if ((int32_t)q->n_args_handles != p->n)
    return fail(s, PX_INVALID_ARGUMENT, "%s: %zu arguments for %d arrays", what, q->n_args_handles, p->n);
  if (q->n_result_array_handle && (int32_t)q->n_result_array_handle != p->n)
    return fail(s, PX_INVALID_ARGUMENT, "%s: %zu result handles for %d arrays", what, q->n_result_array_handle, p->n);
  Xla__Ifrt__Proxy__LoadedExecutableExecuteResponse *o =
      NEW(Xla__Ifrt__Proxy__LoadedExecutableExecuteResponse, XLA__IFRT__PROXY__LOADED_EXECUTABLE_EXECUTE_RESPONSE__INIT);
  o->n_outputs = (size_t)p->n;
  o->outputs = ARR(ExecOutput *, p->n);
  int32_t *dv = malloc(sizeof(int32_t) * 8192); /* an output's sharding devices, then its IFRT list (dv + 4096) */
  int rc = dv ? 0 : fail(s, PX_RESOURCE_EXHAUSTED, "out of memory");
  for (int32_t i = 0; i < p->n && !rc; i++) {
    parray *a = array_get(s, q->args_handles[i], &rc);
    if (!a) break;
    loom_sharding sh;
    int32_t nlist = 0;
    rc = item_sharding(s, &p->out[i], a->rank, &sh, dv, 4096, &nlist);
    if (rc) {
      char m[sizeof s->err];
      snprintf(m, sizeof m, "%s", s->err);
      rc = fail(s, rc, "%s: argument %d: %s", what, i, m);
      break;
    }
    size_t n = 0;
    uint8_t *buf = fetch(s, a, &n, &rc);
    if (!buf) break;
    loom_array *arr = NULL;
    int st = put_array(s, a->dtype, a->rank, a->dims, &sh, buf, n, NULL, &arr);
    px_hb_free(buf);
    if (st != LOOM_OK) {
      rc = loom_fail(s, st, what);
      break;
    }
    parray t = {.dtype = a->dtype, .rank = a->rank};
    memcpy(t.dims, a->dims, sizeof t.dims);
    uint64_t h = q->n_result_array_handle ? q->result_array_handle[i] : 0;
    if ((rc = add_new_array(s, &t, arr, &h, dv + 4096, nlist)) != 0) break;
    o->outputs[i] = exec_output(s, t.dtype, t.rank, t.dims, &sh, dv + 4096, nlist, h);
  }
  free(dv);
  if (rc) return rc;
  for (int32_t i = 0; p->donate && i < p->n; i++) {
    parray *a = pm_get(&s->arrays, q->args_handles[i]);
    if (a && !a->err) parray_delete(a);
  }
  return execute_done(s, q, o, r);
}

static int do_execute(px_session *s, const Xla__Ifrt__Proxy__LoadedExecutableExecuteRequest *q, Resp *r) {
  int rc = 0;
  pexec *e = exec_get(s, q->loaded_executable_handle, &rc);
  if (!e) return rc;
  if (e->profile) return execute_profile(s, e, q, r);
  if (e->persist) return execute_persist(s, e, q, r);
  if (e->reshard) return execute_reshard(s, e, q, r);
  if ((int32_t)q->n_args_handles != e->num_inputs)
    return fail(s, PX_INVALID_ARGUMENT, "Execute: %zu arguments for a program of %d", q->n_args_handles, e->num_inputs);
  if (q->n_result_array_handle && (int32_t)q->n_result_array_handle != e->num_outputs)
    return fail(s, PX_INVALID_ARGUMENT, "Execute: %zu result handles for a program of %d outputs",
                q->n_result_array_handle, e->num_outputs);
  loom_array **in = calloc((size_t)e->num_inputs + 1, sizeof *in);
  loom_array **out = calloc((size_t)e->num_outputs + 1, sizeof *out);
  if (!in || !out) {
    free(in);
    free(out);
    return fail(s, PX_RESOURCE_EXHAUSTED, "out of memory");
  }
  for (int32_t i = 0; i < e->num_inputs && !rc; i++) {
    parray *a = array_get(s, q->args_handles[i], &rc);
    if (a) in[i] = array_whole(s, a, &rc);
  }
  loom_future *f = NULL;
  if (!rc) {
    /* Asynchronous, as IFRT's execute is: the outputs are handles at once; a launch error shows
     * when they are used (Loom propagates it to them) and through the status future. */
    int st = loom_launch(e->exe, in, e->num_inputs, NULL, out, e->num_outputs, &f);
    if (st != LOOM_OK) rc = loom_fail(s, st, "Execute");
  }
  free(in);
  if (rc) {
    for (int32_t i = 0; i < e->num_outputs; i++) loom_array_release(out[i]);
    free(out);
    return rc;
  }
  donate_inputs(s, e, q);
  Xla__Ifrt__Proxy__LoadedExecutableExecuteResponse *o =
      NEW(Xla__Ifrt__Proxy__LoadedExecutableExecuteResponse, XLA__IFRT__PROXY__LOADED_EXECUTABLE_EXECUTE_RESPONSE__INIT);
  o->n_outputs = (size_t)e->num_outputs;
  o->outputs = ARR(ExecOutput *, e->num_outputs);
  for (int32_t i = 0; i < e->num_outputs; i++) {
    parray *a = calloc(1, sizeof *a);
    base *b = calloc(1, sizeof *b);
    if (!a || !b) {
      free(a);
      free(b);
      for (int32_t j = i; j < e->num_outputs; j++) loom_array_release(out[j]);
      free(out);
      loom_future_destroy(f);
      return fail(s, PX_RESOURCE_EXHAUSTED, "out of memory");
    }
    b->refs = 1;
    b->arr = out[i];
    a->b = b;
    a->shard = -1;
    a->dtype = loom_array_dtype(out[i]);
    a->rank = loom_array_rank(out[i]);
    memcpy(a->dims, loom_array_dims(out[i]), sizeof(int64_t) * (size_t)a->rank);
    loom_sharding osh = {.struct_size = sizeof osh};
    loom_array_sharding(out[i], &osh);
    a->nilist = osh.num_devices <= 1 ? 1 : e->num_devices;
    a->ilist = dup_ids(osh.num_devices <= 1 ? osh.devices : e->devices, a->nilist);
    uint64_t h = q->n_result_array_handle ? q->result_array_handle[i] : new_handle(s);
    if ((rc = array_add(s, h, a)) != 0) {
      for (int32_t j = i + 1; j < e->num_outputs; j++) loom_array_release(out[j]);
      free(out);
      loom_future_destroy(f);
      return rc;
    }
    o->outputs[i] = exec_output(s, a->dtype, a->rank, a->dims, &osh, e->devices, e->num_devices, h);
  }
  free(out);
  if (q->has_result_status_handle && q->result_status_handle) {
    future_put(s, q->result_status_handle, PX_OK, NULL, f);
    f = NULL;
    o->has_status_handle = 1;
    o->status_handle = q->result_status_handle;
  }
  loom_future_destroy(f); /* the launch carries on */
  r->response_case = XLA__IFRT__PROXY__IFRT_RESPONSE__RESPONSE_LOADED_EXECUTABLE_EXECUTE_RESPONSE;
  r->loaded_executable_execute_response = o;
  return 0;
}

static int do_disassemble(px_session *s, const Xla__Ifrt__Proxy__DisassembleIntoSingleDeviceArraysRequest *q,
                          Resp *r) {
  int rc = 0;
  parray *a = array_get(s, q->array_handle, &rc);
  if (!a) return rc;
  int32_t n = a->shard < 0 ? loom_array_num_shards(a->b->arr) : 1;
  if (q->n_result_handles && (int32_t)q->n_result_handles != n)
    return fail(s, PX_INVALID_ARGUMENT, "Disassemble: %zu result handles for %d shards", q->n_result_handles, n);
  Xla__Ifrt__Proxy__DisassembleIntoSingleDeviceArraysResponse *o =
      NEW(Xla__Ifrt__Proxy__DisassembleIntoSingleDeviceArraysResponse,
          XLA__IFRT__PROXY__DISASSEMBLE_INTO_SINGLE_DEVICE_ARRAYS_RESPONSE__INIT);
  o->n_array_handles = (size_t)n;
  o->array_handles = ARR(uint64_t, n);
  loom_sharding sh = {.struct_size = sizeof sh};
  if (a->shard < 0) loom_array_sharding(a->b->arr, &sh);
  for (int32_t i = 0; i < n; i++) {
    /* result i is the shard on the i-th device of the client's list (Loom's shards are in
     * tile order, which differs where the mesh axes are transposed) */
    int32_t slot = a->shard >= 0 ? 0 : i < a->nilist ? slot_of(&sh, a->ilist[i]) : -1;
    if (slot < 0) return fail(s, PX_INTERNAL, "Disassemble: the array has no shard on its device %d", i);
    parray *v = array_view(s, a, slot, &rc);
    if (!v) return rc;
    uint64_t h = q->n_result_handles ? q->result_handles[i] : new_handle(s);
    if ((rc = array_add(s, h, v)) != 0) return rc;
    o->array_handles[i] = h;
  }
  r->response_case = XLA__IFRT__PROXY__IFRT_RESPONSE__RESPONSE_DISASSEMBLE_INTO_SINGLE_DEVICE_ARRAYS_RESPONSE;
  r->disassemble_into_single_device_arrays_response = o;
  return 0;
}

static int do_fully_replicated(px_session *s, const Xla__Ifrt__Proxy__FullyReplicatedShardRequest *q, Resp *r) {
  int rc = 0;
  parray *a = array_get(s, q->array_handle, &rc);
  if (!a) return rc;
  if (a->shard < 0) {
    loom_sharding sh = {.struct_size = sizeof sh};
    loom_array_sharding(a->b->arr, &sh);
    for (int32_t d = 0; d < a->rank; d++)
      if (sh.dim_axes[d][0] >= 0)
        return fail(s, PX_INVALID_ARGUMENT, "FullyReplicatedShard: array %" PRIu64 " is split along dimension %d",
                    q->array_handle, d);
  }
  parray *v = array_view(s, a, 0, &rc);
  if (!v) return rc;
  uint64_t h = q->has_result_handle && q->result_handle ? q->result_handle : new_handle(s);
  if ((rc = array_add(s, h, v)) != 0) return rc;
  Xla__Ifrt__Proxy__FullyReplicatedShardResponse *o =
      NEW(Xla__Ifrt__Proxy__FullyReplicatedShardResponse, XLA__IFRT__PROXY__FULLY_REPLICATED_SHARD_RESPONSE__INIT);
  o->has_array_handle = 1;
  o->array_handle = h;
  r->response_case = XLA__IFRT__PROXY__IFRT_RESPONSE__RESPONSE_FULLY_REPLICATED_SHARD_RESPONSE;
  r->fully_replicated_shard_response = o;
  return 0;
}

/* The array's bytes (row-major), fetched from its devices into a new buffer. */
static uint8_t *fetch(px_session *s, parray *a, size_t *n, int *rc) {
  *n = array_bytes(a);
  uint8_t *buf = px_hb_alloc(*n);
  if (!buf) {
    *rc = fail(s, PX_RESOURCE_EXHAUSTED, "cannot allocate %zu bytes", *n);
    return NULL;
  }
  int st = a->shard < 0 ? loom_array_get(a->b->arr, buf, *n) : loom_array_get_shard(a->b->arr, a->shard, buf, *n);
  if (st != LOOM_OK) {
    px_hb_free(buf);
    *rc = loom_fail(s, st, "reading an array");
    return NULL;
  }
  return buf;
}

static int do_copy_to_host(px_session *s, const Xla__Ifrt__Proxy__CopyToHostBufferRequest *q, Resp *r) {
  int rc = 0;
  parray *a = array_get(s, q->array_handle, &rc);
  if (!a) return rc;
  if (!dense_strides(a, q->byte_strides))
    return fail(s, PX_UNIMPLEMENTED, "CopyToHostBuffer: non-row-major byte_strides are not supported by the Loom proxy");
  size_t n;
  uint8_t *buf = fetch(s, a, &n, &rc);
  if (!buf) return rc;
  px_hb_put(s->id, q->host_buffer_handle, buf, n);
  r->response_case = XLA__IFRT__PROXY__IFRT_RESPONSE__RESPONSE_COPY_TO_HOST_BUFFER_RESPONSE;
  r->copy_to_host_buffer_response =
      NEW(Xla__Ifrt__Proxy__CopyToHostBufferResponse, XLA__IFRT__PROXY__COPY_TO_HOST_BUFFER_RESPONSE__INIT);
  return 0;
}

/* GetDefaultLayout: Loom keeps every array dense and row-major, so the layout is the major-to-minor
 * order of its dimensions, serialized as PjRtLayout does (XLA's text form "{2,1,0}"). Answered
 * rather than refused: JAX asks before each call, and logs every refusal. */
static int do_default_layout(px_session *s, const Xla__Ifrt__Proxy__GetDefaultLayoutRequest *q, Resp *r) {
  int k = q->dtype && q->dtype->has_kind ? (int)q->dtype->kind : 0;
  if (dtype_from_ifrt(k) == LOOM_DTYPE_INVALID)
    return fail(s, PX_UNIMPLEMENTED, "GetDefaultLayout: dtype kind %d is not supported by Loom", k);
  if (q->n_dims > LOOM_MAX_RANK)
    return fail(s, PX_UNIMPLEMENTED, "GetDefaultLayout: rank %zu (Loom's limit is %d)", q->n_dims, LOOM_MAX_RANK);
  if (q->memory_kind && q->memory_kind[0] && strcmp(q->memory_kind, "device"))
    return fail(s, PX_UNIMPLEMENTED, "GetDefaultLayout: memory kind \"%s\" (Loom devices have one, \"device\")",
                q->memory_kind);
  char text[4 * LOOM_MAX_RANK + 3];
  size_t n = 0;
  text[n++] = '{';
  for (size_t d = q->n_dims; d-- > 0;) n += (size_t)snprintf(text + n, sizeof text - n, "%zu%s", d, d ? "," : "");
  text[n++] = '}';
  Xla__Ifrt__Proxy__GetDefaultLayoutResponse *o =
      NEW(Xla__Ifrt__Proxy__GetDefaultLayoutResponse, XLA__IFRT__PROXY__GET_DEFAULT_LAYOUT_RESPONSE__INIT);
  o->has_serialized_pjrt_layout = 1;
  o->serialized_pjrt_layout.data = lm_arena_alloc(&s->ar, n);
  memcpy(o->serialized_pjrt_layout.data, text, n);
  o->serialized_pjrt_layout.len = n;
  r->response_case = XLA__IFRT__PROXY__IFRT_RESPONSE__RESPONSE_GET_DEFAULT_LAYOUT_RESPONSE;
  r->get_default_layout_response = o;
  return 0;
}

/* Reads an array type (dtype + shape) into t; *bytes = its dense size. */
static int parse_type(px_session *s, const Xla__Ifrt__DTypeProto *dt, const Xla__Ifrt__ShapeProto *shp, parray *t,
                      size_t *bytes, const char *what) {
  memset(t, 0, sizeof *t);
  t->shard = -1;
  if (!dt || !shp) return fail(s, PX_INVALID_ARGUMENT, "%s without dtype or shape", what);
  t->dtype = dtype_from_ifrt(dt->has_kind ? dt->kind : 0);
  if (t->dtype == LOOM_DTYPE_INVALID)
    return fail(s, PX_UNIMPLEMENTED, "%s: dtype kind %d is not supported by Loom", what, dt->has_kind ? (int)dt->kind : 0);
  if (shp->n_dims > LOOM_MAX_RANK)
    return fail(s, PX_UNIMPLEMENTED, "%s: rank %zu (Loom's limit is %d)", what, shp->n_dims, LOOM_MAX_RANK);
  t->rank = (int32_t)shp->n_dims;
  size_t n = dtype_size(t->dtype);
  for (int32_t i = 0; i < t->rank; i++) {
    t->dims[i] = shp->dims[i];
    if (t->dims[i] < 0 || lm_mul_size(n, (size_t)t->dims[i], &n) < 0)
      return fail(s, PX_INVALID_ARGUMENT, "%s: a bad shape", what);
  }
  *bytes = n;
  return 0;
}

/* The dense row-major bytes of a host buffer laid out with byte strides bs (NULL: dense).
 * A strided buffer holds the minimal byte span of the view. *out is data itself when it is
 * dense already, else a new buffer the caller frees. */
static int densify(px_session *s, const parray *t, const Xla__Ifrt__Proto__ByteStrides *bs, uint8_t *data, size_t len,
                   uint8_t **out, const char *what) {
  size_t bytes = array_bytes(t), es = dtype_size(t->dtype);
  if (dense_strides(t, bs)) {
    if (len != bytes)
      return fail(s, PX_INVALID_ARGUMENT, "%s: the host buffer holds %zu bytes, the array %zu", what, len, bytes);
    *out = data;
    return 0;
  }
  if ((int32_t)bs->n_strides != t->rank)
    return fail(s, PX_INVALID_ARGUMENT, "%s: %zu byte strides for rank %d", what, bs->n_strides, t->rank);
  size_t span = es;
  for (int32_t i = 0; i < t->rank; i++) {
    if (bs->strides[i] < 0) return fail(s, PX_UNIMPLEMENTED, "%s: negative byte strides", what);
    if (t->dims[i] == 0) span = 0;
  }
  if (span) {
    for (int32_t i = 0; i < t->rank; i++) {
      size_t m;
      if (lm_mul_size((size_t)(t->dims[i] - 1), (size_t)bs->strides[i], &m) < 0 || lm_add_size(span, m, &span) < 0)
        return fail(s, PX_INVALID_ARGUMENT, "%s: byte strides overflow", what);
    }
  }
  if (len < span)
    return fail(s, PX_INVALID_ARGUMENT, "%s: the host buffer holds %zu bytes; its strides need %zu", what, len, span);
  uint8_t *d = malloc(bytes ? bytes : 1);
  if (!d) return fail(s, PX_RESOURCE_EXHAUSTED, "%s: cannot allocate %zu bytes", what, bytes);
  int64_t idx[LOOM_MAX_RANK] = {0};
  for (size_t o = 0; o < bytes; o += es) {
    size_t src = 0;
    for (int32_t i = 0; i < t->rank; i++) src += (size_t)idx[i] * (size_t)bs->strides[i];
    memcpy(d + o, data + src, es);
    for (int32_t i = t->rank - 1; i >= 0; i--) {
      if (++idx[i] < t->dims[i]) break;
      idx[i] = 0;
    }
  }
  *out = d;
  return 0;
}

/* Registers a new Loom array under handle h (or a new server handle if h == 0). */
static int add_new_array(px_session *s, const parray *t, loom_array *arr, uint64_t *h, const int32_t *list,
                         int32_t nlist) {
  parray *a = calloc(1, sizeof *a);
  base *b = calloc(1, sizeof *b);
  int32_t *il = dup_ids(list, nlist);
  if (!a || !b || !il) {
    free(a);
    free(b);
    free(il);
    loom_array_release(arr);
    return fail(s, PX_RESOURCE_EXHAUSTED, "out of memory");
  }
  *a = *t;
  a->shard = -1;
  a->ilist = il;
  a->nilist = nlist;
  b->refs = 1;
  b->arr = arr;
  a->b = b;
  if (!*h) *h = new_handle(s);
  return array_add(s, *h, a);
}

static int do_make_array(px_session *s, const Xla__Ifrt__Proxy__MakeArrayFromHostBufferRequest *q, Resp *r) {
  const char *what = "MakeArrayFromHostBuffer";
  parray t;
  size_t want;
  int rc = parse_type(s, q->dtype, q->shape, &t, &want, what);
  if (rc) return rc;
  int32_t *dv = malloc(sizeof(int32_t) * 8192), nlist;
  if (!dv) return fail(s, PX_RESOURCE_EXHAUSTED, "out of memory");
  loom_sharding sh;
  rc = sharding_from_proto(s, q->sharding, t.rank, &sh, dv, 4096, dv + 4096, &nlist);
  uint8_t *data = NULL, *dense = NULL;
  size_t len = 0;
  if (!rc && px_hb_take(s->id, q->host_buffer_handle, s->opts->host_buffer_wait_ms, &data, &len) < 0)
    rc = fail(s, PX_DEADLINE_EXCEEDED, "%s: host buffer %" PRIu64 " did not arrive within %lld ms", what,
              q->host_buffer_handle, (long long)s->opts->host_buffer_wait_ms);
  if (!rc) rc = densify(s, &t, q->byte_strides, data, len, &dense, what);
  loom_array *arr = NULL;
  if (!rc) {
    int st = put_array(s, t.dtype, t.rank, t.dims, &sh, dense, want, NULL, &arr);
    if (st != LOOM_OK) rc = loom_fail(s, st, what);
  }
  if (dense != data) free(dense);
  px_hb_free(data);
  uint64_t h = q->has_array_handle ? q->array_handle : 0;
  if (!rc) rc = add_new_array(s, &t, arr, &h, dv + 4096, nlist);
  free(dv);
  if (rc) return rc;
  Xla__Ifrt__Proxy__MakeArrayFromHostBufferResponse *o = NEW(Xla__Ifrt__Proxy__MakeArrayFromHostBufferResponse,
                                                             XLA__IFRT__PROXY__MAKE_ARRAY_FROM_HOST_BUFFER_RESPONSE__INIT);
  o->has_array_handle = 1;
  o->array_handle = h;
  r->response_case = XLA__IFRT__PROXY__IFRT_RESPONSE__RESPONSE_MAKE_ARRAY_FROM_HOST_BUFFER_RESPONSE;
  r->make_array_from_host_buffer_response = o;
  return 0;
}

/* One array of MakeArraysFromHostBufferShards: host buffer j goes to the shards whose indices
 * (positions in the sharding's device list) addressable_shard_indices[j] names. */
static int make_one_from_shards(px_session *s,
                                const Xla__Ifrt__Proxy__MakeArraysFromHostBufferShardsRequest__MakeArraysFromHostBufferShardsSpec *sp,
                                uint64_t *h) {
  const char *what = "MakeArraysFromHostBufferShards";
  if (!sp->array_spec) return fail(s, PX_INVALID_ARGUMENT, "%s: a spec without array_spec", what);
  if (sp->n_host_buffers != sp->n_addressable_shard_indices)
    return fail(s, PX_INVALID_ARGUMENT, "%s: %zu host buffers for %zu shard index lists", what, sp->n_host_buffers,
                sp->n_addressable_shard_indices);
  parray t;
  size_t want;
  int rc = parse_type(s, sp->array_spec->dtype, sp->array_spec->shape, &t, &want, what);
  if (rc) return rc;
  int32_t *dv = malloc(sizeof(int32_t) * 8192), nlist = 0;
  const void **shard = calloc(4096, sizeof *shard);
  uint8_t **bufs = calloc(sp->n_host_buffers + 1, sizeof *bufs), **raw = calloc(sp->n_host_buffers + 1, sizeof *raw);
  loom_sharding sh;
  loom_sharding_initialize(&sh);
  if (!dv || !shard || !bufs || !raw) rc = fail(s, PX_RESOURCE_EXHAUSTED, "out of memory");
  if (!rc) rc = sharding_from_proto(s, sp->array_spec->sharding, t.rank, &sh, dv, 4096, dv + 4096, &nlist);
  for (size_t j = 0; j < sp->n_host_buffers && !rc; j++) {
    const Xla__Ifrt__Proxy__MakeArraysFromHostBufferShardsRequest__HostBuffer *hb = sp->host_buffers[j];
    parray st;
    size_t sbytes, len = 0;
    rc = parse_type(s, hb->dtype ? hb->dtype : sp->array_spec->dtype, hb->shape, &st, &sbytes, what);
    if (rc) break;
    if (px_hb_take(s->id, hb->host_buffer_handle, s->opts->host_buffer_wait_ms, &raw[j], &len) < 0) {
      rc = fail(s, PX_DEADLINE_EXCEEDED, "%s: host buffer %" PRIu64 " did not arrive within %lld ms", what,
                hb->host_buffer_handle, (long long)s->opts->host_buffer_wait_ms);
      break;
    }
    if ((rc = densify(s, &st, hb->byte_strides, raw[j], len, &bufs[j], what)) != 0) break;
    const Xla__Ifrt__Proxy__MakeArraysFromHostBufferShardsRequest__ShardIndices *ix = sp->addressable_shard_indices[j];
    for (size_t k = 0; k < ix->n_indices && !rc; k++) {
      int64_t i = ix->indices[k];
      if (i < 0 || i >= nlist) {
        rc = fail(s, PX_INVALID_ARGUMENT, "%s: shard index %" PRId64 " of %d devices", what, i, nlist);
        break;
      }
      int32_t slot = 0; /* the Loom shard held by that device */
      while (slot < sh.num_devices && sh.devices[slot] != dv[4096 + i]) slot++;
      if (slot == sh.num_devices) rc = fail(s, PX_INTERNAL, "%s: device %d is not in the sharding", what, dv[4096 + i]);
      else shard[slot] = bufs[j];
    }
  }
  for (int32_t k = 0; k < sh.num_devices && !rc; k++)
    if (!shard[k]) rc = fail(s, PX_UNIMPLEMENTED, "%s: no data for shard %d (every shard must be given)", what, k);
  loom_array *arr = NULL;
  if (!rc) {
    int st = put_array(s, t.dtype, t.rank, t.dims, &sh, NULL, 0, shard, &arr);
    if (st != LOOM_OK) rc = loom_fail(s, st, what);
  }
  for (size_t j = 0; bufs && raw && j < sp->n_host_buffers; j++) {
    if (bufs[j] != raw[j]) free(bufs[j]);
    px_hb_free(raw[j]);
  }
  free(bufs);
  free(raw);
  free(shard);
  if (!rc) rc = add_new_array(s, &t, arr, h, dv + 4096, nlist);
  free(dv);
  return rc;
}

static int do_make_arrays_shards(px_session *s, const Xla__Ifrt__Proxy__MakeArraysFromHostBufferShardsRequest *q,
                                 Resp *r) {
  if (q->n_array_handles && q->n_array_handles != q->n_specs)
    return fail(s, PX_INVALID_ARGUMENT, "MakeArraysFromHostBufferShards: %zu handles for %zu arrays", q->n_array_handles,
                q->n_specs);
  Xla__Ifrt__Proxy__MakeArraysFromHostBufferShardsResponse *o =
      NEW(Xla__Ifrt__Proxy__MakeArraysFromHostBufferShardsResponse,
          XLA__IFRT__PROXY__MAKE_ARRAYS_FROM_HOST_BUFFER_SHARDS_RESPONSE__INIT);
  o->n_array_handles = q->n_specs;
  o->array_handles = ARR(uint64_t, q->n_specs);
  for (size_t i = 0; i < q->n_specs; i++) {
    uint64_t h = q->n_array_handles ? q->array_handles[i] : 0;
    int rc = make_one_from_shards(s, q->specs[i], &h);
    if (rc) return rc;
    o->array_handles[i] = h;
  }
  r->response_case = XLA__IFRT__PROXY__IFRT_RESPONSE__RESPONSE_MAKE_ARRAYS_FROM_HOST_BUFFER_SHARDS_RESPONSE;
  r->make_arrays_from_host_buffer_shards_response = o;
  return 0;
}

/* CopyArrays: each array onto other devices (device_ids[i] takes the place of the array's i-th
 * device). The data passes through the proxy (get, then put). */
static int do_copy_arrays(px_session *s, const Xla__Ifrt__Proxy__CopyArraysRequest *q, Resp *r) {
  if (q->memory_kind && q->memory_kind[0] && strcmp(q->memory_kind, "device"))
    return fail(s, PX_UNIMPLEMENTED, "CopyArrays: memory kind \"%s\" (Loom devices have one, \"device\")",
                q->memory_kind);
  if (q->n_result_handles && q->n_result_handles != q->n_array_handles)
    return fail(s, PX_INVALID_ARGUMENT, "CopyArrays: %zu result handles for %zu arrays", q->n_result_handles,
                q->n_array_handles);
  Xla__Ifrt__Proxy__CopyArraysResponse *o = NEW(Xla__Ifrt__Proxy__CopyArraysResponse, XLA__IFRT__PROXY__COPY_ARRAYS_RESPONSE__INIT);
  o->n_array_handles = q->n_array_handles;
  o->array_handles = ARR(uint64_t, q->n_array_handles);
  int32_t nd = (int32_t)q->n_device_ids;
  for (size_t i = 0; i < q->n_array_handles; i++) {
    int rc = 0;
    parray *a = array_get(s, q->array_handles[i], &rc);
    if (!a) return rc;
    if (nd != a->nilist)
      return fail(s, PX_INVALID_ARGUMENT, "CopyArrays: %d devices for an array on %d", nd, a->nilist);
    int32_t *newdevs = malloc(sizeof(int32_t) * 4096);
    if (!newdevs) return fail(s, PX_RESOURCE_EXHAUSTED, "out of memory");
    loom_sharding sh = {.struct_size = sizeof sh};
    if (a->shard >= 0) {
      loom_sharding_single(&sh, q->device_ids);
    } else {
      loom_array_sharding(a->b->arr, &sh);
      for (int32_t k = 0; k < sh.num_devices && !rc; k++) {
        int32_t j = 0;
        while (j < a->nilist && a->ilist[j] != sh.devices[k]) j++;
        if (j == a->nilist) rc = fail(s, PX_INTERNAL, "CopyArrays: device %d is not in the array's list", sh.devices[k]);
        else newdevs[k] = q->device_ids[j];
      }
      sh.devices = newdevs;
    }
    size_t n = 0;
    uint8_t *buf = rc ? NULL : fetch(s, a, &n, &rc);
    loom_array *arr = NULL;
    if (!rc) {
      int st = put_array(s, a->dtype, a->rank, a->dims, &sh, buf, n, NULL, &arr);
      if (st != LOOM_OK) rc = loom_fail(s, st, "CopyArrays");
    }
    px_hb_free(buf);
    free(newdevs);
    if (rc) return rc;
    uint64_t h = q->n_result_handles ? q->result_handles[i] : 0;
    parray t = *a;
    t.b = NULL;
    t.ilist = NULL;
    t.deleted = false;
    if ((rc = add_new_array(s, &t, arr, &h, q->device_ids, nd)) != 0) return rc;
    o->array_handles[i] = h;
  }
  r->response_case = XLA__IFRT__PROXY__IFRT_RESPONSE__RESPONSE_COPY_ARRAYS_RESPONSE;
  r->copy_arrays_response = o;
  return 0;
}

/* AssembleArrayFromSingleDeviceArrays: one array from a shard per device of the sharding. The
 * shards pass through the proxy (get, then put). */
static int do_assemble(px_session *s, const Xla__Ifrt__Proxy__AssembleArrayFromSingleDeviceArraysRequest *q,
                       Resp *r) {
  const char *what = "AssembleArrayFromSingleDeviceArrays";
  size_t na = q->n_single_device_array_handles;
  if (na == 0) return fail(s, PX_INVALID_ARGUMENT, "%s with no arrays", what);
  int rc = 0;
  parray *first = array_get(s, q->single_device_array_handles[0], &rc);
  if (!first) return rc;
  parray t;
  size_t want;
  Xla__Ifrt__DTypeProto dt = XLA__IFRT__DTYPE_PROTO__INIT;
  dt.has_kind = 1;
  dt.kind = (Xla__Ifrt__DTypeProto__Kind)dtype_to_ifrt(first->dtype);
  if ((rc = parse_type(s, q->dtype ? q->dtype : &dt, q->shape, &t, &want, what)) != 0) return rc;
  int32_t *dv = malloc(sizeof(int32_t) * 8192), nlist = 0;
  const void **shard = calloc(4096, sizeof *shard);
  uint8_t **bufs = calloc(na, sizeof *bufs);
  loom_sharding sh;
  loom_sharding_initialize(&sh);
  if (!dv || !shard || !bufs) rc = fail(s, PX_RESOURCE_EXHAUSTED, "out of memory");
  if (!rc) rc = sharding_from_proto(s, q->sharding, t.rank, &sh, dv, 4096, dv + 4096, &nlist);
  for (int32_t k = 0; k < sh.num_devices && !rc; k++) {
    size_t i = 0;
    parray *a = NULL;
    for (; i < na && !rc; i++) {
      a = array_get(s, q->single_device_array_handles[i], &rc);
      if (a && array_device(a) == sh.devices[k]) break;
    }
    if (rc) break;
    if (i == na) {
      rc = fail(s, PX_UNIMPLEMENTED, "%s: no array on device %d (every shard must be given)", what, sh.devices[k]);
      break;
    }
    /* the shard's shape: each dimension divided by the mesh axes that split it */
    int64_t sd[LOOM_MAX_RANK];
    for (int32_t d = 0; d < t.rank; d++) {
      int64_t parts = 1;
      for (int j = 0; j < LOOM_MAX_MESH_AXES && sh.dim_axes[d][j] >= 0; j++) parts *= sh.mesh_shape[sh.dim_axes[d][j]];
      sd[d] = t.dims[d] / parts;
    }
    if (a->dtype != t.dtype || a->rank != t.rank || memcmp(a->dims, sd, sizeof(int64_t) * (size_t)t.rank)) {
      rc = fail(s, PX_INVALID_ARGUMENT, "%s: array %zu does not have the shard's dtype and shape", what, i);
      break;
    }
    if (!bufs[i]) {
      size_t n;
      bufs[i] = fetch(s, a, &n, &rc);
    }
    shard[k] = bufs[i];
  }
  loom_array *arr = NULL;
  if (!rc) {
    int st = put_array(s, t.dtype, t.rank, t.dims, &sh, NULL, 0, shard, &arr);
    if (st != LOOM_OK) rc = loom_fail(s, st, what);
  }
  for (size_t i = 0; bufs && i < na; i++) px_hb_free(bufs[i]);
  free(bufs);
  free(shard);
  uint64_t h = q->has_result_handle ? q->result_handle : 0;
  if (!rc) rc = add_new_array(s, &t, arr, &h, dv + 4096, nlist);
  free(dv);
  if (rc) return rc;
  Xla__Ifrt__Proxy__AssembleArrayFromSingleDeviceArraysResponse *o =
      NEW(Xla__Ifrt__Proxy__AssembleArrayFromSingleDeviceArraysResponse,
          XLA__IFRT__PROXY__ASSEMBLE_ARRAY_FROM_SINGLE_DEVICE_ARRAYS_RESPONSE__INIT);
  o->has_array_handle = 1;
  o->array_handle = h;
  r->response_case = XLA__IFRT__PROXY__IFRT_RESPONSE__RESPONSE_ASSEMBLE_ARRAY_FROM_SINGLE_DEVICE_ARRAYS_RESPONSE;
  r->assemble_array_from_single_device_arrays_response = o;
  return 0;
}

/* ---- arrays remade under a new spec: ReshardArrays, BitcastArrays, RemapArrays, MakeErrorArrays ---- */

/* With DONATE_INPUT the input is gone once its successor exists (as DeleteArray leaves it). */
static void donate_input(parray *a, int sem) {
  if (sem == XLA__IFRT__PROTO__ARRAY_COPY_SEMANTICS__ARRAY_COPY_SEMANTICS_DONATE_INPUT) parray_delete(a);
}

/* A new array under spec holding bytes[0..n) (the whole array, row-major); *h: the handle. */
static int put_under_spec(px_session *s, const Xla__Ifrt__ArraySpecProto *spec, const parray *like,
                          const uint8_t *bytes, size_t n, bool same_type, uint64_t *h, const char *what) {
  parray t;
  size_t want;
  int rc = parse_type(s, spec->dtype, spec->shape, &t, &want, what);
  if (rc) return rc;
  if (same_type && (t.dtype != like->dtype || t.rank != like->rank ||
                    memcmp(t.dims, like->dims, sizeof(int64_t) * (size_t)t.rank)))
    return fail(s, PX_INVALID_ARGUMENT, "%s: the new spec changes the array's dtype or shape", what);
  if (want != n)
    return fail(s, PX_INVALID_ARGUMENT, "%s: the new spec holds %zu bytes, the array %zu", what, want, n);
  int32_t *dv = malloc(sizeof(int32_t) * 8192), nlist = 0;
  if (!dv) return fail(s, PX_RESOURCE_EXHAUSTED, "out of memory");
  loom_sharding sh;
  rc = sharding_from_proto(s, spec->sharding, t.rank, &sh, dv, 4096, dv + 4096, &nlist);
  loom_array *arr = NULL;
  if (!rc) {
    int st = put_array(s, t.dtype, t.rank, t.dims, &sh, bytes, n, NULL, &arr);
    if (st != LOOM_OK) rc = loom_fail(s, st, what);
  }
  if (!rc) rc = add_new_array(s, &t, arr, h, dv + 4096, nlist);
  free(dv);
  return rc;
}

/* ReshardArrays (pathwaysutils.reshard) and BitcastArrays: each array's values under a new spec,
 * same dtype and shape (reshard) or the same bytes reinterpreted (bitcast). The data passes
 * through the proxy (get, then put). */
static int remake_arrays(px_session *s, const uint64_t *in, size_t n_in, Xla__Ifrt__ArraySpecProto *const *specs,
                         size_t n_specs, const uint64_t *res, size_t n_res, int sem, bool same_type,
                         uint64_t **out, const char *what) {
  if (n_specs != n_in || (n_res && n_res != n_in))
    return fail(s, PX_INVALID_ARGUMENT, "%s: %zu arrays, %zu specs, %zu result handles", what, n_in, n_specs, n_res);
  *out = ARR(uint64_t, n_in ? n_in : 1);
  for (size_t i = 0; i < n_in; i++) {
    int rc = 0;
    parray *a = array_get(s, in[i], &rc);
    if (!a) return rc;
    if (!specs[i]) return fail(s, PX_INVALID_ARGUMENT, "%s: array %zu has no spec", what, i);
    size_t n = 0;
    uint8_t *buf = fetch(s, a, &n, &rc);
    if (!buf) return rc;
    uint64_t h = n_res ? res[i] : 0;
    rc = put_under_spec(s, specs[i], a, buf, n, same_type, &h, what);
    px_hb_free(buf);
    if (rc) return rc;
    donate_input(a, sem);
    (*out)[i] = h;
  }
  return 0;
}

/* The bytes of a shard of a Loom array under sharding sh with global dims (each dim split
 * evenly over its mesh axes). */
static size_t shard_bytes(const loom_sharding *sh, loom_dtype dt, int32_t rank, const int64_t *dims) {
  size_t n = dtype_size(dt);
  for (int32_t d = 0; d < rank; d++) {
    int64_t parts = 1;
    for (int k = 0; k < LOOM_MAX_MESH_AXES && sh->dim_axes[d][k] >= 0; k++) parts *= sh->mesh_shape[sh->dim_axes[d][k]];
    n *= (size_t)(dims[d] / (parts ? parts : 1));
  }
  return n;
}

typedef struct remap_out {
  parray t;
  loom_sharding sh;
  int32_t *dv;        /* [8192]: the sharding's devices, then the IFRT list (dv + 4096) */
  int32_t nlist;
  size_t sbytes;      /* bytes of each of its shards */
  uint8_t **shard;    /* [num_devices]: the data of Loom shard slot k */
} remap_out;

/* RemapArrays (pathwaysutils' split_by_mesh_axis / concatenate_by_mesh_axis): output arrays made
 * of the input arrays' shards, moved whole between arrays. Mapping m takes the shards at IFRT
 * list positions from_start:from_end:from_step of input in_array to positions
 * to_start:to_end:to_step of output out_array (one or more such intervals each, paired in
 * order). Every output shard must be given, by a shard of the same size on the same device. The
 * shards pass through the proxy (get, then put). */
static int do_remap(px_session *s, const Xla__Ifrt__Proxy__RemapArraysRequest *q, Resp *r) {
  const char *what = "RemapArrays";
  const Xla__Ifrt__RemapPlanProto *p = q->plan;
  if (!p) return fail(s, PX_INVALID_ARGUMENT, "%s without a plan", what);
  if (p->n_input_specs != q->n_array_handles)
    return fail(s, PX_INVALID_ARGUMENT, "%s: the plan takes %zu arrays, %zu given", what, p->n_input_specs,
                q->n_array_handles);
  if (q->n_result_handles && q->n_result_handles != p->n_output_specs)
    return fail(s, PX_INVALID_ARGUMENT, "%s: %zu result handles for %zu outputs", what, q->n_result_handles,
                p->n_output_specs);
  if (p->n_output_specs == 0 || p->n_output_specs > 4096)
    return fail(s, PX_INVALID_ARGUMENT, "%s: %zu outputs", what, p->n_output_specs);
  int rc = 0;
  size_t no = p->n_output_specs;
  remap_out *os = calloc(no, sizeof *os);
  if (!os) return fail(s, PX_RESOURCE_EXHAUSTED, "out of memory");
  for (size_t m = 0; m < no && !rc; m++) {
    remap_out *o = &os[m];
    size_t want;
    if (!p->output_specs[m]) rc = fail(s, PX_INVALID_ARGUMENT, "%s: output %zu has no spec", what, m);
    if (!rc) rc = parse_type(s, p->output_specs[m]->dtype, p->output_specs[m]->shape, &o->t, &want, what);
    if (!rc && !(o->dv = malloc(sizeof(int32_t) * 8192))) rc = fail(s, PX_RESOURCE_EXHAUSTED, "out of memory");
    if (!rc) rc = sharding_from_proto(s, p->output_specs[m]->sharding, o->t.rank, &o->sh, o->dv, 4096, o->dv + 4096,
                                      &o->nlist);
    if (!rc && !(o->shard = calloc((size_t)o->sh.num_devices, sizeof *o->shard)))
      rc = fail(s, PX_RESOURCE_EXHAUSTED, "out of memory");
    if (!rc) o->sbytes = shard_bytes(&o->sh, o->t.dtype, o->t.rank, o->t.dims);
  }
  for (size_t k = 0; k < p->n_mappings && !rc; k++) {
    const Xla__Ifrt__RemapPlanProto__MappingProto *mp = p->mappings[k];
    if (mp->in_array < 0 || (size_t)mp->in_array >= q->n_array_handles || mp->out_array < 0 ||
        (size_t)mp->out_array >= no) {
      rc = fail(s, PX_INVALID_ARGUMENT, "%s: mapping %zu names input %d, output %d", what, k, mp->in_array,
                mp->out_array);
      break;
    }
    size_t ni = mp->n_from_start;
    if (mp->n_from_end != ni || mp->n_from_step != ni || mp->n_to_start != ni || mp->n_to_end != ni ||
        mp->n_to_step != ni) {
      rc = fail(s, PX_INVALID_ARGUMENT, "%s: mapping %zu has intervals of unequal counts", what, k);
      break;
    }
    parray *a = array_get(s, q->array_handles[mp->in_array], &rc);
    if (!a) break;
    remap_out *o = &os[mp->out_array];
    loom_sharding ish = {.struct_size = sizeof ish};
    if (a->shard < 0) loom_array_sharding(a->b->arr, &ish);
    for (size_t iv = 0; iv < ni && !rc; iv++) {
      int64_t f = mp->from_start[iv], fe = mp->from_end[iv], fs = mp->from_step[iv];
      int64_t t = mp->to_start[iv], te = mp->to_end[iv], ts = mp->to_step[iv];
      if (fs < 1 || ts < 1 || f < 0 || t < 0 || fe > a->nilist || te > o->nlist) {
        rc = fail(s, PX_INVALID_ARGUMENT, "%s: mapping %zu interval %zu is out of range", what, k, iv);
        break;
      }
      for (; f < fe && t < te && !rc; f += fs, t += ts) {
        int32_t dev = a->ilist[f], oslot = slot_of(&o->sh, o->dv[4096 + t]);
        if (dev != o->dv[4096 + t] || oslot < 0) {
          rc = fail(s, PX_INVALID_ARGUMENT, "%s: shard %" PRId64 " of input %d is on device %d, output %d's shard %"
                    PRId64 " on device %d (remapping moves no data between devices)", what, f, mp->in_array, dev,
                    mp->out_array, t, o->dv[4096 + t]);
          break;
        }
        int32_t islot = a->shard < 0 ? slot_of(&ish, dev) : a->shard;
        loom_shard_desc d = {.struct_size = sizeof d};
        if (islot < 0 || loom_array_shard_info(a->b->arr, islot, &d) != LOOM_OK) {
          rc = fail(s, PX_INTERNAL, "%s: input %d has no shard on device %d", what, mp->in_array, dev);
          break;
        }
        size_t nb = dtype_size(a->dtype);
        for (int32_t j = 0; j < d.rank; j++) nb *= (size_t)d.dims[j];
        if (a->dtype != o->t.dtype || nb != o->sbytes) {
          rc = fail(s, PX_INVALID_ARGUMENT, "%s: a %zu-byte shard of input %d cannot be a %zu-byte shard of output %d",
                    what, nb, mp->in_array, o->sbytes, mp->out_array);
          break;
        }
        if (o->shard[oslot]) continue; /* given twice: the first one stands */
        if (!(o->shard[oslot] = malloc(nb ? nb : 1))) {
          rc = fail(s, PX_RESOURCE_EXHAUSTED, "out of memory");
          break;
        }
        int st = loom_array_get_shard(a->b->arr, islot, o->shard[oslot], nb);
        if (st != LOOM_OK) rc = loom_fail(s, st, what);
      }
      if (!rc && (f < fe) != (t < te))
        rc = fail(s, PX_INVALID_ARGUMENT, "%s: mapping %zu interval %zu pairs intervals of unequal lengths", what, k, iv);
    }
  }
  Xla__Ifrt__Proxy__RemapArraysResponse *resp = NULL;
  if (!rc) {
    resp = NEW(Xla__Ifrt__Proxy__RemapArraysResponse, XLA__IFRT__PROXY__REMAP_ARRAYS_RESPONSE__INIT);
    resp->n_array_handles = no;
    resp->array_handles = ARR(uint64_t, no);
  }
  for (size_t m = 0; m < no && !rc; m++) {
    remap_out *o = &os[m];
    for (int32_t k = 0; k < o->sh.num_devices && !rc; k++)
      if (!o->shard[k]) rc = fail(s, PX_INVALID_ARGUMENT, "%s: no shard is mapped to device %d of output %zu", what,
                                  o->sh.devices[k], m);
    loom_array *arr = NULL;
    if (!rc) {
      int st = put_array(s, o->t.dtype, o->t.rank, o->t.dims, &o->sh, NULL, 0, (const void *const *)o->shard, &arr);
      if (st != LOOM_OK) rc = loom_fail(s, st, what);
    }
    uint64_t h = q->n_result_handles ? q->result_handles[m] : 0;
    if (!rc) rc = add_new_array(s, &o->t, arr, &h, o->dv + 4096, o->nlist);
    if (!rc) resp->array_handles[m] = h;
  }
  for (size_t m = 0; m < no; m++) {
    for (int32_t k = 0; os[m].shard && k < os[m].sh.num_devices; k++) free(os[m].shard[k]);
    free(os[m].shard);
    free(os[m].dv);
  }
  free(os);
  if (rc) return rc;
  for (size_t i = 0; i < q->n_array_handles; i++) {
    parray *a = pm_get(&s->arrays, q->array_handles[i]);
    if (a) donate_input(a, q->copy_semantics);
  }
  r->response_case = XLA__IFRT__PROXY__IFRT_RESPONSE__RESPONSE_REMAP_ARRAYS_RESPONSE;
  r->remap_arrays_response = resp;
  return 0;
}

/* MakeErrorArrays: arrays whose every use fails with the given error. */
static int do_make_error_arrays(px_session *s, const Xla__Ifrt__Proxy__MakeErrorArraysRequest *q, Resp *r) {
  if (q->n_array_handles && q->n_array_handles != q->n_array_specs)
    return fail(s, PX_INVALID_ARGUMENT, "MakeErrorArrays: %zu handles for %zu specs", q->n_array_handles,
                q->n_array_specs);
  int code = q->error && q->error->has_code && q->error->code != 0 ? (int)q->error->code : PX_UNKNOWN;
  const char *msg = q->error && q->error->message ? q->error->message : "an error array (MakeErrorArrays)";
  Xla__Ifrt__Proxy__MakeErrorArraysResponse *o =
      NEW(Xla__Ifrt__Proxy__MakeErrorArraysResponse, XLA__IFRT__PROXY__MAKE_ERROR_ARRAYS_RESPONSE__INIT);
  o->n_array_handles = q->n_array_specs;
  o->array_handles = ARR(uint64_t, q->n_array_specs ? q->n_array_specs : 1);
  for (size_t i = 0; i < q->n_array_specs; i++) {
    parray *a = calloc(1, sizeof *a);
    if (!a || !(a->errmsg = strdup(msg))) {
      free(a);
      return fail(s, PX_RESOURCE_EXHAUSTED, "out of memory");
    }
    a->err = code;
    a->shard = -1;
    uint64_t h = q->n_array_handles ? q->array_handles[i] : new_handle(s);
    int rc = array_add(s, h, a);
    if (rc) return rc;
    o->array_handles[i] = h;
  }
  r->response_case = XLA__IFRT__PROXY__IFRT_RESPONSE__RESPONSE_MAKE_ERROR_ARRAYS_RESPONSE;
  r->make_error_arrays_response = o;
  return 0;
}

/* GetDefaultDeviceAssignment: devices 0.. in order, replica-major (replica r, partition p ->
 * device r * num_partitions + p). */
static int do_default_assignment(px_session *s, const Xla__Ifrt__Proxy__GetDefaultDeviceAssignmentRequest *q,
                                 Resp *r) {
  int32_t n = 0;
  loom_device_count(s->client, &n);
  uint64_t nr = q->has_num_replicas ? q->num_replicas : 1, np = q->has_num_partitions ? q->num_partitions : 1;
  if (nr < 1 || np < 1 || nr > (uint64_t)n || np > (uint64_t)n || nr * np > (uint64_t)n)
    return fail(s, PX_INVALID_ARGUMENT, "GetDefaultDeviceAssignment: %llu replicas x %llu partitions on %d devices",
                (unsigned long long)nr, (unsigned long long)np, n);
  Xla__DeviceAssignmentProto *da = NEW(Xla__DeviceAssignmentProto, XLA__DEVICE_ASSIGNMENT_PROTO__INIT);
  da->has_replica_count = da->has_computation_count = 1;
  da->replica_count = (int32_t)nr;
  da->computation_count = (int32_t)np;
  da->n_computation_devices = (size_t)np;
  da->computation_devices = ARR(Xla__DeviceAssignmentProto__ComputationDevice *, np);
  for (uint64_t p = 0; p < np; p++) {
    Xla__DeviceAssignmentProto__ComputationDevice *cd =
        NEW(Xla__DeviceAssignmentProto__ComputationDevice, XLA__DEVICE_ASSIGNMENT_PROTO__COMPUTATION_DEVICE__INIT);
    cd->n_replica_device_ids = (size_t)nr;
    cd->replica_device_ids = ARR(int64_t, nr);
    for (uint64_t rr = 0; rr < nr; rr++) cd->replica_device_ids[rr] = (int64_t)(rr * np + p);
    da->computation_devices[p] = cd;
  }
  Xla__Ifrt__Proxy__GetDefaultDeviceAssignmentResponse *o = NEW(Xla__Ifrt__Proxy__GetDefaultDeviceAssignmentResponse,
                                                                XLA__IFRT__PROXY__GET_DEFAULT_DEVICE_ASSIGNMENT_RESPONSE__INIT);
  o->device_assignment = da;
  r->response_case = XLA__IFRT__PROXY__IFRT_RESPONSE__RESPONSE_GET_DEFAULT_DEVICE_ASSIGNMENT_RESPONSE;
  r->get_default_device_assignment_response = o;
  return 0;
}

/* The request's oneof field name ("compile_request"), for messages. */
static const char *request_name(const Req *q) {
  const ProtobufCFieldDescriptor *f =
      protobuf_c_message_descriptor_get_field(&xla__ifrt__proxy__ifrt_request__descriptor, (unsigned)q->request_case);
  return f ? f->name : "an unknown request";
}

/* Fills r for q; returns 0 or a gRPC code with s->err set. */
static int handle(px_session *s, const Req *q, Resp *r) {
  switch (q->request_case) {
  case XLA__IFRT__PROXY__IFRT_REQUEST__REQUEST_INIT_REQUEST: return do_init(s, r);
  case XLA__IFRT__PROXY__IFRT_REQUEST__REQUEST_COMPILE_REQUEST: return do_compile(s, q->compile_request, r);
  case XLA__IFRT__PROXY__IFRT_REQUEST__REQUEST_LOADED_EXECUTABLE_METADATA_REQUEST:
    return do_metadata(s, q->loaded_executable_metadata_request, r);
  case XLA__IFRT__PROXY__IFRT_REQUEST__REQUEST_LOADED_EXECUTABLE_EXECUTE_REQUEST:
    return do_execute(s, q->loaded_executable_execute_request, r);
  case XLA__IFRT__PROXY__IFRT_REQUEST__REQUEST_DISASSEMBLE_INTO_SINGLE_DEVICE_ARRAYS_REQUEST:
    return do_disassemble(s, q->disassemble_into_single_device_arrays_request, r);
  case XLA__IFRT__PROXY__IFRT_REQUEST__REQUEST_FULLY_REPLICATED_SHARD_REQUEST:
    return do_fully_replicated(s, q->fully_replicated_shard_request, r);
  case XLA__IFRT__PROXY__IFRT_REQUEST__REQUEST_COPY_TO_HOST_BUFFER_REQUEST:
    return do_copy_to_host(s, q->copy_to_host_buffer_request, r);
  case XLA__IFRT__PROXY__IFRT_REQUEST__REQUEST_MAKE_ARRAY_FROM_HOST_BUFFER_REQUEST:
    return do_make_array(s, q->make_array_from_host_buffer_request, r);
  case XLA__IFRT__PROXY__IFRT_REQUEST__REQUEST_GET_DEFAULT_DEVICE_ASSIGNMENT_REQUEST:
    return do_default_assignment(s, q->get_default_device_assignment_request, r);
  case XLA__IFRT__PROXY__IFRT_REQUEST__REQUEST_COPY_ARRAYS_REQUEST: return do_copy_arrays(s, q->copy_arrays_request, r);
  case XLA__IFRT__PROXY__IFRT_REQUEST__REQUEST_ASSEMBLE_ARRAY_FROM_SINGLE_DEVICE_ARRAYS_REQUEST:
    return do_assemble(s, q->assemble_array_from_single_device_arrays_request, r);
  case XLA__IFRT__PROXY__IFRT_REQUEST__REQUEST_MAKE_ARRAYS_FROM_HOST_BUFFER_SHARDS_REQUEST:
    return do_make_arrays_shards(s, q->make_arrays_from_host_buffer_shards_request, r);
  case XLA__IFRT__PROXY__IFRT_REQUEST__REQUEST_CHECK_FUTURE_REQUEST: {
    uint64_t h = q->check_future_request->future_handle;
    pfuture *f = pm_get(&s->futures, h); /* kept: a future may be checked again (freed with the session) */
    if (!f) return fail(s, PX_NOT_FOUND, "future handle %" PRIu64 " is not known in session %" PRIu64, h, s->id);
    if (future_code(f)) return fail(s, f->code, "%s", f->msg ? f->msg : "failed");
    r->response_case = XLA__IFRT__PROXY__IFRT_RESPONSE__RESPONSE_CHECK_FUTURE_RESPONSE;
    r->check_future_response = NEW(Xla__Ifrt__Proxy__CheckFutureResponse, XLA__IFRT__PROXY__CHECK_FUTURE_RESPONSE__INIT);
    return 0;
  }
  case XLA__IFRT__PROXY__IFRT_REQUEST__REQUEST_CHECK_VALUE_READY_REQUEST: {
    /* Arrays are ready when the launch that makes them finished (or failed: its error). */
    const Xla__Ifrt__Proxy__CheckValueReadyRequest *cv = q->check_value_ready_request;
    for (size_t i = 0; i < cv->n_value_handles; i++) {
      parray *a = pm_get(&s->arrays, cv->value_handles[i]);
      if (a && a->err) return fail(s, a->err, "%s", a->errmsg ? a->errmsg : "the array's producer failed");
      if (!a || a->deleted || !a->b) continue; /* not an array of ours (futures are always ready) */
      int st = loom_array_block_until_ready(a->b->arr, -1);
      if (st != LOOM_OK) return loom_fail(s, st, "the value is not ready");
    }
    r->response_case = XLA__IFRT__PROXY__IFRT_RESPONSE__RESPONSE_CHECK_VALUE_READY_RESPONSE;
    r->check_value_ready_response =
        NEW(Xla__Ifrt__Proxy__CheckValueReadyResponse, XLA__IFRT__PROXY__CHECK_VALUE_READY_RESPONSE__INIT);
    return 0;
  }
  case XLA__IFRT__PROXY__IFRT_REQUEST__REQUEST_LOADED_EXECUTABLE_FETCH_EXECUTE_RESULT_REQUEST: {
    uint64_t h = q->loaded_executable_fetch_execute_result_request->result_status_handle;
    pfuture *f = pm_get(&s->futures, h);
    if (!f) return fail(s, PX_NOT_FOUND, "execute status handle %" PRIu64 " is not known", h);
    if (future_code(f)) return fail(s, f->code, "%s", f->msg ? f->msg : "failed");
    r->response_case = XLA__IFRT__PROXY__IFRT_RESPONSE__RESPONSE_LOADED_EXECUTABLE_FETCH_EXECUTE_RESULT_RESPONSE;
    r->loaded_executable_fetch_execute_result_response =
        NEW(Xla__Ifrt__Proxy__LoadedExecutableFetchExecuteResultResponse,
            XLA__IFRT__PROXY__LOADED_EXECUTABLE_FETCH_EXECUTE_RESULT_RESPONSE__INIT);
    return 0;
  }
  case XLA__IFRT__PROXY__IFRT_REQUEST__REQUEST_DESTRUCT_ARRAY_REQUEST: {
    const Xla__Ifrt__Proxy__DestructArrayRequest *d = q->destruct_array_request;
    for (size_t i = 0; i < d->n_array_handle; i++) {
      parray *a = pm_del(&s->arrays, d->array_handle[i]);
      if (!a) continue;
      if (s->ntrash == s->trash_cap) {
        size_t cap = s->trash_cap ? s->trash_cap * 2 : 64;
        parray **t = realloc(s->trash, cap * sizeof *t);
        if (!t) {
          parray_free(a);
          continue;
        }
        s->trash = t;
        s->trash_cap = cap;
      }
      s->trash[s->ntrash++] = a;
    }
    r->response_case = XLA__IFRT__PROXY__IFRT_RESPONSE__RESPONSE_DESTRUCT_ARRAY_RESPONSE;
    r->destruct_array_response = NEW(Xla__Ifrt__Proxy__DestructArrayResponse, XLA__IFRT__PROXY__DESTRUCT_ARRAY_RESPONSE__INIT);
    return 0;
  }
  case XLA__IFRT__PROXY__IFRT_REQUEST__REQUEST_DELETE_ARRAY_REQUEST: {
    const Xla__Ifrt__Proxy__DeleteArrayRequest *d = q->delete_array_request;
    for (size_t i = 0; i < d->n_array_handle; i++) {
      parray *a = pm_get(&s->arrays, d->array_handle[i]);
      if (a) parray_delete(a);
    }
    uint64_t fh = ready_future(s);
    Xla__Ifrt__Proxy__DeleteArrayResponse *o =
        NEW(Xla__Ifrt__Proxy__DeleteArrayResponse, XLA__IFRT__PROXY__DELETE_ARRAY_RESPONSE__INIT);
    o->has_deletion_future_handle = 1;
    o->deletion_future_handle = fh;
    r->response_case = XLA__IFRT__PROXY__IFRT_RESPONSE__RESPONSE_DELETE_ARRAY_RESPONSE;
    r->delete_array_response = o;
    return 0;
  }
  case XLA__IFRT__PROXY__IFRT_REQUEST__REQUEST_IS_ARRAY_DELETED_REQUEST: {
    uint64_t h = q->is_array_deleted_request->array_handle;
    parray *a = pm_get(&s->arrays, h);
    if (!a) return fail(s, PX_NOT_FOUND, "array handle %" PRIu64 " is not known in session %" PRIu64, h, s->id);
    Xla__Ifrt__Proxy__IsArrayDeletedResponse *o =
        NEW(Xla__Ifrt__Proxy__IsArrayDeletedResponse, XLA__IFRT__PROXY__IS_ARRAY_DELETED_RESPONSE__INIT);
    o->has_deleted = 1;
    o->deleted = a->deleted;
    r->response_case = XLA__IFRT__PROXY__IFRT_RESPONSE__RESPONSE_IS_ARRAY_DELETED_RESPONSE;
    r->is_array_deleted_response = o;
    return 0;
  }
  case XLA__IFRT__PROXY__IFRT_REQUEST__REQUEST_LOADED_EXECUTABLE_DESTRUCT_REQUEST:
    pexec_free(pm_del(&s->execs, q->loaded_executable_destruct_request->loaded_executable_handle));
    r->response_case = XLA__IFRT__PROXY__IFRT_RESPONSE__RESPONSE_LOADED_EXECUTABLE_DESTRUCT_RESPONSE;
    r->loaded_executable_destruct_response =
        NEW(Xla__Ifrt__Proxy__LoadedExecutableDestructResponse, XLA__IFRT__PROXY__LOADED_EXECUTABLE_DESTRUCT_RESPONSE__INIT);
    return 0;
  case XLA__IFRT__PROXY__IFRT_REQUEST__REQUEST_LOADED_EXECUTABLE_DELETE_REQUEST: {
    int rc = 0;
    pexec *e = exec_get(s, q->loaded_executable_delete_request->loaded_executable_handle, &rc);
    if (!e) return rc;
    e->deleted = true;
    uint64_t fh = ready_future(s);
    Xla__Ifrt__Proxy__LoadedExecutableDeleteResponse *o =
        NEW(Xla__Ifrt__Proxy__LoadedExecutableDeleteResponse, XLA__IFRT__PROXY__LOADED_EXECUTABLE_DELETE_RESPONSE__INIT);
    o->has_future_handle = 1;
    o->future_handle = fh;
    r->response_case = XLA__IFRT__PROXY__IFRT_RESPONSE__RESPONSE_LOADED_EXECUTABLE_DELETE_RESPONSE;
    r->loaded_executable_delete_response = o;
    return 0;
  }
  case XLA__IFRT__PROXY__IFRT_REQUEST__REQUEST_LOADED_EXECUTABLE_IS_DELETED_REQUEST: {
    int rc = 0;
    pexec *e = exec_get(s, q->loaded_executable_is_deleted_request->loaded_executable_handle, &rc);
    if (!e) return rc;
    Xla__Ifrt__Proxy__LoadedExecutableIsDeletedResponse *o = NEW(
        Xla__Ifrt__Proxy__LoadedExecutableIsDeletedResponse, XLA__IFRT__PROXY__LOADED_EXECUTABLE_IS_DELETED_RESPONSE__INIT);
    o->has_is_deleted = 1;
    o->is_deleted = e->deleted;
    r->response_case = XLA__IFRT__PROXY__IFRT_RESPONSE__RESPONSE_LOADED_EXECUTABLE_IS_DELETED_RESPONSE;
    r->loaded_executable_is_deleted_response = o;
    return 0;
  }
  case XLA__IFRT__PROXY__IFRT_REQUEST__REQUEST_RESHARD_ARRAYS_REQUEST: {
    const Xla__Ifrt__Proxy__ReshardArraysRequest *x = q->reshard_arrays_request;
    Xla__Ifrt__Proxy__ReshardArraysResponse *o =
        NEW(Xla__Ifrt__Proxy__ReshardArraysResponse, XLA__IFRT__PROXY__RESHARD_ARRAYS_RESPONSE__INIT);
    int rc = remake_arrays(s, x->array_handles, x->n_array_handles, x->array_specs, x->n_array_specs,
                           x->result_handles, x->n_result_handles, x->copy_semantics, true, &o->array_handles,
                           "ReshardArrays");
    if (rc) return rc;
    o->n_array_handles = x->n_array_handles;
    r->response_case = XLA__IFRT__PROXY__IFRT_RESPONSE__RESPONSE_RESHARD_ARRAYS_RESPONSE;
    r->reshard_arrays_response = o;
    return 0;
  }
  case XLA__IFRT__PROXY__IFRT_REQUEST__REQUEST_BITCAST_ARRAYS_REQUEST: {
    const Xla__Ifrt__Proxy__BitcastArraysRequest *x = q->bitcast_arrays_request;
    Xla__Ifrt__Proxy__BitcastArraysResponse *o =
        NEW(Xla__Ifrt__Proxy__BitcastArraysResponse, XLA__IFRT__PROXY__BITCAST_ARRAYS_RESPONSE__INIT);
    int rc = remake_arrays(s, x->array_handles, x->n_array_handles, x->array_specs, x->n_array_specs,
                           x->result_handles, x->n_result_handles, x->copy_semantics, false, &o->array_handles,
                           "BitcastArrays");
    if (rc) return rc;
    o->n_array_handles = x->n_array_handles;
    r->response_case = XLA__IFRT__PROXY__IFRT_RESPONSE__RESPONSE_BITCAST_ARRAYS_RESPONSE;
    r->bitcast_arrays_response = o;
    return 0;
  }
  case XLA__IFRT__PROXY__IFRT_REQUEST__REQUEST_REMAP_ARRAYS_REQUEST: return do_remap(s, q->remap_arrays_request, r);
  case XLA__IFRT__PROXY__IFRT_REQUEST__REQUEST_MAKE_ERROR_ARRAYS_REQUEST:
    return do_make_error_arrays(s, q->make_error_arrays_request, r);
  case XLA__IFRT__PROXY__IFRT_REQUEST__REQUEST_GET_DEFAULT_LAYOUT_REQUEST:
    return do_default_layout(s, q->get_default_layout_request, r);
  case XLA__IFRT__PROXY__IFRT_REQUEST__REQUEST__NOT_SET:
    return fail(s, PX_INVALID_ARGUMENT, "an IfrtRequest with no request set");
  default:
    return fail(s, PX_UNIMPLEMENTED, "%s is not implemented by the Loom IFRT proxy", request_name(q));
  }
}

/* A request that was to make arrays under client-chosen handles failed: those handles become
 * error arrays, so requests the client pipelined after it fail with this error (a lost worker
 * stays DATA_LOSS) instead of "unknown handle". */
static void error_arrays(px_session *s, const Req *q, int code) {
  const uint64_t *hs = NULL;
  size_t n = 0;
  uint64_t one = 0;
  switch (q->request_case) {
  case XLA__IFRT__PROXY__IFRT_REQUEST__REQUEST_MAKE_ARRAY_FROM_HOST_BUFFER_REQUEST:
    one = q->make_array_from_host_buffer_request->array_handle;
    break;
  case XLA__IFRT__PROXY__IFRT_REQUEST__REQUEST_MAKE_ARRAYS_FROM_HOST_BUFFER_SHARDS_REQUEST:
    hs = q->make_arrays_from_host_buffer_shards_request->array_handles;
    n = q->make_arrays_from_host_buffer_shards_request->n_array_handles;
    break;
  case XLA__IFRT__PROXY__IFRT_REQUEST__REQUEST_ASSEMBLE_ARRAY_FROM_SINGLE_DEVICE_ARRAYS_REQUEST:
    one = q->assemble_array_from_single_device_arrays_request->result_handle;
    break;
  case XLA__IFRT__PROXY__IFRT_REQUEST__REQUEST_COPY_ARRAYS_REQUEST:
    hs = q->copy_arrays_request->result_handles;
    n = q->copy_arrays_request->n_result_handles;
    break;
  case XLA__IFRT__PROXY__IFRT_REQUEST__REQUEST_DISASSEMBLE_INTO_SINGLE_DEVICE_ARRAYS_REQUEST:
    hs = q->disassemble_into_single_device_arrays_request->result_handles;
    n = q->disassemble_into_single_device_arrays_request->n_result_handles;
    break;
  case XLA__IFRT__PROXY__IFRT_REQUEST__REQUEST_FULLY_REPLICATED_SHARD_REQUEST:
    one = q->fully_replicated_shard_request->result_handle;
    break;
  case XLA__IFRT__PROXY__IFRT_REQUEST__REQUEST_RESHARD_ARRAYS_REQUEST:
    hs = q->reshard_arrays_request->result_handles;
    n = q->reshard_arrays_request->n_result_handles;
    break;
  case XLA__IFRT__PROXY__IFRT_REQUEST__REQUEST_BITCAST_ARRAYS_REQUEST:
    hs = q->bitcast_arrays_request->result_handles;
    n = q->bitcast_arrays_request->n_result_handles;
    break;
  case XLA__IFRT__PROXY__IFRT_REQUEST__REQUEST_REMAP_ARRAYS_REQUEST:
    hs = q->remap_arrays_request->result_handles;
    n = q->remap_arrays_request->n_result_handles;
    break;
  case XLA__IFRT__PROXY__IFRT_REQUEST__REQUEST_LOADED_EXECUTABLE_EXECUTE_REQUEST: {
    const Xla__Ifrt__Proxy__LoadedExecutableExecuteRequest *e = q->loaded_executable_execute_request;
    hs = e->result_array_handle;
    n = e->n_result_array_handle;
    if (e->has_result_status_handle && e->result_status_handle)
      future_put(s, e->result_status_handle, code, s->err, NULL);
    break;
  }
  default: return;
  }
  if (one) {
    hs = &one;
    n = 1;
  }
  for (size_t i = 0; i < n; i++) {
    if (!hs[i] || hs[i] >= SERVER_HANDLE_BASE) continue;
    parray *a = calloc(1, sizeof *a);
    if (!a) return;
    a->err = code;
    a->errmsg = strdup(s->err);
    a->shard = -1;
    if (pm_get(&s->arrays, hs[i]) && ((parray *)pm_get(&s->arrays, hs[i]))->err == 0) {
      parray_free(a); /* a real array under that handle already: leave it */
      continue;
    }
    array_add(s, hs[i], a);
  }
}

/* ---- the worker ---- */

static void answer(px_session *s, const uint8_t *msg, size_t len) {
  Req *q = xla__ifrt__proxy__ifrt_request__unpack(NULL, len, msg);
  Resp r = XLA__IFRT__PROXY__IFRT_RESPONSE__INIT;
  Xla__Ifrt__Proxy__ResponseMetadata md = XLA__IFRT__PROXY__RESPONSE_METADATA__INIT;
  Tensorflow__StatusProto status = TENSORFLOW__STATUS_PROTO__INIT;
  r.response_metadata = &md;
  lm_arena_init(&s->ar, 0);
  s->err[0] = 0;
  int code;
  if (!q) {
    code = fail(s, PX_INVALID_ARGUMENT, "an IfrtRequest that does not parse (%zu bytes)", len);
  } else {
    md.has_op_id = 1;
    md.op_id = q->request_metadata ? q->request_metadata->op_id : 0;
    uint64_t t0 = lm_log_enabled(LM_LOG_DEBUG) ? now_us() : 0;
    code = s->client ? handle(s, q, &r) : fail(s, PX_UNAVAILABLE, "%s", s->err);
    if (t0) lm_log(LM_LOG_DEBUG, "proxy: session %" PRIu64 " op %" PRIu64 " %s: %s in %.3f ms", s->id, md.op_id,
                   request_name(q), code ? "error" : "ok", (double)(now_us() - t0) / 1e3);
    if (code) {
      lm_log(LM_LOG_DEBUG, "proxy: session %" PRIu64 " op %" PRIu64 " %s: %s", s->id, md.op_id, request_name(q),
             s->err);
      char keep[sizeof s->err];
      memcpy(keep, s->err, sizeof keep);
      error_arrays(s, q, code);
      memcpy(s->err, keep, sizeof keep); /* the answer carries the request's own error */
    }
  }
  if (code) {
    r.response_case = XLA__IFRT__PROXY__IFRT_RESPONSE__RESPONSE__NOT_SET;
    status.has_code = 1;
    status.code = (Tensorflow__Error__Code)code;
    status.message = s->err;
    md.status = &status;
  }
  size_t n = protobuf_c_message_get_packed_size(&r.base);
  uint8_t *buf = malloc(n ? n : 1);
  if (buf) {
    protobuf_c_message_pack(&r.base, buf);
    px_stream_send(s->st, buf, n);
    free(buf);
  }
  for (size_t i = 0; i < s->ntrash; i++) parray_free(s->trash[i]);
  s->ntrash = 0;
  lm_arena_free(&s->ar);
  if (q) xla__ifrt__proxy__ifrt_request__free_unpacked(q, NULL);
}

static void session_free(px_session *s) {
  for (size_t i = 0; i < s->arrays.cap; i++)
    if (s->arrays.keys[i] && s->arrays.keys[i] != UINT64_MAX) parray_free(s->arrays.vals[i]);
  for (size_t i = 0; i < s->execs.cap; i++) {
    if (!s->execs.keys[i] || s->execs.keys[i] == UINT64_MAX) continue;
    pexec *e = s->execs.vals[i];
    if (e->profile && e->calls == 1) { /* the client went away while its trace recorded: stop and keep it */
      char where[4400];
      if (profile_stop(s, e, where, sizeof where) != 0)
        lm_warn("session %" PRIu64 ": the profile trace it started: %s", s->id, s->err);
    }
    pexec_free(e);
  }
  for (size_t i = 0; i < s->futures.cap; i++)
    if (s->futures.keys[i] && s->futures.keys[i] != UINT64_MAX) pfuture_free(s->futures.vals[i]);
  free(s->arrays.keys), free(s->arrays.vals), free(s->execs.keys), free(s->execs.vals);
  free(s->futures.keys), free(s->futures.vals);
  for (size_t i = 0; i < s->ntrash; i++) parray_free(s->trash[i]);
  free(s->trash);
  loom_disconnect(s->client);
  s->client = NULL;
  px_hb_drop_session(s->id);
}

static void session_unref(px_session *s) {
  if (atomic_fetch_sub(&s->refs, 1) != 1) return;
  for (qitem *it = s->head; it;) { /* requests queued after the worker stopped */
    qitem *n = it->next;
    free(it);
    it = n;
  }
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cv);
  free(s);
}

void px_session_release(px_session *s) { session_unref(s); }

static void *session_main(void *arg) {
  px_session *s = arg;
  loom_connect_options co;
  loom_connect_options_initialize(&co);
  co.address = s->opts->controller;
  char name[64];
  snprintf(name, sizeof name, "ifrt-proxy session %" PRIu64, s->id);
  co.client_name = name;
  co.pool_devices = s->has_pool_devices ? s->pool_devices : s->opts->pool_devices; /* the shared pool (docs/pool.md): JAX sees its devices */
  co.priority = s->has_priority ? s->priority : s->opts->priority;
  co.share_weight = s->has_share_weight ? s->share_weight : s->opts->share_weight;
  co.launch_limit_ms = s->launch_limit_ms;
  int code = PX_OK;
  if (s->md_err[0]) {
    code = PX_INVALID_ARGUMENT;
    snprintf(s->err, sizeof s->err, "%s", s->md_err);
  } else if (loom_connect(&co, &s->client) != LOOM_OK) {
    code = PX_UNAVAILABLE;
    snprintf(s->err, sizeof s->err, "the Loom proxy cannot reach the cluster's controller: %s", loom_errmsg(NULL));
  }
  if (code != PX_OK) {
    lm_log(LM_LOG_WARN, "proxy: session %" PRIu64 ": %s", s->id, s->err);
    px_stream_finish(s->st, code, s->err);
  } else {
    lm_log(LM_LOG_INFO, "proxy: session %" PRIu64 " opened (protocol %d, Loom session %" PRIu64 ")", s->id, s->protocol,
           loom_client_session(s->client));
  }
  int how = 0;
  for (;;) {
    pthread_mutex_lock(&s->mu);
    while (!s->head && !s->closing) pthread_cond_wait(&s->cv, &s->mu);
    qitem *it = NULL;
    if (s->closing != 2 && s->head) {
      it = s->head;
      s->head = it->next;
      if (!s->head) s->tail = NULL;
    }
    how = s->closing;
    pthread_mutex_unlock(&s->mu);
    if (!it) break;
    if (s->client) answer(s, it->data, it->len);
    free(it);
  }
  if (how == 1 && s->client) px_stream_finish(s->st, PX_OK, NULL);
  lm_log(LM_LOG_INFO, "proxy: session %" PRIu64 " %s; freeing what it held", s->id,
         how == 1 ? "ended" : "lost its client");
  px_stream_release(s->st);
  session_free(s);
  session_unref(s);
  return NULL;
}

/* The session's own pool request from its metadata: the attributes loom.pool_devices (int),
 * loom.priority (string), loom.share_weight (int) and loom.launch_limit_ms (int) of the
 * initialization_data JAX sends (ClientConnectionOptions.initialization_data). Other attributes
 * are not Loom's and are ignored; a loom.* one that is unknown or of the wrong type ends the session
 * with an error naming it (md_err). */
static void pool_metadata(px_session *s, const Xla__Ifrt__AttributeMapProto *am) {
  for (size_t i = 0; i < am->n_attributes && !s->md_err[0]; i++) {
    const Xla__Ifrt__AttributeMapProto__AttributesEntry *e = am->attributes[i];
    if (!e || !e->key || strncmp(e->key, "loom.", 5)) continue;
    const Xla__Ifrt__AttributeMapProto__Value *v = e->value;
    bool is_int = v && v->value_case == XLA__IFRT__ATTRIBUTE_MAP_PROTO__VALUE__VALUE_INT64_VALUE;
    bool is_str = v && v->value_case == XLA__IFRT__ATTRIBUTE_MAP_PROTO__VALUE__VALUE_STRING_VALUE;
    int64_t x = is_int ? v->int64_value : 0;
    const char *k = e->key + 5;
    if (!strcmp(k, "pool_devices") || !strcmp(k, "share_weight") || !strcmp(k, "launch_limit_ms")) {
      int64_t max = !strcmp(k, "pool_devices") ? 65536 : !strcmp(k, "share_weight") ? 1000000 : UINT32_MAX;
      if (!is_int || x < 0 || x > max) {
        snprintf(s->md_err, sizeof s->md_err, "the session metadata's %.40s must be an integer from 0 to %lld",
                 e->key, (long long)max);
      } else if (!strcmp(k, "pool_devices")) {
        s->pool_devices = (uint32_t)x, s->has_pool_devices = true;
      } else if (!strcmp(k, "share_weight")) {
        s->share_weight = (uint32_t)x, s->has_share_weight = true;
      } else {
        s->launch_limit_ms = (uint32_t)x;
      }
    } else if (!strcmp(k, "priority")) {
      size_t n = is_str ? v->string_value.len : 0;
      bool ok = is_str && n > 0 && n < sizeof s->priority;
      for (size_t j = 0; ok && j < n; j++) ok = v->string_value.data[j] > 0x20 && v->string_value.data[j] < 0x7f;
      if (!ok) {
        snprintf(s->md_err, sizeof s->md_err, "the session metadata's loom.priority must be a class name of 1 to %zu "
                 "printable characters", sizeof s->priority - 1);
      } else {
        memcpy(s->priority, v->string_value.data, n);
        s->priority[n] = 0;
        s->has_priority = true;
      }
    } else {
      snprintf(s->md_err, sizeof s->md_err, "unknown Loom attribute '%.60s' in the session metadata (Loom reads "
               "loom.pool_devices, loom.priority, loom.share_weight, loom.launch_limit_ms)", e->key);
    }
  }
}

px_session *px_session_start(px_stream *st, const px_options *opts, uint64_t id, const uint8_t *md, size_t md_len) {
  px_session *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->st = st;
  s->opts = opts;
  s->id = id;
  s->next_handle = SERVER_HANDLE_BASE;
  atomic_init(&s->refs, 2); /* the stream's (px_session_release) and session_main's */
  if (md) {
    Xla__Ifrt__Proxy__GrpcIfrtSessionMetadata *m = xla__ifrt__proxy__grpc_ifrt_session_metadata__unpack(NULL, md_len, md);
    if (m && m->version) s->protocol = m->version->protocol_version;
    if (m && m->initialization_data) pool_metadata(s, m->initialization_data);
    if (m) xla__ifrt__proxy__grpc_ifrt_session_metadata__free_unpacked(m, NULL);
  }
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  pthread_t th;
  pthread_attr_t a;
  pthread_attr_init(&a);
  pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
  int rc = pthread_create(&th, &a, session_main, s);
  pthread_attr_destroy(&a);
  if (rc != 0) {
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
    return NULL;
  }
  return s;
}

void px_session_request(px_session *s, const uint8_t *msg, size_t len) {
  qitem *it = malloc(sizeof *it + len);
  if (!it) return;
  it->next = NULL;
  it->len = len;
  memcpy(it->data, msg, len);
  pthread_mutex_lock(&s->mu);
  if (s->tail) s->tail->next = it;
  else s->head = it;
  s->tail = it;
  pthread_cond_signal(&s->cv);
  pthread_mutex_unlock(&s->mu);
}

void px_session_close(px_session *s, int end) {
  pthread_mutex_lock(&s->mu);
  if (s->closing != 2) s->closing = end ? 1 : 2;
  pthread_cond_signal(&s->cv);
  pthread_mutex_unlock(&s->mu);
  if (!end) px_hb_abandon(s->id); /* no HostBufferStore will come: stop waiting for one */
}
