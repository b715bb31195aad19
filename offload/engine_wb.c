/*
 * engine_wb.c - where new working weights go once Adam (or load_param's
 * cast) has written them: the write-back ring of nvme parameters, and their
 * publish (the refresh of a device copy, the write to params.swp). Not here:
 * fetching them to the device (engine_fetch.c), which sits above this file.
 */
#include <stdlib.h>

#include "engine_internal.h"
#include "pinned_internal.h"

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
  if (e->pdev) /* this rank's block in device memory: written there by device Adam, else uploaded from staging */
    return e->tier == ZO_OFFLOAD_NONE ? e->param_dev + (p->pw_el + off) * wsz
                                      : (char *)e->stage_host.ptr + (p->host_off + off) * wsz;
  if (p->pw_host) /* several ranks at stage 3: the host tier holds only this rank's block */
    return (char *)e->param_host.ptr + (p->pw_el + (eng_dp3(e) ? 0 : p->shard_off) + off) * wsz;
  if (e->ptier == ZO_OFFLOAD_NVME)
    return p->wb_ptr; /* eng_wb_alloc() for [off, ...) came just before */
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

/* One region of the ring. */
typedef struct wb_entry {
  int param;              /* tensor index */
  size_t off, n;          /* shard elements it holds */
  size_t ring_off, bytes; /* bytes of the ring (n elements padded to the swap alignment) */
  int state; /* WB_FILLING (cast or Adam writing it), WB_WRITING (params.swp write), WB_DONE */
  zo_swap_req_t *req;
  zo_adam_task_t **task; /* the Adam task filling it; NULL for a cast */
  int early;             /* *task is set by on_grad_landed on the copy stream */
  int h2d;  /* a host-to-device copy from it may be in flight (the tensor's ready event) */
  int hold; /* a fetch is about to copy from it: not freed meanwhile */
} wb_entry;

enum { WB_FILLING = 0, WB_WRITING = 1, WB_DONE = 2 };

/* The ring (e->wb): created with the engine, its memory allocated at finalize under offload_param "nvme". */
struct eng_wb {
  void *ring;   /* pinned write-back ring of new working weights, or NULL */
  size_t bytes; /* its size */
  wb_entry *q;  /* its live regions, oldest first: circular, n from first */
  int first, n, cap;
};

/* The i-th live region of the ring, oldest first. */
static inline wb_entry *wb_at(const struct eng_wb *wb, int i) {
  return &wb->q[(wb->first + i) % wb->cap];
}

zo_status eng_wb_create(zo_engine_t *e) {
  e->wb = calloc(1, sizeof *e->wb);
  return e->wb ? ZO_OK : zo_error_set(ZO_ERR_OUT_OF_MEMORY, "engine: out of host memory");
}

/* The ring of the plan's size (plan.c), noted in the ledger. */
zo_status eng_wb_ring_alloc(zo_engine_t *e, const zo_plan *plan) {
  struct eng_wb *wb = e->wb;
  if (!plan->wb_bytes)
    return ZO_OK; /* every tensor cached in param_host: nothing is written to params.swp */
  /* the budget refused this already (saturated); kept for callers that skip it */
  if (plan->wb_bytes == SIZE_MAX)
    return zo_error_set(ZO_ERR_CONFIG,
                        "zero_optimization.offload_param.buffer_count: the write-back ring of %d "
                        "buffers of %zu elements is more bytes than size_t holds",
                        plan->n_pstage, plan->pstage_el);
  wb->bytes = plan->wb_bytes;
  int pinned;
  zo_status st = zo_host_alloc(wb->bytes, 1, &wb->ring, &pinned);
  if (st != ZO_OK)
    return zo_error_prefix(st,
                           "engine: offload_param write-back ring (%zu bytes; lower "
                           "zero_optimization.offload_param.buffer_count or buffer_size)",
                           wb->bytes);
  eng_ledger_note(e, ZO_TIER_HOST, "write_back_ring", wb->bytes, 1, -1);
  return eng_pin_check(e, "write_back_ring", wb->ring, wb->bytes);
}

