/* Loom's public C client API: connect to a cluster's controller, see its devices as one
 * machine, put sharded arrays on them, compile StableHLO programs once and launch them on every
 * device asynchronously. Link with -lloom (libloom.so or libloom.a); docs/c-api.md has a walk-through and
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

/* Where a session waiting for the shared pool's devices stands (docs/pool.md); passed to
 * loom_connect_options.queue_progress. Strings are valid during the call only. */
typedef struct loom_queue_status {
  size_t struct_size;          /* sizeof(loom_queue_status) as the library knows it */
  uint32_t position;           /* 1: next to be admitted */
  uint32_t queued;             /* sessions waiting in all */
  uint32_t devices;            /* what this session asked for */
  uint32_t free_devices;       /* devices free now */
  uint64_t waited_ms;
  const char *priority;        /* its class */
  const char *blocked_by;      /* why it waits, one line */
} loom_queue_status;

typedef void (*loom_queue_fn)(void *arg, const loom_queue_status *status);

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
  /* The client token ("loom_..." from `loom token create`), sent in HELLO to a controller that
   * requires one. NULL: $LOOM_TOKEN, else the file $LOOM_TOKEN_FILE names, else the local
   * cluster's token (`loom up` writes it to the state directory) when connecting to that cluster. */
  const void *auth_token;
  size_t auth_token_size;
  /* ---- the shared pool (docs/pool.md); fields appended after auth_token_size ---- */
  /* Devices the session asks the pool for: it is admitted when that many are free (waiting in the
   * controller's queue until then) and sees them as its devices 0..n-1. 0 (default): a shared
   * session that sees every device and never waits. */
  uint32_t pool_devices;
  /* The priority class ("prod", "interactive", "batch" unless the controller's --config names
   * others); NULL: the controller's default class. Copied during the call. */
  const char *priority;
  /* A launch running longer than this is cancelled by the controller's watchdog (LOOM_TIMEOUT);
   * 0: the class's limit. It can lower the class's limit, never raise it. */
  uint32_t launch_limit_ms;
  /* With pool_devices: how long loom_connect may wait in the queue; <= 0 (default): no limit
   * (interrupt still stops it). */
  int64_t queue_timeout_ms;
  /* Called (on a library thread) each time the controller reports the queue while the session
   * waits; NULL: nothing is reported. */
  loom_queue_fn queue_progress;
  void *queue_progress_arg;
  /* With pool_devices: > 0 time-shares the devices with other sessions that ask for as many
   * devices with a weight: their launches interleave, each session getting launches in
   * proportion to its weight. 0 (default): the devices are the session's alone. */
  uint32_t share_weight;
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
/* A pool session: the number of devices it was given (0: a shared session), its class, and how
 * long it waited in the queue. priority is valid until loom_disconnect. */
LOOM_API uint32_t loom_client_pool_devices(const loom_client *client);
LOOM_API const char *loom_client_priority(const loom_client *client);
LOOM_API uint64_t loom_client_queued_ms(const loom_client *client);

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
  uint64_t memory_peak;        /* the most bytes in use at once since its worker started (launch
                                  temporaries included), as of the last heartbeat */
} loom_device_desc;

/* Fills *out (whose struct_size the caller set) for virtual device id. Strings live until the
 * next loom_refresh_devices or loom_disconnect on this client. LOOM_NOT_FOUND for an id out of
 * range. */
LOOM_API loom_status loom_device_info(loom_client *client, int32_t id, loom_device_desc *out);

/* ==== arrays, executables, launches (issue 4) ====
 *
 * A typical program:
 *
 *   int32_t devs[8] = {0, 1, 2, 3, 4, 5, 6, 7};
 *   loom_sharding sh;
 *   loom_sharding_tiled(&sh, devs, 8, 0);              // split dim 0 over the 8 devices
 *   int64_t dims[1] = {8};
 *   loom_put_args put;
 *   loom_put_args_initialize(&put);
 *   put.dtype = LOOM_DTYPE_S32; put.rank = 1; put.dims = dims; put.sharding = &sh;
 *   put.data = host; put.data_size = sizeof host;
 *   loom_array *x;
 *   loom_array_put(client, &put, &x);                  // returns once the shards are on the workers
 *   loom_executable *exe;
 *   loom_compile(client, text, strlen(text), NULL, &exe);   // StableHLO text as JAX prints it
 *   loom_array *y;
 *   loom_future *f;
 *   loom_launch(exe, &x, 1, NULL, &y, 1, &f);          // returns at once; y exists as a handle
 *   loom_future_wait(f, -1);                           // or chain more launches on y first
 *   loom_array_get(y, out, sizeof out);                // assembled on the host
 *   loom_future_destroy(f); loom_array_release(x); loom_array_release(y);
 *   loom_executable_destroy(exe);
 *
 * Every handle below belongs to the client it was made with and must be released before
 * loom_disconnect (which frees the session's device memory on the workers in any case). */

