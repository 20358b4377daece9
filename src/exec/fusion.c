/* Elementwise programs: building them (from fused groups of a block, or from the scalar body of
 * a region), allocating tile registers, and running them tile by tile. Also the fusion planning
 * pass (see fusion.h for the rules). */
#include <stdlib.h>
#include <string.h>
#include "exec/fusion.h"
#include "exec/interp.h"
#include "exec/ops_util.h"
#include "exec/parallel.h"

#define NONE UINT32_MAX
#define MAX_MEMBERS 256

/* ---- program builder ---- */

typedef struct prog_builder {
  lm_ew_inst *inst;
  uint32_t ninst, cinst;
  lm_ew_slot *slot;
  uint32_t nslot, cslot;
  uint32_t *in_vals; /* program inputs as value ids */
  uint32_t nin, cin;
  uint32_t nout;
  int rank;          /* the program's shape (groups) */
  int64_t dims[LM_MAX_RANK];
  int64_t numel;     /* -1: any length (region bodies) */
  uint32_t *vslot;   /* value id -> slot, NONE when not (yet) in the program */
  uint32_t *touched; /* values whose vslot was set, to reset */
  uint32_t ntouched, ctouched;
  lm_err *err;
} prog_builder;

static int grow(void **p, uint32_t *cap, uint32_t need, size_t esz) {
  if (need <= *cap) return 0;
  uint32_t nc = *cap ? *cap * 2 : 16;
  while (nc < need) nc *= 2;
  void *q = realloc(*p, (size_t)nc * esz);
  if (!q) return LOOM_NO_MEMORY;
  *p = q;
  *cap = nc;
  return 0;
}

static void pb_free(prog_builder *b) {
  free(b->inst);
  free(b->slot);
  free(b->in_vals);
  free(b->touched);
}

static int oom(prog_builder *b) { return lm_errf(b->err, LOOM_NO_MEMORY, "out of host memory"); }

static int set_vslot(prog_builder *b, uint32_t v, uint32_t s) {
  if (grow((void **)&b->touched, &b->ctouched, b->ntouched + 1, sizeof(uint32_t))) return oom(b);
  b->touched[b->ntouched++] = v;
  b->vslot[v] = s;
  return 0;
}

static void reset_vslots(prog_builder *b) {
  for (uint32_t i = 0; i < b->ntouched; i++) b->vslot[b->touched[i]] = NONE;
  b->ntouched = 0;
}

static int new_slot(prog_builder *b, const lm_ew_slot *s, uint32_t *out) {
  if (b->nslot >= 65535) return lm_errf(b->err, LOOM_UNSUPPORTED, "elementwise program too large");
  if (grow((void **)&b->slot, &b->cslot, b->nslot + 1, sizeof *b->slot)) return oom(b);
  b->slot[b->nslot] = *s;
  *out = b->nslot++;
  return 0;
}

static int add_inst(prog_builder *b, const lm_ew_inst *in) {
  if (grow((void **)&b->inst, &b->cinst, b->ninst + 1, sizeof *b->inst)) return oom(b);
  b->inst[b->ninst++] = *in;
  return 0;
}

/* Index of value v among the program inputs, adding it. */
static int input_index(prog_builder *b, uint32_t v, uint32_t *idx) {
  for (uint32_t i = 0; i < b->nin; i++)
    if (b->in_vals[i] == v) { *idx = i; return 0; }
  if (grow((void **)&b->in_vals, &b->cin, b->nin + 1, sizeof(uint32_t))) return oom(b);
  b->in_vals[b->nin] = v;
  *idx = b->nin++;
  return 0;
}

static bool same_dims(const lm_type *t, int rank, const int64_t *dims) {
  if (t->rank != rank) return false;
  for (int i = 0; i < rank; i++)
    if (t->dims[i] != dims[i]) return false;
  return true;
}

/* Slot reading external value v (type t) as `kind` (ARG, SPLAT from arg, or GATHER with the given
 * per-result-dim strides); ARG and SPLAT slots are shared between uses. */
static int input_slot(prog_builder *b, uint32_t v, const lm_type *t, int kind, const int64_t *strides,
                      uint32_t *out) {
  uint32_t idx = 0;
  LM_TRY(input_index(b, v, &idx));
  if (kind != LM_SLOT_GATHER)
    for (uint32_t s = 0; s < b->nslot; s++)
      if (b->slot[s].kind == kind && b->slot[s].arg == idx && (kind == LM_SLOT_ARG || b->slot[s].splat_src == 0)) {
        *out = s;
        return 0;
      }
  lm_ew_slot s;
  memset(&s, 0, sizeof s);
  s.kind = (uint8_t)kind;
  s.dtype = t->dtype;
  s.arg = idx;
  if (kind == LM_SLOT_GATHER) {
    s.rank = (uint8_t)b->rank;
    for (int d = 0; d < b->rank; d++) {
      s.dims[d] = b->dims[d];
      s.strides[d] = strides[d];
    }
  }
  return new_slot(b, &s, out);
}

