/* Lists the devices of a Loom cluster through the C client API (docs/c-api.md).
 *
 *   cc list_devices.c -o list_devices $(pkg-config --cflags --libs loom)
 *   ./list_devices [HOST:PORT]    # default: $LOOM_CONTROLLER, else the local `loom up` cluster
 */
#include <inttypes.h>
#include <stdio.h>
#include <loom/loom.h>

int main(int argc, char **argv) {
  loom_connect_options opts;
  loom_connect_options_initialize(&opts);
  opts.address = argc > 1 ? argv[1] : NULL;
  opts.timeout_ms = 10000;
  opts.client_name = "list_devices example";

  loom_client *client;
  loom_status st = loom_connect(&opts, &client);
  if (st != LOOM_OK) {
    fprintf(stderr, "list_devices: %s (%s)\n", loom_errmsg(NULL), loom_status_name(st));
    return 1;
  }

  int32_t n = 0;
  loom_device_count(client, &n);
  printf("%d devices at %s\n", n, loom_client_address(client));
  for (int32_t i = 0; i < n; i++) {
    loom_device_desc d = {.struct_size = sizeof d};
    st = loom_device_info(client, i, &d);
    if (st != LOOM_OK) {
      fprintf(stderr, "device %d: %s\n", i, loom_errmsg(client));
      loom_disconnect(client);
      return 1;
    }
    printf("device %d: %s on worker %d (%s, pid %" PRId64 "), slice %s, %" PRIu64 " bytes, %s\n", d.id, d.kind,
           d.worker_id, d.worker_host, d.worker_pid, d.slice, d.memory_capacity,
           d.healthy ? "healthy" : d.health_reason);
  }

  /* Errors come back as values, with the detail on the handle. */
  loom_device_desc d = {.struct_size = sizeof d};
  st = loom_device_info(client, n, &d);
  printf("device %d: %s (%s)\n", n, loom_status_name(st), loom_errmsg(client));

  loom_disconnect(client);
  return 0;
}
