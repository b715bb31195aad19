/*
 * engine.c - the offload engine: parameter registry, ZeRO partitioning, the
 * tiers that hold master weights and Adam state, and the optimizer step.
 * Not here: the Adam arithmetic (cpu_adam/), swap I/O (swap/), device memory
 * and copies (gpu/). Parameter offload and prefetch come with the coordinator.
 */
#include <limits.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>

#include "base_internal.h"
#include "pinned_internal.h"
#include "zoffload/adam.h"
#include "zoffload/engine.h"
#include "zoffload/swap.h"

enum { ST_MASTER = 0, ST_EXP_AVG = 1, ST_EXP_AVG_SQ = 2, ST_KINDS = 3 };
static const char *const k_state_file[ST_KINDS] = {"master.swp", "exp_avg.swp", "exp_avg_sq.swp"};

struct zo_param {
  char name[128];
  int index;
  size_t n;                 /* elements of the whole tensor */
  size_t shard_off;         /* first element of this rank's shard */
  size_t shard_n;           /* elements in this rank's shard (may be 0) */
  size_t flat_off;          /* first element of the shard in the rank's flat parameter space (rounding seed) */
  void *weights;            /* device: working copy, n elements of the working dtype */
  void *state[ST_KINDS];    /* none: device, cpu: host; NULL for nvme. master float32[shard_n],
                               exp_avg and exp_avg_sq state_dtype[shard_n] */
  uint64_t file_el;         /* nvme: element offset of this shard's extent in every state file */
  void *grad;               /* grad_dtype[shard_n]: device (none) or host (cpu, nvme) */
  size_t host_off;          /* element offset of this shard in the engine's host arrays (cpu, nvme) */
  int has_grad;             /* grad_ready() seen since the last step */

  /* Parameter offload (offload_param.device cpu or nvme): the working copy
   * lives on the host tier and `weights` points at a device buffer only while
   * the tensor is fetched or kept. */
  int pstate;               /* P_HOST, P_READING (nvme read in flight), P_COPYING (H2D in flight), P_RESIDENT */
  int in_use;               /* fetches not yet released */
  int persistent;           /* n <= stage3_param_persistence_threshold: stays on the device once fetched */
  size_t pw_el;             /* element offset of the tensor's working copy in the host tier (padded for nvme) */
  int stage;                /* nvme: staging buffer index while P_READING / P_COPYING, else -1 */
  zo_swap_req_t *read_req;  /* nvme: read of the working copy in flight */
  zo_event_t *ready;        /* H2D completion of the working copy */
  int64_t last_use;         /* fetch counter at the last fetch (eviction order) */
  void *wb_ptr;             /* nvme: the write-back region allocated last for this tensor (working_dst) */

  /* Set on the copy stream's thread when the gradient has landed (read by the
   * engine thread after synchronizing the stream). */
  zo_engine_t *eng;
  double sqnorm;            /* squared L2 norm of the (loss-scaled) gradient shard */
  int nonfinite;            /* the shard holds inf or NaN */
  zo_status landed_st;      /* error of the work done when the gradient landed */
  atomic_int landed;        /* 1 once the above are set (release store on the copy stream's thread); 0 after a step */
  int grad_seq;             /* 1-based order of this tensor's grad_ready() in the step */
};

enum { P_HOST = 0, P_READING = 1, P_COPYING = 2, P_RESIDENT = 3 };

/* A run of shard pieces that lies contiguously in every state file. Files
 * are laid out in elements; kind k's byte offset is elements * esz[k], and
 * every extent is padded to a whole number of alignment units for the
 * narrowest kind, so every kind's offsets stay aligned. */
typedef struct sub_group {
  int first_piece, n_pieces;
  uint64_t file_el, n_el;    /* element range in each state file, padded */
  int phase;                 /* SG_* (see the NVMe pipeline below) */
  int slot;                  /* slot holding its state, or -1 */
  int done;                  /* updated in this step */
  int pos;                   /* position in this step's order (e->sg_order) */
  int ready_at;              /* largest grad_seq of its tensors: when it became complete */
} sub_group;

enum { SG_IDLE = 0, SG_READING = 1, SG_LOADED = 2, SG_UPDATING = 3, SG_WRITING = 4 };

typedef struct piece {
  zo_param_t *p;
  size_t off, n;             /* element range inside the shard */
  uint64_t file_el;          /* element offset of element `off` in each state file */
  zo_adam_task_t *task;      /* Adam update in flight */
} piece;

/* One set of pinned buffers for a sub-group: master, exp_avg, exp_avg_sq. */
typedef struct sg_slot {
  void *buf[ST_KINDS];
  zo_swap_req_t *req[ST_KINDS]; /* reads or writes not yet waited */
  int sg;                    /* sub-group whose state it holds, or -1 */
} sg_slot;

/* offload_param nvme: one region of the write-back ring (see wb_alloc). */
typedef struct wb_entry {
  int param;                 /* tensor index */
  size_t off, n;             /* shard elements it holds */
  size_t ring_off, bytes;    /* bytes of the ring (n elements padded to the swap alignment) */
  int state;                 /* WB_FILLING (cast or Adam writing it), WB_WRITING (params.swp write), WB_DONE */
  zo_swap_req_t *req;
  zo_adam_task_t **task;     /* the Adam task filling it; NULL for a cast */
  int early;                 /* *task is set by on_grad_landed on the copy stream */
  int h2d;                   /* a host-to-device copy from it may be in flight (the tensor's ready event) */
  int hold;                  /* a fetch is about to copy from it: not freed meanwhile */
} wb_entry;

enum { WB_FILLING = 0, WB_WRITING = 1, WB_DONE = 2 };

typedef struct host_buf {
  void *ptr;
  size_t nbytes;
  int pinned;
} host_buf;

struct zo_engine {
  zo_config_t cfg;
  zo_device_t *dev;
  int own_dev;
  zo_comm_t *comm;
  int own_comm;
  int rank, world;
  zo_offload_device tier;
  zo_dtype wdtype;           /* working weights */
  zo_dtype gdtype;           /* gradients handed to grad_ready (bf16 with bf16.enabled, fp16 with fp16.enabled) */
  zo_dtype sdtype;           /* exp_avg and exp_avg_sq (zoffload.optimizer_state_dtype) */
  size_t esz[ST_KINDS];      /* bytes per element of each kind of state */
  int finalized;
  zo_adam_pool_t *pool;      /* persistent Adam threads, bound to physical cores */
  zo_adam_task_t **tasks;    /* one in-flight update per tensor (none, cpu) */
  int n_grads;               /* gradients handed over in this step */
  int *sg_order;             /* nvme: sub-groups in the order they are updated (their gradients complete) */
  int nv_pos_read;           /* nvme: position in sg_order of the next state read to issue */
  int nv_done;               /* nvme: sub-groups updated in this step */
  int nv_adam_ok;            /* nvme: updates may start (nv_hp is this step's) */
  int nv_in_step;            /* nvme: inside zo_engine_step(), which waits on every state read */
  zo_adam_hparams nv_hp;
  int dpu;                   /* zoffload.delayed_param_update: step N's Adam overlaps step N+1's compute */
  int dpu_pending;           /* Adam tasks of the last step still to be finished and published */
  host_buf grad_host2;       /* DPU: second gradient buffer (the last step's Adam reads the other) */
  int early_adam;            /* this step's updates start as gradients land (no clipping, no fp16, state on cpu/none) */
  zo_adam_hparams early_hp;  /* their hyperparameters (those zo_engine_step would use) */

  zo_param_t **params;
  int n_params, cap_params;

  zo_stream_t *copy_stream;
  zo_event_t *weights_ready;

  /* host buffers (cpu/nvme): gradients, working-dtype staging, cpu state */
  host_buf grad_host, stage_host, state_host[ST_KINDS];
  void *dev_block;           /* device: all working weights (+ state and grads for "none") */
  size_t dev_block_bytes;

  /* nvme */
  zo_swap_t *swap;           /* optimizer state (NULL unless offload_optimizer.device is nvme) */
  zo_swap_t *pswap;          /* working weights (offload_param nvme): e->swap when the paths agree */
  int own_pswap;
  void *wb_ring;             /* offload_param nvme: pinned write-back ring of new working weights */
  size_t wb_bytes;
  wb_entry *wb;              /* its live regions, oldest first: circular, wb_n from wb_first */
  int wb_first, wb_n, wb_cap;
  zo_swap_file_t *files[ST_KINDS];
  size_t swap_align;
  piece *pieces;
  int n_pieces;
  sub_group *sgs;
  int n_sgs;
  sg_slot *slots;
  int n_slots;
  size_t slot_el;            /* elements per slot buffer (largest sub-group) */

  /* optimizer state */
  int64_t step;              /* applied optimizer steps */
  double loss_scale;
  int64_t ls_iter, ls_last_overflow;
  int ls_hysteresis;

  /* parameter offload and the fetch coordinator */
  zo_offload_device ptier;   /* offload_param.device */
  host_buf param_host;       /* cpu: every tensor's working copy (pinned) */
  zo_swap_file_t *pfile;     /* nvme: params.swp, one padded extent per tensor */
  void **pstage;             /* nvme: offload_param.buffer_count pinned staging buffers */
  int n_pstage;
  size_t pstage_el;          /* elements per staging buffer */
  uint64_t *pstage_busy;     /* per staging buffer: tensor index + 1 while in use, else 0 */
  size_t live_el, inflight_el; /* device-held and in-flight working-copy elements */
  int *trace, trace_len, trace_valid, trace_pos, trace_warned; /* warned: once per engine */
  int trace_off;             /* zo_engine_set_trace(e, 0): fetches neither recorded nor prefetched for */
  int *rec, rec_len, rec_cap;
  int64_t fetch_clock;
  double fetch_wait_s;       /* compute blocked in zo_engine_fetch() since the last step */
  int64_t n_prefetch, n_demand;

  uint64_t nvme_read_bytes, nvme_write_bytes, h2d_bytes, d2h_bytes;
  double swap_wait_s;
  double copy_s;             /* queueing working-weight uploads */
};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

/* The i-th live region of the write-back ring, oldest first. */
static wb_entry *wb_at(const zo_engine_t *e, int i) { return &e->wb[(e->wb_first + i) % e->wb_cap]; }

static zo_status host_buf_alloc(host_buf *b, size_t nbytes, int pin) {
  b->nbytes = nbytes;
  if (nbytes == 0) return ZO_OK;
  zo_status st = zo_host_alloc(nbytes, pin, &b->ptr, &b->pinned);
  if (st != ZO_OK) return zo_error_prefix(st, "engine");
  return ZO_OK;
}

static void host_buf_free(host_buf *b) {
  zo_host_free(b->ptr, b->nbytes, b->pinned);
  memset(b, 0, sizeof *b);
}

/* ---------------------------------------------------------------- create */

