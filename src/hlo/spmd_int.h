/* Internals shared by the SPMD analysis (spmd.c) and the partitioner (partition.c): meshes and
 * Shardy shardings read from the IR. Not part of any public interface. */
#ifndef LM_HLO_SPMD_INT_H
#define LM_HLO_SPMD_INT_H

#include <stdbool.h>
#include <stdint.h>
#include "common/sharding.h"
#include "hlo/ir.h"
#include "hlo/spmd.h"

typedef struct lm_sp_mesh {
  const lm_attr *attr;                    /* the sdy.mesh STRUCT */
  const char *sym;                        /* its symbol, or NULL when inline */
  int rank;
  const char *names[LM_MESH_MAX_AXES];
  int64_t sizes[LM_MESH_MAX_AXES];
  int64_t ndev;
  const lm_attr *device_ids;              /* INTS or NULL */
} lm_sp_mesh;

/* lm_errf with "file:line:col: " in front when loc has a file. */
int lm_sp_loc_errf(lm_err *err, int code, const lm_loc *loc, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* A field of a STRUCT or DICT attribute, or NULL. */
const lm_attr *lm_sp_field(const lm_attr *a, const char *name);
int lm_sp_mesh_from_struct(const lm_attr *st, const char *sym, lm_sp_mesh *out, const lm_loc *loc, lm_err *err);
/* The mesh an sdy.sharding refers to (inline, or a module-level sdy.mesh by symbol). */
int lm_sp_sharding_mesh(const lm_module *m, const lm_attr *sh, lm_sp_mesh *out, const lm_loc *loc, lm_err *err);
bool lm_sp_same_mesh(const lm_sp_mesh *a, const lm_sp_mesh *b);
int lm_sp_axis_index(const lm_sp_mesh *ms, const char *name);
/* An sdy.sharding over ms for a value of type t into s (devices left NULL); checks it. */
int lm_sp_sharding_from_attr(const lm_sp_mesh *ms, const lm_attr *sh, const lm_type *t, lm_sharding *s,
                             const char *what, const lm_loc *loc, lm_err *err);
void lm_sp_local_type(const lm_type *g, const lm_sharding *s, lm_type *l);
int lm_sp_check_tensor(const lm_type *t, const char *what, const lm_loc *loc, lm_err *err);

#endif
