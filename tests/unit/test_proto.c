/* Unit tests for the message codec (src/net/msg) and addresses (src/net/sock): every message
 * type round-trips through a frame, mismatches and garbage are errors, ERROR frames become
 * statuses, and random bytes never crash the reader or the decoder. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "net/msg.h"
#include "net/sock.h"

/* Encodes m as a frame and reads it back through a reader; returns the decoded message. */
typedef struct one {
  lm_frame_header h;
  ProtobufCMessage *m;
  int rc;
  lm_err err;
} one;

static int decode_cb(void *arg, lm_frame *f, lm_err *err) {
  one *o = arg;
  o->h = f->h;
  o->rc = lm_msg_decode(f, &o->m, &o->err);
  return 0;
}

static ProtobufCMessage *roundtrip(unsigned type, uint64_t rid, const ProtobufCMessage *m) {
  uint8_t *buf;
  size_t len;
  lm_err e;
  assert_int_equal(lm_msg_encode(type, rid, m, 0, &buf, &len, &e), 0);
  lm_frame_reader r;
  lm_frame_reader_init(&r, NULL);
  one o = {0};
  assert_int_equal(lm_frame_reader_feed(&r, buf, len, decode_cb, &o, NULL), 0);
  lm_frame_reader_free(&r);
  free(buf);
  assert_int_equal(o.rc, 0);
  assert_int_equal(o.h.type, type);
  assert_true(o.h.request_id == rid);
  assert_ptr_equal(o.m->descriptor, lm_msg_descriptor(type));
  return o.m;
}

static void test_hello_roundtrip(void **state) {
  Lmw__Hello h = LMW__HELLO__INIT;
  h.protocol_version = LM_PROTOCOL_VERSION;
  h.role = LMW__ROLE__ROLE_CLIENT;
  h.auth_token.data = (uint8_t *)"tok";
  h.auth_token.len = 3;
  h.host = "somehost";
  h.pid = 4242;
  h.name = "tester";
  Lmw__Hello *d = (Lmw__Hello *)roundtrip(LM_MSG_HELLO, 77, &h.base);
  assert_int_equal(d->protocol_version, LM_PROTOCOL_VERSION);
  assert_int_equal(d->role, LMW__ROLE__ROLE_CLIENT);
  assert_int_equal(d->auth_token.len, 3);
  assert_string_equal(d->host, "somehost");
  assert_int_equal(d->pid, 4242);
  assert_string_equal(d->name, "tester");
  lm_msg_free(&d->base);
}

static void test_register_roundtrip(void **state) {
  Lmw__DeviceSpec specs[3];
  Lmw__DeviceSpec *ptrs[3];
  for (int i = 0; i < 3; i++) {
    lmw__device_spec__init(&specs[i]);
    specs[i].local_index = (uint32_t)i;
    specs[i].kind = "cpu";
    specs[i].memory_capacity = (uint64_t)(i + 1) << 30;
    ptrs[i] = &specs[i];
  }
  Lmw__RegisterWorker m = LMW__REGISTER_WORKER__INIT;
  m.host = "h";
  m.pid = 9;
  m.slice = "slice-1";
  m.n_devices = 3;
  m.devices = ptrs;
  m.dataplane_address.data = (uint8_t *)"\x00\x01\x02ucx";
  m.dataplane_address.len = 6;
  Lmw__RegisterWorker *d = (Lmw__RegisterWorker *)roundtrip(LM_MSG_REGISTER_WORKER, 2, &m.base);
  assert_int_equal(d->n_devices, 3);
  assert_true(d->devices[2]->memory_capacity == (3ull << 30));
  assert_string_equal(d->slice, "slice-1");
  assert_int_equal(d->dataplane_address.len, 6);
  assert_memory_equal(d->dataplane_address.data, "\x00\x01\x02ucx", 6);
  lm_msg_free(&d->base);
}

static void test_every_type_has_a_message(void **state) {
  /* Every request/reply type in the table round-trips with default contents. */
  for (unsigned t = 1; t <= LM_MSG_PONG; t++) {
    const ProtobufCMessageDescriptor *d = lm_msg_descriptor(t);
    assert_non_null(d);
    assert_string_not_equal(lm_msg_name(t), "unknown");
    ProtobufCMessage *m = calloc(1, d->sizeof_message);
    d->message_init(m);
    ProtobufCMessage *back = roundtrip(t, t, m);
    lm_msg_free(back);
    free(m);
  }
  assert_null(lm_msg_descriptor(0));
  assert_null(lm_msg_descriptor(9999));
  assert_string_equal(lm_msg_name(9999), "unknown");
}

static void test_encode_mismatch(void **state) {
  Lmw__Ping p = LMW__PING__INIT;
  uint8_t *buf = (uint8_t *)1;
  size_t len = 1;
  lm_err e;
  assert_int_equal(lm_msg_encode(LM_MSG_HELLO, 1, &p.base, 0, &buf, &len, &e), LOOM_INTERNAL);
  assert_null(buf);
  assert_int_equal(lm_msg_encode(9999, 1, &p.base, 0, &buf, &len, &e), LOOM_INTERNAL);
}

