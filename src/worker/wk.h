/* The worker's internals, shared by its parts:
 *   worker.c   the event loop: controller connection, registration, heartbeats, dispatch
 *   wk_store.c shards in device memory ("slots": a shard that may still be being computed)
 *   wk_exec.c  programs, per-device execution threads and queues, launches
 *   wk_data.c  the data port: clients put and get shards directly (no controller in between)
 *   wk_local.c local transfers: the local socket, peer processes, copies by cross-memory attach
 *
 * Threads: the loop thread owns everything but the device threads' work; device threads take
 * tasks from their own queue in order and report finished launches through an async handle.
 * Slots are shared and guarded by the store's mutex. */
#ifndef LM_WORKER_WK_H
#define LM_WORKER_WK_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>
#include <uv.h>
#include "common/err.h"
#include "dataplane/dataplane.h"
#include "exec/exec.h"
#include "hlo/spmd.h"
#include "net/conn.h"
#include "net/sock.h"
#include "net/auth.h"
#include "net/token.h"
#include "worker/spmd_coll.h"
#include "worker/worker.h"

typedef struct wk wk;

/* ---- slots (wk_store.c) ---- */

enum { WK_SLOT_PENDING = 0, WK_SLOT_READY = 1, WK_SLOT_FAILED = 2 };

typedef struct wk_slot {
  uint64_t session, array;     /* key, with dev */
  uint32_t dev;                /* local device index */
  int refs;                    /* under the store's mutex; the table holds one while listed */
  int state;                   /* WK_SLOT_* */
  lm_buffer *buf;              /* READY: the shard (one reference) */
  int code;                    /* FAILED: the status and ... */
  char *msg;                   /* ... its message (malloc'd) */
  lm_device *stashed;          /* READY and moved to host memory by a STASH (wk_stash.c): the
                                  device to charge it to again; NULL otherwise */
  struct wk_slot *next;        /* hash chain */
} wk_slot;

typedef struct wk_store {
  pthread_mutex_t mu;
  pthread_cond_t cv;           /* broadcast whenever a slot leaves PENDING */
  wk_slot **buckets;
  size_t nbuckets;
  uint64_t *closed;            /* sessions the controller closed: open addressing, 0 = empty */
  size_t closed_cap, closed_count;
} wk_store;

int wk_store_init(wk_store *s);
void wk_store_destroy(wk_store *s);  /* frees every listed slot */
/* A new unlisted slot with one reference (the caller's), state PENDING. NULL: out of memory. */
wk_slot *wk_slot_new(uint64_t session, uint64_t array, uint32_t dev);
/* Lists s (the table takes its own reference), replacing any slot with the same key. */
void wk_store_put(wk_store *st, wk_slot *s);
/* The listed slot with that key, with a new reference; NULL when none. */
wk_slot *wk_store_get(wk_store *st, uint64_t session, uint64_t array, uint32_t dev);
/* The same with st->mu held by the caller, taking no reference (NULL when not listed). */
wk_slot *wk_store_get_locked(wk_store *st, uint64_t session, uint64_t array, uint32_t dev);
void wk_slot_release(wk_store *st, wk_slot *s); /* NULL ok */
/* Unlists the slot with that key and hands over the table's reference (NULL when none). */
wk_slot *wk_store_take(wk_store *st, uint64_t session, uint64_t array, uint32_t dev);
/* PENDING -> READY with buf (the slot takes the caller's reference) or FAILED with code/msg. */
void wk_slot_finish(wk_store *st, wk_slot *s, lm_buffer *buf, int code, const char *msg);
/* Unlists the slots of (session, array) on devices 0..ndev-1. */
void wk_store_drop_array(wk_store *st, uint64_t session, uint64_t array, uint32_t ndev);
/* Unlists every slot of the session and remembers it as closed. */
void wk_store_close_session(wk_store *st, uint64_t session);
/* The READY slots of a session, each with a reference the caller releases (wk_slot_release), in
 * *out (malloc'd; NULL when none). Returns their count, or -1 when out of memory. */
