/*
 * zoffload/plan.h - the memory plan: every buffer zo_engine_finalize() will
 * allocate on every tier (device, host and its pinned part, NVMe files), with
 * its size, count, pinning and purpose, and the layout numbers finalize
 * places the tensors by. One pure function of the configuration, the
 * registered tensors and the device facts made at create (the swap
 * alignment); finalize allocates exactly what it says and the start-up budget
 * (budget.h) compares it with what the machine has. Not here: what the
 * machine has (budget.h), the device arena's reservation (sized at finalize
 * from the memory then available, see zo_engine_finalize()).
 *
 * Units: bytes for every *_bytes field and for zo_plan_buf.bytes; elements
 * for every *_el / *_off field. A byte count too large for size_t is
 * SIZE_MAX (saturated): the budget refuses it, and so finalize.
 * Thread-safety: a plan is a plain value; zo_engine_plan() reads the engine
 * and must not run beside another call on the same engine.
 * Pinned buffers (zo_plan_buf.pinned) on a CUDA device must be registered
 * with CUDA: zo_engine_finalize() refuses one that cudaHostRegister did not
 * take (ZO_ERR_CUDA) unless zoffload.allow_pageable_host is true.
 */
#ifndef ZOFFLOAD_PLAN_H
#define ZOFFLOAD_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "zoffload/budget.h"
#include "zoffload/engine.h"
#include "zoffload/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One kind of buffer: @count buffers of @bytes each. */
typedef struct zo_plan_buf {
  zo_tier tier; /* ZO_TIER_DEVICE, ZO_TIER_HOST (pinned ones too, see @pinned) or ZO_TIER_NVME */
  char purpose[40]; /* stable name: "device_block", "grad_host", "state_host.exp_avg", "stage_host",
                            "param_host", "grad_staging", "dp_grad", "dp_gather", "pg_ring", "offload_param.staging",
                            "sub_group_buffers.master", "sub_group_buffers.grad", "grad_swap_buffers",
                            "write_back_ring", "params.swp", "exp_avg.swp", "grad.swp", ... */
  size_t bytes;     /* of one buffer (file size for nvme); SIZE_MAX when saturated */
  int count;        /* buffers of this kind */
  int pinned;       /* host: page-locked memory requested */
  int path; /* nvme: 0 zero_optimization.offload_optimizer.nvme_path, 1 offload_param.nvme_path;
                            else -1 */
} zo_plan_buf;

/* Where one registered tensor goes (index = registration order). */
typedef struct zo_plan_tensor {
  /* elements: its shard's first element in the host arrays (grad_host, state_host) */
  size_t flat_off;
  size_t pw_el; /* elements: its working copy's offset in param_host (@pw_host 1) or in params.swp
                            (@pw_host 0): two element spaces, each from 0; 0 without parameter offload */
  int pw_host;  /* where its working copy lives: 1 in "param_host" (every tensor under offload_param
                            "cpu"; under "nvme" the tensors cached by offload_param.max_in_cpu), 0 in params.swp
                            (the other "nvme" tensors) or on the device (offload_param "none") */
  /* elements: its shard's extent in every optimizer state file and grad.swp (nvme) */
  uint64_t file_el;
  size_t dev_off
      [5]; /* bytes into device_block of its regions, each 256-byte aligned: [0] working weights
                            (offload_param "none"), [1..3] master, exp_avg, exp_avg_sq and [4] gradient
                            (offload_optimizer "none": the shard in the accumulation dtype, which with device
                            Adam and gradient accumulation is where the micro-batches are summed: fp32 unless
                            data_types.grad_accum_dtype says otherwise); SIZE_MAX for a region it has not there */
} zo_plan_tensor;

/* NVMe optimizer state: a piece of a shard, and a sub-group (consecutive pieces, one contiguous aligned range
 * in every state file). */
typedef struct zo_plan_piece {
  int tensor;       /* registration index */
  size_t off, n;    /* elements inside the shard */
  uint64_t file_el; /* element offset of element @off in every state file */
} zo_plan_piece;

typedef struct zo_plan_sub_group {
  int first_piece, n_pieces;
  uint64_t file_el,
      n_el; /* element range in each state file, padded (a resident one: in the resident range) */
  int resident; /* 1: its state and gradient sum live in host memory ("resident_state.*"), not the files */
} zo_plan_sub_group;

enum { ZO_PLAN_MAX_BUFS = 32 };

