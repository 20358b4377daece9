/* Checkpoints at the controller (docs/elastic.md "Checkpoints"). A checkpoint is a directory
 * <checkpoint-dir>/<user>/<name>/ holding safetensors files written by the workers in parallel
 * (each worker writes the shards it holds; a replicated region is written once) and a manifest,
 * manifest.json, written last: to a temporary name, fsync'd, then renamed over the old one, so a
 * checkpoint that is half written is never loadable and saving again over a name replaces it in
 * one step. The manifest records each array's global shape, dtype and sharding, which file holds
 * which slice (its tensor key, region and byte offset) and the CRC-32 of every 1 MiB block of
 * every file.
 *
 * Loading creates the session's new arrays with any sharding over any devices: each target
 * shard is planned as the pieces of saved slices that overlap it, and each worker reads exactly
 * those byte ranges (rounded to the checked blocks) into its new shards.
 *
 * Access: checkpoints live under a directory per token user (without --tokens-file every client
 * is the same user); a session names and sees only its user's checkpoints. Files are 0600 and
 * directories 0700, owned by the daemons' user.
 *
 * Everything here runs on the loop thread except the file work (manifests, directory listings,
 * verification), which runs on the loop's thread pool. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "common/dtype.h"
#include "common/log.h"
#include "common/stfile.h"
#include "controller/ctl.h"

/* paths are built in PATH_MAX buffers from a checked root and checked names: they fit */
#pragma GCC diagnostic ignored "-Wformat-truncation"

#define CK_NAME_MAX 128
#define CK_TENSOR_NAME_MAX 200
#define CK_MANIFEST "manifest.json"
#define CK_MANIFEST_MAX ((size_t)256 << 20)
#define CK_FORMAT "loom-checkpoint"
#define R LM_SHARD_MAX_RANK

struct ctl_ckpt {
  char root[PATH_MAX];       /* "" : no checkpoint directory */
  struct ck_op *ops;         /* in progress */
  uint64_t counter;
};

/* ---- the manifest ---- */

typedef struct mf_slice {
  uint32_t file;
  const char *key;
  uint64_t data_offset;
  int64_t off[R], sd[R];
} mf_slice;

typedef struct mf_array {
  const char *name;
  lm_dtype dtype;
  int rank;
  int64_t dims[R];
  lm_sharding sh;            /* sh.devices = devs */
  uint32_t *devs;            /* [sh.ndev] (malloc'd) */
  mf_slice *slices;
  size_t nslices;
} mf_array;

typedef struct mf_file {
  const char *path;          /* a name inside the checkpoint's directory */
  uint32_t worker;
  uint64_t size;
  uint32_t block;
  uint32_t *crc;
  size_t ncrc;
} mf_file;

typedef struct manifest {
  cJSON *root;               /* the strings above point into it */
  mf_file *files;
  size_t nfiles;
  mf_array *arrays;
  size_t narrays;
  double created_ms;
} manifest;

static void mf_free(manifest *m) {
  for (size_t i = 0; m->files && i < m->nfiles; i++) free(m->files[i].crc);
  for (size_t i = 0; m->arrays && i < m->narrays; i++) free(m->arrays[i].slices), free(m->arrays[i].devs);
  free(m->files);
  free(m->arrays);
  cJSON_Delete(m->root);
  memset(m, 0, sizeof *m);
}

static bool json_u64(const cJSON *j, uint64_t *out) {
  if (!cJSON_IsNumber(j) || j->valuedouble < 0 || j->valuedouble > 9007199254740992.0 ||
      j->valuedouble != (double)(uint64_t)j->valuedouble)
    return false;
  *out = (uint64_t)j->valuedouble;
  return true;
}

static int int_list(const cJSON *j, int64_t *out, int max, int *n) {
  if (!cJSON_IsArray(j)) return -1;
  int k = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, j) {
    uint64_t v;
    if (k >= max || !json_u64(e, &v) || v > (uint64_t)INT64_MAX) return -1;
    out[k++] = (int64_t)v;
  }
  *n = k;
  return 0;
}

static bool safe_file_name(const char *s) {
  if (!s || !s[0] || s[0] == '.' || strlen(s) > 200) return false;
  for (const char *p = s; *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '-' ||
          *p == '_' || *p == '.'))
      return false;
  return true;
}

/* Parses and checks a manifest's text (taken: freed here or kept in m->root). `what` names it in
 * errors. Nothing in it is trusted: a file that does not say what a checkpoint says is an error. */
static int mf_parse(char *text, const char *what, manifest *m, lm_err *err) {
  memset(m, 0, sizeof *m);
  m->root = cJSON_Parse(text);
  free(text);
  if (!m->root) return lm_errf(err, LOOM_IO, "%s is not valid JSON (truncated or corrupt)", what);
  int rc = 0;
  int64_t *devs = NULL;
#define BAD(...) do { rc = lm_errf(err, LOOM_IO, __VA_ARGS__); goto out; } while (0)
  const cJSON *fmt = cJSON_GetObjectItem(m->root, "format"), *ver = cJSON_GetObjectItem(m->root, "version");
  if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, CK_FORMAT) || !cJSON_IsNumber(ver) || ver->valuedouble != 1)
    BAD("%s is not a version-1 Loom checkpoint manifest", what);
  const cJSON *ct = cJSON_GetObjectItem(m->root, "created_unix_ms");
  m->created_ms = cJSON_IsNumber(ct) ? ct->valuedouble : 0;
  const cJSON *files = cJSON_GetObjectItem(m->root, "files"), *arrays = cJSON_GetObjectItem(m->root, "arrays");
  if (!cJSON_IsArray(files) || !cJSON_IsArray(arrays)) BAD("%s has no files or arrays list", what);
  m->nfiles = (size_t)cJSON_GetArraySize(files);
  m->narrays = (size_t)cJSON_GetArraySize(arrays);
  m->files = calloc(m->nfiles ? m->nfiles : 1, sizeof *m->files);
  m->arrays = calloc(m->narrays ? m->narrays : 1, sizeof *m->arrays);
  if (!m->files || !m->arrays) {
    rc = lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
    goto out;
  }
  size_t i = 0;
  const cJSON *e;
  devs = malloc(LM_SHARD_MAX_DEVICES * sizeof *devs); /* scratch: an array's device list */
  if (!devs) {
    rc = lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
    goto out;
  }
  cJSON_ArrayForEach(e, files) {
    mf_file *f = &m->files[i];
    const cJSON *path = cJSON_GetObjectItem(e, "path"), *crc = cJSON_GetObjectItem(e, "crc32");
    uint64_t size, block, worker = 0;
    if (!cJSON_IsString(path) || !safe_file_name(path->valuestring) ||
        !json_u64(cJSON_GetObjectItem(e, "size"), &size) || !json_u64(cJSON_GetObjectItem(e, "block"), &block) ||
        block == 0 || block > UINT32_MAX || !cJSON_IsArray(crc))
      BAD("%s: file %zu is malformed", what, i);
    json_u64(cJSON_GetObjectItem(e, "worker"), &worker);
    f->path = path->valuestring;
    f->size = size;
    f->block = (uint32_t)block;
    f->worker = (uint32_t)worker;
    f->ncrc = (size_t)cJSON_GetArraySize(crc);
    if (f->ncrc != lm_st_nblocks(size, f->block)) BAD("%s: file %s has the wrong number of checksums", what, f->path);
    f->crc = malloc((f->ncrc ? f->ncrc : 1) * sizeof *f->crc);
    if (!f->crc) {
      rc = lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
      goto out;
    }
    size_t k = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, crc) {
      uint64_t v;
      if (!json_u64(c, &v) || v > UINT32_MAX) BAD("%s: file %s has a bad checksum", what, f->path);
      f->crc[k++] = (uint32_t)v;
    }
    i++;
  }
  i = 0;
  cJSON_ArrayForEach(e, arrays) {
    mf_array *a = &m->arrays[i];
    const cJSON *name = cJSON_GetObjectItem(e, "name"), *dt = cJSON_GetObjectItem(e, "dtype");
    const cJSON *sh = cJSON_GetObjectItem(e, "sharding"), *slices = cJSON_GetObjectItem(e, "slices");
    if (!cJSON_IsString(name) || !cJSON_IsString(dt) || !cJSON_IsObject(sh) || !cJSON_IsArray(slices))
      BAD("%s: array %zu is malformed", what, i);
    a->name = name->valuestring;
    a->dtype = lm_dtype_from_mlir(dt->valuestring, strlen(dt->valuestring));
    if (a->dtype == LOOM_DTYPE_INVALID) BAD("%s: array %s has an unknown dtype", what, a->name);
    if (int_list(cJSON_GetObjectItem(e, "shape"), a->dims, R, &a->rank) < 0)
      BAD("%s: array %s has a bad shape", what, a->name);
    lm_sharding_init(&a->sh);
    int64_t mesh[LM_MESH_MAX_AXES];
    int nm, nd;
    if (int_list(cJSON_GetObjectItem(sh, "mesh_shape"), mesh, LM_MESH_MAX_AXES, &nm) < 0 ||
        int_list(cJSON_GetObjectItem(sh, "devices"), devs, LM_SHARD_MAX_DEVICES, &nd) < 0 || nd < 1)
      BAD("%s: array %s has a bad sharding", what, a->name);
    a->devs = malloc((size_t)nd * sizeof *a->devs);
    if (!a->devs) {
      rc = lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
      goto out;
    }
    a->sh.mesh_rank = nm;
    for (int k = 0; k < nm; k++) a->sh.mesh_shape[k] = mesh[k];
    for (int k = 0; k < nd; k++) {
      if (devs[k] > UINT32_MAX) BAD("%s: array %s has a bad sharding", what, a->name);
      a->devs[k] = (uint32_t)devs[k];
    }
    a->sh.ndev = (uint32_t)nd;
    a->sh.devices = a->devs;
    const cJSON *da = cJSON_GetObjectItem(sh, "dim_axes"), *dd;
    if (!cJSON_IsArray(da) || cJSON_GetArraySize(da) > a->rank) BAD("%s: array %s has a bad sharding", what, a->name);
    int d = 0;
    cJSON_ArrayForEach(dd, da) {
      int64_t ax[LM_MESH_MAX_AXES];
      int na;
      if (int_list(dd, ax, LM_MESH_MAX_AXES, &na) < 0) BAD("%s: array %s has a bad sharding", what, a->name);
      for (int k = 0; k < na; k++) {
        if (ax[k] >= nm) BAD("%s: array %s has a bad sharding", what, a->name);
        a->sh.dim_axes[d][k] = (int8_t)ax[k];
      }
      d++;
    }
    lm_err e2;
    if (lm_sharding_check(&a->sh, a->rank, a->dims, &e2) < 0)
      BAD("%s: array %s's sharding does not fit its shape: %s", what, a->name, e2.msg);
    a->nslices = (size_t)cJSON_GetArraySize(slices);
    a->slices = calloc(a->nslices ? a->nslices : 1, sizeof *a->slices);
    if (!a->slices) {
      rc = lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
      goto out;
    }
    uint64_t numel, covered = 0, es = lm_dtype_size(a->dtype);
    if (lm_dims_numel(a->rank, a->dims, &numel) < 0) BAD("%s: array %s's shape overflows", what, a->name);
    size_t k = 0;
    const cJSON *s;
    cJSON_ArrayForEach(s, slices) {
      mf_slice *x = &m->arrays[i].slices[k];
      const cJSON *key = cJSON_GetObjectItem(s, "key");
      uint64_t file, doff;
      int no, ns;
      if (!cJSON_IsString(key) || !json_u64(cJSON_GetObjectItem(s, "file"), &file) || file >= m->nfiles ||
          !json_u64(cJSON_GetObjectItem(s, "data_offset"), &doff) ||
          int_list(cJSON_GetObjectItem(s, "offsets"), x->off, R, &no) < 0 ||
          int_list(cJSON_GetObjectItem(s, "shape"), x->sd, R, &ns) < 0 || no != a->rank || ns != a->rank)
        BAD("%s: array %s: slice %zu is malformed", what, a->name, k);
      uint64_t n = 1;
      for (int q = 0; q < a->rank; q++) {
        if (x->off[q] > a->dims[q] || x->sd[q] > a->dims[q] - x->off[q])
          BAD("%s: array %s: slice %zu lies outside the array", what, a->name, k);
        n *= (uint64_t)x->sd[q];
      }
      if (doff > m->files[file].size || n * es > m->files[file].size - doff)
        BAD("%s: array %s: slice %zu lies outside its file %s", what, a->name, k, m->files[file].path);
      x->file = (uint32_t)file;
      x->key = key->valuestring;
      x->data_offset = doff;
      covered += n;
      k++;
    }
    if (covered != numel) BAD("%s: array %s's slices do not cover it exactly", what, a->name);
    i++;
  }
