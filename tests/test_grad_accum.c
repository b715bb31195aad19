/*
 * test_grad_accum.c - gradient accumulation in the engine (zo_engine_grad_accumulate, zo_engine_grad_fence):
 * two engines with the same config and weights, one fed 4 micro-batches per step (3 accumulate + 1 ready),
 * the other one zo_engine_grad_ready() of their sum formed by the caller in fp32 in the same order, give
 * master weights, norms and loss scales equal BIT FOR BIT (the engine adds in fp32 in call order, so the sums
 * are the same floats), over several steps on the none, cpu and nvme tiers of the host device, with clipping
 * on and off, fp16 loss scaling, bf16 micro-batches into an fp32 accumulator, and a staging bucket smaller
 * than the tensors (chunks). The accumulating engine reuses ONE device buffer per tensor for all micro-batches
 * and poisons it with NaN after zo_engine_grad_fence(): on a slow emulated link (copies still in flight), a
 * fence that did not wait would let NaN into the result. Also the fence on a compute stream, misuse errors
 * (nothing lost), the checkpoint refusal between micro-batches. Run under `mpirun -np 2` it compares the two
 * paths on 2 ranks (stages 1, 2 and 3; gradients multiples of 1/64 so every sum is exact in any order).
 * usage: test_grad_accum [--backend host|cuda] [SCRATCH_BASE]   Exit 0 pass, 1 fail, 77 skip. ctest
 * test_grad_accum_fakecuda (and _np2_fakecuda, one stand-in GPU per rank) runs the cuda backend against the stand-in
 * runtime (tests/fake_cudart.c): its copies land later with poisoned destinations, so the slow link is not needed
 * there; the none tier runs device Adam, its kernels emulated (devadam_emu.h, when the stand-in provides emulation;
 * skipped otherwise).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "zo_test.h"
#include "zoffload/checkpoint.h"
#include "zoffload/config.h"
#include "zoffload/engine.h"
#include "engine_internal.h" /* eng_host_func_grad_bytes */
#include "zo_test_backend.h"

enum { NP = 4, MB = 4, STEPS = 4 };
static const size_t k_sizes[NP] = {1000, 5000, 37, 4097};
static zo_comm_t *g_comm;
static int R, W;
static char g_dir[4096];

#include "grad_harness.h"

static void base_config(zo_config_t *c, zo_offload_device tier) {
  grad_adamw_config(c, MB);
  c->zero.offload_optimizer.device = tier;
  c->zero.sub_group_size = 3000;
  c->zero.reduce_bucket_size =
      1500; /* smaller than three of the tensors: they go through in chunks */
  snprintf(c->zero.offload_optimizer.nvme_path, sizeof c->zero.offload_optimizer.nvme_path, "%s",
           g_dir);
  snprintf(c->zero.offload_param.nvme_path, sizeof c->zero.offload_param.nvme_path, "%s", g_dir);
}

static float load(const void *src, zo_dtype dt, size_t j) {
  if (dt == ZO_DTYPE_F32) return ((const float *)src)[j];
  uint32_t b = (uint32_t)((const uint16_t *)src)[j] << 16;
  float f;
  memcpy(&f, &b, 4);
  return f;
}

/* Copy @n elements of @dt from host @src into device @dst: synchronously (@cs NULL) or on @cs. */
static int put(zo_device_t *dev, zo_stream_t *cs, void *dst, const void *src, size_t nbytes) {
  if (cs) return CHECK_OK(zo_memcpy_async(cs, dst, src, nbytes, ZO_COPY_H2D)) ? 0 : 1;
  return CHECK_OK(zo_memcpy(dev, dst, src, nbytes, ZO_COPY_H2D)) ? 0 : 1;
}

/* The poison: NaN over the caller's buffer, once the fence said it may be reused. */
static int poison(zo_device_t *dev, zo_stream_t *cs, void *dst, size_t nbytes) {
  if (cs) return CHECK_OK(zo_memset_async(cs, dst, 0xff, nbytes)) ? 0 : 1;
  void *nan = malloc(nbytes);
  memset(nan, 0xff, nbytes);
  int r = put(dev, NULL, dst, nan, nbytes);
  free(nan);
  return r;
}

/* One step of the accumulating engine: micro-batches 0..MB-2 accumulated, MB-1 handed over with ready, all
 * through one buffer per tensor that is overwritten right after each fence. @host[mb][i]: the gradients in
 * @dt, times the loss scale. With @misuse (step 2): the step is first tried without one tensor's ready. */
