/* Scalar evaluation of small body regions; see scalar_eval.h. Semantics of each op are the
 * StableHLO spec's ('compare', 'select', 'and', ...), the arithmetic ones through the same
 * lm_binop_fn kernels the fast paths use. */
#include <stdlib.h>
#include <string.h>
#include "common/half.h"
#include "exec/ops_util.h"
#include "exec/scalar_eval.h"

enum { DIR_EQ, DIR_NE, DIR_LT, DIR_LE, DIR_GT, DIR_GE };
enum { CT_FLOAT, CT_TOTAL, CT_SIGNED, CT_UNSIGNED };

typedef enum { I_CONST, I_COMPARE, I_SELECT, I_BINOP, I_SUB, I_NOT, I_NEG, I_REAL, I_IMAG } ikind;

/* Ordering of two elements: -1 <, 0 ==, 1 >, 2 unordered. */
typedef int (*ord_fn)(const void *a, const void *b);

typedef struct sinstr {
  uint8_t kind, dir, ctype, dtype; /* dtype: of the operands (compare) or of the result */
  uint16_t dst, a, b, c;
  lm_binop_fn f;
  ord_fn ord;                      /* I_COMPARE on common types; NULL: the general path */
  unsigned char k[16];             /* I_CONST */
} sinstr;

struct lm_sprog {
  uint32_t nargs, nres, nslots, ninstr;
  uint16_t *res;                   /* [nres] slot of each result */
  uint8_t *res_size;               /* [nres] bytes */
  uint8_t *arg_size;               /* [nargs] bytes */
  sinstr *code;
};

static int parse_dir(const char *s) {
  static const char *const n[] = {"EQ", "NE", "LT", "LE", "GT", "GE"};
  for (int i = 0; s && i < 6; i++)
    if (!strcmp(s, n[i])) return i;
  return -1;
}

static int parse_ctype(const char *s, lm_dtype dt) {
  if (!s || !strcmp(s, "NOTYPE")) {
    if (lm_dtype_is_float(dt) || lm_dtype_is_complex(dt)) return CT_FLOAT;
    return lm_dtype_is_sint(dt) ? CT_SIGNED : CT_UNSIGNED;
  }
  if (!strcmp(s, "FLOAT")) return CT_FLOAT;
  if (!strcmp(s, "TOTALORDER")) return CT_TOTAL;
  if (!strcmp(s, "SIGNED")) return CT_SIGNED;
  if (!strcmp(s, "UNSIGNED")) return CT_UNSIGNED;
  return -1;
}

static bool test_dir(int dir, int c) { /* c: -1 <, 0 ==, 1 >, 2 unordered */
  switch (dir) {
    case DIR_EQ: return c == 0;
    case DIR_NE: return c != 0;
    case DIR_LT: return c == -1;
    case DIR_LE: return c == -1 || c == 0;
    case DIR_GT: return c == 1;
    default: return c == 1 || c == 0;
  }
}

/* Bits of a float element as a signed integer ordered like IEEE totalOrder. */
static int64_t total_key(lm_dtype dt, const void *p) {
  switch (dt) {
    case LOOM_DTYPE_F16: case LOOM_DTYPE_BF16: {
      int16_t v;
      memcpy(&v, p, 2);
      return v < 0 ? (int64_t)(v ^ INT16_MAX) : v;
    }
    case LOOM_DTYPE_F32: {
      int32_t v;
      memcpy(&v, p, 4);
      return v < 0 ? (int64_t)(v ^ INT32_MAX) : v;
    }
    default: {
      int64_t v;
      memcpy(&v, p, 8);
      return v < 0 ? (v ^ INT64_MAX) : v;
    }
  }
}

