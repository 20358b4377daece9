/* Checkpoint file I/O at the worker (docs/elastic.md "Checkpoints"). The controller sends one
 * CHECKPOINT_IO per worker and request:
 *   write: the shards this worker holds that go into one safetensors file (one tensor each);
 *          written to a new file, fsync'd, its size and block CRCs reported back;
 *   read:  the shards to create on this worker's devices and, for each, the pieces of saved slices
 *          that fill it: only the byte ranges of those pieces are read (pread), rounded out to
 *          the checksum blocks that cover them, and every block read is checked against the
 *          manifest's CRC before a byte of it is used. A missing, short or altered file is an
 *          error naming the file; the shards then fail instead of holding wrong numbers.
 * The file work runs on the loop's thread pool, never on the loop thread. The shards a read
 * creates are listed as PENDING at once, so launches that read them wait for them.
 *
 * DRAIN (controller -> worker): this worker's shards have been handed to a standby; it answers
 * ACK once its copies have been received there, then leaves (exit status 0). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "common/dtype.h"
#include "common/log.h"
#include "common/stfile.h"
#include "worker/wk.h"

#define CK_WAIT_MS 60000           /* a write waits this long for a shard still being computed */
#define CK_MISSING_MS 3000         /* ... and this long for one not listed at all (deleted meanwhile) */
#define CK_CHUNK ((size_t)8 << 20) /* writes and CRCs go in pieces of this size */

typedef struct ck_target {
  wk_slot *slot;                   /* read: the PENDING slot (a reference) */
  lm_buffer *buf;
  uint64_t filled;                 /* bytes the pieces wrote into it */
} ck_target;

typedef struct ck_job {
  uv_work_t req;
  wk *w;
  uint64_t rid;
  Lmw__CheckpointIo *m;            /* its own decoded copy of the request */
  ck_target *targets;              /* read: [m->n_targets] */
  int rc;
  lm_err err;
  /* write results */
  lm_st_crc crc;
  uint64_t size, bytes;
  uint64_t *offsets;               /* [m->n_slices] */
  uint64_t t_queued, t_start, t_end; /* uv_hrtime: queued, work started, work ended (debug log) */
} ck_job;

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Bytes of a dense dtype tensor of dims; < 0 (err set) on a bad type or an overflow. */
static int tensor_bytes(uint32_t dtype, const uint64_t *dims, size_t rank, uint64_t *out, lm_err *err) {
  if (!lm_dtype_valid((int)dtype)) return lm_errf(err, LOOM_PROTOCOL, "unknown dtype %u", dtype);
  if (rank > LM_MAX_RANK) return lm_errf(err, LOOM_PROTOCOL, "rank %zu", rank);
  uint64_t n = lm_dtype_size((lm_dtype)dtype);
  for (size_t d = 0; d < rank; d++)
    if (dims[d] > (uint64_t)INT64_MAX || __builtin_mul_overflow(n, dims[d], &n) || n > ((uint64_t)1 << 42))
      return lm_errf(err, LOOM_PROTOCOL, "a tensor's size overflows");
  *out = n;
  return 0;
}

/* The listed READY slot of (session, array, dev) with a reference, waiting while it is pending. */
static int wait_ready(wk *w, uint64_t session, uint64_t array, uint32_t dev, wk_slot **out, lm_err *err) {
  wk_store *st = &w->store;
  uint64_t deadline = now_ms() + CK_WAIT_MS, missing_deadline = now_ms() + CK_MISSING_MS;
  for (;;) {
    wk_slot *s = wk_store_get(st, session, array, dev);
    pthread_mutex_lock(&st->mu);
    int state = s ? s->state : -1;
    if (state == WK_SLOT_READY) {
      pthread_mutex_unlock(&st->mu);
      *out = s;
      return 0;
    }
    if (state == WK_SLOT_FAILED) {
      int code = s->code;
      char msg[LM_ERR_MSG_MAX];
      snprintf(msg, sizeof msg, "%s", s->msg ? s->msg : "its producer failed");
      pthread_mutex_unlock(&st->mu);
      wk_slot_release(st, s);
      return lm_errf(err, code, "array %llu on device %u: %s", (unsigned long long)array, dev, msg);
    }
    /* a shard not listed at all is one that was deleted (or never was here): given up sooner than
     * one still being computed */
    bool last = now_ms() >= deadline || w->stopping || (state < 0 && now_ms() >= missing_deadline);
    if (!last) {
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      ts.tv_nsec += 20 * 1000000;
      if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
      pthread_cond_timedwait(&st->cv, &st->mu, &ts);
    }
    pthread_mutex_unlock(&st->mu);
    wk_slot_release(st, s);
    if (last)
      return lm_errf(err, LOOM_NOT_FOUND, "array %llu has no shard on device %u of worker %u",
                     (unsigned long long)array, dev, w->worker_id);
  }
}

