/* Unit tests for the MLIR bytecode reader (src/hlo/bc_*.c, vhlo.c): hostile inputs made here
 * (bad magic, versions newer than the reader knows, varints and counts past any sane size,
 * sections past the end, every truncation and every byte flip of real programs) and in
 * tests/unit/data/bytecode (a type that names itself, regions nested 300 deep; made by
 * gen_bytecode_hostile.py), each refused with a clear error and no crash or leak (this test also
 * runs under ASan); and, where ../shared is present, every bytecode file of the conformance corpus
 * read to the IR of its text twin, printed and read back to the same IR. */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "common/err.h"
#include "hlo/bytecode.h"
#include "hlo/dump.h"
#include "hlo/parse.h"
#include "hlo/print.h"

/* ---- a tiny bytecode writer: just enough framing for hostile headers and sections ---- */

typedef struct {
  uint8_t b[4096];
  size_t n;
} bcw;

static void w_bytes(bcw *w, const void *p, size_t n) {
  assert_true(w->n + n <= sizeof w->b);
  memcpy(w->b + w->n, p, n);
  w->n += n;
}

/* MLIR's prefix varint: the count of trailing zero bits of the first byte says how many more
 * bytes follow; 0x00 then 8 bytes for full 64-bit values. */
static void w_varint(bcw *w, uint64_t v) {
  for (int n = 1; n <= 8; n++)
    if (v < (1ull << (7 * n))) {
      uint64_t e = (v << n) | (1ull << (n - 1));
      for (int i = 0; i < n; i++) w->b[w->n++] = (uint8_t)(e >> (8 * i));
      return;
    }
  w->b[w->n++] = 0;
  for (int i = 0; i < 8; i++) w->b[w->n++] = (uint8_t)(v >> (8 * i));
}

static void w_header(bcw *w, uint64_t version, const char *producer) {
  w->n = 0;
  w_bytes(w, "ML\xefR", 4);
  w_varint(w, version);
  w_bytes(w, producer, strlen(producer) + 1);
}

static int read_bc(const uint8_t *data, size_t n, lm_err *e) {
  lm_module *m = NULL;
  lm_parse_opts o = {.filename = "t.mlirbc"};
  int rc = lm_read_bytecode(data, n, &o, &m, e);
  lm_module_free(m);
  return rc;
}

static void expect_error(const bcw *w, int code, const char *needle) {
  lm_err e = {0};
  int rc = read_bc(w->b, w->n, &e);
  if (rc != code || (needle && !strstr(e.msg, needle))) print_error("got %d '%s', want %d with '%s'\n", rc, e.msg, code, needle);
  assert_int_equal(rc, code);
  if (needle) assert_non_null(strstr(e.msg, needle));
}

static uint8_t *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long sz = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *b = malloc(sz > 0 ? (size_t)sz : 1);
  assert_non_null(b);
  *n = fread(b, 1, (size_t)(sz > 0 ? sz : 0), f);
  fclose(f);
  return b;
}

static const char *src_path(const char *rel, char *buf, size_t cap) {
  const char *src = getenv("LOOM_SOURCE_DIR");
  snprintf(buf, cap, "%s/%s", src ? src : ".", rel);
  return buf;
}

/* ---- headers ---- */

static void test_magic(void **state) {
  (void)state;
  assert_true(lm_is_bytecode("ML\xefR\x0d", 5));
  assert_false(lm_is_bytecode("ML\xef", 3));
  assert_false(lm_is_bytecode("module {}", 9));
  bcw w = {.n = 0};
  w_bytes(&w, "MLIR", 4);
  w_varint(&w, 6);
  expect_error(&w, LOOM_PARSE, NULL);
  /* text goes to the text parser, bytecode to the reader, whatever the file name */
  lm_module *m = NULL;
  lm_err e;
  const char *text = "func.func @main(%a: tensor<f32>) -> tensor<f32> {\n  return %a : tensor<f32>\n}\n";
  lm_parse_opts o = {.filename = "prog.mlirbc"};
  assert_int_equal(lm_parse_module(text, strlen(text), &o, &m, &e), 0);
  lm_module_free(m);
}

static void test_newer_versions_are_named(void **state) {
  (void)state;
  bcw w;
  w_header(&w, 99, "StableHLO_v1.13.7");
  expect_error(&w, LOOM_UNSUPPORTED, "MLIR bytecode version 99");
  expect_error(&w, LOOM_UNSUPPORTED, "0 to 6");
  w_header(&w, 6, "StableHLO_v9.1.0");
  expect_error(&w, LOOM_UNSUPPORTED, "9.1.0");
  expect_error(&w, LOOM_UNSUPPORTED, LM_VHLO_MAX_VERSION);
  w_header(&w, 6, "StableHLO_v0.3.0");
  expect_error(&w, LOOM_UNSUPPORTED, LM_VHLO_MIN_VERSION);
  uint64_t v;
  char prod[64];
  w_header(&w, 6, "StableHLO_v1.13.7");
  assert_int_equal(lm_bytecode_header(w.b, w.n, &v, prod, sizeof prod), 0);
  assert_int_equal(v, 6);
  assert_string_equal(prod, "StableHLO_v1.13.7");
  assert_int_equal(lm_bytecode_header(w.b, 5, &v, prod, sizeof prod), -1);
}

