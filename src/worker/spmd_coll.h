/* The executor's collective hooks (src/exec/collective.h) over the worker's data plane
 * (src/dataplane/dataplane.h), for one SPMD launch: SPMD process ids become (worker, device)
 * members, the executor's per-run call index becomes a data-plane tag unique in the cluster, and
 * reductions map 1:1 (a body that is not a built-in op goes through the executor's combine
 * callback, on the calling device's thread). Used by the worker's device threads and by the
 * local runner (spmd_local.h). */
#ifndef LM_WORKER_SPMD_COLL_H
#define LM_WORKER_SPMD_COLL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include "common/err.h"
#include "dataplane/dataplane.h"
#include "exec/exec.h"

typedef struct lm_spmd_coll lm_spmd_coll;

/* One object per (launch attempt, worker), shared by that worker's device threads running the
 * launch; thread-safe. procs[i] = the (worker id, local device index) that runs SPMD process i,
 * where process i = replica_id * num_partitions + partition_id (nprocs = num_replicas *
 * num_partitions, at most 65535); copied. launch_tag must be unique per launch attempt in the
 * cluster (e.g. the global sequence number, with an attempt number folded in on replay): the
 * tag of a call is launch_tag << 24 | (its index in the run mod 2^24), so launch_tag must be
 * below 2^40. dp must outlive the object. Fails on a member listed twice or a bad argument. */
int lm_spmd_coll_create(lm_dp *dp, const lm_dp_member *procs, uint32_t nprocs, uint64_t launch_tag,
                        lm_spmd_coll **out, lm_err *err);
/* Sets opts->coll and opts->coll_user so that lm_program_run's collectives go through c. The
 * caller still sets the device, replica_id, partition_id, num_replicas and num_partitions (and
 * cancel: a set flag also stops a collective waiting for peers). */
void lm_spmd_coll_opts(lm_spmd_coll *c, lm_run_opts *opts);
/* Releases the data-plane groups it holds. No run may still use it. NULL is a no-op. */
void lm_spmd_coll_destroy(lm_spmd_coll *c);

/* ---- accounting (metrics and traces, docs/observability.md) ----
 * Every hook call is timed (two monotonic clock readings) and counted. */
enum {
  LM_SPMD_ALL_REDUCE, LM_SPMD_ALL_GATHER, LM_SPMD_REDUCE_SCATTER, LM_SPMD_ALL_TO_ALL,
  LM_SPMD_COLLECTIVE_PERMUTE, LM_SPMD_BROADCAST, LM_SPMD_NOPS
};
/* The op's name as the metrics label it ("all_reduce"). */
const char *lm_spmd_op_name(int op);

/* A worker's totals since it started, over all its launches (relaxed atomics). `bytes` are the
 * operand bytes each device put into its calls: all_reduce and reduce_scatter the whole operand,
 * all_gather the device's block, all_to_all all its blocks, collective_permute the bytes it sends
 * (0 when it sends none), broadcast the bytes of the root (others: 0). */
typedef struct lm_spmd_coll_stats {
  _Atomic uint64_t calls[LM_SPMD_NOPS], bytes[LM_SPMD_NOPS];
  _Atomic uint64_t nanos;      /* time spent inside the calls, summed over devices */
} lm_spmd_coll_stats;
/* Adds c's calls to s from now on (s outlives c). */
void lm_spmd_coll_set_stats(lm_spmd_coll *c, lm_spmd_coll_stats *s);

/* One device's collective calls during one run, for a trace: totals, and the first
 * LM_SPMD_MAX_SPANS calls with their times (monotonic ns, the clock of uv_hrtime). */
#define LM_SPMD_MAX_SPANS 16
typedef struct lm_spmd_coll_span {
  uint64_t start, dur, bytes;
  int op;
} lm_spmd_coll_span;
typedef struct lm_spmd_coll_rec {
  uint64_t nanos, calls, bytes;
  lm_spmd_coll_span spans[LM_SPMD_MAX_SPANS];
  uint32_t nspans;
} lm_spmd_coll_rec;
/* The calling thread's collective calls go into rec until this is called with NULL. */
void lm_spmd_coll_record(lm_spmd_coll_rec *rec);

/* The tag of call `seq` of launch `launch_tag` (exposed for tests). */
uint64_t lm_spmd_coll_tag(uint64_t launch_tag, uint64_t seq);

#endif
