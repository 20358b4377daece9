/* Parser plumbing: the token cursor, error messages with file:line:column, arena helpers with
 * the module size cap, string decoding, and the SSA name scopes of the function being parsed. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "hlo/parse_int.h"

void lm_p_next(lm_parser *p) { lm_lex(&p->pos, p->end, &p->tok); }

bool lm_p_eat(lm_parser *p, lm_tok_kind k) {
  if (p->tok.k != k) return false;
  lm_p_next(p);
  return true;
}

bool lm_p_is_id(const lm_parser *p, const char *word) {
  size_t n = strlen(word);
  return p->tok.k == LM_T_ID && p->tok.n == n && memcmp(p->tok.s, word, n) == 0;
}

bool lm_p_eat_id(lm_parser *p, const char *word) {
  if (!lm_p_is_id(p, word)) return false;
  lm_p_next(p);
  return true;
}

int lm_p_errf(lm_parser *p, const lm_tok *t, int code, const char *fmt, ...) {
  if (!t) t = &p->tok;
  char msg[LM_ERR_MSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return lm_errf(p->err, code, "%s:%u:%u: %s", p->file, t->line, t->col, msg);
}

int lm_p_expected(lm_parser *p, const char *what) {
  char found[128];
  return lm_p_errf(p, NULL, LOOM_PARSE, "expected %s, found %s", what, lm_tok_describe(&p->tok, found, sizeof found));
}

int lm_p_expect(lm_parser *p, lm_tok_kind k, const char *what) {
  if (lm_p_eat(p, k)) return 0;
  return lm_p_expected(p, what);
}

int lm_p_expect_id(lm_parser *p, const char *word) {
  if (lm_p_eat_id(p, word)) return 0;
  char what[96];
  snprintf(what, sizeof what, "'%s'", word);
  return lm_p_expected(p, what);
}

int lm_p_nomem(lm_parser *p) {
  if (p->a->total > p->max_total)
    return lm_p_errf(p, NULL, LOOM_NO_MEMORY, "program too large: its parsed form exceeds %zu bytes", p->max_total);
  return lm_p_errf(p, NULL, LOOM_NO_MEMORY, "out of host memory while parsing");
}

int lm_p_enter(lm_parser *p) {
  if (p->depth >= LM_PARSE_MAX_DEPTH)
    return lm_p_errf(p, NULL, LOOM_PARSE, "nesting deeper than %d levels", LM_PARSE_MAX_DEPTH);
  p->depth++;
  return 0;
}

lm_pmark lm_p_mark(const lm_parser *p) { return (lm_pmark){p->pos, p->tok}; }

void lm_p_reset(lm_parser *p, const lm_pmark *mk) {
  p->pos = mk->pos;
  p->tok = mk->tok;
}

void lm_p_seek(lm_parser *p, const char *q) {
  /* q lies on or after the current token's line; recount newlines from the token's start. */
  lm_lexpos lp = {p->tok.start, p->tok.start - (p->tok.col - 1), p->tok.line};
  for (const char *c = p->tok.start; c < q; c++)
    if (*c == '\n') {
      lp.line++;
      lp.line_start = c + 1;
    }
  lp.p = q;
  p->pos = lp;
  lm_p_next(p);
}


void *lm_p_alloc(lm_parser *p, size_t n) {
  if (n > p->max_total || p->a->total > p->max_total - n) {
    lm_p_errf(p, NULL, LOOM_NO_MEMORY, "program too large: its parsed form exceeds %zu bytes", p->max_total);
    return NULL;
  }
  void *r = lm_arena_alloc(p->a, n ? n : 1);
  if (!r) lm_p_nomem(p);
  return r;
}

void *lm_p_array(lm_parser *p, size_t n, size_t sz) {
  size_t total;
  if (lm_mul_size(n, sz, &total)) {
    lm_p_errf(p, NULL, LOOM_NO_MEMORY, "program too large: %zu items of %zu bytes", n, sz);
    return NULL;
  }
  return lm_p_alloc(p, total);
}

