/* Attributes into the normal form documented at the top of ir.h: scalars, strings, symbols,
 * arrays, dictionaries, `array<i64: ...>`, dense elements (parse_dense.c), enums
 * (`#stablehlo<comparison_direction GT>` -> ENUM "GT"), structured attributes
 * (`#stablehlo.gather<...>` -> STRUCT with INTS/INT fields), convolution dimension numbers, and
 * the Shardy attributes (`#sdy.sharding`, `#sdy.mesh`, `#sdy.sharding_per_value`). Unknown
 * dialect attributes are kept as a STRUCT holding their raw text in a `raw` field. */
#include <stdio.h>
#include <string.h>
#include "hlo/parse_int.h"


void lm_attr_struct(lm_attr *a, const char *name, lm_named_attr *fields, uint32_t n) {
  memset(a, 0, sizeof *a);
  a->kind = LM_ATTR_STRUCT;
  a->s = name;
  a->fields = fields;
  a->n = n;
}

int lm_p_add_attr(lm_parser *p, lm_named_attr **attrs, uint32_t *n, uint32_t *cap, const char *name,
                  const lm_attr *value) {
  lm_named_attr *na = lm_p_push(p, (void **)attrs, n, cap, sizeof **attrs);
  if (!na) return p->err->code;
  na->name = lm_p_strndup(p, name, strlen(name));
  if (!na->name) return p->err->code;
  na->value = *value;
  return 0;
}

static int add_field(lm_parser *p, lm_attr *st, uint32_t *cap, const char *name, const lm_attr *v) {
  return lm_p_add_attr(p, &st->fields, &st->n, cap, name, v);
}

static lm_attr mk_int(int64_t v) {
  lm_attr a;
  memset(&a, 0, sizeof a);
  a.kind = LM_ATTR_INT;
  a.i = v;
  return a;
}

int lm_p_int_list(lm_parser *p, lm_attr *out) {
  memset(out, 0, sizeof *out);
  out->kind = LM_ATTR_INTS;
  LM_TRY(lm_p_expect(p, LM_T_LBRACK, "'[' starting a list of integers"));
  uint32_t cap = 0;
  while (!lm_p_is(p, LM_T_RBRACK)) {
    int64_t *v = lm_p_push(p, (void **)&out->ints, &out->n, &cap, sizeof(int64_t));
    if (!v) return p->err->code;
    LM_TRY(lm_p_int(p, v));
    if (!lm_p_eat(p, LM_T_COMMA)) break;
  }
  if (!out->ints && !(out->ints = lm_p_array(p, 1, sizeof(int64_t)))) return p->err->code; /* never NULL */
  return lm_p_expect(p, LM_T_RBRACK, "',' or ']' in a list of integers");
}

/* ARRAY whose items are all INT (or BOOL) -> INTS; other arrays unchanged. */
static void ints_from_array(lm_attr *a) {
  if (a->kind != LM_ATTR_ARRAY) return;
  for (uint32_t i = 0; i < a->n; i++)
    if (a->items[i].kind != LM_ATTR_INT && a->items[i].kind != LM_ATTR_BOOL) return;
  int64_t *v = (int64_t *)(void *)a->items; /* reuse the storage: an lm_attr is larger than int64 */
  static int64_t empty[1];
  if (!v) v = empty; /* never NULL, even for [] (read-only: n is 0) */
  for (uint32_t i = 0; i < a->n; i++) v[i] = a->items[i].i;
  uint32_t n = a->n;
  memset(a, 0, sizeof *a);
  a->kind = LM_ATTR_INTS;
  a->n = n;
  a->ints = v;
}

