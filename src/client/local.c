/* Local transfers, libloom's half (docs/protocol.md "Local transfers"): whether to try them
 * (LOOM_TRANSFER), whether a worker runs on this host, letting it read and write this process
 * where Yama asks for consent, the handshake on its local socket, and the memory ranges that hold
 * a shard of the caller's array (so the worker copies it with no staging copy here). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>
#include "client/client_int.h"

#ifndef PR_SET_PTRACER
#define PR_SET_PTRACER 0x59616d61
#endif

int lm_xfer_mode_from_env(int *mode, lm_err *err) {
  const char *v = getenv("LOOM_TRANSFER");
  if (!v || !*v || !strcmp(v, "auto")) *mode = LM_XFER_AUTO;
  else if (!strcmp(v, "tcp")) *mode = LM_XFER_TCP;
  else if (!strcmp(v, "local")) *mode = LM_XFER_LOCAL;
  else return lm_errf(err, LOOM_INVALID_ARGUMENT, "LOOM_TRANSFER is '%.40s': use auto, tcp or local", v);
  return 0;
}

/* ---- this host ---- */

static pthread_once_t g_boot_once = PTHREAD_ONCE_INIT;
static char g_boot_id[64];

static void read_boot_id(void) {
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");
  if (!f) return;
  if (fgets(g_boot_id, sizeof g_boot_id, f)) g_boot_id[strcspn(g_boot_id, "\r\n")] = 0;
  else g_boot_id[0] = 0;
  fclose(f);
}

/* Yama's ptrace_scope: -1 without Yama (the classic rule: same user), else 0-3. */
static int yama_scope(void) {
  FILE *f = fopen("/proc/sys/kernel/yama/ptrace_scope", "re");
  if (!f) return -1;
  int v = -1;
  if (fscanf(f, "%d", &v) != 1) v = -1;
  fclose(f);
  return v;
}

/* ---- consent (Yama ptrace_scope 1) ----
 * There a process may be read and written only by its ancestors and by a process it named (or
 * that one's descendants) with PR_SET_PTRACER. The worker suggests whom to name: itself, or the
 * `loom up` supervisor of all its workers. One name per process: the last one set wins, so with
 * workers of two different clusters the earlier ones are refused at their next copy and those
 * transfers go over the stream. The name is withdrawn when the last local connection closes. */

static pthread_mutex_t g_ptracer_mu = PTHREAD_MUTEX_INITIALIZER;
static uint32_t g_ptracer;   /* the pid named now (0: none) */
static int g_ptracer_users;  /* local connections that count on it */

static int ptracer_acquire(uint32_t pid, bool *held, lm_err *err) {
  *held = false;
  int scope = yama_scope();
  if (scope <= 0) return 0;
  if (scope >= 2)
    return lm_errf(err, LOOM_UNSUPPORTED, "Yama ptrace_scope is %d: no process may read another's memory", scope);
  if (!pid) return lm_errf(err, LOOM_UNSUPPORTED, "Yama ptrace_scope is 1 and the worker named no process to allow");
  pthread_mutex_lock(&g_ptracer_mu);
  int rc = 0;
  if (g_ptracer != pid) {
    if (prctl(PR_SET_PTRACER, (unsigned long)pid, 0, 0, 0) == 0) g_ptracer = pid;
    else rc = lm_errf(err, LOOM_UNSUPPORTED, "PR_SET_PTRACER %u: %s", pid, strerror(errno));
  }
  if (rc == 0) {
    g_ptracer_users++;
    *held = true;
  }
  pthread_mutex_unlock(&g_ptracer_mu);
  return rc;
}

void lm_local_ptracer_release(void) {
  pthread_mutex_lock(&g_ptracer_mu);
  if (g_ptracer_users > 0 && --g_ptracer_users == 0 && g_ptracer) {
    prctl(PR_SET_PTRACER, 0UL, 0, 0, 0);
    g_ptracer = 0;
  }
  pthread_mutex_unlock(&g_ptracer_mu);
}

/* ---- the local connection ---- */

/* /proc/PID/stat's parent pid and command name; false when PID is gone. */
static bool proc_stat(pid_t pid, pid_t *ppid, char *comm, size_t cap) {
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "re");
  if (!f) return false;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  char *open = strchr(buf, '('), *close = strrchr(buf, ')');
  int pp;
  if (!open || !close || close < open || sscanf(close + 1, " %*c %d", &pp) != 1) return false;
  snprintf(comm, cap, "%.*s", (int)(close - open - 1), open + 1);
  *ppid = pp;
  return true;
}

/* /proc/PID/status's real uid; (uid_t)-1 when unknown. */
static uid_t proc_uid(pid_t pid) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "re");
  if (!f) return (uid_t)-1;
  unsigned u = (unsigned)-1;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "Uid: %u", &u) == 1) break;
  fclose(f);
  return (uid_t)u;
}

typedef struct hello_check {
  uint32_t suggested;          /* the worker's ptracer_pid */
  bool held;                   /* out: the consent was given (and counts) */
} hello_check;

/* Connected to the local socket, before HELLO: the kernel says who listens there. It must run as
 * this user; under Yama ptrace_scope 1 the consent goes to the pid it suggests only if that is the
 * worker itself or its parent running the same program (the `loom up` supervisor). */
