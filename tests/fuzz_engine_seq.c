/*
 * fuzz_engine_seq.c - sequence fuzz target over the engine API on the host
 * device: the input picks a configuration (optimizer and parameter tiers,
 * stage, dtype, a tiny device limit, sub-group size) and then a sequence of
 * calls (register_param with adversarial element counts - 0, 1, 2^31+-1,
 * 2^32+-1, 2^48, 2^62, 2^63-1, SIZE_MAX - finalize, budget, load_param,
 * fetch, release, grad_ready, step, set_param_weight_decay, synchronize,
 * get_master) in an order of its choosing. Not a correctness test of the
 * numbers (test_engine is): it checks that nothing crashes, no sanitizer
 * reports, every call returns ZO_OK or a documented status with a non-empty
 * message, and that memory stays bounded: a tensor the device limit cannot
 * hold is refused at finalize, so nothing past MAX_REAL elements is ever
 * loaded, fetched or handed a gradient (abort() if it were).
 * Built like fuzz_config.c (tests/fuzz.cmake): a libFuzzer target under clang
 * (-DZO_LIBFUZZER), else tests/fuzz_driver.h's deterministic main() (fixed
 * seed) that replays the seed corpus (tests/fuzz_engine_seq/) and mutates it
 * for a number of executions or seconds, with this file's own mutation (a
 * byte overwritten; an "anything" count near a power of two inserted).
 * Prints "N executions in S s, ..., 0 crashes, 0 hangs" when done.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_driver.h"
#include "zoffload/budget.h"
#include "zoffload/config.h"
#include "zoffload/device.h"
#include "zoffload/engine.h"

enum { MAX_REAL = 1 << 19, MAX_T = 8, MAX_OPS = 96 };
static const size_t k_dev_limit[4] = {64 << 10, 256 << 10, 1 << 20, 1 << 20};

static void quiet(zo_log_level lvl, const char *msg, void *user) {
  (void)lvl, (void)msg, (void)user;
}

/* Reads the input a byte at a time; zeros past its end. */
typedef struct rd {
  const uint8_t *p;
  size_t n, at;
} rd;
static unsigned u8(rd *r) { return r->at < r->n ? r->p[r->at++] : 0; }
static uint64_t u64(rd *r) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v = v << 8 | u8(r);
  return v;
}

static size_t pick_count(rd *r) {
  static const size_t k[] = {0,
                             1,
                             2,
                             3,
                             255,
                             256,
                             1000,
                             4096,
                             65536,
                             MAX_REAL,
                             MAX_REAL + 1,
                             ((size_t)1 << 31) - 1,
                             (size_t)1 << 31,
                             ((size_t)1 << 31) + 1,
                             ((size_t)1 << 32) - 1,
                             (size_t)1 << 32,
                             ((size_t)1 << 32) + 1,
                             ZO_ENGINE_MAX_ELEMS - 1,
                             ZO_ENGINE_MAX_ELEMS,
                             ZO_ENGINE_MAX_ELEMS + 1,
                             ZO_ENGINE_MAX_ELEMS / 2,
                             (size_t)1 << 62,
                             ((size_t)1 << 62) + 1,
                             ((size_t)1 << 63) - 1,
                             (size_t)1 << 63,
                             SIZE_MAX};
  const unsigned c = u8(r);
  if (c < 128) return 1 + (c * 37u + u8(r)) % 5000; /* small real tensors */
  if (c < 224) return k[c % (sizeof k / sizeof k[0])];
  return (size_t)u64(r); /* anything */
}

/* A documented status of the engine API (engine.h, budget.h). */
static int documented(zo_status st) {
  return st == ZO_ERR_INVALID_ARG || st == ZO_ERR_INVALID_USAGE || st == ZO_ERR_OUT_OF_MEMORY ||
         st == ZO_ERR_CONFIG || st == ZO_ERR_IO || st == ZO_ERR_SYSTEM || st == ZO_ERR_UNSUPPORTED;
}

static void fail(const char *what, zo_status st) {
  fprintf(stderr, "fuzz_engine_seq: %s returned %s with message '%s'\n", what, zo_status_string(st),
          zo_last_error());
  abort();
}

/* Every call: ZO_OK, or a documented status with a message. */
static int g_verbose; /* FUZZ_VERBOSE=1: print every call's status (to check what a seed reaches) */
#define CALL(what, expr)                                                                       \
  do {                                                                                         \
    st = (expr);                                                                               \
    if (g_verbose)                                                                             \
      fprintf(stderr, "  %s: %s %s\n", what, zo_status_string(st), st ? zo_last_error() : ""); \
    if (st != ZO_OK && (!documented(st) || !zo_last_error()[0])) fail(what, st);               \
  } while (0)

