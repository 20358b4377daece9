/* Attribute and type entries of MLIR bytecode (bc_int.h), read on first use and kept:
 *   - the builtin dialect's encodings (mlir/include/mlir/IR/BuiltinDialectBytecode.td: codes in
 *     the order of its attribute and type lists), for module attributes, locations, and the
 *     builtin types around sdy ops;
 *   - VHLO's (openxla/stablehlo VhloBytecode.cpp: explicit codes), for everything in functions;
 *   - the text form, for dialects without an encoding (sdy), through Loom's text parser.
 * Values come out in the IR's normal form where the form does not depend on the op (vhlo.c does
 * the rest): VHLO tensors as DENSE with splats expanded and i1 unpacked, enums as ENUM names,
 * types as lm_type (function types as the text parser's ARRAY "->"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/half.h"
#include "hlo/bc_int.h"

/* ---- builtin codes ---- */
enum { B_ARRAY, B_DICT, B_STRING, B_STRING_TYPED, B_FLAT_SYMBOL, B_SYMBOL, B_TYPE, B_UNIT, B_INTEGER, B_FLOAT,
       B_LOC_CALLSITE, B_LOC_FILE, B_LOC_FUSED, B_LOC_FUSED_META, B_LOC_NAME, B_LOC_UNKNOWN, B_DENSE_RESOURCE,
       B_DENSE_ARRAY, B_DENSE, B_DENSE_STRING, B_SPARSE, B_DISTINCT };
enum { BT_INTEGER, BT_INDEX, BT_FUNCTION, BT_BF16, BT_F16, BT_F32, BT_F64, BT_F80, BT_F128, BT_COMPLEX, BT_MEMREF,
       BT_MEMREF_SPACE, BT_NONE, BT_TENSOR, BT_TENSOR_ENC, BT_TUPLE, BT_UMEMREF, BT_UMEMREF_SPACE, BT_UTENSOR,
       BT_VECTOR, BT_VECTOR_SCALABLE };

/* ---- VHLO codes ---- */
enum { V_ARRAY = 1, V_BOOL, V_CMP_DIR, V_CMP_TYPE, V_API_VERSION, V_DICT, V_FFT_TYPE, V_FLOAT, V_INTEGER,
       V_OUTPUT_OPERAND_ALIAS, V_PRECISION, V_RNG_ALGORITHM, V_RNG_DISTRIBUTION, V_STRING, V_TENSOR, V_TRANSPOSE,
       V_TYPE, V_TYPE_EXTENSIONS, V_RESULT_ACCURACY_MODE, V_RESULT_ACCURACY };

typedef struct vhlo_type_code {
  uint8_t code;
  lm_dtype dtype;        /* INVALID for types Loom does not run as values */
  const char *name;      /* MLIR spelling */
} vhlo_type_code;

static const vhlo_type_code k_vhlo_elem[] = {
    {0, LOOM_DTYPE_PRED, "i1"},        {2, LOOM_DTYPE_BF16, "bf16"},     {3, LOOM_DTYPE_F16, "f16"},
    {4, LOOM_DTYPE_F32, "f32"},        {5, LOOM_DTYPE_F64, "f64"},       {6, 0, "f8E4M3FN"},
    {7, 0, "f8E5M2"},                  {10, 0, "i4"},                    {11, LOOM_DTYPE_S8, "i8"},
    {12, LOOM_DTYPE_S16, "i16"},       {13, LOOM_DTYPE_S32, "i32"},      {14, LOOM_DTYPE_S64, "i64"},
    {15, 0, "ui4"},                    {16, LOOM_DTYPE_U8, "ui8"},       {17, LOOM_DTYPE_U16, "ui16"},
    {18, LOOM_DTYPE_U32, "ui32"},      {19, LOOM_DTYPE_U64, "ui64"},     {27, 0, "f8E4M3FNUZ"},
    {28, 0, "f8E5M2FNUZ"},             {29, 0, "f8E4M3B11FNUZ"},         {31, 0, "i2"},
    {32, 0, "ui2"},                    {34, 0, "tf32"},                  {35, 0, "f8E4M3"},
    {36, 0, "f8E3M4"},                 {37, 0, "f4E2M1FN"},              {38, 0, "f6E2M3FN"},
    {39, 0, "f6E3M2FN"},               {40, 0, "f8E8M0FNU"},
};
enum { VT_COMPLEX = 1, VT_FUNCTION = 8, VT_INDEX = 9, VT_TENSOR = 20, VT_TENSOR_ENC = 21, VT_TOKEN = 22, VT_TUPLE = 23,
       VT_QUANT = 24, VT_UTENSOR = 25, VT_WITNESS = 26, VT_QUANT_AXIS = 30, VT_NONE = 33, VT_BUFFER = 41 };

#define LM_SUPPORTED_TYPES "i1, i8-i64, ui8-ui64, f16, bf16, f32, f64, complex<f32>, complex<f64>"

static const char *const k_cmp_dir[] = {"EQ", "NE", "GE", "GT", "LE", "LT"};
static const char *const k_cmp_type[] = {"NOTYPE", "FLOAT", "TOTALORDER", "SIGNED", "UNSIGNED"};
static const char *const k_api[] = {"API_VERSION_UNSPECIFIED", "API_VERSION_ORIGINAL", "API_VERSION_STATUS_RETURNING",
                                    "API_VERSION_STATUS_RETURNING_UNIFIED", "API_VERSION_TYPED_FFI"};
static const char *const k_fft[] = {"FFT", "IFFT", "RFFT", "IRFFT"};
static const char *const k_precision[] = {"DEFAULT", "HIGH", "HIGHEST"};
static const char *const k_rng_alg[] = {"DEFAULT", "THREE_FRY", "PHILOX"};
static const char *const k_rng_dist[] = {NULL, "UNIFORM", "NORMAL"};
static const char *const k_transpose[] = {"TRANSPOSE_INVALID", "NO_TRANSPOSE", "TRANSPOSE", "ADJOINT"};
static const char *const k_accuracy[] = {"DEFAULT", "HIGHEST", "TOLERANCE"};

const char *bc_type_str(const bc_type *t, char *buf, size_t cap) {
  switch (t->kind) {
    case BC_T_TYPE: return lm_type_str(&t->t, buf, cap);
    case BC_T_FUNC: snprintf(buf, cap, "a function type"); return buf;
    case BC_T_NONE: snprintf(buf, cap, "none"); return buf;
    case BC_T_INDEX: snprintf(buf, cap, "index"); return buf;
    default: snprintf(buf, cap, "%s", t->name ? t->name : "?"); return buf;
  }
}

/* ---- the entry reader: what a dialect decoder reads from ---- */

typedef struct ent_rd {
  lm_bc *bc;
  bc_cur c;
} ent_rd;

int bc_attr_ref(lm_bc *bc, bc_cur *c, const lm_attr **out) {
  uint64_t i;
  LM_TRY(bc_varint(bc, c, &i));
  return bc_attr(bc, i, out);
}

