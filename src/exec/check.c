/* Op family: check — the assertions of self-checking test programs (the StableHLO interpreter's
 * check dialect and the `stablehlo.custom_call @check.*` form the JAX-generated test data uses).
 * Semantics follow the reference interpreter (openxla/stablehlo stablehlo/tests/CheckOps.cpp and
 * the stablehlo-translate fallback):
 *   expect_eq / expect_eq_const        exact equality (a NaN equals a NaN; +0 equals -0)
 *   expect_almost_eq(_const)           |a - b| <= tolerance (attribute `tolerance`, default 1e-4);
 *                                      NaN equals NaN, infinities must match exactly, complex
 *                                      numbers part by part; integers and booleans exactly
 *   expect_close                       ULP distance within [min_ulp_difference, max_ulp_difference]
 *                                      (defaults 0 and 3); identical bits or two NaNs are 0 apart,
 *                                      finite vs non-finite is infinitely far; complex: the max of
 *                                      the parts
 *   custom_call @check.expect_eq / @check.expect_close (0..3 ULP) / @check.expect_almost_eq (1e-3)
 *   interpreter.probe / expect_serialized_eq  probe appends its operand's value under probe_id
 *                                      (files `<probe_dir>/<probe_id>.<n>.npy`, n = 0, 1, ...);
 *                                      expect_serialized_eq compares its operand exactly with the
 *                                      value number `iter` (default 0) recorded for probe_id
 * A failed check returns LOOM_CHECK_FAILED naming the first mismatching index and both values. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "common/half.h"
#include "common/npy.h"
#include "exec/kernel.h"

typedef enum { CMP_EQ, CMP_ALMOST, CMP_CLOSE } cmp_kind;

typedef struct cmp_spec {
  cmp_kind kind;
  double tol;              /* CMP_ALMOST */
  uint64_t min_ulp, max_ulp; /* CMP_CLOSE */
} cmp_spec;

/* Reads real element i (part = 0 real, 1 imaginary for complex) as double and its raw bits. */
static double load_part(const unsigned char *p, lm_dtype d, int64_t i, int part, uint64_t *bits, int *width) {
  size_t sz = lm_dtype_size(d);
  const unsigned char *e = p + (size_t)i * sz;
  switch (d) {
    case LOOM_DTYPE_F16: { uint16_t h; memcpy(&h, e, 2); *bits = h; *width = 16; return lm_f16_to_f64(h); }
    case LOOM_DTYPE_BF16: { uint16_t h; memcpy(&h, e, 2); *bits = h; *width = 16; return lm_bf16_to_f64(h); }
    case LOOM_DTYPE_F32: { uint32_t u; memcpy(&u, e, 4); *bits = u; *width = 32; return lm_bits_f32(u); }
    case LOOM_DTYPE_F64: { double v; memcpy(&v, e, 8); memcpy(bits, &v, 8); *width = 64; return v; }
    case LOOM_DTYPE_C64: { uint32_t u; memcpy(&u, e + 4 * part, 4); *bits = u; *width = 32; return lm_bits_f32(u); }
    case LOOM_DTYPE_C128: { double v; memcpy(&v, e + 8 * part, 8); memcpy(bits, &v, 8); *width = 64; return v; }
    default: *bits = 0; *width = 0; return 0;
  }
}

static int64_t load_int(const unsigned char *p, lm_dtype d, int64_t i, uint64_t *u) {
  size_t sz = lm_dtype_size(d);
  uint64_t raw = 0;
  memcpy(&raw, p + (size_t)i * sz, sz);
  *u = raw;
  if (lm_dtype_is_sint(d) && sz < 8) {
    int sh = (int)(64 - 8 * sz);
    return (int64_t)(raw << sh) >> sh;
  }
  return (int64_t)raw;
}

/* ULP distance between two floats of one width given as bits (see the header comment). */
static uint64_t ulp_diff(uint64_t a, uint64_t b, int width, double fa, double fb) {
  if (a == b) return 0;
  if (isnan(fa) && isnan(fb)) return 0;
  if (!isfinite(fa) || !isfinite(fb)) return UINT64_MAX;
  uint64_t sign = (uint64_t)1 << (width - 1);
  uint64_t ma = a & ~sign & (width == 64 ? UINT64_MAX : (((uint64_t)1 << width) - 1));
  uint64_t mb = b & ~sign & (width == 64 ? UINT64_MAX : (((uint64_t)1 << width) - 1));
  if ((a & sign) != (b & sign)) return ma + mb;
  return ma > mb ? ma - mb : mb - ma;
}

