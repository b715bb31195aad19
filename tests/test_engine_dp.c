/*
 * test_engine_dp.c - the engine on several ranks (run under `mpirun -np N`;
 * alone it runs on one rank) against a one-rank engine in the same process
 * fed with the mean gradient: master weights of every rank's shard and the
 * whole working weights on every rank equal the reference bit for bit, for
 * stage 0 (all-reduce) and stages 1-2 (reduce-scatter, all-gather) on the
 * none, cpu and nvme optimizer tiers, tensor sizes that leave shards uneven
 * or empty, clipping on (where W is a power of two: see run_case). Exactness: each rank's gradients are multiples of
 * 1/64 below 2 in magnitude, so their sum over up to 4 ranks is exact in any
 * order, and the engine's 1/world factor is the same fp32 multiply the
 * reference applies to the sum before handing it over. With --comm nccl against
 * the stand-in libnccl, which sums in rank order as the reference's sum is
 * formed, the gradients have 24 significant bits instead (but for fp16), so
 * a reduction in another order (3 ranks) or one that drops a rank fails. Also: memory per rank
 * shrinks with the ranks (stage 2 state bytes ~ 1/N); the same with
 * overlap_comm (reductions in flight during backward, in a ring of
 * reduce_bucket_size elements, also one too small for two tensors, so the
 * oldest must be waited for); and stage 3 on several
 * ranks, with the parameters on the host tier, NVMe or (GPU) partitioned in
 * device memory.
 * usage: test_engine_dp [--backend host|cuda]   Exit 0 pass, 1 fail, 77 skip. ctest test_engine_dp_fakecuda (and
 * _np2_fakecuda, one stand-in GPU per rank) runs the cuda backend against the stand-in runtime (tests/fake_cudart.c);
 * the "state none" cases run device Adam there, its kernels emulated (devadam_emu.h, when the stand-in provides
 * emulation; skipped otherwise).
 */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "zo_test.h"
#include "zoffload/adam.h"
#include "zoffload/config.h"
#include "zoffload/engine.h"
#include "zo_test_backend.h"

enum { NP = 5 };
static const size_t k_sizes[NP] = {1, 7, 1000, 1001, 4097};
static zo_comm_t *g_comm;
static int R, W;
static char g_dir[4096];
/* --comm nccl against the stand-in libnccl (sums in rank order, as grads() forms the reference's): gradients whose
 * sums round, so a reduction in any other order, or one that drops a rank, shows in the masters */
static int g_rough;

static void base_config(zo_config_t *c, int stage, zo_offload_device tier) {
  zo_config_defaults(c);
  c->train_batch_size = c->train_micro_batch_size_per_gpu = 1;
  c->gradient_accumulation_steps = 1;
  c->optimizer.type = ZO_OPT_ADAMW;
  c->optimizer.adam_w_mode = 1;
  c->optimizer.lr = 1e-2;
  c->optimizer.weight_decay = 0.1;
  c->gradient_clipping = 0.5;
  c->zero.stage = stage;
  c->zero.offload_optimizer.device = tier;
  c->zero.sub_group_size = 1500;
  c->zoffload.adam_threads = 1;
  snprintf(c->zero.offload_optimizer.nvme_path, sizeof c->zero.offload_optimizer.nvme_path, "%s",
           g_dir);
}

/* Rank q's gradient element j of tensor i at step s: a multiple of 1/64 in (-2, 2). */
static float grad_of(int q, int s, int i, size_t j) {
  uint64_t h = (uint64_t)q * 0x9e3779b97f4a7c15ull ^
               (uint64_t)(s * 131 + i) * 0xbf58476d1ce4e5b9ull ^ j * 0x94d049bbull;
  h ^= h >> 29;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 32;
  if (g_rough) /* 24 significant bits at scales 2^-22 to 2^-25: partial sums round, so their order shows */
    return ldexpf((float)((int64_t)(h % 16777215) - 8388607), -22 - (int)((h >> 40) % 4));
  return (float)((int)(h % 255) - 127) / 64.0f;
}

#define REQ_INT(expr)              \
  do {                             \
    if (!CHECK_OK(expr)) return 1; \
  } while (0)

/* Rank R's gradient of tensor @i at step @s into @g, and the mean over the ranks as the engine forms it into @mean:
 * the exact sum times fl(1/W). */
static void grads(int s, int i, float *g, float *mean) {
  const float inv_w =
      (float)(1.0 / W); /* as the engine: clip / (loss_scale * world) in double, then fp32 */
  for (size_t j = 0; j < k_sizes[i]; j++) {
    g[j] = grad_of(R, s, i, j);
    float t = 0;
    for (int q = 0; q < W; q++) t += grad_of(q, s, i, j);
    mean[j] = t * inv_w;
  }
}

