/*
 * zoffload/engine.h - the offload engine: owns every trainable parameter's
 * fp32 master weights and Adam state on the tier the config names (device,
 * pinned host memory or NVMe swap files), keeps the working copy (fp32, bf16
 * or fp16) in device memory, and applies Adam at zo_engine_step().
 *
 * Life of an engine:
 *   zo_engine_create()          config + device + collective comm
 *   zo_engine_register_param()  once per tensor, any order (this is the rank's
 *                               partitioning order too)
 *   zo_engine_finalize()        sizes and allocates every tier at once
 *   zo_engine_load_param()      initial fp32 values of each tensor
 *   loop: zo_engine_fetch() ... compute ... zo_engine_grad_ready() ...
 *         zo_engine_step()
 *   zo_engine_destroy()         frees memory, removes swap files
 *
 * Partitioning (ZeRO stage >= 1): each tensor of n elements is split in
 * world_size contiguous shards of ceil(n / world_size) elements (the last one
 * shorter or empty); this rank owns shard `rank`. Master weights, exp_avg and
 * exp_avg_sq exist only for the owned shard. With one rank the shard is the
 * whole tensor and the gradient reduce-scatter and weight all-gather are
 * plain copies.
 *
 * Thread-safety: an engine is driven by one thread at a time. Internally it
 * uses the device's copy stream and a persistent Adam thread pool (zo_adam_pool_t)
 * whose threads are bound to physical cores.
 */
#ifndef ZOFFLOAD_ENGINE_H
#define ZOFFLOAD_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "zoffload/arena.h"
#include "zoffload/comm.h"
#include "zoffload/config.h"
#include "zoffload/device.h"
#include "zoffload/dtype.h"
#include "zoffload/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zo_engine zo_engine_t;
typedef struct zo_param zo_param_t;

/*
 * zo_engine_check_device() - what zo_engine_create() refuses for @cfg on a
 * device of @kind (HOST or CUDA; AUTO is taken as CUDA) with @world ranks,
 * refused here with the same message, before any device or engine exists:
 * zo-train --dry-run, which plans a GPU run on a host device, calls it so the
 * dry run refuses exactly what the run would. Today that is device Adam
 * (offload_optimizer.device "none" on a CUDA device: master weights, moments
 * and gradients in device memory, updated by a fused kernel; Kingma & Ba's
 * Adam, Loshchilov & Hutter's AdamW, the rule of zo_adam_update()) when this
 * library has no kernel (built without nvcc), or with offload_param other
 * than "none" (gradient accumulation and several ranks are accepted: the
 * micro-batches and the reduced blocks are summed on the device in the
 * accumulation dtype); and zero_optimization.stage 3 with offload_param
 * "none" on @world > 1 ranks of a CUDA device (parameters partitioned in
 * device memory are not built; the host device partitions them in host
 * memory). Returns ZO_OK, ZO_ERR_UNSUPPORTED naming the key, or
 * ZO_ERR_INVALID_ARG (@cfg NULL). Reads only @cfg; thread-safe.
 */
ZO_API zo_status zo_engine_check_device(const zo_config_t *cfg, zo_device_kind kind, int world);

/*
 * zo_engine_create() - build an engine from a resolved config.
 * @cfg:  copied; the engine keeps no pointer to it.
 * @dev:  device that holds working weights (and, with offload device "none",
 *        master weights and Adam state). Borrowed: must outlive the engine.
 *        NULL: the engine creates and owns the device cfg->zoffload.device
 *        names (auto: CUDA when a GPU is visible, else `host`), ordinal
 *        zo_device_local_ordinal() (the launcher's local rank; a malformed
 *        one, or one past the visible GPUs, is ZO_ERR_CONFIG), capped at
 *        cfg->zoffload.device_memory_limit.
 * @comm: collective communicator; borrowed. NULL: a `self` (one rank) comm.
 *        With several ranks the engine works on duplicates of it (made here:
 *        a collective call over @comm), so the caller's own collectives on
 *        @comm never interleave with the engine's.
 * Returns ZO_OK; ZO_ERR_CONFIG when the config asks for something the engine
 * cannot do (offload with stage 0, fp16 and bf16 both on), naming the key;
 * ZO_ERR_UNSUPPORTED for what several ranks cannot do yet (stage 3 without
 * offload_param "cpu", delayed parameter update) and for what device Adam
 * cannot do (zo_engine_check_device()), naming the key; ZO_ERR_MPI
 * from duplicating @comm; ZO_ERR_INVALID_ARG / ZO_ERR_OUT_OF_MEMORY / errors of
 * zo_swap_create() (nvme: the private swap directory is created here, so a
 * missing or unwritable nvme_path fails now, not mid-training).
 * The engine belongs to the calling process: a fork()ed child's copy has
 * none of its threads, and every zo_engine_* call on it there (register,
 * finalize, fetch, release, grad_ready, grad_accumulate, grad_fence, step,
 * synchronize, set_lr, save, load, export, inspection, planning) returns
 * ZO_ERR_INVALID_USAGE at once, naming both pids; create a new engine in
 * the child. zo_engine_destroy() there returns without touching anything.
 */
ZO_API zo_status zo_engine_create(const zo_config_t *cfg, zo_device_t *dev, zo_comm_t *comm,
                                  zo_engine_t **out);

/*
 * zo_engine_destroy() - wait for outstanding copies and swap I/O, free every
 * buffer and remove the swap directory and files. NULL ok. In a fork()ed
 * child of the process that created @e it returns at once and touches
 * nothing (the threads, files and memory are the parent's; the child's copy
 * goes with the child), so a child's exit handler cannot hang on threads it
 * does not have or remove the parent's swap files.
 */
