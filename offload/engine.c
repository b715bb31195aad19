/*
 * engine.c - the engine's lifecycle: create and destroy, the parameter
 * registry, finalize (allocates the buffers of the memory plan, plan.c, and
 * places the tensors by its layout), and the initial weights. Not here: the optimizer step
 * (engine_step.c), fetches (engine_fetch.c), the NVMe pipeline
 * (engine_nvme.c), the write-back ring (engine_wb.c).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "engine_internal.h"
#include "zoffload/placement.h"
#include "pinned_internal.h"
#include "plan_internal.h"
#include "zoffload/budget.h"

/* ---------------------------------------------------------------- create */

/* The config facts the engine checks before allocating anything. */
static zo_status create_validate(const zo_config_t *cfg) {
  const zo_offload_device tier = cfg->zero.offload_optimizer.device;
  if (tier != ZO_OFFLOAD_NONE && cfg->zero.stage < 1)
    return zo_error_set(
        ZO_ERR_CONFIG,
        "zero_optimization.offload_optimizer.device: \"%s\" needs zero_optimization.stage >= 1, "
        "got %d (as in DeepSpeed, optimizer offload is part of ZeRO)",
        tier == ZO_OFFLOAD_CPU ? "cpu" : "nvme", cfg->zero.stage);
  if (cfg->fp16.enabled && cfg->bf16.enabled)
    return zo_error_set(ZO_ERR_CONFIG, "fp16.enabled and bf16.enabled are both true; choose one");
  return ZO_OK;
}

/* The tiers and dtypes from the config into e, and the combinations they rule out. */
static zo_status create_tiers(zo_engine_t *e, const zo_config_t *cfg) {
  const zo_offload_device tier = cfg->zero.offload_optimizer.device;
  e->cfg = *cfg;
  e->opt_res_el =
      cfg->zoffload.optimizer_max_in_cpu > 0 ? (size_t)cfg->zoffload.optimizer_max_in_cpu : 0;
  e->tier = tier;
  e->wdtype = cfg->bf16.enabled ? ZO_DTYPE_BF16 : cfg->fp16.enabled ? ZO_DTYPE_F16 : ZO_DTYPE_F32;
  e->gdtype = e->wdtype; /* the model's gradients come in its working precision */
  ZO_CHECK(
      eng_acc_create(e)); /* the accumulation dtype: gdtype, or fp32 with gradient accumulation */
  e->sdtype = cfg->zoffload.optimizer_state_dtype == ZO_DTYPE_BF16 ? ZO_DTYPE_BF16 : ZO_DTYPE_F32;
  e->esz[ST_MASTER] = sizeof(float);
  e->esz[ST_EXP_AVG] = e->esz[ST_EXP_AVG_SQ] = zo_dtype_size(e->sdtype);
  e->esz[ST_GRAD] = zo_dtype_size(e->adtype); /* grad.swp (offload_optimizer "nvme") */
  e->ptier = cfg->zero.offload_param.device;
  /* the host cache of nvme parameters: offload_param.max_in_cpu only when the config wrote it (config.h) */
  e->pcache_el =
      cfg->zero.offload_param.max_in_cpu_set ? (size_t)cfg->zero.offload_param.max_in_cpu : 0;
  e->dpu = cfg->zoffload.delayed_param_update;
  if (e->dpu &&
      ((tier != ZO_OFFLOAD_CPU && tier != ZO_OFFLOAD_NVME) || e->ptier != ZO_OFFLOAD_NONE))
    return zo_error_set(
        ZO_ERR_CONFIG,
        "zoffload.delayed_param_update: needs zero_optimization.offload_optimizer.device "
        "\"cpu\" or \"nvme\" and offload_param.device \"none\" (the ZeRO-Offload setting), got "
        "\"%s\" and \"%s\"",
        zo_offload_device_name(tier), zo_offload_device_name(e->ptier));
  if (!e->dpu && cfg->zoffload.delayed_param_update_warmup_steps > 0)
    zo_warn("zoffload.delayed_param_update_warmup_steps %lld has no effect: "
            "zoffload.delayed_param_update is off",
            (long long)cfg->zoffload.delayed_param_update_warmup_steps);
  if (e->ptier != ZO_OFFLOAD_NONE && cfg->zero.stage != 3)
    return zo_error_set(
        ZO_ERR_CONFIG,
        "zero_optimization.offload_param.device: \"%s\" needs zero_optimization.stage 3, "
        "got %d (parameters are partitioned and offloaded only in stage 3)",
        e->ptier == ZO_OFFLOAD_CPU ? "cpu" : "nvme", cfg->zero.stage);
  return ZO_OK;
}

/* The caller's device, or one of the config's kind that the engine owns. */
static zo_status create_device(zo_engine_t *e, const zo_config_t *cfg, zo_device_t *dev) {
  if (dev) {
    e->dev = dev;
    return ZO_OK;
  }
  /* A GPU is the local rank's (LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK, ...), refused past the visible count. */
  const zo_device_kind kind = cfg->zoffload.device_kind;
  const int n_gpus = kind == ZO_DEVICE_HOST ? 0 : zo_device_cuda_count();
  int ordinal = 0;
  if (kind == ZO_DEVICE_CUDA || (kind == ZO_DEVICE_AUTO && n_gpus > 0))
    ZO_CHECK(zo_device_local_ordinal(n_gpus, &ordinal));
  ZO_CHECK(zo_device_create(kind, ordinal, (size_t)cfg->zoffload.device_memory_limit, &e->dev));
  e->own_dev = 1;
  zo_info("engine: device %s", zo_device_name(e->dev));
  if (cfg->zoffload.host_link_gbps > 0 && zo_device_get_kind(e->dev) == ZO_DEVICE_HOST)
    ZO_CHECK(zo_device_set_link_gbps(e->dev, cfg->zoffload.host_link_gbps));
  return ZO_OK;
}

