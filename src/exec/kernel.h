/* How ops are computed: the kernel interface between the interpreter (interp.c) and the op
 * families (one file per family: elementwise.c, reduce.c, dot.c, movement.c, gather.c, ...).
 *
 * A family registers its kernels from lm_register_<family>_kernels(), listed in kernels.c.
 * A kernel computes one op: it reads its inputs and writes its outputs. By default the
 * interpreter allocates the outputs from the op's result types before the call; a kernel
 * registered with LM_KF_OWN_OUTPUTS allocates (or aliases) them itself. Kernels never see the
 * text form and never print; on failure they return a negative loom_status with a message via
 * lm_kerr(), which prefixes the op name and location. */
#ifndef LM_EXEC_KERNEL_H
#define LM_EXEC_KERNEL_H

#include "exec/exec.h"

typedef struct lm_run_state lm_run_state; /* interp.c: one lm_program_run in progress */

typedef struct lm_kctx {
  lm_run_state *rs;         /* the run this op belongs to */
  const lm_program *prog;
  const lm_func *fn;        /* function whose value ids the op uses */
  const lm_op *op;          /* the op being computed */
  const lm_run_opts *opts;  /* device, process id, collectives */
  lm_err *err;
  /* private to the interpreter */
  const struct lm_plan_op *pop;
  const struct lm_plan_func *pf;
  lm_buffer **frame;
} lm_kctx;

/* in[op->nin], out[op->nout]. */
typedef int (*lm_kernel_fn)(lm_kctx *k, lm_buffer *const *in, lm_buffer **out);
/* Compile-time check of one op (shapes, attributes). May be NULL. fn is the enclosing function
 * (for value types). */
typedef int (*lm_verify_fn)(const lm_op *op, const lm_func *fn, lm_err *err);

enum {
  LM_KF_OWN_OUTPUTS = 1u << 0, /* the kernel allocates or aliases out[] itself */
  LM_KF_ELEMENTWISE = 1u << 1, /* pure elementwise on same-shaped operands: may be fused */
};

typedef struct lm_kernel_info {
  lm_kernel_fn fn;
  lm_verify_fn verify;
  uint32_t flags;
} lm_kernel_info;

void lm_kernel_register(lm_opcode code, lm_kernel_fn fn, lm_verify_fn verify, uint32_t flags);
const lm_kernel_info *lm_kernel_get(lm_opcode code); /* NULL when no kernel */

/* Error helper for kernels and verifiers: "stablehlo.gather at f.mlir:3:8: <message>". */
int lm_kerr(lm_kctx *k, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int lm_op_err(lm_err *err, const lm_op *op, int code, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Allocates a buffer on the run's device (for LM_KF_OWN_OUTPUTS kernels and scratch). */
int lm_kalloc(lm_kctx *k, const lm_type *t, lm_buffer **out);

/* Runs a region of the op (regions[r]) with the given block arguments; results[] receives new
 * references to the values passed to the region's terminator. Used by while, case, if, map, and
 * as the generic fallback for reduction bodies and comparators. */
int lm_exec_region(lm_kctx *k, uint32_t r, lm_buffer *const *args, uint32_t nargs, lm_buffer **results,
                   uint32_t nresults);
/* Calls function `name` of the program (func.call, interpreter.run_parallel). */
int lm_exec_call(lm_kctx *k, const char *name, lm_buffer *const *args, uint32_t nargs, lm_buffer **results,
                 uint32_t nresults);

/* If region r of op is `^bb(a, b): %c = <binop> a, b; return %c` (in either operand order),
 * returns that binop's code (LM_OP_ADD, LM_OP_MAXIMUM, ...); otherwise LM_OP_UNKNOWN. Lets
 * reduce, scatter, reduce_window and all_reduce take a fast path for common bodies. */
lm_opcode lm_region_simple_binop(const lm_op *op, uint32_t r, const lm_func *fn);

/* stablehlo.custom_call dispatches on its call_target_name to a handler registered here (misc.c)
 * from any family's lm_register_*_kernels() (e.g. check.c for @check.expect_*). flags as for
 * lm_kernel_register (LM_KF_OWN_OUTPUTS: the handler allocates or aliases its results). A target
 * without a handler is refused when the program is created, with an error naming it. The target
 * string must outlive the program (a literal). At most 64 targets; a second registration of a
 * target replaces the first. */
void lm_custom_call_register(const char *target, lm_kernel_fn fn, lm_verify_fn verify, uint32_t flags);

/* Op families; each defined in its own file and called once from kernels.c. */
void lm_register_elementwise_kernels(void);
void lm_register_reduce_kernels(void);
void lm_register_dot_kernels(void);
void lm_register_control_kernels(void);
void lm_register_movement_kernels(void);
void lm_register_gather_kernels(void);
void lm_register_sort_kernels(void);
void lm_register_window_kernels(void);
void lm_register_misc_kernels(void);
void lm_register_check_kernels(void);
void lm_register_collective_kernels(void);
void lm_kernels_init(void); /* idempotent, thread-safe */

#endif
