/* .npy reading and writing (see npy.h). Layout of a file:
 *   "\x93NUMPY" | major u8 | minor u8 | header length (u16 LE for 1.0, u32 LE for 2.0/3.0) |
 *   header: a Python dict literal {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
 *   padded with spaces and ended by '\n' so the data starts at a multiple of 64 | the data. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/npy.h"

static const char *skip_ws(const char *p, const char *e) {
  while (p < e && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
  return p;
}

/* Finds the value following 'key': in the header text; NULL if absent. */
static const char *find_key(const char *h, const char *e, const char *key) {
  size_t kl = strlen(key);
  for (const char *p = h; p + kl + 2 <= e; p++) {
    if ((*p == '\'' || *p == '"') && p + kl + 1 < e && memcmp(p + 1, key, kl) == 0 && p[kl + 1] == *p) {
      const char *q = skip_ws(p + kl + 2, e);
      if (q < e && *q == ':') {
        q = skip_ws(q + 1, e);
        return q < e ? q : NULL; /* callers may read *q */
      }
    }
  }
  return NULL;
}

int lm_npy_parse(const void *buf, size_t len, lm_dtype hint, lm_npy *out, lm_err *err) {
  memset(out, 0, sizeof *out);
  const unsigned char *b = buf;
  if (len < 10 || memcmp(b, "\x93NUMPY", 6) != 0) return lm_errf(err, LOOM_PARSE, "not an .npy file (bad magic)");
  unsigned major = b[6];
  size_t hlen, hoff;
  if (major == 1) {
    hlen = (size_t)b[8] | ((size_t)b[9] << 8);
    hoff = 10;
  } else if (major == 2 || major == 3) {
    if (len < 12) return lm_errf(err, LOOM_PARSE, ".npy file truncated");
    hlen = (size_t)b[8] | ((size_t)b[9] << 8) | ((size_t)b[10] << 16) | ((size_t)b[11] << 24);
    hoff = 12;
  } else {
    return lm_errf(err, LOOM_UNSUPPORTED, ".npy format version %u is not supported", major);
  }
  if (hlen > len - hoff) return lm_errf(err, LOOM_PARSE, ".npy header runs past the end of the file");
  const char *h = (const char *)b + hoff, *he = h + hlen;
  /* descr */
  const char *d = find_key(h, he, "descr");
  if (!d || d >= he || (*d != '\'' && *d != '"')) return lm_errf(err, LOOM_PARSE, ".npy header has no 'descr' string");
  char q = *d++;
  const char *de = memchr(d, q, (size_t)(he - d));
  if (!de || de - d > 31) return lm_errf(err, LOOM_PARSE, ".npy header: bad 'descr'");
  char descr[32];
  memcpy(descr, d, (size_t)(de - d));
  descr[de - d] = 0;
  lm_dtype dt = lm_dtype_from_npy(descr);
  if (dt == LOOM_DTYPE_INVALID && (!strcmp(descr, "<V2") || !strcmp(descr, "|V2")) && hint == LOOM_DTYPE_BF16)
    dt = LOOM_DTYPE_BF16;
  if (dt == LOOM_DTYPE_INVALID)
    return lm_errf(err, LOOM_UNSUPPORTED, ".npy dtype '%s' is not supported%s", descr,
                   descr[0] == '>' ? " (big-endian)" : (!strcmp(descr, "<V2") ? " (a raw 2-byte type: bfloat16 needs a known bf16 argument)" : ""));
  /* fortran_order */
  const char *fo = find_key(h, he, "fortran_order");
  if (!fo) return lm_errf(err, LOOM_PARSE, ".npy header has no 'fortran_order'");
  if ((size_t)(he - fo) >= 4 && !memcmp(fo, "True", 4))
    return lm_errf(err, LOOM_UNSUPPORTED, ".npy arrays in Fortran order are not supported (save a C-contiguous array)");
  if ((size_t)(he - fo) < 5 || memcmp(fo, "False", 5)) return lm_errf(err, LOOM_PARSE, ".npy header: bad 'fortran_order'");
  /* shape */
  const char *s = find_key(h, he, "shape");
  if (!s || *s != '(') return lm_errf(err, LOOM_PARSE, ".npy header has no 'shape' tuple");
  s++;
  int rank = 0;
  size_t numel = 1;
  for (;;) {
    s = skip_ws(s, he);
    if (s < he && *s == ')') break;
    if (s >= he || *s < '0' || *s > '9') return lm_errf(err, LOOM_PARSE, ".npy header: bad 'shape'");
    uint64_t v = 0;
    while (s < he && *s >= '0' && *s <= '9') {
      if (v > ((uint64_t)1 << 50)) return lm_errf(err, LOOM_PARSE, ".npy header: dimension too large");
      v = v * 10 + (uint64_t)(*s++ - '0');
    }
    if (rank >= LM_NPY_MAX_RANK) return lm_errf(err, LOOM_UNSUPPORTED, ".npy array of rank over %d", LM_NPY_MAX_RANK);
    out->dims[rank++] = (int64_t)v;
    if (lm_mul_size(numel, (size_t)v, &numel)) return lm_errf(err, LOOM_PARSE, ".npy shape too large");
    s = skip_ws(s, he);
    if (s < he && *s == ',') s++;
  }
  size_t nbytes;
  if (lm_mul_size(numel, lm_dtype_size(dt), &nbytes)) return lm_errf(err, LOOM_PARSE, ".npy array too large");
  size_t doff = hoff + hlen;
  if (len - doff < nbytes)
    return lm_errf(err, LOOM_PARSE, ".npy data truncated: %zu bytes for %zu elements of %s", len - doff, numel, descr);
  out->dtype = dt;
  out->rank = rank;
  out->nbytes = nbytes;
  if (nbytes) {
    out->data = malloc(nbytes);
    if (!out->data) return lm_errf(err, LOOM_NO_MEMORY, "out of host memory reading .npy data");
    memcpy(out->data, b + doff, nbytes);
    if (dt == LOOM_DTYPE_PRED) /* numpy writes 0/1, but keep the invariant whatever the file says */
      for (size_t i = 0; i < nbytes; i++) ((unsigned char *)out->data)[i] = ((unsigned char *)out->data)[i] != 0;
  }
  return 0;
}

