/*
 * plan_internal.h - the memory plan's calls shared by finalize (engine.c),
 * the budget (budget.c) and the plan itself (plan.c): its input (a plain
 * value, zo_plan_input) and the pure planner over it (zo_plan_compute).
 * Not installed; the public half is zoffload/plan.h.
 */
#ifndef ZO_PLAN_INTERNAL_H
#define ZO_PLAN_INTERNAL_H

#include "base_internal.h"
#include "zoffload/budget.h"
#include "zoffload/config.h"
#include "zoffload/dtype.h"
#include "zoffload/plan.h"

/* Saturating size arithmetic (zo_size_* store SIZE_MAX on overflow): a byte count too large for size_t becomes
 * SIZE_MAX, which the budget refuses (it never fits) instead of comparing a wrapped value. Shared by the plan, the
 * budget and the placement planner. */
static inline size_t mul_sat(size_t a, size_t b) {
  size_t r;
  zo_size_mul(a, b, &r);
  return r;
}
static inline size_t add_sat(size_t a, size_t b) {
  size_t r;
  zo_size_add(a, b, &r);
  return r;
}
static inline size_t round_sat(size_t x, size_t align) {
  size_t r;
  zo_size_round_up(x, align, &r);
  return r;
}

/* One registered tensor, as the planner sees it (index = registration order). All counts are
 * elements. */
typedef struct zo_plan_input_tensor {
  size_t n;       /* elements of the whole tensor (zo_param_t.n) */
  size_t shard_n; /* elements of this rank's shard of it: what its optimizer state and gradient hold
                            (zo_param_t.shard_n; n on one rank) */
  /* elements of the tensor padded to world blocks of part_n (eng_dp_padded: part_n x world): what
   * its all-gathers and reduce-scatters move */
  size_t dp_padded;
  /* elements of its working copy this rank's parameter tier holds (eng_pw_held: n, or at stage 3 on
   * several ranks its block part_n) */
  size_t pw_held;
} zo_plan_input_tensor;

/*
 * zo_plan_input - everything the memory plan is computed from: the configuration, the facts the engine resolved at
 * create (tiers, dtypes, element sizes, swap alignment) for the device planned for, and the registered tensors. A
 * plain value: zo_plan_compute() reads nothing else, so a plan can be made with no engine, device or communicator.
 * Filled by zo_plan_make() from an engine (plan.c), or built by hand (tests/test_plan.c).
 */
