/* Programs, device execution threads and launches on a worker.
 *
 * The controller sends one RUN per launch with this worker's devices in it, in global sequence
 * order; the loop thread turns it into one task per device, resolving input shards to slots
 * (references held, so a later delete cannot pull them away) and listing PENDING output slots
 * at once (so later launches and gets can name them). Each device thread runs its queue in
 * order: a task waits until its inputs are ready (futures on shards, no round trip), runs the
 * per-device program, and fills its outputs; the last task of a launch hands it back to the
 * loop thread, which reports RUN_DONE. */
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include "common/log.h"
#include "exec/dot.h"
#include "worker/relay.h"
#include "hlo/parse.h"
#include "hlo/print.h"
#include "pjrt/pjrt.h"
#include "worker/wk.h"

#include "worker/spmd_coll.h"

/* ---- programs ---- */

static void code_release(wk_code *c) {
  if (!c || atomic_fetch_sub(&c->refs, 1) != 1) return;
  lm_pjrt_exe_free(c->pjrt);
  lm_pjrt_cut_free(c->cut);
  lm_program_destroy(c->prog);
  lm_spmd_info_free(c->info);
  free(c);
}

void wk_program_release(wk_program *p) {
  if (!p || atomic_fetch_sub(&p->refs, 1) != 1) return;
  code_release(p->code);
  free(p->proc_workers);
  free(p->proc_devices);
  free(p->name);
  free(p);
}

static wk_program *find_program(wk *w, uint64_t id) {
  for (wk_program *p = w->programs; p; p = p->next)
    if (p->id == id) return p;
  return NULL;
}

static void unlist_program(wk *w, uint64_t id) {
  for (wk_program **pp = &w->programs; *pp; pp = &(*pp)->next)
    if ((*pp)->id == id) {
      wk_program *p = *pp;
      *pp = p->next;
      wk_program_release(p);
      return;
    }
}

/* Lists program id (replacing one with that id) over code (a new reference) with the process map
 * *pw / *pd (taken, set to NULL). NULL when out of memory. */
static wk_program *program_new(wk *w, uint64_t id, const char *name, wk_code *code, uint32_t **pw, uint32_t **pd) {
  wk_program *p = calloc(1, sizeof *p);
  if (!p || !(p->name = strdup(name))) {
    free(p);
    return NULL;
  }
  p->id = id;
  p->code = code;
  atomic_fetch_add(&code->refs, 1);
  p->prog = code->prog;
  p->info = code->info;
  p->pjrt = code->pjrt;
  p->pjrt_results = code->pjrt_results;
  p->proc_workers = *pw;
  p->proc_devices = *pd;
  *pw = *pd = NULL;
  atomic_init(&p->refs, 1);
  unlist_program(w, id);
  p->next = w->programs;
  w->programs = p;
  return p;
}

/* Loading a program (parse, SPMD analysis, partitioning, executor setup) is heavy work: it runs
 * on libuv's thread pool, and the loop thread lists the program and acknowledges it after. */
typedef struct load_job {
  uv_work_t req;
  wk *w;
  lm_conn *conn;        /* the connection the request came on: no reply on another */
  uint64_t rid, id;
  char *name, *text;   /* text: t's data when t, else owned */
  wk_text *t;          /* the held text by digest (a reference), or NULL */
  size_t len;
  bool cancelled;       /* unloaded (or the worker stopped) while loading */
  struct load_job *next;
  int rc;
  lm_err err;
  lm_program *prog;
  lm_spmd_info *info;
  lm_pjrt_exe *pjrt;
  lm_pjrt_cut *cut;
  uint32_t nmap;        /* where every process runs, from LOAD_PROGRAM (0: not given) */
  uint32_t *proc_workers, *proc_devices;
} load_job;

/* Why the per-device program cannot go to a PJRT plugin as one executable, or NULL: collectives
 * (the data plane carries them between workers) and, with several processes, ops whose value
 * depends on which process runs them (a plugin executable compiled for one device says 0). */
static const char *pjrt_obstacle_in(const lm_region *r, bool multi) {
  for (uint32_t b = 0; b < r->nblocks; b++)
    for (uint32_t i = 0; i < r->blocks[b].nops; i++) {
      const lm_op *op = &r->blocks[b].ops[i];
      switch (op->code) {
        case LM_OP_ALL_REDUCE: case LM_OP_ALL_GATHER: case LM_OP_REDUCE_SCATTER: case LM_OP_ALL_TO_ALL:
        case LM_OP_COLLECTIVE_PERMUTE: case LM_OP_COLLECTIVE_BROADCAST: case LM_OP_SEND: case LM_OP_RECV:
          return "it has collectives, which Loom's data plane carries";
        case LM_OP_REPLICA_ID: case LM_OP_PARTITION_ID:
          if (multi) return "it asks which process runs it";
          break;
        case LM_OP_CUSTOM_CALL:
          return "it has custom calls (a bare plugin lacks jaxlib's handlers)";
        default: break;
      }
      for (uint32_t k = 0; k < op->nregions; k++) {
        const char *why = pjrt_obstacle_in(&op->regions[k], multi);
        if (why) return why;
      }
    }
  return NULL;
}

static void note_segment(void *user, uint32_t seg, const char *why) {
  const load_job *j = user;
  lm_info("program %llu (%s): segment %u runs on Loom's executor, not the PJRT plugin: %.600s",
          (unsigned long long)j->id, j->name, seg, why);
}

/* A program with collectives (or process ids with several processes): cut at them, its compute
 * through the plugin (hlo/cut.h). Sets j->cut, or says why not (NULL: no compute segment went to
 * the plugin; *why then says why). LOOM_PJRT_CUT=0 turns cutting off (the whole program then runs
 * on Loom's executor, as before cutting existed). */