/* `array<i64: 1, 2>` / `array<i1: true>` -> INTS; float arrays -> ARRAY of FLOAT. */
static int parse_array_attr(lm_parser *p, lm_attr *out) {
  lm_p_next(p); /* array */
  LM_TRY(lm_p_expect(p, LM_T_LT, "'<' after array"));
  lm_dtype d;
  LM_TRY(lm_p_elem_type(p, &d));
  memset(out, 0, sizeof *out);
  bool ints = lm_dtype_is_int(d) || lm_dtype_is_pred(d);
  out->kind = ints ? LM_ATTR_INTS : LM_ATTR_ARRAY;
  uint32_t cap = 0;
  if (lm_p_eat(p, LM_T_COLON)) {
    for (;;) {
      lm_attr v;
      lm_tok t = p->tok;
      LM_TRY(lm_p_number_attr(p, &v));
      if (ints) {
        if (v.kind != LM_ATTR_INT && v.kind != LM_ATTR_BOOL) return lm_p_errf(p, &t, LOOM_PARSE, "expected an integer");
        int64_t *slot = lm_p_push(p, (void **)&out->ints, &out->n, &cap, sizeof(int64_t));
        if (!slot) return p->err->code;
        *slot = v.i;
      } else {
        if (v.kind == LM_ATTR_INT) { v.kind = LM_ATTR_FLOAT; v.f = (double)v.i; }
        lm_attr *slot = lm_p_push(p, (void **)&out->items, &out->n, &cap, sizeof(lm_attr));
        if (!slot) return p->err->code;
        *slot = v;
      }
      if (!lm_p_eat(p, LM_T_COMMA)) break;
    }
  }
  return lm_p_expect(p, LM_T_GT, "'>' closing array<...>");
}

static int parse_list_attr(lm_parser *p, lm_attr *out) {
  memset(out, 0, sizeof *out);
  out->kind = LM_ATTR_ARRAY;
  lm_p_next(p); /* [ */
  uint32_t cap = 0;
  while (!lm_p_is(p, LM_T_RBRACK)) {
    lm_attr *it = lm_p_push(p, (void **)&out->items, &out->n, &cap, sizeof(lm_attr));
    if (!it) return p->err->code;
    if (lm_p_eat(p, LM_T_QUESTION)) *it = mk_int(LM_DYN_DIM); /* `?` in bounds lists */
    else LM_TRY(lm_p_attr(p, it));
    if (!lm_p_eat(p, LM_T_COMMA)) break;
  }
  return lm_p_expect(p, LM_T_RBRACK, "',' or ']' in a list");
}

int lm_p_attr_dict(lm_parser *p, lm_named_attr **attrs, uint32_t *n, uint32_t *cap) {
  LM_TRY(lm_p_expect(p, LM_T_LBRACE, "'{'"));
  LM_TRY(lm_p_enter(p));
  int rc = 0;
  while (rc == 0 && !lm_p_is(p, LM_T_RBRACE)) {
    lm_tok key = p->tok;
    const char *name;
    uint32_t len;
    if (key.k == LM_T_ID) {
      name = lm_p_strndup(p, key.s, key.n);
    } else if (key.k == LM_T_STR) {
      name = lm_p_decode_str(p, &key, &len);
    } else {
      rc = lm_p_expected(p, "an attribute name");
      break;
    }
    if (!name) { rc = p->err->code; break; }
    lm_p_next(p);
    lm_named_attr *na = lm_p_push(p, (void **)attrs, n, cap, sizeof **attrs);
    if (!na) { rc = p->err->code; break; }
    na->name = name;
    if (lm_p_eat(p, LM_T_EQ)) rc = lm_p_attr(p, &na->value);
    else na->value.kind = LM_ATTR_UNIT;
    if (rc == 0 && !lm_p_eat(p, LM_T_COMMA)) break;
  }
  lm_p_leave(p);
  if (rc == 0) rc = lm_p_expect(p, LM_T_RBRACE, "',' or '}' in an attribute dictionary");
  return rc;
}

/* Skips tokens up to the '>' matching an already consumed '<' (leaves it current). */
static int skip_to_close(lm_parser *p) {
  int depth = 0;
  for (;;) {
    switch (p->tok.k) {
      case LM_T_EOF: case LM_T_BAD: return lm_p_expected(p, "'>'");
      case LM_T_LT: depth++; break;
      case LM_T_GT:
        if (depth-- == 0) return 0;
        break;
      default: break;
    }
    lm_p_next(p);
  }
}

