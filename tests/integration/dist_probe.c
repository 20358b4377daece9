/* Drives the distributed C API (arrays, executables, launches, futures) against a real cluster
 * for tests/integration/test_{arrays,launch,faults}.py; each mode prints "ok ..." lines that
 * the tests check, and exits nonzero on the first failed check. Built in the sanitizer build
 * too, so the client library runs under ASan/UBSan against sanitized daemons.
 *   dist_probe shardings ADDR              every kind of sharding: put, get, get_shard, queries
 *   dist_probe big ADDR MIB                put/get MIB MiB of f32 split over 8 devices; GB/s
 *   dist_probe regions ADDR                shards that are not contiguous in the caller's array,
 *                                          with long rows (local transfers name them as ranges,
 *                                          several per copy chunk, chunks ending mid-row) or short
 *                                          ones (staged)
 *   dist_probe deny SYSCALL CMD ARGS...    runs CMD with SYSCALL (process_vm_readv or
 *                                          process_vm_writev) failing with EPERM (a seccomp
 *                                          filter), as a sandbox that refuses it would
 *   dist_probe chain ADDR FILE N           N launches of FILE (x -> x + 1 on 8 devices) chained
 *                                          without waiting, then one wait; checks the value
 *   dist_probe errors ADDR FILE            bad inputs: deleted arrays, wrong shapes/shardings,
 *                                          compile errors, failures propagating along a chain
 *   dist_probe oom ADDR                    a shard larger than the device, then a put that
 *                                          exceeds what is left on a device
 *   dist_probe hold ADDR MIB               puts MIB MiB on every device, prints "ready", then
 *                                          waits for stdin to close (the test reads memory use)
 *   dist_probe wait ADDR FILE DEVICES      launches FILE (no inputs) on DEVICES (e.g. 0-7),
 *                                          prints "launched", waits, prints the outcome
 *   dist_probe cancel ADDR FOREVER LOCAL ADD_ONE
 *                                          loom_future_cancel: FOREVER (8 processes looping forever
 *                                          with an all_reduce per iteration) running, LOCAL (4
 *                                          looping forever, no collectives) queued behind it on
 *                                          devices 2-5, a consumer of FOREVER's output (ADD_ONE,
 *                                          x -> x + 1 on 8 devices) queued too; cancelled, then
 *                                          the devices run the next launch; a cancel from another
 *                                          thread while waiting; finished and refused launches
 *   dist_probe loop ADDR FILE N K L IN...  a training loop: inputs from raw files IN (shaped as the
 *                                          executable says), N launches chained without waiting,
 *                                          outputs 0..K-1 feeding inputs 0..K-1 of the next one;
 *                                          then prints output L (an f32 scalar) of every step */
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include "loom/loom.h"

#define CHECK(cond)                                                                              \
  do {                                                                                           \
    if (!(cond)) {                                                                               \
      fprintf(stderr, "dist_probe: check failed at line %d: %s (last error: %s)\n", __LINE__, #cond, \
              g_client ? loom_errmsg(g_client) : loom_errmsg(NULL));                            \
      exit(1);                                                                                   \
    }                                                                                            \
  } while (0)

static loom_client *g_client;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static loom_client *connect_to(const char *addr) {
  loom_connect_options o;
  loom_connect_options_initialize(&o);
  o.address = addr;
  o.timeout_ms = 60000;
  o.client_name = "dist_probe";
  loom_client *c = NULL;
  CHECK(loom_connect(&o, &c) == LOOM_OK);
  g_client = c;
  return c;
}

static char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  CHECK(f != NULL);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  CHECK(buf && fread(buf, 1, (size_t)n, f) == (size_t)n);
  fclose(f);
  buf[n] = 0;
  *len = (size_t)n;
  return buf;
}

static loom_array *put(loom_client *c, loom_dtype dt, int rank, const int64_t *dims, const loom_sharding *sh,
                       const void *data, size_t size) {
  loom_put_args a;
  loom_put_args_initialize(&a);
  a.dtype = dt;
  a.rank = rank;
  a.dims = dims;
  a.sharding = sh;
  a.data = data;
  a.data_size = size;
  loom_array *arr = NULL;
  loom_status st = loom_array_put(c, &a, &arr);
  if (st != LOOM_OK) fprintf(stderr, "put: %s\n", loom_errmsg(c));
  CHECK(st == LOOM_OK && arr);
  return arr;
}

