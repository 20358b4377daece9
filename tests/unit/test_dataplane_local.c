/* Data plane inside one process: reduction semantics per element type (NaN, signed zeros,
 * wrap-around, i1, complex order, f16/bf16 rounding), validation of addresses, groups and
 * arguments, and collectives among the device threads of a single worker (the shared-memory
 * path), including a mismatched call, a device that never comes, and cancellation; lm_dp_wake
 * ending waits in poll, on the endpoint's condition variable and in a local barrier at once. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include "common/half.h"
#include "dataplane_harness.h"

static int red(lm_dtype dt, lm_dp_op op, const void *a, const void *b, void *o, size_t n) {
  lm_dp_reduction r = {.dtype = dt, .op = op};
  lm_err e;
  return lm_dp_reduce(&r, a, b, o, n, &e);
}

static void test_float_semantics(void **state) {
  float a[4] = {NAN, 1.0f, -0.0f, 0.0f}, b[4] = {1.0f, NAN, 0.0f, -0.0f}, o[4];
  assert_int_equal(red(LOOM_DTYPE_F32, LM_DP_MAX, a, b, o, 4), 0);
  assert_true(isnan(o[0]) && isnan(o[1]));
  assert_true(o[2] == 0 && !signbit(o[2]) && o[3] == 0 && !signbit(o[3])); /* max(-0, +0) = +0 */
  assert_int_equal(red(LOOM_DTYPE_F32, LM_DP_MIN, a, b, o, 4), 0);
  assert_true(isnan(o[0]) && isnan(o[1]));
  assert_true(signbit(o[2]) && signbit(o[3])); /* min(-0, +0) = -0 */
  double x[2] = {1e308, 3}, y[2] = {1e308, 4}, z[2];
  assert_int_equal(red(LOOM_DTYPE_F64, LM_DP_SUM, x, y, z, 2), 0);
  assert_true(isinf(z[0]) && z[1] == 7);
  assert_int_equal(red(LOOM_DTYPE_F64, LM_DP_PROD, x + 1, y + 1, z, 1), 0);
  assert_true(z[0] == 12);
  /* f16: 2048 + 1 ties to even (2048); 65504 + 16 overflows to inf; computed in f32 */
  uint16_t h[3] = {lm_f32_to_f16(2048), lm_f32_to_f16(65504), lm_f32_to_f16(0.5f)};
  uint16_t k[3] = {lm_f32_to_f16(1), lm_f32_to_f16(16), lm_f32_to_f16(0.25f)}, ho[3];
  assert_int_equal(red(LOOM_DTYPE_F16, LM_DP_SUM, h, k, ho, 3), 0);
  assert_true(lm_f16_to_f32(ho[0]) == 2048 && isinf(lm_f16_to_f32(ho[1])) && lm_f16_to_f32(ho[2]) == 0.75f);
  uint16_t bh[2] = {lm_f32_to_bf16(256), lm_f32_to_bf16(3)}, bk[2] = {lm_f32_to_bf16(1), lm_f32_to_bf16(-5)}, bo[2];
  assert_int_equal(red(LOOM_DTYPE_BF16, LM_DP_SUM, bh, bk, bo, 2), 0);
  assert_true(lm_bf16_to_f32(bo[0]) == 256 && lm_bf16_to_f32(bo[1]) == -2);
  assert_int_equal(red(LOOM_DTYPE_BF16, LM_DP_MAX, bh, bk, bo, 2), 0);
  assert_true(lm_bf16_to_f32(bo[0]) == 256 && lm_bf16_to_f32(bo[1]) == 3);
}

static void test_integer_semantics(void **state) {
  int8_t a[3] = {127, -1, -128}, b[3] = {1, 1, -1}, o[3];
  assert_int_equal(red(LOOM_DTYPE_S8, LM_DP_SUM, a, b, o, 3), 0);
  assert_true(o[0] == -128 && o[1] == 0 && o[2] == 127); /* wraps */
  assert_int_equal(red(LOOM_DTYPE_S8, LM_DP_MIN, a, b, o, 3), 0);
  assert_true(o[0] == 1 && o[1] == -1 && o[2] == -128);
  uint8_t u[2] = {255, 3}, v[2] = {1, 5}, w[2];
  assert_int_equal(red(LOOM_DTYPE_U8, LM_DP_SUM, u, v, w, 2), 0);
  assert_true(w[0] == 0 && w[1] == 8);
  assert_int_equal(red(LOOM_DTYPE_U8, LM_DP_MAX, u, v, w, 2), 0);
  assert_true(w[0] == 255 && w[1] == 5);
  assert_int_equal(red(LOOM_DTYPE_U8, LM_DP_XOR, u, v, w, 2), 0);
  assert_true(w[0] == 254 && w[1] == 6);
  int64_t p[1] = {INT64_MAX}, q[1] = {2}, r[1];
  assert_int_equal(red(LOOM_DTYPE_S64, LM_DP_PROD, p, q, r, 1), 0);
  assert_true(r[0] == -2);
  uint32_t s[1] = {0xf0f0f0f0u}, t[1] = {0x0ff00ff0u}, x[1];
  assert_int_equal(red(LOOM_DTYPE_U32, LM_DP_AND, s, t, x, 1), 0);
  assert_true(x[0] == 0x00f000f0u);
  assert_int_equal(red(LOOM_DTYPE_U32, LM_DP_OR, s, t, x, 1), 0);
  assert_true(x[0] == 0xfff0fff0u);
  /* in place, either side */
  assert_int_equal(red(LOOM_DTYPE_U32, LM_DP_SUM, s, t, s, 1), 0);
  assert_true(s[0] == 0xf0f0f0f0u + 0x0ff00ff0u);
  assert_int_equal(red(LOOM_DTYPE_U32, LM_DP_SUM, s, t, t, 1), 0);
  assert_true(t[0] == 0xf0f0f0f0u + 2 * 0x0ff00ff0u);
}