typedef struct setup {
  zo_device_t *dev;
  zo_engine_t *e;
  zo_param_t *p[NP];
  void *scratch;
} setup;

static int open_engine(setup *s, const zo_config_t *cfg_in, zo_comm_t *comm) {
  memset(s, 0, sizeof *s);
  zo_config_t c = *cfg_in, *cfg = &c;
  if (!comm) { /* the reference keeps its swap directory apart */
    CHECK((size_t)snprintf(c.zero.offload_optimizer.nvme_path,
                           sizeof c.zero.offload_optimizer.nvme_path, "%s/ref",
                           g_dir) < sizeof c.zero.offload_optimizer.nvme_path);
    CHECK((size_t)snprintf(c.zero.offload_param.nvme_path, sizeof c.zero.offload_param.nvme_path,
                           "%s/ref", g_dir) < sizeof c.zero.offload_param.nvme_path);
    mkdir(c.zero.offload_optimizer.nvme_path, 0700);
  }
  REQ_INT(zo_test_device_create((size_t)cfg_in->zoffload.device_memory_limit, &s->dev));
  REQ_INT(zo_device_malloc(s->dev, 4 * (1 + 7 + 1000 + 1001 + 4097), &s->scratch));
  REQ_INT(zo_engine_create(cfg, s->dev, comm, &s->e));
  char name[32];
  for (int i = 0; i < NP; i++) {
    snprintf(name, sizeof name, "t%d", i);
    REQ_INT(zo_engine_register_param(s->e, name, k_sizes[i], &s->p[i]));
  }
  REQ_INT(zo_engine_finalize(s->e));
  uint64_t seed = 7;
  float *v = malloc(4097 * 4);
  for (int i = 0; i < NP; i++) {
    for (size_t j = 0; j < k_sizes[i]; j++) v[j] = zo_test_rand_pm1f(&seed);
    REQ_INT(zo_engine_load_param(s->e, s->p[i], v));
  }
  free(v);
  return 0;
}

static void close_engine(setup *s) {
  zo_engine_destroy(s->e);
  zo_device_free(s->dev, s->scratch);
  zo_device_destroy(s->dev);
}

static void hand_over(setup *s, int i, const float *g) {
  /* each tensor its own device buffer: the engine copies it asynchronously */
  size_t off = 0;
  for (int k = 0; k < i; k++) off += k_sizes[k];
  void *d = (float *)s->scratch + off;
  REQUIRE_OK(zo_memcpy(s->dev, d, g, k_sizes[i] * 4, ZO_COPY_H2D));
  REQUIRE_OK(zo_engine_grad_ready(s->e, s->p[i], d, ZO_DTYPE_F32));
}

/* @overlap: zero_optimization.overlap_comm; @bucket: reduce_bucket_size and allgather_bucket_size (elements; 0
 * keeps the defaults: every tensor in one wave) */
static int g_dpu; /* zoffload.delayed_param_update for run_case */

