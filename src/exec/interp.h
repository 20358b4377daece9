/* Interpreter internals shared by interp.c and the executor's planning passes (fusion):
 * the plan mirrors the IR block by block, adding each op's kernel and release list. */
#ifndef LM_EXEC_INTERP_H
#define LM_EXEC_INTERP_H

#include "exec/kernel.h"

typedef struct lm_plan_block lm_plan_block;

struct lm_fusion;

/* One step of a block: a single op, or a fused group of elementwise ops (fusion.h) that runs at
 * the position of its last member. */
typedef struct lm_plan_op {
  const lm_op *op;             /* the op; for a fused group its last member (error locations) */
  const lm_kernel_info *k;     /* NULL for the block's terminator and for fused groups */
  const struct lm_fusion *fusion; /* the fused group, or NULL */
  uint32_t nin, nout;
  const uint32_t *in, *out;    /* value ids read and defined (a group's inputs and outputs) */
  uint32_t nrelease;
  uint32_t *release;           /* value ids to release after this step */
  lm_plan_block *regions;      /* [op->nregions]; NULL for groups */
  uint32_t flags;              /* LM_STEP_* */
} lm_plan_op;

enum {
  /* a dot_general whose only use is a transpose swapping its lhs and rhs free dimensions: the
   * step computes the transposed result directly (as the dot of rhs and lhs) into the
   * transpose's value, and the transpose has no step of its own */
  LM_STEP_DOT_TRANSPOSED = 1u << 0,
};

struct lm_plan_block {
  const lm_block *b;
  uint32_t nops;
  lm_plan_op *ops;             /* steps; the last one is the block's terminator */
};

typedef struct lm_plan_func {
  const lm_func *fn;
  lm_plan_block body;
} lm_plan_func;

/* Options of lm_program_create_opts. */
typedef struct lm_program_opts {
  bool no_fusion;              /* every elementwise op runs alone (same kernels); for tests */
} lm_program_opts;

/* lm_program_create with options; lm_program_create uses the defaults, except that the
 * environment variable LOOM_NO_FUSION=1 turns fusion off (for debugging). */
int lm_program_create_opts(lm_module *m, const lm_program_opts *opts, lm_program **out, lm_err *err);

struct lm_program {
  lm_module *m;                /* owned */
  lm_program_opts opts;
  lm_plan_func *funcs;         /* [nfuncs], parallel to m->funcs */
  uint32_t nfuncs;
  lm_arena arena;              /* owns the plan */
};

struct lm_run_state {
  const lm_program *prog;
  const lm_run_opts *opts;
  lm_err *err;
  int depth;                   /* call depth, bounded */
  uint64_t coll_seq;           /* collective calls made so far (collective.c: lm_coll_call.seq) */
};

const lm_plan_func *lm_program_func(const lm_program *p, const char *name);

#endif
