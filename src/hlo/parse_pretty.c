/* Pretty (custom assembly) forms of ops, part 1: type signatures (`: T`, `: (A, B) -> C`, select's
 * `: P, T`, tuple's `: tuple<...>`, ...), a table of the many ops whose form is a fixed sequence
 * of operands, keywords and attributes (broadcast_in_dim, pad, iota, fft, ...), and the small
 * custom ones (constant, compare, slice, cholesky, reduce_precision, optimization_barrier,
 * returns). Each produces the generic attribute names of ir.h's normal form. Part 2
 * (parse_pretty2.c) has reduce, while, convolution, dot_general, calls, check/chlo/sdy ops. */
#include <stdio.h>
#include <string.h>
#include "hlo/parse_int.h"

/* ---- signatures ---- */

int lm_p_sig_functional(lm_parser *p, lm_opb *b) {
  return lm_p_func_type(p, &b->in_types, &b->nin_types, &b->out_types, &b->nout_types);
}

int lm_p_colon_sig(lm_parser *p, lm_opb *b, lm_p_sig_fn sig) {
  LM_TRY(lm_p_expect(p, LM_T_COLON, "':' and the op's type"));
  lm_arena *saved = lm_p_scratch_on(p);
  int rc = sig(p, b);
  lm_p_scratch_off(p, saved);
  return rc;
}

/* n copies of t in the arena. */
static lm_type *repeat_type(lm_parser *p, const lm_type *t, uint32_t n) {
  lm_type *v = lm_p_array(p, n ? n : 1, sizeof(lm_type));
  if (v)
    for (uint32_t i = 0; i < n; i++) v[i] = *t;
  return v;
}

/* `: T` (every operand and the one result are T) or a functional type. */
int lm_p_sig_same(lm_parser *p, lm_opb *b) {
  if (lm_p_is(p, LM_T_LPAREN)) return lm_p_sig_functional(p, b);
  lm_type t;
  LM_TRY(lm_p_type(p, &t));
  b->in_types = repeat_type(p, &t, b->op.nin);
  b->out_types = repeat_type(p, &t, 1);
  if (!b->in_types || !b->out_types) return p->err->code;
  b->nin_types = b->op.nin;
  b->nout_types = 1;
  return 0;
}

/* `: T` naming only the result (ops without operands). */
static int sig_result(lm_parser *p, lm_opb *b) {
  b->out_types = lm_p_alloc(p, sizeof(lm_type));
  if (!b->out_types) return p->err->code;
  b->nout_types = 1;
  return lm_p_type(p, b->out_types);
}

/* select: `: P, T` (pred type, then on_true/on_false/result) or functional. */
static int sig_select(lm_parser *p, lm_opb *b) {
  if (lm_p_is(p, LM_T_LPAREN)) return lm_p_sig_functional(p, b);
  lm_type *ts;
  uint32_t n;
  LM_TRY(lm_p_type_list(p, &ts, &n));
  if (n != 2 || b->op.nin != 3) return lm_p_errf(p, NULL, LOOM_PARSE, "select's type is `pred type, value type`");
  b->in_types = lm_p_array(p, 3, sizeof(lm_type));
  b->out_types = repeat_type(p, &ts[1], 1);
  if (!b->in_types || !b->out_types) return p->err->code;
  b->in_types[0] = ts[0];
  b->in_types[1] = b->in_types[2] = ts[1];
  b->nin_types = 3;
  b->nout_types = 1;
  return 0;
}

/* tuple: `: tuple<A, B>` (operands are the elements) or functional. */
static int sig_tuple(lm_parser *p, lm_opb *b) {
  if (lm_p_is(p, LM_T_LPAREN)) return lm_p_sig_functional(p, b);
  lm_tok at = p->tok;
  LM_TRY(sig_result(p, b));
  const lm_type *t = &b->out_types[0];
  if (t->kind != LM_TYPE_TUPLE || t->ntuple != b->op.nin)
    return lm_p_errf(p, &at, LOOM_PARSE, "stablehlo.tuple's type must be a tuple of its %u operands' types", b->op.nin);
  b->in_types = t->tuple;
  b->nin_types = t->ntuple;
  return 0;
}

/* optimization_barrier: `: A, B` (results are the operands' types) or functional. */
static int sig_pairwise(lm_parser *p, lm_opb *b) {
  if (lm_p_is(p, LM_T_LPAREN)) return lm_p_sig_functional(p, b);
  LM_TRY(lm_p_type_list(p, &b->in_types, &b->nin_types));
  b->out_types = b->in_types;
  b->nout_types = b->nin_types;
  return 0;
}