static const char *pjrt_cut(load_job *j, const lm_module *mod, const char *obstacle) {
  const char *env = getenv("LOOM_PJRT_CUT");
  if (env && !strcmp(env, "0")) return obstacle;
  lm_cut *plan = NULL;
  const char *why = NULL;
  lm_err err;
  if (lm_cut_plan(mod, j->info->nproc > 1, &plan, &why, &err) < 0) {
    lm_warn("program %llu (%s): cannot plan cutting it at its collectives: %.600s", (unsigned long long)j->id, j->name,
            err.msg);
    return obstacle;
  }
  if (!plan) return why;
  uint32_t ncoll = plan->ncollectives;
  lm_pjrt_cut *c = NULL;
  if (lm_pjrt_cut_create(j->w->pjrt, plan, note_segment, j, &c, &err) < 0) {
    lm_warn("program %llu (%s): cannot cut it at its collectives: %.600s", (unsigned long long)j->id, j->name, err.msg);
    return obstacle;
  }
  if (!lm_pjrt_cut_compiled(c)) {
    lm_pjrt_cut_free(c);
    return "none of its segments between collectives went to the plugin";
  }
  uint32_t ncomp = lm_pjrt_cut_compiled(c), nloom = lm_pjrt_cut_segments(c) - ncomp;
  lm_info("program %llu (%s) cut at %u collective%s: %u segment%s compiled by the PJRT plugin, %u on Loom's executor",
          (unsigned long long)j->id, j->name, ncoll, ncoll == 1 ? "" : "s", ncomp, ncomp == 1 ? "" : "s", nloom);
  j->cut = c;
  return NULL;
}

/* backend pjrt: compiles the per-device program with the plugin too: whole when it can, else cut
 * at its collectives. Anything the plugin cannot take runs on Loom's executor, with the reason in
 * the worker's log. */
static lm_pjrt_exe *pjrt_compile(load_job *j, const lm_module *mod) {
  const lm_func *main = lm_module_func(mod, "main");
  if (!main && mod->nfuncs == 1) main = &mod->funcs[0];
  const char *why = !main ? "it has no @main" : NULL;
  for (uint32_t f = 0; !why && f < mod->nfuncs; f++) why = pjrt_obstacle_in(&mod->funcs[f].body, j->info->nproc > 1);
  if (why && main) {
    why = pjrt_cut(j, mod, why);
    if (!why) return NULL;
  }
  lm_pjrt_exe *x = NULL;
  lm_err err;
  if (!why) {
    char *text = lm_module_print(mod);
    if (!text) why = "out of host memory";
    else if (lm_pjrt_compile(j->w->pjrt, text, strlen(text), main->nresults, &x, &err) < 0) why = err.msg;
    free(text);
  }
  if (why) lm_info("program %llu (%s) runs on Loom's executor, not the PJRT plugin: %.600s", (unsigned long long)j->id,
                   j->name, why);
  else lm_info("program %llu (%s) compiled by the PJRT plugin", (unsigned long long)j->id, j->name);
  return x;
}

static void release_buffer(void *b) { lm_buffer_release(b); }

/* A large constant the client put as an array (docs/scale.md "Large constants"):
 * dense_resource<loom_array_SESSION_ID> borrows the bytes of that array's shard on any of this
 * worker's devices. The controller let the program through only for that session's own arrays;
 * the client put it (once per worker) before compiling. */
static int resolve_const(void *ctx, const char *name, size_t nbytes, const void **data, void (**release)(void *),
                         void **arg, lm_err *err) {
  wk *w = ctx;
  unsigned long long session, id;
  int end = 0;
  if (sscanf(name, "loom_array_%llu_%llu%n", &session, &id, &end) != 2 || name[end])
    return lm_errf(err, LOOM_NOT_FOUND, "not a Loom array reference (loom_array_SESSION_ID)");
  for (uint32_t d = 0; d < w->cfg.devices; d++) {
    wk_slot *s = wk_store_get(&w->store, session, id, d);
    if (!s) continue;
    lm_buffer *b = s->state == WK_SLOT_READY ? lm_buffer_retain(s->buf) : NULL;
    wk_slot_release(&w->store, s);
    if (!b) continue;
    if (b->nbytes != nbytes) {
      size_t have = b->nbytes;
      lm_buffer_release(b);
      return lm_errf(err, LOOM_INVALID_ARGUMENT, "array %llu has %zu bytes on this worker; the constant needs %zu", id,
                     have, nbytes);
    }
    *data = b->data;
    *release = release_buffer;
    *arg = b;
    return 0;
  }
  return lm_errf(err, LOOM_NOT_FOUND, "array %llu of session %llu is not on worker %u", id, session, w->worker_id);
}

static void load_work(uv_work_t *req) {
  load_job *j = req->data;
  lm_module *mod = NULL;
  lm_parse_opts po = {.filename = j->name, .resolve = resolve_const, .resolve_ctx = j->w};
  j->rc = lm_parse_module(j->text, j->len, &po, &mod, &j->err);
  if (j->rc == 0) j->rc = lm_spmd_analyze(mod, &j->info, &j->err);
  if (j->rc == 0) j->rc = lm_spmd_localize(mod, &j->err);
  if (j->rc == 0 && j->w->pjrt) j->pjrt = pjrt_compile(j, mod);
  if (j->rc == 0) {
    j->rc = lm_program_create(mod, &j->prog, &j->err); /* takes mod, also on failure */
    mod = NULL;
  }
  lm_module_free(mod);
}

