/* Pretty forms, part 2: ops with regions or structured attributes in their custom syntax —
 * reduce (`applies` and `reducer` forms), while (`cond {...} do {...}`), convolution
 * (`dim_numbers = ..., window = {...}`), dot_general/dot, custom_call, composite, func.call,
 * the check/interpreter test ops, chlo ops, and the Shardy ops (sharding_constraint, reshard,
 * manual_computation). Attribute names follow ir.h's normal form (the generic names). */
#include <stdio.h>
#include <string.h>
#include "hlo/parse_int.h"

/* The `{attrs} : (A, B) -> C` that ends most of these forms. */
static int attrs_and_functional_sig(lm_parser *p, lm_opb *b) {
  LM_TRY(lm_p_opt_attr_dict(p, b));
  return lm_p_colon_sig(p, b, lm_p_sig_functional);
}

/* `(%a, %b, ...)`; what names what the '(' starts, for the message. */
static int paren_operands(lm_parser *p, lm_opb *b, const char *what) {
  LM_TRY(lm_p_expect(p, LM_T_LPAREN, what));
  LM_TRY(lm_p_operand_list(p, b));
  return lm_p_expect(p, LM_T_RPAREN, "')'");
}

/* The keyword and '=' of `word = value`. */
static int expect_key(lm_parser *p, const char *word) {
  LM_TRY(lm_p_expect_id(p, word));
  return lm_p_expect(p, LM_T_EQ, "'='");
}

/* `name = value` with a bare value (no `: type` suffix), added to the op as attribute name. */
static int bare_named_attr(lm_parser *p, lm_opb *b) {
  if (p->tok.k != LM_T_ID) return lm_p_expected(p, "name = value");
  char *key = lm_p_strndup(p, p->tok.s, p->tok.n);
  if (!key) return p->err->code;
  lm_p_next(p);
  LM_TRY(lm_p_expect(p, LM_T_EQ, "'='"));
  lm_attr v;
  LM_TRY(lm_p_attr_bare(p, &v));
  return lm_p_opb_attr(p, b, key, &v);
}

static lm_attr ints_attr(void) {
  lm_attr a;
  memset(&a, 0, sizeof a);
  a.kind = LM_ATTR_INTS;
  return a;
}

/* ---- reduce ---- */

/* The region of `applies stablehlo.add`: ^bb0(%a: T, %b: T): %r = add %a, %b; return %r. */
static int applies_region(lm_parser *p, lm_opb *b, lm_opcode code, const char *name, const lm_type *t) {
  lm_region *r = lm_p_push(p, (void **)&b->regions, &b->op.nregions, &b->capregions, sizeof(lm_region));
  lm_block *blk = lm_p_alloc(p, sizeof *blk);
  if (!r || !blk) return p->err->code;
  r->nblocks = 1;
  r->blocks = blk;
  lm_type ts[2] = {*t, *t};
  uint32_t a0, res;
  LM_TRY(lm_p_new_values(p, 2, ts, &a0));
  LM_TRY(lm_p_new_values(p, 1, t, &res));
  blk->nargs = 2;
  blk->args = lm_p_array(p, 2, sizeof(uint32_t));
  blk->ops = lm_p_array(p, 2, sizeof(lm_op));
  uint32_t *in = lm_p_array(p, 2, sizeof(uint32_t)), *out = lm_p_array(p, 1, sizeof(uint32_t)),
           *rin = lm_p_array(p, 1, sizeof(uint32_t));
  if (!blk->args || !blk->ops || !in || !out || !rin) return p->err->code;
  blk->args[0] = in[0] = a0;
  blk->args[1] = in[1] = a0 + 1;
  out[0] = rin[0] = res;
  blk->nops = 2;
  lm_op *op = &blk->ops[0], *ret = &blk->ops[1];
  op->code = (uint16_t)code;
  op->name = name;
  op->nin = 2;
  op->in = in;
  op->nout = 1;
  op->out = out;
  op->loc = b->op.loc;
  ret->code = LM_OP_RETURN;
  ret->name = "stablehlo.return";
  ret->nin = 1;
  ret->in = rin;
  ret->loc = b->op.loc;
  return 0;
}

