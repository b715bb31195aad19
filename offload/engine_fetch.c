/*
 * engine_fetch.c - the fetch coordinator of offloaded parameters: fetch,
 * prefetch along the trace of the fetch order (engine_trace.c), eviction
 * (LRU, and Belady's choice for prefetches), release; fetch and release move
 * the engine's pipelines on (eng_progress). Not here: where new weights are
 * published (engine_wb.c), the device copies' blocks (engine_core.c), NVMe
 * I/O (swap/).
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"
#include "nvtx.h"
#include "pinned_internal.h"
#include "plan_internal.h"

/* The fetch coordinator (e->fetch): created with the engine, its staging buffers allocated at finalize under
 * offload_param "nvme". */
struct eng_fetch {
  void **pstage; /* nvme: offload_param.buffer_count pinned staging buffers */
  int n_pstage;
  size_t pstage_el;      /* elements per staging buffer */
  uint64_t *pstage_busy; /* per staging buffer: tensor index + 1 while in use, else 0 */
  size_t inflight_el;    /* in-flight working-copy elements */
  int trace_warned;      /* the fetch order left the trace: warned once per engine */
  int64_t fetch_clock;
};

zo_status eng_fetch_create(zo_engine_t *e) {
  e->fetch = calloc(1, sizeof *e->fetch);
  return e->fetch ? ZO_OK : zo_error_set(ZO_ERR_OUT_OF_MEMORY, "engine: out of host memory");
}

/* The plan's staging buffers of nvme reads, each noted in the ledger. */
zo_status eng_fetch_stage_alloc(zo_engine_t *e, const zo_plan *plan) {
  struct eng_fetch *f = e->fetch;
  f->pstage_el = plan->pstage_el;
  f->n_pstage = plan->n_pstage;
  f->pstage = calloc(f->n_pstage, sizeof *f->pstage);
  f->pstage_busy = calloc(f->n_pstage, sizeof *f->pstage_busy);
  if (!f->pstage || !f->pstage_busy)
    return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "engine: out of host memory");
  const size_t each = zo_plan_bytes(plan, "offload_param.staging");
  for (int b = 0; b < f->n_pstage; b++) {
    int pinned;
    zo_status st = zo_host_alloc(each, 1, &f->pstage[b], &pinned);
    if (st != ZO_OK)
      return zo_error_prefix(st,
                             "engine: offload_param staging buffer %d of %d (%zu bytes; lower "
                             "zero_optimization.offload_param.buffer_count)",
                             b + 1, f->n_pstage, each);
    eng_ledger_note(e, ZO_TIER_HOST, "offload_param.staging", each, 1, -1);
    ZO_CHECK(eng_pin_check(e, "offload_param.staging", f->pstage[b], each));
  }
  return ZO_OK;
}

void eng_fetch_free(zo_engine_t *e) {
  struct eng_fetch *f = e->fetch;
  if (!f) return;
  for (int i = 0; i < f->n_pstage; i++)
    zo_host_free(f->pstage[i], f->pstage_el * zo_dtype_size(e->wdtype), 1);
  free(f->pstage);
  free(f->pstage_busy);
  free(f);
  e->fetch = NULL;
}

void *eng_fetch_stage(const struct eng_fetch *f, int b) {
  return b < f->n_pstage ? f->pstage[b] : NULL;
}

size_t eng_fetch_stage_bytes(const zo_engine_t *e) {
  return (size_t)e->fetch->n_pstage * e->fetch->pstage_el * zo_dtype_size(e->wdtype);
}

/* ---------------------------------------------------------------- device copies in the arena */

/* ---------------------------------------------------------------- fetch coordinator */

/* Make room for @need bytes of device memory by dropping released device
 * copies, least recently used first, persistent ones last. Returns 1 when
 * something was dropped. */
static int evict_one(zo_engine_t *e) {
  zo_param_t *victim = NULL;
  for (int pass = 0; pass < 2 && !victim; pass++)
    for (int i = 0; i < e->n_params; i++) {
      zo_param_t *q = e->params[i];
      if (q->pstate != P_RESIDENT || q->in_use || q->persistent != pass) continue;
      if (!victim || q->last_use < victim->last_use) victim = q;
    }
  if (!victim) return 0;
  eng_drop_device_copy(e, victim);
  return 1;
}

