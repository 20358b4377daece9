/* Internals of the MLIR bytecode reader (bytecode.h), shared by:
 *   bc_read.c  the container: varints, sections, the string / dialect / attribute-type /
 *              properties tables, and the IR section (ops, regions, blocks, values);
 *   bc_attr.c  attribute and type entries: the builtin and VHLO dialects' encodings, and the text
 *              form of dialects without one (sdy), decoded into lm_attr / lm_type;
 *   vhlo.c     VHLO ops into StableHLO IR: op names and versions, attribute conversions and the
 *              defaults VHLO spells out.
 * The format is llvm-project's mlir/docs/BytecodeFormat.md; VHLO's encodings are openxla/stablehlo's
 * VhloBytecode.cpp. Not a public header. */
#ifndef LM_HLO_BC_INT_H
#define LM_HLO_BC_INT_H

#include <stdbool.h>
#include <stdint.h>
#include "hlo/bytecode.h"
#include "hlo/ir.h"

#define BC_MAX_DEPTH 256 /* nesting of regions, attributes and types */

/* A read position inside [p, end). */
typedef struct bc_cur {
  const uint8_t *p, *end;
} bc_cur;

typedef enum bc_dialect_kind { BC_D_OTHER, BC_D_BUILTIN, BC_D_VHLO, BC_D_SDY, BC_D_FUNC } bc_dialect_kind;

typedef struct bc_dialect {
  const char *name;      /* NUL-terminated, in the string section */
  uint8_t kind;          /* bc_dialect_kind */
  const uint8_t *ver;    /* its version entry, if any */
  size_t nver;
} bc_dialect;

typedef struct bc_opname {
  uint32_t dialect;
  const char *name;      /* without the dialect prefix */
  const char *full;      /* "dialect.name" (arena), for messages and unknown ops */
  int8_t registered;     /* 1/0 from the file (bytecode >= 5), -1 when not recorded */
  /* VHLO lookups, done once per name rather than once per op (bc_read.c) */
  int8_t mapped;         /* 1 once code/op_name are set */
  uint16_t code;         /* the StableHLO opcode it maps to */
  const char *op_name;
  int8_t props_known;    /* 1 once props/nprops are set */
  int nprops;
  const char **props;    /* its property names, sorted (arena) */
} bc_opname;

/* An attribute or type entry: where its encoding is and, once read, its value. */
typedef struct bc_entry {
  const uint8_t *data;
  size_t size;
  uint32_t dialect;
  uint8_t custom;        /* dialect encoding (1) or NUL-terminated text (0) */
  uint8_t state;         /* 0 unread, 1 being read (a cycle if met again), 2 read */
  void *val;             /* lm_attr * or bc_type * */
} bc_entry;

typedef enum bc_type_kind {
  BC_T_TYPE,   /* t is a Loom type (tensor, token, tuple; an element type as a rank-0 tensor) */
  BC_T_FUNC,   /* a function type: ins -> outs */
  BC_T_NONE,   /* vhlo.none / builtin none (no type, e.g. an absent dot algorithm) */
  BC_T_INDEX,  /* index: t is a rank-0 i64 */
  BC_T_NAMED,  /* a type Loom does not run, kept by name (e.g. tf32 in a dot algorithm) */
} bc_type_kind;

typedef struct bc_type {
  uint8_t kind;          /* bc_type_kind */
  bool is_unsigned;      /* for integer element types */
  uint8_t width;         /* integer bit width (1..64), 0 for others */
  lm_type t;
  lm_type *ins, *outs;   /* BC_T_FUNC */
  uint32_t nin, nout;
  const char *name;      /* BC_T_NAMED, and for messages about unsupported types */
} bc_type;

