/* `loom up`: a local cluster on this machine. This process (or, with --detach, a forked copy of
 * it in its own session) supervises one controller and N workers, which are re-executions of
 * this same binary: it starts them, waits until every device has registered, records the
 * cluster in the state directory, watches the children, and on Ctrl-C / SIGTERM / `loom down`
 * stops the workers, then the controller, and leaves no process behind. */
#define _GNU_SOURCE /* pipe2 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pwd.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include "cli/cli.h"
#include "cli/cluster.h"
#include "cli/util.h"
#include "client/cconn.h"
#include "client/locate.h"
#include "net/auth.h"

static const char g_usage[] =
    "usage: loom up [--workers N] [--devices-per-worker D] [--slices S] [--device-memory BYTES] [--detach]\n"
    "               [--proxy-port PORT] [--http HOST:PORT] [--backend interp|pjrt] [--standby N]\n"
    "               [--recover-wait MS] [--snapshot-every N] [--snapshot-interval MS] [--state DIR]\n"
    "\n"
    "Starts a local cluster: one controller and N workers with D CPU devices each, spread over S\n"
    "slices; waits until every device has registered and prints the controller's address. An IFRT\n"
    "proxy (`loom proxy`) beside it serves unmodified JAX programs (JAX_PLATFORMS=proxy); the\n"
    "environment variables to use are printed.\n"
    "In the foreground, Ctrl-C stops the cluster; with --detach it keeps running and `loom down`\n"
    "stops it. Client commands (`loom devices`, `loom status`) find it without being told.\n"
    "\n"
    "options:\n"
    "  --workers N               worker processes (default 2)\n"
    "  --devices-per-worker D    CPU devices per worker (default 4)\n"
    "  --slices S                slices the workers are spread over, in blocks (default 1)\n"
    "  --standby N               also start N standby workers (spare capacity that replaces a lost\n"
    "                            worker: docs/elastic.md), in the last slice (default 0)\n"
    "  --recover-wait MS         a lost worker with no standby: its launches wait this long for a new\n"
    "                            worker (the controller's --recover-wait; default 0: they fail)\n"
    "  --snapshot-every N        with standbys or --recover-wait: snapshot launch outputs that only a replay\n"
    "                            could restore every N launches (the controller's; default 100, 0: not by count)\n"
    "  --snapshot-interval MS    ... or every MS milliseconds (the controller's; default 10000, 0: not by time)\n"
    "  --state DIR               the controller keeps a journal in DIR (its --state: docs/durability.md);\n"
    "                            when the controller dies it is started again on the same address and\n"
    "                            restores from the journal, while workers, clients and the proxy wait\n"
    "                            (at most 5 restarts a minute). Without it, a dead controller stops\n"
    "                            the cluster\n"
    "  --device-memory BYTES     memory capacity of each device, e.g. 2G or 512MiB (default 2GiB)\n"
    "  --detach                  start the cluster in the background and return\n"
    "  --listen HOST:PORT        the controller's address (default 127.0.0.1:0, any free port)\n"
    "  --timeout SECONDS         how long to wait for the cluster to come up (default 60)\n"
    "  --backend interp|pjrt     who computes on the workers' devices: Loom's executor (default) or a\n"
    "                            PJRT plugin (docs/pjrt.md); --pjrt-plugin PATH, --pjrt-option K=V as\n"
    "                            for `loom worker`\n"
    "  --proxy-port PORT         the IFRT proxy's port on 127.0.0.1 (default $LOOM_PROXY_PORT, else\n"
    "                            29000, skipped with a note when taken); 0 starts no proxy\n"
    "  --http HOST:PORT          the controller's HTTP port: Prometheus /metrics, /healthz, /readyz\n"
    "                            (default 127.0.0.1:0, any free port; printed once up); none: no HTTP\n"
    "  -h, --help                show this help\n"
    "\n"
    "State and logs go to $LOOM_STATE_DIR, else $XDG_RUNTIME_DIR/loom, else /tmp/loom-$UID.\n"
    "Authentication is on: each `loom up` makes a new cluster secret (`secret`, which the workers\n"
    "prove they hold) and a new client token for you (`token`; clients of this cluster use it\n"
    "without being told), both readable only by you; `loom token` makes tokens for others. You are\n"
    "the cluster's admin (`loom controller --admins`): you may drain workers and save checkpoints\n"
    "into directories you name (IFRT persistence).\n";

#define STOP_GRACE_MS 10000 /* how long each child may take to stop after SIGTERM */

typedef struct child {
  pid_t pid;
  uint64_t start;        /* /proc start time, to recognise it later */
  char name[32];         /* "controller", "worker 0" */
  char log[4200];
  bool running;
  bool reported;         /* its exit has been reported */
  bool stopping;         /* we asked it to stop */
  bool killed;           /* we had to SIGKILL it */
  bool append;           /* a restart: its log goes on after the last run's */
  int status;            /* waitpid status once it exited */
} child;

