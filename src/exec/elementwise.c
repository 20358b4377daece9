/* Op family: elementwise ops (stablehlo and chlo), broadcast_in_dim, constant, constant_like,
 * convert, bitcast_convert and map. The math lives in the elementwise engine (ew.h); these
 * kernels run an op on its own, which only happens when fusion planning left it out (fused and
 * single ops normally run as programs built at plan time, see fusion.h). */
#include <stdlib.h>
#include <string.h>
#include "exec/ew.h"
#include "exec/fusion.h"
#include "exec/ops_util.h"

static bool dims_equal(const lm_type *a, const lm_type *b) {
  if (a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return false;
  return true;
}

static const lm_type *vtype(const lm_func *fn, uint32_t v) { return &fn->value_types[v]; }

static int need_tensor(const lm_op *op, const lm_type *t, const char *what, lm_err *err) {
  if (t->kind != LM_TYPE_TENSOR) return lm_op_err(err, op, LOOM_VERIFY, "%s must be a tensor", what);
  if (!lm_type_is_static(t)) return lm_op_err(err, op, LOOM_UNSUPPORTED, "%s has a dynamic shape", what);
  return 0;
}

/* ---- elementwise ops (spec: each op's section; chlo broadcast ops broadcast numpy-style) ---- */

static int verify_ew(const lm_op *op, const lm_func *fn, lm_err *err) {
  if (op->nout != 1) return lm_op_err(err, op, LOOM_VERIFY, "expected one result, got %u", op->nout);
  if (op->nin == 0 || op->nin > LM_EW_MAXIN) return lm_op_err(err, op, LOOM_VERIFY, "wrong number of operands (%u)", op->nin);
  const lm_type *rt = vtype(fn, op->out[0]);
  LM_TRY(need_tensor(op, rt, "the result", err));
  lm_opcode code = (lm_opcode)op->code;
  bool chlo = lm_ew_plain_code(code) != code;
  lm_opcode plain = lm_ew_plain_code(code);
  lm_dtype dts[LM_EW_MAXIN];
  for (uint32_t k = 0; k < op->nin; k++) {
    const lm_type *t = vtype(fn, op->in[k]);
    LM_TRY(need_tensor(op, t, "an operand", err));
    dts[k] = t->dtype;
    if (dims_equal(t, rt)) continue;
    /* spec: select's pred and clamp's min/max may be scalars (spec 'select' C1, 'clamp' C1-C2) */
    bool scalar_ok = t->rank == 0 && ((plain == LM_OP_SELECT && k == 0) || (plain == LM_OP_CLAMP && k != 1));
    if (scalar_ok || chlo) continue;
    char a[128], b[128];
    return lm_op_err(err, op, LOOM_VERIFY, "operand %u has type %s but the result is %s", k, lm_type_str(t, a, sizeof a),
                     lm_type_str(rt, b, sizeof b));
  }
  lm_ew_inst inst;
  lm_err e2;
  int rc = lm_ew_make(code, (int)op->nin, dts, rt->dtype, op, &inst, &e2);
  if (rc < 0) {
    if (strstr(e2.msg, " at ")) { if (err) *err = e2; return rc; }
    return lm_op_err(err, op, rc, "%s", e2.msg);
  }
  return 0;
}

/* Runs op as a one-op program (see fusion.c); in[] follows op->in. */
static int k_ew(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  lm_arena a;
  lm_arena_init(&a, 4096);
  lm_fusion *f;
  int rc = lm_fusion_single(k->op, k->fn, &a, &f, k->err);
  if (rc == 0) {
    lm_buffer *ins[LM_EW_MAXIN];
    for (uint32_t j = 0; j < f->nin; j++) {
      ins[j] = NULL;
      for (uint32_t q = 0; q < k->op->nin; q++)
        if (k->op->in[q] == f->in[j]) ins[j] = in[q];
    }
    rc = lm_fusion_run(k, f, ins, out);
  }
  lm_arena_free(&a);
  return rc;
}

/* ---- broadcast_in_dim (spec 'broadcast_in_dim') ---- */

static int verify_bcast(const lm_op *op, const lm_func *fn, lm_err *err) {
  if (op->nin != 1 || op->nout != 1) return lm_op_err(err, op, LOOM_VERIFY, "expected one operand and one result");
  const lm_type *ot = vtype(fn, op->in[0]), *rt = vtype(fn, op->out[0]);
  LM_TRY(need_tensor(op, ot, "the operand", err));
  LM_TRY(need_tensor(op, rt, "the result", err));
  if (ot->dtype != rt->dtype) return lm_op_err(err, op, LOOM_VERIFY, "operand and result element types differ (C1)");
  int64_t map[LM_MAX_RANK];
  int n = lm_attr_ints(lm_op_attr(op, "broadcast_dimensions"), map, LM_MAX_RANK);
  if (n != ot->rank)
    return lm_op_err(err, op, LOOM_VERIFY, "broadcast_dimensions needs %d entries, has %d (C2)", ot->rank, n < 0 ? 0 : n);
  bool seen[LM_MAX_RANK] = {0};
  for (int k = 0; k < n; k++) {
    if (map[k] < 0 || map[k] >= rt->rank) return lm_op_err(err, op, LOOM_VERIFY, "broadcast dimension %lld out of range (C3)", (long long)map[k]);
    if (seen[map[k]]) return lm_op_err(err, op, LOOM_VERIFY, "broadcast dimension %lld repeated (C4)", (long long)map[k]);
    seen[map[k]] = true;
    if (ot->dims[k] != 1 && ot->dims[k] != rt->dims[map[k]])
      return lm_op_err(err, op, LOOM_VERIFY, "operand dimension %d has size %lld, result dimension %lld has %lld (C5)", k,
                       (long long)ot->dims[k], (long long)map[k], (long long)rt->dims[map[k]]);
  }
  return 0;
}

/* ---- constant (spec 'constant'), chlo.constant, chlo.constant_like ---- */

static int verify_constant(const lm_op *op, const lm_func *fn, lm_err *err) {
  if (op->nout != 1) return lm_op_err(err, op, LOOM_VERIFY, "expected one result");
  const lm_type *rt = vtype(fn, op->out[0]);
  LM_TRY(need_tensor(op, rt, "the result", err));
  const lm_attr *a = lm_op_attr(op, "value");
  if (!a || a->kind != LM_ATTR_DENSE || !a->type) return lm_op_err(err, op, LOOM_VERIFY, "missing dense 'value' attribute");
  if (a->resource && !a->data && lm_type_nbytes(rt))
    return lm_op_err(err, op, LOOM_NOT_FOUND, "its value dense_resource<%s> has no bytes here (a large constant is put "
                     "as an array by the client that compiles the program; docs/scale.md)", a->resource);
  if (a->type->dtype != rt->dtype || lm_type_numel(a->type) != lm_type_numel(rt) || a->nbytes != lm_type_nbytes(rt)) {
    char x[128], y[128];
    return lm_op_err(err, op, LOOM_VERIFY, "value of type %s does not match the result type %s (C1)",
                     lm_type_str(a->type, x, sizeof x), lm_type_str(rt, y, sizeof y));
  }
  return 0;
}

static int k_constant(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  const lm_attr *a = lm_op_attr(k->op, "value");
  if (out[0]->nbytes != a->nbytes) return lm_kerr(k, LOOM_INTERNAL, "constant size mismatch");
  if (a->nbytes) memcpy(out[0]->data, a->data, a->nbytes);
  return 0;
}

/* The scalar value of constant_like's attribute, converted to dtype t, into out[16]. */
static int constant_like_value(const lm_op *op, lm_dtype t, unsigned char *out, lm_err *err) {
  const lm_attr *a = lm_op_attr(op, "value");
  if (!a) return lm_op_err(err, op, LOOM_VERIFY, "missing 'value' attribute");
  memset(out, 0, 16);
  switch (a->kind) {
    case LM_ATTR_FLOAT: { double d = a->f; lm_convert_array(out, t, &d, LOOM_DTYPE_F64, 1); return 0; }
    case LM_ATTR_INT: case LM_ATTR_BOOL: { int64_t v = a->i; lm_convert_array(out, t, &v, LOOM_DTYPE_S64, 1); return 0; }
    case LM_ATTR_DENSE:
      if (a->type && lm_type_numel(a->type) == 1) { lm_convert_array(out, t, a->data, a->type->dtype, 1); return 0; }
      break;
    default: break;
  }
  return lm_op_err(err, op, LOOM_UNSUPPORTED, "constant_like value must be a scalar");
}

static int verify_constant_like(const lm_op *op, const lm_func *fn, lm_err *err) {
  if (op->nin != 1 || op->nout != 1) return lm_op_err(err, op, LOOM_VERIFY, "expected one operand and one result");
  const lm_type *rt = vtype(fn, op->out[0]);
  LM_TRY(need_tensor(op, rt, "the result", err));
  unsigned char v[16];
  return constant_like_value(op, rt->dtype, v, err);
}

static int k_constant_like(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  unsigned char v[16];
  lm_dtype t = out[0]->type.dtype;
  LM_TRY(constant_like_value(k->op, t, v, k->err));
  size_t es = lm_dtype_size(t), n = out[0]->nbytes / (es ? es : 1);
  lm_fill_elems(out[0]->data, v, es, n);
  return 0;
}

/* ---- bitcast_convert (spec 'bitcast_convert'): the bits stay, the type changes ----
 * i1 counts as one bit (num_bits(i1) = 1): 64 i1 elements make one i64, element k being bit k of
 * the little-endian value; all other types are whole bytes, so the bytes are copied. */

static size_t num_bits(lm_dtype t) { return t == LOOM_DTYPE_PRED ? 1 : 8 * lm_dtype_size(t); }

static int verify_bitcast(const lm_op *op, const lm_func *fn, lm_err *err) {
  if (op->nin != 1 || op->nout != 1) return lm_op_err(err, op, LOOM_VERIFY, "expected one operand and one result");
  const lm_type *ot = vtype(fn, op->in[0]), *rt = vtype(fn, op->out[0]);
  LM_TRY(need_tensor(op, ot, "the operand", err));
  LM_TRY(need_tensor(op, rt, "the result", err));
  if (lm_dtype_is_complex(ot->dtype) != lm_dtype_is_complex(rt->dtype))
    return lm_op_err(err, op, LOOM_VERIFY, "conversion between complex and non-complex types is not permitted (C2)");
  size_t es = num_bits(ot->dtype), rs = num_bits(rt->dtype);
  /* (C1): equal widths keep the shape; a narrower result adds a trailing dim of es/rs; a
   * wider one drops the trailing dim of size rs/es */
  bool ok;
  if (es == rs) ok = dims_equal(ot, rt);
  else if (rs < es) {
    ok = rt->rank == ot->rank + 1 && rt->dims[ot->rank] == (int64_t)(es / rs);
    for (int i = 0; ok && i < ot->rank; i++) ok = rt->dims[i] == ot->dims[i];
  } else {
    ok = ot->rank >= 1 && rt->rank == ot->rank - 1 && ot->dims[ot->rank - 1] == (int64_t)(rs / es);
    for (int i = 0; ok && i < rt->rank; i++) ok = rt->dims[i] == ot->dims[i];
  }
  if (!ok) {
    char a[128], b[128];
    return lm_op_err(err, op, LOOM_VERIFY, "cannot bitcast %s to %s (C1)", lm_type_str(ot, a, sizeof a), lm_type_str(rt, b, sizeof b));
  }
  return 0;
}

static int k_bitcast(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  lm_dtype from = in[0]->type.dtype, to = out[0]->type.dtype;
  const uint8_t *src = in[0]->data;
  uint8_t *dst = out[0]->data;
  if ((from == LOOM_DTYPE_PRED) == (to == LOOM_DTYPE_PRED)) {
    if (in[0]->nbytes != out[0]->nbytes) return lm_kerr(k, LOOM_INTERNAL, "bitcast size mismatch");
    if (out[0]->nbytes) memcpy(dst, src, out[0]->nbytes);
  } else if (from == LOOM_DTYPE_PRED) {
    /* pack: byte j of the result collects i1 elements 8j..8j+7 */
    memset(dst, 0, out[0]->nbytes);
    for (size_t i = 0; i < in[0]->nbytes; i++)
      if (src[i]) dst[i / 8] |= (uint8_t)(1u << (i % 8));
  } else {
    for (size_t i = 0; i < out[0]->nbytes; i++) dst[i] = (src[i / 8] >> (i % 8)) & 1;
  }
  return 0;
}

/* ---- map (spec 'map'): the body applied elementwise ---- */

static int verify_map(const lm_op *op, const lm_func *fn, lm_err *err) {
  if (op->nout != 1 || op->nin < 1 || op->nregions != 1) return lm_op_err(err, op, LOOM_VERIFY, "map needs inputs, one result and a body");
  const lm_type *rt = vtype(fn, op->out[0]);
  LM_TRY(need_tensor(op, rt, "the result", err));
  for (uint32_t k = 0; k < op->nin; k++) {
    const lm_type *t = vtype(fn, op->in[k]);
    LM_TRY(need_tensor(op, t, "an input", err));
    if (!dims_equal(t, rt)) return lm_op_err(err, op, LOOM_VERIFY, "input %u and the result have different shapes (C1)", k);
  }
  const lm_block *b = &op->regions[0].blocks[0];
  if (b->nargs != op->nin) return lm_op_err(err, op, LOOM_VERIFY, "body takes %u arguments, map has %u inputs (C4)", b->nargs, op->nin);
  return 0;
}

static int k_map(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  const lm_op *op = k->op;
  size_t n = (size_t)lm_type_numel(&out[0]->type);
  lm_arena a;
  lm_arena_init(&a, 4096);
  lm_ew_prog *prog = NULL;
  lm_err e2;
  int rc = lm_ew_compile_region(&op->regions[0], k->fn, &a, &prog, &e2);
  if (rc == 0 && prog->nout == 1 && prog->nin == op->nin) {
    const void *ins[64];
    if (op->nin > 64) { lm_arena_free(&a); return lm_kerr(k, LOOM_UNSUPPORTED, "map with over 64 inputs"); }
    for (uint32_t i = 0; i < op->nin; i++) ins[i] = in[i]->data;
    void *outs[1] = {out[0]->data};
    rc = lm_ew_prog_run(prog, ins, outs, 0, n, k->err);
    lm_arena_free(&a);
    return rc;
  }
  lm_arena_free(&a);
  if (rc != 0 && rc != LOOM_UNSUPPORTED) { if (k->err) *k->err = e2; return rc; }
  /* general body: run the region once per element on scalar buffers */
  uint32_t ni = op->nin;
  lm_buffer **args = calloc(ni, sizeof *args);
  if (!args) return lm_kerr(k, LOOM_NO_MEMORY, "out of host memory");
  rc = 0;
  for (uint32_t i = 0; i < ni && rc == 0; i++) {
    lm_type st;
    lm_type_tensor(&st, in[i]->type.dtype, 0, NULL);
    rc = lm_kalloc(k, &st, &args[i]);
  }
  size_t oes = lm_dtype_size(out[0]->type.dtype);
  for (size_t e = 0; e < n && rc == 0; e++) {
    for (uint32_t i = 0; i < ni; i++) {
      size_t es = lm_dtype_size(in[i]->type.dtype);
      memcpy(args[i]->data, (char *)in[i]->data + e * es, es);
    }
    lm_buffer *res = NULL;
    rc = lm_exec_region(k, 0, args, ni, &res, 1);
    if (rc == 0) {
      if (res->nbytes != oes) rc = lm_kerr(k, LOOM_VERIFY, "map body returns the wrong type");
      else memcpy((char *)out[0]->data + e * oes, res->data, oes);
    }
    lm_buffer_release(res);
  }
  for (uint32_t i = 0; i < ni; i++) lm_buffer_release(args[i]);
  free(args);
  return rc;
}

void lm_register_elementwise_kernels(void) {
  for (int c = 1; c < LM_OP_COUNT; c++)
    if (lm_ew_is_elementwise((lm_opcode)c)) lm_kernel_register((lm_opcode)c, k_ew, verify_ew, LM_KF_ELEMENTWISE);
  lm_kernel_register(LM_OP_BROADCAST_IN_DIM, k_ew, verify_bcast, LM_KF_ELEMENTWISE);
  lm_kernel_register(LM_OP_CONSTANT, k_constant, verify_constant, 0);
  lm_kernel_register(LM_OP_CHLO_CONSTANT, k_constant, verify_constant, 0);
  lm_kernel_register(LM_OP_CHLO_CONSTANT_LIKE, k_constant_like, verify_constant_like, 0);
  lm_kernel_register(LM_OP_BITCAST_CONVERT, k_bitcast, verify_bitcast, 0);
  lm_kernel_register(LM_OP_MAP, k_map, verify_map, 0);
}
