/* State directory, lock, state files and process waits for `loom up` / `loom down`. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "cli/cluster.h"
#include "client/locate.h"
#include "net/sock.h"

/* mkdir -p with mode for the missing parts. */
static int mkdirs(const char *path, mode_t mode) {
  char tmp[4096];
  size_t n = strlen(path);
  if (n >= sizeof tmp) return -1;
  memcpy(tmp, path, n + 1);
  for (char *p = tmp + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    if (mkdir(tmp, mode) != 0 && errno != EEXIST) return -1;
    *p = '/';
  }
  if (mkdir(tmp, mode) != 0 && errno != EEXIST) return -1;
  return 0;
}

int cli_state_dir_ensure(char *dir, size_t cap, lm_err *err) {
  LM_TRY(lm_state_dir(dir, cap, err));
  bool user_chosen = getenv("LOOM_STATE_DIR") && *getenv("LOOM_STATE_DIR");
  if (mkdirs(dir, 0700) != 0)
    return lm_errf(err, LOOM_IO, "cannot create the state directory %s: %s", dir, strerror(errno));
  struct stat st;
  if (lstat(dir, &st) != 0) return lm_errf(err, LOOM_IO, "cannot use the state directory %s: %s", dir, strerror(errno));
  if (!S_ISDIR(st.st_mode)) {
    if (!(user_chosen && S_ISLNK(st.st_mode) && stat(dir, &st) == 0 && S_ISDIR(st.st_mode)))
      return lm_errf(err, LOOM_PERMISSION, "the state directory %s is not a directory", dir);
  }
  if (!user_chosen && (st.st_uid != getuid() || (st.st_mode & 022)))
    return lm_errf(err, LOOM_PERMISSION,
                   "the state directory %s is not private to this user (set LOOM_STATE_DIR to use another)", dir);
  return 0;
}

int cli_lock_state(const char *dir, lm_err *err) {
  char path[4200];
  snprintf(path, sizeof path, "%s/%s", dir, CLI_LOCK_FILE);
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return lm_errf(err, LOOM_IO, "cannot open %s: %s", path, strerror(errno));
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int e = errno;
    close(fd);
    if (e == EWOULDBLOCK) return lm_errf(err, LOOM_BUSY, "another local cluster is running from %s", dir);
    return lm_errf(err, LOOM_IO, "cannot lock %s: %s", path, strerror(e));
  }
  return fd;
}

int cli_write_file(const char *dir, const char *name, const char *text, lm_err *err) {
  char path[4200], tmp[4300];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
  FILE *f = fopen(tmp, "w");
  bool ok = f && fputs(text, f) >= 0;
  if (f && fclose(f) != 0) ok = false;
  if (!ok || rename(tmp, path) != 0) {
    int e = errno;
    unlink(tmp);
    return lm_errf(err, LOOM_IO, "cannot write %s: %s", path, strerror(e));
  }
  return 0;
}

void cli_remove_file(const char *dir, const char *name) {
  char path[4200];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  unlink(path);
}

void cli_last_line(const char *path, char *buf, size_t cap) {
  buf[0] = 0;
  FILE *f = fopen(path, "r");
  if (!f) return;
  char line[1024];
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\r\n")] = 0;
    if (line[0]) snprintf(buf, cap, "%s", line);
  }
  fclose(f);
}

bool cli_wait_gone(long pid, uint64_t start, uint64_t timeout_ms) {
  uint64_t deadline = lm_now_ms() + timeout_ms;
  for (;;) {
    if (!lm_proc_alive(pid, start)) return true;
    if (lm_now_ms() >= deadline) return false;
    struct timespec ts = {0, 20 * 1000000L};
    nanosleep(&ts, NULL);
  }
}
