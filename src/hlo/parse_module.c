/* The top level: `module @name attributes {...} { ... }` (or bare functions), functions in pretty
 * (`func.func public @f(%a: T {attrs}) -> (T {attrs}) attributes {...} {...}`) and generic
 * (`"func.func"() <{function_type = ..., sym_name = ...}> ({...}) : () -> ()`) form, `sdy.mesh`
 * and other module-level ops, attribute/type aliases (`#a = ...`, `!t = ...`; `#loc = loc(...)`
 * definitions are skipped), and the entry points lm_parse_module / lm_parse_file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "hlo/bytecode.h"
#include "hlo/parse_int.h"
#include "hlo/verify.h"

typedef struct mod_state {
  uint32_t capfuncs, capops, capattrs;
  bool seen_module;
} mod_state;

/* `%a: T {attrs}` function arguments; creates values 0..n-1 and binds their names. */
static int func_args(lm_parser *p, lm_func *fn, lm_block *blk) {
  uint32_t cap = 0, capd = 0, capb = 0, nd = 0, nb = 0;
  LM_TRY(lm_p_expect(p, LM_T_LPAREN, "'(' starting the function arguments"));
  while (!lm_p_is(p, LM_T_RPAREN)) {
    if (!lm_p_is(p, LM_T_PCT)) return lm_p_expected(p, "a function argument (%name: type)");
    lm_tok name = p->tok;
    if (name.idx >= 0) return lm_p_errf(p, NULL, LOOM_PARSE, "an argument name cannot have a '#' index");
    lm_p_next(p);
    LM_TRY(lm_p_expect(p, LM_T_COLON, "':' and the argument's type"));
    lm_type *t = lm_p_push(p, (void **)&fn->arg_types, &fn->nargs, &cap, sizeof(lm_type));
    lm_attr *d = lm_p_push(p, (void **)&fn->arg_attrs, &nd, &capd, sizeof(lm_attr));
    uint32_t *bv = lm_p_push(p, (void **)&blk->args, &nb, &capb, sizeof(uint32_t));
    if (!t || !d || !bv) return p->err->code;
    LM_TRY(lm_p_type(p, t));
    d->kind = LM_ATTR_DICT;
    if (lm_p_is(p, LM_T_LBRACE)) {
      uint32_t c = 0;
      LM_TRY(lm_p_attr_dict(p, &d->fields, &d->n, &c));
    }
    LM_TRY(lm_p_new_values(p, 1, t, bv));
    LM_TRY(lm_p_bind(p, &name, *bv, 1));
    if (!lm_p_eat(p, LM_T_COMMA)) break;
  }
  blk->nargs = nb;
  return lm_p_expect(p, LM_T_RPAREN, "',' or ')' after the function arguments");
}

/* `-> T` or `-> (T {attrs}, ...)`. */
static int func_results(lm_parser *p, lm_func *fn) {
  if (!lm_p_eat(p, LM_T_ARROW)) return 0;
  uint32_t cap = 0, capd = 0, nd = 0;
  bool paren = lm_p_eat(p, LM_T_LPAREN);
  while (!paren || !lm_p_is(p, LM_T_RPAREN)) {
    lm_type *t = lm_p_push(p, (void **)&fn->result_types, &fn->nresults, &cap, sizeof(lm_type));
    lm_attr *d = lm_p_push(p, (void **)&fn->result_attrs, &nd, &capd, sizeof(lm_attr));
    if (!t || !d) return p->err->code;
    LM_TRY(lm_p_type(p, t));
    d->kind = LM_ATTR_DICT;
    if (paren && lm_p_is(p, LM_T_LBRACE)) {
      uint32_t c = 0;
      LM_TRY(lm_p_attr_dict(p, &d->fields, &d->n, &c));
    }
    if (!paren || !lm_p_eat(p, LM_T_COMMA)) break;
  }
  return paren ? lm_p_expect(p, LM_T_RPAREN, "',' or ')' after the function results") : 0;
}

static int finish_func(lm_parser *p, lm_func *fn) {
  fn->nvalues = p->nvalues;
  fn->value_types = lm_p_array(p, p->nvalues ? p->nvalues : 1, sizeof(lm_type));
  if (fn->value_types && p->nvalues) memcpy(fn->value_types, p->vtypes, p->nvalues * sizeof(lm_type));
  lm_arena_free(&p->scratch); /* everything parse-time of this function */
  lm_arena_init(&p->scratch, 0);
  if (!fn->arg_attrs) fn->arg_attrs = lm_p_array(p, 1, sizeof(lm_attr));
  if (!fn->result_attrs) fn->result_attrs = lm_p_array(p, 1, sizeof(lm_attr));
  if (!fn->value_types) fn->value_types = lm_p_array(p, 1, sizeof(lm_type));
  lm_p_names_reset(p);
  return fn->arg_attrs && fn->result_attrs && fn->value_types ? 0 : p->err->code;
}

