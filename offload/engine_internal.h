/*
 * engine_internal.h - the engine's private struct and the functions its files share. Not installed.
 *
 * The engine is a core (struct zo_engine: config, device, streams, tensor table, memory plan and ledger, host
 * buffers, optimizer and loss-scale state, counters) plus one owned part per pipeline. Each part's struct is opaque:
 * defined, allocated and freed in its own file, whose fields no other file touches; the others call the functions
 * declared below under that file's name.
 *
 *   engine_core.c     below every part: host buffers (pinned, registered, in the ledger), the owner and usable
 *                     checks, swap waits, the extent layout, the gradient cast/add. Calls no other engine file.
 *   engine.c          lifecycle: create, destroy, the parameter registry, finalize (allocates the plan: each part
 *                     its own buffers), initial weights;
 *   plan.c            the memory plan: every tier's buffers and the layout (zoffload/plan.h), the buffer shapes
 *                     the parts allocate by, and the ledger's report; with budget.c and placement.c the planner,
 *                     a pure function of (config, tensor table, machine): it calls no part;
 *   engine_grad.c     the gradient hand-over (grad_ready, grad_accumulate, grad_fence) and eng_progress(), the one
 *                     function that moves the pipelines on;
 *   engine_adam.c     the Adam tasks: a step's hyperparameters, the landed-gradient event (eng_grad_land, raised
 *                     there only), the norms, the fused update's submission;
 *   engine_step.c     the optimizer step: norms, clipping, loss scale, the updates, the delayed update;
 *   engine_accum.c    struct eng_acc (e->acc): accumulation over micro-batches, the staging buckets;
 *   engine_dp.c       struct eng_dp (e->dp): several ranks, the gradient reduce-scatter (all-reduce at stage 0) and
 *                     the all-gather of updated working weights;
 *   engine_dp3.c      struct eng_pg (e->pg): stage 3 on several ranks, the parameter gathers;
 *   engine_nvme.c     struct eng_nv (e->nv): the NVMe optimizer-state pipeline over sub-groups (the swap, the state
 *                     files, sub-groups, slots, the resident range);
 *   engine_gradnv.c   struct eng_gnv (e->gnv): gradients in grad.swp beside the NVMe state (written, read-added,
 *                     their norm on the way);
 *   engine_wb.c       struct eng_wb (e->wb): where new working weights go, and the write-back ring of nvme
 *                     parameters (offload_param.device "nvme");
 *   engine_fetch.c    struct eng_fetch (e->fetch): the fetch coordinator (trace, prefetch, eviction, the staging of
 *                     nvme reads) and the publish of new weights into the device copies;
 *   engine_inspect.c  memory accounting and master-weight read-back.
 * Checkpoints (checkpoint/) and the fronts' hand-over helper (handover.c) sit beside them.
 *
 * Every function here runs on the engine's thread (the one calling the public zo_engine_* functions) unless its
 * comment says otherwise.
 */
#ifndef ZO_ENGINE_INTERNAL_H
#define ZO_ENGINE_INTERNAL_H

#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "base_internal.h"
#include "zoffload/adam.h"
#include "zoffload/arena.h"
#include "zoffload/engine.h"
#include "zoffload/plan.h"
#include "zoffload/swap.h"
#include "adam_device.h"

enum { ST_MASTER = 0, ST_EXP_AVG = 1, ST_EXP_AVG_SQ = 2, ST_KINDS = 3 };
/* offload_optimizer "nvme": the 4th kind a slot holds and the swap files include, the sub-group's gradient
 * (grad.swp, the accumulation dtype; engine_gradnv.c). Not optimizer state: never checkpointed. */
enum { ST_GRAD = 3, SL_KINDS = 4 };
#define ZO_PARAM_MAX_DIMS 8 /* zo_engine_set_param_shape() */

struct zo_param {
  char name[128];
  int index;
  size_t n; /* elements of the whole tensor */
  int ndim; /* zo_engine_set_param_shape(): 0 = 1-D [n] */
  int64_t dims[ZO_PARAM_MAX_DIMS];
  size_t shard_off; /* first element of this rank's shard */
  size_t shard_n;   /* elements in this rank's shard (may be 0) */
  size_t part_n; /* elements of every rank's block: ceil(n / world), n at stage 0; the tensor padded
                               to part_n x world is what the collectives move */
  /* several ranks: element offset of the padded tensor in the gather buffer (engine_dp.c, per
   * wave) */
  size_t dp_off;
  /* first element of the shard in the rank's flat parameter space (rounding seed) */
  size_t flat_off;
  /* Adam's weight decay: the config's, or zo_engine_set_param_weight_decay()'s */
  float weight_decay;
  void *weights;         /* device: working copy, n elements of the working dtype; with parameter
                               offload valid only while `blk` is pinned (a compaction may move it) */
  zo_arena_block_t *blk; /* parameter offload: the arena block of the device copy, or NULL */
  int blk_pinned; /* blk may not move: fetched (in_use), a copy into it in flight, or queued */
  void *state[ST_KINDS]; /* none: device, cpu: host; NULL for nvme. master float32[shard_n],
                               exp_avg and exp_avg_sq state_dtype[shard_n] */
  uint64_t file_el;      /* nvme: element offset of this shard's extent in every state file */
  /* adtype[shard_n]: device (none) or host (cpu); NULL for nvme (grad.swp at file_el) */
  void *grad;
  size_t host_off; /* element offset of this shard in the engine's host arrays (cpu, nvme) */
  int has_grad;    /* grad_ready() seen since the last step */
  /* zo_engine_grad_reopen() since: the next grad_ready() adds to the landed gradient (0 after it, and at the
   * step) */
  int reopen;
  struct acc_chunk *acc_chunks; /* one rank, staging: its chunks' descriptors (engine_accum.c) */
  int n_acc; /* zo_engine_grad_accumulate() contributions of this step (engine_accum.c): > 0
                               means p->grad holds (or will hold, once the copies land) their sum */

  /* Parameter offload (offload_param.device cpu or nvme): the working copy
   * lives on the host tier and `weights` points at a device buffer only while
   * the tensor is fetched or kept. */
  int pstate; /* P_HOST, P_READING (nvme read in flight), P_COPYING (H2D in flight), P_RESIDENT */
  int in_use; /* fetches not yet released */
  int persistent; /* n <= stage3_param_persistence_threshold: stays on the device once fetched */
  size_t pw_el; /* element offset of the tensor's working copy: in param_host when pw_host, else in
                               params.swp (padded extents); the plan's zo_plan_tensor.pw_el */
  int pw_host;  /* the working copy lives in param_host: every tensor under offload_param "cpu", the
                               tensors cached there under "nvme" (offload_param.max_in_cpu, eng_set_param_cache) */
  int stage;    /* nvme: staging buffer index while P_READING / P_COPYING, else -1 */
  zo_swap_req_t *read_req; /* nvme: read of the working copy in flight */
  zo_event_t *ready;       /* H2D completion of the working copy */
  int64_t last_use;        /* fetch counter at the last fetch (eviction order) */
  void *wb_ptr; /* nvme: the write-back region allocated last for this tensor (eng_working_dst) */

  /* Set on the copy stream's thread when the gradient has landed (read by the
   * engine thread after synchronizing the stream); cpu, none: sqnorm and
   * nonfinite by the engine thread once the norm task is done (eng_grad_norms_wait). */
  zo_engine_t *eng;
  double sqnorm;       /* squared L2 norm of the (loss-scaled) gradient shard */
  int nonfinite;       /* the shard holds inf or NaN */
  zo_status landed_st; /* error of the work done when the gradient landed */
  /* cpu, none: the norm of the landed gradient on the Adam pool (eng_grad_landed), until the step
   * waits for it (which then sets sqnorm and nonfinite) */
  zo_adam_task_t *norm_task;
  /* cpu, none: [ceil(shard_n / ENG_NORM_CHUNK)] that task's per-chunk squared norms */
  double *norm_part;
  /* 1 once the above are set (release store on the copy stream's thread); 0 after a step */
  atomic_int landed;
  int grad_seq; /* 1-based order of this tensor's grad_ready() in the step */
  /* nvme (engine_gradnv.c): writes of this tensor's gradient to grad.swp in flight, whether the final
   * contribution has been put (it lands when the last of them completes), and the first error on the way */
  int gnv_pending, gnv_final;
  zo_status gnv_st;
};

