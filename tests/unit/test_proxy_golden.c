/* Golden decode/encode tests for the IFRT proxy's message schemas: every IfrtRequest and
 * IfrtResponse jaxlib 0.10.2 and the reference server exchanged in the captured sessions
 * (tests/data/ifrt-proxy/{seed,workload2}/raw/opNNN_<request>.{req,resp}.pb) decodes with the
 * protobuf-c code the proxy uses, as the member its file name says, and encodes back to the same
 * bytes; the nested serialized payloads the proxy reads (compile options, shardings) decode too;
 * decoding every truncation of them is safe (run under the sanitizer build). */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "loom/compile_options_subset.pb-c.h"
#include "xla/python/ifrt/sharding_serdes.pb-c.h"
#include "xla/python/ifrt_proxy/common/ifrt_service.pb-c.h"
#include "xla/python/pjrt_ifrt/xla_sharding.pb-c.h"

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

static uint8_t *read_all(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *b = malloc((size_t)n + 1);
  assert_non_null(b);
  assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  *len = (size_t)n;
  return b;
}

/* The oneof member's field name for a message's request/response case. */
static const char *member_name(const ProtobufCMessageDescriptor *d, unsigned num) {
  const ProtobufCFieldDescriptor *f = protobuf_c_message_descriptor_get_field(d, num);
  return f ? f->name : "(none)";
}

typedef struct counts {
  int requests, responses, compiles, shardings, errors;
} counts;

static void check_serialized_sharding(const Xla__Ifrt__ShardingProto *sp, counts *c) {
  if (!sp || !sp->serialized_sharding) return;
  const Xla__Ifrt__Serialized *s = sp->serialized_sharding;
  if (!strcmp(s->type_name, "xla::ifrt::HloSharding")) {
    Xla__Ifrt__HloShardingProto *h = xla__ifrt__hlo_sharding_proto__unpack(NULL, s->data.len, s->data.data);
    assert_non_null(h);
    assert_non_null(h->devices);
    assert_true(h->devices->n_device_ids >= 1);
    assert_non_null(h->xla_op_sharding);
    xla__ifrt__hlo_sharding_proto__free_unpacked(h, NULL);
    c->shardings++;
  } else if (!strcmp(s->type_name, "xla::ifrt::SingleDeviceSharding")) {
    Xla__Ifrt__SingleDeviceShardingProto *p =
        xla__ifrt__single_device_sharding_proto__unpack(NULL, s->data.len, s->data.data);
    assert_non_null(p);
    xla__ifrt__single_device_sharding_proto__free_unpacked(p, NULL);
    c->shardings++;
  }
}