static void test_pred_semantics(void **state) {
  uint8_t a[4] = {0, 0, 1, 2}, b[4] = {0, 1, 0, 3}, o[4];
  assert_int_equal(red(LOOM_DTYPE_PRED, LM_DP_SUM, a, b, o, 4), 0); /* or */
  assert_memory_equal(o, ((uint8_t[]){0, 1, 1, 1}), 4);
  assert_int_equal(red(LOOM_DTYPE_PRED, LM_DP_PROD, a, b, o, 4), 0); /* and */
  assert_memory_equal(o, ((uint8_t[]){0, 0, 0, 1}), 4);
  assert_int_equal(red(LOOM_DTYPE_PRED, LM_DP_MIN, a, b, o, 4), 0);
  assert_memory_equal(o, ((uint8_t[]){0, 0, 0, 1}), 4);
  assert_int_equal(red(LOOM_DTYPE_PRED, LM_DP_MAX, a, b, o, 4), 0);
  assert_memory_equal(o, ((uint8_t[]){0, 1, 1, 1}), 4);
  assert_int_equal(red(LOOM_DTYPE_PRED, LM_DP_XOR, a, b, o, 4), 0); /* 2 ^ 3 as booleans: false */
  assert_memory_equal(o, ((uint8_t[]){0, 1, 1, 0}), 4);
}

static void test_complex_semantics(void **state) {
  float a[4] = {1, 2, 1, 5}, b[4] = {3, 4, 1, -5}, o[4];
  assert_int_equal(red(LOOM_DTYPE_C64, LM_DP_PROD, a, b, o, 2), 0);
  assert_true(o[0] == -5 && o[1] == 10 && o[2] == 26 && o[3] == 0);
  assert_int_equal(red(LOOM_DTYPE_C64, LM_DP_SUM, a, b, o, 2), 0);
  assert_true(o[0] == 4 && o[1] == 6 && o[2] == 2 && o[3] == 0);
  /* lexicographic: (1,2) < (3,4); (1,5) > (1,-5) */
  assert_int_equal(red(LOOM_DTYPE_C64, LM_DP_MAX, a, b, o, 2), 0);
  assert_true(o[0] == 3 && o[1] == 4 && o[2] == 1 && o[3] == 5);
  double c[2] = {2, NAN}, d[2] = {3, 0}, e[2];
  assert_int_equal(red(LOOM_DTYPE_C128, LM_DP_MIN, c, d, e, 1), 0);
  assert_true(e[0] == 2 && isnan(e[1])); /* a NaN part wins */
}

static int failing_combine(void *user, const void *l, const void *r, void *o, size_t n, lm_err *err) {
  (*(int *)user)++;
  return lm_errf(err, LOOM_CHECK_FAILED, "the body failed on purpose");
}

static void test_reduction_errors(void **state) {
  lm_err e;
  float f[1] = {1};
  lm_dp_reduction r = {.dtype = LOOM_DTYPE_F32, .op = LM_DP_AND};
  assert_int_equal(lm_dp_reduce(&r, f, f, f, 1, &e), LOOM_UNSUPPORTED);
  assert_non_null(strstr(e.msg, "'and'"));
  assert_non_null(strstr(e.msg, "f32"));
  r = (lm_dp_reduction){.dtype = LOOM_DTYPE_C128, .op = LM_DP_XOR};
  assert_int_equal(lm_dp_reduction_check(&r, &e), LOOM_UNSUPPORTED);
  r = (lm_dp_reduction){.dtype = (lm_dtype)99, .op = LM_DP_SUM};
  assert_int_equal(lm_dp_reduction_check(&r, &e), LOOM_INVALID_ARGUMENT);
  r = (lm_dp_reduction){.dtype = LOOM_DTYPE_F32, .op = (lm_dp_op)42};
  assert_int_equal(lm_dp_reduction_check(&r, &e), LOOM_INVALID_ARGUMENT);
  r = (lm_dp_reduction){.dtype = LOOM_DTYPE_F32, .op = LM_DP_CUSTOM};
  assert_int_equal(lm_dp_reduction_check(&r, &e), LOOM_INVALID_ARGUMENT);
  int calls = 0;
  r = (lm_dp_reduction){.dtype = LOOM_DTYPE_F32, .op = LM_DP_CUSTOM, .combine = failing_combine, .user = &calls};
  assert_int_equal(lm_dp_reduce(&r, f, f, f, 1, &e), LOOM_CHECK_FAILED);
  assert_int_equal(calls, 1);
  assert_non_null(strstr(e.msg, "on purpose"));
}

