/* Hierarchical dispatch, the relay's side (docs/scale.md "Hierarchical dispatch"). Above a cluster
 * size the controller sends a launch to one relay worker per group of workers (RELAY_RUN, with the
 * group as its payload) instead of one RUN to every worker. The relay forwards each member its RUN
 * over the member's data port (authenticated by a RELAY token the controller made with the
 * member's transfer key), runs its own part locally, collects the members' RUN_DONEs and sends
 * the controller one RELAY_DONE carrying only the failures (and timings, when a trace records),
 * each naming its worker. A member whose connection closes, or that the controller reports lost
 * (WORKER_LOST), counts as failed with the reason; ABORT_LAUNCH is forwarded on the same
 * connections (after the RUN it aborts). Shared by real workers (worker.c) and simulated ones
 * (sim.c); loop thread only. */
#ifndef LM_WORKER_RELAY_H
#define LM_WORKER_RELAY_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>
#include "net/frame.h"
#include "net/msg.h"

typedef struct lm_relay lm_relay;

typedef struct lm_relay_ops {
  /* runs the relay's own part of a launch; its RUN_DONE comes back through lm_relay_local_done */
  void (*run_local)(void *user, const Lmw__Run *run);
  /* sends a one-way message to the controller */
  void (*send_ctl)(void *user, unsigned type, const ProtobufCMessage *m);
} lm_relay_ops;

/* NULL when out of memory. ops must outlive it. */
lm_relay *lm_relay_new(uv_loop_t *loop, const lm_relay_ops *ops, void *user);
/* This worker's id (after each registration). */
void lm_relay_set_self(lm_relay *r, uint32_t worker_id);
/* RELAY_RUN from the controller (f: its frame, whose payload is the RelayGroup). */
void lm_relay_on_run(lm_relay *r, const lm_frame *f, const Lmw__RelayRun *m);
/* The relay's own RUN_DONE for a launch it relays (lm_relay_ops.run_local's). */
void lm_relay_local_done(lm_relay *r, const Lmw__RunDone *d);
/* ABORT_LAUNCH from the controller: forwarded to the members still running it (not to the relay's
 * own part: the caller aborts that). */
void lm_relay_on_abort(lm_relay *r, const Lmw__AbortLaunch *m);
/* WORKER_LOST from the controller: that member's launches fail here; its connection closes. */
void lm_relay_worker_lost(lm_relay *r, uint32_t worker, const char *why);
/* Closes every connection to members (the loop then ends); NULL ok. */
void lm_relay_stop(lm_relay *r);
/* Frees it once its loop has stopped; NULL ok. */
void lm_relay_free(lm_relay *r);

#endif