ZO_API void zo_engine_destroy(zo_engine_t *e);

/*
 * zo_engine_last_error() - message of the last failing call on this thread
 * (same text as zo_last_error()); never NULL.
 */
ZO_API const char *zo_engine_last_error(const zo_engine_t *e);

/*
 * ZO_ENGINE_MAX_ELEMS - the most elements one tensor, and all tensors of one
 * engine together, may have: 2^48 (1 PiB of fp32 master weights, more than
 * any one machine holds). Larger counts are refused at registration, so that
 * every byte count the engine derives from them (elements x bytes per
 * element of each tier, sums over tensors, alignment padding) fits in size_t.
 */
#define ZO_ENGINE_MAX_ELEMS ((size_t)1 << 48)

/*
 * zo_engine_register_param() - declare a trainable tensor.
 * @name:    unique, at most 127 bytes; used in every message about it.
 * @n_elems: element count of the whole (unpartitioned) tensor, 1 to
 *           ZO_ENGINE_MAX_ELEMS; the tensors of one engine together hold at
 *           most ZO_ENGINE_MAX_ELEMS elements too.
 * @out:     handle, valid until zo_engine_destroy().
 * Only before zo_engine_finalize(). Returns ZO_OK, ZO_ERR_INVALID_ARG (empty
 * or duplicate name, n_elems 0, n_elems or the running total over
 * ZO_ENGINE_MAX_ELEMS: the tensor, its count and the limit named),
 * ZO_ERR_INVALID_USAGE (after finalize), ZO_ERR_OUT_OF_MEMORY.
 */
ZO_API zo_status zo_engine_register_param(zo_engine_t *e, const char *name, size_t n_elems,
                                          zo_param_t **out);

/*
 * zo_engine_set_param_weight_decay() - give @p a weight decay of its own
 * instead of optimizer.params.weight_decay: a parameter group's, as torch
 * and DeepSpeed let a caller exempt biases and norm weights from decay. The
 * coefficient is used as the config's would be (decoupled for AdamW, added
 * to the gradient for Adam with L2), at every later step; everything else
 * (lr and its schedule, betas, eps) stays the config's. Not part of
 * checkpoints: set it again after a restart. Before or after finalize, but
 * not between @p's zo_engine_grad_ready() and zo_engine_step().
 * Not thread-safe against other calls on @e.
 * Returns ZO_OK; ZO_ERR_INVALID_ARG (NULL, a tensor of another engine, a
 * value outside [0, 1e6] or NaN: named); ZO_ERR_INVALID_USAGE (its gradient
 * already handed over in this step).
 */
ZO_API zo_status zo_engine_set_param_weight_decay(zo_engine_t *e, zo_param_t *p,
                                                  double weight_decay);

/*
 * zo_engine_finalize() - allocate every tier for all registered tensors:
 * working weights in device memory; master weights and Adam state on the
 * offload device (none: device memory; cpu: pinned host; nvme: one swap file
 * per kind of state with one aligned extent per shard, plus buffer_count
 * pinned sub-group buffers of min(sub_group_size, largest need) elements);
 * a pinned gradient buffer (cpu, nvme) in the accumulation dtype; on one rank
 * with gradient accumulation, the pinned staging buckets (grad_staging). Device allocations come from one
 * arena reserved here: zoffload.device_arena_bytes bytes; 0 (default) the
 * device memory available now (90% of it on CUDA); "fit" (ZO_ARENA_FIT)
 * what the engine holds: the resident block, plus with parameter offload the
 * copies of every tensor bounded by stage3_max_live_parameters elements plus
 * twice the largest tensor, for a GPU whose rest a framework's allocator
 * manages. Checks that the configuration can work before training starts.
 * Returns ZO_OK; ZO_ERR_OUT_OF_MEMORY naming the tier, the bytes asked and
 * the limit (e.g. a device limit too small for the working weights, or a
 * "fit" arena larger than the device has free); ZO_ERR_CONFIG
 * (device_arena_bytes outside what works); ZO_ERR_IO / ZO_ERR_SYSTEM from
 * swap file creation (file and size named); ZO_ERR_CUDA on a CUDA device when
 * a pinned host buffer of the plan is not registered with CUDA
 * (cudaHostRegister refused: RLIMIT_MEMLOCK, a container's memlock limit),
 * naming the buffer, its bytes, the CUDA error and the way out, unless
 * zoffload.allow_pageable_host is true (then one warning names the bytes that
 * stayed pageable); ZO_ERR_INVALID_USAGE when called
 * twice or with no tensor. After a failure other than those two usage errors
 * the engine holds tiers sized for the tensors of that moment and accepts
 * only zo_engine_destroy(): register_param, budget and finalize answer
 * ZO_ERR_INVALID_USAGE, the calls that need a finalized engine as before.
 */
ZO_API zo_status zo_engine_finalize(zo_engine_t *e);