/* ---- write ---- */

static int write_all(int fd, const void *data, size_t n, lm_st_crc *crc, const char *path, lm_err *err) {
  const char *p = data;
  while (n) {
    size_t take = n < CK_CHUNK ? n : CK_CHUNK;
    lm_st_crc_feed(crc, p, take);
    size_t done = 0;
    while (done < take) {
      ssize_t k = write(fd, p + done, take - done);
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) {
        int e = k < 0 ? errno : ENOSPC;
        return lm_errf(err, LOOM_IO,
                       "cannot write checkpoint file %s: %s", path, strerror(e));
      }
      done += (size_t)k;
    }
    p += take;
    n -= take;
  }
  return 0;
}

static void write_work(uv_work_t *req) {
  ck_job *j = req->data;
  j->t_start = uv_hrtime();
  wk *w = j->w;
  Lmw__CheckpointIo *m = j->m;
  size_t n = m->n_slices;
  wk_slot **slots = calloc(n ? n : 1, sizeof *slots);
  j->offsets = calloc(n ? n : 1, sizeof *j->offsets);
  cJSON *h = cJSON_CreateObject(), *meta = cJSON_CreateObject();
  char *hs = NULL;
  int fd = -1;
  int rc = slots && j->offsets && h && meta ? 0 : lm_errf(&j->err, LOOM_NO_MEMORY, "out of host memory");
  if (rc == 0) {
    cJSON_AddItemToObject(h, "__metadata__", meta);
    meta = NULL;
    cJSON_AddStringToObject(cJSON_GetObjectItem(h, "__metadata__"), "format", "loom");
  }
  uint64_t off = 0;
  for (size_t i = 0; rc == 0 && i < n; i++) {
    const Lmw__CkptSlice *s = m->slices[i];
    uint64_t nb;
    rc = tensor_bytes(s->dtype, s->dims, s->n_dims, &nb, &j->err);
    const char *dn = rc == 0 ? lm_st_dtype_name((lm_dtype)s->dtype) : NULL;
    if (rc == 0 && !dn)
      rc = lm_errf(&j->err, LOOM_UNSUPPORTED, "dtype %s cannot be saved as safetensors",
                   lm_dtype_name((lm_dtype)s->dtype));
    if (rc == 0 && s->local_index >= w->cfg.devices)
      rc = lm_errf(&j->err, LOOM_PROTOCOL, "no device %u on this worker", s->local_index);
    if (rc == 0 && (!s->key || !s->key[0] || cJSON_GetObjectItem(h, s->key)))
      rc = lm_errf(&j->err, LOOM_PROTOCOL, "tensor key '%s' is empty or repeated", s->key ? s->key : "");
    if (rc == 0) rc = wait_ready(w, s->session, s->array, s->local_index, &slots[i], &j->err);
    if (rc == 0 && slots[i]->buf->nbytes != nb)
      rc = lm_errf(&j->err, LOOM_SHAPE_MISMATCH, "array %llu's shard on device %u has %zu bytes, not %llu",
                   (unsigned long long)s->array, s->local_index, slots[i]->buf->nbytes, (unsigned long long)nb);
    if (rc == 0) {
      cJSON *t = cJSON_CreateObject(), *shape = cJSON_CreateArray(), *offs = cJSON_CreateArray();
      cJSON_AddStringToObject(t, "dtype", dn);
      for (size_t d = 0; d < s->n_dims; d++) cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)s->dims[d]));
      cJSON_AddItemToObject(t, "shape", shape);
      cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
      cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(off + nb)));
      cJSON_AddItemToObject(t, "data_offsets", offs);
      cJSON_AddItemToObject(h, s->key, t);
      j->offsets[i] = off;
      off += nb;
    }
  }
  size_t hlen = 0;
  if (rc == 0) {
    hs = cJSON_PrintUnformatted(h);
    if (!hs) rc = lm_errf(&j->err, LOOM_NO_MEMORY, "out of host memory");
  }
  if (rc == 0) { /* padded with spaces to a multiple of 8 (so the data that follows is aligned) */
    hlen = strlen(hs);
    size_t padded = (hlen + 7) & ~(size_t)7;
    char *g = realloc(hs, padded + 1);
    if (!g) rc = lm_errf(&j->err, LOOM_NO_MEMORY, "out of host memory");
    else {
      hs = g;
      memset(hs + hlen, ' ', padded - hlen);
      hs[padded] = 0;
      hlen = padded;
    }
  }
  if (rc == 0) {
    fd = open(m->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
      rc = lm_errf(&j->err, errno == ENOSPC || errno == EDQUOT ? LOOM_IO : LOOM_PERMISSION,
                   "cannot create checkpoint file %s: %s", m->path, strerror(errno));
  }
  lm_st_crc_init(&j->crc, LM_ST_BLOCK);
  if (rc == 0) {
    uint8_t len8[8];
    for (int b = 0; b < 8; b++) len8[b] = (uint8_t)((uint64_t)hlen >> (8 * b));
    rc = write_all(fd, len8, 8, &j->crc, m->path, &j->err);
    if (rc == 0) rc = write_all(fd, hs, hlen, &j->crc, m->path, &j->err);
    for (size_t i = 0; rc == 0 && i < n; i++) {
      j->offsets[i] += 8 + hlen;
      rc = write_all(fd, slots[i]->buf->data, slots[i]->buf->nbytes, &j->crc, m->path, &j->err);
    }
    if (rc == 0 && fsync(fd) != 0)
      rc = lm_errf(&j->err, LOOM_IO,
                   "cannot write checkpoint file %s: %s", m->path, strerror(errno));
    if (close(fd) != 0 && rc == 0)
      rc = lm_errf(&j->err, LOOM_INTERNAL, "cannot write checkpoint file %s: %s", m->path, strerror(errno));
    lm_st_crc_end(&j->crc);
    if (rc == 0 && j->crc.oom) rc = lm_errf(&j->err, LOOM_NO_MEMORY, "out of host memory");
    if (rc < 0) unlink(m->path); /* never leave a partial file behind */
    j->size = 8 + hlen + off;
    j->bytes = off;
  }
  for (size_t i = 0; slots && i < n; i++) wk_slot_release(&w->store, slots[i]);
  free(slots);
  free(hs);
  cJSON_Delete(h);
  cJSON_Delete(meta);
  j->rc = rc;
  j->t_end = uv_hrtime();
}

