/* The host buffer store: bytes the client sent with HostBufferStore (read by
 * MakeArrayFromHostBuffer & co.) and bytes CopyToHostBuffer produced (read by HostBufferLookup),
 * keyed by (session id, handle). Few buffers live at once (each is taken by its one reader), so a
 * list under one lock will do; waiters sleep on a condition variable. */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include "proxy/proxy.h"

typedef struct hb {
  struct hb *next;
  uint64_t session, handle;
  uint8_t *data;
  size_t len;
} hb;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv; /* CLOCK_MONOTONIC, set up once */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static hb *g_list;
/* sessions whose client is gone: their waiters stop waiting (px_hb_abandon) */
static uint64_t *g_gone;
static size_t g_ngone, g_capgone;

static bool gone(uint64_t session) {
  for (size_t i = 0; i < g_ngone; i++)
    if (g_gone[i] == session) return true;
  return false;
}

static void init_cv(void) {
  pthread_condattr_t a;
  pthread_condattr_init(&a);
  pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
  pthread_cond_init(&g_cv, &a);
  pthread_condattr_destroy(&a);
}

static hb **find(uint64_t session, uint64_t handle) {
  hb **p = &g_list;
  while (*p && !((*p)->session == session && (*p)->handle == handle)) p = &(*p)->next;
  return p;
}

#define HUGE_PAGE ((size_t)2 << 20)

void *px_hb_alloc(size_t n) {
  if (n < 4 * HUGE_PAGE) return malloc(n ? n : 1);
  void *p;
  if (posix_memalign(&p, HUGE_PAGE, n)) return NULL;
  madvise(p, n & ~(HUGE_PAGE - 1), MADV_HUGEPAGE); /* advice: ignored where huge pages are off */
  return p;
}

void px_hb_put(uint64_t session, uint64_t handle, uint8_t *data, size_t len) {
  pthread_once(&g_once, init_cv);
  hb *n = calloc(1, sizeof *n);
  pthread_mutex_lock(&g_mu);
  hb **p = find(session, handle);
  if (*p) { /* a second store under the same handle replaces the first */
    hb *old = *p;
    *p = old->next;
    free(old->data);
    free(old);
  }
  if (n) {
    *n = (hb){.next = g_list, .session = session, .handle = handle, .data = data, .len = len};
    g_list = n;
  } else {
    free(data);
  }
  pthread_cond_broadcast(&g_cv);
  pthread_mutex_unlock(&g_mu);
}

int px_hb_take(uint64_t session, uint64_t handle, int64_t wait_ms, uint8_t **data, size_t *len) {
  pthread_once(&g_once, init_cv);
  struct timespec dl;
  clock_gettime(CLOCK_MONOTONIC, &dl);
  if (wait_ms > 0) {
    dl.tv_sec += wait_ms / 1000;
    dl.tv_nsec += (wait_ms % 1000) * 1000000L;
    if (dl.tv_nsec >= 1000000000L) { dl.tv_sec++; dl.tv_nsec -= 1000000000L; }
  }
  pthread_mutex_lock(&g_mu);
  for (;;) {
    hb **p = find(session, handle);
    if (*p) {
      hb *n = *p;
      *p = n->next;
      pthread_mutex_unlock(&g_mu);
      *data = n->data;
      *len = n->len;
      free(n);
      return 0;
    }
    if (gone(session)) {
      pthread_mutex_unlock(&g_mu);
      return LOOM_CANCELLED;
    }
    if (wait_ms <= 0 || pthread_cond_timedwait(&g_cv, &g_mu, &dl) == ETIMEDOUT) break;
  }
  pthread_mutex_unlock(&g_mu);
  return LOOM_NOT_FOUND;
}

void px_hb_abandon(uint64_t session) {
  pthread_once(&g_once, init_cv);
  pthread_mutex_lock(&g_mu);
  if (!gone(session)) {
    if (g_ngone == g_capgone) {
      size_t nc = g_capgone ? 2 * g_capgone : 16;
      uint64_t *nv = realloc(g_gone, nc * sizeof *nv);
      if (nv) g_gone = nv, g_capgone = nc;
    }
    if (g_ngone < g_capgone) g_gone[g_ngone++] = session;
  }
  pthread_cond_broadcast(&g_cv);
  pthread_mutex_unlock(&g_mu);
}

int px_hb_delete(uint64_t session, uint64_t handle) {
  pthread_mutex_lock(&g_mu);
  hb **p = find(session, handle);
  hb *n = *p;
  if (n) *p = n->next;
  pthread_mutex_unlock(&g_mu);
  if (n) {
    free(n->data);
    free(n);
  }
  return n != NULL;
}

void px_hb_drop_session(uint64_t session) {
  pthread_mutex_lock(&g_mu);
  for (size_t i = 0; i < g_ngone; i++) /* its waiters are done: forget it */
    if (g_gone[i] == session) g_gone[i--] = g_gone[--g_ngone];
  hb *drop = NULL;
  for (hb **p = &g_list; *p;) {
    if ((*p)->session == session) {
      hb *n = *p;
      *p = n->next;
      n->next = drop;
      drop = n;
    } else {
      p = &(*p)->next;
    }
  }
  pthread_mutex_unlock(&g_mu);
  while (drop) {
    hb *n = drop;
    drop = n->next;
    free(n->data);
    free(n);
  }
}