/* Unknown dialect attribute body: kept verbatim. Current token is just after '<'. */
static int raw_body(lm_parser *p, lm_attr *out, const char *name) {
  const char *start = p->tok.start;
  LM_TRY(skip_to_close(p));
  lm_attr raw;
  memset(&raw, 0, sizeof raw);
  raw.kind = LM_ATTR_STRING;
  raw.n = (uint32_t)(p->tok.start - start);
  raw.s = lm_p_strndup(p, start, raw.n);
  if (!raw.s) return p->err->code;
  lm_attr_struct(out, name, NULL, 0);
  uint32_t cap = 0;
  LM_TRY(add_field(p, out, &cap, "raw", &raw));
  lm_p_next(p); /* '>' */
  return 0;
}

/* `k = v, ...` fields until '>' (consumed); int lists become INTS. */
static int struct_fields(lm_parser *p, lm_attr *out, const char *name) {
  lm_attr_struct(out, name, NULL, 0);
  uint32_t cap = 0;
  while (!lm_p_is(p, LM_T_GT)) {
    if (p->tok.k != LM_T_ID) return lm_p_expected(p, "a parameter name");
    char *key = lm_p_strndup(p, p->tok.s, p->tok.n);
    if (!key) return p->err->code;
    lm_p_next(p);
    LM_TRY(lm_p_expect(p, LM_T_EQ, "'=' after a parameter name"));
    lm_attr v;
    LM_TRY(lm_p_attr(p, &v));
    ints_from_array(&v);
    LM_TRY(add_field(p, out, &cap, key, &v));
    if (!lm_p_eat(p, LM_T_COMMA)) break;
  }
  return lm_p_expect(p, LM_T_GT, "',' or '>' closing an attribute");
}

int lm_p_conv_dims(lm_parser *p, lm_attr *out) {
  static const char *const names[3][3] = {
      {"input_batch_dimension", "input_feature_dimension", "input_spatial_dimensions"},
      {"kernel_input_feature_dimension", "kernel_output_feature_dimension", "kernel_spatial_dimensions"},
      {"output_batch_dimension", "output_feature_dimension", "output_spatial_dimensions"}};
  static const char letters[3][2] = {{'b', 'f'}, {'i', 'o'}, {'b', 'f'}};
  lm_attr_struct(out, "stablehlo.conv", NULL, 0);
  uint32_t cap = 0;
  for (int part = 0; part < 3; part++) {
    if (part == 1 && !lm_p_eat_id(p, "x")) return lm_p_expected(p, "'x' between convolution dimension lists");
    if (part == 2) LM_TRY(lm_p_expect(p, LM_T_ARROW, "'->' before the output dimensions"));
    lm_tok open = p->tok;
    LM_TRY(lm_p_expect(p, LM_T_LBRACK, "'[' starting convolution dimensions"));
    int64_t first = -1, second = -1, spatial[LM_MAX_RANK];
    bool seen[LM_MAX_RANK] = {0};
    int nsp = 0, idx = 0;
    while (!lm_p_is(p, LM_T_RBRACK)) {
      if (idx >= LM_MAX_RANK) return lm_p_errf(p, NULL, LOOM_PARSE, "too many convolution dimensions");
      lm_tok t = p->tok;
      if (t.k == LM_T_ID && t.n == 1 && t.s[0] == letters[part][0] && first < 0) first = idx;
      else if (t.k == LM_T_ID && t.n == 1 && t.s[0] == letters[part][1] && second < 0) second = idx;
      else if (t.k == LM_T_INT && t.n <= 2) {
        int k = t.s[0] - '0';
        if (t.n == 2) k = k * 10 + (t.s[1] - '0');
        if (k < 0 || k >= LM_MAX_RANK || seen[k]) return lm_p_errf(p, &t, LOOM_PARSE, "bad spatial dimension in convolution dimensions");
        seen[k] = true;
        spatial[k] = idx;
        if (k + 1 > nsp) nsp = k + 1;
      } else {
        char what[64];
        snprintf(what, sizeof what, "'%c', '%c' or a spatial dimension number", letters[part][0], letters[part][1]);
        return lm_p_expected(p, what);
      }
      lm_p_next(p);
      idx++;
      if (!lm_p_eat(p, LM_T_COMMA)) break;
    }
    LM_TRY(lm_p_expect(p, LM_T_RBRACK, "',' or ']' in convolution dimensions"));
    for (int k = 0; k < nsp; k++)
      if (!seen[k]) return lm_p_errf(p, &open, LOOM_PARSE, "spatial dimension %d missing in convolution dimensions", k);
    if (first < 0 || second < 0)
      return lm_p_errf(p, &open, LOOM_PARSE, "convolution dimensions need both '%c' and '%c'", letters[part][0],
                       letters[part][1]);
    lm_attr a = mk_int(first), b = mk_int(second), s;
    memset(&s, 0, sizeof s);
    s.kind = LM_ATTR_INTS;
    s.n = (uint32_t)nsp;
    s.ints = lm_p_array(p, nsp ? (size_t)nsp : 1, sizeof(int64_t));
    if (!s.ints) return p->err->code;
    memcpy(s.ints, spatial, (size_t)nsp * sizeof(int64_t));
    LM_TRY(add_field(p, out, &cap, names[part][0], &a));
    LM_TRY(add_field(p, out, &cap, names[part][1], &b));
    LM_TRY(add_field(p, out, &cap, names[part][2], &s));
  }
  return 0;
}