/* The nvme read of q's working copy is done (or is waited for here): start
 * its host-to-device copy from the staging buffer. */
static zo_status finish_read(zo_engine_t *e, zo_param_t *q) {
  const size_t wsz = zo_dtype_size(e->wdtype);
  zo_status st = eng_swap_wait(e, e->pswap, &q->read_req);
  if (st != ZO_OK) return zo_error_prefix(st, "fetch '%s'", q->name);
  ZO_CHECK(zo_memcpy_async(e->copy_stream, q->weights, e->fetch->pstage[q->stage], q->n * wsz,
                           ZO_COPY_H2D));
  ZO_CHECK(zo_event_record(q->ready, e->copy_stream));
  e->ctr.h2d_bytes += q->n * wsz;
  q->pstate = P_COPYING;
  return ZO_OK;
}

/* Make room for a prefetch of the tensor at trace position @pos: drop the
 * released device copy whose next use lies furthest beyond @pos (Belady's
 * choice, known exactly from the trace). Returns 1 when one was dropped. */
static int evict_for_prefetch(zo_engine_t *e, int pos) {
  zo_param_t *victim = NULL;
  int far = pos;
  for (int i = 0; i < e->n_params; i++) {
    zo_param_t *q = e->params[i];
    if (q->pstate != P_RESIDENT || q->in_use || q->persistent) continue;
    int u = eng_trace_next_use(e->trace, q->index);
    if (u > far) far = u, victim = q;
  }
  if (!victim) return 0;
  eng_drop_device_copy(e, victim);
  return 1;
}

/* q's host-to-device copy has landed: free its staging buffer; a copy no
 * fetch holds may be moved by a compaction from now on. */
static zo_status copy_landed(zo_engine_t *e, zo_param_t *q) {
  struct eng_fetch *f = e->fetch;
  if (q->stage >= 0) f->pstage_busy[q->stage] = 0;
  q->stage = -1;
  q->pstate = P_RESIDENT;
  f->inflight_el -= q->n;
  return q->in_use ? ZO_OK : eng_blk_unpin(e, q, e->compute_stream);
}

/* Move in-flight fetches forward without blocking: a finished nvme read
 * starts its host-to-device copy; a finished copy frees its staging buffer. */
static zo_status pump(zo_engine_t *e) {
  ZO_CHECK(eng_wb_reap(e)); /* finished params.swp writes free their write-back regions */
  for (int i = 0; i < e->n_params; i++) {
    zo_param_t *p = e->params[i];
    int done = 0;
    if (p->pstate == P_READING) {
      ZO_CHECK(zo_swap_poll(e->pswap, p->read_req, &done));
      if (done) ZO_CHECK(finish_read(e, p));
    }
    if (p->pstate == P_COPYING) {
      ZO_CHECK(zo_event_query(p->ready, &done));
      if (done) ZO_CHECK(copy_landed(e, p));
    }
  }
  return ZO_OK;
}

/* A free nvme staging buffer, or -1. With @wait, completes the oldest
 * in-flight fetch that holds one instead of giving up. */
static zo_status free_stage(zo_engine_t *e, int wait, int *b) {
  struct eng_fetch *f = e->fetch;
  *b = -1;
  ZO_CHECK(pump(e));
  for (int k = 0; k < f->n_pstage; k++)
    if (!f->pstage_busy[k]) {
      *b = k;
      return ZO_OK;
    }
  if (!wait) return ZO_OK;
  zo_param_t *q = NULL; /* every buffer is held by a fetch in flight: finish the one issued first */
  for (int k = 0; k < f->n_pstage; k++) {
    zo_param_t *c = e->params[f->pstage_busy[k] - 1];
    if (!q || c->last_use < q->last_use) q = c;
  }
  if (q->pstate == P_READING) ZO_CHECK(finish_read(e, q));
  ZO_CHECK(zo_event_synchronize(q->ready));
  *b = q->stage;
  ZO_CHECK(copy_landed(e, q));
  return ZO_OK;
}

