/*
 * test_placement.c - the placement planner and the step-time model (zoffload/placement.h) on the engine itself,
 * with the rates given (no measurement): parameters and optimizer state on nvme, 12 tensors of 100,000 elements,
 * sub-groups of 65,536 elements, two buffer sets.
 *  - the model: as zoffload.optimizer_max_in_cpu keeps more sub-groups in host memory, the predicted state traffic
 *    falls to 0 and the predicted step never rises; caching working weights removes their reads; the bytes the
 *    model counts are the plan's (the state written back each step is the streamed sub-groups' state);
 *  - the planner ("placement": "auto") within a host room it is given (zoffload.placement_host_bytes): a room of
 *    0 keeps nothing, a room that holds a few sub-groups keeps that many and no more bytes than the room, an
 *    unlimited one keeps everything; "config" keeps the config's budgets and only predicts;
 *  - after finalize the engine allocates what was placed and zo_engine_predict() gives the placement's prediction.
 * usage: test_placement [SCRATCH_BASE]   Exit 0 pass, 1 fail, 77 skip.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "zo_test.h"
#include "zoffload/config.h"
#include "zoffload/engine.h"
#include "zoffload/placement.h"
#include "zoffload/plan.h"

enum { NP = 12 };
#define N_EL ((size_t)100000)
static char g_dir[4096];

static const zo_step_rates k_rates = {.nvme_read_Bps = 1e9,
                                      .nvme_write_Bps = 2e9,
                                      .h2d_Bps = 1e10,
                                      .d2h_Bps = 1e10,
                                      .adam_el_per_s = 1e9,
                                      .compute_s = 0.01};

static zo_engine_t *make(int placement_auto, int64_t opt_res, int64_t param_cache,
                         int64_t host_bytes) {
  zo_config_t c;
  zo_config_defaults(&c);
  c.train_batch_size = c.train_micro_batch_size_per_gpu = c.gradient_accumulation_steps = 1;
  c.bf16.enabled = 1;
  c.gradient_clipping = 1.0;
  c.zero.stage = 3;
  c.zero.sub_group_size = 65536;
  c.zero.stage3_param_persistence_threshold = 10;
  c.zero.offload_optimizer.device = ZO_OFFLOAD_NVME;
  c.zero.offload_optimizer.buffer_count = 2;
  c.zero.offload_param.device = ZO_OFFLOAD_NVME;
  c.zero.offload_param.buffer_size = (int64_t)N_EL;
  if (param_cache >= 0)
    c.zero.offload_param.max_in_cpu = param_cache, c.zero.offload_param.max_in_cpu_set = 1;
  c.zoffload.device_kind = ZO_DEVICE_HOST;
  c.zoffload.adam_threads = 1;
  c.zoffload.placement = placement_auto ? ZO_PLACEMENT_AUTO : ZO_PLACEMENT_CONFIG;
  c.zoffload.optimizer_max_in_cpu = opt_res;
  c.zoffload.placement_host_bytes = host_bytes;
  snprintf(c.zero.offload_optimizer.nvme_path, sizeof c.zero.offload_optimizer.nvme_path, "%s",
           g_dir);
  snprintf(c.zero.offload_param.nvme_path, sizeof c.zero.offload_param.nvme_path, "%s", g_dir);
  zo_engine_t *e = NULL;
  if (!CHECK_OK(zo_engine_create(&c, NULL, NULL, &e))) return NULL;
  for (int i = 0; i < NP; i++) {
    char name[32];
    snprintf(name, sizeof name, "t%d", i);
    zo_param_t *p;
    if (!CHECK_OK(zo_engine_register_param(e, name, N_EL, &p))) {
      zo_engine_destroy(e);
      return NULL;
    }
  }
  return e;
}

/* The model over optimizer_max_in_cpu from 0 to everything: state traffic down to 0, the step never up. */
static void model_over_residency(void) {
  double last = INFINITY;
  uint64_t last_state = UINT64_MAX;
  for (int64_t res = 0; res <= (int64_t)(NP * N_EL) * 2; res += (int64_t)(NP * N_EL) / 4) {
    zo_engine_t *e = make(0, res, -1, 0);
    if (!e) return;
    zo_step_prediction pr;
    zo_plan *pl = NULL;
    if (CHECK_OK(zo_engine_predict(e, &k_rates, &pr)) &&
        CHECK_OK(zo_engine_plan(e, ZO_DEVICE_AUTO, &pl))) {
      CHECK(isfinite(pr.step_s) && pr.step_s > 0);
      CHECK(pr.step_s <= last * (1 + 1e-12));
      /* the state written back each step: every streamed sub-group's master and moments */
      CHECK_EQ((long long)pr.state_write_bytes, (long long)(pl->state_file_el * pl->state_esz));
      if (last_state != UINT64_MAX) CHECK(pr.state_read_bytes <= last_state);
      if (res >= (int64_t)(NP * N_EL) * 2)
        CHECK_EQ((long long)pr.state_read_bytes + (long long)pr.state_write_bytes, 0);
      printf(
          "ok: optimizer_max_in_cpu %lld: %d of %d sub-groups resident, predicted step %.3f ms, state read %llu "
          "written %llu B\n",
          (long long)res, pl->n_res_sgs, pl->n_sgs, pr.step_s * 1e3,
          (unsigned long long)pr.state_read_bytes, (unsigned long long)pr.state_write_bytes);
      last = pr.step_s, last_state = pr.state_read_bytes;
    }
    zo_plan_free(pl);
    zo_engine_destroy(e);
  }
  /* caching every working weight removes their reads and writes */
  zo_step_prediction p[2];
  for (int k = 0; k < 2; k++) { /* one engine at a time: they share the nvme path */
    zo_engine_t *e = make(0, 0, k ? (int64_t)(NP * N_EL) : -1, 0);
    if (!e || !CHECK_OK(zo_engine_predict(e, &k_rates, &p[k]))) {
      zo_engine_destroy(e);
      return;
    }
    zo_engine_destroy(e);
  }
  CHECK(p[0].param_read_bytes > 0 && p[0].param_write_bytes > 0);
  CHECK_EQ((long long)p[1].param_read_bytes + (long long)p[1].param_write_bytes, 0);
  CHECK(p[1].step_s < p[0].step_s);
  printf(
      "ok: every working weight cached: predicted step %.3f ms (none cached %.3f ms), params.swp read 0 (%llu B)\n",
      p[1].step_s * 1e3, p[0].step_s * 1e3, (unsigned long long)p[0].param_read_bytes);
}