static int str_attr(lm_parser *p, lm_attr *out) {
  memset(out, 0, sizeof *out);
  out->kind = LM_ATTR_STRING;
  uint32_t len;
  out->s = lm_p_decode_str(p, &p->tok, &len);
  if (!out->s) return p->err->code;
  out->n = len;
  lm_p_next(p);
  return 0;
}

/* `{"x", "y":(1)2, ?}` -> ARRAY of STRING (the open marker `?` dropped); a trailing priority
 * `p0` is read and dropped. */
static int sdy_axis_set(lm_parser *p, lm_attr *out) {
  memset(out, 0, sizeof *out);
  out->kind = LM_ATTR_ARRAY;
  LM_TRY(lm_p_expect(p, LM_T_LBRACE, "'{' starting a list of mesh axes"));
  uint32_t cap = 0;
  while (!lm_p_is(p, LM_T_RBRACE)) {
    if (lm_p_eat(p, LM_T_QUESTION)) {
      if (!lm_p_eat(p, LM_T_COMMA)) break;
      continue;
    }
    if (!lm_p_is(p, LM_T_STR)) return lm_p_expected(p, "a mesh axis name");
    lm_attr *it = lm_p_push(p, (void **)&out->items, &out->n, &cap, sizeof(lm_attr));
    if (!it) return p->err->code;
    const char *st = p->tok.s;
    LM_TRY(str_attr(p, it));
    if (lm_p_is(p, LM_T_COLON)) { /* sub-axis "x":(1)2: keep its text with the name */
      lm_p_next(p);
      int64_t pre, size;
      LM_TRY(lm_p_expect(p, LM_T_LPAREN, "'(' in a sub-axis"));
      LM_TRY(lm_p_int(p, &pre));
      LM_TRY(lm_p_expect(p, LM_T_RPAREN, "')' in a sub-axis"));
      LM_TRY(lm_p_int(p, &size));
      char buf[200];
      int k = snprintf(buf, sizeof buf, "%.*s:(%lld)%lld", (int)(strlen(it->s) > 150 ? 150 : strlen(it->s)), it->s,
                       (long long)pre, (long long)size);
      it->s = lm_p_strndup(p, buf, (size_t)k);
      if (!it->s) return p->err->code;
      it->n = (uint32_t)k;
    }
    (void)st;
    if (!lm_p_eat(p, LM_T_COMMA)) break;
  }
  LM_TRY(lm_p_expect(p, LM_T_RBRACE, "',' or '}' in a list of mesh axes"));
  if (p->tok.k == LM_T_ID && p->tok.n >= 2 && p->tok.s[0] == 'p' && p->tok.s[1] >= '0' && p->tok.s[1] <= '9')
    lm_p_next(p); /* priority */
  return 0;
}

