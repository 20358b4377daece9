/* `loom checkpoint ls|show|verify|rm` (the user's checkpoints, docs/elastic.md "Checkpoints") and
 * `loom drain WORKER` (hand a worker's devices and shards to a standby, docs/elastic.md "Drain"):
 * requests to the controller through libloom; text or --json. */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "cli/cli.h"
#include "cli/util.h"
#include "loom/loom.h"

static const char g_usage[] =
    "usage: loom checkpoint ls [options]\n"
    "       loom checkpoint show NAME [options]\n"
    "       loom checkpoint verify NAME [options]\n"
    "       loom checkpoint rm NAME [options]\n"
    "\n"
    "The checkpoints of your user (your token's; everyone's without tokens) in the controller's\n"
    "--checkpoint-dir. Programs save and load them (Python: Client.checkpoint_save / checkpoint_load,\n"
    "C: loom_checkpoint_save / loom_checkpoint_load): the workers write the arrays' shards as\n"
    "safetensors files in parallel, and a manifest is written last.\n"
    "\n"
    "  ls       list them: arrays, size, when saved; a directory without a manifest is a save that\n"
    "           did not finish (never loadable)\n"
    "  show     one checkpoint's arrays (dtype, shape, the sharding it was saved with, its slices)\n"
    "           and files\n"
    "  verify   read every file and check its size, the CRC-32 of every block and its safetensors\n"
    "           header against the manifest (exit status 1 when something is wrong)\n"
    "  rm       delete it (the manifest first, so it is never half there)\n"
    "\n"
    "options:\n"
    "  --controller HOST:PORT   the controller (default: $LOOM_CONTROLLER, else the local cluster)\n"
    "  --json                   print JSON instead of text\n"
    "  --timeout SECONDS        give up connecting after this long (default 30)\n"
    "  -h, --help               show this help\n";

static const char g_usage_drain[] =
    "usage: loom drain WORKER [--controller HOST:PORT] [--json]\n"
    "\n"
    "Planned maintenance: moves worker WORKER's virtual devices and every shard it holds to a standby\n"
    "of as many devices (`loom worker --standby`), re-issues its launches in flight there (bitwise the\n"
    "same results), then releases it (the worker process exits with status 0). Sessions keep their\n"
    "arrays and device ids; nothing is lost, not even arrays with no replica or snapshot. Fails when\n"
    "there is no standby of its size. With --tokens-file, only the controller's --admins may drain.\n"
    "\n"
    "options:\n"
    "  --controller HOST:PORT   the controller (default: $LOOM_CONTROLLER, else the local cluster)\n"
    "  --json                   print JSON instead of text\n"
    "  --timeout SECONDS        give up connecting after this long (default 30)\n"
    "  -h, --help               show this help\n";