int bc_type_ref(lm_bc *bc, bc_cur *c, const bc_type **out) {
  uint64_t i;
  LM_TRY(bc_varint(bc, c, &i));
  return bc_type_at(bc, i, out);
}

static lm_attr *new_attr(lm_bc *bc, lm_attr_kind kind) {
  lm_attr *a = bc_alloc(bc, sizeof *a);
  if (a) a->kind = (uint8_t)kind;
  return a;
}

static int enum_attr(lm_bc *bc, bc_cur *c, const char *const *names, size_t n, const char *what, lm_attr *a) {
  uint64_t v;
  LM_TRY(bc_varint(bc, c, &v));
  if (v >= n || !names[v]) return bc_fail(bc, LOOM_UNSUPPORTED, "unknown %s value %llu", what, (unsigned long long)v);
  a->kind = LM_ATTR_ENUM;
  a->s = names[v];
  a->n = (uint32_t)strlen(names[v]);
  return 0;
}

static int attr_list(lm_bc *bc, bc_cur *c, lm_attr *a) {
  uint64_t n;
  LM_TRY(bc_count(bc, c, 1, &n));
  a->kind = LM_ATTR_ARRAY;
  a->n = (uint32_t)n;
  a->items = bc_array(bc, n, sizeof(lm_attr));
  if (!a->items) return bc->err->code;
  for (uint64_t i = 0; i < n; i++) {
    const lm_attr *it;
    LM_TRY(bc_attr_ref(bc, c, &it));
    a->items[i] = *it;
  }
  return 0;
}

static int svarint_list(lm_bc *bc, bc_cur *c, int64_t **out, uint32_t *n) {
  uint64_t k;
  LM_TRY(bc_count(bc, c, 1, &k));
  *out = bc_array(bc, k, sizeof(int64_t));
  if (!*out) return bc->err->code;
  *n = (uint32_t)k;
  for (uint64_t i = 0; i < k; i++) LM_TRY(bc_svarint(bc, c, &(*out)[i]));
  return 0;
}

static int ints_attr(lm_bc *bc, bc_cur *c, lm_attr *a) {
  a->kind = LM_ATTR_INTS;
  return svarint_list(bc, c, &a->ints, &a->n);
}

static lm_named_attr *field(lm_attr *st, uint32_t i, const char *name) {
  st->fields[i].name = name;
  return &st->fields[i];
}

/* An integer of a known bit width: one byte up to 8 bits, a signed varint up to 64. */
static int apint(lm_bc *bc, bc_cur *c, unsigned width, bool is_unsigned, int64_t *out) {
  uint64_t v;
  if (width == 0 || width > 64) return bc_fail(bc, LOOM_UNSUPPORTED, "%u-bit integer attributes are not supported", width);
  if (width <= 8) {
    uint8_t b;
    LM_TRY(bc_byte(bc, c, &b));
    v = b;
  } else {
    int64_t s;
    LM_TRY(bc_svarint(bc, c, &s));
    v = (uint64_t)s;
  }
  if (width < 64) {
    uint64_t mask = (1ull << width) - 1;
    v &= mask;
    if (!is_unsigned && width > 1 && (v >> (width - 1))) v |= ~mask; /* sign-extend */
  }
  *out = (int64_t)v;
  return 0;
}

static int float_bits(lm_bc *bc, bc_cur *c, lm_dtype d, double *out) {
  int64_t bits;
  switch (d) {
    case LOOM_DTYPE_F16: LM_TRY(apint(bc, c, 16, true, &bits)); *out = lm_f16_to_f64((uint16_t)bits); return 0;
    case LOOM_DTYPE_BF16: LM_TRY(apint(bc, c, 16, true, &bits)); *out = lm_bf16_to_f64((uint16_t)bits); return 0;
    case LOOM_DTYPE_F32: {
      LM_TRY(apint(bc, c, 32, true, &bits));
      *out = (double)lm_bits_f32((uint32_t)bits);
      return 0;
    }
    case LOOM_DTYPE_F64: {
      LM_TRY(apint(bc, c, 64, false, &bits));
      memcpy(out, &bits, 8);
      return 0;
    }
    default: return bc_fail(bc, LOOM_UNSUPPORTED, "float attribute of type %s", lm_dtype_name(d));
  }
}

/* A scalar type for an integer or float attribute. */
static int scalar_type(lm_bc *bc, const bc_type *t, lm_dtype *d) {
  char buf[64];
  if (t->kind == BC_T_INDEX) { *d = LOOM_DTYPE_S64; return 0; }
  if (t->kind != BC_T_TYPE || t->t.kind != LM_TYPE_TENSOR || t->t.rank != 0)
    return bc_fail(bc, LOOM_UNSUPPORTED, "attribute of type %s", bc_type_str(t, buf, sizeof buf));
  *d = (lm_dtype)t->t.dtype;
  return 0;
}

static int int_attr(lm_bc *bc, bc_cur *c, lm_attr *a) {
  const bc_type *t;
  lm_dtype d;
  LM_TRY(bc_type_ref(bc, c, &t));
  LM_TRY(scalar_type(bc, t, &d));
  if (!lm_dtype_is_int(d) && !lm_dtype_is_pred(d)) return bc_fail(bc, LOOM_PARSE, "integer attribute of type %s", lm_dtype_name(d));
  LM_TRY(apint(bc, c, t->kind == BC_T_INDEX ? 64 : (unsigned)lm_dtype_bits(d), lm_dtype_is_uint(d), &a->i));
  if (lm_dtype_is_pred(d)) {
    a->kind = LM_ATTR_BOOL;
    a->i = a->i != 0;
    return 0;
  }
  a->kind = LM_ATTR_INT;
  a->type = (lm_type *)&t->t;
  return 0;
}

static int float_attr(lm_bc *bc, bc_cur *c, lm_attr *a) {
  const bc_type *t;
  lm_dtype d;
  LM_TRY(bc_type_ref(bc, c, &t));
  LM_TRY(scalar_type(bc, t, &d));
  a->kind = LM_ATTR_FLOAT;
  a->type = (lm_type *)&t->t;
  return float_bits(bc, c, d, &a->f);
}

