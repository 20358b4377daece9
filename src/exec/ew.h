/* The elementwise engine: array kernels per (op, element type), and small programs of them that
 * run tile by tile. One engine serves single elementwise ops, fused chains of them (fusion.c),
 * and the scalar bodies of reduce / map / sort comparators evaluated over whole vectors at once,
 * so every path computes every element with the same code (fused == unfused, bit for bit).
 *
 * f16 and bf16 are computed in f32 and rounded to the 16-bit type after every op, as XLA does;
 * f32 transcendental functions are evaluated in double precision and rounded once. */
#ifndef LM_EXEC_EW_H
#define LM_EXEC_EW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "exec/kernel.h"

#define LM_EW_MAXIN 3   /* most operands of an elementwise op (select, clamp) */
#define LM_EW_TILE 1024 /* elements per tile when a program runs */

typedef struct lm_ew_inst lm_ew_inst;

/* out[0..n) = op(in[0][0..n), ...). Operand arrays are full length n (scalars are splatted by the
 * caller). Arrays may alias when element sizes match (in-place evaluation). */
typedef void (*lm_ew_fn)(void *out, const void *const *in, size_t n, const lm_ew_inst *inst);

/* Comparison directions and types (spec 'compare'). */
enum { LM_CMP_EQ, LM_CMP_NE, LM_CMP_GE, LM_CMP_GT, LM_CMP_LE, LM_CMP_LT };
enum { LM_CMPT_NONE, LM_CMPT_FLOAT, LM_CMPT_TOTALORDER, LM_CMPT_SIGNED, LM_CMPT_UNSIGNED };

struct lm_ew_inst {
  lm_ew_fn fn;          /* the kernel */
  lm_ew_fn fn32;        /* for the f16/bf16 widening wrapper: the f32 kernel it calls */
  uint16_t code;        /* lm_opcode (chlo broadcast ops mapped to their plain op) */
  uint8_t nin;          /* operands */
  uint8_t in_dtype;     /* element type of the (first) operand */
  uint8_t in2_dtype;    /* element type of the second operand where it differs (select, polygamma) */
  uint8_t out_dtype;    /* element type of the result */
  uint8_t dir, cmp;     /* compare direction and type */
  int32_t ebits, mbits; /* reduce_precision */
  /* program wiring (fusion.c); unused by kernels */
  uint16_t src[LM_EW_MAXIN];
  uint16_t dst;
};

/* Fills inst (fn, dtypes, parameters) for op code `code` with operand element types in[nin] and
 * result type out, taking attributes (comparison_direction, exponent_bits, ...) from attr_op (may
 * be NULL when the op has none). Fails with LOOM_UNSUPPORTED naming the op and the type when the
 * combination is not defined by the spec or not implemented. err_op is used for the message. */
int lm_ew_make(lm_opcode code, int nin, const lm_dtype *in, lm_dtype out, const lm_op *attr_op, lm_ew_inst *inst,
               lm_err *err);

/* Whether ops with this code are elementwise ops the engine computes (stablehlo and chlo). */
bool lm_ew_is_elementwise(lm_opcode code);
/* The plain op for a chlo.broadcast_* op (LM_OP_ADD for chlo.broadcast_add), else code itself. */
lm_opcode lm_ew_plain_code(lm_opcode code);

/* Conversion of n elements between any two supported element types (spec 'convert'):
 * integer overflow wraps, float->int truncates toward zero and saturates (NaN -> 0), any -> i1
 * is `!= 0` (complex: of the real part), complex -> real drops the imaginary part. */
void lm_convert_array(void *out, lm_dtype to, const void *in, lm_dtype from, size_t n);

/* Reads element i of an array of type t as int64 (floats truncated, saturating). For tests,
 * checks and index math. */
int64_t lm_elem_as_i64(const void *p, lm_dtype t, size_t i);

/* ---- programs ---- */

/* Where a program value lives while a tile runs. */
typedef enum lm_ew_slot_kind {
  LM_SLOT_ARG = 0,   /* program input arg, full length: pointer + tile offset */
  LM_SLOT_SPLAT,     /* one value repeated: filled once per run (scalar input or constant) */
  LM_SLOT_GATHER,    /* program input arg broadcast to the program's shape: gathered per tile */
  LM_SLOT_TMP,       /* a tile register */
  LM_SLOT_OUT,       /* program output: pointer into the output + tile offset */
} lm_ew_slot_kind;

typedef struct lm_ew_slot {
  uint8_t kind;        /* lm_ew_slot_kind */
  uint8_t dtype;
  uint16_t reg;        /* TMP and SPLAT: register index; */
  uint32_t arg;        /* ARG, GATHER, SPLAT-from-arg: input index; OUT: output index */
  int splat_src;       /* SPLAT: 0 = element 0 of input `arg`, 1 = constant bytes in `cval` */
  unsigned char cval[16];
  /* GATHER: result dims and, per result dim, the stride (elements) into the input; 0 = repeat */
  uint8_t rank;
  int64_t dims[LM_MAX_RANK];
  int64_t strides[LM_MAX_RANK];
} lm_ew_slot;

typedef struct lm_ew_prog {
  uint32_t ninst;
  lm_ew_inst *inst;   /* in evaluation order; src/dst are slot indexes */
  uint32_t nslots;
  lm_ew_slot *slots;
  uint32_t nin, nout; /* program inputs and outputs */
  uint32_t nregs;     /* tile registers needed (TMP, SPLAT and GATHER) */
  uint32_t reg_esize; /* bytes per element of a register (largest element type used) */
  int64_t numel;      /* elements of the program's shape (-1: given at run time) */
} lm_ew_prog;

/* Runs prog over n elements: in[nin] are the input arrays (scalars for SPLAT inputs, operand
 * arrays for GATHER inputs), out[nout] the output arrays. Tiles [lo, hi) of the index range only,
 * so callers can split the work between threads. Scratch: malloc'ed per call. */
int lm_ew_prog_run(const lm_ew_prog *prog, const void *const *in, void *const *out, size_t lo, size_t hi,
                   lm_err *err);

/* Builds a program from a region's single block whose ops are all elementwise on scalars (reduce,
 * map, sort and scatter bodies): inputs are the block arguments, outputs the terminator's
 * operands, evaluated over vectors of any length. Constants inside become splats. Returns
 * LOOM_UNSUPPORTED (without a message worth showing) when the body has other ops; callers then
 * fall back to running the region element by element. The program is allocated in arena. */
int lm_ew_compile_region(const lm_region *r, const lm_func *fn, lm_arena *arena, lm_ew_prog **out, lm_err *err);

#endif
