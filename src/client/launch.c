/* Executables, launches and futures in libloom. A launch is one LAUNCH request to the
 * controller whose reply comes when the launch has run everywhere: its pending call (cconn.h)
 * is the future. loom_launch returns at once; output handles name ids the client chose, so
 * they can feed further launches immediately. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "client/client_int.h"
#include "common/dtype.h"

#define fail lm_client_fail
#define failf lm_client_failf

/* ---- futures ---- */

struct lm_fut {
  atomic_int refs;
  loom_client *c;
  pthread_mutex_t mu;
  lm_call *call;             /* until settled and nobody waits on it */
  uint64_t rid;              /* the LAUNCH's request id: what CANCEL_LAUNCH names */
  int waiters;
  bool settled;
  int status;
  char msg[LM_ERR_MSG_MAX];
  uint64_t seq;
};

struct loom_future {
  lm_fut *f;
};

static lm_fut *fut_new(loom_client *c, lm_call *call) {
  lm_fut *f = calloc(1, sizeof *f);
  if (!f) return NULL;
  atomic_init(&f->refs, 1);
  f->c = c;
  f->call = call;
  f->rid = lm_call_request_id(call);
  pthread_mutex_init(&f->mu, NULL);
  return f;
}

lm_fut *lm_fut_ref(lm_fut *f) {
  atomic_fetch_add(&f->refs, 1);
  return f;
}

void lm_fut_unref(lm_fut *f) {
  if (!f || atomic_fetch_sub(&f->refs, 1) != 1) return;
  lm_call_release(f->call); /* a pending launch carries on; its reply is dropped */
  pthread_mutex_destroy(&f->mu);
  free(f);
}

/* Under f->mu: takes the outcome from a completed call; frees the call once nobody waits. */
static void settle_locked(lm_fut *f) {
  if (!f->settled && f->call && lm_call_done(f->call)) {
    lm_reply r;
    lm_err e;
    int rc = lm_call_take_reply(f->call, &r, &e);
    if (rc == 0) {
      if (r.type == LM_MSG_LAUNCH_REPLY) f->seq = ((Lmw__LaunchReply *)r.msg)->seq;
      else rc = lm_errf(&e, LOOM_PROTOCOL, "the controller answered a launch with %s", lm_msg_name(r.type));
      lm_reply_free(&r);
    }
    f->status = rc;
    if (rc < 0) snprintf(f->msg, sizeof f->msg, "%s", e.msg);
    f->settled = true;
  }
  if (f->settled && f->call && f->waiters == 0) {
    lm_call_release(f->call);
    f->call = NULL;
  }
}

int lm_fut_wait(lm_fut *f, int64_t timeout_ms, lm_err *err) {
  pthread_mutex_lock(&f->mu);
  settle_locked(f);
  if (!f->settled) {
    lm_call *call = f->call;
    f->waiters++;
    pthread_mutex_unlock(&f->mu);
    lm_err e;
    int rc = lm_call_wait(call, timeout_ms, f->c->intr, f->c->intr_arg, &e);
    pthread_mutex_lock(&f->mu);
    f->waiters--;
    settle_locked(f);
    if (!f->settled) {
      pthread_mutex_unlock(&f->mu);
      if (err) *err = e;
      return rc; /* LOOM_TIMEOUT or LOOM_CANCELLED */
    }
  }
  int st = f->status;
  if (st < 0 && err) lm_errf(err, st, "%s", f->msg);
  pthread_mutex_unlock(&f->mu);
  return st;
}

loom_status loom_future_wait(loom_future *fu, int64_t timeout_ms) {
  if (!fu) return failf(NULL, LOOM_INVALID_ARGUMENT, "loom_future_wait: future is NULL");
  lm_err err;
  int rc = lm_fut_wait(fu->f, timeout_ms, &err);
  if (rc < 0) return fail(fu->f->c, &err);
  return LOOM_OK;
}

