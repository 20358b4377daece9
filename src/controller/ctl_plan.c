/* A program's launch plan: which workers hold its devices and, for each, the processes it runs,
 * with every process's (worker, local index). Built once when the program is loaded, in
 * O(processes + workers), so that a launch costs the controller O(workers): one RUN per worker
 * carrying only that worker's processes, its RUN_DONE found by an index instead of a search, and
 * the device-to-process map sent once in LOAD_PROGRAM rather than in every RUN. */
#include <stdlib.h>
#include <string.h>
#include "common/log.h"
#include "controller/ctl.h"

void ctl_plan_release(c_plan *p) {
  if (!p || --p->refs > 0) return;
  free(p->workers), free(p->wfirst), free(p->wprocs), free(p->proc_worker), free(p->proc_local), free(p->widx);
  for (uint32_t g = 0; p->gblob && g < p->ngroups; g++) free(p->gblob[g]);
  free(p->gblob), free(p->gblen);
  free(p);
}

/* Hierarchical dispatch: groups of cfg.relay_group consecutive workers of the plan, each relayed
 * by its first; each group's RelayGroup (every member's data port, a RELAY token for the relay
 * made with the member's transfer key, its devices) encoded once here, so a launch sends it as
 * is. False when out of memory (the plan then dispatches directly). */
static bool plan_groups(ctl *c, c_plan *p) {
  uint32_t gs = c->cfg.relay_group >= 2 ? c->cfg.relay_group : 32;
  uint32_t ng = (p->nworkers + gs - 1) / gs;
  p->gblob = calloc(ng, sizeof *p->gblob);
  p->gblen = calloc(ng, sizeof *p->gblen);
  Lmw__RelayMember *mem = calloc(gs, sizeof *mem), **mptr = calloc(gs, sizeof *mptr);
  Lmw__RunDevice *rdev = calloc(p->nproc ? p->nproc : 1, sizeof *rdev);
  Lmw__RunDevice **rptr = calloc(p->nproc ? p->nproc : 1, sizeof *rptr);
  uint8_t (*tok)[LM_TOKEN_SIZE] = calloc(gs, sizeof *tok);
  bool ok = p->gblob && p->gblen && mem && mptr && rdev && rptr && tok;
  p->ngroups = ng; /* (freed by ctl_plan_release whatever happens) */
  p->gsize = gs;
  for (uint32_t g = 0; ok && g < ng; g++) {
    uint32_t k0 = g * gs, k1 = ctl_plan_group_end(p, g), relay = p->workers[k0];
    Lmw__RelayGroup grp = LMW__RELAY_GROUP__INIT;
    for (uint32_t k = k0; k < k1; k++) {
      uint32_t w = p->workers[k];
      const lm_reg_worker *rw = lm_registry_worker(c->reg, w);
      Lmw__RelayMember *m = &mem[k - k0];
      lmw__relay_member__init(m);
      m->worker = w;
      m->data_address = rw && rw->data_address ? rw->data_address : "";
      if (w < c->worker_peer_cap)
        lm_token_make(c->worker_key[w], LM_TOKEN_RELAY, 0, relay, w, 0, 0, NULL, 0, tok[k - k0]);
      m->token.data = tok[k - k0];
      m->token.len = LM_TOKEN_SIZE;
      m->n_devices = p->wfirst[k + 1] - p->wfirst[k];
      m->devices = rptr + p->wfirst[k];
      for (uint32_t j = p->wfirst[k]; j < p->wfirst[k + 1]; j++) {
        lmw__run_device__init(&rdev[j]);
        rdev[j].local_index = p->proc_local[p->wprocs[j]];
        rdev[j].process = p->wprocs[j];
        rptr[j] = &rdev[j];
      }
      mptr[k - k0] = m;
    }
    grp.n_members = k1 - k0;
    grp.members = mptr;
    size_t n = protobuf_c_message_get_packed_size(&grp.base);
    if (!(p->gblob[g] = malloc(n ? n : 1))) ok = false;
    else p->gblen[g] = protobuf_c_message_pack(&grp.base, p->gblob[g]);
  }
  free(mem), free(mptr), free(rdev), free(rptr), free(tok);
  if (!ok) {
    for (uint32_t g = 0; p->gblob && g < ng; g++) free(p->gblob[g]);
    free(p->gblob), free(p->gblen);
    p->gblob = NULL, p->gblen = NULL;
    p->ngroups = 0;
  }
  return ok;
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
  if (c->cfg.relay_min_workers && k >= c->cfg.relay_min_workers && k >= 2) {
    if (!plan_groups(c, p))
      lm_warn("out of host memory planning relays for %s: its launches go to each worker directly", prog->name);
    else
      lm_info("launches of %s (%u workers) go through %u relays, one per group of up to %u workers", prog->name, k,
              p->ngroups, p->gsize);
  }
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
