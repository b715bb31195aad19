/*
 * test_grad_reopen.c - several backward passes in one micro-batch (zo_engine_grad_reopen): two engines with the
 * same config and weights; one is handed each pass's gradients with zo_engine_grad_ready(), a reopen before each
 * further pass (the last pass reaching only some tensors, as a GAN's second loss may), the other one
 * zo_engine_grad_ready() of the caller's sum of the passes. Master weights, norms and verdicts must be equal BIT
 * FOR BIT over several steps, on the none (device Adam, where the stand-in emulates it), cpu and nvme tiers (nvme
 * with every sub-group streamed, and with some resident in host memory), clipping on and off, with
 * gradient_accumulation_steps 1 (the adds go through the staging ring planned for zoffload.early_adam false) and 2
 * (a micro-batch accumulated before them), fp32 and bf16 gradients; under `mpirun -np 2` at stages 1-3. The
 * gradients are multiples of 1/64 below 2 in magnitude, so the sums are exact in either order (bf16: two passes).
 * Also: reopen refused with zoffload.early_adam true, a second grad_ready without reopen refused, a reopen before
 * any hand-over accepted.
 * usage: test_grad_reopen [--backend host|cuda] [SCRATCH_BASE]   Exit 0 pass, 1 fail, 77 skip.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "zo_test.h"
#include "zoffload/config.h"
#include "zoffload/engine.h"
#include "zo_test_backend.h"

enum { NP = 4, STEPS = 3, MAXPASS = 3 };
static const size_t k_sizes[NP] = {1000, 5000, 37, 4097};
static zo_comm_t *g_comm;
static int R, W;
static char g_dir[4096];

#include "grad_harness.h"

static void base_config(zo_config_t *c, zo_offload_device tier, int gas) {
  grad_adamw_config(c, gas);
  c->zoffload.early_adam = 0;
  c->zero.offload_optimizer.device = tier;
  c->zero.sub_group_size = 3000;
  c->zero.reduce_bucket_size = 1500; /* smaller than three of the tensors: chunks */
  snprintf(c->zero.offload_optimizer.nvme_path, sizeof c->zero.offload_optimizer.nvme_path, "%s",
           g_dir);
  snprintf(c->zero.offload_param.nvme_path, sizeof c->zero.offload_param.nvme_path, "%s", g_dir);
}

/* Does pass @k of step @s reach tensor @i? The first pass reaches every tensor; a later one skips t2, and t0 in
 * even steps. */
static int reaches(int s, int k, int i) { return k == 0 || (i != 2 && !(i == 0 && s % 2 == 0)); }

/* Contribution @c (micro-batches before the last: c < gas - 1; then the last one's passes) of tensor @i. */
static float contrib(int s, int c, int i, size_t j) { return grad_of(R, s, c, i, j); }

static int put(zo_device_t *dev, void *dst, const void *src, size_t nbytes) {
  return CHECK_OK(zo_memcpy(dev, dst, src, nbytes, ZO_COPY_H2D)) ? 0 : 1;
}

/* @n elements of contribution @c of tensor @i at step @s (times @ls) into @dst as @dt. */
static void fill(void *dst, zo_dtype dt, int s, int c, int i, double ls) {
  float *f = malloc(k_sizes[i] * 4);
  for (size_t j = 0; j < k_sizes[i]; j++) f[j] = contrib(s, c, i, j) * (float)ls;
  cast_to(dst, dt, f, k_sizes[i]);
  free(f);
}

/* One step of the engine under test: gas - 1 micro-batches accumulated, then @passes backward passes of the last
 * one, each handed over with grad_ready, a reopen before every pass but the first. */
static int step_passes(zo_device_t *dev, eng *g, int gas, int passes, zo_dtype dt, int s,
                       zo_step_info *inf) {
  const double ls = zo_engine_loss_scale(g->e);
  void *h = malloc(5000 * 4);
  int bad = 0;
  for (int mb = 0; mb < gas - 1 && !bad; mb++)
    for (int i = 0; i < NP && !bad; i++) {
      fill(h, dt, s, mb, i, ls);
      bad = put(dev, g->dbuf[i], h, k_sizes[i] * zo_dtype_size(dt)) ||
            !CHECK_OK(zo_engine_grad_accumulate(g->e, g->ps[i], g->dbuf[i], dt)) ||
            !CHECK_OK(zo_engine_grad_fence(g->e, NULL));
    }
  for (int k = 0; k < passes && !bad; k++) {
    if (k > 0 && !CHECK_OK(zo_engine_grad_reopen(g->e))) bad = 1;
    for (int i = NP - 1; i >= 0 && !bad; i--) { /* backward's order */
      if (!reaches(s, k, i)) continue;
      fill(h, dt, s, gas - 1 + k, i, ls);
      bad = put(dev, g->dbuf[i], h, k_sizes[i] * zo_dtype_size(dt)) ||
            !CHECK_OK(zo_engine_grad_ready(g->e, g->ps[i], g->dbuf[i], dt)) ||
            !CHECK_OK(zo_engine_grad_fence(g->e, NULL));
    }
    if (k == 0 && s == 1 && !bad) { /* a second hand-over without reopen: refused, nothing lost */
      CHECK_ST(zo_engine_grad_ready(g->e, g->ps[1], g->dbuf[1], dt), ZO_ERR_INVALID_USAGE);
      CHECK_HAS(zo_last_error(), "grad_ready 't1': gradient already handed over");
    }
  }
  free(h);
  return bad || !CHECK_OK(zo_engine_step(g->e, inf));
}

