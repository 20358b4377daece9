/* gRPC over HTTP/2 for the IFRT proxy: nghttp2 does HTTP/2 and HPACK; this file adds gRPC's
 * message framing (1 byte compressed flag, 4 bytes big-endian length, the protobuf bytes),
 * its status trailers, and routes the service's methods:
 *   GetVersion        unary, answered here
 *   IfrtSession       bidirectional stream, handed to a session worker (session.c)
 *   HostBufferStore   client stream of data chunks, kept in the host buffer store
 *   HostBufferLookup  server stream of 1 MiB chunks (waits, bounded, for CopyToHostBuffer)
 *   HostBufferDelete  unary
 * anything else: UNIMPLEMENTED naming it.
 *
 * Threads: one I/O thread per connection owns its nghttp2 session; session workers append
 * response bytes to a stream's output under the connection's mutex and wake the I/O thread
 * through an eventfd. A peer's bad bytes end that stream (or that connection), nothing else. */
#define _GNU_SOURCE
#include <errno.h>
#include <nghttp2/nghttp2.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <unistd.h>
#include "common/log.h"
#include "net/sock.h"
#include "proxy/proxy.h"
#include "xla/python/ifrt_proxy/common/grpc_ifrt_service.pb-c.h"

#define PX_MAX_MESSAGE ((size_t)2 << 30)     /* one gRPC message: 2 GiB (a Compile carrying a 1 GiB constant) */
#define PX_MAX_HOST_BUFFER ((size_t)1 << 36) /* one stored host buffer: 64 GiB */
#define PX_CHUNK ((size_t)1 << 20)           /* HostBufferLookup answers in 1 MiB messages */
#define PX_SERVICE "/xla.ifrt.proxy.GrpcIfrtService/"
#define SESSION_MD "ifrt-proxy-grpc-ifrt-session-metadata-bin"
#define STORE_MD "ifrt-proxy-grpc-host-buffer-store-metadata-bin"

enum { K_UNKNOWN, K_VERSION, K_SESSION, K_STORE, K_LOOKUP, K_DELETE, K_READ_DISK };

typedef struct px_conn {
  atomic_int refs;
  int fd, efd;
  pthread_mutex_t mu;        /* guards every stream's out_* fields and closed */
  nghttp2_session *h2;       /* I/O thread only */
  struct px_stream *streams; /* I/O thread only */
  const px_options *opts;
  char peer[LM_ADDR_MAX];
  uint8_t *obuf;             /* I/O thread only: bytes for the socket, written in batches */
  size_t on, ocap;
} px_conn;

#define PX_PIECES 64 /* a DATA frame spans at most this many segments of a response */

/* One segment of a stream's response: bytes of its own (own[]), or a reference into the
 * stream's blob (a host buffer sent without copying it). */
typedef struct oseg {
  struct oseg *next;
  const uint8_t *p;
  size_t len, off;
  uint8_t own[];
} oseg;

struct px_stream {
  atomic_int refs;
  px_conn *conn;
  struct px_stream *next;    /* in conn->streams */
  int32_t id;
  int kind;
  char method[96];
  uint8_t *md;               /* the decoded -bin metadata header of this method */
  size_t md_len;
  uint8_t *in;               /* request bytes not yet framed into messages */
  size_t in_len, in_cap;
  bool request_ended, answered;
  /* the response, guarded by conn->mu: a queue of byte segments nghttp2 pulls from */
  oseg *oh, *ot;
  uint8_t *blob;             /* a host buffer the queue refers to (HostBufferLookup), freed with the stream */
  bool out_done, deferred, closed, submitted;
  int status;
  char *status_msg;
  /* HostBufferStore / HostBufferLookup */
  uint64_t hb_session, hb_handle;
  uint8_t *hb_data;
  size_t hb_len, hb_cap;
  bool lookup_parked;
  uint64_t lookup_deadline;
  px_session *session;
};

static atomic_uint_fast64_t g_next_session = 1;

int px_code_of(int st) {
  switch (st) {
  case LOOM_OK: return PX_OK;
  case LOOM_INVALID_ARGUMENT: case LOOM_PARSE: case LOOM_VERIFY: case LOOM_SHAPE_MISMATCH: return PX_INVALID_ARGUMENT;
  case LOOM_NOT_FOUND: return PX_NOT_FOUND;
  case LOOM_UNSUPPORTED: return PX_UNIMPLEMENTED;
  case LOOM_NO_MEMORY: case LOOM_DEVICE_OUT_OF_MEMORY: return PX_RESOURCE_EXHAUSTED;
  case LOOM_TIMEOUT: return PX_DEADLINE_EXCEEDED;
  case LOOM_CANCELLED: return PX_CANCELLED;
  /* a lost worker is a lost slice to Pathways clients: pathwaysutils' elastic code looks for DATA_LOSS */
  case LOOM_WORKER_LOST: return PX_DATA_LOSS;
  case LOOM_CONNECT: case LOOM_CLOSED: case LOOM_IO: return PX_UNAVAILABLE;
  case LOOM_PERMISSION: return PX_FAILED_PRECONDITION;
  default: return PX_INTERNAL;
  }
}

/* ---- references ---- */

