/* Compiling at the controller: the module is parsed, verified and its SPMD form analyzed (an
 * annotated global program partitioned) here once, on libuv's thread pool (errors reach the
 * client at compile time), checked against the devices asked for, then
 * loaded by every worker that holds one of those devices (LOAD_PROGRAM, each worker answers
 * ACK or ERROR); the COMPILE reply is sent when all have loaded it. Programs are cached by the
 * text and the device list: a second identical compile, from any session, reuses the program.
 * Programs no executable names any more stay cached (up to IDLE_MAX) and are then unloaded. */
#define _GNU_SOURCE /* memmem */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/hash.h"
#include "common/log.h"
#include "controller/ctl.h"
#include "hlo/lex.h"
#include "hlo/parse.h"
#include "journal.pb-c.h"

#define IDLE_MAX 16
#define SENT_MAX 32 /* texts remembered per worker (it may have dropped some: it then says NOT_FOUND) */

/* The texts a worker was sent, by digest (newest SENT_MAX), so the same text is not sent twice. */
typedef struct c_sent {
  uint8_t d[SENT_MAX][32];
  uint32_t n, next;
} c_sent;

static c_sent *sent_of(ctl *c, uint32_t worker, bool make) {
  if (worker >= c->sent_cap) {
    if (!make) return NULL;
    uint32_t cap = c->sent_cap ? c->sent_cap : 64;
    while (cap <= worker) cap *= 2;
    c_sent *a = realloc(c->sent, cap * sizeof *a);
    if (!a) return NULL;
    memset(a + c->sent_cap, 0, (cap - c->sent_cap) * sizeof *a);
    c->sent = a;
    c->sent_cap = cap;
  }
  return &c->sent[worker];
}

static bool sent_has(ctl *c, uint32_t worker, const uint8_t *d) {
  c_sent *s = sent_of(c, worker, false);
  for (uint32_t i = 0; s && i < s->n; i++)
    if (!memcmp(s->d[i], d, 32)) return true;
  return false;
}

static void sent_add(ctl *c, uint32_t worker, const uint8_t *d) {
  c_sent *s = sent_of(c, worker, true);
  if (!s || sent_has(c, worker, d)) return;
  memcpy(s->d[s->next], d, 32);
  s->next = (s->next + 1) % SENT_MAX;
  if (s->n < SENT_MAX) s->n++;
}

static void sent_drop(ctl *c, uint32_t worker, const uint8_t *d) {
  c_sent *s = sent_of(c, worker, false);
  for (uint32_t i = 0; s && i < s->n; i++)
    if (!memcmp(s->d[i], d, 32)) memset(s->d[i], 0, 32); /* an all-zero digest names no text */
}

typedef struct c_load load_req;

typedef struct waiter_ext {
  c_waiter w;
  uint64_t exe_id;
} waiter_ext;

/* A program's text is sent to every worker from the one copy (no copy per worker): it lives in a
 * block with a reference count, held by the program and by each LOAD_PROGRAM being written. */
typedef struct text_block {
  int refs;
  char data[];
} text_block;

static char *text_new(size_t len) {
  text_block *b = malloc(sizeof *b + (len ? len : 1));
  if (!b) return NULL;
  b->refs = 1;
  return b->data;
}

static text_block *text_block_of(char *text) { return (text_block *)(text - offsetof(text_block, data)); }

static void text_release(void *text) {
  if (!text) return;
  text_block *b = text_block_of(text);
  if (--b->refs == 0) free(b);
}

static void program_free(c_program *p) {
  if (!p) return;
  if (p->held) ctl_release(p->held, p->devices, p->ndev);
  c_waiter *w = p->waiters;
  while (w) {
    c_waiter *n = w->next;
    free(w);
    w = n;
  }
  text_release(p->text);
  free(p->name);
  free(p->devices);
  free(p->proc_pos);
  free(p->loads);
  free(p->asked);
  ctl_plan_release(p->plan);
  lm_spmd_info_free(p->info);
  free(p);
}

static load_req *loads_of(c_program *p) { return p->loads; }

static void unlink_program(ctl *c, c_program *p) {
  for (c_program **pp = &c->programs; *pp; pp = &(*pp)->next)
    if (*pp == p) {
      *pp = p->next;
      return;
    }
}

