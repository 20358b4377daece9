/* The worker's shard table: (session, array, device) -> slot, with reference counts so a launch
 * that read a shard keeps it while the client deletes the array, and a condition variable for
 * device threads that wait for a shard still being computed. */
#include <stdlib.h>
#include <string.h>
#include "common/hash.h"
#include "worker/wk.h"

#define NBUCKETS 4096

int wk_store_init(wk_store *s) {
  memset(s, 0, sizeof *s);
  s->buckets = calloc(NBUCKETS, sizeof *s->buckets);
  if (!s->buckets) return LOOM_NO_MEMORY;
  s->nbuckets = NBUCKETS;
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  return 0;
}

static void slot_free(wk_slot *s) {
  lm_buffer_release(s->buf);
  free(s->msg);
  free(s);
}

void wk_store_destroy(wk_store *s) {
  if (!s->buckets) return;
  for (size_t b = 0; b < s->nbuckets; b++) {
    wk_slot *x = s->buckets[b];
    while (x) {
      wk_slot *n = x->next;
      if (--x->refs == 0) slot_free(x);
      x = n;
    }
  }
  free(s->buckets);
  free(s->closed);
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cv);
  memset(s, 0, sizeof *s);
}

static size_t bucket(const wk_store *st, uint64_t session, uint64_t array, uint32_t dev) {
  return (size_t)(lm_hash_mix(session * 0x9e3779b97f4a7c15ull ^ array ^ ((uint64_t)dev << 48)) % st->nbuckets);
}

wk_slot *wk_slot_new(uint64_t session, uint64_t array, uint32_t dev) {
  wk_slot *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->session = session;
  s->array = array;
  s->dev = dev;
  s->refs = 1;
  s->state = WK_SLOT_PENDING;
  return s;
}

/* Unlinks the listed slot with that key (under mu); returns it (its table reference still held). */
static wk_slot *unlink_key(wk_store *st, uint64_t session, uint64_t array, uint32_t dev) {
  wk_slot **pp = &st->buckets[bucket(st, session, array, dev)];
  for (; *pp; pp = &(*pp)->next) {
    wk_slot *x = *pp;
    if (x->session == session && x->array == array && x->dev == dev) {
      *pp = x->next;
      x->next = NULL;
      return x;
    }
  }
  return NULL;
}

void wk_store_put(wk_store *st, wk_slot *s) {
  pthread_mutex_lock(&st->mu);
  wk_slot *old = unlink_key(st, s->session, s->array, s->dev);
  if (old && --old->refs == 0) slot_free(old);
  size_t b = bucket(st, s->session, s->array, s->dev);
  s->next = st->buckets[b];
  st->buckets[b] = s;
  s->refs++;
  pthread_cond_broadcast(&st->cv); /* a shard copy may wait for the shard to appear (wk_shardcopy.c) */
  pthread_mutex_unlock(&st->mu);
}

wk_slot *wk_store_get_locked(wk_store *st, uint64_t session, uint64_t array, uint32_t dev) {
  wk_slot *x = st->buckets[bucket(st, session, array, dev)];
  while (x && !(x->session == session && x->array == array && x->dev == dev)) x = x->next;
  return x;
}

wk_slot *wk_store_get(wk_store *st, uint64_t session, uint64_t array, uint32_t dev) {
  pthread_mutex_lock(&st->mu);
  wk_slot *x = wk_store_get_locked(st, session, array, dev);
  if (x) x->refs++;
  pthread_mutex_unlock(&st->mu);
  return x;
}

wk_slot *wk_store_take(wk_store *st, uint64_t session, uint64_t array, uint32_t dev) {
  pthread_mutex_lock(&st->mu);
  wk_slot *x = unlink_key(st, session, array, dev); /* the table's reference becomes the caller's */
  pthread_mutex_unlock(&st->mu);
  return x;
}

void wk_slot_release(wk_store *st, wk_slot *s) {
  if (!s) return;
  pthread_mutex_lock(&st->mu);
  bool last = --s->refs == 0;
  pthread_mutex_unlock(&st->mu);
  if (last) slot_free(s);
}