static int cmp_elems(int dir, int ct, lm_dtype dt, const void *a, const void *b) {
  int c;
  if (lm_dtype_is_complex(dt)) {
    if (dir != DIR_EQ && dir != DIR_NE) return -1;
    size_t h = lm_dtype_size(dt) / 2;
    lm_dtype part = dt == LOOM_DTYPE_C64 ? LOOM_DTYPE_F32 : LOOM_DTYPE_F64;
    double ar = lm_load_f64(a, part), ai = lm_load_f64((const char *)a + h, part);
    double br = lm_load_f64(b, part), bi = lm_load_f64((const char *)b + h, part);
    bool eq = ar == br && ai == bi;
    return dir == DIR_EQ ? eq : !eq;
  }
  if (ct == CT_TOTAL && !lm_dtype_is_float(dt)) ct = lm_dtype_is_sint(dt) ? CT_SIGNED : CT_UNSIGNED;
  if (ct == CT_TOTAL) {
    int64_t x = total_key(dt, a), y = total_key(dt, b);
    c = x < y ? -1 : x > y ? 1 : 0;
  } else if (ct == CT_FLOAT || lm_dtype_is_float(dt)) {
    double x = lm_load_f64(a, dt), y = lm_load_f64(b, dt);
    c = (x != x || y != y) ? 2 : x < y ? -1 : x > y ? 1 : 0;
  } else {
    size_t es = lm_dtype_size(dt);
    uint64_t x = 0, y = 0;
    memcpy(&x, a, es);
    memcpy(&y, b, es);
    if (ct == CT_SIGNED && es < 8) { /* sign-extend from the element width */
      int sh = 64 - 8 * (int)es;
      x = (uint64_t)((int64_t)(x << sh) >> sh);
      y = (uint64_t)((int64_t)(y << sh) >> sh);
    }
    if (ct == CT_SIGNED) c = (int64_t)x < (int64_t)y ? -1 : (int64_t)x > (int64_t)y ? 1 : 0;
    else c = x < y ? -1 : x > y ? 1 : 0;
  }
  return test_dir(dir, c);
}

#define ORD(NAME, T, KEY)                                              \
  static int NAME(const void *pa, const void *pb) {                   \
    T x, y;                                                            \
    memcpy(&x, pa, sizeof x);                                          \
    memcpy(&y, pb, sizeof y);                                          \
    KEY;                                                               \
    return x < y ? -1 : x > y ? 1 : 0;                                 \
  }
ORD(ord_s32, int32_t, )
ORD(ord_s64, int64_t, )
ORD(ord_u32, uint32_t, )
ORD(ord_u64, uint64_t, )
ORD(ord_u8, uint8_t, )
ORD(ord_f32_total, int32_t, x = x < 0 ? x ^ INT32_MAX : x; y = y < 0 ? y ^ INT32_MAX : y)
ORD(ord_f64_total, int64_t, x = x < 0 ? x ^ INT64_MAX : x; y = y < 0 ? y ^ INT64_MAX : y)
static int ord_f32(const void *pa, const void *pb) {
  float x, y;
  memcpy(&x, pa, 4);
  memcpy(&y, pb, 4);
  return x < y ? -1 : x > y ? 1 : x == y ? 0 : 2;
}
static int ord_f64(const void *pa, const void *pb) {
  double x, y;
  memcpy(&x, pa, 8);
  memcpy(&y, pb, 8);
  return x < y ? -1 : x > y ? 1 : x == y ? 0 : 2;
}

/* A specialized ordering for (dt, ct), or NULL. */
static ord_fn pick_ord(lm_dtype dt, int ct);

int lm_order_elems(int ct, lm_dtype dt, const void *a, const void *b) {
  ord_fn f = pick_ord(dt, ct);
  if (f) return f(a, b);
  /* general: derive the ordering from two comparisons */
  if (cmp_elems(DIR_EQ, ct, dt, a, b) == 1) return 0;
  if (cmp_elems(DIR_LT, ct, dt, a, b) == 1) return -1;
  if (cmp_elems(DIR_GT, ct, dt, a, b) == 1) return 1;
  return 2;
}

bool lm_compare_test(int dir, int ordering) { return test_dir(dir, ordering); }

