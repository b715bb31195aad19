/*
 * gpt_cuda.h - zo-train's GPT model (gpt.h) on one CUDA GPU (models/, library
 * zo_gpt_cuda): the same math, parameter order, hooks and loss, with bf16
 * storage and fp32 accumulation. Not an optimizer and not a memory manager for
 * weights or gradients: both stay the caller's (the offload engine's); this
 * owns activations only.
 *
 * Conventions as in gpt.h: B batch, T time, C d_model, NH n_head, hs = C/NH,
 * V vocab, L n_layer, N = B*T; Linear weights (out, in) row-major, y = x W^T + b;
 * GELU tanh approximation; LayerNorm eps 1e-5; wte tied as the output
 * projection; loss = mean cross-entropy (nats) over the B*T positions.
 *
 * Kernel sets: what follows describes GPT_CUDA_KERNELS_BASELINE, the
 * default; GPT_CUDA_KERNELS_FUSED (gpt_cuda_set_kernels() below) computes
 * the same math with cuBLASLt epilogues, fused kernels and cuDNN attention.
 *
 * Numerics: every tensor in device memory is bf16 (__nv_bfloat16) except the
 * LayerNorm statistics, per-position losses, the residual-stream gradient and
 * the wte gradient of one backward (fp32). Every matmul is a cuBLAS
 * cublasGemmEx / cublasGemmStridedBatchedEx with bf16 A and B and
 * CUBLAS_COMPUTE_32F (fp32 accumulation); C is bf16, except the LM head's wte
 * gradient (fp32, summed with the embedding's part before its one rounding).
 * Weight gradients are added by the GEMM itself (beta = 1 onto the caller's
 * bf16 gradient): one rounding per tensor per backward. Element-wise and
 * reduction kernels compute in fp32. With ZO_GPT_CUDA_GEMM=reference in the
 * environment at gpt_cuda_create(), every GEMM is instead a plain kernel of
 * ours with the same meaning (one thread per output, fp32 accumulation in k
 * order; slow): for compute-sanitizer's racecheck, so that no cuBLAS kernel
 * runs (its kernel filter failed on cuBLAS's Hopper kernels). Kernels after
 * Karpathy's llm.c
 * (train_gpt2.cu); recompute is activation checkpointing per transformer
 * block (Chen et al., "Training Deep Nets with Sublinear Memory Cost", 2016;
 * Megatron-LM's full recompute, Korthikanti et al. 2022).
 *
 * Determinism: no float atomics; every reduction has a fixed order (per-row
 * block reductions, two-pass column sums over fixed row chunks, the wte
 * gradient per (token, channel) over a host-sorted position list). cuBLAS is
 * run-to-run reproducible on one GPU model with a fixed workspace (set here)
 * and one stream. Same inputs and weights give bitwise identical losses and
 * gradients run to run, and with recompute on or off (the recomputed forward
 * runs the same kernels on the same inputs at equally aligned addresses).
 *
 * Thread-safety: a gpt_cuda is used by one host thread at a time. All GPU
 * work is queued on one stream (gpt_cuda_stream()). Errors never exit: calls
 * return -1 or NAN and gpt_cuda_last_error() names the CUDA/cuBLAS call and
 * the kernel or tensor being computed.
 */
#ifndef ZO_TRAIN_GPT_CUDA_H
#define ZO_TRAIN_GPT_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "gpt.h" /* gpt_config, gpt_param_spec, gpt_hook_fn, GPT_HOOK_*, gpt_num_groups, gpt_group_params */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gpt_cuda gpt_cuda;