/* `stablehlo.reduce(%x init: %c), ... applies stablehlo.add across dimensions = [0] {} : F`
 * or `... across dimensions = [0] {} : F reducer(%a: T, %c: T) (%b: U, %d: U) { body }`. */
static int pretty_reduce(lm_parser *p, lm_opb *b) {
  uint32_t *inits = NULL, ninit = 0, cap = 0;
  lm_tok *init_toks = NULL;
  uint32_t nit = 0, capt = 0;
  for (;;) {
    LM_TRY(lm_p_expect(p, LM_T_LPAREN, "'(' and an input of reduce"));
    LM_TRY(lm_p_operand(p, b));
    LM_TRY(lm_p_expect_id(p, "init"));
    LM_TRY(lm_p_expect(p, LM_T_COLON, "':' after init"));
    lm_tok t = p->tok;
    uint32_t *v = lm_p_push(p, (void **)&inits, &ninit, &cap, sizeof(uint32_t));
    lm_tok *vt = lm_p_push(p, (void **)&init_toks, &nit, &capt, sizeof(lm_tok));
    if (!v || !vt) return p->err->code;
    LM_TRY(lm_p_use(p, v));
    *vt = t;
    LM_TRY(lm_p_expect(p, LM_T_RPAREN, "')'"));
    if (!lm_p_eat(p, LM_T_COMMA)) break;
  }
  /* operands: inputs then init values */
  for (uint32_t i = 0; i < ninit; i++) {
    uint32_t *s = lm_p_push(p, (void **)&b->in, &b->op.nin, &b->capin, sizeof(uint32_t));
    lm_tok *st = lm_p_push(p, (void **)&b->in_toks, &b->nin_toks, &b->capin_toks, sizeof(lm_tok));
    if (!s || !st) return p->err->code;
    *s = inits[i];
    *st = init_toks[i];
  }
  lm_tok body_tok = p->tok;
  lm_opcode body_code = LM_OP_UNKNOWN;
  const char *body_name = NULL;
  if (lm_p_eat_id(p, "applies")) {
    if (p->tok.k != LM_T_ID) return lm_p_expected(p, "the op applied by reduce");
    body_tok = p->tok;
    body_name = lm_p_strndup(p, p->tok.s, p->tok.n);
    if (!body_name) return p->err->code;
    body_code = lm_opcode_from_name(p->tok.s, p->tok.n);
    lm_p_next(p);
  }
  LM_TRY(lm_p_expect_id(p, "across"));
  LM_TRY(expect_key(p, "dimensions"));
  lm_attr dims;
  LM_TRY(lm_p_int_list(p, &dims));
  LM_TRY(lm_p_opb_attr(p, b, "dimensions", &dims));
  LM_TRY(attrs_and_functional_sig(p, b));
  if (body_name) {
    if (ninit != 1) return lm_p_errf(p, &body_tok, LOOM_PARSE, "`applies` needs exactly one input");
    if (b->nin_types != 2) return lm_p_errf(p, &body_tok, LOOM_PARSE, "reduce's type must list the input and the init value");
    lm_type scalar = b->in_types[1];
    return applies_region(p, b, body_code, body_name, &scalar);
  }
  /* reducer(%a0: T0, %b0: T0) (%a1: T1, %b1: T1) { ... }: block args are a0, a1, ..., b0, b1, ... */
  LM_TRY(lm_p_expect_id(p, "reducer"));
  lm_barg *args = lm_p_array(p, 2 * (size_t)ninit, sizeof(lm_barg));
  if (!args) return p->err->code;
  for (uint32_t i = 0; i < ninit; i++) {
    lm_barg *pair;
    uint32_t n;
    lm_tok at = p->tok;
    LM_TRY(lm_p_block_args(p, &pair, &n));
    if (n != 2) return lm_p_errf(p, &at, LOOM_PARSE, "each reducer argument group has two arguments");
    args[i] = pair[0];
    args[ninit + i] = pair[1];
  }
  return lm_p_region(p, b, args, 2 * ninit);
}

