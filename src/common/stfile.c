/* Checkpoint file helpers: safetensors dtype names and block CRCs (stfile.h). */
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include "common/stfile.h"

static const struct { lm_dtype d; const char *name; } g_names[] = {
    {LOOM_DTYPE_PRED, "BOOL"}, {LOOM_DTYPE_S8, "I8"},   {LOOM_DTYPE_S16, "I16"},  {LOOM_DTYPE_S32, "I32"},
    {LOOM_DTYPE_S64, "I64"},   {LOOM_DTYPE_U8, "U8"},   {LOOM_DTYPE_U16, "U16"},  {LOOM_DTYPE_U32, "U32"},
    {LOOM_DTYPE_U64, "U64"},   {LOOM_DTYPE_F16, "F16"}, {LOOM_DTYPE_BF16, "BF16"}, {LOOM_DTYPE_F32, "F32"},
    {LOOM_DTYPE_F64, "F64"},   {LOOM_DTYPE_C64, "C64"},
};

const char *lm_st_dtype_name(lm_dtype d) {
  for (size_t i = 0; i < sizeof g_names / sizeof g_names[0]; i++)
    if (g_names[i].d == d) return g_names[i].name;
  return NULL;
}

lm_dtype lm_st_dtype_from_name(const char *s) {
  for (size_t i = 0; s && i < sizeof g_names / sizeof g_names[0]; i++)
    if (!strcmp(g_names[i].name, s)) return g_names[i].d;
  return LOOM_DTYPE_INVALID;
}

uint32_t lm_st_crc32(const void *data, size_t n) { return lm_st_crc32_update(0, data, n); }

uint32_t lm_st_crc32_update(uint32_t crc, const void *data, size_t n) {
  uLong c = crc;
  const unsigned char *p = data;
  while (n) { /* zlib takes uInt lengths */
    uInt take = n > (1u << 30) ? (1u << 30) : (uInt)n;
    c = crc32(c, p, take);
    p += take;
    n -= take;
  }
  return (uint32_t)c;
}

void lm_st_crc_init(lm_st_crc *c, uint32_t block) {
  memset(c, 0, sizeof *c);
  c->block = block;
  c->cur = (uint32_t)crc32(0L, Z_NULL, 0);
}

static void push(lm_st_crc *c) {
  if (c->n == c->cap) {
    size_t cap = c->cap ? c->cap * 2 : 64;
    uint32_t *g = realloc(c->crcs, cap * sizeof *g);
    if (!g) {
      c->oom = 1;
      return;
    }
    c->crcs = g;
    c->cap = cap;
  }
  c->crcs[c->n++] = c->cur;
  c->cur = (uint32_t)crc32(0L, Z_NULL, 0);
}

void lm_st_crc_feed(lm_st_crc *c, const void *data, size_t n) {
  const unsigned char *p = data;
  while (n) {
    uint64_t room = c->block - c->pos % c->block;
    size_t take = n < room ? n : (size_t)room;
    c->cur = (uint32_t)crc32(c->cur, p, (uInt)take);
    c->pos += take;
    p += take;
    n -= take;
    if (c->pos % c->block == 0) push(c);
  }
}

void lm_st_crc_end(lm_st_crc *c) {
  if (c->pos % c->block) push(c);
}

void lm_st_crc_free(lm_st_crc *c) {
  free(c->crcs);
  memset(c, 0, sizeof *c);
}
