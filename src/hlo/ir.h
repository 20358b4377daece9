/* The program IR: a StableHLO module as typed SSA ops with regions, independent of how it was
 * read. The text parser (parse.c) builds it today; a reader of MLIR bytecode (what JAX sends
 * over its proxy protocol) builds the same structures later. The verifier and the executor
 * only ever see this form.
 *
 * Ownership: every pointer inside an lm_module points into module->arena and lives exactly as
 * long as the module (lm_module_free). Nothing here is mutated after parsing, except by passes
 * that say so.
 *
 * Normal form of attributes. Pretty and generic spellings of the same op produce the same IR:
 * the parser stores attributes under their generic (property) names with these kinds:
 *   - integer lists (`dims = [0, 1]`, `array<i64: 0, 1>`, `dense<[0, 1]> : tensor<2xi64>` when the
 *     op wants a list) -> LM_ATTR_INTS; e.g. broadcast_in_dim's `broadcast_dimensions`,
 *     transpose's `permutation`, reduce's `dimensions`, slice's `start_indices`/`limit_indices`/
 *     `strides`, pad's `edge_padding_low`/`edge_padding_high`/`interior_padding`.
 *     Readers should use lm_attr_ints(), which also accepts DENSE integer attributes.
 *   - enums (`GT`, `#stablehlo<comparison_direction GT>`, `FLOAT`, `DEFAULT`) -> LM_ATTR_ENUM with
 *     the bare value name ("GT"); compare has `comparison_direction` and (optional) `compare_type`.
 *   - structured attributes (`#stablehlo.gather<...>`, `#stablehlo.scatter<...>`,
 *     `#stablehlo.dot<...>`, `#stablehlo.conv<...>` / `dim_numbers = [b, 0, 1, f]x[...]->[...]`,
 *     `#stablehlo.channel_handle<...>`) -> LM_ATTR_STRUCT whose `s` is the attribute's name
 *     ("stablehlo.gather") and whose fields are its parameters by their generic names
 *     (offset_dims, collapsed_slice_dims, ..., as INTS or INT). The pretty dot_general form
 *     `batching_dims = [0] x [0], contracting_dims = [2] x [1]` becomes a `dot_dimension_numbers`
 *     STRUCT "stablehlo.dot" with lhs_batching_dimensions, rhs_batching_dimensions,
 *     lhs_contracting_dimensions, rhs_contracting_dimensions.
 *     Convolution's `dim_numbers` becomes `dimension_numbers` STRUCT "stablehlo.conv" with
 *     input_batch_dimension, input_feature_dimension, input_spatial_dimensions,
 *     kernel_input_feature_dimension, kernel_output_feature_dimension, kernel_spatial_dimensions,
 *     output_batch_dimension, output_feature_dimension, output_spatial_dimensions; its `window`
 *     becomes window_strides, padding (DENSE Nx2 i64), lhs_dilation, rhs_dilation,
 *     window_reversal (INTS of 0/1).
 *   - `dense<...>` constants and other elements attributes -> LM_ATTR_DENSE: the tensor type and
 *     the elements unpacked to the dtype's natural little-endian layout (i1 as one byte 0/1,
 *     f16/bf16 as uint16 bits, complex as (re, im) pairs), splats expanded to every element.
 *   - unit attributes (`use_global_device_ids`) -> LM_ATTR_UNIT.
 *   - sharding: `#sdy.sharding<@mesh, [{"x"}, {}], replicated={"y"}>` -> STRUCT "sdy.sharding" with
 *     fields `mesh` (SYMBOL, or a STRUCT "sdy.mesh" when inline), `dims` (ARRAY of ARRAY of
 *     STRING axis names; a trailing `?` open marker dropped) and optional `replicated` (ARRAY of
 *     STRING). `sdy.mesh @m = <["x"=2, "y"=4]>` is a module-level op (lm_module.ops) with
 *     `sym_name` (SYMBOL) and `mesh` = STRUCT "sdy.mesh" with fields `axis_names` (ARRAY of
 *     STRING) and `axis_sizes` (INTS). `mhlo.sharding` stays a STRING.
 *   - more names, as the parser produces them (pretty spelling -> generic name):
 *     custom_call `@target` -> `call_target_name` STRING; func.call `@f` -> `callee` SYMBOL;
 *     composite `"name"` -> `name` STRING (`decomposition` SYMBOL); reduce_precision
 *     `format = e5m10` -> `exponent_bits` / `mantissa_bits` INT; dot/dot_general `precision = [..]`
 *     -> `precision_config` ARRAY of ENUM; `algorithm = <...>` -> `algorithm` STRUCT
 *     "stablehlo.dot_algorithm". The "stablehlo.dot" STRUCT always holds all four fields (empty
 *     INTS where the text omits one). Integer-list attributes (INTS) never have a NULL `ints`.
 *   - Shardy ops: sdy.sharding_constraint / sdy.reshard `<@mesh, [...]>` -> `sharding` STRUCT
 *     "sdy.sharding"; sdy.manual_computation -> `in_shardings`, `out_shardings` (ARRAY of STRUCT
 *     "sdy.sharding", generic form `#sdy.sharding_per_value<[...]>` gives the same) and
 *     `manual_axes` (ARRAY of STRING); its one region's block arguments are the per-device values
 *     and it ends with sdy.return.
 *   - check ops: `value` (DENSE, the _const forms), `tolerance` (FLOAT), `min_ulp_difference` /
 *     `max_ulp_difference` (INT), `probe_id` (STRING).
 *   - a dialect attribute the parser has no form for (`#foo.bar<...>`) -> STRUCT "foo.bar" with one
 *     field `raw` (STRING, the text between the angle brackets); a bare word where an attribute is
 *     expected (e.g. `tf32` in a dot algorithm) -> ENUM with that word. `index` in the type of a
 *     dense attribute (layouts: `dense<[0, 1]> : tensor<2xindex>`) reads as i64.
 * Ops written in pretty form with operands and a region (reduce's `applies stablehlo.add`,
 * while's `cond { } do { }`) produce the same regions and block arguments as the generic form.
 *
 * Values: every SSA value of a function (block arguments of every region included) has a dense id
 * 0..nvalues-1 in that function; value_types[id] is its type. Regions of ops that are not
 * isolated (while, case, if, manual_computation) may use values defined above them.
 * Op semantics are the StableHLO spec's (openxla/stablehlo docs/spec.md); sections cited where
 * each op is executed. */
