/* `loom interpret`: the local runner. Runs StableHLO files on one in-process CPU device, without
 * a cluster. Two uses:
 *   - self-checking test files (the StableHLO interpreter tests and JAX-generated test data):
 *     every `// -----` case is parsed, its entry function run, and its check ops decide PASS or
 *     FAIL; anything Loom cannot run yet is UNSUPPORTED with the reason the runtime gave
 *     (LOOM_UNSUPPORTED errors), never a guess;
 *   - running a program on .npy inputs (--input) and writing its results as .npy (--output-dir).
 * Entry function of a case: --function, else @main, else the module's only function (the
 * reference runner's rule), else every function without arguments. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "cli/cli.h"
#include "cli/util.h"
#include "common/npy.h"
#include "exec/exec.h"
#include "hlo/bytecode.h"
#include "hlo/dump.h"
#include "hlo/parse.h"
#include "pjrt/pjrt.h"
#include "worker/spmd_local.h"

typedef enum { ST_PASS, ST_FAIL, ST_UNSUPPORTED, ST_ERROR } case_status;
static const char *const g_status_names[] = {"PASS", "FAIL", "UNSUPPORTED", "ERROR"};

typedef struct run_cfg {
  const char **inputs;
  int ninputs;
  const char *output_dir;
  const char *function;
  const char *probe_dir;       /* --probe-dir, or NULL: a temporary directory per case */
  const char *case_probe_dir;  /* the directory of the case being run */
  size_t device_memory;
  int nthreads;
  bool quiet, json, dump_ir, parse_only;
  int counts[4];
  int nfiles;
  /* --backend pjrt: programs compiled and run by a PJRT plugin instead of Loom's executor */
  const char *backend, *pjrt_plugin;
  const char **pjrt_options;
  int npjrt_options;
  lm_pjrt *pjrt;
  const char *case_text; /* the case's program as given, for the plugin */
  size_t case_len;
  int repeat;            /* --repeat N: run N times, print the best time */
} run_cfg;

static void usage(FILE *f) {
  fprintf(f,
          "usage: loom interpret [options] FILE...\n"
          "\n"
          "Runs StableHLO programs on one CPU device in this process: MLIR text as JAX prints it, or\n"
          "MLIR bytecode (a VHLO portable artifact, as jax.export and the IFRT proxy send programs),\n"
          "recognised by its magic number whatever the file is called.\n"
          "Self-checking files (check.expect_* ops, stablehlo.custom_call @check.*) print PASS, FAIL\n"
          "or UNSUPPORTED (with the reason) per `// -----` case, then a summary; the exit status is 1\n"
          "when any case fails.\n"
          "\n"
          "options:\n"
          "  --input FILE.npy       an argument of the entry function (repeat, in order)\n"
          "  --output-dir DIR       write the entry function's results to DIR/result_0.npy, ...\n"
          "  --function NAME        entry function (default: main, or the module's only function,\n"
          "                         else every function without arguments)\n"
          "  --device-memory BYTES  the device's memory budget (default 2G; suffixes K, M, G)\n"
          "  --threads N            threads kernels may use (default 1)\n"
          "  --probe-dir DIR        keep the values interpreter.probe records in DIR (default: a\n"
          "                         temporary directory per case, removed afterwards)\n"
          "  --quiet                print only failures and the summary\n"
          "  --json                 print one JSON object per case and a summary object\n"
          "  --parse-only           parse and verify only\n"
          "  --dump-ir              print each case's parsed IR (canonical form) instead of running it\n"
          "  --backend interp|pjrt  who computes: Loom's executor (default), or a PJRT plugin (XLA)\n"
          "  --pjrt-plugin PATH     the plugin for --backend pjrt (default: $LOOM_PJRT_PLUGIN, else the\n"
          "                         xla-cpu-pjrt plugin found when Loom was built)\n"
          "  --pjrt-option K=V      a client create option for the plugin (repeat; e.g. cpu_device_count=1)\n"
          "  --repeat N             run the entry function N times and print the best wall time\n"
          "  --help                 this text\n");
}

