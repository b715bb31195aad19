/*
 * test_engine_states.c - zo_engine_offload_states() / zo_engine_reload_states() (engine_states.c). Each case trains
 * engine B for two steps, offloads, checks the device's own counters (zo_device_mem_info of the engine's device:
 * the test's gradient buffers live on a second handle, so the engine's bytes are all it counts), checks which calls
 * are refused while offloaded (named), reloads, checks the master and working weights are the bits they were, and
 * trains two more steps, comparing every step's gradient norm and every tensor's master and working weights bit for
 * bit with engine A, trained the same four steps straight through:
 *   host    the host device, offload_optimizer "none" (everything in the arena), everything offloaded;
 *   keep    the same, offloading all but lp_params: fetch still works (at the kept allocation), step does not;
 *   param   stage 3 with offload_param and offload_optimizer "cpu": the device copies (persistent, cached) dropped,
 *           the arena given back, fetched again after the reload;
 *   cuda    the stand-in CUDA runtime with device Adam's kernels emulated (devadam_emu.h) and device memory the
 *           host cannot touch (FAKE_CUDA_DEVICE_NOACCESS), everything offloaded, then all but lp_params.
 * Also: offloading mid-step (after a gradient's hand-over) or with a tensor fetched is refused and changes nothing.
 * The cuda case skips (the others run) where the stand-in is not loaded.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zo_test.h"
#include "zoffload/config.h"
#include "zoffload/engine.h"

enum { NP = 4, STEPS = 2 };
static const size_t k_sizes[NP] = {1000, 3, 70001, 4097};
static zo_comm_t *g_comm;
static zo_comm_t *g_boot;       /* --comm nccl: the launcher's MPI, bootstrapping NCCL */
static zo_device_t *g_comm_dev; /* --comm nccl: the communicator's device handle */
static int g_ordinal;           /* the GPU of this rank: 0, or with --comm nccl the local rank's */
static int W = 1, R = 0;        /* ranks (mpirun -np 2: test_engine_states_np2) and this one */

#if ZO_TEST_DEVADAM_EMU
#include "devadam_emu.h"
#endif
#include "grad_harness.h"

typedef struct tcase {
  const char *label;
  zo_device_kind kind;
  int param_offload; /* stage 3, offload_param and offload_optimizer "cpu" */
  unsigned kinds;    /* what offload_states names */
} tcase;

/* An engine on its device handle @dev, the gradient buffers on @gdev: another handle of the same GPU on CUDA, whose
 * counters are its own; on the host device (whose handles are separate emulated devices) @dev itself, their
 * @buf_bytes then subtracted from its counter. */
typedef struct rig {
  zo_device_t *dev, *gdev;
  size_t buf_bytes;
  eng g;
} rig;

static int rig_open(rig *r, const tcase *tc) {
  memset(r, 0, sizeof *r);
  const size_t limit = tc->kind == ZO_DEVICE_HOST ? (size_t)64 << 20 : (size_t)256 << 20;
  const int ordinal = tc->kind == ZO_DEVICE_CUDA ? g_ordinal : 0;
  if (!CHECK_OK(zo_device_create(tc->kind, ordinal, limit, &r->dev))) return 1;
  if (tc->kind == ZO_DEVICE_HOST)
    r->gdev = r->dev;
  else if (!CHECK_OK(zo_device_create(tc->kind, ordinal, 0, &r->gdev)))
    return 1;
  /* the gradient buffers before the engine's arena takes the device (all of a host device) */
  size_t used0 = 0, used1 = 0;
  zo_device_mem_info(r->dev, &used0, NULL, NULL);
  for (int i = 0; i < NP; i++)
    if (!CHECK_OK(zo_device_malloc(r->gdev, k_sizes[i] * 4, &r->g.dbuf[i]))) return 1;
  zo_device_mem_info(r->dev, &used1, NULL, NULL);
  r->buf_bytes = used1 - used0;
  zo_config_t c;
  grad_adamw_config(&c, 1);
  c.gradient_clipping =
      1.0; /* the norms are ~10-300: every step clips (device Adam's norm partials used) */
  c.zero.offload_optimizer.device = tc->param_offload ? ZO_OFFLOAD_CPU : ZO_OFFLOAD_NONE;
  if (tc->param_offload) {
    c.zero.stage = 3;
    c.zero.offload_param.device = ZO_OFFLOAD_CPU;
  }
  return eng_open_params(&r->g, &c, r->dev, NULL);
}