/* The Adam threads: on the cores of the GPU's NUMA node when the kernel names one (near its pinned buffers and
 * its PCIe link); ranks sharing this machine (the launcher's local rank and size) take their own share of
 * those cores, so two ranks' threads are not bound to the same ones. */
static zo_status create_pool(zo_engine_t *e, const zo_config_t *cfg) {
  /* the pinned buffers on that node too, when this is the process's first engine (the pool does not exist yet) */
  if (zo_device_numa_node(e->dev) >= 0 &&
      zo_host_prefer_numa_node(zo_device_numa_node(e->dev)) == 0)
    zo_info("engine: pinned host memory bound to NUMA node %d (near '%s')",
            zo_device_numa_node(e->dev), zo_device_name(e->dev));
  zo_adam_pool_opts po = {.n_threads = cfg->zoffload.adam_threads,
                          .numa_node = zo_device_numa_node(e->dev),
                          .bind = 1,
                          .simd = ZO_SIMD_AUTO};
  zo_launch_info li;
  if (zo_launch_info_get(&li) == ZO_OK && li.local_size > 1)
    po.share_index = li.local_rank, po.share_count = li.local_size;
  if (zo_adam_pool_create(&po, &e->pool) != ZO_OK && po.numa_node >= 0) {
    zo_warn("engine: Adam threads on NUMA node %d of '%s': %s; using every node", po.numa_node,
            zo_device_name(e->dev), zo_last_error());
    po.numa_node = -1;
  }
  if (!e->pool) ZO_CHECK(zo_adam_pool_create(&po, &e->pool));
  zo_info("Adam pool: %s", zo_adam_pool_describe(e->pool));
  return ZO_OK;
}

/* The engine's communicator: a duplicate of the caller's when it spans
 * several ranks, the caller's own for one rank, else a one-rank one. */
static zo_status create_comm(zo_engine_t *e, zo_comm_t *comm) {
  if (comm && zo_comm_size(comm) > 1) {
    /* A duplicate of the caller's: the engine starts its reductions when gradients land (timing), so the
     * caller's own collectives on @comm must not interleave with them. */
    zo_status st = zo_comm_split(comm, 0, zo_comm_rank(comm), &e->comm);
    if (st != ZO_OK) return zo_error_prefix(st, "engine: duplicating the communicator");
    e->own_comm = 1;
  } else if (comm) {
    e->comm = comm;
  } else {
    ZO_CHECK(zo_comm_create_self(&e->comm));
    e->own_comm = 1;
  }
  e->rank = zo_comm_rank(e->comm);
  e->world = zo_comm_size(e->comm);
  return ZO_OK;
}

/* The swap directories of the NVMe tiers: the optimizer state's and the
 * parameters' (one handle when both name the same directories), each swap
 * file striped across the directories of a list. */
static zo_status create_swap(zo_engine_t *e, const zo_config_t *cfg) {
  zo_swap_opts so = {.block_size = (size_t)cfg->aio.block_size,
                     .queue_depth = (unsigned)cfg->aio.queue_depth,
                     .rank = e->rank,
                     .register_files = 1,
                     .sqpoll = cfg->zoffload.swap_sqpoll,
                     .sqpoll_idle_ms =
                         50, /* a polling kernel thread left spinning takes a core from Adam */
                     .checksum = cfg->zoffload.swap_checksum,
                     /* the disk keeps streaming between our calls (one per layer of compute) */
                     .progress_thread = 1};
  /* stripes of one aio block: each piece one request on one drive */
  if (cfg->aio.block_size % 4096 == 0) so.stripe_size = (size_t)cfg->aio.block_size;
  _Static_assert(ZO_CONFIG_MAX_NVME_PATHS <= ZO_SWAP_MAX_PATHS, "an nvme_path list fits a swap");
  const char *odirs[ZO_CONFIG_MAX_NVME_PATHS], *pdirs[ZO_CONFIG_MAX_NVME_PATHS];
  const unsigned on = zo_config_nvme_dirs(cfg, 0, odirs), pn = zo_config_nvme_dirs(cfg, 1, pdirs);
  const int same = zo_config_nvme_dirs_shared(cfg);
  zo_status st;
  if (e->tier == ZO_OFFLOAD_NVME && (st = eng_nv_create(&e->nv, odirs, on, &so)) != ZO_OK)
    return zo_error_prefix(st, "zero_optimization.offload_optimizer.nvme_path");
  zo_swap_t *osw = eng_nv_swap(e->nv);
  if (e->ptier == ZO_OFFLOAD_NVME) {
    if (osw && same) {
      e->pswap = osw; /* one private directory per rank and path */
    } else {
      if (!pdirs[0][0])
        return zo_error_set(ZO_ERR_CONFIG,
                            "zero_optimization.offload_param.nvme_path: required when "
                            "offload_param.device is \"nvme\"");
      if ((st = zo_swap_create_striped(pdirs, pn, &so, &e->pswap)) != ZO_OK)
        return zo_error_prefix(st, "zero_optimization.offload_param.nvme_path");
      e->own_pswap = 1;
    }
  }
  e->swap_align = zo_swap_alignment(osw ? osw : e->pswap);
  if (e->pswap && zo_swap_alignment(e->pswap) > e->swap_align)
    e->swap_align = zo_swap_alignment(e->pswap);
  return ZO_OK;
}

