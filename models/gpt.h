/*
 * gpt.h - the model of zo-train (models/, library zo_gpt): a GPT-2-style
 * byte-level decoder, forward and backward on the CPU in float32 (cblas_sgemm
 * for matmuls, OpenMP loops for the rest). Not part of libzoffload and not a
 * general NN library: one fixed architecture, every parameter a separate tensor
 * so an offload engine can own each one. Shape of the code after Karpathy's
 * llm.c (train_gpt2.c); GPT-2: Radford et al., "Language Models are
 * Unsupervised Multitask Learners" (2019).
 *
 * Conventions: B batch, T time (tokens per row), C d_model, NH n_head,
 * hs = C/NH, V vocab, L n_layer, N = B*T. Linear weights are stored as in
 * PyTorch nn.Linear, (out_features, in_features) row-major, y = x W^T + b.
 * Errors are plain ints (0 ok, -1 error) with a message in a caller buffer or
 * gpt_last_error(); nothing here exits or aborts.
 *
 * Thread-safety: a gpt_model is used by one thread at a time; the calls
 * parallelise internally with OpenMP (OpenBLAS on one thread per call), see
 * gpt_set_threads(). Determinism: for the same inputs and weights, forward,
 * loss and gradients are bitwise identical run to run and on any thread
 * count (no atomics; every reduction has a fixed order, every matrix product
 * fixed tiles), for a given OpenBLAS kernel family (gpt_blas_core()).
 */
#ifndef ZO_TRAIN_GPT_H
#define ZO_TRAIN_GPT_H

#include <stddef.h>
#include <stdint.h>

#include "zoffload/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The model's hyper-parameters (the tool's config block `model {...}`). */
typedef struct gpt_config {
  int n_layer; /* L, number of transformer blocks, >= 1 */
  int n_head;  /* NH, attention heads; must divide d_model */
  int d_model; /* C, channels of the residual stream */
  int seq_len; /* maximum T: rows of wpe and the attention window */
  int vocab;   /* V, rows of wte; 256 for raw bytes (token ids are uint8) */
} gpt_config;

/* One parameter tensor: its name (GPT-2 / Hugging Face naming) and shape. */
typedef struct gpt_param_spec {
  char name[64]; /* e.g. "h.0.attn.c_attn.weight" */
  int ndim;      /* 1 or 2 */
  int shape
      [2]; /* shape[0] rows (out features), shape[1] cols (in features); shape[1] = 1 when ndim == 1 */
  size_t n_elems; /* shape[0] * shape[1], elements not bytes */
} gpt_param_spec;

/* Parameters per block, in this order inside each block (see gpt_param_specs()). */
enum {
  GPT_P_LN1_W = 0,
  GPT_P_LN1_B,
  GPT_P_QKV_W,
  GPT_P_QKV_B,
  GPT_P_ATTPROJ_W,
  GPT_P_ATTPROJ_B,
  GPT_P_LN2_W,
  GPT_P_LN2_B,
  GPT_P_FC_W,
  GPT_P_FC_B,
  GPT_P_FCPROJ_W,
  GPT_P_FCPROJ_B,
  GPT_PARAMS_PER_LAYER
};

/*
 * gpt_config_check() - validate @c.
 * Rules: n_layer in [1, 1024], n_head >= 1, d_model >= 1 and <= 65536,
 * n_head divides d_model, seq_len in [1, 65536], vocab in [2, 65536].
 * Returns 0, or -1 with a one-line message in @err (@errlen bytes, may be 0)
 * that names the field, e.g. "model.n_head: 5 does not divide model.d_model 128".
 */
int gpt_config_check(const gpt_config *c, char *err, size_t errlen);

/* gpt_num_params() - number of parameter tensors: 2 + 12*n_layer + 2. @c must pass gpt_config_check(). */
int gpt_num_params(const gpt_config *c);

