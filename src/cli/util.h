/* Helpers shared by the `loom` subcommands: option values (numbers, byte sizes), human-readable
 * sizes and id lists, one-line errors, text tables. */
#ifndef LM_CLI_UTIL_H
#define LM_CLI_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* "loom CMD: message" on stderr; returns 1 (a runtime failure). */
int cli_fail(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* "loom CMD: message (see `loom CMD --help`)" on stderr; returns 2 (a usage error). */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The usage error for the option getopt_long just refused (argv[optind - 1]). */
int cli_bad_option(const char *cmd, char **argv);

/* Parses a decimal integer in [min, max]; on failure prints a usage error naming opt, returns -1. */
int cli_parse_u64(const char *cmd, const char *opt, const char *s, uint64_t min, uint64_t max, uint64_t *out);
/* Parses a byte count: a number with an optional suffix K, M, G, T (powers of 1024; KiB/MiB/GiB/
 * TiB and KB/MB/GB/TB too, the latter powers of 1000). Must be > 0. */
int cli_parse_size(const char *cmd, const char *opt, const char *s, uint64_t *out);

/* "2.0 GiB", "512 MiB", "0 B". */
void cli_format_size(uint64_t bytes, char *buf, size_t cap);
/* "1.5 s", "3 min 12 s", "2 h 5 min". */
void cli_format_duration(uint64_t ms, char *buf, size_t cap);
/* "0-3", "0-3,8,10-11" for a sorted list of ids. */
void cli_format_ids(const uint32_t *ids, size_t n, char *buf, size_t cap);

/* A text table: add rows of cells, then print with columns padded to fit. */
typedef struct cli_table {
  size_t ncols, nrows, cap;
  char **cells;    /* nrows * ncols strdup'd cells */
} cli_table;
void cli_table_init(cli_table *t, size_t ncols);
void cli_table_row(cli_table *t, ...); /* ncols const char * cells */
void cli_table_print(const cli_table *t);
void cli_table_free(cli_table *t);

#endif
