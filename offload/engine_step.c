/*
 * engine_step.c - the optimizer step: the wait for every gradient, the global norm, clipping, the overflow verdict
 * and dynamic loss scaling, the updates on each tier, the delayed update, and the publish. Not here: the hand-over
 * (engine_grad.c), the Adam tasks and the landed-gradient event (engine_adam.c), the Adam arithmetic (cpu_adam/),
 * the NVMe state pipeline (engine_nvme.c).
 */
#include <math.h>
#include <string.h>

#include "adam_internal.h"
#include "engine_internal.h"
#include "nvtx.h"

/* ---------------------------------------------------------------- gradients */

/* ---------------------------------------------------------------- step */

/* Delayed update: wait the last step's Adam tasks and queue the uploads of the working weights they wrote (each
 * tensor's own event, fetch waits for it), then flip the staging of the working copy: the next Adam writes the
 * other buffer while these uploads are in flight, and the next step's wait on the copy stream settles them before
 * this buffer is written again. Returns without waiting for the uploads. */
zo_status eng_dpu_finish(zo_engine_t *e) {
  zo_status st = ZO_OK;
  if (!e->dpu_pending) return ZO_OK;
  if (e->tier == ZO_OFFLOAD_NVME) /* the sub-group pipeline, what is left of it; then the uploads */
    st = eng_nv_dpu_finish(e);
  for (int i = 0; i < e->n_params && e->tier != ZO_OFFLOAD_NVME; i++) {
    if (!e->tasks[i]) continue;
    zo_status s2 = eng_finish_adam(e, &e->tasks[i], e->params[i], 0, e->params[i]->shard_n);
    if (st == ZO_OK) st = s2;
  }
  e->dpu_pending = 0;
  e->dpu_unpublished = 1;
  return st;
}

static zo_status dpu_publish(zo_engine_t *e) {
  zo_status st = eng_dpu_finish(e);
  e->dpu_unpublished = 0;
  /* several ranks: every rank's updated shard, all-gathered from the staging Adam wrote (before the flip) */
  if (st == ZO_OK && e->world > 1) st = eng_dp_publish(e, NULL);
  if (st == ZO_OK) st = zo_event_record(e->weights_ready, e->copy_stream);
  if (eng_dpu_one_stage(e)) return st; /* the next Adam waits for these uploads instead */
  host_buf tmp = e->stage_host;
  e->stage_host = e->stage_host2;
  e->stage_host2 = tmp;
  return st;
}

zo_status zo_engine_synchronize(zo_engine_t *e) {
  ENG_CHECK_OWNER(e, "synchronize");
  if (!e) return zo_error_set(ZO_ERR_INVALID_ARG, "synchronize: engine is NULL");
  zo_status st = e->dpu_pending || e->dpu_unpublished ? dpu_publish(e) : ZO_OK;
  zo_status s2 = e->copy_stream ? zo_stream_synchronize(e->copy_stream)
                                : ZO_OK; /* staging is free again after */
  return st != ZO_OK ? st : s2;
}

/* Whether this step's update is delayed: zoffload.delayed_param_update, after its warm-up steps
 * (steps applied so far, as the schedule counts them). */
static int dpu_now(const zo_engine_t *e) {
  return e->dpu && e->step >= e->cfg.zoffload.delayed_param_update_warmup_steps;
}

/* The step's preconditions: a finalized engine and a gradient for every tensor. */
static zo_status step_check(const zo_engine_t *e) {
  if (!e) return zo_error_set(ZO_ERR_INVALID_ARG, "step: engine is NULL");
  if (!e->finalized) return zo_error_set(ZO_ERR_INVALID_USAGE, "step: engine not finalized");
  for (int i = 0; i < e->n_params; i++) {
    if (e->params[i]->n_acc && !e->params[i]->has_grad)
      return zo_error_set(
          ZO_ERR_INVALID_USAGE,
          "step: tensor '%s' has %d accumulated micro-batch gradient(s) "
          "(zo_engine_grad_accumulate) but no zo_engine_grad_ready() in this step; hand over its "
          "last micro-batch with zo_engine_grad_ready()",
          e->params[i]->name, e->params[i]->n_acc);
    if (!e->params[i]->has_grad)
      return zo_error_set(ZO_ERR_INVALID_USAGE,
                          "step: tensor '%s' has no gradient (zo_engine_grad_ready not called)",
                          e->params[i]->name);
  }
  return ZO_OK;
}

