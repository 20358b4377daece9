/* `loom array put`: put a .npy file on the cluster as an array sharded over virtual devices (on
 * one device, replicated, or tiled over the axes of a named device mesh as JAX's NamedSharding
 * does), show where each shard lives and how long the put took, optionally get it back (whole or
 * shard by shard) and compare it with the file, then delete it. The array belongs to this
 * command's session, so everything happens in one run. Everything goes through the public C API
 * (loom.h), like any client. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include "cli/cli.h"
#include "cli/util.h"
#include "common/npy.h"
#include "loom/loom.h"

static const char g_usage[] =
    "usage: loom array put FILE.npy [--device N | --replicated | --mesh AXES [--spec SPEC]]\n"
    "                      [--devices LIST] [--get OUT.npy] [--get-shards DIR] [--verify] [--json]\n"
    "\n"
    "Puts the array in FILE.npy on the cluster's devices with the sharding given, shows where each\n"
    "shard lives (device, worker, offsets in the array, shape, bytes) and how long the put took;\n"
    "then, if asked, gets it back assembled or shard by shard and compares it with the file; then\n"
    "deletes it. The array belongs to this command's session: it never outlives the command.\n"
    "\n"
    "where it goes (one of them; default: the whole array on device 0):\n"
    "  --device N               the whole array on virtual device N\n"
    "  --replicated             a full copy on each device of --devices (default: every device)\n"
    "  --mesh AXES              a device mesh with named axes, major first, e.g. x=2,y=4: 8 devices,\n"
    "                           --devices (default 0..7) in row-major order (the last axis fastest)\n"
    "  --spec SPEC              with --mesh, as JAX's PartitionSpec: one entry per array dimension,\n"
    "                           separated by commas: an axis (the dimension is split over it), axes\n"
    "                           joined by + (split over all of them, the first major: x+y) or - (not\n"
    "                           split); missing trailing entries are -. The array is replicated along\n"
    "                           the axes no entry names. Default: every entry - (fully replicated)\n"
    "  --devices LIST           the devices of --mesh (row-major) or --replicated: 0-7, 4,5,6,7, 7,6,5,4\n"
    "  --bf16                   read a raw 2-byte file ('<V2': how numpy saves JAX's bfloat16) as bf16\n"
    "\n"
    "then:\n"
    "  --get OUT.npy            get the array back assembled and write it to OUT.npy\n"
    "  --get-shards DIR         get each shard by itself and write it to DIR/shard_I.npy (I: SHARD)\n"
    "  --verify                 get the array back and compare it bit for bit with FILE.npy\n"
    "  --json                   print one JSON object instead of the report\n"
    "  --controller HOST:PORT   the controller (default: $LOOM_CONTROLLER, else the local cluster)\n"
    "  --timeout SECONDS        limit for each request and transfer (default 120)\n"
    "  -h, --help               show this help\n"
    "\n"
    "exit status: 0 done; 1 the file, the cluster or --verify failed; 2 bad options (a --spec that\n"
    "does not fit the array's shape too).\n"
    "\n"
    "examples (on the local cluster of `loom up`: 2 workers x 4 devices):\n"
    "  loom array put x.npy --device 5 --verify\n"
    "  loom array put x.npy --replicated --devices 0,4 --get y.npy\n"
    "  loom array put x.npy --mesh x=8 --spec x            # dimension 0 in 8 shards\n"
    "  loom array put x.npy --mesh x=2,y=4 --spec x,y      # dimension 0 in 2, dimension 1 in 4\n"
    "  loom array put x.npy --mesh x=2,y=4 --spec x+y,-    # dimension 0 in 8 (x major)\n"
    "  loom array put x.npy --mesh x=2,y=4 --spec -,y      # dimension 1 in 4, each shard twice\n";

static const char g_array_usage[] =
    "usage: loom array put FILE.npy [options]\n"
    "\n"
    "Sharded arrays on the cluster's devices. The one subcommand:\n"
    "  put     put a .npy file on the devices as an array (on one device, replicated, or tiled\n"
    "          over a device mesh), show its shards, get it back, delete it\n"
    "\n"
    "`loom array put --help` describes its options.\n";

#define MAX_DEVICES 65536 /* as many as a sharding may have */
#define AXIS_NAME_MAX 32

