/* The message table: frame type -> metadata message, and the encode/decode helpers.
 *
 *   type                       metadata (wire.proto)  sent by -> to         payload
 *   1  ERROR                   ErrorReply             any -> requester     none
 *   2  HELLO                   Hello                  client|worker -> ctl none
 *   3  HELLO_REPLY             HelloReply             ctl -> client|worker none
 *   4  REGISTER_WORKER         RegisterWorker         worker -> ctl        none
 *   5  REGISTER_WORKER_REPLY   RegisterWorkerReply    ctl -> worker        none
 *   6  HEARTBEAT               Heartbeat              worker -> ctl        none (one-way)
 *   7  LIST_DEVICES            ListDevices            client -> ctl        none
 *   8  LIST_DEVICES_REPLY      ListDevicesReply       ctl -> client        none
 *   9  CLUSTER_STATUS          ClusterStatus          client -> ctl        none
 *   10 CLUSTER_STATUS_REPLY    ClusterStatusReply     ctl -> client        none
 *   11 PING                    Ping                   any -> ctl           none
 *   12 PONG                    Pong                   ctl -> any           none
 *   13 ACK                     Ack                    any -> requester     none
 *   14 WORKER_DATAPLANE        WorkerDataplane        worker -> ctl        none (one-way)
 *   15 PEERS                   Peers                  ctl -> worker        none (one-way)
 *   16 WORKER_LOST             WorkerLost             ctl -> worker        none (one-way)
 *   17 ARRAY_CREATE            ArrayCreate            client -> ctl        none
 *   18 ARRAY_PLACEMENT         ArrayPlacement         ctl -> client        none
 *   19 ARRAY_LOCATE            ArrayLocate            client -> ctl        none
 *   20 ARRAY_DELETE            ArrayDelete            client -> ctl        none
 *   21 COMPILE                 Compile                client -> ctl        the module's text
 *   22 COMPILE_REPLY           CompileReply           ctl -> client        none
 *   23 EXECUTABLE_DESTROY      ExecutableDestroy      client -> ctl        none
 *   24 LAUNCH                  Launch                 client -> ctl        none
 *   25 LAUNCH_REPLY            LaunchReply            ctl -> client        none (sent when the launch ran)
 *   26 LOAD_PROGRAM            LoadProgram            ctl -> worker        the module's text
 *   27 UNLOAD_PROGRAM          UnloadProgram          ctl -> worker        none (one-way)
 *   28 RUN                     Run                    ctl -> worker        none (one-way; also relay -> member data port)
 *   29 RUN_DONE                RunDone                worker -> ctl        none (one-way; also member -> relay)
 *   30 ABORT_LAUNCH            AbortLaunch            ctl -> worker        none (one-way)
 *   31 FREE_ARRAYS             FreeArrays             ctl -> worker        none (one-way)
 *   32 SESSION_CLOSED          SessionClosed          ctl -> worker        none (one-way)
 *   33 SHARD_PUT               ShardPut               client -> worker     the shard's bytes
 *   34 SHARD_GET               ShardGet               client -> worker     none
 *   35 SHARD_GET_REPLY         ShardGetReply          worker -> client     the shard's bytes
 *   36 CANCEL_LAUNCH           CancelLaunch           client -> ctl        none (reply ACK)
 *   37 SHARD_PUT_LOCAL         ShardPut (+ ranges)    client -> worker     none: the worker reads the ranges
 *   38 SHARD_GET_LOCAL         ShardGet (+ ranges)    client -> worker     none: the worker writes the ranges
 *   60 QUEUE_UPDATE            QueueUpdate            ctl -> client        none (one-way, before HELLO_REPLY)
 *   61 POOL_STATUS             PoolStatus             client -> ctl        none
 *   62 POOL_STATUS_REPLY       PoolStatusReply        ctl -> client        none
 *   63 SHARD_COPY              ShardCopy              ctl -> worker        none (one-way; the bytes go worker to worker)
 *   64 CHECKPOINT              Checkpoint             client -> ctl        none
 *   65 CHECKPOINT_REPLY        CheckpointReply        ctl -> client        none
 *   66 CHECKPOINT_IO           CheckpointIo           ctl -> worker        none (the bytes go to and from files)
 *   67 CHECKPOINT_IO_REPLY     CheckpointIoReply      worker -> ctl        none
 *   68 DRAIN                   Drain                  client -> ctl        none (reply CHECKPOINT_REPLY)
 *                                                     ctl -> worker        none (reply ACK)
 *   70 STASH                   Stash                  ctl -> worker        none (reply ACK or ERROR)
 *   71 SNAPSHOT_KEPT           SnapshotKept           worker -> ctl        none (one-way)
 *   73 SHARD_MOVE              ShardMove              ctl -> worker        none (reply ACK or ERROR)
 *   74 RELAY_RUN               RelayRun               ctl -> relay worker  RelayGroup (one-way)
 *   75 RELAY_DONE              RelayDone              relay -> ctl         none (one-way)
 *   80 TRACE_CONTROL           TraceControl           client -> ctl        none (reply ACK, or TRACE_RESULT to a stop)
 *   81 TRACE_RESULT            TraceResult            ctl -> client        the trace's JSON
 */
