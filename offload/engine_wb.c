/*
 * engine_wb.c - where new working weights go once Adam (or load_param's
 * cast) has written them, and the write-back ring of nvme parameters. Not
 * here: fetching them to the device (engine_fetch.c).
 */
#include <stdlib.h>

#include "engine_internal.h"

/* ---------------------------------------------------------------- working weights */

/* Where the working-dtype copy of shard elements [off, ...) is written:
 * - parameters offloaded to cpu, and nvme parameters cached in host memory
 *   (offload_param.max_in_cpu): the host tier itself (param_host);
 * - the other nvme parameters: a region of the write-back ring, which is
 *   then written to params.swp;
 * - parameters resident, state in device memory: the device tensor itself;
 * - parameters resident, state on the host: the shard's own region of the
 *   pinned staging buffer, so queued uploads never see their source
 *   overwritten within a step. */
void *eng_working_dst(zo_engine_t *e, zo_param_t *p, size_t off) {
  const size_t wsz = zo_dtype_size(e->wdtype);
  if (p->pw_host) /* several ranks at stage 3: the host tier holds only this rank's block */
    return (char *)e->param_host.ptr + (p->pw_el + (eng_dp3(e) ? 0 : p->shard_off) + off) * wsz;
  if (e->ptier == ZO_OFFLOAD_NVME) return p->wb_ptr; /* eng_wb_alloc() for [off, ...) came just before */
  if (e->tier == ZO_OFFLOAD_NONE) return (char *)p->weights + (p->shard_off + off) * wsz;
  return (char *)e->stage_host.ptr + (p->host_off + off) * wsz;
}

/* ---------------------------------------------------------------- write-back ring (offload_param nvme) */

/*
 * New working weights of nvme parameters (from load_param's cast or Adam's
 * fused copy-out) are written into a ring of pinned memory, then to
 * params.swp from there; a region is reused once its write is on disk and
 * no host-to-device copy reads it any more. The ring holds
 * offload_param.buffer_count tensors of the largest size (and at least two
 * sub-groups' worth), so host memory for parameters stays bounded however
 * large the model. A region also serves fetches while it lives: a tensor
 * whose new weights are still there is copied to the device from it, not
 * read back from params.swp.
 */
/* Finish what region @w waits for, blocking: its Adam task (which issues the
 * write), the write, the host-to-device copy. */
static zo_status wb_settle(zo_engine_t *e, wb_entry *w) {
  zo_param_t *p = e->params[w->param];
  if (w->state == WB_FILLING) {
    if (w->early) ZO_CHECK(zo_stream_synchronize(e->copy_stream)); /* its Adam is queued when the gradient lands */
    if (w->early && p->landed_st != ZO_OK) return p->landed_st;
    if (!w->task || !*w->task)
      return zo_error_set(ZO_ERR_INVALID_USAGE, "engine: write-back region of '%s' [%zu, %zu) has no writer",
                          p->name, w->off, w->off + w->n); /* a bug: regions are filled right after allocation */
    ZO_CHECK(eng_finish_adam(e, w->task, p, w->off, w->n)); /* eng_queue_upload() issues the write */
  }
  if (w->state == WB_WRITING) {
    zo_status st = eng_swap_wait(e, e->pswap, &w->req);
    w->state = WB_DONE;
    if (st != ZO_OK) return zo_error_prefix(st, "params.swp write of '%s'", p->name);
  }
  if (w->h2d) {
    ZO_CHECK(zo_event_synchronize(p->ready));
    w->h2d = 0;
  }
  return ZO_OK;
}

/* Collect finished writes without blocking, then free regions from the oldest on. */
zo_status eng_wb_reap(zo_engine_t *e) {
  for (int i = 0; i < e->wb_n; i++) {
    wb_entry *w = wb_at(e, i);
    int done = 0;
    if (w->state == WB_WRITING) {
      ZO_CHECK(zo_swap_poll(e->pswap, w->req, &done));
      if (done) ZO_CHECK(wb_settle(e, w));
    }
    if (w->state == WB_DONE && w->h2d) {
      ZO_CHECK(zo_event_query(e->params[w->param]->ready, &done));
      if (done) w->h2d = 0;
    }
  }
  while (e->wb_n && e->wb[e->wb_first].state == WB_DONE && !e->wb[e->wb_first].h2d && !e->wb[e->wb_first].hold) {
    e->wb_first = (e->wb_first + 1) % e->wb_cap;
    e->wb_n--;
  }
  return ZO_OK;
}