/* Where the array goes, as the options say it. */
typedef struct layout {
  enum { L_SINGLE, L_REPLICATED, L_MESH } kind;
  int32_t device;                                     /* L_SINGLE */
  int naxes;                                          /* L_MESH */
  char axis[LOOM_MAX_MESH_AXES][AXIS_NAME_MAX];
  int64_t axis_size[LOOM_MAX_MESH_AXES];
  int64_t mesh_devices;                               /* product of axis_size */
  int nspec;                                          /* entries --spec gave */
  int8_t dim_axes[LOOM_MAX_RANK][LOOM_MAX_MESH_AXES]; /* per dimension, axes major first, -1 ends */
  int32_t *devices;                                   /* L_REPLICATED, L_MESH: [ndev] */
  int ndev;
} layout;

static int find_axis(const layout *L, const char *name, size_t n) {
  for (int a = 0; a < L->naxes; a++)
    if (strlen(L->axis[a]) == n && !memcmp(L->axis[a], name, n)) return a;
  return -1;
}

static bool is_name(const char *s, size_t n) {
  if (n == 0 || n >= AXIS_NAME_MAX || !(s[0] == '_' || ((s[0] | 32) >= 'a' && (s[0] | 32) <= 'z'))) return false;
  for (size_t i = 1; i < n; i++)
    if (!(s[i] == '_' || (s[i] >= '0' && s[i] <= '9') || ((s[i] | 32) >= 'a' && (s[i] | 32) <= 'z'))) return false;
  return true;
}

/* "x=2,y=4" -> the mesh axes. Returns 0, or the usage error's exit status (2). */
static int parse_mesh(const char *cmd, const char *s, layout *L) {
  L->mesh_devices = 1;
  for (const char *p = s;; p++) {
    const char *end = p + strcspn(p, ","), *eq = memchr(p, '=', (size_t)(end - p));
    if (!eq || !is_name(p, (size_t)(eq - p)) || eq + 1 == end || strspn(eq + 1, "0123456789") != (size_t)(end - eq - 1) ||
        end - eq - 1 > 6)
      return cli_usage_error(cmd, "--mesh wants named axes with their sizes, like x=2,y=4 (got '%s')", s);
    if (L->naxes == LOOM_MAX_MESH_AXES) return cli_usage_error(cmd, "--mesh: at most %d axes", LOOM_MAX_MESH_AXES);
    if (find_axis(L, p, (size_t)(eq - p)) >= 0)
      return cli_usage_error(cmd, "--mesh %s: axis '%.*s' is named twice", s, (int)(eq - p), p);
    int64_t size = strtoll(eq + 1, NULL, 10);
    if (size < 1) return cli_usage_error(cmd, "--mesh %s: axis '%.*s' has size 0", s, (int)(eq - p), p);
    memcpy(L->axis[L->naxes], p, (size_t)(eq - p));
    L->axis[L->naxes][eq - p] = 0;
    L->axis_size[L->naxes++] = size;
    L->mesh_devices *= size; /* both <= 10^6 here, checked against MAX_DEVICES at once */
    if (L->mesh_devices > MAX_DEVICES)
      return cli_usage_error(cmd, "--mesh %s has more than %d devices", s, MAX_DEVICES);
    p = end;
    if (!*p) break;
  }
  return 0;
}

/* "x+y,-,z" -> dim_axes, against the mesh already parsed. Returns 0 or 2 (usage error). */
static int parse_spec(const char *cmd, const char *s, layout *L) {
  bool used[LOOM_MAX_MESH_AXES] = {false};
  if (!*s) return 0; /* no entries: replicated over the whole mesh */
  for (const char *p = s;; p++) {
    const char *end = p + strcspn(p, ",");
    if (L->nspec == LOOM_MAX_RANK)
      return cli_usage_error(cmd, "--spec %s has more than %d entries (arrays have at most %d dimensions)", s,
                             LOOM_MAX_RANK, LOOM_MAX_RANK);
    int d = L->nspec++, k = 0;
    if (end == p) return cli_usage_error(cmd, "--spec '%s': entry %d is empty (write - for a dimension that is not split)", s, d);
    if (!(end - p == 1 && *p == '-')) {
      for (const char *q = p;; q++) {
        const char *qe = q + strcspn(q, "+,");
        int a = find_axis(L, q, (size_t)(qe - q));
        if (a < 0) {
          char names[LOOM_MAX_MESH_AXES * (AXIS_NAME_MAX + 2)] = "";
          for (int i = 0; i < L->naxes; i++) strcat(strcat(names, i ? ", " : ""), L->axis[i]);
          return cli_usage_error(cmd, "--spec %s: '%.*s' is not an axis of the mesh (its axes: %s)", s, (int)(qe - q), q,
                                 names);
        }
        if (used[a]) return cli_usage_error(cmd, "--spec %s: axis '%s' is used twice (an axis splits one dimension, once)", s, L->axis[a]);
        used[a] = true;
        L->dim_axes[d][k++] = (int8_t)a;
        q = qe;
        if (*q != '+') break;
      }
    }
    p = end;
    if (!*p) break;
  }
  return 0;
}

