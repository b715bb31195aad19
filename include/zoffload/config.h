/*
 * zoffload/config.h - DeepSpeed-style JSON configuration: parse, validate,
 * resolve (batch sizes, legacy forms, defaults) and query (learning rate).
 * This is the reader only; nothing here allocates engine resources.
 */
#ifndef ZOFFLOAD_CONFIG_H
#define ZOFFLOAD_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "zoffload/device.h"
#include "zoffload/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where a tier of state lives (DeepSpeed's OffloadDeviceEnum: "none", "cpu", "nvme"). */
typedef enum zo_offload_device {
  ZO_OFFLOAD_NONE = 0,
  ZO_OFFLOAD_CPU = 1,
  ZO_OFFLOAD_NVME = 2
} zo_offload_device;

/* optimizer.type; DeepSpeed matches it case-insensitively ("adam", "AdamW"). */
typedef enum zo_optimizer_type { ZO_OPT_ADAM = 0, ZO_OPT_ADAMW = 1 } zo_optimizer_type;

/* scheduler.type; DeepSpeed matches it case-sensitively. */
typedef enum zo_sched_type {
  ZO_SCHED_NONE = 0,
  ZO_SCHED_WARMUP_LR = 1,
  ZO_SCHED_WARMUP_DECAY_LR = 2,
  ZO_SCHED_WARMUP_COSINE_LR = 3,
} zo_sched_type;

/*
 * zo_config_t - a resolved configuration. Every field holds DeepSpeed's
 * default when its key is absent (see zo_config_defaults()). Sizes named
 * *_size / *_bucket_size / max_in_cpu / *_threshold / *_parameters count
 * ELEMENTS as in DeepSpeed; block_size and device_memory_limit are BYTES.
 * A plain value struct: copy it freely, nothing to free.
 */
/*
 * The ranges zo_config_parse() accepts, beyond those beside each field below.
 * Every real must also be 0 or a normal, finite float32 (magnitude in
 * [FLT_MIN, FLT_MAX]): the optimizer computes in float32, where anything else
 * would silently become 0 or infinity. optimizer.params.eps is in [FLT_MIN, 1];
 * each beta is < 1 as float32 (1 - beta^step divides). With decoupled weight
 * decay, weight_decay times the peak lr is at most 1.
 */
#define ZO_CONFIG_MAX_ELEMS \
  ((int64_t)1 << 56) /* element counts: x 16 bytes still fits in 63 bits */
#define ZO_CONFIG_MAX_BLOCK_SIZE \
  ((int64_t)1 << 30)                   /* aio.block_size, bytes (zo_swap's largest piece) */
#define ZO_CONFIG_LR_MAX 100.0         /* optimizer.params.lr, scheduler warmup_{min,max}_lr */
#define ZO_CONFIG_WEIGHT_DECAY_MAX 1e6 /* as zo_engine_set_param_weight_decay() */
#define ZO_CONFIG_LOSS_SCALE_MAX \
  18446744073709551616.0 /* fp16.loss_scale, min_loss_scale: 2^64 (2^initial_scale_power) */
#define ZO_CONFIG_LINK_GBPS_MIN 0.1 /* zoffload.host_link_gbps: 0 (none) or in [MIN, MAX] */
#define ZO_CONFIG_LINK_GBPS_MAX 1e6
#define ZO_CONFIG_PINNED_FRACTION 0.85 /* zoffload.pinned_fraction default: of MemTotal */
#define ZO_CONFIG_COMM_TIMEOUT_S \
  600.0 /* zoffload.comm_timeout_s default (ZO_COMM_TIMEOUT_S_DEFAULT) */
#define ZO_CONFIG_COMM_TIMEOUT_S_MAX \
  86400.0                        /* zoffload.comm_timeout_s: in (0, MAX] (ZO_COMM_TIMEOUT_S_MAX) */
#define ZO_CONFIG_SPEED_MIN 1e-3 /* zoffload.speeds.*: 0 (not given) or in [MIN, MAX] */
#define ZO_CONFIG_SPEED_MAX 1e6
/* zero_optimization.offload_*.nvme_path as a list: at most this many directories (the swap
 * layer's ZO_SWAP_MAX_PATHS), their paths together (each with its NUL) in this many bytes. */
