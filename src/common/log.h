/* Daemon logging to stderr: "2026-12-02T11:49:00.123Z controller I message".
 * Libraries (libloom, the executor) never log; daemons and the CLI do.
 * LOOM_LOG_LEVEL=debug|info|warn|error sets the threshold (default info). */
#ifndef LM_LOG_H
#define LM_LOG_H

enum { LM_LOG_DEBUG = 0, LM_LOG_INFO = 1, LM_LOG_WARN = 2, LM_LOG_ERROR = 3 };

void lm_log_init(const char *component); /* e.g. "controller", "worker 1" */
void lm_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int lm_log_enabled(int level);

#define lm_debug(...) do { if (lm_log_enabled(LM_LOG_DEBUG)) lm_log(LM_LOG_DEBUG, __VA_ARGS__); } while (0)
#define lm_info(...) lm_log(LM_LOG_INFO, __VA_ARGS__)
#define lm_warn(...) lm_log(LM_LOG_WARN, __VA_ARGS__)
#define lm_error(...) lm_log(LM_LOG_ERROR, __VA_ARGS__)

#endif