/* One step of the reference: every contribution summed by the caller in fp32 (exact), handed over once in the
 * accumulation dtype (fp32 with gas > 1; else the hand-over dtype, where these sums are exact too). */
static int step_summed(zo_device_t *dev, eng *g, int gas, int passes, zo_dtype dt, int s,
                       zo_step_info *inf) {
  const double ls = zo_engine_loss_scale(g->e);
  const zo_dtype sdt = gas > 1 ? ZO_DTYPE_F32 : dt;
  for (int i = 0; i < NP; i++) {
    float *sum = calloc(k_sizes[i], 4);
    for (int c = 0; c < gas - 1 + passes; c++)
      if (c < gas - 1 || reaches(s, c - (gas - 1), i))
        for (size_t j = 0; j < k_sizes[i]; j++) sum[j] += contrib(s, c, i, j) * (float)ls;
    void *h = malloc(k_sizes[i] * 4);
    cast_to(h, sdt, sum, k_sizes[i]);
    int bad = put(dev, g->dbuf[i], h, k_sizes[i] * zo_dtype_size(sdt)) ||
              !CHECK_OK(zo_engine_grad_ready(g->e, g->ps[i], g->dbuf[i], sdt));
    free(sum), free(h);
    if (bad) return 1;
  }
  return !CHECK_OK(zo_engine_step(g->e, inf));
}

static void run_case(const char *label, const zo_config_t *c, int passes, zo_dtype dt) {
  if (zo_test_skip_device_kernels(label, c->zero.offload_optimizer.device == ZO_OFFLOAD_NONE))
    return;
  zo_device_t *dev = NULL;
  eng a, b;
  if (!CHECK_OK(zo_test_device_create(0, &dev))) return;
  zo_config_t cb = *c; /* the reference's swap files in a directory of their own */
  CHECK((size_t)snprintf(cb.zero.offload_optimizer.nvme_path,
                         sizeof cb.zero.offload_optimizer.nvme_path, "%s/ref",
                         g_dir) < sizeof cb.zero.offload_optimizer.nvme_path);
  mkdir(cb.zero.offload_optimizer.nvme_path, 0700);
  int bad = eng_open(&a, c, dev, NULL) || eng_open(&b, &cb, dev, NULL);
  const int gas = c->gradient_accumulation_steps;
  for (int s = 1; s <= STEPS && !bad; s++) {
    if (s == 1) CHECK_OK(zo_engine_grad_reopen(a.e)); /* nothing handed over yet: accepted */
    zo_step_info ia, ib;
    bad = step_passes(dev, &a, gas, passes, dt, s, &ia) ||
          step_summed(dev, &b, gas, passes, dt, s, &ib);
    if (bad) break;
    if (!CHECK(ia.grad_norm == ib.grad_norm))
      fprintf(stderr, "  %s step %d: norm %.17g vs %.17g\n", label, s, ia.grad_norm, ib.grad_norm);
    CHECK_EQ(ia.skipped, ib.skipped);
  }
  if (!bad) bad = eng_masters_differ(label, &a, &b, R);
  if (!bad)
    printf(
        "ok: %s (rank %d of %d): %d backward passes == one hand-over of their sum, bit for bit\n",
        label, R, W, passes);
  eng_close(&a, dev);
  eng_close(&b, dev);
  zo_device_destroy(dev);
}

/* zoffload.early_adam true (the C default): refused, naming the key; the step still runs. */
static void test_early_adam_refused(void) {
  zo_config_t c;
  base_config(&c, ZO_OFFLOAD_CPU, 1);
  c.zoffload.early_adam = 1;
  zo_device_t *dev = NULL;
  eng g;
  if (!CHECK_OK(zo_test_device_create(0, &dev))) return;
  if (!eng_open(&g, &c, dev, NULL)) {
    float *h = calloc(5000, 4);
    for (int i = 0; i < NP; i++) {
      CHECK(!put(dev, g.dbuf[i], h, k_sizes[i] * 4));
      CHECK_OK(zo_engine_grad_ready(g.e, g.ps[i], g.dbuf[i], ZO_DTYPE_F32));
    }
    CHECK_ST(zo_engine_grad_reopen(g.e), ZO_ERR_INVALID_USAGE);
    CHECK_HAS(zo_last_error(), "zoffload.early_adam is true");
    CHECK_ST(zo_engine_grad_reopen(NULL), ZO_ERR_INVALID_ARG);
    zo_step_info inf;
    CHECK_OK(zo_engine_step(g.e, &inf));
    free(h);
  }
  eng_close(&g, dev);
  zo_device_destroy(dev);
}