static int step_accum(zo_device_t *dev, zo_stream_t *cs, eng *g, void *host[MB][NP], zo_dtype dt,
                      int misuse, zo_step_info *inf) {
  const size_t dsz = zo_dtype_size(dt);
  for (int mb = 0; mb < MB; mb++) {
    for (int i = 0; i < NP; i++) {
      if (put(dev, cs, g->dbuf[i], host[mb][i], k_sizes[i] * dsz)) return 1;
      if (misuse && mb == MB - 1 && i == 2) continue; /* handed over only after the refused step */
      zo_status st = mb < MB - 1 ? zo_engine_grad_accumulate(g->e, g->ps[i], g->dbuf[i], dt)
                                 : zo_engine_grad_ready(g->e, g->ps[i], g->dbuf[i], dt);
      if (!CHECK_OK(st)) return 1;
      if (!CHECK_OK(zo_engine_grad_fence(g->e, cs))) return 1;
      if (poison(dev, cs, g->dbuf[i], k_sizes[i] * dsz))
        return 1; /* the next micro-batch reuses it */
    }
    if (mb == 1 && misuse) { /* between micro-batches: save refused, accumulation kept */
      CHECK_ST(zo_engine_save(g->e, g_dir, NULL, NULL, 0), ZO_ERR_INVALID_USAGE);
      CHECK_HAS(zo_last_error(), "accumulated");
      CHECK_ST(zo_engine_step(g->e, inf), ZO_ERR_INVALID_USAGE);
      CHECK_HAS(zo_last_error(), "'t0' has 2 accumulated micro-batch gradient(s)");
    }
  }
  if (misuse) {
    CHECK_ST(zo_engine_step(g->e, inf), ZO_ERR_INVALID_USAGE);
    CHECK_HAS(zo_last_error(), "tensor 't2' has 3 accumulated micro-batch gradient(s)");
    CHECK_ST(zo_engine_grad_accumulate(g->e, g->ps[0], g->dbuf[0], dt),
             ZO_ERR_INVALID_USAGE); /* after ready */
    CHECK_HAS(zo_last_error(), "grad_accumulate 't0': gradient already handed over");
    CHECK_ST(zo_engine_grad_ready(g->e, g->ps[0], g->dbuf[0], dt),
             ZO_ERR_INVALID_USAGE); /* twice */
    const zo_dtype bad = zo_engine_grad_dtype(g->e) == ZO_DTYPE_F16 ? ZO_DTYPE_BF16 : ZO_DTYPE_F16;
    CHECK_ST(zo_engine_grad_accumulate(g->e, g->ps[2], g->dbuf[2], bad), ZO_ERR_INVALID_ARG);
    CHECK_HAS(zo_last_error(), "grad_accumulate 't2': gradient dtype ");
    CHECK_HAS(zo_last_error(), zo_dtype_name(bad));
    CHECK_ST(zo_engine_grad_accumulate(g->e, g->ps[2], NULL, dt), ZO_ERR_INVALID_ARG);
    CHECK_ST(zo_engine_grad_accumulate(g->e, NULL, g->dbuf[2], dt), ZO_ERR_INVALID_ARG);
    CHECK_ST(zo_engine_grad_fence(NULL, NULL), ZO_ERR_INVALID_ARG);
    if (put(dev, cs, g->dbuf[2], host[MB - 1][2], k_sizes[2] * dsz)) return 1;
    if (!CHECK_OK(zo_engine_grad_ready(g->e, g->ps[2], g->dbuf[2], dt))) return 1;
    if (!CHECK_OK(zo_engine_grad_fence(g->e, NULL))) return 1;
    if (poison(dev, NULL, g->dbuf[2], k_sizes[2] * dsz)) return 1;
  }
  if (cs && !CHECK_OK(zo_stream_synchronize(cs))) return 1;
  return CHECK_OK(zo_engine_step(g->e, inf)) ? 0 : 1;
}

/* One step of the reference engine: the fp32 sum over the micro-batches, in order, handed over once. */
static int step_summed(zo_device_t *dev, eng *g, void *host[MB][NP], zo_dtype dt,
                       zo_step_info *inf) {
  for (int i = 0; i < NP; i++) {
    float *sum = calloc(k_sizes[i], 4);
    for (int mb = 0; mb < MB; mb++)
      for (size_t j = 0; j < k_sizes[i]; j++) sum[j] += load(host[mb][i], dt, j);
    int bad = put(dev, NULL, g->dbuf[i], sum, k_sizes[i] * 4);
    free(sum);
    if (bad || !CHECK_OK(zo_engine_grad_ready(g->e, g->ps[i], g->dbuf[i], ZO_DTYPE_F32))) return 1;
  }
  return CHECK_OK(zo_engine_step(g->e, inf)) ? 0 : 1;
}