static void load_done(uv_work_t *req, int status) {
  load_job *j = req->data;
  wk *w = j->w;
  for (load_job **pp = &w->loading; *pp; pp = &(*pp)->next)
    if (*pp == j) {
      *pp = j->next;
      break;
    }
  wk_program *p = NULL;
  wk_code *code = NULL;
  int rc = j->rc;
  lm_err err = j->err;
  if (status < 0) rc = lm_errf(&err, LOOM_CANCELLED, "loading cancelled");
  if (rc == 0 && j->nmap && j->nmap != j->info->nproc)
    rc = lm_errf(&err, LOOM_PROTOCOL, "LOAD_PROGRAM maps %u processes, the program runs %u", j->nmap, j->info->nproc);
  bool reply = !j->cancelled && !w->stopping && w->conn == j->conn;
  if (rc == 0 && reply && !(code = calloc(1, sizeof *code))) rc = lm_errf(&err, LOOM_NO_MEMORY, "out of host memory");
  if (rc < 0 || !reply) {
    free(code);
    lm_program_destroy(j->prog);
    lm_spmd_info_free(j->info);
    lm_pjrt_exe_free(j->pjrt);
    lm_pjrt_cut_free(j->cut);
    if (rc < 0) lm_warn("cannot load program %llu (%s): %s", (unsigned long long)j->id, j->name, err.msg);
    if (rc < 0 && reply) {
      char msg[LM_ERR_MSG_MAX + 64];
      snprintf(msg, sizeof msg, "worker %u cannot load it: %s", w->worker_id, err.msg);
      lm_conn_send_error(w->conn, j->rid, rc, msg);
    }
  } else {
    atomic_init(&code->refs, 1);
    code->prog = j->prog;
    code->info = j->info;
    code->pjrt = j->pjrt;
    code->cut = j->cut;
    if (code->pjrt) { /* found once here, not per launch */
      const lm_module *pm = lm_program_module(code->prog);
      const lm_func *main = lm_module_func(pm, "main");
      code->pjrt_results = (main ? main : &pm->funcs[0])->result_types;
    }
    if (j->t) {
      code->has_digest = true;
      memcpy(code->digest, j->t->digest, 32);
    }
    p = program_new(w, j->id, j->name, code, &j->proc_workers, &j->proc_devices);
    code_release(code); /* the program holds it now (or nothing does) */
    if (!p) {
      lm_conn_send_error(w->conn, j->rid, LOOM_NO_MEMORY, "out of host memory");
    } else {
      lm_debug("loaded program %llu (%s): %s%s, %u processes", (unsigned long long)p->id, j->name,
               lm_spmd_form_name(p->info->form), p->info->partitioned ? " (partitioned)" : "", p->info->nproc);
      Lmw__Ack ack = LMW__ACK__INIT;
      wk_send(w, LM_MSG_ACK, j->rid, &ack.base);
    }
  }
  free(j->name);
  if (j->t) wk_text_release(j->t);
  else free(j->text);
  free(j->proc_workers);
  free(j->proc_devices);
  free(j);
}

/* A loaded program with a digest equal to d, or NULL. */
static wk_program *program_by_digest(wk *w, const uint8_t *d) {
  for (wk_program *p = w->programs; p; p = p->next)
    if (p->code->has_digest && !memcmp(p->code->digest, d, 32)) return p;
  return NULL;
}

void wk_on_load_program(wk *w, const lm_frame *f, const Lmw__LoadProgram *m) {
  lm_err err;
  const char *name = m->name && m->name[0] ? m->name : "<program>";
  if (!m->program) {
    lm_errf(&err, LOOM_PROTOCOL, "LOAD_PROGRAM without a program id");
    lm_conn_send_error(w->conn, f->h.request_id, err.code, err.msg);
    return;
  }
  if (m->n_proc_workers != m->n_proc_devices || m->n_proc_workers > LM_SHARD_MAX_DEVICES) {
    lm_conn_send_error(w->conn, f->h.request_id, LOOM_PROTOCOL, "LOAD_PROGRAM with a malformed process map");
    return;
  }
  size_t len = (size_t)f->h.payload_len, nmap = m->n_proc_workers;
  if (m->text_digest.len && m->text_digest.len != 32) {
    lm_conn_send_error(w->conn, f->h.request_id, LOOM_PROTOCOL, "LOAD_PROGRAM with a malformed text digest");
    return;
  }
  const uint8_t *digest = m->text_digest.len ? m->text_digest.data : NULL;
  uint32_t *pw = NULL, *pd = NULL;
  if (nmap && (!(pw = malloc(nmap * sizeof *pw)) || !(pd = malloc(nmap * sizeof *pd)))) {
    free(pw), free(pd);
    lm_conn_send_error(w->conn, f->h.request_id, LOOM_NO_MEMORY, "worker cannot load the program: out of memory");
    return;
  }
  if (nmap) {
    memcpy(pw, m->proc_workers, nmap * sizeof *pw);
    memcpy(pd, m->proc_devices, nmap * sizeof *pd);
  }
  /* the same text loaded already (another device list, another executable): share what loading
   * it made, no text and no parsing needed */
  wk_program *same = digest ? program_by_digest(w, digest) : NULL;
  if (same && (!nmap || nmap == same->info->nproc)) {
    wk_program *p = program_new(w, m->program, name, same->code, &pw, &pd);
    free(pw), free(pd);
    if (!p) {
      lm_conn_send_error(w->conn, f->h.request_id, LOOM_NO_MEMORY, "worker cannot load the program: out of memory");
      return;
    }
    w->loads_shared++;
    lm_debug("loaded program %llu (%s) from the code of program %llu (same text)", (unsigned long long)m->program,
             name, (unsigned long long)same->id);
    Lmw__Ack ack = LMW__ACK__INIT;
    wk_send(w, LM_MSG_ACK, f->h.request_id, &ack.base);
    return;
  }
  wk_text *t = NULL;
  if (digest && !len) { /* a text this worker should hold */
    if (!(t = wk_text_find(w, digest))) {
      free(pw), free(pd);
      lm_conn_send_errorf(w->conn, f->h.request_id, LOOM_NOT_FOUND,
                          "worker %u does not hold the text of program %llu (send it)", w->worker_id,
                          (unsigned long long)m->program);
      return;
    }
    w->texts_reused++;
  } else if (digest) { /* keep it for the next program of the same text */
    if (!(t = wk_text_add(w, digest, lm_frame_take_payload((lm_frame *)f), len))) {
      free(pw), free(pd);
      lm_conn_send_error(w->conn, f->h.request_id, LOOM_NO_MEMORY, "worker cannot load the program: out of memory");
      return;
    }
  }
  load_job *j = calloc(1, sizeof *j);
  if (j) {
    j->name = strdup(name);
    j->t = t;
    j->text = t ? t->data : len ? lm_frame_take_payload((lm_frame *)f) : malloc(1); /* taken, not copied */
    j->len = t ? t->len : len;
  }
  int rc = -1;
  if (j && j->name && j->text) {
    j->proc_workers = pw, j->proc_devices = pd;
    pw = pd = NULL;
    j->nmap = (uint32_t)nmap;
    j->w = w;
    j->conn = w->conn;
    j->rid = f->h.request_id;
    j->id = m->program;
    j->req.data = j;
    rc = uv_queue_work(&w->loop, &j->req, load_work, load_done);
  }
  if (rc != 0) {
    if (j) {
      free(j->name), free(j->proc_workers), free(j->proc_devices);
      if (!t) free(j->text);
    }
    wk_text_release(t);
    free(j), free(pw), free(pd);
    lm_conn_send_error(w->conn, f->h.request_id, LOOM_NO_MEMORY, "worker cannot load the program: out of resources");
    return;
  }
  j->next = w->loading;
  w->loading = j;
}