/* ---- endpoint, addresses, groups ---- */

static lm_dp *new_dp_live(uint64_t id, uint32_t ndev, int32_t liveness_ms) {
  lm_dp_config c;
  lm_dp_config_init(&c);
  c.self_id = id;
  c.num_devices = ndev;
  c.timeout_ms = 10000;
  c.liveness_ms = liveness_ms;
  lm_dp *dp = NULL;
  lm_err e;
  if (lm_dp_create(&c, &dp, &e) < 0) fprintf(stderr, "lm_dp_create: %s\n", e.msg);
  return dp;
}

static lm_dp *new_dp(uint64_t id, uint32_t ndev) { return new_dp_live(id, ndev, 0); }

static void test_endpoint_and_addresses(void **state) {
  lm_err e;
  lm_dp *dp;
  lm_dp_config c;
  lm_dp_config_init(&c);
  c.struct_size = 4;
  assert_int_equal(lm_dp_create(&c, &dp, &e), LOOM_INVALID_ARGUMENT);
  lm_dp_config_init(&c);
  c.num_devices = 0;
  assert_int_equal(lm_dp_create(&c, &dp, &e), LOOM_INVALID_ARGUMENT);
  lm_dp_destroy(NULL);

  dp = new_dp(7, 2);
  assert_non_null(dp);
  assert_int_equal(lm_dp_self(dp), 7);
  const void *blob;
  size_t len;
  lm_dp_address(dp, &blob, &len);
  uint64_t id = 0;
  assert_int_equal(lm_dp_address_id(blob, len, &id, &e), 0);
  assert_int_equal(id, 7);
  uint8_t bad[4096];
  assert_true(len <= sizeof bad);
  assert_int_equal(lm_dp_address_id(blob, 10, &id, &e), LOOM_PROTOCOL);
  assert_int_equal(lm_dp_address_id(blob, len - 1, &id, &e), LOOM_PROTOCOL);
  memcpy(bad, blob, len);
  bad[0] ^= 0xff;
  assert_int_equal(lm_dp_peer_add(dp, bad, len, NULL, &e), LOOM_PROTOCOL);
  memcpy(bad, blob, len);
  bad[4] = 99;
  assert_int_equal(lm_dp_peer_add(dp, bad, len, NULL, &e), LOOM_VERSION_MISMATCH);
  memcpy(bad, blob, len);
  bad[20] ^= 1; /* UCX address length disagrees */
  assert_int_equal(lm_dp_peer_add(dp, bad, len, NULL, &e), LOOM_PROTOCOL);
  memcpy(bad, blob, len);
  bad[6] = 7; /* a topology trailer of a length other than 0 or 16 */
  assert_int_equal(lm_dp_peer_add(dp, bad, len, NULL, &e), LOOM_PROTOCOL);
  memcpy(bad, blob, len);
  bad[6] = 0; /* no trailer: the 16 bytes would be taken as UCX address, which disagrees */
  assert_int_equal(lm_dp_peer_add(dp, bad, len, NULL, &e), LOOM_PROTOCOL);
  bad[6] = 16;
  bad[7] = 1; /* a trailer length of 272 */
  assert_int_equal(lm_dp_address_id(bad, 20, &id, &e), LOOM_PROTOCOL);
  /* LOOM_DP_COLL must name an algorithm */
  setenv("LOOM_DP_COLL", "ring", 1);
  lm_dp *bad_dp = NULL;
  lm_dp_config_init(&c);
  c.self_id = 99;
  assert_int_equal(lm_dp_create(&c, &bad_dp, &e), LOOM_INVALID_ARGUMENT);
  assert_non_null(strstr(e.msg, "LOOM_DP_COLL"));
  unsetenv("LOOM_DP_COLL");
  lm_dp_config_init(&c);
  c.coll_algo = 7;
  assert_int_equal(lm_dp_create(&c, &bad_dp, &e), LOOM_INVALID_ARGUMENT);
  assert_null(bad_dp);
  assert_int_equal(lm_dp_peer_add(dp, NULL, 0, NULL, &e), LOOM_PROTOCOL);
  /* its own address is accepted and ignored */
  assert_int_equal(lm_dp_peer_add(dp, blob, len, &id, &e), 0);
  assert_int_equal(lm_dp_peer_status(dp, 7, &e), LOOM_NOT_FOUND);
  assert_int_equal(lm_dp_peer_fail(dp, 12345, "gone"), LOOM_NOT_FOUND);

  /* a second endpoint as a peer: add, fail, revive */
  lm_dp *dp2 = new_dp(8, 1);
  assert_non_null(dp2);
  const void *b2;
  size_t l2;
  lm_dp_address(dp2, &b2, &l2);
  assert_int_equal(lm_dp_peer_add(dp, b2, l2, &id, &e), 0);
  assert_int_equal(id, 8);
  assert_int_equal(lm_dp_peer_status(dp, 8, &e), 0);
  assert_int_equal(lm_dp_peer_fail(dp, 8, "the controller saw it go"), 0);
  assert_int_equal(lm_dp_peer_status(dp, 8, &e), LOOM_WORKER_LOST);
  assert_non_null(strstr(e.msg, "the controller saw it go"));
  uint8_t x = 0;
  assert_int_equal(lm_dp_send(dp, 8, 1, &x, 1, NULL, &e), LOOM_WORKER_LOST);
  /* the same address again revives it (the controller saw it come back) */
  assert_int_equal(lm_dp_peer_add(dp, b2, l2, &id, &e), 0);
  assert_int_equal(lm_dp_peer_status(dp, 8, &e), 0);
  assert_int_equal(lm_dp_peer_fail(dp, 8, "gone again"), 0);
  assert_int_equal(lm_dp_send(dp, 99, 1, &x, 1, NULL, &e), LOOM_NOT_FOUND);
  lm_dp_destroy(dp2);
  dp2 = new_dp(8, 1); /* the worker restarted with a new address */
  lm_dp_address(dp2, &b2, &l2);
  assert_int_equal(lm_dp_peer_add(dp, b2, l2, &id, &e), 0);
  assert_int_equal(lm_dp_peer_status(dp, 8, &e), 0);
  /* the two endpoints talk (threads of one process, two UCX workers) */
  assert_int_equal(lm_dp_address(dp, &blob, &len), 0);
  assert_int_equal(lm_dp_peer_add(dp2, blob, len, NULL, &e), 0);
  lm_dp_req *rq;
  uint8_t got = 0, one = 42;
  assert_int_equal(lm_dp_irecv(dp2, 7, 5, &got, 1, &rq, &e), 0);
  assert_int_equal(lm_dp_send(dp, 8, 5, &one, 1, NULL, &e), 0);
  assert_int_equal(lm_dp_wait(dp2, rq, NULL, &e), 0);
  assert_int_equal(got, 42);
  /* a receive nobody sends to times out and says so */
  lm_dp_call call = {.struct_size = sizeof call, .timeout_ms = 100};
  assert_int_equal(lm_dp_recv(dp2, 7, 6, &got, 1, &call, &e), LOOM_TIMEOUT);
  assert_non_null(strstr(e.msg, "timed out"));
  /* and one cancelled by its flag stops */
  volatile int stop = 1;
  call.timeout_ms = 0;
  call.cancel = &stop;
  assert_int_equal(lm_dp_recv(dp2, 7, 6, &got, 1, &call, &e), LOOM_CANCELLED);
  lm_dp_destroy(dp2);
  lm_dp_destroy(dp);
}