loom_status loom_future_status(loom_future *fu) {
  if (!fu) return LOOM_INVALID_ARGUMENT;
  lm_fut *f = fu->f;
  pthread_mutex_lock(&f->mu);
  settle_locked(f);
  int st = f->settled ? f->status : LOOM_PENDING;
  pthread_mutex_unlock(&f->mu);
  return (loom_status)st;
}

const char *loom_future_errmsg(loom_future *fu) {
  if (!fu) return "";
  lm_fut *f = fu->f;
  pthread_mutex_lock(&f->mu);
  settle_locked(f);
  const char *m = f->settled && f->status < 0 ? f->msg : ""; /* msg never changes once settled */
  pthread_mutex_unlock(&f->mu);
  return m;
}

uint64_t loom_future_sequence(loom_future *fu) {
  if (!fu) return 0;
  lm_fut *f = fu->f;
  pthread_mutex_lock(&f->mu);
  settle_locked(f);
  uint64_t s = f->settled && f->status == 0 ? f->seq : 0;
  pthread_mutex_unlock(&f->mu);
  return s;
}

/* Asks the controller to cancel the launch; returns its final status (see loom.h). */
static int fut_cancel(lm_fut *f, lm_err *err) {
  pthread_mutex_lock(&f->mu);
  settle_locked(f);
  bool settled = f->settled;
  pthread_mutex_unlock(&f->mu);
  if (!settled) {
    loom_client *c = f->c;
    Lmw__CancelLaunch m = LMW__CANCEL_LAUNCH__INIT;
    m.launch = f->rid;
    lm_call *call;
    int rc = lm_cconn_start(c->conn, LM_MSG_CANCEL_LAUNCH, &m.base, NULL, 0, NULL, 0, &call, err);
    if (rc < 0) return rc;
    /* the controller answers the launch (ERROR CANCELLED, or how it completed) before this ACK,
     * on the same connection: once the ACK is in, the future is settled */
    rc = lm_call_wait(call, c->timeout_ms, c->intr, c->intr_arg, err);
    lm_call_release(call);
    if (rc == LOOM_TIMEOUT || rc == LOOM_CANCELLED) {
      const char *how = rc == LOOM_TIMEOUT ? "timed out" : "was interrupted";
      return lm_errf(err, rc, "loom_future_cancel: waiting for the controller %s (the cancel request was sent)", how);
    }
    if (rc < 0 && rc != LOOM_CLOSED && rc != LOOM_UNSUPPORTED) return rc;
    if (rc == LOOM_UNSUPPORTED) /* a controller older than CANCEL_LAUNCH */
      return lm_errf(err, LOOM_UNSUPPORTED, "loom_future_cancel: the controller (%s) cannot cancel launches",
                     lm_cconn_server_software(c->conn));
    /* LOOM_CLOSED: the connection broke; the launch's call completed with that too */
  }
  return lm_fut_wait(f, f->c->timeout_ms, err); /* settled: returns at once */
}

loom_status loom_future_cancel(loom_future *fu) {
  if (!fu) return failf(NULL, LOOM_INVALID_ARGUMENT, "loom_future_cancel: future is NULL");
  lm_err err;
  int rc = fut_cancel(fu->f, &err);
  if (rc < 0) return fail(fu->f->c, &err);
  return LOOM_OK;
}

void loom_future_destroy(loom_future *fu) {
  if (!fu) return;
  lm_fut_unref(fu->f);
  free(fu);
}

/* ---- executables ---- */

typedef struct exe_value {
  loom_dtype dtype;
  int32_t rank;
  int64_t dims[LOOM_MAX_RANK];
  lm_sharding sh;            /* sh.devices = the executable's mesh devices */
} exe_value;

struct loom_executable {
  loom_client *c;
  uint64_t id;
  char form[16];
  int32_t num_replicas, num_partitions, ndev;
  int32_t *devices;          /* by process */
  uint32_t *mesh_udevs;      /* by mesh position (shared by every value's sharding) */
  uint64_t fingerprint;
  int32_t cached;
  int32_t nin, nout;
  exe_value *values;         /* [nin + nout] */
  loom_array **lifted;       /* the program's large constants, put as arrays (consts.c) */
  size_t nlifted;
};

