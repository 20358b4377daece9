/* loom._loom: the CPython binding of libloom (include/loom/loom.h). Thin on purpose: one Python
 * type per handle (Client, Array, Executable, Future), numpy data passed by pointer through the
 * buffer protocol (no copy on this side), the GIL released around every call that talks to the
 * cluster, Ctrl-C turned into KeyboardInterrupt through the client's interrupt hook, and
 * statuses raised as the exception classes python/loom/errors.py registers. The friendly API
 * (dtypes, shardings, pytrees, JAX) is written in Python on top of this. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include "loom/loom.h"

/* ---- errors ---- */

static PyObject *g_errors;    /* dict: status code -> exception class (set by _init) */
static PyObject *g_error_base; /* LoomError: for codes the dict lacks */

/* Raises the exception class of status st with message msg. When the interrupt hook already
 * set an exception (KeyboardInterrupt from Ctrl-C), that one propagates instead. Returns NULL. */
static PyObject *raise_status(loom_status st, const char *msg) {
  if (PyErr_Occurred()) return NULL;
  PyObject *cls = NULL;
  if (g_errors) {
    PyObject *key = PyLong_FromLong((long)st);
    if (!key) return NULL;
    cls = PyDict_GetItemWithError(g_errors, key); /* borrowed */
    Py_DECREF(key);
    if (!cls && PyErr_Occurred()) return NULL;
  }
  if (!cls) cls = g_error_base ? g_error_base : PyExc_RuntimeError;
  const char *text = msg && msg[0] ? msg : loom_strerror(st);
  PyObject *exc = PyObject_CallFunction(cls, "si", text, (int)st);
  if (!exc) return NULL;
  PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
  Py_DECREF(exc);
  return NULL;
}

/* The interrupt hook every client gets: polled by libloom every ~50 ms while a call waits with
 * the GIL released. Runs Python's signal handlers (main thread only; elsewhere this is a no-op),
 * so Ctrl-C raises KeyboardInterrupt there and stops the wait. */
static int py_interrupt(void *arg) {
  (void)arg;
#if PY_VERSION_HEX >= 0x030D0000
  if (Py_IsFinalizing()) return 0;
#else
  if (_Py_IsFinalizing()) return 0;
#endif
  PyGILState_STATE g = PyGILState_Ensure();
  int stop = PyErr_Occurred() != NULL || PyErr_CheckSignals() < 0;
  PyGILState_Release(g);
  return stop;
}

/* Copies the client's last error message (read in the calling thread, right after the call). */
#define MSG_CAP 1024
static void grab_msg(const loom_client *c, char *buf) {
  const char *m = loom_errmsg(c);
  snprintf(buf, MSG_CAP, "%s", m ? m : "");
}

/* ---- objects ---- */

typedef struct ClientObject ClientObject;

/* Every handle object starts with this: its owning client (a strong reference) and a place in
 * the client's list, so closing the client frees every handle first (loom.h requires it). */
typedef struct Child {
  PyObject_HEAD
  ClientObject *owner;
  struct Child *prev, *next;
  void (*free_handle)(struct Child *); /* frees the C handle and sets it NULL */
} Child;

struct ClientObject {
  PyObject_HEAD
  loom_client *c;   /* NULL once closed */
  Child *children;  /* live handle objects */
  int busy;         /* calls in progress with the GIL released */
  PyObject *weakrefs;
};

typedef struct {
  Child base;
  loom_array *a;
} ArrayObject;

typedef struct {
  Child base;
  loom_executable *e;
  int32_t n_in, n_out;
} ExecutableObject;

typedef struct {
  Child base;
  loom_future *f;
} FutureObject;

static PyTypeObject ClientType, ArrayType, ExecutableType, FutureType;

static void child_link(Child *ch, ClientObject *owner, void (*free_handle)(Child *)) {
  Py_INCREF(owner);
  ch->owner = owner;
  ch->free_handle = free_handle;
  ch->prev = NULL;
  ch->next = owner->children;
  if (owner->children) owner->children->prev = ch;
  owner->children = ch;
}

static void child_unlink(Child *ch) {
  ClientObject *o = ch->owner;
  if (!o) return;
  if (ch->prev) ch->prev->next = ch->next;
  else o->children = ch->next;
  if (ch->next) ch->next->prev = ch->prev;
  ch->prev = ch->next = NULL;
  ch->owner = NULL;
  Py_DECREF(o);
}


static PyObject *closed_error(void) { return raise_status(LOOM_CLOSED, "the client is closed"); }

/* Brackets a call that releases the GIL: the client must stay open meanwhile. */
#define CALL_BEGIN(owner) \
  do {                    \
    (owner)->busy++;      \
    Py_BEGIN_ALLOW_THREADS
#define CALL_END(owner)  \
  Py_END_ALLOW_THREADS   \
  (owner)->busy--;       \
  }                      \
  while (0)

/* ---- conversions ---- */

static int dims_from(PyObject *seq, int64_t *dims, int32_t *rank) {
  PyObject *fast = PySequence_Fast(seq, "dims must be a sequence of ints");
  if (!fast) return -1;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
  if (n > LOOM_MAX_RANK) {
    Py_DECREF(fast);
    PyErr_Format(PyExc_ValueError, "rank %zd exceeds Loom's limit of %d", n, LOOM_MAX_RANK);
    return -1;
  }
  for (Py_ssize_t i = 0; i < n; i++) {
    long long v = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(fast, i));
    if (v == -1 && PyErr_Occurred()) {
      Py_DECREF(fast);
      return -1;
    }
    dims[i] = v;
  }
  *rank = (int32_t)n;
  Py_DECREF(fast);
  return 0;
}

static PyObject *dims_to(int32_t rank, const int64_t *dims) {
  PyObject *t = PyTuple_New(rank);
  if (!t) return NULL;
  for (int32_t i = 0; i < rank; i++) {
    PyObject *v = PyLong_FromLongLong(dims[i]);
    if (!v) {
      Py_DECREF(t);
      return NULL;
    }
    PyTuple_SET_ITEM(t, i, v);
  }
  return t;
}

/* A sharding crosses as (mesh_shape, devices, dim_axes): tuples of ints, dim_axes one tuple of
 * mesh axes per array dimension. devbuf receives the device ids (s->devices points into it). */
typedef struct {
  int32_t ids[1024];
  int32_t *heap;
} devbuf;

/* Device ids from a sequence of ints into db (db->heap when they do not fit db->ids; the caller
 * frees it with PyMem_Free), each checked to fit int32. */
