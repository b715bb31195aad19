/*
 * zo-train - trains a GPT-style byte-level language model on real text with
 * every parameter owned by the zoffload engine: fp32 master weights and Adam
 * state on the tier that zero_optimization.offload_optimizer.device names.
 * Forward and backward run on a GPU (model.h: cuda, bf16 with cuBLAS) when
 * zoffload.device resolves to cuda, else on the CPU (the host device).
 * main() reads as the run's table of contents; the command line and the
 * config it names are options.c's, what it prints while and after training
 * report.c's.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ckpt.h"
#include "data.h"
#include "gpt.h"
#include "job.h"
#include "train_model.h"
#include "options.h"
#include "predict.h"
#include "probe.h"
#include "report.h"
#include "zoffload/speeds.h"
#include "train_config.h"
#include "zoffload/adam.h"
#include "zoffload/budget.h"
#include "zoffload/plan.h"
#include "zoffload/checkpoint.h"
#include "zoffload/config.h"
#include "zoffload/engine.h"

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

/* Never an empty "zo-train: error: " line: a failure that left no message says so (a bug to
 * report). */
static const char *or_unknown(const char *msg) {
  return msg && msg[0]
             ? msg
             : "failed without a message (a zo-train bug: please report the command and config)";
}

/* Mean loss over the fixed validation windows. */
static double eval_val(train_model *m, const data_loader *d, int B, int T, int n_windows,
                       uint8_t *in, uint8_t *tg) {
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

/*
 * --assume-host-memory / --assume-nvme-free (dry run only): the host and nvme
 * lines of @b measured against the machine the run is planned for instead of
 * this one. The pinned line was already made against the assumed MemTotal
 * (budget() sets the library's ZO_TEST_MEMTOTAL before zo_engine_budget, so
 * zoffload.pinned_fraction applies exactly as on that machine).
 */
static void assume_machine(const train_opts *o, zo_budget *b) {
  char a[32];
  for (int i = 0; i < b->n_lines; i++) {
    zo_budget_line *l = &b->line[i];
    int64_t v = l->tier == ZO_TIER_HOST   ? o->assume_host
                : l->tier == ZO_TIER_NVME ? o->assume_nvme
                                          : -1;
    if (v < 0) continue;
    l->available = (size_t)v;
    snprintf(l->source, sizeof l->source, "%s",
             l->tier == ZO_TIER_HOST ? "--assume-host-memory" : "--assume-nvme-free");
    const int fits = l->need != SIZE_MAX && l->need <= l->available;
    char n[32];
    if (!fits && l->tier == ZO_TIER_NVME) /* the library's advice names this machine's free bytes */
      snprintf(
          l->advice, sizeof l->advice,
          "point the nvme_path at a file system with at least %s free "
          "(--assume-nvme-free gives %s), or set zero_optimization.offload_optimizer.device to \"cpu\"",
          zo_format_bytes(n, sizeof n, (double)l->need), zo_format_bytes(a, sizeof a, (double)v));
    else if (!fits && (l->fits || !l->advice[0]))
      snprintf(l->advice, sizeof l->advice,
               "offload more (zero_optimization.offload_optimizer / offload_param), or "
               "plan for more memory");
    if (fits) l->advice[0] = 0;
    l->fits = fits;
  }
  if (o->assume_host >= 0) {
    printf("zo-train: dry run for a machine with %s of host memory (--assume-host-memory %lld)\n",
           zo_format_bytes(a, sizeof a, (double)o->assume_host), (long long)o->assume_host);
  }
  if (o->assume_nvme >= 0)
    printf("zo-train: dry run for nvme_path file systems with %s free (--assume-nvme-free %lld)\n",
           zo_format_bytes(a, sizeof a, (double)o->assume_nvme), (long long)o->assume_nvme);
  b->fits = 1;
  for (int i = 0; i < b->n_lines; i++) b->fits &= b->line[i].fits;
}

/*
 * The start-up budget of the engine plus the model (model.h), before the
 * model exists: printed for --dry-run, checked otherwise. @standin: the
 * device is a host device standing in for a GPU that is not here (a dry run
 * of a cuda config on a machine without one), whose bytes are then not host
 * memory, and the plan is the GPU run's (zo_engine_plan() for ZO_DEVICE_CUDA). @o: --assume-host-memory / --assume-nvme-free (assume_machine()).
 */
static int budget(zo_engine_t *eng, const train_settings *ts, int B, int cuda, int standin,
                  int print, const train_opts *o, train_predict *tp, double compute_s,
                  const char *compute_src, int is_auto, int rank0) {
  size_t app[4];
  if (train_model_bytes(&ts->model, B, ts->activation_checkpointing, cuda, ts->model_streamed,
                        ts->cpu_gemm_bf16, zo_engine_grad_dtype(eng), train_model_hand_dtype(eng),
                        app)) {
    fprintf(
        stderr,
        "zo-train: error: the CUDA model's sizes are unknown to a build without CUDA compute\n");
    return -1;
  }
  zo_budget b;
  if (o->assume_host >= 0) { /* the pinned rule's MemTotal (offload/budget.c mem_total) */
    char v[32];
    snprintf(v, sizeof v, "%lld", (long long)o->assume_host);
    setenv("ZO_TEST_MEMTOTAL", v, 1);
  }
  /* a stand-in plans the GPU run's buffers (device Adam's norm partials and their host copy, no host staging ring),
   * not the host device's: the same plan, and so the same bytes, as the run's finalize */
  const zo_device_kind plan_kind = standin ? ZO_DEVICE_CUDA : ZO_DEVICE_AUTO;
  /* the placement (zoffload.placement "auto" chooses the split here; "config" keeps it) and its
   * predicted step */
  if (train_predict_start(tp, eng, compute_s, compute_src, plan_kind, app, o->assume_host,
                          o->assume_nvme, standin, is_auto, rank0))
    return -1;
  if (zo_engine_budget_for(eng, plan_kind, app, &b) != ZO_OK) {
    fprintf(stderr, "zo-train: error: %s\n", zo_last_error());
    return -1;
  }
  if (standin) { /* the stand-in's bytes are the GPU's, not the host's */
    b.line[ZO_TIER_HOST].need -= b.line[ZO_TIER_DEVICE].need;
    b.line[ZO_TIER_HOST].fits = b.line[ZO_TIER_HOST].need <= b.line[ZO_TIER_HOST].available;
    char *src = strstr(b.line[ZO_TIER_HOST].source, "; includes the host device");
    if (src) *src = 0;
    snprintf(b.line[ZO_TIER_DEVICE].where, sizeof b.line[ZO_TIER_DEVICE].where,
             "cuda (no GPU here: planned)");
    snprintf(b.line[ZO_TIER_DEVICE].source, sizeof b.line[ZO_TIER_DEVICE].source, "%s",
             b.line[ZO_TIER_DEVICE].available == SIZE_MAX
                 ? "not checked: pass --device-memory-limit BYTES"
                 : "--device-memory-limit / zoffload.device_memory_limit");
    b.fits = 1;
    for (int i = 0; i < b.n_lines; i++) b.fits &= b.line[i].fits;
  }
  if (o->assume_host >= 0 || o->assume_nvme >= 0) assume_machine(o, &b);
  if (print) {
    printf(
        "zo-train: start-up budget (bytes; caller = the model: %s):\n",
        cuda ? (ts->model_streamed
                    ? "activations, workspaces and bf16 gradient scratches on the device (group "
                      "0's and two of the largest layer group's)"
                    : "activations, workspaces and the bf16 gradient buffer on the device")
        : ts->model_streamed
            ? "activations and one layer group's fp32 weights and gradients in host memory, "
              "a gradient ring of twice the largest tensor on the device"
            : "fp32 weights, gradients and activations in host memory, the gradient hand-over buffer on the device");
    zo_budget_print(&b, stdout);
    zo_plan *plan; /* the buffers behind the engine's bytes */
    if (zo_engine_plan(eng, plan_kind, &plan) == ZO_OK) {
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

/* One checkpoint of @pos under @root (--save), its path and time printed; 0, or -1 after printing
 * the error. */
static int save_step(zo_engine_t *eng, const char *root, const train_position *pos,
                     const train_settings *ts, int keep_last) {
  const double t0 = zo_clock_s();
  char saved[4096], err[1024];
  if (train_ckpt_save(eng, root, pos, ts->seed, &ts->model, keep_last, saved, sizeof saved, err,
                      sizeof err)) {
    fprintf(stderr, "zo-train: error: --save: %s\n", err);
    return -1;
  }
  printf("zo-train: checkpoint %s (%.2f s)\n", saved, zo_clock_s() - t0);
  fflush(stdout);
  return 0;
}

static int engine_error(void) {
  train_report_live_clear();
  fprintf(stderr, "zo-train: error: %s\n", or_unknown(zo_last_error()));
  return 1;
}

static int model_error(const train_model *m) {
  train_report_live_clear();
  fprintf(stderr, "zo-train: error: %s\n", or_unknown(train_model_error(m)));
  return 1;
}

/* The batch as zo-train computes with it: micro x ranks x seq_len tokens (an int) per forward, gas forwards per
 * step. The library takes any int64 whose product fits; zo-train refuses, naming the key, what an int cannot hold. */
static int batch_shape(train_job *j) {
  j->T = j->ts.model.seq_len;
  const int64_t b_max = INT_MAX / ((int64_t)j->T * j->world);
  if (j->cfg.train_micro_batch_size_per_gpu > b_max)
    return train_die_i64("train_micro_batch_size_per_gpu", j->cfg.train_micro_batch_size_per_gpu, 1,
                         b_max, "micro-batch x model.seq_len x ranks tokens must fit in an int");
  if (j->cfg.gradient_accumulation_steps > INT_MAX)
    return train_die_i64("gradient_accumulation_steps", j->cfg.gradient_accumulation_steps, 1,
                         INT_MAX, "a loop count");
  j->B = (int)j->cfg.train_micro_batch_size_per_gpu,
  j->gas = (int)j->cfg.gradient_accumulation_steps; /* in range */
  return 0;
}

/* Where the model computes: cuda when zoffload.device says so, or "auto" finds a GPU and this zo-train has CUDA
 * compute; else the host device (the CPU model). */
static int resolve_compute(const train_opts *o, train_job *j) {
  const int n_gpus = zo_device_cuda_count();
  j->dev_kind = j->cfg.zoffload.device_kind;
  if (j->dev_kind == ZO_DEVICE_AUTO) {
    j->dev_kind = n_gpus > 0 && train_model_cuda_built() ? ZO_DEVICE_CUDA : ZO_DEVICE_HOST;
    if (n_gpus > 0 && !train_model_cuda_built())
      printf(
          "zo-train: zoffload.device \"auto\": %d CUDA device%s visible, but this zo-train was built without CUDA "
          "compute (no nvcc at configure time): using the host device\n",
          n_gpus, n_gpus == 1 ? "" : "s");
  }
  j->cuda = j->dev_kind == ZO_DEVICE_CUDA;
  if (j->cuda && !train_model_cuda_built())
    return train_die(
        "zoffload.device is \"cuda\", but this zo-train was built without CUDA compute (no nvcc at "
        "configure time): rebuild with the CUDA toolkit, or set zoffload.device to \"host\"%s%s",
        "", "");
  j->standin = j->cuda && n_gpus == 0 && o->dry_run; /* plan a GPU run on a machine without one */
  if (j->cuda && n_gpus == 0 && !o->dry_run)
    return train_die(
        "zoffload.device is \"cuda\", but no CUDA device is visible (%s); set zoffload.device to \"auto\" "
        "or \"host\", or plan with --dry-run%s",
        getenv("CUDA_VISIBLE_DEVICES") ? "CUDA_VISIBLE_DEVICES is set" : "no GPU or driver", "");
  return 0;
}

/* Config, ranks (one, or what mpirun or torchrun's variables ask for; only rank 0 prints), batch shape and where
 * the model computes. Nothing is allocated; 0, or 1 after printing the error. */
static int plan(const train_opts *o, train_job *j) {
  if (train_opts_settings(o, &j->ts)) return 1;
  if (zo_comm_create_from_env(&j->comm) != ZO_OK) return train_die("%s%s", zo_last_error(), "");
  j->rank = zo_comm_rank(j->comm), j->world = zo_comm_size(j->comm);
  if (j->rank != 0 && !freopen("/dev/null", "w", stdout))
    return train_die("rank %s: cannot silence stdout%s", "> 0", "");
  if (train_opts_config(o, j->world, &j->ts, &j->cfg) || batch_shape(j) || resolve_compute(o, j))
    return 1;
  j->np = gpt_num_params(&j->ts.model);
  j->total = gpt_total_elems(&j->ts.model);
  j->flops_tok = gpt_flops_per_token(&j->ts.model, j->T);
  return 0;
}

/* What lstat(2) says @path is, for messages; NULL when it is absent or a regular file (what a run
 * may replace). */
static const char *not_regular(const char *path) {
  struct stat sb;
  if (lstat(path, &sb) != 0 || S_ISREG(sb.st_mode)) return NULL;
  return S_ISLNK(sb.st_mode)                          ? "a symbolic link"
         : S_ISDIR(sb.st_mode)                        ? "a directory"
         : S_ISCHR(sb.st_mode) || S_ISBLK(sb.st_mode) ? "a device"
         : S_ISFIFO(sb.st_mode)                       ? "a FIFO"
                                                      : "not a regular file";
}

/* The run's outputs claimed before anything is allocated, so a run that could not write them is refused at once and
 * not after it trained. --save DIR: rank 0 holds the root for the whole run (zo_checkpoint_lock; a second run on it
 * is refused, naming this one), and its `latest` must be replaceable; --export-safetensors F must be absent or a
 * regular file (the library refuses anything else when it writes). Every rank hears rank 0's outcome. Not for a dry
 * run, which writes nothing. 0, or 1 after printing the error (on rank 0). */
static int claim_outputs(const train_opts *o, train_job *j) {
  if (o->dry_run) return 0;
  double failed = 0;
  const char *kind;
  char latest[4096];
  if (j->rank == 0 && o->save_root && zo_checkpoint_lock(o->save_root, &j->save_lock) != ZO_OK) {
    fprintf(stderr, "zo-train: error: --save: %s\n", or_unknown(zo_last_error()));
    failed = 1;
  }
  if (j->rank == 0 && !failed && o->save_root) {
    snprintf(latest, sizeof latest, "%s/latest", o->save_root);
    if ((kind = not_regular(latest))) {
      fprintf(stderr, "zo-train: error: --save: '%s' is %s, not a regular file: not replacing it\n",
              latest, kind);
      failed = 1;
    }
  }
  if (j->rank == 0 && !failed && o->export_path && (kind = not_regular(o->export_path))) {
    fprintf(
        stderr,
        "zo-train: error: --export-safetensors: '%s' is %s, not a regular file: not replacing it\n",
        o->export_path, kind);
    failed = 1;
  }
  if (j->rank == 0 && !failed &&
      o->export_path) { /* its directory must exist and take a new file, checked now */
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", o->export_path);
    char *slash = strrchr(dir, '/');
    if (!slash)
      snprintf(dir, sizeof dir, ".");
    else if (slash == dir)
      dir[1] = 0;
    else
      *slash = 0;
    struct stat sb;
    const char *why = stat(dir, &sb) != 0             ? "does not exist"
                      : !S_ISDIR(sb.st_mode)          ? "is not a directory"
                      : access(dir, W_OK | X_OK) != 0 ? "is not writable"
                                                      : NULL;
    if (why) {
      fprintf(
          stderr,
          "zo-train: error: --export-safetensors: the directory '%s' %s: the weights could not be "
          "written at the end of the run\n",
          dir, why);
      failed = 1;
    }
  }
  if (j->world > 1 && zo_comm_broadcast(j->comm, &failed, sizeof failed, 0) != ZO_OK)
    return engine_error();
  return failed != 0;
}

/* The corpus and its validation windows (not for a dry run); 0, or 1 after printing the error. */
static int open_data(train_job *j) {
  char err[1024];
  if (data_open(j->ts.data_path, j->ts.val_fraction, j->ts.data_seed, j->T, &j->data, err,
                sizeof err))
    return train_die("%s%s", err, "");
  j->n_val = data_val_windows(j->data, j->T, j->ts.val_windows);
  return 0;
}

/* The device, the collectives and the engine with every parameter registered; 0, or 1 after
 * printing the error. */
static int create_engine(train_job *j) {
  j->specs = calloc(j->np, sizeof *j->specs);
  j->params = calloc(j->np, sizeof *j->params);
  /* Every rank draws the whole global micro-batch (B x world windows) from the same generator and trains on its
   * own B rows: the same samples as one rank with micro-batch B x world, whatever the number of ranks. */
  j->in = malloc((size_t)j->B * j->world * j->T);
  j->tg = malloc((size_t)j->B * j->world * j->T);
  if (!j->specs || !j->params || !j->in || !j->tg) {
    fprintf(stderr, "zo-train: error: out of memory\n");
    return 1;
  }
  gpt_param_specs(&j->ts.model, j->specs);
  /* The device: kind as resolved by plan(), ordinal the local rank (zo_device_local_ordinal(): LOCAL_RANK,
   * OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID or SLURM_LOCALID; refused past the visible GPUs), memory limit from
   * zoffload.device_memory_limit. A dry run of a cuda config without a GPU plans on a host device of that capacity. */
  const int on_gpu = j->dev_kind == ZO_DEVICE_CUDA && !j->standin;
  int ordinal = 0;
  if (on_gpu && zo_device_local_ordinal(zo_device_cuda_count(), &ordinal) != ZO_OK)
    return engine_error();
  if (zo_device_create(j->standin ? ZO_DEVICE_HOST : j->dev_kind, ordinal,
                       (size_t)j->cfg.zoffload.device_memory_limit, &j->dev) != ZO_OK)
    return engine_error();
  if (j->cfg.zoffload.host_link_gbps > 0 &&
      zo_device_set_link_gbps(j->dev, j->cfg.zoffload.host_link_gbps) != ZO_OK)
    return engine_error();
  /* Several ranks: the engine's collectives as zoffload.comm asks. "auto": NCCL (bootstrapped over MPI) on GPUs when
   * this zoffload has it, else MPI; "nccl": NCCL; "mpi": MPI through host memory. A failed NCCL start is an error
   * (no silent fallback to MPI). zo-train's own collectives (the loss) stay on MPI. */
  const zo_comm_choice want = j->cfg.zoffload.comm;
  if (j->world > 1 && want == ZO_COMM_NCCL && !j->cuda)
    return train_die(
        "zoffload.comm is \"nccl\", but the device is not CUDA (zoffload.device %s); set zoffload.comm "
        "to \"auto\" or \"mpi\"%s",
        zo_device_kind_name(j->dev_kind), "");
  if (j->world > 1 && j->cuda && !j->standin && want != ZO_COMM_MPI &&
      (want == ZO_COMM_NCCL || ZO_HAVE_NCCL)) {
    if (zo_comm_create_nccl(j->dev, j->comm, &j->nccl) != ZO_OK)
      return train_die(
          "collectives: NCCL did not start: %s; set zoffload.comm to \"mpi\" to run the collectives "
          "over MPI through host memory%s",
          zo_last_error(), "");
    if (zo_comm_set_timeout(j->nccl, j->cfg.zoffload.comm_timeout_s) != ZO_OK)
      return engine_error();
    printf("zo-train: collectives: nccl over %d GPUs\n", j->world);
  } else if (j->world > 1) {
    printf("zo-train: collectives: mpi over %d ranks\n", j->world);
  }
  /* A dry run of a cuda config without a GPU plans on a host device: what zo_engine_create refuses on the GPU (device
   * Adam's limits) is refused here with its message, so the dry run refuses exactly what the run would. */
  if (j->standin && zo_engine_check_device(&j->cfg, ZO_DEVICE_CUDA, j->world) != ZO_OK)
    return engine_error();
  if (zo_engine_create(&j->cfg, j->dev, j->nccl ? j->nccl : j->comm, &j->eng) != ZO_OK)
    return engine_error();
  for (int i = 0; i < j->np; i++) {
    const gpt_param_spec *s = &j->specs[i];
    if (zo_engine_register_param(j->eng, s->name, s->n_elems, &j->params[i]) != ZO_OK)
      return engine_error();
    const int64_t dims[2] = {s->shape[0], s->shape[1]};
    if (zo_engine_set_param_shape(j->params[i], s->ndim, dims) != ZO_OK) return engine_error();
  }
  return 0;
}

/* The model and the job: sizes, batch, tiers, dtypes, compute. */
static void print_plan(const train_opts *o, const train_job *j) {
  const char *tier_name[] = {"none", "cpu", "nvme"};
  const zo_config_t *cfg = &j->cfg;
  printf(
      "zo-train: %s | model %d layers, %d heads, d_model %d, seq_len %d, vocab %d: %zu parameters in %d tensors, "
      "%.3g model FLOPs per token (6N + 12LCT)\n",
      o->config_path, j->ts.model.n_layer, j->ts.model.n_head, j->ts.model.d_model, j->T,
      j->ts.model.vocab, j->total, j->np, j->flops_tok);
  printf(
      "zo-train: batch %lld = %d micro x %d accum x %d rank%s | optimizer state: %s | parameters: %s | state dtype: %s | "
      "working weights: %s | activation checkpointing: %s | compute: %s\n",
      (long long)cfg->train_batch_size, j->B, j->gas, j->world, j->world == 1 ? "" : "s",
      tier_name[cfg->zero.offload_optimizer.device],
      cfg->zero.offload_param.device == ZO_OFFLOAD_NONE ? "device"
                                                        : tier_name[cfg->zero.offload_param.device],
      zo_dtype_name(cfg->zoffload.optimizer_state_dtype ? ZO_DTYPE_BF16 : ZO_DTYPE_F32),
      zo_dtype_name(zo_engine_working_dtype(j->eng)), j->ts.activation_checkpointing ? "on" : "off",
      j->cuda ? "cuda" : "cpu");
}

/* The model on the engine, finalized, with its initial weights loaded; 0, or 1 after printing the
 * error. */
static int create_model(train_job *j) {
  char err[1024];
  if (train_model_create(&j->ts.model, j->B, j->ts.activation_checkpointing, j->ts.model_streamed,
                         j->ts.cpu_gemm_bf16, j->eng, j->dev, j->params, &j->model, err,
                         sizeof err)) {
    fprintf(stderr, "zo-train: error: %s\n", err);
    return 1;
  }
  if (train_model_set_cuda_kernels(j->model, j->ts.cuda_kernels)) return model_error(j->model);
  const double t0 = zo_clock_s();
  if (zo_engine_finalize(j->eng) != ZO_OK) return engine_error();
  size_t max_n = 0;
  for (int i = 0; i < j->np; i++) max_n = j->specs[i].n_elems > max_n ? j->specs[i].n_elems : max_n;
  float *init = malloc(max_n * sizeof(float));
  if (!init) {
    fprintf(
        stderr,
        "zo-train: error: out of host memory for the initial weights of one tensor (%zu bytes)\n",
        max_n * sizeof(float));
    return 1;
  }
  /* Both halves fork over the cores (gpt_param_init: OpenMP over element pairs; load_param: the Adam pool), with
   * the same bits for any thread count; the times say where a large model's start-up goes. */
  const double t1 = zo_clock_s();
  double t_init = 0;
  for (int i = 0; i < j->np; i++) {
    const double ti = zo_clock_s();
    gpt_param_init(&j->ts.model, i, j->ts.seed, init);
    t_init += zo_clock_s() - ti;
    if (zo_engine_load_param(j->eng, j->params[i], init) != ZO_OK) {
      free(init);
      return engine_error();
    }
  }
  free(init);
  const double t2 = zo_clock_s();
  printf(
      "zo-train: start-up: tiers allocated in %.2f s | initial weights of %zu parameters in %.2f s (init %.2f s, "
      "into the engine %.2f s)\n",
      t1 - t0, j->total, t2 - t1, t_init, t2 - t1 - t_init);
  return 0;
}

/* --resume: the engine's state and the loop's position from a checkpoint; 0, or 1 after printing
 * the error. */
static int resume_from(const train_opts *o, train_job *j) {
  j->pos = (train_position){.step = 0, .rng = j->ts.seed ^ 0x9e3779b97f4a7c15ull, .skipped = 0};
  if (!o->resume) return 0;
  const char *from = strcmp(o->resume, "latest") ? o->resume : o->save_root;
  char lp[4096], err[1024];
  snprintf(lp, sizeof lp, "%s/latest", from);
  if (!strcmp(o->resume, "latest") && access(lp, F_OK) != 0) {
    printf("zo-train: --resume latest: no checkpoint under %s yet: starting from step 0\n", from);
    return 0;
  }
  if (train_ckpt_load(j->eng, from, &j->ts.model, &j->pos, err, sizeof err)) {
    fprintf(stderr, "zo-train: error: --resume: %s\n", err);
    return 1;
  }
  /* nothing to train, and "0 steps, train loss nan" is no answer */
  if (j->pos.step > j->ts.steps) {
    fprintf(
        stderr,
        "zo-train: error: --resume: the checkpoint under %s is at step %lld, past --steps %lld\n",
        from, (long long)j->pos.step, (long long)j->ts.steps);
    return 1;
  }
  /* The run continues the checkpoint's: its weights and batch RNG state, and from here its seed (sampling, the seed
   * recorded in later checkpoints). A seed asked for here is not used: say so, naming where it came from. */
  if (j->pos.seed != j->ts.seed && j->rank == 0) {
    char asked[64];
    if (o->seed_override >= 0)
      snprintf(asked, sizeof asked, "--seed %lld", (long long)o->seed_override);
    else
      snprintf(asked, sizeof asked, "train.seed %llu", (unsigned long long)j->ts.seed);
    fprintf(
        stderr,
        "zo-train: warning: --resume: %s is not used: the run continues the checkpoint's (seed %llu): its "
        "weights, batch order (RNG state) and sampling; start without --resume for a new seed\n",
        asked, (unsigned long long)j->pos.seed);
  }
  j->ts.seed = j->pos.seed;
  printf("zo-train: resumed from %s at step %lld\n", from, (long long)j->pos.step);
  return 0;
}

/* --log-json opened (rank 0), then the corpus and the device printed; 0, or 1 after printing the
 * error. */
static int open_log(const train_opts *o, train_job *j) {
  if (o->log_json && j->rank == 0 && !(j->jf = fopen(o->log_json, "w"))) {
    fprintf(stderr, "zo-train: error: cannot write --log-json '%s': %s\n", o->log_json,
            strerror(errno));
    return 1;
  }
  j->peak_tflops = zo_device_peak_tflops(j->dev);
  printf("zo-train: corpus %s: %zu bytes in %d files; val %d windows | Adam SIMD: %s\n",
         j->ts.data_path, data_total_bytes(j->data), data_num_files(j->data), j->n_val,
         zo_simd_name(zo_simd_resolve(ZO_SIMD_AUTO)));
  char peak_s[64] = "unknown: no MFU";
  if (j->peak_tflops > 0)
    snprintf(peak_s, sizeof peak_s, "%.0f TFLOP/s (MFU against it)", j->peak_tflops);
  printf("zo-train: device %s (zoffload.device \"%s\") | model %s | dense bf16 peak %s\n",
         zo_device_name(j->dev), zo_device_kind_name(j->cfg.zoffload.device_kind),
         train_model_describe(j->model), peak_s);
  fflush(stdout);
  return 0;
}

/* Mean validation loss, its fetches outside the engine's trace; NAN on a model error. */
static double validate(train_job *j) {
  zo_engine_set_trace(j->eng, 0);
  const double val = eval_val(j->model, j->data, j->B, j->T, j->n_val, j->in, j->tg);
  zo_engine_set_trace(j->eng, 1);
  return val;
}

/* One optimizer step: gas micro-batches forward and backward, zo_engine_step, the loss over the ranks; the sums in
 * @p. Returns 0, or 1 after printing the error. */
static int train_step(train_job *j, train_progress *p, double *loss_out, double *loss_scale,
                      zo_step_info *info) {
  const int B = j->B, T = j->T, gas = j->gas, world = j->world;
  /* the model's step, before it runs, from the last step's compute and disk throughput */
  train_predict_before_step(&j->pred, j->eng, p->last_compute_s, p->last_busy_s,
                            p->last_busy_bytes);
  double busy0[2];
  uint64_t bytes0[2];
  zo_engine_nvme_busy(j->eng, busy0, bytes0);
  zo_engine_mem m0;
  zo_engine_mem_info(j->eng, &m0);
  const double f0 = train_model_forward_seconds(j->model),
               b0 = train_model_backward_seconds(j->model);
  const double t_step0 = zo_clock_s();
  *loss_scale = zo_engine_loss_scale(j->eng);
  if (train_model_zero_grad(j->model)) return model_error(j->model);
  double loss = 0;
  for (int micro = 0; micro < gas; micro++) {
    if (data_next_batch(j->data, DATA_TRAIN, B * world, T, &p->rng, j->in, j->tg)) {
      fprintf(stderr, "zo-train: error: cannot sample a training batch\n");
      return 1;
    }
    /* the loss is read after backward: with the CUDA model's fused kernels the forward is only
     * queued, and nothing waits for the GPU inside a micro-batch before backward's end */
    if (train_model_forward_queue(j->model, j->in + (size_t)j->rank * B * T,
                                  j->tg + (size_t)j->rank * B * T, B, T))
      return model_error(j->model);
    if (train_model_backward(j->model, (float)(*loss_scale / gas), micro == gas - 1))
      return model_error(j->model);
    const float l = train_model_loss(j->model);
    if (isnan(l)) return model_error(j->model);
    loss += l / gas;
  }
  p->tokens_window += (int64_t)B * T * gas * world; /* the job's tokens */
  p->tokens_line += (int64_t)B * T * gas * world;
  double t2 = zo_clock_s();
  if (zo_engine_step(j->eng, info) != ZO_OK) return engine_error();
  /* the loss of the global batch: the mean over the ranks; whether any rank was signalled */
  if (world > 1) {
    double red[2] = {loss, g_stop ? 1.0 : 0.0};
    if (zo_comm_all_reduce_f64(j->comm, red, 2) != ZO_OK) return engine_error();
    loss = red[0] / world;
    p->stop_all = red[1] > 0;
  }
  p->last_loss = *loss_out = loss;
  p->t_opt += zo_clock_s() - t2;
  p->t_swap += info->swap_s;
  p->t_adam += info->adam_s;
  p->t_fetch += info->fetch_wait_s;
  p->t_comm += info->comm_s;
  p->comm_bytes += (double)info->comm_bytes;
  const double t_end = zo_clock_s();
  p->t_steps += t_end - t_step0;
  p->skipped += info->skipped;
  p->last_step_s = t_end - t_step0;
  p->last_compute_s = train_model_forward_seconds(j->model) - f0 +
                      train_model_backward_seconds(j->model) - b0 - info->fetch_wait_s;
  zo_engine_mem m1;
  zo_engine_mem_info(j->eng, &m1);
  double busy1[2];
  uint64_t bytes1[2];
  zo_engine_nvme_busy(j->eng, busy1, bytes1);
  for (int w = 0; w < 2; w++)
    p->last_busy_s[w] = busy1[w] - busy0[w],
    p->last_busy_bytes[w] = (double)(bytes1[w] - bytes0[w]);
  if (p->steps_run++ > 0) /* the first warms up: the summary compares the others */
    train_predict_after_step(&j->pred, p->last_step_s, t2 - t_step0, t_end - t2, info->adam_s,
                             (double)(m1.nvme_read_bytes - m0.nvme_read_bytes),
                             (double)(m1.nvme_write_bytes - m0.nvme_write_bytes));
  return 0;
}

/* A logged step: the validation loss (its forward time kept apart), then the step line and its
 * --log-json object (report.c); 0, or 1 after printing the error. */
static int log_step(const train_opts *o, train_job *j, train_progress *p, double loss,
                    double loss_scale, const zo_step_info *info) {
  p->t_val0 = zo_clock_s();
  const double f0 = train_model_forward_seconds(j->model);
  const double val = validate(j);
  if (isnan(val)) return model_error(j->model);
  p->eval_fwd += train_model_forward_seconds(j->model) - f0;
  p->last_val = val;
  train_report_logged(j, p, loss, val, loss_scale, info, o->verbose);
  return 0;
}

/*
 * Without --print-every, between the config's logged steps: a progress line (no validation) after
 * this run's steps 1, 2, 5, 10, 20, 50, ... below steps_per_print, and when 30 s passed since the
 * last line, so a run whose steps_per_print is 100 shows progress within its first steps.
 */
static int progress_due(const train_job *j, const train_progress *p, int64_t print_every) {
  const int64_t k = p->step - j->pos.step; /* this run's steps */
  for (int64_t d = 1; d < print_every && d <= k; d *= 10)
    if (k == d || k == 2 * d || k == 5 * d) return (k < print_every);
  return zo_clock_s() - p->t_line >= 30.0;
}

/*
 * Whether stdout is a terminal someone watches: not a pipe or file, not TERM=dumb, and not the pty
 * a launcher gives each rank and copies into its own output (Open MPI, PMI, PMIx, Slurm), where a
 * live line's carriage returns would land in logs.
 */
static int live_terminal(void) {
  static const char *const launched[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK",
                                         "SLURM_PROCID", NULL};
  if (!isatty(STDOUT_FILENO)) return 0;
  const char *term = getenv("TERM");
  if (term && !strcmp(term, "dumb")) return 0;
  for (int i = 0; launched[i]; i++)
    if (getenv(launched[i])) return 0;
  return 1;
}

/* --kernel-times: the step's GPU time by kernel class into p (the run's first step apart: warm-up). */
static int kernel_times_add(train_job *j, train_progress *p) {
  double ms[3];
  if (train_model_kernel_times(j->model, ms)) return model_error(j->model);
  double *sum = p->steps_run <= 1 ? p->kt_first : p->kt_ms;
  for (int k = 0; k < 3; k++) sum[k] += ms[k];
  if (p->steps_run > 1) p->kt_steps++;
  return 0;
}

/* --kernel-times: the GPU time since the last reading dropped (validation's forwards are not a step's). */
static int kernel_times_drop(train_job *j) {
  double ms[3];
  return train_model_kernel_times(j->model, ms) ? model_error(j->model) : 0;
}

/* --kernel-times: "kernels: gemm <ms> ms attention <ms> ms other <ms> ms" per step, the mean of the timed
 * steps (scripts parse this prefix). */
static void kernel_times_print(const train_job *j, const train_progress *p) {
  const int first = p->kt_steps == 0; /* only the first step ran: its times */
  const double *sum = first ? p->kt_first : p->kt_ms;
  const double n = first ? 1.0 : (double)p->kt_steps;
  if (p->steps_run < 1) return;
  printf(
      "kernels: gemm %.2f ms attention %.2f ms other %.2f ms (GPU time per step by kernel class, "
      "%s; %s kernels)\n",
      sum[0] / n, sum[1] / n, sum[2] / n,
      first ? "the only step, warm-up included" : "the mean of the steps after the first",
      j->ts.cuda_kernels ? "fused" : "baseline");
}

/* The training loop: the initial validation, then steps from the start position to --steps, printed every
 * --print-every or steps_per_print (with progress lines between, report.h; on a terminal a live line too)
 * and saved every --save-every, until done or signalled. 0, or 1 after printing the error. */
static int train_loop(const train_opts *o, train_job *j, train_progress *p) {
  p->rng = j->pos.rng;
  p->skipped = j->pos.skipped;
  p->first_val = p->last_val = p->last_loss = NAN;
  /* int64 end to end */
  const int64_t print_every = o->print_every > 0           ? o->print_every
                              : j->cfg.steps_per_print > 0 ? j->cfg.steps_per_print
                                                           : 10;
  p->first_val = validate(j);
  if (isnan(p->first_val)) return model_error(j->model);
  if (o->kernel_times && kernel_times_drop(j)) return 1;
  printf("step %5lld/%lld | val %.4f (%s; ln(%d) = %.4f)\n", (long long)j->pos.step,
         (long long)j->ts.steps, p->first_val, j->pos.step ? "resumed weights" : "initial weights",
         j->ts.model.vocab, log((double)j->ts.model.vocab));
  /* the loop starts here: a script waiting to signal a step in progress reads this line */
  fflush(stdout);
  p->fwd0 = train_model_forward_seconds(j->model), p->bwd0 = train_model_backward_seconds(j->model);
  p->eval_fwd = 0;
  p->t_start = p->t_window = p->t_line = zo_clock_s();
  const int live = live_terminal(); /* the step in a live line between the printed lines */
  /* Several ranks stop together: a rank's signal is summed into the loss all-reduce of the step it lands in, so
   * every rank leaves after the same step (a rank stopping alone would leave the others in a collective). */
  for (p->step = j->pos.step + 1; p->step <= j->ts.steps && !(j->world > 1 ? p->stop_all : g_stop);
       p->step++) {
    double loss, loss_scale;
    zo_step_info info;
    if (train_step(j, p, &loss, &loss_scale, &info)) return 1;
    if (o->kernel_times && kernel_times_add(j, p)) return 1;
    if (p->step % print_every == 0 || p->step == j->ts.steps) {
      if (log_step(o, j, p, loss, loss_scale, &info)) return 1;
      if (o->kernel_times && kernel_times_drop(j)) return 1; /* validation's forwards */
    } else if (o->print_every <= 0 && progress_due(j, p, print_every)) {
      train_report_progress(j, p, loss, info.skipped);
    } else if (live) {
      train_report_live(j, p, loss);
    }
    if (o->save_root &&
        ((o->save_every > 0 && p->step % o->save_every == 0) || p->step == j->ts.steps)) {
      train_report_live_clear();
      const double ts0 = zo_clock_s();
      const train_position now = {.step = p->step, .rng = p->rng, .skipped = p->skipped};
      if (save_step(j->eng, o->save_root, &now, &j->ts, (int)o->keep_last)) return 1;
      p->t_window += zo_clock_s() - ts0; /* the save's time is not training time */
      p->t_line += zo_clock_s() - ts0;
      p->saved_step = p->step;
    }
  }
  return 0;
}

/* The training loop (train_loop()), any live line erased at its end. */
static int train(const train_opts *o, train_job *j, train_progress *p) {
  const int rc = train_loop(o, j, p);
  train_report_live_clear();
  return rc;
}

/* After the loop: the delayed update drained, a signalled run's last step saved, --export-safetensors written.
 * 0, or 1 after printing the error. */
static int finish(const train_opts *o, train_job *j, const train_progress *p) {
  if (zo_engine_synchronize(j->eng) != ZO_OK)
    return engine_error(); /* a delayed update still in flight */
  if (g_stop || p->stop_all) {
    printf("zo-train: interrupted (%s) after step %lld; cleaning up\n",
           g_stop ? strsignal(g_stop) : "another rank", (long long)p->step - 1);
    /* Preempted: keep the last completed step, as a scheduler expects (the step in progress at the signal was
     * finished, not abandoned, so the engine's state is that step's). Nothing new since the start: nothing to save. */
    if (o->save_root && p->step - 1 > j->pos.step && p->saved_step != p->step - 1) {
      const train_position now = {.step = p->step - 1, .rng = p->rng, .skipped = p->skipped};
      if (save_step(j->eng, o->save_root, &now, &j->ts, (int)o->keep_last)) return 1;
    }
    fflush(stdout);
  }
  if (o->export_path) {
    const zo_dtype xd = strcmp(o->export_dtype, "bf16") ? ZO_DTYPE_F32 : ZO_DTYPE_BF16;
    if (zo_engine_export_safetensors(j->eng, o->export_path, xd) != ZO_OK) return engine_error();
    printf("zo-train: weights written to %s (safetensors, %s)\n", o->export_path, o->export_dtype);
  }
  return 0;
}

/* train.sample_bytes generated from "The " (unless --no-sample or signalled); 0, or 1 after
 * printing the error. */
static int sample(const train_opts *o, train_job *j, const train_progress *p) {
  if (!o->do_sample || j->ts.sample_bytes <= 0 || g_stop || p->stop_all) return 0;
  const train_settings *ts = &j->ts;
  zo_engine_set_trace(j->eng, 0);
  uint8_t *s = malloc(ts->sample_bytes + 1);
  static const uint8_t prompt[] = "The ";
  int src = s ? train_model_sample(j->model, prompt, 4, ts->sample_bytes, (float)ts->temperature,
                                   ts->seed, s)
              : -1;
  if (src == 0) {
    s[ts->sample_bytes] = 0;
    for (int i = 0; i < ts->sample_bytes; i++)
      if (s[i] != '\n' && s[i] != '\t' && (s[i] < 32 || s[i] > 126)) s[i] = '?';
    printf("--- sample (temperature %.2f) ---\nThe %s\n---\n", ts->temperature, (char *)s);
  } else if (src == 1) {
    printf("zo-train: no sample: %s\n", train_model_error(j->model));
  }
  free(s);
  return src < 0 ? model_error(j->model) : 0;
}

static void job_free(train_job *j) {
  if (j->jf) fclose(j->jf);
  zo_engine_destroy(j->eng);
  train_model_destroy(j->model);
  zo_comm_destroy(j->nccl); /* its stream is on dev */
  zo_device_destroy(j->dev);
  data_close(j->data);
  zo_comm_destroy(j->comm);
  zo_checkpoint_unlock(j->save_lock); /* after the engine: its last save is done */
  free(j->specs);
  free(j->params);
  free(j->in);
  free(j->tg);
}

/* Engine, start-up budget (the whole run for --dry-run), model, training and its report: the exit
 * status. */
static int run(const train_opts *o, train_job *j, train_progress *p) {
  if (create_engine(j)) return 1;
  print_plan(o, j);
  /* train.cpu_gemm: "auto" probes oneDNN here, and "bf16" that this CPU cannot run is refused here,
   * a dry run too */
  char gmsg[1024];
  if (gpt_gemm_bf16_resolve(j->ts.cpu_gemm, &j->ts.model, j->B, j->cuda, j->ts.model_streamed,
                            zo_engine_grad_dtype(j->eng), &j->ts.cpu_gemm_bf16, gmsg,
                            sizeof gmsg)) {
    fprintf(stderr, "zo-train: error: %s\n", gmsg);
    return 1;
  }
  if (gmsg[0]) printf("zo-train: %s\n", gmsg);
  /* The start-up budget, before the model or any tier is allocated: a model that cannot fit is
   * refused here. */
  /* the compute of a step for the model: the FLOPs (a recompute of forward with activation
   * checkpointing) over a rate */
  const double flops_step =
      j->flops_tok * j->B * j->T * j->gas * (j->ts.activation_checkpointing ? 4.0 / 3 : 1);
  char csrc[320], psrc[ZO_SPEEDS_SRC_CAP] = "";
  const int threads = o->threads > 0 ? (int)o->threads : omp_get_max_threads(); /* gpt.c's team */
  /* the CPU model's compute measured here (probe.h; cached per machine and model), else the cost
   * model */
  const double mb_s =
      !j->cuda && o->compute_tflops <= 0
          ? train_compute_probe(&j->ts.model, j->B, j->ts.activation_checkpointing,
                                j->ts.cpu_gemm_bf16, j->ts.model_streamed,
                                zo_engine_working_dtype(j->eng), train_model_hand_dtype(j->eng),
                                threads, o->fixed_threads,
                                train_cpu_cost_rate(threads, j->ts.cpu_gemm_bf16), psrc,
                                sizeof psrc)
          : 0;
  double compute_s;
  if (mb_s > 0) {
    compute_s = mb_s * j->gas;
    snprintf(csrc, sizeof csrc, "%d micro-batch%s x %.1f ms, gpt.c %s", j->gas,
             j->gas == 1 ? "" : "es", mb_s * 1e3, psrc);
  } else {
    compute_s =
        train_compute_estimate(flops_step, o->compute_tflops, j->cuda, threads, j->ts.cpu_gemm_bf16,
                               zo_device_peak_tflops(j->dev), csrc, sizeof csrc);
    if (psrc[0] && j->rank == 0)
      printf("zo-train: compute probe %s; the cost model stands in\n", psrc);
  }
  int brc = budget(j->eng, &j->ts, j->B, j->cuda, j->standin, o->dry_run, o, &j->pred, compute_s,
                   csrc, j->cfg.zoffload.placement == ZO_PLACEMENT_AUTO, j->rank == 0);
  if (o->dry_run) {
    if (!brc) printf("zo-train: dry run: the configuration fits\n");
    return brc ? 1 : 0;
  }
  if (o->kernel_times && !j->cuda)
    return train_die("--kernel-times: times the CUDA model's kernels, and this run computes on the "
                     "cpu (zoffload.device, --device)%s%s",
                     "", "");
  if (brc || create_model(j) || resume_from(o, j) || open_log(o, j)) return 1;
  if (o->kernel_times && train_model_set_kernel_times(j->model, 1)) return model_error(j->model);
  if (train(o, j, p) || finish(o, j, p) || train_report_summary(j, p)) return 1;
  if (o->kernel_times) kernel_times_print(j, p);
  if (sample(o, j, p)) return 1;
  return 0;
}

int main(int argc, char **argv) {
  /* a line at a time on a pipe or file too, so `zo-train | tee log` shows each step as it ends */
  setvbuf(stdout, NULL, _IOLBF, 0);
  train_opts o;
  int rc = train_opts_parse(argc, argv, &o); /* the command line; --help */
  if (rc >= 0) return rc;
  static train_job j;  /* zeroed; static for its size (zo_config_t) */
  rc = plan(&o, &j);   /* config, ranks, batch, compute kind: nothing allocated */
  train_opts_free(&o); /* the config's bytes: parsed into j */
  if (rc) return 1;
  if (claim_outputs(&o, &j)) { /* --save DIR ours until the end of the run; the outputs writable */
    zo_checkpoint_unlock(j.save_lock);
    return 1;
  }
  if (!o.dry_run && open_data(&j)) { /* the corpus (not for a dry run) */
    zo_checkpoint_unlock(j.save_lock);
    return 1;
  }
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  train_progress p = {.saved_step = -1};
  rc = run(&o, &j, &p);
  job_free(&j);
  /* Stopped by a signal: say so as a shell does, 128 + its number. A failure on the way (a save that failed, say)
   * stays exit 1. */
  if ((g_stop || p.stop_all) && rc == 0) rc = 128 + (g_stop ? (int)g_stop : SIGTERM);
  return rc;
}