/* Strides (per result dim) reading an operand of dims od[orank] broadcast into the program shape
 * with operand dim k mapped to result dim map[k]; size-1 dims repeat. */
static void bcast_strides(const prog_builder *b, const lm_type *ot, const int64_t *map, int64_t *strides) {
  for (int d = 0; d < b->rank; d++) strides[d] = 0;
  int64_t st = 1;
  for (int k = ot->rank - 1; k >= 0; k--) {
    if (ot->dims[k] != 1) strides[map[k]] = st;
    st *= ot->dims[k];
  }
}

/* Slot for operand value v of member op (non-broadcast op): group value, full-shape input,
 * splatted scalar, or numpy-style broadcast (chlo.broadcast_*). */
static int operand_slot(prog_builder *b, const lm_op *op, const lm_func *fn, uint32_t v, uint32_t *out) {
  if (b->vslot[v] != NONE) { *out = b->vslot[v]; return 0; }
  const lm_type *t = &fn->value_types[v];
  if (b->numel < 0 || same_dims(t, b->rank, b->dims)) return input_slot(b, v, t, LM_SLOT_ARG, NULL, out);
  if (lm_type_numel(t) == 1) return input_slot(b, v, t, LM_SLOT_SPLAT, NULL, out);
  /* broadcasting operand of a chlo.broadcast_* op */
  int64_t map[LM_MAX_RANK];
  const lm_attr *bd = lm_op_attr(op, "broadcast_dimensions");
  if (bd) {
    if (lm_attr_ints(bd, map, LM_MAX_RANK) != t->rank)
      return lm_op_err(b->err, op, LOOM_VERIFY, "broadcast_dimensions does not match the operand's rank");
  } else {
    if (t->rank > b->rank) return lm_op_err(b->err, op, LOOM_VERIFY, "operand has a higher rank than the result");
    for (int k = 0; k < t->rank; k++) map[k] = b->rank - t->rank + k;
  }
  for (int k = 0; k < t->rank; k++)
    if (map[k] < 0 || map[k] >= b->rank || (t->dims[k] != 1 && t->dims[k] != b->dims[map[k]]))
      return lm_op_err(b->err, op, LOOM_VERIFY, "operand dimension %d (size %lld) cannot be broadcast to the result", k,
                       (long long)t->dims[k]);
  int64_t strides[LM_MAX_RANK];
  bcast_strides(b, t, map, strides);
  return input_slot(b, v, t, LM_SLOT_GATHER, strides, out);
}

static int tmp_slot(prog_builder *b, lm_dtype t, uint32_t *out) {
  lm_ew_slot s;
  memset(&s, 0, sizeof s);
  s.kind = LM_SLOT_TMP;
  s.dtype = (uint8_t)t;
  return new_slot(b, &s, out);
}

