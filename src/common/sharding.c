/* Sharding arithmetic: validation, shard regions per device, region copies. */
#include <stdio.h>
#include <string.h>
#include "common/sharding.h"

void lm_sharding_init(lm_sharding *s) {
  memset(s, 0, sizeof *s);
  s->ndev = 1;
  memset(s->dim_axes, -1, sizeof s->dim_axes);
}

int lm_dims_numel(int rank, const int64_t *dims, uint64_t *out) {
  uint64_t n = 1;
  for (int i = 0; i < rank; i++) {
    if (dims[i] < 0 || __builtin_mul_overflow(n, (uint64_t)dims[i], &n)) return -1;
  }
  *out = n;
  return 0;
}

int64_t lm_sharding_dim_parts(const lm_sharding *s, int d) {
  int64_t k = 1;
  if (d < 0 || d >= LM_SHARD_MAX_RANK) return 1;
  for (int j = 0; j < LM_MESH_MAX_AXES && s->dim_axes[d][j] >= 0; j++)
    if (s->dim_axes[d][j] < s->mesh_rank) k *= s->mesh_shape[s->dim_axes[d][j]];
  return k;
}

bool lm_sharding_is_replicated(const lm_sharding *s) {
  for (int d = 0; d < LM_SHARD_MAX_RANK; d++)
    if (s->dim_axes[d][0] >= 0) return false;
  return true;
}

int lm_sharding_check(const lm_sharding *s, int rank, const int64_t *dims, lm_err *err) {
  if (rank < 0 || rank > LM_SHARD_MAX_RANK)
    return lm_errf(err, LOOM_INVALID_ARGUMENT, "rank %d is outside 0..%d", rank, LM_SHARD_MAX_RANK);
  if (s->mesh_rank < 0 || s->mesh_rank > LM_MESH_MAX_AXES)
    return lm_errf(err, LOOM_INVALID_ARGUMENT, "mesh rank %d is outside 0..%d", s->mesh_rank, LM_MESH_MAX_AXES);
  uint64_t n = 1;
  for (int a = 0; a < s->mesh_rank; a++) {
    if (s->mesh_shape[a] < 1)
      return lm_errf(err, LOOM_INVALID_ARGUMENT, "mesh axis %d has size %lld (must be at least 1)", a,
                     (long long)s->mesh_shape[a]);
    if (__builtin_mul_overflow(n, (uint64_t)s->mesh_shape[a], &n) || n > LM_SHARD_MAX_DEVICES)
      return lm_errf(err, LOOM_INVALID_ARGUMENT, "the mesh has more than %d devices", LM_SHARD_MAX_DEVICES);
  }
  if (n != s->ndev)
    return lm_errf(err, LOOM_INVALID_ARGUMENT, "the mesh has %llu positions but %u devices were given",
                   (unsigned long long)n, s->ndev);
  if (s->devices) {
    for (uint32_t i = 0; i < s->ndev; i++) /* longer lists: the controller checks them against its table */
      for (uint32_t j = i + 1; j < s->ndev && s->ndev <= 1024; j++)
        if (s->devices[i] == s->devices[j])
          return lm_errf(err, LOOM_INVALID_ARGUMENT, "device %u appears twice in the sharding", s->devices[i]);
  }
  bool used[LM_MESH_MAX_AXES] = {false};
  for (int d = 0; d < LM_SHARD_MAX_RANK; d++) {
    bool ended = false;
    for (int j = 0; j < LM_MESH_MAX_AXES; j++) {
      int a = s->dim_axes[d][j];
      if (a < 0) {
        ended = true;
        continue;
      }
      if (ended)
        return lm_errf(err, LOOM_INVALID_ARGUMENT, "dimension %d's axis list has an entry after its -1 end", d);
      if (a >= s->mesh_rank)
        return lm_errf(err, LOOM_INVALID_ARGUMENT, "dimension %d is split over mesh axis %d, but the mesh has %d axes",
                       d, a, s->mesh_rank);
      if (d >= rank)
        return lm_errf(err, LOOM_INVALID_ARGUMENT, "the sharding splits dimension %d of a rank-%d array", d, rank);
      if (used[a]) return lm_errf(err, LOOM_INVALID_ARGUMENT, "mesh axis %d is used twice in the sharding", a);
      used[a] = true;
    }
  }
  for (int d = 0; d < rank; d++) {
    if (dims[d] < 0) return lm_errf(err, LOOM_INVALID_ARGUMENT, "dimension %d has negative size %lld", d, (long long)dims[d]);
    int64_t k = lm_sharding_dim_parts(s, d);
    if (k > 1 && dims[d] % k != 0)
      return lm_errf(err, LOOM_INVALID_ARGUMENT, "dimension %d (size %lld) does not split into %lld equal shards", d,
                     (long long)dims[d], (long long)k);
  }
  return 0;
}

