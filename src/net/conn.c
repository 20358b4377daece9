/* libuv framed connections for the daemons: reading with the frame reader (payloads straight
 * into their buffers), deadlines for handshakes and stalled frames, write queue limits, and
 * orderly closes that flush an ERROR frame first. Over TCP, or over a Unix-domain socket (a
 * worker's local socket for clients on the same host). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include "net/conn.h"
#include "net/sock.h"

enum { ST_NEW, ST_CONNECTING, ST_OPEN, ST_DRAINING, ST_CLOSED };

#define READ_BUF_SIZE ((size_t)64 << 10)
#define DIRECT_MIN ((size_t)16 << 10)   /* smaller payload windows go through the read buffer */
#define TICK_MS 100                      /* deadline check period while a deadline is armed */
#define LINGER_MS 2000                   /* how long a closing connection may take to flush */

struct lm_conn {
  union {                     /* the stream: TCP, or a Unix-domain socket (local) */
    uv_tcp_t tcp;
    uv_pipe_t pipe;
    uv_stream_t stream;
    uv_handle_t handle;
  } h;
  bool local;                 /* h.pipe */
  uv_timer_t timer;
  uv_connect_t connect_req;
  uv_shutdown_t shutdown_req;
  uv_loop_t *loop;
  const lm_conn_ops *ops;
  lm_conn_config cfg;
  void *user;
  int state;
  int handles_open;           /* handles whose close callback is still due */
  lm_frame_reader reader;
  uint8_t *rbuf;              /* READ_BUF_SIZE bytes */
  bool direct;                /* the last allocation was a payload window */
  bool established;           /* handshake done */
  uint64_t opened_ms;         /* when accepted/connected (loop time) */
  bool frame_timing;          /* a frame is partially received */
  uint64_t frame_start_ms;
  uint64_t drain_start_ms;
  int close_code;
  bool reason_set;
  char close_reason[512];
  char peer[LM_ADDR_MAX];
};

typedef struct wreq {
  uv_write_t req;
  lm_conn *c;
  uint8_t *head;              /* header + metadata (+ copied payload) */
  void (*release)(void *);
  void *release_arg;
} wreq;

void lm_conn_config_default(lm_conn_config *c) {
  c->limits.max_meta = LM_FRAME_META_DEFAULT_MAX;
  c->limits.max_payload = LM_FRAME_PAYLOAD_DEFAULT_MAX;
  c->max_out_bytes = (uint64_t)256 << 20;
  c->frame_timeout_ms = 10000;
  c->handshake_timeout_ms = 5000;
}

static void set_reason(lm_conn *c, int code, const char *fmt, va_list ap) {
  if (c->reason_set) return;
  c->reason_set = true;
  c->close_code = code;
  vsnprintf(c->close_reason, sizeof c->close_reason, fmt, ap);
}