static void conn_unref(px_conn *c) {
  if (atomic_fetch_sub(&c->refs, 1) != 1) return;
  close(c->efd);
  pthread_mutex_destroy(&c->mu);
  free(c);
}

static void stream_unref(px_stream *st) {
  if (atomic_fetch_sub(&st->refs, 1) != 1) return;
  px_conn *c = st->conn;
  free(st->md);
  free(st->in);
  while (st->oh) {
    oseg *o = st->oh;
    st->oh = o->next;
    free(o);
  }
  px_hb_free(st->blob);
  free(st->status_msg);
  px_hb_free(st->hb_data);
  free(st);
  conn_unref(c);
}

void px_stream_release(px_stream *st) { stream_unref(st); }

static void wake(px_conn *c) {
  uint64_t one = 1;
  ssize_t w = write(c->efd, &one, sizeof one);
  (void)w;
}

/* ---- output (any thread) ---- */

/* Appends a segment holding a copy of head[0..hn) (the gRPC message prefix is written by the
 * caller into head) followed, by reference, by ref[0..rn) when rn > 0. conn->mu held. */
static int out_push_locked(px_stream *st, const uint8_t *head, size_t hn, const uint8_t *ref, size_t rn) {
  oseg *h = malloc(sizeof *h + hn), *r = NULL;
  if (!h || (rn && !(r = malloc(sizeof *r)))) {
    free(h);
    return -1;
  }
  *h = (oseg){.p = h->own, .len = hn};
  memcpy(h->own, head, hn);
  if (r) {
    *r = (oseg){.p = ref, .len = rn};
    h->next = r;
  }
  if (st->ot) st->ot->next = h;
  else st->oh = h;
  st->ot = r ? r : h;
  return 0;
}

static void grpc_prefix(uint8_t *p, size_t len) {
  p[0] = 0;
  p[1] = (uint8_t)(len >> 24);
  p[2] = (uint8_t)(len >> 16);
  p[3] = (uint8_t)(len >> 8);
  p[4] = (uint8_t)len;
}

int px_stream_send(px_stream *st, const uint8_t *msg, size_t len) {
  px_conn *c = st->conn;
  int rc = -1;
  uint8_t *buf = len <= 0xffffffffu ? malloc(len + 5) : NULL;
  if (!buf) return -1;
  grpc_prefix(buf, len);
  if (len) memcpy(buf + 5, msg, len);
  pthread_mutex_lock(&c->mu);
  if (!st->closed && !st->out_done) rc = out_push_locked(st, buf, len + 5, NULL, 0);
  pthread_mutex_unlock(&c->mu);
  free(buf);
  if (rc == 0) wake(c);
  return rc;
}

void px_stream_finish(px_stream *st, int code, const char *message) {
  px_conn *c = st->conn;
  pthread_mutex_lock(&c->mu);
  if (!st->out_done) {
    st->out_done = true;
    st->status = code;
    free(st->status_msg);
    st->status_msg = message ? strdup(message) : NULL;
  }
  pthread_mutex_unlock(&c->mu);
  wake(c);
}

/* Packs a protobuf-c message and sends it. */
static int send_msg(px_stream *st, const ProtobufCMessage *m) {
  size_t n = protobuf_c_message_get_packed_size(m);
  uint8_t *buf = malloc(n ? n : 1);
  if (!buf) return -1;
  protobuf_c_message_pack(m, buf);
  int rc = px_stream_send(st, buf, n);
  free(buf);
  return rc;
}

/* grpc-message is percent-encoded (gRPC over HTTP/2 spec). */
static void pct_encode(const char *s, char *out, size_t cap) {
  size_t o = 0;
  for (; s && *s && o + 4 < cap; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch >= 0x20 && ch < 0x7f && ch != '%') out[o++] = (char)ch;
    else o += (size_t)snprintf(out + o, cap - o, "%%%02X", ch);
  }
  out[o] = 0;
}

#define NV(n, v) {(uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v), NGHTTP2_NV_FLAG_NONE}

/* nghttp2 pulls response bytes from here (I/O thread). */
static ssize_t read_cb(nghttp2_session *h2, int32_t id, uint8_t *buf, size_t len, uint32_t *flags,
                       nghttp2_data_source *src, void *ud) {
  (void)ud;
  px_stream *st = src->ptr;
  px_conn *c = st->conn;
  pthread_mutex_lock(&c->mu);
  while (st->oh && st->oh->off == st->oh->len) {
    oseg *o = st->oh;
    st->oh = o->next;
    if (!st->oh) st->ot = NULL;
    free(o);
  }
  if (!st->oh) {
    if (!st->out_done) {
      st->deferred = true;
      pthread_mutex_unlock(&c->mu);
      return NGHTTP2_ERR_DEFERRED;
    }
    char code[16], msg[2048];
    snprintf(code, sizeof code, "%d", st->status);
    pct_encode(st->status_msg, msg, sizeof msg);
    pthread_mutex_unlock(&c->mu);
    *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
    nghttp2_nv tr[2] = {NV("grpc-status", code), NV("grpc-message", msg)};
    nghttp2_submit_trailer(h2, id, tr, msg[0] ? 2 : 1);
    return 0;
  }
  /* the frame takes as many segments as fit (at most PX_PIECES); send_data_cb writes them to
   * the socket from where they are, without copying them into nghttp2's frame buffer */
  (void)buf;
  size_t n = 0;
  int k = 0;
  for (oseg *o = st->oh; o && n < len && k < PX_PIECES; o = o->next, k++)
    n += o->len - o->off < len - n ? o->len - o->off : len - n;
  pthread_mutex_unlock(&c->mu);
  *flags |= NGHTTP2_DATA_FLAG_NO_COPY;
  return (ssize_t)n;
}

