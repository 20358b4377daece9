/* Exercises the C API's checkpoint and drain calls against a real cluster (8 devices, a
 * controller with a checkpoint directory); prints "ok ckpt" (tests/python/test_checkpoint.py).
 *   ckpt_probe ADDR */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "loom/loom.h"

#define CHECK(cond)                                                                  \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      fprintf(stderr, "ckpt_probe: check failed at line %d: %s (%s)\n", __LINE__, #cond, \
              client ? loom_errmsg(client) : "");                                    \
      return 1;                                                                      \
    }                                                                                \
  } while (0)

int main(int argc, char **argv) {
  loom_client *client = NULL;
  if (argc != 2 && argc != 3) {
    fprintf(stderr, "usage: ckpt_probe ADDR [DIR]\n");
    return 2;
  }
  loom_connect_options o;
  loom_connect_options_initialize(&o);
  o.address = argv[1];
  CHECK(loom_connect(&o, &client) == LOOM_OK);
  /* an f32 [8, 4] tiled over devices 0..7 */
  float x[32], y[32];
  for (int i = 0; i < 32; i++) x[i] = (float)i * 0.25f - 3.0f;
  int32_t devs[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  int64_t dims[2] = {8, 4};
  loom_sharding sh;
  loom_sharding_tiled(&sh, devs, 8, 0);
  loom_put_args pa;
  loom_put_args_initialize(&pa);
  pa.dtype = LOOM_DTYPE_F32;
  pa.rank = 2;
  pa.dims = dims;
  pa.sharding = &sh;
  pa.data = x;
  pa.data_size = sizeof x;
  loom_array *a = NULL;
  CHECK(loom_array_put(client, &pa, &a) == LOOM_OK);

  /* argument checks */
  const char *names[1] = {"x"};
  CHECK(loom_checkpoint_save(client, NULL, names, &a, 1, NULL) == LOOM_INVALID_ARGUMENT);
  CHECK(loom_checkpoint_save(client, "c1", names, &a, 0, NULL) == LOOM_INVALID_ARGUMENT);
  CHECK(loom_checkpoint_save(client, "bad/name", names, &a, 1, NULL) == LOOM_INVALID_ARGUMENT);
  CHECK(strstr(loom_errmsg(client), "not a checkpoint name") != NULL);

  char *json = NULL;
  CHECK(loom_checkpoint_save(client, "c1", names, &a, 1, &json) == LOOM_OK);
  CHECK(json && strstr(json, "\"arrays\":1"));
  loom_free_string(json);
  CHECK(loom_checkpoint_query(client, LOOM_CHECKPOINT_LIST, NULL, &json) == LOOM_OK);
  CHECK(strstr(json, "\"c1\""));
  loom_free_string(json);
  CHECK(loom_checkpoint_query(client, LOOM_CHECKPOINT_SHOW, "c1", &json) == LOOM_OK);
  CHECK(strstr(json, "\"f32\""));
  loom_free_string(json);
  CHECK(loom_checkpoint_query(client, LOOM_CHECKPOINT_VERIFY, "c1", &json) == LOOM_OK);
  CHECK(strstr(json, "\"ok\":true"));
  loom_free_string(json);
  CHECK(loom_checkpoint_query(client, (loom_checkpoint_query_op)99, "c1", NULL) == LOOM_INVALID_ARGUMENT);
  CHECK(loom_checkpoint_query(client, LOOM_CHECKPOINT_SHOW, NULL, NULL) == LOOM_INVALID_ARGUMENT);

  /* load onto 2 devices, replicated, with the shape checked */
  loom_sharding rep;
  int32_t two[2] = {5, 2};
  loom_sharding_replicated(&rep, two, 2);
  const loom_sharding *shs[1] = {&rep};
  loom_dtype dts[1] = {LOOM_DTYPE_F32};
  int32_t ranks[1] = {2};
  const int64_t *dps[1] = {dims};
  loom_checkpoint_load_args la;
  loom_checkpoint_load_args_initialize(&la);
  la.name = "c1";
  la.num_arrays = 1;
  la.names = names;
  la.shardings = shs;
  la.dtypes = dts;
  la.ranks = ranks;
  la.dims = dps;
  loom_array *b = NULL;
  CHECK(loom_checkpoint_load(client, &la, &b, NULL) == LOOM_OK);
  CHECK(loom_array_num_shards(b) == 2 && loom_array_dims(b)[0] == 8 && loom_array_dtype(b) == LOOM_DTYPE_F32);
  CHECK(loom_array_get(b, y, sizeof y) == LOOM_OK);
  CHECK(memcmp(x, y, sizeof x) == 0);
  loom_array_release(b);
  /* the shape asked for is not the saved one: LOOM_SHAPE_MISMATCH, no array */
  int64_t wrong[2] = {4, 8};
  const int64_t *wps[1] = {wrong};
  la.dims = wps;
  b = (loom_array *)1;
  CHECK(loom_checkpoint_load(client, &la, &b, NULL) == LOOM_SHAPE_MISMATCH && b == NULL);
  CHECK(strstr(loom_errmsg(client), "is f32[8,4], not f32[4,8]"));
  /* the args' struct_size must be set */
  la.dims = dps;
  la.struct_size = 0;
  CHECK(loom_checkpoint_load(client, &la, &b, NULL) == LOOM_INVALID_ARGUMENT);
  la.struct_size = sizeof la;
  /* remove, then it is gone */
  CHECK(loom_checkpoint_query(client, LOOM_CHECKPOINT_REMOVE, "c1", NULL) == LOOM_OK);
  CHECK(loom_checkpoint_load(client, &la, &b, NULL) == LOOM_NOT_FOUND);
  CHECK(loom_checkpoint_query(client, LOOM_CHECKPOINT_REMOVE, "c1", NULL) == LOOM_NOT_FOUND);
  /* a checkpoint in a directory the caller names (the IFRT proxy's persistence) */
  if (argc == 3) {
    char dir[4096], bad[4200];
    snprintf(dir, sizeof dir, "%s/sub/c2", argv[2]);
    CHECK(loom_checkpoint_save_dir(client, "relative/dir", names, &a, 1, NULL) == LOOM_INVALID_ARGUMENT);
    CHECK(strstr(loom_errmsg(client), "not an absolute path"));
    snprintf(bad, sizeof bad, "%s/../c3", argv[2]);
    CHECK(loom_checkpoint_save_dir(client, bad, names, &a, 1, NULL) == LOOM_INVALID_ARGUMENT);
    CHECK(strstr(loom_errmsg(client), "'..' component"));
    CHECK(loom_checkpoint_save_dir(client, dir, names, &a, 1, &json) == LOOM_OK);
    loom_free_string(json);
    la.name = NULL;
    la.dir = dir;
    la.shardings = NULL; /* as saved */
    CHECK(loom_checkpoint_load(client, &la, &b, NULL) == LOOM_OK);
    CHECK(loom_array_num_shards(b) == 8 && loom_array_get(b, y, sizeof y) == LOOM_OK && memcmp(x, y, sizeof x) == 0);
    loom_array_release(b);
    /* a caller built before `dir` was appended: a smaller struct_size, loading by name */
    la.struct_size = offsetof(loom_checkpoint_load_args, dir);
    CHECK(loom_checkpoint_load(client, &la, &b, NULL) == LOOM_INVALID_ARGUMENT); /* no name, and dir not seen */
    la.struct_size = sizeof la;
  }
  /* drain: an unknown worker, and a cluster without a standby */
  CHECK(loom_drain_worker(client, 99, NULL) == LOOM_NOT_FOUND);
  CHECK(loom_drain_worker(client, -1, NULL) == LOOM_INVALID_ARGUMENT);
  CHECK(loom_drain_worker(client, 0, NULL) == LOOM_NOT_FOUND);
  CHECK(strstr(loom_errmsg(client), "no standby"));
  loom_array_release(a);
  loom_disconnect(client);
  printf("ok ckpt\n");
  return 0;
}
