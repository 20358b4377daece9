/* Finding the controller: an explicit address, else $LOOM_CONTROLLER, else the local cluster
 * that `loom up` recorded in its state directory. Also the state directory itself and its
 * `cluster` file (key=value lines written by `loom up`, read here and by `loom down`). */
#ifndef LM_CLIENT_LOCATE_H
#define LM_CLIENT_LOCATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "common/err.h"

#define LM_STATE_FILE "cluster" /* in the state directory */

/* The state directory: $LOOM_STATE_DIR, else $XDG_RUNTIME_DIR/loom, else /tmp/loom-$UID.
 * Only computes the path (nothing is created). */
int lm_state_dir(char *buf, size_t cap, lm_err *err);
/* Reads key's value from dir/cluster into val. LOOM_NOT_FOUND when the file or key is absent. */
int lm_state_get(const char *dir, const char *key, char *val, size_t cap, lm_err *err);

/* The start time of process pid (clock ticks after boot, /proc/PID/stat field 22); 0 when the
 * process does not exist. Tells a live process from a later one that reuses its pid. */
uint64_t lm_proc_start_time(long pid);
/* True when pid runs and (start == 0 or) started at start. */
bool lm_proc_alive(long pid, uint64_t start);

/* Resolves where to connect: explicit (may be NULL), $LOOM_CONTROLLER, the local cluster.
 * Fails with LOOM_NOT_FOUND saying what was tried, or naming a stale local cluster. */
int lm_locate_controller(const char *explicit_addr, char *out, size_t cap, lm_err *err);

#define LM_TOKEN_FILE "token"   /* in the state directory: `loom up`'s token for the local user */
#define LM_SECRET_FILE "secret" /* in the state directory: the local cluster's secret */
#define LM_TOKENS_FILE "tokens" /* in the state directory: the controller's hashed token store */

/* The client token to present to the controller at addr: $LOOM_TOKEN, else the first line of
 * $LOOM_TOKEN_FILE, else the state directory's `token` file when addr is the local cluster's
 * recorded address (a token is never offered to another controller by default). Returns its
 * length (0: none found; out is then ""), or < 0 with err set (an unreadable $LOOM_TOKEN_FILE). */
int lm_locate_token(const char *addr, char *out, size_t cap, lm_err *err);

#endif
