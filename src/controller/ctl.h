/* The controller's internals, shared by its parts:
 *   controller.c    the event loop, peers, handshake, registration, health, sessions
 *   ctl_arrays.c    array metadata and placement: create, locate, delete (no element data)
 *   ctl_programs.c  compiling: parse, SPMD analysis, the executable cache, loading on workers
 *   ctl_launch.c    launches: validation, global sequence numbers, one RUN per worker,
 *                   completion, failures, the launch log
 *   ctl_plan.c      a program's launch plan: its workers and each one's processes, built once
 *   ctl_frees.c     deleted arrays' frees, held briefly per worker and sent with its next RUN
 *   ctl_peers.c     new data-plane peers, announced to each worker in batches
 *   ctl_http.c      the HTTP port (/metrics, /healthz, /readyz) on its own thread, fed by snapshots
 *   ctl_metrics.c   counters and the Prometheus text format
 *   ctl_pool.c      the shared pool: admission, queue, quotas, accounting, watchdog (ctl_pool.h)
 *   ctl_recover.c   elastic recovery: standbys take over lost workers' devices, shards are
 *                   restored (or recomputed by replaying their producers from the launch log),
 *                   launches in flight re-issued; snapshots of puts; drain
 *   ctl_snapshot.c  periodic snapshots of launch outputs into other workers' host memory, and the
 *                   launch log truncated behind them (what no live array's replay needs is dropped)
 *   ctl_ckpt.c      checkpoints: named arrays saved to and loaded from safetensors files that the
 *                   workers write and read; manifests (file work on the thread pool)
 *   ctl_journal.c   the journal (--state): durable state in SQLite (journal.c), restored at start;
 *                   workers and sessions resume; replies held until what they reveal is durable
 * Everything runs on the loop thread, except what ctl_http.c says runs on its thread. */
#ifndef LM_CONTROLLER_CTL_H
#define LM_CONTROLLER_CTL_H

#include <stdbool.h>
#include <stdint.h>
#include "common/sharding.h"
#include "controller/controller.h"
#include "controller/ctl_metrics.h"
#include "controller/ctl_trace.h"
#include "controller/ctl_pool.h"
#include "controller/registry.h"
#include "controller/session.h"
#include "hlo/spmd.h"
#include "net/auth.h"
#include "net/msg.h"
#include "net/sock.h"
#include "net/token.h"

typedef enum { ROLE_NEW = 0, ROLE_CLIENT, ROLE_WORKER } peer_role;

typedef struct ctl ctl;
typedef struct c_launch c_launch;
typedef struct ctl_http ctl_http;

typedef struct peer {
  ctl *ctl;
  lm_conn *conn;
  peer_role role;
  bool registered;           /* workers: REGISTER_WORKER accepted */
  uint32_t worker_id;        /* workers, once registered */
  uint64_t cseq;             /* workers: messages sent to it since registration */
  lm_session *session;       /* clients */
  uint64_t last_ms;          /* clients: when its last frame arrived (idle sessions time out) */
  char user[LM_TOKEN_USER_MAX + 1]; /* clients: the user their token names ("" without tokens) */
  bool challenged;           /* workers: HELLO_REPLY carried our challenge */
  uint8_t nonce[LM_AUTH_NONCE_SIZE], challenge[LM_AUTH_NONCE_SIZE]; /* workers: the two halves */
  pool_sess *pool;           /* clients: the session's place in the pool (ctl_pool.c) */
  bool resumed;              /* clients: the session was restored from the journal and resumed by this
                                connection (requests may be re-sent: ctl_journal.c) */
  struct peer *prev, *next;  /* the controller's list of peers */
} peer;

/* Handle kinds in a session's table. */
enum { H_ARRAY = 1, H_EXECUTABLE = 2 };

enum { A_READY = 0, A_PENDING = 1, A_FAILED = 2 };

/* An array's metadata; its data lives on the workers. */
typedef struct c_array {
  uint64_t id;
  lm_dtype dtype;
  int rank;
  int64_t dims[LM_SHARD_MAX_RANK];
  lm_sharding sh;            /* sh.devices points at devs */
  uint32_t *devs;            /* virtual device ids */
  int state;                 /* A_* */
  int code;                  /* A_FAILED: why */
  char *msg;
  uint64_t producer;         /* the launch that computes it (0: put) */
  uint32_t *held;            /* the controller's dev_refs while devs hold its devices (ctl_hold) */
  uint32_t nheld;
  pool_sess *pool;           /* the pool session charged for its memory (ctl_pool.c), or NULL */
  uint64_t pool_bytes;
  uint32_t *bk;              /* [sh.ndev] the worker keeping a snapshot of shard i in host memory,
                                LM_REG_NO_DEVICE for none; NULL: no snapshots (ctl_recover.c) */
  /* lineage (replay, ctl_recover.c): a launch output with a shard that no other worker holds
   * records its producer's inputs, each of which counts it in lin_refs; a deleted array with
   * lin_refs > 0 is kept at the workers (within --replay-keep-mb) so a replay can still read it */
  uint64_t *lin_in;          /* [nlin] its producer's inputs (NULL: none recorded) */
  uint32_t nlin;
  uint32_t lin_refs;         /* recorded arrays (live or kept) whose producer read this one */
  bool log_ref;              /* it counts in its producer's log entry (refs): a completed launch output
                                with a shard no other worker holds and no snapshot (ctl_snapshot.c) */
} c_array;

