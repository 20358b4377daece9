/* Unit tests for the client connection (src/client/cconn): against a scripted fake controller in
 * a thread, check pipelined calls answered out of order, reply payloads received straight into
 * the caller's buffer, timeouts that leave a call pending, released calls, interrupt hooks, and
 * a broken connection failing every pending call with the controller's reason. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>
#include "client/cconn.h"

/* ---- a fake controller: answers HELLO, then runs a script over the requests it reads ---- */

typedef enum { SCRIPT_REVERSE, SCRIPT_PAYLOAD, SCRIPT_SILENT_THEN_REPLY, SCRIPT_DROP } script;

typedef struct fake {
  int lfd;
  int port;
  script sc;
  pthread_t th;
  int nreq;                /* requests to collect before answering (SCRIPT_REVERSE) */
  size_t payload_len;      /* SCRIPT_PAYLOAD */
  int release_ms;          /* SCRIPT_SILENT_THEN_REPLY: delay before replying */
} fake;

typedef struct reqs {
  uint64_t rid[256];
  unsigned type[256];
  int n;
} reqs;

static int on_req(void *arg, lm_frame *f, lm_err *err) {
  reqs *r = arg;
  r->rid[r->n] = f->h.request_id;
  r->type[r->n] = f->h.type;
  r->n++;
  return 0;
}

static void send_msg(int fd, unsigned type, uint64_t rid, const ProtobufCMessage *m, const void *payload,
                     size_t plen) {
  uint8_t *buf;
  size_t len;
  assert_int_equal(lm_msg_encode(type, rid, m, plen, &buf, &len, NULL), 0);
  struct iovec iov[2] = {{buf, len}, {(void *)payload, plen}};
  assert_int_equal(lm_sock_send_all(fd, iov, plen ? 2 : 1, 0, NULL, NULL, NULL), 0);
  free(buf);
}

/* Reads frames until want requests arrived (or the peer closed). */
static void read_reqs(int fd, lm_frame_reader *rd, reqs *r, int want) {
  uint8_t buf[4096];
  while (r->n < want) {
    ssize_t k = recv(fd, buf, sizeof buf, 0);
    if (k <= 0) return;
    assert_true(lm_frame_reader_feed(rd, buf, (size_t)k, on_req, r, NULL) >= 0);
  }
}

static void *fake_main(void *arg) {
  fake *fk = arg;
  int fd = accept(fk->lfd, NULL, NULL);
  lm_frame_reader rd;
  lm_frame_reader_init(&rd, NULL);
  reqs r = {0};
  read_reqs(fd, &rd, &r, 1);
  Lmw__HelloReply hr = LMW__HELLO_REPLY__INIT;
  hr.protocol_version = LM_PROTOCOL_VERSION;
  hr.session_id = 42;
  hr.software = "fake";
  send_msg(fd, LM_MSG_HELLO_REPLY, r.rid[0], &hr.base, NULL, 0);
  r.n = 0;
  Lmw__Pong pong = LMW__PONG__INIT;
  if (fk->sc == SCRIPT_REVERSE) {
    read_reqs(fd, &rd, &r, fk->nreq);
    for (int i = r.n - 1; i >= 0; i--) {
      pong.nonce = r.rid[i];
      send_msg(fd, LM_MSG_PONG, r.rid[i], &pong.base, NULL, 0);
    }
  } else if (fk->sc == SCRIPT_PAYLOAD) {
    read_reqs(fd, &rd, &r, 2);
    uint8_t *p = malloc(fk->payload_len);
    for (size_t i = 0; i < fk->payload_len; i++) p[i] = (uint8_t)(i * 31 + 7);
    for (int i = 0; i < r.n; i++) send_msg(fd, LM_MSG_PONG, r.rid[i], &pong.base, p, fk->payload_len);
    free(p);
  } else if (fk->sc == SCRIPT_SILENT_THEN_REPLY) {
    read_reqs(fd, &rd, &r, 1);
    usleep((useconds_t)fk->release_ms * 1000);
    send_msg(fd, LM_MSG_PONG, r.rid[0], &pong.base, NULL, 0);
    read_reqs(fd, &rd, &r, 2);
  } else { /* SCRIPT_DROP: explain, then hang up with requests in flight */
    read_reqs(fd, &rd, &r, 3);
    Lmw__ErrorReply er = LMW__ERROR_REPLY__INIT;
    er.code = LOOM_PERMISSION;
    er.message = "go away";
    send_msg(fd, LM_MSG_ERROR, 0, &er.base, NULL, 0);
  }
  uint8_t b[256];
  shutdown(fd, SHUT_WR);
  while (recv(fd, b, sizeof b, 0) > 0) {} /* until the client closes */
  close(fd);
  lm_frame_reader_free(&rd);
  return NULL;
}

