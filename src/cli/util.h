/* Helpers shared by the `loom` subcommands: reading options, option values (numbers, byte sizes),
 * connecting to the cluster, human-readable sizes and id lists, one-line errors, text tables,
 * JSON output, reading whole files. */
#ifndef LM_CLI_UTIL_H
#define LM_CLI_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "loom/loom_dtype.h"

struct option;
struct cJSON;
struct loom_client;

/* "loom CMD: message" on stderr; returns 1 (a runtime failure). */
int cli_fail(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* "loom CMD: message (see `loom CMD --help`)" on stderr; returns 2 (a usage error). */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The usage error for the option getopt_long just refused (argv[optind - 1]). */
int cli_bad_option(const char *cmd, char **argv);

/* Reading a subcommand's options with getopt_long: long options only, plus -h, without getopt's
 * own messages. The loop
 *     cli_options o = {.cmd = cmd, .usage = g_usage, .argc = argc, .argv = argv, .opts = opts};
 *     int ch;
 *     while ((ch = cli_next_option(&o)) > 0) switch (ch) { ... }
 *     if (ch < 0) return o.exit;
 * sees each option of opts in turn (by its val); the operands are argv[optind...] afterwards.
 * -h/--help (opts lists {"help", no_argument, 0, 'h'}) prints the usage and stops with exit 0;
 * an unknown option, a missing value or more than max_operands operands stops with a usage error
 * (exit 2). */
typedef struct cli_options {
  const char *cmd;                 /* the subcommand, for messages */
  const char *usage;               /* printed for --help */
  int argc;
  char **argv;
  const struct option *opts;       /* getopt_long's table, ending with {0, 0, 0, 0} */
  int max_operands;                /* operands allowed after the options */
  bool started;                    /* getopt has been reset for this argv */
  int exit;                        /* out: the exit status when cli_next_option returned -1 */
} cli_options;
/* The next option's val, 0 when the options are over, -1 when the command must stop (o->exit). */
int cli_next_option(cli_options *o);

/* The options of the commands that only ask the cluster (`loom devices`, `loom status`):
 * --controller HOST:PORT, --json, --timeout SECONDS (default 30), -h/--help. */
typedef struct cli_query {
  const char *controller;          /* NULL: $LOOM_CONTROLLER, else the local cluster */
  bool json;
  uint64_t timeout_s;
  int exit;                        /* the exit status when cli_query_options returned -1 */
} cli_query;
/* Reads them from argv; returns 0, or -1 when the command must stop with q->exit (0 after --help,
 * 2 after a usage error). */
int cli_query_options(const char *cmd, const char *usage, int argc, char **argv, cli_query *q);

/* Parses a decimal integer in [min, max]; on failure prints a usage error naming opt, returns -1. */
/* A raw protocol session (lm_cconn) with the controller at addr, as the CLI opens one: the token found
 * as usual (lm_locate_token), `name` shown by `loom status`. */
struct lm_cconn;
struct lm_err;
int cli_open_session(const char *addr, int64_t timeout_ms, const char *name, struct lm_cconn **out, struct lm_err *err);

int cli_parse_u64(const char *cmd, const char *opt, const char *s, uint64_t min, uint64_t max, uint64_t *out);
/* path made absolute against the current directory (a detached supervisor changes directory);
 * a usage error (returns -1) when empty or too long. */
int cli_absolute_path(const char *cmd, const char *opt, const char *path, char *out, size_t cap);
/* Parses a byte count: a number with an optional suffix K, M, G, T (powers of 1024; KiB/MiB/GiB/
 * TiB and KB/MB/GB/TB too, the latter powers of 1000). Must be > 0. */
int cli_parse_size(const char *cmd, const char *opt, const char *s, uint64_t *out);

/* Connects to the controller at addr (NULL: $LOOM_CONTROLLER, else the local cluster) as the
 * client "loom CMD", each request limited to timeout_s. On failure prints the error and returns
 * NULL. */
struct loom_client *cli_connect(const char *cmd, const char *addr, uint64_t timeout_s);
/* What cli_connect asks the shared pool for (docs/pool.md): set by --pool-devices, --priority and
 * --launch-limit, else from $LOOM_POOL_DEVICES, $LOOM_PRIORITY, $LOOM_LAUNCH_LIMIT_MS. */
typedef struct cli_pool {
  uint32_t devices;
  const char *priority;
  uint32_t launch_limit_ms;
  uint32_t share_weight;
} cli_pool;
extern cli_pool g_cli_pool;
/* Parses one of those options (O is the option's name); -1 after a usage error. */
int cli_pool_option(const char *cmd, const char *opt, const char *val);

/* Parses a list of virtual device ids, "0-7", "4,5,6,7", "0-3,8,10-11" (ids 0..65535, ranges
 * ascending) into out[0..cap). Returns the count, or -1 when s is malformed or lists more than cap. */
int cli_parse_devices(const char *s, int32_t *out, int cap);

/* "2.0 GiB", "512 MiB", "0 B". */
void cli_format_size(uint64_t bytes, char *buf, size_t cap);
/* "1.5 s", "3 min 12 s", "2 h 5 min". */
void cli_format_duration(uint64_t ms, char *buf, size_t cap);
/* "0-3", "0-3,8,10-11" for a sorted list of ids. */
void cli_format_ids(const uint32_t *ids, size_t n, char *buf, size_t cap);

/* An array type as "f32[2,3]" (MLIR element type, then the shape; "i1[]" for a scalar). */
void cli_format_type(loom_dtype dtype, int rank, const int64_t *dims, char *buf, size_t cap);

/* A text table: add rows of cells, then print with columns padded to fit. */
typedef struct cli_table {
  size_t ncols, nrows, cap;
  char **cells;    /* nrows * ncols strdup'd cells */
} cli_table;
void cli_table_init(cli_table *t, size_t ncols);
void cli_table_row(cli_table *t, ...); /* ncols const char * cells */
void cli_table_print(const cli_table *t);
void cli_table_free(cli_table *t);

/* Prints root as indented JSON and a newline on stdout, then deletes it. */
void cli_print_json(struct cJSON *root);
/* Writes s as a JSON string literal (quoted, with '"', '\\' and control characters escaped). */
void cli_json_string(FILE *f, const char *s);

/* Reads a whole file into a malloc'ed buffer (the caller frees it) and its length into *len. Returns
 * NULL with errno set when it cannot be opened or read (ENOMEM when out of memory). */
char *cli_read_file(const char *path, size_t *len);

/* A boolean option of a one-file command: --name sets *set. */
typedef struct cli_flag {
  const char *name;
  bool *set;
} cli_flag;

/* The arguments of a command that reads one program file (`loom dump`, `loom compile`): the
 * flags, `-o FILE`, `--help`, and exactly one file. Returns -1 when the command goes on with
 * *in (and *out, NULL for standard output), else the exit status to return (usage printed). */
int cli_one_file_args(const char *cmd, int argc, char **argv, const cli_flag *flags, int nflags,
                      void (*usage)(FILE *), const char **in, const char **out);

/* cli_read_file, saying "loom CMD: cannot read PATH: why" on stderr when it fails. */
char *cli_read_input(const char *cmd, const char *path, size_t *len);

/* Seconds on the monotonic clock. */
double cli_now(void);

#endif