/* The planner within a given room. */
static void planner_rooms(void) {
  /* a sub-group: 65536 elements of fp32 master and moments and a bf16 gradient sum, 14 bytes each */
  static const int64_t rooms[] = {1, 3 * (int64_t)(65536 * 14) + 1000, 0};
  for (int k = 0; k < 3; k++) {
    zo_engine_t *e = make(1, 0, -1, rooms[k]);
    if (!e) return;
    zo_placement pl;
    if (CHECK_OK(zo_engine_place(e, &k_rates, NULL, &pl))) {
      printf("ok: placement_host_bytes %lld: ", (long long)rooms[k]);
      zo_placement_print(&pl, stdout);
      CHECK(pl.candidates >= 1);
      if (k == 0) CHECK_EQ(pl.resident_sub_groups + (int)pl.param_cached_el, 0);
      if (k > 0) CHECK(pl.candidates > 1);
      if (k == 1) {
        CHECK(pl.optimizer_resident_el * 14 + pl.param_cached_el * 2 <= (size_t)rooms[k]);
        CHECK(pl.resident_sub_groups >= 1 || pl.param_cached_el > 0);
      }
      if (k == 2) {
        CHECK_EQ(pl.resident_sub_groups, pl.sub_groups);
        CHECK_EQ((long long)pl.param_cached_el, (long long)pl.param_total_el);
      }
      /* finalize allocates what was placed; the prediction after it is the placement's */
      if (CHECK_OK(zo_engine_finalize(e))) {
        zo_step_prediction after;
        if (CHECK_OK(zo_engine_predict(e, &k_rates, &after)))
          CHECK(fabs(after.step_s - pl.pred.step_s) < 1e-12);
        zo_engine_mem m;
        if (CHECK_OK(zo_engine_mem_info(e, &m)) && k == 2) CHECK_EQ((long long)m.nvme_bytes, 0);
      }
    }
    zo_engine_destroy(e);
  }
  /* "config": the config's budgets stay, only predicted */
  zo_engine_t *e = make(0, 3 * 65536, -1, 0);
  zo_placement pl;
  if (e && CHECK_OK(zo_engine_place(e, &k_rates, NULL, &pl))) {
    CHECK_EQ(pl.candidates, 1);
    CHECK_EQ((long long)pl.optimizer_max_in_cpu, 3 * 65536);
    CHECK_EQ(pl.resident_sub_groups, 3);
  }
  zo_engine_destroy(e);
}

int main(int argc, char **argv) {
  if (zo_test_scratch_dir(argc > 1 ? argv[1] : NULL, "zo-test-placement", g_dir, sizeof g_dir))
    return ZO_TEST_SKIP;
  model_over_residency();
  planner_rooms();
  CHECK_EQ(zo_test_count_entries(g_dir), 0); /* every swap file removed */
  rmdir(g_dir);
  return zo_test_finish("test_placement");
}