enum { P_LOADING = 0, P_READY = 1, P_FAILED = 2, P_ANALYZING = 3 /* parse + partition on the thread pool */ };

typedef struct c_waiter {    /* a COMPILE waiting for its program to load */
  peer *client;
  uint64_t rid;
  /* instead of a client: called once the program is loaded (READY) or failed (it is freed after) */
  void (*done)(struct ctl *c, struct c_program *p, void *arg);
  void *arg;
  struct c_waiter *next;
} c_waiter;

/* A compiled program, shared by every session that compiles the same text for the same devices. */
typedef struct c_program {
  uint64_t id;
  uint64_t fingerprint;
  int refs;                  /* executables naming it */
  char *text;
  size_t len;
  char *name;
  uint32_t ndev;
  uint32_t *devices;         /* virtual id of each process */
  uint32_t *proc_pos;        /* process -> its mesh position */
  lm_spmd_info *info;
  int state;                 /* P_* */
  uint32_t loads_pending;
  int code;
  char msg[LM_ERR_MSG_MAX];
  struct c_load { uint32_t worker; uint64_t rid; bool textless; } *loads; /* [nloads] LOAD_PROGRAMs sent; rid 0:
                                answered; textless: sent without the text, which the worker should hold */
  uint8_t digest[32];        /* SHA-256 of the text: its content address (computed with the analysis) */
  bool needs_map;            /* several processes that may talk (collectives, or partitioned): the
                                workers get where every process runs */
  uint32_t nloads;
  bool default_devices;      /* compiled without a device list (devices 0..n-1) */
  bool asked_prefix;         /* a pool session's compile without a list: its first n devices of asked */
  uint32_t *held;            /* the controller's dev_refs while devices[0..ndev) are held */
  uint32_t *asked;           /* P_ANALYZING: the device list the compile gave (nasked, 0 = default) */
  size_t nasked;
  c_waiter *waiters;
  uint64_t idle_since;       /* when refs dropped to 0 */
  struct c_plan *plan;       /* where it runs (ctl_plan.c), built once its devices are known; loads[k]
                                went to plan->workers[k] */
  bool map_in_run;           /* the devices moved since loading: every RUN carries the map */
  struct c_program *next;
} c_program;

/* A program's launch plan (ctl_plan.c), so a launch costs O(workers): the workers holding its
 * devices and each one's processes. Shared by the program and its running launches (refs). */
typedef struct c_plan {
  int refs;
  uint32_t nproc;
  uint32_t nworkers;         /* workers holding a device of it */
  uint32_t *workers;         /* [nworkers] their ids, in order of their first process */
  uint32_t *wfirst;          /* [nworkers + 1]: workers[k] runs processes wprocs[wfirst[k] .. wfirst[k+1]) */
  uint32_t *wprocs;          /* [nproc] processes grouped by worker */
  uint32_t *proc_worker;     /* [nproc] each process's worker id ... */
  uint32_t *proc_local;      /* [nproc] ... and local device index */
  uint32_t *widx;            /* [nwidx] worker id -> its index in workers, UINT32_MAX if none */
  uint32_t nwidx;
  /* hierarchical dispatch (docs/scale.md), when the program runs on --relay-min-workers or more:
   * group g is workers[g * gsize .. min((g + 1) * gsize, nworkers)), relayed by its first worker */
  uint32_t ngroups;          /* 0: one RUN per worker */
  uint32_t gsize;
  uint8_t **gblob;           /* [ngroups] each group's RelayGroup, encoded: RELAY_RUN's payload */
  size_t *gblen;
} c_plan;

typedef struct c_exe {
  ctl *ctl;
  c_program *prog;
} c_exe;

/* One entry of the launch log: what the recovery of a lost worker would replay. */
typedef struct c_log_entry {
  uint64_t seq, session, program;
  uint32_t nin, nout, ndev;
  uint64_t *ids;             /* [nin + nout] inputs then outputs */
  uint32_t *phys;            /* [2 * ndev]: worker, local index of each process's device */
  int status;                /* 1 running, 0 ok, < 0 failed */
  uint32_t refs;             /* live or kept arrays it computed that only a replay could restore: at 0
                                (once it ended) ids and phys are dropped (truncated; seq and status stay) */
} c_log_entry;

#define LM_LAUNCH_LOG_MAX 65536
/* Array ids from here on are the controller's (a replay's scratch outputs); clients may not use them. */
#define LM_CTL_RESERVED_IDS (UINT64_C(1) << 63)

