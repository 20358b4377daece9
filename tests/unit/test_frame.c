/* Unit tests for src/net/frame: the header codec, limits, and the incremental reader (byte by
 * byte, pipelined frames, zero-copy payload windows, sinks, bounded growth, failure). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "net/frame.h"

typedef struct got {
  int n;
  lm_frame_header h[16];
  char meta[16][64];
  size_t plen[16];
  uint8_t payload[16][256];
  int stop_after; /* return 1 after this many frames (0: never) */
} got;

static int collect(void *arg, lm_frame *f, lm_err *err) {
  got *g = arg;
  int i = g->n++;
  g->h[i] = f->h;
  memcpy(g->meta[i], f->meta, f->h.meta_len < 63 ? f->h.meta_len : 63);
  assert_int_equal(f->meta[f->h.meta_len], 0); /* NUL-terminated */
  g->plen[i] = (size_t)f->h.payload_len;
  if (f->h.payload_len) memcpy(g->payload[i], f->payload, f->h.payload_len < 256 ? (size_t)f->h.payload_len : 256);
  return g->stop_after && g->n >= g->stop_after ? 1 : 0;
}

/* Appends one frame (header, meta string, payload bytes) to buf; returns its length. */
static size_t put_frame(uint8_t *buf, uint16_t type, uint64_t rid, const char *meta, const void *pl, size_t plen) {
  lm_frame_header h = {.type = type, .meta_len = (uint32_t)strlen(meta), .payload_len = plen, .request_id = rid};
  lm_frame_header_encode(&h, buf);
  memcpy(buf + LM_FRAME_HEADER_SIZE, meta, h.meta_len);
  if (plen) memcpy(buf + LM_FRAME_HEADER_SIZE + h.meta_len, pl, plen);
  return LM_FRAME_HEADER_SIZE + h.meta_len + plen;
}

static void test_header_roundtrip(void **state) {
  uint8_t b[LM_FRAME_HEADER_SIZE];
  lm_frame_header h = {.type = 7, .meta_len = 123, .payload_len = 0x0102030405ull, .request_id = 0xfeedfacecafebeefull};
  lm_frame_header_encode(&h, b);
  assert_memory_equal(b, "LOOM", 4); /* the magic reads as text */
  assert_int_equal(b[4], 7);
  lm_frame_header d;
  lm_frame_limits lim = {.max_meta = 1000, .max_payload = 1ull << 40};
  assert_int_equal(lm_frame_header_decode(b, &lim, &d, NULL), 0);
  assert_int_equal(d.type, 7);
  assert_int_equal(d.meta_len, 123);
  assert_true(d.payload_len == 0x0102030405ull);
  assert_true(d.request_id == 0xfeedfacecafebeefull);
}

static void test_header_rejects(void **state) {
  uint8_t b[LM_FRAME_HEADER_SIZE];
  lm_frame_header h = {.type = 2, .meta_len = 10}, d;
  lm_frame_limits lim = {.max_meta = 100, .max_payload = 1000};
  lm_err e;

  lm_frame_header_encode(&h, b);
  b[0] = 'X';
  assert_int_equal(lm_frame_header_decode(b, &lim, &d, &e), LOOM_PROTOCOL);
  assert_non_null(strstr(e.msg, "magic"));

  h.type = 0;
  lm_frame_header_encode(&h, b);
  assert_int_equal(lm_frame_header_decode(b, &lim, &d, &e), LOOM_PROTOCOL);

  h.type = 2;
  h.flags = 1;
  lm_frame_header_encode(&h, b);
  assert_int_equal(lm_frame_header_decode(b, &lim, &d, &e), LOOM_PROTOCOL);
  h.flags = 0;
  lm_frame_header_encode(&h, b);
  b[13] = 1; /* reserved */
  assert_int_equal(lm_frame_header_decode(b, &lim, &d, &e), LOOM_PROTOCOL);

  h.meta_len = 100; /* exactly the limit is fine, one more is not */
  lm_frame_header_encode(&h, b);
  assert_int_equal(lm_frame_header_decode(b, &lim, &d, &e), 0);
  h.meta_len = 101;
  lm_frame_header_encode(&h, b);
  assert_int_equal(lm_frame_header_decode(b, &lim, &d, &e), LOOM_PROTOCOL);
  assert_non_null(strstr(e.msg, "exceeds the limit"));

  h.meta_len = 0;
  h.payload_len = 1001;
  lm_frame_header_encode(&h, b);
  assert_int_equal(lm_frame_header_decode(b, &lim, &d, &e), LOOM_PROTOCOL);
  h.payload_len = UINT64_MAX; /* above the hard ceiling even with no limits */
  lm_frame_header_encode(&h, b);
  assert_int_equal(lm_frame_header_decode(b, NULL, &d, &e), LOOM_PROTOCOL);
  h.payload_len = 0;
  h.meta_len = UINT32_MAX;
  lm_frame_header_encode(&h, b);
  assert_int_equal(lm_frame_header_decode(b, NULL, &d, &e), LOOM_PROTOCOL);
}