lm_order_fn lm_order_get(int ct, lm_dtype dt) { return pick_ord(dt, ct); }

int lm_compare_parse(const char *dir, const char *type, lm_dtype dt, int *d, int *ct) {
  *d = parse_dir(dir);
  *ct = parse_ctype(type, dt);
  return *d < 0 || *ct < 0 ? -1 : 0;
}

static ord_fn pick_ord(lm_dtype dt, int ct) {
  if (ct == CT_TOTAL && !lm_dtype_is_float(dt)) ct = lm_dtype_is_sint(dt) ? CT_SIGNED : CT_UNSIGNED;
  switch (dt) {
    case LOOM_DTYPE_F32: return ct == CT_TOTAL ? ord_f32_total : ct == CT_FLOAT ? ord_f32 : NULL;
    case LOOM_DTYPE_F64: return ct == CT_TOTAL ? ord_f64_total : ct == CT_FLOAT ? ord_f64 : NULL;
    case LOOM_DTYPE_S32: case LOOM_DTYPE_U32: return ct == CT_SIGNED ? ord_s32 : ct == CT_UNSIGNED ? ord_u32 : NULL;
    case LOOM_DTYPE_S64: case LOOM_DTYPE_U64: return ct == CT_SIGNED ? ord_s64 : ct == CT_UNSIGNED ? ord_u64 : NULL;
    case LOOM_DTYPE_PRED: case LOOM_DTYPE_U8: return ct == CT_UNSIGNED ? ord_u8 : NULL;
    default: return NULL;
  }
}

int lm_compare_elems(const char *dir, const char *type, lm_dtype dt, const void *a, const void *b) {
  int d = parse_dir(dir), ct = parse_ctype(type, dt);
  if (d < 0 || ct < 0) return -1;
  return cmp_elems(d, ct, dt, a, b);
}

void lm_sprog_free(lm_sprog *p) {
  if (!p) return;
  free(p->res);
  free(p->res_size);
  free(p->arg_size);
  free(p->code);
  free(p);
}

static bool scalar_type(const lm_type *t) {
  return t->kind == LM_TYPE_TENSOR && t->rank == 0 && lm_dtype_valid(t->dtype);
}

/* Compiles the ops of block b that the values res_vals[nres] depend on (all ops when need is
 * NULL), returning those values. */
static lm_sprog *compile(const lm_block *b, const lm_func *fn, uint32_t nres, const uint32_t *res_vals, const bool *need);

lm_sprog *lm_sprog_compile(const lm_op *op, uint32_t r, const lm_func *fn, uint32_t nres) {
  if (lm_ops_generic_only || r >= op->nregions || op->regions[r].nblocks != 1) return NULL;
  const lm_block *b = &op->regions[r].blocks[0];
  if (b->nops == 0 || b->nops > 4096) return NULL;
  const lm_op *ret = &b->ops[b->nops - 1];
  if (ret->code != LM_OP_RETURN || ret->nin != nres) return NULL;
  return compile(b, fn, nres, ret->in, NULL);
}

lm_sprog *lm_sprog_compile_func(const lm_func *f, uint32_t nres) {
  if (lm_ops_generic_only || f->body.nblocks != 1) return NULL;
  const lm_block *b = &f->body.blocks[0];
  if (b->nops == 0 || b->nops > 4096) return NULL;
  const lm_op *ret = &b->ops[b->nops - 1];
  if ((ret->code != LM_OP_RETURN && ret->code != LM_OP_FUNC_RETURN) || ret->nin != nres) return NULL;
  return compile(b, f, nres, ret->in, NULL);
}