void loom_compile_options_initialize(loom_compile_options *o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  o->struct_size = sizeof *o;
}

void loom_executable_destroy(loom_executable *e) {
  if (!e) return;
  Lmw__ExecutableDestroy d = LMW__EXECUTABLE_DESTROY__INIT;
  d.id = e->id;
  lm_call *call;
  if (lm_cconn_start(e->c->conn, LM_MSG_EXECUTABLE_DESTROY, &d.base, NULL, 0, NULL, 0, &call, NULL) == 0)
    lm_call_release(call);
  free(e->devices);
  free(e->mesh_udevs);
  free(e->values);
  lm_lifted_free(e->lifted, e->nlifted);
  free(e);
}

/* Reads one value's global type and sharding from the reply. */
static int read_value(loom_executable *e, const Lmw__ValueInfo *v, exe_value *out, lm_err *err) {
  if (!v->sharding || !lm_dtype_valid((int)v->dtype) || v->n_dims > LOOM_MAX_RANK ||
      v->sharding->n_mesh_shape > LOOM_MAX_MESH_AXES || v->sharding->n_dims > v->n_dims ||
      v->sharding->n_devices != (size_t)e->ndev)
    return lm_errf(err, LOOM_PROTOCOL, "the controller described an executable's value badly");
  out->dtype = (loom_dtype)v->dtype;
  out->rank = (int32_t)v->n_dims;
  for (size_t d = 0; d < v->n_dims; d++) out->dims[d] = (int64_t)v->dims[d];
  lm_sharding_init(&out->sh);
  out->sh.mesh_rank = (int32_t)v->sharding->n_mesh_shape;
  for (size_t a = 0; a < v->sharding->n_mesh_shape; a++) out->sh.mesh_shape[a] = (int64_t)v->sharding->mesh_shape[a];
  out->sh.ndev = (uint32_t)e->ndev;
  for (size_t d = 0; d < v->sharding->n_dims; d++) {
    const Lmw__DimAxes *da = v->sharding->dims[d];
    if (da->n_axes > LOOM_MAX_MESH_AXES) return lm_errf(err, LOOM_PROTOCOL, "bad sharding from the controller");
    for (size_t j = 0; j < da->n_axes; j++) out->sh.dim_axes[d][j] = (int8_t)da->axes[j];
  }
  if (memcmp(v->sharding->devices, e->mesh_udevs, (size_t)e->ndev * sizeof *e->mesh_udevs) != 0)
    return lm_errf(err, LOOM_PROTOCOL, "the controller described an executable's values over different meshes");
  out->sh.devices = e->mesh_udevs;
  return lm_sharding_check(&out->sh, out->rank, out->dims, err);
}

