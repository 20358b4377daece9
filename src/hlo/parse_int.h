/* Internals of the StableHLO text reader, shared by parse_core.c (tokens, errors, names),
 * parse_types.c, parse_attrs.c (attributes and dense constants), parse_ops.c (generic op form,
 * regions, functions, module) and parse_pretty.c / parse_pretty2.c (the pretty forms of
 * individual ops).
 * Not a public header: only the parser includes it. */
#ifndef LM_HLO_PARSE_INT_H
#define LM_HLO_PARSE_INT_H

#include <stdbool.h>
#include <stdint.h>
#include "hlo/ir.h"
#include "hlo/lex.h"
#include "hlo/parse.h"

#define LM_PARSE_MAX_DEPTH 256        /* nesting of regions, attributes and types together */
#define LM_PARSE_MAX_LIST (1u << 24)  /* operands, results, attributes, list items of one thing */

/* One name in scope: `%name` (or `%name:N` group) -> value ids value..value+count-1. */
typedef struct lm_name_ent {
  const char *name;  /* points into the source text */
  uint32_t n;        /* its length */
  uint32_t hash;
  uint32_t value;    /* first value id of the group */
  uint32_t count;    /* values in the group (1 unless `%x:N = ...`) */
  int32_t next;      /* older entry in the same hash bucket, or -1 */
} lm_name_ent;

/* Names visible in the function being parsed: a stack of entries (popped when a region ends) with
 * hash buckets over it. Heap memory, owned by the parser, freed once at the end. */
typedef struct lm_names {
  lm_name_ent *ents;
  uint32_t nents, capents;
  int32_t *buckets;  /* [nbuckets] newest entry per bucket, or -1 */
  uint32_t nbuckets; /* power of two, or 0 before first use */
} lm_names;

/* An attribute or type alias defined at top level: `#name = ...` / `!name = type`. */
typedef struct lm_alias {
  const char *name;
  size_t n;
  bool is_type;
  lm_attr attr;
  lm_type type;
} lm_alias;

typedef struct lm_parser {
  const char *src, *end;  /* the whole text */
  lm_lexpos pos;          /* where lexing resumes after `tok` */
  lm_tok tok;             /* the current (lookahead) token */
  const char *file;       /* for messages and lm_loc (arena copy) */
  lm_module *m;
  lm_arena *a;            /* where lm_p_alloc allocates: &m->arena, or &scratch (see below) */
  lm_arena scratch;       /* parse-time data that dies with the function being parsed: value
                             types while growing, op signatures, operand tokens, result names */
  lm_err *err;
  int depth;              /* current nesting, capped at LM_PARSE_MAX_DEPTH */
  bool index_ok;          /* `index` reads as i64 (inside dense<...> attribute types only) */
  bool bare_literals;     /* numbers and strings take no `: type` suffix (keyword values of pretty forms) */
  size_t max_const;       /* cap on one dense constant's bytes */
  size_t max_total;       /* cap on the arena */
  const lm_parse_opts *opts; /* the caller's (resolve), or NULL */
  /* the function being parsed */
  lm_type *vtypes;        /* value types, arena vector */
  uint32_t nvalues, capvalues;
  lm_names names;
  /* top-level aliases */
  lm_alias *aliases;
  uint32_t naliases, capaliases;
} lm_parser;

/* Switches lm_p_alloc to the scratch arena (returns the arena to restore with lm_p_scratch_off). */
static inline lm_arena *lm_p_scratch_on(lm_parser *p) {
  lm_arena *a = p->a;
  p->a = &p->scratch;
  return a;
}
static inline void lm_p_scratch_off(lm_parser *p, lm_arena *a) { p->a = a; }

/* A saved parser position, to look ahead and come back. */
typedef struct lm_pmark {
  lm_lexpos pos;
  lm_tok tok;
} lm_pmark;