/*
 * zo_engine_load_param() - set a tensor's weights.
 * @values: float32[n_elems] in host memory, the whole tensor; this rank keeps
 *          its shard as master weights (written to its tier) and the working
 *          copy is rebuilt from it. exp_avg and exp_avg_sq are zeroed.
 * With several ranks a collective call (every rank, same order). At stage 3
 * on several ranks a device copy an earlier fetch gathered is dropped (the
 * next fetch gathers the new weights): release @p's fetches first, or that
 * copy keeps the old weights until the next step.
 * With the optimizer state in host memory, a shard of 1 Mi elements or
 * more is copied and zeroed by the engine's Adam pool threads (queued behind
 * its tasks), the working copy cast as after a step.
 * Synchronous. Only after zo_engine_finalize(). Returns ZO_OK,
 * ZO_ERR_INVALID_ARG, ZO_ERR_INVALID_USAGE, ZO_ERR_IO (nvme write),
 * ZO_ERR_OUT_OF_MEMORY (the pool's task).
 */
ZO_API zo_status zo_engine_load_param(zo_engine_t *e, zo_param_t *p, const float *values);

/*
 * zo_engine_fetch() - the working weights of @p for compute.
 * *@weights: device pointer to the whole tensor, n_elems elements of
 *            *@dtype (fp32; bf16 when bf16.enabled; fp16 when fp16.enabled),
 *            256-byte aligned, valid until zo_engine_release().
 * Blocks until the copy of the weights that the last zo_engine_step()
 * produced has landed in device memory.
 * With parameter offload (zero_optimization.stage 3, offload_param.device
 * cpu or nvme) the tensor is brought from pinned host memory or params.swp
 * into a device buffer unless a prefetch already did. The first step's fetch
 * order is recorded as the trace; from the second step on, each fetch starts
 * the next fetches along the trace (nvme read, then host-to-device copy)
 * within stage3_prefetch_bucket_size in flight and stage3_max_live_parameters
 * on the device, so compute finds them landed. A fetch off the trace warns
 * once, fetches on demand for the rest of the step, and that step's order
 * becomes the trace. Device memory running out evicts released copies (least
 * recently used first). The time blocked here is reported as
 * zo_step_info.fetch_wait_s. Source: DeepSpeed ZeRO-3
 * PartitionedParameterCoordinator (trace, prefetch, reuse distance).
 * With offload_param nvme, reads of params.swp are queued ahead of
 * optimizer-state transfers (zo_swap_submit_read_urgent). New working weights
 * go to params.swp through a pinned write-back ring of
 * offload_param.buffer_count x the largest tensor (at least two tensors and
 * two sub-groups), the only host memory nvme parameters take besides the
 * buffer_count read staging buffers; a tensor whose new weights are still in
 * the ring is copied to the device from there instead of being read back.
 * Every call (fetch, release, grad_ready) also moves the NVMe optimizer-state
 * pipeline on without blocking (see zo_engine_step()).
 * Returns ZO_OK, ZO_ERR_INVALID_USAGE before finalize or when @p's gradient
 * was already handed over in this step (its update may have begun; fetch it
 * before zo_engine_grad_ready() or after zo_engine_step()), ZO_ERR_OUT_OF_MEMORY
 * when every device copy is in use (tensor named), ZO_ERR_IO from params.swp,
 * or the copy stream's error.
 */
ZO_API zo_status zo_engine_fetch(zo_engine_t *e, zo_param_t *p, const void **weights,
                                 zo_dtype *dtype);

/*
 * zo_engine_release() - compute is done with @p's working weights for now.
 * With parameters resident in device memory (no parameter offload) it does
 * nothing. With parameter offload the device copy is kept when the tensor is
 * persistent (n_elems <= stage3_param_persistence_threshold) or the trace
 * uses it again within stage3_max_reuse_distance elements, else freed; then
 * the next prefetches along the trace are started. Every fetch needs one
 * release. Returns ZO_OK or ZO_ERR_INVALID_USAGE (not fetched).
 */
ZO_API zo_status zo_engine_release(zo_engine_t *e, zo_param_t *p);

/*
 * zo_engine_set_compute_stream() - the stream on which the caller's compute
 * (forward, backward) runs, e.g. zo_stream_wrap() of a framework's current
 * cudaStream_t. Borrowed: it must outlive the engine. With it, the engine
 * orders its own copy stream against compute with events instead of making
 * the host wait: zo_engine_fetch() makes @s wait for the weights' copy and
 * returns at once; zo_engine_grad_ready() copies the gradient after the work
 * queued on @s so far; a released device copy is reused or moved only after
 * the work queued on @s by then. NULL (the default) means compute is
 * synchronous with the calling thread (the host backend, or a caller that
 * synchronizes before each engine call). Call before zo_engine_finalize().
 * Returns ZO_OK; ZO_ERR_INVALID_ARG (NULL @e); ZO_ERR_INVALID_USAGE (after
 * finalize, with a different stream).
 */
ZO_API zo_status zo_engine_set_compute_stream(zo_engine_t *e, zo_stream_t *s);

/*
 * zo_engine_set_trace() - with @enabled 0, fetches are neither recorded in
 * nor matched against the trace, and nothing is prefetched: for passes
 * outside the training step (evaluation, sampling) whose order would
 * otherwise break the trace. 1 (the default) restores normal operation.
 * Returns ZO_OK or ZO_ERR_INVALID_ARG.
 */
ZO_API zo_status zo_engine_set_trace(zo_engine_t *e, int enabled);

/*
 * zo_engine_set_lr() - the learning rate of the following optimizer steps,
 * replacing the config's optimizer.lr and scheduler (a caller's own
 * scheduler, as DeepSpeed honours a client lr_scheduler: set it before each
 * zo_engine_step() and before the step's first zo_engine_grad_ready(), since
 * updates may start as gradients land). @lr in [0, ZO_CONFIG_LR_MAX] and
 * finite; a negative @lr returns to the config's schedule (the default).
 * Not saved in checkpoints (the caller's scheduler state is its own).
 * Returns ZO_OK or ZO_ERR_INVALID_ARG (NULL, NaN, above the maximum: named).
 * Thread-safety: as the engine.
 */