/* Pretty function; the current token follows `func.func`. */
static int parse_func(lm_parser *p, lm_func *fn, const lm_tok *kw) {
  fn->loc = (lm_loc){p->file, kw->line, kw->col};
  fn->is_public = true;
  if (lm_p_eat_id(p, "private")) fn->is_public = false;
  else if (!lm_p_eat_id(p, "public")) lm_p_eat_id(p, "nested");
  if (!lm_p_is(p, LM_T_AT)) return lm_p_expected(p, "the function name (@name)");
  fn->name = lm_p_strndup(p, p->tok.s, p->tok.n);
  if (!fn->name) return p->err->code;
  lm_p_next(p);
  lm_p_names_reset(p);
  lm_block *blk = lm_p_alloc(p, sizeof *blk);
  if (!blk) return p->err->code;
  fn->body.nblocks = 1;
  fn->body.blocks = blk;
  LM_TRY(func_args(p, fn, blk));
  LM_TRY(func_results(p, fn));
  if (lm_p_eat_id(p, "attributes")) {
    uint32_t cap = 0;
    LM_TRY(lm_p_attr_dict(p, &fn->attrs, &fn->nattrs, &cap));
  }
  if (!lm_p_is(p, LM_T_LBRACE))
    return lm_p_errf(p, NULL, LOOM_UNSUPPORTED, "function @%s has no body (external functions are not supported)", fn->name);
  lm_p_next(p);
  LM_TRY(lm_p_enter(p));
  int rc = lm_p_block_ops(p, blk);
  lm_p_leave(p);
  LM_TRY(rc);
  LM_TRY(lm_p_expect(p, LM_T_RBRACE, "'}' closing the function body"));
  return finish_func(p, fn);
}

/* Generic `"func.func"() <{...}> ({...}) : () -> ()`; the current token is the name string. */
static int parse_generic_func(lm_parser *p, lm_func *fn) {
  lm_tok at = p->tok;
  lm_p_names_reset(p);
  lm_op *ops = NULL;
  uint32_t nops = 0, cap = 0;
  LM_TRY(lm_p_parse_op(p, &ops, &nops, &cap));
  lm_op *op = &ops[0];
  fn->loc = op->loc;
  fn->is_public = true;
  if (op->nin || op->nout || op->nregions != 1)
    return lm_p_errf(p, &at, LOOM_PARSE, "func.func takes no operands, has no results and one region");
  const lm_attr *ft = NULL;
  uint32_t capa = 0;
  for (uint32_t i = 0; i < op->nattrs; i++) {
    const lm_named_attr *a = &op->attrs[i];
    if (!strcmp(a->name, "sym_name") && (a->value.kind == LM_ATTR_STRING || a->value.kind == LM_ATTR_SYMBOL)) {
      fn->name = a->value.s;
    } else if (!strcmp(a->name, "sym_visibility") && a->value.kind == LM_ATTR_STRING) {
      fn->is_public = strcmp(a->value.s, "private") != 0;
    } else if (!strcmp(a->name, "function_type") && a->value.kind == LM_ATTR_ARRAY && a->value.s &&
               !strcmp(a->value.s, "->")) {
      ft = &a->value;
    } else if ((!strcmp(a->name, "arg_attrs") || !strcmp(a->name, "res_attrs")) && a->value.kind == LM_ATTR_ARRAY) {
      /* applied below, once the counts are known */
    } else {
      LM_TRY(lm_p_add_attr(p, &fn->attrs, &fn->nattrs, &capa, a->name, &a->value));
    }
  }
  if (!fn->name) return lm_p_errf(p, &at, LOOM_PARSE, "func.func needs a sym_name");
  if (!ft) return lm_p_errf(p, &at, LOOM_PARSE, "func.func @%s needs a function_type", fn->name);
  fn->nargs = ft->items[0].n;
  fn->nresults = ft->items[1].n;
  fn->arg_types = lm_p_array(p, fn->nargs ? fn->nargs : 1, sizeof(lm_type));
  fn->result_types = lm_p_array(p, fn->nresults ? fn->nresults : 1, sizeof(lm_type));
  fn->arg_attrs = lm_p_array(p, fn->nargs ? fn->nargs : 1, sizeof(lm_attr));
  fn->result_attrs = lm_p_array(p, fn->nresults ? fn->nresults : 1, sizeof(lm_attr));
  if (!fn->arg_types || !fn->result_types || !fn->arg_attrs || !fn->result_attrs) return p->err->code;
  for (uint32_t i = 0; i < fn->nargs; i++) {
    fn->arg_types[i] = *ft->items[0].items[i].type;
    fn->arg_attrs[i].kind = LM_ATTR_DICT;
  }
  for (uint32_t i = 0; i < fn->nresults; i++) {
    fn->result_types[i] = *ft->items[1].items[i].type;
    fn->result_attrs[i].kind = LM_ATTR_DICT;
  }
  for (uint32_t i = 0; i < op->nattrs; i++) {
    const lm_named_attr *a = &op->attrs[i];
    bool args = !strcmp(a->name, "arg_attrs"), res = !strcmp(a->name, "res_attrs");
    if ((!args && !res) || a->value.kind != LM_ATTR_ARRAY) continue;
    uint32_t want = args ? fn->nargs : fn->nresults;
    if (a->value.n != want)
      return lm_p_errf(p, &at, LOOM_PARSE, "@%s: %s has %u entries for %u %s", fn->name, a->name, a->value.n, want,
                       args ? "arguments" : "results");
    for (uint32_t k = 0; k < want; k++) {
      if (a->value.items[k].kind != LM_ATTR_DICT) return lm_p_errf(p, &at, LOOM_PARSE, "@%s: %s must hold dictionaries", fn->name, a->name);
      (args ? fn->arg_attrs : fn->result_attrs)[k] = a->value.items[k];
    }
  }
  fn->body = op->regions[0];
  return finish_func(p, fn);
}

