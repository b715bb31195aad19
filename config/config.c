/*
 * config.c - reads DeepSpeed-style JSON (jansson) into a zo_config_t with
 * DeepSpeed's defaults, legacy forms and batch-size resolution, and errors
 * that name the JSON path. It does not act on the config; the engine does.
 */
#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base_internal.h"
#include "config_auto.h"
#include "config_internal.h"
#include "zoffload/config.h"
#include "zoffload/parse.h"
#include "zoffload/dtype.h"

/* ---------- messages ---------- */

/* Record "src: path: <fmt>" as the last error and return ZO_ERR_CONFIG. */
zo_status __attribute__((format(printf, 3, 4)))
cfg_err(const parse_ctx *c, const char *path, const char *fmt, ...) {
  char msg[768], emsg[900], epath[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  /* the path's keys and the values quoted come from the file: escaped, so no control byte reaches a terminal */
  return zo_error_set(ZO_ERR_CONFIG, "%s: %s: %s", c->src,
                      zo_escape(epath, sizeof epath, path, strlen(path)),
                      zo_escape(emsg, sizeof emsg, msg, strlen(msg)));
}

/* Render a JSON value for "got ..." : strings quoted, numbers, literals, or its kind. */
static const char *show(const json_t *v, char *buf, size_t cap) {
  switch (json_typeof(v)) {
    case JSON_STRING: {
      const char *s = json_string_value(v);
      if (s[0] == NONFINITE_MARK[0] &&
          in_list(s + 1, (const char *const[]){"-Infinity", "Infinity", "NaN", NULL})) {
        snprintf(buf, cap, "%s", s + 1); /* a literal JSON refuses, as written */
        break;
      }
      size_t n = strlen(s);
      if (n > 48)
        snprintf(buf, cap, "\"%.45s...\"", s);
      else
        snprintf(buf, cap, "\"%s\"", s);
      break;
    }
    case JSON_INTEGER: snprintf(buf, cap, "%" JSON_INTEGER_FORMAT, json_integer_value(v)); break;
    case JSON_REAL: snprintf(buf, cap, "%.15g", json_real_value(v)); break;
    case JSON_TRUE: snprintf(buf, cap, "true"); break;
    case JSON_FALSE: snprintf(buf, cap, "false"); break;
    case JSON_NULL: snprintf(buf, cap, "null"); break;
    case JSON_OBJECT: snprintf(buf, cap, "an object"); break;
    case JSON_ARRAY: snprintf(buf, cap, "an array"); break;
  }
  return buf;
}

/* "expected <what>, got <value>", with a hint when the value is HF Trainer's "auto". */
static zo_status type_err(const parse_ctx *c, const char *path, const char *what, const json_t *v) {
  char got[64];
  int is_auto = json_is_string(v) && !strcmp(json_string_value(v), "auto");
  return cfg_err(
      c, path, "expected %s, got %s%s", what, show(v, got, sizeof got),
      is_auto
          ? " (\"auto\" is filled in only at the keys the HF Trainer fills in: see zo_config_auto)"
          : "");
}

/* Join "base.key" (or just "key" when base is empty) into out. */
static const char *pj(char *out, const char *base, const char *key) {
  int n =
      base[0] ? snprintf(out, PATH_CAP, "%s.%s", base, key) : snprintf(out, PATH_CAP, "%s", key);
  if (n >= PATH_CAP)
    memcpy(out + PATH_CAP - 4, "...", 4); /* absurdly long key: keep a readable prefix */
  return out;
}

/*
 * DeepSpeed keys zoffload accepts and does not act on, and what is said about each (inert()). Most describe
 * what zoffload does anyway (contiguous gradients, reduce-scatter, partitioned all-gather) or tune a
 * mechanism zoffload does not have (I/O threads): nothing, or one info line, is said. A warning is given only
 * where the value asks for something zoffload does not do, so the run differs from DeepSpeed's.
 */
typedef struct inert_rule {
  const char *path; /* JSON path (bfloat16.* is looked up as bf16.*) */
  /* the values that behave here as under DeepSpeed, "|"-separated: "any"; "off" (false, 0, null, "",
   * "none", or an object whose "enabled" is false or, without "enabled", whose members are all off);
   * "true"; "false"; "=N" (that number); "s:text" (that string); "never" (no value) */
  const char *same;
  zo_log_level
      level; /* any other value: ZO_LOG_WARN (the run differs) or ZO_LOG_INFO (it does not) */
  const char *instead; /* what zoffload does instead, said with the line; NULL: nothing to add */
} inert_rule;

#define AIO_NOTE                                                                                  \
  "NVMe I/O is io_uring with aio.queue_depth requests in flight in aio.block_size pieces; there " \
  "are no I/O threads or submission modes to set"
#define MIXED_NOTE "the master weights, gradients and optimizer state stay fp32"

static const inert_rule inert_rules[] = {
    /* acted on by the Python front (zoffload.monitor, zoffload._log) */
    {"wall_clock_breakdown", "any", ZO_LOG_INFO, NULL},
    {"tensorboard", "any", ZO_LOG_INFO, NULL},
    {"wandb", "any", ZO_LOG_INFO, NULL},
    {"csv_monitor", "any", ZO_LOG_INFO, NULL},
    {"log_level", "any", ZO_LOG_INFO, NULL},
    {"timers", "any", ZO_LOG_INFO, NULL},
    /* what zoffload does by design, or the same training whatever the value */
    {"zero_allow_untested_optimizer", "any", ZO_LOG_INFO, NULL},
    {"zero_force_ds_cpu_optimizer", "any", ZO_LOG_INFO, NULL},
    {"seq_parallel_communication_data_type", "any", ZO_LOG_INFO, NULL},
    {"use_data_before_expert_parallelism", "any", ZO_LOG_INFO, NULL},
    {"optimizer.legacy_fusion", "any", ZO_LOG_INFO, NULL},
    {"bf16.immediate_grad_update", "any", ZO_LOG_INFO, NULL},
    {"zero_optimization.contiguous_gradients", "any", ZO_LOG_INFO, NULL},
    {"zero_optimization.use_multi_rank_bucket_allreduce", "any", ZO_LOG_INFO, NULL},
    {"zero_optimization.stage3_model_persistence_threshold", "any", ZO_LOG_INFO, NULL},
    {"zero_optimization.model_persistence_threshold", "any", ZO_LOG_INFO, NULL},
    {"zero_optimization.module_granularity_threshold", "any", ZO_LOG_INFO, NULL},
    {"zero_optimization.stage3_module_granularity_threshold", "any", ZO_LOG_INFO, NULL},
    {"zero_optimization.use_all_reduce_for_fetch_params", "any", ZO_LOG_INFO, NULL},
    {"zero_optimization.stage3_use_all_reduce_for_fetch_params", "any", ZO_LOG_INFO, NULL},
    {"zero_optimization.round_robin_gradients", "any", ZO_LOG_INFO, NULL},
    {"zero_optimization.memory_efficient_linear", "any", ZO_LOG_INFO, NULL},
    {"zero_optimization.override_module_apply", "any", ZO_LOG_INFO, NULL},
    {"zero_optimization.log_trace_cache_warnings", "any", ZO_LOG_INFO, NULL},
    {"zero_optimization.save_muon_momentum_buffer_in_memory", "any", ZO_LOG_INFO, NULL},
    {"zero_optimization.allgather_sequential", "any", ZO_LOG_INFO, NULL},
    {"zero_optimization.stage3_allgather_sequential", "any", ZO_LOG_INFO, NULL},
    {"zero_optimization.enable_sanity_checks", "any", ZO_LOG_INFO, NULL},
    {"zero_optimization.offload_optimizer.fast_init", "any", ZO_LOG_INFO, NULL},
    {"managed_gradient_accumulation", "true", ZO_LOG_WARN,
     "the engine ends an accumulation every gradient_accumulation_steps micro-steps"},
    {"gradient_allreduce_op", "s:mean", ZO_LOG_WARN,
     "gradients are summed over the ranks and averaged inside Adam"},
    /* the same training by another way: one info line when the value asks for DeepSpeed's other way */
    {"prescale_gradients", "false", ZO_LOG_INFO,
     "gradients are summed over the ranks in fp32 and averaged inside Adam"},
    {"gradient_predivide_factor", "=1", ZO_LOG_INFO,
     "gradients are summed over the ranks in fp32 and averaged inside Adam"},
    {"sparse_gradients", "false", ZO_LOG_INFO, "gradients are reduced dense, to the same values"},
    {"disable_allgather", "false", ZO_LOG_INFO, "the weights are all-gathered, to the same values"},
    {"zero_optimization.reduce_scatter", "true", ZO_LOG_INFO,
     "gradients are reduce-scattered, summed in fp32, to the same values"},
    {"zero_optimization.allgather_partitions", "true", ZO_LOG_INFO,
     "the weights are all-gathered, to the same values"},
    {"zero_optimization.stage3_gather_16bit_weights_on_model_save", "true", ZO_LOG_INFO,
     "save_16bit_model() gathers the weights whatever this says"},
    {"zero_optimization.stage3_gather_fp16_weights_on_model_save", "true", ZO_LOG_INFO,
     "save_16bit_model() gathers the weights whatever this says"},
    {"zero_optimization.gather_16bit_weights_on_model_save", "true", ZO_LOG_INFO,
     "save_16bit_model() gathers the weights whatever this says"},
    {"zero_optimization.ignore_unused_parameters", "true", ZO_LOG_INFO,
     "a parameter without a gradient is stepped with a zero gradient"},
    {"zero_optimization.legacy_stage1", "false", ZO_LOG_INFO, NULL},
    {"zero_optimization.pipeline_loading_checkpoint", "false", ZO_LOG_INFO, NULL},
    {"zero_optimization.grad_hooks", "true", ZO_LOG_INFO,
     "gradients go to the engine from hooks as backward produces them"},
    {"optimizer.params.torch_adam", "false", ZO_LOG_INFO, "zoffload's CPU Adam runs the step"},
    {"data_types.param_dtype", "never", ZO_LOG_INFO,
     "the working dtype follows fp16.enabled and bf16.enabled"},
    {"aio.intra_op_parallelism", "never", ZO_LOG_INFO, AIO_NOTE},
    {"aio.thread_count", "never", ZO_LOG_INFO, AIO_NOTE},
    {"aio.single_submit", "never", ZO_LOG_INFO, AIO_NOTE},
    {"aio.overlap_events", "never", ZO_LOG_INFO, AIO_NOTE},
    {"zero_optimization.offload_optimizer.pipeline", "never", ZO_LOG_INFO,
     "NVMe reads and writes overlap Adam unless pipeline_read / pipeline_write are false"},
    {"zero_optimization.offload_optimizer.cpuadam_cores_perc", "never", ZO_LOG_INFO,
     "zoffload.adam_threads sets the CPU Adam threads (default: all physical cores)"},
    {"use_node_local_storage", "false", ZO_LOG_INFO, NULL},
    {"checkpoint", "off", ZO_LOG_INFO,
     "checkpoints are zoffload's own (manifest.json and one file per rank)"},
    {"pipeline", "off", ZO_LOG_INFO, "zoffload has no pipeline parallelism"},
    {"autotuning", "off", ZO_LOG_INFO, NULL},
    {"dump_state", "off", ZO_LOG_INFO, NULL},
    {"graph_harvesting", "false", ZO_LOG_INFO, NULL},
    {"sparse_attention", "off", ZO_LOG_INFO, NULL},
    {"vocabulary_size", "any", ZO_LOG_INFO, NULL},
    /* asked for and not built: a different run from DeepSpeed's */
    {"memory_breakdown", "off", ZO_LOG_WARN,
     "engine.memory() and the start-up line give the bytes per tier"},
    {"communication_data_type", "off|s:fp32", ZO_LOG_WARN, "gradients are reduced in fp32"},
    {"amp", "off", ZO_LOG_WARN, "use fp16 or bf16"},
    {"activation_checkpointing", "off", ZO_LOG_WARN,
     "deepspeed.checkpointing is not provided; torch.utils.checkpoint works at every stage"},
    {"flops_profiler", "off", ZO_LOG_WARN, NULL},
    {"comet", "off", ZO_LOG_WARN, "csv_monitor, tensorboard and wandb are supported"},
    {"comms_logger", "off", ZO_LOG_WARN,
     "wall_clock_breakdown shows the time in collectives (comm)"},
    {"elasticity", "off", ZO_LOG_WARN, NULL},
    {"compression_training", "off", ZO_LOG_WARN, NULL},
    {"data_efficiency", "off", ZO_LOG_WARN, NULL},
    {"curriculum_learning", "off", ZO_LOG_WARN, NULL},
    {"nebula", "off", ZO_LOG_WARN, NULL},
    {"eigenvalue", "off", ZO_LOG_WARN, NULL},
    {"progressive_layer_drop", "off", ZO_LOG_WARN, NULL},
    {"quantize_training", "off", ZO_LOG_WARN, NULL},
    {"weight_quantization", "off", ZO_LOG_WARN, NULL},
    {"hybrid_engine", "off", ZO_LOG_WARN, NULL},
    {"compile", "off", ZO_LOG_WARN, NULL},
    {"torch_autocast", "off", ZO_LOG_WARN, NULL},
    {"dataloader_drop_last", "false", ZO_LOG_WARN, NULL},
    {"load_universal_checkpoint", "false", ZO_LOG_WARN, NULL},
    {"fp8", "off", ZO_LOG_WARN, NULL},
    {"gradient_accumulation_dtype", "off", ZO_LOG_WARN,
     "data_types.grad_accum_dtype sets the accumulation dtype"},
    {"steps_per_log", "off", ZO_LOG_WARN, "steps_per_print sets the logging interval"},
    {"tensor_parallel", "off", ZO_LOG_INFO,
     "zoffload has no tensor parallelism: each rank computes the whole model"},
    {"expert_parallel", "off", ZO_LOG_INFO,
     "zoffload has no expert parallelism: each rank computes the whole model"},
    {"datastates_ckpt", "off", ZO_LOG_WARN, NULL},
    {"optimizer.params.fp32_optimizer_states", "true", ZO_LOG_WARN,
     "the optimizer state is fp32 unless zoffload.optimizer_state_dtype is \"bf16\""},
    {"scheduler.params.last_batch_iteration", "=-1", ZO_LOG_WARN,
     "the schedule starts at step 0 (load_checkpoint restores the step)"},
    {"fp16.consecutive_hysteresis", "false", ZO_LOG_WARN, NULL},
    {"fp16.auto_cast", "false", ZO_LOG_WARN, "cast the inputs to fp16 before the forward"},
    {"fp16.fp16_master_weights_and_grads", "false", ZO_LOG_WARN, MIXED_NOTE},
    {"fp16.type", "off|s:fp16", ZO_LOG_WARN, NULL},
    {"bf16.check_grad_overflow", "false", ZO_LOG_WARN, NULL},
    {"bf16.bf16_master_weights_and_grads", "false", ZO_LOG_WARN, MIXED_NOTE},
    {"bf16.bf16_optimizer_states", "false", ZO_LOG_WARN,
     "zoffload.optimizer_state_dtype \"bf16\" keeps the optimizer state in bf16"},
    {"zero_optimization.offload_optimizer.ratio", "=1", ZO_LOG_WARN,
     "all of the optimizer state is offloaded (partial offload is not built)"},
    {"zero_optimization.offload_optimizer.super_offload", "false", ZO_LOG_WARN, NULL},
    {"zero_optimization.load_from_fp32_weights", "true", ZO_LOG_WARN,
     "checkpoints restore the fp32 master weights"},
    {"zero_optimization.elastic_checkpoint", "false", ZO_LOG_WARN, NULL},
    {"zero_optimization.zero_hpz_partition_size", "=1", ZO_LOG_WARN,
     "hierarchical partitioning (ZeRO++ hpZ) is not built"},
    {"zero_optimization.zero_quantized_weights", "false", ZO_LOG_WARN,
     "collectives stay in full precision (ZeRO++ quantization is not built)"},
    {"zero_optimization.zero_quantized_nontrainable_weights", "false", ZO_LOG_WARN,
     "collectives stay in full precision (ZeRO++ quantization is not built)"},
    {"zero_optimization.zero_quantized_gradients", "false", ZO_LOG_WARN,
     "collectives stay in full precision (ZeRO++ quantization is not built)"},
    {"zero_optimization.zeropp_loco_param", "off", ZO_LOG_WARN, NULL},
    {"zero_optimization.mics_shard_size", "=-1", ZO_LOG_WARN,
     "MiCS is not built: the state is sharded over every rank"},
    {"zero_optimization.mics_hierarchical_params_gather", "false", ZO_LOG_WARN, NULL},
    {"zero_optimization.zenflow", "never", ZO_LOG_WARN, NULL},
};

/* @v is "off": false, 0, null, "", "none", or an object whose "enabled" is off or, without one, whose members
 * are all off (an empty object too). */
static int inert_off(const json_t *v) {
  if (json_is_null(v) || json_is_false(v)) return 1;
  if (json_is_number(v)) return json_number_value(v) == 0;
  if (json_is_string(v)) return !json_string_value(v)[0] || !strcmp(json_string_value(v), "none");
  if (json_is_object(v)) {
    const json_t *en = json_object_get(v, "enabled");
    if (en) return inert_off(en);
    const char *k;
    const json_t *x;
    json_object_foreach((json_t *)v, k, x) {
      if (!inert_off(x)) return 0;
    }
    return 1;
  }
  return 0;
}

/* @v is one of the values @same (inert_rule.same) lists. */
static int inert_same(const char *same, const json_t *v) {
  char alt[64];
  for (const char *s = same; *s;) {
    size_t n = strcspn(s, "|");
    snprintf(alt, sizeof alt, "%.*s", (int)n, s);
    s += n + (s[n] == '|');
    if (!strcmp(alt, "any")) return 1;
    if (!strcmp(alt, "off") && inert_off(v)) return 1;
    if (!strcmp(alt, "true") &&
        (json_is_true(v) || (json_is_integer(v) && json_integer_value(v) == 1)))
      return 1;
    if (!strcmp(alt, "false") &&
        (json_is_false(v) || (json_is_integer(v) && json_integer_value(v) == 0)))
      return 1;
    if (alt[0] == '=' && json_is_number(v) && json_number_value(v) == strtod(alt + 1, NULL))
      return 1;
    if (!strncmp(alt, "s:", 2) && json_is_string(v) && !strcmp(json_string_value(v), alt + 2))
      return 1;
  }
  return 0;
}

/* A DeepSpeed key at @path (value @v) that zoffload accepts and does not act on: nothing when @v behaves here
 * as under DeepSpeed, else one line, at info level when the training is the same, else a warning. A key with no
 * rule warns. */
static void inert(const char *path, const json_t *v) {
  char alias[PATH_CAP];
  const char *look = path;
  if (!strncmp(path, "bfloat16.", 9)) { /* the legacy block name */
    snprintf(alias, sizeof alias, "bf16.%s", path + 9);
    look = alias;
  }
  const inert_rule *r = NULL;
  for (size_t i = 0; i < sizeof inert_rules / sizeof inert_rules[0]; i++)
    if (!strcmp(inert_rules[i].path, look)) r = &inert_rules[i];
  if (r && inert_same(r->same, v)) return;
  zo_log_level level = r ? r->level : ZO_LOG_WARN;
  const char *instead = r ? r->instead : NULL;
  if (level == ZO_LOG_INFO)
    zo_info("config: %s is not used by zoffload, and the training is the same%s%s", path,
            instead ? ": " : "", instead ? instead : "");
  else
    zo_warn("config: %s is accepted but has no effect in zoffload%s%s", path, instead ? "; " : "",
            instead ? instead : "");
}

/* ---------- typed getters: each checks type then range and names the path ---------- */

static zo_status get_i64(const parse_ctx *c, const char *path, const json_t *v, int64_t lo,
                         int64_t hi, int64_t *out) {
  int64_t x;
  if (json_is_integer(v)) {
    x = (int64_t)json_integer_value(v);
  } else if (json_is_real(v)) {
    double d = json_real_value(v);
    /* 9223372036854775808.0 == 2^63 is the first double outside int64. */
    if (d != floor(d) || d < -9223372036854775808.0 || d >= 9223372036854775808.0)
      return type_err(c, path, "an integer", v);
    x = (int64_t)d;
  } else {
    return type_err(c, path, "an integer", v);
  }
  if (x < lo || x > hi) {
    if (hi == INT64_MAX)
      return cfg_err(c, path, "expected an integer >= %" PRId64 ", got %" PRId64, lo, x);
    return cfg_err(c, path, "expected an integer in [%" PRId64 ", %" PRId64 "], got %" PRId64, lo,
                   hi, x);
  }
  *out = x;
  return ZO_OK;
}

static zo_status get_int(const parse_ctx *c, const char *path, const json_t *v, int lo, int hi,
                         int *out) {
  int64_t x;
  ZO_CHECK(get_i64(c, path, v, lo, hi, &x));
  *out = (int)x;
  return ZO_OK;
}

/* Range flags for get_dbl. */
enum { LO_INCL = 1, LO_EXCL = 2, HI_INCL = 4, HI_EXCL = 8 };

static zo_status get_dbl(const parse_ctx *c, const char *path, const json_t *v, double lo,
                         double hi, int flags, double *out) {
  if (!json_is_number(v)) return type_err(c, path, "a number", v);
  double x = json_number_value(v);
  int bad = !isfinite(x);
  if ((flags & LO_INCL) && !(x >= lo)) bad = 1;
  if ((flags & LO_EXCL) && !(x > lo)) bad = 1;
  if ((flags & HI_INCL) && !(x <= hi)) bad = 1;
  if ((flags & HI_EXCL) && !(x < hi)) bad = 1;
  if (bad) {
    char what[96];
    int has_lo = flags & (LO_INCL | LO_EXCL), has_hi = flags & (HI_INCL | HI_EXCL);
    if (has_lo && has_hi)
      snprintf(what, sizeof what, "a number in %c%g, %g%c", (flags & LO_INCL) ? '[' : '(', lo, hi,
               (flags & HI_INCL) ? ']' : ')');
    else if (has_lo)
      snprintf(what, sizeof what, "a number %s %g", (flags & LO_INCL) ? ">=" : ">", lo);
    else if (has_hi)
      snprintf(what, sizeof what, "a number %s %g", (flags & HI_INCL) ? "<=" : "<", hi);
    else
      snprintf(what, sizeof what, "a finite number");
    return type_err(c, path, what, v);
  }
  /* Adam, the scheduler's lr and the loss scaler compute in float32 (zoffload/adam.h): a value that is infinite
   * there, or subnormal or 0 (the SIMD kernels flush subnormals), is not the value written. */
  if (x != 0 && !(fabs(x) >= FLT_MIN && fabs(x) <= FLT_MAX))
    return cfg_err(
        c, path,
        "got %g, which is %s as float32 (what the optimizer computes in); expected 0 or a "
        "magnitude in [%g, %g]",
        x, fabs(x) > FLT_MAX ? "infinite" : "0 or subnormal", FLT_MIN, FLT_MAX);
  *out = x;
  return ZO_OK;
}

static zo_status get_bool(const parse_ctx *c, const char *path, const json_t *v, int *out) {
  if (!json_is_boolean(v)) return type_err(c, path, "true or false", v);
  *out = json_is_true(v);
  return ZO_OK;
}

static zo_status get_obj(const parse_ctx *c, const char *path, const json_t *v) {
  return json_is_object(v) ? ZO_OK : type_err(c, path, "an object", v);
}

/* nvme_path: a string (or null meaning absent) that fits the fixed buffer. */
static zo_status get_path(const parse_ctx *c, const char *path, const json_t *v, char *out,
                          size_t cap) {
  if (json_is_null(v)) {
    out[0] = 0;
    return ZO_OK;
  }
  if (!json_is_string(v)) return type_err(c, path, "a path string or a list of them", v);
  const char *s = json_string_value(v);
  if (strlen(s) >= cap) return cfg_err(c, path, "path longer than %zu bytes", cap - 1);
  memcpy(out, s, strlen(s) + 1);
  return ZO_OK;
}

unsigned zo_config_nvme_dirs(const zo_config_t *cfg, int which, const char **out) {
  const char *first =
      which ? cfg->zero.offload_param.nvme_path : cfg->zero.offload_optimizer.nvme_path;
  const char *list =
      which ? cfg->zero.offload_param.nvme_paths : cfg->zero.offload_optimizer.nvme_paths;
  int n = which ? cfg->zero.offload_param.n_nvme_paths : cfg->zero.offload_optimizer.n_nvme_paths;
  if (n < 2 || n > ZO_CONFIG_MAX_NVME_PATHS || strcmp(list, first) != 0) {
    out[0] = first;
    return 1;
  }
  for (int i = 0; i < n; i++, list += strlen(list) + 1) out[i] = list;
  return (unsigned)n;
}

int zo_config_nvme_dirs_shared(const zo_config_t *cfg) {
  const char *o[ZO_CONFIG_MAX_NVME_PATHS], *p[ZO_CONFIG_MAX_NVME_PATHS];
  const unsigned no = zo_config_nvme_dirs(cfg, 0, o), np = zo_config_nvme_dirs(cfg, 1, p);
  int same = no == np;
  for (unsigned i = 0; same && i < no; i++) same = !strcmp(o[i], p[i]);
  return same;
}

/* With both blocks on nvme: the same directories (one swap handle serves both), or none in common (each
 * block's handle owns its private directory in each of its directories). */
static zo_status check_nvme_lists(const parse_ctx *c, const zo_config_t *cfg) {
  if (cfg->zero.offload_optimizer.device != ZO_OFFLOAD_NVME ||
      cfg->zero.offload_param.device != ZO_OFFLOAD_NVME)
    return ZO_OK;
  if (zo_config_nvme_dirs_shared(cfg)) return ZO_OK;
  const char *o[ZO_CONFIG_MAX_NVME_PATHS], *p[ZO_CONFIG_MAX_NVME_PATHS];
  const unsigned no = zo_config_nvme_dirs(cfg, 0, o), np = zo_config_nvme_dirs(cfg, 1, p);
  for (unsigned i = 0; i < np; i++)
    for (unsigned j = 0; j < no; j++)
      if (!strcmp(p[i], o[j])) {
        char at[128], idx[16] = "";
        if (np > 1) snprintf(idx, sizeof idx, "[%u]", i);
        snprintf(at, sizeof at, "zero_optimization.offload_param.nvme_path%s", idx);
        return cfg_err(c, at,
                       "'%s' is also in zero_optimization.offload_optimizer.nvme_path, whose "
                       "directories differ: give both blocks the same directories, or none in "
                       "common",
                       p[i]);
      }
  return ZO_OK;
}

/* nvme_path: a string, null, or a list of 1..ZO_CONFIG_MAX_NVME_PATHS distinct directory strings
 * (the swap files striped across them): the first in @first, all NUL-separated in @list (*n of them;
 * 0 for a string). A bad entry is named by its index: "...nvme_path[1]". */
static zo_status get_paths(const parse_ctx *c, const char *path, const json_t *v, char *first,
                           size_t first_cap, char *list, size_t list_cap, int *n) {
  *n = 0;
  list[0] = 0;
  if (!json_is_array(v)) return get_path(c, path, v, first, first_cap);
  const size_t len = json_array_size(v);
  if (len == 0 || len > ZO_CONFIG_MAX_NVME_PATHS)
    return cfg_err(c, path, "expected 1..%d directories, got %zu", ZO_CONFIG_MAX_NVME_PATHS, len);
  size_t used = 0;
  for (size_t i = 0; i < len; i++) {
    char ip[512];
    snprintf(ip, sizeof ip, "%s[%zu]", path, i);
    const json_t *e = json_array_get(v, i);
    if (!json_is_string(e)) return type_err(c, ip, "a directory path string", e);
    char one[4096];
    ZO_CHECK(get_path(c, ip, e, one, sizeof one));
    if (!one[0]) return cfg_err(c, ip, "empty path");
    const size_t l = strlen(one) + 1;
    if (used + l > list_cap)
      return cfg_err(c, ip, "the directories take more than %zu bytes together", list_cap - 1);
    for (size_t j = 0, at = 0; j < i; j++, at += strlen(list + at) + 1)
      if (!strcmp(list + at, one)) return cfg_err(c, ip, "'%s' is also entry %zu", one, j);
    memcpy(list + used, one, l);
    used += l;
    if (i == 0) memcpy(first, one, l);
  }
  *n = (int)len;
  return ZO_OK;
}

static zo_status get_device(const parse_ctx *c, const char *path, const json_t *v,
                            zo_offload_device *out) {
  static const char *what = "\"none\", \"cpu\" or \"nvme\"";
  if (!json_is_string(v)) return type_err(c, path, what, v);
  if (zo_offload_device_parse(json_string_value(v), out) != ZO_OK)
    return type_err(c, path, what, v);
  return ZO_OK;
}

/* zoffload.device: "auto", "cuda" or "host" (zo_device_kind). */
static zo_status get_device_kind(const parse_ctx *c, const char *path, const json_t *v,
                                 zo_device_kind *out) {
  static const char *what = "\"auto\", \"cuda\" or \"host\"";
  if (!json_is_string(v)) return type_err(c, path, what, v);
  if (zo_device_kind_parse(json_string_value(v), out) != ZO_OK) return type_err(c, path, what, v);
  return ZO_OK;
}

/* zoffload.comm: "auto", "nccl" or "mpi" (zo_comm_choice). */
const char *const cfg_comm_names[3] = {"auto", "nccl", "mpi"};
static zo_status get_comm(const parse_ctx *c, const char *path, const json_t *v,
                          zo_comm_choice *out) {
  static const char *what = "\"auto\", \"nccl\" or \"mpi\"";
  if (!json_is_string(v)) return type_err(c, path, what, v);
  for (int i = 0; i < (int)(sizeof cfg_comm_names / sizeof cfg_comm_names[0]); i++)
    if (!strcmp(json_string_value(v), cfg_comm_names[i])) {
      *out = (zo_comm_choice)i;
      return ZO_OK;
    }
  return type_err(c, path, what, v);
}

/* zoffload.optimizer_state_dtype: "fp32" or "bf16" (zo_dtype values). */
static zo_status get_state_dtype(const parse_ctx *c, const char *path, const json_t *v, int *out) {
  static const char *what = "\"fp32\" or \"bf16\"";
  if (!json_is_string(v)) return type_err(c, path, what, v);
  const char *s = json_string_value(v);
  if (!strcmp(s, "fp32"))
    *out = ZO_DTYPE_F32;
  else if (!strcmp(s, "bf16"))
    *out = ZO_DTYPE_BF16;
  else
    return type_err(c, path, what, v);
  return ZO_OK;
}

/*
 * Byte sizes for the zoffload block: an integer, or a string "<number>[ ]<unit>"
 * with unit B, K/KB, M/MB, G/GB, T/TB (powers of 1000) or KiB, MiB, GiB, TiB
 * (powers of 1024), case-insensitive. Fractions are rounded down to whole bytes.
 */
static zo_status get_bytes(const parse_ctx *c, const char *path, const json_t *v, int64_t *out) {
  static const char *what =
      "a byte count (an integer, or a string like \"64MiB\", \"80G\" or \"1GB\": K M G T and KiB MiB GiB "
      "TiB are powers of 1024, KB MB GB TB powers of 1000)";
  if (json_is_number(v)) {
    if (get_i64(c, path, v, 0, INT64_MAX, out) != ZO_OK)
      return type_err(c, path, "a byte count >= 0", v);
    return ZO_OK;
  }
  if (!json_is_string(v)) return type_err(c, path, what, v);
  uint64_t b;
  if (zo_parse_bytes(json_string_value(v), &b) != ZO_OK) return type_err(c, path, what, v);
  if (b > INT64_MAX)
    return cfg_err(c, path, "byte count %s does not fit in 63 bits", json_string_value(v));
  *out = (int64_t)b;
  return ZO_OK;
}

/* ---------- optimizer ---------- */

static const char *const opt_keys[] = {"type", "params", "legacy_fusion", NULL};
static const char *const opt_param_keys[] = {
    "lr",          "betas",   "eps",        "weight_decay",          "bias_correction",
    "adam_w_mode", "amsgrad", "torch_adam", "fp32_optimizer_states", NULL};

/* optimizer.type (@t, NULL when missing): "Adam" or "AdamW", any case; a DeepSpeed optimizer zoffload does not
 * implement is named as one. */
static zo_status parse_optimizer_type(const parse_ctx *c, const json_t *t, zo_config_t *cfg) {
  if (!t) return cfg_err(c, "optimizer.type", "missing (expected \"Adam\" or \"AdamW\")");
  if (!json_is_string(t)) return type_err(c, "optimizer.type", "\"Adam\" or \"AdamW\"", t);
  const char *ts = json_string_value(t);
  if (!strcasecmp(ts, "adam"))
    cfg->optimizer.type = ZO_OPT_ADAM;
  else if (!strcasecmp(ts, "adamw"))
    cfg->optimizer.type = ZO_OPT_ADAMW;
  else {
    static const char *const ds_known[] = {"lamb",    "onebitadam", "zerooneadam", "onebitlamb",
                                           "adagrad", "lion",       "muadam",      "muadamw",
                                           "musgd",   "muon",       NULL};
    char low[64];
    size_t i = 0;
    for (; ts[i] && i + 1 < sizeof low; i++) low[i] = (char)tolower((unsigned char)ts[i]);
    low[i] = 0;
    if (in_list(low, ds_known))
      return cfg_err(
          c, "optimizer.type",
          "expected \"Adam\" or \"AdamW\", got \"%s\" (a DeepSpeed optimizer zoffload does not implement)",
          ts);
    return type_err(c, "optimizer.type", "\"Adam\" or \"AdamW\"", t);
  }
  return ZO_OK;
}

/* optimizer.betas at @q: [beta1, beta2], each in [0, 1) as float32. */
static zo_status parse_betas(const parse_ctx *c, const char *q, const json_t *v2,
                             zo_config_t *cfg) {
  if (!json_is_array(v2) || json_array_size(v2) != 2)
    return type_err(c, q, "an array of two numbers [beta1, beta2]", v2);
  char r[PATH_CAP + 8];
  double b[2];
  for (int i = 0; i < 2; i++) {
    snprintf(r, sizeof r, "%s[%d]", q, i);
    ZO_CHECK(get_dbl(c, r, json_array_get(v2, i), 0, 1, LO_INCL | HI_EXCL, &b[i]));
    if (!((float)b[i] < 1.0f)) /* 1 - beta^step is the bias correction's divisor */
      return cfg_err(
          c, r,
          "expected a number in [0, 1), got %.17g, which is 1 as float32 (what the optimizer "
          "computes in): at most %.9g",
          b[i], (double)nextafterf(1.0f, 0.0f));
  }
  cfg->optimizer.beta1 = b[0];
  cfg->optimizer.beta2 = b[1];
  return ZO_OK;
}

/* One key @k2 of optimizer.params (at @q) of optimizer @ts; adam_w_mode goes to *@adam_w_mode. */
static zo_status optimizer_param(const parse_ctx *c, const char *q, const char *k2,
                                 const json_t *v2, const char *ts, int *adam_w_mode,
                                 zo_config_t *cfg) {
  if (!strcmp(k2, "lr")) {
    ZO_CHECK(get_dbl(c, q, v2, 0, ZO_CONFIG_LR_MAX, LO_INCL | HI_INCL, &cfg->optimizer.lr));
  } else if (!strcmp(k2, "betas")) {
    ZO_CHECK(parse_betas(c, q, v2, cfg));
  } else if (!strcmp(k2, "eps")) {
    ZO_CHECK(get_dbl(c, q, v2, FLT_MIN, 1, LO_INCL | HI_INCL, &cfg->optimizer.eps));
  } else if (!strcmp(k2, "weight_decay")) {
    ZO_CHECK(get_dbl(c, q, v2, 0, ZO_CONFIG_WEIGHT_DECAY_MAX, LO_INCL | HI_INCL,
                     &cfg->optimizer.weight_decay));
  } else if (!strcmp(k2, "bias_correction")) {
    ZO_CHECK(get_bool(c, q, v2, &cfg->optimizer.bias_correction));
  } else if (!strcmp(k2, "adam_w_mode")) {
    ZO_CHECK(get_bool(c, q, v2, adam_w_mode));
  } else if (!strcmp(k2, "amsgrad")) {
    int ams = 0;
    ZO_CHECK(get_bool(c, q, v2, &ams));
    if (ams) return cfg_err(c, q, "amsgrad is not supported (expected false)");
  } else if (!strcmp(k2, "torch_adam") || !strcmp(k2, "fp32_optimizer_states")) {
    inert(q, v2);
  } else if (!strcmp(k2, "max_grad_norm")) {
    return cfg_err(
        c, q,
        "not an optimizer parameter; use the top-level \"gradient_clipping\" (as DeepSpeed requires)");
  } else {
    char hint[PATH_CAP + 32];
    return cfg_err(c, q,
                   "not a parameter of %s (it takes lr, betas, eps, weight_decay, bias_correction, "
                   "adam_w_mode, amsgrad); DeepSpeed would reject it too%s",
                   ts,
                   cfg_did_you_mean(hint, sizeof hint, q, k2, KEY_SETS({NULL, opt_param_keys})));
  }
  return ZO_OK;
}

static zo_status parse_optimizer(const parse_ctx *c, const json_t *blk, zo_config_t *cfg) {
  char p[PATH_CAP];
  ZO_CHECK(get_obj(c, "optimizer", blk));
  ZO_CHECK(parse_optimizer_type(c, json_object_get(blk, "type"), cfg));
  const char *ts = json_string_value(json_object_get(blk, "type"));
  int adam_w_mode = 1; /* DeepSpeed ADAM_W_MODE_DEFAULT */
  const char *key;
  json_t *v;
  json_object_foreach((json_t *)blk, key, v) {
    pj(p, "optimizer", key);
    if (!strcmp(key, "type")) continue;
    if (!strcmp(key, "params")) {
      ZO_CHECK(get_obj(c, p, v));
      const char *k2;
      json_t *v2;
      char q[PATH_CAP];
      json_object_foreach(v, k2, v2) {
        ZO_CHECK(optimizer_param(c, pj(q, p, k2), k2, v2, ts, &adam_w_mode, cfg));
      }
    } else if (!strcmp(key, "legacy_fusion")) {
      inert(p, v);
    } else { /* "adam_w_mode" one level too high: did you mean optimizer.params.adam_w_mode? */
      return cfg_unknown_key(c, p, key,
                             KEY_SETS({NULL, opt_keys}, {"optimizer.params", opt_param_keys}));
    }
  }
  /* DeepSpeed engine: effective_adam_w_mode = name == "adamw" or adam_w_mode. */
  cfg->optimizer.adam_w_mode = cfg->optimizer.type == ZO_OPT_ADAMW ? 1 : adam_w_mode;
  return ZO_OK;
}

/* ---------- scheduler ---------- */

static const char *const sched_keys[] = {"type", "params", NULL};
/* the params of WarmupLR, WarmupDecayLR and WarmupCosineLR (zo_sched_type - 1) */
static const char *const sched_param_keys[3][7] = {
    {"warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "warmup_type", "last_batch_iteration",
     NULL},
    {"total_num_steps", "warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "warmup_type",
     "last_batch_iteration", NULL},
    {"total_num_steps", "warmup_min_ratio", "warmup_num_steps", "cos_min_ratio", "warmup_type",
     "last_batch_iteration", NULL},
};

static zo_status parse_scheduler(const parse_ctx *c, const json_t *blk, zo_config_t *cfg) {
  static const char *what = "\"WarmupLR\", \"WarmupDecayLR\" or \"WarmupCosineLR\"";
  ZO_CHECK(get_obj(c, "scheduler", blk));
  const json_t *t = json_object_get(blk, "type");
  if (!t) return cfg_err(c, "scheduler.type", "missing (expected %s)", what);
  if (!json_is_string(t)) return type_err(c, "scheduler.type", what, t);
  const char *ts = json_string_value(t);
  zo_sched_type st;
  if (!strcmp(ts, "WarmupLR"))
    st = ZO_SCHED_WARMUP_LR;
  else if (!strcmp(ts, "WarmupDecayLR"))
    st = ZO_SCHED_WARMUP_DECAY_LR;
  else if (!strcmp(ts, "WarmupCosineLR"))
    st = ZO_SCHED_WARMUP_COSINE_LR;
  else if (!strcmp(ts, "OneCycle") || !strcmp(ts, "LRRangeTest"))
    return cfg_err(c, "scheduler.type",
                   "expected %s, got \"%s\" (a DeepSpeed scheduler zoffload does not implement)",
                   what, ts);
  else
    return type_err(c, "scheduler.type", what, t);
  cfg->scheduler.type = st;

  int have_total = 0;
  const char *key;
  json_t *v;
  char p[PATH_CAP], q[PATH_CAP];
  json_object_foreach((json_t *)blk, key, v) {
    pj(p, "scheduler", key);
    if (!strcmp(key, "type")) continue;
    if (strcmp(key, "params"))
      return cfg_unknown_key(c, p, key,
                             KEY_SETS({NULL, sched_keys},
                                      {"scheduler.params", sched_param_keys[st - 1]}));
    ZO_CHECK(get_obj(c, p, v));
    const char *k2;
    json_t *v2;
    json_object_foreach(v, k2, v2) {
      pj(q, p, k2);
      int lr_sched = st != ZO_SCHED_WARMUP_COSINE_LR, decaying = st != ZO_SCHED_WARMUP_LR;
      if (lr_sched && !strcmp(k2, "warmup_min_lr")) {
        ZO_CHECK(get_dbl(c, q, v2, 0, ZO_CONFIG_LR_MAX, LO_INCL | HI_INCL,
                         &cfg->scheduler.warmup_min_lr));
      } else if (lr_sched && !strcmp(k2, "warmup_max_lr")) {
        ZO_CHECK(get_dbl(c, q, v2, 0, ZO_CONFIG_LR_MAX, LO_INCL | HI_INCL,
                         &cfg->scheduler.warmup_max_lr));
      } else if (!strcmp(k2, "warmup_num_steps")) {
        ZO_CHECK(get_i64(c, q, v2, 0, INT64_MAX, &cfg->scheduler.warmup_num_steps));
      } else if (!strcmp(k2, "warmup_type")) {
        if (json_is_string(v2) && !strcmp(json_string_value(v2), "log"))
          cfg->scheduler.warmup_type_log = 1;
        else if (json_is_string(v2) && !strcmp(json_string_value(v2), "linear"))
          cfg->scheduler.warmup_type_log = 0;
        else
          return type_err(c, q, "\"log\" or \"linear\"", v2);
      } else if (decaying && !strcmp(k2, "total_num_steps")) {
        ZO_CHECK(get_i64(c, q, v2, 1, INT64_MAX, &cfg->scheduler.total_num_steps));
        have_total = 1;
      } else if (!lr_sched && !strcmp(k2, "warmup_min_ratio")) {
        ZO_CHECK(get_dbl(c, q, v2, 0, 1, LO_INCL | HI_INCL, &cfg->scheduler.warmup_min_ratio));
      } else if (!lr_sched && !strcmp(k2, "cos_min_ratio")) {
        ZO_CHECK(get_dbl(c, q, v2, 0, 1, LO_INCL | HI_INCL, &cfg->scheduler.cos_min_ratio));
      } else if (!strcmp(k2, "last_batch_iteration")) {
        inert(q, v2);
      } else {
        const char *takes =
            st == ZO_SCHED_WARMUP_LR ? "warmup_min_lr, warmup_max_lr, warmup_num_steps, warmup_type"
            : st == ZO_SCHED_WARMUP_DECAY_LR
                ? "total_num_steps, warmup_min_lr, warmup_max_lr, warmup_num_steps, warmup_type"
                : "total_num_steps, warmup_min_ratio, warmup_num_steps, cos_min_ratio, warmup_type";
        char hint[PATH_CAP + 32];
        return cfg_err(c, q, "not a parameter of %s (it takes %s); DeepSpeed would reject it too%s",
                       ts, takes,
                       cfg_did_you_mean(hint, sizeof hint, q, k2,
                                        KEY_SETS({NULL, sched_param_keys[st - 1]})));
      }
    }
  }
  if (st != ZO_SCHED_WARMUP_LR) {
    if (!have_total)
      return cfg_err(c, "scheduler.params.total_num_steps", "missing (required by %s)", ts);
    int64_t w = cfg->scheduler.warmup_num_steps < 2 ? 2 : cfg->scheduler.warmup_num_steps;
    if (st == ZO_SCHED_WARMUP_COSINE_LR && cfg->scheduler.total_num_steps == w)
      return cfg_err(c, "scheduler.params.total_num_steps",
                     "must differ from warmup_num_steps (%" PRId64
                     ") for WarmupCosineLR (DeepSpeed divides by "
                     "their difference)",
                     w);
    if (cfg->scheduler.total_num_steps < w)
      zo_warn("config: scheduler.params.total_num_steps %" PRId64
              " is less than warmup_num_steps %" PRId64,
              cfg->scheduler.total_num_steps, w);
  }
  return ZO_OK;
}

/* ---------- blocks: an object whose keys are parsed one by one ---------- */

/* Parses the value @v of @key; @path is "<block>.<key>"; @arg is what parse_keys() was given. */
typedef zo_status (*key_fn)(const parse_ctx *c, const char *path, const char *key, const json_t *v,
                            zo_config_t *cfg, const void *arg);

/* Checks that @blk (at @base) is an object, then hands each key and its path to @fn; stops at the first error. */
static zo_status parse_keys(const parse_ctx *c, const char *base, const json_t *blk, key_fn fn,
                            zo_config_t *cfg, const void *arg) {
  ZO_CHECK(get_obj(c, base, blk));
  const char *key;
  json_t *v;
  char p[PATH_CAP];
  json_object_foreach((json_t *)blk, key, v) {
    ZO_CHECK(fn(c, pj(p, base, key), key, v, cfg, arg));
  }
  return ZO_OK;
}

/* ---------- data_types ---------- */

/* data_types (DeepSpeed): grad_accum_dtype "fp32", "bf16" or "fp16"; param_dtype is not acted on; buffer_dtype (the
 * same values) is checked here and acted on by the Python front, which casts a module's floating buffers to it;
 * zo-train's GPT has no buffers. */
static zo_status data_types_key(const parse_ctx *c, const char *p, const char *key, const json_t *v,
                                zo_config_t *cfg, const void *arg) {
  (void)arg;
  static const char *const keys[] = {"grad_accum_dtype", "param_dtype", "buffer_dtype", NULL};
  if (!strcmp(key, "param_dtype")) {
    inert(p, v);
    return ZO_OK;
  }
  if (strcmp(key, "grad_accum_dtype") && strcmp(key, "buffer_dtype"))
    return cfg_unknown_key(c, p, key, KEY_SETS({NULL, keys}));
  static const char *what = "\"fp32\", \"bf16\" or \"fp16\"";
  if (!json_is_string(v)) return type_err(c, p, what, v);
  const char *s = json_string_value(v);
  if (!strcmp(key, "buffer_dtype")) {
    if (strcmp(s, "fp32") && strcmp(s, "bf16") && strcmp(s, "fp16")) return type_err(c, p, what, v);
    return ZO_OK;
  }
  if (!strcmp(s, "fp32"))
    cfg->grad_accum_dtype = ZO_DTYPE_F32;
  else if (!strcmp(s, "bf16"))
    cfg->grad_accum_dtype = ZO_DTYPE_BF16;
  else if (!strcmp(s, "fp16"))
    cfg->grad_accum_dtype = ZO_DTYPE_F16;
  else
    return type_err(c, p, what, v);
  return ZO_OK;
}

/* ---------- fp16 / bf16 ---------- */

static zo_status fp16_key(const parse_ctx *c, const char *p, const char *key, const json_t *v,
                          zo_config_t *cfg, const void *arg) {
  (void)arg;
  if (!strcmp(key, "enabled")) return get_bool(c, p, v, &cfg->fp16.enabled);
  if (!strcmp(key, "loss_scale"))
    return get_dbl(c, p, v, 0, ZO_CONFIG_LOSS_SCALE_MAX, LO_INCL | HI_INCL, &cfg->fp16.loss_scale);
  if (!strcmp(key, "initial_scale_power"))
    return get_int(c, p, v, 0, 64, &cfg->fp16.initial_scale_power);
  if (!strcmp(key, "loss_scale_window"))
    return get_i64(c, p, v, 1, INT64_MAX, &cfg->fp16.loss_scale_window);
  if (!strcmp(key, "hysteresis")) return get_int(c, p, v, 1, 1 << 30, &cfg->fp16.hysteresis);
  if (!strcmp(key, "min_loss_scale"))
    return get_dbl(c, p, v, 0, ZO_CONFIG_LOSS_SCALE_MAX, LO_EXCL | HI_INCL,
                   &cfg->fp16.min_loss_scale);
  static const char *const keys[] = {"enabled",
                                     "loss_scale",
                                     "initial_scale_power",
                                     "loss_scale_window",
                                     "hysteresis",
                                     "min_loss_scale",
                                     "consecutive_hysteresis",
                                     "auto_cast",
                                     "fp16_master_weights_and_grads",
                                     "type",
                                     NULL};
  if (!in_list(key, keys)) return cfg_unknown_key(c, p, key, KEY_SETS({NULL, keys}));
  inert(p, v); /* consecutive_hysteresis, auto_cast, fp16_master_weights_and_grads, type */
  return ZO_OK;
}

static zo_status bf16_key(const parse_ctx *c, const char *p, const char *key, const json_t *v,
                          zo_config_t *cfg, const void *arg) {
  (void)arg;
  if (!strcmp(key, "enabled")) return get_bool(c, p, v, &cfg->bf16.enabled);
  static const char *const keys[] = {"enabled",
                                     "immediate_grad_update",
                                     "check_grad_overflow",
                                     "bf16_master_weights_and_grads",
                                     "bf16_optimizer_states",
                                     NULL};
  if (!in_list(key, keys)) return cfg_unknown_key(c, p, key, KEY_SETS({NULL, keys}));
  inert(p, v);
  return ZO_OK;
}

/* ---------- zero_optimization ---------- */

/* The keys both offload blocks take, then each one's own (DeepSpeed's offload_config.py). */
static const char *const offload_shared_keys[] = {"device", "nvme_path", "pin_memory",
                                                  "buffer_count", NULL};
static const char *const offload_optimizer_keys[] = {
    "pipeline_read", "pipeline_write",     "ratio", "fast_init", "pipeline",
    "super_offload", "cpuadam_cores_perc", NULL};
static const char *const offload_param_keys[] = {"buffer_size", "max_in_cpu", NULL};

/* An offload block: where its shared keys go, and the parser of its own keys. */
typedef struct offload_block {
  zo_offload_device *device;
  char *nvme_path;
  size_t nvme_path_cap;
  char *nvme_paths; /* the list form, NUL-separated */
  size_t nvme_paths_cap;
  int *n_nvme_paths;
  int *pin_memory;
  int *pin_given; /* set to 1 when pin_memory is given */
  int *buffer_count;
  key_fn own;
} offload_block;

/* Keys offload_optimizer and offload_param share (device, nvme_path, pin_memory, buffer_count); the rest: b->own. */
static zo_status offload_key(const parse_ctx *c, const char *p, const char *key, const json_t *v,
                             zo_config_t *cfg, const void *arg) {
  const offload_block *b = arg;
  if (!strcmp(key, "device")) return get_device(c, p, v, b->device);
  if (!strcmp(key, "nvme_path"))
    return get_paths(c, p, v, b->nvme_path, b->nvme_path_cap, b->nvme_paths, b->nvme_paths_cap,
                     b->n_nvme_paths);
  if (!strcmp(key, "pin_memory")) {
    ZO_CHECK(get_bool(c, p, v, b->pin_memory));
    *b->pin_given = 1;
    return ZO_OK;
  }
  if (!strcmp(key, "buffer_count")) return get_int(c, p, v, 1, 1 << 20, b->buffer_count);
  return b->own(c, p, key, v, cfg, NULL);
}

static zo_status offload_optimizer_key(const parse_ctx *c, const char *p, const char *key,
                                       const json_t *v, zo_config_t *cfg, const void *arg) {
  (void)arg;
  if (!strcmp(key, "pipeline_read"))
    return get_bool(c, p, v, &cfg->zero.offload_optimizer.pipeline_read);
  if (!strcmp(key, "pipeline_write"))
    return get_bool(c, p, v, &cfg->zero.offload_optimizer.pipeline_write);
  if (!strcmp(key, "ratio")) {
    ZO_CHECK(get_dbl(c, p, v, 0, 1, LO_INCL | HI_INCL, &cfg->zero.offload_optimizer.ratio));
    if (cfg->zero.offload_optimizer.ratio < 1.0)
      inert(p, v); /* partial offload is not built: all state is offloaded */
    return ZO_OK;
  }
  if (!in_list(key, offload_optimizer_keys))
    return cfg_unknown_key(c, p, key,
                           KEY_SETS({NULL, offload_shared_keys}, {NULL, offload_optimizer_keys}));
  inert(p, v); /* fast_init, pipeline, super_offload, cpuadam_cores_perc */
  return ZO_OK;
}

static zo_status offload_param_key(const parse_ctx *c, const char *p, const char *key,
                                   const json_t *v, zo_config_t *cfg, const void *arg) {
  (void)arg;
  if (!strcmp(key, "buffer_size"))
    return get_i64(c, p, v, 1, ZO_CONFIG_MAX_ELEMS, &cfg->zero.offload_param.buffer_size);
  if (!strcmp(key, "max_in_cpu")) {
    ZO_CHECK(get_i64(c, p, v, 0, ZO_CONFIG_MAX_ELEMS, &cfg->zero.offload_param.max_in_cpu));
    cfg->zero.offload_param.max_in_cpu_set =
        1; /* the host cache of nvme parameters acts on it (plan.c) */
    return ZO_OK;
  }
  return cfg_unknown_key(c, p, key,
                         KEY_SETS({NULL, offload_shared_keys}, {NULL, offload_param_keys}));
}

/* The offload_block of @o, cfg->zero.offload_optimizer or .offload_param (two struct types, hence a macro). */
#define OFFLOAD_BLOCK(o, pin_given, own)                                                   \
  {                                                                                        \
    &(o).device, (o).nvme_path, sizeof(o).nvme_path, (o).nvme_paths, sizeof(o).nvme_paths, \
        &(o).n_nvme_paths, &(o).pin_memory, (pin_given), &(o).buffer_count, (own)          \
  }

/* offload_optimizer or offload_param at @base: null means no offload (DeepSpeed: Optional, None). */
static zo_status parse_offload(const parse_ctx *c, const char *base, const json_t *blk,
                               const offload_block *b, zo_config_t *cfg) {
  if (json_is_null(blk)) return ZO_OK;
  return parse_keys(c, base, blk, offload_key, cfg, b);
}

/* zero_optimization keys DeepSpeed knows and zoffload neither parses nor acts on. */
static const char *const zero_inert[] = {"reduce_scatter",
                                         "use_multi_rank_bucket_allreduce",
                                         "allgather_partitions",
                                         "load_from_fp32_weights",
                                         "elastic_checkpoint",
                                         "stage3_model_persistence_threshold",
                                         "model_persistence_threshold",
                                         "stage3_gather_16bit_weights_on_model_save",
                                         "stage3_gather_fp16_weights_on_model_save",
                                         "gather_16bit_weights_on_model_save",
                                         "module_granularity_threshold",
                                         "stage3_module_granularity_threshold",
                                         "use_all_reduce_for_fetch_params",
                                         "stage3_use_all_reduce_for_fetch_params",
                                         "ignore_unused_parameters",
                                         "legacy_stage1",
                                         "round_robin_gradients",
                                         "zero_hpz_partition_size",
                                         "zero_quantized_weights",
                                         "zero_quantized_nontrainable_weights",
                                         "zero_quantized_gradients",
                                         "zeropp_loco_param",
                                         "mics_shard_size",
                                         "mics_hierarchical_params_gather",
                                         "memory_efficient_linear",
                                         "pipeline_loading_checkpoint",
                                         "override_module_apply",
                                         "log_trace_cache_warnings",
                                         "save_muon_momentum_buffer_in_memory",
                                         "allgather_sequential",
                                         "stage3_allgather_sequential",
                                         "enable_sanity_checks",
                                         "grad_hooks",
                                         NULL};
/* zero_optimization keys zoffload reads (parse_zero), for suggestions. */
static const char *const zero_keys[] = {"stage",
                                        "offload_optimizer",
                                        "offload_param",
                                        "overlap_comm",
                                        "contiguous_gradients",
                                        "cpu_offload",
                                        "cpu_offload_param",
                                        "cpu_offload_params",
                                        "cpu_offload_use_pin_memory",
                                        "sub_group_size",
                                        "stage3_prefetch_bucket_size",
                                        "stage3_max_live_parameters",
                                        "stage3_max_reuse_distance",
                                        "stage3_param_persistence_threshold",
                                        "reduce_bucket_size",
                                        "allgather_bucket_size",
                                        "prefetch_bucket_size",
                                        "max_live_parameters",
                                        "max_reuse_distance",
                                        "param_persistence_threshold",
                                        "leaf_module",
                                        "zenflow",
                                        NULL};

/* zero_optimization.leaf_module (DeepSpeed's ZeRO-3 leaf modules): null, or an object whose classes, names and
 * name_suffixes are each a string or an array of strings. Checked here; the Python front flags the modules
 * (zoffload.utils.apply_leaf_module_config); zo-train's GPT has no module tree. */
static zo_status leaf_module_block(const parse_ctx *c, const char *p, const json_t *v) {
  static const char *const keys[] = {"classes", "names", "name_suffixes", NULL};
  if (json_is_null(v)) return ZO_OK;
  if (!json_is_object(v)) return type_err(c, p, "an object (classes, names, name_suffixes)", v);
  const char *key;
  const json_t *x;
  char q[PATH_CAP], r[PATH_CAP + 24];
  json_object_foreach((json_t *)v, key, x) {
    pj(q, p, key);
    if (!in_list(key, keys)) return cfg_unknown_key(c, q, key, KEY_SETS({NULL, keys}));
    if (json_is_string(x)) continue;
    if (!json_is_array(x)) return type_err(c, q, "a string or an array of strings", x);
    for (size_t i = 0; i < json_array_size(x); i++) {
      if (json_is_string(json_array_get(x, i))) continue;
      snprintf(r, sizeof r, "%s[%zu]", q, i);
      return type_err(c, r, "a string", json_array_get(x, i));
    }
  }
  return ZO_OK;
}

/* What zero_optimization's keys said that its legacy forms and stage-dependent defaults depend on. */
typedef struct zero_seen {
  int overlap_given, oo_given,
      op_given;       /* overlap_comm, offload_optimizer, offload_param given (not null) */
  int oo_pin, op_pin; /* pin_memory given in offload_optimizer, offload_param */
  int legacy_cpu, legacy_param,
      legacy_pin; /* cpu_offload, cpu_offload_param(s), cpu_offload_use_pin_memory; -1 absent */
  const char *legacy_param_key; /* which spelling of cpu_offload_param was given */
} zero_seen;

/* One key of zero_optimization (at @p); what the legacy forms need is noted in @seen. */
static zo_status zero_key(const parse_ctx *c, const char *p, const char *key, const json_t *v,
                          zo_config_t *cfg, zero_seen *seen) {
  struct {
    const char *name;
    int64_t *dst;
  } sizes[] = {
      {"sub_group_size", &cfg->zero.sub_group_size},
      {"stage3_prefetch_bucket_size", &cfg->zero.stage3_prefetch_bucket_size},
      {"stage3_max_live_parameters", &cfg->zero.stage3_max_live_parameters},
      {"stage3_max_reuse_distance", &cfg->zero.stage3_max_reuse_distance},
      {"stage3_param_persistence_threshold", &cfg->zero.stage3_param_persistence_threshold},
      {"reduce_bucket_size", &cfg->zero.reduce_bucket_size},
      {"allgather_bucket_size", &cfg->zero.allgather_bucket_size},
      /* DeepSpeed's field names, of which the stage3_ spellings are aliases (zero_alias_pairs) */
      {"prefetch_bucket_size", &cfg->zero.stage3_prefetch_bucket_size},
      {"max_live_parameters", &cfg->zero.stage3_max_live_parameters},
      {"max_reuse_distance", &cfg->zero.stage3_max_reuse_distance},
      {"param_persistence_threshold", &cfg->zero.stage3_param_persistence_threshold},
  };
  size_t si = 0;
  for (; si < sizeof sizes / sizeof sizes[0]; si++)
    if (!strcmp(key, sizes[si].name)) break;
  if (si < sizeof sizes / sizeof sizes[0]) {
    /* sub_group_size, the stage3_* budgets and, on several ranks, reduce_bucket_size (the reduction ring with
     * overlap_comm) and allgather_bucket_size (the waves of the weight all-gather, stages 1-2) are all acted on */
    ZO_CHECK(get_i64(c, p, v, si == 0 ? 1 : 0, ZO_CONFIG_MAX_ELEMS, sizes[si].dst));
  } else if (!strcmp(key, "stage")) {
    ZO_CHECK(get_int(c, p, v, 0, 3, &cfg->zero.stage));
  } else if (!strcmp(key, "offload_optimizer")) {
    const offload_block b =
        OFFLOAD_BLOCK(cfg->zero.offload_optimizer, &seen->oo_pin, offload_optimizer_key);
    ZO_CHECK(parse_offload(c, p, v, &b, cfg));
    seen->oo_given = !json_is_null(v);
  } else if (!strcmp(key, "offload_param")) {
    const offload_block b =
        OFFLOAD_BLOCK(cfg->zero.offload_param, &seen->op_pin, offload_param_key);
    ZO_CHECK(parse_offload(c, p, v, &b, cfg));
    seen->op_given = !json_is_null(v);
  } else if (!strcmp(key, "overlap_comm")) {
    ZO_CHECK(get_bool(c, p, v, &cfg->zero.overlap_comm));
    seen->overlap_given = 1;
  } else if (!strcmp(key, "contiguous_gradients")) {
    ZO_CHECK(get_bool(c, p, v, &cfg->zero.contiguous_gradients));
    inert(p, v);
  } else if (!strcmp(key, "cpu_offload")) {
    ZO_CHECK(get_bool(c, p, v, &seen->legacy_cpu));
  } else if (!strcmp(key, "cpu_offload_param") || !strcmp(key, "cpu_offload_params")) {
    if (seen->legacy_param >= 0)
      return cfg_err(c, p, "given together with zero_optimization.%s", seen->legacy_param_key);
    ZO_CHECK(get_bool(c, p, v, &seen->legacy_param));
    seen->legacy_param_key = key;
  } else if (!strcmp(key, "cpu_offload_use_pin_memory")) {
    ZO_CHECK(get_bool(c, p, v, &seen->legacy_pin));
  } else if (!strcmp(key, "leaf_module")) {
    ZO_CHECK(leaf_module_block(c, p, v));
  } else if (!strcmp(key, "zenflow")) {
    /* DeepSpeed's ZenFlow updates the top-k gradient columns each step and the rest every
     * update_interval steps; running exact Adam instead would train a different model silently. */
    if (!json_is_null(v))
      return cfg_err(c, p,
                     "ZenFlow (top-k stall-free updates) is not built in zoffload, which applies "
                     "exact Adam to every element every step; remove the key (or set it to null): "
                     "zoffload's CPU Adam already starts on each sub-group as its gradients land, "
                     "overlapping backward");
  } else if (in_list(key, zero_inert)) {
    inert(p, v);
  } else {
    return cfg_unknown_key(c, p, key, KEY_SETS({NULL, zero_keys}, {NULL, zero_inert}));
  }
  return ZO_OK;
}

/* Legacy forms, as DeepSpeed maps them: cpu_offload -> offload_optimizer {device: cpu},
   cpu_offload_param -> offload_param {device: cpu}; a deprecated key and its
   replacement together are an error (DeepSpeed's deprecated-field check). */
static zo_status zero_legacy(const parse_ctx *c, const zero_seen *seen, zo_config_t *cfg) {
  char p[PATH_CAP];
  if (seen->legacy_cpu >= 0) {
    if (seen->oo_given)
      return cfg_err(c, "zero_optimization.cpu_offload",
                     "deprecated form cannot be combined with zero_optimization.offload_optimizer");
    if (seen->legacy_cpu) cfg->zero.offload_optimizer.device = ZO_OFFLOAD_CPU;
  }
  if (seen->legacy_param >= 0) {
    if (seen->op_given)
      return cfg_err(c, pj(p, "zero_optimization", seen->legacy_param_key),
                     "deprecated form cannot be combined with zero_optimization.offload_param");
    if (seen->legacy_param) cfg->zero.offload_param.device = ZO_OFFLOAD_CPU;
  }
  /* cpu_offload_use_pin_memory: pin_memory of whichever offload is on, unless given explicitly. */
  if (seen->legacy_pin >= 0) {
    if (!seen->oo_pin && cfg->zero.offload_optimizer.device != ZO_OFFLOAD_NONE)
      cfg->zero.offload_optimizer.pin_memory = seen->legacy_pin;
    if (!seen->op_pin && cfg->zero.offload_param.device != ZO_OFFLOAD_NONE)
      cfg->zero.offload_param.pin_memory = seen->legacy_pin;
  }
  return ZO_OK;
}

static zo_status parse_zero(const parse_ctx *c, const json_t *blk, zo_config_t *cfg) {
  static const char *Z = "zero_optimization";
  if (json_is_boolean(blk)) { /* legacy: true = stage 1, false = stage 0 */
    cfg->zero.stage = json_is_true(blk) ? 1 : 0;
    return ZO_OK;
  }
  if (!json_is_object(blk)) return type_err(c, Z, "an object (or legacy true/false)", blk);

  zero_seen seen = {.legacy_cpu = -1,
                    .legacy_param = -1,
                    .legacy_pin = -1,
                    .legacy_param_key = "cpu_offload_param"};
  const char *key;
  json_t *v;
  char p[PATH_CAP];
  /* DeepSpeed's field names and their stage3_ aliases set one value: one spelling at a time */
  static const char *const zero_alias_pairs[][2] = {
      {"prefetch_bucket_size", "stage3_prefetch_bucket_size"},
      {"max_live_parameters", "stage3_max_live_parameters"},
      {"max_reuse_distance", "stage3_max_reuse_distance"},
      {"param_persistence_threshold", "stage3_param_persistence_threshold"}};
  for (size_t i = 0; i < sizeof zero_alias_pairs / sizeof zero_alias_pairs[0]; i++)
    if (json_object_get(blk, zero_alias_pairs[i][0]) &&
        json_object_get(blk, zero_alias_pairs[i][1]))
      return cfg_err(c, pj(p, Z, zero_alias_pairs[i][0]),
                     "given together with %s.%s (the same setting)", Z, zero_alias_pairs[i][1]);
  json_object_foreach((json_t *)blk, key, v) {
    ZO_CHECK(zero_key(c, pj(p, Z, key), key, v, cfg, &seen));
  }
  ZO_CHECK(zero_legacy(c, &seen, cfg));
  if (cfg->zero.offload_optimizer.device == ZO_OFFLOAD_NVME &&
      !cfg->zero.offload_optimizer.nvme_path[0])
    return cfg_err(c, "zero_optimization.offload_optimizer.nvme_path",
                   "required when device is \"nvme\"");
  if (cfg->zero.offload_param.device == ZO_OFFLOAD_NVME && !cfg->zero.offload_param.nvme_path[0])
    return cfg_err(c, "zero_optimization.offload_param.nvme_path",
                   "required when device is \"nvme\"");
  ZO_CHECK(check_nvme_lists(c, cfg));
  if (!seen.overlap_given)
    cfg->zero.overlap_comm = cfg->zero.stage == 3; /* DeepSpeed's stage-dependent default */
  return ZO_OK;
}

/* ---------- aio ---------- */

static zo_status aio_key(const parse_ctx *c, const char *p, const char *key, const json_t *v,
                         zo_config_t *cfg, const void *arg) {
  (void)arg;
  if (!strcmp(key, "block_size")) {
    ZO_CHECK(get_i64(c, p, v, 1, ZO_CONFIG_MAX_BLOCK_SIZE,
                     &cfg->aio.block_size)); /* zo_swap's largest piece */
    if (cfg->aio.block_size % 4096)
      return cfg_err(
          c, p, "expected a positive multiple of 4096 bytes (O_DIRECT alignment), got %" PRId64,
          cfg->aio.block_size);
  } else if (!strcmp(key, "queue_depth")) {
    ZO_CHECK(get_i64(c, p, v, 1, 32768, &cfg->aio.queue_depth));
  } else if (!strcmp(key, "intra_op_parallelism") || !strcmp(key, "thread_count")) {
    ZO_CHECK(get_int(c, p, v, 1, 1 << 16, &cfg->aio.intra_op_parallelism));
    inert(p, v);
  } else if (!strcmp(key, "single_submit")) {
    ZO_CHECK(get_bool(c, p, v, &cfg->aio.single_submit));
    inert(p, v);
  } else if (!strcmp(key, "overlap_events")) {
    ZO_CHECK(get_bool(c, p, v, &cfg->aio.overlap_events));
    inert(p, v);
  } else if (!strcmp(key, "use_gds")) {
    ZO_CHECK(get_bool(c, p, v, &cfg->aio.use_gds));
    if (cfg->aio.use_gds) zo_warn("config: %s is not supported (GPUDirect Storage); ignored", p);
  } else {
    static const char *const keys[] = {"block_size",
                                       "queue_depth",
                                       "intra_op_parallelism",
                                       "thread_count",
                                       "single_submit",
                                       "overlap_events",
                                       "use_gds",
                                       NULL};
    return cfg_unknown_key(c, p, key, KEY_SETS({NULL, keys}));
  }
  return ZO_OK;
}

/* ---------- zoffload (our own block) ---------- */

/* zoffload.speeds: GB/s or 1e9 elements/s, each 0 (not given) or in [ZO_CONFIG_SPEED_MIN, ZO_CONFIG_SPEED_MAX]. */
static zo_status speeds_key(const parse_ctx *c, const char *p, const char *key, const json_t *v,
                            zo_config_t *cfg, const void *arg) {
  (void)arg;
  static const char *const keys[] = {"nvme_read_gbps", "nvme_write_gbps",    "h2d_gbps",
                                     "d2h_gbps",       "adam_gparams_per_s", NULL};
  double *const dst[] = {&cfg->zoffload.speeds.nvme_read_gbps,
                         &cfg->zoffload.speeds.nvme_write_gbps, &cfg->zoffload.speeds.h2d_gbps,
                         &cfg->zoffload.speeds.d2h_gbps, &cfg->zoffload.speeds.adam_gparams_per_s};
  for (int i = 0; keys[i]; i++) {
    if (strcmp(key, keys[i])) continue;
    double g;
    ZO_CHECK(get_dbl(c, p, v, 0, ZO_CONFIG_SPEED_MAX, LO_INCL | HI_INCL, &g));
    if (g != 0 && g < ZO_CONFIG_SPEED_MIN)
      return cfg_err(c, p, "expected 0 (not given: measured) or a number in [%g, %g], got %g",
                     ZO_CONFIG_SPEED_MIN, ZO_CONFIG_SPEED_MAX, g);
    *dst[i] = g;
    return ZO_OK;
  }
  return cfg_unknown_key(c, p, key, KEY_SETS({NULL, keys}));
}

static zo_status zoffload_key(const parse_ctx *c, const char *p, const char *key, const json_t *v,
                              zo_config_t *cfg, const void *arg) {
  (void)arg;
  if (!strcmp(key, "device")) return get_device_kind(c, p, v, &cfg->zoffload.device_kind);
  if (!strcmp(key, "device_memory_limit"))
    return get_bytes(c, p, v, &cfg->zoffload.device_memory_limit);
  if (!strcmp(key, "comm")) return get_comm(c, p, v, &cfg->zoffload.comm);
  if (!strcmp(key, "comm_timeout_s"))
    return get_dbl(c, p, v, 0, ZO_CONFIG_COMM_TIMEOUT_S_MAX, LO_EXCL | HI_INCL,
                   &cfg->zoffload.comm_timeout_s);
  if (!strcmp(key, "device_arena_bytes")) {
    if (json_is_string(v) && !strcmp(json_string_value(v), "fit")) {
      cfg->zoffload.device_arena_bytes = ZO_ARENA_FIT;
      return ZO_OK;
    }
    return get_bytes(c, p, v, &cfg->zoffload.device_arena_bytes);
  }
  if (!strcmp(key, "adam_threads")) return get_int(c, p, v, 0, 4096, &cfg->zoffload.adam_threads);
  if (!strcmp(key, "optimizer_state_dtype"))
    return get_state_dtype(c, p, v, &cfg->zoffload.optimizer_state_dtype);
  if (!strcmp(key, "swap_checksum")) return get_bool(c, p, v, &cfg->zoffload.swap_checksum);
  if (!strcmp(key, "swap_sqpoll")) return get_bool(c, p, v, &cfg->zoffload.swap_sqpoll);
  if (!strcmp(key, "delayed_param_update"))
    return get_bool(c, p, v, &cfg->zoffload.delayed_param_update);
  if (!strcmp(key, "delayed_param_update_warmup_steps"))
    return get_i64(c, p, v, 0, INT64_MAX, &cfg->zoffload.delayed_param_update_warmup_steps);
  if (!strcmp(key, "host_link_gbps")) {
    /* 0 is no emulation; a link slower than the minimum turns each step's transfers into hours (a hang) */
    double g;
    ZO_CHECK(get_dbl(c, p, v, 0, ZO_CONFIG_LINK_GBPS_MAX, LO_INCL | HI_INCL, &g));
    if (g != 0 && g < ZO_CONFIG_LINK_GBPS_MIN)
      return cfg_err(c, p, "expected 0 (no emulated link) or a number in [%g, %g] GB/s, got %g",
                     ZO_CONFIG_LINK_GBPS_MIN, ZO_CONFIG_LINK_GBPS_MAX, g);
    cfg->zoffload.host_link_gbps = g;
    return ZO_OK;
  }
  if (!strcmp(key, "pinned_fraction"))
    return get_dbl(c, p, v, 0, 1, LO_EXCL | HI_INCL, &cfg->zoffload.pinned_fraction);
  if (!strcmp(key, "allow_pageable_host"))
    return get_bool(c, p, v, &cfg->zoffload.allow_pageable_host);
  if (!strcmp(key, "speeds")) return parse_keys(c, p, v, speeds_key, cfg, NULL);
  if (!strcmp(key, "placement")) {
    const char *s = json_is_string(v) ? json_string_value(v) : NULL;
    if (s && !strcmp(s, "config"))
      cfg->zoffload.placement = ZO_PLACEMENT_CONFIG;
    else if (s && !strcmp(s, "auto"))
      cfg->zoffload.placement = ZO_PLACEMENT_AUTO;
    else
      return type_err(c, p, "\"config\" or \"auto\"", v);
    return ZO_OK;
  }
  if (!strcmp(key, "placement_host_bytes"))
    return get_bytes(c, p, v, &cfg->zoffload.placement_host_bytes);
  if (!strcmp(key, "optimizer_max_in_cpu"))
    return get_i64(c, p, v, 0, ZO_CONFIG_MAX_ELEMS, &cfg->zoffload.optimizer_max_in_cpu);
  if (!strcmp(key, "early_adam")) return get_bool(c, p, v, &cfg->zoffload.early_adam);
  static const char *const keys[] = {"device",
                                     "device_memory_limit",
                                     "comm",
                                     "device_arena_bytes",
                                     "adam_threads",
                                     "optimizer_state_dtype",
                                     "swap_checksum",
                                     "swap_sqpoll",
                                     "delayed_param_update",
                                     "delayed_param_update_warmup_steps",
                                     "host_link_gbps",
                                     "pinned_fraction",
                                     "allow_pageable_host",
                                     "placement",
                                     "optimizer_max_in_cpu",
                                     "placement_host_bytes",
                                     "speeds",
                                     "early_adam",
                                     NULL};
  return cfg_unknown_key(c, p, key, KEY_SETS({NULL, keys}));
}

/* ---------- top level ---------- */

/* Top-level keys DeepSpeed knows that zoffload does not act on. */
static const char *const top_inert[] = {"wall_clock_breakdown",
                                        "memory_breakdown",
                                        "prescale_gradients",
                                        "gradient_predivide_factor",
                                        "sparse_gradients",
                                        "zero_allow_untested_optimizer",
                                        "zero_force_ds_cpu_optimizer",
                                        "communication_data_type",
                                        "seq_parallel_communication_data_type",
                                        "disable_allgather",
                                        "dump_state",
                                        "amp",
                                        "activation_checkpointing",
                                        "flops_profiler",
                                        "tensorboard",
                                        "wandb",
                                        "csv_monitor",
                                        "comet",
                                        "checkpoint",
                                        "elasticity",
                                        "pipeline",
                                        "compression_training",
                                        "data_efficiency",
                                        "curriculum_learning",
                                        "autotuning",
                                        "nebula",
                                        "sparse_attention",
                                        "eigenvalue",
                                        "progressive_layer_drop",
                                        "quantize_training",
                                        "weight_quantization",
                                        "hybrid_engine",
                                        "compile",
                                        "timers",
                                        "graph_harvesting",
                                        "use_data_before_expert_parallelism",
                                        "torch_autocast",
                                        "dataloader_drop_last",
                                        "load_universal_checkpoint",
                                        "use_node_local_storage",
                                        "fp8",
                                        "gradient_accumulation_dtype",
                                        "steps_per_log",
                                        "comms_logger",
                                        "managed_gradient_accumulation",
                                        "gradient_allreduce_op",
                                        "tensor_parallel",
                                        "expert_parallel",
                                        "log_level",
                                        "vocabulary_size",
                                        "datastates_ckpt",
                                        NULL};
/* Top-level keys zoffload reads (zo_config_parse), for suggestions. */
static const char *const top_keys[] = {"train_batch_size",
                                       "train_micro_batch_size_per_gpu",
                                       "gradient_accumulation_steps",
                                       "gradient_clipping",
                                       "steps_per_print",
                                       "optimizer",
                                       "scheduler",
                                       "fp16",
                                       "data_types",
                                       "bf16",
                                       "bfloat16",
                                       "zero_optimization",
                                       "aio",
                                       "zoffload",
                                       NULL};

/*
 * Decoupled weight decay (AdamW: adam_w_mode) multiplies each weight by 1 - lr * weight_decay every step: past 1
 * the weights flip sign each step, past 2 they grow without bound (to inf, then NaN). Refused at the peak lr the
 * schedule reaches. (L2 mode adds weight_decay * w to the gradient, which Adam normalises: no such limit.)
 */
static zo_status check_decay(const parse_ctx *c, const zo_config_t *cfg) {
  if (!cfg->optimizer.adam_w_mode || cfg->optimizer.weight_decay == 0) return ZO_OK;
  double lr = cfg->optimizer.lr;
  const char *lr_key = "optimizer.params.lr";
  if (cfg->scheduler.type == ZO_SCHED_WARMUP_LR ||
      cfg->scheduler.type == ZO_SCHED_WARMUP_DECAY_LR) {
    lr = fmax(cfg->scheduler.warmup_min_lr, cfg->scheduler.warmup_max_lr);
    lr_key = cfg->scheduler.warmup_max_lr >= cfg->scheduler.warmup_min_lr
                 ? "scheduler.params.warmup_max_lr"
                 : "scheduler.params.warmup_min_lr";
  }
  if (lr * cfg->optimizer.weight_decay <= 1.0) return ZO_OK;
  return cfg_err(
      c, "optimizer.params.weight_decay",
      "%g times the peak learning rate %g (%s) is %g > 1: decoupled weight decay (adam_w_mode) would "
      "multiply the weights by %g each step; expected weight_decay <= %g",
      cfg->optimizer.weight_decay, lr, lr_key, lr * cfg->optimizer.weight_decay,
      1.0 - lr * cfg->optimizer.weight_decay, 1.0 / lr);
}

/* a * b * c into *out; 0 when that overflows int64_t */
static int mul3_i64(int64_t a, int64_t b, int64_t c, int64_t *out) {
  int64_t ab;
  return !__builtin_mul_overflow(a, b, &ab) && !__builtin_mul_overflow(ab, c, out);
}

/* DeepSpeed's _set_batch_related_parameters + _batch_assertion; every product overflow-checked. */
static zo_status resolve_batch(const parse_ctx *c, int64_t tb, int64_t mb, int64_t gas, int ws,
                               zo_config_t *cfg) {
  int has_tb = tb > 0, has_mb = mb > 0, has_gas = gas > 0;
  const char *derived = "";
  if (has_tb && has_mb && has_gas) {
  } else if (has_tb && has_mb) {
    gas = tb / mb / ws;
    derived = " (gradient_accumulation_steps derived)";
  } else if (has_tb && has_gas) {
    mb = tb / ws / gas;
    derived = " (train_micro_batch_size_per_gpu derived)";
  } else if (has_mb && has_gas) {
    tb = -1; /* derived below */
  } else if (has_tb) {
    gas = 1;
    mb = tb / ws;
    derived = " (train_micro_batch_size_per_gpu derived, gradient_accumulation_steps = 1)";
  } else if (has_mb) {
    gas = 1;
    tb = -1;
  } else {
    return cfg_err(
        c, "train_batch_size",
        "missing: either train_batch_size or train_micro_batch_size_per_gpu must be given");
  }
  int64_t prod = 0;
  if (mb >= 1 && gas >= 1 && !mul3_i64(mb, gas, ws, &prod))
    return cfg_err(c, has_mb ? "train_micro_batch_size_per_gpu" : "train_batch_size",
                   "train_micro_batch_size_per_gpu %" PRId64
                   " * gradient_accumulation_steps %" PRId64
                   " * world_size %d does not fit in 64 bits (at most %" PRId64 ")%s",
                   mb, gas, ws, INT64_MAX, derived);
  if (tb == -1) tb = prod;
  if (mb < 1 || gas < 1 || tb != prod)
    return cfg_err(c, "train_batch_size",
                   "train_batch_size %" PRId64 " != train_micro_batch_size_per_gpu %" PRId64
                   " * gradient_accumulation_steps %" PRId64 " * world_size %d%s",
                   tb, mb, gas, ws, derived);
  cfg->train_batch_size = tb;
  cfg->train_micro_batch_size_per_gpu = mb;
  cfg->gradient_accumulation_steps = gas;
  return ZO_OK;
}

void zo_config_defaults(zo_config_t *cfg) {
  if (!cfg) return;
  memset(cfg, 0, sizeof *cfg);
  cfg->train_batch_size = cfg->train_micro_batch_size_per_gpu = cfg->gradient_accumulation_steps =
      1;
  cfg->gradient_clipping = 0.0;
  cfg->steps_per_print = 10;
  cfg->optimizer.type = ZO_OPT_ADAM;
  cfg->optimizer.adam_w_mode = 1;
  cfg->optimizer.lr = 1e-3;
  cfg->optimizer.beta1 = 0.9;
  cfg->optimizer.beta2 = 0.999;
  cfg->optimizer.eps = 1e-8;
  cfg->optimizer.weight_decay = 0.0;
  cfg->optimizer.bias_correction = 1;
  cfg->scheduler.type = ZO_SCHED_NONE;
  cfg->scheduler.warmup_min_lr = 0.0;
  cfg->scheduler.warmup_max_lr = 1e-3;
  cfg->scheduler.warmup_num_steps = 1000;
  cfg->scheduler.warmup_type_log = 1;
  cfg->scheduler.total_num_steps = 0;
  cfg->scheduler.cos_min_ratio = 1e-4;
  cfg->scheduler.warmup_min_ratio = 0.0;
  cfg->fp16.enabled = 0;
  cfg->fp16.loss_scale = 0.0;
  cfg->fp16.initial_scale_power = 16;
  cfg->fp16.loss_scale_window = 1000;
  cfg->fp16.hysteresis = 2;
  cfg->fp16.min_loss_scale = 1.0;
  cfg->bf16.enabled = 0;
  cfg->zero.stage = 0;
  cfg->zero.offload_optimizer.device = ZO_OFFLOAD_NONE;
  cfg->zero.offload_optimizer.buffer_count = 4;
  /* DeepSpeed defaults these to false; the pipeline needs no memory beyond
   * buffer_count, so it is on unless the config turns it off explicitly. */
  cfg->zero.offload_optimizer.pipeline_read = 1;
  cfg->zero.offload_optimizer.pipeline_write = 1;
  cfg->zero.offload_optimizer.ratio = 1.0;
  cfg->zero.offload_param.device = ZO_OFFLOAD_NONE;
  cfg->zero.offload_param.buffer_count = 5;
  cfg->zero.offload_param.buffer_size = 100000000;
  cfg->zero.offload_param.max_in_cpu = 1000000000;
  cfg->zero.sub_group_size = 1000000000;
  cfg->zero.stage3_prefetch_bucket_size = 50000000;
  cfg->zero.stage3_max_live_parameters = 1000000000;
  cfg->zero.stage3_max_reuse_distance = 1000000000;
  cfg->zero.stage3_param_persistence_threshold = 100000;
  cfg->zero.overlap_comm = 0;
  cfg->zero.reduce_bucket_size = 500000000;
  cfg->zero.allgather_bucket_size = 500000000;
  cfg->zero.contiguous_gradients = 1;
  cfg->aio.block_size = 1048576;
  cfg->aio.queue_depth = 8;
  cfg->aio.intra_op_parallelism = 1;
  cfg->aio.single_submit = 0;
  cfg->aio.overlap_events = 1;
  cfg->aio.use_gds = 0;
  cfg->zoffload.device_kind = ZO_DEVICE_AUTO;
  cfg->zoffload.device_memory_limit = 0;
  cfg->zoffload.adam_threads = 0;
  cfg->zoffload.optimizer_state_dtype = ZO_DTYPE_F32;
  cfg->grad_accum_dtype = -1;
  cfg->zoffload.swap_checksum = 0;
  cfg->zoffload.swap_sqpoll = 0;
  cfg->zoffload.delayed_param_update = 0;
  cfg->zoffload.delayed_param_update_warmup_steps = 0;
  cfg->zoffload.host_link_gbps = 0;
  cfg->zoffload.pinned_fraction = ZO_CONFIG_PINNED_FRACTION;
  cfg->zoffload.placement = ZO_PLACEMENT_CONFIG;
  cfg->zoffload.optimizer_max_in_cpu = 0;
  cfg->zoffload.early_adam = 1;
  cfg->zoffload.device_arena_bytes = 0;
  cfg->zoffload.comm = ZO_COMM_AUTO;
  cfg->zoffload.comm_timeout_s = ZO_CONFIG_COMM_TIMEOUT_S;
}

/* Reads @json_text (@len bytes) into *@root with Infinity/NaN quoted first (config_nonfinite.c); ZO_ERR_CONFIG
 * naming line and column when it is not JSON, or when its top level is not an object. */
static zo_status load_json(const parse_ctx *c, const char *json_text, size_t len, json_t **root) {
  json_error_t jerr;
  char *quoted = NULL; /* json_text with Infinity/NaN quoted, when it has any */
  size_t quoted_len = 0;
  ZO_CHECK(cfg_nonfinite_to_strings(json_text, len, &quoted, &quoted_len));
  *root = quoted ? json_loadb(quoted, quoted_len, JSON_REJECT_DUPLICATES, &jerr)
                 : json_loadb(json_text, len, JSON_REJECT_DUPLICATES, &jerr);
  free(quoted);
  char ebuf[256];
  if (!*root)
    return zo_error_set(ZO_ERR_CONFIG, "%s:%d:%d: malformed JSON: %s", c->src, jerr.line,
                        jerr.column,
                        zo_escape(ebuf, sizeof ebuf, jerr.text,
                                  strlen(jerr.text))); /* jansson quotes the bytes near it */
  if (!json_is_object(*root)) {
    char got[64];
    return zo_error_set(ZO_ERR_CONFIG, "%s: expected a JSON object at the top level, got %s",
                        c->src, show(*root, got, sizeof got));
  }
  return ZO_OK;
}

/* The batch sizes as given (0: absent), for resolve_batch(). */
typedef struct batch_given {
  int64_t tb, mb,
      gas; /* train_batch_size, train_micro_batch_size_per_gpu, gradient_accumulation_steps */
} batch_given;

/* One top-level key: a value, a block zoffload reads, an application's block, a DeepSpeed key it does not act on,
 * a typo of a known key (an error) or an unknown key (a warning). */
static zo_status top_key(const parse_ctx *c, const char *key, const json_t *v,
                         const zo_config_opts *opts, batch_given *bg, zo_config_t *cfg) {
  if (!strcmp(key, "train_batch_size")) return get_i64(c, key, v, 1, INT64_MAX, &bg->tb);
  if (!strcmp(key, "train_micro_batch_size_per_gpu"))
    return get_i64(c, key, v, 1, INT64_MAX, &bg->mb);
  if (!strcmp(key, "gradient_accumulation_steps"))
    return get_i64(c, key, v, 1, INT64_MAX, &bg->gas);
  if (!strcmp(key, "gradient_clipping"))
    return get_dbl(c, key, v, 0, 0, LO_INCL, &cfg->gradient_clipping);
  if (!strcmp(key, "steps_per_print") && cfg_is_nonfinite(v, "Infinity")) {
    cfg->steps_per_print =
        INT64_MAX; /* HF accelerate's float("inf"): never print (the largest count does that) */
    return ZO_OK;
  }
  if (!strcmp(key, "steps_per_print"))
    return get_i64(c, key, v, 1, INT64_MAX, &cfg->steps_per_print);
  if (!strcmp(key, "optimizer")) return parse_optimizer(c, v, cfg);
  if (!strcmp(key, "scheduler")) return parse_scheduler(c, v, cfg);
  if (!strcmp(key, "fp16")) return parse_keys(c, key, v, fp16_key, cfg, NULL);
  if (!strcmp(key, "data_types")) return parse_keys(c, key, v, data_types_key, cfg, NULL);
  if (!strcmp(key, "bf16") || !strcmp(key, "bfloat16"))
    return parse_keys(c, key, v, bf16_key, cfg, NULL);
  if (!strcmp(key, "zero_optimization")) return parse_zero(c, v, cfg);
  if (!strcmp(key, "aio")) return parse_keys(c, key, v, aio_key, cfg, NULL);
  if (!strcmp(key, "zoffload")) return parse_keys(c, key, v, zoffload_key, cfg, NULL);
  if (opts && in_list(key, opts->app_blocks)) return ZO_OK;
  if (in_list(key, top_inert)) {
    inert(key, v);
    return ZO_OK;
  }
  /* a name close to a known block is a typo (an error); anything else is the application's (a warning) */
  char hint[PATH_CAP + 32];
  const key_set sets[] = {{NULL, top_keys},
                          {NULL, top_inert},
                          {NULL, opts ? opts->app_blocks : NULL}};
  if (cfg_did_you_mean(hint, sizeof hint, key, key, sets, sizeof sets / sizeof sets[0])[0])
    return cfg_err(c, key, "not a DeepSpeed or zoffload key%s", hint);
  cfg_warn_unknown(c, key);
  return ZO_OK;
}

/* The checks across blocks, once every key is read; then the batch sizes. */
static zo_status check_whole(const parse_ctx *c, const json_t *root, const batch_given *bg, int ws,
                             zo_config_t *cfg) {
  if (json_object_get(root, "bf16") && json_object_get(root, "bfloat16"))
    return cfg_err(c, "bfloat16", "given together with \"bf16\" (bfloat16 is its legacy name)");
  if (cfg->fp16.enabled && cfg->bf16.enabled)
    return cfg_err(c, "bf16.enabled", "fp16.enabled and bf16.enabled cannot both be true");
  ZO_CHECK(check_decay(c, cfg));
  return resolve_batch(c, bg->tb, bg->mb, bg->gas, ws, cfg);
}

zo_status zo_config_parse(const char *json_text, size_t len, const char *source,
                          const zo_config_opts *opts, zo_config_t *cfg) {
  if (!json_text || !cfg)
    return zo_error_set(ZO_ERR_INVALID_ARG, "zo_config_parse: json_text and cfg must not be NULL");
  zo_config_defaults(cfg);
  int ws = opts ? opts->world_size : 0;
  if (ws < 0) return zo_error_set(ZO_ERR_INVALID_ARG, "zo_config_parse: world_size %d < 0", ws);
  if (ws == 0) ws = 1;
  int64_t n_unknown = 0;
  parse_ctx ctx = {source ? source : "config", &n_unknown};
  const parse_ctx *c = &ctx;

  json_t *root = NULL;
  zo_status st = load_json(c, json_text, len, &root);
  if (st != ZO_OK) goto out;
  /* "auto" (HF Trainer style) at the keys HF fills in: from the application's values (config_auto.c) */
  ZO_CHECK_GOTO(cfg_fill_auto(root, opts ? opts->auto_values : NULL, ws, c->src), st, out);
  batch_given bg = {0, 0, 0};
  const char *key;
  json_t *v;
  json_object_foreach(root, key, v) { ZO_CHECK_GOTO(top_key(c, key, v, opts, &bg, cfg), st, out); }
  st = check_whole(c, root, &bg, ws, cfg);
out:
  cfg_warn_unknown_total(c);
  json_decref(root);
  return st;
}

zo_status zo_config_load_file(const char *path, const zo_config_opts *opts, zo_config_t *cfg) {
  if (!path || !cfg)
    return zo_error_set(ZO_ERR_INVALID_ARG, "zo_config_load_file: path and cfg must not be NULL");
  zo_config_defaults(cfg);
  FILE *f = fopen(path, "rb");
  if (!f) return zo_error_set(ZO_ERR_CONFIG, "cannot read config '%s': %s", path, strerror(errno));
  char *buf = NULL;
  size_t len = 0, cap = 0;
  for (;;) {
    if (len == cap) {
      size_t ncap = cap ? cap * 2 : 65536;
      char *nb = realloc(buf, ncap);
      if (!nb) {
        free(buf);
        fclose(f);
        return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "cannot read config '%s': out of host memory",
                            path);
      }
      buf = nb;
      cap = ncap;
    }
    size_t n = fread(buf + len, 1, cap - len, f);
    len += n;
    if (n == 0) break;
  }
  int rd_err = ferror(f) ? errno : 0;
  fclose(f);
  if (rd_err) {
    free(buf);
    return zo_error_set(ZO_ERR_CONFIG, "cannot read config '%s': %s", path,
                        strerror(rd_err ? rd_err : EIO));
  }
  zo_status st = zo_config_parse(buf, len, path, opts, cfg);
  free(buf);
  return st;
}

