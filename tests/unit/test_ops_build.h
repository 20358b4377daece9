/* Test helper for the op-kernel tests (test_ops*.c): builds a one-function lm_module by hand (no
 * parser), runs it on a CPU device and compares results. Every builder call aborts the test on
 * misuse (capacity), which is fine in tests. */
#ifndef LOOM_TEST_OPS_BUILD_H
#define LOOM_TEST_OPS_BUILD_H

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "common/half.h"
#include "exec/exec.h"
#include "exec/kernel.h"
#include "exec/ops_util.h"
#include "exec/scalar_eval.h"
#include "hlo/ir.h"

#define TB_MAX_VALUES 512
#define TB_MAX_OPS 64
#define TB_MAX_ATTRS 16

typedef struct tb {
  lm_module *m;
  lm_func *fn;
  lm_block *body;
} tb;

static inline lm_type tt(lm_dtype dt, int rank, ...) {
  lm_type t;
  int64_t dims[LM_MAX_RANK];
  va_list ap;
  va_start(ap, rank);
  for (int i = 0; i < rank; i++) dims[i] = va_arg(ap, int64_t);
  va_end(ap);
  lm_type_tensor(&t, dt, rank, dims);
  return t;
}
#define T0(dt) tt(dt, 0)
#define T1(dt, a) tt(dt, 1, (int64_t)(a))
#define T2(dt, a, b) tt(dt, 2, (int64_t)(a), (int64_t)(b))
#define T3(dt, a, b, c) tt(dt, 3, (int64_t)(a), (int64_t)(b), (int64_t)(c))
#define T4(dt, a, b, c, d) tt(dt, 4, (int64_t)(a), (int64_t)(b), (int64_t)(c), (int64_t)(d))
#define T5(dt, a, b, c, d, e) tt(dt, 5, (int64_t)(a), (int64_t)(b), (int64_t)(c), (int64_t)(d), (int64_t)(e))

static inline void *tb_alloc(tb *b, size_t n) {
  void *p = lm_arena_alloc(&b->m->arena, n);
  assert_non_null(p);
  return p;
}

static inline lm_block *tb_new_block(tb *b) {
  lm_block *blk = tb_alloc(b, sizeof *blk);
  blk->ops = tb_alloc(b, TB_MAX_OPS * sizeof(lm_op));
  blk->args = tb_alloc(b, 32 * sizeof(uint32_t));
  return blk;
}

static inline void tb_init(tb *b) {
  b->m = calloc(1, sizeof *b->m);
  assert_non_null(b->m);
  lm_arena_init(&b->m->arena, 0);
  b->m->funcs = tb_alloc(b, sizeof(lm_func));
  b->m->nfuncs = 1;
  b->fn = &b->m->funcs[0];
  b->fn->name = "main";
  b->fn->is_public = true;
  b->fn->value_types = tb_alloc(b, TB_MAX_VALUES * sizeof(lm_type));
  b->fn->arg_types = tb_alloc(b, 32 * sizeof(lm_type));
  b->fn->arg_attrs = tb_alloc(b, 32 * sizeof(lm_attr));
  b->fn->body.nblocks = 1;
  b->body = tb_new_block(b);
  b->fn->body.blocks = b->body;
}

static inline uint32_t tb_value(tb *b, lm_type t) {
  assert_true(b->fn->nvalues < TB_MAX_VALUES);
  b->fn->value_types[b->fn->nvalues] = t;
  return b->fn->nvalues++;
}

/* A block argument of blk (the function's when blk is b->body). */
static inline uint32_t tb_block_arg(tb *b, lm_block *blk, lm_type t) {
  uint32_t v = tb_value(b, t);
  assert_true(blk->nargs < 32);
  blk->args[blk->nargs++] = v;
  if (blk == b->body) b->fn->arg_types[b->fn->nargs++] = t;
  return v;
}
static inline uint32_t tb_arg(tb *b, lm_type t) { return tb_block_arg(b, b->body, t); }

/* Appends op `code` to blk with operands ins[nin] and results of types outs[nout]; result ids
 * are op->out[i]. */