#define LOOM_MAX_RANK 16        /* array rank limit */
#define LOOM_MAX_MESH_AXES 8    /* device mesh rank limit */

/* ---- shardings ----
 *
 * How an array is laid out over devices: a device mesh (an N-d grid of virtual devices) and,
 * for each array dimension, the mesh axes it is split over. Any mesh axis no dimension uses
 * replicates the array along it. This is the information of a JAX NamedSharding (mesh.devices
 * -> mesh_shape + devices row-major; PartitionSpec entry d -> dim_axes[d], a tuple of axis
 * names -> several axes, major to minor) and of an XLA OpSharding (tile_assignment_dimensions
 * -> mesh_shape with dim d over axis d, a trailing replicated tile dimension -> an axis no dim
 * uses; tile_assignment_devices -> devices). Shards must divide evenly: dimension d of size n
 * split over axes of total size k needs n % k == 0, and each shard is n / k long.
 *
 * Shard order: the device at mesh position (i0, i1, ...) is devices[row-major index]; along a
 * dimension split over axes (a, b) (a major), the shard index is i_a * size_b + i_b. */
typedef struct loom_sharding {
  size_t struct_size;                 /* sizeof(loom_sharding) */
  int32_t mesh_rank;                  /* number of mesh axes, 0..LOOM_MAX_MESH_AXES; 0 = a single
                                         device, devices[0] (same as a mesh of shape [1]) */
  int64_t mesh_shape[LOOM_MAX_MESH_AXES]; /* axis sizes, each >= 1; product == num_devices */
  int32_t num_devices;                /* >= 1 */
  const int32_t *devices;             /* [num_devices] distinct virtual device ids, mesh row-major
                                         (last axis fastest). Passed in: read during the call.
                                         Handed out: lives as long as the object it describes */
  /* dim_axes[d][0..k): the mesh axes array dimension d is split over, major to minor, ended by
   * -1 (or by filling all LOOM_MAX_MESH_AXES entries). Each mesh axis appears at most once in
   * the whole table. Dimensions at or beyond the array's rank must have no axes. */
  int8_t dim_axes[LOOM_MAX_RANK][LOOM_MAX_MESH_AXES];
} loom_sharding;

/* struct_size, an empty mesh (mesh_rank 0), no devices, and every dim_axes entry -1. */
LOOM_API void loom_sharding_initialize(loom_sharding *s);
/* Whole array on one device: mesh_rank 0, devices = device (a pointer to the caller's id, read
 * when the sharding is used). */
LOOM_API void loom_sharding_single(loom_sharding *s, const int32_t *device);
/* The same full copy on each of devices[0..n): a 1-d mesh [n] that no dimension uses. */
LOOM_API void loom_sharding_replicated(loom_sharding *s, const int32_t *devices, int32_t n);
/* Dimension dim split into n equal shards, shard i on devices[i]: a 1-d mesh [n] used by dim. */
LOOM_API void loom_sharding_tiled(loom_sharding *s, const int32_t *devices, int32_t n, int32_t dim);

/* ---- arrays ----
 *
 * An array is a global shape and dtype with a sharding over virtual devices; its data lives as
 * shards in device memory on the workers (charged to each device's memory budget). Element
 * data is always row-major (C order), little-endian, dense; bool (PRED) is one byte 0/1;
 * f16/bf16 are their 16-bit patterns; complex numbers are (real, imaginary) pairs. Bulk data
 * travels between this process and the workers directly, never through the controller. */
typedef struct loom_array loom_array;

typedef struct loom_put_args {
  size_t struct_size;                 /* sizeof(loom_put_args) */
  loom_dtype dtype;
  int32_t rank;                       /* 0..LOOM_MAX_RANK */
  const int64_t *dims;                /* [rank], each >= 0 */
  /* Where it goes. NULL: the whole array on virtual device 0. */
  const loom_sharding *sharding;
  /* The global array, data_size == product(dims) * dtype size bytes ... */
  const void *data;
  size_t data_size;
  /* ... or, instead (data NULL), each device's shard: shard_data[i] holds the shard of
   * sharding->devices[i] (its local shape, row-major); replicas may point to the same memory. */
  const void *const *shard_data;
} loom_put_args;

