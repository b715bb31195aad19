/*
 * train_config.h - zo-train's own config blocks ("model", "data", "train"),
 * read from the same JSON text as the DeepSpeed-style engine config.
 * The engine's keys are read by zo_config_parse(), not here.
 */
#ifndef ZO_TRAIN_CONFIG_H
#define ZO_TRAIN_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "data.h"
#include "gpt.h"

typedef struct train_settings {
  gpt_config model;     /* model.{n_layer, n_head, d_model, seq_len, vocab} */
  char data_path[4096]; /* data.path: file or directory; default Debian's fortunes */
  double val_fraction;  /* data.val_fraction: share of 4 KiB blocks held out, (0, 0.5] */
  uint64_t data_seed;   /* data.seed: which blocks go to validation */
  int64_t steps;        /* train.steps: optimizer steps */
  uint64_t seed;        /* train.seed: weight init and batch sampling */
  int val_windows;      /* train.val_windows: fixed validation windows of seq_len bytes */
  int sample_bytes;     /* train.sample_bytes: bytes generated at the end (0: none) */
  double temperature;   /* train.temperature: sampling temperature (0: greedy) */
  int activation_checkpointing; /* train.activation_checkpointing: keep each block's input only and recompute the
                                   block's forward in backward (default false) */
  int model_streamed; /* train.model_memory: "streamed" (default, 1): the cpu model holds one layer group's
                             fp32 weights and gradients at a time, the cuda model a layer group's bf16 gradients;
                             "resident" (0): the whole model in fp32 (cuda: the whole model's bf16 gradients) */
  int cpu_gemm; /* train.cpu_gemm as written: GPT_GEMM_FP32 (default), GPT_GEMM_BF16, GPT_GEMM_AUTO */
  int cpu_gemm_bf16; /* train.cpu_gemm resolved (gpt_gemm_bf16_resolve): 0, the CPU model's products in fp32
                             (OpenBLAS); 1, the blocks' four products with bf16 operands and fp32 accumulation
                             (oneDNN; streamed CPU model under bf16.enabled only), as the CUDA model computes */
  int cuda_kernels; /* train.cuda_kernels: 0 "baseline" (default), 1 "fused": the CUDA model's kernel set
                       (gpt_cuda.h GPT_CUDA_KERNELS_BASELINE / _FUSED); no effect on the CPU model */
} train_settings;

/* train.cpu_gemm's values: gpt.h's GPT_GEMM_FP32, _BF16, _AUTO, in the order of the strings "fp32", "bf16", "auto". */

/* The application-owned top-level blocks, for zo_config_opts.app_blocks. */
extern const char *const train_app_blocks[];

/* Defaults: the values used when a key is absent. */
void train_settings_defaults(train_settings *ts);

/*
 * train_config_read() - the whole config file at @path into *@text (malloc'd,
 * *@len bytes and a NUL after them; the caller frees it). Read once, so that
 * both parsers see the same bytes and a pipe (--config <(...)) works.
 * Returns 0, or -1 with a one-line message in @err naming @path (cannot be
 * opened or read, or a directory).
 */
int train_config_read(const char *path, char **text, size_t *len, char *err, size_t errlen);

/*
 * train_settings_load() - read the "model", "data" and "train" blocks of the
 * JSON text @text (@len bytes, the file @path's, named in messages) over the
 * defaults already in @ts. Returns 0, or -1 with a one-line message in @err
 * naming the file and the JSON path (or line and column when the JSON is
 * malformed).
 */
int train_settings_load(const char *path, const char *text, size_t len, train_settings *ts,
                        char *err, size_t errlen);

#endif
