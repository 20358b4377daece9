/* State directory, the local cluster's state file, process liveness, controller discovery. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "client/locate.h"
#include "net/sock.h"

int lm_state_dir(char *buf, size_t cap, lm_err *err) {
  const char *s = getenv("LOOM_STATE_DIR");
  int n;
  if (s && *s) n = snprintf(buf, cap, "%s", s);
  else if ((s = getenv("XDG_RUNTIME_DIR")) && *s) n = snprintf(buf, cap, "%s/loom", s);
  else n = snprintf(buf, cap, "/tmp/loom-%ld", (long)getuid());
  if (n < 0 || (size_t)n >= cap) return lm_errf(err, LOOM_INVALID_ARGUMENT, "state directory path is too long");
  return 0;
}

int lm_state_get(const char *dir, const char *key, char *val, size_t cap, lm_err *err) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, LM_STATE_FILE);
  FILE *f = fopen(path, "r");
  if (!f) return lm_errf(err, LOOM_NOT_FOUND, "no local cluster state in %s", dir);
  char line[16384];
  size_t klen = strlen(key);
  int rc = lm_errf(err, LOOM_NOT_FOUND, "%s has no '%s'", path, key);
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, key, klen) != 0 || line[klen] != '=') continue;
    char *v = line + klen + 1;
    v[strcspn(v, "\r\n")] = 0;
    if (strlen(v) >= cap) {
      rc = lm_errf(err, LOOM_INVALID_ARGUMENT, "%s: '%s' is too long", path, key);
      break;
    }
    strcpy(val, v);
    rc = 0;
    break;
  }
  fclose(f);
  return rc;
}

uint64_t lm_proc_start_time(long pid) {
  if (pid <= 0) return 0;
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%ld/stat", pid);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  char *p = strrchr(buf, ')'); /* the command name may contain spaces and parentheses */
  if (!p) return 0;
  p++;
  if (p[0] == ' ' && (p[1] == 'Z' || p[1] == 'X')) return 0; /* a zombie is as good as gone */
  /* after ")": field 3 (state) ... field 22 (starttime) is the 20th token */
  for (int field = 3; field < 22; field++) {
    p = strchr(p + 1, ' ');
    if (!p) return 0;
  }
  unsigned long long t = strtoull(p + 1, NULL, 10);
  return (uint64_t)t;
}

bool lm_proc_alive(long pid, uint64_t start) {
  if (pid <= 0) return false;
  uint64_t t = lm_proc_start_time(pid);
  if (t == 0) return false;
  return start == 0 || t == start;
}

int lm_locate_controller(const char *explicit_addr, char *out, size_t cap, lm_err *err) {
  const char *s = explicit_addr;
  if (!s || !*s) s = getenv("LOOM_CONTROLLER");
  if (s && *s) {
    if ((size_t)snprintf(out, cap, "%s", s) >= cap) return lm_errf(err, LOOM_INVALID_ARGUMENT, "address too long");
    return 0;
  }
  char dir[4096], v[64];
  LM_TRY(lm_state_dir(dir, sizeof dir, err));
  lm_err e2;
  if (lm_state_get(dir, "address", out, cap, &e2) < 0)
    return lm_errf(err, LOOM_NOT_FOUND,
                   "no controller address given, LOOM_CONTROLLER is not set and no local cluster is running "
                   "(state directory %s; start one with `loom up`)",
                   dir);
  long pid = 0;
  uint64_t start = 0;
  if (lm_state_get(dir, "supervisor_pid", v, sizeof v, &e2) == 0) pid = strtol(v, NULL, 10);
  if (lm_state_get(dir, "supervisor_start", v, sizeof v, &e2) == 0) start = strtoull(v, NULL, 10);
  if (pid > 0 && !lm_proc_alive(pid, start))
    return lm_errf(err, LOOM_NOT_FOUND,
                   "the local cluster recorded in %s is no longer running (run `loom down` to clean up, "
                   "then `loom up`)",
                   dir);
  return 0;
}

/* The first line of path into out (without the newline); length, or -1 if it cannot be read. */
static int first_line(const char *path, char *out, size_t cap) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  bool ok = fgets(out, (int)cap, f) != NULL;
  fclose(f);
  if (!ok) out[0] = 0;
  out[strcspn(out, "\r\n")] = 0;
  return (int)strlen(out);
}

int lm_locate_token(const char *addr, char *out, size_t cap, lm_err *err) {
  out[0] = 0;
  const char *s = getenv("LOOM_TOKEN");
  if (s && *s) {
    if ((size_t)snprintf(out, cap, "%s", s) >= cap) return lm_errf(err, LOOM_INVALID_ARGUMENT, "LOOM_TOKEN is too long");
    return (int)strlen(out);
  }
  s = getenv("LOOM_TOKEN_FILE");
  if (s && *s) {
    int n = first_line(s, out, cap);
    if (n < 0) return lm_errf(err, LOOM_IO, "cannot read LOOM_TOKEN_FILE %s: %s", s, strerror(errno));
    return n;
  }
  char dir[4096], recorded[LM_ADDR_MAX], path[4200];
  lm_err e2;
  if (lm_state_dir(dir, sizeof dir, &e2) < 0 || lm_state_get(dir, "address", recorded, sizeof recorded, &e2) < 0 ||
      strcmp(recorded, addr) != 0)
    return 0;
  snprintf(path, sizeof path, "%s/%s", dir, LM_TOKEN_FILE);
  int n = first_line(path, out, cap);
  return n < 0 ? 0 : n;
}
