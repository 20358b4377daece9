/* Splitting a kernel's index range over threads (lm_run_opts.nthreads). Threads are started per
 * call and joined before it returns, so a kernel never outlives its op; the calling thread
 * takes the first part. Only worth it for large ranges: callers give a minimum per thread. */
#include <pthread.h>
#include <stdlib.h>
#include "exec/parallel.h"

typedef struct part {
  lm_range_fn fn;
  void *ctx;
  size_t lo, hi;
  int rc;
} part;

static void *run_part(void *arg) {
  part *p = arg;
  p->rc = p->fn(p->ctx, p->lo, p->hi);
  return NULL;
}

int lm_parallel_range(int nthreads, size_t n, size_t min_per_thread, size_t align, lm_range_fn fn, void *ctx) {
  if (nthreads > LM_MAX_THREADS) nthreads = LM_MAX_THREADS;
  size_t want = min_per_thread ? n / min_per_thread : (size_t)nthreads;
  int t = nthreads < 1 ? 1 : nthreads;
  if ((size_t)t > want) t = want < 1 ? 1 : (int)want;
  if (t <= 1) return fn(ctx, 0, n);
  part parts[LM_MAX_THREADS];
  pthread_t th[LM_MAX_THREADS];
  bool started[LM_MAX_THREADS] = {0};
  size_t step = (n + (size_t)t - 1) / (size_t)t;
  if (align > 1) step = (step + align - 1) / align * align;
  int np = 0;
  for (size_t lo = 0; lo < n && np < t; lo += step, np++) {
    parts[np] = (part){fn, ctx, lo, lo + step < n ? lo + step : n, 0};
  }
  for (int i = 1; i < np; i++) started[i] = pthread_create(&th[i], NULL, run_part, &parts[i]) == 0;
  run_part(&parts[0]);
  int rc = parts[0].rc;
  for (int i = 1; i < np; i++) {
    if (started[i]) pthread_join(th[i], NULL);
    else run_part(&parts[i]); /* could not start a thread: do it here */
    if (rc == 0) rc = parts[i].rc;
  }
  return rc;
}