#include <stdlib.h>
#include <string.h>
#include "net/msg.h"

typedef struct msg_info {
  const char *name;
  const ProtobufCMessageDescriptor *desc;
} msg_info;

static const msg_info g_msgs[] = {
    [LM_MSG_ERROR] = {"ERROR", &lmw__error_reply__descriptor},
    [LM_MSG_HELLO] = {"HELLO", &lmw__hello__descriptor},
    [LM_MSG_HELLO_REPLY] = {"HELLO_REPLY", &lmw__hello_reply__descriptor},
    [LM_MSG_REGISTER_WORKER] = {"REGISTER_WORKER", &lmw__register_worker__descriptor},
    [LM_MSG_REGISTER_WORKER_REPLY] = {"REGISTER_WORKER_REPLY", &lmw__register_worker_reply__descriptor},
    [LM_MSG_HEARTBEAT] = {"HEARTBEAT", &lmw__heartbeat__descriptor},
    [LM_MSG_LIST_DEVICES] = {"LIST_DEVICES", &lmw__list_devices__descriptor},
    [LM_MSG_LIST_DEVICES_REPLY] = {"LIST_DEVICES_REPLY", &lmw__list_devices_reply__descriptor},
    [LM_MSG_CLUSTER_STATUS] = {"CLUSTER_STATUS", &lmw__cluster_status__descriptor},
    [LM_MSG_CLUSTER_STATUS_REPLY] = {"CLUSTER_STATUS_REPLY", &lmw__cluster_status_reply__descriptor},
    [LM_MSG_PING] = {"PING", &lmw__ping__descriptor},
    [LM_MSG_PONG] = {"PONG", &lmw__pong__descriptor},
    [LM_MSG_ACK] = {"ACK", &lmw__ack__descriptor},
    [LM_MSG_WORKER_DATAPLANE] = {"WORKER_DATAPLANE", &lmw__worker_dataplane__descriptor},
    [LM_MSG_PEERS] = {"PEERS", &lmw__peers__descriptor},
    [LM_MSG_WORKER_LOST] = {"WORKER_LOST", &lmw__worker_lost__descriptor},
    [LM_MSG_ARRAY_CREATE] = {"ARRAY_CREATE", &lmw__array_create__descriptor},
    [LM_MSG_ARRAY_PLACEMENT] = {"ARRAY_PLACEMENT", &lmw__array_placement__descriptor},
    [LM_MSG_ARRAY_LOCATE] = {"ARRAY_LOCATE", &lmw__array_locate__descriptor},
    [LM_MSG_ARRAY_DELETE] = {"ARRAY_DELETE", &lmw__array_delete__descriptor},
    [LM_MSG_COMPILE] = {"COMPILE", &lmw__compile__descriptor},
    [LM_MSG_COMPILE_REPLY] = {"COMPILE_REPLY", &lmw__compile_reply__descriptor},
    [LM_MSG_EXECUTABLE_DESTROY] = {"EXECUTABLE_DESTROY", &lmw__executable_destroy__descriptor},
    [LM_MSG_LAUNCH] = {"LAUNCH", &lmw__launch__descriptor},
    [LM_MSG_LAUNCH_REPLY] = {"LAUNCH_REPLY", &lmw__launch_reply__descriptor},
    [LM_MSG_LOAD_PROGRAM] = {"LOAD_PROGRAM", &lmw__load_program__descriptor},
    [LM_MSG_UNLOAD_PROGRAM] = {"UNLOAD_PROGRAM", &lmw__unload_program__descriptor},
    [LM_MSG_RUN] = {"RUN", &lmw__run__descriptor},
    [LM_MSG_RUN_DONE] = {"RUN_DONE", &lmw__run_done__descriptor},
    [LM_MSG_ABORT_LAUNCH] = {"ABORT_LAUNCH", &lmw__abort_launch__descriptor},
    [LM_MSG_FREE_ARRAYS] = {"FREE_ARRAYS", &lmw__free_arrays__descriptor},
    [LM_MSG_SESSION_CLOSED] = {"SESSION_CLOSED", &lmw__session_closed__descriptor},
    [LM_MSG_SHARD_PUT] = {"SHARD_PUT", &lmw__shard_put__descriptor},
    [LM_MSG_SHARD_GET] = {"SHARD_GET", &lmw__shard_get__descriptor},
    [LM_MSG_SHARD_GET_REPLY] = {"SHARD_GET_REPLY", &lmw__shard_get_reply__descriptor},
    [LM_MSG_CANCEL_LAUNCH] = {"CANCEL_LAUNCH", &lmw__cancel_launch__descriptor},
    [LM_MSG_SHARD_PUT_LOCAL] = {"SHARD_PUT_LOCAL", &lmw__shard_put__descriptor},
    [LM_MSG_SHARD_GET_LOCAL] = {"SHARD_GET_LOCAL", &lmw__shard_get__descriptor},
    [LM_MSG_QUEUE_UPDATE] = {"QUEUE_UPDATE", &lmw__queue_update__descriptor},
    [LM_MSG_POOL_STATUS] = {"POOL_STATUS", &lmw__pool_status__descriptor},
    [LM_MSG_POOL_STATUS_REPLY] = {"POOL_STATUS_REPLY", &lmw__pool_status_reply__descriptor},
    [LM_MSG_SHARD_COPY] = {"SHARD_COPY", &lmw__shard_copy__descriptor},
    [LM_MSG_CHECKPOINT] = {"CHECKPOINT", &lmw__checkpoint__descriptor},
    [LM_MSG_CHECKPOINT_REPLY] = {"CHECKPOINT_REPLY", &lmw__checkpoint_reply__descriptor},
    [LM_MSG_CHECKPOINT_IO] = {"CHECKPOINT_IO", &lmw__checkpoint_io__descriptor},
    [LM_MSG_CHECKPOINT_IO_REPLY] = {"CHECKPOINT_IO_REPLY", &lmw__checkpoint_io_reply__descriptor},
    [LM_MSG_DRAIN] = {"DRAIN", &lmw__drain__descriptor},
    [LM_MSG_STASH] = {"STASH", &lmw__stash__descriptor},
    [LM_MSG_SNAPSHOT_KEPT] = {"SNAPSHOT_KEPT", &lmw__snapshot_kept__descriptor},
    [LM_MSG_RELAY_RUN] = {"RELAY_RUN", &lmw__relay_run__descriptor},
    [LM_MSG_RELAY_DONE] = {"RELAY_DONE", &lmw__relay_done__descriptor},
    [LM_MSG_SHARD_MOVE] = {"SHARD_MOVE", &lmw__shard_move__descriptor},
    [LM_MSG_TRACE_CONTROL] = {"TRACE_CONTROL", &lmw__trace_control__descriptor},
    [LM_MSG_TRACE_RESULT] = {"TRACE_RESULT", &lmw__trace_result__descriptor},
};
#define NMSGS (sizeof g_msgs / sizeof g_msgs[0])

