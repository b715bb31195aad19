/*
 * config_describe.c - zo_config_describe(): a resolved config as "key = value"
 * lines (a checkpoint keeps their hash; the Python bindings compare them).
 * Not the parser nor the defaults (config.c).
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>

#include "base_internal.h"
#include "config_internal.h"
#include "zoffload/config.h"
#include "zoffload/dtype.h"

typedef struct sbuf {
  char *buf;
  size_t cap, len;
} sbuf;

static void __attribute__((format(printf, 2, 3))) sb_printf(sbuf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  size_t room = b->len < b->cap ? b->cap - b->len : 0;
  int n = vsnprintf(room ? b->buf + b->len : NULL, room, fmt, ap);
  va_end(ap);
  if (n > 0) b->len += (size_t)n;
}

/* The keys both offload blocks share, under @base; returns 1 when @device is not none (its other keys follow). */
static int sb_offload_shared(sbuf *b, const char *base, const zo_config_t *cfg, int which,
                             zo_offload_device device, int pin_memory, int buffer_count) {
  sb_printf(b, "%s.device = %s\n", base, zo_offload_device_name(device));
  if (device == ZO_OFFLOAD_NONE) return 0;
  if (device ==
      ZO_OFFLOAD_NVME) { /* the directories its swap files live in (zo_config_nvme_dirs) */
    const char *dirs[ZO_CONFIG_MAX_NVME_PATHS];
    const unsigned n = zo_config_nvme_dirs(cfg, which, dirs);
    if (n > 1) { /* a list: striped */
      sb_printf(b, "%s.nvme_path = [", base);
      for (unsigned i = 0; i < n; i++) sb_printf(b, "%s%s", i ? ", " : "", dirs[i]);
      sb_printf(b, "]\n");
    } else {
      sb_printf(b, "%s.nvme_path = %s\n", base, dirs[0]);
    }
  }
  sb_printf(b, "%s.pin_memory = %d\n", base, pin_memory);
  sb_printf(b, "%s.buffer_count = %d\n", base, buffer_count);
  return 1;
}

