/* The canonical IR dump (dump.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/hash.h"
#include "hlo/dump.h"

typedef struct dbuf {
  char *s;
  size_t n, cap;
  bool oom;
  uint32_t *ren;  /* value id -> canonical number + 1 (0 = not yet defined) */
  uint32_t next;
} dbuf;

static void put(dbuf *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(dbuf *d, const char *fmt, ...) {
  if (d->oom) return;
  if (!d->s) {
    d->s = malloc(d->cap = 4096);
    if (!d->s) { d->oom = true; return; }
  }
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(d->s + d->n, d->cap - d->n, fmt, ap);
    va_end(ap);
    if (k < 0) { d->oom = true; return; }
    if ((size_t)k < d->cap - d->n) { d->n += (size_t)k; return; }
    size_t nc = (d->cap + (size_t)k + 1) * 2;
    char *ns = realloc(d->s, nc);
    if (!ns) { d->oom = true; return; }
    d->s = ns;
    d->cap = nc;
  }
}

static void put_type(dbuf *d, const lm_type *t) {
  char buf[1024];
  put(d, "%s", lm_type_str(t, buf, sizeof buf));
}

static int cmp_named(const void *a, const void *b) {
  return strcmp((*(const lm_named_attr *const *)a)->name, (*(const lm_named_attr *const *)b)->name);
}

static void put_attr(dbuf *d, const lm_attr *a);

static void put_dict(dbuf *d, const lm_named_attr *fields, uint32_t n) {
  const lm_named_attr **order = malloc((n ? n : 1) * sizeof *order);
  if (!order) { d->oom = true; return; }
  for (uint32_t i = 0; i < n; i++) order[i] = &fields[i];
  qsort(order, n, sizeof *order, cmp_named);
  put(d, "{");
  for (uint32_t i = 0; i < n; i++) {
    put(d, "%s%s = ", i ? ", " : "", order[i]->name);
    put_attr(d, &order[i]->value);
  }
  put(d, "}");
  free(order);
}

static void put_str(dbuf *d, const char *s, uint32_t n) {
  put(d, "\"");
  for (uint32_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c >= 32 && c < 127 && c != '"' && c != '\\') put(d, "%c", c);
    else put(d, "\\%02X", c);
  }
  put(d, "\"");
}

static void put_attr(dbuf *d, const lm_attr *a) {
  switch ((lm_attr_kind)a->kind) {
    case LM_ATTR_UNIT: put(d, "unit"); break;
    case LM_ATTR_BOOL: put(d, a->i ? "true" : "false"); break;
    case LM_ATTR_INT: put(d, "%lld", (long long)a->i); break;
    case LM_ATTR_FLOAT: put(d, "%.17g", a->f); break;
    case LM_ATTR_STRING: put_str(d, a->s, a->n); break;
    case LM_ATTR_SYMBOL: put(d, "@%s", a->s); break;
    case LM_ATTR_ENUM: put(d, "#%s", a->s); break;
    case LM_ATTR_INTS:
      put(d, "[");
      for (uint32_t i = 0; i < a->n; i++) put(d, "%s%lld", i ? ", " : "", (long long)a->ints[i]);
      put(d, "]");
      break;
    case LM_ATTR_DENSE:
      put(d, "dense<%zu bytes, hash %016llx> : ", a->nbytes, (unsigned long long)lm_hash64(a->data, a->nbytes, LM_HASH_SEED));
      put_type(d, a->type);
      break;
    case LM_ATTR_ARRAY:
      put(d, "[");
      for (uint32_t i = 0; i < a->n; i++) {
        if (i) put(d, ", ");
        put_attr(d, &a->items[i]);
      }
      put(d, "]");
      break;
    case LM_ATTR_DICT: put_dict(d, a->fields, a->n); break;
    case LM_ATTR_STRUCT:
      put(d, "#%s", a->s);
      put_dict(d, a->fields, a->n);
      break;
    case LM_ATTR_TYPE: put_type(d, a->type); break;
    default: put(d, "<?>"); break;
  }
}