static void run_case(const char *label, int stage, zo_offload_device tier, int steps, int overlap,
                     int64_t bucket) {
  if (zo_test_skip_device_kernels(label, tier == ZO_OFFLOAD_NONE)) return;
  zo_config_t cfg;
  base_config(&cfg, stage, tier);
  cfg.zero.overlap_comm = overlap;
  cfg.zoffload.delayed_param_update = g_dpu;
  if (bucket)
    cfg.zero.reduce_bucket_size = cfg.zero.allgather_bucket_size = bucket; /* both rings small */
  /* The reference's gradient is the mean rounded to fp32, fl(sum * fl(1/W)), exact when W is a power of two;
   * the engine's norm is of the exact sum, divided by W in double. Otherwise the two norms differ by ~1e-8
   * relative, and so would a clipping coefficient taken from them: clipping only where they agree exactly. */
  const int pow2 = (W & (W - 1)) == 0;
  if (!pow2) cfg.gradient_clipping = 0;
  setup m, ref;
  if (open_engine(&m, &cfg, g_comm) || open_engine(&ref, &cfg, NULL)) return;
  const int fail0 = zo_test_failures;
  float *g = malloc(4097 * 4), *sum = malloc(4097 * 4);
  double max_norm_rel = 0;
  zo_engine_mem pcie0, rpcie0; /* host<->device traffic of the steps */
  REQUIRE_OK(zo_engine_mem_info(m.e, &pcie0));
  REQUIRE_OK(zo_engine_mem_info(ref.e, &rpcie0));
  for (int s = 1; s <= steps; s++) {
    for (int o = 0; o < NP; o++) {
      const int i = (o + s) % NP; /* the order changes from step to step, the same on every rank */
      grads(s, i, g, sum);
      hand_over(&m, i, g);
      hand_over(&ref, i, sum);
      /* the caller's own collective on its communicator while the engine's reductions are in flight (zo-train
       * all-reduces its loss): the engine works on duplicates, so the orders never mix */
      double one = 1;
      REQUIRE_OK(zo_comm_all_reduce_f64(g_comm, &one, 1));
      CHECK_CLOSE(one, W, 0, 0);
    }
    zo_step_info a, b;
    REQUIRE_OK(zo_engine_step(m.e, &a));
    REQUIRE_OK(zo_engine_step(ref.e, &b));
    double rel = fabs(a.grad_norm - b.grad_norm) / b.grad_norm;
    if (rel > max_norm_rel) max_norm_rel = rel;
    if (W > 1) CHECK(a.comm_bytes > 0);
  }
  CHECK(max_norm_rel < (pow2 ? 1e-12 : 1e-6));
  if (g_dpu) { /* the last step's update is published (all-gathered: collective) */
    REQUIRE_OK(zo_engine_synchronize(m.e));
    REQUIRE_OK(zo_engine_synchronize(ref.e));
  }
  zo_engine_mem pcie1, rpcie1;
  REQUIRE_OK(zo_engine_mem_info(m.e, &pcie1));
  REQUIRE_OK(zo_engine_mem_info(ref.e, &rpcie1));
  const uint64_t d2h = pcie1.d2h_bytes - pcie0.d2h_bytes, h2d = pcie1.h2d_bytes - pcie0.h2d_bytes;
  /* master weights of this rank's shard, and the whole working weights */
  float *mm = malloc(4097 * 4), *rm = malloc(4097 * 4);
  int bad_master = 0, bad_weights = 0;
  size_t shard_el = 0; /* this rank's shards */
  for (int i = 0; i < NP; i++) {
    size_t off = 0, n = 0, roff = 0, rn = 0;
    REQUIRE_OK(zo_engine_get_master(m.e, m.p[i], mm, &off, &n));
    shard_el += n;
    REQUIRE_OK(zo_engine_get_master(ref.e, ref.p[i], rm, &roff, &rn));
    CHECK_EQ(roff, 0);
    CHECK_EQ(rn, k_sizes[i]);
    if (stage == 0) CHECK_EQ(n, k_sizes[i]);
    if (off + n > k_sizes[i] || memcmp(mm, rm + off, n * 4)) bad_master++;
    const void *wa, *wb;
    zo_dtype da, db;
    REQUIRE_OK(zo_engine_fetch(m.e, m.p[i], &wa, &da));
    REQUIRE_OK(zo_engine_fetch(ref.e, ref.p[i], &wb, &db));
    static char ha[4097 * 4], hb[4097 * 4]; /* device memory: read back through the device */
    REQUIRE_OK(zo_memcpy(m.dev, ha, wa, k_sizes[i] * zo_dtype_size(da), ZO_COPY_D2H));
    REQUIRE_OK(zo_memcpy(ref.dev, hb, wb, k_sizes[i] * zo_dtype_size(da), ZO_COPY_D2H));
    if (memcmp(ha, hb, k_sizes[i] * zo_dtype_size(da))) bad_weights++;
    REQUIRE_OK(zo_engine_release(m.e, m.p[i]));
    REQUIRE_OK(zo_engine_release(ref.e, ref.p[i]));
  }
  /* Host<->device traffic of the steps. NCCL reduces and gathers in device memory: with device Adam nothing
   * crosses PCIe; with an offloaded optimizer each step moves this rank's reduced fp32 block down and its
   * updated block up, 1/W of what one rank moves. MPI stages whole tensors through host memory. */
  const int nccl = !strcmp(zo_comm_backend(g_comm), "nccl");
  if (nccl && W > 1) {
    const uint64_t want = tier == ZO_OFFLOAD_NONE ? 0 : (uint64_t)steps * shard_el * 4;
    if (d2h != want || h2d != want)
      FAIL_AT(
          "%s: %llu bytes down and %llu up over PCIe in %d steps, expected %llu each (this rank's "
          "%zu-element shards)",
          label, (unsigned long long)d2h, (unsigned long long)h2d, steps, (unsigned long long)want,
          shard_el);
  }
  if (bad_master)
    FAIL_AT("%s: master weights of %d tensors differ from the reference", label, bad_master);
  if (bad_weights)
    FAIL_AT("%s: working weights of %d tensors differ from the reference", label, bad_weights);
  /* bytes per rank: the optimizer state of a partitioned run is about 1/W of the one-rank engine's */
  zo_engine_mem mem_m, mem_r;
  REQUIRE_OK(zo_engine_mem_info(m.e, &mem_m));
  REQUIRE_OK(zo_engine_mem_info(ref.e, &mem_r));
  if (stage > 0 && tier == ZO_OFFLOAD_NVME) {
    /* nvme bytes: this rank's shard, extents padded to the swap alignment (4 KiB per tensor and kind at most) */
    CHECK(mem_m.nvme_bytes <= mem_r.nvme_bytes / W + (size_t)NP * 3 * 4096 + 3 * 4096);
  }
  if (zo_test_failures == fail0)
    printf(
        "ok: %-22s %d rank%s, %d steps: masters and working weights equal the one-rank reference bit for bit; "
        "host %zu B, nvme %zu B on this rank (one rank: %zu B, %zu B); PCIe %llu B down, %llu B up "
        "(one rank: %llu B, %llu B)\n",
        label, W, W == 1 ? "" : "s", steps, mem_m.host_bytes, mem_m.nvme_bytes, mem_r.host_bytes,
        mem_r.nvme_bytes, (unsigned long long)d2h, (unsigned long long)h2d,
        (unsigned long long)(rpcie1.d2h_bytes - rpcie0.d2h_bytes),
        (unsigned long long)(rpcie1.h2d_bytes - rpcie0.h2d_bytes));
  free(g), free(sum), free(mm), free(rm);
  close_engine(&m);
  close_engine(&ref);
}

