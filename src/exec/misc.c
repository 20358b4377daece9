/* Op family: misc. Values and tokens (tuple, get_tuple_element, optimization_barrier, after_all,
 * create_token), process ids (replica_id, partition_id, from lm_run_opts), custom_call dispatch
 * (the target registry of kernel.h and the targets this file implements), and the batch_norm ops
 * (spec 'batch_norm_inference', 'batch_norm_training', 'batch_norm_grad', computed per element in
 * double from the spec's decompositions, epsilon first rounded to the element type as the
 * decomposition's constant is), dynamic_conv (through the convolution kernel). Also registers the
 * families with files of their own (rng.c, fft.c, linalg.c, einsum.c). */
#include <math.h>
#include <string.h>
#include "exec/ops_util.h"

/* ---- tuple, get_tuple_element, optimization_barrier (results alias their operands: buffers
 * are immutable once computed) ---- */

static int v_tuple(const lm_op *op, const lm_func *fn, lm_err *err) {
  if (op->nout != 1) return lm_op_err(err, op, LOOM_VERIFY, "expects 1 result");
  const lm_type *r = lm_vtype(fn, op->out[0]);
  if (r->kind != LM_TYPE_TUPLE || r->ntuple != op->nin)
    return lm_op_err(err, op, LOOM_VERIFY, "result must be a tuple of the %u operands", op->nin);
  for (uint32_t i = 0; i < op->nin; i++)
    if (!lm_type_equal(&r->tuple[i], lm_vtype(fn, op->in[i])))
      return lm_op_err(err, op, LOOM_VERIFY, "tuple element %u differs from operand %u's type", i, i);
  return 0;
}

static int k_tuple(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  LM_TRY(lm_kalloc(k, &k->fn->value_types[k->op->out[0]], &out[0]));
  for (uint32_t i = 0; i < k->op->nin; i++) out[0]->elems[i] = lm_buffer_retain(in[i]);
  return 0;
}

static int v_get_tuple_element(const lm_op *op, const lm_func *fn, lm_err *err) {
  LM_TRY(lm_check_arity(op, 1, 1, err));
  const lm_type *t = lm_vtype(fn, op->in[0]);
  const lm_attr *ia = lm_op_attr(op, "index");
  int64_t i = lm_attr_int_or(ia, -1);
  if (t->kind != LM_TYPE_TUPLE) return lm_op_err(err, op, LOOM_VERIFY, "operand must be a tuple");
  if (!ia || i < 0 || i >= t->ntuple)
    return lm_op_err(err, op, LOOM_VERIFY, "index %lld is outside [0, %u)", (long long)i, t->ntuple);
  if (!lm_type_equal(&t->tuple[i], lm_vtype(fn, op->out[0])))
    return lm_op_err(err, op, LOOM_VERIFY, "result type differs from tuple element %lld", (long long)i);
  return 0;
}

static int k_get_tuple_element(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  int64_t i = lm_attr_int_or(lm_op_attr(k->op, "index"), 0);
  if (i < 0 || i >= in[0]->nelems || !in[0]->elems[i]) return lm_kerr(k, LOOM_INTERNAL, "tuple has no element %lld", (long long)i);
  out[0] = lm_buffer_retain(in[0]->elems[i]);
  return 0;
}

static int v_identity(const lm_op *op, const lm_func *fn, lm_err *err) {
  if (op->nin != op->nout) return lm_op_err(err, op, LOOM_VERIFY, "expects as many results as operands");
  return lm_check_results_like_operands(op, fn, err);
}

static int k_identity(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  for (uint32_t i = 0; i < k->op->nin; i++) out[i] = lm_buffer_retain(in[i]);
  return 0;
}

/* ---- tokens ---- */