/* ---- parse_core.c ---- */
void lm_p_next(lm_parser *p);
static inline bool lm_p_is(const lm_parser *p, lm_tok_kind k) { return p->tok.k == k; }
bool lm_p_eat(lm_parser *p, lm_tok_kind k);
/* True when the current token is the bare identifier `word`. */
bool lm_p_is_id(const lm_parser *p, const char *word);
bool lm_p_eat_id(lm_parser *p, const char *word);
/* Consumes a token of kind k or fails with "expected <what>, found ...". */
int lm_p_expect(lm_parser *p, lm_tok_kind k, const char *what);
int lm_p_expect_id(lm_parser *p, const char *word);
/* "file:line:col: expected <what>, found <current token>" (LOOM_PARSE). */
int lm_p_expected(lm_parser *p, const char *what);
/* "file:line:col: <message>" at token t (current token when NULL). */
int lm_p_errf(lm_parser *p, const lm_tok *t, int code, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
int lm_p_nomem(lm_parser *p);
int lm_p_enter(lm_parser *p); /* depth + 1, fails past the cap */
static inline void lm_p_leave(lm_parser *p) { p->depth--; }
lm_pmark lm_p_mark(const lm_parser *p);
void lm_p_reset(lm_parser *p, const lm_pmark *mk);
/* Restarts lexing at raw position q (inside the current line structure known from tok). */
void lm_p_seek(lm_parser *p, const char *q);
/* Arena allocation with the module cap; NULL after setting an error. */
void *lm_p_alloc(lm_parser *p, size_t n);
void *lm_p_array(lm_parser *p, size_t n, size_t sz);
char *lm_p_strndup(lm_parser *p, const char *s, size_t n);
/* Appends one element of size sz to the arena vector *v (n used, *cap allocated). Returns the new
 * slot (zeroed) or NULL after an error. */
void *lm_p_push(lm_parser *p, void **v, uint32_t *n, uint32_t *cap, size_t sz);
/* Decodes a string token's escapes (\n \t \" \\ \XX) into the arena; *len gets the length. */
char *lm_p_decode_str(lm_parser *p, const lm_tok *t, uint32_t *len);
/* Value of hex digit c (0-9, a-f, A-F), or -1 (string escapes, dense<"0x..."> blobs). Inline:
 * a hex blob calls it twice per byte. */
static inline int lm_p_hexval(int c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* Values and names of the function being parsed. */
int lm_p_new_values(lm_parser *p, uint32_t count, const lm_type *types, uint32_t *first);
int lm_p_bind(lm_parser *p, const lm_tok *name, uint32_t value, uint32_t count);
/* Resolves `%name` or `%name#k` (the current token, consumed) to a value id. */
int lm_p_use(lm_parser *p, uint32_t *value);
uint32_t lm_p_scope_mark(const lm_parser *p);
void lm_p_scope_pop(lm_parser *p, uint32_t mark);
void lm_p_names_reset(lm_parser *p);
void lm_p_names_free(lm_parser *p);

/* ---- parse_types.c ---- */
/* Any type: tensor<...>, !stablehlo.token, tuple<...>, or a bare element type (as rank 0). */
int lm_p_type(lm_parser *p, lm_type *out);
/* A function type `(T, ...) -> T` or `-> (T, ...)`; arrays in the arena. */
int lm_p_func_type(lm_parser *p, lm_type **ins, uint32_t *nin, lm_type **outs, uint32_t *nout);
/* `T` or `(T, T)`-less comma list `T, T, ...` until something that is not a type. */
int lm_p_type_list(lm_parser *p, lm_type **out, uint32_t *n);
/* `(T, T, ...)` including the parentheses; `()` gives zero types. */
int lm_p_paren_types(lm_parser *p, lm_type **out, uint32_t *n);
/* True if the current token can start a type. */
bool lm_p_at_type(const lm_parser *p);
/* An element type name (f32, ui8, complex<f64>, ...) as the current token(s). */
int lm_p_elem_type(lm_parser *p, lm_dtype *out);

/* ---- parse_attrs.c ---- */
int lm_p_attr(lm_parser *p, lm_attr *out);
/* An attribute value in a pretty form's `key = value`: a number or string there has no `: type`
 * suffix (what follows the colon is the op's type). */
int lm_p_attr_bare(lm_parser *p, lm_attr *out);
/* `{name = value, unit_name, ...}` (the current token is '{'). Appends to *attrs. */
int lm_p_attr_dict(lm_parser *p, lm_named_attr **attrs, uint32_t *n, uint32_t *cap);
/* `dense<...>` elements for a known tensor type (current token is the identifier `dense`),
 * including the trailing `: type` when has_type; fills a DENSE attribute. */
int lm_p_dense(lm_parser *p, lm_attr *out);
int lm_p_dense_resource(lm_parser *p, lm_attr *out); /* `dense_resource<NAME> : tensor<...>` */
/* Integer list `[1, 2, 3]` (the DenseI64Array pretty form) into an INTS attribute. */
int lm_p_int_list(lm_parser *p, lm_attr *out);
/* One (optionally negative) integer literal. */
int lm_p_int(lm_parser *p, int64_t *out);
/* A number with its optional `: type` (INT, FLOAT or BOOL). */
int lm_p_number_attr(lm_parser *p, lm_attr *out);
/* `<["x"=2, ...]>` (current token '<') into a STRUCT "sdy.mesh". */
int lm_p_sdy_mesh(lm_parser *p, lm_attr *out);
/* Adds a named attribute (the name is copied). */
int lm_p_add_attr(lm_parser *p, lm_named_attr **attrs, uint32_t *n, uint32_t *cap, const char *name,
                  const lm_attr *value);
/* `<@mesh, [{"x"}, {}]>` (current token '<', consumed through the closing '>') into a STRUCT
 * "sdy.sharding". */
int lm_p_sdy_sharding_body(lm_parser *p, lm_attr *out);
/* `[<@mesh, [...]>, ...]` (current token '[') into an ARRAY of "sdy.sharding" STRUCTs. */
int lm_p_sdy_sharding_list(lm_parser *p, lm_attr *out);
/* `#stablehlo.conv` dimension-numbers body `[b, 0, f]x[0, i, o]->[b, 0, f]` into a STRUCT. */
int lm_p_conv_dims(lm_parser *p, lm_attr *out);
/* The name of a structured attribute, e.g. "stablehlo.gather", with fields. */
void lm_attr_struct(lm_attr *a, const char *name, lm_named_attr *fields, uint32_t n);

/* ---- parse_ops.c ---- */
/* What an op parser builds before it is committed to its block. */
typedef struct lm_opb {
  lm_op op;
  uint32_t *in;         /* operand ids (arena vector) */
  uint32_t capin;
  lm_tok *in_toks;      /* where each operand was written, for messages */
  uint32_t nin_toks, capin_toks;
  lm_type *in_types;    /* as written in the op's signature (checked against the values) */
  uint32_t nin_types;
  lm_type *out_types;   /* result types */
  uint32_t nout_types;
  lm_named_attr *attrs;
  uint32_t capattrs;
  lm_region *regions;
  uint32_t capregions;
  uint32_t nresults_named; /* results named on the left of '=' */
} lm_opb;

int lm_p_operand(lm_parser *p, lm_opb *b);              /* one `%x` or `%x#k` */
int lm_p_operand_list(lm_parser *p, lm_opb *b);         /* `%a, %b, ...` (possibly empty) */
int lm_p_opb_attr(lm_parser *p, lm_opb *b, const char *name, const lm_attr *v);
/* A region `{ ^bb0(%a: T): ops }` or `{ ops }`; block args given by the caller when
 * args/nargs are set (pretty forms that declare them outside the braces). */
typedef struct lm_barg {
  lm_tok name;
  lm_type type;
} lm_barg;
int lm_p_region(lm_parser *p, lm_opb *b, const lm_barg *args, uint32_t nargs);
/* `(%a: T, %b: T)` block-argument list into args (arena). */
int lm_p_block_args(lm_parser *p, lm_barg **args, uint32_t *nargs);
/* Parses one op statement (with its result names) and appends it to ops. */
int lm_p_parse_op(lm_parser *p, lm_op **ops, uint32_t *nops, uint32_t *capops);
/* Ops up to the '}' that closes the current region or body (not consumed). */
int lm_p_block_ops(lm_parser *p, lm_block *blk);

/* ---- parse_pretty.c ---- */
/* Parses everything after the op name for an op in pretty form. Returns 1 when the op has no
 * pretty form known here (caller reports it), 0 on success, negative on error. */
int lm_p_pretty_op(lm_parser *p, lm_opb *b);
/* A reader of the type signature after ':', filling b's operand and result types. */
typedef int (*lm_p_sig_fn)(lm_parser *p, lm_opb *b);
/* Type signature after ':' for ops whose operands and results may share one written type. */
int lm_p_sig_same(lm_parser *p, lm_opb *b);
int lm_p_sig_functional(lm_parser *p, lm_opb *b);
/* `: signature` read by sig into the scratch arena: signatures only live until the op is
 * committed. */
int lm_p_colon_sig(lm_parser *p, lm_opb *b, lm_p_sig_fn sig);
/* The optional `{attrs}` or `attributes {attrs}` of a pretty form, added to the op. */
int lm_p_opt_attr_dict(lm_parser *p, lm_opb *b);

/* ---- parse_pretty2.c ---- */
/* The pretty forms with regions or structured attributes (reduce, while, convolution, dots,
 * calls, check/chlo/sdy ops); same contract as lm_p_pretty_op. */
int lm_p_pretty_op2(lm_parser *p, lm_opb *b);

#endif