#undef BAD
out:
  free(devs);
  if (rc < 0) mf_free(m);
  return rc;
}

static const mf_array *mf_find(const manifest *m, const char *name) {
  for (size_t i = 0; i < m->narrays; i++)
    if (!strcmp(m->arrays[i].name, name)) return &m->arrays[i];
  return NULL;
}

/* ---- file helpers (thread pool) ---- */

static int read_text(const char *path, size_t max, char **out, lm_err *err) {
  *out = NULL;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return lm_errf(err, errno == ENOENT ? LOOM_NOT_FOUND : LOOM_IO, "%s: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || (size_t)st.st_size > max) {
    close(fd);
    return lm_errf(err, LOOM_IO, "%s is too large or unreadable", path);
  }
  char *buf = malloc((size_t)st.st_size + 1);
  size_t n = 0;
  while (buf && n < (size_t)st.st_size) {
    ssize_t k = read(fd, buf + n, (size_t)st.st_size - n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) break;
    n += (size_t)k;
  }
  close(fd);
  if (!buf) return lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  buf[n] = 0;
  *out = buf;
  return 0;
}

static int mkdir_p(const char *path, lm_err *err) {
  char tmp[PATH_MAX];
  snprintf(tmp, sizeof tmp, "%s", path);
  for (char *p = tmp + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    if (mkdir(tmp, 0700) != 0 && errno != EEXIST)
      return lm_errf(err, LOOM_IO, "cannot create the checkpoint directory %s: %s", tmp, strerror(errno));
    *p = '/';
  }
  if (mkdir(tmp, 0700) != 0 && errno != EEXIST)
    return lm_errf(err, LOOM_IO, "cannot create the checkpoint directory %s: %s", tmp, strerror(errno));
  return 0;
}

static void fsync_dir(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    fsync(fd);
    close(fd);
  }
}

/* ---- operations ---- */

typedef struct ck_piece {    /* save: one tensor a worker writes */
  size_t entry;
  uint32_t shard;            /* the shard index of the array it comes from */
  char key[CK_TENSOR_NAME_MAX + 16 * 44];
} ck_piece;

typedef struct ck_worker {
  uint32_t worker;
  uint64_t rid;              /* 0: answered */
  char file[96];             /* save: its file's name in the directory */
  ck_piece *pieces;
  size_t n, cap;
  Lmw__CheckpointIo io;      /* load: the request being built */
  Lmw__CkptSlice **slices, **targets;
  Lmw__CkptFile **files;
  int32_t *file_of;          /* load: manifest file index -> index in files, -1 */
  Lmw__CheckpointIoReply *reply;
} ck_worker;

typedef struct ck_entry {
  char *name;
  uint64_t array;            /* save: the session's array; load: the new one */
  const c_array *a;          /* save: = &meta */
  c_array meta;              /* save: a copy of the array's shape and sharding (the array itself may be
                                deleted, or its session closed, while the files are written) */
  const mf_array *saved;     /* load */
  bool created;              /* load: the array exists in the session */
} ck_entry;

typedef struct ck_op {
  ctl *c;
  peer *client;              /* NULL once gone */
  uint64_t rid;
  int op;                    /* LMW__CHECKPOINT_OP__CKPT_* */
  char name[CK_NAME_MAX + 1];
  char dir[PATH_MAX];        /* the checkpoint's directory */
  char user_dir[PATH_MAX];
  char save_id[48];
  ck_entry *ent;
  size_t nent;
  ck_worker *ws;
  size_t nws, pending;
  int rc;                    /* the first failure */
  lm_err err;
  uv_work_t req;
  void (*work)(struct ck_op *);
  void (*after)(struct ck_op *);
  char *text;                /* the manifest read or to write; the result JSON */
  manifest mf;
  Lmw__Checkpoint *req_copy; /* load: the request, kept until its arrays are planned */
  uint64_t t0_ns, bytes;
  struct ck_op *next;
} ck_op;

/* A directory a client may name (Checkpoint.dir): absolute, no "." or ".." component, no control
 * characters, room for the files' names under PATH_MAX. why gets the reason when not. */
static bool dir_ok(const char *d, char *why, size_t cap) {
  size_t n = strlen(d);
  if (d[0] != '/') return snprintf(why, cap, "is not an absolute path"), false;
  if (n > PATH_MAX - 128) return snprintf(why, cap, "is longer than %d bytes", PATH_MAX - 128), false;
  for (const char *c = d; *c; c++)
    if ((unsigned char)*c < 0x20 || *c == 0x7f) return snprintf(why, cap, "has a control character"), false;
  for (const char *c = d; *c;) {
    while (*c == '/') c++;
    size_t l = strcspn(c, "/");
    if ((l == 1 && c[0] == '.') || (l == 2 && c[0] == '.' && c[1] == '.'))
      return snprintf(why, cap, "has a '.' or '..' component"), false;
    c += l;
  }
  if (!strcmp(d, "/")) return snprintf(why, cap, "is the root directory"), false;
  return true;
}

static bool name_ok(const char *s) { return s && strlen(s) <= CK_NAME_MAX && safe_file_name(s); }

static bool tensor_name_ok(const char *s) {
  size_t n = s ? strlen(s) : 0;
  if (n == 0 || n > CK_TENSOR_NAME_MAX || !strcmp(s, "__metadata__")) return false;
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] > 0x7e || s[i] == '"' || s[i] == '\\' || s[i] == '[' ||
        s[i] == ']')
      return false;
  return true;
}

int ctl_ckpt_init(ctl *c, lm_err *err) {
  c->ckpt = calloc(1, sizeof *c->ckpt);
  if (!c->ckpt) return lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  const char *dir = c->cfg.checkpoint_dir;
  if (!dir || !dir[0]) return 0;
  LM_TRY(mkdir_p(dir, err));
  if (!realpath(dir, c->ckpt->root))
    return lm_errf(err, LOOM_IO, "checkpoint directory %s: %s", dir, strerror(errno));
  if (access(c->ckpt->root, W_OK | X_OK) != 0)
    return lm_errf(err, LOOM_PERMISSION, "checkpoint directory %s is not writable: %s", c->ckpt->root,
                   strerror(errno));
  lm_info("checkpoints go to %s", c->ckpt->root);
  return 0;
}

static void op_free(ck_op *o) {
  for (size_t i = 0; i < o->nent; i++) free(o->ent[i].name), free(o->ent[i].meta.devs);
  free(o->ent);
  for (size_t k = 0; k < o->nws; k++) {
    ck_worker *w = &o->ws[k];
    free(w->pieces);
    for (size_t i = 0; i < w->io.n_slices; i++) {
      Lmw__CkptSlice *s = w->slices[i];
      free(s->src_dims), free(s->src_off), free(s->dst_off), free(s->extent), free(s);
    }
    for (size_t i = 0; i < w->io.n_targets; i++) free(w->targets[i]->dims), free(w->targets[i]);
    for (size_t i = 0; i < w->io.n_files; i++) free(w->files[i]->path), free(w->files[i]);
    if (w->io.write) free(w->io.path);
    free(w->slices), free(w->targets), free(w->files), free(w->file_of);
    if (w->reply) lm_msg_free(&w->reply->base);
  }
  free(o->ws);
  free(o->text);
  mf_free(&o->mf);
  if (o->req_copy) lmw__checkpoint__free_unpacked(o->req_copy, NULL);
  free(o);
}