/* ---- read ---- */

/* Copies the box ext (rank dims) at soff of a row-major source of sdims, whose element 0 is at
 * byte sbase of src, to doff of a row-major destination of ddims at dst. */
static void copy_box(int rank, const uint8_t *src, int64_t sbase, const uint64_t *sdims, const uint64_t *soff,
                     uint8_t *dst, const uint64_t *ddims, const uint64_t *doff, const uint64_t *ext, size_t es) {
  if (rank == 0) {
    memcpy(dst, src + sbase, es);
    return;
  }
  for (int d = 0; d < rank; d++)
    if (!ext[d]) return;
  /* the innermost run: the last dimension, merged with trailing ones both sides hold whole */
  int inner = rank - 1;
  uint64_t run = ext[inner];
  while (inner > 0 && ext[inner] == sdims[inner] && ext[inner] == ddims[inner] && soff[inner] == 0 &&
         doff[inner] == 0) {
    inner--;
    run *= ext[inner];
  }
  uint64_t sstr[LM_MAX_RANK], dstr[LM_MAX_RANK];
  sstr[rank - 1] = dstr[rank - 1] = 1;
  for (int d = rank - 2; d >= 0; d--) sstr[d] = sstr[d + 1] * sdims[d + 1], dstr[d] = dstr[d + 1] * ddims[d + 1];
  uint64_t idx[LM_MAX_RANK] = {0};
  for (;;) {
    uint64_t se = 0, de = 0;
    for (int d = 0; d < rank; d++) {
      uint64_t i = d < inner ? idx[d] : 0;
      se += (soff[d] + i) * sstr[d];
      de += (doff[d] + i) * dstr[d];
    }
    memcpy(dst + de * es, src + sbase + (int64_t)(se * es), run * es);
    int d = inner - 1;
    while (d >= 0 && ++idx[d] == ext[d]) idx[d--] = 0;
    if (d < 0) return;
  }
}

typedef struct ck_fd {
  int fd;                          /* -1: not opened yet */
} ck_fd;

