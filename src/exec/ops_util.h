/* Helpers shared by the structured-op kernels (movement.c, gather.c, sort.c, window.c, misc.c,
 * fft.c, linalg.c, rng.c): row-major strides and index iteration, strided block copies, reading
 * integer index tensors, the fast-path binary ops of reduction and scatter bodies, calling a body
 * region on scalars, and the checks verifiers share. Nothing here allocates tensors except
 * lm_body (scalar argument buffers charged to the run's device). */
#ifndef LM_EXEC_OPS_UTIL_H
#define LM_EXEC_OPS_UTIL_H

#include <stdbool.h>
#include <stdint.h>
#include "exec/kernel.h"

/* Tests set this to run every body through lm_exec_region (no fast paths), so the fast paths
 * can be compared with the generic path on the same program. 0 in normal use. */
extern int lm_ops_generic_only;

/* ---- shapes and indices ---- */

/* Row-major element strides of a tensor type (strides[rank-1] = 1). */
void lm_row_strides(const lm_type *t, int64_t *strides);

/* Odometer step over the index space dims[rank]: increments idx (last dim fastest); returns false
 * (with idx back at all zeros) after the last index. */
static inline bool lm_index_next(int rank, const int64_t *dims, int64_t *idx) {
  for (int d = rank - 1; d >= 0; d--) {
    if (++idx[d] < dims[d]) return true;
    idx[d] = 0;
  }
  return false;
}

/* Copies the box dims[rank] from src to dst, element strides given per dim for each side (in
 * elements; zero and negative strides allowed: broadcast, reverse). dst and src must not overlap.
 * Merges contiguous dims, copies whole rows with memcpy, and transposes in cache-sized tiles when
 * the fastest source dim is not the fastest destination dim. */
void lm_copy_strided(int rank, const int64_t *dims, size_t esize, void *dst, const int64_t *dst_strides,
                     const void *src, const int64_t *src_strides);

/* Writes n copies of the esize-byte element at val into dst. */
void lm_fill_elems(void *dst, const void *val, size_t esize, size_t n);

/* Element i of an integer (or i1) tensor as int64; ui64 values above INT64_MAX saturate to
 * INT64_MAX (they are out of bounds for every tensor anyway). */
int64_t lm_load_index(const void *data, lm_dtype dt, int64_t i);

/* Element conversions used where an op computes values (iota, fft, linalg, batch_norm): store an
 * integer or a double into an element of dtype dt (rounding to nearest even for narrower floats,
 * wrapping for integers, (v, 0) for complex, v != 0 for i1), and load an element as a double (the
 * real part of a complex). */
void lm_store_i64(void *p, lm_dtype dt, int64_t v);
void lm_store_f64(void *p, lm_dtype dt, double v);
double lm_load_f64(const void *p, lm_dtype dt);

/* Clamps v into [lo, hi] (hi < lo gives lo). */
static inline int64_t lm_clamp64(int64_t v, int64_t lo, int64_t hi) {
  if (v > hi) v = hi;
  if (v < lo) v = lo;
  return v;
}

/* True if operand i's buffer may be reused as this op's result: only the interpreter's frame
 * holds it, nothing views it, the op does not read it through another operand, and the plan
 * releases the value right after this op (its last use). Lets dynamic_update_slice and scatter
 * update in place instead of copying. */
bool lm_input_donatable(const lm_kctx *k, uint32_t i);

/* ---- fast-path binary ops of bodies (reduce_window, scatter, select_and_scatter, ...) ---- */

/* acc[i*acc_stride] = acc[i*acc_stride] OP x[i*x_stride] for i in [0, n), strides in elements,
 * with the semantics of the StableHLO op OP on dtype (spec 'add', 'multiply', 'maximum',
 * 'minimum', 'and', 'or', 'xor'): integers wrap, i1 add/max is or and multiply/min is and,
 * f16/bf16 are computed in f32 and rounded once (exact for one op), maximum/minimum propagate
 * NaN and order -0 < +0, complex maximum/minimum compare (re, im) lexicographically. */
typedef void (*lm_binop_fn)(void *acc, const void *x, int64_t n, int64_t acc_stride, int64_t x_stride);

/* The kernel for op on dtype, or NULL if this combination has no fast path (caller falls back to
 * running the body region). Also NULL when lm_ops_generic_only is set. */