typedef struct sup {
  const char *cmd;
  char dir[4096];
  char self[4096];       /* this binary */
  uint32_t workers, dpw, slices;
  uint32_t nstandby;     /* the last nstandby of the workers are standbys */
  const char *recover_wait; /* the controller's --recover-wait, or NULL */
  const char *snap_every, *snap_interval; /* its --snapshot-every and --snapshot-interval, or NULL */
  const char *state;     /* the controller's --state (its journal), or NULL */
  uint64_t restarts[5];  /* when the controller was last restarted (ms), oldest first */
  uint64_t mem, timeout_ms;
  const char *listen;
  const char *http;      /* the controller's --http; NULL: none */
  char http_addr[LM_ADDR_MAX];
  bool detach;
  int notify_fd;         /* --detach: the waiting parent's pipe; -1 otherwise */
  child *kids;           /* [0] controller, [1 + i] worker i, then the proxy if any */
  uint32_t proxy_port;   /* 0: no proxy */
  bool proxy_explicit;   /* the port was asked for (--proxy-port, $LOOM_PROXY_PORT): failing to get it is an error */
  char proxy_note[256];  /* why the default proxy was not started */
  char proxy_addr[LM_ADDR_MAX];
  size_t nkids;
  char addr[LM_ADDR_MAX];
  sigset_t sigs;         /* INT, TERM, HUP, CHLD: blocked, taken with sigtimedwait */
  int stop_signal;       /* the signal that asked us to stop, 0 if none */
  char secret[4200];     /* the cluster secret's file */
  char tokens[4200];     /* the controller's token store */
  char token[LM_TOKEN_STR_LEN + 1]; /* the local user's token (also in the state dir's `token`) */
  char user[LM_TOKEN_USER_MAX + 1]; /* the local user: the cluster's admin (--admins) */
  const char *backend, *pjrt_plugin; /* passed to the workers as they are */
  const char **pjrt_options;
  int npjrt_options;
} sup;