/* ---- while ---- */

/* `stablehlo.while(%it = %init, ...) : T, ... [attributes {...}] cond { ... } do { ... }` */
static int pretty_while(lm_parser *p, lm_opb *b) {
  lm_barg *args = NULL;
  uint32_t nargs = 0, cap = 0;
  LM_TRY(lm_p_expect(p, LM_T_LPAREN, "'(' and the loop variables"));
  while (!lm_p_is(p, LM_T_RPAREN)) {
    lm_barg *a = lm_p_push(p, (void **)&args, &nargs, &cap, sizeof(lm_barg));
    if (!a) return p->err->code;
    if (!lm_p_is(p, LM_T_PCT) || p->tok.idx >= 0) return lm_p_expected(p, "a loop variable name");
    a->name = p->tok;
    lm_p_next(p);
    LM_TRY(lm_p_expect(p, LM_T_EQ, "'=' and the loop variable's initial value"));
    LM_TRY(lm_p_operand(p, b));
    if (!lm_p_eat(p, LM_T_COMMA)) break;
  }
  LM_TRY(lm_p_expect(p, LM_T_RPAREN, "',' or ')'"));
  if (nargs) {
    LM_TRY(lm_p_expect(p, LM_T_COLON, "':' and the loop variables' types"));
    lm_tok at = p->tok;
    LM_TRY(lm_p_type_list(p, &b->in_types, &b->nin_types));
    if (b->nin_types != nargs) return lm_p_errf(p, &at, LOOM_PARSE, "%u loop variables but %u types", nargs, b->nin_types);
    for (uint32_t i = 0; i < nargs; i++) args[i].type = b->in_types[i];
  }
  b->out_types = b->in_types;
  b->nout_types = b->nin_types;
  LM_TRY(lm_p_opt_attr_dict(p, b));
  LM_TRY(lm_p_expect_id(p, "cond"));
  LM_TRY(lm_p_region(p, b, args, nargs));
  LM_TRY(lm_p_expect_id(p, "do"));
  return lm_p_region(p, b, args, nargs);
}

/* ---- convolution ---- */

/* `window = {stride = [..], pad = [[l, h], ..], lhs_dilate = [..], rhs_dilate = [..],
 * reverse = [..]}` into window_strides, padding (DENSE Nx2 i64), lhs_dilation, rhs_dilation,
 * window_reversal (INTS of 0/1). */
