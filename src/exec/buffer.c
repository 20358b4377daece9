/* Devices (memory budgets) and buffers (refcounted tensor storage charged to a device).
 *
 * Touching fresh pages costs more than the arithmetic of most kernels (a 64 MiB output takes
 * ~40 ms to fault in with 4 KiB pages, ~5 ms with huge pages), and a run allocates the same
 * sizes step after step. So buffers of 64 KiB and more get blocks rounded to 64 KiB (2 MiB-aligned
 * and advised to use transparent huge pages from 2 MiB on), and when such a buffer dies its
 * block goes to a small per-device cache that the next buffer of the same block size reuses.
 * Cached blocks are not charged as used: the budget check evicts them before failing. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include "exec/exec.h"

#define CACHE_MIN ((size_t)64 << 10) /* buffers from this size on use cached blocks */
#define CACHE_ROUND ((size_t)64 << 10)
#define BIG_MIN ((size_t)2 << 20)    /* from this size on: 2 MiB-aligned, huge pages */
#define BIG_ALIGN ((size_t)2 << 20)
#define CACHE_SLOTS 64

struct lm_device {
  size_t capacity;
  _Atomic size_t used;
  _Atomic size_t peak;
  pthread_mutex_t mu;             /* guards the block cache */
  size_t cached;                  /* bytes held by the cache */
  size_t cache_limit;
  uint32_t ncache;
  struct { void *p; size_t size; } cache[CACHE_SLOTS];
};

lm_device *lm_device_create(size_t capacity) {
  lm_device *d = calloc(1, sizeof *d);
  if (!d) return NULL;
  d->capacity = capacity;
  d->cache_limit = capacity / 4 < ((size_t)1 << 30) ? capacity / 4 : ((size_t)1 << 30);
  pthread_mutex_init(&d->mu, NULL);
  return d;
}

static void cache_drop_all(lm_device *d) {
  for (uint32_t i = 0; i < d->ncache; i++) free(d->cache[i].p);
  d->ncache = 0;
  d->cached = 0;
}

void lm_device_destroy(lm_device *d) {
  if (!d) return;
  cache_drop_all(d);
  pthread_mutex_destroy(&d->mu);
  free(d);
}

size_t lm_device_capacity(const lm_device *d) { return d->capacity; }
size_t lm_device_used(const lm_device *d) { return atomic_load(&((lm_device *)d)->used); }
size_t lm_device_peak(const lm_device *d) { return atomic_load(&((lm_device *)d)->peak); }

/* Charges n bytes to d, failing (without charging) if that would exceed the capacity. */
static int charge(lm_device *d, size_t n, lm_err *err) {
  size_t cur = atomic_load(&d->used);
  for (;;) {
    if (n > d->capacity || cur > d->capacity - n)
      return lm_errf(err, LOOM_DEVICE_OUT_OF_MEMORY,
                     "out of device memory: need %zu bytes, %zu of %zu in use", n, cur, d->capacity);
    if (atomic_compare_exchange_weak(&d->used, &cur, cur + n)) break;
  }
  size_t now = cur + n, pk = atomic_load(&d->peak);
  while (now > pk && !atomic_compare_exchange_weak(&d->peak, &pk, now)) {}
  /* keep live + cached within the capacity: cached blocks go first */
  pthread_mutex_lock(&d->mu);
  while (d->ncache && now + d->cached > d->capacity) {
    d->ncache--;
    d->cached -= d->cache[d->ncache].size;
    free(d->cache[d->ncache].p);
  }
  pthread_mutex_unlock(&d->mu);
  return 0;
}

/* Size of the block holding nbytes (0: a plain allocation, not cached). */
static size_t block_size(size_t nbytes) {
  if (nbytes < CACHE_MIN) return 0;
  if (nbytes >= BIG_MIN) return (nbytes + BIG_ALIGN - 1) & ~(BIG_ALIGN - 1);
  return (nbytes + CACHE_ROUND - 1) & ~(CACHE_ROUND - 1);
}

/* Storage for nbytes: a cached or new block, or a small 64-byte aligned allocation. */
static void *alloc_data(lm_device *d, size_t nbytes) {
  size_t sz = block_size(nbytes);
  if (!sz) {
    size_t a = (nbytes + 63) & ~(size_t)63;
    return aligned_alloc(64, a ? a : 64);
  }
  if (d) {
    pthread_mutex_lock(&d->mu);
    for (uint32_t i = 0; i < d->ncache; i++)
      if (d->cache[i].size == sz) {
        void *p = d->cache[i].p;
        d->cached -= sz;
        d->cache[i] = d->cache[--d->ncache];
        pthread_mutex_unlock(&d->mu);
        return p;
      }
    pthread_mutex_unlock(&d->mu);
  }
  if (sz < BIG_MIN) return aligned_alloc(64, sz);
  void *p = aligned_alloc(BIG_ALIGN, sz);
#ifdef MADV_HUGEPAGE
  if (p) madvise(p, sz, MADV_HUGEPAGE);
#endif
  return p;
}

static void free_data(lm_device *d, void *p, size_t nbytes) {
  size_t sz = block_size(nbytes);
  if (d && sz) {
    pthread_mutex_lock(&d->mu);
    size_t live = atomic_load(&d->used);
    if (d->ncache < CACHE_SLOTS && d->cached + sz <= d->cache_limit && live + d->cached + sz <= d->capacity) {
      d->cache[d->ncache].p = p;
      d->cache[d->ncache].size = sz;
      d->ncache++;
      d->cached += sz;
      p = NULL;
    }
    pthread_mutex_unlock(&d->mu);
  }
  free(p);
}

