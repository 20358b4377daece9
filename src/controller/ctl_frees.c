/* Frees of deleted arrays, batched per worker. A training loop deletes the previous step's arrays
 * before each launch; sending every worker a FREE_ARRAYS of its own for that would cost the
 * controller as many messages as the launch itself. Instead the ids wait per worker and ride on
 * the worker's next RUN of the same session (Run.free_ids, freed before the RUN is set up), or go
 * as one FREE_ARRAYS after LM_FREE_DELAY_MS, or as soon as another session's frees or a large
 * batch need the slot. The client's delete is answered at once either way; only the workers'
 * memory comes back up to LM_FREE_DELAY_MS later. */
#include <stdlib.h>
#include <string.h>
#include "controller/ctl.h"

#define LM_FREE_DELAY_MS 2
#define LM_FREE_BATCH_MAX 65536 /* ids waiting per worker before they are sent at once */

typedef struct c_frees {
  uint64_t session;
  uint64_t *ids;
  size_t n, cap;
  bool dirty;                /* listed in ctl.frees_dirty */
} c_frees;

static void flush(ctl *c, uint32_t worker) {
  c_frees *f = &c->frees[worker];
  if (!f->n) return;
  Lmw__FreeArrays fa = LMW__FREE_ARRAYS__INIT;
  fa.session = f->session;
  fa.n_ids = f->n;
  fa.ids = f->ids;
  ctl_worker_send(c, worker, LM_MSG_FREE_ARRAYS, 0, &fa.base, NULL, 0, NULL);
  f->n = 0;
}

static void on_timer(uv_timer_t *t) {
  ctl *c = t->data;
  c->frees_timer_on = false;
  for (uint32_t i = 0; i < c->ndirty; i++) {
    flush(c, c->frees_dirty[i]);
    c->frees[c->frees_dirty[i]].dirty = false;
  }
  c->ndirty = 0;
}

static bool grow(ctl *c, uint32_t worker) {
  if (worker < c->frees_cap) return true;
  uint32_t cap = c->frees_cap ? c->frees_cap : 64;
  while (cap <= worker) cap *= 2;
  c_frees *a = realloc(c->frees, cap * sizeof *a);
  if (!a) return false;
  memset(a + c->frees_cap, 0, (cap - c->frees_cap) * sizeof *a);
  c->frees = a;
  uint32_t *d = realloc(c->frees_dirty, cap * sizeof *d);
  if (!d) return false; /* the table grew; dirty keeps its old room (cap is only raised with it) */
  c->frees_dirty = d;
  c->frees_cap = cap;
  return true;
}

void ctl_free_later(ctl *c, uint32_t worker, uint64_t session, const uint64_t *ids, size_t n) {
  if (!n) return;
  if (!c->frees_timer_init) {
    uv_timer_init(&c->loop, &c->frees_timer);
    c->frees_timer.data = c;
    c->frees_timer_init = true;
  }
  c_frees *f = grow(c, worker) ? &c->frees[worker] : NULL;
  if (f && f->n && f->session != session) flush(c, worker);
  if (f && f->n + n > f->cap) {
    size_t cap = f->cap ? f->cap : 16;
    while (cap < f->n + n) cap *= 2;
    uint64_t *a = realloc(f->ids, cap * sizeof *a);
    if (a) f->ids = a, f->cap = cap;
  }
  if (!f || c->stopping || f->n + n > f->cap) { /* no room to wait: send them now */
    if (f) flush(c, worker);
    Lmw__FreeArrays fa = LMW__FREE_ARRAYS__INIT;
    fa.session = session;
    fa.n_ids = n;
    fa.ids = (uint64_t *)ids;
    ctl_worker_send(c, worker, LM_MSG_FREE_ARRAYS, 0, &fa.base, NULL, 0, NULL);
    return;
  }
  f->session = session;
  memcpy(f->ids + f->n, ids, n * sizeof *ids);
  f->n += n;
  if (!f->dirty) {
    f->dirty = true;
    c->frees_dirty[c->ndirty++] = worker;
  }
  if (f->n >= LM_FREE_BATCH_MAX) flush(c, worker);
  if (!c->frees_timer_on) {
    uv_timer_start(&c->frees_timer, on_timer, LM_FREE_DELAY_MS, 0);
    c->frees_timer_on = true;
  }
}

size_t ctl_frees_for_run(ctl *c, uint32_t worker, uint64_t session, const uint64_t **ids) {
  *ids = NULL;
  if (worker >= c->frees_cap || !c->frees[worker].n) return 0;
  c_frees *f = &c->frees[worker];
  if (f->session != session) {
    flush(c, worker);
    return 0;
  }
  *ids = f->ids;
  return f->n;
}

void ctl_frees_sent(ctl *c, uint32_t worker) {
  if (worker < c->frees_cap) c->frees[worker].n = 0; /* stays dirty until the timer: harmless */
}

void ctl_frees_worker_lost(ctl *c, uint32_t worker) {
  if (worker < c->frees_cap) c->frees[worker].n = 0; /* its shards are gone with it */
}

static void timer_closed(uv_handle_t *h) { (void)h; }

void ctl_frees_stop(ctl *c) {
  if (!c->frees_timer_init) return;
  on_timer(&c->frees_timer);
  uv_timer_stop(&c->frees_timer);
  uv_close((uv_handle_t *)&c->frees_timer, timer_closed);
  c->frees_timer_init = false;
}

void ctl_frees_free(ctl *c) {
  for (uint32_t i = 0; i < c->frees_cap; i++) free(c->frees[i].ids);
  free(c->frees);
  free(c->frees_dirty);
  c->frees = NULL;
  c->frees_dirty = NULL;
  c->frees_cap = c->ndirty = 0;
}