struct c_launch {
  uint64_t seq;
  peer *client;              /* NULL once the client is gone */
  uint64_t rid;
  uint64_t session;
  c_program *prog;           /* a reference (refs) */
  c_plan *plan;              /* where it runs (a reference) */
  uint32_t nworkers;         /* = plan->nworkers */
  const uint32_t *workers;   /* = plan->workers: workers with devices in it */
  uint8_t *done;             /* [nworkers] reported (or lost) */
  bool relayed;              /* sent through the plan's relays (RELAY_RUN per group) */
  uint8_t *gdone;            /* relayed: [plan->ngroups] its relay reported (or was lost) */
  uint32_t pending;
  bool failed;
  uint32_t nout;
  uint64_t *outputs;
  uint64_t t0_ns;            /* uv_hrtime() when it arrived (metrics) */
  int end_code;              /* why it ended early (launch_end_early); 0 otherwise */
  ctl_trace_launch *trace;   /* its record while a trace records it (ctl_trace.c), else NULL */
  pool_sess *pool;           /* charged for it (ctl_pool.c) */
  uint64_t started_ns;       /* when it was sent to the workers (uv_hrtime) */
  uint64_t jno;              /* the journal operation of its record (its reply waits for its commit) */
  uint64_t *r_inputs;        /* restored from the journal: its inputs until it is sent again; a
                                replay: its inputs (ctl_launch_reads) */
  uint32_t r_nin;
  struct c_replay *replay;   /* a recovery's recomputation of a completed launch (ctl_recover.c), not
                                logged or journaled, no client; NULL for every other launch */
  c_launch *hnext;           /* hash chain by seq */
  c_launch *prev, *next;     /* active list */
};

#define C_LAUNCH_BUCKETS 4096

struct ctl {
  uv_loop_t loop;
  uv_tcp_t server;
  uv_signal_t sigint, sigterm;
  uv_timer_t health;
  lm_controller_config cfg;
  lm_registry *reg;
  peer *peers;               /* every connected peer */
  uint32_t npeers;
  peer **worker_peer;        /* [worker id] -> its peer while alive, else NULL */
  uint32_t worker_peer_cap;
  uint32_t nsessions;
  uint64_t next_session;
  uint64_t start_ms;
  uint64_t last_tick_ms;     /* the health timer's previous tick (a late one means the loop stalled) */
  bool stopping;
  char bound[LM_ADDR_MAX];
  uint8_t (*worker_key)[LM_TOKEN_KEY_SIZE]; /* [worker id] its transfer key (worker_peer_cap) */
  uint64_t *lost_at;         /* [worker id] when it was lost (0: alive or never) (worker_peer_cap) */
  uint32_t *dev_refs;        /* [LM_REG_MAX_DEVICES] arrays and programs naming each virtual device */
  /* authentication (net/auth.h) */
  bool have_secret;
  uint8_t secret[LM_AUTH_SECRET_SIZE];
  uint8_t dp_master[LM_AUTH_SECRET_SIZE]; /* random per controller: the workers' data-plane pair keys */
  lm_token_store tokens;     /* loaded from cfg.tokens_file, reloaded when the file changes */
  struct { int64_t mtime_ns, size, ino; bool loaded; } tokens_sig;
  int tokens_err;            /* < 0: the file could not be read (tokens_msg says why): refuse clients */
  char tokens_msg[LM_ERR_MSG_MAX];
  /* programs */
  c_program *programs;
  uint64_t next_program;
  uint64_t next_rid;         /* requests the controller sends to workers */
  /* launches */
  uint64_t next_seq;
  c_launch *active;
  c_launch *by_seq[C_LAUNCH_BUCKETS];
  uint64_t launches_total, launches_failed;
  c_log_entry *log;          /* ring of the last LM_LAUNCH_LOG_MAX launches */
  uint64_t log_count;
  uint64_t log_kept;         /* entries holding ids (not truncated) */
  uint64_t log_dropped;      /* entries truncated since the start */
  struct ctl_snap *snap;     /* periodic snapshots of launch outputs (ctl_snapshot.c) */
  uint32_t *dev_pos, *dev_stamp; /* [LM_REG_MAX_DEVICES] scratch of the input check: an array's shard
                                    index per device, valid where dev_stamp is stamp */
  uint32_t stamp;
  struct c_sent *sent;       /* [sent_cap] per worker id: digests of the texts it was sent (ctl_programs.c) */
  uint32_t sent_cap;
  struct c_frees *frees;     /* [frees_cap] per worker id: frees waiting to be sent (ctl_frees.c) */
  uint32_t frees_cap;
  uint32_t *frees_dirty, ndirty; /* worker ids with frees waiting */
  uv_timer_t frees_timer;
  bool frees_timer_on, frees_timer_init;
  struct c_pend *pend;       /* [pend_cap] per worker id: data-plane peers to announce (ctl_peers.c) */
  uint32_t pend_cap;
  uint32_t *pend_dirty, pend_ndirty; /* worker ids with peers waiting */
  uv_timer_t peers_timer;
  bool peers_timer_on, peers_timer_init;
  /* observability (ctl_http.c): NULL without --http */
  ctl_http *http;
  lm_met_counters *met;      /* counters bumped at a few points; NULL: none kept */
  struct ctl_tracer *trace;  /* launch traces (ctl_trace.c); NULL until one starts */
  struct ctl_pool *pool;     /* ctl_pool.c */
  struct ctl_rec *rec;       /* elastic recovery (ctl_recover.c) */
  struct ctl_ckpt *ckpt;     /* checkpoints (ctl_ckpt.c) */
  struct ctl_jr *jr;         /* the journal (ctl_journal.c); NULL without --state */
};