/* A device block for @p's working copy, pinned, at p->weights (*got = 1). A prefetch
 * of trace position @pos may evict only copies needed later than @pos and
 * gives up (*got = 0) when that finds no room; a demand fetch evicts LRU and
 * waits for prefetches in flight instead. */
static zo_status device_copy_alloc(zo_engine_t *e, zo_param_t *p, int demand, int pos, int *got) {
  const size_t wsz = zo_dtype_size(e->wdtype);
  *got = 0;
  for (;;) {
    zo_status st = zo_arena_alloc(e->arena, p->n * wsz,
                                  &p->blk); /* compacts when fragmentation is in the way */
    if (st == ZO_OK) {
      p->weights = zo_arena_ptr(p->blk);
      p->blk_pinned = 1;
      break;
    }
    p->blk = NULL;
    if (st != ZO_ERR_OUT_OF_MEMORY) return st;
    if (!demand) {
      if (evict_for_prefetch(e, pos)) continue;
      return ZO_OK;
    }
    if (evict_one(e)) continue;
    if (e->fetch
            ->inflight_el) { /* prefetches hold the room: let them land, then they can be evicted */
      ZO_CHECK(eng_settle_fetches(e));
      if (evict_one(e)) continue;
    }
    return zo_error_prefix(st,
                           "fetch '%s' (%zu bytes): every device copy is in use; raise "
                           "zoffload.device_memory_limit or release tensors sooner",
                           p->name, p->n * wsz);
  }
  *got = 1;
  return ZO_OK;
}

/* Start bringing @p's working copy to the device: device buffer, then (nvme)
 * a read into a staging buffer or (cpu, and nvme tensors cached in
 * param_host) the host-to-device copy. A prefetch
 * of trace position @pos may evict only copies needed later than @pos, and
 * returns ZO_OK with *started = 0 when it finds no room (device memory or
 * staging buffers); a demand fetch evicts and waits instead. */
static zo_status start_fetch(zo_engine_t *e, zo_param_t *p, int demand, int pos, int *started) {
  struct eng_fetch *f = e->fetch;
  const size_t wsz = zo_dtype_size(e->wdtype);
  const int in_file =
      eng_pw_in_file(e, p); /* else in param_host: copied from there, no staging, no disk */
  *started = 0;
  int b = -1;
  /* stage 3 on several ranks: the tensor all-gathered for this fetch (engine_dp3.c); a prefetch whose gather has
   * not landed yet waits for a later call */
  const void *gathered = NULL;
  if (eng_dp3(e)) {
    ZO_CHECK(eng_pg_src(e, pos, demand, &gathered));
    if (!gathered) return ZO_OK;
  }
  /* nvme: while the tensor's new weights are still being written to
   * params.swp, its write-back source in host memory is the freshest copy:
   * copy from there, no read (this is what lets the next step's first layers,
   * updated last, start without a write-then-read round trip). */
  wb_entry *fw = in_file && p->shard_n == p->n ? eng_wb_written(e->wb, p, p->n) : NULL;
  const int forward = fw != NULL;
  if (forward) eng_wb_hold(fw, 1); /* making device room below may reap regions */
  if (in_file && !forward && !gathered) {
    ZO_CHECK(free_stage(e, demand, &b));
    if (b < 0) return ZO_OK;
  }
  int got = 0;
  zo_status dst = device_copy_alloc(e, p, demand, pos, &got);
  if (forward) eng_wb_hold(fw, 0);
  if (dst != ZO_OK || !got) return dst;
  e->dev_live_el += p->n;
  f->inflight_el += p->n;
  p->last_use = ++f->fetch_clock;
  const void *host_src = gathered   ? gathered
                         : !in_file ? (char *)e->param_host.ptr + p->pw_el * wsz
                         : forward  ? eng_wb_data(e->wb, fw)
                                    : NULL;
  if (host_src) {
    const int d2d = gathered && eng_pg_on_device(e->pg); /* gathered in device memory */
    ZO_CHECK(zo_memcpy_async(e->copy_stream, p->weights, host_src, p->n * wsz,
                             d2d ? ZO_COPY_D2D : ZO_COPY_H2D));
    ZO_CHECK(zo_event_record(p->ready, e->copy_stream));
    if (forward)
      eng_wb_mark_h2d(fw), eng_wb_hold(fw, 0); /* the region lives until this copy is done */
    if (gathered) eng_pg_mark_h2d(e, pos);     /* likewise the gather's region */
    if (!d2d) e->ctr.h2d_bytes += p->n * wsz;
    p->pstate = P_COPYING;
  } else {
    ZO_CHECK(eng_wb_drain(e, p, 0, 0)); /* params.swp must hold the last update */
    f->pstage_busy[b] = (uint64_t)p->index + 1;
    p->stage = b;
    size_t nbytes = zo_round_up(p->n * wsz, e->swap_align);
    /* Ahead of optimizer-state transfers still queued: compute will wait for this one. */
    zo_status st = zo_swap_submit_read_urgent(e->pswap, e->pfile, p->pw_el * wsz, f->pstage[b],
                                              nbytes, &p->read_req);
    if (st != ZO_OK) return zo_error_prefix(st, "fetch '%s'", p->name);
    e->ctr.nvme_read_bytes += nbytes;
    p->pstate = P_READING;
  }
  *started = 1;
  return ZO_OK;
}

