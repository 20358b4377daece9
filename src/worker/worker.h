/* The worker daemon (`loom worker`): owns D CPU devices (memory budgets from the executor,
 * src/exec/exec.h) with one execution thread and queue each, connects to the controller,
 * registers the devices, heartbeats their memory use, loads programs and runs launches in
 * global sequence order; serves shard puts and gets to clients on its data port; and has a
 * data-plane endpoint (src/dataplane) for collectives between workers. Internals: wk.h. */
#ifndef LM_WORKER_H
#define LM_WORKER_H

#include <stdint.h>
#include "common/err.h"

#define LM_WORKER_MAX_DEVICES 1024

typedef struct lm_worker_config {
  const char *controller;        /* "HOST:PORT" */
  uint32_t devices;              /* 1..LM_WORKER_MAX_DEVICES (default 4) */
  uint64_t device_memory;        /* bytes per device (default 2 GiB) */
  const char *slice;             /* slice name (default "default") */
  uint32_t connect_timeout_ms;   /* keep retrying the first connection this long (default 30000) */
  const char *data_listen;       /* "HOST:PORT" of the data port; NULL: this host's address toward
                                    the controller, any free port */
  const char *secret_file;       /* the cluster secret to prove to the controller (NULL: none) */
  const char *backend;           /* "interp" (Loom's executor, default) or "pjrt" */
  const char *pjrt_plugin;       /* backend pjrt: the plugin (NULL: lm_pjrt_default_plugin()) */
  const char *const *pjrt_options; /* its client create options, "name=value" */
  int npjrt_options;
  bool standby;                  /* register as spare capacity (no virtual devices until it replaces
                                    a lost worker) */
  uint32_t fenced_worker;        /* rejoining after being declared lost: the old worker id + 1 ... */
  uint64_t fenced_epoch;         /* ... and its epoch (informational; 0: none) */
} lm_worker_config;

void lm_worker_config_default(lm_worker_config *c);

/* Runs the worker until SIGINT/SIGTERM (returns 0) or until the controller cannot be reached,
 * refuses the registration or goes away (returns a negative status with err set). Declared lost
 * by a controller that is still there (it stalled past the heartbeat timeout), it returns
 * LOOM_WORKER_LOST with *fenced_epoch set (when fenced_epoch is not NULL): its state is stale and
 * must be dropped; `loom worker` then starts afresh as a standby. */
int lm_worker_run_fenced(const lm_worker_config *cfg, uint32_t *fenced_worker, uint64_t *fenced_epoch, lm_err *err);
int lm_worker_run(const lm_worker_config *cfg, lm_err *err);

#endif