ZO_API zo_status zo_engine_set_lr(zo_engine_t *e, double lr);

/*
 * Gradient hand-over. Per optimizer step, each tensor's gradient arrives as
 * zero or more zo_engine_grad_accumulate() calls (one per micro-batch but the
 * last) and exactly one zo_engine_grad_ready() (the last micro-batch, or the
 * caller's own sum of them all). Each contribution leaves the caller's
 * buffer on the engine's copy stream (after the work queued so far on the
 * compute stream, zo_engine_set_compute_stream()) and is added, in the order
 * the calls were made, into this rank's host gradient shard, held in the
 * accumulation dtype: the working dtype when gradient_accumulation_steps is
 * 1 (today's bytes), fp32 when it is > 1, on every tier, so every tier sums
 * to the same bits (DeepSpeed stage 1/2 reduce every micro-batch in its
 * backward and accumulate the partition in fp32, its default
 * grad_accum_dtype under bf16); data_types.grad_accum_dtype ("fp32",
 * "bf16", "fp16") overrides it (e.g. "bf16" halves the device bytes of the
 * gradient shard with offload_optimizer "none"). Adam and
 * the gradient norm read that shard. Device Adam (offload_optimizer "none"
 * on a GPU) holds that shard in device memory and adds each contribution
 * there with a kernel on the copy stream (the same float32 sum, rounded to
 * the accumulation dtype once: the same bits as the host add); no host
 * staging. With offload_optimizer "nvme" the
 * shard is not held in host memory: it lives in grad.swp beside the state
 * files (same extents), every hand-over chunk is staged through one pinned
 * bucket and written there through two buffers of min(reduce_bucket_size,
 * largest shard, sub_group_size) elements (rounded up to 64 Ki), added by
 * read-add-write for later micro-batches; the norm is taken from the final
 * chunk in memory, and each sub-group's gradient is read into its slot with
 * its state for Adam (ZeRO-Infinity's gradient swapping); a sub-group whose
 * state is already in a slot when its first gradient of the step arrives
 * keeps the step's gradients in that slot instead (no grad.swp I/O; the slot
 * stays until its update; the same bits). The hand-over then
 * waits for each chunk's copy (the staging is synchronous), not for the disk.
 * Sums are formed in fp32 and rounded to
 * the accumulation dtype once per contribution, so with an fp32 accumulator
 * a caller's own fp32 sum in the same order gives the same bits.
 * With several ranks each contribution is reduced over the ranks on its own
 * (reduce-scatter at stages 1-3, all-reduce at stage 0) in its hand-over
 * dtype, through the reduction ring of reduce_bucket_size elements (sized
 * for fp32 when accumulation is on), then added (engine_dp.c), as
 * DeepSpeed reduces each micro-batch in its backward.
 * On one rank a contribution that must be converted or added goes through a
 * ring of pinned staging buckets of min(reduce_bucket_size, largest shard)
 * elements (two with overlap_comm, else one), in chunks of a bucket; the
 * single hand-over in the accumulation dtype with nothing accumulated is one
 * direct copy, as before. Source: DeepSpeed ZeRO stage 1/2
 * (stage_1_and_2.py: average_tensor, async_accumulate_grad_in_cpu_via_gpu).
 *
 * @grad:       device memory (any device allocation on the host backend), the
 *              whole tensor, n_elems elements of @grad_dtype:
 *              zo_engine_grad_dtype() (the working precision: bf16 when
 *              bf16.enabled, fp16 when fp16.enabled, else fp32), as the model
 *              produces it; or fp32 when gradient_accumulation_steps > 1 or
 *              data_types.grad_accum_dtype is not the working dtype (a model
 *              computed in fp32 hands over fp32 so accumulation matches one
 *              larger micro-batch to fp32 rounding). Multiplied by the current
 *              loss scale (zo_engine_loss_scale()); the engine divides it back
 *              out inside Adam.
 * Buffer reuse: the engine reads @grad after the call returns; the buffer is
 * the caller's again after zo_engine_grad_fence() (or zo_engine_step()).
 * Thread-safety: as the engine (one thread at a time).
 */

/*
 * zo_engine_grad_accumulate() - add one micro-batch's gradient of @p, not
 * the last one of this optimizer step, to the engine's accumulation of @p's
 * shard. Call it between compute passes as often as there are micro-batches
 * before the last; @p's weights stay fetchable (compute still reads them).
 * Returns once the copy out of @grad is enqueued on the copy stream (on one
 * rank it waits for the copy stream only in the rare case that the add of
 * the previous micro-batch's same chunk has not run yet). With
 * several ranks it is a collective in call order: every rank makes the same
 * calls in the same order. Returns ZO_OK; ZO_ERR_INVALID_ARG (NULL, a tensor
 * of another engine, a dtype other than zo_engine_grad_dtype() or fp32: the
 * tensor and both dtypes named); ZO_ERR_INVALID_USAGE (before finalize; after
 * @p's zo_engine_grad_ready() in this step; gradient_accumulation_steps 1
 * with the accumulation dtype the working dtype, where there is nothing to
 * accumulate into); the copy's device error or the collective's error. On an
 * error nothing already accumulated is lost.
 */