/* Byte offset in the ring where @need bytes fit after the newest region, or -1. */
static int64_t wb_fit(const zo_engine_t *e, size_t need) {
  if (!e->wb_n) return need <= e->wb_bytes ? 0 : -1;
  const wb_entry *first = wb_at(e, 0), *last = wb_at(e, e->wb_n - 1);
  const size_t head = first->ring_off, tail = last->ring_off + last->bytes;
  if (last->ring_off >= head) { /* live regions in one run [head, tail) */
    if (tail + need <= e->wb_bytes) return (int64_t)tail;
    return need <= head ? 0 : -1; /* wrap to the start */
  }
  return tail + need <= head ? (int64_t)tail : -1; /* wrapped: the gap [tail, head) */
}

/* A region for shard elements [off, off + n) of @p, whose writer is *@task
 * (NULL for a synchronous cast); @early: *task is set by on_grad_landed.
 * Blocks, finishing the oldest regions, while the ring is full. Sets
 * p->wb_ptr, which eng_working_dst() returns. */
zo_status eng_wb_alloc(zo_engine_t *e, zo_param_t *p, size_t off, size_t n, zo_adam_task_t **task, int early) {
  /* cpu, and cached nvme tensors, write into param_host; an empty shard (several ranks) writes nothing */
  if (!eng_pw_in_file(e, p) || n == 0) return ZO_OK;
  const size_t need = zo_round_up(n * zo_dtype_size(e->wdtype), e->swap_align);
  ZO_CHECK(eng_wb_reap(e));
  int64_t at;
  while ((at = wb_fit(e, need)) < 0) {
    if (!e->wb_n)
      return zo_error_set(ZO_ERR_INVALID_USAGE, "engine: '%s' needs %zu bytes of write-back ring of %zu", p->name, need,
                          e->wb_bytes); /* a bug: the ring is sized for the largest tensor */
    ZO_CHECK(wb_settle(e, &e->wb[e->wb_first]));
    ZO_CHECK(eng_wb_reap(e));
  }
  if (e->wb_n == e->wb_cap) {
    int cap = e->wb_cap ? 2 * e->wb_cap : 64;
    wb_entry *nw = malloc(cap * sizeof *nw);
    if (!nw) return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "engine: out of host memory");
    for (int i = 0; i < e->wb_n; i++) nw[i] = *wb_at(e, i);
    free(e->wb);
    e->wb = nw;
    e->wb_cap = cap;
    e->wb_first = 0;
  }
  *wb_at(e, e->wb_n++) =
      (wb_entry){.param = p->index, .off = off, .n = n, .ring_off = (size_t)at, .bytes = need, .state = WB_FILLING,
                 .task = task, .early = early};
  p->wb_ptr = (char *)e->wb_ring + at;
  return ZO_OK;
}

/* The newest region of @p holding [off, ...) in @state (-1: any), or NULL. */
wb_entry *eng_wb_find(zo_engine_t *e, const zo_param_t *p, size_t off, int state) {
  for (int i = e->wb_n - 1; i >= 0; i--) {
    wb_entry *w = wb_at(e, i);
    if (w->param == p->index && w->off == off && (state < 0 || w->state == state)) return w;
  }
  return NULL;
}

/* Wait the params.swp writes of @p in flight (all of them, or those that
 * overlap [off, off + n) when n > 0): before p is read back, or written again. */
zo_status eng_wb_drain(zo_engine_t *e, const zo_param_t *p, size_t off, size_t n) {
  for (int i = 0; i < e->wb_n; i++) {
    wb_entry *w = wb_at(e, i);
    if (w->param != p->index || w->state != WB_WRITING) continue;
    if (n && (w->off >= off + n || off >= w->off + w->n)) continue;
    ZO_CHECK(wb_settle(e, w));
  }
  return ZO_OK;
}

/* Publish new working weights of shard elements [off, off + n) written at
 * eng_working_dst(): queue the host-to-device copy when a device copy exists
 * (with one rank this is the whole all-gather), and for nvme parameters in
 * params.swp queue the write of the padded range there (a cached one is
 * published as under cpu: param_host is its home). */