/* Number of shards dimension d is split into. */
static int64_t dim_parts(const layout *L, int d) {
  int64_t n = 1;
  for (int k = 0; k < LOOM_MAX_MESH_AXES && L->dim_axes[d][k] >= 0; k++) n *= L->axis_size[L->dim_axes[d][k]];
  return n;
}

/* The entry of dimension d as --spec spells it: "x+y" or "-". */
static void spec_entry(const layout *L, int d, char *buf, size_t cap) {
  size_t n = 0;
  buf[0] = 0;
  for (int k = 0; k < LOOM_MAX_MESH_AXES && L->dim_axes[d][k] >= 0 && n < cap; k++)
    n += (size_t)snprintf(buf + n, cap - n, "%s%s", k ? "+" : "", L->axis[L->dim_axes[d][k]]);
  if (!buf[0]) snprintf(buf, cap, "-");
}

/* Checks the spec against the array's shape. Returns 0 or 2 (usage error). */
static int check_spec(const char *cmd, const layout *L, const char *file, int rank, const int64_t *dims) {
  if (L->nspec > rank)
    return cli_usage_error(cmd, "--spec has %d entries but %s has %d dimension%s: give at most one per dimension",
                           L->nspec, file, rank, rank == 1 ? "" : "s");
  for (int d = 0; d < L->nspec; d++) {
    int64_t parts = dim_parts(L, d);
    if (dims[d] % parts) {
      char e[LOOM_MAX_MESH_AXES * (AXIS_NAME_MAX + 1)];
      spec_entry(L, d, e, sizeof e);
      return cli_usage_error(cmd, "dimension %d of %s (size %lld) does not split into %lld equal shards (over %s)", d,
                             file, (long long)dims[d], (long long)parts, e);
    }
  }
  return 0;
}

/* "[0,4]" for n numbers. */
static void format_dims(const int64_t *v, int n, char *buf, size_t cap) {
  size_t k = (size_t)snprintf(buf, cap, "[");
  for (int i = 0; i < n && k < cap; i++) k += (size_t)snprintf(buf + k, cap - k, "%s%lld", i ? "," : "", (long long)v[i]);
  if (k < cap) snprintf(buf + k, cap - k, "]");
}

static cJSON *json_ints(const int64_t *v, int n) {
  cJSON *a = cJSON_CreateArray();
  for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber((double)v[i]));
  return a;
}

/* "1.25 ms" / "2.50 s". */
static void format_time(double s, char *buf, size_t cap) {
  if (s < 1) snprintf(buf, cap, "%.2f ms", s * 1e3);
  else snprintf(buf, cap, "%.2f s", s);
}

/* "128 B in 1.25 ms (100 KiB/s)": bandwidth left out for an empty array. */
static void format_transfer(uint64_t bytes, double s, char *buf, size_t cap) {
  char sz[32], t[32], bw[32];
  cli_format_size(bytes, sz, sizeof sz);
  format_time(s, t, sizeof t);
  if (bytes && s > 0) {
    cli_format_size((uint64_t)((double)bytes / s), bw, sizeof bw);
    snprintf(buf, cap, "%s in %s (%s/s)", sz, t, bw);
  } else {
    snprintf(buf, cap, "%s in %s", sz, t);
  }
}

static void json_transfer(cJSON *o, uint64_t bytes, double s) {
  cJSON_AddNumberToObject(o, "bytes", (double)bytes);
  cJSON_AddNumberToObject(o, "seconds", s);
  cJSON_AddNumberToObject(o, "bytes_per_second", s > 0 ? (double)bytes / s : 0);
}

/* The sharding in words: "on device 5", "replicated on devices 0-7", "over mesh x=2,y=4
 * (devices 0-7) with spec x,-". */
