/*
 * zo-stepbench - measures the offload engine's step pipeline at scale on a
 * synthetic model (L layers, one tensor each, fixed CPU-spin "compute" per
 * layer) against the disk's own O_DIRECT io_uring throughput measured on the
 * same path in the same run. It is a benchmark tool, not a test and not a model.
 */
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <liburing.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "args.h"
#include "zoffload/config.h"
#include "zoffload/device.h"
#include "zoffload/dtype.h"
#include "zoffload/budget.h"
#include "zoffload/engine.h"
#include "zoffload/status.h"

#include "linkbench.h"

/* ------------------------------------------------------------ options */

typedef struct opts {
  uint64_t params;          /* total elements */
  int layers;
  const char *nvme_path;
  int steps;
  double compute_ms;        /* per layer, per pass (forward and backward each) */
  zo_offload_device oparam, oopt;
  uint64_t device_limit;    /* bytes, 0 = unlimited */
  double link_gbps;         /* 0 = unlimited */
  int64_t sub_group_size;   /* elements, 0 = config default */
  int buffer_count;         /* optimizer; 0 = config default */
  int param_buffer_count;   /* offload_param; 0 = config default */
  int bf16;
  int64_t block_size;       /* aio.block_size bytes, 0 = default */
  int64_t queue_depth;      /* aio.queue_depth, 0 = default */
  int adam_threads;
  int warmup;               /* steps left out of the summary */
  int no_baseline;
  zo_device_kind device;    /* ZO_DEVICE_HOST (emulated link) or ZO_DEVICE_CUDA */
  int link_set;             /* --link-gbps given */
  const char *json;
  int ranks;                /* --ranks: the ranks a launcher started (mpirun), one engine each */
  int stage;                /* --stage, -1: derived from the tiers */
  int overlap_comm;         /* --overlap-comm on|off; -1: the config default (on at stage 3) */
  int64_t reduce_bucket;    /* --reduce-bucket-size, 0: the config default */
  int64_t allgather_bucket; /* --allgather-bucket-size, 0: the config default */
} opts;

/* A whole decimal integer in [lo, hi]; 0 ok, -1 otherwise (empty, trailing text, out of range). */
static void usage(FILE *f) {
  fprintf(f,
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
    "  --help                     this text\n"
    "\n"
    "One step: forward over layers 0..L-1 (zo_engine_fetch, spin X ms, zo_engine_release), backward\n"
    "over L-1..0 (fetch, spin X ms, zo_engine_grad_ready with a fixed gradient pattern, release),\n"
    "then zo_engine_step. Definitions (per step; the summary is the mean over the steps after warmup):\n"
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
    "                     longest stage hidden. (The issue writes the ratio as step time over the max;\n"
    "                     that is 1 / overlap_efficiency, reported as step_over_bound.)\n");
}

