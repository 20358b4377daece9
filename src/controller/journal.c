/* The controller's journal: SQLite in WAL mode, a writer thread with group commit (journal.h). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "common/log.h"
#include "controller/journal.h"

#define J_FORMAT "loom-journal-1"
#define J_RETRY_MS 1000

typedef struct j_op {
  uint64_t no;
  int ns;
  uint64_t k1, k2;
  bool del;
  bool lazy;                   /* nobody waits for it: committed with the next wanted batch */
  size_t n;
  struct j_op *next;
  unsigned char v[];
} j_op;

struct lm_journal {
  sqlite3 *db;
  sqlite3_stmt *put, *del, *del_range, *begin, *commit;
  char path[4096];
  int lock_fd;
  pthread_t th;
  bool started;
  pthread_mutex_t mu;
  pthread_cond_t cv;           /* the writer waits for work; flush waits for commits */
  j_op *head, *tail;           /* published, oldest first (the writer takes them) */
  uint64_t committed;          /* the last operation number committed */
  uint64_t wanted;             /* the writer commits once an operation up to this one is published */
  j_op *shead, *stail;         /* staged by the loop thread, not published yet (no lock) */
  uint64_t staged;             /* the last operation number handed out (loop thread) */
  uint64_t staged_want;        /* the last staged operation that is not lazy (loop thread) */
  bool stop;
  bool failing;
  char problem[512];
  uint64_t commits, ops, commit_ns, commit_cpu_ns;
  void (*notify)(void *);
  void *notify_arg;
};

