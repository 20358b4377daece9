/* Sharding arithmetic shared by the client, the controller and the workers: a device mesh with
 * array dimensions split over its axes (the layout of include/loom/loom.h's loom_sharding),
 * validation against a shape, the index range of each device's shard, and copies between a
 * global row-major array and one shard. Pure functions; no allocation except where stated. */
#ifndef LM_SHARDING_H
#define LM_SHARDING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "common/err.h"

#define LM_SHARD_MAX_RANK 16   /* = LOOM_MAX_RANK = LM_MAX_RANK */
#define LM_MESH_MAX_AXES 8     /* = LOOM_MAX_MESH_AXES */
#define LM_SHARD_MAX_DEVICES 65536

typedef struct lm_sharding {
  int32_t mesh_rank;                               /* 0 = one device (mesh [1]) */
  int64_t mesh_shape[LM_MESH_MAX_AXES];
  uint32_t ndev;                                   /* product of mesh_shape (1 when mesh_rank 0) */
  const uint32_t *devices;                         /* [ndev] ids, mesh row-major (not owned) */
  int8_t dim_axes[LM_SHARD_MAX_RANK][LM_MESH_MAX_AXES]; /* per dim, axes major to minor, -1 ends */
} lm_sharding;

/* Mesh [1] (or none), no dims split, devices NULL: fill devices/ndev before use. */
void lm_sharding_init(lm_sharding *s);

/* Checks s against an array of the given rank/dims: mesh sizes >= 1 with product ndev (at most
 * LM_SHARD_MAX_DEVICES), devices distinct (when devices != NULL), axes in range and used at most
 * once, no axes on dims >= rank, every split dimension divisible by its axes' total size.
 * LOOM_INVALID_ARGUMENT naming the problem ("dimension 0 (size 10) does not split into 4
 * equal shards"). */
int lm_sharding_check(const lm_sharding *s, int rank, const int64_t *dims, lm_err *err);

/* Number of shards dimension d is split into (product of its axes' sizes). */
int64_t lm_sharding_dim_parts(const lm_sharding *s, int d);

/* The shard of device index i (0..ndev-1; its position in the mesh, row-major): offsets and
 * dims of its region of the global array. s must have passed lm_sharding_check. */
void lm_sharding_shard(const lm_sharding *s, int rank, const int64_t *dims, uint32_t i, int64_t *offsets,
                       int64_t *shard_dims);

/* True when the region [offsets, offsets + sdims) of a row-major array of dims is one
 * contiguous byte range; *first_elem gets its first element's index. */
bool lm_region_contiguous(int rank, const int64_t *dims, const int64_t *offsets, const int64_t *sdims,
                          uint64_t *first_elem);

/* Copies a region between a global row-major array and a dense row-major shard buffer:
 * to_shard ? shard <- global[region] : global[region] <- shard. esize = bytes per element. */
void lm_region_copy(int rank, const int64_t *dims, const int64_t *offsets, const int64_t *sdims, size_t esize,
                    void *global, void *shard, bool to_shard);

/* Product of dims[0..rank) into *out; -1 on overflow (or a negative dim). */
int lm_dims_numel(int rank, const int64_t *dims, uint64_t *out);

/* True when the sharding splits no dimension (every device has the whole array). */
bool lm_sharding_is_replicated(const lm_sharding *s);

#endif