/*
 * gpt_param_specs() - fill @out[0 .. gpt_num_params(c)-1] with names and
 * shapes, in the fixed order used everywhere (index i of gpt_weight() etc.):
 *   0 "wte" (V,C), 1 "wpe" (seq_len,C),
 *   then for l = 0..L-1, 12 tensors starting at 2 + 12*l:
 *   "h.l.ln_1.weight" (C), "h.l.ln_1.bias" (C),
 *   "h.l.attn.c_attn.weight" (3C,C), "h.l.attn.c_attn.bias" (3C),
 *   "h.l.attn.c_proj.weight" (C,C), "h.l.attn.c_proj.bias" (C),
 *   "h.l.ln_2.weight" (C), "h.l.ln_2.bias" (C),
 *   "h.l.mlp.c_fc.weight" (4C,C), "h.l.mlp.c_fc.bias" (4C),
 *   "h.l.mlp.c_proj.weight" (C,4C), "h.l.mlp.c_proj.bias" (C),
 *   and last "ln_f.weight" (C), "ln_f.bias" (C).
 * wte is tied: it is both the token embedding and the output projection.
 */
void gpt_param_specs(const gpt_config *c, gpt_param_spec *out);

/* gpt_total_elems() - sum of n_elems over all parameter tensors (the model's parameter count). */
size_t gpt_total_elems(const gpt_config *c);

/*
 * gpt_param_init() - deterministic GPT-2 initialisation of parameter @i into
 * @out (float32[n_elems of i]): Linear weights and embeddings N(0, 0.02);
 * the residual output projections (attn.c_proj.weight, mlp.c_proj.weight)
 * N(0, 0.02/sqrt(2*n_layer)); LayerNorm weights 1; biases 0.
 * Normals come from a counter-based generator: element j of tensor i is a
 * function of (seed, i, j) only (splitmix64 finaliser + Box-Muller), so the
 * result does not depend on the order or number of calls, nor on the thread
 * count: a tensor above the work threshold is filled by the OpenMP threads
 * of gpt_set_threads() (static chunks of element pairs), bitwise as by one.
 * Thread-safe (called inside a parallel region it runs on that one thread).
 */
void gpt_param_init(const gpt_config *c, int i, uint64_t seed, float *out);

typedef struct gpt_model gpt_model;

/*
 * gpt_create() - allocate a model for batches up to @max_batch x seq_len:
 * fp32 weights (uninitialised: the caller fills them, e.g. with
 * gpt_param_init()), fp32 gradients (zeroed) and activations. Every tensor
 * is 64-byte aligned. Returns 0 and *@out, or -1 with a message in @err
 * (bad config, max_batch < 1, sizes that overflow size_t, or out of memory
 * with the byte counts). Same as gpt_create_ex(c, max_batch, 0, ...).
 */
int gpt_create(const gpt_config *c, int max_batch, gpt_model **out, char *err, size_t errlen);

/*
 * gpt_create_ex() - gpt_create() with activation checkpointing when
 * @recompute is non-zero: forward keeps only each block's input (the
 * residual stream entering it, L x B x T x C floats) plus one block's
 * intermediate activations (LayerNorm outputs and statistics, qkv, the
 * B x NH x T x T attention probabilities, the MLP hidden layer); backward
 * runs block l's forward again, right after the hook's begin(l+1) and
 * before its gradients, from the kept input. Costs about one more forward
 * of the blocks per step (~1/3 more compute); losses and gradients are
 * bitwise identical to recompute 0 (same operations in the same order).
 * Technique: Chen et al., "Training Deep Nets with Sublinear Memory Cost"
 * (2016); per-block granularity as in Megatron-LM / DeepSpeed's
 * activation checkpointing.
 */
int gpt_create_ex(const gpt_config *c, int max_batch, int recompute, gpt_model **out, char *err,
                  size_t errlen);

/*
 * gpt_host_bytes() - bytes of host memory gpt_create_ex(c, max_batch,
 * recompute) allocates: weights, gradients, gradient scratch (3 x the
 * parameter layout, each tensor padded to 64 bytes), activations and
 * backward scratch (each buffer rounded up to 64 bytes), token buffers and
 * the parameter table. Allocator overhead is not counted. Returns SIZE_MAX
 * when the config is invalid, max_batch < 1, or the sum overflows size_t
 * (so a budget check refuses it). Thread-safe, allocates nothing.
 */
size_t gpt_host_bytes(const gpt_config *c, int max_batch, int recompute);

/* gpt_recompute() - 1 if @m was created with activation checkpointing, else 0 (also for NULL). */
int gpt_recompute(const gpt_model *m);

