/*
 * train_model.h - the GPT model zo-train trains, behind one interface, on
 * either compute backend, wired to the offload engine (its public API only):
 *   cpu   gpt.c (fp32, OpenBLAS): each group's working weights are fetched
 *         from the engine and cast into the model's fp32 buffers; gradients
 *         are cast to the working dtype into a device buffer and handed over;
 *   cuda  gpt_cuda.cu (bf16 storage, fp32 accumulation, cuBLAS): the model
 *         computes straight from the engine's fetched device copies and
 *         accumulates bf16 gradients into one device buffer that is handed
 *         over tensor by tensor; the engine's copies are ordered against the
 *         model's stream (zo_engine_set_compute_stream).
 * Both go through the same layer hook (fetch before a group computes,
 * release after, hand each gradient over as soon as its group is done in the
 * last micro-batch), so the engine, the coordinator and CPU Adam are the same
 * code on both backends. Not thread-safe; errors are -1 / NAN with a message
 * in train_model_error(); nothing exits.
 */
#ifndef ZO_TRAIN_MODEL_H
#define ZO_TRAIN_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "gpt.h"
#include "zoffload/engine.h"

typedef struct train_model train_model;

/* 1 when this zo-train was built with CUDA compute (nvcc found at configure time). */
int train_model_cuda_built(void);

/*
 * train_model_bytes() - what the model holds besides the engine, per tier
 * (indexed by zo_tier of zoffload/budget.h: device, host, pinned, nvme), for
 * a batch of @max_batch x c->seq_len: cpu resident: its fp32 weights,
 * gradients and activations (gpt_host_bytes) on the host, and the gradient
 * hand-over buffer (n_params x grad dtype) on the device; cpu @streamed:
 * activations (gpt_streamed_host_bytes) and two fp32 scratches (weights and
 * gradients) of group 0 and of the largest other group on the host, a
 * gradient ring of twice the largest tensor in @hand_dtype on the device; cuda:
 * activations and workspaces (gpt_cuda_device_bytes) plus, @streamed, three
 * bf16 gradient scratches (group 0's and twice the largest other group's,
 * each tensor rounded up to 256 bytes), else the bf16 gradient buffer of the
 * whole model, on the device; @gemm_bf16 (cpu streamed): the two bf16 activation scratches of
 * gpt_gemm_bf16_bytes() on the host. Pure arithmetic; SIZE_MAX for a sum past size_t.
 * Returns 0, or -1 when @cuda is asked of a build without CUDA compute.
 */
int train_model_bytes(const gpt_config *c, int max_batch, int recompute, int cuda, int streamed,
                      int gemm_bf16, zo_dtype grad_dtype, zo_dtype hand_dtype, size_t app[4]);

/* train_model_hand_dtype() - the dtype a streamed model hands gradients over in: fp32 when @eng accumulates
 * micro-batches in fp32 (zo_engine_grad_accum_dtype), else the working dtype. */
zo_dtype train_model_hand_dtype(const zo_engine_t *eng);

/*
 * train_model_create() - the model on @dev (cuda when zo_device_get_kind(dev)
 * is ZO_DEVICE_CUDA), its gradient buffer in @dev's memory, and its hooks on
 * @eng, whose tensors @params (gpt_param_specs() order, registered by the
 * caller; borrowed) are. Call before zo_engine_finalize() (the model's device
 * memory comes before the engine's arena takes the rest). cuda needs
 * bf16.enabled (working dtype bf16). @streamed on cpu: the model holds no
 * full-model weights or gradients: each layer group's
 * working weights are fetched and cast into an fp32 scratch as the group
 * begins, and each tensor's gradient of every micro-batch is handed over as
 * its group ends (zo_engine_grad_accumulate, zo_engine_grad_ready in the
 * last micro-batch) through a device ring of twice the largest tensor,
 * reused from its start after zo_engine_grad_fence(). @streamed on cuda
 * (the model computes from the engine's device copies either way): no
 * full-model gradient buffer; each backward writes a group's bf16 gradients
 * into a device scratch zeroed at the group's begin (group 0's own; blocks
 * and ln_f alternate between two of the largest group, so the copy out of
 * one overlaps the next block's backward; zo_engine_grad_fence() on the
 * model's stream orders the zeroing after the copies out of it, with no host
 * sync) and hands each tensor over from there at its end, every
 * micro-batch; not @streamed: one bf16 buffer of the whole model's
 * gradients, summed over the micro-batches in bf16 and handed over in the
 * last. @gemm_bf16 (train.cpu_gemm "bf16"; on the CPU model with @streamed and bf16.enabled only, refused
 * otherwise naming the key; nothing to do on cuda, whose products are bf16 already): the blocks' four products take bf16 operands (gpt_set_gemm_bf16), their weights bound straight from
 * the engine's bf16 working copies instead of cast into the fp32 scratch. Returns 0 or -1 with a message in @err.
 */