static int ids_from(PyObject *seq, devbuf *db, int32_t *n_out) {
  db->heap = NULL;
  PyObject *fd = PySequence_Fast(seq, "devices must be a sequence of ints");
  if (!fd) return -1;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(fd);
  if (n > INT32_MAX) {
    Py_DECREF(fd);
    PyErr_SetString(PyExc_ValueError, "too many devices");
    return -1;
  }
  int32_t *ids = db->ids;
  if ((size_t)n > sizeof db->ids / sizeof db->ids[0]) {
    ids = db->heap = PyMem_Malloc((size_t)n * sizeof *ids);
    if (!ids) {
      Py_DECREF(fd);
      PyErr_NoMemory();
      return -1;
    }
  }
  for (Py_ssize_t i = 0; i < n; i++) {
    long v = PyLong_AsLong(PySequence_Fast_GET_ITEM(fd, i));
    if ((v == -1 && PyErr_Occurred()) || v < INT32_MIN || v > INT32_MAX) {
      Py_DECREF(fd);
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "device id out of range");
      PyMem_Free(db->heap);
      db->heap = NULL;
      return -1;
    }
    ids[i] = (int32_t)v;
  }
  Py_DECREF(fd);
  *n_out = (int32_t)n;
  return 0;
}

static int sharding_from(PyObject *obj, loom_sharding *s, devbuf *db) {
  loom_sharding_initialize(s);
  db->heap = NULL;
  PyObject *mesh, *devs, *axes;
  if (!PyArg_ParseTuple(obj, "OOO;a sharding is (mesh_shape, devices, dim_axes)", &mesh, &devs, &axes)) return -1;
  int64_t shape[LOOM_MAX_RANK];
  int32_t mr;
  if (dims_from(mesh, shape, &mr) < 0) return -1;
  if (mr > LOOM_MAX_MESH_AXES) {
    PyErr_Format(PyExc_ValueError, "a mesh of %d axes exceeds Loom's limit of %d", mr, LOOM_MAX_MESH_AXES);
    return -1;
  }
  s->mesh_rank = mr;
  for (int32_t i = 0; i < mr; i++) s->mesh_shape[i] = shape[i];
  int32_t n;
  if (ids_from(devs, db, &n) < 0) return -1;
  if (n < 1) {
    PyErr_SetString(PyExc_ValueError, "a sharding needs at least one device");
    return -1;
  }
  s->num_devices = n;
  s->devices = db->heap ? db->heap : db->ids;
  PyObject *fa = PySequence_Fast(axes, "dim_axes must be a sequence of sequences");
  if (!fa) return -1;
  Py_ssize_t rank = PySequence_Fast_GET_SIZE(fa);
  if (rank > LOOM_MAX_RANK) {
    Py_DECREF(fa);
    PyErr_Format(PyExc_ValueError, "dim_axes has %zd entries; the rank limit is %d", rank, LOOM_MAX_RANK);
    return -1;
  }
  for (Py_ssize_t d = 0; d < rank; d++) {
    int64_t ax[LOOM_MAX_RANK];
    int32_t k;
    if (dims_from(PySequence_Fast_GET_ITEM(fa, d), ax, &k) < 0) {
      Py_DECREF(fa);
      return -1;
    }
    if (k > LOOM_MAX_MESH_AXES) {
      Py_DECREF(fa);
      PyErr_SetString(PyExc_ValueError, "too many mesh axes on one dimension");
      return -1;
    }
    for (int32_t j = 0; j < k; j++) {
      if (ax[j] < 0 || ax[j] >= mr) {
        Py_DECREF(fa);
        PyErr_Format(PyExc_ValueError, "dimension %zd names mesh axis %lld; the mesh has %d axes", d,
                     (long long)ax[j], mr);
        return -1;
      }
      s->dim_axes[d][j] = (int8_t)ax[j];
    }
  }
  Py_DECREF(fa);
  return 0;
}

static PyObject *sharding_to(const loom_sharding *s) {
  int32_t mr = s->mesh_rank;
  PyObject *mesh = dims_to(mr, s->mesh_shape);
  PyObject *devs = PyTuple_New(s->num_devices);
  PyObject *axes = PyList_New(0);
  if (!mesh || !devs || !axes) goto fail;
  for (int32_t i = 0; i < s->num_devices; i++) {
    PyObject *v = PyLong_FromLong(s->devices[i]);
    if (!v) goto fail;
    PyTuple_SET_ITEM(devs, i, v);
  }
  /* Trailing dimensions with no axes are dropped; callers pad to the array's rank. */
  int last = -1;
  for (int d = 0; d < LOOM_MAX_RANK; d++)
    if (s->dim_axes[d][0] >= 0) last = d;
  for (int d = 0; d <= last; d++) {
    int k = 0;
    while (k < LOOM_MAX_MESH_AXES && s->dim_axes[d][k] >= 0) k++;
    PyObject *t = PyTuple_New(k);
    if (!t) goto fail;
    for (int j = 0; j < k; j++) PyTuple_SET_ITEM(t, j, PyLong_FromLong(s->dim_axes[d][j]));
    int rc = PyList_Append(axes, t);
    Py_DECREF(t);
    if (rc < 0) goto fail;
  }
  PyObject *axt = PyList_AsTuple(axes);
  Py_DECREF(axes);
  if (!axt) {
    Py_DECREF(mesh);
    Py_DECREF(devs);
    return NULL;
  }
  return Py_BuildValue("(NNN)", mesh, devs, axt);
fail:
  Py_XDECREF(mesh);
  Py_XDECREF(devs);
  Py_XDECREF(axes);
  return NULL;
}

/* ---- Client ---- */

/* The waiting session's progress line on stderr (called on libloom's receiver thread: no GIL,
 * no Python objects). */
static void queue_line(void *arg, const loom_queue_status *s) {
  (void)arg;
  fprintf(stderr, "loom: waiting for %u devices (%s): %u of %u in the queue, %u free, %llu s: %s\n", s->devices,
          s->priority, s->position, s->queued, s->free_devices, (unsigned long long)(s->waited_ms / 1000),
          s->blocked_by);
  fflush(stderr);
}

static PyObject *client_connect(PyObject *mod, PyObject *args, PyObject *kw) {
  (void)mod;
  static char *kwlist[] = {"address", "timeout_ms", "name", "token", "devices", "priority", "launch_limit_ms",
                           "queue_timeout_ms", "progress", "weight", NULL};
  const char *address = NULL, *name = NULL, *token = NULL, *priority = NULL;
  long long timeout_ms = 30000, queue_timeout_ms = 0;
  unsigned int devices = 0, launch_limit_ms = 0, weight = 0;
  int progress = 1;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|zLzzIzILpI", kwlist, &address, &timeout_ms, &name, &token, &devices,
                                   &priority, &launch_limit_ms, &queue_timeout_ms, &progress, &weight))
    return NULL;
  loom_connect_options o;
  loom_connect_options_initialize(&o);
  o.pool_devices = devices;
  o.priority = priority;
  o.launch_limit_ms = launch_limit_ms;
  o.queue_timeout_ms = queue_timeout_ms;
  o.share_weight = weight;
  if (progress) o.queue_progress = queue_line;
  o.address = address;
  if (token && *token) {
    o.auth_token = token;
    o.auth_token_size = strlen(token);
  }
  o.timeout_ms = timeout_ms;
  o.client_name = name;
  o.interrupt = py_interrupt;
  loom_client *c = NULL;
  loom_status st;
  char msg[MSG_CAP];
  Py_BEGIN_ALLOW_THREADS
  st = loom_connect(&o, &c);
  if (st != LOOM_OK) grab_msg(NULL, msg);
  Py_END_ALLOW_THREADS
  if (st != LOOM_OK) return raise_status(st, msg);
  if (PyErr_Occurred()) {
    loom_disconnect(c);
    return NULL;
  }
  ClientObject *self = PyObject_New(ClientObject, &ClientType);
  if (!self) {
    loom_disconnect(c);
    return NULL;
  }
  self->c = c;
  self->children = NULL;
  self->busy = 0;
  self->weakrefs = NULL;
  return (PyObject *)self;
}