/* Adds the instruction computing member op (elementwise) into a new TMP slot. */
static int add_member(prog_builder *b, const lm_op *op, const lm_func *fn) {
  const lm_type *rt = &fn->value_types[op->out[0]];
  if (op->code == LM_OP_BROADCAST_IN_DIM || op->code == LM_OP_RESHAPE) {
    uint32_t v = op->in[0];
    const lm_type *ot = &fn->value_types[v];
    uint32_t s;
    if (b->vslot[v] != NONE && (lm_type_numel(ot) == 1 || same_dims(ot, b->rank, b->dims) || b->numel < 0)) {
      s = b->vslot[v]; /* a group value (scalar in a region body, or identity broadcast) */
    } else if (b->vslot[v] != NONE) {
      return lm_op_err(b->err, op, LOOM_UNSUPPORTED, "broadcast of a fused value");
    } else if (lm_type_numel(ot) == 1 || b->numel < 0) {
      LM_TRY(input_slot(b, v, ot, lm_type_numel(ot) == 1 && b->numel >= 0 ? LM_SLOT_SPLAT : LM_SLOT_ARG, NULL, &s));
    } else if (same_dims(ot, b->rank, b->dims)) {
      LM_TRY(input_slot(b, v, ot, LM_SLOT_ARG, NULL, &s));
    } else {
      if (op->code != LM_OP_BROADCAST_IN_DIM) return lm_op_err(b->err, op, LOOM_UNSUPPORTED, "reshape in a fused group");
      int64_t map[LM_MAX_RANK];
      if (lm_attr_ints(lm_op_attr(op, "broadcast_dimensions"), map, LM_MAX_RANK) != ot->rank)
        return lm_op_err(b->err, op, LOOM_VERIFY, "broadcast_dimensions must have one entry per operand dimension");
      for (int k = 0; k < ot->rank; k++)
        if (map[k] < 0 || map[k] >= b->rank || (ot->dims[k] != 1 && ot->dims[k] != b->dims[map[k]]))
          return lm_op_err(b->err, op, LOOM_VERIFY, "operand dimension %d cannot be broadcast to result dimension %lld",
                           k, (long long)map[k]);
      int64_t strides[LM_MAX_RANK];
      bcast_strides(b, ot, map, strides);
      LM_TRY(input_slot(b, v, ot, LM_SLOT_GATHER, strides, &s));
    }
    return set_vslot(b, op->out[0], s);
  }
  if (op->code == LM_OP_CONSTANT) {
    const lm_attr *a = lm_op_attr(op, "value");
    if (!a || a->kind != LM_ATTR_DENSE || a->nbytes < lm_dtype_size(rt->dtype) || lm_dtype_size(rt->dtype) > 16)
      return lm_op_err(b->err, op, LOOM_UNSUPPORTED, "constant is not a splat");
    lm_ew_slot s;
    memset(&s, 0, sizeof s);
    s.kind = LM_SLOT_SPLAT;
    s.dtype = rt->dtype;
    s.splat_src = 1;
    memcpy(s.cval, a->data, lm_dtype_size(rt->dtype));
    uint32_t id;
    LM_TRY(new_slot(b, &s, &id));
    return set_vslot(b, op->out[0], id);
  }
  lm_ew_inst inst;
  lm_dtype dts[LM_EW_MAXIN];
  if (op->nin > LM_EW_MAXIN) return lm_op_err(b->err, op, LOOM_VERIFY, "too many operands");
  for (uint32_t k = 0; k < op->nin; k++) dts[k] = fn->value_types[op->in[k]].dtype;
  lm_err e2;
  int rc = lm_ew_make((lm_opcode)op->code, (int)op->nin, dts, rt->dtype, op, &inst, &e2);
  if (rc < 0) {
    if (b->err) *b->err = e2;
    if (!strstr(e2.msg, " at ")) lm_err_prefix(b->err, "%s at %s:%u:%u", op->name, op->loc.file ? op->loc.file : "<unknown>",
                                               op->loc.line, op->loc.col);
    return rc;
  }
  for (uint32_t k = 0; k < op->nin; k++) {
    uint32_t s;
    LM_TRY(operand_slot(b, op, fn, op->in[k], &s));
    inst.src[k] = (uint16_t)s;
  }
  uint32_t d;
  LM_TRY(tmp_slot(b, rt->dtype, &d));
  inst.dst = (uint16_t)d;
  LM_TRY(add_inst(b, &inst));
  return set_vslot(b, op->out[0], d);
}

/* Makes value v program output number b->nout: retargets its TMP slot, or copies into an OUT slot. */
static int add_output(prog_builder *b, uint32_t v, lm_dtype t) {
  uint32_t s = b->vslot[v];
  if (s == NONE) return lm_errf(b->err, LOOM_INTERNAL, "fused output %u has no slot", v);
  uint32_t idx = b->nout++;
  if (b->slot[s].kind == LM_SLOT_TMP) {
    b->slot[s].kind = LM_SLOT_OUT;
    b->slot[s].arg = idx;
    return 0;
  }
  lm_ew_slot os;
  memset(&os, 0, sizeof os);
  os.kind = LM_SLOT_OUT;
  os.dtype = (uint8_t)t;
  os.arg = idx;
  uint32_t o;
  LM_TRY(new_slot(b, &os, &o));
  lm_ew_inst inst;
  LM_TRY(lm_ew_make(LM_OP_BITCAST_CONVERT, 1, &t, t, NULL, &inst, b->err));
  inst.src[0] = (uint16_t)s;
  inst.dst = (uint16_t)o;
  return add_inst(b, &inst);
}

/* Assigns tile registers (reusing dead ones, in place when element sizes match) and copies the
 * program into the arena. */
