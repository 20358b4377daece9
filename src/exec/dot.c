/* Op family: dot_general, the legacy dot, and convolution (spec 'dot_general', 'dot',
 * 'convolution').
 *
 * dot_general views each side as a batch of matrices: lhs [B, M, K] or [B, K, M], rhs [B, K, N]
 * or [B, N, K]; when the operand's dimensions already come in one of those orders it is passed
 * to OpenBLAS as is (a transpose flag instead of a copy), otherwise it is permuted into a
 * scratch buffer. The result [B, M, N] is exactly the spec's result layout (batch dims, lhs free
 * dims, rhs free dims). f32/f64/c64/c128 use s/d/c/zgemm; f16 and bf16 (and integer operands with
 * a float result) are computed in f32 and rounded once; integer results use a wrapping int64 loop.
 *
 * convolution builds, per feature/batch group, im2col rows [rows, KI * window] in chunks and
 * multiplies them with the kernel reshaped to [KI * window, O/groups] through the same gemm;
 * integer convolutions use the reference loop. Scratch buffers are charged to the device.
 *
 * Small problems (under SMALL_MACS multiply-adds) skip BLAS and accumulate sequentially in the
 * element's own precision (f32 for f16/bf16), one rounding per product and per sum, in
 * ascending order of the contracted index: that is what XLA computes for them, and with
 * cancellation the order decides which last bits come out (the corpus checks 3 ULP). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off") /* the small-problem loops round every product and sum */
#endif
#include <cblas.h>
#include <unistd.h>
#include <complex.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "exec/dot.h"
#include "exec/interp.h"
#include "exec/ew.h"
#include "exec/ops_util.h"

static const lm_type *vtype(const lm_func *fn, uint32_t v) { return &fn->value_types[v]; }

static int64_t prod_dims(const lm_type *t, const int64_t *idx, int n) {
  int64_t p = 1;
  for (int i = 0; i < n; i++) p *= t->dims[idx[i]];
  return p;
}

/* Free (result) dims of one side: ascending dims that are neither batching nor contracting. */
static int free_dims(const lm_type *t, const int64_t *b, int nb, const int64_t *c, int nc, int64_t *out) {
  int n = 0;
  for (int d = 0; d < t->rank; d++)
    if (!lm_dims_contains(b, nb, d) && !lm_dims_contains(c, nc, d)) out[n++] = d;
  return n;
}

static int struct_ints(const lm_attr *s, const char *name, int64_t *out, int cap) {
  if (!s) return 0;
  const lm_attr *f = lm_attrs_get(s->fields, s->n, name);
  if (!f) return 0;
  return lm_attr_ints(f, out, cap);
}

int lm_dot_dims_get(const lm_op *op, const lm_type *lhs, const lm_type *rhs, const lm_type *res, lm_dot_dims *d,
                    lm_err *err) {
  memset(d, 0, sizeof *d);
  if (lhs->kind != LM_TYPE_TENSOR || rhs->kind != LM_TYPE_TENSOR || res->kind != LM_TYPE_TENSOR)
    return lm_op_err(err, op, LOOM_VERIFY, "operands and result must be tensors");
  if (!lm_type_is_static(lhs) || !lm_type_is_static(rhs) || !lm_type_is_static(res))
    return lm_op_err(err, op, LOOM_UNSUPPORTED, "dynamic shapes are not supported");
  if (op->code == LM_OP_DOT) {
    /* spec (legacy 'dot'): vector/matrix products contracting lhs's last and rhs's first dim */
    if (lhs->rank < 1 || lhs->rank > 2 || rhs->rank < 1 || rhs->rank > 2)
      return lm_op_err(err, op, LOOM_VERIFY, "dot takes rank 1 or 2 operands");
    d->nc = 1;
    d->lc[0] = lhs->rank - 1;
    d->rc[0] = 0;
  } else {
    const lm_attr *s = lm_op_attr(op, "dot_dimension_numbers");
    int a = struct_ints(s, "lhs_batching_dimensions", d->lb, LM_MAX_RANK);
    int b = struct_ints(s, "rhs_batching_dimensions", d->rb, LM_MAX_RANK);
    int c = struct_ints(s, "lhs_contracting_dimensions", d->lc, LM_MAX_RANK);
    int e = struct_ints(s, "rhs_contracting_dimensions", d->rc, LM_MAX_RANK);
    if (a < 0 || b < 0 || c < 0 || e < 0) return lm_op_err(err, op, LOOM_VERIFY, "malformed dot_dimension_numbers");
    if (a != b) return lm_op_err(err, op, LOOM_VERIFY, "lhs and rhs have different numbers of batching dimensions (C2)");
    if (c != e) return lm_op_err(err, op, LOOM_VERIFY, "lhs and rhs have different numbers of contracting dimensions (C3)");
    d->nb = a;
    d->nc = c;
  }
  bool seen_l[LM_MAX_RANK] = {0}, seen_r[LM_MAX_RANK] = {0};
  for (int i = 0; i < d->nb + d->nc; i++) {
    int64_t l = i < d->nb ? d->lb[i] : d->lc[i - d->nb], r = i < d->nb ? d->rb[i] : d->rc[i - d->nb];
    if (l < 0 || l >= lhs->rank || r < 0 || r >= rhs->rank)
      return lm_op_err(err, op, LOOM_VERIFY, "dimension number out of range (C6-C9)");
    if (seen_l[l] || seen_r[r]) return lm_op_err(err, op, LOOM_VERIFY, "repeated dimension number (C4, C5)");
    seen_l[l] = seen_r[r] = true;
    if (lhs->dims[l] != rhs->dims[r])
      return lm_op_err(err, op, LOOM_VERIFY, "lhs dimension %lld (size %lld) and rhs dimension %lld (size %lld) differ (C10, C11)",
                       (long long)l, (long long)lhs->dims[l], (long long)r, (long long)rhs->dims[r]);
  }
  int64_t lf[LM_MAX_RANK], rf[LM_MAX_RANK];
  int nlf = free_dims(lhs, d->lb, d->nb, d->lc, d->nc, lf), nrf = free_dims(rhs, d->rb, d->nb, d->rc, d->nc, rf);
  int rank = d->nb + nlf + nrf;
  bool ok = rank == res->rank;
  for (int i = 0; ok && i < d->nb; i++) ok = res->dims[i] == lhs->dims[d->lb[i]];
  for (int i = 0; ok && i < nlf; i++) ok = res->dims[d->nb + i] == lhs->dims[lf[i]];
  for (int i = 0; ok && i < nrf; i++) ok = res->dims[d->nb + nlf + i] == rhs->dims[rf[i]];
  if (!ok) {
    char x[128];
    return lm_op_err(err, op, LOOM_VERIFY, "result type %s does not match the operands (C13)", lm_type_str(res, x, sizeof x));
  }
  bool cl = lm_dtype_is_complex(lhs->dtype) || lm_dtype_is_complex(rhs->dtype);
  if (cl && !lm_dtype_is_complex(res->dtype))
    return lm_op_err(err, op, LOOM_VERIFY, "complex operands need a complex result");
  return 0;
}

/* ---- helpers ---- */

/* Scratch memory charged to the device. */
static int scratch(lm_kctx *k, size_t bytes, lm_buffer **out) {
  lm_type t;
  int64_t n = (int64_t)(bytes ? bytes : 1);
  lm_type_tensor(&t, LOOM_DTYPE_U8, 1, &n);
  return lm_kalloc(k, &t, out);
}

void lm_permute_copy(void *dst, const void *src, const lm_type *st, const int64_t *perm, size_t esize) {
  int r = st->rank;
  int64_t sstr[LM_MAX_RANK], dims[LM_MAX_RANK], pstr[LM_MAX_RANK], dstr[LM_MAX_RANK];
  lm_row_strides(st, sstr);
  for (int i = 0; i < r; i++) { dims[i] = st->dims[perm[i]]; pstr[i] = sstr[perm[i]]; }
  int64_t s = 1;
  for (int d = r - 1; d >= 0; d--) { dstr[d] = s; s *= dims[d]; }
  lm_copy_strided(r, dims, esize, dst, dstr, src, pstr);
}

