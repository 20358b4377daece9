/* pathwaysutils' plugin programs other than profiling, parsed and checked here:
 * - persistence (pathwaysutils.persistence.helper write_arrays / read_arrays): the JSON of a
 *   {bulk_,}persistence{Write,Read}Request, run as Loom checkpoints in a directory of their own,
 *   location/name (the workers write and read their shards in parallel, the load reshards onto
 *   the devices asked for). docs/proxy.md "Persistence".
 * - reshard (pathwaysutils.experimental.reshard): a reshardRequest's output shardings; session.c
 *   moves each argument's values into them. docs/proxy.md "Resharding".
 * session.c compiles and executes them; this file knows nothing of the session's objects. */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "proxy/plugin.h"
#include "xla/python/ifrt/sharding_serdes.pb-c.h"
#include "xla/python/pjrt_ifrt/xla_sharding.pb-c.h"

#define PS_NAME_MAX 200     /* an array name (a tensor name in the file, and directories) */
#define PS_LOCATION_MAX 3800
#define PS_ITEMS_MAX 10000  /* arrays in one bulk request */
#define PS_DEVICES_MAX (1 << 20) /* device ids in all of its requests together */

static int errf(char *msg, size_t cap, int code, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int errf(char *msg, size_t cap, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, cap, fmt, ap);
  va_end(ap);
  return code;
}

/* Base64 (RFC 4648, padded) of a JSON string -> malloc'd bytes, NUL-terminated; NULL if malformed. */
static uint8_t *b64_decode(const cJSON *j, size_t *len) {
  if (!cJSON_IsString(j)) return NULL;
  const char *in = j->valuestring;
  size_t n = strlen(in);
  if (n % 4 || n > (1u << 28)) return NULL;
  uint8_t *out = malloc(n / 4 * 3 + 1);
  if (!out) return NULL;
  int k = n ? EVP_DecodeBlock(out, (const unsigned char *)in, (int)n) : 0;
  if (k < 0) {
    free(out);
    return NULL;
  }
  size_t pad = (n >= 1 && in[n - 1] == '=') + (n >= 2 && in[n - 2] == '=');
  *len = (size_t)k - pad;
  out[*len] = 0;
  return out;
}

static const struct { const char *xla; loom_dtype dt; } g_types[] = {
    {"PRED", LOOM_DTYPE_PRED}, {"S8", LOOM_DTYPE_S8},   {"S16", LOOM_DTYPE_S16}, {"S32", LOOM_DTYPE_S32},
    {"S64", LOOM_DTYPE_S64},   {"U8", LOOM_DTYPE_U8},   {"U16", LOOM_DTYPE_U16}, {"U32", LOOM_DTYPE_U32},
    {"U64", LOOM_DTYPE_U64},   {"F16", LOOM_DTYPE_F16}, {"BF16", LOOM_DTYPE_BF16}, {"F32", LOOM_DTYPE_F32},
    {"F64", LOOM_DTYPE_F64},   {"C64", LOOM_DTYPE_C64}, {"C128", LOOM_DTYPE_C128},
};

/* A name as a relative path: components of printable characters except " \ [ ] (it is also the
 * tensor's name in the file), none empty, "." or "..". */
static bool name_ok(const char *n, size_t len) {
  if (len == 0 || len > PS_NAME_MAX || strlen(n) != len || n[0] == '/') return false;
  for (size_t i = 0; i < len; i++)
    if ((unsigned char)n[i] < 0x20 || (unsigned char)n[i] > 0x7e || strchr("\"\\[]", n[i])) return false;
  for (const char *c = n; *c;) {
    size_t l = strcspn(c, "/");
    if (l == 0 || (l == 1 && c[0] == '.') || (l == 2 && c[0] == '.' && c[1] == '.')) return false;
    c += l;
    if (*c == '/') c++;
  }
  return n[len - 1] != '/';
}