#ifndef LM_HLO_IR_H
#define LM_HLO_IR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "common/arena.h"
#include "common/dtype.h"
#include "common/err.h"

#define LM_MAX_RANK 16
#define LM_DYN_DIM (-1) /* a `?` dimension; the executor refuses dynamic shapes */

typedef enum lm_type_kind {
  LM_TYPE_TENSOR = 0, /* tensor<2x3xf32>; rank 0 is a scalar tensor<f32> */
  LM_TYPE_TOKEN = 1,  /* !stablehlo.token */
  LM_TYPE_TUPLE = 2,  /* tuple<tensor<f32>, !stablehlo.token> */
} lm_type_kind;

typedef struct lm_type {
  uint8_t kind;               /* lm_type_kind */
  uint8_t dtype;              /* lm_dtype, for tensors */
  uint8_t rank;               /* number of dims, for tensors */
  uint32_t ntuple;            /* element count, for tuples */
  struct lm_type *tuple;      /* element types, for tuples (arena) */
  int64_t dims[LM_MAX_RANK];  /* sizes, or LM_DYN_DIM */
} lm_type;

typedef struct lm_loc {
  const char *file; /* path as given to the parser; may be "<string>" */
  uint32_t line, col; /* 1-based */
} lm_loc;

typedef enum lm_attr_kind {
  LM_ATTR_UNIT = 0,  /* present without a value */
  LM_ATTR_BOOL,      /* i: 0 or 1 */
  LM_ATTR_INT,       /* i; type (if written, e.g. `1 : i64`) in `type` */
  LM_ATTR_FLOAT,     /* f */
  LM_ATTR_STRING,    /* s (NUL-terminated; n = byte length, may contain NULs) */
  LM_ATTR_SYMBOL,    /* s = name without '@' */
  LM_ATTR_ENUM,      /* s = the enum value's name, e.g. "GT", "DEFAULT" */
  LM_ATTR_INTS,      /* ints[n] */
  LM_ATTR_DENSE,     /* type (a tensor type) + data[nbytes] in the dtype's layout */
  LM_ATTR_ARRAY,     /* items[n] */
  LM_ATTR_DICT,      /* fields[n] */
  LM_ATTR_STRUCT,    /* s = attribute name ("stablehlo.gather"), fields[n] */
  LM_ATTR_TYPE,      /* type */
} lm_attr_kind;

typedef struct lm_named_attr lm_named_attr;

typedef struct lm_attr {
  uint8_t kind;                 /* lm_attr_kind */
  uint32_t n;                   /* length of ints / items / fields / string */
  int64_t i;                    /* INT, BOOL */
  double f;                     /* FLOAT */
  const char *s;                /* STRING, SYMBOL, ENUM, STRUCT */
  int64_t *ints;                /* INTS */
  struct lm_attr *items;        /* ARRAY */
  lm_named_attr *fields;        /* DICT, STRUCT */
  lm_type *type;                /* DENSE, TYPE, typed INT/FLOAT; NULL otherwise */
  void *data;                   /* DENSE */
  size_t nbytes;                /* DENSE */
  /* DENSE from `dense_resource<NAME>`: its bytes live outside the text (a large constant the
   * client put as an array, docs/programs.md "Large constants"). data is NULL (nbytes 0) until
   * the parser's resolver supplies them; printed as dense_resource<NAME> while unresolved. */
  const char *resource;
} lm_attr;

struct lm_named_attr {
  const char *name;
  lm_attr value;
};

typedef struct lm_region lm_region;