/* `sdy.mesh @name = <[...]> {attrs}` (pretty); the current token follows `sdy.mesh`. */
static int parse_sdy_mesh(lm_parser *p, lm_op *op, const lm_tok *kw) {
  op->code = LM_OP_SDY_MESH;
  op->name = "sdy.mesh";
  op->loc = (lm_loc){p->file, kw->line, kw->col};
  lm_named_attr *attrs = NULL;
  uint32_t cap = 0;
  if (!lm_p_is(p, LM_T_AT)) return lm_p_expected(p, "the mesh name (@name)");
  lm_attr sym;
  memset(&sym, 0, sizeof sym);
  sym.kind = LM_ATTR_SYMBOL;
  sym.s = lm_p_strndup(p, p->tok.s, p->tok.n);
  sym.n = (uint32_t)p->tok.n;
  if (!sym.s) return p->err->code;
  lm_p_next(p);
  LM_TRY(lm_p_expect(p, LM_T_EQ, "'=' after the mesh name"));
  lm_attr mesh;
  LM_TRY(lm_p_sdy_mesh(p, &mesh));
  LM_TRY(lm_p_add_attr(p, &attrs, &op->nattrs, &cap, "sym_name", &sym));
  LM_TRY(lm_p_add_attr(p, &attrs, &op->nattrs, &cap, "mesh", &mesh));
  if (lm_p_is(p, LM_T_LBRACE)) LM_TRY(lm_p_attr_dict(p, &attrs, &op->nattrs, &cap));
  op->attrs = attrs;
  return 0;
}

static int parse_alias(lm_parser *p, bool is_type) {
  lm_tok name = p->tok;
  lm_p_next(p);
  const char *eq_end = p->tok.stop;
  LM_TRY(lm_p_expect(p, LM_T_EQ, "'=' in an alias definition"));
  /* `#loc3 = loc(...)`: the lexer already skipped the location itself */
  for (const char *c = eq_end; c + 4 <= p->tok.start; c++)
    if (!memcmp(c, "loc(", 4)) return 0;
  if (p->naliases >= 4096) return lm_p_errf(p, &name, LOOM_UNSUPPORTED, "more than 4096 attribute/type aliases");
  lm_alias *al = lm_p_push(p, (void **)&p->aliases, &p->naliases, &p->capaliases, sizeof(lm_alias));
  if (!al) return p->err->code;
  al->name = name.s;
  al->n = name.n;
  al->is_type = is_type;
  if (is_type) return lm_p_type(p, &al->type);
  lm_attr v;
  LM_TRY(lm_p_attr(p, &v));
  al = &p->aliases[p->naliases - 1];
  al->attr = v;
  return 0;
}

