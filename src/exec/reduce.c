/* Op family: reduce (spec 'reduce'), any number of operands and any body.
 *
 * Three paths, chosen per op at run time:
 *   1. one operand and a body that is a single add/multiply/maximum/minimum/and/or/xor
 *      (lm_region_simple_binop): accumulate in a wide type (double for floats, complex double,
 *      int64 for integers; wrapping is preserved) over merged dimension groups, rounding once at
 *      the end. Floating-point sums are thus more accurate than any order of f32 additions.
 *   2. bodies made only of elementwise ops (argmax/argmin, variadic reductions): the body is
 *      compiled into an elementwise program (ew.h) and evaluated over many outputs at once; with
 *      few outputs, each output's inputs are split into up to 256 contiguous lanes folded in
 *      order and then combined pairwise (a schedule the spec allows: a binary tree whose in-order
 *      leaves are the inputs in order, with the init value once at the left).
 *   3. anything else: the body region runs element by element on scalar buffers. */
#include <complex.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "exec/dot.h"
#include "exec/ew.h"

static const lm_type *vtype(const lm_func *fn, uint32_t v) { return &fn->value_types[v]; }

static int scratch(lm_kctx *k, size_t bytes, lm_buffer **out) {
  lm_type t;
  int64_t n = (int64_t)(bytes ? bytes : 1);
  lm_type_tensor(&t, LOOM_DTYPE_U8, 1, &n);
  return lm_kalloc(k, &t, out);
}

static int verify_reduce(const lm_op *op, const lm_func *fn, lm_err *err) {
  if (op->nin < 2 || op->nin % 2) return lm_op_err(err, op, LOOM_VERIFY, "reduce needs inputs and as many init values (C3)");
  uint32_t n = op->nin / 2;
  if (op->nout != n) return lm_op_err(err, op, LOOM_VERIFY, "reduce has %u inputs but %u results (C3)", n, op->nout);
  if (op->nregions != 1 || op->regions[0].nblocks != 1) return lm_op_err(err, op, LOOM_VERIFY, "reduce needs a body");
  const lm_type *t0 = vtype(fn, op->in[0]);
  int64_t dims[LM_MAX_RANK];
  int nd = lm_attr_ints(lm_op_attr(op, "dimensions"), dims, LM_MAX_RANK);
  if (nd < 0) return lm_op_err(err, op, LOOM_VERIFY, "missing or malformed 'dimensions'");
  bool red[LM_MAX_RANK] = {0};
  for (int i = 0; i < nd; i++) {
    if (dims[i] < 0 || dims[i] >= t0->rank) return lm_op_err(err, op, LOOM_VERIFY, "dimension %lld out of range (C4)", (long long)dims[i]);
    if (red[dims[i]]) return lm_op_err(err, op, LOOM_VERIFY, "dimension %lld repeated (C5)", (long long)dims[i]);
    red[dims[i]] = true;
  }
  for (uint32_t k = 0; k < n; k++) {
    const lm_type *t = vtype(fn, op->in[k]), *it = vtype(fn, op->in[n + k]), *rt = vtype(fn, op->out[k]);
    if (t->kind != LM_TYPE_TENSOR || it->kind != LM_TYPE_TENSOR || rt->kind != LM_TYPE_TENSOR)
      return lm_op_err(err, op, LOOM_VERIFY, "inputs, init values and results must be tensors");
    if (!lm_type_is_static(t) || !lm_type_is_static(rt)) return lm_op_err(err, op, LOOM_UNSUPPORTED, "dynamic shapes are not supported");
    if (t->rank != t0->rank) return lm_op_err(err, op, LOOM_VERIFY, "inputs have different shapes (C1)");
    for (int d = 0; d < t->rank; d++)
      if (t->dims[d] != t0->dims[d]) return lm_op_err(err, op, LOOM_VERIFY, "inputs have different shapes (C1)");
    if (it->rank != 0 || it->dtype != t->dtype || rt->dtype != t->dtype)
      return lm_op_err(err, op, LOOM_VERIFY, "input %u, its init value and result need the same element type, init rank 0 (C2)", k);
    int r = 0;
    bool ok = true;
    for (int d = 0; d < t->rank; d++)
      if (!red[d]) ok = ok && r < rt->rank && rt->dims[r++] == t->dims[d];
    if (!ok || r != rt->rank) return lm_op_err(err, op, LOOM_VERIFY, "result %u has the wrong shape (C7)", k);
  }
  const lm_block *b = &op->regions[0].blocks[0];
  if (b->nargs != 2 * n) return lm_op_err(err, op, LOOM_VERIFY, "body takes %u arguments, expected %u (C6)", b->nargs, 2 * n);
  return 0;
}

