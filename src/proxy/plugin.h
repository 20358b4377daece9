/* pathwaysutils' plugin programs (plugin.c): persistence requests (parsed, and run as Loom
 * checkpoints in directories of their own) and reshard requests (parsed). session.c compiles and
 * executes them. */
#ifndef LM_PROXY_PLUGIN_H
#define LM_PROXY_PLUGIN_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "loom/loom.h"
#include "proxy/proxy.h"

typedef struct px_persist_item {
  char *dir;                 /* location/name: the checkpoint directory (absolute) */
  char *name;                /* the array's name (its tensor's name in the files) */
  uint8_t *sharding;         /* the request's xla.OpSharding, serialized */
  size_t sharding_len;
  int32_t *devices;          /* the request's device ids (the client's numbering = Loom's virtual ids) */
  int32_t ndevices;
  loom_dtype dtype;          /* read: the element type asked for; write: LOOM_DTYPE_INVALID */
  int32_t rank;              /* the shape in the request */
  int64_t dims[LOOM_MAX_RANK];
} px_persist_item;

typedef struct px_persist {
  bool write;                /* a write (the arrays are the execute's arguments) or a read (its outputs) */
  int32_t n;
  px_persist_item *items;
} px_persist;

/* The plugin program's JSON object root: 1 when it is no persistence request, 0 with *out set,
 * or a gRPC code (PX_*) with msg set when it is one that is malformed or not supported. */
int px_persist_parse(const cJSON *root, px_persist **out, char *msg, size_t cap);
void px_persist_free(px_persist *p);
/* An IFRT HloShardingProto (serialized, malloc'd) of the item's sharding over its devices. */
int px_persist_sharding(const px_persist_item *it, uint8_t **out, size_t *len, char *msg, size_t cap);
/* Saves arrays[i] (computed or not) as item i (up to 8 at once); returns when every file is written. */
int px_persist_write(loom_client *c, const px_persist *p, loom_array *const *arrays, char *msg, size_t cap);
/* Loads item i into out[i] with shardings[i]; returns when every shard is in device memory (on an
 * error none is kept). */
int px_persist_read(loom_client *c, const px_persist *p, const loom_sharding *const *shardings, loom_array **out,
                    char *msg, size_t cap);

/* A reshardRequest: argument i's values, moved into out[i]'s sharding (in[i] is the sharding
 * the client says it has; the items' name, sharding and devices only). */
typedef struct px_reshard {
  bool donate;               /* donateInput: the arguments are deleted once moved */
  int32_t n;
  px_persist_item *in, *out;
} px_reshard;

/* As px_persist_parse, for a reshardRequest. */
int px_reshard_parse(const cJSON *root, px_reshard **out, char *msg, size_t cap);
void px_reshard_free(px_reshard *p);

#endif
