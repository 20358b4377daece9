/* PJRT plugins (pjrt.h): the plugin's C API table, a client, compiled executables, and runs with
 * Loom buffers in and out. Every call goes through call(), which turns a PJRT_Error into an
 * lm_err naming the plugin and the function. */
#include "pjrt/pjrt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef LOOM_HAVE_PJRT

const char *lm_pjrt_default_plugin(void) { return getenv("LOOM_PJRT_PLUGIN"); }
int lm_pjrt_open(const char *path, const char *const *options, int noptions, lm_pjrt **out, lm_err *err) {
  (void)options, (void)noptions;
  *out = NULL;
  return lm_errf(err, LOOM_UNSUPPORTED, "PJRT plugin %s: this Loom was built without the PJRT C API header "
                 "(pip install xla-cpu-pjrt, then reconfigure)", path ? path : "(none)");
}
void lm_pjrt_close(lm_pjrt *p) { (void)p; }
int lm_pjrt_device_count(const lm_pjrt *p) { (void)p; return 0; }
const char *lm_pjrt_platform(const lm_pjrt *p) { (void)p; return ""; }
const char *lm_pjrt_device_kind(const lm_pjrt *p) { (void)p; return ""; }
int lm_pjrt_compile(lm_pjrt *p, const void *code, size_t len, uint32_t nresults, lm_pjrt_exe **out, lm_err *err) {
  (void)p, (void)code, (void)len, (void)nresults;
  *out = NULL;
  return lm_errf(err, LOOM_UNSUPPORTED, "built without PJRT");
}
void lm_pjrt_exe_free(lm_pjrt_exe *e) { (void)e; }
int lm_pjrt_run(lm_pjrt_exe *e, int device, lm_buffer *const *args, uint32_t nargs, lm_device *dev,
                const lm_type *result_types, lm_buffer **res, uint32_t nres, lm_err *err) {
  (void)e, (void)device, (void)args, (void)nargs, (void)dev, (void)result_types, (void)res, (void)nres;
  return lm_errf(err, LOOM_UNSUPPORTED, "built without PJRT");
}

#else

#include <dlfcn.h>
#include <pthread.h>
#include <pjrt_c_api.h>
#include "pjrt_options.pb-c.h"

struct lm_pjrt {
  void *dl;
  const PJRT_Api *api;
  char *path;
  PJRT_Client *client;
  PJRT_Device *const *devices;
  size_t ndevices;
  char platform[32], kind[64];
  bool host_memory;        /* the plugin's buffers are host memory (cpu): results are handed over, not copied */
  pthread_mutex_t mu;      /* guards the two below */
  long lent;               /* plugin buffers living on as Loom buffers (lm_buffer_wrap) */
  bool closing;            /* lm_pjrt_close came while some were: the last one closes */
};

struct lm_pjrt_exe {
  lm_pjrt *p;
  PJRT_LoadedExecutable *exe;
  size_t nout;
};

#define ARGS(T, name) T name = {.struct_size = T##_STRUCT_SIZE}

/* Converts a PJRT_Error (non-NULL) into err and destroys it. */
static int fail(const lm_pjrt *p, PJRT_Error *e, const char *fn, lm_err *err) {
  ARGS(PJRT_Error_Message_Args, m);
  m.error = e;
  p->api->PJRT_Error_Message(&m);
  ARGS(PJRT_Error_GetCode_Args, c);
  c.error = e;
  int code = LOOM_INTERNAL;
  if (!p->api->PJRT_Error_GetCode(&c)) {
    /* the codes are absl's: 3 invalid argument, 5 not found, 8 resource exhausted, 12 unimplemented */
    code = c.code == PJRT_Error_Code_INVALID_ARGUMENT ? LOOM_INVALID_ARGUMENT
           : c.code == PJRT_Error_Code_RESOURCE_EXHAUSTED ? LOOM_DEVICE_OUT_OF_MEMORY
           : c.code == PJRT_Error_Code_UNIMPLEMENTED ? LOOM_UNSUPPORTED : LOOM_INTERNAL;
  }
  lm_errf(err, code, "PJRT plugin %s: %s: %.*s", p->path, fn, (int)(m.message_size > 2000 ? 2000 : m.message_size),
          m.message ? m.message : "");
  ARGS(PJRT_Error_Destroy_Args, d);
  d.error = e;
  p->api->PJRT_Error_Destroy(&d);
  return err->code;
}