/* Foreground: stderr. Detached: stderr is up.log. */
static void say(sup *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(sup *s, const char *fmt, ...) {
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (s->detach) {
    time_t t = time(NULL);
    struct tm tm;
    char ts[32];
    strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", gmtime_r(&t, &tm));
    fprintf(stderr, "%sZ loom up: %s\n", ts, msg);
  } else {
    fprintf(stderr, "loom up: %s\n", msg);
  }
}

static void describe_exit(int st, char *buf, size_t cap) {
  if (WIFEXITED(st)) snprintf(buf, cap, "exited with status %d", WEXITSTATUS(st));
  else if (WIFSIGNALED(st)) snprintf(buf, cap, "was killed by signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
  else snprintf(buf, cap, "stopped (status 0x%x)", st);
}

static void reap(sup *s) {
  int st;
  pid_t pid;
  while ((pid = waitpid(-1, &st, WNOHANG)) > 0)
    for (size_t i = 0; i < s->nkids; i++)
      if (s->kids[i].pid == pid) {
        s->kids[i].running = false;
        s->kids[i].status = st;
      }
}

/* Sleeps up to ms, handling SIGCHLD; returns the stop signal (INT/TERM/HUP) if one came. */
static int sup_wait(sup *s, long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  int sig = sigtimedwait(&s->sigs, NULL, &ts);
  reap(s);
  if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) {
    if (!s->stop_signal) s->stop_signal = sig;
    return sig;
  }
  return 0;
}

/* The client connection's interrupt hook: a stop signal is pending. */
static int stop_pending(void *arg) {
  sup *s = arg;
  sigset_t p;
  sigpending(&p);
  if (sigismember(&p, SIGINT) || sigismember(&p, SIGTERM) || sigismember(&p, SIGHUP)) return 1;
  return s->stop_signal != 0;
}

/* Starts argv (argv[0] is ignored: the binary is s->self) with its output in c->log. */
static int spawn(sup *s, child *c, char **argv, lm_err *err) {
  int logfd = open(c->log, O_WRONLY | O_CREAT | (c->append ? O_APPEND : O_TRUNC) | O_CLOEXEC, 0600);
  int nullfd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (logfd < 0 || nullfd < 0) {
    int e = errno;
    if (logfd >= 0) close(logfd);
    if (nullfd >= 0) close(nullfd);
    return lm_errf(err, LOOM_IO, "cannot open %s: %s", c->log, strerror(e));
  }
  pid_t parent = getpid();
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) { /* only async-signal-safe calls until exec */
    setpgid(0, 0);                      /* Ctrl-C goes to the supervisor, which stops us in order */
    prctl(PR_SET_PDEATHSIG, SIGTERM);   /* and if the supervisor dies, we go too */
    if (getppid() != parent) _exit(127);
    dup2(nullfd, 0);
    dup2(logfd, 1);
    dup2(logfd, 2);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    signal(SIGPIPE, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    execv(s->self, argv);
    _exit(127);
  }
  int e = errno;
  close(logfd);
  close(nullfd);
  if (pid < 0) return lm_errf(err, LOOM_IO, "cannot start the %s: %s", c->name, strerror(e));
  c->pid = pid;
  c->running = true;
  c->start = lm_proc_start_time(pid);
  return 0;
}

static int fail_child(sup *s, child *c, const char *when, lm_err *err) {
  char how[128], last[400];
  describe_exit(c->status, how, sizeof how);
  cli_last_line(c->log, last, sizeof last);
  c->reported = true;
  return lm_errf(err, LOOM_IO, "the %s %s %s%s%s (log: %s)", c->name, how, when, last[0] ? ": " : "", last, c->log);
}

/* Authentication for the local cluster: a fresh cluster secret, and a fresh token for the local
 * user (replacing the one the last `loom up` made; tokens made with `loom token create` stay),
 * all mode 0600 in the state directory. */
static int make_credentials(sup *s, lm_err *err) {
  snprintf(s->secret, sizeof s->secret, "%s/%s", s->dir, LM_SECRET_FILE);
  snprintf(s->tokens, sizeof s->tokens, "%s/%s", s->dir, LM_TOKENS_FILE);
  LM_TRY(lm_auth_secret_create(s->secret, err));
  char *user = s->user;
  struct passwd *pw = getpwuid(getuid());
  snprintf(user, sizeof s->user, "%s", pw && pw->pw_name ? pw->pw_name : "");
  if (!lm_auth_user_ok(user)) snprintf(user, sizeof s->user, "uid%ld", (long)getuid());
  int lk = lm_tokens_lock(s->tokens, err);
  if (lk < 0) return lk;
  lm_token_store st;
  int rc = lm_tokens_load(s->tokens, &st, err);
  if (rc == 0) {
    size_t k = 0;
    for (size_t i = 0; i < st.n; i++)
      if (strcmp(st.v[i].origin, "up") != 0) st.v[k++] = st.v[i];
    st.n = k;
    rc = lm_tokens_add(&st, user, (int64_t)time(NULL), 0, "up", s->token, err);
    if (rc == 0) rc = lm_tokens_save(s->tokens, &st, err);
    lm_tokens_free(&st);
  }
  close(lk);
  if (rc == 0) {
    char path[4200], line[LM_TOKEN_STR_LEN + 2];
    snprintf(path, sizeof path, "%s/%s", s->dir, LM_TOKEN_FILE);
    snprintf(line, sizeof line, "%s\n", s->token);
    rc = lm_auth_write_private(path, line, err);
  }
  return rc;
}

/* Whether 127.0.0.1:port can be listened on now. */
static bool port_free(uint32_t port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  bool ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
  close(fd);
  return ok;
}

/* Writes the cluster's record (LM_STATE_FILE) that `loom down`, `loom status` and clients read. */
static int update_state_file(sup *s, lm_err *err) {
  char state[16384], pids[8192] = ""; /* up to 256 workers */
  size_t off = 0;
  for (size_t i = 1; i < 1 + (size_t)s->workers; i++) {
    int k = snprintf(pids + off, sizeof pids - off, "%s%d:%llu", i > 1 ? "," : "", (int)s->kids[i].pid,
                     (unsigned long long)s->kids[i].start);
    if (k > 0 && (size_t)k < sizeof pids - off) off += (size_t)k;
  }
  snprintf(state, sizeof state,
           "address=%s\nsupervisor_pid=%ld\nsupervisor_start=%llu\ncontroller_pid=%d\ncontroller_start=%llu\n"
           "workers=%s\ndevices=%u\nlogs=%s\nstarted=%lld\nproxy=%s\nhttp=%s\n",
           s->addr, (long)getpid(), (unsigned long long)lm_proc_start_time(getpid()), (int)s->kids[0].pid,
           (unsigned long long)s->kids[0].start, pids, (s->workers - s->nstandby) * s->dpw, s->dir, (long long)time(NULL),
           s->proxy_addr, s->http_addr);
  return cli_write_file(s->dir, LM_STATE_FILE, state, err);
}

/* Starts the controller listening on `listen`, its HTTP port on `http` ("" for none). */
static int spawn_controller(sup *s, char *listen, char *http, lm_err *err) {
  char addrfile[4200], httpfile[4200];
  snprintf(addrfile, sizeof addrfile, "%s/controller.addr", s->dir);
  snprintf(httpfile, sizeof httpfile, "%s/http.addr", s->dir);
  char *cargv[] = {"loom", "controller", "--listen", listen, "--address-file", addrfile, "--secret-file", s->secret,
                   "--tokens-file", s->tokens, "--admins", s->user, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
                   NULL, NULL, NULL, NULL, NULL, NULL, NULL};
  int na = 12;
  if (http[0]) cargv[na++] = "--http", cargv[na++] = http, cargv[na++] = "--http-address-file", cargv[na++] = httpfile;
  if (s->recover_wait) cargv[na++] = "--recover-wait", cargv[na++] = (char *)s->recover_wait;
  if (s->state) cargv[na++] = "--state", cargv[na++] = (char *)s->state;
  if (s->snap_every) cargv[na++] = "--snapshot-every", cargv[na++] = (char *)s->snap_every;
  if (s->snap_interval) cargv[na++] = "--snapshot-interval", cargv[na++] = (char *)s->snap_interval;
  return spawn(s, &s->kids[0], cargv, err);
}

/* --state: the controller died; start it again on the address it had (workers and clients
 * reconnect there) unless it died 5 times within a minute. Returns 0 if restarted. */
static int restart_controller(sup *s) {
  uint64_t now = lm_now_ms();
  if (s->restarts[0] && now - s->restarts[0] < 60000) {
    say(s, "the controller died 5 times within a minute; not restarting it again");
    return -1;
  }
  memmove(s->restarts, s->restarts + 1, sizeof s->restarts - sizeof s->restarts[0]);
  s->restarts[4] = now;
  char listen[LM_ADDR_MAX], http[LM_ADDR_MAX];
  snprintf(listen, sizeof listen, "%s", s->addr);
  snprintf(http, sizeof http, "%s", s->http_addr);
  child *c = &s->kids[0];
  c->append = true;
  lm_err err;
  if (spawn_controller(s, listen, http, &err) < 0) {
    say(s, "restarting the controller: %s", err.msg);
    return -1;
  }
  c->reported = false;
  if (update_state_file(s, &err) < 0) say(s, "%s", err.msg);
  say(s, "restarted the controller (pid %d) on %s from its journal in %s", (int)c->pid, s->addr, s->state);
  return 0;
}

/* Starts the controller and the workers and waits until every device has registered. */
static int startup(sup *s, lm_err *err) {
  uint64_t deadline = lm_now_ms() + s->timeout_ms;
  char addrfile[4200], listen[LM_ADDR_MAX], num[3][32];
  snprintf(addrfile, sizeof addrfile, "%s/controller.addr", s->dir);
  snprintf(listen, sizeof listen, "%s", s->listen);
  cli_remove_file(s->dir, "controller.addr");
  LM_TRY(make_credentials(s, err));
  child *ctl = &s->kids[0];
  char httpfile[4200], http[LM_ADDR_MAX];
  snprintf(httpfile, sizeof httpfile, "%s/http.addr", s->dir);
  snprintf(http, sizeof http, "%s", s->http ? s->http : "");
  cli_remove_file(s->dir, "http.addr");
  LM_TRY(spawn_controller(s, listen, http, err));
  for (;;) { /* the controller writes its address once it listens */
    FILE *f = fopen(addrfile, "r");
    if (f) {
      bool ok = fgets(s->addr, sizeof s->addr, f) != NULL;
      fclose(f);
      s->addr[strcspn(s->addr, "\r\n")] = 0;
      if (ok && s->addr[0] && !s->http) break;
      f = ok && s->addr[0] ? fopen(httpfile, "r") : NULL; /* written just after the controller's */
      if (f) {
        ok = fgets(s->http_addr, sizeof s->http_addr, f) != NULL;
        fclose(f);
        s->http_addr[strcspn(s->http_addr, "\r\n")] = 0;
        if (ok && s->http_addr[0]) break;
      }
    }
    if (!ctl->running) return fail_child(s, ctl, "during startup", err);
    if (s->stop_signal) return lm_errf(err, LOOM_CANCELLED, "interrupted");
    if (lm_now_ms() > deadline)
      return lm_errf(err, LOOM_TIMEOUT, "timed out after %llu s waiting for the controller to listen (log: %s)",
                     (unsigned long long)(s->timeout_ms / 1000), ctl->log);
    sup_wait(s, 20);
  }
  snprintf(num[0], sizeof num[0], "%u", s->dpw);
  snprintf(num[1], sizeof num[1], "%llu", (unsigned long long)s->mem);
  uint32_t regular = s->workers - s->nstandby;
  for (uint32_t i = 0; i < s->workers; i++) {
    char slice[32];
    uint32_t r = i < regular ? i : regular - 1; /* standbys: the last slice */
    snprintf(slice, sizeof slice, "slice-%u", (uint32_t)((uint64_t)r * s->slices / regular));
    char *wargv[24 + 2 * 64] = {"loom", "worker", "--controller", s->addr, "--devices", num[0], "--device-memory",
                                num[1], "--slice", slice, "--secret-file", s->secret};
    int k = 12;
    if (s->backend) wargv[k++] = "--backend", wargv[k++] = (char *)s->backend;
    if (s->pjrt_plugin) wargv[k++] = "--pjrt-plugin", wargv[k++] = (char *)s->pjrt_plugin;
    for (int j = 0; j < s->npjrt_options; j++) wargv[k++] = "--pjrt-option", wargv[k++] = (char *)s->pjrt_options[j];
    if (i >= regular) wargv[k++] = "--standby";
    wargv[k] = NULL;
    LM_TRY(spawn(s, &s->kids[1 + i], wargv, err));
  }
  /* Watch the registrations through an ordinary client session. */
  uint32_t want = regular * s->dpw;
  int64_t left = (int64_t)(deadline - lm_now_ms());
  lm_cconn_options co = {.timeout_ms = left > 0 ? left : 1, .intr = stop_pending, .intr_arg = s, .name = "loom up",
                         .auth_token = s->token, .auth_token_len = strlen(s->token)};
  lm_cconn *c;
  int rc = lm_cconn_open(s->addr, &co, &c, err);
  if (rc < 0) return rc;
  uint32_t have = 0;
  for (;;) {
    Lmw__ListDevices req = LMW__LIST_DEVICES__INIT;
    ProtobufCMessage *m;
    rc = lm_cconn_call(c, LM_MSG_LIST_DEVICES, &req.base, LM_MSG_LIST_DEVICES_REPLY, 10000, stop_pending, s, &m, err);
    if (rc < 0) break;
    const Lmw__ListDevicesReply *r = (const Lmw__ListDevicesReply *)m;
    have = 0;
    char sick[400] = "";
    for (size_t i = 0; i < r->n_devices; i++) {
      have += r->devices[i]->healthy ? 1 : 0;
      if (!r->devices[i]->healthy && !sick[0] && r->devices[i]->health_reason && *r->devices[i]->health_reason)
        snprintf(sick, sizeof sick, "worker %u's devices are unhealthy: %.300s", r->devices[i]->worker_id,
                 r->devices[i]->health_reason);
    }
    lm_msg_free(m);
    if (sick[0]) {
      rc = lm_errf(err, LOOM_WORKER_LOST, "%s (logs in %s)", sick, s->dir);
      break;
    }
    if (have >= want && s->nstandby) { /* and the standbys */
      Lmw__ClusterStatus cs = LMW__CLUSTER_STATUS__INIT;
      uint32_t standbys = 0;
      if (lm_cconn_call(c, LM_MSG_CLUSTER_STATUS, &cs.base, LM_MSG_CLUSTER_STATUS_REPLY, 10000, stop_pending, s, &m,
                        err) == 0) {
        const Lmw__ClusterStatusReply *st = (const Lmw__ClusterStatusReply *)m;
        for (size_t i = 0; i < st->n_workers; i++) standbys += st->workers[i]->standby && st->workers[i]->alive;
        lm_msg_free(m);
      }
      if (standbys >= s->nstandby) break;
    } else if (have >= want) {
      break;
    }
    for (size_t i = 0; i < 1 + (size_t)s->workers; i++)
      if (!s->kids[i].running) {
        rc = fail_child(s, &s->kids[i], "during startup", err);
        break;
      }
    if (rc < 0) break;
    if (s->stop_signal || stop_pending(s)) {
      rc = lm_errf(err, LOOM_CANCELLED, "interrupted");
      break;
    }
    if (lm_now_ms() > deadline) {
      rc = lm_errf(err, LOOM_TIMEOUT, "timed out after %llu s waiting for %u devices to register (%u did; logs in %s)",
                   (unsigned long long)(s->timeout_ms / 1000), want, have, s->dir);
      break;
    }
    sup_wait(s, 50);
  }
  lm_cconn_close(c);
  if (rc < 0 || !s->proxy_port) return rc;
  if (!s->proxy_explicit && !port_free(s->proxy_port)) {
    /* the default port is taken (another cluster's proxy, say): run without one and say so */
    snprintf(s->proxy_note, sizeof s->proxy_note,
             "IFRT proxy: not started, port %u is in use (--proxy-port PORT starts one elsewhere)\n", s->proxy_port);
    s->kids[s->nkids - 1].reported = true; /* never started: nothing to watch */
    return 0;
  }
  /* The IFRT proxy, a client of the controller like any other. */
  char pfile[4200], plisten[64];
  snprintf(pfile, sizeof pfile, "%s/proxy.addr", s->dir);
  snprintf(plisten, sizeof plisten, "127.0.0.1:%u", s->proxy_port);
  cli_remove_file(s->dir, "proxy.addr");
  child *px = &s->kids[s->nkids - 1];
  char *pargv[] = {"loom", "proxy", "--listen", plisten, "--controller", s->addr, "--address-file", pfile, NULL};
  LM_TRY(spawn(s, px, pargv, err));
  for (;;) {
    FILE *f = fopen(pfile, "r");
    if (f) {
      bool ok = fgets(s->proxy_addr, sizeof s->proxy_addr, f) != NULL;
      fclose(f);
      s->proxy_addr[strcspn(s->proxy_addr, "\r\n")] = 0;
      if (ok && s->proxy_addr[0]) return 0;
    }
    if (!px->running) {
      fail_child(s, px, "during startup", err);
      return lm_err_prefix(err, "the IFRT proxy could not start on port %u (--proxy-port picks another, 0 none)",
                           s->proxy_port);
    }
    if (s->stop_signal) return lm_errf(err, LOOM_CANCELLED, "interrupted");
    if (lm_now_ms() > deadline)
      return lm_errf(err, LOOM_TIMEOUT, "timed out waiting for the IFRT proxy to listen (log: %s)", px->log);
    sup_wait(s, 20);
  }
}

/* Stops the workers, then the controller; returns the number of problems it reported. */
static int stop_all(sup *s, char *problems, size_t cap) {
  int nproblems = 0;
  size_t off = 0;
  problems[0] = 0;
  for (int phase = 0; phase < 2; phase++) { /* phase 0: workers, 1: the controller */
    size_t lo = phase == 0 ? 1 : 0, hi = phase == 0 ? s->nkids : 1;
    for (size_t i = lo; i < hi; i++)
      if (s->kids[i].running) {
        s->kids[i].stopping = true;
        kill(s->kids[i].pid, SIGTERM);
      }
    uint64_t deadline = lm_now_ms() + STOP_GRACE_MS;
    bool kill_now = false;
    for (;;) {
      bool any = false;
      for (size_t i = lo; i < hi; i++) any |= s->kids[i].running;
      if (!any) break;
      if (kill_now || lm_now_ms() > deadline) {
        for (size_t i = lo; i < hi; i++)
          if (s->kids[i].running) {
            s->kids[i].killed = true;
            kill(s->kids[i].pid, SIGKILL);
            int st;
            if (waitpid(s->kids[i].pid, &st, 0) == s->kids[i].pid) {
              s->kids[i].running = false;
              s->kids[i].status = st;
            }
          }
        break;
      }
      int sig = sup_wait(s, 50);
      if (sig == SIGINT && s->stop_signal == SIGINT && !s->detach) kill_now = true; /* a second Ctrl-C */
    }
  }
  for (size_t i = 0; i < s->nkids; i++) {
    child *c = &s->kids[i];
    if (!c->stopping || c->reported) continue;
    if (c->killed || !(WIFEXITED(c->status) && WEXITSTATUS(c->status) == 0)) {
      char how[128];
      if (c->killed) snprintf(how, sizeof how, "did not stop within %d s and was killed", STOP_GRACE_MS / 1000);
      else describe_exit(c->status, how, sizeof how);
      int k = snprintf(problems + off, cap - off, "the %s %s while stopping (log: %s)\n", c->name, how, c->log);
      if (k > 0 && (size_t)k < cap - off) off += (size_t)k;
      nproblems++;
    }
  }
  return nproblems;
}

static void notify(sup *s, bool ok, const char *text) {
  if (s->notify_fd < 0) return;
  char buf[8200];
  int n = snprintf(buf, sizeof buf, "%d\n%s", ok ? 0 : 1, text);
  if (n > 0) {
    ssize_t w = write(s->notify_fd, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
    (void)w;
  }
  close(s->notify_fd);
  s->notify_fd = -1;
}

static int supervise(sup *s) {
  lm_err err;
  char text[8192];
  int rc = startup(s, &err);
  if (rc == 0) {
    char mem[32];
    cli_remove_file(s->dir, CLI_STOP_FILE);
    rc = update_state_file(s, &err);
    cli_format_size(s->mem, mem, sizeof mem);
    char standby_note[64] = "";
    if (s->nstandby)
      snprintf(standby_note, sizeof standby_note, ", and %u standby worker%s", s->nstandby, s->nstandby == 1 ? "" : "s");
    char ptext[1024] = "";
    snprintf(ptext, sizeof ptext, "%s", s->proxy_note);
    if (s->proxy_addr[0])
      snprintf(ptext, sizeof ptext,
               "IFRT proxy: %s; run unmodified JAX programs on the cluster with:\n"
               "  export JAX_PLATFORMS=proxy\n"
               "  export JAX_BACKEND_TARGET=grpc://%s\n"
               "  export IFRT_PROXY_USE_INSECURE_GRPC_CREDENTIALS=true\n",
               s->proxy_addr, s->proxy_addr);
    snprintf(text, sizeof text,
             "local cluster ready: %u devices on %u worker%s (%u slice%s), %s of memory each%s\n"
             "controller: %s\n"
             "%s%s%s"
             "%s"
             "logs: %s\n"
             "%s\n",
             (s->workers - s->nstandby) * s->dpw, s->workers - s->nstandby, s->workers - s->nstandby == 1 ? "" : "s",
             s->slices, s->slices == 1 ? "" : "s", mem, standby_note, s->addr, s->http_addr[0] ? "metrics: http://" : "",
             s->http_addr, s->http_addr[0] ? "/metrics and the dashboard / (token: the state directory's `token`, as 'Authorization: "
                                             "Bearer TOKEN', or the password a browser asks for; health: /healthz, "
                                             "/readyz)\n" : "", ptext, s->dir,
             s->detach ? "stop it with: loom down" : "Ctrl-C stops it.");
  }
  if (rc < 0) {
    char problems[2048];
    stop_all(s, problems, sizeof problems);
    cli_remove_file(s->dir, "controller.addr");
    snprintf(text, sizeof text, "loom up: %s\n", err.msg);
    if (s->detach) {
      say(s, "%s", err.msg);
      notify(s, false, text);
    } else {
      fputs(text, stderr);
    }
    return 1;
  }
  if (s->detach) {
    say(s, "%s", text);
    notify(s, true, text);
  } else {
    fputs(text, stdout);
    fflush(stdout);
  }

  /* Running: watch the children until asked to stop or the controller dies. */
  int exit_code = 0;
  while (!s->stop_signal) {
    sup_wait(s, 1000);
    for (size_t i = 0; i < s->nkids; i++) {
      child *c = &s->kids[i];
      if (c->running || c->reported) continue;
      char how[128], last[400];
      describe_exit(c->status, how, sizeof how);
      cli_last_line(c->log, last, sizeof last);
      c->reported = true;
      if (i == 0) {
        if (s->state) {
          say(s, "the controller %s%s%s (log: %s)", how, last[0] ? ": " : "", last, c->log);
          if (restart_controller(s) == 0) continue;
        }
        say(s, "the controller %s%s%s; stopping the cluster (log: %s)", how, last[0] ? ": " : "", last, c->log);
        exit_code = 1;
      } else if (s->proxy_port && i == s->nkids - 1) {
        say(s, "the IFRT proxy (pid %d) %s; JAX clients cannot connect now (log: %s)", (int)c->pid, how, c->log);
      } else {
        say(s, "the %s (pid %d) %s; its devices are unhealthy now, unless a standby took them over (log: %s)",
            c->name, (int)c->pid, how, c->log);
      }
    }
    if (exit_code) break;
  }
  if (s->stop_signal) say(s, "stopping (%s)", strsignal(s->stop_signal));
  char problems[4096];
  int np = stop_all(s, problems, sizeof problems);
  cli_remove_file(s->dir, LM_STATE_FILE);
  cli_remove_file(s->dir, "controller.addr");
  cli_remove_file(s->dir, "proxy.addr");
  lm_err e2;
  cli_write_file(s->dir, CLI_STOP_FILE, np ? problems : "ok\n", &e2);
  if (np) {
    say(s, "stopped, with problems:\n%s", problems);
    return 1;
  }
  say(s, "stopped the controller and %u worker%s%s", s->workers, s->workers == 1 ? "" : "s",
      s->proxy_addr[0] ? " and the IFRT proxy" : "");
  return exit_code;
}

int cmd_up(int argc, char **argv) {
  const char *cmd = "up";
  sup s = {.cmd = cmd, .workers = 2, .dpw = 4, .slices = 1, .mem = (uint64_t)2 << 30, .timeout_ms = 60000,
           .listen = "127.0.0.1:0", .http = "127.0.0.1:0", .notify_fd = -1};
  enum { O_WORKERS = 1, O_DPW, O_SLICES, O_MEM, O_DETACH, O_LISTEN, O_TIMEOUT, O_PROXY, O_BACKEND, O_PLUGIN, O_POPT, O_HTTP,
         O_STANDBY, O_RECWAIT, O_STATE, O_SNAPEVERY, O_SNAPINT };
  const char *popts[64];
  static char state_abs[4096];
  s.pjrt_options = popts;
  static const struct option opts[] = {
      {"workers", required_argument, 0, O_WORKERS},
      {"devices-per-worker", required_argument, 0, O_DPW},
      {"slices", required_argument, 0, O_SLICES},
      {"device-memory", required_argument, 0, O_MEM},
      {"detach", no_argument, 0, O_DETACH},
      {"listen", required_argument, 0, O_LISTEN},
      {"timeout", required_argument, 0, O_TIMEOUT},
      {"proxy-port", required_argument, 0, O_PROXY},
      {"http", required_argument, 0, O_HTTP},
      {"backend", required_argument, 0, O_BACKEND},
      {"pjrt-plugin", required_argument, 0, O_PLUGIN},
      {"pjrt-option", required_argument, 0, O_POPT},
      {"standby", required_argument, 0, O_STANDBY},
      {"recover-wait", required_argument, 0, O_RECWAIT},
      {"snapshot-every", required_argument, 0, O_SNAPEVERY},
      {"snapshot-interval", required_argument, 0, O_SNAPINT},
      {"state", required_argument, 0, O_STATE},
      {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0},
  };
  cli_options o = {.cmd = cmd, .usage = g_usage, .argc = argc, .argv = argv, .opts = opts};
  int ch;
  uint64_t v;
  s.proxy_port = 29000;
  const char *envport = getenv("LOOM_PROXY_PORT");
  if (envport && *envport) {
    if (cli_parse_u64(cmd, "$LOOM_PROXY_PORT", envport, 0, 65535, &v) < 0) return 2;
    s.proxy_port = (uint32_t)v;
    s.proxy_explicit = true;
  }
  while ((ch = cli_next_option(&o)) > 0) {
    switch (ch) {
    case O_PROXY:
      if (cli_parse_u64(cmd, "--proxy-port", optarg, 0, 65535, &v) < 0) return 2;
      s.proxy_port = (uint32_t)v;
      s.proxy_explicit = true;
      break;
    case O_WORKERS:
      if (cli_parse_u64(cmd, "--workers", optarg, 1, 256, &v) < 0) return 2;
      s.workers = (uint32_t)v;
      break;
    case O_DPW:
      if (cli_parse_u64(cmd, "--devices-per-worker", optarg, 1, 1024, &v) < 0) return 2;
      s.dpw = (uint32_t)v;
      break;
    case O_SLICES:
      if (cli_parse_u64(cmd, "--slices", optarg, 1, 256, &v) < 0) return 2;
      s.slices = (uint32_t)v;
      break;
    case O_MEM:
      if (cli_parse_size(cmd, "--device-memory", optarg, &s.mem) < 0) return 2;
      break;
    case O_BACKEND:
      if (strcmp(optarg, "interp") && strcmp(optarg, "pjrt"))
        return cli_usage_error(cmd, "--backend is interp or pjrt, not '%s'", optarg);
      s.backend = optarg;
      break;
    case O_PLUGIN: s.pjrt_plugin = optarg; break;
    case O_POPT:
      if (!strchr(optarg, '=')) return cli_usage_error(cmd, "--pjrt-option wants NAME=VALUE, not '%s'", optarg);
      if (s.npjrt_options == 64) return cli_usage_error(cmd, "more than 64 --pjrt-option");
      popts[s.npjrt_options++] = optarg;
      break;
    case O_DETACH: s.detach = true; break;
    case O_STATE:
      if (cli_absolute_path(cmd, "--state", optarg, state_abs, sizeof state_abs) < 0) return 2;
      s.state = state_abs;
      break;
    case O_LISTEN: s.listen = optarg; break;
    case O_HTTP: s.http = strcmp(optarg, "none") ? optarg : NULL; break;
    case O_TIMEOUT:
      if (cli_parse_u64(cmd, "--timeout", optarg, 1, 86400, &v) < 0) return 2;
      s.timeout_ms = v * 1000;
      break;
    case O_STANDBY:
      if (cli_parse_u64(cmd, "--standby", optarg, 0, 256, &v) < 0) return 2;
      s.nstandby = (uint32_t)v;
      break;
    case O_RECWAIT:
      if (cli_parse_u64(cmd, "--recover-wait", optarg, 0, 86400000, &v) < 0) return 2;
      s.recover_wait = optarg;
      break;
    case O_SNAPEVERY: /* the same bounds as the controller's */
      if (cli_parse_u64(cmd, "--snapshot-every", optarg, 0, 1u << 30, &v) < 0) return 2;
      s.snap_every = optarg;
      break;
    case O_SNAPINT:
      if (cli_parse_u64(cmd, "--snapshot-interval", optarg, 0, 86400000, &v) < 0) return 2;
      s.snap_interval = optarg;
      break;
    }
  }
  if (ch < 0) return o.exit;
  if (s.workers + s.nstandby > 256) return cli_usage_error(cmd, "--workers and --standby add up to more than 256");
  if (s.slices > s.workers)
    return cli_usage_error(cmd, "--slices (%u) cannot be more than --workers (%u)", s.slices, s.workers);
  if (strlen(s.listen) >= LM_ADDR_MAX) return cli_usage_error(cmd, "--listen address is too long");
  if (s.http && strlen(s.http) >= LM_ADDR_MAX) return cli_usage_error(cmd, "--http address is too long");
  s.workers += s.nstandby; /* from here on the standbys are workers too (the last ones) */
  lm_err err;
  char host[256];
  uint16_t port;
  if (lm_addr_split(s.listen, host, sizeof host, &port, &err) < 0) return cli_usage_error(cmd, "%s", err.msg);

  ssize_t n = readlink("/proc/self/exe", s.self, sizeof s.self - 1);
  if (n <= 0) return cli_fail(cmd, "cannot find this program's path: %s", strerror(errno));
  s.self[n] = 0;
  if (cli_state_dir_ensure(s.dir, sizeof s.dir, &err) < 0) return cli_fail(cmd, "%s", err.msg);
  int lockfd = cli_lock_state(s.dir, &err);
  if (lockfd == LOOM_BUSY) {
    char addr[LM_ADDR_MAX] = "?";
    lm_state_get(s.dir, "address", addr, sizeof addr, NULL);
    return cli_fail(cmd, "a local cluster is already running (controller %s, state in %s); stop it with `loom down`",
                    addr, s.dir);
  }
  if (lockfd < 0) return cli_fail(cmd, "%s", err.msg);
  cli_remove_file(s.dir, LM_STATE_FILE); /* left by a supervisor that was killed: the lock was free */

  s.nkids = 1 + s.workers + (s.proxy_port ? 1 : 0);
  s.kids = calloc(s.nkids, sizeof *s.kids);
  if (!s.kids) {
    close(lockfd);
    return cli_fail(cmd, "out of memory");
  }
  for (size_t i = 0; i < s.nkids; i++) {
    child *c = &s.kids[i];
    if (i == 0) snprintf(c->name, sizeof c->name, "controller");
    else if (i > s.workers) snprintf(c->name, sizeof c->name, "IFRT proxy");
    else snprintf(c->name, sizeof c->name, "worker %zu", i - 1);
    if (i == 0) snprintf(c->log, sizeof c->log, "%s/controller.log", s.dir);
    else if (i > s.workers) snprintf(c->log, sizeof c->log, "%s/proxy.log", s.dir);
    else snprintf(c->log, sizeof c->log, "%s/worker-%zu.log", s.dir, i - 1);
  }
  signal(SIGINT, SIG_DFL); /* a shell may start background jobs with these ignored */
  signal(SIGTERM, SIG_DFL);
  signal(SIGHUP, SIG_DFL);
  sigemptyset(&s.sigs);
  sigaddset(&s.sigs, SIGINT);
  sigaddset(&s.sigs, SIGTERM);
  sigaddset(&s.sigs, SIGHUP);
  sigaddset(&s.sigs, SIGCHLD);
  sigprocmask(SIG_BLOCK, &s.sigs, NULL);

  int rc;
  if (!s.detach) {
    rc = supervise(&s);
  } else {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
      free(s.kids);
      close(lockfd);
      return cli_fail(cmd, "pipe: %s", strerror(errno));
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
      free(s.kids);
      close(lockfd);
      return cli_fail(cmd, "fork: %s", strerror(errno));
    }
    if (pid == 0) { /* the supervisor: its own session, output to up.log, the parent waits on fds[0] */
      close(fds[0]);
      setsid();
      char log[4200];
      snprintf(log, sizeof log, "%s/up.log", s.dir);
      int nullfd = open("/dev/null", O_RDONLY | O_CLOEXEC);
      int logfd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
      if (nullfd >= 0) dup2(nullfd, 0);
      if (logfd >= 0) {
        dup2(logfd, 1);
        dup2(logfd, 2);
      }
      if (nullfd > 2) close(nullfd);
      if (logfd > 2) close(logfd);
      s.notify_fd = fds[1];
      rc = supervise(&s);
    } else {
      close(fds[1]);
      close(lockfd);
      char buf[8200];
      size_t got = 0;
      for (;;) {
        ssize_t k = read(fds[0], buf + got, sizeof buf - 1 - got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0 || got + (size_t)k >= sizeof buf - 1) {
          if (k > 0) got += (size_t)k;
          break;
        }
        got += (size_t)k;
      }
      close(fds[0]);
      buf[got] = 0;
      free(s.kids);
      if (got < 2) {
        fprintf(stderr, "loom up: the cluster supervisor exited during startup (see %s/up.log)\n", s.dir);
        return 1;
      }
      bool ok = buf[0] == '0';
      fputs(buf + 2, ok ? stdout : stderr);
      return ok ? 0 : 1;
    }
  }
  free(s.kids);
  close(lockfd);
  return rc;
}
