/* Ops: einsum and unary_einsum (legacy StableHLO ops outside the spec's core set: "Not in HLO").
 * einsum_config is "ab,bc->ac" (unary: "ab->ba"): labels are letters, a label repeated within an
 * operand takes its diagonal, labels missing from the output are summed over. Ellipses ("...")
 * are refused with an error. This is a direct loop over every label assignment: correct for any
 * config, meant for the small uses these ops have (JAX lowers einsum to dot_general). Products
 * and sums are computed in double (complex double) for floats and rounded once, with wrapping
 * arithmetic for integers, and/or for i1. */
#include <complex.h>
#include <stdlib.h>
#include <string.h>
#include "exec/ops_util.h"

typedef struct ecfg {
  int nops;                    /* 1 or 2 */
  int rank[2], orank;
  int lab[2][LM_MAX_RANK];     /* label index per operand dim */
  int olab[LM_MAX_RANK];
  int nlab;
  int64_t size[2 * LM_MAX_RANK + LM_MAX_RANK];
} ecfg;

static int parse_cfg(const lm_op *op, const lm_func *fn, ecfg *c, lm_err *err) {
  const lm_attr *a = lm_op_attr(op, "einsum_config");
  if (!a || a->kind != LM_ATTR_STRING || !a->s) return lm_op_err(err, op, LOOM_VERIFY, "missing attribute 'einsum_config'");
  const char *s = a->s;
  if (strstr(s, "...")) return lm_op_err(err, op, LOOM_UNSUPPORTED, "einsum_config '%s' uses an ellipsis, which is not supported", s);
  memset(c, 0, sizeof *c);
  c->nops = (int)op->nin;
  char letters[64];
  int nl = 0, part = 0, n = 0;
  bool out = false;
  for (const char *p = s;; p++) {
    if (*p == ',' || *p == 0 || (*p == '-' && p[1] == '>')) {
      if (out) c->orank = n;
      else if (part < 2) c->rank[part] = n;
      if (*p == 0) break;
      if (*p == ',') { part++; if (part > 1) goto bad; }
      else { if (out) goto bad; out = true; p++; }
      n = 0;
      continue;
    }
    if (*p == ' ') continue;
    if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z'))) goto bad;
    int li = -1;
    for (int i = 0; i < nl; i++)
      if (letters[i] == *p) li = i;
    if (li < 0) {
      if (out || nl >= 52) goto bad; /* an output label must appear in an operand */
      letters[nl] = *p;
      li = nl++;
    }
    if (n >= LM_MAX_RANK) goto bad;
    if (out) c->olab[n++] = li;
    else c->lab[part][n++] = li;
  }
  if (!out || part + 1 != c->nops) goto bad;
  c->nlab = nl;
  for (int i = 0; i < nl; i++) c->size[i] = -1;
  for (int q = 0; q < c->nops; q++) {
    const lm_type *t = lm_vtype(fn, op->in[q]);
    if (t->rank != c->rank[q])
      return lm_op_err(err, op, LOOM_VERIFY, "operand %d has rank %d but einsum_config '%s' gives it %d labels", q, t->rank, s,
                       c->rank[q]);
    for (int d = 0; d < t->rank; d++) {
      int64_t *sz = &c->size[c->lab[q][d]];
      if (*sz >= 0 && *sz != t->dims[d])
        return lm_op_err(err, op, LOOM_VERIFY, "label '%c' has sizes %lld and %lld", letters[c->lab[q][d]], (long long)*sz,
                         (long long)t->dims[d]);
      *sz = t->dims[d];
    }
  }
  const lm_type *r = lm_vtype(fn, op->out[0]);
  if (r->rank != c->orank) return lm_op_err(err, op, LOOM_VERIFY, "result rank %d does not match einsum_config '%s'", r->rank, s);
  for (int d = 0; d < r->rank; d++) {
    for (int e = 0; e < d; e++)
      if (c->olab[e] == c->olab[d]) goto bad;
    if (r->dims[d] != c->size[c->olab[d]])
      return lm_op_err(err, op, LOOM_VERIFY, "result dimension %d is %lld, label '%c' has size %lld", d, (long long)r->dims[d],
                       letters[c->olab[d]], (long long)c->size[c->olab[d]]);
  }
  return 0;
bad:
  return lm_op_err(err, op, LOOM_VERIFY, "einsum_config '%s' is malformed", s);
}

