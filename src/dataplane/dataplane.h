/* The data plane: worker-to-worker transfers and Loom's own collective algorithms, over UCX
 * (shared memory between processes of one host, TCP between hosts, RDMA where present; UCX
 * picks). One endpoint (lm_dp) per worker process; its devices' threads call collectives on it.
 *
 * Non-goals: no knowledge of programs, arrays or the controller. The caller (the worker) hands
 * peers' address blobs in, names groups by (worker id, device index) lists and picks tags.
 * Nothing here prints, exits or aborts on what a peer sends; every wait has a deadline. */
#ifndef LM_DATAPLANE_H
#define LM_DATAPLANE_H

#include <stddef.h>
#include <stdint.h>
#include "common/dtype.h"
#include "common/err.h"

/* ---- endpoint ---- */

typedef struct lm_dp lm_dp;

typedef struct lm_dp_config {
  size_t struct_size;       /* sizeof(lm_dp_config); set by lm_dp_config_init */
  uint64_t self_id;         /* this worker's id, unique in the cluster (the controller's) */
  uint32_t num_devices;     /* local devices that may take part in collectives (>= 1) */
  int64_t timeout_ms;       /* default deadline of every wait; 0 = 300000. A wait that passes it
                               fails with LOOM_TIMEOUT naming what it waited for */
  int32_t spin_us;          /* busy-poll time before a waiting thread blocks; -1 = default (50),
                               env LOOM_DP_SPIN_US overrides the default */
  int32_t liveness_ms;      /* how often a blocked wait checks that the peers it waits on are
                               alive (and, without lm_dp_wake, its cancel flag; local barriers
                               look at the flag every quarter of it); 0 = 200 */
  int32_t progress_thread;  /* 1 (default): a background thread serves peers (one-sided gets,
                               connection setup) while no device thread is in the data plane */
  const char *net_devices;  /* UCX network devices to use, e.g. "lo" or "eth0" (UCX_NET_DEVICES
                               syntax; shared memory is unaffected); NULL: UCX's choice. The
                               environment's UCX_NET_DEVICES wins */
  int32_t require_keys;     /* 1: every peer must be added with a pair key, and a message is
                               accepted only with a valid MAC from a keyed peer (workers under a
                               controller); 0 (default): keys are optional (tests, benchmarks) */
  int32_t idle_close_ms;    /* connections to UCX's TCP port that send nothing for this long are
                               shut down (UCX accepts them itself; see reap.c); 0 = 5000, < 0 never */
  /* Topology for hierarchical collectives (docs/dataplane.md, "Hierarchical all_reduce"): workers
   * with the same host label are one host; the slice label, when workers of a group name
   * different slices, is the outer level. NULL host label: env LOOM_DP_HOST, else the host's boot
   * id and pid namespace. NULL slice label: env LOOM_DP_SLICE, else none. Both travel in the
   * address blob, so every member of a group sees the same layout. */
  const char *host_label;
  const char *slice_label;
  int32_t coll_algo;        /* LM_DP_COLL_*; 0 (auto) reads env LOOM_DP_COLL (flat, hier, auto) */
} lm_dp_config;

/* How all_reduce goes between workers. AUTO: hierarchical when a group spans more than one host
 * (or slice), flat otherwise. FLAT: every worker's leader exchanges with every other (the
 * algorithms of docs/dataplane.md). HIER: always hierarchical. Part of a call's signature:
 * workers configured differently get a clear error. */
enum { LM_DP_COLL_AUTO = 0, LM_DP_COLL_FLAT = 1, LM_DP_COLL_HIER = 2 };

void lm_dp_config_init(lm_dp_config *c);

/* Opens the UCX context and worker. The address blob (lm_dp_address) is ready at once. */
int lm_dp_create(const lm_dp_config *c, lm_dp **out, lm_err *err);
/* Closes every connection (flushing briefly, then by force) and frees everything. No call may be
 * in progress on dp. NULL is a no-op. */
void lm_dp_destroy(lm_dp *dp);
uint64_t lm_dp_self(const lm_dp *dp);

/* This endpoint's address: an opaque blob (worker id, process identity, UCX address), valid for
 * the life of dp. The controller carries it to the other workers. */