static void test_producer_not_terminated(void **state) {
  (void)state;
  bcw w = {.n = 0};
  w_bytes(&w, "ML\xefR", 4);
  w_varint(&w, 6);
  w_bytes(&w, "StableHLO_v1.13.7", 17); /* no NUL */
  expect_error(&w, LOOM_PARSE, "NUL");
}

/* ---- sections ---- */

static void test_varint_overflow_and_huge_sizes(void **state) {
  (void)state;
  bcw w;
  w_header(&w, 6, "StableHLO_v1.13.7");
  w.b[w.n++] = 0; /* string section, its length: a 9-byte varint of 2^64-1 */
  w.b[w.n++] = 0;
  for (int i = 0; i < 8; i++) w.b[w.n++] = 0xff;
  expect_error(&w, LOOM_PARSE, NULL);

  w_header(&w, 6, "StableHLO_v1.13.7"); /* a varint cut short */
  w.b[w.n++] = 0;
  w.b[w.n++] = 0;
  w.b[w.n++] = 0xff;
  expect_error(&w, LOOM_PARSE, NULL);

  w_header(&w, 6, "StableHLO_v1.13.7"); /* 2^50 strings in a 9-byte section: no allocation for them */
  w.b[w.n++] = 0;
  w_varint(&w, 9);
  w_varint(&w, 1ull << 50);
  expect_error(&w, LOOM_PARSE, NULL);
}

static void test_section_past_end(void **state) {
  (void)state;
  bcw w;
  w_header(&w, 6, "StableHLO_v1.13.7");
  w.b[w.n++] = 0;
  w_varint(&w, 1000);
  w_bytes(&w, "abc", 3);
  expect_error(&w, LOOM_PARSE, NULL);

  w_header(&w, 6, "StableHLO_v1.13.7"); /* an unknown section kind */
  w.b[w.n++] = 0x3f;
  w_varint(&w, 0);
  expect_error(&w, LOOM_PARSE, NULL);

  w_header(&w, 6, "StableHLO_v1.13.7"); /* the same section twice */
  for (int i = 0; i < 2; i++) {
    w.b[w.n++] = 0;
    w_varint(&w, 1);
    w_varint(&w, 0);
  }
  expect_error(&w, LOOM_PARSE, NULL);

  w_header(&w, 6, "StableHLO_v1.13.7"); /* no sections at all */
  expect_error(&w, LOOM_PARSE, NULL);
}

/* ---- real programs, damaged ---- */

/* Calls fn on every seed of the fuzz corpus that JAX wrote (names are content hashes; the seeds are
 * the files that start with the magic number, the fuzzer's own finds mostly do not). */
static int each_seed(void (*fn)(const uint8_t *, size_t), int max) {
  char dir[4096];
  DIR *d = opendir(src_path("tests/fuzz/corpus/bytecode", dir, sizeof dir));
  assert_non_null(d);
  int n = 0;
  struct dirent *de;
  while ((de = readdir(d)) && n < max) {
    if (de->d_name[0] == '.') continue;
    char f[8192];
    snprintf(f, sizeof f, "%s/%s", dir, de->d_name);
    size_t len;
    uint8_t *b = slurp(f, &len);
    if (!b) continue;
    lm_err e;
    if (lm_is_bytecode(b, len) && read_bc(b, len, &e) == 0) {
      fn(b, len);
      n++;
    }
    free(b);
  }
  closedir(d);
  return n;
}

static void all_prefixes(const uint8_t *b, size_t len) {
  for (size_t k = 0; k < len; k++) {
    uint8_t *cut = malloc(k ? k : 1); /* its own allocation, so ASan sees a read past the end */
    memcpy(cut, b, k);
    lm_err e = {0};
    int rc = read_bc(cut, k, &e);
    if (rc == 0) print_error("a %zu-byte prefix of a %zu-byte program was accepted\n", k, len);
    assert_true(rc < 0);
    assert_true(e.msg[0] != 0);
    free(cut);
  }
}

static void test_every_truncation_is_refused(void **state) {
  (void)state;
  assert_true(each_seed(all_prefixes, 6) >= 3);
}

/* Whatever one flipped byte does, the reader errs cleanly or reads a module that prints as text
 * the text parser reads back. */
