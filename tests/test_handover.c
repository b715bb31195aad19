/*
 * test_handover.c - the gradient hand-over space (zoffload/handover.h) on the host device: where reservations go
 * (64-byte aligned, or as asked), the fence when the next one does not fit and the space free again after it,
 * the refusal of a reservation larger than the space, an unbounded space, reset; and that put() is
 * zo_engine_grad_accumulate() when not last and zo_engine_grad_ready() when last: two micro-batches put through
 * it give master weights bit for bit those of one zo_engine_grad_ready() of their fp32 sum, and the engine's own
 * usage errors come back (ready twice, accumulate after ready). Exit 0 pass, 1 fail.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zo_test.h"
#include "zoffload/config.h"
#include "zoffload/device.h"
#include "zoffload/engine.h"
#include "zoffload/handover.h"

enum { N0 = 100, N1 = 37 };

typedef struct eng {
  zo_engine_t *e;
  zo_param_t *p[2];
} eng;

/* An engine of two fp32 tensors (N0, N1 elements, weights 0.5) on @dev, @gas micro-batches a step, plain Adam. */
static int eng_open(eng *g, zo_device_t *dev, zo_comm_t *comm, int gas) {
  zo_config_t c;
  zo_config_defaults(&c);
  c.train_micro_batch_size_per_gpu = 1;
  c.gradient_accumulation_steps = gas;
  c.train_batch_size = gas;
  c.optimizer.lr = 1e-2;
  c.zoffload.adam_threads = 1;
  memset(g, 0, sizeof *g);
  if (!CHECK_OK(zo_engine_create(&c, dev, comm, &g->e))) return 1;
  const size_t n[2] = {N0, N1};
  for (int i = 0; i < 2; i++) {
    char name[8];
    snprintf(name, sizeof name, "t%d", i);
    if (!CHECK_OK(zo_engine_register_param(g->e, name, n[i], &g->p[i]))) return 1;
  }
  if (!CHECK_OK(zo_engine_finalize(g->e))) return 1;
  float w[N0];
  for (int j = 0; j < N0; j++) w[j] = 0.5f;
  for (int i = 0; i < 2; i++)
    if (!CHECK_OK(zo_engine_load_param(g->e, g->p[i], w))) return 1;
  return 0;
}

