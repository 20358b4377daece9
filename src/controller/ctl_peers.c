/* Data-plane peers announced in batches. A worker that publishes its data-plane address is told
 * every other worker's at once (one PEERS), and every other worker must learn its address and
 * their pair's key. Sent one message per pair, a cluster of W workers coming up costs O(W^2)
 * messages (1,024 workers took 4 to 12 s to register). Instead each recipient's new peers wait
 * here and go as one PEERS per recipient after LM_PEERS_DELAY_MS, or before anything else is
 * sent to that worker (ctl_worker_send flushes first), so a worker never gets a program or a
 * launch naming a peer it was not told about. Keys are derived when the batch is sent. */
#include <stdlib.h>
#include <string.h>
#include "common/log.h"
#include "controller/ctl.h"
#include "net/auth.h"

#define LM_PEERS_DELAY_MS 2

typedef struct c_pend {
  uint32_t *ids;             /* new peers of this recipient, in announcement order */
  uint32_t n, cap;
  bool dirty;                /* listed in ctl.peers_dirty */
} c_pend;

static bool grow(ctl *c, uint32_t worker) {
  if (worker < c->pend_cap) return true;
  uint32_t cap = c->pend_cap ? c->pend_cap : 64;
  while (cap <= worker) cap *= 2;
  c_pend *a = realloc(c->pend, cap * sizeof *a);
  if (!a) return false;
  memset(a + c->pend_cap, 0, (cap - c->pend_cap) * sizeof *a);
  c->pend = a;
  uint32_t *d = realloc(c->pend_dirty, cap * sizeof *d);
  if (!d) return false; /* the table grew; dirty keeps its old room (cap is only raised with it) */
  c->pend_dirty = d;
  c->pend_cap = cap;
  return true;
}

static bool connected(ctl *c, uint32_t id) { return id < c->worker_peer_cap && c->worker_peer[id]; }

/* A peer that can be announced: alive, its data plane published, connected. */
static bool announceable(ctl *c, uint32_t id) {
  const lm_reg_worker *w = lm_registry_worker(c->reg, id);
  return w && w->state == LM_WORKER_ALIVE && w->dataplane_len && connected(c, id);
}

/* Sends recipient r one PEERS with ids[0..n) (peers gone meanwhile are left out). The recipient
 * need only be connected: a worker being drained is no longer alive in the registry, yet copies
 * its shards to the standby it must hear of. */
static void send_peers(ctl *c, uint32_t r, const uint32_t *ids, uint32_t n) {
  if (!connected(c, r)) return;
  Lmw__Peer *all = calloc(n, sizeof *all);
  Lmw__Peer **ptrs = calloc(n, sizeof *ptrs);
  uint8_t (*keys)[LM_AUTH_PAIR_KEY_SIZE] = calloc(n, sizeof *keys);
  uint32_t k = 0;
  for (uint32_t i = 0; all && ptrs && keys && i < n; i++) {
    uint32_t id = ids[i];
    if (id == r || !announceable(c, id)) continue;
    const lm_reg_worker *w = lm_registry_worker(c->reg, id);
    lm_auth_pair_key(c->dp_master, id, c->worker_key[id], r, c->worker_key[r], keys[k]);
    lmw__peer__init(&all[k]);
    all[k].worker_id = id;
    all[k].dataplane_address.data = w->dataplane;
    all[k].dataplane_address.len = w->dataplane_len;
    all[k].pair_key.data = keys[k];
    all[k].pair_key.len = LM_AUTH_PAIR_KEY_SIZE;
    ptrs[k] = &all[k];
    k++;
  }
  if (!all || !ptrs || !keys) lm_warn("out of host memory announcing %u data-plane peers to worker %u", n, r);
  if (k) {
    Lmw__Peers m = LMW__PEERS__INIT;
    m.n_peers = k;
    m.peers = ptrs;
    ctl_worker_send(c, r, LM_MSG_PEERS, 0, &m.base, NULL, 0, NULL);
  }
  if (keys) lm_auth_wipe(keys, n * sizeof *keys);
  free(keys);
  free(all);
  free(ptrs);
}

static void flush(ctl *c, uint32_t r) {
  c_pend *q = &c->pend[r];
  uint32_t n = q->n;
  q->n = 0; /* first: the send below flushes r again */
  if (n) send_peers(c, r, q->ids, n);
}

static void on_timer(uv_timer_t *t) {
  ctl *c = t->data;
  c->peers_timer_on = false;
  uint32_t nd = c->pend_ndirty;
  c->pend_ndirty = 0;
  for (uint32_t i = 0; i < nd; i++) {
    uint32_t r = c->pend_dirty[i];
    c->pend[r].dirty = false;
    flush(c, r);
  }
}

void ctl_peers_announce(ctl *c, uint32_t recipient, uint32_t peer) {
  if (!c->peers_timer_init) {
    uv_timer_init(&c->loop, &c->peers_timer);
    c->peers_timer.data = c;
    c->peers_timer_init = true;
  }
  c_pend *q = grow(c, recipient) ? &c->pend[recipient] : NULL;
  if (q && q->n == q->cap) {
    uint32_t cap = q->cap ? 2 * q->cap : 16;
    uint32_t *a = realloc(q->ids, cap * sizeof *a);
    if (a) q->ids = a, q->cap = cap;
  }
  if (!q || q->n == q->cap) { /* no room to wait: what waits goes now, then this one */
    if (q) flush(c, recipient);
    send_peers(c, recipient, &peer, 1);
    return;
  }
  q->ids[q->n++] = peer;
  if (!q->dirty) {
    q->dirty = true;
    c->pend_dirty[c->pend_ndirty++] = recipient;
  }
  if (!c->peers_timer_on && !c->stopping) {
    uv_timer_start(&c->peers_timer, on_timer, LM_PEERS_DELAY_MS, 0);
    c->peers_timer_on = true;
  }
}

void ctl_peers_flush(ctl *c, uint32_t worker) {
  if (worker < c->pend_cap && c->pend[worker].n) flush(c, worker);
}

static void timer_closed(uv_handle_t *h) { (void)h; }

void ctl_peers_stop(ctl *c) {
  if (!c->peers_timer_init) return;
  uv_timer_stop(&c->peers_timer);
  uv_close((uv_handle_t *)&c->peers_timer, timer_closed);
  c->peers_timer_init = false;
}

void ctl_peers_free(ctl *c) {
  for (uint32_t i = 0; i < c->pend_cap; i++) free(c->pend[i].ids);
  free(c->pend);
  free(c->pend_dirty);
  c->pend = NULL;
  c->pend_dirty = NULL;
  c->pend_cap = c->pend_ndirty = 0;
}
