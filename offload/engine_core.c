/*
 * engine_core.c - what every part of the engine uses and nothing above it: host buffers (allocated, pinned,
 * registered with CUDA, noted in the ledger), the device copies' arena blocks (pin, unpin, drop), the owner and usable checks of the public calls, the device check
 * of a configuration, a synchronous device copy, swap waits timed as exposed I/O, the extent layout, and the
 * gradient arithmetic (cast, add). Calls nothing in the engine's other files: the parts (engine_*.c) and the
 * planner (plan.c, budget.c, placement.c) sit above it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine_internal.h"
#include "pinned_internal.h"
#include "plan_internal.h"

zo_status eng_host_buf_alloc(host_buf *b, size_t nbytes, int pin) {
  b->nbytes = nbytes;
  if (nbytes == 0) return ZO_OK;
  zo_status st = zo_host_alloc(nbytes, pin, &b->ptr, &b->pinned);
  if (st != ZO_OK) return zo_error_prefix(st, "engine");
  return ZO_OK;
}

zo_status eng_host_buf_alloc_as(zo_engine_t *e, host_buf *b, const char *purpose, size_t nbytes,
                                int pin) {
  ZO_CHECK(eng_host_buf_alloc(b, nbytes, pin));
  eng_ledger_note(e, ZO_TIER_HOST, purpose, nbytes, pin, -1);
  if (pin) ZO_CHECK(eng_pin_check(e, purpose, b->ptr, nbytes));
  return ZO_OK;
}

/* RLIMIT_MEMLOCK as "soft X, hard Y" (bytes or "unlimited"), for the messages below. */
static void memlock_limits(char *out, size_t len) {
  char soft[32], hard[32];
  zo_memlock_limits(soft, hard);
  snprintf(out, len, "soft %s, hard %s", soft, hard);
}

/*
 * Point 6 of the GPU review: a pinned buffer that CUDA did not register is pageable for the GPU (every copy staged
 * by the driver through its own bounce buffer, slower, and synchronous with the host), so the pool's one warning is
 * not enough: on a CUDA device finalize refuses it, naming the buffer, unless the config allows pageable memory.
 */
zo_status eng_pin_check(zo_engine_t *e, const char *purpose, const void *ptr, size_t nbytes) {
  if (!nbytes || !e->dev || zo_device_get_kind(e->dev) != ZO_DEVICE_CUDA) return ZO_OK;
  char why[256];
  const size_t left = zo_host_unregistered_bytes(ptr, nbytes, why, sizeof why);
  if (!left) return ZO_OK;
  if (!why[0]) snprintf(why, sizeof why, "not registered (no cudaHostRegister error recorded)");
  if (e->cfg.zoffload.allow_pageable_host) {
    if (!e->pageable_first[0]) {
      snprintf(e->pageable_first, sizeof e->pageable_first, "%s", purpose);
      snprintf(e->pageable_why, sizeof e->pageable_why, "%s", why);
    }
    zo_size_add(e->pageable_bytes, left, &e->pageable_bytes);
    return ZO_OK;
  }
  char lim[96];
  memlock_limits(lim, sizeof lim);
  return zo_error_set(
      ZO_ERR_CUDA,
      "engine: the pinned host buffer \"%s\" (%zu bytes, %zu of them not registered) could not be "
      "registered with CUDA: %s. Copies between it and the GPU would be pageable (staged by the "
      "driver, slower, blocking). Likely cause: the locked-memory limit (RLIMIT_MEMLOCK: %s; raise it "
      "with `ulimit -l unlimited`, memlock in /etc/security/limits.conf, LimitMEMLOCK= for a systemd "
      "unit, or a container's memlock limit, e.g. docker run --ulimit memlock=-1), or more page-locked "
      "memory than the machine gives (lower zoffload.pinned_fraction, offload to nvme, or set "
      "offload_optimizer/offload_param pin_memory false). To run with pageable copies anyway, set "
      "zoffload.allow_pageable_host to true",
      purpose, nbytes, left, why, lim);
}

void eng_host_buf_free(host_buf *b) {
  zo_host_free(b->ptr, b->nbytes, b->pinned);
  memset(b, 0, sizeof *b);
}