static bool parse_size(const char *s, size_t *out) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s) return false;
  unsigned long long mul = 1;
  if (*end == 'K' || *end == 'k') mul = 1ull << 10, end++;
  else if (*end == 'M' || *end == 'm') mul = 1ull << 20, end++;
  else if (*end == 'G' || *end == 'g') mul = 1ull << 30, end++;
  if (*end == 'B' || *end == 'b') end++;
  if (*end || v > (unsigned long long)SIZE_MAX / mul) return false;
  *out = (size_t)(v * mul);
  return true;
}

static void report(run_cfg *c, const char *file, uint32_t line, const char *fn, case_status st, const char *msg) {
  c->counts[st]++;
  if (c->json) {
    printf("{\"file\": ");
    cli_json_string(stdout, file);
    printf(", \"line\": %u, \"function\": ", line);
    cli_json_string(stdout, fn ? fn : "");
    printf(", \"status\": \"%s\", \"message\": ", g_status_names[st]);
    cli_json_string(stdout, msg ? msg : "");
    printf("}\n");
    fflush(stdout); /* whole lines even if a later case brings the process down */
    return;
  }
  if (c->quiet && (st == ST_PASS || st == ST_UNSUPPORTED)) return;
  printf("%-11s %s:%u", g_status_names[st], file, line);
  if (fn) printf(" @%s", fn);
  if (msg && *msg) printf(": %s", msg);
  printf("\n");
  fflush(stdout);
}

static case_status status_of(int rc) {
  if (rc == LOOM_CHECK_FAILED) return ST_FAIL;
  if (rc == LOOM_UNSUPPORTED) return ST_UNSUPPORTED;
  return ST_ERROR;
}

/* Reads .npy inputs as buffers matching fn's argument types. */
static int load_inputs(const run_cfg *c, const lm_func *fn, lm_device *dev, lm_buffer **args, lm_err *err) {
  if ((uint32_t)c->ninputs != fn->nargs)
    return lm_errf(err, LOOM_INVALID_ARGUMENT, "@%s takes %u arguments; %d --input files given", fn->name, fn->nargs,
                   c->ninputs);
  for (uint32_t i = 0; i < fn->nargs; i++) {
    const lm_type *t = &fn->arg_types[i];
    char ts[256];
    if (t->kind != LM_TYPE_TENSOR || !lm_type_is_static(t))
      return lm_errf(err, LOOM_UNSUPPORTED, "argument %u of @%s is %s: only static tensors can be read from .npy", i,
                     fn->name, lm_type_str(t, ts, sizeof ts));
    lm_npy a;
    LM_TRY(lm_npy_read(c->inputs[i], (lm_dtype)t->dtype, 0, &a, err));
    bool same = a.dtype == t->dtype && a.rank == t->rank;
    for (int d = 0; same && d < a.rank; d++) same = a.dims[d] == t->dims[d];
    if (!same) {
      char got[256];
      lm_type at;
      lm_type_tensor(&at, a.dtype, a.rank, a.dims);
      lm_npy_free(&a);
      return lm_errf(err, LOOM_SHAPE_MISMATCH, "%s holds %s but argument %u of @%s is %s", c->inputs[i],
                     lm_type_str(&at, got, sizeof got), i, fn->name, lm_type_str(t, ts, sizeof ts));
    }
    int rc = lm_buffer_from_data(dev, t, a.data, a.nbytes, &args[i], err);
    lm_npy_free(&a);
    LM_TRY(rc);
  }
  return 0;
}

