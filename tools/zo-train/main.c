/*
 * zo-train - trains a GPT-style byte-level language model on real text with
 * every parameter owned by the zoffload engine: fp32 master weights and Adam
 * state on the tier that zero_optimization.offload_optimizer.device names.
 * Forward and backward run on a GPU (model.h: cuda, bf16 with cuBLAS) when
 * zoffload.device resolves to cuda, else on the CPU (the host device).
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "args.h"
#include "ckpt.h"
#include "data.h"
#include "gpt.h"
#include "model.h"
#include "train_config.h"
#include "zoffload/adam.h"
#include "zoffload/budget.h"
#include "zoffload/plan.h"
#include "zoffload/checkpoint.h"
#include "zoffload/config.h"
#include "zoffload/engine.h"

#ifndef ZO_DEFAULT_CONFIG
#define ZO_DEFAULT_CONFIG "configs/default.json"
#endif

/*
 * SIGTERM / SIGINT: the first one stops the run after the step in progress, which the library then finishes at
 * once (zo_request_stop(): an emulated slow link stops throttling), so the engine holds that step's state; it is
 * saved when --save is set, and zo-train exits 128 + the signal, as schedulers expect of a preempted job. Later
 * signals change nothing: the same signal often arrives twice (a wrapper such as timeout(1) or a launcher forwards
 * it and also signals the process group), and the stop is already under way; SIGKILL still ends a save cut short
 * safely (checkpoints are written crash-safe). g_stop holds the first signal's number.
 */
static volatile sig_atomic_t g_stop;
static void on_signal(int sig) {
  if (!g_stop) g_stop = sig;
  zo_request_stop();
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: zo-train [options]\n"
          "Train a GPT-style byte-level model on a text corpus through the zoffload engine.\n\n"
          "  --config FILE            DeepSpeed-style JSON config (default: %s)\n"
          "  --data PATH              corpus file or directory (default: the config's data.path, else %s)\n"
          "  --steps N                optimizer steps (default: the config's train.steps, else 300)\n"
          "  --seed S                 seed for weight init and batch sampling (default: train.seed, else 1337)\n"
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
          "  --dry-run                print the model, its FLOPs per token and the bytes each tier will hold (the\n"
          "                           start-up budget) against what this machine has, then exit: 0 when it fits,\n"
          "                           1 when not (with the key to change); nothing is allocated or trained\n"
          "  --device-memory-limit B  override zoffload.device_memory_limit, bytes; 0 = unlimited (default: config)\n"
          "  --threads N              compute and Adam threads (default: all cores)\n"
          "  --no-sample              skip the generated sample at the end (default: sample)\n"
          "  --save DIR               write checkpoints under DIR (one directory per step, DIR/latest names the\n"
          "                           newest complete one): every --save-every steps and after the last step\n"
          "  --save-every N           checkpoint every N steps (default: only after the last step)\n"
          "  --keep-last N            keep the newest N checkpoints under --save DIR, 0 = all (default: 3)\n"
          "  --resume PATH|latest     continue from a checkpoint directory, a root holding `latest`, or `latest`\n"
          "                           of --save DIR (none there yet: start from step 0); bit-identical to an\n"
          "                           uninterrupted run; --steps is the total to reach\n"
          "  --export-safetensors F   after training, write the weights to F in the safetensors format\n"
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
  if (level <= ZO_LOG_WARN) fprintf(stderr, "zoffload: %s: %s\n", level == ZO_LOG_ERROR ? "error" : "warning", msg);
  else printf("zo-train: %s\n", msg);
}

/* "KEY: VALUE is out of range [LO, HI] for zo-train (WHY)", exit status 1. */
static int die_i64(const char *key, int64_t v, int64_t lo, int64_t hi, const char *why) {
  fprintf(stderr, "zo-train: error: %s: %lld is out of range [%lld, %lld] for zo-train (%s)\n", key, (long long)v,
          (long long)lo, (long long)hi, why);
  return 1;
}

/* Never an empty "zo-train: error: " line: a failure that left no message says so (a bug to report). */
static const char *or_unknown(const char *msg) {
  return msg && msg[0] ? msg : "failed without a message (a zo-train bug: please report the command and config)";
}

static int die(const char *fmt, const char *a, const char *b) {
  fprintf(stderr, "zo-train: error: ");
  fprintf(stderr, fmt, a, b);
  fputc('\n', stderr);
  return 1;
}

static int parse_i64(const char *flag, const char *s, int64_t lo, int64_t hi, int64_t *out) {
  if (zo_tool_parse_int(s, lo, hi, out)) {
    if (hi == INT64_MAX)
      fprintf(stderr, "zo-train: error: %s: expected an integer >= %lld, got '%s'\n", flag, (long long)lo, s);
    else
      fprintf(stderr, "zo-train: error: %s: expected an integer in [%lld, %lld], got '%s'\n", flag, (long long)lo,
              (long long)hi, s);
    return -1;
  }
  return 0;
}

/* Mean loss over the fixed validation windows. */
static double eval_val(train_model *m, const data_loader *d, int B, int T, int n_windows, uint8_t *in, uint8_t *tg) {
  double sum = 0;
  int n = 0;
  for (int w = 0; w < n_windows; w += B) {
    int b = n_windows - w < B ? n_windows - w : B;
    if (data_val_batch(d, T, w, b, in, tg) != 0) break;
    sum += (double)train_model_forward(m, in, tg, b, T) * b;
    n += b;
  }
  return n ? sum / n : NAN;
}

/* Cumulative means per step and the figures of one logged step, for --log-json. */
typedef struct step_log {
  int64_t step;
  double loss, val, lr, tok_s, tflops, mfu, loss_scale, grad_norm;
  int skipped;
  double step_s, fwd_s, bwd_s, opt_s, adam_s, swap_s, fetch_s; /* sums over the steps so far */
} step_log;

