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
 * same next step as the engine that saved it. Under `mpirun -np 2` the same on 2 ranks (stage 2: each rank's
 * shard reduced over the ranks through host buffers, added on the device; the new working blocks all-gathered). First, the stand-in's emulated launch itself: in stream order, on
 * the stream's worker, not in the caller. Exit 77 when the stand-in (or its emulation hook) is not
 * loaded or the library has no device Adam kernel.
 */
#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "zo_test.h"
#include "zoffload/checkpoint.h"
#include "zoffload/config.h"
#include "zoffload/engine.h"

enum { NP = 4, STEPS = 4, MAXMB = 4 };
static const size_t k_sizes[NP] = {1000, 3, 70001, 4097};
static zo_comm_t *g_comm;
static int R, W = 1;
static const char *g_dir = "/tmp";

#include "devadam_emu.h"
#include "grad_harness.h"

static void config(zo_config_t *c, zo_offload_device tier, zo_dtype wd, int gas) {
  grad_adamw_config(c, gas);
  c->bf16.enabled = wd == ZO_DTYPE_BF16;
  c->gradient_clipping = 1.0; /* the norms here are ~10-300: every step clips */
  c->zero.offload_optimizer.device = tier;
}

/* Micro-batch @mb's gradients of step @s in @dt through @g's device buffers: accumulated (mb < gas - 1) or
 * handed over, each buffer poisoned with NaN once the fence says it is free. With a compute stream @cs (device
 * engine only) the gradient reaches the buffer by a copy queued on @cs (from a device scratch @scratch) and the
 * poison is a memset queued on @cs after zo_engine_grad_fence(e, cs): the engine must order itself after the
 * compute stream, and the fence must order the compute stream after the engine's reads. */
static int feed(zo_device_t *dev, zo_stream_t *cs, void *scratch, eng *g, int s, int gas,
                zo_dtype dt) {
  const size_t dsz = zo_dtype_size(dt);
  for (int mb = 0; mb < gas; mb++) {
    for (int i = 0; i < NP; i++) {
      const size_t nb = k_sizes[i] * dsz;
      float *f = malloc(k_sizes[i] * 4);
      void *h = malloc(nb), *nan = malloc(nb);
      for (size_t j = 0; j < k_sizes[i]; j++) f[j] = grad_of(R, s, mb, i, j);
      cast_to(h, dt, f, k_sizes[i]);
      memset(nan, 0xff, nb);
      int bad;
      if (cs) /* the scratch is free: the copy out of it below was synchronized at the last fence + memset */
        bad = !CHECK_OK(zo_stream_synchronize(cs)) ||
              !CHECK_OK(zo_memcpy(dev, scratch, h, nb, ZO_COPY_H2D)) ||
              !CHECK_OK(zo_memcpy_async(cs, g->dbuf[i], scratch, nb, ZO_COPY_D2D));
      else
        bad = !CHECK_OK(zo_memcpy(dev, g->dbuf[i], h, nb, ZO_COPY_H2D));
      if (!bad) {
        zo_status st = mb < gas - 1 ? zo_engine_grad_accumulate(g->e, g->ps[i], g->dbuf[i], dt)
                                    : zo_engine_grad_ready(g->e, g->ps[i], g->dbuf[i], dt);
        bad = !CHECK_OK(st);
        if (bad) printf("  %s\n", zo_last_error());
      }
      bad = bad || !CHECK_OK(zo_engine_grad_fence(g->e, cs));
      if (cs)
        bad = bad || !CHECK_OK(zo_memset_async(cs, g->dbuf[i], 0xff, nb));
      else
        bad = bad || !CHECK_OK(zo_memcpy(dev, g->dbuf[i], nan, nb, ZO_COPY_H2D));
      free(f), free(h), free(nan);
      if (bad) return 1;
    }
  }
  return 0;
}

/* Tensor @i's master shard (*@shard_n elements: this rank's) and working weights (the whole tensor, as bytes of
 * the working dtype) of @g into @m and @w: with no
 * wait of the caller's own (the engine's fetch and get_master order themselves after the update), on @cs when
 * the engine has that compute stream. */