static int parse_args(int argc, char **argv, opts *o) {
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
  enum { O_PARAMS = 256, O_LAYERS, O_NVME, O_STEPS, O_COMPUTE, O_OPARAM, O_OOPT, O_DEVLIM, O_LINK, O_SGS, O_BC,
         O_PBC, O_BS, O_QD, O_AT, O_WARM, O_BF16, O_FP32, O_NOBASE, O_JSON, O_HELP, O_DEVICE, O_RANKS, O_STAGE,
         O_OVERLAP, O_RBUCKET, O_ABUCKET };
  static const struct option lo[] = {
      {"params", 1, 0, O_PARAMS}, {"layers", 1, 0, O_LAYERS}, {"nvme-path", 1, 0, O_NVME},
      {"steps", 1, 0, O_STEPS}, {"compute-ms-per-layer", 1, 0, O_COMPUTE}, {"offload-param", 1, 0, O_OPARAM},
      {"offload-optimizer", 1, 0, O_OOPT}, {"device-limit", 1, 0, O_DEVLIM}, {"link-gbps", 1, 0, O_LINK},
      {"sub-group-size", 1, 0, O_SGS}, {"buffer-count", 1, 0, O_BC}, {"param-buffer-count", 1, 0, O_PBC},
      {"block-size", 1, 0, O_BS}, {"queue-depth", 1, 0, O_QD}, {"adam-threads", 1, 0, O_AT},
      {"warmup", 1, 0, O_WARM}, {"bf16", 0, 0, O_BF16}, {"fp32", 0, 0, O_FP32}, {"no-baseline", 0, 0, O_NOBASE},
      {"device", 1, 0, O_DEVICE}, {"json", 1, 0, O_JSON}, {"help", 0, 0, O_HELP},
      {"ranks", 0, 0, O_RANKS}, {"stage", 1, 0, O_STAGE}, {"overlap-comm", 1, 0, O_OVERLAP},
      {"reduce-bucket-size", 1, 0, O_RBUCKET}, {"allgather-bucket-size", 1, 0, O_ABUCKET}, {0, 0, 0, 0}};
  int c, li = -1;
  uint64_t u;
  int64_t l;
  char *end;
  opterr = 0;
  while ((li = -1, c = getopt_long(argc, argv, "", lo, &li)) != -1) {
    const char *name = li >= 0 ? lo[li].name : "?";
    switch (c) {
      case O_PARAMS:
        if (zo_tool_parse_count(optarg, 0, &o->params) || o->params == 0) goto bad;
        break;
      case O_LAYERS:
        if (zo_tool_parse_int(optarg, 1, 100000, &l)) goto bad;
        o->layers = l;
        break;
      case O_NVME: o->nvme_path = optarg; break;
      case O_STEPS:
        if (zo_tool_parse_int(optarg, 1, 1000000, &l)) goto bad;
        o->steps = l;
        break;
      case O_COMPUTE:
        o->compute_ms = strtod(optarg, &end);
        if (*end || !(o->compute_ms >= 0) || o->compute_ms > 1e6) goto bad;
        break;
      case O_OPARAM: if (zo_offload_device_parse(optarg, &o->oparam) != ZO_OK) goto bad; break;
      case O_OOPT: if (zo_offload_device_parse(optarg, &o->oopt) != ZO_OK) goto bad; break;
      case O_DEVLIM: if (zo_tool_parse_count(optarg, 1, &o->device_limit)) goto bad; break;
      case O_LINK:
        o->link_gbps = strtod(optarg, &end);
        /* as zoffload.host_link_gbps: a link slower than the minimum makes each transfer take hours (a hang) */
        if (end == optarg || *end || !(o->link_gbps == 0 || (o->link_gbps >= ZO_CONFIG_LINK_GBPS_MIN &&
                                                              o->link_gbps <= ZO_CONFIG_LINK_GBPS_MAX))) {
          fprintf(stderr, "zo-stepbench: --link-gbps: expected 0 (unlimited) or a number in [%g, %g] GB/s, got '%s'\n",
                  ZO_CONFIG_LINK_GBPS_MIN, ZO_CONFIG_LINK_GBPS_MAX, optarg);
          return -1;
        }
        o->link_set = 1;
        break;
      case O_DEVICE:
        if (zo_device_kind_parse(optarg, &o->device) != ZO_OK || o->device == ZO_DEVICE_AUTO) goto bad;
        break;
      case O_SGS:
        if (zo_tool_parse_count(optarg, 0, &u) || u == 0 || u > INT64_MAX) goto bad;
        o->sub_group_size = (int64_t)u;
        break;
      case O_BC:
        if (zo_tool_parse_int(optarg, 1, 1024, &l)) goto bad;
        o->buffer_count = l;
        break;
      case O_PBC:
        if (zo_tool_parse_int(optarg, 1, 1024, &l)) goto bad;
        o->param_buffer_count = l;
        break;
      case O_BS:
        if (zo_tool_parse_count(optarg, 1, &u) || u == 0 || u % 4096 || u > (1u << 30)) goto bad;
        o->block_size = (int64_t)u;
        break;
      case O_QD:
        if (zo_tool_parse_int(optarg, 1, 32768, &l)) goto bad;
        o->queue_depth = l;
        break;
      case O_AT:
        if (zo_tool_parse_int(optarg, 0, 4096, &l)) goto bad;
        o->adam_threads = l;
        break;
      case O_WARM:
        if (zo_tool_parse_int(optarg, 0, LONG_MAX, &l)) goto bad;
        o->warmup = l;
        break;
      case O_BF16: o->bf16 = 1; break;
      case O_FP32: o->bf16 = 0; break;
      case O_NOBASE: o->no_baseline = 1; break;
      case O_JSON: o->json = optarg; break;
      case O_RANKS: o->ranks = 1; break;
      case O_OVERLAP:
        if (strcmp(optarg, "on") && strcmp(optarg, "off")) goto bad;
        o->overlap_comm = !strcmp(optarg, "on");
        break;
      case O_RBUCKET:
      case O_ABUCKET:
        if (zo_tool_parse_count(optarg, 0, &u) || u == 0 || u > INT64_MAX) goto bad;
        *(c == O_RBUCKET ? &o->reduce_bucket : &o->allgather_bucket) = (int64_t)u;
        break;
      case O_STAGE:
        if (zo_tool_parse_int(optarg, 0, 3, &l)) goto bad;
        o->stage = l;
        break;
      case O_HELP: usage(stdout); exit(0);
      default:
        fprintf(stderr, "zo-stepbench: unknown or incomplete option '%s' (see --help)\n", argv[optind - 1]);
        return -1;
      bad:
        fprintf(stderr, "zo-stepbench: --%s: bad value '%s' (see --help)\n", name, optarg);
        return -1;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "zo-stepbench: unexpected argument '%s'\n", argv[optind]);
    return -1;
  }
  if (!o->params || !o->layers || !o->nvme_path || !o->steps) {
    fprintf(stderr, "zo-stepbench: --params, --layers, --nvme-path and --steps are required (see --help)\n");
    return -1;
  }
  if (o->params > ZO_ENGINE_MAX_ELEMS) { /* refused before anything is allocated */
    fprintf(stderr, "zo-stepbench: --params %" PRIu64 ": more elements than one engine holds (at most %zu = 2^48)\n",
            o->params, ZO_ENGINE_MAX_ELEMS);
    return -1;
  }
  if ((uint64_t)o->layers > o->params) {
    fprintf(stderr, "zo-stepbench: --layers %d exceeds --params %" PRIu64 "\n", o->layers, o->params);
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

/* ------------------------------------------------------------ compute emulation */

/* Busy-wait @sec seconds: a real compute engine is busy, not asleep. Returns the time spun. */
static double spin(double sec) {
  double t0 = zo_clock_s(), t = t0;
  while (t - t0 < sec) t = zo_clock_s();
  return t - t0;
}

static uint16_t f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even; finite inputs only */
  return (uint16_t)(u >> 16);
}

/* A cheap deterministic value in [-scale, scale] for element @i. */
static float pattern(uint64_t i, unsigned seed, float scale) {
  uint32_t x = (uint32_t)(i * 2654435761u) ^ (seed * 0x9e3779b9u);
  x ^= x >> 15;
  x *= 0x2c1b3c6du;
  x ^= x >> 12;
  return scale * ((float)(x & 0xffffu) / 32768.0f - 1.0f);
}

/* ------------------------------------------------------------ baseline disk */

/*
 * One pass over [0, size) of @fd with @qd requests of @bs bytes in flight
 * (io_uring, O_DIRECT). Returns seconds, or a negative value on error (message printed).
 */
static double uring_pass(struct io_uring *ring, int fd, int is_write, uint64_t size, size_t bs, unsigned qd,
                         char **bufs) {
  uint64_t next = 0, done = 0;
  unsigned inflight = 0;
  int *slot_free = calloc(qd, sizeof *slot_free);
  if (!slot_free) return -1;
  for (unsigned i = 0; i < qd; i++) slot_free[i] = 1;
  double t0 = zo_clock_s();
  while (done < size) {
    while (inflight < qd && next < size) {
      unsigned k = 0;
      while (!slot_free[k]) k++;
      size_t len = size - next < bs ? (size_t)(size - next) : bs;
      struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
      if (!sqe) break;
      if (is_write) io_uring_prep_write(sqe, fd, bufs[k], (unsigned)len, next);
      else io_uring_prep_read(sqe, fd, bufs[k], (unsigned)len, next);
      io_uring_sqe_set_data64(sqe, ((uint64_t)k << 48) | (uint64_t)len);
      slot_free[k] = 0;
      next += len;
      inflight++;
    }
    int rc = io_uring_submit_and_wait(ring, 1);
    if (rc < 0) {
      fprintf(stderr, "zo-stepbench: baseline: io_uring_submit: %s\n", strerror(-rc));
      free(slot_free);
      return -1;
    }
    struct io_uring_cqe *cqe;
    unsigned head, n = 0;
    io_uring_for_each_cqe(ring, head, cqe) {
      uint64_t d = io_uring_cqe_get_data64(cqe);
      size_t want = (size_t)(d & ((1ull << 48) - 1));
      if (cqe->res != (int)want) {
        fprintf(stderr, "zo-stepbench: baseline: %s of %zu bytes returned %d (%s)\n", is_write ? "write" : "read",
                want, cqe->res, cqe->res < 0 ? strerror(-cqe->res) : "short");
        free(slot_free);
        return -1;
      }
      slot_free[d >> 48] = 1;
      done += want;
      inflight--;
      n++;
    }
    io_uring_cq_advance(ring, n);
  }
  double t = zo_clock_s() - t0;
  free(slot_free);
  return t;
}

typedef struct baseline {
  int ok;
  uint64_t bytes; /* per direction */
  double read_s, write_s, read_gbps, write_gbps, gbps;
} baseline;

/* Write @size bytes once (untimed, makes real extents), then time a read pass and a write pass. */
static int run_baseline(const char *dir, uint64_t size, size_t bs, unsigned qd, baseline *b) {
  memset(b, 0, sizeof *b);
  size = (size + 4095) / 4096 * 4096;
  b->bytes = size;
  char path[4200];
  snprintf(path, sizeof path, "%s/zo-stepbench-baseline.%d", dir, (int)getpid());
  int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_DIRECT, 0600);
  if (fd < 0) {
    fprintf(stderr, "zo-stepbench: baseline: cannot open '%s' with O_DIRECT: %s\n", path, strerror(errno));
    return -1;
  }
  unlink(path); /* gone when closed, whatever happens */
  int rc = -1;
  char **bufs = calloc(qd, sizeof *bufs);
  struct io_uring ring;
  int have_ring = 0;
  if (!bufs) goto out;
  for (unsigned i = 0; i < qd; i++) {
    if (posix_memalign((void **)&bufs[i], 4096, bs)) goto out;
    memset(bufs[i], (int)(0x5a + i), bs);
  }
  if (posix_fallocate(fd, 0, (off_t)size) != 0) {
    fprintf(stderr, "zo-stepbench: baseline: cannot preallocate %" PRIu64 " bytes in '%s'\n", size, dir);
    goto out;
  }
  int e = io_uring_queue_init(qd < 4096 ? qd * 2 : 8192, &ring, 0);
  if (e < 0) {
    fprintf(stderr, "zo-stepbench: baseline: io_uring_queue_init: %s\n", strerror(-e));
    goto out;
  }
  have_ring = 1;
  if (uring_pass(&ring, fd, 1, size, bs, qd, bufs) < 0) goto out;
  b->read_s = uring_pass(&ring, fd, 0, size, bs, qd, bufs);
  if (b->read_s < 0) goto out;
  b->write_s = uring_pass(&ring, fd, 1, size, bs, qd, bufs);
  if (b->write_s < 0) goto out;
  fdatasync(fd);
  b->read_gbps = (double)size / b->read_s / 1e9;
  b->write_gbps = (double)size / b->write_s / 1e9;
  b->gbps = 2.0 * (double)size / (b->read_s + b->write_s) / 1e9;
  b->ok = 1;
  rc = 0;
out:
  if (have_ring) io_uring_queue_exit(&ring);
  if (bufs)
    for (unsigned i = 0; i < qd; i++) free(bufs[i]);
  free(bufs);
  close(fd);
  return rc;
}

