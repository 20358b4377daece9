/* Bump allocator for metadata that lives and dies together (a parsed module, a request).
 * Tensor data never comes from an arena: it lives in accounted device buffers. */
#ifndef LM_ARENA_H
#define LM_ARENA_H

#include <stddef.h>

typedef struct lm_arena_chunk lm_arena_chunk;
typedef struct lm_arena {
  lm_arena_chunk *head;   /* newest chunk first */
  size_t chunk_size;      /* default size of a new chunk */
  size_t total;           /* bytes handed out, for limits and statistics */
} lm_arena;

void lm_arena_init(lm_arena *a, size_t chunk_size); /* chunk_size 0 = 64 KiB */
/* Returns zeroed memory aligned to 16 bytes, or NULL when out of host memory. */
void *lm_arena_alloc(lm_arena *a, size_t n);
/* Allocates n elements of size sz, checking n*sz for overflow. */
void *lm_arena_array(lm_arena *a, size_t n, size_t sz);
char *lm_arena_strndup(lm_arena *a, const char *s, size_t n);
void lm_arena_free(lm_arena *a); /* frees every chunk; the arena can be reused after init */

#endif
