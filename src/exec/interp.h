/* Interpreter internals shared by interp.c and the executor's planning passes (fusion):
 * the plan mirrors the IR block by block, adding each op's kernel and release list. */
#ifndef LM_EXEC_INTERP_H
#define LM_EXEC_INTERP_H

#include "exec/kernel.h"

typedef struct lm_plan_block lm_plan_block;

typedef struct lm_plan_op {
  const lm_op *op;
  const lm_kernel_info *k;     /* NULL for the block's terminator */
  uint32_t nrelease;
  uint32_t *release;           /* value ids to release after this op */
  lm_plan_block *regions;      /* [op->nregions] */
} lm_plan_op;

struct lm_plan_block {
  const lm_block *b;
  uint32_t nops;
  lm_plan_op *ops;
};

typedef struct lm_plan_func {
  const lm_func *fn;
  lm_plan_block body;
} lm_plan_func;

struct lm_program {
  lm_module *m;                /* owned */
  lm_plan_func *funcs;         /* [nfuncs], parallel to m->funcs */
  uint32_t nfuncs;
  lm_arena arena;              /* owns the plan */
};

struct lm_run_state {
  const lm_program *prog;
  const lm_run_opts *opts;
  lm_err *err;
  int depth;                   /* call depth, bounded */
};

const lm_plan_func *lm_program_func(const lm_program *p, const char *name);

#endif