/* Puts g (int32, dims) with sh, reads it back whole and shard by shard. */
static void roundtrip(loom_client *c, const char *what, int rank, const int64_t *dims, const loom_sharding *sh) {
  size_t n = 1;
  for (int d = 0; d < rank; d++) n *= (size_t)dims[d];
  int32_t *g = malloc(n * 4 + 4), *back = malloc(n * 4 + 4);
  CHECK(g && back);
  for (size_t i = 0; i < n; i++) g[i] = (int32_t)(i * 7 + 3);
  loom_array *a = put(c, LOOM_DTYPE_S32, rank, dims, sh, g, n * 4);
  CHECK(loom_array_rank(a) == rank && loom_array_dtype(a) == LOOM_DTYPE_S32 && loom_array_nbytes(a) == n * 4);
  memset(back, 0x55, n * 4);
  CHECK(loom_array_get(a, back, n * 4) == LOOM_OK);
  CHECK(memcmp(g, back, n * 4) == 0);
  loom_sharding q;
  loom_sharding_initialize(&q);
  CHECK(loom_array_sharding(a, &q) == LOOM_OK);
  CHECK(q.num_devices == (sh ? sh->num_devices : 1) && loom_array_num_shards(a) == q.num_devices);
  for (int32_t i = 0; i < q.num_devices; i++) {
    loom_shard_desc sd = {.struct_size = sizeof sd};
    CHECK(loom_array_shard_info(a, i, &sd) == LOOM_OK);
    CHECK(sd.device == q.devices[i] && sd.rank == rank);
    int32_t *shard = malloc(sd.nbytes + 4);
    CHECK(shard);
    CHECK(loom_array_get_shard(a, i, shard, sd.nbytes) == LOOM_OK);
    /* element (i0, i1, ...) of the shard is element (off + i) of the whole */
    size_t sn = sd.nbytes / 4;
    for (size_t k = 0; k < sn; k++) {
      size_t rest = k, gi = 0, mul = 1;
      int64_t idx[LOOM_MAX_RANK];
      for (int d = rank - 1; d >= 0; d--) {
        idx[d] = (int64_t)(rest % (size_t)sd.dims[d]) + sd.offsets[d];
        rest /= (size_t)sd.dims[d];
      }
      for (int d = rank - 1; d >= 0; d--) {
        gi += (size_t)idx[d] * mul;
        mul *= (size_t)dims[d];
      }
      CHECK(shard[k] == g[gi]);
    }
    free(shard);
  }
  /* the same data given shard by shard */
  CHECK(q.num_devices > 0 && q.num_devices <= 4096);
  size_t nd = (size_t)(uint32_t)q.num_devices;
  const void **sd_ptrs = calloc(nd, sizeof *sd_ptrs);
  int32_t **bufs = calloc(nd, sizeof *bufs);
  for (int32_t i = 0; i < q.num_devices; i++) {
    loom_shard_desc sd = {.struct_size = sizeof sd};
    loom_array_shard_info(a, i, &sd);
    bufs[i] = malloc(sd.nbytes + 4);
    CHECK(loom_array_get_shard(a, i, bufs[i], sd.nbytes) == LOOM_OK);
    sd_ptrs[i] = bufs[i];
  }
  loom_put_args pa;
  loom_put_args_initialize(&pa);
  pa.dtype = LOOM_DTYPE_S32;
  pa.rank = rank;
  pa.dims = dims;
  pa.sharding = sh;
  pa.shard_data = sd_ptrs;
  loom_array *b = NULL;
  CHECK(loom_array_put(c, &pa, &b) == LOOM_OK);
  memset(back, 0, n * 4);
  CHECK(loom_array_get(b, back, n * 4) == LOOM_OK);
  CHECK(memcmp(g, back, n * 4) == 0);
  for (int32_t i = 0; i < q.num_devices; i++) free(bufs[i]);
  free(bufs);
  free(sd_ptrs);
  loom_array_release(b);
  CHECK(loom_array_delete(a) == LOOM_OK);
  CHECK(loom_array_is_deleted(a));
  CHECK(loom_array_get(a, back, n * 4) == LOOM_NOT_FOUND);
  CHECK(strstr(loom_errmsg(c), "deleted") != NULL);
  loom_array_release(a);
  free(g);
  free(back);
  printf("ok %s\n", what);
}

/* A sharding over a 2x4 mesh of devs[8] that splits no dimension yet (the caller sets dim_axes). */
static void mesh_2x4(loom_sharding *s, const int32_t *devs) {
  loom_sharding_initialize(s);
  s->mesh_rank = 2;
  s->mesh_shape[0] = 2;
  s->mesh_shape[1] = 4;
  s->num_devices = 8;
  s->devices = devs;
}

