/* VHLO ops into StableHLO IR (bc_int.h). VHLO is StableHLO with every op, attribute and type
 * versioned ("vhlo.dot_general_v2"): each VHLO op stands for the StableHLO op of its base name.
 * Its attributes carry the op's properties spelled out in full, as tensors and plain values; here
 * they take the IR's normal form (ir.h), the way openxla/stablehlo's VHLO-to-StableHLO
 * legalization does it:
 *   - dimension lists (broadcast_dimensions, permutation, slice bounds, window sizes, ...) become
 *     INTS; convolution, dot, gather and scatter dimension numbers are gathered into their STRUCTs;
 *   - channel ids become channel handles, use_global_device_ids a unit attribute when set,
 *     callee / decomposition / called_computations symbols, custom_call's api_version an integer;
 *   - attributes equal to the default that older VHLO versions imply (and newer ones write out)
 *     are dropped, so a program reads to the same IR whatever version it was written for.
 * An op or op version this reader does not know is refused, naming it and the versions supported. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "hlo/bc_int.h"

/* Every VHLO op base name and the highest version (_vN) this reader knows. */
typedef struct vhlo_opdef {
  const char *name;
  uint8_t maxv;
} vhlo_opdef;

static const vhlo_opdef k_ops[] = {
    {"abs", 1}, {"add", 1}, {"after_all", 1}, {"all_gather", 2}, {"all_reduce", 2}, {"all_to_all", 2}, {"and", 1},
    {"atan2", 1}, {"batch_norm_grad", 1}, {"batch_norm_inference", 1}, {"batch_norm_training", 1},
    {"bitcast_convert", 1}, {"broadcast", 1}, {"broadcast_in_dim", 1}, {"call", 1}, {"case", 1}, {"cbrt", 2},
    {"ceil", 1}, {"cholesky", 1}, {"clamp", 1}, {"collective_broadcast", 1}, {"collective_permute", 1},
    {"compare", 1}, {"complex", 1}, {"composite", 2}, {"concatenate", 1}, {"constant", 1}, {"convert", 1},
    {"convolution", 1}, {"cosine", 2}, {"count_leading_zeros", 1}, {"create_token", 1}, {"cross-replica-sum", 1},
    {"custom_call", 1}, {"divide", 1}, {"dot", 1}, {"dot_general", 2}, {"dynamic_broadcast_in_dim", 1},
    {"dynamic_conv", 2}, {"dynamic_gather", 2}, {"dynamic_iota", 1}, {"dynamic_pad", 1}, {"dynamic_reshape", 1},
    {"dynamic_slice", 1}, {"dynamic_update_slice", 1}, {"einsum", 1}, {"exponential", 2},
    {"exponential_minus_one", 2}, {"fft", 1}, {"floor", 1}, {"func", 1}, {"gather", 2}, {"get_dimension_size", 1},
    {"get_tuple_element", 1}, {"if", 1}, {"imag", 1}, {"infeed", 1}, {"iota", 1}, {"is_finite", 1}, {"log", 2},
    {"log_plus_one", 2}, {"logistic", 2}, {"map", 1}, {"maximum", 1}, {"minimum", 1}, {"multiply", 1},
    {"negate", 1}, {"not", 1}, {"optimization_barrier", 1}, {"or", 1}, {"outfeed", 1}, {"pad", 1},
    {"partition_id", 1}, {"popcnt", 1}, {"power", 1}, {"real", 1}, {"real_dynamic_slice", 1}, {"recv", 2},
    {"reduce", 1}, {"reduce_precision", 1}, {"reduce_scatter", 1}, {"reduce_window", 1}, {"remainder", 1},
    {"replica_id", 1}, {"reshape", 1}, {"return", 1}, {"reverse", 1}, {"rng", 1}, {"rng_bit_generator", 1},
    {"round_nearest_afz", 1}, {"round_nearest_even", 1}, {"rsqrt", 2}, {"scatter", 2}, {"select", 1},
    {"select_and_scatter", 1}, {"send", 2}, {"set_dimension_size", 1}, {"shift_left", 1},
    {"shift_right_arithmetic", 1}, {"shift_right_logical", 1}, {"sign", 1}, {"sine", 2}, {"slice", 1}, {"sort", 1},
    {"sqrt", 2}, {"subtract", 1}, {"tan", 2}, {"tanh", 2}, {"torch_index_select", 1}, {"transpose", 1},
    {"triangular_solve", 1}, {"tuple", 1}, {"unary_einsum", 1}, {"uniform_dequantize", 1},
    {"uniform_quantize", 1}, {"while", 1}, {"xor", 1},
};

/* The attributes of each VHLO op that has any (in any order; all are required: VHLO writes every
 * attribute out). In bytecode >= 5 they are the op's properties, written sorted by name. */
typedef struct vhlo_props {
  const char *op;
  const char *attrs;  /* comma-separated */
} vhlo_props;