static void rig_close(rig *r) {
  zo_engine_destroy(r->g.e);
  for (int i = 0; i < NP; i++)
    if (r->g.dbuf[i]) zo_device_free(r->gdev, r->g.dbuf[i]);
  if (r->gdev != r->dev) zo_device_destroy(r->gdev);
  zo_device_destroy(r->dev);
}

static size_t dev_used(const rig *r) {
  size_t used = 0;
  zo_device_mem_info(r->dev, &used, NULL, NULL);
  return used - r->buf_bytes; /* the engine's bytes */
}

/* One step: every tensor fetched and released (a forward), then its gradient handed over. */
static int train_step(rig *r, int s, zo_step_info *info) {
  eng *g = &r->g;
  for (int i = 0; i < NP; i++) {
    const void *w;
    if (!CHECK_OK(zo_engine_fetch(g->e, g->ps[i], &w, NULL)) ||
        !CHECK_OK(zo_engine_release(g->e, g->ps[i])))
      return 1;
  }
  for (int i = NP - 1; i >= 0; i--) {
    float *f = malloc(k_sizes[i] * 4);
    for (size_t j = 0; j < k_sizes[i]; j++) f[j] = grad_of(R, s, 0, i, j);
    int bad = !CHECK_OK(zo_memcpy(r->gdev, g->dbuf[i], f, k_sizes[i] * 4, ZO_COPY_H2D)) ||
              !CHECK_OK(zo_engine_grad_ready(g->e, g->ps[i], g->dbuf[i], ZO_DTYPE_F32)) ||
              !CHECK_OK(zo_engine_grad_fence(g->e, NULL));
    free(f);
    if (bad) return 1;
  }
  if (!CHECK_OK(zo_engine_step(g->e, info))) {
    printf("  %s\n", zo_last_error());
    return 1;
  }
  return 0;
}

/* Every tensor's master shard (this rank's) and working weights, in one buffer per tensor (the master floats from
 * 0, the weights from element n). */
typedef struct snap {
  unsigned char *b[NP];
} snap;

static int take(rig *r, snap *sn) {
  eng *g = &r->g;
  if (!CHECK_OK(zo_engine_set_trace(g->e, 0))) return 1; /* fetches outside the step's order */
  for (int i = 0; i < NP; i++) {
    const size_t n = k_sizes[i];
    sn->b[i] = calloc(1, n * 8);
    size_t off = 0, cnt = 0;
    const void *w;
    if (!CHECK_OK(zo_engine_get_master(g->e, g->ps[i], (float *)sn->b[i], &off, &cnt)) ||
        !CHECK(cnt <= n) || !CHECK_OK(zo_engine_fetch(g->e, g->ps[i], &w, NULL)) ||
        !CHECK_OK(zo_memcpy(r->dev, sn->b[i] + n * 4, w, n * 4, ZO_COPY_D2H)) ||
        !CHECK_OK(zo_engine_release(g->e, g->ps[i])))
      return 1;
  }
  return !CHECK_OK(zo_engine_set_trace(g->e, 1));
}

static int same(const char *what, const snap *a, const snap *b) {
  for (int i = 0; i < NP; i++)
    if (memcmp(a->b[i], b->b[i], k_sizes[i] * 8))
      return FAIL_AT("%s: t%d's master or working weights differ", what, i);
  return 0;
}

static void snap_free(snap *sn) {
  for (int i = 0; i < NP; i++) free(sn->b[i]);
}