static void test_groups(void **state) {
  lm_err e;
  lm_dp *dp = new_dp(1, 4);
  assert_non_null(dp);
  lm_dp_group *g, *g2;
  lm_dp_member m[4] = {{1, 0}, {1, 1}, {1, 2}, {1, 3}};
  assert_int_equal(lm_dp_group_get(dp, m, 0, &g, &e), LOOM_INVALID_ARGUMENT);
  assert_int_equal(lm_dp_group_get(dp, m, 4, &g, &e), 0);
  assert_int_equal(lm_dp_group_get(dp, m, 4, &g2, &e), 0);
  assert_ptr_equal(g, g2); /* interned */
  assert_int_equal(lm_dp_group_size(g), 4);
  assert_int_equal(lm_dp_group_rank(g, 1, 2), 2);
  assert_int_equal(lm_dp_group_rank(g, 2, 0), -1);
  lm_dp_group_release(g2);
  lm_dp_member dup[2] = {{1, 0}, {1, 0}};
  assert_int_equal(lm_dp_group_get(dp, dup, 2, &g2, &e), LOOM_INVALID_ARGUMENT);
  assert_non_null(strstr(e.msg, "twice"));
  lm_dp_member big[1] = {{1, 4}};
  assert_int_equal(lm_dp_group_get(dp, big, 1, &g2, &e), LOOM_INVALID_ARGUMENT);
  lm_dp_member unknown[2] = {{1, 0}, {55, 0}};
  assert_int_equal(lm_dp_group_get(dp, unknown, 2, &g2, &e), LOOM_NOT_FOUND);
  assert_non_null(strstr(e.msg, "worker 55"));
  /* argument checks before anything is sent */
  float a[8] = {0}, b[32];
  lm_dp_reduction sum = {.dtype = LOOM_DTYPE_F32, .op = LM_DP_SUM};
  assert_int_equal(lm_dp_all_reduce(g, 4, 1, a, b, 8, &sum, NULL, &e), LOOM_INVALID_ARGUMENT);
  assert_int_equal(lm_dp_all_reduce(g, 0, 1, NULL, b, 8, &sum, NULL, &e), LOOM_INVALID_ARGUMENT);
  assert_int_equal(lm_dp_all_reduce(g, 0, 1, a, b, SIZE_MAX / 2, &sum, NULL, &e), LOOM_INVALID_ARGUMENT);
  assert_int_equal(lm_dp_all_gather(g, 0, 1, b + 4, b, 32, NULL, &e), LOOM_INVALID_ARGUMENT); /* overlap */
  assert_non_null(strstr(e.msg, "overlap"));
  assert_int_equal(lm_dp_collective_permute(g, 0, 1, a, b, 4, 9, -1, NULL, &e), LOOM_INVALID_ARGUMENT);
  assert_int_equal(lm_dp_broadcast(g, 0, 1, 4, a, b, 4, NULL, &e), LOOM_INVALID_ARGUMENT);
  lm_dp_group_release(g);
  lm_dp_destroy(dp);
}

