/*
 * test_engine.c - the offload engine against a plain reference: master
 * weights after several steps on every tier (none, cpu, nvme with several
 * sub-group and buffer layouts) equal zo_adam_step applied directly, bit for
 * bit; clipping, fp16 overflow skipping and loss-scale changes; misuse errors.
 *
 * usage: test_engine [--backend host|cuda] [SCRATCH_BASE]   Exit 0 pass, 1
 * fail, 77 skip (no scratch directory, or --backend cuda without a CUDA
 * device). ctest test_engine_fakecuda runs the cuda backend against the
 * stand-in runtime (tests/fake_cudart.c: copies land later, destinations
 * poisoned until synchronized, CUDA calls from host funcs abort).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "zo_test.h"
#include "zoffload/adam.h"
#include "zoffload/budget.h"
#include "zoffload/config.h"
#include "zoffload/engine.h"
#ifdef ZO_TEST_DEVADAM_EMU
#include "devadam_emu.h"
#endif

/* Gradients are handed over in device memory: stage host values into a
 * device scratch buffer (the host backend checks that copies name device
 * memory, as cudaMemcpy would). */
static void *to_device(zo_device_t *dev, void *scratch, size_t off_bytes, const void *src,
                       size_t nbytes) {
  char *d = (char *)scratch + off_bytes;
  if (zo_memcpy(dev, d, src, nbytes, ZO_COPY_H2D) != ZO_OK) {
    fprintf(stderr, "to_device: %s\n", zo_last_error());
    exit(1);
  }
  return d;
}

static zo_device_kind g_kind = ZO_DEVICE_HOST; /* --backend */

/* Fetched working weights are device memory: read back through the device (a host read of a device pointer
 * faults on a GPU, and on the stand-in under FAKE_CUDA_DEVICE_NOACCESS). */
static void from_device(zo_device_t *dev, void *dst, const void *dptr, size_t nbytes) {
  if (zo_memcpy(dev, dst, dptr, nbytes, ZO_COPY_D2H) != ZO_OK) {
    fprintf(stderr, "from_device: %s\n", zo_last_error());
    exit(1);
  }
}

/* offload_optimizer "none" on CUDA runs Adam as a kernel: the stand-in runtime runs it only when the test
 * emulates it (built with ZO_TEST_DEVADAM_EMU: devadam_emu.h, installed in main). */
static int g_device_kernels;
static int skip_device_adam(const char *label, zo_offload_device optimizer_device) {
  if (g_kind != ZO_DEVICE_CUDA || optimizer_device != ZO_OFFLOAD_NONE || g_device_kernels) return 0;
  printf("skip %s: offload_optimizer \"none\" on cuda needs a device Adam kernel\n", label);
  return 1;
}

enum { NP = 4 };
static const size_t k_sizes[NP] = {1000, 5000, 37, 4096};
/* Per-tensor weight decay (zo_engine_set_param_weight_decay, a parameter group's); < 0: the config's. Every
 * tier runs with it, so the override is checked on every path Adam is started from. */
static const double k_wd[NP] = {-1, 0.0, -1, 0.5};

/* Reference state: fp32 master p; m, v and the gradient in the engine's
 * state and gradient dtypes (4 bytes per element is room for either). */
typedef struct ref_state {
  float *p[NP], *g[NP];
  void *m[NP], *v[NP], *gq[NP];
} ref_state;

static void ref_alloc(ref_state *r) {
  for (int i = 0; i < NP; i++) {
    r->p[i] = calloc(k_sizes[i], 4);
    r->m[i] = calloc(k_sizes[i], 4);
    r->v[i] = calloc(k_sizes[i], 4);
    r->g[i] = calloc(k_sizes[i], 4);
    r->gq[i] = calloc(k_sizes[i], 4);
  }
}
static void ref_free(ref_state *r) {
  for (int i = 0; i < NP; i++)
    free(r->p[i]), free(r->m[i]), free(r->v[i]), free(r->g[i]), free(r->gq[i]);
}

static void base_config(zo_config_t *c) {
  zo_config_defaults(c);
  c->train_batch_size = c->train_micro_batch_size_per_gpu = 1;
  c->gradient_accumulation_steps = 1;
  c->optimizer.type = ZO_OPT_ADAMW;
  c->optimizer.adam_w_mode = 1;
  c->optimizer.lr = 1e-2;
  c->optimizer.weight_decay = 0.1;
  c->zero.stage = 2;
  c->zoffload.adam_threads = 2;
}

