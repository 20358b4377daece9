/* numpy-style array printing (see ndprint.h). Elements are formatted to strings first, then
 * padded to a common width (floats aligned on the decimal point), then laid out recursively. */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include "cli/ndprint.h"
#include "common/half.h"

#define LINE_WIDTH 75
#define SUMMARY_THRESHOLD 1000
#define EDGE_ITEMS 3
#define ELEM_MAX 64

static bool is_float(lm_dtype t) { return lm_dtype_is_float(t) || lm_dtype_is_complex(t); }

static double load_real(lm_dtype t, const uint8_t *p, int part) {
  uint16_t h;
  float f;
  double d;
  switch (t) {
    case LOOM_DTYPE_F16: memcpy(&h, p, 2); return lm_f16_to_f32(h);
    case LOOM_DTYPE_BF16: memcpy(&h, p, 2); return lm_bf16_to_f32(h);
    case LOOM_DTYPE_F32: memcpy(&f, p, 4); return f;
    case LOOM_DTYPE_F64: memcpy(&d, p, 8); return d;
    case LOOM_DTYPE_C64: memcpy(&f, p + 4 * part, 4); return f;
    case LOOM_DTYPE_C128: memcpy(&d, p + 8 * part, 8); return d;
    default: return 0;
  }
}

static void int_str(lm_dtype t, const uint8_t *p, char *buf) {
  int64_t s = 0;
  uint64_t u = 0;
  switch (t) {
    case LOOM_DTYPE_S8: s = (int8_t)p[0]; break;
    case LOOM_DTYPE_S16: { int16_t v; memcpy(&v, p, 2); s = v; break; }
    case LOOM_DTYPE_S32: { int32_t v; memcpy(&v, p, 4); s = v; break; }
    case LOOM_DTYPE_S64: memcpy(&s, p, 8); break;
    case LOOM_DTYPE_U8: u = p[0]; break;
    case LOOM_DTYPE_U16: { uint16_t v; memcpy(&v, p, 2); u = v; break; }
    case LOOM_DTYPE_U32: { uint32_t v; memcpy(&v, p, 4); u = v; break; }
    case LOOM_DTYPE_U64: memcpy(&u, p, 8); break;
    default: break;
  }
  if (lm_dtype_is_uint(t)) snprintf(buf, ELEM_MAX, "%llu", (unsigned long long)u);
  else snprintf(buf, ELEM_MAX, "%lld", (long long)s);
}

/* The shortest decimal form that reads back as v in the type's precision (at most 8 fractional
 * digits in positional form), numpy's default. sci: scientific notation. */
static void float_str(double v, lm_dtype t, bool sci, char *buf) {
  if (isnan(v)) { strcpy(buf, "nan"); return; }
  if (isinf(v)) { strcpy(buf, v < 0 ? "-inf" : "inf"); return; }
  int maxdig = t == LOOM_DTYPE_F64 || t == LOOM_DTYPE_C128 ? 17 : t == LOOM_DTYPE_F32 || t == LOOM_DTYPE_C64 ? 9 : 5;
  if (sci) {
    int k;
    for (k = 0; k < maxdig; k++) {
      snprintf(buf, ELEM_MAX, "%.*e", k, v);
      double back = strtod(buf, NULL);
      if (maxdig == 9 ? (float)back == (float)v : maxdig == 5 ? fabs(back - v) <= fabs(v) * 1e-3 : back == v) break;
    }
    if (k > 8) snprintf(buf, ELEM_MAX, "%.8e", v);
    /* numpy writes the exponent with at least two digits and a mantissa point: 1.e+20 */
    char *e = strchr(buf, 'e');
    if (e && !strchr(buf, '.')) {
      memmove(e + 1, e, strlen(e) + 1);
      *e = '.';
    }
    return;
  }
  int k;
  for (k = 1; k <= maxdig; k++) {
    snprintf(buf, ELEM_MAX, "%.*g", k, v);
    double back = strtod(buf, NULL);
    if (maxdig == 9 ? (float)back == (float)v : maxdig == 5 ? fabs(back - v) <= fabs(v) * 1e-3 : back == v) break;
  }
  char tmp[ELEM_MAX];
  snprintf(tmp, sizeof tmp, "%.*f", 8, v);
  /* positional with the digits that identify it, capped at 8 fractional digits */
  if (strchr(buf, 'e') || strlen(buf) > strlen(tmp)) {
    snprintf(buf, ELEM_MAX, "%s", tmp);
    size_t n = strlen(buf);
    while (n > 0 && buf[n - 1] == '0') buf[--n] = 0;
  }
  if (!strchr(buf, '.')) strcat(buf, ".");
  if (!strcmp(buf, "-0.") && v == 0 && !signbit(v)) strcpy(buf, "0.");
}

