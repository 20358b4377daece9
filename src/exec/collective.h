/* The executor's view of collective communication: the hooks (struct lm_collectives, forward-
 * declared in exec.h) that whoever runs a program on several devices provides through
 * lm_run_opts.coll / coll_user — the worker's data plane for a launch (src/worker/spmd_coll.h), the
 * local runner's in-process devices (src/worker/spmd_local.h).
 *
 * The collective kernels (collective.c) do everything that depends on the program: they read
 * replica_groups / source_target_pairs / channel_handle / use_global_device_ids, form the
 * caller's process group (spec 'Process groups': cross_replica, cross_partition,
 * cross_replica_and_partition, flattened_ids), check it, choose the reduction (a built-in op when
 * the body is one, else a combine callback that evaluates the body), and lay tensors out as the
 * contiguous blocks exchanged here. A hook only moves and combines bytes among the members of a
 * group. Nothing here depends on the data plane (lm_exec does not link it). */
#ifndef LM_EXEC_COLLECTIVE_H
#define LM_EXEC_COLLECTIVE_H

#include <stddef.h>
#include <stdint.h>
#include "common/dtype.h"
#include "common/err.h"

/* Reductions. The built-in ops have the semantics of the StableHLO ops of the same names on every
 * element type: integers wrap; i1 add/maximum is or, multiply/minimum is and; f16/bf16 are
 * computed in f32 and rounded once per combine; maximum/minimum propagate NaN and order
 * -0 < +0; complex maximum/minimum compare (real, imaginary) lexicographically; and/or/xor are for
 * integers and i1 only. The values are those of lm_dp_op (dataplane.h) so a hook maps them 1:1. */
typedef enum lm_coll_op {
  LM_COLL_SUM = 1, /* stablehlo.add */
  LM_COLL_PROD,    /* stablehlo.multiply */
  LM_COLL_MIN,     /* stablehlo.minimum */
  LM_COLL_MAX,     /* stablehlo.maximum */
  LM_COLL_AND,
  LM_COLL_OR,
  LM_COLL_XOR,
  LM_COLL_CUSTOM,  /* any other body: the combine callback */
} lm_coll_op;

/* out[i] = body(lhs[i], rhs[i]) for i < count; out may alias lhs or rhs element for element.
 * Returns 0 or a negative loom status (message in err). It runs the op's reduction region with
 * the calling device's run state, so a hook must call it only on the thread that made the
 * collective call, during that call. Same signature as lm_dp_combine_fn. */
typedef int (*lm_coll_combine_fn)(void *user, const void *lhs, const void *rhs, void *out, size_t count,
                                  lm_err *err);

typedef struct lm_coll_reduction {
  lm_dtype dtype;              /* element type of the buffers */
  lm_coll_op op;
  lm_coll_combine_fn combine;  /* LM_COLL_CUSTOM only */
  void *combine_user;          /* passed to combine */
} lm_coll_reduction;

/* One collective call as the executor sees it. Every member of the group makes the same call (same
 * group list, seq and sizes), each on its own thread. */
typedef struct lm_coll_call {
  const uint32_t *group;  /* the process group in spec order: process ids
                             (replica_id * num_partitions + partition_id); the order is the
                             reduction order and the block order */
  uint32_t size;          /* members (>= 1) */
  uint32_t rank;          /* the caller's index in group */
  uint64_t seq;           /* index of this call among the collective calls the run has made so far
                             (0, 1, 2, ... counted per run, while loops included): every process
                             of an SPMD program makes the same sequence of calls, so (group, seq)
                             names one call; a hook combines it with a launch tag */
  volatile int *cancel;   /* the run's cancel flag (lm_run_opts.cancel), may be NULL */
  const char *what;       /* op name for messages ("stablehlo.all_reduce") */
} lm_coll_call;

/* The hooks. Each returns 0 or a negative loom status with a message in err; on failure the run
 * fails with it (prefixed with the op and its location). A NULL hook makes the ops that need it
 * fail with LOOM_UNSUPPORTED. `user` is lm_run_opts.coll_user. Buffers never overlap unless said. */
struct lm_collectives {
  size_t struct_size;     /* sizeof(struct lm_collectives): fields may be appended */
  /* recv[i] = reduction of every member's send[i] in group order, i < count (send may equal recv). */
  int (*all_reduce)(void *user, const lm_coll_call *c, const void *send, void *recv, size_t count,
                    const lm_coll_reduction *red, lm_err *err);
  /* recv[j*bytes .. (j+1)*bytes) = member j's send (bytes each). */
  int (*all_gather)(void *user, const lm_coll_call *c, const void *send, void *recv, size_t bytes, lm_err *err);
  /* send holds size blocks of count elements; recv (count elements) = reduction over members of
   * their block `rank`, in group order. */
  int (*reduce_scatter)(void *user, const lm_coll_call *c, const void *send, void *recv, size_t count,
                        const lm_coll_reduction *red, lm_err *err);
  /* send holds size blocks of bytes; block j of recv = block `rank` of member j's send. */
  int (*all_to_all)(void *user, const lm_coll_call *c, const void *send, void *recv, size_t bytes, lm_err *err);
  /* The caller sends its bytes to member send_to (-1: none) and receives from member recv_from
   * (-1: none; recv is then zero-filled). The pairs of all members agree. */
  int (*collective_permute)(void *user, const lm_coll_call *c, const void *send, void *recv, size_t bytes,
                            int64_t send_to, int64_t recv_from, lm_err *err);
  /* recv = member root's send (send is read on the root only; recv may equal send). */
  int (*broadcast)(void *user, const lm_coll_call *c, uint32_t root, const void *send, void *recv, size_t bytes,
                   lm_err *err);
};

#endif
