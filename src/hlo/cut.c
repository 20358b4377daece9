/* Cutting @main at its collectives (cut.h). Two passes over @main's top-level ops: the first
 * forms the segments and finds what each one reads from before it (its inputs, and with them
 * every value's last use); the second finds what each one must hand on (values used after it)
 * and prints it. */
#include "hlo/cut.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "hlo/print.h"

bool lm_cut_is_collective(uint16_t code) {
  switch (code) {
    case LM_OP_ALL_REDUCE: case LM_OP_ALL_GATHER: case LM_OP_REDUCE_SCATTER: case LM_OP_ALL_TO_ALL:
    case LM_OP_COLLECTIVE_PERMUTE: case LM_OP_COLLECTIVE_BROADCAST: case LM_OP_CROSS_REPLICA_SUM:
    case LM_OP_COLLECTIVE_REDUCE: case LM_OP_SDY_ALL_GATHER: case LM_OP_SDY_ALL_REDUCE: case LM_OP_SDY_ALL_SLICE:
    case LM_OP_SDY_ALL_TO_ALL: case LM_OP_SDY_COLLECTIVE_PERMUTE:
      return true;
    default:
      return false;
  }
}

enum { DEF_NONE = -1, DEF_ARG = -2, DEF_CONST = -3, DEF_PROC = -4 };
enum { OP_COMPUTE, OP_COLL, OP_CONST, OP_PROC };

typedef struct u32vec {
  uint32_t *v;
  uint32_t n, cap;
} u32vec;

static bool push(u32vec *a, uint32_t x) {
  if (a->n == a->cap) {
    uint32_t nc = a->cap ? a->cap * 2 : 8;
    uint32_t *nv = realloc(a->v, nc * sizeof *nv);
    if (!nv) return false;
    a->v = nv;
    a->cap = nc;
  }
  a->v[a->n++] = x;
  return true;
}

/* The first op in r (recursively) that the cut cannot leave inside a region, or NULL. */
static const lm_op *nested_obstacle(const lm_region *r, bool multi, bool *custom) {
  for (uint32_t b = 0; b < r->nblocks; b++)
    for (uint32_t i = 0; i < r->blocks[b].nops; i++) {
      const lm_op *op = &r->blocks[b].ops[i];
      if (lm_cut_is_collective(op->code) || op->code == LM_OP_SEND || op->code == LM_OP_RECV) return op;
      if (multi && (op->code == LM_OP_REPLICA_ID || op->code == LM_OP_PARTITION_ID)) return op;
      if (op->code == LM_OP_CUSTOM_CALL) *custom = true;
      for (uint32_t k = 0; k < op->nregions; k++) {
        const lm_op *x = nested_obstacle(&op->regions[k], multi, custom);
        if (x) return x;
      }
    }
  return NULL;
}

/* Calls f(v) for every value op reads, its regions' reads included (values defined inside them
 * too: the caller ignores what it does not know). */
typedef struct use_ctx {
  const int32_t *def;
  int32_t seg;
  uint32_t *stamp, *cstamp;
  int32_t *last_use;
  u32vec *in, *consts;
  bool oom;
} use_ctx;

static void use(use_ctx *u, uint32_t v) {
  int32_t d = u->def[v];
  if (d == DEF_NONE || d == u->seg) return;
  if (d == DEF_CONST) {
    if (u->cstamp[v] != (uint32_t)u->seg + 1) {
      u->cstamp[v] = (uint32_t)u->seg + 1;
      u->oom |= !push(u->consts, v);
    }
    return;
  }
  if (u->stamp[v] != (uint32_t)u->seg + 1) {
    u->stamp[v] = (uint32_t)u->seg + 1;
    u->oom |= !push(u->in, v);
  }
  if (u->last_use[v] < u->seg) u->last_use[v] = u->seg;
}

static void uses_of(use_ctx *u, const lm_op *op) {
  for (uint32_t i = 0; i < op->nin; i++) use(u, op->in[i]);
  for (uint32_t k = 0; k < op->nregions; k++)
    for (uint32_t b = 0; b < op->regions[k].nblocks; b++)
      for (uint32_t i = 0; i < op->regions[k].blocks[b].nops; i++) uses_of(u, &op->regions[k].blocks[b].ops[i]);
}

/* The functions a segment reaches (symbol references in its ops' attributes: func.call's callee,
 * composite's decomposition, ...; through the functions they call too): marked in fn_used; sets
 * *custom when any of them has a custom call and *effects when one asserts (check ops). */