/* A dense elements attribute: type + raw data, splats expanded, i1 unpacked from bits. */
static int dense_attr(lm_bc *bc, bc_cur *c, const bc_type *t, lm_attr *a) {
  char buf[128];
  uint64_t n;
  const uint8_t *blob;
  LM_TRY(bc_varint(bc, c, &n));
  if (n > (uint64_t)(c->end - c->p)) return bc_fail_at(bc, c->p, LOOM_PARSE, "dense data runs past its entry");
  LM_TRY(bc_bytes(bc, c, (size_t)n, &blob));
  if (t->kind != BC_T_TYPE || t->t.kind != LM_TYPE_TENSOR)
    return bc_fail(bc, LOOM_UNSUPPORTED, "dense attribute of type %s", bc_type_str(t, buf, sizeof buf));
  if (!lm_type_is_static(&t->t)) return bc_fail(bc, LOOM_PARSE, "dense attribute of dynamic type %s", bc_type_str(t, buf, sizeof buf));
  size_t numel = 1, es = lm_dtype_size((lm_dtype)t->t.dtype), total;
  for (int i = 0; i < t->t.rank; i++)
    if (lm_mul_size(numel, (size_t)t->t.dims[i], &numel)) return bc_fail(bc, LOOM_PARSE, "dense attribute too large");
  if (lm_mul_size(numel, es, &total) || total > bc->max_const)
    return bc_fail(bc, LOOM_UNSUPPORTED, "constant %s is larger than the %zu-byte limit", bc_type_str(t, buf, sizeof buf),
                   bc->max_const);
  uint8_t *d = bc_alloc(bc, total);
  if (!d) return bc->err->code;
  if (t->t.dtype == LOOM_DTYPE_PRED && n != numel && n == (numel + 7) / 8) {
    for (size_t i = 0; i < numel; i++) d[i] = (blob[i / 8] >> (i % 8)) & 1;
  } else if (n == total) {
    memcpy(d, blob, total);
    if (t->t.dtype == LOOM_DTYPE_PRED)
      for (size_t i = 0; i < numel; i++) d[i] = d[i] != 0;
  } else if (n == es && numel > 0) { /* splat */
    for (size_t i = 0; i < numel; i++) memcpy(d + i * es, blob, es);
    if (t->t.dtype == LOOM_DTYPE_PRED) memset(d, blob[0] != 0, numel);
  } else {
    return bc_fail(bc, LOOM_PARSE, "dense data of %llu bytes for %s (which needs %zu)", (unsigned long long)n,
                   bc_type_str(t, buf, sizeof buf), total);
  }
  a->kind = LM_ATTR_DENSE;
  a->type = (lm_type *)&t->t;
  a->data = d;
  a->nbytes = total;
  return 0;
}

/* A type as an attribute value: TYPE, the text parser's ARRAY "->" for function types, ENUM for
 * a type Loom only names and for none. */
static int type_value(lm_bc *bc, const bc_type *t, lm_attr *a) {
  switch (t->kind) {
    case BC_T_TYPE: case BC_T_INDEX:
      a->kind = LM_ATTR_TYPE;
      a->type = (lm_type *)&t->t;
      return 0;
    case BC_T_NONE: /* as the text parser keeps the bare word */
      a->kind = LM_ATTR_ENUM;
      a->s = "none";
      a->n = 4;
      return 0;
    case BC_T_NAMED:
      a->kind = LM_ATTR_ENUM;
      a->s = t->name;
      a->n = (uint32_t)strlen(t->name);
      return 0;
    default: break;
  }
  a->kind = LM_ATTR_ARRAY;
  a->s = "->";
  a->n = 2;
  a->items = bc_array(bc, 2, sizeof(lm_attr));
  if (!a->items) return bc->err->code;
  for (int side = 0; side < 2; side++) {
    lm_attr *l = &a->items[side];
    l->kind = LM_ATTR_ARRAY;
    l->n = side ? t->nout : t->nin;
    l->items = bc_array(bc, l->n, sizeof(lm_attr));
    if (!l->items) return bc->err->code;
    for (uint32_t i = 0; i < l->n; i++) {
      l->items[i].kind = LM_ATTR_TYPE;
      l->items[i].type = side ? &t->outs[i] : &t->ins[i];
    }
  }
  return 0;
}

static int string_name(lm_bc *bc, const lm_attr *a, const char **out) {
  if (a->kind != LM_ATTR_STRING) return bc_fail(bc, LOOM_PARSE, "a dictionary key that is not a string");
  *out = a->s;
  return 0;
}

static int dict_attr(lm_bc *bc, bc_cur *c, lm_attr *a) {
  uint64_t n;
  LM_TRY(bc_count(bc, c, 2, &n));
  a->kind = LM_ATTR_DICT;
  a->n = (uint32_t)n;
  a->fields = bc_array(bc, n, sizeof(lm_named_attr));
  if (!a->fields) return bc->err->code;
  for (uint64_t i = 0; i < n; i++) {
    const lm_attr *k, *v;
    LM_TRY(bc_attr_ref(bc, c, &k));
    LM_TRY(string_name(bc, k, &a->fields[i].name));
    LM_TRY(bc_attr_ref(bc, c, &v));
    a->fields[i].value = *v;
  }
  return 0;
}