loom_status loom_compile(loom_client *c, const char *text, size_t len, const loom_compile_options *options,
                         loom_executable **out) {
  if (!out) return failf(c, LOOM_INVALID_ARGUMENT, "loom_compile: out is NULL");
  *out = NULL;
  if (!c || !text) return failf(c, LOOM_INVALID_ARGUMENT, "loom_compile: NULL argument");
  loom_compile_options o;
  loom_compile_options_initialize(&o);
  if (options) {
    if (options->struct_size < offsetof(loom_compile_options, name) || options->struct_size > (1u << 16))
      return failf(c, LOOM_INVALID_ARGUMENT, "loom_compile: options.struct_size is %zu; use loom_compile_options_initialize",
                   options->struct_size);
    memcpy(&o, options, options->struct_size < sizeof o ? options->struct_size : sizeof o);
  }
  if (o.num_devices < 0 || (o.num_devices && !o.devices) || o.num_devices > LM_SHARD_MAX_DEVICES)
    return failf(c, LOOM_INVALID_ARGUMENT, "loom_compile: num_devices %d with%s devices", o.num_devices,
                 o.devices ? "" : "out");
  uint32_t *devs = o.num_devices ? malloc((size_t)o.num_devices * sizeof *devs) : NULL;
  if (o.num_devices && !devs) return failf(c, LOOM_NO_MEMORY, "out of host memory");
  for (int32_t i = 0; i < o.num_devices; i++) {
    if (o.devices[i] < 0) {
      free(devs);
      return failf(c, LOOM_INVALID_ARGUMENT, "loom_compile: device id %d is negative", o.devices[i]);
    }
    devs[i] = (uint32_t)o.devices[i];
  }
  lm_err err;
  char *lifted_text = NULL;
  size_t lifted_len = 0, nlifted = 0;
  loom_array **lifted = NULL;
  if (lm_lift_constants(c, text, len, devs, o.num_devices, &lifted_text, &lifted_len, &lifted, &nlifted, &err) < 0) {
    free(devs);
    lm_err_prefix(&err, "loom_compile");
    return fail(c, &err);
  }
  if (lifted_text) {
    text = lifted_text;
    len = lifted_len;
  }
  uint64_t id = atomic_fetch_add(&c->next_id, 1);
  Lmw__Compile m = LMW__COMPILE__INIT;
  m.id = id;
  m.n_devices = (size_t)o.num_devices;
  m.devices = devs;
  m.name = (char *)(o.name ? o.name : "");
  lm_call *call;
  int rc = lm_cconn_start(c->conn, LM_MSG_COMPILE, &m.base, text, len, NULL, 0, &call, &err);
  free(devs);
  free(lifted_text); /* the start copied or sent it */
  if (rc < 0) {
    lm_lifted_free(lifted, nlifted);
    return fail(c, &err);
  }
  rc = lm_call_wait(call, c->timeout_ms, c->intr, c->intr_arg, &err);
  lm_reply r = {0};
  if (rc == 0) rc = lm_call_take_reply(call, &r, &err);
  lm_call_release(call);
  if (rc < 0) {
    lm_lifted_free(lifted, nlifted);
    return fail(c, &err);
  }
  loom_executable *e = NULL;
  const Lmw__CompileReply *cr = (const Lmw__CompileReply *)r.msg;
  if (r.type != LM_MSG_COMPILE_REPLY || cr->n_devices == 0 || cr->n_devices > LM_SHARD_MAX_DEVICES ||
      cr->n_inputs > 65536 || cr->n_outputs > 65536)
    rc = lm_errf(&err, LOOM_PROTOCOL, "the controller answered COMPILE with a malformed %s", lm_msg_name(r.type));
  if (rc == 0) {
    e = calloc(1, sizeof *e);
    size_t nv = cr->n_inputs + cr->n_outputs;
    if (e) {
      e->devices = malloc(cr->n_devices * sizeof *e->devices);
      e->mesh_udevs = calloc(cr->n_devices, sizeof *e->mesh_udevs);
      e->values = calloc(nv ? nv : 1, sizeof *e->values);
    }
    if (!e || !e->devices || !e->mesh_udevs || !e->values) {
      rc = lm_errf(&err, LOOM_NO_MEMORY, "out of host memory");
    } else {
      e->c = c;
      e->id = id;
      snprintf(e->form, sizeof e->form, "%s", cr->form);
      e->num_replicas = (int32_t)cr->num_replicas;
      e->num_partitions = (int32_t)cr->num_partitions;
      e->ndev = (int32_t)cr->n_devices;
      for (size_t i = 0; i < cr->n_devices; i++) e->devices[i] = (int32_t)cr->devices[i];
      e->fingerprint = cr->fingerprint;
      e->cached = cr->cached ? 1 : 0;
      e->nin = (int32_t)cr->n_inputs;
      e->nout = (int32_t)cr->n_outputs;
      /* the mesh's device order comes with the values (all share it); with none, the process order */
      const Lmw__ValueInfo *v0 = nv ? (cr->n_inputs ? cr->inputs[0] : cr->outputs[0]) : NULL;
      bool from_v0 = v0 && v0->sharding && v0->sharding->n_devices == cr->n_devices;
      for (int32_t i = 0; i < e->ndev; i++) {
        e->mesh_udevs[i] = from_v0 ? v0->sharding->devices[i] : (uint32_t)e->devices[i];
      }
      for (size_t i = 0; rc == 0 && i < nv; i++)
        rc = read_value(e, i < cr->n_inputs ? cr->inputs[i] : cr->outputs[i - cr->n_inputs], &e->values[i], &err);
    }
  }
  lm_reply_free(&r);
  if (rc < 0) {
    if (e && e->c) loom_executable_destroy(e);
    else if (e) {
      free(e->devices), free(e->mesh_udevs), free(e->values), free(e);
    }
    lm_lifted_free(lifted, nlifted);
    return fail(c, &err);
  }
  e->lifted = lifted;
  e->nlifted = nlifted;
  *out = e;
  return LOOM_OK;
}