/* complex: `: complex tensor` (operands are its real parts) or functional. */
static int sig_complex(lm_parser *p, lm_opb *b) {
  if (lm_p_is(p, LM_T_LPAREN)) return lm_p_sig_functional(p, b);
  lm_tok at = p->tok;
  LM_TRY(sig_result(p, b));
  lm_type part = b->out_types[0];
  if (part.kind != LM_TYPE_TENSOR || !lm_dtype_is_complex(part.dtype))
    return lm_p_errf(p, &at, LOOM_PARSE, "stablehlo.complex's type must be a complex tensor");
  part.dtype = part.dtype == LOOM_DTYPE_C64 ? LOOM_DTYPE_F32 : LOOM_DTYPE_F64;
  b->in_types = repeat_type(p, &part, b->op.nin);
  if (!b->in_types) return p->err->code;
  b->nin_types = b->op.nin;
  return 0;
}

/* ---- the table of fixed-sequence forms ---- */

/* Format steps, space separated:
 *   %     one operand          %*   a list of operands (maybe empty)
 *   ,  =  [  ]  literal punctuation
 *   word  a literal keyword
 *   I:name  integer attribute   L:name  integer list [..] -> INTS
 *   E:name  enum (bare word)    S:name  string attribute
 *   {}    optional attribute dictionary (also `attributes {...}`)
 *   :S :F :R :SEL :T :P :C      the signature after ':' (see sig_*) */
typedef struct pretty_form {
  const char *op;
  const char *fmt;
} pretty_form;

#define UNARY "%* {} :S"
static const pretty_form g_forms[] = {
    {"stablehlo.abs", UNARY}, {"stablehlo.cbrt", UNARY}, {"stablehlo.ceil", UNARY},
    {"stablehlo.convert", UNARY}, {"stablehlo.count_leading_zeros", UNARY}, {"stablehlo.cosine", UNARY},
    {"stablehlo.exponential", UNARY}, {"stablehlo.exponential_minus_one", UNARY}, {"stablehlo.floor", UNARY},
    {"stablehlo.imag", UNARY}, {"stablehlo.is_finite", UNARY}, {"stablehlo.log", UNARY},
    {"stablehlo.log_plus_one", UNARY}, {"stablehlo.logistic", UNARY}, {"stablehlo.not", UNARY},
    {"stablehlo.negate", UNARY}, {"stablehlo.popcnt", UNARY}, {"stablehlo.real", UNARY},
    {"stablehlo.round_nearest_afz", UNARY}, {"stablehlo.round_nearest_even", UNARY}, {"stablehlo.rsqrt", UNARY},
    {"stablehlo.sign", UNARY}, {"stablehlo.sine", UNARY}, {"stablehlo.sqrt", UNARY}, {"stablehlo.tan", UNARY},
    {"stablehlo.tanh", UNARY}, {"stablehlo.uniform_quantize", UNARY}, {"stablehlo.uniform_dequantize", UNARY},
    {"stablehlo.bitcast_convert", UNARY}, {"stablehlo.reshape", UNARY}, {"stablehlo.dynamic_reshape", UNARY},
    {"stablehlo.real_dynamic_slice", UNARY}, {"stablehlo.dynamic_pad", UNARY},
    {"stablehlo.dynamic_update_slice", UNARY}, {"stablehlo.compute_reshape_shape", UNARY},
    {"stablehlo.add", UNARY}, {"stablehlo.atan2", UNARY}, {"stablehlo.divide", UNARY},
    {"stablehlo.maximum", UNARY}, {"stablehlo.minimum", UNARY}, {"stablehlo.multiply", UNARY},
    {"stablehlo.power", UNARY}, {"stablehlo.remainder", UNARY}, {"stablehlo.shift_left", UNARY},
    {"stablehlo.shift_right_arithmetic", UNARY}, {"stablehlo.shift_right_logical", UNARY},
    {"stablehlo.subtract", UNARY}, {"stablehlo.and", UNARY}, {"stablehlo.or", UNARY}, {"stablehlo.xor", UNARY},
    {"stablehlo.clamp", UNARY},
    {"stablehlo.complex", "%* {} :C"},
    {"stablehlo.select", "%* {} :SEL"},
    {"stablehlo.iota", "dim = I:iota_dimension {} :R"},
    {"stablehlo.dynamic_iota", "% , dim = I:iota_dimension {} :F"},
    {"stablehlo.create_token", "{} :R"},
    {"stablehlo.replica_id", "{} :R"},
    {"stablehlo.partition_id", "{} :R"},
    {"stablehlo.after_all", "%* {} :S"},
    {"stablehlo.get_tuple_element", "% [ I:index ] {} :F"},
    {"stablehlo.tuple", "%* {} :T"},
    {"stablehlo.dynamic_slice", "% , %* , sizes = L:slice_sizes {} :F"},
    {"stablehlo.broadcast", "% , sizes = L:broadcast_sizes {} :F"},
    {"stablehlo.broadcast_in_dim", "% , dims = L:broadcast_dimensions {} :F"},
    {"stablehlo.dynamic_broadcast_in_dim", "% , % , dims = L:broadcast_dimensions {} :F"},
    {"stablehlo.concatenate", "%* , dim = I:dimension {} :F"},
    {"stablehlo.transpose", "% , dims = L:permutation {} :F"},
    {"stablehlo.reverse", "% , dims = L:dimensions {} :S"},
    {"stablehlo.pad", "% , % , low = L:edge_padding_low , high = L:edge_padding_high , interior = L:interior_padding {} :F"},
    {"stablehlo.fft", "% , type = E:fft_type , length = L:fft_length {} :F"},
    {"stablehlo.rng", "% , % , % , distribution = E:rng_distribution {} :F"},
    {"stablehlo.rng_bit_generator", "% , algorithm = E:rng_algorithm {} :F"},
    {"stablehlo.get_dimension_size", "% , dim = I:dimension {} :F"},
    {"stablehlo.set_dimension_size", "% , % , dim = I:dimension {} :F"},
    {"stablehlo.einsum", "% , % , config = S:einsum_config {} :F"},
    {"stablehlo.unary_einsum", "% , config = S:einsum_config {} :F"},
};