enum { P_HOST = 0, P_READING = 1, P_COPYING = 2, P_RESIDENT = 3 };

/* A run of shard pieces that lies contiguously in every state file. Files
 * are laid out in elements; kind k's byte offset is elements * esz[k], and
 * every extent is padded to a whole number of alignment units for the
 * narrowest kind, so every kind's offsets stay aligned. */
typedef struct sub_group {
  int first_piece, n_pieces;
  uint64_t file_el, n_el; /* element range in each state file, padded */
  int phase;              /* SG_* (see the NVMe pipeline below) */
  int slot;               /* slot holding its state, or -1 */
  int done;               /* updated in this step */
  int pos;      /* position in this step's order (engine_nvme.c: the pipeline's sg_order) */
  int ready_at; /* largest grad_seq of its tensors: when it became complete */
  int grads_in; /* nvme: this step's gradients are in its slot (or being read with its state) */
  int gtouched; /* nvme: a gradient of this step has reached it (engine_gradnv.c) */
  int gheld;    /* nvme: this step's gradients go to its slot's gradient buffer, not grad.swp */
  int resident; /* its state and gradients live in host memory for the whole run (the resident range,
                                zoffload.optimizer_max_in_cpu): its slot is permanent, nothing is read or written */
  /* nvme, delayed update: updated for the last step and taken by this step's gradients
   * (eng_nv_dpu_claim); done, grads_in, gtouched and gheld are this step's */
  int dpu_next;
} sub_group;

/* SG_GRADS: state loaded, its gradients (grad.swp) being read into the slot; Adam follows */
enum { SG_IDLE = 0, SG_READING = 1, SG_LOADED = 2, SG_UPDATING = 3, SG_WRITING = 4, SG_GRADS = 5 };

/* One set of pinned buffers for a sub-group: master, exp_avg, exp_avg_sq, and its gradient
 * (ST_GRAD). */
typedef struct sg_slot {
  void *buf[SL_KINDS];
  zo_swap_req_t *req[SL_KINDS]; /* reads or writes not yet waited */
  int sg;                       /* sub-group whose state it holds, or -1 */
} sg_slot;

/* offload_optimizer nvme: the optimizer-state pipeline (defined in engine_nvme.c) and the gradients in grad.swp
 * (engine_gradnv.c), each owned by its file; the others use the functions declared below. */
struct eng_nv;
struct eng_gnv;
/* offload_param nvme: the write-back ring (e->wb) and one region of it (see eng_wb_alloc); opaque,
 * engine_wb.c. */
struct eng_wb;
typedef struct wb_entry wb_entry;
/* Parameter offload: the fetch coordinator (e->fetch); opaque, engine_fetch.c. */
struct eng_fetch;

typedef struct host_buf {
  void *ptr;
  size_t nbytes;
  int pinned;
} host_buf;

/* What the engine moved and waited for, added to by every part: the bytes since create (zo_engine_memory_stats), the
 * rest since the last step (zo_step_info; the step reads and resets them). */
struct eng_counters {
  uint64_t nvme_read_bytes, nvme_write_bytes, h2d_bytes, d2h_bytes;
  double swap_wait_s;  /* blocked on swap I/O */
  double copy_s;       /* queueing working-weight uploads */
  double dp_comm_s;    /* blocked in collectives */
  uint64_t dp_bytes;   /* bytes this rank sent into collectives */
  double fetch_wait_s; /* compute blocked in zo_engine_fetch() */
  int64_t n_prefetch, n_demand;
};

struct eng_acc; /* gradient accumulation's state (engine_accum.c) */
/* several ranks: the gradient reductions' and weight all-gathers' state (engine_dp.c) */
struct eng_dp;
struct eng_pg; /* stage 3 on several ranks: the parameter gathers' state (engine_dp3.c) */

struct zo_engine {
  /* ---- the core: configuration, device, streams, tensor table, memory plan, optimizer state (engine.c, plan.c,
   * engine_step.c) */
  zo_config_t cfg;
  /* getpid() at zo_engine_create(): only that process may use or destroy the engine (a fork()ed
   * child has a copy of this struct but none of its threads; eng_check_owner) */
  long owner_pid;
  zo_device_t *dev;
  int own_dev;
  zo_comm_t *comm;
  int own_comm;
  int rank, world;
  zo_offload_device tier;
  zo_dtype wdtype; /* working weights */
  /* gradients handed to grad_ready (bf16 with bf16.enabled, fp16 with fp16.enabled) */
  zo_dtype gdtype;
  zo_dtype sdtype; /* exp_avg and exp_avg_sq (zoffload.optimizer_state_dtype) */
  zo_dtype adtype; /* the host gradient shard p->grad that Adam and the norm read: gdtype when
                                gradient_accumulation_steps is 1, else fp32; data_types.grad_accum_dtype overrides */
  size_t esz
      [SL_KINDS]; /* bytes per element of each kind of state, and [ST_GRAD] of the gradient (nvme) */
  int finalized;
  int fin_failed; /* zo_engine_finalize() failed past its argument checks: only destroy is accepted */
  zo_adam_pool_t *pool;   /* persistent Adam threads, bound to physical cores */
  zo_adam_task_t **tasks; /* one in-flight update per tensor (none, cpu) */
  int n_grads;            /* gradients handed over in this step */
  int dpu;         /* zoffload.delayed_param_update: step N's Adam overlaps step N+1's compute */
  int dpu_pending; /* Adam tasks of the last step still to be finished and published */
  /* the last step's Adam tasks are finished (eng_dpu_finish) but their weights not published yet */
  int dpu_unpublished;
  host_buf grad_host2; /* DPU: second gradient buffer (the last step's Adam reads the other) */
  /* DPU: second staging of the working copy (the last step's uploads read the other) */
  host_buf stage_host2;
  int early_adam; /* this step's updates start as gradients land (no clipping, no fp16, state on cpu/none) */
  zo_adam_hparams early_hp; /* their hyperparameters (those zo_engine_step would use) */
  /* zo_engine_set_lr(): >= 0 replaces the config's schedule; -1 (default): none */
  double lr_override;
  double *norm_parts; /* cpu, none: every shard's p->norm_part */
  /* recorded after the last copy that reads a caller's gradient (zo_engine_grad_fence) */
  zo_event_t *grad_read;
  int grad_read_set;
  zo_param_t **params;
  int n_params, cap_params;
  /* elements of all tensors, <= ZO_ENGINE_MAX_ELEMS (register_param refuses more) */
  size_t total_el;
  zo_stream_t *copy_stream;
  zo_event_t *weights_ready;
  /* the caller's (zo_engine_set_compute_stream), or NULL: compute is synchronous */
  zo_stream_t *compute_stream;
  zo_event_t *compute_mark; /* recorded on compute_stream where the copy stream must wait for it */
  /* Device memory: every engine allocation is a block of this arena (one
   * reservation, defragmented by compaction). dev_blk: the resident block. */
  zo_arena_t *arena;
  zo_arena_block_t *dev_blk;
  /* Elements of working copies held on the device as blocks of their own (fetched, kept, or in flight; parameter
   * offload): added by the fetch coordinator, subtracted by eng_drop_device_copy(). */
  size_t dev_live_el;
  /* host buffers (cpu/nvme): gradients, working-dtype staging, cpu state */
  host_buf grad_host, stage_host, state_host[ST_KINDS];
  void *dev_block; /* device: all working weights (+ state and grads for "none") */
  /* device Adam: double[n_params][ZO_DEV_SQNORM_BLOCKS] gradient norm partials (in dev_block),
   * written on the copy stream as each gradient lands */
  double *dnorm_dev;
  /* device Adam on several ranks: the plan's dev_stage_off region (engine_dp.c red_land) */
  void *dstage_dev;
  host_buf dnorm_host; /* device Adam: their pinned host copy, read at the step */
  size_t dev_block_bytes;
  size_t swap_align;
  zo_plan *plan; /* the plan finalize allocated by (zoffload/placement.h predicts from it) */
  int placed;    /* zo_engine_place() chose the budgets (placement "auto") */
  /* the budget (elements) the plan picks resident sub-groups by; set before finalize */
  size_t opt_res_el;
  zo_plan_buf ledger[ZO_PLAN_MAX_BUFS];
  int n_ledger;
  size_t pageable_bytes;   /* their unregistered bytes, all buffers */
  char pageable_first[40]; /* the first one's plan purpose */
  char pageable_why[256];  /* the registration error */
  int64_t step;            /* applied optimizer steps */
  double loss_scale;
  int64_t ls_iter, ls_last_overflow;
  int ls_hysteresis;
  zo_offload_device ptier; /* offload_param.device */
  /* stage 3 on several GPU ranks with offload_param "none": the parameters are partitioned in device memory.
   * ptier is then ZO_OFFLOAD_CPU (the partitioned path: fetch, gather, release) with this rank's blocks in
   * param_dev, a region of the device block, instead of param_host; the gathers' ring is device memory too */
  int pdev;
  char *param_dev;
  /* stage 3 on several ranks of the host device: offload_param "none" turned into "cpu" (its memory is the
   * host's); a plan for a GPU (a dry run) partitions in device memory instead (pdev) */
  int pconv;
  /* cpu: every tensor's working copy; nvme: those of the cached tensors (p->pw_host) */
  host_buf param_host;
  /* nvme: the host cache's budget in elements (offload_param.max_in_cpu when written, else 0;
   * eng_set_param_cache); the plan caches whole tensors within it */
  size_t pcache_el;
  /* nvme: params.swp, one padded extent per uncached tensor; NULL when every tensor is cached */
  zo_swap_file_t *pfile;
  /* working weights (offload_param nvme): the optimizer state's (eng_nv_swap) when the paths
   * agree */
  zo_swap_t *pswap;
  int own_pswap;