/* The combinations device Adam (offload_optimizer "none" on a GPU) does not handle yet (parameter offload;
 * gradient accumulation and several ranks it does), each refused by
 * zo_engine_check_device() with one message, so zo_engine_create and a dry run (zo-train --dry-run plans a GPU
 * run on a host device) refuse alike. */
zo_status zo_engine_check_device(const zo_config_t *cfg, zo_device_kind kind, int world) {
  if (!cfg) return zo_error_set(ZO_ERR_INVALID_ARG, "check_device: cfg is NULL");
  if (kind == ZO_DEVICE_HOST) return ZO_OK;
  const char *name = zo_device_kind_name(kind == ZO_DEVICE_AUTO ? ZO_DEVICE_CUDA : kind);
  (void)
      world; /* stage 3 on several ranks partitions offload_param "none" in device memory (engine.c) */
  if (cfg->zero.offload_optimizer.device != ZO_OFFLOAD_NONE) return ZO_OK;
  char why[256];
  if (!zo_adam_device_kind_available(kind == ZO_DEVICE_AUTO ? ZO_DEVICE_CUDA : kind, why,
                                     sizeof why))
    return zo_error_set(ZO_ERR_UNSUPPORTED,
                        "zero_optimization.offload_optimizer.device \"none\" on a %s device needs "
                        "the device Adam kernel: %s; use \"cpu\" or \"nvme\"",
                        name, why);
  /* several ranks: reduced through host buffers (engine_dp.c), added on the device */
  if (cfg->zero.offload_param.device != ZO_OFFLOAD_NONE)
    return zo_error_set(ZO_ERR_UNSUPPORTED,
                        "zero_optimization.offload_optimizer.device \"none\" on a %s device "
                        "(device Adam) needs offload_param.device \"none\", got \"%s\"",
                        name, zo_offload_device_name(cfg->zero.offload_param.device));
  return ZO_OK;
}

zo_status eng_dev_copy(zo_engine_t *e, void *dst, const void *src, size_t nbytes,
                       zo_copy_kind kind) {
  if (!nbytes) return ZO_OK;
  ZO_CHECK(zo_memcpy_async(e->copy_stream, dst, src, nbytes, kind));
  return zo_stream_synchronize(e->copy_stream);
}

zo_status eng_check_owner(const zo_engine_t *e, const char *what) {
  const long me = (long)getpid();
  if (!e || e->owner_pid == me) return ZO_OK;
  return zo_error_set(
      ZO_ERR_INVALID_USAGE,
      "zo_engine_%s: this engine was created by process %ld; a forked child "
      "(pid %ld) cannot use it (its threads and locks stay with the parent): create a new engine in "
      "the child",
      what, e->owner_pid, me);
}

zo_status eng_check_usable(const zo_engine_t *e, const char *what) {
  ZO_CHECK(eng_check_owner(e, what));
  if (!e->fin_failed) return ZO_OK;
  return zo_error_set(ZO_ERR_INVALID_USAGE,
                      "%s: zo_engine_finalize() failed on this engine; destroy it and create "
                      "another",
                      what);
}

void eng_ledger_note(zo_engine_t *e, zo_tier t, const char *purpose, size_t bytes, int pinned,
                     int path) {
  if (!bytes) return;
  for (int i = 0; i < e->n_ledger; i++) {
    zo_plan_buf *b = &e->ledger[i];
    if (!strcmp(b->purpose, purpose) && b->bytes == bytes && b->tier == t) {
      b->count++;
      return;
    }
  }
  if (e->n_ledger == ZO_PLAN_MAX_BUFS) return;
  zo_plan_buf *b = &e->ledger[e->n_ledger++];
  memset(b, 0, sizeof *b);
  b->tier = t;
  snprintf(b->purpose, sizeof b->purpose, "%s", purpose);
  b->bytes = bytes, b->count = 1, b->pinned = pinned, b->path = t == ZO_TIER_NVME ? path : -1;
}

