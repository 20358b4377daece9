/* stderr logger with a component name and a level threshold from LOOM_LOG_LEVEL. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include "common/log.h"

static char g_component[64] = "loom";
static int g_level = -1;

void lm_log_init(const char *component) {
  snprintf(g_component, sizeof g_component, "%s", component);
  g_level = -1;
}

int lm_log_enabled(int level) {
  if (g_level < 0) {
    const char *s = getenv("LOOM_LOG_LEVEL");
    g_level = LM_LOG_INFO;
    if (s) {
      if (!strcmp(s, "debug")) g_level = LM_LOG_DEBUG;
      else if (!strcmp(s, "warn")) g_level = LM_LOG_WARN;
      else if (!strcmp(s, "error")) g_level = LM_LOG_ERROR;
    }
  }
  return level >= g_level;
}

void lm_log(int level, const char *fmt, ...) {
  if (!lm_log_enabled(level)) return;
  static const char lv[] = "DIWE";
  struct timeval tv;
  gettimeofday(&tv, NULL);
  struct tm tm;
  gmtime_r(&tv.tv_sec, &tm);
  char line[2048];
  int n = snprintf(line, sizeof line, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ %s %c ", tm.tm_year + 1900,
                   tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(tv.tv_usec / 1000),
                   g_component, lv[level & 3]);
  va_list ap;
  va_start(ap, fmt);
  if (n > 0 && n < (int)sizeof line) vsnprintf(line + n, sizeof line - n, fmt, ap);
  va_end(ap);
  fprintf(stderr, "%s\n", line); /* one write per line keeps lines from interleaving */
}