int lm_dp_address(lm_dp *dp, const void **blob, size_t *len);
/* Reads the worker id out of a blob without adding it (LOOM_PROTOCOL if malformed). */
int lm_dp_address_id(const void *blob, size_t len, uint64_t *id, lm_err *err);
/* A simulated worker's address blob (`loom worker --simulate`): the framing of a real one with
 * worker id `id` and no UCX address; a real endpoint refuses to connect to it. Returns its length
 * (0 when cap is too small). */
size_t lm_dp_sim_address(uint64_t id, uint8_t *out, size_t cap);

/* Adds (or replaces, for a restarted worker) the peer described by blob; connects lazily, on
 * first use. Adding a failed peer again (even with the same blob) revives it with a new
 * connection. A blob naming this endpoint itself is accepted and ignored. Thread-safe. */
int lm_dp_peer_add(lm_dp *dp, const void *blob, size_t len, uint64_t *peer_id, lm_err *err);
/* The same with the key of this (self, peer) pair (LM_DP_KEY_SIZE bytes, from the controller):
 * messages to the peer carry a MAC under it and messages claiming to come from it must. */
#define LM_DP_KEY_SIZE 16
int lm_dp_peer_add_keyed(lm_dp *dp, const void *blob, size_t len, const uint8_t *key, uint64_t *peer_id,
                         lm_err *err);
/* Declares a peer dead (the controller saw it go): every pending and later operation involving
 * it fails with LOOM_WORKER_LOST and `why`, until lm_dp_peer_add brings it back. */
int lm_dp_peer_fail(lm_dp *dp, uint64_t peer_id, const char *why);
/* 0 if the peer is known and not failed; LOOM_NOT_FOUND or LOOM_WORKER_LOST (message in err). */
int lm_dp_peer_status(lm_dp *dp, uint64_t peer_id, lm_err *err);

/* ---- per-call options ---- */

typedef struct lm_dp_call {
  size_t struct_size;       /* sizeof(lm_dp_call) */
  int64_t timeout_ms;       /* 0 = the endpoint's default */
  volatile int *cancel;     /* if non-NULL and set, the call stops with LOOM_CANCELLED: at once
                               when the setter then calls lm_dp_wake, else at the waiter's next
                               periodic look (liveness_ms; a quarter of it in local barriers) */
} lm_dp_call;

/* Wakes every thread blocked in a wait of dp (collectives, point to point, put/get), so that
 * each re-checks its call's cancel flag and deadline at once: set the flag first (any store
 * the waiter will see, e.g. __atomic_store_n), then call this. Waiters whose flag is not set
 * go back to sleep. Thread-safe, from any thread, also while no call is in progress; cheap
 * (takes the endpoint's two locks briefly, never waits for the network; not for signal
 * handlers). NULL is a no-op. Lifetime: dp must be alive: every lm_dp_wake must have returned
 * before lm_dp_destroy starts, and none may start after (the worker calls both on its loop
 * thread). */
void lm_dp_wake(lm_dp *dp);

/* The process is going away: calls that ended but still wait for a peer on this host to finish
 * their transfers (so that their buffers may be reused) stop waiting. Call before joining the
 * threads that make calls. Thread-safe; NULL is a no-op. */
void lm_dp_shutdown(lm_dp *dp);

/* ---- groups ---- */

/* A participant of a collective: device `device` of worker `worker`. */
typedef struct lm_dp_member {
  uint64_t worker;
  uint32_t device;
} lm_dp_member;

typedef struct lm_dp_group lm_dp_group;

/* The group of members[0..n) in that order (the order is the reduction order: see
 * docs/dataplane.md). Groups are interned: the same list gives the same group, so every device
 * thread of a worker may call this with the group it sees. Members must be distinct; every
 * worker named other than this one must be a known peer. A member on this worker must have
 * device < num_devices. Returns a reference released with lm_dp_group_release. Thread-safe. */
int lm_dp_group_get(lm_dp *dp, const lm_dp_member *members, uint32_t n, lm_dp_group **out, lm_err *err);
void lm_dp_group_release(lm_dp_group *g); /* NULL is a no-op */
uint32_t lm_dp_group_size(const lm_dp_group *g);
/* Index of (worker, device) in the group, or -1. */
int64_t lm_dp_group_rank(const lm_dp_group *g, uint64_t worker, uint32_t device);

/* ---- reductions ---- */