static void set_reasonf(lm_conn *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void set_reasonf(lm_conn *c, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  set_reason(c, code, fmt, ap);
  va_end(ap);
}

static void on_handle_closed(uv_handle_t *h) {
  lm_conn *c = h->data;
  if (--c->handles_open > 0) return;
  if (c->ops->on_close) c->ops->on_close(c, c->close_code, c->reason_set ? c->close_reason : "closed");
  lm_frame_reader_free(&c->reader);
  free(c->rbuf);
  free(c);
}

static void hard_close(lm_conn *c) {
  if (c->state == ST_CLOSED) return;
  c->state = ST_CLOSED;
  uv_read_stop(&c->h.stream);
  uv_close(&c->h.handle, on_handle_closed);
  uv_close((uv_handle_t *)&c->timer, on_handle_closed);
}

static void timer_cb(uv_timer_t *t);

/* Arms the deadline tick while some deadline applies, disarms it otherwise. */
static void update_timer(lm_conn *c) {
  if (c->state == ST_CLOSED) return;
  bool need = c->state == ST_DRAINING ||
              (c->state == ST_OPEN && ((!c->established && c->cfg.handshake_timeout_ms) ||
                                       (c->frame_timing && c->cfg.frame_timeout_ms)));
  bool active = uv_is_active((uv_handle_t *)&c->timer);
  if (need && !active) uv_timer_start(&c->timer, timer_cb, TICK_MS, TICK_MS);
  else if (!need && active) uv_timer_stop(&c->timer);
}

static lm_conn *conn_new(uv_loop_t *loop, const lm_conn_ops *ops, const lm_conn_config *cfg, void *user,
                         bool local) {
  lm_conn *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->rbuf = malloc(READ_BUF_SIZE);
  if (!c->rbuf) { free(c); return NULL; }
  c->loop = loop;
  c->ops = ops;
  if (cfg) c->cfg = *cfg;
  else lm_conn_config_default(&c->cfg);
  c->user = user;
  c->state = ST_NEW;
  lm_frame_reader_init(&c->reader, &c->cfg.limits);
  c->reader.sink_arg = c;
  c->local = local;
  if (local) uv_pipe_init(loop, &c->h.pipe, 0);
  else uv_tcp_init(loop, &c->h.tcp);
  uv_timer_init(loop, &c->timer);
  c->h.handle.data = c;
  c->timer.data = c;
  c->handles_open = 2;
  snprintf(c->peer, sizeof c->peer, "(unconnected)");
  return c;
}

lm_conn *lm_conn_new(uv_loop_t *loop, const lm_conn_ops *ops, const lm_conn_config *cfg, void *user) {
  return conn_new(loop, ops, cfg, user, false);
}

lm_conn *lm_conn_new_local(uv_loop_t *loop, const lm_conn_ops *ops, const lm_conn_config *cfg, void *user) {
  return conn_new(loop, ops, cfg, user, true);
}

static int frame_cb(void *arg, lm_frame *f, lm_err *err) {
  lm_conn *c = arg;
  if (c->ops->on_frame) c->ops->on_frame(c, f);
  return c->state == ST_OPEN ? 0 : 1;
}

static int sink_cb(void *arg, const lm_frame *f, void **dst, lm_err *err) {
  lm_conn *c = arg;
  return c->ops->payload_sink(c, f, dst, err);
}

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  lm_conn *c = h->data;
  c->direct = false;
  if (c->state == ST_OPEN) {
    void *p;
    size_t n;
    lm_err err;
    int w = lm_frame_reader_window(&c->reader, &p, &n, &err);
    if (w < 0) { /* out of memory: read_cb sees UV_ENOBUFS */
      buf->base = NULL;
      buf->len = 0;
      return;
    }
    if (w == 1 && n >= DIRECT_MIN) {
      c->direct = true;
      buf->base = p;
      buf->len = n;
      return;
    }
  }
  buf->base = (char *)c->rbuf;
  buf->len = READ_BUF_SIZE;
}

static void read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  lm_conn *c = s->data;
  if (c->state == ST_CLOSED) return;
  if (nread < 0) {
    if (nread == UV_ENOBUFS) {
      lm_conn_close_with_error(c, 0, LOOM_NO_MEMORY, "out of host memory receiving a frame");
      return;
    }
    if (c->state == ST_DRAINING) {
      hard_close(c);
      return;
    }
    if (nread == UV_EOF) {
      if (lm_frame_reader_mid_frame(&c->reader))
        set_reasonf(c, LOOM_CLOSED, "peer disconnected in the middle of a frame");
      else
        set_reasonf(c, LOOM_CLOSED, "peer disconnected");
    } else {
      set_reasonf(c, LOOM_CLOSED, "connection error: %s", uv_strerror((int)nread));
    }
    hard_close(c);
    return;
  }
  if (nread == 0 || c->state != ST_OPEN) return; /* draining: input is discarded */
  lm_err err;
  lm_err_clear(&err);
  int rc = c->direct ? lm_frame_reader_advance(&c->reader, (size_t)nread, frame_cb, c, &err)
                     : lm_frame_reader_feed(&c->reader, buf->base, (size_t)nread, frame_cb, c, &err);
  if (rc < 0 && c->state == ST_OPEN) {
    lm_conn_close_with_error(c, 0, err.code, "%s", err.msg);
    return;
  }
  if (c->state != ST_OPEN) return;
  bool mid = lm_frame_reader_mid_frame(&c->reader);
  if (mid && !c->frame_timing) c->frame_start_ms = uv_now(c->loop);
  c->frame_timing = mid;
  update_timer(c);
}