/* Dispatches a frame as if it had just arrived from p (recovery replays deferred requests). */
void ctl_dispatch(peer *p, lm_frame *f);

uint64_t ctl_now_ms(ctl *c);
/* Counts devs[0..n) as named (held) by an array or program, so their ids are not reclaimed;
 * returns the table to keep in its `held` field, for ctl_release. */
uint32_t *ctl_hold(ctl *c, const uint32_t *devs, uint32_t n);
void ctl_release(uint32_t *held, const uint32_t *devs, uint32_t n);
void ctl_reply(peer *p, const lm_frame *f, unsigned type, const ProtobufCMessage *m);
/* Serves a client's frame as if it had just arrived (a suspended session's held request). */
void ctl_replay_frame(peer *p, lm_frame *f);
#define ctl_reply_error(p, rid, code, ...) lm_conn_send_errorf((p)->conn, rid, code, __VA_ARGS__)
/* Sends to a live, registered worker (counting its cseq); a worker that is gone is skipped (0:
 * losing it settles what waits on it). < 0 (logged, and in err, which may be NULL): the message
 * could not be sent (too large, out of memory) and the worker stays: the caller fails whatever
 * was to wait for its answer. */
int ctl_worker_send(ctl *c, uint32_t worker, unsigned type, uint64_t rid, const ProtobufCMessage *m,
                    const void *payload, uint64_t plen, lm_err *err);
/* The same with the payload sent from the caller's memory: release(release_arg) runs once it is
 * no longer needed (also when nothing is sent). */
int ctl_worker_send_ref(ctl *c, uint32_t worker, unsigned type, uint64_t rid, const ProtobufCMessage *m,
                        const void *payload, uint64_t plen, void (*release)(void *), void *release_arg, lm_err *err);
/* Reads a wire sharding for an array of rank dims (w NULL: the whole array on device dev0) and
 * checks its form; *devs_out (malloc'd) is s->devices. The devices themselves are not checked. */
int ctl_sharding_read(const Lmw__Sharding *w, int rank, const int64_t *dims, lm_sharding *s, uint32_t **devs_out,
                      uint32_t dev0, lm_err *err);
/* Every device of devs exists, appears once and is healthy; `what` names the list in errors. */
int ctl_check_devices(ctl *c, const uint32_t *devs, uint32_t n, const char *what, lm_err *err);
/* "worker 1 (host pid 123)" */
void ctl_worker_name(ctl *c, uint32_t worker, char *buf, size_t cap);

/* the HTTP port (ctl_http.c): start serves cfg.http_listen on a thread of its own; close (loop
 * thread, when stopping) stops asking the loop for snapshots; free (after the loop has run out)
 * stops the thread. */
int ctl_http_start(ctl *c, lm_err *err);
void ctl_http_close(ctl *c);
void ctl_http_free(ctl *c);
lm_met_counters *ctl_http_counters(ctl_http *h);
/* A launch finished (c->met set): counts it and keeps it among the recent ones (dashboard). */
void ctl_http_launch_done(ctl *c, const c_launch *l, lm_met_outcome how, uint64_t ns);
const char *ctl_http_address(const ctl_http *h); /* "HOST:PORT" bound */
/* Writes "HOST:PORT\n" to path via a temporary file and rename (0.0.0.0 written as 127.0.0.1). */
int ctl_write_address_file(const char *path, const char *bound, lm_err *err);

/* traces (ctl_trace.c; loop thread): start/stop a recording (stop hands over what it recorded);
 * the launch hooks do nothing unless one records */
int ctl_trace_start(ctl *c, lm_err *err);
ctl_trace_result *ctl_trace_stop(ctl *c, lm_err *err);
bool ctl_trace_on(ctl *c);
void ctl_trace_free(ctl *c);
void ctl_trace_launch_begin(ctl *c, c_launch *l, uint64_t arrived, const char *program, uint32_t ndev);
void ctl_trace_launch_sent(c_launch *l);
void ctl_trace_run_done(ctl *c, c_launch *l, uint32_t worker, const Lmw__RunDone *m);
void ctl_trace_launch_end(ctl *c, c_launch *l, int code);
/* TRACE_CONTROL from a client: start (ACK) or stop (TRACE_RESULT with the JSON, built off the loop). */
void ctl_on_trace_control(peer *p, const lm_frame *f, const Lmw__TraceControl *m);
void ctl_trace_client_gone(ctl *c, peer *p);
/* 0 when token (len bytes) is good for this controller (always, without --tokens-file). */
int ctl_check_token(ctl *c, const void *token, size_t len, lm_err *err);