static int v_token_result(const lm_op *op, const lm_func *fn, lm_err *err) {
  if (op->nout != 1 || lm_vtype(fn, op->out[0])->kind != LM_TYPE_TOKEN)
    return lm_op_err(err, op, LOOM_VERIFY, "result must be a !stablehlo.token");
  for (uint32_t i = 0; i < op->nin; i++)
    if (lm_vtype(fn, op->in[i])->kind != LM_TYPE_TOKEN) return lm_op_err(err, op, LOOM_VERIFY, "operands must be tokens");
  return 0;
}

/* The interpreter allocates the token result; ordering is the interpreter's program order. */
static int k_token(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) { return 0; }

/* ---- replica_id, partition_id (spec: 0-d ui32 of this process) ---- */

static int v_process_id(const lm_op *op, const lm_func *fn, lm_err *err) {
  LM_TRY(lm_check_arity(op, 0, 1, err));
  const lm_type *t = lm_vtype(fn, op->out[0]);
  if (t->kind != LM_TYPE_TENSOR || t->rank != 0 || !lm_dtype_is_int(t->dtype))
    return lm_op_err(err, op, LOOM_VERIFY, "result must be a 0-d integer tensor (tensor<ui32>)");
  return 0;
}

static int k_replica_id(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  lm_store_i64(out[0]->data, out[0]->type.dtype, k->opts->replica_id);
  return 0;
}

static int k_partition_id(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  lm_store_i64(out[0]->data, out[0]->type.dtype, k->opts->partition_id);
  return 0;
}

/* ---- custom_call ---- */

typedef struct cc_target {
  const char *name;
  lm_kernel_fn fn;
  lm_verify_fn verify;
  uint32_t flags;
} cc_target;

static cc_target g_targets[256]; /* every target registered at start-up (about 70) */
static int g_ntargets;

void lm_custom_call_register(const char *target, lm_kernel_fn fn, lm_verify_fn verify, uint32_t flags) {
  for (int i = 0; i < g_ntargets; i++)
    if (!strcmp(g_targets[i].name, target)) {
      g_targets[i] = (cc_target){target, fn, verify, flags};
      return;
    }
  if (g_ntargets < (int)(sizeof g_targets / sizeof *g_targets)) g_targets[g_ntargets++] = (cc_target){target, fn, verify, flags};
}

static const char *cc_name(const lm_op *op) {
  const lm_attr *a = lm_op_attr(op, "call_target_name");
  return a && a->s ? a->s : NULL;
}

static const cc_target *cc_find(const lm_op *op) {
  const char *n = cc_name(op);
  for (int i = 0; n && i < g_ntargets; i++)
    if (!strcmp(g_targets[i].name, n)) return &g_targets[i];
  return NULL;
}

static int v_custom_call(const lm_op *op, const lm_func *fn, lm_err *err) {
  const char *n = cc_name(op);
  if (!n) return lm_op_err(err, op, LOOM_VERIFY, "missing attribute 'call_target_name'");
  const cc_target *t = cc_find(op);
  if (!t) return lm_op_err(err, op, LOOM_UNSUPPORTED, "custom_call target '%s' is not supported by the CPU executor", n);
  return t->verify ? t->verify(op, fn, err) : 0;
}

static int k_custom_call(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  const cc_target *t = cc_find(k->op);
  if (!t) return lm_kerr(k, LOOM_UNSUPPORTED, "custom_call target '%s' is not supported", cc_name(k->op) ? cc_name(k->op) : "?");
  if (!(t->flags & LM_KF_OWN_OUTPUTS))
    for (uint32_t j = 0; j < k->op->nout; j++) LM_TRY(lm_kalloc(k, &k->fn->value_types[k->op->out[j]], &out[j]));
  return t->fn(k, in, out);
}

/* @Sharding, @SPMDFullToShardShape, @SPMDShardToFullShape, @MoveToHost, @MoveToDevice,
 * @annotate_device_placement: placement annotations, the identity on one device. Shape-changing
 * SPMD conversions need the SPMD partitioner and are refused. */
