/* IR helpers: op name table, attribute lookup and conversion, tensor type utilities. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "hlo/ir.h"

static const char *const g_op_names[] = {
#define LM_OP(code, name) name,
#include "hlo/ops.def"
#undef LM_OP
};
_Static_assert(sizeof g_op_names / sizeof g_op_names[0] == LM_OP_COUNT, "op name table out of step with ops.def");

const char *lm_opcode_name(lm_opcode code) {
  return (unsigned)code < LM_OP_COUNT ? g_op_names[code] : "<invalid>";
}

lm_opcode lm_opcode_from_name(const char *name, size_t n) {
  /* Linear scan is fine: called once per op at parse time, ~200 names. */
  for (int i = 1; i < LM_OP_COUNT; i++)
    if (strlen(g_op_names[i]) == n && memcmp(g_op_names[i], name, n) == 0) return (lm_opcode)i;
  return LM_OP_UNKNOWN;
}

void lm_module_free(lm_module *m) {
  if (!m) return;
  for (lm_module_hold *h = m->holds, *next; h; h = next) { /* held outside the arena */
    next = h->next;
    h->release(h->arg);
    free(h);
  }
  lm_arena_free(&m->arena);
  free(m);
}

const lm_func *lm_module_func(const lm_module *m, const char *name) {
  for (uint32_t i = 0; i < m->nfuncs; i++)
    if (strcmp(m->funcs[i].name, name) == 0) return &m->funcs[i];
  return NULL;
}

bool lm_func_arg_donated(const lm_func *fn, uint32_t i) {
  if (i >= fn->nargs || fn->arg_attrs[i].kind != LM_ATTR_DICT) return false;
  const lm_attr *d = &fn->arg_attrs[i];
  const lm_attr *b = lm_attrs_get(d->fields, d->n, "jax.buffer_donor");
  return (b && b->kind == LM_ATTR_BOOL && b->i) || lm_attrs_get(d->fields, d->n, "tf.aliasing_output") != NULL;
}

const lm_attr *lm_attrs_get(const lm_named_attr *attrs, uint32_t n, const char *name) {
  for (uint32_t i = 0; i < n; i++)
    if (strcmp(attrs[i].name, name) == 0) return &attrs[i].value;
  return NULL;
}

const lm_attr *lm_op_attr(const lm_op *op, const char *name) { return lm_attrs_get(op->attrs, op->nattrs, name); }
const lm_attr *lm_module_attr(const lm_module *m, const char *name) { return lm_attrs_get(m->attrs, m->nattrs, name); }

/* Reads element k of an integer DENSE attribute as int64. */
static int64_t dense_int_at(const lm_attr *a, int64_t k) {
  const unsigned char *p = a->data;
  switch ((lm_dtype)a->type->dtype) {
    case LOOM_DTYPE_PRED: case LOOM_DTYPE_U8: return p[k];
    case LOOM_DTYPE_S8: return ((const int8_t *)p)[k];
    case LOOM_DTYPE_S16: { int16_t v; memcpy(&v, p + 2 * k, 2); return v; }
    case LOOM_DTYPE_U16: { uint16_t v; memcpy(&v, p + 2 * k, 2); return v; }
    case LOOM_DTYPE_S32: { int32_t v; memcpy(&v, p + 4 * k, 4); return v; }
    case LOOM_DTYPE_U32: { uint32_t v; memcpy(&v, p + 4 * k, 4); return v; }
    case LOOM_DTYPE_S64: case LOOM_DTYPE_U64: { int64_t v; memcpy(&v, p + 8 * k, 8); return v; }
    default: return 0;
  }
}

static bool dense_is_int(const lm_attr *a) {
  return a->kind == LM_ATTR_DENSE && a->type && a->type->kind == LM_TYPE_TENSOR &&
         (lm_dtype_is_int(a->type->dtype) || lm_dtype_is_pred(a->type->dtype));
}

int64_t lm_attr_int_or(const lm_attr *a, int64_t dflt) {
  if (!a) return dflt;
  if (a->kind == LM_ATTR_INT || a->kind == LM_ATTR_BOOL) return a->i;
  if (a->kind == LM_ATTR_INTS && a->n == 1) return a->ints[0];
  if (dense_is_int(a) && lm_type_numel(a->type) == 1) return dense_int_at(a, 0);
  return dflt;
}

