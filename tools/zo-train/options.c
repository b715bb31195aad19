/*
 * options.c - zo-train's command line (--help, getopt_long, the numbers through
 * tools/common/args.c) and the config file it names, with the command line's
 * overrides applied. Nothing here allocates the engine or trains (main.c).
 */
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "data.h"
#include "gpt.h"
#include "options.h"
#include "zoffload/config.h"

#ifndef ZO_DEFAULT_CONFIG
#define ZO_DEFAULT_CONFIG "configs/default.json"
#endif

static void usage(FILE *f) {
  fprintf(
      f,
      "usage: zo-train [options]\n"
      "Train a GPT-style byte-level model on a text corpus through the zoffload engine.\n\n"
      "  --config FILE            DeepSpeed-style JSON config (default: %s)\n"
      "  --data PATH              corpus file or directory (default: the config's data.path, else %s)\n"
      "  --steps N                optimizer steps (default: the config's train.steps, else 300)\n"
      "  --seed S                 seed for weight init and batch sampling (default: train.seed, else 1337)\n"
      "  --print-every N          a logged step (validation loss, the progress line, a --log-json object) every N\n"
      "                           steps and after the last (default: the config's steps_per_print, and then\n"
      "                           also a progress line without validation after this run's steps 1, 2, 5, 10,\n"
      "                           20, 50, ... below it and whenever 30 s passed without a line)\n"
      "  --verbose                the long step line: lr, TFLOP/s, where a step's time went (forward, backward,\n"
      "                           optimizer, Adam, swap, fetch waits), bytes per tier and the device arena\n"
      "                           (default: step, loss, val loss, tok/s, elapsed time and ETA, about 90 columns;\n"
      "                           --log-json has every figure of the long line whichever is shown)\n"
      "  --log-json FILE          write one JSON object per logged step to FILE (default: none)\n"
      "  --offload-optimizer DEV  override zero_optimization.offload_optimizer.device: none|cpu|nvme\n"
      "                           (default: the config's value)\n"
      "  --nvme-path DIR          override zero_optimization.offload_optimizer.nvme_path and\n"
      "                           offload_param.nvme_path (default: the config's values)\n"
      "  --offload-param DEV      override zero_optimization.offload_param.device: none|cpu|nvme; cpu and nvme\n"
      "                           switch to ZeRO stage 3 (default: the config's value)\n"
      "  --device KIND            override zoffload.device: auto|cuda|host (default: the config's value, else\n"
      "                           auto: the GPU when one is visible and zo-train has CUDA compute, else host)\n"
      "  --activation-checkpointing on|off\n"
      "                           override train.activation_checkpointing (default: the config's value, else off)\n"
      "  --model-memory streamed|resident\n"
      "                           override train.model_memory: streamed holds one layer group's fp32 weights and\n"
      "                           gradients at a time (cuda: a layer group's bf16 gradients) and hands every\n"
      "                           micro-batch's gradients to the engine; resident holds the whole model in fp32\n"
      "                           (cuda: the whole model's bf16 gradients, handed over in the last micro-batch)\n"
      "                           (default: streamed)\n"
      "  --cuda-kernels baseline|fused\n"
      "                           override train.cuda_kernels, the CUDA model's kernels: baseline (cuBLAS, plain\n"
      "                           kernels) or fused (cuBLASLt epilogues, a fused classifier, vectorised LayerNorm,\n"
      "                           cuDNN flash attention where available, no synchronization inside a step)\n"
      "                           (default: the config's value, else baseline)\n"
      "  --kernel-times           time the CUDA model's kernels by class with CUDA events and print\n"
      "                           'kernels: gemm <ms> ms attention <ms> ms other <ms> ms' per step at the end\n"
      "                           (the mean of the steps after the first); adds a wait at each step's end\n"
      "  --dry-run                print the model, its FLOPs per token and the bytes each tier will hold (the\n"
      "                           start-up budget) against what this machine has, then exit: 0 when it fits,\n"
      "                           1 when not (with the key to change); nothing is allocated or trained\n"
      "  --device-memory-limit B  override zoffload.device_memory_limit, bytes (80G, 512MiB: K M G T are\n"
      "                           powers of 1024 in every flag); 0 = unlimited (default: the config's value)\n"
      "                           (a --dry-run of a cuda config without a GPU plans a device of that size)\n"
      "  --assume-host-memory B   with --dry-run: plan for a machine with B bytes of host memory (MemTotal, which\n"
      "                           zoffload.pinned_fraction applies to, and MemAvailable) instead of this one's\n"
      "  --assume-nvme-free B     with --dry-run: plan as if each nvme_path's file system had B bytes free\n"
      "  --compute-tflops X       the model's compute rate (TFLOP/s) for the predicted step and zoffload.placement\n"
      "                           \"auto\" (default: measured on the CPU, cached in the speeds cache; 40%% of the\n"
      "                           GPU's peak)\n"
      "  --threads N              compute and Adam threads (default: all cores)\n"
      "  --fixed-threads          keep all of them while other processes keep the cores busy (default: each\n"
      "                           forward and backward takes fewer then; the results are the same bits)\n"
      "  --no-sample              skip the generated sample at the end (default: sample)\n"
      "  --save DIR               write checkpoints under DIR (one directory per step, DIR/latest names the\n"
      "                           newest complete one): every --save-every steps and after the last step;\n"
      "                           DIR is locked for the run: a second run on it is refused at start-up\n"
      "  --save-every N           checkpoint every N steps (default: only after the last step)\n"
      "  --keep-last N            keep the newest N checkpoints under --save DIR, 0 = all (default: 3)\n"
      "  --resume PATH|latest     continue from a checkpoint directory, a root holding `latest`, or `latest`\n"
      "                           of --save DIR (none there yet: start from step 0); bit-identical to an\n"
      "                           uninterrupted run; --steps is the total to reach\n"
      "  --export-safetensors F   after training, write the weights to F in the safetensors format (F must be\n"
      "                           absent or a regular file: a link, device or FIFO is refused at start-up)\n"
      "  --export-dtype fp32|bf16 dtype of --export-safetensors (default: fp32)\n"
      "  --micro-batch N          train_micro_batch_size_per_gpu where the config says \"auto\" (default: 8)\n"
      "  --grad-accum N           gradient_accumulation_steps where the config says \"auto\" (default: 1)\n"
      "  Other \"auto\" values (configs written for the HF Trainer) are filled in as it does: the bucket\n"
      "  sizes from model.d_model, lr 3e-4, betas (0.9, 0.999), eps 1e-8, weight_decay 0, gradient_clipping\n"
      "  1.0, warmup 0 steps over --steps, bf16 on, fp16 off; each is printed when filled in\n"
      "  -h, --help               this text\n"
      "SIGTERM / SIGINT: the step in progress is finished (an emulated slow link stops throttling), saved when\n"
      "--save is set, and zo-train exits 128 + the signal (143 / 130)\n",
      ZO_DEFAULT_CONFIG, DATA_DEFAULT_PATH);
}