void wk_on_unload_program(wk *w, const Lmw__UnloadProgram *m) {
  for (load_job *j = w->loading; j; j = j->next)
    if (j->id == m->program) j->cancelled = true;
  unlist_program(w, m->program);
}

/* ---- launches ---- */

static void launch_fail(wk_launch *l, int code, const char *msg) {
  pthread_mutex_lock(&l->mu);
  if (l->code == 0) {
    l->code = code;
    snprintf(l->msg, sizeof l->msg, "%s", msg);
  }
  pthread_mutex_unlock(&l->mu);
}

static void launch_free(wk_launch *l) {
  free(l->timings);
  if (l->coll) lm_spmd_coll_destroy(l->coll);
  wk_program_release(l->prog);
  pthread_mutex_destroy(&l->mu);
  free(l);
}

static void task_free(wk *w, wk_task *t) {
  for (uint32_t i = 0; i < t->nin; i++) wk_slot_release(&w->store, t->in[i]);
  for (uint32_t i = 0; i < t->nout; i++) wk_slot_release(&w->store, t->out[i]);
  free(t->in);
  free(t);
}

/* The task is over (ran, failed or was dropped): counts it off its launch. */
static void task_done(wk *w, wk_task *t) {
  wk_launch *l = t->l;
  task_free(w, t);
  if (atomic_fetch_sub(&l->remaining, 1) != 1) return;
  pthread_mutex_lock(&w->done_mu);
  l->done_next = w->finished;
  w->finished = l;
  pthread_mutex_unlock(&w->done_mu);
  uv_async_send(&w->async);
}

static void fail_outputs(wk *w, wk_task *t, int code, const char *msg) {
  for (uint32_t i = 0; i < t->nout; i++) wk_slot_finish(&w->store, t->out[i], NULL, code, msg);
  launch_fail(t->l, code, msg);
}

static void run_task(wk_dev *d, wk_task *t) {
  wk *w = d->w;
  wk_launch *l = t->l;
  const lm_spmd_info *info = l->prog->info;
  lm_err err;
  char msg[LM_ERR_MSG_MAX];
  int rc = 0;
  if (t->timing) t->timing->start = uv_hrtime();
  for (uint32_t i = 0; i < t->nin; i++)
    if (!t->in[i]) {
      snprintf(msg, sizeof msg, "worker %u device %u: array %llu (input %u) has no shard here: it was never put, "
               "or was deleted", w->worker_id, d->idx, (unsigned long long)t->missing, i);
      fail_outputs(w, t, LOOM_NOT_FOUND, msg);
      return;
    }
  /* wait for the inputs: they come from earlier launches on this device, or from puts */
  pthread_mutex_lock(&w->store.mu);
  for (;;) {
    bool pending = false;
    for (uint32_t i = 0; i < t->nin; i++) pending |= t->in[i]->state == WK_SLOT_PENDING;
    if (!pending || l->cancel) break;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 100 * 1000000L;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(&w->store.cv, &w->store.mu, &ts);
  }
  int in_code = 0;
  const char *in_msg = NULL;
  for (uint32_t i = 0; i < t->nin && !in_code; i++)
    if (t->in[i]->state == WK_SLOT_FAILED) {
      in_code = t->in[i]->code;
      snprintf(msg, sizeof msg, "%s", t->in[i]->msg ? t->in[i]->msg : "an input's producer failed");
      in_msg = msg;
    }
  pthread_mutex_unlock(&w->store.mu);
  if (l->cancel) {
    snprintf(msg, sizeof msg, "launch %llu was aborted: %s", (unsigned long long)l->seq,
             l->cancel_reason[0] ? l->cancel_reason : "cancelled");
    fail_outputs(w, t, LOOM_CANCELLED, msg);
    return;
  }
  if (in_code) { /* an input's producer failed: its error propagates as it is */
    fail_outputs(w, t, in_code, in_msg);
    return;
  }
  lm_buffer *args_small[8], *res_small[8];
  lm_buffer **args = t->nin <= 8 ? args_small : calloc(t->nin, sizeof *args);
  lm_buffer **res = t->nout <= 8 ? res_small : calloc(t->nout, sizeof *res);
  if (!args || !res) rc = lm_errf(&err, LOOM_NO_MEMORY, "out of host memory");
  uint32_t nargs = 0;
  for (uint32_t i = 0; rc == 0 && i < t->nin; i++) {
    lm_buffer *b = t->in[i]->buf; /* READY slots never change */
    const lm_type *want = &info->inputs[i].local;
    if (lm_type_equal(&b->type, want)) {
      args[nargs++] = lm_buffer_retain(b);
    } else if (b->type.kind == LM_TYPE_TENSOR && b->type.dtype == want->dtype &&
               lm_type_numel(&b->type) == lm_type_numel(want)) { /* [1, T...] rows of a replicated program */
      rc = lm_buffer_view(want, b, &args[nargs], &err);
      if (rc == 0) nargs++;
    } else {
      char b1[96], b2[96];
      rc = lm_errf(&err, LOOM_SHAPE_MISMATCH, "input %u is %s here but the program takes %s", i,
                   lm_type_str(&b->type, b1, sizeof b1), lm_type_str(want, b2, sizeof b2));
    }
  }
  if (t->timing) t->timing->ready = uv_hrtime();
  if (rc == 0) {
    lm_run_opts o;
    memset(&o, 0, sizeof o);
    o.device = d->dev;
    o.num_replicas = info->num_replicas;
    o.num_partitions = info->num_partitions;
    o.replica_id = t->proc / info->num_partitions;
    o.partition_id = t->proc % info->num_partitions;
    o.cancel = &l->cancel;
    if (l->coll) lm_spmd_coll_opts(l->coll, &o);
    if (t->timing) lm_spmd_coll_record(&t->timing->coll);
    memset(res, 0, t->nout * sizeof *res);
    if (l->prog->pjrt) { /* device d->idx of the plugin serves Loom's device d->idx */
      rc = lm_pjrt_run(l->prog->pjrt, (int)d->idx, args, nargs, d->dev, l->prog->pjrt_results, res, t->nout, &err);
    } else if (l->prog->code->cut) { /* the same, segment by segment, with the collectives Loom's */
      rc = lm_pjrt_cut_run(l->prog->code->cut, (int)d->idx, &o, args, nargs, res, t->nout, &err);
    } else {
      rc = lm_program_run(l->prog->prog, NULL, &o, args, nargs, res, t->nout, &err);
    }
  }
  if (t->timing) {
    lm_spmd_coll_record(NULL);
    t->timing->end = uv_hrtime();
  }
  for (uint32_t i = 0; i < nargs; i++) lm_buffer_release(args[i]);
  if (rc == 0) {
    for (uint32_t i = 0; i < t->nout; i++) wk_slot_finish(&w->store, t->out[i], res[i], 0, NULL);
    if (t->timing) t->timing->stored = uv_hrtime();
  } else {
    if (rc == LOOM_CANCELLED && l->cancel)
      snprintf(msg, sizeof msg, "launch %llu was aborted: %s", (unsigned long long)l->seq,
               l->cancel_reason[0] ? l->cancel_reason : "cancelled");
    else
      snprintf(msg, sizeof msg, "worker %u device %u (process %u): %.900s", w->worker_id, d->idx, t->proc, err.msg);
    fail_outputs(w, t, rc, msg);
  }
  if (args != args_small) free(args);
  if (res != res_small) free(res);
}