static int open_file(const Lmw__CkptFile *f, ck_fd *o, lm_err *err) {
  if (o->fd >= 0) return 0;
  int fd = open(f->path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return lm_errf(err, errno == ENOENT ? LOOM_NOT_FOUND : LOOM_PERMISSION, "checkpoint file %s %s: %s", f->path,
                   errno == ENOENT ? "is missing" : "cannot be opened", strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    close(fd);
    return lm_errf(err, LOOM_INTERNAL, "checkpoint file %s: %s", f->path, strerror(e));
  }
  if ((uint64_t)st.st_size != f->size) {
    close(fd);
    return lm_errf(err, LOOM_IO, "checkpoint file %s is %s: %llu bytes, the manifest says %llu", f->path,
                   (uint64_t)st.st_size < f->size ? "truncated" : "corrupt", (unsigned long long)st.st_size,
                   (unsigned long long)f->size);
  }
  o->fd = fd;
  return 0;
}

/* Reads the blocks of file f covering [lo, hi) into *buf (realloc'd to *cap), checking each
 * block's CRC; *blo gets the file offset of buf[0]. */
static int read_checked(const Lmw__CkptFile *f, int fd, uint64_t lo, uint64_t hi, uint8_t **buf, size_t *cap,
                        uint64_t *blo, lm_err *err) {
  uint64_t b0 = lo / f->block, b1 = (hi + f->block - 1) / f->block;
  uint64_t start = b0 * f->block, end = b1 * f->block;
  if (end > f->size) end = f->size;
  size_t len = (size_t)(end - start);
  if (len > *cap) {
    uint8_t *g = realloc(*buf, len);
    if (!g) return lm_errf(err, LOOM_NO_MEMORY, "out of host memory reading %s", f->path);
    *buf = g;
    *cap = len;
  }
  size_t done = 0;
  while (done < len) {
    ssize_t k = pread(fd, *buf + done, len - done, (off_t)(start + done));
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) return lm_errf(err, LOOM_INTERNAL, "cannot read checkpoint file %s: %s", f->path, strerror(errno));
    if (k == 0)
      return lm_errf(err, LOOM_IO, "checkpoint file %s is truncated (it ends at byte %llu)", f->path,
                     (unsigned long long)(start + done));
    done += (size_t)k;
  }
  for (uint64_t b = b0; b < b1; b++) {
    uint64_t bs = b * f->block, be = bs + f->block > f->size ? f->size : bs + f->block;
    if (lm_st_crc32(*buf + (bs - start), (size_t)(be - bs)) != f->crc32[b])
      return lm_errf(err, LOOM_IO,
                     "checkpoint file %s is corrupt: bytes %llu-%llu do not match the manifest's checksum", f->path,
                     (unsigned long long)bs, (unsigned long long)be);
  }
  *blo = start;
  return 0;
}

/* qsort has no argument: the request being sorted (each read runs alone on its thread, and the
 * sort is done under g_sort_mu) */
static pthread_mutex_t g_sort_mu = PTHREAD_MUTEX_INITIALIZER;
static const Lmw__CheckpointIo *g_sort_m;

static int cmp_piece(const void *a, const void *b) {
  const Lmw__CkptSlice *x = g_sort_m->slices[*(const size_t *)a], *y = g_sort_m->slices[*(const size_t *)b];
  if (x->file != y->file) return x->file < y->file ? -1 : 1;
  if (x->data_offset != y->data_offset) return x->data_offset < y->data_offset ? -1 : 1;
  return *(const size_t *)a < *(const size_t *)b ? -1 : 1;
}

/* Reads [lo, hi) of file f straight into dst (no staging copy), checking the CRC of every block
 * that covers it: the parts of those blocks outside [lo, hi) are read into small buffers and the
 * CRC runs over head, dst and tail in turn. */
