/*
 * test_grad_nvme.c - gradients on NVMe beside the optimizer state (offload_optimizer "nvme": grad.swp, no host
 * gradient shard): an nvme-optimizer engine and a cpu-optimizer engine with the same config, weights and
 * gradients give master weights, norms and loss scales equal BIT FOR BIT over several steps, with
 * gradient_accumulation_steps 1 and 4 (3 zo_engine_grad_accumulate + 1 zo_engine_grad_ready: read-add-write in
 * the file), clipping on and off (Adam at the step, or as each sub-group's gradients are on disk), fp16 loss
 * scaling, bf16 hand-overs with parameters on nvme (the gpt-2b-nvme preset's setting), and a tensor larger than
 * one gradient chunk (several writes, the norm summed chunk by chunk). The nvme engine's ledger has grad.swp
 * and no grad_host. Run under `mpirun -np 2`: the reduce-scatter's block goes to the file (stages 2 and 3).
 * usage: test_grad_nvme [--backend host|cuda] [SCRATCH_BASE]   Exit 0 pass, 1 fail, 77 skip. ctest
 * test_grad_nvme_fakecuda (and _np2_fakecuda) runs the cuda backend against the stand-in runtime.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "zo_test.h"
#include "zoffload/config.h"
#include "zoffload/engine.h"
#include "engine_internal.h" /* eng_host_func_grad_bytes */
#include "zoffload/plan.h"
#include "zo_test_backend.h"

enum { NP = 4, STEPS = 4 };
/* 150001: three gradient chunks of 65536 elements (reduce_bucket_size below), the last one short */
static const size_t k_sizes[NP] = {1000, 150001, 37, 4097};
static zo_comm_t *g_comm;
static int R, W;
static char g_dir[4000];
/* run_case: the optimizer state stays in its slots across steps (sub-groups <= buffer_count): from step 2 on a
 * step reads nothing from NVMe (its gradients stay in the slots, not grad.swp) */
static int g_resident;

#include "grad_harness.h"

static void base_config(zo_config_t *c, int gas) {
  grad_adamw_config(c, gas);
  c->zero.sub_group_size = 20000;
  c->zero.reduce_bucket_size = 65536;
  c->zero.offload_optimizer.buffer_count = 2;
}

/* One step: @gas micro-batches per tensor (the last with grad_ready), each the gradient times the loss scale in
 * @dt, through the tensor's one device buffer (reused after the fence). Tensors in reverse order (backward). */
static int one_step(zo_device_t *dev, eng *g, int s, int gas, zo_dtype dt, zo_step_info *inf) {
  const double ls = zo_engine_loss_scale(g->e);
  for (int i = NP - 1; i >= 0; i--)
    for (int mb = 0; mb < gas; mb++) {
      const size_t n = k_sizes[i];
      void *h = malloc(n * 4);
      float *f = malloc(n * 4);
      for (size_t j = 0; j < n; j++)
        f[j] = grad_of(R, s, mb, i, j) * (float)ls * (s == 3 ? 4.f : 1.f);
      cast_to(h, dt, f, n);
      free(f);
      int bad = !CHECK_OK(zo_engine_grad_fence(g->e, NULL)) ||
                !CHECK_OK(zo_memcpy(dev, g->dbuf[i], h, n * zo_dtype_size(dt), ZO_COPY_H2D));
      free(h);
      if (bad) return 1;
      zo_status st = mb + 1 < gas ? zo_engine_grad_accumulate(g->e, g->ps[i], g->dbuf[i], dt)
                                  : zo_engine_grad_ready(g->e, g->ps[i], g->dbuf[i], dt);
      if (!CHECK_OK(st)) return 1;
    }
  return CHECK_OK(zo_engine_step(g->e, inf)) ? 0 : 1;
}

/* The nvme engine holds its gradients in grad.swp, not in host memory. */
static void check_ledger(const eng *g, const char *label) {
  const zo_plan_buf *led = NULL;
  const int n = zo_engine_allocations(g->e, &led);
  int file = 0, host = 0;
  for (int i = 0; i < n; i++) {
    if (!strcmp(led[i].purpose, "grad.swp") && led[i].tier == ZO_TIER_NVME) file = 1;
    if (!strcmp(led[i].purpose, "grad_host")) host = 1;
  }
  if (!CHECK(file && !host))
    fprintf(stderr, "  %s: grad.swp %s, grad_host %s\n", label, file ? "yes" : "no",
            host ? "yes" : "no");
}