static bool is_identity(const int64_t *perm, int n) {
  for (int i = 0; i < n; i++)
    if (perm[i] != i) return false;
  return true;
}

int lm_blas_share_cores(uint32_t busy_devices) {
  if (getenv("OPENBLAS_NUM_THREADS") || getenv("OMP_NUM_THREADS")) return 0;
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  long n = busy_devices ? cores / (long)busy_devices : cores;
  if (n < 1) n = 1;
  openblas_set_num_threads((int)n);
  return (int)n;
}

/* Element type the product is computed in for result type t: f32 (f16, bf16, f32), f64, c64,
 * c128, or s64 for integer and i1 results. */
static lm_dtype acc_type(lm_dtype t) {
  switch (t) {
    case LOOM_DTYPE_F16: case LOOM_DTYPE_BF16: case LOOM_DTYPE_F32: return LOOM_DTYPE_F32;
    case LOOM_DTYPE_F64: return LOOM_DTYPE_F64;
    case LOOM_DTYPE_C64: return LOOM_DTYPE_C64;
    case LOOM_DTYPE_C128: return LOOM_DTYPE_C128;
    default: return LOOM_DTYPE_S64;
  }
}

/* C[M, N] (ldc) = A * B with A [M, K] (or [K, M] when ta), B [K, N] (or [N, K] when tb), of type
 * t (f32, f64, c64, c128). */
static void gemm(lm_dtype t, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const void *A, int64_t lda,
                 const void *B, int64_t ldb, void *C, int64_t ldc) {
  enum CBLAS_TRANSPOSE TA = ta ? CblasTrans : CblasNoTrans, TB = tb ? CblasTrans : CblasNoTrans;
  if (M == 0 || N == 0) return;
  if (K == 0) {
    size_t es = lm_dtype_size(t);
    for (int64_t i = 0; i < M; i++) memset((char *)C + i * ldc * (int64_t)es, 0, (size_t)N * es);
    return;
  }
  switch (t) {
    case LOOM_DTYPE_F32:
      cblas_sgemm(CblasRowMajor, TA, TB, (blasint)M, (blasint)N, (blasint)K, 1.0f, A, (blasint)lda, B, (blasint)ldb, 0.0f, C,
                  (blasint)ldc);
      break;
    case LOOM_DTYPE_F64:
      cblas_dgemm(CblasRowMajor, TA, TB, (blasint)M, (blasint)N, (blasint)K, 1.0, A, (blasint)lda, B, (blasint)ldb, 0.0, C,
                  (blasint)ldc);
      break;
    case LOOM_DTYPE_C64: {
      float one[2] = {1, 0}, zero[2] = {0, 0};
      cblas_cgemm(CblasRowMajor, TA, TB, (blasint)M, (blasint)N, (blasint)K, one, A, (blasint)lda, B, (blasint)ldb, zero, C,
                  (blasint)ldc);
      break;
    }
    case LOOM_DTYPE_C128: {
      double one[2] = {1, 0}, zero[2] = {0, 0};
      cblas_zgemm(CblasRowMajor, TA, TB, (blasint)M, (blasint)N, (blasint)K, one, A, (blasint)lda, B, (blasint)ldb, zero, C,
                  (blasint)ldc);
      break;
    }
    default: break;
  }
}

/* Integer product: C[M, N] (int64, wrapping) = A[M, K] * B[K, N], all int64 row-major. */
static void gemm_i64(int64_t M, int64_t N, int64_t K, const int64_t *A, const int64_t *B, int64_t *C) {
  for (int64_t i = 0; i < M; i++) {
    uint64_t *c = (uint64_t *)C + i * N;
    for (int64_t j = 0; j < N; j++) c[j] = 0;
    for (int64_t k = 0; k < K; k++) {
      uint64_t a = (uint64_t)A[i * K + k];
      const uint64_t *b = (const uint64_t *)B + k * N;
      for (int64_t j = 0; j < N; j++) c[j] += a * b[j];
    }
  }
}

static bool fits_blas(int64_t v) { return v >= 0 && v <= INT_MAX; }

#define SMALL_MACS (1 << 18)

/* C[M, N] = A * B summed over k in order, in type ct (f32, f64, c64, c128); A is [M, K] (or
 * [K, M] when ta) with leading dimension lda, B [K, N] (or [N, K] when tb). */
#define NAIVE(T)                                                                   \
  {                                                                                \
    const T *a = A, *b = B;                                                        \
    T *c = C;                                                                      \
    for (int64_t i = 0; i < M; i++)                                                \
      for (int64_t j = 0; j < N; j++) {                                            \
        T acc = 0;                                                                 \
        for (int64_t k = 0; k < K; k++) {                                          \
          T x = ta ? a[k * lda + i] : a[i * lda + k];                              \
          T y = tb ? b[j * ldb + k] : b[k * ldb + j];                              \
          acc += x * y;                                                            \
        }                                                                          \
        c[i * N + j] = acc;                                                        \
      }                                                                            \
  }
static void gemm_small(lm_dtype ct, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const void *A, int64_t lda,
                       const void *B, int64_t ldb, void *C) {
  switch (ct) {
    case LOOM_DTYPE_F32: NAIVE(float) break;
    case LOOM_DTYPE_F64: NAIVE(double) break;
    case LOOM_DTYPE_C64: NAIVE(float complex) break;
    case LOOM_DTYPE_C128: NAIVE(double complex) break;
    default: break;
  }
}
#undef NAIVE

/* ---- dot_general kernel ---- */

typedef struct side {
  const void *data; /* matrices in the compute type */
  bool trans;       /* [K, M] (lhs) / [N, K] (rhs) instead of [M, K] / [K, N] */
  int64_t ld;       /* leading dimension */
  int64_t bstride;  /* elements between batch matrices */
  lm_buffer *tmp;   /* scratch holding a permuted or converted copy, if any */
} side;

/* Prepares one operand as a batch of matrices in compute type ct. For lhs: rows M (free dims),
 * columns K; for rhs: rows K, columns N. */
static int prep_side(lm_kctx *k, const lm_buffer *x, bool is_lhs, const int64_t *bd, int nb, const int64_t *cd, int nc,
                     lm_dtype ct, side *s) {
  const lm_type *t = &x->type;
  int64_t fd[LM_MAX_RANK];
  int nf = free_dims(t, bd, nb, cd, nc, fd);
  int64_t F = prod_dims(t, fd, nf), K = prod_dims(t, cd, nc);
  /* candidate orders: [batch, free, contract] and [batch, contract, free] */
  int64_t o1[LM_MAX_RANK], o2[LM_MAX_RANK];
  int r = 0;
  for (int i = 0; i < nb; i++) o1[r] = o2[r] = bd[i], r++;
  for (int i = 0; i < nf; i++) o1[r + i] = fd[i];
  for (int i = 0; i < nc; i++) o1[r + nf + i] = cd[i];
  for (int i = 0; i < nc; i++) o2[r + i] = cd[i];
  for (int i = 0; i < nf; i++) o2[r + nc + i] = fd[i];
  bool fk = is_identity(o1, t->rank), kf = is_identity(o2, t->rank);
  memset(s, 0, sizeof *s);
  s->bstride = F * K;
  size_t ces = lm_dtype_size(ct);
  bool convert = t->dtype != ct;
  /* the integer loop only takes untransposed matrices */
  bool direct = !convert && (ct == LOOM_DTYPE_S64 ? (is_lhs ? fk : kf) : (fk || kf));
  if (direct) {
    s->data = x->data;
    /* lhs [M,K] is no-trans; rhs [K,N] (contract first) is no-trans */
    s->trans = is_lhs ? !fk : !kf;
    s->ld = is_lhs ? (fk ? K : F) : (kf ? F : K);
    return 0;
  }
  size_t n = (size_t)(F * K * prod_dims(t, bd, nb));
  size_t bytes;
  if (lm_mul_size(n, ces, &bytes)) return lm_kerr(k, LOOM_DEVICE_OUT_OF_MEMORY, "out of device memory: operand too large");
  LM_TRY(scratch(k, bytes, &s->tmp));
  /* target layout: lhs [B, M, K], rhs [B, K, N]; convert first (same layout), then permute */
  const int64_t *order = is_lhs ? o1 : o2;
  lm_type ct_t = *t;
  ct_t.dtype = (uint8_t)ct;
  if (is_identity(order, t->rank)) {
    lm_convert_array(s->tmp->data, ct, x->data, t->dtype, n);
  } else if (!convert) {
    lm_permute_copy(s->tmp->data, x->data, &ct_t, order, ces);
  } else {
    lm_buffer *conv = NULL;
    int rc = scratch(k, bytes, &conv);
    if (rc < 0) { lm_buffer_release(s->tmp); s->tmp = NULL; return rc; }
    lm_convert_array(conv->data, ct, x->data, t->dtype, n);
    lm_permute_copy(s->tmp->data, conv->data, &ct_t, order, ces);
    lm_buffer_release(conv);
  }
  s->data = s->tmp->data;
  s->trans = false;
  s->ld = is_lhs ? K : F;
  return 0;
}