zo_status zo_engine_create(const zo_config_t *cfg, zo_device_t *dev, zo_comm_t *comm, zo_engine_t **out) {
  if (!cfg || !out) return zo_error_set(ZO_ERR_INVALID_ARG, "engine: cfg and out must not be NULL");
  *out = NULL;
  const zo_offload_device tier = cfg->zero.offload_optimizer.device;
  if (tier != ZO_OFFLOAD_NONE && cfg->zero.stage < 1)
    return zo_error_set(ZO_ERR_CONFIG,
                        "zero_optimization.offload_optimizer.device: \"%s\" needs zero_optimization.stage >= 1, "
                        "got %d (as in DeepSpeed, optimizer offload is part of ZeRO)",
                        tier == ZO_OFFLOAD_CPU ? "cpu" : "nvme", cfg->zero.stage);
  if (cfg->fp16.enabled && cfg->bf16.enabled)
    return zo_error_set(ZO_ERR_CONFIG, "fp16.enabled and bf16.enabled are both true; choose one");

  zo_engine_t *e = calloc(1, sizeof *e);
  if (!e) return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "engine: out of host memory");
  zo_status st = ZO_OK;
  if (cfg->zoffload.optimizer_state_dtype != ZO_DTYPE_F32 && cfg->zoffload.optimizer_state_dtype != ZO_DTYPE_BF16) {
    free(e);
    return zo_error_set(ZO_ERR_CONFIG, "zoffload.optimizer_state_dtype: expected fp32 or bf16");
  }
  e->cfg = *cfg;
  e->tier = tier;
  e->wdtype = cfg->bf16.enabled ? ZO_DTYPE_BF16 : cfg->fp16.enabled ? ZO_DTYPE_F16 : ZO_DTYPE_F32;
  e->gdtype = e->wdtype; /* the model's gradients come in its working precision */
  e->sdtype = cfg->zoffload.optimizer_state_dtype == ZO_DTYPE_BF16 ? ZO_DTYPE_BF16 : ZO_DTYPE_F32;
  e->esz[ST_MASTER] = sizeof(float);
  e->esz[ST_EXP_AVG] = e->esz[ST_EXP_AVG_SQ] = zo_dtype_size(e->sdtype);
  zo_adam_pool_opts po = {.n_threads = cfg->zoffload.adam_threads, .numa_node = -1, .bind = 1,
                          .simd = ZO_SIMD_AUTO};
  ZO_CHECK_GOTO(zo_adam_pool_create(&po, &e->pool), st, fail);
  zo_info("Adam pool: %s", zo_adam_pool_describe(e->pool));

  e->ptier = cfg->zero.offload_param.device;
  e->dpu = cfg->zoffload.delayed_param_update;
  if (e->dpu && (tier != ZO_OFFLOAD_CPU || e->ptier != ZO_OFFLOAD_NONE)) {
    st = zo_error_set(ZO_ERR_CONFIG, "zoffload.delayed_param_update: needs zero_optimization.offload_optimizer.device "
                      "\"cpu\" and offload_param.device \"none\" (the ZeRO-Offload setting), got \"%s\" and \"%s\"",
                      zo_offload_device_name(tier), zo_offload_device_name(e->ptier));
    goto fail;
  }
  if (e->ptier != ZO_OFFLOAD_NONE && cfg->zero.stage != 3) {
    st = zo_error_set(ZO_ERR_CONFIG, "zero_optimization.offload_param.device: \"%s\" needs zero_optimization.stage 3, "
                      "got %d (parameters are partitioned and offloaded only in stage 3)",
                      e->ptier == ZO_OFFLOAD_CPU ? "cpu" : "nvme", cfg->zero.stage);
    goto fail;
  }
  if (dev) {
    e->dev = dev;
  } else {
    ZO_CHECK_GOTO(zo_device_create(ZO_DEVICE_HOST, 0, (size_t)cfg->zoffload.device_memory_limit, &e->dev), st, fail);
    e->own_dev = 1;
    if (cfg->zoffload.host_link_gbps > 0)
      ZO_CHECK_GOTO(zo_device_set_link_gbps(e->dev, cfg->zoffload.host_link_gbps), st, fail);
  }
  if (tier == ZO_OFFLOAD_NONE && !zo_device_host_addressable(e->dev)) {
    st = zo_error_set(ZO_ERR_UNSUPPORTED, "zero_optimization.offload_optimizer.device \"none\" on device '%s' needs a "
                      "device Adam kernel, which is not built yet; use \"cpu\" or \"nvme\"",
                      zo_device_name(e->dev));
    goto fail;
  }
  if (comm) {
    e->comm = comm;
  } else {
    ZO_CHECK_GOTO(zo_comm_create_self(&e->comm), st, fail);
    e->own_comm = 1;
  }
  e->rank = zo_comm_rank(e->comm);
  e->world = zo_comm_size(e->comm);
  if (e->world > 1) {
    st = zo_error_set(ZO_ERR_UNSUPPORTED, "engine: %d ranks on comm backend '%s': multi-rank gradient "
                      "reduce-scatter is not built yet", e->world, zo_comm_backend(e->comm));
    goto fail;
  }
  ZO_CHECK_GOTO(zo_stream_create(e->dev, &e->copy_stream), st, fail);
  ZO_CHECK_GOTO(zo_event_create(e->dev, &e->weights_ready), st, fail);

  if (tier == ZO_OFFLOAD_NVME || e->ptier == ZO_OFFLOAD_NVME) {
    zo_swap_opts so = {.block_size = (size_t)cfg->aio.block_size,
                       .queue_depth = (unsigned)cfg->aio.queue_depth,
                       .rank = e->rank,
                       .register_files = 1,
                       .sqpoll = cfg->zoffload.swap_sqpoll,
                       .sqpoll_idle_ms = 50, /* a polling kernel thread left spinning takes a core from Adam */
                       .checksum = cfg->zoffload.swap_checksum,
                       /* the disk keeps streaming between our calls (one per layer of compute) */
                       .progress_thread = 1};
    const char *opath = cfg->zero.offload_optimizer.nvme_path, *ppath = cfg->zero.offload_param.nvme_path;
    if (tier == ZO_OFFLOAD_NVME) {
      st = zo_swap_create(opath, &so, &e->swap);
      if (st != ZO_OK) {
        zo_error_prefix(st, "zero_optimization.offload_optimizer.nvme_path");
        goto fail;
      }
    }
    if (e->ptier == ZO_OFFLOAD_NVME) {
      if (e->swap && !strcmp(opath, ppath)) {
        e->pswap = e->swap; /* one private directory per rank and path */
      } else {
        if (!ppath[0]) {
          st = zo_error_set(ZO_ERR_CONFIG, "zero_optimization.offload_param.nvme_path: required when "
                                           "offload_param.device is \"nvme\"");
          goto fail;
        }
        st = zo_swap_create(ppath, &so, &e->pswap);
        if (st != ZO_OK) {
          zo_error_prefix(st, "zero_optimization.offload_param.nvme_path");
          goto fail;
        }
        e->own_pswap = 1;
      }
    }
    e->swap_align = zo_swap_alignment(e->swap ? e->swap : e->pswap);
    if (e->pswap && zo_swap_alignment(e->pswap) > e->swap_align) e->swap_align = zo_swap_alignment(e->pswap);
  }

  e->loss_scale = 1.0;
  if (cfg->fp16.enabled) {
    e->loss_scale = cfg->fp16.loss_scale > 0 ? cfg->fp16.loss_scale : ldexp(1.0, cfg->fp16.initial_scale_power);
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

static zo_status swap_wait(zo_engine_t *e, zo_swap_t *sw, zo_swap_req_t **req);

static zo_status nv_quiesce(zo_engine_t *e);
static zo_status nv_advance(zo_engine_t *e);
static zo_status slot_settle(zo_engine_t *e, sg_slot *sl, int wait, int *done);

void zo_engine_destroy(zo_engine_t *e) {
  if (!e) return;
  if (e->tasks) zo_engine_synchronize(e);
  if (e->copy_stream) zo_stream_synchronize(e->copy_stream);
  if (e->swap) nv_quiesce(e);
  for (int i = 0; e->tasks && i < e->n_params; i++)
    if (e->tasks[i]) zo_adam_task_wait(e->tasks[i], NULL);
  for (int q = 0; q < e->n_pieces; q++)
    if (e->pieces[q].task) zo_adam_task_wait(e->pieces[q].task, NULL);
  zo_adam_pool_destroy(e->pool);
  free(e->tasks);
  for (int s = 0; s < e->n_slots; s++)
    for (int k = 0; k < ST_KINDS; k++) zo_host_free(e->slots[s].buf[k], e->slot_el * e->esz[k], 1);
  free(e->slots);
  free(e->pieces);
  free(e->sgs);
  free(e->sg_order);
  /* Parameter offload: in-flight reads, staging buffers, device copies, events. */
  for (int i = 0; i < e->n_params; i++) {
    zo_param_t *p = e->params[i];
    if (p->read_req) zo_swap_wait(e->pswap, p->read_req);
    if (e->ptier != ZO_OFFLOAD_NONE && p->weights) zo_device_free(e->dev, p->weights);
    zo_event_destroy(p->ready);
  }
  for (int i = 0; i < e->wb_n; i++) {
    wb_entry *w = wb_at(e, i);
    if (w->state == WB_WRITING) zo_swap_wait(e->pswap, w->req);
  }
  free(e->wb);
  if (e->wb_ring) zo_host_free(e->wb_ring, e->wb_bytes, 1);
  for (int i = 0; i < e->n_pstage; i++) zo_host_free(e->pstage[i], e->pstage_el * zo_dtype_size(e->wdtype), 1);
  free(e->pstage);
  free(e->pstage_busy);
  free(e->trace);
  free(e->rec);
  host_buf_free(&e->param_host);
  if (e->own_pswap) zo_swap_destroy(e->pswap);
  zo_swap_destroy(e->swap); /* closes and removes the files and the private directory */
  host_buf_free(&e->grad_host);
  host_buf_free(&e->grad_host2);
  host_buf_free(&e->stage_host);
  for (int k = 0; k < ST_KINDS; k++) host_buf_free(&e->state_host[k]);
  if (e->dev_block) zo_device_free(e->dev, e->dev_block);
  zo_event_destroy(e->weights_ready);
  zo_stream_destroy(e->copy_stream);
  for (int i = 0; i < e->n_params; i++) free(e->params[i]);
  free(e->params);
  if (e->own_comm) zo_comm_destroy(e->comm);
  if (e->own_dev) zo_device_destroy(e->dev);
  free(e);
}

/* ---------------------------------------------------------------- registry */

zo_status zo_engine_register_param(zo_engine_t *e, const char *name, size_t n_elems, zo_param_t **out) {
  if (!e || !name || !out) return zo_error_set(ZO_ERR_INVALID_ARG, "register_param: NULL argument");
  if (e->finalized)
    return zo_error_set(ZO_ERR_INVALID_USAGE, "register_param '%s': the engine is already finalized", name);
  if (!name[0] || strlen(name) >= sizeof((zo_param_t *)0)->name)
    return zo_error_set(ZO_ERR_INVALID_ARG, "register_param: name '%s' must be 1..127 bytes", name);
  if (n_elems == 0) return zo_error_set(ZO_ERR_INVALID_ARG, "register_param '%s': n_elems is 0", name);
  for (int i = 0; i < e->n_params; i++)
    if (!strcmp(e->params[i]->name, name))
      return zo_error_set(ZO_ERR_INVALID_ARG, "register_param: tensor '%s' is already registered", name);
  if (e->n_params == e->cap_params) {
    int cap = e->cap_params ? 2 * e->cap_params : 64;
    zo_param_t **np = realloc(e->params, cap * sizeof *np);
    if (!np) return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "register_param '%s': out of host memory", name);
    e->params = np;
    e->cap_params = cap;
  }
  zo_param_t *p = calloc(1, sizeof *p);
  if (!p) return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "register_param '%s': out of host memory", name);
  snprintf(p->name, sizeof p->name, "%s", name);
  p->index = e->n_params;
  p->eng = e;
  p->n = n_elems;
  size_t per = (n_elems + (size_t)e->world - 1) / (size_t)e->world;
  size_t lo = per * (size_t)e->rank;
  p->shard_off = lo < n_elems ? lo : n_elems;
  p->shard_n = lo < n_elems ? (n_elems - lo < per ? n_elems - lo : per) : 0;
  e->params[e->n_params++] = p;
  *out = p;
  return ZO_OK;
}

const char *zo_engine_param_name(const zo_param_t *p) { return p ? p->name : ""; }
size_t zo_engine_param_numel(const zo_param_t *p) { return p ? p->n : 0; }
zo_dtype zo_engine_working_dtype(const zo_engine_t *e) { return e->wdtype; }
zo_dtype zo_engine_grad_dtype(const zo_engine_t *e) { return e->gdtype; }
double zo_engine_loss_scale(const zo_engine_t *e) { return e->loss_scale; }

