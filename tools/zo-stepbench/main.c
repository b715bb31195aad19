/*
 * zo-stepbench - measures the offload engine's step pipeline at scale on a
 * synthetic model (L layers, one tensor each, fixed CPU-spin "compute" per
 * layer) against the disk's own O_DIRECT io_uring throughput measured on the
 * same path in the same run, and against the step-time model's prediction for its placement
 * (zoffload/placement.h). It is a benchmark tool, not a test and not a model.
 * main() reads as the run's table of contents; options.c holds the command
 * line, baseline.c the disk baseline, report.c the summary and the JSON.
 */
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "progress.h"
#include "stepbench.h"
#include "zoffload/budget.h"
#include "zoffload/status.h"

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

/* ------------------------------------------------------------ the benchmark */

/* Failures print "zo-stepbench: " and the message, and return 1 (the exit status) from the phase. */
#define DIE(...)                                   \
  do {                                             \
    fprintf(stderr, "zo-stepbench: " __VA_ARGS__); \
    fprintf(stderr, "\n");                         \
    return 1;                                      \
  } while (0)

#define ZCHECK(call)                                                                           \
  do {                                                                                         \
    zo_status st_ = (call);                                                                    \
    if (st_ != ZO_OK) DIE("%s failed: %s: %s", #call, zo_status_string(st_), zo_last_error()); \
  } while (0)

static uint64_t nvme_total(const zo_engine_mem *m) {
  return m->nvme_read_bytes + m->nvme_write_bytes;
}


/* offload_param.max_in_cpu = @n through the config parser, as a config file writes it: an engine with the host
 * cache of nvme parameters acts on the key only when the document writes it (DeepSpeed's default 1e9 is no
 * budget), and only the parser records that. The parsed offload_param block replaces @cfg's; the caller sets its
 * other fields after. Returns 0, or 1 after printing the error. */
static int set_param_max_in_cpu(zo_config_t *cfg, int64_t n) {
  char doc[128];
  snprintf(
      doc, sizeof doc,
      "{\"train_batch_size\": 1, \"zero_optimization\": {\"offload_param\": {\"max_in_cpu\": %lld}}}",
      (long long)n);
  zo_config_t *tmp = malloc(sizeof *tmp); /* large (nvme paths): not on the stack */
  if (!tmp) DIE("out of host memory");
  const zo_status st = zo_config_parse(doc, strlen(doc), "--param-max-in-cpu", NULL, tmp);
  if (st == ZO_OK) cfg->zero.offload_param = tmp->zero.offload_param;
  free(tmp);
  ZCHECK(st);
  return 0;
}

/* The model's shape and the engine's configuration, built in code; with --ranks, the ranks (rank 0 prints and
 * measures the disk). Returns 0, or 1 after printing the error. */
static int configure(opts *o, bench *b) {
  b->L = o->layers;
  b->N = o->params;
  b->per = (size_t)(b->N / (uint64_t)b->L);
  b->largest = b->per + (size_t)(b->N - b->per * (uint64_t)b->L);
  b->wdt = o->bf16 ? ZO_DTYPE_BF16 : ZO_DTYPE_F32;
  b->wsz = zo_dtype_size(b->wdt);
  zo_config_t *cfg = &b->cfg;
  zo_config_defaults(cfg);
  cfg->zero.stage = o->stage >= 0                  ? o->stage
                    : o->oparam != ZO_OFFLOAD_NONE ? 3
                                                   : (o->oopt != ZO_OFFLOAD_NONE ? 2 : 0);
  /* Ranks: data-parallel copies of the same synthetic model; rank 0 prints and measures the disk. */
  if (o->ranks) {
    zo_comm_t *comm = NULL;
    ZCHECK(zo_comm_create_from_env(&comm));
    b->comm = comm;
    if (zo_comm_rank(comm) != 0) {
      if (!freopen("/dev/null", "w", stdout))
        DIE("rank %d: cannot silence stdout", zo_comm_rank(comm));
      o->no_baseline = 1, o->json = NULL;
    }
  }
  b->world = b->comm ? zo_comm_size(b->comm) : 1;
  if (o->overlap_comm >= 0) cfg->zero.overlap_comm = o->overlap_comm;
  if (o->reduce_bucket) cfg->zero.reduce_bucket_size = o->reduce_bucket;
  if (o->allgather_bucket) cfg->zero.allgather_bucket_size = o->allgather_bucket;
  cfg->bf16.enabled = o->bf16;
  cfg->zero.offload_optimizer.device = o->oopt;
  cfg->zero.offload_optimizer.pin_memory = 1;
  cfg->zero.offload_optimizer.pipeline_read = 1;
  cfg->zero.offload_optimizer.pipeline_write = 1;
  snprintf(cfg->zero.offload_optimizer.nvme_path, sizeof cfg->zero.offload_optimizer.nvme_path,
           "%s", o->nvme_path);
  if (o->buffer_count) cfg->zero.offload_optimizer.buffer_count = o->buffer_count;
  if (o->param_max_in_cpu >= 0 && set_param_max_in_cpu(cfg, o->param_max_in_cpu)) return 1;
  cfg->zero.offload_param.device = o->oparam;
  cfg->zero.offload_param.pin_memory = 1;
  snprintf(cfg->zero.offload_param.nvme_path, sizeof cfg->zero.offload_param.nvme_path, "%s",
           o->nvme_path);
  if (o->param_buffer_count) cfg->zero.offload_param.buffer_count = o->param_buffer_count;
  const int64_t largest = (int64_t)b->largest;
  if (cfg->zero.offload_param.buffer_size < largest) cfg->zero.offload_param.buffer_size = largest;
  if (cfg->zero.stage3_max_live_parameters < largest)
    cfg->zero.stage3_max_live_parameters = largest;
  if (o->sub_group_size) cfg->zero.sub_group_size = o->sub_group_size;
  if (o->block_size) cfg->aio.block_size = o->block_size;
  if (o->queue_depth) cfg->aio.queue_depth = o->queue_depth;
  cfg->zoffload.device_memory_limit = (int64_t)o->device_limit;
  cfg->zoffload.adam_threads = o->adam_threads;
  cfg->gradient_accumulation_steps = o->gas;
  cfg->zoffload.placement = o->placement;
  cfg->zoffload.optimizer_max_in_cpu = o->optimizer_max_in_cpu;
  cfg->zoffload.placement_host_bytes = o->placement_host_bytes;
  return 0;
}

/* The run's shape and settings, two lines. */
static void print_config(const opts *o, const bench *b) {
  printf("zo-stepbench: %" PRIu64
         " params in %d layers (%zu elements each, largest %zu), %s, compute %.3g ms/layer/pass\n",
         b->N, b->L, b->per, b->largest, zo_dtype_name(b->wdt), o->compute_ms);
  char link_desc[64];
  if (o->device == ZO_DEVICE_HOST)
    snprintf(link_desc, sizeof link_desc, "emulated link %.3g GB/s", o->link_gbps);
  else
    snprintf(link_desc, sizeof link_desc, "real link");
  printf("  device %s (%s), offload_param %s, offload_optimizer %s, stage %d, device limit %" PRIu64
         " B, "
         "sub_group_size %lld, buffer_count %d, aio block %lld B qd %lld\n",
         zo_device_kind_name(o->device), link_desc, zo_offload_device_name(o->oparam),
         zo_offload_device_name(o->oopt), b->cfg.zero.stage, o->device_limit,
         (long long)b->cfg.zero.sub_group_size, b->cfg.zero.offload_optimizer.buffer_count,
         (long long)b->cfg.aio.block_size, (long long)b->cfg.aio.queue_depth);
  if (o->gas > 1)
    printf("  gradient_accumulation_steps %d: %d forward and backward passes per step\n", o->gas,
           o->gas);
  fflush(stdout);
}

/* The device first: --device cuda on a machine without a GPU ends here (77), before any disk work. Then its link:
 * emulated at --link-gbps on the host device. @o by value: the ZCHECK texts read as they always have. Returns 0,
 * 77 without a CUDA device, or 1 after printing the error. */
static int open_device(const opts o, bench *b) {
  zo_device_t *dev = NULL;
  zo_status dst =
      zo_device_create(o.device, o.device == ZO_DEVICE_CUDA ? zo_device_default_ordinal() : 0,
                       (size_t)o.device_limit, &dev);
  b->dev = dev;
  if (dst == ZO_ERR_UNSUPPORTED && o.device == ZO_DEVICE_CUDA) {
    fprintf(stderr, "zo-stepbench: --device cuda: no CUDA device (%s)\n", zo_last_error());
    return 77;
  }
  ZCHECK(dst);
  printf("  device: %s\n", zo_device_name(dev));
  if (o.device == ZO_DEVICE_HOST)
    ZCHECK(zo_device_set_link_gbps(dev, o.link_gbps));
  else if (o.link_set)
    fprintf(stderr, "zo-stepbench: --link-gbps is ignored with --device %s: the link is real\n",
            zo_device_kind_name(o.device));
  /* Link bytes per step: the device's counters, or the engine's where the backend keeps none. */
  zo_link_stats lprobe;
  b->dev_link_stats = zo_device_link_stats(dev, &lprobe) == ZO_OK;
  return 0;
}

/* The start-up budget of the engine's plan as it stands, before any disk work: a configuration that cannot fit
 * (e.g. DeepSpeed's default sub_group_size of 1e9 with state on nvme, whose pinned sub-group buffers outgrow host
 * memory) ends here in a second, naming the key to change, instead of after the baseline or in the OOM killer.
 * @app: what the tool holds besides the engine, per zo_tier. Returns 0, or 1 after printing the error. */
static int check_budget(bench *b, const size_t app[4]) {
  zo_budget bud;
  ZCHECK(zo_engine_budget(b->eng, app, &bud));
  if (!bud.fits) {
    zo_budget_print(&bud, stdout);
    fflush(stdout);
    if (zo_budget_check(&bud) != ZO_OK)
      DIE("--params %" PRIu64 " with these options does not fit this machine: %s", b->N,
          zo_last_error());
  }
  return 0;
}

/* What the tool holds besides the engine, per zo_tier: the device gradient buffer load_model() allocates. */
static void app_bytes(const bench *b, size_t app[4]) {
  memset(app, 0, 4 * sizeof *app);
  app[ZO_TIER_DEVICE] = b->largest * b->wsz;
}

/* The engine with one parameter per layer, then (placement "config") the start-up budget; with "auto" the
 * budget waits for the split the planner chooses (place_engine()). Returns 0, or 1 after printing the error. */
static int create_engine(const opts *o, bench *b) {
  const zo_config_t cfg = b->cfg;
  zo_device_t *dev = b->dev;
  zo_comm_t *comm = b->comm;
  zo_engine_t *eng = NULL;
  const int L = b->L;
  const size_t per = b->per, largest = b->largest;
  const zo_dtype wdt = b->wdt;
  ZCHECK(zo_engine_create(&cfg, dev, comm, &eng));
  b->eng = eng;
  if (zo_engine_grad_dtype(eng) != wdt)
    DIE("engine gradient dtype %s, expected %s", zo_dtype_name(zo_engine_grad_dtype(eng)),
        zo_dtype_name(wdt));
  zo_param_t **P = b->P = calloc((size_t)L, sizeof *P);
  size_t *numel = b->numel = calloc((size_t)L, sizeof *numel);
  if (!P || !numel) DIE("out of host memory");
  for (int l = 0; l < L; l++) {
    char name[64];
    snprintf(name, sizeof name, "layer%d.weight", l);
    numel[l] = l == L - 1 ? largest : per;
    ZCHECK(zo_engine_register_param(eng, name, numel[l], &P[l]));
  }
  size_t app[4];
  app_bytes(b, app);
  return o->placement == ZO_PLACEMENT_AUTO ? 0 : check_budget(b, app);
}

static const char *const k_rate_name[6] = {"nvme read",    "nvme write", "host->device",
                                           "device->host", "adam",       "compute"};

/* The placement and its predicted step, before finalize: the machine's speeds (zo_step_rates_get: the config has
 * none, so the speeds cache or a ~1 s measurement of this disk, link and Adam pool), the synthetic compute of one
 * optimizer step exactly as run_step() spins it (L layers x 2 passes x --compute-ms-per-layer x --gas) and its
 * fetches (each layer once forward and once backward per micro-batch: 2 x --gas), then zo_engine_place(): "auto"
 * chooses the split (and the budget is checked for it here), "config" only predicts. Returns 0, or 1 after
 * printing the error. */
static int place_engine(const opts *o, bench *b) {
  const double compute_s = (double)b->L * 2.0 * o->compute_ms * 1e-3 * (double)o->gas;
  const double fetches = 2.0 * o->gas;
  ZCHECK(zo_step_rates_get(b->eng, compute_s, fetches, &b->rates));
  zo_step_rates *r = &b->rates;
  snprintf(r->src[5], sizeof r->src[5], "%d layers x 2 passes x %g ms x gas %d, CPU spin", b->L,
           o->compute_ms, o->gas);
  size_t app[4];
  app_bytes(b, app);
  const zo_place_opts po = {.app = app};
  ZCHECK(zo_engine_place(b->eng, r, &po, &b->place));
  const double v[6] = {r->nvme_read_Bps, r->nvme_write_Bps, r->h2d_Bps,
                       r->d2h_Bps,       r->adam_el_per_s,  r->compute_s};
  printf("  speeds:");
  for (int i = 0; i < 6; i++) {
    if (i == 4)
      printf(" %s %.3g Gelem/s (%s);", k_rate_name[i], v[i] / 1e9, r->src[i]);
    else if (i == 5)
      printf(" %s %.3f s/step (%s)\n", k_rate_name[i], v[i], r->src[i]);
    else
      printf(" %s %.2f GB/s (%s);", k_rate_name[i], v[i] / 1e9, r->src[i]);
  }
  printf("  %s ",
         o->placement == ZO_PLACEMENT_AUTO ? "placement \"auto\":" : "placement \"config\":");
  zo_placement_print(&b->place, stdout);
  printf("  ");
  zo_step_prediction_print(&b->place.pred, stdout);
  fflush(stdout);
  return o->placement == ZO_PLACEMENT_AUTO ? check_budget(b, app) : 0;
}

/* The link's limit, on the quiet device before the engine allocates any of it (at finalize): copies of one
 * layer's bytes. After the budget, so a --params the machine cannot hold is refused before this allocates. */
static void measure_link(bench *b) {
  if (linkbench_measure(b->dev, b->per * b->wsz, 3, &b->lim) != 0)
    fprintf(stderr, "zo-stepbench: link limit not measured (%s); link ratios not reported\n",
            b->lim.note);
  linkbench_print(stdout, "", &b->lim);
}

/* One disk baseline run (@which 0 before the steps, 1 after) of @bytes, printed. */
static void baseline_run(const opts *o, bench *b, int which, uint64_t bytes) {
  const char *when = which ? "after" : "before";
  fflush(stdout);
  baseline *r = &b->base_runs[which];
  if (run_baseline(o->nvme_path, bytes, (size_t)b->cfg.aio.block_size,
                   (unsigned)b->cfg.aio.queue_depth, r))
    fprintf(stderr, "zo-stepbench: baseline (%s) failed\n", when);
  else
    printf("baseline (%s): read %.3f GB/s, write %.3f GB/s, read+write %.3f GB/s\n", when,
           r->read_gbps, r->write_gbps, r->gbps);
}

/* Disk baseline, first run: before the engine touches the disk (quiet device), on the estimated swap size; the
 * second run follows the steps on the exact size. The better of the two is the limit (DESIGN.md section 5: the
 * best a plain O_DIRECT loop reaches on the same path). */
static void baseline_before(const opts *o, bench *b) {
  b->want_base = !o->no_baseline && (o->oopt == ZO_OFFLOAD_NVME || o->oparam == ZO_OFFLOAD_NVME);
  if (!b->want_base) return;
  const uint64_t N = b->N;
  uint64_t est =
      (o->oopt == ZO_OFFLOAD_NVME ? N * 12 : 0) + (o->oparam == ZO_OFFLOAD_NVME ? N * b->wsz : 0);
  printf("baseline (before): io_uring O_DIRECT, %" PRIu64
         " bytes, block %lld B, qd %lld, on %s ...\n",
         est, (long long)b->cfg.aio.block_size, (long long)b->cfg.aio.queue_depth, o->nvme_path);
  baseline_run(o, b, 0, est);
}

/* The gradient buffer on the device, the engine finalized, every layer's initial weights loaded and the one
 * gradient (same bytes for every layer, never changed) copied up. Returns 0, or 1 after printing the error. */
static int load_model(const opts *o, bench *b) {
  zo_device_t *dev = b->dev;
  zo_engine_t *eng = b->eng;
  zo_param_t **P = b->P;
  const size_t largest = b->largest, wsz = b->wsz;
  void *dgrad = NULL;
  ZCHECK(zo_device_malloc(dev, largest * wsz,
                          &dgrad)); /* before finalize: its device arena takes what is left */
  b->dgrad = dgrad;
  double t_fin = zo_clock_s();
  ZCHECK(zo_engine_finalize(eng));
  b->t_fin = t_fin = zo_clock_s() - t_fin;
  float *init = b->init = malloc(largest * sizeof *init);
  void *hgrad = b->hgrad = malloc(largest * wsz);
  if (!init || !hgrad) DIE("out of host memory for %zu elements", largest);
  for (size_t i = 0; i < largest; i++) {
    float g = pattern(i, 7, 1e-3f);
    if (o->bf16)
      ((uint16_t *)hgrad)[i] = f32_to_bf16(g);
    else
      ((float *)hgrad)[i] = g;
  }
  double t_load = zo_clock_s();
  for (int l = 0; l < b->L; l++) {
    for (size_t i = 0; i < b->numel[l]; i++) init[i] = pattern(i, (unsigned)l + 100, 0.02f);
    ZCHECK(zo_engine_load_param(eng, P[l], init));
  }
  b->t_load = t_load = zo_clock_s() - t_load;
  free(b->init);
  b->init = NULL;
  ZCHECK(zo_memcpy(dev, dgrad, hgrad, largest * wsz, ZO_COPY_H2D));
  free(b->hgrad);
  b->hgrad = NULL;
  zo_engine_mem m0;
  ZCHECK(zo_engine_mem_info(eng, &m0));
  printf("  finalize %.2f s, load %.2f s; device %zu B, host %zu B (pinned %zu), nvme %zu B\n",
         t_fin, t_load, m0.device_bytes, m0.host_bytes, m0.pinned_bytes, m0.nvme_bytes);
  return 0;
}

/* One step into @r: --gas micro-batches of forward over layers 0..L-1 (fetch, spin, release) and backward over
 * L-1..0 (fetch, spin, grad_accumulate or, in the last micro-batch, grad_ready, release), zo_engine_step; the bytes
 * and link figures from the counters before and after. Returns 0, or 1 after printing the error. */
static int run_step(const bench *b, int gas, double csec, step_rec *r) {
  zo_device_t *dev = b->dev;
  zo_engine_t *eng = b->eng;
  zo_param_t **P = b->P;
  void *dgrad = b->dgrad;
  const zo_dtype wdt = b->wdt;
  const int L = b->L, dev_link_stats = b->dev_link_stats;
  zo_engine_mem ma, mb, mc;
  zo_link_stats la, lb;
  memset(&la, 0, sizeof la);
  memset(&lb, 0, sizeof lb);
  ZCHECK(zo_engine_mem_info(eng, &ma));
  if (dev_link_stats) ZCHECK(zo_device_link_stats(dev, &la));
  double t0 = zo_clock_s(), t;
  double t_opt0 = 0;
  for (int mb_i = 0; mb_i < gas; mb_i++) {
    const int last_mb = mb_i == gas - 1;
    for (int l = 0; l < L; l++) { /* forward */
      const void *w = NULL;
      zo_dtype dt;
      t = zo_clock_s();
      ZCHECK(zo_engine_fetch(eng, P[l], &w, &dt));
      r->fetch_wait_s += zo_clock_s() - t;
      r->compute_s += spin(csec);
      ZCHECK(zo_engine_release(eng, P[l]));
    }
    for (int l = L - 1; l >= 0; l--) { /* backward */
      const void *w = NULL;
      zo_dtype dt;
      t = zo_clock_s();
      ZCHECK(zo_engine_fetch(eng, P[l], &w, &dt));
      r->fetch_wait_s += zo_clock_s() - t;
      r->compute_s += spin(csec);
      t = zo_clock_s();
      if (l == L - 1 && last_mb) {
        t_opt0 = t;
        ZCHECK(zo_engine_mem_info(eng, &mb));
      }
      if (last_mb)
        ZCHECK(zo_engine_grad_ready(eng, P[l], dgrad, wdt));
      else
        ZCHECK(zo_engine_grad_accumulate(eng, P[l], dgrad, wdt));
      r->grad_ready_s += zo_clock_s() - t;
      ZCHECK(zo_engine_release(eng, P[l]));
    }
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
  r->nvme_read_bytes = mc.nvme_read_bytes - ma.nvme_read_bytes;
  r->nvme_write_bytes = mc.nvme_write_bytes - ma.nvme_write_bytes;
  r->opt_nvme_bytes = nvme_total(&mc) - nvme_total(&mb);
  r->h2d_bytes = lb.h2d_bytes - la.h2d_bytes;
  r->d2h_bytes = lb.d2h_bytes - la.d2h_bytes;
  r->h2d_busy_s = lb.h2d_busy_s - la.h2d_busy_s;
  r->d2h_busy_s = lb.d2h_busy_s - la.d2h_busy_s;
  r->link_stall_s = (lb.h2d_stall_s - la.h2d_stall_s) + (lb.d2h_stall_s - la.d2h_stall_s);
  r->device_peak_bytes = mc.device_peak_bytes;
  r->disk_gbps = r->opt_window_s > 0 ? (double)r->opt_nvme_bytes / r->opt_window_s / 1e9 : 0;
  r->link_gbps = (double)(r->h2d_bytes + r->d2h_bytes) / r->step_s / 1e9;
  r->params_per_s = (double)b->N / r->opt_window_s;
  return 0;
}

/* --steps steps, one line each; then the engine's final memory, the engine and the gradient buffer freed.
 * Returns 0, or 1 after printing the error. */
static int run_steps(const opts *o, bench *b) {
  b->rec = calloc((size_t)o->steps, sizeof *b->rec);
  if (!b->rec) DIE("out of host memory");
  const double csec = o->compute_ms * 1e-3, t0 = zo_clock_s();
  for (int k = 0; k < o->steps; k++) {
    step_rec *r = &b->rec[k];
    if (run_step(b, o->gas, csec, r)) return 1;
    const double el = zo_clock_s() - t0; /* the steps' wall time; ETA at their mean rate */
    char e[32], eta[32];
    printf(
        "step %d: %.3f s (compute %.3f, fetch wait %.3f, grad_ready %.3f, engine_step %.3f [adam %.3f swap %.3f "
        "grad wait %.3f]), disk %.3f GB/s over %.3f s, link %.3f GB/s | %d/%d, %s elapsed, ETA %s\n",
        k + 1, r->step_s, r->compute_s, r->fetch_wait_s, r->grad_ready_s, r->engine_step_s,
        r->info.adam_s, r->info.swap_s, r->info.grad_wait_s, r->disk_gbps, r->opt_window_s,
        r->link_gbps, k + 1, o->steps, zo_tool_duration(el, e, sizeof e),
        zo_tool_duration(zo_tool_eta_s(el, k + 1, o->steps), eta, sizeof eta));
    fflush(stdout);
  }
  zo_engine_t *eng = b->eng;
  zo_engine_mem mend;
  ZCHECK(zo_engine_mem_info(eng, &mend));
  b->mend = mend;
  zo_engine_destroy(eng);
  b->eng = NULL;
  zo_device_free(b->dev, b->dgrad);
  b->dgrad = NULL;
  return 0;
}

/* Baseline, second run: the exact swap size, same block size and queue depth; then the better of the two. */
static void baseline_after(const opts *o, bench *b) {
  if (!b->want_base) return;
  const uint64_t base_size = b->mend.nvme_bytes ? b->mend.nvme_bytes : b->base_runs[0].bytes;
  printf("baseline (after): io_uring O_DIRECT, %" PRIu64 " bytes ...\n", base_size);
  baseline_run(o, b, 1, base_size);
  b->base = b->base_runs[1].gbps > b->base_runs[0].gbps ? b->base_runs[1] : b->base_runs[0];
  if (!b->base.ok) fprintf(stderr, "zo-stepbench: no baseline; disk ratio not reported\n");
}

/* Each step's figures that need the baseline and the link limit: transfer time and overlap efficiency. */
static void finish_step(const bench *b, step_rec *r) {
  const baseline *base = &b->base;
  const linkbench *lim = &b->lim;
  double disk_s = base->ok && base->gbps > 0 ? (double)r->nvme_bytes / (base->gbps * 1e9) : 0;
  /* A lane's time: its busy time on the emulated link, else its bytes at the limit measured in this run. */
  double h2d_s = r->h2d_busy_s > 0 ? r->h2d_busy_s
                 : lim->ok         ? (double)r->h2d_bytes / (lim->h2d_gbps * 1e9)
                                   : 0;
  double d2h_s = r->d2h_busy_s > 0 ? r->d2h_busy_s
                 : lim->ok         ? (double)r->d2h_bytes / (lim->d2h_gbps * 1e9)
                                   : 0;
  r->transfer_s = fmax(fmax(h2d_s, d2h_s), disk_s);
  double bound = fmax(fmax(r->compute_s, r->transfer_s), r->info.adam_s);
  r->overlap_efficiency = r->step_s > 0 ? bound / r->step_s : 0;
}

/* @r added into the sums @s. */
static void add_step(step_rec *s, const step_rec *r) {
  s->step_s += r->step_s;
  s->compute_s += r->compute_s;
  s->fetch_wait_s += r->fetch_wait_s;
  s->grad_ready_s += r->grad_ready_s;
  s->engine_step_s += r->engine_step_s;
  s->opt_window_s += r->opt_window_s;
  s->nvme_bytes += r->nvme_bytes;
  s->nvme_read_bytes += r->nvme_read_bytes;
  s->nvme_write_bytes += r->nvme_write_bytes;
  s->opt_nvme_bytes += r->opt_nvme_bytes;
  s->h2d_bytes += r->h2d_bytes;
  s->d2h_bytes += r->d2h_bytes;
  s->h2d_busy_s += r->h2d_busy_s;
  s->d2h_busy_s += r->d2h_busy_s;
  s->link_stall_s += r->link_stall_s;
  s->transfer_s += r->transfer_s;
  s->info.adam_s += r->info.adam_s;
  s->info.swap_s += r->info.swap_s;
  s->info.grad_wait_s += r->info.grad_wait_s;
  s->info.copy_s += r->info.copy_s;
  s->info.fetch_wait_s += r->info.fetch_wait_s;
  s->info.comm_s += r->info.comm_s;
  s->info.comm_bytes += r->info.comm_bytes;
}

/* The summary over the steps after warmup: means (rates from totals, bytes over time, not means of per-step
 * rates) and the ratios against ZeRO's volume, the baseline and the link limit. */
static void summarize(const opts *o, bench *b) {
  summary *m = &b->sum;
  step_rec s = {0};
  int n = 0;
  for (int k = 0; k < o->steps; k++) {
    finish_step(b, &b->rec[k]);
    if (k < o->warmup) continue;
    n++;
    add_step(&s, &b->rec[k]);
  }
  const double inv = 1.0 / n;
  s.step_s *= inv;
  s.compute_s *= inv;
  s.fetch_wait_s *= inv;
  s.grad_ready_s *= inv;
  s.engine_step_s *= inv;
  s.opt_window_s *= inv;
  s.h2d_busy_s *= inv;
  s.d2h_busy_s *= inv;
  s.link_stall_s *= inv;
  s.transfer_s *= inv;
  s.info.adam_s *= inv;
  s.info.swap_s *= inv;
  s.info.grad_wait_s *= inv;
  s.info.copy_s *= inv;
  s.info.fetch_wait_s *= inv;
  s.info.comm_s *= inv;
  s.info.comm_bytes /= (uint64_t)n;
  const double N = (double)b->N;
  /* ZeRO's volume per rank and step (Rajbhandari et al. 2020, section 7): 2 x parameters for stages 0-2 (a
   * reduce-scatter and an all-gather, or an all-reduce), 3 x for stage 3; bytes of the working dtype. A ring
   * sends (W-1)/W of it, so comm_ratio near (W-1)/W means nothing beyond the minimum was moved. */
  m->paper_bytes = (b->cfg.zero.stage == 3 ? 3.0 : 2.0) * N * (double)b->wsz;
  m->comm_ratio = b->world > 1 ? (double)s.info.comm_bytes / m->paper_bytes : NAN;
  s.disk_gbps = (double)s.opt_nvme_bytes / (s.opt_window_s * n) / 1e9;
  s.link_gbps = (double)(s.h2d_bytes + s.d2h_bytes) / (s.step_s * n) / 1e9;
  s.params_per_s = N / s.opt_window_s;
  double bound = fmax(fmax(s.compute_s, s.transfer_s), s.info.adam_s);
  s.overlap_efficiency = bound / s.step_s;
  m->opt_bytes_per_param = (double)s.opt_nvme_bytes / n / N;
  m->disk_ratio = b->base.ok ? s.disk_gbps / b->base.gbps : NAN;
  const linkbench *lim = &b->lim;
  m->link_h2d_gbps = (double)s.h2d_bytes / (s.step_s * n) / 1e9;
  m->link_d2h_gbps = (double)s.d2h_bytes / (s.step_s * n) / 1e9;
  m->link_ratio = lim->ok ? s.link_gbps / lim->duplex_gbps : NAN;
  m->link_h2d_ratio = lim->ok ? m->link_h2d_gbps / lim->h2d_gbps : NAN;
  m->link_d2h_ratio = lim->ok ? m->link_d2h_gbps / lim->d2h_gbps : NAN;
  /* against the model: the same mean step time, and the mean swap bytes per step */
  const zo_step_prediction *p = &b->place.pred;
  m->nvme_read_bytes = (double)s.nvme_read_bytes / n;
  m->nvme_write_bytes = (double)s.nvme_write_bytes / n;
  m->step_over_predicted = p->step_s > 0 ? s.step_s / p->step_s : NAN;
  m->read_over_predicted =
      p->nvme_read_bytes ? m->nvme_read_bytes / (double)p->nvme_read_bytes : NAN;
  m->write_over_predicted =
      p->nvme_write_bytes ? m->nvme_write_bytes / (double)p->nvme_write_bytes : NAN;
  m->s = s;
  m->n = n;
}

static void bench_free(bench *b) {
  if (b->eng) zo_engine_destroy(b->eng);
  if (b->dev && b->dgrad) zo_device_free(b->dev, b->dgrad);
  zo_device_destroy(b->dev);
  free(b->P);
  free(b->numel);
  free(b->init);
  free(b->hgrad);
  free(b->rec);
  zo_comm_destroy(b->comm);
}

/* Configure, device, engine and budget, placement and predicted step, link limit, baseline, load, steps, baseline
 * again, summary, targets, JSON: the exit status (0, 1, or 77 for --device cuda without a GPU). */
static int run(opts *o, bench *b) {
  int rc;
  if ((rc = configure(o, b))) return rc;
  print_config(o, b);
  if ((rc = open_device(*o, b)) || (rc = create_engine(o, b)) || (rc = place_engine(o, b)))
    return rc;
  measure_link(b);
  baseline_before(o, b);
  if ((rc = load_model(o, b)) || (rc = run_steps(o, b))) return rc;
  baseline_after(o, b);
  summarize(o, b);
  report_summary(o, b);
  json_t *targets = report_targets(o, b);
  if (o->json && report_json(o, b, targets)) return 1;
  if (!o->json) json_decref(targets);
  return 0;
}

int main(int argc, char **argv) {
  opts o;
  setvbuf(stdout, NULL, _IOLBF, 0);         /* progress lines reach a log file as they happen */
  if (parse_args(argc, argv, &o)) return 2; /* the command line; --help exits 0 here */
  static bench b;                           /* zeroed; static for its size (zo_config_t) */
  int rc = run(&o, &b);
  bench_free(&b);
  return rc;
}