static int v_einsum(const lm_op *op, const lm_func *fn, lm_err *err) {
  uint32_t nin = op->code == LM_OP_UNARY_EINSUM ? 1 : 2;
  if (op->nin != nin || op->nout != 1) return lm_op_err(err, op, LOOM_VERIFY, "expects %u operand(s) and 1 result", nin);
  for (uint32_t i = 0; i < nin; i++) LM_TRY(lm_check_tensor(op, fn, false, i, err));
  LM_TRY(lm_check_tensor(op, fn, true, 0, err));
  lm_dtype dt = lm_vtype(fn, op->out[0])->dtype;
  for (uint32_t i = 0; i < nin; i++)
    if (lm_vtype(fn, op->in[i])->dtype != dt) return lm_op_err(err, op, LOOM_VERIFY, "operand and result element types must match");
  ecfg c;
  return parse_cfg(op, fn, &c, err);
}

static int k_einsum(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  ecfg c;
  LM_TRY(parse_cfg(k->op, k->fn, &c, k->err));
  lm_buffer *r = out[0];
  lm_dtype dt = r->type.dtype;
  size_t es = lm_dtype_size(dt);
  bool cplx = lm_dtype_is_complex(dt), fl = lm_dtype_is_float(dt) || cplx;
  lm_dtype part = dt == LOOM_DTYPE_C64 ? LOOM_DTYPE_F32 : LOOM_DTYPE_F64;
  int64_t st[2][LM_MAX_RANK], rs[LM_MAX_RANK];
  for (int q = 0; q < c.nops; q++) lm_row_strides(&in[q]->type, st[q]);
  lm_row_strides(&r->type, rs);
  /* per label: stride contribution in each operand and the result */
  int64_t ls[3][64] = {{0}};
  for (int q = 0; q < c.nops; q++)
    for (int d = 0; d < c.rank[q]; d++) ls[q][c.lab[q][d]] += st[q][d];
  for (int d = 0; d < c.orank; d++) ls[2][c.olab[d]] += rs[d];
  int64_t nr = lm_type_numel(&r->type);
  memset(r->data, 0, r->nbytes);
  int64_t idx[64] = {0}, sizes[64];
  for (int i = 0; i < c.nlab; i++) {
    sizes[i] = c.size[i];
    if (sizes[i] == 0) return 0;
  }
  double complex *acc = NULL; /* float sums, rounded once at the end */
  if (fl && !(acc = calloc((size_t)(nr ? nr : 1), sizeof *acc))) return lm_kerr(k, LOOM_NO_MEMORY, "out of host memory");
  do {
    int64_t o[3] = {0, 0, 0};
    for (int i = 0; i < c.nlab; i++)
      for (int q = 0; q < 3; q++) o[q] += idx[i] * ls[q][i];
    if (fl) {
      double complex v = 1;
      for (int q = 0; q < c.nops; q++) {
        const char *p = (const char *)in[q]->data + o[q] * (int64_t)es;
        v *= cplx ? lm_load_f64(p, part) + I * lm_load_f64(p + es / 2, part) : lm_load_f64(p, dt);
      }
      acc[o[2]] += v;
    } else {
      char *dst = (char *)r->data + o[2] * (int64_t)es;
      uint64_t v = 1, a = 0;
      for (int q = 0; q < c.nops; q++) {
        uint64_t x = 0;
        memcpy(&x, (const char *)in[q]->data + o[q] * (int64_t)es, es);
        v = dt == LOOM_DTYPE_PRED ? (v && x) : v * x;
      }
      memcpy(&a, dst, es);
      a = dt == LOOM_DTYPE_PRED ? (a || v) : a + v;
      memcpy(dst, &a, es);
    }
  } while (lm_index_next(c.nlab, sizes, idx));
  for (int64_t i = 0; fl && i < nr; i++) {
    char *dst = (char *)r->data + i * (int64_t)es;
    if (cplx) {
      lm_store_f64(dst, part, creal(acc[i]));
      lm_store_f64(dst + es / 2, part, cimag(acc[i]));
    } else {
      lm_store_f64(dst, dt, creal(acc[i]));
    }
  }
  free(acc);
  return 0;
}

void lm_register_einsum_kernels(void) {
  lm_kernel_register(LM_OP_EINSUM, k_einsum, v_einsum, 0);
  lm_kernel_register(LM_OP_UNARY_EINSUM, k_einsum, v_einsum, 0);
}