#define CONV_ATTRS "lhs_dilation,rhs_dilation,window_reversal,window_strides,input_batch_dimension,input_feature_dimension," \
                   "input_spatial_dimensions,kernel_input_feature_dimension,kernel_output_feature_dimension," \
                   "kernel_spatial_dimensions,output_batch_dimension,output_feature_dimension,output_spatial_dimensions," \
                   "feature_group_count,batch_group_count,precision_config"
#define DOT_ATTRS "lhs_batching_dimensions,rhs_batching_dimensions,lhs_contracting_dimensions,rhs_contracting_dimensions," \
                  "precision_config"
static const vhlo_props k_props[] = {
    {"all_gather_v1", "all_gather_dim,replica_groups,channel_id,use_global_device_ids"},
    {"all_gather_v2", "all_gather_dim,replica_groups,channel_id,use_global_device_ids"},
    {"all_reduce_v1", "replica_groups,channel_id,use_global_device_ids"},
    {"all_reduce_v2", "replica_groups,channel_id,use_global_device_ids"},
    {"all_to_all_v1", "split_dimension,concat_dimension,split_count,replica_groups,channel_id"},
    {"all_to_all_v2", "split_dimension,concat_dimension,split_count,replica_groups,channel_id"},
    {"batch_norm_grad_v1", "epsilon,feature_index"},
    {"batch_norm_inference_v1", "epsilon,feature_index"},
    {"batch_norm_training_v1", "epsilon,feature_index"},
    {"broadcast_in_dim_v1", "broadcast_dimensions"},
    {"broadcast_v1", "broadcast_sizes"},
    {"call_v1", "callee"},
    {"cholesky_v1", "lower"},
    {"collective_broadcast_v1", "replica_groups,channel_id"},
    {"collective_permute_v1", "source_target_pairs,channel_id"},
    {"compare_v1", "comparison_direction,compare_type"},
    {"composite_v1", "name,composite_attributes,decomposition,version"},
    {"composite_v2", "name,composite_attributes,decomposition,version"},
    {"concatenate_v1", "dimension"},
    {"constant_v1", "value"},
    {"convolution_v1", "padding," CONV_ATTRS},
    {"cross-replica-sum_v1", "replica_groups"},
    {"custom_call_v1", "call_target_name,has_side_effect,backend_config,api_version,called_computations,operand_layouts,"
                       "result_layouts,output_operand_aliases"},
    {"dot_general_v1", DOT_ATTRS},
    {"dot_general_v2", DOT_ATTRS ",lhs_precision_type,rhs_precision_type,accumulation_type,lhs_component_count,"
                       "rhs_component_count,num_primitive_operations,allow_imprecise_accumulation"},
    {"dot_v1", "precision_config"},
    {"dynamic_broadcast_in_dim_v1", "broadcast_dimensions,known_expanding_dimensions,known_nonexpanding_dimensions"},
    {"dynamic_conv_v1", "padding," CONV_ATTRS},
    {"dynamic_conv_v2", CONV_ATTRS},
    {"dynamic_gather_v1", "offset_dims,collapsed_slice_dims,start_index_map,index_vector_dim,indices_are_sorted"},
    {"dynamic_gather_v2", "offset_dims,collapsed_slice_dims,operand_batching_dims,start_indices_batching_dims,"
                          "start_index_map,index_vector_dim,indices_are_sorted"},
    {"dynamic_iota_v1", "iota_dimension"},
    {"dynamic_slice_v1", "slice_sizes"},
    {"einsum_v1", "einsum_config"},
    {"fft_v1", "fft_type,fft_length"},
    {"func_v1", "sym_name,function_type,sym_visibility,arg_attrs,res_attrs"},
    {"gather_v1", "offset_dims,collapsed_slice_dims,start_index_map,index_vector_dim,slice_sizes,indices_are_sorted"},
    {"gather_v2", "offset_dims,collapsed_slice_dims,operand_batching_dims,start_indices_batching_dims,start_index_map,"
                  "index_vector_dim,slice_sizes,indices_are_sorted"},
    {"get_dimension_size_v1", "dimension"},
    {"get_tuple_element_v1", "index"},
    {"infeed_v1", "infeed_config,layout"},
    {"iota_v1", "iota_dimension"},
    {"map_v1", "dimensions"},
    {"outfeed_v1", "outfeed_config"},
    {"pad_v1", "edge_padding_low,edge_padding_high,interior_padding"},
    {"recv_v1", "channel_id,channel_type,is_host_transfer"},
    {"reduce_v1", "dimensions"},
    {"reduce_precision_v1", "exponent_bits,mantissa_bits"},
    {"reduce_scatter_v1", "scatter_dimension,replica_groups,channel_id,use_global_device_ids"},
    {"reduce_window_v1", "window_dimensions,window_strides,base_dilations,window_dilations,padding"},
    {"reverse_v1", "dimensions"},
    {"rng_bit_generator_v1", "rng_algorithm"},
    {"rng_v1", "rng_distribution"},
    {"scatter_v1", "update_window_dims,inserted_window_dims,scatter_dims_to_operand_dims,index_vector_dim,"
                   "indices_are_sorted,unique_indices"},
    {"scatter_v2", "update_window_dims,inserted_window_dims,input_batching_dims,scatter_indices_batching_dims,"
                   "scatter_dims_to_operand_dims,index_vector_dim,indices_are_sorted,unique_indices"},
    {"select_and_scatter_v1", "window_dimensions,window_strides,padding"},
    {"send_v1", "channel_id,channel_type,is_host_transfer"},
    {"set_dimension_size_v1", "dimension"},
    {"slice_v1", "start_indices,limit_indices,strides"},
    {"sort_v1", "dimension,is_stable"},
    {"torch_index_select_v1", "dim,batch_dims"},
    {"transpose_v1", "permutation"},
    {"triangular_solve_v1", "left_side,lower,unit_diagonal,transpose_a"},
    {"unary_einsum_v1", "einsum_config"},
    /* the transcendental ops' v2 adds the result accuracy */
    {"cbrt_v2", "result_accuracy"}, {"cosine_v2", "result_accuracy"}, {"exponential_v2", "result_accuracy"},
    {"exponential_minus_one_v2", "result_accuracy"}, {"log_v2", "result_accuracy"},
    {"log_plus_one_v2", "result_accuracy"}, {"logistic_v2", "result_accuracy"}, {"rsqrt_v2", "result_accuracy"},
    {"sine_v2", "result_accuracy"}, {"sqrt_v2", "result_accuracy"}, {"tan_v2", "result_accuracy"},
    {"tanh_v2", "result_accuracy"},
};