#define ZO_CONFIG_MAX_NVME_PATHS 16
#define ZO_CONFIG_NVME_PATHS_BYTES 8192

/* zoffload.device_arena_bytes "fit": the arena holds what the engine does, no more
 * (zo_engine_finalize()). */
#define ZO_ARENA_FIT (-1)

/* zoffload.comm: the collectives between the engine's ranks when there are several. AUTO: NCCL when the device
 * is CUDA and this zoffload has NCCL, else MPI; a failed NCCL start is an error under AUTO and NCCL alike (no
 * silent fallback to MPI); MPI: MPI through host memory even on GPUs. */
typedef enum zo_comm_choice { ZO_COMM_AUTO = 0, ZO_COMM_NCCL = 1, ZO_COMM_MPI = 2 } zo_comm_choice;

/* zoffload.placement: who decides the split of each kind of state over device memory, pinned host memory and NVMe.
 * CONFIG (default): the devices as the config writes them (offload_optimizer.device, offload_param.device,
 * offload_param.max_in_cpu, zoffload.optimizer_max_in_cpu), nothing else; AUTO: the placement planner
 * (zoffload/placement.h) chooses, within the machine's limits, the split with the least predicted step time. */
typedef enum zo_placement_mode { ZO_PLACEMENT_CONFIG = 0, ZO_PLACEMENT_AUTO = 1 } zo_placement_mode;