typedef struct zo_plan {
  zo_plan_buf buf[ZO_PLAN_MAX_BUFS]; /* only kinds with bytes > 0, in finalize's allocation order */
  int n_bufs;
  /* sums of count x bytes: device (the resident block), host, its pinned part, */
  size_t device_bytes;
  size_t host_bytes; /* NVMe under each nvme_path ([0] optimizer, [1] parameters) */
  /* device_bytes, plus with parameter offload largest_dev_bytes (the least the device needs: one
   * fetched tensor beside the block), plus the "comm_staging" buffers of NCCL communicators
   * (ZO_COMM_NCCL_STAGE_BYTES each: the engine's, and at stage 3 on several ranks its gathers');
   * what the budget's device line holds */
  size_t device_need_bytes;
  size_t pinned_bytes;
  size_t nvme_bytes[2];
  /* layout numbers */
  int n_tensors;
  zo_plan_tensor *tensor;   /* [n_tensors] */
  size_t shard_total_el;    /* elements of this rank's shards */
  size_t largest_el;        /* elements of the largest tensor */
  size_t largest_dev_bytes; /* its device copy (parameter offload needs it beside the block) */
  /* offload_optimizer "none": master, state and gradients in device_block */
  size_t dev_state_bytes;
  /* elements of the parameter tier's layout: param_host under offload_param "cpu", params.swp under
   * "nvme" (the uncached tensors' padded extents; 0 when every tensor is cached: no params.swp) */
  size_t pw_total_el;
  /* offload_param "nvme": elements cached in "param_host" (the first pcache_tensors tensors,
   * unpadded, each its pw_el there); 0 otherwise */
  size_t pcache_el;
  int pcache_tensors; /* offload_param "nvme": tensors cached in "param_host" (registration order, from
                                 the first) */
  /* offload_param "nvme": elements of the largest tensor in params.swp, what the staging buffers
   * and the write-back ring are sized from (0 when every tensor is cached: neither is planned); 0
   * otherwise */
  size_t largest_file_el;
  size_t swap_align;  /* bytes; 0 without NVMe */
  size_t extent_unit; /* elements per alignment unit of the narrowest NVMe kind; 0 without NVMe */
  size_t state_esz;   /* bytes per element of master + exp_avg + exp_avg_sq */
  size_t wsz;         /* bytes per working-dtype element */
  int n_pieces, n_sgs;
  zo_plan_piece *piece;  /* [n_pieces] */
  zo_plan_sub_group *sg; /* [n_sgs] */
  size_t slot_el;        /* elements per sub-group buffer (the largest sub-group) */
  int n_slots;           /* sub-group buffer sets */
  /* elements of every state file: the streamed sub-groups' range [0, state_file_el) */
  uint64_t state_file_el;
  int n_res_sgs; /* resident sub-groups (zoffload.optimizer_max_in_cpu): the last n_res_sgs */
  /* elements of the resident range [state_file_el, state_file_el + res_el), padded as the files
   * are; each "resident_state.*" buffer holds res_el of its kind */
  size_t res_el;
  size_t piece_el;  /* elements per piece: sub_group_size rounded up to the extent unit, and with
                                 residency to a multiple of 65536 (the gradient norm's chunk) too */
  size_t pstage_el; /* elements per offload_param staging buffer (largest_file_el, padded) */
  int n_pstage;     /* offload_param.buffer_count of them; 0 when every tensor is cached */
  size_t wb_bytes;  /* the write-back ring of new working weights bound for params.swp (0 when every
                                 tensor is cached) */
  size_t dp_grad_bytes, dp_gather_bytes, pg_ring_bytes; /* several ranks */
  /* offload_optimizer "nvme": elements of each of the two "grad_swap_buffers" the gradient chunks
   * go to grad.swp through (min(reduce_bucket_size, largest shard, sub_group_size), rounded up to
   * 64 Ki elements and the extent unit); 0 otherwise */
  size_t grad_io_el;
  /* one rank, gradient_accumulation_steps > 1 or data_types.grad_accum_dtype not the working dtype:
   * the pinned staging buckets of the gradient hand-over (1, or 2 with overlap_comm, of
   * min(reduce_bucket_size, largest shard) fp32 elements); one rank with offload_optimizer "nvme":
   * one bucket of grad_io_el elements of the widest hand-over dtype, whatever the accumulation */
  size_t grad_staging_bytes;
  /* device Adam (offload_optimizer "none" on a GPU): byte offset in device_block of the gradient
   * norm partials, double[n_tensors x 256]; SIZE_MAX otherwise. Their host copy is the pinned
   * "device_adam.norm_host" buffer */
  size_t dev_norm_off;
  /* device Adam on several ranks: byte offset in device_block of the staging region a reduced
   * gradient block goes through on its way into the (accumulating) gradient shard, largest shard x
   * the hand-over element size; SIZE_MAX otherwise */
  size_t dev_stage_off;
  /* several ranks whose collectives take device memory (the nccl backend on a GPU): byte offsets in
   * device_block of the gradient reduction ring (dp_grad_bytes) and of the gather buffer of updated
   * weights (dp_gather_bytes), both then device memory, and the bytes of the pinned host buffer
   * "dp_land" a rank's reduced block lands in on its way to an offloaded optimizer (largest block x
   * the reduction's element size; 0 with device Adam); SIZE_MAX, SIZE_MAX and 0 otherwise (the ring
   * and the gather buffer are then the host buffers "dp_grad" and "dp_gather") */
  size_t dp_dev_grad_off, dp_dev_gather_off, dp_land_bytes;
  /* stage 3 on several GPU ranks with offload_param "none" (parameters partitioned in device
   * memory): byte offsets in device_block of this rank's blocks of every tensor's working weights
   * (pw_total_el elements, each tensor at its pw_el) and of the ring whole tensors are all-gathered
   * into ahead of use (pg_ring_bytes); SIZE_MAX otherwise (they are then the host buffers
   * "param_host" and "pg_ring") */
  size_t dev_param_off, dev_pg_ring_off;
} zo_plan;