static bool part_matches(const cmp_spec *c, double x, double y, uint64_t bx, uint64_t by, int width) {
  switch (c->kind) {
    case CMP_EQ: return x == y || (isnan(x) && isnan(y));
    case CMP_ALMOST:
      if (isnan(x) || isnan(y)) return isnan(x) && isnan(y);
      if (isinf(x) || isinf(y)) return x == y;
      return fabs(x - y) <= c->tol;
    case CMP_CLOSE: {
      uint64_t u = ulp_diff(bx, by, width, x, y);
      return u >= c->min_ulp && u <= c->max_ulp;
    }
  }
  return false;
}

static void fmt_elem(char *buf, size_t cap, const unsigned char *p, lm_dtype d, int64_t i) {
  uint64_t bits, u;
  int w;
  if (lm_dtype_is_pred(d)) snprintf(buf, cap, "%s", p[i] ? "true" : "false");
  else if (lm_dtype_is_sint(d)) snprintf(buf, cap, "%lld", (long long)load_int(p, d, i, &u));
  else if (lm_dtype_is_uint(d)) { load_int(p, d, i, &u); snprintf(buf, cap, "%llu", (unsigned long long)u); }
  else if (lm_dtype_is_complex(d)) {
    double re = load_part(p, d, i, 0, &bits, &w), im = load_part(p, d, i, 1, &bits, &w);
    int dg = d == LOOM_DTYPE_C128 ? 17 : 9;
    snprintf(buf, cap, "(%.*g, %.*g)", dg, re, dg, im);
  } else {
    double v = load_part(p, d, i, 0, &bits, &w);
    snprintf(buf, cap, "%.*g (0x%0*llx)", d == LOOM_DTYPE_F64 ? 17 : 9, v, w / 4, (unsigned long long)bits);
  }
}

/* Writes the multi-index of flat element k of t into buf: "[1, 2]". */
static void fmt_index(char *buf, size_t cap, const lm_type *t, int64_t k) {
  int64_t idx[LM_MAX_RANK];
  for (int d = t->rank - 1; d >= 0; d--) {
    idx[d] = t->dims[d] ? k % t->dims[d] : 0;
    k = t->dims[d] ? k / t->dims[d] : 0;
  }
  size_t off = 0;
  off += (size_t)snprintf(buf + off, cap - off, "[");
  for (int d = 0; d < t->rank && off < cap; d++)
    off += (size_t)snprintf(buf + off, cap - off, "%s%lld", d ? ", " : "", (long long)idx[d]);
  if (off < cap) snprintf(buf + off, cap - off, "]");
}

/* Compares actual (a buffer) with expected data of type et; 0 or LOOM_CHECK_FAILED. */
static int compare(lm_kctx *k, const char *what, const cmp_spec *c, const lm_buffer *actual, const lm_type *et,
                   const void *expected) {
  char ta[256], tb[256];
  const lm_type *at = &actual->type;
  if (at->kind != LM_TYPE_TENSOR || et->kind != LM_TYPE_TENSOR)
    return lm_kerr(k, LOOM_UNSUPPORTED, "%s compares tensors only", what);
  if (!lm_type_equal(at, et))
    return lm_kerr(k, LOOM_CHECK_FAILED, "%s: actual is %s but expected is %s", what, lm_type_str(at, ta, sizeof ta),
                   lm_type_str(et, tb, sizeof tb));
  lm_dtype d = (lm_dtype)at->dtype;
  int64_t n = lm_type_numel(at);
  const unsigned char *pa = actual->data, *pe = expected;
  for (int64_t i = 0; i < n; i++) {
    bool ok;
    if (lm_dtype_is_float(d) || lm_dtype_is_complex(d)) {
      int parts = lm_dtype_is_complex(d) ? 2 : 1;
      ok = true;
      if (c->kind == CMP_CLOSE && parts == 2) {
        uint64_t worst = 0, b1, b2;
        int w;
        for (int part = 0; part < 2; part++) {
          double x = load_part(pa, d, i, part, &b1, &w), y = load_part(pe, d, i, part, &b2, &w);
          uint64_t u = ulp_diff(b1, b2, w, x, y);
          if (u > worst) worst = u;
        }
        ok = worst >= c->min_ulp && worst <= c->max_ulp;
      } else {
        for (int part = 0; part < parts && ok; part++) {
          uint64_t b1, b2;
          int w;
          double x = load_part(pa, d, i, part, &b1, &w), y = load_part(pe, d, i, part, &b2, &w);
          ok = part_matches(c, x, y, b1, b2, w);
        }
      }
    } else {
      uint64_t ua, ue;
      load_int(pa, d, i, &ua);
      load_int(pe, d, i, &ue);
      ok = ua == ue;
    }
    if (!ok) {
      char idx[200], va[96], ve[96];
      fmt_index(idx, sizeof idx, at, i);
      fmt_elem(va, sizeof va, pa, d, i);
      fmt_elem(ve, sizeof ve, pe, d, i);
      return lm_kerr(k, LOOM_CHECK_FAILED, "%s: mismatch at index %s: actual %s, expected %s", what, idx, va, ve);
    }
  }
  return 0;
}