/* Both engines over STEPS steps; master weights, norms and loss scales compared bit for bit. */
static void run_case(const char *label, const zo_config_t *c, zo_dtype mb_dtype, int use_cs) {
  zo_device_t *dev = NULL;
  zo_stream_t *cs = NULL;
  eng a, b;
  if (zo_test_skip_device_kernels(label, c->zero.offload_optimizer.device == ZO_OFFLOAD_NONE))
    return;
  if (!CHECK_OK(zo_test_device_create(0, &dev))) return;
  /* a slow emulated link: the copies out of the caller's buffers are still in flight when a fence returns
   * early, so the poison below would reach the result (the cuda stand-in's copies always land later) */
  if (zo_test_kind == ZO_DEVICE_HOST) CHECK_OK(zo_device_set_link_gbps(dev, 0.2));
  if (use_cs) CHECK_OK(zo_stream_create(dev, &cs));
  zo_config_t cb = *c; /* the reference's swap files in a directory of their own */
  CHECK((size_t)snprintf(cb.zero.offload_optimizer.nvme_path,
                         sizeof cb.zero.offload_optimizer.nvme_path, "%s/ref",
                         g_dir) < sizeof cb.zero.offload_optimizer.nvme_path);
  CHECK((size_t)snprintf(cb.zero.offload_param.nvme_path, sizeof cb.zero.offload_param.nvme_path,
                         "%s/ref", g_dir) < sizeof cb.zero.offload_param.nvme_path);
  mkdir(cb.zero.offload_optimizer.nvme_path, 0700);
  int bad = eng_open(&a, c, dev, cs) || eng_open(&b, &cb, dev, NULL);
  const size_t dsz = zo_dtype_size(mb_dtype);
  void *host[MB][NP] = {{0}};
  for (int s = 1; s <= STEPS && !bad; s++) {
    const double ls = zo_engine_loss_scale(a.e);
    CHECK(ls == zo_engine_loss_scale(b.e));
    for (int mb = 0; mb < MB; mb++)
      for (int i = 0; i < NP; i++) {
        float *f = malloc(k_sizes[i] * 4);
        for (size_t j = 0; j < k_sizes[i]; j++)
          f[j] = grad_of(R, s, mb, i, j) * (float)ls * (s == 3 ? 4.f : 1.f);
        free(host[mb][i]);
        host[mb][i] = malloc(k_sizes[i] * dsz);
        cast_to(host[mb][i], mb_dtype, f, k_sizes[i]);
        free(f);
      }
    zo_step_info ia, ib;
    bad = step_accum(dev, cs, &a, host, mb_dtype, s == 2 && W == 1, &ia) ||
          step_summed(dev, &b, host, mb_dtype, &ib);
    if (bad) break;
    if (!CHECK(ia.grad_norm == ib.grad_norm))
      fprintf(stderr, "  %s step %d: norm %.17g vs %.17g\n", label, s, ia.grad_norm, ib.grad_norm);
    CHECK_EQ(ia.skipped, ib.skipped);
    CHECK(ia.loss_scale == ib.loss_scale);
  }
  if (!bad) bad = eng_masters_differ(label, &a, &b, R);
  for (int mb = 0; mb < MB; mb++)
    for (int i = 0; i < NP; i++) free(host[mb][i]);
  if (!bad)
    printf(
        "ok: %s (rank %d of %d): accumulate x%d + ready == one ready of the fp32 sum, bit for bit\n",
        label, R, W, MB - 1);
  eng_close(&a, dev);
  eng_close(&b, dev);
  zo_stream_destroy(cs);
  zo_device_destroy(dev);
}

/* gradient_accumulation_steps 1 with a bf16 accumulator: nothing to accumulate into; fp32 refused; the
 * single hand-over is today's path (its bits: test_engine's tier tests). */