/* Offsets, fences and the refusals of the space's bookkeeping (no gradient handed over: the fences are empty). */
static void test_space(zo_engine_t *e) {
  zo_grad_handover_t *h = NULL;
  size_t off = 99;
  int fenced = -1;
  CHECK_ST(zo_grad_handover_create(e, 1024, 3, NULL, &h),
           ZO_ERR_INVALID_ARG); /* not a power of two */
  CHECK(h == NULL);
  CHECK_ST(zo_grad_handover_create(e, 1024, 8192, NULL, &h), ZO_ERR_INVALID_ARG);
  CHECK_ST(zo_grad_handover_create(NULL, 1024, 0, NULL, &h), ZO_ERR_INVALID_ARG);
  REQUIRE_OK(zo_grad_handover_create(e, 1024, 0, NULL, &h)); /* 0: ZO_GRAD_HANDOVER_ALIGN */
  CHECK_EQ(zo_grad_handover_used(h), 0);
  CHECK_OK(zo_grad_handover_reserve(h, 400, &off, &fenced));
  CHECK_EQ(off, 0), CHECK_EQ(fenced, 0),
      CHECK_EQ(zo_grad_handover_used(h), 448); /* rounded up to 64 */
  CHECK_OK(zo_grad_handover_reserve(h, 148, &off, &fenced));
  CHECK_EQ(off, 448), CHECK_EQ(fenced, 0), CHECK_EQ(zo_grad_handover_used(h), 640);
  CHECK_OK(zo_grad_handover_reserve(h, 400, &off,
                                    &fenced)); /* 640 + 400 > 1024: a fence, then the start */
  CHECK_EQ(off, 0), CHECK_EQ(fenced, 1), CHECK_EQ(zo_grad_handover_used(h), 448);
  CHECK_ST(zo_grad_handover_reserve(h, 1025, &off, &fenced), ZO_ERR_INVALID_ARG); /* never fits */
  CHECK_HAS(zo_last_error(), "1025 bytes");
  CHECK_EQ(fenced, 0), CHECK_EQ(zo_grad_handover_used(h), 448); /* nothing reserved, no fence */
  CHECK_OK(zo_grad_handover_reserve(h, 576, &off, NULL)); /* 448 + 576 == 1024: fits exactly */
  CHECK_EQ(off, 448), CHECK_EQ(zo_grad_handover_used(h), 1024);
  CHECK_OK(zo_grad_handover_reserve(h, 0, &off, &fenced)); /* nothing, at the next free offset */
  CHECK_EQ(off, 1024), CHECK_EQ(fenced, 0);
  CHECK_OK(zo_grad_handover_reserve(h, 1, &off, &fenced));
  CHECK_EQ(off, 0), CHECK_EQ(fenced, 1), CHECK_EQ(zo_grad_handover_used(h), 64);
  CHECK_OK(zo_grad_handover_fence(h));
  CHECK_EQ(zo_grad_handover_used(h), 0);
  CHECK_OK(zo_grad_handover_reserve(h, 100, &off, &fenced));
  zo_grad_handover_reset(h);
  CHECK_EQ(zo_grad_handover_used(h), 0);
  CHECK_ST(zo_grad_handover_reserve(h, 1, NULL, &fenced), ZO_ERR_INVALID_ARG);
  CHECK_ST(zo_grad_handover_reserve(NULL, 1, &off, &fenced), ZO_ERR_INVALID_ARG);
  CHECK_ST(zo_grad_handover_fence(NULL), ZO_ERR_INVALID_ARG);
  CHECK_EQ(zo_grad_handover_used(NULL), 0);
  zo_grad_handover_destroy(h);

  REQUIRE_OK(
      zo_grad_handover_create(e, 10, 1, NULL, &h)); /* counting bytes kept elsewhere: no padding */
  CHECK_OK(zo_grad_handover_reserve(h, 3, &off, &fenced));
  CHECK_OK(zo_grad_handover_reserve(h, 5, &off, &fenced));
  CHECK_EQ(off, 3), CHECK_EQ(fenced, 0), CHECK_EQ(zo_grad_handover_used(h), 8);
  CHECK_OK(zo_grad_handover_reserve(h, 3, &off, &fenced));
  CHECK_EQ(off, 0), CHECK_EQ(fenced, 1);
  zo_grad_handover_destroy(h);

  REQUIRE_OK(zo_grad_handover_create(e, 0, 0, NULL, &h)); /* unbounded: never a fence */
  for (int k = 0; k < 4; k++) {
    CHECK_OK(zo_grad_handover_reserve(h, (size_t)1 << 40, &off, &fenced));
    CHECK_EQ(off, (long long)k << 40), CHECK_EQ(fenced, 0);
  }
  CHECK_ST(zo_grad_handover_reserve(h, SIZE_MAX - 8, &off, &fenced),
           ZO_ERR_INVALID_ARG); /* past size_t */
  CHECK_EQ(zo_grad_handover_used(h), (long long)4 << 40);
  zo_grad_handover_destroy(h);
  zo_grad_handover_destroy(NULL);
}

/* Micro-batch @mb's gradient of tensor @i, element j: multiples of 1/64, so sums are exact. */
static float grad_of(int mb, int i, int j) {
  return (float)(((j * 7 + i * 13 + mb * 29) % 63) - 31) / 64.0f;
}