zo_status zo_engine_create(const zo_config_t *cfg, zo_device_t *dev, zo_comm_t *comm,
                           zo_engine_t **out) {
  if (!cfg || !out) return zo_error_set(ZO_ERR_INVALID_ARG, "engine: cfg and out must not be NULL");
  *out = NULL;
  ZO_CHECK(create_validate(cfg));
  zo_engine_t *e = calloc(1, sizeof *e);
  if (!e) return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "engine: out of host memory");
  e->lr_override = -1; /* the config's schedule */
  e->owner_pid = (long)getpid();
  zo_status st = ZO_OK;
  if (cfg->zoffload.optimizer_state_dtype != ZO_DTYPE_F32 &&
      cfg->zoffload.optimizer_state_dtype != ZO_DTYPE_BF16) {
    free(e);
    return zo_error_set(ZO_ERR_CONFIG, "zoffload.optimizer_state_dtype: expected fp32 or bf16");
  }
  ZO_CHECK_GOTO(eng_wb_create(e), st, fail);
  ZO_CHECK_GOTO(eng_fetch_create(e), st, fail);
  ZO_CHECK_GOTO(eng_trace_create(e), st, fail);
  ZO_CHECK_GOTO(create_tiers(e, cfg), st, fail);
  ZO_CHECK_GOTO(create_device(e, cfg, dev), st, fail);
  ZO_CHECK_GOTO(create_pool(e, cfg), st, fail);
  ZO_CHECK_GOTO(create_comm(e, comm), st, fail);
  ZO_CHECK_GOTO(zo_engine_check_device(cfg, zo_device_get_kind(e->dev), e->world), st, fail);
  if (e->world > 1 && e->cfg.zero.stage == 3 && e->ptier == ZO_OFFLOAD_NONE &&
      zo_device_get_kind(e->dev) == ZO_DEVICE_HOST) {
    /* Stage 3 on several ranks of the host device: its memory is the host's, so the parameters partitioned "in
     * device memory" are the host tier's partitions (DeepSpeed's CPU accelerator partitions them in RAM too). */
    e->ptier = e->cfg.zero.offload_param.device = ZO_OFFLOAD_CPU;
    e->pconv = 1;
    zo_info("engine: stage 3 on %d ranks of the host device: parameters partitioned in host memory "
            "(as offload_param.device \"cpu\")",
            e->world);
  } else if (e->world > 1 && e->cfg.zero.stage == 3 && e->ptier == ZO_OFFLOAD_NONE) {
    /* Stage 3 on several GPU ranks: each rank keeps its block of every tensor in device memory, and fetches
     * all-gather whole tensors ahead of use, as offload_param "cpu" does from host memory (engine_dp3.c) */
    e->ptier = ZO_OFFLOAD_CPU;
    e->pdev = 1;
  }
  if (e->world > 1 && (st = eng_dp_check(e)) != ZO_OK) goto fail;
  ZO_CHECK_GOTO(zo_stream_create(e->dev, &e->copy_stream), st, fail);
  ZO_CHECK_GOTO(zo_event_create(e->dev, &e->weights_ready), st, fail);
  if (e->tier == ZO_OFFLOAD_NVME || e->ptier == ZO_OFFLOAD_NVME)
    ZO_CHECK_GOTO(create_swap(e, cfg), st, fail);
  e->loss_scale = 1.0;
  if (cfg->fp16.enabled) {
    e->loss_scale =
        cfg->fp16.loss_scale > 0 ? cfg->fp16.loss_scale : ldexp(1.0, cfg->fp16.initial_scale_power);
    e->ls_hysteresis = cfg->fp16.hysteresis;
    e->ls_last_overflow = -1;
  }
  *out = e;
  return ZO_OK;
fail:
  zo_engine_destroy(e);
  return st;
}

const char *zo_engine_last_error(const zo_engine_t *e) {
  (void)e;
  return zo_last_error();
}

void zo_engine_destroy(zo_engine_t *e) {
  if (!e) return;
  /* A fork()ed child: the engine's threads, streams, swap files and locks are the parent's. Joining or waiting on
   * them hangs (the child has none of the threads), and freeing or removing them would take them from the parent;
   * the child's copy of the memory is simply left (it goes when the child exits). */
  if (e->owner_pid != (long)getpid()) return;
  if (e->tasks) zo_engine_synchronize(e);
  if (e->copy_stream) zo_stream_synchronize(e->copy_stream);
  if (e->nv) eng_nv_quiesce(e);
  for (int i = 0; e->tasks && i < e->n_params; i++)
    if (e->tasks[i]) zo_adam_task_wait(e->tasks[i], NULL);
  eng_nv_wait_tasks(e->nv);
  /* several ranks: collectives in flight finished, and the gathers' copies out of the ring, while the tensors'
   * events still exist (gathers issued ahead for the next step may be pending here) */
  eng_dp_free(e);
  eng_pg_free(e);
  zo_adam_pool_destroy(e->pool);
  free(e->tasks);
  zo_plan_free(e->plan);
  /* Parameter offload: in-flight reads, staging buffers, device copies, events. */
  for (int i = 0; i < e->n_params; i++) {
    zo_param_t *p = e->params[i];
    if (p->read_req) zo_swap_wait(e->pswap, p->read_req);
    /* the copy stream is idle; compute is the caller's to finish */
    if (p->blk) zo_arena_free(e->arena, p->blk, NULL);
    zo_event_destroy(p->ready);
  }
  eng_wb_free(e);
  eng_fetch_free(e);
  eng_trace_free(e);
  eng_host_buf_free(&e->param_host);
  if (e->own_pswap) zo_swap_destroy(e->pswap);
  eng_gnv_free(e); /* gradient writes in flight (after an error) */
  eng_nv_free(e);  /* closes and removes the files and the private directory */
  eng_host_buf_free(&e->grad_host);
  eng_host_buf_free(&e->grad_host2);
  eng_host_buf_free(&e->stage_host);
  eng_host_buf_free(&e->stage_host2);
  eng_acc_free(e);
  for (int k = 0; k < ST_KINDS; k++) eng_host_buf_free(&e->state_host[k]);
  eng_host_buf_free(&e->dnorm_host);
  eng_states_free(e); /* zo_engine_offload_states(): the host copy, the kept device allocation */
  if (e->dev_blk) zo_arena_free(e->arena, e->dev_blk, NULL);
  zo_arena_destroy(e->arena);
  zo_event_destroy(e->compute_mark);
  zo_event_destroy(e->weights_ready);
  zo_stream_destroy(e->copy_stream);
  for (int i = 0; i < e->n_params; i++) free(e->params[i]);
  free(e->params);
  if (e->own_comm) zo_comm_destroy(e->comm);
  if (e->own_dev) zo_device_destroy(e->dev);
  free(e);
}

