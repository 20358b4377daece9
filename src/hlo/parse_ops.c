/* Ops, regions and blocks: the op statement (`%a, %b:2 = ...`), the generic op form
 * `"dialect.op"(%x) <{props}> ({regions}) {attrs} : (types) -> types`, regions with or without a
 * `^bb0(%a: T, ...)` header, and committing a parsed op into its block with its result values.
 * Pretty forms are delegated to parse_pretty.c; functions and the module to parse_module.c. */
#include <stdio.h>
#include <string.h>
#include "hlo/parse_int.h"

int lm_p_operand(lm_parser *p, lm_opb *b) {
  lm_tok t = p->tok;
  uint32_t v;
  LM_TRY(lm_p_use(p, &v));
  uint32_t *slot = lm_p_push(p, (void **)&b->in, &b->op.nin, &b->capin, sizeof(uint32_t));
  if (!slot) return p->err->code;
  *slot = v;
  lm_arena *saved = lm_p_scratch_on(p);
  lm_tok *ts = lm_p_push(p, (void **)&b->in_toks, &b->nin_toks, &b->capin_toks, sizeof(lm_tok));
  lm_p_scratch_off(p, saved);
  if (!ts) return p->err->code;
  *ts = t;
  return 0;
}

int lm_p_operand_list(lm_parser *p, lm_opb *b) {
  if (!lm_p_is(p, LM_T_PCT)) return 0;
  for (;;) {
    LM_TRY(lm_p_operand(p, b));
    if (!lm_p_is(p, LM_T_COMMA)) return 0;
    lm_pmark mk = lm_p_mark(p);
    lm_p_next(p);
    if (!lm_p_is(p, LM_T_PCT)) { /* the comma starts something else (`dims = ...`) */
      lm_p_reset(p, &mk);
      return 0;
    }
  }
}

int lm_p_opb_attr(lm_parser *p, lm_opb *b, const char *name, const lm_attr *v) {
  return lm_p_add_attr(p, &b->attrs, &b->op.nattrs, &b->capattrs, name, v);
}

int lm_p_block_args(lm_parser *p, lm_barg **args, uint32_t *nargs) {
  *args = NULL;
  *nargs = 0;
  uint32_t cap = 0;
  LM_TRY(lm_p_expect(p, LM_T_LPAREN, "'(' starting block arguments"));
  while (!lm_p_is(p, LM_T_RPAREN)) {
    lm_barg *a = lm_p_push(p, (void **)args, nargs, &cap, sizeof(lm_barg));
    if (!a) return p->err->code;
    if (!lm_p_is(p, LM_T_PCT)) return lm_p_expected(p, "a block argument (%name: type)");
    if (p->tok.idx >= 0) return lm_p_errf(p, NULL, LOOM_PARSE, "a block argument cannot have a '#' index");
    a->name = p->tok;
    lm_p_next(p);
    LM_TRY(lm_p_expect(p, LM_T_COLON, "':' and a type after a block argument"));
    LM_TRY(lm_p_type(p, &a->type));
    if (!lm_p_eat(p, LM_T_COMMA)) break;
  }
  return lm_p_expect(p, LM_T_RPAREN, "',' or ')' after block arguments");
}

/* Creates values for block arguments and binds their names in the current scope. */
static int bind_block_args(lm_parser *p, lm_block *blk, const lm_barg *args, uint32_t nargs) {
  blk->nargs = nargs;
  blk->args = lm_p_array(p, nargs ? nargs : 1, sizeof(uint32_t));
  if (!blk->args) return p->err->code;
  for (uint32_t i = 0; i < nargs; i++) {
    uint32_t v;
    LM_TRY(lm_p_new_values(p, 1, &args[i].type, &v));
    blk->args[i] = v;
    LM_TRY(lm_p_bind(p, &args[i].name, v, 1));
  }
  return 0;
}

int lm_p_parse_op(lm_parser *p, lm_op **ops, uint32_t *nops, uint32_t *capops);