/* A field added here is readable by path once it has its line in config/config_get.c's table. */
typedef struct zo_config {
  /* Resolved and consistent: train_batch_size == micro * gas * world_size, each >= 1, the product without
   * overflow (an overflowing product is a ZO_ERR_CONFIG naming the key). */
  int64_t train_batch_size, train_micro_batch_size_per_gpu, gradient_accumulation_steps;
  double gradient_clipping; /* max global L2 norm; 0 = off */
  int grad_accum_dtype; /* data_types.grad_accum_dtype: the zo_dtype of the host gradient shard that gradients
                               are accumulated in and Adam reads ("fp32", "bf16", "fp16"); -1 (default): the
                               working dtype when gradient_accumulation_steps is 1 or offload_optimizer is "none",
                               else fp32 (zo_engine_grad_accumulate) */
  int64_t steps_per_print; /* DeepSpeed default 10; Infinity in the JSON gives INT64_MAX */
  struct {
    zo_optimizer_type type;
    int adam_w_mode; /* resolved: 1 decoupled weight decay (AdamW), 0 L2 added to the gradient.
                        "Adam" honours params.adam_w_mode (default true); "AdamW" is always 1. */
    double lr, beta1, beta2, eps,
        weight_decay;    /* defaults 1e-3, 0.9, 0.999, 1e-8, 0; ranges: lr [0, 100],
                                                   betas [0, 1), eps [FLT_MIN, 1], weight_decay [0, 1e6] */
    int bias_correction; /* default 1 */
  } optimizer;
  struct {
    zo_sched_type type;                  /* ZO_SCHED_NONE when there is no "scheduler" block */
    double warmup_min_lr, warmup_max_lr; /* WarmupLR, WarmupDecayLR: defaults 0, 1e-3 */
    int64_t warmup_num_steps;            /* as written, default 1000; DeepSpeed uses max(2, this) */
    int warmup_type_log;                 /* 1 "log" (DeepSpeed default), 0 "linear" */
    int64_t total_num_steps; /* WarmupDecayLR, WarmupCosineLR (required there); else 0 */
    double cos_min_ratio, warmup_min_ratio; /* WarmupCosineLR: defaults 1e-4, 0 */
  } scheduler;
  struct {
    int enabled;               /* default 0 */
    double loss_scale;         /* 0 = dynamic (default); at most 2^64 */
    int initial_scale_power;   /* dynamic scale starts at 2^this; default 16 */
    int64_t loss_scale_window; /* steps without overflow before doubling; default 1000 */
    int hysteresis;            /* overflows tolerated before halving; default 2 */
    double min_loss_scale;     /* default 1; (0, 2^64] */
  } fp16;
  struct {
    int enabled; /* "bf16" or its legacy name "bfloat16"; default 0 */
  } bf16;
  struct {
    int stage; /* 0..3; legacy "zero_optimization": true means 1, false means 0 */
    struct {
      zo_offload_device device; /* default none */
      char nvme_path[4096];     /* "" when absent; required when device is nvme; with a list, its
                                   first directory (see nvme_paths) */
      /* "nvme_path": ["/nvme0", "/nvme1"]: every directory, each NUL-terminated, one after the
       * other (n_nvme_paths of them, 1..ZO_CONFIG_MAX_NVME_PATHS); the swap files are striped
       * across them. Used only while the first equals nvme_path: a tool that sets nvme_path
       * alone (zo-train --nvme-path) gets that one directory. n_nvme_paths 0: a single string. */
      char nvme_paths[ZO_CONFIG_NVME_PATHS_BYTES];
      int n_nvme_paths;
      int pin_memory;   /* default 0 */
      int buffer_count; /* default 4 */
      /* default 1, 1 (DeepSpeed's default is 0, 0: set them false explicitly for its
       * order). pipeline_read 0: a sub-group's state is read only when its update can
       * start and no other sub-group is in memory or being read or updated (no read
       * ahead, nothing during forward); pipeline_write 0: each write-back is waited
       * before anything else moves. */
      int pipeline_read, pipeline_write;
      double ratio; /* fraction of optimizer state offloaded, [0, 1], default 1 */
    } offload_optimizer;
    struct {
      zo_offload_device device; /* default none */
      char nvme_path[4096];     /* "" when absent; required when device is nvme; with a list, its
                                   first directory */
      char nvme_paths[ZO_CONFIG_NVME_PATHS_BYTES]; /* as offload_optimizer.nvme_paths */
      int n_nvme_paths;
      int pin_memory;      /* default 0 */
      int buffer_count;    /* default 5 */
      int64_t buffer_size; /* elements, default 1e8 */
      /* elements, default 1e9 (DeepSpeed's), acted on only when @max_in_cpu_set: with device "nvme", the
       * working copies of the first registered tensors whose elements (their stage-3 partitions on several ranks)
       * add up to at most max_in_cpu stay in host memory ("param_host", pinned as pin_memory says) instead of
       * params.swp, so their fetches read no disk; whole tensors in registration order, stopping at the first that
       * does not fit. No effect with device "none" or "cpu". */
      int64_t max_in_cpu;
      int max_in_cpu_set; /* 1 when the JSON wrote offload_param.max_in_cpu; 0 (absent, and
                                   zo_config_defaults()): nothing is cached in host memory, whatever max_in_cpu
                                   holds (DeepSpeed's documented default of 1e9 is not acted on unless written) */
    } offload_param;
    /* elements, default 1e9; every element count here is at most ZO_CONFIG_MAX_ELEMS */
    int64_t sub_group_size;
    /* Parsed and validated, but the engine does not act on them yet (a warning says so). */
    int64_t stage3_prefetch_bucket_size;        /* elements, default 5e7 */
    int64_t stage3_max_live_parameters;         /* elements, default 1e9 */
    int64_t stage3_max_reuse_distance;          /* elements, default 1e9 */
    int64_t stage3_param_persistence_threshold; /* elements, default 1e5 */
    int overlap_comm;                           /* default: 1 for stage 3, else 0 (DeepSpeed) */
    int64_t reduce_bucket_size;                 /* elements, default 5e8 */
    int64_t allgather_bucket_size;              /* elements, default 5e8 */
    int contiguous_gradients;                   /* default 1 */
  } zero;
  struct {
    int64_t block_size;       /* bytes, a positive multiple of 4096 up to 1 GiB; default 1 MiB */
    int64_t queue_depth;      /* io_uring entries, 1..32768; default 8 */
    int intra_op_parallelism; /* legacy name thread_count; default 1 (not used: io_uring) */
    int single_submit;        /* default 0 (not used: io_uring) */
    int overlap_events;       /* default 1 (not used: io_uring) */
    int use_gds;              /* default 0; true warns: not supported */
  } aio;
  struct {
    zo_device_kind device_kind; /* "device": "auto" (default: CUDA when built with it and a GPU is
                                    visible, else host), "cuda" or "host" */
    /* bytes the device may hold for zoffload; 0 = unlimited (host) or the whole GPU (cuda) */
    int64_t device_memory_limit;
    int adam_threads;          /* 0 = all physical cores */
    int optimizer_state_dtype; /* zo_dtype of Adam's exp_avg/exp_avg_sq: ZO_DTYPE_F32 (0, default, as
                                    DeepSpeed) or ZO_DTYPE_BF16 ("bf16": stochastic rounding, 4 bytes/param less) */
    int swap_checksum; /* 1: CRC32C on every swap chunk, verified on read (ZO_ERR_CORRUPT); default 0 */
    int swap_sqpoll; /* 1: io_uring SQPOLL for swap I/O (a kernel thread polls the ring); default 0 */
    /* 1: step N's CPU Adam overlaps step N+1's forward/backward (ZeRO-Offload DPU); needs
     * offload_optimizer cpu or nvme, no parameter offload; default 0 */
    int delayed_param_update;
    /* optimizer steps applied without the delayed update before it starts (the ZeRO-Offload paper's
     * warm-up), >= 0; 0: from the first step (default). Ignored without delayed_param_update */
    int64_t delayed_param_update_warmup_steps;
    /* host device backend: emulated host<->device link GB/s per direction; 0 = none, else in [0.1,
     * 1e6] */
    double host_link_gbps;
    /* bytes of the engine's device arena (zoffload/arena.h), taken at finalize; 0 = auto: all
     * available device memory on a host device, 90% of the GPU's free memory on cuda (the rest:
     * CUDA context, cuBLAS, activations); ZO_ARENA_FIT ("fit"): what the engine holds, for a GPU
     * shared with a framework's allocator (see zo_engine_finalize()) */
    int64_t device_arena_bytes;
    zo_comm_choice comm; /* "comm": "auto" (default), "nccl" or "mpi" (zo_comm_choice) */
    /* "comm_timeout_s": an NCCL collective not complete this many seconds after its start aborts
     * the communicator with an error naming it (zo_comm_set_timeout()); in (0, 86400], default 600
     * (ZO_CONFIG_COMM_TIMEOUT_S) */
    double comm_timeout_s;
    /* the most of MemTotal the engine may page-lock, in (0, 1]; default 0.85
     * (ZO_CONFIG_PINNED_FRACTION): the rest is the OS's, the driver's, the data loader's and the
     * page cache's. A plan over it is refused (zoffload/budget.h) */
    double pinned_fraction;
    zo_placement_mode placement; /* "placement": "config" (default) or "auto" (zo_placement_mode) */
    /* "placement_host_bytes": bytes (or "64GiB"); with "placement": "auto", the most host memory
     * the planner keeps state in, besides the engine's other buffers; 0 (default): MemAvailable
     * less max(2 GiB, MemTotal / 7) less what the plan needs anyway */
    int64_t placement_host_bytes;
    /* "optimizer_max_in_cpu": elements (default 0). With offload_optimizer.device "nvme": the
     * optimizer state (fp32 master, exp_avg, exp_avg_sq) and gradient sum of up to this many
     * elements, in whole sub-groups (the last ones in registration order), live in (pageable) host
     * memory for the whole run and never touch the NVMe files; the rest streams as before. Losses
     * are the same bits whatever its value. The counterpart of offload_param.max_in_cpu for the
     * optimizer; with "placement": "auto" the planner chooses it. At most ZO_CONFIG_MAX_ELEMS */
    /* "early_adam" (bool, default 1): Adam starts on each gradient shard (nvme: each sub-group) as it
     * lands, during backward, when nothing step-wide is needed first (no gradient clipping, no fp16,
     * no delayed_param_update, not on the device). 0: Adam waits for zo_engine_step(), so the step's
     * gradients may take more contributions after zo_engine_grad_ready() (zo_engine_grad_reopen():
     * two backward passes in one micro-batch). The Python front sets 0 unless the config gives it */
    int early_adam;
    int64_t optimizer_max_in_cpu;
    int allow_pageable_host; /* "allow_pageable_host" (bool, default 0): on a CUDA device, a pinned host buffer
                                    that cudaHostRegister refused (RLIMIT_MEMLOCK, a container's memlock limit) is
                                    an error at zo_engine_finalize() (ZO_ERR_CUDA); 1: one warning naming the
                                    bytes that stayed pageable, and the run goes on with slower, blocking copies */
    struct {
      /* "speeds": machine speeds the placement planner uses instead of measuring them (zoffload/speeds.h);
       * each 0 (default) when not given: then zo_speeds_get() takes it from its cache or measures it; else in
       * [ZO_CONFIG_SPEED_MIN, ZO_CONFIG_SPEED_MAX] */
      double nvme_read_gbps,
          nvme_write_gbps;       /* GB/s (1e9 bytes/s) of swap reads / writes at the nvme_path */
      double h2d_gbps, d2h_gbps; /* GB/s of pinned host -> device / device -> host copies */
      double adam_gparams_per_s; /* fused CPU Adam, 1e9 elements per second on the whole pool */
    } speeds;
  } zoffload; /* our own block "zoffload" */
} zo_config_t;

