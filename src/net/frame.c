/* Frame header codec and the incremental frame reader (see frame.h for the layout).
 * Buffers grow with what has actually arrived, never with what a header merely claims, so a
 * peer that announces 16 MiB and sends 10 bytes costs at most one growth step. */
#include <stdlib.h>
#include <string.h>
#include "net/frame.h"

enum { PHASE_HEADER = 0, PHASE_META = 1, PHASE_PAYLOAD = 2 };
#define GROW_MIN ((size_t)64 << 10) /* first allocation and smallest growth step */

static void put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static void put32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static void put64(uint8_t *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static uint16_t get16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t get32(const uint8_t *p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}
static uint64_t get64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

void lm_frame_header_encode(const lm_frame_header *h, uint8_t out[LM_FRAME_HEADER_SIZE]) {
  put32(out + 0, LM_FRAME_MAGIC);
  put16(out + 4, h->type);
  put16(out + 6, h->flags);
  put32(out + 8, h->meta_len);
  put32(out + 12, 0);
  put64(out + 16, h->payload_len);
  put64(out + 24, h->request_id);
}

int lm_frame_header_decode(const uint8_t in[LM_FRAME_HEADER_SIZE], const lm_frame_limits *lim, lm_frame_header *h,
                           lm_err *err) {
  uint32_t magic = get32(in);
  if (magic != LM_FRAME_MAGIC)
    return lm_errf(err, LOOM_PROTOCOL, "bad frame magic 0x%08x (expected 0x%08x): not a Loom peer", magic,
                   LM_FRAME_MAGIC);
  h->type = get16(in + 4);
  h->flags = get16(in + 6);
  h->meta_len = get32(in + 8);
  uint32_t reserved = get32(in + 12);
  h->payload_len = get64(in + 16);
  h->request_id = get64(in + 24);
  if (h->type == 0) return lm_errf(err, LOOM_PROTOCOL, "frame type 0 is invalid");
  if (h->flags != 0 || reserved != 0)
    return lm_errf(err, LOOM_PROTOCOL, "frame uses reserved header bits (flags 0x%04x, reserved 0x%08x)", h->flags,
                   reserved);
  uint32_t max_meta = LM_FRAME_META_HARD_MAX;
  uint64_t max_payload = LM_FRAME_PAYLOAD_HARD_MAX;
  if (lim && lim->max_meta < max_meta) max_meta = lim->max_meta;
  if (lim && lim->max_payload < max_payload) max_payload = lim->max_payload;
  if (h->meta_len > max_meta)
    return lm_errf(err, LOOM_PROTOCOL, "frame metadata of %u bytes exceeds the limit of %u bytes", h->meta_len,
                   max_meta);
  if (h->payload_len > max_payload)
    return lm_errf(err, LOOM_PROTOCOL, "frame payload of %llu bytes exceeds the limit of %llu bytes",
                   (unsigned long long)h->payload_len, (unsigned long long)max_payload);
  return 0;
}

void *lm_frame_take_payload(lm_frame *f) {
  void *p = f->payload;
  f->payload = NULL;
  return p;
}

void lm_frame_reader_init(lm_frame_reader *r, const lm_frame_limits *lim) {
  memset(r, 0, sizeof *r);
  r->lim.max_meta = lim ? lim->max_meta : LM_FRAME_META_DEFAULT_MAX;
  r->lim.max_payload = lim ? lim->max_payload : LM_FRAME_PAYLOAD_DEFAULT_MAX;
  r->phase = PHASE_HEADER;
}

static void drop_current(lm_frame_reader *r) {
  free(r->cur.meta);
  if (!r->cur.payload_external) free(r->cur.payload);
  memset(&r->cur, 0, sizeof r->cur);
  r->meta_got = r->meta_cap = 0;
  r->payload_got = r->payload_cap = 0;
  r->hdr_got = 0;
  r->phase = PHASE_HEADER;
}

void lm_frame_reader_free(lm_frame_reader *r) { drop_current(r); }

bool lm_frame_reader_mid_frame(const lm_frame_reader *r) { return r->phase != PHASE_HEADER || r->hdr_got > 0; }

static int fail(lm_frame_reader *r, int rc) {
  r->failed = true;
  drop_current(r);
  return rc;
}

/* Delivers the completed current frame and resets for the next one. */
static int deliver(lm_frame_reader *r, lm_frame_fn on_frame, void *arg, lm_err *err) {
  r->frames++;
  int rc = on_frame ? on_frame(arg, &r->cur, err) : 0;
  drop_current(r);
  if (rc < 0) r->failed = true;
  return rc;
}

/* Metadata complete: deliver, or move on to the payload. */
static int meta_done(lm_frame_reader *r, lm_frame_fn on_frame, void *arg, lm_err *err) {
  r->cur.meta[r->cur.h.meta_len] = 0;
  if (r->cur.h.payload_len == 0) return deliver(r, on_frame, arg, err);
  if (r->cur.h.payload_len > SIZE_MAX) /* only on 32-bit hosts */
    return fail(r, lm_errf(err, LOOM_PROTOCOL, "frame payload does not fit in memory"));
  r->phase = PHASE_PAYLOAD;
  if (r->sink) {
    void *dst = NULL;
    int rc = r->sink(r->sink_arg, &r->cur, &dst, err);
    if (rc < 0) return fail(r, rc);
    if (dst) {
      r->cur.payload = dst;
      r->cur.payload_external = true;
      r->payload_cap = r->cur.h.payload_len;
    }
  }
  return 0;
}

/* Header complete: check it, allocate the first metadata step. */
static int header_done(lm_frame_reader *r, lm_frame_fn on_frame, void *arg, lm_err *err) {
  lm_frame_header h;
  int rc = lm_frame_header_decode(r->hdr, &r->lim, &h, err);
  if (rc < 0) return fail(r, rc);
  r->cur.h = h;
  r->hdr_got = 0;
  r->phase = PHASE_META;
  size_t want = (size_t)h.meta_len + 1; /* + NUL */
  r->meta_cap = want < GROW_MIN ? want : GROW_MIN;
  r->cur.meta = malloc(r->meta_cap);
  if (!r->cur.meta) return fail(r, lm_errf(err, LOOM_NO_MEMORY, "out of host memory receiving a frame"));
  if (h.meta_len == 0) return meta_done(r, on_frame, arg, err);
  return 0;
}

int lm_frame_reader_window(lm_frame_reader *r, void **p, size_t *n, lm_err *err) {
  if (r->failed || r->phase != PHASE_PAYLOAD) return 0;
  uint64_t total = r->cur.h.payload_len;
  if (!r->cur.payload_external && r->payload_got == r->payload_cap) {
    uint64_t cap = r->payload_cap * 2;
    if (cap < GROW_MIN) cap = GROW_MIN;
    if (cap > total) cap = total;
    void *q = realloc(r->cur.payload, (size_t)cap);
    if (!q) return fail(r, lm_errf(err, LOOM_NO_MEMORY, "out of host memory receiving a %llu-byte payload",
                                   (unsigned long long)total));
    r->cur.payload = q;
    r->payload_cap = cap;
  }
  *p = r->cur.payload + r->payload_got;
  *n = (size_t)(r->payload_cap - r->payload_got);
  return 1;
}

int lm_frame_reader_advance(lm_frame_reader *r, size_t n, lm_frame_fn on_frame, void *arg, lm_err *err) {
  if (r->failed) return lm_errf(err, LOOM_PROTOCOL, "frame stream already failed");
  if (r->phase != PHASE_PAYLOAD || n > r->payload_cap - r->payload_got)
    return fail(r, lm_errf(err, LOOM_INTERNAL, "frame reader advanced past its window"));
  r->payload_got += n;
  if (r->payload_got == r->cur.h.payload_len) return deliver(r, on_frame, arg, err);
  return 0;
}

int lm_frame_reader_feed(lm_frame_reader *r, const void *data, size_t n, lm_frame_fn on_frame, void *arg,
                         lm_err *err) {
  const uint8_t *s = data;
  if (r->failed) return lm_errf(err, LOOM_PROTOCOL, "frame stream already failed");
  while (n > 0) {
    int rc = 0;
    if (r->phase == PHASE_HEADER) {
      size_t take = LM_FRAME_HEADER_SIZE - r->hdr_got;
      if (take > n) take = n;
      memcpy(r->hdr + r->hdr_got, s, take);
      r->hdr_got += take;
      s += take, n -= take;
      if (r->hdr_got == LM_FRAME_HEADER_SIZE) rc = header_done(r, on_frame, arg, err);
    } else if (r->phase == PHASE_META) {
      size_t len = r->cur.h.meta_len;
      if (r->meta_got == r->meta_cap) { /* grow by what has arrived: double, up to len + 1 */
        size_t cap = r->meta_cap * 2;
        if (cap > len + 1) cap = len + 1;
        uint8_t *q = realloc(r->cur.meta, cap);
        if (!q) return fail(r, lm_errf(err, LOOM_NO_MEMORY, "out of host memory receiving a frame"));
        r->cur.meta = q;
        r->meta_cap = cap;
      }
      size_t take = len - r->meta_got;
      if (take > r->meta_cap - r->meta_got) take = r->meta_cap - r->meta_got;
      if (take > n) take = n;
      memcpy(r->cur.meta + r->meta_got, s, take);
      r->meta_got += take;
      s += take, n -= take;
      if (r->meta_got == len) rc = meta_done(r, on_frame, arg, err);
    } else {
      void *w;
      size_t wn;
      rc = lm_frame_reader_window(r, &w, &wn, err);
      if (rc < 0) return rc;
      size_t take = wn < n ? wn : n;
      memcpy(w, s, take);
      s += take, n -= take;
      rc = lm_frame_reader_advance(r, take, on_frame, arg, err);
    }
    if (rc != 0) return rc;
  }
  return 0;
}