static int finalize(prog_builder *b, lm_arena *arena, lm_ew_prog **out) {
  uint32_t ns = b->nslot, ni = b->ninst;
  int32_t *last = malloc((ns ? ns : 1) * sizeof *last);
  uint32_t *freel = malloc((ns ? ns : 1) * sizeof *freel);
  if (!last || !freel) { free(last); free(freel); return oom(b); }
  for (uint32_t s = 0; s < ns; s++) last[s] = -1;
  for (uint32_t i = 0; i < ni; i++) {
    for (int k = 0; k < b->inst[i].nin; k++) last[b->inst[i].src[k]] = (int32_t)i;
    if (last[b->inst[i].dst] < (int32_t)i) last[b->inst[i].dst] = (int32_t)i;
  }
  uint32_t nregs = 0, nfree = 0;
  size_t esize = 1;
  for (uint32_t s = 0; s < ns; s++) {
    lm_ew_slot *sl = &b->slot[s];
    sl->reg = 0;
    if (sl->kind == LM_SLOT_SPLAT || sl->kind == LM_SLOT_GATHER) sl->reg = (uint16_t)nregs++;
    if (sl->kind != LM_SLOT_ARG && sl->kind != LM_SLOT_OUT && lm_dtype_size(sl->dtype) > esize)
      esize = lm_dtype_size(sl->dtype);
  }
  for (uint32_t i = 0; i < ni; i++) {
    lm_ew_inst *in = &b->inst[i];
    uint32_t dying[LM_EW_MAXIN];
    int ndying = 0;
    for (int k = 0; k < in->nin; k++) {
      uint32_t s = in->src[k];
      if (b->slot[s].kind != LM_SLOT_TMP || last[s] != (int32_t)i) continue;
      bool dup = false;
      for (int j = 0; j < ndying; j++) dup |= dying[j] == s;
      if (!dup) dying[ndying++] = s;
    }
    lm_ew_slot *d = &b->slot[in->dst];
    if (d->kind == LM_SLOT_TMP) {
      int pick = -1;
      for (int j = 0; j < ndying; j++)
        if (lm_dtype_size(b->slot[dying[j]].dtype) == lm_dtype_size(d->dtype)) { pick = j; break; }
      if (pick >= 0) {
        d->reg = b->slot[dying[pick]].reg;
        dying[pick] = dying[--ndying];
      } else if (nfree) {
        d->reg = (uint16_t)freel[--nfree];
      } else {
        if (nregs >= 65535) { free(last); free(freel); return lm_errf(b->err, LOOM_UNSUPPORTED, "elementwise program too large"); }
        d->reg = (uint16_t)nregs++;
      }
    }
    for (int j = 0; j < ndying; j++) freel[nfree++] = b->slot[dying[j]].reg;
    if (d->kind == LM_SLOT_TMP && last[in->dst] == (int32_t)i) freel[nfree++] = d->reg; /* never read */
  }
  free(last);
  free(freel);
  lm_ew_prog *p = lm_arena_alloc(arena, sizeof *p);
  lm_ew_inst *ci = lm_arena_array(arena, ni ? ni : 1, sizeof *ci);
  lm_ew_slot *cs = lm_arena_array(arena, ns ? ns : 1, sizeof *cs);
  if (!p || !ci || !cs) return oom(b);
  memcpy(ci, b->inst, ni * sizeof *ci);
  memcpy(cs, b->slot, ns * sizeof *cs);
  p->ninst = ni;
  p->inst = ci;
  p->nslots = ns;
  p->slots = cs;
  p->nin = b->nin;
  p->nout = b->nout;
  p->nregs = nregs;
  p->reg_esize = (uint32_t)esize;
  p->numel = b->numel;
  *out = p;
  return 0;
}

/* ---- running ---- */

/* Fills dst with the len input elements of GATHER slot s for the tile starting at flat result
 * index t0: runs along the last result dimension are copied (stride 1), repeated (stride 0) or
 * strided. */
static void gather(const lm_ew_slot *s, const char *src, size_t t0, size_t len, char *dst) {
  size_t es = lm_dtype_size(s->dtype);
  int r = s->rank;
  int64_t idx[LM_MAX_RANK];
  size_t rem = t0;
  for (int d = r - 1; d >= 0; d--) {
    idx[d] = (int64_t)(rem % (size_t)s->dims[d]);
    rem /= (size_t)s->dims[d];
  }
  int64_t st = r ? s->strides[r - 1] : 0;
  size_t done = 0;
  while (done < len) {
    int64_t off = 0;
    for (int d = 0; d < r; d++) off += idx[d] * s->strides[d];
    size_t run = r ? (size_t)(s->dims[r - 1] - idx[r - 1]) : len;
    if (run > len - done) run = len - done;
    const char *p = src + off * (int64_t)es;
    char *q = dst + done * es;
    if (st == 1) {
      memcpy(q, p, run * es);
    } else if (st == 0) {
      lm_fill_elems(q, p, es, run);
    } else {
      for (size_t i = 0; i < run; i++) memcpy(q + i * es, p + (int64_t)i * st * (int64_t)es, es);
    }
    done += run;
    if (r == 0) break;
    idx[r - 1] += (int64_t)run;
    for (int d = r - 1; d > 0 && idx[d] >= s->dims[d]; d--) {
      idx[d] = 0;
      idx[d - 1]++;
    }
  }
}