/* Frees every handle made through the client, then the session. */
static void client_close_now(ClientObject *self) {
  while (self->children) {
    Child *ch = self->children;
    ch->free_handle(ch);
    child_unlink(ch); /* may drop the last reference to self only after the loop: self is borrowed */
  }
  if (self->c) {
    loom_client *c = self->c;
    self->c = NULL;
    Py_BEGIN_ALLOW_THREADS
    loom_disconnect(c);
    Py_END_ALLOW_THREADS
  }
}

static PyObject *Client_close(ClientObject *self, PyObject *unused) {
  (void)unused;
  if (self->busy) return raise_status(LOOM_BUSY, "the client is in use by another thread; close it when that call returns");
  Py_INCREF(self); /* the children hold references to self; keep it alive through the loop */
  client_close_now(self);
  Py_DECREF(self);
  Py_RETURN_NONE;
}

static void Client_dealloc(ClientObject *self) {
  if (self->weakrefs) PyObject_ClearWeakRefs((PyObject *)self);
  /* No children remain (each holds a reference); only the session is left. */
  if (self->c) {
    loom_client *c = self->c;
    self->c = NULL;
    Py_BEGIN_ALLOW_THREADS
    loom_disconnect(c);
    Py_END_ALLOW_THREADS
  }
  PyObject_Free(self);
}

#define CLIENT_OPEN(self) \
  if (!(self)->c) return closed_error()

static PyObject *Client_get_address(ClientObject *self, void *u) {
  (void)u;
  CLIENT_OPEN(self);
  return PyUnicode_FromString(loom_client_address(self->c));
}
static PyObject *Client_get_session(ClientObject *self, void *u) {
  (void)u;
  CLIENT_OPEN(self);
  return PyLong_FromUnsignedLongLong(loom_client_session(self->c));
}
static PyObject *Client_get_pool_devices(ClientObject *self, void *u) {
  (void)u;
  CLIENT_OPEN(self);
  return PyLong_FromUnsignedLong(loom_client_pool_devices(self->c));
}
static PyObject *Client_get_priority(ClientObject *self, void *u) {
  (void)u;
  CLIENT_OPEN(self);
  return PyUnicode_FromString(loom_client_priority(self->c));
}
static PyObject *Client_get_queued_ms(ClientObject *self, void *u) {
  (void)u;
  CLIENT_OPEN(self);
  return PyLong_FromUnsignedLongLong(loom_client_queued_ms(self->c));
}
static PyObject *Client_get_closed(ClientObject *self, void *u) {
  (void)u;
  return PyBool_FromLong(self->c == NULL);
}

static PyObject *Client_refresh_devices(ClientObject *self, PyObject *unused) {
  (void)unused;
  CLIENT_OPEN(self);
  loom_status st;
  char msg[MSG_CAP];
  CALL_BEGIN(self);
  st = loom_refresh_devices(self->c);
  if (st != LOOM_OK) grab_msg(self->c, msg);
  CALL_END(self);
  if (st != LOOM_OK) return raise_status(st, msg);
  if (PyErr_Occurred()) return NULL;
  Py_RETURN_NONE;
}

/* The device snapshot as a list of dicts (the fields of loom_device_desc). */
static PyObject *Client_devices(ClientObject *self, PyObject *unused) {
  (void)unused;
  CLIENT_OPEN(self);
  int32_t n = 0;
  char msg[MSG_CAP];
  loom_status st = loom_device_count(self->c, &n);
  if (st != LOOM_OK) {
    grab_msg(self->c, msg);
    return raise_status(st, msg);
  }
  PyObject *list = PyList_New(0);
  if (!list) return NULL;
  for (int32_t i = 0; i < n; i++) {
    loom_device_desc d = {.struct_size = sizeof d};
    st = loom_device_info(self->c, i, &d);
    if (st != LOOM_OK) {
      grab_msg(self->c, msg);
      Py_DECREF(list);
      return raise_status(st, msg);
    }
    PyObject *item = Py_BuildValue(
        "{s:i,s:s,s:i,s:i,s:s,s:L,s:s,s:K,s:K,s:O,s:s,s:K}", "id", d.id, "kind", d.kind ? d.kind : "", "worker_id",
        d.worker_id, "local_index", d.local_index, "worker_host", d.worker_host ? d.worker_host : "", "worker_pid",
        (long long)d.worker_pid, "slice", d.slice ? d.slice : "", "memory_capacity",
        (unsigned long long)d.memory_capacity, "memory_used", (unsigned long long)d.memory_used, "healthy",
        d.healthy ? Py_True : Py_False, "health_reason", d.health_reason ? d.health_reason : "",
        "memory_peak", (unsigned long long)d.memory_peak);
    if (!item || PyList_Append(list, item) < 0) {
      Py_XDECREF(item);
      Py_DECREF(list);
      return NULL;
    }
    Py_DECREF(item);
  }
  return list;
}

static void array_free_handle(Child *ch) {
  ArrayObject *a = (ArrayObject *)ch;
  if (a->a) loom_array_release(a->a);
  a->a = NULL;
}

static PyObject *wrap_array(ClientObject *owner, loom_array *h) {
  ArrayObject *a = PyObject_New(ArrayObject, &ArrayType);
  if (!a) {
    loom_array_release(h);
    return NULL;
  }
  a->a = h;
  child_link(&a->base, owner, array_free_handle);
  return (PyObject *)a;
}

/* put(buffer, dtype, dims, sharding=None): the buffer's bytes (C-contiguous) are the global
 * array; libloom reads them in place, no copy is made here. */
static PyObject *Client_put(ClientObject *self, PyObject *args) {
  CLIENT_OPEN(self);
  PyObject *buf, *dimsobj, *shobj = Py_None;
  int dtype;
  if (!PyArg_ParseTuple(args, "OiO|O", &buf, &dtype, &dimsobj, &shobj)) return NULL;
  int64_t dims[LOOM_MAX_RANK];
  int32_t rank;
  if (dims_from(dimsobj, dims, &rank) < 0) return NULL;
  loom_sharding sh;
  devbuf db = {.heap = NULL};
  if (shobj != Py_None && sharding_from(shobj, &sh, &db) < 0) {
    PyMem_Free(db.heap);
    return NULL;
  }
  Py_buffer view;
  if (PyObject_GetBuffer(buf, &view, PyBUF_C_CONTIGUOUS) < 0) {
    PyMem_Free(db.heap);
    return NULL;
  }
  loom_put_args pa;
  loom_put_args_initialize(&pa);
  pa.dtype = (loom_dtype)dtype;
  pa.rank = rank;
  pa.dims = dims;
  pa.sharding = shobj == Py_None ? NULL : &sh;
  pa.data = view.buf;
  pa.data_size = (size_t)view.len;
  loom_array *out = NULL;
  loom_status st;
  char msg[MSG_CAP];
  CALL_BEGIN(self);
  st = loom_array_put(self->c, &pa, &out);
  if (st != LOOM_OK) grab_msg(self->c, msg);
  CALL_END(self);
  PyBuffer_Release(&view);
  PyMem_Free(db.heap);
  if (st != LOOM_OK) return raise_status(st, msg);
  if (PyErr_Occurred()) {
    loom_array_release(out);
    return NULL;
  }
  return wrap_array(self, out);
}

