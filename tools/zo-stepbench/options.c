/*
 * options.c - zo-stepbench's command line: --help and the options, numbers
 * through tools/common/args.c.
 * Nothing here touches the device, the engine or the disk beyond a stat().
 */
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "args.h"
#include "stepbench.h"

static void usage(FILE *f) {
  fprintf(
      f,
      "usage: zo-stepbench --params N --layers L --nvme-path DIR --steps K [options]\n"
      "Runs K training steps of a synthetic model through the zoffload engine, on the host device\n"
      "backend with an emulated host-device link or on a CUDA GPU with real copies, and measures the\n"
      "step pipeline against the disk's O_DIRECT throughput measured on DIR and the host-device link's\n"
      "limit, both measured in the same run.\n"
      "\n"
      "  --params N                 total parameters, suffixes K M G (decimal), e.g. 1e9 or 250M (required)\n"
      "  --layers L                 layers; each is one tensor of N/L elements (last one takes the rest) (required)\n"
      "  --nvme-path DIR            existing directory for swap files and the baseline file (required)\n"
      "  --steps K                  training steps (required, >= 1)\n"
      "  --compute-ms-per-layer X   CPU-spin \"compute\" per layer per pass, forward and backward (default 10)\n"
      "  --offload-param T          none|cpu|nvme: where working weights live (default none; cpu/nvme use ZeRO stage 3)\n"
      "  --offload-optimizer T      none|cpu|nvme: where fp32 master weights and Adam state live (default nvme)\n"
      "  --device D                 host|cuda: the emulated device, or the CUDA GPU of LOCAL_RANK (default 0); cuda\n"
      "                             exits 77 with \"no CUDA device\" when there is none (default host)\n"
      "  --device-limit BYTES       device memory for the run, suffixes K M G (binary) (default 0 = unlimited; cuda:\n"
      "                             the GPU's total memory)\n"
      "  --link-gbps G              emulated host-device link GB/s (1e9 B/s) per direction, host device only\n"
      "                             (default 12; 0 = unlimited, else 0.1 to 1e6)\n"
      "  --sub-group-size S         zero_optimization.sub_group_size in elements (default: DeepSpeed's 1e9)\n"
      "  --buffer-count B           offload_optimizer.buffer_count (default: 4)\n"
      "  --param-buffer-count B     offload_param.buffer_count (default: 5)\n"
      "  --block-size BYTES         aio.block_size, also used by the baseline (default 1M)\n"
      "  --queue-depth Q            aio.queue_depth, also used by the baseline (default 8)\n"
      "  --adam-threads T           zoffload.adam_threads (default 0 = all physical cores)\n"
      "  --warmup W                 first W steps left out of the summary (default min(2, K - 1): step 1 records\n"
      "                             the trace with demand fetches; step 2 is the first prefetched step and the first\n"
      "                             to touch the device buffers it allocates)\n"
      "  --bf16 | --fp32            working precision of weights and gradients (default --bf16)\n"
      "  --no-baseline              skip the disk baseline (disk ratio reported as n/a)\n"
      "  --json FILE                write config, per-step figures, summary and targets as JSON\n"
      "  --ranks                    run on the ranks the launcher started (mpirun -np N zo-stepbench --ranks ...):\n"
      "                             each rank trains the same model data-parallel, and the summary adds the\n"
      "                             communication per step against ZeRO's volume; only rank 0 prints\n"
      "  --stage S                  zero_optimization.stage (default: 3 with --offload-param, else 2 with an\n"
      "                             offloaded optimizer, else 0)\n"
      "  --overlap-comm on|off      zero_optimization.overlap_comm: gradient reductions in flight during backward\n"
      "                             (default: DeepSpeed's, on at stage 3 only)\n"
      "  --reduce-bucket-size N     zero_optimization.reduce_bucket_size in elements (default 5e8)\n"
      "  --allgather-bucket-size N  zero_optimization.allgather_bucket_size in elements (default 5e8): stage 1-2 weight\n"
      "                             gathers in waves of it, stage 3 coalesces consecutive fetches' gathers up to it\n"
      "  --gas N                    gradient_accumulation_steps: N forward and backward passes per step, the\n"
      "                             gradients of all but the last through zo_engine_grad_accumulate (default 1)\n"
      "  --placement config|auto    zoffload.placement: config keeps the split the options give; auto lets the\n"
      "                             planner choose how much optimizer state and how many working weights stay in\n"
      "                             host memory (the split of least predicted step that fits) (default config)\n"
      "  --optimizer-max-in-cpu N   zoffload.optimizer_max_in_cpu: elements of optimizer state (whole sub-groups,\n"
      "                             the last ones) kept in host memory with --offload-optimizer nvme (default 0)\n"
      "  --param-max-in-cpu N       offload_param.max_in_cpu: elements of working weights (whole tensors, the first\n"
      "                             ones) kept in host memory with --offload-param nvme (default: not written, none)\n"
      "  --placement-host-bytes B   zoffload.placement_host_bytes, suffixes K M G (binary): the most host memory\n"
      "                             --placement auto keeps state in (default 0 = what the machine has free)\n"
      "  --help                     this text\n"
      "\n"
      "One step: forward over layers 0..L-1 (zo_engine_fetch, spin X ms, zo_engine_release), backward\n"
      "over L-1..0 (fetch, spin X ms, zo_engine_grad_ready with a fixed gradient pattern, release),\n"
      "then zo_engine_step (--gas N: N forward and backward passes, all but the last through\n"
      "zo_engine_grad_accumulate). Definitions (per step; the summary is the mean over the steps after warmup):\n"
      "  step_s             wall time of forward + backward + zo_engine_step\n"
      "  compute_s          time spent spinning (the emulated compute)\n"
      "  fetch_wait_s       time inside zo_engine_fetch (compute waiting for weights: exposed); the\n"
      "                     engine's own figure (zo_step_info.fetch_wait_s) is printed beside it\n"
      "  grad_ready_s       time inside zo_engine_grad_ready; engine_step_s: time inside zo_engine_step\n"
      "  opt_window_s       from the first zo_engine_grad_ready of the step to the return of zo_engine_step\n"
      "                     (covers optimizer work overlapped with backward as well as the step call)\n"
      "  opt_nvme_bytes     swap bytes read + written (zo_engine_mem) during the optimizer window\n"
      "  disk_gbps          opt_nvme_bytes / opt_window_s (1e9 B/s)\n"
      "  baseline_disk_gbps (read + write bytes) / (read + write time) of an io_uring O_DIRECT loop\n"
      "                     with the same block size and queue depth on a file in DIR the size of the\n"
      "                     swap state: written once untimed, then read and written back, timed; run\n"
      "                     before the steps and after them, the better of the two is the baseline\n"
      "  params_per_s       params / opt_window_s\n"
      "  link_gbps          (H2D + D2H bytes over the link) / step_s; link_h2d_gbps, link_d2h_gbps per direction\n"
      "                     (bytes from zo_device_link_stats, or the engine's h2d/d2h counters where the\n"
      "                     device keeps none)\n"
      "  link limit         before the engine starts: zo_memcpy_async loops of one layer's bytes between pinned\n"
      "                     host and device memory, H2D alone, D2H alone, both at once on two streams, best\n"
      "                     of 3 (host device: the emulated link, or memcpy when unlimited)\n"
      "  link_ratio         link_gbps / full-duplex limit; link_h2d_ratio, link_d2h_ratio: each direction over\n"
      "                     its limit alone (1.0 = the step is bound by the link)\n"
      "  transfer_s         max(H2D lane time, D2H lane time, step nvme bytes / baseline_disk_gbps); a lane's\n"
      "                     time is its busy time on the emulated link, else its bytes / its measured limit\n"
      "  adam_s             zo_step_info.adam_s (CPU Adam time)\n"
      "  overlap_efficiency max(compute_s, transfer_s, adam_s) / step_s: 1.0 = everything but the\n"
      "                     longest stage hidden, below 1 = time exposed (zo-train reports the same ratio)\n"
      "  predicted_step_ms  zo_engine_place()'s step-time model (zoffload/placement.h) for the placement, before\n"
      "                     finalize: machine speeds from zo_step_rates_get() (the speeds cache, or a ~1 s\n"
      "                     measurement), compute L x 2 x X ms x gas, 2 x gas fetches of each layer per step;\n"
      "                     step_over_predicted = step_s (the mean) / predicted_step_ms\n"
      "  nvme_read_bytes    swap bytes read per step (zo_engine_mem deltas), nvme_write_bytes written, beside\n"
      "                     the model's predicted_nvme_read_bytes and predicted_nvme_write_bytes\n");
}