/*
 * Streamed mode: the model holds no weights and no gradients, so a model
 * larger than host memory can train while an engine keeps its parameters
 * elsewhere (NVMe) and brings in one layer group at a time.
 *
 * gpt_create_streamed() - like gpt_create_ex(c, max_batch, recompute), but
 * allocates no fp32 weights, gradients or gradient scratch: only the
 * activations (with @recompute: every block's input plus one block's
 * internals), the backward scratch, the token buffers and the parameter
 * table (gpt_streamed_host_bytes()). Error messages start "gpt_create_streamed:".
 * The caller lends each tensor's memory per layer group, from the hook:
 *   - in the hook's begin(g) call, gpt_bind_weight(m, i, w) for every
 *     parameter i of group g (gpt_group_params()), and in backward also
 *     gpt_bind_grad(m, i, g); the pointers must stay valid and unchanged
 *     until the same pass's end(g) returns. Group 0 (wte, wpe) is live
 *     through a whole forward and a whole backward (wte is also the output
 *     projection); the block groups and ln_f one at a time (see the hook
 *     order below; with recompute, backward runs block g-1's forward again
 *     after begin(g) with the weights bound there).
 *   - the model forgets every binding at the start of each gpt_forward()
 *     and gpt_backward() and a group's bindings once its end(g) hook
 *     returns, so stale pointers are never used: bind in the hook. After
 *     the hook's begin(g) the model checks the group; an unbound tensor
 *     fails the pass (gpt_forward() NAN, gpt_backward() -1) with
 *     gpt_last_error() naming it, e.g. "gpt_backward: h.0.ln_1.weight
 *     (parameter 2) has no gradient buffer (gpt_bind_grad) bound at the
 *     begin of group 1". A streamed model without a hook therefore fails
 *     at "wte".
 *   - backward WRITES, it does not accumulate across calls: at begin(g),
 *     right after the hook, it sets the group's gradient buffers to 0, adds
 *     this backward's contributions (dL/dw * loss_mult; wte gets the output
 *     projection's and the embedding's), and at end(g) each buffer holds
 *     exactly this backward's gradient of its tensor, bitwise what a
 *     resident model's gpt_backward() would add to its gpt_grad() for the
 *     same weights (with 64-byte aligned buffers, as required). Summing
 *     over micro-batches is the caller's job (the engine's): adding each
 *     end(g) buffer into an fp32 accumulator that starts at 0 gives bitwise
 *     the resident model's gpt_grad() after the same backwards.
 * gpt_weight(), gpt_grad() return NULL and gpt_zero_grad() does nothing on a
 * streamed model; gpt_sample() calls the hook (GPT_HOOK_FORWARD only) for
 * each of its forwards, so the hook binds there too.
 */
int gpt_create_streamed(const gpt_config *c, int max_batch, int recompute, gpt_model **out,
                        char *err, size_t errlen);

/* gpt_streamed() - 1 if @m was created with gpt_create_streamed(), else 0 (also for NULL). */
int gpt_streamed(const gpt_model *m);

/*
 * gpt_bind_weight() - lend parameter @i's weights to a streamed model:
 * float32[n_elems of i], read only, 64-byte aligned (so results are bitwise
 * those of the resident model), valid until the end(g) of its group in this
 * pass; NULL unbinds. gpt_bind_grad() - lend its gradient buffer:
 * float32[n_elems of i], 64-byte aligned, written by gpt_backward() (zeroed
 * at the group's begin, then filled; see gpt_create_streamed()).
 * Returns 0, or -1 with gpt_last_error() set when @m is not streamed, @i is
 * out of range or the pointer is misaligned. Called from the hook.
 */
int gpt_bind_weight(gpt_model *m, int i, const float *w);
int gpt_bind_grad(gpt_model *m, int i, float *g);

/*
 * bf16 matrix products (zo-train's train.cpu_gemm "bf16"), streamed models
 * only. gpt_set_gemm_bf16() - from now on the four matrix products of each
 * block (attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj: the tensors for
 * which gpt_gemm_bf16_param() is 1) take bf16 operands and accumulate in fp32
 * (gemm_bf16.h, oneDNN), as the CUDA model does: their weights are bound
 * with gpt_bind_weight_bf16() (bf16 bit patterns, e.g. the engine's working
 * copy, no cast), each product's activation operand is rounded to bf16
 * (round to nearest even), and its result, the gradients included, stays
 * fp32. The token embedding (tied output projection), LayerNorms, biases
 * and the attention products stay fp32. Results then differ from the fp32
 * products' (the rounding), and are again the same bits on any thread count
 * (tiles by shape, one oneDNN call per tile on one thread). Allocates two
 * bf16 scratches of gpt_gemm_bf16_bytes() / 2 bytes each, counted by
 * gpt_allocated_bytes(). Returns 0, or -1 (not a streamed model, out of
 * memory) with gpt_last_error() set. A product that fails (oneDNN could not
 * make its primitive) fails the pass: gpt_forward() returns NAN and
 * gpt_backward() -1, naming the shape.
 */