/* struct_size and defaults: dtype INVALID, rank 0, everything NULL. */
LOOM_API void loom_put_args_initialize(loom_put_args *args);

/* Creates an array and copies the data to its shards' devices; returns when every shard is in
 * device memory (the caller's buffers may be reused at once). Errors: LOOM_INVALID_ARGUMENT (a
 * bad shape, a sharding that does not divide the shape, an unknown device, a wrong data size),
 * LOOM_DEVICE_OUT_OF_MEMORY naming the device (the array is then not created),
 * LOOM_WORKER_LOST. On failure *out is NULL. */
LOOM_API loom_status loom_array_put(loom_client *client, const loom_put_args *args, loom_array **out);

/* Copies the whole array into dst (dst_size must be at least its byte size), assembling the
 * shards (one copy of each distinct shard is fetched). Waits first until the array is ready
 * (the launch that produces it has finished: no time limit, the client's interrupt hook
 * stops it with LOOM_CANCELLED); a failed producer makes this fail with the producer's error.
 * Then each transfer is limited by the client's timeout. */
LOOM_API loom_status loom_array_get(loom_array *array, void *dst, size_t dst_size);
/* Copies one shard, the one on sharding device index `index` (0..num_devices-1), into dst. */
LOOM_API loom_status loom_array_get_shard(loom_array *array, int32_t index, void *dst, size_t dst_size);
/* Waits until the array's data exists (LOOM_OK), its producer failed (that error), or
 * timeout_ms passes (LOOM_TIMEOUT; < 0: no limit) or the interrupt hook fires
 * (LOOM_CANCELLED). */
LOOM_API loom_status loom_array_block_until_ready(loom_array *array, int64_t timeout_ms);
/* Frees the array's shards on the workers (asynchronously; launches already issued that read
 * it still see it). The handle stays valid for queries; using it as data afterwards fails with
 * LOOM_NOT_FOUND ("array 7 was deleted"). Deleting twice is fine. */
LOOM_API loom_status loom_array_delete(loom_array *array);
/* Deletes the array if it is not deleted yet and frees the handle. NULL is a no-op. */
LOOM_API void loom_array_release(loom_array *array);

/* Queries (no communication; valid on deleted arrays too). */
LOOM_API loom_dtype loom_array_dtype(const loom_array *array);
LOOM_API int32_t loom_array_rank(const loom_array *array);
/* [rank] dims; lives as long as the handle. */
LOOM_API const int64_t *loom_array_dims(const loom_array *array);
/* Bytes of the whole array (product of dims * dtype size). */
LOOM_API uint64_t loom_array_nbytes(const loom_array *array);
/* The array's id in its session (what error messages call "array 7"). */
LOOM_API uint64_t loom_array_id(const loom_array *array);
LOOM_API int loom_array_is_deleted(const loom_array *array);
/* Fills *out (caller sets out->struct_size); out->devices lives as long as the handle. */
LOOM_API loom_status loom_array_sharding(const loom_array *array, loom_sharding *out);

typedef struct loom_shard_desc {
  size_t struct_size;                 /* in: sizeof(loom_shard_desc) */
  int32_t device;                     /* virtual device id holding it */
  int32_t rank;
  int64_t offsets[LOOM_MAX_RANK];     /* where the shard starts in the global array */
  int64_t dims[LOOM_MAX_RANK];        /* its shape */
  uint64_t nbytes;
} loom_shard_desc;

/* Number of shards: one per device of the sharding (replicas count separately). */
LOOM_API int32_t loom_array_num_shards(const loom_array *array);
/* The shard on sharding device index `index`. LOOM_NOT_FOUND when out of range. */
LOOM_API loom_status loom_array_shard_info(const loom_array *array, int32_t index, loom_shard_desc *out);

/* ---- executables ---- */

typedef struct loom_executable loom_executable;

typedef struct loom_compile_options {
  size_t struct_size;                 /* sizeof(loom_compile_options) */
  /* The virtual devices that run the program: SPMD process i (i = replica_id * num_partitions +
   * partition_id) runs on devices[i]. NULL: devices 0 .. n-1, n = num_replicas * num_partitions
   * of the module. num_devices must equal n (else LOOM_INVALID_ARGUMENT saying so). */
  const int32_t *devices;
  int32_t num_devices;
  /* Names the program in messages (a file name); copied. NULL: "<program>". */
  const char *name;
} loom_compile_options;

