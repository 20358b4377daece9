/* Devices (memory budgets) and buffers (refcounted tensor storage charged to a device). */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include "exec/exec.h"

struct lm_device {
  size_t capacity;
  _Atomic size_t used;
  _Atomic size_t peak;
};

lm_device *lm_device_create(size_t capacity) {
  lm_device *d = calloc(1, sizeof *d);
  if (d) d->capacity = capacity;
  return d;
}

void lm_device_destroy(lm_device *d) { free(d); }
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
  return 0;
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
    if (n < 0 || lm_mul_size((size_t)n, lm_dtype_size(t->dtype), &nbytes))
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
    size_t alloc = (nbytes + 63) & ~(size_t)63;
    if (alloc < nbytes) alloc = nbytes; /* cannot happen after the charge check, kept for clarity */
    b->data = aligned_alloc(64, alloc ? alloc : 64);
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
  } else if (b->data) {
    free(b->data);
    if (b->dev) atomic_fetch_sub(&b->dev->used, b->nbytes);
  }
  free(b);
}