/* Run `steps` steps through the engine and through the reference; compare. */
static void run_tier(const char *label, zo_config_t cfg, const char *nvme_dir, int steps,
                     float grad_mag) {
  if (skip_device_adam(label, cfg.zero.offload_optimizer.device)) return;
  if (nvme_dir)
    snprintf(cfg.zero.offload_optimizer.nvme_path, sizeof cfg.zero.offload_optimizer.nvme_path,
             "%s", nvme_dir);
  zo_engine_t *e = NULL;
  zo_param_t *ps[NP];
  ref_state r;
  ref_alloc(&r);
  uint64_t seed = 42;
  zo_device_t *dev;
  void *scratch;
  REQUIRE_OK(zo_device_create(g_kind, 0, 0, &dev));
  REQUIRE_OK(zo_device_malloc(dev, 4 * (1000 + 5000 + 37 + 4096), &scratch));
  REQUIRE_OK(zo_engine_create(&cfg, dev, NULL, &e));
  char name[32];
  for (int i = 0; i < NP; i++) {
    snprintf(name, sizeof name, "t%d", i);
    REQUIRE_OK(zo_engine_register_param(e, name, k_sizes[i], &ps[i]));
    if (k_wd[i] >= 0 && i % 2)
      REQUIRE_OK(zo_engine_set_param_weight_decay(e, ps[i], k_wd[i])); /* before finalize */
  }
  REQUIRE_OK(zo_engine_finalize(e));
  for (int i = 0; i < NP; i++) {
    if (k_wd[i] >= 0 && !(i % 2))
      REQUIRE_OK(zo_engine_set_param_weight_decay(e, ps[i], k_wd[i])); /* and after */
    for (size_t j = 0; j < k_sizes[i]; j++) r.p[i][j] = zo_test_rand_pm1f(&seed);
    REQUIRE_OK(zo_engine_load_param(e, ps[i], r.p[i]));
  }
  const zo_dtype wd = zo_engine_working_dtype(e), gd = zo_engine_grad_dtype(e);
  const zo_dtype sd = (zo_dtype)cfg.zoffload.optimizer_state_dtype;
  CHECK_EQ((int)gd, (int)wd);
  float *gbuf = malloc(4096 * 4 * 2);
  int64_t applied = 0;
  for (int s = 1; s <= steps; s++) {
    /* Gradients in the engine's gradient dtype; the norm of exactly those values. */
    double sq = 0;
    for (int i = 0; i < NP; i++) {
      for (size_t j = 0; j < k_sizes[i]; j++) r.g[i][j] = zo_test_rand_pm1f(&seed) * grad_mag;
      REQUIRE_OK(zo_cast(r.gq[i], gd, r.g[i], ZO_DTYPE_F32, k_sizes[i], 1));
      REQUIRE_OK(zo_cast(r.g[i], ZO_DTYPE_F32, r.gq[i], gd, k_sizes[i], 1));
      for (size_t j = 0; j < k_sizes[i]; j++) sq += (double)r.g[i][j] * r.g[i][j];
    }
    /* Hand the gradients over in an order that changes from step to step
     * (backward order, forward order, interleaved): the NVMe pipeline learns
     * the order sub-groups complete in and must be right whatever it is. */
    static const int k_orders[3][NP] = {{3, 2, 1, 0}, {0, 1, 2, 3}, {1, 3, 0, 2}};
    size_t off = 0;
    for (int o = 0; o < NP; o++) {
      const int i = k_orders[s % 3][o];
      void *dg = to_device(dev, scratch, off, r.gq[i], k_sizes[i] * zo_dtype_size(gd));
      off += k_sizes[i] * zo_dtype_size(gd);
      REQUIRE_OK(zo_engine_grad_ready(e, ps[i], dg, gd));
    }
    zo_step_info info;
    REQUIRE_OK(zo_engine_step(e, &info));
    CHECK(!info.skipped);
    applied++;
    /* Reference: the same hyperparameters the engine documents. */
    double norm = sqrt(sq);
    CHECK(fabs(info.grad_norm - norm) <= 1e-9 * norm);
    double clip = cfg.gradient_clipping > 0 && norm > cfg.gradient_clipping
                      ? cfg.gradient_clipping / (norm + 1e-6)
                      : 1.0;
    zo_adam_hparams hp = {.lr = (float)zo_config_lr_at(&cfg, applied),
                          .beta1 = (float)cfg.optimizer.beta1,
                          .beta2 = (float)cfg.optimizer.beta2,
                          .eps = (float)cfg.optimizer.eps,
                          .weight_decay = (float)cfg.optimizer.weight_decay,
                          .mode = cfg.optimizer.adam_w_mode ? ZO_ADAM_MODE_ADAMW : ZO_ADAM_MODE_L2,
                          .bias_correction = cfg.optimizer.bias_correction,
                          .step = applied,
                          .grad_scale = (float)(clip / 1.0)};
    CHECK(info.lr == hp.lr);
    size_t flat =
        0; /* bf16 state rounding is keyed by the element's offset in the flat parameter space */
    for (int i = 0; i < NP; i++) {
      zo_adam_shard sh = {.param = r.p[i],
                          .grad = r.gq[i],
                          .grad_dtype = gd,
                          .exp_avg = r.m[i],
                          .exp_avg_sq = r.v[i],
                          .state_dtype = sd,
                          .n = k_sizes[i],
                          .seed = flat};
      zo_adam_result res;
      zo_adam_hparams own = hp;
      if (k_wd[i] >= 0) own.weight_decay = (float)k_wd[i];
      REQUIRE_OK(zo_adam_update(&own, &sh, 0, ZO_SIMD_AUTO, &res));
      flat += k_sizes[i];
    }
  }
  int mism = 0;
  for (int i = 0; i < NP; i++) {
    size_t off = 99, n = 0;
    float *got = malloc(k_sizes[i] * 4);
    REQUIRE_OK(zo_engine_get_master(e, ps[i], got, &off, &n));
    CHECK(off == 0 && n == k_sizes[i]);
    for (size_t j = 0; j < k_sizes[i] && mism < 10; j++)
      if (memcmp(&got[j], &r.p[i][j], 4)) {
        if (!mism)
          fprintf(stderr, "%s: master t%d[%zu]: engine %.9g, reference %.9g\n", label, i, j, got[j],
                  r.p[i][j]);
        mism++;
      }
    /* Working weights: the working-dtype cast of the reference master. */
    const void *w;
    zo_dtype dt;
    REQUIRE_OK(zo_engine_fetch(e, ps[i], &w, &dt));
    CHECK(dt == wd);
    REQUIRE_OK(zo_cast(gbuf, wd, r.p[i], ZO_DTYPE_F32, k_sizes[i], 1));
    void *wh = malloc(k_sizes[i] * zo_dtype_size(wd));
    from_device(dev, wh, w, k_sizes[i] * zo_dtype_size(wd));
    const int differ = memcmp(wh, gbuf, k_sizes[i] * zo_dtype_size(wd)) != 0;
    free(wh);
    if (differ) {
      fprintf(stderr, "%s: working weights of t%d differ from the %s cast of the reference\n",
              label, i, zo_dtype_name(wd));
      mism++;
    }
    REQUIRE_OK(zo_engine_release(e, ps[i]));
    free(got);
  }
  CHECK(mism == 0);
  zo_engine_mem mem;
  REQUIRE_OK(zo_engine_mem_info(e, &mem));
  if (cfg.zero.offload_optimizer.device == ZO_OFFLOAD_NVME) {
    CHECK(mem.nvme_bytes >= (4 + 2 * zo_dtype_size(sd)) * (1000 + 5000 + 37 + 4096));
    CHECK(mem.nvme_read_bytes > 0 && mem.nvme_write_bytes > 0);
  } else {
    CHECK(mem.nvme_bytes == 0);
  }
  printf(
      "ok   %-40s %d steps, %s weights and grads, %s state, device %zu B, host %zu B, nvme %zu B\n",
      label, steps, zo_dtype_name(wd), zo_dtype_name(sd), mem.device_bytes, mem.host_bytes,
      mem.nvme_bytes);
  zo_engine_destroy(e);
  zo_device_free(dev, scratch);
  zo_device_destroy(dev);
  free(gbuf);
  ref_free(&r);
}

/* fp16: an inf gradient skips the step (nothing changes) and the loss scale
 * follows DeepSpeed's hysteresis; a good step after that applies. */
