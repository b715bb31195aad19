/*
 * engine_grad.c - the gradient hand-over, the public calls that give the engine a gradient: zo_engine_grad_ready
 * (the step's last contribution of a tensor), zo_engine_grad_accumulate (an earlier one) and zo_engine_grad_fence
 * (the caller's buffers are read); and eng_progress(), the one function that moves the engine's pipelines on
 * without blocking, called from every hand-over and fetch. Where a contribution goes: one rank, through the
 * staging buckets or a direct copy (engine_accum.c), or the device gradient shard (device Adam); several ranks,
 * the reductions (engine_dp.c); nvme, grad.swp (engine_gradnv.c). When it lands: eng_grad_land (engine_adam.c).
 */
#include <string.h>

#include "engine_internal.h"
#include "nvtx.h"

/* The last contribution of @p on one rank: today's direct copy of the shard into p->grad when nothing was
 * accumulated and the dtype is the accumulation dtype (bitwise the single hand-over of before), else through
 * the staging buckets (engine_accum.c); then the landed work, on the copy stream. */
static zo_status grad_ready_one_rank(zo_engine_t *e, zo_param_t *p, const void *grad,
                                     zo_dtype grad_dtype) {
  ZO_CHECK(eng_acc_after_compute(e));
  /* into the device gradient shard (added to what was accumulated), then the norm's
   * partial sums of the sum on the device, behind it (read at the step) */
  if (eng_device_adam(e)) {
    ZO_CHECK(eng_acc_device(e, p, grad, grad_dtype));
    p->landed_st = ZO_OK;
    return zo_grad_sqnorm_device(e->copy_stream, p->grad, e->adtype, p->shard_n,
                                 e->dnorm_dev + (size_t)p->index * ZO_DEV_SQNORM_BLOCKS);
  }
  if (p->n_acc || grad_dtype != e->adtype || e->tier == ZO_OFFLOAD_NVME) /* nvme: to grad.swp */
    return eng_acc_stage(e, p, grad, grad_dtype, 1);
  const size_t gsz = zo_dtype_size(grad_dtype);
  zo_copy_kind kind = e->tier == ZO_OFFLOAD_NONE ? ZO_COPY_D2D : ZO_COPY_D2H;
  if (p->shard_n) {
    ZO_CHECK(zo_memcpy_async(e->copy_stream, p->grad, (const char *)grad + p->shard_off * gsz,
                             p->shard_n * gsz, kind));
    ZO_CHECK(zo_event_record(e->grad_read, e->copy_stream)); /* zo_engine_grad_fence */
    e->grad_read_set = 1;
  }
  if (kind == ZO_COPY_D2H) e->ctr.d2h_bytes += p->shard_n * gsz;
  return zo_launch_host_func(e->copy_stream, eng_grad_landed, p);
}

static zo_status grad_ready(zo_engine_t *e, zo_param_t *p, const void *grad, zo_dtype grad_dtype) {
  ZO_CHECK(eng_acc_check(e, p, grad, grad_dtype, "grad_ready", 1));
  if (p->has_grad) { /* a further contribution after zo_engine_grad_reopen(): added to what landed */
    p->reopen = 0;
    p->has_grad = 0;
    eng_acc_note(e->acc, p); /* p->n_acc > 0: every path below adds to what landed */
    atomic_store_explicit(&p->landed, 0, memory_order_relaxed); /* lands again */
  }
  if (e->n_grads++ == 0) {
    /* Adam may start per shard (cpu, none) or per sub-group (nvme) before the
     * step only when no step-wide fact is needed first: the global norm
     * (clipping) and the overflow verdict (fp16) are known only once every
     * gradient is in; and only when zoffload.early_adam allows it (no further
     * backward pass may add to a gradient Adam has read). */
    const int early = e->cfg.zoffload.early_adam && !e->cfg.fp16.enabled &&
                      !(e->cfg.gradient_clipping > 0) && !e->dpu && !eng_device_adam(e);
    e->early_adam = early && e->tier != ZO_OFFLOAD_NVME;
    if (e->early_adam) e->early_hp = eng_adam_hparams(e, 1.0);
    if (early && e->tier == ZO_OFFLOAD_NVME) {
      const zo_adam_hparams hp = eng_adam_hparams(e, 1.0);
      eng_nv_allow_adam(e->nv, &hp);
    }
  }
  p->grad_seq = e->n_grads;
  if (e->early_adam) /* eng_grad_landed writes the new weights into it */
    ZO_CHECK(eng_wb_alloc(e, p, 0, p->shard_n, &e->tasks[p->index], 1));
  /* reduced over the ranks into p->grad (added to what was accumulated), then landed */
  if (e->world > 1) {
    ZO_CHECK(eng_dp_grad(e, p, grad, grad_dtype, 1));
  } else {
    /* One rank: the reduce-scatter of the gradient is the copy of our shard, after the compute queued so far
     * (which produced it). */
    ZO_CHECK(grad_ready_one_rank(e, p, grad, grad_dtype));
  }
  p->has_grad = 1;
  return eng_progress(e);
}