/* arrays */
void ctl_on_array_create(peer *p, const lm_frame *f, const Lmw__ArrayCreate *m);
void ctl_on_array_locate(peer *p, const lm_frame *f, const Lmw__ArrayLocate *m);
void ctl_on_array_delete(peer *p, const lm_frame *f, const Lmw__ArrayDelete *m);
/* Creates array id in p's session (READY; shw NULL: the session's first device), checked as
 * ARRAY_CREATE is; *out is owned by the session. */
int ctl_array_new(peer *p, uint64_t id, uint32_t dtype, const uint64_t *dims, size_t rank, const Lmw__Sharding *shw,
                  c_array **out, lm_err *err);
/* Deletes the session's arrays ids[0..n) as ARRAY_DELETE does (unknown ids are skipped). */
int ctl_arrays_delete(peer *p, const uint64_t *ids, size_t n); /* LOOM_NO_MEMORY: none deleted */
void ctl_array_destroy(void *obj);
/* Fills a wire Sharding from s (rank dims); arrays inside come from the caller's storage. */
void ctl_sharding_to_wire(const lm_sharding *s, int rank, Lmw__Sharding *w, Lmw__DimAxes *dims, Lmw__DimAxes **dptr,
                          uint32_t *axes, uint64_t *mesh_shape);

/* programs */
void ctl_on_compile(peer *p, const lm_frame *f, const Lmw__Compile *m);
void ctl_on_executable_destroy(peer *p, const lm_frame *f, const Lmw__ExecutableDestroy *m);
void ctl_on_load_reply(ctl *c, peer *w, const lm_frame *f);
void ctl_program_release(ctl *c, c_program *prog);
/* The program of prog's text on other devices: prog's device list with every from[i] replaced by
 * to[i] (n of them; a pool session resumed on other devices, ctl_pool.c), found in the cache or
 * compiled anew. 1: *out is READY now; 0: *out is analyzing or loading, and done(c, *out, arg)
 * runs once it is READY or FAILED; < 0 (err): it cannot be (a device of prog's list is not in
 * from, out of memory). *out carries no reference. */
int ctl_program_remap(ctl *c, const c_program *prog, const uint32_t *from, const uint32_t *to, uint32_t n,
                      void (*done)(ctl *c, c_program *p, void *arg), void *arg, c_program **out, lm_err *err);
void ctl_programs_client_gone(ctl *c, peer *p);
void ctl_programs_worker_lost(ctl *c, uint32_t worker, const char *why);
void ctl_programs_free(ctl *c);

/* launch plans (ctl_plan.c) */
/* Sets prog->plan to a new plan from the registry's current placement of prog->devices[0..ndev)
 * (releasing the old one). LOOM_NO_MEMORY on failure (the old plan stays). */
int ctl_plan_build(ctl *c, c_program *prog, lm_err *err);
void ctl_plan_release(c_plan *plan); /* NULL ok */
/* True when every process's device is still where prog's plan says (O(processes)). */
bool ctl_plan_current(ctl *c, const c_program *prog);
/* The plan's index of worker, or UINT32_MAX when it holds none of its devices. */
static inline uint32_t ctl_plan_worker_index(const c_plan *plan, uint32_t worker) {
  return plan && worker < plan->nwidx ? plan->widx[worker] : UINT32_MAX;
}
/* One past the plan's index of the last member of relay group g. */
static inline uint32_t ctl_plan_group_end(const c_plan *plan, uint32_t g) {
  return (g + 1) * plan->gsize < plan->nworkers ? (g + 1) * plan->gsize : plan->nworkers;
}

/* frees (ctl_frees.c): FREE_ARRAYS are batched per worker, sent with the worker's next RUN of the
 * same session or within LM_FREE_DELAY_MS */
void ctl_free_later(ctl *c, uint32_t worker, uint64_t session, const uint64_t *ids, size_t n);
/* The frees waiting for worker that a RUN of session can carry: *ids (worker's own list, valid and
 * unchanged until ctl_frees_sent or ctl_free_later for worker) and their count; frees of another
 * session are sent now. */
size_t ctl_frees_for_run(ctl *c, uint32_t worker, uint64_t session, const uint64_t **ids);
/* After the RUN carrying them was sent: forget them. */
void ctl_frees_sent(ctl *c, uint32_t worker);
void ctl_frees_worker_lost(ctl *c, uint32_t worker);
void ctl_frees_stop(ctl *c); /* sends what waits, closes the timer */
void ctl_frees_free(ctl *c);

/* data-plane peers (ctl_peers.c): announcements of new peers batched per recipient, sent after a
 * few ms or before anything else goes to that worker. */
