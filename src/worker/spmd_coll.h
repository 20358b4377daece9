/* The executor's collective hooks (src/exec/collective.h) over the worker's data plane
 * (src/dataplane/dataplane.h), for one SPMD launch: SPMD process ids become (worker, device)
 * members, the executor's per-run call index becomes a data-plane tag unique in the cluster, and
 * reductions map 1:1 (a body that is not a built-in op goes through the executor's combine
 * callback, on the calling device's thread). Used by the worker's device threads and by the
 * local runner (spmd_local.h). */
#ifndef LM_WORKER_SPMD_COLL_H
#define LM_WORKER_SPMD_COLL_H

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

/* The tag of call `seq` of launch `launch_tag` (exposed for tests). */
uint64_t lm_spmd_coll_tag(uint64_t launch_tag, uint64_t seq);

#endif