/* ---- checkpoints and drain ---- */

static PyObject *json_result(loom_status st, const char *msg, char *json) {
  if (st != LOOM_OK) {
    loom_free_string(json);
    return raise_status(st, msg);
  }
  PyObject *r = PyUnicode_FromString(json ? json : "{}");
  loom_free_string(json);
  return r;
}

/* Converts a sequence of str into a PyMem array of borrowed UTF-8 pointers (kept alive by keep). */
static const char **names_from(PyObject *seq, Py_ssize_t *n, PyObject **keep) {
  *keep = PySequence_Fast(seq, "names must be a sequence of str");
  if (!*keep) return NULL;
  *n = PySequence_Fast_GET_SIZE(*keep);
  const char **v = PyMem_Calloc((size_t)(*n ? *n : 1), sizeof *v);
  if (!v) {
    PyErr_NoMemory();
    return NULL;
  }
  for (Py_ssize_t i = 0; i < *n; i++) {
    v[i] = PyUnicode_AsUTF8(PySequence_Fast_GET_ITEM(*keep, i));
    if (!v[i]) {
      PyMem_Free(v);
      return NULL;
    }
  }
  return v;
}

/* checkpoint_save(name, names, arrays) -> JSON text */
static PyObject *Client_checkpoint_save(ClientObject *self, PyObject *args) {
  CLIENT_OPEN(self);
  const char *name;
  PyObject *namesobj, *arrsobj;
  if (!PyArg_ParseTuple(args, "sOO", &name, &namesobj, &arrsobj)) return NULL;
  PyObject *keep = NULL, *fa = NULL;
  Py_ssize_t n = 0;
  const char **names = names_from(namesobj, &n, &keep);
  loom_array **arrs = NULL;
  PyObject *res = NULL;
  if (!names) goto out;
  fa = PySequence_Fast(arrsobj, "arrays must be a sequence of loom arrays");
  if (!fa) goto out;
  if (PySequence_Fast_GET_SIZE(fa) != n) {
    PyErr_SetString(PyExc_ValueError, "names and arrays differ in length");
    goto out;
  }
  arrs = PyMem_Calloc((size_t)(n ? n : 1), sizeof *arrs);
  if (!arrs) {
    PyErr_NoMemory();
    goto out;
  }
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *o = PySequence_Fast_GET_ITEM(fa, i);
    if (!PyObject_TypeCheck(o, &ArrayType) || !((ArrayObject *)o)->a) {
      PyErr_Format(PyExc_TypeError, "item %zd is not a live loom array", i);
      goto out;
    }
    arrs[i] = ((ArrayObject *)o)->a;
  }
  char msg[MSG_CAP];
  char *json = NULL;
  loom_status st;
  CALL_BEGIN(self);
  st = loom_checkpoint_save(self->c, name, names, arrs, (int32_t)n, &json);
  if (st != LOOM_OK) grab_msg(self->c, msg);
  CALL_END(self);
  res = json_result(st, msg, json);
out:
  PyMem_Free(arrs);
  PyMem_Free(names);
  Py_XDECREF(fa);
  Py_XDECREF(keep);
  return res;
}

/* checkpoint_load(name, names, shardings, dtypes, shapes) -> ([Array], JSON text); shardings[i]
 * None: as saved; dtypes[i] 0: any; shapes[i] None: any */
static PyObject *Client_checkpoint_load(ClientObject *self, PyObject *args) {
  CLIENT_OPEN(self);
  const char *name;
  PyObject *namesobj, *shobj, *dtobj, *shpobj;
  if (!PyArg_ParseTuple(args, "sOOOO", &name, &namesobj, &shobj, &dtobj, &shpobj)) return NULL;
  PyObject *keep = NULL, *fsh = NULL, *fdt = NULL, *fsp = NULL, *res = NULL;
  Py_ssize_t n = 0;
  const char **names = names_from(namesobj, &n, &keep);
  loom_sharding *shs = NULL;
  const loom_sharding **shp = NULL;
  devbuf *dbs = NULL;
  loom_dtype *dts = NULL;
  int32_t *ranks = NULL;
  int64_t *dimv = NULL;
  const int64_t **dimp = NULL;
  loom_array **out = NULL;
  if (!names) goto out;
  fsh = PySequence_Fast(shobj, "shardings must be a sequence");
  fdt = fsh ? PySequence_Fast(dtobj, "dtypes must be a sequence") : NULL;
  fsp = fdt ? PySequence_Fast(shpobj, "shapes must be a sequence") : NULL;
  if (!fsp) goto out;
  if (PySequence_Fast_GET_SIZE(fsh) != n || PySequence_Fast_GET_SIZE(fdt) != n || PySequence_Fast_GET_SIZE(fsp) != n) {
    PyErr_SetString(PyExc_ValueError, "names, shardings, dtypes and shapes differ in length");
    goto out;
  }
  size_t cnt = (size_t)(n ? n : 1);
  shs = PyMem_Calloc(cnt, sizeof *shs);
  shp = PyMem_Calloc(cnt, sizeof *shp);
  dbs = PyMem_Calloc(cnt, sizeof *dbs);
  dts = PyMem_Calloc(cnt, sizeof *dts);
  ranks = PyMem_Calloc(cnt, sizeof *ranks);
  dimv = PyMem_Calloc(cnt * LOOM_MAX_RANK, sizeof *dimv);
  dimp = PyMem_Calloc(cnt, sizeof *dimp);
  out = PyMem_Calloc(cnt, sizeof *out);
  if (!shs || !shp || !dbs || !dts || !ranks || !dimv || !dimp || !out) {
    PyErr_NoMemory();
    goto out;
  }
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *so = PySequence_Fast_GET_ITEM(fsh, i), *d = PySequence_Fast_GET_ITEM(fdt, i);
    PyObject *sp = PySequence_Fast_GET_ITEM(fsp, i);
    if (so != Py_None) {
      if (sharding_from(so, &shs[i], &dbs[i]) < 0) goto out;
      shp[i] = &shs[i];
    }
    long dv = PyLong_AsLong(d);
    if (dv == -1 && PyErr_Occurred()) goto out;
    dts[i] = (loom_dtype)dv;
    ranks[i] = -1;
    if (sp != Py_None) {
      if (dims_from(sp, dimv + (size_t)i * LOOM_MAX_RANK, &ranks[i]) < 0) goto out;
      dimp[i] = dimv + (size_t)i * LOOM_MAX_RANK;
    }
  }
  loom_checkpoint_load_args la;
  loom_checkpoint_load_args_initialize(&la);
  la.name = name;
  la.num_arrays = (int32_t)n;
  la.names = names;
  la.shardings = shp;
  la.dtypes = dts;
  la.ranks = ranks;
  la.dims = dimp;
  char msg[MSG_CAP];
  char *json = NULL;
  loom_status st;
  CALL_BEGIN(self);
  st = loom_checkpoint_load(self->c, &la, out, &json);
  if (st != LOOM_OK) grab_msg(self->c, msg);
  CALL_END(self);
  if (st != LOOM_OK) {
    json_result(st, msg, json);
    goto out;
  }
  PyObject *list = PyList_New(n);
  if (!list) {
    for (Py_ssize_t i = 0; i < n; i++) loom_array_release(out[i]);
    loom_free_string(json);
    goto out;
  }
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *a = wrap_array(self, out[i]); /* takes the handle, also on failure */
    out[i] = NULL;
    if (!a) {
      for (Py_ssize_t k = i + 1; k < n; k++) loom_array_release(out[k]);
      Py_DECREF(list);
      loom_free_string(json);
      goto out;
    }
    PyList_SET_ITEM(list, i, a);
  }
  res = Py_BuildValue("(Ns)", list, json ? json : "{}");
  loom_free_string(json);