ZO_API zo_status zo_engine_grad_accumulate(zo_engine_t *e, zo_param_t *p, const void *grad,
                                           zo_dtype grad_dtype);

/*
 * zo_engine_grad_ready() - hand over @p's LAST gradient contribution of this
 * optimizer step: added to what zo_engine_grad_accumulate() gathered, if
 * anything, else the whole gradient (a caller that sums micro-batches itself
 * calls only this, once per step, with results bitwise as before when the
 * accumulation dtype is the working dtype).
 * Call once per tensor per optimizer step, in any order, as soon as the
 * gradient is final and compute no longer reads @p's weights in this step:
 * from here on the engine may update @p (with no gradient clipping, no fp16
 * and no delayed update, Adam on this shard or its NVMe sub-group starts as
 * soon as the copy lands, while backward goes on) and overwrite its device
 * copy; fetching @p again before zo_engine_step() is refused (with
 * zoffload.early_adam false it is not: nothing updates @p before the step).
 * Returns when the
 * copy of this rank's shard to host memory is enqueued on the copy stream;
 * @grad may be reused after zo_engine_grad_fence() or zo_engine_step().
 * After zo_engine_grad_reopen() a second call for @p in the same step adds
 * @grad to the landed gradient (through the staging ring on one rank, the
 * reduction ring on several, grad.swp's read-add-write or the sub-group's
 * slot with nvme), as a further micro-batch would be added, and @p lands
 * again; its norm is taken of the sum.
 * Returns ZO_OK, ZO_ERR_INVALID_ARG (NULL, a tensor of another engine, or a
 * dtype not accepted, both named), ZO_ERR_INVALID_USAGE (before finalize, or
 * twice in one step without zo_engine_grad_reopen() between), or the copy's
 * device error.
 */
ZO_API zo_status zo_engine_grad_ready(zo_engine_t *e, zo_param_t *p, const void *grad,
                                      zo_dtype grad_dtype);

/*
 * zo_engine_grad_reopen() - more contributions follow for this step's
 * gradients: two backward passes in one micro-batch (a GAN's discriminator on
 * real and on generated samples, then one step), summed as torch sums .grad.
 * Waits until every gradient handed over so far in this step has landed
 * (reduced over the ranks, copied or added into the host shard or written to
 * grad.swp, its norm taken); then zo_engine_grad_ready() may be called once
 * more for each tensor already handed over, and adds to it. A tensor not
 * handed over again keeps what landed. Call it before each further backward
 * pass (its gradients may reach any tensor); zo_engine_step() ends the step
 * as usual. Needs zoffload.early_adam false (the Python front's default):
 * with it true Adam may already have read a landed gradient. Memory: nothing
 * per tensor; on one rank with offload_optimizer cpu, the staging ring the
 * adds go through is planned at finalize when early_adam is false (at most
 * 2^22 elements a bucket when nothing else needs it). With nvme, sub-groups
 * whose gradients were read into their slot early read them again at the
 * step. With several ranks: every rank calls it at the same point (it waits
 * only for reductions already started, no collective of its own).
 * Returns ZO_OK (also when nothing was handed over yet in this step),
 * ZO_ERR_INVALID_ARG (NULL @e), ZO_ERR_INVALID_USAGE (before finalize;
 * zoffload.early_adam true), or the error of a landing it waited for (the
 * tensor named). Thread-safety: as the engine.
 */
ZO_API zo_status zo_engine_grad_reopen(zo_engine_t *e);

/*
 * zo_engine_grad_fence() - the caller's gradient buffers are free again.
 * @s: a stream of the engine's device (the caller's compute stream): work
 *     queued on @s after this call runs only once every gradient handed over
 *     so far (zo_engine_grad_accumulate() and zo_engine_grad_ready()) has
 *     been read out of the caller's buffer (copied to a staging bucket, the
 *     reduction ring or the host shard); returns at once. NULL: blocks the
 *     calling thread until then.
 * The additions into the accumulation and the landed work (norm, Adam) may
 * still be running; they read only engine memory. With several ranks the
 * reduction reads the ring, not @grad, so the fence covers it.
 * Returns ZO_OK (also when nothing was handed over yet); ZO_ERR_INVALID_ARG
 * (NULL @e); ZO_ERR_INVALID_USAGE (before finalize); the device's error.
 * Thread-safety: as the engine.
 */
ZO_API zo_status zo_engine_grad_fence(zo_engine_t *e, zo_stream_t *s);

/* What one zo_engine_step() did. Times are wall-clock seconds inside the call. */
typedef struct zo_step_info {
  int64_t step;       /* optimizer steps applied so far (skipped ones not counted) */
  int skipped;        /* 1: fp16 overflow (inf/NaN gradient), nothing was updated */
  double lr;          /* learning rate used (0 when skipped) */
  double grad_norm;   /* global L2 norm of the unscaled gradient, before clipping */
  double loss_scale;  /* loss scale in force for the NEXT step */
  double grad_wait_s; /* waiting for gradient copies to land */
  double adam_s; /* CPU Adam with the fused working-dtype copy-out, plus the gradient norm pass */
  double swap_s; /* waiting on NVMe reads and writes */
  /* queueing the host-to-device copies of the new working weights (the cast is fused into Adam) */
  double copy_s;
  /* exposed fetch time: compute blocked in zo_engine_fetch() since the previous step */
  double fetch_wait_s;
  int64_t n_prefetch;     /* fetches the coordinator started ahead of use since the previous step */
  int64_t n_demand_fetch; /* fetches started only when compute asked (first step, or off-trace) */
  /* several ranks: time blocked in collectives (gradient reduce-scatter or all-reduce, weight
   * all-gather) since the previous step; 0 with one rank */
  double comm_s;
  /* several ranks: bytes a bandwidth-optimal (ring) algorithm sends from this rank for those
   * collectives since the previous step: (W-1) blocks per reduce-scatter and per all-gather, twice
   * that per all-reduce; ZeRO's paper counts 2 x parameters for stages 1-2, which this approaches
   * as (W-1)/W x 2 x parameters x bytes per element */
  uint64_t comm_bytes;
} zo_step_info;