/* Wait until every gradient has landed in host memory (reduced over the
 * ranks first), settle the step's parameter fetches, and publish the last
 * step's delayed update; the waits and fetch counts go to *inf, the delayed
 * update's wait to *dpu_wait. */
static zo_status step_wait_grads(zo_engine_t *e, zo_step_info *inf, double *dpu_wait) {
  double t0 = zo_clock_s();
  ZO_CHECK(eng_grads_wait_landed(e));
  /* the norm partials (the copy stream wrote them): one copy, summed in a fixed order */
  if (eng_device_adam(e)) {
    ZO_CHECK(eng_dev_copy(e, e->dnorm_host.ptr, e->dnorm_dev, e->dnorm_host.nbytes, ZO_COPY_D2H));
    const double *part = e->dnorm_host.ptr;
    for (int i = 0; i < e->n_params; i++) {
      double s = 0;
      for (int b = 0; b < ZO_DEV_SQNORM_BLOCKS; b++)
        s += part[(size_t)i * ZO_DEV_SQNORM_BLOCKS + b];
      e->params[i]->sqnorm = s;
      e->params[i]->nonfinite =
          !isfinite(s); /* an inf or NaN element makes its square's sum inf or NaN */
    }
  }
  inf->grad_wait_s = zo_clock_s() - t0;
  if (e->ptier != ZO_OFFLOAD_NONE) {
    ZO_CHECK(eng_settle_fetches(e));
    ZO_CHECK(eng_trace_end_step(e));
  }
  *dpu_wait = 0;
  if (e->dpu_pending ||
      e->dpu_unpublished) { /* delayed update: the last step's Adam ran during this step's
                                                 * compute; publish it now */
    double td = zo_clock_s();
    ZO_CHECK(dpu_publish(
        e)); /* the uploads overlap the next forward: it waits per tensor (eng_ready_per_tensor) */
    *dpu_wait = zo_clock_s() - td;
  }
  inf->fetch_wait_s = e->ctr.fetch_wait_s;
  inf->n_prefetch = e->ctr.n_prefetch;
  inf->n_demand_fetch = e->ctr.n_demand;
  e->ctr.fetch_wait_s = 0;
  e->ctr.n_prefetch = e->ctr.n_demand = 0;
  return ZO_OK;
}

/* The global norm of the mean gradient over the ranks (unscaled) and whether
 * any element was non-finite, from the per-shard norms taken as each gradient
 * landed (summed in tensor order: deterministic). Ends the step's gradient
 * hand-over; *early: whether Adam started as the gradients landed. */
static zo_status step_grad_norm(zo_engine_t *e, double *norm, int *nonfinite, int *early) {
  double sums[2] = {0, 0}; /* squared norm (scaled), shards with a nonfinite element */
  zo_status landed = ZO_OK;
  for (int i = 0; i < e->n_params; i++) {
    zo_param_t *p = e->params[i];
    if (p->landed_st != ZO_OK && landed == ZO_OK)
      landed = zo_error_set(p->landed_st, "step: gradient of '%s': %s", p->name,
                            zo_status_string(p->landed_st));
    sums[0] += p->sqnorm;
    sums[1] += p->nonfinite ? 1 : 0;
    p->has_grad = 0;
    p->reopen = 0;
    p->n_acc = 0;
  }
  eng_acc_end_step(e->acc);
  *early = e->early_adam;
  e->n_grads = 0;
  e->early_adam = 0;
  if (landed != ZO_OK) return landed;
  ZO_CHECK(zo_comm_all_reduce_f64(e->comm, sums, 2));
  if (e->world > 1 && e->cfg.zero.stage == 0)
    sums[0] /= e->world, sums[1] /= e->world; /* each rank saw it all */
  *nonfinite = sums[1] > 0 || !isfinite(sums[0]);
  *norm = sqrt(sums[0]) / (e->loss_scale * e->world); /* of the mean gradient over the ranks */
  return ZO_OK;
}