/* Ops up to the closing '}' of a region or function body (not consumed). */
int lm_p_block_ops(lm_parser *p, lm_block *blk) {
  uint32_t cap = 0;
  while (!lm_p_is(p, LM_T_RBRACE)) {
    if (lm_p_is(p, LM_T_CARET))
      return lm_p_errf(p, NULL, LOOM_UNSUPPORTED, "regions with more than one block are not supported");
    if (lm_p_is(p, LM_T_EOF)) return lm_p_expected(p, "'}' closing a region");
    LM_TRY(lm_p_parse_op(p, &blk->ops, &blk->nops, &cap));
  }
  return 0;
}

int lm_p_region(lm_parser *p, lm_opb *b, const lm_barg *args, uint32_t nargs) {
  lm_region *r = lm_p_push(p, (void **)&b->regions, &b->op.nregions, &b->capregions, sizeof(lm_region));
  if (!r) return p->err->code;
  uint32_t ri = b->op.nregions - 1;
  LM_TRY(lm_p_expect(p, LM_T_LBRACE, "'{' starting a region"));
  LM_TRY(lm_p_enter(p));
  uint32_t mark = lm_p_scope_mark(p);
  lm_block *blk = lm_p_alloc(p, sizeof *blk);
  int rc = blk ? 0 : p->err->code;
  if (rc == 0 && lm_p_is(p, LM_T_CARET)) {
    if (args) {
      rc = lm_p_errf(p, NULL, LOOM_PARSE, "this region's arguments are declared before it; no block header expected");
    } else {
      lm_p_next(p);
      lm_barg *hdr = NULL;
      uint32_t nh = 0;
      if (lm_p_is(p, LM_T_LPAREN)) rc = lm_p_block_args(p, &hdr, &nh);
      if (rc == 0) rc = lm_p_expect(p, LM_T_COLON, "':' after a block label");
      if (rc == 0) rc = bind_block_args(p, blk, hdr, nh);
    }
  } else if (rc == 0) {
    rc = bind_block_args(p, blk, args, nargs);
  }
  if (rc == 0) rc = lm_p_block_ops(p, blk);
  lm_p_scope_pop(p, mark);
  lm_p_leave(p);
  if (rc == 0) rc = lm_p_expect(p, LM_T_RBRACE, "'}' closing a region");
  if (rc == 0) {
    r = &b->regions[ri];
    r->nblocks = 1;
    r->blocks = blk;
  }
  return rc;
}

/* The generic form after the op name: `(operands) [<{props}>] [({regions})] [{attrs}] : fn-type`. */
static int parse_generic(lm_parser *p, lm_opb *b) {
  LM_TRY(lm_p_expect(p, LM_T_LPAREN, "'(' and the operands of a generic op"));
  if (!lm_p_is(p, LM_T_RPAREN)) {
    for (;;) {
      LM_TRY(lm_p_operand(p, b));
      if (!lm_p_eat(p, LM_T_COMMA)) break;
    }
  }
  LM_TRY(lm_p_expect(p, LM_T_RPAREN, "',' or ')' after operands"));
  if (lm_p_is(p, LM_T_LBRACK)) return lm_p_errf(p, NULL, LOOM_UNSUPPORTED, "ops with successor blocks are not supported");
  if (lm_p_is(p, LM_T_LT)) {
    lm_p_next(p);
    LM_TRY(lm_p_attr_dict(p, &b->attrs, &b->op.nattrs, &b->capattrs));
    LM_TRY(lm_p_expect(p, LM_T_GT, "'>' closing the properties <{...}>"));
  }
  if (lm_p_is(p, LM_T_LPAREN)) {
    lm_p_next(p);
    for (;;) {
      LM_TRY(lm_p_region(p, b, NULL, 0));
      if (!lm_p_eat(p, LM_T_COMMA)) break;
    }
    LM_TRY(lm_p_expect(p, LM_T_RPAREN, "',' or ')' after regions"));
  }
  if (lm_p_is(p, LM_T_LBRACE)) LM_TRY(lm_p_attr_dict(p, &b->attrs, &b->op.nattrs, &b->capattrs));
  LM_TRY(lm_p_expect(p, LM_T_COLON, "':' and the op's function type"));
  lm_arena *saved = lm_p_scratch_on(p);
  int rc = lm_p_func_type(p, &b->in_types, &b->nin_types, &b->out_types, &b->nout_types);
  lm_p_scratch_off(p, saved);
  return rc;
}