zo_status zo_engine_grad_ready(zo_engine_t *e, zo_param_t *p, const void *grad,
                               zo_dtype grad_dtype) {
  ENG_CHECK_OWNER(e, "grad_ready");
  ZO_NVTX_PUSHF("gradient copy %s", p ? p->name : "?");
  zo_status st = grad_ready(e, p, grad, grad_dtype);
  ZO_NVTX_POP();
  return st;
}

static zo_status grad_accumulate(zo_engine_t *e, zo_param_t *p, const void *grad, zo_dtype dtype) {
  ZO_CHECK(eng_acc_check(e, p, grad, dtype, "grad_accumulate", 0));
  if (!eng_acc_ok(e))
    return zo_error_set(
        ZO_ERR_INVALID_USAGE,
        "grad_accumulate '%s': gradient_accumulation_steps is 1 and the "
        "accumulation dtype is the working dtype (%s); set gradient_accumulation_steps > 1 or "
        "data_types.grad_accum_dtype, or hand the summed gradient to zo_engine_grad_ready()",
        p->name, zo_dtype_name(e->gdtype));
  if (e->world > 1) {
    ZO_CHECK(eng_dp_grad(e, p, grad, dtype, 0));
  } else {
    ZO_CHECK(eng_acc_after_compute(e));
    ZO_CHECK(eng_device_adam(e) ? eng_acc_device(e, p, grad, dtype)
                                : eng_acc_stage(e, p, grad, dtype, 0));
  }
  eng_acc_note(e->acc, p);
  return eng_progress(e);
}

zo_status zo_engine_grad_accumulate(zo_engine_t *e, zo_param_t *p, const void *grad,
                                    zo_dtype grad_dtype) {
  ENG_CHECK_OWNER(e, "grad_accumulate");
  ZO_NVTX_PUSHF("gradient accumulate %s", p ? p->name : "?");
  zo_status st = grad_accumulate(e, p, grad, grad_dtype);
  ZO_NVTX_POP();
  return st;
}

zo_status eng_grads_wait_landed(zo_engine_t *e) {
  if (e->world > 1) ZO_CHECK(eng_dp_drain(e)); /* every gradient reduced and landed */
  ZO_CHECK(zo_stream_synchronize(e->copy_stream));
  if (e->tier == ZO_OFFLOAD_NVME)
    ZO_CHECK(eng_gnv_drain(e));    /* every gradient on disk in grad.swp */
  ZO_CHECK(eng_acc_drain(e->acc)); /* the staged adds on the pool */
  return eng_grad_norms_wait(e);   /* and the norms behind them */
}

zo_status zo_engine_grad_reopen(zo_engine_t *e) {
  ENG_CHECK_OWNER(e, "grad_reopen");
  if (!e) return zo_error_set(ZO_ERR_INVALID_ARG, "grad_reopen: engine is NULL");
  if (!e->finalized) return zo_error_set(ZO_ERR_INVALID_USAGE, "grad_reopen: engine not finalized");
  /* true: Adam may have read the landed gradients already (or, with clipping or fp16 holding it back, no
   * staging ring was planned for the adds) */
  if (e->cfg.zoffload.early_adam)
    return zo_error_set(
        ZO_ERR_INVALID_USAGE,
        "grad_reopen: zoffload.early_adam is true: Adam may start on each gradient as it lands, so no "
        "further contribution can be added after zo_engine_grad_ready(); set zoffload.early_adam to "
        "false to take more than one backward pass per micro-batch");
  if (!e->n_grads) return ZO_OK; /* nothing handed over with grad_ready in this step */
  ZO_NVTX_PUSHF("gradient reopen");
  zo_status st = eng_grads_wait_landed(e);
  /* nvme: a sub-group's gradients read into its slot (with its state) are stale once one of them takes
   * another contribution: read again at the step, from grad.swp */
  if (st == ZO_OK && e->tier == ZO_OFFLOAD_NVME) st = eng_gnv_reopen(e);
  ZO_NVTX_POP();
  if (st != ZO_OK) return zo_error_prefix(st, "grad_reopen");
  for (int i = 0; i < e->n_params; i++)
    if (e->params[i]->has_grad) e->params[i]->reopen = 1;
  return eng_progress(e);
}

zo_status zo_engine_grad_fence(zo_engine_t *e, zo_stream_t *s) {
  ENG_CHECK_OWNER(e, "grad_fence");
  if (!e) return zo_error_set(ZO_ERR_INVALID_ARG, "grad_fence: engine is NULL");
  if (!e->finalized) return zo_error_set(ZO_ERR_INVALID_USAGE, "grad_fence: engine not finalized");
  if (!e->grad_read_set) return ZO_OK; /* nothing handed over yet */
  if (s) return zo_stream_wait_event(s, e->grad_read);
  return zo_event_synchronize(e->grad_read);
}

zo_status eng_progress(zo_engine_t *e) {
  if (e->world > 1) ZO_CHECK(eng_dp_progress(e, 0)); /* gradient reductions in flight */
  /* nvme: state reads, gradient writes (eng_gnv_poll), updates, write-backs */
  return eng_nv_advance(e);
}
