/* The host buffer store: bytes the client sent with HostBufferStore (read by
 * MakeArrayFromHostBuffer & co.) and bytes CopyToHostBuffer produced (read by HostBufferLookup),
 * keyed by (session id, handle). Few buffers live at once (each is taken by its one reader), so a
 * list under one lock will do; waiters sleep on a condition variable. */
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include "common/log.h"
#include "net/sock.h"
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
#define BIG (4 * HUGE_PAGE)               /* buffers from here up are aligned, advised and cached */
#define CACHE_MAX_BYTES ((size_t)1 << 30) /* freed big buffers kept for the next transfer: at most 1 GiB */
#define CACHE_IDLE_MS 5000                /* ... each for at most 5 s unused */
#define CACHE_SLOTS 32

/* Freed big buffers wait here for the next transfer of a like size: a fresh 256 MiB buffer is
 * 128 huge-page faults whose zeroing the kernel does in the faulting thread (half the proxy's CPU
 * time per transfer, measured with perf), and glibc returns big blocks to the kernel at free. */
typedef struct cached {
  void *p;
  size_t cap;
  uint64_t at; /* when it was freed (lm_now_ms) */
} cached;
static pthread_mutex_t g_cmu = PTHREAD_MUTEX_INITIALIZER;
static cached g_cache[CACHE_SLOTS];
static size_t g_ncache, g_cache_bytes;

/* Takes out entry i (g_cmu held); returns its pointer. */
static void *cache_remove(size_t i) {
  void *p = g_cache[i].p;
  g_cache_bytes -= g_cache[i].cap;
  g_cache[i] = g_cache[--g_ncache];
  return p;
}

void *px_hb_alloc(size_t n) {
  if (n < BIG) return malloc(n ? n : 1);
  void *p = NULL;
  pthread_mutex_lock(&g_cmu);
  size_t best = SIZE_MAX;
  for (size_t i = 0; i < g_ncache; i++) /* the smallest that fits, wasting at most half */
    if (g_cache[i].cap >= n && g_cache[i].cap / 2 <= n && (best == SIZE_MAX || g_cache[i].cap < g_cache[best].cap))
      best = i;
  if (best != SIZE_MAX) p = cache_remove(best);
  size_t kept = g_ncache;
  pthread_mutex_unlock(&g_cmu);
  lm_debug("proxy: host buffer of %zu bytes: %s (%zu kept)", n, p ? "reused" : "new", kept);
  if (p) return p;
  if (posix_memalign(&p, HUGE_PAGE, n)) return NULL;
  madvise(p, n & ~(HUGE_PAGE - 1), MADV_HUGEPAGE); /* advice: ignored where huge pages are off */
  return p;
}

void px_hb_free(void *p) {
  if (!p) return;
  size_t cap = malloc_usable_size(p);
  if (cap < BIG || cap > CACHE_MAX_BYTES) {
    free(p);
    return;
  }
  void *drop[CACHE_SLOTS + 1];
  size_t nd = 0;
  pthread_mutex_lock(&g_cmu);
  while (g_ncache && (g_ncache == CACHE_SLOTS || g_cache_bytes + cap > CACHE_MAX_BYTES)) {
    size_t old = 0; /* make room: the longest unused goes */
    for (size_t i = 1; i < g_ncache; i++)
      if (g_cache[i].at < g_cache[old].at) old = i;
    drop[nd++] = cache_remove(old);
  }
  g_cache[g_ncache++] = (cached){.p = p, .cap = cap, .at = lm_now_ms()};
  g_cache_bytes += cap;
  pthread_mutex_unlock(&g_cmu);
  for (size_t i = 0; i < nd; i++) free(drop[i]);
}

void px_hb_trim(uint64_t now_ms, int all) {
  void *drop[CACHE_SLOTS];
  size_t nd = 0;
  pthread_mutex_lock(&g_cmu);
  for (size_t i = 0; i < g_ncache;)
    if (all || g_cache[i].at + CACHE_IDLE_MS <= now_ms) drop[nd++] = cache_remove(i);
    else i++;
  pthread_mutex_unlock(&g_cmu);
  for (size_t i = 0; i < nd; i++) free(drop[i]);
}

void px_hb_put(uint64_t session, uint64_t handle, uint8_t *data, size_t len) {
  pthread_once(&g_once, init_cv);
  hb *n = calloc(1, sizeof *n);
  pthread_mutex_lock(&g_mu);
  hb **p = find(session, handle);
  if (*p) { /* a second store under the same handle replaces the first */
    hb *old = *p;
    *p = old->next;
    px_hb_free(old->data);
    free(old);
  }
  if (n) {
    *n = (hb){.next = g_list, .session = session, .handle = handle, .data = data, .len = len};
    g_list = n;
  } else {
    px_hb_free(data);
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
    px_hb_free(n->data);
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
    px_hb_free(n->data);
    free(n);
  }
}