static int mode_shardings(const char *addr) {
  loom_client *c = connect_to(addr);
  int32_t all[8] = {0, 1, 2, 3, 4, 5, 6, 7}, rev[8] = {7, 6, 5, 4, 3, 2, 1, 0}, dev5 = 5, mixed[4] = {1, 6, 2, 5};
  int64_t d2[2] = {8, 12}, d1[1] = {24}, d3[3] = {4, 6, 8}, d0[1] = {0};
  loom_sharding s;
  roundtrip(c, "default device 0", 2, d2, NULL);
  loom_sharding_single(&s, &dev5);
  roundtrip(c, "single device 5", 2, d2, &s);
  loom_sharding_replicated(&s, all, 8);
  roundtrip(c, "replicated on 8", 2, d2, &s);
  loom_sharding_tiled(&s, all, 8, 0);
  roundtrip(c, "tiled dim 0 over 8", 2, d2, &s);
  loom_sharding_tiled(&s, rev, 4, 1);
  roundtrip(c, "tiled dim 1 over 4 (reversed devices)", 2, d2, &s);
  loom_sharding_tiled(&s, mixed, 4, 0);
  roundtrip(c, "tiled over devices of both workers, interleaved", 1, d1, &s);
  /* mesh 2x4: dim 0 over axis 0, dim 1 over axis 1 */
  mesh_2x4(&s, all);
  s.dim_axes[0][0] = 0;
  s.dim_axes[1][0] = 1;
  roundtrip(c, "mesh 2x4 both dims", 2, d2, &s);
  /* mesh 2x4: dim 0 over (y, x), y major */
  mesh_2x4(&s, all);
  s.dim_axes[0][0] = 1;
  s.dim_axes[0][1] = 0;
  roundtrip(c, "mesh 2x4 one dim over two axes", 1, d1, &s);
  /* mesh 2x4: dim 1 over axis 1 only, replicated along axis 0 */
  mesh_2x4(&s, rev);
  s.dim_axes[1][0] = 1;
  roundtrip(c, "mesh 2x4 partially replicated", 2, d2, &s);
  /* rank 3, middle dim split */
  loom_sharding_tiled(&s, all, 2, 1);
  roundtrip(c, "rank 3 middle dim", 3, d3, &s);
  loom_sharding_tiled(&s, all, 8, 0);
  roundtrip(c, "empty array", 1, d0, &s);
  int32_t scalar = 42, got = 0;
  loom_sharding_replicated(&s, all, 8);
  loom_array *a = put(c, LOOM_DTYPE_S32, 0, NULL, &s, &scalar, 4);
  CHECK(loom_array_get(a, &got, 4) == LOOM_OK && got == 42);
  loom_array_release(a);
  printf("ok scalar\n");
  /* bad shardings */
  loom_sharding_tiled(&s, all, 8, 1);
  int32_t x[96] = {0};
  loom_put_args pa;
  loom_put_args_initialize(&pa);
  pa.dtype = LOOM_DTYPE_S32;
  pa.rank = 2;
  int64_t d10[2] = {8, 12};
  pa.dims = d10;
  pa.sharding = &s;
  pa.data = x;
  pa.data_size = sizeof x;
  CHECK(loom_array_put(c, &pa, &a) == LOOM_INVALID_ARGUMENT && a == NULL);
  CHECK(strstr(loom_errmsg(c), "does not split into 8") != NULL);
  int32_t nodev[2] = {3, 99};
  loom_sharding_tiled(&s, nodev, 2, 0);
  CHECK(loom_array_put(c, &pa, &a) == LOOM_INVALID_ARGUMENT);
  CHECK(strstr(loom_errmsg(c), "no device 99") != NULL);
  int32_t twice[2] = {3, 3};
  loom_sharding_tiled(&s, twice, 2, 0);
  CHECK(loom_array_put(c, &pa, &a) == LOOM_INVALID_ARGUMENT);
  pa.sharding = NULL;
  pa.data_size = 10;
  CHECK(loom_array_put(c, &pa, &a) == LOOM_INVALID_ARGUMENT);
  printf("ok bad shardings refused\n");
  loom_disconnect(c);
  return 0;
}

static int mode_regions(const char *addr) {
  loom_client *c = connect_to(addr);
  int32_t all[8] = {0, 1, 2, 3, 4, 5, 6, 7}, rev[8] = {7, 6, 5, 4, 3, 2, 1, 0};
  loom_sharding s;
  int64_t a[2] = {64, 2048}, b[2] = {32, 4096}, r3[3] = {4, 8, 1024}, shortrows[2] = {16, 1000};
  int64_t odd[2] = {4096, 1500}, huge_rows[2] = {2, (int64_t)5 << 20};
  loom_sharding_tiled(&s, rev, 4, 1);
  roundtrip(c, "rows of 2 KiB: dim 1 over 4", 2, a, &s);
  mesh_2x4(&s, all);
  s.dim_axes[0][0] = 0;
  s.dim_axes[1][0] = 1;
  roundtrip(c, "rows of 4 KiB: mesh 2x4 both dims", 2, b, &s);
  loom_sharding_tiled(&s, all, 2, 1);
  roundtrip(c, "rank 3, runs of 16 KiB", 3, r3, &s);
  loom_sharding_tiled(&s, all, 4, 1);
  roundtrip(c, "rows of 1000 bytes (staged)", 2, shortrows, &s);
  loom_sharding_tiled(&s, all, 2, 1);
  roundtrip(c, "4096 rows of 3000 bytes, copy chunks ending mid-row", 2, odd, &s);
  loom_sharding_tiled(&s, rev, 2, 1);
  roundtrip(c, "rows of 10 MiB, longer than a copy chunk", 2, huge_rows, &s);
  loom_disconnect(c);
  return 0;
}

/* execv's CMD with one system call failing with EPERM, as Docker's default seccomp profile does
 * to process_vm_readv/writev without CAP_SYS_PTRACE. */
