/* Running a kernel's index range on several threads (lm_run_opts.nthreads). */
#ifndef LM_EXEC_PARALLEL_H
#define LM_EXEC_PARALLEL_H

#include <stdbool.h>
#include <stddef.h>

#define LM_MAX_THREADS 64

/* Work on [lo, hi); returns 0 or a negative status. */
typedef int (*lm_range_fn)(void *ctx, size_t lo, size_t hi);

/* Calls fn over [0, n) split into contiguous parts, one per thread, at most nthreads threads and
 * at least min_per_thread items each (so small ranges stay on the calling thread); part
 * boundaries are multiples of align. Returns the first failing part's status. */
int lm_parallel_range(int nthreads, size_t n, size_t min_per_thread, size_t align, lm_range_fn fn, void *ctx);

#endif