/* ---- path 1: simple binary bodies ---- */

typedef enum { ACC_F, ACC_C, ACC_S, ACC_U } acc_kind;
typedef enum { RADD, RMUL, RMAX, RMIN, RAND, ROR, RXOR } rop;

#define FMAXD(a, b) ((a) != (a) ? (a) : (b) != (b) ? (b) : (a) > (b) ? (a) : (b) > (a) ? (b) : (signbit(a) ? (b) : (a)))
#define FMIND(a, b) ((a) != (a) ? (a) : (b) != (b) ? (b) : (a) < (b) ? (a) : (b) < (a) ? (b) : (signbit(a) ? (a) : (b)))
#define CLESSD(a, b) (creal(a) < creal(b) || (creal(a) == creal(b) && cimag(a) < cimag(b)))

/* acc[0] = acc[0] op x[0] op ... op x[n-1]  (one row reduced into one output) */
static void row_reduce(acc_kind ak, rop op, void *acc, const void *x, size_t n) {
  switch (ak) {
    case ACC_F: {
      double *a = acc;
      const double *v = x;
      if (op == RADD) {
        double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        size_t i = 0;
        for (; i + 4 <= n; i += 4) { s0 += v[i]; s1 += v[i + 1]; s2 += v[i + 2]; s3 += v[i + 3]; }
        for (; i < n; i++) s0 += v[i];
        *a += (s0 + s1) + (s2 + s3);
      } else if (op == RMUL) {
        for (size_t i = 0; i < n; i++) *a *= v[i];
      } else if (op == RMAX) {
        for (size_t i = 0; i < n; i++) *a = FMAXD(*a, v[i]);
      } else {
        for (size_t i = 0; i < n; i++) *a = FMIND(*a, v[i]);
      }
      break;
    }
    case ACC_C: {
      double complex *a = acc;
      const double complex *v = x;
      for (size_t i = 0; i < n; i++) {
        if (op == RADD) *a += v[i];
        else if (op == RMUL) *a *= v[i];
        else if (op == RMAX) *a = CLESSD(*a, v[i]) ? v[i] : *a;
        else *a = CLESSD(v[i], *a) ? v[i] : *a;
      }
      break;
    }
    case ACC_S: case ACC_U: {
      uint64_t *a = acc;
      const uint64_t *v = x;
      uint64_t s = *a;
      switch (op) {
        case RADD: for (size_t i = 0; i < n; i++) s += v[i]; break;
        case RMUL: for (size_t i = 0; i < n; i++) s *= v[i]; break;
        case RAND: for (size_t i = 0; i < n; i++) s &= v[i]; break;
        case ROR: for (size_t i = 0; i < n; i++) s |= v[i]; break;
        case RXOR: for (size_t i = 0; i < n; i++) s ^= v[i]; break;
        case RMAX:
          if (ak == ACC_S) for (size_t i = 0; i < n; i++) s = (int64_t)v[i] > (int64_t)s ? v[i] : s;
          else for (size_t i = 0; i < n; i++) s = v[i] > s ? v[i] : s;
          break;
        case RMIN:
          if (ak == ACC_S) for (size_t i = 0; i < n; i++) s = (int64_t)v[i] < (int64_t)s ? v[i] : s;
          else for (size_t i = 0; i < n; i++) s = v[i] < s ? v[i] : s;
          break;
      }
      *a = s;
      break;
    }
  }
}