static int mode_deny(const char *which, char **cmd) {
  long nr = !strcmp(which, "process_vm_readv") ? SYS_process_vm_readv
            : !strcmp(which, "process_vm_writev") ? SYS_process_vm_writev : -1;
  if (nr < 0) {
    fprintf(stderr, "dist_probe deny: unknown system call %s\n", which);
    return 2;
  }
#if defined(__x86_64__)
  const unsigned arch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
  const unsigned arch = AUDIT_ARCH_AARCH64;
#else
  fprintf(stderr, "dist_probe deny: no seccomp filter for this architecture\n");
  return 77;
#endif
  struct sock_filter f[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, arch, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)nr, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog prog = {.len = sizeof f / sizeof f[0], .filter = f};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
    fprintf(stderr, "dist_probe deny: cannot install a seccomp filter: %s\n", strerror(errno));
    return 77;
  }
  execv(cmd[0], cmd);
  fprintf(stderr, "dist_probe deny: cannot run %s: %s\n", cmd[0], strerror(errno));
  return 127;
}

static int mode_big(const char *addr, int mib) {
  loom_client *c = connect_to(addr);
  size_t n = (size_t)mib << 18; /* floats */
  float *g = malloc(n * 4), *back = malloc(n * 4);
  CHECK(g && back);
  for (size_t i = 0; i < n; i++) g[i] = (float)(i % 1000003) * 0.5f;
  memset(back, 0xff, n * 4); /* touched: the get measures the transfer, not page faults */
  int32_t all[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  loom_sharding s;
  loom_sharding_tiled(&s, all, 8, 0);
  int64_t dims[2] = {(int64_t)(n / 1024), 1024};
  double t0 = now_s();
  loom_array *a = put(c, LOOM_DTYPE_F32, 2, dims, &s, g, n * 4);
  double t1 = now_s();
  CHECK(loom_array_get(a, back, n * 4) == LOOM_OK);
  double t2 = now_s();
  CHECK(memcmp(g, back, n * 4) == 0);
  printf("ok big %d MiB put %.3f s (%.2f GB/s) get %.3f s (%.2f GB/s)\n", mib, t1 - t0, n * 4 / (t1 - t0) / 1e9,
         t2 - t1, n * 4 / (t2 - t1) / 1e9);
  loom_array_release(a);
  free(g);
  free(back);
  loom_disconnect(c);
  return 0;
}

static loom_executable *compile_file(loom_client *c, const char *path, const int32_t *devs, int ndev) {
  size_t len;
  char *text = read_file(path, &len);
  loom_compile_options o;
  loom_compile_options_initialize(&o);
  o.devices = devs;
  o.num_devices = ndev;
  o.name = path;
  loom_executable *e = NULL;
  loom_status st = loom_compile(c, text, len, &o, &e);
  if (st != LOOM_OK) fprintf(stderr, "compile %s: %s\n", path, loom_errmsg(c));
  CHECK(st == LOOM_OK);
  free(text);
  return e;
}

/* Puts zeros shaped like input 0 of e, with e's sharding. */
static loom_array *put_like_input(loom_client *c, loom_executable *e, int32_t value) {
  loom_array_spec spec = {.struct_size = sizeof spec};
  loom_sharding s;
  loom_sharding_initialize(&s);
  CHECK(loom_executable_input(e, 0, &spec, &s) == LOOM_OK);
  size_t n = 1;
  for (int d = 0; d < spec.rank; d++) n *= (size_t)spec.dims[d];
  int32_t *v = malloc(n * 4 + 4);
  for (size_t i = 0; i < n; i++) v[i] = value;
  loom_array *a = put(c, spec.dtype, spec.rank, spec.dims, &s, v, n * 4);
  free(v);
  return a;
}

static int mode_chain(const char *addr, const char *file, int n) {
  loom_client *c = connect_to(addr);
  loom_executable *e = compile_file(c, file, NULL, 0);
  loom_executable_info info = {.struct_size = sizeof info};
  CHECK(loom_executable_info_get(e, &info) == LOOM_OK && info.num_inputs == 1 && info.num_outputs == 1);
  loom_array *x = put_like_input(c, e, 0);
  uint64_t nb = loom_array_nbytes(x);
  double t0 = now_s();
  loom_future *last = NULL;
  for (int i = 0; i < n; i++) {
    loom_array *y;
    loom_future *f;
    CHECK(loom_launch(e, &x, 1, NULL, &y, 1, &f) == LOOM_OK);
    loom_array_release(x); /* deleting an input of a launch in flight is fine */
    x = y;
    loom_future_destroy(last);
    last = f;
  }
  double t1 = now_s();
  CHECK(loom_future_wait(last, -1) == LOOM_OK);
  double t2 = now_s();
  uint64_t seq = loom_future_sequence(last);
  CHECK(seq > 0);
  int32_t *v = malloc(nb);
  CHECK(loom_array_get(x, v, nb) == LOOM_OK);
  for (uint64_t i = 0; i < nb / 4; i++) CHECK(v[i] == n);
  printf("ok chain %d launches issued in %.3f s, all done %.3f s later (%.0f launches/s), last sequence %llu\n", n,
         t1 - t0, t2 - t1, n / (t2 - t0), (unsigned long long)seq);
  free(v);
  loom_future_destroy(last);
  loom_array_release(x);
  loom_executable_destroy(e);
  loom_disconnect(c);
  return 0;
}

static int mode_errors(const char *addr, const char *file) {
  loom_client *c = connect_to(addr);
  loom_executable *e = compile_file(c, file, NULL, 0);
  loom_array *x = put_like_input(c, e, 1), *y = NULL;
  loom_future *f = NULL;
  /* a deleted input */
  loom_array_delete(x);
  CHECK(loom_launch(e, &x, 1, NULL, &y, 1, &f) == LOOM_NOT_FOUND && !f);
  CHECK(strstr(loom_errmsg(c), "deleted") != NULL);
  loom_array_release(x);
  printf("ok deleted input refused\n");
  /* wrong counts */
  x = put_like_input(c, e, 1);
  CHECK(loom_launch(e, &x, 0, NULL, &y, 1, &f) == LOOM_INVALID_ARGUMENT);
  printf("ok wrong input count refused\n");
  /* a wrong shape: the controller refuses it; the future and the output say why */
  int64_t dims[1] = {3};
  int32_t three[3] = {1, 2, 3};
  loom_array *bad = put(c, LOOM_DTYPE_S32, 1, dims, NULL, three, sizeof three);
  CHECK(loom_launch(e, &bad, 1, NULL, &y, 1, &f) == LOOM_OK);
  CHECK(loom_future_wait(f, 30000) == LOOM_SHAPE_MISMATCH);
  CHECK(strstr(loom_future_errmsg(f), "i32[3]") != NULL);
  printf("ok wrong shape: %s\n", loom_future_errmsg(f));
  int32_t buf[64];
  CHECK(loom_array_get(y, buf, sizeof buf) == LOOM_SHAPE_MISMATCH);
  /* the failure propagates along a chain */
  loom_array *z = NULL;
  loom_future *f2 = NULL;
  CHECK(loom_launch(e, &y, 1, NULL, &z, 1, &f2) == LOOM_OK);
  CHECK(loom_future_wait(f2, 30000) != LOOM_OK);
  printf("ok failure propagates: %s\n", loom_future_errmsg(f2));
  loom_future_destroy(f2);
  loom_array_release(z);
  loom_future_destroy(f);
  loom_array_release(y);
  loom_array_release(bad);
  /* the right shape with the wrong sharding (all on one device) */
  loom_array_spec spec = {.struct_size = sizeof spec};
  loom_executable_input(e, 0, &spec, NULL);
  if (spec.rank == 1 && spec.dims[0] >= 2) {
    int32_t *v = calloc((size_t)spec.dims[0], 4);
    int32_t d0 = 0;
    loom_sharding s;
    loom_sharding_single(&s, &d0);
    loom_array *one = put(c, spec.dtype, 1, spec.dims, &s, v, (size_t)spec.dims[0] * 4);
    CHECK(loom_launch(e, &one, 1, NULL, &y, 1, &f) == LOOM_OK);
    CHECK(loom_future_wait(f, 30000) == LOOM_INVALID_ARGUMENT);
    CHECK(strstr(loom_future_errmsg(f), "no shard on device 1") || strstr(loom_future_errmsg(f), "sharded differently"));
    printf("ok wrong sharding: %s\n", loom_future_errmsg(f));
    loom_future_destroy(f);
    loom_array_release(y);
    loom_array_release(one);
    free(v);
  }
  /* the executable still works */
  CHECK(loom_launch(e, &x, 1, NULL, &y, 1, &f) == LOOM_OK);
  CHECK(loom_future_wait(f, 30000) == LOOM_OK && loom_future_status(f) == LOOM_OK);
  loom_future_destroy(f);
  loom_array_release(y);
  loom_array_release(x);
  printf("ok still works\n");
  /* compile errors */
  loom_executable *bade = NULL;
  const char *junk = "module { func.func @main( }";
  CHECK(loom_compile(c, junk, strlen(junk), NULL, &bade) == LOOM_PARSE && !bade);
  printf("ok parse error: %s\n", loom_errmsg(c));
  int32_t six[6] = {0, 1, 2, 3, 4, 5};
  loom_compile_options o;
  loom_compile_options_initialize(&o);
  o.devices = six;
  o.num_devices = 6;
  size_t len;
  char *text = read_file(file, &len);
  CHECK(loom_compile(c, text, len, &o, &bade) == LOOM_INVALID_ARGUMENT);
  CHECK(strstr(loom_errmsg(c), "6 devices were given") != NULL);
  printf("ok device count mismatch: %s\n", loom_errmsg(c));
  free(text);
  const char *gspmd =
      "module attributes {mhlo.num_partitions = 8 : i32} {\n"
      "  func.func @main(%a: tensor<8xf32> {mhlo.sharding = \"{devices=[8]<=[8]}\"}) -> tensor<8xf32> {\n"
      "    %0 = stablehlo.add %a, %a : tensor<8xf32>\n    return %0 : tensor<8xf32>\n  }\n}\n";
  CHECK(loom_compile(c, gspmd, strlen(gspmd), NULL, &bade) == LOOM_UNSUPPORTED);
  CHECK(strstr(loom_errmsg(c), "GSPMD sharding") != NULL);
  printf("ok gspmd sharding refused\n");
  loom_executable_destroy(e);
  loom_disconnect(c);
  return 0;
}

static int mode_oom(const char *addr) {
  loom_client *c = connect_to(addr);
  loom_device_desc d = {.struct_size = sizeof d};
  CHECK(loom_device_info(c, 0, &d) == LOOM_OK);
  /* larger than the device: refused before any byte moves */
  int64_t dims[1] = {(int64_t)(d.memory_capacity / 4 + 16)};
  loom_put_args pa;
  loom_put_args_initialize(&pa);
  pa.dtype = LOOM_DTYPE_F32;
  pa.rank = 1;
  pa.dims = dims;
  size_t bytes = (size_t)dims[0] * 4;
  float *big = calloc(bytes / 4, 4);
  CHECK(big);
  pa.data = big;
  pa.data_size = bytes;
  loom_array *a = NULL;
  CHECK(loom_array_put(c, &pa, &a) == LOOM_DEVICE_OUT_OF_MEMORY && !a);
  printf("ok too large: %s\n", loom_errmsg(c));
  /* fits the device, but not next to what is there already */
  dims[0] = (int64_t)(d.memory_capacity / 4 * 3 / 5);
  pa.data_size = (size_t)dims[0] * 4;
  loom_array *first = NULL;
  CHECK(loom_array_put(c, &pa, &first) == LOOM_OK);
  CHECK(loom_array_put(c, &pa, &a) == LOOM_DEVICE_OUT_OF_MEMORY && !a);
  printf("ok out of device memory: %s\n", loom_errmsg(c));
  loom_array_release(first);
  /* and the memory is back: the same put works now */
  for (int tries = 0;; tries++) {
    loom_status st = loom_array_put(c, &pa, &a);
    if (st == LOOM_OK) break;
    CHECK(tries < 50); /* the free travels through the controller: allow it a moment */
    usleep(100000);
  }
  loom_array_release(a);
  printf("ok memory freed\n");
  free(big);
  loom_disconnect(c);
  return 0;
}

static int mode_hold(const char *addr, int mib) {
  loom_client *c = connect_to(addr);
  int32_t n = 0;
  loom_device_count(c, &n);
  size_t bytes = (size_t)mib << 20;
  float *v = calloc(bytes / 4, 4);
  CHECK(v);
  for (int32_t i = 0; i < n; i++) {
    int64_t dims[1] = {(int64_t)(bytes / 4)};
    loom_sharding s;
    loom_sharding_single(&s, &i);
    put(c, LOOM_DTYPE_F32, 1, dims, &s, v, bytes); /* never released: the session's end frees it */
  }
  printf("ready\n");
  fflush(stdout);
  char b[16];
  while (read(0, b, sizeof b) > 0) {
  }
  _exit(0); /* no cleanup: the cluster must free the session by itself */
}

static int parse_list(const char *s, int32_t *out, int cap) {
  int n = 0, a, b;
  while (*s && n < cap) {
    int k = 0;
    if (sscanf(s, "%d-%d%n", &a, &b, &k) == 2 && k) {
      for (int v = a; v <= b && n < cap; v++) out[n++] = v;
    } else if (sscanf(s, "%d%n", &a, &k) == 1 && k) {
      out[n++] = a;
    } else {
      break;
    }
    s += k;
    if (*s == ',') s++;
  }
  return n;
}

static int mode_wait(const char *addr, const char *file, const char *list) {
  loom_client *c = connect_to(addr);
  int32_t devs[64];
  int nd = parse_list(list, devs, 64);
  loom_executable *e = compile_file(c, file, devs, nd);
  loom_executable_info info = {.struct_size = sizeof info};
  loom_executable_info_get(e, &info);
  CHECK(info.num_inputs == 0 && info.num_outputs <= 8);
  loom_array *outs[8];
  loom_future *f;
  double t0 = now_s();
  CHECK(loom_launch(e, NULL, 0, NULL, outs, info.num_outputs, &f) == LOOM_OK);
  printf("launched\n");
  fflush(stdout);
  loom_status st = loom_future_wait(f, -1);
  printf("done %s after %.2f s: %s\n", loom_status_name(st), now_s() - t0, loom_future_errmsg(f));
  fflush(stdout);
  for (int i = 0; i < info.num_outputs; i++) loom_array_release(outs[i]);
  loom_future_destroy(f);
  loom_executable_destroy(e);
  loom_disconnect(c);
  return 0;
}

static int mode_loop(const char *addr, const char *file, int n, int k, int li, char **files, int nfiles) {
  loom_client *c = connect_to(addr);
  loom_executable *e = compile_file(c, file, NULL, 0);
  loom_executable_info info = {.struct_size = sizeof info};
  loom_executable_info_get(e, &info);
  CHECK(info.num_inputs == nfiles && info.num_inputs <= 32 && info.num_outputs <= 32);
  CHECK(k <= info.num_outputs && k <= info.num_inputs && li < info.num_outputs);
  loom_array *in[32], *out[32];
  for (int i = 0; i < nfiles; i++) {
    loom_array_spec spec = {.struct_size = sizeof spec};
    loom_sharding s;
    loom_sharding_initialize(&s);
    CHECK(loom_executable_input(e, i, &spec, &s) == LOOM_OK);
    size_t len;
    char *data = read_file(files[i], &len);
    in[i] = put(c, spec.dtype, spec.rank, spec.dims, &s, data, len);
    free(data);
  }
  loom_array **losses = calloc((size_t)n + 1, sizeof *losses);
  loom_future *f = NULL;
  double t0 = now_s();
  for (int step = 0; step < n; step++) {
    loom_future_destroy(f);
    CHECK(loom_launch(e, in, info.num_inputs, NULL, out, info.num_outputs, &f) == LOOM_OK);
    for (int j = 0; j < info.num_outputs; j++) {
      if (j < k) {
        loom_array_release(in[j]);
        in[j] = out[j];
      } else if (j == li) {
        losses[step] = out[j];
      } else {
        loom_array_release(out[j]);
      }
    }
  }
  loom_status st = loom_future_wait(f, -1);
  double t1 = now_s();
  if (st != LOOM_OK) fprintf(stderr, "loop: %s\n", loom_future_errmsg(f));
  CHECK(st == LOOM_OK);
  for (int step = 0; step < n; step++) {
    float v = 0;
    CHECK(losses[step] && loom_array_nbytes(losses[step]) == 4);
    CHECK(loom_array_get(losses[step], &v, 4) == LOOM_OK);
    printf("loss %d %.9g\n", step, v);
    loom_array_release(losses[step]);
  }
  printf("ok loop %d steps in %.3f s\n", n, t1 - t0);
  free(losses);
  for (int i = 0; i < info.num_inputs; i++) loom_array_release(in[i]);
  loom_future_destroy(f);
  loom_executable_destroy(e);
  loom_disconnect(c);
  return 0;
}

/* A thread that cancels a future after a moment, while the main thread waits on it. */
typedef struct canceller {
  loom_future *f;
  loom_status st;
} canceller;

static void *cancel_later(void *arg) {
  canceller *k = arg;
  usleep(300 * 1000);
  k->st = loom_future_cancel(k->f);
  return NULL;
}

static int mode_cancel(const char *addr, const char *forever, const char *local, const char *add_one) {
  loom_client *c = connect_to(addr);
  int32_t mid[4] = {2, 3, 4, 5}; /* two devices of each worker */
  loom_executable *ef = compile_file(c, forever, NULL, 0);
  loom_executable *el = compile_file(c, local, mid, 4);
  loom_executable *ea = compile_file(c, add_one, NULL, 0);
  loom_array *a, *b, *q, *y, *x, *d;
  loom_future *fa, *fb, *fq, *fy, *fd;
  char cmsg[512];

  /* a: runs forever on 0-7; b consumes it; q waits behind it on 2-5 */
  CHECK(loom_launch(ef, NULL, 0, NULL, &a, 1, &fa) == LOOM_OK);
  CHECK(loom_launch(ea, &a, 1, NULL, &b, 1, &fb) == LOOM_OK);
  CHECK(loom_launch(el, NULL, 0, NULL, &q, 1, &fq) == LOOM_OK);
  usleep(500 * 1000);
  CHECK(loom_future_status(fa) == LOOM_PENDING && loom_future_wait(fa, 300) == LOOM_TIMEOUT);
  CHECK(loom_future_status(fb) == LOOM_PENDING && loom_future_status(fq) == LOOM_PENDING);
  printf("ok running and queued\n");

  /* the queued launch first: it never started anywhere */
  CHECK(loom_future_cancel(fq) == LOOM_CANCELLED);
  CHECK(strstr(loom_errmsg(c), "was cancelled by the client") != NULL);
  CHECK(loom_future_status(fq) == LOOM_CANCELLED && strstr(loom_future_errmsg(fq), "cancelled by the client"));
  int32_t buf[16];
  CHECK(loom_array_get(q, buf, sizeof buf) == LOOM_CANCELLED);
  printf("ok queued launch cancelled: %s\n", loom_future_errmsg(fq));
  CHECK(loom_future_status(fa) == LOOM_PENDING);

  /* the running one: stops everywhere, in the middle of its collectives */
  double t0 = now_s();
  CHECK(loom_future_cancel(fa) == LOOM_CANCELLED);
  double t1 = now_s();
  CHECK(loom_future_status(fa) == LOOM_CANCELLED);
  snprintf(cmsg, sizeof cmsg, "%s", loom_future_errmsg(fa));
  CHECK(strstr(cmsg, "was cancelled by the client") != NULL);
  printf("ok running launch cancelled in %.1f ms: %s\n", (t1 - t0) * 1e3, cmsg);
  CHECK(loom_future_wait(fb, 60000) == LOOM_CANCELLED);
  printf("ok consumer issued before the cancel: %s\n", loom_future_errmsg(fb));
  CHECK(loom_array_get(a, buf, sizeof buf) == LOOM_CANCELLED);
  CHECK(loom_array_block_until_ready(b, 1000) == LOOM_CANCELLED);
  /* idempotent, and what wait says from now on */
  CHECK(loom_future_cancel(fa) == LOOM_CANCELLED && loom_future_wait(fa, 0) == LOOM_CANCELLED);
  CHECK(strcmp(loom_future_errmsg(fa), cmsg) == 0);
  printf("ok cancelling again: %s\n", loom_status_name(loom_future_cancel(fa)));
  CHECK(loom_launch(ea, &a, 1, NULL, &y, 1, &fy) == LOOM_OK);
  CHECK(loom_future_wait(fy, 60000) == LOOM_CANCELLED && strcmp(loom_future_errmsg(fy), cmsg) == 0);
  printf("ok consumer issued after the cancel: %s\n", loom_future_errmsg(fy));
  loom_future_destroy(fy);
  loom_array_release(y);

  /* every device of both launches is free: the next launch on all 8 runs (devices run in order) */
  x = put_like_input(c, ea, 41);
  CHECK(loom_launch(ea, &x, 1, NULL, &d, 1, &fd) == LOOM_OK);
  CHECK(loom_future_wait(fd, 60000) == LOOM_OK);
  double t2 = now_s();
  CHECK(loom_array_get(d, buf, sizeof buf) == LOOM_OK);
  for (int i = 0; i < 16; i++) CHECK(buf[i] == 42);
  printf("ok next launch on the same devices done %.1f ms after the cancel\n", (t2 - t1) * 1e3);
  /* a finished future: nothing to do, its status */
  CHECK(loom_future_cancel(fd) == LOOM_OK && loom_future_status(fd) == LOOM_OK && loom_future_sequence(fd) > 0);
  printf("ok cancelling a finished launch: OK\n");
  /* a launch the controller refused: its error */
  int64_t three[1] = {3};
  int32_t v3[3] = {1, 2, 3};
  loom_array *bad = put(c, LOOM_DTYPE_S32, 1, three, NULL, v3, sizeof v3);
  CHECK(loom_launch(ea, &bad, 1, NULL, &y, 1, &fy) == LOOM_OK);
  CHECK(loom_future_cancel(fy) == LOOM_SHAPE_MISMATCH && loom_future_status(fy) == LOOM_SHAPE_MISMATCH);
  printf("ok cancelling a refused launch: %s\n", loom_status_name(loom_future_status(fy)));
  loom_future_destroy(fy);
  loom_array_release(y);
  loom_array_release(bad);
  CHECK(loom_future_cancel(NULL) == LOOM_INVALID_ARGUMENT);

  /* cancelled from another thread while this one waits (what a binding's Ctrl-C does) */
  loom_array *e;
  loom_future *fe;
  CHECK(loom_launch(el, NULL, 0, NULL, &e, 1, &fe) == LOOM_OK);
  canceller k = {.f = fe};
  pthread_t th;
  CHECK(pthread_create(&th, NULL, cancel_later, &k) == 0);
  loom_status st = loom_future_wait(fe, 60000);
  double t3 = now_s();
  pthread_join(th, NULL);
  CHECK(st == LOOM_CANCELLED && k.st == LOOM_CANCELLED && loom_future_status(fe) == LOOM_CANCELLED);
  printf("ok cancelled from another thread: %s\n", loom_future_errmsg(fe));
  loom_future_destroy(fd);
  loom_array_release(d);
  CHECK(loom_launch(ea, &x, 1, NULL, &d, 1, &fd) == LOOM_OK);
  CHECK(loom_future_wait(fd, 60000) == LOOM_OK);
  printf("ok devices free again: the next launch done %.1f ms after the cancel\n", (now_s() - t3) * 1e3);

  loom_future_destroy(fa), loom_future_destroy(fb), loom_future_destroy(fq), loom_future_destroy(fd);
  loom_future_destroy(fe);
  loom_array_release(a), loom_array_release(b), loom_array_release(q), loom_array_release(x);
  loom_array_release(d), loom_array_release(e);
  loom_executable_destroy(ef), loom_executable_destroy(el), loom_executable_destroy(ea);
  loom_disconnect(c);
  return 0;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc >= 3 && !strcmp(argv[1], "shardings")) return mode_shardings(argv[2]);
  if (argc >= 4 && !strcmp(argv[1], "big")) return mode_big(argv[2], atoi(argv[3]));
  if (argc >= 3 && !strcmp(argv[1], "regions")) return mode_regions(argv[2]);
  if (argc >= 4 && !strcmp(argv[1], "deny")) return mode_deny(argv[2], argv + 3);
  if (argc >= 5 && !strcmp(argv[1], "chain")) return mode_chain(argv[2], argv[3], atoi(argv[4]));
  if (argc >= 4 && !strcmp(argv[1], "errors")) return mode_errors(argv[2], argv[3]);
  if (argc >= 3 && !strcmp(argv[1], "oom")) return mode_oom(argv[2]);
  if (argc >= 4 && !strcmp(argv[1], "hold")) return mode_hold(argv[2], atoi(argv[3]));
  if (argc >= 5 && !strcmp(argv[1], "wait")) return mode_wait(argv[2], argv[3], argv[4]);
  if (argc >= 6 && !strcmp(argv[1], "cancel")) return mode_cancel(argv[2], argv[3], argv[4], argv[5]);
  if (argc >= 7 && !strcmp(argv[1], "loop"))
    return mode_loop(argv[2], argv[3], atoi(argv[4]), atoi(argv[5]), atoi(argv[6]), argv + 7, argc - 7);
  fprintf(stderr, "usage: dist_probe shardings|big|regions|deny|chain|errors|oom|hold|wait|cancel|loop ADDR ...\n");
  return 2;
}