static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

int vhlo_prop_names(lm_bc *bc, const char *op, const char **names, int cap, int *n) {
  *n = 0;
  for (size_t i = 0; i < sizeof k_props / sizeof k_props[0]; i++) {
    if (strcmp(k_props[i].op, op)) continue;
    char *list = bc_strdup(bc, k_props[i].attrs, strlen(k_props[i].attrs));
    if (!list) return bc->err->code;
    for (char *save = NULL, *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
      if (*n == cap) return bc_fail(bc, LOOM_PARSE, "vhlo.%s: too many attributes", op);
      names[(*n)++] = t;
    }
    qsort(names, (size_t)*n, sizeof *names, cmp_str); /* ODS writes properties sorted by name */
    return 0;
  }
  return 0;
}

static int version_cmp(int a0, int a1, int a2, int b0, int b1, int b2) {
  if (a0 != b0) return a0 < b0 ? -1 : 1;
  if (a1 != b1) return a1 < b1 ? -1 : 1;
  if (a2 != b2) return a2 < b2 ? -1 : 1;
  return 0;
}

int vhlo_check_version(lm_bc *bc, int major, int minor, int patch, const char *what) {
  int lo[3], hi[3];
  sscanf(LM_VHLO_MIN_VERSION, "%d.%d.%d", &lo[0], &lo[1], &lo[2]);
  sscanf(LM_VHLO_MAX_VERSION, "%d.%d.%d", &hi[0], &hi[1], &hi[2]);
  if (version_cmp(major, minor, patch, hi[0], hi[1], hi[2]) > 0)
    return bc_fail(bc, LOOM_UNSUPPORTED, "StableHLO version %d.%d.%d (%s) is newer than this reader supports (%s to %s)",
                   major, minor, patch, what, LM_VHLO_MIN_VERSION, LM_VHLO_MAX_VERSION);
  if (version_cmp(major, minor, patch, lo[0], lo[1], lo[2]) < 0)
    return bc_fail(bc, LOOM_UNSUPPORTED, "StableHLO version %d.%d.%d (%s) is older than this reader supports (%s to %s)",
                   major, minor, patch, what, LM_VHLO_MIN_VERSION, LM_VHLO_MAX_VERSION);
  return 0;
}

