/* SPMD runs inside one process, for the local runner (`loom interpret`) and tests: the
 * `interpreter.run_parallel` op of the StableHLO interpreter tests runs its functions as
 * num_replicas x num_partitions processes, each on its own thread and its own CPU device, with
 * collectives through a data-plane endpoint whose devices are those threads (the data plane's
 * shared-memory path). It lives on the worker side because the executor does not link the data
 * plane. */
#ifndef LM_WORKER_SPMD_LOCAL_H
#define LM_WORKER_SPMD_LOCAL_H

#include <stddef.h>
#include <stdint.h>
#include "common/err.h"
#include "exec/exec.h"

/* Registers the kernel of interpreter.run_parallel (spec of the reference interpreter:
 * `programs = [[@f00, @f01, ...], [@f10, ...], ...]` lists the function of process
 * (replica r, partition p) at [r][p]; the operands are the processes' arguments and the results
 * their results, concatenated in process order r * num_partitions + p). Idempotent; call once at
 * start-up, before programs are created. */
void lm_spmd_local_register(void);

/* Runs the named functions as nprocs = num_replicas * num_partitions SPMD processes of p in this
 * process, each on its own thread and device (device_memory bytes each), with collectives between
 * them. args holds every process's arguments in process order (fns[i] takes its own count), and
 * results receives every process's results in process order as new references charged to
 * result_dev (nresults must equal their sum). cancel (may be NULL) stops the run when set.
 * The first failing process's error is returned, naming it. */
int lm_spmd_local_run(const lm_program *p, const char *const *fns, uint32_t num_replicas, uint32_t num_partitions,
                      lm_buffer *const *args, uint32_t nargs, lm_buffer **results, uint32_t nresults,
                      lm_device *result_dev, size_t device_memory, volatile int *cancel, lm_err *err);

#endif