static double num(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItem(o, k);
  return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

static const char *str(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItem(o, k);
  return cJSON_IsString(v) ? v->valuestring : "";
}

static void int_list(const cJSON *a, char *buf, size_t cap) {
  size_t n = (size_t)snprintf(buf, cap, "[");
  const cJSON *e;
  int i = 0;
  cJSON_ArrayForEach(e, a) {
    if (n >= cap) break;
    n += (size_t)snprintf(buf + n, cap - n, "%s%.0f", i++ ? "," : "", e->valuedouble);
  }
  if (n < cap) snprintf(buf + n, cap - n, "]");
}

static void print_list(const cJSON *j) {
  const cJSON *list = cJSON_GetObjectItem(j, "checkpoints");
  if (!cJSON_GetArraySize(list)) {
    printf("no checkpoints in %s\n", str(j, "dir"));
    return;
  }
  cli_table t;
  cli_table_init(&t, 5);
  cli_table_row(&t, "NAME", "ARRAYS", "SIZE", "SAVED", "STATE");
  const cJSON *e;
  cJSON_ArrayForEach(e, list) {
    char arrays[32] = "-", size[32] = "-", when[64] = "-";
    bool complete = cJSON_IsTrue(cJSON_GetObjectItem(e, "complete"));
    if (complete) {
      snprintf(arrays, sizeof arrays, "%.0f", num(e, "num_arrays"));
      cli_format_size((uint64_t)num(e, "bytes"), size, sizeof size);
      time_t secs = (time_t)(num(e, "created_unix_ms") / 1000);
      struct tm tm;
      if (localtime_r(&secs, &tm)) strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
    }
    cli_table_row(&t, str(e, "name"), arrays, size, when, complete ? "complete" : str(e, "error"));
  }
  cli_table_print(&t);
  cli_table_free(&t);
}

static void print_show(const cJSON *j) {
  char size[32];
  cli_format_size((uint64_t)num(j, "bytes"), size, sizeof size);
  printf("checkpoint %s: %.0f arrays, %.0f files, %s, in %s\n\n", str(j, "name"), num(j, "num_arrays"),
         num(j, "files"), size, str(j, "dir"));
  cli_table t;
  cli_table_init(&t, 5);
  cli_table_row(&t, "ARRAY", "DTYPE", "SHAPE", "SAVED SHARDING (mesh / devices / dim axes)", "SLICES");
  const cJSON *e;
  cJSON_ArrayForEach(e, cJSON_GetObjectItem(j, "arrays")) {
    char shape[128], mesh[64], devs[256], axes[128] = "", slices[16], sh[512];
    int_list(cJSON_GetObjectItem(e, "shape"), shape, sizeof shape);
    const cJSON *s = cJSON_GetObjectItem(e, "sharding"), *d;
    int_list(cJSON_GetObjectItem(s, "mesh_shape"), mesh, sizeof mesh);
    int_list(cJSON_GetObjectItem(s, "devices"), devs, sizeof devs);
    size_t n = 0;
    cJSON_ArrayForEach(d, cJSON_GetObjectItem(s, "dim_axes")) {
      char one[64];
      int_list(d, one, sizeof one);
      n += (size_t)snprintf(axes + n, sizeof axes - n, "%s%s", n ? "," : "", one);
      if (n >= sizeof axes) break;
    }
    snprintf(sh, sizeof sh, "%s / %s / %s", mesh, devs, axes[0] ? axes : "-");
    snprintf(slices, sizeof slices, "%d", cJSON_GetArraySize(cJSON_GetObjectItem(e, "slices")));
    cli_table_row(&t, str(e, "name"), str(e, "dtype"), shape, sh, slices);
  }
  cli_table_print(&t);
  cli_table_free(&t);
  printf("\n");
  cli_table_init(&t, 3);
  cli_table_row(&t, "FILE", "SIZE", "WRITTEN BY");
  cJSON_ArrayForEach(e, cJSON_GetObjectItem(j, "file_list")) {
    char sz[32], wk[32];
    cli_format_size((uint64_t)num(e, "size"), sz, sizeof sz);
    snprintf(wk, sizeof wk, "worker %.0f", num(e, "worker"));
    cli_table_row(&t, str(e, "path"), sz, wk);
  }
  cli_table_print(&t);
  cli_table_free(&t);
}

static int print_verify(const cJSON *j) {
  bool ok = cJSON_IsTrue(cJSON_GetObjectItem(j, "ok"));
  const cJSON *e;
  cJSON_ArrayForEach(e, cJSON_GetObjectItem(j, "files")) {
    bool fo = cJSON_IsTrue(cJSON_GetObjectItem(e, "ok"));
    printf("%-8s %s%s%s\n", fo ? "ok" : "BAD", str(e, "path"), fo ? "" : ": ", fo ? "" : str(e, "error"));
  }
  char size[32];
  cli_format_size((uint64_t)num(j, "bytes_checked"), size, sizeof size);
  printf("checkpoint %s: %s (%s checked)\n", str(j, "name"), ok ? "ok" : "CORRUPT", size);
  return ok ? 0 : 1;
}

/* Shared option parsing: --controller, --json, --timeout; operands left from *first. */
static int parse(const char *cmd, const char *usage, int argc, char **argv, int max_operands, const char **ctl,
                 bool *json, uint64_t *timeout_s, int *first) {
  enum { O_CTL = 1, O_JSON, O_TIMEOUT };
  static const struct option opts[] = {{"controller", required_argument, 0, O_CTL}, {"json", no_argument, 0, O_JSON},
                                       {"timeout", required_argument, 0, O_TIMEOUT}, {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
  cli_options o = {.cmd = cmd, .usage = usage, .argc = argc, .argv = argv, .opts = opts, .max_operands = max_operands};
  int ch;
  while ((ch = cli_next_option(&o)) > 0) {
    switch (ch) {
    case O_CTL: *ctl = optarg; break;
    case O_JSON: *json = true; break;
    case O_TIMEOUT:
      if (cli_parse_u64(cmd, "--timeout", optarg, 1, 86400, timeout_s) < 0) return -1;
      break;
    }
  }
  if (ch < 0) return o.exit == 0 ? 1 : -1;
  *first = optind;
  return 0;
}

int cmd_checkpoint(int argc, char **argv) {
  const char *cmd = "checkpoint";
  if (argc < 2) {
    fputs(g_usage, stderr);
    return 2;
  }
  if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
    fputs(g_usage, stdout);
    return 0;
  }
  const char *sub = argv[1];
  loom_checkpoint_query_op op;
  if (!strcmp(sub, "ls") || !strcmp(sub, "list")) op = LOOM_CHECKPOINT_LIST;
  else if (!strcmp(sub, "show")) op = LOOM_CHECKPOINT_SHOW;
  else if (!strcmp(sub, "verify")) op = LOOM_CHECKPOINT_VERIFY;
  else if (!strcmp(sub, "rm") || !strcmp(sub, "remove")) op = LOOM_CHECKPOINT_REMOVE;
  else return cli_usage_error(cmd, "unknown subcommand '%s' (ls, show, verify, rm)", sub);
  const char *ctl = NULL;
  bool json = false;
  uint64_t timeout_s = 30;
  int first;
  int pr = parse(cmd, g_usage, argc - 1, argv + 1, op == LOOM_CHECKPOINT_LIST ? 0 : 1, &ctl, &json, &timeout_s, &first);
  if (pr != 0) return pr > 0 ? 0 : 2;
  const char *name = NULL;
  if (op != LOOM_CHECKPOINT_LIST) {
    if (first >= argc - 1) return cli_usage_error(cmd, "%s needs the checkpoint's NAME", sub);
    name = argv[1 + first];
  }
  loom_client *c = cli_connect(cmd, ctl, timeout_s);
  if (!c) return 1;
  char *out = NULL;
  loom_status st = loom_checkpoint_query(c, op, name, &out);
  if (st != LOOM_OK) {
    int rc = cli_fail(cmd, "%s", loom_errmsg(c));
    loom_disconnect(c);
    return rc;
  }
  loom_disconnect(c);
  cJSON *j = cJSON_Parse(out);
  int rc = 0;
  if (!j) {
    rc = cli_fail(cmd, "the controller's answer is not JSON");
  } else if (json) {
    if (op == LOOM_CHECKPOINT_VERIFY && !cJSON_IsTrue(cJSON_GetObjectItem(j, "ok"))) rc = 1;
    cli_print_json(j);
    j = NULL;
  } else if (op == LOOM_CHECKPOINT_LIST) {
    print_list(j);
  } else if (op == LOOM_CHECKPOINT_SHOW) {
    print_show(j);
  } else if (op == LOOM_CHECKPOINT_VERIFY) {
    rc = print_verify(j);
  } else {
    printf("removed checkpoint %s (%.0f files)\n", name, num(j, "files"));
  }
  cJSON_Delete(j);
  loom_free_string(out);
  return rc;
}

int cmd_drain(int argc, char **argv) {
  const char *cmd = "drain";
  const char *ctl = NULL;
  bool json = false;
  uint64_t timeout_s = 30;
  int first;
  int pr = parse(cmd, g_usage_drain, argc, argv, 1, &ctl, &json, &timeout_s, &first);
  if (pr != 0) return pr > 0 ? 0 : 2;
  if (first >= argc) return cli_usage_error(cmd, "which worker? (its id, as `loom status` shows it)");
  char *end;
  long w = strtol(argv[first], &end, 10);
  if (*end || end == argv[first] || w < 0 || w > 1000000)
    return cli_usage_error(cmd, "'%s' is not a worker id", argv[first]);
  loom_client *c = cli_connect(cmd, ctl, timeout_s);
  if (!c) return 1;
  char *out = NULL;
  loom_status st = loom_drain_worker(c, (int32_t)w, &out);
  if (st != LOOM_OK) {
    int rc = cli_fail(cmd, "%s", loom_errmsg(c));
    loom_disconnect(c);
    return rc;
  }
  loom_disconnect(c);
  cJSON *j = cJSON_Parse(out);
  int rc = 0;
  if (!j) {
    rc = cli_fail(cmd, "the controller's answer is not JSON");
  } else if (json) {
    cli_print_json(j);
    j = NULL;
  } else {
    printf("worker %.0f drained onto worker %.0f: %.0f shards moved in %.0f ms; it has been released\n",
           num(j, "worker"), num(j, "replaced_by"), num(j, "shards"), num(j, "ms"));
  }
  cJSON_Delete(j);
  loom_free_string(out);
  return rc;
}