int vhlo_op_name(lm_bc *bc, const char *name, lm_op *op) {
  const char *us = strrchr(name, '_');
  int ver = 0;
  if (us && us[1] == 'v' && us[2] >= '1' && us[2] <= '9') {
    ver = atoi(us + 2);
  } else {
    return bc_fail(bc, LOOM_UNSUPPORTED, "VHLO op vhlo.%s has no version suffix (_vN); this reader knows StableHLO %s "
                   "to %s", name, LM_VHLO_MIN_VERSION, LM_VHLO_MAX_VERSION);
  }
  size_t n = (size_t)(us - name);
  for (size_t i = 0; i < sizeof k_ops / sizeof k_ops[0]; i++) {
    if (strlen(k_ops[i].name) != n || memcmp(k_ops[i].name, name, n)) continue;
    if (ver > k_ops[i].maxv)
      return bc_fail(bc, LOOM_UNSUPPORTED, "VHLO op vhlo.%s is newer than this reader knows (vhlo.%s_v1 to _v%d, "
                     "StableHLO %s to %s)", name, k_ops[i].name, k_ops[i].maxv, LM_VHLO_MIN_VERSION, LM_VHLO_MAX_VERSION);
    char full[96];
    if (!strcmp(k_ops[i].name, "func")) snprintf(full, sizeof full, "func.func");
    else if (!strcmp(k_ops[i].name, "call")) snprintf(full, sizeof full, "func.call");
    else snprintf(full, sizeof full, "stablehlo.%s", k_ops[i].name);
    op->code = (uint16_t)lm_opcode_from_name(full, strlen(full));
    op->name = op->code != LM_OP_UNKNOWN ? lm_opcode_name((lm_opcode)op->code) : bc_strdup(bc, full, strlen(full));
    return op->name ? 0 : bc->err->code;
  }
  return bc_fail(bc, LOOM_UNSUPPORTED, "unknown VHLO op vhlo.%s (this reader knows StableHLO %s to %s)", name,
                 LM_VHLO_MIN_VERSION, LM_VHLO_MAX_VERSION);
}

/* ---- attribute helpers ---- */

int vhlo_generic_attr(lm_bc *bc, const lm_attr *in, lm_attr *out) {
  *out = *in;
  if (in->kind == LM_ATTR_ARRAY && in->n) {
    out->items = bc_array(bc, in->n, sizeof(lm_attr));
    if (!out->items) return bc->err->code;
    for (uint32_t i = 0; i < in->n; i++) LM_TRY(vhlo_generic_attr(bc, &in->items[i], &out->items[i]));
  } else if (in->kind == LM_ATTR_DICT && in->n) {
    out->fields = bc_array(bc, in->n, sizeof(lm_named_attr));
    if (!out->fields) return bc->err->code;
    for (uint32_t i = 0; i < in->n; i++) {
      out->fields[i].name = in->fields[i].name;
      LM_TRY(vhlo_generic_attr(bc, &in->fields[i].value, &out->fields[i].value));
    }
  }
  return 0;
}

/* The attribute list being converted: the op's named attributes, with a "taken" mark so what a
 * special case consumes is not converted again generically. */
typedef struct alist {
  const lm_named_attr *in;
  uint32_t n;
  uint8_t *taken;
  lm_named_attr *out;
  uint32_t nout;
  const lm_op *op;
} alist;

static const lm_attr *peek(alist *l, const char *name) {
  for (uint32_t i = 0; i < l->n; i++)
    if (!l->taken[i] && !strcmp(l->in[i].name, name)) return &l->in[i].value;
  return NULL;
}

static const lm_attr *take(alist *l, const char *name) {
  for (uint32_t i = 0; i < l->n; i++)
    if (!l->taken[i] && !strcmp(l->in[i].name, name)) {
      l->taken[i] = 1;
      return &l->in[i].value;
    }
  return NULL;
}

static void drop(alist *l, const char *name) { (void)take(l, name); }

static int put(alist *l, const char *name, const lm_attr *v) {
  l->out[l->nout].name = name;
  l->out[l->nout].value = *v;
  l->nout++;
  return 0;
}

static int bad(lm_bc *bc, const alist *l, const char *name, const char *want) {
  return bc_fail(bc, LOOM_PARSE, "%s: attribute %s is not %s", l->op->name, name, want);
}

/* An integer list from a DENSE integer tensor (or INTS/ARRAY already), as INTS. */
static int to_ints(lm_bc *bc, const alist *l, const char *name, const lm_attr *in, lm_attr *out) {
  memset(out, 0, sizeof *out);
  out->kind = LM_ATTR_INTS;
  if (in->kind == LM_ATTR_INTS) {
    *out = *in;
    return 0;
  }
  int64_t n = in->kind == LM_ATTR_DENSE ? lm_type_numel(in->type) : in->kind == LM_ATTR_ARRAY ? (int64_t)in->n : -1;
  if (n < 0 || n > (1 << 24)) return bad(bc, l, name, "an integer list");
  out->ints = bc_array(bc, (size_t)n, sizeof(int64_t));
  if (!out->ints) return bc->err->code;
  if (lm_attr_ints(in, out->ints, (int)n) != n) return bad(bc, l, name, "an integer list");
  out->n = (uint32_t)n;
  return 0;
}

static int take_ints(lm_bc *bc, alist *l, const char *name, lm_attr *out, bool *have) {
  const lm_attr *a = take(l, name);
  *have = a != NULL;
  if (!a) {
    memset(out, 0, sizeof *out);
    out->kind = LM_ATTR_INTS;
    out->ints = bc_array(bc, 1, sizeof(int64_t));
    return out->ints ? 0 : bc->err->code;
  }
  return to_ints(bc, l, name, a, out);
}

