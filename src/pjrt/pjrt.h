/* Devices through a PJRT plugin: the standard C interface every XLA backend ships (XLA:CPU as
 * PyPI's xla-cpu-pjrt, NVIDIA and AMD GPUs, TPUs). A plugin is loaded once per process; a client
 * over it owns that plugin's devices; a program is compiled once per client into an executable
 * that runs on any of its devices, with Loom's buffers (host memory) as inputs and outputs.
 *
 * Plugins abort their process on some bad inputs rather than return an error (unset replica
 * counts do), so everything passed is validated here first; a plugin that still crashes takes
 * its own process (a worker) down, which the controller sees as a lost worker.
 *
 * Built only where the PJRT C API header was found at configure time (LOOM_HAVE_PJRT); elsewhere
 * every call fails with LOOM_UNSUPPORTED saying so. */
#ifndef LM_PJRT_H
#define LM_PJRT_H

#include <stddef.h>
#include <stdint.h>
#include "common/err.h"
#include "exec/exec.h"
#include "hlo/cut.h"

typedef struct lm_pjrt lm_pjrt;         /* a plugin and a client over its devices */
typedef struct lm_pjrt_exe lm_pjrt_exe; /* a program compiled for that client */

/* The plugin Loom uses when none is named: $LOOM_PJRT_PLUGIN, else the xla-cpu-pjrt plugin found
 * when Loom was configured, else NULL. */
const char *lm_pjrt_default_plugin(void);

/* Loads the plugin at path (dlopen + GetPjrtApi), initializes it and creates a client with the
 * given create options ("name=value": int64 when value parses as one, else a string; e.g.
 * cpu_device_count=4). Errors name the plugin and the call that failed. */
int lm_pjrt_open(const char *path, const char *const *options, int noptions, lm_pjrt **out, lm_err *err);
void lm_pjrt_close(lm_pjrt *p); /* NULL ok */
int lm_pjrt_device_count(const lm_pjrt *p);
const char *lm_pjrt_platform(const lm_pjrt *p);    /* "cpu", "cuda", ... */
const char *lm_pjrt_device_kind(const lm_pjrt *p); /* of device 0 */

/* Compiles a StableHLO program (MLIR text or bytecode, as given) for one device, with nresults
 * results (checked against what the plugin reports). */
int lm_pjrt_compile(lm_pjrt *p, const void *code, size_t len, uint32_t nresults, lm_pjrt_exe **out, lm_err *err);
void lm_pjrt_exe_free(lm_pjrt_exe *e); /* NULL ok */

/* Runs e on device `device` of its client: args[nargs] are Loom buffers (tensors), results are
 * allocated on dev (Loom's budget) with the given types and filled from the plugin's outputs. */
int lm_pjrt_run(lm_pjrt_exe *e, int device, lm_buffer *const *args, uint32_t nargs, lm_device *dev,
                const lm_type *result_types, lm_buffer **res, uint32_t nres, lm_err *err);

/* A per-device program cut at its collectives (hlo/cut.h): each compute segment compiled by the
 * plugin, the collectives (and any segment the plugin refuses or should not get) prepared for
 * Loom's executor. Takes plan (also on failure); the module it was made from must still live
 * during this call, not after. note(user, segment, why) hears of every segment that runs on Loom's
 * executor instead of the plugin, and why (NULL: not told). */
typedef struct lm_pjrt_cut lm_pjrt_cut;
int lm_pjrt_cut_create(lm_pjrt *p, lm_cut *plan, void (*note)(void *user, uint32_t seg, const char *why), void *user,
                       lm_pjrt_cut **out, lm_err *err);
void lm_pjrt_cut_free(lm_pjrt_cut *c); /* NULL ok */
uint32_t lm_pjrt_cut_segments(const lm_pjrt_cut *c); /* live segments (one that computes nothing used later is dropped) */
uint32_t lm_pjrt_cut_compiled(const lm_pjrt_cut *c); /* of them, run by the plugin */
uint32_t lm_pjrt_cut_collectives(const lm_pjrt_cut *c);
/* Runs the segments in order on device `device` of the plugin (compute) and with opts on Loom's
 * executor (collectives: opts carries the launch's collective hooks, process ids and cancel flag;
 * its coll_seq is replaced by one sequence over the whole run). Values pass between segments as
 * Loom buffers charged to opts->device; each is dropped after its last use. Same contract as
 * lm_program_run for args and results. */
int lm_pjrt_cut_run(const lm_pjrt_cut *c, int device, const lm_run_opts *opts, lm_buffer *const *args, uint32_t nargs,
                    lm_buffer **results, uint32_t nresults, lm_err *err);

#endif