/* Sends load k of prog: without the text when the worker was sent it before. */
static int send_load(ctl *c, c_program *prog, uint32_t k, lm_err *err) {
  struct c_load *ld = &prog->loads[k];
  Lmw__LoadProgram lp = LMW__LOAD_PROGRAM__INIT;
  lp.program = prog->id;
  lp.name = prog->name;
  if (prog->needs_map) { /* only programs whose processes talk need it (it is O(processes)) */
    lp.n_proc_workers = lp.n_proc_devices = prog->ndev;
    lp.proc_workers = prog->plan->proc_worker;
    lp.proc_devices = prog->plan->proc_local;
  }
  lp.text_digest.data = prog->digest;
  lp.text_digest.len = sizeof prog->digest;
  ld->textless = sent_has(c, ld->worker, prog->digest);
  if (ld->textless) return ctl_worker_send(c, ld->worker, LM_MSG_LOAD_PROGRAM, ld->rid, &lp.base, NULL, 0, err);
  text_block_of(prog->text)->refs++; /* the send's reference: released once written (or on failure) */
  LM_TRY(ctl_worker_send_ref(c, ld->worker, LM_MSG_LOAD_PROGRAM, ld->rid, &lp.base, prog->text, prog->len,
                             text_release, prog->text, err));
  sent_add(c, ld->worker, prog->digest);
  return 0;
}

static void unload_everywhere(ctl *c, c_program *p) {
  Lmw__UnloadProgram u = LMW__UNLOAD_PROGRAM__INIT;
  u.program = p->id;
  /* every worker that was sent the program, answered or not: an UNLOAD follows its LOAD */
  for (uint32_t i = 0; i < p->nloads; i++)
    ctl_worker_send(c, p->loads[i].worker, LM_MSG_UNLOAD_PROGRAM, 0, &u.base, NULL, 0, NULL);
}

static void exe_destroy(void *obj) {
  c_exe *e = obj;
  ctl_program_release(e->ctl, e->prog);
  free(e);
}

/* Evicts idle programs beyond IDLE_MAX, oldest first. */
static void evict_idle(ctl *c) {
  for (;;) {
    uint32_t idle = 0;
    c_program *oldest = NULL;
    for (c_program *p = c->programs; p; p = p->next)
      if (p->refs == 0 && p->state == P_READY) {
        idle++;
        if (!oldest || p->idle_since < oldest->idle_since) oldest = p;
      }
    if (idle <= IDLE_MAX || !oldest) return;
    unlink_program(c, oldest);
    unload_everywhere(c, oldest);
    ctl_j_program_del(c, oldest->id);
    program_free(oldest);
  }
}

void ctl_program_release(ctl *c, c_program *p) {
  if (!p || --p->refs > 0) return;
  p->idle_since = ctl_now_ms(c);
  evict_idle(c);
}

/* Builds the COMPILE reply for p and sends it to one client request. */
static void send_compile_reply(ctl *c, peer *client, uint64_t rid, c_program *p, bool cached) {
  const lm_spmd_info *info = p->info;
  uint32_t nv = info->ninputs + info->noutputs;
  uint32_t *mesh_devs = calloc(info->nproc, sizeof *mesh_devs);
  Lmw__ValueInfo *vi = calloc(nv ? nv : 1, sizeof *vi);
  Lmw__ValueInfo **vptr = calloc(nv ? nv : 1, sizeof *vptr);
  Lmw__Sharding *sh = calloc(nv ? nv : 1, sizeof *sh);
  Lmw__DimAxes *dims = calloc((size_t)(nv ? nv : 1) * LM_SHARD_MAX_RANK, sizeof *dims);
  Lmw__DimAxes **dptr = calloc((size_t)(nv ? nv : 1) * LM_SHARD_MAX_RANK, sizeof *dptr);
  uint32_t *axes = calloc((size_t)(nv ? nv : 1) * LM_SHARD_MAX_RANK * LM_MESH_MAX_AXES, sizeof *axes);
  uint64_t *nums = calloc((size_t)(nv ? nv : 1) * (LM_SHARD_MAX_RANK + LM_MESH_MAX_AXES), sizeof *nums);
  if (!mesh_devs || !vi || !vptr || !sh || !dims || !dptr || !axes || !nums) {
    ctl_reply_error(client, rid, LOOM_NO_MEMORY, "out of host memory");
  } else {
    for (uint32_t m = 0; m < info->nproc; m++) mesh_devs[m] = p->devices[info->mesh_procs[m]];
    ctl_pool_map_out(client, mesh_devs, info->nproc); /* a pool session's own numbering */
    uint32_t *rdevs = malloc((p->ndev ? p->ndev : 1) * sizeof *rdevs);
    if (rdevs && p->ndev) memcpy(rdevs, p->devices, p->ndev * sizeof *rdevs);
    if (rdevs) ctl_pool_map_out(client, rdevs, p->ndev);
    for (uint32_t i = 0; i < nv; i++) {
      const lm_spmd_value *v = i < info->ninputs ? &info->inputs[i] : &info->outputs[i - info->ninputs];
      lm_sharding s = v->sh;
      s.devices = mesh_devs;
      uint64_t *gd = nums + (size_t)i * (LM_SHARD_MAX_RANK + LM_MESH_MAX_AXES);
      ctl_sharding_to_wire(&s, v->global.rank, &sh[i], dims + (size_t)i * LM_SHARD_MAX_RANK,
                           dptr + (size_t)i * LM_SHARD_MAX_RANK, axes + (size_t)i * LM_SHARD_MAX_RANK * LM_MESH_MAX_AXES,
                           gd + LM_SHARD_MAX_RANK);
      lmw__value_info__init(&vi[i]);
      vi[i].dtype = v->global.dtype;
      for (int d = 0; d < v->global.rank; d++) gd[d] = (uint64_t)v->global.dims[d];
      vi[i].n_dims = v->global.rank;
      vi[i].dims = gd;
      vi[i].sharding = &sh[i];
      vptr[i] = &vi[i];
    }
    Lmw__CompileReply r = LMW__COMPILE_REPLY__INIT;
    r.form = (char *)lm_spmd_form_name(info->form);
    r.num_replicas = (uint32_t)info->num_replicas;
    r.num_partitions = (uint32_t)info->num_partitions;
    r.n_devices = rdevs ? p->ndev : 0;
    r.devices = rdevs;
    r.n_inputs = info->ninputs;
    r.inputs = vptr;
    r.n_outputs = info->noutputs;
    r.outputs = vptr + info->ninputs;
    r.fingerprint = p->fingerprint;
    r.cached = cached;
    lm_err err;
    if (lm_conn_send(client->conn, LM_MSG_COMPILE_REPLY, rid, &r.base, NULL, 0, NULL, NULL, &err) < 0 &&
        lm_conn_is_open(client->conn))
      lm_warn("cannot reply to %s: %s", lm_conn_peer_name(client->conn), err.msg);
    free(rdevs);
  }
  free(mesh_devs), free(vi), free(vptr), free(sh), free(dims), free(dptr), free(axes), free(nums);
  (void)c;
}

