/* The controller's internals, shared by its parts:
 *   controller.c    the event loop, peers, handshake, registration, health, sessions
 *   ctl_arrays.c    array metadata and placement: create, locate, delete (no element data)
 *   ctl_programs.c  compiling: parse, SPMD analysis, the executable cache, loading on workers
 *   ctl_launch.c    launches: validation, global sequence numbers, one RUN per worker,
 *                   completion, failures, the launch log
 *   ctl_pool.c      the shared pool: admission, queue, quotas, accounting, watchdog (ctl_pool.h)
 * Everything runs on the loop thread. */
#ifndef LM_CONTROLLER_CTL_H
#define LM_CONTROLLER_CTL_H

#include <stdbool.h>
#include <stdint.h>
#include "common/sharding.h"
#include "controller/controller.h"
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
  bool asked_prefix;         /* a pool session's compile without a list: its first n devices of asked */
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
  pool_sess *pool;           /* charged for it (ctl_pool.c) */
  uint64_t started_ns;       /* when it was sent to the workers (uv_hrtime) */
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
  struct ctl_pool *pool;     /* ctl_pool.c */
};

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
/* Fails the launch now with code and message full, and aborts it on its workers (the watchdog). */
void ctl_launch_cut(ctl *c, c_launch *l, int code, const char *full, const char *reason);

#endif