/* Generic spellings whose attributes differ from the pretty normal form: adjusted so both
 * forms give the same IR (ir.h). */
static int normalize_generic(lm_parser *p, lm_opb *b) {
  static const char *const dot_fields[4] = {"lhs_batching_dimensions", "rhs_batching_dimensions",
                                            "lhs_contracting_dimensions", "rhs_contracting_dimensions"};
  for (uint32_t i = 0; i < b->op.nattrs; i++) {
    lm_named_attr *a = &b->attrs[i];
    /* sdy.mesh's sym_name is a string in generic form, a symbol in pretty form */
    if (b->op.code == LM_OP_SDY_MESH && !strcmp(a->name, "sym_name") && a->value.kind == LM_ATTR_STRING)
      a->value.kind = LM_ATTR_SYMBOL;
    /* #stablehlo.dot<...> omits empty lists; the normal form has all four, in a fixed order */
    if (a->value.kind == LM_ATTR_STRUCT && a->value.s && !strcmp(a->value.s, "stablehlo.dot")) {
      lm_named_attr *f = lm_p_array(p, 4, sizeof *f);
      if (!f) return p->err->code;
      for (int k = 0; k < 4; k++) {
        const lm_attr *have = lm_attrs_get(a->value.fields, a->value.n, dot_fields[k]);
        f[k].name = dot_fields[k];
        if (have) f[k].value = *have;
        else f[k].value.kind = LM_ATTR_INTS;
      }
      a->value.fields = f;
      a->value.n = 4;
    }
  }
  return 0;
}

/* Checks operand types against the signature and creates the results. */
static int commit_op(lm_parser *p, lm_opb *b, const lm_tok *names, const uint32_t *counts, uint32_t nnames,
                     uint32_t nnamed, const lm_tok *at) {
  char want[256], got[256], nm[96];
  if (b->nin_types != b->op.nin)
    return lm_p_errf(p, at, LOOM_PARSE, "%s has %u operands but its type lists %u", b->op.name, b->op.nin, b->nin_types);
  for (uint32_t i = 0; i < b->op.nin; i++) {
    const lm_type *have = &p->vtypes[b->in[i]];
    if (!lm_type_equal(have, &b->in_types[i]))
      return lm_p_errf(p, &b->in_toks[i], LOOM_VERIFY, "%s: operand %s has type %s, but the op's signature says %s",
                       b->op.name, lm_tok_describe(&b->in_toks[i], nm, sizeof nm), lm_type_str(have, got, sizeof got),
                       lm_type_str(&b->in_types[i], want, sizeof want));
  }
  if (nnames && nnamed != b->nout_types)
    return lm_p_errf(p, &names[0], LOOM_PARSE, "%u result names for %s, which has %u results", nnamed, b->op.name,
                     b->nout_types);
  uint32_t first;
  LM_TRY(lm_p_new_values(p, b->nout_types, b->out_types, &first));
  b->op.nout = b->nout_types;
  b->op.out = lm_p_array(p, b->op.nout ? b->op.nout : 1, sizeof(uint32_t));
  if (!b->op.out) return p->err->code;
  for (uint32_t i = 0; i < b->op.nout; i++) b->op.out[i] = first + i;
  uint32_t v = first;
  for (uint32_t k = 0; k < nnames; k++) {
    LM_TRY(lm_p_bind(p, &names[k], v, counts[k]));
    v += counts[k];
  }
  b->op.in = b->in;
  b->op.attrs = b->attrs;
  b->op.regions = b->regions;
  return 0;
}

