/* A framed connection on a libuv loop, for the daemons (controller, worker): reads frames with
 * the limits of its config, drops peers that stall mid-frame, skip the handshake or do not read
 * their replies, queues writes (payloads zero-copy when the caller keeps them alive), and closes
 * with a reason. Nothing here logs; the owner hears every close once, with its reason.
 *
 * Life cycle: lm_conn_new -> lm_conn_accept | lm_conn_connect -> frames -> lm_conn_close (or the
 * peer goes away) -> ops.on_close (the last callback; the lm_conn is freed right after it). */
#ifndef LM_NET_CONN_H
#define LM_NET_CONN_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>
#include "net/frame.h"
#include "net/msg.h"

typedef struct lm_conn lm_conn;

typedef struct lm_conn_config {
  lm_frame_limits limits;         /* what this side accepts */
  uint64_t max_out_bytes;         /* queued output beyond which the peer is dropped; 0 = no limit */
  uint32_t frame_timeout_ms;      /* a started frame must arrive within this plus 1 s per MiB; 0 = none */
  uint32_t handshake_timeout_ms;  /* time allowed until lm_conn_set_established; 0 = none */
} lm_conn_config;

/* Fills c with the defaults for a control connection: 4 MiB metadata, 64 MiB payload, 256 MiB
 * of queued output, 10 s per frame, 5 s for the handshake. */
void lm_conn_config_default(lm_conn_config *c);

typedef struct lm_conn_ops {
  /* A complete frame; valid during the call (lm_frame_take_payload keeps the payload). */
  void (*on_frame)(lm_conn *c, lm_frame *f);
  /* Optional: where a frame's payload should be received (see lm_frame_sink_fn). */
  int (*payload_sink)(lm_conn *c, const lm_frame *f, void **dst, lm_err *err);
  /* Optional, outgoing connections: the connection is up. */
  void (*on_connect)(lm_conn *c);
  /* Exactly once, last: the connection is gone (code 0 for an orderly close by this side). */
  void (*on_close)(lm_conn *c, int code, const char *reason);
} lm_conn_ops;

/* A new, unconnected connection on loop. ops must outlive it. NULL when out of memory. */
lm_conn *lm_conn_new(uv_loop_t *loop, const lm_conn_ops *ops, const lm_conn_config *cfg, void *user);
/* The same over a Unix-domain socket: accepted from a server of lm_listen_local (no connect). */
lm_conn *lm_conn_new_local(uv_loop_t *loop, const lm_conn_ops *ops, const lm_conn_config *cfg, void *user);
/* Accepts a pending connection from server and starts reading. On failure the connection is
 * closed (on_close follows) and a negative status returned. */
int lm_conn_accept(lm_conn *c, uv_stream_t *server);
/* Starts connecting to addr; on_connect or on_close follows. */
int lm_conn_connect(lm_conn *c, const struct sockaddr *addr);

/* Queues one frame: header + metadata m (+ payload of plen bytes). With release == NULL the
 * payload is copied; otherwise it is sent from the caller's memory and release(release_arg) is
 * called once it is no longer needed (also when this call fails). Returns LOOM_CLOSED after the
 * connection began closing. Dropping a peer for a full output queue happens here. */
int lm_conn_send(lm_conn *c, unsigned type, uint64_t request_id, const ProtobufCMessage *m, const void *payload,
                 uint64_t plen, void (*release)(void *), void *release_arg, lm_err *err);
/* Sends an ERROR frame (code, message) answering request_id (0: none). */
int lm_conn_send_error(lm_conn *c, uint64_t request_id, int code, const char *msg);
/* The same with the message formatted (cut at LM_ERR_MSG_MAX). */
int lm_conn_send_errorf(lm_conn *c, uint64_t request_id, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Closes now: pending writes are dropped. Idempotent; the first reason wins. */
void lm_conn_close(lm_conn *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Sends ERROR(code, reason) for request_id, stops accepting frames, flushes, then closes
 * (at most 2 s later even if the peer does not read). The reason also goes to on_close. */
void lm_conn_close_with_error(lm_conn *c, uint64_t request_id, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* The handshake is done: the handshake deadline no longer applies. */
void lm_conn_set_established(lm_conn *c);
bool lm_conn_is_open(const lm_conn *c);
const char *lm_conn_peer_name(const lm_conn *c); /* "1.2.3.4:5678" */
void *lm_conn_user(const lm_conn *c);
void lm_conn_set_user(lm_conn *c, void *user);
/* The socket's descriptor (for getsockopt, dup); -1 once closed. Owned by the connection. */
int lm_conn_fd(const lm_conn *c);

/* The kernel queue of connections not yet accepted (capped by net.core.somaxconn): a burst of
 * a thousand workers or clients connecting at once is taken at once instead of waiting out
 * SYN retransmissions (1 s, 2 s, 4 s, ...). */
#define LM_LISTEN_BACKLOG 4096

/* Binds and listens on "HOST:PORT" (port 0: any free port). The bound address goes to bound. */
int lm_listen(uv_loop_t *loop, uv_tcp_t *server, const char *addr, uv_connection_cb on_connection, char *bound,
              size_t boundcap, lm_err *err);

/* Listens on the abstract Unix-domain socket NAME (Linux: no file, gone with the process; the
 * name is given without its leading NUL). Accept with lm_conn_new_local + lm_conn_accept. */
int lm_listen_local(uv_loop_t *loop, uv_pipe_t *server, const char *name, uv_connection_cb on_connection,
                    lm_err *err);

#endif
