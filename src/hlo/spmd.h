/* SPMD analysis of a module: which form it runs in across devices, the global type and sharding
 * of each argument and result, and the per-device program it implies (DESIGN.md §4).
 *
 * Forms (all read from the module itself):
 *   single      mhlo.num_replicas = mhlo.num_partitions = 1 and no sdy.manual_computation:
 *               one process, the module as written.
 *   replicas    mhlo.num_replicas = R > 1, one partition, no manual computation (pmap-style):
 *               R processes run the module as written, each on its own per-replica values. An
 *               argument or result of type T is, globally, the array [R, T...] split along
 *               dimension 0 (one row per replica).
 *   partitions  main is made of sdy.manual_computation ops over one sdy.mesh that cover every
 *               mesh axis (shard_map, and the way current JAX lowers jax.pmap): P =
 *               mhlo.num_partitions processes; process p is the mesh device whose id is p
 *               (the mesh's device_ids, else its row-major position). Each process runs the
 *               bodies on its local shards; arguments and results are sharded as the manual
 *               computations' in_shardings / out_shardings say.
 *   partitions, partitioned (info->partitioned)
 *               mhlo.num_partitions = P > 1, one replica, no manual computation: a global program
 *               with sharding annotations (jax.jit with NamedSharding). The partitioner
 *               (partition.h) chooses every value's sharding and writes the per-device program.
 * Anything else that spans several devices (ops on sharded global values outside manual
 * computations, partially manual computations, several replicas and partitions without manual
 * computations) fails with LOOM_UNSUPPORTED saying so. */
#ifndef LM_HLO_SPMD_H
#define LM_HLO_SPMD_H

#include <stdbool.h>
#include <stdint.h>
#include "common/sharding.h"
#include "hlo/ir.h"

typedef enum lm_spmd_form { LM_SPMD_SINGLE = 0, LM_SPMD_REPLICAS = 1, LM_SPMD_PARTITIONS = 2 } lm_spmd_form;

const char *lm_spmd_form_name(lm_spmd_form f); /* "single", "replicas", "partitions" */

/* An argument or result of main as the client sees it. */
typedef struct lm_spmd_value {
  lm_type global;            /* the whole array */
  lm_type local;             /* what one process's program takes or returns */
  lm_sharding sh;            /* over processes: sh.devices[m] = the process at mesh position m */
} lm_spmd_value;

typedef struct lm_spmd_info {
  lm_spmd_form form;
  int64_t num_replicas, num_partitions;
  uint32_t nproc;            /* num_replicas * num_partitions */
  uint32_t ninputs, noutputs;
  lm_spmd_value *inputs;     /* [ninputs] */
  lm_spmd_value *outputs;    /* [noutputs] */
  uint32_t *mesh_procs;      /* [nproc]: the process at each mesh position (what sh.devices point to) */
  bool partitioned;          /* an annotated global program: the partitioner (partition.h) makes the
                                per-device program and chose the shardings above */
} lm_spmd_info;

/* Analyzes m's function "main". On success *out is a new info (free with lm_spmd_info_free).
 * Errors name the problem and, where there is one, the op's location: LOOM_UNSUPPORTED for
 * forms Loom cannot run, LOOM_VERIFY for inconsistent shardings or local types. */
int lm_spmd_analyze(const lm_module *m, lm_spmd_info **out, lm_err *err);
void lm_spmd_info_free(lm_spmd_info *info); /* NULL is a no-op */

/* Rewrites m in place into the program one process runs: for the partitions form, main takes
 * the local shards, the manual computations' bodies are inlined into it in order, and it
 * returns the local results; other forms are left as they are. m must have passed
 * lm_spmd_analyze. The module stays owned by the caller; new parts live in its arena. */
int lm_spmd_localize(lm_module *m, lm_err *err);

#endif