lm_sprog *lm_sprog_compile_value(const lm_op *op, uint32_t r, const lm_func *fn, uint32_t value) {
  if (lm_ops_generic_only || r >= op->nregions || op->regions[r].nblocks != 1) return NULL;
  const lm_block *b = &op->regions[r].blocks[0];
  if (b->nops == 0 || b->nops > 4096 || value >= fn->nvalues) return NULL;
  bool *need = calloc(b->nops, sizeof *need);
  uint32_t *def = malloc(fn->nvalues * sizeof *def); /* value -> defining op index + 1 */
  uint32_t *stack = malloc((b->nops + 1) * sizeof *stack);
  lm_sprog *p = NULL;
  if (!need || !def || !stack) goto out;
  for (uint32_t v = 0; v < fn->nvalues; v++) def[v] = 0;
  for (uint32_t j = 0; j + 1 < b->nops; j++)
    for (uint32_t q = 0; q < b->ops[j].nout; q++)
      if (b->ops[j].out[q] < fn->nvalues) def[b->ops[j].out[q]] = j + 1;
  uint32_t sp = 0;
  if (def[value]) stack[sp++] = def[value] - 1;
  while (sp) {
    uint32_t j = stack[--sp];
    if (need[j]) continue;
    need[j] = true;
    for (uint32_t q = 0; q < b->ops[j].nin; q++) {
      uint32_t v = b->ops[j].in[q];
      if (v < fn->nvalues && def[v] && !need[def[v] - 1]) stack[sp++] = def[v] - 1;
    }
  }
  p = compile(b, fn, 1, &value, need);
out:
  free(need);
  free(def);
  free(stack);
  return p;
}