/*
 * zo_engine_step() - apply the optimizer to every shard: wait for gradients,
 * compute the global gradient norm (all-reduced across ranks), on overflow
 * (fp16) skip and lower the loss scale, otherwise unscale and clip (with
 * gradient_clipping > 0, coefficient clip / (norm + 1e-6) when norm > clip,
 * as DeepSpeed), run Adam/AdamW (zo_adam_step) at the scheduler's lr on the
 * tier where the state lives, cast the new master weights to the working dtype and
 * queue the host-to-device copy (and all-gather) of the working weights.
 * With zoffload.delayed_param_update (DPU, from the ZeRO-Offload paper;
 * needs offload_optimizer "cpu" or "nvme" and no parameter offload), after
 * zoffload.delayed_param_update_warmup_steps steps applied without it, the
 * call queues this step's Adam and returns: the update (with nvme, the whole
 * sub-group pipeline: state reads, Adam, write-backs) runs on the CPU during
 * the next step's forward and backward, and the next zo_engine_step()
 * publishes it before queueing its own; with nvme the next step's first
 * gradient to reach a sub-group waits until the update is done with it. Step N+1 therefore computes with the weights of
 * update N-1 (one step stale): master weights follow exactly the same
 * sequence as without DPU, but gradients are taken at weights one update
 * older, which slows convergence slightly early in training (the paper
 * enables DPU after a few warm-up steps) in exchange for hiding Adam.
 * NVMe optimizer state moves through offload_optimizer.buffer_count slots of
 * pinned buffers, one sub-group (sub_group_size elements) per slot, as a
 * pipeline that runs across steps: a sub-group's read is issued as soon as a
 * slot is free, in the order the sub-groups' gradients completed in the last
 * step (first step: reverse registration order), so the first reads of a
 * step overlap the forward pass; its Adam starts when its state is in memory
 * and all its gradients have landed, that is are written to grad.swp or
 * held in its slot (during backward, unless clipping or fp16 need the whole
 * step first: then every sub-group's gradients are parked in grad.swp, or its
 * slot, until the step), after its gradients are read into the slot beside
 * the state; its write-back (of the
 * state only: the gradient file is not state, never checkpointed) is issued at once and
 * left in flight when this call returns (a later read of the same slot, or
 * zo_engine_get_master(), waits for it). A slot keeps its clean state until
 * another read needs it, so buffer_count >= the number of sub-groups keeps
 * the whole state in memory and only writes it through. The disk keeps
 * streaming between engine calls (the swap handle's progress thread).
 * Every tensor must have had zo_engine_grad_ready() since the last step
 * (zo_engine_grad_accumulate() alone does not count).
 * Synchronous for Adam; NVMe write-backs of the state may still be in flight
 * on return; the working-weight copy completes
 * before the next zo_engine_fetch() returns. @info may be NULL.
 * Returns ZO_OK, ZO_ERR_INVALID_USAGE (a tensor had no gradient, or had
 * accumulated micro-batches but no zo_engine_grad_ready(): named; nothing
 * accumulated is dropped, so the caller may hand it over and step again),
 * ZO_ERR_IO / ZO_ERR_CORRUPT (swap, file and offset named), device errors.
 */
ZO_API zo_status zo_engine_step(zo_engine_t *e, zo_step_info *info);

/*
 * zo_engine_synchronize() - finish every update in flight: with
 * zoffload.delayed_param_update, the last step's Adam tasks are waited and
 * their working weights published to the device; then the copy stream is
 * drained. Call it before reading final weights (zo_engine_get_master does,
 * on several ranks without the publish). On several ranks with the delayed
 * update pending it is collective (the publish all-gathers the new shards):
 * every rank calls it, as every rank calls zo_engine_step().
 * Returns ZO_OK or the first error of the work it waited for.
 */
ZO_API zo_status zo_engine_synchronize(zo_engine_t *e);

/* zo_engine_loss_scale() - the loss scale to multiply the next loss by (1.0 unless fp16). */
ZO_API double zo_engine_loss_scale(const zo_engine_t *e);

/*
 * zo_engine_steps_applied() - optimizer steps applied so far (fp16 overflow
 * steps that were skipped not counted), as zo_step_info.step; after
 * zo_engine_load(), the checkpoint's count. Thread-safety: as the engine.
 */
ZO_API int64_t zo_engine_steps_applied(const zo_engine_t *e);

/* zo_engine_working_dtype() - dtype of working weights (fp32, bf16 or fp16). */
ZO_API zo_dtype zo_engine_working_dtype(const zo_engine_t *e);

/* zo_engine_grad_dtype() - dtype zo_engine_grad_ready() takes (the working dtype; fp32 too with
 * accumulation). */
ZO_API zo_dtype zo_engine_grad_dtype(const zo_engine_t *e);

