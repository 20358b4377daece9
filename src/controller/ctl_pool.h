/* The shared pool (issue 14, docs/pool.md): sessions that ask for a number of devices and a
 * priority class are admitted when their devices are free and queued otherwise (FIFO within a
 * class, classes in their configured order); per-user quotas from the controller's configuration
 * file (--config, a small TOML subset); accounting per session and per user; the launch watchdog.
 *
 * A pool session sees its devices as 0..n-1: the controller maps them to the cluster devices it
 * was given at the edges (ARRAY_CREATE, COMPILE, LIST_DEVICES, ARRAY_PLACEMENT, COMPILE_REPLY).
 * A session that asks for no devices is "shared": it sees every device, as before the pool.
 * Everything runs on the controller's loop thread. */
#ifndef LM_CONTROLLER_CTL_POOL_H
#define LM_CONTROLLER_CTL_POOL_H

#include <stdbool.h>
#include <stdint.h>
#include "common/err.h"
#include "net/frame.h"
#include "wire.pb-c.h"

struct ctl;
struct peer;
struct c_array;
struct c_launch;
struct c_program;
typedef struct pool_sess pool_sess;
struct ctl_j_pool;

/* Reads the configuration (path NULL: the built-in classes prod > interactive > batch, no
 * quotas) into c->pool. Errors name the file and line. */
int ctl_pool_init(struct ctl *c, const char *path, lm_err *err);
void ctl_pool_free(struct ctl *c);

/* A client's HELLO, its session just created: 1 = fill r's pool fields and reply now; 0 = the
 * session waits in the queue (its HELLO_REPLY goes out when admitted); < 0 = refused (err). */
int ctl_pool_hello(struct peer *p, const lm_frame *f, const Lmw__Hello *h, Lmw__HelloReply *r, lm_err *err);
/* A client request of a suspended (preempted) session: kept (a copy) to run when it resumes;
 * returns 1 when it was kept or refused (answered), 0 when it is to be served now. */
int ctl_pool_hold(struct peer *p, const lm_frame *f);
/* True while the peer's session waits for admission: it may make no request yet. */
bool ctl_pool_queued(const struct peer *p);
/* The client's connection closed (its session already destroyed): frees its devices, admits. */
void ctl_pool_client_gone(struct ctl *c, struct peer *p);
/* Every health tick: admission, queue progress to waiting clients, the launch watchdog. */
void ctl_pool_tick(struct ctl *c);
/* A worker's ACK/ERROR to a STASH the pool sent (true), or not the pool's (false). */
bool ctl_pool_on_reply(struct ctl *c, struct peer *w, const lm_frame *f);
void ctl_pool_on_status(struct peer *p, const lm_frame *f, const Lmw__PoolStatus *m);

/* ---- a pool session's own device numbering ---- */

/* The cluster devices of a pool session (n > 0), or NULL for a shared session. */
const uint32_t *ctl_pool_devices(const struct peer *p, uint32_t *n);
/* Rewrites the device ids of a client request (ARRAY_CREATE's sharding, COMPILE's list) from the
 * session's numbering to the cluster's; < 0 (err, the caller answers) for an id it does not have. */
int ctl_pool_rewrite(struct peer *p, unsigned type, ProtobufCMessage *m, lm_err *err);
/* Cluster ids -> the session's (ids it does not hold are left as they are). */
void ctl_pool_map_out(const struct peer *p, uint32_t *devs, size_t n);

/* ---- accounting and quotas ---- */

/* A new array of the session (a put's ARRAY_CREATE when check, a launch's output otherwise):
 * counts its bytes against the user's device_memory quota (< 0 when a check fails) */
int ctl_pool_array_add(struct peer *p, struct c_array *a, bool check, lm_err *err);
void ctl_pool_array_gone(struct c_array *a);
/* An ARRAY_LOCATE answered (a get's transfer authorized). */
void ctl_pool_array_located(struct peer *p, const struct c_array *a);
/* Before a launch is accepted: the queued_launches and device_memory (outputs) quotas. */
int ctl_pool_launch_check(struct peer *p, const struct c_program *prog, lm_err *err);
void ctl_pool_launch_start(struct peer *p, struct c_launch *l);
/* When the launch is freed (completed, failed, or cut): device-seconds and counts. */
void ctl_pool_launch_end(struct ctl *c, struct c_launch *l);

/* ---- accounting across restarts (the journal: ctl_journal.c, docs/durability.md) ---- */

/* Writes the accounting of every session whose usage changed since it was last written. */
void ctl_pool_journal(struct ctl *c);
/* A session's accounting read back from the journal: listed as closed (one that was open at the
 * restart closes then, unless its client resumes it: its usage then goes on). */
/* jp: what the session held (open, holding devices: kept for its client to resume it; see
 * ctl_pool_resume_check). */
void ctl_pool_restore_usage(struct ctl *c, uint64_t id, const char *user, const char *name, const char *priority,
                            uint64_t opened_unix_ms, uint64_t closed_unix_ms, uint32_t asked,
                            const Lmw__PoolUsage *w, const struct ctl_j_pool *jp);
/* A client resumes session id after a restart asking the pool for `asked` devices: < 0 (err) when
 * that cannot be (it held another number; it waited in the queue, which is not restored). */
int ctl_pool_resume_check(struct ctl *c, uint64_t id, uint32_t asked, lm_err *err);
/* A restored session was not resumed in time (closed): the devices kept for it are free again. */
void ctl_pool_detached_closed(struct ctl *c, uint64_t id);

#endif