static void submit_response(px_stream *st) {
  if (st->submitted) return;
  st->submitted = true;
  nghttp2_nv hd[2] = {NV(":status", "200"), NV("content-type", "application/grpc")};
  nghttp2_data_provider prd = {.source.ptr = st, .read_callback = read_cb};
  nghttp2_submit_response(st->conn->h2, st->id, hd, 2, &prd);
}

/* ---- base64 for -bin metadata (padding optional, as gRPC sends it) ---- */

static int b64val(int ch) {
  if (ch >= 'A' && ch <= 'Z') return ch - 'A';
  if (ch >= 'a' && ch <= 'z') return ch - 'a' + 26;
  if (ch >= '0' && ch <= '9') return ch - '0' + 52;
  if (ch == '+' || ch == '-') return 62;
  if (ch == '/' || ch == '_') return 63;
  return -1;
}

static uint8_t *b64decode(const uint8_t *s, size_t n, size_t *out_len) {
  uint8_t *out = malloc(n * 3 / 4 + 3);
  if (!out) return NULL;
  size_t o = 0;
  uint32_t acc = 0;
  int bits = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] == '=') break;
    int v = b64val(s[i]);
    if (v < 0) {
      free(out);
      return NULL;
    }
    acc = (acc << 6) | (uint32_t)v;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out[o++] = (uint8_t)(acc >> bits);
    }
  }
  *out_len = o;
  return out;
}

/* ---- the methods ---- */

static void answer_version(px_stream *st, const uint8_t *msg, size_t len) {
  Xla__Ifrt__Proxy__GrpcGetVersionRequest *rq = xla__ifrt__proxy__grpc_get_version_request__unpack(NULL, len, msg);
  if (!rq) {
    px_stream_finish(st, PX_INVALID_ARGUMENT, "GetVersion: the request does not parse");
    return;
  }
  int lo = rq->min_version && rq->min_version->has_protocol_version ? rq->min_version->protocol_version : 0;
  int hi = rq->max_version && rq->max_version->has_protocol_version ? rq->max_version->protocol_version : 0;
  int serdes = rq->max_version && rq->max_version->has_ifrt_serdes_version_number
                   ? rq->max_version->ifrt_serdes_version_number : 0;
  xla__ifrt__proxy__grpc_get_version_request__free_unpacked(rq, NULL);
  int pick = hi < PX_PROTOCOL_MAX ? hi : PX_PROTOCOL_MAX;
  if (pick < lo || pick < PX_PROTOCOL_MIN) {
    char m[256];
    snprintf(m, sizeof m, "the client speaks IFRT proxy protocol %d..%d; this Loom proxy speaks %d..%d", lo, hi,
             PX_PROTOCOL_MIN, PX_PROTOCOL_MAX);
    px_stream_finish(st, PX_FAILED_PRECONDITION, m);
    return;
  }
  Xla__Ifrt__Proxy__IfrtProxyVersion v = XLA__IFRT__PROXY__IFRT_PROXY_VERSION__INIT;
  v.has_protocol_version = 1;
  v.protocol_version = pick;
  v.has_ifrt_serdes_version_number = 1;
  v.ifrt_serdes_version_number = serdes;
  Xla__Ifrt__Proxy__GrpcGetVersionResponse r = XLA__IFRT__PROXY__GRPC_GET_VERSION_RESPONSE__INIT;
  r.version = &v;
  send_msg(st, &r.base);
  px_stream_finish(st, PX_OK, NULL);
}

/* protobuf-c's allocator while a HostBufferStore chunk unpacks: its one big allocation (the data
 * field's bytes; anything over 256 bytes that fits) is the free end of the host buffer itself, so
 * unpacking is the only copy of the data there. Whatever else got that place (a hostile chunk's
 * unknown field) is noticed after unpacking, and the data is then copied as before. */
typedef struct chunk_alloc {
  ProtobufCAllocator base;
  uint8_t *at;
  size_t room;
  bool used;
} chunk_alloc;

static void *chunk_alloc_fn(void *ad, size_t n) {
  chunk_alloc *a = ad;
  if (!a->used && a->at && n > 256 && n <= a->room) {
    a->used = true;
    return a->at;
  }
  return malloc(n);
}

static void chunk_free_fn(void *ad, void *p) {
  chunk_alloc *a = ad;
  if (!(a->used && p == a->at)) free(p);
}