/*
 * gpt_cuda_device_bytes() - device bytes gpt_cuda_create() allocates (in one
 * cudaMalloc) for batches up to @max_batch x c->seq_len: activations, logits,
 * backward scratch and the 32 MiB cuBLAS workspace; not the weights nor the
 * gradients (the caller's). Pure arithmetic, no GPU needed; 0 for a config
 * that fails gpt_config_check() or max_batch < 1. Every buffer is rounded up
 * to 256 bytes (S(x) below). With Nm = max_batch*seq_len, TT = max_batch*NH*
 * seq_len^2, A = (recompute ? 1 : L) activation sets:
 *   A * [ S(2NmC) ln1 + S(6NmC) q,k,v by head + S(2TT) attention probs
 *         + S(2NmC) att out + S(2NmC) residual2 + S(2NmC) ln2
 *         + S(8NmC) fc + S(8NmC) gelu + 4 * S(4Nm) LN mean/rstd ]
 *   + (L+1) * S(2NmC)   residual stream: block inputs and the last output
 *   + S(2NmC) + 2*S(4Nm) ln_f out, mean, rstd
 *   + S(2NmV)           logits (bf16), overwritten by dlogits in backward
 *   + 2*S(4Nm) + S(4)   logsumexp and loss per position, mean loss
 *   + 2*S(Nm) + S(4Nm) + S(4*257)   inputs, targets, positions sorted by token
 *   + S(4NmC) + 2*S(2NmC) + S(6NmC) + S(8NmC) + S(2TT)   backward scratch:
 *         fp32 residual grad, two (N,C), (N,3C), (N,4C), attention grad
 *   + S(4VC)            fp32 wte gradient of one backward
 *   + S(4*64*4C)        column-sum partials (64 row chunks)
 *   + 32 MiB            cuBLAS workspace (cublasSetWorkspace)
 * Not counted: the CUDA context, the cuBLAS handle's own allocations
 * (cublasCreate: a few MiB of state; the test allows 96 MiB), and 4*Nm + 8*Nm
 * + 1 KiB of pinned host staging. E.g. L=48, C=4096, NH=32, seq 1024, V=50304
 * (10B parameters), recompute 1: max_batch 1 / 4 / 8 take 1.74 / 4.36 / 7.86 GB;
 * recompute 0: 10.8 / 40.6 / 80.4 GB.
 */
size_t gpt_cuda_device_bytes(const gpt_config *c, int max_batch, int recompute);

/*
 * gpt_cuda_create() - a model on the current CUDA device for batches up to
 * @max_batch x c->seq_len (c->seq_len * max_batch must fit an int).
 * @recompute: 0 keeps every block's activations for backward; 1 keeps only
 * each block's input (the residual stream) and recomputes the block's
 * forward, into one shared activation set, during its backward.
 * @stream: a cudaStream_t passed as void*, on which all work is queued; NULL
 * creates an own non-blocking stream (destroyed with the model).
 * Synchronous. Returns 0 and *@out, or -1 with a message in @err (@errlen
 * bytes): bad config, cudaMalloc failure (with the byte count), cuBLAS.
 */
int gpt_cuda_create(const gpt_config *c, int max_batch, int recompute, void *stream, gpt_cuda **out,
                    char *err, size_t errlen);

/* gpt_cuda_destroy() - synchronize the stream, free everything; NULL is accepted. */
void gpt_cuda_destroy(gpt_cuda *m);

/* gpt_cuda_stream() - the cudaStream_t (as void*) every call queues its work on. */
void *gpt_cuda_stream(gpt_cuda *m);

/*
 * gpt_cuda_set_weight() - parameter @i (index of gpt_param_specs()) as bf16
 * device memory of n_elems elements, 256-byte aligned, owned by the caller.
 * Set it (e.g. from the hook's begin call) before the group that uses it
 * computes; it may change between calls: the pointer is read when kernels
 * are queued, the memory when they run. Out-of-range @i is ignored.
 */
void gpt_cuda_set_weight(gpt_cuda *m, int i, const void *w_bf16);

/*
 * gpt_cuda_set_grad() - where backward ADDS dL/dw_i * loss_mult: bf16 device
 * memory of n_elems, caller-owned. Each backward adds one fp32-accumulated,
 * once-rounded term per tensor (every tensor's gradient is written once per
 * backward; wte's LM-head part is summed with its embedding part in fp32
 * first). Two ways to use it: the caller zeroes it (e.g. cudaMemsetAsync on
 * gpt_cuda_stream()) before a step's first micro-batch and the backwards sum
 * the micro-batches in bf16; or the caller zeroes it on the stream at the
 * hook's backward begin(g) of the tensor's group, so at end(g) it holds
 * exactly this backward's gradient, in place to be copied out (zo-train's
 * streamed mode: per-group scratches, rebound at every begin(g)). As with
 * weights the pointer may change between calls and is read when the group's
 * kernels are queued: set it by backward begin(g) (group 0: begin(0)).
 */
void gpt_cuda_set_grad(gpt_cuda *m, int i, void *g_bf16);

