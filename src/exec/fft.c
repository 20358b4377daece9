/* Op: fft (StableHLO spec 'fft': FFT, IFFT, RFFT, IRFFT over the last 1-3 dimensions).
 *
 * Transforms run in double precision (complex<f32> and f32 data included) and round once when
 * stored. A 1-D transform of length n uses a mixed-radix Cooley-Tukey recursion when every prime
 * factor of n is at most 64, and Bluestein's algorithm (a chirp convolution done with power-of-two
 * transforms) otherwise, so every length costs O(n log n)-ish. Twiddle factors come from a table
 * computed in long double. IFFT scales by 1/n; RFFT keeps the n/2+1 non-redundant outputs; IRFFT
 * extends its input to the Hermitian spectrum (the imaginary parts of the DC and Nyquist terms
 * drop out, as in numpy and XLA) and keeps the real part. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "exec/ops_util.h"

typedef struct cplx { double re, im; } cplx;

static inline cplx cmul(cplx a, cplx b) { return (cplx){a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re}; }
static inline cplx cadd(cplx a, cplx b) { return (cplx){a.re + b.re, a.im + b.im}; }

/* ---- 1-D plans ---- */

typedef struct fft_plan {
  int64_t n;
  cplx *w;            /* w[k] = exp(-2 pi i k / n), k < n */
  int nf;
  int64_t f[64];      /* prime factors of n (mixed radix) */
  bool bluestein;
  /* Bluestein: chirp c[k] = exp(-pi i k^2 / n), and the FFT of the conjugate chirp padded to m */
  int64_t m;
  cplx *chirp, *bfft;
  struct fft_plan *sub; /* power-of-two plan of length m */
  cplx *scratch;        /* [m] for Bluestein, [n] for mixed radix */
  cplx *scratch2;       /* [n] */
} fft_plan;

static void plan_free(fft_plan *p) {
  if (!p) return;
  free(p->w);
  free(p->chirp);
  free(p->bfft);
  free(p->scratch);
  free(p->scratch2);
  plan_free(p->sub);
  free(p);
}

static void twiddles(cplx *w, int64_t n) {
  for (int64_t k = 0; k < n; k++) {
    long double a = -2.0L * 3.14159265358979323846264338327950288L * (long double)k / (long double)n;
    w[k] = (cplx){(double)cosl(a), (double)sinl(a)};
  }
}

static void fft_exec(fft_plan *p, cplx *x);

static fft_plan *plan_new(int64_t n) {
  fft_plan *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->n = n;
  p->w = malloc((size_t)(n ? n : 1) * sizeof *p->w);
  p->scratch2 = malloc((size_t)(n ? n : 1) * sizeof *p->scratch2);
  if (!p->w || !p->scratch2) { plan_free(p); return NULL; }
  twiddles(p->w, n);
  int64_t r = n;
  for (int64_t q = 2; q * q <= r && p->nf < 63; q++)
    while (r % q == 0) { p->f[p->nf++] = q; r /= q; }
  if (r > 1) p->f[p->nf++] = r;
  for (int i = 0; i < p->nf; i++)
    if (p->f[i] > 64) p->bluestein = true;
  if (!p->bluestein) {
    p->scratch = malloc((size_t)(n ? n : 1) * sizeof *p->scratch);
    if (!p->scratch) { plan_free(p); return NULL; }
    return p;
  }
  int64_t m = 1;
  while (m < 2 * n - 1) m *= 2;
  p->m = m;
  p->chirp = malloc((size_t)n * sizeof *p->chirp);
  p->bfft = calloc((size_t)m, sizeof *p->bfft);
  p->scratch = malloc((size_t)m * sizeof *p->scratch);
  p->sub = plan_new(m);
  if (!p->chirp || !p->bfft || !p->scratch || !p->sub) { plan_free(p); return NULL; }
  for (int64_t k = 0; k < n; k++) {
    /* k^2 mod 2n keeps the angle small and exact */
    unsigned __int128 k2 = (unsigned __int128)k * (unsigned __int128)k % (unsigned __int128)(2 * n);
    long double a = -3.14159265358979323846264338327950288L * (long double)(int64_t)k2 / (long double)n;
    p->chirp[k] = (cplx){(double)cosl(a), (double)sinl(a)};
  }
  p->bfft[0] = (cplx){p->chirp[0].re, -p->chirp[0].im};
  for (int64_t k = 1; k < n; k++) p->bfft[k] = p->bfft[m - k] = (cplx){p->chirp[k].re, -p->chirp[k].im};
  fft_exec(p->sub, p->bfft);
  return p;
}