static int conv_window(lm_parser *p, lm_opb *b) {
  LM_TRY(lm_p_expect(p, LM_T_LBRACE, "'{' starting the window"));
  while (!lm_p_is(p, LM_T_RBRACE)) {
    if (p->tok.k != LM_T_ID) return lm_p_expected(p, "stride, pad, lhs_dilate, rhs_dilate or reverse");
    lm_tok key = p->tok;
    lm_p_next(p);
    LM_TRY(lm_p_expect(p, LM_T_EQ, "'='"));
    lm_attr a;
    if (key.n == 3 && !memcmp(key.s, "pad", 3)) {
      lm_attr rows;
      LM_TRY(lm_p_attr(p, &rows));
      if (rows.kind != LM_ATTR_ARRAY) return lm_p_errf(p, &key, LOOM_PARSE, "pad is a list of [low, high] pairs");
      int64_t *data = lm_p_array(p, 2 * (size_t)rows.n + 1, sizeof(int64_t));
      lm_type *t = lm_p_alloc(p, sizeof *t);
      if (!data || !t) return p->err->code;
      for (uint32_t i = 0; i < rows.n; i++) {
        const lm_attr *r = &rows.items[i];
        if (r->kind != LM_ATTR_ARRAY || r->n != 2 || r->items[0].kind != LM_ATTR_INT || r->items[1].kind != LM_ATTR_INT)
          return lm_p_errf(p, &key, LOOM_PARSE, "pad is a list of [low, high] integer pairs");
        data[2 * i] = r->items[0].i;
        data[2 * i + 1] = r->items[1].i;
      }
      int64_t dims[2] = {rows.n, 2};
      lm_type_tensor(t, LOOM_DTYPE_S64, 2, dims);
      memset(&a, 0, sizeof a);
      a.kind = LM_ATTR_DENSE;
      a.type = t;
      a.data = data;
      a.nbytes = 2 * (size_t)rows.n * sizeof(int64_t);
      LM_TRY(lm_p_opb_attr(p, b, "padding", &a));
    } else {
      const char *name = NULL;
      if (key.n == 6 && !memcmp(key.s, "stride", 6)) name = "window_strides";
      else if (key.n == 10 && !memcmp(key.s, "lhs_dilate", 10)) name = "lhs_dilation";
      else if (key.n == 10 && !memcmp(key.s, "rhs_dilate", 10)) name = "rhs_dilation";
      else if (key.n == 7 && !memcmp(key.s, "reverse", 7)) name = "window_reversal";
      else return lm_p_errf(p, &key, LOOM_PARSE, "unknown window field (expected stride, pad, lhs_dilate, rhs_dilate or reverse)");
      lm_attr list;
      LM_TRY(lm_p_attr(p, &list));
      a = ints_attr();
      if (list.kind != LM_ATTR_ARRAY) return lm_p_errf(p, &key, LOOM_PARSE, "a window field is a list");
      a.n = list.n;
      a.ints = lm_p_array(p, list.n ? list.n : 1, sizeof(int64_t));
      if (!a.ints) return p->err->code;
      for (uint32_t i = 0; i < list.n; i++) {
        if (list.items[i].kind != LM_ATTR_INT && list.items[i].kind != LM_ATTR_BOOL)
          return lm_p_errf(p, &key, LOOM_PARSE, "a window field lists integers");
        a.ints[i] = list.items[i].i;
      }
      LM_TRY(lm_p_opb_attr(p, b, name, &a));
    }
    if (!lm_p_eat(p, LM_T_COMMA)) break;
  }
  return lm_p_expect(p, LM_T_RBRACE, "',' or '}' closing the window");
}

/* `stablehlo.convolution(%a, %b) dim_numbers = [..]x[..]->[..], window = {...} {attrs} : F` */
static int pretty_convolution(lm_parser *p, lm_opb *b) {
  LM_TRY(paren_operands(p, b, "'('"));
  LM_TRY(expect_key(p, "dim_numbers"));
  lm_attr dn;
  LM_TRY(lm_p_conv_dims(p, &dn));
  LM_TRY(lm_p_opb_attr(p, b, "dimension_numbers", &dn));
  LM_TRY(lm_p_expect(p, LM_T_COMMA, "','"));
  LM_TRY(expect_key(p, "window"));
  LM_TRY(conv_window(p, b));
  return attrs_and_functional_sig(p, b);
}

/* ---- dot_general and dot ---- */

static int precision_list(lm_parser *p, lm_opb *b) {
  lm_attr a;
  memset(&a, 0, sizeof a);
  a.kind = LM_ATTR_ARRAY;
  uint32_t cap = 0;
  LM_TRY(lm_p_expect(p, LM_T_LBRACK, "'[' starting the precision list"));
  while (!lm_p_is(p, LM_T_RBRACK)) {
    if (p->tok.k != LM_T_ID) return lm_p_expected(p, "DEFAULT, HIGH or HIGHEST");
    lm_attr *e = lm_p_push(p, (void **)&a.items, &a.n, &cap, sizeof(lm_attr));
    if (!e) return p->err->code;
    e->kind = LM_ATTR_ENUM;
    e->s = lm_p_strndup(p, p->tok.s, p->tok.n);
    if (!e->s) return p->err->code;
    lm_p_next(p);
    if (!lm_p_eat(p, LM_T_COMMA)) break;
  }
  LM_TRY(lm_p_expect(p, LM_T_RBRACK, "',' or ']'"));
  return lm_p_opb_attr(p, b, "precision_config", &a);
}