static void op_unlink(ctl *c, ck_op *o) {
  for (ck_op **pp = &c->ckpt->ops; *pp; pp = &(*pp)->next)
    if (*pp == o) {
      *pp = o->next;
      return;
    }
}

void ctl_ckpt_free(ctl *c) {
  if (!c->ckpt) return;
  /* operations whose thread-pool work is queued are freed when it completes (the loop runs out) */
  for (ck_op *o = c->ckpt->ops, *n; o; o = n) {
    n = o->next;
    if (!o->work) op_free(o);
    else o->c = NULL;
  }
  free(c->ckpt);
  c->ckpt = NULL;
}

static void op_reply_json(ck_op *o, const char *json) {
  if (!o->client) return;
  Lmw__CheckpointReply r = LMW__CHECKPOINT_REPLY__INIT;
  r.json = (char *)json;
  ctl_send_reply(o->client, o->rid, LM_MSG_CHECKPOINT_REPLY, &r.base); /* after what it reveals is journaled */
}

static void op_fail_reply(ck_op *o) {
  if (o->client) ctl_reply_error(o->client, o->rid, o->rc, "%s", o->err.msg);
}

static int op_failf(ck_op *o, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int op_failf(ck_op *o, int code, const char *fmt, ...) {
  if (o->rc < 0) return o->rc;
  va_list ap;
  va_start(ap, fmt);
  lm_verrf(&o->err, code, fmt, ap);
  va_end(ap);
  return o->rc = code;
}

static void job_work(uv_work_t *req) {
  ck_op *o = req->data;
  o->work(o);
}

static void job_after(uv_work_t *req, int status) {
  ck_op *o = req->data;
  (void)status;
  o->work = NULL;
  if (!o->c) { /* the controller stopped meanwhile */
    op_free(o);
    return;
  }
  o->after(o);
}

static void run_job(ck_op *o, void (*work)(ck_op *), void (*after)(ck_op *)) {
  o->work = work;
  o->after = after;
  o->req.data = o;
  if (uv_queue_work(&o->c->loop, &o->req, job_work, job_after) != 0) {
    o->work = NULL;
    op_failf(o, LOOM_NO_MEMORY, "cannot queue the checkpoint's file work");
    after(o);
  }
}

static void op_done(ck_op *o) {
  op_unlink(o->c, o);
  op_free(o);
}

static double elapsed_s(const ck_op *o) { return (double)(uv_hrtime() - o->t0_ns) / 1e9; }

static uint64_t unix_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Who a session is on disk: its token user, or "_" without tokens (hex for unusual names). */
static void user_component(const peer *p, char *buf, size_t cap) {
  if (!p->user[0]) {
    snprintf(buf, cap, "_");
    return;
  }
  if (safe_file_name(p->user)) {
    snprintf(buf, cap, "%s", p->user);
    return;
  }
  size_t n = 0;
  n += (size_t)snprintf(buf, cap, "x-");
  for (const unsigned char *s = (const unsigned char *)p->user; *s && n + 3 < cap; s++)
    n += (size_t)snprintf(buf + n, cap - n, "%02x", *s);
}

static ck_worker *worker_slot(ck_op *o, uint32_t worker) {
  for (size_t k = 0; k < o->nws; k++)
    if (o->ws[k].worker == worker) return &o->ws[k];
  ck_worker *g = realloc(o->ws, (o->nws + 1) * sizeof *g);
  if (!g) return NULL;
  o->ws = g;
  ck_worker *w = &o->ws[o->nws++];
  memset(w, 0, sizeof *w);
  w->worker = worker;
  lmw__checkpoint_io__init(&w->io);
  return w;
}

/* Sends every worker its request; false (o->rc set) when one could not be sent. */
static bool send_all(ck_op *o) {
  ctl *c = o->c;
  for (size_t k = 0; k < o->nws; k++) {
    ck_worker *w = &o->ws[k];
    w->rid = c->next_rid++;
    lm_err err;
    if (w->worker >= c->worker_peer_cap || !c->worker_peer[w->worker]) {
      char wn[160];
      ctl_worker_name(c, w->worker, wn, sizeof wn);
      op_failf(o, LOOM_WORKER_LOST, "%s is not connected", wn);
      w->rid = 0;
      continue;
    }
    if (ctl_worker_send(c, w->worker, LM_MSG_CHECKPOINT_IO, w->rid, &w->io.base, NULL, 0, &err) < 0) {
      op_failf(o, err.code, "%s", err.msg);
      w->rid = 0;
      continue;
    }
    o->pending++;
  }
  return o->rc == 0;
}

/* ---- save ---- */

static void save_cleanup_work(ck_op *o) { /* removes this save's files (it failed) */
  for (size_t k = 0; k < o->nws; k++) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", o->dir, o->ws[k].file);
    unlink(path);
  }
}

static void save_cleanup_done(ck_op *o) {
  op_fail_reply(o);
  op_done(o);
}

/* Whether a file name is one a save writes: <hex>-<hex>-w<digits>.safetensors (a directory a
 * client named may hold other files, never removed). */
static bool saved_file_name(const char *n) {
  const char *c = n;
  for (int part = 0; part < 2; part++) {
    const char *b = c;
    while ((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'f')) c++;
    if (c == b || *c++ != '-') return false;
  }
  if (*c++ != 'w') return false;
  const char *b = c;
  while (*c >= '0' && *c <= '9') c++;
  return c != b && !strcmp(c, ".safetensors");
}

static void save_commit_work(ck_op *o) {
  char tmp[PATH_MAX], path[PATH_MAX];
  snprintf(tmp, sizeof tmp, "%s/.%s.tmp", o->dir, CK_MANIFEST);
  snprintf(path, sizeof path, "%s/%s", o->dir, CK_MANIFEST);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  size_t n = strlen(o->text), done = 0;
  int e = fd < 0 ? errno : 0;
  while (!e && done < n) {
    ssize_t k = write(fd, o->text + done, n - done);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) e = k < 0 ? errno : ENOSPC;
    else done += (size_t)k;
  }
  if (!e && fsync(fd) != 0) e = errno;
  if (fd >= 0 && close(fd) != 0 && !e) e = errno;
  if (!e && rename(tmp, path) != 0) e = errno;
  if (e) {
    unlink(tmp);
    lm_errf(&o->err, LOOM_IO, "cannot write the manifest of checkpoint '%s' (%s): %s", o->name, path, strerror(e));
    o->rc = LOOM_IO;
    save_cleanup_work(o);
    return;
  }
  fsync_dir(o->dir);
  /* the files of an older save of the same name are no longer named by the manifest */
  DIR *d = opendir(o->dir);
  struct dirent *de;
  size_t idl = strlen(o->save_id);
  while (d && (de = readdir(d))) {
    if (saved_file_name(de->d_name) && (strncmp(de->d_name, o->save_id, idl) || de->d_name[idl] != '-')) {
      char old[PATH_MAX];
      snprintf(old, sizeof old, "%s/%s", o->dir, de->d_name);
      unlink(old);
    }
  }
  if (d) closedir(d);
}

static void save_commit_done(ck_op *o) {
  if (o->rc < 0) {
    op_fail_reply(o);
    op_done(o);
    return;
  }
  double s = elapsed_s(o);
  char json[1024 + PATH_MAX];
  snprintf(json, sizeof json,
           "{\"name\":\"%s\",\"dir\":\"%s\",\"arrays\":%zu,\"files\":%zu,\"bytes\":%llu,\"seconds\":%.6f}", o->name,
           o->dir, o->nent, o->nws, (unsigned long long)o->bytes, s);
  lm_info("checkpoint '%s' saved: %zu arrays, %zu files, %llu bytes in %.3f s", o->name, o->nent, o->nws,
          (unsigned long long)o->bytes, s);
  op_reply_json(o, json);
  op_done(o);
}

static cJSON *sharding_json(const lm_sharding *sh, int rank, const peer *p) {
  cJSON *j = cJSON_CreateObject(), *mesh = cJSON_CreateArray(), *devs = cJSON_CreateArray(), *da = cJSON_CreateArray();
  for (int k = 0; k < sh->mesh_rank; k++) cJSON_AddItemToArray(mesh, cJSON_CreateNumber((double)sh->mesh_shape[k]));
  for (uint32_t k = 0; k < sh->ndev; k++) {
    uint32_t v = sh->devices[k];
    ctl_pool_map_out(p, &v, 1); /* the session's own numbering */
    cJSON_AddItemToArray(devs, cJSON_CreateNumber(v));
  }
  for (int d = 0; d < rank; d++) {
    cJSON *ax = cJSON_CreateArray();
    for (int k = 0; k < LM_MESH_MAX_AXES && sh->dim_axes[d][k] >= 0; k++)
      cJSON_AddItemToArray(ax, cJSON_CreateNumber(sh->dim_axes[d][k]));
    cJSON_AddItemToArray(da, ax);
  }
  cJSON_AddItemToObject(j, "mesh_shape", mesh);
  cJSON_AddItemToObject(j, "devices", devs);
  cJSON_AddItemToObject(j, "dim_axes", da);
  return j;
}

static cJSON *dims_json(const int64_t *v, int n) {
  cJSON *a = cJSON_CreateArray();
  for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber((double)v[i]));
  return a;
}