loom_status loom_executable_info_get(const loom_executable *e, loom_executable_info *out) {
  if (!e || !out) return failf(e ? e->c : NULL, LOOM_INVALID_ARGUMENT, "loom_executable_info_get: NULL argument");
  if (out->struct_size < offsetof(loom_executable_info, num_replicas) || out->struct_size > (1u << 16))
    return failf(e->c, LOOM_INVALID_ARGUMENT, "loom_executable_info_get: out->struct_size is %zu", out->struct_size);
  loom_executable_info full = {
      .struct_size = sizeof full,
      .form = e->form,
      .num_replicas = e->num_replicas,
      .num_partitions = e->num_partitions,
      .num_devices = e->ndev,
      .devices = e->devices,
      .num_inputs = e->nin,
      .num_outputs = e->nout,
      .fingerprint = e->fingerprint,
      .cached = e->cached,
  };
  size_t keep = out->struct_size;
  memcpy(out, &full, keep < sizeof full ? keep : sizeof full);
  out->struct_size = keep;
  return LOOM_OK;
}

static loom_status value_query(const loom_executable *e, int32_t index, bool input, loom_array_spec *spec,
                               loom_sharding *sharding) {
  const char *fn = input ? "loom_executable_input" : "loom_executable_output";
  if (!e) return failf(NULL, LOOM_INVALID_ARGUMENT, "%s: executable is NULL", fn);
  int32_t n = input ? e->nin : e->nout;
  if (index < 0 || index >= n)
    return failf(e->c, LOOM_NOT_FOUND, "%s: the executable has %d %s (index %d)", fn, n, input ? "inputs" : "outputs",
                 index);
  const exe_value *v = &e->values[input ? index : e->nin + index];
  if (spec) {
    if (spec->struct_size < offsetof(loom_array_spec, dims) || spec->struct_size > (1u << 16))
      return failf(e->c, LOOM_INVALID_ARGUMENT, "%s: spec->struct_size is %zu", fn, spec->struct_size);
    loom_array_spec full;
    memset(&full, 0, sizeof full);
    full.struct_size = sizeof full;
    full.dtype = v->dtype;
    full.rank = v->rank;
    memcpy(full.dims, v->dims, sizeof full.dims);
    size_t keep = spec->struct_size;
    memcpy(spec, &full, keep < sizeof full ? keep : sizeof full);
    spec->struct_size = keep;
  }
  if (sharding) {
    if (sharding->struct_size < offsetof(loom_sharding, devices) + sizeof sharding->devices ||
        sharding->struct_size > (1u << 16))
      return failf(e->c, LOOM_INVALID_ARGUMENT, "%s: sharding->struct_size is %zu", fn, sharding->struct_size);
    lm_sharding_to_public(&v->sh, sharding);
  }
  return LOOM_OK;
}

loom_status loom_executable_input(const loom_executable *e, int32_t index, loom_array_spec *spec,
                                  loom_sharding *sharding) {
  return value_query(e, index, true, spec, sharding);
}

loom_status loom_executable_output(const loom_executable *e, int32_t index, loom_array_spec *spec,
                                   loom_sharding *sharding) {
  return value_query(e, index, false, spec, sharding);
}

/* ---- launches ---- */

void loom_launch_options_initialize(loom_launch_options *o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  o->struct_size = sizeof *o;
}