static int read_direct(const Lmw__CkptFile *f, int fd, uint64_t lo, uint64_t hi, uint8_t *dst, lm_err *err) {
  uint64_t b0 = lo / f->block, b1 = (hi + f->block - 1) / f->block;
  uint64_t start = b0 * f->block, end = b1 * f->block > f->size ? f->size : b1 * f->block;
  uint8_t *head = lo > start ? malloc((size_t)(lo - start)) : NULL;
  uint8_t *tail = end > hi ? malloc((size_t)(end - hi)) : NULL;
  int rc = 0;
  if ((lo > start && !head) || (end > hi && !tail)) rc = lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  struct { uint8_t *p; uint64_t off, len; } parts[3] = {{head, start, lo - start}, {dst, lo, hi - lo}, {tail, hi, end - hi}};
  for (int k = 0; rc == 0 && k < 3; k++) {
    uint64_t done = 0;
    while (rc == 0 && done < parts[k].len) {
      ssize_t r = pread(fd, parts[k].p + done, (size_t)(parts[k].len - done), (off_t)(parts[k].off + done));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) rc = lm_errf(err, LOOM_IO, "cannot read checkpoint file %s: %s", f->path, strerror(errno));
      else if (r == 0)
        rc = lm_errf(err, LOOM_IO, "checkpoint file %s is truncated (it ends at byte %llu)", f->path,
                     (unsigned long long)(parts[k].off + done));
      else done += (uint64_t)r;
    }
  }
  for (uint64_t b = b0; rc == 0 && b < b1; b++) {
    uint64_t bs = b * f->block, be = bs + f->block > f->size ? f->size : bs + f->block;
    uint32_t crc = 0;
    for (int k = 0; k < 3; k++) { /* the part of each piece inside this block */
      uint64_t s0 = parts[k].off > bs ? parts[k].off : bs, s1 = parts[k].off + parts[k].len < be ? parts[k].off + parts[k].len : be;
      if (s1 > s0) crc = lm_st_crc32_update(crc, parts[k].p + (s0 - parts[k].off), (size_t)(s1 - s0));
    }
    if (crc != f->crc32[b])
      rc = lm_errf(err, LOOM_IO, "checkpoint file %s is corrupt: bytes %llu-%llu do not match the manifest's checksum",
                   f->path, (unsigned long long)bs, (unsigned long long)be);
  }
  free(head);
  free(tail);
  return rc;
}

/* True when the box ext at soff of sdims and at doff of ddims is one contiguous run on both sides. */
static bool box_contiguous(size_t rank, const uint64_t *sdims, const uint64_t *soff, const uint64_t *ddims,
                           const uint64_t *doff, const uint64_t *ext) {
  size_t d = rank;
  while (d > 1 && ext[d - 1] == sdims[d - 1] && ext[d - 1] == ddims[d - 1] && !soff[d - 1] && !doff[d - 1]) d--;
  for (size_t k = 0; d > 0 && k + 1 < d; k++) /* the dims above the run: one index each */
    if (ext[k] != 1) return false;
  return true;
}