static uint64_t clock_ns(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int sql_err(lm_journal *j, lm_err *err, const char *what) {
  return lm_errf(err, LOOM_IO, "journal %s: %s: %s", j->path, what, sqlite3_errmsg(j->db));
}

static int exec(lm_journal *j, const char *sql, lm_err *err) {
  char *msg = NULL;
  if (sqlite3_exec(j->db, sql, NULL, NULL, &msg) != SQLITE_OK) {
    int rc = lm_errf(err, LOOM_IO, "journal %s: %s", j->path, msg ? msg : sqlite3_errmsg(j->db));
    sqlite3_free(msg);
    return rc;
  }
  return 0;
}

/* ---- the writer ---- */

static int apply(lm_journal *j, const j_op *op) {
  sqlite3_stmt *st = op->del ? (op->k2 == UINT64_MAX ? j->del_range : j->del) : j->put;
  sqlite3_reset(st);
  sqlite3_bind_int(st, 1, op->ns);
  sqlite3_bind_int64(st, 2, (sqlite3_int64)op->k1);
  if (!(op->del && op->k2 == UINT64_MAX)) sqlite3_bind_int64(st, 3, (sqlite3_int64)op->k2);
  if (!op->del) sqlite3_bind_blob(st, 4, op->n ? op->v : (const void *)"", (int)op->n, SQLITE_STATIC);
  int rc = sqlite3_step(st);
  sqlite3_reset(st);
  return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

static int step_stmt(sqlite3_stmt *st) {
  int rc = sqlite3_step(st);
  sqlite3_reset(st);
  return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/* Commits ops (a list, oldest first) in one transaction; SQLITE_OK or the failing code. */
static int commit_batch(lm_journal *j, j_op *ops) {
  int rc = step_stmt(j->begin);
  for (j_op *op = ops; rc == SQLITE_OK && op; op = op->next) rc = apply(j, op);
  if (rc == SQLITE_OK) rc = step_stmt(j->commit);
  if (rc != SQLITE_OK) {
    int keep = sqlite3_extended_errcode(j->db);
    sqlite3_exec(j->db, "ROLLBACK", NULL, NULL, NULL);
    return keep ? keep : rc;
  }
  return SQLITE_OK;
}

static void *writer_main(void *arg) {
  lm_journal *j = arg;
  prctl(PR_SET_NAME, "loom-journal"); /* (told apart in top -H, perf) */
  pthread_mutex_lock(&j->mu);
  for (;;) {
    /* lazy operations alone wait for a wanted one (or lm_journal_kick, or close) */
    while (!j->stop && !(j->head && j->head->no <= j->wanted)) pthread_cond_wait(&j->cv, &j->mu);
    if (!j->head && j->stop) break;
    j_op *ops = j->head, *last = j->tail;
    j->head = j->tail = NULL;
    pthread_mutex_unlock(&j->mu);
    uint64_t t0 = now_ns(), c0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
    int rc = commit_batch(j, ops);
    uint64_t dt = now_ns() - t0, dc = clock_ns(CLOCK_THREAD_CPUTIME_ID) - c0;
    size_t n = 0;
    pthread_mutex_lock(&j->mu);
    if (rc == SQLITE_OK) {
      if (j->failing) lm_info("journal %s: writes succeed again; the state is durable again", j->path);
      j->failing = false;
      j->problem[0] = 0;
      j->committed = last->no;
      j->commits++;
      j->commit_ns += dt;
      j->commit_cpu_ns += dc;
      while (ops) {
        j_op *nx = ops->next;
        free(ops);
        ops = nx;
        n++;
      }
      j->ops += n;
      pthread_cond_broadcast(&j->cv);
      pthread_mutex_unlock(&j->mu);
      if (j->notify) j->notify(j->notify_arg);
      pthread_mutex_lock(&j->mu);
      continue;
    }
    /* keep the batch (in order, before anything newer) and try again in a while */
    last->next = j->head;
    j->head = ops;
    if (!j->tail) j->tail = last;
    const char *why = rc == SQLITE_FULL ? "the disk is full" : sqlite3_errstr(rc);
    if (!j->failing)
      lm_error("journal %s: cannot commit: %s (%s); the controller keeps serving, but state changed since is not "
               "durable until a write succeeds (retrying every %d ms)",
               j->path, why, sqlite3_errmsg(j->db), J_RETRY_MS);
    snprintf(j->problem, sizeof j->problem, "journal %.300s: cannot commit: %.150s", j->path, why);
    j->failing = true;
    pthread_cond_broadcast(&j->cv);
    if (j->notify) { /* waiters on commits hear of the failure too */
      pthread_mutex_unlock(&j->mu);
      j->notify(j->notify_arg);
      pthread_mutex_lock(&j->mu);
    }
    if (j->stop) break; /* closing: what cannot be written is lost, and was logged */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += J_RETRY_MS / 1000;
    pthread_cond_timedwait(&j->cv, &j->mu, &ts);
  }
  pthread_mutex_unlock(&j->mu);
  return NULL;
}

/* ---- queueing ---- */

static uint64_t enqueue(lm_journal *j, int ns, uint64_t k1, uint64_t k2, bool del, bool lazy, const void *v,
                        size_t n) {
  j_op *op = malloc(sizeof *op + (n ? n : 1));
  if (!op) {
    lm_error("journal %s: out of host memory queueing a record (namespace %d key %llu/%llu): it is not written",
             j->path, ns, (unsigned long long)k1, (unsigned long long)k2);
    return 0;
  }
  op->ns = ns, op->k1 = k1, op->k2 = k2, op->del = del, op->lazy = lazy, op->n = n, op->next = NULL;
  if (n) memcpy(op->v, v, n);
  op->no = ++j->staged;
  if (!lazy) j->staged_want = op->no;
  if (j->stail) j->stail->next = op;
  else j->shead = op;
  j->stail = op;
  return op->no;
}

/* Wakes the writer when something published is wanted (under mu). */
static void wake_locked(lm_journal *j) {
  if (j->head && j->head->no <= j->wanted) pthread_cond_signal(&j->cv);
}

void lm_journal_publish(lm_journal *j) {
  if (!j->shead) return;
  pthread_mutex_lock(&j->mu);
  if (j->tail) j->tail->next = j->shead;
  else j->head = j->shead;
  j->tail = j->stail;
  j->shead = j->stail = NULL;
  if (j->staged_want > j->wanted) j->wanted = j->staged_want;
  wake_locked(j);
  pthread_mutex_unlock(&j->mu);
}

void lm_journal_want(lm_journal *j, uint64_t no) {
  if (no <= j->staged_want) return; /* (loop thread) wanted already */
  j->staged_want = no;
  pthread_mutex_lock(&j->mu);
  if (no > j->wanted) j->wanted = no;
  wake_locked(j);
  pthread_mutex_unlock(&j->mu);
}

void lm_journal_kick(lm_journal *j) {
  lm_journal_publish(j);
  lm_journal_want(j, j->staged);
}

uint64_t lm_journal_put(lm_journal *j, int ns, uint64_t k1, uint64_t k2, const void *v, size_t n) {
  return enqueue(j, ns, k1, k2, false, false, v, n);
}

uint64_t lm_journal_del(lm_journal *j, int ns, uint64_t k1, uint64_t k2) {
  return enqueue(j, ns, k1, k2, true, false, NULL, 0);
}

uint64_t lm_journal_del_lazy(lm_journal *j, int ns, uint64_t k1, uint64_t k2) {
  return enqueue(j, ns, k1, k2, true, true, NULL, 0);
}

uint64_t lm_journal_queued(lm_journal *j) { return j->staged; }

uint64_t lm_journal_committed(lm_journal *j) {
  pthread_mutex_lock(&j->mu);
  uint64_t q = j->committed;
  pthread_mutex_unlock(&j->mu);
  return q;
}

const char *lm_journal_problem(lm_journal *j, char *buf, size_t cap) {
  pthread_mutex_lock(&j->mu);
  snprintf(buf, cap, "%s", j->problem);
  pthread_mutex_unlock(&j->mu);
  return buf;
}

void lm_journal_stats(lm_journal *j, uint64_t *commits, uint64_t *ops, uint64_t *commit_ns, uint64_t *commit_cpu_ns) {
  pthread_mutex_lock(&j->mu);
  *commits = j->commits, *ops = j->ops, *commit_ns = j->commit_ns;
  if (commit_cpu_ns) *commit_cpu_ns = j->commit_cpu_ns;
  pthread_mutex_unlock(&j->mu);
}

const char *lm_journal_path(const lm_journal *j) { return j->path; }

/* ---- open, load, close ---- */

static int check_existing(lm_journal *j, lm_err *err) {
  sqlite3_stmt *st = NULL;
  /* SQLite's own consistency check: a truncated or damaged file fails it */
  if (sqlite3_prepare_v2(j->db, "PRAGMA quick_check", -1, &st, NULL) != SQLITE_OK)
    return lm_errf(err, LOOM_IO, "journal %s is not a readable SQLite database (%s): refusing to start rather than "
                   "serve state it cannot trust; move it aside to start with an empty state",
                   j->path, sqlite3_errmsg(j->db));
  int rc = sqlite3_step(st);
  const char *res = rc == SQLITE_ROW ? (const char *)sqlite3_column_text(st, 0) : NULL;
  char first[256];
  snprintf(first, sizeof first, "%s", res ? res : sqlite3_errmsg(j->db));
  bool ok = res && !strcmp(res, "ok");
  sqlite3_finalize(st);
  if (!ok)
    return lm_errf(err, LOOM_IO, "journal %s is corrupt or truncated (SQLite quick_check: %s): refusing to start "
                   "rather than serve state it cannot trust; move it aside to start with an empty state",
                   j->path, first);
  if (sqlite3_prepare_v2(j->db, "SELECT value FROM info WHERE name = 'format'", -1, &st, NULL) != SQLITE_OK)
    return lm_errf(err, LOOM_IO, "journal %s is a SQLite database but not a Loom journal (%s): refusing to start",
                   j->path, sqlite3_errmsg(j->db));
  rc = sqlite3_step(st);
  const char *fmt = rc == SQLITE_ROW ? (const char *)sqlite3_column_text(st, 0) : NULL;
  ok = fmt && !strcmp(fmt, J_FORMAT);
  snprintf(first, sizeof first, "%s", fmt ? fmt : "none");
  sqlite3_finalize(st);
  if (!ok)
    return lm_errf(err, LOOM_IO, "journal %s has format '%s'; this controller reads '%s': refusing to start", j->path,
                   first, J_FORMAT);
  return 0;
}

int lm_journal_open(const char *dir, void (*notify)(void *arg), void *arg, lm_journal **out, lm_err *err) {
  *out = NULL;
  if (!dir || !*dir) return lm_errf(err, LOOM_INVALID_ARGUMENT, "--state needs a directory");
  if (mkdir(dir, 0700) != 0 && errno != EEXIST)
    return lm_errf(err, LOOM_IO, "cannot create the state directory %s: %s", dir, strerror(errno));
  lm_journal *j = calloc(1, sizeof *j);
  if (!j) return lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  j->lock_fd = -1;
  j->notify = notify, j->notify_arg = arg;
  pthread_mutex_init(&j->mu, NULL);
  pthread_cond_init(&j->cv, NULL);
  snprintf(j->path, sizeof j->path, "%s/journal.db", dir);
  char lock[4200];
  snprintf(lock, sizeof lock, "%s/lock", dir);
  int rc = 0;
  j->lock_fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (j->lock_fd < 0) rc = lm_errf(err, LOOM_IO, "cannot open %s: %s", lock, strerror(errno));
  else if (flock(j->lock_fd, LOCK_EX | LOCK_NB) != 0)
    rc = lm_errf(err, LOOM_BUSY, "another controller uses the state directory %s (%s is locked)", dir, lock);
  struct stat st;
  bool fresh = stat(j->path, &st) != 0 || st.st_size == 0;
  if (rc == 0 && !fresh && st.st_size % 512 != 0)
    rc = lm_errf(err, LOOM_IO, "journal %s is truncated (%lld bytes, not a whole number of pages): refusing to start "
                 "rather than serve state it cannot trust; move it aside to start with an empty state",
                 j->path, (long long)st.st_size);
  if (rc == 0 && fresh) { /* it holds transfer keys: readable by the controller's user only (SQLite gives
                             its -wal and -shm files the same mode) */
    int fd = open(j->path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) rc = lm_errf(err, LOOM_IO, "cannot create the journal %s: %s", j->path, strerror(errno));
    else close(fd);
  }
  if (rc == 0 && sqlite3_open_v2(j->path, &j->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                                 NULL) != SQLITE_OK)
    rc = lm_errf(err, LOOM_IO, "cannot open the journal %s: %s", j->path, j->db ? sqlite3_errmsg(j->db) : "out of memory");
  if (rc == 0) {
    sqlite3_busy_timeout(j->db, 5000);
    sqlite3_extended_result_codes(j->db, 1);
  }
  if (rc == 0 && !fresh) rc = check_existing(j, err);
  /* small pages: a commit writes each page it changed whole (a launch changes two), so 1 KiB pages
   * copy and checksum a quarter of what 4 KiB ones do; only a new file takes it (before WAL) */
  if (rc == 0 && fresh) rc = exec(j, "PRAGMA page_size=1024", err);
  if (rc == 0) {
    sqlite3_stmt *q = NULL;
    const char *mode = NULL;
    if (sqlite3_prepare_v2(j->db, "PRAGMA journal_mode=WAL", -1, &q, NULL) == SQLITE_OK && sqlite3_step(q) == SQLITE_ROW)
      mode = (const char *)sqlite3_column_text(q, 0);
    if (!mode || strcmp(mode, "wal"))
      rc = lm_errf(err, LOOM_IO, "journal %s: cannot switch to WAL mode: %s", j->path, sqlite3_errmsg(j->db));
    sqlite3_finalize(q);
  }
  /* NORMAL: a commit is durable against a crash of the controller (SIGKILL); an OS crash may lose
   * the last commits, never corrupt the file */
  if (rc == 0) rc = exec(j, "PRAGMA synchronous=NORMAL", err);
  /* one controller owns the file (DIR/lock says so): no shared-memory locking per transaction; a
   * larger WAL between checkpoints (they run on the writer thread, stalling its commits) */
  if (rc == 0) rc = exec(j, "PRAGMA locking_mode=EXCLUSIVE; PRAGMA wal_autocheckpoint=4000; PRAGMA cache_size=-16384", err);
  if (rc == 0 && fresh)
    rc = exec(j, "BEGIN;"
                 "CREATE TABLE IF NOT EXISTS info(name TEXT PRIMARY KEY, value TEXT NOT NULL);"
                 "CREATE TABLE IF NOT EXISTS rec(ns INTEGER NOT NULL, k1 INTEGER NOT NULL, k2 INTEGER NOT NULL,"
                 " v BLOB NOT NULL, PRIMARY KEY(ns, k1, k2)) WITHOUT ROWID;"
                 "INSERT OR REPLACE INTO info VALUES('format', '" J_FORMAT "');"
                 "COMMIT;", err);
  if (rc == 0 &&
      (sqlite3_prepare_v2(j->db, "INSERT OR REPLACE INTO rec(ns, k1, k2, v) VALUES(?1, ?2, ?3, ?4)", -1, &j->put,
                          NULL) != SQLITE_OK ||
       sqlite3_prepare_v2(j->db, "DELETE FROM rec WHERE ns = ?1 AND k1 = ?2 AND k2 = ?3", -1, &j->del, NULL) !=
           SQLITE_OK ||
       sqlite3_prepare_v2(j->db, "DELETE FROM rec WHERE ns = ?1 AND k1 = ?2", -1, &j->del_range, NULL) != SQLITE_OK ||
       sqlite3_prepare_v2(j->db, "BEGIN IMMEDIATE", -1, &j->begin, NULL) != SQLITE_OK ||
       sqlite3_prepare_v2(j->db, "COMMIT", -1, &j->commit, NULL) != SQLITE_OK))
    rc = sql_err(j, err, "cannot prepare statements");
  if (rc == 0) {
    if (pthread_create(&j->th, NULL, writer_main, j) != 0) rc = lm_errf(err, LOOM_NO_MEMORY, "cannot start the journal writer");
    else j->started = true;
  }
  if (rc < 0) {
    lm_journal_close(j);
    return rc;
  }
  *out = j;
  return 0;
}

int lm_journal_load(lm_journal *j, int (*fn)(void *, int, uint64_t, uint64_t, const void *, size_t, lm_err *),
                    void *arg, lm_err *err) {
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(j->db, "SELECT ns, k1, k2, v FROM rec ORDER BY ns, k1, k2", -1, &st, NULL) != SQLITE_OK)
    return sql_err(j, err, "cannot read");
  int rc = 0, s;
  while (rc == 0 && (s = sqlite3_step(st)) == SQLITE_ROW)
    rc = fn(arg, sqlite3_column_int(st, 0), (uint64_t)sqlite3_column_int64(st, 1), (uint64_t)sqlite3_column_int64(st, 2),
            sqlite3_column_blob(st, 3), (size_t)sqlite3_column_bytes(st, 3), err);
  if (rc == 0 && s != SQLITE_DONE)
    rc = lm_errf(err, LOOM_IO, "journal %s cannot be read (%s): refusing to start rather than serve state it cannot "
                 "trust", j->path, sqlite3_errmsg(j->db));
  sqlite3_finalize(st);
  return rc;
}

void lm_journal_close(lm_journal *j) {
  if (!j) return;
  if (j->started) lm_journal_publish(j);
  if (j->started) { /* (stop: the writer commits what is published, wanted or not) */
    pthread_mutex_lock(&j->mu);
    j->stop = true;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    pthread_join(j->th, NULL);
  }
  while (j->head) {
    j_op *n = j->head->next;
    free(j->head);
    j->head = n;
  }
  while (j->shead) {
    j_op *n = j->shead->next;
    free(j->shead);
    j->shead = n;
  }
  sqlite3_finalize(j->put);
  sqlite3_finalize(j->del);
  sqlite3_finalize(j->del_range);
  sqlite3_finalize(j->begin);
  sqlite3_finalize(j->commit);
  if (j->db) sqlite3_close(j->db);
  if (j->lock_fd >= 0) close(j->lock_fd);
  pthread_mutex_destroy(&j->mu);
  pthread_cond_destroy(&j->cv);
  free(j);
}