#define CALL(p, fn, args, err)                                       \
  do {                                                               \
    PJRT_Error *e_ = (p)->api->fn(&(args));                          \
    if (e_) return fail((p), e_, #fn, (err));                        \
  } while (0)

static int await_event(lm_pjrt *p, PJRT_Event *ev, lm_err *err) {
  if (!ev) return 0;
  ARGS(PJRT_Event_Await_Args, a);
  a.event = ev;
  PJRT_Error *e = p->api->PJRT_Event_Await(&a);
  ARGS(PJRT_Event_Destroy_Args, d);
  d.event = ev;
  p->api->PJRT_Event_Destroy(&d);
  return e ? fail(p, e, "PJRT_Event_Await", err) : 0;
}

const char *lm_pjrt_default_plugin(void) {
  const char *env = getenv("LOOM_PJRT_PLUGIN");
  if (env && *env) return env;
#ifdef LOOM_DEFAULT_PJRT_PLUGIN
  return LOOM_DEFAULT_PJRT_PLUGIN;
#else
  return NULL;
#endif
}

/* "name=value" -> a named value: int64 when value is all digits (an optional sign), else a string. */
static int named_value(const char *opt, PJRT_NamedValue *nv, lm_err *err) {
  const char *eq = strchr(opt, '=');
  if (!eq || eq == opt) return lm_errf(err, LOOM_INVALID_ARGUMENT, "PJRT option '%s' is not name=value", opt);
  memset(nv, 0, sizeof *nv);
  nv->struct_size = PJRT_NamedValue_STRUCT_SIZE;
  nv->name = opt;
  nv->name_size = (size_t)(eq - opt);
  const char *v = eq + 1;
  char *end;
  long long iv = strtoll(v, &end, 10);
  if (*v && !*end) {
    nv->type = PJRT_NamedValue_kInt64;
    nv->int64_value = iv;
    nv->value_size = 1;
  } else if (!strcmp(v, "true") || !strcmp(v, "false")) {
    nv->type = PJRT_NamedValue_kBool;
    nv->bool_value = v[0] == 't';
    nv->value_size = 1;
  } else {
    nv->type = PJRT_NamedValue_kString;
    nv->string_value = v;
    nv->value_size = strlen(v);
  }
  return 0;
}

int lm_pjrt_open(const char *path, const char *const *options, int noptions, lm_pjrt **out, lm_err *err) {
  *out = NULL;
  if (!path || !*path)
    return lm_errf(err, LOOM_INVALID_ARGUMENT, "no PJRT plugin given (--pjrt-plugin PATH or LOOM_PJRT_PLUGIN; "
                   "pip install xla-cpu-pjrt provides XLA:CPU)");
  if (noptions > 64) return lm_errf(err, LOOM_INVALID_ARGUMENT, "more than 64 PJRT options");
  void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!dl) return lm_errf(err, LOOM_NOT_FOUND, "PJRT plugin %s cannot be loaded: %s", path, dlerror());
  const PJRT_Api *(*get)(void) = (const PJRT_Api *(*)(void))dlsym(dl, "GetPjrtApi");
  if (!get) {
    dlclose(dl);
    return lm_errf(err, LOOM_INVALID_ARGUMENT, "%s is not a PJRT plugin: it does not export GetPjrtApi", path);
  }
  const PJRT_Api *api = get();
  if (!api || api->struct_size < PJRT_Api_STRUCT_SIZE || api->pjrt_api_version.major_version != PJRT_API_MAJOR) {
    int maj = api ? api->pjrt_api_version.major_version : -1, min = api ? api->pjrt_api_version.minor_version : -1;
    dlclose(dl);
    return lm_errf(err, LOOM_UNSUPPORTED, "PJRT plugin %s speaks C API %d.%d; Loom was built for %d.%d", path, maj, min,
                   PJRT_API_MAJOR, PJRT_API_MINOR);
  }
  lm_pjrt *p = calloc(1, sizeof *p);
  if (!p) {
    dlclose(dl);
    return lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  }
  p->dl = dl;
  p->api = api;
  pthread_mutex_init(&p->mu, NULL);
  p->path = strdup(path);
  if (!p->path) {
    lm_pjrt_close(p);
    return lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  }
  int rc = 0;
  {
    ARGS(PJRT_Plugin_Initialize_Args, a);
    PJRT_Error *e = api->PJRT_Plugin_Initialize(&a);
    if (e) rc = fail(p, e, "PJRT_Plugin_Initialize", err);
  }
  PJRT_NamedValue nv[64];
  for (int i = 0; rc == 0 && i < noptions; i++) rc = named_value(options[i], &nv[i], err);
  if (rc == 0) {
    ARGS(PJRT_Client_Create_Args, a);
    a.create_options = nv;
    a.num_options = (size_t)noptions;
    PJRT_Error *e = api->PJRT_Client_Create(&a);
    if (e) rc = fail(p, e, "PJRT_Client_Create", err);
    else p->client = a.client;
  }
  if (rc == 0) {
    ARGS(PJRT_Client_AddressableDevices_Args, a);
    a.client = p->client;
    PJRT_Error *e = api->PJRT_Client_AddressableDevices(&a);
    if (e) rc = fail(p, e, "PJRT_Client_AddressableDevices", err);
    p->devices = a.addressable_devices;
    p->ndevices = a.num_addressable_devices;
    if (rc == 0 && p->ndevices == 0) rc = lm_errf(err, LOOM_NOT_FOUND, "PJRT plugin %s has no devices", path);
  }
  if (rc == 0) {
    ARGS(PJRT_Client_PlatformName_Args, a);
    a.client = p->client;
    if (!api->PJRT_Client_PlatformName(&a))
      snprintf(p->platform, sizeof p->platform, "%.*s", (int)a.platform_name_size, a.platform_name);
    p->host_memory = !strcmp(p->platform, "cpu") && !getenv("LOOM_PJRT_COPY_RESULTS");
    ARGS(PJRT_Device_GetDescription_Args, g);
    g.device = p->devices[0];
    if (!api->PJRT_Device_GetDescription(&g)) {
      ARGS(PJRT_DeviceDescription_Kind_Args, k);
      k.device_description = g.device_description;
      if (!api->PJRT_DeviceDescription_Kind(&k))
        snprintf(p->kind, sizeof p->kind, "%.*s", (int)k.device_kind_size, k.device_kind);
    }
  }
  if (rc < 0) {
    lm_pjrt_close(p);
    return rc;
  }
  *out = p;
  return 0;
}