static void timer_cb(uv_timer_t *t) {
  lm_conn *c = t->data;
  uint64_t now = uv_now(c->loop);
  if (c->state == ST_DRAINING) {
    if (now - c->drain_start_ms >= LINGER_MS) hard_close(c);
    return;
  }
  if (c->state != ST_OPEN) return;
  if (!c->established && c->cfg.handshake_timeout_ms && now - c->opened_ms >= c->cfg.handshake_timeout_ms) {
    lm_conn_close_with_error(c, 0, LOOM_TIMEOUT, "no handshake within %u ms", c->cfg.handshake_timeout_ms);
    return;
  }
  if (c->frame_timing && c->cfg.frame_timeout_ms) {
    uint64_t allowed = c->cfg.frame_timeout_ms;
    const lm_frame_reader *r = &c->reader;
    uint64_t total = LM_FRAME_HEADER_SIZE;
    if (r->hdr_got == 0) /* header decoded: the frame's size is known; allow 1 s per MiB */
      total += r->cur.h.meta_len + r->cur.h.payload_len;
    allowed += (total >> 20) * 1000;
    if (now - c->frame_start_ms >= allowed) {
      lm_conn_close_with_error(c, 0, LOOM_TIMEOUT, "frame not completed within %llu ms (stalled peer)",
                               (unsigned long long)allowed);
      return;
    }
  }
  update_timer(c);
}

static void start_reading(lm_conn *c) {
  c->state = ST_OPEN;
  c->opened_ms = uv_now(c->loop);
  if (c->local) {
    struct ucred cr;
    socklen_t cl = sizeof cr;
    uv_os_fd_t fd;
    if (uv_fileno(&c->h.handle, &fd) == 0 && getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) == 0)
      snprintf(c->peer, sizeof c->peer, "local pid %d", (int)cr.pid);
    else
      snprintf(c->peer, sizeof c->peer, "local");
  } else {
    struct sockaddr_storage ss;
    int len = sizeof ss;
    if (uv_tcp_getpeername(&c->h.tcp, (struct sockaddr *)&ss, &len) == 0)
      lm_addr_format((struct sockaddr *)&ss, c->peer, sizeof c->peer);
    uv_tcp_nodelay(&c->h.tcp, 1);
  }
  if (c->ops->payload_sink) c->reader.sink = sink_cb;
  int rc = uv_read_start(&c->h.stream, alloc_cb, read_cb);
  if (rc < 0) {
    set_reasonf(c, LOOM_IO, "cannot read: %s", uv_strerror(rc));
    hard_close(c);
    return;
  }
  update_timer(c);
}

int lm_conn_accept(lm_conn *c, uv_stream_t *server) {
  if ((server->type == UV_NAMED_PIPE) != c->local) {
    set_reasonf(c, LOOM_INTERNAL, "accept: the connection and the server are of different kinds");
    hard_close(c);
    return LOOM_INTERNAL;
  }
  int rc = uv_accept(server, &c->h.stream);
  if (rc < 0) {
    set_reasonf(c, LOOM_IO, "accept: %s", uv_strerror(rc));
    hard_close(c);
    return LOOM_IO;
  }
  start_reading(c);
  return c->state == ST_OPEN ? 0 : LOOM_IO;
}

static void connect_cb(uv_connect_t *req, int status) {
  lm_conn *c = req->data;
  if (c->state == ST_CLOSED) return;
  if (status < 0) {
    set_reasonf(c, LOOM_CONNECT, "cannot connect to %s: %s", c->peer, uv_strerror(status));
    hard_close(c);
    return;
  }
  start_reading(c);
  if (c->state == ST_OPEN && c->ops->on_connect) c->ops->on_connect(c);
}

int lm_conn_connect(lm_conn *c, const struct sockaddr *addr) {
  lm_addr_format(addr, c->peer, sizeof c->peer);
  c->connect_req.data = c;
  c->state = ST_CONNECTING;
  int rc = c->local ? UV_EINVAL : uv_tcp_connect(&c->connect_req, &c->h.tcp, addr, connect_cb);
  if (rc < 0) {
    set_reasonf(c, LOOM_CONNECT, "cannot connect to %s: %s", c->peer, uv_strerror(rc));
    hard_close(c);
    return LOOM_CONNECT;
  }
  return 0;
}

static void write_cb(uv_write_t *req, int status) {
  wreq *w = req->data;
  lm_conn *c = w->c;
  if (w->release) w->release(w->release_arg);
  free(w->head);
  free(w);
  if (status < 0 && status != UV_ECANCELED && c->state != ST_CLOSED) {
    set_reasonf(c, LOOM_CLOSED, "write failed: %s", uv_strerror(status));
    hard_close(c);
  }
}

