/* dot_general and convolution: dimension numbers, the fast kernels (OpenBLAS) and the naive
 * reference kernels kept beside them for tests (test_exec_dot.c compares the two). */
#ifndef LM_EXEC_DOT_H
#define LM_EXEC_DOT_H

#include "exec/kernel.h"

/* spec 'dot_general': batching and contracting dimensions of each side */
typedef struct lm_dot_dims {
  int nb, nc;
  int64_t lb[LM_MAX_RANK], rb[LM_MAX_RANK]; /* batching dims, paired */
  int64_t lc[LM_MAX_RANK], rc[LM_MAX_RANK]; /* contracting dims, paired */
} lm_dot_dims;

/* Reads the dimension numbers of a dot_general (dot_dimension_numbers) or legacy dot op and checks
 * them against the operand and result types (spec 'dot_general' C1-C13; the result element type
 * may differ from the operands', e.g. bf16 x bf16 -> f32, i8 x i8 -> i32). */
int lm_dot_dims_get(const lm_op *op, const lm_type *lhs, const lm_type *rhs, const lm_type *res, lm_dot_dims *d,
                    lm_err *err);

/* Reference: result[b, m, n] = sum_k lhs * rhs, accumulated in double / complex double / wrapping
 * int64, elements converted to the result type first. Any element types. */
void lm_dot_general_ref(const lm_buffer *lhs, const lm_buffer *rhs, const lm_dot_dims *d, lm_buffer *out);

/* spec 'convolution' parameters, resolved to sizes and element strides */
typedef struct lm_conv {
  int ns;                                  /* spatial dims */
  int64_t N, C, O, KI;                     /* batch, input features, output features, kernel input features */
  int64_t G, BG;                           /* feature_group_count, batch_group_count */
  int64_t in_sp[LM_MAX_RANK], k_sp[LM_MAX_RANK], out_sp[LM_MAX_RANK];
  int64_t stride[LM_MAX_RANK], pad_lo[LM_MAX_RANK], ldil[LM_MAX_RANK], rdil[LM_MAX_RANK];
  bool rev[LM_MAX_RANK];
  int64_t ls_b, ls_f, ls_s[LM_MAX_RANK];   /* lhs element strides by role */
  int64_t rs_i, rs_o, rs_s[LM_MAX_RANK];   /* rhs */
  int64_t os_b, os_f, os_s[LM_MAX_RANK];   /* result */
} lm_conv;

/* Reads and checks a convolution op (spec 'convolution' C1-C28). */
int lm_conv_get(const lm_op *op, const lm_type *lhs, const lm_type *rhs, const lm_type *res, lm_conv *c, lm_err *err);

/* Reference convolution: direct loops, accumulating in double / complex double / wrapping int64. */
void lm_conv_ref(const lm_buffer *lhs, const lm_buffer *rhs, const lm_conv *c, lm_buffer *out);

/* dst = src with dims permuted (dst dim i is src dim perm[i]), both row-major, elements of esize
 * bytes; st is the source type. */
void lm_permute_copy(void *dst, const void *src, const lm_type *st, const int64_t *perm, size_t esize);

/* Threads OpenBLAS uses for each call (process-wide). A process that runs several devices at
 * once (a worker) gives each call its share of the cores: OpenBLAS's own pool per call, on top of
 * one thread per busy device, oversubscribes the cores (2x slower steps on 4 devices over 2
 * cores). Returns the count set; OPENBLAS_NUM_THREADS or OMP_NUM_THREADS in the environment win
 * (0 returned: left as they say). */
int lm_blas_share_cores(uint32_t busy_devices);

#endif