int lm_ew_prog_run(const lm_ew_prog *prog, const void *const *in, void *const *out, size_t lo, size_t hi,
                   lm_err *err) {
  if (hi <= lo) return 0;
  size_t tile = hi - lo < LM_EW_TILE ? ((hi - lo + 15) & ~(size_t)15) : LM_EW_TILE; /* small runs: small registers */
  size_t regsz = tile * prog->reg_esize;
  size_t total = regsz * (prog->nregs ? prog->nregs : 1);
  char *regs = aligned_alloc(64, (total + 63) & ~(size_t)63);
  void *ptr_local[64];
  void **ptr = prog->nslots <= 64 ? ptr_local : malloc(prog->nslots * sizeof *ptr);
  if (!regs || !ptr) {
    free(regs);
    if (ptr != ptr_local) free(ptr);
    return lm_errf(err, LOOM_NO_MEMORY, "out of host memory for an elementwise program");
  }
  /* splats are filled once; TMP and SPLAT/GATHER registers are fixed */
  for (uint32_t s = 0; s < prog->nslots; s++) {
    const lm_ew_slot *sl = &prog->slots[s];
    if (sl->kind == LM_SLOT_SPLAT) {
      size_t es = lm_dtype_size(sl->dtype);
      const char *v = sl->splat_src ? (const char *)sl->cval : (const char *)in[sl->arg];
      char *r = regs + sl->reg * regsz;
      lm_fill_elems(r, v, es, tile);
    }
    if (sl->kind == LM_SLOT_SPLAT || sl->kind == LM_SLOT_GATHER || sl->kind == LM_SLOT_TMP) ptr[s] = regs + sl->reg * regsz;
  }
  for (size_t t0 = lo; t0 < hi; t0 += LM_EW_TILE) {
    size_t len = hi - t0 < LM_EW_TILE ? hi - t0 : LM_EW_TILE;
    for (uint32_t s = 0; s < prog->nslots; s++) {
      const lm_ew_slot *sl = &prog->slots[s];
      size_t es = lm_dtype_size(sl->dtype);
      switch (sl->kind) {
        case LM_SLOT_ARG: ptr[s] = (char *)in[sl->arg] + t0 * es; break;
        case LM_SLOT_OUT: ptr[s] = (char *)out[sl->arg] + t0 * es; break;
        case LM_SLOT_GATHER: gather(sl, in[sl->arg], t0, len, ptr[s]); break;
        default: break;
      }
    }
    for (uint32_t i = 0; i < prog->ninst; i++) {
      const lm_ew_inst *inst = &prog->inst[i];
      const void *srcs[LM_EW_MAXIN];
      for (int k = 0; k < inst->nin; k++) srcs[k] = ptr[inst->src[k]];
      inst->fn(ptr[inst->dst], srcs, len, inst);
    }
  }
  free(regs);
  if (ptr != ptr_local) free(ptr);
  return 0;
}

/* ---- region bodies ---- */

int lm_ew_compile_region(const lm_region *r, const lm_func *fn, lm_arena *arena, lm_ew_prog **out, lm_err *err) {
  *out = NULL;
  if (r->nblocks != 1) return LOOM_UNSUPPORTED;
  const lm_block *blk = &r->blocks[0];
  if (blk->nops == 0) return LOOM_UNSUPPORTED;
  prog_builder b;
  memset(&b, 0, sizeof b);
  b.numel = -1;
  b.err = err;
  b.vslot = malloc((fn->nvalues ? fn->nvalues : 1) * sizeof *b.vslot);
  if (!b.vslot) return lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  for (uint32_t v = 0; v < fn->nvalues; v++) b.vslot[v] = NONE;
  int rc = 0;
  /* block arguments are the inputs, in order */
  for (uint32_t a = 0; a < blk->nargs && rc == 0; a++) {
    const lm_type *t = &fn->value_types[blk->args[a]];
    if (t->kind != LM_TYPE_TENSOR || lm_type_numel(t) != 1) { rc = LOOM_UNSUPPORTED; break; }
    uint32_t s;
    lm_ew_slot sl;
    memset(&sl, 0, sizeof sl);
    sl.kind = LM_SLOT_ARG;
    sl.dtype = t->dtype;
    sl.arg = a;
    if (grow((void **)&b.in_vals, &b.cin, b.nin + 1, sizeof(uint32_t))) { rc = oom(&b); break; }
    b.in_vals[b.nin++] = blk->args[a];
    rc = new_slot(&b, &sl, &s);
    if (rc == 0) rc = set_vslot(&b, blk->args[a], s);
  }
  for (uint32_t i = 0; rc == 0 && i + 1 < blk->nops; i++) {
    const lm_op *op = &blk->ops[i];
    if (op->nregions || op->nout != 1) { rc = LOOM_UNSUPPORTED; break; }
    const lm_type *rt = &fn->value_types[op->out[0]];
    if (rt->kind != LM_TYPE_TENSOR || lm_type_numel(rt) != 1) { rc = LOOM_UNSUPPORTED; break; }
    bool ok = op->code == LM_OP_CONSTANT || op->code == LM_OP_BROADCAST_IN_DIM || op->code == LM_OP_RESHAPE ||
              op->code == LM_OP_BITCAST_CONVERT || lm_ew_is_elementwise((lm_opcode)op->code);
    for (uint32_t k = 0; ok && k < op->nin; k++)
      ok = b.vslot[op->in[k]] != NONE; /* only values of the body itself */
    if (!ok) { rc = LOOM_UNSUPPORTED; break; }
    rc = add_member(&b, op, fn);
  }
  const lm_op *term = &blk->ops[blk->nops - 1];
  for (uint32_t k = 0; rc == 0 && k < term->nin; k++) {
    if (b.vslot[term->in[k]] == NONE) { rc = LOOM_UNSUPPORTED; break; }
    /* a value returned twice, or an argument returned as is, gets a copy */
    uint32_t s = b.vslot[term->in[k]];
    if (b.slot[s].kind == LM_SLOT_OUT || b.slot[s].kind == LM_SLOT_ARG || b.slot[s].kind == LM_SLOT_SPLAT) {
      lm_ew_slot os;
      memset(&os, 0, sizeof os);
      os.kind = LM_SLOT_OUT;
      os.dtype = fn->value_types[term->in[k]].dtype;
      os.arg = b.nout++;
      uint32_t o;
      rc = new_slot(&b, &os, &o);
      lm_ew_inst inst;
      lm_dtype t = (lm_dtype)os.dtype;
      if (rc == 0) rc = lm_ew_make(LM_OP_BITCAST_CONVERT, 1, &t, t, NULL, &inst, err);
      if (rc == 0) {
        inst.src[0] = (uint16_t)s;
        inst.dst = (uint16_t)o;
        rc = add_inst(&b, &inst);
      }
    } else {
      rc = add_output(&b, term->in[k], fn->value_types[term->in[k]].dtype);
    }
  }
  if (rc == 0) rc = finalize(&b, arena, out);
  free(b.vslot);
  pb_free(&b);
  return rc;
}

