/* Session objects and their handle tables (open addressing on 64-bit ids). */
#include <stdlib.h>
#include <string.h>
#include "common/hash.h"
#include "controller/session.h"

#define DELETED ((void *)&g_deleted) /* obj of a deleted slot (id stays nonzero) */
static const char g_deleted;

static void copy_printable(char *dst, size_t cap, const char *src) {
  size_t n = 0;
  for (; src && src[n] && n + 1 < cap; n++) {
    unsigned char ch = (unsigned char)src[n];
    dst[n] = ch < 0x20 || ch >= 0x7f ? '?' : (char)ch;
  }
  dst[n] = 0;
}

lm_session *lm_session_create(uint64_t id, const char *name, const char *peer, uint64_t now_ms) {
  lm_session *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->id = id;
  copy_printable(s->name, sizeof s->name, name);
  copy_printable(s->peer, sizeof s->peer, peer);
  s->opened_ms = now_ms;
  s->next_handle = 1;
  return s;
}

void lm_session_destroy(lm_session *s) {
  if (!s) return;
  for (size_t i = 0; i < s->cap; i++) {
    lm_handle *h = &s->slots[i];
    if (h->id && h->obj != DELETED && h->destroy) h->destroy(h->obj);
  }
  free(s->slots);
  free(s->deleted);
  free(s->touched);
  free(s);
}

static size_t slot_of(uint64_t id, size_t cap) { return (size_t)lm_hash_mix(id) & (cap - 1); }

static lm_handle *find(const lm_session *s, uint64_t id) {
  if (!s->cap || !id) return NULL;
  for (size_t i = slot_of(id, s->cap), n = 0; n < s->cap; i = (i + 1) & (s->cap - 1), n++) {
    lm_handle *h = &s->slots[i];
    if (!h->id) return NULL;
    if (h->id == id) return h->obj == DELETED ? NULL : h;
  }
  return NULL;
}

static int rehash(lm_session *s, size_t cap) {
  lm_handle *old = s->slots;
  size_t oldcap = s->cap;
  lm_handle *slots = calloc(cap, sizeof *slots);
  if (!slots) return -1;
  for (size_t i = 0; i < oldcap; i++) {
    if (!old[i].id || old[i].obj == DELETED) continue;
    size_t j = slot_of(old[i].id, cap);
    while (slots[j].id) j = (j + 1) & (cap - 1);
    slots[j] = old[i];
  }
  free(old);
  s->slots = slots;
  s->cap = cap;
  s->used = s->count;
  return 0;
}

static int make_room(lm_session *s, lm_err *err) {
  if ((s->used + 1) * 2 > s->cap) {
    size_t cap = s->cap ? s->cap : 16;
    while ((s->count + 1) * 2 > cap) cap *= 2;
    if (rehash(s, cap) < 0) return lm_errf(err, LOOM_NO_MEMORY, "out of host memory adding a handle");
  }
  return 0;
}

/* Puts a handle whose id is unused into its slot (make_room first). */
static void put_slot(lm_session *s, uint64_t id, uint32_t kind, void *obj, void (*destroy)(void *)) {
  size_t j = slot_of(id, s->cap);
  while (s->slots[j].id) j = (j + 1) & (s->cap - 1);
  s->slots[j] = (lm_handle){.id = id, .kind = kind, .obj = obj, .destroy = destroy};
  s->count++;
  s->used++;
}

int lm_session_add(lm_session *s, uint32_t kind, void *obj, void (*destroy)(void *), uint64_t *out_id, lm_err *err) {
  LM_TRY(make_room(s, err));
  while (find(s, s->next_handle) || lm_session_was_deleted(s, s->next_handle)) s->next_handle++;
  uint64_t id = s->next_handle++;
  put_slot(s, id, kind, obj, destroy);
  *out_id = id;
  return 0;
}

void *lm_session_get(const lm_session *s, uint64_t id, uint32_t kind) {
  lm_handle *h = find(s, id);
  return h && h->kind == kind ? h->obj : NULL;
}

int lm_session_remove(lm_session *s, uint64_t id, uint32_t kind, lm_err *err) {
  lm_handle *h = find(s, id);
  if (!h || h->kind != kind)
    return lm_errf(err, LOOM_NOT_FOUND, "session %llu has no handle %llu of that kind", (unsigned long long)s->id,
                   (unsigned long long)id);
  void *obj = h->obj;
  void (*destroy)(void *) = h->destroy;
  h->obj = DELETED;
  h->destroy = NULL;
  s->count--;
  if (destroy) destroy(obj);
  return 0;
}

size_t lm_session_handle_count(const lm_session *s) { return s->count; }

bool lm_session_has(const lm_session *s, uint64_t id) { return find(s, id) != NULL; }

bool lm_session_was_deleted(const lm_session *s, uint64_t id) {
  if (!s->deleted_cap || !id) return false;
  for (size_t j = slot_of(id, s->deleted_cap);; j = (j + 1) & (s->deleted_cap - 1)) {
    if (!s->deleted[j]) return false;
    if (s->deleted[j] == id) return true;
  }
}

static int remember_deleted(lm_session *s, uint64_t id) {
  if ((s->deleted_count + 1) * 2 > s->deleted_cap) {
    size_t cap = s->deleted_cap ? s->deleted_cap * 2 : 64;
    uint64_t *t = calloc(cap, sizeof *t);
    if (!t) return -1;
    for (size_t i = 0; i < s->deleted_cap; i++) {
      if (!s->deleted[i]) continue;
      size_t j = slot_of(s->deleted[i], cap);
      while (t[j]) j = (j + 1) & (cap - 1);
      t[j] = s->deleted[i];
    }
    free(s->deleted);
    s->deleted = t;
    s->deleted_cap = cap;
  }
  size_t j = slot_of(id, s->deleted_cap);
  while (s->deleted[j] && s->deleted[j] != id) j = (j + 1) & (s->deleted_cap - 1);
  if (!s->deleted[j]) {
    s->deleted[j] = id;
    s->deleted_count++;
  }
  return 0;
}

int lm_session_add_id(lm_session *s, uint64_t id, uint32_t kind, void *obj, void (*destroy)(void *), lm_err *err) {
  if (!id) return lm_errf(err, LOOM_INVALID_ARGUMENT, "handle id 0 is not valid");
  if (find(s, id) || lm_session_was_deleted(s, id))
    return lm_errf(err, LOOM_INVALID_ARGUMENT, "handle id %llu is already used in session %llu",
                   (unsigned long long)id, (unsigned long long)s->id);
  LM_TRY(make_room(s, err));
  put_slot(s, id, kind, obj, destroy);
  return 0;
}

int lm_session_forget(lm_session *s, uint64_t id, uint32_t kind, lm_err *err) {
  LM_TRY(lm_session_remove(s, id, kind, err));
  if (remember_deleted(s, id) < 0) return lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  return 0;
}

void lm_session_touch(lm_session *s, uint32_t worker) {
  if (worker < s->touched_cap) {
    s->touched[worker] = 1;
    return;
  }
  uint32_t cap = s->touched_cap ? s->touched_cap : 8;
  while (cap <= worker) cap *= 2;
  uint8_t *t = realloc(s->touched, cap);
  if (!t) {
    s->touched_all = true;
    return;
  }
  memset(t + s->touched_cap, 0, cap - s->touched_cap);
  s->touched = t;
  s->touched_cap = cap;
  t[worker] = 1;
}

bool lm_session_touched(const lm_session *s, uint32_t worker) {
  return s->touched_all || (worker < s->touched_cap && s->touched[worker]);
}
