/* Dense elements: `dense<...> : tensor<...>` in every spelling MLIR prints: nested literal lists,
 * splats (one literal for all elements), hex blobs `"0x..."` (little-endian, the dtype's layout;
 * a blob of exactly one element is a splat), booleans, complex `(re, im)`, integer literals in
 * decimal or hex, and floats as decimals, hex bit patterns (0x7FC00000) or inf/nan.
 * The result is unpacked to the dtype's natural layout (ir.h: i1 as one byte 0/1, f16/bf16 as
 * uint16 bits, complex as (re, im) pairs), splats expanded, capped by max_const bytes. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "common/half.h"
#include "hlo/parse_int.h"

/* A scalar literal as written: sign plus either an integer magnitude, a hex bit pattern, a
 * decimal float text or a named special. */
typedef struct num_lit {
  bool neg;
  enum { NUM_INT, NUM_HEX, NUM_FLOAT, NUM_INF, NUM_NAN, NUM_BOOL } kind;
  uint64_t u;       /* INT magnitude, HEX bits, BOOL value */
  double d;         /* FLOAT value as double (strtod) */
  const char *s;    /* FLOAT text, for exact f32 rounding */
  size_t n;
  lm_tok tok;       /* for messages */
} num_lit;

static int parse_u64(lm_parser *p, const lm_tok *t, bool hex, uint64_t *out) {
  uint64_t v = 0;
  const char *s = t->s + (hex ? 2 : 0), *e = t->s + t->n;
  for (; s < e; s++) {
    unsigned c = (unsigned char)*s, dgt = c <= '9' ? c - '0' : (c | 32) - 'a' + 10;
    uint64_t base = hex ? 16 : 10;
    if (v > (UINT64_MAX - dgt) / base) return lm_p_errf(p, t, LOOM_PARSE, "integer literal out of range");
    v = v * base + dgt;
  }
  *out = v;
  return 0;
}

static int read_num(lm_parser *p, num_lit *L) {
  memset(L, 0, sizeof *L);
  L->tok = p->tok;
  if (lm_p_eat(p, LM_T_MINUS)) L->neg = true;
  else lm_p_eat(p, LM_T_PLUS);
  lm_tok t = p->tok;
  if (t.k == LM_T_INT) {
    bool hex = t.n > 2 && t.s[0] == '0' && (t.s[1] == 'x' || t.s[1] == 'X');
    L->kind = hex ? NUM_HEX : NUM_INT;
    LM_TRY(parse_u64(p, &t, hex, &L->u));
    if (hex && L->neg) return lm_p_errf(p, &t, LOOM_PARSE, "a hex literal cannot be negative");
  } else if (t.k == LM_T_FLOAT) {
    char buf[512];
    if (t.n >= sizeof buf) return lm_p_errf(p, &t, LOOM_PARSE, "float literal too long");
    memcpy(buf, t.s, t.n);
    buf[t.n] = 0;
    L->kind = NUM_FLOAT;
    L->d = strtod(buf, NULL);
    L->s = t.s;
    L->n = t.n;
  } else if (!L->neg && (lm_p_is_id(p, "true") || lm_p_is_id(p, "false"))) {
    L->kind = NUM_BOOL;
    L->u = lm_p_is_id(p, "true");
  } else if (lm_p_is_id(p, "inf")) {
    L->kind = NUM_INF;
  } else if (lm_p_is_id(p, "nan")) {
    L->kind = NUM_NAN;
  } else {
    return lm_p_expected(p, "a number");
  }
  lm_p_next(p);
  return 0;
}

static float lit_to_f32(const num_lit *L) {
  if (L->kind == NUM_INF) return L->neg ? -INFINITY : INFINITY;
  if (L->kind == NUM_NAN) return L->neg ? -NAN : NAN;
  if (L->kind == NUM_INT) return L->neg ? -(float)L->u : (float)L->u;
  char buf[512];
  memcpy(buf, L->s, L->n);
  buf[L->n] = 0;
  float f = strtof(buf, NULL); /* rounds the decimal once, straight to f32 */
  return L->neg ? -f : f;
}

static double lit_to_f64(const num_lit *L) {
  if (L->kind == NUM_INF) return L->neg ? -INFINITY : INFINITY;
  if (L->kind == NUM_NAN) return L->neg ? -NAN : NAN;
  if (L->kind == NUM_INT) return L->neg ? -(double)L->u : (double)L->u;
  return L->neg ? -L->d : L->d;
}