static void really_close(lm_pjrt *p);

void lm_pjrt_close(lm_pjrt *p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  bool later = p->lent > 0; /* Loom buffers still hold plugin buffers: the client must outlive them */
  p->closing = later;
  pthread_mutex_unlock(&p->mu);
  if (!later) really_close(p);
}

static void really_close(lm_pjrt *p) {
  if (p->client) {
    ARGS(PJRT_Client_Destroy_Args, a);
    a.client = p->client;
    PJRT_Error *e = p->api->PJRT_Client_Destroy(&a);
    if (e) {
      lm_err ignored;
      fail(p, e, "PJRT_Client_Destroy", &ignored);
    }
  }
  /* the plugin stays loaded: plugins keep threads and static state that dlclose would pull out
   * from under them */
  free(p->path);
  pthread_mutex_destroy(&p->mu);
  free(p);
}

int lm_pjrt_device_count(const lm_pjrt *p) { return (int)p->ndevices; }
const char *lm_pjrt_platform(const lm_pjrt *p) { return p->platform; }
const char *lm_pjrt_device_kind(const lm_pjrt *p) { return p->kind; }

int lm_pjrt_compile(lm_pjrt *p, const void *code, size_t len, uint32_t nresults, lm_pjrt_exe **out, lm_err *err) {
  *out = NULL;
  Loom__Pjrt__ExecutableBuildOptions bo = LOOM__PJRT__EXECUTABLE_BUILD_OPTIONS__INIT;
  bo.has_num_replicas = bo.has_num_partitions = 1;
  bo.num_replicas = 1;
  bo.num_partitions = 1;
  Loom__Pjrt__CompileOptions co = LOOM__PJRT__COMPILE_OPTIONS__INIT;
  co.executable_build_options = &bo;
  co.has_compile_portable_executable = 1; /* one executable for every device of the client */
  co.compile_portable_executable = 1;
  uint8_t opts[64];
  size_t nopts = loom__pjrt__compile_options__get_packed_size(&co);
  if (nopts > sizeof opts) return lm_errf(err, LOOM_INTERNAL, "compile options too large");
  loom__pjrt__compile_options__pack(&co, opts);
  PJRT_Program prog = {.struct_size = PJRT_Program_STRUCT_SIZE, .code = (char *)code, .code_size = len,
                       .format = "mlir", .format_size = 4};
  ARGS(PJRT_Client_Compile_Args, a);
  a.client = p->client;
  a.program = &prog;
  a.compile_options = (const char *)opts;
  a.compile_options_size = nopts;
  CALL(p, PJRT_Client_Compile, a, err);
  lm_pjrt_exe *x = calloc(1, sizeof *x);
  if (!x) {
    ARGS(PJRT_LoadedExecutable_Destroy_Args, d);
    d.executable = a.executable;
    p->api->PJRT_LoadedExecutable_Destroy(&d);
    return lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  }
  x->p = p;
  x->exe = a.executable;
  ARGS(PJRT_LoadedExecutable_GetExecutable_Args, g);
  g.loaded_executable = x->exe;
  PJRT_Error *e = p->api->PJRT_LoadedExecutable_GetExecutable(&g);
  int rc = e ? fail(p, e, "PJRT_LoadedExecutable_GetExecutable", err) : 0;
  if (rc == 0) {
    ARGS(PJRT_Executable_NumOutputs_Args, n);
    n.executable = g.executable;
    e = p->api->PJRT_Executable_NumOutputs(&n);
    if (e) rc = fail(p, e, "PJRT_Executable_NumOutputs", err);
    x->nout = n.num_outputs;
    ARGS(PJRT_Executable_Destroy_Args, d);
    d.executable = g.executable;
    p->api->PJRT_Executable_Destroy(&d);
  }
  if (rc == 0 && x->nout != nresults)
    rc = lm_errf(err, LOOM_UNSUPPORTED, "PJRT plugin %s compiled the program to %zu outputs; it has %u results (tuple or "
                 "token results are not supported through PJRT)", p->path, x->nout, nresults);
  if (rc < 0) {
    lm_pjrt_exe_free(x);
    return rc;
  }
  *out = x;
  return 0;
}