/* ------------------------------------------------------------ the benchmark */

typedef struct step_rec {
  double step_s, compute_s, fetch_wait_s, grad_ready_s, engine_step_s, opt_window_s;
  uint64_t nvme_bytes, opt_nvme_bytes, h2d_bytes, d2h_bytes;
  double h2d_busy_s, d2h_busy_s, link_stall_s;
  double disk_gbps, link_gbps, params_per_s, transfer_s, overlap_efficiency;
  zo_step_info info;
  size_t device_peak_bytes;
} step_rec;

#define DIE(...)                                   \
  do {                                             \
    fprintf(stderr, "zo-stepbench: " __VA_ARGS__); \
    fprintf(stderr, "\n");                         \
    goto fail;                                     \
  } while (0)

#define ZCHECK(call)                                                                        \
  do {                                                                                      \
    zo_status st_ = (call);                                                                 \
    if (st_ != ZO_OK) DIE("%s failed: %s: %s", #call, zo_status_string(st_), zo_last_error()); \
  } while (0)

static uint64_t nvme_total(const zo_engine_mem *m) { return m->nvme_read_bytes + m->nvme_write_bytes; }

static json_t *step_json(const step_rec *r, int idx) {
  json_t *j = json_object();
  json_object_set_new(j, "step", json_integer(idx + 1));
  json_object_set_new(j, "step_s", json_real(r->step_s));
  json_object_set_new(j, "compute_s", json_real(r->compute_s));
  json_object_set_new(j, "fetch_wait_s", json_real(r->fetch_wait_s));
  json_object_set_new(j, "grad_ready_s", json_real(r->grad_ready_s));
  json_object_set_new(j, "engine_step_s", json_real(r->engine_step_s));
  json_object_set_new(j, "opt_window_s", json_real(r->opt_window_s));
  json_object_set_new(j, "nvme_bytes", json_integer((json_int_t)r->nvme_bytes));
  json_object_set_new(j, "opt_nvme_bytes", json_integer((json_int_t)r->opt_nvme_bytes));
  json_object_set_new(j, "h2d_bytes", json_integer((json_int_t)r->h2d_bytes));
  json_object_set_new(j, "d2h_bytes", json_integer((json_int_t)r->d2h_bytes));
  json_object_set_new(j, "h2d_busy_s", json_real(r->h2d_busy_s));
  json_object_set_new(j, "d2h_busy_s", json_real(r->d2h_busy_s));
  json_object_set_new(j, "link_stall_s", json_real(r->link_stall_s));
  json_object_set_new(j, "disk_gbps", json_real(r->disk_gbps));
  json_object_set_new(j, "link_gbps", json_real(r->link_gbps));
  json_object_set_new(j, "params_per_s", json_real(r->params_per_s));
  json_object_set_new(j, "transfer_s", json_real(r->transfer_s));
  json_object_set_new(j, "adam_s", json_real(r->info.adam_s));
  json_object_set_new(j, "overlap_efficiency", json_real(r->overlap_efficiency));
  json_object_set_new(j, "device_peak_bytes", json_integer((json_int_t)r->device_peak_bytes));
  json_t *info = json_object();
  json_object_set_new(info, "skipped", json_integer(r->info.skipped));
  json_object_set_new(info, "grad_norm", json_real(r->info.grad_norm));
  json_object_set_new(info, "grad_wait_s", json_real(r->info.grad_wait_s));
  json_object_set_new(info, "adam_s", json_real(r->info.adam_s));
  json_object_set_new(info, "swap_s", json_real(r->info.swap_s));
  json_object_set_new(info, "copy_s", json_real(r->info.copy_s));
  json_object_set_new(info, "fetch_wait_s", json_real(r->info.fetch_wait_s));
  json_object_set_new(j, "engine_info", info);
  return j;
}

int main(int argc, char **argv) {
  opts o;
  setvbuf(stdout, NULL, _IOLBF, 0); /* progress lines reach a log file as they happen */
  if (parse_args(argc, argv, &o)) return 2;

  int rc = 1;
  zo_device_t *dev = NULL;
  zo_engine_t *eng = NULL;
  zo_param_t **P = NULL;
  size_t *numel = NULL;
  float *init = NULL;
  void *hgrad = NULL, *dgrad = NULL;
  step_rec *rec = NULL;
  json_t *root = NULL;
  zo_comm_t *comm = NULL;

  const int L = o.layers;
  const uint64_t N = o.params;
  const size_t per = (size_t)(N / (uint64_t)L);
  const size_t largest = per + (size_t)(N - per * (uint64_t)L);
  const zo_dtype wdt = o.bf16 ? ZO_DTYPE_BF16 : ZO_DTYPE_F32;
  const size_t wsz = zo_dtype_size(wdt);

  /* Configuration, built in code. */
  zo_config_t cfg;
  zo_config_defaults(&cfg);
  cfg.zero.stage = o.stage >= 0 ? o.stage : o.oparam != ZO_OFFLOAD_NONE ? 3 : (o.oopt != ZO_OFFLOAD_NONE ? 2 : 0);
  /* Ranks: data-parallel copies of the same synthetic model; rank 0 prints and measures the disk. */
  if (o.ranks) {
    ZCHECK(zo_comm_create_from_env(&comm));
    if (zo_comm_rank(comm) != 0) {
      if (!freopen("/dev/null", "w", stdout)) DIE("rank %d: cannot silence stdout", zo_comm_rank(comm));
      o.no_baseline = 1, o.json = NULL;
    }
  }
  const int world = comm ? zo_comm_size(comm) : 1;
  if (o.overlap_comm >= 0) cfg.zero.overlap_comm = o.overlap_comm;
  if (o.reduce_bucket) cfg.zero.reduce_bucket_size = o.reduce_bucket;
  if (o.allgather_bucket) cfg.zero.allgather_bucket_size = o.allgather_bucket;
  cfg.bf16.enabled = o.bf16;
  cfg.zero.offload_optimizer.device = o.oopt;
  cfg.zero.offload_optimizer.pin_memory = 1;
  cfg.zero.offload_optimizer.pipeline_read = 1;
  cfg.zero.offload_optimizer.pipeline_write = 1;
  snprintf(cfg.zero.offload_optimizer.nvme_path, sizeof cfg.zero.offload_optimizer.nvme_path, "%s", o.nvme_path);
  if (o.buffer_count) cfg.zero.offload_optimizer.buffer_count = o.buffer_count;
  cfg.zero.offload_param.device = o.oparam;
  cfg.zero.offload_param.pin_memory = 1;
  snprintf(cfg.zero.offload_param.nvme_path, sizeof cfg.zero.offload_param.nvme_path, "%s", o.nvme_path);
  if (o.param_buffer_count) cfg.zero.offload_param.buffer_count = o.param_buffer_count;
  if (cfg.zero.offload_param.buffer_size < (int64_t)largest) cfg.zero.offload_param.buffer_size = (int64_t)largest;
  if (cfg.zero.stage3_max_live_parameters < (int64_t)largest) cfg.zero.stage3_max_live_parameters = (int64_t)largest;
  if (o.sub_group_size) cfg.zero.sub_group_size = o.sub_group_size;
  if (o.block_size) cfg.aio.block_size = o.block_size;
  if (o.queue_depth) cfg.aio.queue_depth = o.queue_depth;
  cfg.zoffload.device_memory_limit = (int64_t)o.device_limit;
  cfg.zoffload.adam_threads = o.adam_threads;

  printf("zo-stepbench: %" PRIu64 " params in %d layers (%zu elements each, largest %zu), %s, compute %.3g ms/layer/pass\n",
         N, L, per, largest, zo_dtype_name(wdt), o.compute_ms);
  char link_desc[64];
  if (o.device == ZO_DEVICE_HOST) snprintf(link_desc, sizeof link_desc, "emulated link %.3g GB/s", o.link_gbps);
  else snprintf(link_desc, sizeof link_desc, "real link");
  printf("  device %s (%s), offload_param %s, offload_optimizer %s, stage %d, device limit %" PRIu64 " B, "
         "sub_group_size %lld, buffer_count %d, aio block %lld B qd %lld\n",
         zo_device_kind_name(o.device), link_desc, zo_offload_device_name(o.oparam), zo_offload_device_name(o.oopt),
         cfg.zero.stage, o.device_limit, (long long)cfg.zero.sub_group_size, cfg.zero.offload_optimizer.buffer_count,
         (long long)cfg.aio.block_size, (long long)cfg.aio.queue_depth);
  fflush(stdout);

  /* The device first: --device cuda on a machine without a GPU ends here (77), before any disk work. */
  zo_status dst = zo_device_create(o.device, o.device == ZO_DEVICE_CUDA ? zo_device_default_ordinal() : 0,
                                   (size_t)o.device_limit, &dev);
  if (dst == ZO_ERR_UNSUPPORTED && o.device == ZO_DEVICE_CUDA) {
    fprintf(stderr, "zo-stepbench: --device cuda: no CUDA device (%s)\n", zo_last_error());
    rc = 77;
    goto fail;
  }
  ZCHECK(dst);
  printf("  device: %s\n", zo_device_name(dev));
  if (o.device == ZO_DEVICE_HOST) ZCHECK(zo_device_set_link_gbps(dev, o.link_gbps));
  else if (o.link_set) fprintf(stderr, "zo-stepbench: --link-gbps is ignored with --device %s: the link is real\n",
                               zo_device_kind_name(o.device));

  /* Link bytes per step: the device's counters, or the engine's where the backend keeps none. */
  zo_link_stats lprobe;
  const int dev_link_stats = zo_device_link_stats(dev, &lprobe) == ZO_OK;

  ZCHECK(zo_engine_create(&cfg, dev, comm, &eng));
  if (zo_engine_grad_dtype(eng) != wdt) DIE("engine gradient dtype %s, expected %s", zo_dtype_name(zo_engine_grad_dtype(eng)), zo_dtype_name(wdt));

  P = calloc((size_t)L, sizeof *P);
  numel = calloc((size_t)L, sizeof *numel);
  if (!P || !numel) DIE("out of host memory");
  for (int l = 0; l < L; l++) {
    char name[64];
    snprintf(name, sizeof name, "layer%d.weight", l);
    numel[l] = l == L - 1 ? largest : per;
    ZCHECK(zo_engine_register_param(eng, name, numel[l], &P[l]));
  }
  /* The start-up budget before any disk work: a configuration that cannot fit (e.g. DeepSpeed's default
   * sub_group_size of 1e9 with state on nvme, whose pinned sub-group buffers outgrow host memory) ends here
   * in a second, naming the key to change, instead of after the baseline or in the OOM killer. */
  {
    size_t app[4] = {0};
    app[ZO_TIER_DEVICE] = largest * wsz; /* the gradient buffer allocated below */
    zo_budget bud;
    ZCHECK(zo_engine_budget(eng, app, &bud));
    if (!bud.fits) {
      zo_budget_print(&bud, stdout);
      fflush(stdout);
      if (zo_budget_check(&bud) != ZO_OK)
        DIE("--params %" PRIu64 " with these options does not fit this machine: %s", N, zo_last_error());
    }
  }

  /* The link's limit, on the quiet device before the engine allocates any of it (at finalize): copies of one
   * layer's bytes. After the budget, so a --params the machine cannot hold is refused before this allocates. */
  linkbench lim;
  if (linkbench_measure(dev, per * wsz, 3, &lim) != 0)
    fprintf(stderr, "zo-stepbench: link limit not measured (%s); link ratios not reported\n", lim.note);
  linkbench_print(stdout, "", &lim);

  /* Disk baseline, first run: before the engine touches the disk (quiet device), on the estimated
   * swap size; the second run follows the steps on the exact size. The better of the two is the
   * limit (DESIGN.md section 5: the best a plain O_DIRECT loop reaches on the same path). */
  baseline base_runs[2];
  memset(base_runs, 0, sizeof base_runs);
  baseline base = {0};
  uint64_t base_size = 0;
  const int want_base = !o.no_baseline && (o.oopt == ZO_OFFLOAD_NVME || o.oparam == ZO_OFFLOAD_NVME);
  if (want_base) {
    uint64_t est = (o.oopt == ZO_OFFLOAD_NVME ? N * 12 : 0) + (o.oparam == ZO_OFFLOAD_NVME ? N * wsz : 0);
    printf("baseline (before): io_uring O_DIRECT, %" PRIu64 " bytes, block %lld B, qd %lld, on %s ...\n", est,
           (long long)cfg.aio.block_size, (long long)cfg.aio.queue_depth, o.nvme_path);
    fflush(stdout);
    if (run_baseline(o.nvme_path, est, (size_t)cfg.aio.block_size, (unsigned)cfg.aio.queue_depth, &base_runs[0]))
      fprintf(stderr, "zo-stepbench: baseline (before) failed\n");
    else
      printf("baseline (before): read %.3f GB/s, write %.3f GB/s, read+write %.3f GB/s\n", base_runs[0].read_gbps,
             base_runs[0].write_gbps, base_runs[0].gbps);
  }

  ZCHECK(zo_device_malloc(dev, largest * wsz, &dgrad)); /* before finalize: its device arena takes what is left */
  double t_fin = zo_clock_s();
  ZCHECK(zo_engine_finalize(eng));
  t_fin = zo_clock_s() - t_fin;

  /* Initial weights and the one gradient buffer (same bytes for every layer, never changed). */
  init = malloc(largest * sizeof *init);
  hgrad = malloc(largest * wsz);
  if (!init || !hgrad) DIE("out of host memory for %zu elements", largest);
  for (size_t i = 0; i < largest; i++) {
    float g = pattern(i, 7, 1e-3f);
    if (o.bf16) ((uint16_t *)hgrad)[i] = f32_to_bf16(g);
    else ((float *)hgrad)[i] = g;
  }
  double t_load = zo_clock_s();
  for (int l = 0; l < L; l++) {
    for (size_t i = 0; i < numel[l]; i++) init[i] = pattern(i, (unsigned)l + 100, 0.02f);
    ZCHECK(zo_engine_load_param(eng, P[l], init));
  }
  t_load = zo_clock_s() - t_load;
  free(init);
  init = NULL;
  ZCHECK(zo_memcpy(dev, dgrad, hgrad, largest * wsz, ZO_COPY_H2D));
  free(hgrad);
  hgrad = NULL;

  zo_engine_mem m0;
  ZCHECK(zo_engine_mem_info(eng, &m0));
  printf("  finalize %.2f s, load %.2f s; device %zu B, host %zu B (pinned %zu), nvme %zu B\n", t_fin, t_load,
         m0.device_bytes, m0.host_bytes, m0.pinned_bytes, m0.nvme_bytes);

  rec = calloc((size_t)o.steps, sizeof *rec);
  if (!rec) DIE("out of host memory");
  const double csec = o.compute_ms * 1e-3;
  for (int k = 0; k < o.steps; k++) {
    step_rec *r = &rec[k];
    zo_engine_mem ma, mb, mc;
    zo_link_stats la, lb;
    memset(&la, 0, sizeof la);
    memset(&lb, 0, sizeof lb);
    ZCHECK(zo_engine_mem_info(eng, &ma));
    if (dev_link_stats) ZCHECK(zo_device_link_stats(dev, &la));
    double t0 = zo_clock_s(), t;
    for (int l = 0; l < L; l++) { /* forward */
      const void *w = NULL;
      zo_dtype dt;
      t = zo_clock_s();
      ZCHECK(zo_engine_fetch(eng, P[l], &w, &dt));
      r->fetch_wait_s += zo_clock_s() - t;
      r->compute_s += spin(csec);
      ZCHECK(zo_engine_release(eng, P[l]));
    }
    double t_opt0 = 0;
    for (int l = L - 1; l >= 0; l--) { /* backward */
      const void *w = NULL;
      zo_dtype dt;
      t = zo_clock_s();
      ZCHECK(zo_engine_fetch(eng, P[l], &w, &dt));
      r->fetch_wait_s += zo_clock_s() - t;
      r->compute_s += spin(csec);
      t = zo_clock_s();
      if (l == L - 1) {
        t_opt0 = t;
        ZCHECK(zo_engine_mem_info(eng, &mb));
      }
      ZCHECK(zo_engine_grad_ready(eng, P[l], dgrad, wdt));
      r->grad_ready_s += zo_clock_s() - t;
      ZCHECK(zo_engine_release(eng, P[l]));
    }
    t = zo_clock_s();
    ZCHECK(zo_engine_step(eng, &r->info));
    double t1 = zo_clock_s();
    r->engine_step_s = t1 - t;
    r->step_s = t1 - t0;
    r->opt_window_s = t1 - t_opt0;
    ZCHECK(zo_engine_mem_info(eng, &mc));
    if (dev_link_stats) {
      ZCHECK(zo_device_link_stats(dev, &lb));
    } else { /* no busy or stall times: the engine only counts bytes */
      la.h2d_bytes = ma.h2d_bytes;
      la.d2h_bytes = ma.d2h_bytes;
      lb.h2d_bytes = mc.h2d_bytes;
      lb.d2h_bytes = mc.d2h_bytes;
    }
    r->nvme_bytes = nvme_total(&mc) - nvme_total(&ma);
    r->opt_nvme_bytes = nvme_total(&mc) - nvme_total(&mb);
    r->h2d_bytes = lb.h2d_bytes - la.h2d_bytes;
    r->d2h_bytes = lb.d2h_bytes - la.d2h_bytes;
    r->h2d_busy_s = lb.h2d_busy_s - la.h2d_busy_s;
    r->d2h_busy_s = lb.d2h_busy_s - la.d2h_busy_s;
    r->link_stall_s = (lb.h2d_stall_s - la.h2d_stall_s) + (lb.d2h_stall_s - la.d2h_stall_s);
    r->device_peak_bytes = mc.device_peak_bytes;
    r->disk_gbps = r->opt_window_s > 0 ? (double)r->opt_nvme_bytes / r->opt_window_s / 1e9 : 0;
    r->link_gbps = (double)(r->h2d_bytes + r->d2h_bytes) / r->step_s / 1e9;
    r->params_per_s = (double)N / r->opt_window_s;
    printf("step %d: %.3f s (compute %.3f, fetch wait %.3f, grad_ready %.3f, engine_step %.3f [adam %.3f swap %.3f "
           "grad wait %.3f]), disk %.3f GB/s over %.3f s, link %.3f GB/s\n",
           k + 1, r->step_s, r->compute_s, r->fetch_wait_s, r->grad_ready_s, r->engine_step_s, r->info.adam_s,
           r->info.swap_s, r->info.grad_wait_s, r->disk_gbps, r->opt_window_s, r->link_gbps);
    fflush(stdout);
  }
  zo_engine_mem mend;
  ZCHECK(zo_engine_mem_info(eng, &mend));
  zo_engine_destroy(eng);
  eng = NULL;
  zo_device_free(dev, dgrad);
  dgrad = NULL;

  /* Baseline, second run: the exact swap size, same block size and queue depth. */
  if (want_base) {
    base_size = mend.nvme_bytes ? mend.nvme_bytes : base_runs[0].bytes;
    printf("baseline (after): io_uring O_DIRECT, %" PRIu64 " bytes ...\n", base_size);
    fflush(stdout);
    if (run_baseline(o.nvme_path, base_size, (size_t)cfg.aio.block_size, (unsigned)cfg.aio.queue_depth, &base_runs[1]))
      fprintf(stderr, "zo-stepbench: baseline (after) failed\n");
    else
      printf("baseline (after): read %.3f GB/s, write %.3f GB/s, read+write %.3f GB/s\n", base_runs[1].read_gbps,
             base_runs[1].write_gbps, base_runs[1].gbps);
    base = base_runs[1].gbps > base_runs[0].gbps ? base_runs[1] : base_runs[0];
    if (!base.ok) fprintf(stderr, "zo-stepbench: no baseline; disk ratio not reported\n");
  }

  /* Per-step derived figures that need the baseline, then the summary over steps after warmup. */
  step_rec s = {0};
  int n = 0;
  for (int k = 0; k < o.steps; k++) {
    step_rec *r = &rec[k];
    double disk_s = base.ok && base.gbps > 0 ? (double)r->nvme_bytes / (base.gbps * 1e9) : 0;
    /* A lane's time: its busy time on the emulated link, else its bytes at the limit measured in this run. */
    double h2d_s = r->h2d_busy_s > 0 ? r->h2d_busy_s : lim.ok ? (double)r->h2d_bytes / (lim.h2d_gbps * 1e9) : 0;
    double d2h_s = r->d2h_busy_s > 0 ? r->d2h_busy_s : lim.ok ? (double)r->d2h_bytes / (lim.d2h_gbps * 1e9) : 0;
    r->transfer_s = fmax(fmax(h2d_s, d2h_s), disk_s);
    double bound = fmax(fmax(r->compute_s, r->transfer_s), r->info.adam_s);
    r->overlap_efficiency = r->step_s > 0 ? bound / r->step_s : 0;
    if (k < o.warmup) continue;
    n++;
    s.step_s += r->step_s;
    s.compute_s += r->compute_s;
    s.fetch_wait_s += r->fetch_wait_s;
    s.grad_ready_s += r->grad_ready_s;
    s.engine_step_s += r->engine_step_s;
    s.opt_window_s += r->opt_window_s;
    s.nvme_bytes += r->nvme_bytes;
    s.opt_nvme_bytes += r->opt_nvme_bytes;
    s.h2d_bytes += r->h2d_bytes;
    s.d2h_bytes += r->d2h_bytes;
    s.h2d_busy_s += r->h2d_busy_s;
    s.d2h_busy_s += r->d2h_busy_s;
    s.link_stall_s += r->link_stall_s;
    s.transfer_s += r->transfer_s;
    s.info.adam_s += r->info.adam_s;
    s.info.swap_s += r->info.swap_s;
    s.info.grad_wait_s += r->info.grad_wait_s;
    s.info.copy_s += r->info.copy_s;
    s.info.fetch_wait_s += r->info.fetch_wait_s;
    s.info.comm_s += r->info.comm_s;
    s.info.comm_bytes += r->info.comm_bytes;
  }
  const double inv = 1.0 / n;
  s.step_s *= inv; s.compute_s *= inv; s.fetch_wait_s *= inv; s.grad_ready_s *= inv; s.engine_step_s *= inv;
  s.opt_window_s *= inv; s.h2d_busy_s *= inv; s.d2h_busy_s *= inv; s.link_stall_s *= inv; s.transfer_s *= inv;
  s.info.adam_s *= inv; s.info.swap_s *= inv; s.info.grad_wait_s *= inv; s.info.copy_s *= inv;
  s.info.fetch_wait_s *= inv;
  s.info.comm_s *= inv;
  s.info.comm_bytes /= (uint64_t)n;
  /* ZeRO's volume per rank and step (Rajbhandari et al. 2020, section 7): 2 x parameters for stages 0-2 (a
   * reduce-scatter and an all-gather, or an all-reduce), 3 x for stage 3; bytes of the working dtype. A ring
   * sends (W-1)/W of it, so comm_ratio near (W-1)/W means nothing beyond the minimum was moved. */
  const double paper_bytes = (cfg.zero.stage == 3 ? 3.0 : 2.0) * (double)N * (double)wsz;
  const double comm_ratio = world > 1 ? (double)s.info.comm_bytes / paper_bytes : NAN;
  /* Rates from totals (bytes over time), not means of per-step rates. */
  s.disk_gbps = (double)s.opt_nvme_bytes / (s.opt_window_s * n) / 1e9;
  s.link_gbps = (double)(s.h2d_bytes + s.d2h_bytes) / (s.step_s * n) / 1e9;
  s.params_per_s = (double)N / s.opt_window_s;
  double bound = fmax(fmax(s.compute_s, s.transfer_s), s.info.adam_s);
  s.overlap_efficiency = bound / s.step_s;
  const double opt_bytes_per_param = (double)s.opt_nvme_bytes / n / (double)N;
  const double disk_ratio = base.ok ? s.disk_gbps / base.gbps : NAN;

  printf("\nsummary over steps %d..%d (%d step%s):\n", o.warmup + 1, o.steps, n, n == 1 ? "" : "s");
  printf("  step_s %.4f  compute_s %.4f  transfer_s %.4f  adam_s %.4f  -> overlap_efficiency %.3f (step/bound %.3f)\n",
         s.step_s, s.compute_s, s.transfer_s, s.info.adam_s, s.overlap_efficiency, 1.0 / s.overlap_efficiency);
  printf("  exposed: fetch wait %.4f s (engine says %.4f), grad_ready %.4f s, engine_step %.4f s (grad wait %.4f, swap %.4f, adam %.4f, "
         "copy %.4f)\n",
         s.fetch_wait_s, s.info.fetch_wait_s, s.grad_ready_s, s.engine_step_s, s.info.grad_wait_s, s.info.swap_s, s.info.adam_s,
         s.info.copy_s);
  if (world > 1)
    printf("  communication, %d ranks, stage %d, overlap_comm %s: exposed %.4f s per step (%.3f of the step); %.4g bytes sent per "
           "rank per step = %.3f x ZeRO's %s x params x %zu B (a ring's minimum: (W-1)/W = %.3f)\n", world,
           cfg.zero.stage, cfg.zero.overlap_comm ? "on" : "off", s.info.comm_s, s.info.comm_s / s.step_s, (double)s.info.comm_bytes, comm_ratio,
           cfg.zero.stage == 3 ? "3" : "2", wsz, (double)(world - 1) / world);
  printf("  optimizer window %.4f s: %.3g params/s, nvme %.1f bytes/param, disk %.3f GB/s", s.opt_window_s,
         s.params_per_s, opt_bytes_per_param, s.disk_gbps);
  if (base.ok) printf(" = %.3f of baseline %.3f GB/s\n", disk_ratio, base.gbps);
  else printf(" (no baseline)\n");
  const double link_h2d_gbps = (double)s.h2d_bytes / (s.step_s * n) / 1e9;
  const double link_d2h_gbps = (double)s.d2h_bytes / (s.step_s * n) / 1e9;
  const double link_ratio = lim.ok ? s.link_gbps / lim.duplex_gbps : NAN;
  const double link_h2d_ratio = lim.ok ? link_h2d_gbps / lim.h2d_gbps : NAN;
  const double link_d2h_ratio = lim.ok ? link_d2h_gbps / lim.d2h_gbps : NAN;
  if (o.device == ZO_DEVICE_HOST)
    printf("  link: %.3f GB/s achieved (H2D %.3g B, D2H %.3g B per step; lanes busy %.4f / %.4f s; setting %.3g GB/s)\n",
           s.link_gbps, (double)s.h2d_bytes / n, (double)s.d2h_bytes / n, s.h2d_busy_s, s.d2h_busy_s, o.link_gbps);
  else
    printf("  link: %.3f GB/s achieved (H2D %.3g B, D2H %.3g B per step; bytes from the %s counters)\n", s.link_gbps,
           (double)s.h2d_bytes / n, (double)s.d2h_bytes / n, dev_link_stats ? "device's" : "engine's");
  if (lim.ok)
    printf("  link vs limit: %.3f of full duplex %.3f GB/s; H2D %.3f GB/s = %.3f of %.3f; "
           "D2H %.3f GB/s = %.3f of %.3f\n",
           link_ratio, lim.duplex_gbps, link_h2d_gbps, link_h2d_ratio, lim.h2d_gbps, link_d2h_gbps, link_d2h_ratio,
           lim.d2h_gbps);
  else
    printf("  link vs limit: n/a (limit not measured: %s)\n", lim.note);

  /* Targets of issue 5 that this run can judge. */
  json_t *targets = json_array();
  printf("\ntargets (issue 5):\n");
  {
    json_t *t = json_object();
    json_object_set_new(t, "name", json_string("optimizer step disk bandwidth >= 0.85 x baseline (1e9 params, state on nvme)"));
    json_object_set_new(t, "threshold", json_real(0.85));
    if (o.oopt == ZO_OFFLOAD_NVME && base.ok) {
      int pass = disk_ratio >= 0.85;
      printf("  %s disk: optimizer step %.3f GB/s / baseline %.3f GB/s = %.3f (target >= 0.85; %.1f bytes/param; "
             "%" PRIu64 " params%s)\n",
             pass ? "PASS" : "MISS", s.disk_gbps, base.gbps, disk_ratio, opt_bytes_per_param, N,
             N >= 1000000000ull ? "" : ", the target is stated for 1e9");
      json_object_set_new(t, "status", json_string(pass ? "PASS" : "MISS"));
      json_object_set_new(t, "ratio", json_real(disk_ratio));
    } else {
      printf("  n/a  disk: needs --offload-optimizer nvme and the baseline\n");
      json_object_set_new(t, "status", json_string("n/a"));
    }
    json_array_append_new(targets, t);
  }
  {
    json_t *t = json_object();
    json_object_set_new(t, "name", json_string("overlap efficiency >= 0.9 when compute exceeds transfer"));
    json_object_set_new(t, "threshold", json_real(0.9));
    if (s.compute_s > s.transfer_s && s.compute_s > 0) {
      int pass = s.overlap_efficiency >= 0.9;
      printf("  %s overlap: max(compute %.4f, transfer %.4f, adam %.4f) / step %.4f = %.3f (target >= 0.9)\n",
             pass ? "PASS" : "MISS", s.compute_s, s.transfer_s, s.info.adam_s, s.step_s, s.overlap_efficiency);
      json_object_set_new(t, "status", json_string(pass ? "PASS" : "MISS"));
      json_object_set_new(t, "ratio", json_real(s.overlap_efficiency));
    } else {
      printf("  n/a  overlap: compute %.4f s does not exceed transfer %.4f s\n", s.compute_s, s.transfer_s);
      json_object_set_new(t, "status", json_string("n/a"));
    }
    json_array_append_new(targets, t);
  }
  printf("  n/a  zo-train step time <= 1.2x all-in-device: measured by zo-train, not here\n");

  if (o.json) {
    root = json_object();
    json_object_set_new(root, "tool", json_string("zo-stepbench"));
    json_t *c = json_object();
    json_object_set_new(c, "params", json_integer((json_int_t)N));
    json_object_set_new(c, "layers", json_integer(L));
    json_object_set_new(c, "steps", json_integer(o.steps));
    json_object_set_new(c, "warmup", json_integer(o.warmup));
    json_object_set_new(c, "compute_ms_per_layer", json_real(o.compute_ms));
    json_object_set_new(c, "offload_param", json_string(zo_offload_device_name(o.oparam)));
    json_object_set_new(c, "offload_optimizer", json_string(zo_offload_device_name(o.oopt)));
    json_object_set_new(c, "stage", json_integer(cfg.zero.stage));
    json_object_set_new(c, "device_limit", json_integer((json_int_t)o.device_limit));
    json_object_set_new(c, "device", json_string(zo_device_kind_name(o.device)));
    json_object_set_new(c, "link_gbps", o.device == ZO_DEVICE_HOST ? json_real(o.link_gbps) : json_null());
    json_object_set_new(c, "sub_group_size", json_integer(cfg.zero.sub_group_size));
    json_object_set_new(c, "buffer_count", json_integer(cfg.zero.offload_optimizer.buffer_count));
    json_object_set_new(c, "param_buffer_count", json_integer(cfg.zero.offload_param.buffer_count));
    json_object_set_new(c, "block_size", json_integer(cfg.aio.block_size));
    json_object_set_new(c, "queue_depth", json_integer(cfg.aio.queue_depth));
    json_object_set_new(c, "adam_threads", json_integer(o.adam_threads));
    json_object_set_new(c, "dtype", json_string(zo_dtype_name(wdt)));
    json_object_set_new(c, "nvme_path", json_string(o.nvme_path));
    json_object_set_new(root, "config", c);
    json_object_set_new(root, "params", json_integer((json_int_t)N));
    json_object_set_new(root, "step_s", json_real(s.step_s));
    json_object_set_new(root, "compute_s", json_real(s.compute_s));
    json_object_set_new(root, "transfer_s", json_real(s.transfer_s));
    json_object_set_new(root, "adam_s", json_real(s.info.adam_s));
    json_object_set_new(root, "disk_gbps", json_real(s.disk_gbps));
    json_object_set_new(root, "baseline_disk_gbps", base.ok ? json_real(base.gbps) : json_null());
    json_object_set_new(root, "disk_ratio", base.ok ? json_real(disk_ratio) : json_null());
    json_object_set_new(root, "overlap_efficiency", json_real(s.overlap_efficiency));
    json_object_set_new(root, "step_over_bound", json_real(1.0 / s.overlap_efficiency));
    json_object_set_new(root, "params_per_s", json_real(s.params_per_s));
    json_object_set_new(root, "link_gbps", json_real(s.link_gbps));
    json_object_set_new(root, "link_h2d_gbps", json_real(link_h2d_gbps));
    json_object_set_new(root, "link_d2h_gbps", json_real(link_d2h_gbps));
    json_object_set_new(root, "link_ratio", lim.ok ? json_real(link_ratio) : json_null());
    json_object_set_new(root, "link_h2d_ratio", lim.ok ? json_real(link_h2d_ratio) : json_null());
    json_object_set_new(root, "link_d2h_ratio", lim.ok ? json_real(link_d2h_ratio) : json_null());
    json_object_set_new(root, "device", json_string(zo_device_kind_name(o.device)));
    json_object_set_new(root, "device_name", json_string(zo_device_name(dev)));
    json_object_set_new(root, "link_bytes_from", json_string(dev_link_stats ? "device" : "engine"));
    json_object_set_new(root, "link_limit", linkbench_json(&lim));
    json_object_set_new(root, "opt_window_s", json_real(s.opt_window_s));
    json_object_set_new(root, "opt_nvme_bytes_per_param", json_real(opt_bytes_per_param));
    json_t *ex = json_object();
    json_object_set_new(ex, "fetch_wait_s", json_real(s.fetch_wait_s));
    json_object_set_new(ex, "grad_ready_s", json_real(s.grad_ready_s));
    json_object_set_new(ex, "engine_step_s", json_real(s.engine_step_s));
    json_object_set_new(ex, "grad_wait_s", json_real(s.info.grad_wait_s));
    json_object_set_new(ex, "swap_s", json_real(s.info.swap_s));
    json_object_set_new(ex, "copy_s", json_real(s.info.copy_s));
    json_object_set_new(ex, "engine_fetch_wait_s", json_real(s.info.fetch_wait_s));
    json_object_set_new(ex, "link_stall_s", json_real(s.link_stall_s));
    json_object_set_new(root, "exposed", ex);
    json_t *b = json_object();
    json_object_set_new(b, "ok", json_boolean(base.ok));
    json_object_set_new(b, "bytes", json_integer((json_int_t)base.bytes));
    json_object_set_new(b, "gbps", json_real(base.gbps));
    json_object_set_new(b, "chosen", json_string("the better (read+write GB/s) of a run before the steps and one after"));
    json_object_set_new(b, "read_gbps", json_real(base.read_gbps));
    json_object_set_new(b, "write_gbps", json_real(base.write_gbps));
    json_object_set_new(b, "read_s", json_real(base.read_s));
    json_object_set_new(b, "write_s", json_real(base.write_s));
    json_t *runs = json_array();
    for (int i = 0; i < 2; i++) {
      json_t *r = json_object();
      json_object_set_new(r, "when", json_string(i ? "after" : "before"));
      json_object_set_new(r, "ok", json_boolean(base_runs[i].ok));
      json_object_set_new(r, "bytes", json_integer((json_int_t)base_runs[i].bytes));
      json_object_set_new(r, "gbps", json_real(base_runs[i].gbps));
      json_object_set_new(r, "read_gbps", json_real(base_runs[i].read_gbps));
      json_object_set_new(r, "write_gbps", json_real(base_runs[i].write_gbps));
      json_array_append_new(runs, r);
    }
    json_object_set_new(b, "runs", runs);
    json_object_set_new(root, "baseline", b);
    json_t *mem = json_object();
    json_object_set_new(mem, "device_bytes", json_integer((json_int_t)mend.device_bytes));
    json_object_set_new(mem, "device_peak_bytes", json_integer((json_int_t)mend.device_peak_bytes));
    json_object_set_new(mem, "host_bytes", json_integer((json_int_t)mend.host_bytes));
    json_object_set_new(mem, "pinned_bytes", json_integer((json_int_t)mend.pinned_bytes));
    json_object_set_new(mem, "nvme_bytes", json_integer((json_int_t)mend.nvme_bytes));
    json_object_set_new(root, "memory", mem);
    json_t *cm = json_object();
    json_object_set_new(cm, "ranks", json_integer(world));
    json_object_set_new(cm, "stage", json_integer(cfg.zero.stage));
    json_object_set_new(cm, "overlap_comm", json_boolean(cfg.zero.overlap_comm));
    json_object_set_new(cm, "exposed_s", json_real(s.info.comm_s));
    json_object_set_new(cm, "bytes_per_rank", json_integer((json_int_t)s.info.comm_bytes));
    json_object_set_new(cm, "zero_paper_bytes", json_real(paper_bytes));
    json_object_set_new(cm, "ratio", world > 1 ? json_real(comm_ratio) : json_null());
    json_object_set_new(cm, "ring_minimum_ratio", json_real((double)(world - 1) / world));
    json_object_set_new(root, "communication", cm);
    json_t *arr = json_array();
    for (int k = 0; k < o.steps; k++) json_array_append_new(arr, step_json(&rec[k], k));
    json_object_set_new(root, "per_step", arr);
    json_object_set_new(root, "targets", targets);
    targets = NULL;
    json_t *d = json_object();
    json_object_set_new(d, "step_s", json_string("wall time of forward + backward + zo_engine_step, mean over steps after warmup"));
    json_object_set_new(d, "disk_gbps", json_string("swap bytes read+written from the first zo_engine_grad_ready of a step to the return of zo_engine_step, over that window (1e9 B/s)"));
    json_object_set_new(d, "baseline_disk_gbps", json_string("2 x bytes / (read pass + write pass time) of an io_uring O_DIRECT loop, same block size and queue depth, file the size of the swap state (written once untimed first), same path, same run; the better of a run before the steps and one after"));
    json_object_set_new(d, "overlap_efficiency", json_string("max(compute_s, transfer_s, adam_s) / step_s; transfer_s = max(H2D lane time, D2H lane time, step swap bytes / baseline_disk_gbps), a lane's time being its busy time on the emulated link, else its bytes / its link_limit; step_over_bound is its inverse (the issue's step / max)"));
    json_object_set_new(d, "link_gbps", json_string("(H2D + D2H bytes over the link) / step_s; link_h2d_gbps and link_d2h_gbps per direction; bytes from zo_device_link_stats, or the engine's counters (link_bytes_from)"));
    json_object_set_new(d, "link_limit", json_string("before the engine starts, best of 3: zo_memcpy_async loops of chunk_bytes (one layer in the working dtype) between pinned host and device memory, H2D alone, D2H alone, and both at once on two streams (duplex_gbps = both directions' bytes / time until both finished); host device: the emulated link, or memcpy when unlimited"));
    json_object_set_new(d, "link_ratio", json_string("link_gbps / link_limit.duplex_gbps; link_h2d_ratio = link_h2d_gbps / link_limit.h2d_gbps, link_d2h_ratio likewise (1.0: the step is bound by the link)"));
    json_object_set_new(d, "params_per_s", json_string("params / optimizer window"));
    json_object_set_new(d, "communication", json_string("--ranks: exposed_s = time blocked in collectives per step (zo_step_info.comm_s); bytes_per_rank = what a ring algorithm sends from one rank for them (zo_step_info.comm_bytes); ratio = bytes_per_rank / zero_paper_bytes (2 x params x bytes per element for stages 0-2, 3 x for stage 3)"));
    json_object_set_new(root, "definitions", d);
    if (json_dump_file(root, o.json, JSON_INDENT(2) | JSON_PRESERVE_ORDER) != 0) DIE("cannot write JSON to '%s'", o.json);
    printf("\nJSON written to %s\n", o.json);
  }
  json_decref(targets);
  rc = 0;

fail:
  json_decref(root);
  if (eng) zo_engine_destroy(eng);
  if (dev && dgrad) zo_device_free(dev, dgrad);
  zo_device_destroy(dev);
  free(P);
  free(numel);
  free(init);
  free(hgrad);
  free(rec);
  zo_comm_destroy(comm);
  return rc;
}
