/* Fusion of elementwise chains (planning pass + group kernel), shared by interp.c and fusion.c.
 *
 * Planning groups the elementwise ops of a block that produce results of one shape (including
 * broadcast_in_dim and the chlo broadcast ops, whose operands are read through an index map)
 * into one program evaluated tile by tile, so intermediates stay in cache instead of being
 * materialized. A group runs at the position of its last member; values of the group used by
 * anything outside it (later ops, nested regions, the block's terminator) are its outputs and
 * are materialized, the others live only in tile registers. Every elementwise op ends up in a
 * group (of one op when nothing fuses with it), so the program is built once at plan time. */
#ifndef LM_EXEC_FUSION_H
#define LM_EXEC_FUSION_H

#include "exec/ew.h"

typedef struct lm_fusion {
  lm_ew_prog *prog;        /* inputs: in[] below, outputs: out[] below */
  uint32_t nmembers;
  const lm_op **members;   /* in block order */
  uint32_t nin, nout;
  uint32_t *in;            /* value ids of the program's inputs */
  uint32_t *out;           /* value ids of the program's outputs (materialized) */
  int64_t numel;           /* elements of the group's shape */
} lm_fusion;

/* One planned item of a block: a plain op or a fused group ending at op index `pos`. */
typedef struct lm_fusion_plan {
  uint32_t ngroups;
  lm_fusion *groups;
  int32_t *group_of;       /* [nops]: group index of each op, -1 when not in a group */
} lm_fusion_plan;

/* Plans the fused groups of block b of function fn. With fuse = false every elementwise op is a
 * group of its own (same kernels, no fusion): used to check fused == unfused. Everything is
 * allocated in arena. */
int lm_fusion_plan_block(const lm_block *b, const lm_func *fn, bool fuse, lm_arena *arena, lm_fusion_plan *out,
                         lm_err *err);

/* Runs a fused group: in[] are the buffers of f->in, out[] the (allocated) buffers of f->out. */
int lm_fusion_run(lm_kctx *k, const lm_fusion *f, lm_buffer *const *in, lm_buffer **out);

/* Builds the one-op program of an elementwise op (used when an op runs outside planning). */
int lm_fusion_single(const lm_op *op, const lm_func *fn, lm_arena *arena, lm_fusion **out, lm_err *err);

#endif