void wk_slot_finish(wk_store *st, wk_slot *s, lm_buffer *buf, int code, const char *msg) {
  char *m = msg ? strdup(msg) : NULL;
  pthread_mutex_lock(&st->mu);
  if (s->state == WK_SLOT_PENDING) {
    if (code == 0) {
      s->buf = buf;
      s->state = WK_SLOT_READY;
      buf = NULL;
    } else {
      s->code = code;
      s->msg = m;
      m = NULL;
      s->state = WK_SLOT_FAILED;
    }
  }
  pthread_cond_broadcast(&st->cv);
  pthread_mutex_unlock(&st->mu);
  lm_buffer_release(buf);
  free(m);
}

long wk_store_session_slots(wk_store *st, uint64_t session, wk_slot ***out) {
  *out = NULL;
  size_t n = 0, cap = 0;
  wk_slot **v = NULL;
  pthread_mutex_lock(&st->mu);
  for (size_t b = 0; b < st->nbuckets; b++)
    for (wk_slot *x = st->buckets[b]; x; x = x->next) {
      if (x->session != session || x->state != WK_SLOT_READY) continue;
      if (n == cap) {
        size_t nc = cap ? cap * 2 : 64;
        wk_slot **p = realloc(v, nc * sizeof *p);
        if (!p) {
          for (size_t i = 0; i < n; i++) v[i]->refs--; /* listed: none of these is the last reference */
          pthread_mutex_unlock(&st->mu);
          free(v);
          return -1;
        }
        v = p;
        cap = nc;
      }
      x->refs++;
      v[n++] = x;
    }
  pthread_mutex_unlock(&st->mu);
  *out = v;
  return (long)n;
}

void wk_store_drop_array(wk_store *st, uint64_t session, uint64_t array, uint32_t ndev) {
  wk_slot *gone[64];
  for (uint32_t d0 = 0; d0 < ndev; d0 += 64) {
    size_t n = 0;
    pthread_mutex_lock(&st->mu);
    for (uint32_t d = d0; d < ndev && d < d0 + 64; d++) {
      wk_slot *x = unlink_key(st, session, array, d);
      if (x && --x->refs == 0) gone[n++] = x;
    }
    pthread_mutex_unlock(&st->mu);
    for (size_t i = 0; i < n; i++) slot_free(gone[i]); /* buffers are released outside the lock */
  }
}

static void closed_add(wk_store *st, uint64_t session) {
  if ((st->closed_count + 1) * 2 > st->closed_cap) {
    size_t cap = st->closed_cap ? st->closed_cap * 2 : 64;
    uint64_t *t = calloc(cap, sizeof *t);
    if (!t) return; /* the session's slots are gone anyway; only late puts would be accepted */
    for (size_t i = 0; i < st->closed_cap; i++) {
      uint64_t v = st->closed[i];
      if (!v) continue;
      size_t j = (size_t)lm_hash_mix(v) & (cap - 1);
      while (t[j]) j = (j + 1) & (cap - 1);
      t[j] = v;
    }
    free(st->closed);
    st->closed = t;
    st->closed_cap = cap;
  }
  size_t j = (size_t)lm_hash_mix(session) & (st->closed_cap - 1);
  while (st->closed[j] && st->closed[j] != session) j = (j + 1) & (st->closed_cap - 1);
  if (!st->closed[j]) {
    st->closed[j] = session;
    st->closed_count++;
  }
}

bool wk_store_session_closed(wk_store *st, uint64_t session) {
  pthread_mutex_lock(&st->mu);
  bool found = false;
  if (st->closed_cap) {
    size_t j = (size_t)lm_hash_mix(session) & (st->closed_cap - 1);
    while (st->closed[j]) {
      if (st->closed[j] == session) {
        found = true;
        break;
      }
      j = (j + 1) & (st->closed_cap - 1);
    }
  }
  pthread_mutex_unlock(&st->mu);
  return found;
}

void wk_store_close_session(wk_store *st, uint64_t session) {
  wk_slot *gone = NULL;
  pthread_mutex_lock(&st->mu);
  closed_add(st, session);
  for (size_t b = 0; b < st->nbuckets; b++) {
    wk_slot **pp = &st->buckets[b];
    while (*pp) {
      wk_slot *x = *pp;
      if (x->session != session) {
        pp = &x->next;
        continue;
      }
      *pp = x->next;
      if (--x->refs == 0) {
        x->next = gone;
        gone = x;
      } else {
        x->next = NULL;
      }
    }
  }
  pthread_mutex_unlock(&st->mu);
  while (gone) {
    wk_slot *n = gone->next;
    slot_free(gone);
    gone = n;
  }
}
