/* A per-device program cut at its collectives, run segment by segment (pjrt.h: lm_pjrt_cut):
 * compute segments as plugin executables, collective segments (and compute the plugin refused)
 * on Loom's executor with the launch's collective hooks. Values live across a cut are Loom
 * buffers: the plugin reads its inputs from them without a copy (lm_pjrt_run lends them) and its
 * results are copied once into new ones; Loom's executor uses them as they are. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "hlo/parse.h"
#include "pjrt/pjrt.h"

typedef struct cut_step {
  lm_pjrt_exe *exe;     /* the plugin runs it, or */
  lm_program *prog;     /* Loom's executor does, or neither: dropped (computes nothing used later) */
} cut_step;

struct lm_pjrt_cut {
  lm_cut *plan;
  cut_step *steps;      /* [plan->nseg] */
  lm_buffer **given;    /* [plan->ngiven]: returned constants made once (NULL for process ids) */
  uint32_t live, compiled;
  uint32_t most;        /* the most inputs or outputs of a segment (at least 1): the run's scratch */
};

void lm_pjrt_cut_free(lm_pjrt_cut *c) {
  if (!c) return;
  for (uint32_t s = 0; c->steps && s < c->plan->nseg; s++) {
    lm_pjrt_exe_free(c->steps[s].exe);
    lm_program_destroy(c->steps[s].prog);
  }
  for (uint32_t i = 0; c->given && i < c->plan->ngiven; i++) lm_buffer_release(c->given[i]);
  free(c->steps);
  free(c->given);
  lm_cut_free(c->plan);
  free(c);
}

uint32_t lm_pjrt_cut_segments(const lm_pjrt_cut *c) { return c->live; }
uint32_t lm_pjrt_cut_compiled(const lm_pjrt_cut *c) { return c->compiled; }
uint32_t lm_pjrt_cut_collectives(const lm_pjrt_cut *c) { return c->plan->ncollectives; }

/* Loom's executor for segment s (its text parsed back). */
static int loom_step(const lm_segment *g, uint32_t s, lm_program **out, lm_err *err) {
  char name[48];
  snprintf(name, sizeof name, "<segment %u>", s);
  lm_parse_opts po = {.filename = name};
  lm_module *m = NULL;
  int rc = lm_parse_module(g->text, strlen(g->text), &po, &m, err);
  if (rc == 0) rc = lm_program_create(m, out, err);
  else lm_module_free(m);
  if (rc < 0) lm_err_prefix(err, "segment %u of the cut program", s);
  return rc;
}

int lm_pjrt_cut_create(lm_pjrt *p, lm_cut *plan, void (*note)(void *user, uint32_t seg, const char *why), void *user,
                       lm_pjrt_cut **out, lm_err *err) {
  *out = NULL;
  lm_pjrt_cut *c = calloc(1, sizeof *c);
  if (!c) {
    lm_cut_free(plan);
    return lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  }
  c->plan = plan;
  c->most = 1;
  for (uint32_t s = 0; s < plan->nseg; s++) {
    if (plan->seg[s].nin > c->most) c->most = plan->seg[s].nin;
    if (plan->seg[s].nout > c->most) c->most = plan->seg[s].nout;
  }
  int rc = 0;
  if (!(c->steps = calloc(plan->nseg ? plan->nseg : 1, sizeof *c->steps)) ||
      !(c->given = calloc(plan->ngiven ? plan->ngiven : 1, sizeof *c->given)))
    rc = lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  for (uint32_t i = 0; rc == 0 && i < plan->ngiven; i++) {
    const lm_cut_given *g = &plan->given[i];
    if (g->what == LM_CUT_CONSTANT) rc = lm_buffer_from_data(NULL, &g->type, g->const_data, g->const_bytes, &c->given[i], err);
  }
  for (uint32_t s = 0; rc == 0 && s < plan->nseg; s++) {
    const lm_segment *g = &plan->seg[s];
    if (g->kind == LM_SEG_COMPUTE && g->nout == 0 && !g->effects) continue; /* nothing of it is used */
    c->live++;
    const char *why = g->kind == LM_SEG_COLLECTIVE ? NULL : g->loom_only;
    lm_err cerr;
    if (g->kind == LM_SEG_COMPUTE && !why) {
      if (lm_pjrt_compile(p, g->text, strlen(g->text), g->nout, &c->steps[s].exe, &cerr) == 0) {
        c->compiled++;
        continue;
      }
      why = cerr.msg;
    }
    if (why && note) note(user, s, why);
    rc = loom_step(g, s, &c->steps[s].prog, err);
  }
  if (rc < 0) {
    lm_pjrt_cut_free(c);
    return rc;
  }
  *out = c;
  return 0;
}