/* ---- collectives among the device threads of one worker ---- */

typedef struct local_ctx {
  lm_dp *dp;
  lm_dp_group *g;
  int mode;   /* 0: every op; 1: mismatched counts; 2: device 3 stays away; 3: cancelled */
  volatile int stop;
} local_ctx;

static local_ctx *g_local;

static void *local_dev(void *arg) {
  int dev = (int)(intptr_t)arg;
  local_ctx *L = g_local;
  lm_dp_group *g = L->g;
  uint32_t n = 4, r = (uint32_t)dev;
  lm_err e;
  lm_dp_reduction sum = {.dtype = LOOM_DTYPE_S32, .op = LM_DP_SUM};
  static _Thread_local int32_t a[4096], b[4 * 4096];
  if (L->mode == 1) {
    int rc = lm_dp_all_reduce(g, r, 1, a, b, dev == 1 ? 5 : 4, &sum, NULL, &e);
    H_CHECK(rc == LOOM_INVALID_ARGUMENT && strstr(e.msg, "different calls"), "rc %d: %s", rc, e.msg);
    return NULL;
  }
  if (L->mode == 2) {
    if (dev == 3) return NULL;
    lm_dp_call call = {.struct_size = sizeof call, .timeout_ms = 200};
    int rc = lm_dp_all_reduce(g, r, 1, a, b, 4, &sum, &call, &e);
    H_CHECK(rc == LOOM_TIMEOUT && strstr(e.msg, "other devices"), "rc %d: %s", rc, e.msg);
    return NULL;
  }
  if (L->mode == 3) {
    if (dev == 3) {
      usleep(50000);
      L->stop = 1;
      return NULL;
    }
    lm_dp_call call = {.struct_size = sizeof call, .cancel = &L->stop};
    int rc = lm_dp_all_reduce(g, r, 1, a, b, 4, &sum, &call, &e);
    H_CHECK(rc == LOOM_CANCELLED, "rc %d: %s", rc, e.msg);
    return NULL;
  }
  uint64_t tag = 0;
  const size_t counts[] = {1, 3, 777, 4096};
  for (size_t ci = 0; ci < 4; ci++) {
    size_t c = counts[ci];
    for (size_t i = 0; i < c; i++) a[i] = (int32_t)(r * 100 + i);
    int32_t *dst = (ci & 1) ? a : b; /* in place every other time */
    H_CHECK(lm_dp_all_reduce(g, r, ++tag, a, dst, c, &sum, NULL, &e) == 0, "%s", e.msg);
    for (size_t i = 0; i < c; i++)
      if (dst[i] != (int32_t)(600 + 4 * i)) {
        H_CHECK(0, "all_reduce c %zu elem %zu: %d", c, i, dst[i]);
        break;
      }
    for (size_t i = 0; i < c; i++) a[i] = (int32_t)(r * 100000 + i);
    H_CHECK(lm_dp_all_gather(g, r, ++tag, a, b, c * 4, NULL, &e) == 0, "%s", e.msg);
    for (uint32_t j = 0; j < n; j++)
      for (size_t i = 0; i < c; i++)
        if (b[j * c + i] != (int32_t)(j * 100000 + i)) {
          H_CHECK(0, "all_gather c %zu block %u elem %zu", c, j, i);
          j = n;
          break;
        }
    if (c * 4 <= 4096) {
      for (size_t i = 0; i < c * 4; i++) b[i] = (int32_t)(r + i);
      H_CHECK(lm_dp_reduce_scatter(g, r, ++tag, b, a, c, &sum, NULL, &e) == 0, "%s", e.msg);
      for (size_t i = 0; i < c; i++)
        if (a[i] != (int32_t)(6 + 4 * (r * c + i))) {
          H_CHECK(0, "reduce_scatter c %zu elem %zu: %d", c, i, a[i]);
          break;
        }
      int32_t *s2 = malloc(c * 16), *r2 = malloc(c * 16);
      for (size_t i = 0; i < c * 4; i++) s2[i] = (int32_t)(r * 1000000 + i);
      H_CHECK(lm_dp_all_to_all(g, r, ++tag, s2, r2, c * 4, NULL, &e) == 0, "%s", e.msg);
      for (uint32_t j = 0; j < n; j++)
        for (size_t i = 0; i < c; i++)
          if (r2[j * c + i] != (int32_t)(j * 1000000 + r * c + i)) {
            H_CHECK(0, "all_to_all c %zu block %u elem %zu", c, j, i);
            j = n;
            break;
          }
      free(s2);
      free(r2);
    }
    for (size_t i = 0; i < c; i++) a[i] = (int32_t)(r * 7 + i);
    H_CHECK(lm_dp_collective_permute(g, r, ++tag, a, a, c * 4, r == 3 ? -1 : (int64_t)r + 1, r == 0 ? -1 : (int64_t)r - 1, NULL, &e) ==
                0,
            "%s", e.msg);
    for (size_t i = 0; i < c; i++)
      if (a[i] != (r == 0 ? 0 : (int32_t)((r - 1) * 7 + i))) {
        H_CHECK(0, "permute c %zu elem %zu: %d", c, i, a[i]);
        break;
      }
    for (size_t i = 0; i < c; i++) a[i] = (int32_t)(r == 2 ? 5000 + i : -1);
    H_CHECK(lm_dp_broadcast(g, r, ++tag, 2, a, b, c * 4, NULL, &e) == 0, "%s", e.msg);
    for (size_t i = 0; i < c; i++)
      if (b[i] != (int32_t)(5000 + i)) {
        H_CHECK(0, "broadcast c %zu elem %zu", c, i);
        break;
      }
    H_CHECK(lm_dp_barrier(g, r, ++tag, NULL, &e) == 0, "%s", e.msg);
  }
  return NULL;
}