static void print_result(uint32_t i, const lm_buffer *b) {
  char ts[256];
  printf("result %u: %s", i, lm_type_str(&b->type, ts, sizeof ts));
  if (b->type.kind == LM_TYPE_TENSOR && b->data) {
    int64_t n = lm_type_numel(&b->type);
    printf(" [");
    for (int64_t k = 0; k < n && k < 8; k++) {
      lm_dtype d = (lm_dtype)b->type.dtype;
      const unsigned char *p = (const unsigned char *)b->data + (size_t)k * lm_dtype_size(d);
      printf("%s", k ? ", " : "");
      if (d == LOOM_DTYPE_F32) { float v; memcpy(&v, p, 4); printf("%.9g", v); }
      else if (d == LOOM_DTYPE_F64) { double v; memcpy(&v, p, 8); printf("%.17g", v); }
      else if (d == LOOM_DTYPE_PRED) printf("%s", *p ? "true" : "false");
      else if (lm_dtype_is_sint(d) || lm_dtype_is_uint(d)) {
        int64_t v = 0;
        memcpy(&v, p, lm_dtype_size(d));
        if (lm_dtype_is_sint(d) && lm_dtype_size(d) < 8) {
          int sh = (int)(64 - 8 * lm_dtype_size(d));
          v = (int64_t)((uint64_t)v << sh) >> sh;
        }
        printf("%lld", (long long)v);
      } else printf("..");
    }
    printf("%s]", n > 8 ? ", ..." : "");
  }
  printf("\n");
}

static int write_results(const run_cfg *c, lm_buffer **res, uint32_t n, lm_err *err) {
  if (mkdir(c->output_dir, 0777) != 0 && errno != EEXIST) return lm_errf(err, LOOM_IO, "cannot create %s", c->output_dir);
  for (uint32_t i = 0; i < n; i++) {
    if (res[i]->type.kind != LM_TYPE_TENSOR)
      return lm_errf(err, LOOM_UNSUPPORTED, "result %u is not a tensor; it cannot be written as .npy", i);
    size_t len = strlen(c->output_dir) + 32;
    char *path = malloc(len);
    if (!path) return lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
    snprintf(path, len, "%s/result_%u.npy", c->output_dir, i);
    int rc = lm_npy_write(path, (lm_dtype)res[i]->type.dtype, res[i]->type.rank, res[i]->type.dims, res[i]->data,
                          res[i]->nbytes, err);
    free(path);
    LM_TRY(rc);
  }
  return 0;
}

/* Runs one function of a prepared program. Returns 0 or an error (message in err). */
static int run_function(run_cfg *c, const lm_program *prog, const lm_func *fn, lm_err *err) {
  lm_device *dev = lm_device_create(c->device_memory);
  if (!dev) return lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  uint32_t nargs = fn->nargs, nres = fn->nresults;
  lm_buffer **args = calloc(nargs + 1, sizeof *args), **res = calloc(nres + 1, sizeof *res);
  int rc = args && res ? 0 : lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  if (rc == 0 && nargs) rc = load_inputs(c, fn, dev, args, err);
  lm_pjrt_exe *x = NULL;
  if (rc == 0 && c->pjrt) {
    if (strcmp(fn->name, "main"))
      rc = lm_errf(err, LOOM_UNSUPPORTED, "--backend pjrt runs @main only (the entry function is @%s)", fn->name);
    else rc = lm_pjrt_compile(c->pjrt, c->case_text, c->case_len, nres, &x, err);
  }
  double best = 1e30;
  for (int r = 0; rc == 0 && r < (c->repeat > 0 ? c->repeat : 1); r++) {
    for (uint32_t i = 0; i < nres; i++) {
      lm_buffer_release(res[i]);
      res[i] = NULL;
    }
    double t0 = cli_now();
    if (x) {
      rc = lm_pjrt_run(x, 0, args, nargs, dev, fn->result_types, res, nres, err);
    } else {
      lm_run_opts o = {.device = dev, .nthreads = c->nthreads, .probe_dir = c->case_probe_dir};
      rc = lm_program_run(prog, fn->name, &o, args, nargs, res, nres, err);
    }
    double t = cli_now() - t0;
    if (t < best) best = t;
  }
  lm_pjrt_exe_free(x);
  if (rc == 0 && c->repeat > 0)
    fprintf(stderr, "@%s: best of %d runs %.3f ms (%s, peak device memory %.1f MiB)\n", fn->name, c->repeat, best * 1e3,
            c->pjrt ? "pjrt" : "interp", (double)lm_device_peak(dev) / (1 << 20));
  if (rc == 0 && c->output_dir) rc = write_results(c, res, nres, err);
  else if (rc == 0 && c->ninputs && !c->quiet && !c->json)
    for (uint32_t i = 0; i < nres; i++) print_result(i, res[i]);
  for (uint32_t i = 0; args && i < nargs; i++) lm_buffer_release(args[i]);
  for (uint32_t i = 0; res && i < nres; i++) lm_buffer_release(res[i]);
  free(args);
  free(res);
  lm_device_destroy(dev);
  return rc;
}