static void test_reader_byte_by_byte(void **state) {
  uint8_t buf[512];
  size_t n = 0;
  n += put_frame(buf + n, 2, 1, "hello", NULL, 0);
  n += put_frame(buf + n, 7, 2, "", "abc", 3);
  n += put_frame(buf + n, 8, 3, "meta", "payload!", 8);
  n += put_frame(buf + n, 9, 0, "", NULL, 0);
  lm_frame_reader r;
  lm_frame_reader_init(&r, NULL);
  got g = {0};
  for (size_t i = 0; i < n; i++) {
    assert_int_equal(lm_frame_reader_feed(&r, buf + i, 1, collect, &g, NULL), 0);
    if (i + 1 < n) assert_true(lm_frame_reader_mid_frame(&r) || g.n > 0);
  }
  assert_false(lm_frame_reader_mid_frame(&r));
  assert_int_equal(g.n, 4);
  assert_int_equal(r.frames, 4);
  assert_string_equal(g.meta[0], "hello");
  assert_int_equal(g.h[0].request_id, 1);
  assert_int_equal(g.plen[1], 3);
  assert_memory_equal(g.payload[1], "abc", 3);
  assert_string_equal(g.meta[2], "meta");
  assert_memory_equal(g.payload[2], "payload!", 8);
  assert_int_equal(g.h[3].type, 9);
  lm_frame_reader_free(&r);

  /* the same stream in one piece */
  lm_frame_reader_init(&r, NULL);
  memset(&g, 0, sizeof g);
  assert_int_equal(lm_frame_reader_feed(&r, buf, n, collect, &g, NULL), 0);
  assert_int_equal(g.n, 4);
  lm_frame_reader_free(&r);
}

static void test_reader_stop_and_fail(void **state) {
  uint8_t buf[256];
  size_t n = 0;
  n += put_frame(buf + n, 2, 1, "a", NULL, 0);
  n += put_frame(buf + n, 2, 2, "b", NULL, 0);
  lm_frame_reader r;
  lm_frame_reader_init(&r, NULL);
  got g = {.stop_after = 1};
  assert_int_equal(lm_frame_reader_feed(&r, buf, n, collect, &g, NULL), 1); /* stopped after the first */
  assert_int_equal(g.n, 1);
  lm_frame_reader_free(&r);

  /* garbage: fails, then refuses more input */
  lm_frame_reader_init(&r, NULL);
  memset(&g, 0, sizeof g);
  lm_err e;
  uint8_t junk[64];
  memset(junk, 0x5a, sizeof junk);
  assert_int_equal(lm_frame_reader_feed(&r, junk, sizeof junk, collect, &g, &e), LOOM_PROTOCOL);
  assert_true(r.failed);
  assert_int_equal(lm_frame_reader_feed(&r, buf, n, collect, &g, &e), LOOM_PROTOCOL);
  assert_int_equal(g.n, 0);
  lm_frame_reader_free(&r);
}

static void test_reader_bounded_growth(void **state) {
  /* A header announcing 16 MiB of metadata, then 10 bytes: the reader must not allocate 16 MiB. */
  lm_frame_limits lim = {.max_meta = LM_FRAME_META_HARD_MAX, .max_payload = 0};
  lm_frame_reader r;
  lm_frame_reader_init(&r, &lim);
  uint8_t b[LM_FRAME_HEADER_SIZE + 10];
  lm_frame_header h = {.type = 2, .meta_len = LM_FRAME_META_HARD_MAX};
  lm_frame_header_encode(&h, b);
  memset(b + LM_FRAME_HEADER_SIZE, 'x', 10);
  got g = {0};
  assert_int_equal(lm_frame_reader_feed(&r, b, sizeof b, collect, &g, NULL), 0);
  assert_true(lm_frame_reader_mid_frame(&r));
  assert_true(r.meta_cap <= (64u << 10));
  /* 100 KiB more: the buffer grows by doubling with what arrived, not to the announced size */
  uint8_t *more = calloc(100 << 10, 1);
  assert_int_equal(lm_frame_reader_feed(&r, more, 100 << 10, collect, &g, NULL), 0);
  assert_true(r.meta_cap <= (256u << 10));
  free(more);
  lm_frame_reader_free(&r);

  /* a payload over the reader's limit is refused at the header */
  lm_frame_reader_init(&r, &lim);
  h.meta_len = 0;
  h.payload_len = 1;
  lm_frame_header_encode(&h, b);
  lm_err e;
  assert_int_equal(lm_frame_reader_feed(&r, b, LM_FRAME_HEADER_SIZE, collect, &g, &e), LOOM_PROTOCOL);
  lm_frame_reader_free(&r);
}