/* acc[j] = acc[j] op x[j] for j < n  (a row of inputs into a row of outputs) */
static void row_accumulate(acc_kind ak, rop op, void *acc, const void *x, size_t n) {
  switch (ak) {
    case ACC_F: {
      double *a = acc;
      const double *v = x;
      if (op == RADD) for (size_t i = 0; i < n; i++) a[i] += v[i];
      else if (op == RMUL) for (size_t i = 0; i < n; i++) a[i] *= v[i];
      else if (op == RMAX) for (size_t i = 0; i < n; i++) a[i] = FMAXD(a[i], v[i]);
      else for (size_t i = 0; i < n; i++) a[i] = FMIND(a[i], v[i]);
      break;
    }
    case ACC_C:
      for (size_t i = 0; i < n; i++) row_reduce(ak, op, (double complex *)acc + i, (const double complex *)x + i, 1);
      break;
    case ACC_S: case ACC_U: {
      uint64_t *a = acc;
      const uint64_t *v = x;
      switch (op) {
        case RADD: for (size_t i = 0; i < n; i++) a[i] += v[i]; break;
        case RMUL: for (size_t i = 0; i < n; i++) a[i] *= v[i]; break;
        case RAND: for (size_t i = 0; i < n; i++) a[i] &= v[i]; break;
        case ROR: for (size_t i = 0; i < n; i++) a[i] |= v[i]; break;
        case RXOR: for (size_t i = 0; i < n; i++) a[i] ^= v[i]; break;
        case RMAX:
          if (ak == ACC_S) for (size_t i = 0; i < n; i++) a[i] = (int64_t)v[i] > (int64_t)a[i] ? v[i] : a[i];
          else for (size_t i = 0; i < n; i++) a[i] = v[i] > a[i] ? v[i] : a[i];
          break;
        case RMIN:
          if (ak == ACC_S) for (size_t i = 0; i < n; i++) a[i] = (int64_t)v[i] < (int64_t)a[i] ? v[i] : a[i];
          else for (size_t i = 0; i < n; i++) a[i] = v[i] < a[i] ? v[i] : a[i];
          break;
      }
      break;
    }
  }
}

/* Maps a body op and element type to an accumulator kind and op; false if there is no fast path. */
static bool fast_op(lm_opcode code, lm_dtype t, acc_kind *ak, rop *op) {
  switch (code) {
    case LM_OP_ADD: *op = RADD; break;
    case LM_OP_MULTIPLY: *op = RMUL; break;
    case LM_OP_MAXIMUM: *op = RMAX; break;
    case LM_OP_MINIMUM: *op = RMIN; break;
    case LM_OP_AND: *op = RAND; break;
    case LM_OP_OR: *op = ROR; break;
    case LM_OP_XOR: *op = RXOR; break;
    default: return false;
  }
  if (t == LOOM_DTYPE_PRED) {
    /* i1: add and maximum are or, multiply and minimum are and (spec 'add', 'multiply', ...) */
    if (*op == RADD || *op == RMAX) *op = ROR;
    else if (*op == RMUL || *op == RMIN) *op = RAND;
    *ak = ACC_U;
    return true;
  }
  if (lm_dtype_is_sint(t)) { *ak = ACC_S; return true; }
  if (lm_dtype_is_uint(t)) { *ak = ACC_U; return true; }
  if (*op == RAND || *op == ROR || *op == RXOR) return false;
  if (lm_dtype_is_float(t)) { *ak = ACC_F; return true; }
  if (lm_dtype_is_complex(t)) { *ak = ACC_C; return true; }
  return false;
}

static lm_dtype acc_dtype(acc_kind ak) {
  return ak == ACC_F ? LOOM_DTYPE_F64 : ak == ACC_C ? LOOM_DTYPE_C128 : ak == ACC_S ? LOOM_DTYPE_S64 : LOOM_DTYPE_U64;
}

/* Input dims merged into alternating kept/reduced groups (adjacent dims of the same kind merge;
 * size-1 dims vanish). */
typedef struct groups {
  int n;
  int64_t size[LM_MAX_RANK];
  bool red[LM_MAX_RANK];
  int64_t istride[LM_MAX_RANK]; /* input element stride of each group */
  int64_t ostride[LM_MAX_RANK]; /* output element stride of each kept group */
} groups;

static void make_groups(const lm_type *t, const bool *red, groups *g) {
  g->n = 0;
  for (int d = 0; d < t->rank; d++) {
    if (t->dims[d] == 1) continue;
    if (g->n > 0 && g->red[g->n - 1] == red[d]) g->size[g->n - 1] *= t->dims[d];
    else { g->size[g->n] = t->dims[d]; g->red[g->n] = red[d]; g->n++; }
  }
  int64_t is = 1, os = 1;
  for (int i = g->n - 1; i >= 0; i--) {
    g->istride[i] = is;
    is *= g->size[i];
    g->ostride[i] = g->red[i] ? 0 : os;
    if (!g->red[i]) os *= g->size[i];
  }
}

#define CHUNK 512