/* The calls that need the moved memory are refused, naming the offloaded kinds; @fetch_ok: fetch still works. */
static void refused_while_offloaded(rig *r, int fetch_ok) {
  eng *g = &r->g;
  zo_step_info info;
  const void *w;
  float m[3];
  CHECK_ST(zo_engine_step(g->e, &info), ZO_ERR_INVALID_USAGE);
  CHECK_HAS(zo_last_error(), "offloaded");
  CHECK_HAS(zo_last_error(), "reload_states");
  CHECK_ST(zo_engine_grad_ready(g->e, g->ps[0], g->dbuf[0], ZO_DTYPE_F32), ZO_ERR_INVALID_USAGE);
  CHECK_HAS(zo_last_error(), "zo_engine_grad_ready");
  CHECK_ST(zo_engine_get_master(g->e, g->ps[1], m, NULL, NULL), ZO_ERR_INVALID_USAGE);
  if (fetch_ok) {
    CHECK_OK(zo_engine_fetch(g->e, g->ps[0], &w, NULL));
    CHECK_OK(zo_engine_release(g->e, g->ps[0]));
  } else {
    CHECK_ST(zo_engine_fetch(g->e, g->ps[0], &w, NULL), ZO_ERR_INVALID_USAGE);
    CHECK_HAS(zo_last_error(), "lp_params");
  }
  zo_engine_mem m2; /* still answered */
  CHECK_OK(zo_engine_mem_info(g->e, &m2));
}