/* Every worker wrote its file: the manifest, then the commit on the thread pool. */
static void save_written(ck_op *o) {
  cJSON *root = cJSON_CreateObject(), *files = cJSON_CreateArray(), *arrays = cJSON_CreateArray();
  cJSON_AddStringToObject(root, "format", CK_FORMAT);
  cJSON_AddNumberToObject(root, "version", 1);
  cJSON_AddStringToObject(root, "name", o->name);
  cJSON_AddStringToObject(root, "save_id", o->save_id);
  cJSON_AddNumberToObject(root, "created_unix_ms", (double)unix_ms());
  cJSON_AddItemToObject(root, "files", files);
  cJSON_AddItemToObject(root, "arrays", arrays);
  for (size_t k = 0; k < o->nws; k++) {
    ck_worker *w = &o->ws[k];
    const Lmw__CkptFile *f = w->reply->file;
    cJSON *j = cJSON_CreateObject(), *crc = cJSON_CreateArray();
    cJSON_AddStringToObject(j, "path", w->file);
    cJSON_AddNumberToObject(j, "worker", w->worker);
    cJSON_AddNumberToObject(j, "size", (double)f->size);
    cJSON_AddNumberToObject(j, "block", f->block);
    for (size_t b = 0; b < f->n_crc32; b++) cJSON_AddItemToArray(crc, cJSON_CreateNumber(f->crc32[b]));
    cJSON_AddItemToObject(j, "crc32", crc);
    cJSON_AddItemToArray(files, j);
    o->bytes += w->reply->bytes;
  }
  for (size_t i = 0; i < o->nent; i++) {
    const c_array *a = o->ent[i].a;
    cJSON *j = cJSON_CreateObject(), *slices = cJSON_CreateArray();
    uint64_t numel = 1;
    for (int d = 0; d < a->rank; d++) numel *= (uint64_t)a->dims[d];
    cJSON_AddStringToObject(j, "name", o->ent[i].name);
    cJSON_AddStringToObject(j, "dtype", lm_dtype_name(a->dtype));
    cJSON_AddItemToObject(j, "shape", dims_json(a->dims, a->rank));
    cJSON_AddNumberToObject(j, "nbytes", (double)(numel * lm_dtype_size(a->dtype)));
    cJSON_AddItemToObject(j, "sharding", sharding_json(&a->sh, a->rank, o->client));
    for (size_t k = 0; k < o->nws; k++)
      for (size_t q = 0; q < o->ws[k].n; q++) {
        const ck_piece *pc = &o->ws[k].pieces[q];
        if (pc->entry != i) continue;
        int64_t off[R], sd[R];
        lm_sharding_shard(&a->sh, a->rank, a->dims, pc->shard, off, sd);
        cJSON *s = cJSON_CreateObject();
        cJSON_AddNumberToObject(s, "file", (double)k);
        cJSON_AddStringToObject(s, "key", pc->key);
        cJSON_AddItemToObject(s, "offsets", dims_json(off, a->rank));
        cJSON_AddItemToObject(s, "shape", dims_json(sd, a->rank));
        cJSON_AddNumberToObject(s, "data_offset", (double)o->ws[k].reply->data_offsets[q]);
        cJSON_AddItemToArray(slices, s);
      }
    cJSON_AddItemToObject(j, "slices", slices);
    cJSON_AddItemToArray(arrays, j);
  }
  o->text = cJSON_Print(root);
  cJSON_Delete(root);
  if (!o->text) {
    op_failf(o, LOOM_NO_MEMORY, "out of host memory");
    run_job(o, save_cleanup_work, save_cleanup_done);
    return;
  }
  run_job(o, save_commit_work, save_commit_done);
}

static void save_prep_work(ck_op *o) {
  lm_err err;
  if (mkdir_p(o->dir, &err) < 0) {
    o->err = err;
    o->rc = err.code;
    return;
  }
  if (access(o->dir, W_OK | X_OK) != 0) {
    o->rc = lm_errf(&o->err, LOOM_PERMISSION, "checkpoint directory %s is not writable: %s", o->dir, strerror(errno));
  }
}

static void save_prep_done(ck_op *o) {
  if (o->rc == 0 && !o->client) op_failf(o, LOOM_CANCELLED, "its client is gone");
  if (o->rc < 0) {
    op_fail_reply(o);
    op_done(o);
    return;
  }
  send_all(o);
  if (o->pending == 0) run_job(o, save_cleanup_work, save_cleanup_done);
}

/* The key of shard region (off, sd) of an array in a file: its name when it is the whole array,
 * else name[o0:e0,o1:e1,...]. */
static void slice_key(char *buf, size_t cap, const char *name, const c_array *a, const int64_t *off, const int64_t *sd) {
  bool whole = true;
  for (int d = 0; d < a->rank; d++) whole &= off[d] == 0 && sd[d] == a->dims[d];
  size_t n = (size_t)snprintf(buf, cap, "%s", name);
  if (whole) return;
  n += (size_t)snprintf(buf + n, cap - n, "[");
  for (int d = 0; d < a->rank && n < cap; d++)
    n += (size_t)snprintf(buf + n, cap - n, "%s%lld:%lld", d ? "," : "", (long long)off[d], (long long)(off[d] + sd[d]));
  if (n < cap) snprintf(buf + n, cap - n, "]");
}

/* Plans a save; true when it was handed to the thread pool (o may be freed by then), false when it
 * failed at once (o->rc set). */
static bool on_save(ck_op *o, peer *p, const Lmw__Checkpoint *m) {
  ctl *c = o->c;
  if (m->n_entries == 0) {
    op_failf(o, LOOM_INVALID_ARGUMENT, "a checkpoint save needs at least one array");
    return false;
  }
  o->ent = calloc(m->n_entries, sizeof *o->ent);
  if (!o->ent) {
    op_failf(o, LOOM_NO_MEMORY, "out of host memory");
    return false;
  }
  o->nent = m->n_entries;
  uint64_t *load = calloc(lm_registry_worker_count(c->reg) + 1, sizeof *load); /* bytes planned per worker */
  if (!load) {
    op_failf(o, LOOM_NO_MEMORY, "out of host memory");
    return false;
  }
  for (size_t i = 0; o->rc == 0 && i < m->n_entries; i++) {
    const Lmw__CheckpointEntry *e = m->entries[i];
    if (!tensor_name_ok(e->name)) {
      op_failf(o, LOOM_INVALID_ARGUMENT, "array name '%.60s' is empty, too long or has a character a checkpoint "
               "cannot hold (\", \\, [, ], or control characters)", e->name ? e->name : "");
      break;
    }
    for (size_t j = 0; j < i; j++)
      if (!strcmp(o->ent[j].name, e->name)) op_failf(o, LOOM_INVALID_ARGUMENT, "array name '%s' appears twice", e->name);
    o->ent[i].name = strdup(e->name);
    o->ent[i].array = e->array;
    c_array *a = lm_session_get(p->session, e->array, H_ARRAY);
    if (!o->ent[i].name) op_failf(o, LOOM_NO_MEMORY, "out of host memory");
    else if (!a)
      op_failf(o, LOOM_NOT_FOUND, "array %llu %s", (unsigned long long)e->array,
               lm_session_was_deleted(p->session, e->array) ? "was deleted" : "does not exist in this session");
    else if (a->state == A_FAILED)
      op_failf(o, a->code, "array %llu (%s) cannot be saved: %s", (unsigned long long)a->id, e->name,
               a->msg ? a->msg : "its producer failed");
    else if (!lm_st_dtype_name(a->dtype))
      op_failf(o, LOOM_UNSUPPORTED, "array %s has dtype %s, which safetensors cannot hold", e->name,
               lm_dtype_name(a->dtype));
    if (o->rc < 0) break;
    o->ent[i].meta = *a;
    o->ent[i].meta.devs = malloc(a->sh.ndev * sizeof *a->devs);
    if (!o->ent[i].meta.devs) {
      op_failf(o, LOOM_NO_MEMORY, "out of host memory");
      break;
    }
    memcpy(o->ent[i].meta.devs, a->devs, a->sh.ndev * sizeof *a->devs);
    o->ent[i].meta.sh.devices = o->ent[i].meta.devs;
    o->ent[i].meta.held = o->ent[i].meta.bk = NULL;
    o->ent[i].meta.msg = NULL;
    o->ent[i].meta.pool = NULL;
    o->ent[i].a = a = &o->ent[i].meta;
    /* each distinct region once, from the replica whose worker has the least planned so far */
    for (uint32_t k = 0; k < a->sh.ndev && o->rc == 0; k++) {
      int64_t ok[R], sk[R], oj[R], sj[R];
      lm_sharding_shard(&a->sh, a->rank, a->dims, k, ok, sk);
      bool seen = false;
      for (uint32_t j = 0; j < k && !seen; j++) {
        lm_sharding_shard(&a->sh, a->rank, a->dims, j, oj, sj);
        seen = !memcmp(ok, oj, sizeof(int64_t) * (size_t)a->rank);
      }
      if (seen) continue;
      uint32_t best = UINT32_MAX, bestw = 0;
      for (uint32_t j = k; j < a->sh.ndev; j++) {
        lm_sharding_shard(&a->sh, a->rank, a->dims, j, oj, sj);
        if (memcmp(ok, oj, sizeof(int64_t) * (size_t)a->rank)) continue;
        if (!lm_registry_device_healthy(c->reg, a->devs[j])) continue;
        uint32_t w = lm_registry_device(c->reg, a->devs[j])->worker;
        if (best == UINT32_MAX || load[w] < load[bestw]) best = j, bestw = w;
      }
      if (best == UINT32_MAX) {
        op_failf(o, LOOM_WORKER_LOST, "array %s lost its shard on device %u (%s)", e->name, a->devs[k],
                 lm_registry_device_reason(c->reg, a->devs[k]));
        break;
      }
      uint64_t numel;
      lm_dims_numel(a->rank, sk, &numel);
      load[bestw] += numel * lm_dtype_size(a->dtype);
      ck_worker *w = worker_slot(o, bestw);
      if (!w || (w->n == w->cap && !(w->pieces = realloc(w->pieces, (w->cap = w->cap ? 2 * w->cap : 8) *
                                                                       sizeof *w->pieces)))) {
        op_failf(o, LOOM_NO_MEMORY, "out of host memory");
        break;
      }
      ck_piece *pc = &w->pieces[w->n++];
      pc->entry = i;
      pc->shard = best;
      slice_key(pc->key, sizeof pc->key, e->name, a, ok, sk);
    }
  }
  free(load);
  if (o->rc < 0) return false;
  /* the requests: one file per worker */
  for (size_t k = 0; k < o->nws && o->rc == 0; k++) {
    ck_worker *w = &o->ws[k];
    snprintf(w->file, sizeof w->file, "%s-w%u.safetensors", o->save_id, w->worker);
    w->slices = calloc(w->n, sizeof *w->slices);
    char *path = malloc(PATH_MAX);
    if (!w->slices || !path) {
      free(path);
      op_failf(o, LOOM_NO_MEMORY, "out of host memory");
      break;
    }
    snprintf(path, PATH_MAX, "%s/%s", o->dir, w->file);
    w->io.write = true;
    w->io.path = path; /* freed by op_free */
    for (size_t q = 0; q < w->n; q++) {
      const ck_piece *pc = &w->pieces[q];
      const c_array *a = o->ent[pc->entry].a;
      Lmw__CkptSlice *s = calloc(1, sizeof *s);
      uint64_t *dims = calloc(R, sizeof *dims);
      if (!s || !dims) {
        free(s), free(dims);
        op_failf(o, LOOM_NO_MEMORY, "out of host memory");
        break;
      }
      lmw__ckpt_slice__init(s);
      int64_t off[R], sd[R];
      lm_sharding_shard(&a->sh, a->rank, a->dims, pc->shard, off, sd);
      for (int d = 0; d < a->rank; d++) dims[d] = (uint64_t)sd[d];
      s->session = p->session->id;
      s->array = a->id;
      s->local_index = lm_registry_device(c->reg, a->devs[pc->shard])->local_index;
      s->key = (char *)pc->key;
      s->dtype = (uint32_t)a->dtype;
      s->n_dims = (size_t)a->rank;
      s->dims = dims;
      s->src_dims = dims; /* freed by op_free */
      w->slices[w->io.n_slices++] = s;
    }
    w->io.slices = w->slices;
  }
  if (o->rc < 0) return false;
  run_job(o, save_prep_work, save_prep_done);
  return true;
}

