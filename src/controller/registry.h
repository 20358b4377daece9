/* The controller's worker registry and device table (DESIGN.md §3). Workers register their
 * devices; each device gets a virtual id, dense and stable, assigned in registration order, and
 * reused only when the controller hands a long-lost worker's slot to a new worker
 * (lm_registry_reuse_worker, once fresh ids run out); the physical identity (worker id, local index) is kept beside it so the
 * virtual -> physical map can change later (hot swap) without clients noticing. A device is
 * healthy while its worker is alive. Pure data structure: no sockets, no clock of its own. */
#ifndef LM_CONTROLLER_REGISTRY_H
#define LM_CONTROLLER_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "common/err.h"

#define LM_REG_MAX_WORKERS 4096
#define LM_REG_MAX_DEVICES_PER_WORKER 1024
#define LM_REG_MAX_DEVICES 65536
#define LM_REG_NAME_MAX 255          /* host and slice names */
#define LM_REG_DATAPLANE_MAX 4096    /* bytes of a worker's data-plane address */
#define LM_REG_REASON_MAX 256

typedef enum lm_worker_state { LM_WORKER_ALIVE = 0, LM_WORKER_LOST = 1 } lm_worker_state;

/* What a worker asks to register (from its REGISTER_WORKER message). */
typedef struct lm_worker_spec {
  const char *host;                /* printable, 1..255 bytes */
  uint32_t pid;
  const char *slice;               /* printable, 1..255 bytes */
  uint32_t ndevices;               /* 1..LM_REG_MAX_DEVICES_PER_WORKER */
  const char *const *kinds;        /* [ndevices], by local index: only "cpu" today */
  const uint64_t *capacities;      /* [ndevices] bytes, each > 0 */
  const uint8_t *dataplane;        /* opaque data-plane address; may be NULL */
  size_t dataplane_len;
  const char *data_address;        /* "HOST:PORT" of its data port; may be NULL or "" */
  bool standby;                    /* spare capacity: its devices get no virtual ids until it replaces
                                      a lost worker (lm_registry_swap) */
} lm_worker_spec;

/* Shard transfers a worker's data port served (its heartbeats carry them; `loom status` shows them). */
typedef struct lm_reg_transfers {
  uint64_t local_puts, local_put_bytes, local_gets, local_get_bytes;     /* by cross-memory attach */
  uint64_t stream_puts, stream_put_bytes, stream_gets, stream_get_bytes; /* over the connection */
  uint64_t local_refused;          /* local transfers the kernel refused (the client fell back) */
} lm_reg_transfers;

/* A worker's collective calls by op (all_reduce, all_gather, reduce_scatter, all_to_all,
 * collective_permute, collective_broadcast) and its data plane's traffic (heartbeats carry them). */
#define LM_REG_COLL_OPS 6
typedef struct lm_reg_collectives {
  uint64_t calls[LM_REG_COLL_OPS], bytes[LM_REG_COLL_OPS];
  uint64_t nanos;                  /* time inside the calls, summed over devices */
  uint64_t dp_sent, dp_received;   /* data-plane bytes to and from other workers */
} lm_reg_collectives;

typedef struct lm_reg_worker {
  uint32_t id;                     /* dense, in registration order (a reused slot keeps its id) */
  char *host;
  uint32_t pid;
  char *slice;
  uint32_t ndevices;
  uint32_t *device_ids;            /* virtual id of each local device, by local index (a standby's
                                      are LM_REG_NO_DEVICE until it takes over a lost worker's) */
  uint8_t *dataplane;              /* may be NULL */
  size_t dataplane_len;
  char *data_address;              /* "HOST:PORT" where clients transfer shards; "" if none */
  lm_worker_state state;
  char reason[LM_REG_REASON_MAX];  /* why it is lost; "" while alive */
  uint64_t registered_ms;          /* clock of the caller */
  uint64_t last_heartbeat_ms;      /* registration counts as the first heartbeat */
  lm_reg_transfers transfers;      /* as of the latest heartbeat */
  lm_reg_collectives collectives;  /* as of the latest heartbeat */
  char problem[LM_REG_REASON_MAX]; /* alive but its devices unusable (its data plane did not
                                      start); "" when none */
  bool standby;                    /* holds no virtual devices (yet) */
  uint64_t *capacities;            /* [ndevices] bytes, by local index (what a standby brings) */
  uint32_t replaced_by;            /* lost and replaced: the worker that took its devices, + 1 */
  uint64_t epoch;                  /* registration incarnation, unique in the controller's life */
} lm_reg_worker;

#define LM_REG_NO_DEVICE UINT32_MAX

typedef struct lm_reg_device {
  uint32_t id;                     /* virtual id (index in the table) */
  uint32_t worker;                 /* physical identity: worker id ... */
  uint32_t local_index;            /* ... and its index on the worker */
  char kind[16];
  uint64_t memory_capacity;
  uint64_t memory_used;            /* from the latest heartbeat */
  uint64_t memory_peak;            /* its high-water mark, from the latest heartbeat */
} lm_reg_device;

typedef struct lm_registry lm_registry;

lm_registry *lm_registry_create(void);
void lm_registry_destroy(lm_registry *r); /* NULL is a no-op */

