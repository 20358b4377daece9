/* Bump allocator: chunks of at least chunk_size, freed all at once. */
#include <stdlib.h>
#include <string.h>
#include "common/arena.h"
#include "common/err.h"

struct lm_arena_chunk {
  lm_arena_chunk *next;
  size_t size, used;
  _Alignas(16) unsigned char data[];
};

void lm_arena_init(lm_arena *a, size_t chunk_size) {
  a->head = NULL;
  a->chunk_size = chunk_size ? chunk_size : 64 * 1024;
  a->total = 0;
}

void *lm_arena_alloc(lm_arena *a, size_t n) {
  size_t need = (n + 15) & ~(size_t)15;
  if (need < n) return NULL;
  lm_arena_chunk *c = a->head;
  if (!c || c->size - c->used < need) {
    size_t sz = need > a->chunk_size ? need : a->chunk_size;
    c = malloc(sizeof *c + sz);
    if (!c) return NULL;
    c->size = sz;
    c->used = 0;
    c->next = a->head;
    a->head = c;
  }
  void *p = c->data + c->used;
  c->used += need;
  a->total += need;
  memset(p, 0, n);
  return p;
}

void *lm_arena_array(lm_arena *a, size_t n, size_t sz) {
  size_t total;
  if (lm_mul_size(n, sz, &total)) return NULL;
  return lm_arena_alloc(a, total ? total : 1);
}

char *lm_arena_strndup(lm_arena *a, const char *s, size_t n) {
  char *p = lm_arena_alloc(a, n + 1);
  if (p) { memcpy(p, s, n); p[n] = 0; }
  return p;
}

void lm_arena_free(lm_arena *a) {
  lm_arena_chunk *c = a->head;
  while (c) {
    lm_arena_chunk *n = c->next;
    free(c);
    c = n;
  }
  a->head = NULL;
  a->total = 0;
}