static void write_json(FILE *jf, const step_log *l, const zo_engine_mem *mem) {
  json_t *o = json_object();
  const double per = 1e3 / (double)l->step; /* cumulative means per step, milliseconds */
  json_object_set_new(o, "step", json_integer(l->step));
  json_object_set_new(o, "loss", json_real(l->loss));
  json_object_set_new(o, "val_loss", json_real(l->val));
  json_object_set_new(o, "lr", json_real(l->lr));
  json_object_set_new(o, "tokens_per_s", json_real(l->tok_s));
  json_object_set_new(o, "model_tflops", json_real(l->tflops));
  json_object_set_new(o, "mfu", l->mfu > 0 ? json_real(l->mfu) : json_null());
  json_object_set_new(o, "loss_scale", json_real(l->loss_scale));
  json_object_set_new(o, "grad_norm", isfinite(l->grad_norm) ? json_real(l->grad_norm) : json_null());
  json_object_set_new(o, "skipped", json_boolean(l->skipped));
  json_object_set_new(o, "step_ms", json_real(l->step_s * per));
  json_object_set_new(o, "forward_ms", json_real(l->fwd_s * per));
  json_object_set_new(o, "backward_ms", json_real(l->bwd_s * per));
  json_object_set_new(o, "optimizer_ms", json_real(l->opt_s * per));
  json_object_set_new(o, "adam_ms", json_real(l->adam_s * per));
  json_object_set_new(o, "swap_wait_ms", json_real(l->swap_s * per));
  json_object_set_new(o, "fetch_wait_ms", json_real(l->fetch_s * per));
  /* bytes held now and moved so far */
  json_object_set_new(o, "device_bytes", json_integer((json_int_t)mem->device_bytes));
  json_object_set_new(o, "device_peak_bytes", json_integer((json_int_t)mem->device_peak_bytes));
  json_object_set_new(o, "host_bytes", json_integer((json_int_t)mem->host_bytes));
  json_object_set_new(o, "pinned_bytes", json_integer((json_int_t)mem->pinned_bytes));
  json_object_set_new(o, "nvme_bytes", json_integer((json_int_t)mem->nvme_bytes));
  json_object_set_new(o, "param_bytes", json_integer((json_int_t)mem->param_bytes));
  json_object_set_new(o, "grad_bytes", json_integer((json_int_t)mem->grad_bytes));
  json_object_set_new(o, "state_bytes", json_integer((json_int_t)mem->state_bytes));
  json_object_set_new(o, "comm_buffer_bytes", json_integer((json_int_t)mem->comm_bytes));
  json_object_set_new(o, "nvme_read_bytes", json_integer((json_int_t)mem->nvme_read_bytes));
  json_object_set_new(o, "nvme_write_bytes", json_integer((json_int_t)mem->nvme_write_bytes));
  json_object_set_new(o, "h2d_bytes", json_integer((json_int_t)mem->h2d_bytes));
  json_object_set_new(o, "d2h_bytes", json_integer((json_int_t)mem->d2h_bytes));
  /* the device arena (zoffload/arena.h) */
  json_object_set_new(o, "arena_capacity_bytes", json_integer((json_int_t)mem->arena.capacity));
  json_object_set_new(o, "arena_live_bytes", json_integer((json_int_t)mem->arena.live_bytes));
  json_object_set_new(o, "arena_peak_live_bytes", json_integer((json_int_t)mem->arena.peak_live_bytes));
  json_object_set_new(o, "arena_free_bytes", json_integer((json_int_t)mem->arena.free_bytes));
  json_object_set_new(o, "arena_largest_free_bytes", json_integer((json_int_t)mem->arena.largest_free));
  json_object_set_new(o, "arena_fragmentation", json_real(mem->arena.fragmentation));
  json_object_set_new(o, "arena_compactions", json_integer((json_int_t)mem->arena.compactions));
  json_object_set_new(o, "arena_bytes_moved", json_integer((json_int_t)mem->arena.bytes_moved));
  json_object_set_new(o, "arena_compact_ms", json_real(mem->arena.compact_seconds * 1e3));
  json_dumpf(o, jf, JSON_COMPACT | JSON_REAL_PRECISION(17));
  fputc('\n', jf);
  fflush(jf);
  json_decref(o);
}

/*
 * The start-up budget of the engine plus the model (model.h), before the
 * model exists: printed for --dry-run, checked otherwise. @standin: the
 * device is a host device standing in for a GPU that is not here (a dry run
 * of a cuda config on a machine without one), whose bytes are then not host
 * memory.
 */
static int budget(zo_engine_t *eng, const train_settings *ts, int B, int cuda, int standin, int print) {
  size_t app[4];
  if (train_model_bytes(&ts->model, B, ts->activation_checkpointing, cuda, zo_engine_grad_dtype(eng), app)) {
    fprintf(stderr, "zo-train: error: the CUDA model's sizes are unknown to a build without CUDA compute\n");
    return -1;
  }
  zo_budget b;
  if (zo_engine_budget(eng, app, &b) != ZO_OK) {
    fprintf(stderr, "zo-train: error: %s\n", zo_last_error());
    return -1;
  }
  if (standin) { /* the stand-in's bytes are the GPU's, not the host's */
    b.line[ZO_TIER_HOST].need -= b.line[ZO_TIER_DEVICE].need;
    b.line[ZO_TIER_HOST].fits = b.line[ZO_TIER_HOST].need <= b.line[ZO_TIER_HOST].available;
    char *src = strstr(b.line[ZO_TIER_HOST].source, "; includes the host device");
    if (src) *src = 0;
    snprintf(b.line[ZO_TIER_DEVICE].where, sizeof b.line[ZO_TIER_DEVICE].where, "cuda (no GPU here: planned)");
    snprintf(b.line[ZO_TIER_DEVICE].source, sizeof b.line[ZO_TIER_DEVICE].source, "%s",
             b.line[ZO_TIER_DEVICE].available == SIZE_MAX ? "not checked: pass --device-memory-limit BYTES"
                                                          : "--device-memory-limit / zoffload.device_memory_limit");
    b.fits = 1;
    for (int i = 0; i < b.n_lines; i++) b.fits &= b.line[i].fits;
  }
  if (print) {
    printf("zo-train: start-up budget (bytes; caller = the model: %s):\n",
           cuda ? "activations, workspaces and the bf16 gradient buffer on the device"
                : "fp32 weights, gradients and activations in host memory, the gradient hand-over buffer on the device");
    zo_budget_print(&b, stdout);
    zo_plan *plan; /* the buffers behind the engine's bytes */
    if (zo_engine_plan(eng, &plan) == ZO_OK) {
      printf("zo-train: memory plan (bytes):\n");
      zo_plan_print(plan, stdout);
      zo_plan_free(plan);
    }
  }
  if (zo_budget_check(&b) != ZO_OK) {
    fprintf(stderr, "zo-train: error: %s\n", zo_last_error());
    return 1;
  }
  return 0;
}