/* ---------- learning rate ---------- */

double zo_config_lr_at_iteration(const zo_config_t *cfg, int64_t it) {
  const double lr = cfg->optimizer.lr;
  const int64_t w =
      cfg->scheduler.warmup_num_steps < 2 ? 2 : cfg->scheduler.warmup_num_steps; /* max(2, .) */
  const int64_t total = cfg->scheduler.total_num_steps;
  const double min_lr = cfg->scheduler.warmup_min_lr, delta = cfg->scheduler.warmup_max_lr - min_lr;
  double warm = 0.0; /* the warmup fraction, used while it < w */
  if (it >= 0 && it < w)
    warm = cfg->scheduler.warmup_type_log ? log((double)(it + 1)) / log((double)w)
                                          : (double)it / (double)w;
  switch (cfg->scheduler.type) {
    case ZO_SCHED_NONE: return lr;
    case ZO_SCHED_WARMUP_LR:
      if (it < 0) return min_lr;
      return min_lr + delta * (it < w ? warm : 1.0);
    case ZO_SCHED_WARMUP_DECAY_LR: {
      if (it < 0) return min_lr;
      if (it < w) return min_lr + delta * warm;
      double den = (double)(total - w);
      if (den < 1.0) den = 1.0;
      double g = (double)(total - it) / den;
      return min_lr + delta * (g > 0.0 ? g : 0.0);
    }
    case ZO_SCHED_WARMUP_COSINE_LR: {
      if (it < 0) return 0.0;
      double ratio;
      if (it < w) {
        ratio = cfg->scheduler.warmup_min_ratio + warm * (1.0 - cfg->scheduler.warmup_min_ratio);
      } else {
        const double pi = 3.14159265358979323846;
        double real_last = (double)(it - w + 1), real_total = (double)(total - w);
        ratio = (1.0 + cos(pi * real_last / real_total)) / 2.0;
        ratio = cfg->scheduler.cos_min_ratio + (1.0 - cfg->scheduler.cos_min_ratio) * ratio;
        if (ratio < 0.0) ratio = 0.0;
      }
      return lr * ratio;
    }
  }
  return lr;
}