/* Gives the client its executable handle for p and the reply. */
static void finish_compile(ctl *c, peer *client, uint64_t rid, uint64_t exe_id, c_program *p, bool cached) {
  c_exe *e = calloc(1, sizeof *e);
  lm_err err;
  if (!e) {
    ctl_reply_error(client, rid, LOOM_NO_MEMORY, "out of host memory");
    return;
  }
  e->ctl = c;
  e->prog = p;
  if (lm_session_add_id(client->session, exe_id, H_EXECUTABLE, e, exe_destroy, &err) < 0) {
    free(e); /* not taken: its destroy does not run */
    ctl_reply_error(client, rid, err.code, "%s", err.msg);
    return;
  }
  p->refs++;
  ctl_j_exe(c, client->session->id, exe_id, p->id);
  send_compile_reply(c, client, rid, p, cached);
}

/* Every load answered (or one failed): answer the waiting compiles. */
static void loads_settled(ctl *c, c_program *p) {
  c_waiter *w = p->waiters;
  p->waiters = NULL;
  while (w) {
    c_waiter *n = w->next;
    waiter_ext *we = (waiter_ext *)w;
    if (w->done) {
      w->done(c, p, w->arg);
    } else if (w->client) {
      if (p->state == P_READY) finish_compile(c, w->client, w->rid, we->exe_id, p, false);
      else ctl_reply_error(w->client, w->rid, p->code, "%s", p->msg);
    }
    free(w);
    w = n;
  }
  if (p->state == P_FAILED) {
    unlink_program(c, p);
    unload_everywhere(c, p);
    program_free(p);
  } else if (p->refs == 0) {
    p->idle_since = ctl_now_ms(c);
    evict_idle(c);
  }
}

static void program_fail(ctl *c, c_program *p, int code, const char *msg) {
  if (p->state != P_LOADING && p->state != P_ANALYZING) return;
  p->state = P_FAILED;
  p->code = code < 0 ? code : LOOM_INTERNAL;
  size_t k = strlen(msg);
  if (k >= sizeof p->msg) k = sizeof p->msg - 1;
  memcpy(p->msg, msg, k);
  p->msg[k] = 0;
  loads_settled(c, p);
}

void ctl_on_load_reply(ctl *c, peer *w, const lm_frame *f) {
  for (c_program *p = c->programs; p; p = p->next) {
    if (p->state != P_LOADING) continue;
    uint32_t k = ctl_plan_worker_index(p->plan, w->worker_id); /* loads[k] went to plan->workers[k] */
    if (k >= p->nloads || p->loads[k].worker != w->worker_id || p->loads[k].rid != f->h.request_id) continue;
    if (f->h.type == LM_MSG_ERROR) {
      lm_err err;
      int code = lm_msg_error_status(f, &err);
      if (code == LOOM_NOT_FOUND && p->loads[k].textless) { /* it no longer holds the text: send it */
        lm_debug("worker %u no longer holds the text of program %llu: sending it", w->worker_id,
                 (unsigned long long)p->id);
        sent_drop(c, w->worker_id, p->digest);
        if (send_load(c, p, k, &err) == 0) return;
        code = err.code;
      }
      p->loads[k].rid = 0;
      program_fail(c, p, code, err.msg);
      return;
    }
    p->loads[k].rid = 0;
    if (--p->loads_pending == 0) {
      p->state = P_READY;
      ctl_j_program(c, p); /* before any executable names it */
      lm_debug("program %llu (%s) loaded on %u workers", (unsigned long long)p->id, p->name, p->nloads);
      loads_settled(c, p);
    }
    return;
  }
  /* a load of a program that already failed elsewhere (and was unloaded): nothing to do */
  lm_debug("worker %u answered request %llu, which is no longer pending", w->worker_id,
           (unsigned long long)f->h.request_id);
}

