/*
 * engine_inspect.c - read-only views of the engine: bytes held on each tier
 * and traffic, and the fp32 master weights of a shard.
 */
#include <string.h>

#include "engine_internal.h"

/* ---------------------------------------------------------------- inspection */

zo_status zo_engine_mem_info(const zo_engine_t *e, zo_engine_mem *m) {
  ENG_CHECK_OWNER(e, "mem_info");
  if (!e || !m) return zo_error_set(ZO_ERR_INVALID_ARG, "mem_info: NULL argument");
  memset(m, 0, sizeof *m);
  m->device_bytes = e->dev_block_bytes;
  size_t used = 0, peak = 0, limit = 0;
  zo_device_mem_info(e->dev, &used, &peak, &limit);
  m->device_peak_bytes = peak;
  const host_buf *hb[] = {&e->grad_host,     &e->grad_host2,    &e->stage_host,
                          &e->stage_host2,   &e->state_host[0], &e->state_host[1],
                          &e->state_host[2], &e->param_host,    eng_gnv_host(e->gnv)};
  for (size_t i = 0; i < sizeof hb / sizeof hb[0]; i++) {
    m->host_bytes += hb[i]->nbytes;
    if (hb[i]->pinned) m->pinned_bytes += hb[i]->nbytes;
  }
  /* several ranks: the reduction and gather buffers (engine_dp.c), the stage 3 gather ring (engine_dp3.c) */
  const size_t comm_bytes = eng_dp_host_mem(e->dp, &m->host_bytes, &m->pinned_bytes) +
                            eng_pg_host_mem(e->pg, &m->host_bytes, &m->pinned_bytes);
  eng_acc_host_mem(e->acc, &m->host_bytes,
                   &m->pinned_bytes);  /* one rank: the gradient staging ring */
  for (int k = 0; k < SL_KINDS; k++) { /* nvme: the state's slots and files, and the gradients' */
    m->host_bytes += eng_nv_stream_el(e->nv) * e->esz[k];
    m->pinned_bytes += eng_nv_stream_el(e->nv) * e->esz[k];
    m->host_bytes += eng_nv_res_bytes(e->nv, k); /* resident sub-groups (pageable) */
    m->nvme_bytes += eng_nv_file_bytes(e->nv, k);
  }
  m->host_bytes += eng_fetch_stage_bytes(e);
  m->pinned_bytes += eng_fetch_stage_bytes(e);
  m->nvme_bytes += e->pfile ? zo_swap_file_size(e->pfile) : 0;
  eng_states_host_mem(e->states, &m->host_bytes, &m->pinned_bytes); /* zo_engine_offload_states() */
  m->host_bytes += eng_wb_ring_bytes(e->wb);
  m->pinned_bytes += eng_wb_ring_bytes(e->wb);
  m->device_param_bytes = e->dev_live_el * zo_dtype_size(e->wdtype);
  m->nvme_read_bytes = e->ctr.nvme_read_bytes;
  m->nvme_write_bytes = e->ctr.nvme_write_bytes;
  m->h2d_bytes = e->ctr.h2d_bytes;
  m->d2h_bytes = e->ctr.d2h_bytes;
  if (e->arena) ZO_CHECK(zo_arena_get_stats(e->arena, &m->arena));
  /* by kind */
  const size_t wsz = zo_dtype_size(e->wdtype), gsz = zo_dtype_size(e->adtype);
  for (int i = 0; i < e->n_params; i++) {
    const zo_param_t *p = e->params[i];
    if (e->ptier == ZO_OFFLOAD_NONE) m->param_bytes += p->n * wsz;
    if (e->tier == ZO_OFFLOAD_NONE) {
      m->grad_bytes += p->shard_n * gsz;
      for (int k = 0; k < ST_KINDS; k++) m->state_bytes += p->shard_n * e->esz[k];
    }
  }
  if (e->ptier == ZO_OFFLOAD_CPU) m->param_bytes = e->param_host.nbytes;
  if (e->pdev) { /* this rank's blocks, in device memory */
    m->param_bytes = 0;
    for (int i = 0; i < e->n_params; i++) m->param_bytes += e->params[i]->part_n * wsz;
  }
  if (e->ptier ==
      ZO_OFFLOAD_NVME) /* params.swp, and the tensors cached in param_host (offload_param.max_in_cpu) */
    m->param_bytes = (e->pfile ? zo_swap_file_size(e->pfile) : 0) + e->param_host.nbytes;
  if (e->tier == ZO_OFFLOAD_CPU) m->grad_bytes = e->grad_host.nbytes + e->grad_host2.nbytes;
  if (e->tier == ZO_OFFLOAD_NVME)
    m->grad_bytes = eng_nv_file_bytes(e->nv, ST_GRAD) + eng_nv_res_bytes(e->nv, ST_GRAD);
  for (int k = 0; k < ST_KINDS && e->tier != ZO_OFFLOAD_NONE; k++)
    m->state_bytes += e->tier == ZO_OFFLOAD_CPU
                          ? e->state_host[k].nbytes
                          : eng_nv_file_bytes(e->nv, k) + eng_nv_res_bytes(e->nv, k);
  m->comm_bytes = comm_bytes;
  return ZO_OK;
}

