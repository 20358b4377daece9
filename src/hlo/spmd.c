/* SPMD analysis (form, global/local types and shardings of main's arguments and results) and
 * the per-device rewrite of manual computations. Shardy's attributes are in ir.h's normal
 * form: `sdy.sharding` STRUCTs with `mesh` and `dims`, `sdy.mesh` module ops with `axis_names`,
 * `axis_sizes` and optional `device_ids`. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "hlo/spmd.h"
#include "hlo/spmd_int.h"
#include "hlo/parse.h"
#include "hlo/partition.h"

#define MAX_PROCS 65536

const char *lm_spmd_form_name(lm_spmd_form f) {
  switch (f) {
    case LM_SPMD_SINGLE: return "single";
    case LM_SPMD_REPLICAS: return "replicas";
    case LM_SPMD_PARTITIONS: return "partitions";
  }
  return "?";
}

void lm_spmd_info_free(lm_spmd_info *info) {
  if (!info) return;
  free(info->inputs);
  free(info->outputs);
  free(info->mesh_procs);
  free(info);
}

/* ---- meshes and shardings (spmd_int.h) ---- */

int lm_sp_loc_errf(lm_err *err, int code, const lm_loc *loc, const char *fmt, ...) {
  char msg[LM_ERR_MSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (loc && loc->file) return lm_errf(err, code, "%s:%u:%u: %s", loc->file, loc->line, loc->col, msg);
  return lm_errf(err, code, "%s", msg);
}

const lm_attr *lm_sp_field(const lm_attr *a, const char *name) {
  if (!a || (a->kind != LM_ATTR_STRUCT && a->kind != LM_ATTR_DICT)) return NULL;
  return lm_attrs_get(a->fields, a->n, name);
}

int lm_sp_mesh_from_struct(const lm_attr *st, const char *sym, lm_sp_mesh *out, const lm_loc *loc, lm_err *err) {
  memset(out, 0, sizeof *out);
  out->attr = st;
  out->sym = sym;
  const lm_attr *names = lm_sp_field(st, "axis_names"), *sizes = lm_sp_field(st, "axis_sizes");
  if (!names || names->kind != LM_ATTR_ARRAY || !sizes)
    return lm_sp_loc_errf(err, LOOM_VERIFY, loc, "malformed sdy.mesh%s%s", sym ? " @" : "", sym ? sym : "");
  int64_t sz[LM_MESH_MAX_AXES + 1];
  int n = lm_attr_ints(sizes, sz, LM_MESH_MAX_AXES + 1);
  if (n < 0 || (uint32_t)n != names->n)
    return lm_sp_loc_errf(err, LOOM_VERIFY, loc, "malformed sdy.mesh%s%s", sym ? " @" : "", sym ? sym : "");
  if (n > LM_MESH_MAX_AXES)
    return lm_sp_loc_errf(err, LOOM_UNSUPPORTED, loc, "sdy.mesh with %d axes: Loom supports at most %d", n,
                    LM_MESH_MAX_AXES);
  out->rank = n;
  out->ndev = 1;
  for (int i = 0; i < n; i++) {
    if (names->items[i].kind != LM_ATTR_STRING || sz[i] < 1 || sz[i] > MAX_PROCS)
      return lm_sp_loc_errf(err, LOOM_VERIFY, loc, "malformed axis %d of sdy.mesh", i);
    out->names[i] = names->items[i].s;
    out->sizes[i] = sz[i];
    out->ndev *= sz[i];
    if (out->ndev > MAX_PROCS) return lm_sp_loc_errf(err, LOOM_UNSUPPORTED, loc, "sdy.mesh with more than %d devices", MAX_PROCS);
  }
  out->device_ids = lm_sp_field(st, "device_ids");
  return 0;
}

/* The mesh a sharding refers to: inline, or a module-level sdy.mesh by symbol. */
int lm_sp_sharding_mesh(const lm_module *m, const lm_attr *sh, lm_sp_mesh *out, const lm_loc *loc, lm_err *err) {
  const lm_attr *ma = lm_sp_field(sh, "mesh");
  if (!ma) return lm_sp_loc_errf(err, LOOM_VERIFY, loc, "sdy.sharding without a mesh");
  if (ma->kind == LM_ATTR_STRUCT) return lm_sp_mesh_from_struct(ma, NULL, out, loc, err);
  if (ma->kind != LM_ATTR_SYMBOL && ma->kind != LM_ATTR_STRING)
    return lm_sp_loc_errf(err, LOOM_VERIFY, loc, "sdy.sharding's mesh is neither a symbol nor a mesh");
  for (uint32_t i = 0; i < m->nops; i++) {
    const lm_op *op = &m->ops[i];
    if (op->code != LM_OP_SDY_MESH) continue;
    const lm_attr *nm = lm_op_attr(op, "sym_name");
    if (!nm || !nm->s || strcmp(nm->s, ma->s) != 0) continue;
    return lm_sp_mesh_from_struct(lm_op_attr(op, "mesh"), nm->s, out, &op->loc, err);
  }
  return lm_sp_loc_errf(err, LOOM_VERIFY, loc, "sdy.sharding refers to an undefined mesh @%s", ma->s);
}

bool lm_sp_same_mesh(const lm_sp_mesh *a, const lm_sp_mesh *b) {
  if (a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (a->sizes[i] != b->sizes[i] || strcmp(a->names[i], b->names[i]) != 0) return false;
  if (!a->device_ids != !b->device_ids) return false;
  if (a->device_ids) {
    if (a->device_ids->n != b->device_ids->n) return false;
    if (a->device_ids->kind == LM_ATTR_INTS && b->device_ids->kind == LM_ATTR_INTS)
      return !a->device_ids->n ||
             memcmp(a->device_ids->ints, b->device_ids->ints, a->device_ids->n * sizeof(int64_t)) == 0;
  }
  return true;
}

int lm_sp_axis_index(const lm_sp_mesh *ms, const char *name) {
  for (int i = 0; i < ms->rank; i++)
    if (!strcmp(ms->names[i], name)) return i;
  return -1;
}

/* Converts an sdy.sharding over ms for a value of type t into s (devices left NULL). */
int lm_sp_sharding_from_attr(const lm_sp_mesh *ms, const lm_attr *sh, const lm_type *t, lm_sharding *s,
                              const char *what, const lm_loc *loc, lm_err *err) {
  lm_sharding_init(s);
  s->mesh_rank = ms->rank;
  for (int i = 0; i < ms->rank; i++) s->mesh_shape[i] = ms->sizes[i];
  s->ndev = (uint32_t)ms->ndev;
  const lm_attr *dims = lm_sp_field(sh, "dims");
  if (!dims || dims->kind != LM_ATTR_ARRAY) return lm_sp_loc_errf(err, LOOM_VERIFY, loc, "%s: sdy.sharding without dims", what);
  if (dims->n != t->rank)
    return lm_sp_loc_errf(err, LOOM_VERIFY, loc, "%s: the sharding has %u dimensions but the value has rank %d", what,
                    dims->n, t->rank);
  const lm_attr *unred = lm_sp_field(sh, "unreduced");
  if (unred && unred->kind == LM_ATTR_ARRAY && unred->n > 0)
    return lm_sp_loc_errf(err, LOOM_UNSUPPORTED, loc, "%s: unreduced shardings are not supported", what);
  for (uint32_t d = 0; d < dims->n; d++) {
    const lm_attr *ax = &dims->items[d];
    if (ax->kind != LM_ATTR_ARRAY) return lm_sp_loc_errf(err, LOOM_VERIFY, loc, "%s: malformed dimension sharding", what);
    if (ax->n > LM_MESH_MAX_AXES) return lm_sp_loc_errf(err, LOOM_VERIFY, loc, "%s: too many axes on dimension %u", what, d);
    for (uint32_t j = 0; j < ax->n; j++) {
      const char *nm = ax->items[j].s;
      if (ax->items[j].kind != LM_ATTR_STRING || !nm)
        return lm_sp_loc_errf(err, LOOM_VERIFY, loc, "%s: malformed axis name", what);
      if (strchr(nm, ':'))
        return lm_sp_loc_errf(err, LOOM_UNSUPPORTED, loc, "%s: sub-axis \"%s\" is not supported", what, nm);
      int a = lm_sp_axis_index(ms, nm);
      if (a < 0) return lm_sp_loc_errf(err, LOOM_VERIFY, loc, "%s: axis \"%s\" is not in the mesh", what, nm);
      s->dim_axes[d][j] = (int8_t)a;
    }
  }
  lm_err e2;
  if (lm_sharding_check(s, t->rank, t->dims, &e2) < 0)
    return lm_sp_loc_errf(err, LOOM_VERIFY, loc, "%s of type %s: %s", what, lm_type_str(t, (char[96]){0}, 96), e2.msg);
  return 0;
}

static bool same_dim_axes(const lm_sharding *a, const lm_sharding *b, int rank) {
  for (int d = 0; d < rank; d++)
    for (int j = 0; j < LM_MESH_MAX_AXES; j++) {
      if (a->dim_axes[d][j] != b->dim_axes[d][j]) return false;
      if (a->dim_axes[d][j] < 0) break;
    }
  return true;
}

void lm_sp_local_type(const lm_type *g, const lm_sharding *s, lm_type *l) {
  *l = *g;
  for (int d = 0; d < g->rank; d++) l->dims[d] = g->dims[d] / lm_sharding_dim_parts(s, d);
}

int lm_sp_check_tensor(const lm_type *t, const char *what, const lm_loc *loc, lm_err *err) {
  char b[96];
  if (t->kind != LM_TYPE_TENSOR)
    return lm_sp_loc_errf(err, LOOM_UNSUPPORTED, loc, "%s is a %s: launches take and return tensors only", what,
                    t->kind == LM_TYPE_TOKEN ? "token" : "tuple");
  if (!lm_type_is_static(t))
    return lm_sp_loc_errf(err, LOOM_UNSUPPORTED, loc, "%s has a dynamic shape (%s)", what, lm_type_str(t, b, sizeof b));
  return 0;
}

/* ---- analysis ---- */

static const lm_op *find_nested_manual(const lm_region *r, uint32_t nregions) {
  for (uint32_t i = 0; i < nregions; i++)
    for (uint32_t b = 0; b < r[i].nblocks; b++)
      for (uint32_t k = 0; k < r[i].blocks[b].nops; k++) {
        const lm_op *op = &r[i].blocks[b].ops[k];
        if (op->code == LM_OP_SDY_MANUAL_COMPUTATION) return op;
        const lm_op *inner = find_nested_manual(op->regions, op->nregions);
        if (inner) return inner;
      }
  return NULL;
}

typedef struct vbind {
  bool bound;
  lm_sharding sh;
} vbind;

/* Checks the uses, inside op and its regions, of values defined at the top of @main: outside the
 * manual computations every device holds whole values only, so each must be replicated. */
static int check_outside_uses(const lm_op *op, const lm_op *at, const uint8_t *top, vbind *vb, const lm_sp_mesh *ms,
                              const lm_func *f, lm_err *err) {
  for (uint32_t i = 0; i < op->nin; i++) {
    uint32_t v = op->in[i];
    if (!top[v]) continue;
    if (!vb[v].bound) { /* an argument only used here: every device needs all of it */
      lm_sharding_init(&vb[v].sh);
      vb[v].sh.mesh_rank = ms->rank;
      for (int a = 0; a < ms->rank; a++) vb[v].sh.mesh_shape[a] = ms->sizes[a];
      vb[v].sh.ndev = (uint32_t)ms->ndev;
      vb[v].bound = true;
      continue;
    }
    if (!lm_sharding_is_replicated(&vb[v].sh)) {
      char b[96];
      return lm_sp_loc_errf(err, LOOM_UNSUPPORTED, &at->loc,
                      "%s uses a sharded value (%s) outside every sdy.manual_computation: that needs automatic SPMD "
                      "partitioning, which Loom does not have yet (only replicated values can be used outside "
                      "shard_map)",
                      at->name, lm_type_str(&f->value_types[v], b, sizeof b));
    }
  }
  for (uint32_t r = 0; r < op->nregions; r++)
    for (uint32_t b = 0; b < op->regions[r].nblocks; b++)
      for (uint32_t k = 0; k < op->regions[r].blocks[b].nops; k++)
        LM_TRY(check_outside_uses(&op->regions[r].blocks[b].ops[k], at, top, vb, ms, f, err));
  return 0;
}

static int analyze_partitions(const lm_module *m, const lm_func *f, lm_spmd_info *info, lm_err *err) {
  const lm_block *body = &f->body.blocks[0];
  lm_sp_mesh ms;
  bool have_mesh = false;
  int rc = 0;
  char what[160];
  /* the mesh: every sharding of every manual computation must use the same one */
  for (uint32_t k = 0; rc == 0 && k < body->nops; k++) {
    const lm_op *op = &body->ops[k];
    if (op->code != LM_OP_SDY_MANUAL_COMPUTATION) continue;
    const lm_attr *ins = lm_op_attr(op, "in_shardings"), *outs = lm_op_attr(op, "out_shardings");
    if (!ins || !outs || ins->kind != LM_ATTR_ARRAY || outs->kind != LM_ATTR_ARRAY || ins->n != op->nin ||
        outs->n != op->nout || op->nregions != 1 || op->regions[0].nblocks != 1 ||
        op->regions[0].blocks[0].nargs != op->nin || op->regions[0].blocks[0].nops == 0)
      return lm_sp_loc_errf(err, LOOM_VERIFY, &op->loc, "malformed sdy.manual_computation");
    for (uint32_t i = 0; rc == 0 && i < ins->n + outs->n; i++) {
      const lm_attr *sh = i < ins->n ? &ins->items[i] : &outs->items[i - ins->n];
      lm_sp_mesh m2;
      rc = lm_sp_sharding_mesh(m, sh, &m2, &op->loc, err);
      if (rc < 0) break;
      if (!have_mesh) {
        ms = m2;
        have_mesh = true;
      } else if (!lm_sp_same_mesh(&ms, &m2)) {
        rc = lm_sp_loc_errf(err, LOOM_UNSUPPORTED, &op->loc, "manual computations over different meshes are not supported");
      }
    }
  }
  if (rc < 0) return rc;
  if (!have_mesh) return lm_errf(err, LOOM_UNSUPPORTED, "the manual computations in @main have no shardings (no mesh)");
  vbind *vb = calloc(f->nvalues ? f->nvalues : 1, sizeof *vb);
  uint8_t *top = calloc(f->nvalues ? f->nvalues : 1, 1); /* defined at the top level of @main */
  if (!vb || !top) {
    free(vb);
    free(top);
    return lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  }
  for (uint32_t a = 0; a < body->nargs; a++) top[body->args[a]] = 1;
  for (uint32_t k = 0; rc == 0 && k < body->nops; k++) {
    const lm_op *op = &body->ops[k];
    if (op->code == LM_OP_FUNC_RETURN) break;
    if (op->code != LM_OP_SDY_MANUAL_COMPUTATION) {
      /* work outside the manual computations runs on every device, on whole (replicated) values */
      rc = check_outside_uses(op, op, top, vb, &ms, f, err);
      for (uint32_t j = 0; rc == 0 && j < op->nout; j++) {
        uint32_t v = op->out[j];
        lm_sharding_init(&vb[v].sh);
        vb[v].sh.mesh_rank = ms.rank;
        for (int a = 0; a < ms.rank; a++) vb[v].sh.mesh_shape[a] = ms.sizes[a];
        vb[v].sh.ndev = (uint32_t)ms.ndev;
        vb[v].bound = true;
        top[v] = 1;
      }
      continue;
    }
    const lm_attr *ins = lm_op_attr(op, "in_shardings"), *outs = lm_op_attr(op, "out_shardings");
    const lm_attr *man = lm_op_attr(op, "manual_axes");
    const lm_block *mb = &op->regions[0].blocks[0];
    const lm_op *ret = &mb->ops[mb->nops - 1];
    if (ret->code != LM_OP_SDY_RETURN || ret->nin != op->nout) {
      rc = lm_sp_loc_errf(err, LOOM_VERIFY, &op->loc, "sdy.manual_computation's body must end in sdy.return of %u values",
                    op->nout);
      break;
    }
    /* every mesh axis of size > 1 must be manual */
    for (int a = 0; rc == 0 && a < ms.rank; a++) {
      if (ms.sizes[a] == 1) continue;
      bool found = false;
      for (uint32_t j = 0; man && man->kind == LM_ATTR_ARRAY && j < man->n; j++)
        if (man->items[j].s && !strcmp(man->items[j].s, ms.names[a])) found = true;
      if (!found)
        rc = lm_sp_loc_errf(err, LOOM_UNSUPPORTED, &op->loc,
                      "sdy.manual_computation leaves mesh axis \"%s\" automatic: partially manual computations "
                      "need automatic SPMD partitioning, which Loom does not have yet",
                      ms.names[a]);
    }
    /* values of the body from outside it (not operands) would be global values inside a
     * per-device body: only replicated ones may be captured */
    for (uint32_t i = 0; rc == 0 && i + 1 < mb->nops; i++) rc = check_outside_uses(&mb->ops[i], op, top, vb, &ms, f, err);
    for (uint32_t i = 0; rc == 0 && i < op->nin; i++) {
      uint32_t v = op->in[i];
      const lm_type *gt = &f->value_types[v];
      snprintf(what, sizeof what, "operand %u of sdy.manual_computation", i);
      rc = lm_sp_check_tensor(gt, what, &op->loc, err);
      lm_sharding s;
      if (rc == 0) rc = lm_sp_sharding_from_attr(&ms, &ins->items[i], gt, &s, what, &op->loc, err);
      if (rc < 0) break;
      if (vb[v].bound) {
        if (!same_dim_axes(&vb[v].sh, &s, gt->rank))
          rc = lm_sp_loc_errf(err, LOOM_UNSUPPORTED, &op->loc,
                        lm_sharding_is_replicated(&vb[v].sh)
                            ? "%s is a whole (replicated) value, but the computation takes it sharded: slicing it "
                              "per device is not supported yet (pass it as an argument of @main instead)"
                            : "%s is used with a different sharding than before: resharding between manual "
                              "computations is not supported",
                        what);
      } else {
        vb[v].bound = true;
        vb[v].sh = s;
      }
      lm_type lt;
      lm_sp_local_type(gt, &s, &lt);
      const lm_type *bt = &f->value_types[mb->args[i]];
      if (rc == 0 && !lm_type_equal(&lt, bt)) {
        char b1[96], b2[96], b3[96];
        rc = lm_sp_loc_errf(err, LOOM_VERIFY, &op->loc, "%s: %s sharded this way gives local shards of %s, but the body takes %s",
                      what, lm_type_str(gt, b1, sizeof b1), lm_type_str(&lt, b2, sizeof b2),
                      lm_type_str(bt, b3, sizeof b3));
      }
    }
    for (uint32_t j = 0; rc == 0 && j < op->nout; j++) {
      uint32_t v = op->out[j];
      const lm_type *gt = &f->value_types[v];
      snprintf(what, sizeof what, "result %u of sdy.manual_computation", j);
      rc = lm_sp_check_tensor(gt, what, &op->loc, err);
      lm_sharding s;
      if (rc == 0) rc = lm_sp_sharding_from_attr(&ms, &outs->items[j], gt, &s, what, &op->loc, err);
      if (rc < 0) break;
      vb[v].bound = true;
      vb[v].sh = s;
      top[v] = 1;
      lm_type lt;
      lm_sp_local_type(gt, &s, &lt);
      const lm_type *rt = &f->value_types[ret->in[j]];
      if (!lm_type_equal(&lt, rt)) {
        char b1[96], b2[96], b3[96];
        rc = lm_sp_loc_errf(err, LOOM_VERIFY, &op->loc, "%s: %s sharded this way gives local shards of %s, but the body returns %s",
                      what, lm_type_str(gt, b1, sizeof b1), lm_type_str(&lt, b2, sizeof b2),
                      lm_type_str(rt, b3, sizeof b3));
      }
    }
  }
  free(top);
  if (rc == 0 && ms.ndev != info->num_partitions)
    rc = lm_errf(err, LOOM_VERIFY, "the mesh%s%s has %lld devices but mhlo.num_partitions is %lld", ms.sym ? " @" : "",
                 ms.sym ? ms.sym : "", (long long)ms.ndev, (long long)info->num_partitions);
  /* mesh position -> process */
  if (rc == 0) {
    info->mesh_procs = calloc(info->nproc, sizeof *info->mesh_procs);
    uint8_t *seen = calloc(info->nproc, 1);
    if (!info->mesh_procs || !seen) rc = lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
    for (uint32_t i = 0; rc == 0 && i < info->nproc; i++) {
      int64_t id = i;
      if (ms.device_ids) {
        if (ms.device_ids->kind != LM_ATTR_INTS || ms.device_ids->n != info->nproc) {
          rc = lm_errf(err, LOOM_VERIFY, "the mesh's device_ids must list %u ids", info->nproc);
          break;
        }
        id = ms.device_ids->ints[i];
      }
      if (id < 0 || id >= (int64_t)info->nproc || seen[id]) {
        rc = lm_errf(err, LOOM_VERIFY, "the mesh's device_ids must be a permutation of 0..%u", info->nproc - 1);
        break;
      }
      seen[id] = 1;
      info->mesh_procs[i] = (uint32_t)id;
    }
    free(seen);
  }
  /* arguments: bound by their uses; unused ones by their own sdy.sharding, else replicated */
  for (uint32_t i = 0; rc == 0 && i < f->nargs; i++) {
    uint32_t v = body->args[i];
    lm_spmd_value *pv = &info->inputs[i];
    snprintf(what, sizeof what, "argument %u of main", i);
    rc = lm_sp_check_tensor(&f->arg_types[i], what, &f->loc, err);
    if (rc < 0) break;
    pv->global = f->arg_types[i];
    if (!vb[v].bound) {
      const lm_attr *sa = f->arg_attrs ? lm_sp_field(&f->arg_attrs[i], "sdy.sharding") : NULL;
      lm_sharding s;
      lm_sharding_init(&s);
      s.mesh_rank = ms.rank;
      for (int a = 0; a < ms.rank; a++) s.mesh_shape[a] = ms.sizes[a];
      s.ndev = (uint32_t)ms.ndev;
      if (sa && sa->kind == LM_ATTR_STRUCT) {
        lm_sp_mesh m2;
        rc = lm_sp_sharding_mesh(m, sa, &m2, &f->loc, err);
        if (rc == 0 && !lm_sp_same_mesh(&ms, &m2))
          rc = lm_sp_loc_errf(err, LOOM_UNSUPPORTED, &f->loc, "%s is sharded over another mesh", what);
        if (rc == 0) rc = lm_sp_sharding_from_attr(&ms, sa, &pv->global, &s, what, &f->loc, err);
      }
      vb[v].bound = true;
      vb[v].sh = s;
    }
    pv->sh = vb[v].sh;
    pv->sh.devices = info->mesh_procs;
    lm_sp_local_type(&pv->global, &pv->sh, &pv->local);
  }
  /* results: the return's operands */
  const lm_op *fret = &body->ops[body->nops - 1];
  for (uint32_t j = 0; rc == 0 && j < f->nresults; j++) {
    uint32_t v = fret->in[j];
    if (!vb[v].bound) { /* an argument returned as it is, never used: replicated */
      lm_sharding_init(&vb[v].sh);
      vb[v].sh.mesh_rank = ms.rank;
      for (int a = 0; a < ms.rank; a++) vb[v].sh.mesh_shape[a] = ms.sizes[a];
      vb[v].sh.ndev = (uint32_t)ms.ndev;
      vb[v].bound = true;
    }
    snprintf(what, sizeof what, "result %u of main", j);
    rc = lm_sp_check_tensor(&f->value_types[v], what, &fret->loc, err);
    if (rc < 0) break;
    lm_spmd_value *pv = &info->outputs[j];
    pv->global = f->value_types[v];
    pv->sh = vb[v].sh;
    pv->sh.devices = info->mesh_procs;
    lm_sp_local_type(&pv->global, &pv->sh, &pv->local);
  }
  free(vb);
  return rc;
}

int lm_spmd_analyze(const lm_module *m, lm_spmd_info **out, lm_err *err) {
  *out = NULL;
  const lm_func *f = lm_module_func(m, "main");
  if (!f) return lm_errf(err, LOOM_VERIFY, "the module has no function @main");
  if (f->body.nblocks != 1 || f->body.blocks[0].nops == 0)
    return lm_sp_loc_errf(err, LOOM_VERIFY, &f->loc, "@main has no body");
  int64_t r = lm_attr_int_or(lm_module_attr(m, "mhlo.num_replicas"), 1);
  int64_t p = lm_attr_int_or(lm_module_attr(m, "mhlo.num_partitions"), 1);
  if (r < 1 || p < 1 || r > MAX_PROCS || p > MAX_PROCS || r * p > MAX_PROCS)
    return lm_errf(err, LOOM_UNSUPPORTED, "mhlo.num_replicas = %lld, mhlo.num_partitions = %lld: Loom runs 1 to %d processes",
                   (long long)r, (long long)p, MAX_PROCS);
  lm_spmd_info *info = calloc(1, sizeof *info);
  if (!info) return lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  info->num_replicas = r;
  info->num_partitions = p;
  info->nproc = (uint32_t)(r * p);
  info->ninputs = f->nargs;
  info->noutputs = f->nresults;
  info->inputs = calloc(f->nargs ? f->nargs : 1, sizeof *info->inputs);
  info->outputs = calloc(f->nresults ? f->nresults : 1, sizeof *info->outputs);
  if (!info->inputs || !info->outputs) {
    lm_spmd_info_free(info);
    return lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  }
  const lm_block *body = &f->body.blocks[0];
  uint32_t nmanual = 0;
  const lm_op *nested = NULL;
  for (uint32_t k = 0; k < body->nops; k++) {
    const lm_op *op = &body->ops[k];
    if (op->code == LM_OP_SDY_MANUAL_COMPUTATION) {
      nmanual++;
      if (!nested) nested = find_nested_manual(op->regions, op->nregions);
    } else if (!nested) {
      nested = find_nested_manual(op->regions, op->nregions);
    }
  }
  for (uint32_t i = 0; !nested && i < m->nfuncs; i++)
    if (&m->funcs[i] != f) nested = find_nested_manual(&m->funcs[i].body, 1);
  int rc = 0;
  if (nested) {
    rc = lm_sp_loc_errf(err, LOOM_UNSUPPORTED, &nested->loc,
                  "sdy.manual_computation inside another op or function: only manual computations directly in "
                  "@main are supported");
  } else if (nmanual) {
    if (r > 1)
      rc = lm_errf(err, LOOM_UNSUPPORTED, "manual computations with mhlo.num_replicas = %lld > 1 are not supported",
                   (long long)r);
    else {
      info->form = LM_SPMD_PARTITIONS;
      rc = analyze_partitions(m, f, info, err);
    }
  } else if (p > 1 && r == 1 && lm_partition_wanted(m)) {
    /* an annotated global program: the partitioner decides every value's sharding */
    info->form = LM_SPMD_PARTITIONS;
    info->partitioned = true;
    rc = lm_partition(m, info, NULL, NULL, err);
  } else if (p > 1) {
    rc = lm_errf(err, LOOM_UNSUPPORTED,
                 "the module has mhlo.num_replicas = %lld and mhlo.num_partitions = %lld without manual "
                 "computations: automatic partitioning runs programs with one replica only",
                 (long long)r, (long long)p);
  } else {
    info->form = r > 1 ? LM_SPMD_REPLICAS : LM_SPMD_SINGLE;
    info->mesh_procs = calloc(info->nproc, sizeof *info->mesh_procs);
    if (!info->mesh_procs) rc = lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
    for (uint32_t i = 0; rc == 0 && i < info->nproc; i++) info->mesh_procs[i] = i;
    char what[64];
    for (uint32_t i = 0; rc == 0 && i < f->nargs + f->nresults; i++) {
      bool in = i < f->nargs;
      const lm_type *t = in ? &f->arg_types[i] : &f->result_types[i - f->nargs];
      snprintf(what, sizeof what, "%s %u of main", in ? "argument" : "result", in ? i : i - f->nargs);
      rc = lm_sp_check_tensor(t, what, &f->loc, err);
      if (rc < 0) break;
      lm_spmd_value *pv = in ? &info->inputs[i] : &info->outputs[i - f->nargs];
      pv->local = *t;
      pv->global = *t;
      lm_sharding_init(&pv->sh);
      pv->sh.devices = info->mesh_procs;
      if (info->form == LM_SPMD_REPLICAS) {
        if (t->rank + 1 > LM_MAX_RANK) {
          rc = lm_sp_loc_errf(err, LOOM_UNSUPPORTED, &f->loc, "%s has rank %d: replicated programs take rank < %d", what,
                        t->rank, LM_MAX_RANK);
          break;
        }
        pv->global.rank = (uint8_t)(t->rank + 1);
        pv->global.dims[0] = r;
        memcpy(pv->global.dims + 1, t->dims, (size_t)t->rank * sizeof(int64_t));
        pv->sh.mesh_rank = 1;
        pv->sh.mesh_shape[0] = r;
        pv->sh.ndev = (uint32_t)r;
        pv->sh.dim_axes[0][0] = 0;
      }
    }
  }
  if (rc < 0) {
    lm_spmd_info_free(info);
    return rc;
  }
  *out = info;
  return 0;
}

/* ---- the per-device rewrite ---- */

static void remap_block(lm_block *b, const uint32_t *subst);

static void remap_op(lm_op *op, const uint32_t *subst) {
  for (uint32_t i = 0; i < op->nin; i++) op->in[i] = subst[op->in[i]];
  for (uint32_t r = 0; r < op->nregions; r++)
    for (uint32_t k = 0; k < op->regions[r].nblocks; k++) remap_block(&op->regions[r].blocks[k], subst);
}

static void remap_block(lm_block *b, const uint32_t *subst) {
  for (uint32_t k = 0; k < b->nops; k++) remap_op(&b->ops[k], subst);
}

int lm_spmd_localize(lm_module *m, lm_err *err) {
  lm_spmd_info *info;
  LM_TRY(lm_spmd_analyze(m, &info, err));
  if (info->form != LM_SPMD_PARTITIONS) {
    lm_spmd_info_free(info);
    return 0;
  }
  if (info->partitioned) {
    char *text = NULL;
    lm_module *nm = NULL;
    int rc = lm_partition(m, info, &text, NULL, err);
    lm_spmd_info_free(info);
    lm_parse_opts po = {.filename = "<partitioned>"};
    if (rc == 0) rc = lm_parse_module(text, strlen(text), &po, &nm, err);
    free(text);
    if (rc < 0) return rc;
    lm_arena old = m->arena;
    *m = *nm;
    free(nm);
    lm_arena_free(&old);
    return 0;
  }
  lm_func *f = NULL;
  for (uint32_t i = 0; i < m->nfuncs; i++)
    if (!strcmp(m->funcs[i].name, "main")) f = &m->funcs[i];
  lm_block *body = &f->body.blocks[0];
  uint32_t *subst = lm_arena_array(&m->arena, f->nvalues ? f->nvalues : 1, sizeof *subst);
  uint32_t nops = 0;
  for (uint32_t k = 0; k < body->nops; k++)
    nops += body->ops[k].code == LM_OP_SDY_MANUAL_COMPUTATION ? body->ops[k].regions[0].blocks[0].nops - 1 : 1;
  lm_op *ops = lm_arena_array(&m->arena, (size_t)nops + 1, sizeof *ops);
  lm_type *arg_types = lm_arena_array(&m->arena, f->nargs ? f->nargs : 1, sizeof *arg_types);
  lm_type *res_types = lm_arena_array(&m->arena, f->nresults ? f->nresults : 1, sizeof *res_types);
  if (!subst || !ops || !arg_types || !res_types) {
    lm_spmd_info_free(info);
    return lm_errf(err, LOOM_NO_MEMORY, "out of host memory rewriting the module");
  }
  for (uint32_t v = 0; v < f->nvalues; v++) subst[v] = v;
  uint32_t n = 0;
  for (uint32_t k = 0; k < body->nops; k++) {
    lm_op *op = &body->ops[k];
    if (op->code == LM_OP_FUNC_RETURN) {
      remap_op(op, subst);
      ops[n++] = *op;
      break;
    }
    if (op->code != LM_OP_SDY_MANUAL_COMPUTATION) { /* replicated work: every device does all of it */
      remap_op(op, subst);
      ops[n++] = *op;
      continue;
    }
    lm_block *mb = &op->regions[0].blocks[0];
    for (uint32_t i = 0; i < op->nin; i++) subst[mb->args[i]] = subst[op->in[i]];
    remap_block(mb, subst);
    const lm_op *ret = &mb->ops[mb->nops - 1];
    for (uint32_t j = 0; j < op->nout; j++) subst[op->out[j]] = ret->in[j];
    for (uint32_t i = 0; i + 1 < mb->nops; i++) ops[n++] = mb->ops[i];
  }
  for (uint32_t i = 0; i < f->nargs; i++) {
    arg_types[i] = info->inputs[i].local;
    f->value_types[body->args[i]] = info->inputs[i].local;
  }
  for (uint32_t j = 0; j < f->nresults; j++) res_types[j] = info->outputs[j].local;
  f->arg_types = arg_types;
  f->result_types = res_types;
  if (f->arg_attrs)
    for (uint32_t i = 0; i < f->nargs; i++) f->arg_attrs[i].n = 0; /* global shardings no longer apply */
  if (f->result_attrs)
    for (uint32_t j = 0; j < f->nresults; j++) f->result_attrs[j].n = 0;
  body->ops = ops;
  body->nops = n;
  lm_spmd_info_free(info);
  return 0;
}
