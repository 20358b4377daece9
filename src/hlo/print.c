/* IR -> StableHLO text (print.h). Each attribute kind is written in the spelling the text parser
 * turns back into that kind (see the normal form in ir.h). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/dtype.h"
#include "hlo/print.h"

typedef lm_textbuf pbuf;

static void put(pbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void lm_tb_put(lm_textbuf *b, const char *fmt, ...) {
  if (b->oom) return;
  char small[512];
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (k < 0) { b->oom = true; return; }
  if ((size_t)k < sizeof small) { put(b, "%s", small); return; }
  char *big = malloc((size_t)k + 1);
  if (!big) { b->oom = true; return; }
  va_start(ap, fmt);
  vsnprintf(big, (size_t)k + 1, fmt, ap);
  va_end(ap);
  put(b, "%s", big);
  free(big);
}

static void put(pbuf *b, const char *fmt, ...) {
  if (b->oom) return;
  for (;;) {
    if (b->cap - b->n < 64) {
      size_t nc = b->cap ? b->cap * 2 : 4096;
      char *ns = realloc(b->s, nc);
      if (!ns) { b->oom = true; return; }
      b->s = ns;
      b->cap = nc;
    }
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(b->s + b->n, b->cap - b->n, fmt, ap);
    va_end(ap);
    if (k < 0) { b->oom = true; return; }
    if ((size_t)k < b->cap - b->n) { b->n += (size_t)k; return; }
    size_t nc = (b->n + (size_t)k + 1) * 2;
    char *ns = realloc(b->s, nc);
    if (!ns) { b->oom = true; return; }
    b->s = ns;
    b->cap = nc;
  }
}

static void put_type(pbuf *b, const lm_type *t) {
  char buf[2048];
  put(b, "%s", lm_type_str(t, buf, sizeof buf));
}

static void put_str(pbuf *b, const char *s, uint32_t n) {
  put(b, "\"");
  for (uint32_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c >= 32 && c < 127 && c != '"' && c != '\\') put(b, "%c", c);
    else put(b, "\\%02X", c);
  }
  put(b, "\"");
}

/* A bare identifier may be printed as is; anything else is quoted. */
static void put_name(pbuf *b, const char *s) {
  bool bare = (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || *s == '_';
  for (const char *c = s; *c && bare; c++)
    bare = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '_' || *c == '.';
  if (bare) put(b, "%s", s);
  else put_str(b, s, (uint32_t)strlen(s));
}

/* The kind word of an enum attribute, from the attribute's name. */
static const char *enum_kind(const char *attr_name) {
  static const char *const map[][2] = {
      {"comparison_direction", "comparison_direction"}, {"compare_type", "comparison_type"},
      {"precision_config", "precision"},               {"fft_type", "fft_type"},
      {"rng_algorithm", "rng_algorithm"},              {"rng_distribution", "rng_distribution"},
      {"transpose_a", "transpose"},
  };
  for (size_t i = 0; attr_name && i < sizeof map / sizeof map[0]; i++)
    if (!strcmp(map[i][0], attr_name)) return map[i][1];
  return NULL;
}

static void put_attr(pbuf *b, const lm_attr *a, const char *name);

static void put_ints(pbuf *b, const lm_attr *a, bool as_list) {
  put(b, as_list ? "[" : "array<i64%s", as_list ? "" : (a->n ? ": " : ""));
  for (uint32_t i = 0; i < a->n; i++) put(b, "%s%lld", i ? ", " : "", (long long)a->ints[i]);
  put(b, as_list ? "]" : ">");
}

/* The type written after a scalar attribute: its element type ("i32", not "tensor<i32>"). */
static void scalar_type(const lm_type *t, char *ty, size_t cap, const char *dflt) {
  if (t && t->kind == LM_TYPE_TENSOR && t->rank == 0) snprintf(ty, cap, "%s", lm_dtype_name((lm_dtype)t->dtype));
  else if (t) lm_type_str(t, ty, cap);
  else snprintf(ty, cap, "%s", dflt);
}

static void put_float(pbuf *b, double f, const lm_type *t) {
  char ty[64];
  scalar_type(t, ty, sizeof ty, "f64");
  if (isfinite(f)) {
    char num[64];
    snprintf(num, sizeof num, "%.17g", f);
    put(b, "%s%s : %s", num, strpbrk(num, ".eE") ? "" : ".0", ty); /* a float literal needs a '.' or exponent */
  } else {
    uint64_t bits;
    memcpy(&bits, &f, 8);
    put(b, "0x%016llX : f64", (unsigned long long)bits);
  }
}

/* bare_ints: integers without their type (`#stablehlo.conv<raw ...>` takes no `: i64`). */
static void put_fields(pbuf *b, const lm_attr *a, bool bare_ints) {
  for (uint32_t i = 0; i < a->n; i++) {
    const lm_named_attr *f = &a->fields[i];
    put(b, "%s%s = ", i ? ", " : "", f->name);
    if (f->value.kind == LM_ATTR_INTS) put_ints(b, &f->value, true);
    else if (bare_ints && f->value.kind == LM_ATTR_INT) put(b, "%lld", (long long)f->value.i);
    else put_attr(b, &f->value, f->name);
  }
}

static void put_axis_set(pbuf *b, const lm_attr *a) {
  put(b, "{");
  for (uint32_t i = 0; a->kind == LM_ATTR_ARRAY && i < a->n; i++) {
    const lm_attr *ax = &a->items[i];
    if (i) put(b, ", ");
    const char *sub = ax->s ? strstr(ax->s, ":(") : NULL; /* "x:(1)2": a sub-axis */
    if (sub) {
      put_str(b, ax->s, (uint32_t)(sub - ax->s));
      put(b, "%s", sub);
    } else if (ax->s) {
      put_str(b, ax->s, ax->n);
    }
  }
  put(b, "}");
}

static void put_mesh_body(pbuf *b, const lm_attr *m) {
  const lm_attr *names = lm_attrs_get(m->fields, m->n, "axis_names"), *sizes = lm_attrs_get(m->fields, m->n, "axis_sizes");
  const lm_attr *ids = lm_attrs_get(m->fields, m->n, "device_ids");
  put(b, "<[");
  for (uint32_t i = 0; names && sizes && i < names->n && i < sizes->n; i++) {
    if (i) put(b, ", ");
    put_str(b, names->items[i].s, names->items[i].n);
    put(b, "=%lld", (long long)sizes->ints[i]);
  }
  put(b, "]");
  if (ids) {
    put(b, ", device_ids=");
    put_ints(b, ids, true);
  }
  put(b, ">");
}

static void put_sharding_body(pbuf *b, const lm_attr *s) {
  const lm_attr *mesh = lm_attrs_get(s->fields, s->n, "mesh"), *dims = lm_attrs_get(s->fields, s->n, "dims");
  put(b, "<");
  if (mesh && mesh->kind == LM_ATTR_SYMBOL) put(b, "@%s", mesh->s);
  else if (mesh && mesh->kind == LM_ATTR_STRUCT) {
    put(b, "mesh");
    put_mesh_body(b, mesh);
  }
  put(b, ", [");
  for (uint32_t i = 0; dims && i < dims->n; i++) {
    if (i) put(b, ", ");
    put_axis_set(b, &dims->items[i]);
  }
  put(b, "]");
  for (uint32_t i = 0; i < s->n; i++)
    if (strcmp(s->fields[i].name, "mesh") && strcmp(s->fields[i].name, "dims")) {
      put(b, ", %s=", s->fields[i].name);
      put_axis_set(b, &s->fields[i].value);
    }
  put(b, ">");
}

static void put_struct(pbuf *b, const lm_attr *a) {
  const char *s = a->s ? a->s : "";
  if (!strcmp(s, "sdy.sharding")) {
    put(b, "#sdy.sharding");
    put_sharding_body(b, a);
    return;
  }
  if (!strcmp(s, "sdy.mesh")) {
    put(b, "#sdy.mesh");
    put_mesh_body(b, a);
    return;
  }
  if (a->n == 1 && !strcmp(a->fields[0].name, "raw") && a->fields[0].value.kind == LM_ATTR_STRING) {
    put(b, "#%s<%.*s>", s, (int)a->fields[0].value.n, a->fields[0].value.s);
    return;
  }
  if (a->n == 0) {
    put(b, "#%s", s);
    return;
  }
  bool conv = !strcmp(s, "stablehlo.conv");
  put(b, "#%s<%s", s, conv ? "raw " : "");
  /* StableHLO's own attributes take bare integers (`index_vector_dim = 1`); its parser refuses
   * `1 : i64` there, which a program may have been written with (Loom's partitioner's output) */
  put_fields(b, a, !strncmp(s, "stablehlo.", 10));
  put(b, ">");
}

static void put_dense(pbuf *b, const lm_attr *a) {
  if (a->resource && !a->data) { /* its bytes are elsewhere: the reference as it came */
    put(b, "dense_resource<%s> : ", a->resource);
    put_type(b, a->type);
    return;
  }
  put(b, "dense<\"0x");
  const unsigned char *d = a->data;
  if (!b->oom && b->cap - b->n < 2 * a->nbytes + 64) { /* one allocation for large constants */
    size_t nc = b->n + 2 * a->nbytes + 4096;
    char *ns = realloc(b->s, nc);
    if (!ns) { b->oom = true; return; }
    b->s = ns;
    b->cap = nc;
  }
  static const char hex[] = "0123456789ABCDEF";
  for (size_t i = 0; i < a->nbytes && !b->oom; i++) {
    b->s[b->n++] = hex[d[i] >> 4];
    b->s[b->n++] = hex[d[i] & 15];
  }
  if (!b->oom) b->s[b->n] = 0;
  put(b, "\"> : ");
  put_type(b, a->type);
}

static void put_attr(pbuf *b, const lm_attr *a, const char *name) {
  switch ((lm_attr_kind)a->kind) {
    case LM_ATTR_UNIT: put(b, "unit"); break;
    case LM_ATTR_BOOL: put(b, a->i ? "true" : "false"); break;
    case LM_ATTR_INT: {
      char ty[64];
      scalar_type(a->type, ty, sizeof ty, "i64");
      put(b, "%lld : %s", (long long)a->i, ty);
      break;
    }
    case LM_ATTR_FLOAT: put_float(b, a->f, a->type); break;
    case LM_ATTR_STRING: put_str(b, a->s, a->n); break;
    case LM_ATTR_SYMBOL: {
      const char *s = a->s, *sep;
      while ((sep = strstr(s, "::"))) { /* nested reference a::b -> @a::@b */
        char part[512];
        snprintf(part, sizeof part, "%.*s", (int)(sep - s), s);
        put(b, "@");
        put_name(b, part);
        put(b, "::");
        s = sep + 2;
      }
      put(b, "@");
      put_name(b, s);
      break;
    }
    case LM_ATTR_ENUM: {
      const char *kind = enum_kind(name);
      if (kind) put(b, "#stablehlo<%s %s>", kind, a->s);
      else if (name && !strcmp(name, "mode")) put(b, "#stablehlo.result_accuracy_mode<%s>", a->s);
      else put(b, "%s", a->s);
      break;
    }
    case LM_ATTR_INTS:
      if (name && !strcmp(name, "window_reversal")) { /* a dense i1 array (convolution) */
        put(b, "array<i1%s", a->n ? ": " : "");
        for (uint32_t i = 0; i < a->n; i++) put(b, "%s%s", i ? ", " : "", a->ints[i] ? "true" : "false");
        put(b, ">");
      } else {
        put_ints(b, a, false);
      }
      break;
    case LM_ATTR_DENSE: put_dense(b, a); break;
    case LM_ATTR_ARRAY:
      if (a->s && !strcmp(a->s, "->") && a->n == 2) { /* a function type */
        put(b, "(");
        for (uint32_t i = 0; i < a->items[0].n; i++) {
          if (i) put(b, ", ");
          put_type(b, a->items[0].items[i].type);
        }
        put(b, ") -> (");
        for (uint32_t i = 0; i < a->items[1].n; i++) {
          if (i) put(b, ", ");
          put_type(b, a->items[1].items[i].type);
        }
        put(b, ")");
        break;
      }
      put(b, "[");
      for (uint32_t i = 0; i < a->n; i++) {
        if (i) put(b, ", ");
        put_attr(b, &a->items[i], name);
      }
      put(b, "]");
      break;
    case LM_ATTR_DICT:
      put(b, "{");
      for (uint32_t i = 0; i < a->n; i++) {
        if (i) put(b, ", ");
        put_name(b, a->fields[i].name);
        if (a->fields[i].value.kind != LM_ATTR_UNIT) {
          put(b, " = ");
          put_attr(b, &a->fields[i].value, a->fields[i].name);
        }
      }
      put(b, "}");
      break;
    case LM_ATTR_STRUCT: put_struct(b, a); break;
    case LM_ATTR_TYPE:
      if (a->type) put_type(b, a->type);
      else put(b, "none");
      break;
    default: put(b, "unit"); break;
  }
}

static void put_dict(pbuf *b, const lm_named_attr *attrs, uint32_t n) {
  lm_attr d = {.kind = LM_ATTR_DICT, .n = n, .fields = (lm_named_attr *)attrs};
  put_attr(b, &d, NULL);
}

static void put_val(pbuf *b, uint32_t v) { put(b, "%%v%u", v); }

static void put_types(pbuf *b, const lm_func *fn, const uint32_t *vals, uint32_t n) {
  put(b, "(");
  for (uint32_t i = 0; i < n; i++) {
    if (i) put(b, ", ");
    put_type(b, &fn->value_types[vals[i]]);
  }
  put(b, ")");
}

static void put_block(pbuf *b, const lm_func *fn, const lm_block *blk, int indent, bool header);
static void put_func(pbuf *b, const lm_func *fn);

/* An op's regions and attribute dictionary, between its operands and its type. */
static void put_regions_attrs(pbuf *b, const lm_func *fn, const lm_op *op, int indent) {
  if (op->nregions) {
    put(b, " (");
    for (uint32_t r = 0; r < op->nregions; r++) {
      put(b, "%s{\n", r ? ", " : "");
      for (uint32_t k = 0; k < op->regions[r].nblocks; k++) put_block(b, fn, &op->regions[r].blocks[k], indent + 2, true);
      put(b, "%*s}", indent, "");
    }
    put(b, ")");
  }
  if (op->nattrs) {
    put(b, " ");
    put_dict(b, op->attrs, op->nattrs);
  }
}

static void put_op(pbuf *b, const lm_func *fn, const lm_op *op, int indent) {
  put(b, "%*s", indent, "");
  if (op->nout) {
    for (uint32_t i = 0; i < op->nout; i++) {
      if (i) put(b, ", ");
      put_val(b, op->out[i]);
    }
    put(b, " = ");
  }
  put_str(b, op->name, (uint32_t)strlen(op->name));
  put(b, "(");
  for (uint32_t i = 0; i < op->nin; i++) {
    if (i) put(b, ", ");
    put_val(b, op->in[i]);
  }
  put(b, ")");
  put_regions_attrs(b, fn, op, indent);
  put(b, " : ");
  put_types(b, fn, op->in, op->nin);
  put(b, " -> ");
  put_types(b, fn, op->out, op->nout);
  put(b, "\n");
}

void lm_tb_put_type(lm_textbuf *b, const lm_type *t) { put_type(b, t); }
void lm_tb_put_attr(lm_textbuf *b, const lm_attr *a, const char *name) { put_attr(b, a, name); }

void lm_tb_put_op_as(lm_textbuf *b, const lm_func *fn, const lm_op *op, const char *prefix, const uint32_t *ins,
                     const lm_type *in_types, const uint32_t *outs, const lm_type *out_types, int indent) {
  put(b, "%*s", indent, "");
  for (uint32_t i = 0; i < op->nout; i++) put(b, "%s%%%s%u", i ? ", " : "", prefix, outs[i]);
  if (op->nout) put(b, " = ");
  put_str(b, op->name, (uint32_t)strlen(op->name));
  put(b, "(");
  for (uint32_t i = 0; i < op->nin; i++) put(b, "%s%%%s%u", i ? ", " : "", prefix, ins[i]);
  put(b, ")");
  put_regions_attrs(b, fn, op, indent);
  put(b, " : (");
  for (uint32_t i = 0; i < op->nin; i++) {
    if (i) put(b, ", ");
    put_type(b, &in_types[i]);
  }
  put(b, ") -> (");
  for (uint32_t i = 0; i < op->nout; i++) {
    if (i) put(b, ", ");
    put_type(b, &out_types[i]);
  }
  put(b, ")\n");
}

void lm_tb_put_func(lm_textbuf *b, const lm_func *fn) { put_func(b, fn); }

static void put_block(pbuf *b, const lm_func *fn, const lm_block *blk, int indent, bool header) {
  if (header) {
    put(b, "%*s^bb0(", indent - 2, "");
    for (uint32_t i = 0; i < blk->nargs; i++) {
      if (i) put(b, ", ");
      put_val(b, blk->args[i]);
      put(b, ": ");
      put_type(b, &fn->value_types[blk->args[i]]);
    }
    put(b, "):\n");
  }
  for (uint32_t i = 0; i < blk->nops; i++) put_op(b, fn, &blk->ops[i], indent);
}

static void put_func(pbuf *b, const lm_func *fn) {
  const lm_block *body = fn->body.nblocks ? &fn->body.blocks[0] : NULL;
  put(b, "  func.func %s @", fn->is_public ? "public" : "private");
  put_name(b, fn->name);
  put(b, "(");
  for (uint32_t i = 0; i < fn->nargs; i++) {
    if (i) put(b, ", ");
    if (body && i < body->nargs) put_val(b, body->args[i]);
    else put(b, "%%arg%u", i);
    put(b, ": ");
    put_type(b, &fn->arg_types[i]);
    if (fn->arg_attrs[i].n) {
      put(b, " ");
      put_attr(b, &fn->arg_attrs[i], NULL);
    }
  }
  put(b, ") -> (");
  for (uint32_t i = 0; i < fn->nresults; i++) {
    if (i) put(b, ", ");
    put_type(b, &fn->result_types[i]);
    if (fn->result_attrs[i].n) {
      put(b, " ");
      put_attr(b, &fn->result_attrs[i], NULL);
    }
  }
  put(b, ")");
  if (fn->nattrs) {
    put(b, " attributes ");
    put_dict(b, fn->attrs, fn->nattrs);
  }
  put(b, " {\n");
  if (body) put_block(b, fn, body, 4, false);
  put(b, "  }\n");
}

/* "module @name attributes {...} {" and the module-level ops (sdy.mesh). */
static void put_module_head(pbuf *b, const lm_module *m) {
  put(b, "module");
  if (m->name) {
    put(b, " @");
    put_name(b, m->name);
  }
  if (m->nattrs) {
    put(b, " attributes ");
    put_dict(b, m->attrs, m->nattrs);
  }
  put(b, " {\n");
  for (uint32_t i = 0; i < m->nops; i++) {
    const lm_op *op = &m->ops[i];
    /* module-level ops hold their inherent attributes as properties: sym_name and mesh */
    put(b, "  ");
    put_str(b, op->name, (uint32_t)strlen(op->name));
    put(b, "() <{");
    bool first = true;
    for (uint32_t k = 0; k < op->nattrs; k++) {
      const lm_named_attr *a = &op->attrs[k];
      if (strcmp(a->name, "sym_name") && strcmp(a->name, "mesh")) continue;
      put(b, "%s%s = ", first ? "" : ", ", a->name);
      first = false;
      if (a->value.kind == LM_ATTR_SYMBOL) put_str(b, a->value.s, (uint32_t)strlen(a->value.s));
      else put_attr(b, &a->value, a->name);
    }
    put(b, "}>");
    bool any = false;
    for (uint32_t k = 0; k < op->nattrs; k++) {
      const lm_named_attr *a = &op->attrs[k];
      if (!strcmp(a->name, "sym_name") || !strcmp(a->name, "mesh")) continue;
      put(b, "%s", any ? ", " : " {");
      any = true;
      put_name(b, a->name);
      put(b, " = ");
      put_attr(b, &a->value, a->name);
    }
    put(b, "%s : () -> ()\n", any ? "}" : "");
  }
}

void lm_tb_put_module_head(lm_textbuf *b, const lm_module *m) { put_module_head(b, m); }
void lm_tb_put_op(lm_textbuf *b, const lm_func *fn, const lm_op *op, int indent) { put_op(b, fn, op, indent); }

char *lm_module_print(const lm_module *m) {
  pbuf b = {0};
  put_module_head(&b, m);
  for (uint32_t f = 0; f < m->nfuncs; f++) put_func(&b, &m->funcs[f]);
  put(&b, "}\n");
  if (b.oom) {
    free(b.s);
    return NULL;
  }
  return b.s;
}