static int queue_frame(lm_conn *c, unsigned type, uint64_t request_id, const ProtobufCMessage *m, const void *payload,
                       uint64_t plen, void (*release)(void *), void *release_arg, lm_err *err) {
  if (c->state != ST_OPEN) {
    if (release) release(release_arg);
    return lm_errf(err, LOOM_CLOSED, "connection to %s is closed", c->peer);
  }
  uint8_t *head;
  size_t hlen;
  int rc = lm_msg_encode(type, request_id, m, plen, &head, &hlen, err);
  if (rc < 0) {
    if (release) release(release_arg);
    return rc;
  }
  if (plen && !release) { /* copy small or caller-owned payloads behind the metadata */
    uint8_t *h2 = realloc(head, hlen + (size_t)plen);
    if (!h2) {
      free(head);
      return lm_errf(err, LOOM_NO_MEMORY, "out of host memory queueing a frame");
    }
    head = h2;
    memcpy(head + hlen, payload, (size_t)plen);
    hlen += (size_t)plen;
    plen = 0;
  }
  wreq *w = calloc(1, sizeof *w);
  if (!w) {
    free(head);
    if (release) release(release_arg);
    return lm_errf(err, LOOM_NO_MEMORY, "out of host memory queueing a frame");
  }
  w->c = c;
  w->head = head;
  w->release = release;
  w->release_arg = release_arg;
  w->req.data = w;
  uv_buf_t bufs[2] = {uv_buf_init((char *)head, 0), uv_buf_init((char *)payload, 0)};
  bufs[0].len = hlen; /* uv_buf_init takes an unsigned int: set the real lengths */
  bufs[1].len = (size_t)plen;
  rc = uv_write(&w->req, &c->h.stream, bufs, plen ? 2 : 1, write_cb);
  if (rc < 0) {
    free(head);
    free(w);
    if (release) release(release_arg);
    set_reasonf(c, LOOM_CLOSED, "write failed: %s", uv_strerror(rc));
    hard_close(c);
    return lm_errf(err, LOOM_CLOSED, "write to %s failed: %s", c->peer, uv_strerror(rc));
  }
  return 0;
}

int lm_conn_send(lm_conn *c, unsigned type, uint64_t request_id, const ProtobufCMessage *m, const void *payload,
                 uint64_t plen, void (*release)(void *), void *release_arg, lm_err *err) {
  LM_TRY(queue_frame(c, type, request_id, m, payload, plen, release, release_arg, err));
  size_t queued = uv_stream_get_write_queue_size(&c->h.stream);
  if (c->cfg.max_out_bytes && queued > c->cfg.max_out_bytes) {
    set_reasonf(c, LOOM_BUSY, "peer is not reading its replies (%zu bytes queued)", queued);
    hard_close(c);
    return lm_errf(err, LOOM_CLOSED, "connection to %s dropped: peer is not reading", c->peer);
  }
  return 0;
}

int lm_conn_send_error(lm_conn *c, uint64_t request_id, int code, const char *msg) {
  Lmw__ErrorReply e = LMW__ERROR_REPLY__INIT;
  e.code = code < 0 ? code : LOOM_INTERNAL;
  e.message = (char *)msg;
  return lm_conn_send(c, LM_MSG_ERROR, request_id, &e.base, NULL, 0, NULL, NULL, NULL);
}

