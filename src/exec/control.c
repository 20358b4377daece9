/* Op family: control flow. func.call, stablehlo.while / if / case and stablehlo.composite (which
 * runs its decomposition function). Regions run through lm_exec_region, functions through
 * lm_exec_call; results are the buffers the region or function returned (no copies).
 * stablehlo.return / func.return are block terminators handled by the interpreter. */
#include <stdlib.h>
#include <string.h>
#include "exec/kernel.h"

static const lm_type *vtype(const lm_func *fn, uint32_t v) { return &fn->value_types[v]; }

/* Types of the values a region returns must match the op's results (while body, if/case
 * branches); the terminator is the region's last op. */
static int check_region_results(const lm_op *op, uint32_t r, const lm_func *fn, lm_err *err) {
  if (r >= op->nregions || op->regions[r].nblocks != 1)
    return lm_op_err(err, op, LOOM_VERIFY, "region %u is missing", r);
  const lm_block *b = &op->regions[r].blocks[0];
  if (b->nops == 0) return lm_op_err(err, op, LOOM_VERIFY, "region %u is empty", r);
  const lm_op *term = &b->ops[b->nops - 1];
  if (term->nin != op->nout)
    return lm_op_err(err, op, LOOM_VERIFY, "region %u returns %u values, the op has %u results", r, term->nin, op->nout);
  for (uint32_t i = 0; i < op->nout; i++)
    if (!lm_type_equal(vtype(fn, term->in[i]), vtype(fn, op->out[i]))) {
      char a[128], c[128];
      return lm_op_err(err, op, LOOM_VERIFY, "region %u returns %s as value %u, the result is %s", r,
                       lm_type_str(vtype(fn, term->in[i]), a, sizeof a), i, lm_type_str(vtype(fn, op->out[i]), c, sizeof c));
    }
  return 0;
}

/* Reads a rank-0 i1 or integer tensor. */
static int64_t scalar_int(const lm_buffer *b) {
  switch (b->type.dtype) {
    case LOOM_DTYPE_PRED: case LOOM_DTYPE_U8: return *(const uint8_t *)b->data;
    case LOOM_DTYPE_S8: return *(const int8_t *)b->data;
    case LOOM_DTYPE_S16: { int16_t v; memcpy(&v, b->data, 2); return v; }
    case LOOM_DTYPE_U16: { uint16_t v; memcpy(&v, b->data, 2); return v; }
    case LOOM_DTYPE_S32: { int32_t v; memcpy(&v, b->data, 4); return v; }
    case LOOM_DTYPE_U32: { uint32_t v; memcpy(&v, b->data, 4); return v; }
    case LOOM_DTYPE_S64: { int64_t v; memcpy(&v, b->data, 8); return v; }
    case LOOM_DTYPE_U64: { uint64_t v; memcpy(&v, b->data, 8); return v > INT64_MAX ? INT64_MAX : (int64_t)v; }
    default: return 0;
  }
}

/* ---- func.call ---- */

static int verify_call(const lm_op *op, const lm_func *fn, lm_err *err) {
  const lm_attr *c = lm_op_attr(op, "callee");
  if (!c || (c->kind != LM_ATTR_SYMBOL && c->kind != LM_ATTR_STRING) || !c->s)
    return lm_op_err(err, op, LOOM_VERIFY, "func.call needs a callee symbol");
  return 0;
}

static int k_call(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  const lm_attr *c = lm_op_attr(k->op, "callee");
  return lm_exec_call(k, c->s, in, k->op->nin, out, k->op->nout);
}

/* ---- stablehlo.composite (spec 'composite'): semantics are its decomposition ---- */

static int verify_composite(const lm_op *op, const lm_func *fn, lm_err *err) {
  const lm_attr *d = lm_op_attr(op, "decomposition");
  if (!d || (d->kind != LM_ATTR_SYMBOL && d->kind != LM_ATTR_STRING) || !d->s)
    return lm_op_err(err, op, LOOM_VERIFY, "composite needs a decomposition function");
  return 0;
}

static int k_composite(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  const lm_attr *d = lm_op_attr(k->op, "decomposition");
  return lm_exec_call(k, d->s, in, k->op->nin, out, k->op->nout);
}

/* ---- stablehlo.while (spec 'while'): cond(args) -> i1; body(args) -> args ---- */

static int verify_while(const lm_op *op, const lm_func *fn, lm_err *err) {
  if (op->nregions != 2) return lm_op_err(err, op, LOOM_VERIFY, "while needs a cond and a body region");
  if (op->nin != op->nout) return lm_op_err(err, op, LOOM_VERIFY, "while has %u operands and %u results", op->nin, op->nout);
  for (uint32_t r = 0; r < 2; r++) {
    if (op->regions[r].nblocks != 1) return lm_op_err(err, op, LOOM_VERIFY, "region %u must have one block", r);
    const lm_block *b = &op->regions[r].blocks[0];
    if (b->nargs != op->nin)
      return lm_op_err(err, op, LOOM_VERIFY, "region %u takes %u arguments, while has %u operands", r, b->nargs, op->nin);
    for (uint32_t i = 0; i < op->nin; i++)
      if (!lm_type_equal(vtype(fn, b->args[i]), vtype(fn, op->in[i])))
        return lm_op_err(err, op, LOOM_VERIFY, "region %u argument %u does not match operand %u's type", r, i, i);
  }
  const lm_block *cb = &op->regions[0].blocks[0];
  if (cb->nops == 0) return lm_op_err(err, op, LOOM_VERIFY, "empty cond region");
  const lm_op *ct = &cb->ops[cb->nops - 1];
  if (ct->nin != 1 || vtype(fn, ct->in[0])->kind != LM_TYPE_TENSOR || vtype(fn, ct->in[0])->dtype != LOOM_DTYPE_PRED ||
      lm_type_numel(vtype(fn, ct->in[0])) != 1)
    return lm_op_err(err, op, LOOM_VERIFY, "cond must return one tensor<i1>");
  return check_region_results(op, 1, fn, err);
}