const ProtobufCMessageDescriptor *lm_msg_descriptor(unsigned type) { return type < NMSGS ? g_msgs[type].desc : NULL; }

const char *lm_msg_name(unsigned type) {
  return type < NMSGS && g_msgs[type].name ? g_msgs[type].name : "unknown";
}

int lm_msg_encode(unsigned type, uint64_t request_id, const ProtobufCMessage *m, uint64_t payload_len, uint8_t **out,
                  size_t *out_len, lm_err *err) {
  *out = NULL;
  *out_len = 0;
  const ProtobufCMessageDescriptor *d = lm_msg_descriptor(type);
  if (!d || !m || m->descriptor != d)
    return lm_errf(err, LOOM_INTERNAL, "message %s does not belong to frame type %u (%s)",
                   m ? m->descriptor->name : "(null)", type, lm_msg_name(type));
  size_t mlen = protobuf_c_message_get_packed_size(m);
  if (mlen > LM_FRAME_META_HARD_MAX)
    return lm_errf(err, LOOM_INVALID_ARGUMENT, "%s metadata of %zu bytes exceeds the limit of %u bytes",
                   lm_msg_name(type), mlen, LM_FRAME_META_HARD_MAX);
  if (payload_len > LM_FRAME_PAYLOAD_HARD_MAX)
    return lm_errf(err, LOOM_INVALID_ARGUMENT, "payload of %llu bytes exceeds the limit",
                   (unsigned long long)payload_len);
  uint8_t *buf = malloc(LM_FRAME_HEADER_SIZE + mlen);
  if (!buf) return lm_errf(err, LOOM_NO_MEMORY, "out of host memory encoding %s", lm_msg_name(type));
  lm_frame_header h = {.type = (uint16_t)type, .meta_len = (uint32_t)mlen, .payload_len = payload_len,
                       .request_id = request_id};
  lm_frame_header_encode(&h, buf);
  size_t packed = protobuf_c_message_pack(m, buf + LM_FRAME_HEADER_SIZE);
  if (packed != mlen) {
    free(buf);
    return lm_errf(err, LOOM_INTERNAL, "%s packed to %zu bytes, expected %zu", lm_msg_name(type), packed, mlen);
  }
  *out = buf;
  *out_len = LM_FRAME_HEADER_SIZE + mlen;
  return 0;
}