static void *dev_main(void *arg) {
  wk_dev *d = arg;
  for (;;) {
    pthread_mutex_lock(&d->mu);
    while (!d->head && !d->stop) pthread_cond_wait(&d->cv, &d->mu);
    wk_task *t = d->head;
    if (t) {
      d->head = t->next;
      if (!d->head) d->tail = NULL;
    }
    pthread_mutex_unlock(&d->mu);
    if (!t) break; /* stopping and nothing queued */
    if (d->stop) { /* stopping: drop the rest */
      fail_outputs(d->w, t, LOOM_CANCELLED, "the worker is stopping");
    } else {
      run_task(d, t);
    }
    task_done(d->w, t);
  }
  return NULL;
}

static void enqueue(wk_dev *d, wk_task *t) {
  pthread_mutex_lock(&d->mu);
  t->next = NULL;
  if (d->tail) d->tail->next = t;
  else d->head = t;
  d->tail = t;
  pthread_cond_signal(&d->cv);
  pthread_mutex_unlock(&d->mu);
}

/* RUN_DONE goes where its RUN came from: the controller, a relay's connection (hierarchical
 * dispatch), or this worker's own relay (its part of a group it relays). */
static void send_run_done_timed(wk *w, uint64_t link, uint64_t seq, int code, const char *msg, const wk_launch *l) {
  Lmw__RunDone r = LMW__RUN_DONE__INIT;
  r.seq = seq;
  r.code = code;
  r.message = (char *)(msg ? msg : "");
  Lmw__DeviceTiming dt[64], *dtp[64];
  Lmw__CollectiveSpan *spans = NULL, **spanp = NULL;
  uint32_t nt = l && l->timings ? (l->ntimings < 64 ? l->ntimings : 64) : 0;
  if (nt) {
    spans = calloc((size_t)nt * LM_SPMD_MAX_SPANS, sizeof *spans);
    spanp = calloc((size_t)nt * LM_SPMD_MAX_SPANS, sizeof *spanp);
  }
  uint64_t now = uv_hrtime();
  for (uint32_t i = 0; i < nt; i++) {
    const wk_timing *t = &l->timings[i];
    lmw__device_timing__init(&dt[i]);
    dt[i].local_index = t->local_index;
    uint64_t start = t->start ? t->start : now, ready = t->ready ? t->ready : start, end = t->end ? t->end : ready;
    uint64_t stored = t->stored ? t->stored : end;
    dt[i].queued_ns = start - l->received;
    dt[i].inputs_ns = ready - start;
    dt[i].execute_ns = end - ready;
    dt[i].transfer_out_ns = stored - end;
    dt[i].report_ns = now - stored;
    dt[i].collective_ns = t->coll.nanos;
    dt[i].collective_calls = t->coll.calls;
    dt[i].collective_bytes = t->coll.bytes;
    if (spans && spanp) {
      Lmw__CollectiveSpan **sp = &spanp[(size_t)i * LM_SPMD_MAX_SPANS];
      for (uint32_t k = 0; k < t->coll.nspans; k++) {
        Lmw__CollectiveSpan *o = &spans[(size_t)i * LM_SPMD_MAX_SPANS + k];
        const lm_spmd_coll_span *c = &t->coll.spans[k];
        lmw__collective_span__init(o);
        o->op = (uint32_t)c->op;
        o->start_ns = c->start > ready ? c->start - ready : 0;
        o->dur_ns = c->dur;
        o->bytes = c->bytes;
        sp[k] = o;
      }
      dt[i].n_collectives = t->coll.nspans;
      dt[i].collectives = sp;
    }
    dtp[i] = &dt[i];
    r.n_timings = i + 1;
  }
  r.timings = dtp;
  if (link == WK_LINK_CTL) wk_send(w, LM_MSG_RUN_DONE, 0, &r.base);
  else if (link == WK_LINK_SELF) lm_relay_local_done(w->relay, &r);
  else wk_data_link_send(w, link, LM_MSG_RUN_DONE, &r.base); /* its relay is gone: dropped */
  free(spans);
  free(spanp);
}

static void send_run_done(wk *w, uint64_t link, uint64_t seq, int code, const char *msg) {
  send_run_done_timed(w, link, seq, code, msg, NULL);
}

/* Launches finished recently, by sequence number: a controller that restarted sends the RUNs it
 * had in flight again (same numbers), and each is answered from here instead of running twice. */
#define WK_RING 4096
struct wk_done_ring {
  uint64_t seq[WK_RING];
  int code[WK_RING];
  char *msg[WK_RING];          /* failures only */
};

static void ring_add(wk *w, uint64_t seq, int code, const char *msg) {
  if (!w->ring && !(w->ring = calloc(1, sizeof *w->ring))) return;
  size_t i = seq % WK_RING;
  free(w->ring->msg[i]);
  w->ring->seq[i] = seq;
  w->ring->code[i] = code;
  w->ring->msg[i] = code < 0 && msg ? strdup(msg) : NULL;
}

static bool ring_find(wk *w, uint64_t seq, int *code, const char **msg) {
  size_t i = seq % WK_RING;
  if (!w->ring || w->ring->seq[i] != seq) return false;
  *code = w->ring->code[i];
  *msg = w->ring->msg[i] ? w->ring->msg[i] : "";
  return true;
}