/*
 * zo_engine_plan() - the plan for the tensors registered so far, before
 * zo_engine_finalize(). Allocates *@out (free it with zo_plan_free()); reads
 * @e and changes nothing in it.
 * @kind: the device the plan is for. ZO_DEVICE_AUTO: the engine's own, what
 *        its zo_engine_finalize() allocates. ZO_DEVICE_CUDA or
 *        ZO_DEVICE_HOST: what finalize would allocate for the same config and
 *        tensors on an engine created on a device of that kind, e.g. a dry
 *        run of a GPU configuration on a host device standing in for a GPU
 *        that is not there (zo-train --dry-run --device cuda). The kind
 *        decides device Adam (offload_optimizer "none" on CUDA: the norm
 *        partials in device_block and their pinned host copy
 *        "device_adam.norm_host", no host "grad_staging" ring) and what
 *        zo_engine_check_device() refuses. Not modelled: the NCCL staging
 *        ("comm_staging") of a communicator the engine was not created with.
 * Returns ZO_OK, ZO_ERR_INVALID_ARG (NULL argument, @kind not one of the
 * three), ZO_ERR_INVALID_USAGE (after finalize, no tensor registered, or a
 * failed finalize), ZO_ERR_UNSUPPORTED (what zo_engine_check_device()
 * refuses on a device of @kind: device Adam's limits), ZO_ERR_CONFIG (a
 * sub_group_size that cuts the tensors into more than 2^24 pieces),
 * ZO_ERR_OUT_OF_MEMORY (the plan's tables).
 */
ZO_API zo_status zo_engine_plan(const zo_engine_t *e, zo_device_kind kind, zo_plan **out);

/* zo_plan_free() - free a plan of zo_engine_plan(); NULL is accepted. */
ZO_API void zo_plan_free(zo_plan *p);

/*
 * zo_plan_print() - the plan's buffers as a table on @f (a FILE *; NULL:
 * stdout): tier, purpose, count, bytes each, total, pinned, and the sums.
 */
ZO_API void zo_plan_print(const zo_plan *p, void *f);

/*
 * zo_engine_allocations() - what zo_engine_finalize() actually requested,
 * one entry per kind of buffer in the order allocated, in the form of
 * zo_plan_buf (bytes of each request, count of requests): the ledger a test
 * compares with the plan. *@bufs points into the engine (valid until
 * zo_engine_destroy()); returns the number of entries, 0 before finalize or
 * for NULL arguments. Buffers of 0 bytes are not requested and not listed.
 */
ZO_API int zo_engine_allocations(const zo_engine_t *e, const zo_plan_buf **bufs);

#ifdef __cplusplus
}
#endif
#endif /* ZOFFLOAD_PLAN_H */