int main(int argc, char **argv) {
  int rc = zo_test_backend_arg("test_grad_reopen", "[SCRATCH_BASE]", &argc, &argv);
  if (rc) return rc;
  rc = zo_test_rank_scratch_dir(argc > 1 ? argv[1] : NULL, "zo-test-reopen", &g_comm, g_dir,
                                sizeof g_dir);
  if (rc) return rc;
  R = zo_comm_rank(g_comm), W = zo_comm_size(g_comm);
  zo_config_t c;
  char label[160];
  if (W == 1) {
    static const zo_offload_device tiers[] = {ZO_OFFLOAD_NONE, ZO_OFFLOAD_CPU, ZO_OFFLOAD_NVME};
    static const char *names[] = {"none", "cpu", "nvme"};
    for (int t = 0; t < 3; t++)
      for (int gas = 1; gas <= 2; gas++)
        for (int clip = 0; clip < 2; clip++) {
          base_config(&c, tiers[t], gas);
          c.gradient_clipping = clip ? 1.0 : 0;
          c.zero.overlap_comm = clip; /* one staging bucket, and two */
          snprintf(label, sizeof label, "%s, gas %d, fp32, 3 passes, clipping %s", names[t], gas,
                   clip ? "on" : "off");
          run_case(label, &c, 3, ZO_DTYPE_F32);
        }
    for (int t = 0; t < 3; t++) {
      base_config(&c, tiers[t], 1);
      c.bf16.enabled = 1;
      snprintf(label, sizeof label, "%s, gas 1, bf16, 2 passes", names[t]);
      run_case(label, &c, 2, ZO_DTYPE_BF16);
    }
    base_config(&c, ZO_OFFLOAD_NVME, 1);
    c.zoffload.optimizer_max_in_cpu = 4000; /* the last sub-groups resident in host memory */
    run_case("nvme, some sub-groups resident, 3 passes", &c, 3, ZO_DTYPE_F32);
    for (int bc = 2; bc <= 3;
         bc++) { /* fewer slots than sub-groups: gradients read with the state */
      base_config(&c, ZO_OFFLOAD_NVME, 1);
      c.zero.sub_group_size = 1100;
      c.zero.offload_optimizer.buffer_count = bc;
      snprintf(label, sizeof label, "nvme, %d slots for 10 sub-groups, 3 passes", bc);
      run_case(label, &c, 3, ZO_DTYPE_F32);
    }
    for (int t = 1; t < 3;
         t++) { /* the delayed update: the last step's Adam runs during these passes */
      base_config(&c, tiers[t], 1);
      c.zoffload.delayed_param_update = 1;
      c.zero.sub_group_size = 1100;
      c.zero.offload_optimizer.buffer_count = 2;
      snprintf(label, sizeof label, "%s, delayed parameter update, 3 passes", names[t]);
      run_case(label, &c, 3, ZO_DTYPE_F32);
    }
    test_early_adam_refused();
  } else {
    for (int stage = 1; stage <= 3; stage++) {
      base_config(&c, ZO_OFFLOAD_CPU, 1);
      c.zero.stage = stage;
      c.gradient_clipping = stage == 2 ? 1.0 : 0;
      c.zero.overlap_comm = stage != 1;
      if (stage == 3) c.zero.offload_param.device = ZO_OFFLOAD_CPU;
      snprintf(label, sizeof label, "stage %d, cpu, fp32, 3 passes", stage);
      run_case(label, &c, 3, ZO_DTYPE_F32);
      base_config(&c, ZO_OFFLOAD_NVME, 2);
      c.zero.stage = stage;
      if (stage == 3) c.zero.offload_param.device = ZO_OFFLOAD_CPU;
      snprintf(label, sizeof label, "stage %d, nvme, gas 2, fp32, 3 passes", stage);
      run_case(label, &c, 3, ZO_DTYPE_F32);
    }
  }
  CHECK_OK(zo_comm_barrier(g_comm));
  char ref[4200];
  snprintf(ref, sizeof ref, "%s/ref", g_dir);
  rmdir(ref);
  rmdir(g_dir);
  zo_comm_destroy(g_comm);
  return zo_test_finish("test_grad_reopen");
}