/* Log lines while the config is read: the "auto" values filled in (info), and warnings as the library prints them. */
static void config_log(zo_log_level level, const char *msg, void *user) {
  (void)user;
  if (level <= ZO_LOG_WARN)
    fprintf(stderr, "zoffload: %s: %s\n", level == ZO_LOG_ERROR ? "error" : "warning", msg);
  else
    printf("zo-train: %s\n", msg);
}

/* "KEY: VALUE is out of range [LO, HI] for zo-train (WHY)", exit status 1. */
int train_die_i64(const char *key, int64_t v, int64_t lo, int64_t hi, const char *why) {
  fprintf(stderr, "zo-train: error: %s: %lld is out of range [%lld, %lld] for zo-train (%s)\n", key,
          (long long)v, (long long)lo, (long long)hi, why);
  return 1;
}

int train_die(const char *fmt, const char *a, const char *b) {
  fprintf(stderr, "zo-train: error: ");
  fprintf(stderr, fmt, a, b);
  fputc('\n', stderr);
  return 1;
}

static int parse_i64(const char *flag, const char *s, int64_t lo, int64_t hi, int64_t *out) {
  if (zo_tool_parse_int(s, lo, hi, out)) {
    if (hi == INT64_MAX)
      fprintf(stderr, "zo-train: error: %s: expected an integer >= %lld, got '%s'\n", flag,
              (long long)lo, s);
    else
      fprintf(stderr, "zo-train: error: %s: expected an integer in [%lld, %lld], got '%s'\n", flag,
              (long long)lo, (long long)hi, s);
    return -1;
  }
  return 0;
}

