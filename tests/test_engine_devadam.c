/*
 * test_engine_devadam.c - the engine's device Adam path (offload_optimizer
 * "none" on a CUDA device) on the stand-in runtime (fake_cudart.c, which runs
 * no kernel here: test_devadam_emu emulates them): create accepts it where the
 * kernels are built, with gradient accumulation and several ranks too, and refuses what device
 * Adam cannot do with exactly zo_engine_check_device()'s message (what
 * zo-train --dry-run prints); the plan lists the norm partials, their host
 * copy and the fp32 accumulation regions, and finalize allocates exactly the plan; the plan an engine on a
 * host device makes for ZO_DEVICE_CUDA (zo-train --dry-run --device cuda without a GPU) is what finalize
 * allocates on the GPU, entry by entry (device Adam gas 1 and 2, CPU Adam); master weights go to device
 * memory and back through host copies (load_param, get_master, a checkpoint
 * save and load); the first kernel launch (the accumulation) fails with the
 * stand-in's error as ZO_ERR_CUDA. The update itself is checked on a GPU by
 * test_adam_device, and on the stand-in with emulated kernels by test_devadam_emu. Exit 77 when the stand-in is not loaded (no CUDA device)
 * or the kernels are not built.
 */
#include <stdio.h>
#include <stdlib.h>

#include "adam_device.h"
#include "zo_test.h"
#include "zoffload/budget.h"
#include "zoffload/checkpoint.h"
#include "zoffload/engine.h"
#include "zoffload/plan.h"

static void config(zo_config_t *c, int gas) {
  zo_config_defaults(c);
  c->train_micro_batch_size_per_gpu = 1;
  c->gradient_accumulation_steps = gas;
  c->train_batch_size = gas;
  c->bf16.enabled = 1;
  c->zero.stage = 0;
  c->zero.offload_optimizer.device = ZO_OFFLOAD_NONE;
  c->zoffload.adam_threads = 1;
}

/* Bytes (count x bytes) of the ledger's buffers on tier @t (@pinned_only: only pinned ones). */
static size_t zo_plan_sum_bytes_for_test(const zo_plan_buf *b, int n, zo_tier t, int pinned_only) {
  size_t s = 0;
  for (int i = 0; i < n; i++)
    if (b[i].tier == t && (!pinned_only || b[i].pinned)) s += b[i].bytes * (size_t)b[i].count;
  return s;
}

static int plan_has(const zo_plan *p, zo_tier t, const char *purpose) {
  for (int i = 0; i < p->n_bufs; i++)
    if (p->buf[i].tier == t && !strcmp(p->buf[i].purpose, purpose)) return 1;
  return 0;
}

/* The ledger @led[@n] of a finalize equals @p entry by entry (tier, purpose, bytes, count, pinned); @what names the
 * case. Returns the mismatches. */
static int ledger_is_plan(const char *what, const zo_plan_buf *led, int n, const zo_plan *p) {
  int bad = 0;
  if (n != p->n_bufs)
    bad += FAIL_AT("%s: %d buffers allocated, %d planned", what, n, p->n_bufs) ? 0 : 1;
  for (int i = 0; i < n && i < p->n_bufs; i++)
    if (led[i].tier != p->buf[i].tier || strcmp(led[i].purpose, p->buf[i].purpose) ||
        led[i].bytes != p->buf[i].bytes || led[i].count != p->buf[i].count ||
        led[i].pinned != p->buf[i].pinned)
      bad +=
          FAIL_AT(
              "%s: buffer %d: allocated %s %s %d x %zu (pinned %d), planned %s %s %d x %zu (pinned %d)",
              what, i, zo_tier_name(led[i].tier), led[i].purpose, led[i].count, led[i].bytes,
              led[i].pinned, zo_tier_name(p->buf[i].tier), p->buf[i].purpose, p->buf[i].count,
              p->buf[i].bytes, p->buf[i].pinned)
              ? 0
              : 1;
  for (int i = n; i < p->n_bufs; i++)
    bad += FAIL_AT("%s: planned but not allocated: %s %s %zu", what, zo_tier_name(p->buf[i].tier),
                   p->buf[i].purpose, p->buf[i].bytes)
               ? 0
               : 1;
  for (int i = p->n_bufs; i < n; i++)
    bad += FAIL_AT("%s: allocated but not planned: %s %s %zu", what, zo_tier_name(led[i].tier),
                   led[i].purpose, led[i].bytes)
               ? 0
               : 1;
  return bad;
}