enum {
  O_PARAMS = 256,
  O_LAYERS,
  O_NVME,
  O_STEPS,
  O_COMPUTE,
  O_OPARAM,
  O_OOPT,
  O_DEVLIM,
  O_LINK,
  O_SGS,
  O_BC,
  O_PBC,
  O_BS,
  O_QD,
  O_AT,
  O_WARM,
  O_BF16,
  O_FP32,
  O_NOBASE,
  O_JSON,
  O_HELP,
  O_DEVICE,
  O_RANKS,
  O_STAGE,
  O_OVERLAP,
  O_RBUCKET,
  O_ABUCKET,
  O_GAS,
  O_PLACEMENT,
  O_OPT_MAX_CPU,
  O_PARAM_MAX_CPU,
  O_PLACE_HOST
};
static const struct option lo[] = {{"params", 1, 0, O_PARAMS},
                                   {"layers", 1, 0, O_LAYERS},
                                   {"nvme-path", 1, 0, O_NVME},
                                   {"steps", 1, 0, O_STEPS},
                                   {"compute-ms-per-layer", 1, 0, O_COMPUTE},
                                   {"offload-param", 1, 0, O_OPARAM},
                                   {"offload-optimizer", 1, 0, O_OOPT},
                                   {"device-limit", 1, 0, O_DEVLIM},
                                   {"link-gbps", 1, 0, O_LINK},
                                   {"sub-group-size", 1, 0, O_SGS},
                                   {"buffer-count", 1, 0, O_BC},
                                   {"param-buffer-count", 1, 0, O_PBC},
                                   {"block-size", 1, 0, O_BS},
                                   {"queue-depth", 1, 0, O_QD},
                                   {"adam-threads", 1, 0, O_AT},
                                   {"warmup", 1, 0, O_WARM},
                                   {"bf16", 0, 0, O_BF16},
                                   {"fp32", 0, 0, O_FP32},
                                   {"no-baseline", 0, 0, O_NOBASE},
                                   {"device", 1, 0, O_DEVICE},
                                   {"json", 1, 0, O_JSON},
                                   {"help", 0, 0, O_HELP},
                                   {"ranks", 0, 0, O_RANKS},
                                   {"stage", 1, 0, O_STAGE},
                                   {"overlap-comm", 1, 0, O_OVERLAP},
                                   {"reduce-bucket-size", 1, 0, O_RBUCKET},
                                   {"allgather-bucket-size", 1, 0, O_ABUCKET},
                                   {"gas", 1, 0, O_GAS},
                                   {"placement", 1, 0, O_PLACEMENT},
                                   {"optimizer-max-in-cpu", 1, 0, O_OPT_MAX_CPU},
                                   {"param-max-in-cpu", 1, 0, O_PARAM_MAX_CPU},
                                   {"placement-host-bytes", 1, 0, O_PLACE_HOST},
                                   {0, 0, 0, 0}};

