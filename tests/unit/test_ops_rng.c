/* Unit tests for rng_bit_generator (src/exec/rng.c): bits and output states compared with what
 * jax.lax.rng_bit_generator gives under jax.jit on CPU (values printed by
 * tests/unit/test_ops_jax_values.py with jax 0.10), the spec's example, PHILOX counter carries,
 * and verifier errors. */
#include "test_ops_build.h"

typedef struct rcase {
  const char *alg;
  uint64_t state[3];
  int nstate;
  int rank;
  int64_t dims[2];
  lm_dtype dt;
  uint64_t want_state[3];
  int n;
  uint64_t want[16];
} rcase;

static const rcase cases[] = {
    {"THREE_FRY", {1, 2}, 2, 2, {2, 2}, LOOM_DTYPE_U64, {1, 6}, 4,
     {9236835810183407956ull, 16087790271692313299ull, 18212823393184779219ull, 2658481902456610144ull}},
    {"THREE_FRY", {1, 2}, 2, 2, {3, 5}, LOOM_DTYPE_U32, {1, 11}, 15,
     {43444564, 2150618427, 3979645651, 3745730563, 1672743891, 2109414752, 618976052, 2534981805, 3824176357,
      2868795927, 2915202000, 3844842626, 3159807845, 3120200270, 299673330}},
    {"THREE_FRY", {1, 2}, 2, 2, {2, 3}, LOOM_DTYPE_U8, {1, 5}, 6, {84, 211, 211, 59, 3, 97}},
    {"THREE_FRY", {0x123456789abcdef0ull, 0xfffffffffffffffeull}, 2, 0, {0}, LOOM_DTYPE_U32,
     {0x123456789abcdef0ull, 0xffffffffffffffffull}, 1, {1010520186}},
    {"THREE_FRY", {0x123456789abcdef0ull, 0xfffffffffffffffeull}, 2, 2, {3, 2}, LOOM_DTYPE_U16,
     {0x123456789abcdef0ull, 1}, 6, {20602, 59180, 31655, 43722, 32829, 33017}},
    {"PHILOX", {1, 2}, 2, 2, {3, 5}, LOOM_DTYPE_U32, {1, 6}, 15,
     {2100602697, 2847456232, 2074354647, 800269529, 1828267006, 3135207875, 3972719319, 2171987788, 433598563,
      2511543348, 3408178465, 3374076784, 578703075, 2627772353, 2538312612}},
    {"PHILOX", {1, 2}, 2, 1, {5}, LOOM_DTYPE_U64, {1, 5}, 5,
     {12229731395331991369ull, 3437131457114678231ull, 13465615291114923006ull, 9328616520744100567ull,
      10786996542579945571ull}},
    {"PHILOX", {0x123456789abcdef0ull, 0xfffffffffffffffeull}, 2, 2, {2, 2}, LOOM_DTYPE_U64, {0x123456789abcdef0ull, 0}, 4,
     {13228713271577040639ull, 12765971733663767479ull, 12951043062988922654ull, 4621549904384879066ull}},
    {"PHILOX", {0x123456789abcdef0ull, 0xfffffffffffffffeull}, 2, 2, {2, 3}, LOOM_DTYPE_U8, {0x123456789abcdef0ull, 0}, 6,
     {255, 161, 183, 167, 30, 12}},
    {"DEFAULT", {1, 2}, 2, 1, {3}, LOOM_DTYPE_U32, {1, 3}, 3, {2100602697, 2847456232, 2074354647}},
    /* 3-word PHILOX state: the counter carries into the third word (no JAX value; state only) */
    {"PHILOX", {5, 0xffffffffffffffffull, 7}, 3, 1, {4}, LOOM_DTYPE_U32, {5, 0, 8}, 0, {0}},
};

static void run_case(const rcase *c) {
  tb b;
  tb_init(&b);
  lm_type st = T1(LOOM_DTYPE_U64, c->nstate), ot;
  lm_type_tensor(&ot, c->dt, c->rank, c->dims);
  uint32_t s = tb_arg(&b, st);
  lm_type outs[2] = {st, ot};
  lm_op *op = tb_op(&b, b.body, LM_OP_RNG_BIT_GENERATOR, 1, &s, 2, outs);
  tb_enum(&b, op, "rng_algorithm", c->alg);
  tb_finish(&b, 2, op->out);
  lm_buffer *x = tb_buf(st, c->state);
  tb_run_result r = tb_run(&b, &x, 1);
  if (r.rc) fail_msg("%s", r.err.msg);
  const uint64_t *ns = r.out[0]->data;
  for (int i = 0; i < c->nstate; i++)
    if (ns[i] != c->want_state[i])
      fail_msg("%s %s: state[%d] = %llu, want %llu", c->alg, lm_dtype_name(c->dt), i, (unsigned long long)ns[i],
               (unsigned long long)c->want_state[i]);
  size_t es = lm_dtype_size(c->dt);
  for (int i = 0; i < c->n; i++) {
    uint64_t v = 0;
    memcpy(&v, (char *)r.out[1]->data + i * es, es);
    if (v != c->want[i])
      fail_msg("%s %s: element %d = %llu, want %llu", c->alg, lm_dtype_name(c->dt), i, (unsigned long long)v,
               (unsigned long long)c->want[i]);
  }
  tb_run_release(&r);
  lm_buffer_release(x);
}

static void test_rng_matches_jax(void **state) {
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) run_case(&cases[i]);
}

static void test_rng_float_bits(void **state) {
  /* f32 output receives the bits of the u32 output for the same state */
  rcase c = cases[5];
  c.dt = LOOM_DTYPE_F32;
  run_case(&c);
}

static void test_rng_verify(void **state) {
  tb b;
  tb_init(&b);
  lm_type st = T1(LOOM_DTYPE_U64, 3), ot = T1(LOOM_DTYPE_U32, 4);
  uint32_t s = tb_arg(&b, st);
  lm_type outs[2] = {st, ot};
  lm_op *op = tb_op(&b, b.body, LM_OP_RNG_BIT_GENERATOR, 1, &s, 2, outs);
  tb_enum(&b, op, "rng_algorithm", "THREE_FRY");
  tb_finish(&b, 2, op->out);
  uint64_t v[3] = {0};
  lm_buffer *x = tb_buf(st, v);
  tb_expect_error(&b, &x, 1, LOOM_VERIFY, "THREE_FRY needs a state of 2 words");
  lm_buffer_release(x);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_rng_matches_jax),
      cmocka_unit_test(test_rng_float_bits),
      cmocka_unit_test(test_rng_verify),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