/*
 * Several ranks: each rank's bytes on every tier and its communication, gathered to rank 0 and printed one line
 * a rank (what each process holds: with stage >= 1 the optimizer state is about 1/world of one rank's). A
 * collective: every rank calls it. Returns 0, or -1 with zo_last_error() set.
 */
static int log_ranks(zo_comm_t *comm, const zo_engine_mem *mem, double comm_s, double comm_bytes) {
  const int world = zo_comm_size(comm);
  enum { K = 10 };
  double mine[K] = {(double)mem->device_bytes, (double)mem->host_bytes, (double)mem->pinned_bytes,
                    (double)mem->nvme_bytes, comm_s, comm_bytes, (double)mem->param_bytes, (double)mem->grad_bytes,
                    (double)mem->state_bytes, (double)mem->comm_bytes};
  double *all = calloc((size_t)world * K, sizeof *all);
  if (!all) return -1;
  if (zo_comm_all_gather(comm, mine, all, sizeof mine) != ZO_OK) {
    free(all);
    return -1;
  }
  for (int r = 0; r < world; r++) {
    const double *v = all + (size_t)r * K;
    static const int order[] = {0, 1, 2, 3, 6, 7, 8, 9, 5}; /* the byte counts, in the order printed */
    char b[9][32];
    for (int k = 0; k < 9; k++) zo_format_bytes(b[k], sizeof b[k], v[order[k]]);
    printf("zo-train: rank %d of %d | device %s host %s (pinned %s) nvme %s | parameters %s, gradients %s, optimizer "
           "state %s, collective buffers %s | per step: collectives %.1f ms, %s sent\n", r, world, b[0], b[1], b[2],
           b[3], b[4], b[5], b[6], b[7], v[4] * 1e3, b[8]);
  }
  free(all);
  return 0;
}

/* One checkpoint of @pos under @root (--save), its path and time printed; 0, or -1 after printing the error. */
static int save_step(zo_engine_t *eng, const char *root, const train_position *pos, const train_settings *ts,
                     int keep_last) {
  const double t0 = zo_clock_s();
  char saved[4096], err[1024];
  if (train_ckpt_save(eng, root, pos, ts->seed, &ts->model, keep_last, saved, sizeof saved, err, sizeof err)) {
    fprintf(stderr, "zo-train: error: --save: %s\n", err);
    return -1;
  }
  printf("zo-train: checkpoint %s (%.2f s)\n", saved, zo_clock_s() - t0);
  fflush(stdout);
  return 0;
}