static int builtin_attr(lm_bc *bc, bc_cur *c, lm_attr *a) {
  uint64_t code;
  LM_TRY(bc_varint(bc, c, &code));
  switch (code) {
    case B_ARRAY: return attr_list(bc, c, a);
    case B_DICT: return dict_attr(bc, c, a);
    case B_STRING: case B_STRING_TYPED: {
      uint32_t n;
      a->kind = LM_ATTR_STRING;
      LM_TRY(bc_string(bc, c, &a->s, &n));
      a->n = n;
      if (code == B_STRING_TYPED) {
        const bc_type *t;
        LM_TRY(bc_type_ref(bc, c, &t));
      }
      return 0;
    }
    case B_FLAT_SYMBOL: case B_SYMBOL: {
      const lm_attr *root;
      LM_TRY(bc_attr_ref(bc, c, &root));
      if (root->kind != LM_ATTR_STRING) return bc_fail(bc, LOOM_PARSE, "symbol reference without a name");
      a->kind = LM_ATTR_SYMBOL;
      a->s = root->s;
      a->n = root->n;
      if (code == B_SYMBOL) {
        uint64_t k;
        LM_TRY(bc_count(bc, c, 1, &k));
        for (uint64_t i = 0; i < k; i++) { /* nested references: kept as "a::b", as the text parser does */
          const lm_attr *leaf;
          LM_TRY(bc_attr_ref(bc, c, &leaf));
          if (leaf->kind != LM_ATTR_SYMBOL) return bc_fail(bc, LOOM_PARSE, "nested symbol reference without a name");
          char *s = bc_alloc(bc, a->n + 2 + leaf->n + 1);
          if (!s) return bc->err->code;
          memcpy(s, a->s, a->n);
          memcpy(s + a->n, "::", 2);
          memcpy(s + a->n + 2, leaf->s, leaf->n);
          a->n += 2 + leaf->n;
          a->s = s;
        }
      }
      return 0;
    }
    case B_TYPE: {
      const bc_type *t;
      LM_TRY(bc_type_ref(bc, c, &t));
      return type_value(bc, t, a);
    }
    case B_UNIT: a->kind = LM_ATTR_UNIT; return 0;
    case B_INTEGER: return int_attr(bc, c, a);
    case B_FLOAT: return float_attr(bc, c, a);
    case B_LOC_CALLSITE: case B_LOC_FILE: case B_LOC_FUSED: case B_LOC_FUSED_META: case B_LOC_NAME: case B_LOC_UNKNOWN:
      /* a location used as a value: only its presence is kept */
      c->p = c->end;
      a->kind = LM_ATTR_UNIT;
      a->s = "loc";
      return 0;
    case B_DENSE_ARRAY: {
      const bc_type *t;
      uint64_t n, size;
      const uint8_t *blob;
      lm_dtype d;
      LM_TRY(bc_type_ref(bc, c, &t));
      LM_TRY(scalar_type(bc, t, &d));
      LM_TRY(bc_varint(bc, c, &n));
      LM_TRY(bc_varint(bc, c, &size));
      if (size > (uint64_t)(c->end - c->p)) return bc_fail_at(bc, c->p, LOOM_PARSE, "dense array data runs past its entry");
      LM_TRY(bc_bytes(bc, c, (size_t)size, &blob));
      size_t es = lm_dtype_is_pred(d) ? 1 : lm_dtype_size(d);
      if (n > size || (!lm_dtype_is_pred(d) && n * es != size))
        return bc_fail(bc, LOOM_PARSE, "dense array of %llu %s in %llu bytes", (unsigned long long)n, lm_dtype_name(d),
                       (unsigned long long)size);
      bool ints = lm_dtype_is_int(d) || lm_dtype_is_pred(d);
      a->kind = ints ? LM_ATTR_INTS : LM_ATTR_ARRAY;
      a->n = (uint32_t)n;
      if (ints) {
        a->ints = bc_array(bc, n, sizeof(int64_t));
        if (!a->ints) return bc->err->code;
      } else {
        a->items = bc_array(bc, n, sizeof(lm_attr));
        if (!a->items) return bc->err->code;
      }
      for (uint64_t i = 0; i < n; i++) {
        bc_cur e = {blob + i * es, blob + (i + 1) * es};
        if (lm_dtype_is_pred(d)) { a->ints[i] = blob[i] != 0; continue; }
        if (ints) {
          uint64_t v = 0;
          for (size_t k = 0; k < es; k++) v |= (uint64_t)blob[i * es + k] << (8 * k);
          if (lm_dtype_is_sint(d) && es < 8 && (v >> (8 * es - 1))) v |= ~((1ull << (8 * es)) - 1);
          a->ints[i] = (int64_t)v;
          continue;
        }
        a->items[i].kind = LM_ATTR_FLOAT;
        if (d == LOOM_DTYPE_F32) { float f; memcpy(&f, e.p, 4); a->items[i].f = f; }
        else if (d == LOOM_DTYPE_F64) memcpy(&a->items[i].f, e.p, 8);
        else return bc_fail(bc, LOOM_UNSUPPORTED, "dense array of %s", lm_dtype_name(d));
      }
      return 0;
    }
    case B_DENSE: {
      const bc_type *t;
      LM_TRY(bc_type_ref(bc, c, &t));
      return dense_attr(bc, c, t, a);
    }
    case B_DENSE_RESOURCE:
      return bc_fail(bc, LOOM_UNSUPPORTED, "dense_resource attributes (constants in resource blobs) are not supported");
    case B_DENSE_STRING: return bc_fail(bc, LOOM_UNSUPPORTED, "dense string attributes are not supported");
    case B_SPARSE: return bc_fail(bc, LOOM_UNSUPPORTED, "sparse attributes are not supported");
    case B_DISTINCT: return bc_fail(bc, LOOM_UNSUPPORTED, "distinct attributes are not supported");
    default:
      return bc_fail(bc, LOOM_UNSUPPORTED, "builtin attribute #%llu is not known to this reader", (unsigned long long)code);
  }
}

static int vhlo_attr(lm_bc *bc, bc_cur *c, lm_attr *a) {
  uint64_t code;
  LM_TRY(bc_varint(bc, c, &code));
  switch (code) {
    case V_ARRAY: return attr_list(bc, c, a);
    case V_BOOL: {
      uint64_t v;
      LM_TRY(bc_varint(bc, c, &v));
      if (v > 1) return bc_fail(bc, LOOM_PARSE, "boolean attribute with value %llu", (unsigned long long)v);
      a->kind = LM_ATTR_BOOL;
      a->i = (int64_t)v;
      return 0;
    }
    case V_CMP_DIR: return enum_attr(bc, c, k_cmp_dir, 6, "comparison direction", a);
    case V_CMP_TYPE: return enum_attr(bc, c, k_cmp_type, 5, "comparison type", a);
    case V_API_VERSION: return enum_attr(bc, c, k_api, 5, "custom call API version", a);
    case V_DICT: return dict_attr(bc, c, a);
    case V_FFT_TYPE: return enum_attr(bc, c, k_fft, 4, "FFT type", a);
    case V_FLOAT: return float_attr(bc, c, a);
    case V_INTEGER: return int_attr(bc, c, a);
    case V_OUTPUT_OPERAND_ALIAS: {
      a->kind = LM_ATTR_STRUCT;
      a->s = "stablehlo.output_operand_alias";
      a->n = 3;
      a->fields = bc_array(bc, 3, sizeof(lm_named_attr));
      if (!a->fields) return bc->err->code;
      LM_TRY(ints_attr(bc, c, &field(a, 0, "output_tuple_indices")->value));
      field(a, 1, "operand_index")->value.kind = LM_ATTR_INT;
      LM_TRY(bc_svarint(bc, c, &a->fields[1].value.i));
      return ints_attr(bc, c, &field(a, 2, "operand_tuple_indices")->value);
    }
    case V_PRECISION: return enum_attr(bc, c, k_precision, 3, "precision", a);
    case V_RNG_ALGORITHM: return enum_attr(bc, c, k_rng_alg, 3, "RNG algorithm", a);
    case V_RNG_DISTRIBUTION: return enum_attr(bc, c, k_rng_dist, 3, "RNG distribution", a);
    case V_STRING: {
      uint32_t n;
      a->kind = LM_ATTR_STRING;
      LM_TRY(bc_string(bc, c, &a->s, &n));
      a->n = n;
      return 0;
    }
    case V_TENSOR: {
      const bc_type *t;
      LM_TRY(bc_type_ref(bc, c, &t));
      return dense_attr(bc, c, t, a);
    }
    case V_TRANSPOSE: return enum_attr(bc, c, k_transpose, 4, "transpose", a);
    case V_TYPE: {
      const bc_type *t;
      LM_TRY(bc_type_ref(bc, c, &t));
      return type_value(bc, t, a);
    }
    case V_TYPE_EXTENSIONS:
      return bc_fail(bc, LOOM_UNSUPPORTED, "bounded dynamic dimensions (#stablehlo.bounds) are not supported");
    case V_RESULT_ACCURACY_MODE: return enum_attr(bc, c, k_accuracy, 3, "result accuracy mode", a);
    case V_RESULT_ACCURACY: {
      a->kind = LM_ATTR_STRUCT;
      a->s = "stablehlo.result_accuracy";
      a->n = 4;
      a->fields = bc_array(bc, 4, sizeof(lm_named_attr));
      if (!a->fields) return bc->err->code;
      lm_named_attr *f = field(a, 0, "atol");
      f->value.kind = LM_ATTR_FLOAT;
      LM_TRY(float_bits(bc, c, LOOM_DTYPE_F64, &f->value.f));
      f = field(a, 1, "rtol");
      f->value.kind = LM_ATTR_FLOAT;
      LM_TRY(float_bits(bc, c, LOOM_DTYPE_F64, &f->value.f));
      f = field(a, 2, "ulps");
      f->value.kind = LM_ATTR_INT;
      LM_TRY(bc_svarint(bc, c, &f->value.i));
      const lm_attr *mode;
      LM_TRY(bc_attr_ref(bc, c, &mode));
      field(a, 3, "mode")->value = *mode;
      return 0;
    }
    default:
      return bc_fail(bc, LOOM_UNSUPPORTED, "VHLO attribute #%llu is not known to this reader (it reads StableHLO %s "
                     "to %s)", (unsigned long long)code, LM_VHLO_MIN_VERSION, LM_VHLO_MAX_VERSION);
  }
}

