/* The SPMD partitioner (docs/partitioner.md): turns an annotated global program (sdy.mesh and
 * sdy.sharding on @main's arguments and results, sdy.sharding_constraint / sdy.reshard in the
 * body, mhlo.num_partitions = N, no sdy.manual_computation) into the program one of the N
 * processes runs: local shapes, explicit collectives where data must move.
 *
 * Steps: (1) propagation: every top-level value of @main gets a sharding, starting from the
 * arguments and constraints (fixed), forwards and backwards through the per-op rules until
 * nothing changes, then from the results' annotations, and what is left is replicated;
 * (2) lowering: each op is rewritten for local shards; operands it needs in another sharding are
 * resharded (all_gather, all_to_all, a local dynamic_slice of a replicated value), partial
 * results of dot_general and reduce over sharded dims are combined with all_reduce or
 * reduce_scatter, and an op without a rule is computed replicated (its operands gathered) and
 * its result sliced again. The result is StableHLO text that Loom's parser reads back.
 *
 * Process p (= partition_id) is the mesh device whose id is p (the mesh's device_ids, else its
 * row-major position), as for manual computations (spmd.h). */
#ifndef LM_HLO_PARTITION_H
#define LM_HLO_PARTITION_H

#include <stdbool.h>
#include "hlo/ir.h"
#include "hlo/spmd.h"

/* True when m needs the partitioner: mhlo.num_partitions > 1, mhlo.num_replicas = 1 and no
 * sdy.manual_computation anywhere. */
bool lm_partition_wanted(const lm_module *m);

/* Partitions m's @main. info (allocated by the caller with ninputs/noutputs set, num_partitions
 * and nproc filled) gets every input's and output's global/local type and sharding and its
 * mesh_procs. When local_text is not NULL it gets the per-device module (malloc'd StableHLO
 * text); when explain is not NULL it gets the report `loom compile --explain` prints (malloc'd):
 * per op the sharding chosen, each collective with the bytes it moves, every fallback.
 * Errors: LOOM_UNSUPPORTED (constructs the partitioner does not handle, named), LOOM_VERIFY. */
int lm_partition(const lm_module *m, lm_spmd_info *info, char **local_text, char **explain, lm_err *err);

#endif