long wk_store_session_slots(wk_store *st, uint64_t session, wk_slot ***out);
bool wk_store_session_closed(wk_store *st, uint64_t session);

/* ---- programs and launches (wk_exec.c) ---- */

/* A program text the controller sent, kept by its SHA-256 so each text crosses the wire to a
 * worker once (wk_texts.c); loop thread only. */
typedef struct wk_text {
  uint8_t digest[32];
  char *data;
  size_t len;
  int refs;                    /* the cache's (while listed) and each load's */
  uint64_t used;               /* last use, for eviction */
  struct wk_text *next;
} wk_text;

#define WK_TEXT_CACHE_BYTES ((uint64_t)512 << 20) /* texts kept beyond this are dropped, oldest first */

/* The held text with that digest (a new reference), or NULL. */
wk_text *wk_text_find(wk *w, const uint8_t digest[32]);
/* Keeps data (malloc'd, taken) as the text with that digest; returns it with a reference, or NULL
 * when out of memory (data freed). */
wk_text *wk_text_add(wk *w, const uint8_t digest[32], char *data, size_t len);
void wk_text_release(wk_text *t); /* NULL ok */
void wk_texts_free(wk *w);

/* What loading a text gives (parsed, analyzed, localized, set up for the executor), shared by
 * every program id loaded from the same text (its digest). */
typedef struct wk_code {
  atomic_int refs;
  lm_program *prog;
  struct lm_pjrt_exe *pjrt;
  const struct lm_type *pjrt_results;
  struct lm_pjrt_cut *cut;     /* backend pjrt: the program cut at its collectives, its compute
                                  through the plugin (pjrt.h); NULL when pjrt or prog runs it whole */
  lm_spmd_info *info;
  bool has_digest;
  uint8_t digest[32];
} wk_code;

typedef struct wk_program {
  uint64_t id;
  atomic_int refs;
  wk_code *code;               /* owns the four below (shared with programs of the same text) */
  lm_program *prog;            /* the per-device program (lm_spmd_localize'd) */
  struct lm_pjrt_exe *pjrt;    /* backend pjrt: the same program compiled by the plugin (NULL: Loom's
                                  executor runs it: no plugin, collectives, or the plugin refused it) */
  const struct lm_type *pjrt_results; /* with pjrt: the result types of the program's @main */
  lm_spmd_info *info;
  uint32_t *proc_workers;      /* [info->nproc] where every process runs (LOAD_PROGRAM), or NULL */
  uint32_t *proc_devices;
  char *name;
  struct wk_program *next;
} wk_program;

typedef struct wk_launch wk_launch;

typedef struct wk_task {
  wk_launch *l;
  uint32_t dev, proc;
  uint32_t nin, nout;
  wk_slot **in;                /* [nin]; NULL entries: missing shards (the task fails) */
  wk_slot **out;               /* [nout] */
  uint64_t missing;            /* the first missing input's array id */
  struct wk_timing *timing;    /* where this task's phases go (the launch's), or NULL */
  struct wk_task *next;
} wk_task;

/* One device's phases in a launch, on uv_hrtime (RUN.want_timings). */
typedef struct wk_timing {
  uint32_t local_index;
  uint64_t start, ready, end;  /* took the task, inputs ready, program returned (0: not reached) */
  uint64_t stored;             /* its outputs were stored (0: not reached) */
  lm_spmd_coll_rec coll;       /* its collective calls during execute */
} wk_timing;

/* Where a RUN came from, so its RUN_DONE goes back there: the controller, this worker's own relay
 * (its part of a group it relays), or a relay's connection to the data port (its link id). */
#define WK_LINK_CTL 0
#define WK_LINK_SELF UINT64_MAX