static void test_fp16_overflow(void) {
  zo_config_t cfg;
  base_config(&cfg);
  cfg.fp16.enabled = 1;
  cfg.fp16.loss_scale = 0;
  cfg.fp16.initial_scale_power = 8;
  cfg.fp16.hysteresis = 2;
  cfg.fp16.loss_scale_window = 2;
  cfg.zero.offload_optimizer.device = ZO_OFFLOAD_CPU;
  zo_engine_t *e;
  zo_param_t *p;
  zo_device_t *dev;
  void *scratch;
  REQUIRE_OK(zo_device_create(g_kind, 0, 0, &dev));
  REQUIRE_OK(zo_device_malloc(dev, 4096, &scratch));
  REQUIRE_OK(zo_engine_create(&cfg, dev, NULL, &e));
  REQUIRE_OK(zo_engine_register_param(e, "w", 100, &p));
  REQUIRE_OK(zo_engine_finalize(e));
  float w0[100], g[100], got[100];
  uint16_t g16[100];
  for (int i = 0; i < 100; i++) w0[i] = 0.01f * i;
  REQUIRE_OK(zo_engine_load_param(e, p, w0));
  CHECK(zo_engine_loss_scale(e) == 256.0);
  CHECK(zo_engine_working_dtype(e) == ZO_DTYPE_F16);
  double expect_scale[] = {
      256.0, 128.0}; /* hysteresis 2: first overflow keeps the scale, second halves it */
  for (int k = 0; k < 2; k++) {
    for (int i = 0; i < 100; i++) g[i] = 1e5f; /* *256 overflows fp16 */
    REQUIRE_OK(zo_cast(g16, ZO_DTYPE_F16, g, ZO_DTYPE_F32, 100, 1));
    REQUIRE_OK(
        zo_engine_grad_ready(e, p, to_device(dev, scratch, 0, g16, sizeof g16), ZO_DTYPE_F16));
    zo_step_info info;
    REQUIRE_OK(zo_engine_step(e, &info));
    CHECK(info.skipped == 1);
    CHECK(info.step == 0);
    CHECK(zo_engine_loss_scale(e) == expect_scale[k]);
    REQUIRE_OK(zo_engine_get_master(e, p, got, NULL, NULL));
    CHECK(memcmp(got, w0, sizeof w0) == 0);
  }
  /* A good step: gradients scaled by 128 in fp16; the update equals Adam on unscaled grads. */
  for (int i = 0; i < 100; i++) g[i] = 0.001f * (i - 50);
  float gs[100];
  for (int i = 0; i < 100; i++) gs[i] = g[i] * 128.0f;
  REQUIRE_OK(zo_cast(g16, ZO_DTYPE_F16, gs, ZO_DTYPE_F32, 100, 1));
  REQUIRE_OK(zo_engine_grad_ready(e, p, to_device(dev, scratch, 0, g16, sizeof g16), ZO_DTYPE_F16));
  zo_step_info info;
  REQUIRE_OK(zo_engine_step(e, &info));
  CHECK(info.skipped == 0 && info.step == 1);
  float ref[100], m[100] = {0}, v[100] = {0}, gun[100];
  float back[100];
  REQUIRE_OK(zo_cast(back, ZO_DTYPE_F32, g16, ZO_DTYPE_F16, 100, 1));
  for (int i = 0; i < 100; i++) gun[i] = back[i];
  memcpy(ref, w0, sizeof ref);
  zo_adam_hparams hp = {.lr = (float)zo_config_lr_at(&cfg, 1),
                        .beta1 = (float)cfg.optimizer.beta1,
                        .beta2 = (float)cfg.optimizer.beta2,
                        .eps = (float)cfg.optimizer.eps,
                        .weight_decay = (float)cfg.optimizer.weight_decay,
                        .mode = ZO_ADAM_MODE_ADAMW,
                        .bias_correction = 1,
                        .step = 1,
                        .grad_scale = (float)(1.0 / 128.0)};
  REQUIRE_OK(zo_adam_step(&hp, ref, gun, m, v, 100, ZO_SIMD_AUTO, 1));
  REQUIRE_OK(zo_engine_get_master(e, p, got, NULL, NULL));
  CHECK(memcmp(got, ref, sizeof ref) == 0);
  /* loss_scale_window 2: two good steps since the overflow double the scale. */
  REQUIRE_OK(zo_engine_grad_ready(e, p, to_device(dev, scratch, 0, g16, sizeof g16), ZO_DTYPE_F16));
  REQUIRE_OK(zo_engine_step(e, &info));
  CHECK(zo_engine_loss_scale(e) == 256.0);
  printf("ok   fp16 overflow skip and loss scale (256 -> 256 -> 128 -> 256)\n");
  zo_engine_destroy(e);
  zo_device_free(dev, scratch);
  zo_device_destroy(dev);
}

static void test_misuse(const char *dir) {
  zo_config_t cfg;
  base_config(&cfg);
  zo_engine_t *e;
  zo_param_t *a, *b;
  zo_device_t *dev;
  void *g;
  REQUIRE_OK(zo_device_create(g_kind, 0, 0, &dev));
  REQUIRE_OK(zo_device_malloc(dev, 256, &g));
  if (g_kind == ZO_DEVICE_CUDA)
    cfg.zero.offload_optimizer.device = ZO_OFFLOAD_CPU; /* no device Adam kernel */
  static const float zeros[64];
  to_device(dev, g, 0, zeros, sizeof zeros);
  /* A step with a tensor that got no gradient names the tensor. */
  REQUIRE_OK(zo_engine_create(&cfg, dev, NULL, &e));
  REQUIRE_OK(zo_engine_register_param(e, "embed.weight", 64, &a));
  CHECK(zo_engine_register_param(e, "embed.weight", 64, &b) == ZO_ERR_INVALID_ARG);
  CHECK(strstr(zo_last_error(), "embed.weight") != NULL);
  REQUIRE_OK(zo_engine_register_param(e, "head.bias", 8, &b));
  CHECK(zo_engine_grad_ready(e, a, g, ZO_DTYPE_F32) == ZO_ERR_INVALID_USAGE); /* before finalize */
  REQUIRE_OK(zo_engine_finalize(e));
  CHECK(zo_engine_register_param(e, "late", 8, &b) == ZO_ERR_INVALID_USAGE);
  REQUIRE_OK(zo_engine_grad_ready(e, a, g, ZO_DTYPE_F32));
  CHECK(zo_engine_grad_ready(e, a, g, ZO_DTYPE_F32) == ZO_ERR_INVALID_USAGE);
  const void *w;
  CHECK_ST(zo_engine_fetch(e, a, &w, NULL), ZO_ERR_INVALID_USAGE); /* its update may have begun */
  CHECK_HAS(zo_last_error(), "embed.weight");
  CHECK_ST(zo_engine_set_param_weight_decay(e, a, 0.0), ZO_ERR_INVALID_USAGE); /* likewise */
  CHECK_HAS(zo_last_error(), "embed.weight");
  CHECK_ST(zo_engine_set_param_weight_decay(e, b, -0.1), ZO_ERR_INVALID_ARG);
  CHECK_HAS(zo_last_error(), "head.bias");
  CHECK_ST(zo_engine_set_param_weight_decay(e, b, NAN), ZO_ERR_INVALID_ARG);
  REQUIRE_OK(zo_engine_set_param_weight_decay(e, b, 0.0)); /* its gradient is not in yet */
  CHECK(zo_engine_grad_ready(e, b, g, ZO_DTYPE_F16) ==
        ZO_ERR_INVALID_ARG); /* fp16 grads without fp16 */
  CHECK(zo_engine_step(e, NULL) == ZO_ERR_INVALID_USAGE);
  CHECK(strstr(zo_last_error(), "head.bias") != NULL);
  zo_engine_destroy(e);
  zo_device_free(dev, g);
  zo_device_destroy(dev);

  /* A device limit below the working weights fails at finalize, naming the limit. */
  cfg.zoffload.device_memory_limit = 4096;
  if (g_kind == ZO_DEVICE_CUDA)
    cfg.zero.offload_optimizer.device = ZO_OFFLOAD_CPU; /* no device Adam kernel */
  REQUIRE_OK(zo_engine_create(&cfg, NULL, NULL, &e));
  REQUIRE_OK(zo_engine_register_param(e, "big", 100000, &a));
  CHECK(zo_engine_finalize(e) == ZO_ERR_OUT_OF_MEMORY);
  CHECK(strstr(zo_last_error(), "4096") != NULL);
  zo_engine_destroy(e);
  cfg.zoffload.device_memory_limit = 0;

  /* Parameter offload settings that cannot work fail at finalize, naming the key and the value to use. */
  struct {
    const char *key;
    int64_t buffer_size, max_live;
    size_t limit;
    const char *want;
  } bad[] = {
      {"offload_param.buffer_size", 1000, 1000000000, 0, "at least 100000"},
      {"stage3_max_live_parameters", 100000000, 50000, 0, "at least 100000"},
      {"zoffload.device_memory_limit", 100000000, 1000000000, 4096, "at least"},
  };
  for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
    zo_config_t c3 = cfg;
    c3.zero.stage = 3;
    c3.zero.offload_optimizer.device = ZO_OFFLOAD_CPU;
    c3.zero.offload_param.device = ZO_OFFLOAD_NVME;
    snprintf(c3.zero.offload_param.nvme_path, sizeof c3.zero.offload_param.nvme_path, "%s", dir);
    c3.zero.offload_param.buffer_size = bad[k].buffer_size;
    c3.zero.stage3_max_live_parameters = bad[k].max_live;
    c3.zoffload.device_memory_limit = (int64_t)bad[k].limit;
    REQUIRE_OK(zo_engine_create(&c3, NULL, NULL, &e));
    REQUIRE_OK(zo_engine_register_param(e, "big", 100000, &a));
    CHECK_ST(zo_engine_finalize(e), ZO_ERR_CONFIG);
    CHECK_HAS(zo_last_error(), bad[k].key);
    CHECK_HAS(zo_last_error(), bad[k].want);
    zo_engine_destroy(e);
  }
  CHECK_EQ(zo_test_count_entries(dir), 0);
  /* offload_param needs stage 3. */
  cfg.zero.offload_param.device = ZO_OFFLOAD_CPU;
  CHECK_ST(zo_engine_create(&cfg, NULL, NULL, &e), ZO_ERR_CONFIG);
  CHECK_HAS(zo_last_error(), "stage 3");
  cfg.zero.offload_param.device = ZO_OFFLOAD_NONE;

  /* Offload with ZeRO stage 0 is a config error naming both keys. */
  cfg.zero.stage = 0;
  cfg.zero.offload_optimizer.device = ZO_OFFLOAD_CPU;
  CHECK(zo_engine_create(&cfg, NULL, NULL, &e) == ZO_ERR_CONFIG);
  CHECK(strstr(zo_last_error(), "zero_optimization.stage") != NULL);
  cfg.zero.stage = 2;

  /* nvme: a missing nvme_path fails at create and names the key. */
  cfg.zero.offload_optimizer.device = ZO_OFFLOAD_NVME;
  snprintf(cfg.zero.offload_optimizer.nvme_path, sizeof cfg.zero.offload_optimizer.nvme_path,
           "%s/missing", dir);
  CHECK(zo_engine_create(&cfg, NULL, NULL, &e) != ZO_OK);
  CHECK(strstr(zo_last_error(), "nvme_path") != NULL && strstr(zo_last_error(), "missing") != NULL);
  printf("ok   misuse errors\n");
}

