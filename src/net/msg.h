/* Message codec: which protobuf message each frame type carries, encoding a frame's header and
 * metadata into one buffer, decoding a received frame's metadata. The schema is
 * src/proto/wire.proto; the frame layout is in frame.h; the table of messages is in msg.c. */
#ifndef LM_NET_MSG_H
#define LM_NET_MSG_H

#include <stddef.h>
#include <stdint.h>
#include "net/frame.h"
#include "wire.pb-c.h"

/* The protocol version this build speaks; a HELLO with another one is refused. */
#define LM_PROTOCOL_VERSION 1

/* Local transfers (docs/protocol.md): the HELLO probe's size, and the most (address, length)
 * ranges one SHARD_PUT_LOCAL / SHARD_GET_LOCAL may name. */
#define LM_LOCAL_PROBE_SIZE 16
#define LM_LOCAL_MAX_RANGES 65536

/* Short names for the wire's message types (lmw.MsgType). */
enum {
  LM_MSG_ERROR = LMW__MSG_TYPE__MSG_ERROR,
  LM_MSG_HELLO = LMW__MSG_TYPE__MSG_HELLO,
  LM_MSG_HELLO_REPLY = LMW__MSG_TYPE__MSG_HELLO_REPLY,
  LM_MSG_REGISTER_WORKER = LMW__MSG_TYPE__MSG_REGISTER_WORKER,
  LM_MSG_REGISTER_WORKER_REPLY = LMW__MSG_TYPE__MSG_REGISTER_WORKER_REPLY,
  LM_MSG_HEARTBEAT = LMW__MSG_TYPE__MSG_HEARTBEAT,
  LM_MSG_LIST_DEVICES = LMW__MSG_TYPE__MSG_LIST_DEVICES,
  LM_MSG_LIST_DEVICES_REPLY = LMW__MSG_TYPE__MSG_LIST_DEVICES_REPLY,
  LM_MSG_CLUSTER_STATUS = LMW__MSG_TYPE__MSG_CLUSTER_STATUS,
  LM_MSG_CLUSTER_STATUS_REPLY = LMW__MSG_TYPE__MSG_CLUSTER_STATUS_REPLY,
  LM_MSG_PING = LMW__MSG_TYPE__MSG_PING,
  LM_MSG_PONG = LMW__MSG_TYPE__MSG_PONG,
  LM_MSG_ACK = LMW__MSG_TYPE__MSG_ACK,
  LM_MSG_WORKER_DATAPLANE = LMW__MSG_TYPE__MSG_WORKER_DATAPLANE,
  LM_MSG_PEERS = LMW__MSG_TYPE__MSG_PEERS,
  LM_MSG_WORKER_LOST = LMW__MSG_TYPE__MSG_WORKER_LOST,
  LM_MSG_ARRAY_CREATE = LMW__MSG_TYPE__MSG_ARRAY_CREATE,
  LM_MSG_ARRAY_PLACEMENT = LMW__MSG_TYPE__MSG_ARRAY_PLACEMENT,
  LM_MSG_ARRAY_LOCATE = LMW__MSG_TYPE__MSG_ARRAY_LOCATE,
  LM_MSG_ARRAY_DELETE = LMW__MSG_TYPE__MSG_ARRAY_DELETE,
  LM_MSG_COMPILE = LMW__MSG_TYPE__MSG_COMPILE,
  LM_MSG_COMPILE_REPLY = LMW__MSG_TYPE__MSG_COMPILE_REPLY,
  LM_MSG_EXECUTABLE_DESTROY = LMW__MSG_TYPE__MSG_EXECUTABLE_DESTROY,
  LM_MSG_LAUNCH = LMW__MSG_TYPE__MSG_LAUNCH,
  LM_MSG_LAUNCH_REPLY = LMW__MSG_TYPE__MSG_LAUNCH_REPLY,
  LM_MSG_LOAD_PROGRAM = LMW__MSG_TYPE__MSG_LOAD_PROGRAM,
  LM_MSG_UNLOAD_PROGRAM = LMW__MSG_TYPE__MSG_UNLOAD_PROGRAM,
  LM_MSG_RUN = LMW__MSG_TYPE__MSG_RUN,
  LM_MSG_RUN_DONE = LMW__MSG_TYPE__MSG_RUN_DONE,
  LM_MSG_ABORT_LAUNCH = LMW__MSG_TYPE__MSG_ABORT_LAUNCH,
  LM_MSG_FREE_ARRAYS = LMW__MSG_TYPE__MSG_FREE_ARRAYS,
  LM_MSG_SESSION_CLOSED = LMW__MSG_TYPE__MSG_SESSION_CLOSED,
  LM_MSG_SHARD_PUT = LMW__MSG_TYPE__MSG_SHARD_PUT,
  LM_MSG_SHARD_GET = LMW__MSG_TYPE__MSG_SHARD_GET,
  LM_MSG_SHARD_GET_REPLY = LMW__MSG_TYPE__MSG_SHARD_GET_REPLY,
  LM_MSG_CANCEL_LAUNCH = LMW__MSG_TYPE__MSG_CANCEL_LAUNCH,
  LM_MSG_SHARD_PUT_LOCAL = LMW__MSG_TYPE__MSG_SHARD_PUT_LOCAL,
  LM_MSG_SHARD_GET_LOCAL = LMW__MSG_TYPE__MSG_SHARD_GET_LOCAL,
  LM_MSG_QUEUE_UPDATE = LMW__MSG_TYPE__MSG_QUEUE_UPDATE,
  LM_MSG_POOL_STATUS = LMW__MSG_TYPE__MSG_POOL_STATUS,
  LM_MSG_POOL_STATUS_REPLY = LMW__MSG_TYPE__MSG_POOL_STATUS_REPLY,
  LM_MSG_SHARD_COPY = LMW__MSG_TYPE__MSG_SHARD_COPY,
  LM_MSG_CHECKPOINT = LMW__MSG_TYPE__MSG_CHECKPOINT,
  LM_MSG_CHECKPOINT_REPLY = LMW__MSG_TYPE__MSG_CHECKPOINT_REPLY,
  LM_MSG_CHECKPOINT_IO = LMW__MSG_TYPE__MSG_CHECKPOINT_IO,
  LM_MSG_CHECKPOINT_IO_REPLY = LMW__MSG_TYPE__MSG_CHECKPOINT_IO_REPLY,
  LM_MSG_DRAIN = LMW__MSG_TYPE__MSG_DRAIN,
  LM_MSG_STASH = LMW__MSG_TYPE__MSG_STASH,
  LM_MSG_SNAPSHOT_KEPT = LMW__MSG_TYPE__MSG_SNAPSHOT_KEPT,
  LM_MSG_RELAY_RUN = LMW__MSG_TYPE__MSG_RELAY_RUN,
  LM_MSG_RELAY_DONE = LMW__MSG_TYPE__MSG_RELAY_DONE,
  LM_MSG_SHARD_MOVE = LMW__MSG_TYPE__MSG_SHARD_MOVE,
  LM_MSG_TRACE_CONTROL = LMW__MSG_TYPE__MSG_TRACE_CONTROL,
  LM_MSG_TRACE_RESULT = LMW__MSG_TYPE__MSG_TRACE_RESULT,
};