void ctl_peers_announce(ctl *c, uint32_t recipient, uint32_t peer);
void ctl_peers_flush(ctl *c, uint32_t worker); /* what waits for worker goes now */
void ctl_peers_stop(ctl *c);
void ctl_peers_free(ctl *c);

/* launches */
void ctl_on_launch(peer *p, const lm_frame *f, const Lmw__Launch *m);
/* CANCEL_LAUNCH: fails the session's launch with LOOM_CANCELLED (its reply goes out first), aborts
 * it on its workers, then ACKs; a launch already completed (or refused) is left alone. */
void ctl_on_cancel_launch(peer *p, const lm_frame *f, const Lmw__CancelLaunch *m);
void ctl_on_run_done(ctl *c, peer *w, const Lmw__RunDone *m);
/* RELAY_DONE from a relay worker: its group's outcome (failures named per worker). */
void ctl_on_relay_done(ctl *c, peer *w, const Lmw__RelayDone *m);
/* Sends ab to the workers still running l (through the relays of a relayed launch), except skip. */
void ctl_launch_abort(ctl *c, c_launch *l, const Lmw__AbortLaunch *ab, uint32_t skip);
void ctl_launches_client_gone(ctl *c, peer *p);
void ctl_launches_worker_lost(ctl *c, uint32_t worker, const char *why);
void ctl_launches_free(ctl *c);
/* Fails the launch now with code and message full, and aborts it on its workers (the watchdog). */
void ctl_launch_cut(ctl *c, c_launch *l, int code, const char *full, const char *reason);
/* Recovery's hooks (ctl_recover.c): take l out of the sequence table (late RUN_DONEs of its old
 * number are ignored); give it a new number and send its RUNs again with the current device map;
 * fail it for good (reply, outputs failed) and free it. */
void ctl_launch_unhash(ctl *c, c_launch *l);
void ctl_launch_reissue(ctl *c, c_launch *l);
void ctl_launch_abandon(ctl *c, c_launch *l, int code, const char *why);
/* True when an active launch of the session reads array (it must outlive a delete until then). */
bool ctl_launch_reads(ctl *c, uint64_t session, uint64_t array);
/* Sends a replay (l: prog, session, replay set; not listed) under a new sequence number: the
 * inputs in[0..nin) on every device, and per process p the outputs outs[p * nout .. + nout)
 * (RunDevice.outputs). Not logged or journaled; ctl_replay_end runs when it is over. */
void ctl_launch_replay(ctl *c, c_launch *l, lm_session *s, const uint64_t *in, uint32_t nin, const uint64_t *outs,
                       uint32_t nout);

/* elastic recovery (ctl_recover.c, docs/elastic.md) */
int ctl_recover_init(ctl *c);
void ctl_recover_free(ctl *c);
/* A worker was lost: true when recovery takes over its launches (a standby, or waiting for one
 * is configured); false: fail them as before. */
bool ctl_recover_worker_lost(ctl *c, uint32_t worker, const char *why);
/* True while a recovery waits for a worker of ndev devices: a new worker registers as a standby. */
bool ctl_recover_wants(ctl *c, uint32_t ndev);
/* A worker's data plane is known: a waiting recovery may use it. */
void ctl_recover_capacity(ctl *c);
/* An ACK/ERROR from a worker: true when it answered a recovery's request (consumed). */
bool ctl_recover_on_reply(ctl *c, peer *w, const lm_frame *f);
/* A client request while a recovery is in progress: true when it was kept for later. */
bool ctl_recover_defer(ctl *c, peer *p, const lm_frame *f);
void ctl_recover_client_gone(ctl *c, peer *p);
void ctl_recover_tick(ctl *c);
/* The status line ("" when idle), the event log and the count of completed recoveries. */
const char *ctl_recover_state(ctl *c, char *buf, size_t cap);
size_t ctl_recover_events(ctl *c, const char **out, size_t max);
uint32_t ctl_recover_count(ctl *c);
/* A new put array: snapshots its shards that have no replica on another worker (when recovery is
 * possible: a standby is registered or --recover-wait is set). The worker holding such a shard
 * acknowledges the client's put only once the snapshot is kept (LM_TOKEN_PUT_SNAP). */
void ctl_snapshot_plan(ctl *c, c_array *a);   /* before the placement reply: fills a->bk */
void ctl_snapshot_put(ctl *c, peer *p, c_array *a);  /* after it: sends the copies */
/* ARRAY_DELETE of an array an active launch still reads: keeps its shards until that launch is
 * over (a recovery may re-issue it). True: taken, the caller sends no FREE_ARRAYS. */
bool ctl_zombie_keep(ctl *c, lm_session *s, c_array *a);
/* A new launch output a (inputs in[0..nin) of its producer): records its lineage when one of its
 * shards has no copy on another worker (the inputs' lin_refs count it). */