int lm_p_opt_attr_dict(lm_parser *p, lm_opb *b) {
  if (lm_p_eat_id(p, "attributes") && !lm_p_is(p, LM_T_LBRACE)) return lm_p_expected(p, "'{' after attributes");
  if (lm_p_is(p, LM_T_LBRACE)) return lm_p_attr_dict(p, &b->attrs, &b->op.nattrs, &b->capattrs);
  return 0;
}

static lm_attr enum_attr(const char *s) {
  lm_attr a;
  memset(&a, 0, sizeof a);
  a.kind = LM_ATTR_ENUM;
  a.s = s;
  return a;
}

/* Reads a bare enum word (e.g. GT, FFT, THREE_FRY) into the named attribute. */
static int enum_step(lm_parser *p, lm_opb *b, const char *name) {
  if (p->tok.k != LM_T_ID) return lm_p_expected(p, "an enum value");
  lm_attr a = enum_attr(lm_p_strndup(p, p->tok.s, p->tok.n));
  if (!a.s) return p->err->code;
  lm_p_next(p);
  return lm_p_opb_attr(p, b, name, &a);
}

/* The signature reader named by a form's `:X` step. */
static lm_p_sig_fn form_sig(const char *x) {
  static const struct {
    const char *x;
    lm_p_sig_fn fn;
  } sigs[] = {{"S", lm_p_sig_same}, {"F", lm_p_sig_functional}, {"R", sig_result}, {"SEL", sig_select},
              {"T", sig_tuple},     {"P", sig_pairwise},        {"C", sig_complex}};
  for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
    if (!strcmp(x, sigs[i].x)) return sigs[i].fn;
  return NULL;
}