static void store_chunk(px_stream *st, const uint8_t *msg, size_t len) {
  if (!st->hb_cap && st->md) { /* the announced size: one allocation, no copies as it grows */
    Xla__Ifrt__Proxy__GrpcHostBufferStoreMetadata *m =
        xla__ifrt__proxy__grpc_host_buffer_store_metadata__unpack(NULL, st->md_len, st->md);
    if (m && m->has_buffer_size && m->buffer_size > 0 && (uint64_t)m->buffer_size <= PX_MAX_HOST_BUFFER) {
      uint8_t *p = px_hb_alloc((size_t)m->buffer_size);
      if (p) {
        st->hb_data = p;
        st->hb_cap = (size_t)m->buffer_size;
      }
    }
    if (m) xla__ifrt__proxy__grpc_host_buffer_store_metadata__free_unpacked(m, NULL);
  }
  chunk_alloc ca = {.base = {.alloc = chunk_alloc_fn, .free = chunk_free_fn},
                    .at = st->hb_data ? st->hb_data + st->hb_len : NULL, .room = st->hb_cap - st->hb_len};
  ca.base.allocator_data = &ca;
  Xla__Ifrt__Proxy__GrpcHostBufferStoreRequest *rq =
      xla__ifrt__proxy__grpc_host_buffer_store_request__unpack(&ca.base, len, msg);
  if (!rq) {
    px_stream_finish(st, PX_INVALID_ARGUMENT, "HostBufferStore: a chunk does not parse");
    return;
  }
  /* the data is taken out before the message is freed (what else took the buffer's end, if
   * anything, is read while freeing: nothing is written there before) */
  size_t n = rq->has_data ? rq->data.len : 0, need;
  uint8_t *src = n ? rq->data.data : NULL;
  rq->data.data = NULL;
  rq->data.len = 0;
  xla__ifrt__proxy__grpc_host_buffer_store_request__free_unpacked(rq, &ca.base);
  if (lm_add_size(st->hb_len, n, &need) < 0 || need > PX_MAX_HOST_BUFFER) {
    px_stream_finish(st, PX_RESOURCE_EXHAUSTED, "HostBufferStore: the buffer exceeds 64 GiB");
  } else if (n && src == ca.at) { /* unpacked in place */
    st->hb_len = need;
    src = NULL;
  } else if (n) {
    if (need > st->hb_cap) {
      size_t cap = st->hb_cap ? st->hb_cap : 65536;
      while (cap < need) cap *= 2;
      uint8_t *p = st->hb_cap ? realloc(st->hb_data, cap) : px_hb_alloc(cap);
      if (!p) {
        px_stream_finish(st, PX_RESOURCE_EXHAUSTED, "HostBufferStore: out of memory");
        free(src);
        return;
      }
      st->hb_data = p;
      st->hb_cap = cap;
    }
    memcpy(st->hb_data + st->hb_len, src, n);
    st->hb_len = need;
  }
  if (src != ca.at) free(src);
}

/* The chunk messages are GrpcHostBufferLookupResponse{data}: protobuf-c packs each one's
 * header (tag and length) into a small buffer; the data itself goes by reference. */
typedef struct hdr_sink {
  ProtobufCBuffer base;
  uint8_t h[32];
  size_t n;
  const uint8_t *skip; /* the data bytes: not copied */
  bool bad;
} hdr_sink;

static void hdr_append(ProtobufCBuffer *b, size_t len, const uint8_t *data) {
  hdr_sink *s = (hdr_sink *)b;
  if (data == s->skip) return;
  if (s->n + len > sizeof s->h) {
    s->bad = true;
    return;
  }
  memcpy(s->h + s->n, data, len);
  s->n += len;
}

static bool try_lookup(px_stream *st) {
  uint8_t *data;
  size_t len;
  if (px_hb_take(st->hb_session, st->hb_handle, 0, &data, &len) < 0) return false;
  px_conn *c = st->conn;
  pthread_mutex_lock(&c->mu);
  st->blob = data; /* the segments below point into it until the stream is freed */
  size_t off = 0;
  int rc = 0;
  do { /* one message even for an empty buffer */
    size_t n = len - off < PX_CHUNK ? len - off : PX_CHUNK;
    Xla__Ifrt__Proxy__GrpcHostBufferLookupResponse r = XLA__IFRT__PROXY__GRPC_HOST_BUFFER_LOOKUP_RESPONSE__INIT;
    r.has_data = 1;
    r.data.data = data + off;
    r.data.len = n;
    hdr_sink hs = {.base = {.append = hdr_append}, .n = 5, .skip = n ? data + off : NULL};
    size_t packed = protobuf_c_message_pack_to_buffer(&r.base, &hs.base);
    if (hs.bad || packed != hs.n - 5 + n) {
      rc = -1;
      break;
    }
    grpc_prefix(hs.h, packed);
    if (!st->closed && !st->out_done) rc = out_push_locked(st, hs.h, hs.n, data + off, n);
    off += n;
  } while (rc == 0 && off < len);
  pthread_mutex_unlock(&c->mu);
  if (rc < 0) px_stream_finish(st, PX_RESOURCE_EXHAUSTED, "HostBufferLookup: out of memory");
  else px_stream_finish(st, PX_OK, NULL);
  lm_log(LM_LOG_DEBUG, "proxy: HostBufferLookup session %llu handle %llu: %zu bytes queued",
         (unsigned long long)st->hb_session, (unsigned long long)st->hb_handle, len);
  return true;
}