/*
 * zo_config_defaults() - fill @cfg with the values DeepSpeed uses when a key
 * is absent (listed beside each field above). Batch sizes become 1, 1, 1
 * (DeepSpeed has no default; parsing requires them). @cfg must not be NULL.
 * Thread-safe (touches only @cfg).
 */
ZO_API void zo_config_defaults(zo_config_t *cfg);

/*
 * What the application knows, for the values a config leaves "auto" (as the
 * Hugging Face Trainer writes them). zo_config_auto_init() marks every field
 * unknown: integers -1, reals NAN. A key left "auto" whose value is unknown
 * is a ZO_ERR_CONFIG naming the key and the field it needs. Resolution, as
 * transformers/integrations/deepspeed.py (HfTrainerDeepSpeedConfig
 * .trainer_config_process and .trainer_config_finalize) does it:
 *   train_micro_batch_size_per_gpu      <- train_micro_batch_size_per_gpu
 *   gradient_accumulation_steps         <- gradient_accumulation_steps
 *   train_batch_size                    <- micro * gas * world_size
 *   gradient_clipping                   <- gradient_clipping (HF: max_grad_norm)
 *   optimizer.params.lr / betas / eps / weight_decay <- lr, [beta1, beta2], eps, weight_decay
 *   scheduler.params.warmup_min_lr      <- 0
 *   scheduler.params.warmup_max_lr      <- lr
 *   scheduler.params.warmup_num_steps   <- warmup_num_steps
 *   scheduler.params.total_num_steps    <- total_num_steps
 *   fp16.enabled, bf16.enabled          <- fp16, bf16
 *   zero_optimization.reduce_bucket_size                 <- hidden_size * hidden_size
 *   zero_optimization.stage3_prefetch_bucket_size        <- (int64)(0.9 * hidden_size * hidden_size)
 *   zero_optimization.stage3_param_persistence_threshold <- 10 * hidden_size
 * Each value filled in is logged once per parse (zo_info):
 *   config: zero_optimization.reduce_bucket_size "auto" -> 16384 (hidden_size^2)
 * "auto" anywhere else stays an error, naming the key.
 */