static int reduce_fast(lm_kctx *k, const lm_buffer *x, const lm_buffer *init, lm_buffer *out, const bool *red, acc_kind ak,
                       rop op) {
  lm_dtype t = x->type.dtype, at = acc_dtype(ak);
  size_t aes = lm_dtype_size(at), es = lm_dtype_size(t);
  size_t O = (size_t)lm_type_numel(&out->type), total = (size_t)lm_type_numel(&x->type);
  lm_buffer *accb = NULL;
  LM_TRY(scratch(k, (O ? O : 1) * aes, &accb));
  char *acc = accb->data;
  unsigned char iv[16];
  lm_convert_array(iv, at, init->data, t, 1);
  for (size_t o = 0; o < O; o++) memcpy(acc + o * aes, iv, aes);
  groups g;
  make_groups(&x->type, red, &g);
  if (total > 0 && O > 0) {
    unsigned char buf[CHUNK * 16] __attribute__((aligned(16)));
    int L = g.n - 1;
    int64_t len = L >= 0 ? g.size[L] : 1;
    bool last_red = L >= 0 && g.red[L];
    int64_t idx[LM_MAX_RANK] = {0};
    for (size_t done = 0; done < total; done += (size_t)len) {
      int64_t ib = 0, ob = 0;
      for (int i = 0; i < L; i++) { ib += idx[i] * g.istride[i]; ob += idx[i] * g.ostride[i]; }
      for (int64_t s = 0; s < len; s += CHUNK) {
        size_t m = (size_t)(len - s < CHUNK ? len - s : CHUNK);
        lm_convert_array(buf, at, (const char *)x->data + (size_t)(ib + s) * es, t, m);
        if (last_red) row_reduce(ak, op, acc + (size_t)ob * aes, buf, m);
        else row_accumulate(ak, op, acc + (size_t)(ob + s) * aes, buf, m);
      }
      for (int i = L - 1; i >= 0; i--) {
        if (++idx[i] < g.size[i]) break;
        idx[i] = 0;
      }
    }
  }
  lm_convert_array(out->data, t, acc, at, O);
  lm_buffer_release(accb);
  return 0;
}

/* ---- path 2: compiled elementwise bodies ---- */

/* Permutes input x to [kept dims..., reduced dims...] (kept_first) or [reduced..., kept...]. */
static int canonical(lm_kctx *k, const lm_buffer *x, const bool *red, bool kept_first, lm_buffer **out, const void **data) {
  const lm_type *t = &x->type;
  int64_t perm[LM_MAX_RANK];
  int n = 0;
  for (int pass = 0; pass < 2; pass++)
    for (int d = 0; d < t->rank; d++)
      if (red[d] == (kept_first ? pass == 1 : pass == 0)) perm[n++] = d;
  bool id = true;
  for (int i = 0; i < n; i++) id = id && perm[i] == i;
  *out = NULL;
  if (id) { *data = x->data; return 0; }
  LM_TRY(scratch(k, x->nbytes, out));
  lm_permute_copy((*out)->data, x->data, t, perm, lm_dtype_size(t->dtype));
  *data = (*out)->data;
  return 0;
}

#define MAXN 32
#define LANES 256

