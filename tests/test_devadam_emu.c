/*
 * test_devadam_emu.c - the engine's whole device-Adam path (offload_optimizer "none" on a CUDA device) run on
 * the stand-in runtime, its two kernels emulated on the host from their contracts (devadam_emu.h), against
 * the same engine with offload_optimizer "cpu" on the host device (CPU Adam): several steps of four tensors
 * (one larger than the norm kernel's 65536 threads, so the grid-stride loop wraps), clipping on, bf16 and
 * fp32, with one micro-batch per step and with gradient accumulation (gas 4, each micro-batch through ONE
 * device buffer per tensor that is poisoned with NaN right after zo_engine_grad_fence()). Every step's
 * gradient norm, and after every step the master weights and the working weights, must be equal BIT FOR BIT:
 * both engines run base/adam_elem.h's element function with the same constants, and the gradients are
 * multiples of 1/64 (grad_harness.h), so every squared-norm sum is exact in double in any order, and every
 * fp32 accumulation is exact. Then a checkpoint of the device engine, loaded into a fresh one, must give the
 * same next step as the engine that saved it. Exit 77 when the stand-in (or its emulation hook) is not
 * loaded or the library has no device Adam kernel.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zo_test.h"
#include "zoffload/checkpoint.h"
#include "zoffload/config.h"
#include "zoffload/engine.h"

enum { NP = 4, STEPS = 4, MAXMB = 4 };
static const size_t k_sizes[NP] = {1000, 3, 70001, 4097};
static zo_comm_t *g_comm;
static const char *g_dir = "/tmp";

#include "devadam_emu.h"
#include "grad_harness.h"

static void config(zo_config_t *c, zo_offload_device tier, zo_dtype wd, int gas) {
  zo_config_defaults(c);
  c->train_micro_batch_size_per_gpu = 1;
  c->gradient_accumulation_steps = gas;
  c->train_batch_size = gas;
  c->bf16.enabled = wd == ZO_DTYPE_BF16;
  c->optimizer.type = ZO_OPT_ADAMW;
  c->optimizer.adam_w_mode = 1;
  c->optimizer.lr = 1e-2;
  c->optimizer.weight_decay = 0.1;
  c->gradient_clipping = 1.0; /* the norms here are ~10-300: every step clips */
  c->zero.stage = 2;
  c->zero.offload_optimizer.device = tier;
  c->zoffload.adam_threads = 1;
}

/* Micro-batch @mb's gradients of step @s in @dt through @g's device buffers: accumulated (mb < gas - 1) or
 * handed over, each buffer poisoned with NaN once the fence says it is free. */
static int feed(zo_device_t *dev, eng *g, int s, int gas, zo_dtype dt) {
  const size_t dsz = zo_dtype_size(dt);
  for (int mb = 0; mb < gas; mb++) {
    for (int i = 0; i < NP; i++) {
      float *f = malloc(k_sizes[i] * 4);
      void *h = malloc(k_sizes[i] * dsz), *nan = malloc(k_sizes[i] * dsz);
      for (size_t j = 0; j < k_sizes[i]; j++) f[j] = grad_of(0, s, mb, i, j);
      cast_to(h, dt, f, k_sizes[i]);
      memset(nan, 0xff, k_sizes[i] * dsz);
      int bad = !CHECK_OK(zo_memcpy(dev, g->dbuf[i], h, k_sizes[i] * dsz, ZO_COPY_H2D));
      if (!bad) {
        zo_status st = mb < gas - 1 ? zo_engine_grad_accumulate(g->e, g->ps[i], g->dbuf[i], dt)
                                    : zo_engine_grad_ready(g->e, g->ps[i], g->dbuf[i], dt);
        bad = !CHECK_OK(st);
        if (bad) printf("  %s\n", zo_last_error());
      }
      bad = bad || !CHECK_OK(zo_engine_grad_fence(g->e, NULL));
      bad = bad || !CHECK_OK(zo_memcpy(dev, g->dbuf[i], nan, k_sizes[i] * dsz, ZO_COPY_H2D));
      free(f), free(h), free(nan);
      if (bad) return 1;
    }
  }
  return 0;
}

/* Tensor @i's master weights and working weights (as bytes of the working dtype) of @g into @m and @w. */
static int snapshot(zo_device_t *dev, eng *g, int i, float *m, void *w) {
  if (!CHECK_OK(zo_engine_synchronize(g->e))) return 1;
  if (!CHECK_OK(zo_engine_get_master(g->e, g->ps[i], m, NULL, NULL))) return 1;
  const void *dw;
  zo_dtype dt;
  if (!CHECK_OK(zo_engine_fetch(g->e, g->ps[i], &dw, &dt))) return 1;
  int bad = !CHECK_OK(zo_memcpy(dev, w, dw, k_sizes[i] * zo_dtype_size(dt), ZO_COPY_D2H));
  return !CHECK_OK(zo_engine_release(g->e, g->ps[i])) || bad;
}

/* @a (host device, CPU Adam) and @b (stand-in CUDA, device Adam): every tensor's master and working weights
 * equal bit for bit. */
static int same_weights(const char *label, int s, zo_device_t *hdev, eng *a, zo_device_t *cdev, eng *b) {
  int bad = 0;
  for (int i = 0; i < NP && !bad; i++) {
    const size_t n = k_sizes[i];
    float *ma = malloc(n * 4), *mb = malloc(n * 4);
    void *wa = malloc(n * 4), *wb = malloc(n * 4);
    bad = snapshot(hdev, a, i, ma, wa) || snapshot(cdev, b, i, mb, wb);
    const size_t wsz = zo_dtype_size(zo_engine_working_dtype(b->e));
    if (!bad && memcmp(ma, mb, n * 4)) {
      size_t j = 0;
      while (j < n && !memcmp(&ma[j], &mb[j], 4)) j++;
      bad = FAIL_AT("%s step %d: master of t%d differs first at [%zu]: cpu %.9g device %.9g", label, s, i, j,
                    (double)ma[j], (double)mb[j]);
    }
    if (!bad && memcmp(wa, wb, n * wsz)) bad = FAIL_AT("%s step %d: working weights of t%d differ", label, s, i);
    free(ma), free(mb), free(wa), free(wb);
  }
  return bad;
}

