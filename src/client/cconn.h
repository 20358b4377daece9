/* The client library's connection to the controller: a blocking socket, a receiver thread that
 * matches replies to requests by request id, and calls that can be pipelined (start many, wait
 * later) and waited for with a timeout and an interrupt hook. Reply payloads can land straight
 * in a caller's buffer. Thread-safe: any thread may start calls and wait on its own calls.
 * Used by the public API (client.c) and by the `loom` CLI; the basis of issue 4's futures. */
#ifndef LM_CLIENT_CCONN_H
#define LM_CLIENT_CCONN_H

#include <stdbool.h>
#include <stdint.h>
#include "common/err.h"
#include "net/frame.h"
#include "net/msg.h"
#include "net/sock.h"

typedef struct lm_cconn lm_cconn;
typedef struct lm_call lm_call;

typedef struct lm_cconn_options {
  int64_t timeout_ms;          /* connect + HELLO; < 0: no limit */
  lm_interrupt_fn intr;        /* optional, polled while waiting */
  void *intr_arg;
  const char *name;            /* the client's name, shown by `loom status` (may be NULL) */
  const char *peer;            /* what the peer is called in errors; NULL: "the controller" */
  const void *auth_token;      /* the client token, sent in HELLO (lm_locate_token finds it) */
  size_t auth_token_len;
  lm_frame_limits limits;      /* what this side accepts; zeros = defaults */
  /* local transfers (a worker's data port; docs/protocol.md "Local transfers"): */
  bool local_offer;            /* HELLO.local_offer: ask for the worker's local socket */
  const uint8_t *local_probe;  /* HELLO.local_probe: LM_LOCAL_PROBE_SIZE bytes at this address, left
                                  there until lm_cconn_open returns (the worker reads them) */
  /* optional: called once connected, before HELLO (a check of the peer); < 0 fails the open */
  int (*on_connected)(void *arg, int fd, lm_err *err);
  void *on_connected_arg;
  /* the shared pool (docs/pool.md), controller connections only: */
  uint32_t pool_devices;       /* HELLO.pool_devices: devices to ask for (0: a shared session) */
  const char *priority;        /* HELLO.priority: the class (NULL: the controller's default) */
  uint32_t launch_limit_ms;    /* HELLO.launch_limit_ms (0: the class's) */
  int64_t queue_timeout_ms;    /* with pool_devices: how long HELLO may wait in the queue (<= 0: no limit) */
  uint32_t share_weight;       /* HELLO.share_weight: time-share devices with this weight (0: exclusive) */
  /* called on the receiver thread for each QUEUE_UPDATE while HELLO waits (msg: Lmw__QueueUpdate) */
  void (*on_queue)(void *arg, const Lmw__QueueUpdate *u);
  void *on_queue_arg;
} lm_cconn_options;

/* What the controller's HELLO_REPLY said about the session's place in the pool. */
typedef struct lm_cconn_pool {
  uint32_t ndevices;           /* pool session: the cluster devices it holds (0: shared) */
  char priority[32];
  uint64_t queued_ms;
} lm_cconn_pool;

/* What the peer's HELLO_REPLY said about local transfers (checked: printable, bounded). */
typedef struct lm_cconn_local {
  char socket[108];            /* "@NAME": the worker's local socket; "" when none */
  char boot_id[64];            /* the worker's kernel boot id */
  uint32_t ptracer_pid;        /* whom to name with PR_SET_PTRACER under Yama ptrace_scope 1 */
  bool transfer;               /* on the local socket: local transfers enabled */
  char refused[LM_ERR_MSG_MAX]; /* ... else why not ("" when the peer said nothing) */
} lm_cconn_local;

/* A received reply: its type, decoded metadata and payload. */
typedef struct lm_reply {
  unsigned type;
  ProtobufCMessage *msg;       /* free with lm_reply_free */
  void *payload;               /* NULL when none; the caller's dst when payload_external */
  uint64_t payload_len;
  bool payload_external;
} lm_reply;
void lm_reply_free(lm_reply *r);

/* Connects to addr, says HELLO as a client and waits for the controller's HELLO_REPLY.
 * A wrong version or a refusal comes back as the controller's error. */
int lm_cconn_open(const char *addr, const lm_cconn_options *opts, lm_cconn **out, lm_err *err);
/* Closes the connection and joins the receiver. Every call must have been released. NULL ok. */
void lm_cconn_close(lm_cconn *c);
uint64_t lm_cconn_session_id(const lm_cconn *c);
const char *lm_cconn_address(const lm_cconn *c);
const char *lm_cconn_server_software(const lm_cconn *c);
/* Whether the connection still works; when not, why (into err). */
bool lm_cconn_ok(lm_cconn *c, lm_err *err);
/* How many times the session was resumed on a new connection after its controller restarted (a
 * controller with a journal: its HELLO_REPLY gave a resume secret; LOOM_RECONNECT=0 turns this
 * off). Requests in flight are sent again on the new connection, in order, when the controller
 * answers a repeat the same way (launches are not run twice); others fail with a clear error.
 * Reconnecting gives up after LOOM_RECONNECT_TIMEOUT_MS (default 60000). */
uint64_t lm_cconn_reconnects(lm_cconn *c);
const lm_cconn_local *lm_cconn_local_info(const lm_cconn *c);
const lm_cconn_pool *lm_cconn_pool_info(const lm_cconn *c);
/* Marks a connection whose peer reads and writes this process's memory for pending calls (local
 * transfers). Stopping such a connection (releasing a pending call, a failed send, a bad frame)
 * then half-closes it and waits until the peer has closed its end, which it does once no copy
 * of it runs any more (a peer stuck longer than 5 s is left: it checks for the half-close before
 * each copy it makes), so memory of a call that returned is not written afterwards. */
void lm_cconn_set_peer_access(lm_cconn *c);

/* Sends a request (metadata m, optional payload sent zero-copy from the caller's memory,
 * which must stay valid until this returns) and returns its call. dst/dst_cap: optional buffer
 * for the reply's payload; it must stay valid until the call completes or is released. */
int lm_cconn_start(lm_cconn *c, unsigned type, const ProtobufCMessage *m, const void *payload, uint64_t plen,
                   void *dst, uint64_t dst_cap, lm_call **out, lm_err *err);
/* Waits until the call completes: returns 0 when its reply arrived, the reply's status when the
 * controller answered ERROR, LOOM_CLOSED when the connection broke; in all these cases the call
 * is complete. LOOM_TIMEOUT (timeout_ms >= 0 passed) or LOOM_CANCELLED (intr returned nonzero)
 * leave the call pending: wait again or release it. */
int lm_call_wait(lm_call *call, int64_t timeout_ms, lm_interrupt_fn intr, void *intr_arg, lm_err *err);
bool lm_call_done(lm_call *call);
/* The request id the call was sent with (CANCEL_LAUNCH names a launch by it). */
uint64_t lm_call_request_id(const lm_call *call);
/* Moves a completed call's reply to *out (once). */
int lm_call_take_reply(lm_call *call, lm_reply *out, lm_err *err);
/* Frees the call; a pending call is abandoned (its reply is dropped when it comes; if its reply
 * is being received into dst right now, the connection is shut down to stop that). NULL ok. */
void lm_call_release(lm_call *call);

/* start + wait + check that the reply is of type expect; *reply_msg gets the decoded reply
 * (free with lm_msg_free). */
int lm_cconn_call(lm_cconn *c, unsigned type, const ProtobufCMessage *m, unsigned expect, int64_t timeout_ms,
                  lm_interrupt_fn intr, void *intr_arg, ProtobufCMessage **reply_msg, lm_err *err);

#endif