typedef struct fmt {
  lm_dtype t;
  size_t esize;
  bool sci;
  int left, right;           /* float columns: widths left of and from the '.' on */
  int width;                 /* common width */
} fmt;

static void elem_raw(const fmt *F, const uint8_t *p, char *buf) {
  if (F->t == LOOM_DTYPE_PRED) strcpy(buf, p[0] ? "True" : "False");
  else if (lm_dtype_is_complex(F->t)) {
    char re[ELEM_MAX], im[ELEM_MAX];
    float_str(load_real(F->t, p, 0), F->t, F->sci, re);
    float_str(load_real(F->t, p, 1), F->t, F->sci, im);
    snprintf(buf, ELEM_MAX, "%.30s%s%.30sj", re, im[0] == '-' ? "" : "+", im);
  } else if (is_float(F->t)) float_str(load_real(F->t, p, 0), F->t, F->sci, buf);
  else int_str(F->t, p, buf);
}

static void elem(const fmt *F, const uint8_t *p, char *out) {
  char raw[ELEM_MAX];
  elem_raw(F, p, raw);
  if (is_float(F->t) && !lm_dtype_is_complex(F->t) && !F->sci) {
    const char *dot = strchr(raw, '.');
    int l = dot ? (int)(dot - raw) : (int)strlen(raw), r = dot ? (int)strlen(dot) : 0;
    snprintf(out, 2 * ELEM_MAX, "%*s%s%*s", F->left - l, "", raw, F->right - r, "");
  } else {
    snprintf(out, 2 * ELEM_MAX, "%*s", F->width, raw);
  }
}

/* Is index i of a dimension of size n shown (summarized arrays show the edges only)? */
static bool shown(bool sum, int64_t n, int64_t i) { return !sum || n <= 2 * EDGE_ITEMS || i < EDGE_ITEMS || i >= n - EDGE_ITEMS; }

static void measure(fmt *F, int rank, const int64_t *dims, const uint8_t *data, bool sum, int d, size_t off,
                    const size_t *stride) {
  if (d == rank) {
    char raw[ELEM_MAX];
    elem_raw(F, data + off * F->esize, raw);
    int len = (int)strlen(raw);
    const char *dot = strchr(raw, '.');
    int l = dot ? (int)(dot - raw) : len, r = dot ? (int)strlen(dot) : 0;
    if (l > F->left) F->left = l;
    if (r > F->right) F->right = r;
    if (len > F->width) F->width = len;
    return;
  }
  for (int64_t i = 0; i < dims[d]; i++) {
    if (!shown(sum, dims[d], i)) {
      i = dims[d] - EDGE_ITEMS - 1;
      continue;
    }
    measure(F, rank, dims, data, sum, d + 1, off + (size_t)i * stride[d], stride);
  }
}

typedef struct out {
  FILE *f;
  int col;
} out;

static void put(out *o, const char *s) {
  fputs(s, o->f);
  const char *nl = strrchr(s, '\n');
  o->col = nl ? (int)strlen(nl + 1) : o->col + (int)strlen(s);
}

static void emit(out *o, const fmt *F, int rank, const int64_t *dims, const uint8_t *data, bool sum, int d,
                 size_t off, const size_t *stride) {
  put(o, "[");
  if (d == rank - 1) {
    int ew = is_float(F->t) && !lm_dtype_is_complex(F->t) && !F->sci ? F->left + F->right : F->width;
    for (int64_t i = 0; i < dims[d]; i++) {
      char s[2 * ELEM_MAX];
      if (!shown(sum, dims[d], i)) {
        snprintf(s, sizeof s, "...");
        i = dims[d] - EDGE_ITEMS - 1;
      } else {
        elem(F, data + (off + (size_t)i * stride[d]) * F->esize, s);
      }
      if (i > 0 || !strcmp(s, "...")) {
        if (o->col + 1 + ew + 1 > LINE_WIDTH) { /* wrap, aligned under the first element */
          fputs("\n", o->f);
          fprintf(o->f, "%*s", d + 1, "");
          o->col = d + 1;
        } else if (o->col > d + 1) {
          put(o, " ");
        }
      }
      put(o, s);
    }
  } else {
    for (int64_t i = 0; i < dims[d]; i++) {
      if (i > 0) {
        put(o, "\n");
        for (int k = 0; k < rank - d - 2; k++) put(o, "\n"); /* blank lines between blocks */
        fprintf(o->f, "%*s", d + 1, "");
        o->col = d + 1;
      }
      if (!shown(sum, dims[d], i)) {
        put(o, "...");
        i = dims[d] - EDGE_ITEMS - 1;
        continue;
      }
      emit(o, F, rank, dims, data, sum, d + 1, off + (size_t)i * stride[d], stride);
    }
  }
  put(o, "]");
}