/* A byte size "80G", "512MiB", "1GB", "85899345920" (zo_tool_parse_bytes, the config's parser) in [@lo, INT64_MAX]. */
static int parse_size(const char *flag, const char *s, int64_t lo, int64_t *out) {
  uint64_t v;
  if (zo_tool_parse_bytes(s, &v) || v > (uint64_t)INT64_MAX || (int64_t)v < lo) {
    fprintf(stderr,
            "zo-train: error: %s: expected a byte size >= %lld (an integer, or with a unit: 80G, "
            "512MiB = powers of 1024, 1GB = 10^9), got '%s'\n",
            flag, (long long)lo, s);
    return -1;
  }
  *out = (int64_t)v;
  return 0;
}

/* The options getopt_long knows; each short value is the case of parse_option() that takes it. */
static const struct option opts[] = {{"config", required_argument, 0, 'c'},
                                     {"data", required_argument, 0, 'd'},
                                     {"steps", required_argument, 0, 's'},
                                     {"seed", required_argument, 0, 'S'},
                                     {"log-json", required_argument, 0, 'j'},
                                     {"offload-optimizer", required_argument, 0, 'o'},
                                     {"nvme-path", required_argument, 0, 'n'},
                                     {"threads", required_argument, 0, 't'},
                                     {"no-sample", no_argument, 0, 'N'},
                                     {"help", no_argument, 0, 'h'},
                                     {"offload-param", required_argument, 0, 'P'},
                                     {"device-memory-limit", required_argument, 0, 'L'},
                                     {"device", required_argument, 0, 'D'},
                                     {"dry-run", no_argument, 0, 'y'},
                                     {"activation-checkpointing", required_argument, 0, 'A'},
                                     {"save", required_argument, 0, 'v'},
                                     {"save-every", required_argument, 0, 'E'},
                                     {"keep-last", required_argument, 0, 'K'},
                                     {"resume", required_argument, 0, 'R'},
                                     {"export-safetensors", required_argument, 0, 'X'},
                                     {"export-dtype", required_argument, 0, 'T'},
                                     {"micro-batch", required_argument, 0, 'M'},
                                     {"grad-accum", required_argument, 0, 'G'},
                                     {"model-memory", required_argument, 0, 'm'},
                                     {"assume-host-memory", required_argument, 0, 'H'},
                                     {"assume-nvme-free", required_argument, 0, 'F'},
                                     {"fixed-threads", no_argument, 0, 'x'},
                                     {"compute-tflops", required_argument, 0, 'C'},
                                     {"print-every", required_argument, 0, 'p'},
                                     {"verbose", no_argument, 0, 'V'},
                                     {"cuda-kernels", required_argument, 0, 'k'},
                                     {"kernel-times", no_argument, 0, 'e'},
                                     {0, 0, 0, 0}};

/* One option @c (getopt_long's return) with its @arg into @o: -1 to go on, else the exit status (0 --help, 2 bad). */
static int parse_option(int c, const char *arg, train_opts *o) {
  switch (c) {
    case 'c': o->config_path = arg; break;
    case 'd': o->data_override = arg; break;
    case 's':
      if (parse_i64("--steps", arg, 1, INT64_MAX / 2, &o->steps_override)) return 2;
      break;
    case 'S':
      if (parse_i64("--seed", arg, 0, INT64_MAX, &o->seed_override)) return 2;
      break;
    case 'j': o->log_json = arg; break;
    case 'o': o->offload_override = arg; break;
    case 'n': o->nvme_override = arg; break;
    case 't':
      if (parse_i64("--threads", arg, 1, 4096, &o->threads)) return 2;
      break;
    case 'N': o->do_sample = 0; break;
    case 'x': o->fixed_threads = 1; break;
    case 'P': o->param_override = arg; break;
    case 'L':
      if (parse_size("--device-memory-limit", arg, 0, &o->limit_override)) return 2;
      break;
    case 'D': o->device_override = arg; break;
    case 'y': o->dry_run = 1; break;
    case 'A': o->ckpt_override = arg; break;
    case 'm': o->memory_override = arg; break;
    case 'v': o->save_root = arg; break;
    case 'E':
      if (parse_i64("--save-every", arg, 1, INT64_MAX, &o->save_every)) return 2;
      break;
    case 'K':
      if (parse_i64("--keep-last", arg, 0, INT_MAX, &o->keep_last)) return 2;
      break;
    case 'R': o->resume = arg; break;
    case 'X': o->export_path = arg; break;
    case 'T': o->export_dtype = arg; break;
    case 'M':
      if (parse_i64("--micro-batch", arg, 1, INT_MAX, &o->micro_batch)) return 2;
      break;
    case 'G':
      if (parse_i64("--grad-accum", arg, 1, INT_MAX, &o->grad_accum)) return 2;
      break;
    case 'H':
      if (parse_size("--assume-host-memory", arg, 1, &o->assume_host)) return 2;
      break;
    case 'F':
      if (parse_size("--assume-nvme-free", arg, 0, &o->assume_nvme)) return 2;
      break;
    case 'C':
      if (zo_tool_parse_double(arg, 1e-6, 1e6, &o->compute_tflops)) {
        fprintf(stderr,
                "zo-train: --compute-tflops: expected a number in [1e-6, 1e6] TFLOP/s, got '%s'\n",
                arg);
        return 2;
      }
      break;
    case 'p':
      if (parse_i64("--print-every", arg, 1, INT64_MAX, &o->print_every)) return 2;
      break;
    case 'V': o->verbose = 1; break;
    case 'k': o->kernels_override = arg; break;
    case 'e': o->kernel_times = 1; break;
    case 'h': usage(stdout); return 0;
    default: return 2; /* train_opts_parse() prints the line */
  }
  return -1;
}