/* zo_engine_grad_accum_dtype() - dtype of the gradient shard micro-batches are summed into (see the hand-over
 * above): the working dtype when gradient_accumulation_steps is 1, else fp32, unless
 * data_types.grad_accum_dtype says otherwise. Known from zo_engine_create(). */
ZO_API zo_dtype zo_engine_grad_accum_dtype(const zo_engine_t *e);

/* Bytes held per tier, summed over all tensors of this rank, and traffic so far. */
typedef struct zo_engine_mem {
  /* device memory allocated by the engine (working weights, and state when device "none") */
  size_t device_bytes;
  size_t device_peak_bytes; /* peak of the whole device (zo_device_mem_info) */
  /* host buffers (master/state for "cpu", gradients, staging, sub-group buffers) */
  size_t host_bytes;
  size_t pinned_bytes;       /* of host_bytes, the page-locked part */
  size_t nvme_bytes;         /* swap file bytes (preallocated) */
  size_t device_param_bytes; /* parameter offload: working copies held in device memory now */
  uint64_t nvme_read_bytes, nvme_write_bytes; /* cumulative swap traffic */
  uint64_t h2d_bytes, d2h_bytes;              /* cumulative host<->device traffic */
  /* the device arena every engine allocation comes from (zoffload/arena.h): its capacity, live and
   * free bytes, largest free block, fragmentation, compactions */
  zo_arena_stats arena;
  /* What this rank holds, by kind, on whatever tier it lives (with several ranks, its share): */
  /* working weights: the device copy (resident), the host tier (offload_param cpu) or params.swp
   * plus the tensors cached in host memory by offload_param.max_in_cpu (nvme); at stage 3 on
   * several ranks the rank's blocks */
  size_t param_bytes;
  /* gradient shards (host buffers, device with offload_optimizer "none", grad.swp with "nvme") */
  size_t grad_bytes;
  size_t state_bytes; /* fp32 master weights, exp_avg and exp_avg_sq of the rank's shards */
  size_t comm_bytes;  /* several ranks: the reduction ring and the gather buffers (engine_dp*.c) */
} zo_engine_mem;

/*
 * zo_engine_nvme_busy() - the engine's swap I/O so far, per direction ([0] reads, [1] writes): the seconds with a
 * request of that direction in flight and the bytes completed (zoffload/swap.h zo_swap_busy(), the optimizer
 * state's handle plus the parameters' when they have their own). Differences over a step give the throughput the
 * disk gave this run's own I/O; zeros without NVMe. Returns ZO_OK or ZO_ERR_INVALID_ARG.
 */
ZO_API zo_status zo_engine_nvme_busy(const zo_engine_t *e, double busy_s[2], uint64_t bytes[2]);

/* zo_engine_mem_info() - fill @m. Returns ZO_OK or ZO_ERR_INVALID_ARG. */
ZO_API zo_status zo_engine_mem_info(const zo_engine_t *e, zo_engine_mem *m);

/* zo_engine_param_name(), zo_engine_param_numel() - registered name and element count. */
ZO_API const char *zo_engine_param_name(const zo_param_t *p);
ZO_API size_t zo_engine_param_numel(const zo_param_t *p);

/*
 * zo_engine_get_master() - copy this rank's fp32 master shard of @p to
 * @out (float32[shard elements], host memory) and return the shard's element
 * range in the whole tensor. Synchronous (reads swap for nvme). For tests and
 * checkpoints. Returns ZO_OK, ZO_ERR_INVALID_ARG, ZO_ERR_IO.
 */
ZO_API zo_status zo_engine_get_master(zo_engine_t *e, zo_param_t *p, float *out,
                                      size_t *shard_offset, size_t *shard_n);

/* ---------------------------------------------------------------- states off the device between phases */

/*
 * Kinds of engine state that zo_engine_offload_states() moves, as bits: DeepSpeed's OffloadStateTypeEnum
 * (runtime/zero/offload_config.py) in zoffload's terms. Each kind is in device memory only where the config puts
 * it there: ZO_STATES_OPTIM, ZO_STATES_HP_PARAMS and ZO_STATES_LP_GRADS with offload_optimizer.device "none";
 * ZO_STATES_LP_PARAMS with offload_param.device "none" (the resident working weights), and with parameter
 * offload the device copies of fetched tensors (a cache: dropped, not moved; the next fetches bring them again).
 */
typedef enum zo_states_kind {
  ZO_STATES_OPTIM = 1u << 0,     /* optim_states: exp_avg and exp_avg_sq of this rank's shards */
  ZO_STATES_HP_PARAMS = 1u << 1, /* hp_params: the fp32 master weights of this rank's shards */
  ZO_STATES_LP_PARAMS = 1u << 2, /* lp_params: the working (fp32/bf16/fp16) weights */
  ZO_STATES_LP_GRADS = 1u << 3,  /* lp_grads: the gradient shards (the accumulation dtype) */
  /* contiguous_grad_buffer: the engine's own device buffers of the gradient path (device Adam's norm partials
   * and, on several ranks, its upload stage) */
  ZO_STATES_GRAD_BUFFER = 1u << 4,
  ZO_STATES_ALL = 0x1fu,
} zo_states_kind;

