/* The MLIR bytecode container (bytecode.h, bc_int.h): varints and sections, the string, dialect,
 * attribute/type and properties tables, and the IR section, whose ops become Loom IR as they are
 * read: builtin.module gives the module, vhlo.func_v1 the functions, vhlo ops StableHLO ops
 * (vhlo.c), sdy ops themselves, and builtin.unrealized_conversion_cast (which the serializer puts
 * between VHLO and sdy types) disappears: its result is its operand.
 *
 * Values: the file numbers them per isolated-from-above scope, each region reserving a range
 * (its `numValues`) after its parent's; `vals` mirrors that stack and maps each number to the id
 * of the Loom value it defines in the function being built. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "hlo/bc_int.h"
#include "hlo/verify.h"

#define BC_UNDEF UINT32_MAX

enum { SEC_STRING, SEC_DIALECT, SEC_ATTRTYPE, SEC_ATTRTYPE_OFFSET, SEC_IR, SEC_RESOURCE, SEC_RESOURCE_OFFSET,
       SEC_DIALECT_VERSIONS, SEC_PROPERTIES, SEC_COUNT };
static const char *const k_section_names[SEC_COUNT] = {"string", "dialect", "attribute/type", "attribute/type offset",
                                                       "IR", "resource", "resource offset", "dialect versions",
                                                       "properties"};

/* op encoding mask bits */
enum { OP_ATTRS = 0x01, OP_RESULTS = 0x02, OP_OPERANDS = 0x04, OP_SUCCESSORS = 0x08, OP_REGIONS = 0x10,
       OP_USELISTS = 0x20, OP_PROPS = 0x40 };

/* what a region belongs to, for its terminator's name */
typedef enum { PARENT_OP, PARENT_FUNC, PARENT_MODULE } bc_parent;

/* ---- errors and primitives ---- */