/* Removes a temporary probe directory and the files in it. */
static void remove_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (d) {
    struct dirent *de;
    while ((de = readdir(d))) {
      if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
      char path[4096];
      if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, de->d_name) < sizeof path) unlink(path);
    }
    closedir(d);
  }
  rmdir(dir);
}

static void run_case(run_cfg *c, const char *file, const char *text, size_t len, uint32_t line) {
  /* a case is named by its first non-blank line */
  size_t skip = 0;
  for (size_t i = 0; i < len && (text[i] == ' ' || text[i] == '\t' || text[i] == '\r' || text[i] == '\n'); i++)
    if (text[i] == '\n') {
      line++;
      skip = i + 1;
    }
  text += skip;
  len -= skip;
  c->case_text = text;
  c->case_len = len;
  lm_err err;
  lm_module *m;
  lm_parse_opts po = {.filename = file, .first_line = line};
  int rc = lm_parse_module(text, len, &po, &m, &err);
  if (rc < 0) {
    report(c, file, line, NULL, status_of(rc) == ST_FAIL ? ST_ERROR : status_of(rc), err.msg);
    return;
  }
  if (c->dump_ir) {
    char *s = lm_module_dump(m);
    printf("// %s:%u\n%s", file, line, s ? s : "(out of memory)\n");
    free(s);
  }
  if (c->parse_only || c->dump_ir) {
    report(c, file, line, NULL, ST_PASS, "parsed");
    lm_module_free(m);
    return;
  }
  /* entry functions */
  const char *names[64];
  int nnames = 0;
  if (c->function) names[nnames++] = c->function;
  else if (lm_module_func(m, "main")) names[nnames++] = "main";
  else if (m->nfuncs == 1) names[nnames++] = m->funcs[0].name;
  else
    for (uint32_t i = 0; i < m->nfuncs && nnames < 64; i++)
      if (m->funcs[i].nargs == 0) names[nnames++] = m->funcs[i].name;
  if (m->nfuncs == 0) {
    report(c, file, line, NULL, ST_PASS, "no functions");
    lm_module_free(m);
    return;
  }
  if (nnames == 0) {
    report(c, file, line, NULL, ST_ERROR, "no entry function (no @main and no function without arguments)");
    lm_module_free(m);
    return;
  }
  for (int i = 0; i < nnames; i++)
    if (!lm_module_func(m, names[i])) {
      report(c, file, line, names[i], ST_ERROR, "no such function");
      lm_module_free(m);
      return;
    }
  char first[256]; /* the names live in m, which lm_program_create frees on failure */
  snprintf(first, sizeof first, "%s", names[0]);
  lm_program *prog;
  rc = lm_program_create(m, &prog, &err); /* takes m */
  if (rc < 0) {
    report(c, file, line, nnames == 1 ? first : NULL, status_of(rc) == ST_FAIL ? ST_ERROR : status_of(rc), err.msg);
    return;
  }
  const lm_module *pm = lm_program_module(prog);
  char tmpdir[] = "/tmp/loom-probe-XXXXXX";
  c->case_probe_dir = c->probe_dir;
  if (!c->probe_dir && mkdtemp(tmpdir)) c->case_probe_dir = tmpdir;
  for (int i = 0; i < nnames; i++) {
    const lm_func *fn = lm_module_func(pm, names[i]);
    if (fn->nargs && !c->ninputs) {
      report(c, file, line, fn->name, ST_UNSUPPORTED,
             "the entry function takes arguments and the file gives none (run it with --input FILE.npy ...)");
      continue;
    }
    rc = run_function(c, prog, fn, &err);
    report(c, file, line, fn->name, rc < 0 ? status_of(rc) : ST_PASS, rc < 0 ? err.msg : NULL);
  }
  if (c->case_probe_dir == tmpdir) remove_dir(tmpdir);
  c->case_probe_dir = NULL;
  lm_program_destroy(prog);
}