static inline lm_op *tb_op(tb *b, lm_block *blk, lm_opcode code, uint32_t nin, const uint32_t *ins, uint32_t nout,
                           const lm_type *outs) {
  assert_true(blk->nops < TB_MAX_OPS);
  lm_op *op = &blk->ops[blk->nops++];
  memset(op, 0, sizeof *op);
  op->code = (uint16_t)code;
  op->name = lm_opcode_name(code);
  op->loc = (lm_loc){"test.mlir", 1, (uint32_t)blk->nops};
  op->nin = nin;
  op->in = tb_alloc(b, (nin ? nin : 1) * sizeof(uint32_t));
  if (nin) memcpy(op->in, ins, nin * sizeof(uint32_t));
  op->nout = nout;
  op->out = tb_alloc(b, (nout ? nout : 1) * sizeof(uint32_t));
  for (uint32_t i = 0; i < nout; i++) op->out[i] = tb_value(b, outs[i]);
  op->attrs = tb_alloc(b, TB_MAX_ATTRS * sizeof(lm_named_attr));
  return op;
}

static inline lm_attr *tb_attr(tb *b, lm_op *op, const char *name) {
  assert_true(op->nattrs < TB_MAX_ATTRS);
  lm_named_attr *na = &op->attrs[op->nattrs++];
  na->name = name;
  return &na->value;
}

static inline lm_attr tb_ints_value(tb *b, int n, const int64_t *v) {
  lm_attr a = {0};
  a.kind = LM_ATTR_INTS;
  a.n = (uint32_t)n;
  a.ints = tb_alloc(b, (n ? n : 1) * sizeof(int64_t));
  if (n) memcpy(a.ints, v, (size_t)n * sizeof(int64_t));
  return a;
}
/* tb_ints(b, op, "dims", 3, (int64_t[]){0, 1, 2}) */
static inline void tb_ints(tb *b, lm_op *op, const char *name, int n, const int64_t *v) {
  *tb_attr(b, op, name) = tb_ints_value(b, n, v);
}
static inline void tb_int(tb *b, lm_op *op, const char *name, int64_t v) {
  lm_attr *a = tb_attr(b, op, name);
  a->kind = LM_ATTR_INT;
  a->i = v;
}
static inline void tb_bool(tb *b, lm_op *op, const char *name, int v) {
  lm_attr *a = tb_attr(b, op, name);
  a->kind = LM_ATTR_BOOL;
  a->i = v;
}
static inline void tb_enum(tb *b, lm_op *op, const char *name, const char *v) {
  lm_attr *a = tb_attr(b, op, name);
  a->kind = LM_ATTR_ENUM;
  a->s = v;
}
static inline void tb_string(tb *b, lm_op *op, const char *name, const char *v) {
  lm_attr *a = tb_attr(b, op, name);
  a->kind = LM_ATTR_STRING;
  a->s = v;
  a->n = (uint32_t)strlen(v);
}
static inline void tb_symbol(tb *b, lm_op *op, const char *name, const char *v) {
  lm_attr *a = tb_attr(b, op, name);
  a->kind = LM_ATTR_SYMBOL;
  a->s = v;
}
/* A DENSE i64 attribute of shape [rows, cols] (cols = 0: 1-D of rows values). */
static inline void tb_dense_i64(tb *b, lm_op *op, const char *name, int64_t rows, int64_t cols, const int64_t *v) {
  lm_attr *a = tb_attr(b, op, name);
  a->kind = LM_ATTR_DENSE;
  a->type = tb_alloc(b, sizeof(lm_type));
  if (cols) *a->type = T2(LOOM_DTYPE_S64, rows, cols);
  else *a->type = T1(LOOM_DTYPE_S64, rows);
  int64_t n = cols ? rows * cols : rows;
  a->nbytes = (size_t)n * 8;
  a->data = tb_alloc(b, a->nbytes ? a->nbytes : 8);
  memcpy(a->data, v, a->nbytes);
}
/* A STRUCT attribute with up to 16 fields, filled with tb_field_*. */
static inline lm_attr *tb_struct(tb *b, lm_op *op, const char *name, const char *sname) {
  lm_attr *a = tb_attr(b, op, name);
  a->kind = LM_ATTR_STRUCT;
  a->s = sname;
  a->fields = tb_alloc(b, 16 * sizeof(lm_named_attr));
  return a;
}
static inline void tb_field_ints(tb *b, lm_attr *s, const char *name, int n, const int64_t *v) {
  assert_true(s->n < 16);
  s->fields[s->n].name = name;
  s->fields[s->n].value = tb_ints_value(b, n, v);
  s->n++;
}
static inline void tb_field_int(tb *b, lm_attr *s, const char *name, int64_t v) {
  assert_true(s->n < 16);
  s->fields[s->n].name = name;
  memset(&s->fields[s->n].value, 0, sizeof(lm_attr));
  s->fields[s->n].value.kind = LM_ATTR_INT;
  s->fields[s->n].value.i = v;
  s->n++;
}