/* ---- load ---- */

static void manifest_read_work(ck_op *o) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/%s", o->dir, CK_MANIFEST);
  lm_err err;
  int rc = read_text(path, CK_MANIFEST_MAX, &o->text, &err);
  if (rc == LOOM_NOT_FOUND) {
    struct stat st;
    if (stat(o->dir, &st) == 0)
      lm_errf(&o->err, LOOM_NOT_FOUND, "checkpoint '%s' is incomplete: it has no manifest (a save that did not "
              "finish)", o->name);
    else
      lm_errf(&o->err, LOOM_NOT_FOUND, "no checkpoint '%s'", o->name);
    o->rc = LOOM_NOT_FOUND;
  } else if (rc < 0) {
    o->err = err;
    o->rc = rc;
  }
}

static void load_finish(ck_op *o) {
  peer *p = o->client;
  if (!p) {
    op_done(o);
    return;
  }
  if (o->rc < 0) {
    uint64_t *ids = malloc((o->nent ? o->nent : 1) * sizeof *ids);
    size_t n = 0;
    for (size_t i = 0; ids && i < o->nent; i++)
      if (o->ent[i].created) ids[n++] = o->ent[i].array;
    if (ids) ctl_arrays_delete(p, ids, n);
    free(ids);
    op_fail_reply(o);
    op_done(o);
    return;
  }
  Lmw__CheckpointLoaded *ls = calloc(o->nent, sizeof *ls);
  Lmw__CheckpointLoaded **lp = calloc(o->nent, sizeof *lp);
  Lmw__Sharding *shs = calloc(o->nent, sizeof *shs);
  Lmw__DimAxes *dax = calloc(o->nent * R, sizeof *dax);
  Lmw__DimAxes **dptr = calloc(o->nent * R, sizeof *dptr);
  uint32_t *axes = calloc(o->nent * R * LM_MESH_MAX_AXES, sizeof *axes);
  uint64_t *mesh = calloc(o->nent * LM_MESH_MAX_AXES, sizeof *mesh);
  uint64_t *dims = calloc(o->nent * R, sizeof *dims);
  uint32_t **devs = calloc(o->nent, sizeof *devs);
  bool ok = ls && lp && shs && dax && dptr && axes && mesh && dims && devs;
  for (size_t i = 0; ok && i < o->nent; i++) {
    c_array *a = lm_session_get(p->session, o->ent[i].array, H_ARRAY);
    if (!a) continue; /* deleted meanwhile */
    a->state = A_READY;
    ctl_j_array(p->ctl, p->session->id, a); /* a restarted controller knows it (ctl_journal.c) */
    lmw__checkpoint_loaded__init(&ls[i]);
    ls[i].name = o->ent[i].name;
    ls[i].array = a->id;
    ls[i].dtype = (uint32_t)a->dtype;
    for (int d = 0; d < a->rank; d++) dims[i * R + d] = (uint64_t)a->dims[d];
    ls[i].dims = dims + i * R;
    ls[i].n_dims = (size_t)a->rank;
    ctl_sharding_to_wire(&a->sh, a->rank, &shs[i], dax + i * R, dptr + i * R, axes + i * R * LM_MESH_MAX_AXES,
                         mesh + i * LM_MESH_MAX_AXES);
    devs[i] = malloc(a->sh.ndev * sizeof *devs[i]);
    if (!devs[i]) {
      ok = false;
      break;
    }
    memcpy(devs[i], a->sh.devices, a->sh.ndev * sizeof *devs[i]);
    ctl_pool_map_out(p, devs[i], a->sh.ndev);
    shs[i].devices = devs[i];
    ls[i].sharding = &shs[i];
    lp[i] = &ls[i];
  }
  if (ok) {
    char json[512];
    double s = elapsed_s(o);
    snprintf(json, sizeof json, "{\"name\":\"%s\",\"arrays\":%zu,\"bytes\":%llu,\"seconds\":%.6f}", o->name, o->nent,
             (unsigned long long)o->bytes, s);
    lm_info("checkpoint '%s' loaded: %zu arrays, %llu bytes read in %.3f s", o->name, o->nent,
            (unsigned long long)o->bytes, s);
    Lmw__CheckpointReply r = LMW__CHECKPOINT_REPLY__INIT;
    r.json = json;
    r.n_loaded = o->nent;
    r.loaded = lp;
    ctl_send_reply(p, o->rid, LM_MSG_CHECKPOINT_REPLY, &r.base); /* held until the new arrays are journaled */
  } else {
    ctl_reply_error(p, o->rid, LOOM_NO_MEMORY, "out of host memory");
  }
  for (size_t i = 0; devs && i < o->nent; i++) free(devs[i]);
  free(ls), free(lp), free(shs), free(dax), free(dptr), free(axes), free(mesh), free(dims), free(devs);
  op_done(o);
}

static uint64_t *u64dup(const int64_t *v, int n) {
  uint64_t *o = malloc((size_t)(n ? n : 1) * sizeof *o);
  if (o)
    for (int i = 0; i < n; i++) o[i] = (uint64_t)v[i];
  return o;
}

/* Plans the reads of new array a (entry i, saved as sv): each of its shards, from the pieces of
 * the saved slices that overlap it. */
static int plan_reads(ck_op *o, peer *p, const c_array *a, const mf_array *sv) {
  ctl *c = o->c;
  for (uint32_t k = 0; k < a->sh.ndev; k++) {
    const lm_reg_device *dev = lm_registry_device(c->reg, a->devs[k]);
    ck_worker *w = worker_slot(o, dev->worker);
    if (!w) return op_failf(o, LOOM_NO_MEMORY, "out of host memory");
    int64_t off[R], sd[R];
    lm_sharding_shard(&a->sh, a->rank, a->dims, k, off, sd);
    Lmw__CkptSlice *t = calloc(1, sizeof *t);
    Lmw__CkptSlice **tg = realloc(w->targets, (w->io.n_targets + 1) * sizeof *tg);
    if (tg) w->targets = tg;
    if (!t || !tg) {
      free(t);
      return op_failf(o, LOOM_NO_MEMORY, "out of host memory");
    }
    lmw__ckpt_slice__init(t);
    t->session = p->session->id;
    t->array = a->id;
    t->local_index = dev->local_index;
    t->dtype = (uint32_t)a->dtype;
    t->n_dims = (size_t)a->rank;
    t->dims = u64dup(sd, a->rank);
    w->targets[w->io.n_targets] = t;
    uint32_t ti = (uint32_t)w->io.n_targets++;
    w->io.targets = w->targets;
    if (!t->dims) return op_failf(o, LOOM_NO_MEMORY, "out of host memory");
    if (!w->file_of) {
      w->file_of = malloc((o->mf.nfiles ? o->mf.nfiles : 1) * sizeof *w->file_of);
      if (!w->file_of) return op_failf(o, LOOM_NO_MEMORY, "out of host memory");
      for (size_t f = 0; f < o->mf.nfiles; f++) w->file_of[f] = -1;
    }
    for (size_t q = 0; q < sv->nslices; q++) {
      const mf_slice *s = &sv->slices[q];
      int64_t lo[R], ext[R];
      bool empty = false;
      for (int d = 0; d < a->rank; d++) {
        int64_t l = off[d] > s->off[d] ? off[d] : s->off[d];
        int64_t h = off[d] + sd[d] < s->off[d] + s->sd[d] ? off[d] + sd[d] : s->off[d] + s->sd[d];
        if (h <= l) empty = true;
        lo[d] = l;
        ext[d] = h > l ? h - l : 0;
      }
      if (empty) continue;
      if (w->file_of[s->file] < 0) { /* the file's entry in this worker's request */
        const mf_file *mf = &o->mf.files[s->file];
        Lmw__CkptFile *f = calloc(1, sizeof *f);
        Lmw__CkptFile **fs = realloc(w->files, (w->io.n_files + 1) * sizeof *fs);
        if (fs) w->files = fs;
        char *path = malloc(PATH_MAX);
        if (!f || !fs || !path) {
          free(f), free(path);
          return op_failf(o, LOOM_NO_MEMORY, "out of host memory");
        }
        lmw__ckpt_file__init(f);
        snprintf(path, PATH_MAX, "%s/%s", o->dir, mf->path);
        f->path = path;
        f->size = mf->size;
        f->block = mf->block;
        f->n_crc32 = mf->ncrc;
        f->crc32 = mf->crc; /* owned by the manifest */
        w->files[w->io.n_files] = f;
        w->file_of[s->file] = (int32_t)w->io.n_files++;
        w->io.files = w->files;
      }
      Lmw__CkptSlice *pc = calloc(1, sizeof *pc);
      Lmw__CkptSlice **ss = realloc(w->slices, (w->io.n_slices + 1) * sizeof *ss);
      if (ss) w->slices = ss;
      if (!pc || !ss) {
        free(pc);
        return op_failf(o, LOOM_NO_MEMORY, "out of host memory");
      }
      lmw__ckpt_slice__init(pc);
      int64_t so[R], dst[R];
      for (int d = 0; d < a->rank; d++) so[d] = lo[d] - s->off[d], dst[d] = lo[d] - off[d];
      pc->target = ti;
      pc->file = (uint32_t)w->file_of[s->file];
      pc->data_offset = s->data_offset;
      pc->n_src_dims = pc->n_src_off = pc->n_dst_off = pc->n_extent = (size_t)a->rank;
      pc->src_dims = u64dup(s->sd, a->rank);
      pc->src_off = u64dup(so, a->rank);
      pc->dst_off = u64dup(dst, a->rank);
      pc->extent = u64dup(ext, a->rank);
      w->slices[w->io.n_slices++] = pc;
      w->io.slices = w->slices;
      if (!pc->src_dims || !pc->src_off || !pc->dst_off || !pc->extent)
        return op_failf(o, LOOM_NO_MEMORY, "out of host memory");
    }
  }
  return 0;
}