size_t zo_config_describe(const zo_config_t *cfg, char *buf, size_t cap) {
  sbuf b = {buf, buf ? cap : 0, 0};
  if (b.cap) buf[0] = 0;
  static const char *sched_names[] = {"none", "WarmupLR", "WarmupDecayLR", "WarmupCosineLR"};
  sb_printf(&b, "train_batch_size = %" PRId64 "\n", cfg->train_batch_size);
  sb_printf(&b, "train_micro_batch_size_per_gpu = %" PRId64 "\n",
            cfg->train_micro_batch_size_per_gpu);
  sb_printf(&b, "gradient_accumulation_steps = %" PRId64 "\n", cfg->gradient_accumulation_steps);
  sb_printf(&b, "gradient_clipping = %g\n", cfg->gradient_clipping);
  sb_printf(&b, "steps_per_print = %" PRId64 "\n", cfg->steps_per_print);
  sb_printf(&b, "optimizer.type = %s\n", cfg->optimizer.type == ZO_OPT_ADAMW ? "AdamW" : "Adam");
  sb_printf(&b, "optimizer.adam_w_mode = %d\n", cfg->optimizer.adam_w_mode);
  sb_printf(&b, "optimizer.lr = %g\n", cfg->optimizer.lr);
  sb_printf(&b, "optimizer.betas = [%g, %g]\n", cfg->optimizer.beta1, cfg->optimizer.beta2);
  sb_printf(&b, "optimizer.eps = %g\n", cfg->optimizer.eps);
  sb_printf(&b, "optimizer.weight_decay = %g\n", cfg->optimizer.weight_decay);
  sb_printf(&b, "optimizer.bias_correction = %d\n", cfg->optimizer.bias_correction);
  unsigned si = (unsigned)cfg->scheduler.type;
  sb_printf(&b, "scheduler.type = %s\n", si < 4 ? sched_names[si] : "?");
  if (cfg->scheduler.type != ZO_SCHED_NONE) {
    if (cfg->scheduler.type != ZO_SCHED_WARMUP_COSINE_LR) {
      sb_printf(&b, "scheduler.warmup_min_lr = %g\n", cfg->scheduler.warmup_min_lr);
      sb_printf(&b, "scheduler.warmup_max_lr = %g\n", cfg->scheduler.warmup_max_lr);
    } else {
      sb_printf(&b, "scheduler.warmup_min_ratio = %g\n", cfg->scheduler.warmup_min_ratio);
      sb_printf(&b, "scheduler.cos_min_ratio = %g\n", cfg->scheduler.cos_min_ratio);
    }
    sb_printf(&b, "scheduler.warmup_num_steps = %" PRId64 "\n", cfg->scheduler.warmup_num_steps);
    sb_printf(&b, "scheduler.warmup_type = %s\n",
              cfg->scheduler.warmup_type_log ? "log" : "linear");
    if (cfg->scheduler.type != ZO_SCHED_WARMUP_LR)
      sb_printf(&b, "scheduler.total_num_steps = %" PRId64 "\n", cfg->scheduler.total_num_steps);
  }
  sb_printf(&b, "fp16.enabled = %d\n", cfg->fp16.enabled);
  if (cfg->fp16.enabled) {
    if (cfg->fp16.loss_scale > 0)
      sb_printf(&b, "fp16.loss_scale = %g\n", cfg->fp16.loss_scale);
    else
      sb_printf(&b, "fp16.loss_scale = dynamic\n");
    sb_printf(&b, "fp16.initial_scale_power = %d\n", cfg->fp16.initial_scale_power);
    sb_printf(&b, "fp16.loss_scale_window = %" PRId64 "\n", cfg->fp16.loss_scale_window);
    sb_printf(&b, "fp16.hysteresis = %d\n", cfg->fp16.hysteresis);
    sb_printf(&b, "fp16.min_loss_scale = %g\n", cfg->fp16.min_loss_scale);
  }
  sb_printf(&b, "bf16.enabled = %d\n", cfg->bf16.enabled);
  sb_printf(&b, "zero_optimization.stage = %d\n", cfg->zero.stage);
  const char *oo = "zero_optimization.offload_optimizer";
  if (sb_offload_shared(&b, oo, cfg, 0, cfg->zero.offload_optimizer.device,
                        cfg->zero.offload_optimizer.pin_memory,
                        cfg->zero.offload_optimizer.buffer_count)) {
    sb_printf(&b, "%s.pipeline_read = %d\n", oo, cfg->zero.offload_optimizer.pipeline_read);
    sb_printf(&b, "%s.pipeline_write = %d\n", oo, cfg->zero.offload_optimizer.pipeline_write);
    sb_printf(&b, "%s.ratio = %g\n", oo, cfg->zero.offload_optimizer.ratio);
  }
  const char *op = "zero_optimization.offload_param";
  if (sb_offload_shared(&b, op, cfg, 1, cfg->zero.offload_param.device,
                        cfg->zero.offload_param.pin_memory, cfg->zero.offload_param.buffer_count)) {
    sb_printf(&b, "%s.buffer_size = %" PRId64 "\n", op, cfg->zero.offload_param.buffer_size);
    sb_printf(&b, "%s.max_in_cpu = %" PRId64 "\n", op, cfg->zero.offload_param.max_in_cpu);
  }
  sb_printf(&b, "zero_optimization.sub_group_size = %" PRId64 "\n", cfg->zero.sub_group_size);
  sb_printf(&b, "aio.block_size = %" PRId64 "\n", cfg->aio.block_size);
  sb_printf(&b, "aio.queue_depth = %" PRId64 "\n", cfg->aio.queue_depth);
  sb_printf(&b, "zoffload.device = %s\n", zo_device_kind_name(cfg->zoffload.device_kind));
  /* printed only when given: dumps of configs without it stay as they were */
  if (cfg->zoffload.comm != ZO_COMM_AUTO)
    sb_printf(&b, "zoffload.comm = %s\n", cfg_comm_names[cfg->zoffload.comm]);
  if (cfg->zoffload.comm_timeout_s !=
      ZO_CONFIG_COMM_TIMEOUT_S) /* printed only when given, as zoffload.comm */
    sb_printf(&b, "zoffload.comm_timeout_s = %g\n", cfg->zoffload.comm_timeout_s);
  sb_printf(&b, "zoffload.device_memory_limit = %" PRId64 "%s\n", cfg->zoffload.device_memory_limit,
            cfg->zoffload.device_memory_limit
                ? ""
                : " (no cap: unlimited on host, the whole GPU on cuda)");
  if (cfg->zoffload.device_arena_bytes == ZO_ARENA_FIT)
    sb_printf(&b, "zoffload.device_arena_bytes = fit (what the engine holds)\n");
  else
    sb_printf(&b, "zoffload.device_arena_bytes = %" PRId64 "%s\n", cfg->zoffload.device_arena_bytes,
              cfg->zoffload.device_arena_bytes
                  ? ""
                  : " (auto: what the device has free at finalize; 90% on cuda)");
  sb_printf(&b, "zoffload.adam_threads = %d%s\n", cfg->zoffload.adam_threads,
            cfg->zoffload.adam_threads ? "" : " (all physical cores)");
  /* printed only when given: dumps of configs without it stay as they were */
  if (cfg->grad_accum_dtype >= 0)
    sb_printf(&b, "data_types.grad_accum_dtype = %s\n",
              zo_dtype_name((zo_dtype)cfg->grad_accum_dtype));
  sb_printf(&b, "zoffload.optimizer_state_dtype = %s\n",
            zo_dtype_name((zo_dtype)cfg->zoffload.optimizer_state_dtype));
  sb_printf(&b, "zoffload.swap_checksum = %d\n", cfg->zoffload.swap_checksum);
  sb_printf(&b, "zoffload.swap_sqpoll = %d\n", cfg->zoffload.swap_sqpoll);
  sb_printf(&b, "zoffload.delayed_param_update = %d\n", cfg->zoffload.delayed_param_update);
  if (cfg->zoffload.delayed_param_update_warmup_steps) /* printed only when given */
    sb_printf(&b, "zoffload.delayed_param_update_warmup_steps = %" PRId64 "\n",
              cfg->zoffload.delayed_param_update_warmup_steps);
  sb_printf(&b, "zoffload.host_link_gbps = %g\n", cfg->zoffload.host_link_gbps);
  if (cfg->zoffload.pinned_fraction !=
      ZO_CONFIG_PINNED_FRACTION) /* printed only when given: dumps stay as they were */
    sb_printf(&b, "zoffload.pinned_fraction = %g\n", cfg->zoffload.pinned_fraction);
  if (cfg->zoffload.allow_pageable_host) /* printed only when given: dumps stay as they were */
    sb_printf(&b, "zoffload.allow_pageable_host = 1\n");
  if (cfg->zoffload.placement !=
      ZO_PLACEMENT_CONFIG) /* printed only when given: dumps stay as they were */
    sb_printf(&b, "zoffload.placement = auto\n");
  if (cfg->zoffload.placement_host_bytes) /* printed only when given */
    sb_printf(&b, "zoffload.placement_host_bytes = %" PRId64 "\n",
              cfg->zoffload.placement_host_bytes);
  if (cfg->zoffload.optimizer_max_in_cpu) /* printed only when given */
    sb_printf(&b, "zoffload.optimizer_max_in_cpu = %" PRId64 "\n",
              cfg->zoffload.optimizer_max_in_cpu);
  if (!cfg->zoffload.early_adam) /* printed only when given */
    sb_printf(&b, "zoffload.early_adam = 0\n");
  /* zoffload.speeds: each printed only when given (0: measured or cached by zo_speeds_get), as zoffload.comm */
  const struct {
    const char *name;
    double v;
  } sp[] = {{"nvme_read_gbps", cfg->zoffload.speeds.nvme_read_gbps},
            {"nvme_write_gbps", cfg->zoffload.speeds.nvme_write_gbps},
            {"h2d_gbps", cfg->zoffload.speeds.h2d_gbps},
            {"d2h_gbps", cfg->zoffload.speeds.d2h_gbps},
            {"adam_gparams_per_s", cfg->zoffload.speeds.adam_gparams_per_s}};
  for (size_t i = 0; i < sizeof sp / sizeof sp[0]; i++)
    if (sp[i].v != 0) sb_printf(&b, "zoffload.speeds.%s = %g\n", sp[i].name, sp[i].v);
  return b.len;
}