static char g_dir[256];
static float *g_values, *g_out;
static void *g_host;

static void cleanup(void) { rmdir(g_dir); } /* the engines' NVMe files are gone with each engine */

#ifndef ZO_LIBFUZZER
/* The driver's mutation step for call programs: a byte overwritten, or an "anything" count (0xe0, then 8
 * bytes near a power of two) inserted at @at. */
static void mutate_program(uint8_t *b, size_t *n, size_t cap, size_t at) {
  if (fz_rnd() & 1) {
    if (at < *n) b[at] = (uint8_t)fz_rnd();
    return;
  }
  const uint64_t v = ((uint64_t)1 << (fz_rnd() % 64)) + (uint64_t)(fz_rnd() % 3) - 1;
  uint8_t c[9] = {0xe0};
  for (int i = 0; i < 8; i++) c[1 + i] = (uint8_t)(v >> (56 - 8 * i));
  fz_splice(b, n, cap, at, 0, c, sizeof c);
}
#endif

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  zo_log_set_handler(quiet, NULL, ZO_LOG_DEBUG);
  g_verbose = getenv("FUZZ_VERBOSE") && getenv("FUZZ_VERBOSE")[0] == '1';
  const char *t = getenv("TMPDIR");
  snprintf(g_dir, sizeof g_dir, "%s/zo-fuzz-engine.XXXXXX", t && t[0] ? t : "/tmp");
  if (!mkdtemp(g_dir)) abort();
  atexit(cleanup);
  g_values = calloc(MAX_REAL, sizeof *g_values);
  g_out = calloc(MAX_REAL, sizeof *g_out);
  g_host = calloc(MAX_REAL, 4);
  if (!g_values || !g_out || !g_host) abort();
  for (size_t i = 0; i < MAX_REAL; i++) g_values[i] = (float)(i % 97) * 0.01f - 0.5f;
#ifndef ZO_LIBFUZZER
  g_fz_mutate_custom = mutate_program;