/* ---- sdy (shardy's bytecode.td: codes in the order of its list) ---- */
enum { S_MANUAL_AXES, S_MESH_AXIS, S_MESH, S_SUB_AXIS, S_AXIS_REF, S_DIM_SHARDING, S_SHARDING_V1, S_PER_VALUE_V1,
       S_DIM_MAPPING, S_TENSOR_MAPPING, S_SHARDING_RULE, S_AXIS_REF_LIST, S_AXIS_REF_LISTS, S_ALL_TO_ALL_PARAM,
       S_ALL_TO_ALL_PARAMS, S_SHARDING_V2, S_PER_VALUE_V2 };

/* A list of attribute references that must each be of `want` kind (and struct name). */
static int ref_list(lm_bc *bc, bc_cur *c, lm_attr_kind want, const char *sname, const char *what, lm_attr *a) {
  LM_TRY(attr_list(bc, c, a));
  for (uint32_t i = 0; i < a->n; i++)
    if (a->items[i].kind != want || (sname && (!a->items[i].s || strcmp(a->items[i].s, sname))))
      return bc_fail(bc, LOOM_PARSE, "sdy attribute: expected a list of %s", what);
  return 0;
}

static int sdy_sharding(lm_bc *bc, bc_cur *c, bool v2, lm_attr *a) {
  const lm_attr *mesh;
  lm_attr dims, rep, unred;
  memset(&unred, 0, sizeof unred);
  LM_TRY(bc_attr_ref(bc, c, &mesh));
  if (mesh->kind != LM_ATTR_SYMBOL && !(mesh->kind == LM_ATTR_STRUCT && !strcmp(mesh->s, "sdy.mesh")))
    return bc_fail(bc, LOOM_PARSE, "sdy sharding whose mesh is neither a mesh nor a symbol");
  LM_TRY(ref_list(bc, c, LM_ATTR_ARRAY, NULL, "dimension shardings", &dims));
  for (uint32_t i = 0; i < dims.n; i++) /* each a list of axis names (S_DIM_SHARDING) */
    for (uint32_t j = 0; j < dims.items[i].n; j++)
      if (dims.items[i].items[j].kind != LM_ATTR_STRING)
        return bc_fail(bc, LOOM_PARSE, "sdy sharding: dimension %u is not a list of mesh axes", i);
  LM_TRY(ref_list(bc, c, LM_ATTR_STRING, NULL, "axes", &rep));
  if (v2) LM_TRY(ref_list(bc, c, LM_ATTR_STRING, NULL, "axes", &unred));
  a->kind = LM_ATTR_STRUCT;
  a->s = "sdy.sharding";
  a->fields = bc_array(bc, 4, sizeof(lm_named_attr));
  if (!a->fields) return bc->err->code;
  field(a, a->n++, "mesh")->value = *mesh;
  field(a, a->n++, "dims")->value = dims;
  if (rep.n) field(a, a->n++, "replicated")->value = rep;
  if (unred.n) field(a, a->n++, "unreduced")->value = unred;
  return 0;
}

static int sdy_attr(lm_bc *bc, bc_cur *c, lm_attr *a) {
  uint64_t code;
  LM_TRY(bc_varint(bc, c, &code));
  switch (code) {
    case S_MANUAL_AXES: return ref_list(bc, c, LM_ATTR_STRING, NULL, "axis names", a);
    case S_MESH_AXIS: {
      uint32_t n;
      a->kind = LM_ATTR_STRUCT;
      a->s = "sdy.mesh_axis";
      a->fields = bc_array(bc, 2, sizeof(lm_named_attr));
      if (!a->fields) return bc->err->code;
      a->n = 2;
      lm_attr *nm = &field(a, 0, "name")->value, *sz = &field(a, 1, "size")->value;
      nm->kind = LM_ATTR_STRING;
      LM_TRY(bc_string(bc, c, &nm->s, &n));
      nm->n = n;
      sz->kind = LM_ATTR_INT;
      return bc_svarint(bc, c, &sz->i);
    }
    case S_MESH: {
      lm_attr axes, ids;
      LM_TRY(ref_list(bc, c, LM_ATTR_STRUCT, "sdy.mesh_axis", "mesh axes", &axes));
      LM_TRY(ints_attr(bc, c, &ids));
      a->kind = LM_ATTR_STRUCT;
      a->s = "sdy.mesh";
      a->fields = bc_array(bc, 3, sizeof(lm_named_attr));
      if (!a->fields) return bc->err->code;
      lm_attr *names = &field(a, a->n++, "axis_names")->value, *sizes = &field(a, a->n++, "axis_sizes")->value;
      names->kind = LM_ATTR_ARRAY;
      names->n = axes.n;
      names->items = bc_array(bc, axes.n, sizeof(lm_attr));
      sizes->kind = LM_ATTR_INTS;
      sizes->n = axes.n;
      sizes->ints = bc_array(bc, axes.n, sizeof(int64_t));
      if (!names->items || !sizes->ints) return bc->err->code;
      for (uint32_t i = 0; i < axes.n; i++) {
        names->items[i] = axes.items[i].fields[0].value;
        sizes->ints[i] = axes.items[i].fields[1].value.i;
      }
      if (ids.n) field(a, a->n++, "device_ids")->value = ids;
      return 0;
    }
    case S_SUB_AXIS: {
      a->kind = LM_ATTR_INTS;
      a->n = 2;
      a->ints = bc_array(bc, 2, sizeof(int64_t));
      if (!a->ints) return bc->err->code;
      LM_TRY(bc_svarint(bc, c, &a->ints[0]));
      a->s = "sdy.sub_axis";
      return bc_svarint(bc, c, &a->ints[1]);
    }
    case S_AXIS_REF: { /* "x", or the text parser's "x:(pre)size" for a sub-axis */
      const char *name;
      uint32_t n;
      uint64_t v;
      LM_TRY(bc_string(bc, c, &name, &n));
      LM_TRY(bc_varint(bc, c, &v));
      a->kind = LM_ATTR_STRING;
      a->s = name;
      a->n = n;
      if (v & 1) {
        const lm_attr *sub;
        LM_TRY(bc_attr(bc, v >> 1, &sub));
        if (sub->kind != LM_ATTR_INTS || !sub->s || strcmp(sub->s, "sdy.sub_axis"))
          return bc_fail(bc, LOOM_PARSE, "sdy axis reference with a bad sub-axis");
        char buf[200];
        int k = snprintf(buf, sizeof buf, "%.*s:(%lld)%lld", (int)(n > 150 ? 150 : n), name, (long long)sub->ints[0],
                         (long long)sub->ints[1]);
        a->s = bc_strdup(bc, buf, (size_t)k);
        if (!a->s) return bc->err->code;
        a->n = (uint32_t)k;
      }
      return 0;
    }
    case S_DIM_SHARDING: { /* axes, is_closed, priority: the IR keeps the axes */
      uint8_t closed;
      uint64_t prio;
      LM_TRY(ref_list(bc, c, LM_ATTR_STRING, NULL, "axes", a));
      LM_TRY(bc_byte(bc, c, &closed));
      return bc_varint(bc, c, &prio);
    }
    case S_SHARDING_V1: case S_SHARDING_V2: return sdy_sharding(bc, c, code == S_SHARDING_V2, a);
    case S_PER_VALUE_V1: case S_PER_VALUE_V2: return ref_list(bc, c, LM_ATTR_STRUCT, "sdy.sharding", "shardings", a);
    default:
      return bc_fail(bc, LOOM_UNSUPPORTED, "sdy attribute #%llu (sharding rules and collective parameters) is not "
                     "supported", (unsigned long long)code);
  }
}