static int v_cc_identity(const lm_op *op, const lm_func *fn, lm_err *err) {
  if (op->nin != op->nout) return lm_op_err(err, op, LOOM_VERIFY, "custom_call @%s expects as many results as operands", cc_name(op));
  for (uint32_t i = 0; i < op->nin; i++)
    if (!lm_type_equal(lm_vtype(fn, op->in[i]), lm_vtype(fn, op->out[i])))
      return lm_op_err(err, op, LOOM_UNSUPPORTED,
                       "custom_call @%s changes the shape of operand %u: running it needs the SPMD partitioner", cc_name(op), i);
  return 0;
}

/* @shape_assertion(pred, ...) {error_message = "..."}: fails the run when pred is false. */
static int v_cc_shape_assertion(const lm_op *op, const lm_func *fn, lm_err *err) {
  if (op->nin < 1 || op->nout != 0) return lm_op_err(err, op, LOOM_VERIFY, "@shape_assertion expects a predicate operand and no results");
  const lm_type *t = lm_vtype(fn, op->in[0]);
  if (t->kind != LM_TYPE_TENSOR || t->rank != 0 || t->dtype != LOOM_DTYPE_PRED)
    return lm_op_err(err, op, LOOM_VERIFY, "@shape_assertion's first operand must be tensor<i1>");
  return 0;
}

static int k_cc_shape_assertion(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  if (((const uint8_t *)in[0]->data)[0]) return 0;
  const lm_attr *m = lm_op_attr(k->op, "error_message");
  return lm_kerr(k, LOOM_INVALID_ARGUMENT, "shape assertion failed: %s", m && m->s ? m->s : "(no message)");
}

/* ---- batch_norm_* ---- */

/* Shapes: operand [.., F at feature_index, ..]; the 1-D operands of size F. Checks operand
 * indices in[first_vec .. first_vec + nvec) and results out[0] (operand type) and out[1..] (1-D). */
static int v_batch_norm(const lm_op *op, const lm_func *fn, uint32_t nin, uint32_t nout, const uint32_t *vec_in,
                        uint32_t nvec_in, bool grad_out_operand, lm_err *err) {
  LM_TRY(lm_check_arity(op, nin, nout, err));
  LM_TRY(lm_check_tensors(op, fn, nin, nout, err));
  const lm_type *a = lm_vtype(fn, op->in[0]);
  if (!lm_dtype_is_float(a->dtype))
    return lm_op_err(err, op, LOOM_VERIFY, "operand must have a floating-point element type, not %s", lm_dtype_name(a->dtype));
  const lm_attr *fa = lm_op_attr(op, "feature_index"), *ea = lm_op_attr(op, "epsilon");
  int64_t fi = lm_attr_int_or(fa, -1);
  if (!fa || fi < 0 || fi >= a->rank)
    return lm_op_err(err, op, LOOM_VERIFY, "feature_index %lld is outside [0, %d)", (long long)fi, a->rank);
  if (!ea || (ea->kind != LM_ATTR_FLOAT && ea->kind != LM_ATTR_INT)) return lm_op_err(err, op, LOOM_VERIFY, "missing attribute 'epsilon'");
  int64_t F = a->dims[fi];
  for (uint32_t q = 0; q < nvec_in; q++) {
    const lm_type *t = lm_vtype(fn, op->in[vec_in[q]]);
    if (t->rank != 1 || t->dims[0] != F || t->dtype != a->dtype)
      return lm_op_err(err, op, LOOM_VERIFY, "operand %u must be a 1-d %s tensor of %lld elements", vec_in[q],
                       lm_dtype_name(a->dtype), (long long)F);
  }
  if (grad_out_operand && !lm_type_equal(lm_vtype(fn, op->in[nin - 1]), a))
    return lm_op_err(err, op, LOOM_VERIFY, "grad_output must have the operand's type");
  if (!lm_type_equal(lm_vtype(fn, op->out[0]), a)) return lm_op_err(err, op, LOOM_VERIFY, "result 0 must have the operand's type");
  for (uint32_t i = 1; i < nout; i++) {
    const lm_type *t = lm_vtype(fn, op->out[i]);
    if (t->rank != 1 || t->dims[0] != F || t->dtype != a->dtype)
      return lm_op_err(err, op, LOOM_VERIFY, "result %u must be a 1-d %s tensor of %lld elements", i, lm_dtype_name(a->dtype),
                       (long long)F);
  }
  return 0;
}