static int dims_of(const cJSON *arr, px_persist_item *it, const char *what, char *msg, size_t cap) {
  if (!cJSON_IsArray(arr)) return errf(msg, cap, PX_INVALID_ARGUMENT, "%s: shape must be a list of dimensions", what);
  int n = cJSON_GetArraySize(arr);
  if (n > LOOM_MAX_RANK) return errf(msg, cap, PX_UNIMPLEMENTED, "%s: rank %d (Loom arrays have at most %d)", what, n, LOOM_MAX_RANK);
  it->rank = n;
  int i = 0;
  for (const cJSON *d = arr->child; d; d = d->next, i++) {
    if (!cJSON_IsNumber(d) || d->valuedouble < 0 || d->valuedouble > 9.0e15 || d->valuedouble != (double)(int64_t)d->valuedouble)
      return errf(msg, cap, PX_INVALID_ARGUMENT, "%s: dimension %d is not a size", what, i);
    it->dims[i] = (int64_t)d->valuedouble;
  }
  return 0;
}

/* q's devices.device_ids (1 to 4096 of them) into it->devices. */
static int device_ids(const cJSON *q, px_persist_item *it, const char *what, char *msg, size_t cap) {
  const cJSON *ids = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(q, "devices"), "device_ids");
  int nd = cJSON_IsArray(ids) ? cJSON_GetArraySize(ids) : -1;
  if (nd < 1 || nd > 4096) return errf(msg, cap, PX_INVALID_ARGUMENT, "%s: devices.device_ids must list 1 to 4096 devices", what);
  it->devices = malloc(sizeof(int32_t) * (size_t)nd);
  if (!it->devices) return errf(msg, cap, PX_RESOURCE_EXHAUSTED, "out of memory");
  it->ndevices = nd;
  int i = 0;
  for (const cJSON *d = ids->child; d; d = d->next, i++) {
    if (!cJSON_IsNumber(d) || d->valuedouble < 0 || d->valuedouble > INT32_MAX || d->valuedouble != (double)(int32_t)d->valuedouble)
      return errf(msg, cap, PX_INVALID_ARGUMENT, "%s: device id %d is not a device id", what, i);
    it->devices[i] = (int32_t)d->valuedouble;
  }
  return 0;
}

/* One write or read request object into it. */
static int parse_item(const cJSON *q, bool write, int idx, px_persist_item *it, char *msg, size_t cap) {
  char what[64];
  snprintf(what, sizeof what, "persistence %s request %d", write ? "write" : "read", idx);
  if (!cJSON_IsObject(q)) return errf(msg, cap, PX_INVALID_ARGUMENT, "%s is not a JSON object", what);
  size_t llen = 0, nlen = 0, slen = 0;
  uint8_t *loc = b64_decode(cJSON_GetObjectItemCaseSensitive(q, "b64_location"), &llen);
  uint8_t *name = b64_decode(cJSON_GetObjectItemCaseSensitive(q, "b64_name"), &nlen);
  it->sharding = b64_decode(cJSON_GetObjectItemCaseSensitive(q, "b64_hlo_sharding_string"), &slen);
  it->sharding_len = slen;
  int rc = 0;
  if (!loc || !name || !it->sharding) {
    rc = errf(msg, cap, PX_INVALID_ARGUMENT, "%s: b64_%s is missing or not base64", what,
              !loc ? "location" : !name ? "name" : "hlo_sharding_string");
  } else if (llen == 0 || strlen((char *)loc) != llen || llen > PS_LOCATION_MAX) {
    rc = errf(msg, cap, PX_INVALID_ARGUMENT, "%s: the location is empty, too long or not text", what);
  } else if (strstr((char *)loc, "://")) {
    rc = errf(msg, cap, PX_UNIMPLEMENTED,
              "%s: location '%.200s': Loom's persistence writes to local or shared filesystem paths only (an "
              "absolute path the workers can reach, e.g. an NFS or Filestore mount), not to object stores or URLs",
              what, (char *)loc);
  } else if (loc[0] != '/') {
    rc = errf(msg, cap, PX_INVALID_ARGUMENT,
              "%s: location '%.200s' is not an absolute path (the workers, not the proxy, open it)", what, (char *)loc);
  } else if (!name_ok((char *)name, nlen)) {
    rc = errf(msg, cap, PX_INVALID_ARGUMENT,
              "%s: '%.200s' is not an array name Loom can store: 1 to %d printable characters except \" \\ [ ], "
              "a relative path without '.' or '..' components", what, (char *)name, PS_NAME_MAX);
  }
  if (rc == 0) {
    while (llen > 1 && loc[llen - 1] == '/') loc[--llen] = 0;
    size_t dl = llen + 1 + nlen + 1;
    it->dir = malloc(dl);
    it->name = strdup((char *)name);
    if (!it->dir || !it->name) rc = errf(msg, cap, PX_RESOURCE_EXHAUSTED, "out of memory");
    else snprintf(it->dir, dl, "%s%s%s", (char *)loc, llen > 1 ? "/" : "", (char *)name);
  }
  free(loc);
  free(name);
  if (rc) return rc;
  const cJSON *shape = cJSON_GetObjectItemCaseSensitive(q, "shape");
  it->dtype = LOOM_DTYPE_INVALID;
  if (write) {
    rc = dims_of(shape, it, what, msg, cap);
  } else {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(shape, "xla_primitive_type_str");
    if (!cJSON_IsString(t)) return errf(msg, cap, PX_INVALID_ARGUMENT, "%s: shape.xla_primitive_type_str is missing", what);
    for (size_t i = 0; i < sizeof g_types / sizeof g_types[0]; i++)
      if (!strcmp(t->valuestring, g_types[i].xla)) it->dtype = g_types[i].dt;
    if (it->dtype == LOOM_DTYPE_INVALID)
      return errf(msg, cap, PX_UNIMPLEMENTED, "%s: element type '%.40s' is not supported by Loom", what, t->valuestring);
    rc = dims_of(cJSON_GetObjectItemCaseSensitive(shape, "dimensions"), it, what, msg, cap);
  }
  if (rc) return rc;
  return device_ids(q, it, what, msg, cap);
}