static lm_sprog *compile(const lm_block *b, const lm_func *fn, uint32_t nres, const uint32_t *res_vals, const bool *need) {
  lm_sprog *p = calloc(1, sizeof *p);
  /* value id -> slot (+1; 0 = not defined in this region) */
  uint16_t *slot = calloc(fn->nvalues ? fn->nvalues : 1, sizeof *slot);
  if (!p || !slot) goto fail;
  p->nargs = b->nargs;
  p->nres = nres;
  p->code = calloc(b->nops, sizeof *p->code);
  p->res = calloc(p->nres ? p->nres : 1, sizeof *p->res);
  p->res_size = calloc(p->nres ? p->nres : 1, 1);
  p->arg_size = calloc(p->nargs ? p->nargs : 1, 1);
  if (!p->code || !p->res || !p->res_size || !p->arg_size) goto fail;
  uint32_t ns = 0;
  for (uint32_t i = 0; i < b->nargs; i++) {
    const lm_type *t = &fn->value_types[b->args[i]];
    if (!scalar_type(t)) goto fail;
    p->arg_size[i] = (uint8_t)lm_dtype_size(t->dtype);
    slot[b->args[i]] = (uint16_t)(++ns);
  }
  for (uint32_t j = 0; j + 1 < b->nops; j++) {
    const lm_op *x = &b->ops[j];
    if (need && !need[j]) continue;
    if (x->nregions || x->nout != 1 || ns >= 60000) goto fail;
    const lm_type *rt = &fn->value_types[x->out[0]];
    if (!scalar_type(rt)) goto fail;
    sinstr *in = &p->code[p->ninstr];
    memset(in, 0, sizeof *in);
    uint16_t s[3] = {0, 0, 0};
    for (uint32_t q = 0; q < x->nin && q < 3; q++) {
      if (x->in[q] >= fn->nvalues || !slot[x->in[q]] || !scalar_type(&fn->value_types[x->in[q]])) goto fail;
      s[q] = (uint16_t)(slot[x->in[q]] - 1);
    }
    in->a = s[0];
    in->b = s[1];
    in->c = s[2];
    in->dtype = rt->dtype;
    lm_dtype d0 = x->nin ? (lm_dtype)fn->value_types[x->in[0]].dtype : rt->dtype;
    switch (x->code) {
      case LM_OP_CONSTANT: {
        const lm_attr *v = lm_op_attr(x, "value");
        if (x->nin != 0 || !v || v->kind != LM_ATTR_DENSE || !v->type || v->type->dtype != rt->dtype ||
            v->nbytes != lm_dtype_size(rt->dtype))
          goto fail;
        in->kind = I_CONST;
        memcpy(in->k, v->data, v->nbytes);
        break;
      }
      case LM_OP_COMPARE: {
        if (x->nin != 2 || rt->dtype != LOOM_DTYPE_PRED || fn->value_types[x->in[1]].dtype != d0) goto fail;
        const lm_attr *da = lm_op_attr(x, "comparison_direction"), *ca = lm_op_attr(x, "compare_type");
        int dir = parse_dir(da ? da->s : NULL), ct = parse_ctype(ca ? ca->s : NULL, d0);
        if (dir < 0 || ct < 0) goto fail;
        if (lm_dtype_is_complex(d0) && dir != DIR_EQ && dir != DIR_NE) goto fail;
        in->kind = I_COMPARE;
        in->dir = (uint8_t)dir;
        in->ctype = (uint8_t)ct;
        in->dtype = d0;
        in->ord = pick_ord(d0, ct);
        break;
      }
      case LM_OP_SELECT:
        if (x->nin != 3 || d0 != LOOM_DTYPE_PRED || fn->value_types[x->in[1]].dtype != rt->dtype ||
            fn->value_types[x->in[2]].dtype != rt->dtype)
          goto fail;
        in->kind = I_SELECT;
        break;
      case LM_OP_ADD: case LM_OP_MULTIPLY: case LM_OP_MAXIMUM: case LM_OP_MINIMUM:
      case LM_OP_AND: case LM_OP_OR: case LM_OP_XOR:
        if (x->nin != 2 || d0 != rt->dtype || fn->value_types[x->in[1]].dtype != rt->dtype) goto fail;
        if ((x->code == LM_OP_AND || x->code == LM_OP_OR || x->code == LM_OP_XOR) &&
            !(lm_dtype_is_int(rt->dtype) || rt->dtype == LOOM_DTYPE_PRED))
          goto fail;
        in->f = lm_binop_lookup((lm_opcode)x->code, rt->dtype);
        if (!in->f) goto fail;
        in->kind = I_BINOP;
        break;
      case LM_OP_SUBTRACT:
        if (x->nin != 2 || d0 != rt->dtype || fn->value_types[x->in[1]].dtype != rt->dtype) goto fail;
        if (!lm_dtype_is_int(rt->dtype) && !lm_dtype_is_float(rt->dtype)) goto fail;
        in->kind = I_SUB;
        break;
      case LM_OP_NEGATE:
        if (x->nin != 1 || d0 != rt->dtype || (!lm_dtype_is_int(rt->dtype) && !lm_dtype_is_float(rt->dtype))) goto fail;
        in->kind = I_NEG;
        break;
      case LM_OP_NOT:
        if (x->nin != 1 || d0 != rt->dtype || !(lm_dtype_is_int(rt->dtype) || rt->dtype == LOOM_DTYPE_PRED)) goto fail;
        in->kind = I_NOT;
        break;
      case LM_OP_REAL: case LM_OP_IMAG:
        if (x->nin != 1 || !lm_dtype_is_complex(d0) ||
            rt->dtype != (d0 == LOOM_DTYPE_C64 ? LOOM_DTYPE_F32 : LOOM_DTYPE_F64))
          goto fail;
        in->kind = x->code == LM_OP_REAL ? I_REAL : I_IMAG;
        break;
      default:
        goto fail;
    }
    in->dst = (uint16_t)ns;
    slot[x->out[0]] = (uint16_t)(++ns);
    p->ninstr++;
  }
  for (uint32_t i = 0; i < nres; i++) {
    uint32_t v = res_vals[i];
    if (v >= fn->nvalues || !slot[v] || !scalar_type(&fn->value_types[v])) goto fail;
    p->res[i] = (uint16_t)(slot[v] - 1);
    p->res_size[i] = (uint8_t)lm_dtype_size(fn->value_types[v].dtype);
  }
  p->nslots = ns;
  free(slot);
  return p;
fail:
  free(slot);
  lm_sprog_free(p);
  return NULL;
}

typedef struct { unsigned char b[16]; } sslot;

