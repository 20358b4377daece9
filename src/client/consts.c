/* Large constants travel as data, not as program text (docs/scale.md "Large constants").
 *
 * JAX writes the arrays a jitted function closes over into the program as hex (`dense<"0x..">`):
 * a 1 GB closure is a 2 GB text that would pass whole through the controller, be parsed there
 * and again on every worker. Before compiling, the client reads a big program, puts each
 * constant of LIFT_MIN_BYTES or more as a u8 array with one copy per worker (through the data
 * plane, straight to the workers), and sends the program with `dense_resource<loom_array_S_ID>`
 * in its place. Workers borrow the array's bytes when they load the program; the controller
 * only checks that the arrays are this session's. The executable keeps the arrays while it
 * lives (a standby that replaces a worker loads the program again). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "client/client_int.h"
#include "common/log.h"
#include "hlo/parse.h"
#include "hlo/print.h"

#define LIFT_MIN_TEXT ((size_t)4 << 20)  /* smaller programs go as they are */
#define LIFT_MIN_BYTES ((size_t)1 << 20) /* constants from this size on travel as arrays */

typedef struct lifter {
  loom_client *c;
  lm_module *m;
  int32_t *devs; /* one device per worker of the program's devices */
  int32_t ndev;
  loom_array **arrays;
  size_t narrays, cap;
  uint64_t bytes;
  lm_err *err;
} lifter;

static int lift_one(lifter *L, lm_attr *a) {
  if (L->narrays == L->cap) {
    size_t cap = L->cap ? 2 * L->cap : 8;
    loom_array **p = realloc(L->arrays, cap * sizeof *p);
    if (!p) return lm_errf(L->err, LOOM_NO_MEMORY, "out of host memory");
    L->arrays = p;
    L->cap = cap;
  }
  loom_sharding sh;
  loom_sharding_replicated(&sh, L->devs, L->ndev);
  int64_t dims[1] = {(int64_t)a->nbytes};
  loom_put_args pa;
  loom_put_args_initialize(&pa);
  pa.dtype = LOOM_DTYPE_U8;
  pa.rank = 1;
  pa.dims = dims;
  pa.sharding = &sh;
  pa.data = a->data;
  pa.data_size = a->nbytes;
  loom_array *arr;
  loom_status st = loom_array_put(L->c, &pa, &arr);
  if (st != LOOM_OK)
    return lm_errf(L->err, (int)st, "putting a constant of %zu bytes as an array: %s", a->nbytes, loom_errmsg(L->c));
  L->arrays[L->narrays++] = arr;
  char name[64];
  snprintf(name, sizeof name, "loom_array_%llu_%llu", (unsigned long long)lm_cconn_session_id(L->c->conn),
           (unsigned long long)loom_array_id(arr));
  a->resource = lm_arena_strndup(&L->m->arena, name, strlen(name));
  if (!a->resource) return lm_errf(L->err, LOOM_NO_MEMORY, "out of host memory");
  L->bytes += a->nbytes;
  a->data = NULL;
  a->nbytes = 0;
  return 0;
}

static int lift_region(lifter *L, lm_region *r) {
  for (uint32_t b = 0; b < r->nblocks; b++)
    for (uint32_t i = 0; i < r->blocks[b].nops; i++) {
      lm_op *op = &r->blocks[b].ops[i];
      for (uint32_t k = 0; k < op->nregions; k++) LM_TRY(lift_region(L, &op->regions[k]));
      if (op->code != LM_OP_CONSTANT) continue;
      for (uint32_t k = 0; k < op->nattrs; k++) {
        lm_attr *a = &op->attrs[k].value;
        if (!strcmp(op->attrs[k].name, "value") && a->kind == LM_ATTR_DENSE && !a->resource && a->data &&
            a->nbytes >= LIFT_MIN_BYTES)
          LM_TRY(lift_one(L, a));
      }
    }
  return 0;
}

/* The program's devices' workers, one device each: the devices asked for, else all the
 * session's (a default compile runs on a prefix of them). */
static int pick_devices(lifter *L, const uint32_t *asked, int32_t nasked) {
  int32_t n = nasked;
  if (!n && loom_device_count(L->c, &n) != LOOM_OK)
    return lm_errf(L->err, LOOM_INTERNAL, "listing devices: %s", loom_errmsg(L->c));
  L->devs = malloc((size_t)(n ? n : 1) * sizeof *L->devs);
  int32_t *workers = malloc((size_t)(n ? n : 1) * sizeof *workers);
  if (!L->devs || !workers) {
    free(workers);
    return lm_errf(L->err, LOOM_NO_MEMORY, "out of host memory");
  }
  int32_t nw = 0;
  for (int32_t i = 0; i < n; i++) {
    int32_t id = nasked ? (int32_t)asked[i] : i;
    loom_device_desc d = {.struct_size = sizeof d};
    if (loom_device_info(L->c, id, &d) != LOOM_OK) continue; /* the compile names it */
    bool seen = false;
    for (int32_t k = 0; k < nw && !seen; k++) seen = workers[k] == d.worker_id;
    if (seen) continue;
    workers[nw] = d.worker_id;
    L->devs[nw++] = id;
  }
  free(workers);
  L->ndev = nw;
  return 0;
}

void lm_lifted_free(loom_array **arrays, size_t n) {
  for (size_t i = 0; i < n; i++) loom_array_release(arrays[i]);
  free(arrays);
}

int lm_lift_constants(loom_client *c, const char *text, size_t len, const uint32_t *devs, int32_t ndev, char **out,
                      size_t *out_len, loom_array ***arrays, size_t *narrays, lm_err *err) {
  *out = NULL;
  *arrays = NULL;
  *narrays = 0;
  const char *inl = getenv("LOOM_CONSTANTS_INLINE"); /* 1: send them in the text (to compare) */
  if (len < LIFT_MIN_TEXT || (inl && inl[0] == '1')) return 0;
  lm_parse_opts po = {.filename = "<program>", .no_verify = true};
  lifter L = {.c = c, .err = err};
  lm_err perr;
  if (lm_parse_module(text, len, &po, &L.m, &perr) < 0) return 0; /* the controller says what is wrong */
  int rc = 0;
  for (uint32_t f = 0; rc == 0 && f < L.m->nfuncs; f++) {
    lm_func *fn = &L.m->funcs[f];
    if (fn->body.nblocks == 0) continue;
    if (!L.devs && (rc = pick_devices(&L, devs, ndev)) < 0) break;
    if (L.ndev) rc = lift_region(&L, &fn->body);
  }
  if (rc == 0 && L.narrays) {
    *out = lm_module_print(L.m);
    if (!*out) rc = lm_errf(err, LOOM_NO_MEMORY, "out of host memory printing the program");
    else *out_len = strlen(*out);
  }
  if (rc == 0 && L.narrays)
    lm_debug("compile: %zu constants (%llu bytes) go as arrays; the program is %zu bytes instead of %zu", L.narrays,
             (unsigned long long)L.bytes, *out_len, len);
  lm_module_free(L.m);
  free(L.devs);
  if (rc < 0) {
    lm_lifted_free(L.arrays, L.narrays);
    return rc;
  }
  *arrays = L.arrays;
  *narrays = L.narrays;
  return 0;
}