/* The metadata descriptor of a frame type; NULL for a type this build does not know. */
const ProtobufCMessageDescriptor *lm_msg_descriptor(unsigned type);
/* "HELLO", "LIST_DEVICES_REPLY", ...; "unknown" for a type this build does not know. */
const char *lm_msg_name(unsigned type);

/* Encodes a frame's header and metadata m (whose descriptor must match type) into one malloc'd
 * buffer *out of *out_len bytes; the payload_len bytes of payload, if any, are sent after it
 * separately. Fails on a descriptor mismatch or metadata over the hard ceiling. */
int lm_msg_encode(unsigned type, uint64_t request_id, const ProtobufCMessage *m, uint64_t payload_len, uint8_t **out,
                  size_t *out_len, lm_err *err);

/* Decodes f's metadata as the message of its type. Unknown types give LOOM_UNSUPPORTED;
 * bytes that do not decode give LOOM_PROTOCOL. Free *out with lm_msg_free. */
int lm_msg_decode(const lm_frame *f, ProtobufCMessage **out, lm_err *err);
void lm_msg_free(ProtobufCMessage *m); /* NULL is a no-op */

/* Decodes an ERROR frame into a status (always negative) and its message in err. */
int lm_msg_error_status(const lm_frame *f, lm_err *err);

/* True when s is 1..max bytes of printable ASCII (host names, slice names, kinds). */
int lm_msg_name_ok(const char *s, size_t max);

#endif