/* Tensors whose master shard on this rank differs from the reference's same elements (or could not be read). */
static int masters_differ(setup *m, setup *ref) {
  float *mm = malloc(4097 * 4), *rm = malloc(4097 * 4);
  int bad = 0;
  for (int i = 0; i < NP; i++) {
    size_t off = 0, n = 0;
    if (!CHECK_OK(zo_engine_get_master(m->e, m->p[i], mm, &off, &n)) ||
        !CHECK_OK(zo_engine_get_master(ref->e, ref->p[i], rm, NULL, NULL)) ||
        off + n > k_sizes[i] || memcmp(mm, rm + off, n * 4))
      bad++;
  }
  free(mm), free(rm);
  return bad;
}

/* Fetch tensor @i from both engines: 1 when the working weights differ (or a fetch failed, reported), else 0. */
static int fetch_both(setup *m, setup *ref, int i) {
  const void *wa = NULL, *wb = NULL;
  if (!CHECK_OK(zo_engine_fetch(m->e, m->p[i], &wa, NULL)) ||
      !CHECK_OK(zo_engine_fetch(ref->e, ref->p[i], &wb, NULL)))
    return 1;
  /* device pointers: read back through the device (the cuda backend's are not host-readable) */
  static float ha[4097], hb[4097];
  if (!CHECK_OK(zo_memcpy(m->dev, ha, wa, k_sizes[i] * 4, ZO_COPY_D2H)) ||
      !CHECK_OK(zo_memcpy(ref->dev, hb, wb, k_sizes[i] * 4, ZO_COPY_D2H)))
    return 1;
  return memcmp(ha, hb, k_sizes[i] * 4) != 0;
}

/*
 * Stage 3 with offload_param cpu: a model-like step (forward fetch/release of every tensor, backward fetch,
 * grad_ready, release) on both engines, a device too small for the whole model (evictions and re-fetches), an
 * evaluation pass with the trace off every other step, and one step in another fetch order (the trace is left).
 * Every fetched tensor equals the reference's bit for bit at every fetch, and so do the masters at the end.
 */