/* ---------------------------------------------------------------- finalize */

/* Elements per alignment unit of the narrowest kind of state: extents padded
 * to a multiple of it start and end aligned in every state file. */
static size_t extent_unit(const zo_engine_t *e) {
  size_t narrow = e->esz[ST_EXP_AVG] < e->esz[ST_MASTER] ? e->esz[ST_EXP_AVG] : e->esz[ST_MASTER];
  if (e->ptier == ZO_OFFLOAD_NVME && zo_dtype_size(e->wdtype) < narrow) narrow = zo_dtype_size(e->wdtype);
  return e->swap_align / narrow;
}

/* Cut the shards into pieces of at most sub_group_size elements and pack
 * consecutive pieces into sub-groups; each sub-group is one contiguous,
 * aligned range in every state file. */
static zo_status plan_sub_groups(zo_engine_t *e) {
  const size_t unit = extent_unit(e);
  size_t sgs = (size_t)e->cfg.zero.sub_group_size;
  sgs = round_up(sgs < unit ? unit : sgs, unit);
  int cap = 0;
  for (int i = 0; i < e->n_params; i++) cap += (int)((e->params[i]->shard_n + sgs - 1) / sgs);
  e->pieces = calloc(cap ? cap : 1, sizeof *e->pieces);
  e->sgs = calloc(cap ? cap : 1, sizeof *e->sgs);
  if (!e->pieces || !e->sgs) return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "engine: out of host memory");
  uint64_t file_el = 0;
  for (int i = 0; i < e->n_params; i++) {
    zo_param_t *p = e->params[i];
    p->file_el = file_el;
    for (size_t off = 0; off < p->shard_n; off += sgs) {
      piece *pc = &e->pieces[e->n_pieces++];
      pc->p = p;
      pc->off = off;
      pc->n = p->shard_n - off < sgs ? p->shard_n - off : sgs;
      pc->file_el = file_el + off;
    }
    file_el += round_up(p->shard_n, unit);
  }
  /* Greedy packing: a sub-group holds whole pieces whose padded extents fit in sub_group_size elements. */
  size_t max_el = 0;
  for (int k = 0; k < e->n_pieces;) {
    sub_group *g = &e->sgs[e->n_sgs++];
    g->first_piece = k;
    g->file_el = e->pieces[k].file_el;
    uint64_t end = g->file_el;
    do {
      end = e->pieces[k].file_el + round_up(e->pieces[k].n, unit);
      k++;
    } while (k < e->n_pieces && e->pieces[k].file_el + round_up(e->pieces[k].n, unit) - g->file_el <= sgs);
    g->n_pieces = k - g->first_piece;
    g->n_el = end - g->file_el;
    if (g->n_el > max_el) max_el = g->n_el;
  }
  e->slot_el = max_el;
  return ZO_OK;
}

zo_status zo_engine_finalize(zo_engine_t *e) {
  if (!e) return zo_error_set(ZO_ERR_INVALID_ARG, "finalize: engine is NULL");
  if (e->finalized) return zo_error_set(ZO_ERR_INVALID_USAGE, "finalize: already finalized");
  if (e->n_params == 0) return zo_error_set(ZO_ERR_INVALID_USAGE, "finalize: no parameter was registered");
  zo_status st;
  const size_t wsz = zo_dtype_size(e->wdtype), gsz = zo_dtype_size(e->gdtype);
  const int pin = e->cfg.zero.offload_optimizer.pin_memory;
  e->tasks = calloc(e->n_params, sizeof *e->tasks);
  if (!e->tasks) return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "engine: out of host memory");

  /* Device block: working weights unless they are offloaded; plus master,
   * state and gradients for offload_optimizer "none". Regions 256-byte aligned. */
  const int pres = e->ptier == ZO_OFFLOAD_NONE; /* working weights resident in device memory */
  size_t dev = 0, shard_total = 0, largest = 0;
  for (int i = 0; i < e->n_params; i++) {
    zo_param_t *p = e->params[i];
    if (pres) dev += round_up(p->n * wsz, 256);
    if (e->tier == ZO_OFFLOAD_NONE) {
      for (int k = 0; k < ST_KINDS; k++) dev += round_up(p->shard_n * e->esz[k], 256);
      dev += round_up(p->shard_n * gsz, 256);
    }
    p->flat_off = shard_total;
    shard_total += p->shard_n;
    if (p->n > largest) largest = p->n;
  }
  if (dev) {
    st = zo_device_malloc(e->dev, dev, &e->dev_block);
    if (st != ZO_OK) {
      return zo_error_prefix(st, "engine: device memory for %d tensors (%s%s%s); raise zoffload.device_memory_limit "
                             "or offload more", e->n_params, pres ? "working weights" : "",
                             pres && e->tier == ZO_OFFLOAD_NONE ? ", " : "",
                             e->tier == ZO_OFFLOAD_NONE ? "master weights, Adam state and gradients" : "");
    }
  }
  e->dev_block_bytes = dev;
  char *d = e->dev_block;
  for (int i = 0; i < e->n_params; i++) {
    zo_param_t *p = e->params[i];
    p->stage = -1;
    if (pres) {
      p->weights = d;
      d += round_up(p->n * wsz, 256);
      p->pstate = P_RESIDENT;
    }
    if (e->tier == ZO_OFFLOAD_NONE) {
      for (int k = 0; k < ST_KINDS; k++) {
        p->state[k] = d;
        d += round_up(p->shard_n * e->esz[k], 256);
      }
      p->grad = d;
      d += round_up(p->shard_n * gsz, 256);
    }
  }

  /* Parameter offload: every tensor must fit in device memory and in the live budget on its own. */
  if (!pres) {
    size_t used = 0, peak = 0, limit = 0;
    zo_device_mem_info(e->dev, &used, &peak, &limit);
    if (largest * wsz > limit - (used < limit ? used : limit))
      return zo_error_set(ZO_ERR_CONFIG, "zoffload.device_memory_limit: the largest tensor needs %zu bytes of device "
                          "memory but only %zu of %zu are free; raise it to at least %zu", largest * wsz,
                          limit - used, limit, used + largest * wsz);
    if ((int64_t)largest > e->cfg.zero.stage3_max_live_parameters)
      return zo_error_set(ZO_ERR_CONFIG, "zero_optimization.stage3_max_live_parameters: %lld elements cannot hold the "
                          "largest tensor (%zu elements); raise it to at least %zu",
                          (long long)e->cfg.zero.stage3_max_live_parameters, largest, largest);
    for (int i = 0; i < e->n_params; i++) {
      zo_param_t *p = e->params[i];
      p->persistent = (int64_t)p->n <= e->cfg.zero.stage3_param_persistence_threshold;
      ZO_CHECK(zo_event_create(e->dev, &p->ready));
    }
  }

  /* Host: gradients (landing buffer of the device-to-host copies); staging of
   * the working copy (upload source, or nvme write source with padded extents). */
  size_t pw_total = 0; /* elements of the host-tier working copy layout */
  if (e->ptier == ZO_OFFLOAD_NVME) e->swap_align = e->swap_align ? e->swap_align : 4096;
  for (int i = 0; i < e->n_params; i++) {
    zo_param_t *p = e->params[i];
    p->pw_el = pw_total;
    pw_total += e->ptier == ZO_OFFLOAD_NVME ? round_up(p->n, extent_unit(e)) : p->n;
  }
  if (e->tier != ZO_OFFLOAD_NONE) {
    ZO_CHECK(host_buf_alloc(&e->grad_host, shard_total * gsz, pin || e->tier == ZO_OFFLOAD_NVME));
    if (e->dpu) ZO_CHECK(host_buf_alloc(&e->grad_host2, shard_total * gsz, 1));
    if (e->tier == ZO_OFFLOAD_CPU)
      for (int k = 0; k < ST_KINDS; k++) ZO_CHECK(host_buf_alloc(&e->state_host[k], shard_total * e->esz[k], pin));
    for (int i = 0; i < e->n_params; i++) {
      zo_param_t *p = e->params[i];
      p->host_off = p->flat_off;
      p->grad = (char *)e->grad_host.ptr + p->host_off * gsz;
      if (e->tier == ZO_OFFLOAD_CPU)
        for (int k = 0; k < ST_KINDS; k++) p->state[k] = (char *)e->state_host[k].ptr + p->host_off * e->esz[k];
    }
  }
  if (pres && e->tier != ZO_OFFLOAD_NONE) ZO_CHECK(host_buf_alloc(&e->stage_host, shard_total * wsz, 1));
  if (e->ptier == ZO_OFFLOAD_CPU)
    ZO_CHECK(host_buf_alloc(&e->param_host, pw_total * wsz, e->cfg.zero.offload_param.pin_memory));
  if (e->ptier == ZO_OFFLOAD_NVME) {
    st = zo_swap_file_create(e->pswap, "params.swp", pw_total * wsz, &e->pfile);
    if (st != ZO_OK) return zo_error_prefix(st, "engine: working weights file");
    size_t want = round_up(largest, extent_unit(e));
    if ((int64_t)largest > e->cfg.zero.offload_param.buffer_size)
      return zo_error_set(ZO_ERR_CONFIG, "zero_optimization.offload_param.buffer_size: %lld elements cannot hold the "
                          "largest tensor (%zu elements); raise it to at least %zu",
                          (long long)e->cfg.zero.offload_param.buffer_size, largest, largest);
    e->pstage_el = want;
    e->n_pstage = e->cfg.zero.offload_param.buffer_count > 0 ? e->cfg.zero.offload_param.buffer_count : 1;
    e->pstage = calloc(e->n_pstage, sizeof *e->pstage);
    e->pstage_busy = calloc(e->n_pstage, sizeof *e->pstage_busy);
    if (!e->pstage || !e->pstage_busy) return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "engine: out of host memory");
    for (int b = 0; b < e->n_pstage; b++) {
      int pinned;
      st = zo_host_alloc(e->pstage_el * wsz, 1, &e->pstage[b], &pinned);
      if (st != ZO_OK)
        return zo_error_prefix(st, "engine: offload_param staging buffer %d of %d (%zu bytes; lower "
                               "zero_optimization.offload_param.buffer_count)", b + 1, e->n_pstage, e->pstage_el * wsz);
    }
  }

  if (e->tier == ZO_OFFLOAD_NVME) {
    ZO_CHECK(plan_sub_groups(e));
    const sub_group *last = &e->sgs[e->n_sgs - 1];
    const uint64_t file_el = last->file_el + last->n_el;
    for (int k = 0; k < ST_KINDS; k++) {
      st = zo_swap_file_create(e->swap, k_state_file[k], file_el * e->esz[k], &e->files[k]);
      if (st != ZO_OK) return zo_error_prefix(st, "engine: optimizer state file");
    }
    int nbuf = e->cfg.zero.offload_optimizer.buffer_count;
    if (nbuf < 1) nbuf = 1;
    if (nbuf > e->n_sgs) nbuf = e->n_sgs;
    e->slots = calloc(nbuf, sizeof *e->slots);
    e->sg_order = calloc(e->n_sgs, sizeof *e->sg_order);
    if (!e->slots || !e->sg_order) return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "engine: out of host memory");
    e->n_slots = nbuf;
    for (int s = 0; s < nbuf; s++) e->slots[s].sg = -1;
    for (int i = 0; i < e->n_sgs; i++) { /* first step: backward runs in reverse registration order */
      e->sg_order[i] = e->n_sgs - 1 - i;
      e->sgs[e->n_sgs - 1 - i].pos = i;
      e->sgs[i].slot = -1;
    }
    for (int s = 0; s < nbuf; s++) {
      for (int k = 0; k < ST_KINDS; k++) {
        int pinned;
        st = zo_host_alloc(e->slot_el * e->esz[k], 1, &e->slots[s].buf[k], &pinned);
        if (st != ZO_OK)
          return zo_error_prefix(st, "engine: sub-group buffer %d of %d (%zu elements; lower "
                                 "zero_optimization.sub_group_size or offload_optimizer.buffer_count)",
                                 s + 1, nbuf, e->slot_el);
      }
    }
    /* Register the sub-group buffers with the ring: their reads and writes go out as fixed-buffer I/O. */
    struct iovec iov[3 * 64];
    unsigned n_iov = 0;
    for (int s = 0; s < nbuf && n_iov + ST_KINDS <= sizeof iov / sizeof iov[0]; s++)
      for (int k = 0; k < ST_KINDS; k++)
        iov[n_iov++] = (struct iovec){.iov_base = e->slots[s].buf[k], .iov_len = e->slot_el * e->esz[k]};
    if (zo_swap_register_buffers(e->swap, iov, n_iov) != ZO_OK)
      zo_warn("swap: cannot register %u sub-group buffers with io_uring (%s); using unregistered I/O", n_iov,
              zo_last_error());
    zo_info("nvme optimizer state: %d tensors in %d sub-groups of up to %zu elements, %d buffer sets, "
            "swap: %s", e->n_params, e->n_sgs, e->slot_el, nbuf, zo_swap_describe(e->swap));
  }
  if (e->ptier == ZO_OFFLOAD_NVME) {
    /* The write-back ring: offload_param.buffer_count tensors of the largest
     * size, and at least two of them and two sub-groups (bytes of the working dtype). */
    size_t el = (size_t)(e->n_pstage > 2 ? e->n_pstage : 2) * e->pstage_el;
    if (e->tier == ZO_OFFLOAD_NVME && 2 * e->slot_el > el) el = 2 * e->slot_el;
    e->wb_bytes = round_up(el * wsz, e->swap_align);
    int pinned;
    st = zo_host_alloc(e->wb_bytes, 1, &e->wb_ring, &pinned);
    if (st != ZO_OK)
      return zo_error_prefix(st, "engine: offload_param write-back ring (%zu bytes; lower "
                             "zero_optimization.offload_param.buffer_count or buffer_size)", e->wb_bytes);
  }
  e->finalized = 1;
  return ZO_OK;
}