static int v_bn_inference(const lm_op *op, const lm_func *fn, lm_err *err) {
  static const uint32_t v[4] = {1, 2, 3, 4};
  return v_batch_norm(op, fn, 5, 1, v, 4, false, err);
}
static int v_bn_training(const lm_op *op, const lm_func *fn, lm_err *err) {
  static const uint32_t v[2] = {1, 2};
  return v_batch_norm(op, fn, 3, 3, v, 2, false, err);
}
static int v_bn_grad(const lm_op *op, const lm_func *fn, lm_err *err) {
  static const uint32_t v[3] = {1, 2, 3};
  return v_batch_norm(op, fn, 5, 3, v, 3, true, err);
}

typedef struct bn_view {
  int64_t pre, F, post, N; /* operand as [pre, F, post]; N = pre * post elements per feature */
  lm_dtype dt;
  size_t es;
  double eps;
} bn_view;

static bn_view bn_setup(lm_kctx *k, const lm_buffer *a) {
  bn_view v = {1, 1, 1, 1, (lm_dtype)a->type.dtype, lm_dtype_size(a->type.dtype), 0};
  int64_t fi = lm_attr_int_or(lm_op_attr(k->op, "feature_index"), 0);
  for (int d = 0; d < a->type.rank; d++) {
    if (d < fi) v.pre *= a->type.dims[d];
    else if (d > fi) v.post *= a->type.dims[d];
  }
  v.F = a->type.dims[fi];
  v.N = v.pre * v.post;
  const lm_attr *ea = lm_op_attr(k->op, "epsilon");
  double eps = ea->kind == LM_ATTR_FLOAT ? ea->f : (double)ea->i;
  unsigned char tmp[16];
  lm_store_f64(tmp, v.dt, eps); /* the decomposition's constant(epsilon, element_type) */
  v.eps = lm_load_f64(tmp, v.dt);
  return v;
}

static inline double ld(const lm_buffer *b, const bn_view *v, int64_t i) {
  return lm_load_f64((const char *)b->data + i * (int64_t)v->es, v->dt);
}
static inline void st(lm_buffer *b, const bn_view *v, int64_t i, double x) {
  lm_store_f64((char *)b->data + i * (int64_t)v->es, v->dt, x);
}
static inline double rnd(const bn_view *v, double x) { /* round to the element type */
  unsigned char tmp[16];
  lm_store_f64(tmp, v->dt, x);
  return lm_load_f64(tmp, v->dt);
}

/* for each element index i of feature f */
#define BN_FOR(v, f, i)                    \
  for (int64_t p_ = 0; p_ < (v).pre; p_++) \
    for (int64_t q_ = 0, i = (p_ * (v).F + (f)) * (v).post; q_ < (v).post; q_++, i++)

static int k_bn_inference(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  bn_view v = bn_setup(k, in[0]);
  for (int64_t f = 0; f < v.F; f++) {
    double sc = ld(in[1], &v, f), of = ld(in[2], &v, f), mu = ld(in[3], &v, f), var = ld(in[4], &v, f);
    double sd = sqrt(var + v.eps);
    BN_FOR(v, f, i) st(out[0], &v, i, (ld(in[0], &v, i) - mu) / sd * sc + of);
  }
  return 0;
}