/* Stores a real (non-complex) literal as one element of dtype d at dst. */
static int store_real(lm_parser *p, const num_lit *L, lm_dtype d, unsigned char *dst) {
  size_t sz = lm_dtype_size(d);
  if (lm_dtype_is_pred(d)) {
    if (L->kind == NUM_BOOL || (L->kind == NUM_INT && !L->neg && L->u <= 1) || (L->kind == NUM_HEX && L->u <= 1)) {
      *dst = (unsigned char)(L->u != 0);
      return 0;
    }
    return lm_p_errf(p, &L->tok, LOOM_PARSE, "expected true, false, 0 or 1 for an i1 element");
  }
  if (lm_dtype_is_int(d)) {
    int bits = (int)(8 * sz);
    uint64_t v;
    if (L->kind == NUM_HEX || (L->kind == NUM_BOOL)) {
      if (bits < 64 && L->u >> bits) return lm_p_errf(p, &L->tok, LOOM_PARSE, "integer literal does not fit %s", lm_dtype_name(d));
      v = L->u;
    } else if (L->kind == NUM_INT) {
      bool sgn = lm_dtype_is_sint(d);
      uint64_t lim = sgn ? ((uint64_t)1 << (bits - 1)) - (L->neg ? 0 : 1) : (bits == 64 ? UINT64_MAX : ((uint64_t)1 << bits) - 1);
      if ((!sgn && L->neg && L->u != 0) || L->u > lim)
        return lm_p_errf(p, &L->tok, LOOM_PARSE, "integer literal does not fit %s", lm_dtype_name(d));
      v = L->neg ? (uint64_t)0 - L->u : L->u;
    } else {
      return lm_p_errf(p, &L->tok, LOOM_PARSE, "expected an integer for a %s element", lm_dtype_name(d));
    }
    memcpy(dst, &v, sz); /* little-endian host: the low bytes */
    return 0;
  }
  if (lm_dtype_is_float(d)) {
    if (L->kind == NUM_BOOL) return lm_p_errf(p, &L->tok, LOOM_PARSE, "expected a number for a %s element", lm_dtype_name(d));
    if (L->kind == NUM_HEX) {
      if (sz < 8 && L->u >> (8 * sz)) return lm_p_errf(p, &L->tok, LOOM_PARSE, "hex literal wider than %s", lm_dtype_name(d));
      memcpy(dst, &L->u, sz);
      return 0;
    }
    if (d == LOOM_DTYPE_F32) {
      float f = lit_to_f32(L);
      memcpy(dst, &f, 4);
    } else if (d == LOOM_DTYPE_F64) {
      double f = lit_to_f64(L);
      memcpy(dst, &f, 8);
    } else {
      double f = lit_to_f64(L);
      uint16_t h = d == LOOM_DTYPE_F16 ? lm_f64_to_f16(f) : lm_f64_to_bf16(f);
      memcpy(dst, &h, 2);
    }
    return 0;
  }
  return lm_p_errf(p, &L->tok, LOOM_UNSUPPORTED, "constants of type %s are not supported", lm_dtype_name(d));
}

/* One element of dtype d: a number, a boolean, or `(re, im)` for complex types. */
static int parse_elem(lm_parser *p, lm_dtype d, unsigned char *dst) {
  num_lit L;
  if (lm_dtype_is_complex(d)) {
    lm_dtype part = d == LOOM_DTYPE_C64 ? LOOM_DTYPE_F32 : LOOM_DTYPE_F64;
    size_t half = lm_dtype_size(part);
    LM_TRY(lm_p_expect(p, LM_T_LPAREN, "'(' starting a complex element (re, im)"));
    LM_TRY(read_num(p, &L));
    LM_TRY(store_real(p, &L, part, dst));
    LM_TRY(lm_p_expect(p, LM_T_COMMA, "',' in a complex element (re, im)"));
    LM_TRY(read_num(p, &L));
    LM_TRY(store_real(p, &L, part, dst + half));
    return lm_p_expect(p, LM_T_RPAREN, "')' closing a complex element");
  }
  LM_TRY(read_num(p, &L));
  return store_real(p, &L, d, dst);
}