/* Wait the params.swp writes in flight (errors ignored), then free the ring. */
void eng_wb_free(zo_engine_t *e) {
  struct eng_wb *wb = e->wb;
  if (!wb) return;
  for (int i = 0; i < wb->n; i++) {
    wb_entry *w = wb_at(wb, i);
    if (w->state == WB_WRITING) zo_swap_wait(e->pswap, w->req);
  }
  free(wb->q);
  if (wb->ring) zo_host_free(wb->ring, wb->bytes, 1);
  free(wb);
  e->wb = NULL;
}

/* Finish what region @w waits for, blocking: its Adam task (which issues the
 * write), the write, the host-to-device copy. */
static zo_status wb_settle(zo_engine_t *e, wb_entry *w) {
  zo_param_t *p = e->params[w->param];
  if (w->state == WB_FILLING) {
    if (w->early)
      ZO_CHECK(
          zo_stream_synchronize(e->copy_stream)); /* its Adam is queued when the gradient lands */
    if (w->early && p->landed_st != ZO_OK) return p->landed_st;
    if (!w->task || !*w->task)
      return zo_error_set(ZO_ERR_INVALID_USAGE,
                          "engine: write-back region of '%s' [%zu, %zu) has no writer", p->name,
                          w->off,
                          w->off + w->n); /* a bug: regions are filled right after allocation */
    ZO_CHECK(
        eng_finish_adam(e, w->task, p, w->off, w->n)); /* eng_queue_upload() issues the write */
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
  struct eng_wb *wb = e->wb;
  for (int i = 0; i < wb->n; i++) {
    wb_entry *w = wb_at(wb, i);
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
  while (wb->n && wb->q[wb->first].state == WB_DONE && !wb->q[wb->first].h2d &&
         !wb->q[wb->first].hold) {
    wb->first = (wb->first + 1) % wb->cap;
    wb->n--;
  }
  return ZO_OK;
}

/* Byte offset in the ring where @need bytes fit after the newest region, or -1. */
static int64_t wb_fit(const struct eng_wb *wb, size_t need) {
  if (!wb->n) return need <= wb->bytes ? 0 : -1;
  const wb_entry *first = wb_at(wb, 0), *last = wb_at(wb, wb->n - 1);
  const size_t head = first->ring_off, tail = last->ring_off + last->bytes;
  if (last->ring_off >= head) { /* live regions in one run [head, tail) */
    if (tail + need <= wb->bytes) return (int64_t)tail;
    return need <= head ? 0 : -1; /* wrap to the start */
  }
  return tail + need <= head ? (int64_t)tail : -1; /* wrapped: the gap [tail, head) */
}

/* A region for shard elements [off, off + n) of @p, whose writer is *@task
 * (NULL for a synchronous cast); @early: *task is set by on_grad_landed.
 * Blocks, finishing the oldest regions, while the ring is full. Sets
 * p->wb_ptr, which eng_working_dst() returns. */
zo_status eng_wb_alloc(zo_engine_t *e, zo_param_t *p, size_t off, size_t n, zo_adam_task_t **task,
                       int early) {
  /* cpu, and cached nvme tensors, write into param_host; an empty shard (several ranks) writes nothing */
  if (!eng_pw_in_file(e, p) || n == 0) return ZO_OK;
  struct eng_wb *wb = e->wb;
  const size_t need = zo_round_up(n * zo_dtype_size(e->wdtype), e->swap_align);
  ZO_CHECK(eng_wb_reap(e));
  int64_t at;
  while ((at = wb_fit(wb, need)) < 0) {
    /* a bug: the ring is sized for the largest tensor */
    if (!wb->n)
      return zo_error_set(ZO_ERR_INVALID_USAGE,
                          "engine: '%s' needs %zu bytes of write-back ring of %zu", p->name, need,
                          wb->bytes);
    ZO_CHECK(wb_settle(e, &wb->q[wb->first]));
    ZO_CHECK(eng_wb_reap(e));
  }
  if (wb->n == wb->cap) {
    int cap = wb->cap ? 2 * wb->cap : 64;
    wb_entry *nw = malloc(cap * sizeof *nw);
    if (!nw) return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "engine: out of host memory");
    for (int i = 0; i < wb->n; i++) nw[i] = *wb_at(wb, i);
    free(wb->q);
    wb->q = nw;
    wb->cap = cap;
    wb->first = 0;
  }
  *wb_at(wb, wb->n++) = (wb_entry){.param = p->index,
                                   .off = off,
                                   .n = n,
                                   .ring_off = (size_t)at,
                                   .bytes = need,
                                   .state = WB_FILLING,
                                   .task = task,
                                   .early = early};
  p->wb_ptr = (char *)wb->ring + at;
  return ZO_OK;
}

/* The newest region of @p holding [off, ...) in @state (-1: any), or NULL. */
static wb_entry *wb_find(const struct eng_wb *wb, const zo_param_t *p, size_t off, int state) {
  for (int i = wb->n - 1; i >= 0; i--) {
    wb_entry *w = wb_at(wb, i);
    if (w->param == p->index && w->off == off && (state < 0 || w->state == state)) return w;
  }
  return NULL;
}

/* The newest region of @p from shard element 0, when it holds exactly @n elements that are written (no longer being
 * filled); NULL when there is none or the newest is not so. */
wb_entry *eng_wb_written(const struct eng_wb *wb, const zo_param_t *p, size_t n) {
  wb_entry *w = wb_find(wb, p, 0, -1);
  return w && w->state != WB_FILLING && w->n == n ? w : NULL;
}

const void *eng_wb_data(const struct eng_wb *wb, const wb_entry *w) {
  return (const char *)wb->ring + w->ring_off;
}

void eng_wb_hold(wb_entry *w, int hold) { w->hold = hold; }

void eng_wb_mark_h2d(wb_entry *w) { w->h2d = 1; }

size_t eng_wb_ring_bytes(const struct eng_wb *wb) { return wb->bytes; }

int eng_wb_live(const struct eng_wb *wb) { return wb->n; }

/* Wait the params.swp writes of @p in flight (all of them, or those that
 * overlap [off, off + n) when n > 0): before p is read back, or written again. */
zo_status eng_wb_drain(zo_engine_t *e, const zo_param_t *p, size_t off, size_t n) {
  for (int i = 0; i < e->wb->n; i++) {
    wb_entry *w = wb_at(e->wb, i);
    if (w->param != p->index || w->state != WB_WRITING) continue;
    if (n && (w->off >= off + n || off >= w->off + w->n)) continue;
    ZO_CHECK(wb_settle(e, w));
  }
  return ZO_OK;
}

zo_status eng_wb_write(zo_engine_t *e, zo_param_t *p, size_t off, size_t n, const void **src,
                       wb_entry **wp) {
  wb_entry *w = *wp = wb_find(e->wb, p, off, WB_FILLING);
  if (!w)
    return zo_error_set(ZO_ERR_INVALID_USAGE, "engine: no write-back region for '%s' at %zu",
                        p->name, off);
  *src = eng_wb_data(e->wb, w);
  /* The last write of this range must be on disk first: two writes in flight
   * to one range may land in either order. (Long done, in practice.) */
  zo_status st = eng_wb_drain(e, p, off, n);
  /* w->bytes stays inside the tensor's padded extent; several ranks at stage 3 keep only this rank's block */
  const uint64_t el = p->pw_el + (eng_dp3(e) ? 0 : p->shard_off) + off;
  if (st == ZO_OK)
    st = zo_swap_submit_write(e->pswap, e->pfile, el * zo_dtype_size(e->wdtype), *src, w->bytes,
                              &w->req);
  if (st == ZO_OK) w->state = WB_WRITING;
  e->ctr.nvme_write_bytes += w->bytes;
  return st;
}

/* ---------------------------------------------------------------- the publish */

/* Publish new working weights of shard elements [off, off + n) written at
 * eng_working_dst(): queue the host-to-device copy when a device copy exists
 * (with one rank this is the whole all-gather), and for nvme parameters in
 * params.swp queue the write of the padded range there (a cached one is
 * published as under cpu: param_host is its home). */
zo_status eng_queue_upload(zo_engine_t *e, zo_param_t *p, size_t off, size_t n) {
  if (n == 0 || (e->ptier == ZO_OFFLOAD_NONE && e->tier == ZO_OFFLOAD_NONE)) return ZO_OK;
  if (e->pdev) { /* the block's home is device memory: device Adam wrote it there, else upload it */
    if (e->tier == ZO_OFFLOAD_NONE) return ZO_OK;
    const size_t wsz = zo_dtype_size(e->wdtype);
    const double t0 = zo_clock_s();
    zo_status st = zo_memcpy_async(e->copy_stream, e->param_dev + (p->pw_el + off) * wsz,
                                   eng_working_dst(e, p, off), n * wsz, ZO_COPY_H2D);
    e->ctr.h2d_bytes += n * wsz;
    e->ctr.copy_s += zo_clock_s() - t0;
    return st;
  }
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
    st = eng_wb_write(e, p, off, n, &src, &w);
    if (!w) return st; /* no region filling for it: a bug */
    if (eng_dp3(e)) {  /* no device copy to refresh: the next fetch gathers */
      e->ctr.copy_s += zo_clock_s() - t0;
      return st;
    }
  }
  if (st == ZO_OK && p->weights && p->pstate == P_RESIDENT && e->ptier != ZO_OFFLOAD_NONE &&
      !p->persistent && !p->in_use) {
    /* stale: the prefetcher brings the new weights back in trace order */
    eng_drop_device_copy(e, p);
  } else if (st == ZO_OK && p->weights && p->pstate == P_RESIDENT) {
    /* A cached copy may have been moved by a compaction: pin it (fresh
     * address) while the refresh is queued; it may move again after. */
    const int was_pinned = !p->blk || p->blk_pinned;
    if (!was_pinned) st = eng_blk_pin(e, p);
    if (st == ZO_OK)
      st = zo_memcpy_async(e->copy_stream, (char *)p->weights + (p->shard_off + off) * wsz, src,
                           n * wsz, ZO_COPY_H2D);
    if (st == ZO_OK && p->ready)
      st = zo_event_record(p->ready, e->copy_stream); /* fetch waits for the refresh */
    if (st == ZO_OK && !was_pinned) st = eng_blk_unpin(e, p, e->copy_stream);
    if (w) eng_wb_mark_h2d(w);
    e->ctr.h2d_bytes += n * wsz;
  }
  e->ctr.copy_s += zo_clock_s() - t0;
  return st;
}