void ctl_programs_worker_lost(ctl *c, uint32_t worker, const char *why) {
  c_sent *sent = sent_of(c, worker, false); /* a worker in its slot later holds no text */
  if (sent) memset(sent, 0, sizeof *sent);
  c_program *p = c->programs;
  while (p) {
    c_program *n = p->next;
    if (p->state == P_LOADING) {
      load_req *lr = loads_of(p);
      for (uint32_t i = 0; i < p->nloads; i++)
        if (lr[i].rid && lr[i].worker == worker) {
          char wn[160], msg[LM_ERR_MSG_MAX];
          ctl_worker_name(c, worker, wn, sizeof wn);
          snprintf(msg, sizeof msg, "%s was lost while loading the program: %s", wn, why);
          program_fail(c, p, LOOM_WORKER_LOST, msg);
          break;
        }
    } else if (p->state == P_READY && p->refs == 0) { /* cached, unused, and never runnable again as loaded:
                                                        drop it, so its devices' ids can be reclaimed */
      load_req *lr = loads_of(p);
      for (uint32_t i = 0; i < p->nloads; i++)
        if (lr[i].worker == worker) {
          unlink_program(c, p);
          unload_everywhere(c, p);
          ctl_j_program_del(c, p->id);
          program_free(p);
          break;
        }
    }
    p = n;
  }
}

void ctl_programs_client_gone(ctl *c, peer *client) {
  for (c_program *p = c->programs; p; p = p->next)
    for (c_waiter *w = p->waiters; w; w = w->next)
      if (w->client == client) w->client = NULL;
}

void ctl_programs_free(ctl *c) {
  free(c->sent);
  c->sent = NULL;
  c->sent_cap = 0;
  while (c->programs) {
    c_program *p = c->programs;
    c->programs = p->next;
    program_free(p);
  }
}

static uint64_t fingerprint(const char *text, size_t len, const uint32_t *devs, size_t ndev) {
  uint64_t h = lm_hash64(text, len, LM_HASH_SEED);
  h = lm_hash64(devs, ndev * sizeof *devs, h ^ (ndev + 1));
  return lm_hash_mix(h);
}

/* Compiling: parse + analyze on the thread pool (analyze_work), then on the loop thread the
 * device checks and one LOAD_PROGRAM per worker holding a device (analyze_done). */
typedef struct analyze_job {
  uv_work_t req;
  ctl *c;
  c_program *prog;   /* owned by c->programs meanwhile (state P_ANALYZING): text, name stay put */
  int rc;
  lm_err err;
  lm_spmd_info *info;
} analyze_job;

/* Does region r (nested regions too) have an op that exchanges data between processes? */
static bool has_collectives(const lm_region *r) {
  for (uint32_t b = 0; b < r->nblocks; b++)
    for (uint32_t i = 0; i < r->blocks[b].nops; i++) {
      const lm_op *op = &r->blocks[b].ops[i];
      switch (op->code) {
        case LM_OP_ALL_REDUCE: case LM_OP_ALL_GATHER: case LM_OP_REDUCE_SCATTER: case LM_OP_ALL_TO_ALL:
        case LM_OP_COLLECTIVE_PERMUTE: case LM_OP_COLLECTIVE_BROADCAST: case LM_OP_SEND: case LM_OP_RECV:
          return true;
        default: break;
      }
      for (uint32_t k = 0; k < op->nregions; k++)
        if (has_collectives(&op->regions[k])) return true;
    }
  return false;
}

static void analyze_work(uv_work_t *req) {
  analyze_job *j = req->data;
  lm_module *mod = NULL;
  lm_parse_opts po = {.filename = j->prog->name};
  lm_sha256(j->prog->text, j->prog->len, j->prog->digest); /* its content address, off the loop too */
  j->rc = lm_parse_module(j->prog->text, j->prog->len, &po, &mod, &j->err);
  if (j->rc == 0) j->rc = lm_spmd_analyze(mod, &j->info, &j->err);
  if (j->rc == 0 && j->info->nproc > 1) { /* the partitioner may add collectives at the workers */
    bool talk = j->info->partitioned;
    for (uint32_t f = 0; !talk && f < mod->nfuncs; f++) talk = has_collectives(&mod->funcs[f].body);
    j->prog->needs_map = talk;
  }
  lm_module_free(mod);
}