/* --link-gbps @arg: 0 (unlimited) or as zoffload.host_link_gbps; 0, or -1 after printing the range. */
static int parse_link(const char *arg, opts *o) {
  /* as zoffload.host_link_gbps: a link slower than the minimum makes each transfer take hours (a hang) */
  if (zo_tool_parse_double(arg, 0, ZO_CONFIG_LINK_GBPS_MAX, &o->link_gbps) ||
      (o->link_gbps != 0 && o->link_gbps < ZO_CONFIG_LINK_GBPS_MIN)) {
    fprintf(
        stderr,
        "zo-stepbench: --link-gbps: expected 0 (unlimited) or a number in [%g, %g] GB/s, got '%s'\n",
        ZO_CONFIG_LINK_GBPS_MIN, ZO_CONFIG_LINK_GBPS_MAX, arg);
    return -1;
  }
  o->link_set = 1;
  return 0;
}

/* An integer option in [lo, hi] into the int *@out; 0, or 1 for a bad value. */
static int parse_int(const char *arg, int64_t lo_, int64_t hi, int *out) {
  int64_t l;
  if (zo_tool_parse_int(arg, lo_, hi, &l)) return 1;
  *out = (int)l;
  return 0;
}

/* A count (decimal suffixes) in [1, INT64_MAX] into *@out; 0, or 1 for a bad value. */
static int parse_count64(const char *arg, int64_t *out) {
  uint64_t u;
  if (zo_tool_parse_count(arg, 0, &u) || u == 0 || u > INT64_MAX) return 1;
  *out = (int64_t)u;
  return 0;
}