static int run_form(lm_parser *p, lm_opb *b, const char *fmt) {
  char step[64];
  const char *f = fmt;
  while (*f) {
    size_t n = strcspn(f, " ");
    if (n >= sizeof step) n = sizeof step - 1;
    memcpy(step, f, n);
    step[n] = 0;
    f += n;
    while (*f == ' ') f++;
    const char *arg = strchr(step, ':') ? strchr(step, ':') + 1 : NULL;
    if (!strcmp(step, "%")) {
      LM_TRY(lm_p_operand(p, b));
    } else if (!strcmp(step, "%*")) {
      LM_TRY(lm_p_operand_list(p, b));
    } else if (!strcmp(step, ",")) {
      LM_TRY(lm_p_expect(p, LM_T_COMMA, "','"));
    } else if (!strcmp(step, "=")) {
      LM_TRY(lm_p_expect(p, LM_T_EQ, "'='"));
    } else if (!strcmp(step, "[")) {
      LM_TRY(lm_p_expect(p, LM_T_LBRACK, "'['"));
    } else if (!strcmp(step, "]")) {
      LM_TRY(lm_p_expect(p, LM_T_RBRACK, "']'"));
    } else if (!strcmp(step, "{}")) {
      LM_TRY(lm_p_opt_attr_dict(p, b));
    } else if (step[0] == ':') {
      lm_p_sig_fn sig = form_sig(step + 1);
      if (!sig) return lm_p_errf(p, NULL, LOOM_INTERNAL, "form of %s: unknown signature '%s'", b->op.name, step);
      LM_TRY(lm_p_colon_sig(p, b, sig));
    } else if (arg && step[1] == ':') {
      lm_attr a;
      if (step[0] == 'I') {
        memset(&a, 0, sizeof a);
        a.kind = LM_ATTR_INT;
        LM_TRY(lm_p_int(p, &a.i));
        LM_TRY(lm_p_opb_attr(p, b, arg, &a));
      } else if (step[0] == 'L') {
        LM_TRY(lm_p_int_list(p, &a));
        LM_TRY(lm_p_opb_attr(p, b, arg, &a));
      } else if (step[0] == 'E') {
        LM_TRY(enum_step(p, b, arg));
      } else if (step[0] == 'S') {
        if (!lm_p_is(p, LM_T_STR)) return lm_p_expected(p, "a string");
        LM_TRY(lm_p_attr_bare(p, &a));
        LM_TRY(lm_p_opb_attr(p, b, arg, &a));
      }
    } else {
      LM_TRY(lm_p_expect_id(p, step));
    }
  }
  return 0;
}

/* ---- small custom forms ---- */

/* `stablehlo.constant [{attrs}] dense<...> : T` */
static int pretty_constant(lm_parser *p, lm_opb *b) {
  LM_TRY(lm_p_opt_attr_dict(p, b));
  lm_attr v;
  lm_tok at = p->tok;
  LM_TRY(lm_p_attr(p, &v));
  if (v.kind != LM_ATTR_DENSE)
    return lm_p_errf(p, &at, LOOM_UNSUPPORTED, "stablehlo.constant: only dense<...> values are supported");
  LM_TRY(lm_p_opb_attr(p, b, "value", &v));
  b->out_types = v.type;
  b->nout_types = 1;
  return 0;
}

/* `stablehlo.compare GT, %a, %b[, FLOAT] {} : (A, B) -> C` */
static int pretty_compare(lm_parser *p, lm_opb *b) {
  LM_TRY(enum_step(p, b, "comparison_direction"));
  LM_TRY(lm_p_expect(p, LM_T_COMMA, "','"));
  LM_TRY(lm_p_operand(p, b));
  LM_TRY(lm_p_expect(p, LM_T_COMMA, "','"));
  LM_TRY(lm_p_operand(p, b));
  if (lm_p_eat(p, LM_T_COMMA)) LM_TRY(enum_step(p, b, "compare_type"));
  return run_form(p, b, "{} :F");
}

/* `stablehlo.slice %x [0:2, 1:4:2] {} : (A) -> B` */
static int pretty_slice(lm_parser *p, lm_opb *b) {
  LM_TRY(lm_p_operand(p, b));
  lm_attr st, lim, str;
  memset(&st, 0, sizeof st);
  st.kind = LM_ATTR_INTS;
  lim = str = st;
  uint32_t c1 = 0, c2 = 0, c3 = 0, n2 = 0, n3 = 0;
  LM_TRY(lm_p_expect(p, LM_T_LBRACK, "'[' starting the slice ranges"));
  while (!lm_p_is(p, LM_T_RBRACK)) {
    int64_t *a = lm_p_push(p, (void **)&st.ints, &st.n, &c1, sizeof(int64_t));
    int64_t *l = lm_p_push(p, (void **)&lim.ints, &n2, &c2, sizeof(int64_t));
    int64_t *s = lm_p_push(p, (void **)&str.ints, &n3, &c3, sizeof(int64_t));
    if (!a || !l || !s) return p->err->code;
    LM_TRY(lm_p_int(p, a));
    LM_TRY(lm_p_expect(p, LM_T_COLON, "':' in a slice range start:limit[:stride]"));
    LM_TRY(lm_p_int(p, l));
    *s = 1;
    if (lm_p_eat(p, LM_T_COLON)) LM_TRY(lm_p_int(p, s));
    if (!lm_p_eat(p, LM_T_COMMA)) break;
  }
  LM_TRY(lm_p_expect(p, LM_T_RBRACK, "',' or ']' in the slice ranges"));
  lim.n = n2;
  str.n = n3;
  LM_TRY(lm_p_opb_attr(p, b, "start_indices", &st));
  LM_TRY(lm_p_opb_attr(p, b, "limit_indices", &lim));
  LM_TRY(lm_p_opb_attr(p, b, "strides", &str));
  return run_form(p, b, "{} :F");
}