struct wk_launch {
  wk *w;
  uint64_t link;               /* WK_LINK_* or a relay connection's link id */
  uint64_t received;           /* uv_hrtime at RUN (with timings) */
  wk_timing *timings;          /* [ntimings] when the RUN asked for them, else NULL */
  uint32_t ntimings;
  uint64_t seq, session;
  wk_program *prog;
  atomic_uint remaining;       /* tasks not finished */
  volatile int cancel;         /* set by ABORT_LAUNCH / SESSION_CLOSED; the executor polls it */
  pthread_mutex_t mu;          /* guards code/msg */
  int code;                    /* first failure */
  char msg[LM_ERR_MSG_MAX];
  char cancel_reason[256];
  struct lm_spmd_coll *coll;   /* this launch's collectives on this worker, or NULL */
  struct wk_launch *prev, *next; /* the loop's list of active launches */
  struct wk_launch *done_next;   /* the finished list */
};

typedef struct wk_dev {
  wk *w;
  uint32_t idx;
  lm_device *dev;
  pthread_t th;
  bool started;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  wk_task *head, *tail;
  bool stop;
} wk_dev;

int wk_exec_start(wk *w, lm_err *err);  /* device threads and the async handle */
void wk_exec_stop(wk *w);               /* joins the threads, fails queued tasks, frees launches */
void wk_on_load_program(wk *w, const lm_frame *f, const Lmw__LoadProgram *m);
void wk_on_unload_program(wk *w, const Lmw__UnloadProgram *m);
void wk_on_run(wk *w, const Lmw__Run *m);
void wk_on_run_from(wk *w, const Lmw__Run *m, uint64_t link);
/* Hierarchical dispatch (docs/scale.md): a RUN a relay forwarded on link (taken; it runs once this
 * worker has read Run.min_cseq controller messages), an ABORT_LAUNCH it forwarded, the relay's
 * connection closing (its launches here are cancelled with why). */
void wk_relayed_run(wk *w, uint64_t link, Lmw__Run *m);
void wk_relayed_abort(wk *w, uint64_t link, const Lmw__AbortLaunch *m);
void wk_relayed_poll(wk *w);    /* after each controller message */
void wk_relay_link_gone(wk *w, uint64_t link, const char *why);
void wk_on_abort(wk *w, const Lmw__AbortLaunch *m);
void wk_on_session_closed(wk *w, uint64_t session);
void wk_program_release(wk_program *p);

/* ---- the data port (wk_data.c) ---- */

typedef struct wk_dconn wk_dconn;
typedef struct wk_parked wk_parked;

int wk_data_start(wk *w, const char *listen, lm_err *err);
void wk_data_stop(wk *w);
/* Serves parked gets whose slots finished or whose cseq has been reached. */
void wk_data_poll(wk *w);
void wk_data_session_closed(wk *w, uint64_t session);
/* Sends on the relay connection with that link id (0 when it is gone: the message is dropped). */
int wk_data_link_send(wk *w, uint64_t link, unsigned type, const ProtobufCMessage *m);

/* ---- local transfers (wk_local.c) ---- */

typedef struct wk_peer wk_peer;   /* the client process at the other end of a local connection */
typedef struct wk_copy wk_copy;   /* one copy in flight */

/* A client's memory ranges, checked: iov[i] starts at byte start[i] of the shard. */
typedef struct wk_ranges {
  struct iovec *iov;
  uint64_t *start;
  size_t n;
  uint64_t total;                 /* bytes */
} wk_ranges;

/* Opens the local socket (unless LOOM_TRANSFER=tcp or the system has none: then the worker just
 * has no local socket; that is not an error). */
int wk_local_start(wk *w, uv_connection_cb on_connection, lm_err *err);
void wk_local_stop(wk *w);
/* Who connected to the local socket (kernel credentials, a pidfd, a duplicate of the socket that
 * stays open while copies for it run). NULL when out of memory. */
wk_peer *wk_local_accept(lm_conn *conn);
void wk_peer_release(wk_peer *p); /* NULL ok */
/* HELLO on a local connection: true when local transfers can be served to this peer (same uid,
 * visible pid, the probe read back through process_vm_readv); else false and why. */
bool wk_local_hello(const wk_peer *p, const Lmw__Hello *h, char *why, size_t cap);
/* Checks a message's (address, length) pairs: even count, at most LM_LOCAL_MAX_RANGES, no
 * empty range, no overflow. */