/* ---------------------------------------------------------------- registry */

zo_status zo_engine_register_param(zo_engine_t *e, const char *name, size_t n_elems,
                                   zo_param_t **out) {
  if (!e || !name || !out) return zo_error_set(ZO_ERR_INVALID_ARG, "register_param: NULL argument");
  ZO_CHECK(eng_check_usable(e, "register_param"));
  if (e->finalized)
    return zo_error_set(ZO_ERR_INVALID_USAGE,
                        "register_param '%s': the engine is already finalized", name);
  if (!name[0] || strlen(name) >= sizeof((zo_param_t *)0)->name)
    return zo_error_set(ZO_ERR_INVALID_ARG, "register_param: name '%s' must be 1..127 bytes", name);
  if (n_elems == 0)
    return zo_error_set(ZO_ERR_INVALID_ARG, "register_param '%s': n_elems is 0", name);
  /* The limit keeps every byte count derived from element counts (budget, finalize, the tiers) inside size_t. */
  size_t total;
  if (n_elems > ZO_ENGINE_MAX_ELEMS)
    return zo_error_set(ZO_ERR_INVALID_ARG,
                        "register_param '%s': %zu elements are more than one tensor may have "
                        "(at most %zu = 2^48)",
                        name, n_elems, ZO_ENGINE_MAX_ELEMS);
  if (zo_size_add(e->total_el, n_elems, &total) || total > ZO_ENGINE_MAX_ELEMS)
    return zo_error_set(ZO_ERR_INVALID_ARG,
                        "register_param '%s': %zu elements on top of the %zu already registered "
                        "are more than one engine may hold (at most %zu = 2^48 in all tensors)",
                        name, n_elems, e->total_el, ZO_ENGINE_MAX_ELEMS);
  for (int i = 0; i < e->n_params; i++)
    if (!strcmp(e->params[i]->name, name))
      return zo_error_set(ZO_ERR_INVALID_ARG, "register_param: tensor '%s' is already registered",
                          name);
  if (e->n_params == e->cap_params) {
    if (e->cap_params > (1 << 29))
      return zo_error_set(ZO_ERR_INVALID_ARG, "register_param '%s': more than %d tensors", name,
                          e->cap_params);
    int cap = e->cap_params ? 2 * e->cap_params : 64;
    zo_param_t **np = realloc(e->params, cap * sizeof *np);
    if (!np)
      return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "register_param '%s': out of host memory", name);
    e->params = np;
    e->cap_params = cap;
  }
  zo_param_t *p = calloc(1, sizeof *p);
  if (!p)
    return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "register_param '%s': out of host memory", name);
  snprintf(p->name, sizeof p->name, "%s", name);
  p->index = e->n_params;
  p->eng = e;
  p->n = n_elems;
  p->weight_decay =
      (float)e->cfg.optimizer.weight_decay; /* the config's, until a parameter group sets its own */
  p->part_n =
      e->cfg.zero.stage == 0 ? n_elems : (n_elems + (size_t)e->world - 1) / (size_t)e->world;
  const size_t per = p->part_n, lo = e->cfg.zero.stage == 0 ? 0 : per * (size_t)e->rank;
  p->shard_off = lo < n_elems ? lo : n_elems;
  p->shard_n = lo < n_elems ? (n_elems - lo < per ? n_elems - lo : per) : 0;
  e->params[e->n_params++] = p;
  e->total_el = total;
  *out = p;
  return ZO_OK;
}

zo_status zo_engine_set_param_weight_decay(zo_engine_t *e, zo_param_t *p, double weight_decay) {
  if (!e || !p || p->eng != e)
    return zo_error_set(ZO_ERR_INVALID_ARG, "set_param_weight_decay: NULL argument or a "
                                            "tensor of another engine");
  ENG_CHECK_OWNER(e, "set_param_weight_decay");
  if (!(weight_decay >= 0.0 && weight_decay <= 1e6)) /* also refuses NaN */
    return zo_error_set(ZO_ERR_INVALID_ARG, "set_param_weight_decay '%s': %g is not in [0, 1e6]",
                        p->name, weight_decay);
  if (p->has_grad)
    return zo_error_set(
        ZO_ERR_INVALID_USAGE,
        "set_param_weight_decay '%s': its gradient was already handed over "
        "in this step (its update may have begun); call before zo_engine_grad_ready() or after "
        "zo_engine_step()",
        p->name);
  p->weight_decay = (float)weight_decay;
  return ZO_OK;
}

zo_status zo_engine_set_compute_stream(zo_engine_t *e, zo_stream_t *s) {
  if (!e) return zo_error_set(ZO_ERR_INVALID_ARG, "set_compute_stream: engine is NULL");
  ZO_CHECK(eng_check_usable(e, "set_compute_stream"));
  if (e->finalized && e->compute_stream != s)
    return zo_error_set(ZO_ERR_INVALID_USAGE,
                        "set_compute_stream: call it before zo_engine_finalize()");
  if (s && !e->compute_mark) ZO_CHECK(zo_event_create(e->dev, &e->compute_mark));
  e->compute_stream = s;
  return ZO_OK;
}

