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

/* How shard bytes move to and from workers on this host (LOOM_TRANSFER). */
enum { LM_XFER_AUTO = 0,   /* local transfers where possible, else the stream */
       LM_XFER_TCP = 1,    /* always the stream over the data port (as between hosts) */
       LM_XFER_LOCAL = 2 }; /* local transfers or an error (tests, benchmarks) */

/* A connection to one worker's data port (shard puts and gets go there directly): its TCP data
 * port, or its local socket with local transfers enabled. */
typedef struct lm_dataconn {
  char addr[LM_ADDR_MAX];            /* the data port's address (the key) */
  lm_cconn *conn;
  bool broken;                       /* replaced by a newer one; closed at disconnect */
  atomic_bool local;                 /* local transfers (cleared when the kernel refuses one) */
  bool ptracer_held;                 /* counts in the PR_SET_PTRACER consent (local.c) */
  struct lm_dataconn *next;
  struct lm_dataconn *hnext;         /* chain in the table by address (not broken ones) */
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
  lm_dataconn **dtab;                /* the usable data connections by address (a hash table of chains) */
  size_t dtab_cap, dtab_n;
  int xfer_mode;                     /* LM_XFER_*, from LOOM_TRANSFER at connect */
};

/* Records e as the client's last error (or the thread's, for NULL) and returns its code. */
loom_status lm_client_fail(loom_client *c, const lm_err *e);
loom_status lm_client_failf(loom_client *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Closes every data connection (at disconnect). */
void lm_client_close_data(loom_client *c);

/* ---- local transfers (local.c) ---- */

/* LM_XFER_* from LOOM_TRANSFER (unset or "auto", "tcp", "local"); anything else is an error. */
int lm_xfer_mode_from_env(int *mode, lm_err *err);
/* Opens the local connection to the worker whose data port answered on `data` (its HELLO_REPLY
 * named a local socket on this host) and does its handshake. 0 with *out when local transfers
 * are enabled; else LOOM_UNSUPPORTED (or another error) saying why. *ptracer_held: the
 * connection counts in the PR_SET_PTRACER consent (release with lm_local_ptracer_release). */
int lm_local_connect(loom_client *c, lm_cconn *data, lm_cconn **out, bool *ptracer_held, lm_err *err);
void lm_local_ptracer_release(void);
/* The contiguous runs of region sd (at any offset) of a row-major array dims: their number (0
 * for an empty region) and their length in bytes. */
uint64_t lm_region_runs(int rank, const int64_t *dims, const int64_t *sd, size_t esize, uint64_t *run_bytes);
/* Their (address, length) pairs in row-major order for the array at base: 2 * runs words. */
void lm_region_ranges(const void *base, int rank, const int64_t *dims, const int64_t *off, const int64_t *sd,
                      size_t esize, uint64_t *words);

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
void lm_sharding_to_public(const lm_sharding *sh, loom_sharding *out);

/* ---- large constants (consts.c) ---- */

/* For a big program: puts each large constant as an array (one copy per worker of devs, or of
 * the session's devices when ndev is 0) and makes *out a text that names them instead
 * (dense_resource<loom_array_S_ID>; malloc'd). *out stays NULL when nothing was lifted (or the
 * text does not parse: the controller reports that). *arrays (narrays) must live as long as
 * the executable; lm_lifted_free releases them. */
int lm_lift_constants(loom_client *c, const char *text, size_t len, const uint32_t *devs, int32_t ndev, char **out,
                      size_t *out_len, loom_array ***arrays, size_t *narrays, lm_err *err);
void lm_lifted_free(loom_array **arrays, size_t n);

#endif