static void run_case(const tcase *tc) {
  rig a = {0}, b = {0};
  void *other = NULL; /* another user's device memory while offloaded */
  snap before = {0}, after = {0}, sa = {0}, sb = {0};
  const int failures0 = zo_test_failures;
  if (rig_open(&a, tc) || rig_open(&b, tc)) goto out;
  zo_step_info ia, ib;
  for (int s = 0; s < STEPS; s++)
    if (train_step(&a, s, &ia) || train_step(&b, s, &ib)) goto out;
  const size_t used0 = dev_used(&b);
  if (take(&b, &before)) goto out;
  const void *w;
  if (tc->param_offload) { /* a tensor still fetched */
    if (!CHECK_OK(zo_engine_set_trace(b.g.e, 0)) ||
        !CHECK_OK(zo_engine_fetch(b.g.e, b.g.ps[2], &w, NULL)))
      goto out;
    CHECK_ST(zo_engine_offload_states(b.g.e, tc->kinds, 1), ZO_ERR_INVALID_USAGE);
    CHECK_HAS(zo_last_error(), "'t2' is fetched");
    if (!CHECK_OK(zo_engine_release(b.g.e, b.g.ps[2])) || !CHECK_OK(zo_engine_set_trace(b.g.e, 1)))
      goto out;
  }
  zo_states_info si;
  CHECK_OK(zo_engine_states_info(b.g.e, &si));
  const unsigned held = tc->param_offload ? ZO_STATES_LP_PARAMS /* the cache of copies */
                        : tc->kind == ZO_DEVICE_CUDA
                            ? ZO_STATES_ALL /* device Adam's norm partials too */
                            : ZO_STATES_ALL & ~ZO_STATES_GRAD_BUFFER;
  CHECK_EQ(si.held, held);
  CHECK_EQ(si.offloaded, 0);
  CHECK_ST(zo_engine_offload_states(b.g.e, 0, 1), ZO_ERR_INVALID_ARG);
  CHECK_ST(zo_engine_offload_states(b.g.e, 0x40, 1), ZO_ERR_INVALID_ARG);

  /* offload */
  if (!CHECK_OK(zo_engine_offload_states(b.g.e, tc->kinds, 1))) {
    printf("  %s\n", zo_last_error());
    goto out;
  }
  /* another model takes device memory meanwhile (on CUDA, where the device has room for both): likely where the
   * arena was, so the engine's memory comes back at other addresses, which every pointer into it must follow */
  if (tc->kind == ZO_DEVICE_CUDA && !CHECK_OK(zo_device_malloc(b.gdev, (size_t)16 << 20, &other)))
    goto out;
  const size_t used1 = dev_used(&b);
  zo_engine_mem mi;
  CHECK_OK(zo_engine_states_info(b.g.e, &si));
  CHECK_OK(zo_engine_mem_info(b.g.e, &mi));
  CHECK_EQ(si.offloaded, held & tc->kinds);
  CHECK_EQ(si.held, held & ~tc->kinds); /* the kept kinds */
  CHECK(tc->param_offload ? si.host_bytes == 0
                          : si.host_bytes > 0); /* param: nothing but copies (dropped) */
  CHECK(si.released_bytes > 0);
  CHECK_EQ(used1, si.kept_device_bytes); /* the arena went back; only the kept allocation is left */
  CHECK_EQ(mi.device_bytes, si.kept_device_bytes);
  CHECK(mi.host_bytes >= si.host_bytes);
  CHECK_EQ(mi.arena.capacity, 0);
  const int keep_lp = !(tc->kinds & ZO_STATES_LP_PARAMS);
  if (keep_lp)
    CHECK(si.kept_device_bytes >= k_sizes[2] * 4); /* the working weights, at least */
  else
    CHECK_EQ(used1, 0);
  refused_while_offloaded(&b, keep_lp && !tc->param_offload);
  CHECK_OK(zo_engine_offload_states(b.g.e, tc->kinds, 1)); /* again, naming nothing more: a no-op */
  if (keep_lp) { /* naming more than is offloaded: refused */
    CHECK_ST(zo_engine_offload_states(b.g.e, ZO_STATES_ALL, 1), ZO_ERR_INVALID_USAGE);
    CHECK_HAS(zo_last_error(), "lp_params");
  }

  /* reload */
  if (!CHECK_OK(zo_engine_reload_states(b.g.e))) {
    printf("  %s\n", zo_last_error());
    goto out;
  }
  CHECK_OK(zo_engine_reload_states(b.g.e)); /* nothing offloaded: a no-op */
  if (other) zo_device_free(b.gdev, other), other = NULL;
  const size_t used2 = dev_used(&b);
  CHECK_EQ(used2, used0);
  const size_t host_bytes = si.host_bytes;
  const int pinned = si.host_pinned;
  CHECK_OK(zo_engine_states_info(b.g.e, &si));
  CHECK_EQ(si.offloaded, 0);
  if (take(&b, &after)) goto out;
  same("after the reload", &before, &after);

  /* training goes on as without the round trip */
  double norms[STEPS];
  for (int s = STEPS; s < 2 * STEPS; s++) {
    if (train_step(&a, s, &ia) || train_step(&b, s, &ib)) goto out;
    if (memcmp(&ia.grad_norm, &ib.grad_norm, sizeof(double)))
      FAIL_AT("%s step %d: grad norm %.17g, without the round trip %.17g", tc->label, s + 1,
              ib.grad_norm, ia.grad_norm);
    norms[s - STEPS] = ib.grad_norm;
  }
  if (take(&a, &sa) || take(&b, &sb)) goto out;
  same("two steps after the reload", &sa, &sb);
  if (zo_test_failures == failures0)
    printf(
        "test_engine_states: rank %d/%d: %-6s kinds 0x%02x: device bytes in use %zu -> %zu (offloaded) -> %zu "
        "(reloaded); host copy %zu bytes (%s); weights and state bit-exact after the reload; steps %d-%d: "
        "grad norms %.6f %.6f, equal to the run without the round trip\n",
        R, W, tc->label, tc->kinds, used0, used1, used2, host_bytes, pinned ? "pinned" : "pageable",
        STEPS + 1, 2 * STEPS, norms[0], norms[1]);
out:
  if (other) zo_device_free(b.gdev, other);
  snap_free(&before), snap_free(&after), snap_free(&sa), snap_free(&sb);
  rig_close(&a);
  rig_close(&b);
}