  struct eng_counters ctr;

  /* ---- gradient accumulation (engine_accum.c) */
  /* from create (eng_acc_create) to destroy (eng_acc_free); never NULL in between */
  struct eng_acc *acc;

  /* ---- several ranks: gradient reductions and the all-gather of working weights (engine_dp.c) */
  /* several ranks: from finalize (eng_dp_alloc) to destroy (eng_dp_free); else NULL */
  struct eng_dp *dp;

  /* ---- stage 3 on several ranks: the parameter gathers (engine_dp3.c) */
  /* stage 3 on several ranks: from finalize (eng_pg_alloc) to destroy (eng_pg_free); else NULL */
  struct eng_pg *pg;

  /* ---- offload_optimizer nvme: the optimizer-state pipeline over sub-groups (engine_nvme.c) */
  struct eng_nv *nv; /* NULL unless offload_optimizer.device is nvme (eng_nv_create) */

  /* ---- offload_optimizer nvme: gradients in grad.swp (engine_gradnv.c) */
  struct eng_gnv *gnv; /* NULL until finalize allocates it (eng_gnv_alloc), and unless nvme */

  /* ---- offload_param nvme: the write-back ring (engine_wb.c) */
  /* the pinned ring of new working weights bound for params.swp, and its live regions */
  struct eng_wb *wb;

  /* ---- parameter offload: the trace of the fetch order (engine_trace.c), from create to
   * destroy */
  struct eng_trace *trace;

  /* ---- parameter offload: the fetch coordinator (engine_fetch.c) */
  /* the trace of the fetch order, the nvme staging buffers, device-held elements */
  struct eng_fetch *fetch;

  /* ---- zo_engine_offload_states(): the moved device regions (engine_states.c); NULL while nothing is offloaded */
  struct eng_states *states;
};

/* A byte ring of @cap whose regions are freed oldest first: with @live regions, the oldest at @tail and the
 * next free byte at @head, place @bytes contiguously at *off. Returns 0 when they do not fit now. */
static inline int eng_ring_take(size_t cap, size_t head, size_t tail, int live, size_t bytes,
                                size_t *off) {
  if (!live) return *off = 0, bytes <= cap;
  if (head > tail) {
    if (cap - head >= bytes) return *off = head, 1;
    if (tail >= bytes) return *off = 0, 1;
    return 0;
  }
  if (head < tail && tail - head >= bytes) return *off = head, 1;
  return 0;
}

/* Device Adam: offload_optimizer "none" on a device whose memory the host cannot address (a GPU): master weights,
 * moments and gradients in device memory, updated by the kernel of gpu/adam_device.h on the copy stream. */
static inline int eng_device_adam(const zo_engine_t *e) {
  return e->tier == ZO_OFFLOAD_NONE && e->dev && !zo_device_host_addressable(e->dev);
}
/* Per-tensor readiness of resident working weights: optimizer state in host memory (cpu), parameters on the device,
 * one rank. Each tensor's upload records its own p->ready (eng_queue_upload() is the only writer of its device
 * copy), so the forward's fetch of a tensor waits for that tensor's upload only, not the whole step's. Otherwise
 * fetches wait for e->weights_ready (several ranks upload in eng_dp_publish(); device Adam writes in place). */
static inline int eng_ready_per_tensor(const zo_engine_t *e) {
  return e->ptier == ZO_OFFLOAD_NONE && (e->tier == ZO_OFFLOAD_CPU || e->tier == ZO_OFFLOAD_NVME) &&
         e->world == 1;
}
/* Delayed update with the state on nvme, one rank: one staging buffer for the working copy (no
 * stage_host2); a sub-group's Adam starts once the last uploads of its tensors have left it (their
 * p->ready, engine_nvme.c). Else the staging is double (the cpu tier queues every Adam at once). */
static inline int eng_dpu_one_stage(const zo_engine_t *e) {
  return e->dpu && e->tier == ZO_OFFLOAD_NVME && eng_ready_per_tensor(e);
}

/* Gradient accumulation (gradient_accumulation_steps > 1) or an accumulation dtype other than the hand-over's:
 * zo_engine_grad_accumulate() and fp32 hand-overs are accepted (staging and the reduction ring hold fp32). */
static inline int eng_acc_ok(const zo_engine_t *e) {
  return e->cfg.gradient_accumulation_steps > 1 || e->adtype != e->gdtype;
}

/* zoffload.early_adam false: a tensor's gradient may take further contributions after its grad_ready()
 * (zo_engine_grad_reopen), added through the staging ring (one rank, cpu), which is then planned even when
 * nothing else needs it. */
static inline int eng_acc_staged(const zo_engine_t *e) {
  return eng_acc_ok(e) || !e->cfg.zoffload.early_adam;
}

/* ---------------------------------------------------------------- engine_core.c (calls no other
 * engine file) */

/* Device Adam: copy @nbytes between host and device memory on the copy stream and wait for it
 * (@kind H2D/D2H). */
zo_status eng_dev_copy(zo_engine_t *e, void *dst, const void *src, size_t nbytes,
                       zo_copy_kind kind);
/* A host buffer of @nbytes (0: none), pinned when @pin (zo_host_alloc: the pinned pool, registered with CUDA on a
 * CUDA device); ZO_ERR_OUT_OF_MEMORY. */
zo_status eng_host_buf_alloc(host_buf *b, size_t nbytes, int pin);
/* eng_host_buf_alloc() of a buffer of the plan named @purpose, noted in the ledger. */
zo_status eng_host_buf_alloc_as(zo_engine_t *e, host_buf *b, const char *purpose, size_t nbytes,
                                int pin);
