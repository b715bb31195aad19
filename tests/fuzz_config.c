/*
 * fuzz_config.c - fuzz target over the config parser and what consumes a
 * parsed config: zo_config_parse() with and without "auto" values, then
 * zo_config_describe() and the learning-rate schedule at a few steps.
 * Built two ways (tests/fuzz.cmake):
 *   - with clang's libFuzzer (-fsanitize=fuzzer): LLVMFuzzerTestOneInput is
 *     the entry point, coverage-guided, run with a time limit;
 *   - without it: tests/fuzz_driver.h's deterministic main() (fixed seed: the
 *     same inputs every run) over the corpus given on the command line, with
 *     this file's JSON tokens ("auto", tiers, extremes) for its ':' swaps and
 *     its own mutation (a "key": value pair doubled), for a number of
 *     executions or seconds.
 * Either way under ASan + UBSan in the sanitizer build. A crash is the
 * sanitizer's report and a non-zero exit; a hang is an input taking longer
 * than the time limit (SIGALRM). Every accepted config is also checked
 * against the invariants zoffload/config.h documents (check_invariants():
 * train_batch_size == micro * gas * world without overflow, every integer
 * and real within its range, reals representable in float32): a violation
 * prints "fuzz_config: INVARIANT: ..." and aborts, the input saved as
 * fuzz-crash.bin (the deterministic driver; libFuzzer saves its own).
 * Boundary values (0, 1, -1, 2^31+-1, 2^32+-1, 2^62, 2^63-1, 1e-50, 1e40,
 * NaN, their real forms) come from tests/fuzz_config.dict (libFuzzer's
 * -dict=; the driver reads it too) and the seeds tests/config/fuzz_seed_*.
 * Prints "N executions in S s, ..., 0 crashes, 0 hangs" when done. In the
 * style of zstd's tests/fuzz.
 */
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_driver.h"
#include "zoffload/config.h"

static void quiet(zo_log_level lvl, const char *msg, void *user) {
  (void)lvl, (void)msg, (void)user;
}

/* A documented invariant of an accepted config does not hold: say which, keep the input, abort (a crash). */
static __attribute__((noreturn)) void broken(const char *what, long double got) {
  fprintf(stderr, "fuzz_config: INVARIANT: %s (got %.21Lg)\n", what, got);
  abort(); /* the driver saves the input as fuzz-crash.bin, libFuzzer as crash-<sha1> */
}
#define INV_RANGE(x, lo, hi, what)                                                         \
  do {                                                                                     \
    if (!((long double)(x) >= (long double)(lo) && (long double)(x) <= (long double)(hi))) \
      broken(what, (x));                                                                   \
  } while (0)
/* 0, or a finite normal float32 of either sign (what Adam computes in) */
#define INV_F32(x, what)                                         \
  do {                                                           \
    if ((x) != 0 && !(fabs(x) >= FLT_MIN && fabs(x) <= FLT_MAX)) \
      broken(what " is 0, subnormal or inf as float32", (x));    \
  } while (0)