void lm_pjrt_exe_free(lm_pjrt_exe *x) {
  if (!x) return;
  ARGS(PJRT_LoadedExecutable_Destroy_Args, d);
  d.executable = x->exe;
  PJRT_Error *e = x->p->api->PJRT_LoadedExecutable_Destroy(&d);
  if (e) {
    lm_err ignored;
    fail(x->p, e, "PJRT_LoadedExecutable_Destroy", &ignored);
  }
  free(x);
}

static PJRT_Buffer_Type pjrt_type(lm_dtype t) {
  switch (t) {
    case LOOM_DTYPE_PRED: return PJRT_Buffer_Type_PRED;
    case LOOM_DTYPE_S8: return PJRT_Buffer_Type_S8;
    case LOOM_DTYPE_S16: return PJRT_Buffer_Type_S16;
    case LOOM_DTYPE_S32: return PJRT_Buffer_Type_S32;
    case LOOM_DTYPE_S64: return PJRT_Buffer_Type_S64;
    case LOOM_DTYPE_U8: return PJRT_Buffer_Type_U8;
    case LOOM_DTYPE_U16: return PJRT_Buffer_Type_U16;
    case LOOM_DTYPE_U32: return PJRT_Buffer_Type_U32;
    case LOOM_DTYPE_U64: return PJRT_Buffer_Type_U64;
    case LOOM_DTYPE_F16: return PJRT_Buffer_Type_F16;
    case LOOM_DTYPE_BF16: return PJRT_Buffer_Type_BF16;
    case LOOM_DTYPE_F32: return PJRT_Buffer_Type_F32;
    case LOOM_DTYPE_F64: return PJRT_Buffer_Type_F64;
    case LOOM_DTYPE_C64: return PJRT_Buffer_Type_C64;
    case LOOM_DTYPE_C128: return PJRT_Buffer_Type_C128;
    default: return PJRT_Buffer_Type_INVALID;
  }
}

static void destroy_buffers(lm_pjrt *p, PJRT_Buffer **b, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (b[i]) {
      ARGS(PJRT_Buffer_Destroy_Args, d);
      d.buffer = b[i];
      PJRT_Error *e = p->api->PJRT_Buffer_Destroy(&d);
      if (e) {
        lm_err ignored;
        fail(p, e, "PJRT_Buffer_Destroy", &ignored);
      }
      b[i] = NULL;
    }
}