static void analyze_done(uv_work_t *req, int status) {
  analyze_job *j = req->data;
  ctl *c = j->c;
  c_program *prog = j->prog;
  lm_spmd_info *info = j->info;
  int rc = j->rc;
  lm_err err = j->err;
  free(j);
  if (status < 0 && rc == 0) rc = lm_errf(&err, LOOM_CANCELLED, "compilation cancelled");
  if (rc < 0) {
    lm_spmd_info_free(info);
    program_fail(c, prog, rc, err.msg);
    return;
  }
  prog->info = info;
  const char *name = prog->name;
  uint32_t n = info->nproc, ndevs = lm_registry_device_count(c->reg);
  char shape[96], msg[LM_ERR_MSG_MAX + 256];
  snprintf(shape, sizeof shape, "%lld replica%s x %lld partition%s", (long long)info->num_replicas,
           info->num_replicas == 1 ? "" : "s", (long long)info->num_partitions, info->num_partitions == 1 ? "" : "s");
  if (prog->asked_prefix && n > prog->nasked) {
    snprintf(msg, sizeof msg, "%s needs %u devices (%s) but the session has %zu (it asked the pool for them)", name, n,
             shape, prog->nasked);
    program_fail(c, prog, LOOM_INVALID_ARGUMENT, msg);
    return;
  }
  if (prog->nasked && prog->nasked != n && !prog->asked_prefix) {
    snprintf(msg, sizeof msg, "%s runs %u processes (%s) but %zu devices were given", name, n, shape, prog->nasked);
    program_fail(c, prog, LOOM_INVALID_ARGUMENT, msg);
    return;
  }
  if (!prog->nasked && n > ndevs) {
    snprintf(msg, sizeof msg, "%s needs %u devices (%s) but the cluster has %u", name, n, shape, ndevs);
    program_fail(c, prog, LOOM_INVALID_ARGUMENT, msg);
    return;
  }
  prog->devices = calloc(n, sizeof *prog->devices);
  prog->proc_pos = calloc(n, sizeof *prog->proc_pos);
  prog->loads = calloc(n, sizeof *prog->loads);
  if (!prog->devices || !prog->proc_pos || !prog->loads) {
    program_fail(c, prog, LOOM_NO_MEMORY, "out of host memory");
    return;
  }
  prog->ndev = n;
  for (uint32_t i = 0; i < n; i++) prog->devices[i] = prog->nasked ? prog->asked[i] : i;
  for (uint32_t pos = 0; pos < n; pos++) prog->proc_pos[info->mesh_procs[pos]] = pos;
  rc = ctl_check_devices(c, prog->devices, n, "the device list", &err);
  if (rc == 0) prog->held = ctl_hold(c, prog->devices, n);
  if (rc < 0) {
    snprintf(msg, sizeof msg, "cannot compile %s: %s", name, err.msg);
    program_fail(c, prog, rc, msg);
    return;
  }
  if (ctl_plan_build(c, prog, &err) < 0) {
    program_fail(c, prog, err.code, err.msg);
    return;
  }
  prog->state = P_LOADING;
  /* one LOAD_PROGRAM per worker holding a device (loads[k] to workers[k]), with the map of where
   * every process runs (sent once here, not in every RUN) and the text only where it was not
   * sent before */
  for (uint32_t k = 0; k < prog->plan->nworkers; k++) {
    prog->loads[k].worker = prog->plan->workers[k];
    prog->loads[k].rid = c->next_rid++;
    if (send_load(c, prog, k, &err) < 0) {
      program_fail(c, prog, err.code, err.msg); /* answers the compile and frees prog */
      return;
    }
    prog->nloads++;
    prog->loads_pending++;
  }
  lm_debug("compiling %s as program %llu: %s%s, %u processes, loading on %u workers", name,
           (unsigned long long)prog->id, lm_spmd_form_name(info->form), info->partitioned ? " (partitioned)" : "", n,
           prog->loads_pending);
}

/* A program may name large constants that its client put as arrays (docs/scale.md "Large
 * constants"): dense_resource<loom_array_SESSION_ID>. Only this session's own live arrays: a
 * program naming another session's would read that session's data on the workers. Every
 * occurrence of the word is checked (one in a comment or string too: refused, never missed). */