/* ---- fusion planning ---- */

/* Whether op can be a member of a fused group; fills its shape. */
static bool fusable(const lm_op *op, const lm_func *fn) {
  if (op->nregions || op->nout != 1 || op->nin == 0 || op->nin > LM_EW_MAXIN) return false;
  const lm_type *rt = &fn->value_types[op->out[0]];
  if (rt->kind != LM_TYPE_TENSOR || !lm_type_is_static(rt)) return false;
  for (uint32_t k = 0; k < op->nin; k++) {
    const lm_type *t = &fn->value_types[op->in[k]];
    if (t->kind != LM_TYPE_TENSOR || !lm_type_is_static(t)) return false;
  }
  lm_opcode code = (lm_opcode)op->code;
  if (code == LM_OP_BROADCAST_IN_DIM) return true;
  if (code == LM_OP_BITCAST_CONVERT) {
    const lm_type *t = &fn->value_types[op->in[0]];
    if ((t->dtype == LOOM_DTYPE_PRED) != (rt->dtype == LOOM_DTYPE_PRED)) return false; /* i1 is one bit */
    return lm_dtype_size(t->dtype) == lm_dtype_size(rt->dtype) && same_dims(t, rt->rank, rt->dims) &&
           lm_dtype_is_complex(t->dtype) == lm_dtype_is_complex(rt->dtype);
  }
  if (!lm_ew_is_elementwise(code)) return false;
  bool chlo = lm_ew_plain_code(code) != code;
  for (uint32_t k = 0; k < op->nin; k++) {
    const lm_type *t = &fn->value_types[op->in[k]];
    if (same_dims(t, rt->rank, rt->dims)) continue;
    if (t->rank == 0) continue; /* splatted scalar (select pred, clamp bounds, chlo scalars) */
    if (!chlo) return false;
  }
  lm_ew_inst inst;
  lm_dtype dts[LM_EW_MAXIN];
  for (uint32_t k = 0; k < op->nin; k++) dts[k] = fn->value_types[op->in[k]].dtype;
  return lm_ew_make(code, (int)op->nin, dts, rt->dtype, op, &inst, NULL) == 0;
}

/* Calls f(v) for every value op uses: operands and, recursively, operands inside its regions. */
typedef struct use_list { uint32_t *v; uint32_t n, cap; } use_list;
static int collect_uses(const lm_op *op, use_list *u) {
  for (uint32_t k = 0; k < op->nin; k++) {
    if (grow((void **)&u->v, &u->cap, u->n + 1, sizeof(uint32_t))) return LOOM_NO_MEMORY;
    u->v[u->n++] = op->in[k];
  }
  for (uint32_t r = 0; r < op->nregions; r++)
    for (uint32_t bi = 0; bi < op->regions[r].nblocks; bi++) {
      const lm_block *nb = &op->regions[r].blocks[bi];
      for (uint32_t j = 0; j < nb->nops; j++) LM_TRY(collect_uses(&nb->ops[j], u));
    }
  return 0;
}

