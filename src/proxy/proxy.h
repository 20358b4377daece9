/* The IFRT proxy server: JAX's proxy backend (JAX_PLATFORMS=proxy) talks gRPC to it, and it
 * runs what JAX asks for on a Loom cluster as a libloom client. Three layers:
 *   grpc.c     HTTP/2 (nghttp2) + gRPC message framing: connections, streams, the unary and
 *              host-buffer methods; hands IfrtSession requests to a session
 *   session.c  one IfrtSession stream = one Loom session: IfrtRequest -> IfrtResponse
 *   hostbuf.c  the host buffer store shared by both (session id, handle) -> bytes
 * docs/proxy.md describes what is supported. */
#ifndef LM_PROXY_H
#define LM_PROXY_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "common/err.h"

/* The IFRT proxy protocol versions this server speaks (jaxlib 0.10.2 asks for 16..25). */
#define PX_PROTOCOL_MIN 16
#define PX_PROTOCOL_MAX 25

typedef struct px_options {
  const char *listen;        /* "HOST:PORT" to listen on */
  const char *controller;    /* the controller's "HOST:PORT"; NULL: libloom's default lookup */
  const char *address_file;  /* optional: write the bound address here once listening */
  int64_t host_buffer_wait_ms; /* how long a request waits for its HostBufferStore (default 60000) */
  uint32_t pool_devices;     /* each session asks the shared pool for this many devices (0: shared) */
  const char *priority;      /* ... in this class (NULL: the controller's default) */
  uint32_t share_weight;     /* ... time-sharing them with this weight (0: exclusive) */
  const char *trace_dir;     /* profiler requests write DIR/SESSION/loom-trace.json (NULL:
                                $LOOM_TRACE_DIR, else the state directory's traces/) */
  volatile sig_atomic_t *stop; /* set nonzero (by a signal handler) to stop serving */
} px_options;

/* Listens and serves until *opts->stop is set; returns 0, or a negative status with err set
 * when it cannot listen. Each connection gets its own I/O thread, each IfrtSession its own
 * worker thread (blocking cluster calls never run on an I/O thread). */
int px_serve(const px_options *opts, lm_err *err);

/* ---- gRPC statuses (the numbers of grpc/status.h and tensorflow.error.Code) ---- */
enum {
  PX_OK = 0, PX_CANCELLED = 1, PX_UNKNOWN = 2, PX_INVALID_ARGUMENT = 3, PX_DEADLINE_EXCEEDED = 4,
  PX_NOT_FOUND = 5, PX_ALREADY_EXISTS = 6, PX_RESOURCE_EXHAUSTED = 8, PX_FAILED_PRECONDITION = 9,
  PX_OUT_OF_RANGE = 11, PX_UNIMPLEMENTED = 12, PX_INTERNAL = 13, PX_UNAVAILABLE = 14, PX_DATA_LOSS = 15,
};
/* The gRPC code for a loom_status. */
int px_code_of(int loom_status);

/* ---- host buffers (hostbuf.c) ---- */
/* Stores data[0..len) (ownership passes; from px_hb_alloc or malloc) under (session, handle),
 * replacing any. */
void px_hb_put(uint64_t session, uint64_t handle, uint8_t *data, size_t len);
/* Memory for a host buffer of n bytes, released with px_hb_free: big ones (8 MiB and more) are
 * aligned to 2 MiB and asked to be backed by huge pages, so filling them faults 512 times less
 * often, and come from the buffers freed in the last seconds when one fits (no faults at all). */
void *px_hb_alloc(size_t n);
/* Releases a host buffer (px_hb_alloc's or malloc's): a big one is kept a few seconds (at most
 * 1 GiB in all) for the next px_hb_alloc. */
void px_hb_free(void *p);
/* Frees the kept buffers unused for 5 s (all of them with all = 1); called now and then. */
void px_hb_trim(uint64_t now_ms, int all);
/* Takes the buffer out of the store: 0 with *data and *len set (caller px_hb_frees), or LOOM_NOT_FOUND
 * (LOOM_CANCELLED once the session is abandoned).
 * With wait_ms > 0 it waits that long for a HostBufferStore that has not arrived yet. */
int px_hb_take(uint64_t session, uint64_t handle, int64_t wait_ms, uint8_t **data, size_t *len);
/* Removes it if present; returns whether it was. */
int px_hb_delete(uint64_t session, uint64_t handle);
/* Frees every buffer of a session (when its stream ends). */
void px_hb_drop_session(uint64_t session);
/* The session's client is gone: px_hb_take calls waiting for its buffers return LOOM_CANCELLED
 * at once instead of waiting out their time (until px_hb_drop_session). */
void px_hb_abandon(uint64_t session);

/* ---- sessions (session.c), driven by grpc.c ---- */
typedef struct px_stream px_stream;
typedef struct px_session px_session;
/* Appends one gRPC message (the 5-byte prefix is added) to the stream's output and wakes its
 * connection; returns -1 if the stream is gone. Thread-safe. */
int px_stream_send(px_stream *st, const uint8_t *msg, size_t len);
/* Ends the stream's response with the gRPC status (message may be NULL). Thread-safe. */
void px_stream_finish(px_stream *st, int code, const char *message);
/* Drops the session's reference to the stream (after which it is not used). */
void px_stream_release(px_stream *st);

/* Starts a session worker for an IfrtSession stream (it holds a stream reference, given here).
 * metadata: the decoded GrpcIfrtSessionMetadata header (may be NULL/0). */
px_session *px_session_start(px_stream *st, const px_options *opts, uint64_t session_id, const uint8_t *metadata,
                             size_t metadata_len);
/* Queues one request message (copied). */
void px_session_request(px_session *s, const uint8_t *msg, size_t len);
/* The client half-closed (end = 1: answer what is queued, then finish OK) or the stream died
 * (end = 0: stop at once). The session frees what it holds when its worker is done. */
void px_session_close(px_session *s, int end);
/* Drops the stream's reference to the session (after which it is not used); the struct is freed
 * when both the stream and the session's worker have let go. */
void px_session_release(px_session *s);

#endif