/* Parameter offload (stage 3): a forward/backward-shaped loop of fetch and
 * release with a device memory limit below the model's working weights.
 * Every offload_param x offload_optimizer combination must leave master and
 * working weights bit-identical to the same run with resident parameters;
 * from the second step on the coordinator prefetches along the trace; a step
 * in a different order still trains correctly (demand fetch, re-record). */
typedef struct po_result {
  float *master[NP];
  void *working[NP];
  int64_t prefetches, demand;
  size_t peak;
} po_result;

static int g_po_warnings;
static void count_warn(zo_log_level level, const char *msg, void *user) {
  (void)user;
  if (level == ZO_LOG_WARN && strstr(msg, "fetch order differs")) g_po_warnings++;
}

/* @use_cs: the "model" runs on a compute stream handed to the engine
 * (zo_engine_set_compute_stream): fetches make it wait instead of the host,
 * gradients are produced on it (an async copy) and the engine's copy stream
 * waits for it, released copies are reused or moved only after it. */
static void po_run(zo_config_t cfg, size_t limit, int steps, int use_cs, po_result *out) {
  zo_device_t *dev;
  zo_stream_t *cs = NULL;
  void *scratch;
  zo_engine_t *e;
  zo_param_t *ps[NP];
  memset(out, 0, sizeof *out);
  REQUIRE_OK(zo_device_create(g_kind, 0, limit, &dev));
  REQUIRE_OK(zo_device_malloc(dev, 2 * 5000, &scratch)); /* one bf16 gradient at a time */
  REQUIRE_OK(zo_engine_create(&cfg, dev, NULL, &e));
  if (use_cs) {
    REQUIRE_OK(zo_stream_create(dev, &cs));
    REQUIRE_OK(zo_engine_set_compute_stream(e, cs));
  }
  char name[16];
  for (int i = 0; i < NP; i++) {
    snprintf(name, sizeof name, "t%d", i);
    REQUIRE_OK(zo_engine_register_param(e, name, k_sizes[i], &ps[i]));
  }
  REQUIRE_OK(zo_engine_finalize(e));
  uint64_t seed = 7;
  float *buf = malloc(5000 * 4);
  uint16_t *g16 = malloc(5000 * 2);
  for (int i = 0; i < NP; i++) {
    for (size_t j = 0; j < k_sizes[i]; j++) buf[j] = zo_test_rand_pm1f(&seed);
    REQUIRE_OK(zo_engine_load_param(e, ps[i], buf));
  }
  const void *w;
  for (int s = 1; s <= steps; s++) {
    int order[NP] = {0, 1, 2, 3};
    if (s == 3) order[1] = 2, order[2] = 1; /* step 3 departs from the trace */
    for (int k = 0; k < NP; k++) {          /* forward */
      REQUIRE_OK(zo_engine_fetch(e, ps[order[k]], &w, NULL));
      REQUIRE_OK(zo_engine_release(e, ps[order[k]]));
    }
    for (int k = NP - 1; k >= 0; k--) { /* backward: fetch, produce the gradient, hand it over */
      int i = order[k];
      REQUIRE_OK(zo_engine_fetch(e, ps[i], &w, NULL));
      for (size_t j = 0; j < k_sizes[i]; j++) buf[j] = zo_test_rand_pm1f(&seed) * 0.1f;
      REQUIRE_OK(zo_cast(g16, ZO_DTYPE_BF16, buf, ZO_DTYPE_F32, k_sizes[i], 1));
      if (cs) /* produced on the compute stream: the engine's copy of it must wait */
        REQUIRE_OK(zo_memcpy_async(cs, scratch, g16, k_sizes[i] * 2, ZO_COPY_H2D));
      else
        REQUIRE_OK(zo_memcpy(dev, scratch, g16, k_sizes[i] * 2, ZO_COPY_H2D));
      REQUIRE_OK(zo_engine_grad_ready(e, ps[i], scratch, ZO_DTYPE_BF16));
      REQUIRE_OK(zo_device_synchronize(dev)); /* scratch is reused for the next tensor */
      REQUIRE_OK(zo_engine_release(e, ps[i]));
    }
    zo_step_info info;
    REQUIRE_OK(zo_engine_step(e, &info));
    if (s >= 2) out->prefetches += info.n_prefetch;
    out->demand += info.n_demand_fetch;
  }
  for (int i = 0; i < NP; i++) {
    out->master[i] = malloc(k_sizes[i] * 4);
    out->working[i] = malloc(k_sizes[i] * 2);
    REQUIRE_OK(zo_engine_get_master(e, ps[i], out->master[i], NULL, NULL));
    REQUIRE_OK(zo_engine_fetch(e, ps[i], &w, NULL));
    if (cs) REQUIRE_OK(zo_stream_synchronize(cs)); /* the fetch only made the compute stream wait */
    from_device(dev, out->working[i], w, k_sizes[i] * 2);
    REQUIRE_OK(zo_engine_release(e, ps[i]));
  }
  size_t used, limit_out;
  REQUIRE_OK(zo_device_mem_info(dev, &used, &out->peak, &limit_out));
  if (cs) REQUIRE_OK(zo_stream_synchronize(cs));
  zo_engine_destroy(e);
  zo_stream_destroy(cs);
  zo_device_free(dev, scratch);
  zo_device_destroy(dev);
  free(buf);
  free(g16);
}

static void po_free(po_result *r) {
  for (int i = 0; i < NP; i++) free(r->master[i]), free(r->working[i]);
}