/* A process id (replica_id / partition_id) as a scalar of type t. */
static int proc_value(const lm_type *t, int64_t v, lm_device *dev, lm_buffer **out, lm_err *err) {
  int rc = lm_buffer_alloc(dev, t, out, err);
  if (rc < 0) return rc;
  switch (t->dtype) {
    case LOOM_DTYPE_U32: case LOOM_DTYPE_S32: { uint32_t x = (uint32_t)v; memcpy((*out)->data, &x, 4); break; }
    case LOOM_DTYPE_U64: case LOOM_DTYPE_S64: { uint64_t x = (uint64_t)v; memcpy((*out)->data, &x, 8); break; }
    default:
      lm_buffer_release(*out);
      *out = NULL;
      return lm_errf(err, LOOM_UNSUPPORTED, "a process id of element type %s", lm_dtype_name(t->dtype));
  }
  return 0;
}

int lm_pjrt_cut_run(const lm_pjrt_cut *c, int device, const lm_run_opts *opts, lm_buffer *const *args, uint32_t nargs,
                    lm_buffer **results, uint32_t nresults, lm_err *err) {
  const lm_cut *plan = c->plan;
  for (uint32_t i = 0; i < nresults; i++) results[i] = NULL;
  if (nargs != plan->nargs || nresults != plan->nresults)
    return lm_errf(err, LOOM_INVALID_ARGUMENT, "the program takes %u arguments and has %u results (%u, %u given)",
                   plan->nargs, plan->nresults, nargs, nresults);
  uint32_t most = c->most;
  lm_buffer **val = calloc(plan->nvalues ? plan->nvalues : 1, sizeof *val);
  lm_buffer **ins = calloc(most, sizeof *ins), **outs = calloc(most, sizeof *outs);
  if (!val || !ins || !outs) {
    free(val), free(ins), free(outs);
    return lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  }
  int rc = 0;
  for (uint32_t i = 0; i < nargs; i++) {
    lm_buffer_release(val[plan->args[i]]); /* an argument listed twice: the last one */
    val[plan->args[i]] = lm_buffer_retain(args[i]);
  }
  for (uint32_t i = 0; rc == 0 && i < plan->ngiven; i++) {
    const lm_cut_given *g = &plan->given[i];
    if (g->what == LM_CUT_CONSTANT) val[g->value] = lm_buffer_retain(c->given[i]);
    else
      rc = proc_value(&g->type, g->what == LM_CUT_REPLICA_ID ? opts->replica_id : opts->partition_id, opts->device,
                      &val[g->value], err);
  }
  uint64_t seq = 0;
  lm_run_opts o = *opts;
  o.coll_seq = &seq;
  for (uint32_t s = 0; rc == 0 && s < plan->nseg; s++) {
    const lm_segment *g = &plan->seg[s];
    const cut_step *st = &c->steps[s];
    if (st->exe || st->prog) {
      if (opts->cancel && *opts->cancel) {
        rc = lm_errf(err, LOOM_CANCELLED, "cancelled");
        break;
      }
      for (uint32_t k = 0; k < g->nin; k++)
        if (!(ins[k] = val[g->in[k]])) rc = lm_errf(err, LOOM_INTERNAL, "segment %u: value %%v%u missing", s, g->in[k]);
      if (rc < 0) break;
      if (st->exe) rc = lm_pjrt_run(st->exe, device, ins, g->nin, opts->device, g->out_types, outs, g->nout, err);
      else rc = lm_program_run(st->prog, NULL, &o, ins, g->nin, outs, g->nout, err);
      if (rc < 0) {
        if (g->kind == LM_SEG_COLLECTIVE) lm_err_prefix(err, "%s (segment %u)", g->first_op, s);
        break;
      }
      for (uint32_t k = 0; k < g->nout; k++) {
        lm_buffer_release(val[g->out[k]]);
        val[g->out[k]] = outs[k];
      }
    }
    for (uint32_t k = 0; k < g->nrelease; k++) {
      lm_buffer_release(val[g->release[k]]);
      val[g->release[k]] = NULL;
    }
  }
  for (uint32_t i = 0; rc == 0 && i < nresults; i++) {
    lm_buffer *b = val[plan->results[i]];
    if (b) results[i] = lm_buffer_retain(b);
    else rc = lm_errf(err, LOOM_INTERNAL, "result %u (%%v%u) was not computed", i, plan->results[i]);
  }
  if (rc < 0)
    for (uint32_t i = 0; i < nresults; i++) {
      lm_buffer_release(results[i]);
      results[i] = NULL;
    }
  for (uint32_t v = 0; v < plan->nvalues; v++) lm_buffer_release(val[v]);
  free(val), free(ins), free(outs);
  return rc;
}