/* A line holding the split marker `// -----` (like mlir's -split-input-file, also when commented
 * out again as `// // -----`) starts a new case. */
static bool is_split_line(const char *p, size_t n) {
  const char *e = memchr(p, '\n', n);
  size_t len = e ? (size_t)(e - p) : n;
  for (size_t i = 0; i + 8 <= len; i++)
    if (!memcmp(p + i, "// -----", 8)) return true;
  return false;
}

/* Splits a file at `// -----` lines into cases and runs each. */
static int run_file(run_cfg *c, const char *path) {
  size_t n;
  char *buf = cli_read_file(path, &n);
  if (!buf) {
    report(c, path, 0, NULL, ST_ERROR, errno == ENOMEM ? "out of host memory" : strerror(errno));
    return -1;
  }
  c->nfiles++;
  if (lm_is_bytecode(buf, n)) { /* MLIR bytecode: one module, no `// -----` cases */
    run_case(c, path, buf, n, 1);
    free(buf);
    return 0;
  }
  size_t start = 0;
  uint32_t line = 1, start_line = 1;
  for (size_t i = 0; i <= n; i++) {
    bool at_line = i == 0 || buf[i - 1] == '\n';
    if (i < n && at_line && is_split_line(buf + i, n - i)) {
      run_case(c, path, buf + start, i - start, start_line);
      while (i < n && buf[i] != '\n') i++;
      start = i + 1;
      line++;
      start_line = line;
      continue;
    }
    if (i == n) run_case(c, path, buf + start, n - start, start_line);
    else if (buf[i] == '\n') line++;
  }
  free(buf);
  return 0;
}

/* Reads the options into c and the program files into files[*nfiles] (both arrays hold argc
 * entries). Returns 0, or -1 when the command must stop with *exit (0 after --help, 2 after a
 * usage error). */
