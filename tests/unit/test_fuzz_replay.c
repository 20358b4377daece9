/* Replays the fuzz corpora (tests/fuzz/corpus/parse, bytecode and npy) through the same
 * entry points the libFuzzer targets call, so every saved input is checked in the normal test run
 * and under ASan (make test-asan): no crash and no leak on any of them. */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#define LM_FUZZ_NO_MAIN
#include "../fuzz/fuzz_bytecode.c"
#include "../fuzz/fuzz_npy.c"
#include "../fuzz/fuzz_parse.c"

static int replay_dir(const char *dir, int (*one)(const uint8_t *, size_t)) {
  const char *src = getenv("LOOM_SOURCE_DIR");
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", src ? src : ".", dir);
  DIR *d = opendir(path);
  assert_non_null(d);
  int n = 0;
  struct dirent *de;
  while ((de = readdir(d))) {
    if (de->d_name[0] == '.') continue;
    char f[8192];
    snprintf(f, sizeof f, "%s/%s", path, de->d_name);
    FILE *fp = fopen(f, "rb");
    if (!fp) continue;
    fseek(fp, 0, SEEK_END);
    long sz = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    uint8_t *buf = malloc(sz > 0 ? (size_t)sz : 1);
    assert_non_null(buf);
    size_t got = fread(buf, 1, (size_t)(sz > 0 ? sz : 0), fp);
    fclose(fp);
    one(buf, got);
    free(buf);
    n++;
  }
  closedir(d);
  return n;
}

static void test_replay_parse(void **state) { assert_true(replay_dir("tests/fuzz/corpus/parse", lm_fuzz_parse_one) > 10); }
static void test_replay_bytecode(void **state) {
  assert_true(replay_dir("tests/fuzz/corpus/bytecode", lm_fuzz_bytecode_one) > 30);
}
static void test_replay_npy(void **state) { assert_true(replay_dir("tests/fuzz/corpus/npy", lm_fuzz_npy_one) > 3); }

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_replay_parse), cmocka_unit_test(test_replay_bytecode),
                                     cmocka_unit_test(test_replay_npy)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