/* One complete request message of a unary or client-streaming method. */
static void on_message(px_stream *st, const uint8_t *msg, size_t len) {
  switch (st->kind) {
  case K_VERSION:
    if (st->answered) px_stream_finish(st, PX_INVALID_ARGUMENT, "GetVersion takes one message");
    else answer_version(st, msg, len);
    st->answered = true;
    break;
  case K_SESSION:
    if (st->session) px_session_request(st->session, msg, len);
    break;
  case K_STORE: store_chunk(st, msg, len); break;
  case K_LOOKUP:
  case K_DELETE: {
    if (st->answered) {
      px_stream_finish(st, PX_INVALID_ARGUMENT, "a unary method got two messages");
      break;
    }
    st->answered = true;
    Xla__Ifrt__Proxy__GrpcHostBufferLookupRequest *rq =
        xla__ifrt__proxy__grpc_host_buffer_lookup_request__unpack(NULL, len, msg); /* same fields as Delete */
    if (!rq) {
      px_stream_finish(st, PX_INVALID_ARGUMENT, "the request does not parse");
      break;
    }
    st->hb_session = rq->session_id;
    st->hb_handle = rq->handle;
    xla__ifrt__proxy__grpc_host_buffer_lookup_request__free_unpacked(rq, NULL);
    if (st->kind == K_DELETE) {
      px_hb_delete(st->hb_session, st->hb_handle);
      Xla__Ifrt__Proxy__GrpcHostBufferDeleteResponse r = XLA__IFRT__PROXY__GRPC_HOST_BUFFER_DELETE_RESPONSE__INIT;
      send_msg(st, &r.base);
      px_stream_finish(st, PX_OK, NULL);
    } else if (!try_lookup(st)) {
      st->lookup_parked = true;
      st->lookup_deadline = lm_now_ms() + (uint64_t)st->conn->opts->host_buffer_wait_ms;
    }
    break;
  }
  default: break;
  }
}

/* Frames st->in into messages. */
static void drain_input(px_stream *st) {
  size_t off = 0;
  while (st->in_len - off >= 5) {
    const uint8_t *p = st->in + off;
    size_t len = ((size_t)p[1] << 24) | ((size_t)p[2] << 16) | ((size_t)p[3] << 8) | p[4];
    if (p[0] != 0) {
      px_stream_finish(st, PX_UNIMPLEMENTED, "compressed gRPC messages are not supported (no grpc-encoding was offered)");
      nghttp2_submit_rst_stream(st->conn->h2, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_NO_ERROR);
      st->in_len = 0;
      return;
    }
    if (len > PX_MAX_MESSAGE) {
      lm_warn("proxy: %s stream %d: a gRPC message over 2 GiB; ending the stream", st->method, st->id);
      px_stream_finish(st, PX_RESOURCE_EXHAUSTED, "a gRPC message over 2 GiB");
      nghttp2_submit_rst_stream(st->conn->h2, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_NO_ERROR);
      st->in_len = 0;
      return;
    }
    if (st->in_len - off - 5 < len) break;
    on_message(st, p + 5, len);
    off += 5 + len;
  }
  if (off) {
    memmove(st->in, st->in + off, st->in_len - off);
    st->in_len -= off;
  }
}

/* The stream lets go of its session: the client half-closed (end = 1) or the stream died. */
static void drop_session(px_stream *st, int end) {
  if (!st->session) return;
  px_session_close(st->session, end);
  px_session_release(st->session);
  st->session = NULL;
}

/* The request's last byte arrived. */
static void on_request_end(px_stream *st) {
  st->request_ended = true;
  if (st->in_len) {
    px_stream_finish(st, PX_INVALID_ARGUMENT, "the request ended inside a gRPC message");
    drop_session(st, 0);
    return;
  }
  switch (st->kind) {
  case K_SESSION:
    drop_session(st, 1);
    break;
  case K_STORE:
    if (!st->out_done) {
      if (!st->md) {
        px_stream_finish(st, PX_INVALID_ARGUMENT,
                         "HostBufferStore without its ifrt-proxy-grpc-host-buffer-store-metadata-bin header");
        break;
      }
      Xla__Ifrt__Proxy__GrpcHostBufferStoreMetadata *m =
          xla__ifrt__proxy__grpc_host_buffer_store_metadata__unpack(NULL, st->md_len, st->md);
      if (!m) {
        px_stream_finish(st, PX_INVALID_ARGUMENT, "HostBufferStore: the metadata header does not parse");
        break;
      }
      if (m->has_buffer_size && (uint64_t)m->buffer_size != st->hb_len) {
        char e[200];
        snprintf(e, sizeof e, "HostBufferStore: handle %llu announced %lld bytes, %zu arrived",
                 (unsigned long long)m->handle, (long long)m->buffer_size, st->hb_len);
        px_stream_finish(st, PX_INVALID_ARGUMENT, e);
      } else {
        px_hb_put(m->session_id, m->handle, st->hb_data ? st->hb_data : malloc(1), st->hb_len);
        st->hb_data = NULL;
        st->hb_len = st->hb_cap = 0;
        Xla__Ifrt__Proxy__GrpcHostBufferStoreResponse r = XLA__IFRT__PROXY__GRPC_HOST_BUFFER_STORE_RESPONSE__INIT;
        send_msg(st, &r.base);
        px_stream_finish(st, PX_OK, NULL);
      }
      xla__ifrt__proxy__grpc_host_buffer_store_metadata__free_unpacked(m, NULL);
    }
    break;
  case K_VERSION:
  case K_LOOKUP:
  case K_DELETE:
    if (!st->answered) px_stream_finish(st, PX_INVALID_ARGUMENT, "a unary method got no message");
    break;
  default: break;
  }
}