/* An element count (decimal suffixes) in [0, ZO_CONFIG_MAX_ELEMS], as the config's max_in_cpu keys, into *@out; 0,
 * or 1 for a bad value. */
static int parse_elems(const char *arg, int64_t *out) {
  uint64_t u;
  if (zo_tool_parse_count(arg, 0, &u) || u > (uint64_t)ZO_CONFIG_MAX_ELEMS) return 1;
  *out = (int64_t)u;
  return 0;
}

/* One option @c (getopt_long's return) with @arg into @o: 0, 1 for a bad value (the caller names it), -1 after
 * printing the error, 2 for an option getopt_long did not know. --help exits here. */
static int parse_option(int c, const char *arg, opts *o) {
  uint64_t u;
  switch (c) {
    case O_PARAMS: return zo_tool_parse_count(arg, 0, &o->params) || o->params == 0;
    case O_LAYERS: return parse_int(arg, 1, 100000, &o->layers);
    case O_NVME: o->nvme_path = arg; return 0;
    case O_STEPS: return parse_int(arg, 1, 1000000, &o->steps);
    case O_COMPUTE: return zo_tool_parse_double(arg, 0, 1e6, &o->compute_ms) != 0;
    case O_OPARAM: return zo_offload_device_parse(arg, &o->oparam) != ZO_OK;
    case O_OOPT: return zo_offload_device_parse(arg, &o->oopt) != ZO_OK;
    case O_DEVLIM: return zo_tool_parse_bytes(arg, &o->device_limit) != 0;
    case O_LINK: return parse_link(arg, o);
    case O_DEVICE:
      return zo_device_kind_parse(arg, &o->device) != ZO_OK || o->device == ZO_DEVICE_AUTO;
    case O_SGS: return parse_count64(arg, &o->sub_group_size);
    case O_BC: return parse_int(arg, 1, 1024, &o->buffer_count);
    case O_PBC: return parse_int(arg, 1, 1024, &o->param_buffer_count);
    case O_BS:
      if (zo_tool_parse_bytes(arg, &u) || u == 0 || u % 4096 || u > (1u << 30)) return 1;
      o->block_size = (int64_t)u;
      return 0;
    case O_QD: {
      int64_t l;
      if (zo_tool_parse_int(arg, 1, 32768, &l)) return 1;
      o->queue_depth = l;
      return 0;
    }
    case O_AT: return parse_int(arg, 0, 4096, &o->adam_threads);
    case O_WARM: return parse_int(arg, 0, LONG_MAX, &o->warmup);
    case O_BF16: o->bf16 = 1; return 0;
    case O_FP32: o->bf16 = 0; return 0;
    case O_NOBASE: o->no_baseline = 1; return 0;
    case O_JSON: o->json = arg; return 0;
    case O_RANKS: o->ranks = 1; return 0;
    case O_OVERLAP:
      if (strcmp(arg, "on") && strcmp(arg, "off")) return 1;
      o->overlap_comm = !strcmp(arg, "on");
      return 0;
    case O_RBUCKET: return parse_count64(arg, &o->reduce_bucket);
    case O_ABUCKET: return parse_count64(arg, &o->allgather_bucket);
    case O_STAGE: return parse_int(arg, 0, 3, &o->stage);
    case O_GAS: return parse_int(arg, 1, 1 << 20, &o->gas);
    case O_PLACEMENT:
      if (strcmp(arg, "config") && strcmp(arg, "auto")) return 1;
      o->placement = !strcmp(arg, "auto") ? ZO_PLACEMENT_AUTO : ZO_PLACEMENT_CONFIG;
      return 0;
    case O_OPT_MAX_CPU: return parse_elems(arg, &o->optimizer_max_in_cpu);
    case O_PARAM_MAX_CPU: return parse_elems(arg, &o->param_max_in_cpu);
    case O_PLACE_HOST:
      if (zo_tool_parse_bytes(arg, &u) || u > INT64_MAX) return 1;
      o->placement_host_bytes = (int64_t)u;
      return 0;
    case O_HELP: usage(stdout); exit(0);
    default: return 2;
  }
}

