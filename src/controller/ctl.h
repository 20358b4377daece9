/* The controller's internals, shared by its parts:
 *   controller.c    the event loop, peers, handshake, registration, health, sessions
 *   ctl_arrays.c    array metadata and placement: create, locate, delete (no element data)
 *   ctl_programs.c  compiling: parse, SPMD analysis, the executable cache, loading on workers
 *   ctl_launch.c    launches: validation, global sequence numbers, one RUN per worker,
 *                   completion, failures, the launch log
 *   ctl_recover.c   elastic recovery: standbys take over lost workers' devices, shards are
 *                   restored, launches in flight re-issued; snapshots of puts
 * Everything runs on the loop thread. */
#ifndef LM_CONTROLLER_CTL_H
#define LM_CONTROLLER_CTL_H

#include <stdbool.h>
#include <stdint.h>
#include "common/sharding.h"
#include "controller/controller.h"
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
  uint32_t *bk;              /* [sh.ndev] the worker keeping a snapshot of shard i in host memory,
                                LM_REG_NO_DEVICE for none; NULL: no snapshots (ctl_recover.c) */
} c_array;

enum { P_LOADING = 0, P_READY = 1, P_FAILED = 2, P_ANALYZING = 3 /* parse + partition on the thread pool */ };

typedef struct c_waiter {    /* a COMPILE waiting for its program to load */
  peer *client;
  uint64_t rid;
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
  struct c_load { uint32_t worker; uint64_t rid; } *loads; /* [nloads] LOAD_PROGRAMs sent; rid 0: answered */
  uint32_t nloads;
  bool default_devices;      /* compiled without a device list (devices 0..n-1) */
  uint32_t *held;            /* the controller's dev_refs while devices[0..ndev) are held */
  uint32_t *asked;           /* P_ANALYZING: the device list the compile gave (nasked, 0 = default) */
  size_t nasked;
  c_waiter *waiters;
  uint64_t idle_since;       /* when refs dropped to 0 */
  struct c_program *next;
} c_program;

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
} c_log_entry;

#define LM_LAUNCH_LOG_MAX 65536

struct c_launch {
  uint64_t seq;
  peer *client;              /* NULL once the client is gone */
  uint64_t rid;
  uint64_t session;
  c_program *prog;           /* a reference (refs) */
  uint32_t nworkers;
  uint32_t *workers;         /* workers with devices in it */
  uint8_t *done;             /* [nworkers] reported (or lost) */
  uint32_t pending;
  bool failed;
  uint32_t nout;
  uint64_t *outputs;
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
  struct ctl_rec *rec;       /* elastic recovery (ctl_recover.c) */
};

/* Dispatches a frame as if it had just arrived from p (recovery replays deferred requests). */
void ctl_dispatch(peer *p, lm_frame *f);

uint64_t ctl_now_ms(ctl *c);
/* Counts devs[0..n) as named (held) by an array or program, so their ids are not reclaimed;
 * returns the table to keep in its `held` field, for ctl_release. */
uint32_t *ctl_hold(ctl *c, const uint32_t *devs, uint32_t n);
void ctl_release(uint32_t *held, const uint32_t *devs, uint32_t n);
void ctl_reply(peer *p, const lm_frame *f, unsigned type, const ProtobufCMessage *m);
#define ctl_reply_error(p, rid, code, ...) lm_conn_send_errorf((p)->conn, rid, code, __VA_ARGS__)
/* Sends to a live, registered worker (counting its cseq); a worker that is gone is skipped (0:
 * losing it settles what waits on it). < 0 (logged, and in err, which may be NULL): the message
 * could not be sent (too large, out of memory) and the worker stays: the caller fails whatever
 * was to wait for its answer. */
int ctl_worker_send(ctl *c, uint32_t worker, unsigned type, uint64_t rid, const ProtobufCMessage *m,
                    const void *payload, uint64_t plen, lm_err *err);
/* Every device of devs exists, appears once and is healthy; `what` names the list in errors. */
int ctl_check_devices(ctl *c, const uint32_t *devs, uint32_t n, const char *what, lm_err *err);
/* "worker 1 (host pid 123)" */
void ctl_worker_name(ctl *c, uint32_t worker, char *buf, size_t cap);

/* arrays */
void ctl_on_array_create(peer *p, const lm_frame *f, const Lmw__ArrayCreate *m);
void ctl_on_array_locate(peer *p, const lm_frame *f, const Lmw__ArrayLocate *m);
void ctl_on_array_delete(peer *p, const lm_frame *f, const Lmw__ArrayDelete *m);
void ctl_array_destroy(void *obj);
/* Fills a wire Sharding from s (rank dims); arrays inside come from the caller's storage. */
void ctl_sharding_to_wire(const lm_sharding *s, int rank, Lmw__Sharding *w, Lmw__DimAxes *dims, Lmw__DimAxes **dptr,
                          uint32_t *axes, uint64_t *mesh_shape);

/* programs */
void ctl_on_compile(peer *p, const lm_frame *f, const Lmw__Compile *m);
void ctl_on_executable_destroy(peer *p, const lm_frame *f, const Lmw__ExecutableDestroy *m);
void ctl_on_load_reply(ctl *c, peer *w, const lm_frame *f);
void ctl_program_release(ctl *c, c_program *prog);
void ctl_programs_client_gone(ctl *c, peer *p);
void ctl_programs_worker_lost(ctl *c, uint32_t worker, const char *why);
void ctl_programs_free(ctl *c);

/* launches */
void ctl_on_launch(peer *p, const lm_frame *f, const Lmw__Launch *m);
/* CANCEL_LAUNCH: fails the session's launch with LOOM_CANCELLED (its reply goes out first), aborts
 * it on its workers, then ACKs; a launch already completed (or refused) is left alone. */
void ctl_on_cancel_launch(peer *p, const lm_frame *f, const Lmw__CancelLaunch *m);
void ctl_on_run_done(ctl *c, peer *w, const Lmw__RunDone *m);
void ctl_launches_client_gone(ctl *c, peer *p);
void ctl_launches_worker_lost(ctl *c, uint32_t worker, const char *why);
void ctl_launches_free(ctl *c);
/* Recovery's hooks (ctl_recover.c): take l out of the sequence table (late RUN_DONEs of its old
 * number are ignored); give it a new number and send its RUNs again with the current device map;
 * fail it for good (reply, outputs failed) and free it. */
void ctl_launch_unhash(ctl *c, c_launch *l);
void ctl_launch_reissue(ctl *c, c_launch *l);
void ctl_launch_abandon(ctl *c, c_launch *l, int code, const char *why);
/* True when an active launch of the session reads array (it must outlive a delete until then). */
bool ctl_launch_reads(ctl *c, uint64_t session, uint64_t array);

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
bool ctl_zombie_keep(ctl *c, lm_session *s, const c_array *a);

#endif