typedef struct zo_config_auto {
  int64_t hidden_size;                    /* the model's d_model */
  int64_t train_micro_batch_size_per_gpu; /* >= 1 */
  int64_t gradient_accumulation_steps;    /* >= 1 */
  double lr, beta1, beta2, eps, weight_decay;
  double gradient_clipping; /* 0: none */
  int64_t warmup_num_steps; /* >= 0 */
  int64_t total_num_steps;  /* >= 1 */
  int fp16, bf16;           /* 0 or 1 */
} zo_config_auto;

/* zo_config_auto_init() - every field of @a unknown (-1, NAN). Thread-safe. */
ZO_API void zo_config_auto_init(zo_config_auto *a);

/* Options for zo_config_parse() / zo_config_load_file(); NULL means all zero. */
typedef struct zo_config_opts {
  const char *const *app_blocks; /* NULL-terminated top-level keys owned by the application
                                    (e.g. {"model","data",NULL}): skipped silently; may be NULL */
  int world_size; /* ranks, for train_batch_size = micro * gas * world_size; 0 means 1 */
  /* values for keys left "auto" (see zo_config_auto); NULL: "auto" is an error everywhere, naming
   * the key */
  const zo_config_auto *auto_values;
} zo_config_opts;

/*
 * zo_config_parse() - parse one JSON document with DeepSpeed's meaning of
 * every key and resolve it into @cfg (defaults first, then the document).
 * @json_text: UTF-8, @len bytes, need not be NUL-terminated. Duplicate keys
 *             are an error (as DeepSpeed's loader rejects them).
 * @source:    names the document in messages (a file name); NULL gives "config".
 * @opts:      may be NULL.
 * Rules, following deepspeed/runtime/config.py, zero/config.py,
 * zero/offload_config.py and lr_schedules.py:
 *  - batch keys resolve as DeepSpeed's _set_batch_related_parameters (all
 *    three: must satisfy tb == mb * gas * ws; two: the third is derived by
 *    floor division; only tb: gas = 1; only mb: gas = 1; none: error);
 *  - integer keys accept JSON reals with an integral value (5e8); booleans
 *    must be JSON true/false; a value "auto" (HF Trainer) is filled in from
 *    opts->auto_values (see zo_config_auto), else it is an error;
 *  - legacy forms: "zero_optimization": true/false (stage 1/0),
 *    zero_optimization.cpu_offload (offload_optimizer.device cpu),
 *    cpu_offload_param (alias cpu_offload_params; offload_param.device cpu),
 *    cpu_offload_use_pin_memory (pin_memory of those two), aio.thread_count,
 *    "bfloat16";
 *  - keys DeepSpeed documents but zoffload does not act on are judged by
 *    value, at most one line each per call naming the full JSON path: none
 *    where zoffload does the same by design (contiguous_gradients, a
 *    feature switched off); one zo_info() line where only DeepSpeed's way
 *    to the same training differs (aio.thread_count); one zo_warn() line
 *    where the run differs from DeepSpeed's ("config: fp16.auto_cast is
 *    accepted but has no effect in zoffload; cast the inputs ...");
 *  - a key zoffload does not know inside a block it reads (optimizer and its
 *    params, scheduler and its params, fp16, bf16, data_types,
 *    zero_optimization, its offload_optimizer and offload_param, aio,
 *    zoffload) is ZO_ERR_CONFIG, as DeepSpeed's config models refuse unknown
 *    fields, naming the key and the closest known one when one is within 2
 *    edits (adjacent swaps count 1) and a third of the name's length
 *    ("src: zero_optimization.stag: not a DeepSpeed or zoffload key; did you
 *    mean zero_optimization.stage?");
 *  - an unknown top-level key is the same error when it is that close to a
 *    known top-level key or to one of opts->app_blocks ("zero_optimisation");
 *    any other top-level name warns and is ignored, the first 8 named, then
 *    one line counts the rest
 *    ("config: ... and N more keys that are not DeepSpeed or zoffload keys (M in all); ignored");
 *  - the non-JSON literals Infinity, -Infinity and NaN that Python's
 *    json.dumps() writes are read: "steps_per_print": Infinity (HF
 *    accelerate's float("inf")) means never print (INT64_MAX); at any other
 *    key they are refused as a wrong value, naming the key;
 *  - every number is range-checked as it is read (the ranges beside each
 *    field and above, ZO_CONFIG_*), naming the key and the range;
 *  - unknown keys inside optimizer.params and scheduler.params are errors,
 *    because DeepSpeed passes them to a constructor that rejects them.
 * Not thread-safe only in that warnings go through the process log handler;
 * otherwise reentrant.
 * Returns ZO_OK; ZO_ERR_INVALID_ARG when @json_text or @cfg is NULL or
 * opts->world_size < 0; ZO_ERR_CONFIG for malformed JSON (message
 * "src:LINE:COL: malformed JSON: ...") or a wrong type, range, enum or
 * combination (message "src: json.path: expected ..., got ..."). On error
 * @cfg is left in an unspecified but safe (fully initialised) state.
 */
