/* One-sided transfers: a worker registers a memory range and hands out a blob (address,
 * length, UCX remote key); others put into it or get from it without the owner taking part
 * (its background progress thread serves transports that need the target to progress). */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include "dataplane/dp_internal.h"

struct lm_dp_mem {
  lm_dp *dp;
  ucp_mem_h memh;
  uint8_t *blob;
  size_t blob_len;
};

int lm_dp_mem_register(lm_dp *dp, void *addr, size_t len, lm_dp_mem **out, lm_err *err) {
  *out = NULL;
  if (!addr || len == 0) return lm_errf(err, LOOM_INVALID_ARGUMENT, "data plane: registering an empty range");
  lm_dp_mem *m = calloc(1, sizeof *m);
  if (!m) return lm_errf(err, LOOM_NO_MEMORY, "data plane: out of memory");
  m->dp = dp;
  ucp_mem_map_params_t mp;
  memset(&mp, 0, sizeof mp);
  mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_PROT;
  mp.address = addr;
  mp.length = len;
  mp.prot = UCP_MEM_MAP_PROT_LOCAL_READ | UCP_MEM_MAP_PROT_LOCAL_WRITE | UCP_MEM_MAP_PROT_REMOTE_READ |
            UCP_MEM_MAP_PROT_REMOTE_WRITE;
  pthread_mutex_lock(&dp->mu);
  ucs_status_t st = ucp_mem_map(dp->ctx, &mp, &m->memh);
  void *rk = NULL;
  size_t rklen = 0;
  if (st == UCS_OK) st = ucp_rkey_pack(dp->ctx, m->memh, &rk, &rklen);
  if (st == UCS_OK) {
    m->blob_len = DP_MEM_HDR + rklen;
    m->blob = malloc(m->blob_len);
    if (m->blob) {
      dp_put32(m->blob, DP_MEM_MAGIC);
      dp_put32(m->blob + 4, (uint32_t)rklen);
      dp_put64(m->blob + 8, (uint64_t)(uintptr_t)addr);
      dp_put64(m->blob + 16, len);
      dp_put64(m->blob + 24, dp->cfg.self_id);
      memcpy(m->blob + DP_MEM_HDR, rk, rklen);
    }
    ucp_rkey_buffer_release(rk);
  }
  pthread_mutex_unlock(&dp->mu);
  if (st != UCS_OK || !m->blob) {
    int rc = st != UCS_OK ? lm_errf(err, LOOM_INTERNAL, "data plane: registering %zu bytes: %s", len, ucs_status_string(st))
                          : lm_errf(err, LOOM_NO_MEMORY, "data plane: out of memory");
    lm_dp_mem_deregister(m);
    return rc;
  }
  *out = m;
  return 0;
}

int lm_dp_mem_blob(lm_dp_mem *mem, const void **blob, size_t *len) {
  *blob = mem->blob;
  *len = mem->blob_len;
  return 0;
}

void lm_dp_mem_deregister(lm_dp_mem *mem) {
  if (!mem) return;
  if (mem->memh) {
    pthread_mutex_lock(&mem->dp->mu);
    ucp_mem_unmap(mem->dp->ctx, mem->memh);
    pthread_mutex_unlock(&mem->dp->mu);
  }
  free(mem->blob);
  free(mem);
}