static int dot_compute(lm_kctx *k, const lm_buffer *lhs, const lm_buffer *rhs, const lm_dot_dims *dd, lm_buffer *res);

static int k_dot(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  if (k->pop && (k->pop->flags & LM_STEP_DOT_TRANSPOSED)) {
    /* the plan fused a transpose swapping the free dims: out = dot(rhs, lhs) */
    lm_type dtype;
    lm_dot_dims d, s;
    const lm_type *t = &k->fn->value_types[k->op->out[0]];
    dtype = *t;
    LM_TRY(lm_dot_dims_get(k->op, &in[0]->type, &in[1]->type, &dtype, &d, k->err));
    s = d;
    memcpy(s.lb, d.rb, sizeof s.lb);
    memcpy(s.rb, d.lb, sizeof s.rb);
    memcpy(s.lc, d.rc, sizeof s.lc);
    memcpy(s.rc, d.lc, sizeof s.rc);
    return dot_compute(k, in[1], in[0], &s, out[0]);
  }
  lm_dot_dims d;
  LM_TRY(lm_dot_dims_get(k->op, &in[0]->type, &in[1]->type, &out[0]->type, &d, k->err));
  return dot_compute(k, in[0], in[1], &d, out[0]);
}

static int dot_compute(lm_kctx *k, const lm_buffer *lhs, const lm_buffer *rhs, const lm_dot_dims *dd, lm_buffer *res) {
  const lm_buffer *in[2] = {lhs, rhs};
  lm_buffer *out[1] = {res};
  lm_dot_dims d = *dd;
  const lm_type *lt = &in[0]->type, *rt = &in[1]->type;
  lm_dtype rdt = out[0]->type.dtype, ct = acc_type(rdt);
  int64_t lf[LM_MAX_RANK], rf[LM_MAX_RANK];
  int nlf = free_dims(lt, d.lb, d.nb, d.lc, d.nc, lf), nrf = free_dims(rt, d.rb, d.nb, d.rc, d.nc, rf);
  int64_t B = prod_dims(lt, d.lb, d.nb), M = prod_dims(lt, lf, nlf), N = prod_dims(rt, rf, nrf), K = prod_dims(lt, d.lc, d.nc);
  size_t nout = (size_t)(B * M * N);
  if (nout == 0) return 0;
  if (ct != LOOM_DTYPE_S64 && !(fits_blas(M) && fits_blas(N) && fits_blas(K)))
    return lm_kerr(k, LOOM_UNSUPPORTED, "matrix dimensions over 2^31 are not supported by BLAS");
  side a, b;
  LM_TRY(prep_side(k, in[0], true, d.lb, d.nb, d.lc, d.nc, ct, &a));
  int rc = prep_side(k, in[1], false, d.rb, d.nb, d.rc, d.nc, ct, &b);
  if (rc < 0) { lm_buffer_release(a.tmp); return rc; }
  lm_buffer *cbuf = NULL;
  void *C = out[0]->data;
  if (rdt != ct) {
    rc = scratch(k, nout * lm_dtype_size(ct), &cbuf);
    if (rc < 0) goto done;
    C = cbuf->data;
  }
  size_t ces = lm_dtype_size(ct);
  bool small = (double)M * (double)N * (double)K <= SMALL_MACS;
  for (int64_t bi = 0; bi < B; bi++) {
    const char *A = (const char *)a.data + (size_t)(bi * a.bstride) * ces;
    const char *Bm = (const char *)b.data + (size_t)(bi * b.bstride) * ces;
    char *Cm = (char *)C + (size_t)(bi * M * N) * ces;
    if (ct == LOOM_DTYPE_S64) gemm_i64(M, N, K, (const int64_t *)A, (const int64_t *)Bm, (int64_t *)Cm);
    else if (small) gemm_small(ct, a.trans, b.trans, M, N, K, A, a.ld, Bm, b.ld, Cm);
    else gemm(ct, a.trans, b.trans, M, N, K, A, a.ld, Bm, b.ld, Cm, N);
  }
  if (cbuf) lm_convert_array(out[0]->data, rdt, cbuf->data, ct, nout);
done:
  lm_buffer_release(cbuf);
  lm_buffer_release(a.tmp);
  lm_buffer_release(b.tmp);
  return rc;
}

static int verify_dot(const lm_op *op, const lm_func *fn, lm_err *err) {
  if (op->nin != 2 || op->nout != 1) return lm_op_err(err, op, LOOM_VERIFY, "expected two operands and one result");
  lm_dot_dims d;
  return lm_dot_dims_get(op, vtype(fn, op->in[0]), vtype(fn, op->in[1]), vtype(fn, op->out[0]), &d, err);
}

/* ---- reference ---- */

typedef struct acc_val { double complex z; int64_t i; } acc_val;

static void load_acc(const void *p, lm_dtype t, size_t i, lm_dtype acc, acc_val *v) {
  const char *e = (const char *)p + i * lm_dtype_size(t);
  if (acc == LOOM_DTYPE_S64) lm_convert_array(&v->i, LOOM_DTYPE_S64, e, t, 1);
  else lm_convert_array(&v->z, LOOM_DTYPE_C128, e, t, 1);
}

static void store_acc(void *p, lm_dtype t, size_t i, lm_dtype acc, const acc_val *v) {
  char *e = (char *)p + i * lm_dtype_size(t);
  if (acc == LOOM_DTYPE_S64) lm_convert_array(e, t, &v->i, LOOM_DTYPE_S64, 1);
  else if (lm_dtype_is_complex(t)) lm_convert_array(e, t, &v->z, LOOM_DTYPE_C128, 1);
  else { double r = creal(v->z); lm_convert_array(e, t, &r, LOOM_DTYPE_F64, 1); }
}