static bool is_int(const lm_attr *a, int64_t v) { return a && a->kind == LM_ATTR_INT && a->i == v; }
static bool is_bool(const lm_attr *a, bool v) { return a && a->kind == LM_ATTR_BOOL && a->i == (int64_t)v; }
static bool is_empty_array(const lm_attr *a) { return a && a->kind == LM_ATTR_ARRAY && a->n == 0; }
static bool is_empty_string(const lm_attr *a) { return a && a->kind == LM_ATTR_STRING && a->n == 0; }
static bool is_empty_dict(const lm_attr *a) { return a && a->kind == LM_ATTR_DICT && a->n == 0; }
static bool is_empty_tensor(const lm_attr *a) { return a && a->kind == LM_ATTR_DENSE && a->nbytes == 0; }
static bool is_enum(const lm_attr *a, const char *v) { return a && a->kind == LM_ATTR_ENUM && !strcmp(a->s, v); }

/* Every element of an integer tensor equals v (an empty tensor counts). */
static bool is_splat(const lm_attr *a, int64_t v) {
  if (!a || a->kind != LM_ATTR_DENSE) return false;
  int64_t n = lm_type_numel(a->type);
  if (n < 0 || n > 4096) return false;
  int64_t buf[4096];
  if (lm_attr_ints(a, buf, 4096) != n) return false;
  for (int64_t i = 0; i < n; i++)
    if (buf[i] != v) return false;
  return true;
}

static bool is_splat_enum(const lm_attr *a, const char *v) {
  if (!a || a->kind != LM_ATTR_ARRAY) return false;
  for (uint32_t i = 0; i < a->n; i++)
    if (!is_enum(&a->items[i], v)) return false;
  return true;
}

static void drop_if(alist *l, const char *name, bool cond) {
  if (cond) drop(l, name);
}

/* Drops what VHLO writes out but StableHLO treats as absent (VhloLegalizeToStablehlo's list). */
static void drop_defaults(alist *l, uint16_t code) {
  switch (code) {
    case LM_OP_ALL_GATHER: case LM_OP_ALL_REDUCE: case LM_OP_REDUCE_SCATTER:
      drop_if(l, "channel_id", is_int(peek(l, "channel_id"), 0));
      drop_if(l, "use_global_device_ids", is_bool(peek(l, "use_global_device_ids"), false));
      break;
    case LM_OP_ALL_TO_ALL: case LM_OP_COLLECTIVE_PERMUTE: case LM_OP_COLLECTIVE_BROADCAST:
      drop_if(l, "channel_id", is_int(peek(l, "channel_id"), 0));
      break;
    case LM_OP_CHOLESKY: drop_if(l, "lower", is_bool(peek(l, "lower"), false)); break;
    case LM_OP_COMPARE: drop_if(l, "compare_type", is_enum(peek(l, "compare_type"), "NOTYPE")); break;
    case LM_OP_COMPOSITE:
      drop_if(l, "version", is_int(peek(l, "version"), 0));
      drop_if(l, "composite_attributes", is_empty_dict(peek(l, "composite_attributes")));
      break;
    case LM_OP_CONVOLUTION: case LM_OP_DYNAMIC_CONV:
      drop_if(l, "window_strides", is_splat(peek(l, "window_strides"), 1));
      if (code == LM_OP_CONVOLUTION) drop_if(l, "padding", is_splat(peek(l, "padding"), 0));
      drop_if(l, "lhs_dilation", is_splat(peek(l, "lhs_dilation"), 1));
      drop_if(l, "rhs_dilation", is_splat(peek(l, "rhs_dilation"), 1));
      drop_if(l, "window_reversal", is_splat(peek(l, "window_reversal"), 0));
      drop_if(l, "precision_config", is_splat_enum(peek(l, "precision_config"), "DEFAULT"));
      break;
    case LM_OP_CUSTOM_CALL:
      drop_if(l, "has_side_effect", is_bool(peek(l, "has_side_effect"), false));
      drop_if(l, "backend_config", is_empty_string(peek(l, "backend_config")) || is_empty_dict(peek(l, "backend_config")));
      drop_if(l, "api_version", is_enum(peek(l, "api_version"), "API_VERSION_ORIGINAL"));
      drop_if(l, "called_computations", is_empty_array(peek(l, "called_computations")));
      if (is_empty_array(peek(l, "operand_layouts")) && is_empty_array(peek(l, "result_layouts"))) {
        drop(l, "operand_layouts");
        drop(l, "result_layouts");
      }
      drop_if(l, "output_operand_aliases", is_empty_array(peek(l, "output_operand_aliases")));
      break;
    case LM_OP_DOT_GENERAL: case LM_OP_DOT:
      drop_if(l, "precision_config", is_splat_enum(peek(l, "precision_config"), "DEFAULT"));
      break;
    case LM_OP_DYNAMIC_BROADCAST_IN_DIM:
      drop_if(l, "known_expanding_dimensions", is_empty_tensor(peek(l, "known_expanding_dimensions")));
      drop_if(l, "known_nonexpanding_dimensions", is_empty_tensor(peek(l, "known_nonexpanding_dimensions")));
      break;
    case LM_OP_DYNAMIC_GATHER: case LM_OP_GATHER:
      drop_if(l, "indices_are_sorted", is_bool(peek(l, "indices_are_sorted"), false));
      break;
    case LM_OP_INFEED:
      drop_if(l, "infeed_config", is_empty_string(peek(l, "infeed_config")));
      drop_if(l, "layout", is_empty_array(peek(l, "layout")));
      break;
    case LM_OP_OUTFEED: drop_if(l, "outfeed_config", is_empty_string(peek(l, "outfeed_config"))); break;
    case LM_OP_RECV: case LM_OP_SEND: drop_if(l, "is_host_transfer", is_bool(peek(l, "is_host_transfer"), false)); break;
    case LM_OP_REDUCE_WINDOW:
      drop_if(l, "window_strides", is_splat(peek(l, "window_strides"), 1));
      drop_if(l, "base_dilations", is_splat(peek(l, "base_dilations"), 1));
      drop_if(l, "window_dilations", is_splat(peek(l, "window_dilations"), 1));
      drop_if(l, "padding", is_splat(peek(l, "padding"), 0));
      break;
    case LM_OP_SCATTER:
      drop_if(l, "indices_are_sorted", is_bool(peek(l, "indices_are_sorted"), false));
      drop_if(l, "unique_indices", is_bool(peek(l, "unique_indices"), false));
      break;
    case LM_OP_SELECT_AND_SCATTER:
      drop_if(l, "window_strides", is_splat(peek(l, "window_strides"), 1));
      drop_if(l, "padding", is_splat(peek(l, "padding"), 0));
      break;
    case LM_OP_SORT:
      drop_if(l, "dimension", is_int(peek(l, "dimension"), -1));
      drop_if(l, "is_stable", is_bool(peek(l, "is_stable"), false));
      break;
    default: break;
  }
  /* the default result accuracy of the transcendental ops (v2) */
  const lm_attr *ra = peek(l, "result_accuracy");
  if (ra && ra->kind == LM_ATTR_STRUCT && ra->n == 4 && ra->fields[0].value.f == 0 && ra->fields[1].value.f == 0 &&
      ra->fields[2].value.i == 0 && is_enum(&ra->fields[3].value, "DEFAULT"))
    drop(l, "result_accuracy");
}