static int reduce_program(lm_kctx *k, const lm_ew_prog *prog, lm_buffer *const *in, lm_buffer **out, uint32_t N,
                          const bool *red) {
  size_t O = (size_t)lm_type_numel(&out[0]->type), total = (size_t)lm_type_numel(&in[0]->type);
  size_t R = O ? total / O : 0;
  size_t es[MAXN];
  for (uint32_t j = 0; j < N; j++) es[j] = lm_dtype_size(in[j]->type.dtype);
  int rc = 0;
  lm_buffer *canon[MAXN] = {0}, *wb = NULL;
  const void *X[MAXN];
  const void *pin[2 * MAXN];
  void *pout[MAXN];
  if (O == 0) return 0;
  bool wide = O >= LANES || R <= 4;
  for (uint32_t j = 0; j < N && rc == 0; j++) rc = canonical(k, in[j], red, !wide, &canon[j], &X[j]);
  if (rc < 0) goto done;
  if (wide) {
    /* inputs [R, O]: acc = body(acc, row r) for r in order, over all outputs at once */
    size_t bytes = 0;
    for (uint32_t j = 0; j < N; j++) bytes += (O * es[j] + 63) & ~(size_t)63; /* each array 64-byte aligned */
    if ((rc = scratch(k, bytes, &wb)) < 0) goto done;
    char *B[MAXN];
    char *p = wb->data;
    for (uint32_t j = 0; j < N; j++) {
      char *a = out[j]->data;
      for (size_t o = 0; o < O; o++) memcpy(a + o * es[j], in[N + j]->data, es[j]);
      B[j] = p;
      p += (O * es[j] + 63) & ~(size_t)63;
    }
    char *cur[MAXN], *nxt[MAXN];
    for (uint32_t j = 0; j < N; j++) { cur[j] = out[j]->data; nxt[j] = B[j]; }
    for (size_t r = 0; r < R && rc == 0; r++) {
      for (uint32_t j = 0; j < N; j++) {
        pin[j] = cur[j];
        pin[N + j] = (const char *)X[j] + r * O * es[j];
        pout[j] = nxt[j];
      }
      rc = lm_ew_prog_run(prog, pin, pout, 0, O, k->err);
      for (uint32_t j = 0; j < N; j++) { char *t = cur[j]; cur[j] = nxt[j]; nxt[j] = t; }
    }
    if (rc == 0 && cur[0] != (char *)out[0]->data)
      for (uint32_t j = 0; j < N; j++) memcpy(out[j]->data, cur[j], O * es[j]);
    goto done;
  }
  /* few outputs: inputs [O, R]; per output, up to LANES contiguous lanes folded in order, then
   * adjacent lanes combined pairwise, then body(init, total) */
  {
    size_t C = (R + LANES - 1) / LANES, L = R ? (R + C - 1) / C : 0;
    size_t bytes = 0;
    for (uint32_t j = 0; j < N; j++) bytes += 4 * LANES * es[j];
    if ((rc = scratch(k, bytes, &wb)) < 0) goto done;
    char *acc[MAXN], *tmp[MAXN], *lx[MAXN], *ly[MAXN];
    char *p = wb->data;
    for (uint32_t j = 0; j < N; j++) {
      acc[j] = p; p += LANES * es[j];
      tmp[j] = p; p += LANES * es[j];
      lx[j] = p; p += LANES * es[j];
      ly[j] = p; p += LANES * es[j];
    }
    for (size_t o = 0; o < O && rc == 0; o++) {
      if (R == 0) {
        for (uint32_t j = 0; j < N; j++) memcpy((char *)out[j]->data + o * es[j], in[N + j]->data, es[j]);
        continue;
      }
      const char *row[MAXN];
      for (uint32_t j = 0; j < N; j++) row[j] = (const char *)X[j] + o * R * es[j];
      /* lane l covers [l*C, min((l+1)*C, R)); only the last lane can be shorter */
      size_t lastlen = R - (L - 1) * C;
      for (uint32_t j = 0; j < N; j++)
        for (size_t l = 0; l < L; l++) memcpy(acc[j] + l * es[j], row[j] + l * C * es[j], es[j]);
      for (size_t s = 1; s < C && rc == 0; s++) {
        size_t active = s < lastlen ? L : L - 1;
        for (uint32_t j = 0; j < N; j++) {
          for (size_t l = 0; l < active; l++) memcpy(lx[j] + l * es[j], row[j] + (l * C + s) * es[j], es[j]);
          pin[j] = acc[j];
          pin[N + j] = lx[j];
          pout[j] = tmp[j];
        }
        rc = lm_ew_prog_run(prog, pin, pout, 0, active, k->err);
        for (uint32_t j = 0; j < N; j++) memcpy(acc[j], tmp[j], active * es[j]);
      }
      size_t nl = L;
      while (nl > 1 && rc == 0) {
        size_t half = nl / 2;
        for (uint32_t j = 0; j < N; j++) {
          for (size_t l = 0; l < half; l++) {
            memcpy(lx[j] + l * es[j], acc[j] + 2 * l * es[j], es[j]);
            memcpy(ly[j] + l * es[j], acc[j] + (2 * l + 1) * es[j], es[j]);
          }
          pin[j] = lx[j];
          pin[N + j] = ly[j];
          pout[j] = tmp[j];
        }
        rc = lm_ew_prog_run(prog, pin, pout, 0, half, k->err);
        for (uint32_t j = 0; j < N; j++) {
          if (nl % 2) memcpy(tmp[j] + half * es[j], acc[j] + (nl - 1) * es[j], es[j]);
          memcpy(acc[j], tmp[j], (half + nl % 2) * es[j]);
        }
        nl = half + nl % 2;
      }
      for (uint32_t j = 0; j < N; j++) {
        pin[j] = in[N + j]->data;
        pin[N + j] = acc[j];
        pout[j] = (char *)out[j]->data + o * es[j];
      }
      if (rc == 0) rc = lm_ew_prog_run(prog, pin, pout, 0, 1, k->err);
    }
  }
done:
  for (uint32_t j = 0; j < N; j++) lm_buffer_release(canon[j]);
  lm_buffer_release(wb);
  return rc;
}