void lm_dot_general_ref(const lm_buffer *lhs, const lm_buffer *rhs, const lm_dot_dims *d, lm_buffer *out) {
  const lm_type *lt = &lhs->type, *rt = &rhs->type, *ot = &out->type;
  lm_dtype acc = acc_type(ot->dtype) == LOOM_DTYPE_S64 ? LOOM_DTYPE_S64 : LOOM_DTYPE_C128;
  int64_t ls[LM_MAX_RANK], rs[LM_MAX_RANK], lf[LM_MAX_RANK], rf[LM_MAX_RANK];
  lm_row_strides(lt, ls);
  lm_row_strides(rt, rs);
  int nlf = free_dims(lt, d->lb, d->nb, d->lc, d->nc, lf), nrf = free_dims(rt, d->rb, d->nb, d->rc, d->nc, rf);
  int64_t total = lm_type_numel(ot), K = prod_dims(lt, d->lc, d->nc);
  int64_t oidx[LM_MAX_RANK] = {0};
  for (int64_t o = 0; o < total; o++) {
    int64_t lbase = 0, rbase = 0;
    for (int i = 0; i < d->nb; i++) { lbase += oidx[i] * ls[d->lb[i]]; rbase += oidx[i] * rs[d->rb[i]]; }
    for (int i = 0; i < nlf; i++) lbase += oidx[d->nb + i] * ls[lf[i]];
    for (int i = 0; i < nrf; i++) rbase += oidx[d->nb + nlf + i] * rs[rf[i]];
    acc_val sum = {0, 0};
    int64_t cidx[LM_MAX_RANK] = {0};
    for (int64_t kk = 0; kk < K; kk++) {
      int64_t lo = lbase, ro = rbase;
      for (int i = 0; i < d->nc; i++) { lo += cidx[i] * ls[d->lc[i]]; ro += cidx[i] * rs[d->rc[i]]; }
      acc_val x, y;
      load_acc(lhs->data, lt->dtype, (size_t)lo, acc, &x);
      load_acc(rhs->data, rt->dtype, (size_t)ro, acc, &y);
      if (acc == LOOM_DTYPE_S64) sum.i = (int64_t)((uint64_t)sum.i + (uint64_t)x.i * (uint64_t)y.i);
      else sum.z += x.z * y.z;
      for (int i = d->nc - 1; i >= 0; i--) {
        if (++cidx[i] < lt->dims[d->lc[i]]) break;
        cidx[i] = 0;
      }
    }
    if (ot->dtype == LOOM_DTYPE_PRED) sum.i = sum.i != 0;
    store_acc(out->data, ot->dtype, (size_t)o, acc, &sum);
    for (int i = ot->rank - 1; i >= 0; i--) {
      if (++oidx[i] < ot->dims[i]) break;
      oidx[i] = 0;
    }
  }
}

/* ---- convolution ---- */

int lm_conv_get(const lm_op *op, const lm_type *lhs, const lm_type *rhs, const lm_type *res, lm_conv *c, lm_err *err) {
  memset(c, 0, sizeof *c);
  if (lhs->kind != LM_TYPE_TENSOR || rhs->kind != LM_TYPE_TENSOR || res->kind != LM_TYPE_TENSOR)
    return lm_op_err(err, op, LOOM_VERIFY, "operands and result must be tensors");
  if (!lm_type_is_static(lhs) || !lm_type_is_static(rhs) || !lm_type_is_static(res))
    return lm_op_err(err, op, LOOM_UNSUPPORTED, "dynamic shapes are not supported");
  int R = lhs->rank;
  if (rhs->rank != R || res->rank != R || R < 2) return lm_op_err(err, op, LOOM_VERIFY, "lhs, rhs and result need the same rank >= 2 (C1, C28)");
  int ns = R - 2;
  c->ns = ns;
  const lm_attr *dn = lm_op_attr(op, "dimension_numbers");
  if (!dn || dn->kind != LM_ATTR_STRUCT) return lm_op_err(err, op, LOOM_VERIFY, "missing dimension_numbers");
  int64_t ib = lm_attr_int_or(lm_attrs_get(dn->fields, dn->n, "input_batch_dimension"), -1);
  int64_t ifd = lm_attr_int_or(lm_attrs_get(dn->fields, dn->n, "input_feature_dimension"), -1);
  int64_t ki = lm_attr_int_or(lm_attrs_get(dn->fields, dn->n, "kernel_input_feature_dimension"), -1);
  int64_t ko = lm_attr_int_or(lm_attrs_get(dn->fields, dn->n, "kernel_output_feature_dimension"), -1);
  int64_t ob = lm_attr_int_or(lm_attrs_get(dn->fields, dn->n, "output_batch_dimension"), -1);
  int64_t of = lm_attr_int_or(lm_attrs_get(dn->fields, dn->n, "output_feature_dimension"), -1);
  int64_t isd[LM_MAX_RANK], ksd[LM_MAX_RANK], osd[LM_MAX_RANK];
  if (struct_ints(dn, "input_spatial_dimensions", isd, LM_MAX_RANK) != ns ||
      struct_ints(dn, "kernel_spatial_dimensions", ksd, LM_MAX_RANK) != ns ||
      struct_ints(dn, "output_spatial_dimensions", osd, LM_MAX_RANK) != ns)
    return lm_op_err(err, op, LOOM_VERIFY, "spatial dimension lists must have rank-2 entries (C13, C18, C20)");
  /* each role list must be a permutation of the dims (C14, C19, C21) */
  int64_t li[LM_MAX_RANK + 2], kk[LM_MAX_RANK + 2], oo[LM_MAX_RANK + 2];
  li[0] = ib; li[1] = ifd; kk[0] = ki; kk[1] = ko; oo[0] = ob; oo[1] = of;
  for (int i = 0; i < ns; i++) { li[2 + i] = isd[i]; kk[2 + i] = ksd[i]; oo[2 + i] = osd[i]; }
  const int64_t *lists[3] = {li, kk, oo};
  for (int l = 0; l < 3; l++) {
    bool seen[LM_MAX_RANK] = {0};
    for (int i = 0; i < R; i++) {
      int64_t v = lists[l][i];
      if (v < 0 || v >= R || seen[v]) return lm_op_err(err, op, LOOM_VERIFY, "dimension numbers are not a permutation (C14, C19, C21)");
      seen[v] = true;
    }
  }
  int64_t tmp[LM_MAX_RANK];
  for (int i = 0; i < ns; i++) { c->stride[i] = 1; c->ldil[i] = 1; c->rdil[i] = 1; }
  const lm_attr *a;
  if ((a = lm_op_attr(op, "window_strides")) && lm_attr_ints(a, c->stride, LM_MAX_RANK) != ns)
    return lm_op_err(err, op, LOOM_VERIFY, "window_strides needs %d entries (C3)", ns);
  if ((a = lm_op_attr(op, "lhs_dilation")) && lm_attr_ints(a, c->ldil, LM_MAX_RANK) != ns)
    return lm_op_err(err, op, LOOM_VERIFY, "lhs_dilation needs %d entries (C6)", ns);
  if ((a = lm_op_attr(op, "rhs_dilation")) && lm_attr_ints(a, c->rdil, LM_MAX_RANK) != ns)
    return lm_op_err(err, op, LOOM_VERIFY, "rhs_dilation needs %d entries (C8)", ns);
  int64_t pad[2 * LM_MAX_RANK];
  int64_t pad_hi[LM_MAX_RANK] = {0};
  if ((a = lm_op_attr(op, "padding"))) {
    if (lm_attr_ints(a, pad, 2 * LM_MAX_RANK) != 2 * ns) return lm_op_err(err, op, LOOM_VERIFY, "padding needs %dx2 entries (C5)", ns);
    for (int i = 0; i < ns; i++) { c->pad_lo[i] = pad[2 * i]; pad_hi[i] = pad[2 * i + 1]; }
  }
  if ((a = lm_op_attr(op, "window_reversal"))) {
    int n = lm_attr_ints(a, tmp, LM_MAX_RANK);
    if (n != ns) return lm_op_err(err, op, LOOM_VERIFY, "window_reversal needs %d entries (C10)", ns);
    for (int i = 0; i < ns; i++) c->rev[i] = tmp[i] != 0;
  }
  for (int i = 0; i < ns; i++)
    if (c->stride[i] <= 0 || c->ldil[i] <= 0 || c->rdil[i] <= 0)
      return lm_op_err(err, op, LOOM_VERIFY, "strides and dilations must be positive (C4, C7, C9)");
  c->G = lm_attr_int_or(lm_op_attr(op, "feature_group_count"), 1);
  c->BG = lm_attr_int_or(lm_op_attr(op, "batch_group_count"), 1);
  if (c->G < 1 || c->BG < 1 || (c->G > 1 && c->BG > 1))
    return lm_op_err(err, op, LOOM_VERIFY, "feature_group_count and batch_group_count must be >= 1, one of them 1 (C22-C24)");
  c->N = lhs->dims[ib];
  c->C = lhs->dims[ifd];
  c->KI = rhs->dims[ki];
  c->O = rhs->dims[ko];
  if (c->N % c->BG) return lm_op_err(err, op, LOOM_VERIFY, "batch size is not a multiple of batch_group_count (C11)");
  if (c->C % c->G || c->C / c->G != c->KI)
    return lm_op_err(err, op, LOOM_VERIFY, "kernel input features must be input features / feature_group_count (C12, C15)");
  if (c->O % c->BG || c->O % c->G)
    return lm_op_err(err, op, LOOM_VERIFY, "kernel output features must be a multiple of the group counts (C16, C17)");
  int64_t ls[LM_MAX_RANK], rs[LM_MAX_RANK], os[LM_MAX_RANK];
  lm_row_strides(lhs, ls);
  lm_row_strides(rhs, rs);
  lm_row_strides(res, os);
  c->ls_b = ls[ib]; c->ls_f = ls[ifd];
  c->rs_i = rs[ki]; c->rs_o = rs[ko];
  c->os_b = os[ob]; c->os_f = os[of];
  bool ok = res->dims[ob] == c->N / c->BG && res->dims[of] == c->O;
  for (int i = 0; i < ns; i++) {
    c->in_sp[i] = lhs->dims[isd[i]];
    c->k_sp[i] = rhs->dims[ksd[i]];
    c->ls_s[i] = ls[isd[i]];
    c->rs_s[i] = rs[ksd[i]];
    c->os_s[i] = os[osd[i]];
    c->out_sp[i] = res->dims[osd[i]];
    /* (C26) number of windows; attributes are untrusted: products must not overflow */
    int64_t dil_in = 0, padded = 0, dil_w = 0, reach = 0;
    bool ovf = false;
    if (c->in_sp[i] > 0) {
      ovf |= __builtin_mul_overflow(c->in_sp[i] - 1, c->ldil[i], &dil_in);
      if (!ovf) dil_in += 1;
    }
    ovf |= __builtin_add_overflow(c->pad_lo[i], dil_in, &padded) || __builtin_add_overflow(padded, pad_hi[i], &padded);
    if (c->k_sp[i] > 0) {
      ovf |= __builtin_mul_overflow(c->k_sp[i] - 1, c->rdil[i], &dil_w);
      if (!ovf) dil_w += 1;
    }
    ovf |= __builtin_mul_overflow(c->out_sp[i], c->stride[i], &reach) || c->pad_lo[i] < -(INT64_C(1) << 60) ||
           c->pad_lo[i] > (INT64_C(1) << 60) || dil_w > (INT64_C(1) << 60) || reach > (INT64_C(1) << 60);
    if (ovf) return lm_op_err(err, op, LOOM_VERIFY, "window attributes of spatial dimension %d are too large", i);
    int64_t nw = (padded <= 0 || dil_w > padded) ? 0 : (padded - dil_w) / c->stride[i] + 1;
    ok = ok && c->out_sp[i] == nw;
  }
  if (!ok) {
    char x[128];
    return lm_op_err(err, op, LOOM_VERIFY, "result type %s does not match the convolution (C26)", lm_type_str(res, x, sizeof x));
  }
  bool cl = lm_dtype_is_complex(lhs->dtype) || lm_dtype_is_complex(rhs->dtype);
  if (cl && !lm_dtype_is_complex(res->dtype)) return lm_op_err(err, op, LOOM_VERIFY, "complex operands need a complex result");
  return 0;
}

