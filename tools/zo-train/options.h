/*
 * options.h - zo-train's command line and the configuration it names: the
 * options as parsed (getopt_long, tools/common/args.c for the numbers), the
 * train_settings and zo_config_t they override, and the "zo-train: error:"
 * lines every part of the tool prints. Not the training itself (main.c).
 */
#ifndef ZO_TRAIN_OPTIONS_H
#define ZO_TRAIN_OPTIONS_H

#include <stdint.h>

#include "train_config.h"
#include "zoffload/config.h"

/* The command line as given; NULL / -1: not given (the config's value stands). */
typedef struct train_opts {
  const char *config_path, *data_override, *log_json, *offload_override, *nvme_override;
  int64_t steps_override, seed_override, threads, limit_override;
  const char *param_override, *device_override, *ckpt_override, *memory_override;
  int do_sample, dry_run, fixed_threads;
  int64_t
      print_every; /* --print-every: a logged step every N steps; -1: the config's steps_per_print */
  int verbose;     /* --verbose: the long step line */
  const char *kernels_override; /* --cuda-kernels baseline|fused; NULL: train.cuda_kernels */
  int kernel_times;             /* --kernel-times: GPU time by kernel class, the "kernels:" line */
  const char *save_root, *resume, *export_path, *export_dtype;
  int64_t save_every, keep_last, micro_batch, grad_accum;
  int64_t assume_host,
      assume_nvme; /* --dry-run on a machine that is not this one: MemTotal and MemAvailable, and
                                     * each nvme_path's free bytes, in bytes; -1: this machine's */
  /* --compute-tflops: the compute rate the step-time model assumes; 0: estimated */
  double compute_tflops;
  /* config_path's bytes, read once by train_opts_parse() (NUL-terminated; train_opts_free) */
  char *config_text;
  size_t config_len; /* bytes of config_text */
} train_opts;

/*
 * train_opts_parse() - the command line into @o, with the checks that need no
 * config (the --export-dtype value, --resume latest and --save-every without
 * --save), then the config file's bytes into o->config_text, read once (both
 * parsers below take them from there). Returns -1 to go on, else the exit
 * status: 0 after --help, 2 for a bad option or value, 1 for a failed check
 * or a config that cannot be read (message printed).
 */
int train_opts_parse(int argc, char **argv, train_opts *o);

/* train_opts_free() - what train_opts_parse() allocated (the config's bytes); @o may be NULL. */
void train_opts_free(train_opts *o);

/*
 * train_opts_settings() - zo-train's own config blocks (model, data, train)
 * from o->config_text into @ts, then --data and --steps. Returns 0, or 1
 * after printing the error.
 */
int train_opts_settings(const train_opts *o, train_settings *ts);

/*
 * train_opts_config() - the DeepSpeed-style config from o->config_text into
 * @cfg for @world ranks ("auto" values filled in from @ts and --micro-batch /
 * --grad-accum, each printed), then the overrides: --seed and
 * --activation-checkpointing and --cuda-kernels (into @ts), --offload-optimizer, --offload-param,
 * --device-memory-limit, --device, --nvme-path, --threads, --fixed-threads. Returns 0, or 1
 * after printing the error.
 */
int train_opts_config(const train_opts *o, int world, train_settings *ts, zo_config_t *cfg);

/* "zo-train: error: " then @fmt with the two strings @a and @b, a newline; returns 1 (the exit
 * status). */
int train_die(const char *fmt, const char *a, const char *b);

/* "zo-train: error: KEY: V is out of range [LO, HI] for zo-train (WHY)"; returns 1 (the exit
 * status). */
int train_die_i64(const char *key, int64_t v, int64_t lo, int64_t hi, const char *why);

#endif