char *lm_p_strndup(lm_parser *p, const char *s, size_t n) {
  char *r = lm_p_alloc(p, n + 1);
  if (r) {
    memcpy(r, s, n);
    r[n] = 0;
  }
  return r;
}

void *lm_p_push(lm_parser *p, void **v, uint32_t *n, uint32_t *cap, size_t sz) {
  if (*n >= LM_PARSE_MAX_LIST) {
    lm_p_errf(p, NULL, LOOM_PARSE, "list longer than %u items", LM_PARSE_MAX_LIST);
    return NULL;
  }
  if (*n == *cap) {
    uint32_t nc = *cap ? *cap * 2 : 4;
    void *nv = lm_p_array(p, nc, sz);
    if (!nv) return NULL;
    if (*n) memcpy(nv, *v, (size_t)*n * sz);
    *v = nv;
    *cap = nc;
  }
  void *slot = (char *)*v + (size_t)(*n)++ * sz;
  memset(slot, 0, sz);
  return slot;
}

char *lm_p_decode_str(lm_parser *p, const lm_tok *t, uint32_t *len) {
  char *out = lm_p_alloc(p, t->n + 1);
  if (!out) return NULL;
  size_t k = 0;
  for (size_t i = 0; i < t->n; i++) {
    char c = t->s[i];
    if (c == '\\' && i + 1 < t->n) {
      char e = t->s[i + 1];
      int h1 = lm_p_hexval((unsigned char)e), h2 = i + 2 < t->n ? lm_p_hexval((unsigned char)t->s[i + 2]) : -1;
      if (e == 'n') { out[k++] = '\n'; i++; }
      else if (e == 't') { out[k++] = '\t'; i++; }
      else if (e == '"' || e == '\\') { out[k++] = e; i++; }
      else if (h1 >= 0 && h2 >= 0) { out[k++] = (char)(h1 * 16 + h2); i += 2; }
      else out[k++] = c;
    } else {
      out[k++] = c;
    }
  }
  out[k] = 0;
  *len = (uint32_t)k;
  return out;
}

/* ---- values and names ---- */

/* Copies the element arrays of a tuple type into the module's arena (signatures are parsed into
 * scratch memory; value types outlive it). */
static int persist_type(lm_parser *p, lm_type *t, int depth) {
  if (t->kind != LM_TYPE_TUPLE || !t->ntuple) return 0;
  if (depth > LM_PARSE_MAX_DEPTH) return lm_p_errf(p, NULL, LOOM_PARSE, "tuple types nested too deeply");
  lm_arena *saved = p->a;
  p->a = &p->m->arena;
  lm_type *e = lm_p_array(p, t->ntuple, sizeof(lm_type));
  p->a = saved;
  if (!e) return p->err->code;
  memcpy(e, t->tuple, t->ntuple * sizeof(lm_type));
  t->tuple = e;
  for (uint32_t i = 0; i < t->ntuple; i++) LM_TRY(persist_type(p, &e[i], depth + 1));
  return 0;
}

int lm_p_new_values(lm_parser *p, uint32_t count, const lm_type *types, uint32_t *first) {
  *first = p->nvalues;
  lm_arena *saved = lm_p_scratch_on(p); /* the vector grows in scratch; finish_func keeps the final one */
  int rc = 0;
  for (uint32_t i = 0; i < count && rc == 0; i++) {
    lm_type *t = lm_p_push(p, (void **)&p->vtypes, &p->nvalues, &p->capvalues, sizeof(lm_type));
    if (!t) { rc = p->err->code; break; }
    *t = types[i];
    rc = persist_type(p, t, 0);
  }
  lm_p_scratch_off(p, saved);
  return rc;
}

static uint32_t name_hash(const char *s, size_t n) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 16777619u;
  return h;
}