/* Adds a region to op with one block whose arguments have types args[nargs]; returns the block. */
static inline lm_block *tb_region(tb *b, lm_op *op, uint32_t nargs, const lm_type *args) {
  lm_region *old = op->regions;
  op->regions = tb_alloc(b, (op->nregions + 1) * sizeof(lm_region));
  if (op->nregions) memcpy(op->regions, old, op->nregions * sizeof(lm_region));
  lm_block *blk = tb_new_block(b);
  for (uint32_t i = 0; i < nargs; i++) tb_block_arg(b, blk, args[i]);
  op->regions[op->nregions].nblocks = 1;
  op->regions[op->nregions].blocks = blk;
  op->nregions++;
  return blk;
}

static inline void tb_return(tb *b, lm_block *blk, uint32_t n, const uint32_t *vals) {
  tb_op(b, blk, blk == b->body ? LM_OP_FUNC_RETURN : LM_OP_RETURN, n, vals, 0, NULL);
}

/* A body region `^bb(a: T, b: T): %r = code a, b; return %r` on rank-0 tensors of dt. */
static inline void tb_binop_region(tb *b, lm_op *op, lm_opcode code, lm_dtype dt) {
  lm_type s[2] = {T0(dt), T0(dt)};
  lm_block *blk = tb_region(b, op, 2, s);
  lm_op *x = tb_op(b, blk, code, 2, blk->args, 1, s);
  tb_return(b, blk, 1, x->out);
}

/* Finishes the function returning vals[n]. */
static inline void tb_finish(tb *b, uint32_t n, const uint32_t *vals) {
  b->fn->nresults = n;
  b->fn->result_types = tb_alloc(b, (n ? n : 1) * sizeof(lm_type));
  b->fn->result_attrs = tb_alloc(b, (n ? n : 1) * sizeof(lm_attr));
  for (uint32_t i = 0; i < n; i++) b->fn->result_types[i] = b->fn->value_types[vals[i]];
  tb_return(b, b->body, n, vals);
}

/* ---- running ---- */

typedef struct tb_run_result {
  int rc;
  lm_err err;
  lm_buffer *out[8];
} tb_run_result;

/* Creates the program (taking the module) and runs main on args; the program is destroyed. */
static inline tb_run_result tb_run_opts(tb *b, lm_buffer *const *args, uint32_t nargs, const lm_run_opts *o) {
  tb_run_result r;
  memset(&r, 0, sizeof r);
  lm_program *p = NULL;
  uint32_t nres = b->fn->nresults;
  r.rc = lm_program_create(b->m, &p, &r.err);
  b->m = NULL;
  if (r.rc < 0) return r;
  lm_device *dev = lm_device_create((size_t)1 << 32);
  lm_run_opts opts = o ? *o : (lm_run_opts){0};
  opts.device = dev;
  r.rc = lm_program_run(p, "main", &opts, args, nargs, r.out, nres, &r.err);
  /* Results stay valid after the device is gone: detach them from its accounting. */
  for (uint32_t i = 0; i < nres && r.rc == 0; i++)
    if (r.out[i]) {
      if (r.out[i]->dev || r.out[i]->base) {
        lm_buffer *c = NULL;
        assert_int_equal(lm_buffer_from_data(NULL, &r.out[i]->type, r.out[i]->data, r.out[i]->nbytes, &c, NULL), 0);
        lm_buffer_release(r.out[i]);
        r.out[i] = c;
      }
    }
  if (r.rc == 0) assert_int_equal(lm_device_used(dev), 0); /* nothing leaked on the device */
  lm_program_destroy(p);
  lm_device_destroy(dev);
  return r;
}
static inline tb_run_result tb_run(tb *b, lm_buffer *const *args, uint32_t nargs) {
  return tb_run_opts(b, args, nargs, NULL);
}

