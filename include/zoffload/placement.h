/*
 * zoffload/placement.h - the placement planner and the step-time model.
 *
 * Each kind of state the config offloads to "nvme" may live partly in host
 * memory and partly on NVMe: the optimizer state (fp32 master weights,
 * exp_avg, exp_avg_sq) and gradient sums of the last sub-groups stay in host
 * memory for the whole run (zoffload.optimizer_max_in_cpu elements), and the
 * working copies of the first tensors stay in pinned host memory
 * (zero_optimization.offload_param.max_in_cpu elements); the rest streams.
 * Every split gives the same bits. With "zoffload": {"placement": "auto"}
 * the planner picks both budgets: the split with the least predicted step
 * time whose plan fits the machine (host memory less a headroom, the pinned
 * rule of zoffload.pinned_fraction, NVMe space, device memory). It moves
 * state between host memory and NVMe only: what the config puts on the
 * device stays there, and a kind the config puts on "cpu" stays in host
 * memory (write "nvme" for a kind that may spill). "placement": "config"
 * (the default) follows the config as written.
 *
 * The step-time model. From the plan's bytes per tier and a few machine
 * rates (zoffload/speeds.h: NVMe read and write through the swap engine,
 * host<->device copies, CPU Adam; compute from the caller), one optimizer
 * step is two phases:
 *   forward + backward  compute, plus the parameter fetches' NVMe reads and
 *                        the link's copies (a fetch is demand-driven and its
 *                        prefetch window is about a layer: its reads and
 *                        copies add to the compute), or, when longer, those
 *                        plus the phase's asynchronous disk work (gradients
 *                        to grad.swp and the read-adds of accumulation, the
 *                        next sub-groups' state read into free buffers);
 *   update              max(Adam over every element, the disk's work left:
 *                        the other streamed sub-groups' state and gradient
 *                        reads, every state write-back, the new working
 *                        weights to params.swp) plus one sub-group's read that
 *                        nothing overlaps;
 * with the update folded into the first phase when it starts as gradients
 * land (no gradient clipping, no fp16, no delayed update), and with the
 * delayed update (zoffload.delayed_param_update) the step is the longer of
 * the two phases, the last step's update running behind this one's compute
 * (its warm-up steps are not modelled). Reads and writes
 * are in flight together (an NVMe device serves both): the disk's time for
 * a piece of asynchronous work is the longer of its reads / read rate and
 * its writes / write rate. The model is the design's, not a fit to any run;
 * the figures it was checked against are in docs/placement.md.
 *
 * Thread-safety: as the engine (one thread at a time per engine).
 */
#ifndef ZOFFLOAD_PLACEMENT_H
#define ZOFFLOAD_PLACEMENT_H

#include <stddef.h>
#include <stdint.h>

#include "zoffload/engine.h"
#include "zoffload/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The machine's rates and the caller's compute, the model's inputs. Rates in bytes/s or elements/s; 0 or less:
 * unknown (that resource is left out of the prediction, and the source says so). */
typedef struct zo_step_rates {
  double nvme_read_Bps, nvme_write_Bps; /* through the swap engine (zoffload/speeds.h) */
  double h2d_Bps, d2h_Bps;              /* host<->device copies of pinned memory */
  double adam_el_per_s;                 /* CPU Adam, elements/s, all of the engine's Adam threads */
  double compute_s; /* forward and backward of one optimizer step (every micro-batch), seconds */
  /* fetches of each offloaded tensor per optimizer step (forward and backward of every micro-batch:
   * 2 x gradient_accumulation_steps when 0) */
  double fetches_per_step;
  char src[6][160]; /* where each of the first six came from, in that order */
} zo_step_rates;

/* One optimizer step as the model sees it: seconds and bytes per step. */
typedef struct zo_step_prediction {
  double step_s;              /* the prediction */
  double fwd_bwd_s, update_s; /* its two phases (update_s 0 when folded into the first) */
  double compute_s, adam_s;   /* busy time of each resource over the step */
  double nvme_read_s, nvme_write_s, h2d_s, d2h_s;
  uint64_t nvme_read_bytes, nvme_write_bytes; /* the step's traffic */
  uint64_t h2d_bytes, d2h_bytes;
  uint64_t param_read_bytes, param_write_bytes; /* of nvme_*_bytes: params.swp */
  uint64_t state_read_bytes, state_write_bytes; /* the optimizer state files */
  uint64_t grad_read_bytes, grad_write_bytes;   /* grad.swp */
  const char *bound; /* the resource the step waits on most: "compute", "nvme", "adam", "link" */
} zo_step_prediction;