static void fmt_shape(char *buf, size_t cap, lm_dtype dt, const int64_t *dims, int rank) {
  size_t n = (size_t)snprintf(buf, cap, "%s[", lm_dtype_name(dt));
  for (int d = 0; d < rank && n < cap; d++) n += (size_t)snprintf(buf + n, cap - n, "%s%lld", d ? "," : "", (long long)dims[d]);
  if (n < cap) snprintf(buf + n, cap - n, "]");
}

static void load_plan(ck_op *o);

static bool on_load(ck_op *o, peer *p, const Lmw__Checkpoint *m) {
  if (m->n_entries == 0) {
    op_failf(o, LOOM_INVALID_ARGUMENT, "a checkpoint load names the arrays to create (CheckpointEntry)");
    return false;
  }
  o->ent = calloc(m->n_entries, sizeof *o->ent);
  if (!o->ent) {
    op_failf(o, LOOM_NO_MEMORY, "out of host memory");
    return false;
  }
  o->nent = m->n_entries;
  for (size_t i = 0; i < m->n_entries; i++) {
    const Lmw__CheckpointEntry *e = m->entries[i];
    o->ent[i].name = strdup(e->name ? e->name : "");
    o->ent[i].array = e->array;
    if (!o->ent[i].name) {
      op_failf(o, LOOM_NO_MEMORY, "out of host memory");
      return false;
    }
    if (!e->array || e->array >= LM_CTL_RESERVED_IDS || lm_session_get(p->session, e->array, H_ARRAY) ||
        lm_session_was_deleted(p->session, e->array)) {
      op_failf(o, LOOM_INVALID_ARGUMENT, "array id %llu is already used in this session", (unsigned long long)e->array);
      return false;
    }
    for (size_t j = 0; j < i; j++)
      if (o->ent[j].array == e->array) {
        op_failf(o, LOOM_INVALID_ARGUMENT, "array id %llu appears twice", (unsigned long long)e->array);
        return false;
      }
  }
  /* the entries' shardings and expectations are needed again once the manifest is read */
  size_t len = protobuf_c_message_get_packed_size(&m->base);
  uint8_t *buf = malloc(len ? len : 1);
  if (buf) {
    protobuf_c_message_pack(&m->base, buf);
    o->req_copy = lmw__checkpoint__unpack(NULL, len, buf);
  }
  free(buf);
  if (!o->req_copy) {
    op_failf(o, LOOM_NO_MEMORY, "out of host memory");
    return false;
  }
  run_job(o, manifest_read_work, load_plan);
  return true;
}

static void load_plan(ck_op *o) {
  Lmw__Checkpoint *m = o->req_copy;
  peer *p = o->client;
  if (o->rc == 0 && !p) op_failf(o, LOOM_CANCELLED, "its client is gone");
  if (o->rc == 0) {
    char what[PATH_MAX + 64];
    snprintf(what, sizeof what, "the manifest of checkpoint '%s'", o->name);
    lm_err err;
    char *text = o->text;
    o->text = NULL;
    if (mf_parse(text, what, &o->mf, &err) < 0) {
      o->err = err;
      o->rc = err.code;
    }
  }
  for (size_t i = 0; o->rc == 0 && i < o->nent; i++) {
    const Lmw__CheckpointEntry *e = m->entries[i];
    const mf_array *sv = mf_find(&o->mf, o->ent[i].name);
    if (!sv) {
      op_failf(o, LOOM_NOT_FOUND, "checkpoint '%s' has no array '%s'", o->name, o->ent[i].name);
      break;
    }
    o->ent[i].saved = sv;
    bool dims_ok = !e->check_dims || e->n_dims == (size_t)sv->rank;
    for (size_t d = 0; dims_ok && e->check_dims && d < e->n_dims; d++) dims_ok = e->dims[d] == (uint64_t)sv->dims[d];
    if ((e->dtype && e->dtype != (uint32_t)sv->dtype) || !dims_ok) {
      char have[256], want[256];
      int64_t wd[R];
      for (size_t d = 0; d < e->n_dims && d < R; d++) wd[d] = (int64_t)e->dims[d];
      fmt_shape(have, sizeof have, sv->dtype, sv->dims, sv->rank);
      fmt_shape(want, sizeof want, e->dtype ? (lm_dtype)e->dtype : sv->dtype, e->check_dims ? wd : sv->dims,
                e->check_dims ? (int)(e->n_dims < R ? e->n_dims : R) : sv->rank);
      op_failf(o, LOOM_SHAPE_MISMATCH, "checkpoint '%s': array '%s' is %s, not %s as asked", o->name, o->ent[i].name,
               have, want);
      break;
    }
    /* its sharding: the one asked for, else the one it was saved with (in the session's numbering) */
    Lmw__Sharding saved = LMW__SHARDING__INIT;
    Lmw__DimAxes dax[R], *dptr[R];
    uint32_t axes[R * LM_MESH_MAX_AXES];
    uint64_t mesh[LM_MESH_MAX_AXES];
    uint32_t *devs = NULL;
    const Lmw__Sharding *shw = e->sharding;
    if (!shw) {
      ctl_sharding_to_wire(&sv->sh, sv->rank, &saved, dax, dptr, axes, mesh);
      devs = malloc(sv->sh.ndev * sizeof *devs);
      if (!devs) {
        op_failf(o, LOOM_NO_MEMORY, "out of host memory");
        break;
      }
      memcpy(devs, sv->sh.devices, sv->sh.ndev * sizeof *devs);
      saved.devices = devs;
      Lmw__ArrayCreate ac = LMW__ARRAY_CREATE__INIT; /* a pool session's numbering -> the cluster's */
      ac.sharding = &saved;
      lm_err err;
      if (ctl_pool_rewrite(p, LM_MSG_ARRAY_CREATE, &ac.base, &err) < 0) {
        free(devs);
        op_failf(o, err.code, "checkpoint '%s': array '%s' was saved on devices this session does not have: %s",
                 o->name, o->ent[i].name, err.msg);
        break;
      }
      shw = &saved;
    }
    uint64_t udims[R];
    for (int d = 0; d < sv->rank; d++) udims[d] = (uint64_t)sv->dims[d];
    c_array *a;
    lm_err err;
    int rc = ctl_array_new(p, o->ent[i].array, (uint32_t)sv->dtype, udims, (size_t)sv->rank, shw, &a, &err);
    free(devs);
    if (rc < 0) {
      op_failf(o, rc, "checkpoint '%s': cannot create array '%s': %s", o->name, o->ent[i].name, err.msg);
      break;
    }
    o->ent[i].created = true;
    a->state = A_PENDING;
    plan_reads(o, p, a, sv);
  }
  if (o->rc == 0) send_all(o);
  if (o->pending == 0) load_finish(o);
}

/* ---- list, show, verify, remove (thread pool) ---- */