/* Position in the unpadded, undilated input for output position o and window position w along
 * spatial dim d, or -1 when it falls into padding or a dilation hole. */
static inline int64_t conv_src(const lm_conv *c, int d, int64_t o, int64_t w) {
  int64_t q = o * c->stride[d] + w * c->rdil[d] - c->pad_lo[d];
  if (q < 0 || q % c->ldil[d]) return -1;
  q /= c->ldil[d];
  return q < c->in_sp[d] ? q : -1;
}

void lm_conv_ref(const lm_buffer *lhs, const lm_buffer *rhs, const lm_conv *c, lm_buffer *out) {
  lm_dtype ot = out->type.dtype;
  lm_dtype acc = acc_type(ot) == LOOM_DTYPE_S64 ? LOOM_DTYPE_S64 : LOOM_DTYPE_C128;
  int ns = c->ns;
  int64_t NB = c->N / c->BG, OG = c->O / c->G, OBG = c->O / c->BG;
  int64_t ospace = 1, kspace = 1;
  for (int d = 0; d < ns; d++) { ospace *= c->out_sp[d]; kspace *= c->k_sp[d]; }
  for (int64_t nb = 0; nb < NB; nb++)
    for (int64_t o = 0; o < c->O; o++) {
      int64_t g = o / OG, gb = o / OBG;
      int64_t n = gb * NB + nb;
      int64_t opos[LM_MAX_RANK] = {0};
      for (int64_t s = 0; s < ospace; s++) {
        acc_val sum = {0, 0};
        int64_t w[LM_MAX_RANK] = {0};
        for (int64_t kp = 0; kp < kspace; kp++) {
          int64_t loff = n * c->ls_b, roff = o * c->rs_o;
          bool valid = true;
          for (int d = 0; d < ns; d++) {
            int64_t q = conv_src(c, d, opos[d], w[d]);
            if (q < 0) { valid = false; break; }
            loff += q * c->ls_s[d];
            int64_t kw = c->rev[d] ? c->k_sp[d] - 1 - w[d] : w[d];
            roff += kw * c->rs_s[d];
          }
          if (valid)
            for (int64_t i = 0; i < c->KI; i++) {
              acc_val x, y;
              load_acc(lhs->data, lhs->type.dtype, (size_t)(loff + (g * c->KI + i) * c->ls_f), acc, &x);
              load_acc(rhs->data, rhs->type.dtype, (size_t)(roff + i * c->rs_i), acc, &y);
              if (acc == LOOM_DTYPE_S64) sum.i = (int64_t)((uint64_t)sum.i + (uint64_t)x.i * (uint64_t)y.i);
              else sum.z += x.z * y.z;
            }
          for (int d = ns - 1; d >= 0; d--) {
            if (++w[d] < c->k_sp[d]) break;
            w[d] = 0;
          }
        }
        int64_t ooff = nb * c->os_b + o * c->os_f;
        for (int d = 0; d < ns; d++) ooff += opos[d] * c->os_s[d];
        if (ot == LOOM_DTYPE_PRED) sum.i = sum.i != 0;
        store_acc(out->data, ot, (size_t)ooff, acc, &sum);
        for (int d = ns - 1; d >= 0; d--) {
          if (++opos[d] < c->out_sp[d]) break;
          opos[d] = 0;
        }
      }
    }
}