/* Items of a module body (or of a file without `module`), until `close` (not consumed). */
static int module_items(lm_parser *p, mod_state *ms, lm_tok_kind close) {
  lm_module *m = p->m;
  while (!lm_p_is(p, close)) {
    lm_tok t = p->tok;
    if (t.k == LM_T_EOF) return lm_p_expected(p, "'}' closing the module");
    if (lm_p_is_id(p, "func.func")) {
      lm_p_next(p);
      lm_func *fn = lm_p_push(p, (void **)&m->funcs, &m->nfuncs, &ms->capfuncs, sizeof(lm_func));
      if (!fn) return p->err->code;
      LM_TRY(parse_func(p, fn, &t));
    } else if (t.k == LM_T_STR && t.n == 9 && !memcmp(t.s, "func.func", 9)) {
      lm_func *fn = lm_p_push(p, (void **)&m->funcs, &m->nfuncs, &ms->capfuncs, sizeof(lm_func));
      if (!fn) return p->err->code;
      LM_TRY(parse_generic_func(p, fn));
    } else if (lm_p_is_id(p, "sdy.mesh")) {
      lm_p_next(p);
      lm_op *op = lm_p_push(p, (void **)&m->ops, &m->nops, &ms->capops, sizeof(lm_op));
      if (!op) return p->err->code;
      LM_TRY(parse_sdy_mesh(p, op, &t));
    } else if (t.k == LM_T_STR && t.n == 8 && !memcmp(t.s, "sdy.mesh", 8)) {
      lm_p_names_reset(p);
      LM_TRY(lm_p_parse_op(p, &m->ops, &m->nops, &ms->capops));
      if (m->ops[m->nops - 1].nin || m->ops[m->nops - 1].nout || m->ops[m->nops - 1].nregions)
        return lm_p_errf(p, &t, LOOM_PARSE, "sdy.mesh takes no operands and has no results");
    } else if (t.k == LM_T_HASH || t.k == LM_T_BANG) {
      LM_TRY(parse_alias(p, t.k == LM_T_BANG));
    } else if (t.k == LM_T_META_BEGIN) {
      while (!lm_p_is(p, LM_T_META_END) && !lm_p_is(p, LM_T_EOF)) lm_p_next(p);
      LM_TRY(lm_p_expect(p, LM_T_META_END, "'#-}' closing the file metadata"));
    } else if (lm_p_is_id(p, "module") || (t.k == LM_T_STR && t.n == 14 && !memcmp(t.s, "builtin.module", 14))) {
      if (ms->seen_module || m->nfuncs || m->nops)
        return lm_p_errf(p, NULL, LOOM_UNSUPPORTED, "only one module per file (or per `// -----` case) is supported");
      ms->seen_module = true;
      bool generic = t.k == LM_T_STR;
      lm_p_next(p);
      if (generic) {
        LM_TRY(lm_p_expect(p, LM_T_LPAREN, "'('"));
        LM_TRY(lm_p_expect(p, LM_T_RPAREN, "')' (a module takes no operands)"));
        if (lm_p_eat(p, LM_T_LT)) {
          LM_TRY(lm_p_attr_dict(p, &m->attrs, &m->nattrs, &ms->capattrs));
          LM_TRY(lm_p_expect(p, LM_T_GT, "'>'"));
        }
        LM_TRY(lm_p_expect(p, LM_T_LPAREN, "'(' and the module's region"));
        LM_TRY(lm_p_expect(p, LM_T_LBRACE, "'{'"));
      } else {
        if (p->tok.k == LM_T_AT) {
          m->name = lm_p_strndup(p, p->tok.s, p->tok.n);
          if (!m->name) return p->err->code;
          lm_p_next(p);
        }
        if (lm_p_eat_id(p, "attributes")) LM_TRY(lm_p_attr_dict(p, &m->attrs, &m->nattrs, &ms->capattrs));
        LM_TRY(lm_p_expect(p, LM_T_LBRACE, "'{' starting the module body"));
      }
      LM_TRY(lm_p_enter(p));
      int rc = module_items(p, ms, LM_T_RBRACE);
      lm_p_leave(p);
      LM_TRY(rc);
      lm_p_next(p); /* '}' */
      if (generic) {
        LM_TRY(lm_p_expect(p, LM_T_RPAREN, "')' after the module's region"));
        if (lm_p_is(p, LM_T_LBRACE)) LM_TRY(lm_p_attr_dict(p, &m->attrs, &m->nattrs, &ms->capattrs));
        lm_type *in, *out;
        uint32_t nin, nout;
        LM_TRY(lm_p_expect(p, LM_T_COLON, "':' and the module's type"));
        LM_TRY(lm_p_func_type(p, &in, &nin, &out, &nout));
        /* the generic module's sym_name property is its name */
        for (uint32_t i = 0; i < m->nattrs; i++)
          if (!strcmp(m->attrs[i].name, "sym_name") && m->attrs[i].value.kind == LM_ATTR_STRING) {
            m->name = m->attrs[i].value.s;
            m->attrs[i] = m->attrs[--m->nattrs];
            break;
          }
      }
    } else {
      return lm_p_expected(p, "a function (func.func), sdy.mesh or a module");
    }
  }
  return 0;
}