static inline void tb_run_release(tb_run_result *r) {
  for (int i = 0; i < 8; i++) { lm_buffer_release(r->out[i]); r->out[i] = NULL; }
}

/* Host buffer of type t with data (nbytes must match). */
static inline lm_buffer *tb_buf(lm_type t, const void *data) {
  lm_buffer *x = NULL;
  assert_int_equal(lm_buffer_from_data(NULL, &t, data, lm_type_nbytes(&t), &x, NULL), 0);
  return x;
}
/* Host buffer of type t (any dtype) with element i = f(i) converted to the dtype. */
static inline lm_buffer *tb_buf_iota(lm_type t, double scale, double offset) {
  lm_buffer *x = NULL;
  assert_int_equal(lm_buffer_alloc(NULL, &t, &x, NULL), 0);
  size_t es = lm_dtype_size(t.dtype);
  for (int64_t i = 0; i < lm_type_numel(&t); i++) lm_store_f64((char *)x->data + i * es, t.dtype, i * scale + offset);
  return x;
}

/* Runs and expects success; returns result 0 (caller releases). */
static inline lm_buffer *tb_run1(tb *b, lm_buffer *const *args, uint32_t nargs) {
  tb_run_result r = tb_run(b, args, nargs);
  if (r.rc != 0) fail_msg("run failed: %s", r.err.msg);
  for (int i = 1; i < 8; i++) lm_buffer_release(r.out[i]);
  return r.out[0];
}

/* Expects program creation or run to fail with code and a message containing needle. */
static inline void tb_expect_error(tb *b, lm_buffer *const *args, uint32_t nargs, int code, const char *needle) {
  tb_run_result r = tb_run(b, args, nargs);
  if (r.rc == 0) {
    tb_run_release(&r);
    fail_msg("expected an error containing '%s'", needle);
  }
  if (r.rc != code || !strstr(r.err.msg, needle))
    fail_msg("expected error %d containing '%s', got %d: %s", code, needle, r.rc, r.err.msg);
}

static inline void assert_buf_eq_bytes(const lm_buffer *x, const void *want, size_t n) {
  assert_int_equal(x->nbytes, n);
  if (memcmp(x->data, want, n) != 0) {
    const unsigned char *a = x->data, *w = want;
    for (size_t i = 0; i < n; i++)
      if (a[i] != w[i]) fail_msg("byte %zu differs: got 0x%02x, want 0x%02x", i, a[i], w[i]);
  }
}

