/*
 * engine_adam.c - the Adam tasks of the engine on the pool: the hyperparameters of a step, the landed-gradient
 * event (the one place a gradient shard is declared landed: its norm queued, and its early update when nothing
 * step-wide stands in the way), the wait for those norms, and the submission of the fused update. Not here: the
 * Adam arithmetic (cpu_adam/), the hand-over that leads to a landing (engine_grad.c), the step that waits
 * (engine_step.c), the publish of the new weights (eng_finish_adam, engine_fetch.c).
 */
#include <math.h>
#include <string.h>

#include "adam_internal.h"
#include "engine_internal.h"

zo_adam_hparams eng_adam_hparams(const zo_engine_t *e, double clip) {
  const int64_t t = e->step + 1;
  return (zo_adam_hparams){
      .lr = (float)(e->lr_override >= 0 ? e->lr_override : zo_config_lr_at(&e->cfg, t)),
      .beta1 = (float)e->cfg.optimizer.beta1,
      .beta2 = (float)e->cfg.optimizer.beta2,
      .eps = (float)e->cfg.optimizer.eps,
      /* .weight_decay is each tensor's own (eng_submit_adam) */
      .mode = e->cfg.optimizer.adam_w_mode ? ZO_ADAM_MODE_ADAMW : ZO_ADAM_MODE_L2,
      .bias_correction = e->cfg.optimizer.bias_correction,
      .step = t,
      .grad_scale = (float)(clip / (e->loss_scale *
                                    e->world)), /* several ranks: the mean of their gradients */
  };
}

/* Pool task: the squared norms of the ENG_NORM_CHUNK-element chunks of p's gradient in [b, end) (tiles of one
 * chunk each), into p->norm_part; eng_grad_norms_wait() sums them in order. */
static void norm_chunks(void *arg, size_t b, size_t end, int thread) {
  (void)thread;
  zo_param_t *p = arg;
  const zo_dtype dt = p->eng->adtype;
  const size_t asz = zo_dtype_size(dt);
  eng_note_grad_bytes((end - b) * asz);
  for (size_t k = b / ENG_NORM_CHUNK; k * ENG_NORM_CHUNK < end; k++) {
    const size_t o = k * ENG_NORM_CHUNK,
                 m = p->shard_n - o < ENG_NORM_CHUNK ? p->shard_n - o : ENG_NORM_CHUNK;
    /* cannot fail: a known dtype, m > 0 */
    (void)zo_grad_sqnorm_ex((const char *)p->grad + o * asz, dt, m, ZO_SIMD_AUTO, 1,
                            &p->norm_part[k], NULL);
  }
}

/* Runs on the copy stream's thread (a host function; several ranks, or nvme: the engine thread) once p's
 * gradient shard has landed. O(1) and no CUDA call: host functions of a stream share one driver thread, so work
 * here would hold up the stream's later copies. Host memory (cpu, none on a host device): it queues on the Adam
 * pool the shard's squared norm (for clipping, overflow and the report; urgent, so it runs ahead of queued Adam
 * updates, behind the shard's staged adds) and, when nothing global stands in the way, its Adam update, so the CPU
 * updates this shard while the device computes the rest of backward. nvme: the norm was summed on the way to
 * grad.swp (p->sqnorm); its verdict is taken here. */
void eng_grad_land(zo_param_t *p, zo_status st) {
  zo_engine_t *e = p->eng;
  if (e->tier == ZO_OFFLOAD_NVME) {
    p->nonfinite = !isfinite(p->sqnorm);
  } else {
    p->sqnorm = 0.0, p->nonfinite = 0; /* an empty shard; else eng_grad_norms_wait() */
    if (st == ZO_OK && p->shard_n)
      st = zo_adam_pool_submit_for(e->pool, norm_chunks, p, p->shard_n, ENG_NORM_CHUNK,
                                   ZO_ADAM_TASK_URGENT, &p->norm_task);
    if (st == ZO_OK && e->early_adam)
      st = eng_submit_adam(e, &e->early_hp, p, 0, p->shard_n, p->grad, p->state[ST_MASTER],
                           p->state[ST_EXP_AVG], p->state[ST_EXP_AVG_SQ], &e->tasks[p->index]);
  }
  p->landed_st = st;
  atomic_store_explicit(&p->landed, 1,
                        memory_order_release); /* nvme: the engine thread may queue its sub-group */
}

void eng_grad_landed(void *arg) { eng_grad_land(arg, ZO_OK); }

zo_status eng_grad_norms_wait(zo_engine_t *e) {
  zo_status first = ZO_OK;
  for (int i = 0; i < e->n_params; i++) {
    zo_param_t *p = e->params[i];
    if (!p->norm_task) continue;
    zo_status st = zo_adam_task_wait(p->norm_task, NULL);
    p->norm_task = NULL;
    if (st != ZO_OK && first == ZO_OK)
      first = zo_error_prefix(st, "gradient norm of '%s'", p->name);
    double s = 0.0; /* zo_sqnorm_combine's order */
    for (size_t k = 0; k * ENG_NORM_CHUNK < p->shard_n; k++) s += p->norm_part[k];
    p->sqnorm = s;
    p->nonfinite = !isfinite(s); /* squares of finite floats cannot overflow a double sum */
  }
  return first;
}

/* Queue the fused Adam update of shard elements [off, off + n) of p (its
 * gradient at @grad) on the pool: fp32 master, state, and the working-dtype copy-out in one pass, with
 * p's weight decay (the config's unless a parameter group set its own). */
zo_status eng_submit_adam(zo_engine_t *e, const zo_adam_hparams *hp, zo_param_t *p, size_t off,
                          size_t n, const void *grad, void *master, void *m, void *v,
                          zo_adam_task_t **task) {
  zo_adam_hparams own = *hp; /* the pool copies the hyperparameters at submit */
  own.weight_decay = p->weight_decay;
  hp = &own;
  const zo_adam_shard sh = {
      .param = master,
      .grad = grad,
      .grad_dtype = e->adtype,
      .exp_avg = m,
      .exp_avg_sq = v,
      .state_dtype = e->sdtype,
      .param_out = eng_working_dst(e, p, off),
      .out_dtype = e->wdtype,
      .n = n,
      .seed = p->flat_off + off,
  };
  zo_status st = zo_adam_pool_submit(e->pool, hp, &sh, 0, task);
  if (st != ZO_OK) return zo_error_prefix(st, "adam '%s' [%zu, %zu)", p->name, off, off + n);
  return ZO_OK;
}
