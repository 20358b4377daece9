/* The controller's metrics: counters the loop thread bumps with relaxed atomics (cheap, never a
 * lock on the hot path), a snapshot of its state (devices, workers, sessions) that the loop
 * builds when the HTTP thread asks, and the Prometheus text exposition of both
 * (https://prometheus.io/docs/instrumenting/exposition_formats/). Pure: no sockets, no loop. */
#ifndef LM_CONTROLLER_CTL_METRICS_H
#define LM_CONTROLLER_CTL_METRICS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "controller/registry.h"

/* Launch latency histogram bucket upper bounds in seconds (the last bucket is +Inf). */
#define LM_MET_LAT_BOUNDS 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10
#define LM_MET_LAT_NB 17 /* 16 bounds + Inf */

/* Only ever incremented (by the loop thread), read by any thread. */
typedef struct lm_met_counters {
  _Atomic uint64_t launches_started;   /* given a sequence number and sent to workers */
  _Atomic uint64_t launches_refused;   /* refused before that (bad arguments, unhealthy devices) */
  _Atomic uint64_t launches_succeeded, launches_failed, launches_cancelled; /* finished */
  _Atomic uint64_t lat_bucket[LM_MET_LAT_NB]; /* finished launches by latency (not cumulative) */
  _Atomic uint64_t lat_sum_ns;
  _Atomic uint64_t workers_registered, workers_lost, sessions_opened;
  _Atomic uint64_t recoveries;         /* lost workers replaced by standbys (ctl_recover.c) */
} lm_met_counters;

/* The outcome of a finished launch. */
typedef enum { LM_MET_OK = 0, LM_MET_FAILED = 1, LM_MET_CANCELLED = 2 } lm_met_outcome;

void lm_met_launch_done(lm_met_counters *m, lm_met_outcome how, uint64_t ns);
static inline void lm_met_inc(_Atomic uint64_t *c) { atomic_fetch_add_explicit(c, 1, memory_order_relaxed); }

typedef struct lm_met_worker {
  uint32_t id;
  char *host, *slice;              /* owned by the snapshot */
  uint32_t pid, ndevices;
  bool alive;
  char *problem;                   /* "" when alive and well; else why it is lost or unusable */
  uint64_t since_heartbeat_ms;
  lm_reg_transfers transfers;
  lm_reg_collectives collectives;
} lm_met_worker;

typedef struct lm_met_device {
  uint32_t id, worker, local_index;
  char kind[16];
  uint64_t capacity, used, peak;
  bool healthy;
} lm_met_device;

/* A finished launch, for the dashboard's list of recent ones. */
typedef struct lm_met_recent {
  uint64_t seq, session;
  char program[64];
  uint32_t ndev;
  uint64_t dur_ns;
  int outcome;                     /* lm_met_outcome */
  uint64_t ended_ms;               /* controller uptime when it ended */
} lm_met_recent;
#define LM_MET_RECENT 32

typedef struct lm_met_session {
  uint64_t id;
  char name[64], peer[64], user[65];
  uint64_t age_ms;
  uint32_t running;                /* its launches running */
} lm_met_session;

/* A consistent copy of the controller's state at one moment, shared by readers (refs). */
typedef struct lm_met_snapshot {
  _Atomic int refs;
  uint64_t taken_ms;               /* on lm_now_ms */
  uint64_t uptime_ms;
  uint32_t sessions, peers, programs, launches_running;
  uint32_t nworkers, ndevices;
  lm_met_worker *workers;
  lm_met_device *devices;
  lm_met_recent recent[LM_MET_RECENT]; /* newest first */
  uint32_t nrecent;
  lm_met_session *session_list;    /* [nsession_list] (malloc'd; may be NULL) */
  uint32_t nsession_list;
} lm_met_snapshot;

lm_met_snapshot *lm_met_snapshot_new(uint32_t nworkers, uint32_t ndevices); /* refs 1; NULL: no memory */
void lm_met_snapshot_ref(lm_met_snapshot *s);
void lm_met_snapshot_unref(lm_met_snapshot *s); /* NULL is a no-op */

/* A growing text buffer; on allocation failure `failed` is set and further appends are dropped. */
typedef struct lm_met_buf {
  char *p;
  size_t len, cap;
  bool failed;
} lm_met_buf;
void lm_met_printf(lm_met_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends s as a Prometheus label value (backslash, double quote and newline escaped). */
void lm_met_label(lm_met_buf *b, const char *s);

/* Appends the whole exposition: counters m and snapshot s (may be NULL: state metrics left out),
 * with age_ms the snapshot's age when it is served. */
void lm_met_render(lm_met_buf *b, const lm_met_counters *m, const lm_met_snapshot *s, uint64_t age_ms);

/* The dashboard (ctl_dashboard.c): /api/status's JSON (malloc'd; NULL without memory) and the page. */
char *lm_met_status_json(const lm_met_counters *m, const lm_met_snapshot *s, uint64_t age_ms);
extern const char lm_dashboard_html[];

#endif