/* put() routes: accumulate then ready through the hand-over on @a (gas 2) vs ready of the sum on @b (gas 1). */
static void test_put(zo_device_t *dev, eng *a, eng *b) {
  zo_grad_handover_t *h = NULL;
  const size_t n[2] = {N0, N1};
  char *ring = NULL;
  const size_t cap =
      2 * ((N0 * 4 + 63) / 64 * 64); /* twice the largest tensor, as zo-train's ring */
  REQUIRE_OK(zo_device_malloc(dev, cap, (void **)&ring));
  REQUIRE_OK(zo_grad_handover_create(a->e, cap, 0, NULL, &h));
  CHECK_ST(zo_grad_handover_put(NULL, a->p[0], ring, ZO_DTYPE_F32, 1), ZO_ERR_INVALID_ARG);
  int fences = 0;
  float g[N0], sum[2][N0];
  for (int mb = 0; mb < 2; mb++) {
    for (int i = 0; i < 2; i++) {
      size_t off;
      int fenced;
      for (size_t j = 0; j < n[i]; j++)
        g[j] = grad_of(mb, i, (int)j), sum[i][j] = mb ? sum[i][j] + g[j] : g[j];
      if (!CHECK_OK(zo_grad_handover_reserve(h, n[i] * 4, &off, &fenced))) return;
      fences += fenced;
      CHECK_OK(zo_memcpy(dev, ring + off, g, n[i] * 4, ZO_COPY_H2D));
      CHECK_OK(zo_grad_handover_put(h, a->p[i], ring + off, ZO_DTYPE_F32, mb == 1));
    }
  }
  CHECK_EQ(fences, 1); /* 448 + 192 bytes, then 400 more do not fit in 896: one fence */
  /* the engine's own refusals through put: grad_ready twice in a step; accumulate after grad_ready */
  CHECK_ST(zo_grad_handover_put(h, a->p[0], ring, ZO_DTYPE_F32, 1), ZO_ERR_INVALID_USAGE);
  CHECK_ST(zo_grad_handover_put(h, a->p[0], ring, ZO_DTYPE_F32, 0), ZO_ERR_INVALID_USAGE);
  CHECK_OK(zo_grad_handover_fence(h));
  CHECK_OK(zo_engine_step(a->e, NULL));
  zo_grad_handover_reset(h);
  zo_grad_handover_destroy(h);

  /* @b: the caller's fp32 sum, handed over once (put last on a gas-1 engine; put not last is refused there: there
   * is nothing to accumulate into) */
  REQUIRE_OK(zo_grad_handover_create(b->e, 0, 0, NULL, &h));
  CHECK_ST(zo_grad_handover_put(h, b->p[0], ring, ZO_DTYPE_F32, 0), ZO_ERR_INVALID_USAGE);
  for (int i = 0; i < 2; i++) {
    CHECK_OK(zo_memcpy(dev, ring, sum[i], n[i] * 4, ZO_COPY_H2D));
    CHECK_OK(zo_grad_handover_put(h, b->p[i], ring, ZO_DTYPE_F32, 1));
    CHECK_OK(zo_grad_handover_fence(h));
  }
  CHECK_OK(zo_engine_step(b->e, NULL));
  zo_grad_handover_destroy(h);
  for (int i = 0; i < 2; i++) {
    float ma[N0], mbuf[N0];
    size_t so, sn;
    CHECK_OK(zo_engine_get_master(a->e, a->p[i], ma, &so, &sn));
    CHECK_OK(zo_engine_get_master(b->e, b->p[i], mbuf, &so, &sn));
    CHECK_EQ(sn, n[i]);
    CHECK_BYTES(i ? "t1 master" : "t0 master", ma, mbuf, n[i] * 4);
    CHECK(ma[0] != 0.5f); /* a step was applied */
  }
  zo_device_free(dev, ring);
}

int main(void) {
  zo_device_t *dev = NULL;
  zo_comm_t *comm = NULL;
  eng a = {0}, b = {0};
  if (CHECK_OK(zo_device_create(ZO_DEVICE_HOST, 0, 0, &dev)) &&
      CHECK_OK(zo_comm_create_self(&comm)) && eng_open(&a, dev, comm, 2) == 0 &&
      eng_open(&b, dev, comm, 1) == 0) {
    test_space(a.e);
    test_put(dev, &a, &b);
  }
  zo_engine_destroy(a.e);
  zo_engine_destroy(b.e);
  zo_comm_destroy(comm);
  zo_device_destroy(dev);
  return zo_test_finish("test_handover");
}