static void ring_free(wk *w) {
  if (!w->ring) return;
  for (size_t i = 0; i < WK_RING; i++) free(w->ring->msg[i]);
  free(w->ring);
  w->ring = NULL;
}

static void on_async(uv_async_t *a) {
  wk *w = a->data;
  pthread_mutex_lock(&w->done_mu);
  wk_launch *l = w->finished;
  w->finished = NULL;
  pthread_mutex_unlock(&w->done_mu);
  /* report in sequence order (the list is newest first) */
  wk_launch *rev = NULL;
  while (l) {
    wk_launch *n = l->done_next;
    l->done_next = rev;
    rev = l;
    l = n;
  }
  while (rev) {
    wk_launch *n = rev->done_next;
    if (rev->prev) rev->prev->next = rev->next;
    else w->active = rev->next;
    if (rev->next) rev->next->prev = rev->prev;
    send_run_done_timed(w, rev->link, rev->seq, rev->code, rev->msg, rev);
    ring_add(w, rev->seq, rev->code, rev->msg);
    launch_free(rev);
    rev = n;
  }
  wk_data_poll(w);
}

/* Fails a RUN before any task was queued: its outputs fail with the reason, RUN_DONE says so. */
static void reject_run(wk *w, uint64_t link, const Lmw__Run *m, int code, const char *msg) {
  for (size_t i = 0; i < m->n_devices; i++) {
    const Lmw__RunDevice *rd = m->devices[i];
    if (rd->local_index >= w->cfg.devices) continue;
    size_t nout = rd->n_outputs ? rd->n_outputs : m->n_outputs;
    const uint64_t *outs = rd->n_outputs ? rd->outputs : m->outputs;
    for (size_t j = 0; j < nout; j++) {
      wk_slot *s = wk_slot_new(m->session, outs[j], rd->local_index);
      if (!s) continue;
      wk_slot_finish(&w->store, s, NULL, code, msg);
      wk_store_put(&w->store, s);
      wk_slot_release(&w->store, s);
    }
  }
  ring_add(w, m->seq, code, msg);
  send_run_done(w, link, m->seq, code, msg);
}

void wk_on_run(wk *w, const Lmw__Run *m) { wk_on_run_from(w, m, WK_LINK_CTL); }

void wk_on_run_from(wk *w, const Lmw__Run *m, uint64_t link) {
  char msg[512];
  int done_code;
  const char *done_msg;
  if (m->seq && ring_find(w, m->seq, &done_code, &done_msg)) { /* sent again after a controller restart */
    lm_info("launch %llu was sent again: it ran already, answering with its outcome", (unsigned long long)m->seq);
    send_run_done(w, link, m->seq, done_code, done_msg);
    return;
  }
  for (wk_launch *l = w->active; l; l = l->next)
    if (l->seq == m->seq) return; /* running: its RUN_DONE goes out when it ends */
  for (size_t i = 0; i < m->n_free_ids; i++) /* deletes that waited for this RUN */
    wk_store_drop_array(&w->store, m->session, m->free_ids[i], w->cfg.devices);
  wk_program *p = find_program(w, m->program);
  if (!p) {
    snprintf(msg, sizeof msg, "worker %u has no program %llu loaded", w->worker_id, (unsigned long long)m->program);
    reject_run(w, link, m, LOOM_NOT_FOUND, msg);
    return;
  }
  const lm_spmd_info *info = p->info;
  /* where every process runs: in the RUN (the devices moved since loading) or from LOAD_PROGRAM */
  const uint32_t *proc_workers = m->n_proc_workers ? m->proc_workers : p->proc_workers;
  const uint32_t *proc_devices = m->n_proc_workers ? m->proc_devices : p->proc_devices;
  bool bad = (m->n_proc_workers && m->n_proc_workers != info->nproc) || m->n_proc_devices != m->n_proc_workers ||
             m->n_devices == 0 || m->n_devices > w->cfg.devices;
  /* each device once: marked in a bitmap of the worker's devices (O(devices), not O(devices^2)) */
  uint64_t seen_small[4] = {0}, *seen = seen_small;
  size_t words = (w->cfg.devices + 63) / 64;
  if (!bad && words > 4 && !(seen = calloc(words, sizeof *seen))) {
    reject_run(w, link, m, LOOM_NO_MEMORY, "out of host memory on the worker");
    return;
  }
  for (size_t i = 0; !bad && i < m->n_devices; i++) {
    const Lmw__RunDevice *rd = m->devices[i];
    size_t nin = rd->n_inputs ? rd->n_inputs : m->n_inputs, nout = rd->n_outputs ? rd->n_outputs : m->n_outputs;
    uint32_t li = rd->local_index;
    bad = li >= w->cfg.devices || (seen[li / 64] >> (li % 64) & 1) || rd->process >= info->nproc ||
          nin != info->ninputs || nout != info->noutputs;
    if (!bad) seen[li / 64] |= UINT64_C(1) << (li % 64);
  }
  if (seen != seen_small) free(seen);
  if (bad) {
    snprintf(msg, sizeof msg, "worker %u: malformed RUN for launch %llu", w->worker_id, (unsigned long long)m->seq);
    reject_run(w, link, m, LOOM_PROTOCOL, msg);
    return;
  }
  if (wk_store_session_closed(&w->store, m->session)) {
    send_run_done(w, link, m->seq, LOOM_CANCELLED, "the session is closed");
    return;
  }
  wk_launch *l = calloc(1, sizeof *l);
  wk_task **tasks = calloc(m->n_devices, sizeof *tasks);
  if (!l || !tasks) {
    free(l);
    free(tasks);
    reject_run(w, link, m, LOOM_NO_MEMORY, "out of host memory on the worker");
    return;
  }
  l->w = w;
  l->link = link;
  l->seq = m->seq;
  l->session = m->session;
  l->prog = p;
  atomic_fetch_add(&p->refs, 1);
  pthread_mutex_init(&l->mu, NULL);
  int rc = 0;
  if (m->want_timings && m->n_devices <= 64) { /* a trace is recording: cheap, and only then */
    l->received = uv_hrtime();
    l->timings = calloc(m->n_devices, sizeof *l->timings);
    l->ntimings = l->timings ? (uint32_t)m->n_devices : 0;
  }
  /* the processes' (worker, device), which the collectives copy; a program without collectives is
   * loaded without the map (its collectives would fail with "no collective support") */
  if (info->nproc > 1 && w->dp && proc_workers) {
    lm_err err;
    lm_dp_member *procs = calloc(info->nproc, sizeof *procs);
    if (!procs) rc = lm_errf(&err, LOOM_NO_MEMORY, "out of host memory");
    for (uint32_t i = 0; rc == 0 && i < info->nproc; i++)
      procs[i] = (lm_dp_member){proc_workers[i], proc_devices[i]};
    if (rc == 0) rc = lm_spmd_coll_create(w->dp, procs, info->nproc, m->seq, &l->coll, &err);
    if (rc == 0) lm_spmd_coll_set_stats(l->coll, &w->cstats);
    free(procs);
    if (rc < 0) snprintf(msg, sizeof msg, "worker %u: cannot set up the launch's collectives: %.400s", w->worker_id, err.msg);
  }
  for (size_t i = 0; rc == 0 && i < m->n_devices; i++) {
    const Lmw__RunDevice *rd = m->devices[i];
    size_t nin = rd->n_inputs ? rd->n_inputs : m->n_inputs, nout = rd->n_outputs ? rd->n_outputs : m->n_outputs;
    const uint64_t *ins = rd->n_inputs ? rd->inputs : m->inputs, *outs = rd->n_outputs ? rd->outputs : m->outputs;
    wk_task *t = calloc(1, sizeof *t);
    wk_slot **sl = calloc(nin + nout + 1, sizeof *sl);
    if (!t || !sl) {
      free(t);
      free(sl);
      rc = LOOM_NO_MEMORY;
      snprintf(msg, sizeof msg, "out of host memory on worker %u", w->worker_id);
      break;
    }
    t->l = l;
    t->dev = rd->local_index;
    if (l->timings) {
      t->timing = &l->timings[i];
      t->timing->local_index = rd->local_index;
    }
    t->proc = rd->process;
    t->nin = (uint32_t)nin;
    t->nout = (uint32_t)nout;
    t->in = sl;
    t->out = sl + nin;
    for (uint32_t j = 0; j < t->nin; j++) {
      t->in[j] = wk_store_get(&w->store, m->session, ins[j], t->dev);
      if (!t->in[j] && !t->missing) t->missing = ins[j];
    }
    for (uint32_t j = 0; j < t->nout; j++) {
      t->out[j] = wk_slot_new(m->session, outs[j], t->dev);
      if (t->out[j]) wk_store_put(&w->store, t->out[j]);
      else rc = LOOM_NO_MEMORY;
    }
    tasks[i] = t;
    if (rc < 0) snprintf(msg, sizeof msg, "out of host memory on worker %u", w->worker_id);
  }
  atomic_init(&l->remaining, (unsigned)m->n_devices);
  l->prev = NULL;
  l->next = w->active;
  if (w->active) w->active->prev = l;
  w->active = l;
  for (size_t i = 0; i < m->n_devices; i++) {
    wk_task *t = tasks[i];
    if (rc < 0) { /* fail every task, through the normal completion path */
      if (!t) {
        if (atomic_fetch_sub(&l->remaining, 1) == 1) {
          pthread_mutex_lock(&w->done_mu);
          l->done_next = w->finished;
          w->finished = l;
          pthread_mutex_unlock(&w->done_mu);
          uv_async_send(&w->async);
        }
        continue;
      }
      for (uint32_t j = 0; j < t->nout; j++)
        if (t->out[j]) wk_slot_finish(&w->store, t->out[j], NULL, rc, msg);
      launch_fail(l, rc, msg);
      task_done(w, t);
      continue;
    }
    enqueue(&w->devs[t->dev], t);
  }
  free(tasks);
}