static void check_file(const char *dir, const char *name, counts *c) {
  char path[4096], want[128];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  size_t len;
  uint8_t *b = read_all(path, &len);
  /* opNNN_<request>.req.pb / .resp.pb */
  const char *us = strchr(name, '_');
  assert_non_null(us);
  size_t wl = strcspn(us + 1, ".");
  snprintf(want, sizeof want, "%.*s", (int)wl, us + 1);
  bool is_req = strstr(name, ".req.pb") != NULL;
  const ProtobufCMessageDescriptor *d =
      is_req ? &xla__ifrt__proxy__ifrt_request__descriptor : &xla__ifrt__proxy__ifrt_response__descriptor;
  ProtobufCMessage *m = protobuf_c_message_unpack(d, NULL, len, b);
  assert_non_null(m);
  /* encodes back to the same bytes */
  size_t n = protobuf_c_message_get_packed_size(m);
  assert_int_equal(n, len);
  uint8_t *again = malloc(n + 1);
  protobuf_c_message_pack(m, again);
  assert_memory_equal(again, b, n);
  free(again);
  if (is_req) {
    Xla__Ifrt__Proxy__IfrtRequest *q = (Xla__Ifrt__Proxy__IfrtRequest *)m;
    assert_string_equal(member_name(d, (unsigned)q->request_case), want);
    assert_non_null(q->request_metadata);
    if (q->request_case == XLA__IFRT__PROXY__IFRT_REQUEST__REQUEST_COMPILE_REQUEST) {
      const Xla__Ifrt__Proxy__CompileRequest *cr = q->compile_request;
      assert_string_equal(cr->program->type_name, "xla::ifrt::XlaProgram");
      assert_memory_equal(cr->program->data.data, "ML\xefR", 4); /* MLIR bytecode magic */
      Loom__Ifrtsub__XlaCompileOptions *co =
          loom__ifrtsub__xla_compile_options__unpack(NULL, cr->compile_options->data.len, cr->compile_options->data.data);
      assert_non_null(co);
      const Loom__Ifrtsub__ExecutableBuildOptions *bo = co->compile_options->executable_build_options;
      assert_non_null(bo);
      assert_true(bo->has_num_partitions && bo->num_partitions >= 1);
      assert_non_null(bo->device_assignment);
      assert_int_equal(bo->device_assignment->n_computation_devices, (size_t)bo->num_partitions);
      loom__ifrtsub__xla_compile_options__free_unpacked(co, NULL);
      c->compiles++;
    }
    if (q->request_case == XLA__IFRT__PROXY__IFRT_REQUEST__REQUEST_MAKE_ARRAYS_FROM_HOST_BUFFER_SHARDS_REQUEST)
      for (size_t i = 0; i < q->make_arrays_from_host_buffer_shards_request->n_specs; i++)
        check_serialized_sharding(q->make_arrays_from_host_buffer_shards_request->specs[i]->array_spec->sharding, c);
    if (q->request_case == XLA__IFRT__PROXY__IFRT_REQUEST__REQUEST_MAKE_ARRAY_FROM_HOST_BUFFER_REQUEST)
      check_serialized_sharding(q->make_array_from_host_buffer_request->sharding, c);
    c->requests++;
  } else {
    Xla__Ifrt__Proxy__IfrtResponse *r = (Xla__Ifrt__Proxy__IfrtResponse *)m;
    assert_non_null(r->response_metadata);
    if (r->response_metadata->status) {
      c->errors++; /* an error answer carries no member */
      assert_int_equal(r->response_case, XLA__IFRT__PROXY__IFRT_RESPONSE__RESPONSE__NOT_SET);
    } else {
      /* the member matching the request: "<x>_request" answered by "<x>_response" */
      char resp[128];
      snprintf(resp, sizeof resp, "%.*s_response", (int)(wl - strlen("_request")), us + 1);
      assert_string_equal(member_name(d, (unsigned)r->response_case), resp);
    }
    if (r->response_case == XLA__IFRT__PROXY__IFRT_RESPONSE__RESPONSE_LOADED_EXECUTABLE_EXECUTE_RESPONSE)
      for (size_t i = 0; i < r->loaded_executable_execute_response->n_outputs; i++)
        check_serialized_sharding(r->loaded_executable_execute_response->outputs[i]->sharding, c);
    c->responses++;
  }
  protobuf_c_message_free_unpacked(m, NULL);
  /* truncations: decoded or rejected, never a crash or a leak (the sanitizer build checks) */
  for (size_t cut = 1; cut < len; cut += (len > 64 ? len / 16 : 1)) {
    ProtobufCMessage *t = protobuf_c_message_unpack(d, NULL, cut, b);
    if (t) protobuf_c_message_free_unpacked(t, NULL); /* a prefix ending on a field boundary is valid */
  }
  free(b);
}

static void check_dir(const char *dir, counts *c) {
  DIR *dp = opendir(dir);
  assert_non_null(dp);
  struct dirent *e;
  while ((e = readdir(dp)))
    if (strstr(e->d_name, ".pb")) check_file(dir, e->d_name, c);
  closedir(dp);
}

static void test_seed_capture(void **state) {
  (void)state;
  counts c = {0};
  check_dir("tests/data/ifrt-proxy/seed/raw", &c);
  assert_int_equal(c.requests, 32);
  assert_int_equal(c.responses, 32);
  assert_int_equal(c.compiles, 2);
  assert_int_equal(c.errors, 2); /* the two get_default_layout requests */
  assert_true(c.shardings >= 2);
}

static void test_workload2_capture(void **state) {
  (void)state;
  counts c = {0};
  check_dir("tests/data/ifrt-proxy/workload2/raw", &c);
  assert_int_equal(c.requests, c.responses);
  assert_int_equal(c.compiles, 6);
  assert_true(c.shardings >= 8); /* sharded puts and execute outputs */
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_seed_capture), cmocka_unit_test(test_workload2_capture)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