static void run_local(int mode) {
  lm_err e;
  local_ctx L = {.dp = new_dp(1, 4), .mode = mode};
  assert_non_null(L.dp);
  lm_dp_member m[4] = {{1, 0}, {1, 1}, {1, 2}, {1, 3}};
  assert_int_equal(lm_dp_group_get(L.dp, m, 4, &L.g, &e), 0);
  g_local = &L;
  atomic_store(&h_fails, 0);
  pthread_t th[4];
  for (int d = 0; d < 4; d++) pthread_create(&th[d], NULL, local_dev, (void *)(intptr_t)d);
  for (int d = 0; d < 4; d++) pthread_join(th[d], NULL);
  assert_int_equal(atomic_load(&h_fails), 0);
  lm_dp_group_release(L.g);
  lm_dp_destroy(L.dp);
}

/* ---- waking blocked waits (lm_dp_wake) ----
 *
 * These endpoints look at their peers and at cancel flags on their own only every
 * WAKE_LIVENESS_MS (local barriers every quarter of it), so a wait that ends within
 * WAKE_BOUND_MS of its cancel was ended by lm_dp_wake; without the wake each check below
 * would take 250 ms to 1 s. */
#define WAKE_LIVENESS_MS 1000
#define WAKE_BOUND_MS 100

typedef struct waiter {
  lm_dp *dp;
  lm_dp_group *g;             /* all_reduce on g; NULL: a receive from worker `peer` */
  uint32_t rank;
  uint64_t tag, peer;
  volatile int *cancel;
  int32_t buf[4];
  int rc;
  char msg[LM_ERR_MSG_MAX];
  atomic_int done;
  double t_done;
  pthread_t th;
} waiter;

static void *waiter_main(void *arg) {
  waiter *w = arg;
  lm_err e;
  lm_err_clear(&e);
  lm_dp_call call = {.struct_size = sizeof call, .cancel = w->cancel};
  lm_dp_reduction sum = {.dtype = LOOM_DTYPE_S32, .op = LM_DP_SUM};
  if (w->g) w->rc = lm_dp_all_reduce(w->g, w->rank, w->tag, w->buf, w->buf, 4, &sum, &call, &e);
  else w->rc = lm_dp_recv(w->dp, w->peer, w->tag, w->buf, sizeof w->buf, &call, &e);
  snprintf(w->msg, sizeof w->msg, "%s", e.msg);
  w->t_done = h_now();
  atomic_store(&w->done, 1);
  return NULL;
}

static void waiter_start(waiter *w) { assert_int_equal(pthread_create(&w->th, NULL, waiter_main, w), 0); }

/* Returns once a device thread of dp has blocked in poll more often than `before` times (the
 * waiter holds the progress role and sleeps), plus a moment. */
static void wait_blocked(lm_dp *dp, uint64_t before) {
  lm_dp_stats st;
  double until = h_now() + 10;
  do {
    usleep(1000);
    lm_dp_get_stats(dp, &st);
  } while (st.blocks <= before && h_now() < until);
  assert_true(st.blocks > before);
  usleep(20000);
}

/* Sets the flag, wakes dp, and returns how long the waiter took to return, in ms. */
static double cancel_and_wake(lm_dp *dp, volatile int *flag, waiter *w) {
  double t0 = h_now();
  __atomic_store_n(flag, 1, __ATOMIC_SEQ_CST);
  lm_dp_wake(dp);
  pthread_join(w->th, NULL);
  return (w->t_done - t0) * 1e3;
}

static void peer_both(lm_dp *a, lm_dp *b) {
  const void *blob;
  size_t len;
  lm_err e;
  lm_dp_address(b, &blob, &len);
  assert_int_equal(lm_dp_peer_add(a, blob, len, NULL, &e), 0);
  lm_dp_address(a, &blob, &len);
  assert_int_equal(lm_dp_peer_add(b, blob, len, NULL, &e), 0);
}

/* An all_reduce whose other member (worker 2) never comes: the waiting thread holds the
 * progress role and sleeps in poll(); the wake ends it at once. */