/* ---- path 3: the body region on scalars ---- */

static int reduce_regions(lm_kctx *k, lm_buffer *const *in, lm_buffer **out, uint32_t N, const bool *red) {
  size_t O = (size_t)lm_type_numel(&out[0]->type), total = (size_t)lm_type_numel(&in[0]->type);
  size_t R = O ? total / O : 0;
  lm_buffer *canon[MAXN] = {0};
  const void *X[MAXN];
  lm_buffer *args[2 * MAXN] = {0};
  size_t es[MAXN];
  int rc = 0;
  for (uint32_t j = 0; j < N && rc == 0; j++) {
    es[j] = lm_dtype_size(in[j]->type.dtype);
    rc = canonical(k, in[j], red, true, &canon[j], &X[j]);
    lm_type st;
    lm_type_tensor(&st, in[j]->type.dtype, 0, NULL);
    if (rc == 0) rc = lm_kalloc(k, &st, &args[j]);
    if (rc == 0) rc = lm_kalloc(k, &st, &args[N + j]);
  }
  for (size_t o = 0; o < O && rc == 0; o++) {
    for (uint32_t j = 0; j < N; j++) memcpy(args[j]->data, in[N + j]->data, es[j]);
    for (size_t r = 0; r < R && rc == 0; r++) {
      for (uint32_t j = 0; j < N; j++) memcpy(args[N + j]->data, (const char *)X[j] + (o * R + r) * es[j], es[j]);
      lm_buffer *res[MAXN] = {0};
      rc = lm_exec_region(k, 0, args, 2 * N, res, N);
      for (uint32_t j = 0; j < N && rc == 0; j++) {
        if (res[j]->type.kind != LM_TYPE_TENSOR || res[j]->nbytes != es[j]) rc = lm_kerr(k, LOOM_VERIFY, "body returns the wrong type");
        else memcpy(args[j]->data, res[j]->data, es[j]);
      }
      for (uint32_t j = 0; j < N; j++) lm_buffer_release(res[j]);
    }
    for (uint32_t j = 0; j < N && rc == 0; j++) memcpy((char *)out[j]->data + o * es[j], args[j]->data, es[j]);
  }
  for (uint32_t j = 0; j < N; j++) {
    lm_buffer_release(canon[j]);
    lm_buffer_release(args[j]);
    lm_buffer_release(args[N + j]);
  }
  return rc;
}

static int k_reduce(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  const lm_op *op = k->op;
  uint32_t N = op->nin / 2;
  if (N > MAXN) return lm_kerr(k, LOOM_UNSUPPORTED, "reduce with more than %d operands", MAXN);
  int64_t dims[LM_MAX_RANK];
  int nd = lm_attr_ints(lm_op_attr(op, "dimensions"), dims, LM_MAX_RANK);
  bool red[LM_MAX_RANK] = {0};
  for (int i = 0; i < nd; i++) red[dims[i]] = true;
  if (N == 1) {
    acc_kind ak;
    rop rop_;
    lm_opcode code = lm_region_simple_binop(op, 0, k->fn);
    if (code != LM_OP_UNKNOWN && fast_op(code, in[0]->type.dtype, &ak, &rop_)) {
      /* the body's op must be on the same element type (it is, by C6) */
      return reduce_fast(k, in[0], in[1], out[0], red, ak, rop_);
    }
  }
  lm_arena a;
  lm_arena_init(&a, 4096);
  lm_ew_prog *prog = NULL;
  lm_err e2;
  int rc = lm_ew_compile_region(&op->regions[0], k->fn, &a, &prog, &e2);
  if (rc == 0 && prog->nin == 2 * N && prog->nout == N) {
    rc = reduce_program(k, prog, in, out, N, red);
    lm_arena_free(&a);
    return rc;
  }
  lm_arena_free(&a);
  if (rc < 0 && rc != LOOM_UNSUPPORTED) { if (k->err) *k->err = e2; return rc; }
  return reduce_regions(k, in, out, N, red);
}

void lm_register_reduce_kernels(void) { lm_kernel_register(LM_OP_REDUCE, k_reduce, verify_reduce, 0); }
