/* New workers' data-plane addresses, announced to the other workers in batches. Telling every
 * worker about each new one at once costs O(W) messages per registration, O(W^2) for a cluster
 * of W workers coming up (a million messages at 1,024). Instead the new workers wait here for
 * LM_PEERS_DELAY_MS and go out together, one PEERS per worker per batch. A new worker still gets
 * the addresses of all the others at once (controller.c). Whatever may need an address (a
 * LOAD_PROGRAM, a RUN: collectives between workers) flushes the batch first, so messages on each
 * worker's connection keep the order they would have had. Loop thread. */
#include <stdlib.h>
#include "controller/ctl.h"

#define LM_PEERS_DELAY_MS 10

static void on_timer(uv_timer_t *t) {
  ctl *c = t->data;
  c->peers_timer_on = false;
  ctl_peers_flush(c);
}

void ctl_peers_flush(ctl *c) {
  if (!c->npeers_new) return;
  uint32_t n = c->npeers_new, k = 0;
  Lmw__Peer *all = calloc(n, sizeof *all);
  Lmw__Peer **ptrs = calloc(n, sizeof *ptrs);
  for (uint32_t i = 0; all && ptrs && i < n; i++) {
    const lm_reg_worker *w = lm_registry_worker(c->reg, c->peers_new[i]);
    if (!w || w->state != LM_WORKER_ALIVE || !w->dataplane_len) continue; /* gone meanwhile */
    lmw__peer__init(&all[k]);
    all[k].worker_id = w->id;
    all[k].dataplane_address.data = w->dataplane;
    all[k].dataplane_address.len = w->dataplane_len;
    ptrs[k] = &all[k];
    k++;
  }
  c->npeers_new = 0;
  if (k) {
    Lmw__Peers m = LMW__PEERS__INIT;
    m.n_peers = k;
    m.peers = ptrs;
    uint32_t nw = lm_registry_worker_count(c->reg);
    for (uint32_t i = 0; i < nw && i < c->worker_peer_cap; i++) { /* a worker hearing its own address ignores it */
      const lm_reg_worker *w = lm_registry_worker(c->reg, i);
      if (c->worker_peer[i] && w->state == LM_WORKER_ALIVE && w->dataplane_len)
        ctl_worker_send(c, i, LM_MSG_PEERS, 0, &m.base, NULL, 0, NULL);
    }
  }
  free(all);
  free(ptrs);
}

void ctl_peers_announce(ctl *c, uint32_t worker) {
  if (c->npeers_new == c->peers_new_cap) {
    uint32_t cap = c->peers_new_cap ? c->peers_new_cap * 2 : 64;
    uint32_t *a = realloc(c->peers_new, cap * sizeof *a);
    if (!a) { /* no room to wait: announce what waits (the new worker knows the others already) */
      ctl_peers_flush(c);
      if (!c->peers_new_cap) return; /* out of memory from the start: it stays unannounced */
    } else {
      c->peers_new = a;
      c->peers_new_cap = cap;
    }
  }
  c->peers_new[c->npeers_new++] = worker;
  if (c->stopping) return;
  if (!c->peers_timer_init) {
    uv_timer_init(&c->loop, &c->peers_timer);
    c->peers_timer.data = c;
    c->peers_timer_init = true;
  }
  if (!c->peers_timer_on) {
    uv_timer_start(&c->peers_timer, on_timer, LM_PEERS_DELAY_MS, 0);
    c->peers_timer_on = true;
  }
}

static void timer_closed(uv_handle_t *h) { (void)h; }

void ctl_peers_stop(ctl *c) {
  c->npeers_new = 0; /* stopping: nobody needs them any more */
  if (!c->peers_timer_init) return;
  uv_timer_stop(&c->peers_timer);
  uv_close((uv_handle_t *)&c->peers_timer, timer_closed);
  c->peers_timer_init = false;
  c->peers_timer_on = false;
}

void ctl_peers_free(ctl *c) {
  free(c->peers_new);
  c->peers_new = NULL;
  c->npeers_new = c->peers_new_cap = 0;
}