/* Offloading while a gradient of the step is handed over: refused, nothing moved, and the step completes. */
static void mid_step(void) {
  const tcase tc = {"mid", ZO_DEVICE_HOST, 0, ZO_STATES_ALL};
  rig r = {0};
  if (rig_open(&r, &tc)) goto out;
  float *f = calloc(k_sizes[0], 4);
  CHECK_OK(zo_memcpy(r.gdev, r.g.dbuf[0], f, k_sizes[0] * 4, ZO_COPY_H2D));
  free(f);
  const size_t used0 = dev_used(&r);
  CHECK_OK(zo_engine_grad_ready(r.g.e, r.g.ps[0], r.g.dbuf[0], ZO_DTYPE_F32));
  CHECK_ST(zo_engine_offload_states(r.g.e, ZO_STATES_ALL, 1), ZO_ERR_INVALID_USAGE);
  CHECK_HAS(zo_last_error(), "handed over since the last step");
  CHECK_EQ(dev_used(&r), used0);
  for (int i = 1; i < NP; i++) {
    f = calloc(k_sizes[i], 4);
    CHECK_OK(zo_memcpy(r.gdev, r.g.dbuf[i], f, k_sizes[i] * 4, ZO_COPY_H2D));
    free(f);
    CHECK_OK(zo_engine_grad_ready(r.g.e, r.g.ps[i], r.g.dbuf[i], ZO_DTYPE_F32));
  }
  CHECK_OK(zo_engine_step(r.g.e, NULL));
  if (CHECK_OK(zo_engine_offload_states(r.g.e, ZO_STATES_ALL, 0)) && CHECK_EQ(dev_used(&r), 0))
    printf(
        "test_engine_states: rank %d/%d: mid-step offload refused (\"handed over since the last step\"); "
        "after the step: device bytes %zu -> 0\n",
        R, W, used0);
out:
  rig_close(&r);
}

/* The device with less room at reload: a smaller arena when the engine's need still fits (device_arena_bytes
 * unset), else ZO_ERR_OUT_OF_MEMORY naming the bytes with the engine still offloaded and reloadable later; and the
 * host copy pageable when the pinned budget (ZO_TEST_MEMTOTAL standing in for MemTotal) has no room. */
static void room(void) {
  const tcase tc = {"room", ZO_DEVICE_HOST, 0, ZO_STATES_ALL};
  rig r = {0};
  snap before = {0}, after = {0};
  void *fill = NULL;
  if (rig_open(&r, &tc)) goto out;
  zo_step_info info;
  if (train_step(&r, 0, &info) || take(&r, &before)) goto out;
  zo_engine_mem m0, m1;
  zo_states_info si;
  CHECK_OK(zo_engine_mem_info(r.g.e, &m0));
  setenv("ZO_TEST_MEMTOTAL", "1048576", 1); /* 85% of 1 MiB: less than the copy */
  const zo_status st = zo_engine_offload_states(r.g.e, ZO_STATES_ALL, 1);
  unsetenv("ZO_TEST_MEMTOTAL");
  if (!CHECK_OK(st)) goto out;
  CHECK_OK(zo_engine_states_info(r.g.e, &si));
  CHECK_EQ(si.host_pinned, 0);
  /* another user takes most of the device: too little is left for the engine's need */
  size_t avail = 0;
  CHECK_OK(zo_device_mem_available(r.dev, &avail));
  if (!CHECK_OK(zo_device_malloc(r.dev, avail - 4096, &fill))) goto out;
  CHECK_ST(zo_engine_reload_states(r.g.e), ZO_ERR_OUT_OF_MEMORY);
  CHECK_HAS(zo_last_error(), "reload_states: the engine needs");
  CHECK_HAS(zo_last_error(), "the engine stays offloaded");
  CHECK_OK(zo_engine_states_info(r.g.e, &si));
  CHECK_EQ(si.offloaded, ZO_STATES_ALL & ~ZO_STATES_GRAD_BUFFER);
  CHECK_ST(zo_engine_step(r.g.e, &info), ZO_ERR_INVALID_USAGE);
  /* it gives some back: room for the engine's need, not for the arena it had */
  zo_device_free(r.dev, fill);
  if (!CHECK_OK(zo_device_malloc(r.dev, avail / 2, &fill))) goto out;
  if (!CHECK_OK(zo_engine_reload_states(r.g.e))) goto out;
  CHECK_OK(zo_engine_mem_info(r.g.e, &m1));
  CHECK(m1.arena.capacity < m0.arena.capacity);
  CHECK(m1.arena.capacity >= m0.device_bytes);
  if (take(&r, &after)) goto out;
  same("after a reload into a smaller arena", &before, &after);
  if (!train_step(&r, 1, &info) && zo_test_failures == 0)
    printf(
        "test_engine_states: rank %d/%d: room: host copy pageable past the pinned budget; reload refused with 4096 bytes "
        "free (still offloaded), then into an arena of %zu bytes instead of %zu: bit-exact, trains on\n",
        R, W, m1.arena.capacity, m0.arena.capacity);
out:
  if (fill) zo_device_free(r.dev, fill);
  snap_free(&before), snap_free(&after);
  rig_close(&r);
}