static void test_reader_window(void **state) {
  /* A 200 KiB payload received through windows (the zero-copy path), in odd-sized pieces. */
  size_t plen = 200 << 10;
  uint8_t *src = malloc(LM_FRAME_HEADER_SIZE + 4 + plen);
  for (size_t i = 0; i < plen; i++) src[LM_FRAME_HEADER_SIZE + 4 + i] = (uint8_t)(i * 7);
  lm_frame_header h = {.type = 8, .meta_len = 4, .payload_len = plen, .request_id = 5};
  lm_frame_header_encode(&h, src);
  memcpy(src + LM_FRAME_HEADER_SIZE, "mmmm", 4);
  lm_frame_reader r;
  lm_frame_reader_init(&r, NULL);
  got g = {0};
  void *w;
  size_t wn;
  assert_int_equal(lm_frame_reader_window(&r, &w, &wn, NULL), 0); /* not in a payload yet */
  assert_int_equal(lm_frame_reader_feed(&r, src, LM_FRAME_HEADER_SIZE + 4 + 1000, collect, &g, NULL), 0);
  size_t off = LM_FRAME_HEADER_SIZE + 4 + 1000;
  while (g.n == 0) {
    assert_int_equal(lm_frame_reader_window(&r, &w, &wn, NULL), 1);
    size_t take = wn < 7777 ? wn : 7777;
    memcpy(w, src + off, take);
    off += take;
    assert_int_equal(lm_frame_reader_advance(&r, take, collect, &g, NULL), 0);
  }
  assert_int_equal(off, LM_FRAME_HEADER_SIZE + 4 + plen);
  assert_int_equal(g.plen[0], plen);
  assert_memory_equal(g.payload[0], src + LM_FRAME_HEADER_SIZE + 4, 256);
  /* advancing past the window is an internal error, not a crash */
  lm_err e;
  assert_int_equal(lm_frame_reader_advance(&r, 1, collect, &g, &e), LOOM_INTERNAL);
  lm_frame_reader_free(&r);
  free(src);
}

typedef struct sinkctx {
  uint8_t dst[64];
  int calls;
  int frames;
  bool external;
  void *payload;
} sinkctx;

static int to_dst(void *arg, const lm_frame *f, void **dst, lm_err *err) {
  sinkctx *s = arg;
  s->calls++;
  if (f->h.payload_len <= sizeof s->dst) *dst = s->dst;
  return 0;
}

static int sink_frame(void *arg, lm_frame *f, lm_err *err) {
  sinkctx *s = arg;
  s->frames++;
  s->external = f->payload_external;
  s->payload = f->payload;
  return 0;
}

static void test_reader_sink(void **state) {
  uint8_t buf[256];
  size_t n = put_frame(buf, 8, 9, "x", "0123456789", 10);
  sinkctx s = {0};
  lm_frame_reader r;
  lm_frame_reader_init(&r, NULL);
  r.sink = to_dst;
  r.sink_arg = &s;
  assert_int_equal(lm_frame_reader_feed(&r, buf, n, sink_frame, &s, NULL), 0);
  assert_int_equal(s.calls, 1);
  assert_int_equal(s.frames, 1);
  assert_true(s.external);
  assert_ptr_equal(s.payload, s.dst);
  assert_memory_equal(s.dst, "0123456789", 10);
  lm_frame_reader_free(&r);
}

static int steal(void *arg, lm_frame *f, lm_err *err) {
  *(void **)arg = lm_frame_take_payload(f);
  return 0;
}

static void test_take_payload(void **state) {
  uint8_t buf[128];
  size_t n = put_frame(buf, 8, 1, "", "xyz", 3);
  lm_frame_reader r;
  lm_frame_reader_init(&r, NULL);
  void *p = NULL;
  assert_int_equal(lm_frame_reader_feed(&r, buf, n, steal, &p, NULL), 0);
  assert_non_null(p);
  assert_memory_equal(p, "xyz", 3);
  free(p); /* ours now; the reader must not free it too (ASan would tell) */
  lm_frame_reader_free(&r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_header_roundtrip), cmocka_unit_test(test_header_rejects),
      cmocka_unit_test(test_reader_byte_by_byte), cmocka_unit_test(test_reader_stop_and_fail),
      cmocka_unit_test(test_reader_bounded_growth), cmocka_unit_test(test_reader_window),
      cmocka_unit_test(test_reader_sink), cmocka_unit_test(test_take_payload),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