typedef struct dense_ctx {
  const lm_type *t;
  size_t esize;
  unsigned char *data;
  int64_t next;  /* next element index to write (row-major) */
} dense_ctx;

/* A nested list at dimension `dim`: exactly dims[dim] items, each a list of the next level or,
 * at the innermost level, an element. */
static int parse_list(lm_parser *p, dense_ctx *c, int dim) {
  LM_TRY(lm_p_enter(p));
  lm_tok open = p->tok;
  int rc = lm_p_expect(p, LM_T_LBRACK, "'['");
  int64_t count = 0, want = c->t->dims[dim];
  while (rc == 0 && !lm_p_is(p, LM_T_RBRACK)) {
    if (count >= want) {
      rc = lm_p_errf(p, NULL, LOOM_PARSE, "too many elements in dimension %d of the constant (tensor dimension is %lld)",
                     dim, (long long)want);
      break;
    }
    if (dim + 1 < c->t->rank) {
      rc = parse_list(p, c, dim + 1);
    } else {
      rc = parse_elem(p, (lm_dtype)c->t->dtype, c->data + (size_t)c->next * c->esize);
      c->next++;
    }
    count++;
    if (rc == 0 && !lm_p_eat(p, LM_T_COMMA)) break;
  }
  if (rc == 0) rc = lm_p_expect(p, LM_T_RBRACK, "',' or ']' in a constant");
  if (rc == 0 && count != want)
    rc = lm_p_errf(p, &open, LOOM_PARSE, "constant has %lld elements in dimension %d where its type has %lld",
                   (long long)count, dim, (long long)want);
  lm_p_leave(p);
  return rc;
}

static int parse_hex_blob(lm_parser *p, dense_ctx *c, size_t nbytes, int64_t numel) {
  lm_tok t = p->tok;
  if (t.n < 2 || t.s[0] != '0' || (t.s[1] != 'x' && t.s[1] != 'X'))
    return lm_p_errf(p, &t, LOOM_PARSE, "expected a hex string \"0x...\" in dense<...>");
  size_t nhex = t.n - 2;
  if (nhex % 2) return lm_p_errf(p, &t, LOOM_PARSE, "hex constant has an odd number of digits");
  size_t got = nhex / 2;
  bool splat = got == c->esize && got != nbytes;
  if (got != nbytes && !splat)
    return lm_p_errf(p, &t, LOOM_PARSE, "hex constant has %zu bytes; %zu are needed (or %zu for a splat)", got, nbytes,
                     c->esize);
  unsigned char *dst = c->data;
  size_t n = splat ? c->esize : nbytes;
  for (size_t i = 0; i < n; i++) {
    int hi = lm_p_hexval((unsigned char)t.s[2 + 2 * i]), lo = lm_p_hexval((unsigned char)t.s[3 + 2 * i]);
    if (hi < 0 || lo < 0) return lm_p_errf(p, &t, LOOM_PARSE, "bad hex digit in constant");
    dst[i] = (unsigned char)(hi * 16 + lo);
  }
  if (lm_dtype_is_pred((lm_dtype)c->t->dtype))
    for (size_t i = 0; i < n; i++) dst[i] = dst[i] != 0;
  if (splat)
    for (int64_t k = 1; k < numel; k++) memcpy(c->data + (size_t)k * c->esize, c->data, c->esize);
  lm_p_next(p);
  return 0;
}

/* Skips the body of dense<...> to find its type: tokens up to the matching '>'. */
static int skip_angle_body(lm_parser *p) {
  int depth = 0;
  for (;;) {
    switch (p->tok.k) {
      case LM_T_EOF: return lm_p_expected(p, "'>' closing dense<...>");
      case LM_T_LT: depth++; break;
      case LM_T_GT:
        if (depth == 0) return 0;
        depth--;
        break;
      case LM_T_BAD: return lm_p_expected(p, "a constant");
      default: break;
    }
    lm_p_next(p);
  }
}