/* Gathers named INT / INTS attributes into one STRUCT. kinds[i]: 'i' an integer, 'z' one left out
 * when 0, 'l' a list kept even when empty, 'e' a list left out when empty (as StableHLO prints
 * them, and as the text parser then reads them). */
static int implode(lm_bc *bc, alist *l, const char *outname, const char *sname, const char *const *names,
                   const char *kinds, int n, bool required) {
  lm_attr st;
  memset(&st, 0, sizeof st);
  st.kind = LM_ATTR_STRUCT;
  st.s = sname;
  st.fields = bc_array(bc, (size_t)n, sizeof(lm_named_attr));
  if (!st.fields) return bc->err->code;
  bool any = false;
  for (int i = 0; i < n; i++) {
    lm_attr v;
    if (kinds[i] == 'i' || kinds[i] == 'z') {
      const lm_attr *a = take(l, names[i]);
      if (!a) continue;
      if (a->kind != LM_ATTR_INT) return bad(bc, l, names[i], "an integer");
      any = true;
      v = *a;
      if (kinds[i] == 'z' && v.i == 0) continue;
    } else {
      bool have;
      LM_TRY(take_ints(bc, l, names[i], &v, &have));
      any |= have;
      if (kinds[i] == 'e' && v.n == 0) continue;
    }
    st.fields[st.n].name = names[i];
    st.fields[st.n].value = v;
    st.n++;
  }
  if (!any && !required) return 0;
  return put(l, outname, &st);
}

static int channel_handle(lm_bc *bc, alist *l, const lm_attr *id, const lm_attr *type) {
  if (id->kind != LM_ATTR_INT) return bad(bc, l, "channel_id", "an integer");
  lm_attr st;
  memset(&st, 0, sizeof st);
  st.kind = LM_ATTR_STRUCT;
  st.s = "stablehlo.channel_handle";
  st.n = 2;
  st.fields = bc_array(bc, 2, sizeof(lm_named_attr));
  if (!st.fields) return bc->err->code;
  st.fields[0].name = "handle";
  st.fields[0].value = *id;
  st.fields[1].name = "type";
  st.fields[1].value.kind = LM_ATTR_INT;
  st.fields[1].value.i = type ? type->i : 0;
  return put(l, "channel_handle", &st);
}