static cJSON *summary_json(const manifest *m, const char *name, bool full) {
  cJSON *j = cJSON_CreateObject(), *arrays = cJSON_CreateArray();
  uint64_t bytes = 0;
  cJSON_AddStringToObject(j, "name", name);
  cJSON_AddBoolToObject(j, "complete", true);
  cJSON_AddNumberToObject(j, "created_unix_ms", m->created_ms);
  for (size_t i = 0; i < m->nfiles; i++) bytes += m->files[i].size;
  cJSON_AddNumberToObject(j, "bytes", (double)bytes);
  cJSON_AddNumberToObject(j, "files", (double)m->nfiles);
  cJSON_AddNumberToObject(j, "num_arrays", (double)m->narrays);
  if (!full) {
    cJSON_Delete(arrays);
    return j;
  }
  for (size_t i = 0; i < m->narrays; i++) {
    const mf_array *a = &m->arrays[i];
    cJSON *x = cJSON_CreateObject();
    cJSON_AddStringToObject(x, "name", a->name);
    cJSON_AddStringToObject(x, "dtype", lm_dtype_name(a->dtype));
    cJSON_AddItemToObject(x, "shape", dims_json(a->dims, a->rank));
    cJSON *sh = cJSON_CreateObject(), *devs = cJSON_CreateArray(), *da = cJSON_CreateArray();
    cJSON_AddItemToObject(sh, "mesh_shape", dims_json(a->sh.mesh_shape, a->sh.mesh_rank));
    for (uint32_t k = 0; k < a->sh.ndev; k++) cJSON_AddItemToArray(devs, cJSON_CreateNumber(a->sh.devices[k]));
    for (int d = 0; d < a->rank; d++) {
      cJSON *ax = cJSON_CreateArray();
      for (int k = 0; k < LM_MESH_MAX_AXES && a->sh.dim_axes[d][k] >= 0; k++)
        cJSON_AddItemToArray(ax, cJSON_CreateNumber(a->sh.dim_axes[d][k]));
      cJSON_AddItemToArray(da, ax);
    }
    cJSON_AddItemToObject(sh, "devices", devs);
    cJSON_AddItemToObject(sh, "dim_axes", da);
    cJSON_AddItemToObject(x, "sharding", sh);
    cJSON *sl = cJSON_CreateArray();
    for (size_t q = 0; q < a->nslices; q++) {
      cJSON *s = cJSON_CreateObject();
      cJSON_AddStringToObject(s, "file", m->files[a->slices[q].file].path);
      cJSON_AddStringToObject(s, "key", a->slices[q].key);
      cJSON_AddItemToObject(s, "offsets", dims_json(a->slices[q].off, a->rank));
      cJSON_AddItemToObject(s, "shape", dims_json(a->slices[q].sd, a->rank));
      cJSON_AddItemToArray(sl, s);
    }
    cJSON_AddItemToObject(x, "slices", sl);
    cJSON_AddItemToArray(arrays, x);
  }
  cJSON_AddItemToObject(j, "arrays", arrays);
  cJSON *files = cJSON_CreateArray();
  for (size_t i = 0; i < m->nfiles; i++) {
    cJSON *f = cJSON_CreateObject();
    cJSON_AddStringToObject(f, "path", m->files[i].path);
    cJSON_AddNumberToObject(f, "size", (double)m->files[i].size);
    cJSON_AddNumberToObject(f, "worker", m->files[i].worker);
    cJSON_AddItemToArray(files, f);
  }
  cJSON_AddItemToObject(j, "file_list", files);
  return j;
}

static int load_manifest_here(ck_op *o, const char *dir, const char *name, manifest *m) {
  char path[PATH_MAX], what[PATH_MAX + 64];
  snprintf(path, sizeof path, "%s/%s", dir, CK_MANIFEST);
  snprintf(what, sizeof what, "the manifest of checkpoint '%s'", name);
  char *text;
  int rc = read_text(path, CK_MANIFEST_MAX, &text, &o->err);
  if (rc == LOOM_NOT_FOUND) return lm_errf(&o->err, LOOM_NOT_FOUND, "no checkpoint '%s'", name);
  if (rc < 0) return rc;
  return mf_parse(text, what, m, &o->err);
}

static void set_result(ck_op *o, cJSON *j) {
  o->text = cJSON_PrintUnformatted(j);
  cJSON_Delete(j);
  if (!o->text) o->rc = lm_errf(&o->err, LOOM_NO_MEMORY, "out of host memory");
}

static void list_work(ck_op *o) {
  cJSON *j = cJSON_CreateObject(), *list = cJSON_CreateArray();
  cJSON_AddStringToObject(j, "dir", o->user_dir);
  cJSON_AddItemToObject(j, "checkpoints", list);
  DIR *d = opendir(o->user_dir);
  struct dirent *de;
  while (d && (de = readdir(d))) {
    if (!name_ok(de->d_name)) continue;
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/%s", o->user_dir, de->d_name);
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) continue;
    manifest m;
    lm_err keep = o->err;
    if (load_manifest_here(o, dir, de->d_name, &m) == 0) {
      cJSON_AddItemToArray(list, summary_json(&m, de->d_name, false));
      mf_free(&m);
    } else {
      cJSON *x = cJSON_CreateObject();
      cJSON_AddStringToObject(x, "name", de->d_name);
      cJSON_AddBoolToObject(x, "complete", false);
      cJSON_AddStringToObject(x, "error", o->err.code == LOOM_NOT_FOUND ? "no manifest (a save that did not finish)"
                                                                       : o->err.msg);
      cJSON_AddItemToArray(list, x);
    }
    o->err = keep;
  }
  if (d) closedir(d);
  set_result(o, j);
}

static void show_work(ck_op *o) {
  manifest m;
  o->rc = load_manifest_here(o, o->dir, o->name, &m);
  if (o->rc < 0) return;
  cJSON *j = summary_json(&m, o->name, true);
  cJSON_AddStringToObject(j, "dir", o->dir);
  mf_free(&m);
  set_result(o, j);
}

/* Reads a whole file and checks its size, every block's CRC and its safetensors header against
 * the manifest; "" when good, else why (in why). */
static void verify_file(const char *dir, const manifest *m, size_t fi, char *why, size_t cap, uint64_t *bytes) {
  const mf_file *f = &m->files[fi];
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/%s", dir, f->path);
  why[0] = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    snprintf(why, cap, "%s: %s", path, errno == ENOENT ? "missing" : strerror(errno));
    return;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || (uint64_t)st.st_size != f->size) {
    snprintf(why, cap, "%s is %s: %llu bytes, the manifest says %llu", path,
             (uint64_t)st.st_size < f->size ? "truncated" : "corrupt", (unsigned long long)st.st_size,
             (unsigned long long)f->size);
    close(fd);
    return;
  }
  uint8_t *buf = malloc(f->block);
  uint8_t *hdr = NULL;
  uint64_t hlen = 0;
  for (size_t b = 0; buf && b < f->ncrc && !why[0]; b++) {
    uint64_t off = (uint64_t)b * f->block, len = off + f->block > f->size ? f->size - off : f->block, got = 0;
    while (got < len) {
      ssize_t k = pread(fd, buf + got, (size_t)(len - got), (off_t)(off + got));
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) break;
      got += (uint64_t)k;
    }
    if (got < len) snprintf(why, cap, "%s: read error at byte %llu", path, (unsigned long long)(off + got));
    else if (lm_st_crc32(buf, (size_t)len) != f->crc[b])
      snprintf(why, cap, "%s is corrupt: bytes %llu-%llu do not match the manifest's checksum", path,
               (unsigned long long)off, (unsigned long long)(off + len));
    *bytes += got;
  }
  /* the safetensors header (checked by the CRCs above; here: that it says what the manifest says) */
  if (!why[0] && buf) {
    uint8_t len8[8];
    if (pread(fd, len8, 8, 0) != 8) snprintf(why, cap, "%s: no safetensors header", path);
    for (int i = 0; !why[0] && i < 8; i++) hlen |= (uint64_t)len8[i] << (8 * i);
    if (!why[0] && (hlen > LM_ST_HEADER_MAX || hlen + 8 > f->size)) snprintf(why, cap, "%s: bad safetensors header", path);
    if (!why[0] && !(hdr = malloc(hlen + 1))) snprintf(why, cap, "out of host memory");
    if (!why[0] && pread(fd, hdr, hlen, 8) != (ssize_t)hlen) snprintf(why, cap, "%s: short header", path);
  }
  if (!why[0] && hdr) {
    hdr[hlen] = 0;
    cJSON *h = cJSON_Parse((char *)hdr);
    if (!h) snprintf(why, cap, "%s: the safetensors header is not JSON", path);
    for (size_t i = 0; h && !why[0] && i < m->narrays; i++)
      for (size_t q = 0; !why[0] && q < m->arrays[i].nslices; q++) {
        const mf_slice *s = &m->arrays[i].slices[q];
        if (s->file != fi) continue;
        const cJSON *t = cJSON_GetObjectItem(h, s->key), *dt = cJSON_GetObjectItem(t, "dtype");
        const cJSON *offs = cJSON_GetObjectItem(t, "data_offsets");
        uint64_t b0;
        if (!t || !cJSON_IsString(dt) || strcmp(dt->valuestring, lm_st_dtype_name(m->arrays[i].dtype) ?
                                                                  lm_st_dtype_name(m->arrays[i].dtype) : "") ||
            !cJSON_IsArray(offs) || !json_u64(cJSON_GetArrayItem(offs, 0), &b0) || b0 + 8 + hlen != s->data_offset)
          snprintf(why, cap, "%s: tensor %s in its header does not match the manifest", path, s->key);
      }
    cJSON_Delete(h);
  }
  free(hdr);
  free(buf);
  close(fd);
}

static void verify_work(ck_op *o) {
  manifest m;
  o->rc = load_manifest_here(o, o->dir, o->name, &m);
  if (o->rc < 0) return;
  cJSON *j = cJSON_CreateObject(), *files = cJSON_CreateArray();
  bool ok = true;
  uint64_t bytes = 0;
  for (size_t i = 0; i < m.nfiles; i++) {
    char why[1024];
    verify_file(o->dir, &m, i, why, sizeof why, &bytes);
    cJSON *f = cJSON_CreateObject();
    cJSON_AddStringToObject(f, "path", m.files[i].path);
    cJSON_AddBoolToObject(f, "ok", !why[0]);
    if (why[0]) cJSON_AddStringToObject(f, "error", why);
    cJSON_AddItemToArray(files, f);
    ok &= !why[0];
  }
  cJSON_AddStringToObject(j, "name", o->name);
  cJSON_AddBoolToObject(j, "ok", ok);
  cJSON_AddNumberToObject(j, "bytes_checked", (double)bytes);
  cJSON_AddItemToObject(j, "files", files);
  mf_free(&m);
  set_result(o, j);
}

