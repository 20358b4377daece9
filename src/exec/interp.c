/* The interpreter: prepares a module into a plan (kernel per op, values to release after each
 * op) and runs functions and regions by walking that plan, one kernel call per op.
 *
 * Liveness: a value defined in a block (op result or block argument) is released right after
 * the last op of that block that uses it, directly or inside a nested region; values used by the
 * block's terminator live until the block ends and are handed to the caller. Values defined
 * outside a block are never released by it (a while body runs many times). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "exec/fusion.h"
#include "exec/interp.h"

/* ---- errors ---- */

int lm_op_err(lm_err *err, const lm_op *op, int code, const char *fmt, ...) {
  char msg[LM_ERR_MSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return lm_errf(err, code, "%s at %s:%u:%u: %s", op->name, op->loc.file ? op->loc.file : "<unknown>",
                 op->loc.line, op->loc.col, msg);
}

int lm_kerr(lm_kctx *k, int code, const char *fmt, ...) {
  char msg[LM_ERR_MSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return lm_op_err(k->err, k->op, code, "%s", msg);
}

int lm_kalloc(lm_kctx *k, const lm_type *t, lm_buffer **out) {
  int rc = lm_buffer_alloc(k->opts->device, t, out, k->err);
  if (rc < 0) lm_err_prefix(k->err, "%s at %s:%u:%u", k->op->name, k->op->loc.file ? k->op->loc.file : "<unknown>",
                            k->op->loc.line, k->op->loc.col);
  return rc;
}

/* ---- planning ---- */

static bool is_terminator(const lm_op *op) {
  return op->code == LM_OP_FUNC_RETURN || op->code == LM_OP_RETURN || op->code == LM_OP_SDY_RETURN;
}

typedef struct plan_builder {
  lm_program *p;
  const lm_func *fn;
  const lm_plan_block **def_block; /* value id -> block that defines it */
  int32_t *last;                   /* value id -> last using step index in its defining block */
  lm_err *err;
} plan_builder;

static int plan_block_init(plan_builder *pb, lm_plan_block *blk, const lm_block *b);

/* Marks every value used by op (operands, and anything used inside its regions) as used at
 * step i of block blk, for values that blk defines. */
static void mark_uses(plan_builder *pb, const lm_plan_block *blk, const lm_op *op, int32_t i) {
  for (uint32_t k = 0; k < op->nin; k++) {
    uint32_t v = op->in[k];
    if (pb->def_block[v] == blk && pb->last[v] < i) pb->last[v] = i;
  }
  for (uint32_t r = 0; r < op->nregions; r++)
    for (uint32_t b = 0; b < op->regions[r].nblocks; b++) {
      const lm_block *nb = &op->regions[r].blocks[b];
      for (uint32_t j = 0; j < nb->nops; j++) mark_uses(pb, blk, &nb->ops[j], i);
    }
}

static void mark_step_uses(plan_builder *pb, const lm_plan_block *blk, const lm_plan_op *po, int32_t i) {
  if (!po->fusion) { mark_uses(pb, blk, po->op, i); return; }
  for (uint32_t k = 0; k < po->nin; k++) {
    uint32_t v = po->in[k];
    if (pb->def_block[v] == blk && pb->last[v] < i) pb->last[v] = i;
  }
}

/* Number of uses of value v by ops of block b (nested regions included); *user gets the index
 * in b of the (last) op using it directly, or -1 when the use is nested or the terminator's. */
static uint32_t count_uses(const lm_block *b, uint32_t v, int32_t *user, bool top) {
  uint32_t n = 0;
  for (uint32_t i = 0; i < b->nops; i++) {
    const lm_op *op = &b->ops[i];
    for (uint32_t k = 0; k < op->nin; k++)
      if (op->in[k] == v) {
        n++;
        if (top && user) *user = i + 1 < b->nops ? (int32_t)i : -1;
      }
    for (uint32_t r = 0; r < op->nregions; r++)
      for (uint32_t j = 0; j < op->regions[r].nblocks; j++) {
        uint32_t m = count_uses(&op->regions[r].blocks[j], v, NULL, false);
        if (m && top && user) *user = -1;
        n += m;
      }
  }
  return n;
}

/* Whether dot op d (in b) feeds only transpose op t, which swaps the dot's lhs-free and rhs-free
 * dims (keeping batch dims): then transpose(dot(l, r)) == dot(r, l). */
static bool dot_then_transpose(const lm_func *fn, const lm_op *d, const lm_op *t) {
  if (t->code != LM_OP_TRANSPOSE || t->nin != 1 || t->nout != 1 || d->nin != 2 || d->nout != 1) return false;
  const lm_type *lt = &fn->value_types[d->in[0]], *rt = &fn->value_types[d->in[1]];
  const lm_type *dt = &fn->value_types[d->out[0]], *tt = &fn->value_types[t->out[0]];
  if (lt->kind != LM_TYPE_TENSOR || rt->kind != LM_TYPE_TENSOR || dt->kind != LM_TYPE_TENSOR || tt->kind != LM_TYPE_TENSOR)
    return false;
  int nb = 0, nc = 1;
  if (d->code == LM_OP_DOT_GENERAL) {
    const lm_attr *s = lm_op_attr(d, "dot_dimension_numbers");
    if (!s || s->kind != LM_ATTR_STRUCT) return false;
    int64_t tmp[LM_MAX_RANK];
    const lm_attr *f = lm_attrs_get(s->fields, s->n, "lhs_batching_dimensions");
    nb = f ? lm_attr_ints(f, tmp, LM_MAX_RANK) : 0;
    f = lm_attrs_get(s->fields, s->n, "lhs_contracting_dimensions");
    nc = f ? lm_attr_ints(f, tmp, LM_MAX_RANK) : 0;
    if (nb < 0 || nc < 0) return false;
  }
  int nl = lt->rank - nb - nc, nr = rt->rank - nb - nc;
  if (nl < 0 || nr < 0 || dt->rank != nb + nl + nr || tt->rank != dt->rank) return false;
  int64_t perm[LM_MAX_RANK];
  if (lm_attr_ints(lm_op_attr(t, "permutation"), perm, LM_MAX_RANK) != dt->rank) return false;
  for (int i = 0; i < nb; i++)
    if (perm[i] != i) return false;
  for (int i = 0; i < nr; i++)
    if (perm[nb + i] != nb + nl + i) return false;
  for (int i = 0; i < nl; i++)
    if (perm[nb + nr + i] != nb + i) return false;
  for (int i = 0; i < dt->rank; i++)
    if (tt->dims[i] != dt->dims[perm[i]] || tt->dtype != dt->dtype) return false;
  return true;
}

static int plan_block_init(plan_builder *pb, lm_plan_block *blk, const lm_block *b) {
  lm_arena *a = &pb->p->arena;
  blk->b = b;
  if (b->nops == 0 || !is_terminator(&b->ops[b->nops - 1]))
    return lm_errf(pb->err, LOOM_VERIFY, "block in function @%s does not end with a return", pb->fn->name);

  /* Steps: ops outside groups, and each fused group at its last member. */
  lm_fusion_plan fp;
  LM_TRY(lm_fusion_plan_block(b, pb->fn, !pb->p->opts.no_fusion, a, &fp, pb->err));
  /* dot_general + transpose pairs computed as one transposed dot */
  int32_t *swap_to = lm_arena_array(a, b->nops, sizeof *swap_to);
  bool *skip = lm_arena_array(a, b->nops, sizeof *skip);
  if (!swap_to || !skip) return lm_errf(pb->err, LOOM_NO_MEMORY, "out of host memory");
  for (uint32_t i = 0; i < b->nops; i++) swap_to[i] = -1;
  for (uint32_t i = 0; i + 1 < b->nops; i++) {
    const lm_op *op = &b->ops[i];
    if ((op->code != LM_OP_DOT_GENERAL && op->code != LM_OP_DOT) || op->nout != 1 || fp.group_of[i] >= 0) continue;
    int32_t user = -1;
    if (count_uses(b, op->out[0], &user, true) != 1 || user < 0 || fp.group_of[user] >= 0) continue;
    if (!dot_then_transpose(pb->fn, op, &b->ops[user])) continue;
    swap_to[i] = user;
    skip[user] = true;
  }
  uint32_t nsteps = 0;
  for (uint32_t i = 0; i < b->nops; i++) {
    int32_t g = fp.group_of[i];
    if (skip[i]) continue;
    if (g < 0) nsteps++;
    else if (fp.groups[g].members[fp.groups[g].nmembers - 1] == &b->ops[i] && fp.groups[g].nout > 0) nsteps++;
  }
  blk->nops = nsteps;
  blk->ops = lm_arena_array(a, nsteps, sizeof *blk->ops);
  if (!blk->ops) return lm_errf(pb->err, LOOM_NO_MEMORY, "out of host memory");
  uint32_t s = 0;
  for (uint32_t i = 0; i < b->nops; i++) {
    const lm_op *op = &b->ops[i];
    int32_t g = fp.group_of[i];
    lm_plan_op *po = &blk->ops[s];
    if (skip[i]) continue;
    if (g < 0) {
      po->op = op;
      po->nin = op->nin;
      po->in = op->in;
      po->nout = op->nout;
      po->out = op->out;
      if (swap_to[i] >= 0) {
        po->out = b->ops[swap_to[i]].out;
        po->flags |= LM_STEP_DOT_TRANSPOSED;
      }
      s++;
    } else if (fp.groups[g].members[fp.groups[g].nmembers - 1] == op && fp.groups[g].nout > 0) {
      const lm_fusion *f = &fp.groups[g];
      po->op = op;
      po->fusion = f;
      po->nin = f->nin;
      po->in = f->in;
      po->nout = f->nout;
      po->out = f->out;
      s++;
    }
  }

  /* Definitions first, so uses can be attributed to this block. */
  for (uint32_t k = 0; k < b->nargs; k++) {
    pb->def_block[b->args[k]] = blk;
    pb->last[b->args[k]] = -1;
  }
  for (uint32_t i = 0; i < nsteps; i++)
    for (uint32_t k = 0; k < blk->ops[i].nout; k++) {
      pb->def_block[blk->ops[i].out[k]] = blk;
      pb->last[blk->ops[i].out[k]] = (int32_t)i; /* unused results die right after their step */
    }
  /* Nested regions (they may reuse pb->last for their own values; ours are unaffected). */
  for (uint32_t i = 0; i < nsteps; i++) {
    lm_plan_op *po = &blk->ops[i];
    const lm_op *op = po->op;
    if (po->fusion || !op->nregions) continue;
    po->regions = lm_arena_array(a, op->nregions, sizeof *po->regions);
    if (!po->regions) return lm_errf(pb->err, LOOM_NO_MEMORY, "out of host memory");
    for (uint32_t r = 0; r < op->nregions; r++) {
      if (op->regions[r].nblocks != 1)
        return lm_op_err(pb->err, op, LOOM_VERIFY, "region %u has %u blocks; exactly one is supported", r,
                         op->regions[r].nblocks);
      LM_TRY(plan_block_init(pb, &po->regions[r], &op->regions[r].blocks[0]));
    }
  }
  for (uint32_t i = 0; i < nsteps; i++) mark_step_uses(pb, blk, &blk->ops[i], (int32_t)i);

  /* Release lists: values whose last use is step i (terminator uses: released at block end). */
  uint32_t *count = calloc(nsteps, sizeof *count);
  if (!count) return lm_errf(pb->err, LOOM_NO_MEMORY, "out of host memory");
  uint32_t nvals = pb->fn->nvalues;
  for (uint32_t v = 0; v < nvals; v++)
    if (pb->def_block[v] == blk && pb->last[v] >= 0 && (uint32_t)pb->last[v] < nsteps - 1) count[pb->last[v]]++;
  for (uint32_t i = 0; i < nsteps; i++) {
    blk->ops[i].release = lm_arena_array(a, count[i] ? count[i] : 1, sizeof(uint32_t));
    if (!blk->ops[i].release) { free(count); return lm_errf(pb->err, LOOM_NO_MEMORY, "out of host memory"); }
  }
  for (uint32_t v = 0; v < nvals; v++)
    if (pb->def_block[v] == blk && pb->last[v] >= 0 && (uint32_t)pb->last[v] < nsteps - 1) {
      lm_plan_op *po = &blk->ops[pb->last[v]];
      po->release[po->nrelease++] = v;
    }
  free(count);
  return 0;
}

/* Resolves kernels and runs verifiers for every op of a block, recursively. Ops inside fused
 * groups were checked when their program was built. */
static int plan_resolve(plan_builder *pb, lm_plan_block *blk) {
  for (uint32_t i = 0; i < blk->nops; i++) {
    lm_plan_op *po = &blk->ops[i];
    const lm_op *op = po->op;
    if (po->fusion) {
      /* members were compiled into the group's program; still run their verifiers */
      for (uint32_t m = 0; m < po->fusion->nmembers; m++) {
        const lm_op *mo = po->fusion->members[m];
        const lm_kernel_info *ki = lm_kernel_get((lm_opcode)mo->code);
        if (ki && ki->verify) LM_TRY(ki->verify(mo, pb->fn, pb->err));
      }
      continue;
    }
    if (i + 1 < blk->nops || !is_terminator(op)) {
      if (is_terminator(op)) return lm_op_err(pb->err, op, LOOM_VERIFY, "return in the middle of a block");
      po->k = lm_kernel_get((lm_opcode)op->code);
      if (!po->k || !po->k->fn)
        return lm_op_err(pb->err, op, LOOM_UNSUPPORTED, "op '%s' is not supported by the CPU executor yet", op->name);
      if (po->k->verify) LM_TRY(po->k->verify(op, pb->fn, pb->err));
    }
    for (uint32_t r = 0; r < op->nregions; r++) LM_TRY(plan_resolve(pb, &po->regions[r]));
  }
  return 0;
}

int lm_program_create_opts(lm_module *m, const lm_program_opts *opts, lm_program **out, lm_err *err) {
  *out = NULL;
  lm_kernels_init();
  lm_program *p = calloc(1, sizeof *p);
  if (!p) { lm_module_free(m); return lm_errf(err, LOOM_NO_MEMORY, "out of host memory"); }
  p->m = m;
  if (opts) p->opts = *opts;
  lm_arena_init(&p->arena, 0);
  p->nfuncs = m->nfuncs;
  p->funcs = lm_arena_array(&p->arena, m->nfuncs ? m->nfuncs : 1, sizeof *p->funcs);
  int rc = p->funcs ? 0 : lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  for (uint32_t f = 0; rc == 0 && f < m->nfuncs; f++) {
    const lm_func *fn = &m->funcs[f];
    plan_builder pb = {.p = p, .fn = fn, .err = err};
    pb.def_block = calloc(fn->nvalues ? fn->nvalues : 1, sizeof *pb.def_block);
    pb.last = calloc(fn->nvalues ? fn->nvalues : 1, sizeof *pb.last);
    p->funcs[f].fn = fn;
    if (!pb.def_block || !pb.last) rc = lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
    else if (fn->body.nblocks != 1) rc = lm_errf(err, LOOM_VERIFY, "function @%s must have one block", fn->name);
    else rc = plan_block_init(&pb, &p->funcs[f].body, &fn->body.blocks[0]);
    if (rc == 0) rc = plan_resolve(&pb, &p->funcs[f].body);
    free(pb.def_block);
    free(pb.last);
  }
  if (rc < 0) { lm_program_destroy(p); return rc; }
  *out = p;
  return 0;
}

int lm_program_create(lm_module *m, lm_program **out, lm_err *err) {
  lm_program_opts o = {0};
  const char *nf = getenv("LOOM_NO_FUSION");
  if (nf && *nf && strcmp(nf, "0") != 0) o.no_fusion = true;
  return lm_program_create_opts(m, &o, out, err);
}

void lm_program_destroy(lm_program *p) {
  if (!p) return;
  lm_arena_free(&p->arena);
  lm_module_free(p->m);
  free(p);
}

const lm_module *lm_program_module(const lm_program *p) { return p->m; }

const lm_plan_func *lm_program_func(const lm_program *p, const char *name) {
  for (uint32_t i = 0; i < p->nfuncs; i++)
    if (strcmp(p->funcs[i].fn->name, name) == 0) return &p->funcs[i];
  return NULL;
}

/* ---- running ---- */

static void release_frame(lm_buffer **frame, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) { lm_buffer_release(frame[i]); frame[i] = NULL; }
}

/* Runs the ops of blk (all but the terminator) in frame; on success the terminator's operands are
 * returned as new references in results[nresults]. Values blk defines are released at their last
 * use, and all of them by the time this returns. */
static int run_block(lm_run_state *rs, const lm_plan_func *pf, const lm_plan_block *blk, lm_buffer **frame,
                     lm_buffer **results, uint32_t nresults) {
  const lm_func *fn = pf->fn;
  int rc = 0;
  lm_buffer *inbuf[16], *outbuf[16];
  lm_buffer **in = inbuf, **out = outbuf;
  uint32_t i;
  for (i = 0; i + 1 < blk->nops; i++) {
    const lm_plan_op *po = &blk->ops[i];
    const lm_op *op = po->op;
    uint32_t nin = po->nin, nout = po->nout;
    if (rs->opts->cancel && *rs->opts->cancel) { rc = lm_op_err(rs->err, op, LOOM_CANCELLED, "run cancelled"); break; }
    if (nin > 16 || nout > 16) {
      if (in != inbuf) free(in);
      if (out != outbuf) free(out);
      in = nin > 16 ? malloc(nin * sizeof *in) : inbuf;
      out = nout > 16 ? malloc(nout * sizeof *out) : outbuf;
      if (!in || !out) { rc = lm_errf(rs->err, LOOM_NO_MEMORY, "out of host memory"); break; }
    }
    for (uint32_t k = 0; k < nin; k++) {
      in[k] = frame[po->in[k]];
      if (!in[k]) { rc = lm_op_err(rs->err, op, LOOM_INTERNAL, "operand %u has no value", k); break; }
    }
    if (rc) break;
    memset(out, 0, nout * sizeof *out);
    lm_kctx k = {.rs = rs, .prog = rs->prog, .fn = fn, .op = op, .opts = rs->opts, .err = rs->err, .pop = po,
                 .pf = pf, .frame = frame};
    if (po->fusion || !(po->k->flags & LM_KF_OWN_OUTPUTS))
      for (uint32_t j = 0; j < nout && rc == 0; j++) rc = lm_kalloc(&k, &fn->value_types[po->out[j]], &out[j]);
    if (rc == 0) rc = po->fusion ? lm_fusion_run(&k, po->fusion, in, out) : po->k->fn(&k, in, out);
    if (rc == 0)
      for (uint32_t j = 0; j < nout; j++)
        if (!out[j]) { rc = lm_op_err(rs->err, op, LOOM_INTERNAL, "kernel produced no result %u", j); break; }
    if (rc < 0) {
      for (uint32_t j = 0; j < nout; j++) lm_buffer_release(out[j]);
      break;
    }
    for (uint32_t j = 0; j < nout; j++) {
      lm_buffer_release(frame[po->out[j]]); /* a region run again overwrites its previous values */
      frame[po->out[j]] = out[j];
    }
    for (uint32_t r = 0; r < po->nrelease; r++) {
      lm_buffer_release(frame[po->release[r]]);
      frame[po->release[r]] = NULL;
    }
  }
  if (in != inbuf) free(in);
  if (out != outbuf) free(out);
  const lm_op *term = blk->ops[blk->nops - 1].op;
  if (rc == 0 && term->nin != nresults)
    rc = lm_op_err(rs->err, term, LOOM_VERIFY, "returns %u values where %u are expected", term->nin, nresults);
  for (uint32_t k = 0; rc == 0 && k < nresults; k++) {
    results[k] = lm_buffer_retain(frame[term->in[k]]);
    if (!results[k]) rc = lm_op_err(rs->err, term, LOOM_INTERNAL, "returned value %u has no value", k);
  }
  if (rc < 0)
    for (uint32_t k = 0; k < nresults; k++) { lm_buffer_release(results[k]); results[k] = NULL; }
  /* Drop everything this block defined that is still held. */
  const lm_block *b = blk->b;
  for (uint32_t a = 0; a < b->nargs; a++) { lm_buffer_release(frame[b->args[a]]); frame[b->args[a]] = NULL; }
  for (uint32_t j = 0; j < b->nops; j++)
    for (uint32_t o = 0; o < b->ops[j].nout; o++) {
      uint32_t v = b->ops[j].out[o];
      lm_buffer_release(frame[v]);
      frame[v] = NULL;
    }
  return rc;
}

static int check_args(lm_err *err, const lm_func *fn, lm_buffer *const *args, uint32_t nargs) {
  if (nargs != fn->nargs)
    return lm_errf(err, LOOM_INVALID_ARGUMENT, "@%s takes %u arguments, %u given", fn->name, fn->nargs, nargs);
  for (uint32_t i = 0; i < nargs; i++) {
    if (!args[i]) return lm_errf(err, LOOM_INVALID_ARGUMENT, "@%s: argument %u is missing", fn->name, i);
    if (!lm_type_equal(&args[i]->type, &fn->arg_types[i])) {
      char want[256], got[256];
      lm_type b = args[i]->type;
      b.tuple = fn->arg_types[i].tuple; /* buffers do not keep tuple element types */
      if (args[i]->type.kind == LM_TYPE_TUPLE && b.ntuple == fn->arg_types[i].ntuple) continue;
      return lm_errf(err, LOOM_SHAPE_MISMATCH, "@%s: argument %u is %s, expected %s", fn->name, i,
                     lm_type_str(&args[i]->type, got, sizeof got), lm_type_str(&fn->arg_types[i], want, sizeof want));
    }
  }
  return 0;
}

static int call_func(lm_run_state *rs, const lm_plan_func *pf, lm_buffer *const *args, uint32_t nargs,
                     lm_buffer **results, uint32_t nresults) {
  const lm_func *fn = pf->fn;
  LM_TRY(check_args(rs->err, fn, args, nargs));
  if (nresults != fn->nresults)
    return lm_errf(rs->err, LOOM_INVALID_ARGUMENT, "@%s returns %u values, %u expected", fn->name, fn->nresults,
                   nresults);
  if (rs->depth >= 256) return lm_errf(rs->err, LOOM_VERIFY, "call depth over 256 at @%s (recursion?)", fn->name);
  lm_buffer **frame = calloc(fn->nvalues ? fn->nvalues : 1, sizeof *frame);
  if (!frame) return lm_errf(rs->err, LOOM_NO_MEMORY, "out of host memory");
  const lm_block *b = pf->body.b;
  for (uint32_t i = 0; i < nargs; i++) frame[b->args[i]] = lm_buffer_retain(args[i]);
  rs->depth++;
  int rc = run_block(rs, pf, &pf->body, frame, results, nresults);
  rs->depth--;
  release_frame(frame, fn->nvalues);
  free(frame);
  return rc;
}

int lm_program_run(const lm_program *p, const char *fn, const lm_run_opts *opts, lm_buffer *const *args,
                   uint32_t nargs, lm_buffer **results, uint32_t nresults, lm_err *err) {
  const char *name = fn ? fn : "main";
  const lm_plan_func *pf = lm_program_func(p, name);
  if (!pf) return lm_errf(err, LOOM_NOT_FOUND, "no function @%s in the program", name);
  if (!opts || !opts->device) return lm_errf(err, LOOM_INVALID_ARGUMENT, "lm_program_run needs a device");
  for (uint32_t i = 0; i < nresults; i++) results[i] = NULL;
  lm_run_opts o = *opts;
  if (o.num_replicas <= 0) o.num_replicas = lm_attr_int_or(lm_module_attr(p->m, "mhlo.num_replicas"), 1);
  if (o.num_partitions <= 0) o.num_partitions = lm_attr_int_or(lm_module_attr(p->m, "mhlo.num_partitions"), 1);
  lm_run_state rs = {.prog = p, .opts = &o, .err = err, .coll_seq = o.coll_seq ? *o.coll_seq : 0};
  int rc = call_func(&rs, pf, args, nargs, results, nresults);
  if (o.coll_seq) *o.coll_seq = rs.coll_seq;
  return rc;
}

int lm_exec_region(lm_kctx *k, uint32_t r, lm_buffer *const *args, uint32_t nargs, lm_buffer **results,
                   uint32_t nresults) {
  const lm_op *op = k->op;
  if (r >= op->nregions) return lm_kerr(k, LOOM_INTERNAL, "no region %u", r);
  const lm_plan_block *blk = &k->pop->regions[r];
  const lm_block *b = blk->b;
  if (nargs != b->nargs) return lm_kerr(k, LOOM_VERIFY, "region %u takes %u arguments, %u given", r, b->nargs, nargs);
  for (uint32_t i = 0; i < nresults; i++) results[i] = NULL;
  for (uint32_t i = 0; i < nargs; i++) {
    lm_buffer_release(k->frame[b->args[i]]);
    k->frame[b->args[i]] = lm_buffer_retain(args[i]);
  }
  return run_block(k->rs, k->pf, blk, k->frame, results, nresults);
}

int lm_exec_call(lm_kctx *k, const char *name, lm_buffer *const *args, uint32_t nargs, lm_buffer **results,
                 uint32_t nresults) {
  const lm_plan_func *pf = lm_program_func(k->prog, name);
  if (!pf) return lm_kerr(k, LOOM_NOT_FOUND, "no function @%s in the module", name);
  int rc = call_func(k->rs, pf, args, nargs, results, nresults);
  if (rc < 0 && k->err && !strstr(k->err->msg, " at ")) lm_err_prefix(k->err, "in call to @%s", name);
  return rc;
}

lm_opcode lm_region_simple_binop(const lm_op *op, uint32_t r, const lm_func *fn) {
  if (r >= op->nregions || op->regions[r].nblocks != 1) return LM_OP_UNKNOWN;
  const lm_block *b = &op->regions[r].blocks[0];
  if (b->nargs != 2 || b->nops != 2) return LM_OP_UNKNOWN;
  const lm_op *x = &b->ops[0], *ret = &b->ops[1];
  if (x->nin != 2 || x->nout != 1 || x->nregions || ret->nin != 1 || ret->in[0] != x->out[0]) return LM_OP_UNKNOWN;
  bool direct = x->in[0] == b->args[0] && x->in[1] == b->args[1];
  bool swapped = x->in[0] == b->args[1] && x->in[1] == b->args[0];
  if (!direct && !swapped) return LM_OP_UNKNOWN;
  switch (x->code) {
    case LM_OP_ADD: case LM_OP_MULTIPLY: case LM_OP_MAXIMUM: case LM_OP_MINIMUM:
    case LM_OP_AND: case LM_OP_OR: case LM_OP_XOR:
      return (lm_opcode)x->code;
    default: /* non-commutative bodies only match in direct order */
      return direct ? (lm_opcode)x->code : LM_OP_UNKNOWN;
  }
  (void)fn;
}
