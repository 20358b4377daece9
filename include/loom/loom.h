/* Loom's public C client API: connect to a cluster's controller and see its devices as one
 * machine. Link with -lloom (libloom.so or libloom.a); docs/c-api.md has a walk-through and
 * docs/examples/list_devices.c a complete program.
 *
 * Conventions (stable across versions):
 *   - every fallible call returns a loom_status: LOOM_OK (0) or a negative code;
 *     loom_strerror() names the code, loom_errmsg(handle) gives the detail of the last failure;
 *   - handles are opaque; each create has a destroy, and destroy(NULL) is a no-op;
 *   - structs a caller passes in or gets filled start with `size_t struct_size`, which the
 *     caller sets to sizeof(the struct) as compiled: fields are only ever appended, so old
 *     callers keep working with new libraries and the other way round;
 *   - options structs have an _initialize function that sets struct_size and the defaults;
 *   - every string the library hands out says how long it lives;
 *   - blocking calls honour the client's timeout and its interrupt hook.
 * Thread safety: a loom_client may be used from several threads at once (requests travel
 * pipelined on its one connection); loom_errmsg() then reports the most recent failure on it. */
#ifndef LOOM_H
#define LOOM_H

#include <stddef.h>
#include <stdint.h>
#include "loom/loom_dtype.h"
#include "loom/loom_status.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(LOOM_BUILDING_LIBRARY) && defined(__GNUC__)
#define LOOM_API __attribute__((visibility("default")))
#else
#define LOOM_API
#endif

#define LOOM_VERSION_MAJOR 0
#define LOOM_VERSION_MINOR 1
#define LOOM_VERSION_PATCH 0

/* The library's version, e.g. "0.1.0". Static storage. */
LOOM_API const char *loom_version(void);
/* A short description of a status ("protocol version mismatch"). Static storage; never NULL. */
LOOM_API const char *loom_strerror(loom_status status);
/* The status's name ("VERSION_MISMATCH"), "UNKNOWN" for others. Static storage. */
LOOM_API const char *loom_status_name(loom_status status);

/* ---- connecting ---- */

/* A connection to a controller: one session, owning everything created through it. */
typedef struct loom_client loom_client;

/* Polled (from the waiting thread, every ~50 ms) during blocking calls; return nonzero to stop
 * waiting: the call fails with LOOM_CANCELLED. For Ctrl-C in bindings (issue 5). */
typedef int (*loom_interrupt_fn)(void *arg);

typedef struct loom_connect_options {
  size_t struct_size;          /* sizeof(loom_connect_options) */
  /* "HOST:PORT" of the controller. NULL: $LOOM_CONTROLLER, else the local cluster started by
   * `loom up` (its state directory: $LOOM_STATE_DIR, else $XDG_RUNTIME_DIR/loom, else
   * /tmp/loom-$UID). Copied during the call. */
  const char *address;
  /* Limit for connecting and for each request, in milliseconds; < 0: wait forever.
   * Default 30000. */
  int64_t timeout_ms;
  loom_interrupt_fn interrupt; /* optional; default NULL */
  void *interrupt_arg;
  /* Shown by `loom status` for this session; copied during the call. Default NULL. */
  const char *client_name;
  /* Reserved for authentication; sent to the controller, which ignores it today. */
  const void *auth_token;
  size_t auth_token_size;
} loom_connect_options;

/* Sets struct_size and the defaults above. */
LOOM_API void loom_connect_options_initialize(loom_connect_options *options);

/* Connects (HELLO with the protocol version; a controller speaking another version refuses
 * with LOOM_VERSION_MISMATCH), opens a session and fetches the device list. options may be
 * NULL for all defaults. On success *out is the new client; on failure *out is NULL and
 * loom_errmsg(NULL) in this thread says why. */
LOOM_API loom_status loom_connect(const loom_connect_options *options, loom_client **out);

/* Closes the session (the controller frees everything it owned) and the client. NULL ok. */
LOOM_API void loom_disconnect(loom_client *client);

/* The detail of the most recent failed call on client, or "" if none; with client == NULL, of
 * the most recent failed loom_connect in this thread. Valid until the next call on the same
 * client (or, for NULL, the next loom_connect in this thread). Never NULL. */
LOOM_API const char *loom_errmsg(const loom_client *client);

/* The controller's "HOST:PORT" this client is connected to. Valid until loom_disconnect. */
LOOM_API const char *loom_client_address(const loom_client *client);
/* This client's session id at the controller (nonzero). */
LOOM_API uint64_t loom_client_session(const loom_client *client);

/* ---- devices ---- */

/* The device list is a snapshot, taken by loom_connect and renewed by loom_refresh_devices
 * (health and memory use change; devices are only ever added, never renumbered). */
LOOM_API loom_status loom_refresh_devices(loom_client *client);

/* Number of devices in the snapshot: virtual ids are 0 .. *out_count - 1. */
LOOM_API loom_status loom_device_count(loom_client *client, int32_t *out_count);

typedef struct loom_device_desc {
  size_t struct_size;          /* in: sizeof(loom_device_desc) */
  int32_t id;                  /* virtual device id: the device's identity for this client */
  const char *kind;            /* "cpu" */
  int32_t worker_id;           /* the controller's id of the worker holding it */
  int32_t local_index;         /* its index on that worker */
  const char *worker_host;     /* the worker's host name */
  int64_t worker_pid;          /* the worker's process id */
  const char *slice;           /* the worker's slice */
  uint64_t memory_capacity;    /* bytes */
  uint64_t memory_used;        /* bytes in use at the last heartbeat */
  int32_t healthy;             /* 1 healthy, 0 not (its worker is lost) */
  const char *health_reason;   /* why not healthy; "" when healthy */
} loom_device_desc;

/* Fills *out (whose struct_size the caller set) for virtual device id. Strings live until the
 * next loom_refresh_devices or loom_disconnect on this client. LOOM_NOT_FOUND for an id out of
 * range. */
LOOM_API loom_status loom_device_info(loom_client *client, int32_t id, loom_device_desc *out);

#ifdef __cplusplus
}
#endif

#endif /* LOOM_H */