int lm_conn_send_errorf(lm_conn *c, uint64_t request_id, int code, const char *fmt, ...) {
  char msg[LM_ERR_MSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return lm_conn_send_error(c, request_id, code, msg);
}

void lm_conn_close(lm_conn *c, int code, const char *fmt, ...) {
  if (c->state == ST_CLOSED) return;
  va_list ap;
  va_start(ap, fmt);
  set_reason(c, code, fmt, ap);
  va_end(ap);
  hard_close(c);
}

static void shutdown_cb(uv_shutdown_t *req, int status) {
  lm_conn *c = req->data;
  hard_close(c);
}

void lm_conn_close_with_error(lm_conn *c, uint64_t request_id, int code, const char *fmt, ...) {
  if (c->state != ST_OPEN) {
    if (c->state != ST_DRAINING && c->state != ST_CLOSED) {
      va_list ap;
      va_start(ap, fmt);
      set_reason(c, code, fmt, ap);
      va_end(ap);
      hard_close(c);
    }
    return;
  }
  va_list ap;
  va_start(ap, fmt);
  set_reason(c, code, fmt, ap);
  va_end(ap);
  lm_conn_send_error(c, request_id, code, c->close_reason);
  if (c->state != ST_OPEN) return; /* the send itself failed and closed */
  c->state = ST_DRAINING;
  c->drain_start_ms = uv_now(c->loop);
  /* The reader may be delivering the very frame that led here: it is freed with the connection,
   * and while draining nothing is fed to it. */
  c->shutdown_req.data = c;
  if (uv_shutdown(&c->shutdown_req, &c->h.stream, shutdown_cb) < 0) {
    hard_close(c);
    return;
  }
  update_timer(c);
}

void lm_conn_set_established(lm_conn *c) {
  c->established = true;
  update_timer(c);
}

bool lm_conn_is_open(const lm_conn *c) { return c->state == ST_OPEN; }
const char *lm_conn_peer_name(const lm_conn *c) { return c->peer; }
void *lm_conn_user(const lm_conn *c) { return c->user; }
void lm_conn_set_user(lm_conn *c, void *user) { c->user = user; }

int lm_conn_fd(const lm_conn *c) {
  uv_os_fd_t fd;
  return c->state != ST_CLOSED && uv_fileno(&c->h.handle, &fd) == 0 ? fd : -1;
}

int lm_listen_local(uv_loop_t *loop, uv_pipe_t *server, const char *name, uv_connection_cb on_connection, lm_err *err) {
  struct sockaddr_un sa;
  memset(&sa, 0, sizeof sa);
  sa.sun_family = AF_UNIX;
  size_t n = strlen(name);
  if (n == 0 || n + 1 > sizeof sa.sun_path)
    return lm_errf(err, LOOM_INVALID_ARGUMENT, "local socket name of %zu bytes (1-%zu)", n, sizeof sa.sun_path - 1);
  memcpy(sa.sun_path + 1, name, n); /* sun_path[0] = 0: the abstract namespace, nothing on disk */
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return lm_errf(err, LOOM_IO, "cannot create a local socket: %s", strerror(errno));
  if (bind(fd, (struct sockaddr *)&sa, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n)) != 0) {
    int e = errno;
    close(fd);
    return lm_errf(err, LOOM_IO, "cannot bind the local socket @%s: %s", name, strerror(e));
  }
  int rc = uv_pipe_init(loop, server, 0);
  if (rc < 0) {
    close(fd);
    return lm_errf(err, LOOM_IO, "cannot listen on the local socket @%s: %s", name, uv_strerror(rc));
  }
  rc = uv_pipe_open(server, fd); /* the handle owns fd from here on */
  if (rc < 0) close(fd);
  if (rc == 0) rc = uv_listen((uv_stream_t *)server, LM_LISTEN_BACKLOG, on_connection);
  if (rc < 0) {
    uv_close((uv_handle_t *)server, NULL);
    return lm_errf(err, LOOM_IO, "cannot listen on the local socket @%s: %s", name, uv_strerror(rc));
  }
  return 0;
}

int lm_listen(uv_loop_t *loop, uv_tcp_t *server, const char *addr, uv_connection_cb on_connection, char *bound,
              size_t boundcap, lm_err *err) {
  struct sockaddr_storage ss;
  socklen_t sl;
  LM_TRY(lm_addr_resolve(addr, &ss, &sl, err));
  int rc = uv_tcp_init(loop, server);
  if (rc < 0) return lm_errf(err, LOOM_IO, "cannot listen on %s: %s", addr, uv_strerror(rc));
  rc = uv_tcp_bind(server, (struct sockaddr *)&ss, 0);
  if (rc == 0) rc = uv_listen((uv_stream_t *)server, LM_LISTEN_BACKLOG, on_connection);
  if (rc < 0) {
    uv_close((uv_handle_t *)server, NULL);
    return lm_errf(err, LOOM_IO, "cannot listen on %s: %s", addr, uv_strerror(rc));
  }
  int len = sizeof ss;
  uv_tcp_getsockname(server, (struct sockaddr *)&ss, &len);
  lm_addr_format((struct sockaddr *)&ss, bound, boundcap);
  return 0;
}