static uint32_t def(dbuf *d, uint32_t v) {
  d->ren[v] = ++d->next;
  return d->next - 1;
}

static void put_val(dbuf *d, uint32_t v) {
  if (d->ren[v]) put(d, "%%%u", d->ren[v] - 1);
  else put(d, "%%?%u", v);
}

static void put_block(dbuf *d, const lm_func *fn, const lm_block *b, int indent);

static void put_op(dbuf *d, const lm_func *fn, const lm_op *op, int indent) {
  /* regions first: their values are defined before the op's results in every text form */
  put(d, "%*s", indent, "");
  put(d, "%s(", op->name);
  for (uint32_t i = 0; i < op->nin; i++) {
    if (i) put(d, ", ");
    put_val(d, op->in[i]);
  }
  put(d, ")");
  if (op->nattrs) {
    put(d, " ");
    put_dict(d, op->attrs, op->nattrs);
  }
  put(d, "\n");
  for (uint32_t r = 0; r < op->nregions; r++) {
    put(d, "%*s region %u:\n", indent, "", r);
    for (uint32_t k = 0; k < op->regions[r].nblocks; k++) put_block(d, fn, &op->regions[r].blocks[k], indent + 4);
  }
  if (op->nout) {
    put(d, "%*s  -> ", indent, "");
    for (uint32_t i = 0; i < op->nout; i++) {
      uint32_t c = def(d, op->out[i]);
      put(d, "%s%%%u: ", i ? ", " : "", c);
      put_type(d, &fn->value_types[op->out[i]]);
    }
    put(d, "\n");
  }
}

static void put_block(dbuf *d, const lm_func *fn, const lm_block *b, int indent) {
  put(d, "%*s^(", indent, "");
  for (uint32_t i = 0; i < b->nargs; i++) {
    uint32_t c = def(d, b->args[i]);
    put(d, "%s%%%u: ", i ? ", " : "", c);
    put_type(d, &fn->value_types[b->args[i]]);
  }
  put(d, ")\n");
  for (uint32_t i = 0; i < b->nops; i++) put_op(d, fn, &b->ops[i], indent + 2);
}

char *lm_module_dump(const lm_module *m) {
  dbuf d = {0};
  put(&d, "module @%s ", m->name ? m->name : "");
  put_dict(&d, m->attrs, m->nattrs);
  put(&d, "\n");
  for (uint32_t i = 0; i < m->nops; i++) {
    put(&d, "  %s ", m->ops[i].name);
    put_dict(&d, m->ops[i].attrs, m->ops[i].nattrs);
    put(&d, "\n");
  }
  for (uint32_t f = 0; f < m->nfuncs; f++) {
    const lm_func *fn = &m->funcs[f];
    put(&d, "func @%s %s (", fn->name, fn->is_public ? "public" : "private");
    for (uint32_t i = 0; i < fn->nargs; i++) {
      if (i) put(&d, ", ");
      put_type(&d, &fn->arg_types[i]);
      if (fn->arg_attrs[i].n) {
        put(&d, " ");
        put_attr(&d, &fn->arg_attrs[i]);
      }
    }
    put(&d, ") -> (");
    for (uint32_t i = 0; i < fn->nresults; i++) {
      if (i) put(&d, ", ");
      put_type(&d, &fn->result_types[i]);
      if (fn->result_attrs[i].n) {
        put(&d, " ");
        put_attr(&d, &fn->result_attrs[i]);
      }
    }
    put(&d, ") ");
    put_dict(&d, fn->attrs, fn->nattrs);
    put(&d, "\n");
    free(d.ren);
    d.ren = calloc(fn->nvalues ? fn->nvalues : 1, sizeof *d.ren);
    d.next = 0;
    if (!d.ren) { d.oom = true; break; }
    for (uint32_t k = 0; k < fn->body.nblocks; k++) put_block(&d, fn, &fn->body.blocks[k], 2);
  }
  free(d.ren);
  if (d.oom) {
    free(d.s);
    return NULL;
  }
  if (!d.s) return calloc(1, 1);
  return d.s;
}