int lm_msg_decode(const lm_frame *f, ProtobufCMessage **out, lm_err *err) {
  *out = NULL;
  const ProtobufCMessageDescriptor *d = lm_msg_descriptor(f->h.type);
  if (!d) return lm_errf(err, LOOM_UNSUPPORTED, "unknown message type %u", f->h.type);
  ProtobufCMessage *m = protobuf_c_message_unpack(d, NULL, f->h.meta_len, f->meta);
  if (!m)
    return lm_errf(err, LOOM_PROTOCOL, "%s metadata (%u bytes) does not decode", lm_msg_name(f->h.type),
                   f->h.meta_len);
  *out = m;
  return 0;
}

void lm_msg_free(ProtobufCMessage *m) {
  if (m) protobuf_c_message_free_unpacked(m, NULL);
}

int lm_msg_error_status(const lm_frame *f, lm_err *err) {
  ProtobufCMessage *m;
  if (f->h.type != LM_MSG_ERROR) return lm_errf(err, LOOM_INTERNAL, "not an ERROR frame");
  int rc = lm_msg_decode(f, &m, err);
  if (rc < 0) return rc;
  Lmw__ErrorReply *e = (Lmw__ErrorReply *)m;
  int code = e->code < 0 ? e->code : LOOM_INTERNAL; /* an error is never OK */
  char msg[512];
  size_t n = strnlen(e->message, sizeof msg - 1);
  memcpy(msg, e->message, n);
  msg[n] = 0;
  for (size_t i = 0; i < n; i++) /* a peer's text is shown to users: keep it on one line */
    if ((unsigned char)msg[i] < 0x20 || msg[i] == 0x7f) msg[i] = ' ';
  lm_errf(err, code, "%s", n ? msg : lm_status_desc(code));
  lm_msg_free(m);
  return code;
}

int lm_msg_name_ok(const char *s, size_t max) {
  if (!s) return 0;
  size_t n = strnlen(s, max + 1);
  if (n == 0 || n > max) return 0;
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)s[i] <= 0x20 || (unsigned char)s[i] >= 0x7f) return 0;
  return 1;
}