/* Deterministic pseudo-random numbers for test data. */
static inline uint64_t tb_rand(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

/* ---- stand-in elementwise kernels ----
 * Bodies and comparators of the ops under test use add, compare, ... whose kernels belong to the
 * elementwise family. Where that family has not registered one (a branch without it), these
 * simple stand-ins are registered so programs can be created; the real kernels win when present.
 * They handle same-shaped f32, f64, s32, s64, u32, u8 and i1 operands. */
static int tb_stub_binop(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  int64_t n = lm_type_numel(&out[0]->type);
  lm_dtype dt = in[0]->type.dtype;
  for (int64_t i = 0; i < n; i++) {
    double a, b, r = 0;
    int64_t ia, ib, ir = 0;
    bool fl = lm_dtype_is_float(dt);
    size_t es = lm_dtype_size(dt);
    const char *pa = (const char *)in[0]->data + i * es, *pb = (const char *)in[1]->data + i * es;
    a = lm_load_f64(pa, dt);
    b = lm_load_f64(pb, dt);
    ia = lm_load_index(pa, dt, 0);
    ib = lm_load_index(pb, dt, 0);
    switch (k->op->code) {
      case LM_OP_ADD: r = a + b; ir = (int64_t)((uint64_t)ia + (uint64_t)ib); break;
      case LM_OP_SUBTRACT: r = a - b; ir = (int64_t)((uint64_t)ia - (uint64_t)ib); break;
      case LM_OP_MULTIPLY: r = a * b; ir = (int64_t)((uint64_t)ia * (uint64_t)ib); break;
      case LM_OP_MAXIMUM: r = (a != a || b != b) ? NAN : a > b ? a : b; ir = ia > ib ? ia : ib; break;
      case LM_OP_MINIMUM: r = (a != a || b != b) ? NAN : a < b ? a : b; ir = ia < ib ? ia : ib; break;
      case LM_OP_AND: ir = ia & ib; break;
      case LM_OP_OR: ir = ia | ib; break;
      default: return lm_kerr(k, LOOM_UNSUPPORTED, "test stand-in does not do this op");
    }
    void *po = (char *)out[0]->data + i * es;
    if (fl) lm_store_f64(po, dt, r);
    else lm_store_i64(po, dt, dt == LOOM_DTYPE_PRED ? (ir != 0) : ir);
  }
  return 0;
}

static int tb_stub_compare(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  const lm_attr *d = lm_op_attr(k->op, "comparison_direction"), *t = lm_op_attr(k->op, "compare_type");
  int64_t n = lm_type_numel(&out[0]->type);
  lm_dtype dt = in[0]->type.dtype;
  size_t es = lm_dtype_size(dt);
  for (int64_t i = 0; i < n; i++) {
    int r = lm_compare_elems(d ? d->s : "EQ", t ? t->s : NULL, dt, (const char *)in[0]->data + i * es,
                             (const char *)in[1]->data + i * es);
    if (r < 0) return lm_kerr(k, LOOM_UNSUPPORTED, "test stand-in cannot compare this");
    ((uint8_t *)out[0]->data)[i] = (uint8_t)r;
  }
  return 0;
}

static int tb_stub_select(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  int64_t n = lm_type_numel(&out[0]->type);
  size_t es = lm_dtype_size(out[0]->type.dtype);
  bool scalar = in[0]->type.rank == 0;
  for (int64_t i = 0; i < n; i++) {
    bool p = ((uint8_t *)in[0]->data)[scalar ? 0 : i];
    memcpy((char *)out[0]->data + i * es, (char *)in[p ? 1 : 2]->data + i * es, es);
  }
  return 0;
}

static int tb_stub_constant(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  const lm_attr *v = lm_op_attr(k->op, "value");
  if (!v || v->kind != LM_ATTR_DENSE || v->nbytes != out[0]->nbytes) return lm_kerr(k, LOOM_VERIFY, "bad constant");
  memcpy(out[0]->data, v->data, v->nbytes);
  return 0;
}

static inline void tb_ensure_stub_kernels(void) {
  lm_kernels_init();
  lm_opcode bin[] = {LM_OP_ADD, LM_OP_SUBTRACT, LM_OP_MULTIPLY, LM_OP_MAXIMUM, LM_OP_MINIMUM, LM_OP_AND, LM_OP_OR};
  for (size_t i = 0; i < sizeof bin / sizeof *bin; i++)
    if (!lm_kernel_get(bin[i])) lm_kernel_register(bin[i], tb_stub_binop, NULL, 0);
  if (!lm_kernel_get(LM_OP_COMPARE)) lm_kernel_register(LM_OP_COMPARE, tb_stub_compare, NULL, 0);
  if (!lm_kernel_get(LM_OP_CONSTANT)) lm_kernel_register(LM_OP_CONSTANT, tb_stub_constant, NULL, 0);
  if (!lm_kernel_get(LM_OP_SELECT)) lm_kernel_register(LM_OP_SELECT, tb_stub_select, NULL, 0);
}

#endif