LOOM_API void loom_compile_options_initialize(loom_compile_options *options);

/* Compiles a StableHLO module for the cluster: text[0..len) is MLIR text as JAX's lowering prints
 * it, or MLIR bytecode (a VHLO portable artifact, as jax.export and the IFRT proxy send programs;
 * recognised by its magic number, docs/bytecode.md). The cluster: the controller parses and verifies it, determines its SPMD form (single device;
 * mhlo.num_replicas replicas running the same program; sdy.manual_computation partitions,
 * which is how shard_map and current jax.pmap lower), checks it against the devices, and the
 * workers holding those devices load it. Identical text and options reuse the cached
 * executable. Errors: LOOM_PARSE / LOOM_VERIFY / LOOM_UNSUPPORTED with file:line:col, and
 * LOOM_INVALID_ARGUMENT for a mismatch with the devices ("the module has 8 partitions but 6
 * devices were given", "dimension 0 of argument 0 (size 10) does not split into 4 shards"), or
 * a module that needs automatic SPMD partitioning (sharding annotations without
 * sdy.manual_computation), which Loom does not do yet. options may be NULL. */
LOOM_API loom_status loom_compile(loom_client *client, const char *text, size_t len,
                                  const loom_compile_options *options, loom_executable **out);
/* Frees the handle (the workers unload the program when no session uses it). NULL ok. */
LOOM_API void loom_executable_destroy(loom_executable *exe);

typedef struct loom_executable_info {
  size_t struct_size;                 /* in: sizeof(loom_executable_info) */
  const char *form;                   /* "single", "replicas" or "partitions" */
  int32_t num_replicas, num_partitions;
  int32_t num_devices;                /* num_replicas * num_partitions */
  const int32_t *devices;             /* [num_devices]: process i runs on devices[i] */
  int32_t num_inputs, num_outputs;
  uint64_t fingerprint;               /* of the text and the options: equal for cached ones */
  int32_t cached;                     /* 1 when the controller reused an identical compile */
} loom_executable_info;               /* pointers live as long as the executable */

LOOM_API loom_status loom_executable_info_get(const loom_executable *exe, loom_executable_info *out);

/* The global type of an input or output (what a launch takes or returns). */
typedef struct loom_array_spec {
  size_t struct_size;                 /* in: sizeof(loom_array_spec) */
  loom_dtype dtype;
  int32_t rank;
  int64_t dims[LOOM_MAX_RANK];
} loom_array_spec;

/* Input i's (output i's) global shape and dtype, and how it is sharded over the executable's
 * devices. For "replicas" programs an input or output of per-replica type T is the array
 * [num_replicas, T...] split along dimension 0 (one row per replica); an input may also be an
 * array of type T replicated over the devices. sharding->devices lives as long as exe. */
LOOM_API loom_status loom_executable_input(const loom_executable *exe, int32_t index, loom_array_spec *spec,
                                           loom_sharding *sharding);
LOOM_API loom_status loom_executable_output(const loom_executable *exe, int32_t index, loom_array_spec *spec,
                                            loom_sharding *sharding);

/* ---- launches and futures ---- */

/* Completion of an asynchronous operation (a launch). */
typedef struct loom_future loom_future;

typedef struct loom_launch_options {
  size_t struct_size;                 /* sizeof(loom_launch_options); nothing else yet */
} loom_launch_options;

LOOM_API void loom_launch_options_initialize(loom_launch_options *options);

/* Runs exe once on its devices with inputs[0..num_inputs) (num_inputs must equal the
 * executable's input count) and returns at once: outputs[0..num_outputs) (num_outputs must
 * equal its output count) receive new array handles, which may be used right away as inputs
 * of further launches or be read (reads wait), and *out_future (optional: NULL) the launch's
 * completion. Inputs may be outputs of launches that have not finished. The controller gives
 * every launch a global sequence number; every device runs its launches in that order.
 *
 * Errors in the call itself return here, with no outputs and no future: NULL pointers, wrong
 * counts, an array of another client, an input this client already deleted (LOOM_NOT_FOUND,
 * "input 0 (array 7) was deleted"), a broken connection. Errors only the controller can find
 * (the wrong dtype, shape or sharding for an input, an array the controller does not know, a
 * device whose worker is lost) complete the future with that error and make the outputs fail
 * the same way when used. An input's error (its producer failed or was cancelled) propagates,
 * status and message as they are, to this launch's outputs and future. A worker lost during
 * the launch fails it with LOOM_WORKER_LOST naming the worker. options may be NULL. */
