/* Cutting a per-device program at its collectives: @main's top-level ops become a sequence of
 * segments, compute (for a PJRT plugin) and collective (for Loom's executor, whose collectives go
 * over the data plane), each printed as a module of its own whose @main takes the values live
 * across the cut before it and returns the values used after it.
 *
 *   %a = dot(%x, %w)            segment 0 (compute):  @main(%x, %w) -> (%a)
 *   %s = all_reduce(%a)         segment 1 (collective): @main(%a) -> (%s)
 *   %r = tanh(%s)               segment 2 (compute):  @main(%s) -> (%r)
 *   return %r, %x
 *
 * Constants are copied into every segment that uses them (XLA folds them there) instead of passing
 * between segments; replica_id / partition_id at the top level become values the runner supplies
 * (a plugin executable compiled for one device would say 0). What cannot be cut is reported, not
 * guessed at: collectives inside control flow or called functions, send/recv, token or tuple
 * values live across a cut, process-id ops inside regions with several processes. */
#ifndef LM_HLO_CUT_H
#define LM_HLO_CUT_H

#include <stdbool.h>
#include <stdint.h>
#include "hlo/ir.h"

typedef enum lm_seg_kind {
  LM_SEG_COMPUTE = 0,    /* no collectives: for the plugin */
  LM_SEG_COLLECTIVE = 1, /* one or more consecutive collectives: Loom's executor */
} lm_seg_kind;

typedef struct lm_segment {
  uint8_t kind;              /* lm_seg_kind */
  uint32_t nops;             /* top-level ops of @main in it (copied constants not counted) */
  const char *first_op;      /* name of its first op, for messages */
  uint32_t nin, nout;
  uint32_t *in, *out;        /* value ids of the original @main: arguments and results of the segment */
  lm_type *out_types;        /* [nout] */
  uint32_t nrelease;
  uint32_t *release;         /* values whose last use is this segment: the runner drops them after it */
  const char *loom_only;     /* compute segments the plugin should not get (custom calls), why; or NULL */
  bool effects;              /* it asserts or calls out (check ops, custom calls): it runs even when
                                nothing it computes is used later */
  char *text;                /* the segment as a StableHLO module (malloc'd) */
} lm_segment;

typedef enum lm_cut_val {
  LM_CUT_ARG = 1,            /* an argument of @main */
  LM_CUT_REPLICA_ID,         /* replica_id's result: the runner supplies it */
  LM_CUT_PARTITION_ID,       /* partition_id's result */
  LM_CUT_CONSTANT,           /* a constant @main returns: the runner makes it from const_data */
} lm_cut_val;

typedef struct lm_cut_given {
  uint32_t value;            /* value id */
  uint8_t what;              /* lm_cut_val (not ARG) */
  lm_type type;
  const void *const_data;    /* LM_CUT_CONSTANT: the elements (in the module's arena) */
  size_t const_bytes;
} lm_cut_given;

typedef struct lm_cut {
  uint32_t nseg;
  lm_segment *seg;
  uint32_t ncollectives;     /* collective ops cut at */
  uint32_t nvalues;          /* value ids of @main are below this */
  uint32_t nargs, nresults;
  uint32_t *args, *results;  /* @main's arguments and returned values (ids) */
  uint32_t ngiven;
  lm_cut_given *given;       /* values the runner supplies (process ids, returned constants) */
} lm_cut;

/* Plans the cut of m's @main (or its only function). *out = NULL with *why set when something
 * stops cutting (why says what, valid until this thread's next call; the whole program then runs
 * on Loom's executor). A program without collectives is one compute segment. multi: several
 * processes run the program. Errors: out of memory. The plan refers to m's arena (given
 * constants): use it while m lives. */
int lm_cut_plan(const lm_module *m, bool multi, lm_cut **out, const char **why, lm_err *err);
void lm_cut_free(lm_cut *c); /* NULL ok */
/* Whether op code is a collective the cut separates (and Loom's data plane carries). */
bool lm_cut_is_collective(uint16_t code);

#endif