int wk_local_ranges(const uint64_t *words, size_t nwords, wk_ranges *out, lm_err *err);
void wk_ranges_free(wk_ranges *r);
/* Called on the loop thread when a copy ended: code 0, or a status and its message
 * (LOOM_UNSUPPORTED: the kernel refused the access, the client may fall back). */
typedef void (*wk_copy_done_fn)(int code, const char *msg, void *arg);
/* Copies nbytes (= r->total, > 0; every buffer holds nbytes) on the loop's thread pool: to_peer:
 * bufs[0] -> the peer's ranges; else the ranges -> bufs[0], and copies into bufs[1..nbufs).
 * Takes r. The buffers must stay alive until done has run; *out is valid until then too. */
int wk_copy_start(uv_loop_t *loop, wk_peer *peer, bool to_peer, lm_buffer *const *bufs, size_t nbufs, uint64_t nbytes,
                  wk_ranges *r, wk_copy_done_fn done, void *arg, wk_copy **out, lm_err *err);
/* Stops a copy between chunks (loop thread); done still runs, with LOOM_CANCELLED. */
void wk_copy_cancel(wk_copy *cp);

/* Shard transfers served (loop thread), sent with every heartbeat. */
typedef struct wk_xfer_stats {
  uint64_t local_puts, local_put_bytes, local_gets, local_get_bytes;
  uint64_t stream_puts, stream_put_bytes, stream_gets, stream_get_bytes;
  uint64_t local_refused;
} wk_xfer_stats;

/* ---- shard copies and snapshots for recovery (wk_shardcopy.c) ---- */

typedef struct wk_sc wk_sc;
int wk_sc_init(wk *w);
void wk_on_shard_copy(wk *w, const Lmw__ShardCopy *m);
/* Drops the snapshots of (session, array); array 0: all of the session's. */
void wk_sc_drop(wk *w, uint64_t session, uint64_t array);
uint64_t wk_sc_backup_bytes(wk *w);
void wk_sc_reap(wk *w);   /* joins finished copy threads; acks puts whose snapshots take too long */
int wk_sc_start(wk *w);   /* its async handle on the loop (after uv_loop_init) */
/* Acknowledges put request rid on dc once the snapshots of (session, array) on local devices
 * devs[0..n) are kept by their buddy (or at once if they already are). Loop thread. */
void wk_sc_defer_ack(wk *w, wk_dconn *dc, uint64_t rid, uint64_t session, uint64_t array, const uint32_t *devs,
                     size_t n);
void wk_sc_conn_gone(wk *w, wk_dconn *dc);
void wk_data_ack(wk_dconn *dc, uint64_t rid);
/* Set when the worker stops: the cancel flag of data-plane calls off the loop (lm_dp_call.cancel). */
volatile int *wk_sc_cancel_flag(wk *w);
void wk_sc_stop(wk *w);   /* cancels and joins every copy thread */
bool wk_sc_sending(wk *w); /* a copy from this worker is still being sent (or waits for its receipt) */
/* How many copies sent for a receipt (a drain's) failed, and the first one's error. */
uint32_t wk_sc_receipt_failures(wk *w, char *first, size_t cap);

/* ---- checkpoint files and drain (wk_ckpt.c) ---- */

/* CHECKPOINT_IO (the frame: the job decodes its own copy): writes or reads safetensors files on
 * the thread pool, answers CHECKPOINT_IO_REPLY or ERROR with the frame's request id. */
void wk_on_checkpoint_io(wk *w, const lm_frame *f);
/* DRAIN: answers ACK once no shard copy from here is in flight, then stops the worker (status 0). */
void wk_on_drain(wk *w, uint64_t rid);
/* STASH (wk_stash.c): a suspended pool session's shards out of device memory, or back. */
void wk_on_stash(wk *w, uint64_t rid, const Lmw__Stash *m);
/* SHARD_MOVE (wk_stash.c): a resumed pool session's shards to their new devices. */
void wk_on_shard_move(wk *w, uint64_t rid, const Lmw__ShardMove *m);
void wk_sc_free(wk *w);

/* ---- the worker ---- */

