/* Checkpoint files (docs/elastic.md "Checkpoints"): safetensors dtype names, and the CRC-32 of
 * fixed-size blocks that a checkpoint's manifest keeps for every file, so a reader that needs
 * only some byte ranges checks exactly the blocks it reads. Pure functions (zlib's crc32). */
#ifndef LM_STFILE_H
#define LM_STFILE_H

#include <stddef.h>
#include <stdint.h>
#include "common/dtype.h"

#define LM_ST_BLOCK ((uint32_t)1 << 20) /* checksum block size of the files Loom writes */
#define LM_ST_HEADER_MAX ((uint64_t)100 << 20) /* the largest safetensors header accepted */

/* "F32", "BF16", ...; NULL for a dtype safetensors cannot name (C128). */
const char *lm_st_dtype_name(lm_dtype d);
/* The dtype safetensors' name s stands for, or LOOM_DTYPE_INVALID. */
lm_dtype lm_st_dtype_from_name(const char *s);

/* Running CRC-32 of consecutive blocks of `block` bytes over a stream fed in pieces. */
typedef struct lm_st_crc {
  uint32_t block;
  uint64_t pos;                 /* bytes fed so far */
  uint32_t cur;                 /* CRC of the current block's bytes so far */
  uint32_t *crcs;               /* [n] finished blocks (malloc'd, grows) */
  size_t n, cap;
  int oom;                      /* an allocation failed: crcs is incomplete */
} lm_st_crc;

void lm_st_crc_init(lm_st_crc *c, uint32_t block);
void lm_st_crc_feed(lm_st_crc *c, const void *data, size_t n);
/* Closes the last (short) block; crcs[0..n) then covers every byte fed. */
void lm_st_crc_end(lm_st_crc *c);
void lm_st_crc_free(lm_st_crc *c);
uint32_t lm_st_crc32(const void *data, size_t n);
/* The CRC-32 of (what gave crc) followed by data[0..n): lm_st_crc32(x ++ y) = update(crc32(x), y). */
uint32_t lm_st_crc32_update(uint32_t crc, const void *data, size_t n);

/* Number of blocks a file of size bytes has. */
static inline uint64_t lm_st_nblocks(uint64_t size, uint32_t block) { return (size + block - 1) / block; }

#endif