typedef struct group_tmp {
  uint32_t *members; /* op indexes */
  uint32_t n, cap;
  bool open;
  const lm_type *shape;
} group_tmp;

int lm_fusion_plan_block(const lm_block *b, const lm_func *fn, bool fuse, lm_arena *arena, lm_fusion_plan *out,
                         lm_err *err) {
  memset(out, 0, sizeof *out);
  uint32_t nops = b->nops, nv = fn->nvalues ? fn->nvalues : 1;
  int32_t *group_of = lm_arena_array(arena, nops ? nops : 1, sizeof *group_of);
  int32_t *prod = malloc(nv * sizeof *prod);         /* value -> producing op index in b */
  uint8_t *is_out = calloc(nv, 1);                   /* value must be materialized */
  bool *can = calloc(nops ? nops : 1, sizeof *can);
  group_tmp *g = NULL;
  uint32_t ng = 0, cg = 0;
  use_list u = {0};
  prog_builder pb;
  memset(&pb, 0, sizeof pb);
  pb.err = err;
  pb.vslot = malloc(nv * sizeof *pb.vslot);
  int rc = 0;
  if (!group_of || !prod || !is_out || !can || !pb.vslot) { rc = lm_errf(err, LOOM_NO_MEMORY, "out of host memory"); goto done; }
  for (uint32_t v = 0; v < nv; v++) { prod[v] = -1; pb.vslot[v] = NONE; }
  for (uint32_t i = 0; i < nops; i++) {
    group_of[i] = -1;
    for (uint32_t k = 0; k < b->ops[i].nout; k++) prod[b->ops[i].out[k]] = (int32_t)i;
    can[i] = i + 1 < nops && fusable(&b->ops[i], fn);
  }
  for (uint32_t i = 0; i < nops; i++) {
    const lm_op *op = &b->ops[i];
    int32_t target = -1;
    if (can[i] && fuse) {
      const lm_type *rt = &fn->value_types[op->out[0]];
      for (uint32_t j = 0; j < ng && target < 0; j++)
        if (g[j].open && g[j].n < MAX_MEMBERS && same_dims(g[j].shape, rt->rank, rt->dims)) target = (int32_t)j;
    }
    u.n = 0;
    if (collect_uses(op, &u)) { rc = lm_errf(err, LOOM_NO_MEMORY, "out of host memory"); goto done; }
    for (uint32_t k = 0; k < u.n; k++) {
      uint32_t v = u.v[k];
      if (v >= nv || prod[v] < 0) continue;
      int32_t gv = group_of[prod[v]];
      if (gv < 0 || (can[i] && gv == target)) continue;
      is_out[v] = 1;
      g[gv].open = false;
    }
    if (!can[i]) continue;
    if (target < 0) {
      if (grow((void **)&g, &cg, ng + 1, sizeof *g)) { rc = lm_errf(err, LOOM_NO_MEMORY, "out of host memory"); goto done; }
      memset(&g[ng], 0, sizeof g[ng]);
      g[ng].open = fuse;
      g[ng].shape = &fn->value_types[op->out[0]];
      target = (int32_t)ng++;
    }
    group_tmp *gt = &g[target];
    if (grow((void **)&gt->members, &gt->cap, gt->n + 1, sizeof(uint32_t))) {
      rc = lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
      goto done;
    }
    gt->members[gt->n++] = i;
    group_of[i] = target;
  }
  /* build each group's program */
  out->groups = lm_arena_array(arena, ng ? ng : 1, sizeof *out->groups);
  if (!out->groups) { rc = lm_errf(err, LOOM_NO_MEMORY, "out of host memory"); goto done; }
  out->ngroups = ng;
  out->group_of = group_of;
  for (uint32_t j = 0; j < ng && rc == 0; j++) {
    group_tmp *gt = &g[j];
    lm_fusion *f = &out->groups[j];
    const lm_type *shape = gt->shape;
    pb.ninst = pb.nslot = pb.nin = pb.nout = 0;
    pb.rank = shape->rank;
    memcpy(pb.dims, shape->dims, sizeof pb.dims);
    pb.numel = lm_type_numel(shape);
    f->numel = pb.numel;
    f->nmembers = gt->n;
    f->members = lm_arena_array(arena, gt->n, sizeof *f->members);
    if (!f->members) { rc = lm_errf(err, LOOM_NO_MEMORY, "out of host memory"); break; }
    for (uint32_t m = 0; m < gt->n && rc == 0; m++) {
      f->members[m] = &b->ops[gt->members[m]];
      rc = add_member(&pb, f->members[m], fn);
    }
    uint32_t nouts = 0;
    for (uint32_t m = 0; m < gt->n; m++)
      if (is_out[b->ops[gt->members[m]].out[0]]) nouts++;
    f->out = lm_arena_array(arena, nouts ? nouts : 1, sizeof(uint32_t));
    if (rc == 0 && !f->out) rc = lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
    for (uint32_t m = 0; m < gt->n && rc == 0; m++) {
      uint32_t v = b->ops[gt->members[m]].out[0];
      if (!is_out[v]) continue;
      f->out[f->nout++] = v;
      rc = add_output(&pb, v, fn->value_types[v].dtype);
    }
    if (rc == 0) rc = finalize(&pb, arena, &f->prog);
    if (rc == 0) {
      f->nin = pb.nin;
      f->in = lm_arena_array(arena, pb.nin ? pb.nin : 1, sizeof(uint32_t));
      if (!f->in) rc = lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
      else memcpy(f->in, pb.in_vals, pb.nin * sizeof(uint32_t));
    }
    reset_vslots(&pb);
  }
done:
  for (uint32_t j = 0; j < ng; j++) free(g[j].members);
  free(g);
  free(u.v);
  free(prod);
  free(is_out);
  free(can);
  free(pb.vslot);
  pb_free(&pb);
  return rc;
}