static int snapshot(zo_device_t *dev, zo_stream_t *cs, eng *g, int i, float *m, size_t *shard_n,
                    void *w) {
  if (!CHECK_OK(zo_engine_get_master(g->e, g->ps[i], m, NULL, shard_n))) return 1;
  const void *dw;
  zo_dtype dt;
  if (!CHECK_OK(zo_engine_fetch(g->e, g->ps[i], &dw, &dt))) return 1;
  const size_t nb = k_sizes[i] * zo_dtype_size(dt);
  int bad = cs ? !CHECK_OK(zo_memcpy_async(cs, w, dw, nb, ZO_COPY_D2H)) ||
                     !CHECK_OK(zo_stream_synchronize(cs))
               : !CHECK_OK(zo_memcpy(dev, w, dw, nb, ZO_COPY_D2H));
  return !CHECK_OK(zo_engine_release(g->e, g->ps[i])) || bad;
}

/* @a (e.g. host device, CPU Adam) and @b (stand-in CUDA, device Adam), each read on its compute stream (or
 * none): every tensor's master and working weights equal bit for bit. */
static int same_weights(const char *label, int s, zo_device_t *adev, zo_stream_t *acs, eng *a,
                        zo_device_t *bdev, zo_stream_t *bcs, eng *b) {
  int bad = 0;
  for (int i = 0; i < NP && !bad; i++) {
    const size_t n = k_sizes[i];
    float *ma = malloc(n * 4), *mb = malloc(n * 4);
    void *wa = malloc(n * 4), *wb = malloc(n * 4);
    size_t na = 0, nb = 0;
    bad = snapshot(adev, acs, a, i, ma, &na, wa) || snapshot(bdev, bcs, b, i, mb, &nb, wb) ||
          !CHECK_EQ(na, nb);
    const size_t wsz = zo_dtype_size(zo_engine_working_dtype(b->e));
    if (!bad && memcmp(ma, mb, na * 4)) {
      size_t j = 0;
      while (j < na && !memcmp(&ma[j], &mb[j], 4)) j++;
      bad = FAIL_AT("%s step %d: master of t%d differs first at [%zu]: cpu %.9g device %.9g", label,
                    s, i, j, (double)ma[j], (double)mb[j]);
    }
    if (!bad && memcmp(wa, wb, n * wsz))
      bad = FAIL_AT("%s step %d: working weights of t%d differ", label, s, i);
    free(ma), free(mb), free(wa), free(wb);
  }
  return bad;
}