lm_binop_fn lm_binop_lookup(lm_opcode op, lm_dtype dt);

/* If region r of op is `^bb(%a0..%a(2n-1)): return %a(n+i)...` for i in [0, n) (the body keeps
 * the second half of its arguments, "replace"), returns true. Lets scatter write updates
 * directly. */
bool lm_region_returns_second_half(const lm_op *op, uint32_t r);

/* ---- calling a body region on scalars ---- */

/* A region of the current op called on rank-0 arguments element by element (the generic path of
 * bodies and comparators). Argument buffers are allocated once and reused between calls. */
typedef struct lm_body {
  lm_kctx *k;
  uint32_t region;
  uint32_t nargs, nres;
  lm_buffer **args;          /* [nargs] scalar buffers, types from the region's block arguments */
  lm_buffer **res;           /* [nres] scratch for results */
  size_t *arg_size;          /* [nargs] bytes per argument */
} lm_body;

/* Prepares calls of region `region` of k->op returning nres values. Fails if the region does not
 * have rank-0 (or one-element) tensor arguments. */
int lm_body_init(lm_body *b, lm_kctx *k, uint32_t region, uint32_t nres);
/* Calls the region with argument bytes args[nargs] (each arg_size[i] bytes) and copies each
 * result's bytes to res[i] (res_size[i] bytes expected; a result of another size is an error). */
int lm_body_call(lm_body *b, const void *const *args, void *const *res, const size_t *res_size);
void lm_body_free(lm_body *b);

/* ---- families in files of their own, registered from lm_register_misc_kernels() ---- */
void lm_register_rng_kernels(void);    /* rng.c: rng_bit_generator */
void lm_register_fft_kernels(void);    /* fft.c: fft */
void lm_register_linalg_kernels(void); /* linalg.c: triangular_solve, cholesky, potrf/getrf/trsm/geqrf/orgqr */
void lm_register_lapack_kernels(void); /* lapack.c: gesdd, syevd/heevd, geev, gees, gehrd, sytrd/hetrd */
void lm_register_einsum_kernels(void); /* einsum.c: einsum, unary_einsum */

/* ---- verifier helpers ---- */

/* Type of value v of fn. */
static inline const lm_type *lm_vtype(const lm_func *fn, uint32_t v) { return &fn->value_types[v]; }

/* Reads integer-list attribute `name` of op into out[cap]. Returns the count; absent gives
 * dflt_absent (or an error naming the attribute when dflt_absent < 0); a non-list is an error. */
int lm_op_ints(const lm_op *op, const char *name, int64_t *out, int cap, int dflt_absent, lm_err *err);
/* Same for a field of a STRUCT attribute (e.g. "stablehlo.gather" fields); NULL s means absent. */
int lm_struct_ints(const lm_op *op, const lm_attr *s, const char *field, int64_t *out, int cap, lm_err *err);

/* Checks that op has nin operands and nout results. */
int lm_check_arity(const lm_op *op, uint32_t nin, uint32_t nout, lm_err *err);
/* Checks that op's operand i (or result i) is a tensor with a static shape; names it in the error. */
int lm_check_tensor(const lm_op *op, const lm_func *fn, bool result, uint32_t i, lm_err *err);
/* lm_check_tensor for operands [0, nin), then results [0, nout). */
int lm_check_tensors(const lm_op *op, const lm_func *fn, uint32_t nin, uint32_t nout, lm_err *err);
/* Checks that each result i has operand i's type exactly (the caller has checked that there are
 * as many results as operands). */
int lm_check_results_like_operands(const lm_op *op, const lm_func *fn, lm_err *err);

/* Checks that region r of op (one block) ends in a return of n rank-0 tensors of types dts[n];
 * `what` names the region in the error ("comparator", "body", ...). */
int lm_check_region_results(const lm_op *op, uint32_t r, const lm_func *fn, uint32_t n, const lm_dtype *dts,
                            const char *what, lm_err *err);

/* True if every value of v[n] is in [0, bound) and no value repeats. */
bool lm_dims_valid(const int64_t *v, int n, int64_t bound);
bool lm_dims_sorted(const int64_t *v, int n);
bool lm_dims_contains(const int64_t *v, int n, int64_t x);

/* "[1, 2, 3]" into buf (for messages). */
const char *lm_ints_str(const int64_t *v, int n, char *buf, size_t cap);

#endif