static int k_bn_training(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  bn_view v = bn_setup(k, in[0]);
  for (int64_t f = 0; f < v.F; f++) {
    double sum = 0, sq = 0;
    BN_FOR(v, f, i) sum += ld(in[0], &v, i);
    double mu = v.N ? rnd(&v, sum / (double)v.N) : rnd(&v, NAN);
    BN_FOR(v, f, i) {
      double c = ld(in[0], &v, i) - mu;
      sq += c * c;
    }
    double var = v.N ? rnd(&v, sq / (double)v.N) : rnd(&v, NAN);
    double sc = ld(in[1], &v, f), of = ld(in[2], &v, f), sd = sqrt(var + v.eps);
    BN_FOR(v, f, i) st(out[0], &v, i, (ld(in[0], &v, i) - mu) / sd * sc + of);
    st(out[1], &v, f, mu);
    st(out[2], &v, f, var);
  }
  return 0;
}

static int k_bn_grad(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  bn_view v = bn_setup(k, in[0]);
  const lm_buffer *x = in[0], *gy = in[4];
  double n = (double)v.N;
  for (int64_t f = 0; f < v.F; f++) {
    double sc = ld(in[1], &v, f), mu = ld(in[2], &v, f), var = ld(in[3], &v, f);
    double sd = sqrt(var + v.eps);
    double sum_gy = 0, sum_gy_c = 0, sum_gy_xhat = 0;
    BN_FOR(v, f, i) {
      double g = ld(gy, &v, i), c = ld(x, &v, i) - mu;
      sum_gy += g;
      sum_gy_c += g * c;
      sum_gy_xhat += g * (c / sd);
    }
    /* spec: grad_operand = scale / stddev / N * (gy * N - sum(gy) - sum(gy * c) * c / (var + eps)) */
    BN_FOR(v, f, i) {
      double g = ld(gy, &v, i), c = ld(x, &v, i) - mu;
      st(out[0], &v, i, sc / sd / n * (g * n - sum_gy - sum_gy_c * c / (var + v.eps)));
    }
    st(out[1], &v, f, sum_gy_xhat);
    st(out[2], &v, f, sum_gy);
  }
  return 0;
}

/* ---- dynamic_conv: convolution whose padding is operand 2 ([spatial dims, 2] integers) ----
 * Runs the convolution kernel on a copy of the op carrying that padding as its attribute; the
 * convolution kernel checks the shapes against it at run time. */

static int v_dynamic_conv(const lm_op *op, const lm_func *fn, lm_err *err) {
  LM_TRY(lm_check_arity(op, 3, 1, err));
  for (uint32_t i = 0; i < 3; i++) LM_TRY(lm_check_tensor(op, fn, false, i, err));
  LM_TRY(lm_check_tensor(op, fn, true, 0, err));
  const lm_type *l = lm_vtype(fn, op->in[0]), *p = lm_vtype(fn, op->in[2]);
  if (p->rank != 2 || p->dims[1] != 2 || p->dims[0] != l->rank - 2 || !lm_dtype_is_int(p->dtype))
    return lm_op_err(err, op, LOOM_VERIFY, "padding operand must be a %dx2 integer tensor", l->rank - 2);
  if (lm_op_attr(op, "padding")) return lm_op_err(err, op, LOOM_VERIFY, "padding must be given as an operand, not an attribute");
  const lm_kernel_info *ck = lm_kernel_get(LM_OP_CONVOLUTION);
  if (!ck) return lm_op_err(err, op, LOOM_UNSUPPORTED, "convolution is not available");
  return 0;
}