static double attr_f(const lm_op *op, const char *name, double dflt) {
  const lm_attr *a = lm_op_attr(op, name);
  if (!a) return dflt;
  if (a->kind == LM_ATTR_FLOAT) return a->f;
  if (a->kind == LM_ATTR_INT) return (double)a->i;
  return dflt;
}

static cmp_spec spec_for(const lm_op *op) {
  cmp_spec c = {CMP_EQ, 1e-4, 0, 3};
  switch (op->code) {
    case LM_OP_CHECK_EXPECT_ALMOST_EQ: case LM_OP_CHECK_EXPECT_ALMOST_EQ_CONST:
      c.kind = CMP_ALMOST;
      c.tol = attr_f(op, "tolerance", 1e-4);
      break;
    case LM_OP_CHECK_EXPECT_CLOSE:
      c.kind = CMP_CLOSE;
      c.min_ulp = (uint64_t)lm_attr_int_or(lm_op_attr(op, "min_ulp_difference"), 0);
      c.max_ulp = (uint64_t)lm_attr_int_or(lm_op_attr(op, "max_ulp_difference"), 3);
      break;
    default: break;
  }
  return c;
}

/* ---- check dialect ops ---- */

static int v_check_pair(const lm_op *op, const lm_func *fn, lm_err *err) {
  if (op->nin != 2 || op->nout != 0) return lm_op_err(err, op, LOOM_VERIFY, "expects two operands and no results");
  if (!lm_type_equal(&fn->value_types[op->in[0]], &fn->value_types[op->in[1]]))
    return lm_op_err(err, op, LOOM_VERIFY, "operands must have the same type");
  return 0;
}

static int v_check_const(const lm_op *op, const lm_func *fn, lm_err *err) {
  const lm_attr *v = lm_op_attr(op, "value");
  if (op->nin != 1 || op->nout != 0) return lm_op_err(err, op, LOOM_VERIFY, "expects one operand and no results");
  if (!v || v->kind != LM_ATTR_DENSE) return lm_op_err(err, op, LOOM_VERIFY, "needs a dense `value` attribute");
  if (!lm_type_equal(&fn->value_types[op->in[0]], v->type))
    return lm_op_err(err, op, LOOM_VERIFY, "the operand's type differs from the value's type");
  return 0;
}

static int k_check_pair(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  cmp_spec c = spec_for(k->op);
  return compare(k, k->op->name, &c, in[0], &in[1]->type, in[1]->data);
}

static int k_check_const(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  cmp_spec c = spec_for(k->op);
  const lm_attr *v = lm_op_attr(k->op, "value");
  return compare(k, k->op->name, &c, in[0], v->type, v->data);
}

/* ---- custom_call @check.* ---- */

static int v_cc_check(const lm_op *op, const lm_func *fn, lm_err *err) {
  if (op->nin != 2) return lm_op_err(err, op, LOOM_VERIFY, "a check custom_call takes two operands (actual, expected)");
  if (!lm_type_equal(&fn->value_types[op->in[0]], &fn->value_types[op->in[1]]))
    return lm_op_err(err, op, LOOM_VERIFY, "operands must have the same type");
  for (uint32_t i = 0; i < op->nout; i++) {
    const lm_type *t = &fn->value_types[op->out[i]];
    if (t->kind != LM_TYPE_TENSOR || t->rank != 0 || t->dtype != LOOM_DTYPE_PRED)
      return lm_op_err(err, op, LOOM_VERIFY, "a check custom_call's results must be tensor<i1>");
  }
  return 0;
}

static int cc_check(lm_kctx *k, lm_buffer *const *in, lm_buffer **out, cmp_spec c, const char *what) {
  int rc = compare(k, what, &c, in[0], &in[1]->type, in[1]->data);
  for (uint32_t i = 0; i < k->op->nout; i++) ((uint8_t *)out[i]->data)[0] = rc == 0;
  return rc;
}

static int k_cc_expect_eq(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  return cc_check(k, in, out, (cmp_spec){CMP_EQ, 0, 0, 0}, "check.expect_eq");
}

static int k_cc_expect_close(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  return cc_check(k, in, out, (cmp_spec){CMP_CLOSE, 0, 0, 3}, "check.expect_close");
}

static int k_cc_expect_almost_eq(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  return cc_check(k, in, out, (cmp_spec){CMP_ALMOST, 1e-3, 0, 0}, "check.expect_almost_eq");
}

/* ---- probes ---- */

/* `<dir>/<id>.<n>.npy` into path; characters of id other than letters, digits, '_' and '-' are
 * written as %XX, so every id names its own files and none leaves the directory. */