ZO_API zo_status zo_config_parse(const char *json_text, size_t len, const char *source,
                                 const zo_config_opts *opts, zo_config_t *cfg);

/*
 * zo_config_nvme_dirs() - the directories an offload block's swap files live
 * in: @which 0 is zero_optimization.offload_optimizer, 1 offload_param. With
 * an nvme_path list whose first entry is still nvme_path, every entry, in
 * order (the files are striped across them); else nvme_path alone ("" when
 * absent). @out[ZO_CONFIG_MAX_NVME_PATHS] receives pointers into @cfg (valid
 * while it is). Returns how many (>= 1). Thread-safe (reads @cfg).
 */
ZO_API unsigned zo_config_nvme_dirs(const zo_config_t *cfg, int which, const char **out);

/*
 * zo_config_nvme_dirs_shared() - 1 when zero_optimization.offload_optimizer and offload_param name the same
 * directories in the same order (zo_config_nvme_dirs() of both equal, string by string: one swap handle serves
 * both blocks when both are on nvme), else 0. Looks at the paths only, not the devices. Thread-safe (reads @cfg).
 */
ZO_API int zo_config_nvme_dirs_shared(const zo_config_t *cfg);

/*
 * zo_config_sizeof() - sizeof(zo_config_t) in this library, for bindings
 * (ctypes, cffi) that hold a config in a buffer of their own. Thread-safe.
 */