int lm_npy_read(const char *path, lm_dtype hint, size_t max_bytes, lm_npy *out, lm_err *err) {
  memset(out, 0, sizeof *out);
  FILE *f = fopen(path, "rb");
  if (!f) return lm_errf(err, LOOM_IO, "cannot open %s", path);
  int rc = 0;
  long sz = -1;
  if (fseek(f, 0, SEEK_END) == 0) sz = ftell(f);
  if (sz < 0 || fseek(f, 0, SEEK_SET) != 0) rc = lm_errf(err, LOOM_IO, "cannot read %s", path);
  else if (max_bytes && (size_t)sz > max_bytes) rc = lm_errf(err, LOOM_INVALID_ARGUMENT, "%s is larger than %zu bytes", path, max_bytes);
  unsigned char *buf = NULL;
  if (rc == 0) {
    buf = malloc(sz ? (size_t)sz : 1);
    if (!buf) rc = lm_errf(err, LOOM_NO_MEMORY, "out of host memory reading %s", path);
    else if (fread(buf, 1, (size_t)sz, f) != (size_t)sz) rc = lm_errf(err, LOOM_IO, "error reading %s", path);
  }
  fclose(f);
  if (rc == 0) {
    rc = lm_npy_parse(buf, (size_t)sz, hint, out, err);
    if (rc < 0) lm_err_prefix(err, "%s", path);
  }
  free(buf);
  return rc;
}

int lm_npy_write(const char *path, lm_dtype dtype, int rank, const int64_t *dims, const void *data, size_t nbytes,
                 lm_err *err) {
  if (!lm_dtype_valid(dtype)) return lm_errf(err, LOOM_INVALID_ARGUMENT, "invalid dtype");
  if (rank < 0 || rank > LM_NPY_MAX_RANK) return lm_errf(err, LOOM_INVALID_ARGUMENT, "rank %d", rank);
  char hdr[1024];
  int n = snprintf(hdr, sizeof hdr, "{'descr': '%s', 'fortran_order': False, 'shape': (", lm_dtype_npy(dtype));
  for (int i = 0; i < rank; i++)
    n += snprintf(hdr + n, sizeof hdr - (size_t)n, "%lld%s", (long long)dims[i], rank == 1 ? "," : (i + 1 < rank ? ", " : ""));
  n += snprintf(hdr + n, sizeof hdr - (size_t)n, "), }");
  /* pad with spaces so that 10 + header + '\n' is a multiple of 64 */
  size_t total = 10 + (size_t)n + 1, pad = (64 - total % 64) % 64;
  if ((size_t)n + pad + 1 >= sizeof hdr) return lm_errf(err, LOOM_INVALID_ARGUMENT, ".npy header too long");
  memset(hdr + n, ' ', pad);
  hdr[n + pad] = '\n';
  size_t hlen = (size_t)n + pad + 1;
  unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hlen & 0xff), (unsigned char)(hlen >> 8)};
  FILE *f = fopen(path, "wb");
  if (!f) return lm_errf(err, LOOM_IO, "cannot create %s", path);
  bool ok = fwrite(pre, 1, 10, f) == 10 && fwrite(hdr, 1, hlen, f) == hlen && (nbytes == 0 || fwrite(data, 1, nbytes, f) == nbytes);
  if (fclose(f) != 0) ok = false;
  return ok ? 0 : lm_errf(err, LOOM_IO, "error writing %s", path);
}

void lm_npy_free(lm_npy *a) {
  if (!a) return;
  free(a->data);
  a->data = NULL;
  a->nbytes = 0;
}
