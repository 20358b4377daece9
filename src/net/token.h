/* Transfer tokens: the controller authorizes a client to put or get one shard on a worker by
 * handing it a token, a keyed hash (SipHash-2-4 with the 16-byte key the controller gave the
 * worker at registration) of what is allowed. The worker recomputes it, so shard transfers go
 * straight from client to worker without the worker asking the controller, and a session can
 * never name another session's arrays. */
#ifndef LM_NET_TOKEN_H
#define LM_NET_TOKEN_H

#include <stddef.h>
#include <stdint.h>

#define LM_TOKEN_KEY_SIZE 16
#define LM_TOKEN_SIZE 8

/* PUT_SNAP: a put whose shard the controller also snapshots into another worker's host memory
 * (docs/elastic.md): the worker acknowledges it once the snapshot is kept. */
/* RELAY: a relay worker may forward RUNs to this worker (hierarchical dispatch, docs/scale.md): made
 * with array = the relay's worker id, worker = this worker's id, everything else 0. */
enum { LM_TOKEN_PUT = 1, LM_TOKEN_GET = 2, LM_TOKEN_PUT_SNAP = 3, LM_TOKEN_RELAY = 4 };

/* SipHash-2-4 of data[0..n) under key (Aumasson and Bernstein, 2012), computed by OpenSSL. */
uint64_t lm_siphash24(const uint8_t key[LM_TOKEN_KEY_SIZE], const void *data, size_t n);

/* The token for `kind` on (session, array, worker, local device); for puts also the shard's
 * dtype and shape, so a client cannot send a different amount than the controller allowed. */
void lm_token_make(const uint8_t key[LM_TOKEN_KEY_SIZE], int kind, uint64_t session, uint64_t array,
                   uint32_t worker, uint32_t local_index, uint32_t dtype, const uint64_t *dims, size_t rank,
                   uint8_t out[LM_TOKEN_SIZE]);
/* 1 when tok (len bytes) is the right token, else 0. Constant time in the token's bytes. */
int lm_token_check(const uint8_t key[LM_TOKEN_KEY_SIZE], int kind, uint64_t session, uint64_t array,
                   uint32_t worker, uint32_t local_index, uint32_t dtype, const uint64_t *dims, size_t rank,
                   const uint8_t *tok, size_t len);

#endif