static wk_launch *find_launch(wk *w, uint64_t seq) {
  for (wk_launch *l = w->active; l; l = l->next)
    if (l->seq == seq) return l;
  return NULL;
}

/* Sets a launch's cancel flag: running tasks stop at the next op or collective call, which poll
 * it; tasks waiting for inputs wake up and give up, and so do tasks blocked in a collective
 * (lm_dp_wake). Loop thread (which also destroys w->dp, after every call here). */
static void cancel_launch(wk *w, wk_launch *l, const char *why) {
  if (l->cancel) return;
  snprintf(l->cancel_reason, sizeof l->cancel_reason, "%s", why);
  __atomic_store_n(&l->cancel, 1, __ATOMIC_SEQ_CST);
  pthread_mutex_lock(&w->store.mu); /* wake device threads waiting for inputs */
  pthread_cond_broadcast(&w->store.cv);
  pthread_mutex_unlock(&w->store.mu);
  lm_dp_wake(w->dp); /* ... and those waiting in the data plane (NULL: none) */
}

/* Takes the tasks of cancelled launches out of every device's queue at once (one pass per
 * queue, however many launches were cancelled): their outputs fail now, so launches and gets
 * waiting on them go on, and the devices never see them. Loop thread. */
static void drop_cancelled(wk *w) {
  char msg[LM_ERR_MSG_MAX];
  for (uint32_t i = 0; w->devs && i < w->cfg.devices; i++) {
    wk_dev *d = &w->devs[i];
    if (!d->started) continue;
    wk_task *dropped = NULL, **tail = &dropped;
    pthread_mutex_lock(&d->mu);
    wk_task *prev = NULL;
    for (wk_task *t = d->head; t;) {
      wk_task *n = t->next;
      if (t->l->cancel) {
        if (prev) prev->next = n;
        else d->head = n;
        if (d->tail == t) d->tail = prev;
        t->next = NULL;
        *tail = t; /* keep queue order: launches are reported in it */
        tail = &t->next;
      } else {
        prev = t;
      }
      t = n;
    }
    pthread_mutex_unlock(&d->mu);
    while (dropped) { /* outside the queue's lock: finishing slots takes the store's */
      wk_task *n = dropped->next;
      wk_launch *l = dropped->l;
      snprintf(msg, sizeof msg, "launch %llu was aborted: %s", (unsigned long long)l->seq,
               l->cancel_reason[0] ? l->cancel_reason : "cancelled");
      fail_outputs(w, dropped, LOOM_CANCELLED, msg);
      task_done(w, dropped); /* may hand l to the finished list: freed later, on this thread */
      dropped = n;
    }
  }
}