static int parse_args(int argc, char **argv, run_cfg *c, const char **files, int *nfiles, int *status) {
  *status = 2;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    bool has_val = i + 1 < argc;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      *status = 0;
      return -1;
    } else if (!strcmp(a, "--input") && has_val) c->inputs[c->ninputs++] = argv[++i];
    else if (!strcmp(a, "--output-dir") && has_val) c->output_dir = argv[++i];
    else if (!strcmp(a, "--probe-dir") && has_val) c->probe_dir = argv[++i];
    else if (!strcmp(a, "--function") && has_val) c->function = argv[++i][0] == '@' ? argv[i] + 1 : argv[i];
    else if (!strcmp(a, "--device-memory") && has_val) {
      if (!parse_size(argv[++i], &c->device_memory) || c->device_memory == 0) {
        fprintf(stderr, "loom interpret: bad --device-memory '%s'\n", argv[i]);
        return -1;
      }
    } else if (!strcmp(a, "--threads") && has_val) {
      c->nthreads = atoi(argv[++i]);
      if (c->nthreads < 1 || c->nthreads > 1024) {
        fprintf(stderr, "loom interpret: bad --threads\n");
        return -1;
      }
    } else if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) c->quiet = true;
    else if (!strcmp(a, "--json")) c->json = true;
    else if (!strcmp(a, "--dump-ir")) c->dump_ir = true;
    else if (!strcmp(a, "--parse-only")) c->parse_only = true;
    else if (!strcmp(a, "--backend") && has_val) c->backend = argv[++i];
    else if (!strcmp(a, "--pjrt-plugin") && has_val) c->pjrt_plugin = argv[++i];
    else if (!strcmp(a, "--pjrt-option") && has_val) c->pjrt_options[c->npjrt_options++] = argv[++i];
    else if (!strcmp(a, "--repeat") && has_val) {
      c->repeat = atoi(argv[++i]);
      if (c->repeat < 1 || c->repeat > 1000000) {
        fprintf(stderr, "loom interpret: bad --repeat\n");
        return -1;
      }
    }
    else if (a[0] == '-' && a[1]) {
      fprintf(stderr, "loom interpret: unknown or incomplete option '%s'\n\n", a);
      usage(stderr);
      return -1;
    } else files[(*nfiles)++] = a;
  }
  if (*nfiles == 0) {
    usage(stderr);
    return -1;
  }
  if (c->backend && strcmp(c->backend, "interp") && strcmp(c->backend, "pjrt")) {
    fprintf(stderr, "loom interpret: --backend is interp or pjrt, not '%s'\n", c->backend);
    return -1;
  }
  if ((c->ninputs || c->output_dir) && *nfiles != 1) {
    fprintf(stderr, "loom interpret: --input/--output-dir take exactly one program file\n");
    return -1;
  }
  return 0;
}

int cmd_interpret(int argc, char **argv) {
  run_cfg c = {.device_memory = (size_t)2 << 30, .nthreads = 1};
  lm_spmd_local_register(); /* interpreter.run_parallel: processes on threads of this process */
  const char **files = calloc((size_t)argc + 1, sizeof *files);
  c.inputs = calloc((size_t)argc + 1, sizeof *c.inputs);
  c.pjrt_options = calloc((size_t)argc + 1, sizeof *c.pjrt_options);
  int nfiles = 0, status = 2;
  if (!files || !c.inputs || !c.pjrt_options || parse_args(argc, argv, &c, files, &nfiles, &status) < 0) {
    free(files);
    free(c.inputs);
    free(c.pjrt_options);
    return status;
  }
  if (c.backend && !strcmp(c.backend, "pjrt")) {
    lm_err err;
    const char *plugin = c.pjrt_plugin ? c.pjrt_plugin : lm_pjrt_default_plugin();
    if (lm_pjrt_open(plugin, c.pjrt_options, c.npjrt_options, &c.pjrt, &err) < 0) {
      fprintf(stderr, "loom interpret: %s\n", err.msg);
      free(files);
      free(c.inputs);
      free(c.pjrt_options);
      return 2;
    }
  }
  for (int i = 0; i < nfiles; i++) run_file(&c, files[i]);
  int total = c.counts[0] + c.counts[1] + c.counts[2] + c.counts[3];
  if (c.json)
    printf("{\"summary\": {\"files\": %d, \"cases\": %d, \"pass\": %d, \"fail\": %d, \"unsupported\": %d, \"error\": %d}}\n",
           c.nfiles, total, c.counts[ST_PASS], c.counts[ST_FAIL], c.counts[ST_UNSUPPORTED], c.counts[ST_ERROR]);
  else if (!c.ninputs || c.quiet)
    printf("%d case%s in %d file%s: %d passed, %d failed, %d unsupported, %d errors\n", total, total == 1 ? "" : "s",
           c.nfiles, c.nfiles == 1 ? "" : "s", c.counts[ST_PASS], c.counts[ST_FAIL], c.counts[ST_UNSUPPORTED],
           c.counts[ST_ERROR]);
  lm_pjrt_close(c.pjrt);
  free(files);
  free(c.inputs);
  free(c.pjrt_options);
  return c.counts[ST_FAIL] || c.counts[ST_ERROR] ? 1 : 0;
}