static void describe(const layout *L, int rank, char *buf, size_t cap) {
  if (L->kind == L_SINGLE) {
    snprintf(buf, cap, "on device %d", L->device);
    return;
  }
  char ids[512];
  uint32_t *u = malloc((size_t)L->ndev * sizeof *u);
  if (u) {
    for (int i = 0; i < L->ndev; i++) u[i] = (uint32_t)L->devices[i];
    cli_format_ids(u, (size_t)L->ndev, ids, sizeof ids);
    free(u);
  } else {
    snprintf(ids, sizeof ids, "(%d)", L->ndev);
  }
  if (L->kind == L_REPLICATED) {
    snprintf(buf, cap, "replicated on devices %s", ids);
    return;
  }
  size_t n = (size_t)snprintf(buf, cap, "over mesh ");
  for (int a = 0; a < L->naxes && n < cap; a++)
    n += (size_t)snprintf(buf + n, cap - n, "%s%s=%lld", a ? "," : "", L->axis[a], (long long)L->axis_size[a]);
  if (n < cap) n += (size_t)snprintf(buf + n, cap - n, " (devices %s) with spec ", ids);
  for (int d = 0; d < rank && n < cap; d++) {
    char e[LOOM_MAX_MESH_AXES * (AXIS_NAME_MAX + 1)];
    spec_entry(L, d, e, sizeof e);
    n += (size_t)snprintf(buf + n, cap - n, "%s%s", d ? "," : "", e);
  }
  if (rank == 0 && n < cap) snprintf(buf + n, cap - n, "() (a scalar)");
}

static cJSON *json_sharding(const layout *L, int rank) {
  cJSON *o = cJSON_CreateObject();
  static const char *const kinds[] = {"single", "replicated", "mesh"};
  cJSON_AddStringToObject(o, "kind", kinds[L->kind]);
  cJSON *devs = cJSON_AddArrayToObject(o, "devices");
  if (L->kind == L_SINGLE) cJSON_AddItemToArray(devs, cJSON_CreateNumber(L->device));
  for (int i = 0; L->kind != L_SINGLE && i < L->ndev; i++) cJSON_AddItemToArray(devs, cJSON_CreateNumber(L->devices[i]));
  if (L->kind == L_MESH) {
    cJSON *axes = cJSON_AddArrayToObject(o, "mesh");
    for (int a = 0; a < L->naxes; a++) {
      cJSON *ax = cJSON_CreateObject();
      cJSON_AddStringToObject(ax, "name", L->axis[a]);
      cJSON_AddNumberToObject(ax, "size", (double)L->axis_size[a]);
      cJSON_AddItemToArray(axes, ax);
    }
    cJSON *spec = cJSON_AddArrayToObject(o, "spec");
    for (int d = 0; d < rank; d++) {
      cJSON *e = cJSON_CreateArray();
      for (int k = 0; k < LOOM_MAX_MESH_AXES && L->dim_axes[d][k] >= 0; k++)
        cJSON_AddItemToArray(e, cJSON_CreateString(L->axis[L->dim_axes[d][k]]));
      cJSON_AddItemToArray(spec, e);
    }
  }
  return o;
}

/* Compares got with want element by element: the number of differing elements and the index of
 * the first (row-major, unravelled into first[0..rank)). */
static uint64_t compare(const lm_npy *want, const void *got, int64_t *first) {
  size_t es = lm_dtype_size(want->dtype);
  uint64_t n = es ? want->nbytes / es : 0, diff = 0;
  const unsigned char *a = want->data, *b = got;
  for (uint64_t i = 0; i < n; i++) {
    if (!memcmp(a + i * es, b + i * es, es)) continue;
    if (diff++ == 0) {
      uint64_t r = i;
      for (int d = want->rank - 1; d >= 0; d--) {
        first[d] = (int64_t)(r % (uint64_t)want->dims[d]);
        r /= (uint64_t)want->dims[d];
      }
    }
  }
  return diff;
}

typedef struct put_opts {
  const char *file, *addr, *get_path, *shards_dir, *mesh, *spec, *devices;
  bool json, verify, bf16, replicated;
  int64_t device;                      /* -1: not given */
  uint64_t timeout_s;
  int exit;                            /* the exit status when read_put_options returned -1 */
} put_opts;

/* Reads the options of `loom array put`; returns 0, or -1 when the command must stop with
 * po->exit (0 after --help, 2 after a usage error, printed). */