typedef struct reach_ctx {
  const lm_module *m;
  uint8_t *fn_used;
  bool custom, effects;
} reach_ctx;

static void reach_region(reach_ctx *r, const lm_region *rg);

static void reach_attr(reach_ctx *r, const lm_attr *a, int depth) {
  if (depth > 8) return;
  if (a->kind == LM_ATTR_SYMBOL && a->s) {
    for (uint32_t f = 0; f < r->m->nfuncs; f++)
      if (!r->fn_used[f] && !strcmp(r->m->funcs[f].name, a->s)) {
        r->fn_used[f] = 1;
        reach_region(r, &r->m->funcs[f].body);
      }
  } else if (a->kind == LM_ATTR_ARRAY) {
    for (uint32_t i = 0; i < a->n; i++) reach_attr(r, &a->items[i], depth + 1);
  } else if (a->kind == LM_ATTR_DICT || a->kind == LM_ATTR_STRUCT) {
    for (uint32_t i = 0; i < a->n; i++) reach_attr(r, &a->fields[i].value, depth + 1);
  }
}

static bool has_effects(uint16_t code) {
  return code == LM_OP_CUSTOM_CALL || (code >= LM_OP_CHECK_EXPECT_EQ && code <= LM_OP_CHECK_EXPECT_SERIALIZED_EQ) ||
         code == LM_OP_INTERPRETER_PROBE;
}

static void reach_op(reach_ctx *r, const lm_op *op) {
  if (op->code == LM_OP_CUSTOM_CALL) r->custom = true;
  if (has_effects(op->code)) r->effects = true;
  for (uint32_t i = 0; i < op->nattrs; i++) reach_attr(r, &op->attrs[i].value, 0);
  for (uint32_t k = 0; k < op->nregions; k++) reach_region(r, &op->regions[k]);
}

static void reach_region(reach_ctx *r, const lm_region *rg) {
  for (uint32_t b = 0; b < rg->nblocks; b++)
    for (uint32_t i = 0; i < rg->blocks[b].nops; i++) reach_op(r, &rg->blocks[b].ops[i]);
}

/* The latest phase among the values op reads (its regions' reads too) into *ph; *eff when op or
 * anything inside it asserts or calls out. */
static void max_avail(const lm_op *op, const int32_t *avail, int32_t *ph, bool *eff) {
  if (has_effects(op->code)) *eff = true;
  for (uint32_t i = 0; i < op->nin; i++)
    if (avail[op->in[i]] > *ph) *ph = avail[op->in[i]];
  for (uint32_t k = 0; k < op->nregions; k++)
    for (uint32_t b = 0; b < op->regions[k].nblocks; b++)
      for (uint32_t i = 0; i < op->regions[k].blocks[b].nops; i++) max_avail(&op->regions[k].blocks[b].ops[i], avail, ph, eff);
}

void lm_cut_free(lm_cut *c) {
  if (!c) return;
  for (uint32_t s = 0; s < c->nseg; s++) {
    lm_segment *g = &c->seg[s];
    free(g->in), free(g->out), free(g->out_types), free(g->release), free(g->text);
  }
  free(c->seg);
  free(c->args);
  free(c->results);
  free(c->given);
  free(c);
}

static void put_vals(lm_textbuf *b, const uint32_t *v, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) lm_tb_put(b, "%s%%v%u", i ? ", " : "", v[i]);
}

static void put_val_types(lm_textbuf *b, const lm_func *fn, const uint32_t *v, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) {
    if (i) lm_tb_put(b, ", ");
    lm_tb_put_type(b, &fn->value_types[v[i]]);
  }
}

static char *print_segment(const lm_module *m, const lm_func *main, const lm_block *body, const int32_t *seg_of,
                           int32_t seg, uint32_t first, uint32_t last, const lm_segment *g, const u32vec *consts,
                           const uint32_t *const_op, const uint8_t *fn_used) {
  lm_textbuf b = {0};
  lm_tb_put_module_head(&b, m);
  for (uint32_t f = 0; f < m->nfuncs; f++)
    if (&m->funcs[f] != main && fn_used[f]) lm_tb_put_func(&b, &m->funcs[f]);
  lm_tb_put(&b, "  func.func public @main(");
  for (uint32_t i = 0; i < g->nin; i++) {
    lm_tb_put(&b, "%s%%v%u: ", i ? ", " : "", g->in[i]);
    lm_tb_put_type(&b, &main->value_types[g->in[i]]);
  }
  lm_tb_put(&b, ") -> (");
  put_val_types(&b, main, g->out, g->nout);
  lm_tb_put(&b, ") {\n");
  for (uint32_t k = 0; k < consts->n; k++) lm_tb_put_op(&b, main, &body->ops[const_op[consts->v[k]]], 4);
  for (uint32_t i = first; i <= last; i++)
    if (seg_of[i] == seg) lm_tb_put_op(&b, main, &body->ops[i], 4);
  lm_tb_put(&b, "    \"func.return\"(");
  put_vals(&b, g->out, g->nout);
  lm_tb_put(&b, ") : (");
  put_val_types(&b, main, g->out, g->nout);
  lm_tb_put(&b, ") -> ()\n  }\n}\n");
  if (b.oom) {
    free(b.s);
    return NULL;
  }
  return b.s;
}