LOOM_API loom_status loom_launch(loom_executable *exe, loom_array *const *inputs, int32_t num_inputs,
                                 const loom_launch_options *options, loom_array **outputs, int32_t num_outputs,
                                 loom_future **out_future);

/* Waits for completion: LOOM_OK, or the operation's error (message: loom_future_errmsg). Stops
 * waiting with LOOM_TIMEOUT after timeout_ms (< 0: no limit) or LOOM_CANCELLED when the
 * client's interrupt hook fires; the future then stays pending and may be waited again
 * (loom_future_status tells this LOOM_CANCELLED, still LOOM_PENDING, from a launch that was
 * cancelled). */
LOOM_API loom_status loom_future_wait(loom_future *future, int64_t timeout_ms);
/* Without waiting: LOOM_PENDING while running, else what loom_future_wait would return. */
LOOM_API loom_status loom_future_status(loom_future *future);
/* The error's message once the future failed, else "". Lives as long as the future. */
LOOM_API const char *loom_future_errmsg(loom_future *future);
/* The launch's global sequence number once it completed successfully, else 0. */
LOOM_API uint64_t loom_future_sequence(loom_future *future);
/* Cancels the launch: the controller completes its future with LOOM_CANCELLED ("launch 12 was
 * cancelled by the client") and tells the workers still running it to stop. On a device where
 * it has not started yet it is dropped from the queue; where it runs, it stops at the next op
 * boundary (a collective waiting for its peers returns too). Either way its devices go on with
 * the launches queued after it. Its outputs fail with LOOM_CANCELLED when used (read, waited
 * for); launches that consume them, issued before or after the cancel, fail with that same
 * status and message, as any input's error propagates.
 *
 * Returns the future's final status, what loom_future_wait returns from now on: LOOM_CANCELLED
 * (message in loom_future_errmsg and loom_errmsg), or, when the launch had already completed
 * before the controller saw the request, how it completed (LOOM_OK or its error), and then
 * nothing is changed. A future that had completed already is not touched (no communication):
 * cancelling it, or cancelling twice, is a no-op returning its status. The call waits for the
 * controller's acknowledgement, a round trip, bounded by the client's timeout and stopped by its
 * interrupt hook: it then fails with LOOM_TIMEOUT or LOOM_CANCELLED while the future is still
 * pending (loom_future_status says LOOM_PENDING), and the request, already sent, still takes
 * effect. Cancelling cannot undo what the launch already did on a device; it frees nothing but
 * the devices' time (release the outputs as usual). Thread-safe, like loom_future_wait. */
LOOM_API loom_status loom_future_cancel(loom_future *future);
/* Frees the future; a pending operation carries on (its outputs still become ready). NULL ok. */
LOOM_API void loom_future_destroy(loom_future *future);

/* ---- checkpoints (docs/elastic.md "Checkpoints") ----
 *
 * A checkpoint is a named set of arrays written to disk by the workers in parallel, as
 * safetensors files (readable by numpy, JAX and PyTorch), with a manifest written last so a
 * half-written checkpoint is never loadable. It can be loaded onto any devices with any sharding.
 * Checkpoints belong to the session's user (its token's; everyone without tokens). Calls that
 * return JSON give a malloc'd string in *out_json (free with loom_free_string; out_json may be
 * NULL). These calls have no time limit (the client's interrupt hook stops the wait). */

/* Saves arrays[i] under names[i] (1..200 printable characters, no " \ [ ]) as checkpoint `name`
 * (1..128 characters of A-Z a-z 0-9 _ . -), replacing an older checkpoint of that name at once.
 * Waits for each array to be computed first. Errors: LOOM_NOT_FOUND (an array was deleted),
 * LOOM_IO naming the file or directory (disk full, unwritable), LOOM_WORKER_LOST. */
LOOM_API loom_status loom_checkpoint_save(loom_client *client, const char *name, const char *const *names,
                                          loom_array *const *arrays, int32_t num_arrays, char **out_json);

