/* In-process SPMD runs (spmd_local.h): one thread and one device per process, collectives through
 * a private data-plane endpoint (worker id 1, one device per process) and lm_spmd_coll; and the
 * interpreter.run_parallel kernel on top of it. A process that fails sets a shared cancel flag,
 * so the others stop waiting in their collectives at once instead of running into a timeout. */
#include "worker/spmd_local.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "dataplane/dataplane.h"
#include "exec/kernel.h"
#include "worker/spmd_coll.h"

#define MAX_LOCAL_PROCS 1024
#define LOCAL_WORKER_ID 1
#define LOCAL_TIMEOUT_MS 60000 /* a process that never reaches a collective: fail, do not hang */

typedef struct run_shared {
  const lm_program *prog;
  lm_spmd_coll *coll;
  uint32_t R, P;
  size_t device_memory;
  lm_device *result_dev;
  volatile int cancel;       /* set by the first failing process (and forwarded from the caller) */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  uint32_t finished;
} run_shared;

typedef struct proc_task {
  run_shared *sh;
  uint32_t id;               /* process id r * P + p */
  const lm_func *fn;
  lm_buffer *const *args;    /* fn->nargs, borrowed */
  lm_buffer **res;           /* fn->nresults, on result_dev */
  int rc;
  lm_err err;
  pthread_t th;
} proc_task;

/* A copy of b (tensor, token or tuple, recursively) charged to dev. */
static int copy_buffer(lm_device *dev, const lm_buffer *b, lm_buffer **out, lm_err *err) {
  *out = NULL;
  if (b->type.kind == LM_TYPE_TENSOR) return lm_buffer_from_data(dev, &b->type, b->data, b->nbytes, out, err);
  lm_type t = b->type;
  if (t.kind == LM_TYPE_TUPLE) t.ntuple = b->nelems;
  LM_TRY(lm_buffer_alloc(dev, &t, out, err));
  for (uint32_t i = 0; t.kind == LM_TYPE_TUPLE && i < b->nelems; i++) {
    int rc = b->elems[i] ? copy_buffer(dev, b->elems[i], &(*out)->elems[i], err) : 0;
    if (rc < 0) {
      lm_buffer_release(*out);
      *out = NULL;
      return rc;
    }
  }
  return 0;
}

static void *proc_main(void *arg) {
  proc_task *t = arg;
  run_shared *sh = t->sh;
  uint32_t nres = t->fn->nresults;
  lm_buffer **tmp = calloc(nres ? nres : 1, sizeof *tmp);
  lm_device *dev = lm_device_create(sh->device_memory);
  int rc = tmp && dev ? 0 : lm_errf(&t->err, LOOM_NO_MEMORY, "out of host memory");
  if (rc == 0) {
    lm_run_opts o = {.device = dev,
                     .replica_id = t->id / sh->P,
                     .partition_id = t->id % sh->P,
                     .num_replicas = sh->R,
                     .num_partitions = sh->P,
                     .cancel = &sh->cancel,
                     .nthreads = 1};
    lm_spmd_coll_opts(sh->coll, &o);
    rc = lm_program_run(sh->prog, t->fn->name, &o, t->args, t->fn->nargs, tmp, nres, &t->err);
  }
  for (uint32_t j = 0; rc == 0 && j < nres; j++) rc = copy_buffer(sh->result_dev, tmp[j], &t->res[j], &t->err);
  for (uint32_t j = 0; tmp && j < nres; j++) lm_buffer_release(tmp[j]);
  free(tmp);
  lm_device_destroy(dev);
  t->rc = rc;
  pthread_mutex_lock(&sh->mu);
  if (rc < 0) __atomic_store_n(&sh->cancel, 1, __ATOMIC_RELAXED);
  sh->finished++;
  pthread_cond_broadcast(&sh->cv);
  pthread_mutex_unlock(&sh->mu);
  return NULL;
}