/* The clipping factor that brings the gradient norm down to gradient_clipping (1: no clipping). */
static double step_clip(const zo_engine_t *e, double norm) {
  if (e->cfg.gradient_clipping > 0 && norm > e->cfg.gradient_clipping)
    return e->cfg.gradient_clipping / (norm + 1e-6);
  return 1.0;
}

/* ---------------------------------------------------------------- loss scale */

/* DeepSpeed's DynamicLossScaler.update_scale (fp16/loss_scaler.py), consecutive_hysteresis off. */
static void update_loss_scale(zo_engine_t *e, int overflow) {
  const zo_config_t *c = &e->cfg;
  if (!c->fp16.enabled || c->fp16.loss_scale > 0) return; /* static scale */
  if (overflow) {
    if (c->fp16.hysteresis == 1 || e->ls_hysteresis == 1) {
      e->loss_scale = fmax(e->loss_scale / 2.0, c->fp16.min_loss_scale);
    } else {
      e->ls_hysteresis--;
    }
    e->ls_last_overflow = e->ls_iter;
  } else if ((e->ls_iter - e->ls_last_overflow) % c->fp16.loss_scale_window == 0) {
    e->ls_hysteresis = c->fp16.hysteresis;
    e->loss_scale *= 2.0;
  }
  e->ls_iter++;
}

/* Whether the step overflowed: only fp16 skips a step on a non-finite
 * gradient (dynamic loss scaling); with fp32 or bf16 the update is applied as
 * DeepSpeed applies it, with a warning. */
static int step_overflow(const zo_engine_t *e, int nonfinite) {
  const int overflow = nonfinite && e->cfg.fp16.enabled;
  if (nonfinite && !overflow)
    zo_warn(
        "step %lld: non-finite gradient (inf or NaN) without fp16 loss scaling; applying the update as DeepSpeed "
        "does",
        (long long)e->step + 1);
  return overflow;
}

/* Skip an overflowed step: no update, the loss scale backs off. */
static zo_status step_skip(zo_engine_t *e, zo_step_info *inf) {
  if (e->tier == ZO_OFFLOAD_NVME)
    ZO_CHECK(eng_nv_end_step(e)); /* the state read stays valid for the next step */
  double old = e->loss_scale;
  update_loss_scale(e, 1);
  zo_info("step %lld: gradient overflow, skipping the step; loss scale %g -> %g",
          (long long)e->step + 1, old, e->loss_scale);
  inf->skipped = 1;
  inf->step = e->step;
  inf->loss_scale = e->loss_scale;
  return ZO_OK;
}

/* ---------------------------------------------------------------- dispatch */

/* NVMe tier: finish the sub-group pipeline (state read, Adam, write-back); delayed: let it run
 * behind the next step's compute. */
static zo_status step_nvme(zo_engine_t *e, const zo_adam_hparams *hp, int dpu, double *adam_s) {
  if (dpu) {
    e->dpu_pending = 1;
    return eng_nv_dpu_start(e, hp);
  }
  ZO_CHECK(eng_nv_finish_step(e, hp, adam_s));
  return eng_nv_end_step(e); /* reads for the next step start now, behind the last write-backs */
}

/* Host-resident state (cpu, none): queue every shard's Adam on the pool at
 * once (early: already queued as the gradients landed). */