int bc_fail(lm_bc *bc, int code, const char *fmt, ...) {
  char msg[LM_ERR_MSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (bc->err->code) return bc->err->code; /* keep the first (innermost) error */
  return lm_errf(bc->err, code, "%s: %s", bc->file, msg);
}

int bc_fail_at(lm_bc *bc, const uint8_t *at, int code, const char *fmt, ...) {
  char msg[LM_ERR_MSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (bc->err->code) return bc->err->code;
  return lm_errf(bc->err, code, "%s: byte %zu: %s", bc->file, (size_t)(at - bc->data), msg);
}

static int truncated(lm_bc *bc, const bc_cur *c) {
  return bc_fail_at(bc, c->p, LOOM_PARSE, "truncated input (unexpected end of %s)",
                    c->end == bc->end ? "file" : "section");
}

int bc_byte(lm_bc *bc, bc_cur *c, uint8_t *out) {
  if (c->p >= c->end) return truncated(bc, c);
  *out = *c->p++;
  return 0;
}

int bc_varint(lm_bc *bc, bc_cur *c, uint64_t *out) {
  if (c->p >= c->end) return truncated(bc, c);
  uint8_t first = *c->p;
  if (first & 1) { /* the common one-byte form */
    c->p++;
    *out = first >> 1;
    return 0;
  }
  unsigned extra = first ? (unsigned)__builtin_ctz(first) : 8; /* bytes after the first */
  if ((size_t)(c->end - c->p) < 1 + (size_t)extra) return truncated(bc, c);
  uint64_t v = 0;
  if (extra == 8) {
    for (int i = 0; i < 8; i++) v |= (uint64_t)c->p[1 + i] << (8 * i);
  } else {
    for (unsigned i = 0; i <= extra; i++) v |= (uint64_t)c->p[i] << (8 * i);
    v >>= extra + 1;
  }
  c->p += 1 + extra;
  *out = v;
  return 0;
}

int bc_svarint(lm_bc *bc, bc_cur *c, int64_t *out) {
  uint64_t v;
  LM_TRY(bc_varint(bc, c, &v));
  *out = (int64_t)((v >> 1) ^ (~(v & 1) + 1));
  return 0;
}

int bc_bytes(lm_bc *bc, bc_cur *c, size_t n, const uint8_t **out) {
  if ((size_t)(c->end - c->p) < n) return truncated(bc, c);
  *out = c->p;
  c->p += n;
  return 0;
}

int bc_count(lm_bc *bc, bc_cur *c, size_t min_bytes, uint64_t *out) {
  const uint8_t *at = c->p;
  LM_TRY(bc_varint(bc, c, out));
  size_t left = (size_t)(c->end - c->p);
  if (*out > (min_bytes ? left / min_bytes : left) || *out > (1u << 28))
    return bc_fail_at(bc, at, LOOM_PARSE, "count %llu is larger than what remains of the input (%zu bytes)",
                      (unsigned long long)*out, left);
  return 0;
}

int bc_string(lm_bc *bc, bc_cur *c, const char **out, uint32_t *len) {
  const uint8_t *at = c->p;
  uint64_t i;
  LM_TRY(bc_varint(bc, c, &i));
  if (i >= bc->nstrs) return bc_fail_at(bc, at, LOOM_PARSE, "string index %llu out of range (%llu strings)",
                                        (unsigned long long)i, (unsigned long long)bc->nstrs);
  *out = bc->strs[i];
  if (len) *len = bc->slens[i];
  return 0;
}

void *bc_alloc(lm_bc *bc, size_t n) {
  if (bc->m->arena.total + n > bc->max_total) {
    bc_fail(bc, LOOM_UNSUPPORTED, "the program needs more than %zu bytes of memory to hold", bc->max_total);
    return NULL;
  }
  void *p = lm_arena_alloc(&bc->m->arena, n ? n : 1);
  if (!p) bc_fail(bc, LOOM_NO_MEMORY, "out of host memory");
  return p;
}

void *bc_array(lm_bc *bc, size_t n, size_t sz) {
  size_t t;
  if (lm_mul_size(n ? n : 1, sz, &t)) {
    bc_fail(bc, LOOM_PARSE, "array size overflows");
    return NULL;
  }
  return bc_alloc(bc, t);
}

char *bc_strdup(lm_bc *bc, const char *s, size_t n) {
  char *d = bc_alloc(bc, n + 1);
  if (d) {
    memcpy(d, s, n);
    d[n] = 0;
  }
  return d;
}

int bc_enter(lm_bc *bc) {
  if (++bc->depth > BC_MAX_DEPTH) {
    bc->depth--;
    return bc_fail(bc, LOOM_PARSE, "nesting deeper than %d (regions, attributes and types together)", BC_MAX_DEPTH);
  }
  return 0;
}

/* Grows a malloc'd vector (the value stack and types, which die with the read). */
static int grow(lm_bc *bc, void **v, uint32_t *cap, uint32_t need, size_t sz) {
  if (need <= *cap) return 0;
  if (need > (1u << 28)) return bc_fail(bc, LOOM_UNSUPPORTED, "more than %u values in one scope", 1u << 28);
  uint32_t nc = *cap ? *cap : 64;
  while (nc < need) nc *= 2;
  void *nv = realloc(*v, (size_t)nc * sz);
  if (!nv) return bc_fail(bc, LOOM_NO_MEMORY, "out of host memory");
  *v = nv;
  *cap = nc;
  return 0;
}

/* ---- sections ---- */

/* A section header and its data; `id` gets its kind. Padding before aligned data is relative to
 * the start of the file (the writer's convention) and must be 0xCB bytes. */
static int read_section(lm_bc *bc, bc_cur *c, uint8_t *id, bc_cur *data) {
  const uint8_t *at = c->p;
  uint8_t b;
  uint64_t len;
  LM_TRY(bc_byte(bc, c, &b));
  LM_TRY(bc_varint(bc, c, &len));
  *id = b & 0x7f;
  if (*id >= SEC_COUNT) return bc_fail_at(bc, at, LOOM_PARSE, "unknown section id %u", *id);
  if (b & 0x80) {
    uint64_t align;
    LM_TRY(bc_varint(bc, c, &align));
    if (!align || (align & (align - 1)) || align > 4096)
      return bc_fail_at(bc, at, LOOM_PARSE, "section alignment %llu is not a power of two up to 4096",
                        (unsigned long long)align);
    while ((size_t)(c->p - bc->data) & (align - 1)) {
      uint8_t pad;
      LM_TRY(bc_byte(bc, c, &pad));
      if (pad != 0xCB) return bc_fail_at(bc, c->p - 1, LOOM_PARSE, "expected alignment padding 0xCB, found 0x%02X", pad);
    }
  }
  const uint8_t *p;
  if (len > (uint64_t)(c->end - c->p))
    return bc_fail_at(bc, at, LOOM_PARSE, "%s section of %llu bytes runs past the end of the input (%zu bytes left)",
                      k_section_names[*id], (unsigned long long)len, (size_t)(c->end - c->p));
  LM_TRY(bc_bytes(bc, c, (size_t)len, &p));
  data->p = p;
  data->end = p + len;
  return 0;
}

static int read_strings(lm_bc *bc, bc_cur c) {
  uint64_t n;
  LM_TRY(bc_count(bc, &c, 2, &n)); /* each string: a length byte and at least its NUL */
  bc->nstrs = n;
  bc->strs = bc_array(bc, n, sizeof *bc->strs);
  bc->slens = bc_array(bc, n, sizeof *bc->slens);
  if (!bc->strs || !bc->slens) return bc->err->code;
  uint64_t *sizes = malloc((n ? n : 1) * sizeof *sizes);
  if (!sizes) return bc_fail(bc, LOOM_NO_MEMORY, "out of host memory");
  int rc = 0;
  for (uint64_t i = 0; i < n && rc == 0; i++) rc = bc_varint(bc, &c, &sizes[n - 1 - i]); /* stored in reverse */
  uint64_t total = 0;
  for (uint64_t i = 0; i < n && rc == 0; i++) {
    if (sizes[i] == 0 || sizes[i] > (uint64_t)(c.end - c.p) || total > (uint64_t)(c.end - c.p) - sizes[i])
      rc = bc_fail_at(bc, c.p, LOOM_PARSE, "string %llu of %llu bytes does not fit in the string section",
                      (unsigned long long)i, (unsigned long long)sizes[i]);
    else total += sizes[i];
  }
  if (rc == 0 && total != (uint64_t)(c.end - c.p))
    rc = bc_fail_at(bc, c.p, LOOM_PARSE, "string section holds %zu bytes of strings, its table says %llu",
                    (size_t)(c.end - c.p), (unsigned long long)total);
  /* the module owns its strings: names in the IR point into this copy, not into the input */
  uint8_t *q = rc == 0 ? bc_alloc(bc, (size_t)total) : NULL;
  if (rc == 0 && !q) rc = bc->err->code;
  if (rc == 0 && total) memcpy(q, c.p, (size_t)total);
  const uint8_t *src = c.p;
  for (uint64_t i = 0; i < n && rc == 0; i++) {
    if (q[sizes[i] - 1] != 0) rc = bc_fail_at(bc, src, LOOM_PARSE, "string %llu is not NUL-terminated", (unsigned long long)i);
    src += sizes[i];
    bc->strs[i] = (const char *)q;
    bc->slens[i] = (uint32_t)(sizes[i] - 1);
    q += sizes[i];
  }
  free(sizes);
  return rc;
}

static uint8_t dialect_kind(const char *name) {
  if (!strcmp(name, "builtin")) return BC_D_BUILTIN;
  if (!strcmp(name, "vhlo")) return BC_D_VHLO;
  if (!strcmp(name, "sdy")) return BC_D_SDY;
  if (!strcmp(name, "func")) return BC_D_FUNC;
  return BC_D_OTHER;
}

static int dialect_ref(lm_bc *bc, bc_cur *c, uint32_t *out) {
  const uint8_t *at = c->p;
  uint64_t d;
  LM_TRY(bc_varint(bc, c, &d));
  if (d >= bc->ndialects) return bc_fail_at(bc, at, LOOM_PARSE, "dialect index %llu out of range (%llu dialects)",
                                            (unsigned long long)d, (unsigned long long)bc->ndialects);
  *out = (uint32_t)d;
  return 0;
}

/* VHLO's dialect version: major, minor, patch varints. */
static int check_dialect_version(lm_bc *bc, const bc_dialect *d) {
  if (d->kind != BC_D_VHLO || !d->ver) return 0;
  bc_cur c = {d->ver, d->ver + d->nver};
  uint64_t v[3];
  for (int i = 0; i < 3; i++) LM_TRY(bc_varint(bc, &c, &v[i]));
  if (v[0] > 1000 || v[1] > 1000 || v[2] > 1000)
    return bc_fail(bc, LOOM_PARSE, "implausible VHLO version %llu.%llu.%llu", (unsigned long long)v[0],
                   (unsigned long long)v[1], (unsigned long long)v[2]);
  return vhlo_check_version(bc, (int)v[0], (int)v[1], (int)v[2], "the VHLO dialect version recorded in the file");
}

static int read_dialects(lm_bc *bc, bc_cur c) {
  uint64_t n;
  LM_TRY(bc_count(bc, &c, 1, &n));
  bc->ndialects = n;
  bc->dialects = bc_array(bc, n, sizeof *bc->dialects);
  if (!bc->dialects) return bc->err->code;
  for (uint64_t i = 0; i < n; i++) {
    bc_dialect *d = &bc->dialects[i];
    if (bc->version < 1) {
      LM_TRY(bc_string(bc, &c, &d->name, NULL));
    } else {
      const uint8_t *at = c.p;
      uint64_t v;
      LM_TRY(bc_varint(bc, &c, &v));
      if ((v >> 1) >= bc->nstrs) return bc_fail_at(bc, at, LOOM_PARSE, "dialect name index out of range");
      d->name = bc->strs[v >> 1];
      if (v & 1) {
        uint8_t id;
        bc_cur vs;
        LM_TRY(read_section(bc, &c, &id, &vs));
        if (id != SEC_DIALECT_VERSIONS)
          return bc_fail_at(bc, at, LOOM_PARSE, "dialect %s: expected its version section, found a %s section", d->name,
                            k_section_names[id]);
        d->ver = vs.p;
        d->nver = (size_t)(vs.end - vs.p);
      }
    }
    d->kind = dialect_kind(d->name);
    LM_TRY(check_dialect_version(bc, d));
  }
  uint64_t hint = 0;
  if (bc->version >= 4) LM_TRY(bc_count(bc, &c, 1, &hint)); /* number of op names, a sizing hint */
  uint32_t cap = 0;
  while (c.p < c.end) {
    uint32_t dl;
    uint64_t k;
    LM_TRY(dialect_ref(bc, &c, &dl));
    LM_TRY(bc_count(bc, &c, 1, &k));
    for (uint64_t j = 0; j < k; j++) {
      if (bc->nopnames == cap) {
        bc_opname *nv = bc_array(bc, cap ? cap * 2 : 32, sizeof *nv);
        if (!nv) return bc->err->code;
        if (cap) memcpy(nv, bc->opnames, cap * sizeof *nv);
        bc->opnames = nv;
        cap = cap ? cap * 2 : 32;
      }
      bc_opname *o = &bc->opnames[bc->nopnames++];
      o->dialect = dl;
      o->registered = -1;
      if (bc->version >= 5) {
        const uint8_t *at = c.p;
        uint64_t v;
        LM_TRY(bc_varint(bc, &c, &v));
        if ((v >> 1) >= bc->nstrs) return bc_fail_at(bc, at, LOOM_PARSE, "op name index out of range");
        o->name = bc->strs[v >> 1];
        o->registered = (int8_t)(v & 1);
      } else {
        LM_TRY(bc_string(bc, &c, &o->name, NULL));
      }
      size_t dn = strlen(bc->dialects[dl].name), on = strlen(o->name);
      char *full = bc_alloc(bc, dn + on + 2);
      if (!full) return bc->err->code;
      memcpy(full, bc->dialects[dl].name, dn);
      full[dn] = '.';
      memcpy(full + dn + 1, o->name, on + 1);
      o->full = full;
    }
  }
  return 0;
}

/* The offset section gives, per dialect group, the size of each attribute then type entry. */
static int read_attrtype_offsets(lm_bc *bc, bc_cur data, bc_cur c) {
  uint64_t na, nt;
  LM_TRY(bc_count(bc, &c, 1, &na));
  LM_TRY(bc_count(bc, &c, 1, &nt));
  if (na + nt > (uint64_t)(c.end - c.p)) return bc_fail_at(bc, c.p, LOOM_PARSE, "more attribute/type entries than bytes");
  bc->nattrs = na;
  bc->ntypes = nt;
  bc->attrs = bc_array(bc, na, sizeof *bc->attrs);
  bc->types = bc_array(bc, nt, sizeof *bc->types);
  if (!bc->attrs || !bc->types) return bc->err->code;
  size_t off = 0, total = (size_t)(data.end - data.p);
  for (int pass = 0; pass < 2; pass++) {
    bc_entry *ents = pass ? bc->types : bc->attrs;
    uint64_t n = pass ? nt : na, i = 0;
    while (i < n) {
      uint32_t dl;
      uint64_t k;
      LM_TRY(dialect_ref(bc, &c, &dl));
      LM_TRY(bc_count(bc, &c, 1, &k));
      if (k > n - i) return bc_fail_at(bc, c.p, LOOM_PARSE, "attribute/type group larger than the table");
      for (uint64_t j = 0; j < k; j++, i++) {
        uint64_t v;
        LM_TRY(bc_varint(bc, &c, &v));
        uint64_t size = v >> 1;
        if (size > total - off) return bc_fail_at(bc, c.p, LOOM_PARSE, "attribute/type entry runs past its section");
        ents[i].data = data.p + off;
        ents[i].size = (size_t)size;
        ents[i].custom = (uint8_t)(v & 1);
        ents[i].dialect = dl;
        off += (size_t)size;
      }
    }
  }
  if (c.p != c.end) return bc_fail_at(bc, c.p, LOOM_PARSE, "trailing bytes in the attribute/type offset section");
  return 0;
}

static int read_props(lm_bc *bc, bc_cur c) {
  if (c.p == c.end) return 0;
  uint64_t n;
  LM_TRY(bc_count(bc, &c, 1, &n));
  bc->props = c.p;
  bc->nprops_bytes = (size_t)(c.end - c.p);
  bc->nprops = n;
  bc->prop_off = bc_array(bc, n, sizeof *bc->prop_off);
  if (!bc->prop_off) return bc->err->code;
  for (uint64_t i = 0; i < n; i++) {
    bc->prop_off[i] = (uint64_t)(c.p - bc->props);
    uint64_t size;
    const uint8_t *p;
    LM_TRY(bc_varint(bc, &c, &size));
    if (size > (uint64_t)(c.end - c.p)) return bc_fail_at(bc, c.p, LOOM_PARSE, "properties entry runs past its section");
    LM_TRY(bc_bytes(bc, &c, (size_t)size, &p));
  }
  if (c.p != c.end) return bc_fail_at(bc, c.p, LOOM_PARSE, "trailing bytes in the properties section");
  return 0;
}

/* ---- values ---- */

static int new_value(lm_bc *bc, const lm_type *t, uint32_t *id) {
  if (!bc->in_func) return bc_fail(bc, LOOM_UNSUPPORTED, "values outside a function are not supported");
  LM_TRY(grow(bc, (void **)&bc->vtypes, &bc->capvtypes, bc->nvtypes + 1, sizeof(lm_type)));
  bc->vtypes[bc->nvtypes] = *t;
  *id = bc->nvtypes++;
  return 0;
}

typedef struct bc_rstate {
  uint32_t base, n, next; /* the region's range in vals, and its next value to define */
} bc_rstate;

static int define(lm_bc *bc, bc_rstate *rs, uint32_t id) {
  if (rs->next >= rs->base + rs->n)
    return bc_fail(bc, LOOM_PARSE, "op %u defines more values than its region declares (%u)", bc->nops_read, rs->n);
  bc->vals[rs->next++] = id;
  return 0;
}

static int operand(lm_bc *bc, bc_cur *c, uint32_t *out) {
  const uint8_t *at = c->p;
  uint64_t v;
  LM_TRY(bc_varint(bc, c, &v));
  if (v >= (uint64_t)(bc->nvals - bc->scope_base))
    return bc_fail_at(bc, at, LOOM_PARSE, "operand refers to value %llu, but only %u are in scope", (unsigned long long)v,
                      bc->nvals - bc->scope_base);
  uint32_t id = bc->vals[bc->scope_base + v];
  if (id == BC_UNDEF) return bc_fail_at(bc, at, LOOM_UNSUPPORTED, "operand refers to value %llu before its definition "
                                        "(forward references are not supported)", (unsigned long long)v);
  *out = id;
  return 0;
}

/* ---- IR ---- */

typedef struct bc_opread {
  const bc_opname *name;
  lm_loc loc;
  const lm_attr *attrs;        /* DICT or NULL */
  const lm_attr *props;        /* DICT from an unregistered op's properties, or NULL */
  const uint8_t *pblob;        /* a registered op's properties encoding */
  size_t npblob;
  uint32_t nres, nin, nregions;
  const lm_type **res;         /* res_small or malloc'd */
  uint32_t *in;                /* in_small or malloc'd */
  bool isolated;
  const lm_type *res_small[4]; /* most ops have few results and operands: no allocation for them */
  uint32_t in_small[8];
} bc_opread;

static void opread_free(bc_opread *o) {
  if (o->res != o->res_small) free(o->res);
  if (o->in != o->in_small) free(o->in);
}

static int read_region(lm_bc *bc, bc_cur *c, lm_region *r, bc_parent parent, const lm_type *want_args, uint32_t nwant);

static int skip_uselists(lm_bc *bc, bc_cur *c, uint64_t nvalues) {
  uint64_t nread = 1;
  if (nvalues > 1) LM_TRY(bc_count(bc, c, 1, &nread));
  for (uint64_t i = 0; i < nread; i++) {
    uint64_t idx, v, k;
    if (nvalues > 1) LM_TRY(bc_varint(bc, c, &idx));
    LM_TRY(bc_varint(bc, c, &v));
    k = v >> 1;
    if (k > (uint64_t)(c->end - c->p)) return bc_fail_at(bc, c->p, LOOM_PARSE, "use-list order larger than the input");
    for (uint64_t j = 0; j < k; j++) LM_TRY(bc_varint(bc, c, &idx));
  }
  return 0;
}

/* Reads the properties of a registered op (ODS order: its inherent attributes sorted by name,
 * optional ones with a presence flag) into named attributes. */
typedef struct prop_schema {
  const char *op;
  const char *names[6];
  uint8_t optional; /* bit i: names[i] is optional */
} prop_schema;

static const prop_schema k_props[] = {
    {"builtin.module", {"sym_name", "sym_visibility"}, 0x3},
    {"builtin.unrealized_conversion_cast", {0}, 0},
    {"sdy.mesh", {"mesh", "sym_name"}, 0},
    {"sdy.manual_computation", {"in_shardings", "manual_axes", "out_shardings"}, 0},
    {"sdy.sharding_constraint", {"sharding"}, 0},
    {"sdy.reshard", {"sharding"}, 0},
    {"sdy.return", {0}, 0},
    {"sdy.propagation_barrier", {"allowed_direction"}, 0},
};

/* Properties that are all required attributes, in the given order. */
static int read_required_props(lm_bc *bc, const bc_opread *o, const char *const *names, uint32_t n,
                               lm_named_attr **out, uint32_t *nout) {
  bc_cur c = {o->pblob, o->pblob + o->npblob};
  lm_named_attr *na = bc_array(bc, n, sizeof *na);
  if (!na) return bc->err->code;
  for (uint32_t i = 0; i < n; i++) {
    const lm_attr *a;
    if (c.p == c.end) return bc_fail(bc, LOOM_UNSUPPORTED, "op %s has fewer properties than this reader expects (%u)",
                                     o->name->full, n);
    LM_TRY(bc_attr_ref(bc, &c, &a));
    na[i].name = names[i];
    na[i].value = *a;
  }
  if (c.p != c.end) return bc_fail(bc, LOOM_UNSUPPORTED, "op %s has more properties than this reader expects (%u)",
                                   o->name->full, n);
  *out = na;
  *nout = n;
  return 0;
}

static int read_props_blob(lm_bc *bc, const bc_opread *o, lm_named_attr **out, uint32_t *nout) {
  const prop_schema *s = NULL;
  if (bc->dialects[o->name->dialect].kind == BC_D_VHLO) {
    bc_opname *nm = (bc_opname *)o->name;
    if (!nm->props_known) {
      const char *names[24];
      int n = 0;
      LM_TRY(vhlo_prop_names(bc, nm->name, names, 24, &n));
      nm->props = bc_array(bc, (size_t)n, sizeof *nm->props);
      if (!nm->props) return bc->err->code;
      memcpy(nm->props, names, (size_t)n * sizeof *names);
      nm->nprops = n;
      nm->props_known = 1;
    }
    if (nm->nprops == 0) return bc_fail(bc, LOOM_UNSUPPORTED, "op %s carries properties this reader does not know (it "
                                        "reads StableHLO %s to %s)", nm->full, LM_VHLO_MIN_VERSION, LM_VHLO_MAX_VERSION);
    return read_required_props(bc, o, nm->props, (uint32_t)nm->nprops, out, nout);
  }
  for (size_t i = 0; i < sizeof k_props / sizeof k_props[0]; i++)
    if (!strcmp(k_props[i].op, o->name->full)) s = &k_props[i];
  if (!s) return bc_fail(bc, LOOM_UNSUPPORTED, "op %s carries properties this reader does not know how to read",
                         o->name->full);
  bc_cur c = {o->pblob, o->pblob + o->npblob};
  uint32_t n = 0;
  while (n < 6 && s->names[n]) n++;
  lm_named_attr *na = bc_array(bc, n, sizeof *na);
  if (!na) return bc->err->code;
  uint32_t k = 0;
  for (uint32_t i = 0; i < n; i++) {
    const lm_attr *a = NULL;
    if (s->optional & (1u << i)) {
      uint64_t v;
      LM_TRY(bc_varint(bc, &c, &v));
      if (!(v & 1)) continue;
      LM_TRY(bc_attr(bc, v >> 1, &a));
    } else {
      LM_TRY(bc_attr_ref(bc, &c, &a));
    }
    na[k].name = s->names[i];
    na[k].value = *a;
    k++;
  }
  if (c.p != c.end) return bc_fail(bc, LOOM_UNSUPPORTED, "op %s: properties hold more than this reader knows (%s...)",
                                   o->name->full, s->names[0] ? s->names[0] : "none");
  *out = na;
  *nout = k;
  return 0;
}

/* The op's attributes: its dictionary plus its properties, as named attributes. */
static int op_attrs(lm_bc *bc, const bc_opread *o, lm_named_attr **out, uint32_t *n) {
  lm_named_attr *pa = NULL;
  uint32_t np = 0;
  if (o->pblob) LM_TRY(read_props_blob(bc, o, &pa, &np));
  else if (o->props) {
    pa = o->props->fields;
    np = o->props->n;
  }
  uint32_t nd = o->attrs ? o->attrs->n : 0;
  if (nd == 0) { /* the properties list as it is (or none) */
    *out = pa;
    *n = np;
    return 0;
  }
  if (np == 0) {
    *out = o->attrs->fields;
    *n = nd;
    return 0;
  }
  lm_named_attr *all = bc_array(bc, nd + np, sizeof *all);
  if (!all) return bc->err->code;
  if (np) memcpy(all, pa, np * sizeof *all);
  if (nd) memcpy(all + np, o->attrs->fields, nd * sizeof *all);
  *out = all;
  *n = nd + np;
  return 0;
}

/* Reads the regions of an op (inline, or in their own section when the op is isolated from above
 * in bytecode >= 2, which also starts a new value scope). */
static int op_regions(lm_bc *bc, bc_cur *c, const bc_opread *o, lm_op *op, bc_parent parent, const lm_type *args,
                      uint32_t nargs) {
  if (!o->nregions) return 0;
  op->regions = bc_array(bc, o->nregions, sizeof *op->regions);
  if (!op->regions) return bc->err->code;
  op->nregions = o->nregions;
  bc_cur sub, *rc = c;
  uint32_t saved_base = bc->scope_base, saved_n = bc->nvals;
  if (o->isolated) {
    if (bc->version >= 2) {
      uint8_t id;
      LM_TRY(read_section(bc, c, &id, &sub));
      if (id != SEC_IR) return bc_fail(bc, LOOM_PARSE, "%s: expected an IR section for its regions, found a %s section",
                                       o->name->full, k_section_names[id]);
      rc = &sub;
    }
    bc->scope_base = bc->nvals;
  }
  for (uint32_t i = 0; i < o->nregions; i++) LM_TRY(read_region(bc, rc, &op->regions[i], parent, args, nargs));
  if (o->isolated) {
    if (rc == &sub && sub.p != sub.end) return bc_fail_at(bc, sub.p, LOOM_PARSE, "trailing bytes after %s's regions", o->name->full);
    bc->scope_base = saved_base;
    bc->nvals = saved_n;
  }
  return 0;
}

static int results_to_values(lm_bc *bc, bc_rstate *rs, const bc_opread *o, uint32_t slot0, lm_op *op) {
  op->nout = o->nres;
  op->out = bc_array(bc, o->nres, sizeof *op->out);
  if (!op->out) return bc->err->code;
  for (uint32_t i = 0; i < o->nres; i++) {
    LM_TRY(new_value(bc, o->res[i], &op->out[i]));
    bc->vals[slot0 + i] = op->out[i];
  }
  (void)rs;
  return 0;
}

static int func_op(lm_bc *bc, bc_cur *c, const bc_opread *o);
static int module_op(lm_bc *bc, bc_cur *c, const bc_opread *o);

/* One op of a block: read, then translated into ops[] (or into the module, for functions). */
static int read_op(lm_bc *bc, bc_cur *c, bc_rstate *rs, bc_parent parent, lm_op **ops, uint32_t *nops, uint32_t *capops) {
  const uint8_t *at = c->p;
  bc_opread o;
  memset(&o, 0, sizeof o);
  uint64_t v;
  LM_TRY(bc_varint(bc, c, &v));
  if (v >= bc->nopnames) return bc_fail_at(bc, at, LOOM_PARSE, "op name index %llu out of range (%llu names)",
                                           (unsigned long long)v, (unsigned long long)bc->nopnames);
  o.name = &bc->opnames[v];
  bc->nops_read++;
  uint8_t mask;
  LM_TRY(bc_byte(bc, c, &mask));
  if (mask & 0x80) return bc_fail_at(bc, at, LOOM_PARSE, "%s: unknown op encoding bits 0x%02X", o.name->full, mask);
  LM_TRY(bc_varint(bc, c, &v));
  bc_loc(bc, v, &o.loc);
  if (mask & OP_ATTRS) {
    LM_TRY(bc_attr_ref(bc, c, &o.attrs));
    if (o.attrs->kind != LM_ATTR_DICT) return bc_fail_at(bc, at, LOOM_PARSE, "%s: its attributes are not a dictionary", o.name->full);
  }
  if (mask & OP_PROPS) {
    if (bc->version < 5 || o.name->registered < 0)
      return bc_fail_at(bc, at, LOOM_PARSE, "%s: properties in bytecode version %llu", o.name->full,
                        (unsigned long long)bc->version);
    if (o.name->registered) {
      uint64_t pi;
      LM_TRY(bc_varint(bc, c, &pi));
      if (pi >= bc->nprops) return bc_fail_at(bc, at, LOOM_PARSE, "%s: properties index %llu out of range", o.name->full,
                                              (unsigned long long)pi);
      bc_cur pc = {bc->props + bc->prop_off[pi], bc->props + bc->nprops_bytes};
      uint64_t size;
      LM_TRY(bc_varint(bc, &pc, &size));
      LM_TRY(bc_bytes(bc, &pc, (size_t)size, &o.pblob));
      o.npblob = (size_t)size;
    } else {
      LM_TRY(bc_attr_ref(bc, c, &o.props));
      if (o.props->kind != LM_ATTR_DICT) return bc_fail_at(bc, at, LOOM_PARSE, "%s: its properties are not a dictionary", o.name->full);
    }
  }
  if (mask & OP_RESULTS) {
    uint64_t n;
    LM_TRY(bc_count(bc, c, 1, &n));
    o.nres = (uint32_t)n;
    o.res = n <= 4 ? o.res_small : malloc(n * sizeof *o.res);
    if (!o.res) return bc_fail(bc, LOOM_NO_MEMORY, "out of host memory");
    for (uint64_t i = 0; i < n; i++) {
      uint64_t ti;
      int rc = bc_varint(bc, c, &ti);
      if (rc == 0) rc = bc_value_type(bc, ti, &o.res[i]);
      if (rc < 0) {
        opread_free(&o);
        return rc;
      }
    }
  }
  int rc = 0;
  if (mask & OP_OPERANDS) {
    uint64_t n;
    rc = bc_count(bc, c, 1, &n);
    if (rc == 0) {
      o.nin = (uint32_t)n;
      o.in = n <= 8 ? o.in_small : malloc(n * sizeof *o.in);
      if (!o.in) rc = bc_fail(bc, LOOM_NO_MEMORY, "out of host memory");
      for (uint64_t i = 0; i < n && rc == 0; i++) rc = operand(bc, c, &o.in[i]);
    }
  }
  if (rc == 0 && (mask & OP_SUCCESSORS))
    rc = bc_fail_at(bc, at, LOOM_UNSUPPORTED, "%s: ops with successor blocks are not supported", o.name->full);
  if (rc == 0 && (mask & OP_USELISTS) && bc->version >= 3) rc = skip_uselists(bc, c, o.nres);
  if (rc == 0 && (mask & OP_REGIONS)) {
    uint64_t r;
    rc = bc_varint(bc, c, &r);
    if (rc == 0 && (r >> 1) > 1024) rc = bc_fail_at(bc, at, LOOM_PARSE, "%s: %llu regions", o.name->full, (unsigned long long)(r >> 1));
    o.nregions = (uint32_t)(r >> 1);
    o.isolated = r & 1;
  }
  if (rc < 0) goto done;

  const bc_dialect *d = &bc->dialects[o.name->dialect];
  if (parent == PARENT_MODULE && !bc->in_func) {
    /* module level: functions and sdy.mesh */
    if (d->kind == BC_D_VHLO && !strncmp(o.name->name, "func_", 5)) rc = func_op(bc, c, &o);
    else rc = module_op(bc, c, &o);
    goto done;
  }
  if (d->kind == BC_D_BUILTIN && !strcmp(o.name->name, "unrealized_conversion_cast")) {
    if (o.nin != 1 || o.nres != 1 || o.nregions) {
      rc = bc_fail_at(bc, at, LOOM_UNSUPPORTED, "builtin.unrealized_conversion_cast with %u operands and %u results "
                      "(only 1:1 casts between VHLO and builtin types are read)", o.nin, o.nres);
      goto done;
    }
    const lm_type *have = &bc->vtypes[o.in[0]];
    if (!lm_type_equal(have, o.res[0])) {
      char a[128], b[128];
      rc = bc_fail_at(bc, at, LOOM_UNSUPPORTED, "builtin.unrealized_conversion_cast from %s to %s changes the type",
                      lm_type_str(have, a, sizeof a), lm_type_str(o.res[0], b, sizeof b));
      goto done;
    }
    rc = define(bc, rs, o.in[0]);
    goto done;
  }
  if (*nops == *capops) {
    uint32_t nc = *capops ? *capops * 2 : 16;
    lm_op *nv = bc_array(bc, nc, sizeof *nv);
    if (!nv) { rc = bc->err->code; goto done; }
    if (*nops) memcpy(nv, *ops, *nops * sizeof *nv);
    *ops = nv;
    *capops = nc;
  }
  lm_op *op = &(*ops)[(*nops)++];
  memset(op, 0, sizeof *op);
  op->loc = o.loc;
  if (!op->loc.file) op->loc.file = bc->file;
  lm_named_attr *attrs = NULL;
  uint32_t nattrs = 0;
  rc = op_attrs(bc, &o, &attrs, &nattrs);
  if (rc < 0) goto done;
  if (d->kind == BC_D_VHLO) {
    bc_opname *nm = (bc_opname *)o.name;
    if (!nm->mapped && (rc = vhlo_op_name(bc, nm->name, op)) == 0) {
      nm->code = op->code;
      nm->op_name = op->name;
      nm->mapped = 1;
    }
    op->code = nm->code;
    op->name = nm->op_name;
    if (rc == 0 && op->code == LM_OP_RETURN && parent == PARENT_FUNC) {
      op->code = LM_OP_FUNC_RETURN;
      op->name = "func.return";
    }
    if (rc == 0) rc = vhlo_op_attrs(bc, op, attrs, nattrs);
  } else if (d->kind == BC_D_SDY) {
    op->name = o.name->full;
    op->code = (uint16_t)lm_opcode_from_name(op->name, strlen(op->name));
    op->attrs = bc_array(bc, nattrs, sizeof *op->attrs); /* its own list: attrs may be a shared dictionary's */
    if (!op->attrs) { rc = bc->err->code; goto done; }
    if (nattrs) memcpy(op->attrs, attrs, nattrs * sizeof *attrs);
    op->nattrs = nattrs;
  } else {
    rc = bc_fail_at(bc, at, LOOM_UNSUPPORTED, "op %s (dialect %s) is not supported in bytecode programs "
                    "(Loom reads VHLO, sdy and builtin)", o.name->full, d->name);
  }
  if (rc < 0) goto done;
  op->nin = o.nin;
  op->in = bc_array(bc, o.nin, sizeof *op->in);
  if (!op->in) { rc = bc->err->code; goto done; }
  if (o.nin) memcpy(op->in, o.in, o.nin * sizeof *op->in);
  /* the results' numbers come first in the region; their Loom values after the op's regions, as
   * the text parser orders them */
  uint32_t slot0 = rs->next;
  if (rs->next + o.nres > rs->base + rs->n) {
    rc = bc_fail_at(bc, at, LOOM_PARSE, "%s defines more values than its region declares", o.name->full);
    goto done;
  }
  rs->next += o.nres;
  uint32_t idx = (uint32_t)(op - *ops);
  lm_op local = *op; /* *ops may move while the regions are read (nested ops append elsewhere) */
  rc = op_regions(bc, c, &o, &local, PARENT_OP, NULL, 0);
  if (rc == 0) rc = results_to_values(bc, rs, &o, slot0, &local);
  (*ops)[idx] = local;
done:
  opread_free(&o);
  return rc;
}

/* A region of one block. want_args (for function bodies) are the argument types it must have. */
static int read_region(lm_bc *bc, bc_cur *c, lm_region *r, bc_parent parent, const lm_type *want_args, uint32_t nwant) {
  LM_TRY(bc_enter(bc));
  int rc = 0;
  uint64_t nblocks, nvalues, hdr;
  memset(r, 0, sizeof *r);
  const uint8_t *at = c->p;
  if ((rc = bc_varint(bc, c, &nblocks)) < 0) goto out;
  if (nblocks == 0) goto out;
  if (nblocks > 1) {
    rc = bc_fail_at(bc, at, LOOM_UNSUPPORTED, "regions with more than one block are not supported");
    goto out;
  }
  if ((rc = bc_count(bc, c, 1, &nvalues)) < 0) goto out;
  bc_rstate rs = {bc->nvals, (uint32_t)nvalues, bc->nvals};
  if ((rc = grow(bc, (void **)&bc->vals, &bc->capvals, bc->nvals + (uint32_t)nvalues, sizeof(uint32_t))) < 0) goto out;
  for (uint64_t i = 0; i < nvalues; i++) bc->vals[bc->nvals + i] = BC_UNDEF;
  bc->nvals += (uint32_t)nvalues;
  lm_block *blk = bc_alloc(bc, sizeof *blk);
  if (!blk) { rc = bc->err->code; goto out; }
  r->nblocks = 1;
  r->blocks = blk;
  if ((rc = bc_varint(bc, c, &hdr)) < 0) goto out;
  uint64_t nops = hdr >> 1;
  if (nops > (uint64_t)(c->end - c->p) / 3) {
    rc = bc_fail_at(bc, at, LOOM_PARSE, "block of %llu ops is larger than the input", (unsigned long long)nops);
    goto out;
  }
  if (hdr & 1) {
    uint64_t nargs;
    if ((rc = bc_count(bc, c, 1, &nargs)) < 0) goto out;
    blk->nargs = (uint32_t)nargs;
    blk->args = bc_array(bc, nargs, sizeof *blk->args);
    if (!blk->args) { rc = bc->err->code; goto out; }
    for (uint64_t i = 0; i < nargs && rc == 0; i++) {
      uint64_t tv;
      const lm_type *t;
      rc = bc_varint(bc, c, &tv);
      bool hasloc = true;
      if (rc == 0 && bc->version >= 4) {
        hasloc = tv & 1;
        tv >>= 1;
      }
      if (rc == 0) rc = bc_value_type(bc, tv, &t);
      if (rc == 0 && hasloc) {
        uint64_t li;
        rc = bc_varint(bc, c, &li);
      }
      if (rc == 0) rc = new_value(bc, t, &blk->args[i]);
      if (rc == 0) rc = define(bc, &rs, blk->args[i]);
    }
    if (rc < 0) goto out;
    if (bc->version >= 3) {
      uint8_t has;
      if ((rc = bc_byte(bc, c, &has)) < 0) goto out;
      if (has && (rc = skip_uselists(bc, c, nargs)) < 0) goto out;
    }
  }
  if (want_args) {
    if (blk->nargs != nwant) {
      rc = bc_fail_at(bc, at, LOOM_VERIFY, "function body has %u arguments, its type says %u", blk->nargs, nwant);
      goto out;
    }
    for (uint32_t i = 0; i < nwant; i++)
      if (!lm_type_equal(&bc->vtypes[blk->args[i]], &want_args[i])) {
        rc = bc_fail_at(bc, at, LOOM_VERIFY, "function argument %u's type differs from the function type", i);
        goto out;
      }
  }
  uint32_t cap = (uint32_t)nops; /* known up front (and bounded by the input above): no regrowth */
  if (nops && !(blk->ops = bc_array(bc, nops, sizeof *blk->ops))) {
    rc = bc->err->code;
    goto out;
  }
  for (uint64_t i = 0; i < nops && rc == 0; i++) rc = read_op(bc, c, &rs, parent, &blk->ops, &blk->nops, &cap);
  bc->nvals = rs.base;
out:
  bc_leave(bc);
  return rc;
}

/* builtin.module's region, or module-level ops other than functions (sdy.mesh). */
static int module_op(lm_bc *bc, bc_cur *c, const bc_opread *o) {
  const bc_dialect *d = &bc->dialects[o->name->dialect];
  lm_module *m = bc->m;
  lm_named_attr *attrs;
  uint32_t nattrs;
  LM_TRY(op_attrs(bc, o, &attrs, &nattrs));
  if (d->kind == BC_D_SDY && !strcmp(o->name->name, "mesh")) {
    if (o->nin || o->nres || o->nregions) return bc_fail(bc, LOOM_PARSE, "%s takes no operands and has no results", o->name->full);
    lm_op *nv = bc_array(bc, m->nops + 1, sizeof *nv);
    if (!nv) return bc->err->code;
    if (m->nops) memcpy(nv, m->ops, m->nops * sizeof *nv);
    m->ops = nv;
    lm_op *op = &m->ops[m->nops++];
    memset(op, 0, sizeof *op);
    op->name = o->name->full;
    op->code = (uint16_t)lm_opcode_from_name(op->name, strlen(op->name));
    op->loc = o->loc;
    lm_named_attr *conv = bc_array(bc, nattrs, sizeof *conv);
    if (!conv) return bc->err->code;
    for (uint32_t i = 0; i < nattrs; i++) {
      conv[i].name = attrs[i].name;
      LM_TRY(vhlo_generic_attr(bc, &attrs[i].value, &conv[i].value));
      /* sdy.mesh's sym_name: a string in the file, a symbol in the IR's normal form */
      if (op->code == LM_OP_SDY_MESH && !strcmp(conv[i].name, "sym_name") && conv[i].value.kind == LM_ATTR_STRING)
        conv[i].value.kind = LM_ATTR_SYMBOL;
    }
    op->attrs = conv;
    op->nattrs = nattrs;
    return 0;
  }
  if (d->kind == BC_D_BUILTIN && !strcmp(o->name->name, "module")) {
    if (m->name || m->nattrs || m->nfuncs) return bc_fail(bc, LOOM_UNSUPPORTED, "only one module per file is supported");
    if (o->nregions != 1 || o->nin || o->nres) return bc_fail(bc, LOOM_PARSE, "builtin.module has one region, no operands or results");
    lm_named_attr *ma = bc_array(bc, nattrs, sizeof *ma);
    if (!ma) return bc->err->code;
    uint32_t k = 0;
    for (uint32_t i = 0; i < nattrs; i++) {
      if (!strcmp(attrs[i].name, "sym_name") && attrs[i].value.kind == LM_ATTR_STRING) {
        m->name = attrs[i].value.s;
        continue;
      }
      if (!strcmp(attrs[i].name, "sym_visibility")) continue;
      ma[k].name = attrs[i].name;
      LM_TRY(vhlo_generic_attr(bc, &attrs[i].value, &ma[k].value));
      k++;
    }
    m->attrs = ma;
    m->nattrs = k;
    lm_op dummy;
    memset(&dummy, 0, sizeof dummy);
    return op_regions(bc, c, o, &dummy, PARENT_MODULE, NULL, 0);
  }
  return bc_fail(bc, LOOM_UNSUPPORTED, "op %s at module level is not supported (Loom reads functions and sdy.mesh)",
                 o->name->full);
}

/* vhlo.func_v1: a function of the module. */
static int func_op(lm_bc *bc, bc_cur *c, const bc_opread *o) {
  lm_module *m = bc->m;
  if (!vhlo_op_name(bc, o->name->name, &(lm_op){0}) && strcmp(o->name->name, "func_v1"))
    return bc_fail(bc, LOOM_UNSUPPORTED, "%s is not supported", o->name->full);
  if (o->nregions != 1 || o->nin || o->nres) return bc_fail(bc, LOOM_PARSE, "vhlo.func_v1 has one region, no operands or results");
  lm_named_attr *attrs;
  uint32_t nattrs;
  LM_TRY(op_attrs(bc, o, &attrs, &nattrs));
  lm_func *nf = bc_array(bc, m->nfuncs + 1, sizeof *nf);
  if (!nf) return bc->err->code;
  if (m->nfuncs) memcpy(nf, m->funcs, m->nfuncs * sizeof *nf);
  m->funcs = nf;
  lm_func *fn = &m->funcs[m->nfuncs];
  memset(fn, 0, sizeof *fn);
  fn->loc = o->loc;
  fn->is_public = true;
  const lm_attr *ft = NULL, *args = NULL, *res = NULL;
  lm_named_attr *other = bc_array(bc, nattrs, sizeof *other);
  if (!other) return bc->err->code;
  for (uint32_t i = 0; i < nattrs; i++) {
    const lm_named_attr *a = &attrs[i];
    if (!strcmp(a->name, "sym_name") && a->value.kind == LM_ATTR_STRING) fn->name = a->value.s;
    else if (!strcmp(a->name, "sym_visibility") && a->value.kind == LM_ATTR_STRING)
      fn->is_public = strcmp(a->value.s, "private") != 0;
    else if (!strcmp(a->name, "function_type")) ft = &a->value;
    else if (!strcmp(a->name, "arg_attrs") && a->value.kind == LM_ATTR_ARRAY) args = &a->value;
    else if (!strcmp(a->name, "res_attrs") && a->value.kind == LM_ATTR_ARRAY) res = &a->value;
    else {
      other[fn->nattrs].name = a->name;
      LM_TRY(vhlo_generic_attr(bc, &a->value, &other[fn->nattrs].value));
      fn->nattrs++;
    }
  }
  fn->attrs = other;
  if (!fn->name) return bc_fail(bc, LOOM_PARSE, "vhlo.func_v1 without a sym_name");
  if (!ft || ft->kind != LM_ATTR_ARRAY || !ft->s || strcmp(ft->s, "->"))
    return bc_fail(bc, LOOM_PARSE, "function @%s has no function type", fn->name);
  fn->nargs = ft->items[0].n;
  fn->nresults = ft->items[1].n;
  fn->arg_types = bc_array(bc, fn->nargs, sizeof(lm_type));
  fn->result_types = bc_array(bc, fn->nresults, sizeof(lm_type));
  fn->arg_attrs = bc_array(bc, fn->nargs, sizeof(lm_attr));
  fn->result_attrs = bc_array(bc, fn->nresults, sizeof(lm_attr));
  if (!fn->arg_types || !fn->result_types || !fn->arg_attrs || !fn->result_attrs) return bc->err->code;
  for (int side = 0; side < 2; side++) {
    const lm_attr *list = side ? res : args;
    uint32_t n = side ? fn->nresults : fn->nargs;
    lm_type *types = side ? fn->result_types : fn->arg_types;
    lm_attr *dicts = side ? fn->result_attrs : fn->arg_attrs;
    for (uint32_t i = 0; i < n; i++) {
      types[i] = *ft->items[side].items[i].type;
      dicts[i].kind = LM_ATTR_DICT;
    }
    if (!list || list->n == 0) continue; /* an empty list stands for no attributes */
    if (list->n != n)
      return bc_fail(bc, LOOM_PARSE, "@%s: %s has %u entries for %u %s", fn->name, side ? "res_attrs" : "arg_attrs",
                     list->n, n, side ? "results" : "arguments");
    for (uint32_t i = 0; i < n; i++) {
      if (list->items[i].kind != LM_ATTR_DICT) return bc_fail(bc, LOOM_PARSE, "@%s: argument attributes must be dictionaries", fn->name);
      LM_TRY(vhlo_generic_attr(bc, &list->items[i], &dicts[i]));
    }
  }
  /* the body: a new function, its own values */
  bc->in_func = true;
  bc->nvtypes = 0;
  lm_op dummy;
  memset(&dummy, 0, sizeof dummy);
  int rc = op_regions(bc, c, o, &dummy, PARENT_FUNC, fn->arg_types, fn->nargs);
  bc->in_func = false;
  LM_TRY(rc);
  if (!dummy.nregions || !dummy.regions[0].nblocks)
    return bc_fail(bc, LOOM_UNSUPPORTED, "function @%s has no body (external functions are not supported)", fn->name);
  fn->body = dummy.regions[0];
  fn->nvalues = bc->nvtypes;
  fn->value_types = bc_array(bc, fn->nvalues, sizeof(lm_type));
  if (!fn->value_types) return bc->err->code;
  if (fn->nvalues) memcpy(fn->value_types, bc->vtypes, fn->nvalues * sizeof(lm_type));
  m->nfuncs++;
  return 0;
}

/* "StableHLO_v1.13.7" -> {1, 13, 7}. */
static void producer_version(lm_bc *bc) {
  bc->shlo_version[0] = bc->shlo_version[1] = bc->shlo_version[2] = -1;
  const char *p = strstr(bc->producer, "StableHLO_v");
  int a, b, c;
  if (p && sscanf(p + 11, "%d.%d.%d", &a, &b, &c) == 3) {
    bc->shlo_version[0] = a;
    bc->shlo_version[1] = b;
    bc->shlo_version[2] = c;
  }
}

bool lm_is_bytecode(const void *data, size_t len) {
  return len >= 4 && !memcmp(data, "ML\xefR", 4);
}

static int read_all(lm_bc *bc) {
  bc_cur c = {bc->data, bc->end};
  if (!lm_is_bytecode(bc->data, (size_t)(bc->end - bc->data)))
    return bc_fail_at(bc, bc->data, LOOM_PARSE, "not MLIR bytecode (no ML\\xEFR magic number)");
  c.p += 4;
  LM_TRY(bc_varint(bc, &c, &bc->version));
  if (bc->version > LM_BC_MAX_VERSION)
    return bc_fail(bc, LOOM_UNSUPPORTED, "MLIR bytecode version %llu is newer than this reader supports (0 to %d)",
                   (unsigned long long)bc->version, LM_BC_MAX_VERSION);
  const uint8_t *nul = memchr(c.p, 0, (size_t)(c.end - c.p));
  if (!nul) return bc_fail_at(bc, c.p, LOOM_PARSE, "the producer string is not NUL-terminated");
  size_t plen = (size_t)(nul - c.p);
  memcpy(bc->producer, c.p, plen < sizeof bc->producer - 1 ? plen : sizeof bc->producer - 1);
  c.p = nul + 1;
  producer_version(bc);
  if (bc->shlo_version[0] >= 0)
    LM_TRY(vhlo_check_version(bc, bc->shlo_version[0], bc->shlo_version[1], bc->shlo_version[2], "the file's producer"));
  bc_cur secs[SEC_COUNT];
  bool have[SEC_COUNT] = {0};
  while (c.p < c.end) {
    const uint8_t *at = c.p;
    uint8_t id;
    bc_cur s;
    LM_TRY(read_section(bc, &c, &id, &s));
    if (have[id]) return bc_fail_at(bc, at, LOOM_PARSE, "duplicate %s section", k_section_names[id]);
    have[id] = true;
    secs[id] = s;
  }
  for (int i = SEC_STRING; i <= SEC_IR; i++)
    if (!have[i]) return bc_fail(bc, LOOM_PARSE, "missing %s section", k_section_names[i]);
  if (bc->version >= 5 && !have[SEC_PROPERTIES]) return bc_fail(bc, LOOM_PARSE, "missing properties section");
  if (have[SEC_RESOURCE] != have[SEC_RESOURCE_OFFSET])
    return bc_fail(bc, LOOM_PARSE, "a resource section without its offset section (or the reverse)");
  LM_TRY(read_strings(bc, secs[SEC_STRING]));
  if (have[SEC_PROPERTIES]) LM_TRY(read_props(bc, secs[SEC_PROPERTIES]));
  LM_TRY(read_dialects(bc, secs[SEC_DIALECT]));
  LM_TRY(read_attrtype_offsets(bc, secs[SEC_ATTRTYPE], secs[SEC_ATTRTYPE_OFFSET]));
  /* the IR section: one block (no arguments) holding the module op */
  bc_cur ir = secs[SEC_IR];
  uint64_t hdr;
  LM_TRY(bc_varint(bc, &ir, &hdr));
  if (hdr & 1) return bc_fail(bc, LOOM_PARSE, "the top-level block has arguments");
  uint64_t nops = hdr >> 1;
  if (nops != 1) return bc_fail(bc, LOOM_UNSUPPORTED, "%llu top-level ops: Loom reads one module per file", (unsigned long long)nops);
  bc_rstate rs = {0, 0, 0};
  lm_op *ops = NULL;
  uint32_t n = 0, cap = 0;
  LM_TRY(read_op(bc, &ir, &rs, PARENT_MODULE, &ops, &n, &cap));
  if (ir.p != ir.end) return bc_fail_at(bc, ir.p, LOOM_PARSE, "trailing bytes after the module");
  if (!bc->m->nfuncs) return bc_fail(bc, LOOM_PARSE, "the module has no functions");
  return 0;
}

int lm_read_bytecode(const uint8_t *data, size_t len, const lm_parse_opts *opts, lm_module **out, lm_err *err) {
  lm_err local;
  if (!err) err = &local;
  lm_err_clear(err);
  *out = NULL;
  lm_module *m = calloc(1, sizeof *m);
  if (!m) return lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  lm_arena_init(&m->arena, 0);
  lm_bc B;
  memset(&B, 0, sizeof B);
  lm_bc *bc = &B;
  bc->data = data;
  bc->end = data + len;
  bc->err = err;
  bc->m = m;
  bc->max_const = opts && opts->max_const_bytes ? opts->max_const_bytes : ((size_t)1 << 30);
  bc->max_total = opts && opts->max_total_bytes ? opts->max_total_bytes : ((size_t)8 << 30);
  const char *fname = opts && opts->filename ? opts->filename : "<bytes>";
  bc->file = lm_arena_strndup(&m->arena, fname, strlen(fname));
  int rc = bc->file ? read_all(bc) : lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  free(bc->vals);
  free(bc->locs);
  free(bc->loc_state);
  free(bc->vtypes);
  if (rc == 0 && !(opts && opts->no_verify)) rc = lm_module_verify(m, err);
  if (rc < 0) {
    lm_module_free(m);
    return rc;
  }
  *out = m;
  return 0;
}

int lm_bytecode_header(const uint8_t *data, size_t len, uint64_t *version, char *producer, size_t cap) {
  if (!lm_is_bytecode(data, len)) return -1;
  lm_err err;
  lm_bc B;
  memset(&B, 0, sizeof B);
  B.data = data;
  B.end = data + len;
  B.err = &err;
  B.file = "";
  lm_err_clear(&err);
  bc_cur c = {data + 4, data + len};
  if (bc_varint(&B, &c, version) < 0) return -1;
  const uint8_t *nul = memchr(c.p, 0, (size_t)(c.end - c.p));
  if (!nul || !cap) return -1;
  size_t n = (size_t)(nul - c.p) < cap - 1 ? (size_t)(nul - c.p) : cap - 1;
  memcpy(producer, c.p, n);
  producer[n] = 0;
  return 0;
}