/* What zoffload/config.h promises of every config zo_config_parse() accepts, with @ws ranks. */
static void check_invariants(const zo_config_t *c, int ws) {
  int64_t mg, prod = 0;
  if (c->train_micro_batch_size_per_gpu < 1)
    broken("train_micro_batch_size_per_gpu >= 1", c->train_micro_batch_size_per_gpu);
  if (c->gradient_accumulation_steps < 1)
    broken("gradient_accumulation_steps >= 1", c->gradient_accumulation_steps);
  if (__builtin_mul_overflow(c->train_micro_batch_size_per_gpu, c->gradient_accumulation_steps,
                             &mg) ||
      __builtin_mul_overflow(mg, (int64_t)ws, &prod))
    broken("micro * gas * world_size fits in int64 (an accepted batch whose product overflows)",
           (long double)c->train_micro_batch_size_per_gpu * c->gradient_accumulation_steps * ws);
  if (c->train_batch_size != prod)
    broken("train_batch_size == micro * gas * world_size", c->train_batch_size);
  INV_RANGE(c->steps_per_print, 1, INT64_MAX, "steps_per_print in [1, 2^63-1]");
  INV_RANGE(c->gradient_clipping, 0, FLT_MAX, "gradient_clipping in [0, FLT_MAX]");
  INV_F32(c->gradient_clipping, "gradient_clipping");
  INV_RANGE(c->optimizer.lr, 0, ZO_CONFIG_LR_MAX, "optimizer.lr in [0, 100]");
  INV_F32(c->optimizer.lr, "optimizer.lr");
  if (!((float)c->optimizer.beta1 < 1.0f && c->optimizer.beta1 >= 0))
    broken("beta1 in [0, 1) as float32", c->optimizer.beta1);
  if (!((float)c->optimizer.beta2 < 1.0f && c->optimizer.beta2 >= 0))
    broken("beta2 in [0, 1) as float32", c->optimizer.beta2);
  INV_F32(c->optimizer.beta1, "beta1");
  INV_F32(c->optimizer.beta2, "beta2");
  INV_RANGE(c->optimizer.eps, FLT_MIN, 1, "optimizer.eps in [FLT_MIN, 1] (> 0 as float32)");
  INV_RANGE(c->optimizer.weight_decay, 0, ZO_CONFIG_WEIGHT_DECAY_MAX,
            "optimizer.weight_decay in [0, 1e6]");
  INV_F32(c->optimizer.weight_decay, "optimizer.weight_decay");
  if (c->optimizer.adam_w_mode) {
    double lr = c->optimizer.lr;
    if (c->scheduler.type == ZO_SCHED_WARMUP_LR || c->scheduler.type == ZO_SCHED_WARMUP_DECAY_LR)
      lr = fmax(c->scheduler.warmup_min_lr, c->scheduler.warmup_max_lr);
    if (lr * c->optimizer.weight_decay > 1)
      broken("decoupled weight_decay * peak lr <= 1", lr * c->optimizer.weight_decay);
  }
  INV_RANGE(c->scheduler.warmup_min_lr, 0, ZO_CONFIG_LR_MAX, "scheduler.warmup_min_lr in [0, 100]");
  INV_RANGE(c->scheduler.warmup_max_lr, 0, ZO_CONFIG_LR_MAX, "scheduler.warmup_max_lr in [0, 100]");
  INV_F32(c->scheduler.warmup_min_lr, "scheduler.warmup_min_lr");
  INV_F32(c->scheduler.warmup_max_lr, "scheduler.warmup_max_lr");
  INV_RANGE(c->scheduler.warmup_num_steps, 0, INT64_MAX, "scheduler.warmup_num_steps >= 0");
  INV_RANGE(c->scheduler.total_num_steps, 0, INT64_MAX, "scheduler.total_num_steps >= 0");
  INV_RANGE(c->scheduler.cos_min_ratio, 0, 1, "scheduler.cos_min_ratio in [0, 1]");
  INV_RANGE(c->scheduler.warmup_min_ratio, 0, 1, "scheduler.warmup_min_ratio in [0, 1]");
  INV_RANGE(c->fp16.loss_scale, 0, ZO_CONFIG_LOSS_SCALE_MAX, "fp16.loss_scale in [0, 2^64]");
  INV_F32(c->fp16.loss_scale, "fp16.loss_scale");
  INV_RANGE(c->fp16.initial_scale_power, 0, 64, "fp16.initial_scale_power in [0, 64]");
  INV_RANGE(c->fp16.loss_scale_window, 1, INT64_MAX, "fp16.loss_scale_window >= 1");
  INV_RANGE(c->fp16.hysteresis, 1, 1 << 30, "fp16.hysteresis in [1, 2^30]");
  if (!(c->fp16.min_loss_scale > 0 && c->fp16.min_loss_scale <= ZO_CONFIG_LOSS_SCALE_MAX))
    broken("fp16.min_loss_scale in (0, 2^64]", c->fp16.min_loss_scale);
  INV_F32(c->fp16.min_loss_scale, "fp16.min_loss_scale");
  INV_RANGE(c->zero.stage, 0, 3, "zero_optimization.stage in [0, 3]");
  INV_RANGE(c->zero.offload_optimizer.buffer_count, 1, 1 << 20,
            "offload_optimizer.buffer_count in [1, 2^20]");
  INV_RANGE(c->zero.offload_optimizer.ratio, 0, 1, "offload_optimizer.ratio in [0, 1]");
  INV_RANGE(c->zero.offload_param.buffer_count, 1, 1 << 20,
            "offload_param.buffer_count in [1, 2^20]");
  INV_RANGE(c->zero.offload_param.buffer_size, 1, ZO_CONFIG_MAX_ELEMS,
            "offload_param.buffer_size in [1, 2^56]");
  INV_RANGE(c->zero.offload_param.max_in_cpu, 0, ZO_CONFIG_MAX_ELEMS,
            "offload_param.max_in_cpu in [0, 2^56]");
  INV_RANGE(c->zero.offload_param.max_in_cpu_set, 0, 1, "offload_param.max_in_cpu_set 0 or 1");
  if (!c->zero.offload_param.max_in_cpu_set &&
      c->zero.offload_param.max_in_cpu != 1000000000) /* the default */
    broken("offload_param.max_in_cpu differs from its default though not written",
           c->zero.offload_param.max_in_cpu);
  INV_RANGE(c->zero.sub_group_size, 1, ZO_CONFIG_MAX_ELEMS, "sub_group_size in [1, 2^56]");
  const int64_t elems[] = {c->zero.stage3_prefetch_bucket_size,
                           c->zero.stage3_max_live_parameters,
                           c->zero.stage3_max_reuse_distance,
                           c->zero.stage3_param_persistence_threshold,
                           c->zero.reduce_bucket_size,
                           c->zero.allgather_bucket_size};
  for (size_t i = 0; i < sizeof elems / sizeof elems[0]; i++)
    INV_RANGE(elems[i], 0, ZO_CONFIG_MAX_ELEMS, "a zero_optimization element count in [0, 2^56]");
  INV_RANGE(c->aio.block_size, 4096, ZO_CONFIG_MAX_BLOCK_SIZE, "aio.block_size in [4096, 2^30]");
  if (c->aio.block_size % 4096) broken("aio.block_size a multiple of 4096", c->aio.block_size);
  INV_RANGE(c->aio.queue_depth, 1, 32768, "aio.queue_depth in [1, 32768]");
  INV_RANGE(c->aio.intra_op_parallelism, 1, 1 << 16, "aio.intra_op_parallelism in [1, 2^16]");
  INV_RANGE(c->zoffload.adam_threads, 0, 4096, "zoffload.adam_threads in [0, 4096]");
  INV_RANGE(c->zoffload.device_memory_limit, 0, INT64_MAX, "zoffload.device_memory_limit >= 0");
  if (c->zoffload.device_arena_bytes != ZO_ARENA_FIT)
    INV_RANGE(c->zoffload.device_arena_bytes, 0, INT64_MAX,
              "zoffload.device_arena_bytes >= 0 or fit");
  if (c->zoffload.host_link_gbps != 0)
    INV_RANGE(c->zoffload.host_link_gbps, ZO_CONFIG_LINK_GBPS_MIN, ZO_CONFIG_LINK_GBPS_MAX,
              "zoffload.host_link_gbps 0 or in [0.1, 1e6]");
}