/* im2col + gemm for floating-point convolutions. */
static int conv_fast(lm_kctx *k, const lm_buffer *lhs, const lm_buffer *rhs, const lm_conv *c, lm_buffer *out) {
  lm_dtype ot = out->type.dtype, ct = acc_type(ot);
  size_t ces = lm_dtype_size(ct), oes = lm_dtype_size(ot);
  int ns = c->ns;
  int64_t NB = c->N / c->BG, groups = c->G * c->BG, Og = c->O / groups;
  int64_t ospace = 1, kspace = 1;
  for (int d = 0; d < ns; d++) { ospace *= c->out_sp[d]; kspace *= c->k_sp[d]; }
  int64_t Kd = c->KI * kspace, P = NB * ospace;
  if (P == 0 || Og == 0) return 0;
  if (!fits_blas(P) || !fits_blas(Kd) || !fits_blas(c->O)) return lm_kerr(k, LOOM_UNSUPPORTED, "convolution too large for BLAS");
  int rc = 0;
  lm_buffer *lc = NULL, *rc_buf = NULL, *wbuf = NULL, *abuf = NULL, *cbuf = NULL, *obuf = NULL;
  const char *L = lhs->data, *Rk = rhs->data;
  /* operands in the compute type */
  if (lhs->type.dtype != ct) {
    size_t n = (size_t)lm_type_numel(&lhs->type);
    if ((rc = scratch(k, n * ces, &lc)) < 0) goto done;
    lm_convert_array(lc->data, ct, lhs->data, lhs->type.dtype, n);
    L = lc->data;
  }
  if (rhs->type.dtype != ct) {
    size_t n = (size_t)lm_type_numel(&rhs->type);
    if ((rc = scratch(k, n * ces, &rc_buf)) < 0) goto done;
    lm_convert_array(rc_buf->data, ct, rhs->data, rhs->type.dtype, n);
    Rk = rc_buf->data;
  }
  int64_t rows = (int64_t)((8u << 20) / ces) / (Kd ? Kd : 1);
  if (rows < 1) rows = 1;
  if (rows > P) rows = P;
  if ((rc = scratch(k, (size_t)(Kd * Og) * ces, &wbuf)) < 0) goto done;
  if ((rc = scratch(k, (size_t)(rows * Kd) * ces, &abuf)) < 0) goto done;
  if ((rc = scratch(k, (size_t)(rows * Og) * ces, &cbuf)) < 0) goto done;
  if (ct != ot && (rc = scratch(k, (size_t)(rows * Og) * oes, &obuf)) < 0) goto done;
  for (int64_t grp = 0; grp < groups; grp++) {
    int64_t g = c->G > 1 ? grp : 0, gb = c->BG > 1 ? grp : 0, obase = grp * Og;
    /* W[(i, w), oo] = rhs[i, obase + oo, w (reversed where asked)] */
    char *W = wbuf->data;
    int64_t w[LM_MAX_RANK] = {0};
    for (int64_t kp = 0; kp < kspace; kp++) {
      int64_t roff = 0;
      for (int d = 0; d < ns; d++) roff += (c->rev[d] ? c->k_sp[d] - 1 - w[d] : w[d]) * c->rs_s[d];
      for (int64_t i = 0; i < c->KI; i++)
        for (int64_t oo = 0; oo < Og; oo++)
          memcpy(W + ((i * kspace + kp) * Og + oo) * (int64_t)ces, Rk + (roff + i * c->rs_i + (obase + oo) * c->rs_o) * (int64_t)ces, ces);
      for (int d = ns - 1; d >= 0; d--) {
        if (++w[d] < c->k_sp[d]) break;
        w[d] = 0;
      }
    }
    for (int64_t r0 = 0; r0 < P; r0 += rows) {
      int64_t nr = P - r0 < rows ? P - r0 : rows;
      char *A = abuf->data;
      memset(A, 0, (size_t)(nr * Kd) * ces);
      for (int64_t r = 0; r < nr; r++) {
        int64_t p = r0 + r, nb = p / ospace, s = p % ospace;
        int64_t opos[LM_MAX_RANK];
        for (int d = ns - 1; d >= 0; d--) { opos[d] = s % c->out_sp[d]; s /= c->out_sp[d]; }
        int64_t n = gb * NB + nb;
        int64_t ww[LM_MAX_RANK] = {0};
        for (int64_t kp = 0; kp < kspace; kp++) {
          int64_t loff = n * c->ls_b + g * c->KI * c->ls_f;
          bool valid = true;
          for (int d = 0; d < ns && valid; d++) {
            int64_t q = conv_src(c, d, opos[d], ww[d]);
            if (q < 0) valid = false;
            else loff += q * c->ls_s[d];
          }
          if (valid) {
            char *dst = A + (r * Kd + kp) * (int64_t)ces;
            if (ces == 4) {
              for (int64_t i = 0; i < c->KI; i++)
                memcpy(dst + i * kspace * 4, L + (loff + i * c->ls_f) * 4, 4);
            } else {
              for (int64_t i = 0; i < c->KI; i++)
                memcpy(dst + i * kspace * (int64_t)ces, L + (loff + i * c->ls_f) * (int64_t)ces, ces);
            }
          }
          for (int d = ns - 1; d >= 0; d--) {
            if (++ww[d] < c->k_sp[d]) break;
            ww[d] = 0;
          }
        }
      }
      gemm(ct, false, false, nr, Og, Kd, A, Kd, W, Og, cbuf->data, Og);
      const char *Cs = cbuf->data;
      if (obuf) {
        lm_convert_array(obuf->data, ot, cbuf->data, ct, (size_t)(nr * Og));
        Cs = obuf->data;
      }
      /* scatter rows into the result */
      for (int64_t r = 0; r < nr; r++) {
        int64_t p = r0 + r, nb = p / ospace, s = p % ospace;
        int64_t ooff = nb * c->os_b;
        for (int d = ns - 1; d >= 0; d--) { ooff += (s % c->out_sp[d]) * c->os_s[d]; s /= c->out_sp[d]; }
        if (c->os_f == 1) {
          memcpy((char *)out->data + (ooff + obase) * (int64_t)oes, Cs + r * Og * (int64_t)oes, (size_t)Og * oes);
        } else {
          for (int64_t oo = 0; oo < Og; oo++)
            memcpy((char *)out->data + (ooff + (obase + oo) * c->os_f) * (int64_t)oes, Cs + (r * Og + oo) * (int64_t)oes, oes);
        }
      }
    }
  }
done:
  lm_buffer_release(lc);
  lm_buffer_release(rc_buf);
  lm_buffer_release(wbuf);
  lm_buffer_release(abuf);
  lm_buffer_release(cbuf);
  lm_buffer_release(obuf);
  return rc;
}

/* Small floating-point convolutions: direct loops in the compute type (see SMALL_MACS),
 * summing over window positions (outer) and input features (inner) in order. */
