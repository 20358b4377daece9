/* Minimal hand-built IR for the executor benchmarks (one public function @main), plus timing.
 * Benchmarks abort on misuse: they are programs, not library code. */
#ifndef LOOM_BENCH_IR_H
#define LOOM_BENCH_IR_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "bench_util.h"
#include "exec/exec.h"
#include "hlo/ir.h"

#define BI_MAX 256

typedef struct bi {
  lm_module *m;
  lm_func *fn;
  lm_block *body;
} bi;

static inline void *bi_alloc(bi *b, size_t n) {
  void *p = lm_arena_alloc(&b->m->arena, n);
  if (!p) { fprintf(stderr, "out of memory\n"); exit(1); }
  return p;
}

static inline void bi_init(bi *b) {
  b->m = calloc(1, sizeof *b->m);
  lm_arena_init(&b->m->arena, 0);
  b->m->nfuncs = 1;
  b->m->funcs = bi_alloc(b, sizeof(lm_func));
  b->fn = &b->m->funcs[0];
  b->fn->name = "main";
  b->fn->is_public = true;
  b->fn->value_types = bi_alloc(b, BI_MAX * sizeof(lm_type));
  b->fn->arg_types = bi_alloc(b, 16 * sizeof(lm_type));
  b->fn->arg_attrs = bi_alloc(b, 16 * sizeof(lm_attr));
  b->fn->body.nblocks = 1;
  b->body = b->fn->body.blocks = bi_alloc(b, sizeof(lm_block));
  b->body->ops = bi_alloc(b, BI_MAX * sizeof(lm_op));
  b->body->args = bi_alloc(b, 16 * sizeof(uint32_t));
}

static inline uint32_t bi_value(bi *b, lm_type t) {
  b->fn->value_types[b->fn->nvalues] = t;
  return b->fn->nvalues++;
}

static inline uint32_t bi_arg(bi *b, lm_type t) {
  uint32_t v = bi_value(b, t);
  b->body->args[b->body->nargs++] = v;
  b->fn->arg_types[b->fn->nargs++] = t;
  return v;
}

static inline lm_op *bi_op(bi *b, lm_opcode code, uint32_t nin, const uint32_t *in, lm_type out) {
  lm_op *op = &b->body->ops[b->body->nops++];
  memset(op, 0, sizeof *op);
  op->code = (uint16_t)code;
  op->name = lm_opcode_name(code);
  op->loc = (lm_loc){"bench", 1, b->body->nops};
  op->nin = nin;
  op->in = bi_alloc(b, (nin ? nin : 1) * sizeof(uint32_t));
  if (nin) memcpy(op->in, in, nin * sizeof(uint32_t));
  op->nout = 1;
  op->out = bi_alloc(b, sizeof(uint32_t));
  op->out[0] = bi_value(b, out);
  op->attrs = bi_alloc(b, 8 * sizeof(lm_named_attr));
  return op;
}

static inline lm_attr *bi_attr(bi *b, lm_op *op, const char *name) {
  lm_named_attr *na = &op->attrs[op->nattrs++];
  memset(na, 0, sizeof *na);
  na->name = name;
  return &na->value;
}

static inline lm_attr bi_ints(bi *b, int n, const int64_t *v) {
  lm_attr a;
  memset(&a, 0, sizeof a);
  a.kind = LM_ATTR_INTS;
  a.n = (uint32_t)n;
  a.ints = bi_alloc(b, (n ? n : 1) * sizeof(int64_t));
  if (n) memcpy(a.ints, v, n * sizeof(int64_t));
  return a;
}

static inline uint32_t bi_const_f32(bi *b, float v) {
  lm_type t;
  lm_type_tensor(&t, LOOM_DTYPE_F32, 0, NULL);
  lm_op *op = bi_op(b, LM_OP_CONSTANT, 0, NULL, t);
  lm_attr *a = bi_attr(b, op, "value");
  a->kind = LM_ATTR_DENSE;
  a->type = bi_alloc(b, sizeof(lm_type));
  *a->type = t;
  a->nbytes = 4;
  a->data = bi_alloc(b, 4);
  memcpy(a->data, &v, 4);
  return op->out[0];
}

static inline uint32_t bi_bin(bi *b, lm_opcode code, uint32_t x, uint32_t y, lm_type t) {
  uint32_t in[2] = {x, y};
  return bi_op(b, code, 2, in, t)->out[0];
}

static inline uint32_t bi_bcast_scalar(bi *b, uint32_t x, lm_type t) {
  lm_op *op = bi_op(b, LM_OP_BROADCAST_IN_DIM, 1, &x, t);
  *bi_attr(b, op, "broadcast_dimensions") = bi_ints(b, 0, NULL);
  return op->out[0];
}

static inline void bi_finish(bi *b, uint32_t n, const uint32_t *vals) {
  b->fn->nresults = n;
  b->fn->result_types = bi_alloc(b, n * sizeof(lm_type));
  b->fn->result_attrs = bi_alloc(b, n * sizeof(lm_attr));
  for (uint32_t i = 0; i < n; i++) b->fn->result_types[i] = b->fn->value_types[vals[i]];
  lm_op *r = &b->body->ops[b->body->nops++];
  memset(r, 0, sizeof *r);
  r->code = LM_OP_FUNC_RETURN;
  r->name = "func.return";
  r->nin = n;
  r->in = bi_alloc(b, n * sizeof(uint32_t));
  memcpy(r->in, vals, n * sizeof(uint32_t));
}

#endif
