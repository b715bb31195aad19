/*
 * test_engine.c - the offload engine against a plain reference: master
 * weights after several steps on every tier (none, cpu, nvme with several
 * sub-group and buffer layouts) equal zo_adam_step applied directly, bit for
 * bit; clipping, fp16 overflow skipping and loss-scale changes; misuse errors.
 */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "zoffload/adam.h"
#include "zoffload/config.h"
#include "zoffload/engine.h"

static int g_fail;
#define CHECK(cond)                                                       \
  do {                                                                    \
    if (!(cond)) {                                                        \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      g_fail++;                                                           \
    }                                                                     \
  } while (0)
#define CHECK_OK(expr)                                                                          \
  do {                                                                                          \
    zo_status st_ = (expr);                                                                     \
    if (st_ != ZO_OK) {                                                                         \
      fprintf(stderr, "%s:%d: %s returned %s: %s\n", __FILE__, __LINE__, #expr, zo_status_string(st_), \
              zo_last_error());                                                                 \
      g_fail++;                                                                                 \
      return;                                                                                   \
    }                                                                                           \
  } while (0)

static uint64_t rng_next(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static float rng_uniform(uint64_t *s) { return (float)((rng_next(s) >> 40) * (1.0 / 16777216.0)) * 2.f - 1.f; }

/* Gradients are handed over in device memory: stage host values into a
 * device scratch buffer (the host backend checks that copies name device
 * memory, as cudaMemcpy would). */
static void *to_device(zo_device_t *dev, void *scratch, size_t off_bytes, const void *src, size_t nbytes) {
  char *d = (char *)scratch + off_bytes;
  if (zo_memcpy(dev, d, src, nbytes, ZO_COPY_H2D) != ZO_OK) {
    fprintf(stderr, "to_device: %s\n", zo_last_error());
    exit(1);
  }
  return d;
}

enum { NP = 4 };
static const size_t k_sizes[NP] = {1000, 5000, 37, 4096};

typedef struct ref_state {
  float *p[NP], *m[NP], *v[NP], *g[NP];
} ref_state;

static void ref_alloc(ref_state *r) {
  for (int i = 0; i < NP; i++) {
    r->p[i] = calloc(k_sizes[i], 4);
    r->m[i] = calloc(k_sizes[i], 4);
    r->v[i] = calloc(k_sizes[i], 4);
    r->g[i] = calloc(k_sizes[i], 4);
  }
}
static void ref_free(ref_state *r) {
  for (int i = 0; i < NP; i++) free(r->p[i]), free(r->m[i]), free(r->v[i]), free(r->g[i]);
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
static void run_tier(const char *label, zo_config_t cfg, const char *nvme_dir, int steps, float grad_mag) {
  if (nvme_dir)
    snprintf(cfg.zero.offload_optimizer.nvme_path, sizeof cfg.zero.offload_optimizer.nvme_path, "%s", nvme_dir);
  zo_engine_t *e = NULL;
  zo_param_t *ps[NP];
  ref_state r;
  ref_alloc(&r);
  uint64_t seed = 42;
  zo_device_t *dev;
  void *scratch;
  CHECK_OK(zo_device_create(ZO_DEVICE_HOST, 0, 0, &dev));
  CHECK_OK(zo_device_malloc(dev, 4 * (1000 + 5000 + 37 + 4096), &scratch));
  CHECK_OK(zo_engine_create(&cfg, dev, NULL, &e));
  char name[32];
  for (int i = 0; i < NP; i++) {
    snprintf(name, sizeof name, "t%d", i);
    CHECK_OK(zo_engine_register_param(e, name, k_sizes[i], &ps[i]));
  }
  CHECK_OK(zo_engine_finalize(e));
  for (int i = 0; i < NP; i++) {
    for (size_t j = 0; j < k_sizes[i]; j++) r.p[i][j] = rng_uniform(&seed);
    CHECK_OK(zo_engine_load_param(e, ps[i], r.p[i]));
  }
  const zo_dtype wd = zo_engine_working_dtype(e);
  float *gbuf = malloc(4096 * 4 * 2);
  int64_t applied = 0;
  for (int s = 1; s <= steps; s++) {
    double sq = 0;
    for (int i = 0; i < NP; i++)
      for (size_t j = 0; j < k_sizes[i]; j++) {
        r.g[i][j] = rng_uniform(&seed) * grad_mag;
        sq += (double)r.g[i][j] * r.g[i][j];
      }
    size_t off = 0;
    for (int i = NP - 1; i >= 0; i--) {
      void *dg = to_device(dev, scratch, off, r.g[i], k_sizes[i] * 4);
      off += k_sizes[i] * 4;
      CHECK_OK(zo_engine_grad_ready(e, ps[i], dg, ZO_DTYPE_F32));
    }
    zo_step_info info;
    CHECK_OK(zo_engine_step(e, &info));
    CHECK(!info.skipped);
    applied++;
    /* Reference: the same hyperparameters the engine documents. */
    double norm = sqrt(sq);
    CHECK(fabs(info.grad_norm - norm) <= 1e-9 * norm);
    double clip = cfg.gradient_clipping > 0 && norm > cfg.gradient_clipping ? cfg.gradient_clipping / (norm + 1e-6) : 1.0;
    zo_adam_hparams hp = {.lr = (float)zo_config_lr_at(&cfg, applied), .beta1 = (float)cfg.optimizer.beta1,
                          .beta2 = (float)cfg.optimizer.beta2, .eps = (float)cfg.optimizer.eps,
                          .weight_decay = (float)cfg.optimizer.weight_decay,
                          .mode = cfg.optimizer.adam_w_mode ? ZO_ADAM_MODE_ADAMW : ZO_ADAM_MODE_L2,
                          .bias_correction = cfg.optimizer.bias_correction, .step = applied,
                          .grad_scale = (float)(clip / 1.0)};
    CHECK(info.lr == hp.lr);
    for (int i = 0; i < NP; i++)
      CHECK_OK(zo_adam_step(&hp, r.p[i], r.g[i], r.m[i], r.v[i], k_sizes[i], ZO_SIMD_AUTO, 1));
  }
  int mism = 0;
  for (int i = 0; i < NP; i++) {
    size_t off = 99, n = 0;
    float *got = malloc(k_sizes[i] * 4);
    CHECK_OK(zo_engine_get_master(e, ps[i], got, &off, &n));
    CHECK(off == 0 && n == k_sizes[i]);
    for (size_t j = 0; j < k_sizes[i] && mism < 10; j++)
      if (memcmp(&got[j], &r.p[i][j], 4)) {
        if (!mism) fprintf(stderr, "%s: master t%d[%zu]: engine %.9g, reference %.9g\n", label, i, j, got[j], r.p[i][j]);
        mism++;
      }
    /* Working weights: the working-dtype cast of the reference master. */
    const void *w;
    zo_dtype dt;
    CHECK_OK(zo_engine_fetch(e, ps[i], &w, &dt));
    CHECK(dt == wd);
    CHECK_OK(zo_cast(gbuf, wd, r.p[i], ZO_DTYPE_F32, k_sizes[i], 1));
    if (memcmp(w, gbuf, k_sizes[i] * zo_dtype_size(wd))) {
      fprintf(stderr, "%s: working weights of t%d differ from the %s cast of the reference\n", label, i,
              zo_dtype_name(wd));
      mism++;
    }
    free(got);
  }
  CHECK(mism == 0);
  zo_engine_mem mem;
  CHECK_OK(zo_engine_mem_info(e, &mem));
  if (cfg.zero.offload_optimizer.device == ZO_OFFLOAD_NVME) {
    CHECK(mem.nvme_bytes >= 3 * 4 * (1000 + 5000 + 37 + 4096));
    CHECK(mem.nvme_read_bytes > 0 && mem.nvme_write_bytes > 0);
  } else {
    CHECK(mem.nvme_bytes == 0);
  }
  printf("ok   %-34s %d steps, %s working weights, device %zu B, host %zu B, nvme %zu B\n", label, steps,
         zo_dtype_name(wd), mem.device_bytes, mem.host_bytes, mem.nvme_bytes);
  zo_engine_destroy(e);
  zo_device_free(dev, scratch);
  zo_device_destroy(dev);
  free(gbuf);
  ref_free(&r);
}

static int dir_is_empty(const char *path) {
  DIR *d = opendir(path);
  if (!d) return 0;
  struct dirent *de;
  int n = 0;
  while ((de = readdir(d)))
    if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) n++;
  closedir(d);
  return n == 0;
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
  CHECK_OK(zo_device_create(ZO_DEVICE_HOST, 0, 0, &dev));
  CHECK_OK(zo_device_malloc(dev, 4096, &scratch));
  CHECK_OK(zo_engine_create(&cfg, dev, NULL, &e));
  CHECK_OK(zo_engine_register_param(e, "w", 100, &p));
  CHECK_OK(zo_engine_finalize(e));
  float w0[100], g[100], got[100];
  uint16_t g16[100];
  for (int i = 0; i < 100; i++) w0[i] = 0.01f * i;
  CHECK_OK(zo_engine_load_param(e, p, w0));
  CHECK(zo_engine_loss_scale(e) == 256.0);
  CHECK(zo_engine_working_dtype(e) == ZO_DTYPE_F16);
  double expect_scale[] = {256.0, 128.0}; /* hysteresis 2: first overflow keeps the scale, second halves it */
  for (int k = 0; k < 2; k++) {
    for (int i = 0; i < 100; i++) g[i] = 1e5f; /* *256 overflows fp16 */
    CHECK_OK(zo_cast(g16, ZO_DTYPE_F16, g, ZO_DTYPE_F32, 100, 1));
    CHECK_OK(zo_engine_grad_ready(e, p, to_device(dev, scratch, 0, g16, sizeof g16), ZO_DTYPE_F16));
    zo_step_info info;
    CHECK_OK(zo_engine_step(e, &info));
    CHECK(info.skipped == 1);
    CHECK(info.step == 0);
    CHECK(zo_engine_loss_scale(e) == expect_scale[k]);
    CHECK_OK(zo_engine_get_master(e, p, got, NULL, NULL));
    CHECK(memcmp(got, w0, sizeof w0) == 0);
  }
  /* A good step: gradients scaled by 128 in fp16; the update equals Adam on unscaled grads. */
  for (int i = 0; i < 100; i++) g[i] = 0.001f * (i - 50);
  float gs[100];
  for (int i = 0; i < 100; i++) gs[i] = g[i] * 128.0f;
  CHECK_OK(zo_cast(g16, ZO_DTYPE_F16, gs, ZO_DTYPE_F32, 100, 1));
  CHECK_OK(zo_engine_grad_ready(e, p, to_device(dev, scratch, 0, g16, sizeof g16), ZO_DTYPE_F16));
  zo_step_info info;
  CHECK_OK(zo_engine_step(e, &info));
  CHECK(info.skipped == 0 && info.step == 1);
  float ref[100], m[100] = {0}, v[100] = {0}, gun[100];
  float back[100];
  CHECK_OK(zo_cast(back, ZO_DTYPE_F32, g16, ZO_DTYPE_F16, 100, 1));
  for (int i = 0; i < 100; i++) gun[i] = back[i];
  memcpy(ref, w0, sizeof ref);
  zo_adam_hparams hp = {.lr = (float)zo_config_lr_at(&cfg, 1), .beta1 = (float)cfg.optimizer.beta1,
                        .beta2 = (float)cfg.optimizer.beta2, .eps = (float)cfg.optimizer.eps,
                        .weight_decay = (float)cfg.optimizer.weight_decay, .mode = ZO_ADAM_MODE_ADAMW,
                        .bias_correction = 1, .step = 1, .grad_scale = (float)(1.0 / 128.0)};
  CHECK_OK(zo_adam_step(&hp, ref, gun, m, v, 100, ZO_SIMD_AUTO, 1));
  CHECK_OK(zo_engine_get_master(e, p, got, NULL, NULL));
  CHECK(memcmp(got, ref, sizeof ref) == 0);
  /* loss_scale_window 2: two good steps since the overflow double the scale. */
  CHECK_OK(zo_engine_grad_ready(e, p, to_device(dev, scratch, 0, g16, sizeof g16), ZO_DTYPE_F16));
  CHECK_OK(zo_engine_step(e, &info));
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
  CHECK_OK(zo_device_create(ZO_DEVICE_HOST, 0, 0, &dev));
  CHECK_OK(zo_device_malloc(dev, 256, &g));
  static const float zeros[64];
  to_device(dev, g, 0, zeros, sizeof zeros);
  /* A step with a tensor that got no gradient names the tensor. */
  CHECK_OK(zo_engine_create(&cfg, dev, NULL, &e));
  CHECK_OK(zo_engine_register_param(e, "embed.weight", 64, &a));
  CHECK(zo_engine_register_param(e, "embed.weight", 64, &b) == ZO_ERR_INVALID_ARG);
  CHECK(strstr(zo_last_error(), "embed.weight") != NULL);
  CHECK_OK(zo_engine_register_param(e, "head.bias", 8, &b));
  CHECK(zo_engine_grad_ready(e, a, g, ZO_DTYPE_F32) == ZO_ERR_INVALID_USAGE); /* before finalize */
  CHECK_OK(zo_engine_finalize(e));
  CHECK(zo_engine_register_param(e, "late", 8, &b) == ZO_ERR_INVALID_USAGE);
  CHECK_OK(zo_engine_grad_ready(e, a, g, ZO_DTYPE_F32));
  CHECK(zo_engine_grad_ready(e, a, g, ZO_DTYPE_F32) == ZO_ERR_INVALID_USAGE);
  CHECK(zo_engine_grad_ready(e, b, g, ZO_DTYPE_F16) == ZO_ERR_INVALID_ARG); /* fp16 grads without fp16 */
  CHECK(zo_engine_step(e, NULL) == ZO_ERR_INVALID_USAGE);
  CHECK(strstr(zo_last_error(), "head.bias") != NULL);
  zo_engine_destroy(e);
  zo_device_free(dev, g);
  zo_device_destroy(dev);

  /* A device limit below the working weights fails at finalize, naming the limit. */
  cfg.zoffload.device_memory_limit = 4096;
  CHECK_OK(zo_engine_create(&cfg, NULL, NULL, &e));
  CHECK_OK(zo_engine_register_param(e, "big", 100000, &a));
  CHECK(zo_engine_finalize(e) == ZO_ERR_OUT_OF_MEMORY);
  CHECK(strstr(zo_last_error(), "4096") != NULL);
  zo_engine_destroy(e);
  cfg.zoffload.device_memory_limit = 0;

  /* Offload with ZeRO stage 0 is a config error naming both keys. */
  cfg.zero.stage = 0;
  cfg.zero.offload_optimizer.device = ZO_OFFLOAD_CPU;
  CHECK(zo_engine_create(&cfg, NULL, NULL, &e) == ZO_ERR_CONFIG);
  CHECK(strstr(zo_last_error(), "zero_optimization.stage") != NULL);
  cfg.zero.stage = 2;

  /* nvme: a missing nvme_path fails at create and names the key. */
  cfg.zero.offload_optimizer.device = ZO_OFFLOAD_NVME;
  snprintf(cfg.zero.offload_optimizer.nvme_path, sizeof cfg.zero.offload_optimizer.nvme_path, "%s/missing", dir);
  CHECK(zo_engine_create(&cfg, NULL, NULL, &e) != ZO_OK);
  CHECK(strstr(zo_last_error(), "nvme_path") != NULL && strstr(zo_last_error(), "missing") != NULL);
  printf("ok   misuse errors\n");
}

int main(int argc, char **argv) {
  char dir[2048];
  snprintf(dir, sizeof dir, "%s/zo-engine-XXXXXX", argc > 1 ? argv[1] : (getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp"));
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  zo_config_t cfg;
  base_config(&cfg);
  for (int bf16 = 0; bf16 <= 1; bf16++) {
    cfg.bf16.enabled = bf16;
    cfg.gradient_clipping = bf16 ? 0.5 : 0.0; /* grads of norm ~50: clipping active with bf16 runs */
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
      CHECK(dir_is_empty(dir)); /* the private swap directory is gone after destroy */
    }
  }
  cfg.optimizer.adam_w_mode = 0; /* Adam with L2 weight decay, on nvme */
  cfg.zero.sub_group_size = 2048;
  run_tier("nvme, Adam (L2)", cfg, dir, 3, 1.0f);
  test_fp16_overflow();
  test_misuse(dir);
  rmdir(dir);
  if (g_fail) {
    printf("test_engine: %d check(s) failed\n", g_fail);
    return 1;
  }
  printf("test_engine: all checks passed\n");
  return 0;
}