static void remove_work(ck_op *o) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/%s", o->dir, CK_MANIFEST);
  struct stat st;
  if (stat(o->dir, &st) != 0) {
    o->rc = lm_errf(&o->err, LOOM_NOT_FOUND, "no checkpoint '%s'", o->name);
    return;
  }
  unlink(path); /* first: from here on it is not loadable */
  fsync_dir(o->dir);
  DIR *d = opendir(o->dir);
  struct dirent *de;
  size_t n = 0;
  while (d && (de = readdir(d))) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
    snprintf(path, sizeof path, "%s/%s", o->dir, de->d_name);
    if (unlink(path) == 0) n++;
  }
  if (d) closedir(d);
  if (rmdir(o->dir) != 0) {
    o->rc = lm_errf(&o->err, LOOM_IO, "cannot remove %s: %s", o->dir, strerror(errno));
    return;
  }
  char json[256];
  snprintf(json, sizeof json, "{\"name\":\"%s\",\"removed\":true,\"files\":%zu}", o->name, n);
  o->text = strdup(json);
}

static void admin_done(ck_op *o) {
  if (o->rc < 0) op_fail_reply(o);
  else op_reply_json(o, o->text ? o->text : "{}");
  op_done(o);
}

/* ---- requests ---- */

void ctl_on_checkpoint(peer *p, const lm_frame *f, const Lmw__Checkpoint *m) {
  ctl *c = p->ctl;
  struct ctl_ckpt *ck = c->ckpt;
  if (!ck || (!ck->root[0] && !(m->dir && m->dir[0]))) {
    ctl_reply_error(p, f->h.request_id, LOOM_UNSUPPORTED,
                    "this controller has no checkpoint directory (loom controller --checkpoint-dir DIR)");
    return;
  }
  ck_op *o = calloc(1, sizeof *o);
  if (!o) {
    ctl_reply_error(p, f->h.request_id, LOOM_NO_MEMORY, "out of host memory");
    return;
  }
  o->c = c;
  o->client = p;
  o->rid = f->h.request_id;
  o->op = m->op;
  o->t0_ns = uv_hrtime();
  char user[160];
  user_component(p, user, sizeof user);
  snprintf(o->user_dir, sizeof o->user_dir, "%s/%s", ck->root, user);
  bool named = m->op != LMW__CHECKPOINT_OP__CKPT_LIST;
  bool at_dir = m->dir && m->dir[0];
  if (at_dir) {
    char why[160];
    if (m->op != LMW__CHECKPOINT_OP__CKPT_SAVE && m->op != LMW__CHECKPOINT_OP__CKPT_LOAD &&
        m->op != LMW__CHECKPOINT_OP__CKPT_SHOW && m->op != LMW__CHECKPOINT_OP__CKPT_VERIFY)
      op_failf(o, LOOM_INVALID_ARGUMENT, "a checkpoint directory may be named to save, load, show or verify only");
    else if (!ctl_is_admin(c, p))
      op_failf(o, LOOM_PERMISSION, "only admins may name a checkpoint directory (loom controller --admins)");
    else if (!dir_ok(m->dir, why, sizeof why))
      op_failf(o, LOOM_INVALID_ARGUMENT, "checkpoint directory '%.200s' %s", m->dir, why);
  }
  if (at_dir && o->rc == 0) {
    snprintf(o->dir, sizeof o->dir, "%s", m->dir);
    for (size_t n = strlen(o->dir); n > 1 && o->dir[n - 1] == '/'; n--) o->dir[n - 1] = 0;
    size_t n = strlen(o->dir); /* messages name it: the directory, or its tail when long */
    snprintf(o->name, sizeof o->name, "%s%s", n > CK_NAME_MAX ? "..." : "", o->dir + (n > CK_NAME_MAX ? n - CK_NAME_MAX + 3 : 0));
  } else if (o->rc == 0 && named && !name_ok(m->name)) {
    op_failf(o, LOOM_INVALID_ARGUMENT, "'%.80s' is not a checkpoint name: 1 to %d characters of A-Z a-z 0-9 _ . -, "
             "not starting with '.'", m->name ? m->name : "", CK_NAME_MAX);
  } else if (o->rc == 0 && named) {
    snprintf(o->name, sizeof o->name, "%s", m->name);
    snprintf(o->dir, sizeof o->dir, "%s/%s", o->user_dir, o->name);
  }
  if (o->rc == 0 && named) {
    for (ck_op *x = ck->ops; x; x = x->next) /* one change of a name at a time */
      if (!strcmp(x->dir, o->dir) && (m->op == LMW__CHECKPOINT_OP__CKPT_SAVE ||
                                      m->op == LMW__CHECKPOINT_OP__CKPT_REMOVE || x->op == LMW__CHECKPOINT_OP__CKPT_SAVE ||
                                      x->op == LMW__CHECKPOINT_OP__CKPT_REMOVE))
        op_failf(o, LOOM_BUSY, "checkpoint '%s' is being %s by another request", o->name,
                 x->op == LMW__CHECKPOINT_OP__CKPT_SAVE ? "saved" : x->op == LMW__CHECKPOINT_OP__CKPT_REMOVE ? "removed"
                                                                                                        : "read");
  }
  if (o->rc == 0) {
    o->next = ck->ops;
    ck->ops = o;
    switch (m->op) {
    case LMW__CHECKPOINT_OP__CKPT_SAVE:
      snprintf(o->save_id, sizeof o->save_id, "%llx-%llx", (unsigned long long)unix_ms(),
               (unsigned long long)++ck->counter);
      if (on_save(o, p, m)) return; /* under way */
      break;
    case LMW__CHECKPOINT_OP__CKPT_LOAD:
      if (on_load(o, p, m)) return;
      break;
    case LMW__CHECKPOINT_OP__CKPT_LIST: run_job(o, list_work, admin_done); return;
    case LMW__CHECKPOINT_OP__CKPT_SHOW: run_job(o, show_work, admin_done); return;
    case LMW__CHECKPOINT_OP__CKPT_VERIFY: run_job(o, verify_work, admin_done); return;
    case LMW__CHECKPOINT_OP__CKPT_REMOVE: run_job(o, remove_work, admin_done); return;
    default: op_failf(o, LOOM_UNSUPPORTED, "unknown checkpoint operation %d", m->op); break;
    }
    op_fail_reply(o);
    op_done(o);
    return;
  }
  op_fail_reply(o);
  op_free(o);
}

bool ctl_ckpt_on_reply(ctl *c, peer *wp, const lm_frame *f) {
  if (!c->ckpt || !f->h.request_id) return false;
  for (ck_op *o = c->ckpt->ops; o; o = o->next)
    for (size_t k = 0; k < o->nws; k++) {
      ck_worker *w = &o->ws[k];
      if (w->rid != f->h.request_id || w->worker != wp->worker_id) continue;
      w->rid = 0;
      o->pending--;
      if (f->h.type == LM_MSG_ERROR) {
        lm_err err;
        lm_msg_error_status(f, &err);
        op_failf(o, err.code, "checkpoint '%s': %s", o->name, err.msg);
      } else if (f->h.type == LM_MSG_CHECKPOINT_IO_REPLY) {
        ProtobufCMessage *m;
        lm_err err;
        if (lm_msg_decode(f, &m, &err) < 0) op_failf(o, LOOM_PROTOCOL, "worker %u: %s", w->worker, err.msg);
        else w->reply = (Lmw__CheckpointIoReply *)m;
        if (w->reply && o->op == LMW__CHECKPOINT_OP__CKPT_SAVE &&
            (!w->reply->file || w->reply->n_data_offsets != w->n))
          op_failf(o, LOOM_PROTOCOL, "worker %u answered a checkpoint write with a malformed reply", w->worker);
        if (w->reply && o->op == LMW__CHECKPOINT_OP__CKPT_LOAD) o->bytes += w->reply->bytes;
      } else {
        op_failf(o, LOOM_PROTOCOL, "worker %u answered a checkpoint request with %s", w->worker,
                 lm_msg_name(f->h.type));
      }
      if (o->pending == 0) {
        if (o->op == LMW__CHECKPOINT_OP__CKPT_SAVE) {
          if (o->rc < 0) run_job(o, save_cleanup_work, save_cleanup_done);
          else save_written(o);
        } else {
          load_finish(o);
        }
      }
      return true;
    }
  return false;
}

void ctl_ckpt_worker_lost(ctl *c, uint32_t worker) {
  if (!c->ckpt) return;
  for (ck_op *o = c->ckpt->ops, *n; o; o = n) {
    n = o->next;
    for (size_t k = 0; k < o->nws; k++) {
      ck_worker *w = &o->ws[k];
      if (w->worker != worker || !w->rid) continue;
      w->rid = 0;
      o->pending--;
      char wn[160];
      ctl_worker_name(c, worker, wn, sizeof wn);
      op_failf(o, LOOM_WORKER_LOST, "checkpoint '%s': %s was lost before it finished its files", o->name, wn);
      if (o->pending == 0) {
        if (o->op == LMW__CHECKPOINT_OP__CKPT_SAVE) run_job(o, save_cleanup_work, save_cleanup_done);
        else load_finish(o);
      }
      break;
    }
  }
}

void ctl_ckpt_client_gone(ctl *c, peer *p) {
  if (!c->ckpt) return;
  for (ck_op *o = c->ckpt->ops; o; o = o->next)
    if (o->client == p) o->client = NULL;
}

bool ctl_is_admin(ctl *c, const peer *p) {
  if (!c->cfg.tokens_file) return true;
  const char *list = c->cfg.admins;
  size_t n = strlen(p->user);
  while (list && *list && n) {
    const char *e = strchr(list, ',');
    size_t l = e ? (size_t)(e - list) : strlen(list);
    if (l == n && !strncmp(list, p->user, n)) return true;
    list = e ? e + 1 : NULL;
  }
  return false;
}