/*
 * gpt_cuda_set_hook() - install (fn != NULL) or remove the layer-group hook;
 * the same contract and order as gpt_set_hook() in gpt.h:
 *   forward:  begin(0), [begin(g), end(g)] g = 1..L, begin(L+1), end(L+1), end(0);
 *   backward: begin(0), begin(L+1), end(L+1), [begin(g), end(g)] g = L..1, end(0).
 * Hooks run on the host when the group's work is queued (begin) or has been
 * queued (end), not when it has run: order further GPU work after it on
 * gpt_cuda_stream() (e.g. cudaEventRecord at end(g)). At a backward end(g) the
 * group's gradient additions are queued. With recompute the block's forward
 * recompute is queued between backward begin(g) and end(g), so its weights
 * must be set by backward begin(g). A hook returning non-zero aborts the pass
 * (forward returns NAN, backward -1); already queued work is not waited for.
 */
void gpt_cuda_set_hook(gpt_cuda *m, gpt_hook_fn fn, void *user);

/*
 * gpt_cuda_forward() - run on @inputs and @targets, host uint8 [B*T] row-major
 * (B,T), 1 <= B <= max_batch, 1 <= T <= seq_len, ids < vocab (targets may be
 * NULL: logits only). They are staged through pinned memory and copied on
 * the stream. Synchronizes the stream at the end. Returns the mean
 * cross-entropy (nats) over the B*T positions, 0 when @targets is NULL, or
 * NAN on error (message in gpt_cuda_last_error()).
 */
float gpt_cuda_forward(gpt_cuda *m, const uint8_t *inputs, const uint8_t *targets, int B, int T);

/*
 * gpt_cuda_backward() - backward of the last forward with targets (none
 * since, nor a gpt_cuda_sample()), adding dL/dw * @loss_mult (e.g.
 * loss_scale / grad_accum_steps; L already includes 1/(B*T)) into the
 * gradients. Overwrites the logits with dlogits (the fused set's forward
 * already did, unscaled), so it runs once per forward.
 * Returns when all work is queued (no synchronization at the end; the caller
 * orders on the stream or synchronizes it); 0, or -1 with a message (no
 * forward with targets, weight/grad not set, CUDA/cuBLAS error, hook).
 */
int gpt_cuda_backward(gpt_cuda *m, float loss_mult);

/*
 * gpt_cuda_sample() - as gpt_sample() in gpt.h: @n_new bytes after @prompt
 * (empty prompt: start from '\n'), B = 1 forward on the last seq_len bytes,
 * greedy when @temperature <= 0 else softmax(logits/temperature) sampled with
 * the same splitmix64 rule; only ids < 256 are picked. Logits come from the
 * GPU (bf16), so picks may differ from the fp32 CPU model on near ties.
 * Runs without the hook, with the weights currently set. Synchronous.
 * Returns 0, or -1 (message in gpt_cuda_last_error()).
 */
int gpt_cuda_sample(gpt_cuda *m, const uint8_t *prompt, int prompt_len, int n_new,
                    float temperature, uint64_t seed, uint8_t *out);

/*
 * The kernel set a model runs (gpt_cuda_set_kernels()):
 * GPT_CUDA_KERNELS_BASELINE (the default): the kernels described above,
 * cublasGemmEx and plain element-wise kernels.
 * GPT_CUDA_KERNELS_FUSED (gpt_cuda_fused.h, gpt_cuda_lt.h): cuBLASLt matmuls
 * with epilogues (bias; bias + GELU with the pre-GELU input kept as the
 * epilogue's aux output; GELU gradient + bias gradient; the bias gradient of
 * the weight-gradient GEMM), each shape's algorithm chosen once by
 * cuBLASLt's heuristic and cached; a fused classifier (softmax, loss and
 * (softmax - onehot) / N in one kernel per row, written over the logits in
 * the forward: no logits survive a forward with targets, and backward scales
 * by loss_mult in the LM-head GEMMs); 128-bit vectorised LayerNorm forward,
 * residual + LayerNorm, and a LayerNorm backward of one kernel per row chunk
 * (plus two fixed-order finishes) that also writes the bf16 copy of the residual
 * gradient; forward without a stream synchronization (gpt_cuda_forward_async).
 * Attention: cuDNN's fused flash attention where available
 * (gpt_cuda_attention()), else the baseline's. Same memory plan (gpt_cuda_device_bytes) and
 * the same determinism: fixed-order reductions, no float atomics. A shape or
 * epilogue cuBLASLt has no algorithm for falls back to the baseline's kernels
 * for that product (gpt_cuda_fallbacks() counts them). Numerics differ from
 * the baseline's in rounding points only (the GELU and the bias act on the
 * fp32 accumulator before the one bf16 rounding); host references of the
 * changed math are in gpt_cuda_ref.h.
 */