void wk_on_abort(wk *w, const Lmw__AbortLaunch *m) {
  wk_launch *l = find_launch(w, m->seq);
  if (!l || l->cancel) return;
  cancel_launch(w, l, m->reason && m->reason[0] ? m->reason : "aborted by the controller");
  drop_cancelled(w);
}

void wk_on_session_closed(wk *w, uint64_t session) {
  for (wk_launch *l = w->active; l; l = l->next)
    if (l->session == session) cancel_launch(w, l, "its session closed");
  drop_cancelled(w);
  wk_store_close_session(&w->store, session);
  wk_data_session_closed(w, session);
}

/* ---- RUNs forwarded by a relay (hierarchical dispatch, docs/scale.md) ---- */

/* A relayed RUN waits until this worker has read every message the controller sent it before the
 * launch (Run.min_cseq): a program load, frees, a shard copy the launch reads. They run in the
 * order they came, after any that wait. */
typedef struct wk_relayed {
  uint64_t link;
  Lmw__Run *m;
  struct wk_relayed *next;
} wk_relayed;

void wk_relayed_poll(wk *w) {
  while (w->relayed && w->relayed->m->min_cseq <= w->cseq) {
    wk_relayed *x = w->relayed;
    w->relayed = x->next;
    wk_on_run_from(w, x->m, x->link);
    lm_msg_free(&x->m->base);
    free(x);
  }
}

void wk_relayed_run(wk *w, uint64_t link, Lmw__Run *m) {
  if (!w->relayed && m->min_cseq <= w->cseq) {
    wk_on_run_from(w, m, link);
    lm_msg_free(&m->base);
    return;
  }
  wk_relayed *x = calloc(1, sizeof *x);
  if (!x) {
    reject_run(w, link, m, LOOM_NO_MEMORY, "out of host memory on the worker");
    lm_msg_free(&m->base);
    return;
  }
  x->link = link;
  x->m = m;
  wk_relayed **pp = &w->relayed;
  while (*pp) pp = &(*pp)->next;
  *pp = x;
}

/* An ABORT_LAUNCH from a relay: a RUN still waiting is answered as cancelled. */
void wk_relayed_abort(wk *w, uint64_t link, const Lmw__AbortLaunch *m) {
  for (wk_relayed **pp = &w->relayed; *pp; pp = &(*pp)->next)
    if ((*pp)->m->seq == m->seq && (*pp)->link == link) {
      wk_relayed *x = *pp;
      *pp = x->next;
      char msg[400];
      snprintf(msg, sizeof msg, "launch %llu was aborted: %.300s", (unsigned long long)m->seq,
               m->reason && m->reason[0] ? m->reason : "aborted by the controller");
      reject_run(w, link, x->m, LOOM_CANCELLED, msg);
      lm_msg_free(&x->m->base);
      free(x);
      return;
    }
  wk_on_abort(w, m);
}

/* The relay behind link is gone: its launches here cannot report and the rest of the launch was
 * failed by the controller; they stop (and RUNs still waiting are dropped). */
void wk_relay_link_gone(wk *w, uint64_t link, const char *why) {
  for (wk_relayed **pp = &w->relayed; *pp;) {
    wk_relayed *x = *pp;
    if (x->link != link) {
      pp = &x->next;
      continue;
    }
    *pp = x->next;
    lm_msg_free(&x->m->base);
    free(x);
  }
  bool any = false;
  for (wk_launch *l = w->active; l; l = l->next)
    if (l->link == link) cancel_launch(w, l, why), any = true;
  if (any) {
    lm_info("%s: stopping the launches it forwarded", why);
    drop_cancelled(w);
  }
}

static void relayed_free(wk *w) {
  while (w->relayed) {
    wk_relayed *x = w->relayed;
    w->relayed = x->next;
    lm_msg_free(&x->m->base);
    free(x);
  }
}

/* ---- start / stop ---- */

int wk_exec_start(wk *w, lm_err *err) {
  pthread_mutex_init(&w->done_mu, NULL);
  int blas = lm_blas_share_cores(w->cfg.devices); /* SPMD launches keep every device busy at once */
  if (blas) lm_debug("BLAS calls use %d thread(s) each (%u devices; OPENBLAS_NUM_THREADS overrides)", blas, w->cfg.devices);
  if (uv_async_init(&w->loop, &w->async, on_async) != 0)
    return lm_errf(err, LOOM_INTERNAL, "cannot create the async handle");
  w->async.data = w;
  w->async_open = true;
  for (uint32_t i = 0; i < w->cfg.devices; i++) {
    wk_dev *d = &w->devs[i];
    d->w = w;
    d->idx = i;
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->cv, NULL);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* signals belong to the loop thread */
    int rc = pthread_create(&d->th, NULL, dev_main, d);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) return lm_errf(err, LOOM_NO_MEMORY, "cannot start device thread %u", i);
    d->started = true;
  }
  return 0;
}

void wk_exec_stop(wk *w) {
  relayed_free(w);
  ring_free(w);
  for (wk_launch *l = w->active; l; l = l->next) cancel_launch(w, l, "the worker is stopping");
  lm_dp_shutdown(w->dp); /* and none waits for a stopped peer to release its buffers */
  for (uint32_t i = 0; w->devs && i < w->cfg.devices; i++) {
    wk_dev *d = &w->devs[i];
    if (!d->started) continue;
    pthread_mutex_lock(&d->mu);
    d->stop = true;
    pthread_cond_signal(&d->cv);
    pthread_mutex_unlock(&d->mu);
  }
  for (uint32_t i = 0; w->devs && i < w->cfg.devices; i++) {
    wk_dev *d = &w->devs[i];
    if (!d->started) continue;
    pthread_join(d->th, NULL);
    d->started = false;
    pthread_mutex_destroy(&d->mu);
    pthread_cond_destroy(&d->cv);
  }
  /* every task is done now: free the launches without reporting */
  pthread_mutex_lock(&w->done_mu);
  wk_launch *l = w->finished;
  w->finished = NULL;
  pthread_mutex_unlock(&w->done_mu);
  while (l) {
    wk_launch *n = l->done_next;
    if (l->prev) l->prev->next = l->next;
    else w->active = l->next;
    if (l->next) l->next->prev = l->prev;
    launch_free(l);
    l = n;
  }
  while (w->programs) {
    wk_program *p = w->programs;
    w->programs = p->next;
    wk_program_release(p);
  }
  wk_texts_free(w);
  pthread_mutex_destroy(&w->done_mu);
}