#endif
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  rd r = {data, size, 0};
  zo_status st;

  /* The configuration. */
  const unsigned c0 = u8(&r), c1 = u8(&r);
  zo_config_t cfg;
  zo_config_defaults(&cfg);
  cfg.train_batch_size = cfg.train_micro_batch_size_per_gpu = cfg.gradient_accumulation_steps = 1;
  cfg.optimizer.type = ZO_OPT_ADAMW;
  cfg.optimizer.adam_w_mode = 1;
  cfg.optimizer.lr = 1e-3;
  cfg.zoffload.adam_threads = 1;
  static const zo_offload_device tiers[3] = {ZO_OFFLOAD_NONE, ZO_OFFLOAD_CPU, ZO_OFFLOAD_NVME};
  cfg.zero.offload_optimizer.device = tiers[c0 % 3];
  cfg.zero.offload_param.device = tiers[(c0 / 3) % 3];
  cfg.zero.stage = cfg.zero.offload_param.device != ZO_OFFLOAD_NONE ? 3 : (int)((c0 / 9) % 4);
  cfg.bf16.enabled = (c0 / 36) & 1;
  cfg.zoffload.delayed_param_update = (c0 / 72) & 1 &&
                                      cfg.zero.offload_optimizer.device != ZO_OFFLOAD_NONE &&
                                      cfg.zero.offload_param.device == ZO_OFFLOAD_NONE;
  cfg.zoffload.delayed_param_update_warmup_steps =
      (c0 / 144) & 1; /* the switch inside the sequence */
  cfg.zero.offload_optimizer.pin_memory = c1 & 1;
  cfg.zero.sub_group_size =
      (c1 >> 1) & 1 ? (int64_t)1 << 26 : 1000000000; /* plan arrays stay small */
  cfg.zero.offload_optimizer.buffer_count = 1 + (int)((c1 >> 2) & 3);
  cfg.zero.offload_param.buffer_count = 1 + (int)((c1 >> 4) & 3);
  cfg.gradient_clipping = (c1 >> 6) & 1 ? 1.0 : 0.0;
  cfg.zoffload.device_arena_bytes = (c1 >> 7) & 1 ? ZO_ARENA_FIT : 0;
  snprintf(cfg.zero.offload_optimizer.nvme_path, sizeof cfg.zero.offload_optimizer.nvme_path, "%s",
           g_dir);
  snprintf(cfg.zero.offload_param.nvme_path, sizeof cfg.zero.offload_param.nvme_path, "%s", g_dir);
  const size_t limit = k_dev_limit[(c1 >> 2) & 3];

  /* The device: the gradient scratch first, then `limit` bytes left for the engine. */
  zo_device_t *dev = NULL;
  void *grad = NULL;
  if (zo_device_create(ZO_DEVICE_HOST, 0, limit + (size_t)MAX_REAL * 4, &dev) != ZO_OK) abort();
  if (zo_device_malloc(dev, (size_t)MAX_REAL * 4, &grad) != ZO_OK) abort();
  if (zo_memcpy(dev, grad, g_host, (size_t)MAX_REAL * 4, ZO_COPY_H2D) != ZO_OK) abort();
  zo_engine_t *e = NULL;
  CALL("zo_engine_create", zo_engine_create(&cfg, dev, NULL, &e));
  if (st != ZO_OK) goto out;

  zo_param_t *ps[MAX_T] = {0};
  int finalized = 0;
  for (int op = 0; op < MAX_OPS && r.at < r.n; op++) {
    const unsigned o = u8(&r), i = u8(&r) % MAX_T;
    zo_param_t *p = ps[i];
    char name[16];
    switch (o % 12) {
      case 0:
      case 1: {                                                   /* register */
        snprintf(name, sizeof name, "t%u", u8(&r) % (MAX_T + 2)); /* some names repeat */
        const size_t n = pick_count(&r);
        zo_param_t *np = NULL;
        CALL("register_param", zo_engine_register_param(e, name, n, &np));
        if (st == ZO_OK) {
          if (!np || zo_engine_param_numel(np) != n) abort();
          if (n > ZO_ENGINE_MAX_ELEMS) fail("register_param past ZO_ENGINE_MAX_ELEMS", st);
          ps[i] = np;
        }
        break;
      }
      case 2:
        CALL("finalize", zo_engine_finalize(e));
        if (st == ZO_OK) {
          finalized = 1;
          /* Bounded memory: the device limit refuses every tensor past MAX_REAL elements. */
          for (int k = 0; k < MAX_T; k++)
            if (ps[k] && zo_engine_param_numel(ps[k]) > MAX_REAL)
              fail("finalize with a tensor past MAX_REAL", st);
        }
        break;
      case 3: {
        static const size_t apps[4] = {0, 4096, SIZE_MAX / 2, SIZE_MAX};
        size_t app[4] = {apps[u8(&r) & 3], apps[u8(&r) & 3], apps[u8(&r) & 3], 0};
        zo_budget b;
        CALL("budget", zo_engine_budget(e, (o / 12) & 1 ? app : NULL, &b));
        if (st == ZO_OK && b.n_lines > ZO_BUDGET_MAX_LINES) abort();
        break;
      }
      case 4:
        if (p) CALL("load_param", zo_engine_load_param(e, p, g_values));
        break;
      case 5:
        if (p) {
          const void *w = NULL;
          zo_dtype dt;
          CALL("fetch", zo_engine_fetch(e, p, &w, &dt));
          if (st == ZO_OK) {
            const size_t n = zo_engine_param_numel(p), esz = zo_dtype_size(dt);
            if (!w || n > MAX_REAL) fail("fetch of a tensor past MAX_REAL", st);
            /* The whole tensor is device memory: its last element copies back. */
            if (zo_memcpy(dev, g_out, (const char *)w + (n - 1) * esz, esz, ZO_COPY_D2H) != ZO_OK)
              fail("fetch: weights not in device memory", st);
          }
        }
        break;
      case 6:
        if (p) CALL("release", zo_engine_release(e, p));
        break;
      case 7:
        if (p) {
          if (finalized && zo_engine_param_numel(p) > MAX_REAL)
            fail("grad_ready on a tensor past MAX_REAL", st);
          static const zo_dtype dts[4] = {ZO_DTYPE_F32, ZO_DTYPE_BF16, ZO_DTYPE_F16, ZO_DTYPE_F32};
          const zo_dtype dt = (o / 12) & 1 ? dts[u8(&r) & 3] : zo_engine_grad_dtype(e);
          CALL("grad_ready", zo_engine_grad_ready(e, p, grad, dt));
        }
        break;
      case 8: {
        zo_step_info info;
        CALL("step", zo_engine_step(e, &info));
        break;
      }
      case 9:
        if (p)
          CALL("set_param_weight_decay",
               zo_engine_set_param_weight_decay(e, p, (double)(int)u8(&r) * 0.01 - 0.2));
        break;
      case 10: CALL("synchronize", zo_engine_synchronize(e)); break;
      case 11:
        if (p && zo_engine_param_numel(p) <= MAX_REAL) {
          size_t off = 0, n = 0;
          CALL("get_master", zo_engine_get_master(e, p, g_out, &off, &n));
        }
        break;
    }
  }
  zo_engine_mem m;
  if (finalized) CALL("mem_info", zo_engine_mem_info(e, &m));
out:
  zo_engine_destroy(e);
  zo_device_free(dev, grad);
  zo_device_destroy(dev);
  return 0;
}