/* `, precision = [..]` and `, algorithm = <...>` tails. */
static int dot_tail(lm_parser *p, lm_opb *b) {
  while (lm_p_is(p, LM_T_COMMA)) {
    lm_p_next(p);
    if (lm_p_eat_id(p, "precision")) {
      LM_TRY(lm_p_expect(p, LM_T_EQ, "'='"));
      LM_TRY(precision_list(p, b));
    } else if (lm_p_eat_id(p, "algorithm")) {
      LM_TRY(lm_p_expect(p, LM_T_EQ, "'='"));
      /* `<k = v, ...>`: the body of #stablehlo.dot_algorithm */
      LM_TRY(lm_p_expect(p, LM_T_LT, "'<'"));
      lm_attr a;
      lm_attr_struct(&a, "stablehlo.dot_algorithm", NULL, 0);
      uint32_t cap = 0;
      while (!lm_p_is(p, LM_T_GT)) {
        if (p->tok.k != LM_T_ID) return lm_p_expected(p, "an algorithm parameter");
        char *key = lm_p_strndup(p, p->tok.s, p->tok.n);
        if (!key) return p->err->code;
        lm_p_next(p);
        LM_TRY(lm_p_expect(p, LM_T_EQ, "'='"));
        lm_attr v;
        LM_TRY(lm_p_attr(p, &v));
        LM_TRY(lm_p_add_attr(p, &a.fields, &a.n, &cap, key, &v));
        if (!lm_p_eat(p, LM_T_COMMA)) break;
      }
      LM_TRY(lm_p_expect(p, LM_T_GT, "'>'"));
      LM_TRY(lm_p_opb_attr(p, b, "algorithm", &a));
    } else {
      return lm_p_expected(p, "precision or algorithm");
    }
  }
  return 0;
}

/* `[0, 1] x [2, 3]` into two INTS. */
static int dims_pair(lm_parser *p, lm_attr *l, lm_attr *r) {
  LM_TRY(lm_p_int_list(p, l));
  LM_TRY(lm_p_expect_id(p, "x"));
  return lm_p_int_list(p, r);
}

/* `stablehlo.dot_general %a, %b, [batching_dims = [..] x [..],] contracting_dims = [..] x [..]
 * [, precision = [..]] [, algorithm = <..>] {attrs} : F` */
static int pretty_dot_general(lm_parser *p, lm_opb *b) {
  LM_TRY(lm_p_operand(p, b));
  LM_TRY(lm_p_expect(p, LM_T_COMMA, "','"));
  LM_TRY(lm_p_operand(p, b));
  LM_TRY(lm_p_expect(p, LM_T_COMMA, "','"));
  lm_attr lb = ints_attr(), rb = ints_attr(), lc = ints_attr(), rc = ints_attr();
  if (lm_p_eat_id(p, "batching_dims")) {
    LM_TRY(lm_p_expect(p, LM_T_EQ, "'='"));
    LM_TRY(dims_pair(p, &lb, &rb));
    LM_TRY(lm_p_expect(p, LM_T_COMMA, "','"));
  }
  LM_TRY(expect_key(p, "contracting_dims"));
  LM_TRY(dims_pair(p, &lc, &rc));
  lm_attr dn;
  lm_attr_struct(&dn, "stablehlo.dot", NULL, 0);
  uint32_t cap = 0;
  LM_TRY(lm_p_add_attr(p, &dn.fields, &dn.n, &cap, "lhs_batching_dimensions", &lb));
  LM_TRY(lm_p_add_attr(p, &dn.fields, &dn.n, &cap, "rhs_batching_dimensions", &rb));
  LM_TRY(lm_p_add_attr(p, &dn.fields, &dn.n, &cap, "lhs_contracting_dimensions", &lc));
  LM_TRY(lm_p_add_attr(p, &dn.fields, &dn.n, &cap, "rhs_contracting_dimensions", &rc));
  LM_TRY(lm_p_opb_attr(p, b, "dot_dimension_numbers", &dn));
  LM_TRY(dot_tail(p, b));
  return attrs_and_functional_sig(p, b);
}