static void test_param_offload(const char *dir) {
  static const zo_offload_device devs[] = {ZO_OFFLOAD_NONE, ZO_OFFLOAD_CPU, ZO_OFFLOAD_NVME};
  static const char *names[] = {"none", "cpu", "nvme"};
  zo_log_set_handler(count_warn, NULL, ZO_LOG_WARN);
  /* With clipping, Adam runs in zo_engine_step(); without, as gradients land
   * (new weights go to the nvme write-back ring from the copy stream's thread). */
  for (int oc = 0; oc < 6; oc++) {
    const int o = oc % 3, clip = oc < 3;
    const char *label =
        clip ? "parameter offload, optimizer none, clip" : "parameter offload, optimizer none";
    if (skip_device_adam(label, devs[o])) continue;
    if (g_kind == ZO_DEVICE_CUDA &&
        devs[o] == ZO_OFFLOAD_NONE) { /* kernels or not: create refuses it */
      printf("skip %s: device Adam with offload_param \"cpu\"/\"nvme\" is refused on cuda\n",
             label);
      continue;
    }
    zo_config_t cfg;
    base_config(&cfg);
    cfg.bf16.enabled = 1;
    cfg.gradient_clipping = clip ? 1.0 : 0.0;
    cfg.zero.stage = 3;
    cfg.zero.sub_group_size = 2048;
    cfg.zero.offload_optimizer.device = devs[o];
    snprintf(cfg.zero.offload_optimizer.nvme_path, sizeof cfg.zero.offload_optimizer.nvme_path,
             "%s", dir);
    snprintf(cfg.zero.offload_param.nvme_path, sizeof cfg.zero.offload_param.nvme_path, "%s", dir);
    cfg.zero.stage3_param_persistence_threshold = 100; /* t2 (37 elements) stays on the device */
    cfg.zero.stage3_max_reuse_distance = 0;
    cfg.zero.stage3_prefetch_bucket_size = 6000;
    cfg.zero.offload_param.buffer_count = 2;
    po_result ref;
    po_run(cfg, 0, 4, 0, &ref); /* parameters resident, no device limit */
    /* Device memory: what the optimizer tier keeps there plus 14 KB for working
     * copies, less than the model's 20.3 KB of bf16 working weights. */
    const size_t state_dev = devs[o] == ZO_OFFLOAD_NONE ? 160 * 1024 : 0;
    const size_t limit = state_dev + 10000 /* scratch */ + 14 * 1024;
    for (int qc = 2; qc < 6;
         qc++) { /* parameters on cpu and nvme, each without and with a compute stream */
      const int q = qc / 2, use_cs = qc % 2;
      cfg.zero.offload_param.device = devs[q];
      g_po_warnings = 0;
      po_result got;
      po_run(cfg, limit, 4, use_cs, &got);
      int same = 1;
      for (int i = 0; i < NP; i++) {
        same &= !memcmp(got.master[i], ref.master[i], k_sizes[i] * 4);
        same &= !memcmp(got.working[i], ref.working[i], k_sizes[i] * 2);
      }
      if (!same)
        fprintf(stderr, "param %s / optimizer %s%s: weights differ from resident parameters\n",
                names[q], names[o], use_cs ? " / compute stream" : "");
      CHECK(same);
      CHECK(got.peak <= limit);
      CHECK(got.prefetches > 0);
      CHECK_EQ(g_po_warnings, 1); /* step 3's order change warns once */
      printf(
          "ok   offload_param %-4s offload_optimizer %-4s %s%s limit %zu B, peak %zu B, %lld prefetches, %lld "
          "demand fetches over 4 steps\n",
          names[q], names[o], clip ? "clip   " : "no clip", use_cs ? " cs" : "   ", limit, got.peak,
          (long long)got.prefetches, (long long)got.demand);
      po_free(&got);
      cfg.zero.offload_param.device = ZO_OFFLOAD_NONE;
    }
    po_free(&ref);
    CHECK_EQ(zo_test_count_entries(dir), 0);
  }
  zo_log_set_handler(NULL, NULL, ZO_LOG_WARN);
}

/* Delayed parameter update: an engine with DPU runs in lockstep with one
 * without, on the same gradients. During the warm-up steps both hold the same
 * weights after each step; after it the DPU engine computes with the weights
 * the plain engine had before step s (one update stale); after
 * zo_engine_synchronize both hold the same master and working weights (DPU
 * changes when an update lands, not what it is, since these gradients do not
 * depend on the weights). @cfg names the tier (cpu, or nvme with its sub-groups
 * streamed through few buffers or partly resident, where the next step's
 * gradients claim sub-groups whose delayed update is still under way). */
