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