int gpt_set_gemm_bf16(gpt_model *m);
/*
 * gpt_gemm_bf16_probe() - whether this CPU runs the bf16 products of @c's
 * blocks at micro-batch @max_batch: makes (and caches) oneDNN's primitive of
 * every tile of every such product, forward and backward, now. No model is
 * needed; nothing is computed. Returns 0, or -1 with the first failure in
 * @err (@errlen bytes), naming the shape and oneDNN's status (e.g. status 3,
 * unimplemented: oneDNN 2.6 has no bf16 matmul below AVX-512). Thread-safe.
 */
int gpt_gemm_bf16_probe(const gpt_config *c, int max_batch, char *err, size_t errlen);

/* The CPU model's products, as train.cpu_gemm names them: fp32 (OpenBLAS), bf16 (oneDNN), auto (bf16 where the
 * CPU runs them). */
enum { GPT_GEMM_FP32 = 0, GPT_GEMM_BF16 = 1, GPT_GEMM_AUTO = 2 };

/*
 * gpt_gemm_bf16_resolve() - train.cpu_gemm as a run takes it, before the
 * model or its budget exists (so a dry run decides as the run does). @mode:
 * GPT_GEMM_FP32, _BF16 or _AUTO; @c, @max_batch: the model and micro-batch
 * whose product shapes are probed; @cuda: the CUDA model (its products are
 * bf16 already: 0, nothing to probe); @streamed, @working: the CPU model's
 * train.model_memory and the engine's working dtype (bf16 products need
 * "streamed" and bf16). "bf16" and "auto" probe oneDNN once for every
 * product tile of the model (gpt_gemm_bf16_probe). Sets *@bf16: 1 for bf16
 * products, 0 for fp32. Returns 0 with @msg (@cap bytes) a line for the log
 * ("" when there is nothing to say: "fp32", or "bf16" that the model line
 * names), or -1 with @msg the error, naming train.cpu_gemm: "bf16" where the
 * model cannot take it or the CPU cannot run it. Thread-safe.
 */
int gpt_gemm_bf16_resolve(int mode, const gpt_config *c, int max_batch, int cuda, int streamed,
                          zo_dtype working, int *bf16, char *msg, size_t cap);

/* gpt_gemm_bf16_refusal() - into @msg (@cap bytes), the error of train.cpu_gemm "bf16" asked of a CPU model that
 * is not @streamed or whose working dtype @working is not bf16 (the products take the bf16 working weights). */
void gpt_gemm_bf16_refusal(char *msg, size_t cap, int streamed, zo_dtype working);
size_t gpt_gemm_bf16_bytes(const gpt_config *c, int max_batch);
int gpt_gemm_bf16_param(const gpt_config *c, int i);
int gpt_bind_weight_bf16(gpt_model *m, int i, const uint16_t *w);
/* gpt_gemm_bf16_isa() - which oneDNN kernel the bf16 products run (for the log). */
const char *gpt_gemm_bf16_isa(void);

/*
 * gpt_streamed_host_bytes() - bytes of host memory gpt_create_streamed(c,
 * max_batch, recompute) allocates: gpt_host_bytes() without the three
 * parameter layouts, with a binding table (two pointers a parameter)
 * instead of the offsets. Allocator overhead is not counted. SIZE_MAX when
 * the config is invalid, max_batch < 1, or the sum overflows size_t.
 * Thread-safe, allocates nothing.
 */
size_t gpt_streamed_host_bytes(const gpt_config *c, int max_batch, int recompute);

/*
 * gpt_group_elems() - floats a scratch needs for layer group @group's
 * tensors (see gpt_group_params()) laid out back to back, each starting at
 * a 64-byte boundary: sum of n_elems rounded up to 16. gpt_max_group_elems()
 * - the largest over groups 1..n_layer+1 (every group but the embeddings).
 * A streamed model's caller needs one weight and one gradient scratch of
 * gpt_group_elems(c, 0) for group 0, live through each pass, and one each of
 * gpt_max_group_elems(c) for the group in flight. @c must pass
 * gpt_config_check() (the sums then fit size_t).
 */