static void run_stage3(int steps, int overlap, int64_t prefetch_bucket, int64_t allgather_bucket,
                       zo_offload_device ptier, zo_offload_device otier) {
  zo_config_t cfg;
  base_config(&cfg, 3, otier);
  cfg.zero.allgather_bucket_size =
      allgather_bucket; /* consecutive fetches' gathers coalesced up to it */
  cfg.zero.offload_param.device = ptier;
  snprintf(cfg.zero.offload_param.nvme_path, sizeof cfg.zero.offload_param.nvme_path, "%s", g_dir);
  cfg.zero.overlap_comm = overlap;
  cfg.zero.stage3_param_persistence_threshold = 8; /* t0 and t1 stay on the device once fetched */
  cfg.zero.stage3_prefetch_bucket_size = prefetch_bucket;
  cfg.zero.stage3_max_reuse_distance = 2000;
  const int pow2 = (W & (W - 1)) == 0;
  if (!pow2) cfg.gradient_clipping = 0;
  /* device: the gradient scratch (4 x 6106 B) and room for about 1.5 of the largest tensor (16388 B); with NCCL
   * also the reduction ring in device memory (every padded fp32 gradient of a step at most) */
  const int nccl = !strcmp(zo_comm_backend(g_comm), "nccl");
  cfg.zoffload.device_memory_limit = 4 * 6106 + 26000 + (nccl ? 4 * (6106 + NP * W) + 256 : 0);
  /* parameters partitioned in GPU memory: the one-rank reference keeps every tensor resident (and device Adam its
   * state), so no limit; the bytes per rank are compared below */
  const int pdev = ptier == ZO_OFFLOAD_NONE && zo_test_kind == ZO_DEVICE_CUDA && W > 1;
  if (pdev) cfg.zoffload.device_memory_limit = 0;
  if (zo_test_skip_device_kernels("stage 3, state none", otier == ZO_OFFLOAD_NONE)) return;
  const int fail0 = zo_test_failures;
  setup m, ref;
  if (open_engine(&m, &cfg, g_comm) || open_engine(&ref, &cfg, NULL)) return;
  float *g = malloc(4097 * 4), *sum = malloc(4097 * 4);
  int bad = 0, fetches = 0;
  zo_step_info a = {0};
  for (int s = 1; s <= steps; s++) {
    if (s % 2 == 0) { /* an evaluation pass outside the trace */
      REQUIRE_OK(zo_engine_set_trace(m.e, 0));
      REQUIRE_OK(zo_engine_set_trace(ref.e, 0));
      for (int i = NP - 1; i >= 0; i -= 2) {
        bad += fetch_both(&m, &ref, i), fetches++;
        REQUIRE_OK(zo_engine_release(m.e, m.p[i]));
        REQUIRE_OK(zo_engine_release(ref.e, ref.p[i]));
      }
      REQUIRE_OK(zo_engine_set_trace(m.e, 1));
      REQUIRE_OK(zo_engine_set_trace(ref.e, 1));
    }
    const int shift = s == 4 ? 2 : 0; /* step 4 runs the forward in another order: off the trace */
    for (int o = 0; o < NP; o++) {
      const int i = (o + shift) % NP;
      bad += fetch_both(&m, &ref, i), fetches++;
      REQUIRE_OK(zo_engine_release(m.e, m.p[i]));
      REQUIRE_OK(zo_engine_release(ref.e, ref.p[i]));
    }
    for (int i = NP - 1; i >= 0; i--) {
      bad += fetch_both(&m, &ref, i), fetches++;
      grads(s, i, g, sum);
      hand_over(&m, i, g);
      hand_over(&ref, i, sum);
      double one = 1; /* the caller's own collective, as above */
      REQUIRE_OK(zo_comm_all_reduce_f64(g_comm, &one, 1));
      REQUIRE_OK(zo_engine_release(m.e, m.p[i]));
      REQUIRE_OK(zo_engine_release(ref.e, ref.p[i]));
    }
    zo_step_info b;
    REQUIRE_OK(zo_engine_step(m.e, &a));
    REQUIRE_OK(zo_engine_step(ref.e, &b));
  }
  if (bad) FAIL_AT("stage 3: %d of %d fetches differ from the reference", bad, fetches);
  const int bad_master = masters_differ(&m, &ref);
  if (bad_master)
    FAIL_AT("stage 3: master weights of %d tensors differ from the reference", bad_master);
  zo_engine_mem mem_m, mem_r;
  REQUIRE_OK(zo_engine_mem_info(m.e, &mem_m));
  REQUIRE_OK(zo_engine_mem_info(ref.e, &mem_r));
  if (pdev) { /* this rank's blocks in device memory: 1/W of the one rank's tensors, each padded to W blocks */
    size_t want = 0;
    for (int i = 0; i < NP; i++) want += (k_sizes[i] + (size_t)W - 1) / (size_t)W * 4;
    if (mem_m.param_bytes != want || mem_r.param_bytes != 4 * 6106)
      FAIL_AT(
          "stage 3, param none, state %s: %zu B of parameters on this rank, expected %zu (one rank: %zu B)",
          zo_offload_device_name(otier), mem_m.param_bytes, want, mem_r.param_bytes);
    printf(
        "stage 3, param none, state %s on %d ranks: parameters %zu B in device memory on this rank (one rank "
        "%zu B); device block %zu B (one rank %zu B, with the rings)\n",
        zo_offload_device_name(otier), W, mem_m.param_bytes, mem_r.param_bytes, mem_m.device_bytes,
        mem_r.device_bytes);
  }
  if (zo_test_failures == fail0)
    printf(
        "ok: stage 3, param %s, state %s%s, prefetch bucket %lld, gather bucket %lld, %d ranks, %d steps: %d fetches (evaluation "
        "passes, one step off the trace) and the masters equal the one-rank reference bit for bit; host %zu B, "
        "nvme %zu B on this rank (one rank: %zu B, %zu B); last step sent %llu B\n",
        zo_offload_device_name(ptier), zo_offload_device_name(otier), overlap ? ", overlap" : "",
        (long long)prefetch_bucket, (long long)allgather_bucket, W, steps, fetches,
        mem_m.host_bytes, mem_m.nvme_bytes, mem_r.host_bytes, mem_r.nvme_bytes,
        (unsigned long long)a.comm_bytes);
  free(g), free(sum);
  close_engine(&m);
  close_engine(&ref);
}