static int check_resources(peer *p, const char *text, size_t len, lm_err *err) {
  static const char kw[] = "dense_resource";
  const char *end = text + len;
  for (const char *at = text; (at = memmem(at, (size_t)(end - at), kw, sizeof kw - 1)) != NULL;) {
    lm_lexpos pos = {at + sizeof kw - 1, at, 1};
    lm_tok lt, name, gt;
    lm_lex(&pos, end, &lt);
    lm_lex(&pos, end, &name);
    lm_lex(&pos, end, &gt);
    char buf[128];
    snprintf(buf, sizeof buf, "%.*s", name.k == LM_T_ID ? (int)(name.n < 100 ? name.n : 100) : 0, name.s);
    unsigned long long session, id;
    int n = 0;
    if (lt.k != LM_T_LT || name.k != LM_T_ID || gt.k != LM_T_GT ||
        sscanf(buf, "loom_array_%llu_%llu%n", &session, &id, &n) != 2 || buf[n] || name.n >= 100)
      return lm_errf(err, LOOM_INVALID_ARGUMENT,
                     "the program has a dense_resource other than dense_resource<loom_array_SESSION_ID> (a large "
                     "constant this session put as an array)");
    if (session != p->session->id)
      return lm_errf(err, LOOM_PERMISSION, "the program names array %llu of session %llu as a constant; a program "
                     "may only name this session's (%llu) arrays", id, session, (unsigned long long)p->session->id);
    if (!lm_session_get(p->session, id, H_ARRAY))
      return lm_errf(err, LOOM_NOT_FOUND, "the program names array %llu as a constant, and this session has no such "
                     "array", id);
    at = pos.p;
  }
  return 0;
}

void ctl_on_compile(peer *p, const lm_frame *f, const Lmw__Compile *m) {
  ctl *c = p->ctl;
  uint64_t rid = f->h.request_id;
  const char *text = (const char *)f->payload;
  size_t len = (size_t)f->h.payload_len;
  char name[128];
  snprintf(name, sizeof name, "%s", m->name && m->name[0] ? m->name : "<program>");
  for (char *q = name; *q; q++)
    if ((unsigned char)*q < 0x20 || *q == 0x7f) *q = '?';
  if (ctl_compile_again(p, f, m)) return; /* re-sent after a controller restart */
  if (!m->id || lm_session_has(p->session, m->id) || lm_session_was_deleted(p->session, m->id)) {
    ctl_reply_error(p, rid, LOOM_INVALID_ARGUMENT, "executable id %llu is not new in this session",
                    (unsigned long long)m->id);
    return;
  }
  if (!len) {
    ctl_reply_error(p, rid, LOOM_INVALID_ARGUMENT, "COMPILE without the module's text");
    return;
  }
  if (m->n_devices > LM_SHARD_MAX_DEVICES) {
    ctl_reply_error(p, rid, LOOM_INVALID_ARGUMENT, "%zu devices is more than %d", m->n_devices, LM_SHARD_MAX_DEVICES);
    return;
  }
  lm_err rerr;
  if (check_resources(p, text, len, &rerr) < 0) {
    ctl_reply_error(p, rid, rerr.code, "%s", rerr.msg);
    return;
  }
  /* a pool session without a device list runs on its first devices: the list is its devices */
  uint32_t npool;
  const uint32_t *pool = m->n_devices ? NULL : ctl_pool_devices(p, &npool);
  const uint32_t *asked = pool ? pool : m->devices;
  size_t nasked = pool ? npool : m->n_devices;
  uint64_t fp = fingerprint(text, len, asked, nasked);
  for (c_program *q = c->programs; q; q = q->next) {
    if (q->fingerprint != fp || q->state == P_FAILED || q->len != len || memcmp(q->text, text, len) != 0) continue;
    /* same text and the same explicit device list (or both default) */
    bool same = pool ? q->asked_prefix && q->nasked == nasked && !memcmp(q->asked, asked, nasked * sizeof *asked)
                : m->n_devices == 0 ? q->default_devices
                                    : !q->default_devices && !q->asked_prefix && m->n_devices == q->ndev &&
                                          !memcmp(m->devices, q->devices, q->ndev * sizeof *q->devices);
    if (!same) continue;
    if (q->state == P_READY) {
      finish_compile(c, p, rid, m->id, q, true);
    } else {
      waiter_ext *we = calloc(1, sizeof *we);
      if (!we) {
        ctl_reply_error(p, rid, LOOM_NO_MEMORY, "out of host memory");
        return;
      }
      we->w.client = p;
      we->w.rid = rid;
      we->exe_id = m->id;
      we->w.next = q->waiters;
      q->waiters = &we->w;
    }
    return;
  }
  /* parse, verify, analyze (and partition) on the thread pool: heavy work stays off the loop */
  c_program *prog = calloc(1, sizeof *prog);
  waiter_ext *we = calloc(1, sizeof *we);
  analyze_job *j = calloc(1, sizeof *j);
  if (prog) {
    prog->text = text_new(len);
    prog->name = strdup(name);
    prog->asked = nasked ? malloc(nasked * sizeof *prog->asked) : NULL;
  }
  if (!prog || !we || !j || !prog->text || !prog->name || (nasked && !prog->asked)) {
    program_free(prog);
    free(we);
    free(j);
    ctl_reply_error(p, rid, LOOM_NO_MEMORY, "out of host memory");
    return;
  }
  memcpy(prog->text, text, len);
  prog->len = len;
  prog->fingerprint = fp;
  prog->default_devices = nasked == 0;
  prog->asked_prefix = pool != NULL;
  prog->nasked = nasked;
  if (nasked) memcpy(prog->asked, asked, nasked * sizeof *prog->asked);
  we->w.client = p;
  we->w.rid = rid;
  we->exe_id = m->id;
  prog->waiters = &we->w;
  prog->id = c->next_program++;
  ctl_j_meta(c); /* program ids are never used twice, restarts included */
  prog->state = P_ANALYZING;
  j->c = c;
  j->prog = prog;
  j->req.data = j;
  if (uv_queue_work(&c->loop, &j->req, analyze_work, analyze_done) != 0) {
    free(j);
    program_fail(c, prog, LOOM_INTERNAL, "cannot queue the compilation"); /* answers, frees prog */
    return;
  }
  prog->next = c->programs;
  c->programs = prog;
}