/* A placement: the two budgets, what they hold, and the step predicted for it. */
typedef struct zo_placement {
  /* elements of optimizer state kept in host memory (whole sub-groups) */
  size_t optimizer_max_in_cpu;
  /* elements of working weights kept in pinned host memory (whole tensors) */
  size_t param_max_in_cpu;
  size_t optimizer_resident_el,
      optimizer_total_el; /* what the first holds of the state's (padded) elements */
  int resident_sub_groups, sub_groups;
  size_t param_cached_el,
      param_total_el; /* what the second holds of the offloaded working weights */
  size_t host_bytes, pinned_bytes, nvme_bytes; /* the plan's sums for this placement */
  size_t host_limit, pinned_limit, nvme_limit; /* what it had to fit in (SIZE_MAX: no limit) */
  int candidates;                              /* placements the planner compared */
  zo_step_prediction pred;
} zo_placement;

/* Options of zo_engine_place(); NULL means all zero. */
typedef struct zo_place_opts {
  zo_device_kind kind; /* the device planned for, as zo_engine_plan() (0: ZO_DEVICE_AUTO) */
  const size_t *app;   /* [4] bytes the caller holds besides the engine per zo_tier, as
                                           zo_engine_budget(); NULL: none */
  size_t assume_host_available; /* 0: measured (MemAvailable / cgroup); else bytes, for a dry run */
  size_t assume_pinned_limit;   /* 0: the pinned rule on this machine; else bytes */
  size_t assume_nvme_free;      /* 0: statvfs of each nvme_path; else bytes each */
  int device_not_host; /* 1: a host device stands in for @kind's (a dry run of a GPU plan on a
                                           machine without one): its bytes are not host memory */
} zo_place_opts;

/*
 * zo_engine_place() - before zo_engine_finalize(): with zoffload.placement
 * "auto", choose and set the two budgets (above) for the tensors registered
 * so far; with "config", keep the config's and only predict. Either way
 * fills @out with the placement and its predicted step. The candidates: each
 * number of whole tensors cached (registration order) with parameters on
 * "nvme", each with as many whole sub-groups resident as the rest of host
 * memory holds (the last ones first) with the optimizer on "nvme"; host
 * memory for them is the host line's available bytes less max(2 GiB, 1/7
 * of MemTotal) (the OS, page cache and the data loader), less what the plan
 * with nothing kept needs; the working-weight cache also fits the pinned
 * rule. The least predicted step wins, the smaller footprint on a tie.
 * zo_engine_finalize() calls it with no options when placement is "auto" and
 * it was not called. @r: the rates (zo_step_rates_get() fills them).
 * Returns ZO_OK, ZO_ERR_INVALID_ARG (NULL @e, @r or @out), what
 * zo_engine_plan() and zo_engine_budget() return.
 */
ZO_API zo_status zo_engine_place(zo_engine_t *e, const zo_step_rates *r, const zo_place_opts *opts,
                                 zo_placement *out);

/*
 * zo_engine_predict() - the model's step for the engine's placement as it
 * stands (before finalize: as planned; after: as allocated), from @r.
 * Returns ZO_OK, ZO_ERR_INVALID_ARG, or what zo_engine_plan() returns
 * (before finalize).
 */
ZO_API zo_status zo_engine_predict(const zo_engine_t *e, const zo_step_rates *r,
                                   zo_step_prediction *out);

/*
 * zo_step_rates_get() - fill @r from zoffload/speeds.h's figures for @e's
 * config, device and nvme path (config, cache, or a short measurement; see
 * there), with @compute_s and @fetches_per_step from the caller (0: unknown
 * compute; 0 fetches: 2 per micro-batch). Returns what zo_speeds_get()
 * returns.
 */
ZO_API zo_status zo_step_rates_get(zo_engine_t *e, double compute_s, double fetches_per_step,
                                   zo_step_rates *r);

/* zo_step_prediction_print() - one line "predicted step X ms: ..." on @f (a FILE *; NULL:
 * stdout). */
ZO_API void zo_step_prediction_print(const zo_step_prediction *p, void *f);

/* zo_placement_print() - the placement (budgets, what they hold, the limits) and its predicted step
 * on @f. */
ZO_API void zo_placement_print(const zo_placement *pl, void *f);

#ifdef __cplusplus
}
#endif
#endif /* ZOFFLOAD_PLACEMENT_H */
