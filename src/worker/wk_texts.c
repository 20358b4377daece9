/* Program texts on a worker, by content: the controller names a text by its SHA-256 and sends it
 * only to workers that do not hold it yet (LOAD_PROGRAM without a payload names a held one), so
 * a text crosses the wire to each worker once, however many executables are compiled from it.
 * Kept up to WK_TEXT_CACHE_BYTES, least recently used dropped first (a load still using one
 * keeps it alive); a worker asked for a text it no longer holds answers NOT_FOUND and the
 * controller sends it again. Loop thread only. */
#include <stdlib.h>
#include <string.h>
#include "worker/wk.h"

void wk_text_release(wk_text *t) {
  if (!t || --t->refs > 0) return;
  free(t->data);
  free(t);
}

wk_text *wk_text_find(wk *w, const uint8_t digest[32]) {
  for (wk_text *t = w->texts; t; t = t->next)
    if (!memcmp(t->digest, digest, 32)) {
      t->used = ++w->text_clock;
      t->refs++;
      return t;
    }
  return NULL;
}

/* The cache's size: $LOOM_WORKER_TEXT_CACHE bytes if set (a tuning and testing knob), else
 * WK_TEXT_CACHE_BYTES. */
static uint64_t cache_bytes(void) {
  const char *e = getenv("LOOM_WORKER_TEXT_CACHE");
  char *end;
  unsigned long long v = e && *e ? strtoull(e, &end, 10) : 0;
  return e && *e && !*end ? (uint64_t)v : WK_TEXT_CACHE_BYTES;
}

static void evict(wk *w) {
  uint64_t cap = cache_bytes();
  while (w->text_bytes > cap && w->texts && w->texts->next) { /* keep at least the newest */
    wk_text **oldest = NULL;
    for (wk_text **pp = &w->texts; *pp; pp = &(*pp)->next)
      if (!oldest || (*pp)->used < (*oldest)->used) oldest = pp;
    wk_text *t = *oldest;
    *oldest = t->next;
    w->text_bytes -= t->len;
    wk_text_release(t);
  }
}

wk_text *wk_text_add(wk *w, const uint8_t digest[32], char *data, size_t len) {
  for (wk_text **pp = &w->texts; *pp; pp = &(*pp)->next) /* the same digest again: replace it */
    if (!memcmp((*pp)->digest, digest, 32)) {
      wk_text *old = *pp;
      *pp = old->next;
      w->text_bytes -= old->len;
      wk_text_release(old);
      break;
    }
  wk_text *t = calloc(1, sizeof *t);
  if (!t) {
    free(data);
    return NULL;
  }
  memcpy(t->digest, digest, 32);
  t->data = data;
  t->len = len;
  t->refs = 2; /* the cache's and the caller's */
  t->used = ++w->text_clock;
  t->next = w->texts;
  w->texts = t;
  w->text_bytes += len;
  evict(w);
  return t;
}

void wk_texts_free(wk *w) {
  while (w->texts) {
    wk_text *t = w->texts;
    w->texts = t->next;
    wk_text_release(t);
  }
  w->text_bytes = 0;
}