static void read_work(uv_work_t *req) {
  ck_job *j = req->data;
  j->t_start = uv_hrtime();
  wk *w = j->w;
  Lmw__CheckpointIo *m = j->m;
  ck_fd *fds = calloc(m->n_files ? m->n_files : 1, sizeof *fds);
  uint8_t *buf = NULL;
  size_t cap = 0;
  int rc = fds ? 0 : lm_errf(&j->err, LOOM_NO_MEMORY, "out of host memory");
  for (size_t i = 0; fds && i < m->n_files; i++) fds[i].fd = -1;
  for (size_t i = 0; rc == 0 && i < m->n_targets; i++) {
    const Lmw__CkptSlice *t = m->targets[i];
    int64_t dims[LM_MAX_RANK];
    for (size_t d = 0; d < t->n_dims; d++) dims[d] = (int64_t)t->dims[d];
    lm_type ty;
    lm_type_tensor(&ty, (lm_dtype)t->dtype, (int)t->n_dims, dims);
    rc = lm_buffer_alloc(w->devs[t->local_index].dev, &ty, &j->targets[i].buf, &j->err);
  }
  uint64_t total = 0;
  /* the pieces in file order, so pieces of one saved slice for several new shards (resharding)
   * reuse the blocks read and checked for the first */
  size_t *order = malloc((m->n_slices ? m->n_slices : 1) * sizeof *order);
  if (!order && rc == 0) rc = lm_errf(&j->err, LOOM_NO_MEMORY, "out of host memory");
  for (size_t p = 0; order && p < m->n_slices; p++) order[p] = p;
  if (order) {
    pthread_mutex_lock(&g_sort_mu);
    g_sort_m = m;
    qsort(order, m->n_slices, sizeof *order, cmp_piece);
    pthread_mutex_unlock(&g_sort_mu);
  }
  uint32_t wfile = UINT32_MAX; /* the window of checked blocks in buf: file, [wlo, whi) */
  uint64_t wlo = 0, whi = 0;
  for (size_t pi = 0; rc == 0 && pi < m->n_slices; pi++) {
    const Lmw__CkptSlice *s = m->slices[order[pi]];
    const Lmw__CkptSlice *t = m->targets[s->target];
    const Lmw__CkptFile *f = m->files[s->file];
    size_t rank = t->n_dims, es = lm_dtype_size((lm_dtype)t->dtype);
    rc = open_file(f, &fds[s->file], &j->err);
    if (rc < 0) break;
    /* the span of the piece in the file: from its first element to its last */
    uint64_t first = 0, last = 0, cnt = 1;
    for (size_t d = 0; d < rank; d++) {
      first = first * s->src_dims[d] + s->src_off[d];
      last = last * s->src_dims[d] + s->src_off[d] + (s->extent[d] ? s->extent[d] - 1 : 0);
      cnt *= s->extent[d];
    }
    if (cnt == 0) continue;
    uint64_t lo = s->data_offset + first * es, hi = s->data_offset + (last + 1) * es, blo = 0;
    if (hi > f->size) {
      rc = lm_errf(&j->err, LOOM_IO, "checkpoint file %s is shorter than its manifest says", f->path);
      break;
    }
    bool alone = pi + 1 >= m->n_slices || m->slices[order[pi + 1]]->file != s->file ||
                 m->slices[order[pi + 1]]->data_offset != s->data_offset;
    if (!(wfile == s->file && lo >= wlo && hi <= whi) && alone &&
        box_contiguous(rank, s->src_dims, s->src_off, t->dims, s->dst_off, s->extent)) {
      uint64_t de = 0; /* straight into the shard: its bytes are one run of the file */
      for (size_t d = 0; d < rank; d++) de = de * t->dims[d] + s->dst_off[d];
      rc = read_direct(f, fds[s->file].fd, lo, hi, (uint8_t *)j->targets[s->target].buf->data + de * es, &j->err);
      if (rc < 0) break;
      total += hi - lo;
      j->targets[s->target].filled += cnt * es;
      continue;
    }
    if (wfile == s->file && lo >= wlo && hi <= whi) {
      blo = wlo; /* already read and checked */
    } else {
      /* read what the following pieces of the same saved slice need too, at once */
      uint64_t rlo = lo, rhi = hi;
      for (size_t pk = pi + 1; pk < m->n_slices; pk++) {
        const Lmw__CkptSlice *n = m->slices[order[pk]];
        if (n->file != s->file || n->data_offset != s->data_offset) break;
        uint64_t nf = 0, nl = 0;
        for (size_t d = 0; d < rank; d++) {
          nf = nf * n->src_dims[d] + n->src_off[d];
          nl = nl * n->src_dims[d] + n->src_off[d] + (n->extent[d] ? n->extent[d] - 1 : 0);
        }
        if (s->data_offset + nf * es < rlo) rlo = s->data_offset + nf * es;
        if (s->data_offset + (nl + 1) * es > rhi) rhi = s->data_offset + (nl + 1) * es;
      }
      if (rhi > f->size) rhi = hi;
      rc = read_checked(f, fds[s->file].fd, rlo, rhi, &buf, &cap, &blo, &j->err);
      hi = rhi;
      if (rc < 0) break;
      wfile = s->file;
      wlo = blo;
      whi = (hi + f->block - 1) / f->block * f->block;
      if (whi > f->size) whi = f->size;
      total += whi - wlo;
    }
    copy_box((int)rank, buf, (int64_t)s->data_offset - (int64_t)blo, s->src_dims, s->src_off,
             j->targets[s->target].buf->data, t->dims, s->dst_off, s->extent, es);
    j->targets[s->target].filled += cnt * es;
  }
  free(order);
  for (size_t i = 0; rc == 0 && i < m->n_targets; i++)
    if (j->targets[i].filled != j->targets[i].buf->nbytes)
      rc = lm_errf(&j->err, LOOM_INTERNAL, "the pieces read for array %llu on device %u cover %llu of its %zu bytes",
                   (unsigned long long)m->targets[i]->array, m->targets[i]->local_index,
                   (unsigned long long)j->targets[i].filled, j->targets[i].buf->nbytes);
  for (size_t i = 0; i < m->n_targets; i++) { /* the shards become ready, or fail, all together */
    ck_target *t = &j->targets[i];
    if (rc == 0) {
      wk_slot_finish(&w->store, t->slot, t->buf, 0, NULL);
    } else {
      lm_buffer_release(t->buf);
      wk_slot_finish(&w->store, t->slot, NULL, j->err.code, j->err.msg);
    }
    t->buf = NULL;
  }
  for (size_t i = 0; fds && i < m->n_files; i++)
    if (fds[i].fd >= 0) close(fds[i].fd);
  free(fds);
  free(buf);
  j->bytes = total;
  j->rc = rc;
  j->t_end = uv_hrtime();
}

/* ---- the loop side ---- */