const char *zo_engine_param_name(const zo_param_t *p) { return p ? p->name : ""; }
size_t zo_engine_param_numel(const zo_param_t *p) { return p ? p->n : 0; }
zo_dtype zo_engine_working_dtype(const zo_engine_t *e) { return e->wdtype; }
zo_dtype zo_engine_grad_dtype(const zo_engine_t *e) { return e->gdtype; }
zo_dtype zo_engine_grad_accum_dtype(const zo_engine_t *e) { return e->adtype; }
double zo_engine_loss_scale(const zo_engine_t *e) { return e->loss_scale; }
int64_t zo_engine_steps_applied(const zo_engine_t *e) { return e ? e->step : 0; }

/* ---------------------------------------------------------------- finalize */

/*
 * The device arena: one reservation from which every engine allocation is
 * carved (the resident block, and with parameter offload every fetched
 * copy). Its size is zoffload.device_arena_bytes, or by default the device
 * memory available at finalize (allocate your own device buffers, such as
 * gradients, before zo_engine_finalize()): all of it on a host device, 90%
 * on CUDA, whose context, cuBLAS workspaces and the model's activations need
 * the rest; on a device with no limit (an unlimited host device) exactly
 * what the engine can use: the resident bytes plus every offloaded tensor's
 * copy. "fit" (ZO_ARENA_FIT, for a GPU whose other memory a framework's
 * allocator manages) is that too, except that with parameter offload the
 * copies are bounded by stage3_max_live_parameters elements plus twice the
 * largest tensor (and 256 bytes of alignment per tensor), the most that
 * stage 3 keeps on the device. @resident: bytes of the resident block;
 * @avail: available device bytes (SIZE_MAX: no limit), checked by the caller.
 */
size_t eng_arena_default_bytes(const zo_engine_t *e, size_t avail) {
  return zo_device_host_addressable(e->dev) ? avail : avail / 10 * 9;
}

static zo_status create_arena(zo_engine_t *e, size_t resident, size_t avail) {
  const int64_t want = e->cfg.zoffload.device_arena_bytes;
  size_t cap = resident;
  if (want > 0) {
    cap = (size_t)want;
    if (cap > avail || cap < resident)
      return zo_error_set(
          ZO_ERR_CONFIG,
          "zoffload.device_arena_bytes: %zu bytes %s; set it between %zu and %zu, or "
          "0 (auto)",
          cap,
          cap > avail ? "are more than the device has available"
                      : "cannot hold the resident weights (and state)",
          resident, avail);
  } else if (want == ZO_ARENA_FIT || avail == SIZE_MAX) {
    const size_t wsz = zo_dtype_size(e->wdtype);
    size_t copies = 0, largest = 0;
    for (int i = 0; i < e->n_params && e->ptier != ZO_OFFLOAD_NONE; i++) {
      const size_t b = zo_round_up(e->params[i]->n * wsz, ZO_DEVICE_ALIGN);
      copies += b;
      if (b > largest) largest = b;
    }
    if (want == ZO_ARENA_FIT && e->ptier != ZO_OFFLOAD_NONE) {
      /* stage3_max_live_parameters comes from the config (up to INT64_MAX): a live bound past size_t is no bound. */
      size_t live;
      if (!zo_size_mul((size_t)e->cfg.zero.stage3_max_live_parameters, wsz, &live) &&
          !zo_size_round_up(live, ZO_DEVICE_ALIGN, &live) &&
          !zo_size_add(live, 2 * largest + (size_t)ZO_DEVICE_ALIGN * (size_t)e->n_params, &live) &&
          live < copies)
        copies = live;
    }
    if (zo_size_add(cap, copies, &cap) || cap > avail)
      return zo_error_set(
          ZO_ERR_OUT_OF_MEMORY,
          "zoffload.device_arena_bytes \"fit\": the engine holds up to %zu "
          "bytes on the device, %zu are available; lower zero_optimization.stage3_max_live_parameters "
          "or offload more",
          cap, avail);
  } else {
    cap = eng_arena_default_bytes(e, avail);
    if (cap < resident) cap = avail;
  }
  cap = cap / ZO_DEVICE_ALIGN * ZO_DEVICE_ALIGN;
  zo_status st = zo_arena_create(e->dev, cap, NULL, &e->arena);
  if (st != ZO_OK) return zo_error_prefix(st, "engine: device arena of %zu bytes", cap);
  return ZO_OK;
}

static zo_status finalize_tiers(zo_engine_t *e, const zo_plan *plan);

/* A finalize that failed past its argument checks leaves some tiers allocated (sized for the tensors of that
 * moment): the engine only accepts zo_engine_destroy() after it (eng_check_usable). */
zo_status zo_engine_finalize(zo_engine_t *e) {
  if (!e) return zo_error_set(ZO_ERR_INVALID_ARG, "finalize: engine is NULL");
  ZO_CHECK(eng_check_usable(e, "finalize"));
  if (e->finalized) return zo_error_set(ZO_ERR_INVALID_USAGE, "finalize: already finalized");
  if (e->n_params == 0)
    return zo_error_set(ZO_ERR_INVALID_USAGE, "finalize: no parameter was registered");
  /* zoffload.placement "auto" that nobody placed yet (zo_engine_place): the planner, with the machine's rates */
  if (e->cfg.zoffload.placement == ZO_PLACEMENT_AUTO && !e->placed) {
    zo_step_rates r;
    zo_placement pl;
    ZO_CHECK(zo_step_rates_get(e, 0, 0, &r));
    ZO_CHECK(zo_engine_place(e, &r, NULL, &pl));
    zo_info(
        "placement \"auto\": optimizer state %zu of %zu elements and working weights %zu of %zu in host memory",
        pl.optimizer_resident_el, pl.optimizer_total_el, pl.param_cached_el, pl.param_total_el);
  }
  zo_plan *plan = NULL;
  zo_status st = zo_plan_make(e, "finalize", ZO_DEVICE_AUTO, &plan);
  if (st == ZO_OK) st = finalize_tiers(e, plan);
  if (st == ZO_OK)
    e->plan = plan; /* kept: the layout as allocated (zo_engine_predict) */
  else
    zo_plan_free(plan);
  if (st != ZO_OK) e->fin_failed = 1;
  return st;
}