/* Registers a worker at time now_ms and assigns virtual ids to its devices (the next free ones,
 * in local index order). Bad specs (names, counts, kinds, sizes) give LOOM_INVALID_ARGUMENT or
 * LOOM_UNSUPPORTED naming the problem, and change nothing. */
int lm_registry_add_worker(lm_registry *r, const lm_worker_spec *spec, uint64_t now_ms, uint32_t *out_id,
                           lm_err *err);
/* True when a worker with ndevices devices can still get fresh ids (below both maximums). */
bool lm_registry_has_room(const lm_registry *r, uint32_t ndevices);
/* Gives a lost worker's slot (its worker id and its block of virtual device ids) to a new worker
 * with as many devices, at now_ms: the caller has checked nothing names those ids any more.
 * LOOM_INVALID_ARGUMENT for a bad spec or a slot that is alive or of another size. */
int lm_registry_reuse_worker(lm_registry *r, uint32_t id, const lm_worker_spec *spec, uint64_t now_ms, lm_err *err);
/* Records a heartbeat of an alive worker; used (may be NULL) gives memory_used per local index
 * for the first nused devices. LOOM_NOT_FOUND for an unknown or lost worker. */
int lm_registry_heartbeat(lm_registry *r, uint32_t worker, uint64_t now_ms, const uint32_t *local_index,
                          const uint64_t *used, size_t nused, lm_err *err);
/* Records the devices' memory high-water marks from a heartbeat lm_registry_heartbeat accepted. */
void lm_registry_set_peaks(lm_registry *r, uint32_t worker, const uint32_t *local_index, const uint64_t *peak,
                           size_t n);
/* Records a worker's transfer counters (from a heartbeat). LOOM_NOT_FOUND for an unknown worker. */
/* Both keep each total at the largest value reported since the worker registered: a counter
 * never goes down, whatever a worker sends. */
int lm_registry_set_transfers(lm_registry *r, uint32_t worker, const lm_reg_transfers *t, lm_err *err);
int lm_registry_set_collectives(lm_registry *r, uint32_t worker, const lm_reg_collectives *c, lm_err *err);
/* Sets (replaces) a worker's data-plane address. LOOM_NOT_FOUND / LOOM_INVALID_ARGUMENT. */
int lm_registry_set_dataplane(lm_registry *r, uint32_t worker, const uint8_t *blob, size_t len, lm_err *err);
/* Marks an alive worker's devices unhealthy with a reason while it stays connected (e.g. its
 * data plane did not start). LOOM_NOT_FOUND for an unknown worker. */
int lm_registry_set_problem(lm_registry *r, uint32_t worker, const char *reason, lm_err *err);
/* Marks an alive worker lost (its devices turn unhealthy) with a reason; no-op if already lost.
 * Returns true when the state changed. */
bool lm_registry_mark_lost(lm_registry *r, uint32_t worker, const char *reason);
/* Adds to a lost worker's reason ("REASON; NOTE", cut to fit), e.g. why nothing replaced it. */
void lm_registry_note_lost(lm_registry *r, uint32_t worker, const char *note);
/* Marks lost the alive workers whose last heartbeat is older than timeout_ms at now_ms, writing
 * their ids to lost; with lost != NULL at most max are marked (call again for the rest).
 * Returns how many were marked. */
size_t lm_registry_expire(lm_registry *r, uint64_t now_ms, uint64_t timeout_ms, uint32_t *lost, size_t max);

/* Hot swap: the virtual devices of lost worker `dead` move to alive standby `standby` (same
 * device count), local index for local index; the standby is a regular worker from then on and
 * dead records who replaced it. LOOM_INVALID_ARGUMENT naming the reason when they do not fit. */
int lm_registry_swap(lm_registry *r, uint32_t dead, uint32_t standby, lm_err *err);

/* Restoring from the controller's journal (docs/durability.md): a worker recorded with id (ids
 * come in order, from 0), its virtual device ids as recorded (the device table grows to cover
 * them; its devices point at it unless it is a standby or was replaced), its epoch, lost with
 * reason until it reconnects. */
int lm_registry_restore_worker(lm_registry *r, uint32_t id, const lm_worker_spec *spec, const uint32_t *device_ids,
                               uint64_t epoch, uint32_t replaced_by, const char *reason, lm_err *err);
/* A restored (lost) worker reconnected as itself: alive again at now_ms, same id, devices, epoch. */
int lm_registry_revive(lm_registry *r, uint32_t id, uint32_t pid, const char *data_address, uint64_t now_ms,
                       lm_err *err);
/* New epochs are above floor from now on; returns the last epoch handed out (or floor). */
uint64_t lm_registry_epoch_floor(lm_registry *r, uint64_t floor);

uint32_t lm_registry_worker_count(const lm_registry *r);
uint32_t lm_registry_device_count(const lm_registry *r);
const lm_reg_worker *lm_registry_worker(const lm_registry *r, uint32_t id);  /* NULL when out of range */
const lm_reg_device *lm_registry_device(const lm_registry *r, uint32_t id);  /* NULL when out of range */
bool lm_registry_device_healthy(const lm_registry *r, uint32_t id);
/* Why a device is unhealthy ("" when healthy). */
const char *lm_registry_device_reason(const lm_registry *r, uint32_t id);

#endif
