/*
 * stepbench.h - what the parts of zo-stepbench share: the options (options.c),
 * the disk baseline (baseline.c), the run's state and per-step records
 * (main.c) and the summary that report.c prints and writes as JSON. A tool's
 * private header, not an API.
 */
#ifndef ZO_STEPBENCH_H
#define ZO_STEPBENCH_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "linkbench.h"
#include "zoffload/config.h"
#include "zoffload/device.h"
#include "zoffload/dtype.h"
#include "zoffload/engine.h"
#include "zoffload/placement.h"

/* ------------------------------------------------------------ options (options.c) */

typedef struct opts {
  uint64_t params; /* total elements */
  int layers;
  const char *nvme_path;
  int steps;
  double compute_ms; /* per layer, per pass (forward and backward each) */
  zo_offload_device oparam, oopt;
  uint64_t device_limit;  /* bytes, 0 = unlimited */
  double link_gbps;       /* 0 = unlimited */
  int64_t sub_group_size; /* elements, 0 = config default */
  int buffer_count;       /* optimizer; 0 = config default */
  int param_buffer_count; /* offload_param; 0 = config default */
  int bf16;
  int64_t block_size;  /* aio.block_size bytes, 0 = default */
  int64_t queue_depth; /* aio.queue_depth, 0 = default */
  int adam_threads;
  int warmup; /* steps left out of the summary */
  int no_baseline;
  zo_device_kind device; /* ZO_DEVICE_HOST (emulated link) or ZO_DEVICE_CUDA */
  int link_set;          /* --link-gbps given */
  const char *json;
  int ranks;                /* --ranks: the ranks a launcher started (mpirun), one engine each */
  int stage;                /* --stage, -1: derived from the tiers */
  int overlap_comm;         /* --overlap-comm on|off; -1: the config default (on at stage 3) */
  int64_t reduce_bucket;    /* --reduce-bucket-size, 0: the config default */
  int64_t allgather_bucket; /* --allgather-bucket-size, 0: the config default */
  int gas; /* --gas: gradient_accumulation_steps, micro-batches per step (default 1) */
  zo_placement_mode placement; /* --placement: zoffload.placement (default config) */
  /* --optimizer-max-in-cpu: zoffload.optimizer_max_in_cpu, elements (default 0) */
  int64_t optimizer_max_in_cpu;
  /* --param-max-in-cpu: offload_param.max_in_cpu, elements; -1: not given (unwritten) */
  int64_t param_max_in_cpu;
  /* --placement-host-bytes: zoffload.placement_host_bytes (default 0: no cap) */
  int64_t placement_host_bytes;
} opts;

/*
 * parse_args() - the command line into @o, defaults filled in, the required
 * options and --nvme-path checked. --help prints the usage and exits 0.
 * Returns 0, or -1 after printing the error (the caller exits 2).
 */
int parse_args(int argc, char **argv, opts *o);

/* ------------------------------------------------------------ disk baseline (baseline.c) */

typedef struct baseline {
  int ok;
  uint64_t bytes; /* per direction */
  double read_s, write_s, read_gbps, write_gbps, gbps;
} baseline;

/*
 * run_baseline() - a file of @size bytes (rounded up to 4 KiB) in @dir, written
 * once untimed, then a timed read pass and a timed write pass, io_uring
 * O_DIRECT with @qd requests of @bs bytes in flight; the file is unlinked at
 * once. Returns 0 with @b filled (ok = 1), or -1 after printing the error.
 */
int run_baseline(const char *dir, uint64_t size, size_t bs, unsigned qd, baseline *b);

/* ------------------------------------------------------------ the run (main.c) and its report
 * (report.c) */

typedef struct step_rec {
  double step_s, compute_s, fetch_wait_s, grad_ready_s, engine_step_s, opt_window_s;
  uint64_t nvme_bytes, opt_nvme_bytes, h2d_bytes, d2h_bytes;
  uint64_t nvme_read_bytes, nvme_write_bytes; /* of nvme_bytes: the step's swap reads and writes */
  double h2d_busy_s, d2h_busy_s, link_stall_s;
  double disk_gbps, link_gbps, params_per_s, transfer_s, overlap_efficiency;
  zo_step_info info;
  size_t device_peak_bytes;
} step_rec;

/* The mean over the steps after warmup and the ratios derived from it. */
typedef struct summary {
  step_rec s;                 /* means; rates from totals (bytes over time) */
  int n;                      /* steps summed */
  double paper_bytes;         /* ZeRO's communication volume per rank and step */
  double comm_ratio;          /* s.info.comm_bytes / paper_bytes, NAN for one rank */
  double opt_bytes_per_param; /* nvme bytes in the optimizer window per parameter */
  double disk_ratio;          /* s.disk_gbps / baseline, NAN without one */
  double link_h2d_gbps, link_d2h_gbps, link_ratio, link_h2d_ratio, link_d2h_ratio;
  double nvme_read_bytes, nvme_write_bytes; /* mean per step, measured (zo_engine_mem deltas) */
  /* s.step_s / the placement's predicted step; NAN without a prediction */
  double step_over_predicted;
  double read_over_predicted,
      write_over_predicted; /* measured / predicted NVMe bytes; NAN where predicted 0 */
} summary;

/* One run: the model's shape, the engine and its device, what was measured; bench_free() releases
 * it. */
typedef struct bench {
  int L;               /* layers */
  uint64_t N;          /* parameters */
  size_t per, largest; /* elements of layers 0..L-2, of layer L-1 (takes the rest) */
  zo_dtype wdt;        /* working dtype */
  size_t wsz;          /* its bytes */
  zo_config_t cfg;
  zo_comm_t *comm; /* --ranks */
  int world;
  zo_device_t *dev;
  int dev_link_stats; /* link bytes from the device's counters, else the engine's */
  zo_engine_t *eng;
  zo_param_t **P;      /* [L] */
  size_t *numel;       /* [L] */
  float *init;         /* [largest], while loading */
  void *hgrad, *dgrad; /* the gradient every layer hands over: host copy while loading; device */
  linkbench lim;
  int want_base;
  baseline base_runs[2]; /* before and after the steps */
  baseline base;         /* the better of the two */
  double t_fin, t_load;
  /* the model's inputs: the machine's speeds (zoffload/speeds.h) and the synthetic compute */
  zo_step_rates rates;
  zo_placement place; /* zo_engine_place() before finalize: the split and its predicted step */
  step_rec *rec;      /* [steps] */
  zo_engine_mem mend; /* after the last step */
  summary sum;
} bench;

/* The summary lines: step time against its bound, exposed waits, communication, optimizer window, link, and the
 * measured step and NVMe bytes against the placement's predicted ones. */
void report_summary(const opts *o, const bench *b);

/* The targets of issue 5 this run can judge, printed; returns them as a JSON array. */
json_t *report_targets(const opts *o, const bench *b);

/* --json: config, summary, baseline, memory, communication, per step, @targets (taken over), definitions.
 * Returns 0, or -1 when the file cannot be written (message printed). */
int report_json(const opts *o, const bench *b, json_t *targets);

#endif