/* Working weights from fp32 master values (load time; steps fuse this into Adam). */
zo_status eng_upload_shard(zo_engine_t *e, zo_param_t *p, size_t off, size_t n,
                           const float *master) {
  if (eng_device_adam(e)) { /* the working copy is device memory: cast on the host, then one copy */
    const size_t wsz = zo_dtype_size(e->wdtype);
    void *tmp = malloc(n ? n * wsz : 1);
    if (!tmp)
      return zo_error_set(ZO_ERR_OUT_OF_MEMORY,
                          "engine: out of host memory for the working copy of '%s'", p->name);
    zo_status st = zo_cast(tmp, e->wdtype, master, ZO_DTYPE_F32, n, zo_adam_pool_threads(e->pool));
    if (st == ZO_OK) st = eng_dev_copy(e, eng_working_dst(e, p, off), tmp, n * wsz, ZO_COPY_H2D);
    free(tmp);
    return st;
  }
  /* param_host is written in place: a host-to-device copy out of it (a fetch, a refresh) must have landed first */
  if (p->pw_host && p->ready) ZO_CHECK(zo_event_synchronize(p->ready));
  ZO_CHECK(eng_wb_alloc(e, p, off, n, NULL, 0));
  ZO_CHECK(zo_cast(eng_working_dst(e, p, off), e->wdtype, master, ZO_DTYPE_F32, n,
                   zo_adam_pool_threads(e->pool)));
  return eng_queue_upload(e, p, off, n);
}

zo_status eng_wait_adam(zo_adam_task_t **task, const zo_param_t *p, size_t off, size_t n) {
  zo_status st = zo_adam_task_wait(*task, NULL);
  *task = NULL;
  if (st != ZO_OK) return zo_error_prefix(st, "adam '%s' [%zu, %zu)", p->name, off, off + n);
  return ZO_OK;
}

/* Wait an Adam task, then queue the upload of the working weights it wrote. */
zo_status eng_finish_adam(zo_engine_t *e, zo_adam_task_t **task, zo_param_t *p, size_t off,
                          size_t n) {
  ZO_CHECK(eng_wait_adam(task, p, off, n));
  return eng_queue_upload(e, p, off, n);
}