static void dpu_case(const char *label, zo_config_t cfg, const size_t *sz, int64_t warmup,
                     int steps) {
  zo_device_t *dev;
  void *scratch;
  size_t goff[NP], total = 0, most = 0;
  for (int i = 0; i < NP; i++) goff[i] = total, total += sz[i], most = sz[i] > most ? sz[i] : most;
  REQUIRE_OK(zo_device_create(g_kind, 0, 0, &dev));
  REQUIRE_OK(zo_device_malloc(dev, total * 2, &scratch));
  zo_engine_t *eng[2];
  zo_param_t *ps[2][NP];
  /* nvme: one swap directory each (an engine holds its own) */
  char nvdir[2][sizeof cfg.zero.offload_optimizer.nvme_path];
  for (int k = 0; k < 2; k++) {
    const int n =
        snprintf(nvdir[k], sizeof nvdir[k], "%.2000s/e%d", cfg.zero.offload_optimizer.nvme_path, k);
    CHECK(n > 0 && (size_t)n < sizeof nvdir[k]);
    if (cfg.zero.offload_optimizer.device == ZO_OFFLOAD_NVME) CHECK_EQ(mkdir(nvdir[k], 0700), 0);
  }
  for (int k = 0; k < 2; k++) {
    zo_config_t ck = cfg;
    memcpy(ck.zero.offload_optimizer.nvme_path, nvdir[k], sizeof nvdir[k]);
    ck.zoffload.delayed_param_update = k;
    ck.zoffload.delayed_param_update_warmup_steps = k ? warmup : 0;
    REQUIRE_OK(zo_engine_create(&ck, dev, NULL, &eng[k]));
    for (int i = 0; i < NP; i++) {
      char name[8];
      snprintf(name, sizeof name, "t%d", i);
      REQUIRE_OK(zo_engine_register_param(eng[k], name, sz[i], &ps[k][i]));
    }
    REQUIRE_OK(zo_engine_finalize(eng[k]));
  }
  float *buf = malloc(most * 4), *m0 = malloc(most * 4), *m1 = malloc(most * 4);
  uint16_t *g16 = malloc(most * 2), *prev = malloc(total * 2), *cur = malloc(total * 2);
  uint64_t seed = 11;
  for (int i = 0; i < NP; i++) {
    for (size_t j = 0; j < sz[i]; j++) buf[j] = zo_test_rand_pm1f(&seed);
    for (int k = 0; k < 2; k++) REQUIRE_OK(zo_engine_load_param(eng[k], ps[k][i], buf));
  }
  const void *w;
  int as_expected = 0;
  for (int s = 1; s <= steps; s++) {
    for (int i = 0; i < NP; i++) { /* the plain engine's weights before this step */
      REQUIRE_OK(zo_engine_fetch(eng[0], ps[0][i], &w, NULL));
      from_device(dev, prev + goff[i], w, sz[i] * 2);
      REQUIRE_OK(zo_engine_release(eng[0], ps[0][i]));
    }
    for (int i = NP - 1; i >= 0; i--) {
      for (size_t j = 0; j < sz[i]; j++) buf[j] = zo_test_rand_pm1f(&seed) * 0.1f;
      REQUIRE_OK(zo_cast(g16, ZO_DTYPE_BF16, buf, ZO_DTYPE_F32, sz[i], 1));
      char *g = (char *)scratch + goff[i] * 2;
      REQUIRE_OK(zo_memcpy(dev, g, g16, sz[i] * 2, ZO_COPY_H2D));
      for (int k = 0; k < 2; k++)
        REQUIRE_OK(zo_engine_grad_ready(eng[k], ps[k][i], g, ZO_DTYPE_BF16));
    }
    for (int k = 0; k < 2; k++) REQUIRE_OK(zo_engine_step(eng[k], NULL));
    for (int i = 0; i < NP; i++) { /* the plain engine's weights after it */
      REQUIRE_OK(zo_engine_fetch(eng[0], ps[0][i], &w, NULL));
      from_device(dev, cur + goff[i], w, sz[i] * 2);
      REQUIRE_OK(zo_engine_release(eng[0], ps[0][i]));
    }
    /* the DPU engine now computes with those weights (warm-up), or with the ones before the step */
    const uint16_t *want = s <= warmup ? cur : prev;
    for (int i = 0; i < NP; i++) {
      REQUIRE_OK(zo_engine_fetch(eng[1], ps[1][i], &w, NULL));
      from_device(dev, g16, w, sz[i] * 2);
      as_expected += memcmp(g16, want + goff[i], sz[i] * 2) == 0;
      REQUIRE_OK(zo_engine_release(eng[1], ps[1][i]));
    }
  }
  CHECK_EQ(as_expected, steps * NP);
  REQUIRE_OK(zo_engine_synchronize(eng[1]));
  int same = 0;
  for (int i = 0; i < NP; i++) {
    const void *w0;
    REQUIRE_OK(zo_engine_get_master(eng[0], ps[0][i], m0, NULL, NULL));
    REQUIRE_OK(zo_engine_get_master(eng[1], ps[1][i], m1, NULL, NULL));
    REQUIRE_OK(zo_engine_fetch(eng[0], ps[0][i], &w0, NULL));
    REQUIRE_OK(zo_engine_fetch(eng[1], ps[1][i], &w, NULL));
    from_device(dev, g16, w0, sz[i] * 2);
    from_device(dev, buf, w, sz[i] * 2); /* buf: room for these bf16 */
    same += !memcmp(m0, m1, sz[i] * 4) && !memcmp(g16, buf, sz[i] * 2);
    REQUIRE_OK(zo_engine_release(eng[0], ps[0][i]));
    REQUIRE_OK(zo_engine_release(eng[1], ps[1][i]));
  }
  CHECK_EQ(same, NP);
  printf("ok   delayed parameter update, %s, warm-up %lld: %s during training, identical after "
         "synchronize\n",
         label, (long long)warmup, warmup ? "fresh, then one step stale" : "one step stale");
  free(buf);
  free(m0);
  free(m1);
  free(g16);
  free(prev);
  free(cur);
  for (int k = 0; k < 2; k++) {
    zo_engine_destroy(eng[k]);
    if (cfg.zero.offload_optimizer.device == ZO_OFFLOAD_NVME) CHECK_EQ(rmdir(nvdir[k]), 0);
  }
  zo_device_free(dev, scratch);
  zo_device_destroy(dev);
}

static void test_dpu(const char *dir) {
  zo_config_t cfg;
  base_config(&cfg);
  cfg.bf16.enabled = 1;
  cfg.zero.offload_optimizer.device = ZO_OFFLOAD_CPU;
  dpu_case("cpu", cfg, k_sizes, 0, 5);
  cfg.gradient_clipping = 0.5; /* the norm of the whole step first */
  dpu_case("cpu, clipping", cfg, k_sizes, 2, 5);
  cfg.zero.offload_optimizer.device = ZO_OFFLOAD_NVME;
  snprintf(cfg.zero.offload_optimizer.nvme_path, sizeof cfg.zero.offload_optimizer.nvme_path, "%s",
           dir);
  cfg.zero.sub_group_size = 2048;
  cfg.zero.offload_optimizer.buffer_count = 2;
  dpu_case("nvme, sub_group 2048, 2 buffers, clipping", cfg, k_sizes, 2, 5);
  cfg.gradient_clipping = 0;
  cfg.zero.sub_group_size = 1024;
  cfg.zero.offload_optimizer.buffer_count = 1;
  dpu_case("nvme, sub_group 1024, 1 buffer", cfg, k_sizes, 0, 4);
  /* part of the state resident in host memory (pieces cut at 65536 elements: 3 of 6 sub-groups,
   * their updates queued together), the rest streamed through 2 buffers; bf16 state */
  static const size_t big[NP] = {70000, 140000, 3000, 65536};
  cfg.gradient_clipping = 0.5;
  cfg.zoffload.optimizer_state_dtype = ZO_DTYPE_BF16;
  cfg.zoffload.optimizer_max_in_cpu = 150000;
  cfg.zero.sub_group_size = 65536;
  cfg.zero.offload_optimizer.buffer_count = 2;
  dpu_case("nvme, 3 of 6 sub-groups resident, bf16 state, clipping", cfg, big, 1, 5);
  CHECK_EQ(zo_test_count_entries(dir), 0);
  /* DPU outside its setting fails at create, naming the key. */
  zo_device_t *dev;
  REQUIRE_OK(zo_device_create(g_kind, 0, 0, &dev));
  zo_engine_t *bad;
  base_config(&cfg);
  cfg.zoffload.delayed_param_update = 1;
  cfg.zero.offload_optimizer.device = ZO_OFFLOAD_NONE;
  CHECK_ST(zo_engine_create(&cfg, dev, NULL, &bad), ZO_ERR_CONFIG);
  CHECK_HAS(zo_last_error(), "zoffload.delayed_param_update");
  zo_device_destroy(dev);
}

/* Element counts whose byte counts do not fit in size_t (alone, or summed over tensors) are refused at
 * registration, naming the tensor; before they registered, finalize returned ZO_OK with wrapped sizes and
 * load_param wrote past its buffers (issue 20). Nothing here allocates more than a few KiB. */