typedef enum gpt_cuda_kernels {
  GPT_CUDA_KERNELS_BASELINE = 0,
  GPT_CUDA_KERNELS_FUSED = 1
} gpt_cuda_kernels;

/*
 * gpt_cuda_set_kernels() - switch @m to kernel set @k, between passes (not
 * from a hook). FUSED creates the cuBLASLt handle (once; it shares the
 * cuBLAS workspace). Returns 0, or -1 with a message (unknown set, cuBLASLt
 * handle creation failed). The next forward is the first with the new set.
 */
int gpt_cuda_set_kernels(gpt_cuda *m, gpt_cuda_kernels k);

/* gpt_cuda_get_kernels() - the set @m runs. */
gpt_cuda_kernels gpt_cuda_get_kernels(const gpt_cuda *m);

/*
 * gpt_cuda_fallbacks() - products of the fused set that ran the baseline's
 * kernels because cuBLASLt had no algorithm for their shape and epilogue,
 * counted once per shape since create (0 with the baseline set).
 */
int gpt_cuda_fallbacks(const gpt_cuda *m);

/*
 * gpt_cuda_attention() - the fused set's attention: "cudnn" (cuDNN's fused
 * flash attention, gpt_cuda_attn.h: causal, forward and deterministic
 * backward, no (B, NH, T, T) scores in memory), else the reason it runs the
 * baseline's (built without cudnn-frontend, libcudnn.so.9 not found, no
 * cuDNN engine for the last shape, T = 1); "baseline" with the baseline set.
 * cuDNN's workspace is the cuBLAS one when that is large enough, else a
 * cudaMalloc of cuDNN's figure at the first pass of a shape (not counted by
 * gpt_cuda_device_bytes()).
 */
const char *gpt_cuda_attention(const gpt_cuda *m);

/* Kernel classes of gpt_cuda_kernel_times(). */
enum { GPT_CUDA_TIME_GEMM = 0, GPT_CUDA_TIME_ATTENTION = 1, GPT_CUDA_TIME_OTHER = 2 };

/*
 * gpt_cuda_set_kernel_times() - @on: record a CUDA event on the stream at
 * every change of kernel class in the passes (GEMM: the linear layers' and
 * the LM head's matmuls; attention: scores, softmax, att v and their
 * backward with the heads permutes; other: every other kernel), so that
 * gpt_cuda_kernel_times() can add up the GPU time between them. Work the
 * hook queues is not counted. Off (the default) records nothing. The event
 * pool holds 4096 events; when it fills, the model waits for the stream and
 * adds them up (a synchronization only while timing). Returns 0, or -1
 * (event creation failed; message).
 */
int gpt_cuda_set_kernel_times(gpt_cuda *m, int on);

/*
 * gpt_cuda_kernel_times() - waits for the stream, then adds the milliseconds
 * of GPU time by class since the last call (or since timing was switched on)
 * into @ms[GPT_CUDA_TIME_GEMM], @ms[GPT_CUDA_TIME_ATTENTION],
 * @ms[GPT_CUDA_TIME_OTHER] (set to zero first) and starts a new interval.
 * Returns 0, or -1 (timing off, CUDA error; message).
 */
int gpt_cuda_kernel_times(gpt_cuda *m, double ms[3]);

/*
 * gpt_cuda_forward_async() - gpt_cuda_forward() without the synchronization
 * at the end: queues the pass and the loss's copy to pinned memory and
 * returns 0 (or -1, message). gpt_cuda_loss() reads the loss; a backward may
 * be queued first (the loss is copied before backward overwrites anything).
 */
int gpt_cuda_forward_async(gpt_cuda *m, const uint8_t *inputs, const uint8_t *targets, int B,
                           int T);

/*
 * gpt_cuda_loss() - the mean cross-entropy of the last forward with targets,
 * waiting for its copy only (an event, not the stream); NAN with a message
 * when there was no such forward, or the loss is not finite (no message).
 */
float gpt_cuda_loss(gpt_cuda *m);

/* gpt_cuda_last_error() - the message of the last failed call on @m ("" if none). */
const char *gpt_cuda_last_error(const gpt_cuda *m);

/* gpt_cuda_device_name() - the GPU and its compute capability for logs, e.g. "NVIDIA H100 80GB HBM3 (sm_90)". */
const char *gpt_cuda_device_name(const gpt_cuda *m);

#ifdef __cplusplus
}
#endif

#endif /* ZO_TRAIN_GPT_CUDA_H */