int ctl_program_remap(ctl *c, const c_program *prog, const uint32_t *from, const uint32_t *to, uint32_t n,
                      void (*done)(ctl *c, c_program *p, void *arg), void *arg, c_program **out, lm_err *err) {
  if (prog->state != P_READY || prog->default_devices)
    return lm_errf(err, LOOM_UNSUPPORTED, "program %llu (%s) is not loaded on a device list of its session",
                   (unsigned long long)prog->id, prog->name);
  /* the list it was compiled with: the session's devices (a compile without a list) or its own */
  const uint32_t *old = prog->asked_prefix ? prog->asked : prog->devices;
  size_t nd = prog->asked_prefix ? prog->nasked : prog->ndev;
  uint32_t *asked = malloc((nd ? nd : 1) * sizeof *asked);
  if (!asked) return lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  for (size_t i = 0; i < nd; i++) {
    uint32_t k = 0;
    while (k < n && from[k] != old[i]) k++;
    if (k == n) {
      free(asked);
      return lm_errf(err, LOOM_UNSUPPORTED, "program %llu (%s) runs on device %u, which is not the session's",
                     (unsigned long long)prog->id, prog->name, old[i]);
    }
    asked[i] = to[k];
  }
  uint64_t fp = fingerprint(prog->text, prog->len, asked, nd);
  c_program *q = c->programs;
  for (; q; q = q->next) {
    if (q->fingerprint != fp || q->state == P_FAILED || q->len != prog->len || memcmp(q->text, prog->text, prog->len))
      continue;
    if (prog->asked_prefix ? q->asked_prefix && q->nasked == nd && !memcmp(q->asked, asked, nd * sizeof *asked)
                           : !q->default_devices && !q->asked_prefix && q->ndev == nd && q->devices &&
                                 !memcmp(q->devices, asked, nd * sizeof *asked))
      break;
  }
  c_waiter *w = calloc(1, sizeof(waiter_ext));
  if (!w) {
    free(asked);
    return lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  }
  w->done = done;
  w->arg = arg;
  if (q) {
    free(asked);
    *out = q;
    if (q->state == P_READY) {
      free(w);
      return 1;
    }
    w->next = q->waiters;
    q->waiters = w;
    return 0;
  }
  c_program *np = calloc(1, sizeof *np);
  analyze_job *j = calloc(1, sizeof *j);
  if (np) {
    np->text = text_new(prog->len);
    np->name = strdup(prog->name);
  }
  if (!np || !j || !np->text || !np->name) {
    program_free(np);
    free(j);
    free(w);
    free(asked);
    return lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  }
  memcpy(np->text, prog->text, prog->len);
  np->len = prog->len;
  np->fingerprint = fp;
  np->asked_prefix = prog->asked_prefix;
  np->nasked = nd;
  np->asked = asked;
  np->waiters = w;
  np->id = c->next_program++;
  ctl_j_meta(c);
  np->state = P_ANALYZING;
  j->c = c;
  j->prog = np;
  j->req.data = j;
  if (uv_queue_work(&c->loop, &j->req, analyze_work, analyze_done) != 0) {
    free(j);
    np->waiters = NULL;
    free(w);
    program_free(np);
    return lm_errf(err, LOOM_INTERNAL, "cannot queue the compilation");
  }
  np->next = c->programs;
  c->programs = np;
  *out = np;
  return 0;
}

void ctl_on_executable_destroy(peer *p, const lm_frame *f, const Lmw__ExecutableDestroy *m) {
  lm_session_forget(p->session, m->id, H_EXECUTABLE, NULL);
  ctl_j_exe_del(p->ctl, p->session->id, m->id);
  Lmw__Ack ack = LMW__ACK__INIT;
  ctl_reply(p, f, LM_MSG_ACK, &ack.base);
}