static void test_huge_counts(const char *dir) {
  zo_config_t cfg;
  base_config(&cfg);
  cfg.zero.offload_optimizer.device = ZO_OFFLOAD_CPU;
  static const size_t huge[] = {((size_t)1 << 62) + 1, (size_t)1 << 62, ((size_t)1 << 63) - 1,
                                SIZE_MAX, ZO_ENGINE_MAX_ELEMS + 1};
  for (size_t i = 0; i < sizeof huge / sizeof huge[0]; i++) {
    zo_engine_t *e;
    zo_param_t *a, *h;
    REQUIRE_OK(zo_engine_create(&cfg, NULL, NULL, &e));
    REQUIRE_OK(zo_engine_register_param(e, "small", 64, &a));
    zo_status st = zo_engine_register_param(e, "huge.weight", huge[i], &h);
    if (!CHECK_ST(st, ZO_ERR_INVALID_ARG)) {
      fprintf(stderr, "  n_elems %zu registered; finalize: %s\n", huge[i],
              zo_engine_finalize(e) == ZO_OK ? "ZO_OK (wrapped sizes)" : zo_last_error());
    } else {
      CHECK_HAS(zo_last_error(), "huge.weight");
      CHECK_HAS(zo_last_error(), "2^48");
    }
    zo_engine_destroy(e);
  }
  /* The sum over tensors: two of half the limit fit, one element more is refused, naming that tensor. */
  zo_engine_t *e;
  zo_param_t *a, *b, *c;
  REQUIRE_OK(zo_engine_create(&cfg, NULL, NULL, &e));
  REQUIRE_OK(zo_engine_register_param(e, "half.a", ZO_ENGINE_MAX_ELEMS / 2, &a));
  REQUIRE_OK(zo_engine_register_param(e, "half.b", ZO_ENGINE_MAX_ELEMS / 2, &b));
  CHECK_ST(zo_engine_register_param(e, "one.more", 1, &c), ZO_ERR_INVALID_ARG);
  CHECK_HAS(zo_last_error(), "one.more");
  /* What is registered is refused by the budget (host memory), not allocated. */
  CHECK_ST(zo_engine_finalize(e), ZO_ERR_OUT_OF_MEMORY);
  zo_engine_destroy(e);
  /* A caller's bytes that overflow the sum make a line not fit (it wrapped to a small need before). */
  REQUIRE_OK(zo_engine_create(&cfg, NULL, NULL, &e));
  REQUIRE_OK(zo_engine_register_param(e, "w", 64, &a));
  zo_budget bud;
  const size_t app[4] = {0, SIZE_MAX - 16, 0, 0};
  REQUIRE_OK(zo_engine_budget(e, app, &bud));
  CHECK_EQ(bud.fits, 0);
  CHECK(bud.line[1].need == SIZE_MAX);
  zo_engine_destroy(e);
  /* nvme with sub_group_size 1: 2^38 pieces of 1024 elements; the piece count wrapped to 0 in an int and the plan
   * wrote past a one-entry array. Now refused, naming sub_group_size. */
  cfg.zero.offload_optimizer.device = ZO_OFFLOAD_NVME;
  snprintf(cfg.zero.offload_optimizer.nvme_path, sizeof cfg.zero.offload_optimizer.nvme_path, "%s",
           dir);
  cfg.zero.sub_group_size = 1;
  REQUIRE_OK(zo_engine_create(&cfg, NULL, NULL, &e));
  REQUIRE_OK(zo_engine_register_param(e, "all", ZO_ENGINE_MAX_ELEMS, &a));
  CHECK_ST(zo_engine_budget(e, NULL, &bud), ZO_ERR_CONFIG);
  CHECK_HAS(zo_last_error(), "sub_group_size");
  zo_engine_destroy(e);
}

/* Found by fuzz_engine_seq: (1) a finalize that failed (device limit) left e->tasks sized for the tensors of then;
 * a tensor registered afterwards made zo_engine_destroy() read past it (SIGSEGV). Now every call but destroy is
 * refused after a failed finalize. (2) A tensor registered after zo_engine_budget() was missing from the nvme
 * sub-group plan the budget had made: its master weights landed on another tensor's extent. */
static void test_finalize_order(const char *dir) {
  zo_config_t cfg;
  base_config(&cfg);
  zo_engine_t *e;
  zo_param_t *a, *b, *c;
  cfg.zoffload.device_memory_limit = 4096;
  if (g_kind == ZO_DEVICE_CUDA)
    cfg.zero.offload_optimizer.device = ZO_OFFLOAD_CPU; /* no device Adam kernel */
  REQUIRE_OK(zo_engine_create(&cfg, NULL, NULL, &e));
  REQUIRE_OK(zo_engine_register_param(e, "fits.not", 100000, &a));
  CHECK_ST(zo_engine_finalize(e), ZO_ERR_OUT_OF_MEMORY);
  for (int i = 0; i < 4; i++) {
    char name[16];
    snprintf(name, sizeof name, "late%d", i);
    CHECK_ST(zo_engine_register_param(e, name, 8, &b), ZO_ERR_INVALID_USAGE);
  }
  CHECK_HAS(zo_last_error(), "finalize");
  CHECK_ST(zo_engine_finalize(e), ZO_ERR_INVALID_USAGE);
  zo_budget bud;
  CHECK_ST(zo_engine_budget(e, NULL, &bud), ZO_ERR_INVALID_USAGE);
  zo_engine_destroy(e);

  base_config(&cfg);
  cfg.zero.offload_optimizer.device = ZO_OFFLOAD_NVME;
  snprintf(cfg.zero.offload_optimizer.nvme_path, sizeof cfg.zero.offload_optimizer.nvme_path, "%s",
           dir);
  REQUIRE_OK(zo_engine_create(&cfg, NULL, NULL, &e));
  REQUIRE_OK(zo_engine_register_param(e, "first", 3000, &a));
  REQUIRE_OK(zo_engine_budget(e, NULL, &bud));
  REQUIRE_OK(zo_engine_register_param(e, "second", 5000, &b));
  REQUIRE_OK(zo_engine_register_param(e, "third", 100, &c));
  REQUIRE_OK(zo_engine_finalize(e));
  static float va[3000], vb[5000], vc[100], got[5000];
  for (int i = 0; i < 5000; i++) vb[i] = 2.0f + (float)i;
  for (int i = 0; i < 3000; i++) va[i] = -1.0f - (float)i;
  for (int i = 0; i < 100; i++) vc[i] = 0.5f * (float)i;
  REQUIRE_OK(zo_engine_load_param(e, a, va));
  REQUIRE_OK(zo_engine_load_param(e, b, vb));
  REQUIRE_OK(zo_engine_load_param(e, c, vc));
  size_t off = 0, n = 0;
  REQUIRE_OK(zo_engine_get_master(e, b, got, &off, &n));
  CHECK_EQ(n, 5000);
  CHECK_BYTES("master of 'second' registered after budget", got, vb, sizeof vb);
  REQUIRE_OK(zo_engine_get_master(e, a, got, &off, &n));
  CHECK_BYTES("master of 'first'", got, va, sizeof va);
  REQUIRE_OK(zo_engine_get_master(e, c, got, &off, &n));
  CHECK_BYTES("master of 'third'", got, vc, sizeof vc);
  zo_engine_destroy(e);
}

/*
 * load_param of a shard of 1 Mi elements and more, which the Adam pool's threads copy and zero in one range each
 * (77 elements past a multiple of 64 at the end), and of a small one, copied inline: the master is @v bit for bit,
 * and the moments are zero: two engines whose first steps took different gradients, loaded again with the same
 * values, take the same second step to the same bits. Returns the big tensor's master after that step, malloc'ed.
 */