/* `--comm nccl`: the engines' communicator is NCCL, bootstrapped over the launcher's MPI, one GPU per rank (the
 * stand-in's fake libnccl under test_engine_states_nccl_fake_npN): 1 to run the cuda cases only, 77 to skip, -1 on
 * an error. */
static int comm_nccl(void) {
  zo_status st = zo_comm_create_from_env(&g_boot);
  if (st == ZO_OK) st = zo_device_local_ordinal(zo_device_cuda_count(), &g_ordinal);
  if (st == ZO_OK) st = zo_device_create(ZO_DEVICE_CUDA, g_ordinal, 0, &g_comm_dev);
  if (st == ZO_OK) st = zo_comm_create_nccl(g_comm_dev, g_boot, &g_comm);
  if (st == ZO_ERR_UNSUPPORTED) {
    printf("test_engine_states: SKIP: %s\n", zo_last_error());
    return ZO_TEST_SKIP;
  }
  return CHECK_OK(st) ? 1 : -1;
}

int main(int argc, char **argv) {
  /* grad_harness.h's, not used here (rig_open, fp32 gradients) */
  (void)eng_open, (void)eng_close, (void)cast_to;
  int nccl = 0;
  if (argc > 2 && !strcmp(argv[1], "--comm") && !strcmp(argv[2], "nccl")) {
    nccl = comm_nccl();
    if (nccl == ZO_TEST_SKIP) return ZO_TEST_SKIP;
    if (nccl < 0) return zo_test_finish("test_engine_states");
  } else if (argc > 1) {
    fprintf(stderr, "usage: test_engine_states [--comm nccl]\n");
    return 2;
  } else if (!CHECK_OK(zo_comm_create_from_env(&g_comm))) {
    return zo_test_finish("test_engine_states");
  }
  R = zo_comm_rank(g_comm), W = zo_comm_size(g_comm);
  const tcase host[] = {
      {"host", ZO_DEVICE_HOST, 0, ZO_STATES_ALL},
      {"keep", ZO_DEVICE_HOST, 0, ZO_STATES_ALL & ~ZO_STATES_LP_PARAMS},
      {"param", ZO_DEVICE_HOST, 1, ZO_STATES_ALL},
  };
  for (size_t i = 0; i < sizeof host / sizeof host[0] && !nccl; i++) run_case(&host[i]);
  if (!nccl) mid_step(), room();
#if ZO_TEST_DEVADAM_EMU
  if (devadam_emu_install() == 1 && zo_device_cuda_count() > 0) {
    const tcase cuda[] = {
        {"cuda", ZO_DEVICE_CUDA, 0, ZO_STATES_ALL},
        {"cuda-k", ZO_DEVICE_CUDA, 0, ZO_STATES_ALL & ~ZO_STATES_LP_PARAMS},
    };
    const unsigned long adam0 = devadam_emu_adam_runs;
    for (size_t i = 0; i < sizeof cuda / sizeof cuda[0]; i++) run_case(&cuda[i]);
    CHECK(devadam_emu_adam_runs > adam0); /* device Adam really ran */
  } else {
    printf(
        "test_engine_states: the stand-in CUDA runtime with kernel emulation is not loaded: cuda cases "
        "skipped\n");
  }
#endif
  zo_comm_destroy(g_comm);
  zo_comm_destroy(g_boot);
  zo_device_destroy(g_comm_dev);
  return zo_test_finish("test_engine_states");
}