static void all_flips(const uint8_t *b, size_t len) {
  uint8_t *m = malloc(len);
  for (size_t k = 0; k < len; k++)
    for (int x = 0; x < 2; x++) {
      memcpy(m, b, len);
      m[k] ^= x ? 0xff : 0x01;
      lm_module *mod = NULL;
      lm_err e = {0};
      lm_parse_opts o = {.filename = "flip.mlirbc", .max_const_bytes = 1 << 20, .max_total_bytes = 64 << 20};
      if (lm_read_bytecode(m, len, &o, &mod, &e) == 0) {
        char *t = lm_module_print(mod);
        assert_non_null(t);
        lm_module *back = NULL;
        if (lm_parse_module(t, strlen(t), NULL, &back, &e) != 0) print_error("flip at %zu: %s\n%s\n", k, e.msg, t);
        assert_non_null(back);
        lm_module_free(back);
        free(t);
        lm_module_free(mod);
      } else {
        assert_true(e.msg[0] != 0);
      }
    }
  free(m);
}

static void test_byte_flips(void **state) {
  (void)state;
  assert_true(each_seed(all_flips, 4) >= 3);
}

static void expect_file_error(const char *rel, int code, const char *needle) {
  char p[4096];
  size_t n;
  uint8_t *b = slurp(src_path(rel, p, sizeof p), &n);
  assert_non_null(b);
  lm_err e = {0};
  int rc = read_bc(b, n, &e);
  if (rc != code || !strstr(e.msg, needle)) print_error("%s: %d '%s'\n", rel, rc, e.msg);
  assert_int_equal(rc, code);
  assert_non_null(strstr(e.msg, needle));
  free(b);
}

static void test_cyclic_type(void **state) {
  (void)state;
  expect_file_error("tests/unit/data/bytecode/cyclic_type.mlirbc", LOOM_PARSE, "refers to itself");
}

static void test_deep_nesting(void **state) {
  (void)state;
  expect_file_error("tests/unit/data/bytecode/deep_nesting.mlirbc", LOOM_PARSE, "nesting deeper than 256");
}

/* ---- the conformance corpus, where ../shared is present ---- */

static char *dump_of(const uint8_t *data, size_t n, const char *name) {
  lm_module *m = NULL;
  lm_err e;
  lm_parse_opts o = {.filename = name};
  if (lm_parse_module((const char *)data, n, &o, &m, &e) != 0) {
    print_error("%s: %s\n", name, e.msg);
    return NULL;
  }
  char *d = lm_module_dump(m);
  if (lm_is_bytecode(data, n)) { /* and its printed text reads back to the same IR */
    char *t = lm_module_print(m);
    lm_module *back = NULL;
    assert_int_equal(lm_parse_module(t, strlen(t), &o, &back, &e), 0);
    char *d2 = lm_module_dump(back);
    assert_string_equal(d, d2);
    free(d2);
    free(t);
    lm_module_free(back);
  }
  lm_module_free(m);
  return d;
}

static void test_corpus_matches_text_twins(void **state) {
  (void)state;
  char root[4096], dir[4200];
  src_path("../shared/conformance/stablehlo", root, sizeof root);
  snprintf(dir, sizeof dir, "%s/testdata-bc", root);
  DIR *d = opendir(dir);
  if (!d) {
    printf("skipped: %s is absent (the conformance corpus lives outside the project)\n", dir);
    skip();
  }
  int n = 0, failed = 0;
  struct dirent *de;
  while ((de = readdir(d))) {
    size_t L = strlen(de->d_name);
    if (L < 7 || strcmp(de->d_name + L - 7, ".mlirbc")) continue;
    /* NAME.<major>.<minor>.<patch>.mlirbc -> testdata/NAME.mlir */
    char base[1024];
    snprintf(base, sizeof base, "%.*s", (int)(L - 7), de->d_name);
    for (int dots = 0; dots < 3; dots++) {
      char *dot = strrchr(base, '.');
      if (dot) *dot = 0;
    }
    char bcp[8192], txp[8192];
    snprintf(bcp, sizeof bcp, "%s/%s", dir, de->d_name);
    snprintf(txp, sizeof txp, "%s/testdata/%s.mlir", root, base);
    size_t nb, nt;
    uint8_t *b = slurp(bcp, &nb), *t = slurp(txp, &nt);
    if (!b || !t) {
      free(b);
      free(t);
      continue;
    }
    char *db = dump_of(b, nb, bcp), *dt = dump_of(t, nt, txp);
    if (!db || !dt || strcmp(db, dt)) {
      print_error("%s: IR differs from its text twin\n", de->d_name);
      failed++;
    }
    free(db);
    free(dt);
    free(b);
    free(t);
    n++;
  }
  closedir(d);
  printf("%d bytecode programs read to their text twins' IR, %d differ\n", n, failed);
  assert_int_equal(failed, 0);
  assert_true(n >= 1000);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_magic),
      cmocka_unit_test(test_newer_versions_are_named),
      cmocka_unit_test(test_producer_not_terminated),
      cmocka_unit_test(test_varint_overflow_and_huge_sizes),
      cmocka_unit_test(test_section_past_end),
      cmocka_unit_test(test_every_truncation_is_refused),
      cmocka_unit_test(test_byte_flips),
      cmocka_unit_test(test_cyclic_type),
      cmocka_unit_test(test_deep_nesting),
      cmocka_unit_test(test_corpus_matches_text_twins),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