static void job_free(ck_job *j) {
  for (size_t i = 0; j->targets && i < j->m->n_targets; i++) {
    lm_buffer_release(j->targets[i].buf);
    wk_slot_release(&j->w->store, j->targets[i].slot);
  }
  free(j->targets);
  free(j->offsets);
  lm_st_crc_free(&j->crc);
  if (j->m) lmw__checkpoint_io__free_unpacked(j->m, NULL);
  free(j);
}

static void job_done(uv_work_t *req, int status) {
  ck_job *j = req->data;
  wk *w = j->w;
  if (status == UV_ECANCELED && j->rc == 0) j->rc = lm_errf(&j->err, LOOM_CANCELLED, "the worker is stopping");
  if (j->rc < 0) {
    lm_warn("checkpoint %s failed: %s", j->m->write ? "write" : "read", j->err.msg);
    if (w->conn) lm_conn_send_errorf(w->conn, j->rid, j->err.code, "worker %u: %s", w->worker_id, j->err.msg);
  } else {
    Lmw__CheckpointIoReply r = LMW__CHECKPOINT_IO_REPLY__INIT;
    Lmw__CkptFile f = LMW__CKPT_FILE__INIT;
    r.bytes = j->bytes;
    if (j->m->write) {
      f.path = j->m->path;
      f.size = j->size;
      f.block = LM_ST_BLOCK;
      f.n_crc32 = j->crc.n;
      f.crc32 = j->crc.crcs;
      r.file = &f;
      r.n_data_offsets = j->m->n_slices;
      r.data_offsets = j->offsets;
    }
    lm_debug("checkpoint %s done: %llu bytes; waited %.1f ms for a thread, worked %.1f ms, reported after %.1f ms",
             j->m->write ? "write" : "read", (unsigned long long)j->bytes, (double)(j->t_start - j->t_queued) / 1e6,
             (double)(j->t_end - j->t_start) / 1e6, (double)(uv_hrtime() - j->t_end) / 1e6);
    wk_send(w, LM_MSG_CHECKPOINT_IO_REPLY, j->rid, &r.base);
  }
  if (!j->m->write && w->parked) wk_data_poll(w); /* gets parked on the new shards */
  job_free(j);
}

/* Checks a read request's shapes and indices before anything is allocated (the controller is
 * trusted, but a mistake must be an error, never an out-of-bounds access). */
static int check_read(wk *w, const Lmw__CheckpointIo *m, lm_err *err) {
  for (size_t i = 0; i < m->n_files; i++) {
    const Lmw__CkptFile *f = m->files[i];
    if (!f->path || !f->path[0] || f->block == 0 || f->n_crc32 != lm_st_nblocks(f->size, f->block))
      return lm_errf(err, LOOM_PROTOCOL, "file %zu of the request is malformed", i);
  }
  for (size_t i = 0; i < m->n_targets; i++) {
    const Lmw__CkptSlice *t = m->targets[i];
    uint64_t nb;
    LM_TRY(tensor_bytes(t->dtype, t->dims, t->n_dims, &nb, err));
    if (t->local_index >= w->cfg.devices) return lm_errf(err, LOOM_PROTOCOL, "no device %u", t->local_index);
  }
  for (size_t p = 0; p < m->n_slices; p++) {
    const Lmw__CkptSlice *s = m->slices[p];
    if (s->target >= m->n_targets || s->file >= m->n_files)
      return lm_errf(err, LOOM_PROTOCOL, "piece %zu names no target or file", p);
    const Lmw__CkptSlice *t = m->targets[s->target];
    size_t r = t->n_dims;
    if (s->n_src_dims != r || s->n_src_off != r || s->n_dst_off != r || s->n_extent != r)
      return lm_errf(err, LOOM_PROTOCOL, "piece %zu has the wrong rank", p);
    uint64_t nb;
    LM_TRY(tensor_bytes(t->dtype, s->src_dims, r, &nb, err));
    if (s->data_offset > m->files[s->file]->size || nb > m->files[s->file]->size - s->data_offset)
      return lm_errf(err, LOOM_PROTOCOL, "piece %zu lies outside its file", p);
    for (size_t d = 0; d < r; d++)
      if (s->src_off[d] > s->src_dims[d] || s->extent[d] > s->src_dims[d] - s->src_off[d] ||
          s->dst_off[d] > t->dims[d] || s->extent[d] > t->dims[d] - s->dst_off[d])
        return lm_errf(err, LOOM_PROTOCOL, "piece %zu lies outside its slice or its shard", p);
  }
  return 0;
}