int train_opts_parse(int argc, char **argv, train_opts *o) {
  *o = (train_opts){.config_path = ZO_DEFAULT_CONFIG,
                    .steps_override = -1,
                    .seed_override = -1,
                    .limit_override = -1,
                    .do_sample = 1,
                    .export_dtype = "fp32",
                    .keep_last = 3,
                    .micro_batch = 8,
                    .grad_accum = 1,
                    .assume_host = -1,
                    .assume_nvme = -1,
                    .print_every = -1};
  int c, rc;
  opterr = 0; /* zo_tool_option_error() says it in one line, with the nearest flag */
  while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
    if (c == '?' || c == ':') return zo_tool_option_error("zo-train", c, argc, argv, opts);
    if ((rc = parse_option(c, optarg, o)) >= 0) return rc;
  }
  if (optind < argc) return train_die("unexpected argument '%s' (see --help)%s", argv[optind], "");
  if (strcmp(o->export_dtype, "fp32") && strcmp(o->export_dtype, "bf16"))
    return train_die("--export-dtype: expected fp32 or bf16, got '%s'%s", o->export_dtype, "");
  if (o->resume && !strcmp(o->resume, "latest") && !o->save_root)
    return train_die("--resume latest: needs --save DIR (the checkpoints' root)%s%s", "", "");
  if (o->save_every > 0 && !o->save_root)
    return train_die("--save-every: needs --save DIR%s%s", "", "");
  if ((o->assume_host >= 0 || o->assume_nvme >= 0) && !o->dry_run)
    return train_die("%s: plans a machine that is not this one: only with --dry-run%s",
                     o->assume_host >= 0 ? "--assume-host-memory" : "--assume-nvme-free", "");
  char err[1024]; /* once: a pipe (--config <(...)) has no second reading */
  if (train_config_read(o->config_path, &o->config_text, &o->config_len, err, sizeof err))
    return train_die("%s%s", err, "");
  return -1;
}

void train_opts_free(train_opts *o) {
  if (!o) return;
  free(o->config_text);
  o->config_text = NULL, o->config_len = 0;
}

/* zo-train's own blocks first, so the DeepSpeed part's "auto" values can come from them. */
int train_opts_settings(const train_opts *o, train_settings *ts) {
  char err[1024];
  train_settings_defaults(ts);
  if (train_settings_load(o->config_path, o->config_text, o->config_len, ts, err, sizeof err))
    return train_die("%s%s", err, "");
  if (gpt_config_check(&ts->model, err, sizeof err))
    return train_die("%s: %s", o->config_path, err);
  if (o->data_override) snprintf(ts->data_path, sizeof ts->data_path, "%s", o->data_override);
  if (o->steps_override > 0) ts->steps = o->steps_override;
  return 0;
}

/* The values zo-train fills in where the config says "auto": the HF Trainer's, from @ts and the command line. */
static void auto_values(const train_opts *o, const train_settings *ts, zo_config_auto *av) {
  zo_config_auto_init(av);
  av->hidden_size = ts->model.d_model;
  av->train_micro_batch_size_per_gpu = o->micro_batch;
  av->gradient_accumulation_steps = o->grad_accum;
  av->lr = 3e-4, av->beta1 = 0.9, av->beta2 = 0.999, av->eps = 1e-8,
  av->weight_decay = 0.0; /* as HF TrainingArguments, */
  av->gradient_clipping = 1.0, av->warmup_num_steps = 0,
  av->total_num_steps = ts->steps; /* lr 3e-4 (HF: 5e-5) */
  av->fp16 = 0, av->bf16 = 1;
}