ZO_API size_t zo_config_sizeof(void);

/*
 * zo_config_load_file() - read the file @path whole and zo_config_parse() it
 * with @path as the source name. Returns what zo_config_parse() returns, or
 * ZO_ERR_CONFIG "cannot read config 'path': <strerror>" when the file cannot
 * be opened or read; ZO_ERR_INVALID_ARG when @path or @cfg is NULL.
 */
ZO_API zo_status zo_config_load_file(const char *path, const zo_config_opts *opts,
                                     zo_config_t *cfg);

/*
 * zo_config_lr_at() - learning rate that DeepSpeed's engine applies in its
 * @step-th optimizer step (1-based; values < 1 are treated as 1).
 * DeepSpeed calls scheduler.step() AFTER each optimizer step, so step k runs
 * with the scheduler at last_batch_iteration = k - 2, and step 1 with the
 * value the scheduler's constructor installs (warmup_min_lr for WarmupLR and
 * WarmupDecayLR, 0 for WarmupCosineLR). Skipped (fp16 overflow) steps do not
 * advance the scheduler: pass the count of applied steps + 1.
 * Without a scheduler: optimizer.lr. Pure function; thread-safe.
 * Source: deepspeed/runtime/lr_schedules.py (WarmupLR, WarmupDecayLR,
 * WarmupCosineLR) and engine.py _take_model_step.
 */
ZO_API double zo_config_lr_at(const zo_config_t *cfg, int64_t step);

/*
 * zo_config_lr_at_iteration() - the scheduler's get_lr() at
 * @last_batch_iteration exactly as DeepSpeed computes it (0-based; < 0 gives
 * the constructor's value as above). zo_config_lr_at(cfg, k) ==
 * zo_config_lr_at_iteration(cfg, k - 2). Pure function; thread-safe.
 */
ZO_API double zo_config_lr_at_iteration(const zo_config_t *cfg, int64_t last_batch_iteration);

/*
 * zo_config_describe() - write "key = value" lines (one per setting, '\n'
 * separated) of the resolved @cfg into @buf (@cap bytes, NUL-terminated when
 * @cap > 0; @buf may be NULL when @cap is 0). Returns the length the full
 * text needs, not counting the NUL, snprintf-style: output was truncated if
 * the return value >= @cap. Thread-safe.
 */
ZO_API size_t zo_config_describe(const zo_config_t *cfg, char *buf, size_t cap);