enum { LOAD_BIG = (1 << 20) + 77, LOAD_SMALL = 77 };
static float *load_twice(zo_config_t cfg, uint64_t first_grad_seed, const char *label) {
  const size_t n[2] = {LOAD_BIG, LOAD_SMALL};
  zo_device_t *dev = NULL;
  zo_engine_t *e = NULL;
  zo_param_t *ps[2];
  void *scratch = NULL;
  float *v = malloc(LOAD_BIG * sizeof(float)), *g = malloc(LOAD_BIG * sizeof(float));
  float *got = malloc(LOAD_BIG * sizeof(float));
  if (!v || !g || !got || zo_device_create(g_kind, 0, 0, &dev) != ZO_OK ||
      zo_device_malloc(dev, (LOAD_BIG + LOAD_SMALL) * sizeof(float), &scratch) != ZO_OK ||
      zo_engine_create(&cfg, dev, NULL, &e) != ZO_OK ||
      zo_engine_register_param(e, "big", n[0], &ps[0]) != ZO_OK ||
      zo_engine_register_param(e, "small", n[1], &ps[1]) != ZO_OK ||
      zo_engine_finalize(e) != ZO_OK) {
    FAIL_AT("%s: engine set-up: %s", label, zo_last_error());
    free(got);
    got = NULL;
    goto out;
  }
  for (int round = 0; round < 2; round++) {
    uint64_t vs = 7 + (uint64_t)round, gs = round ? 1234 : first_grad_seed;
    size_t off = 0;
    for (int i = 0; i < 2; i++) {
      for (size_t j = 0; j < n[i]; j++) v[j] = zo_test_rand_pm1f(&vs);
      if (zo_engine_load_param(e, ps[i], v) != ZO_OK) {
        FAIL_AT("%s: load_param: %s", label, zo_last_error());
        goto out;
      }
      size_t so = 99, sn = 0;
      if (zo_engine_get_master(e, ps[i], got, &so, &sn) != ZO_OK)
        FAIL_AT("%s: get_master: %s", label, zo_last_error());
      CHECK(so == 0 && sn == n[i]);
      CHECK_BYTES(i ? "master of 'small' after load_param" : "master of 'big' after load_param",
                  got, v, n[i] * sizeof(float));
      for (size_t j = 0; j < n[i]; j++) g[j] = zo_test_rand_pm1f(&gs);
      if (zo_engine_grad_ready(e, ps[i], to_device(dev, scratch, off, g, n[i] * sizeof(float)),
                               ZO_DTYPE_F32) != ZO_OK)
        FAIL_AT("%s: grad_ready: %s", label, zo_last_error());
      off += n[i] * sizeof(float);
    }
    zo_step_info info;
    if (zo_engine_step(e, &info) != ZO_OK) FAIL_AT("%s: step: %s", label, zo_last_error());
  }
  size_t so, sn;
  if (zo_engine_get_master(e, ps[0], got, &so, &sn) != ZO_OK)
    FAIL_AT("%s: get_master: %s", label, zo_last_error());
out:
  zo_engine_destroy(e);
  if (dev && scratch) zo_device_free(dev, scratch);
  zo_device_destroy(dev);
  free(v);
  free(g);
  return got;
}

static void test_load_large(void) {
  for (int bf16_state = 0; bf16_state <= 1; bf16_state++) {
    zo_config_t cfg;
    base_config(&cfg);
    cfg.zero.offload_optimizer.device = ZO_OFFLOAD_CPU;
    cfg.zoffload.optimizer_state_dtype = bf16_state ? ZO_DTYPE_BF16 : ZO_DTYPE_F32;
    const char *label = bf16_state ? "load_param 1 Mi + 77, cpu, bf16 state"
                                   : "load_param 1 Mi + 77, cpu, fp32 state";
    float *a = load_twice(cfg, 11, label), *b = load_twice(cfg, 12, label);
    if (a && b)
      CHECK_BYTES("master after a step from reloaded weights (the moments zeroed)", a, b,
                  LOAD_BIG * 4);
    printf("ok   %-40s master copied, moments zeroed on the pool's threads\n", label);
    free(a);
    free(b);
  }
}

int main(int argc, char **argv) {
  if (argc >= 3 && !strcmp(argv[1], "--backend")) {
    if (!strcmp(argv[2], "cuda")) {
      g_kind = ZO_DEVICE_CUDA;
    } else if (strcmp(argv[2], "host")) {
      fprintf(stderr, "usage: test_engine [--backend host|cuda] [SCRATCH_BASE]\n");
      return 1;
    }
    argc -= 2;
    argv += 2;
  }
  if (g_kind == ZO_DEVICE_CUDA && zo_device_cuda_count() == 0) {
    printf("test_engine: no CUDA device, skipped\n");
    return ZO_TEST_SKIP;
  }
#ifdef ZO_TEST_DEVADAM_EMU
  if (g_kind == ZO_DEVICE_CUDA && devadam_emu_install() == 1) g_device_kernels = 1;
#endif
  printf("test_engine: %s backend%s\n", zo_device_kind_name(g_kind),
         g_device_kernels ? ", device Adam's kernels emulated by the stand-in" : "");
  char dir[2048];
  if (zo_test_scratch_dir(argc > 1 ? argv[1] : NULL, "zo-engine", dir, sizeof dir))
    return ZO_TEST_SKIP;
  zo_config_t cfg;
  base_config(&cfg);
  for (int bf16 = 0; bf16 <= 1; bf16++) {
    cfg.bf16.enabled = bf16;
    cfg.gradient_clipping =
        bf16 ? 0.5 : 0.0; /* grads of norm ~50: clipping active with bf16 runs */
    cfg.zero.stage = 0;
    cfg.zero.offload_optimizer.device = ZO_OFFLOAD_NONE;
    run_tier(bf16 ? "none, bf16, clip" : "none, fp32", cfg, NULL, 4, 1.0f);
    cfg.zero.stage = 2;
    cfg.zero.offload_optimizer.device = ZO_OFFLOAD_CPU;
    cfg.zero.offload_optimizer.pin_memory = 1;
    run_tier(bf16 ? "cpu, bf16, clip" : "cpu, fp32", cfg, NULL, 4, 1.0f);
    cfg.zero.offload_optimizer.device = ZO_OFFLOAD_NVME;
    const int64_t sgs[] = {1000000000, 2048, 1024, 3000};
    const int nbuf[] = {4, 1, 2, 3};
    for (int k = 0; k < 4; k++) {
      cfg.zero.sub_group_size = sgs[k];
      cfg.zero.offload_optimizer.buffer_count = nbuf[k];
      char label[96];
      snprintf(label, sizeof label, "nvme, %s, sub_group %lld, %d buffers", bf16 ? "bf16" : "fp32",
               (long long)sgs[k], nbuf[k]);
      run_tier(label, cfg, dir, 4, 1.0f);
      /* the private swap directory is gone after destroy */
      CHECK_EQ(zo_test_count_entries(dir), 0);
    }
  }
  cfg.optimizer.adam_w_mode = 0; /* Adam with L2 weight decay, on nvme */
  cfg.zero.sub_group_size = 2048;
  run_tier("nvme, Adam (L2)", cfg, dir, 3, 1.0f);
  cfg.zero.offload_optimizer.pipeline_read = cfg.zero.offload_optimizer.pipeline_write =
      0; /* DeepSpeed's order */
  run_tier("nvme, no pipeline_read/write", cfg, dir, 3, 1.0f);
  cfg.zero.offload_optimizer.pipeline_read = cfg.zero.offload_optimizer.pipeline_write = 1;
  /* bf16 optimizer state (stochastic rounding keyed by flat offset): pieces of
   * split sub-groups must round exactly as the whole-shard reference does. */
  cfg.optimizer.adam_w_mode = 1;
  cfg.zoffload.optimizer_state_dtype = ZO_DTYPE_BF16;
  cfg.zero.sub_group_size = 1536;
  cfg.zero.offload_optimizer.buffer_count = 2;
  cfg.zoffload.swap_checksum = 1; /* CRC32C on every swap chunk, verified on each read */
  run_tier("nvme, bf16 state, sub_group 1536, crc32c", cfg, dir, 4, 1.0f);
  cfg.zoffload.swap_checksum = 0;
  CHECK(zo_test_count_entries(dir) == 0);
  cfg.zero.offload_optimizer.device = ZO_OFFLOAD_CPU;
  run_tier("cpu, bf16 state", cfg, NULL, 4, 1.0f);
  cfg.zoffload.optimizer_state_dtype = ZO_DTYPE_F32;
  test_fp16_overflow();
  test_param_offload(dir);
  test_dpu(dir);
  test_huge_counts(dir);
  test_finalize_order(dir);
  test_load_large();
  test_misuse(dir);
  rmdir(dir);
  return zo_test_finish("test_engine");
}