void ctl_lineage_note(ctl *c, lm_session *s, c_array *a, const uint64_t *in, size_t nin);
/* Array a of session s is deleted for good (not kept): its inputs stop counting it. */
void ctl_lineage_drop(ctl *c, lm_session *s, c_array *a);
/* Helpers shared with ctl_snapshot.c (ctl_recover.c). */
bool ctl_worker_usable(ctl *c, uint32_t id);
bool ctl_recovery_possible(ctl *c);        /* a standby is registered, or --recover-wait is set */
bool ctl_recover_idle(ctl *c);             /* no recovery or drain in progress */
uint32_t ctl_snapshot_buddy(ctl *c, uint32_t holder); /* the worker to keep holder's snapshots, or UINT32_MAX */
bool ctl_shard_replicated(ctl *c, const c_array *a, uint32_t k); /* shard k's region is on another worker too */
c_array *ctl_find_array(ctl *c, lm_session *s, uint64_t id);     /* live, or deleted and kept; NULL: neither */
/* Sends a snapshot copy of shard k of a from its holder to buddy's host memory; receipt: the
 * buddy confirms to the holder that it kept the bytes; report: it tells the controller how it
 * ended (SNAPSHOT_KEPT). Returns the copy's tag. */
uint64_t ctl_snapshot_send(ctl *c, lm_session *s, const c_array *a, uint32_t k, uint32_t buddy, bool receipt,
                           bool report);
void ctl_zombies_sweep(ctl *c);

/* periodic snapshots of launch outputs and the launch log's truncation (ctl_snapshot.c) */
int ctl_snap_init(ctl *c);
void ctl_snap_free(ctl *c);
/* l completed well: its outputs that only a replay could restore count in its log entry (else the
 * entry is dropped at once) and become candidates for the next snapshot round. */
void ctl_snap_launch_done(ctl *c, c_launch *l, lm_session *s);
/* a no longer needs its producer's log entry (deleted for good, snapshotted, its session gone). */
void ctl_log_unref(ctl *c, c_array *a);
/* Frees entry e's ids and phys (seq and status stay, for state checks). */
void ctl_log_drop(ctl *c, c_log_entry *e);
void ctl_on_snapshot_kept(ctl *c, peer *w, const Lmw__SnapshotKept *m);
void ctl_snap_worker_lost(ctl *c, uint32_t worker);
void ctl_snap_tick(ctl *c);
/* Deleted arrays kept for replays fill half of --replay-keep-mb: the next launch completion (or
 * tick) starts a snapshot round, whatever the count or the time since the last one. */
void ctl_snap_pressure(ctl *c);
/* for status: confirmed snapshots of launch outputs (arrays, bytes) and copies in flight */
void ctl_snap_counts(ctl *c, uint64_t *arrays, uint64_t *bytes, uint32_t *inflight);

/* A replay launch is over (ok or not): its scratch outputs are freed, its targets failed if it
 * failed (called by launch_free). */
void ctl_replay_end(ctl *c, c_launch *l);
/* A replay launch failed (msg): the arrays it restores fail with it. */
void ctl_replay_failed(ctl *c, c_launch *l, int code, const char *msg);
/* DRAIN from a client: moves a live worker's devices and shards to a standby (like a recovery,
 * with the drained worker as the source of every shard), then releases it; the reply comes
 * when it is over. */
void ctl_on_drain(peer *p, const lm_frame *f, const Lmw__Drain *m);
/* True while worker is being drained (it is marked lost but still connected and serving copies). */
bool ctl_recover_draining(ctl *c, uint32_t worker);
/* The drained worker's connection closed. */
void ctl_recover_drain_gone(ctl *c, uint32_t worker);

/* checkpoints (ctl_ckpt.c, docs/elastic.md "Checkpoints") */
int ctl_ckpt_init(ctl *c, lm_err *err);   /* creates cfg.checkpoint_dir (if set) */
void ctl_ckpt_free(ctl *c);
void ctl_on_checkpoint(peer *p, const lm_frame *f, const Lmw__Checkpoint *m);
/* A CHECKPOINT_IO_REPLY, ACK or ERROR from a worker: true when it answered a checkpoint's request. */
bool ctl_ckpt_on_reply(ctl *c, peer *w, const lm_frame *f);
void ctl_ckpt_worker_lost(ctl *c, uint32_t worker);
void ctl_ckpt_client_gone(ctl *c, peer *p);
/* Whether p may administer the cluster (drain): any client without --tokens-file, else the
 * users named by --admins. */
bool ctl_is_admin(ctl *c, const peer *p);

/* the journal (ctl_journal.c, docs/durability.md). Without --state c->jr is NULL and every hook
 * does nothing. */
int ctl_journal_start(ctl *c, lm_err *err);  /* opens DIR/journal.db and restores the state in it */
void ctl_journal_stop(ctl *c);               /* the loop is stopping: closes its handle */
void ctl_journal_free(ctl *c);               /* after the loop: commits what is queued, closes */
/* Sends a reply to a client; with a journal, held until every record queued so far is committed
 * (a reply never reveals state a restart would not bring back). */
void ctl_send_reply(peer *p, uint64_t rid, unsigned type, const ProtobufCMessage *m);
/* The same, held only until the journal has committed operation `after` (a launch's reply needs
 * its start record, not its end: a restart re-runs an ended launch's record harmlessly). */