static zo_status step_queue_adam(zo_engine_t *e, const zo_adam_hparams *hp, int early) {
  zo_status st = ZO_OK;
  for (int i = 0; i < e->n_params && st == ZO_OK && !early; i++) {
    zo_param_t *p = e->params[i];
    st = eng_wb_alloc(e, p, 0, p->shard_n, &e->tasks[i], 0);
    if (st == ZO_OK)
      st = eng_submit_adam(e, hp, p, 0, p->shard_n, p->grad, p->state[ST_MASTER],
                           p->state[ST_EXP_AVG], p->state[ST_EXP_AVG_SQ], &e->tasks[i]);
  }
  return st;
}

/* Delayed update: the next step finishes and publishes the Adam tasks just
 * queued; its gradients go to the other host buffer. */
static void step_dpu_flip(zo_engine_t *e) {
  e->dpu_pending = 1;
  host_buf tmp = e->grad_host;
  e->grad_host = e->grad_host2;
  e->grad_host2 = tmp;
  for (int i = 0; i < e->n_params; i++)
    e->params[i]->grad =
        (char *)e->grad_host.ptr + e->params[i]->host_off * zo_dtype_size(e->adtype);
}

/* Host-resident state (cpu, none): Adam on the pool while the uploads of the
 * new working weights are queued in order. */
static zo_status step_host(zo_engine_t *e, const zo_adam_hparams *hp, int early, int dpu,
                           double *adam_s) {
  double t1 = zo_clock_s();
  zo_status st = step_queue_adam(e, hp, early);
  if (dpu && st == ZO_OK) step_dpu_flip(e);
  for (int i = 0; i < e->n_params && !dpu; i++) {
    if (!e->tasks[i]) continue;
    zo_status s2 = eng_finish_adam(e, &e->tasks[i], e->params[i], 0, e->params[i]->shard_n);
    if (st == ZO_OK) st = s2;
  }
  ZO_CHECK(st);
  *adam_s += zo_clock_s() - t1;
  return ZO_OK;
}

/* The update itself, by the tier that holds the optimizer state; its time is
 * added to *adam_s. */
/* Device Adam: one fused kernel per tensor on the copy stream (master, moments and the working copy in one pass);
 * the weights are ready when the stream reaches the event step_publish records. *adam_s: the queueing time. */
static zo_status step_device(zo_engine_t *e, const zo_adam_hparams *hp, double *adam_s) {
  const double t1 = zo_clock_s();
  for (int i = 0; i < e->n_params; i++) {
    zo_param_t *p = e->params[i];
    zo_adam_hparams own = *hp;
    own.weight_decay = p->weight_decay;
    zo_adam_dev_job j = {.param = p->state[ST_MASTER],
                         .grad = p->grad,
                         .exp_avg = p->state[ST_EXP_AVG],
                         .exp_avg_sq = p->state[ST_EXP_AVG_SQ],
                         .param_out = eng_working_dst(e, p, 0),
                         .grad_dtype = e->adtype,
                         .state_dtype = e->sdtype,
                         .out_dtype = e->wdtype,
                         .n = p->shard_n,
                         .seed = p->flat_off,
                         .step32 = (uint32_t)own.step};
    zo_adam_make_consts(&own, &j.c);
    zo_status st = zo_adam_device_step(e->copy_stream, &j);
    if (st != ZO_OK) return zo_error_prefix(st, "device adam '%s' [0, %zu)", p->name, p->shard_n);
  }
  *adam_s += zo_clock_s() - t1;
  return ZO_OK;
}

static zo_status step_dispatch(zo_engine_t *e, const zo_adam_hparams *hp, int early, int dpu,
                               double *adam_s) {
  if (e->tier == ZO_OFFLOAD_NVME) return step_nvme(e, hp, dpu, adam_s);
  if (eng_device_adam(e)) return step_device(e, hp, adam_s);
  return step_host(e, hp, early, dpu, adam_s);
}