int main(int argc, char **argv) {
  const char *config_path = ZO_DEFAULT_CONFIG, *data_override = NULL, *log_json = NULL, *offload_override = NULL,
             *nvme_override = NULL;
  int64_t steps_override = -1, seed_override = -1, threads = 0, limit_override = -1;
  const char *param_override = NULL, *device_override = NULL, *ckpt_override = NULL;
  int do_sample = 1, dry_run = 0;
  const char *save_root = NULL, *resume = NULL, *export_path = NULL, *export_dtype = "fp32";
  int64_t save_every = 0, keep_last = 3, micro_batch = 8, grad_accum = 1;
  static const struct option opts[] = {
      {"config", required_argument, 0, 'c'},  {"data", required_argument, 0, 'd'},
      {"steps", required_argument, 0, 's'},   {"seed", required_argument, 0, 'S'},
      {"log-json", required_argument, 0, 'j'}, {"offload-optimizer", required_argument, 0, 'o'},
      {"nvme-path", required_argument, 0, 'n'}, {"threads", required_argument, 0, 't'},
      {"no-sample", no_argument, 0, 'N'},     {"help", no_argument, 0, 'h'},
      {"offload-param", required_argument, 0, 'P'}, {"device-memory-limit", required_argument, 0, 'L'},
      {"device", required_argument, 0, 'D'},  {"dry-run", no_argument, 0, 'y'},
      {"activation-checkpointing", required_argument, 0, 'A'}, {"save", required_argument, 0, 'v'},
      {"save-every", required_argument, 0, 'E'}, {"keep-last", required_argument, 0, 'K'},
      {"resume", required_argument, 0, 'R'},   {"export-safetensors", required_argument, 0, 'X'},
      {"export-dtype", required_argument, 0, 'T'}, {"micro-batch", required_argument, 0, 'M'},
      {"grad-accum", required_argument, 0, 'G'}, {0, 0, 0, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    switch (c) {
      case 'c': config_path = optarg; break;
      case 'd': data_override = optarg; break;
      case 's': if (parse_i64("--steps", optarg, 1, INT64_MAX / 2, &steps_override)) return 2; break;
      case 'S': if (parse_i64("--seed", optarg, 0, INT64_MAX, &seed_override)) return 2; break;
      case 'j': log_json = optarg; break;
      case 'o': offload_override = optarg; break;
      case 'n': nvme_override = optarg; break;
      case 't': if (parse_i64("--threads", optarg, 1, 4096, &threads)) return 2; break;
      case 'N': do_sample = 0; break;
      case 'P': param_override = optarg; break;
      case 'L': if (parse_i64("--device-memory-limit", optarg, 0, INT64_MAX, &limit_override)) return 2; break;
      case 'D': device_override = optarg; break;
      case 'y': dry_run = 1; break;
      case 'A': ckpt_override = optarg; break;
      case 'v': save_root = optarg; break;
      case 'E': if (parse_i64("--save-every", optarg, 1, INT64_MAX, &save_every)) return 2; break;
      case 'K': if (parse_i64("--keep-last", optarg, 0, INT_MAX, &keep_last)) return 2; break;
      case 'R': resume = optarg; break;
      case 'X': export_path = optarg; break;
      case 'T': export_dtype = optarg; break;
      case 'M': if (parse_i64("--micro-batch", optarg, 1, INT_MAX, &micro_batch)) return 2; break;
      case 'G': if (parse_i64("--grad-accum", optarg, 1, INT_MAX, &grad_accum)) return 2; break;
      case 'h': usage(stdout); return 0;
      default: usage(stderr); return 2;
    }
  }
  if (optind < argc) return die("unexpected argument '%s' (see --help)%s", argv[optind], "");
  if (strcmp(export_dtype, "fp32") && strcmp(export_dtype, "bf16"))
    return die("--export-dtype: expected fp32 or bf16, got '%s'%s", export_dtype, "");
  if (resume && !strcmp(resume, "latest") && !save_root)
    return die("--resume latest: needs --save DIR (the checkpoints' root)%s%s", "", "");
  if (save_every > 0 && !save_root) return die("--save-every: needs --save DIR%s%s", "", "");

  /* ---- configuration: zo-train's own blocks first, so the DeepSpeed part's "auto" values can come from them */
  train_settings ts;
  char err[1024];
  train_settings_defaults(&ts);
  if (train_settings_load(config_path, &ts, err, sizeof err)) return die("%s%s", err, "");
  if (gpt_config_check(&ts.model, err, sizeof err)) return die("%s: %s", config_path, err);
  if (data_override) snprintf(ts.data_path, sizeof ts.data_path, "%s", data_override);
  if (steps_override > 0) ts.steps = steps_override;
  zo_config_auto av;
  zo_config_auto_init(&av);
  av.hidden_size = ts.model.d_model;
  av.train_micro_batch_size_per_gpu = micro_batch;
  av.gradient_accumulation_steps = grad_accum;
  av.lr = 3e-4, av.beta1 = 0.9, av.beta2 = 0.999, av.eps = 1e-8, av.weight_decay = 0.0; /* as HF TrainingArguments, */
  av.gradient_clipping = 1.0, av.warmup_num_steps = 0, av.total_num_steps = ts.steps;   /* lr 3e-4 (HF: 5e-5) */
  av.fp16 = 0, av.bf16 = 1;
  /* ---- ranks: one, or what mpirun (or torchrun's variables) asks for; only rank 0 prints */
  zo_comm_t *comm = NULL, *nccl = NULL;
  if (zo_comm_create_from_env(&comm) != ZO_OK) return die("%s%s", zo_last_error(), "");
  const int rank = zo_comm_rank(comm), world = zo_comm_size(comm);
  if (rank != 0 && !freopen("/dev/null", "w", stdout)) return die("rank %s: cannot silence stdout%s", "> 0", "");
  zo_config_t cfg;
  zo_config_opts copts = {.app_blocks = train_app_blocks, .world_size = world, .auto_values = &av};
  /* the values filled in for "auto" are info lines: shown here unless ZO_LOG_LEVEL says otherwise */
  const int own_log = getenv("ZO_LOG_LEVEL") == NULL;
  if (own_log) zo_log_set_handler(config_log, NULL, ZO_LOG_INFO);
  const zo_status cst = zo_config_load_file(config_path, &copts, &cfg);
  if (own_log) zo_log_set_handler(NULL, NULL, ZO_LOG_WARN);
  if (cst != ZO_OK) return die("%s%s", zo_last_error(), "");
  if (seed_override >= 0) ts.seed = (uint64_t)seed_override;
  if (ckpt_override) {
    if (strcmp(ckpt_override, "on") && strcmp(ckpt_override, "off"))
      return die("--activation-checkpointing: expected on or off, got '%s'%s", ckpt_override, "");
    ts.activation_checkpointing = !strcmp(ckpt_override, "on");
  }
  if (offload_override) {
    zo_offload_device dev;
    if (zo_offload_device_parse(offload_override, &dev) != ZO_OK)
      return die("--offload-optimizer: expected none, cpu or nvme, got '%s'%s", offload_override, "");
    cfg.zero.offload_optimizer.device = dev;
    if (dev != ZO_OFFLOAD_NONE && cfg.zero.stage < 1) cfg.zero.stage = 2;
  }
  if (param_override) {
    zo_offload_device dev;
    if (zo_offload_device_parse(param_override, &dev) != ZO_OK)
      return die("--offload-param: expected none, cpu or nvme, got '%s'%s", param_override, "");
    cfg.zero.offload_param.device = dev;
    if (dev != ZO_OFFLOAD_NONE) cfg.zero.stage = 3;
  }
  if (limit_override >= 0) cfg.zoffload.device_memory_limit = limit_override;
  if (device_override && zo_device_kind_parse(device_override, &cfg.zoffload.device_kind) != ZO_OK)
    return die("--device: expected auto, cuda or host, got '%s'%s", device_override, "");
  if (nvme_override) {
    snprintf(cfg.zero.offload_optimizer.nvme_path, sizeof cfg.zero.offload_optimizer.nvme_path, "%s", nvme_override);
    snprintf(cfg.zero.offload_param.nvme_path, sizeof cfg.zero.offload_param.nvme_path, "%s", nvme_override);
  }
  if (cfg.zero.offload_optimizer.device == ZO_OFFLOAD_NVME && !cfg.zero.offload_optimizer.nvme_path[0])
    return die("zero_optimization.offload_optimizer.nvme_path: required when device is \"nvme\" (or pass --nvme-path)%s%s",
               "", "");
  if (threads > 0) {
    gpt_set_threads((int)threads);
    cfg.zoffload.adam_threads = (int)threads;
  }
  /* The batch as zo-train computes with it: micro x ranks x seq_len tokens (an int) per forward, gas forwards per
   * step. The library takes any int64 whose product fits; zo-train refuses, naming the key, what an int cannot hold. */
  const int T = ts.model.seq_len;
  const int64_t b_max = INT_MAX / ((int64_t)T * world);
  if (cfg.train_micro_batch_size_per_gpu > b_max)
    return die_i64("train_micro_batch_size_per_gpu", cfg.train_micro_batch_size_per_gpu, 1, b_max,
                   "micro-batch x model.seq_len x ranks tokens must fit in an int");
  if (cfg.gradient_accumulation_steps > INT_MAX)
    return die_i64("gradient_accumulation_steps", cfg.gradient_accumulation_steps, 1, INT_MAX, "a loop count");
  const int B = (int)cfg.train_micro_batch_size_per_gpu, gas = (int)cfg.gradient_accumulation_steps; /* in range */

  /* ---- where the model computes: cuda when zoffload.device says so, or "auto" finds a GPU and this zo-train
   * has CUDA compute; else the host device (the CPU model) */
  const int n_gpus = zo_device_cuda_count();
  zo_device_kind dev_kind = cfg.zoffload.device_kind;
  if (dev_kind == ZO_DEVICE_AUTO) {
    dev_kind = n_gpus > 0 && train_model_cuda_built() ? ZO_DEVICE_CUDA : ZO_DEVICE_HOST;
    if (n_gpus > 0 && !train_model_cuda_built())
      printf("zo-train: zoffload.device \"auto\": %d CUDA device%s visible, but this zo-train was built without CUDA "
             "compute (no nvcc at configure time): using the host device\n", n_gpus, n_gpus == 1 ? "" : "s");
  }
  const int cuda = dev_kind == ZO_DEVICE_CUDA;
  if (cuda && !train_model_cuda_built())
    return die("zoffload.device is \"cuda\", but this zo-train was built without CUDA compute (no nvcc at configure "
               "time): rebuild with the CUDA toolkit, or set zoffload.device to \"host\"%s%s", "", "");
  const int standin = cuda && n_gpus == 0 && dry_run; /* plan a GPU run on a machine without one */
  if (cuda && n_gpus == 0 && !dry_run)
    return die("zoffload.device is \"cuda\", but no CUDA device is visible (%s); set zoffload.device to \"auto\" or "
               "\"host\", or plan with --dry-run%s", getenv("CUDA_VISIBLE_DEVICES") ? "CUDA_VISIBLE_DEVICES is set"
               : "no GPU or driver", "");

  const int np = gpt_num_params(&ts.model);
  const size_t total = gpt_total_elems(&ts.model);
  const double flops_tok = train_model_flops_per_token(&ts.model, T);

  /* ---- data (not for a dry run) */
  data_loader *data = NULL;
  int n_val = 0;
  if (!dry_run) {
    if (data_open(ts.data_path, ts.val_fraction, ts.data_seed, T, &data, err, sizeof err)) return die("%s%s", err, "");
    n_val = data_val_windows(data, T, ts.val_windows);
  }

  /* ---- engine and model */
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  int rc = 1;
  int stop_all = 0;        /* every rank saw a stop by the end of the last step (see the loop) */
  int64_t saved_step = -1; /* the step of the last checkpoint this run wrote */
  zo_engine_t *eng = NULL;
  train_model *model = NULL;
  FILE *jf = NULL;
  zo_param_t **params = NULL;
  float *init = NULL;
  zo_device_t *dev = NULL;
  uint8_t *in = NULL, *tg = NULL;
  gpt_param_spec *specs = calloc(np, sizeof *specs);
  params = calloc(np, sizeof *params);
  /* Every rank draws the whole global micro-batch (B x world windows) from the same generator and trains on its
   * own B rows: the same samples as one rank with micro-batch B x world, whatever the number of ranks. */
  in = malloc((size_t)B * world * T);
  tg = malloc((size_t)B * world * T);
  if (!specs || !params || !in || !tg) {
    fprintf(stderr, "zo-train: error: out of memory\n");
    goto out;
  }
  gpt_param_specs(&ts.model, specs);
  /* The device: kind as resolved above, ordinal from LOCAL_RANK, memory limit from zoffload.device_memory_limit.
   * A dry run of a cuda config without a GPU plans on a host device of that capacity. */
  if (zo_device_create(standin ? ZO_DEVICE_HOST : dev_kind, zo_device_default_ordinal(),
                       (size_t)cfg.zoffload.device_memory_limit, &dev) != ZO_OK)
    goto engine_error;
  if (cfg.zoffload.host_link_gbps > 0 && zo_device_set_link_gbps(dev, cfg.zoffload.host_link_gbps) != ZO_OK)
    goto engine_error;
  /* Several ranks on GPUs: the engine's collectives over NCCL (bootstrapped over MPI), where this zoffload has it;
   * zo-train's own (the loss) stay on MPI. */
  if (world > 1 && cuda && !standin) {
    if (zo_comm_create_nccl(dev, comm, &nccl) == ZO_OK) {
      printf("zo-train: collectives: nccl over %d GPUs\n", world);
    } else {
      printf("zo-train: collectives: mpi (host memory): no nccl: %s\n", zo_last_error());
    }
  } else if (world > 1) {
    printf("zo-train: collectives: mpi over %d ranks\n", world);
  }
  if (zo_engine_create(&cfg, dev, nccl ? nccl : comm, &eng) != ZO_OK) goto engine_error;
  for (int i = 0; i < np; i++) {
    if (zo_engine_register_param(eng, specs[i].name, specs[i].n_elems, &params[i]) != ZO_OK) goto engine_error;
    const int64_t dims[2] = {specs[i].shape[0], specs[i].shape[1]};
    if (zo_engine_set_param_shape(params[i], specs[i].ndim, dims) != ZO_OK) goto engine_error;
  }

  const char *tier_name[] = {"none", "cpu", "nvme"};
  printf("zo-train: %s | model %d layers, %d heads, d_model %d, seq_len %d, vocab %d: %zu parameters in %d tensors, "
         "%.3g model FLOPs per token (6N + 12LCT)\n", config_path, ts.model.n_layer, ts.model.n_head,
         ts.model.d_model, T, ts.model.vocab, total, np, flops_tok);
  printf("zo-train: batch %lld = %d micro x %d accum x %d rank%s | optimizer state: %s | parameters: %s | state dtype: %s | "
         "working weights: %s | activation checkpointing: %s | compute: %s\n", (long long)cfg.train_batch_size, B, gas, world,
         world == 1 ? "" : "s",
         tier_name[cfg.zero.offload_optimizer.device],
         cfg.zero.offload_param.device == ZO_OFFLOAD_NONE ? "device" : tier_name[cfg.zero.offload_param.device],
         zo_dtype_name(cfg.zoffload.optimizer_state_dtype ? ZO_DTYPE_BF16 : ZO_DTYPE_F32),
         zo_dtype_name(zo_engine_working_dtype(eng)), ts.activation_checkpointing ? "on" : "off",
         cuda ? "cuda" : "cpu");
  /* The start-up budget, before the model or any tier is allocated: a model that cannot fit is refused here. */
  int brc = budget(eng, &ts, B, cuda, standin, dry_run);
  if (dry_run) {
    rc = brc ? 1 : 0;
    if (!brc) printf("zo-train: dry run: the configuration fits\n");
    goto out;
  }
  if (brc) goto out;
  if (train_model_create(&ts.model, B, ts.activation_checkpointing, eng, dev, params, &model, err, sizeof err)) {
    fprintf(stderr, "zo-train: error: %s\n", err);
    goto out;
  }
  if (zo_engine_finalize(eng) != ZO_OK) goto engine_error;
  size_t max_n = 0;
  for (int i = 0; i < np; i++) max_n = specs[i].n_elems > max_n ? specs[i].n_elems : max_n;
  init = malloc(max_n * sizeof(float));
  if (!init) goto out;
  for (int i = 0; i < np; i++) {
    gpt_param_init(&ts.model, i, ts.seed, init);
    if (zo_engine_load_param(eng, params[i], init) != ZO_OK) goto engine_error;
  }
  /* ---- resume: the engine's state and the loop's position from a checkpoint */
  train_position pos = {.step = 0, .rng = ts.seed ^ 0x9e3779b97f4a7c15ull, .skipped = 0};
  if (resume) {
    const char *from = strcmp(resume, "latest") ? resume : save_root;
    char lp[4096];
    snprintf(lp, sizeof lp, "%s/latest", from);
    if (!strcmp(resume, "latest") && access(lp, F_OK) != 0) {
      printf("zo-train: --resume latest: no checkpoint under %s yet: starting from step 0\n", from);
    } else {
      if (train_ckpt_load(eng, from, &ts.model, &pos, err, sizeof err)) {
        fprintf(stderr, "zo-train: error: --resume: %s\n", err);
        goto out;
      }
      if (pos.step > ts.steps) { /* nothing to train, and "0 steps, train loss nan" is no answer */
        fprintf(stderr, "zo-train: error: --resume: the checkpoint under %s is at step %lld, past --steps %lld\n",
                from, (long long)pos.step, (long long)ts.steps);
        goto out;
      }
      printf("zo-train: resumed from %s at step %lld\n", from, (long long)pos.step);
    }
  }
  if (log_json && rank == 0 && !(jf = fopen(log_json, "w"))) {
    fprintf(stderr, "zo-train: error: cannot write --log-json '%s': %s\n", log_json, strerror(errno));
    goto out;
  }
  const double peak_tflops = zo_device_peak_tflops(dev);
  printf("zo-train: corpus %s: %zu bytes in %d files; val %d windows | Adam SIMD: %s\n", ts.data_path,
         data_total_bytes(data), data_num_files(data), n_val, zo_simd_name(zo_simd_resolve(ZO_SIMD_AUTO)));
  char peak_s[64] = "unknown: no MFU";
  if (peak_tflops > 0) snprintf(peak_s, sizeof peak_s, "%.0f TFLOP/s (MFU against it)", peak_tflops);
  printf("zo-train: device %s (zoffload.device \"%s\") | model %s | dense bf16 peak %s\n", zo_device_name(dev),
         zo_device_kind_name(cfg.zoffload.device_kind), train_model_describe(model), peak_s);
  fflush(stdout);

  /* ---- training loop */
  uint64_t rng = pos.rng;
  double t_fetch = 0, t_opt = 0, t_swap = 0, t_adam = 0, t_steps = 0, t_comm = 0, comm_bytes = 0;
  double t_start = zo_clock_s(), t_window = zo_clock_s();
  int64_t tokens_window = 0, skipped = pos.skipped;
  double first_val = NAN, last_val = NAN, last_loss = NAN;
  const int64_t print_every = cfg.steps_per_print > 0 ? cfg.steps_per_print : 10; /* int64 end to end */
  int64_t step;
  /* Evaluation passes fetch through the same hook but outside the trace. */
  zo_engine_set_trace(eng, 0);
  first_val = eval_val(model, data, B, T, n_val, in, tg);
  zo_engine_set_trace(eng, 1);
  if (isnan(first_val)) goto model_error;
  printf("step %5lld/%lld | val %.4f (%s; ln(%d) = %.4f)\n", (long long)pos.step, (long long)ts.steps, first_val,
         pos.step ? "resumed weights" : "initial weights", ts.model.vocab, log((double)ts.model.vocab));
  fflush(stdout); /* the loop starts here: a script waiting to signal a step in progress reads this line */
  const double fwd0 = train_model_forward_seconds(model), bwd0 = train_model_backward_seconds(model);
  double eval_fwd = 0; /* forward seconds spent on validation after the start */
  t_start = t_window = zo_clock_s();
  /* Several ranks stop together: a rank's signal is summed into the loss all-reduce of the step it lands in, so
   * every rank leaves after the same step (a rank stopping alone would leave the others in a collective). */
  for (step = pos.step + 1; step <= ts.steps && !(world > 1 ? stop_all : g_stop); step++) {
    const double t_step0 = zo_clock_s();
    const double loss_scale = zo_engine_loss_scale(eng);
    if (train_model_zero_grad(model)) goto model_error;
    double loss = 0;
    for (int micro = 0; micro < gas; micro++) {
      if (data_next_batch(data, DATA_TRAIN, B * world, T, &rng, in, tg)) {
        fprintf(stderr, "zo-train: error: cannot sample a training batch\n");
        goto out;
      }
      float l = train_model_forward(model, in + (size_t)rank * B * T, tg + (size_t)rank * B * T, B, T);
      if (isnan(l)) goto model_error;
      loss += l / gas;
      if (train_model_backward(model, (float)(loss_scale / gas), micro == gas - 1)) goto model_error;
    }
    tokens_window += (int64_t)B * T * gas * world; /* the job's tokens */
    double t2 = zo_clock_s();
    zo_step_info info;
    if (zo_engine_step(eng, &info) != ZO_OK) goto engine_error;
    if (world > 1) { /* the loss of the global batch: the mean over the ranks; whether any rank was signalled */
      double red[2] = {loss, g_stop ? 1.0 : 0.0};
      if (zo_comm_all_reduce_f64(comm, red, 2) != ZO_OK) goto engine_error;
      loss = red[0] / world;
      stop_all = red[1] > 0;
    }
    last_loss = loss;
    t_opt += zo_clock_s() - t2;
    t_swap += info.swap_s;
    t_adam += info.adam_s;
    t_fetch += info.fetch_wait_s;
    t_comm += info.comm_s;
    comm_bytes += (double)info.comm_bytes;
    t_steps += zo_clock_s() - t_step0;
    skipped += info.skipped;

    if (step % print_every == 0 || step == ts.steps) {
      double tw = zo_clock_s() - t_window;
      const double f0 = train_model_forward_seconds(model);
      zo_engine_set_trace(eng, 0);
      double val = eval_val(model, data, B, T, n_val, in, tg);
      zo_engine_set_trace(eng, 1);
      if (isnan(val)) goto model_error;
      eval_fwd += train_model_forward_seconds(model) - f0;
      last_val = val;
      zo_engine_mem mem;
      zo_engine_mem_info(eng, &mem);
      char db[32], hb[32], nb[32], al[32], ac[32];
      zo_format_bytes(al, sizeof al, (double)mem.arena.live_bytes);
      zo_format_bytes(ac, sizeof ac, (double)mem.arena.capacity);
      zo_format_bytes(db, sizeof db, (double)mem.device_bytes);
      zo_format_bytes(hb, sizeof hb, (double)mem.host_bytes);
      zo_format_bytes(nb, sizeof nb, (double)mem.nvme_bytes);
      const double tok_s = tokens_window / tw, tflops = tok_s * flops_tok / 1e12;
      const double mfu = peak_tflops > 0 ? tflops / peak_tflops : 0;
      const double t_fwd = train_model_forward_seconds(model) - fwd0 - eval_fwd;
      const double t_bwd = train_model_backward_seconds(model) - bwd0;
      double per = 1e3 / (double)step; /* cumulative ms per step */
      char mfu_s[32] = "";
      if (mfu > 0) snprintf(mfu_s, sizeof mfu_s, " MFU %.1f%%", 100 * mfu);
      printf("step %5lld/%lld | loss %.4f | val %.4f | lr %.3e | %7.0f tok/s %.2f TFLOP/s%s | ms/step %.1f: fwd %.1f "
             "bwd %.1f opt %.1f (adam %.1f swap %.1f) fetch wait %.1f | device %s (peak %.1f MiB) host %s nvme %s | "
             "arena %s of %s live, frag %.2f, %llu compactions%s\n",
             (long long)step, (long long)ts.steps, loss, val, info.lr, tok_s, tflops, mfu_s, t_steps * per,
             t_fwd * per, t_bwd * per, t_opt * per, t_adam * per, t_swap * per, t_fetch * per, db,
             mem.device_peak_bytes / 1048576.0, hb, nb, al, ac, mem.arena.fragmentation,
             (unsigned long long)mem.arena.compactions, info.skipped ? " | overflow: skipped" : "");
      fflush(stdout);
      if (jf) {
        step_log l = {.step = step, .loss = loss, .val = val, .lr = info.lr, .tok_s = tok_s, .tflops = tflops,
                      .mfu = mfu, .loss_scale = loss_scale, .grad_norm = info.grad_norm, .skipped = info.skipped,
                      .step_s = t_steps, .fwd_s = t_fwd, .bwd_s = t_bwd, .opt_s = t_opt, .adam_s = t_adam,
                      .swap_s = t_swap, .fetch_s = t_fetch};
        write_json(jf, &l, &mem);
      }
      t_window = zo_clock_s();
      tokens_window = 0;
    }
    if (save_root && ((save_every > 0 && step % save_every == 0) || step == ts.steps)) {
      const double ts0 = zo_clock_s();
      const train_position now = {.step = step, .rng = rng, .skipped = skipped};
      if (save_step(eng, save_root, &now, &ts, (int)keep_last)) goto out;
      t_window += zo_clock_s() - ts0; /* the save's time is not training time */
      saved_step = step;
    }
  }
  if (zo_engine_synchronize(eng) != ZO_OK) goto engine_error; /* a delayed update still in flight */
  if (g_stop || stop_all) {
    printf("zo-train: interrupted (%s) after step %lld; cleaning up\n", g_stop ? strsignal(g_stop) : "another rank",
           (long long)step - 1);
    /* Preempted: keep the last completed step, as a scheduler expects (the step in progress at the signal was
     * finished, not abandoned, so the engine's state is that step's). Nothing new since the start: nothing to save. */
    if (save_root && step - 1 > pos.step && saved_step != step - 1) {
      const train_position now = {.step = step - 1, .rng = rng, .skipped = skipped};
      if (save_step(eng, save_root, &now, &ts, (int)keep_last)) goto out;
    }
    fflush(stdout);
  }
  if (export_path) {
    const zo_dtype xd = strcmp(export_dtype, "bf16") ? ZO_DTYPE_F32 : ZO_DTYPE_BF16;
    if (zo_engine_export_safetensors(eng, export_path, xd) != ZO_OK) goto engine_error;
    printf("zo-train: weights written to %s (safetensors, %s)\n", export_path, export_dtype);
  }
  double wall = zo_clock_s() - t_start;
  printf("zo-train: done: %lld steps in %.1f s%s | train loss %.4f | val loss %.4f -> %.4f | skipped steps %lld\n",
         (long long)(step - 1 - pos.step), wall, pos.step ? " (after the resumed ones)" : "", last_loss, first_val,
         last_val, (long long)skipped);
  if (step - 1 > pos.step) { /* where a step's time went, and how much of the offload work was hidden */
    const double t_fwd = train_model_forward_seconds(model) - fwd0 - eval_fwd;
    const double t_bwd = train_model_backward_seconds(model) - bwd0;
    const double n = (double)(step - 1 - pos.step), compute = (t_fwd + t_bwd - t_fetch) / n;
    const double bound = fmax(compute, fmax(t_adam / n, t_swap / n));
    printf("zo-train: per step %.1f ms = compute %.1f (forward + backward less fetch waits) + exposed: fetch %.1f, "
           "optimizer step %.1f (adam %.1f, swap %.1f) | overlap efficiency (step / max(compute, adam, swap)) %.3f\n",
           t_steps / n * 1e3, compute * 1e3, t_fetch / n * 1e3, t_opt / n * 1e3, t_adam / n * 1e3, t_swap / n * 1e3,
           t_steps / n / bound);
    zo_engine_mem mem;
    zo_engine_mem_info(eng, &mem);
    const double tok_s = n * B * T * gas * world / t_steps, tflops = tok_s * flops_tok / 1e12;
    char mfu_s[48] = "";
    if (peak_tflops > 0) snprintf(mfu_s, sizeof mfu_s, " | MFU %.1f%%", 100 * tflops / peak_tflops);
    printf("zo-train: throughput %.0f tok/s | %.2f model TFLOP/s%s | peak device memory %.1f MiB\n", tok_s, tflops,
           mfu_s, mem.device_peak_bytes / 1048576.0);
    if (world > 1 && log_ranks(comm, &mem, t_comm / n, comm_bytes / n) != 0) goto engine_error;
  }

  if (do_sample && ts.sample_bytes > 0 && !g_stop && !stop_all) {
    zo_engine_set_trace(eng, 0);
    uint8_t *s = malloc(ts.sample_bytes + 1);
    static const uint8_t prompt[] = "The ";
    int src = s ? train_model_sample(model, prompt, 4, ts.sample_bytes, (float)ts.temperature, ts.seed, s) : -1;
    if (src == 0) {
      s[ts.sample_bytes] = 0;
      for (int i = 0; i < ts.sample_bytes; i++)
        if (s[i] != '\n' && s[i] != '\t' && (s[i] < 32 || s[i] > 126)) s[i] = '?';
      printf("--- sample (temperature %.2f) ---\nThe %s\n---\n", ts.temperature, (char *)s);
    } else if (src == 1) {
      printf("zo-train: no sample: %s\n", train_model_error(model));
    }
    free(s);
    if (src < 0) goto model_error;
  }
  rc = 0;
  goto out;

model_error:
  fprintf(stderr, "zo-train: error: %s\n", or_unknown(train_model_error(model)));
  goto out;
engine_error:
  fprintf(stderr, "zo-train: error: %s\n", or_unknown(zo_last_error()));
out:
  if (jf) fclose(jf);
  zo_engine_destroy(eng);
  train_model_destroy(model);
  zo_comm_destroy(nccl); /* its stream is on dev */
  zo_device_destroy(dev);
  data_close(data);
  zo_comm_destroy(comm);
  free(specs);
  free(params);
  free(init);
  free(in);
  free(tg);
  /* Stopped by a signal: say so as a shell does, 128 + its number. A failure on the way (a save that failed, say)
   * stays exit 1. */
  if ((g_stop || stop_all) && rc == 0) rc = 128 + (g_stop ? (int)g_stop : SIGTERM);
  return rc;
}