/* What the options say together: required ones given, sizes an engine holds, --nvme-path a directory, warmup
 * below the step count. 0, or -1 after printing the error. */
static int check_args(opts *o) {
  if (!o->params || !o->layers || !o->nvme_path || !o->steps) {
    fprintf(
        stderr,
        "zo-stepbench: --params, --layers, --nvme-path and --steps are required (see --help)\n");
    return -1;
  }
  if (o->params > ZO_ENGINE_MAX_ELEMS) { /* refused before anything is allocated */
    fprintf(stderr,
            "zo-stepbench: --params %" PRIu64
            ": more elements than one engine holds (at most %zu = 2^48)\n",
            o->params, ZO_ENGINE_MAX_ELEMS);
    return -1;
  }
  if ((uint64_t)o->layers > o->params) {
    fprintf(stderr, "zo-stepbench: --layers %d exceeds --params %" PRIu64 "\n", o->layers,
            o->params);
    return -1;
  }
  struct stat sb;
  if (stat(o->nvme_path, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
    fprintf(stderr, "zo-stepbench: --nvme-path '%s' is not an existing directory\n", o->nvme_path);
    return -1;
  }
  if (o->warmup < 0) o->warmup = o->steps > 2 ? 2 : o->steps - 1;
  if (o->warmup >= o->steps) o->warmup = o->steps - 1;
  return 0;
}

int parse_args(int argc, char **argv, opts *o) {
  memset(o, 0, sizeof *o);
  o->compute_ms = 10;
  o->oparam = ZO_OFFLOAD_NONE;
  o->oopt = ZO_OFFLOAD_NVME;
  o->link_gbps = 12;
  o->bf16 = 1;
  o->warmup = -1;
  o->device = ZO_DEVICE_HOST;
  o->stage = -1;
  o->overlap_comm = -1;
  o->gas = 1;
  o->placement = ZO_PLACEMENT_CONFIG;
  o->param_max_in_cpu = -1;
  int c, li = -1;
  opterr = 0;
  while ((li = -1, c = getopt_long(argc, argv, ":", lo, &li)) != -1) {
    if (c == '?' || c == ':') { /* one line, with the nearest flag */
      zo_tool_option_error("zo-stepbench", c, argc, argv, lo);
      return -1;
    }
    const int rc = parse_option(c, optarg, o);
    if (rc == 2) {
      fprintf(stderr, "zo-stepbench: unknown or incomplete option '%s' (see --help)\n",
              argv[optind - 1]);
      return -1;
    }
    if (rc == 1) {
      fprintf(stderr, "zo-stepbench: --%s: bad value '%s' (see --help)\n",
              li >= 0 ? lo[li].name : "?", optarg);
      return -1;
    }
    if (rc < 0) return -1;
  }
  if (optind < argc) {
    fprintf(stderr, "zo-stepbench: unexpected argument '%s'\n", argv[optind]);
    return -1;
  }
  return check_args(o);
}