/* Prefetch along the trace from the current position: the next tensors not
 * on the device, while the in-flight elements stay within
 * stage3_prefetch_bucket_size and the device-held ones within
 * stage3_max_live_parameters. Never crosses the end of the step (the
 * optimizer step changes the weights). */
zo_status eng_prefetch_ahead(zo_engine_t *e) {
  struct eng_fetch *f = e->fetch;
  ZO_CHECK(pump(e));
  if (eng_dp3(e))
    ZO_CHECK(eng_pg_issue(e)); /* the gathers along the trace come first, in trace order */
  const struct eng_trace *t = e->trace;
  if (!eng_trace_follow(t)) return ZO_OK;
  /* Refill in batches: wait until half the bucket has landed, then fill it, so
   * the copy engine takes many tensors per wake-up instead of one per release. */
  if ((int64_t)f->inflight_el * 2 > e->cfg.zero.stage3_prefetch_bucket_size) return ZO_OK;
  for (int j = eng_trace_pos(t); j < eng_trace_len(t); j++) {
    zo_param_t *q = e->params[eng_trace_at(t, j)];
    if (q->pstate != P_HOST) continue;
    if ((int64_t)(f->inflight_el + q->n) > e->cfg.zero.stage3_prefetch_bucket_size ||
        (int64_t)(e->dev_live_el + q->n) > e->cfg.zero.stage3_max_live_parameters)
      break;
    int started;
    ZO_CHECK(start_fetch(e, q, 0, j, &started));
    if (!started) break;
    e->ctr.n_prefetch++;
  }
  return ZO_OK;
}

/* Follow (or record) the fetch order: the first step's order is the trace;
 * a fetch that departs from it switches the rest of the step to demand
 * fetching, with one warning, and the step's order becomes the new trace. */
static zo_status trace_fetch(zo_engine_t *e, zo_param_t *p) {
  struct eng_fetch *f = e->fetch;
  const struct eng_trace *t = e->trace;
  int left;
  ZO_CHECK(eng_trace_record(e->trace, p->index, &left));
  if (!left) return ZO_OK;
  const int pos = eng_trace_pos(t);
  if (!f->trace_warned)
    zo_warn(
        "fetch order differs from the recorded trace (at fetch %d: expected '%s', got '%s'): fetching on "
        "demand for the rest of the step and recording the new order",
        pos, pos < eng_trace_len(t) ? e->params[eng_trace_at(t, pos)]->name : "(end of trace)",
        p->name);
  f->trace_warned = 1;
  if (eng_dp3(e))
    ZO_CHECK(
        eng_pg_drop_pending(e)); /* gathered ahead along the old trace: no fetch will use them */
  return ZO_OK;
}