typedef struct lm_bc {
  const uint8_t *data, *end;
  const char *file;
  lm_err *err;
  struct lm_loc *locs;   /* [nattrs] resolved locations (bc_loc), malloc'd on first use */
  uint8_t *loc_state;    /* [nattrs] 0 unresolved, 1 being resolved, 2 resolved, 3 none */
  lm_module *m;
  size_t max_const, max_total;
  uint64_t version;                 /* bytecode format version */
  char producer[80];                /* "StableHLO_v1.13.7", truncated */
  int shlo_version[3];              /* StableHLO version written, {-1,..} when unknown */
  /* tables */
  const char **strs;
  uint32_t *slens;
  uint64_t nstrs;
  bc_dialect *dialects;
  uint64_t ndialects;
  bc_opname *opnames;
  uint64_t nopnames;
  bc_entry *attrs;
  uint64_t nattrs;
  bc_entry *types;
  uint64_t ntypes;
  const uint8_t *props;             /* the properties section's buffers */
  size_t nprops_bytes;
  uint64_t *prop_off;
  uint64_t nprops;
  int depth;
  /* values: the bytecode numbers values per isolated-from-above scope; vals maps them to the ids
   * of the Loom function being built (UINT32_MAX: reserved, not defined yet) */
  uint32_t *vals;
  uint32_t nvals, capvals;
  uint32_t scope_base;
  /* the function being built */
  lm_type *vtypes;
  uint32_t nvtypes, capvtypes;
  bool in_func;
  uint32_t nops_read;               /* for messages: index of the op being read */
} lm_bc;

/* ---- bc_read.c ---- */
int bc_fail(lm_bc *bc, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* A failure at a position of the input: "FILE: byte N: message". */
int bc_fail_at(lm_bc *bc, const uint8_t *at, int code, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
int bc_byte(lm_bc *bc, bc_cur *c, uint8_t *out);
int bc_varint(lm_bc *bc, bc_cur *c, uint64_t *out);
int bc_svarint(lm_bc *bc, bc_cur *c, int64_t *out);
int bc_bytes(lm_bc *bc, bc_cur *c, size_t n, const uint8_t **out);
/* A count of items that each take at least min_bytes of what remains (refuses absurd counts
 * before anything is allocated). */
int bc_count(lm_bc *bc, bc_cur *c, size_t min_bytes, uint64_t *out);
int bc_string(lm_bc *bc, bc_cur *c, const char **out, uint32_t *len);
void *bc_alloc(lm_bc *bc, size_t n);
void *bc_array(lm_bc *bc, size_t n, size_t sz);
char *bc_strdup(lm_bc *bc, const char *s, size_t n);
int bc_enter(lm_bc *bc);
static inline void bc_leave(lm_bc *bc) { bc->depth--; }

/* ---- bc_attr.c ---- */
/* The attribute / type at index idx of the file's tables, read on first use. */
int bc_attr(lm_bc *bc, uint64_t idx, const lm_attr **out);
int bc_type_at(lm_bc *bc, uint64_t idx, const bc_type **out);
/* A type that must be a Loom value type (tensor, token, tuple); names it otherwise. */
int bc_value_type(lm_bc *bc, uint64_t idx, const lm_type **out);
/* An attribute or type reference read from c. */
int bc_attr_ref(lm_bc *bc, bc_cur *c, const lm_attr **out);
int bc_type_ref(lm_bc *bc, bc_cur *c, const bc_type **out);
/* The source location an op's location attribute points to (file:line:col of the innermost
 * file location found); never fails: anything unreadable gives no location. */
void bc_loc(lm_bc *bc, uint64_t idx, lm_loc *out);
/* Describes a type for messages ("tensor<2xf32>", "f8E4M3FN", "(...) -> ..."). */
const char *bc_type_str(const bc_type *t, char *buf, size_t cap);

/* ---- vhlo.c ---- */
/* The StableHLO op a VHLO op name ("add_v1") stands for; fills the Loom op's name and code, or
 * fails naming the op and what this reader supports. */
int vhlo_op_name(lm_bc *bc, const char *name, lm_op *op);
/* Converts a VHLO op's attributes (already decoded, names as given) into the IR's normal form
 * for op->code, dropping the defaults VHLO spells out. */
int vhlo_op_attrs(lm_bc *bc, lm_op *op, const lm_named_attr *in, uint32_t nin);
/* Converts a discardable attribute value (function argument attributes, module attributes). */
int vhlo_generic_attr(lm_bc *bc, const lm_attr *in, lm_attr *out);
/* The names of a VHLO op's properties, in the order bytecode >= 5 writes them (none: *n = 0). */
int vhlo_prop_names(lm_bc *bc, const char *op, const char **names, int cap, int *n);
/* Checks the StableHLO version a file says it was written for. */
int vhlo_check_version(lm_bc *bc, int major, int minor, int patch, const char *what);

#endif