/* ---- nghttp2 callbacks (I/O thread) ---- */

static int send_all(int fd, const uint8_t *data, size_t len) {
  size_t off = 0;
  while (off < len) {
    ssize_t w = send(fd, data + off, len - off, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    off += (size_t)w;
  }
  return 0;
}

/* Writes what c->obuf holds. */
static int out_flush(px_conn *c) {
  int rc = c->on ? send_all(c->fd, c->obuf, c->on) : 0;
  c->on = 0;
  return rc;
}

/* Queues bytes for the socket: small ones gathered into writes of up to 1 MiB (one send per
 * frame would cost a system call each), big ones written from where they are. */
static int out_write(px_conn *c, const uint8_t *data, size_t len) {
  if (c->on + len > c->ocap && out_flush(c) < 0) return -1;
  if (len >= c->ocap / 4) return out_flush(c) < 0 ? -1 : send_all(c->fd, data, len);
  memcpy(c->obuf + c->on, data, len);
  c->on += len;
  return 0;
}

/* nghttp2's frames other than response DATA (I/O thread). */
static ssize_t send_cb(nghttp2_session *h2, const uint8_t *data, size_t len, int flags, void *ud) {
  (void)h2;
  (void)flags;
  return out_write(ud, data, len) < 0 ? NGHTTP2_ERR_CALLBACK_FAILURE : (ssize_t)len;
}

/* A response DATA frame of `length` bytes read_cb measured: its header, then the bytes straight
 * from the stream's segments (a host buffer's chunks go to the socket without a copy in the
 * proxy). Only the I/O thread consumes or frees segments, so they stay put once the lock is let
 * go; other threads only append. */
static int send_data_cb(nghttp2_session *h2, nghttp2_frame *frame, const uint8_t *framehd, size_t length,
                        nghttp2_data_source *source, void *ud) {
  (void)h2;
  (void)frame; /* no padding is ever asked for */
  px_conn *c = ud;
  px_stream *st = source->ptr;
  const uint8_t *piece[PX_PIECES];
  size_t plen[PX_PIECES], np = 0, n = 0;
  pthread_mutex_lock(&c->mu);
  for (oseg *o = st->oh; o && n < length && np < PX_PIECES; o = o->next) {
    size_t k = o->len - o->off < length - n ? o->len - o->off : length - n;
    if (!k) continue;
    piece[np] = o->p + o->off;
    plen[np++] = k;
    o->off += k;
    n += k;
  }
  pthread_mutex_unlock(&c->mu);
  if (n != length) return NGHTTP2_ERR_CALLBACK_FAILURE; /* cannot happen: read_cb measured these */
  if (out_write(c, framehd, 9) < 0) return NGHTTP2_ERR_CALLBACK_FAILURE;
  for (size_t i = 0; i < np; i++)
    if (out_write(c, piece[i], plen[i]) < 0) return NGHTTP2_ERR_CALLBACK_FAILURE;
  return 0;
}

/* Sends what nghttp2 has queued. */
static int flush(px_conn *c) {
  if (nghttp2_session_send(c->h2) != 0) return -1;
  return out_flush(c);
}

static int begin_headers_cb(nghttp2_session *h2, const nghttp2_frame *f, void *ud) {
  px_conn *c = ud;
  if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
  px_stream *st = calloc(1, sizeof *st);
  if (!st) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  atomic_init(&st->refs, 1);
  atomic_fetch_add(&c->refs, 1);
  st->conn = c;
  st->id = f->hd.stream_id;
  st->next = c->streams;
  c->streams = st;
  nghttp2_session_set_stream_user_data(h2, st->id, st);
  return 0;
}

static int header_cb(nghttp2_session *h2, const nghttp2_frame *f, const uint8_t *name, size_t nlen,
                     const uint8_t *value, size_t vlen, uint8_t flags, void *ud) {
  (void)flags;
  (void)ud;
  if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
  px_stream *st = nghttp2_session_get_stream_user_data(h2, f->hd.stream_id);
  if (!st) return 0;
  if (nlen == 5 && !memcmp(name, ":path", 5)) {
    size_t pl = sizeof PX_SERVICE - 1;
    snprintf(st->method, sizeof st->method, "%.*s", (int)vlen, (const char *)value);
    if (vlen > pl && !memcmp(value, PX_SERVICE, pl)) {
      const char *m = (const char *)value + pl;
      size_t ml = vlen - pl;
#define IS(s) (ml == sizeof(s) - 1 && !memcmp(m, s, ml))
      st->kind = IS("GetVersion") ? K_VERSION : IS("IfrtSession") ? K_SESSION : IS("HostBufferStore") ? K_STORE
               : IS("HostBufferLookup") ? K_LOOKUP : IS("HostBufferDelete") ? K_DELETE
               : IS("HostBufferReadFromDisk") ? K_READ_DISK : K_UNKNOWN;
#undef IS
    }
  } else if ((nlen == sizeof SESSION_MD - 1 && !memcmp(name, SESSION_MD, nlen)) ||
             (nlen == sizeof STORE_MD - 1 && !memcmp(name, STORE_MD, nlen))) {
    free(st->md);
    st->md = b64decode(value, vlen, &st->md_len);
  }
  return 0;
}

static void on_headers_done(px_conn *c, px_stream *st) {
  submit_response(st);
  char m[200];
  switch (st->kind) {
  case K_SESSION: {
    uint64_t sid = atomic_fetch_add(&g_next_session, 1);
    atomic_fetch_add(&st->refs, 1); /* the session's reference */
    st->session = px_session_start(st, c->opts, sid, st->md, st->md_len);
    if (!st->session) {
      stream_unref(st);
      px_stream_finish(st, PX_RESOURCE_EXHAUSTED, "cannot start a session");
    }
    break;
  }
  case K_READ_DISK:
    px_stream_finish(st, PX_UNIMPLEMENTED, "HostBufferReadFromDisk is not supported by the Loom proxy");
    break;
  case K_UNKNOWN:
    snprintf(m, sizeof m, "unknown method %s", st->method[0] ? st->method : "(no :path)");
    px_stream_finish(st, PX_UNIMPLEMENTED, m);
    break;
  default: break;
  }
}

static int frame_recv_cb(nghttp2_session *h2, const nghttp2_frame *f, void *ud) {
  px_conn *c = ud;
  px_stream *st = nghttp2_session_get_stream_user_data(h2, f->hd.stream_id);
  if (!st) return 0;
  if (f->hd.type == NGHTTP2_HEADERS && f->headers.cat == NGHTTP2_HCAT_REQUEST) on_headers_done(c, st);
  if ((f->hd.type == NGHTTP2_HEADERS || f->hd.type == NGHTTP2_DATA) && (f->hd.flags & NGHTTP2_FLAG_END_STREAM))
    on_request_end(st);
  return 0;
}

static int data_cb(nghttp2_session *h2, uint8_t flags, int32_t id, const uint8_t *data, size_t len, void *ud) {
  (void)flags;
  (void)ud;
  px_stream *st = nghttp2_session_get_stream_user_data(h2, id);
  if (!st || st->out_done) return 0; /* answered already (an error): drop what follows */
  size_t need;
  if (lm_add_size(st->in_len, len, &need) < 0 || need > PX_MAX_MESSAGE + 5) {
    lm_warn("proxy: %s stream %d: a gRPC message over 2 GiB; ending the stream", st->method, id);
    px_stream_finish(st, PX_RESOURCE_EXHAUSTED, "a gRPC message over 2 GiB");
    nghttp2_submit_rst_stream(h2, NGHTTP2_FLAG_NONE, id, NGHTTP2_NO_ERROR);
    return 0;
  }
  if (need > st->in_cap) {
    size_t cap = st->in_cap ? st->in_cap : 4096;
    while (cap < need) cap *= 2;
    uint8_t *p = realloc(st->in, cap);
    if (!p) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    st->in = p;
    st->in_cap = cap;
  }
  memcpy(st->in + st->in_len, data, len);
  st->in_len = need;
  drain_input(st);
  return 0;
}

static void unlink_stream(px_conn *c, px_stream *st) {
  if (st->kind == K_LOOKUP || st->kind == K_STORE)
    lm_log(LM_LOG_DEBUG, "proxy: %s stream %d closed", st->kind == K_LOOKUP ? "HostBufferLookup" : "HostBufferStore",
           st->id);
  for (px_stream **p = &c->streams; *p; p = &(*p)->next)
    if (*p == st) {
      *p = st->next;
      break;
    }
  pthread_mutex_lock(&c->mu);
  st->closed = true;
  pthread_mutex_unlock(&c->mu);
  drop_session(st, 0); /* the client went away mid-session */
  stream_unref(st);
}

static int stream_close_cb(nghttp2_session *h2, int32_t id, uint32_t code, void *ud) {
  (void)code;
  px_stream *st = nghttp2_session_get_stream_user_data(h2, id);
  if (st) {
    nghttp2_session_set_stream_user_data(h2, id, NULL);
    unlink_stream(ud, st);
  }
  return 0;
}

/* ---- connections ---- */

static void *conn_main(void *arg) {
  px_conn *c = arg;
  nghttp2_session_callbacks *cbs;
  nghttp2_session_callbacks_new(&cbs);
  nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, begin_headers_cb);
  nghttp2_session_callbacks_set_on_header_callback(cbs, header_cb);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, frame_recv_cb);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, data_cb);
  nghttp2_session_callbacks_set_on_stream_close_callback(cbs, stream_close_cb);
  nghttp2_session_callbacks_set_send_callback(cbs, send_cb);
  nghttp2_session_callbacks_set_send_data_callback(cbs, send_data_cb);
  int rc = nghttp2_session_server_new(&c->h2, cbs, c);
  nghttp2_session_callbacks_del(cbs);
  if (rc != 0) goto out;
  nghttp2_settings_entry iv[] = {
      {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 1000},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1 << 24},
      {NGHTTP2_SETTINGS_MAX_FRAME_SIZE, 1 << 20},
  };
  nghttp2_submit_settings(c->h2, NGHTTP2_FLAG_NONE, iv, sizeof iv / sizeof iv[0]);
  nghttp2_session_set_local_window_size(c->h2, NGHTTP2_FLAG_NONE, 0, 1 << 30);
  uint8_t *buf = malloc(1 << 20);
  c->obuf = malloc(1 << 20);
  c->ocap = 1 << 20;
  if (!buf || !c->obuf) {
    free(buf);
    goto out;
  }
  for (;;) {
    if (flush(c) != 0) break;
    if (!nghttp2_session_want_read(c->h2) && !nghttp2_session_want_write(c->h2)) break;
    bool parked = false;
    for (px_stream *st = c->streams; st; st = st->next) parked |= st->lookup_parked;
    struct pollfd pf[2] = {{.fd = c->fd, .events = POLLIN}, {.fd = c->efd, .events = POLLIN}};
    int n = poll(pf, 2, parked ? 10 : 1000);
    if (n < 0 && errno != EINTR) break;
    if (pf[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      ssize_t r = recv(c->fd, buf, 1 << 20, 0);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      ssize_t used = nghttp2_session_mem_recv(c->h2, buf, (size_t)r);
      if (used < 0) {
        lm_log(LM_LOG_WARN, "proxy: connection from %s: bad HTTP/2 (%s); closing it", c->peer,
               nghttp2_strerror((int)used));
        flush(c); /* the GOAWAY nghttp2 queued, if any */
        break;
      }
    }
    if (pf[1].revents & POLLIN) {
      uint64_t v;
      ssize_t r = read(c->efd, &v, sizeof v);
      (void)r;
    }
    uint64_t now = lm_now_ms();
    for (px_stream *st = c->streams; st; st = st->next) {
      if (st->lookup_parked) {
        if (try_lookup(st)) {
          st->lookup_parked = false;
        } else if (now > st->lookup_deadline) {
          char m[200];
          snprintf(m, sizeof m, "HostBufferLookup: no host buffer %llu in session %llu",
                   (unsigned long long)st->hb_handle, (unsigned long long)st->hb_session);
          st->lookup_parked = false;
          px_stream_finish(st, PX_NOT_FOUND, m);
        }
      }
      pthread_mutex_lock(&c->mu);
      bool resume = st->deferred && (st->oh || st->out_done);
      if (resume) st->deferred = false;
      pthread_mutex_unlock(&c->mu);
      if (resume) nghttp2_session_resume_data(c->h2, st->id);
    }
  }
  free(buf);
out:
  free(c->obuf);
  c->obuf = NULL;
  while (c->streams) unlink_stream(c, c->streams);
  if (c->h2) nghttp2_session_del(c->h2);
  c->h2 = NULL;
  close(c->fd);
  conn_unref(c);
  return NULL;
}