static void test_gas1(void) {
  zo_config_t c;
  base_config(&c, ZO_OFFLOAD_CPU);
  c.gradient_accumulation_steps = 1, c.train_batch_size = W;
  c.bf16.enabled = 1;
  zo_device_t *dev = NULL;
  eng g;
  if (!CHECK_OK(zo_test_device_create(0, &dev))) return;
  if (!eng_open(&g, &c, dev, NULL)) {
    CHECK_ST(zo_engine_grad_accumulate(g.e, g.ps[0], g.dbuf[0], ZO_DTYPE_BF16),
             ZO_ERR_INVALID_USAGE);
    CHECK_HAS(zo_last_error(), "gradient_accumulation_steps is 1");
    CHECK_ST(zo_engine_grad_ready(g.e, g.ps[0], g.dbuf[0], ZO_DTYPE_F32), ZO_ERR_INVALID_ARG);
    CHECK_HAS(zo_last_error(),
              "grad_ready 't0': gradient dtype fp32, expected bf16 (zo_engine_grad_dtype)");
    CHECK_OK(zo_engine_grad_fence(g.e, NULL)); /* nothing handed over: returns at once */
  }
  eng_close(&g, dev);
  zo_device_destroy(dev);
}

int main(int argc, char **argv) {
  int rc = zo_test_backend_arg("test_grad_accum", "[SCRATCH_BASE]", &argc, &argv);
  if (rc) return rc;
  rc = zo_test_rank_scratch_dir(argc > 1 ? argv[1] : NULL, "zo-test-accum", &g_comm, g_dir,
                                sizeof g_dir);
  if (rc) return rc;
  R = zo_comm_rank(g_comm), W = zo_comm_size(g_comm);
  zo_config_t c;
  if (W == 1) {
    static const zo_offload_device tiers[] = {ZO_OFFLOAD_NONE, ZO_OFFLOAD_CPU, ZO_OFFLOAD_NVME};
    static const char *names[] = {"none", "cpu", "nvme"};
    char label[120];
    for (int t = 0; t < 3; t++)
      for (int clip = 0; clip < 2; clip++) {
        base_config(&c, tiers[t]);
        c.gradient_clipping = clip ? 1.0 : 0;
        c.zero.overlap_comm = clip; /* one bucket, and two */
        snprintf(label, sizeof label, "%s, fp32, clipping %s", names[t], clip ? "on" : "off");
        run_case(label, &c, ZO_DTYPE_F32, 0);
      }
    for (int t = 0; t < 3; t++) {
      base_config(&c, tiers[t]);
      c.fp16.enabled = 1, c.fp16.initial_scale_power = 4, c.fp16.loss_scale_window = 2;
      if (tiers[t] == ZO_OFFLOAD_NONE)
        c.grad_accum_dtype = ZO_DTYPE_F32; /* device shard: working dtype unless set */
      snprintf(label, sizeof label, "%s, fp16 loss scaling, fp32 micro-batches", names[t]);
      run_case(label, &c, ZO_DTYPE_F32, 0);
      base_config(&c, tiers[t]);
      c.bf16.enabled = 1;
      c.gradient_clipping = 1.0;
      if (tiers[t] == ZO_OFFLOAD_NONE) c.grad_accum_dtype = ZO_DTYPE_F32;
      snprintf(label, sizeof label, "%s, bf16 micro-batches into fp32", names[t]);
      run_case(label, &c, ZO_DTYPE_BF16, 0);
    }
    base_config(&c, ZO_OFFLOAD_CPU);
    run_case("cpu, fence on a compute stream", &c, ZO_DTYPE_F32, 1);
    test_gas1();
  } else {
    for (int stage = 1; stage <= 3; stage++) {
      base_config(&c, ZO_OFFLOAD_CPU);
      c.zero.stage = stage;
      c.gradient_clipping = stage == 2 ? 1.0 : 0;
      c.zero.overlap_comm = stage != 1;
      if (stage == 3) c.zero.offload_param.device = ZO_OFFLOAD_CPU;
      char label[80];
      snprintf(label, sizeof label, "stage %d, cpu, fp32", stage);
      run_case(label, &c, ZO_DTYPE_F32, 0);
      c.bf16.enabled = 1;
      snprintf(label, sizeof label, "stage %d, cpu, bf16 micro-batches into fp32", stage);
      run_case(label, &c, ZO_DTYPE_BF16, 0);
    }
  }
  CHECK_OK(zo_comm_barrier(g_comm));
  char ref[4200];
  snprintf(ref, sizeof ref, "%s/ref", g_dir);
  rmdir(ref);
  rmdir(g_dir);
  zo_comm_destroy(g_comm);
  /* no add or norm ran inside a copy-stream host function (they run on the Adam pool) */
  if (!CHECK_EQ(atomic_load(&eng_host_func_grad_bytes), 0))
    fprintf(stderr, "  gradient bytes added or normed inside host functions: %llu\n",
            (unsigned long long)atomic_load(&eng_host_func_grad_bytes));
  return zo_test_finish("test_grad_accum");
}