/* Where zo_engine_offload_states() left things; from zo_engine_states_info(). Bytes throughout. */
typedef struct zo_states_info {
  unsigned offloaded; /* zo_states_kind bits moved to host memory now; 0: nothing is offloaded */
  /* zo_states_kind bits in device memory now: what zo_engine_offload_states() would move (after finalize) */
  unsigned held;
  size_t host_bytes;        /* the host copy of those kinds' device regions */
  int host_pinned;          /* 1: that copy is page-locked (pin_memory, within the pinned budget) */
  size_t kept_device_bytes; /* kinds not named, kept in device memory meanwhile (one allocation) */
  /* the device arena's reservation given back to the device (every byte of the engine's device memory but
   * kept_device_bytes), and reserved again by zo_engine_reload_states() */
  size_t released_bytes;
  double offload_s, reload_s; /* wall time of the last offload and of the last reload, seconds */
} zo_states_info;

/*
 * zo_engine_offload_states() - move the engine's device-resident states named by @kinds to host memory and give
 * the device memory back, so that another model can use the device between training phases (DeepSpeed 0.16+'s
 * engine.offload_states(), e.g. while an RLHF loop generates with another model).
 * @kinds:      zo_states_kind bits (ZO_STATES_ALL: everything). Named kinds the config keeps in host memory or
 *              on NVMe already are left where they are.
 * @pin_memory: 1: the host copy is page-locked when the pinned budget allows (the pinned pool's bytes plus the
 *              copy within zoffload.pinned_fraction of MemTotal), else pageable (an info line says so); 0:
 *              pageable.
 * When any named kind is in device memory: the engine's work in flight is finished (the delayed update's
 * publish too, as zo_engine_synchronize()), the device copies of offloaded parameters are dropped, the named
 * kinds' regions are copied to one host buffer, the kinds not named are copied into one device allocation of
 * exactly their bytes, and the device arena (the engine's whole reservation, zoffload/arena.h) is destroyed:
 * its memory goes back to the device (cudaFree on CUDA). zo_device_mem_info() then shows the engine holding
 * kept_device_bytes only. When no named kind is in device memory nothing moves and nothing changes (ZO_OK).
 * Legal between zo_engine_step() (or zo_engine_finalize(), a load) and the next micro-batch's first gradient
 * hand-over, with no tensor fetched (every fetch released). Calling it again while offloaded is ZO_OK when it
 * names no kind that is still in device memory, else ZO_ERR_INVALID_USAGE (reload first).
 * While offloaded, the calls that need the moved memory return ZO_ERR_INVALID_USAGE naming the offloaded kinds
 * and zo_engine_reload_states(): zo_engine_grad_accumulate(), zo_engine_grad_ready(), zo_engine_grad_fence(),
 * zo_engine_step(), zo_engine_load_param(), zo_engine_get_master(), checkpoint save, load and export; and
 * zo_engine_fetch() / zo_engine_release(), except with the working weights resident and kept (offload_param
 * "none", ZO_STATES_LP_PARAMS not named): then they work, at the kept allocation's new addresses, for
 * generation or evaluation between phases. zo_engine_synchronize(), zo_engine_mem_info(), zo_engine_set_lr(),
 * zo_engine_set_trace(), zo_engine_states_info() and zo_engine_destroy() work as always.
 * Device addresses of the engine's memory (fetched weights, a framework's views of them) change: fetch again
 * after zo_engine_reload_states() (and, with kept working weights, after this call).
 * Synchronous: the copies have completed when it returns. Several ranks: each rank moves its own memory (over
 * NCCL the collectives' buffers in the device block go too: they are empty between steps; each NCCL communicator's
 * own staging, ZO_COMM_NCCL_STAGE_BYTES, stays with it); with zoffload.delayed_param_update pending it is
 * collective, as zo_engine_synchronize().
 * Returns ZO_OK; ZO_ERR_INVALID_ARG (NULL @e, @kinds 0 or with bits outside ZO_STATES_ALL); ZO_ERR_INVALID_USAGE
 * (before finalize, after a failed one, mid-step: gradients handed over or micro-batches accumulated since the
 * last step, a tensor still fetched: named); ZO_ERR_OUT_OF_MEMORY (host memory for the copy: the bytes needed
 * and available named; or the device for the kept allocation); device errors. On an error nothing has moved
 * and the engine trains on. Thread-safety: as the engine.
 */
ZO_API zo_status zo_engine_offload_states(zo_engine_t *e, unsigned kinds, int pin_memory);

/*
 * zo_engine_reload_states() - undo zo_engine_offload_states(): reserve the device arena again (its capacity before
 * the offload; with zoffload.device_arena_bytes 0 and less free now, 90% of what is free on a GPU, all of it on a
 * host device, when that still holds the engine's need), copy every moved region back and the kept ones into the
 * new block, bit for bit, and free the host copy and the kept allocation. Training continues as if the round trip
 * had not happened (the same weights, moments and gradients; the device copies of offloaded parameters are
 * fetched again as on a first step). Device addresses change: fetch again. ZO_OK and nothing done when nothing
 * is offloaded. Synchronous. Returns ZO_OK; ZO_ERR_INVALID_ARG (NULL); ZO_ERR_OUT_OF_MEMORY when the device
 * cannot hold the engine's memory now (bytes needed and free named; the engine stays offloaded, and a later call
 * may succeed once the device has room); device errors. Thread-safety: as the engine.
 */
ZO_API zo_status zo_engine_reload_states(zo_engine_t *e);

/* zo_engine_states_info() - fill @out (all zero but held and the last times when nothing is offloaded). Returns ZO_OK,
 * ZO_ERR_INVALID_ARG or ZO_ERR_OUT_OF_MEMORY (a small table). */
ZO_API zo_status zo_engine_states_info(const zo_engine_t *e, zo_states_info *out);

#ifdef __cplusplus
}
#endif
#endif /* ZOFFLOAD_ENGINE_H */