int lm_fusion_single(const lm_op *op, const lm_func *fn, lm_arena *arena, lm_fusion **out, lm_err *err) {
  *out = NULL;
  lm_fusion *f = lm_arena_alloc(arena, sizeof *f);
  if (!f) return lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  const lm_type *shape = &fn->value_types[op->out[0]];
  prog_builder pb;
  memset(&pb, 0, sizeof pb);
  pb.err = err;
  uint32_t nv = fn->nvalues ? fn->nvalues : 1;
  pb.vslot = malloc(nv * sizeof *pb.vslot);
  if (!pb.vslot) return lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  for (uint32_t v = 0; v < nv; v++) pb.vslot[v] = NONE;
  pb.rank = shape->rank;
  memcpy(pb.dims, shape->dims, sizeof pb.dims);
  pb.numel = lm_type_numel(shape);
  int rc = add_member(&pb, op, fn);
  if (rc == 0) rc = add_output(&pb, op->out[0], shape->dtype);
  if (rc == 0) rc = finalize(&pb, arena, &f->prog);
  if (rc == 0) {
    f->numel = pb.numel;
    f->nmembers = 1;
    f->members = lm_arena_alloc(arena, sizeof *f->members);
    f->in = lm_arena_array(arena, pb.nin ? pb.nin : 1, sizeof(uint32_t));
    f->out = lm_arena_alloc(arena, sizeof(uint32_t));
    if (!f->members || !f->in || !f->out) rc = lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  }
  if (rc == 0) {
    f->members[0] = op;
    f->nin = pb.nin;
    memcpy(f->in, pb.in_vals, pb.nin * sizeof(uint32_t));
    f->nout = 1;
    f->out[0] = op->out[0];
    *out = f;
  }
  free(pb.vslot);
  pb_free(&pb);
  return rc;
}

typedef struct range_ctx {
  const lm_ew_prog *prog;
  const void *const *in;
  void *const *out;
} range_ctx;

static int run_range(void *c, size_t lo, size_t hi) {
  range_ctx *r = c;
  return lm_ew_prog_run(r->prog, r->in, r->out, lo, hi, NULL);
}

int lm_fusion_run(lm_kctx *k, const lm_fusion *f, lm_buffer *const *in, lm_buffer **out) {
  const void *ip_local[16];
  void *op_local[16];
  const void **ip = f->nin <= 16 ? ip_local : malloc(f->nin * sizeof *ip);
  void **opp = f->nout <= 16 ? op_local : malloc(f->nout * sizeof *opp);
  int rc = 0;
  if (!ip || !opp) rc = lm_kerr(k, LOOM_NO_MEMORY, "out of host memory");
  for (uint32_t i = 0; rc == 0 && i < f->nin; i++) ip[i] = in[i]->data;
  for (uint32_t i = 0; rc == 0 && i < f->nout; i++) opp[i] = out[i]->data;
  if (rc == 0 && f->numel > 0) {
    /* large groups are split over the run's threads (each part with its own tile registers) */
    range_ctx rctx = {f->prog, ip, opp};
    rc = lm_parallel_range(k->opts->nthreads, (size_t)f->numel, (size_t)1 << 16, LM_EW_TILE, run_range, &rctx);
    if (rc < 0) rc = lm_kerr(k, rc, "out of host memory for an elementwise program's tile registers");
  }
  if (ip != ip_local) free(ip);
  if (opp != op_local) free(opp);
  return rc;
}