/* Working weights on NVMe (finalize): params.swp and the staging buffers of the reads; neither when every tensor
 * is cached in param_host (e->pfile stays NULL). */
static zo_status alloc_param_nvme(zo_engine_t *e, const zo_plan *plan) {
  zo_status st;
  const size_t pbytes = zo_plan_bytes(plan, "params.swp");
  if (!pbytes || !plan->n_pstage) return ZO_OK;
  st = zo_swap_file_create(e->pswap, "params.swp", pbytes, &e->pfile);
  if (st != ZO_OK) return zo_error_prefix(st, "engine: working weights file");
  eng_ledger_note(e, ZO_TIER_NVME, "params.swp", zo_swap_file_size(e->pfile), 0, 1);
  return eng_fetch_stage_alloc(e, plan);
}

/* Allocate what @plan says, in its order; every size and offset is the plan's (plan.c), each request is noted in
 * the ledger (zo_engine_allocations()). */
/* The device block (the plan's resident regions: working weights unless they are offloaded; plus master, state
 * and gradients for offload_optimizer "none") carved from a new arena, with the device memory checked first: the
 * resident block, and with parameter offload at least the largest tensor besides. Then the NCCL staging's entry
 * in the ledger. */
static zo_status alloc_device_block(zo_engine_t *e, const zo_plan *plan) {
  const int pres = e->ptier == ZO_OFFLOAD_NONE; /* working weights resident in device memory */
  const size_t dev = plan->device_bytes;
  size_t used = 0, peak = 0, limit = 0, avail = 0;
  ZO_CHECK(zo_device_mem_info(e->dev, &used, &peak, &limit));
  ZO_CHECK(zo_device_mem_available(e->dev, &avail));
  const size_t largest_dev = plan->largest_dev_bytes;
  if (!pres && dev <= avail && largest_dev > avail - dev)
    return zo_error_set(
        ZO_ERR_CONFIG,
        "zoffload.device_memory_limit: the largest tensor needs %zu bytes of device "
        "memory but only %zu of %zu are free; raise it to at least %zu",
        largest_dev, avail - dev, limit, used + dev + largest_dev);
  if (dev) {
    zo_status st = dev > avail ? zo_error_set(ZO_ERR_OUT_OF_MEMORY,
                                              "device memory: cannot allocate %zu bytes: %zu in "
                                              "use of limit %zu",
                                              dev, used, limit)
                               : create_arena(e, dev, avail);
    if (st == ZO_OK)
      st = zo_arena_alloc(e->arena, dev, &e->dev_blk); /* pinned for the engine's life */
    if (st == ZO_OK) e->dev_block = zo_arena_ptr(e->dev_blk);
    if (st != ZO_OK) {
      return zo_error_prefix(
          st,
          "engine: device memory for %d tensors (%s%s%s); raise zoffload.device_memory_limit "
          "or offload more",
          e->n_params, pres ? "working weights" : "",
          pres && e->tier == ZO_OFFLOAD_NONE ? ", " : "",
          e->tier == ZO_OFFLOAD_NONE ? "master weights, Adam state and gradients" : "");
    }
    eng_ledger_note(e, ZO_TIER_DEVICE, "device_block", dev, 0, -1);
  }
  /* the NCCL communicator's staging, held since its creation (the gathers' split adds one: eng_pg_alloc) */
  if (eng_nccl_comms(e))
    eng_ledger_note(e, ZO_TIER_DEVICE, "comm_staging", ZO_COMM_NCCL_STAGE_BYTES, 0, -1);
  if (!e->arena) ZO_CHECK(create_arena(e, dev, avail));
  e->dev_block_bytes = dev;
  return ZO_OK;
}

/* Each tensor's pointers into the device block at the plan's offsets; device Adam's norm partials and upload stage
 * there too, with the partials' host copy. */
static zo_status place_device_tensors(zo_engine_t *e, const zo_plan *plan) {
  char *d = e->dev_block;
  for (int i = 0; i < e->n_params; i++) {
    zo_param_t *p = e->params[i];
    const size_t *off = plan->tensor[i].dev_off;
    p->stage = -1;
    if (e->ptier == ZO_OFFLOAD_NONE) {
      p->weights = d + off[0];
      p->pstate = P_RESIDENT;
    }
    if (e->tier == ZO_OFFLOAD_NONE) {
      for (int k = 0; k < ST_KINDS; k++) p->state[k] = d + off[1 + k];
      p->grad = d + off[4];
    }
  }
  if (eng_device_adam(e)) { /* the norm partials (plan.c), and their host copy */
    e->dnorm_dev = (double *)(d + plan->dev_norm_off);
    if (plan->dev_stage_off != SIZE_MAX) e->dstage_dev = d + plan->dev_stage_off;
    ZO_CHECK(eng_host_buf_alloc_as(e, &e->dnorm_host, "device_adam.norm_host",
                                   zo_plan_bytes(plan, "device_adam.norm_host"), 1));
  }
  return ZO_OK;
}

/* Host, for offload_optimizer cpu or nvme: gradients (landing buffer of the device-to-host copies) and the cpu
 * state, each tensor pointed into them; then the staging of the working copy when the weights stay resident. */