int lm_p_dense(lm_parser *p, lm_attr *out) {
  lm_tok kw = p->tok;
  lm_p_next(p); /* `dense` */
  LM_TRY(lm_p_expect(p, LM_T_LT, "'<' after dense"));
  lm_pmark body = lm_p_mark(p);
  LM_TRY(skip_angle_body(p));
  lm_p_next(p); /* '>' */
  LM_TRY(lm_p_expect(p, LM_T_COLON, "':' and the type after dense<...>"));
  lm_tok ttok = p->tok;
  lm_type *t = lm_p_alloc(p, sizeof *t);
  if (!t) return p->err->code;
  p->index_ok = true;
  int trc = lm_p_type(p, t);
  p->index_ok = false;
  LM_TRY(trc);
  lm_pmark after = lm_p_mark(p);
  if (t->kind != LM_TYPE_TENSOR) return lm_p_errf(p, &ttok, LOOM_PARSE, "dense<...> needs a tensor type");
  int64_t numel = lm_type_numel(t);
  if (numel < 0) return lm_p_errf(p, &ttok, LOOM_UNSUPPORTED, "dense<...> with a dynamic or too large shape");
  size_t esize = lm_dtype_size((lm_dtype)t->dtype), nbytes;
  if (lm_mul_size((size_t)numel, esize, &nbytes) || nbytes > p->max_const)
    return lm_p_errf(p, &kw, LOOM_UNSUPPORTED, "constant of %lld elements is over the %zu-byte limit", (long long)numel,
                     p->max_const);
  dense_ctx c = {t, esize, NULL, 0};
  c.data = lm_p_alloc(p, nbytes ? nbytes : 1);
  if (!c.data) return p->err->code;
  lm_p_reset(p, &body);
  if (lm_p_is(p, LM_T_STR)) {
    LM_TRY(parse_hex_blob(p, &c, nbytes, numel));
  } else if (lm_p_is(p, LM_T_LBRACK) && t->rank > 0) {
    LM_TRY(parse_list(p, &c, 0));
  } else if (lm_p_is(p, LM_T_LBRACK) && t->rank == 0) {
    return lm_p_errf(p, NULL, LOOM_PARSE, "a list constant for a rank-0 tensor");
  } else if (lm_p_is(p, LM_T_GT)) {
    if (numel != 0) return lm_p_errf(p, NULL, LOOM_PARSE, "empty dense<> for a tensor of %lld elements", (long long)numel);
  } else {
    /* splat: one element for all */
    unsigned char one[16];
    LM_TRY(parse_elem(p, (lm_dtype)t->dtype, one));
    for (int64_t k = 0; k < numel; k++) memcpy(c.data + (size_t)k * esize, one, esize);
  }
  if (!lm_p_is(p, LM_T_GT)) return lm_p_expected(p, "'>' closing dense<...>");
  lm_p_reset(p, &after);
  memset(out, 0, sizeof *out);
  out->kind = LM_ATTR_DENSE;
  out->type = t;
  out->data = c.data;
  out->nbytes = nbytes;
  return 0;
}

/* `dense_resource<NAME> : tensor<...>`: a constant whose bytes live outside the text. The
 * caller's resolver supplies them (borrowed: the module lets go of them when freed); without
 * one the attribute stays unresolved, its name kept so that it prints back as it came. */
int lm_p_dense_resource(lm_parser *p, lm_attr *out) {
  lm_tok kw = p->tok;
  lm_p_next(p); /* `dense_resource` */
  LM_TRY(lm_p_expect(p, LM_T_LT, "'<' after dense_resource"));
  lm_tok nt = p->tok;
  if (!lm_p_is(p, LM_T_ID)) return lm_p_expected(p, "a resource name in dense_resource<...>");
  const char *name = lm_p_strndup(p, nt.s, nt.n);
  if (!name) return p->err->code;
  lm_p_next(p);
  LM_TRY(lm_p_expect(p, LM_T_GT, "'>' closing dense_resource<...>"));
  LM_TRY(lm_p_expect(p, LM_T_COLON, "':' and the type after dense_resource<...>"));
  lm_tok ttok = p->tok;
  lm_type *t = lm_p_alloc(p, sizeof *t);
  if (!t) return p->err->code;
  LM_TRY(lm_p_type(p, t));
  if (t->kind != LM_TYPE_TENSOR) return lm_p_errf(p, &ttok, LOOM_PARSE, "dense_resource<...> needs a tensor type");
  int64_t numel = lm_type_numel(t);
  size_t nbytes;
  if (numel < 0 || lm_mul_size((size_t)numel, lm_dtype_size((lm_dtype)t->dtype), &nbytes))
    return lm_p_errf(p, &ttok, LOOM_UNSUPPORTED, "dense_resource<...> with a dynamic or too large shape");
  memset(out, 0, sizeof *out);
  out->kind = LM_ATTR_DENSE;
  out->type = t;
  out->resource = name;
  if (!p->opts || !p->opts->resolve) return 0;
  lm_module_hold *h = calloc(1, sizeof *h);
  if (!h) return lm_p_errf(p, &kw, LOOM_NO_MEMORY, "out of host memory");
  const void *data = NULL;
  lm_err e;
  lm_err_clear(&e);
  if (p->opts->resolve(p->opts->resolve_ctx, name, nbytes, &data, &h->release, &h->arg, &e) < 0) {
    free(h);
    return lm_p_errf(p, &nt, e.code ? e.code : LOOM_NOT_FOUND, "dense_resource<%s>: %s", name, e.msg);
  }
  if (h->release) {
    h->next = p->m->holds;
    p->m->holds = h;
  } else {
    free(h);
  }
  out->data = (void *)data;
  out->nbytes = nbytes;
  return 0;
}