static void fake_start(fake *fk) {
  fk->lfd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  assert_int_equal(bind(fk->lfd, (struct sockaddr *)&a, sizeof a), 0);
  socklen_t sl = sizeof a;
  getsockname(fk->lfd, (struct sockaddr *)&a, &sl);
  fk->port = ntohs(a.sin_port);
  listen(fk->lfd, 4);
  pthread_create(&fk->th, NULL, fake_main, fk);
}

static lm_cconn *fake_connect(fake *fk) {
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", fk->port);
  lm_cconn_options o = {.timeout_ms = 10000, .name = "unit"};
  lm_cconn *c;
  lm_err e;
  int rc = lm_cconn_open(addr, &o, &c, &e);
  if (rc < 0) fail_msg("connect: %s", e.msg);
  assert_int_equal(lm_cconn_session_id(c), 42);
  assert_string_equal(lm_cconn_server_software(c), "fake");
  return c;
}

static void fake_finish(fake *fk, lm_cconn *c) {
  lm_cconn_close(c);
  pthread_join(fk->th, NULL);
  close(fk->lfd);
}

/* ---- tests ---- */

static void test_pipelined_out_of_order(void **state) {
  fake fk = {.sc = SCRIPT_REVERSE, .nreq = 100};
  fake_start(&fk);
  lm_cconn *c = fake_connect(&fk);
  lm_call *calls[100];
  Lmw__Ping ping = LMW__PING__INIT;
  for (int i = 0; i < 100; i++) assert_int_equal(lm_cconn_start(c, LM_MSG_PING, &ping.base, NULL, 0, NULL, 0, &calls[i], NULL), 0);
  for (int i = 0; i < 100; i++) { /* answered last-first; each call gets its own reply */
    lm_err e;
    assert_int_equal(lm_call_wait(calls[i], 10000, NULL, NULL, &e), 0);
    lm_reply r;
    assert_int_equal(lm_call_take_reply(calls[i], &r, NULL), 0);
    assert_int_equal(r.type, LM_MSG_PONG);
    uint64_t nonce = ((Lmw__Pong *)r.msg)->nonce;
    lm_reply_free(&r);
    assert_int_equal(lm_call_take_reply(calls[i], &r, &e), LOOM_INTERNAL); /* only once */
    lm_call_release(calls[i]);
    assert_true(nonce != 0);
  }
  fake_finish(&fk, c);
}

static void test_payload_into_caller_buffer(void **state) {
  fake fk = {.sc = SCRIPT_PAYLOAD, .payload_len = 300000};
  fake_start(&fk);
  lm_cconn *c = fake_connect(&fk);
  Lmw__Ping ping = LMW__PING__INIT;
  uint8_t *dst = calloc(1, 300000);
  lm_call *a, *b;
  assert_int_equal(lm_cconn_start(c, LM_MSG_PING, &ping.base, NULL, 0, dst, 300000, &a, NULL), 0);
  assert_int_equal(lm_cconn_start(c, LM_MSG_PING, &ping.base, NULL, 0, NULL, 0, &b, NULL), 0);
  assert_int_equal(lm_call_wait(a, 10000, NULL, NULL, NULL), 0);
  lm_reply r;
  assert_int_equal(lm_call_take_reply(a, &r, NULL), 0);
  assert_true(r.payload_external);
  assert_ptr_equal(r.payload, dst); /* received in place, no copy */
  assert_int_equal(r.payload_len, 300000);
  for (size_t i = 0; i < 300000; i += 997) assert_int_equal(dst[i], (uint8_t)(i * 31 + 7));
  lm_reply_free(&r); /* does not free the caller's buffer */
  lm_call_release(a);
  /* without a buffer, the library allocates one */
  assert_int_equal(lm_call_wait(b, 10000, NULL, NULL, NULL), 0);
  assert_int_equal(lm_call_take_reply(b, &r, NULL), 0);
  assert_false(r.payload_external);
  assert_int_equal(r.payload_len, 300000);
  assert_memory_equal(r.payload, dst, 300000);
  lm_reply_free(&r);
  lm_call_release(b);
  free(dst);
  fake_finish(&fk, c);
}