typedef enum lm_dp_op {
  LM_DP_SUM = 1,  /* add: logical or for i1 */
  LM_DP_PROD,     /* multiply: logical and for i1 */
  LM_DP_MIN,      /* minimum: IEEE-754 minimum for floats (NaN wins, -0 < +0); lexicographic
                     (real, imag) for complex; and for i1 */
  LM_DP_MAX,      /* maximum: likewise */
  LM_DP_AND,      /* bitwise (logical for i1); integers and i1 only */
  LM_DP_OR,
  LM_DP_XOR,
  LM_DP_CUSTOM,   /* the caller's combine function */
} lm_dp_op;

/* out[i] = body(lhs[i], rhs[i]) for i < count. out may alias lhs or rhs (element for element).
 * Return 0 or a negative loom status (message in err). Called only on the thread of the
 * participant that passed it, during its call. */
typedef int (*lm_dp_combine_fn)(void *user, const void *lhs, const void *rhs, void *out, size_t count,
                                lm_err *err);

typedef struct lm_dp_reduction {
  lm_dtype dtype;
  lm_dp_op op;
  lm_dp_combine_fn combine;   /* LM_DP_CUSTOM only */
  void *user;                 /* passed to combine */
} lm_dp_reduction;

/* out = lhs op rhs elementwise for the built-in ops (out may alias either input); the combine
 * function for LM_DP_CUSTOM. LOOM_UNSUPPORTED names an op/dtype pair that has no meaning. */
int lm_dp_reduce(const lm_dp_reduction *red, const void *lhs, const void *rhs, void *out, size_t count,
                 lm_err *err);
/* 0 if lm_dp_reduce supports red, else LOOM_UNSUPPORTED / LOOM_INVALID_ARGUMENT with a message. */
int lm_dp_reduction_check(const lm_dp_reduction *red, lm_err *err);

/* ---- collectives ----
 *
 * Called by every member of the group, each on its own thread, with the same tag and the same
 * sizes; `rank` is the caller's index in the group (its member must be on this worker). The
 * tag tells calls on a group apart: a tag must not repeat for a group (members may still be
 * finishing the previous call with it; a failed tag is refused for ten minutes), so fold an
 * attempt number in when replaying. Suggested: launch sequence number << 20 | the index of
 * the collective executed in that launch. Calls block until the caller's result is complete;
 * the results are bitwise the same for the same inputs every time (docs/dataplane.md gives
 * the order of every reduction). send and recv may be the same buffer where sizes allow (all
 * ops but all_gather, reduce_scatter and all_to_all). A failure (a peer died, a timeout, a
 * mismatched call) makes the call fail on every member that can be told, with a message
 * naming the peer and the tag; a failed call returns once the other local members have
 * stopped using its buffers (give a worker's members one cancel flag: see docs). */

/* StableHLO all_reduce (spec 'all_reduce'): recv[i] = reduction over members of send[i]. */
int lm_dp_all_reduce(lm_dp_group *g, uint32_t rank, uint64_t tag, const void *send, void *recv, size_t count,
                     const lm_dp_reduction *red, const lm_dp_call *call, lm_err *err);
/* StableHLO all_gather on contiguous blocks: recv[j*bytes .. (j+1)*bytes) = member j's send. */
int lm_dp_all_gather(lm_dp_group *g, uint32_t rank, uint64_t tag, const void *send, void *recv, size_t bytes,
                     const lm_dp_call *call, lm_err *err);
/* StableHLO reduce_scatter on contiguous blocks: send holds n blocks of count elements;
 * recv (count elements) = reduction over members of their block `rank`. */
int lm_dp_reduce_scatter(lm_dp_group *g, uint32_t rank, uint64_t tag, const void *send, void *recv, size_t count,
                         const lm_dp_reduction *red, const lm_dp_call *call, lm_err *err);
/* StableHLO all_to_all on contiguous blocks: block j of recv = block `rank` of member j's send. */
int lm_dp_all_to_all(lm_dp_group *g, uint32_t rank, uint64_t tag, const void *send, void *recv, size_t bytes,
                     const lm_dp_call *call, lm_err *err);
/* StableHLO collective_permute: the caller sends its `bytes` to member send_to (-1: none) and
 * receives from member recv_from (-1: none, recv is zero-filled). Every member passes its own
 * pair; the pairs must agree (a sender's send_to names a member whose recv_from names it). */