int px_serve(const px_options *opts, lm_err *err) {
  struct sockaddr_storage ss;
  socklen_t sl;
  LM_TRY(lm_addr_resolve(opts->listen, &ss, &sl, err));
  int lfd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (lfd < 0) return lm_errf(err, LOOM_IO, "socket: %s", strerror(errno));
  int one = 1;
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(lfd, (struct sockaddr *)&ss, sl) != 0 || listen(lfd, 4096) != 0 /* as LM_LISTEN_BACKLOG */) {
    int e = errno;
    close(lfd);
    return lm_errf(err, LOOM_IO, "cannot listen on %s: %s", opts->listen, strerror(e));
  }
  char bound[LM_ADDR_MAX];
  sl = sizeof ss;
  getsockname(lfd, (struct sockaddr *)&ss, &sl);
  lm_addr_format((struct sockaddr *)&ss, bound, sizeof bound);
  lm_log(LM_LOG_INFO, "proxy: listening on %s (IFRT proxy protocol %d..%d), controller %s", bound, PX_PROTOCOL_MIN,
         PX_PROTOCOL_MAX, opts->controller ? opts->controller : "(the local cluster)");
  if (opts->address_file) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", opts->address_file);
    FILE *f = fopen(tmp, "w");
    if (f) {
      fprintf(f, "%s\n", bound);
      fclose(f);
      rename(tmp, opts->address_file);
    }
  }
  while (!*opts->stop) {
    struct pollfd pf = {.fd = lfd, .events = POLLIN};
    px_hb_trim(lm_now_ms(), 0);
    if (poll(&pf, 1, 200) <= 0) continue;
    struct sockaddr_storage peer;
    socklen_t pl = sizeof peer;
    int fd = accept4(lfd, (struct sockaddr *)&peer, &pl, SOCK_CLOEXEC);
    if (fd < 0) continue;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct timeval tv = {.tv_sec = 60};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv); /* a client that stops reading */
    px_conn *c = calloc(1, sizeof *c);
    int efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    pthread_t th;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    if (!c || efd < 0) {
      free(c);
      if (efd >= 0) close(efd);
      close(fd);
      pthread_attr_destroy(&a);
      continue;
    }
    atomic_init(&c->refs, 1);
    c->fd = fd;
    c->efd = efd;
    c->opts = opts;
    pthread_mutex_init(&c->mu, NULL);
    lm_addr_format((struct sockaddr *)&peer, c->peer, sizeof c->peer);
    if (pthread_create(&th, &a, conn_main, c) != 0) {
      close(fd);
      conn_unref(c);
    }
    pthread_attr_destroy(&a);
  }
  close(lfd);
  px_hb_trim(0, 1);
  return 0;
}
