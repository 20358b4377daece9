/* Types: tensor<2x?x3xf32>, tensor<f32>, !stablehlo.token, tuple<...>, element types, function
 * types and type lists. Element types outside Loom's set (f8 kinds, i2/i4, index, quantized,
 * ...) are refused with LOOM_UNSUPPORTED naming the type. */
#include <string.h>
#include "hlo/parse_int.h"

static int is_digit(int c) { return c >= '0' && c <= '9'; }

/* Spelled-out list for messages. */
#define LM_SUPPORTED_TYPES "i1, i8-i64, ui8-ui64, f16, bf16, f32, f64, complex<f32>, complex<f64>"

int lm_p_elem_type(lm_parser *p, lm_dtype *out) {
  char buf[128];
  if (p->tok.k == LM_T_BANG) {
    if (p->tok.n == 15 && memcmp(p->tok.s, "stablehlo.token", 15) == 0)
      return lm_p_errf(p, NULL, LOOM_PARSE, "!stablehlo.token is not an element type");
    return lm_p_errf(p, NULL, LOOM_UNSUPPORTED, "unsupported element type %s (Loom runs %s)",
                     lm_tok_describe(&p->tok, buf, sizeof buf), LM_SUPPORTED_TYPES);
  }
  if (p->tok.k != LM_T_ID) return lm_p_expected(p, "an element type");
  lm_tok t = p->tok;
  if (lm_p_eat_id(p, "complex")) {
    LM_TRY(lm_p_expect(p, LM_T_LT, "'<' after complex"));
    lm_tok inner = p->tok;
    if (lm_p_eat_id(p, "f32")) *out = LOOM_DTYPE_C64;
    else if (lm_p_eat_id(p, "f64")) *out = LOOM_DTYPE_C128;
    else if (inner.k == LM_T_ID)
      return lm_p_errf(p, &t, LOOM_UNSUPPORTED, "unsupported element type 'complex<%.*s>' (Loom runs %s)",
                       (int)(inner.n > 40 ? 40 : inner.n), inner.s, LM_SUPPORTED_TYPES);
    else return lm_p_expected(p, "f32 or f64 inside complex<...>");
    return lm_p_expect(p, LM_T_GT, "'>' closing complex<...>");
  }
  lm_dtype d = lm_dtype_from_mlir(t.s, t.n);
  if (p->index_ok && t.n == 5 && !memcmp(t.s, "index", 5)) d = LOOM_DTYPE_S64; /* layouts: dense<..> : tensor<2xindex> */
  if (d == LOOM_DTYPE_INVALID && t.n >= 3 && t.s[0] == 's' && t.s[1] == 'i') {
    /* si8..si64: explicitly signed integers are the same as signless ones here */
    d = lm_dtype_from_mlir(t.s + 1, t.n - 1);
    if (!lm_dtype_is_sint(d)) d = LOOM_DTYPE_INVALID;
  }
  if (d == LOOM_DTYPE_INVALID)
    return lm_p_errf(p, NULL, LOOM_UNSUPPORTED, "unsupported element type %s (Loom runs %s)",
                     lm_tok_describe(&t, buf, sizeof buf), LM_SUPPORTED_TYPES);
  *out = d;
  lm_p_next(p);
  return 0;
}

/* After `tensor<`: dimensions read from the raw text (the lexer does not split `2x3xf32`). */
static int tensor_body(lm_parser *p, lm_type *out) {
  out->kind = LM_TYPE_TENSOR;
  const char *q = p->tok.start;
  for (;;) {
    const char *s = q;
    while (q < p->end && (*q == ' ' || *q == '\t' || *q == '\n' || *q == '\r')) q++;
    if (q < p->end && (is_digit((unsigned char)*q) || *q == '?')) {
      int64_t d = LM_DYN_DIM;
      if (*q == '?') {
        q++;
      } else {
        d = 0;
        while (q < p->end && is_digit((unsigned char)*q)) {
          if (d > ((int64_t)1 << 50)) {
            lm_p_seek(p, s);
            return lm_p_errf(p, NULL, LOOM_PARSE, "tensor dimension too large");
          }
          d = d * 10 + (*q++ - '0');
        }
      }
      if (q >= p->end || *q != 'x') {
        lm_p_seek(p, q);
        return lm_p_expected(p, "'x' after a tensor dimension");
      }
      q++;
      if (out->rank >= LM_MAX_RANK) {
        lm_p_seek(p, s);
        return lm_p_errf(p, NULL, LOOM_UNSUPPORTED, "tensor rank over %d", LM_MAX_RANK);
      }
      out->dims[out->rank++] = d;
      continue;
    }
    if (q < p->end && *q == '*') {
      lm_p_seek(p, q);
      return lm_p_errf(p, NULL, LOOM_UNSUPPORTED, "unranked tensors (tensor<*x...>) are not supported");
    }
    lm_p_seek(p, q);
    break;
  }
  lm_dtype d;
  LM_TRY(lm_p_elem_type(p, &d));
  out->dtype = (uint8_t)d;
  if (lm_p_eat(p, LM_T_COMMA)) { /* encoding (e.g. #stablehlo.bounds<...>): read and dropped */
    lm_attr enc;
    LM_TRY(lm_p_attr(p, &enc));
  }
  return lm_p_expect(p, LM_T_GT, "'>' closing tensor<...>");
}