/* `stablehlo.dot %a, %b[, precision = [..]] {attrs} : F` */
static int pretty_dot(lm_parser *p, lm_opb *b) {
  LM_TRY(lm_p_operand(p, b));
  LM_TRY(lm_p_expect(p, LM_T_COMMA, "','"));
  LM_TRY(lm_p_operand(p, b));
  LM_TRY(dot_tail(p, b));
  return attrs_and_functional_sig(p, b);
}

/* ---- calls ---- */

static int symbol_attr(lm_parser *p, lm_attr *a, bool as_string) {
  if (p->tok.k != LM_T_AT) return lm_p_expected(p, "a symbol (@name)");
  memset(a, 0, sizeof *a);
  a->kind = as_string ? LM_ATTR_STRING : LM_ATTR_SYMBOL;
  a->s = lm_p_strndup(p, p->tok.s, p->tok.n);
  a->n = (uint32_t)p->tok.n;
  if (!a->s) return p->err->code;
  lm_p_next(p);
  return 0;
}

/* `stablehlo.custom_call @target(%a, ...) {attrs} : F`; call_target_name is a STRING. */
static int pretty_custom_call(lm_parser *p, lm_opb *b) {
  lm_attr t;
  if (lm_p_is(p, LM_T_STR)) LM_TRY(lm_p_attr(p, &t));
  else LM_TRY(symbol_attr(p, &t, true));
  LM_TRY(lm_p_opb_attr(p, b, "call_target_name", &t));
  LM_TRY(paren_operands(p, b, "'(' and the operands"));
  return attrs_and_functional_sig(p, b);
}

/* `func.call @f(%a, ...) {attrs} : F` */
static int pretty_call(lm_parser *p, lm_opb *b) {
  lm_attr t;
  LM_TRY(symbol_attr(p, &t, false));
  LM_TRY(lm_p_opb_attr(p, b, "callee", &t));
  LM_TRY(paren_operands(p, b, "'(' and the arguments"));
  return attrs_and_functional_sig(p, b);
}

/* `stablehlo.composite "name" %a, ... {composite_attributes = .., decomposition = @f} : F` */
static int pretty_composite(lm_parser *p, lm_opb *b) {
  if (!lm_p_is(p, LM_T_STR)) return lm_p_expected(p, "the composite's name (a string)");
  lm_attr n;
  LM_TRY(lm_p_attr(p, &n));
  LM_TRY(lm_p_opb_attr(p, b, "name", &n));
  LM_TRY(lm_p_operand_list(p, b));
  return attrs_and_functional_sig(p, b);
}

/* ---- check and interpreter ops ----
 * `check.expect_eq %a, %b : T`, `check.expect_almost_eq %a, %b, tolerance = 0.1 : T`,
 * `check.expect_close %a, %b, max_ulp_difference = 3 : T, T`,
 * `check.expect_eq_const %a, dense<..> : T {attrs}` (value), `check.expect_serialized_eq %a,
 * probe_id = "p" : T`, `interpreter.probe %a, probe_id = "p" : T` (one result, the operand's
 * type), `interpreter.print %a : T`. */