void wk_on_checkpoint_io(wk *w, const lm_frame *f) {
  lm_err err;
  int rc = 0;
  ck_job *j = calloc(1, sizeof *j);
  if (!j) rc = lm_errf(&err, LOOM_NO_MEMORY, "out of host memory");
  if (rc == 0) {
    j->m = lmw__checkpoint_io__unpack(NULL, f->h.meta_len, f->meta);
    if (!j->m) rc = lm_errf(&err, LOOM_PROTOCOL, "malformed CHECKPOINT_IO");
  }
  if (rc == 0) {
    j->w = w;
    j->rid = f->h.request_id;
    j->req.data = j;
    if (j->m->write && (!j->m->path || j->m->path[0] != '/'))
      rc = lm_errf(&err, LOOM_PROTOCOL, "a checkpoint write needs an absolute path");
    else if (!j->m->write) rc = check_read(w, j->m, &err);
  }
  if (rc == 0 && !j->m->write) { /* launches that read the new shards wait for them from now on */
    j->targets = calloc(j->m->n_targets ? j->m->n_targets : 1, sizeof *j->targets);
    if (!j->targets) rc = lm_errf(&err, LOOM_NO_MEMORY, "out of host memory");
    for (size_t i = 0; rc == 0 && i < j->m->n_targets; i++) {
      const Lmw__CkptSlice *t = j->m->targets[i];
      j->targets[i].slot = wk_slot_new(t->session, t->array, t->local_index);
      if (!j->targets[i].slot) rc = lm_errf(&err, LOOM_NO_MEMORY, "out of host memory");
    }
    for (size_t i = 0; rc == 0 && i < j->m->n_targets; i++) wk_store_put(&w->store, j->targets[i].slot);
  }
  if (j) j->t_queued = uv_hrtime();
  if (rc == 0 && uv_queue_work(&w->loop, &j->req, j->m->write ? write_work : read_work, job_done) != 0)
    rc = lm_errf(&err, LOOM_NO_MEMORY, "cannot queue the checkpoint work");
  if (rc < 0) {
    if (j && j->targets)
      for (size_t i = 0; i < j->m->n_targets; i++)
        if (j->targets[i].slot) wk_slot_finish(&w->store, j->targets[i].slot, NULL, rc, err.msg);
    lm_warn("refusing CHECKPOINT_IO: %s", err.msg);
    if (w->conn) lm_conn_send_errorf(w->conn, f->h.request_id, rc, "worker %u: %s", w->worker_id, err.msg);
    if (j) job_free(j);
  }
}

/* ---- drain ---- */

typedef struct ck_drain {
  uv_timer_t timer;
  wk *w;
  uint64_t rid;
  uint64_t since;
  bool acked;
} ck_drain;

static void drain_closed(uv_handle_t *h) { free(h->data); }

static void drain_tick(uv_timer_t *t) {
  ck_drain *d = t->data;
  wk *w = d->w;
  if (!d->acked) {
    if (wk_sc_sending(w) && uv_now(&w->loop) - d->since < 120000) return;
    char first[200];
    uint32_t failed = wk_sc_receipt_failures(w, first, sizeof first);
    if (failed) { /* the controller fails the drain, naming them; the shards are still here */
      lm_warn("drain: %u shard copies failed (%s)", failed, first);
      if (w->conn) lm_conn_send_errorf(w->conn, d->rid, LOOM_WORKER_LOST, "%u shard copies failed, e.g. %s", failed, first);
    } else {
      Lmw__Ack ack = LMW__ACK__INIT;
      wk_send(w, LM_MSG_ACK, d->rid, &ack.base);
    }
    d->acked = true;
    lm_info(failed ? "drained with failed copies; leaving" : "drained: this worker's shards are on their new worker; leaving");
    uv_timer_start(&d->timer, drain_tick, 200, 0); /* the ACK goes out first */
    return;
  }
  uv_timer_stop(&d->timer);
  d->timer.data = d;
  uv_close((uv_handle_t *)&d->timer, drain_closed);
  wk_finish(w, 0, NULL);
}

void wk_on_drain(wk *w, uint64_t rid) {
  ck_drain *d = calloc(1, sizeof *d);
  if (!d || uv_timer_init(&w->loop, &d->timer) != 0) {
    free(d);
    if (w->conn) lm_conn_send_errorf(w->conn, rid, LOOM_NO_MEMORY, "out of host memory");
    return;
  }
  d->w = w;
  d->rid = rid;
  d->since = uv_now(&w->loop);
  uv_timer_stop(&w->timer); /* no more heartbeats: the controller no longer counts this worker */
  d->timer.data = d;
  uv_timer_start(&d->timer, drain_tick, 0, 20);
}