int lm_dp_collective_permute(lm_dp_group *g, uint32_t rank, uint64_t tag, const void *send, void *recv,
                             size_t bytes, int64_t send_to, int64_t recv_from, const lm_dp_call *call, lm_err *err);
/* StableHLO collective_broadcast: recv = member root's send (spec: root is member 0). send is
 * read only on the root (others may pass NULL). */
int lm_dp_broadcast(lm_dp_group *g, uint32_t rank, uint64_t tag, uint32_t root, const void *send, void *recv,
                    size_t bytes, const lm_dp_call *call, lm_err *err);
/* Returns when every member has entered the barrier. */
int lm_dp_barrier(lm_dp_group *g, uint32_t rank, uint64_t tag, const lm_dp_call *call, lm_err *err);

/* ---- point to point ----
 *
 * Two-sided: a send and the receive with the same (peer, tag) match, whatever their order;
 * lengths must be equal (else both fail with LOOM_PROTOCOL). Several may be outstanding.
 * Tags of point-to-point transfers are a namespace of their own (never clash with groups). */

typedef struct lm_dp_req lm_dp_req;

int lm_dp_isend(lm_dp *dp, uint64_t peer, uint64_t tag, const void *buf, size_t len, lm_dp_req **out,
                lm_err *err);
int lm_dp_irecv(lm_dp *dp, uint64_t peer, uint64_t tag, void *buf, size_t len, lm_dp_req **out, lm_err *err);
/* Waits for the request, frees it (also on failure) and returns its status. The buffer may be
 * reused once this returns, whatever the status. */
int lm_dp_wait(lm_dp *dp, lm_dp_req *req, const lm_dp_call *call, lm_err *err);
int lm_dp_send(lm_dp *dp, uint64_t peer, uint64_t tag, const void *buf, size_t len, const lm_dp_call *call,
               lm_err *err);
int lm_dp_recv(lm_dp *dp, uint64_t peer, uint64_t tag, void *buf, size_t len, const lm_dp_call *call,
               lm_err *err);

/* One-sided: a worker exposes a memory range; the blob (address, length, UCX key) goes to others
 * (through the controller), who then put into it or get from it without the owner taking part. */
typedef struct lm_dp_mem lm_dp_mem;

/* Registers [addr, addr+len) for remote read and write. The blob is valid while mem lives. */
int lm_dp_mem_register(lm_dp *dp, void *addr, size_t len, lm_dp_mem **out, lm_err *err);
int lm_dp_mem_blob(lm_dp_mem *mem, const void **blob, size_t *len);
void lm_dp_mem_deregister(lm_dp_mem *mem); /* NULL is a no-op */

/* Copies len bytes from local buf to offset `offset` of the peer's region described by blob,
 * and returns when they are visible there. Checks offset+len against the region's length. */
int lm_dp_put(lm_dp *dp, uint64_t peer, const void *blob, size_t blob_len, uint64_t offset, const void *buf,
              size_t len, const lm_dp_call *call, lm_err *err);
/* Copies len bytes at `offset` of the peer's region into local buf. */
int lm_dp_get(lm_dp *dp, uint64_t peer, const void *blob, size_t blob_len, uint64_t offset, void *buf, size_t len,
              const lm_dp_call *call, lm_err *err);

/* ---- introspection (tests, benchmarks, `loom status`) ---- */

typedef struct lm_dp_stats {
  uint64_t msgs_sent, msgs_recv;      /* data-plane messages */
  uint64_t bytes_sent, bytes_recv;
  uint64_t unexpected;                /* messages that arrived before their receive */
  uint64_t dropped;                   /* malformed, stale or over-limit messages dropped */
  uint64_t forged;                    /* of those, ones whose MAC did not prove their sender */
  uint64_t blocks;                    /* times a waiting thread blocked on the event fd */
  uint64_t held;                      /* transfers UCX works on now (a call's buffers in use) */
  uint64_t orphaned;                  /* of those, ones left to UCX for good: their peer is gone */
} lm_dp_stats;

void lm_dp_get_stats(lm_dp *dp, lm_dp_stats *s);
/* The byte counters only, without waiting: LOOM_BUSY (nothing written) when another thread holds
 * the endpoint's lock (a progress loop may hold it for a while). For an event loop's periodic
 * reports (the worker's heartbeat), which must never block on the data plane. */
int lm_dp_try_bytes(lm_dp *dp, uint64_t *sent, uint64_t *received);

#endif