/* STEPS steps of both engines with @gas micro-batches of @dt gradients; then the checkpoint round trip. */
static void run_case(const char *label, zo_device_t *hdev, zo_device_t *cdev, zo_stream_t *cs,
                     void *scratch, zo_dtype wd, int gas) {
  zo_config_t ca, cb;
  config(&ca, ZO_OFFLOAD_CPU, wd, gas);
  config(&cb, ZO_OFFLOAD_NONE, wd, gas);
  eng a, b, r = {0};
  const int failures0 = zo_test_failures;
  char saved[4096] = "";
  if (eng_open(&a, &ca, hdev, NULL)) goto out_a;
  if (eng_open(&b, &cb, cdev, cs)) goto out_b;
  double first = 0, last = 0;
  const unsigned long adam0 = devadam_emu_adam_runs, norm0 = devadam_emu_norm_runs,
                      acc0 = devadam_emu_acc_runs;
  for (int s = 0; s < STEPS; s++) {
    zo_step_info ia, ib;
    if (feed(hdev, NULL, NULL, &a, s, gas, wd) || feed(cdev, cs, scratch, &b, s, gas, wd))
      goto out_b;
    if (!CHECK_OK(zo_engine_step(a.e, &ia))) goto out_b;
    if (!CHECK_OK(zo_engine_step(b.e, &ib))) {
      printf("  %s\n", zo_last_error());
      goto out_b;
    }
    if (memcmp(&ia.grad_norm, &ib.grad_norm, sizeof(double)))
      FAIL_AT("%s step %d: grad norm cpu %.17g device %.17g", label, s + 1, ia.grad_norm,
              ib.grad_norm);
    if (s == 0) first = ib.grad_norm;
    last = ib.grad_norm;
    if (same_weights(label, s + 1, hdev, NULL, &a, cdev, cs, &b)) goto out_b;
    if (s == STEPS - 2 && !CHECK_OK(zo_engine_save(b.e, g_dir, NULL, saved, sizeof saved)))
      goto out_b;
  }
  /* every step: one update kernel per tensor, one norm kernel per tensor's hand-over (gas > 1: the boundary's) */
  CHECK_EQ(devadam_emu_adam_runs - adam0, STEPS * NP);
  CHECK_EQ(devadam_emu_norm_runs - norm0, STEPS * NP);
  /* with gas > 1 every micro-batch is added on the device (the first: a plain copy when already fp32) */
  CHECK_EQ(devadam_emu_acc_runs - acc0,
           gas == 1 ? 0 : STEPS * NP * (wd == ZO_DTYPE_F32 ? gas - 1 : gas));
  /* the checkpoint (saved before the last step) into a fresh device engine: its last step equals b's */
  if (eng_open(&r, &cb, cdev, cs) || !CHECK_OK(zo_engine_load(r.e, saved, NULL))) goto out_r;
  if (feed(cdev, cs, scratch, &r, STEPS - 1, gas, wd)) goto out_r;
  zo_step_info ir;
  if (!CHECK_OK(zo_engine_step(r.e, &ir))) goto out_r;
  if (memcmp(&ir.grad_norm, &last, sizeof last))
    FAIL_AT("%s resumed: grad norm %.17g, want %.17g", label, ir.grad_norm, last);
  if (!same_weights("resumed", STEPS, cdev, cs, &b, cdev, cs, &r) && zo_test_failures == failures0)
    printf(
        "test_devadam_emu: rank %d/%d: %s gas %d%s: %d steps, grad norm %.6f .. %.6f, masters and working weights equal to "
        "CPU Adam's bit for bit; resumed from step %d's checkpoint: equal\n",
        R, W, label, gas, cs ? " (compute stream)" : "", STEPS, first, last, STEPS - 1);
out_r:
  eng_close(&r, cdev);
out_b:
  eng_close(&b, cdev);
out_a:
  eng_close(&a, hdev);
  if (W > 1) CHECK_OK(zo_comm_barrier(g_comm)); /* every rank has read the checkpoint */
  if (saved[0] && R == 0) {
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", saved);
    if (system(cmd) != 0) FAIL_AT("%s", cmd);
  }
}

/* The stand-in's emulated launch itself: queued, not run in the caller; runs on the stream's worker after the
 * stream's earlier work (a gated host func) and before its later work (a copy over the kernel's source, which
 * must therefore not be poisoned before the kernel has read it). The test looks at the stand-in's "device memory"
 * without copies, through fake_cuda_hostview (devadam_emu_hostview: the bytes' host address, also under
 * FAKE_CUDA_DEVICE_NOACCESS, where the device pointers themselves fault on a host access). */