double zo_config_lr_at(const zo_config_t *cfg, int64_t step) {
  if (step < 1) step = 1;
  return zo_config_lr_at_iteration(cfg, step - 2);
}

/* ---------- offload device names ---------- */

const char *zo_offload_device_name(zo_offload_device d) {
  switch (d) {
    case ZO_OFFLOAD_NONE: return "none";
    case ZO_OFFLOAD_CPU: return "cpu";
    case ZO_OFFLOAD_NVME: return "nvme";
  }
  return "?";
}

zo_status zo_offload_device_parse(const char *name, zo_offload_device *out) {
  if (!name || !out)
    return zo_error_set(ZO_ERR_INVALID_ARG, "zo_offload_device_parse: %s is NULL",
                        !name ? "name" : "out");
  static const zo_offload_device tiers[] = {ZO_OFFLOAD_NONE, ZO_OFFLOAD_CPU, ZO_OFFLOAD_NVME};
  for (size_t i = 0; i < sizeof tiers / sizeof tiers[0]; i++)
    if (!strcmp(name, zo_offload_device_name(tiers[i]))) {
      *out = tiers[i];
      return ZO_OK;
    }
  return zo_error_set(ZO_ERR_INVALID_ARG,
                      "offload device \"%s\": expected \"none\", \"cpu\" or \"nvme\"", name);
}

size_t zo_config_sizeof(void) { return sizeof(zo_config_t); }