/* Before the optimizer rewrites the working copies: let every fetch in flight
 * land (reads of params.swp and copies out of the host tier). */
zo_status eng_settle_fetches(zo_engine_t *e) {
  for (int i = 0; i < e->n_params; i++)
    if (e->params[i]->pstate == P_READING) ZO_CHECK(finish_read(e, e->params[i]));
  ZO_CHECK(zo_stream_synchronize(e->copy_stream));
  return pump(e);
}

/* At the end of a step: adopt the step's fetch order as the trace when there
 * was none or it changed. */
zo_status eng_trace_end_step(zo_engine_t *e) {
  if (eng_dp3(e)) ZO_CHECK(eng_pg_drop_pending(e)); /* a step that ended before its trace did */
  if (e->ptier == ZO_OFFLOAD_NONE || !eng_trace_recorded(e->trace)) return ZO_OK;
  ZO_CHECK(eng_trace_adopt(e->trace));
  eng_pg_rewind(e->pg);
  return ZO_OK;
}

/* Compute must not start before @ev: with a compute stream, it waits on the
 * device (the host goes on queueing); without one, the host waits. */
static zo_status wait_ready(zo_engine_t *e, zo_event_t *ev) {
  return e->compute_stream ? zo_stream_wait_event(e->compute_stream, ev) : zo_event_synchronize(ev);
}

static zo_status fetch(zo_engine_t *e, zo_param_t *p, const void **weights, zo_dtype *dtype) {
  if (!e || !p || !weights) return zo_error_set(ZO_ERR_INVALID_ARG, "fetch: NULL argument");
  struct eng_fetch *f = e->fetch;
  if (!e->finalized)
    return zo_error_set(ZO_ERR_INVALID_USAGE, "fetch '%s': engine not finalized", p->name);
  /* zoffload.early_adam false: nothing updates the weights before the step, so a further forward (a second
   * backward pass's, zo_engine_grad_reopen) may fetch them */
  if (p->has_grad && e->cfg.zoffload.early_adam)
    return zo_error_set(
        ZO_ERR_INVALID_USAGE,
        "fetch '%s': its gradient was handed over in this step "
        "(zo_engine_grad_ready) and zoffload.early_adam is true, so its weights may already be "
        "updated; fetch it before that, or after zo_engine_step()",
        p->name);
  double t0 = zo_clock_s();
  zo_status st;
  int entry_state = P_RESIDENT;
  if (e->ptier == ZO_OFFLOAD_NONE) {
    st = wait_ready(e, eng_ready_per_tensor(e) ? p->ready : e->weights_ready);
    if (st != ZO_OK) return zo_error_prefix(st, "fetch '%s': working weight upload", p->name);
  } else {
    ZO_CHECK(trace_fetch(e, p));
    entry_state = p->pstate;
    /* stage 3 on several ranks: every fetch has its gather, issued ahead along the trace or now */
    int pos = 0;
    if (eng_dp3(e)) {
      if (eng_trace_follow(e->trace)) {
        pos = eng_trace_pos(e->trace) - 1;
        ZO_CHECK(eng_pg_issue(e));
      } else {
        pos = -1;
        ZO_CHECK(eng_pg_demand(e, p));
      }
    }
    if (p->pstate == P_HOST) {
      int started;
      ZO_CHECK(start_fetch(e, p, 1, pos, &started));
      e->ctr.n_demand++;
    }
    if (p->pstate == P_READING) ZO_CHECK(finish_read(e, p));
    p->in_use++;
    p->last_use = ++f->fetch_clock;
    ZO_CHECK(eng_blk_pin(e, p)); /* not moved until release; prefetches below may compact */
    /* The host-to-device copy, or a refresh queued after the last step. With
     * a compute stream the copy lands later (pump() notices); the block stays
     * pinned meanwhile. */
    st = wait_ready(e, p->ready);
    if (st != ZO_OK) return zo_error_prefix(st, "fetch '%s': host-to-device copy", p->name);
    if (p->pstate == P_COPYING && !e->compute_stream) ZO_CHECK(copy_landed(e, p));
    if (eng_dp3(e)) ZO_CHECK(eng_pg_consume(e, pos));
  }
  const double waited = zo_clock_s() - t0;
  e->ctr.fetch_wait_s += waited;
  if (waited > 1e-3)
    zo_debug("fetch '%s' at trace position %d waited %.2f ms (%s)", p->name,
             eng_trace_pos(e->trace), waited * 1e3,
             entry_state == P_HOST      ? "demand fetch"
             : entry_state == P_READING ? "nvme read in flight"
             : entry_state == P_COPYING ? "host-to-device copy in flight"
                                        : "refresh in flight");
  if (e->ptier != ZO_OFFLOAD_NONE)
    ZO_CHECK(eng_prefetch_ahead(e)); /* overlaps the compute that follows */
  ZO_CHECK(eng_progress(e));
  *weights = p->weights;
  if (dtype) *dtype = e->wdtype;
  return ZO_OK;
}

