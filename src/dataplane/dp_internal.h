/* Internals of the data plane shared by its files: the endpoint (endpoint.c: UCX, peers, the
 * message layer with its matching tables, the wait/progress engine), reductions (reduce.c),
 * groups and collective algorithms (coll.c), registered memory (rma.c). Not for other parts. */
#ifndef LM_DP_INTERNAL_H
#define LM_DP_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <ucp/api/ucp.h>
#include "dataplane/dataplane.h"

/* ---- wire formats (little-endian, fixed offsets; never packed structs) ----
 *
 * Message header (every data-plane active message carries one; DP_HDR_SIZE bytes):
 *   0  u32 magic 'LMDP'          4  u8 version (2)   5  u8 kind   6  u16 zero
 *   8  u64 sender worker id      16 u64 tag           24 u64 key2 (group key; 0 for p2p)
 *   32 u32 slot (message index within the call)       36 u32 zero
 *   40 u64 sig (hash of the call's kind and sizes: a mismatched call is an error, not garbage)
 *   48 16 bytes MAC: SipHash-2-4 (128-bit tag) of bytes 0..47 under the key of the (sender,
 *      receiver) pair, which only those two workers and the controller know; zero for a peer
 *      added without a key (lm_dp_peer_add). It proves the sender id: a process that is not
 *      that worker cannot make a header the receiver accepts as coming from it.
 * Kind ABORT carries a reason text (at most DP_ABORT_MAX bytes) as payload.
 *
 * Address blob (lm_dp_address):
 *   0  u32 magic 'LMDA'  4 u16 version (1)  6 u16 zero  8 u64 worker id  16 u32 pid
 *   20 u32 UCX address length  24 u64 process start time (clock ticks after boot)
 *   32 16 bytes boot id  48 u64 pid namespace inode  56 UCX worker address
 *   then a topology trailer of the length at offset 6 (0 or DP_ADDR_TOPO bytes):
 *   u64 host key, u64 slice key (0: no slice); without it the host key comes from the boot id
 *   and pid namespace (dp_host_key_of).
 *
 * Memory blob (lm_dp_mem_blob):
 *   0  u32 magic 'LMDM'  4 u32 packed rkey length  8 u64 address  16 u64 length
 *   24 u64 owner worker id  32 packed rkey */
#define DP_HDR_SIZE 64
#define DP_MAC_OFF 48
#define DP_MAC_SIZE 16
#define DP_MAGIC 0x50444d4cu       /* "LMDP" */
#define DP_ADDR_MAGIC 0x41444d4cu  /* "LMDA" */
#define DP_MEM_MAGIC 0x4d444d4cu   /* "LMDM" */
#define DP_VERSION 2        /* message headers */
#define DP_ADDR_VERSION 1   /* address blobs */
#define DP_ADDR_HDR 56
#define DP_ADDR_TOPO 16
#define DP_MEM_HDR 32
#define DP_AM_ID 7
#define DP_ABORT_MAX 480

enum { DP_KIND_COLL = 1, DP_KIND_P2P = 2, DP_KIND_ABORT = 3 };