static void run_case(const char *label, const zo_config_t *c, int gas, zo_dtype dt) {
  zo_device_t *dev = NULL;
  eng a, b;
  if (!CHECK_OK(zo_test_device_create(0, &dev))) return;
  zo_config_t ca = *c, cb = *c;
  ca.zero.offload_optimizer.device = ZO_OFFLOAD_NVME;
  cb.zero.offload_optimizer.device = ZO_OFFLOAD_CPU;
  snprintf(ca.zero.offload_optimizer.nvme_path, sizeof ca.zero.offload_optimizer.nvme_path, "%s/a",
           g_dir);
  snprintf(cb.zero.offload_optimizer.nvme_path, sizeof cb.zero.offload_optimizer.nvme_path, "%s/b",
           g_dir);
  memcpy(ca.zero.offload_param.nvme_path, ca.zero.offload_optimizer.nvme_path,
         sizeof ca.zero.offload_param.nvme_path);
  memcpy(cb.zero.offload_param.nvme_path, cb.zero.offload_optimizer.nvme_path,
         sizeof cb.zero.offload_param.nvme_path);
  mkdir(ca.zero.offload_optimizer.nvme_path, 0700);
  mkdir(cb.zero.offload_optimizer.nvme_path, 0700);
  int bad = eng_open(&a, &ca, dev, NULL) || eng_open(&b, &cb, dev, NULL);
  if (!bad) check_ledger(&a, label);
  for (int s = 1; s <= STEPS && !bad; s++) {
    CHECK(zo_engine_loss_scale(a.e) == zo_engine_loss_scale(b.e));
    zo_step_info ia, ib;
    zo_engine_mem m0, m1;
    bad = !CHECK_OK(zo_engine_mem_info(a.e, &m0)) || one_step(dev, &a, s, gas, dt, &ia) ||
          !CHECK_OK(zo_engine_mem_info(a.e, &m1)) || one_step(dev, &b, s, gas, dt, &ib);
    if (bad) break;
    if (g_resident && s >= 2 && !CHECK_EQ(m1.nvme_read_bytes - m0.nvme_read_bytes, 0))
      fprintf(
          stderr,
          "  %s step %d: read %llu B from NVMe with the state resident (gradients through grad.swp)\n",
          label, s, (unsigned long long)(m1.nvme_read_bytes - m0.nvme_read_bytes));
    if (!CHECK(ia.grad_norm == ib.grad_norm))
      fprintf(stderr, "  %s step %d: norm %.17g (nvme) vs %.17g (cpu)\n", label, s, ia.grad_norm,
              ib.grad_norm);
    CHECK_EQ(ia.skipped, ib.skipped);
    CHECK(ia.loss_scale == ib.loss_scale);
  }
  if (!bad) bad = eng_masters_differ(label, &a, &b, R);
  if (!bad)
    printf(
        "ok: %s (rank %d of %d): nvme == cpu master weights and norms over %d steps, bit for bit\n",
        label, R, W, STEPS);
  eng_close(&a, dev);
  eng_close(&b, dev);
  zo_device_destroy(dev);
  char d[4200];
  snprintf(d, sizeof d, "%s/a", g_dir), rmdir(d);
  snprintf(d, sizeof d, "%s/b", g_dir), rmdir(d);
}

int main(int argc, char **argv) {
  int rc = zo_test_backend_arg("test_grad_nvme", "[SCRATCH_BASE]", &argc, &argv);
  if (rc) return rc;
  rc = zo_test_rank_scratch_dir(argc > 1 ? argv[1] : NULL, "zo-test-gradnv", &g_comm, g_dir,
                                sizeof g_dir);
  if (rc) return rc;
  R = zo_comm_rank(g_comm), W = zo_comm_size(g_comm);
  char label[160];
  zo_config_t c;
  const int stages[2] = {2, 3};
  for (int si = 0; si < (W > 1 ? 2 : 1); si++)
    for (int gas = 1; gas <= 4; gas += 3)
      for (int clip = 0; clip < 2; clip++) {
        base_config(&c, gas);
        c.zero.stage = stages[si];
        if (stages[si] == 3)
          c.zero.offload_param.device = ZO_OFFLOAD_CPU; /* several ranks: stage 3 needs it */
        c.gradient_clipping = clip ? 1.0 : 0;
        c.zero.overlap_comm = clip;
        snprintf(label, sizeof label, "stage %d, fp32, gas %d, clipping %s", stages[si], gas,
                 clip ? "on" : "off");
        run_case(label, &c, gas, ZO_DTYPE_F32);
      }
  for (int gas = 1; gas <= 4; gas += 3) {
    base_config(&c, gas);
    c.fp16.enabled = 1, c.fp16.initial_scale_power = 4, c.fp16.loss_scale_window = 2;
    snprintf(label, sizeof label, "fp16 loss scaling, gas %d", gas);
    run_case(label, &c, gas, gas > 1 ? ZO_DTYPE_F32 : ZO_DTYPE_F16);
  }
  /* the gpt-2b-nvme preset's setting: bf16, gas 1, clipping, parameters on nvme at stage 3 */
  if (W == 1) {
    base_config(&c, 1);
    c.bf16.enabled = 1;
    c.gradient_clipping = 1.0;
    c.zero.stage = 3;
    c.zero.offload_param.device = ZO_OFFLOAD_NVME;
    run_case("stage 3, bf16, gas 1, clipping on, parameters on nvme", &c, 1, ZO_DTYPE_BF16);
    base_config(&c, 4);
    c.bf16.enabled = 1;
    run_case("stage 2, bf16 micro-batches into fp32, gas 4, clipping off", &c, 4, ZO_DTYPE_BF16);
    /* every sub-group's state fits the slots: the gradients stay there, grad.swp is not read */
    for (int gas = 1; gas <= 4; gas += 3) {
      base_config(&c, gas);
      c.bf16.enabled = 1;
      c.gradient_clipping = gas > 1 ? 1.0 : 0;
      c.zero.sub_group_size = 1000000;
      g_resident = 1;
      snprintf(label, sizeof label, "stage 2, bf16, gas %d, state resident in the slots", gas);
      run_case(label, &c, gas, ZO_DTYPE_BF16);
      g_resident = 0;
    }
  }
  CHECK_OK(zo_comm_barrier(g_comm));
  rmdir(g_dir);
  zo_comm_destroy(g_comm);
  /* no add or norm ran inside a copy-stream host function (they run on the Adam pool) */
  if (!CHECK_EQ(atomic_load(&eng_host_func_grad_bytes), 0))
    fprintf(stderr, "  gradient bytes added or normed inside host functions: %llu\n",
            (unsigned long long)atomic_load(&eng_host_func_grad_bytes));
  return zo_test_finish("test_grad_nvme");
}