zo_status eng_queue_upload(zo_engine_t *e, zo_param_t *p, size_t off, size_t n) {
  if (n == 0 || (e->ptier == ZO_OFFLOAD_NONE && e->tier == ZO_OFFLOAD_NONE)) return ZO_OK;
  const int in_file = eng_pw_in_file(e, p);
  /* Several ranks: stages 1-2 upload the all-gathered tensor in eng_dp_publish(); stage 3 gathers at every fetch
   * and drops the stale device copies after the step, so only the params.swp write below is left to do. */
  if (e->world > 1 && e->cfg.zero.stage > 0 && !in_file) return ZO_OK;
  const size_t wsz = zo_dtype_size(e->wdtype);
  double t0 = zo_clock_s();
  zo_status st = ZO_OK;
  const void *src = in_file ? NULL : eng_working_dst(e, p, off);
  wb_entry *w = NULL;
  if (in_file) {
    w = eng_wb_find(e, p, off, WB_FILLING);
    if (!w)
      return zo_error_set(ZO_ERR_INVALID_USAGE, "engine: no write-back region for '%s' at %zu", p->name, off); /* a bug */
    src = (char *)e->wb_ring + w->ring_off;
    /* The last write of this range must be on disk first: two writes in flight
     * to one range may land in either order. (Long done, in practice.) */
    st = eng_wb_drain(e, p, off, n);
    /* w->bytes stays inside the tensor's padded extent; several ranks at stage 3 keep only this rank's block */
    const uint64_t el = p->pw_el + (eng_dp3(e) ? 0 : p->shard_off) + off;
    if (st == ZO_OK) st = zo_swap_submit_write(e->pswap, e->pfile, el * wsz, src, w->bytes, &w->req);
    if (st == ZO_OK) w->state = WB_WRITING;
    e->ctr.nvme_write_bytes += w->bytes;
    if (eng_dp3(e)) { /* no device copy to refresh: the next fetch gathers */
      e->ctr.copy_s += zo_clock_s() - t0;
      return st;
    }
  }
  if (st == ZO_OK && p->weights && p->pstate == P_RESIDENT && e->ptier != ZO_OFFLOAD_NONE && !p->persistent &&
      !p->in_use) {
    eng_drop_device_copy(e, p); /* stale: the prefetcher brings the new weights back in trace order */
  } else if (st == ZO_OK && p->weights && p->pstate == P_RESIDENT) {
    /* A cached copy may have been moved by a compaction: pin it (fresh
     * address) while the refresh is queued; it may move again after. */
    const int was_pinned = !p->blk || p->blk_pinned;
    if (!was_pinned) st = eng_blk_pin(e, p);
    if (st == ZO_OK)
      st = zo_memcpy_async(e->copy_stream, (char *)p->weights + (p->shard_off + off) * wsz, src, n * wsz, ZO_COPY_H2D);
    if (st == ZO_OK && p->ready) st = zo_event_record(p->ready, e->copy_stream); /* fetch waits for the refresh */
    if (st == ZO_OK && !was_pinned) st = eng_blk_unpin(e, p, e->copy_stream);
    if (w) w->h2d = 1;
    e->ctr.h2d_bytes += n * wsz;
  }
  e->ctr.copy_s += zo_clock_s() - t0;
  return st;
}

/* Working weights from fp32 master values (load time; steps fuse this into Adam). */
zo_status eng_upload_shard(zo_engine_t *e, zo_param_t *p, size_t off, size_t n, const float *master) {
  if (eng_device_adam(e)) { /* the working copy is device memory: cast on the host, then one copy */
    const size_t wsz = zo_dtype_size(e->wdtype);
    void *tmp = malloc(n ? n * wsz : 1);
    if (!tmp) return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "engine: out of host memory for the working copy of '%s'",
                                  p->name);
    zo_status st = zo_cast(tmp, e->wdtype, master, ZO_DTYPE_F32, n, zo_adam_pool_threads(e->pool));
    if (st == ZO_OK) st = eng_dev_copy(e, eng_working_dst(e, p, off), tmp, n * wsz, ZO_COPY_H2D);
    free(tmp);
    return st;
  }
  /* param_host is written in place: a host-to-device copy out of it (a fetch, a refresh) must have landed first */
  if (p->pw_host && p->ready) ZO_CHECK(zo_event_synchronize(p->ready));
  ZO_CHECK(eng_wb_alloc(e, p, off, n, NULL, 0));
  ZO_CHECK(zo_cast(eng_working_dst(e, p, off), e->wdtype, master, ZO_DTYPE_F32, n, zo_adam_pool_threads(e->pool)));
  return eng_queue_upload(e, p, off, n);
}