static int read_put_options(const char *cmd, int argc, char **argv, put_opts *po) {
  enum { O_CTL = 1, O_JSON, O_TIMEOUT, O_DEVICE, O_REPL, O_MESH, O_SPEC, O_DEVS, O_GET, O_SHARDS, O_VERIFY, O_BF16 };
  static const struct option opts[] = {
      {"controller", required_argument, 0, O_CTL}, {"json", no_argument, 0, O_JSON},
      {"timeout", required_argument, 0, O_TIMEOUT}, {"device", required_argument, 0, O_DEVICE},
      {"replicated", no_argument, 0, O_REPL},       {"mesh", required_argument, 0, O_MESH},
      {"spec", required_argument, 0, O_SPEC},       {"devices", required_argument, 0, O_DEVS},
      {"get", required_argument, 0, O_GET},         {"get-shards", required_argument, 0, O_SHARDS},
      {"verify", no_argument, 0, O_VERIFY},         {"bf16", no_argument, 0, O_BF16},
      {"help", no_argument, 0, 'h'},                {0, 0, 0, 0},
  };
  *po = (put_opts){.device = -1, .timeout_s = 120};
  cli_options o = {.cmd = cmd, .usage = g_usage, .argc = argc, .argv = argv, .opts = opts, .max_operands = 1};
  int ch;
  uint64_t v;
  while ((ch = cli_next_option(&o)) > 0) {
    switch (ch) {
    case O_CTL: po->addr = optarg; break;
    case O_JSON: po->json = true; break;
    case O_TIMEOUT:
      if (cli_parse_u64(cmd, "--timeout", optarg, 1, 86400, &po->timeout_s) < 0) return po->exit = 2, -1;
      break;
    case O_DEVICE:
      if (cli_parse_u64(cmd, "--device", optarg, 0, MAX_DEVICES - 1, &v) < 0) return po->exit = 2, -1;
      po->device = (int64_t)v;
      break;
    case O_REPL: po->replicated = true; break;
    case O_MESH: po->mesh = optarg; break;
    case O_SPEC: po->spec = optarg; break;
    case O_DEVS: po->devices = optarg; break;
    case O_GET: po->get_path = optarg; break;
    case O_SHARDS: po->shards_dir = optarg; break;
    case O_VERIFY: po->verify = true; break;
    case O_BF16: po->bf16 = true; break;
    }
  }
  po->exit = 2;
  if (ch < 0) po->exit = o.exit;
  else if (optind >= argc) cli_usage_error(cmd, "which file? loom array put FILE.npy [options]");
  else if ((po->device >= 0) + po->replicated + (po->mesh != NULL) > 1)
    cli_usage_error(cmd, "give one of --device, --replicated and --mesh");
  else if (po->spec && !po->mesh) cli_usage_error(cmd, "--spec goes with --mesh (the mesh whose axes it names)");
  else if (po->devices && !po->replicated && !po->mesh)
    cli_usage_error(cmd, "--devices goes with --replicated or --mesh (for one device: --device N)");
  else {
    po->file = argv[optind];
    po->exit = 0;
    return 0;
  }
  return -1;
}

/* The layout from the options, before the cluster is asked (device lists not defaulted yet).
 * Returns 0 or 2. */
static int build_layout(const char *cmd, const put_opts *po, layout *L) {
  memset(L, 0, sizeof *L);
  memset(L->dim_axes, -1, sizeof L->dim_axes);
  L->kind = po->mesh ? L_MESH : po->replicated ? L_REPLICATED : L_SINGLE;
  L->device = po->device >= 0 ? (int32_t)po->device : 0;
  if (po->mesh) {
    int rc = parse_mesh(cmd, po->mesh, L);
    if (!rc && po->spec) rc = parse_spec(cmd, po->spec, L);
    if (rc) return rc;
  }
  if (po->devices) {
    L->devices = malloc(MAX_DEVICES * sizeof *L->devices);
    if (!L->devices) return cli_fail(cmd, "out of memory");
    L->ndev = cli_parse_devices(po->devices, L->devices, MAX_DEVICES);
    if (L->ndev <= 0)
      return cli_usage_error(cmd, "--devices wants a list like 0-7, 0,2,4 or 7,6,5,4 (got '%s')", po->devices);
    uint64_t seen[MAX_DEVICES / 64] = {0}; /* ids are < MAX_DEVICES */
    for (int i = 0; i < L->ndev; i++) {
      uint32_t id = (uint32_t)L->devices[i];
      if (seen[id / 64] >> (id % 64) & 1)
        return cli_usage_error(cmd, "--devices %s lists device %d twice", po->devices, L->devices[i]);
      seen[id / 64] |= 1ull << (id % 64);
    }
    if (po->mesh && L->ndev != L->mesh_devices)
      return cli_usage_error(cmd, "--mesh %s has %lld devices but --devices %s lists %d", po->mesh,
                             (long long)L->mesh_devices, po->devices, L->ndev);
  }
  return 0;
}

/* Defaults the device list from the cluster's size and checks every device exists. Returns 0 or
 * 1 (printed). */