zo_status zo_engine_get_master(zo_engine_t *e, zo_param_t *p, float *out, size_t *shard_offset,
                               size_t *shard_n) {
  ENG_CHECK_OWNER(e, "get_master");
  if (!e || !p || !out) return zo_error_set(ZO_ERR_INVALID_ARG, "get_master: NULL argument");
  if (!e->finalized)
    return zo_error_set(ZO_ERR_INVALID_USAGE, "get_master '%s': engine not finalized", p->name);
  if (shard_offset) *shard_offset = p->shard_off;
  if (shard_n) *shard_n = p->shard_n;
  /* a delayed update still in flight: its tasks finished (on several ranks without the publish, a collective,
   * so that one rank may read its masters alone) */
  ZO_CHECK(e->world > 1 ? eng_dpu_finish(e) : zo_engine_synchronize(e));
  if (eng_device_adam(e))
    return eng_dev_copy(e, out, p->state[ST_MASTER], p->shard_n * sizeof(float), ZO_COPY_D2H);
  if (e->tier != ZO_OFFLOAD_NVME) {
    memcpy(out, p->state[ST_MASTER], p->shard_n * sizeof(float));
    return ZO_OK;
  }
  ZO_CHECK(eng_nv_quiesce(e));
  sg_slot *sl = eng_nv_slot(e->nv, 0);
  const size_t slot_el = eng_nv_slot_el(e->nv);
  for (size_t off = 0, n; off < p->shard_n; off += n) {
    void *res[SL_KINDS];
    n = eng_nv_span(e, p, off, p->shard_n - off, res);
    if (res[ST_MASTER]) { /* resident: in host memory */
      memcpy(out + off, res[ST_MASTER], n * sizeof(float));
      continue;
    }
    if (n > slot_el) n = slot_el;
    ZO_CHECK(eng_swap_io(e, 0, ST_MASTER, p->file_el + off, sl->buf[ST_MASTER], eng_padded_el(e, n),
                         &sl->req[ST_MASTER]));
    zo_status st = eng_swap_wait(e, eng_nv_swap(e->nv), &sl->req[ST_MASTER]);
    if (st != ZO_OK) return zo_error_prefix(st, "get_master '%s'", p->name);
    memcpy(out + off, sl->buf[ST_MASTER], n * sizeof(float));
  }
  return ZO_OK;
}

zo_status zo_engine_nvme_busy(const zo_engine_t *e, double busy_s[2], uint64_t bytes[2]) {
  ENG_CHECK_OWNER(e, "nvme_busy");
  if (!e || !busy_s || !bytes) return zo_error_set(ZO_ERR_INVALID_ARG, "nvme_busy: NULL argument");
  busy_s[0] = busy_s[1] = 0;
  bytes[0] = bytes[1] = 0;
  zo_swap_t *osw = eng_nv_swap(e->nv);
  zo_swap_t *sw[2] = {osw, e->pswap != osw ? e->pswap : NULL};
  for (int i = 0; i < 2; i++) {
    if (!sw[i]) continue;
    double s[2];
    uint64_t b[2];
    ZO_CHECK(zo_swap_busy(sw[i], s, b));
    for (int w = 0; w < 2; w++) busy_s[w] += s[w], bytes[w] += b[w];
  }
  return ZO_OK;
}
