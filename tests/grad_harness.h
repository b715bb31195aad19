/*
 * grad_harness.h - the pieces test_grad_accum.c, test_grad_nvme.c and test_devadam_emu.c share: their common
 * config, the micro-batch gradients they feed (multiples of 1/64, so sums are exact in any order), their cast to
 * the hand-over dtype, and an engine over NP tensors of k_sizes elements (weights from a fixed seed) with one fp32-sized device buffer per tensor.
 * Include after zo_test.h, once the including test has defined NP, k_sizes[NP], g_comm and W (its world size).
 */
#ifndef ZO_GRAD_HARNESS_H
#define ZO_GRAD_HARNESS_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zo_test.h"
#include "zoffload/config.h"
#include "zoffload/engine.h"

/* The settings test_grad_accum, test_grad_nvme and test_devadam_emu train with: stage 2, AdamW (lr 1e-2, weight
 * decay 0.1), one sample a micro-batch, @gas micro-batches a step on each of the W ranks, one Adam thread; tiers,
 * buckets, precision and clipping are each test's own. */
static void grad_adamw_config(zo_config_t *c, int gas) {
  zo_config_defaults(c);
  c->train_micro_batch_size_per_gpu = 1;
  c->gradient_accumulation_steps = gas;
  c->train_batch_size = gas * W;
  c->optimizer.type = ZO_OPT_ADAMW;
  c->optimizer.adam_w_mode = 1;
  c->optimizer.lr = 1e-2;
  c->optimizer.weight_decay = 0.1;
  c->zero.stage = 2;
  c->zoffload.adam_threads = 1;
}

/* Micro-batch @mb's gradient element j of tensor i at step s on rank q: a multiple of 1/64 in (-2, 2). */
static float grad_of(int q, int s, int mb, int i, size_t j) {
  uint64_t h = (uint64_t)q * 0x9e3779b97f4a7c15ull ^
               (uint64_t)((s * 7 + mb) * 131 + i) * 0xbf58476d1ce4e5b9ull ^ j * 0x94d049bbull;
  h ^= h >> 29;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 32;
  return (float)((int)(h % 255) - 127) / 64.0f;
}

/* @n floats of @src into @dst as @dt: fp32, or bf16 by truncation (exact for these values: 8 significant bits
 * at most, scaled by powers of two). */
static void cast_to(void *dst, zo_dtype dt, const float *src, size_t n) {
  for (size_t j = 0; j < n; j++) {
    if (dt == ZO_DTYPE_F32) {
      ((float *)dst)[j] = src[j];
    } else {
      uint32_t b;
      memcpy(&b, &src[j], 4);
      ((uint16_t *)dst)[j] = (uint16_t)(b >> 16);
    }
  }
}

typedef struct eng {
  zo_engine_t *e;
  zo_param_t *ps[NP];
  void *dbuf[NP]; /* one device buffer per tensor, fp32-sized */
} eng;

/* The engine of @c on @dev (with compute stream @cs, or none) into g->e and g->ps, its tensors registered,
 * finalized and loaded; g->dbuf untouched. */
static inline int eng_open_params(eng *g, const zo_config_t *c, zo_device_t *dev, zo_stream_t *cs) {
  if (!CHECK_OK(zo_engine_create(c, dev, g_comm, &g->e))) return 1;
  if (cs && !CHECK_OK(zo_engine_set_compute_stream(g->e, cs))) return 1;
  for (int i = 0; i < NP; i++) {
    char name[16];
    snprintf(name, sizeof name, "t%d", i);
    if (!CHECK_OK(zo_engine_register_param(g->e, name, k_sizes[i], &g->ps[i]))) return 1;
  }
  if (!CHECK_OK(zo_engine_finalize(g->e))) return 1;
  uint64_t seed = 7;
  for (int i = 0; i < NP; i++) {
    float *w = malloc(k_sizes[i] * 4);
    for (size_t j = 0; j < k_sizes[i]; j++) w[j] = zo_test_rand_pm1f(&seed);
    int bad = !CHECK_OK(zo_engine_load_param(g->e, g->ps[i], w));
    free(w);
    if (bad) return 1;
  }
  return 0;
}

/* eng_open_params, and one fp32-sized device buffer per tensor. */
static int eng_open(eng *g, const zo_config_t *c, zo_device_t *dev, zo_stream_t *cs) {
  memset(g, 0, sizeof *g);
  if (eng_open_params(g, c, dev, cs)) return 1;
  for (int i = 0; i < NP; i++)
    if (!CHECK_OK(zo_device_malloc(dev, k_sizes[i] * 4, &g->dbuf[i]))) return 1;
  return 0;
}

/* Every tensor's fp32 master weights (this rank's shard) in @a and @b equal bit for bit? 0; else 1, the first bytes
 * that differ named by CHECK_BYTES ("LABEL: master of tI (rank RANK)"), or a read that failed by CHECK_OK. */
static inline int eng_masters_differ(const char *label, const eng *a, const eng *b, int rank) {
  int bad = 0;
  for (int i = 0; i < NP && !bad; i++) {
    float *ma = malloc(k_sizes[i] * 4), *mb = malloc(k_sizes[i] * 4);
    size_t off, n, off2, n2;
    if (CHECK_OK(zo_engine_get_master(a->e, a->ps[i], ma, &off, &n)) &&
        CHECK_OK(zo_engine_get_master(b->e, b->ps[i], mb, &off2, &n2)) && CHECK_EQ(n, n2)) {
      char what[200];
      snprintf(what, sizeof what, "%s: master of t%d (rank %d)", label, i, rank);
      if (CHECK_BYTES(what, ma, mb, n * 4)) bad = 1;
    } else {
      bad = 1;
    }
    free(ma), free(mb);
  }
  return bad;
}

static void eng_close(eng *g, zo_device_t *dev) {
  zo_engine_destroy(g->e);
  for (int i = 0; i < NP; i++)
    if (g->dbuf[i]) zo_device_free(dev, g->dbuf[i]);
}

#endif