/* After the update: all-gather the new weights over the ranks, mark them
 * ready, take the step's communication figures into *inf. */
static zo_status step_publish(zo_engine_t *e, int dpu, zo_step_info *inf) {
  if (e->world > 1 &&
      !dpu) /* every rank's updated shard, all-gathered (DPU: when published, dpu_publish) */
    ZO_CHECK(eng_dp_publish(e, NULL));
  ZO_CHECK(zo_event_record(e->weights_ready, e->copy_stream));
  inf->comm_s = e->ctr.dp_comm_s;
  inf->comm_bytes = e->ctr.dp_bytes;
  e->ctr.dp_comm_s = 0;
  e->ctr.dp_bytes = 0;
  return ZO_OK;
}

/* Count the step, grow the loss scale when due, and start fetching the next
 * step's first tensors now that the weights are final. */
static zo_status step_advance(zo_engine_t *e) {
  e->step++;
  update_loss_scale(e, 0);
  if (eng_dp3(e)) eng_pg_drop_device_copies(e); /* stale: the next fetches gather the new weights */
  if (e->ptier != ZO_OFFLOAD_NONE) ZO_CHECK(eng_prefetch_ahead(e));
  return ZO_OK;
}

static zo_status step(zo_engine_t *e, zo_step_info *info) {
  ZO_CHECK(step_check(e));
  zo_step_info inf = {0};
  double dpu_wait;
  ZO_CHECK(step_wait_grads(e, &inf, &dpu_wait));
  const double t0 = zo_clock_s();
  double norm;
  int nonfinite, early;
  ZO_CHECK(step_grad_norm(e, &norm, &nonfinite, &early));
  const int overflow = step_overflow(e, nonfinite);
  inf.grad_norm = overflow ? INFINITY : norm;
  if (overflow) {
    ZO_CHECK(step_skip(e, &inf));
    inf.adam_s = zo_clock_s() - t0;
    if (info) *info = inf;
    return ZO_OK;
  }
  const zo_adam_hparams hp = early ? e->early_hp : eng_adam_hparams(e, step_clip(e, norm));
  const int dpu = dpu_now(e);
  double adam_s = zo_clock_s() - t0;
  const double swap0 = e->ctr.swap_wait_s, copy0 = e->ctr.copy_s;
  ZO_CHECK(step_dispatch(e, &hp, early, dpu, &adam_s));
  ZO_CHECK(step_publish(e, dpu, &inf));
  inf.swap_s = e->ctr.swap_wait_s - swap0;
  inf.copy_s = e->ctr.copy_s - copy0;
  inf.adam_s = fmax(0.0, adam_s - inf.copy_s) +
               dpu_wait; /* the Adam sections timed the upload queueing too */
  ZO_CHECK(step_advance(e));
  inf.step = e->step;
  inf.lr = hp.lr;
  inf.loss_scale = e->loss_scale;
  if (info) *info = inf;
  return ZO_OK;
}

zo_status zo_engine_set_lr(zo_engine_t *e, double lr) {
  ENG_CHECK_OWNER(e, "set_lr");
  if (!e) return zo_error_set(ZO_ERR_INVALID_ARG, "set_lr: engine is NULL");
  if (isnan(lr) || lr > ZO_CONFIG_LR_MAX)
    return zo_error_set(ZO_ERR_INVALID_ARG,
                        "set_lr: lr %g is outside [0, %g] (negative: the config's schedule)", lr,
                        ZO_CONFIG_LR_MAX);
  e->lr_override = lr < 0 ? -1 : lr;
  return ZO_OK;
}

zo_status zo_engine_step(zo_engine_t *e, zo_step_info *info) {
  ENG_CHECK_OWNER(e, "step");
  ZO_NVTX_PUSH("optimizer step");
  zo_status st = step(e, info);
  ZO_NVTX_POP();
  return st;
}