/* ---- scalar attributes: `1 : i64`, `0.5 : f32`, `0x7FC00000 : f32`, `-3` ---- */

int lm_p_int(lm_parser *p, int64_t *out) {
  num_lit L;
  lm_tok t = p->tok;
  LM_TRY(read_num(p, &L));
  if (L.kind != NUM_INT && L.kind != NUM_HEX) return lm_p_errf(p, &t, LOOM_PARSE, "expected an integer");
  if (L.kind == NUM_INT && L.u > (uint64_t)INT64_MAX + (L.neg ? 1 : 0))
    return lm_p_errf(p, &t, LOOM_PARSE, "integer literal out of range");
  *out = L.neg ? (int64_t)((uint64_t)0 - L.u) : (int64_t)L.u;
  return 0;
}

/* Reads a number attribute and its optional `: type` (parse_attrs.c calls this). */
int lm_p_number_attr(lm_parser *p, lm_attr *out) {
  num_lit L;
  memset(out, 0, sizeof *out);
  LM_TRY(read_num(p, &L));
  lm_type *ty = NULL;
  if (!p->bare_literals && lm_p_is(p, LM_T_COLON)) {
    lm_pmark mk = lm_p_mark(p);
    lm_p_next(p);
    if (lm_p_at_type(p)) {
      ty = lm_p_alloc(p, sizeof *ty);
      if (!ty) return p->err->code;
      LM_TRY(lm_p_type(p, ty));
    } else {
      lm_p_reset(p, &mk);
    }
  }
  out->type = ty;
  bool is_float_type = ty && ty->kind == LM_TYPE_TENSOR && (lm_dtype_is_float(ty->dtype) || lm_dtype_is_complex(ty->dtype));
  if (L.kind == NUM_FLOAT || L.kind == NUM_INF || L.kind == NUM_NAN || is_float_type) {
    out->kind = LM_ATTR_FLOAT;
    if (L.kind == NUM_HEX && ty) { /* bit pattern of the written float type */
      unsigned char b[8] = {0};
      lm_dtype d = (lm_dtype)ty->dtype;
      LM_TRY(store_real(p, &L, d, b));
      if (d == LOOM_DTYPE_F32) { float f; memcpy(&f, b, 4); out->f = f; }
      else if (d == LOOM_DTYPE_F64) memcpy(&out->f, b, 8);
      else if (d == LOOM_DTYPE_F16) { uint16_t h; memcpy(&h, b, 2); out->f = lm_f16_to_f64(h); }
      else { uint16_t h; memcpy(&h, b, 2); out->f = lm_bf16_to_f64(h); }
    } else {
      out->f = lit_to_f64(&L);
    }
    return 0;
  }
  if (L.kind == NUM_BOOL) {
    out->kind = LM_ATTR_BOOL;
    out->i = (int64_t)L.u;
    return 0;
  }
  if (L.kind == NUM_INT && L.u > (uint64_t)INT64_MAX + (L.neg ? 1 : 0) && !(ty && lm_dtype_is_uint(ty->dtype)))
    return lm_p_errf(p, &L.tok, LOOM_PARSE, "integer literal out of range");
  out->kind = LM_ATTR_INT;
  out->i = L.neg ? (int64_t)((uint64_t)0 - L.u) : (int64_t)L.u;
  return 0;
}