/* Mixed-radix decimation in time: out[k] = sum_j in[j*stride] W_n^(jk), n = the product of
 * f[fi..]; tw = N/n (twiddle table stride of the top-level length N). */
static void mixed(const fft_plan *p, const cplx *in, int64_t stride, cplx *out, int64_t n, int fi, int64_t tw) {
  if (n == 1) { out[0] = in[0]; return; }
  int64_t r = p->f[fi], m = n / r;
  for (int64_t j = 0; j < r; j++) mixed(p, in + j * stride, stride * r, out + j * m, m, fi + 1, tw * r);
  /* combine: X[k + q m] = sum_j (W_n^(jk) Y_j[k]) W_r^(jq) */
  cplx t[64];
  int64_t N = p->n;
  for (int64_t k = 0; k < m; k++) {
    for (int64_t j = 0; j < r; j++) {
      cplx y = out[j * m + k];
      t[j] = j ? cmul(y, p->w[(j * k * tw) % N]) : y;
    }
    for (int64_t q = 0; q < r; q++) {
      cplx s = t[0];
      for (int64_t j = 1; j < r; j++) s = cadd(s, cmul(t[j], p->w[((j * q) % r) * m * tw % N]));
      out[q * m + k] = s;
    }
  }
}

/* In-place forward DFT of x[n]. */
static void fft_exec(fft_plan *p, cplx *x) {
  int64_t n = p->n;
  if (n <= 1) return;
  if (!p->bluestein) {
    memcpy(p->scratch2, x, (size_t)n * sizeof *x);
    mixed(p, p->scratch2, 1, x, n, 0, 1);
    return;
  }
  int64_t m = p->m;
  cplx *a = p->scratch;
  for (int64_t k = 0; k < n; k++) a[k] = cmul(x[k], p->chirp[k]);
  for (int64_t k = n; k < m; k++) a[k] = (cplx){0, 0};
  fft_exec(p->sub, a);
  for (int64_t k = 0; k < m; k++) {
    cplx v = cmul(a[k], p->bfft[k]);
    a[k] = (cplx){v.re, -v.im}; /* conj, so the forward transform below acts as the inverse */
  }
  fft_exec(p->sub, a);
  for (int64_t k = 0; k < n; k++) {
    cplx v = (cplx){a[k].re / (double)m, -a[k].im / (double)m};
    x[k] = cmul(v, p->chirp[k]);
  }
}

/* In-place inverse DFT of x[n] including the 1/n scale. */
static void ifft_exec(fft_plan *p, cplx *x) {
  int64_t n = p->n;
  for (int64_t k = 0; k < n; k++) x[k].im = -x[k].im;
  fft_exec(p, x);
  for (int64_t k = 0; k < n; k++) x[k] = (cplx){x[k].re / (double)n, -x[k].im / (double)n};
}

/* ---- the op ---- */

typedef enum { FT_FFT, FT_IFFT, FT_RFFT, FT_IRFFT } fft_type;

static int read_fft(const lm_op *op, fft_type *t, int64_t *len, int *L, lm_err *err) {
  const lm_attr *ta = lm_op_attr(op, "fft_type");
  const char *s = ta && ta->s ? ta->s : "";
  if (!strcmp(s, "FFT")) *t = FT_FFT;
  else if (!strcmp(s, "IFFT")) *t = FT_IFFT;
  else if (!strcmp(s, "RFFT")) *t = FT_RFFT;
  else if (!strcmp(s, "IRFFT")) *t = FT_IRFFT;
  else return lm_op_err(err, op, LOOM_VERIFY, "fft_type '%s' is not one of FFT, IFFT, RFFT, IRFFT", s);
  *L = lm_op_ints(op, "fft_length", len, 3, -1, err);
  if (*L < 0) return *L;
  if (*L < 1 || *L > 3) return lm_op_err(err, op, LOOM_VERIFY, "fft_length must have 1 to 3 values");
  return 0;
}

static lm_dtype real_of(lm_dtype c) { return c == LOOM_DTYPE_C64 ? LOOM_DTYPE_F32 : LOOM_DTYPE_F64; }