/*
 * fp16 with dynamic loss scaling: at step 3 only the last rank's gradient holds an inf. Every rank must skip
 * that step (the overflow verdict is all-reduced) and lower the loss scale alike; with W a power of two the
 * masters then equal the reference's, which saw the inf in the summed gradient, bit for bit.
 */
static void run_fp16(void) {
  zo_config_t cfg;
  base_config(&cfg, 2, ZO_OFFLOAD_CPU);
  cfg.fp16.enabled = 1;
  cfg.fp16.loss_scale = 0; /* dynamic */
  cfg.fp16.initial_scale_power = 4;
  cfg.fp16.hysteresis = 1;
  cfg.gradient_clipping = 0;
  const int fail0 = zo_test_failures, pow2 = (W & (W - 1)) == 0, rough = g_rough;
  g_rough =
      0; /* the reference sums before its fp16 rounding, the ranks after theirs: exact sums only */
  setup m, ref;
  if (open_engine(&m, &cfg, g_comm) || open_engine(&ref, &cfg, NULL)) return;
  CHECK_EQ((int)zo_engine_grad_dtype(m.e), (int)ZO_DTYPE_F16);
  float *g = malloc(4097 * 4), *sum = malloc(4097 * 4);
  uint16_t *h = malloc(4097 * 2);
  int skipped_m = 0, skipped_r = 0;
  for (int s = 1; s <= 5; s++) {
    const float ls = (float)zo_engine_loss_scale(m.e);
    CHECK_CLOSE(ls, zo_engine_loss_scale(ref.e), 0, 0);
    for (int i = NP - 1; i >= 0; i--) {
      for (size_t j = 0; j < k_sizes[i]; j++) {
        g[j] = grad_of(R, s, i, j) * ls;
        float t = 0;
        for (int q = 0; q < W; q++) t += grad_of(q, s, i, j);
        sum[j] = t * ls / (float)W;
      }
      if (s == 3 && i == 2) {
        if (R == W - 1) g[5] = INFINITY;
        sum[5] = INFINITY;
      }
      size_t off = 0;
      for (int k = 0; k < i; k++) off += k_sizes[k];
      REQUIRE_OK(zo_cast(h, ZO_DTYPE_F16, g, ZO_DTYPE_F32, k_sizes[i], 1));
      void *dm = (uint16_t *)m.scratch + off, *dr = (uint16_t *)ref.scratch + off;
      REQUIRE_OK(zo_memcpy(m.dev, dm, h, k_sizes[i] * 2, ZO_COPY_H2D));
      REQUIRE_OK(zo_cast(h, ZO_DTYPE_F16, sum, ZO_DTYPE_F32, k_sizes[i], 1));
      REQUIRE_OK(zo_memcpy(ref.dev, dr, h, k_sizes[i] * 2, ZO_COPY_H2D));
      REQUIRE_OK(zo_engine_grad_ready(m.e, m.p[i], dm, ZO_DTYPE_F16));
      REQUIRE_OK(zo_engine_grad_ready(ref.e, ref.p[i], dr, ZO_DTYPE_F16));
    }
    zo_step_info a, b;
    REQUIRE_OK(zo_engine_step(m.e, &a));
    REQUIRE_OK(zo_engine_step(ref.e, &b));
    CHECK_EQ(a.skipped, s == 3);
    CHECK_EQ(b.skipped, s == 3);
    skipped_m += a.skipped, skipped_r += b.skipped;
  }
  CHECK_CLOSE(zo_engine_loss_scale(m.e), zo_engine_loss_scale(ref.e), 0, 0);
  CHECK_CLOSE(zo_engine_loss_scale(m.e), 8.0, 0, 0); /* 16 halved once by the overflow */
  const int bad = pow2 ? masters_differ(&m, &ref) : 0;
  if (bad) FAIL_AT("fp16: master weights of %d tensors differ from the reference", bad);
  if (zo_test_failures == fail0)
    printf(
        "ok: fp16, %d ranks: an inf on rank %d alone skipped step 3 on every rank (%d skipped here, %d in the "
        "reference), loss scale 16 -> %g on all%s\n",
        W, W - 1, skipped_m, skipped_r, zo_engine_loss_scale(m.e),
        pow2 ? "; masters equal the reference bit for bit" : "");
  free(g), free(sum), free(h);
  close_engine(&m);
  close_engine(&ref);
  g_rough = rough;
}

