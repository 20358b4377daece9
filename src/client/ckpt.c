/* Checkpoints and drain in libloom (include/loom/loom.h, docs/elastic.md): CHECKPOINT and
 * DRAIN requests to the controller; the bytes go between the workers and the files, never
 * through this process. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include "client/client_int.h"
#include "common/dtype.h"

void loom_free_string(char *s) { free(s); }

void loom_checkpoint_load_args_initialize(loom_checkpoint_load_args *a) {
  if (!a) return;
  memset(a, 0, sizeof *a);
  a->struct_size = sizeof *a;
}

static int take_json(const Lmw__CheckpointReply *r, char **out, lm_err *err) {
  if (!out) return 0;
  *out = strdup(r->json ? r->json : "{}");
  return *out ? 0 : lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
}

static int ckpt_call(loom_client *c, unsigned type, const ProtobufCMessage *m, Lmw__CheckpointReply **out,
                     lm_err *err) {
  ProtobufCMessage *rm;
  LM_TRY(lm_cconn_call(c->conn, type, m, LM_MSG_CHECKPOINT_REPLY, -1, c->intr, c->intr_arg, &rm, err));
  *out = (Lmw__CheckpointReply *)rm;
  return 0;
}

/* A save as checkpoint `name` (dir NULL) or into directory `dir`. */
static loom_status save(loom_client *c, const char *name, const char *dir, const char *const *names,
                        loom_array *const *arrays, int32_t n, char **out_json) {
  if (out_json) *out_json = NULL;
  if (!c) return LOOM_INVALID_ARGUMENT;
  lm_err err;
  if ((!name && !dir) || n < 1 || !names || !arrays)
    return lm_client_failf(c, LOOM_INVALID_ARGUMENT, "a checkpoint save needs a name and at least one array");
  for (int32_t i = 0; i < n; i++) {
    if (!arrays[i] || arrays[i]->c != c || !names[i])
      return lm_client_failf(c, LOOM_INVALID_ARGUMENT, "array %d is NULL, unnamed or of another client", i);
    if (arrays[i]->producer && lm_fut_wait(arrays[i]->producer, -1, &err) < 0) /* it must exist first */
      return lm_client_fail(c, &err);
  }
  Lmw__CheckpointEntry *ents = calloc((size_t)n, sizeof *ents);
  Lmw__CheckpointEntry **ptrs = calloc((size_t)n, sizeof *ptrs);
  if (!ents || !ptrs) {
    free(ents), free(ptrs);
    return lm_client_failf(c, LOOM_NO_MEMORY, "out of host memory");
  }
  for (int32_t i = 0; i < n; i++) {
    lmw__checkpoint_entry__init(&ents[i]);
    ents[i].name = (char *)names[i];
    ents[i].array = arrays[i]->id;
    ptrs[i] = &ents[i];
  }
  Lmw__Checkpoint m = LMW__CHECKPOINT__INIT;
  m.op = LMW__CHECKPOINT_OP__CKPT_SAVE;
  m.name = (char *)(name ? name : "");
  m.dir = (char *)(dir ? dir : "");
  m.n_entries = (size_t)n;
  m.entries = ptrs;
  Lmw__CheckpointReply *r = NULL;
  int rc = ckpt_call(c, LM_MSG_CHECKPOINT, &m.base, &r, &err);
  free(ents), free(ptrs);
  if (rc == 0) rc = take_json(r, out_json, &err);
  if (r) lm_msg_free(&r->base);
  return rc < 0 ? lm_client_fail(c, &err) : LOOM_OK;
}

loom_status loom_checkpoint_save(loom_client *c, const char *name, const char *const *names, loom_array *const *arrays,
                                 int32_t n, char **out_json) {
  if (c && !name) return lm_client_failf(c, LOOM_INVALID_ARGUMENT, "a checkpoint save needs a name");
  return save(c, name, NULL, names, arrays, n, out_json);
}