/* `stablehlo.cholesky %a[, lower = true] {} : T` */
static int pretty_cholesky(lm_parser *p, lm_opb *b) {
  LM_TRY(lm_p_operand(p, b));
  if (lm_p_eat(p, LM_T_COMMA)) {
    LM_TRY(lm_p_expect_id(p, "lower"));
    LM_TRY(lm_p_expect(p, LM_T_EQ, "'='"));
    lm_attr a;
    LM_TRY(lm_p_attr(p, &a));
    if (a.kind != LM_ATTR_BOOL) return lm_p_expected(p, "true or false");
    LM_TRY(lm_p_opb_attr(p, b, "lower", &a));
  }
  return run_form(p, b, "{} :S");
}

/* `stablehlo.reduce_precision %x, format = e5m10 {} : T` */
static int pretty_reduce_precision(lm_parser *p, lm_opb *b) {
  LM_TRY(run_form(p, b, "% , format ="));
  lm_tok t = p->tok;
  int e = 0, m = 0;
  char tail;
  char buf[64];
  if (t.k != LM_T_ID || t.n >= sizeof buf) return lm_p_expected(p, "a format like e5m10");
  memcpy(buf, t.s, t.n);
  buf[t.n] = 0;
  if (sscanf(buf, "e%dm%d%c", &e, &m, &tail) != 2 || e < 0 || m < 0 || e > 64 || m > 64)
    return lm_p_expected(p, "a format like e5m10");
  lm_p_next(p);
  lm_attr a;
  memset(&a, 0, sizeof a);
  a.kind = LM_ATTR_INT;
  a.i = e;
  LM_TRY(lm_p_opb_attr(p, b, "exponent_bits", &a));
  a.i = m;
  LM_TRY(lm_p_opb_attr(p, b, "mantissa_bits", &a));
  return run_form(p, b, "{} :S");
}

/* `stablehlo.optimization_barrier {attrs} %a, %b : A, B` or `... ()` with no operands. */
static int pretty_barrier(lm_parser *p, lm_opb *b) {
  LM_TRY(lm_p_opt_attr_dict(p, b));
  if (lm_p_eat(p, LM_T_LPAREN)) return lm_p_expect(p, LM_T_RPAREN, "')'");
  return run_form(p, b, "%* :P");
}

/* `return %a, %b {} : A, B` (func.return, stablehlo.return, sdy.return). */
static int pretty_return(lm_parser *p, lm_opb *b) {
  LM_TRY(lm_p_operand_list(p, b));
  LM_TRY(lm_p_opt_attr_dict(p, b));
  if (b->op.nin == 0) return 0;
  LM_TRY(lm_p_expect(p, LM_T_COLON, "':' and the returned types"));
  lm_arena *saved = lm_p_scratch_on(p);
  int rc = lm_p_type_list(p, &b->in_types, &b->nin_types);
  lm_p_scratch_off(p, saved);
  return rc;
}

int lm_p_pretty_op(lm_parser *p, lm_opb *b) {
  switch (b->op.code) {
    case LM_OP_CONSTANT: return pretty_constant(p, b);
    case LM_OP_COMPARE: return pretty_compare(p, b);
    case LM_OP_SLICE: return pretty_slice(p, b);
    case LM_OP_CHOLESKY: return pretty_cholesky(p, b);
    case LM_OP_REDUCE_PRECISION: return pretty_reduce_precision(p, b);
    case LM_OP_OPTIMIZATION_BARRIER: return pretty_barrier(p, b);
    case LM_OP_RETURN: case LM_OP_FUNC_RETURN: case LM_OP_SDY_RETURN: return pretty_return(p, b);
    default: break;
  }
  for (size_t i = 0; i < sizeof g_forms / sizeof g_forms[0]; i++)
    if (!strcmp(g_forms[i].op, b->op.name)) return run_form(p, b, g_forms[i].fmt);
  return lm_p_pretty_op2(p, b);
}