/* Stage 3 on several ranks where the engine refuses it on a GPU: each refusal names what to change. */
static void stage3_refused(void) {
  static const struct {
    zo_offload_device ptier, otier;
    const char *says;
  } k[] = {{ZO_OFFLOAD_CPU, ZO_OFFLOAD_NONE, "needs offload_param.device \"none\""}};
  for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
    if (k[i].otier == ZO_OFFLOAD_NONE && !zo_test_device_kernels) continue;
    zo_config_t cfg;
    base_config(&cfg, 3, k[i].otier);
    cfg.zero.offload_param.device = k[i].ptier;
    setup s;
    memset(&s, 0, sizeof s);
    if (!CHECK_OK(zo_test_device_create(0, &s.dev))) return;
    CHECK_ST(zo_engine_create(&cfg, s.dev, g_comm, &s.e), ZO_ERR_UNSUPPORTED);
    CHECK_HAS(zo_last_error(), k[i].says);
    printf("refused: stage 3, param %s, state %s on %d ranks (comm %s): %s\n",
           zo_offload_device_name(k[i].ptier), zo_offload_device_name(k[i].otier), W,
           zo_comm_backend(g_comm), zo_last_error());
    zo_device_destroy(s.dev);
  }
}

/* `--comm nccl` (after --backend cuda): the engine's communicator is NCCL (bootstrapped over the launcher's MPI, one
 * GPU per rank, as zo-train's zoffload.comm "nccl"); the test's own collectives go on it too. */
static zo_comm_t *g_boot;
static zo_device_t *g_comm_dev;
static int comm_arg(int *argc, char ***argv) {
  if (*argc < 3 || strcmp((*argv)[1], "--comm")) return 0;
  if (strcmp((*argv)[2], "nccl") || zo_test_kind != ZO_DEVICE_CUDA) {
    fprintf(stderr, "usage: test_engine_dp --backend cuda --comm nccl\n");
    return 1;
  }
  *argc -= 2, *argv += 2;
  zo_status st = zo_comm_create_from_env(&g_boot);
  if (st == ZO_OK) st = zo_test_device_create(0, &g_comm_dev);
  if (st == ZO_OK) st = zo_comm_create_nccl(g_comm_dev, g_boot, &g_comm);
  if (st == ZO_ERR_UNSUPPORTED) {
    printf("test_engine_dp: skip: %s\n", zo_last_error());
    return ZO_TEST_SKIP;
  }
  if (!CHECK_OK(st)) return 1;
  g_rough = dlsym(RTLD_DEFAULT, "fake_cuda_hostview") != NULL;
  printf("test_engine_dp: the engine's collectives on nccl over %d rank%s%s\n",
         zo_comm_size(g_comm), zo_comm_size(g_comm) == 1 ? "" : "s",
         g_rough ? " (the stand-in: gradients whose sums round, summed in rank order)" : "");
  return 0;
}

