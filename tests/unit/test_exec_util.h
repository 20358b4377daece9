/* Helpers for the executor-core tests (test_exec_*.c) on top of the hand-built IR harness
 * (test_ops_build.h): dense attributes, one-line op builders, and running a module with fusion
 * on or off on a device of a given capacity. */
#ifndef LOOM_TEST_EXEC_UTIL_H
#define LOOM_TEST_EXEC_UTIL_H

#include "test_ops_build.h"
#include "exec/interp.h"

/* A DENSE attribute of type t with data (lm_type_nbytes(t) bytes). */
static inline void tx_dense(tb *b, lm_op *op, const char *name, lm_type t, const void *data) {
  lm_attr *a = tb_attr(b, op, name);
  a->kind = LM_ATTR_DENSE;
  a->type = tb_alloc(b, sizeof(lm_type));
  *a->type = t;
  a->nbytes = lm_type_nbytes(&t);
  a->data = tb_alloc(b, a->nbytes ? a->nbytes : 8);
  memcpy(a->data, data, a->nbytes);
}

/* stablehlo.constant of type t. */
static inline uint32_t tx_const(tb *b, lm_block *blk, lm_type t, const void *data) {
  lm_op *op = tb_op(b, blk, LM_OP_CONSTANT, 0, NULL, 1, &t);
  tx_dense(b, op, "value", t, data);
  return op->out[0];
}
static inline uint32_t tx_const_f32(tb *b, lm_block *blk, float v) { return tx_const(b, blk, T0(LOOM_DTYPE_F32), &v); }

static inline uint32_t tx_un(tb *b, lm_block *blk, lm_opcode code, uint32_t x, lm_type t) {
  return tb_op(b, blk, code, 1, &x, 1, &t)->out[0];
}
static inline uint32_t tx_bin(tb *b, lm_block *blk, lm_opcode code, uint32_t x, uint32_t y, lm_type t) {
  uint32_t in[2] = {x, y};
  return tb_op(b, blk, code, 2, in, 1, &t)->out[0];
}
static inline uint32_t tx_bcast(tb *b, lm_block *blk, uint32_t x, lm_type t, int n, const int64_t *dims) {
  lm_op *op = tb_op(b, blk, LM_OP_BROADCAST_IN_DIM, 1, &x, 1, &t);
  tb_ints(b, op, "broadcast_dimensions", n, dims);
  return op->out[0];
}
static inline uint32_t tx_cmp(tb *b, lm_block *blk, const char *dir, uint32_t x, uint32_t y, lm_type t) {
  uint32_t in[2] = {x, y};
  lm_type pt = t;
  pt.dtype = LOOM_DTYPE_PRED;
  lm_op *op = tb_op(b, blk, LM_OP_COMPARE, 2, in, 1, &pt);
  tb_enum(b, op, "comparison_direction", dir);
  return op->out[0];
}

/* Creates the program from b's module (consumed) with or without fusion and runs main on args
 * on a device of `capacity` bytes; results (detached from the device) go to out[], the device's
 * peak to *peak. Returns the status; err gets the message. */
static inline int tx_run_threads(tb *b, bool fuse, int nthreads, size_t capacity, lm_buffer *const *args, uint32_t nargs,
                                 lm_buffer **out, size_t *peak, lm_err *err) {
  lm_program *p = NULL;
  uint32_t nres = b->fn->nresults;
  lm_program_opts o = {.no_fusion = !fuse};
  int rc = lm_program_create_opts(b->m, &o, &p, err);
  b->m = NULL;
  if (rc < 0) return rc;
  lm_device *dev = lm_device_create(capacity);
  lm_run_opts opts = {.device = dev, .nthreads = nthreads};
  for (uint32_t i = 0; i < nres; i++) out[i] = NULL;
  rc = lm_program_run(p, "main", &opts, args, nargs, out, nres, err);
  for (uint32_t i = 0; i < nres && rc == 0; i++) {
    lm_buffer *c = NULL;
    assert_int_equal(lm_buffer_from_data(NULL, &out[i]->type, out[i]->data, out[i]->nbytes, &c, NULL), 0);
    lm_buffer_release(out[i]);
    out[i] = c;
  }
  if (peak) *peak = lm_device_peak(dev);
  assert_int_equal(lm_device_used(dev), 0); /* every intermediate released, also after errors */
  lm_program_destroy(p);
  lm_device_destroy(dev);
  return rc;
}

static inline int tx_run(tb *b, bool fuse, size_t capacity, lm_buffer *const *args, uint32_t nargs, lm_buffer **out,
                         size_t *peak, lm_err *err) {
  return tx_run_threads(b, fuse, 1, capacity, args, nargs, out, peak, err);
}

/* Number of steps (ops or fused groups, terminator included) of main's body. */
static inline uint32_t tx_steps(tb *b, bool fuse) {
  lm_program *p = NULL;
  lm_program_opts o = {.no_fusion = !fuse};
  lm_err e;
  int rc = lm_program_create_opts(b->m, &o, &p, &e);
  b->m = NULL;
  if (rc < 0) fail_msg("program: %s", e.msg);
  uint32_t n = lm_program_func(p, "main")->body.nops;
  lm_program_destroy(p);
  return n;
}

static inline lm_buffer *tx_buf_rand_f32(lm_type t, uint64_t seed, float lo, float hi) {
  lm_buffer *x = NULL;
  assert_int_equal(lm_buffer_alloc(NULL, &t, &x, NULL), 0);
  float *f = x->data;
  for (int64_t i = 0; i < lm_type_numel(&t); i++) {
    uint64_t r = tb_rand(&seed);
    f[i] = lo + (hi - lo) * (float)((double)(r >> 11) / 9007199254740992.0);
  }
  return x;
}

/* Adds a private function `name` to b's module and makes it the one tb_* calls build into (its
 * body is b->body); tx_end_func switches back to main. */
static inline void tx_begin_func(tb *b, const char *name) {
  lm_module *m = b->m;
  lm_func *nf = tb_alloc(b, (m->nfuncs + 1) * sizeof(lm_func));
  memcpy(nf, m->funcs, m->nfuncs * sizeof(lm_func));
  m->funcs = nf;
  lm_func *f = &nf[m->nfuncs++];
  memset(f, 0, sizeof *f);
  f->name = name;
  f->value_types = tb_alloc(b, TB_MAX_VALUES * sizeof(lm_type));
  f->arg_types = tb_alloc(b, 32 * sizeof(lm_type));
  f->arg_attrs = tb_alloc(b, 32 * sizeof(lm_attr));
  f->body.nblocks = 1;
  f->body.blocks = tb_new_block(b);
  b->fn = f;
  b->body = f->body.blocks;
}
static inline void tx_end_func(tb *b) {
  b->fn = &b->m->funcs[0];
  b->body = b->fn->body.blocks;
}

#endif