/* A plugin buffer over a Loom buffer's memory: zero-copy where the plugin allows it (CPU), the
 * Loom buffer staying alive and unchanged until the run is over. *done fires once the plugin no
 * longer reads the host memory: after the buffer is destroyed, for zero-copy. */
static int to_device(lm_pjrt *p, PJRT_Device *dev, const lm_buffer *b, PJRT_Buffer **out, PJRT_Event **done,
                     lm_err *err) {
  if (b->type.kind != LM_TYPE_TENSOR) return lm_errf(err, LOOM_UNSUPPORTED, "PJRT: tuple or token arguments");
  PJRT_Buffer_Type t = pjrt_type(b->type.dtype);
  if (t == PJRT_Buffer_Type_INVALID) return lm_errf(err, LOOM_UNSUPPORTED, "PJRT: element type %s", lm_dtype_name(b->type.dtype));
  static const char zero[64] __attribute__((aligned(64)));
  ARGS(PJRT_Client_BufferFromHostBuffer_Args, a);
  a.client = p->client;
  a.data = b->data ? b->data : zero;
  a.type = t;
  a.dims = b->type.dims;
  a.num_dims = (size_t)b->type.rank;
  a.host_buffer_semantics = PJRT_HostBufferSemantics_kImmutableZeroCopy;
  a.device = dev;
  CALL(p, PJRT_Client_BufferFromHostBuffer, a, err);
  *out = a.buffer;
  *done = a.done_with_host_buffer;
  return 0;
}

typedef struct lent_buf {
  lm_pjrt *p;
  PJRT_Buffer *b;
} lent_buf;

static void give_back(void *ctx) {
  lent_buf *l = ctx;
  lm_pjrt *p = l->p;
  destroy_buffers(p, &l->b, 1);
  free(l);
  pthread_mutex_lock(&p->mu);
  bool last = --p->lent == 0 && p->closing;
  pthread_mutex_unlock(&p->mu);
  if (last) really_close(p);
}

/* A plugin output in host memory becomes a Loom buffer over that memory, no copy: when the plugin
 * says where it is, it is dense row-major (the plugin's default layout, no padding) and 64-byte
 * aligned. false: copy it (nothing taken). */
static bool hand_over(lm_pjrt *p, PJRT_Buffer *b, const lm_type *t, lm_device *dev, lm_buffer **out) {
  size_t nbytes = lm_type_nbytes(t);
  if (!nbytes || t->kind != LM_TYPE_TENSOR) return false;
  ARGS(PJRT_Buffer_OnDeviceSizeInBytes_Args, sz);
  sz.buffer = b;
  PJRT_Error *e = p->api->PJRT_Buffer_OnDeviceSizeInBytes(&sz);
  lm_err ignored;
  if (e) return fail(p, e, "PJRT_Buffer_OnDeviceSizeInBytes", &ignored), false;
  if (sz.on_device_size_in_bytes != nbytes) return false;
  ARGS(PJRT_Buffer_GetMemoryLayout_Args, ly);
  ly.buffer = b;
  if ((e = p->api->PJRT_Buffer_GetMemoryLayout(&ly))) return fail(p, e, "PJRT_Buffer_GetMemoryLayout", &ignored), false;
  if (ly.layout.type != PJRT_Buffer_MemoryLayout_Type_Tiled || ly.layout.tiled.num_tiles ||
      ly.layout.tiled.minor_to_major_size != t->rank)
    return false;
  for (int i = 0; i < t->rank; i++)
    if (ly.layout.tiled.minor_to_major[i] != t->rank - 1 - i) return false;
  ARGS(PJRT_Buffer_UnsafePointer_Args, up);
  up.buffer = b;
  if ((e = p->api->PJRT_Buffer_UnsafePointer(&up))) return fail(p, e, "PJRT_Buffer_UnsafePointer", &ignored), false;
  void *data = (void *)up.buffer_pointer;
  if (!data || ((uintptr_t)data & 63)) return false;
  lent_buf *l = malloc(sizeof *l);
  if (!l) return false;
  *l = (lent_buf){p, b};
  pthread_mutex_lock(&p->mu);
  p->lent++;
  pthread_mutex_unlock(&p->mu);
  if (lm_buffer_wrap(dev, t, data, give_back, l, out, &ignored) < 0) {
    pthread_mutex_lock(&p->mu);
    p->lent--; /* the client is not closing: the caller still runs on it */
    pthread_mutex_unlock(&p->mu);
    free(l);
    return false;
  }
  return true;
}