/* Op codes: known ops get a code so the executor dispatches with a switch; an op the parser does
 * not know (generic form only) gets LM_OP_UNKNOWN and keeps its name, so running it fails with an
 * error naming the op and its location. Append-only list, see ops.def. */
typedef enum lm_opcode {
#define LM_OP(code, name) LM_OP_##code,
#include "hlo/ops.def"
#undef LM_OP
  LM_OP_COUNT
} lm_opcode;

/* Name ("stablehlo.add") for a code, and code for a name (LM_OP_UNKNOWN if not known). */
const char *lm_opcode_name(lm_opcode code);
lm_opcode lm_opcode_from_name(const char *name, size_t n);

typedef struct lm_op {
  uint16_t code;          /* lm_opcode */
  const char *name;       /* full op name as written, e.g. "stablehlo.add" */
  uint32_t nin, nout, nattrs, nregions;
  uint32_t *in;           /* operand value ids */
  uint32_t *out;          /* result value ids */
  lm_named_attr *attrs;   /* attributes (properties and discardable ones together) */
  lm_region *regions;
  lm_loc loc;             /* where the op starts in the source */
} lm_op;

typedef struct lm_block {
  uint32_t nargs;         /* block arguments */
  uint32_t *args;         /* their value ids */
  uint32_t nops;
  lm_op *ops;             /* the last op is the terminator (func.return, stablehlo.return, ...) */
} lm_block;

struct lm_region {
  uint32_t nblocks;       /* StableHLO regions have exactly one block; others are refused */
  lm_block *blocks;
};

typedef struct lm_func {
  const char *name;       /* symbol without '@' */
  bool is_public;         /* func.func public / private (default public) */
  uint32_t nargs, nresults;
  lm_type *arg_types;     /* [nargs] */
  lm_type *result_types;  /* [nresults] */
  lm_attr *arg_attrs;     /* [nargs] DICT attributes (n = 0 when none), e.g. mhlo.sharding */
  lm_attr *result_attrs;  /* [nresults] DICT attributes */
  lm_named_attr *attrs;   /* function attributes */
  uint32_t nattrs;
  lm_region body;         /* one block; its args are the function's arguments */
  uint32_t nvalues;       /* SSA values in this function, all regions included */
  lm_type *value_types;   /* [nvalues] */
  lm_loc loc;
} lm_func;

typedef struct lm_module {
  const char *name;       /* `module @name`, or NULL */
  lm_named_attr *attrs;   /* module attributes: mhlo.num_replicas, mhlo.num_partitions, ... */
  uint32_t nattrs;
  lm_func *funcs;
  uint32_t nfuncs;
  lm_op *ops;             /* module-level ops other than functions (sdy.mesh); no values */
  uint32_t nops;
  lm_arena arena;         /* owns everything above */
  struct lm_module_hold *holds; /* what resolved constants borrow, released with the module */
} lm_module;

/* Something a module borrows (a resolved constant's bytes) and lets go of in lm_module_free. */
typedef struct lm_module_hold {
  struct lm_module_hold *next;
  void (*release)(void *arg);
  void *arg;
} lm_module_hold;

/* ---- helpers (ir.c) ---- */

void lm_module_free(lm_module *m); /* frees the arena and the module itself; NULL is a no-op */
const lm_func *lm_module_func(const lm_module *m, const char *name);
/* Whether argument i of fn is donated: JAX marks it `jax.buffer_donor = true` or, when it
 * aliases an output, `tf.aliasing_output = N`. */
bool lm_func_arg_donated(const lm_func *fn, uint32_t i);
const lm_attr *lm_attrs_get(const lm_named_attr *attrs, uint32_t n, const char *name);
const lm_attr *lm_op_attr(const lm_op *op, const char *name);
const lm_attr *lm_module_attr(const lm_module *m, const char *name);
/* Integer attribute value (INT or BOOL, or a 1-element INTS/DENSE); returns dflt if absent or
 * not an integer. */
int64_t lm_attr_int_or(const lm_attr *a, int64_t dflt);
/* A list of integers from INTS, an integer DENSE attribute (any rank, row-major), or an ARRAY of
 * INTs. Copies into out[cap]; returns the count, or -1 if the attribute is not an integer list or
 * has more than cap elements. */
int lm_attr_ints(const lm_attr *a, int64_t *out, int cap);

/* Tensor type helpers. */
int64_t lm_type_numel(const lm_type *t);         /* product of dims (1 for rank 0); -1 if dynamic */
size_t lm_type_nbytes(const lm_type *t);         /* numel * dtype size; 0 for tokens and tuples */
bool lm_type_equal(const lm_type *a, const lm_type *b);
bool lm_type_is_static(const lm_type *t);
/* Writes "tensor<2x3xf32>" (MLIR spelling) into buf; returns buf. */
char *lm_type_str(const lm_type *t, char *buf, size_t cap);
void lm_type_tensor(lm_type *t, lm_dtype dtype, int rank, const int64_t *dims);

#endif