static zo_status alloc_host_state(zo_engine_t *e, const zo_plan *plan) {
  const size_t gsz = zo_dtype_size(e->adtype); /* p->grad: the accumulation dtype */
  const int pin = e->cfg.zero.offload_optimizer.pin_memory;
  static const char *const k_state_host[ST_KINDS] = {"state_host.master", "state_host.exp_avg",
                                                     "state_host.exp_avg_sq"};
  if (e->tier != ZO_OFFLOAD_NONE) {
    if (e->tier == ZO_OFFLOAD_CPU)
      ZO_CHECK(eng_host_buf_alloc_as(e, &e->grad_host, "grad_host",
                                     zo_plan_bytes(plan, "grad_host"), pin));
    if (e->dpu && e->tier == ZO_OFFLOAD_CPU)
      ZO_CHECK(eng_host_buf_alloc_as(e, &e->grad_host2, "grad_host2",
                                     zo_plan_bytes(plan, "grad_host2"), 1));
    if (e->tier == ZO_OFFLOAD_CPU)
      for (int k = 0; k < ST_KINDS; k++)
        ZO_CHECK(eng_host_buf_alloc_as(e, &e->state_host[k], k_state_host[k],
                                       zo_plan_bytes(plan, k_state_host[k]), pin));
    for (int i = 0; i < e->n_params; i++) {
      zo_param_t *p = e->params[i];
      p->host_off = p->flat_off;
      p->grad = e->tier == ZO_OFFLOAD_CPU ? (char *)e->grad_host.ptr + p->host_off * gsz
                                          : NULL; /* nvme: grad.swp */
      if (e->tier == ZO_OFFLOAD_CPU)
        for (int k = 0; k < ST_KINDS; k++)
          p->state[k] = (char *)e->state_host[k].ptr + p->host_off * e->esz[k];
    }
  }
  if ((e->ptier == ZO_OFFLOAD_NONE || e->pdev) && e->tier != ZO_OFFLOAD_NONE) {
    ZO_CHECK(eng_host_buf_alloc_as(e, &e->stage_host, "stage_host",
                                   zo_plan_bytes(plan, "stage_host"), 1));
    if (e->dpu && !eng_dpu_one_stage(e))
      ZO_CHECK(eng_host_buf_alloc_as(e, &e->stage_host2, "stage_host2",
                                     zo_plan_bytes(plan, "stage_host2"), 1));
  }
  return ZO_OK;
}

/* Every tier's buffers, in the plan's order (the ledger lists them so: test_plan compares the two), after the
 * start-up budget has checked host memory, pinned memory and NVMe space before anything is allocated (device
 * memory: alloc_device_block, with messages that also name the limit in force). */
static zo_status finalize_tiers(zo_engine_t *e, const zo_plan *plan) {
  zo_budget budget;
  ZO_CHECK(zo_plan_budget(e, plan, NULL, &budget));
  budget.line[0].fits = 1;
  ZO_CHECK(zo_budget_check(&budget));
  e->tasks = calloc(e->n_params, sizeof *e->tasks);
  if (!e->tasks) return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "engine: out of host memory");

  for (int i = 0; i < e->n_params; i++) e->params[i]->flat_off = plan->tensor[i].flat_off;
  ZO_CHECK(alloc_device_block(e, plan));
  ZO_CHECK(place_device_tensors(e, plan));
  /* Parameter offload (the live budget holds the largest tensor: checked by the plan) */
  if (e->ptier != ZO_OFFLOAD_NONE) {
    for (int i = 0; i < e->n_params; i++) {
      zo_param_t *p = e->params[i];
      p->persistent = (int64_t)p->n <= e->cfg.zero.stage3_param_persistence_threshold;
      ZO_CHECK(zo_event_create(e->dev, &p->ready));
    }
  } else if (eng_ready_per_tensor(e)) {
    for (int i = 0; i < e->n_params; i++) ZO_CHECK(zo_event_create(e->dev, &e->params[i]->ready));
  }
  e->swap_align = plan->swap_align;
  for (int i = 0; i < e->n_params; i++)
    e->params[i]->pw_el = plan->tensor[i].pw_el, e->params[i]->pw_host = plan->tensor[i].pw_host;
  ZO_CHECK(alloc_host_state(e, plan));
  ZO_CHECK(eng_acc_alloc(e, plan->grad_staging_bytes));
  if (e->world > 1) ZO_CHECK(eng_dp_alloc(e, plan));
  if (eng_dp3(e)) ZO_CHECK(eng_pg_alloc(e, plan));
  if (e->pdev) /* this rank's blocks in device memory */
    e->param_dev = (char *)e->dev_block + plan->dev_param_off;
  else if (e->ptier == ZO_OFFLOAD_CPU ||
           plan->pcache_el) /* nvme: the tensors cached in host memory */
    ZO_CHECK(eng_host_buf_alloc_as(e, &e->param_host, "param_host",
                                   zo_plan_bytes(plan, "param_host"),
                                   e->cfg.zero.offload_param.pin_memory));
  if (e->ptier == ZO_OFFLOAD_NVME) {
    ZO_CHECK(alloc_param_nvme(e, plan));
    if (eng_dp3(e)) eng_pg_set_stages(e->pg, e->fetch);
  }
  if (e->tier == ZO_OFFLOAD_NVME) ZO_CHECK(eng_nv_alloc(e, plan));
  if (e->ptier == ZO_OFFLOAD_NVME) ZO_CHECK(eng_wb_ring_alloc(e, plan));
  if (e->pageable_bytes) /* zoffload.allow_pageable_host: the one warning (eng_pin_check refuses otherwise) */
    zo_warn(
        "engine: %zu bytes of pinned host buffers (the first: \"%s\") are not registered with CUDA (%s) and stay "
        "pageable, as zoffload.allow_pageable_host allows: host<->device copies from them are staged by the "
        "driver, slower, and block",
        e->pageable_bytes, e->pageable_first, e->pageable_why);
  e->finalized = 1;
  return ZO_OK;
}

/* ---------------------------------------------------------------- initial weights */