int lm_attr_ints(const lm_attr *a, int64_t *out, int cap) {
  if (!a) return -1;
  if (a->kind == LM_ATTR_INTS) {
    if ((int64_t)a->n > cap) return -1;
    if (a->n) memcpy(out, a->ints, a->n * sizeof(int64_t));
    return (int)a->n;
  }
  if (dense_is_int(a)) {
    int64_t n = lm_type_numel(a->type);
    if (n < 0 || n > cap) return -1;
    for (int64_t k = 0; k < n; k++) out[k] = dense_int_at(a, k);
    return (int)n;
  }
  if (a->kind == LM_ATTR_ARRAY) {
    if ((int64_t)a->n > cap) return -1;
    for (uint32_t k = 0; k < a->n; k++) {
      if (a->items[k].kind != LM_ATTR_INT) return -1;
      out[k] = a->items[k].i;
    }
    return (int)a->n;
  }
  return -1;
}

int64_t lm_type_numel(const lm_type *t) {
  if (t->kind != LM_TYPE_TENSOR) return 0;
  int64_t n = 1;
  for (int i = 0; i < t->rank; i++) {
    if (t->dims[i] < 0) return -1;
    if (__builtin_mul_overflow(n, t->dims[i], &n)) return -1;
  }
  return n;
}

size_t lm_type_nbytes(const lm_type *t) {
  int64_t n = lm_type_numel(t);
  size_t b;
  if (n <= 0 || lm_mul_size((size_t)n, lm_dtype_size(t->dtype), &b)) return 0;
  return b;
}

bool lm_type_equal(const lm_type *a, const lm_type *b) {
  if (a->kind != b->kind) return false;
  if (a->kind == LM_TYPE_TOKEN) return true;
  if (a->kind == LM_TYPE_TUPLE) {
    if (a->ntuple != b->ntuple) return false;
    for (uint32_t i = 0; i < a->ntuple; i++)
      if (!lm_type_equal(&a->tuple[i], &b->tuple[i])) return false;
    return true;
  }
  if (a->dtype != b->dtype || a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return false;
  return true;
}

bool lm_type_is_static(const lm_type *t) {
  if (t->kind == LM_TYPE_TUPLE) {
    for (uint32_t i = 0; i < t->ntuple; i++)
      if (!lm_type_is_static(&t->tuple[i])) return false;
    return true;
  }
  if (t->kind != LM_TYPE_TENSOR) return true;
  for (int i = 0; i < t->rank; i++)
    if (t->dims[i] < 0) return false;
  return true;
}

char *lm_type_str(const lm_type *t, char *buf, size_t cap) {
  size_t off = 0;
#define PUT(...) do { int k_ = snprintf(off < cap ? buf + off : NULL, off < cap ? cap - off : 0, __VA_ARGS__); if (k_ > 0) off += (size_t)k_; } while (0)
  if (cap == 0) return buf;
  buf[0] = 0;
  if (t->kind == LM_TYPE_TOKEN) {
    PUT("!stablehlo.token");
  } else if (t->kind == LM_TYPE_TUPLE) {
    PUT("tuple<");
    for (uint32_t i = 0; i < t->ntuple; i++) {
      char sub[256];
      PUT("%s%s", i ? ", " : "", lm_type_str(&t->tuple[i], sub, sizeof sub));
    }
    PUT(">");
  } else {
    PUT("tensor<");
    for (int i = 0; i < t->rank; i++) {
      if (t->dims[i] < 0) PUT("?x");
      else PUT("%lldx", (long long)t->dims[i]);
    }
    PUT("%s>", lm_dtype_name(t->dtype));
  }
#undef PUT
  return buf;
}

void lm_type_tensor(lm_type *t, lm_dtype dtype, int rank, const int64_t *dims) {
  memset(t, 0, sizeof *t);
  t->kind = LM_TYPE_TENSOR;
  t->dtype = (uint8_t)dtype;
  t->rank = (uint8_t)rank;
  for (int i = 0; i < rank; i++) t->dims[i] = dims[i];
}