static inline float load_el(const void *s, zo_dtype t, size_t i) {
  if (t == ZO_DTYPE_F32) return ((const float *)s)[i];
  const uint16_t h = ((const uint16_t *)s)[i];
  return t == ZO_DTYPE_BF16 ? zo_bf16_to_f32(h) : zo_f16_to_f32(h);
}

static inline void store_el(void *d, zo_dtype t, size_t i, float x) {
  if (t == ZO_DTYPE_F32)
    ((float *)d)[i] = x;
  else
    ((uint16_t *)d)[i] = t == ZO_DTYPE_BF16 ? zo_f32_to_bf16(x) : zo_f32_to_f16(x);
}

_Atomic uint64_t eng_host_func_grad_bytes;

void eng_acc_add(void *dst, zo_dtype dt, const void *src, zo_dtype st, size_t n, int add) {
  eng_note_grad_bytes(n * zo_dtype_size(st));
  if (!add && dt == st) {
    memcpy(dst, src, n * zo_dtype_size(dt));
  } else if (dt == ZO_DTYPE_F32 &&
             st == ZO_DTYPE_F32) { /* the common case, vectorized by the compiler */
    float *restrict d = dst;
    const float *restrict s = src;
    for (size_t i = 0; i < n; i++) d[i] += s[i];
  } else {
    for (size_t i = 0; i < n; i++)
      store_el(dst, dt, i, (add ? load_el(dst, dt, i) : 0.0f) + load_el(src, st, i));
  }
}

size_t eng_extent_unit(const zo_engine_t *e) { return eng_extent_unit_at(e, e->swap_align); }

/* Wait *req on @sw (optimizer state or params.swp), timed as exposed swap wait; *req becomes NULL. */
zo_status eng_swap_wait(zo_engine_t *e, zo_swap_t *sw, zo_swap_req_t **req) {
  double t0 = zo_clock_s();
  zo_status st = zo_swap_wait(sw, *req);
  *req = NULL;
  e->ctr.swap_wait_s += zo_clock_s() - t0;
  return st;
}

/* Elements of a padded extent for n elements (nvme layout). */
uint64_t eng_padded_el(const zo_engine_t *e, size_t n) {
  return zo_round_up(n, eng_extent_unit(e));
}

/*
 * A device copy is an arena block. It is pinned (never moved by a
 * compaction) from its allocation until its host-to-device copy has landed,
 * and again from zo_engine_fetch() to zo_engine_release() and around a
 * queued refresh; in between, a cached copy may be moved, so p->weights is
 * read again from the arena at every pin.
 */
zo_status eng_blk_pin(zo_engine_t *e, zo_param_t *p) {
  if (p->blk_pinned) return ZO_OK;
  zo_status st = zo_arena_pin(e->arena, p->blk, &p->weights);
  if (st != ZO_OK) return zo_error_prefix(st, "device copy of '%s'", p->name);
  p->blk_pinned = 1;
  return ZO_OK;
}

zo_status eng_blk_unpin(zo_engine_t *e, zo_param_t *p, zo_stream_t *last_use) {
  if (!p->blk_pinned) return ZO_OK;
  zo_status st = zo_arena_unpin(e->arena, p->blk, last_use);
  if (st != ZO_OK) return zo_error_prefix(st, "device copy of '%s'", p->name);
  p->blk_pinned = 0;
  return ZO_OK;
}

/* Drop a released tensor's device copy (parameter offload only). Its block
 * is reused only after the compute queued so far (the last reader) is done. */
void eng_drop_device_copy(zo_engine_t *e, zo_param_t *p) {
  /* A refresh of its new weights may still be queued on the copy stream (an
   * update that finished while compute held the tensor): let it run first. */
  if (p->ready) zo_event_synchronize(p->ready);
  if (eng_blk_unpin(e, p, NULL) != ZO_OK ||
      zo_arena_free(e->arena, p->blk, e->compute_stream) != ZO_OK)
    zo_warn("engine: freeing the device copy of '%s': %s", p->name,
            zo_last_error()); /* a bug: blocks are ours */
  p->blk = NULL;
  p->weights = NULL;
  p->pstate = P_HOST;
  e->dev_live_el -= p->n;
}
