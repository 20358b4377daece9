/* Control-plane framing: a fixed 32-byte header, a protobuf metadata message, an optional raw
 * payload. The incremental reader is pure (no sockets), checks every length against limits
 * before allocating anything, and can hand the payload window to the caller so bulk bytes are
 * received straight into their final buffer.
 *
 * Frame header, little-endian (docs/protocol.md "Frames"):
 *
 *   offset size field        meaning
 *   0      4    magic        0x4D4F4F4C, the bytes "LOOM"
 *   4      2    type         lmw.MsgType (src/proto/wire.proto); 0 is invalid
 *   6      2    flags        reserved, must be 0
 *   8      4    meta_len     bytes of protobuf metadata that follow the header
 *   12     4    reserved     must be 0
 *   16     8    payload_len  bytes of raw payload that follow the metadata
 *   24     8    request_id   chosen by the requester, echoed by the reply; 0 = one-way
 */
#ifndef LM_NET_FRAME_H
#define LM_NET_FRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "common/err.h"

#define LM_FRAME_MAGIC 0x4D4F4F4Cu       /* "LOOM" read as a little-endian u32 */
#define LM_FRAME_HEADER_SIZE 32
/* Hard ceilings no configuration can raise: a header over these is rejected at once. */
#define LM_FRAME_META_HARD_MAX (16u << 20)             /* 16 MiB of metadata */
#define LM_FRAME_PAYLOAD_HARD_MAX (UINT64_C(1) << 40)  /* 1 TiB of payload */
/* Defaults for a control connection (the controller's clients and workers). */
#define LM_FRAME_META_DEFAULT_MAX (4u << 20)           /* 4 MiB */
#define LM_FRAME_PAYLOAD_DEFAULT_MAX (UINT64_C(64) << 20) /* 64 MiB */

typedef struct lm_frame_header {
  uint16_t type;        /* lmw.MsgType */
  uint16_t flags;       /* reserved: 0 */
  uint32_t meta_len;    /* metadata bytes */
  uint64_t payload_len; /* payload bytes */
  uint64_t request_id;  /* 0 = one-way message */
} lm_frame_header;

/* What a receiver accepts; each side chooses its own (never above the hard ceilings). */
typedef struct lm_frame_limits {
  uint32_t max_meta;
  uint64_t max_payload;
} lm_frame_limits;

/* One received frame. meta is malloc'd by the reader (NUL-terminated for convenience, one byte
 * past meta_len); payload is NULL when payload_len is 0. */
typedef struct lm_frame {
  lm_frame_header h;
  uint8_t *meta;
  uint8_t *payload;
  bool payload_external; /* payload is the sink's memory, not the reader's to free */
} lm_frame;

/* Writes h as 32 bytes (magic included) to out. */
void lm_frame_header_encode(const lm_frame_header *h, uint8_t out[LM_FRAME_HEADER_SIZE]);
/* Parses and checks 32 bytes: magic, reserved fields, type != 0, lengths within lim (lim may be
 * NULL for the hard ceilings only). Returns 0 or LOOM_PROTOCOL with the reason in err. */
int lm_frame_header_decode(const uint8_t in[LM_FRAME_HEADER_SIZE], const lm_frame_limits *lim, lm_frame_header *h,
                           lm_err *err);

/* Takes ownership of a frame's payload away from the reader (which then will not free it). The
 * caller frees it with free() unless f->payload_external. Returns NULL when there is none. */
void *lm_frame_take_payload(lm_frame *f);

/* Called for each complete frame; f is valid only during the call (the reader frees meta and
 * any payload not taken). Return 0 to go on, > 0 to stop feeding (no error), < 0 for an error
 * (its message in err). */
typedef int (*lm_frame_fn)(void *arg, lm_frame *f, lm_err *err);
/* Optional: called once a frame's header and metadata are in and it has a payload. Set *dst to
 * memory of at least f->h.payload_len bytes to receive the payload there (it stays the
 * caller's), or leave it NULL for a reader-allocated buffer. Return < 0 to fail the stream. */
typedef int (*lm_frame_sink_fn)(void *arg, const lm_frame *f, void **dst, lm_err *err);

typedef struct lm_frame_reader {
  lm_frame_limits lim;
  lm_frame_sink_fn sink; /* optional */
  void *sink_arg;
  int phase;             /* internal: header, meta, payload */
  uint8_t hdr[LM_FRAME_HEADER_SIZE];
  size_t hdr_got;
  lm_frame cur;          /* the frame being received */
  size_t meta_got, meta_cap;
  uint64_t payload_got, payload_cap;
  uint64_t frames;       /* frames delivered so far */
  bool failed;           /* a stream error happened; the reader accepts nothing more */
} lm_frame_reader;

void lm_frame_reader_init(lm_frame_reader *r, const lm_frame_limits *lim);
/* Frees a partially received frame. The reader can be reused after init. */
void lm_frame_reader_free(lm_frame_reader *r);
/* True when some bytes of a frame have arrived but not the whole frame. */
bool lm_frame_reader_mid_frame(const lm_frame_reader *r);
/* Consumes n bytes, calling on_frame for every frame they complete. Returns 0 when all bytes
 * were consumed, > 0 when on_frame asked to stop (the rest is dropped), < 0 on a stream error
 * (bad header, a limit exceeded, out of memory); after an error the reader refuses all input. */
int lm_frame_reader_feed(lm_frame_reader *r, const void *data, size_t n, lm_frame_fn on_frame, void *arg, lm_err *err);
/* Zero-copy receive: when the reader is inside a payload, sets *p and *n to where the next payload
 * bytes belong (at most the rest of the payload; a reader-allocated payload grows in steps
 * bounded by what has arrived) and returns 1; write there, then call lm_frame_reader_advance.
 * Returns 0 when not inside a payload (use lm_frame_reader_feed), < 0 when out of memory. */
int lm_frame_reader_window(lm_frame_reader *r, void **p, size_t *n, lm_err *err);
/* Commits n bytes written into the window; completes (and delivers) the frame when it is whole.
 * Same return values as lm_frame_reader_feed. */
int lm_frame_reader_advance(lm_frame_reader *r, size_t n, lm_frame_fn on_frame, void *arg, lm_err *err);

#endif