static int symbol(lm_bc *bc, alist *l, const char *name, const lm_attr *a, lm_attr *out) {
  if (a->kind != LM_ATTR_STRING) return bad(bc, l, name, "a symbol name");
  *out = *a;
  out->kind = LM_ATTR_SYMBOL;
  return 0;
}

/* The dot algorithm: all seven parts, or none of them (all `none`). */
static int dot_algorithm(lm_bc *bc, alist *l) {
  static const char *const names[7] = {"lhs_precision_type", "rhs_precision_type", "accumulation_type",
                                       "lhs_component_count", "rhs_component_count", "num_primitive_operations",
                                       "allow_imprecise_accumulation"};
  const lm_attr *v[7];
  int nnone = 0, npresent = 0;
  for (int i = 0; i < 7; i++) {
    v[i] = take(l, names[i]);
    if (v[i]) npresent++;
    if (v[i] && v[i]->kind == LM_ATTR_ENUM && v[i]->s && !strcmp(v[i]->s, "none")) nnone++; /* bc_attr.c reads a none type so */
  }
  if (npresent == 0 || nnone == npresent) return 0;
  if (nnone || npresent != 7) return bc_fail(bc, LOOM_PARSE, "%s: a dot algorithm needs all seven of its parts", l->op->name);
  lm_attr st;
  memset(&st, 0, sizeof st);
  st.kind = LM_ATTR_STRUCT;
  st.s = "stablehlo.dot_algorithm";
  st.n = 7;
  st.fields = bc_array(bc, 7, sizeof(lm_named_attr));
  if (!st.fields) return bc->err->code;
  for (int i = 0; i < 7; i++) {
    st.fields[i].name = names[i];
    st.fields[i].value = *v[i];
  }
  return put(l, "algorithm", &st);
}

typedef struct list_attr {
  uint16_t code;
  const char *names[4];
} list_attr;

/* Attributes StableHLO holds as integer arrays (DenseI64ArrayAttr / DenseBoolArrayAttr). */
static const list_attr k_lists[] = {
    {LM_OP_FFT, {"fft_length"}},
    {LM_OP_BROADCAST, {"broadcast_sizes"}},
    {LM_OP_DYNAMIC_SLICE, {"slice_sizes"}},
    {LM_OP_REVERSE, {"dimensions"}},
    {LM_OP_TRANSPOSE, {"permutation"}},
    {LM_OP_PAD, {"edge_padding_low", "edge_padding_high", "interior_padding"}},
    {LM_OP_SLICE, {"start_indices", "limit_indices", "strides"}},
    {LM_OP_BROADCAST_IN_DIM, {"broadcast_dimensions"}},
    {LM_OP_DYNAMIC_BROADCAST_IN_DIM, {"broadcast_dimensions", "known_expanding_dimensions", "known_nonexpanding_dimensions"}},
    {LM_OP_SELECT_AND_SCATTER, {"window_dimensions", "window_strides"}},
    {LM_OP_REDUCE_WINDOW, {"window_dimensions", "window_strides", "base_dilations", "window_dilations"}},
    {LM_OP_MAP, {"dimensions"}},
    {LM_OP_REDUCE, {"dimensions"}},
    {LM_OP_GATHER, {"slice_sizes"}},
    {LM_OP_CONVOLUTION, {"lhs_dilation", "rhs_dilation", "window_strides", "window_reversal"}},
    {LM_OP_DYNAMIC_CONV, {"lhs_dilation", "rhs_dilation", "window_strides", "window_reversal"}},
};