static int by_dir(const void *a, const void *b) {
  return strcmp((*(const px_persist_item *const *)a)->dir, (*(const px_persist_item *const *)b)->dir);
}

int px_persist_parse(const cJSON *root, px_persist **out, char *msg, size_t cap) {
  *out = NULL;
  static const struct { const char *key, *list; bool write, bulk; } kinds[] = {
      {"bulk_persistence_write_request", "write_requests", true, true},
      {"bulk_persistence_read_request", "read_requests", false, true},
      {"persistenceWriteRequest", NULL, true, false},
      {"persistenceReadRequest", NULL, false, false},
  };
  const cJSON *req = NULL;
  size_t k = 0;
  for (; k < sizeof kinds / sizeof kinds[0] && !req; k++) req = cJSON_GetObjectItemCaseSensitive(root, kinds[k].key);
  if (!req) return 1;
  k--;
  const cJSON *list = kinds[k].bulk ? cJSON_GetObjectItemCaseSensitive(req, kinds[k].list) : NULL;
  if (kinds[k].bulk && !cJSON_IsArray(list))
    return errf(msg, cap, PX_INVALID_ARGUMENT, "%s: %s must be a list", kinds[k].key, kinds[k].list);
  int n = kinds[k].bulk ? cJSON_GetArraySize(list) : 1;
  if (n < 1 || n > PS_ITEMS_MAX)
    return errf(msg, cap, PX_INVALID_ARGUMENT, "%s: 1 to %d arrays, not %d", kinds[k].key, PS_ITEMS_MAX, n);
  px_persist *p = calloc(1, sizeof *p);
  if (p) p->items = calloc((size_t)n, sizeof *p->items);
  if (!p || !p->items) {
    free(p);
    return errf(msg, cap, PX_RESOURCE_EXHAUSTED, "out of memory");
  }
  p->write = kinds[k].write;
  p->n = n;
  int rc = 0, i = 0;
  size_t ids = 0;
  for (const cJSON *q = kinds[k].bulk ? list->child : req; q && !rc && i < n; q = kinds[k].bulk ? q->next : NULL, i++) {
    rc = parse_item(q, p->write, i, &p->items[i], msg, cap);
    if (!rc && (ids += (size_t)p->items[i].ndevices) > PS_DEVICES_MAX)
      rc = errf(msg, cap, PX_INVALID_ARGUMENT, "%s: more than %d device ids in all", kinds[k].key, PS_DEVICES_MAX);
  }
  /* one array per directory in a request: sorted by directory, a name given twice is side by side */
  const px_persist_item **by = rc ? NULL : malloc(sizeof *by * (size_t)n);
  if (!rc && !by) rc = errf(msg, cap, PX_RESOURCE_EXHAUSTED, "out of memory");
  for (int a = 0; !rc && a < n; a++) by[a] = &p->items[a];
  if (!rc) qsort(by, (size_t)n, sizeof *by, by_dir);
  for (int a = 1; !rc && a < n; a++)
    if (!strcmp(by[a - 1]->dir, by[a]->dir))
      rc = errf(msg, cap, PX_INVALID_ARGUMENT, "persistence request: array '%.200s' is named twice", by[a]->name);
  free(by);
  if (rc) {
    px_persist_free(p);
    return rc;
  }
  *out = p;
  return 0;
}