static inline void dp_put32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static inline void dp_put64(uint8_t *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static inline uint32_t dp_get32(const uint8_t *p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
  return v;
}
static inline uint64_t dp_get64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

/* ---- matching keys and a small intrusive hash map ---- */

typedef struct dp_key {
  uint64_t src;     /* sending worker */
  uint64_t tag;
  uint64_t key2;    /* group key (collectives), 0 (p2p) */
  uint32_t slot;
  uint32_t kind;
} dp_key;

typedef struct dp_link {
  struct dp_link *next;  /* bucket chain; entries with equal keys stay in insertion order */
  dp_key key;
} dp_link;

typedef struct dp_map {
  dp_link **b;      /* buckets */
  size_t nb;        /* power of two (0 before the first insert) */
  size_t n;         /* entries */
} dp_map;

void dp_map_free(dp_map *m);                          /* frees the buckets, not the entries */
int dp_map_insert(dp_map *m, dp_link *e);             /* appends; LOOM_NO_MEMORY if growth fails */
dp_link *dp_map_find(const dp_map *m, const dp_key *k);  /* oldest entry with key k */
void dp_map_remove(dp_map *m, dp_link *e);            /* e must be in m */
static inline bool dp_key_eq(const dp_key *a, const dp_key *b) {
  return a->src == b->src && a->tag == b->tag && a->key2 == b->key2 && a->slot == b->slot && a->kind == b->kind;
}

/* ---- peers ---- */

typedef struct dp_peer {
  struct dp_peer *next;       /* in lm_dp.peers */
  struct lm_dp *dp;           /* owner (UCX callbacks reach it through the peer) */
  uint64_t id;
  uint8_t *blob;              /* owned copy of the address blob */
  size_t blob_len;
  uint32_t pid;
  uint64_t start_time;
  bool same_host;             /* same boot id and pid namespace: liveness by /proc */
  uint64_t host_key, slice_key; /* its topology (the blob's trailer) */
  bool err_peer;              /* its UCX endpoint reports peer failures (remote hosts) */
  ucp_ep_h ep;                /* NULL until first use */
  bool failed;
  char why[320];              /* why it failed */
  bool retry;                 /* failed because a connect failed (not lost): tried again at retry_at_ns */
  int64_t retry_at_ns;
  uint32_t connect_failures;  /* in a row: the backoff doubles from 100 ms to 5 s */
  uint64_t generation;        /* bumped by lm_dp_peer_add replacing it */
  struct evp_mac_ctx_st *mac; /* SipHash keyed with the pair's key, or NULL (no key) */
} dp_peer;

/* The header's MAC for peer p into h + DP_MAC_OFF (zeros without a key); dp_mac_ok checks a
 * received one. Both take dp->mu. */
void dp_mac_put_locked(dp_peer *p, uint8_t *h);
bool dp_mac_ok_locked(dp_peer *p, const uint8_t *h);

/* ---- requests: one message sent or received, or one UCX RMA operation ---- */

enum { DP_REQ_SEND = 1, DP_REQ_RECV, DP_REQ_RMA };

typedef struct dp_req {
  dp_link link;               /* in lm_dp.posted while a receive waits for its message */
  int type;                   /* DP_REQ_* */
  bool done;
  bool posted;                /* in the posted map */
  bool autofree;              /* nobody waits for it any more: freed once UCX lets go of it */
  bool ucx_cb;                /* its UCX callback ran (set false before each UCX call) */
  bool orphan;                /* left to UCX for good: its peer is gone (see dp_settle_locked) */
  int status;                 /* 0 or a negative loom status once done */
  char why[256];              /* detail when status != 0 */
  dp_peer *peer;
  uint64_t sig;               /* expected signature (receives) */
  void *buf;
  size_t len;
  void *ucx;                  /* UCX request in flight, or NULL */
  struct dp_req *fl_prev, *fl_next; /* in lm_dp.inflight while ucx != NULL */
  uint8_t hdr[DP_HDR_SIZE];   /* sends: the header; lives until completion */
  uint8_t payload[];          /* autofree sends: a copy of the payload */
} dp_req;

/* ---- unexpected messages ---- */

enum { DP_UX_COPY = 1, DP_UX_HELD, DP_UX_RNDV };

typedef struct dp_unexp {
  dp_link link;               /* in lm_dp.unexp */
  struct dp_unexp *age_next, *age_prev;  /* oldest first, for purging */
  int mode;                   /* DP_UX_* */
  uint64_t sig;
  void *data;                 /* COPY: inline copy; HELD: UCX data; RNDV: UCX descriptor */
  size_t len;
  int64_t t_ns;
  bool unverified;            /* from a sender not yet known (its PEERS entry and key still on the
                                 way): its MAC is checked once a receive for that sender takes it */
  uint8_t hdr[DP_HDR_SIZE];   /* unverified: the header, to check then */
  uint8_t inline_data[];
} dp_unexp;

/* Tags of failed collectives: late messages for them are dropped; new receives fail at once. */
typedef struct dp_retired {
  dp_link link;
  struct dp_retired *age_next;
  int64_t t_ns;
  char why[320];
} dp_retired;

/* ---- the endpoint ---- */

typedef struct dp_group_entry dp_group_entry;
typedef struct dp_meet dp_meet;

typedef struct dp_scratch {
  void *p;
  size_t cap;
  bool busy;
} dp_scratch;

#define DP_SCRATCH_SLOTS 4

#define DP_REAP_PORTS 8
/* The socket inodes of the process before UCX's worker was created (reap.c). */
typedef struct {
  unsigned long *ino;
  size_t n, cap;
} dp_reap_before;

struct lm_dp {
  lm_dp_config cfg;
  int64_t timeout_ns, spin_ns, liveness_ns;
  size_t rd_max;               /* all_reduce: recursive doubling up to this many bytes */
  size_t seg_bytes;            /* all_reduce: reduce-scatter segment */
  size_t eager_max;            /* messages up to this size are sent eagerly (0: UCX decides) */
  int coll_algo;               /* LM_DP_COLL_* (resolved from the config and LOOM_DP_COLL) */
  uint64_t host_key, slice_key; /* this worker's topology, as in its address blob */
  /* UCX; every call on the worker is made holding mu */
  pthread_mutex_t mu;
  struct evp_mac_st *siphash;  /* OpenSSL's SipHash, for the peers' MAC contexts */
  ucp_context_h ctx;
  ucp_worker_h w;
  int efd;                     /* the worker's event fd */
  uint8_t *addr_blob;
  size_t addr_len;
  /* the progress role (see dp_wait_locked) */
  pthread_cond_t cv;           /* waiters that do not progress sleep here */
  pthread_cond_t bg_cv;        /* the background thread sleeps here while devices progress */
  bool progressing;            /* some thread holds the progress role */
  bool progress_bg;            /* ... and it is the background thread */
  bool handover;               /* a device thread asked the background thread to let go */
  bool in_poll;                /* the progressing thread is blocked in poll (mu released) */
  int nwaiting;                /* device threads in dp_wait_locked */
  int64_t dev_last_ns;         /* when a device thread last left a wait */
  uint64_t ncompl;             /* completions so far (waiters re-check when it moves) */
  bool stop;
  bool quitting;               /* lm_dp_shutdown: settling calls stop waiting */
  bool has_bg;
  pthread_t bg;
  /* peers, matching tables */
  dp_peer *peers;
  dp_map posted;               /* dp_req (receives) by key */
  dp_map unexp;                /* dp_unexp by key */
  dp_unexp *ux_old, *ux_new;   /* age list */
  size_t ux_bytes;             /* bytes of unexpected eager data kept (copied or held) */
  dp_map retired;              /* dp_retired by (tag, key2) */
  dp_retired *ret_old, *ret_new;
  dp_req *inflight;            /* requests UCX holds (ucx != NULL) */
  ucp_ep_h *closing;           /* eps being closed */
  void **closing_req;
  size_t nclosing, capclosing;
  lm_dp_stats stats;
  int64_t next_purge_ns;
  /* groups and local meeting points (guarded by gmu, not mu) */
  pthread_mutex_t gmu;
  dp_group_entry *groups;
  dp_map meets;
  dp_scratch scratch[DP_SCRATCH_SLOTS];
  /* closing idle connections to UCX's TCP port (reap.c) */
  int reap_idle_ms;
  uint16_t reap_ports[DP_REAP_PORTS];
  int n_reap_ports;
  bool has_reap, reap_stop;
  pthread_t reap_thread;
  pthread_mutex_t reap_mu;
  pthread_cond_t reap_cv;
  uint64_t reap_closed;
};

/* Notes the process's sockets (before ucp_worker_create); dp_reap_start then finds the listening
 * sockets UCX opened and, if any, starts the thread that closes connections to them that never
 * sent a byte within dp->reap_idle_ms. dp_reap_stop joins it (a no-op if none). */
void dp_reap_before_take(dp_reap_before *b);
int dp_reap_start(lm_dp *dp, dp_reap_before *before);
void dp_reap_stop(lm_dp *dp);

int64_t dp_now_ns(void);
/* Deadline of a call: now + its timeout (or the endpoint's). */
int64_t dp_deadline(const lm_dp *dp, const lm_dp_call *call);

/* Peer lookup (mu held). NULL if unknown. */
dp_peer *dp_peer_find_locked(lm_dp *dp, uint64_t id);
/* The peer's UCX endpoint, connecting on first use (mu held). Fails the peer on error. */
int dp_peer_ep_locked(lm_dp *dp, dp_peer *p, ucp_ep_h *ep, lm_err *err);
/* Marks p failed with the formatted reason; fails its posted receives (mu held). */
void dp_peer_fail_locked(lm_dp *dp, dp_peer *p, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Requests (mu held for post/complete). */
dp_req *dp_req_new(int type, size_t payload);
/* Marks r done (once); an abandoned (autofree) request UCX no longer holds is freed. */
void dp_req_complete_locked(lm_dp *dp, dp_req *r, int status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The owner is done with r: freed now, or when UCX lets go of it. */
void dp_req_release_locked(lm_dp *dp, dp_req *r);
void dp_send_locked(lm_dp *dp, dp_peer *p, dp_req *r, uint32_t kind, uint64_t tag, uint64_t key2, uint32_t slot,
                    uint64_t sig, const void *buf, size_t len);
void dp_recv_locked(lm_dp *dp, dp_peer *p, dp_req *r, uint32_t kind, uint64_t tag, uint64_t key2, uint32_t slot,
                    uint64_t sig, void *buf, size_t len);
/* Records the result of a UCX operation started for r: done now, failed, or in flight (its
 * callback must be dp_req_send_cb with r as user data). */
void dp_req_track_locked(lm_dp *dp, dp_req *r, void *status_ptr, const char *what);
void dp_req_send_cb(void *request, ucs_status_t status, void *user_data);
/* Withdraws a receive that is still waiting for its message (a transfer under way is left
 * to finish). */
void dp_req_cancel_locked(lm_dp *dp, dp_req *r);

/* Waits until every reqs[i] is done, the deadline passes (LOOM_TIMEOUT) or *cancel is set
 * (LOOM_CANCELLED). mu held on entry and exit. Checks the liveness of the peers waited on. */
int dp_wait_locked(lm_dp *dp, dp_req *const *reqs, size_t n, int64_t deadline, volatile int *cancel);
/* The same, also watching the peers watch[0..nwatch) (NULLs ignored), e.g. every worker of a
 * collective's group: when one of them is found dead the wait returns LOOM_WORKER_LOST with
 * *lost set to it, even if no request waits on it now. */
int dp_wait_watch_locked(lm_dp *dp, dp_req *const *reqs, size_t n, int64_t deadline, volatile int *cancel,
                         dp_peer *const *watch, size_t nwatch, dp_peer **lost);
/* After a failed call: cancels what is still pending in reqs, waits (bounded) for the
 * transfers under way to finish, then settles them (dp_settle_locked). */
void dp_drain_locked(lm_dp *dp, dp_req *const *reqs, size_t n);
/* Waits until UCX holds none of the requests' buffers (a failed call, before it returns). */
void dp_settle_locked(lm_dp *dp, dp_req *const *reqs, size_t n);

/* Retires (tag, key2): drops late messages, fails receives posted for it (mu held). */
void dp_retire_locked(lm_dp *dp, uint64_t tag, uint64_t key2, const char *why);
/* Why (tag, key2) was retired (a peer's abort or a local failure), or NULL. */
const char *dp_retired_why_locked(lm_dp *dp, uint64_t tag, uint64_t key2);
/* Sends an ABORT for (tag, key2) to peer p (fire and forget; mu held). */
void dp_send_abort_locked(lm_dp *dp, dp_peer *p, uint64_t tag, uint64_t key2, const char *why);

/* Scratch buffers reused across calls (avoids page faults on every large collective). */
void *dp_scratch_get(lm_dp *dp, size_t len);
void dp_scratch_put(lm_dp *dp, void *p);

/* coll.c */
void dp_groups_free(lm_dp *dp);
void dp_meets_free(lm_dp *dp);
/* Wakes every device thread blocked in a local barrier, to re-check its cancel flag (takes
 * gmu; see lm_dp_wake). */
void dp_meets_wake(lm_dp *dp);

/* Hashing for keys and signatures. */
static inline uint64_t dp_mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  h *= 0xff51afd7ed558ccdull;
  return h ^ (h >> 33);
}

#endif