static void test_decode_errors(void **state) {
  lm_frame f = {0};
  ProtobufCMessage *m;
  lm_err e;
  uint8_t junk[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0};
  f.h.type = LM_MSG_HELLO;
  f.h.meta_len = sizeof junk - 1;
  f.meta = junk;
  assert_int_equal(lm_msg_decode(&f, &m, &e), LOOM_PROTOCOL);
  assert_null(m);
  assert_non_null(strstr(e.msg, "HELLO"));
  f.h.type = 999;
  assert_int_equal(lm_msg_decode(&f, &m, &e), LOOM_UNSUPPORTED);
  /* a length-delimited field running past the end */
  uint8_t trunc[] = {0x2a, 0x10, 'a', 'b', 0};
  f.h.type = LM_MSG_HELLO;
  f.meta = trunc;
  f.h.meta_len = 4;
  assert_int_equal(lm_msg_decode(&f, &m, &e), LOOM_PROTOCOL);
}

static void test_error_status(void **state) {
  Lmw__ErrorReply er = LMW__ERROR_REPLY__INIT;
  er.code = LOOM_VERSION_MISMATCH;
  er.message = "version 9\nis\tbad";
  uint8_t *buf;
  size_t len;
  assert_int_equal(lm_msg_encode(LM_MSG_ERROR, 3, &er.base, 0, &buf, &len, NULL), 0);
  lm_frame f = {.meta = buf + LM_FRAME_HEADER_SIZE};
  assert_int_equal(lm_frame_header_decode(buf, NULL, &f.h, NULL), 0);
  lm_err e;
  assert_int_equal(lm_msg_error_status(&f, &e), LOOM_VERSION_MISMATCH);
  assert_string_equal(e.msg, "version 9 is bad"); /* kept on one line */
  free(buf);
  er.code = 5; /* a peer claiming an error with a non-negative code still gets an error */
  er.message = "";
  assert_int_equal(lm_msg_encode(LM_MSG_ERROR, 3, &er.base, 0, &buf, &len, NULL), 0);
  f.meta = buf + LM_FRAME_HEADER_SIZE;
  lm_frame_header_decode(buf, NULL, &f.h, NULL);
  assert_int_equal(lm_msg_error_status(&f, &e), LOOM_INTERNAL);
  free(buf);
}

static void test_names(void **state) {
  assert_true(lm_msg_name_ok("host-1.example", 255));
  assert_false(lm_msg_name_ok("", 255));
  assert_false(lm_msg_name_ok("has space", 255));
  assert_false(lm_msg_name_ok("tab\t", 255));
  assert_false(lm_msg_name_ok("\x7f", 255));
  assert_false(lm_msg_name_ok("abcdef", 5));
  assert_false(lm_msg_name_ok(NULL, 5));
}

static void test_addr_split(void **state) {
  char host[256];
  uint16_t port;
  assert_int_equal(lm_addr_split("127.0.0.1:29100", host, sizeof host, &port, NULL), 0);
  assert_string_equal(host, "127.0.0.1");
  assert_int_equal(port, 29100);
  assert_int_equal(lm_addr_split("[::1]:0", host, sizeof host, &port, NULL), 0);
  assert_string_equal(host, "::1");
  assert_int_equal(port, 0);
  assert_int_equal(lm_addr_split("localhost:65535", host, sizeof host, &port, NULL), 0);
  lm_err e;
  const char *bad[] = {"", "noport", "host:", ":80", "h:65536", "h:12a", "::1:80", "[::1]80", "h:99999999999"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    assert_int_equal(lm_addr_split(bad[i], host, sizeof host, &port, &e), LOOM_INVALID_ARGUMENT);
  char small[4];
  assert_int_equal(lm_addr_split("longhost:1", small, sizeof small, &port, &e), LOOM_INVALID_ARGUMENT);
}

static int decode_any(void *arg, lm_frame *f, lm_err *err) {
  ProtobufCMessage *m;
  lm_err e;
  if (lm_msg_decode(f, &m, &e) == 0) lm_msg_free(m);
  if (f->h.type == LM_MSG_ERROR) lm_msg_error_status(f, &e);
  (*(int *)arg)++;
  return 0;
}

static void test_random_bytes(void **state) {
  /* Random streams, and valid headers followed by random metadata, never crash or leak. */
  srand(12345);
  lm_frame_limits lim = {.max_meta = 4096, .max_payload = 4096};
  int frames = 0;
  for (int iter = 0; iter < 3000; iter++) {
    uint8_t buf[600];
    size_t n = (size_t)(rand() % (int)sizeof buf);
    for (size_t i = 0; i < n; i++) buf[i] = (uint8_t)rand();
    if (iter % 2 && n >= LM_FRAME_HEADER_SIZE) { /* a plausible header */
      lm_frame_header h = {.type = (uint16_t)(1 + rand() % 14), .meta_len = (uint32_t)(n - LM_FRAME_HEADER_SIZE)};
      lm_frame_header_encode(&h, buf);
    }
    lm_frame_reader r;
    lm_frame_reader_init(&r, &lim);
    size_t off = 0;
    while (off < n) { /* in random pieces */
      size_t k = 1 + (size_t)rand() % 64;
      if (k > n - off) k = n - off;
      if (lm_frame_reader_feed(&r, buf + off, k, decode_any, &frames, NULL) < 0) break;
      off += k;
    }
    lm_frame_reader_free(&r);
  }
  assert_true(frames > 100); /* the plausible headers did produce frames to decode */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_hello_roundtrip),  cmocka_unit_test(test_register_roundtrip),
      cmocka_unit_test(test_every_type_has_a_message), cmocka_unit_test(test_encode_mismatch),
      cmocka_unit_test(test_decode_errors),    cmocka_unit_test(test_error_status),
      cmocka_unit_test(test_names),            cmocka_unit_test(test_addr_split),
      cmocka_unit_test(test_random_bytes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