/* `<["x"=2, "y"=4], device_ids=[...]>` (current token '<') -> STRUCT "sdy.mesh". */
int lm_p_sdy_mesh(lm_parser *p, lm_attr *out) {
  LM_TRY(lm_p_expect(p, LM_T_LT, "'<' starting a mesh"));
  lm_attr_struct(out, "sdy.mesh", NULL, 0);
  lm_attr names, sizes;
  memset(&names, 0, sizeof names);
  memset(&sizes, 0, sizeof sizes);
  names.kind = LM_ATTR_ARRAY;
  sizes.kind = LM_ATTR_INTS;
  uint32_t capn = 0, caps = 0, cap = 0;
  LM_TRY(lm_p_expect(p, LM_T_LBRACK, "'[' starting the mesh axes"));
  while (!lm_p_is(p, LM_T_RBRACK)) {
    if (!lm_p_is(p, LM_T_STR)) return lm_p_expected(p, "a mesh axis name");
    lm_attr *nm = lm_p_push(p, (void **)&names.items, &names.n, &capn, sizeof(lm_attr));
    int64_t *sz = lm_p_push(p, (void **)&sizes.ints, &sizes.n, &caps, sizeof(int64_t));
    if (!nm || !sz) return p->err->code;
    LM_TRY(str_attr(p, nm));
    LM_TRY(lm_p_expect(p, LM_T_EQ, "'=' after a mesh axis name"));
    LM_TRY(lm_p_int(p, sz));
    if (!lm_p_eat(p, LM_T_COMMA)) break;
  }
  LM_TRY(lm_p_expect(p, LM_T_RBRACK, "',' or ']' in the mesh axes"));
  LM_TRY(add_field(p, out, &cap, "axis_names", &names));
  LM_TRY(add_field(p, out, &cap, "axis_sizes", &sizes));
  while (lm_p_eat(p, LM_T_COMMA)) {
    if (!lm_p_eat_id(p, "device_ids")) return lm_p_expected(p, "device_ids");
    LM_TRY(lm_p_expect(p, LM_T_EQ, "'=' after device_ids"));
    lm_attr ids;
    LM_TRY(lm_p_int_list(p, &ids));
    LM_TRY(add_field(p, out, &cap, "device_ids", &ids));
  }
  return lm_p_expect(p, LM_T_GT, "'>' closing a mesh");
}

/* `<@mesh, [{"x"}, {}], replicated={"y"}>` (current token '<') -> STRUCT "sdy.sharding". */
int lm_p_sdy_sharding_body(lm_parser *p, lm_attr *out) {
  LM_TRY(lm_p_expect(p, LM_T_LT, "'<' starting a sharding"));
  LM_TRY(lm_p_enter(p));
  lm_attr_struct(out, "sdy.sharding", NULL, 0);
  uint32_t cap = 0;
  lm_attr mesh;
  int rc = 0;
  memset(&mesh, 0, sizeof mesh);
  if (p->tok.k == LM_T_AT) {
    mesh.kind = LM_ATTR_SYMBOL;
    mesh.s = lm_p_strndup(p, p->tok.s, p->tok.n);
    mesh.n = (uint32_t)p->tok.n;
    if (!mesh.s) rc = p->err->code;
    else lm_p_next(p);
  } else if (lm_p_eat_id(p, "mesh")) {
    rc = lm_p_sdy_mesh(p, &mesh);
  } else {
    rc = lm_p_expected(p, "a mesh (@name or mesh<...>)");
  }
  if (rc == 0) rc = add_field(p, out, &cap, "mesh", &mesh);
  if (rc == 0) rc = lm_p_expect(p, LM_T_COMMA, "',' after the mesh");
  lm_attr dims;
  memset(&dims, 0, sizeof dims);
  dims.kind = LM_ATTR_ARRAY;
  uint32_t capd = 0;
  if (rc == 0) rc = lm_p_expect(p, LM_T_LBRACK, "'[' starting the dimension shardings");
  while (rc == 0 && !lm_p_is(p, LM_T_RBRACK)) {
    lm_attr *d = lm_p_push(p, (void **)&dims.items, &dims.n, &capd, sizeof(lm_attr));
    if (!d) { rc = p->err->code; break; }
    rc = sdy_axis_set(p, d);
    if (rc == 0 && !lm_p_eat(p, LM_T_COMMA)) break;
  }
  if (rc == 0) rc = lm_p_expect(p, LM_T_RBRACK, "',' or ']' in the dimension shardings");
  if (rc == 0) rc = add_field(p, out, &cap, "dims", &dims);
  while (rc == 0 && lm_p_eat(p, LM_T_COMMA)) {
    if (p->tok.k != LM_T_ID) { rc = lm_p_expected(p, "replicated= or unreduced="); break; }
    char *key = lm_p_strndup(p, p->tok.s, p->tok.n);
    if (!key) { rc = p->err->code; break; }
    lm_p_next(p);
    lm_attr set;
    rc = lm_p_expect(p, LM_T_EQ, "'='");
    if (rc == 0) rc = sdy_axis_set(p, &set);
    if (rc == 0) rc = add_field(p, out, &cap, key, &set);
  }
  lm_p_leave(p);
  if (rc == 0) rc = lm_p_expect(p, LM_T_GT, "'>' closing a sharding");
  return rc;
}