static void run_sub(lm_dtype dt, void *d, const void *a, const void *b) {
  switch (dt) {
    case LOOM_DTYPE_F16: {
      uint16_t x, y, r;
      memcpy(&x, a, 2); memcpy(&y, b, 2);
      r = lm_f32_to_f16(lm_f16_to_f32(x) - lm_f16_to_f32(y));
      memcpy(d, &r, 2);
      return;
    }
    case LOOM_DTYPE_BF16: {
      uint16_t x, y, r;
      memcpy(&x, a, 2); memcpy(&y, b, 2);
      r = lm_f32_to_bf16(lm_bf16_to_f32(x) - lm_bf16_to_f32(y));
      memcpy(d, &r, 2);
      return;
    }
    case LOOM_DTYPE_F32: { float x, y; memcpy(&x, a, 4); memcpy(&y, b, 4); x -= y; memcpy(d, &x, 4); return; }
    case LOOM_DTYPE_F64: { double x, y; memcpy(&x, a, 8); memcpy(&y, b, 8); x -= y; memcpy(d, &x, 8); return; }
    default: {
      size_t es = lm_dtype_size(dt);
      uint64_t x = 0, y = 0, r;
      memcpy(&x, a, es); memcpy(&y, b, es);
      r = x - y;
      memcpy(d, &r, es); /* little-endian: the low bytes are the wrapped result */
      return;
    }
  }
}

static void run_neg(lm_dtype dt, void *d, const void *a) {
  size_t es = lm_dtype_size(dt);
  if (lm_dtype_is_float(dt)) { /* flip the sign bit */
    memcpy(d, a, es);
    ((unsigned char *)d)[es - 1] ^= 0x80;
    return;
  }
  uint64_t x = 0, r;
  memcpy(&x, a, es);
  r = 0 - x;
  memcpy(d, &r, es);
}

void lm_sprog_run(const lm_sprog *p, const void *const *args, void *const *res) {
  sslot stack[64];
  sslot *s = p->nslots <= 64 ? stack : malloc(p->nslots * sizeof *s);
  if (!s) return; /* cannot happen for compiled regions of sane size; results left unchanged */
  for (uint32_t i = 0; i < p->nargs; i++) memcpy(s[i].b, args[i], p->arg_size[i]);
  for (uint32_t j = 0; j < p->ninstr; j++) {
    const sinstr *in = &p->code[j];
    unsigned char *d = s[in->dst].b;
    const unsigned char *a = s[in->a].b, *b = s[in->b].b;
    switch ((ikind)in->kind) {
      case I_CONST: memcpy(d, in->k, 16); break;
      case I_COMPARE:
        d[0] = in->ord ? (unsigned char)test_dir(in->dir, in->ord(a, b))
                       : (unsigned char)cmp_elems(in->dir, in->ctype, (lm_dtype)in->dtype, a, b);
        break;
      case I_SELECT: memcpy(d, a[0] ? b : s[in->c].b, 16); break;
      case I_BINOP: memcpy(d, a, 16); in->f(d, b, 1, 1, 1); break;
      case I_SUB: run_sub((lm_dtype)in->dtype, d, a, b); break;
      case I_NEG: run_neg((lm_dtype)in->dtype, d, a); break;
      case I_NOT:
        if (in->dtype == LOOM_DTYPE_PRED) d[0] = !a[0];
        else for (int q = 0; q < 16; q++) d[q] = (unsigned char)~a[q];
        break;
      case I_REAL: memcpy(d, a, in->dtype == LOOM_DTYPE_F32 ? 4 : 8); break;
      case I_IMAG: memcpy(d, a + (in->dtype == LOOM_DTYPE_F32 ? 4 : 8), in->dtype == LOOM_DTYPE_F32 ? 4 : 8); break;
    }
  }
  for (uint32_t i = 0; i < p->nres; i++) memcpy(res[i], s[p->res[i]].b, p->res_size[i]);
  if (s != stack) free(s);
}