#ifndef ZO_LIBFUZZER
/* The driver's mutation step for JSON: a "key": value pair (from the first '"' at or after @at) doubled. */
static void mutate_json(uint8_t *b, size_t *n, size_t cap, size_t at) {
  size_t i = at;
  while (i < *n && b[i] != '"') i++;
  size_t j = i + 1;
  while (j < *n && b[j] != ',' && b[j] != '\n') j++;
  if (j < *n && j - i < 256) {
    uint8_t tmp[256];
    memcpy(tmp, b + i, j - i + 1);
    fz_splice(b, n, cap, j + 1, 0, tmp, j - i + 1);
  }
}
#endif

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  /* warnings are expected; every path of the logger still runs */
  zo_log_set_handler(quiet, NULL, ZO_LOG_DEBUG);
#ifndef ZO_LIBFUZZER
  /* Values the config parser treats specially, for the driver's ':' swaps (libFuzzer takes -dict= only). */
  static const char *const tokens[] = {
      "\"auto\"",
      "1e-320",
      "NaN",
      "true",
      "\"nvme\"",
      "\"cpu\"",
      "\"none\"",
      "\"bf16\"",
      "0.5",
      "3",
      "\"WarmupDecayLR\"",
      "\"WarmupCosineLR\"",
      "\"/\"",
      "[1e9, 1e9]",
      "1e9",
      "{\"device\": \"nvme\"}",
  };
  for (size_t i = 0; i < sizeof tokens / sizeof tokens[0]; i++) fuzz_add_token(tokens[i]);
  g_fz_mutate_custom = mutate_json;
#endif
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const char *const app[] = {"model", "data", "train", NULL};
  zo_config_auto a;
  zo_config_auto_init(&a);
  a.hidden_size = 4096, a.train_micro_batch_size_per_gpu = 2, a.gradient_accumulation_steps = 4;
  a.lr = 1e-4, a.beta1 = 0.9, a.beta2 = 0.95, a.eps = 1e-8, a.weight_decay = 0.1,
  a.gradient_clipping = 1.0;
  a.warmup_num_steps = 100, a.total_num_steps = 1000, a.fp16 = 0, a.bf16 = 1;
  for (int pass = 0; pass < 2; pass++) {
    zo_config_opts o = {app, pass ? 3 : 1, pass ? NULL : &a};
    zo_config_t cfg;
    if (zo_config_parse((const char *)data, size, "fuzz", &o, &cfg) != ZO_OK) {
      if (!zo_last_error()[0])
        broken("every refusal has a message", 0); /* zo-train printed "error: " and nothing */
      continue;
    }
    check_invariants(&cfg, o.world_size);
    char buf[256];
    size_t need = zo_config_describe(&cfg, buf, sizeof buf);
    char *full = malloc(need + 1);
    if (full && zo_config_describe(&cfg, full, need + 1) != need) abort();
    free(full);
    static const int64_t steps[] = {1, 2, 3, 1000, INT64_MAX / 2};
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
      volatile double lr = zo_config_lr_at(&cfg, steps[i]);
      (void)lr;
    }
  }
  return 0;
}