/* ---- restoring from the journal (ctl_journal.c) ---- */

/* A program recorded in the journal, analyzed again (synchronously: once, at start, before the
 * controller serves anyone) and taken as loaded on its workers, which kept it through the restart. */
c_program *ctl_program_restore(ctl *c, const Lmj__Program *jp, lm_err *err) {
  c_program *prog = calloc(1, sizeof *prog);
  if (!prog || !jp->text.len) {
    free(prog);
    return lm_errf(err, LOOM_IO, "an empty program record"), NULL;
  }
  prog->text = text_new(jp->text.len);
  prog->name = strdup(jp->name && jp->name[0] ? jp->name : "<program>");
  prog->asked = jp->n_asked ? malloc(jp->n_asked * sizeof *prog->asked) : NULL;
  if (!prog->text || !prog->name || (jp->n_asked && !prog->asked)) {
    program_free(prog);
    return lm_errf(err, LOOM_NO_MEMORY, "out of host memory"), NULL;
  }
  memcpy(prog->text, jp->text.data, jp->text.len);
  prog->len = jp->text.len;
  prog->id = jp->id;
  prog->nasked = jp->n_asked;
  if (jp->n_asked) memcpy(prog->asked, jp->asked, jp->n_asked * sizeof *prog->asked);
  prog->default_devices = jp->default_devices;
  prog->asked_prefix = jp->asked_prefix;
  prog->fingerprint = fingerprint(prog->text, prog->len, prog->asked, prog->nasked);
  analyze_job j = {0};
  j.prog = prog;
  j.req.data = &j;
  analyze_work(&j.req);
  if (j.rc < 0) {
    lm_spmd_info_free(j.info);
    program_free(prog);
    *err = j.err;
    return NULL;
  }
  prog->info = j.info;
  uint32_t n = j.info->nproc;
  if ((prog->nasked && !prog->asked_prefix && prog->nasked != n) || (prog->asked_prefix && n > prog->nasked) ||
      (!prog->nasked && n > lm_registry_device_count(c->reg))) {
    program_free(prog);
    return lm_errf(err, LOOM_IO, "its %u processes do not fit the recorded devices", n), NULL;
  }
  prog->devices = calloc(n, sizeof *prog->devices);
  prog->proc_pos = calloc(n, sizeof *prog->proc_pos);
  prog->loads = calloc(n, sizeof *prog->loads);
  if (!prog->devices || !prog->proc_pos || !prog->loads) {
    program_free(prog);
    return lm_errf(err, LOOM_NO_MEMORY, "out of host memory"), NULL;
  }
  prog->ndev = n;
  for (uint32_t i = 0; i < n; i++) prog->devices[i] = prog->nasked ? prog->asked[i] : i;
  for (uint32_t pos = 0; pos < n; pos++) prog->proc_pos[j.info->mesh_procs[pos]] = pos;
  for (uint32_t i = 0; i < n; i++)
    if (prog->devices[i] >= lm_registry_device_count(c->reg)) {
      program_free(prog);
      return lm_errf(err, LOOM_IO, "it names device %u, which the journal does not have", prog->devices[i]), NULL;
    }
  prog->held = ctl_hold(c, prog->devices, n);
  if (ctl_plan_build(c, prog, err) < 0) {
    program_free(prog);
    return NULL;
  }
  for (uint32_t k = 0; k < prog->plan->nworkers; k++) { /* loaded there before the restart */
    prog->loads[k].worker = prog->plan->workers[k];
    sent_add(c, prog->loads[k].worker, prog->digest);
  }
  prog->nloads = prog->plan->nworkers;
  prog->state = P_READY;
  prog->idle_since = ctl_now_ms(c);
  prog->next = c->programs;
  c->programs = prog;
  if (prog->id >= c->next_program) c->next_program = prog->id + 1;
  return prog;
}

int ctl_exe_restore(ctl *c, lm_session *s, uint64_t id, c_program *prog, lm_err *err) {
  c_exe *e = calloc(1, sizeof *e);
  if (!e) return lm_errf(err, LOOM_NO_MEMORY, "out of host memory");
  e->ctl = c;
  e->prog = prog;
  if (lm_session_add_id(s, id, H_EXECUTABLE, e, exe_destroy, err) < 0) {
    free(e);
    return -1;
  }
  prog->refs++;
  return 0;
}

bool ctl_compile_again(peer *p, const lm_frame *f, const Lmw__Compile *m) {
  if (!p->resumed) return false;
  c_exe *e = lm_session_get(p->session, m->id, H_EXECUTABLE);
  if (!e) return false;
  send_compile_reply(p->ctl, p, f->h.request_id, e->prog, true);
  return true;
}

c_program *ctl_program_find(ctl *c, uint64_t id) {
  for (c_program *p = c->programs; p; p = p->next)
    if (p->id == id) return p;
  return NULL;
}
