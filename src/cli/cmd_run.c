/* `loom run`: compile a StableHLO file for the cluster, put its inputs (.npy files) on the
 * devices with the shardings the program expects, launch it once, and print the results as
 * numpy would (or save them as .npy, or print JSON). Everything goes through the public C API
 * (loom.h), like any client. */
#include <errno.h>
#include <stdbool.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "cli/cli.h"
#include "cli/ndprint.h"
#include "cli/util.h"
#include "common/npy.h"
#include "loom/loom.h"

static const char g_usage[] =
    "usage: loom run FILE.mlir [--input NAME=FILE.npy]... [--devices LIST] [--json] [--output-dir DIR]\n"
    "                [--pool-devices N] [--priority CLASS] [--launch-limit MS] [--share-weight W]\n"
    "\n"
    "Compiles a StableHLO module (MLIR text as JAX prints it) for the cluster, puts its inputs on\n"
    "the devices, runs it once on every device it needs and prints the results as numpy does.\n"
    "The devices: by default 0..N-1, N = mhlo.num_replicas x mhlo.num_partitions of the module.\n"
    "An input's global shape is the argument's type in @main; each device gets the shard the\n"
    "program expects (for replicated programs, an input of the per-replica type goes to all).\n"
    "\n"
    "options:\n"
    "  --input NAME=FILE.npy    the value of argument NAME of @main: its index (0, arg0 or %arg0);\n"
    "                           --input FILE.npy takes the next argument in order\n"
    "  --devices LIST           virtual devices that run processes 0, 1, ...: e.g. 0-7 or 4,5,6,7\n"
    "  --pool-devices N         ask the shared pool for N devices (wait in its queue until they are\n"
    "                           free); the session sees them as devices 0..N-1 (docs/pool.md)\n"
    "  --priority CLASS         the session's priority class (e.g. prod, interactive, batch)\n"
    "  --launch-limit MS        the watchdog cancels a launch running longer than this\n"
    "  --share-weight W         time-share the pool devices with other weighted sessions (weight W)\n"
    "  --output-dir DIR         also write the results to DIR/result_N.npy\n"
    "  --json                   print one JSON object (form, devices, sequence, results)\n"
    "  --controller HOST:PORT   the controller (default: $LOOM_CONTROLLER, else the local cluster)\n"
    "  --timeout SECONDS        limit for each request to the cluster (default 120); the launch\n"
    "                           itself may take as long as it needs\n"
    "  -h, --help               show this help\n"
    "\n"
    "example: loom run examples/distributed_sum.mlir        # [8 8 8 8 8 8 8 8]\n";

#define MAX_INPUTS 256

typedef struct run_input {
  int index;              /* argument index */
  const char *path;
} run_input;

static int parse_arg_name(const char *s, size_t n) {
  if (n && s[0] == '%') s++, n--;
  if (n > 3 && !strncmp(s, "arg", 3)) s += 3, n -= 3;
  if (!n || n > 6) return -1;
  int v = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9') return -1;
    v = v * 10 + (s[i] - '0');
  }
  return v;
}