static void items_free(px_persist_item *items, int32_t n) {
  for (int32_t i = 0; items && i < n; i++) {
    free(items[i].dir);
    free(items[i].name);
    free(items[i].sharding);
    free(items[i].devices);
  }
  free(items);
}

void px_persist_free(px_persist *p) {
  if (!p) return;
  items_free(p->items, p->n);
  free(p);
}

/* ---- reshardRequest: {"donateInput": bool, "inSharding": [S...], "outSharding": [S...]}, where
 * S = {"devices": {"device_ids": [...]}, "xla_hlo_sharding": base64 xla.OpSharding,
 * "memory_kind": "device" (optional)} and argument i moves from inSharding[i] to outSharding[i] */

/* Sharding S (the list's i-th, named by where) into it. */
static int parse_sharding(const cJSON *q, const char *where, int i, px_persist_item *it, char *msg, size_t cap) {
  char what[64];
  snprintf(what, sizeof what, "reshardRequest %s[%d]", where, i);
  if (!cJSON_IsObject(q)) return errf(msg, cap, PX_INVALID_ARGUMENT, "%s is not a JSON object", what);
  it->name = strdup(what);
  it->sharding = b64_decode(cJSON_GetObjectItemCaseSensitive(q, "xla_hlo_sharding"), &it->sharding_len);
  if (!it->name || !it->sharding)
    return errf(msg, cap, it->name ? PX_INVALID_ARGUMENT : PX_RESOURCE_EXHAUSTED, "%s: %s", what,
                it->name ? "xla_hlo_sharding is missing or not base64" : "out of memory");
  const cJSON *mk = cJSON_GetObjectItemCaseSensitive(q, "memory_kind");
  if (mk && (!cJSON_IsString(mk) || strcmp(mk->valuestring, "device")))
    return errf(msg, cap, PX_UNIMPLEMENTED, "%s: memory kind '%.40s': Loom arrays live in device memory only", what,
                cJSON_IsString(mk) ? mk->valuestring : "?");
  return device_ids(q, it, what, msg, cap);
}