/*
 * What zo-train --dry-run --device cuda does on a machine without a GPU: an engine on a host device plans for
 * ZO_DEVICE_CUDA. That plan must be the buffers the same config's finalize allocates on the CUDA device (@gpu, the
 * stand-in), entry by entry; the host device's own plan (ZO_DEVICE_AUTO) is not (device Adam's norm_host, the
 * grad_staging ring). @c: the config; tensors of NA and NB elements.
 */
static void dry_run_plan_is_gpu_finalize(const char *what, const zo_config_t *c, zo_device_t *gpu) {
  enum { NA = 1000, NB = 3 };
  zo_device_t *host = NULL;
  zo_engine_t *eh = NULL, *eg = NULL;
  zo_plan *ph = NULL, *pown = NULL;
  zo_param_t *p;
  if (!CHECK_OK(zo_device_create(ZO_DEVICE_HOST, 0, SIZE_MAX, &host))) return;
  if (!CHECK_OK(zo_engine_create(c, host, NULL, &eh)) ||
      !CHECK_OK(zo_engine_register_param(eh, "a", NA, &p)) ||
      !CHECK_OK(zo_engine_register_param(eh, "b", NB, &p)) ||
      !CHECK_OK(zo_engine_plan(eh, ZO_DEVICE_CUDA, &ph)) ||
      !CHECK_OK(zo_engine_plan(eh, ZO_DEVICE_AUTO, &pown)))
    goto out;
  /* the dry run's budget (zo_engine_budget_for) sums that plan */
  zo_budget bud;
  if (CHECK_OK(zo_engine_budget_for(eh, ZO_DEVICE_CUDA, NULL, &bud)))
    for (int i = 0; i < bud.n_lines; i++) {
      const zo_budget_line *l = &bud.line[i];
      if (l->tier == ZO_TIER_DEVICE) CHECK_EQ(l->engine_bytes, ph->device_need_bytes);
      if (l->tier == ZO_TIER_HOST) CHECK_EQ(l->engine_bytes, ph->host_bytes);
      if (l->tier == ZO_TIER_PINNED) CHECK_EQ(l->engine_bytes, ph->pinned_bytes);
    }
  if (!CHECK_OK(zo_engine_create(c, gpu, NULL, &eg)) ||
      !CHECK_OK(zo_engine_register_param(eg, "a", NA, &p)) ||
      !CHECK_OK(zo_engine_register_param(eg, "b", NB, &p)) || !CHECK_OK(zo_engine_finalize(eg)))
    goto out;
  const zo_plan_buf *led;
  const int n = zo_engine_allocations(eg, &led);
  const int bad = ledger_is_plan(what, led, n, ph);
  CHECK_EQ(ph->host_bytes, zo_plan_sum_bytes_for_test(led, n, ZO_TIER_HOST, 0));
  CHECK_EQ(ph->pinned_bytes, zo_plan_sum_bytes_for_test(led, n, ZO_TIER_HOST, 1));
  CHECK_EQ(ph->device_bytes, zo_plan_sum_bytes_for_test(led, n, ZO_TIER_DEVICE, 0));
  printf(
      "test_engine_devadam: %s: the host device's plan for cuda = the GPU's finalize, %d buffers%s; host %zu "
      "(pinned %zu) bytes vs the host device's own plan: host %zu (pinned %zu)\n",
      what, n, bad ? " (NOT)" : "", ph->host_bytes, ph->pinned_bytes, pown->host_bytes,
      pown->pinned_bytes);
out:
  zo_plan_free(ph);
  zo_plan_free(pown);
  zo_engine_destroy(eh);
  zo_engine_destroy(eg);
  zo_device_destroy(host);
}

