/* The MLIR bytecode reader: programs as JAX ships them (a StableHLO "portable artifact": the
 * module in VHLO, the versioned form of StableHLO, mixed with the builtin and sdy dialects,
 * written by jaxlib's serialize_portable_artifact, jax.export or the IFRT proxy client) into the
 * same IR the text parser builds (ir.h), followed by the same verifier.
 *
 * Supported: MLIR bytecode versions 0 to 6, VHLO from StableHLO 0.9.0 up to LM_VHLO_MAX_VERSION
 * (the ops, attributes and types of that range, with the defaults older versions imply), the
 * builtin dialect's encodings, and dialects without a bytecode encoding (sdy) through their text
 * form. Anything newer or unknown (a bytecode version, a StableHLO version, a dialect, a VHLO op,
 * attribute or type) is refused with an error that names it and the versions supported.
 *
 * Like the text parser, nothing here aborts, prints or leaks whatever the bytes: counts and sizes
 * are checked against what remains of the input before anything is allocated, references against
 * their tables, nesting against a depth cap (tests/fuzz/fuzz_bytecode.c fuzzes it). */
#ifndef LM_HLO_BYTECODE_H
#define LM_HLO_BYTECODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "hlo/parse.h"

/* The newest StableHLO version whose VHLO this reader knows (what jaxlib 0.10.2 writes at most). */
#define LM_VHLO_MAX_VERSION "1.17.0"
#define LM_VHLO_MIN_VERSION "0.9.0"
/* MLIR bytecode format versions read. */
#define LM_BC_MAX_VERSION 6

/* True when data starts with the MLIR bytecode magic number "ML\xefR". */
bool lm_is_bytecode(const void *data, size_t len);

/* Reads a bytecode module. Same contract as lm_parse_module (which calls it when the input starts
 * with the magic number): on success *out owns a new module. Errors: LOOM_PARSE (malformed or
 * truncated bytes, with the byte offset), LOOM_UNSUPPORTED (a version, dialect, op, attribute or
 * type Loom does not read or run), LOOM_VERIFY, LOOM_NO_MEMORY. */
int lm_read_bytecode(const uint8_t *data, size_t len, const lm_parse_opts *opts, lm_module **out, lm_err *err);

/* The bytecode format version and the producer string ("StableHLO_v1.13.7") of a file, read from
 * its header only; -1 when data is not bytecode or the header is cut short. */
int lm_bytecode_header(const uint8_t *data, size_t len, uint64_t *version, char *producer, size_t cap);

#endif