loom_status loom_launch(loom_executable *e, loom_array *const *inputs, int32_t num_inputs,
                        const loom_launch_options *options, loom_array **outputs, int32_t num_outputs,
                        loom_future **out_future) {
  if (out_future) *out_future = NULL;
  if (!e) return failf(NULL, LOOM_INVALID_ARGUMENT, "loom_launch: executable is NULL");
  loom_client *c = e->c;
  if (options && (options->struct_size < sizeof(size_t) || options->struct_size > (1u << 16)))
    return failf(c, LOOM_INVALID_ARGUMENT, "loom_launch: options.struct_size is %zu", options->struct_size);
  if (num_inputs != e->nin || num_outputs != e->nout || (num_inputs && !inputs) || (num_outputs && !outputs))
    return failf(c, LOOM_INVALID_ARGUMENT, "loom_launch: the executable takes %d inputs and returns %d outputs (got %d and %d%s)",
                 e->nin, e->nout, num_inputs, num_outputs, (num_inputs && !inputs) || (num_outputs && !outputs) ? ", NULL arrays" : "");
  uint64_t in_small[16], out_small[16];
  uint64_t *in_ids = num_inputs <= 16 ? in_small : malloc((size_t)num_inputs * sizeof *in_ids);
  uint64_t *out_ids = num_outputs <= 16 ? out_small : malloc((size_t)num_outputs * sizeof *out_ids);
  loom_status st = LOOM_OK;
  if (!in_ids || !out_ids) st = failf(c, LOOM_NO_MEMORY, "out of host memory");
  for (int32_t i = 0; st == LOOM_OK && i < num_inputs; i++) {
    const loom_array *a = inputs[i];
    if (!a || a->c != c)
      st = failf(c, LOOM_INVALID_ARGUMENT, "loom_launch: input %d is %s", i, a ? "an array of another client" : "NULL");
    else if (atomic_load(&a->deleted))
      st = failf(c, LOOM_NOT_FOUND, "loom_launch: input %d (array %llu) was deleted", i, (unsigned long long)a->id);
    else
      in_ids[i] = a->id;
  }
  for (int32_t j = 0; st == LOOM_OK && j < num_outputs; j++) out_ids[j] = atomic_fetch_add(&c->next_id, 1);
  lm_call *call = NULL;
  if (st == LOOM_OK) {
    Lmw__Launch m = LMW__LAUNCH__INIT;
    m.executable = e->id;
    m.n_inputs = (size_t)num_inputs;
    m.inputs = in_ids;
    m.n_outputs = (size_t)num_outputs;
    m.outputs = out_ids;
    lm_err err;
    if (lm_cconn_start(c->conn, LM_MSG_LAUNCH, &m.base, NULL, 0, NULL, 0, &call, &err) < 0) st = fail(c, &err);
  }
  lm_fut *f = st == LOOM_OK ? fut_new(c, call) : NULL;
  loom_future *fu = f && out_future ? calloc(1, sizeof *fu) : NULL;
  if (st == LOOM_OK && (!f || (out_future && !fu))) {
    if (f) lm_fut_unref(f); /* releases the call: the launch goes on without us */
    else lm_call_release(call);
    free(fu);
    f = NULL;
    st = failf(c, LOOM_NO_MEMORY, "out of host memory");
  }
  for (int32_t j = 0; st == LOOM_OK && j < num_outputs; j++) {
    const exe_value *v = &e->values[e->nin + j];
    outputs[j] = lm_array_new(c, out_ids[j], v->dtype, v->rank, v->dims, &v->sh, f);
    if (!outputs[j]) {
      for (int32_t k = 0; k < j; k++) loom_array_release(outputs[k]), outputs[k] = NULL;
      st = failf(c, LOOM_NO_MEMORY, "out of host memory");
    }
  }
  if (st == LOOM_OK && fu) {
    fu->f = lm_fut_ref(f);
    *out_future = fu;
  } else {
    free(fu);
  }
  if (f) lm_fut_unref(f);
  if (in_ids != in_small) free(in_ids);
  if (out_ids != out_small) free(out_ids);
  return st;
}