/* ---------------------------------------------------------------- working weights */

/* Where the working-dtype copy of shard elements [off, ...) is written:
 * - parameters offloaded to cpu: the host tier itself (pinned param_host);
 * - parameters offloaded to nvme: a region of the write-back ring, which is
 *   then written to params.swp;
 * - parameters resident, state in device memory: the device tensor itself;
 * - parameters resident, state on the host: the shard's own region of the
 *   pinned staging buffer, so queued uploads never see their source
 *   overwritten within a step. */
static void *working_dst(zo_engine_t *e, zo_param_t *p, size_t off) {
  const size_t wsz = zo_dtype_size(e->wdtype);
  if (e->ptier == ZO_OFFLOAD_CPU) return (char *)e->param_host.ptr + (p->pw_el + p->shard_off + off) * wsz;
  if (e->ptier == ZO_OFFLOAD_NVME) return p->wb_ptr; /* wb_alloc() for [off, ...) came just before */
  if (e->tier == ZO_OFFLOAD_NONE) return (char *)p->weights + (p->shard_off + off) * wsz;
  return (char *)e->stage_host.ptr + (p->host_off + off) * wsz;
}

static void drop_device_copy(zo_engine_t *e, zo_param_t *p);

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
static zo_status finish_adam(zo_engine_t *e, zo_adam_task_t **task, zo_param_t *p, size_t off, size_t n);
static zo_status wb_settle(zo_engine_t *e, wb_entry *w) {
  zo_param_t *p = e->params[w->param];
  if (w->state == WB_FILLING) {
    if (w->early) ZO_CHECK(zo_stream_synchronize(e->copy_stream)); /* its Adam is queued when the gradient lands */
    if (w->early && p->landed_st != ZO_OK) return p->landed_st;
    if (!w->task || !*w->task)
      return zo_error_set(ZO_ERR_INVALID_USAGE, "engine: write-back region of '%s' [%zu, %zu) has no writer",
                          p->name, w->off, w->off + w->n); /* a bug: regions are filled right after allocation */
    ZO_CHECK(finish_adam(e, w->task, p, w->off, w->n)); /* queue_upload() issues the write */
  }
  if (w->state == WB_WRITING) {
    zo_status st = swap_wait(e, e->pswap, &w->req);
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
static zo_status wb_reap(zo_engine_t *e) {
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
 * p->wb_ptr, which working_dst() returns. */
static zo_status wb_alloc(zo_engine_t *e, zo_param_t *p, size_t off, size_t n, zo_adam_task_t **task, int early) {
  if (e->ptier != ZO_OFFLOAD_NVME) return ZO_OK;
  const size_t need = round_up(n * zo_dtype_size(e->wdtype), e->swap_align);
  ZO_CHECK(wb_reap(e));
  int64_t at;
  while ((at = wb_fit(e, need)) < 0) {
    if (!e->wb_n)
      return zo_error_set(ZO_ERR_INVALID_USAGE, "engine: '%s' needs %zu bytes of write-back ring of %zu", p->name, need,
                          e->wb_bytes); /* a bug: the ring is sized for the largest tensor */
    ZO_CHECK(wb_settle(e, &e->wb[e->wb_first]));
    ZO_CHECK(wb_reap(e));
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
static wb_entry *wb_find(zo_engine_t *e, const zo_param_t *p, size_t off, int state) {
  for (int i = e->wb_n - 1; i >= 0; i--) {
    wb_entry *w = wb_at(e, i);
    if (w->param == p->index && w->off == off && (state < 0 || w->state == state)) return w;
  }
  return NULL;
}

/* Wait the params.swp writes of @p in flight (all of them, or those that
 * overlap [off, off + n) when n > 0): before p is read back, or written again. */
static zo_status wb_drain(zo_engine_t *e, const zo_param_t *p, size_t off, size_t n) {
  for (int i = 0; i < e->wb_n; i++) {
    wb_entry *w = wb_at(e, i);
    if (w->param != p->index || w->state != WB_WRITING) continue;
    if (n && (w->off >= off + n || off >= w->off + w->n)) continue;
    ZO_CHECK(wb_settle(e, w));
  }
  return ZO_OK;
}

/* Publish new working weights of shard elements [off, off + n) written at
 * working_dst(): queue the host-to-device copy when a device copy exists
 * (with one rank this is the whole all-gather), and for nvme parameters
 * queue the write of the padded range to params.swp. */
static zo_status queue_upload(zo_engine_t *e, zo_param_t *p, size_t off, size_t n) {
  if (n == 0 || (e->ptier == ZO_OFFLOAD_NONE && e->tier == ZO_OFFLOAD_NONE)) return ZO_OK;
  const size_t wsz = zo_dtype_size(e->wdtype);
  double t0 = now_s();
  zo_status st = ZO_OK;
  const void *src = e->ptier == ZO_OFFLOAD_NVME ? NULL : working_dst(e, p, off);
  wb_entry *w = NULL;
  if (e->ptier == ZO_OFFLOAD_NVME) {
    w = wb_find(e, p, off, WB_FILLING);
    if (!w)
      return zo_error_set(ZO_ERR_INVALID_USAGE, "engine: no write-back region for '%s' at %zu", p->name, off); /* a bug */
    src = (char *)e->wb_ring + w->ring_off;
    /* The last write of this range must be on disk first: two writes in flight
     * to one range may land in either order. (Long done, in practice.) */
    st = wb_drain(e, p, off, n);
    const uint64_t el = p->pw_el + p->shard_off + off; /* w->bytes stays inside the tensor's padded extent */
    if (st == ZO_OK) st = zo_swap_submit_write(e->pswap, e->pfile, el * wsz, src, w->bytes, &w->req);
    if (st == ZO_OK) w->state = WB_WRITING;
    e->nvme_write_bytes += w->bytes;
  }
  if (st == ZO_OK && p->weights && p->pstate == P_RESIDENT && e->ptier != ZO_OFFLOAD_NONE && !p->persistent &&
      !p->in_use) {
    drop_device_copy(e, p); /* stale: the prefetcher brings the new weights back in trace order */
  } else if (st == ZO_OK && p->weights && p->pstate == P_RESIDENT) {
    st = zo_memcpy_async(e->copy_stream, (char *)p->weights + (p->shard_off + off) * wsz, src, n * wsz, ZO_COPY_H2D);
    if (st == ZO_OK && p->ready) st = zo_event_record(p->ready, e->copy_stream); /* fetch waits for the refresh */
    if (w) w->h2d = 1;
    e->h2d_bytes += n * wsz;
  }
  e->copy_s += now_s() - t0;
  return st;
}

/* Working weights from fp32 master values (load time; steps fuse this into Adam). */
static zo_status upload_shard(zo_engine_t *e, zo_param_t *p, size_t off, size_t n, const float *master) {
  ZO_CHECK(wb_alloc(e, p, off, n, NULL, 0));
  ZO_CHECK(zo_cast(working_dst(e, p, off), e->wdtype, master, ZO_DTYPE_F32, n, zo_adam_pool_threads(e->pool)));
  return queue_upload(e, p, off, n);
}

/* Queue a read or write of elements [el, el + n_el) of state kind k. */
static zo_status swap_io(zo_engine_t *e, int write, int k, uint64_t el, void *buf, uint64_t n_el, zo_swap_req_t **req) {
  const uint64_t off = el * e->esz[k], nbytes = n_el * e->esz[k];
  /* Inside zo_engine_step() the caller waits for every read: ahead of queued write-backs. */
  zo_status st = write        ? zo_swap_submit_write(e->swap, e->files[k], off, buf, nbytes, req)
                 : e->nv_in_step ? zo_swap_submit_read_urgent(e->swap, e->files[k], off, buf, nbytes, req)
                                 : zo_swap_submit_read(e->swap, e->files[k], off, buf, nbytes, req);
  if (write) e->nvme_write_bytes += nbytes;
  else e->nvme_read_bytes += nbytes;
  return st;
}

/* Wait *req on @sw (optimizer state or params.swp), timed as exposed swap wait; *req becomes NULL. */
static zo_status swap_wait(zo_engine_t *e, zo_swap_t *sw, zo_swap_req_t **req) {
  double t0 = now_s();
  zo_status st = zo_swap_wait(sw, *req);
  *req = NULL;
  e->swap_wait_s += now_s() - t0;
  return st;
}

/* Elements of a padded extent for n elements (nvme layout). */
static uint64_t padded_el(const zo_engine_t *e, size_t n) { return round_up(n, extent_unit(e)); }

zo_status zo_engine_load_param(zo_engine_t *e, zo_param_t *p, const float *values) {
  if (!e || !p || !values) return zo_error_set(ZO_ERR_INVALID_ARG, "load_param: NULL argument");
  if (!e->finalized) return zo_error_set(ZO_ERR_INVALID_USAGE, "load_param '%s': call zo_engine_finalize() first", p->name);
  const float *src = values + p->shard_off;
  zo_status st;
  if (e->tier != ZO_OFFLOAD_NVME) {
    memcpy(p->state[ST_MASTER], src, p->shard_n * sizeof(float));
    memset(p->state[ST_EXP_AVG], 0, p->shard_n * e->esz[ST_EXP_AVG]); /* all-zero bits are 0.0 in fp32 and bf16 */
    memset(p->state[ST_EXP_AVG_SQ], 0, p->shard_n * e->esz[ST_EXP_AVG_SQ]);
    ZO_CHECK(upload_shard(e, p, 0, p->shard_n, p->state[ST_MASTER]));
  } else {
    /* Stream the shard through slot 0 in slot-sized chunks: master from values, state zeros. */
    ZO_CHECK(nv_quiesce(e));
    sg_slot *sl = &e->slots[0];
    for (size_t off = 0; off < p->shard_n; off += e->slot_el) {
      size_t n = p->shard_n - off < e->slot_el ? p->shard_n - off : e->slot_el;
      uint64_t n_el = padded_el(e, n);
      for (int k = 0; k < ST_KINDS; k++) memset(sl->buf[k], 0, n_el * e->esz[k]);
      memcpy(sl->buf[ST_MASTER], src + off, n * sizeof(float));
      for (int k = 0; k < ST_KINDS; k++) ZO_CHECK(swap_io(e, 1, k, p->file_el + off, sl->buf[k], n_el, &sl->req[k]));
      int done;
      st = slot_settle(e, sl, 1, &done);
      if (st != ZO_OK) return zo_error_prefix(st, "load_param '%s'", p->name);
      /* The cast goes to this chunk's own staging region, so the slot is free again at once. */
      ZO_CHECK(upload_shard(e, p, off, n, sl->buf[ST_MASTER]));
    }
  }
  ZO_CHECK(zo_event_record(e->weights_ready, e->copy_stream));
  return ZO_OK;
}

/* ---------------------------------------------------------------- fetch coordinator */

/* Drop a released tensor's device copy (parameter offload only). */
static void drop_device_copy(zo_engine_t *e, zo_param_t *p) {
  /* A refresh of its new weights may still be queued on the copy stream (an
   * update that finished while compute held the tensor): let it run first. */
  if (p->ready) zo_event_synchronize(p->ready);
  zo_device_free(e->dev, p->weights);
  p->weights = NULL;
  p->pstate = P_HOST;
  e->live_el -= p->n;
}

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
  drop_device_copy(e, victim);
  return 1;
}

/* The nvme read of q's working copy is done (or is waited for here): start
 * its host-to-device copy from the staging buffer. */
static zo_status finish_read(zo_engine_t *e, zo_param_t *q) {
  const size_t wsz = zo_dtype_size(e->wdtype);
  zo_status st = swap_wait(e, e->pswap, &q->read_req);
  if (st != ZO_OK) return zo_error_prefix(st, "fetch '%s'", q->name);
  ZO_CHECK(zo_memcpy_async(e->copy_stream, q->weights, e->pstage[q->stage], q->n * wsz, ZO_COPY_H2D));
  ZO_CHECK(zo_event_record(q->ready, e->copy_stream));
  e->h2d_bytes += q->n * wsz;
  q->pstate = P_COPYING;
  return ZO_OK;
}

/* Position in the trace, at or after the current one, where tensor @idx is
 * fetched next; INT_MAX when not again in this step. */
static int next_use(const zo_engine_t *e, int idx) {
  for (int j = e->trace_pos; j < e->trace_len; j++)
    if (e->trace[j] == idx) return j;
  return INT_MAX;
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
    int u = next_use(e, q->index);
    if (u > far) far = u, victim = q;
  }
  if (!victim) return 0;
  drop_device_copy(e, victim);
  return 1;
}

/* q's host-to-device copy has landed: free its staging buffer. */
static void copy_landed(zo_engine_t *e, zo_param_t *q) {
  if (q->stage >= 0) e->pstage_busy[q->stage] = 0;
  q->stage = -1;
  q->pstate = P_RESIDENT;
  e->inflight_el -= q->n;
}

/* Move in-flight fetches forward without blocking: a finished nvme read
 * starts its host-to-device copy; a finished copy frees its staging buffer. */
static zo_status pump(zo_engine_t *e) {
  ZO_CHECK(wb_reap(e)); /* finished params.swp writes free their write-back regions */
  for (int i = 0; i < e->n_params; i++) {
    zo_param_t *p = e->params[i];
    int done = 0;
    if (p->pstate == P_READING) {
      ZO_CHECK(zo_swap_poll(e->pswap, p->read_req, &done));
      if (done) ZO_CHECK(finish_read(e, p));
    }
    if (p->pstate == P_COPYING) {
      ZO_CHECK(zo_event_query(p->ready, &done));
      if (done) copy_landed(e, p);
    }
  }
  return ZO_OK;
}

/* A free nvme staging buffer, or -1. With @wait, completes the oldest
 * in-flight fetch that holds one instead of giving up. */
static zo_status free_stage(zo_engine_t *e, int wait, int *b) {
  *b = -1;
  ZO_CHECK(pump(e));
  for (int k = 0; k < e->n_pstage; k++)
    if (!e->pstage_busy[k]) {
      *b = k;
      return ZO_OK;
    }
  if (!wait) return ZO_OK;
  zo_param_t *q = NULL; /* every buffer is held by a fetch in flight: finish the one issued first */
  for (int k = 0; k < e->n_pstage; k++) {
    zo_param_t *c = e->params[e->pstage_busy[k] - 1];
    if (!q || c->last_use < q->last_use) q = c;
  }
  if (q->pstate == P_READING) ZO_CHECK(finish_read(e, q));
  ZO_CHECK(zo_event_synchronize(q->ready));
  *b = q->stage;
  copy_landed(e, q);
  return ZO_OK;
}

static zo_status settle_fetches(zo_engine_t *e);

/* A device buffer for @p's working copy in p->weights (*got = 1). A prefetch
 * of trace position @pos may evict only copies needed later than @pos and
 * gives up (*got = 0) when that finds no room; a demand fetch evicts LRU and
 * waits for prefetches in flight instead. */
static zo_status device_copy_alloc(zo_engine_t *e, zo_param_t *p, int demand, int pos, int *got) {
  const size_t wsz = zo_dtype_size(e->wdtype);
  *got = 0;
  for (;;) {
    zo_status st = zo_device_malloc(e->dev, p->n * wsz, &p->weights);
    if (st == ZO_OK) break;
    p->weights = NULL;
    if (st != ZO_ERR_OUT_OF_MEMORY) return st;
    if (!demand) {
      if (evict_for_prefetch(e, pos)) continue;
      return ZO_OK;
    }
    if (evict_one(e)) continue;
    if (e->inflight_el) { /* prefetches hold the room: let them land, then they can be evicted */
      ZO_CHECK(settle_fetches(e));
      if (evict_one(e)) continue;
    }
    return zo_error_prefix(st, "fetch '%s' (%zu bytes): every device copy is in use; raise "
                           "zoffload.device_memory_limit or release tensors sooner", p->name, p->n * wsz);
  }
  *got = 1;
  return ZO_OK;
}

/* Start bringing @p's working copy to the device: device buffer, then (nvme)
 * a read into a staging buffer or (cpu) the host-to-device copy. A prefetch
 * of trace position @pos may evict only copies needed later than @pos, and
 * returns ZO_OK with *started = 0 when it finds no room (device memory or
 * staging buffers); a demand fetch evicts and waits instead. */
static zo_status start_fetch(zo_engine_t *e, zo_param_t *p, int demand, int pos, int *started) {
  const size_t wsz = zo_dtype_size(e->wdtype);
  *started = 0;
  int b = -1;
  /* nvme: while the tensor's new weights are still being written to
   * params.swp, its write-back source in host memory is the freshest copy:
   * copy from there, no read (this is what lets the next step's first layers,
   * updated last, start without a write-then-read round trip). */
  wb_entry *fw = e->ptier == ZO_OFFLOAD_NVME && p->shard_n == p->n ? wb_find(e, p, 0, -1) : NULL;
  const int forward = fw && fw->state != WB_FILLING && fw->n == p->n;
  if (forward) fw->hold = 1; /* making device room below may reap regions */
  if (e->ptier == ZO_OFFLOAD_NVME && !forward) {
    ZO_CHECK(free_stage(e, demand, &b));
    if (b < 0) return ZO_OK;
  }
  int got = 0;
  zo_status dst = device_copy_alloc(e, p, demand, pos, &got);
  if (forward) fw->hold = 0;
  if (dst != ZO_OK || !got) return dst;
  e->live_el += p->n;
  e->inflight_el += p->n;
  p->last_use = ++e->fetch_clock;
  const void *host_src = e->ptier == ZO_OFFLOAD_CPU ? (char *)e->param_host.ptr + p->pw_el * wsz
                         : forward ? (char *)e->wb_ring + fw->ring_off : NULL;
  if (host_src) {
    ZO_CHECK(zo_memcpy_async(e->copy_stream, p->weights, host_src, p->n * wsz, ZO_COPY_H2D));
    ZO_CHECK(zo_event_record(p->ready, e->copy_stream));
    if (forward) fw->h2d = 1, fw->hold = 0; /* the region lives until this copy is done */
    e->h2d_bytes += p->n * wsz;
    p->pstate = P_COPYING;
  } else {
    ZO_CHECK(wb_drain(e, p, 0, 0)); /* params.swp must hold the last update */
    e->pstage_busy[b] = (uint64_t)p->index + 1;
    p->stage = b;
    size_t nbytes = round_up(p->n * wsz, e->swap_align);
    /* Ahead of optimizer-state transfers still queued: compute will wait for this one. */
    zo_status st = zo_swap_submit_read_urgent(e->pswap, e->pfile, p->pw_el * wsz, e->pstage[b], nbytes, &p->read_req);
    if (st != ZO_OK) return zo_error_prefix(st, "fetch '%s'", p->name);
    e->nvme_read_bytes += nbytes;
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
static zo_status prefetch_ahead(zo_engine_t *e) {
  ZO_CHECK(pump(e));
  if (!e->trace_valid || e->trace_off) return ZO_OK;
  /* Refill in batches: wait until half the bucket has landed, then fill it, so
   * the copy engine takes many tensors per wake-up instead of one per release. */
  if ((int64_t)e->inflight_el * 2 > e->cfg.zero.stage3_prefetch_bucket_size) return ZO_OK;
  for (int j = e->trace_pos; j < e->trace_len; j++) {
    zo_param_t *q = e->params[e->trace[j]];
    if (q->pstate != P_HOST) continue;
    if ((int64_t)(e->inflight_el + q->n) > e->cfg.zero.stage3_prefetch_bucket_size ||
        (int64_t)(e->live_el + q->n) > e->cfg.zero.stage3_max_live_parameters)
      break;
    int started;
    ZO_CHECK(start_fetch(e, q, 0, j, &started));
    if (!started) break;
    e->n_prefetch++;
  }
  return ZO_OK;
}

/* Follow (or record) the fetch order: the first step's order is the trace;
 * a fetch that departs from it switches the rest of the step to demand
 * fetching, with one warning, and the step's order becomes the new trace. */
static zo_status trace_fetch(zo_engine_t *e, zo_param_t *p) {
  if (e->trace_off) return ZO_OK;
  if (e->rec_len == e->rec_cap) {
    int cap = e->rec_cap ? 2 * e->rec_cap : 256;
    int *n = realloc(e->rec, cap * sizeof *n);
    if (!n) return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "engine: out of host memory");
    e->rec = n;
    e->rec_cap = cap;
  }
  e->rec[e->rec_len++] = p->index;
  if (!e->trace_valid) return ZO_OK;
  if (e->trace_pos < e->trace_len && e->trace[e->trace_pos] == p->index) {
    e->trace_pos++;
    return ZO_OK;
  }
  if (!e->trace_warned)
    zo_warn("fetch order differs from the recorded trace (at fetch %d: expected '%s', got '%s'): fetching on "
            "demand for the rest of the step and recording the new order",
            e->trace_pos, e->trace_pos < e->trace_len ? e->params[e->trace[e->trace_pos]]->name : "(end of trace)",
            p->name);
  e->trace_warned = 1;
  e->trace_valid = 0;
  return ZO_OK;
}

/* Before the optimizer rewrites the working copies: let every fetch in flight
 * land (reads of params.swp and copies out of the host tier). */
static zo_status settle_fetches(zo_engine_t *e) {
  for (int i = 0; i < e->n_params; i++)
    if (e->params[i]->pstate == P_READING) ZO_CHECK(finish_read(e, e->params[i]));
  ZO_CHECK(zo_stream_synchronize(e->copy_stream));
  return pump(e);
}

/* At the end of a step: adopt the step's fetch order as the trace when there
 * was none or it changed. */
static zo_status trace_end_step(zo_engine_t *e) {
  if (e->ptier == ZO_OFFLOAD_NONE || e->rec_len == 0) return ZO_OK;
  int same = e->trace_valid && e->trace_len == e->rec_len && e->trace_pos == e->trace_len;
  if (!same) {
    free(e->trace);
    e->trace = malloc(e->rec_len * sizeof *e->trace);
    if (!e->trace) return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "engine: out of host memory");
    memcpy(e->trace, e->rec, e->rec_len * sizeof *e->trace);
    e->trace_len = e->rec_len;
  }
  e->trace_valid = 1;
  e->trace_pos = 0;
  e->rec_len = 0;
  return ZO_OK;
}

zo_status zo_engine_fetch(zo_engine_t *e, zo_param_t *p, const void **weights, zo_dtype *dtype) {
  if (!e || !p || !weights) return zo_error_set(ZO_ERR_INVALID_ARG, "fetch: NULL argument");
  if (!e->finalized) return zo_error_set(ZO_ERR_INVALID_USAGE, "fetch '%s': engine not finalized", p->name);
  if (p->has_grad)
    return zo_error_set(ZO_ERR_INVALID_USAGE, "fetch '%s': its gradient was handed over in this step "
                        "(zo_engine_grad_ready), so its weights may already be updated; fetch it before that, or "
                        "after zo_engine_step()", p->name);
  double t0 = now_s();
  zo_status st;
  int entry_state = P_RESIDENT;
  if (e->ptier == ZO_OFFLOAD_NONE) {
    st = zo_event_synchronize(e->weights_ready);
    if (st != ZO_OK) return zo_error_prefix(st, "fetch '%s': working weight upload", p->name);
  } else {
    ZO_CHECK(trace_fetch(e, p));
    entry_state = p->pstate;
    if (p->pstate == P_HOST) {
      int started;
      ZO_CHECK(start_fetch(e, p, 1, 0, &started));
      e->n_demand++;
    }
    if (p->pstate == P_READING) ZO_CHECK(finish_read(e, p));
    if (p->pstate == P_COPYING) {
      st = zo_event_synchronize(p->ready);
      if (st != ZO_OK) return zo_error_prefix(st, "fetch '%s': host-to-device copy", p->name);
      copy_landed(e, p);
    } else {
      ZO_CHECK(zo_event_synchronize(p->ready)); /* a refresh after the last step may be in flight */
    }
    p->in_use++;
    p->last_use = ++e->fetch_clock;
  }
  const double waited = now_s() - t0;
  e->fetch_wait_s += waited;
  if (waited > 1e-3)
    zo_debug("fetch '%s' at trace position %d waited %.2f ms (%s)", p->name, e->trace_pos, waited * 1e3,
             entry_state == P_HOST ? "demand fetch" : entry_state == P_READING ? "nvme read in flight"
             : entry_state == P_COPYING ? "host-to-device copy in flight" : "refresh in flight");
  if (e->ptier != ZO_OFFLOAD_NONE) ZO_CHECK(prefetch_ahead(e)); /* overlaps the compute that follows */
  ZO_CHECK(nv_advance(e));
  *weights = p->weights;
  if (dtype) *dtype = e->wdtype;
  return ZO_OK;
}

zo_status zo_engine_set_trace(zo_engine_t *e, int enabled) {
  if (!e) return zo_error_set(ZO_ERR_INVALID_ARG, "set_trace: engine is NULL");
  e->trace_off = !enabled;
  return ZO_OK;
}

zo_status zo_engine_release(zo_engine_t *e, zo_param_t *p) {
  if (!e || !p) return zo_error_set(ZO_ERR_INVALID_ARG, "release: NULL argument");
  if (!e->finalized) return zo_error_set(ZO_ERR_INVALID_USAGE, "release '%s': engine not finalized", p->name);
  ZO_CHECK(nv_advance(e));
  if (e->ptier == ZO_OFFLOAD_NONE) return ZO_OK;
  if (!p->in_use) return zo_error_set(ZO_ERR_INVALID_USAGE, "release '%s': not fetched", p->name);
  if (--p->in_use || p->persistent) return ZO_OK;
  /* Keep the device copy when the trace says it is used again within stage3_max_reuse_distance elements. */
  if (e->trace_valid && !e->trace_off) {
    int64_t dist = 0;
    for (int j = e->trace_pos; j < e->trace_len && dist <= e->cfg.zero.stage3_max_reuse_distance; j++) {
      if (e->trace[j] == p->index) return prefetch_ahead(e);
      dist += (int64_t)e->params[e->trace[j]]->n;
    }
  }
  drop_device_copy(e, p);
  return prefetch_ahead(e); /* the freed room may admit the next prefetch */
}

/* ---------------------------------------------------------------- gradients */

static zo_status submit_adam(zo_engine_t *e, const zo_adam_hparams *hp, zo_param_t *p, size_t off, size_t n,
                             void *master, void *m, void *v, zo_adam_task_t **task);

/* The hyperparameters of optimizer step e->step + 1, with every gradient
 * multiplied by clip / loss_scale. */
static zo_adam_hparams step_hparams(const zo_engine_t *e, double clip) {
  const int64_t t = e->step + 1;
  return (zo_adam_hparams){
      .lr = (float)zo_config_lr_at(&e->cfg, t),
      .beta1 = (float)e->cfg.optimizer.beta1,
      .beta2 = (float)e->cfg.optimizer.beta2,
      .eps = (float)e->cfg.optimizer.eps,
      .weight_decay = (float)e->cfg.optimizer.weight_decay,
      .mode = e->cfg.optimizer.adam_w_mode ? ZO_ADAM_MODE_ADAMW : ZO_ADAM_MODE_L2,
      .bias_correction = e->cfg.optimizer.bias_correction,
      .step = t,
      .grad_scale = (float)(clip / e->loss_scale),
  };
}

/* Runs on the copy stream's thread once p's gradient shard has landed in
 * host memory: its squared norm (for clipping, overflow and the report), and,
 * when nothing global stands in the way, its Adam update right away, so the
 * CPU updates this shard while the device computes the rest of backward. */
static void on_grad_landed(void *arg) {
  zo_param_t *p = arg;
  zo_engine_t *e = p->eng;
  p->landed_st = zo_grad_sqnorm_ex(p->grad, e->gdtype, p->shard_n, ZO_SIMD_AUTO, 1, &p->sqnorm, &p->nonfinite);
  if (p->landed_st == ZO_OK && e->early_adam)
    p->landed_st = submit_adam(e, &e->early_hp, p, 0, p->shard_n, p->state[ST_MASTER], p->state[ST_EXP_AVG],
                               p->state[ST_EXP_AVG_SQ], &e->tasks[p->index]);
  atomic_store_explicit(&p->landed, 1, memory_order_release); /* nvme: the engine thread may queue its sub-group */
}

zo_status zo_engine_grad_ready(zo_engine_t *e, zo_param_t *p, const void *grad, zo_dtype grad_dtype) {
  if (!e || !p || !grad) return zo_error_set(ZO_ERR_INVALID_ARG, "grad_ready: NULL argument");
  if (!e->finalized) return zo_error_set(ZO_ERR_INVALID_USAGE, "grad_ready '%s': engine not finalized", p->name);
  if (grad_dtype != e->gdtype)
    return zo_error_set(ZO_ERR_INVALID_ARG, "grad_ready '%s': gradient dtype %s, expected %s (zo_engine_grad_dtype)",
                        p->name, zo_dtype_name(grad_dtype), zo_dtype_name(e->gdtype));
  if (p->has_grad)
    return zo_error_set(ZO_ERR_INVALID_USAGE, "grad_ready '%s': gradient already handed over in this step", p->name);
  if (e->n_grads++ == 0) {
    /* Adam may start per shard (cpu, none) or per sub-group (nvme) before the
     * step only when no step-wide fact is needed first: the global norm
     * (clipping) and the overflow verdict (fp16) are known only once every
     * gradient is in. */
    const int early = !e->cfg.fp16.enabled && !(e->cfg.gradient_clipping > 0) && !e->dpu;
    e->early_adam = early && e->tier != ZO_OFFLOAD_NVME;
    if (e->early_adam) e->early_hp = step_hparams(e, 1.0);
    if (early && e->tier == ZO_OFFLOAD_NVME) {
      e->nv_hp = step_hparams(e, 1.0);
      e->nv_adam_ok = 1;
    }
  }
  p->grad_seq = e->n_grads;
  if (e->early_adam) /* on_grad_landed writes the new weights into it */
    ZO_CHECK(wb_alloc(e, p, 0, p->shard_n, &e->tasks[p->index], 1));
  /* One rank: the reduce-scatter of the gradient is the copy of our shard. */
  const size_t gsz = zo_dtype_size(grad_dtype);
  zo_copy_kind kind = e->tier == ZO_OFFLOAD_NONE ? ZO_COPY_D2D : ZO_COPY_D2H;
  if (p->shard_n)
    ZO_CHECK(zo_memcpy_async(e->copy_stream, p->grad, (const char *)grad + p->shard_off * gsz, p->shard_n * gsz, kind));
  if (kind == ZO_COPY_D2H) e->d2h_bytes += p->shard_n * gsz;
  ZO_CHECK(zo_launch_host_func(e->copy_stream, on_grad_landed, p));
  p->has_grad = 1;
  return nv_advance(e);
}

/* ---------------------------------------------------------------- step */

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

/* Queue the fused Adam update of shard elements [off, off + n) of p on the
 * pool: fp32 master, state, and the working-dtype copy-out in one pass. */
static zo_status submit_adam(zo_engine_t *e, const zo_adam_hparams *hp, zo_param_t *p, size_t off, size_t n,
                             void *master, void *m, void *v, zo_adam_task_t **task) {
  const zo_adam_shard sh = {
      .param = master,
      .grad = (const char *)p->grad + off * zo_dtype_size(e->gdtype),
      .grad_dtype = e->gdtype,
      .exp_avg = m,
      .exp_avg_sq = v,
      .state_dtype = e->sdtype,
      .param_out = working_dst(e, p, off),
      .out_dtype = e->wdtype,
      .n = n,
      .seed = p->flat_off + off,
  };
  zo_status st = zo_adam_pool_submit(e->pool, hp, &sh, 0, task);
  if (st != ZO_OK) return zo_error_prefix(st, "adam '%s' [%zu, %zu)", p->name, off, off + n);
  return ZO_OK;
}

/* Wait an Adam task, then queue the upload of the working weights it wrote. */
static zo_status finish_adam(zo_engine_t *e, zo_adam_task_t **task, zo_param_t *p, size_t off, size_t n) {
  zo_status st = zo_adam_task_wait(*task, NULL);
  *task = NULL;
  if (st != ZO_OK) return zo_error_prefix(st, "adam '%s' [%zu, %zu)", p->name, off, off + n);
  return queue_upload(e, p, off, n);
}

/*
 * The NVMe optimizer-state pipeline. A sub-group's state (master, exp_avg,
 * exp_avg_sq) moves through one slot of pinned buffers:
 *
 *   IDLE --read--> READING --> LOADED --Adam--> UPDATING --> WRITING --> LOADED (clean)
 *
 * Reads do not depend on gradients, so they are issued as soon as a slot is
 * free, in the order the sub-groups' gradients completed in the last step
 * (first step: reverse registration order, the order of backward): the
 * next step's first reads start during forward, right after the last
 * write-backs. A sub-group's Adam starts as soon as its state is loaded and
 * every gradient in it has landed, when no step-wide fact is needed first
 * (no clipping, no fp16, no delayed update); otherwise at zo_engine_step().
 * Its write-back is issued the moment Adam is done; the slot keeps the
 * (clean) state afterwards and is taken by the next read only when that
 * sub-group is not needed before the one being read. The pipeline moves on
 * every engine call (fetch, release, grad_ready) without blocking; the swap
 * progress thread keeps the disk busy in between.
 */
static int sg_landed(const zo_engine_t *e, const sub_group *g) {
  for (int q = g->first_piece; q < g->first_piece + g->n_pieces; q++) {
    if (!atomic_load_explicit(&e->pieces[q].p->landed, memory_order_acquire)) return 0;
  }
  return 1;
}

/* Collect the slot's finished requests; *done = 1 when none is left. With
 * @wait, blocks for all of them (keeps the first error). */
static zo_status slot_settle(zo_engine_t *e, sg_slot *sl, int wait, int *done) {
  zo_status first = ZO_OK;
  *done = 1;
  for (int k = 0; k < ST_KINDS; k++) {
    if (!sl->req[k]) continue;
    if (!wait) {
      int d;
      ZO_CHECK(zo_swap_poll(e->swap, sl->req[k], &d));
      if (!d) {
        *done = 0;
        continue;
      }
    }
    zo_status st = swap_wait(e, e->swap, &sl->req[k]);
    if (first == ZO_OK) first = st;
  }
  return first;
}

static zo_status sg_submit_adam(zo_engine_t *e, sub_group *g) {
  sg_slot *sl = &e->slots[g->slot];
  for (int q = g->first_piece; q < g->first_piece + g->n_pieces; q++) {
    piece *pc = &e->pieces[q];
    size_t b = pc->file_el - g->file_el;
    ZO_CHECK(wb_alloc(e, pc->p, pc->off, pc->n, &pc->task, 0));
    ZO_CHECK(submit_adam(e, &e->nv_hp, pc->p, pc->off, pc->n, (char *)sl->buf[ST_MASTER] + b * e->esz[ST_MASTER],
                         (char *)sl->buf[ST_EXP_AVG] + b * e->esz[ST_EXP_AVG],
                         (char *)sl->buf[ST_EXP_AVG_SQ] + b * e->esz[ST_EXP_AVG_SQ], &pc->task));
  }
  g->phase = SG_UPDATING;
  return ZO_OK;
}

/* Adam of @g is done (checked, or waited with @wait): publish the working
 * weights and issue the write-back. *done = 0 while a task still runs. */
static zo_status sg_finish_adam(zo_engine_t *e, sub_group *g, int wait, int *done) {
  *done = 1;
  for (int q = g->first_piece; q < g->first_piece + g->n_pieces; q++) {
    piece *pc = &e->pieces[q];
    if (!pc->task) continue;
    if (!wait) {
      ZO_CHECK(zo_adam_task_poll(pc->task, done));
      if (!*done) return ZO_OK;
    }
    ZO_CHECK(finish_adam(e, &pc->task, pc->p, pc->off, pc->n));
  }
  sg_slot *sl = &e->slots[g->slot];
  for (int k = 0; k < ST_KINDS; k++) ZO_CHECK(swap_io(e, 1, k, g->file_el, sl->buf[k], g->n_el, &sl->req[k]));
  g->phase = SG_WRITING;
  g->done = 1;
  e->nv_done++;
  if (!e->cfg.zero.offload_optimizer.pipeline_write) { /* on disk before anything else moves */
    int d;
    ZO_CHECK(slot_settle(e, sl, 1, &d));
    g->phase = SG_LOADED;
  }
  return ZO_OK;
}

/* A slot for reading the sub-group at order position @pos: a free one, else
 * one holding clean state that is not needed before @pos (done in this step,
 * or needed furthest away). -1 when none. */
static int slot_for_read(const zo_engine_t *e, int pos) {
  int best = -1, far = pos;
  for (int s = 0; s < e->n_slots; s++) {
    int gi = e->slots[s].sg;
    if (gi < 0) return s;
    const sub_group *g = &e->sgs[gi];
    if (g->phase != SG_LOADED) continue;
    int next = g->done ? INT_MAX : g->pos;
    if (next > far) far = next, best = s;
  }
  return best;
}

static zo_status nv_read_ahead(zo_engine_t *e, int *progress) {
  if (!e->cfg.zero.offload_optimizer.pipeline_read) { /* one sub-group at a time, read when its update can start */
    if (!e->nv_adam_ok) return ZO_OK;
    for (int s = 0; s < e->n_slots; s++) {
      const int gi = e->slots[s].sg;
      const sub_group *h = gi >= 0 ? &e->sgs[gi] : NULL;
      if (h && (h->phase == SG_READING || h->phase == SG_UPDATING || (h->phase == SG_LOADED && !h->done))) return ZO_OK;
    }
  }
  while (e->nv_pos_read < e->n_sgs) {
    sub_group *g = &e->sgs[e->sg_order[e->nv_pos_read]];
    if (g->done || g->phase == SG_READING || g->phase == SG_LOADED || g->phase == SG_UPDATING) {
      e->nv_pos_read++; /* in memory already (or updated) */
      continue;
    }
    if (g->phase == SG_WRITING) return ZO_OK; /* last step's write-back: it stays loaded once on disk */
    int s = slot_for_read(e, g->pos);
    if (s < 0) return ZO_OK;
    sg_slot *sl = &e->slots[s];
    if (sl->sg >= 0) { /* evict clean state */
      e->sgs[sl->sg].phase = SG_IDLE;
      e->sgs[sl->sg].slot = -1;
    }
    for (int k = 0; k < ST_KINDS; k++) ZO_CHECK(swap_io(e, 0, k, g->file_el, sl->buf[k], g->n_el, &sl->req[k]));
    sl->sg = (int)(g - e->sgs);
    g->slot = s;
    g->phase = SG_READING;
    e->nv_pos_read++;
    *progress = 1;
  }
  return ZO_OK;
}

/* Move the pipeline forward as far as it goes without blocking. */
static zo_status nv_advance(zo_engine_t *e) {
  if (e->tier != ZO_OFFLOAD_NVME) return ZO_OK;
  int progress;
  do {
    progress = 0;
    for (int s = 0; s < e->n_slots; s++) {
      sg_slot *sl = &e->slots[s];
      if (sl->sg < 0) continue;
      sub_group *g = &e->sgs[sl->sg];
      int done;
      if (g->phase == SG_READING || g->phase == SG_WRITING) {
        ZO_CHECK(slot_settle(e, sl, 0, &done));
        if (done) g->phase = SG_LOADED, progress = 1;
      } else if (g->phase == SG_UPDATING) {
        ZO_CHECK(sg_finish_adam(e, g, 0, &done));
        progress |= done;
      } else if (g->phase == SG_LOADED && !g->done && e->nv_adam_ok && sg_landed(e, g)) {
        ZO_CHECK(sg_submit_adam(e, g));
        progress = 1;
      }
    }
    ZO_CHECK(nv_read_ahead(e, &progress));
  } while (progress);
  return ZO_OK;
}

/* zo_engine_step(): every gradient has landed; update the sub-groups not yet
 * updated, blocking only on what the next one in order needs. */
static zo_status nv_finish_step(zo_engine_t *e, double *adam_s) {
  e->nv_adam_ok = 1;
  int no_slot = 0; /* sub-groups whose read could not start before the step for want of a slot */
  double no_slot_s = 0;
  const sub_group *counted = NULL; /* the last of them (it stays first in order until it gets a slot) */
  for (;;) {
    ZO_CHECK(nv_advance(e));
    if (e->nv_done == e->n_sgs) {
      if (no_slot)
        zo_debug("step %lld: %d of %d sub-groups found no free buffer and were read inside the step (waited "
                 "%.2f ms); zero_optimization.offload_optimizer.buffer_count %d, up to %d would read them during "
                 "forward and backward", (long long)e->step + 1, no_slot, e->n_sgs, no_slot_s * 1e3, e->n_slots,
                 e->n_slots + no_slot);
      return ZO_OK;
    }
    sub_group *g = NULL; /* the first sub-group in order not yet updated */
    for (int i = 0; i < e->n_sgs && !g; i++)
      if (!e->sgs[e->sg_order[i]].done) g = &e->sgs[e->sg_order[i]];
    int done;
    if (g->phase == SG_READING) {
      ZO_CHECK(slot_settle(e, &e->slots[g->slot], 1, &done));
      g->phase = SG_LOADED;
    } else if (g->phase == SG_UPDATING) {
      double t0 = now_s();
      ZO_CHECK(sg_finish_adam(e, g, 1, &done));
      *adam_s += now_s() - t0;
    } else {
      /* IDLE, or WRITING (last step's write-back): no slot to read it into
       * yet. Every slot holds work in flight (loaded state that is done or
       * needed later would have been taken): finish the most advanced one,
       * which leaves clean state that the next read may take. */
      static const int most_advanced_first[] = {SG_UPDATING, SG_WRITING, SG_READING};
      sg_slot *w = NULL; /* within a phase, the one started first (earliest in the order) */
      for (int i = 0; i < 3 && !w; i++)
        for (int s = 0; s < e->n_slots; s++) {
          const int gi = e->slots[s].sg;
          if (gi >= 0 && e->sgs[gi].phase == most_advanced_first[i] && (!w || e->sgs[gi].pos < e->sgs[w->sg].pos))
            w = &e->slots[s];
        }
      if (!w)
        return zo_error_set(ZO_ERR_INVALID_USAGE, "engine: nvme pipeline stalled at sub-group %d (phase %d)",
                            (int)(g - e->sgs), g->phase); /* a bug: never expected */
      sub_group *h = &e->sgs[w->sg];
      double t0 = now_s();
      if (g->phase == SG_IDLE && g != counted) counted = g, no_slot++;
      if (h->phase == SG_UPDATING) {
        ZO_CHECK(sg_finish_adam(e, h, 1, &done));
        *adam_s += now_s() - t0;
      } else {
        ZO_CHECK(slot_settle(e, w, 1, &done));
        h->phase = SG_LOADED;
      }
      no_slot_s += now_s() - t0;
    }
  }
}

/* After the step: the next step's order is the order in which sub-groups
 * became complete in this one; then the reads for it start. */
static zo_status nv_end_step(zo_engine_t *e) {
  for (int i = 0; i < e->n_sgs; i++) {
    sub_group *g = &e->sgs[i];
    g->ready_at = 0;
    for (int q = g->first_piece; q < g->first_piece + g->n_pieces; q++)
      if (e->pieces[q].p->grad_seq > g->ready_at) g->ready_at = e->pieces[q].p->grad_seq;
  }
  for (int i = 1; i < e->n_sgs; i++) { /* insertion sort by ready_at, stable: usually already in order */
    int x = e->sg_order[i], j = i - 1;
    while (j >= 0 && e->sgs[e->sg_order[j]].ready_at > e->sgs[x].ready_at) {
      e->sg_order[j + 1] = e->sg_order[j];
      j--;
    }
    e->sg_order[j + 1] = x;
  }
  for (int i = 0; i < e->n_sgs; i++) {
    e->sgs[e->sg_order[i]].pos = i;
    e->sgs[i].done = 0;
  }
  for (int i = 0; i < e->n_params; i++) atomic_store_explicit(&e->params[i]->landed, 0, memory_order_relaxed);
  e->nv_done = 0;
  e->nv_pos_read = 0;
  e->nv_adam_ok = 0;
  return nv_advance(e);
}

/* Bring the pipeline to rest: reads finished and dropped, updates finished
 * and written, write-backs on disk; every slot free (load_param, get_master
 * and destroy use the slots directly). Keeps the first error. */
static zo_status nv_quiesce(zo_engine_t *e) {
  zo_status first = ZO_OK;
  for (int s = 0; s < e->n_slots; s++) {
    sg_slot *sl = &e->slots[s];
    int done;
    if (sl->sg >= 0 && e->sgs[sl->sg].phase == SG_UPDATING) {
      zo_status st = sg_finish_adam(e, &e->sgs[sl->sg], 1, &done);
      if (first == ZO_OK) first = st;
    }
    zo_status st = slot_settle(e, sl, 1, &done);
    if (first == ZO_OK) first = st;
    if (sl->sg >= 0) {
      e->sgs[sl->sg].phase = SG_IDLE;
      e->sgs[sl->sg].slot = -1;
    }
    sl->sg = -1;
  }
  e->nv_pos_read = 0;
  return first;
}

zo_status zo_engine_synchronize(zo_engine_t *e) {
  if (!e) return zo_error_set(ZO_ERR_INVALID_ARG, "synchronize: engine is NULL");
  zo_status st = ZO_OK;
  if (e->dpu_pending) {
    for (int i = 0; i < e->n_params; i++) {
      if (!e->tasks[i]) continue;
      zo_status s2 = finish_adam(e, &e->tasks[i], e->params[i], 0, e->params[i]->shard_n);
      if (st == ZO_OK) st = s2;
    }
    e->dpu_pending = 0;
    if (st == ZO_OK) st = zo_event_record(e->weights_ready, e->copy_stream);
  }
  zo_status s2 = e->copy_stream ? zo_stream_synchronize(e->copy_stream) : ZO_OK; /* staging is free again after */
  return st != ZO_OK ? st : s2;
}

zo_status zo_engine_step(zo_engine_t *e, zo_step_info *info) {
  if (!e) return zo_error_set(ZO_ERR_INVALID_ARG, "step: engine is NULL");
  if (!e->finalized) return zo_error_set(ZO_ERR_INVALID_USAGE, "step: engine not finalized");
  zo_step_info inf = {0};
  for (int i = 0; i < e->n_params; i++)
    if (!e->params[i]->has_grad)
      return zo_error_set(ZO_ERR_INVALID_USAGE, "step: tensor '%s' has no gradient (zo_engine_grad_ready not called)",
                          e->params[i]->name);
  double t0 = now_s();
  ZO_CHECK(zo_stream_synchronize(e->copy_stream));
  inf.grad_wait_s = now_s() - t0;
  if (e->ptier != ZO_OFFLOAD_NONE) {
    ZO_CHECK(settle_fetches(e));
    ZO_CHECK(trace_end_step(e));
  }
  double dpu_wait = 0;
  if (e->dpu_pending) { /* delayed update: the last step's Adam ran during this step's compute; publish it now */
    double td = now_s();
    ZO_CHECK(zo_engine_synchronize(e));
    dpu_wait = now_s() - td;
  }
  inf.fetch_wait_s = e->fetch_wait_s;
  inf.n_prefetch = e->n_prefetch;
  inf.n_demand_fetch = e->n_demand;
  e->fetch_wait_s = 0;
  e->n_prefetch = e->n_demand = 0;

  /* The global norm and the overflow flag, from the per-shard norms taken as
   * each gradient landed (summed in tensor order: deterministic). */
  t0 = now_s();
  double sums[2] = {0, 0}; /* squared norm (scaled), shards with a nonfinite element */
  zo_status landed = ZO_OK;
  for (int i = 0; i < e->n_params; i++) {
    zo_param_t *p = e->params[i];
    if (p->landed_st != ZO_OK && landed == ZO_OK)
      landed = zo_error_set(p->landed_st, "step: gradient of '%s': %s", p->name, zo_status_string(p->landed_st));
    sums[0] += p->sqnorm;
    sums[1] += p->nonfinite ? 1 : 0;
    p->has_grad = 0;
  }
  const int early = e->early_adam;
  e->n_grads = 0;
  e->early_adam = 0;
  if (landed != ZO_OK) return landed;
  ZO_CHECK(zo_comm_all_reduce_f64(e->comm, sums, 2));
  /* Only fp16 skips a step on overflow (dynamic loss scaling); with fp32 or
   * bf16 the update is applied as DeepSpeed applies it, with a warning. */
  const int nonfinite = sums[1] > 0 || !isfinite(sums[0]);
  const int overflow = nonfinite && e->cfg.fp16.enabled;
  if (nonfinite && !overflow)
    zo_warn("step %lld: non-finite gradient (inf or NaN) without fp16 loss scaling; applying the update as DeepSpeed "
            "does", (long long)e->step + 1);
  const double norm = sqrt(sums[0]) / e->loss_scale;
  inf.grad_norm = overflow ? INFINITY : norm;
  if (overflow) {
    if (e->tier == ZO_OFFLOAD_NVME) ZO_CHECK(nv_end_step(e)); /* the state read stays valid for the next step */
    double old = e->loss_scale;
    update_loss_scale(e, 1);
    zo_info("step %lld: gradient overflow, skipping the step; loss scale %g -> %g", (long long)e->step + 1, old,
            e->loss_scale);
    inf.skipped = 1;
    inf.step = e->step;
    inf.loss_scale = e->loss_scale;
    inf.adam_s = now_s() - t0;
    if (info) *info = inf;
    return ZO_OK;
  }
  double clip = 1.0;
  if (e->cfg.gradient_clipping > 0 && norm > e->cfg.gradient_clipping)
    clip = e->cfg.gradient_clipping / (norm + 1e-6);
  const int64_t t = e->step + 1;
  const zo_adam_hparams hp = early ? e->early_hp : step_hparams(e, clip);
  double adam_s = now_s() - t0;
  double swap0 = e->swap_wait_s, copy0 = e->copy_s;
  double t1 = now_s();
  if (e->tier == ZO_OFFLOAD_NVME) {
    if (!e->nv_adam_ok) e->nv_hp = hp;
    e->nv_in_step = 1;
    zo_status st = nv_finish_step(e, &adam_s);
    e->nv_in_step = 0;
    ZO_CHECK(st);
    ZO_CHECK(nv_end_step(e)); /* reads for the next step start now, behind the last write-backs */
  } else {
    /* Every shard is queued at once; the pool works through them while uploads are queued in order. */
    zo_status st = ZO_OK;
    for (int i = 0; i < e->n_params && st == ZO_OK && !early; i++) { /* early: queued as gradients landed */
      zo_param_t *p = e->params[i];
      st = wb_alloc(e, p, 0, p->shard_n, &e->tasks[i], 0);
      if (st == ZO_OK)
        st = submit_adam(e, &hp, p, 0, p->shard_n, p->state[ST_MASTER], p->state[ST_EXP_AVG],
                         p->state[ST_EXP_AVG_SQ], &e->tasks[i]);
    }
    if (e->dpu && st == ZO_OK) { /* the next step finishes and publishes these; its gradients go to the other buffer */
      e->dpu_pending = 1;
      host_buf tmp = e->grad_host;
      e->grad_host = e->grad_host2;
      e->grad_host2 = tmp;
      for (int i = 0; i < e->n_params; i++)
        e->params[i]->grad = (char *)e->grad_host.ptr + e->params[i]->host_off * zo_dtype_size(e->gdtype);
    }
    for (int i = 0; i < e->n_params && !e->dpu; i++) {
      if (!e->tasks[i]) continue;
      zo_status s2 = finish_adam(e, &e->tasks[i], e->params[i], 0, e->params[i]->shard_n);
      if (st == ZO_OK) st = s2;
    }
    ZO_CHECK(st);
    adam_s += now_s() - t1;
  }
  ZO_CHECK(zo_event_record(e->weights_ready, e->copy_stream));
  inf.swap_s = e->swap_wait_s - swap0;
  inf.copy_s = e->copy_s - copy0;
  inf.adam_s = fmax(0.0, adam_s - inf.copy_s) + dpu_wait; /* the Adam sections timed the upload queueing too */
  e->step = t;
  update_loss_scale(e, 0);
  /* The weights are final now: start fetching the next step's first tensors. */
  if (e->ptier != ZO_OFFLOAD_NONE) ZO_CHECK(prefetch_ahead(e));
  inf.step = e->step;
  inf.lr = hp.lr;
  inf.loss_scale = e->loss_scale;
  if (info) *info = inf;
  return ZO_OK;
}

/* ---------------------------------------------------------------- inspection */

zo_status zo_engine_mem_info(const zo_engine_t *e, zo_engine_mem *m) {
  if (!e || !m) return zo_error_set(ZO_ERR_INVALID_ARG, "mem_info: NULL argument");
  memset(m, 0, sizeof *m);
  m->device_bytes = e->dev_block_bytes;
  size_t used = 0, peak = 0, limit = 0;
  zo_device_mem_info(e->dev, &used, &peak, &limit);
  m->device_peak_bytes = peak;
  const host_buf *hb[] = {&e->grad_host, &e->stage_host, &e->state_host[0], &e->state_host[1], &e->state_host[2],
                          &e->param_host};
  for (size_t i = 0; i < sizeof hb / sizeof hb[0]; i++) {
    m->host_bytes += hb[i]->nbytes;
    if (hb[i]->pinned) m->pinned_bytes += hb[i]->nbytes;
  }
  for (int k = 0; k < ST_KINDS; k++) {
    m->host_bytes += (size_t)e->n_slots * e->slot_el * e->esz[k];
    m->pinned_bytes += (size_t)e->n_slots * e->slot_el * e->esz[k];
    m->nvme_bytes += e->files[k] ? zo_swap_file_size(e->files[k]) : 0;
  }
  m->host_bytes += (size_t)e->n_pstage * e->pstage_el * zo_dtype_size(e->wdtype);
  m->pinned_bytes += (size_t)e->n_pstage * e->pstage_el * zo_dtype_size(e->wdtype);
  m->nvme_bytes += e->pfile ? zo_swap_file_size(e->pfile) : 0;
  m->host_bytes += e->wb_bytes;
  m->pinned_bytes += e->wb_bytes;
  m->device_param_bytes = e->live_el * zo_dtype_size(e->wdtype);
  m->nvme_read_bytes = e->nvme_read_bytes;
  m->nvme_write_bytes = e->nvme_write_bytes;
  m->h2d_bytes = e->h2d_bytes;
  m->d2h_bytes = e->d2h_bytes;
  return ZO_OK;
}

zo_status zo_engine_get_master(zo_engine_t *e, zo_param_t *p, float *out, size_t *shard_offset, size_t *shard_n) {
  if (!e || !p || !out) return zo_error_set(ZO_ERR_INVALID_ARG, "get_master: NULL argument");
  if (!e->finalized) return zo_error_set(ZO_ERR_INVALID_USAGE, "get_master '%s': engine not finalized", p->name);
  if (shard_offset) *shard_offset = p->shard_off;
  if (shard_n) *shard_n = p->shard_n;
  ZO_CHECK(zo_engine_synchronize(e)); /* a delayed update still in flight */
  if (e->tier != ZO_OFFLOAD_NVME) {
    memcpy(out, p->state[ST_MASTER], p->shard_n * sizeof(float));
    return ZO_OK;
  }
  ZO_CHECK(nv_quiesce(e));
  sg_slot *sl = &e->slots[0];
  for (size_t off = 0; off < p->shard_n; off += e->slot_el) {
    size_t n = p->shard_n - off < e->slot_el ? p->shard_n - off : e->slot_el;
    ZO_CHECK(swap_io(e, 0, ST_MASTER, p->file_el + off, sl->buf[ST_MASTER], padded_el(e, n), &sl->req[ST_MASTER]));
    zo_status st = swap_wait(e, e->swap, &sl->req[ST_MASTER]);
    if (st != ZO_OK) return zo_error_prefix(st, "get_master '%s'", p->name);
    memcpy(out + off, sl->buf[ST_MASTER], n * sizeof(float));
  }
  return ZO_OK;
}
