/* The controller's journal (docs/durability.md): its durable state as records in one SQLite
 * database in WAL mode, `DIR/journal.db` under `loom controller --state DIR`. A record is a key
 * (namespace, k1, k2) and a value (a protobuf message of src/proto/journal.proto); SQLite does the
 * storage, the atomic commits and the recovery after a crash.
 *
 * Writes never block the loop: lm_journal_put / lm_journal_del stage an operation (a copy of the
 * value); lm_journal_publish (once per loop iteration) hands what was staged to a writer thread,
 * which commits whatever was published in one transaction (group commit: what one iteration
 * staged is committed whole or not at all), then calls the notify callback from its thread.
 * Lazy operations (deletes nobody waits for) do not start a commit: they ride along with the next
 * one, so a steady launch loop costs one commit per launch, not two. Each queued operation
 * gets a number; lm_journal_committed says up to which number everything is on disk, so a caller
 * can hold a reply until the state it reveals is durable. A commit that fails (disk full, I/O
 * error) is logged naming the file and retried every second; lm_journal_problem says why while it
 * fails. Thread-safe: one loop thread calls put/del/flush, the writer thread runs inside. */
#ifndef LM_CONTROLLER_JOURNAL_H
#define LM_CONTROLLER_JOURNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "common/err.h"

typedef struct lm_journal lm_journal;

/* Record namespaces (k1, k2 in brackets). */
enum {
  LM_J_META = 1,       /* [0, 0] counters and the data-plane master key (lmj.Meta) */
  LM_J_WORKER = 2,     /* [worker id, 0] lmj.Worker */
  LM_J_SESSION = 3,    /* [session id, 0] lmj.Session */
  LM_J_ARRAY = 4,      /* [session, array id] lmj.Array */
  LM_J_PROGRAM = 5,    /* [program id, 0] lmj.Program */
  LM_J_EXECUTABLE = 6, /* [session, executable id] lmj.Executable */
  LM_J_LAUNCH = 7,     /* [seq, 0] lmj.Launch: launches not finished yet */
  LM_J_USAGE = 8,      /* [session id, 0] lmj.Usage: the pool's accounting of a session */
};

/* Opens (creating DIR and the database when missing) DIR/journal.db. A file that is not a
 * database, is truncated or fails SQLite's quick_check, or holds another schema, is refused with
 * an error naming the file: the controller never serves state it cannot trust. notify (may be
 * NULL) runs on the writer thread after each commit. */
int lm_journal_open(const char *dir, void (*notify)(void *arg), void *arg, lm_journal **out, lm_err *err);
/* Waits for everything queued to be committed (or a commit to fail), stops the writer, closes.
 * NULL ok. */
void lm_journal_close(lm_journal *j);
const char *lm_journal_path(const lm_journal *j);

/* Calls fn for every record, in key order (before any put; loop thread, at start). fn returning
 * < 0 stops the walk with that status. */
int lm_journal_load(lm_journal *j, int (*fn)(void *arg, int ns, uint64_t k1, uint64_t k2, const void *v, size_t n,
                                             lm_err *err),
                    void *arg, lm_err *err);

/* Stages writing (replacing) a record (loop thread); returns the operation's number (0 when out
 * of memory: the record is then not written, which is logged). The writer commits it as soon as it
 * is published (its commit overlaps whatever the loop does next). */
uint64_t lm_journal_put(lm_journal *j, int ns, uint64_t k1, uint64_t k2, const void *v, size_t n);
/* Queues deleting a record; with k2 == UINT64_MAX every record of (ns, k1). */
uint64_t lm_journal_del(lm_journal *j, int ns, uint64_t k1, uint64_t k2);
/* The same, lazily: nobody waits for it, so it is committed with the next operation that is not
 * lazy (or wanted, or kicked), in order, instead of in a transaction of its own. */
uint64_t lm_journal_del_lazy(lm_journal *j, int ns, uint64_t k1, uint64_t k2);
/* Someone waits for operation no (loop thread): the writer commits it (and what precedes it) as
 * soon as it is published, lazy or not. */
void lm_journal_want(lm_journal *j, uint64_t no);
/* Publishes and wants everything staged (a periodic tick: lazy operations are not left behind). */
void lm_journal_kick(lm_journal *j);
/* Hands what was staged to the writer, to be committed in one transaction with it (loop thread). */
void lm_journal_publish(lm_journal *j);
/* The number of the last operation staged (loop thread), and of the last one committed. */
uint64_t lm_journal_queued(lm_journal *j);
uint64_t lm_journal_committed(lm_journal *j);
/* Why commits fail right now ("" when they do not), copied into buf. */
const char *lm_journal_problem(lm_journal *j, char *buf, size_t cap);
/* Commit statistics: transactions, operations, total nanoseconds spent committing (wall clock),
 * and the writer thread's CPU time in them (commit_cpu_ns may be NULL). */
void lm_journal_stats(lm_journal *j, uint64_t *commits, uint64_t *ops, uint64_t *commit_ns, uint64_t *commit_cpu_ns);

#endif