/* The command line's tiers, device and paths over the config's; 0, or 1 after printing the error. */
static int override_config(const train_opts *o, zo_config_t *cfg) {
  if (o->offload_override) {
    zo_offload_device dev;
    if (zo_offload_device_parse(o->offload_override, &dev) != ZO_OK)
      return train_die("--offload-optimizer: expected none, cpu or nvme, got '%s'%s",
                       o->offload_override, "");
    cfg->zero.offload_optimizer.device = dev;
    if (dev != ZO_OFFLOAD_NONE && cfg->zero.stage < 1) cfg->zero.stage = 2;
  }
  if (o->param_override) {
    zo_offload_device dev;
    if (zo_offload_device_parse(o->param_override, &dev) != ZO_OK)
      return train_die("--offload-param: expected none, cpu or nvme, got '%s'%s", o->param_override,
                       "");
    cfg->zero.offload_param.device = dev;
    if (dev != ZO_OFFLOAD_NONE) cfg->zero.stage = 3;
  }
  if (o->limit_override >= 0) cfg->zoffload.device_memory_limit = o->limit_override;
  if (o->device_override &&
      zo_device_kind_parse(o->device_override, &cfg->zoffload.device_kind) != ZO_OK)
    return train_die("--device: expected auto, cuda or host, got '%s'%s", o->device_override, "");
  if (o->nvme_override) {
    snprintf(cfg->zero.offload_optimizer.nvme_path, sizeof cfg->zero.offload_optimizer.nvme_path,
             "%s", o->nvme_override);
    snprintf(cfg->zero.offload_param.nvme_path, sizeof cfg->zero.offload_param.nvme_path, "%s",
             o->nvme_override);
  }
  if (cfg->zero.offload_optimizer.device == ZO_OFFLOAD_NVME &&
      !cfg->zero.offload_optimizer.nvme_path[0])
    return train_die(
        "zero_optimization.offload_optimizer.nvme_path: required when device is \"nvme\" (or pass "
        "--nvme-path)%s%s",
        "", "");
  if (o->threads > 0) {
    gpt_set_threads((int)o->threads);
    cfg->zoffload.adam_threads = (int)o->threads;
  }
  if (o->fixed_threads) gpt_set_thread_adapt(0);
  return 0;
}

int train_opts_config(const train_opts *o, int world, train_settings *ts, zo_config_t *cfg) {
  zo_config_auto av;
  auto_values(o, ts, &av);
  zo_config_opts copts = {.app_blocks = train_app_blocks, .world_size = world, .auto_values = &av};
  /* the values filled in for "auto" are info lines: shown here unless ZO_LOG_LEVEL says otherwise */
  const int own_log = getenv("ZO_LOG_LEVEL") == NULL;
  if (own_log) zo_log_set_handler(config_log, NULL, ZO_LOG_INFO);
  const zo_status cst = zo_config_parse(o->config_text, o->config_len, o->config_path, &copts, cfg);
  if (own_log) zo_log_set_handler(NULL, NULL, ZO_LOG_WARN);
  if (cst != ZO_OK) return train_die("%s%s", zo_last_error(), "");
  if (o->seed_override >= 0) ts->seed = (uint64_t)o->seed_override;
  if (o->ckpt_override) {
    if (strcmp(o->ckpt_override, "on") && strcmp(o->ckpt_override, "off"))
      return train_die("--activation-checkpointing: expected on or off, got '%s'%s",
                       o->ckpt_override, "");
    ts->activation_checkpointing = !strcmp(o->ckpt_override, "on");
  }
  if (o->kernels_override) {
    if (strcmp(o->kernels_override, "baseline") && strcmp(o->kernels_override, "fused"))
      return train_die("--cuda-kernels: expected baseline or fused, got '%s'%s",
                       o->kernels_override, "");
    ts->cuda_kernels = !strcmp(o->kernels_override, "fused");
  }
  if (o->memory_override) {
    if (strcmp(o->memory_override, "streamed") && strcmp(o->memory_override, "resident"))
      return train_die("--model-memory: expected streamed or resident, got '%s'%s",
                       o->memory_override, "");
    ts->model_streamed = !strcmp(o->memory_override, "streamed");
  }
  return override_config(o, cfg);
}