int vhlo_op_attrs(lm_bc *bc, lm_op *op, const lm_named_attr *in, uint32_t nin) {
  alist L = {in, nin, NULL, NULL, 0, op};
  alist *l = &L;
  L.taken = calloc(nin ? nin : 1, 1);
  if (!L.taken) return bc_fail(bc, LOOM_NO_MEMORY, "out of host memory");
  L.out = bc_array(bc, nin + 2, sizeof(lm_named_attr));
  int rc = L.out ? 0 : bc->err->code;
  if (rc < 0) goto out;
  drop_defaults(l, op->code);
  switch (op->code) {
    case LM_OP_CONVOLUTION: case LM_OP_DYNAMIC_CONV: {
      static const char *const n[9] = {"input_batch_dimension", "input_feature_dimension", "input_spatial_dimensions",
                                       "kernel_input_feature_dimension", "kernel_output_feature_dimension",
                                       "kernel_spatial_dimensions", "output_batch_dimension", "output_feature_dimension",
                                       "output_spatial_dimensions"};
      rc = implode(bc, l, "dimension_numbers", "stablehlo.conv", n, "iiliiliil", 9, true);
      break;
    }
    case LM_OP_DOT_GENERAL: {
      static const char *const n[4] = {"lhs_batching_dimensions", "rhs_batching_dimensions",
                                       "lhs_contracting_dimensions", "rhs_contracting_dimensions"};
      rc = implode(bc, l, "dot_dimension_numbers", "stablehlo.dot", n, "llll", 4, true);
      if (rc == 0) rc = dot_algorithm(bc, l);
      break;
    }
    case LM_OP_GATHER: case LM_OP_DYNAMIC_GATHER: {
      static const char *const n[6] = {"offset_dims", "collapsed_slice_dims", "operand_batching_dims",
                                       "start_indices_batching_dims", "start_index_map", "index_vector_dim"};
      rc = implode(bc, l, "dimension_numbers", "stablehlo.gather", n, "eeeeez", 6, true);
      break;
    }
    case LM_OP_SCATTER: {
      static const char *const n[6] = {"update_window_dims", "inserted_window_dims", "input_batching_dims",
                                       "scatter_indices_batching_dims", "scatter_dims_to_operand_dims",
                                       "index_vector_dim"};
      rc = implode(bc, l, "scatter_dimension_numbers", "stablehlo.scatter", n, "eeeeez", 6, true);
      break;
    }
    case LM_OP_SEND: case LM_OP_RECV: {
      const lm_attr *id = take(l, "channel_id"), *type = take(l, "channel_type");
      if (id) rc = channel_handle(bc, l, id, type);
      break;
    }
    case LM_OP_ALL_GATHER: case LM_OP_ALL_REDUCE: case LM_OP_ALL_TO_ALL: case LM_OP_COLLECTIVE_PERMUTE:
    case LM_OP_REDUCE_SCATTER: case LM_OP_COLLECTIVE_BROADCAST: {
      const lm_attr *id = take(l, "channel_id");
      if (id) rc = channel_handle(bc, l, id, NULL);
      const lm_attr *g = take(l, "use_global_device_ids");
      if (rc == 0 && g) {
        if (g->kind != LM_ATTR_BOOL) rc = bad(bc, l, "use_global_device_ids", "a boolean");
        else if (g->i) put(l, "use_global_device_ids", &(lm_attr){.kind = LM_ATTR_UNIT});
      }
      break;
    }
    case LM_OP_CUSTOM_CALL: {
      const lm_attr *cc = take(l, "called_computations");
      if (cc) {
        if (cc->kind != LM_ATTR_ARRAY) { rc = bad(bc, l, "called_computations", "a list"); break; }
        lm_attr v = *cc;
        v.items = bc_array(bc, cc->n, sizeof(lm_attr));
        if (!v.items) { rc = bc->err->code; break; }
        for (uint32_t i = 0; i < cc->n && rc == 0; i++) rc = symbol(bc, l, "called_computations", &cc->items[i], &v.items[i]);
        if (rc == 0) put(l, "called_computations", &v);
      }
      const lm_attr *api = take(l, "api_version");
      if (rc == 0 && api) {
        static const char *const apis[] = {"API_VERSION_UNSPECIFIED", "API_VERSION_ORIGINAL",
                                           "API_VERSION_STATUS_RETURNING", "API_VERSION_STATUS_RETURNING_UNIFIED",
                                           "API_VERSION_TYPED_FFI"};
        int k = -1;
        for (int i = 0; i < 5; i++)
          if (is_enum(api, apis[i])) k = i;
        if (k < 0) rc = bad(bc, l, "api_version", "a custom call API version");
        else put(l, "api_version", &(lm_attr){.kind = LM_ATTR_INT, .i = k});
      }
      break;
    }
    case LM_OP_COMPOSITE: {
      const lm_attr *d = take(l, "decomposition");
      lm_attr v;
      if (d && (rc = symbol(bc, l, "decomposition", d, &v)) == 0) put(l, "decomposition", &v);
      break;
    }
    case LM_OP_FUNC_CALL: {
      const lm_attr *d = take(l, "callee");
      lm_attr v;
      if (d && (rc = symbol(bc, l, "callee", d, &v)) == 0) put(l, "callee", &v);
      break;
    }
    default: break;
  }
  for (size_t k = 0; rc == 0 && k < sizeof k_lists / sizeof k_lists[0]; k++) {
    if (k_lists[k].code != op->code) continue;
    for (int j = 0; j < 4 && k_lists[k].names[j] && rc == 0; j++) {
      const lm_attr *a = take(l, k_lists[k].names[j]);
      lm_attr v;
      if (a && (rc = to_ints(bc, l, k_lists[k].names[j], a, &v)) == 0) put(l, k_lists[k].names[j], &v);
    }
  }
  for (uint32_t i = 0; i < nin && rc == 0; i++) {
    if (L.taken[i]) continue;
    L.out[L.nout].name = in[i].name;
    rc = vhlo_generic_attr(bc, &in[i].value, &L.out[L.nout].value);
    L.nout++;
  }
  op->attrs = L.out;
  op->nattrs = L.nout;
out:
  free(L.taken);
  return rc;
}