/* `%a, %b:2 =` result names; returns the count of names and of values named. */
static int parse_result_names(lm_parser *p, lm_tok **names, uint32_t **counts, uint32_t *nnames, uint32_t *nvals) {
  uint32_t capn = 0, capc = 0, nc = 0;
  *nnames = *nvals = 0;
  if (!lm_p_is(p, LM_T_PCT)) return 0;
  for (;;) {
    if (!lm_p_is(p, LM_T_PCT)) return lm_p_expected(p, "a result name");
    if (p->tok.idx >= 0) return lm_p_errf(p, NULL, LOOM_PARSE, "a result name cannot have a '#' index");
    lm_tok *t = lm_p_push(p, (void **)names, nnames, &capn, sizeof(lm_tok));
    uint32_t *c = lm_p_push(p, (void **)counts, &nc, &capc, sizeof(uint32_t));
    if (!t || !c) return p->err->code;
    *t = p->tok;
    *c = 1;
    lm_p_next(p);
    if (lm_p_eat(p, LM_T_COLON)) {
      int64_t k;
      lm_tok kt = p->tok;
      if (kt.k != LM_T_INT) return lm_p_expected(p, "the number of results after ':'");
      LM_TRY(lm_p_int(p, &k));
      if (k < 1 || k > (int64_t)LM_PARSE_MAX_LIST) return lm_p_errf(p, &kt, LOOM_PARSE, "bad result count %lld", (long long)k);
      *c = (uint32_t)k;
    }
    *nvals += *c;
    if (*nvals > LM_PARSE_MAX_LIST) return lm_p_errf(p, NULL, LOOM_PARSE, "too many results");
    if (!lm_p_eat(p, LM_T_COMMA)) break;
  }
  return lm_p_expect(p, LM_T_EQ, "'=' after result names");
}

int lm_p_parse_op(lm_parser *p, lm_op **ops, uint32_t *nops, uint32_t *capops) {
  lm_tok *names = NULL;
  uint32_t *counts = NULL, nnames, nvals;
  lm_tok start = p->tok;
  lm_arena *saved = lm_p_scratch_on(p);
  int nrc = parse_result_names(p, &names, &counts, &nnames, &nvals);
  lm_p_scratch_off(p, saved);
  LM_TRY(nrc);
  lm_opb b;
  memset(&b, 0, sizeof b);
  lm_tok nt = p->tok;
  b.op.loc = (lm_loc){p->file, start.line, start.col};
  if (nt.k == LM_T_STR) {
    uint32_t len;
    char *name = lm_p_decode_str(p, &nt, &len);
    if (!name) return p->err->code;
    b.op.name = name;
    b.op.code = (uint16_t)lm_opcode_from_name(name, len);
    lm_p_next(p);
    LM_TRY(parse_generic(p, &b));
    LM_TRY(normalize_generic(p, &b));
  } else if (nt.k == LM_T_ID) {
    const char *s = nt.s;
    size_t n = nt.n;
    if (n == 6 && !memcmp(s, "return", 6)) { s = "func.return"; n = 11; }
    else if (n == 4 && !memcmp(s, "call", 4)) { s = "func.call"; n = 9; }
    b.op.name = lm_p_strndup(p, s, n);
    if (!b.op.name) return p->err->code;
    b.op.code = (uint16_t)lm_opcode_from_name(s, n);
    lm_p_next(p);
    int rc = lm_p_pretty_op(p, &b);
    if (rc == 1) {
      char buf[96];
      return lm_p_errf(p, &nt, LOOM_UNSUPPORTED, "op %s in custom (pretty) form is not known to Loom's parser",
                       lm_tok_describe(&nt, buf, sizeof buf));
    }
    LM_TRY(rc);
  } else {
    return lm_p_expected(p, "an operation");
  }
  LM_TRY(commit_op(p, &b, names, counts, nnames, nvals, &nt));
  lm_op *slot = lm_p_push(p, (void **)ops, nops, capops, sizeof(lm_op));
  if (!slot) return p->err->code;
  *slot = b.op;
  return 0;
}