static int conv_small(lm_kctx *k, const lm_buffer *lhs, const lm_buffer *rhs, const lm_conv *c, lm_buffer *out) {
  lm_dtype ot = out->type.dtype, ct = acc_type(ot);
  size_t ces = lm_dtype_size(ct);
  size_t nl = (size_t)lm_type_numel(&lhs->type), nr = (size_t)lm_type_numel(&rhs->type), no = (size_t)lm_type_numel(&out->type);
  lm_buffer *lb = NULL, *rb = NULL, *ob = NULL;
  int rc = scratch(k, nl * ces, &lb);
  if (rc == 0) rc = scratch(k, nr * ces, &rb);
  if (rc == 0) rc = scratch(k, no * ces, &ob);
  if (rc < 0) goto done;
  lm_convert_array(lb->data, ct, lhs->data, lhs->type.dtype, nl);
  lm_convert_array(rb->data, ct, rhs->data, rhs->type.dtype, nr);
  int ns = c->ns;
  int64_t NB = c->N / c->BG, OG = c->O / c->G, OBG = c->O / c->BG, ospace = 1, kspace = 1;
  for (int d = 0; d < ns; d++) { ospace *= c->out_sp[d]; kspace *= c->k_sp[d]; }
#define CONV_LOOP(T)                                                                              \
  {                                                                                               \
    const T *L = lb->data, *R = rb->data;                                                         \
    T *O = ob->data;                                                                              \
    for (int64_t nb = 0; nb < NB; nb++)                                                           \
      for (int64_t o = 0; o < c->O; o++) {                                                        \
        int64_t g = o / OG, n = (o / OBG) * NB + nb;                                              \
        int64_t opos[LM_MAX_RANK] = {0};                                                          \
        for (int64_t s = 0; s < ospace; s++) {                                                    \
          T acc = 0;                                                                              \
          int64_t w[LM_MAX_RANK] = {0};                                                           \
          for (int64_t kp = 0; kp < kspace; kp++) {                                               \
            int64_t loff = n * c->ls_b, roff = o * c->rs_o;                                       \
            bool valid = true;                                                                    \
            for (int d = 0; d < ns && valid; d++) {                                               \
              int64_t q = conv_src(c, d, opos[d], w[d]);                                          \
              if (q < 0) valid = false;                                                           \
              loff += q * c->ls_s[d];                                                             \
              roff += (c->rev[d] ? c->k_sp[d] - 1 - w[d] : w[d]) * c->rs_s[d];                    \
            }                                                                                     \
            if (valid)                                                                            \
              for (int64_t i = 0; i < c->KI; i++) acc += L[loff + (g * c->KI + i) * c->ls_f] * R[roff + i * c->rs_i]; \
            for (int d = ns - 1; d >= 0; d--) {                                                   \
              if (++w[d] < c->k_sp[d]) break;                                                     \
              w[d] = 0;                                                                           \
            }                                                                                     \
          }                                                                                       \
          int64_t ooff = nb * c->os_b + o * c->os_f;                                              \
          for (int d = 0; d < ns; d++) ooff += opos[d] * c->os_s[d];                              \
          O[ooff] = acc;                                                                          \
          for (int d = ns - 1; d >= 0; d--) {                                                     \
            if (++opos[d] < c->out_sp[d]) break;                                                  \
            opos[d] = 0;                                                                          \
          }                                                                                       \
        }                                                                                         \
      }                                                                                           \
  }
  switch (ct) {
    case LOOM_DTYPE_F32: CONV_LOOP(float) break;
    case LOOM_DTYPE_F64: CONV_LOOP(double) break;
    case LOOM_DTYPE_C64: CONV_LOOP(float complex) break;
    case LOOM_DTYPE_C128: CONV_LOOP(double complex) break;
    default: break;
  }
#undef CONV_LOOP
  lm_convert_array(out->data, ot, ob->data, ct, no);
done:
  lm_buffer_release(lb);
  lm_buffer_release(rb);
  lm_buffer_release(ob);
  return rc;
}

static int verify_conv(const lm_op *op, const lm_func *fn, lm_err *err) {
  if (op->nin != 2 || op->nout != 1) return lm_op_err(err, op, LOOM_VERIFY, "expected two operands and one result");
  lm_conv c;
  return lm_conv_get(op, vtype(fn, op->in[0]), vtype(fn, op->in[1]), vtype(fn, op->out[0]), &c, err);
}

static int k_conv(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  lm_conv c;
  LM_TRY(lm_conv_get(k->op, &in[0]->type, &in[1]->type, &out[0]->type, &c, k->err));
  if (lm_type_numel(&out[0]->type) == 0) return 0;
  if (acc_type(out[0]->type.dtype) == LOOM_DTYPE_S64) {
    lm_conv_ref(in[0], in[1], &c, out[0]);
    return 0;
  }
  double macs = (double)lm_type_numel(&out[0]->type) * (double)c.KI;
  for (int d = 0; d < c.ns; d++) macs *= (double)c.k_sp[d];
  if (macs <= SMALL_MACS) return conv_small(k, in[0], in[1], &c, out[0]);
  return conv_fast(k, in[0], in[1], &c, out[0]);
}

/* ---- chlo.ragged_dot ----
 * dot_general where one lhs dimension is split into groups by group_sizes (rank 1, [G]):
 *   mode 1, the ragged dim is a free (non-contracting) lhs dim: rhs has a group dimension, and
 *           an lhs position in group i multiplies rhs[group = i]; result dims as dot_general's
 *           with the rhs group dim left out;
 *   mode 2, the ragged dim is contracting: result[i, ...] sums only over group i's positions
 *           (a leading result dim of size G);
 *   mode 3, the ragged dim is a batching dim: an ordinary dot_general.
 * Positions past the sum of the group sizes contribute zeros. Accumulated like
 * lm_dot_general_ref (double / complex double / wrapping int64). */
typedef struct ragged {
  lm_dot_dims d;
  int64_t lr;    /* lhs ragged dim */
  int64_t rg;    /* rhs group dim, -1 if none */
  int mode;
} ragged;

static int ragged_get(const lm_op *op, const lm_type *lt, const lm_type *rt, const lm_type *gt, const lm_type *ot, ragged *g,
                      lm_err *err) {
  memset(g, 0, sizeof *g);
  const lm_attr *s = lm_op_attr(op, "ragged_dot_dimension_numbers");
  if (!s || s->kind != LM_ATTR_STRUCT) return lm_op_err(err, op, LOOM_VERIFY, "missing ragged_dot_dimension_numbers");
  int64_t lr[LM_MAX_RANK], rg[LM_MAX_RANK];
  int a = struct_ints(s, "lhs_batching_dimensions", g->d.lb, LM_MAX_RANK);
  int b = struct_ints(s, "rhs_batching_dimensions", g->d.rb, LM_MAX_RANK);
  int c = struct_ints(s, "lhs_contracting_dimensions", g->d.lc, LM_MAX_RANK);
  int e = struct_ints(s, "rhs_contracting_dimensions", g->d.rc, LM_MAX_RANK);
  int nr = struct_ints(s, "lhs_ragged_dimensions", lr, LM_MAX_RANK), ng = struct_ints(s, "rhs_group_dimensions", rg, LM_MAX_RANK);
  if (a < 0 || b != a || c < 0 || e != c || nr != 1 || ng < 0 || ng > 1)
    return lm_op_err(err, op, LOOM_VERIFY, "malformed ragged_dot_dimension_numbers");
  g->d.nb = a;
  g->d.nc = c;
  g->lr = lr[0];
  g->rg = ng ? rg[0] : -1;
  if (lt->kind != LM_TYPE_TENSOR || rt->kind != LM_TYPE_TENSOR || gt->kind != LM_TYPE_TENSOR || ot->kind != LM_TYPE_TENSOR ||
      !lm_type_is_static(lt) || !lm_type_is_static(rt) || !lm_type_is_static(ot))
    return lm_op_err(err, op, LOOM_VERIFY, "operands and result must be static tensors");
  if (gt->rank != 1 || !lm_dtype_is_int(gt->dtype))
    return lm_op_err(err, op, LOOM_UNSUPPORTED, "group_sizes must be a 1-dimensional integer tensor");
  if (g->lr < 0 || g->lr >= lt->rank) return lm_op_err(err, op, LOOM_VERIFY, "lhs ragged dimension out of range");
  g->mode = lm_dims_contains(g->d.lc, c, g->lr) ? 2 : lm_dims_contains(g->d.lb, a, g->lr) ? 3 : 1;
  if ((g->mode == 1) != (g->rg >= 0))
    return lm_op_err(err, op, LOOM_VERIFY, "rhs_group_dimensions must be given exactly when the ragged dimension is a free dimension");
  if (g->rg >= rt->rank || (g->rg >= 0 && rt->dims[g->rg] != gt->dims[0]))
    return lm_op_err(err, op, LOOM_VERIFY, "rhs group dimension does not match group_sizes");
  for (int i = 0; i < a + c; i++) {
    int64_t l = i < a ? g->d.lb[i] : g->d.lc[i - a], r = i < a ? g->d.rb[i] : g->d.rc[i - a];
    if (l < 0 || l >= lt->rank || r < 0 || r >= rt->rank || r == g->rg || lt->dims[l] != rt->dims[r])
      return lm_op_err(err, op, LOOM_VERIFY, "batching/contracting dimensions do not match");
  }
  /* expected result dims */
  int64_t want[LM_MAX_RANK];
  int n = 0;
  if (g->mode == 2) want[n++] = gt->dims[0];
  for (int i = 0; i < a; i++) want[n++] = lt->dims[g->d.lb[i]];
  for (int dd = 0; dd < lt->rank; dd++)
    if (!lm_dims_contains(g->d.lb, a, dd) && !lm_dims_contains(g->d.lc, c, dd)) want[n++] = lt->dims[dd];
  for (int dd = 0; dd < rt->rank; dd++)
    if (!lm_dims_contains(g->d.rb, a, dd) && !lm_dims_contains(g->d.rc, c, dd) && dd != g->rg) want[n++] = rt->dims[dd];
  bool ok = n == ot->rank;
  for (int i = 0; ok && i < n; i++) ok = ot->dims[i] == want[i];
  if (!ok) return lm_op_err(err, op, LOOM_VERIFY, "result shape does not match the ragged dot");
  return 0;
}