int px_reshard_parse(const cJSON *root, px_reshard **out, char *msg, size_t cap) {
  *out = NULL;
  const cJSON *req = cJSON_GetObjectItemCaseSensitive(root, "reshardRequest");
  if (!req) return 1;
  if (!cJSON_IsObject(req)) return errf(msg, cap, PX_INVALID_ARGUMENT, "reshardRequest must be a JSON object");
  const cJSON *ins = cJSON_GetObjectItemCaseSensitive(req, "inSharding");
  const cJSON *outs = cJSON_GetObjectItemCaseSensitive(req, "outSharding");
  const cJSON *don = cJSON_GetObjectItemCaseSensitive(req, "donateInput");
  if (!cJSON_IsArray(ins) || !cJSON_IsArray(outs))
    return errf(msg, cap, PX_INVALID_ARGUMENT, "reshardRequest: inSharding and outSharding must be lists");
  if (don && !cJSON_IsBool(don)) return errf(msg, cap, PX_INVALID_ARGUMENT, "reshardRequest: donateInput must be a bool");
  int n = cJSON_GetArraySize(ins);
  if (n != cJSON_GetArraySize(outs))
    return errf(msg, cap, PX_INVALID_ARGUMENT, "reshardRequest: %d input shardings, %d output shardings", n,
                cJSON_GetArraySize(outs));
  if (n < 1 || n > PS_ITEMS_MAX)
    return errf(msg, cap, PX_INVALID_ARGUMENT, "reshardRequest: 1 to %d arrays, not %d", PS_ITEMS_MAX, n);
  px_reshard *p = calloc(1, sizeof *p);
  if (p) p->in = calloc((size_t)n, sizeof *p->in), p->out = calloc((size_t)n, sizeof *p->out);
  if (!p || !p->in || !p->out) {
    px_reshard_free(p);
    return errf(msg, cap, PX_RESOURCE_EXHAUSTED, "out of memory");
  }
  p->n = n;
  p->donate = cJSON_IsTrue(don);
  int rc = 0, i = 0;
  size_t ids = 0;
  for (const cJSON *a = ins->child, *b = outs->child; a && b && !rc; a = a->next, b = b->next, i++) {
    rc = parse_sharding(a, "inSharding", i, &p->in[i], msg, cap);
    if (!rc) rc = parse_sharding(b, "outSharding", i, &p->out[i], msg, cap);
    if (!rc && (ids += (size_t)(p->in[i].ndevices + p->out[i].ndevices)) > PS_DEVICES_MAX)
      rc = errf(msg, cap, PX_INVALID_ARGUMENT, "reshardRequest: more than %d device ids in all", PS_DEVICES_MAX);
  }
  if (rc) {
    px_reshard_free(p);
    return rc;
  }
  *out = p;
  return 0;
}

void px_reshard_free(px_reshard *p) {
  if (!p) return;
  items_free(p->in, p->n);
  items_free(p->out, p->n);
  free(p);
}

int px_persist_sharding(const px_persist_item *it, uint8_t **out, size_t *len, char *msg, size_t cap) {
  *out = NULL;
  Xla__OpSharding *o = xla__op_sharding__unpack(NULL, it->sharding_len, it->sharding);
  if (!o) return errf(msg, cap, PX_INVALID_ARGUMENT, "array '%.200s': its hlo sharding does not parse", it->name);
  Xla__Ifrt__DeviceListProto dl = XLA__IFRT__DEVICE_LIST_PROTO__INIT;
  dl.n_device_ids = (size_t)it->ndevices;
  dl.device_ids = it->devices;
  Xla__Ifrt__HloShardingProto hp = XLA__IFRT__HLO_SHARDING_PROTO__INIT;
  hp.devices = &dl;
  hp.memory_kind = "device";
  hp.xla_op_sharding = o;
  size_t n = xla__ifrt__hlo_sharding_proto__get_packed_size(&hp);
  *out = malloc(n ? n : 1);
  if (*out) *len = xla__ifrt__hlo_sharding_proto__pack(&hp, *out);
  xla__op_sharding__free_unpacked(o, NULL);
  return *out ? 0 : errf(msg, cap, PX_RESOURCE_EXHAUSTED, "out of memory");
}

/* ---- running the items: up to PS_THREADS checkpoints at once on the session's client (libloom
 * pipelines them on its connection), so the controller plans and the workers write them together */

#define PS_THREADS 8

typedef struct job {
  loom_client *c;
  const px_persist *p;
  loom_array *const *in;             /* write: the arrays */
  const loom_sharding *const *shs;   /* read: the shardings */
  loom_array **out;                  /* read: the arrays made */
  atomic_int next;                   /* the next item to run */
  pthread_mutex_t mu;
  int nfail;
  int32_t first;                     /* the lowest failed item, its status and message */
  int first_st;
  char first_msg[1024];
} job;