int lm_p_sdy_sharding_list(lm_parser *p, lm_attr *out) {
  memset(out, 0, sizeof *out);
  out->kind = LM_ATTR_ARRAY;
  uint32_t cap = 0;
  LM_TRY(lm_p_expect(p, LM_T_LBRACK, "'['"));
  while (!lm_p_is(p, LM_T_RBRACK)) {
    lm_attr *it = lm_p_push(p, (void **)&out->items, &out->n, &cap, sizeof(lm_attr));
    if (!it) return p->err->code;
    LM_TRY(lm_p_sdy_sharding_body(p, it));
    if (!lm_p_eat(p, LM_T_COMMA)) break;
  }
  return lm_p_expect(p, LM_T_RBRACK, "',' or ']'");
}

/* `#name...` attributes; the current token is the HASH token. */
static int hash_attr(lm_parser *p, lm_attr *out) {
  lm_tok t = p->tok;
  char *name = lm_p_strndup(p, t.s, t.n);
  if (!name) return p->err->code;
  lm_p_next(p);
  bool dotted = memchr(t.s, '.', t.n) != NULL;
  if (!lm_p_is(p, LM_T_LT)) {
    for (uint32_t i = 0; i < p->naliases; i++)
      if (!p->aliases[i].is_type && p->aliases[i].n == t.n && memcmp(p->aliases[i].name, t.s, t.n) == 0) {
        *out = p->aliases[i].attr;
        return 0;
      }
    if (dotted) { /* a parameterless dialect attribute */
      lm_attr_struct(out, name, NULL, 0);
      return 0;
    }
    return lm_p_errf(p, &t, LOOM_PARSE, "undefined attribute alias #%s", name);
  }
  if (!strcmp(name, "sdy.sharding")) return lm_p_sdy_sharding_body(p, out);
  if (!strcmp(name, "sdy.mesh")) return lm_p_sdy_mesh(p, out);
  lm_p_next(p); /* '<' */
  if (!dotted) {
    /* #stablehlo<comparison_direction GT>, #sdy<manual_axes{"x"}> */
    if (p->tok.k == LM_T_ID) {
      lm_p_next(p); /* the enum's kind */
      if (p->tok.k == LM_T_ID) {
        memset(out, 0, sizeof *out);
        out->kind = LM_ATTR_ENUM;
        out->s = lm_p_strndup(p, p->tok.s, p->tok.n);
        if (!out->s) return p->err->code;
        lm_p_next(p);
        return lm_p_expect(p, LM_T_GT, "'>' closing an enum attribute");
      }
      if (p->tok.k == LM_T_LBRACE) {
        LM_TRY(sdy_axis_set(p, out));
        return lm_p_expect(p, LM_T_GT, "'>'");
      }
    }
    return raw_body(p, out, name);
  }
  if (!strcmp(name, "stablehlo.conv")) {
    if (lm_p_eat_id(p, "raw")) return struct_fields(p, out, name);
    LM_TRY(lm_p_conv_dims(p, out));
    return lm_p_expect(p, LM_T_GT, "'>' closing #stablehlo.conv");
  }
  if (!strcmp(name, "sdy.sharding_per_value")) {
    LM_TRY(lm_p_sdy_sharding_list(p, out));
    return lm_p_expect(p, LM_T_GT, "'>'");
  }
  if (lm_p_is(p, LM_T_GT)) {
    lm_p_next(p);
    lm_attr_struct(out, name, NULL, 0);
    return 0;
  }
  if (p->tok.k == LM_T_ID) {
    lm_pmark mk = lm_p_mark(p);
    lm_tok v = p->tok;
    lm_p_next(p);
    if (lm_p_is(p, LM_T_EQ)) {
      lm_p_reset(p, &mk);
      return struct_fields(p, out, name);
    }
    if (lm_p_is(p, LM_T_GT)) { /* #stablehlo.result_accuracy_mode<DEFAULT> */
      lm_p_next(p);
      memset(out, 0, sizeof *out);
      out->kind = LM_ATTR_ENUM;
      out->s = lm_p_strndup(p, v.s, v.n);
      return out->s ? 0 : p->err->code;
    }
    lm_p_reset(p, &mk);
  }
  return raw_body(p, out, name);
}