out:
  for (Py_ssize_t i = 0; dbs && i < n; i++) PyMem_Free(dbs[i].heap);
  PyMem_Free(shs), PyMem_Free(shp), PyMem_Free(dbs), PyMem_Free(dts), PyMem_Free(ranks), PyMem_Free(dimv);
  PyMem_Free(dimp), PyMem_Free(out), PyMem_Free(names);
  Py_XDECREF(fsh);
  Py_XDECREF(fdt);
  Py_XDECREF(fsp);
  Py_XDECREF(keep);
  return res;
}

/* checkpoint_query(op, name=None) -> JSON text (op: 3 list, 4 show, 5 verify, 6 remove) */
static PyObject *Client_checkpoint_query(ClientObject *self, PyObject *args) {
  CLIENT_OPEN(self);
  int op;
  const char *name = NULL;
  if (!PyArg_ParseTuple(args, "i|z", &op, &name)) return NULL;
  char msg[MSG_CAP];
  char *json = NULL;
  loom_status st;
  CALL_BEGIN(self);
  st = loom_checkpoint_query(self->c, (loom_checkpoint_query_op)op, name, &json);
  if (st != LOOM_OK) grab_msg(self->c, msg);
  CALL_END(self);
  return json_result(st, msg, json);
}

/* drain(worker) -> JSON text */
static PyObject *Client_drain(ClientObject *self, PyObject *args) {
  CLIENT_OPEN(self);
  int worker;
  if (!PyArg_ParseTuple(args, "i", &worker)) return NULL;
  char msg[MSG_CAP];
  char *json = NULL;
  loom_status st;
  CALL_BEGIN(self);
  st = loom_drain_worker(self->c, worker, &json);
  if (st != LOOM_OK) grab_msg(self->c, msg);
  CALL_END(self);
  return json_result(st, msg, json);
}

static void exe_free_handle(Child *ch) {
  ExecutableObject *e = (ExecutableObject *)ch;
  if (e->e) loom_executable_destroy(e->e);
  e->e = NULL;
}

/* compile(text, devices=None, name=None) */
static PyObject *Client_compile(ClientObject *self, PyObject *args, PyObject *kw) {
  CLIENT_OPEN(self);
  static char *kwlist[] = {"text", "devices", "name", NULL};
  Py_buffer text;
  PyObject *devs = Py_None;
  const char *name = NULL;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "s*|Oz", kwlist, &text, &devs, &name)) return NULL;
  loom_compile_options o;
  loom_compile_options_initialize(&o);
  o.name = name;
  devbuf db = {.heap = NULL};
  if (devs != Py_None) {
    if (ids_from(devs, &db, &o.num_devices) < 0) {
      PyBuffer_Release(&text);
      return NULL;
    }
    o.devices = db.heap ? db.heap : db.ids;
  }
  loom_executable *e = NULL;
  loom_status st;
  char msg[MSG_CAP];
  CALL_BEGIN(self);
  st = loom_compile(self->c, text.buf, (size_t)text.len, &o, &e);
  if (st != LOOM_OK) grab_msg(self->c, msg);
  CALL_END(self);
  PyMem_Free(db.heap);
  PyBuffer_Release(&text);
  if (st != LOOM_OK) return raise_status(st, msg);
  if (PyErr_Occurred()) {
    loom_executable_destroy(e);
    return NULL;
  }
  loom_executable_info info = {.struct_size = sizeof info};
  st = loom_executable_info_get(e, &info);
  if (st != LOOM_OK) {
    grab_msg(self->c, msg);
    loom_executable_destroy(e);
    return raise_status(st, msg);
  }
  ExecutableObject *x = PyObject_New(ExecutableObject, &ExecutableType);
  if (!x) {
    loom_executable_destroy(e);
    return NULL;
  }
  x->e = e;
  x->n_in = info.num_inputs;
  x->n_out = info.num_outputs;
  child_link(&x->base, self, exe_free_handle);
  return (PyObject *)x;
}