static int resolve_devices(const char *cmd, layout *L, int32_t count) {
  if (L->kind != L_SINGLE && !L->devices) {
    int64_t n = L->kind == L_MESH ? L->mesh_devices : count;
    if (n > count)
      return cli_fail(cmd, "the mesh has %lld devices but the cluster has %d (give a smaller mesh)", (long long)n, count);
    L->devices = malloc((size_t)(n ? n : 1) * sizeof *L->devices);
    if (!L->devices) return cli_fail(cmd, "out of memory");
    for (int64_t i = 0; i < n; i++) L->devices[i] = (int32_t)i;
    L->ndev = (int)n;
    if (n == 0) return cli_fail(cmd, "the cluster has no devices");
  }
  const int32_t *ids = L->kind == L_SINGLE ? &L->device : L->devices;
  int n = L->kind == L_SINGLE ? 1 : L->ndev;
  for (int i = 0; i < n; i++)
    if (ids[i] >= count)
      return cli_fail(cmd, "there is no device %d: the cluster has %d device%s (0-%d)", ids[i], count,
                      count == 1 ? "" : "s", count - 1);
  return 0;
}

/* Gets each shard by itself into DIR/shard_I.npy. Returns 0 or 1 (printed). */
static int get_shards(const char *cmd, loom_client *c, loom_array *a, const char *dir) {
  if (mkdir(dir, 0777) < 0 && errno != EEXIST) return cli_fail(cmd, "cannot create %s: %s", dir, strerror(errno));
  int32_t n = loom_array_num_shards(a);
  size_t pl = strlen(dir) + 32;
  char *path = malloc(pl);
  if (!path) return cli_fail(cmd, "out of memory");
  int rc = 0;
  for (int32_t i = 0; i < n && !rc; i++) {
    loom_shard_desc sd = {.struct_size = sizeof sd};
    loom_array_shard_info(a, i, &sd);
    void *buf = malloc(sd.nbytes ? sd.nbytes : 1);
    lm_err err;
    snprintf(path, pl, "%s/shard_%d.npy", dir, i);
    if (!buf) rc = cli_fail(cmd, "out of memory for shard %d (%llu bytes)", i, (unsigned long long)sd.nbytes);
    else if (loom_array_get_shard(a, i, buf, sd.nbytes) != LOOM_OK)
      rc = cli_fail(cmd, "getting shard %d (device %d): %s", i, sd.device, loom_errmsg(c));
    else if (lm_npy_write(path, (lm_dtype)loom_array_dtype(a), sd.rank, sd.dims, buf, sd.nbytes, &err) < 0)
      rc = cli_fail(cmd, "%s", err.msg);
    free(buf);
  }
  free(path);
  return rc;
}