int lm_cut_plan(const lm_module *m, bool multi, lm_cut **out, const char **why, lm_err *err) {
  static _Thread_local char tbuf[256]; /* why, when it names an op: valid until the thread's next call */
  *out = NULL;
  *why = NULL;
  const lm_func *main = lm_module_func(m, "main");
  if (!main && m->nfuncs == 1) main = &m->funcs[0];
  if (!main) return *why = "it has no @main", 0;
  if (main->body.nblocks != 1) return *why = "its @main is not one block", 0;
  const lm_block *body = &main->body.blocks[0];
  if (!body->nops) return *why = "its @main is empty", 0;
  const lm_op *ret = &body->ops[body->nops - 1];
  if (ret->code != LM_OP_FUNC_RETURN && ret->code != LM_OP_RETURN) return *why = "its @main does not end in a return", 0;
  for (uint32_t f = 0; f < m->nfuncs; f++) {
    if (&m->funcs[f] == main) continue;
    bool custom = false;
    const lm_op *x = nested_obstacle(&m->funcs[f].body, multi, &custom);
    if (x) {
      snprintf(tbuf, sizeof tbuf, "the function @%s it calls has %s (line %u)", m->funcs[f].name, x->name, x->loc.line);
      return *why = tbuf, 0;
    }
  }
  uint32_t nops = body->nops - 1, nv = main->nvalues;
  uint8_t *cls = calloc(nops ? nops : 1, 1);
  int32_t *def = malloc((nv ? nv : 1) * sizeof *def), *last_use = malloc((nv ? nv : 1) * sizeof *last_use);
  uint32_t *stamp = calloc(nv ? nv : 1, sizeof *stamp), *cstamp = calloc(nv ? nv : 1, sizeof *cstamp);
  uint32_t *const_op = calloc(nv ? nv : 1, sizeof *const_op);
  int32_t *seg_of = malloc((nops ? nops : 1) * sizeof *seg_of);
  lm_cut *c = calloc(1, sizeof *c);
  u32vec *ins = NULL, *consts = NULL;
  uint32_t *first = NULL, *last = NULL, nseg = 0;
  uint8_t *fn_used = NULL;
  int32_t *avail = NULL, *renum = NULL;
  int rc = 0;
  if (!cls || !def || !last_use || !stamp || !cstamp || !const_op || !seg_of || !c) goto oom;
  for (uint32_t v = 0; v < nv; v++) def[v] = DEF_NONE, last_use[v] = -1;
  for (uint32_t i = 0; i < body->nargs; i++) def[body->args[i]] = DEF_ARG;
  /* classify the ops */
  for (uint32_t i = 0; i < nops; i++) {
    const lm_op *op = &body->ops[i];
    seg_of[i] = -1;
    if (op->code == LM_OP_SEND || op->code == LM_OP_RECV) {
      snprintf(tbuf, sizeof tbuf, "it has %s (line %u), which the cut does not carry", op->name, op->loc.line);
      *why = tbuf;
      goto done;
    }
    bool custom = false;
    for (uint32_t k = 0; k < op->nregions; k++) {
      const lm_op *x = nested_obstacle(&op->regions[k], multi, &custom);
      if (x) {
        snprintf(tbuf, sizeof tbuf, "%s (line %u) is inside %s (line %u): control flow with collectives runs whole on "
                 "Loom's executor", x->name, x->loc.line, op->name, op->loc.line);
        *why = tbuf;
        goto done;
      }
    }
    const lm_attr *val = op->code == LM_OP_CONSTANT ? lm_op_attr(op, "value") : NULL;
    if (val && val->kind == LM_ATTR_DENSE && op->nout == 1 && op->nregions == 0) {
      cls[i] = OP_CONST;
      def[op->out[0]] = DEF_CONST;
      const_op[op->out[0]] = i;
      continue;
    }
    if ((op->code == LM_OP_REPLICA_ID || op->code == LM_OP_PARTITION_ID) && op->nout == 1) {
      cls[i] = OP_PROC;
      def[op->out[0]] = DEF_PROC;
      continue;
    }
    cls[i] = lm_cut_is_collective(op->code) ? OP_COLL : OP_COMPUTE;
    if (cls[i] == OP_COLL) c->ncollectives++;
  }
  /* Phases: a compute op runs in phase p = the latest phase among its inputs, where a value made
   * by a collective of phase p is there from phase p + 1 on; a collective runs after the compute
   * of its phase. So every collective goes as early as its inputs allow (all_gathers of
   * parameters together, before the first compute) and the segments are as few as the longest
   * chain of collectives lets them be: compute phase 0, collectives 0, compute 1, ... Every
   * process cuts the same program the same way, so all make their collective calls in the same
   * order. Ops that assert or call out keep their order among themselves. */
  if (!(avail = calloc(nv ? nv : 1, sizeof *avail))) goto oom;
  int32_t maxph = 0, eff_ph = 0;
  for (uint32_t i = 0; i < nops; i++) {
    if (cls[i] != OP_COMPUTE && cls[i] != OP_COLL) continue;
    const lm_op *op = &body->ops[i];
    int32_t ph = 0;
    bool eff = false;
    max_avail(op, avail, &ph, &eff);
    if (cls[i] == OP_COMPUTE && eff) {
      if (ph < eff_ph) ph = eff_ph;
      eff_ph = ph;
    }
    seg_of[i] = 2 * ph + (cls[i] == OP_COLL);
    if (ph > maxph) maxph = ph;
    for (uint32_t k = 0; k < op->nout; k++) avail[op->out[k]] = cls[i] == OP_COLL ? ph + 1 : ph;
  }
  /* phases with ops become segments; neighbours of one kind (collectives of consecutive phases
   * with no compute between) merge, their ops in program order */
  if (!(renum = malloc((size_t)(2 * maxph + 2) * sizeof *renum))) goto oom;
  for (int32_t k = 0; k < 2 * maxph + 2; k++) renum[k] = -1;
  for (uint32_t i = 0; i < nops; i++)
    if (seg_of[i] >= 0) renum[seg_of[i]] = 0;
  int prev = -1;
  for (int32_t k = 0; k < 2 * maxph + 2; k++) {
    if (renum[k] < 0) continue;
    if ((k & 1) != prev) nseg++;
    prev = k & 1;
    renum[k] = (int32_t)nseg - 1;
  }
  for (uint32_t i = 0; i < nops; i++) {
    if (seg_of[i] < 0) continue;
    seg_of[i] = renum[seg_of[i]];
    for (uint32_t k = 0; k < body->ops[i].nout; k++) def[body->ops[i].out[k]] = seg_of[i];
  }
  c->nseg = nseg;
  c->nvalues = nv;
  if (!(c->seg = calloc(nseg ? nseg : 1, sizeof *c->seg)) || !(ins = calloc(nseg ? nseg : 1, sizeof *ins)) ||
      !(consts = calloc(nseg ? nseg : 1, sizeof *consts)) || !(first = calloc(nseg ? nseg : 1, sizeof *first)) ||
      !(last = calloc(nseg ? nseg : 1, sizeof *last)))
    goto oom;
  for (uint32_t i = 0; i < nops; i++) {
    if (seg_of[i] < 0) continue;
    uint32_t s = (uint32_t)seg_of[i];
    lm_segment *g = &c->seg[s];
    if (!g->nops++) {
      first[s] = i;
      g->kind = cls[i] == OP_COLL ? LM_SEG_COLLECTIVE : LM_SEG_COMPUTE;
      g->first_op = body->ops[i].name;
    }
    last[s] = i;
  }
  /* pass 1: inputs and last uses */
  for (uint32_t s = 0; s < nseg; s++) {
    use_ctx u = {.def = def, .seg = (int32_t)s, .stamp = stamp, .cstamp = cstamp, .last_use = last_use,
                 .in = &ins[s], .consts = &consts[s]};
    for (uint32_t i = first[s]; i <= last[s]; i++)
      if (seg_of[i] == (int32_t)s) uses_of(&u, &body->ops[i]);
    if (u.oom) goto oom;
  }
  c->nresults = ret->nin;
  c->nargs = body->nargs;
  if (!(c->results = malloc((ret->nin ? ret->nin : 1) * sizeof *c->results)) ||
      !(c->args = malloc((body->nargs ? body->nargs : 1) * sizeof *c->args)) ||
      !(c->given = calloc(nops + ret->nin + 1, sizeof *c->given)))
    goto oom;
  memcpy(c->args, body->args, body->nargs * sizeof *c->args);
  memcpy(c->results, ret->in, ret->nin * sizeof *c->results);
  for (uint32_t i = 0; i < ret->nin; i++) {
    uint32_t v = ret->in[i];
    if (def[v] == DEF_CONST && cstamp[v] != UINT32_MAX) { /* a returned constant: the runner makes it */
      cstamp[v] = UINT32_MAX;
      const lm_attr *val = lm_op_attr(&body->ops[const_op[v]], "value");
      c->given[c->ngiven++] = (lm_cut_given){.value = v, .what = LM_CUT_CONSTANT, .type = main->value_types[v],
                                             .const_data = val->data, .const_bytes = val->nbytes};
    }
    if (def[v] != DEF_NONE) last_use[v] = (int32_t)nseg;
  }
  for (uint32_t i = 0; i < nops; i++)
    if (cls[i] == OP_PROC && last_use[body->ops[i].out[0]] >= 0)
      c->given[c->ngiven++] = (lm_cut_given){.value = body->ops[i].out[0], .type = main->value_types[body->ops[i].out[0]],
                                             .what = body->ops[i].code == LM_OP_REPLICA_ID ? LM_CUT_REPLICA_ID
                                                                                            : LM_CUT_PARTITION_ID};
  /* pass 2: outputs, releases, the texts */
  if (!(fn_used = malloc(m->nfuncs ? m->nfuncs : 1))) goto oom;
  for (uint32_t s = 0; s < nseg; s++) {
    lm_segment *g = &c->seg[s];
    memset(fn_used, 0, m->nfuncs ? m->nfuncs : 1);
    reach_ctx r = {.m = m, .fn_used = fn_used};
    for (uint32_t i = first[s]; i <= last[s]; i++)
      if (seg_of[i] == (int32_t)s) reach_op(&r, &body->ops[i]);
    if (r.custom && g->kind == LM_SEG_COMPUTE) g->loom_only = "it has custom calls (a bare plugin lacks jaxlib's handlers)";
    g->effects = r.effects;
    u32vec o = {0};
    for (uint32_t i = first[s]; i <= last[s]; i++)
      if (seg_of[i] == (int32_t)s)
        for (uint32_t k = 0; k < body->ops[i].nout; k++)
          if (last_use[body->ops[i].out[k]] > (int32_t)s && !push(&o, body->ops[i].out[k])) {
            free(o.v);
            goto oom;
          }
    g->out = o.v;
    g->nout = o.n;
    g->in = ins[s].v;
    g->nin = ins[s].n;
    ins[s].v = NULL;
    for (uint32_t k = 0; k < g->nin + g->nout; k++) {
      uint32_t v = k < g->nin ? g->in[k] : g->out[k - g->nin];
      if (main->value_types[v].kind != LM_TYPE_TENSOR) {
        snprintf(tbuf, sizeof tbuf, "a token or tuple value lives across a collective (near line %u)",
                 body->ops[first[s]].loc.line);
        *why = tbuf;
        goto done;
      }
    }
    if (!(g->out_types = malloc((g->nout ? g->nout : 1) * sizeof *g->out_types)) ||
        !(g->release = malloc((g->nin ? g->nin : 1) * sizeof *g->release)))
      goto oom;
    for (uint32_t k = 0; k < g->nout; k++) g->out_types[k] = main->value_types[g->out[k]];
    for (uint32_t k = 0; k < g->nin; k++)
      if (last_use[g->in[k]] == (int32_t)s) g->release[g->nrelease++] = g->in[k];
    if (!(g->text = print_segment(m, main, body, seg_of, (int32_t)s, first[s], last[s], g, &consts[s], const_op, fn_used))) goto oom;
  }
  *out = c;
  c = NULL;
  goto done;
oom:
  rc = lm_errf(err, LOOM_NO_MEMORY, "out of host memory cutting the program");
done:
  for (uint32_t s = 0; ins && s < nseg; s++) free(ins[s].v);
  for (uint32_t s = 0; consts && s < nseg; s++) free(consts[s].v);
  free(ins), free(consts), free(first), free(last), free(fn_used), free(avail), free(renum);
  free(cls), free(def), free(last_use), free(stamp), free(cstamp), free(const_op), free(seg_of);
  lm_cut_free(c);
  return rc;
}