static int v_fft(const lm_op *op, const lm_func *fn, lm_err *err) {
  if (op->nin != 1 || op->nout != 1) return lm_op_err(err, op, LOOM_VERIFY, "expects 1 operand and 1 result");
  LM_TRY(lm_check_tensor(op, fn, false, 0, err));
  LM_TRY(lm_check_tensor(op, fn, true, 0, err));
  fft_type t;
  int64_t len[3];
  int L;
  LM_TRY(read_fft(op, &t, len, &L, err));
  const lm_type *a = lm_vtype(fn, op->in[0]), *r = lm_vtype(fn, op->out[0]);
  if (a->rank < L) return lm_op_err(err, op, LOOM_VERIFY, "operand rank %d is below size(fft_length) %d", a->rank, L);
  bool ok;
  switch (t) {
    case FT_FFT: case FT_IFFT: ok = lm_dtype_is_complex(a->dtype) && r->dtype == a->dtype; break;
    case FT_RFFT: ok = (a->dtype == LOOM_DTYPE_F32 || a->dtype == LOOM_DTYPE_F64) && lm_dtype_is_complex(r->dtype) && real_of(r->dtype) == a->dtype; break;
    default: ok = lm_dtype_is_complex(a->dtype) && r->dtype == real_of(a->dtype); break;
  }
  if (!ok)
    return lm_op_err(err, op, LOOM_VERIFY, "element types %s -> %s do not fit this fft_type", lm_dtype_name(a->dtype),
                     lm_dtype_name(r->dtype));
  if (r->rank != a->rank) return lm_op_err(err, op, LOOM_VERIFY, "result rank differs from the operand rank");
  int R = a->rank;
  for (int d = 0; d < R; d++) {
    int64_t want = a->dims[d];
    int li = d - (R - L);
    if (li >= 0) {
      int64_t fl = len[li];
      if (fl < 0) return lm_op_err(err, op, LOOM_VERIFY, "fft_length values must be non-negative");
      bool last = d == R - 1;
      if (t == FT_RFFT && last) {
        if (a->dims[d] != fl) return lm_op_err(err, op, LOOM_VERIFY, "RFFT operand's last dimension must be fft_length[-1]");
        want = fl == 0 ? 0 : fl / 2 + 1;
      } else if (t == FT_IRFFT && last) {
        if (a->dims[d] != (fl == 0 ? 0 : fl / 2 + 1))
          return lm_op_err(err, op, LOOM_VERIFY, "IRFFT operand's last dimension must be fft_length[-1] / 2 + 1");
        want = fl;
      } else if (a->dims[d] != fl) {
        return lm_op_err(err, op, LOOM_VERIFY, "dimension %d (%lld) differs from fft_length[%d] (%lld)", d,
                         (long long)a->dims[d], li, (long long)fl);
      }
    }
    if (r->dims[d] != want)
      return lm_op_err(err, op, LOOM_VERIFY, "result dimension %d is %lld, expected %lld", d, (long long)r->dims[d],
                       (long long)want);
  }
  return 0;
}

/* Applies the 1-D transform along axis `ax` of the complex array x with shape dims[rank]. */
static int along_axis(cplx *x, int rank, const int64_t *dims, int ax, bool inverse) {
  int64_t n = dims[ax];
  if (n <= 1) return 0;
  int64_t total = 1;
  for (int d = 0; d < rank; d++) total *= dims[d];
  if (total == 0) return 0;
  int64_t stride = 1;
  for (int d = ax + 1; d < rank; d++) stride *= dims[d];
  fft_plan *p = plan_new(n);
  cplx *line = malloc((size_t)n * sizeof *line);
  if (!p || !line) { plan_free(p); free(line); return -1; }
  int64_t lines = total / n;
  for (int64_t l = 0; l < lines; l++) {
    int64_t outer = l / stride, inner = l % stride;
    cplx *base = x + outer * n * stride + inner;
    for (int64_t k = 0; k < n; k++) line[k] = base[k * stride];
    if (inverse) ifft_exec(p, line);
    else fft_exec(p, line);
    for (int64_t k = 0; k < n; k++) base[k * stride] = line[k];
  }
  plan_free(p);
  free(line);
  return 0;
}