static int g_polls;
static int stop_after_5(void *arg) { return ++g_polls >= 5; }

static void test_timeout_interrupt_release(void **state) {
  fake fk = {.sc = SCRIPT_SILENT_THEN_REPLY, .release_ms = 700};
  fake_start(&fk);
  lm_cconn *c = fake_connect(&fk);
  Lmw__Ping ping = LMW__PING__INIT;
  lm_call *a;
  assert_int_equal(lm_cconn_start(c, LM_MSG_PING, &ping.base, NULL, 0, NULL, 0, &a, NULL), 0);
  lm_err e;
  uint64_t t0 = lm_now_ms();
  assert_int_equal(lm_call_wait(a, 100, NULL, NULL, &e), LOOM_TIMEOUT);
  assert_true(lm_now_ms() - t0 >= 100);
  g_polls = 0;
  assert_int_equal(lm_call_wait(a, -1, stop_after_5, NULL, &e), LOOM_CANCELLED);
  assert_true(g_polls >= 5);
  assert_false(lm_call_done(a));
  assert_int_equal(lm_call_wait(a, 10000, NULL, NULL, &e), 0); /* still pending, so it completes */
  lm_call_release(a);
  /* a call released while pending: its reply (none will come) must not leak or crash */
  lm_call *b;
  assert_int_equal(lm_cconn_start(c, LM_MSG_PING, &ping.base, NULL, 0, NULL, 0, &b, NULL), 0);
  lm_call_release(b);
  fake_finish(&fk, c);
}

static void test_broken_connection_fails_pending_calls(void **state) {
  fake fk = {.sc = SCRIPT_DROP};
  fake_start(&fk);
  lm_cconn *c = fake_connect(&fk);
  Lmw__Ping ping = LMW__PING__INIT;
  lm_call *calls[3];
  for (int i = 0; i < 3; i++) assert_int_equal(lm_cconn_start(c, LM_MSG_PING, &ping.base, NULL, 0, NULL, 0, &calls[i], NULL), 0);
  for (int i = 0; i < 3; i++) {
    lm_err e;
    assert_int_equal(lm_call_wait(calls[i], 10000, NULL, NULL, &e), LOOM_PERMISSION); /* the controller's reason */
    assert_string_equal(e.msg, "go away");
    assert_true(lm_call_done(calls[i]));
    lm_call_release(calls[i]);
  }
  lm_err e;
  assert_false(lm_cconn_ok(c, &e));
  lm_call *d;
  assert_int_equal(lm_cconn_start(c, LM_MSG_PING, &ping.base, NULL, 0, NULL, 0, &d, &e), LOOM_PERMISSION);
  fake_finish(&fk, c);
}

static void test_connect_refused(void **state) {
  lm_cconn *c;
  lm_err e;
  lm_cconn_options o = {.timeout_ms = 5000};
  assert_int_equal(lm_cconn_open("127.0.0.1:1", &o, &c, &e), LOOM_CONNECT);
  assert_non_null(strstr(e.msg, "cannot connect to 127.0.0.1:1"));
  assert_int_equal(lm_cconn_open("no-port", &o, &c, &e), LOOM_INVALID_ARGUMENT);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_pipelined_out_of_order), cmocka_unit_test(test_payload_into_caller_buffer),
      cmocka_unit_test(test_timeout_interrupt_release), cmocka_unit_test(test_broken_connection_fails_pending_calls),
      cmocka_unit_test(test_connect_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