int lm_pjrt_run(lm_pjrt_exe *x, int device, lm_buffer *const *args, uint32_t nargs, lm_device *dev,
                const lm_type *result_types, lm_buffer **res, uint32_t nres, lm_err *err) {
  lm_pjrt *p = x->p;
  if (device < 0 || (size_t)device >= p->ndevices)
    return lm_errf(err, LOOM_INVALID_ARGUMENT, "PJRT device %d of %zu", device, p->ndevices);
  if (nres != x->nout) return lm_errf(err, LOOM_INTERNAL, "PJRT run with %u results for %zu outputs", nres, x->nout);
  PJRT_Buffer **in = calloc(nargs ? nargs : 1, sizeof *in), **outb = calloc(nres ? nres : 1, sizeof *outb);
  PJRT_Event **released = calloc(nargs ? nargs : 1, sizeof *released);
  int rc = in && outb && released ? 0 : lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  for (uint32_t i = 0; rc == 0 && i < nres; i++) res[i] = NULL;
  for (uint32_t i = 0; rc == 0 && i < nargs; i++) rc = to_device(p, p->devices[device], args[i], &in[i], &released[i], err);
  if (rc == 0) {
    ARGS(PJRT_ExecuteOptions, eo);
    ARGS(PJRT_LoadedExecutable_Execute_Args, a);
    PJRT_Buffer *const *lists[1] = {in};
    PJRT_Buffer **olists[1] = {outb};
    PJRT_Event *done[1] = {NULL};
    a.executable = x->exe;
    a.options = &eo;
    a.argument_lists = lists;
    a.num_devices = 1;
    a.num_args = nargs;
    a.output_lists = olists;
    a.device_complete_events = done;
    a.execute_device = p->devices[device];
    PJRT_Error *e = p->api->PJRT_LoadedExecutable_Execute(&a);
    if (e) rc = fail(p, e, "PJRT_LoadedExecutable_Execute", err);
    else rc = await_event(p, done[0], err);
  }
  for (uint32_t i = 0; rc == 0 && i < nres; i++) {
    ARGS(PJRT_Buffer_ElementType_Args, et);
    et.buffer = outb[i];
    ARGS(PJRT_Buffer_Dimensions_Args, dm);
    dm.buffer = outb[i];
    PJRT_Error *e0 = p->api->PJRT_Buffer_ElementType(&et);
    if (!e0) e0 = p->api->PJRT_Buffer_Dimensions(&dm);
    if (e0) {
      rc = fail(p, e0, "PJRT_Buffer_Dimensions", err);
      break;
    }
    const lm_type *want = &result_types[i];
    if (et.type != pjrt_type(want->dtype) || dm.num_dims != (size_t)want->rank ||
        (want->rank && memcmp(dm.dims, want->dims, (size_t)want->rank * sizeof *dm.dims))) {
      char buf[128];
      rc = lm_errf(err, LOOM_INTERNAL, "PJRT plugin %s: output %u is not the program's result type %s", p->path, i,
                   lm_type_str(want, buf, sizeof buf));
      break;
    }
    if (p->host_memory && hand_over(p, outb[i], want, dev, &res[i])) {
      outb[i] = NULL; /* the Loom buffer holds it now */
      continue;
    }
    rc = lm_buffer_alloc(dev, want, &res[i], err);
    if (rc < 0) break;
    if (!res[i]->nbytes) continue;
    ARGS(PJRT_Buffer_ToHostBuffer_Args, t);
    t.src = outb[i];
    t.dst = res[i]->data;
    t.dst_size = res[i]->nbytes;
    PJRT_Error *e = p->api->PJRT_Buffer_ToHostBuffer(&t);
    if (e) rc = fail(p, e, "PJRT_Buffer_ToHostBuffer", err);
    else rc = await_event(p, t.event, err);
  }
  if (rc < 0)
    for (uint32_t i = 0; i < nres; i++) {
      lm_buffer_release(res[i]);
      res[i] = NULL;
    }
  if (in) destroy_buffers(p, in, nargs);
  if (outb) destroy_buffers(p, outb, nres);
  for (uint32_t i = 0; released && i < nargs; i++) { /* the inputs' memory is Loom's again */
    lm_err e2;
    if (await_event(p, released[i], &e2) < 0 && rc == 0) rc = lm_errf(err, e2.code, "%s", e2.msg);
  }
  free(in);
  free(outb);
  free(released);
  return rc;
}

#endif