static int check_worker(void *arg, int fd, lm_err *err) {
  hello_check *hc = arg;
  struct ucred cr;
  socklen_t cl = sizeof cr;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) != 0 || cr.pid <= 0)
    return lm_errf(err, LOOM_UNSUPPORTED, "cannot tell which process listens on the local socket");
  if (cr.uid != geteuid())
    return lm_errf(err, LOOM_UNSUPPORTED, "the local socket belongs to uid %u, this client runs as uid %u",
                   (unsigned)cr.uid, (unsigned)geteuid());
  uint32_t pid = hc->suggested;
  if (yama_scope() == 1 && pid && pid != (uint32_t)cr.pid) {
    pid_t ppid;
    char wcomm[64], pcomm[64];
    if (!proc_stat(cr.pid, &ppid, wcomm, sizeof wcomm) || (uint32_t)ppid != pid ||
        !proc_stat((pid_t)pid, &ppid, pcomm, sizeof pcomm) || strcmp(wcomm, pcomm) != 0 ||
        proc_uid((pid_t)pid) != geteuid())
      return lm_errf(err, LOOM_UNSUPPORTED, "the worker (pid %d) suggests pid %u, neither itself nor its supervisor",
                     (int)cr.pid, pid);
  }
  return ptracer_acquire(pid, &hc->held, err);
}

int lm_local_connect(loom_client *c, lm_cconn *data, lm_cconn **out, bool *ptracer_held, lm_err *err) {
  *out = NULL;
  *ptracer_held = false;
  const lm_cconn_local *li = lm_cconn_local_info(data);
  if (!li->socket[0])
    return lm_errf(err, LOOM_UNSUPPORTED, "the worker offers no local socket (another version, or LOOM_TRANSFER=tcp there)");
  pthread_once(&g_boot_once, read_boot_id);
  if (!g_boot_id[0] || strcmp(li->boot_id, g_boot_id) != 0)
    return lm_errf(err, LOOM_UNSUPPORTED, "the worker runs on another host");
  /* The probe: random bytes the worker must read back from this process through
   * process_vm_readv, proving it may, and that the connection comes from this process. */
  uint8_t *probe = malloc(LM_LOCAL_PROBE_SIZE);
  int rc = 0;
  if (!probe) rc = lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  else if (getrandom(probe, LM_LOCAL_PROBE_SIZE, 0) != LM_LOCAL_PROBE_SIZE)
    rc = lm_errf(err, LOOM_UNSUPPORTED, "no random bytes for the probe: %s", strerror(errno));
  lm_cconn *lc = NULL;
  hello_check hc = {.suggested = li->ptracer_pid};
  if (rc == 0) {
    lm_cconn_options o = {.timeout_ms = c->timeout_ms, .intr = c->intr, .intr_arg = c->intr_arg, .name = "data", .peer = "the worker",
                          .local_probe = probe, .on_connected = check_worker, .on_connected_arg = &hc};
    o.limits.max_payload = LM_FRAME_PAYLOAD_HARD_MAX; /* stream fallbacks land in the caller's buffers */
    rc = lm_cconn_open(li->socket, &o, &lc, err);
    if (rc < 0) lm_err_prefix(err, "local socket");
  }
  if (rc == 0 && !lm_cconn_local_info(lc)->transfer) {
    const char *why = lm_cconn_local_info(lc)->refused;
    rc = lm_errf(err, LOOM_UNSUPPORTED, "the worker refused: %s", why[0] ? why : "no reason given");
  }
  free(probe);
  if (rc < 0) {
    lm_cconn_close(lc);
    if (hc.held) lm_local_ptracer_release();
    return rc;
  }
  *ptracer_held = hc.held;
  lm_cconn_set_peer_access(lc);
  *out = lc;
  return 0;
}

/* ---- ranges ---- */

uint64_t lm_region_runs(int rank, const int64_t *dims, const int64_t *sd, size_t esize, uint64_t *run_bytes) {
  int k = rank - 1; /* the runs span dimensions k.. : those after k are whole */
  while (k >= 0 && sd[k] == dims[k]) k--;
  uint64_t run = esize, nruns = 1;
  if (k < 0) {
    for (int d = 0; d < rank; d++) run *= (uint64_t)dims[d];
  } else {
    run *= (uint64_t)sd[k];
    for (int d = k + 1; d < rank; d++) run *= (uint64_t)dims[d];
    for (int d = 0; d < k; d++) nruns *= (uint64_t)sd[d];
  }
  *run_bytes = run;
  return run ? nruns : 0;
}

void lm_region_ranges(const void *base, int rank, const int64_t *dims, const int64_t *off, const int64_t *sd,
                      size_t esize, uint64_t *words) {
  uint64_t run;
  uint64_t nruns = lm_region_runs(rank, dims, sd, esize, &run);
  int k = rank - 1;
  while (k >= 0 && sd[k] == dims[k]) k--;
  int64_t stride[LOOM_MAX_RANK + 1]; /* elements */
  stride[rank > 0 ? rank - 1 : 0] = 1;
  for (int d = rank - 2; d >= 0; d--) stride[d] = stride[d + 1] * dims[d + 1];
  int64_t idx[LOOM_MAX_RANK] = {0}; /* over dimensions 0..k-1 of the region */
  for (uint64_t r = 0; r < nruns; r++) {
    int64_t first = 0;
    for (int d = 0; d < k; d++) first += (off[d] + idx[d]) * stride[d];
    if (k >= 0) first += off[k] * stride[k];
    words[2 * r] = (uint64_t)(uintptr_t)((const uint8_t *)base + (uint64_t)first * esize);
    words[2 * r + 1] = run;
    for (int d = k - 1; d >= 0; d--) { /* next index, row-major */
      if (++idx[d] < sd[d]) break;
      idx[d] = 0;
    }
  }
}