int main(int argc, char **argv) {
  const char *dir = argc > 1 ? argv[1] : "/tmp";
  if (zo_device_cuda_count() < 1) {
    printf("test_engine_devadam: SKIP: no CUDA device (run under the stand-in runtime)\n");
    return ZO_TEST_SKIP;
  }
  zo_device_t *dev;
  if (!CHECK_OK(zo_device_create(ZO_DEVICE_CUDA, 0, SIZE_MAX, &dev)))
    return zo_test_finish("test_engine_devadam");
  if (!zo_adam_device_available(dev, NULL, 0)) {
    printf("test_engine_devadam: SKIP: this build has no device Adam kernel\n");
    zo_device_destroy(dev);
    return ZO_TEST_SKIP;
  }
  zo_config_t c;
  zo_engine_t *e = NULL;

  /* 1. refused: create and the dry run's check say the same (parameter offload); gradient accumulation and
   * several ranks are accepted (test_devadam_emu, test_devadam_emu_np2) */
  config(&c, 1);
  c.zero.stage = 3;
  c.zero.offload_param.device = ZO_OFFLOAD_CPU;
  char want[1024];
  CHECK_ST(zo_engine_check_device(&c, ZO_DEVICE_CUDA, 1), ZO_ERR_UNSUPPORTED);
  snprintf(want, sizeof want, "%s", zo_last_error());
  CHECK_ST(zo_engine_create(&c, dev, NULL, &e), ZO_ERR_UNSUPPORTED);
  if (strcmp(want, zo_last_error()))
    FAIL_AT("create and check_device differ:\n  create: %s\n  check:  %s", zo_last_error(), want);
  CHECK(strstr(want, "needs offload_param.device \"none\"") != NULL);
  CHECK(e == NULL);
  CHECK_ST(zo_engine_check_device(&c, ZO_DEVICE_HOST, 1), ZO_OK); /* CPU Adam on a host device */
  config(&c, 1);
  CHECK_OK(zo_engine_check_device(&c, ZO_DEVICE_CUDA, 2)); /* several ranks: test_devadam_emu_np2 */
  /* stage 3, parameters "in device memory" on several ranks: the host device partitions them in host memory, a GPU
   * in device memory (engine.c; test_engine_dp runs it), so neither create nor a dry run refuses it, whatever the
   * optimizer tier */
  config(&c, 1);
  c.zero.stage = 3;
  c.zero.offload_param.device = ZO_OFFLOAD_NONE;
  CHECK_OK(zo_engine_check_device(&c, ZO_DEVICE_CUDA, 1));
  CHECK_OK(zo_engine_check_device(&c, ZO_DEVICE_HOST, 2));
  for (int t = 0; t < 3; t++) {
    c.zero.offload_optimizer.device = t == 2 ? ZO_OFFLOAD_NVME
                                      : t    ? ZO_OFFLOAD_CPU
                                             : ZO_OFFLOAD_NONE;
    CHECK_OK(zo_engine_check_device(&c, ZO_DEVICE_CUDA, 2));
  }
  config(&c, 2);
  CHECK_OK(zo_engine_check_device(&c, ZO_DEVICE_CUDA, 1));
  c.grad_accum_dtype = ZO_DTYPE_BF16; /* gas 2 summed in bf16 on the device */
  CHECK_OK(zo_engine_check_device(&c, ZO_DEVICE_CUDA, 1));

  /* 2. accepted, with gradient accumulation (gas 2): plan, finalize, state through host copies */
  config(&c, 2);
  CHECK_OK(zo_engine_check_device(&c, ZO_DEVICE_CUDA, 1));
  if (!CHECK_OK(zo_engine_create(&c, dev, NULL, &e))) goto out;
  enum { NA = 1000, NB = 3 };
  zo_param_t *pa, *pb;
  CHECK_OK(zo_engine_register_param(e, "a", NA, &pa));
  CHECK_OK(zo_engine_register_param(e, "b", NB, &pb));
  zo_plan *plan = NULL;
  if (!CHECK_OK(zo_engine_plan(e, ZO_DEVICE_AUTO, &plan))) goto out;
  CHECK(plan_has(plan, ZO_TIER_HOST, "device_adam.norm_host"));
  CHECK(plan->dev_norm_off != SIZE_MAX && plan->dev_norm_off < plan->device_bytes);
  CHECK(!plan_has(plan, ZO_TIER_HOST,
                  "grad_staging")); /* accumulation on the device: no host staging ring */
  /* the device accumulation buffer: each tensor's gradient region in fp32 (not the bf16 hand-over dtype) */
  CHECK_EQ(plan->tensor[1].dev_off[0] - plan->tensor[0].dev_off[4], (NA * 4 + 255) / 256 * 256);
  CHECK_EQ(plan->dev_norm_off - plan->tensor[1].dev_off[4], 256); /* NB fp32 rounded up */
  if (!CHECK_OK(zo_engine_finalize(e))) goto out_plan;
  const zo_plan_buf *led;
  const int n = zo_engine_allocations(e, &led);
  CHECK_EQ(n, plan->n_bufs);
  for (int i = 0; i < n && i < plan->n_bufs; i++) {
    CHECK_EQ(led[i].tier, plan->buf[i].tier);
    CHECK_EQ(led[i].bytes, plan->buf[i].bytes);
    CHECK_EQ(led[i].count, plan->buf[i].count);
    CHECK(!strcmp(led[i].purpose, plan->buf[i].purpose));
  }
  float *va = malloc(NA * 4), *vb = malloc(NB * 4), *got = calloc(NA, 4);
  for (int i = 0; i < NA; i++) va[i] = 0.001f * (float)i - 0.3f;
  for (int i = 0; i < NB; i++) vb[i] = 1.5f + (float)i;
  CHECK_OK(zo_engine_load_param(e, pa, va));
  CHECK_OK(zo_engine_load_param(e, pb, vb));
  CHECK_OK(zo_engine_get_master(e, pa, got, NULL, NULL));
  CHECK(!memcmp(got, va, NA * 4));
  /* a checkpoint: saved through host copies, loaded back over changed weights */
  char saved[4096];
  if (CHECK_OK(zo_engine_save(e, dir, NULL, saved, sizeof saved))) {
    for (int i = 0; i < NA; i++) got[i] = 7.0f;
    CHECK_OK(zo_engine_load_param(e, pa, got));
    CHECK_OK(zo_engine_load(e, saved, NULL));
    memset(got, 0, NA * 4);
    CHECK_OK(zo_engine_get_master(e, pa, got, NULL, NULL));
    CHECK(!memcmp(got, va, NA * 4));
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", saved);
    CHECK_EQ(system(cmd), 0);
  }
  /* the gradient norm's kernel is queued as the gradient lands: without an emulation (test_devadam_emu has them)
   * the stand-in runs no kernel, so ZO_ERR_CUDA. The bf16 gradient is first cast into the fp32 accumulation
   * buffer: the accumulation kernel's launch fails first */
  void *g;
  CHECK_OK(zo_device_malloc(dev, NA * 2, &g));
  CHECK_OK(zo_memcpy(dev, g, va, NA * 2, ZO_COPY_H2D)); /* any bits: nothing reads them */
  CHECK_ST(zo_engine_grad_ready(e, pa, g, ZO_DTYPE_BF16), ZO_ERR_CUDA);
  CHECK(strstr(zo_last_error(), "zo_grad_acc_device") != NULL);
  printf("test_engine_devadam: the stand-in's launch error: %s\n", zo_last_error());
  zo_device_free(dev, g);
  free(va), free(vb), free(got);

  /* 3. the dry run's plan (zo-train --dry-run --device cuda without a GPU: a host device planning for cuda) is what
   * finalize allocates on the GPU: device Adam with accumulation, device Adam without, CPU Adam with accumulation */
  config(&c, 2);
  dry_run_plan_is_gpu_finalize("device Adam, gas 2", &c, dev);
  config(&c, 1);
  dry_run_plan_is_gpu_finalize("device Adam, gas 1", &c, dev);
  config(&c, 2);
  c.zero.stage = 1;
  c.zero.offload_optimizer.device = ZO_OFFLOAD_CPU;
  dry_run_plan_is_gpu_finalize("offload_optimizer cpu, gas 2", &c, dev);
  /* a kind the plan does not know */
  {
    zo_plan *bad = NULL;
    CHECK_ST(zo_engine_plan(e, (zo_device_kind)7, &bad), ZO_ERR_INVALID_ARG);
    CHECK(bad == NULL);
  }
out_plan:
  zo_plan_free(plan);
out:
  zo_engine_destroy(e);
  zo_device_destroy(dev);
  return zo_test_finish("test_engine_devadam");
}