int bc_attr(lm_bc *bc, uint64_t idx, const lm_attr **out) {
  if (idx >= bc->nattrs) return bc_fail(bc, LOOM_PARSE, "attribute index %llu out of range (%llu attributes)",
                                        (unsigned long long)idx, (unsigned long long)bc->nattrs);
  bc_entry *e = &bc->attrs[idx];
  if (e->state == 2) {
    *out = e->val;
    return 0;
  }
  if (e->state == 1) return bc_fail(bc, LOOM_PARSE, "attribute %llu refers to itself", (unsigned long long)idx);
  LM_TRY(bc_enter(bc));
  e->state = 1;
  lm_attr *a = new_attr(bc, LM_ATTR_UNIT);
  int rc = a ? 0 : bc->err->code;
  bc_cur c = {e->data, e->data + e->size};
  const bc_dialect *d = &bc->dialects[e->dialect];
  if (rc == 0) {
    if (!e->custom) {
      const uint8_t *nul = memchr(c.p, 0, e->size);
      if (!nul) rc = bc_fail_at(bc, c.p, LOOM_PARSE, "attribute text is not NUL-terminated");
      else {
        rc = lm_parse_attr_text(bc->m, (const char *)c.p, (size_t)(nul - c.p), a, bc->err);
        if (rc < 0) lm_err_prefix(bc->err, "%s: attribute %llu", bc->file, (unsigned long long)idx);
        c.p = nul + 1;
      }
    } else if (d->kind == BC_D_BUILTIN) {
      rc = builtin_attr(bc, &c, a);
    } else if (d->kind == BC_D_VHLO) {
      rc = vhlo_attr(bc, &c, a);
    } else if (d->kind == BC_D_SDY) {
      rc = sdy_attr(bc, &c, a);
    } else {
      rc = bc_fail(bc, LOOM_UNSUPPORTED, "attributes of dialect %s in its own encoding are not supported", d->name);
    }
  }
  if (rc == 0 && c.p != c.end) rc = bc_fail_at(bc, c.p, LOOM_PARSE, "trailing bytes after attribute %llu", (unsigned long long)idx);
  bc_leave(bc);
  if (rc < 0) {
    e->state = 0;
    return rc;
  }
  e->val = a;
  e->state = 2;
  *out = a;
  return 0;
}

/* ---- types ---- */

static int elem_of(lm_bc *bc, const bc_type *et, lm_dtype *d) {
  char buf[64];
  if (et->kind == BC_T_INDEX) { *d = LOOM_DTYPE_S64; return 0; }
  if (et->kind == BC_T_TYPE && et->t.kind == LM_TYPE_TENSOR && et->t.rank == 0) {
    *d = (lm_dtype)et->t.dtype;
    return 0;
  }
  return bc_fail(bc, LOOM_UNSUPPORTED, "unsupported element type '%s' (Loom runs %s)", bc_type_str(et, buf, sizeof buf),
                 LM_SUPPORTED_TYPES);
}

static int tensor_type(lm_bc *bc, bc_cur *c, bc_type *t) {
  int64_t *shape;
  uint32_t rank;
  const bc_type *et;
  LM_TRY(svarint_list(bc, c, &shape, &rank));
  LM_TRY(bc_type_ref(bc, c, &et));
  if (rank > LM_MAX_RANK) return bc_fail(bc, LOOM_UNSUPPORTED, "tensor rank over %d", LM_MAX_RANK);
  lm_dtype d = LOOM_DTYPE_INVALID;
  LM_TRY(elem_of(bc, et, &d));
  t->kind = BC_T_TYPE;
  t->t.kind = LM_TYPE_TENSOR;
  t->t.dtype = (uint8_t)d;
  t->t.rank = (uint8_t)rank;
  for (uint32_t i = 0; i < rank; i++) {
    if (shape[i] == INT64_MIN) t->t.dims[i] = LM_DYN_DIM;
    else if (shape[i] < 0) return bc_fail(bc, LOOM_PARSE, "tensor dimension %lld", (long long)shape[i]);
    else t->t.dims[i] = shape[i];
  }
  return 0;
}

static int type_list(lm_bc *bc, bc_cur *c, lm_type **out, uint32_t *n) {
  uint64_t k;
  LM_TRY(bc_count(bc, c, 1, &k));
  *n = (uint32_t)k;
  *out = bc_array(bc, k, sizeof(lm_type));
  if (!*out) return bc->err->code;
  for (uint64_t i = 0; i < k; i++) {
    const bc_type *t;
    char buf[128];
    LM_TRY(bc_type_ref(bc, c, &t));
    if (t->kind == BC_T_NAMED) return bc_fail(bc, LOOM_UNSUPPORTED, "unsupported element type '%s' (Loom runs %s)", t->name, LM_SUPPORTED_TYPES);
    if (t->kind != BC_T_TYPE && t->kind != BC_T_INDEX)
      return bc_fail(bc, LOOM_UNSUPPORTED, "%s inside a type list", bc_type_str(t, buf, sizeof buf));
    (*out)[i] = t->t;
  }
  return 0;
}

static void set_scalar(bc_type *t, lm_dtype d) {
  t->kind = BC_T_TYPE;
  t->t.kind = LM_TYPE_TENSOR;
  t->t.dtype = (uint8_t)d;
  t->t.rank = 0;
  t->width = (uint8_t)lm_dtype_bits(d);
  t->is_unsigned = lm_dtype_is_uint(d);
}