/*
 * Reading one resolved value by the DeepSpeed JSON path that sets it, for
 * bindings (ctypes, cffi) that must not mirror zo_config_t's layout: a field
 * added anywhere in the struct changes no path. The paths are the JSON keys
 * ("zero_optimization.stage", "optimizer.params.lr",
 * "zero_optimization.offload_param.device", "gradient_accumulation_steps"),
 * the betas as "optimizer.params.betas[0]" and "[1]"; zo_config_key_at()
 * lists them all. Each value is the resolved one: defaults filled in,
 * gradient_accumulation_steps derived, legacy forms mapped, "auto" filled.
 * Types, as the JSON writes them:
 *   ZO_CONFIG_I64  integers (element counts, steps, bytes; units as the
 *                  field in zo_config_t: *_size, max_in_cpu ... elements,
 *                  block_size, device_memory_limit, device_arena_bytes bytes;
 *                  device_arena_bytes -1 is "fit", ZO_ARENA_FIT);
 *   ZO_CONFIG_F64  reals (lr, betas, clipping, ratios, seconds, GB/s);
 *   ZO_CONFIG_BOOL true/false keys, 1 or 0 (resolved: adam_w_mode, overlap_comm);
 *   ZO_CONFIG_STR  names: the enums as the JSON spells them
 *                  (offload devices "none"/"cpu"/"nvme", optimizer.type
 *                  "Adam"/"AdamW", scheduler.type "none" when there is no
 *                  scheduler block, else "WarmupLR"/"WarmupDecayLR"/
 *                  "WarmupCosineLR", scheduler.params.warmup_type
 *                  "log"/"linear", zoffload.device "auto"/"cuda"/"host",
 *                  zoffload.comm "auto"/"nccl"/"mpi", dtypes "fp32"/"fp16"/
 *                  "bf16", data_types.grad_accum_dtype "" when not given)
 *                  and the nvme_path strings ("" when absent).
 * All of these functions only read: safe to call concurrently on one @cfg
 * (the error message of a failed call is the calling thread's last error).
 */
typedef enum zo_config_value_type {
  ZO_CONFIG_I64 = 1,
  ZO_CONFIG_F64 = 2,
  ZO_CONFIG_BOOL = 3,
  ZO_CONFIG_STR = 4,
} zo_config_value_type;

/*
 * zo_config_get_i64() / _f64() / _bool() / _str() - the value at @path in the
 * resolved @cfg into *@out. _str's *@out points into @cfg (nvme_path: valid
 * while @cfg is) or at a static name. Returns ZO_OK; ZO_ERR_INVALID_ARG (*@out
 * unchanged) when an argument is NULL, when @path is not a known path
 * ("config path \"zero_optimization.stag\": not a key zo_config_get reads"),
 * or when the path holds another type ("config path \"optimizer.params.lr\"
 * is a real (zo_config_get_f64), not an integer"). Thread-safe (read only).
 */
ZO_API zo_status zo_config_get_i64(const zo_config_t *cfg, const char *path, int64_t *out);
ZO_API zo_status zo_config_get_f64(const zo_config_t *cfg, const char *path, double *out);
ZO_API zo_status zo_config_get_bool(const zo_config_t *cfg, const char *path, int *out);
ZO_API zo_status zo_config_get_str(const zo_config_t *cfg, const char *path, const char **out);

/*
 * zo_config_key_type() - the type of the value at @path, or 0 when @path is
 * NULL or not a known path (nothing is logged). Thread-safe.
 */
ZO_API zo_config_value_type zo_config_key_type(const char *path);

/*
 * zo_config_key_at() - the @i-th known path (0-based; NULL when @i is past the
 * last) and, when @type is not NULL, its type into *@type. Static strings.
 * Thread-safe.
 */
ZO_API const char *zo_config_key_at(size_t i, zo_config_value_type *type);

/* zo_offload_device_name() - "none", "cpu" or "nvme" ("?" otherwise). */
ZO_API const char *zo_offload_device_name(zo_offload_device d);

/*
 * zo_offload_device_parse() - the offload tier named @name: "none", "cpu" or
 * "nvme" (exact, lower case, the names zo_offload_device_name() gives) into
 * *@out. Thread-safe. Returns ZO_OK, or ZO_ERR_INVALID_ARG (NULL argument, or
 * another name; *@out unchanged; the message is the thread's last error).
 */
ZO_API zo_status zo_offload_device_parse(const char *name, zo_offload_device *out);

#ifdef __cplusplus
}
#endif
#endif /* ZOFFLOAD_CONFIG_H */
