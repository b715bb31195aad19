/*
 * test_engine_pinreg.c - the start-up check of pinned host memory on a CUDA
 * device (issue 23 point 6): a pinned buffer of the memory plan that
 * cudaHostRegister refused makes zo_engine_finalize() fail with ZO_ERR_CUDA,
 * naming the buffer, its bytes, the CUDA error, RLIMIT_MEMLOCK and
 * zoffload.allow_pageable_host; with that key true, finalize warns once with
 * the pageable bytes and the engine trains. On the stand-in runtime
 * (fake_cudart.c), whose FAKE_CUDA_REG_LIMIT / FAKE_CUDA_NOREG are read at
 * each cudaHostRegister (so this test sets them itself between engines).
 * Not here: the device layer's pageable copies (test_device_fakecuda_pageable).
 * Exit 77 without a CUDA device (the stand-in not loaded).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zo_test.h"
#include "zoffload/engine.h"
#include "zoffload/plan.h"

enum {
  NA = 1 << 19
}; /* fp32 state 2 MiB a kind: buffers mapped on their own, registered on their own */

static char g_warn[4096];
static int g_n_warn;

static void on_log(zo_log_level level, const char *msg, void *user) {
  (void)user;
  if (level != ZO_LOG_WARN || !strstr(msg, "allow_pageable_host")) return;
  g_n_warn++;
  snprintf(g_warn, sizeof g_warn, "%s", msg);
}

static void config(zo_config_t *c, int allow) {
  zo_config_defaults(c);
  c->train_micro_batch_size_per_gpu = 1;
  c->gradient_accumulation_steps = 1;
  c->train_batch_size = 1;
  c->bf16.enabled = 1;
  c->zero.stage = 1;
  c->zero.offload_optimizer.device = ZO_OFFLOAD_CPU;
  c->zero.offload_optimizer.pin_memory = 1; /* grad_host and state_host pinned too */
  c->zoffload.adam_threads = 1;
  c->zoffload.allow_pageable_host = allow;
}

/* One engine on @dev: finalize's status; with @train, when it finalized, one step on a device gradient. */
static zo_status run(zo_device_t *dev, int allow, int train, char *err, size_t err_len) {
  zo_config_t c;
  config(&c, allow);
  zo_engine_t *e = NULL;
  zo_param_t *p;
  err[0] = 0;
  zo_status st = zo_engine_create(&c, dev, NULL, &e);
  if (st == ZO_OK) st = zo_engine_register_param(e, "w", NA, &p);
  if (st == ZO_OK) st = zo_engine_finalize(e);
  if (st != ZO_OK) snprintf(err, err_len, "%s", zo_last_error());
  if (st == ZO_OK && train) {
    float *v = malloc((size_t)NA * 4);
    uint16_t *g16 = malloc((size_t)NA * 2);
    void *g = NULL;
    for (int i = 0; i < NA; i++) v[i] = 0.5f, g16[i] = 0x3f80; /* bf16 1.0 */
    zo_step_info info;
    if (CHECK_OK(zo_engine_load_param(e, p, v)) &&
        CHECK_OK(zo_device_malloc(dev, (size_t)NA * 2, &g)) &&
        CHECK_OK(zo_memcpy(dev, g, g16, (size_t)NA * 2, ZO_COPY_H2D)) &&
        CHECK_OK(zo_engine_grad_ready(e, p, g, ZO_DTYPE_BF16)) &&
        CHECK_OK(zo_engine_step(e, &info))) {
      CHECK_EQ(zo_engine_steps_applied(e), 1);
      CHECK_OK(zo_engine_get_master(e, p, v, NULL, NULL));
      if (!(v[0] < 0.5f && v[NA - 1] < 0.5f))
        FAIL_AT("the step left the master weights at %g, %g", v[0], v[NA - 1]);
    }
    if (g) zo_device_free(dev, g);
    free(v), free(g16);
  }
  zo_engine_destroy(e);
  return st;
}

/* The refusal's message names the buffer, its bytes, the CUDA error, the likely cause and the way out. */
static void check_refusal(const char *what, const char *err) {
  printf("test_engine_pinreg: %s: %s\n", what, err);
  static const char *const want[] = {"pinned host buffer \"",
                                     "bytes",
                                     "could not be registered with CUDA",
                                     "cudaHostRegister",
                                     "RLIMIT_MEMLOCK",
                                     "ulimit -l",
                                     "memlock",
                                     "zoffload.pinned_fraction",
                                     "zoffload.allow_pageable_host"};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
    if (!strstr(err, want[i])) FAIL_AT("%s: the message lacks \"%s\": %s", what, want[i], err);
}

int main(void) {
  if (zo_device_cuda_count() < 1) {
    printf("test_engine_pinreg: SKIP: no CUDA device (run under the stand-in runtime)\n");
    return ZO_TEST_SKIP;
  }
  zo_device_t *dev;
  if (!CHECK_OK(zo_device_create(ZO_DEVICE_CUDA, 0, SIZE_MAX, &dev)))
    return zo_test_finish("test_engine_pinreg");
  zo_log_set_handler(on_log, NULL, ZO_LOG_WARN);
  char err[4096];
  unsetenv("FAKE_CUDA_REG_LIMIT");
  unsetenv("FAKE_CUDA_NOREG");

  /* 1. registration works: finalize and a step, no warning */
  CHECK_OK(run(dev, 0, 1, err, sizeof err));
  CHECK_EQ(g_n_warn, 0);

  /* 2. a locked-memory limit below the plan's pinned bytes (each state buffer alone is 2 MiB) */
  setenv("FAKE_CUDA_REG_LIMIT", "1048576", 1);
  CHECK_ST(run(dev, 0, 0, err, sizeof err), ZO_ERR_CUDA);
  check_refusal("FAKE_CUDA_REG_LIMIT=1048576", err);
  CHECK(strstr(err, "cudaErrorMemoryAllocation") != NULL);
  /* allowed: one warning with the bytes that stayed pageable, and the engine trains */
  g_n_warn = 0;
  CHECK_OK(run(dev, 1, 1, err, sizeof err));
  CHECK_EQ(g_n_warn, 1);
  CHECK(strstr(g_warn, "bytes of pinned host buffers") != NULL);
  printf("test_engine_pinreg: allowed: %s\n", g_warn);
  unsetenv("FAKE_CUDA_REG_LIMIT");

  /* 3. registration refused outright */
  setenv("FAKE_CUDA_NOREG", "1", 1);
  CHECK_ST(run(dev, 0, 0, err, sizeof err), ZO_ERR_CUDA);
  check_refusal("FAKE_CUDA_NOREG=1", err);
  CHECK(strstr(err, "cudaErrorNotSupported") != NULL);
  g_n_warn = 0;
  CHECK_OK(run(dev, 1, 1, err, sizeof err));
  CHECK_EQ(g_n_warn, 1);
  unsetenv("FAKE_CUDA_NOREG");

  /* 4. and registration works again once the limit is gone */
  g_n_warn = 0;
  CHECK_OK(run(dev, 0, 1, err, sizeof err));
  CHECK_EQ(g_n_warn, 0);

  zo_log_set_handler(NULL, NULL, ZO_LOG_WARN);
  zo_device_destroy(dev);
  return zo_test_finish("test_engine_pinreg");
}