static int probe_path(lm_kctx *k, const char *id, int64_t n, char *path, size_t cap) {
  if (!k->opts->probe_dir) return lm_kerr(k, LOOM_UNSUPPORTED, "probes need a probe directory (lm_run_opts.probe_dir)");
  if (!id || !*id) return lm_kerr(k, LOOM_VERIFY, "empty probe_id");
  size_t off = (size_t)snprintf(path, cap, "%s/", k->opts->probe_dir);
  for (const unsigned char *c = (const unsigned char *)id; *c && off + 8 < cap; c++) {
    if ((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '_' || *c == '-')
      path[off++] = (char)*c;
    else
      off += (size_t)snprintf(path + off, cap - off, "%%%02X", *c);
  }
  if (off + 32 >= cap) return lm_kerr(k, LOOM_INVALID_ARGUMENT, "probe path too long");
  snprintf(path + off, cap - off, ".%lld.npy", (long long)n);
  return 0;
}

static const char *probe_id(const lm_op *op) {
  const lm_attr *a = lm_op_attr(op, "probe_id");
  return a && a->kind == LM_ATTR_STRING ? a->s : NULL;
}

static int v_probe(const lm_op *op, const lm_func *fn, lm_err *err) {
  if (!probe_id(op)) return lm_op_err(err, op, LOOM_VERIFY, "needs a string probe_id");
  if (op->nin != 1 || op->nout != (op->code == LM_OP_INTERPRETER_PROBE ? 1u : 0u))
    return lm_op_err(err, op, LOOM_VERIFY, "wrong number of operands or results");
  if (fn->value_types[op->in[0]].kind != LM_TYPE_TENSOR) return lm_op_err(err, op, LOOM_UNSUPPORTED, "probes take tensors");
  return 0;
}

static int k_probe(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  char path[4096];
  struct stat st;
  int64_t n = 0;
  for (;; n++) {
    LM_TRY(probe_path(k, probe_id(k->op), n, path, sizeof path));
    if (stat(path, &st) != 0) break;
    if (n > 1000000) return lm_kerr(k, LOOM_UNSUPPORTED, "more than a million values under one probe_id");
  }
  lm_err e;
  if (lm_npy_write(path, (lm_dtype)in[0]->type.dtype, in[0]->type.rank, in[0]->type.dims, in[0]->data, in[0]->nbytes, &e) < 0)
    return lm_kerr(k, e.code, "%s", e.msg);
  out[0] = lm_buffer_retain(in[0]);
  return 0;
}

static int k_expect_serialized_eq(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  char path[4096];
  int64_t iter = lm_attr_int_or(lm_op_attr(k->op, "iter"), 0);
  LM_TRY(probe_path(k, probe_id(k->op), iter, path, sizeof path));
  lm_npy a;
  lm_err e;
  if (lm_npy_read(path, (lm_dtype)in[0]->type.dtype, 0, &a, &e) < 0)
    return lm_kerr(k, LOOM_CHECK_FAILED, "no value number %lld was recorded for probe '%s' (%s)", (long long)iter,
                   probe_id(k->op), e.msg);
  lm_type t;
  lm_type_tensor(&t, a.dtype, a.rank, a.dims);
  cmp_spec c = {CMP_EQ, 0, 0, 0};
  int rc = compare(k, "check.expect_serialized_eq", &c, in[0], &t, a.data);
  lm_npy_free(&a);
  return rc;
}

void lm_register_check_kernels(void) {
  lm_kernel_register(LM_OP_INTERPRETER_PROBE, k_probe, v_probe, LM_KF_OWN_OUTPUTS);
  lm_kernel_register(LM_OP_CHECK_EXPECT_SERIALIZED_EQ, k_expect_serialized_eq, v_probe, 0);
  lm_kernel_register(LM_OP_CHECK_EXPECT_EQ, k_check_pair, v_check_pair, 0);
  lm_kernel_register(LM_OP_CHECK_EXPECT_ALMOST_EQ, k_check_pair, v_check_pair, 0);
  lm_kernel_register(LM_OP_CHECK_EXPECT_CLOSE, k_check_pair, v_check_pair, 0);
  lm_kernel_register(LM_OP_CHECK_EXPECT_EQ_CONST, k_check_const, v_check_const, 0);
  lm_kernel_register(LM_OP_CHECK_EXPECT_ALMOST_EQ_CONST, k_check_const, v_check_const, 0);
  lm_custom_call_register("check.expect_eq", k_cc_expect_eq, v_cc_check, 0);
  lm_custom_call_register("check.expect_close", k_cc_expect_close, v_cc_check, 0);
  lm_custom_call_register("check.expect_almost_eq", k_cc_expect_almost_eq, v_cc_check, 0);
}