int lm_buffer_alloc(lm_device *dev, const lm_type *t, lm_buffer **out, lm_err *err) {
  *out = NULL;
  if (!lm_type_is_static(t)) {
    char ts[256];
    return lm_errf(err, LOOM_UNSUPPORTED, "dynamic shape %s is not supported", lm_type_str(t, ts, sizeof ts));
  }
  size_t nbytes = 0;
  if (t->kind == LM_TYPE_TENSOR) {
    int64_t n = lm_type_numel(t);
    if (n < 0 || lm_mul_size((size_t)n, lm_dtype_size(t->dtype), &nbytes) || nbytes > ((size_t)1 << 62))
      return lm_errf(err, LOOM_DEVICE_OUT_OF_MEMORY, "out of device memory: tensor size overflows");
  }
  lm_buffer *b = calloc(1, sizeof *b);
  if (!b) return lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  b->refcount = 1;
  b->type = *t;
  b->type.tuple = NULL; /* the type's tuple pointer belongs to a module arena; elems carry it */
  if (t->kind == LM_TYPE_TUPLE) {
    b->nelems = t->ntuple;
    b->elems = calloc(t->ntuple ? t->ntuple : 1, sizeof *b->elems);
    if (!b->elems) { free(b); return lm_errf(err, LOOM_NO_MEMORY, "out of host memory"); }
  }
  if (t->kind == LM_TYPE_TENSOR) {
    if (dev && charge(dev, nbytes, err) < 0) { free(b); return err ? err->code : LOOM_DEVICE_OUT_OF_MEMORY; }
    b->data = alloc_data(dev, nbytes);
    if (!b->data) {
      if (dev) atomic_fetch_sub(&dev->used, nbytes);
      free(b);
      return lm_errf(err, LOOM_NO_MEMORY, "out of host memory allocating %zu bytes", nbytes);
    }
    b->nbytes = nbytes;
    b->dev = dev;
  }
  *out = b;
  return 0;
}

int lm_buffer_from_data(lm_device *dev, const lm_type *t, const void *src, size_t nbytes, lm_buffer **out,
                        lm_err *err) {
  if (t->kind != LM_TYPE_TENSOR || lm_type_nbytes(t) != nbytes)
    return lm_errf(err, LOOM_SHAPE_MISMATCH, "data of %zu bytes does not match the type", nbytes);
  LM_TRY(lm_buffer_alloc(dev, t, out, err));
  if (nbytes) memcpy((*out)->data, src, nbytes);
  return 0;
}

int lm_buffer_view(const lm_type *t, lm_buffer *base, lm_buffer **out, lm_err *err) {
  *out = NULL;
  if (t->kind != LM_TYPE_TENSOR || base->type.kind != LM_TYPE_TENSOR || lm_type_nbytes(t) != base->nbytes)
    return lm_errf(err, LOOM_SHAPE_MISMATCH, "a view must have as many bytes as the buffer it views");
  lm_buffer *b = calloc(1, sizeof *b);
  if (!b) return lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  b->refcount = 1;
  b->type = *t;
  b->type.tuple = NULL;
  b->data = base->data;
  b->nbytes = base->nbytes;
  b->base = lm_buffer_retain(base->base ? base->base : base); /* views of views share the owner */
  *out = b;
  return 0;
}

int lm_buffer_wrap(lm_device *dev, const lm_type *t, void *data, void (*release)(void *), void *ctx, lm_buffer **out,
                   lm_err *err) {
  *out = NULL;
  size_t nbytes = lm_type_nbytes(t);
  if (t->kind != LM_TYPE_TENSOR || !lm_type_is_static(t) || !nbytes || !data || ((uintptr_t)data & 63) || !release)
    return lm_errf(err, LOOM_INVALID_ARGUMENT, "lm_buffer_wrap: needs a static tensor type and 64-byte aligned data");
  lm_buffer *b = calloc(1, sizeof *b);
  if (!b) return lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  if (dev && charge(dev, nbytes, err) < 0) {
    free(b);
    return err ? err->code : LOOM_DEVICE_OUT_OF_MEMORY;
  }
  b->refcount = 1;
  b->type = *t;
  b->type.tuple = NULL;
  b->data = data;
  b->nbytes = nbytes;
  b->dev = dev;
  b->ext_release = release;
  b->ext_ctx = ctx;
  *out = b;
  return 0;
}

lm_buffer *lm_buffer_retain(lm_buffer *b) {
  if (b) atomic_fetch_add(&b->refcount, 1);
  return b;
}

void lm_buffer_release(lm_buffer *b) {
  if (!b || atomic_fetch_sub(&b->refcount, 1) != 1) return;
  for (uint32_t i = 0; i < b->nelems; i++) lm_buffer_release(b->elems[i]);
  free(b->elems);
  if (b->base) {
    lm_buffer_release(b->base);
  } else if (b->ext_release || b->data) {
    if (b->dev) atomic_fetch_sub(&b->dev->used, b->nbytes);
    if (b->ext_release) b->ext_release(b->ext_ctx); /* memory lent by a PJRT plugin */
    else free_data(b->dev, b->data, b->nbytes);
  }
  free(b);
}