static void test_wake_collective(void **state) {
  lm_err e;
  lm_dp *dp1 = new_dp_live(1, 1, WAKE_LIVENESS_MS), *dp2 = new_dp_live(2, 1, WAKE_LIVENESS_MS);
  assert_non_null(dp1);
  assert_non_null(dp2);
  peer_both(dp1, dp2);
  lm_dp_wake(NULL);
  lm_dp_wake(dp1); /* nobody waits: nothing happens */
  lm_dp_member m[2] = {{1, 0}, {2, 0}};
  lm_dp_group *g;
  assert_int_equal(lm_dp_group_get(dp1, m, 2, &g, &e), 0);
  lm_dp_stats st;
  lm_dp_get_stats(dp1, &st);
  volatile int stop = 0;
  waiter w = {.dp = dp1, .g = g, .rank = 0, .tag = 1, .cancel = &stop};
  waiter_start(&w);
  wait_blocked(dp1, st.blocks);
  assert_int_equal(atomic_load(&w.done), 0);
  double ms = cancel_and_wake(dp1, &stop, &w);
  assert_int_equal(w.rc, LOOM_CANCELLED);
  assert_non_null(strstr(w.msg, "cancelled"));
  print_message("all_reduce waiting in poll: returned %.2f ms after cancel + wake\n", ms);
  assert_true(ms < WAKE_BOUND_MS);

  /* a flag set without a wake is still seen, at the next periodic look (not a timeout) */
  volatile int stop2 = 0;
  waiter w2 = {.dp = dp1, .g = g, .rank = 0, .tag = 2, .cancel = &stop2};
  lm_dp_get_stats(dp1, &st);
  waiter_start(&w2);
  wait_blocked(dp1, st.blocks);
  __atomic_store_n(&stop2, 1, __ATOMIC_SEQ_CST);
  pthread_join(w2.th, NULL);
  assert_int_equal(w2.rc, LOOM_CANCELLED);
  lm_dp_group_release(g);
  lm_dp_destroy(dp2);
  lm_dp_destroy(dp1);
}

/* Two receives on two threads: the first holds the progress role (poll), the second sleeps on
 * the endpoint's condition variable. Cancelling the second wakes it alone; the first goes back
 * to waiting and still gets its message. */
static void test_wake_selective(void **state) {
  lm_err e;
  lm_dp *dp1 = new_dp_live(1, 2, WAKE_LIVENESS_MS), *dp2 = new_dp_live(2, 1, WAKE_LIVENESS_MS);
  assert_non_null(dp1);
  assert_non_null(dp2);
  peer_both(dp1, dp2);
  lm_dp_stats st;
  lm_dp_get_stats(dp1, &st);
  volatile int stop_a = 0, stop_b = 0;
  waiter a = {.dp = dp1, .peer = 2, .tag = 50, .cancel = &stop_a};
  waiter b = {.dp = dp1, .peer = 2, .tag = 51, .cancel = &stop_b};
  waiter_start(&a);
  wait_blocked(dp1, st.blocks);
  waiter_start(&b);
  usleep(30000);
  assert_int_equal(atomic_load(&b.done), 0);
  double ms = cancel_and_wake(dp1, &stop_b, &b);
  assert_int_equal(b.rc, LOOM_CANCELLED);
  print_message("receive waiting on the condition variable: returned %.2f ms after cancel + wake\n", ms);
  assert_true(ms < WAKE_BOUND_MS);
  usleep(20000);
  assert_int_equal(atomic_load(&a.done), 0); /* its flag is not set: still waiting */
  int32_t v[4] = {7, 8, 9, 10};
  assert_int_equal(lm_dp_send(dp2, 1, 50, v, sizeof v, NULL, &e), 0);
  pthread_join(a.th, NULL);
  assert_int_equal(a.rc, 0);
  assert_memory_equal(a.buf, v, sizeof v);
  lm_dp_destroy(dp2);
  lm_dp_destroy(dp1);
}

/* Three device threads of one worker in a local barrier, waiting for a fourth that never
 * comes; one flag for all (a launch's), one wake. */
static void test_wake_local_barrier(void **state) {
  lm_err e;
  lm_dp *dp = new_dp_live(1, 4, WAKE_LIVENESS_MS);
  assert_non_null(dp);
  lm_dp_member m[4] = {{1, 0}, {1, 1}, {1, 2}, {1, 3}};
  lm_dp_group *g;
  assert_int_equal(lm_dp_group_get(dp, m, 4, &g, &e), 0);
  volatile int stop = 0;
  waiter w[3];
  for (uint32_t i = 0; i < 3; i++) {
    w[i] = (waiter){.dp = dp, .g = g, .rank = i, .tag = 9, .cancel = &stop};
    waiter_start(&w[i]);
  }
  usleep(50000);
  for (int i = 0; i < 3; i++) assert_int_equal(atomic_load(&w[i].done), 0);
  double ms = cancel_and_wake(dp, &stop, &w[0]);
  for (int i = 1; i < 3; i++) pthread_join(w[i].th, NULL);
  double t0 = w[0].t_done - ms / 1e3;
  for (int i = 0; i < 3; i++) {
    double mi = (w[i].t_done - t0) * 1e3;
    assert_int_equal(w[i].rc, LOOM_CANCELLED);
    print_message("local barrier, rank %d: returned %.2f ms after cancel + wake\n", i, mi);
    assert_true(mi < WAKE_BOUND_MS);
  }
  lm_dp_group_release(g);
  lm_dp_destroy(dp);
}