loom_status loom_checkpoint_save_dir(loom_client *c, const char *dir, const char *const *names,
                                     loom_array *const *arrays, int32_t n, char **out_json) {
  if (c && !dir) return lm_client_failf(c, LOOM_INVALID_ARGUMENT, "a checkpoint save into a directory needs one");
  return save(c, NULL, dir, names, arrays, n, out_json);
}

loom_status loom_checkpoint_load(loom_client *c, const loom_checkpoint_load_args *a, loom_array **out, char **out_json) {
  if (out_json) *out_json = NULL;
  if (!c) return LOOM_INVALID_ARGUMENT;
  /* dir was appended: a caller built before it has a smaller struct_size and no dir */
  size_t with_dir = offsetof(loom_checkpoint_load_args, dir) + sizeof a->dir;
  const char *dir = a && a->struct_size >= with_dir ? a->dir : NULL;
  if (!a || a->struct_size < offsetof(loom_checkpoint_load_args, dir) || (!a->name && !dir) || a->num_arrays < 1 ||
      !a->names || !out)
    return lm_client_failf(c, LOOM_INVALID_ARGUMENT, "a checkpoint load needs its args (struct_size set), a name, "
                           "and at least one array name");
  int32_t n = a->num_arrays;
  for (int32_t i = 0; i < n; i++) out[i] = NULL;
  lm_err err;
  int rc = 0;
  Lmw__CheckpointEntry *ents = calloc((size_t)n, sizeof *ents);
  Lmw__CheckpointEntry **ptrs = calloc((size_t)n, sizeof *ptrs);
  Lmw__Sharding *shs = calloc((size_t)n, sizeof *shs);
  Lmw__DimAxes *dax = calloc((size_t)n * LOOM_MAX_RANK, sizeof *dax);
  Lmw__DimAxes **dptr = calloc((size_t)n * LOOM_MAX_RANK, sizeof *dptr);
  uint32_t *axes = calloc((size_t)n * LOOM_MAX_RANK * LOOM_MAX_MESH_AXES, sizeof *axes);
  uint64_t *mesh = calloc((size_t)n * LOOM_MAX_MESH_AXES, sizeof *mesh);
  uint64_t *dims = calloc((size_t)n * LOOM_MAX_RANK, sizeof *dims);
  uint32_t **devs = calloc((size_t)n, sizeof *devs);
  if (!ents || !ptrs || !shs || !dax || !dptr || !axes || !mesh || !dims || !devs)
    rc = lm_errf(&err, LOOM_NO_MEMORY, "out of host memory");
  for (int32_t i = 0; rc == 0 && i < n; i++) {
    Lmw__CheckpointEntry *e = &ents[i];
    lmw__checkpoint_entry__init(e);
    if (!a->names[i]) rc = lm_errf(&err, LOOM_INVALID_ARGUMENT, "array name %d is NULL", i);
    e->name = (char *)a->names[i];
    e->array = atomic_fetch_add(&c->next_id, 1);
    if (a->dtypes) e->dtype = (uint32_t)a->dtypes[i];
    if (a->ranks && a->dims && a->ranks[i] >= 0 && a->dims[i]) {
      if (a->ranks[i] > LOOM_MAX_RANK) rc = lm_errf(&err, LOOM_INVALID_ARGUMENT, "rank %d", a->ranks[i]);
      for (int32_t d = 0; rc == 0 && d < a->ranks[i]; d++) dims[(size_t)i * LOOM_MAX_RANK + (size_t)d] = (uint64_t)a->dims[i][d];
      e->check_dims = true;
      e->n_dims = (size_t)a->ranks[i];
      e->dims = dims + (size_t)i * LOOM_MAX_RANK;
    }
    if (rc == 0 && a->shardings && a->shardings[i]) {
      const loom_sharding *ps = a->shardings[i];
      if (ps->struct_size < sizeof *ps || ps->num_devices < 1 || !ps->devices || ps->mesh_rank < 0 ||
          ps->mesh_rank > LOOM_MAX_MESH_AXES) {
        rc = lm_errf(&err, LOOM_INVALID_ARGUMENT, "sharding %d is malformed", i);
        break;
      }
      Lmw__Sharding *w = &shs[i];
      lmw__sharding__init(w);
      for (int k = 0; k < ps->mesh_rank; k++) mesh[(size_t)i * LOOM_MAX_MESH_AXES + (size_t)k] = (uint64_t)ps->mesh_shape[k];
      w->n_mesh_shape = (size_t)ps->mesh_rank;
      w->mesh_shape = mesh + (size_t)i * LOOM_MAX_MESH_AXES;
      devs[i] = malloc((size_t)ps->num_devices * sizeof *devs[i]);
      if (!devs[i]) {
        rc = lm_errf(&err, LOOM_NO_MEMORY, "out of host memory");
        break;
      }
      for (int32_t k = 0; k < ps->num_devices; k++) devs[i][k] = (uint32_t)ps->devices[k];
      w->n_devices = (size_t)ps->num_devices;
      w->devices = devs[i];
      uint32_t *ax = axes + (size_t)i * LOOM_MAX_RANK * LOOM_MAX_MESH_AXES;
      size_t used = 0;
      int last = -1;
      for (int d = 0; d < LOOM_MAX_RANK; d++)
        if (ps->dim_axes[d][0] >= 0) last = d;
      for (int d = 0; d <= last; d++) {
        Lmw__DimAxes *x = &dax[(size_t)i * LOOM_MAX_RANK + (size_t)d];
        lmw__dim_axes__init(x);
        x->axes = ax + used;
        for (int k = 0; k < LOOM_MAX_MESH_AXES && ps->dim_axes[d][k] >= 0; k++) ax[used++] = (uint32_t)ps->dim_axes[d][k];
        x->n_axes = (size_t)(ax + used - x->axes);
        dptr[(size_t)i * LOOM_MAX_RANK + (size_t)d] = x;
      }
      w->n_dims = (size_t)(last + 1);
      w->dims = dptr + (size_t)i * LOOM_MAX_RANK;
      e->sharding = w;
    }
    ptrs[i] = e;
  }
  Lmw__CheckpointReply *r = NULL;
  if (rc == 0) {
    Lmw__Checkpoint m = LMW__CHECKPOINT__INIT;
    m.op = LMW__CHECKPOINT_OP__CKPT_LOAD;
    m.name = (char *)(a->name ? a->name : "");
    m.dir = (char *)(dir ? dir : "");
    m.n_entries = (size_t)n;
    m.entries = ptrs;
    rc = ckpt_call(c, LM_MSG_CHECKPOINT, &m.base, &r, &err);
  }
  if (rc == 0 && r->n_loaded != (size_t)n)
    rc = lm_errf(&err, LOOM_PROTOCOL, "the controller answered a load of %d arrays with %zu", n, r->n_loaded);
  for (int32_t i = 0; rc == 0 && i < n; i++) { /* the handles, from what the controller created */
    const Lmw__CheckpointLoaded *l = r->loaded[i];
    loom_sharding ps;
    loom_sharding_initialize(&ps);
    int64_t ld[LOOM_MAX_RANK];
    int32_t *pdevs = NULL;
    if (l->array != ents[i].array || !l->sharding || l->n_dims > LOOM_MAX_RANK || !lm_dtype_valid((int)l->dtype) ||
        l->sharding->n_devices < 1 || l->sharding->n_mesh_shape > LOOM_MAX_MESH_AXES ||
        l->sharding->n_dims > l->n_dims) {
      rc = lm_errf(&err, LOOM_PROTOCOL, "the controller's answer for array '%s' is malformed", a->names[i]);
      break;
    }
    for (size_t d = 0; d < l->n_dims; d++) ld[d] = (int64_t)l->dims[d];
    ps.mesh_rank = (int32_t)l->sharding->n_mesh_shape;
    for (size_t k = 0; k < l->sharding->n_mesh_shape; k++) ps.mesh_shape[k] = (int64_t)l->sharding->mesh_shape[k];
    pdevs = malloc(l->sharding->n_devices * sizeof *pdevs);
    if (!pdevs) {
      rc = lm_errf(&err, LOOM_NO_MEMORY, "out of host memory");
      break;
    }
    for (size_t k = 0; k < l->sharding->n_devices; k++) pdevs[k] = (int32_t)l->sharding->devices[k];
    ps.num_devices = (int32_t)l->sharding->n_devices;
    ps.devices = pdevs;
    for (size_t d = 0; d < l->sharding->n_dims; d++)
      for (size_t k = 0; k < l->sharding->dims[d]->n_axes && k < LOOM_MAX_MESH_AXES; k++)
        ps.dim_axes[d][k] = (int8_t)l->sharding->dims[d]->axes[k];
    lm_sharding sh;
    uint32_t *udevs = NULL;
    rc = lm_sharding_from_public(&ps, (int32_t)l->n_dims, ld, &sh, &udevs, &err);
    if (rc == 0) {
      out[i] = lm_array_new(c, l->array, (loom_dtype)l->dtype, (int32_t)l->n_dims, ld, &sh, NULL);
      if (!out[i]) rc = lm_errf(&err, LOOM_NO_MEMORY, "out of host memory");
    }
    free(udevs);
    free(pdevs);
  }
  if (rc == 0) rc = take_json(r, out_json, &err);
  if (rc < 0)
    for (int32_t i = 0; i < n; i++) {
      loom_array_release(out[i]);
      out[i] = NULL;
    }
  if (r) lm_msg_free(&r->base);
  for (int32_t i = 0; devs && i < n; i++) free(devs[i]);
  free(ents), free(ptrs), free(shs), free(dax), free(dptr), free(axes), free(mesh), free(dims), free(devs);
  return rc < 0 ? lm_client_fail(c, &err) : LOOM_OK;
}

