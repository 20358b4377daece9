/* The executor: runs a verified StableHLO module (src/hlo/ir.h) on one CPU device.
 *
 *   lm_device   a CPU device: a memory budget every buffer is charged to
 *   lm_buffer   a tensor's storage (refcounted), charged to a device
 *   lm_program  a module prepared for execution (verified, kernels resolved, fusion planned);
 *               immutable after creation, so many devices may run it at once
 *   lm_program_run  one execution of one function of a program on one device
 *
 * Used by the local runner (`loom interpret`), by workers (one run per device per launch) and
 * by tests. Nothing here prints, exits or aborts on bad input: errors come back as a negative
 * loom_status with the detail in lm_err, naming the op and its source location. */
#ifndef LM_EXEC_H
#define LM_EXEC_H

#include <stdint.h>
#include "hlo/ir.h"

/* ---- devices and buffers ---- */

typedef struct lm_device lm_device;

/* A device with a memory budget of capacity bytes. Thread-safe accounting. */
lm_device *lm_device_create(size_t capacity);
void lm_device_destroy(lm_device *d); /* NULL is a no-op; buffers must be released first */
size_t lm_device_capacity(const lm_device *d);
size_t lm_device_used(const lm_device *d);   /* bytes charged now */
size_t lm_device_peak(const lm_device *d);   /* high-water mark */

typedef struct lm_buffer {
  _Atomic int refcount;         /* lm_buffer_retain / lm_buffer_release */
  lm_type type;                 /* tensor, token or tuple */
  void *data;                   /* 64-byte aligned element data (tensors), NULL when empty; owned by the
                                   buffer (big blocks are recycled by the device): never replace it */
  size_t nbytes;                /* bytes of data */
  lm_device *dev;               /* budget it is charged to; NULL = uncharged host memory */
  uint32_t nelems;              /* tuples: element count */
  struct lm_buffer **elems;     /* tuples: elements (each holds a reference) */
  struct lm_buffer *base;       /* views (lm_buffer_view): the buffer whose storage data points
                                   into; held by a reference. NULL when this buffer owns data. */
  void (*ext_release)(void *);  /* lm_buffer_wrap: data belongs to someone else, given back with
                                   ext_release(ext_ctx) when the buffer dies; NULL otherwise */
  void *ext_ctx;
} lm_buffer;

/* Allocates a buffer of type t (tensor: uninitialized data; token: empty; tuple: elements NULL)
 * charged to dev (may be NULL). Fails with LOOM_DEVICE_OUT_OF_MEMORY naming the sizes when the
 * budget would be exceeded, LOOM_NO_MEMORY when the host allocation fails. */
int lm_buffer_alloc(lm_device *dev, const lm_type *t, lm_buffer **out, lm_err *err);
/* A buffer of type t whose data is a copy of src (nbytes must equal lm_type_nbytes(t)). */
int lm_buffer_from_data(lm_device *dev, const lm_type *t, const void *src, size_t nbytes, lm_buffer **out,
                        lm_err *err);
/* A buffer of tensor type t that shares base's element data (same byte count), e.g. the result of
 * a reshape: no copy and no new charge to the device. Buffers are immutable once a kernel has
 * produced them, so sharing is safe; code that writes into an input in place must first check
 * that it holds the only reference and that neither it nor anything it views is a view
 * (refcount == 1 and base == NULL). */
int lm_buffer_view(const lm_type *t, lm_buffer *base, lm_buffer **out, lm_err *err);
/* A tensor buffer of type t over memory someone else owns (a PJRT plugin's output on CPU): data
 * must be 64-byte aligned and hold lm_type_nbytes(t) > 0 bytes, and stay valid until
 * release(ctx), which the buffer's death calls (on whatever thread drops the last reference).
 * Charged to dev like any buffer. On failure nothing is taken: the caller still owns data. */
int lm_buffer_wrap(lm_device *dev, const lm_type *t, void *data, void (*release)(void *), void *ctx, lm_buffer **out,
                   lm_err *err);
lm_buffer *lm_buffer_retain(lm_buffer *b);
void lm_buffer_release(lm_buffer *b); /* NULL is a no-op */

/* ---- programs ---- */

typedef struct lm_program lm_program;

/* Verifies m and prepares it for execution. Takes ownership of m (freed with the program, also
 * on failure). */
int lm_program_create(lm_module *m, lm_program **out, lm_err *err);
void lm_program_destroy(lm_program *p);
const lm_module *lm_program_module(const lm_program *p);

/* Collective operations are carried out by whoever runs the program on several devices (the
 * worker's data plane, the local runner's in-process group); see collective.h. */
typedef struct lm_collectives lm_collectives;

typedef struct lm_run_opts {
  lm_device *device;            /* budget for every buffer the run allocates (required) */
  int64_t replica_id, partition_id;     /* this device's process id (spec 'Process grid') */
  int64_t num_replicas, num_partitions; /* 0 = take the module's mhlo.num_* (default 1) */
  const lm_collectives *coll;   /* NULL: collective ops fail with LOOM_UNSUPPORTED */
  void *coll_user;              /* passed to coll callbacks */
  volatile int *cancel;         /* if non-NULL and set, the run stops with LOOM_CANCELLED */
  int nthreads;                 /* threads kernels may use; 0 or 1 = the calling thread only */
  const char *probe_dir;        /* test programs: interpreter.probe writes its values here as .npy
                                   and check.expect_serialized_eq reads them back; NULL: both ops
                                   fail with LOOM_UNSUPPORTED */
  uint64_t *coll_seq;           /* NULL: the run numbers its collective calls from 0 (lm_coll_call.seq);
                                   else from *coll_seq, which the run advances past its calls: a
                                   program run as several pieces (cut at its collectives) keeps one
                                   sequence, as every process must */
} lm_run_opts;

/* Runs function fn (NULL = "main") with nargs arguments. On success results[0..nresults) hold
 * new references the caller releases. Arguments are not consumed. Types of args must equal the
 * function's argument types (LOOM_SHAPE_MISMATCH otherwise). */
int lm_program_run(const lm_program *p, const char *fn, const lm_run_opts *opts, lm_buffer *const *args,
                   uint32_t nargs, lm_buffer **results, uint32_t nresults, lm_err *err);

#endif