/* Runs the put (and what follows) on a connected client. Returns the exit status. */
static int put_run(const char *cmd, loom_client *c, const put_opts *po, layout *L, const lm_npy *x) {
  char line[1024], type[256];
  cli_format_type(x->dtype, x->rank, x->dims, type, sizeof type);
  loom_sharding sh;
  loom_sharding_initialize(&sh);
  if (L->kind == L_SINGLE) loom_sharding_single(&sh, &L->device);
  else if (L->kind == L_REPLICATED) loom_sharding_replicated(&sh, L->devices, L->ndev);
  else {
    sh.mesh_rank = L->naxes;
    for (int a = 0; a < L->naxes; a++) sh.mesh_shape[a] = L->axis_size[a];
    sh.num_devices = L->ndev;
    sh.devices = L->devices;
    memcpy(sh.dim_axes, L->dim_axes, sizeof sh.dim_axes);
  }
  loom_put_args pa;
  loom_put_args_initialize(&pa);
  pa.dtype = (loom_dtype)x->dtype;
  pa.rank = x->rank;
  pa.dims = x->dims;
  pa.sharding = &sh;
  pa.data = x->data ? x->data : "";
  pa.data_size = x->nbytes;
  loom_array *a = NULL;
  double t0 = cli_now();
  if (loom_array_put(c, &pa, &a) != LOOM_OK) return cli_fail(cmd, "putting %s: %s", po->file, loom_errmsg(c));
  double t_put = cli_now() - t0;

  int rc = 0;
  cJSON *root = po->json ? cJSON_CreateObject() : NULL;
  int32_t nshards = loom_array_num_shards(a);
  uint64_t on_devices = 0;
  cli_table t;
  cli_table_init(&t, 7);
  cli_table_row(&t, "SHARD", "DEVICE", "WORKER", "LOCAL", "OFFSETS", "SHAPE", "BYTES");
  cJSON *shards = cJSON_CreateArray();
  for (int32_t i = 0; i < nshards; i++) {
    loom_shard_desc sd = {.struct_size = sizeof sd};
    loom_device_desc dd = {.struct_size = sizeof dd};
    if (loom_array_shard_info(a, i, &sd) != LOOM_OK || loom_device_info(c, sd.device, &dd) != LOOM_OK) {
      rc = cli_fail(cmd, "%s", loom_errmsg(c));
      break;
    }
    on_devices += sd.nbytes;
    char idx[16], dev[16], w[16], li[16], off[LOOM_MAX_RANK * 21 + 3], shp[LOOM_MAX_RANK * 21 + 3], nb[32];
    snprintf(idx, sizeof idx, "%d", i);
    snprintf(dev, sizeof dev, "%d", sd.device);
    snprintf(w, sizeof w, "%d", dd.worker_id);
    snprintf(li, sizeof li, "%d", dd.local_index);
    format_dims(sd.offsets, sd.rank, off, sizeof off);
    format_dims(sd.dims, sd.rank, shp, sizeof shp);
    cli_format_size(sd.nbytes, nb, sizeof nb);
    cli_table_row(&t, idx, dev, w, li, off, shp, nb);
    cJSON *s = cJSON_CreateObject();
    cJSON_AddNumberToObject(s, "index", i);
    cJSON_AddNumberToObject(s, "device", sd.device);
    cJSON_AddNumberToObject(s, "worker_id", dd.worker_id);
    cJSON_AddNumberToObject(s, "local_index", dd.local_index);
    cJSON_AddStringToObject(s, "host", dd.worker_host);
    cJSON_AddNumberToObject(s, "pid", (double)dd.worker_pid);
    cJSON_AddItemToObject(s, "offsets", json_ints(sd.offsets, sd.rank));
    cJSON_AddItemToObject(s, "shape", json_ints(sd.dims, sd.rank));
    cJSON_AddNumberToObject(s, "nbytes", (double)sd.nbytes);
    cJSON_AddItemToArray(shards, s);
  }
  if (!rc) {
    if (root) {
      cJSON_AddStringToObject(root, "file", po->file);
      cJSON_AddNumberToObject(root, "array", (double)loom_array_id(a));
      cJSON_AddStringToObject(root, "type", type);
      cJSON_AddStringToObject(root, "dtype", lm_dtype_name(x->dtype));
      cJSON_AddItemToObject(root, "shape", json_ints(x->dims, x->rank));
      cJSON_AddNumberToObject(root, "nbytes", (double)x->nbytes);
      cJSON_AddItemToObject(root, "sharding", json_sharding(L, x->rank));
      cJSON_AddItemToObject(root, "shards", shards);
      shards = NULL;
      cJSON *p = cJSON_AddObjectToObject(root, "put");
      json_transfer(p, x->nbytes, t_put);
      cJSON_AddNumberToObject(p, "bytes_on_devices", (double)on_devices);
    } else {
      char where[1024], sz[32], dsz[32], tr[128];
      describe(L, x->rank, where, sizeof where);
      cli_format_size(x->nbytes, sz, sizeof sz);
      cli_format_size(on_devices, dsz, sizeof dsz);
      printf("%s: %s (%s) as array %llu, %s\n", po->file, type, sz, (unsigned long long)loom_array_id(a), where);
      cli_table_print(&t);
      format_transfer(x->nbytes, t_put, tr, sizeof tr);
      printf("put: %s; %d shard%s, %s on the devices\n", tr, nshards, nshards == 1 ? "" : "s", dsz);
    }
  }
  cJSON_Delete(shards);
  cli_table_free(&t);
  fflush(stdout);

  /* get it back: assembled (--get, --verify), shard by shard (--get-shards) */
  void *back = NULL;
  if (!rc && (po->get_path || po->verify)) {
    back = malloc(x->nbytes ? x->nbytes : 1);
    if (!back) rc = cli_fail(cmd, "out of memory for the array read back (%zu bytes)", x->nbytes);
    t0 = cli_now();
    if (!rc && loom_array_get(a, back, x->nbytes) != LOOM_OK) rc = cli_fail(cmd, "getting the array: %s", loom_errmsg(c));
    double t_get = cli_now() - t0;
    lm_err err;
    if (!rc && po->get_path && lm_npy_write(po->get_path, x->dtype, x->rank, x->dims, back, x->nbytes, &err) < 0)
      rc = cli_fail(cmd, "%s", err.msg);
    if (!rc && root) {
      cJSON *g = cJSON_AddObjectToObject(root, "get");
      json_transfer(g, x->nbytes, t_get);
      if (po->get_path) cJSON_AddStringToObject(g, "output", po->get_path);
    } else if (!rc) {
      format_transfer(x->nbytes, t_get, line, sizeof line);
      printf("get: %s%s%s\n", line, po->get_path ? ", written to " : "", po->get_path ? po->get_path : "");
    }
  }
  if (!rc && po->shards_dir) {
    t0 = cli_now();
    rc = get_shards(cmd, c, a, po->shards_dir);
    double t_sh = cli_now() - t0;
    if (!rc && root) {
      cJSON *g = cJSON_AddObjectToObject(root, "get_shards");
      json_transfer(g, on_devices, t_sh);
      cJSON_AddStringToObject(g, "directory", po->shards_dir);
    } else if (!rc) {
      format_transfer(on_devices, t_sh, line, sizeof line);
      printf("get shards: %s, written to %s/shard_0.npy .. shard_%d.npy\n", line, po->shards_dir, nshards - 1);
    }
  }
  bool mismatch = false;
  if (!rc && po->verify) {
    int64_t first[LOOM_MAX_RANK] = {0};
    uint64_t ndiff = compare(x, back, first);
    uint64_t numel = lm_dtype_size(x->dtype) ? x->nbytes / lm_dtype_size(x->dtype) : 0;
    mismatch = ndiff != 0;
    if (root) {
      cJSON *v = cJSON_AddObjectToObject(root, "verify");
      cJSON_AddBoolToObject(v, "identical", !mismatch);
      cJSON_AddNumberToObject(v, "differing_elements", (double)ndiff);
      if (mismatch) cJSON_AddItemToObject(v, "first_difference", json_ints(first, x->rank));
    } else if (!mismatch) {
      printf("verify: identical to %s (%llu element%s, bit for bit)\n", po->file, (unsigned long long)numel,
             numel == 1 ? "" : "s");
    } else {
      format_dims(first, x->rank, line, sizeof line);
      printf("verify: DIFFERENT from %s: %llu of %llu elements differ, the first at %s\n", po->file,
             (unsigned long long)ndiff, (unsigned long long)numel, line);
    }
  }
  free(back);

  /* delete (on every path: the session's end would free it too, but say it went) */
  t0 = cli_now();
  loom_status ds = loom_array_delete(a);
  double t_del = cli_now() - t0;
  if (ds != LOOM_OK && !rc) rc = cli_fail(cmd, "deleting array %llu: %s", (unsigned long long)loom_array_id(a), loom_errmsg(c));
  if (!rc && root) {
    cJSON *d = cJSON_AddObjectToObject(root, "delete");
    cJSON_AddNumberToObject(d, "seconds", t_del);
  } else if (!rc) {
    format_time(t_del, line, sizeof line);
    printf("delete: array %llu deleted in %s\n", (unsigned long long)loom_array_id(a), line);
  }
  loom_array_release(a);
  if (root) {
    if (!rc) cli_print_json(root);
    else cJSON_Delete(root);
  }
  if (!rc && mismatch) rc = cli_fail(cmd, "the array read back differs from %s", po->file);
  return rc;
}