loom_status loom_checkpoint_query(loom_client *c, loom_checkpoint_query_op op, const char *name, char **out_json) {
  if (out_json) *out_json = NULL;
  if (!c) return LOOM_INVALID_ARGUMENT;
  if (op != LOOM_CHECKPOINT_LIST && op != LOOM_CHECKPOINT_SHOW && op != LOOM_CHECKPOINT_VERIFY &&
      op != LOOM_CHECKPOINT_REMOVE)
    return lm_client_failf(c, LOOM_INVALID_ARGUMENT, "unknown checkpoint query %d", (int)op);
  if (op != LOOM_CHECKPOINT_LIST && !name)
    return lm_client_failf(c, LOOM_INVALID_ARGUMENT, "this checkpoint query needs a name");
  Lmw__Checkpoint m = LMW__CHECKPOINT__INIT;
  m.op = (Lmw__CheckpointOp)op;
  m.name = (char *)(name ? name : "");
  Lmw__CheckpointReply *r = NULL;
  lm_err err;
  int rc = ckpt_call(c, LM_MSG_CHECKPOINT, &m.base, &r, &err);
  if (rc == 0) rc = take_json(r, out_json, &err);
  if (r) lm_msg_free(&r->base);
  return rc < 0 ? lm_client_fail(c, &err) : LOOM_OK;
}

loom_status loom_drain_worker(loom_client *c, int32_t worker, char **out_json) {
  if (out_json) *out_json = NULL;
  if (!c) return LOOM_INVALID_ARGUMENT;
  if (worker < 0) return lm_client_failf(c, LOOM_INVALID_ARGUMENT, "no worker %d", worker);
  Lmw__Drain m = LMW__DRAIN__INIT;
  m.worker = (uint32_t)worker;
  Lmw__CheckpointReply *r = NULL;
  lm_err err;
  int rc = ckpt_call(c, LM_MSG_DRAIN, &m.base, &r, &err);
  if (rc == 0) rc = take_json(r, out_json, &err);
  if (r) lm_msg_free(&r->base);
  return rc < 0 ? lm_client_fail(c, &err) : LOOM_OK;
}