/* A pinned host buffer of the plan (@purpose, @nbytes at @ptr) just allocated: on a CUDA device, every byte of it must
 * be registered with CUDA; ZO_ERR_CUDA naming it, the error and the way out when not, unless
 * zoffload.allow_pageable_host (then noted for finalize's one warning). ZO_OK on other devices. */
zo_status eng_pin_check(zo_engine_t *e, const char *purpose, const void *ptr, size_t nbytes);
/* ZO_OK, or ZO_ERR_INVALID_USAGE naming @what when zo_engine_finalize() failed on @e (nothing but
 * destroy then). */
zo_status eng_check_usable(const zo_engine_t *e, const char *what);
/* ZO_OK when this process created @e; else (a fork()ed child holding a copy of its parent's engine, whose Adam
 * threads, stream threads and locks stay with the parent) ZO_ERR_INVALID_USAGE naming @what, both pids and the way
 * out, at once. Every public zo_engine_* call that takes an engine is to check it first (ENG_CHECK_OWNER), before
 * it waits on or queues to any thread; eng_check_usable() (and so zo_plan_make()) includes it. */
zo_status eng_check_owner(const zo_engine_t *e, const char *what);
/* eng_check_owner(), then, while states are offloaded, eng_states_check() (engine_states.c). */
#define ENG_CHECK_OWNER(e, what) ZO_CHECK(eng_states_check(e, what))
/* The device arena's default size with @avail device bytes available (zoffload.device_arena_bytes 0; engine.c's
 * create_arena says why): all of them on a host device, 90% on CUDA. Not aligned. */
size_t eng_arena_default_bytes(const zo_engine_t *e, size_t avail);
/* Free a buffer of eng_host_buf_alloc (an empty one too); *b is zeroed. */
void eng_host_buf_free(host_buf *b);
/* Note one allocation finalize requested (a buffer of @bytes, or a file of that size) in the
 * ledger. */
void eng_ledger_note(zo_engine_t *e, zo_tier t, const char *purpose, size_t bytes, int pinned,
                     int path);
/* dst[i] = src[i] (cast; @add 0) or dst[i] = dst[i] + src[i] (fp32 sum, rounded to @dt once), i <
 * n. */
void eng_acc_add(void *dst, zo_dtype dt, const void *src, zo_dtype st, size_t n, int add);
/* Gradient bytes the engine's adds and norms processed inside a stream host function (zo_tl_host_func), over the
 * process: must stay 0 (host functions of a stream share one driver thread; work there stalls the stream's later
 * copies). Counted on both backends (the host device's stream threads and the cuda backend's host-function
 * trampoline set zo_tl_host_func). For tests. */
extern _Atomic uint64_t eng_host_func_grad_bytes;
static inline void eng_note_grad_bytes(size_t nbytes) {
  if (zo_tl_host_func)
    atomic_fetch_add_explicit(&eng_host_func_grad_bytes, nbytes, memory_order_relaxed);
}
/* eng_extent_unit_at() for the engine's swap alignment. */
size_t eng_extent_unit(const zo_engine_t *e);
/* Elements of a padded extent for @n elements (nvme layout). */
uint64_t eng_padded_el(const zo_engine_t *e, size_t n);
/* Wait *@req on @sw, timed as exposed swap wait; *@req becomes NULL. */
zo_status eng_swap_wait(zo_engine_t *e, zo_swap_t *sw, zo_swap_req_t **req);

/* Pin p->blk (no compaction moves it) and refresh p->weights; a no-op when pinned. */
zo_status eng_blk_pin(zo_engine_t *e, zo_param_t *p);
/* Let a compaction move p->blk once the work queued on @last_use (NULL: none) is done. */
zo_status eng_blk_unpin(zo_engine_t *e, zo_param_t *p, zo_stream_t *last_use);

/* Drop a released tensor's device copy (parameter offload only): its block freed after the compute queued so far,
 * e->dev_live_el lowered. */
void eng_drop_device_copy(zo_engine_t *e, zo_param_t *p);

/* ---------------------------------------------------------------- engine_states.c */

struct eng_states;
/* Every public call's first check (ENG_CHECK_OWNER): eng_check_owner(), and while zo_engine_offload_states() is in
 * force, ZO_ERR_INVALID_USAGE naming @what and the offloaded kinds for a call that needs the moved memory (all but
 * those engine.h lists as working while offloaded). */
zo_status eng_states_check(const zo_engine_t *e, const char *what);
/* zo_engine_mem_info: the host copy's bytes added to *@host_bytes, and when pinned to *@pinned_bytes. NULL: none. */
void eng_states_host_mem(const struct eng_states *s, size_t *host_bytes, size_t *pinned_bytes);
/* At destroy, before the device goes: the host copy, the kept device allocation, e->states (NULL after). */
void eng_states_free(zo_engine_t *e);

/* ---------------------------------------------------------------- engine_trace.c (calls no other
 * engine file) */

/* At create: e->trace, empty (nothing recorded, nothing adopted). At destroy: freed, e->trace NULL
 * (NULL: a no-op). */
zo_status eng_trace_create(zo_engine_t *e);
void eng_trace_free(zo_engine_t *e);
/* Fetches follow the trace: a trace was adopted, this step has not left it, and zo_engine_set_trace() did not turn
 * it off. */
int eng_trace_follow(const struct eng_trace *t);
/* Fetches in the trace (0 before the first step's end), the position of the next fetch in it, and the tensor index
 * of the fetch at position @pos (0 <= pos < eng_trace_len()). */
int eng_trace_len(const struct eng_trace *t);
int eng_trace_pos(const struct eng_trace *t);
int eng_trace_at(const struct eng_trace *t, int pos);
/* Position in the trace, at or after the current one, where tensor @idx is fetched next; INT_MAX when not again in
 * this step. */
int eng_trace_next_use(const struct eng_trace *t, int idx);
/* Fetches recorded in this step so far. */
int eng_trace_recorded(const struct eng_trace *t);
/* zo_engine_set_trace(e, 0) is in force (@off 1): fetches are neither recorded nor followed. */
int eng_trace_off(const struct eng_trace *t);
void eng_trace_set_off(struct eng_trace *t, int off);
/* A fetch of tensor @idx: recorded (unless off), and the position moves on when it is the trace's next; *@left 1
 * when it is not, the trace then not followed for the rest of the step (once: later fetches give 0). Errors:
 * ZO_ERR_OUT_OF_MEMORY (nothing recorded). */
zo_status eng_trace_record(struct eng_trace *t, int idx, int *left);
/* End of step: the step's recorded order becomes the trace (kept when it is the same), followed from position 0.
 * Errors: ZO_ERR_OUT_OF_MEMORY (no trace then: fetches on demand until a later step adopts one). */
zo_status eng_trace_adopt(struct eng_trace *t);

/* ---------------------------------------------------------------- engine_wb.c */

/* At create: e->wb, the write-back ring's bookkeeping (no ring yet). Every engine has one from then
 * on. */
zo_status eng_wb_create(zo_engine_t *e);
/* At finalize, offload_param "nvme": the ring of the plan's wb_bytes (none when every tensor is cached in
 * param_host), noted in the ledger. */
zo_status eng_wb_ring_alloc(zo_engine_t *e, const zo_plan *plan);
/* At destroy: wait the params.swp writes in flight (errors ignored), free the ring and e->wb (NULL:
 * a no-op). */
void eng_wb_free(zo_engine_t *e);
/* Where the working-dtype copy of shard elements [off, ...) of @p is written
 * (see the comment at its definition). */
void *eng_working_dst(zo_engine_t *e, zo_param_t *p, size_t off);
/* A write-back region for shard elements [off, off + n) of @p (offload_param
 * nvme; a no-op otherwise); its writer is *@task (NULL: a synchronous cast),
 * set on the copy stream's thread when @early. Blocks while the ring is full. */