static int names_rehash(lm_parser *p, uint32_t nb) {
  lm_names *t = &p->names;
  int32_t *b = malloc((size_t)nb * sizeof *b);
  if (!b) return lm_p_nomem(p);
  for (uint32_t i = 0; i < nb; i++) b[i] = -1;
  for (uint32_t i = 0; i < t->nents; i++) {
    uint32_t h = t->ents[i].hash & (nb - 1);
    t->ents[i].next = b[h];
    b[h] = (int32_t)i;
  }
  free(t->buckets);
  t->buckets = b;
  t->nbuckets = nb;
  return 0;
}

static const lm_name_ent *names_find(const lm_parser *p, const char *s, size_t n) {
  const lm_names *t = &p->names;
  if (!t->nbuckets) return NULL;
  uint32_t h = name_hash(s, n);
  for (int32_t i = t->buckets[h & (t->nbuckets - 1)]; i >= 0; i = t->ents[i].next) {
    const lm_name_ent *e = &t->ents[i];
    if (e->hash == h && e->n == n && memcmp(e->name, s, n) == 0) return e;
  }
  return NULL;
}

int lm_p_bind(lm_parser *p, const lm_tok *name, uint32_t value, uint32_t count) {
  lm_names *t = &p->names;
  if (names_find(p, name->s, name->n)) {
    char buf[128];
    return lm_p_errf(p, name, LOOM_PARSE, "redefinition of SSA value %s", lm_tok_describe(name, buf, sizeof buf));
  }
  if (t->nents == t->capents) {
    if (t->capents >= LM_PARSE_MAX_LIST) return lm_p_errf(p, name, LOOM_PARSE, "too many values in one function");
    uint32_t nc = t->capents ? t->capents * 2 : 64;
    lm_name_ent *ne = realloc(t->ents, (size_t)nc * sizeof *ne);
    if (!ne) return lm_p_nomem(p);
    t->ents = ne;
    t->capents = nc;
  }
  if (t->nents + 1 > t->nbuckets / 2) LM_TRY(names_rehash(p, t->nbuckets ? t->nbuckets * 2 : 128));
  lm_name_ent *e = &t->ents[t->nents];
  e->name = name->s;
  e->n = (uint32_t)name->n;
  e->hash = name_hash(name->s, name->n);
  e->value = value;
  e->count = count;
  uint32_t h = e->hash & (t->nbuckets - 1);
  e->next = t->buckets[h];
  t->buckets[h] = (int32_t)t->nents++;
  return 0;
}

int lm_p_use(lm_parser *p, uint32_t *value) {
  if (p->tok.k != LM_T_PCT) return lm_p_expected(p, "an SSA value (%name)");
  const lm_name_ent *e = names_find(p, p->tok.s, p->tok.n);
  char buf[128];
  if (!e) return lm_p_errf(p, NULL, LOOM_PARSE, "use of undefined SSA value %s", lm_tok_describe(&p->tok, buf, sizeof buf));
  int64_t k = p->tok.idx < 0 ? 0 : p->tok.idx;
  if (k >= e->count)
    return lm_p_errf(p, NULL, LOOM_PARSE, "%s: result #%lld out of range (the op has %u results)",
                     lm_tok_describe(&p->tok, buf, sizeof buf), (long long)k, e->count);
  *value = e->value + (uint32_t)k;
  lm_p_next(p);
  return 0;
}

uint32_t lm_p_scope_mark(const lm_parser *p) { return p->names.nents; }

void lm_p_scope_pop(lm_parser *p, uint32_t mark) {
  lm_names *t = &p->names;
  while (t->nents > mark) {
    lm_name_ent *e = &t->ents[--t->nents];
    t->buckets[e->hash & (t->nbuckets - 1)] = e->next; /* LIFO: e is its bucket's head */
  }
}

void lm_p_names_reset(lm_parser *p) {
  lm_p_scope_pop(p, 0);
  p->vtypes = NULL;
  p->nvalues = p->capvalues = 0;
}

void lm_p_names_free(lm_parser *p) {
  free(p->names.ents);
  free(p->names.buckets);
  memset(&p->names, 0, sizeof p->names);
}