static int k_fft(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  fft_type t;
  int64_t len[3];
  int L;
  LM_TRY(read_fft(k->op, &t, len, &L, k->err));
  const lm_type *at = &in[0]->type, *rt = &out[0]->type;
  int R = at->rank;
  int64_t na = lm_type_numel(at), nr = lm_type_numel(rt);
  if (na == 0 || nr == 0) return 0;
  /* working complex array: the operand's shape, except RFFT/IRFFT whose last axis is the full n */
  int64_t wd[LM_MAX_RANK];
  memcpy(wd, at->dims, sizeof wd);
  if (t == FT_IRFFT) wd[R - 1] = rt->dims[R - 1];
  int64_t nw = 1;
  for (int d = 0; d < R; d++) nw *= wd[d];
  cplx *w = calloc((size_t)nw, sizeof *w);
  if (!w) return lm_kerr(k, LOOM_NO_MEMORY, "out of host memory for an fft of %lld elements", (long long)nw);
  lm_dtype adt = at->dtype;
  size_t aes = lm_dtype_size(adt);
  int rc = 0;
  if (t == FT_IRFFT) {
    /* inverse transforms over the leading fft axes on the half spectrum, then the Hermitian
     * extension along the last axis */
    int64_t hd[LM_MAX_RANK];
    memcpy(hd, at->dims, sizeof hd);
    cplx *h = malloc((size_t)na * sizeof *h);
    if (!h) { free(w); return lm_kerr(k, LOOM_NO_MEMORY, "out of host memory"); }
    lm_dtype part = real_of(adt);
    for (int64_t i = 0; i < na; i++) {
      const char *p = (const char *)in[0]->data + i * (int64_t)aes;
      h[i] = (cplx){lm_load_f64(p, part), lm_load_f64(p + aes / 2, part)};
    }
    for (int q = 0; q < L - 1 && rc == 0; q++) rc = along_axis(h, R, hd, R - L + q, true);
    int64_t n = wd[R - 1], hn = hd[R - 1], rows = na / hn;
    for (int64_t r = 0; r < rows && rc == 0; r++) {
      cplx *src = h + r * hn, *dst = w + r * n;
      for (int64_t j = 0; j < n; j++) {
        if (j < hn && j <= n / 2) dst[j] = src[j];
        else { cplx c = src[n - j]; dst[j] = (cplx){c.re, -c.im}; }
      }
    }
    free(h);
    if (rc == 0) rc = along_axis(w, R, wd, R - 1, true);
    for (int64_t i = 0; i < nr && rc == 0; i++) lm_store_f64((char *)out[0]->data + i * (int64_t)lm_dtype_size(rt->dtype), rt->dtype, w[i].re);
  } else {
    if (t == FT_RFFT) {
      for (int64_t i = 0; i < na; i++) w[i] = (cplx){lm_load_f64((const char *)in[0]->data + i * (int64_t)aes, adt), 0};
    } else {
      lm_dtype part = real_of(adt);
      for (int64_t i = 0; i < na; i++) {
        const char *p = (const char *)in[0]->data + i * (int64_t)aes;
        w[i] = (cplx){lm_load_f64(p, part), lm_load_f64(p + aes / 2, part)};
      }
    }
    bool inv = t == FT_IFFT;
    /* FFT order: last axis first (RFFT truncates it), then the others; IFFT the reverse (the
     * result is the same mathematically; this follows the spec's description) */
    for (int q = 0; q < L && rc == 0; q++) {
      int ax = inv ? R - L + q : R - 1 - q;
      rc = along_axis(w, R, wd, ax, inv);
    }
    lm_dtype rdt = rt->dtype, part = real_of(rdt);
    size_t res = lm_dtype_size(rdt);
    int64_t n = wd[R - 1], on = rt->dims[R - 1], rows = nr / on;
    for (int64_t r = 0; r < rows && rc == 0; r++)
      for (int64_t j = 0; j < on; j++) {
        cplx v = w[r * n + j];
        char *p = (char *)out[0]->data + (r * on + j) * (int64_t)res;
        lm_store_f64(p, part, v.re);
        lm_store_f64(p + res / 2, part, v.im);
      }
  }
  free(w);
  if (rc < 0) return lm_kerr(k, LOOM_NO_MEMORY, "out of host memory for fft plans");
  return 0;
}

void lm_register_fft_kernels(void) { lm_kernel_register(LM_OP_FFT, k_fft, v_fft, 0); }