static bool use_sci(lm_dtype t, int rank, const int64_t *dims, const uint8_t *data, size_t esize, size_t n) {
  if (!is_float(t)) return false;
  double maxv = 0, minv = INFINITY;
  for (size_t i = 0; i < n; i++)
    for (int part = 0; part < (lm_dtype_is_complex(t) ? 2 : 1); part++) {
      double v = fabs(load_real(t, data + i * esize, part));
      if (!isfinite(v) || v == 0) continue;
      if (v > maxv) maxv = v;
      if (v < minv) minv = v;
    }
  (void)rank, (void)dims;
  if (minv == INFINITY) return false; /* all zero or non-finite */
  return maxv >= 1e8 || minv < 1e-4 || maxv / minv > 1e3; /* numpy's rule */
}

void nd_print(FILE *f, lm_dtype t, int rank, const int64_t *dims, const void *data) {
  size_t esize = lm_dtype_size(t), n = 1;
  for (int d = 0; d < rank; d++) n *= (size_t)dims[d];
  fmt F = {.t = t, .esize = esize};
  F.sci = use_sci(t, rank, dims, data, esize, n);
  if (rank == 0) {
    char s[ELEM_MAX];
    elem_raw(&F, data, s);
    fputs(s, f);
    return;
  }
  size_t stride[16];
  size_t s = 1;
  for (int d = rank - 1; d >= 0; d--) {
    stride[d] = s;
    s *= (size_t)dims[d];
  }
  bool sum = n > SUMMARY_THRESHOLD;
  if (n == 0) {
    fputs("[]", f);
    return;
  }
  measure(&F, rank, dims, data, sum, 0, 0, stride);
  if (is_float(t) && !lm_dtype_is_complex(t) && !F.sci) F.width = F.left + F.right;
  out o = {.f = f, .col = 0};
  emit(&o, &F, rank, dims, data, sum, 0, 0, stride);
}

static void json_num(FILE *f, lm_dtype t, const uint8_t *p) {
  char buf[ELEM_MAX];
  if (t == LOOM_DTYPE_PRED) {
    fputs(p[0] ? "true" : "false", f);
  } else if (lm_dtype_is_complex(t) || is_float(t)) {
    int parts = lm_dtype_is_complex(t) ? 2 : 1;
    if (parts == 2) fputc('[', f);
    for (int k = 0; k < parts; k++) {
      double v = load_real(t, p, k);
      if (k) fputc(',', f);
      if (isnan(v)) fputs("\"nan\"", f);
      else if (isinf(v)) fputs(v < 0 ? "\"-inf\"" : "\"inf\"", f);
      else fprintf(f, "%.17g", v);
    }
    if (parts == 2) fputc(']', f);
  } else {
    int_str(t, p, buf);
    fputs(buf, f);
  }
}

static void json_rec(FILE *f, lm_dtype t, int rank, const int64_t *dims, const uint8_t *data, int d, size_t *off) {
  if (d == rank) {
    json_num(f, t, data + *off * lm_dtype_size(t));
    (*off)++;
    return;
  }
  fputc('[', f);
  for (int64_t i = 0; i < dims[d]; i++) {
    if (i) fputc(',', f);
    json_rec(f, t, rank, dims, data, d + 1, off);
  }
  fputc(']', f);
}

void nd_print_json(FILE *f, lm_dtype t, int rank, const int64_t *dims, const void *data) {
  size_t off = 0;
  json_rec(f, t, rank, dims, data, 0, &off);
}