/* put (is_put) or get between local buf and [offset, offset+len) of the region in blob. */
static int dp_rma(lm_dp *dp, bool is_put, uint64_t peer, const void *blob, size_t blob_len, uint64_t offset, void *buf,
                  size_t len, const lm_dp_call *call, lm_err *err) {
  const char *what = is_put ? "put" : "get";
  const uint8_t *b = blob;
  if (!b || blob_len < DP_MEM_HDR || dp_get32(b) != DP_MEM_MAGIC || dp_get32(b + 4) != blob_len - DP_MEM_HDR)
    return lm_errf(err, LOOM_PROTOCOL, "data plane: %s: malformed memory blob (%zu bytes)", what, blob_len);
  uint64_t raddr = dp_get64(b + 8), rlen = dp_get64(b + 16), owner = dp_get64(b + 24);
  if (owner != peer)
    return lm_errf(err, LOOM_INVALID_ARGUMENT, "data plane: %s: the memory blob belongs to worker %" PRIu64 ", not %" PRIu64,
                   what, owner, peer);
  uint64_t end;
  if (__builtin_add_overflow(offset, (uint64_t)len, &end) || end > rlen)
    return lm_errf(err, LOOM_INVALID_ARGUMENT,
                   "data plane: %s of %zu bytes at offset %" PRIu64 " outside the %" PRIu64 "-byte region of worker %" PRIu64,
                   what, len, offset, rlen, peer);
  if (len == 0) return 0;
  if (!buf) return lm_errf(err, LOOM_INVALID_ARGUMENT, "data plane: %s: NULL buffer", what);
  int64_t deadline = dp_deadline(dp, call);
  dp_req *rs[2] = {dp_req_new(DP_REQ_RMA, 0), dp_req_new(DP_REQ_RMA, 0)};
  if (!rs[0] || !rs[1]) {
    free(rs[0]);
    free(rs[1]);
    return lm_errf(err, LOOM_NO_MEMORY, "data plane: out of memory");
  }
  int rc = 0;
  pthread_mutex_lock(&dp->mu);
  dp_peer *p = dp_peer_find_locked(dp, peer);
  ucp_ep_h ep = NULL;
  ucp_rkey_h rkey = NULL;
  if (!p) rc = lm_errf(err, LOOM_NOT_FOUND, "data plane: worker %" PRIu64 " is not a known peer", peer);
  else rc = dp_peer_ep_locked(dp, p, &ep, err);
  if (rc == 0) {
    ucs_status_t st = ucp_ep_rkey_unpack(ep, b + DP_MEM_HDR, &rkey);
    if (st != UCS_OK)
      rc = lm_errf(err, LOOM_PROTOCOL, "data plane: %s: cannot use worker %" PRIu64 "'s memory key (%s)", what, peer,
                   ucs_status_string(st));
  }
  if (rc == 0) {
    ucp_request_param_t prm;
    memset(&prm, 0, sizeof prm);
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    prm.cb.send = dp_req_send_cb;
    rs[0]->peer = rs[1]->peer = p;
    prm.user_data = rs[0];
    void *st = is_put ? ucp_put_nbx(ep, buf, len, raddr + offset, rkey, &prm)
                      : ucp_get_nbx(ep, buf, len, raddr + offset, rkey, &prm);
    dp_req_track_locked(dp, rs[0], st, what);
    prm.user_data = rs[1];
    /* a put is visible at the target only after a flush */
    st = is_put ? ucp_ep_flush_nbx(ep, &prm) : NULL;
    dp_req_track_locked(dp, rs[1], st, "flush");
    rc = dp_wait_locked(dp, rs, 2, deadline, call ? call->cancel : NULL);
    if (rc < 0) {
      dp_drain_locked(dp, rs, 2);
      lm_errf(err, rc, "data plane: %s of %zu bytes with worker %" PRIu64 " %s", what, len, peer,
              rc == LOOM_TIMEOUT ? "timed out" : "cancelled");
    } else {
      for (int i = 0; i < 2 && rc == 0; i++)
        if (rs[i]->status < 0)
          rc = lm_errf(err, rs[i]->status, "data plane: %s of %zu bytes: %s", what, len, rs[i]->why);
      if (rc < 0) dp_settle_locked(dp, rs, 2); /* a failed transfer UCX may still hold */
    }
  }
  bool all_done = !rs[0]->ucx && !rs[1]->ucx;
  for (int i = 0; i < 2; i++) dp_req_release_locked(dp, rs[i]);
  if (rkey && all_done) ucp_rkey_destroy(rkey); /* else UCX may still use it: leaked */
  pthread_mutex_unlock(&dp->mu);
  return rc;
}

int lm_dp_put(lm_dp *dp, uint64_t peer, const void *blob, size_t blob_len, uint64_t offset, const void *buf,
              size_t len, const lm_dp_call *call, lm_err *err) {
  return dp_rma(dp, true, peer, blob, blob_len, offset, (void *)buf, len, call, err);
}

int lm_dp_get(lm_dp *dp, uint64_t peer, const void *blob, size_t blob_len, uint64_t offset, void *buf, size_t len,
              const lm_dp_call *call, lm_err *err) {
  return dp_rma(dp, false, peer, blob, blob_len, offset, buf, len, call, err);
}