static int k_while(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  uint32_t n = k->op->nin;
  lm_buffer **cur = calloc(n ? n : 1, sizeof *cur), **next = calloc(n ? n : 1, sizeof *next);
  if (!cur || !next) { free(cur); free(next); return lm_kerr(k, LOOM_NO_MEMORY, "out of host memory"); }
  for (uint32_t i = 0; i < n; i++) cur[i] = lm_buffer_retain(in[i]);
  int rc = 0;
  for (;;) {
    if (k->opts->cancel && *k->opts->cancel) { rc = lm_kerr(k, LOOM_CANCELLED, "run cancelled"); break; }
    lm_buffer *pred = NULL;
    rc = lm_exec_region(k, 0, cur, n, &pred, 1);
    if (rc < 0) break;
    bool go = *(const uint8_t *)pred->data != 0;
    lm_buffer_release(pred);
    if (!go) break;
    rc = lm_exec_region(k, 1, cur, n, next, n);
    if (rc < 0) break;
    for (uint32_t i = 0; i < n; i++) {
      lm_buffer_release(cur[i]);
      cur[i] = next[i];
      next[i] = NULL;
    }
  }
  if (rc == 0)
    for (uint32_t i = 0; i < n; i++) { out[i] = cur[i]; cur[i] = NULL; }
  for (uint32_t i = 0; i < n; i++) lm_buffer_release(cur[i]);
  free(cur);
  free(next);
  return rc;
}

/* ---- stablehlo.if (spec 'if') and stablehlo.case (spec 'case') ---- */

static int verify_branches(const lm_op *op, const lm_func *fn, lm_err *err, bool is_if) {
  if (op->nin != 1) return lm_op_err(err, op, LOOM_VERIFY, "expected one operand");
  const lm_type *t = vtype(fn, op->in[0]);
  if (t->kind != LM_TYPE_TENSOR || lm_type_numel(t) != 1)
    return lm_op_err(err, op, LOOM_VERIFY, "the %s must be a 0-dimensional tensor", is_if ? "predicate" : "index");
  if (is_if && t->dtype != LOOM_DTYPE_PRED) return lm_op_err(err, op, LOOM_VERIFY, "the predicate must be i1");
  if (!is_if && !lm_dtype_is_int(t->dtype)) return lm_op_err(err, op, LOOM_VERIFY, "the index must be an integer");
  if (is_if && op->nregions != 2) return lm_op_err(err, op, LOOM_VERIFY, "if needs two branches");
  if (!is_if && op->nregions < 1) return lm_op_err(err, op, LOOM_VERIFY, "case needs at least one branch (C1)");
  for (uint32_t r = 0; r < op->nregions; r++) {
    if (op->regions[r].nblocks != 1 || op->regions[r].blocks[0].nargs != 0)
      return lm_op_err(err, op, LOOM_VERIFY, "branch %u must take no arguments", r);
    LM_TRY(check_region_results(op, r, fn, err));
  }
  return 0;
}

static int verify_if(const lm_op *op, const lm_func *fn, lm_err *err) { return verify_branches(op, fn, err, true); }
static int verify_case(const lm_op *op, const lm_func *fn, lm_err *err) { return verify_branches(op, fn, err, false); }

static int k_if(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  uint32_t r = *(const uint8_t *)in[0]->data ? 0 : 1;
  return lm_exec_region(k, r, NULL, 0, out, k->op->nout);
}

static int k_case(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  int64_t idx = scalar_int(in[0]);
  uint32_t n = k->op->nregions;
  uint32_t r = (idx < 0 || idx >= (int64_t)n) ? n - 1 : (uint32_t)idx; /* out of range: the last branch */
  return lm_exec_region(k, r, NULL, 0, out, k->op->nout);
}

void lm_register_control_kernels(void) {
  lm_kernel_register(LM_OP_FUNC_CALL, k_call, verify_call, LM_KF_OWN_OUTPUTS);
  lm_kernel_register(LM_OP_COMPOSITE, k_composite, verify_composite, LM_KF_OWN_OUTPUTS);
  lm_kernel_register(LM_OP_WHILE, k_while, verify_while, LM_KF_OWN_OUTPUTS);
  lm_kernel_register(LM_OP_IF, k_if, verify_if, LM_KF_OWN_OUTPUTS);
  lm_kernel_register(LM_OP_CASE, k_case, verify_case, LM_KF_OWN_OUTPUTS);
}