/* A member woken by a cancel must not leave the call while another local member still works
 * on its buffers: one member's reduction body (the leader's fold of every input for a small
 * all_reduce, one slice of every input for a large one) cancels the launch, wakes the endpoint
 * and dawdles; no other member may return before it is done. */
typedef struct leave_ctx {
  lm_dp *dp;
  lm_dp_group *g;
  size_t count;
  uint32_t slow;              /* the rank whose body cancels and dawdles */
  volatile int stop;
  atomic_int returned, early, calls;
} leave_ctx;

static leave_ctx *g_leave;

static int slow_sum(void *user, const void *lhs, const void *rhs, void *out, size_t count, lm_err *err) {
  leave_ctx *L = g_leave;
  if ((uintptr_t)user == L->slow && atomic_fetch_add(&L->calls, 1) == 0) {
    __atomic_store_n(&L->stop, 1, __ATOMIC_SEQ_CST);
    lm_dp_wake(L->dp);
    usleep(30000);
    if (atomic_load(&L->returned)) atomic_store(&L->early, 1); /* read a buffer its owner may have freed */
  }
  const int32_t *a = lhs, *b = rhs;
  int32_t *o = out;
  for (size_t i = 0; i < count; i++) o[i] = a[i] + b[i];
  return 0;
}

static void *leave_dev(void *arg) {
  uint32_t r = (uint32_t)(intptr_t)arg;
  leave_ctx *L = g_leave;
  int32_t *x = calloc(L->count, sizeof *x), *y = calloc(L->count, sizeof *y);
  lm_dp_reduction red = {.dtype = LOOM_DTYPE_S32, .op = LM_DP_CUSTOM, .combine = slow_sum, .user = (void *)(uintptr_t)r};
  lm_dp_call call = {.struct_size = sizeof call, .cancel = &L->stop};
  lm_err e;
  int rc = lm_dp_all_reduce(L->g, r, 3, x, y, L->count, &red, &call, &e);
  atomic_fetch_add(&L->returned, 1);
  H_CHECK(rc == LOOM_CANCELLED, "rank %u: rc %d: %s", r, rc, e.msg);
  free(x); /* what an executor does with a run's buffers once the call returned */
  free(y);
  return NULL;
}

static void test_cancel_no_early_leave(void **state) {
  lm_err e;
  const size_t counts[2] = {1000, 100000}; /* 4 KB: the leader folds; 400 KB: each a slice */
  const uint32_t slow[2] = {0, 2};
  for (int k = 0; k < 2; k++) {
    leave_ctx L = {.dp = new_dp_live(1, 4, WAKE_LIVENESS_MS), .count = counts[k], .slow = slow[k]};
    assert_non_null(L.dp);
    lm_dp_member m[4] = {{1, 0}, {1, 1}, {1, 2}, {1, 3}};
    assert_int_equal(lm_dp_group_get(L.dp, m, 4, &L.g, &e), 0);
    g_leave = &L;
    atomic_store(&h_fails, 0);
    pthread_t th[4];
    for (int d = 0; d < 4; d++) pthread_create(&th[d], NULL, leave_dev, (void *)(intptr_t)d);
    for (int d = 0; d < 4; d++) pthread_join(th[d], NULL);
    assert_int_equal(atomic_load(&h_fails), 0);
    assert_true(atomic_load(&L.calls) > 0);
    assert_int_equal(atomic_load(&L.early), 0);
    lm_dp_group_release(L.g);
    lm_dp_destroy(L.dp);
  }
}

static void test_local_collectives(void **state) { run_local(0); }
static void test_local_mismatch(void **state) { run_local(1); }
static void test_local_missing_device(void **state) { run_local(2); }
static void test_local_cancel(void **state) { run_local(3); }

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_float_semantics),      cmocka_unit_test(test_integer_semantics),
      cmocka_unit_test(test_pred_semantics),       cmocka_unit_test(test_complex_semantics),
      cmocka_unit_test(test_reduction_errors),     cmocka_unit_test(test_endpoint_and_addresses),
      cmocka_unit_test(test_groups),               cmocka_unit_test(test_local_collectives),
      cmocka_unit_test(test_local_mismatch),       cmocka_unit_test(test_local_missing_device),
      cmocka_unit_test(test_local_cancel),         cmocka_unit_test(test_wake_collective),
      cmocka_unit_test(test_wake_selective),       cmocka_unit_test(test_wake_local_barrier),
      cmocka_unit_test(test_cancel_no_early_leave),
  };
  if (getenv("LOOM_TEST_FILTER")) cmocka_set_test_filter(getenv("LOOM_TEST_FILTER"));
  return cmocka_run_group_tests(tests, NULL, NULL);
}