typedef struct zo_plan_input {
  /* the configuration (read: zero.stage, zero.{reduce,allgather,stage3_prefetch}_bucket_size,
   * zero.overlap_comm, zero.sub_group_size, zero.stage3_max_live_parameters,
   * zero.offload_optimizer.{pin_memory,buffer_count},
   * zero.offload_param.{pin_memory,buffer_count,buffer_size}); not kept */
  const zo_config_t *cfg;
  int world; /* ranks (1: one) */
  /* the device planned for, resolved (ZO_DEVICE_HOST or ZO_DEVICE_CUDA, never AUTO); informative:
   * what it decides is @device_adam */
  zo_device_kind device;
  int device_adam; /* 1: device Adam applies (offload_optimizer "none" on a GPU: master, moments and
                                gradients in the device block, the norm partials beside them) */
  /* where the optimizer state lives (zero_optimization.offload_optimizer.device) */
  zo_offload_device tier;
  /* where the working weights live (zero_optimization.offload_param.device) */
  zo_offload_device ptier;
  int dpu;         /* zoffload.delayed_param_update: a second gradient and staging buffer */
  zo_dtype wdtype; /* working (parameter) dtype */
  /* accumulation dtype: the host gradient shard, grad.swp and the device gradient */
  zo_dtype adtype;
  /* bytes per element of the widest gradient hand-over accepted (eng_acc_in_size): sizes the
   * staging buckets, the reduction ring and device Adam's upload stage */
  size_t acc_in_size;
  size_t acc_bucket_el; /* one rank: elements per gradient staging bucket (eng_acc_ring_shape for
                                @device_adam); 0 when no staging is needed */
  int acc_n_buckets;    /* the number of those buckets (0 when none) */
  size_t grad_io_el; /* offload_optimizer "nvme": elements of each gradient swap buffer to grad.swp
                                (eng_gnv_el); 0 otherwise */
  size_t esz
      [3]; /* bytes per element of the optimizer state: [0] master, [1] exp_avg, [2] exp_avg_sq */
  /* bytes: the swap files' alignment the plan uses (the engine's, or 4096 with parameters on nvme
   * when the engine has none); 0 without NVMe */
  size_t swap_align;
  size_t extent_unit; /* elements per alignment unit of the narrowest NVMe kind at @swap_align
                                (eng_extent_unit_at): every extent is padded to a multiple of it; 0 without NVMe */
  /* elements: budget of the host cache of nvme parameters (offload_param.max_in_cpu, or
   * eng_set_param_cache; SIZE_MAX: every tensor); the first tensors whose @pw_held fit in it are
   * cached whole. Read only under offload_param "nvme" */
  size_t pcache_el;
  /* elements: budget of the resident optimizer sub-groups (zoffload.optimizer_max_in_cpu; 0 none).
   * Read only under offload_optimizer "nvme" */
  size_t opt_res_el;
  /* several ranks whose collectives take device memory (the nccl backend on a GPU: eng_dp_dev): the
   * gradient reduction ring and the gather buffer of updated weights are planned in device_block, and
   * a host landing buffer ("dp_land") replaces them on the host when the optimizer is offloaded */
  int dp_device;
  /* stage 3 on several GPU ranks with offload_param "none" (e->pdev; @ptier is then ZO_OFFLOAD_CPU): this
   * rank's blocks of the working weights and the gathers' ring are planned in device_block, not in host memory */
  int pdev;
  int n_nccl_comms; /* NCCL communicators whose device staging (ZO_COMM_NCCL_STAGE_BYTES each) the device
                                needs (eng_nccl_comms); 0 on other backends */
  size_t total_el; /* elements of every registered tensor, whole (only in a message) */
  int n_tensors;   /* >= 1 */
  const zo_plan_input_tensor *tensor; /* [n_tensors], registration order */
} zo_plan_input;

/*
 * zo_plan_compute() - the memory plan of @in: every buffer finalize allocates and the layout it places the tensors
 * by. A pure function of @in (no engine, device or communicator); allocates *@out (zo_plan_free()) and nothing else.
 * Sizes saturate at SIZE_MAX instead of wrapping. @what names the caller in the messages ("plan", "budget",
 * "finalize"). ZO_ERR_INVALID_ARG (NULL, no tensor), ZO_ERR_CONFIG (a configuration the tensors cannot be planned
 * with: sub_group_size cutting them into too many pieces, stage3_max_live_parameters or offload_param.buffer_size
 * below the largest tensor), ZO_ERR_OUT_OF_MEMORY.
 */
zo_status zo_plan_compute(const zo_plan_input *in, const char *what, zo_plan **out);
/* zo_engine_plan() for device @kind (ZO_DEVICE_AUTO: the engine's own) with @what naming the caller in the messages
 * of its usage checks ("budget", "finalize"): the engine's checks, then zo_plan_compute() of the engine's input. */
zo_status zo_plan_make(const zo_engine_t *e, const char *what, zo_device_kind kind, zo_plan **out);
/* Bytes (count x bytes, saturated) of the plan's buffers named @name, or of every buffer whose name starts
 * with @name when it ends with '.' (e.g. "state_host."); 0 when there is none. */
size_t zo_plan_sum(const zo_plan *p, const char *name);
/* Bytes of one buffer named @name (exactly); 0 when the plan has none. */
size_t zo_plan_bytes(const zo_plan *p, const char *name);
/* The budget of plan @p of engine @e (zo_engine_budget() without making the plan; budget.c). */
zo_status zo_plan_budget(const zo_engine_t *e, const zo_plan *p, const size_t app[4],
                         zo_budget *out);

/* MemTotal of /proc/meminfo (or ZO_TEST_MEMTOTAL) into *@out, bytes; SIZE_MAX when unreadable
 * (budget.c). */
zo_status zo_plan_mem_total(size_t *out);
/* zoffload.pinned_fraction of @c: the share of MemTotal page-locked memory may take; ZO_CONFIG_PINNED_FRACTION when
 * it is outside (0, 1] (a config not from zo_config_defaults()). budget.c. */
double zo_plan_pinned_fraction(const zo_config_t *c);

#endif /* ZO_PLAN_INTERNAL_H */