zo_status zo_engine_fetch(zo_engine_t *e, zo_param_t *p, const void **weights, zo_dtype *dtype) {
  ENG_CHECK_OWNER(e, "fetch");
  ZO_NVTX_PUSHF("fetch %s", p ? p->name : "?");
  zo_status st = fetch(e, p, weights, dtype);
  ZO_NVTX_POP();
  return st;
}

zo_status zo_engine_set_trace(zo_engine_t *e, int enabled) {
  ENG_CHECK_OWNER(e, "set_trace");
  if (!e) return zo_error_set(ZO_ERR_INVALID_ARG, "set_trace: engine is NULL");
  if (!enabled && !eng_trace_off(e->trace) && e->finalized && eng_dp3(e))
    ZO_CHECK(eng_pg_drop_pending(e));
  eng_trace_set_off(e->trace, !enabled);
  return ZO_OK;
}

static zo_status release(zo_engine_t *e, zo_param_t *p) {
  if (!e || !p) return zo_error_set(ZO_ERR_INVALID_ARG, "release: NULL argument");
  if (!e->finalized)
    return zo_error_set(ZO_ERR_INVALID_USAGE, "release '%s': engine not finalized", p->name);
  ZO_CHECK(eng_progress(e));
  if (e->ptier == ZO_OFFLOAD_NONE) return ZO_OK;
  if (!p->in_use) return zo_error_set(ZO_ERR_INVALID_USAGE, "release '%s': not fetched", p->name);
  if (--p->in_use) return ZO_OK;
  if (p->pstate == P_COPYING) { /* with a compute stream, fetch did not wait for it on the host */
    ZO_CHECK(zo_event_synchronize(p->ready));
    ZO_CHECK(copy_landed(e, p));
  }
  /* Keep the device copy when it is persistent or the trace says it is used
   * again within stage3_max_reuse_distance elements; a compaction may move it
   * once the compute queued so far is done with it. */
  int keep = p->persistent;
  const struct eng_trace *t = e->trace;
  if (!keep && eng_trace_follow(t)) {
    int64_t dist = 0;
    for (int j = eng_trace_pos(t);
         j < eng_trace_len(t) && dist <= e->cfg.zero.stage3_max_reuse_distance && !keep; j++) {
      keep = eng_trace_at(t, j) == p->index;
      dist += (int64_t)e->params[eng_trace_at(t, j)]->n;
    }
  }
  if (keep) {
    ZO_CHECK(eng_blk_unpin(e, p, e->compute_stream));
    return p->persistent ? ZO_OK : eng_prefetch_ahead(e);
  }
  eng_drop_device_copy(e, p);
  return eng_prefetch_ahead(e); /* the freed room may admit the next prefetch */
}

zo_status zo_engine_release(zo_engine_t *e, zo_param_t *p) {
  ENG_CHECK_OWNER(e, "release");
  ZO_NVTX_PUSHF("release %s", p ? p->name : "?");
  zo_status st = release(e, p);
  ZO_NVTX_POP();
  return st;
}
