/* A compiled form of small body regions on scalars (sort comparators, scatter / reduce_window /
 * select_and_scatter bodies): when every op of the region is one of a few with exactly known
 * semantics (constant, compare, select, and, or, xor, not, add, subtract, multiply, maximum,
 * minimum, negate, real, imag), the region is turned into a straight-line list of instructions
 * on 16-byte slots and evaluated in C, element by element, without buffers. Regions using any
 * other op are not compiled and their callers run them through lm_exec_region instead, so this
 * only ever changes speed, never results. */
#ifndef LM_EXEC_SCALAR_EVAL_H
#define LM_EXEC_SCALAR_EVAL_H

#include "exec/kernel.h"

typedef struct lm_sprog lm_sprog;

/* Compiles region r of op (its block arguments and results rank-0 tensors). Returns NULL when the
 * region uses an unsupported op or type, does not return exactly nres values, or when
 * lm_ops_generic_only is set. */
lm_sprog *lm_sprog_compile(const lm_op *op, uint32_t r, const lm_func *fn, uint32_t nres);
/* Compiles the body of function f (a comparator given as a function, e.g. ApproxTopK's), which
 * must return nres values. */
lm_sprog *lm_sprog_compile_func(const lm_func *f, uint32_t nres);
/* Compiles only what value `value` of region r depends on, returning that value (one result). */
lm_sprog *lm_sprog_compile_value(const lm_op *op, uint32_t r, const lm_func *fn, uint32_t value);
/* Evaluates: args[i] points at block argument i's element bytes, res[i] receives result i's. */
void lm_sprog_run(const lm_sprog *p, const void *const *args, void *const *res);
void lm_sprog_free(lm_sprog *p);

/* Spec 'compare' on one pair of elements of dtype dt: dir is "EQ", "NE", "LT", "LE", "GT", "GE";
 * type is "FLOAT", "TOTALORDER", "SIGNED", "UNSIGNED" or NULL (derived from dt). Returns 0/1, or
 * -1 if the combination is not supported (complex ordering). */
int lm_compare_elems(const char *dir, const char *type, lm_dtype dt, const void *a, const void *b);

/* The same split in two steps, for callers that compare many pairs: lm_compare_parse turns the
 * spellings into codes (-1 if unknown); lm_order_elems gives -1 (a < b), 0 (equal), 1 (a > b) or
 * 2 (unordered: a NaN under FLOAT, or complex); lm_compare_test applies direction dir to it. */
int lm_compare_parse(const char *dir, const char *type, lm_dtype dt, int *d, int *ct);
int lm_order_elems(int ct, lm_dtype dt, const void *a, const void *b);
/* A fast lm_order_elems for one (ct, dt), or NULL when that pair only has the general path. */
typedef int (*lm_order_fn)(const void *a, const void *b);
lm_order_fn lm_order_get(int ct, lm_dtype dt);
bool lm_compare_test(int dir, int ordering);

#endif
