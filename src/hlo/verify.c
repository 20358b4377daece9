/* The structural verifier (see verify.h). Works on the IR alone, so a module built by any reader
 * gets the same checks; walks each function once with a per-value "visible" mark. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "hlo/verify.h"

typedef struct vctx {
  const lm_module *m;
  const lm_func **sorted; /* functions by name, for lookups */
  const lm_func *fn;
  uint8_t *state; /* per value: 0 never defined, 1 visible, 2 defined and out of scope */
  lm_err *err;
} vctx;

static int op_fail(vctx *c, const lm_op *op, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int op_fail(vctx *c, const lm_op *op, const char *fmt, ...) {
  char msg[LM_ERR_MSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return lm_errf(c->err, LOOM_VERIFY, "%s:%u:%u: %s: %s", op->loc.file ? op->loc.file : "<unknown>", op->loc.line,
                 op->loc.col, op->name ? op->name : "op", msg);
}

static int fn_fail(vctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fn_fail(vctx *c, const char *fmt, ...) {
  char msg[LM_ERR_MSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  const lm_loc *l = &c->fn->loc;
  return lm_errf(c->err, LOOM_VERIFY, "%s:%u:%u: function @%s: %s", l->file ? l->file : "<unknown>", l->line, l->col,
                 c->fn->name, msg);
}

static bool is_terminator(uint16_t code) {
  return code == LM_OP_FUNC_RETURN || code == LM_OP_RETURN || code == LM_OP_SDY_RETURN;
}

static int define(vctx *c, const lm_op *op, uint32_t v) {
  if (v >= c->fn->nvalues) return op ? op_fail(c, op, "value id %u out of range", v) : fn_fail(c, "value id %u out of range", v);
  if (c->state[v]) return op ? op_fail(c, op, "value %u defined twice", v) : fn_fail(c, "value %u defined twice", v);
  c->state[v] = 1;
  return 0;
}

static int check_types(vctx *c, const lm_op *op, const char *what, const uint32_t *vals, uint32_t n,
                       const lm_type *want, uint32_t nwant, const char *whose) {
  char a[256], b[256];
  if (n != nwant) return op_fail(c, op, "%u %s where %s has %u", n, what, whose, nwant);
  for (uint32_t i = 0; i < n; i++)
    if (!lm_type_equal(&c->fn->value_types[vals[i]], &want[i]))
      return op_fail(c, op, "%s %u is %s but %s expects %s", what, i, lm_type_str(&c->fn->value_types[vals[i]], a, sizeof a),
                     whose, lm_type_str(&want[i], b, sizeof b));
  return 0;
}

static int check_block(vctx *c, const lm_block *b, const lm_op *owner, int depth);

static int cmp_fn(const void *a, const void *b) {
  return strcmp((*(const lm_func *const *)a)->name, (*(const lm_func *const *)b)->name);
}

static const lm_func *find_func(const vctx *c, const char *name) {
  size_t lo = 0, hi = c->m->nfuncs;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    int k = strcmp(c->sorted[mid]->name, name);
    if (k == 0) return c->sorted[mid];
    if (k < 0) lo = mid + 1;
    else hi = mid;
  }
  return NULL;
}

static int check_op(vctx *c, const lm_op *op, int depth) {
  for (uint32_t i = 0; i < op->nin; i++) {
    uint32_t v = op->in[i];
    if (v >= c->fn->nvalues) return op_fail(c, op, "operand %u: value id %u out of range", i, v);
    if (c->state[v] != 1)
      return op_fail(c, op, "operand %u is used %s", i, c->state[v] ? "outside the region that defines it" : "before it is defined");
  }
  for (uint32_t r = 0; r < op->nregions; r++) {
    const lm_region *rg = &op->regions[r];
    if (rg->nblocks != 1) return op_fail(c, op, "region %u has %u blocks; exactly one is supported", r, rg->nblocks);
    LM_TRY(check_block(c, &rg->blocks[0], op, depth + 1));
  }
  for (uint32_t i = 0; i < op->nout; i++) LM_TRY(define(c, op, op->out[i]));
  if (op->code == LM_OP_FUNC_CALL) {
    const lm_attr *callee = lm_op_attr(op, "callee");
    if (!callee || (callee->kind != LM_ATTR_SYMBOL && callee->kind != LM_ATTR_STRING))
      return op_fail(c, op, "missing the callee (@name)");
    const lm_func *f = find_func(c, callee->s);
    if (!f) return op_fail(c, op, "calls @%s, which is not defined in the module", callee->s);
    char whose[300];
    snprintf(whose, sizeof whose, "@%s", f->name);
    LM_TRY(check_types(c, op, "arguments", op->in, op->nin, f->arg_types, f->nargs, whose));
    LM_TRY(check_types(c, op, "results", op->out, op->nout, f->result_types, f->nresults, whose));
  }
  return 0;
}

/* Checks a block; owner is the op whose region it is (NULL for a function body). Values the
 * block defines are visible inside it and out of scope after it. */
static int check_block(vctx *c, const lm_block *b, const lm_op *owner, int depth) {
  if (depth > 1000) return fn_fail(c, "regions nested too deeply");
  for (uint32_t i = 0; i < b->nargs; i++) LM_TRY(define(c, owner, b->args[i]));
  if (b->nops == 0)
    return owner ? op_fail(c, owner, "a region has no ops (it must end with stablehlo.return)")
                 : fn_fail(c, "the body is empty (it must end with func.return)");
  for (uint32_t i = 0; i < b->nops; i++) {
    const lm_op *op = &b->ops[i];
    bool last = i + 1 == b->nops;
    if (is_terminator(op->code) && !last) return op_fail(c, op, "a terminator in the middle of a block");
    if (last && !is_terminator(op->code))
      return op_fail(c, op, "the block ends with this op; it must end with %s", owner ? "stablehlo.return" : "func.return");
    /* a function may also end with stablehlo.return: JAX emits such functions (the comparator
     * of @ApproxTopK), and MLIR accepts any terminator there */
    if (last && !owner && op->code == LM_OP_SDY_RETURN) return op_fail(c, op, "a function body must end with func.return");
    if (last && owner && op->code == LM_OP_FUNC_RETURN) return op_fail(c, op, "func.return inside an op's region");
    if (op->nout && is_terminator(op->code)) return op_fail(c, op, "a terminator has no results");
    LM_TRY(check_op(c, op, depth));
  }
  const lm_op *term = &b->ops[b->nops - 1];
  if (!owner) LM_TRY(check_types(c, term, "returned values", term->in, term->nin, c->fn->result_types, c->fn->nresults,
                                 "the function's signature"));
  /* leaving the block: its values go out of scope */
  for (uint32_t i = 0; i < b->nargs; i++) c->state[b->args[i]] = 2;
  for (uint32_t i = 0; i < b->nops; i++)
    for (uint32_t k = 0; k < b->ops[i].nout; k++) c->state[b->ops[i].out[k]] = 2;
  return 0;
}

static int check_func(vctx *c, const lm_func *fn) {
  c->fn = fn;
  if (fn->body.nblocks != 1) return fn_fail(c, "the body must have exactly one block");
  const lm_block *b = &fn->body.blocks[0];
  if (b->nargs != fn->nargs) return fn_fail(c, "the body has %u arguments where the signature has %u", b->nargs, fn->nargs);
  for (uint32_t i = 0; i < fn->nargs; i++) {
    if (b->args[i] >= fn->nvalues) return fn_fail(c, "argument %u: value id out of range", i);
    if (!lm_type_equal(&fn->value_types[b->args[i]], &fn->arg_types[i]))
      return fn_fail(c, "argument %u's type differs from the signature", i);
  }
  c->state = calloc(fn->nvalues ? fn->nvalues : 1, 1);
  if (!c->state) return lm_errf(c->err, LOOM_NO_MEMORY, "out of host memory");
  int rc = check_block(c, b, NULL, 0);
  free(c->state);
  c->state = NULL;
  return rc;
}

int lm_module_verify(const lm_module *m, lm_err *err) {
  vctx c = {.m = m, .err = err};
  for (uint32_t i = 0; i < m->nfuncs; i++)
    if (!m->funcs[i].name) return lm_errf(err, LOOM_VERIFY, "a function without a name");
  c.sorted = malloc((m->nfuncs ? m->nfuncs : 1) * sizeof *c.sorted);
  if (!c.sorted) return lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  for (uint32_t i = 0; i < m->nfuncs; i++) c.sorted[i] = &m->funcs[i];
  qsort(c.sorted, m->nfuncs, sizeof *c.sorted, cmp_fn);
  int rc = 0;
  for (uint32_t i = 1; i < m->nfuncs && rc == 0; i++)
    if (!strcmp(c.sorted[i]->name, c.sorted[i - 1]->name)) {
      const lm_loc *l = &c.sorted[i]->loc;
      rc = lm_errf(err, LOOM_VERIFY, "%s:%u:%u: function @%s is defined twice", l->file ? l->file : "<unknown>", l->line,
                   l->col, c.sorted[i]->name);
    }
  for (uint32_t i = 0; i < m->nfuncs && rc == 0; i++) rc = check_func(&c, &m->funcs[i]);
  free(c.sorted);
  return rc;
}