static PyMethodDef Client_methods[] = {
    {"close", (PyCFunction)Client_close, METH_NOARGS, "Frees every handle, closes the session."},
    {"refresh_devices", (PyCFunction)Client_refresh_devices, METH_NOARGS, "Renews the device snapshot."},
    {"devices", (PyCFunction)Client_devices, METH_NOARGS, "The device snapshot: a list of dicts."},
    {"put", (PyCFunction)Client_put, METH_VARARGS, "put(buffer, dtype, dims, sharding=None) -> Array"},
    {"checkpoint_save", (PyCFunction)Client_checkpoint_save, METH_VARARGS, "checkpoint_save(name, names, arrays) -> JSON"},
    {"checkpoint_load", (PyCFunction)Client_checkpoint_load, METH_VARARGS,
     "checkpoint_load(name, names, shardings, dtypes, shapes) -> ([Array], JSON)"},
    {"checkpoint_query", (PyCFunction)Client_checkpoint_query, METH_VARARGS, "checkpoint_query(op, name=None) -> JSON"},
    {"drain", (PyCFunction)Client_drain, METH_VARARGS, "drain(worker) -> JSON"},
    {"compile", (PyCFunction)(void (*)(void))Client_compile, METH_VARARGS | METH_KEYWORDS,
     "compile(text, devices=None, name=None) -> Executable"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Client_getset[] = {
    {"address", (getter)Client_get_address, NULL, "the controller's HOST:PORT", NULL},
    {"session", (getter)Client_get_session, NULL, "the session id", NULL},
    {"closed", (getter)Client_get_closed, NULL, "True once closed", NULL},
    {"pool_devices", (getter)Client_get_pool_devices, NULL, "devices given by the pool (0: shared session)", NULL},
    {"priority", (getter)Client_get_priority, NULL, "the session's priority class", NULL},
    {"queued_ms", (getter)Client_get_queued_ms, NULL, "how long the session waited in the pool's queue", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

/* ---- Array ---- */

static void Array_dealloc(ArrayObject *self) {
  array_free_handle(&self->base);
  child_unlink(&self->base);
  PyObject_Free(self);
}

#define HANDLE_OPEN(self, field) \
  if (!(self)->field) return closed_error()

static PyObject *Array_get(ArrayObject *self, PyObject *args) {
  HANDLE_OPEN(self, a);
  PyObject *buf;
  int index = -1;
  if (!PyArg_ParseTuple(args, "O|i", &buf, &index)) return NULL;
  Py_buffer view;
  if (PyObject_GetBuffer(buf, &view, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) return NULL;
  ClientObject *owner = self->base.owner;
  loom_status st;
  char msg[MSG_CAP];
  CALL_BEGIN(owner);
  st = index < 0 ? loom_array_get(self->a, view.buf, (size_t)view.len)
                 : loom_array_get_shard(self->a, index, view.buf, (size_t)view.len);
  if (st != LOOM_OK) grab_msg(owner->c, msg);
  CALL_END(owner);
  PyBuffer_Release(&view);
  if (st != LOOM_OK) return raise_status(st, msg);
  if (PyErr_Occurred()) return NULL;
  Py_RETURN_NONE;
}

static PyObject *Array_block_until_ready(ArrayObject *self, PyObject *args) {
  HANDLE_OPEN(self, a);
  long long timeout_ms = -1;
  if (!PyArg_ParseTuple(args, "|L", &timeout_ms)) return NULL;
  ClientObject *owner = self->base.owner;
  loom_status st;
  char msg[MSG_CAP];
  CALL_BEGIN(owner);
  st = loom_array_block_until_ready(self->a, timeout_ms);
  if (st != LOOM_OK) grab_msg(owner->c, msg);
  CALL_END(owner);
  if (st != LOOM_OK) return raise_status(st, msg);
  if (PyErr_Occurred()) return NULL;
  Py_RETURN_NONE;
}

static PyObject *Array_delete(ArrayObject *self, PyObject *unused) {
  (void)unused;
  HANDLE_OPEN(self, a);
  ClientObject *owner = self->base.owner;
  loom_status st;
  char msg[MSG_CAP];
  CALL_BEGIN(owner);
  st = loom_array_delete(self->a);
  if (st != LOOM_OK) grab_msg(owner->c, msg);
  CALL_END(owner);
  if (st != LOOM_OK) return raise_status(st, msg);
  Py_RETURN_NONE;
}

static PyObject *Array_sharding(ArrayObject *self, PyObject *unused) {
  (void)unused;
  HANDLE_OPEN(self, a);
  loom_sharding s = {.struct_size = sizeof s};
  loom_status st = loom_array_sharding(self->a, &s);
  if (st != LOOM_OK) {
    char msg[MSG_CAP];
    grab_msg(self->base.owner->c, msg);
    return raise_status(st, msg);
  }
  return sharding_to(&s);
}

static PyObject *Array_shard_info(ArrayObject *self, PyObject *args) {
  HANDLE_OPEN(self, a);
  int index;
  if (!PyArg_ParseTuple(args, "i", &index)) return NULL;
  loom_shard_desc d = {.struct_size = sizeof d};
  loom_status st = loom_array_shard_info(self->a, index, &d);
  if (st != LOOM_OK) {
    char msg[MSG_CAP];
    grab_msg(self->base.owner->c, msg);
    return raise_status(st, msg);
  }
  return Py_BuildValue("(iNNK)", d.device, dims_to(d.rank, d.offsets), dims_to(d.rank, d.dims),
                       (unsigned long long)d.nbytes);
}

static PyObject *Array_get_dtype(ArrayObject *self, void *u) {
  (void)u;
  HANDLE_OPEN(self, a);
  return PyLong_FromLong((long)loom_array_dtype(self->a));
}
static PyObject *Array_get_shape(ArrayObject *self, void *u) {
  (void)u;
  HANDLE_OPEN(self, a);
  return dims_to(loom_array_rank(self->a), loom_array_dims(self->a));
}
static PyObject *Array_get_nbytes(ArrayObject *self, void *u) {
  (void)u;
  HANDLE_OPEN(self, a);
  return PyLong_FromUnsignedLongLong(loom_array_nbytes(self->a));
}
static PyObject *Array_get_id(ArrayObject *self, void *u) {
  (void)u;
  HANDLE_OPEN(self, a);
  return PyLong_FromUnsignedLongLong(loom_array_id(self->a));
}
static PyObject *Array_get_deleted(ArrayObject *self, void *u) {
  (void)u;
  return PyBool_FromLong(!self->a || loom_array_is_deleted(self->a));
}
static PyObject *Array_get_num_shards(ArrayObject *self, void *u) {
  (void)u;
  HANDLE_OPEN(self, a);
  return PyLong_FromLong(loom_array_num_shards(self->a));
}

static PyMethodDef Array_methods[] = {
    {"get", (PyCFunction)Array_get, METH_VARARGS, "get(buffer, shard=-1): the whole array (or one shard) into buffer"},
    {"block_until_ready", (PyCFunction)Array_block_until_ready, METH_VARARGS, "block_until_ready(timeout_ms=-1)"},
    {"delete", (PyCFunction)Array_delete, METH_NOARGS, "Frees the shards on the workers."},
    {"sharding", (PyCFunction)Array_sharding, METH_NOARGS, "(mesh_shape, devices, dim_axes)"},
    {"shard_info", (PyCFunction)Array_shard_info, METH_VARARGS, "shard_info(i) -> (device, offsets, dims, nbytes)"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Array_getset[] = {
    {"dtype", (getter)Array_get_dtype, NULL, "loom_dtype code", NULL},
    {"shape", (getter)Array_get_shape, NULL, "global shape", NULL},
    {"nbytes", (getter)Array_get_nbytes, NULL, "bytes of the whole array", NULL},
    {"id", (getter)Array_get_id, NULL, "the array's id in its session", NULL},
    {"deleted", (getter)Array_get_deleted, NULL, "True once deleted", NULL},
    {"num_shards", (getter)Array_get_num_shards, NULL, "one per device of the sharding", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

/* ---- Executable ---- */

static void Executable_dealloc(ExecutableObject *self) {
  exe_free_handle(&self->base);
  child_unlink(&self->base);
  PyObject_Free(self);
}

static PyObject *Executable_info(ExecutableObject *self, PyObject *unused) {
  (void)unused;
  HANDLE_OPEN(self, e);
  loom_executable_info i = {.struct_size = sizeof i};
  loom_status st = loom_executable_info_get(self->e, &i);
  if (st != LOOM_OK) {
    char msg[MSG_CAP];
    grab_msg(self->base.owner->c, msg);
    return raise_status(st, msg);
  }
  PyObject *devs = PyTuple_New(i.num_devices);
  if (!devs) return NULL;
  for (int32_t k = 0; k < i.num_devices; k++) PyTuple_SET_ITEM(devs, k, PyLong_FromLong(i.devices[k]));
  return Py_BuildValue("{s:s,s:i,s:i,s:N,s:i,s:i,s:K}", "form", i.form ? i.form : "", "num_replicas", i.num_replicas,
                       "num_partitions", i.num_partitions, "devices", devs, "num_inputs", i.num_inputs,
                       "num_outputs", i.num_outputs, "fingerprint", (unsigned long long)i.fingerprint);
}

static PyObject *exe_io(ExecutableObject *self, PyObject *args, int output) {
  HANDLE_OPEN(self, e);
  int index;
  if (!PyArg_ParseTuple(args, "i", &index)) return NULL;
  loom_array_spec spec = {.struct_size = sizeof spec};
  loom_sharding s = {.struct_size = sizeof s};
  loom_status st = output ? loom_executable_output(self->e, index, &spec, &s)
                          : loom_executable_input(self->e, index, &spec, &s);
  if (st != LOOM_OK) {
    char msg[MSG_CAP];
    grab_msg(self->base.owner->c, msg);
    return raise_status(st, msg);
  }
  return Py_BuildValue("(iNN)", (int)spec.dtype, dims_to(spec.rank, spec.dims), sharding_to(&s));
}
static PyObject *Executable_input(ExecutableObject *self, PyObject *args) { return exe_io(self, args, 0); }
static PyObject *Executable_output(ExecutableObject *self, PyObject *args) { return exe_io(self, args, 1); }

static void future_free_handle(Child *ch) {
  FutureObject *f = (FutureObject *)ch;
  if (f->f) loom_future_destroy(f->f);
  f->f = NULL;
}

/* launch(inputs) -> (outputs tuple, Future). Returns at once (the launch is asynchronous). */
static PyObject *Executable_launch(ExecutableObject *self, PyObject *seq) {
  HANDLE_OPEN(self, e);
  ClientObject *owner = self->base.owner;
  PyObject *fast = PySequence_Fast(seq, "launch takes a sequence of loom arrays");
  if (!fast) return NULL;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
  if (n != self->n_in) {
    Py_DECREF(fast);
    char msg[MSG_CAP];
    snprintf(msg, sizeof msg, "the executable takes %d inputs, %zd were given", (int)self->n_in, n);
    return raise_status(LOOM_INVALID_ARGUMENT, msg);
  }
  loom_array *in_small[16], *out_small[16];
  loom_array **in = n <= 16 ? in_small : PyMem_Malloc((size_t)n * sizeof *in);
  loom_array **out = self->n_out <= 16 ? out_small : PyMem_Malloc((size_t)self->n_out * sizeof *out);
  PyObject *result = NULL;
  if (!in || !out) {
    PyErr_NoMemory();
    goto done;
  }
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *x = PySequence_Fast_GET_ITEM(fast, i);
    if (!PyObject_TypeCheck(x, &ArrayType)) {
      PyErr_Format(PyExc_TypeError, "input %zd is a %.100s, not a loom array", i, Py_TYPE(x)->tp_name);
      goto done;
    }
    ArrayObject *a = (ArrayObject *)x;
    if (!a->a) {
      closed_error();
      goto done;
    }
    if (a->base.owner != owner) {
      PyErr_Format(PyExc_ValueError, "input %zd belongs to another client", i);
      goto done;
    }
    in[i] = a->a;
  }
  loom_future *fut = NULL;
  loom_status st;
  char msg[MSG_CAP];
  CALL_BEGIN(owner);
  st = loom_launch(self->e, in, (int32_t)n, NULL, out, self->n_out, &fut);
  if (st != LOOM_OK) grab_msg(owner->c, msg);
  CALL_END(owner);
  if (st != LOOM_OK) {
    raise_status(st, msg);
    goto done;
  }
  PyObject *outs = PyTuple_New(self->n_out);
  FutureObject *f = outs ? PyObject_New(FutureObject, &FutureType) : NULL;
  if (!f) {
    Py_XDECREF(outs);
    for (int32_t i = 0; i < self->n_out; i++) loom_array_release(out[i]);
    loom_future_destroy(fut);
    goto done;
  }
  f->f = fut;
  child_link(&f->base, owner, future_free_handle);
  int32_t i = 0;
  for (; i < self->n_out; i++) {
    PyObject *w = wrap_array(owner, out[i]);
    if (!w) break;
    PyTuple_SET_ITEM(outs, i, w);
  }
  if (i < self->n_out) {
    for (int32_t j = i + 1; j < self->n_out; j++) loom_array_release(out[j]);
    Py_DECREF(outs);
    Py_DECREF(f);
    goto done;
  }
  result = Py_BuildValue("(NN)", outs, (PyObject *)f);
done:
  if (in && in != in_small) PyMem_Free(in);
  if (out && out != out_small) PyMem_Free(out);
  Py_DECREF(fast);
  return result;
}

static PyObject *Executable_get_num_inputs(ExecutableObject *self, void *u) {
  (void)u;
  return PyLong_FromLong(self->n_in);
}
static PyObject *Executable_get_num_outputs(ExecutableObject *self, void *u) {
  (void)u;
  return PyLong_FromLong(self->n_out);
}

static PyMethodDef Executable_methods[] = {
    {"info", (PyCFunction)Executable_info, METH_NOARGS, "form, replicas, partitions, devices, counts, fingerprint"},
    {"input", (PyCFunction)Executable_input, METH_VARARGS, "input(i) -> (dtype, dims, sharding)"},
    {"output", (PyCFunction)Executable_output, METH_VARARGS, "output(i) -> (dtype, dims, sharding)"},
    {"launch", (PyCFunction)Executable_launch, METH_O, "launch(inputs) -> (outputs, future)"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Executable_getset[] = {
    {"num_inputs", (getter)Executable_get_num_inputs, NULL, NULL, NULL},
    {"num_outputs", (getter)Executable_get_num_outputs, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

/* ---- Future ---- */

static void Future_dealloc(FutureObject *self) {
  future_free_handle(&self->base);
  child_unlink(&self->base);
  PyObject_Free(self);
}

/* wait(timeout_ms=-1): None when the launch succeeded; raises its error, TimeoutError, or
 * KeyboardInterrupt (the future stays pending then). */
static PyObject *Future_wait(FutureObject *self, PyObject *args) {
  HANDLE_OPEN(self, f);
  long long timeout_ms = -1;
  if (!PyArg_ParseTuple(args, "|L", &timeout_ms)) return NULL;
  ClientObject *owner = self->base.owner;
  loom_status st;
  CALL_BEGIN(owner);
  st = loom_future_wait(self->f, timeout_ms);
  CALL_END(owner);
  if (st == LOOM_OK) {
    if (PyErr_Occurred()) return NULL;
    Py_RETURN_NONE;
  }
  /* still pending: the wait timed out or was interrupted (not a cancelled launch) */
  if ((st == LOOM_TIMEOUT || st == LOOM_CANCELLED) && loom_future_status(self->f) == LOOM_PENDING) {
    char msg[MSG_CAP];
    snprintf(msg, sizeof msg, "%s", st == LOOM_TIMEOUT ? "the launch did not complete in time" : "waiting was interrupted");
    return raise_status(st, msg);
  }
  return raise_status(st, loom_future_errmsg(self->f));
}

/* cancel(): loom_future_cancel. Returns the launch's final status (0, CANCELLED, or the error it
 * had completed with); raises when the request itself failed while the launch is still pending
 * (KeyboardInterrupt, TimeoutError). */
static PyObject *Future_cancel(FutureObject *self, PyObject *unused) {
  (void)unused;
  HANDLE_OPEN(self, f);
  ClientObject *owner = self->base.owner;
  loom_status st, now;
  char msg[MSG_CAP];
  CALL_BEGIN(owner);
  st = loom_future_cancel(self->f);
  now = loom_future_status(self->f);
  if (st != LOOM_OK) grab_msg(owner->c, msg);
  CALL_END(owner);
  if (now == LOOM_PENDING) return raise_status(st, msg);
  if (PyErr_Occurred()) return NULL;
  return PyLong_FromLong((long)now);
}

static PyObject *Future_status(FutureObject *self, PyObject *unused) {
  (void)unused;
  HANDLE_OPEN(self, f);
  return PyLong_FromLong((long)loom_future_status(self->f));
}

static PyObject *Future_get_errmsg(FutureObject *self, void *u) {
  (void)u;
  HANDLE_OPEN(self, f);
  return PyUnicode_FromString(loom_future_errmsg(self->f));
}
static PyObject *Future_get_sequence(FutureObject *self, void *u) {
  (void)u;
  HANDLE_OPEN(self, f);
  return PyLong_FromUnsignedLongLong(loom_future_sequence(self->f));
}

static PyMethodDef Future_methods[] = {
    {"wait", (PyCFunction)Future_wait, METH_VARARGS, "wait(timeout_ms=-1)"},
    {"status", (PyCFunction)Future_status, METH_NOARGS, "0, PENDING or the error code, without waiting"},
    {"cancel", (PyCFunction)Future_cancel, METH_NOARGS, "cancel() -> the launch's final status (loom_future_cancel)"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Future_getset[] = {
    {"errmsg", (getter)Future_get_errmsg, NULL, "the error's message once failed", NULL},
    {"sequence", (getter)Future_get_sequence, NULL, "the launch's global sequence number", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

/* ---- module ---- */

static PyTypeObject ClientType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "loom._loom.Client",
    .tp_basicsize = sizeof(ClientObject),
    .tp_dealloc = (destructor)Client_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A session with a controller (libloom's loom_client).",
    .tp_methods = Client_methods,
    .tp_getset = Client_getset,
    .tp_weaklistoffset = offsetof(ClientObject, weakrefs),
};
static PyTypeObject ArrayType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "loom._loom.Array",
    .tp_basicsize = sizeof(ArrayObject),
    .tp_dealloc = (destructor)Array_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "An array handle (libloom's loom_array).",
    .tp_methods = Array_methods,
    .tp_getset = Array_getset,
};
static PyTypeObject ExecutableType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "loom._loom.Executable",
    .tp_basicsize = sizeof(ExecutableObject),
    .tp_dealloc = (destructor)Executable_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A compiled program (libloom's loom_executable).",
    .tp_methods = Executable_methods,
    .tp_getset = Executable_getset,
};
static PyTypeObject FutureType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "loom._loom.Future",
    .tp_basicsize = sizeof(FutureObject),
    .tp_dealloc = (destructor)Future_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Completion of a launch (libloom's loom_future).",
    .tp_methods = Future_methods,
    .tp_getset = Future_getset,
};

static PyObject *mod_init(PyObject *mod, PyObject *args) {
  (void)mod;
  PyObject *errors, *base;
  if (!PyArg_ParseTuple(args, "O!O", &PyDict_Type, &errors, &base)) return NULL;
  Py_INCREF(errors);
  Py_INCREF(base);
  Py_XSETREF(g_errors, errors);
  Py_XSETREF(g_error_base, base);
  Py_RETURN_NONE;
}

static PyObject *mod_version(PyObject *mod, PyObject *unused) {
  (void)mod, (void)unused;
  return PyUnicode_FromString(loom_version());
}

/* The status list of loom_status.h: ((code, NAME, description), ...). */
static PyObject *mod_statuses(PyObject *mod, PyObject *unused) {
  (void)mod, (void)unused;
  PyObject *l = PyList_New(0);
  if (!l) return NULL;
#define X(name, value, desc)                                              \
  do {                                                                    \
    PyObject *t = Py_BuildValue("(iss)", value, #name, desc);             \
    if (!t || PyList_Append(l, t) < 0) {                                  \
      Py_XDECREF(t);                                                      \
      Py_DECREF(l);                                                       \
      return NULL;                                                        \
    }                                                                     \
    Py_DECREF(t);                                                         \
  } while (0);
  LOOM_STATUS_LIST(X)
#undef X
  return l;
}

/* The dtype list of loom_dtype.h: ((code, NAME, numpy descr, size), ...). */
static PyObject *mod_dtypes(PyObject *mod, PyObject *unused) {
  (void)mod, (void)unused;
  PyObject *l = PyList_New(0);
  if (!l) return NULL;
#define X(name, value, mlir, npy, size)                                   \
  do {                                                                    \
    PyObject *t = Py_BuildValue("(isssi)", value, #name, mlir, npy, size); \
    if (!t || PyList_Append(l, t) < 0) {                                  \
      Py_XDECREF(t);                                                      \
      Py_DECREF(l);                                                       \
      return NULL;                                                        \
    }                                                                     \
    Py_DECREF(t);                                                         \
  } while (0);
  LOOM_DTYPE_LIST(X)
#undef X
  return l;
}

static PyMethodDef mod_methods[] = {
    {"_init", mod_init, METH_VARARGS, "_init(errors_by_code, base_error)"},
    {"version", mod_version, METH_NOARGS, "libloom's version"},
    {"statuses", mod_statuses, METH_NOARGS, "((code, name, description), ...)"},
    {"dtypes", mod_dtypes, METH_NOARGS, "((code, name, mlir, numpy descr, size), ...)"},
    {"connect", (PyCFunction)(void (*)(void))client_connect, METH_VARARGS | METH_KEYWORDS,
     "connect(address=None, timeout_ms=30000, name=None) -> Client"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moddef = {PyModuleDef_HEAD_INIT, "loom._loom", "The CPython binding of libloom.", -1,
                                    mod_methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__loom(void) {
  PyTypeObject *types[] = {&ClientType, &ArrayType, &ExecutableType, &FutureType};
  for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
    if (PyType_Ready(types[i]) < 0) return NULL;
  PyObject *m = PyModule_Create(&moddef);
  if (!m) return NULL;
  const char *names[] = {"Client", "Array", "Executable", "Future"};
  for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
    Py_INCREF(types[i]);
    if (PyModule_AddObject(m, names[i], (PyObject *)types[i]) < 0) {
      Py_DECREF(types[i]);
      Py_DECREF(m);
      return NULL;
    }
  }
  PyModule_AddIntConstant(m, "PENDING", LOOM_PENDING);
  PyModule_AddIntConstant(m, "CANCELLED", LOOM_CANCELLED);
  PyModule_AddIntConstant(m, "MAX_RANK", LOOM_MAX_RANK);
  PyModule_AddIntConstant(m, "MAX_MESH_AXES", LOOM_MAX_MESH_AXES);
  return m;
}