static int complex_type(lm_bc *bc, bc_cur *c, bc_type *t) {
  const bc_type *et;
  LM_TRY(bc_type_ref(bc, c, &et));
  if (et->kind == BC_T_TYPE && et->t.rank == 0 && et->t.dtype == LOOM_DTYPE_F32) set_scalar(t, LOOM_DTYPE_C64);
  else if (et->kind == BC_T_TYPE && et->t.rank == 0 && et->t.dtype == LOOM_DTYPE_F64) set_scalar(t, LOOM_DTYPE_C128);
  else {
    char buf[64];
    t->kind = BC_T_NAMED;
    t->name = "complex";
    return bc_fail(bc, LOOM_UNSUPPORTED, "unsupported element type 'complex<%s>' (Loom runs %s)",
                   bc_type_str(et, buf, sizeof buf), LM_SUPPORTED_TYPES);
  }
  return 0;
}

static int func_type(lm_bc *bc, bc_cur *c, bc_type *t) {
  t->kind = BC_T_FUNC;
  LM_TRY(type_list(bc, c, &t->ins, &t->nin));
  return type_list(bc, c, &t->outs, &t->nout);
}

static int tuple_type(lm_bc *bc, bc_cur *c, bc_type *t) {
  t->kind = BC_T_TYPE;
  t->t.kind = LM_TYPE_TUPLE;
  return type_list(bc, c, &t->t.tuple, &t->t.ntuple);
}

static int builtin_type(lm_bc *bc, bc_cur *c, bc_type *t) {
  uint64_t code;
  LM_TRY(bc_varint(bc, c, &code));
  switch (code) {
    case BT_INTEGER: {
      uint64_t v;
      LM_TRY(bc_varint(bc, c, &v));
      unsigned width = (unsigned)(v >> 2), sign = (unsigned)(v & 3);
      static const lm_dtype s[] = {LOOM_DTYPE_S8, LOOM_DTYPE_S16, LOOM_DTYPE_S32, LOOM_DTYPE_S64};
      static const lm_dtype u[] = {LOOM_DTYPE_U8, LOOM_DTYPE_U16, LOOM_DTYPE_U32, LOOM_DTYPE_U64};
      int k = width == 8 ? 0 : width == 16 ? 1 : width == 32 ? 2 : width == 64 ? 3 : -1;
      if (width == 1) set_scalar(t, LOOM_DTYPE_PRED);
      else if (k >= 0) set_scalar(t, sign == 2 ? u[k] : s[k]);
      else {
        t->kind = BC_T_NAMED;
        t->name = bc_alloc(bc, 16);
        if (!t->name) return bc->err->code;
        snprintf((char *)t->name, 16, "%si%u", sign == 2 ? "u" : sign == 1 ? "s" : "", width);
      }
      return 0;
    }
    case BT_INDEX: set_scalar(t, LOOM_DTYPE_S64); t->kind = BC_T_INDEX; return 0;
    case BT_FUNCTION: return func_type(bc, c, t);
    case BT_BF16: set_scalar(t, LOOM_DTYPE_BF16); return 0;
    case BT_F16: set_scalar(t, LOOM_DTYPE_F16); return 0;
    case BT_F32: set_scalar(t, LOOM_DTYPE_F32); return 0;
    case BT_F64: set_scalar(t, LOOM_DTYPE_F64); return 0;
    case BT_F80: t->kind = BC_T_NAMED; t->name = "f80"; return 0;
    case BT_F128: t->kind = BC_T_NAMED; t->name = "f128"; return 0;
    case BT_COMPLEX: return complex_type(bc, c, t);
    case BT_NONE: t->kind = BC_T_NONE; return 0;
    case BT_TENSOR: return tensor_type(bc, c, t);
    case BT_TUPLE: return tuple_type(bc, c, t);
    case BT_TENSOR_ENC: return bc_fail(bc, LOOM_UNSUPPORTED, "tensor types with an encoding are not supported");
    case BT_UTENSOR: return bc_fail(bc, LOOM_UNSUPPORTED, "unranked tensors (tensor<*x...>) are not supported");
    case BT_MEMREF: case BT_MEMREF_SPACE: case BT_UMEMREF: case BT_UMEMREF_SPACE:
      return bc_fail(bc, LOOM_UNSUPPORTED, "memref types are not supported");
    case BT_VECTOR: case BT_VECTOR_SCALABLE: return bc_fail(bc, LOOM_UNSUPPORTED, "vector types are not supported");
    default:
      /* newer builtin types are appended (the f8/f6/f4 kinds, tf32, ...): none is one Loom runs */
      t->kind = BC_T_NAMED;
      t->name = bc_alloc(bc, 32);
      if (!t->name) return bc->err->code;
      snprintf((char *)t->name, 32, "builtin type #%llu", (unsigned long long)code);
      c->p = c->end;
      return 0;
  }
}

static int vhlo_type(lm_bc *bc, bc_cur *c, bc_type *t) {
  uint64_t code;
  LM_TRY(bc_varint(bc, c, &code));
  for (size_t i = 0; i < sizeof k_vhlo_elem / sizeof k_vhlo_elem[0]; i++)
    if (k_vhlo_elem[i].code == code) {
      if (k_vhlo_elem[i].dtype) set_scalar(t, k_vhlo_elem[i].dtype);
      else t->kind = BC_T_NAMED;
      t->name = k_vhlo_elem[i].name;
      return 0;
    }
  switch (code) {
    case VT_COMPLEX: return complex_type(bc, c, t);
    case VT_FUNCTION: return func_type(bc, c, t);
    case VT_INDEX: set_scalar(t, LOOM_DTYPE_S64); t->kind = BC_T_INDEX; t->name = "index"; return 0;
    case VT_TENSOR: return tensor_type(bc, c, t);
    case VT_TENSOR_ENC: {
      const lm_attr *enc;
      LM_TRY(bc_attr_ref(bc, c, &enc));
      return bc_fail(bc, LOOM_UNSUPPORTED, "tensor types with an encoding (bounded dynamic shapes) are not supported");
    }
    case VT_TOKEN:
      t->kind = BC_T_TYPE;
      t->t.kind = LM_TYPE_TOKEN;
      return 0;
    case VT_TUPLE: return tuple_type(bc, c, t);
    case VT_QUANT: case VT_QUANT_AXIS:
      return bc_fail(bc, LOOM_UNSUPPORTED, "unsupported element type: quantized types (!quant.uniform) are not supported");
    case VT_UTENSOR: return bc_fail(bc, LOOM_UNSUPPORTED, "unranked tensors (tensor<*x...>) are not supported");
    case VT_WITNESS: return bc_fail(bc, LOOM_UNSUPPORTED, "!shape.witness types are not supported");
    case VT_NONE: t->kind = BC_T_NONE; return 0;
    case VT_BUFFER: return bc_fail(bc, LOOM_UNSUPPORTED, "buffer types (memref) are not supported");
    default:
      return bc_fail(bc, LOOM_UNSUPPORTED, "VHLO type #%llu is not known to this reader (it reads StableHLO %s to %s)",
                     (unsigned long long)code, LM_VHLO_MIN_VERSION, LM_VHLO_MAX_VERSION);
  }
}