/* As loom_checkpoint_save, into the directory `dir` instead of the controller's checkpoint
 * directory: an absolute path (no "." or ".." component), created if missing, that the workers
 * write to directly (on several hosts, a shared filesystem at the same path everywhere). The
 * checkpoint is the directory: its manifest.json and the workers' safetensors files (an older save
 * there is replaced; other files are left alone). Only admins may name a directory (everyone on a
 * cluster without tokens): the workers write as the cluster's user. Errors as loom_checkpoint_save,
 * and LOOM_PERMISSION, LOOM_INVALID_ARGUMENT for a path that is not allowed. */
LOOM_API loom_status loom_checkpoint_save_dir(loom_client *client, const char *dir, const char *const *names,
                                              loom_array *const *arrays, int32_t num_arrays, char **out_json);

typedef struct loom_checkpoint_load_args {
  size_t struct_size;                 /* sizeof(loom_checkpoint_load_args) */
  const char *name;                   /* the checkpoint */
  int32_t num_arrays;                 /* >= 1 */
  const char *const *names;           /* [num_arrays] the arrays to load */
  /* [num_arrays] where each goes (any devices, any sharding that divides its shape); NULL, or a
   * NULL entry: the sharding it was saved with */
  const loom_sharding *const *shardings;
  /* Optional checks, NULL for none: the dtype expected ([num_arrays], 0 = any) and the shape
   * expected (ranks[i] < 0 or dims[i] NULL: any). A mismatch is LOOM_SHAPE_MISMATCH. */
  const loom_dtype *dtypes;
  const int32_t *ranks;
  const int64_t *const *dims;
  /* appended: load from this directory (one loom_checkpoint_save_dir wrote) instead of checkpoint
   * `name` (name may then be NULL); the same rules as loom_checkpoint_save_dir's */
  const char *dir;
} loom_checkpoint_load_args;

LOOM_API void loom_checkpoint_load_args_initialize(loom_checkpoint_load_args *args);
/* Creates num_arrays new arrays from the checkpoint (out_arrays[i] for names[i]); returns when
 * their shards are in device memory. Each worker reads only the byte ranges its new shards need
 * and checks their checksums. Errors: LOOM_NOT_FOUND (no such checkpoint or array in it),
 * LOOM_SHAPE_MISMATCH, LOOM_IO naming a missing, truncated or corrupt file (no array is created
 * then), LOOM_INVALID_ARGUMENT (a sharding that does not fit). */
LOOM_API loom_status loom_checkpoint_load(loom_client *client, const loom_checkpoint_load_args *args,
                                          loom_array **out_arrays, char **out_json);

typedef enum loom_checkpoint_query_op {
  LOOM_CHECKPOINT_LIST = 3,           /* every checkpoint of the user (name ignored) */
  LOOM_CHECKPOINT_SHOW = 4,           /* one checkpoint's arrays, shardings and files */
  LOOM_CHECKPOINT_VERIFY = 5,         /* reads every file of it, checks sizes, checksums, headers */
  LOOM_CHECKPOINT_REMOVE = 6,         /* deletes it (its manifest first) */
} loom_checkpoint_query_op;

/* Lists, shows, verifies or removes checkpoints; *out_json describes the result. */
LOOM_API loom_status loom_checkpoint_query(loom_client *client, loom_checkpoint_query_op op, const char *name,
                                           char **out_json);

/* ---- operations ---- */

/* Drains worker `worker` (planned maintenance): its devices and every shard it holds move to a
 * standby (`loom worker --standby`), launches in flight are re-issued there (bitwise the same
 * results), then the worker leaves. Needs an admin session (the controller's --admins, or no
 * tokens). LOOM_NOT_FOUND when there is no standby of its size. */
LOOM_API loom_status loom_drain_worker(loom_client *client, int32_t worker, char **out_json);

/* Frees a string this API returned. NULL ok. */
LOOM_API void loom_free_string(char *s);

/* ---- traces (docs/observability.md) ---- */

/* Starts recording the cluster's launch trace, the one `loom trace start` starts: every launch's
 * phases per device from now on, whichever client runs it. LOOM_BUSY when one records already. */
LOOM_API loom_status loom_trace_start(loom_client *client);
/* Stops the recording and returns it as Chrome trace event JSON (ui.perfetto.dev opens it):
 * *out_json (NUL-terminated, malloc'd: free() it) of *out_len bytes. LOOM_NOT_FOUND when none
 * records; LOOM_UNSUPPORTED when the JSON is over 64 MiB (`loom trace stop` over the HTTP port
 * has no such limit). */
LOOM_API loom_status loom_trace_stop(loom_client *client, char **out_json, size_t *out_len);

#ifdef __cplusplus
}
#endif

#endif /* LOOM_H */
