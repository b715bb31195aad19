/*
 * probe.h - the CPU model's compute time measured, not assumed: a forward and
 * a backward of 1- and 2-layer cuts of the run's model (the same gpt.c code,
 * micro-batch, kernels, bf16 or fp32 products, and threads), kept in the
 * machine's speeds cache (zoffload/speeds.h, zo_speeds_figure) beside the
 * disk, link and Adam rates, so a machine measures each model once. The
 * planner's compute figure and the first step's prediction take it. It
 * times the code; it changes nothing the bits depend on (gpt.c's product
 * tiles follow the shape alone).
 */
#ifndef ZO_TRAIN_PROBE_H
#define ZO_TRAIN_PROBE_H

#include <stddef.h>

#include "gpt.h"
#include "zoffload/dtype.h"

/*
 * train_compute_probe() - seconds of CPU compute (forward + backward) per
 * micro-batch of @B x c->seq_len tokens of model @c with activation
 * checkpointing @recompute and bf16 products @gemm_bf16 (train.cpu_gemm as
 * resolved), on @threads threads (--threads; @fixed_threads: --fixed-threads),
 * with @streamed (train.model_memory "streamed") the hook's work of model.c
 * too: each fetched working copy (dtype @work) cast into the fp32 scratch as
 * a group begins, each gradient cast into the hand-over dtype @hand as it
 * ends (the engine's own part, fetch and Adam, is the planner's to add),
 * as t(1 layer) + (n_layer - 1) x (t(2 layers) - t(1 layer)), each t the median
 * of 3 or more passes after an untimed one, from the speeds cache when it has
 * this model's entry. A cut's weights are one block's tensors bound for every
 * block, so the probe holds one block's fp32 weights and gradients (and bf16
 * copies), the embeddings and a 2-layer cut's activations: it declines when
 * that is more than a quarter of the host memory available (zo_host_memory_available:
 * MemAvailable or the cgroup's room, as the budget measures it), and when its passes would take
 * more than about 4 s at @cost_rate FLOP/s (the cost model's rate: a model
 * that large is measured by its own steps). Runs the model on the calling
 * thread's OpenMP team (about 4 x 2 passes). Returns the seconds (> 0) with
 * @src (@cap bytes) saying where they come from ("measured: ..." or "cache
 * PATH (measured DATE)"), or 0 with @src "not measured: " and why.
 */
double train_compute_probe(const gpt_config *c, int B, int recompute, int gemm_bf16, int streamed,
                           zo_dtype work, zo_dtype hand, int threads, int fixed_threads,
                           double cost_rate, char *src, size_t cap);

#endif /* ZO_TRAIN_PROBE_H */
