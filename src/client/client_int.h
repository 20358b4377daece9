/* libloom's internals shared by client.c (connection, devices), arrays.c (arrays and their
 * transfers to and from workers) and launch.c (executables, launches, futures). */
#ifndef LM_CLIENT_INT_H
#define LM_CLIENT_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include "client/cconn.h"
#include "common/sharding.h"
#include "loom/loom.h"

/* A connection to one worker's data port (shard puts and gets go there directly). */
typedef struct lm_dataconn {
  char addr[LM_ADDR_MAX];
  lm_cconn *conn;
  bool broken;                       /* replaced by a newer one; closed at disconnect */
  struct lm_dataconn *next;
} lm_dataconn;

struct loom_client {
  lm_cconn *conn;
  int64_t timeout_ms;
  loom_interrupt_fn intr;
  void *intr_arg;
  pthread_mutex_t mu;                /* guards devices and errmsg */
  Lmw__ListDevicesReply *devices;    /* the snapshot; its strings back loom_device_desc */
  char errmsg[LM_ERR_MSG_MAX];
  atomic_uint_fast64_t next_id;      /* ids of new arrays and executables in the session */
  pthread_mutex_t data_mu;           /* guards dataconns */
  lm_dataconn *dataconns;
};

/* Records e as the client's last error (or the thread's, for NULL) and returns its code. */
loom_status lm_client_fail(loom_client *c, const lm_err *e);
loom_status lm_client_failf(loom_client *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Closes every data connection (at disconnect). */
void lm_client_close_data(loom_client *c);

/* ---- futures (launch.c) ---- */

/* The shared completion state of a launch: its call to the controller. Referenced by the
 * loom_future handle and by the launch's output arrays. */
typedef struct lm_fut lm_fut;
lm_fut *lm_fut_ref(lm_fut *f);
void lm_fut_unref(lm_fut *f);
/* Waits (timeout_ms < 0: no limit; the client's interrupt hook applies). Returns 0 or the
 * launch's error (message in err), or LOOM_TIMEOUT / LOOM_CANCELLED leaving it pending. */
int lm_fut_wait(lm_fut *f, int64_t timeout_ms, lm_err *err);

/* ---- arrays (arrays.c) ---- */

struct loom_array {
  loom_client *c;
  uint64_t id;
  loom_dtype dtype;
  int32_t rank;
  int64_t dims[LOOM_MAX_RANK];
  lm_sharding sh;                    /* sh.devices = udevs */
  uint32_t *udevs;
  int32_t *idevs;                    /* the same ids, for loom_sharding */
  lm_fut *producer;                  /* the launch computing it; NULL for puts */
  atomic_int deleted;
};

/* A new array handle (no communication): shape and sharding are copied; devices as given. */
loom_array *lm_array_new(loom_client *c, uint64_t id, loom_dtype dtype, int32_t rank, const int64_t *dims,
                         const lm_sharding *sh, lm_fut *producer);
/* Converts a caller's sharding (NULL: device 0) for an array of rank dims into sh with devs
 * (malloc'd, freed by the caller), checked. */
int lm_sharding_from_public(const loom_sharding *in, int32_t rank, const int64_t *dims, lm_sharding *sh,
                            uint32_t **devs, lm_err *err);
/* Fills a public loom_sharding (honouring its struct_size) from sh. */
void lm_sharding_to_public(const lm_sharding *sh, const int32_t *idevs, loom_sharding *out);

#endif
