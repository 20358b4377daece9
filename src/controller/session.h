/* Sessions: one per client connection, owning every handle the client creates (arrays,
 * executables, futures: issue 4 and later). Handles are session-scoped ids, never addresses;
 * another session cannot name them; closing the session destroys them all. */
#ifndef LM_CONTROLLER_SESSION_H
#define LM_CONTROLLER_SESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "common/err.h"

typedef struct lm_handle {
  uint64_t id;                 /* 0 = empty slot */
  uint32_t kind;               /* the owner's tag (array, executable, ...); checked on lookup */
  void *obj;
  void (*destroy)(void *obj);  /* called when the handle or its session goes; may be NULL */
} lm_handle;

typedef struct lm_session {
  uint64_t id;                 /* controller-wide, never reused */
  char name[64];               /* the client's name for itself (HELLO), printable */
  char peer[64];               /* "1.2.3.4:5678" */
  uint64_t opened_ms;
  lm_handle *slots;            /* open addressing, capacity a power of two */
  size_t cap, count, used;     /* used = count + deleted markers */
  uint64_t next_handle;        /* ids start at 1 and are never reused within a session */
  uint64_t *deleted;           /* ids removed with lm_session_forget: open addressing, 0 = empty */
  size_t deleted_cap, deleted_count;
  uint8_t *touched;            /* [touched_cap] 1 for each worker id holding state of this session */
  uint32_t touched_cap;
  bool touched_all;            /* the table could not grow: count every worker as touched */
} lm_session;

/* NULL when out of memory. name/peer are copied (truncated, non-printable bytes replaced). */
lm_session *lm_session_create(uint64_t id, const char *name, const char *peer, uint64_t now_ms);
/* Destroys every handle (calling its destroy) and the session. NULL is a no-op. */
void lm_session_destroy(lm_session *s);

/* Adds obj under a new handle id (*out_id). On failure obj is not taken. */
int lm_session_add(lm_session *s, uint32_t kind, void *obj, void (*destroy)(void *), uint64_t *out_id, lm_err *err);
/* Adds obj under the caller's id (clients name their new arrays and executables themselves, so
 * they can use them before any reply). LOOM_INVALID_ARGUMENT when id is 0, in use, or was
 * used before in this session. lm_session_add skips ids taken this way. */
int lm_session_add_id(lm_session *s, uint64_t id, uint32_t kind, void *obj, void (*destroy)(void *), lm_err *err);
/* True when a handle with that id exists (any kind). */
bool lm_session_has(const lm_session *s, uint64_t id);
/* Removes (destroying it) and remembers id as deleted, so later uses can say so. */
int lm_session_forget(lm_session *s, uint64_t id, uint32_t kind, lm_err *err);
/* Records that worker holds state of the session (shards, launches). Out of memory, every
 * worker counts as touched from then on (never fails). */
void lm_session_touch(lm_session *s, uint32_t worker);
bool lm_session_touched(const lm_session *s, uint32_t worker);
/* True when id was removed with lm_session_forget. */
bool lm_session_was_deleted(const lm_session *s, uint64_t id);
/* The object of handle id if it exists with that kind, else NULL. */
void *lm_session_get(const lm_session *s, uint64_t id, uint32_t kind);
/* Destroys handle id of that kind; LOOM_NOT_FOUND naming it when there is none. */
int lm_session_remove(lm_session *s, uint64_t id, uint32_t kind, lm_err *err);
size_t lm_session_handle_count(const lm_session *s);

#endif