static void run_one(job *j, int32_t i) {
  const px_persist_item *it = &j->p->items[i];
  const char *name = it->name;
  int st;
  if (j->p->write) {
    st = loom_checkpoint_save_dir(j->c, it->dir, &name, &j->in[i], 1, NULL);
  } else {
    loom_checkpoint_load_args a;
    loom_checkpoint_load_args_initialize(&a);
    const int64_t *dims = it->dims;
    a.dir = it->dir;
    a.num_arrays = 1;
    a.names = &name;
    a.shardings = &j->shs[i];
    a.dtypes = &it->dtype;
    a.ranks = &it->rank;
    a.dims = &dims;
    st = loom_checkpoint_load(j->c, &a, &j->out[i], NULL);
  }
  if (st == LOOM_OK) return;
  const char *m = loom_errmsg(j->c); /* the client's latest failure: this one's unless two fail at once */
  pthread_mutex_lock(&j->mu);
  j->nfail++;
  if (j->first < 0 || i < j->first) {
    j->first = i;
    j->first_st = st;
    snprintf(j->first_msg, sizeof j->first_msg, "%s", m && m[0] ? m : loom_strerror(st));
  }
  pthread_mutex_unlock(&j->mu);
}

static void *worker(void *arg) {
  job *j = arg;
  for (int32_t i; (i = atomic_fetch_add(&j->next, 1)) < j->p->n;) run_one(j, i);
  return NULL;
}

static int run(job *j, char *msg, size_t cap) {
  pthread_mutex_init(&j->mu, NULL);
  atomic_init(&j->next, 0);
  j->first = -1;
  pthread_t th[PS_THREADS];
  int nt = 0;
  for (; nt < PS_THREADS - 1 && nt < j->p->n - 1; nt++)
    if (pthread_create(&th[nt], NULL, worker, j) != 0) break;
  worker(j); /* this thread too */
  for (int k = 0; k < nt; k++) pthread_join(th[k], NULL);
  pthread_mutex_destroy(&j->mu);
  if (!j->nfail) return 0;
  const px_persist_item *it = &j->p->items[j->first];
  const char *m = j->first_msg;
  const char *tail = j->nfail == 1 && !strncmp(m, "checkpoint '", 12) ? strstr(m, "': ") : NULL;
  if (tail) m = tail + 3; /* the checkpoint's name is the directory, named here already */
  char more[64] = "";
  if (j->nfail > 1) snprintf(more, sizeof more, " (%d of %d arrays failed)", j->nfail, j->p->n);
  return errf(msg, cap, px_code_of(j->first_st), "persistence %s of array '%.200s' at %.400s%s: %s",
              j->p->write ? "write" : "read", it->name, it->dir, more, m);
}

int px_persist_write(loom_client *c, const px_persist *p, loom_array *const *arrays, char *msg, size_t cap) {
  for (int32_t i = 0; i < p->n; i++) { /* every shape first: nothing is written for a bad request */
    const px_persist_item *it = &p->items[i];
    int32_t r = loom_array_rank(arrays[i]);
    const int64_t *d = loom_array_dims(arrays[i]);
    bool same = r == it->rank;
    for (int32_t k = 0; same && k < r; k++) same = d[k] == it->dims[k];
    if (!same) return errf(msg, cap, PX_INVALID_ARGUMENT, "persistence write of array '%.200s': the request's shape "
                           "differs from its argument %d's", it->name, i);
  }
  job j = {.c = c, .p = p, .in = arrays};
  return run(&j, msg, cap);
}

int px_persist_read(loom_client *c, const px_persist *p, const loom_sharding *const *shardings, loom_array **out,
                    char *msg, size_t cap) {
  for (int32_t i = 0; i < p->n; i++) out[i] = NULL;
  job j = {.c = c, .p = p, .shs = shardings, .out = out};
  int rc = run(&j, msg, cap);
  if (rc)
    for (int32_t i = 0; i < p->n; i++) {
      loom_array_release(out[i]);
      out[i] = NULL;
    }
  return rc;
}