int cmd_run(int argc, char **argv) {
  const char *cmd = "run";
  const char *addr = NULL, *out_dir = NULL, *dev_list = NULL;
  int json = 0;
  uint64_t timeout_s = 120;
  run_input inputs[MAX_INPUTS];
  int ninputs = 0, next_pos = 0;
  enum { O_CTL = 1, O_JSON, O_TIMEOUT, O_INPUT, O_DEV, O_OUT, O_POOL, O_PRIO, O_LIMIT, O_WEIGHT };
  static const struct option opts[] = {
      {"controller", required_argument, 0, O_CTL}, {"json", no_argument, 0, O_JSON},
      {"timeout", required_argument, 0, O_TIMEOUT}, {"input", required_argument, 0, O_INPUT},
      {"devices", required_argument, 0, O_DEV},     {"output-dir", required_argument, 0, O_OUT},
      {"pool-devices", required_argument, 0, O_POOL}, {"priority", required_argument, 0, O_PRIO},
      {"launch-limit", required_argument, 0, O_LIMIT}, {"share-weight", required_argument, 0, O_WEIGHT},
      {"help", no_argument, 0, 'h'},                {0, 0, 0, 0},
  };
  cli_options o = {.cmd = cmd, .usage = g_usage, .argc = argc, .argv = argv, .opts = opts, .max_operands = 1};
  int ch;
  while ((ch = cli_next_option(&o)) > 0) {
    switch (ch) {
    case O_CTL: addr = optarg; break;
    case O_POOL:
      if (cli_pool_option(cmd, "--pool-devices", optarg) < 0) return 2;
      break;
    case O_PRIO: cli_pool_option(cmd, "--priority", optarg); break;
    case O_LIMIT:
      if (cli_pool_option(cmd, "--launch-limit", optarg) < 0) return 2;
      break;
    case O_WEIGHT:
      if (cli_pool_option(cmd, "--share-weight", optarg) < 0) return 2;
      break;
    case O_JSON: json = 1; break;
    case O_TIMEOUT:
      if (cli_parse_u64(cmd, "--timeout", optarg, 1, 86400, &timeout_s) < 0) return 2;
      break;
    case O_DEV: dev_list = optarg; break;
    case O_OUT: out_dir = optarg; break;
    case O_INPUT: {
      if (ninputs >= MAX_INPUTS) return cli_usage_error(cmd, "at most %d --input options", MAX_INPUTS);
      const char *eq = strchr(optarg, '=');
      int idx = next_pos;
      const char *path = optarg;
      if (eq) {
        idx = parse_arg_name(optarg, (size_t)(eq - optarg));
        if (idx < 0)
          return cli_usage_error(cmd, "--input %s: the name before '=' must be an argument index (0, arg0, %%arg0)",
                                 optarg);
        path = eq + 1;
      }
      for (int i = 0; i < ninputs; i++)
        if (inputs[i].index == idx) return cli_usage_error(cmd, "argument %d is given twice", idx);
      inputs[ninputs++] = (run_input){idx, path};
      next_pos = idx + 1;
      break;
    }
    }
  }
  if (ch < 0) return o.exit;
  if (optind >= argc) return cli_usage_error(cmd, "which program? loom run FILE.mlir");
  const char *file = argv[optind];
  int32_t devs[4096];
  int ndevs = 0;
  if (dev_list && (ndevs = cli_parse_devices(dev_list, devs, 4096)) <= 0)
    return cli_usage_error(cmd, "--devices wants a list like 0-7 or 0,2,4 (got '%s')", dev_list);
  size_t len;
  char *text = cli_read_file(file, &len);
  if (!text) return cli_fail(cmd, "cannot read %s: %s", file, strerror(errno));

  loom_client *c = cli_connect(cmd, addr, timeout_s);
  if (!c) {
    free(text);
    return 1;
  }
  int rc = 0;
  loom_executable *exe = NULL;
  loom_array **in_arrays = NULL, **out_arrays = NULL;
  loom_future *fut = NULL;
  loom_executable_info info = {.struct_size = sizeof info};
  loom_compile_options co;
  loom_compile_options_initialize(&co);
  co.devices = ndevs ? devs : NULL;
  co.num_devices = ndevs;
  co.name = file;
  if (loom_compile(c, text, len, &co, &exe) != LOOM_OK) {
    rc = cli_fail(cmd, "%s", loom_errmsg(c));
    goto out;
  }
  loom_executable_info_get(exe, &info);
  for (int i = 0; i < ninputs; i++)
    if (inputs[i].index >= info.num_inputs) {
      rc = cli_fail(cmd, "%s takes %d argument%s; there is no argument %d", file, info.num_inputs,
                    info.num_inputs == 1 ? "" : "s", inputs[i].index);
      goto out;
    }
  if (ninputs != info.num_inputs) {
    rc = cli_fail(cmd, "%s takes %d argument%s; give each with --input NAME=FILE.npy (%d given)", file,
                  info.num_inputs, info.num_inputs == 1 ? "" : "s", ninputs);
    goto out;
  }
  in_arrays = calloc((size_t)info.num_inputs + 1, sizeof *in_arrays);
  out_arrays = calloc((size_t)info.num_outputs + 1, sizeof *out_arrays);
  if (!in_arrays || !out_arrays) {
    rc = cli_fail(cmd, "out of memory");
    goto out;
  }
  for (int k = 0; k < ninputs; k++) {
    int i = inputs[k].index;
    loom_array_spec spec = {.struct_size = sizeof spec};
    loom_sharding sh;
    loom_sharding_initialize(&sh);
    loom_executable_input(exe, i, &spec, &sh);
    lm_npy npy;
    lm_err err;
    if (lm_npy_read(inputs[k].path, (lm_dtype)spec.dtype, 0, &npy, &err) < 0) {
      rc = cli_fail(cmd, "%s", err.msg);
      goto out;
    }
    char want[160], have[160];
    cli_format_type(spec.dtype, spec.rank, spec.dims, want, sizeof want);
    cli_format_type((loom_dtype)npy.dtype, npy.rank, npy.dims, have, sizeof have);
    bool same = (int)npy.dtype == (int)spec.dtype && npy.rank == spec.rank &&
                !memcmp(npy.dims, spec.dims, (size_t)spec.rank * sizeof *spec.dims);
    /* a replicated program also takes one per-replica value, for every replica */
    bool per_replica = !strcmp(info.form, "replicas") && (int)npy.dtype == (int)spec.dtype &&
                       npy.rank == spec.rank - 1 && !memcmp(npy.dims, spec.dims + 1, (size_t)npy.rank * sizeof *npy.dims);
    if (!same && !per_replica) {
      lm_npy_free(&npy);
      rc = cli_fail(cmd, "argument %d is %s but %s holds %s", i, want, inputs[k].path, have);
      goto out;
    }
    if (per_replica) loom_sharding_replicated(&sh, info.devices, info.num_devices);
    loom_put_args pa;
    loom_put_args_initialize(&pa);
    pa.dtype = (loom_dtype)npy.dtype;
    pa.rank = npy.rank;
    pa.dims = npy.dims;
    pa.sharding = &sh;
    pa.data = npy.data ? npy.data : "";
    pa.data_size = npy.nbytes;
    loom_status st = loom_array_put(c, &pa, &in_arrays[i]);
    lm_npy_free(&npy);
    if (st != LOOM_OK) {
      rc = cli_fail(cmd, "putting argument %d (%s): %s", i, inputs[k].path, loom_errmsg(c));
      goto out;
    }
  }
  if (loom_launch(exe, in_arrays, info.num_inputs, NULL, out_arrays, info.num_outputs, &fut) != LOOM_OK ||
      loom_future_wait(fut, -1) != LOOM_OK) {
    rc = cli_fail(cmd, "%s", loom_errmsg(c));
    goto out;
  }
  if (out_dir && mkdir(out_dir, 0777) < 0 && errno != EEXIST) {
    rc = cli_fail(cmd, "cannot create %s: %s", out_dir, strerror(errno));
    goto out;
  }
  if (json) {
    printf("{\"file\": ");
    cli_json_string(stdout, file);
    printf(", \"form\": \"%s\", \"num_replicas\": %d, \"num_partitions\": %d, \"devices\": [", info.form,
           info.num_replicas, info.num_partitions);
    for (int i = 0; i < info.num_devices; i++) printf("%s%d", i ? ", " : "", info.devices[i]);
    printf("], \"fingerprint\": \"%016llx\", \"cached\": %s, \"sequence\": %llu, \"results\": [",
           (unsigned long long)info.fingerprint, info.cached ? "true" : "false",
           (unsigned long long)loom_future_sequence(fut));
  }
  for (int j = 0; j < info.num_outputs; j++) {
    loom_array *a = out_arrays[j];
    uint64_t nb = loom_array_nbytes(a);
    void *buf = malloc(nb ? nb : 1);
    if (!buf) {
      rc = cli_fail(cmd, "out of memory for result %d (%llu bytes)", j, (unsigned long long)nb);
      goto out;
    }
    if (loom_array_get(a, buf, nb) != LOOM_OK) {
      free(buf);
      rc = cli_fail(cmd, "fetching result %d: %s", j, loom_errmsg(c));
      goto out;
    }
    lm_dtype dt = (lm_dtype)loom_array_dtype(a);
    int rank = loom_array_rank(a);
    const int64_t *dims = loom_array_dims(a);
    if (out_dir) {
      size_t pl = strlen(out_dir) + 32;
      char *path = malloc(pl);
      lm_err err;
      int wr = path ? 0 : -1;
      if (path) {
        snprintf(path, pl, "%s/result_%d.npy", out_dir, j);
        wr = lm_npy_write(path, dt, rank, dims, buf, nb, &err);
      }
      free(path);
      if (wr < 0) {
        free(buf);
        rc = cli_fail(cmd, "%s", path ? err.msg : "out of memory");
        goto out;
      }
    }
    if (json) {
      char ts[160];
      cli_format_type((loom_dtype)dt, rank, dims, ts, sizeof ts);
      printf("%s{\"type\": \"%s\", \"dtype\": \"%s\", \"shape\": [", j ? ", " : "", ts, lm_dtype_npy(dt) ? lm_dtype_npy(dt) : "");
      for (int d = 0; d < rank; d++) printf("%s%lld", d ? ", " : "", (long long)dims[d]);
      printf("], \"data\": ");
      nd_print_json(stdout, dt, rank, dims, buf);
      printf("}");
    } else {
      if (info.num_outputs > 1) printf("result %d: ", j);
      nd_print(stdout, dt, rank, dims, buf);
      printf("\n");
    }
    free(buf);
  }
  if (json) printf("]}\n");
out:
  for (int i = 0; in_arrays && i < info.num_inputs; i++) loom_array_release(in_arrays[i]);
  for (int j = 0; out_arrays && j < info.num_outputs; j++) loom_array_release(out_arrays[j]);
  free(in_arrays);
  free(out_arrays);
  loom_future_destroy(fut);
  loom_executable_destroy(exe);
  loom_disconnect(c);
  free(text);
  return rc;
}
