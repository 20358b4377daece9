/* The controller daemon (`loom controller`): one libuv loop serving workers (registration,
 * heartbeats, health) and clients (one session per connection; device list, cluster status).
 * Any peer may misbehave: it is dropped with a logged reason and everyone else keeps being
 * served. Message handling is in controller.c; the registry and sessions are pure modules. */
#ifndef LM_CONTROLLER_H
#define LM_CONTROLLER_H

#include <stdbool.h>
#include <stdint.h>
#include "common/err.h"
#include "net/conn.h"

typedef struct lm_controller_config {
  const char *listen;              /* "HOST:PORT"; port 0 = any free port */
  const char *address_file;        /* optional: the bound "HOST:PORT" is written here (atomically) */
  uint32_t heartbeat_interval_ms;  /* told to workers at registration (default 200) */
  uint32_t heartbeat_timeout_ms;   /* a worker silent this long is lost (default 900) */
  uint32_t max_peers;              /* connections beyond this are refused (default 4096) */
  lm_conn_config conn;             /* limits and deadlines for every peer (lm_conn_config_default) */
  const char *secret_file;         /* the cluster secret workers must prove they hold (NULL: none) */
  const char *tokens_file;         /* client tokens (`loom token`); NULL: clients need none */
  bool insecure;                   /* allow a non-loopback listener without both of the above */
  uint32_t session_idle_timeout_ms;/* a session that sends nothing and has no launch running this
                                      long is closed (0: never, the default) */
  uint32_t reclaim_after_ms;       /* once fresh ids run out, a worker lost this long gives its worker
                                      id and device ids to a new worker of as many devices, if no
                                      array or program names them (default 60000) */
  const char *http_listen;         /* "HOST:PORT" of the HTTP port (/metrics, /healthz, /readyz);
                                      NULL: none */
  const char *http_address_file;   /* optional: the HTTP port's bound "HOST:PORT" is written here */
  const char *http_token_file;     /* a token (first line) that may read /metrics and the dashboard;
                                      with it or tokens_file those need one (the probes never do) */
  uint32_t max_sessions_per_user;  /* open sessions one token user may hold (default 1024; with
                                      tokens only) */
  const char *pool_config;         /* the shared pool's classes and quotas (docs/pool.md); NULL: the
                                      built-in classes prod > interactive > batch, no quotas */
  uint32_t recover_wait_ms;        /* a lost worker with no standby to replace it: its launches wait
                                      this long for a new worker (0, the default: they fail at once) */
  bool no_snapshots;               /* do not snapshot puts or launch outputs into other workers' host memory */
  uint32_t snapshot_every;         /* a round of snapshots of launch outputs every this many completed
                                      launches (default 100; 0: not by count) ... */
  uint32_t snapshot_interval_ms;   /* ... or this often (default 10000; 0: not by time); both 0: none */
  uint32_t replay_keep_mb;         /* deleted arrays kept at the workers because a live array's
                                      replay reads them: at most this many MiB (default 256; 0:
                                      none kept) */
  const char *checkpoint_dir;      /* where checkpoints go (a directory per user below it); it must
                                      be the same shared filesystem path on every worker's host.
                                      NULL: checkpoints are refused */
  const char *admins;              /* with tokens_file: comma-separated users who may drain workers
                                      (NULL: none; without tokens every client may) */
  const char *state_dir;           /* the journal's directory (--state, docs/durability.md): durable
                                      state in DIR/journal.db, restored at start; NULL: none */
  uint32_t resume_wait_ms;         /* with a journal: how long restored workers and sessions have to
                                      come back after a restart (default 60000) */
  uint32_t relay_min_workers;      /* hierarchical dispatch (docs/scale.md): a launch over this many
                                      workers or more goes through relays (default 128; 0: never) */
  uint32_t relay_group;            /* workers per relay (default 32) */
} lm_controller_config;

void lm_controller_config_default(lm_controller_config *c);

/* Runs the controller until SIGINT or SIGTERM. Returns 0 after a clean stop, or a negative
 * status with err set when it cannot start (bad address, port in use, unwritable file, an
 * unreadable secret or token file, a non-loopback address without authentication). */
int lm_controller_run(const lm_controller_config *cfg, lm_err *err);

#endif