zo_status eng_wb_alloc(zo_engine_t *e, zo_param_t *p, size_t off, size_t n, zo_adam_task_t **task,
                       int early);
/* Collect finished params.swp writes without blocking; free regions oldest first. */
zo_status eng_wb_reap(zo_engine_t *e);
/* The newest region of @p from shard element 0 when its weights are written (no longer being filled) and it holds
 * exactly @n elements (the fetched tensor, or this rank's block), else NULL: a fetch may copy from it instead of
 * reading params.swp. Valid until the next eng_wb_alloc(), and the next eng_wb_reap() unless held. */
wb_entry *eng_wb_written(const struct eng_wb *wb, const zo_param_t *p, size_t n);
/* The bytes of region @w in the ring (pinned host memory; its tensor's elements in the working
 * dtype). */
const void *eng_wb_data(const struct eng_wb *wb, const wb_entry *w);
/* @hold 1: region @w is not freed by eng_wb_reap() (a fetch is about to copy from it); 0: it may be
 * again. */
void eng_wb_hold(wb_entry *w, int hold);
/* A host-to-device copy out of region @w was queued (its tensor's ready event marks its end): @w lives until it
 * has landed. */
void eng_wb_mark_h2d(wb_entry *w);
/* Bytes of the ring (pinned host memory; 0 before finalize or without one). */
size_t eng_wb_ring_bytes(const struct eng_wb *wb);
/* offload_param nvme, @p's working copy in params.swp: its filled region of shard elements [off, off + n) (Adam or a
 * cast wrote it) is written to params.swp, once the last write of that range is on disk; *@src its data (the
 * source of the device copy's refresh), *@w the region (NULL, and ZO_ERR_INVALID_USAGE, when none is filling: a bug).
 * The write is left in flight (eng_wb_reap, eng_wb_drain). */
zo_status eng_wb_write(zo_engine_t *e, zo_param_t *p, size_t off, size_t n, const void **src,
                       wb_entry **w);
/* Live regions of the ring (0 once every write is on disk and reaped). For tests. */
int eng_wb_live(const struct eng_wb *wb);
/* Wait the params.swp writes of @p in flight (those overlapping [off, off + n) when n > 0). */
zo_status eng_wb_drain(zo_engine_t *e, const zo_param_t *p, size_t off, size_t n);

/* The publish of new working weights into the device copies (and, for nvme parameters,
 * params.swp): */
/* Publish new working weights of shard elements [off, off + n) written at eng_working_dst(). */
zo_status eng_queue_upload(zo_engine_t *e, zo_param_t *p, size_t off, size_t n);
/* Working weights of [off, off + n) cast from fp32 @master, then published. */
zo_status eng_upload_shard(zo_engine_t *e, zo_param_t *p, size_t off, size_t n,
                           const float *master);
/* Wait an Adam task of tensor @p's elements [@off, @off + @n) (*task becomes NULL); its error prefixed with the
 * tensor and range. */
zo_status eng_wait_adam(zo_adam_task_t **task, const zo_param_t *p, size_t off, size_t n);
/* eng_wait_adam(), then publish the working weights it wrote (eng_queue_upload). */
zo_status eng_finish_adam(zo_engine_t *e, zo_adam_task_t **task, zo_param_t *p, size_t off,
                          size_t n);

/* ---------------------------------------------------------------- engine_fetch.c */


/* At create: e->fetch, the fetch coordinator (no trace, no staging buffers yet). Every engine has
 * one from then on. */
zo_status eng_fetch_create(zo_engine_t *e);
/* At finalize, offload_param "nvme" with params.swp: the plan's n_pstage staging buffers of pstage_el elements of
 * the nvme reads, noted in the ledger. */
zo_status eng_fetch_stage_alloc(zo_engine_t *e, const zo_plan *plan);
/* At destroy: free the staging buffers, the trace and e->fetch (NULL: a no-op). No read may be in
 * flight. */
void eng_fetch_free(zo_engine_t *e);
/* Staging buffer @b of nvme reads; NULL past the plan's n_pstage (none when every tensor is cached). Stage 3 on
 * several ranks reads a rank's own block through buffer 0, which no fetch uses there (engine_dp3.c). */
void *eng_fetch_stage(const struct eng_fetch *f, int b);
/* Bytes of every staging buffer together (pinned host memory; 0 without any). */
size_t eng_fetch_stage_bytes(const zo_engine_t *e);
/* Prefetch along the trace from the current position, within the budgets. */
zo_status eng_prefetch_ahead(zo_engine_t *e);
/* Let every fetch in flight land (before the optimizer rewrites working copies). */
zo_status eng_settle_fetches(zo_engine_t *e);
/* End of step: adopt the step's fetch order as the trace when it changed. */
zo_status eng_trace_end_step(zo_engine_t *e);

/* ---------------------------------------------------------------- plan.c */

/* The buffer shapes the plan sizes and the parts allocate by (in plan.c, so that the planner needs
 * no part). */
/* Bytes per element of the widest hand-over accepted (sizes the staging buckets and the reduction
 * ring). */
size_t eng_acc_in_size(const zo_engine_t *e);
/* One rank: elements per staging bucket and the number of buckets (0 when no staging is needed); @dev_adam: for device
 * Adam (eng_device_adam(), or the plan's device kind), which needs none. */
void eng_acc_ring_shape(const zo_engine_t *e, int dev_adam, size_t *bucket_el, int *n_buckets);
/* offload_optimizer "nvme": elements per gradient I/O buffer (and per staging bucket): min(reduce_bucket_size,
 * largest shard, sub_group_size) rounded up to a multiple of 64 Ki elements (the norm's chunk) and of the extent unit. */
size_t eng_gnv_el(const zo_engine_t *e);
/* Before finalize: the host cache's budget, @el elements (SIZE_MAX: every tensor); replaces the config's
 * offload_param.max_in_cpu. ZO_ERR_INVALID_ARG (NULL), ZO_ERR_INVALID_USAGE (after finalize, or a failed one). */
zo_status eng_set_param_cache(zo_engine_t *e, size_t el);

/* ---------------------------------------------------------------- engine_dp.c */

/* Elements of @p padded to world blocks of part_n: what its all-gathers and reduce-scatters
 * move. */
static inline size_t eng_dp_padded(const zo_engine_t *e, const zo_param_t *p) {
  return p->part_n * (size_t)e->world;
}
/* Several ranks (collective): ZO_OK only when every rank's @mine is; a rank that succeeded hears of another's
 * failure as "@what: N other rank(s) failed". One rank: @mine. */
zo_status eng_dp_agree(zo_engine_t *e, zo_status mine, const char *what);
/* Several ranks (collective): rank 0's outcome @st0 of a step only it takes, handed to every rank (rank 0 gets
 * @st0 back; another rank an error naming @what when it failed). One rank: @st0. */
zo_status eng_dp_from_rank0(zo_engine_t *e, zo_status st0, const char *what);
/* Delayed update: wait the last step's Adam tasks and queue what they wrote, without publishing it (on several
 * ranks the publish is a collective; this is not): the master weights are then final. ZO_OK when none is pending;
 * else the first task's error. engine_step.c. */
zo_status eng_dpu_finish(zo_engine_t *e);
/* At create with world > 1: what the multi-rank engine cannot do yet, refused naming the key. */
zo_status eng_dp_check(const zo_engine_t *e);
/* At finalize, several ranks: e->dp, with the gradient reduction ring and the gather buffer of @plan
 * (dp_grad_bytes, dp_gather_bytes: the host buffers "dp_grad" and "dp_gather", or with eng_dp_dev regions of the
 * device block at dp_dev_grad_off and dp_dev_gather_off, placed by then, and the host "dp_land") and the
 * reduction queue. On a failure what was allocated stays for eng_dp_free. */