static int array_put(int argc, char **argv) {
  const char *cmd = "array put";
  put_opts po;
  if (read_put_options(cmd, argc, argv, &po) < 0) return po.exit;
  layout L;
  int rc = build_layout(cmd, &po, &L);
  lm_npy x = {0};
  lm_err err;
  loom_client *c = NULL;
  if (rc) goto out;
  errno = 0;
  if (lm_npy_read(po.file, po.bf16 ? LOOM_DTYPE_BF16 : LOOM_DTYPE_INVALID, 0, &x, &err) < 0) {
    bool open_failed = err.code == LOOM_IO && !strncmp(err.msg, "cannot open", 11) && errno;
    rc = cli_fail(cmd, "%s%s%s", err.msg, open_failed ? ": " : "", open_failed ? strerror(errno) : "");
    goto out;
  }
  if (L.kind == L_MESH && (rc = check_spec(cmd, &L, po.file, x.rank, x.dims))) goto out;
  c = cli_connect(cmd, po.addr, po.timeout_s);
  if (!c) {
    rc = 1;
    goto out;
  }
  int32_t count = 0;
  if (loom_device_count(c, &count) != LOOM_OK) {
    rc = cli_fail(cmd, "%s", loom_errmsg(c));
    goto out;
  }
  if ((rc = resolve_devices(cmd, &L, count))) goto out;
  rc = put_run(cmd, c, &po, &L, &x);
out:
  loom_disconnect(c);
  lm_npy_free(&x);
  free(L.devices);
  return rc;
}

int cmd_array(int argc, char **argv) {
  if (argc < 2) {
    fputs(g_array_usage, stderr);
    return 2;
  }
  const char *sub = argv[1];
  if (!strcmp(sub, "--help") || !strcmp(sub, "-h") || !strcmp(sub, "help")) {
    fputs(g_array_usage, stdout);
    return 0;
  }
  if (!strcmp(sub, "put")) return array_put(argc - 1, argv + 1);
  return cli_usage_error("array", "unknown subcommand '%s' (the one there is: put)", sub);
}