int train_model_create(const gpt_config *c, int max_batch, int recompute, int streamed,
                       int gemm_bf16, zo_engine_t *eng, zo_device_t *dev, zo_param_t **params,
                       train_model **out, char *err, size_t errlen);
void train_model_destroy(train_model *m);

/* train_model_zero_grad() - zero the gradients before a step's first micro-batch (streamed, cpu or cuda: nothing
 * to do). */
int train_model_zero_grad(train_model *m);

/*
 * train_model_forward() - mean cross-entropy of the batch (uint8 host arrays
 * [B*T]); synchronous. train_model_backward() - its gradients times
 * @loss_mult; @hand_over 1 in the last micro-batch of a step (gradients go
 * to the engine as their groups finish; streamed: every micro-batch's go,
 * accumulated by the engine, made ready in the last); returns when the
 * backward has run.
 */
float train_model_forward(train_model *m, const uint8_t *in, const uint8_t *tg, int B, int T);
int train_model_backward(train_model *m, float loss_mult, int hand_over);

/*
 * train_model_forward_queue() - as train_model_forward(), but with the CUDA
 * model's fused kernels (train_model_set_cuda_kernels) the pass is only
 * queued (no synchronization until backward's end); train_model_loss() then
 * reads its loss. Other models run the forward here and keep its loss.
 * Returns 0, or -1 (message in train_model_error(); a NaN loss is an error
 * as in train_model_forward). With a queued forward, train_model's forward
 * seconds are the host's queueing, and the forward's GPU work after it
 * counts in backward's seconds (their sum is the same).
 */
int train_model_forward_queue(train_model *m, const uint8_t *in, const uint8_t *tg, int B, int T);

/* train_model_loss() - the loss of the last train_model_forward_queue() (waits for its copy only); NAN with a
 * message in train_model_error() when it is not finite or none was queued. */
float train_model_loss(train_model *m);

/*
 * train_model_set_cuda_kernels() - the CUDA model's kernel set: 0 baseline,
 * 1 fused (gpt_cuda_set_kernels); nothing to set on a CPU model. Returns
 * 0, or -1 with a message (the cuBLASLt handle could not be made).
 */
int train_model_set_cuda_kernels(train_model *m, int fused);

/*
 * train_model_set_kernel_times() - GPU time by kernel class on the CUDA
 * model (gpt_cuda_set_kernel_times); -1 with a message on a CPU model.
 * train_model_kernel_times() - the milliseconds by class since the last call
 * (GPT_CUDA_TIME_GEMM, _ATTENTION, _OTHER order), waiting for the model's
 * stream; 0, or -1 with a message.
 */
int train_model_set_kernel_times(train_model *m, int on);
int train_model_kernel_times(train_model *m, double ms[3]);

/*
 * train_model_sample() - @n_new bytes after @prompt with the final weights
 * (gpt_sample()'s rule). Fetches every tensor outside the trace first; with
 * parameters offloaded to a device that cannot hold them all at once,
 * returns 1 (nothing sampled) with the reason in train_model_error().
 */
int train_model_sample(train_model *m, const uint8_t *prompt, int prompt_len, int n_new,
                       float temperature, uint64_t seed, uint8_t *out);

const char *train_model_error(const train_model *m);
/* "cpu (OpenBLAS Cooperlake, 2 threads)" or "cuda (NVIDIA H100 80GB HBM3, sm_90)". */
const char *train_model_describe(const train_model *m);
/* Wall seconds of forward and backward so far (cuda: to the end of their GPU work). */
double train_model_forward_seconds(const train_model *m);
double train_model_backward_seconds(const train_model *m);

#endif