static atomic_int g_gate;
static void gate_fn(void *arg) {
  (void)arg;
  while (!atomic_load(&g_gate)) usleep(1000);
}
static void test_launch_order(zo_device_t *dev) {
  enum { N = 1000 };
  zo_stream_t *s = NULL;
  float *dsrc, *ddst,
      *dother; /* device pointers; src, dst, other: the host's view of their bytes */
  if (!CHECK_OK(zo_stream_create(dev, &s))) return;
  if (!CHECK_OK(zo_device_malloc(dev, N * 4, (void **)&dsrc)) ||
      !CHECK_OK(zo_device_malloc(dev, N * 4, (void **)&ddst)) ||
      !CHECK_OK(zo_device_malloc(dev, N * 4, (void **)&dother)))
    return;
  float *src = devadam_emu_hostview(dsrc), *dst = devadam_emu_hostview(ddst),
        *other = devadam_emu_hostview(dother);
  for (int i = 0; i < N; i++) src[i] = (float)i, dst[i] = -1.0f, other[i] = 7.0f;
  const unsigned long runs0 = devadam_emu_acc_runs;
  atomic_store(&g_gate, 0);
  CHECK_OK(zo_launch_host_func(s, gate_fn, NULL));
  CHECK_OK(zo_grad_acc_device(s, ddst, ZO_DTYPE_F32, dsrc, ZO_DTYPE_F32, N, 0));
  CHECK_OK(
      zo_memcpy_async(s, dsrc, dother, N * 4, ZO_COPY_D2D)); /* after the kernel in stream order */
  usleep(20000);
  CHECK_EQ(devadam_emu_acc_runs - runs0, 0); /* behind the gate */
  CHECK(dst[0] == -1.0f && dst[N - 1] == -1.0f);
  CHECK(src[N - 1] ==
        (float)(N - 1)); /* the kernel's source: not poisoned while the kernel is pending */
  atomic_store(&g_gate, 1);
  CHECK_OK(zo_stream_synchronize(s));
  CHECK_EQ(devadam_emu_acc_runs - runs0, 1);
  int bad = 0;
  for (int i = 0; i < N; i++) bad += dst[i] != (float)i || src[i] != 7.0f;
  CHECK_EQ(bad, 0);
  /* ungated, on a stream whose ops start 20 ms late: the copy over the source is enqueued while the kernel is
   * pending, and must not poison the source the kernel has yet to read */
  zo_stream_t *slow = NULL;
  setenv("FAKE_CUDA_LATENCY_US", "20000", 1);
  const zo_status cst = zo_stream_create(dev, &slow);
  unsetenv("FAKE_CUDA_LATENCY_US");
  if (CHECK_OK(cst)) {
    for (int i = 0; i < N; i++) src[i] = (float)(2 * i), other[i] = 5.0f;
    CHECK_OK(zo_grad_acc_device(slow, ddst, ZO_DTYPE_F32, dsrc, ZO_DTYPE_F32, N, 0));
    CHECK_OK(zo_memcpy_async(slow, dsrc, dother, N * 4, ZO_COPY_D2D));
    CHECK_OK(zo_stream_synchronize(slow));
    bad = 0;
    for (int i = 0; i < N; i++) bad += dst[i] != (float)(2 * i);
    if (bad)
      FAIL_AT(
          "%d of %d elements of the kernel's result wrong (dst[0] = %g): its source was overwritten "
          "or poisoned before it ran",
          bad, N, (double)dst[0]);
    zo_stream_destroy(slow);
  }
  zo_device_free(dev, dsrc), zo_device_free(dev, ddst), zo_device_free(dev, dother);
  zo_stream_destroy(s);
}

int main(int argc, char **argv) {
  if (argc > 1) g_dir = argv[1];
  /* the checkpoint root: each registration passes its own (test_devadam_emu and _np2 may run at once) */
  if (mkdir(g_dir, 0700) != 0 && errno != EEXIST) {
    fprintf(stderr, "test_devadam_emu: mkdir %s: %s\n", g_dir, strerror(errno));
    return 1;
  }
  if (!CHECK_OK(zo_comm_create_from_env(&g_comm))) return zo_test_finish("test_devadam_emu");
  R = zo_comm_rank(g_comm), W = zo_comm_size(g_comm);
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
  test_launch_order(cdev);
  /* gas 1 with the caller's synchronous copies; gas 4 (argv[2]) with a compute stream */
  const int gas_max = argc > 2 ? atoi(argv[2]) : MAXMB;
  zo_stream_t *cs = NULL;
  void *scratch = NULL;
  if (!CHECK_OK(zo_stream_create(cdev, &cs)) ||
      !CHECK_OK(zo_device_malloc(cdev, k_sizes[2] * 4, &scratch)))
    goto out;
  run_case("bf16", hdev, cdev, NULL, NULL, ZO_DTYPE_BF16, 1);
  run_case("fp32", hdev, cdev, NULL, NULL, ZO_DTYPE_F32, 1);
  if (gas_max > 1) {
    run_case("bf16", hdev, cdev, cs, scratch, ZO_DTYPE_BF16, gas_max);
    run_case("fp32", hdev, cdev, cs, scratch, ZO_DTYPE_F32, gas_max);
  }
out:
  if (scratch) zo_device_free(cdev, scratch);
  zo_stream_destroy(cs);
  zo_device_destroy(cdev);
  zo_device_destroy(hdev);
  zo_comm_destroy(g_comm);
  return zo_test_finish("test_devadam_emu");
}
