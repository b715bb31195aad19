/*
 * ckpt_rig.h - the smallest engine the checkpoint tests and fuzz targets save and load: one rank, AdamW with its
 * state in host memory (stage 2, offload_optimizer cpu), one Adam thread, on the host device. Header only, for
 * tests/; include after zoffload/config.h, device.h and engine.h.
 */
#ifndef ZO_CKPT_RIG_H
#define ZO_CKPT_RIG_H

#include <string.h>

#include "zoffload/config.h"
#include "zoffload/device.h"
#include "zoffload/engine.h"

/* ckpt_rig_config() - @c set to that config: defaults, batch 1, AdamW, stage 2, optimizer state on cpu, 1 thread. */
static inline void ckpt_rig_config(zo_config_t *c) {
  zo_config_defaults(c);
  c->train_batch_size = c->train_micro_batch_size_per_gpu = c->gradient_accumulation_steps = 1;
  c->optimizer.type = ZO_OPT_ADAMW;
  c->zero.stage = 2;
  c->zero.offload_optimizer.device = ZO_OFFLOAD_CPU;
  c->zoffload.adam_threads = 1;
}

typedef struct ckpt_rig {
  zo_device_t *dev;
  zo_engine_t *e;
  zo_param_t *p; /* "w", 64 fp32 elements */
} ckpt_rig;

/* ckpt_rig_open() - the engine with one tensor "w" of 64 elements, finalized; with @load, its weights i / 64. */
static inline zo_status ckpt_rig_open(ckpt_rig *r, int load) {
  memset(r, 0, sizeof *r);
  zo_config_t c;
  ckpt_rig_config(&c);
  zo_status st = zo_device_create(ZO_DEVICE_HOST, 0, 0, &r->dev);
  if (st == ZO_OK) st = zo_engine_create(&c, r->dev, NULL, &r->e);
  if (st == ZO_OK) st = zo_engine_register_param(r->e, "w", 64, &r->p);
  if (st == ZO_OK) st = zo_engine_finalize(r->e);
  if (st == ZO_OK && load) {
    float v[64];
    for (int i = 0; i < 64; i++) v[i] = (float)i / 64.f;
    st = zo_engine_load_param(r->e, r->p, v);
  }
  return st;
}

static inline void ckpt_rig_close(ckpt_rig *r) {
  zo_engine_destroy(r->e);
  zo_device_destroy(r->dev);
}

#endif /* ZO_CKPT_RIG_H */