/* STEPS steps of both engines with @gas micro-batches of @dt gradients; then the checkpoint round trip. */
static void run_case(const char *label, zo_device_t *hdev, zo_device_t *cdev, zo_dtype wd, int gas) {
  zo_config_t ca, cb;
  config(&ca, ZO_OFFLOAD_CPU, wd, gas);
  config(&cb, ZO_OFFLOAD_NONE, wd, gas);
  eng a, b, r = {0};
  const int failures0 = zo_test_failures;
  char saved[4096] = "";
  if (eng_open(&a, &ca, hdev, NULL)) goto out_a;
  if (eng_open(&b, &cb, cdev, NULL)) goto out_b;
  double first = 0, last = 0;
  const unsigned long adam0 = devadam_emu_adam_runs, norm0 = devadam_emu_norm_runs, acc0 = devadam_emu_acc_runs;
  for (int s = 0; s < STEPS; s++) {
    zo_step_info ia, ib;
    if (feed(hdev, &a, s, gas, wd) || feed(cdev, &b, s, gas, wd)) goto out_b;
    if (!CHECK_OK(zo_engine_step(a.e, &ia))) goto out_b;
    if (!CHECK_OK(zo_engine_step(b.e, &ib))) {
      printf("  %s\n", zo_last_error());
      goto out_b;
    }
    if (memcmp(&ia.grad_norm, &ib.grad_norm, sizeof(double)))
      FAIL_AT("%s step %d: grad norm cpu %.17g device %.17g", label, s + 1, ia.grad_norm, ib.grad_norm);
    if (s == 0) first = ib.grad_norm;
    last = ib.grad_norm;
    if (same_weights(label, s + 1, hdev, &a, cdev, &b)) goto out_b;
    if (s == STEPS - 2 && !CHECK_OK(zo_engine_save(b.e, g_dir, NULL, saved, sizeof saved))) goto out_b;
  }
  /* every step: one update kernel per tensor, one norm kernel per tensor's hand-over (gas > 1: the boundary's) */
  CHECK_EQ(devadam_emu_adam_runs - adam0, STEPS * NP);
  CHECK_EQ(devadam_emu_norm_runs - norm0, STEPS * NP);
  /* with gas > 1 every micro-batch is added on the device (the first: a plain copy when already fp32) */
  CHECK_EQ(devadam_emu_acc_runs - acc0, gas == 1 ? 0 : STEPS * NP * (wd == ZO_DTYPE_F32 ? gas - 1 : gas));
  /* the checkpoint (saved before the last step) into a fresh device engine: its last step equals b's */
  if (eng_open(&r, &cb, cdev, NULL) || !CHECK_OK(zo_engine_load(r.e, saved, NULL))) goto out_r;
  if (feed(cdev, &r, STEPS - 1, gas, wd)) goto out_r;
  zo_step_info ir;
  if (!CHECK_OK(zo_engine_step(r.e, &ir))) goto out_r;
  if (memcmp(&ir.grad_norm, &last, sizeof last)) FAIL_AT("%s resumed: grad norm %.17g, want %.17g", label, ir.grad_norm, last);
  if (!same_weights("resumed", STEPS, cdev, &b, cdev, &r) && zo_test_failures == failures0)
    printf("test_devadam_emu: %s gas %d: %d steps, grad norm %.6f .. %.6f, masters and working weights equal to "
           "CPU Adam's bit for bit; resumed from step %d's checkpoint: equal\n",
           label, gas, STEPS, first, last, STEPS - 1);
out_r:
  eng_close(&r, cdev);
out_b:
  eng_close(&b, cdev);
out_a:
  eng_close(&a, hdev);
  if (saved[0]) {
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", saved);
    if (system(cmd) != 0) FAIL_AT("%s", cmd);
  }
}

int main(int argc, char **argv) {
  if (argc > 1) g_dir = argv[1];
  const int emu = devadam_emu_install();
  if (emu == 0 || zo_device_cuda_count() < 1) {
    printf("test_devadam_emu: SKIP: the stand-in runtime with kernel emulation is not loaded\n");
    return ZO_TEST_SKIP;
  }
  if (emu < 0) {
    printf("test_devadam_emu: SKIP: this build has no device Adam kernel to emulate\n");
    return ZO_TEST_SKIP;
  }
  zo_device_t *hdev = NULL, *cdev = NULL;
  if (!CHECK_OK(zo_device_create(ZO_DEVICE_HOST, 0, SIZE_MAX, &hdev)) ||
      !CHECK_OK(zo_device_create(ZO_DEVICE_CUDA, 0, SIZE_MAX, &cdev)))
    goto out;
  const int gas_max = argc > 2 ? atoi(argv[2]) : MAXMB;
  for (int gas = 1; gas <= gas_max; gas += gas_max - 1 > 0 ? gas_max - 1 : 1) {
    run_case("bf16", hdev, cdev, ZO_DTYPE_BF16, gas);
    run_case("fp32", hdev, cdev, ZO_DTYPE_F32, gas);
  }
out:
  zo_device_destroy(cdev);
  zo_device_destroy(hdev);
  return zo_test_finish("test_devadam_emu");
}