int bc_type_at(lm_bc *bc, uint64_t idx, const bc_type **out) {
  if (idx >= bc->ntypes) return bc_fail(bc, LOOM_PARSE, "type index %llu out of range (%llu types)",
                                        (unsigned long long)idx, (unsigned long long)bc->ntypes);
  bc_entry *e = &bc->types[idx];
  if (e->state == 2) {
    *out = e->val;
    return 0;
  }
  if (e->state == 1) return bc_fail(bc, LOOM_PARSE, "type %llu refers to itself", (unsigned long long)idx);
  LM_TRY(bc_enter(bc));
  e->state = 1;
  bc_type *t = bc_alloc(bc, sizeof *t);
  int rc = t ? 0 : bc->err->code;
  bc_cur c = {e->data, e->data + e->size};
  const bc_dialect *d = &bc->dialects[e->dialect];
  if (rc == 0) {
    if (!e->custom) {
      const uint8_t *nul = memchr(c.p, 0, e->size);
      if (!nul) rc = bc_fail_at(bc, c.p, LOOM_PARSE, "type text is not NUL-terminated");
      else {
        t->kind = BC_T_TYPE;
        rc = lm_parse_type_text(bc->m, (const char *)c.p, (size_t)(nul - c.p), &t->t, bc->err);
        if (rc < 0) lm_err_prefix(bc->err, "%s: type %llu", bc->file, (unsigned long long)idx);
        c.p = nul + 1;
      }
    } else if (d->kind == BC_D_BUILTIN) {
      rc = builtin_type(bc, &c, t);
    } else if (d->kind == BC_D_VHLO) {
      rc = vhlo_type(bc, &c, t);
    } else {
      rc = bc_fail(bc, LOOM_UNSUPPORTED, "types of dialect %s in its own encoding are not supported", d->name);
    }
  }
  if (rc == 0 && c.p != c.end) rc = bc_fail_at(bc, c.p, LOOM_PARSE, "trailing bytes after type %llu", (unsigned long long)idx);
  bc_leave(bc);
  if (rc < 0) {
    e->state = 0;
    return rc;
  }
  e->val = t;
  e->state = 2;
  *out = t;
  return 0;
}

int bc_value_type(lm_bc *bc, uint64_t idx, const lm_type **out) {
  const bc_type *t;
  char buf[128];
  LM_TRY(bc_type_at(bc, idx, &t));
  if (t->kind == BC_T_NAMED)
    return bc_fail(bc, LOOM_UNSUPPORTED, "unsupported element type '%s' (Loom runs %s)", t->name, LM_SUPPORTED_TYPES);
  if (t->kind != BC_T_TYPE && t->kind != BC_T_INDEX)
    return bc_fail(bc, LOOM_UNSUPPORTED, "a value of type %s", bc_type_str(t, buf, sizeof buf));
  *out = &t->t;
  return 0;
}

/* ---- locations ---- */

/* Finds the innermost file:line:col of a location entry (name, call-site and fused locations
 * wrap others); reads the entry directly, without caching it as an attribute. */
static bool loc_read(lm_bc *bc, uint64_t idx, lm_loc *out, int depth);

/* loc_read, memoized per entry: a location is resolved once however many ops and other
 * locations name it (fused and call-site locations form a DAG that a walk would explore
 * exponentially), and one that names itself resolves to none. */
static bool loc_rec(lm_bc *bc, uint64_t idx, lm_loc *out, int depth) {
  if (idx >= bc->nattrs || depth > 32) return false;
  if (!bc->loc_state) {
    bc->loc_state = calloc(bc->nattrs, 1);
    bc->locs = calloc(bc->nattrs, sizeof *bc->locs);
    if (!bc->loc_state || !bc->locs) {
      free(bc->loc_state), free(bc->locs);
      bc->loc_state = NULL, bc->locs = NULL;
      return loc_read(bc, idx, out, depth); /* out of memory: unmemoized, still bounded by depth */
    }
  }
  switch (bc->loc_state[idx]) {
    case 2: *out = bc->locs[idx]; return true;
    case 1: case 3: return false;
    default: break;
  }
  bc->loc_state[idx] = 1;
  lm_loc l = {0};
  bool ok = loc_read(bc, idx, &l, depth);
  bc->loc_state[idx] = ok ? 2 : 3;
  if (ok) *out = bc->locs[idx] = l;
  return ok;
}

static bool loc_read(lm_bc *bc, uint64_t idx, lm_loc *out, int depth) {
  const bc_entry *e = &bc->attrs[idx];
  if (!e->custom || bc->dialects[e->dialect].kind != BC_D_BUILTIN) return false;
  bc_cur c = {e->data, e->data + e->size};
  uint64_t code, a, b;
  bool ok = false;
  if (bc_varint(bc, &c, &code) < 0) return false;
  switch (code) {
    case B_LOC_FILE: {
      uint64_t fi, line, col;
      if (bc_varint(bc, &c, &fi) < 0 || bc_varint(bc, &c, &line) < 0 || bc_varint(bc, &c, &col) < 0) break;
      if (fi >= bc->nattrs) break;
      const bc_entry *fe = &bc->attrs[fi];
      bc_cur fc = {fe->data, fe->data + fe->size};
      uint64_t scode;
      const char *s;
      if (!fe->custom || bc->dialects[fe->dialect].kind != BC_D_BUILTIN || bc_varint(bc, &fc, &scode) < 0 ||
          scode != B_STRING || bc_string(bc, &fc, &s, NULL) < 0)
        break;
      out->file = s;
      out->line = line > UINT32_MAX ? UINT32_MAX : (uint32_t)line;
      out->col = col > UINT32_MAX ? UINT32_MAX : (uint32_t)col;
      ok = true;
      break;
    }
    case B_LOC_NAME: /* name, child */
      if (bc_varint(bc, &c, &a) < 0 || bc_varint(bc, &c, &b) < 0) break;
      ok = loc_rec(bc, b, out, depth + 1);
      break;
    case B_LOC_CALLSITE: /* callee, caller: the callee is the innermost frame */
      if (bc_varint(bc, &c, &a) < 0 || bc_varint(bc, &c, &b) < 0) break;
      ok = loc_rec(bc, a, out, depth + 1) || loc_rec(bc, b, out, depth + 1);
      break;
    case B_LOC_FUSED: case B_LOC_FUSED_META: {
      uint64_t n;
      if (bc_varint(bc, &c, &n) < 0) break;
      for (uint64_t i = 0; i < n && i < 64 && !ok; i++) {
        if (bc_varint(bc, &c, &a) < 0) break;
        ok = loc_rec(bc, a, out, depth + 1);
      }
      break;
    }
    default: break;
  }
  return ok;
}

void bc_loc(lm_bc *bc, uint64_t idx, lm_loc *out) {
  lm_err scratch, *real = bc->err; /* a location that does not read is no error: its message goes here */
  bc->err = &scratch;
  memset(out, 0, sizeof *out);
  if (!loc_rec(bc, idx, out, 0)) out->file = NULL;
  bc->err = real;
}