int lm_parse_module(const char *text, size_t len, const lm_parse_opts *opts, lm_module **out, lm_err *err) {
  if (lm_is_bytecode(text, len)) return lm_read_bytecode((const uint8_t *)text, len, opts, out, err);
  lm_err local;
  if (!err) err = &local;
  lm_err_clear(err);
  *out = NULL;
  lm_module *m = calloc(1, sizeof *m);
  if (!m) return lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  lm_arena_init(&m->arena, 0);
  lm_parser P;
  memset(&P, 0, sizeof P);
  lm_parser *p = &P;
  p->src = text;
  p->end = text + len;
  p->m = m;
  p->a = &m->arena;
  p->err = err;
  p->max_const = opts && opts->max_const_bytes ? opts->max_const_bytes : ((size_t)1 << 30);
  p->max_total = opts && opts->max_total_bytes ? opts->max_total_bytes : ((size_t)8 << 30);
  p->opts = opts;
  const char *fname = opts && opts->filename ? opts->filename : "<string>";
  p->file = lm_arena_strndup(&m->arena, fname, strlen(fname));
  if (!p->file) {
    lm_module_free(m);
    return lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  }
  lm_arena_init(&p->scratch, 0);
  p->pos = (lm_lexpos){text, text, opts && opts->first_line ? opts->first_line : 1};
  lm_p_next(p);
  mod_state ms = {0};
  int rc = module_items(p, &ms, LM_T_EOF);
  lm_p_names_free(p);
  lm_arena_free(&p->scratch);
  if (rc == 0 && !(opts && opts->no_verify)) rc = lm_module_verify(m, err);
  if (rc < 0) {
    lm_module_free(m);
    return rc;
  }
  *out = m;
  return 0;
}

int lm_parse_file(const char *path, const lm_parse_opts *opts, lm_module **out, lm_err *err) {
  *out = NULL;
  FILE *f = fopen(path, "rb");
  if (!f) return lm_errf(err, LOOM_IO, "cannot open %s", path);
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap);
  int rc = buf ? 0 : lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  while (rc == 0) {
    if (n == cap) {
      if (cap >= ((size_t)1 << 32)) { rc = lm_errf(err, LOOM_UNSUPPORTED, "%s: file larger than 4 GiB", path); break; }
      char *nb = realloc(buf, cap * 2);
      if (!nb) { rc = lm_errf(err, LOOM_NO_MEMORY, "out of host memory reading %s", path); break; }
      buf = nb;
      cap *= 2;
    }
    size_t k = fread(buf + n, 1, cap - n, f);
    n += k;
    if (k == 0) {
      if (ferror(f)) rc = lm_errf(err, LOOM_IO, "error reading %s", path);
      break;
    }
  }
  fclose(f);
  if (rc == 0) {
    lm_parse_opts o = opts ? *opts : (lm_parse_opts){0};
    if (!o.filename) o.filename = path;
    rc = lm_parse_module(buf, n, &o, out, err);
  }
  free(buf);
  return rc;
}

/* A parser over a standalone piece of text that allocates into m (for lm_parse_*_text). */
static void text_parser(lm_parser *p, lm_module *m, const char *text, size_t len, lm_err *err) {
  memset(p, 0, sizeof *p);
  p->src = text;
  p->end = text + len;
  p->m = m;
  p->a = &m->arena;
  p->err = err;
  p->max_const = (size_t)1 << 30;
  p->max_total = (size_t)8 << 30;
  p->file = "<text attribute>";
  lm_arena_init(&p->scratch, 0);
  p->pos = (lm_lexpos){text, text, 1};
  lm_p_next(p);
}

static int text_done(lm_parser *p, int rc) {
  if (rc == 0 && !lm_p_is(p, LM_T_EOF)) rc = lm_p_expected(p, "the end of the attribute");
  lm_p_names_free(p);
  lm_arena_free(&p->scratch);
  return rc;
}

int lm_parse_attr_text(lm_module *m, const char *text, size_t len, lm_attr *out, lm_err *err) {
  lm_parser P;
  text_parser(&P, m, text, len, err);
  return text_done(&P, lm_p_attr(&P, out));
}

int lm_parse_type_text(lm_module *m, const char *text, size_t len, lm_type *out, lm_err *err) {
  lm_parser P;
  text_parser(&P, m, text, len, err);
  return text_done(&P, lm_p_type(&P, out));
}