static int pretty_test_op(lm_parser *p, lm_opb *b) {
  bool has_result = b->op.code == LM_OP_INTERPRETER_PROBE;
  LM_TRY(lm_p_operand_list(p, b));
  lm_type *value_type = NULL;
  while (lm_p_eat(p, LM_T_COMMA)) {
    if (lm_p_is_id(p, "dense")) {
      lm_attr v;
      LM_TRY(lm_p_dense(p, &v));
      LM_TRY(lm_p_opb_attr(p, b, "value", &v));
      value_type = v.type;
      continue;
    }
    LM_TRY(bare_named_attr(p, b));
  }
  LM_TRY(lm_p_opt_attr_dict(p, b));
  if (lm_p_eat(p, LM_T_COLON)) {
    lm_tok at = p->tok;
    lm_type *ts;
    uint32_t n;
    LM_TRY(lm_p_type_list(p, &ts, &n));
    if (n == b->op.nin) {
      b->in_types = ts;
    } else if (n == 1) {
      b->in_types = lm_p_array(p, b->op.nin ? b->op.nin : 1, sizeof(lm_type));
      if (!b->in_types) return p->err->code;
      for (uint32_t i = 0; i < b->op.nin; i++) b->in_types[i] = ts[0];
    } else {
      return lm_p_errf(p, &at, LOOM_PARSE, "%u types for %u operands", n, b->op.nin);
    }
    b->nin_types = b->op.nin;
  } else if (value_type && b->op.nin == 1) {
    b->in_types = value_type;
    b->nin_types = 1;
  } else {
    return lm_p_expected(p, "':' and the operand types");
  }
  LM_TRY(lm_p_opt_attr_dict(p, b));
  if (has_result) {
    if (b->op.nin != 1) return lm_p_errf(p, NULL, LOOM_PARSE, "interpreter.probe takes one operand");
    b->out_types = b->in_types;
    b->nout_types = 1;
  }
  return 0;
}

/* ---- chlo ----
 * `chlo.erf %x : T -> T`, `chlo.broadcast_add %a, %b {attrs} : (A, B) -> C`,
 * `chlo.top_k(%x, k = 2) : T -> (A, B)`, `chlo.constant dense<..> : T`. */
static int chlo_types(lm_parser *p, lm_type **ts, uint32_t *n) {
  if (lm_p_is(p, LM_T_LPAREN)) return lm_p_paren_types(p, ts, n);
  return lm_p_type_list(p, ts, n);
}

static int pretty_chlo(lm_parser *p, lm_opb *b) {
  if (b->op.code == LM_OP_CHLO_CONSTANT) {
    lm_attr v;
    LM_TRY(lm_p_opt_attr_dict(p, b));
    LM_TRY(lm_p_attr(p, &v));
    if (v.kind != LM_ATTR_DENSE) return lm_p_expected(p, "dense<...>");
    LM_TRY(lm_p_opb_attr(p, b, "value", &v));
    b->out_types = v.type;
    b->nout_types = 1;
    return 0;
  }
  bool paren = lm_p_eat(p, LM_T_LPAREN);
  LM_TRY(lm_p_operand_list(p, b));
  while (lm_p_eat(p, LM_T_COMMA)) {
    LM_TRY(bare_named_attr(p, b));
  }
  if (paren) LM_TRY(lm_p_expect(p, LM_T_RPAREN, "')'"));
  LM_TRY(lm_p_opt_attr_dict(p, b));
  LM_TRY(lm_p_expect(p, LM_T_COLON, "':' and the op's type"));
  LM_TRY(chlo_types(p, &b->in_types, &b->nin_types));
  LM_TRY(lm_p_expect(p, LM_T_ARROW, "'->' and the result types"));
  return chlo_types(p, &b->out_types, &b->nout_types);
}

/* ---- sdy ---- */

/* `sdy.sharding_constraint %x <@mesh, [{"x"}, {}]> {attrs} : T` (also sdy.reshard) */
static int pretty_sdy_constraint(lm_parser *p, lm_opb *b) {
  LM_TRY(lm_p_operand(p, b));
  lm_attr s;
  LM_TRY(lm_p_sdy_sharding_body(p, &s));
  LM_TRY(lm_p_opb_attr(p, b, "sharding", &s));
  LM_TRY(lm_p_opt_attr_dict(p, b));
  LM_TRY(lm_p_expect(p, LM_T_COLON, "':' and the type"));
  return lm_p_sig_same(p, b);
}

/* `sdy.manual_computation(%a, ...) in_shardings=[..] out_shardings=[..] manual_axes={"x", ...}
 * (%arg: T, ...) { ... sdy.return ... } : F` */
