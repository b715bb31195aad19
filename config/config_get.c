/*
 * config_get.c - zo_config_get_*(): one resolved value of a zo_config_t by its
 * DeepSpeed JSON path, from one table (path, field). Not the parser (config.c):
 * a field added to zo_config_t is readable once it has its line below.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base_internal.h"
#include "config_internal.h"
#include "zoffload/config.h"
#include "zoffload/dtype.h"

/* How the field is stored; chosen by _Generic from the member's type, with no default: a line whose macro does not
 * fit its member (I64 on a double, an enum outside NAMED), or a type change the table does not follow, fails to
 * compile instead of reading the wrong bytes. Enums are named by their own name function (NAMED). */
typedef enum { F_I64, F_INT, F_F64, F_STR } field_kind;

typedef struct key {
  const char *path;
  zo_config_value_type type;
  size_t offset;
  field_kind kind;
  const char *(*name)(int v); /* ZO_CONFIG_STR of an enum or a dtype: its JSON name */
} key;

#define FIELD(m) (&((const zo_config_t *)0)->m)
#define KIND_INT(m) _Generic(FIELD(m), const int64_t * : F_I64, const int * : F_INT)
#define I64(path, m) \
  { path, ZO_CONFIG_I64, offsetof(zo_config_t, m), KIND_INT(m), NULL }
#define BOOL(path, m) \
  { path, ZO_CONFIG_BOOL, offsetof(zo_config_t, m), KIND_INT(m), NULL }
#define F64(path, m)                                                                               \
  {                                                                                                \
    path, ZO_CONFIG_F64, offsetof(zo_config_t, m), _Generic(FIELD(m), const double *: F_F64), NULL \
  }
#define STR(path, m)                               \
  {                                                \
    path, ZO_CONFIG_STR, offsetof(zo_config_t, m), \
        _Generic(FIELD(m), const char(*)[4096]     \
                 : F_STR),                         \
        NULL                                       \
  }
/* an enum (or int) field read as int and shown by @fn; INT_SIZED refuses (to compile) any other size */
#define INT_SIZED(m) (0 * sizeof(char[sizeof(((zo_config_t *)0)->m) == sizeof(int) ? 1 : -1]))
#define NAMED(path, m, fn) \
  { path, ZO_CONFIG_STR, offsetof(zo_config_t, m) + INT_SIZED(m), F_INT, fn }

static const char *offload_name(int v) { return zo_offload_device_name((zo_offload_device)v); }
static const char *opt_name(int v) { return v == ZO_OPT_ADAMW ? "AdamW" : "Adam"; }
static const char *sched_name(int v) {
  static const char *const names[] = {"none", "WarmupLR", "WarmupDecayLR", "WarmupCosineLR"};
  return (unsigned)v < 4 ? names[v] : "?";
}
static const char *warmup_type_name(int v) { return v ? "log" : "linear"; }
static const char *dtype_name(int v) { return v < 0 ? "" : zo_dtype_name((zo_dtype)v); }
static const char *device_kind_name(int v) { return zo_device_kind_name((zo_device_kind)v); }
static const char *comm_name(int v) { return (unsigned)v < 3 ? cfg_comm_names[v] : "?"; }
static const char *placement_name(int v) {
  return v == ZO_PLACEMENT_AUTO ? "auto" : v == ZO_PLACEMENT_CONFIG ? "config" : "?";
}