size_t gpt_group_elems(const gpt_config *c, int group);
size_t gpt_max_group_elems(const gpt_config *c);

/*
 * gpt_group_layout() - layer group @group's tensors (gpt_group_params()) back
 * to back in a scratch of @elem_bytes-byte elements, each starting at a
 * multiple of @align_bytes (a multiple of @elem_bytes): sets @off[i] (NULL:
 * not set) to tensor i's offset in elements for each tensor i of the group
 * (@specs: gpt_param_specs()), and returns the group's bytes.
 */
size_t gpt_group_layout(const gpt_config *c, const gpt_param_spec *specs, int group,
                        size_t elem_bytes, size_t align_bytes, size_t *off);

/*
 * gpt_flops_per_token() - model FLOPs per trained token: 6N + 12 L C T
 * (forward and backward of the N parameters' matmuls, and of attention's
 * scores and weighted sum over T positions), as PaLM's appendix B and llm.c
 * count them; recomputation is not counted (that would be hardware FLOPs).
 */
double gpt_flops_per_token(const gpt_config *c, int T);

/*
 * gpt_allocated_bytes() - bytes @m's create allocated, counted by each
 * allocation as it is made (0 for NULL): equals gpt_host_bytes() /
 * gpt_streamed_host_bytes() of its arguments.
 */
size_t gpt_allocated_bytes(const gpt_model *m);

/* gpt_destroy() - free everything; NULL is accepted. */
void gpt_destroy(gpt_model *m);

/* gpt_get_config() - the model's configuration. */
const gpt_config *gpt_get_config(const gpt_model *m);

/*
 * gpt_weight() - float32[n_elems of parameter i], the weights the model
 * computes with; the caller (the engine) writes them before forward.
 * gpt_grad() - float32[n_elems of parameter i], accumulated by gpt_backward().
 * Both return NULL for an out-of-range @i and on a streamed model (its
 * weights and gradients are the caller's, see gpt_create_streamed()).
 * Pointers stay valid until destroy.
 */
float *gpt_weight(gpt_model *m, int i);
float *gpt_grad(gpt_model *m, int i);

/*
 * gpt_forward() - run the model on @inputs (uint8 token ids [B*T], row-major
 * (B,T)), 1 <= B <= max_batch, 1 <= T <= seq_len, every id < vocab.
 * With @targets (uint8 [B*T], the next token for each input) returns the mean
 * cross-entropy in nats over the B*T positions and keeps what backward needs;
 * with @targets == NULL computes the logits only (see gpt_logits()) and
 * returns 0. Returns NAN (and sets gpt_last_error()) on bad arguments,
 * without touching the model. Synchronous.
 */
float gpt_forward(gpt_model *m, const uint8_t *inputs, const uint8_t *targets, int B, int T);

/*
 * gpt_logits() - the logits of the last forward: float32 (B,T,V) of that
 * forward, row-major, valid until the next forward/backward/sample.
 */
const float *gpt_logits(const gpt_model *m);

/* gpt_zero_grad() - set all gradients to 0 (nothing on a streamed model). */
void gpt_zero_grad(gpt_model *m);

/*
 * gpt_backward() - backward of the last forward, which must have had targets
 * (and no gpt_sample() since). Adds dL/dw * @loss_mult into the gradients,
 * where L is the mean cross-entropy (the 1/(B*T) is already included);
 * @loss_mult is e.g. loss_scale / grad_accum_steps. Calling it twice adds
 * twice. Returns 0, or -1 (gradients untouched, gpt_last_error() set) when
 * there is no forward with targets to differentiate. A streamed model writes
 * this backward's gradients into the bound buffers instead, see
 * gpt_create_streamed().
 */
int gpt_backward(gpt_model *m, float loss_mult);