static int pretty_manual_computation(lm_parser *p, lm_opb *b) {
  LM_TRY(paren_operands(p, b, "'(' and the operands"));
  lm_attr a;
  LM_TRY(expect_key(p, "in_shardings"));
  LM_TRY(lm_p_sdy_sharding_list(p, &a));
  LM_TRY(lm_p_opb_attr(p, b, "in_shardings", &a));
  LM_TRY(expect_key(p, "out_shardings"));
  LM_TRY(lm_p_sdy_sharding_list(p, &a));
  LM_TRY(lm_p_opb_attr(p, b, "out_shardings", &a));
  LM_TRY(expect_key(p, "manual_axes"));
  memset(&a, 0, sizeof a);
  a.kind = LM_ATTR_ARRAY;
  uint32_t cap = 0;
  LM_TRY(lm_p_expect(p, LM_T_LBRACE, "'{' and the manual axes"));
  while (!lm_p_is(p, LM_T_RBRACE)) {
    if (!lm_p_is(p, LM_T_STR)) return lm_p_expected(p, "a mesh axis name");
    lm_attr *it = lm_p_push(p, (void **)&a.items, &a.n, &cap, sizeof(lm_attr));
    if (!it) return p->err->code;
    LM_TRY(lm_p_attr(p, it));
    if (!lm_p_eat(p, LM_T_COMMA)) break;
  }
  LM_TRY(lm_p_expect(p, LM_T_RBRACE, "',' or '}'"));
  LM_TRY(lm_p_opb_attr(p, b, "manual_axes", &a));
  lm_barg *args;
  uint32_t nargs;
  LM_TRY(lm_p_block_args(p, &args, &nargs));
  LM_TRY(lm_p_region(p, b, args, nargs));
  return attrs_and_functional_sig(p, b);
}

int lm_p_pretty_op2(lm_parser *p, lm_opb *b) {
  switch (b->op.code) {
    case LM_OP_REDUCE: return pretty_reduce(p, b);
    case LM_OP_WHILE: return pretty_while(p, b);
    case LM_OP_CONVOLUTION: return pretty_convolution(p, b);
    case LM_OP_DOT_GENERAL: return pretty_dot_general(p, b);
    case LM_OP_DOT: return pretty_dot(p, b);
    case LM_OP_CUSTOM_CALL: return pretty_custom_call(p, b);
    case LM_OP_FUNC_CALL: return pretty_call(p, b);
    case LM_OP_COMPOSITE: return pretty_composite(p, b);
    case LM_OP_CHECK_EXPECT_EQ: case LM_OP_CHECK_EXPECT_EQ_CONST: case LM_OP_CHECK_EXPECT_ALMOST_EQ:
    case LM_OP_CHECK_EXPECT_ALMOST_EQ_CONST: case LM_OP_CHECK_EXPECT_CLOSE: case LM_OP_CHECK_EXPECT_SERIALIZED_EQ:
    case LM_OP_INTERPRETER_PROBE:
      return pretty_test_op(p, b);
    case LM_OP_SDY_SHARDING_CONSTRAINT: case LM_OP_SDY_RESHARD: return pretty_sdy_constraint(p, b);
    case LM_OP_SDY_MANUAL_COMPUTATION: return pretty_manual_computation(p, b);
    default: break;
  }
  /* chlo ops share one form (operands, optional `k = v`, `: types -> types`), also the ones Loom
   * has no code for: those parse and are refused by the executor with their name. */
  if (!strncmp(b->op.name, "chlo.", 5)) {
    if (b->op.code != LM_OP_UNKNOWN) return pretty_chlo(p, b);
    lm_pmark mk = lm_p_mark(p);
    if (pretty_chlo(p, b) == 0) return 0;
    lm_p_reset(p, &mk); /* an unknown op with a form of its own: reported as not known */
    lm_err_clear(p->err);
    return 1;
  }
  return 1;
}