static const lm_alias *find_type_alias(const lm_parser *p, const lm_tok *t) {
  for (uint32_t i = 0; i < p->naliases; i++)
    if (p->aliases[i].is_type && p->aliases[i].n == t->n && memcmp(p->aliases[i].name, t->s, t->n) == 0)
      return &p->aliases[i];
  return NULL;
}

int lm_p_type(lm_parser *p, lm_type *out) {
  memset(out, 0, sizeof *out);
  LM_TRY(lm_p_enter(p));
  int rc = 0;
  if (lm_p_eat_id(p, "tensor")) {
    rc = lm_p_expect(p, LM_T_LT, "'<' after tensor");
    if (rc == 0) rc = tensor_body(p, out);
  } else if (p->tok.k == LM_T_BANG) {
    const lm_alias *al = find_type_alias(p, &p->tok);
    if (p->tok.n == 15 && memcmp(p->tok.s, "stablehlo.token", 15) == 0) {
      out->kind = LM_TYPE_TOKEN;
      lm_p_next(p);
    } else if (al) {
      *out = al->type;
      lm_p_next(p);
    } else {
      char buf[128];
      rc = lm_p_errf(p, NULL, LOOM_UNSUPPORTED, "unsupported type %s", lm_tok_describe(&p->tok, buf, sizeof buf));
    }
  } else if (lm_p_eat_id(p, "tuple")) {
    out->kind = LM_TYPE_TUPLE;
    rc = lm_p_expect(p, LM_T_LT, "'<' after tuple");
    uint32_t cap = 0;
    while (rc == 0 && !lm_p_is(p, LM_T_GT)) {
      lm_type *e = lm_p_push(p, (void **)&out->tuple, &out->ntuple, &cap, sizeof(lm_type));
      if (!e) { rc = p->err->code; break; }
      rc = lm_p_type(p, e);
      if (rc == 0 && !lm_p_eat(p, LM_T_COMMA)) break;
    }
    if (rc == 0) rc = lm_p_expect(p, LM_T_GT, "'>' or ',' in tuple<...>");
  } else {
    lm_dtype d;
    rc = lm_p_elem_type(p, &d);
    if (rc == 0) lm_type_tensor(out, d, 0, NULL);
  }
  lm_p_leave(p);
  return rc;
}

bool lm_p_at_type(const lm_parser *p) {
  if (p->tok.k == LM_T_BANG) return true;
  if (p->tok.k != LM_T_ID || p->tok.n == 0) return false;
  if (lm_p_is_id(p, "tensor") || lm_p_is_id(p, "tuple") || lm_p_is_id(p, "complex") || lm_p_is_id(p, "index"))
    return true;
  char c = p->tok.s[0];
  /* i32, ui8, si16, f32, bf16, f8E4M3FN, ... : a letter run then digits */
  if (c != 'i' && c != 'u' && c != 's' && c != 'f' && c != 'b') return false;
  for (size_t i = 1; i < p->tok.n; i++)
    if (is_digit((unsigned char)p->tok.s[i])) return true;
  return false;
}

int lm_p_type_list(lm_parser *p, lm_type **out, uint32_t *n) {
  uint32_t cap = 0;
  *out = NULL;
  *n = 0;
  for (;;) {
    lm_type *t = lm_p_push(p, (void **)out, n, &cap, sizeof(lm_type));
    if (!t) return p->err->code;
    LM_TRY(lm_p_type(p, t));
    if (!lm_p_is(p, LM_T_COMMA)) return 0;
    lm_pmark mk = lm_p_mark(p);
    lm_p_next(p);
    if (!lm_p_at_type(p)) { /* the comma belongs to whatever follows */
      lm_p_reset(p, &mk);
      return 0;
    }
  }
}

int lm_p_paren_types(lm_parser *p, lm_type **out, uint32_t *n) {
  *out = NULL;
  *n = 0;
  LM_TRY(lm_p_expect(p, LM_T_LPAREN, "'('"));
  if (lm_p_eat(p, LM_T_RPAREN)) return 0;
  uint32_t cap = 0;
  for (;;) {
    lm_type *t = lm_p_push(p, (void **)out, n, &cap, sizeof(lm_type));
    if (!t) return p->err->code;
    LM_TRY(lm_p_type(p, t));
    if (lm_p_eat(p, LM_T_RPAREN)) return 0;
    LM_TRY(lm_p_expect(p, LM_T_COMMA, "',' or ')' in a type list"));
  }
}

int lm_p_func_type(lm_parser *p, lm_type **ins, uint32_t *nin, lm_type **outs, uint32_t *nout) {
  LM_TRY(lm_p_paren_types(p, ins, nin));
  LM_TRY(lm_p_expect(p, LM_T_ARROW, "'->' in a function type"));
  if (lm_p_is(p, LM_T_LPAREN)) return lm_p_paren_types(p, outs, nout);
  *outs = lm_p_alloc(p, sizeof(lm_type));
  if (!*outs) return p->err->code;
  *nout = 1;
  return lm_p_type(p, *outs);
}