/*
 * Host state of one shard set from fp32 values: the master copied, exp_avg and exp_avg_sq zeroed. A 10B model is
 * 38.7 GB of master weights and 38.7 GB of moments (bf16): some 8 s on one core at 10 GB/s. So a shard of
 * LOAD_POOL_MIN_EL elements and up is split over the Adam pool's (bound) threads in one contiguous range each; a
 * smaller one is copied here, where a pool hop would cost more than the copy. Same bytes for any thread count.
 */
#define LOAD_POOL_MIN_EL ((size_t)1 << 20)

typedef struct load_job {
  const zo_engine_t *e;
  const zo_param_t *p;
  const float *src; /* the shard's values */
} load_job;

static void load_host_range(void *arg, size_t begin, size_t end, int thread) {
  (void)thread;
  const load_job *j = arg;
  const size_t n = end - begin;
  memcpy((float *)j->p->state[ST_MASTER] + begin, j->src + begin, n * sizeof(float));
  for (int k = ST_EXP_AVG; k <= ST_EXP_AVG_SQ; k++) /* all-zero bits are 0.0 in fp32 and bf16 */
    memset((char *)j->p->state[k] + begin * j->e->esz[k], 0, n * j->e->esz[k]);
}

static zo_status load_host_state(zo_engine_t *e, zo_param_t *p, const float *src) {
  load_job j = {e, p, src};
  if (p->shard_n < LOAD_POOL_MIN_EL) {
    load_host_range(&j, 0, p->shard_n, 0);
    return ZO_OK;
  }
  return zo_adam_pool_parallel_for(e->pool, load_host_range, &j, p->shard_n,
                                   ZO_ADAM_TILE_CONTIGUOUS);
}

zo_status zo_engine_load_param(zo_engine_t *e, zo_param_t *p, const float *values) {
  if (!e || !p || !values) return zo_error_set(ZO_ERR_INVALID_ARG, "load_param: NULL argument");
  ENG_CHECK_OWNER(e, "load_param");
  if (!e->finalized)
    return zo_error_set(ZO_ERR_INVALID_USAGE, "load_param '%s': call zo_engine_finalize() first",
                        p->name);
  const float *src = values + p->shard_off;
  zo_status st;
  /* master from @values and zero moments into device memory, through the copy stream */
  if (eng_device_adam(e)) {
    ZO_CHECK(eng_dev_copy(e, p->state[ST_MASTER], src, p->shard_n * sizeof(float), ZO_COPY_H2D));
    ZO_CHECK(
        zo_memset_async(e->copy_stream, p->state[ST_EXP_AVG], 0, p->shard_n * e->esz[ST_EXP_AVG]));
    ZO_CHECK(zo_memset_async(e->copy_stream, p->state[ST_EXP_AVG_SQ], 0,
                             p->shard_n * e->esz[ST_EXP_AVG_SQ]));
    ZO_CHECK(eng_upload_shard(e, p, 0, p->shard_n, src));
  } else if (e->tier != ZO_OFFLOAD_NVME) {
    ZO_CHECK(load_host_state(e, p, src));
    /* The working copy is cast into @p's staging region, which an upload queued by an earlier load of @p (or a
     * step) may still be reading: wait for the copy stream first (start-up and checkpoint loads only; ThreadSanitizer
     * caught the cast racing that memcpy when test_engine loaded one tensor twice). */
    if (e->copy_stream) ZO_CHECK(zo_stream_synchronize(e->copy_stream));
    ZO_CHECK(eng_upload_shard(e, p, 0, p->shard_n, p->state[ST_MASTER]));
  } else {
    /* Stream the shard through slot 0 in slot-sized chunks: master from values, state zeros. */
    ZO_CHECK(eng_nv_quiesce(e));
    sg_slot *sl = eng_nv_slot(e->nv, 0);
    const size_t slot_el = eng_nv_slot_el(e->nv);
    for (size_t off = 0, n; off < p->shard_n; off += n) {
      void *res[SL_KINDS];
      n = eng_nv_span(e, p, off, p->shard_n - off, res);
      if (res[ST_MASTER]) { /* resident: straight into host memory */
        const uint64_t n_el = eng_padded_el(e, n);
        for (int k = 0; k < ST_KINDS; k++) memset(res[k], 0, n_el * e->esz[k]);
        memcpy(res[ST_MASTER], src + off, n * sizeof(float));
        ZO_CHECK(eng_upload_shard(e, p, off, n, res[ST_MASTER]));
        continue;
      }
      if (n > slot_el) n = slot_el;
      uint64_t n_el = eng_padded_el(e, n);
      for (int k = 0; k < ST_KINDS; k++) memset(sl->buf[k], 0, n_el * e->esz[k]);
      memcpy(sl->buf[ST_MASTER], src + off, n * sizeof(float));
      for (int k = 0; k < ST_KINDS; k++)
        ZO_CHECK(eng_swap_io(e, 1, k, p->file_el + off, sl->buf[k], n_el, &sl->req[k]));
      int done;
      st = eng_slot_settle(e, sl, 1, &done);
      if (st != ZO_OK) return zo_error_prefix(st, "load_param '%s'", p->name);
      /* The cast goes to this chunk's own staging region, so the slot is free again at once. */
      ZO_CHECK(eng_upload_shard(e, p, off, n, sl->buf[ST_MASTER]));
    }
  }
  if (e->world > 1)
    ZO_CHECK(eng_dp_publish(e, p)); /* every rank's shard of the working weights, all-gathered */
  /* Several ranks at stage 3: a device copy gathered by an earlier fetch holds the old weights (the upload above
   * wrote only this rank's block); dropped, the next fetch gathers the new ones, as after a step. */
  if (eng_dp3(e) && p->blk && !p->in_use && p->pstate == P_RESIDENT) eng_drop_device_copy(e, p);
  ZO_CHECK(zo_event_record(e->weights_ready, e->copy_stream));
  return ZO_OK;
}