#define OO "zero_optimization.offload_optimizer."
#define OP "zero_optimization.offload_param."
static const key keys[] = {
    I64("train_batch_size", train_batch_size),
    I64("train_micro_batch_size_per_gpu", train_micro_batch_size_per_gpu),
    I64("gradient_accumulation_steps", gradient_accumulation_steps),
    F64("gradient_clipping", gradient_clipping),
    NAMED("data_types.grad_accum_dtype", grad_accum_dtype, dtype_name),
    I64("steps_per_print", steps_per_print),
    NAMED("optimizer.type", optimizer.type, opt_name),
    BOOL("optimizer.params.adam_w_mode", optimizer.adam_w_mode),
    F64("optimizer.params.lr", optimizer.lr),
    F64("optimizer.params.betas[0]", optimizer.beta1),
    F64("optimizer.params.betas[1]", optimizer.beta2),
    F64("optimizer.params.eps", optimizer.eps),
    F64("optimizer.params.weight_decay", optimizer.weight_decay),
    BOOL("optimizer.params.bias_correction", optimizer.bias_correction),
    NAMED("scheduler.type", scheduler.type, sched_name),
    F64("scheduler.params.warmup_min_lr", scheduler.warmup_min_lr),
    F64("scheduler.params.warmup_max_lr", scheduler.warmup_max_lr),
    I64("scheduler.params.warmup_num_steps", scheduler.warmup_num_steps),
    NAMED("scheduler.params.warmup_type", scheduler.warmup_type_log, warmup_type_name),
    I64("scheduler.params.total_num_steps", scheduler.total_num_steps),
    F64("scheduler.params.cos_min_ratio", scheduler.cos_min_ratio),
    F64("scheduler.params.warmup_min_ratio", scheduler.warmup_min_ratio),
    BOOL("fp16.enabled", fp16.enabled),
    F64("fp16.loss_scale", fp16.loss_scale),
    I64("fp16.initial_scale_power", fp16.initial_scale_power),
    I64("fp16.loss_scale_window", fp16.loss_scale_window),
    I64("fp16.hysteresis", fp16.hysteresis),
    F64("fp16.min_loss_scale", fp16.min_loss_scale),
    BOOL("bf16.enabled", bf16.enabled),
    I64("zero_optimization.stage", zero.stage),
    NAMED(OO "device", zero.offload_optimizer.device, offload_name),
    STR(OO "nvme_path", zero.offload_optimizer.nvme_path),
    BOOL(OO "pin_memory", zero.offload_optimizer.pin_memory),
    I64(OO "buffer_count", zero.offload_optimizer.buffer_count),
    BOOL(OO "pipeline_read", zero.offload_optimizer.pipeline_read),
    BOOL(OO "pipeline_write", zero.offload_optimizer.pipeline_write),
    F64(OO "ratio", zero.offload_optimizer.ratio),
    NAMED(OP "device", zero.offload_param.device, offload_name),
    STR(OP "nvme_path", zero.offload_param.nvme_path),
    BOOL(OP "pin_memory", zero.offload_param.pin_memory),
    I64(OP "buffer_count", zero.offload_param.buffer_count),
    I64(OP "buffer_size", zero.offload_param.buffer_size),
    I64(OP "max_in_cpu", zero.offload_param.max_in_cpu),
    I64("zero_optimization.sub_group_size", zero.sub_group_size),
    I64("zero_optimization.stage3_prefetch_bucket_size", zero.stage3_prefetch_bucket_size),
    I64("zero_optimization.stage3_max_live_parameters", zero.stage3_max_live_parameters),
    I64("zero_optimization.stage3_max_reuse_distance", zero.stage3_max_reuse_distance),
    I64("zero_optimization.stage3_param_persistence_threshold",
        zero.stage3_param_persistence_threshold),
    BOOL("zero_optimization.overlap_comm", zero.overlap_comm),
    I64("zero_optimization.reduce_bucket_size", zero.reduce_bucket_size),
    I64("zero_optimization.allgather_bucket_size", zero.allgather_bucket_size),
    BOOL("zero_optimization.contiguous_gradients", zero.contiguous_gradients),
    I64("aio.block_size", aio.block_size),
    I64("aio.queue_depth", aio.queue_depth),
    I64("aio.intra_op_parallelism", aio.intra_op_parallelism),
    BOOL("aio.single_submit", aio.single_submit),
    BOOL("aio.overlap_events", aio.overlap_events),
    BOOL("aio.use_gds", aio.use_gds),
    NAMED("zoffload.device", zoffload.device_kind, device_kind_name),
    I64("zoffload.device_memory_limit", zoffload.device_memory_limit),
    I64("zoffload.adam_threads", zoffload.adam_threads),
    NAMED("zoffload.optimizer_state_dtype", zoffload.optimizer_state_dtype, dtype_name),
    BOOL("zoffload.swap_checksum", zoffload.swap_checksum),
    BOOL("zoffload.swap_sqpoll", zoffload.swap_sqpoll),
    BOOL("zoffload.delayed_param_update", zoffload.delayed_param_update),
    I64("zoffload.delayed_param_update_warmup_steps", zoffload.delayed_param_update_warmup_steps),
    F64("zoffload.host_link_gbps", zoffload.host_link_gbps),
    I64("zoffload.device_arena_bytes", zoffload.device_arena_bytes),
    NAMED("zoffload.comm", zoffload.comm, comm_name),
    F64("zoffload.comm_timeout_s", zoffload.comm_timeout_s),
    F64("zoffload.pinned_fraction", zoffload.pinned_fraction),
    BOOL("zoffload.allow_pageable_host", zoffload.allow_pageable_host),
    NAMED("zoffload.placement", zoffload.placement, placement_name),
    I64("zoffload.optimizer_max_in_cpu", zoffload.optimizer_max_in_cpu),
    I64("zoffload.placement_host_bytes", zoffload.placement_host_bytes),
    BOOL("zoffload.early_adam", zoffload.early_adam),
    F64("zoffload.speeds.nvme_read_gbps", zoffload.speeds.nvme_read_gbps),
    F64("zoffload.speeds.nvme_write_gbps", zoffload.speeds.nvme_write_gbps),
    F64("zoffload.speeds.h2d_gbps", zoffload.speeds.h2d_gbps),
    F64("zoffload.speeds.d2h_gbps", zoffload.speeds.d2h_gbps),
    F64("zoffload.speeds.adam_gparams_per_s", zoffload.speeds.adam_gparams_per_s),
};
#define N_KEYS (sizeof keys / sizeof keys[0])