zo_status eng_dp_alloc(zo_engine_t *e, const zo_plan *plan);
/* The reduction ring and the gather buffer in the device block (eng_dp_dev) point into e->dev_block (NULL while it
 * is not in device memory): at eng_dp_alloc, and again after zo_engine_offload_states / reload_states moved the
 * block. Nothing in flight. */
void eng_dp_rebase(zo_engine_t *e, const zo_plan *plan);
/* At destroy: wait what is in flight (errors ignored), free the queue's events, the buffers and e->dp (NULL after);
 * a no-op when e->dp is NULL. */
void eng_dp_free(zo_engine_t *e);
/* zo_engine_mem_info: the bytes of @d's host buffers added to *@host_bytes, and of those pinned to *@pinned_bytes;
 * returns the bytes added (zo_engine_mem.comm_bytes). 0 for NULL (one rank, or before finalize). */
size_t eng_dp_host_mem(const struct eng_dp *d, size_t *host_bytes, size_t *pinned_bytes);
/* Start the reduction of one contribution to @p's gradient (the whole tensor at @grad on the device, @dtype)
 * over the ranks; when it completes, this rank's block is copied into p->grad (cast or added: engine_accum.c)
 * and, with @last (zo_engine_grad_ready), eng_grad_landed(p) runs. With overlap_comm off it completes before
 * the call returns. */
zo_status eng_dp_grad(zo_engine_t *e, zo_param_t *p, const void *grad, zo_dtype dtype, int last);
/* Move reductions on without blocking (@wait_oldest 0), or finish the oldest first (1). */
zo_status eng_dp_progress(zo_engine_t *e, int wait_oldest);
/* Finish every reduction in flight (zo_engine_step, before the global norm). */
zo_status eng_dp_drain(zo_engine_t *e);
/* Complete @req: wait for it (@wait; the time blocked counts as exposed communication) or test it; *done = 1
 * when it completed, and then the request is freed (also on an error). */
zo_status eng_comm_finish(zo_engine_t *e, zo_comm_req_t *req, int wait, int *done);
/* All-gather @p's working weights (NULL: every tensor) from each rank's shard at eng_working_dst() and queue
 * their upload to the device copy. Collective. */
zo_status eng_dp_publish(zo_engine_t *e, zo_param_t *p);

/* ---------------------------------------------------------------- engine_dp3.c */

/* Parameters partitioned over ranks: stage 3 on several ranks (their host tier holds the rank's
 * shard). */
static inline int eng_dp3(const zo_engine_t *e) { return e->world > 1 && e->cfg.zero.stage == 3; }
/* Elements of @p's working copy that this rank's host tier holds: the tensor, or at stage 3 on several ranks its
 * block (part_n). */
static inline size_t eng_pw_held(const zo_engine_t *e, const zo_param_t *p) {
  return eng_dp3(e) ? p->part_n : p->n;
}
/* @p's working copy is in params.swp: offload_param "nvme" and not cached in param_host. */
static inline int eng_pw_in_file(const zo_engine_t *e, const zo_param_t *p) {
  return e->ptier == ZO_OFFLOAD_NVME && !p->pw_host;
}
/* NCCL communicators the engine uses, each holding ZO_COMM_NCCL_STAGE_BYTES of device staging: its comm, and the
 * gathers' split of it at stage 3 on several ranks (eng_pg_alloc); 0 on other backends. */
static inline int eng_nccl_comms(const zo_engine_t *e) {
  return !strcmp(zo_comm_backend(e->comm), "nccl") ? 1 + eng_dp3(e) : 0;
}
/* Several ranks whose collectives take device memory: the nccl backend (on a GPU, as it always is). The
 * gradients are then reduced, and the updated weights gathered, in device memory (engine_dp.c); only a rank's
 * block crosses PCIe, and only when the optimizer is offloaded. */
static inline int eng_dp_dev(const zo_engine_t *e) {
  return e->world > 1 && !strcmp(zo_comm_backend(e->comm), "nccl");
}
/* At finalize, stage 3 on several ranks (collective): e->pg, with the gather ring of @plan (pg_ring_bytes: the
 * host buffer "pg_ring", or with e->pdev the device block's region at dev_pg_ring_off), its communicator and
 * queue. On a failure what was allocated stays for eng_pg_free. */
zo_status eng_pg_alloc(zo_engine_t *e, const zo_plan *plan);
/* offload_param nvme: the pinned buffers (borrowed: the fetch coordinator's staging buffers, offload_param.
 * buffer_count of them, which no fetch uses at stage 3 on several ranks) this rank's blocks are read from
 * params.swp into, ahead of their all-gathers; set after eng_pg_alloc. */
void eng_pg_set_stages(struct eng_pg *pg, const struct eng_fetch *f);
/* 1 when @pg's ring is device memory (parameters partitioned in device memory, over NCCL): what
 * eng_pg_src() returns is then a device pointer. */
int eng_pg_on_device(const struct eng_pg *pg);
/* A device gather ring points into e->dev_block (NULL: not in device memory): at eng_pg_alloc, and again after
 * zo_engine_offload_states / reload_states moved the block. No gather in flight (eng_pg_drop_pending). */
void eng_pg_rebase(zo_engine_t *e, const zo_plan *plan);
/* At destroy: finish the gathers queued (errors ignored), free the ring, the queue, the communicator and e->pg
 * (NULL after); a no-op when e->pg is NULL. */
void eng_pg_free(zo_engine_t *e);
/* zo_engine_mem_info: the bytes of @g's gather ring added to *@host_bytes, and when pinned to *@pinned_bytes;
 * returns the bytes added (zo_engine_mem.comm_bytes). 0 for NULL (not stage 3 on several ranks, or before
 * finalize). */
size_t eng_pg_host_mem(const struct eng_pg *g, size_t *host_bytes, size_t *pinned_bytes);
/* A new trace was adopted (eng_trace_end_step): gathers ahead start again from its position 0. A
 * no-op for NULL. */
void eng_pg_rewind(struct eng_pg *g);
/* Queue gathers along the trace, in trace order, while the ring and stage3_prefetch_bucket_size allow, and
 * start those whose blocks are in memory or have been read (offload_param nvme: the reads are submitted here,
 * up to one a staging buffer, and each all-gather starts, in queue order, once its read has landed: at this or
 * a later call of eng_pg_issue() or eng_pg_src()). */
zo_status eng_pg_issue(zo_engine_t *e);
/* A demand fetch (no trace, or trace off): gather @p now; its entry is the newest (position -1). */
zo_status eng_pg_demand(zo_engine_t *e, zo_param_t *p);
/* The gathered tensor for trace position @pos (-1: the newest demand entry): *src set when complete (waited for
 * with @wait), else NULL. */
zo_status eng_pg_src(zo_engine_t *e, int pos, int wait, const void **src);
/* A host-to-device copy out of @pos's region was queued. */
void eng_pg_mark_h2d(zo_engine_t *e, int pos);
/* The fetch of @pos is done: free its region (after the copy out of it has landed). */
zo_status eng_pg_consume(zo_engine_t *e, int pos);
/* Finish and drop gathers issued ahead that no fetch will consume (the trace was left or turned
 * off). */
zo_status eng_pg_drop_pending(zo_engine_t *e);
/* After the optimizer step: drop every device copy (their weights are stale; the next fetches
 * gather anew). */
void eng_pg_drop_device_copies(zo_engine_t *e);

/* ---------------------------------------------------------------- engine_accum.c */

/* At create: e->acc (ZO_ERR_OUT_OF_MEMORY when it cannot be allocated), the accumulation dtype e->adtype and
 * whether accumulation / fp32 hand-overs are accepted. */
zo_status eng_acc_create(zo_engine_t *e);
/* At finalize: the staging ring of @bytes (the plan's "grad_staging"), its events, and the fence
 * event. */
zo_status eng_acc_alloc(zo_engine_t *e, size_t bytes);
/* At destroy: what eng_acc_alloc allocated, and e->acc (NULL after). Also after a create that failed (e->acc may be
 * NULL then). */