int main(int argc, char **argv) {
  int rc = zo_test_backend_arg("test_engine_dp", "[--comm nccl]", &argc, &argv);
  if (rc) return rc;
  if ((rc = comm_arg(&argc, &argv)) != 0) return rc;
  if ((rc = zo_test_rank_scratch_dir(NULL, "zo-test-engine-dp", &g_comm, g_dir, sizeof g_dir)) != 0)
    return rc; /* the communicator of --comm nccl, else the launcher's */
  R = zo_comm_rank(g_comm), W = zo_comm_size(g_comm);

  run_case("stage 0, state none", 0, ZO_OFFLOAD_NONE, 4, 0, 0);
  run_case("stage 0, overlap", 0, ZO_OFFLOAD_NONE, 4, 1, 0);
  run_case("stage 1, state none", 1, ZO_OFFLOAD_NONE, 4, 0, 0);
  run_case("stage 2, state cpu", 2, ZO_OFFLOAD_CPU, 4, 0, 0);
  run_case("stage 2, cpu, overlap", 2, ZO_OFFLOAD_CPU, 4, 1, 0);
  /* a bucket below two tensors: the ring is full at every other grad_ready and the oldest is waited for */
  run_case("stage 2, cpu, bucket 5k", 2, ZO_OFFLOAD_CPU, 4, 1, 5000);
  run_case("stage 2, state nvme", 2, ZO_OFFLOAD_NVME, 4, 0, 0);
  run_case("stage 2, nvme, overlap", 2, ZO_OFFLOAD_NVME, 4, 1, 5000);

  if (g_boot) { /* the rest of stages 1-2 x tiers none/cpu/nvme on nccl */
    run_case("stage 1, state cpu", 1, ZO_OFFLOAD_CPU, 4, 0, 0);
    run_case("stage 1, state nvme", 1, ZO_OFFLOAD_NVME, 4, 1, 5000);
    run_case("stage 2, state none", 2, ZO_OFFLOAD_NONE, 4, 1, 5000);
  }
  /* delayed parameter update: step N's Adam runs during step N+1's reductions, its all-gather at N+1's step */
  g_dpu = 1;
  run_case("stage 2, cpu, dpu", 2, ZO_OFFLOAD_CPU, 5, 1, 0);
  run_case("stage 1, cpu, dpu", 1, ZO_OFFLOAD_CPU, 5, 0, 5000);
  run_case("stage 2, nvme, dpu", 2, ZO_OFFLOAD_NVME, 5, 1, 5000);
  g_dpu = 0;
  run_fp16();
  /* a bucket of about one large tensor: gathers wait for the ring; DeepSpeed's default: a whole step ahead */
  run_stage3(6, 0, 3000, 500000000, ZO_OFFLOAD_CPU, ZO_OFFLOAD_CPU);
  run_stage3(6, 1, 50000000, 500000000, ZO_OFFLOAD_CPU,
             ZO_OFFLOAD_CPU); /* every gather of a step in one bucket */
  run_stage3(6, 0, 50000000, 1, ZO_OFFLOAD_CPU, ZO_OFFLOAD_CPU);    /* one gather per fetch */
  run_stage3(6, 0, 50000000, 1100, ZO_OFFLOAD_CPU, ZO_OFFLOAD_CPU); /* buckets of 1 to 3 tensors */
  run_stage3(6, 0, 3000, 500000000, ZO_OFFLOAD_NVME, ZO_OFFLOAD_CPU);
  run_stage3(6, 1, 50000000, 1100, ZO_OFFLOAD_NVME, ZO_OFFLOAD_NVME);
  /* no offload_param on several ranks: on the host device its memory is the host's, so the engine partitions the
   * parameters there (as offload_param "cpu") and matches the one-rank engine, whose parameters stay resident */
  if (zo_test_kind == ZO_DEVICE_HOST)
    run_stage3(6, 0, 3000, 500000000, ZO_OFFLOAD_NONE, ZO_OFFLOAD_CPU);
  /* on a GPU, each rank keeps its blocks in device memory and gathers whole tensors ahead of use (over NCCL in
   * device memory, over MPI through a pinned host ring); the optimizer on the device, the cpu or nvme */
  if (W > 1 && zo_test_kind == ZO_DEVICE_CUDA) {
    run_stage3(6, 1, 3000, 500000000, ZO_OFFLOAD_NONE, ZO_OFFLOAD_CPU);
    run_stage3(6, 0, 50000000, 1100, ZO_OFFLOAD_NONE, ZO_OFFLOAD_NVME);
    run_stage3(6, 1, 50000000, 500000000, ZO_OFFLOAD_NONE, ZO_OFFLOAD_NONE);
    if (g_boot) stage3_refused();
  }
  CHECK_OK(zo_comm_barrier(g_comm));
  char refdir[4200];
  snprintf(refdir, sizeof refdir, "%s/ref", g_dir);
  rmdir(refdir);
  rmdir(g_dir);
  zo_comm_destroy(g_comm);
  zo_device_destroy(g_comm_dev);
  zo_comm_destroy(g_boot);
  return zo_test_finish("test_engine_dp");
}
