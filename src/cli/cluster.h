/* The local cluster's bookkeeping shared by `loom up` and `loom down`: the state directory
 * (created private to the user), its lock (held by the running supervisor), the `cluster`
 * state file (key=value lines; see docs/protocol.md "Local clusters"), and waiting for
 * processes that are not our children. */
#ifndef LM_CLI_CLUSTER_H
#define LM_CLI_CLUSTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "common/err.h"

#define CLI_LOCK_FILE "lock"          /* flock()ed by the supervisor for its whole life */
#define CLI_STOP_FILE "last-stop"     /* what the supervisor found while stopping ("ok" or problems) */

/* Computes the state directory (lm_state_dir) and creates it if needed. The per-user default
 * under /tmp must be a directory owned by this user and not writable by others. */
int cli_state_dir_ensure(char *dir, size_t cap, lm_err *err);
/* Takes the state directory's lock without waiting. Returns the lock's fd (close-on-exec), or
 * LOOM_BUSY when another supervisor holds it, or another negative status. */
int cli_lock_state(const char *dir, lm_err *err);
/* Writes dir/name atomically (temporary file + rename). */
int cli_write_file(const char *dir, const char *name, const char *text, lm_err *err);
/* Removes dir/name if it exists. */
void cli_remove_file(const char *dir, const char *name);
/* The last non-empty line of a log file (for error messages), or "" */
void cli_last_line(const char *path, char *buf, size_t cap);

/* Waits until pid is gone (or no longer the process that started at start), up to timeout_ms.
 * Returns true when it is gone. Works for processes that are not our children. */
bool cli_wait_gone(long pid, uint64_t start, uint64_t timeout_ms);

#endif