void eng_acc_free(zo_engine_t *e);
/* Tensors with accumulated contributions (zo_engine_grad_accumulate) in this step: checkpoint save and load refuse
 * while it is > 0. */
int eng_acc_pending(const struct eng_acc *a);
/* One contribution of @p was accumulated (zo_engine_grad_accumulate): p->n_acc counted, and @p
 * among the pending. */
void eng_acc_note(struct eng_acc *a, zo_param_t *p);
/* The step took the accumulated contributions (zo_engine_step, which zeroes each p->n_acc): none is
 * pending. */
void eng_acc_end_step(struct eng_acc *a);
/* zo_engine_mem_info: the bytes of @a's staging ring added to *@host_bytes, and when pinned to *@pinned_bytes;
 * returns the bytes added. 0 for NULL. */
size_t eng_acc_host_mem(const struct eng_acc *a, size_t *host_bytes, size_t *pinned_bytes);
/* One rank: the contribution at @grad (@dtype, whole tensor on the device) into p->grad through the staging
 * buckets; with @last, eng_grad_landed(p) follows on the copy stream. */
zo_status eng_acc_stage(zo_engine_t *e, zo_param_t *p, const void *grad, zo_dtype dtype, int last);
/* Device Adam, one rank: the contribution at @grad (@dtype, whole tensor on the device) copied (the first, in the
 * accumulation dtype) or cast or added (gpu/adam_device.h zo_grad_acc_device: eng_acc_add's arithmetic) into
 * p->grad, the device gradient shard in the accumulation dtype, on the copy stream; grad_read recorded behind. */
zo_status eng_acc_device(zo_engine_t *e, zo_param_t *p, const void *grad, zo_dtype dtype);
/* The checks every hand-over shares (@what names the call in messages); nothing changes when one
 * fails. A tensor whose gradient was handed over this step is refused, unless @reopened_ok and
 * zo_engine_grad_reopen() reopened it (p->reopen: grad_ready's further contribution). */
zo_status eng_acc_check(const zo_engine_t *e, const zo_param_t *p, const void *grad, zo_dtype dtype,
                        const char *what, int reopened_ok);
/* Wait for the adds the staging buckets' host functions queued on the pool (after zo_stream_synchronize of the
 * copy stream); the first failure, naming the tensor. */
zo_status eng_acc_drain(struct eng_acc *a);
/* The copy stream waits for the compute queued so far on the compute stream (which produced the
 * gradient). */
zo_status eng_acc_after_compute(zo_engine_t *e);

/* ---------------------------------------------------------------- engine_adam.c */

/* The norm's summation chunk (cpu_adam's ZO_SQNORM_CHUNK): a shard's squared norm is the in-order sum of its
 * chunks' squared norms, the bits of zo_grad_sqnorm_ex() over the whole shard. */
#define ENG_NORM_CHUNK ((size_t)65536)
/* elements of a staging bucket that only further backward passes use (eng_acc_staged without eng_acc_ok) */
#define ENG_REOPEN_BUCKET_EL ((size_t)1 << 22)
/* The hyperparameters of optimizer step e->step + 1 (the lr schedule or zo_engine_set_lr, betas, eps, AdamW or L2,
 * bias correction), every gradient multiplied by @clip / (loss_scale x world); weight decay is each tensor's. */
zo_adam_hparams eng_adam_hparams(const zo_engine_t *e, double clip);
/* The event "@p's gradient of this step has landed" (its final contribution is in p->grad, or on disk in grad.swp),
 * raised here only: @st the outcome of the work that brought it. Host memory: queues its norm (and its early Adam
 * update, e->early_adam) on the pool; nvme: takes the verdict of the norm summed on the way (p->sqnorm). Then
 * p->landed_st and, last, p->landed (release store: the NVMe pipeline may queue its sub-group). Runs on the copy
 * stream's thread (eng_grad_landed) or the engine thread; O(1), no CUDA call. Device Adam has no landing: its norm
 * is summed on the device and read at the step. */
void eng_grad_land(zo_param_t *p, zo_status st);
/* eng_grad_land(@arg, ZO_OK) as a stream host function (zo_launch_host_func), behind the copies of
 * the gradient. */
void eng_grad_landed(void *arg);
/* Wait for the norm tasks eng_grad_land() queued; sets each shard's sqnorm and nonfinite. */
zo_status eng_grad_norms_wait(zo_engine_t *e);
/* Queue the fused Adam update of shard elements [off, off + n) of @p on the pool (@grad: its
 * gradient, adtype[n]). */
zo_status eng_submit_adam(zo_engine_t *e, const zo_adam_hparams *hp, zo_param_t *p, size_t off,
                          size_t n, const void *grad, void *master, void *m, void *v,
                          zo_adam_task_t **task);

/* ---------------------------------------------------------------- engine_grad.c */

/* One progress step of every pipeline, without blocking: the gradient reductions in flight (several ranks), then
 * the NVMe pipeline (state reads and write-backs, gradient writes, updates whose gradients landed). The engine has
 * no thread of its own for these: every public call that hands a gradient over or fetches (zo_engine_grad_ready,
 * zo_engine_grad_accumulate, zo_engine_fetch, zo_engine_release) calls it once. */
zo_status eng_progress(zo_engine_t *e);
/* Block until every gradient handed over so far has landed: reduced over the ranks (several), copied or added into
 * p->grad or written to grad.swp (nvme), the staged adds done and the norms behind them summed. Engine thread; the
 * step's first wait (engine_step.c) and zo_engine_grad_reopen call it. */
zo_status eng_grads_wait_landed(zo_engine_t *e);

/* ---------------------------------------------------------------- engine_nvme.c */

/* At create (offload_optimizer "nvme"): the pipeline's state, zeroed, with the optimizer state's swap over the
 * directories @paths[n_paths] (striped when several; @so) into *@out; on an error *@out stays NULL. Its files and
 * buffers come at finalize. */
zo_status eng_nv_create(struct eng_nv **out, const char *const *paths, unsigned n_paths,
                        const zo_swap_opts *so);
/* Finalize, nvme: the plan's sub-groups and pieces (and every tensor's file_el), the state files and grad.swp, the
 * sub-groups' pinned slot buffers (registered with the swap), the resident sub-groups' state in host memory, and the
 * gradient I/O buffers (eng_gnv_alloc); each noted in the ledger. On an error what was allocated stays for
 * eng_nv_free. */
zo_status eng_nv_alloc(zo_engine_t *e, const zo_plan *plan);
/* Destroy: wait the sub-groups' Adam tasks still in flight (errors ignored; after an error), before the pool goes.
 * @nv NULL: nothing. */
void eng_nv_wait_tasks(struct eng_nv *nv);
/* Destroy: free e->nv (NULL: nothing) and set it NULL: the slot buffers, the resident state, and the swap (closes and
 * removes the files and the private directory). After eng_nv_quiesce, eng_gnv_free and the last use of e->pswap
 * (which may be this swap). */
void eng_nv_free(zo_engine_t *e);
/* The optimizer state's swap (e->pswap too when the paths agree); NULL when @nv is. */
zo_swap_t *eng_nv_swap(const struct eng_nv *nv);
/* State file @k (< SL_KINDS; ST_GRAD: grad.swp), or NULL: @nv NULL, or no files (every sub-group
 * resident). */
zo_swap_file_t *eng_nv_file(const struct eng_nv *nv, int k);
/* Memory accounting: bytes of state file @k (0 when there is none or @nv is NULL). */
uint64_t eng_nv_file_bytes(const struct eng_nv *nv, int k);
/* Memory accounting: host bytes of kind @k of the resident sub-groups (pageable; 0 when none or @nv
 * is NULL). */
size_t eng_nv_res_bytes(const struct eng_nv *nv, int k);
/* Memory accounting: elements of one kind's pinned streaming slot buffers, all slots together (their bytes: times
 * esz[k]); 0 when @nv is NULL. */