int lm_spmd_local_run(const lm_program *p, const char *const *fns, uint32_t num_replicas, uint32_t num_partitions,
                      lm_buffer *const *args, uint32_t nargs, lm_buffer **results, uint32_t nresults,
                      lm_device *result_dev, size_t device_memory, volatile int *cancel, lm_err *err) {
  static atomic_uint_fast64_t next_tag = 1;
  for (uint32_t i = 0; i < nresults; i++) results[i] = NULL;
  if (num_replicas == 0 || num_partitions == 0 || num_replicas > MAX_LOCAL_PROCS ||
      num_partitions > MAX_LOCAL_PROCS / num_replicas)
    return lm_errf(err, LOOM_UNSUPPORTED, "%u x %u processes; the local runner runs 1 to %u", num_replicas,
                   num_partitions, MAX_LOCAL_PROCS);
  uint32_t n = num_replicas * num_partitions;
  proc_task *tasks = calloc(n, sizeof *tasks);
  lm_dp_member *procs = calloc(n, sizeof *procs);
  if (!tasks || !procs) {
    free(tasks);
    free(procs);
    return lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  }
  int rc = 0;
  uint32_t ai = 0, ri = 0;
  for (uint32_t i = 0; i < n && rc == 0; i++) {
    const lm_module *m = lm_program_module(p);
    const lm_func *fn = lm_module_func(m, fns[i]);
    if (!fn) {
      rc = lm_errf(err, LOOM_NOT_FOUND, "no function @%s in the module (process %u)", fns[i], i);
      break;
    }
    if (fn->nargs > nargs - ai || fn->nresults > nresults - ri) {
      rc = lm_errf(err, LOOM_INVALID_ARGUMENT,
                   "the processes' functions take more arguments or return more results than given (%u operands, "
                   "%u results)", nargs, nresults);
      break;
    }
    tasks[i].fn = fn;
    tasks[i].args = args + ai;
    tasks[i].res = results + ri;
    ai += fn->nargs;
    ri += fn->nresults;
    procs[i] = (lm_dp_member){LOCAL_WORKER_ID, i};
  }
  if (rc == 0 && (ai != nargs || ri != nresults))
    rc = lm_errf(err, LOOM_INVALID_ARGUMENT,
                 "the processes' functions take %u arguments and return %u results in all; %u operands and %u results "
                 "given", ai, ri, nargs, nresults);
  lm_dp *dp = NULL;
  run_shared sh = {.prog = p, .R = num_replicas, .P = num_partitions, .device_memory = device_memory,
                   .result_dev = result_dev};
  if (rc == 0) {
    lm_dp_config c;
    lm_dp_config_init(&c);
    c.self_id = LOCAL_WORKER_ID;
    c.num_devices = n;
    c.timeout_ms = LOCAL_TIMEOUT_MS;
    c.progress_thread = 0;
    rc = lm_dp_create(&c, &dp, err);
  }
  if (rc == 0) rc = lm_spmd_coll_create(dp, procs, n, atomic_fetch_add(&next_tag, 1) & ((1ull << 40) - 1), &sh.coll, err);
  if (rc < 0) {
    lm_dp_destroy(dp);
    free(tasks);
    free(procs);
    return rc;
  }
  pthread_mutex_init(&sh.mu, NULL);
  pthread_cond_init(&sh.cv, NULL);
  uint32_t started = 0;
  for (; started < n; started++) {
    tasks[started].sh = &sh;
    tasks[started].id = started;
    int e = pthread_create(&tasks[started].th, NULL, proc_main, &tasks[started]);
    if (e != 0) {
      rc = lm_errf(err, LOOM_NO_MEMORY, "cannot start the thread of process %u: %s", started, strerror(e));
      __atomic_store_n(&sh.cancel, 1, __ATOMIC_RELAXED);
      break;
    }
  }
  /* wait, forwarding the caller's cancel flag; once the shared flag is set (by the caller or by a
   * failing process), wake the processes blocked in the data plane so they see it at once */
  bool woken = false;
  pthread_mutex_lock(&sh.mu);
  while (sh.finished < started) {
    if (cancel && __atomic_load_n(cancel, __ATOMIC_RELAXED)) __atomic_store_n(&sh.cancel, 1, __ATOMIC_RELAXED);
    if (!woken && __atomic_load_n(&sh.cancel, __ATOMIC_RELAXED)) {
      lm_dp_wake(dp);
      woken = true;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 20 * 1000000L;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(&sh.cv, &sh.mu, &ts);
  }
  pthread_mutex_unlock(&sh.mu);
  for (uint32_t i = 0; i < started; i++) pthread_join(tasks[i].th, NULL);
  /* the first real failure (not a process cancelled because another failed) */
  const proc_task *bad = NULL;
  for (uint32_t i = 0; rc == 0 && i < started; i++)
    if (tasks[i].rc < 0 && (!bad || (bad->rc == LOOM_CANCELLED && tasks[i].rc != LOOM_CANCELLED))) bad = &tasks[i];
  if (bad) {
    if (bad->rc == LOOM_CANCELLED && cancel && *cancel) rc = lm_errf(err, LOOM_CANCELLED, "run cancelled");
    else
      rc = lm_errf(err, bad->rc, "process %u (replica %u, partition %u) @%s: %s", bad->id, bad->id / num_partitions,
                   bad->id % num_partitions, bad->fn->name, bad->err.msg);
  }
  if (rc < 0)
    for (uint32_t i = 0; i < nresults; i++) {
      lm_buffer_release(results[i]);
      results[i] = NULL;
    }
  pthread_cond_destroy(&sh.cv);
  pthread_mutex_destroy(&sh.mu);
  lm_spmd_coll_destroy(sh.coll);
  lm_dp_destroy(dp);
  free(tasks);
  free(procs);
  return rc;
}

/* ---- interpreter.run_parallel ---- */

/* programs: an ARRAY (replicas) of ARRAYs (partitions) of function symbols (or strings, the
 * older spelling); returns the counts or an error. */
static int programs_shape(const lm_op *op, uint32_t *R, uint32_t *P, lm_err *err) {
  const lm_attr *a = lm_op_attr(op, "programs");
  if (!a || a->kind != LM_ATTR_ARRAY || a->n == 0 || a->items[0].kind != LM_ATTR_ARRAY || a->items[0].n == 0)
    return lm_op_err(err, op, LOOM_VERIFY, "`programs` must be a non-empty list of non-empty lists of functions");
  *R = a->n;
  *P = a->items[0].n;
  for (uint32_t r = 0; r < a->n; r++) {
    const lm_attr *row = &a->items[r];
    if (row->kind != LM_ATTR_ARRAY || row->n != *P)
      return lm_op_err(err, op, LOOM_VERIFY, "every row of `programs` must list %u functions (row %u differs)", *P, r);
    for (uint32_t q = 0; q < row->n; q++)
      if ((row->items[q].kind != LM_ATTR_SYMBOL && row->items[q].kind != LM_ATTR_STRING) || !row->items[q].s)
        return lm_op_err(err, op, LOOM_VERIFY, "`programs`[%u][%u] is not a function name", r, q);
  }
  if (*R > MAX_LOCAL_PROCS || *P > MAX_LOCAL_PROCS / *R)
    return lm_op_err(err, op, LOOM_UNSUPPORTED, "%u x %u processes; the local runner runs at most %u", *R, *P,
                     MAX_LOCAL_PROCS);
  return 0;
}

static int v_run_parallel(const lm_op *op, const lm_func *fn, lm_err *err) {
  uint32_t R, P;
  return programs_shape(op, &R, &P, err);
}

static int k_run_parallel(lm_kctx *k, lm_buffer *const *in, lm_buffer **out) {
  uint32_t R, P;
  LM_TRY(programs_shape(k->op, &R, &P, k->err));
  const lm_attr *a = lm_op_attr(k->op, "programs");
  const char **fns = malloc((size_t)R * P * sizeof *fns);
  if (!fns) return lm_kerr(k, LOOM_NO_MEMORY, "out of host memory");
  for (uint32_t r = 0; r < R; r++)
    for (uint32_t q = 0; q < P; q++) fns[r * P + q] = a->items[r].items[q].s;
  lm_err e;
  int rc = lm_spmd_local_run(k->prog, fns, R, P, in, k->op->nin, out, k->op->nout, k->opts->device,
                             lm_device_capacity(k->opts->device), k->opts->cancel, &e);
  free(fns);
  if (rc < 0) return lm_kerr(k, rc, "%s", e.msg);
  for (uint32_t j = 0; j < k->op->nout; j++) {
    const lm_type *want = &k->fn->value_types[k->op->out[j]];
    bool same = want->kind == out[j]->type.kind &&
                (want->kind != LM_TYPE_TENSOR || lm_type_equal(want, &out[j]->type));
    if (!same) {
      char a1[256], a2[256];
      rc = lm_kerr(k, LOOM_SHAPE_MISMATCH, "result %u is %s, but the process returned %s", j,
                   lm_type_str(want, a1, sizeof a1), lm_type_str(&out[j]->type, a2, sizeof a2));
      for (uint32_t i = 0; i < k->op->nout; i++) {
        lm_buffer_release(out[i]);
        out[i] = NULL;
      }
      return rc;
    }
  }
  return 0;
}

void lm_spmd_local_register(void) {
  lm_kernels_init();
  lm_kernel_register(LM_OP_INTERPRETER_RUN_PARALLEL, k_run_parallel, v_run_parallel, LM_KF_OWN_OUTPUTS);
}