static int verify_ragged(const lm_op *op, const lm_func *fn, lm_err *err) {
  if (op->nin != 3 || op->nout != 1) return lm_op_err(err, op, LOOM_VERIFY, "expected lhs, rhs, group_sizes and one result");
  ragged g;
  return ragged_get(op, vtype(fn, op->in[0]), vtype(fn, op->in[1]), vtype(fn, op->in[2]), vtype(fn, op->out[0]), &g, err);
}

static int k_ragged(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  ragged g;
  LM_TRY(ragged_get(k->op, &in[0]->type, &in[1]->type, &in[2]->type, &out[0]->type, &g, k->err));
  const lm_type *lt = &in[0]->type, *rt = &in[1]->type, *ot = &out[0]->type;
  int64_t G = in[2]->type.dims[0];
  /* group of each position along the ragged dim (-1 past the last group) */
  int64_t L = lt->dims[g.lr];
  int64_t *grp = malloc((size_t)(L ? L : 1) * sizeof *grp);
  if (!grp) return lm_kerr(k, LOOM_NO_MEMORY, "out of host memory");
  int64_t pos = 0;
  for (int64_t i = 0; i < L; i++) grp[i] = -1;
  for (int64_t gi = 0; gi < G; gi++) {
    int64_t sz = lm_elem_as_i64(in[2]->data, in[2]->type.dtype, (size_t)gi);
    for (int64_t j = 0; j < sz && pos < L; j++) grp[pos++] = gi;
  }
  lm_dtype acc = acc_type(ot->dtype) == LOOM_DTYPE_S64 ? LOOM_DTYPE_S64 : LOOM_DTYPE_C128;
  int64_t ls[LM_MAX_RANK], rs[LM_MAX_RANK], lf[LM_MAX_RANK], rf[LM_MAX_RANK];
  lm_row_strides(lt, ls);
  lm_row_strides(rt, rs);
  int nlf = 0, nrf = 0;
  for (int d = 0; d < lt->rank; d++)
    if (!lm_dims_contains(g.d.lb, g.d.nb, d) && !lm_dims_contains(g.d.lc, g.d.nc, d)) lf[nlf++] = d;
  for (int d = 0; d < rt->rank; d++)
    if (!lm_dims_contains(g.d.rb, g.d.nb, d) && !lm_dims_contains(g.d.rc, g.d.nc, d) && d != g.rg) rf[nrf++] = d;
  int lead = g.mode == 2 ? 1 : 0;
  int64_t total = lm_type_numel(ot), K = prod_dims(lt, g.d.lc, g.d.nc);
  int64_t oidx[LM_MAX_RANK] = {0};
  for (int64_t o = 0; o < total; o++) {
    int64_t lbase = 0, rbase = 0, lidx[LM_MAX_RANK] = {0};
    for (int i = 0; i < g.d.nb; i++) {
      lidx[g.d.lb[i]] = oidx[lead + i];
      lbase += oidx[lead + i] * ls[g.d.lb[i]];
      rbase += oidx[lead + i] * rs[g.d.rb[i]];
    }
    for (int i = 0; i < nlf; i++) {
      lidx[lf[i]] = oidx[lead + g.d.nb + i];
      lbase += oidx[lead + g.d.nb + i] * ls[lf[i]];
    }
    for (int i = 0; i < nrf; i++) rbase += oidx[lead + g.d.nb + nlf + i] * rs[rf[i]];
    bool live = true;
    if (g.mode == 1) {
      int64_t gi = grp[lidx[g.lr]];
      if (gi < 0) live = false;
      else rbase += gi * rs[g.rg];
    } else if (g.mode == 3) {
      live = grp[lidx[g.lr]] >= 0;
    }
    acc_val sum = {0, 0};
    int64_t cidx[LM_MAX_RANK] = {0};
    for (int64_t kk = 0; live && kk < K; kk++) {
      int64_t lo = lbase, ro = rbase;
      bool take = true;
      for (int i = 0; i < g.d.nc; i++) {
        lo += cidx[i] * ls[g.d.lc[i]];
        ro += cidx[i] * rs[g.d.rc[i]];
        if (g.mode == 2 && g.d.lc[i] == g.lr) take = grp[cidx[i]] == oidx[0];
      }
      if (take) {
        acc_val x, y;
        load_acc(in[0]->data, lt->dtype, (size_t)lo, acc, &x);
        load_acc(in[1]->data, rt->dtype, (size_t)ro, acc, &y);
        if (acc == LOOM_DTYPE_S64) sum.i = (int64_t)((uint64_t)sum.i + (uint64_t)x.i * (uint64_t)y.i);
        else sum.z += x.z * y.z;
      }
      for (int i = g.d.nc - 1; i >= 0; i--) {
        if (++cidx[i] < lt->dims[g.d.lc[i]]) break;
        cidx[i] = 0;
      }
    }
    if (ot->dtype == LOOM_DTYPE_PRED) sum.i = sum.i != 0;
    store_acc(out[0]->data, ot->dtype, (size_t)o, acc, &sum);
    for (int i = ot->rank - 1; i >= 0; i--) {
      if (++oidx[i] < ot->dims[i]) break;
      oidx[i] = 0;
    }
  }
  free(grp);
  return 0;
}

/* OpenBLAS 0.3.21 (Debian 12) does not know AMD Zen 4/5 and runs them with its Haswell (AVX2)
 * kernels at ~60% of the speed its SkylakeX (AVX-512) kernels reach there. When the CPU has
 * AVX-512, the library was built with runtime CPU selection (DYNAMIC_ARCH: it exports
 * gotoblas_dynamic_init) and the user has not chosen a core with OPENBLAS_CORETYPE, re-run that
 * selection with SkylakeX before any BLAS call. Weak references keep other builds linking. */
extern void gotoblas_dynamic_init(void) __attribute__((weak));
extern void gotoblas_dynamic_quit(void) __attribute__((weak));
extern char *openblas_get_corename(void) __attribute__((weak));

static void tune_openblas(void) {
#if defined(__x86_64__)
  if (!gotoblas_dynamic_init || !gotoblas_dynamic_quit || !openblas_get_corename) return;
  if (getenv("OPENBLAS_CORETYPE") || getenv("LOOM_KEEP_BLAS_CORE")) return;
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512dq") || !__builtin_cpu_supports("avx512bw") ||
      !__builtin_cpu_supports("avx512vl"))
    return;
  const char *core = openblas_get_corename();
  if (!core || (strcasecmp(core, "haswell") != 0 && strcasecmp(core, "zen") != 0)) return;
  setenv("OPENBLAS_CORETYPE", "SKYLAKEX", 0);
  gotoblas_dynamic_quit();
  gotoblas_dynamic_init();
  unsetenv("OPENBLAS_CORETYPE");
#endif
}

void lm_register_dot_kernels(void) {
  tune_openblas();
  lm_kernel_register(LM_OP_DOT_GENERAL, k_dot, verify_dot, 0);
  lm_kernel_register(LM_OP_DOT, k_dot, verify_dot, 0);
  lm_kernel_register(LM_OP_CONVOLUTION, k_conv, verify_conv, 0);
  lm_kernel_register(LM_OP_CHLO_RAGGED_DOT, k_ragged, verify_ragged, 0);
}