static const key *find(const char *path) {
  for (size_t i = 0; i < N_KEYS; i++)
    if (!strcmp(keys[i].path, path)) return &keys[i];
  return NULL;
}

static const char *type_word(zo_config_value_type t) {
  switch (t) {
    case ZO_CONFIG_I64: return "an integer";
    case ZO_CONFIG_F64: return "a real";
    case ZO_CONFIG_BOOL: return "a boolean";
    default: return "a string";
  }
}

static const char *type_getter(zo_config_value_type t) {
  switch (t) {
    case ZO_CONFIG_I64: return "zo_config_get_i64";
    case ZO_CONFIG_F64: return "zo_config_get_f64";
    case ZO_CONFIG_BOOL: return "zo_config_get_bool";
    default: return "zo_config_get_str";
  }
}

/* The key at @path of type @want, or NULL with the error set (*@st). */
static const key *lookup(const zo_config_t *cfg, const char *path, const void *out,
                         zo_config_value_type want, const char *fn, zo_status *st) {
  if (!cfg || !path || !out) {
    *st = zo_error_set(ZO_ERR_INVALID_ARG, "%s: %s is NULL", fn,
                       !cfg    ? "cfg"
                       : !path ? "path"
                               : "out");
    return NULL;
  }
  const key *k = find(path);
  if (!k) {
    *st = zo_error_set(ZO_ERR_INVALID_ARG, "config path \"%s\": not a key %s reads", path, fn);
    return NULL;
  }
  if (k->type != want) {
    *st = zo_error_set(ZO_ERR_INVALID_ARG, "config path \"%s\" is %s (%s), not %s", path,
                       type_word(k->type), type_getter(k->type), type_word(want));
    return NULL;
  }
  return k;
}

static int64_t read_int(const zo_config_t *cfg, const key *k) {
  const char *p = (const char *)cfg + k->offset;
  if (k->kind == F_I64) {
    int64_t v;
    memcpy(&v, p, sizeof v);
    return v;
  }
  int v;
  memcpy(&v, p, sizeof v);
  return v;
}

zo_status zo_config_get_i64(const zo_config_t *cfg, const char *path, int64_t *out) {
  zo_status st = ZO_OK;
  const key *k = lookup(cfg, path, out, ZO_CONFIG_I64, "zo_config_get_i64", &st);
  if (!k) return st;
  *out = read_int(cfg, k);
  return ZO_OK;
}

zo_status zo_config_get_bool(const zo_config_t *cfg, const char *path, int *out) {
  zo_status st = ZO_OK;
  const key *k = lookup(cfg, path, out, ZO_CONFIG_BOOL, "zo_config_get_bool", &st);
  if (!k) return st;
  *out = read_int(cfg, k) != 0;
  return ZO_OK;
}

zo_status zo_config_get_f64(const zo_config_t *cfg, const char *path, double *out) {
  zo_status st = ZO_OK;
  const key *k = lookup(cfg, path, out, ZO_CONFIG_F64, "zo_config_get_f64", &st);
  if (!k) return st;
  memcpy(out, (const char *)cfg + k->offset, sizeof *out);
  return ZO_OK;
}

zo_status zo_config_get_str(const zo_config_t *cfg, const char *path, const char **out) {
  zo_status st = ZO_OK;
  const key *k = lookup(cfg, path, out, ZO_CONFIG_STR, "zo_config_get_str", &st);
  if (!k) return st;
  *out = k->name ? k->name((int)read_int(cfg, k)) : (const char *)cfg + k->offset;
  return ZO_OK;
}

zo_config_value_type zo_config_key_type(const char *path) {
  const key *k = path ? find(path) : NULL;
  return k ? k->type : (zo_config_value_type)0;
}

const char *zo_config_key_at(size_t i, zo_config_value_type *type) {
  if (i >= N_KEYS) return NULL;
  if (type) *type = keys[i].type;
  return keys[i].path;
}