/*
 * gpt_sample() - generate @n_new bytes after @prompt (prompt_len >= 0 bytes;
 * an empty prompt starts from byte '\n'). Each step runs a forward (B = 1)
 * on the last seq_len bytes of prompt+generated text (a sliding window),
 * then picks the next token greedily when @temperature <= 0, else samples
 * softmax(logits/temperature) with a splitmix64 generator seeded by @seed.
 * Token ids >= 256 cannot be returned as bytes and are never picked. @out
 * must hold n_new bytes. Overwrites the activations: a gpt_backward() after
 * this fails until the next forward with targets. Returns 0, or -1 on bad
 * arguments / out of memory (message in gpt_last_error()). On a streamed
 * model each of its forwards calls the hook (GPT_HOOK_FORWARD), which binds
 * the weights as in training; a failed hook or binding fails the call.
 */
int gpt_sample(gpt_model *m, const uint8_t *prompt, int prompt_len, int n_new, float temperature,
               uint64_t seed, uint8_t *out);

/* gpt_forward_seconds() / gpt_backward_seconds() - wall seconds spent in forward / backward since creation. */
double gpt_forward_seconds(const gpt_model *m);
double gpt_backward_seconds(const gpt_model *m);

/* gpt_last_error() - the message of the last failed call on @m ("" if none). */
const char *gpt_last_error(const gpt_model *m);

/*
 * Layer groups and hooks, so an offload engine can fetch a group's weights
 * right before it computes and take its gradients as soon as they are final.
 * Groups: 0 = embeddings (wte, wpe: parameters 0..1), 1..n_layer = block
 * g-1 (GPT_PARAMS_PER_LAYER parameters each), n_layer+1 = final LayerNorm.
 * gpt_group_params() gives a group's first parameter index and count.
 * Order of hook calls (begin = before the group computes, end = after):
 *   forward:  begin(0), [begin(g), end(g)] for g = 1..L, begin(L+1), end(L+1), end(0)
 *             (the tied wte is used again by the output projection);
 *   backward: begin(0), begin(L+1), end(L+1), [begin(g), end(g)] for g = L..1, end(0).
 * At a backward end(g) the group's gradients in gpt_grad() are final for this
 * backward (already accumulated); on a streamed model the bound gradient
 * buffers hold this backward's gradient. A hook returning non-zero aborts the pass:
 * gpt_forward() returns NAN and gpt_backward() -1, with the hook's message.
 */
enum { GPT_HOOK_FORWARD = 0, GPT_HOOK_BACKWARD = 1 };
typedef int (*gpt_hook_fn)(void *user, int phase, int group, int end);
int gpt_num_groups(const gpt_config *c);
void gpt_group_params(const gpt_config *c, int group, int *first, int *count);
/* gpt_set_hook() - install (fn != NULL) or remove the hook; gpt_sample() runs without it, except on a
 * streamed model (there it calls the hook's forward phase, see gpt_create_streamed()). */
void gpt_set_hook(gpt_model *m, gpt_hook_fn fn, void *user);

/*
 * gpt_set_threads() - use up to @n threads (n >= 1) for the OpenMP loops and
 * the tiles of the matrix products; process-wide (omp_set_num_threads;
 * OpenBLAS itself is kept to one thread, openblas_set_num_threads(1)). By
 * default every core the OpenMP runtime reports. A loop or a matrix product
 * runs on one thread below a work threshold (GPT_PAR_MIN_NS in gpt.c), and
 * each forward and backward uses fewer threads while other processes keep
 * the cores busy (gpt_set_thread_adapt()). Results do not depend on the
 * thread count.
 */
void gpt_set_threads(int n);

/*
 * gpt_set_thread_adapt() - @on (the default) 1: each gpt_forward() and
 * gpt_backward() uses the cap of gpt_set_threads() less the runnable tasks
 * of other processes (/proc/loadavg, looked at most every 10 ms), at least 1;
 * 0: always the cap. Process-wide, not thread-safe.
 */
void gpt_set_thread_adapt(int on);

/*
 * gpt_blas_core() - the kernel family OpenBLAS loaded, e.g. "Haswell" or
 * "Cooperlake" (for the tool's log). It matters: OPENBLAS_CORETYPE, read when
 * libopenblas loads, can force one; on this machine (AMD EPYC with AVX-512)
 * OpenBLAS detects Cooperlake by itself, and forcing Haswell (AVX2) makes the
 * default model's forward+backward ~1.6x slower (2 threads, L=4 C=128 T=128
 * B=16: 76.9 vs 47.6 ms with SkylakeX kernels).
 */
const char *gpt_blas_core(void);


#ifdef __cplusplus
}
#endif

#endif /* ZO_TRAIN_GPT_H */
