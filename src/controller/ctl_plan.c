/* A program's launch plan: which workers hold its devices and, for each, the processes it runs,
 * with every process's (worker, local index). Built once when the program is loaded, in
 * O(processes + workers), so that a launch costs the controller O(workers): one RUN per worker
 * carrying only that worker's processes, its RUN_DONE found by an index instead of a search, and
 * the device-to-process map sent once in LOAD_PROGRAM rather than in every RUN. */
#include <stdlib.h>
#include <string.h>
#include "controller/ctl.h"

void ctl_plan_release(c_plan *p) {
  if (!p || --p->refs > 0) return;
  free(p->workers), free(p->wfirst), free(p->wprocs), free(p->proc_worker), free(p->proc_local), free(p->widx);
  free(p);
}

int ctl_plan_build(ctl *c, c_program *prog, lm_err *err) {
  uint32_t n = prog->ndev, nw = lm_registry_worker_count(c->reg), k = 0;
  c_plan *p = calloc(1, sizeof *p);
  uint32_t *next = NULL;
  if (p) {
    p->refs = 1;
    p->nproc = n;
    p->workers = malloc((n ? n : 1) * sizeof *p->workers);
    p->wfirst = calloc((size_t)n + 2, sizeof *p->wfirst);
    p->wprocs = malloc((n ? n : 1) * sizeof *p->wprocs);
    p->proc_worker = malloc((n ? n : 1) * sizeof *p->proc_worker);
    p->proc_local = malloc((n ? n : 1) * sizeof *p->proc_local);
    p->widx = malloc((nw ? nw : 1) * sizeof *p->widx);
    p->nwidx = nw;
  }
  if (!p || !p->workers || !p->wfirst || !p->wprocs || !p->proc_worker || !p->proc_local || !p->widx) goto oom;
  for (uint32_t w = 0; w < nw; w++) p->widx[w] = UINT32_MAX;
  for (uint32_t i = 0; i < n; i++) { /* workers in order of their first process; processes per worker */
    const lm_reg_device *d = lm_registry_device(c->reg, prog->devices[i]);
    p->proc_worker[i] = d->worker;
    p->proc_local[i] = d->local_index;
    if (p->widx[d->worker] == UINT32_MAX) {
      p->widx[d->worker] = k;
      p->workers[k++] = d->worker;
    }
    p->wfirst[p->widx[d->worker] + 1]++;
  }
  p->nworkers = k;
  for (uint32_t j = 0; j < k; j++) p->wfirst[j + 1] += p->wfirst[j]; /* counts -> starts */
  if (!(next = malloc((k ? k : 1) * sizeof *next))) goto oom;
  memcpy(next, p->wfirst, (k ? k : 1) * sizeof *next);
  for (uint32_t i = 0; i < n; i++) p->wprocs[next[p->widx[p->proc_worker[i]]]++] = i;
  free(next);
  ctl_plan_release(prog->plan);
  prog->plan = p;
  return 0;
oom:
  ctl_plan_release(p);
  return lm_errf(err, LOOM_NO_MEMORY, "out of host memory planning the program's launches");
}

bool ctl_plan_current(ctl *c, const c_program *prog) {
  const c_plan *p = prog->plan;
  if (!p || p->nproc != prog->ndev) return false;
  for (uint32_t i = 0; i < p->nproc; i++) {
    const lm_reg_device *d = lm_registry_device(c->reg, prog->devices[i]);
    if (!d || d->worker != p->proc_worker[i] || d->local_index != p->proc_local[i]) return false;
  }
  return true;
}