size_t eng_nv_stream_el(const struct eng_nv *nv);
/* Slot @s (streaming slots first, then one per resident sub-group; g->slot). After eng_nv_quiesce() slot 0 is free:
 * load_param, get_master and checkpoint load stream a shard through it, eng_nv_slot_el() elements per kind at a
 * time (their pieces outside the resident range, eng_nv_span). */
sg_slot *eng_nv_slot(struct eng_nv *nv, int s);
/* Elements per streaming slot buffer (the largest streamed sub-group; 0 when every one is
 * resident). */
size_t eng_nv_slot_el(const struct eng_nv *nv);
/* The sub-groups: their count, the @i-th (file order, < eng_nv_n_sgs), and the index of @g (for
 * messages). */
int eng_nv_n_sgs(const struct eng_nv *nv);
/* The last step's delayed update runs (its sub-groups not claimed yet hold its flags: g->dpu_next 0). */
int eng_nv_dpu_running(const struct eng_nv *nv);
sub_group *eng_nv_sg(struct eng_nv *nv, int i);
int eng_nv_sg_index(const struct eng_nv *nv, const sub_group *g);
/* Residency on (zoffload.optimizer_max_in_cpu): elements per piece, where gradient chunks are cut;
 * 0: not cut. */
size_t eng_nv_piece_el(const struct eng_nv *nv);
/* The step's first grad_ready(), when no step-wide fact is needed first: sub-groups' updates may start as their
 * gradients land, with @hp (this step's hyperparameters). */
void eng_nv_allow_adam(struct eng_nv *nv, const zo_adam_hparams *hp);

/* Elements per alignment unit of the narrowest kind of state (extent padding), for swap alignment @align:
 * extents padded to a multiple of it start and end aligned in every state file (and params.swp). */
static inline size_t eng_extent_unit_at(const zo_engine_t *e, size_t align) {
  size_t narrow = e->esz[ST_EXP_AVG] < e->esz[ST_MASTER] ? e->esz[ST_EXP_AVG] : e->esz[ST_MASTER];
  if (e->ptier == ZO_OFFLOAD_NVME && zo_dtype_size(e->wdtype) < narrow)
    narrow = zo_dtype_size(e->wdtype);
  if (e->tier == ZO_OFFLOAD_NVME && zo_dtype_size(e->adtype) < narrow)
    narrow = zo_dtype_size(e->adtype); /* grad.swp */
  return align / narrow;
}
/* Queue a read or write of elements [el, el + n_el) of state kind @k. */
zo_status eng_swap_io(zo_engine_t *e, int write, int k, uint64_t el, void *buf, uint64_t n_el,
                      zo_swap_req_t **req);
/* Collect a slot's finished requests (*done = 1 when none is left); @wait blocks for all. */
zo_status eng_slot_settle(zo_engine_t *e, sg_slot *sl, int wait, int *done);
/* Move the NVMe pipeline forward as far as it goes without blocking. */
zo_status eng_nv_advance(zo_engine_t *e);
/* zo_engine_step(): update every sub-group not yet updated, with @hp unless updates started early
 * (eng_nv_allow_adam); its state reads go ahead of queued write-backs meanwhile. Adds Adam time to *@adam_s. */
zo_status eng_nv_finish_step(zo_engine_t *e, const zo_adam_hparams *hp, double *adam_s);
/* After the step: next step's order, then its reads start. */
zo_status eng_nv_end_step(zo_engine_t *e);
/* Delayed update (engine_step.c): the step's sub-group updates with @hp run behind the next step's
 * compute, moved on by every engine call; nothing is uploaded until eng_nv_dpu_finish(). */
zo_status eng_nv_dpu_start(zo_engine_t *e, const zo_adam_hparams *hp);
/* Finish the delayed update (blocking), queue the uploads of every tensor's new working weights, and
 * end its step: the sub-groups this step's gradients took keep them. ZO_OK when none runs. */
zo_status eng_nv_dpu_finish(zo_engine_t *e);
/* A gradient of this step is about to reach @g: the delayed update of the last step finishes with
 * @g first (its gradients are read, its Adam done), and @g passes to this step. *@may_hold: whether
 * this step's gradients may stay in @g's slot (no: a streamed one while the delayed update still
 * needs the slots). */
zo_status eng_nv_dpu_claim(zo_engine_t *e, sub_group *g, int *may_hold);
/* Bring the pipeline to rest: every streaming slot free, every write on disk. Keeps the first
 * error. */
zo_status eng_nv_quiesce(zo_engine_t *e);
/* Shard elements [off, off + n) of @p at most, from @off on, that lie wholly in the files or wholly in the resident
 * range: returns their count (> 0 for n > 0) and sets *@res to where element @off's state of kind k lives in host
 * memory (res[k] for k < SL_KINDS) when resident, else NULL. */
size_t eng_nv_span(const zo_engine_t *e, const zo_param_t *p, size_t off, size_t n,
                   void *res[SL_KINDS]);

/* ---------------------------------------------------------------- engine_gradnv.c */

/* Finalize (from eng_nv_alloc): e->gnv with its gradient I/O buffers (the plan's grad_io_el elements each, one pinned
 * allocation noted as the plan's two "grad_swap_buffers"), zeroed. On an error what was allocated stays for
 * eng_gnv_free. */
zo_status eng_gnv_alloc(zo_engine_t *e, const zo_plan *plan);
/* Destroy: wait the gradient writes in flight (errors ignored), free e->gnv (NULL: nothing) and set it NULL. Before
 * eng_nv_free (the writes go through its swap). */
void eng_gnv_free(zo_engine_t *e);
/* Memory accounting: the gradient I/O buffers (one pinned allocation); an empty buffer when @gn is
 * NULL. */
const host_buf *eng_gnv_host(const struct eng_gnv *gn);

/* Shard elements [off, off + n) of @p's contribution at @src (@st; host memory) into grad.swp: cast (@add 0) or
 * added to what the file holds; @off a multiple of eng_gnv_el() (or 0). With @last (the final contribution of the
 * step) their squared norm is added to p->sqnorm (which the caller zeroes before the first chunk) chunk by chunk
 * from the shard's start (the bits of zo_grad_sqnorm_ex over the whole shard). Engine thread; writes may be left in flight (eng_gnv_land). */
zo_status eng_gnv_put(zo_engine_t *e, zo_param_t *p, size_t off, size_t n, const void *src,
                      zo_dtype st, int add, int last);
/* The final contribution of @p has been put (@st: the puts' outcome): it lands (p->nonfinite, p->landed_st,
 * p->landed) once its writes in flight are on disk, now or in eng_gnv_poll / eng_gnv_drain. Returns @st. */
zo_status eng_gnv_land(zo_engine_t *e, zo_param_t *p, zo_status st);
/* Collect finished gradient writes without blocking (landing the tensors they complete); none
 * before finalize. */
zo_status eng_gnv_poll(zo_engine_t *e);
/* Wait every gradient write in flight (errors kept: the first is returned); every final
 * contribution landed. */
zo_status eng_gnv_drain(zo_engine_t *e);
/* Sub-group @g holds this step's gradients in its slot (g->gheld): write its slot's gradient buffer to grad.swp and
 * wait (the file then holds every contribution so far), and let its later contributions go to grad.swp. Before its
 * slot is dropped (eng_nv_quiesce), or when a chunk spans it and another sub-group. */
zo_status eng_gnv_unhold(zo_engine_t *e, sub_group *g);
/* zo_engine_grad_reopen(), every gradient landed: the sub-groups whose gradients were read from grad.swp into their
 * slot (with their state) drop that copy once the reads are waited, so the step reads the sums again; those holding
 * them in the slot (g->gheld) add there. */
zo_status eng_gnv_reopen(zo_engine_t *e);

#endif /* ZO_ENGINE_INTERNAL_H */