static int k_dynamic_conv(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  const lm_kernel_info *ck = lm_kernel_get(LM_OP_CONVOLUTION);
  if (!ck) return lm_kerr(k, LOOM_UNSUPPORTED, "convolution is not available");
  const lm_op *op = k->op;
  if (op->nattrs > 62) return lm_kerr(k, LOOM_UNSUPPORTED, "too many attributes");
  int64_t n = lm_type_numel(&in[2]->type), pad[2 * LM_MAX_RANK];
  for (int64_t i = 0; i < n && i < 2 * LM_MAX_RANK; i++) pad[i] = lm_load_index(in[2]->data, in[2]->type.dtype, i);
  lm_named_attr attrs[64];
  memcpy(attrs, op->attrs, op->nattrs * sizeof *attrs);
  attrs[op->nattrs] = (lm_named_attr){"padding", {.kind = LM_ATTR_INTS, .n = (uint32_t)n, .ints = pad}};
  lm_op conv = *op;
  conv.code = LM_OP_CONVOLUTION;
  conv.nin = 2;
  conv.attrs = attrs;
  conv.nattrs = op->nattrs + 1;
  lm_kctx ck2 = *k;
  ck2.op = &conv;
  LM_TRY(ck->verify ? ck->verify(&conv, k->fn, k->err) : 0);
  if (!(ck->flags & LM_KF_OWN_OUTPUTS)) return ck->fn(&ck2, in, out);
  return lm_kerr(k, LOOM_INTERNAL, "unexpected convolution kernel flags");
}

void lm_register_misc_kernels(void) {
  lm_kernel_register(LM_OP_TUPLE, k_tuple, v_tuple, LM_KF_OWN_OUTPUTS);
  lm_kernel_register(LM_OP_GET_TUPLE_ELEMENT, k_get_tuple_element, v_get_tuple_element, LM_KF_OWN_OUTPUTS);
  lm_kernel_register(LM_OP_OPTIMIZATION_BARRIER, k_identity, v_identity, LM_KF_OWN_OUTPUTS);
  /* sharding hints: the identity on the values (where a program is partitioned, the partitioner
   * has turned them into data movement before the executor sees it; what remains is a hint on a
   * program that runs whole on one device, e.g. jax.random's through the IFRT proxy) */
  lm_kernel_register(LM_OP_SDY_SHARDING_CONSTRAINT, k_identity, v_identity, LM_KF_OWN_OUTPUTS);
  lm_kernel_register(LM_OP_SDY_RESHARD, k_identity, v_identity, LM_KF_OWN_OUTPUTS);
  lm_kernel_register(LM_OP_AFTER_ALL, k_token, v_token_result, 0);
  lm_kernel_register(LM_OP_CREATE_TOKEN, k_token, v_token_result, 0);
  lm_kernel_register(LM_OP_REPLICA_ID, k_replica_id, v_process_id, 0);
  lm_kernel_register(LM_OP_PARTITION_ID, k_partition_id, v_process_id, 0);
  lm_kernel_register(LM_OP_CUSTOM_CALL, k_custom_call, v_custom_call, LM_KF_OWN_OUTPUTS);
  static const char *const ident[] = {"Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape", "MoveToHost",
                                      "MoveToDevice", "annotate_device_placement"};
  for (size_t i = 0; i < sizeof ident / sizeof *ident; i++)
    lm_custom_call_register(ident[i], k_identity, v_cc_identity, LM_KF_OWN_OUTPUTS);
  lm_custom_call_register("shape_assertion", k_cc_shape_assertion, v_cc_shape_assertion, 0);
  lm_kernel_register(LM_OP_BATCH_NORM_INFERENCE, k_bn_inference, v_bn_inference, 0);
  lm_kernel_register(LM_OP_BATCH_NORM_TRAINING, k_bn_training, v_bn_training, 0);
  lm_kernel_register(LM_OP_BATCH_NORM_GRAD, k_bn_grad, v_bn_grad, 0);
  lm_kernel_register(LM_OP_DYNAMIC_CONV, k_dynamic_conv, v_dynamic_conv, 0);
  lm_register_rng_kernels();
  lm_register_fft_kernels();
  lm_register_linalg_kernels();
  lm_register_lapack_kernels();
  lm_register_einsum_kernels();
}