void lm_sharding_shard(const lm_sharding *s, int rank, const int64_t *dims, uint32_t i, int64_t *offsets,
                       int64_t *shard_dims) {
  int64_t coord[LM_MESH_MAX_AXES];
  uint64_t rest = i;
  for (int a = s->mesh_rank - 1; a >= 0; a--) {
    coord[a] = (int64_t)(rest % (uint64_t)s->mesh_shape[a]);
    rest /= (uint64_t)s->mesh_shape[a];
  }
  for (int d = 0; d < rank; d++) {
    int64_t idx = 0, parts = 1;
    for (int j = 0; j < LM_MESH_MAX_AXES && s->dim_axes[d][j] >= 0; j++) {
      int a = s->dim_axes[d][j];
      idx = idx * s->mesh_shape[a] + coord[a];
      parts *= s->mesh_shape[a];
    }
    int64_t len = dims[d] / parts;
    shard_dims[d] = len;
    offsets[d] = idx * len;
  }
}

bool lm_region_contiguous(int rank, const int64_t *dims, const int64_t *offsets, const int64_t *sdims,
                          uint64_t *first_elem) {
  /* Contiguous iff, for the outermost dim k where the region is smaller than the array (or
   * has more than one index), every dim after k is whole and every dim before k has size 1. */
  int k = 0;
  while (k < rank && sdims[k] == 1) k++; /* leading single indices */
  bool ok = true;
  for (int j = k + 1; j < rank; j++)
    if (sdims[j] != dims[j]) ok = false;
  uint64_t first = 0;
  for (int j = 0; j < rank; j++) first = first * (uint64_t)dims[j] + (uint64_t)offsets[j];
  if (first_elem) *first_elem = first;
  return ok;
}

void lm_region_copy(int rank, const int64_t *dims, const int64_t *offsets, const int64_t *sdims, size_t esize,
                    void *global, void *shard, bool to_shard) {
  uint64_t n;
  if (lm_dims_numel(rank, sdims, &n) < 0 || n == 0) return;
  /* inner run: trailing dims that are whole, plus the first partial one */
  int k = rank - 1;
  size_t run = esize;
  while (k >= 0 && sdims[k] == dims[k]) run *= (size_t)dims[k--];
  if (k < 0) { /* the whole array */
    if (to_shard) memcpy(shard, global, run);
    else memcpy(global, shard, run);
    return;
  }
  run *= (size_t)sdims[k];
  size_t gstride[LM_SHARD_MAX_RANK]; /* bytes per index step of each dim in the global array */
  size_t s = esize;
  for (int j = rank - 1; j >= 0; j--) {
    gstride[j] = s;
    s *= (size_t)dims[j];
  }
  int64_t idx[LM_SHARD_MAX_RANK] = {0}; /* over dims 0..k-1 of the region */
  uint8_t *sp = shard;
  for (;;) {
    size_t goff = 0;
    for (int j = 0; j < k; j++) goff += (size_t)(offsets[j] + idx[j]) * gstride[j];
    goff += (size_t)offsets[k] * gstride[k];
    for (int j = k + 1; j < rank; j++) goff += (size_t)offsets[j] * gstride[j]; /* whole dims: offset 0 */
    uint8_t *gp = (uint8_t *)global + goff;
    if (to_shard) memcpy(sp, gp, run);
    else memcpy(gp, sp, run);
    sp += run;
    int j = k - 1;
    while (j >= 0 && ++idx[j] == sdims[j]) idx[j--] = 0;
    if (j < 0) break;
  }
}