int lm_p_attr(lm_parser *p, lm_attr *out) {
  memset(out, 0, sizeof *out);
  LM_TRY(lm_p_enter(p));
  int rc = 0;
  lm_tok t = p->tok;
  switch (t.k) {
    case LM_T_INT: case LM_T_FLOAT: case LM_T_MINUS: case LM_T_PLUS:
      rc = lm_p_number_attr(p, out);
      break;
    case LM_T_STR:
      rc = str_attr(p, out);
      if (rc == 0 && !p->bare_literals && lm_p_is(p, LM_T_COLON)) { /* a typed string: the type is dropped */
        lm_pmark mk = lm_p_mark(p);
        lm_p_next(p);
        lm_type ty;
        if (lm_p_at_type(p)) rc = lm_p_type(p, &ty);
        else lm_p_reset(p, &mk);
      }
      break;
    case LM_T_AT: {
      out->kind = LM_ATTR_SYMBOL;
      out->s = lm_p_strndup(p, t.s, t.n);
      out->n = (uint32_t)t.n;
      if (!out->s) { rc = p->err->code; break; }
      lm_p_next(p);
      while (rc == 0 && lm_p_is(p, LM_T_COLON)) { /* @a::@b nested reference: kept as "a::b" */
        lm_pmark mk = lm_p_mark(p);
        lm_p_next(p);
        if (!lm_p_eat(p, LM_T_COLON) || p->tok.k != LM_T_AT) { lm_p_reset(p, &mk); break; }
        char *s = lm_p_alloc(p, out->n + 2 + p->tok.n + 1);
        if (!s) { rc = p->err->code; break; }
        memcpy(s, out->s, out->n);
        memcpy(s + out->n, "::", 2);
        memcpy(s + out->n + 2, p->tok.s, p->tok.n);
        out->n += 2 + (uint32_t)p->tok.n;
        s[out->n] = 0;
        out->s = s;
        lm_p_next(p);
      }
      break;
    }
    case LM_T_LBRACK:
      rc = parse_list_attr(p, out);
      break;
    case LM_T_LBRACE: {
      out->kind = LM_ATTR_DICT;
      uint32_t cap = 0;
      rc = lm_p_attr_dict(p, &out->fields, &out->n, &cap);
      break;
    }
    case LM_T_HASH:
      rc = hash_attr(p, out);
      break;
    case LM_T_LPAREN: { /* a function type, e.g. func.func's function_type */
      lm_type *ins, *outs;
      uint32_t nin, nout;
      rc = lm_p_func_type(p, &ins, &nin, &outs, &nout);
      if (rc) break;
      out->kind = LM_ATTR_ARRAY;
      out->s = "->";
      out->n = 2;
      out->items = lm_p_array(p, 2, sizeof(lm_attr));
      if (!out->items) { rc = p->err->code; break; }
      for (int side = 0; side < 2 && rc == 0; side++) {
        lm_attr *l = &out->items[side];
        l->kind = LM_ATTR_ARRAY;
        l->n = side ? nout : nin;
        l->items = lm_p_array(p, l->n ? l->n : 1, sizeof(lm_attr));
        if (!l->items) { rc = p->err->code; break; }
        for (uint32_t i = 0; i < l->n; i++) {
          l->items[i].kind = LM_ATTR_TYPE;
          l->items[i].type = side ? &outs[i] : &ins[i];
        }
      }
      break;
    }
    case LM_T_BANG: {
      out->kind = LM_ATTR_TYPE;
      out->type = lm_p_alloc(p, sizeof(lm_type));
      rc = out->type ? lm_p_type(p, out->type) : p->err->code;
      break;
    }
    case LM_T_ID:
      if (lm_p_is_id(p, "true") || lm_p_is_id(p, "false")) {
        out->kind = LM_ATTR_BOOL;
        out->i = lm_p_is_id(p, "true");
        lm_p_next(p);
      } else if (lm_p_is_id(p, "unit")) {
        out->kind = LM_ATTR_UNIT;
        lm_p_next(p);
      } else if (lm_p_is_id(p, "dense")) {
        rc = lm_p_dense(p, out);
      } else if (lm_p_is_id(p, "dense_resource")) {
        rc = lm_p_dense_resource(p, out);
      } else if (lm_p_is_id(p, "array")) {
        rc = parse_array_attr(p, out);
      } else if (lm_p_is_id(p, "inf") || lm_p_is_id(p, "nan")) {
        rc = lm_p_number_attr(p, out);
      } else if (lm_p_at_type(p) && !lm_p_is_id(p, "tensor") && !lm_p_is_id(p, "tuple") && !lm_p_is_id(p, "complex") &&
                 lm_dtype_from_mlir(t.s, t.n) == LOOM_DTYPE_INVALID) {
        /* a type name Loom has no element type for (tf32, f8E4M3FN, index) used as a value, e.g.
         * in #stablehlo.dot_algorithm<lhs_precision_type = tf32>: kept as its name */
        out->kind = LM_ATTR_ENUM;
        out->s = lm_p_strndup(p, t.s, t.n);
        if (!out->s) rc = p->err->code;
        else lm_p_next(p);
      } else if (lm_p_at_type(p)) {
        out->kind = LM_ATTR_TYPE;
        out->type = lm_p_alloc(p, sizeof(lm_type));
        rc = out->type ? lm_p_type(p, out->type) : p->err->code;
      } else if (lm_p_is_id(p, "affine_map") || lm_p_is_id(p, "sparse") ||
                 lm_p_is_id(p, "strided") || lm_p_is_id(p, "distinct")) {
        char buf[96];
        rc = lm_p_errf(p, NULL, LOOM_UNSUPPORTED, "unsupported attribute %s", lm_tok_describe(&t, buf, sizeof buf));
      } else { /* any other bare word (e.g. tf32 in a dot algorithm): kept as its name */
        out->kind = LM_ATTR_ENUM;
        out->s = lm_p_strndup(p, t.s, t.n);
        if (!out->s) rc = p->err->code;
        else lm_p_next(p);
      }
      break;
    default:
      rc = lm_p_expected(p, "an attribute value");
  }
  lm_p_leave(p);
  return rc;
}

int lm_p_attr_bare(lm_parser *p, lm_attr *out) {
  bool saved = p->bare_literals;
  p->bare_literals = true;
  int rc = lm_p_attr(p, out);
  p->bare_literals = saved;
  return rc;
}