struct wk {
  struct lm_pjrt *pjrt;        /* backend pjrt: the plugin client over this worker's devices */
  char kind[48];               /* device kind reported to the controller */
  uv_loop_t loop;
  uv_signal_t sigint, sigterm;
  uv_timer_t timer;            /* connection retries, then heartbeats */
  uv_async_t async;            /* device threads -> loop: launches finished */
  bool async_open;
  lm_worker_config cfg;
  struct sockaddr_storage addr;
  lm_conn *conn;               /* to the controller; NULL between attempts */
  lm_conn_config conn_cfg;
  wk_dev *devs;                /* [cfg.devices] */
  char host[256];
  uint64_t first_attempt_ms;
  bool registered, stopping, done;
  uint32_t worker_id, heartbeat_ms;
  uint64_t heartbeat_seq;
  uint8_t token_key[LM_TOKEN_KEY_SIZE];
  bool have_secret;            /* cfg.secret_file was read: the controller is challenged too */
  uint8_t secret[LM_AUTH_SECRET_SIZE];
  uint8_t nonce[LM_AUTH_NONCE_SIZE];     /* this connection's half of the challenge */
  uint8_t auth_proof[LM_AUTH_MAC_SIZE];  /* our answer, sent in REGISTER_WORKER */
  uint64_t cseq;               /* controller messages processed since registration */
  lm_dp *dp;                   /* data-plane endpoint (NULL if it could not be created) */
  wk_store store;
  wk_sc *sc;                   /* shard copies in flight and snapshots (wk_shardcopy.c) */
  uint64_t epoch;              /* this registration's epoch (RegisterWorkerReply) */
  bool fenced;                 /* the controller declared this worker lost: stop, then rejoin */
  bool durable;                /* the controller keeps a journal: losing it, keep the shards and resume */
  bool resuming;               /* lost such a controller: reconnecting to register as the same worker */
  uint64_t resume_since_ms;    /* when the controller was lost */
  uint32_t resume_backoff_ms;  /* the next retry's delay (doubles up to RESUME_BACKOFF_MAX_MS) */
  struct wk_done_ring *ring;   /* launches finished recently, by seq: a RUN sent again is answered
                                  from here, never run twice (wk_exec.c) */
  char fenced_msg[LM_ERR_MSG_MAX];
  wk_program *programs;
  wk_text *texts;              /* program texts by digest (wk_texts.c) */
  uint64_t text_bytes, text_clock;
  uint64_t texts_reused, loads_shared; /* LOAD_PROGRAMs served without a text / without parsing */
  struct load_job *loading;    /* programs being loaded on the thread pool (wk_exec.c) */
  wk_launch *active;           /* launches with tasks queued or running */
  struct lm_relay *relay;      /* hierarchical dispatch: this worker as a relay (worker/relay.h) */
  struct wk_relayed *relayed;  /* RUNs from relays waiting for their min_cseq (wk_exec.c) */
  uint64_t next_link;          /* ids of relay connections to the data port */
  pthread_mutex_t done_mu;
  wk_launch *finished;         /* finished, RUN_DONE not sent yet */
  /* data port */
  uv_tcp_t data_server;
  bool data_open;
  char data_addr[LM_ADDR_MAX];
  wk_dconn *dconns;
  wk_parked *parked;
  uv_pipe_t local_server;      /* the local socket */
  bool local_open;
  char local_name[80];         /* "@loom-data-PID-NONCE" */
  char boot_id[64];
  uint32_t ptracer_pid;
  wk_xfer_stats xstats;
  lm_spmd_coll_stats cstats;   /* collective calls of all launches (device threads add) */
  uint64_t dp_sent, dp_received; /* the data plane's byte counters at the last heartbeat */
  int rc;                      /* result of lm_worker_run */
  lm_err err;
};

/* Ends the worker's run with rc (0, or a status and its message). */
void wk_finish(wk *w, int rc, const char *msg);
/* Sends a one-way message to the controller (logs a failure). */
void wk_send(wk *w, unsigned type, uint64_t rid, const ProtobufCMessage *m);

#endif