void ctl_send_reply_after(peer *p, uint64_t rid, unsigned type, const ProtobufCMessage *m, uint64_t after);
/* The same for a reply nobody waits for (ARRAY_DELETE's ACK): held until what was staged before it
 * is committed, without starting a commit of its own (it goes with the next one). */
void ctl_send_reply_lazy(peer *p, uint64_t rid, unsigned type, const ProtobufCMessage *m);
/* HELLO with resume_session: takes the restored session (checking its secret and user) into p. */
int ctl_journal_resume_session(peer *p, const Lmw__Hello *h, lm_session **out, lm_err *err);
/* True while session id, restored from the journal, waits for its client to resume it. */
bool ctl_journal_detached(ctl *c, uint64_t session);
/* A new session: records it and fills secret (the resume secret for HELLO_REPLY); false: no journal. */
bool ctl_journal_session_opened(peer *p, const Lmw__Hello *h, uint8_t secret[32]);
void ctl_journal_session_closed(ctl *c, uint64_t id);
/* REGISTER_WORKER with resume_worker: answered here (resumed, or refused). key: the transfer key
 * the handshake derived (unused when resuming: the recorded one stays). */
void ctl_journal_resume_worker(peer *p, const lm_frame *f, const Lmw__RegisterWorker *m);
/* While restored workers reconnect, client requests wait (true: kept, replayed later). */
bool ctl_journal_defer(ctl *c, peer *p, const lm_frame *f);
void ctl_journal_tick(ctl *c);
void ctl_journal_progress(ctl *c);
/* "DIR/journal.db (ok | restoring: ... | cannot commit: ...)" for `loom status`; "" without one. */
const char *ctl_journal_state(ctl *c, char *buf, size_t cap);           /* a worker is back: the restore may go on now */
void ctl_journal_client_gone(ctl *c, peer *p);
/* The session with that id: a client's, or a restored one not resumed yet; NULL if none. */
lm_session *ctl_session_find(ctl *c, uint64_t id);
/* A restored launch (not yet sent again) of that sequence number, or NULL. */
c_launch *ctl_journal_held_launch(ctl *c, uint64_t seq);
/* records */
void ctl_j_worker(ctl *c, uint32_t id);
void ctl_j_array(ctl *c, uint64_t session, const c_array *a);
void ctl_j_array_del(ctl *c, uint64_t session, uint64_t id);
void ctl_j_program(ctl *c, const c_program *p);
void ctl_j_program_del(ctl *c, uint64_t id);
void ctl_j_exe(ctl *c, uint64_t session, uint64_t id, uint64_t program);
void ctl_j_exe_del(ctl *c, uint64_t session, uint64_t id);
void ctl_j_launch(ctl *c, const c_launch *l, const Lmw__Launch *m);
void ctl_j_launch_end(ctl *c, const c_launch *l);
void ctl_j_launch_del(ctl *c, uint64_t seq);
void ctl_j_meta(ctl *c);                     /* after a new session, program or sequence number */
/* A pool session's record: its accounting, and (open, holding devices) what its resume needs. */
struct ctl_j_pool {
  const uint32_t *devs;
  uint32_t ndev, weight, launch_limit_ms;
  bool suspended;
};
typedef struct ctl_j_pool ctl_j_pool;
void ctl_j_usage(ctl *c, uint64_t session, const char *user, const char *name, const char *priority,
                 uint64_t opened_unix_ms, uint64_t closed_unix_ms, uint32_t asked, const Lmw__PoolUsage *u,
                 const ctl_j_pool *jp);
void ctl_j_usage_del(ctl *c, uint64_t session);
/* the worker slot tables (controller.c) cover id; < 0: out of memory */
int ctl_worker_slot(ctl *c, uint32_t id);

/* restoring (ctl_programs.c, ctl_launch.c) */
struct Lmj__Program;
c_program *ctl_program_restore(ctl *c, const struct Lmj__Program *jp, lm_err *err);
/* The loaded program with that id, or NULL. */
c_program *ctl_program_find(ctl *c, uint64_t id);
int ctl_exe_restore(ctl *c, lm_session *s, uint64_t id, c_program *prog, lm_err *err);
/* A resumed session's COMPILE of an executable it has: answered again (true). */
bool ctl_compile_again(peer *p, const lm_frame *f, const Lmw__Compile *m);
/* A launch the journal had in flight: made again (not sent) with its sequence number. */
c_launch *ctl_launch_restore(ctl *c, lm_session *s, c_program *prog, uint64_t seq, const uint64_t *in, size_t nin,
                             const uint64_t *out, size_t nout);
/* Sends a restored launch to its workers (they answer at once if they ran it already). */
void ctl_launch_resume(ctl *c, c_launch *l);
/* A resumed session's LAUNCH whose outputs exist: attached to that launch or answered (true). */
bool ctl_launch_again(peer *p, const lm_frame *f, const Lmw__Launch *m);

#endif
