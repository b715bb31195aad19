/*
 * test_plan.c - the memory plan (zoffload/plan.h) is what finalize allocates:
 * for every cell of the tier matrix (offload_param.device none, cpu, nvme x
 * offload_optimizer.device none, cpu, nvme), fp32 and bf16 working weights,
 * delayed_param_update, and on several ranks (run under `mpirun -np 2`:
 * stage 2, and stage 3 with partitioned parameters), the ledger of what
 * zo_engine_finalize() requested (zo_engine_allocations()) equals the plan
 * entry by entry (tier, purpose, bytes, count, pinning, nvme path) and per
 * tier; the budget's engine bytes are the plan's; making a plan or a budget
 * changes nothing (a second plan is equal to the first). With parameters on
 * nvme and offload_param.max_in_cpu written, the first tensors within it are
 * cached whole in "param_host" and only the rest are in params.swp, whose
 * staging and write-back ring are sized from the largest uncached tensor
 * (none of the three when every tensor is cached). And the planner alone
 * (zo_plan_compute, plan_internal.h): plans from hand-built inputs with no
 * engine, device or communicator, checked buffer by buffer against sizes
 * computed by hand (cpu and nvme tiers, the host cache, resident
 * sub-groups, the refusals with their messages, saturation). Exit 0 pass,
 * 1 fail, 77 skip.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "zo_test.h"
#include "zoffload/budget.h"
#include "zoffload/config.h"
#include "zoffload/engine.h"
#include "zoffload/plan.h"
#include "plan_internal.h" /* zo_plan_input, zo_plan_compute, zo_plan_bytes, zo_plan_sum */

enum { NP = 5 };
static const size_t k_sizes[NP] = {1, 7, 1000, 1001, 4097};
static zo_comm_t *g_comm;
static zo_device_t *g_dev; /* NULL: the engine makes its own; `test_plan nccl`: a CUDA device */
static int R, W;
static char g_dir[4096];
static int g_gas = 1;             /* gradient_accumulation_steps of every cell */
static int64_t g_opt_res;         /* zoffload.optimizer_max_in_cpu of every cell */
static int64_t g_max_in_cpu = -1; /* offload_param.max_in_cpu of every cell; -1: not written */
static const size_t *g_sizes = k_sizes; /* the tensors of every cell, NP of them */

static const char *tier_of(zo_offload_device d) {
  return d == ZO_OFFLOAD_NONE ? "none" : d == ZO_OFFLOAD_CPU ? "cpu" : "nvme";
}

static int bufs_equal(const zo_plan_buf *a, const zo_plan_buf *b) {
  return a->tier == b->tier && !strcmp(a->purpose, b->purpose) && a->bytes == b->bytes &&
         a->count == b->count && a->pinned == b->pinned && a->path == b->path;
}

static void print_buf(const char *who, int i, const zo_plan_buf *b) {
  fprintf(stderr, "  %s[%d]: %s %s %d x %zu bytes, pinned %d, path %d\n", who, i,
          zo_tier_name(b->tier), b->purpose, b->count, b->bytes, b->pinned, b->path);
}

static size_t plan_bytes(const zo_plan *p, const char *purpose) {
  for (int i = 0; i < p->n_bufs; i++)
    if (!strcmp(p->buf[i].purpose, purpose)) return p->buf[i].bytes * (size_t)p->buf[i].count;
  return 0;
}

/* The host cache of nvme parameters in @plan: the first tensors whose held elements (stage 3 on several ranks:
 * their blocks) add up to at most max_in_cpu, whole, in "param_host" at unpadded offsets; the rest in params.swp
 * at padded ones, the staging buffers and the write-back ring sized from the largest of them. */
static void check_param_cache(const zo_plan *plan, zo_offload_device ptier, int stage,
                              const char *label) {
  size_t budget = ptier == ZO_OFFLOAD_NVME && g_max_in_cpu >= 0 ? (size_t)g_max_in_cpu : 0,
         held_sum = 0;
  size_t host_el = 0, file_el = 0, largest_file = 0;
  int n_cached = 0, bad = 0;
  for (int i = 0; i < NP; i++) {
    const size_t held = W > 1 && stage == 3 ? (g_sizes[i] + (size_t)W - 1) / (size_t)W : g_sizes[i];
    const int cached = n_cached == i && held_sum + held <= budget;
    if (cached) n_cached++, held_sum += held;
    const zo_plan_tensor *t = &plan->tensor[i];
    bad |= !CHECK_EQ(t->pw_host, ptier == ZO_OFFLOAD_CPU || cached);
    if (ptier == ZO_OFFLOAD_NONE) continue;
    bad |= !CHECK_EQ(t->pw_el, t->pw_host ? host_el : file_el);
    if (t->pw_host) {
      host_el += held;
    } else {
      file_el += (held + plan->extent_unit - 1) / plan->extent_unit * plan->extent_unit;
      if (g_sizes[i] > largest_file) largest_file = g_sizes[i];
    }
  }
  bad |= !CHECK_EQ(plan->pcache_tensors, n_cached);
  bad |= !CHECK_EQ(plan->pcache_el, held_sum);
  if (ptier == ZO_OFFLOAD_CPU)
    bad |= !CHECK_EQ(plan_bytes(plan, "param_host"), host_el * plan->wsz);
  if (ptier != ZO_OFFLOAD_NVME) {
    if (bad) fprintf(stderr, "  in %s\n", label);
    return;
  }
  bad |= !CHECK_EQ(plan_bytes(plan, "param_host"), held_sum * plan->wsz);
  bad |= !CHECK_EQ(plan->pw_total_el, file_el);
  bad |= !CHECK_EQ(plan_bytes(plan, "params.swp"), file_el * plan->wsz);
  bad |= !CHECK_EQ(plan->largest_file_el, largest_file);
  const size_t pstage =
      (largest_file + plan->extent_unit - 1) / plan->extent_unit * plan->extent_unit;
  bad |= !CHECK_EQ(plan->pstage_el, pstage);
  bad |= !CHECK_EQ(plan_bytes(plan, "offload_param.staging"),
                   pstage * plan->wsz * (pstage ? 3 : 0)); /* buffer_count */
  bad |= !CHECK_EQ(plan->wb_bytes > 0, largest_file > 0);
  bad |= !CHECK_EQ(plan_bytes(plan, "write_back_ring"), plan->wb_bytes);
  if (bad)
    fprintf(stderr, "  in %s\n", label);
  else if (g_max_in_cpu >= 0)
    printf(
        "ok: %s: %d of %d tensors cached (%zu elements), params.swp %zu elements, staging %zu elements\n",
        label, n_cached, NP, held_sum, file_el, pstage);
}

/* One engine: plan, budget, finalize; the ledger against the plan. */
static void run_cell(zo_offload_device ptier, zo_offload_device otier, int stage, int bf16, int dpu,
                     int overlap) {
  char label[160];
  char cache[48] = "";
  if (g_max_in_cpu >= 0)
    snprintf(cache, sizeof cache, ", max_in_cpu %lld", (long long)g_max_in_cpu);
  snprintf(label, sizeof label,
           "param %s%s, optimizer %s, stage %d, %s%s%s, gas %d, optimizer_max_in_cpu %lld, rank %d "
           "of %d",
           tier_of(ptier), cache, tier_of(otier), stage, bf16 ? "bf16" : "fp32",
           dpu ? ", delayed_param_update" : "", overlap ? ", overlap_comm" : "", g_gas,
           (long long)g_opt_res, R, W);
  zo_config_t c;
  zo_config_defaults(&c);
  c.train_batch_size = c.train_micro_batch_size_per_gpu = 1;
  c.gradient_accumulation_steps = g_gas;
  c.train_batch_size = g_gas * W;
  c.bf16.enabled = bf16;
  c.zero.stage = stage;
  c.zero.offload_optimizer.device = otier;
  c.zero.offload_optimizer.pin_memory =
      otier == ZO_OFFLOAD_CPU && !bf16; /* pinned and pageable cpu state */
  c.zero.offload_param.device = ptier;
  c.zero.offload_param.buffer_count = 3;
  c.zero.sub_group_size = 1500;
  c.zero.overlap_comm = overlap;
  c.zero.reduce_bucket_size = 5000;
  c.zero.allgather_bucket_size = 3000;
  c.zero.stage3_prefetch_bucket_size = 3000;
  c.zoffload.delayed_param_update = dpu;
  c.zoffload.optimizer_max_in_cpu = g_opt_res;
  c.zoffload.adam_threads = 1;
  if (g_max_in_cpu >= 0)
    c.zero.offload_param.max_in_cpu = g_max_in_cpu, c.zero.offload_param.max_in_cpu_set = 1;
  snprintf(c.zero.offload_optimizer.nvme_path, sizeof c.zero.offload_optimizer.nvme_path, "%s",
           g_dir);
  snprintf(c.zero.offload_param.nvme_path, sizeof c.zero.offload_param.nvme_path, "%s", g_dir);
  zo_engine_t *e = NULL;
  if (!CHECK_OK(zo_engine_create(&c, g_dev, g_comm, &e))) {
    fprintf(stderr, "  in %s\n", label);
    return;
  }
  zo_param_t *ps[NP];
  for (int i = 0; i < NP; i++) {
    char name[16];
    snprintf(name, sizeof name, "t%d", i);
    if (!CHECK_OK(zo_engine_register_param(e, name, g_sizes[i], &ps[i]))) goto out;
  }
  zo_plan *plan = NULL, *again = NULL;
  if (!CHECK_OK(zo_engine_plan(e, ZO_DEVICE_AUTO, &plan))) goto out;
  check_param_cache(plan, ptier, stage, label);
  /* gradient accumulation: the host gradient shard is fp32, and one rank stages through pinned buckets; with the
   * optimizer state on nvme the gradients live in grad.swp (the same extents as the state files), every hand-over
   * staged on one rank */
  const size_t gsz = g_gas > 1 || !bf16 ? 4 : 2;
  if (otier == ZO_OFFLOAD_CPU) CHECK_EQ(plan_bytes(plan, "grad_host"), plan->shard_total_el * gsz);
  if (otier == ZO_OFFLOAD_NVME) {
    CHECK_EQ(plan_bytes(plan, "grad_host"), 0);
    CHECK_EQ(plan_bytes(plan, "grad.swp"), plan->state_file_el * gsz);
    CHECK_EQ(plan_bytes(plan, "sub_group_buffers.grad"),
             plan->slot_el * gsz * (size_t)plan->n_slots);
    CHECK_EQ(plan_bytes(plan, "grad_swap_buffers"), plan->grad_io_el * gsz * 2);
  }
  CHECK_EQ(plan_bytes(plan, "grad_staging") > 0, W == 1 && (g_gas > 1 || otier == ZO_OFFLOAD_NVME));
  /* an nccl communicator's staging of host buffers (one rank: the engine's own communicator
   * only) */
  CHECK_EQ(plan_bytes(plan, "comm_staging"), (g_dev ? ZO_COMM_NCCL_STAGE_BYTES : 0));
  /* with offload_optimizer none the gradient shard stays in the working dtype (device memory): the device block
   * is the same with and without accumulation */

  zo_budget b;
  CHECK_OK(zo_engine_budget(e, NULL, &b));
  for (int i = 0; i < b.n_lines; i++) {
    const zo_budget_line *l = &b.line[i];
    if (l->tier == ZO_TIER_DEVICE) CHECK_EQ(l->engine_bytes, plan->device_need_bytes);
    if (l->tier == ZO_TIER_HOST) CHECK_EQ(l->engine_bytes, plan->host_bytes);
    if (l->tier == ZO_TIER_PINNED) CHECK_EQ(l->engine_bytes, plan->pinned_bytes);
    if (l->tier == ZO_TIER_NVME)
      CHECK_EQ(l->engine_bytes, plan->nvme_bytes[0] + plan->nvme_bytes[1]); /* one path */
  }
  /* neither the plan nor the budget changed the engine: the same plan again */
  if (CHECK_OK(zo_engine_plan(e, ZO_DEVICE_AUTO, &again))) {
    CHECK_EQ(again->n_bufs, plan->n_bufs);
    for (int i = 0; i < plan->n_bufs && i < again->n_bufs; i++)
      CHECK(bufs_equal(&again->buf[i], &plan->buf[i]));
    CHECK_EQ(again->swap_align, plan->swap_align);
    CHECK_EQ(again->n_sgs, plan->n_sgs);
    CHECK_EQ(again->slot_el, plan->slot_el);
    zo_plan_free(again);
  }
  const zo_plan_buf *led = NULL;
  CHECK_EQ(zo_engine_allocations(e, &led), 0); /* nothing before finalize */
  if (!CHECK_OK(zo_engine_finalize(e))) {
    fprintf(stderr, "  in %s\n", label);
    zo_plan_free(plan);
    goto out;
  }
  const int n = zo_engine_allocations(e, &led);
  int bad = 0;
  if (!CHECK_EQ(n, plan->n_bufs)) bad = 1;
  size_t sum[4] = {0, 0, 0, 0}, pinned = 0;
  for (int i = 0; i < n; i++) {
    const size_t total = led[i].bytes * (size_t)led[i].count;
    sum[led[i].tier] += total;
    if (led[i].tier == ZO_TIER_HOST && led[i].pinned) pinned += total;
    if (i < plan->n_bufs && !bufs_equal(&led[i], &plan->buf[i])) {
      FAIL_AT("%s: allocation %d differs from the plan", label, i);
      print_buf("finalize", i, &led[i]);
      print_buf("plan    ", i, &plan->buf[i]);
      bad = 1;
    }
  }
  if (bad) {
    for (int i = 0; i < n; i++) print_buf("finalize", i, &led[i]);
    for (int i = 0; i < plan->n_bufs; i++) print_buf("plan    ", i, &plan->buf[i]);
  }
  CHECK_EQ(sum[ZO_TIER_DEVICE],
           plan->device_bytes + plan_bytes(plan, "comm_staging")); /* nccl: held by the comm */
  CHECK_EQ(sum[ZO_TIER_HOST], plan->host_bytes);
  CHECK_EQ(pinned, plan->pinned_bytes);
  CHECK_EQ(sum[ZO_TIER_NVME], plan->nvme_bytes[0] + plan->nvme_bytes[1]);
  /* the working weights' bytes: param_host and params.swp (cpu: param_host alone) */
  zo_engine_mem m;
  if (ptier != ZO_OFFLOAD_NONE && CHECK_OK(zo_engine_mem_info(e, &m)))
    CHECK_EQ(m.param_bytes, plan_bytes(plan, "param_host") + plan_bytes(plan, "params.swp"));
  /* the plan is refused after finalize */
  zo_plan *late = NULL;
  CHECK_ST(zo_engine_plan(e, ZO_DEVICE_AUTO, &late), ZO_ERR_INVALID_USAGE);
  if (!bad)
    printf(
        "ok: %s: %d kinds of buffer as planned; device %zu, host %zu (pinned %zu), nvme %zu bytes\n",
        label, n, sum[ZO_TIER_DEVICE], sum[ZO_TIER_HOST], pinned, sum[ZO_TIER_NVME]);
  zo_plan_free(plan);
out:
  zo_engine_destroy(e);
}

/* Optimizer state and parameters on nvme, 1e6 parameters (10 tensors of 1e5), sub_group_size 1e5, buffer_count 2:
 * the host holds the sub-group buffers, the gradient staging and swap buffers and the parameter tier's staging and
 * write-back ring, and nothing that scales with the whole shard (no grad_host: gradients go to grad.swp). */
static void run_bounded(int gas) {
  zo_config_t c;
  zo_config_defaults(&c);
  c.gradient_accumulation_steps = gas;
  c.train_micro_batch_size_per_gpu = 1;
  c.train_batch_size = gas * W;
  c.bf16.enabled = 1;
  c.zero.stage = 3;
  c.zero.offload_optimizer.device = ZO_OFFLOAD_NVME;
  c.zero.offload_optimizer.buffer_count = 2;
  c.zero.offload_param.device = ZO_OFFLOAD_NVME;
  c.zero.sub_group_size = 100000;
  c.zoffload.adam_threads = 1;
  snprintf(c.zero.offload_optimizer.nvme_path, sizeof c.zero.offload_optimizer.nvme_path, "%s",
           g_dir);
  snprintf(c.zero.offload_param.nvme_path, sizeof c.zero.offload_param.nvme_path, "%s", g_dir);
  zo_engine_t *e = NULL;
  if (!CHECK_OK(zo_engine_create(&c, g_dev, g_comm, &e))) return;
  for (int i = 0; i < 10; i++) {
    char name[16];
    zo_param_t *p;
    snprintf(name, sizeof name, "w%d", i);
    if (!CHECK_OK(zo_engine_register_param(e, name, 100000, &p))) goto out;
  }
  if (!CHECK_OK(zo_engine_finalize(e))) goto out;
  const zo_plan_buf *led = NULL;
  const int n = zo_engine_allocations(e, &led);
  size_t host = 0, bounded = 0, shard_el = 0;
  for (int i = 0; i < n; i++) {
    if (led[i].tier != ZO_TIER_HOST) continue;
    const size_t total = led[i].bytes * (size_t)led[i].count;
    host += total;
    if (!strncmp(led[i].purpose, "sub_group_buffers.", 18) ||
        !strcmp(led[i].purpose, "grad_staging") || !strcmp(led[i].purpose, "grad_swap_buffers") ||
        !strcmp(led[i].purpose, "offload_param.staging") ||
        !strcmp(led[i].purpose, "write_back_ring") || !strcmp(led[i].purpose, "dp_grad") ||
        !strcmp(led[i].purpose, "pg_ring"))
      bounded += total;
    else
      fprintf(stderr, "  host buffer outside the bounded set: %s, %d x %zu bytes\n", led[i].purpose,
              led[i].count, led[i].bytes);
  }
  zo_engine_mem m;
  if (CHECK_OK(zo_engine_mem_info(e, &m))) CHECK_EQ(m.host_bytes, host);
  shard_el = (1000000 + (size_t)W - 1) / (size_t)W;
  if (CHECK(host <= bounded))
    printf(
        "ok: nvme state and parameters, 1e6 parameters, gas %d, rank %d of %d: host %zu bytes (%.2f per element of "
        "the shard), all of it sub-group buffers, staging and rings\n",
        gas, R, W, host, (double)host / (double)shard_el);
out:
  zo_engine_destroy(e);
}

/* ---------------------------------------------------------------- the planner alone, no engine */

/* A configuration with every key the planner reads written (not the defaults') and an input of @n tensors of
 * @sizes on one rank: shard, dp-padded and held counts are the tensor's own. */
static void pure_input(zo_config_t *c, zo_plan_input *in, zo_plan_input_tensor *t,
                       const size_t *sizes, int n) {
  zo_config_defaults(c);
  c->zero.stage = 2;
  c->zero.reduce_bucket_size = 5000;
  c->zero.allgather_bucket_size = 3000;
  c->zero.stage3_prefetch_bucket_size = 3000;
  c->zero.overlap_comm = 0;
  c->zero.sub_group_size = 2500;
  c->zero.stage3_max_live_parameters = 1000000;
  c->zero.offload_optimizer.pin_memory = 1;
  c->zero.offload_optimizer.buffer_count = 4;
  c->zero.offload_param.pin_memory = 1;
  c->zero.offload_param.buffer_count = 3;
  c->zero.offload_param.buffer_size = 1000000;
  memset(in, 0, sizeof *in);
  size_t total = 0;
  for (int i = 0; i < n; i++) {
    t[i].n = t[i].shard_n = t[i].dp_padded = t[i].pw_held = sizes[i];
    total += sizes[i];
  }
  in->cfg = c;
  in->world = 1;
  in->device = ZO_DEVICE_HOST;
  in->tier = ZO_OFFLOAD_CPU, in->ptier = ZO_OFFLOAD_NONE;
  in->wdtype = ZO_DTYPE_BF16, in->adtype = ZO_DTYPE_F32; /* bf16 weights, fp32 gradient sums */
  in->acc_in_size = 4;
  in->esz[0] = in->esz[1] = in->esz[2] = 4;
  in->total_el = total;
  in->n_tensors = n;
  in->tensor = t;
}

/* Plans from hand-built inputs: no engine, device or communicator; every byte count computed here
 * by hand. */
static void run_pure(void) {
  static const size_t sizes[2] = {1000, 3000};
  zo_config_t c;
  zo_plan_input in;
  zo_plan_input_tensor t[2];
  zo_plan *pl = NULL;
  int failures = zo_test_failures;

  /* stage 2, offload_optimizer cpu, parameters on the device; one staging bucket of 3000 fp32
   * elements */
  pure_input(&c, &in, t, sizes, 2);
  in.acc_bucket_el = 3000, in.acc_n_buckets = 1;
  if (CHECK_OK(zo_plan_compute(&in, "plan", &pl))) {
    CHECK_EQ(pl->n_tensors, 2);
    CHECK_EQ(pl->shard_total_el, 4000);
    CHECK_EQ(pl->largest_el, 3000);
    CHECK_EQ(pl->tensor[0].flat_off, 0);
    CHECK_EQ(pl->tensor[1].flat_off, 1000);
    CHECK_EQ(pl->tensor[0].dev_off[0], 0);        /* the working weights: 1000 x 2 bytes -> 2048 */
    CHECK_EQ(pl->tensor[1].dev_off[0], 2048);     /* 3000 x 2 bytes -> 6144 */
    CHECK_EQ(pl->tensor[0].dev_off[1], SIZE_MAX); /* no state on the device */
    CHECK_EQ(zo_plan_bytes(pl, "device_block"), 2048 + 6144);
    CHECK_EQ(zo_plan_bytes(pl, "grad_host"), 4000 * 4);
    CHECK_EQ(zo_plan_bytes(pl, "state_host.master"), 4000 * 4);
    CHECK_EQ(zo_plan_sum(pl, "state_host."), 3 * 4000 * 4);
    CHECK_EQ(zo_plan_bytes(pl, "stage_host"), 4000 * 2);
    CHECK_EQ(zo_plan_bytes(pl, "grad_staging"), 3000 * 4);
    CHECK_EQ(zo_plan_bytes(pl, "grad_host2"), 0); /* no delayed_param_update */
    CHECK_EQ(zo_plan_bytes(pl, "dp_grad"), 0);    /* one rank */
    CHECK_EQ(zo_plan_bytes(pl, "param_host"), 0);
    CHECK_EQ(zo_plan_bytes(pl, "comm_staging"), 0);
    CHECK_EQ(pl->device_bytes, 8192);
    CHECK_EQ(pl->device_need_bytes, 8192);
    CHECK_EQ(pl->host_bytes, 4000 * 4 + 3 * 4000 * 4 + 4000 * 2 + 3000 * 4);
    CHECK_EQ(pl->pinned_bytes, pl->host_bytes); /* pin_memory, and staging is always pinned */
    CHECK_EQ(pl->nvme_bytes[0] + pl->nvme_bytes[1], 0);
    CHECK_EQ(pl->swap_align, 0);
    CHECK_EQ(pl->extent_unit, 0);
    zo_plan_free(pl), pl = NULL;
  }
  /* the same with delayed_param_update and one NCCL communicator: a second gradient and staging buffer, and the
   * communicator's staging in the device need only */
  in.dpu = 1, in.n_nccl_comms = 1;
  if (CHECK_OK(zo_plan_compute(&in, "plan", &pl))) {
    CHECK_EQ(zo_plan_bytes(pl, "grad_host2"), 4000 * 4);
    CHECK_EQ(zo_plan_bytes(pl, "stage_host2"), 4000 * 2);
    CHECK_EQ(zo_plan_bytes(pl, "comm_staging"), ZO_COMM_NCCL_STAGE_BYTES);
    CHECK_EQ(pl->device_bytes, 8192);
    CHECK_EQ(pl->device_need_bytes, 8192 + ZO_COMM_NCCL_STAGE_BYTES);
    zo_plan_free(pl), pl = NULL;
  }

  /* stage 3, optimizer state and parameters on nvme, swap alignment 4096: the extent unit is 4096 / 2 (bf16, the
   * narrowest nvme kind) = 2048 elements; sub_group_size 2500 -> pieces of 4096; each tensor one piece at file
   * elements 0 (1000 -> extent 2048) and 2048 (3000 -> 4096); they do not fit one sub-group: two, of 2048 and 4096 */
  pure_input(&c, &in, t, sizes, 2);
  c.zero.stage = 3;
  in.tier = in.ptier = ZO_OFFLOAD_NVME;
  in.swap_align = 4096, in.extent_unit = 2048;
  in.grad_io_el = 65536, in.acc_bucket_el = 65536,
  in.acc_n_buckets = 1; /* what the engine makes of these */
  if (CHECK_OK(zo_plan_compute(&in, "plan", &pl))) {
    CHECK_EQ(pl->swap_align, 4096);
    CHECK_EQ(pl->extent_unit, 2048);
    CHECK_EQ(pl->piece_el, 4096);
    CHECK_EQ(pl->n_pieces, 2);
    CHECK_EQ(pl->n_sgs, 2);
    if (pl->n_sgs == 2) {
      CHECK_EQ(pl->sg[0].file_el, 0);
      CHECK_EQ(pl->sg[0].n_el, 2048);
      CHECK_EQ(pl->sg[1].file_el, 2048);
      CHECK_EQ(pl->sg[1].n_el, 4096);
    }
    CHECK_EQ(pl->tensor[1].file_el, 2048);
    CHECK_EQ(pl->state_file_el, 6144);
    CHECK_EQ(pl->slot_el, 4096);
    CHECK_EQ(pl->n_slots, 2);                       /* buffer_count 4, two sub-groups */
    CHECK_EQ(zo_plan_bytes(pl, "device_block"), 0); /* nothing resident on the device */
    CHECK_EQ(zo_plan_bytes(pl, "master.swp"), 6144 * 4);
    CHECK_EQ(zo_plan_sum(pl, "exp_avg_sq.swp"), 6144 * 4);
    CHECK_EQ(zo_plan_bytes(pl, "grad.swp"), 6144 * 4);
    CHECK_EQ(zo_plan_bytes(pl, "grad_host"), 0); /* the gradients are in grad.swp */
    CHECK_EQ(zo_plan_bytes(pl, "sub_group_buffers.master"), 4096 * 4);
    CHECK_EQ(zo_plan_sum(pl, "sub_group_buffers."), 2 * 4 * 4096 * 4);
    CHECK_EQ(zo_plan_bytes(pl, "grad_swap_buffers"), 65536 * 4);
    CHECK_EQ(zo_plan_bytes(pl, "grad_staging"), 65536 * 4);
    CHECK_EQ(zo_plan_sum(pl, "resident_state."), 0);
    /* params.swp: the extents 2048 + 4096 of bf16; staging: three of the largest padded, 4096
     * elements */
    CHECK_EQ(pl->tensor[0].pw_el, 0);
    CHECK_EQ(pl->tensor[1].pw_el, 2048);
    CHECK_EQ(pl->pw_total_el, 6144);
    CHECK_EQ(zo_plan_bytes(pl, "params.swp"), 6144 * 2);
    CHECK_EQ(pl->largest_file_el, 3000);
    CHECK_EQ(pl->pstage_el, 4096);
    CHECK_EQ(zo_plan_bytes(pl, "offload_param.staging"), 4096 * 2);
    CHECK_EQ(zo_plan_sum(pl, "offload_param.staging"), 3 * 4096 * 2);
    /* the write-back ring: max(3, 2) x 4096 elements (more than two sub-groups of 4096) x 2 bytes,
     * 4096-aligned */
    CHECK_EQ(pl->wb_bytes, 3 * 4096 * 2);
    CHECK_EQ(zo_plan_bytes(pl, "write_back_ring"), 3 * 4096 * 2);
    CHECK_EQ(pl->nvme_bytes[0], 4 * 6144 * 4);
    CHECK_EQ(pl->nvme_bytes[1], 6144 * 2);
    CHECK_EQ(pl->device_bytes, 0);
    /* the largest tensor fetched: 3000 x 2 bytes, 256-aligned */
    CHECK_EQ(pl->device_need_bytes, 6144);
    zo_plan_free(pl), pl = NULL;
  }
  /* the host cache of nvme parameters: a budget of 1500 elements holds the first tensor whole, not
   * the second */
  in.pcache_el = 1500;
  if (CHECK_OK(zo_plan_compute(&in, "plan", &pl))) {
    CHECK_EQ(pl->pcache_tensors, 1);
    CHECK_EQ(pl->pcache_el, 1000);
    CHECK_EQ(pl->tensor[0].pw_host, 1);
    CHECK_EQ(pl->tensor[1].pw_host, 0);
    CHECK_EQ(pl->tensor[1].pw_el, 0);
    CHECK_EQ(zo_plan_bytes(pl, "param_host"), 1000 * 2);
    CHECK_EQ(zo_plan_bytes(pl, "params.swp"), 4096 * 2);
    zo_plan_free(pl), pl = NULL;
  }
  in.pcache_el = 0;
  /* resident sub-groups (optimizer_max_in_cpu 4096 elements): the last sub-group, whose pieces start at multiples of
   * 65536 too; the files hold the first */
  in.opt_res_el = 4096;
  if (CHECK_OK(zo_plan_compute(&in, "plan", &pl))) {
    CHECK_EQ(pl->piece_el, 65536);
    CHECK_EQ(pl->n_sgs, 1);     /* both extents (2048 + 4096) fit one sub-group of 65536 */
    CHECK_EQ(pl->n_res_sgs, 0); /* 6144 elements: more than 4096 */
    zo_plan_free(pl), pl = NULL;
  }
  in.opt_res_el = 6144;
  if (CHECK_OK(zo_plan_compute(&in, "plan", &pl))) {
    CHECK_EQ(pl->n_res_sgs, 1);
    CHECK_EQ(pl->state_file_el, 0);
    CHECK_EQ(pl->res_el, 6144);
    CHECK_EQ(zo_plan_bytes(pl, "master.swp"), 0);
    CHECK_EQ(zo_plan_bytes(pl, "resident_state.master"), 6144 * 4);
    CHECK_EQ(zo_plan_bytes(pl, "resident_state.grad"), 6144 * 4);
    CHECK_EQ(pl->n_slots, 0);
    zo_plan_free(pl), pl = NULL;
  }
  in.opt_res_el = 0;

  /* the limits on the largest tensor, refused with their messages */
  c.zero.stage3_max_live_parameters = 2999;
  if (CHECK_ST(zo_plan_compute(&in, "plan", &pl), ZO_ERR_CONFIG))
    CHECK_HAS(zo_last_error(),
              "zero_optimization.stage3_max_live_parameters: 2999 elements cannot hold the largest "
              "tensor (3000 elements); raise it to at least 3000");
  CHECK(pl == NULL);
  c.zero.stage3_max_live_parameters = 1000000, c.zero.offload_param.buffer_size = 2999;
  if (CHECK_ST(zo_plan_compute(&in, "plan", &pl), ZO_ERR_CONFIG))
    CHECK_HAS(zo_last_error(),
              "zero_optimization.offload_param.buffer_size: 2999 elements cannot hold the largest "
              "tensor (3000 elements); raise it to at least 3000");

  /* sub_group_size: 1 element with two tensors of 2^35 (optimizer on nvme, unit 4096 / 4 = 1024 elements): pieces of
   * 1024, 2^26 of them, more than the plan's 2^24 */
  static const size_t huge[2] = {(size_t)1 << 35, (size_t)1 << 35};
  pure_input(&c, &in, t, huge, 2);
  c.zero.sub_group_size = 1;
  in.tier = ZO_OFFLOAD_NVME;
  in.swap_align = 4096, in.extent_unit = 1024;
  if (CHECK_ST(zo_plan_compute(&in, "plan", &pl), ZO_ERR_CONFIG))
    CHECK_HAS(zo_last_error(),
              "zero_optimization.sub_group_size: 1 elements cut the tensors (68719476736 elements "
              "in all) into 67108864 pieces, more than 16777216; raise it");
  CHECK(pl == NULL);

  /* sizes past size_t saturate at SIZE_MAX, never wrap: a tensor of SIZE_MAX / 2 elements (fp32 gradients: twice
   * too many bytes; bf16 weights: SIZE_MAX - 1 bytes, past it once rounded up to 256) */
  static const size_t vast[1] = {SIZE_MAX / 2};
  pure_input(&c, &in, t, vast, 1);
  if (CHECK_OK(zo_plan_compute(&in, "plan", &pl))) {
    CHECK_EQ(zo_plan_bytes(pl, "grad_host"), SIZE_MAX);
    CHECK_EQ(pl->host_bytes, SIZE_MAX);
    CHECK_EQ(zo_plan_bytes(pl, "device_block"), SIZE_MAX);
    CHECK_EQ(zo_plan_bytes(pl, "stage_host"), SIZE_MAX - 1);
    zo_plan_free(pl), pl = NULL;
  }

  /* what it refuses as arguments */
  CHECK_ST(zo_plan_compute(NULL, "plan", &pl), ZO_ERR_INVALID_ARG);
  pure_input(&c, &in, t, sizes, 2);
  in.n_tensors = 0;
  CHECK_ST(zo_plan_compute(&in, "plan", &pl), ZO_ERR_INVALID_ARG);
  in.n_tensors = 2, in.tier = ZO_OFFLOAD_NVME; /* nvme without an extent unit */
  CHECK_ST(zo_plan_compute(&in, "plan", &pl), ZO_ERR_INVALID_ARG);
  if (zo_test_failures == failures)
    printf(
        "ok: plans from hand-built inputs (no engine, device or communicator): cpu, nvme, the host cache, "
        "resident sub-groups, the refusals and saturation\n");
}

/*
 * test_plan nccl DIR: one rank on the nccl backend against the stand-in libcudart and libnccl (tests/fake_nccl.c):
 * the communicator's device staging is a "comm_staging" buffer of the plan, and of the ledger, outside the
 * resident block. 77 without a CUDA device (stand-in or real).
 */
static int nccl_main(const char *dir) {
  if (zo_device_cuda_count() < 1) {
    printf(
        "skip: test_plan nccl needs a CUDA device (the stand-in libcudart on LD_LIBRARY_PATH)\n");
    return ZO_TEST_SKIP;
  }
  R = 0, W = 1;
  if (!CHECK_OK(zo_device_create(ZO_DEVICE_CUDA, 0, 0, &g_dev)) ||
      !CHECK_OK(zo_comm_create_nccl(g_dev, NULL, &g_comm)))
    return zo_test_finish("test_plan nccl");
  if (zo_test_scratch_dir(dir, "zo-test-plan-nccl", g_dir, sizeof g_dir)) return ZO_TEST_SKIP;
  run_cell(ZO_OFFLOAD_NONE, ZO_OFFLOAD_CPU, 2, 1, 0, 0);
  run_cell(ZO_OFFLOAD_CPU, ZO_OFFLOAD_CPU, 3, 1, 0, 0);
  rmdir(g_dir);
  zo_comm_destroy(g_comm);
  zo_device_destroy(g_dev);
  return zo_test_finish("test_plan nccl");
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "nccl")) return nccl_main(argc > 2 ? argv[2] : NULL);
  run_pure(); /* first: it needs nothing the rest makes */
  int rc = zo_test_rank_scratch_dir(argc > 1 ? argv[1] : NULL, "zo-test-plan", &g_comm, g_dir,
                                    sizeof g_dir);
  if (rc) return rc;
  R = zo_comm_rank(g_comm), W = zo_comm_size(g_comm);
  static const zo_offload_device tiers[] = {ZO_OFFLOAD_NONE, ZO_OFFLOAD_CPU, ZO_OFFLOAD_NVME};
  for (g_gas = 1; g_gas <= 4; g_gas += 3) /* without and with gradient accumulation */
    for (int bf16 = 0; bf16 < 2; bf16++)
      for (int p = 0; p < 3; p++)
        for (int o = 0; o < 3; o++) {
          /* one rank: parameters offloaded at stage 3, resident at stage 2; several: the same (stage 3 with
           * resident parameters is not built on several ranks) */
          const int stage = tiers[p] == ZO_OFFLOAD_NONE ? 2 : 3;
          run_cell(tiers[p], tiers[o], stage, bf16, 0, W > 1 && bf16);
        }
  /* the optimizer state kept in host memory (zoffload.optimizer_max_in_cpu): every sub-group
   * resident, no files */
  g_opt_res = (int64_t)1 << 40, g_gas = 4;
  for (int p = 0; p < 3; p++)
    run_cell(tiers[p], ZO_OFFLOAD_NVME, tiers[p] == ZO_OFFLOAD_NONE ? 2 : 3, 1, 0, W > 1);
  g_opt_res = 0;
  g_gas = 1;
  /* the host cache of nvme parameters: written as 0 (nothing cached), splitting the tensors (the first two on one
   * rank, 5 elements then; the first four, all but the largest), every tensor; then the largest first, so the
   * staging and the ring follow a smaller uncached one */
  static const int64_t budgets[] = {0, 8, 2009, 1000000000};
  for (int k = 0; k < 4; k++)
    for (int o = 1; o < 3; o++) {
      g_max_in_cpu = budgets[k];
      run_cell(ZO_OFFLOAD_NVME, tiers[o], 3, 1, 0, 0);
    }
  static const size_t largest_first[NP] = {4097, 1000, 7, 1001, 1};
  g_sizes = largest_first;
  g_max_in_cpu = W > 1 ? 2549 : 5097; /* the first two */
  run_cell(ZO_OFFLOAD_NVME, ZO_OFFLOAD_NVME, 3, 1, 0, 0);
  run_cell(ZO_OFFLOAD_NVME, ZO_OFFLOAD_CPU, 3, 0, 0, 0);
  g_max_in_cpu = 1000000000;
  run_cell(ZO_OFFLOAD_CPU, ZO_OFFLOAD_CPU, 3, 1, 0, 0); /* written, no effect under cpu */
  g_sizes = k_sizes, g_max_in_cpu = -1;
  run_bounded(1);
  run_bounded(4);
  if (W == 1) {
    /* delayed_param_update: a second gradient buffer */
    run_cell(ZO_OFFLOAD_NONE, ZO_OFFLOAD_CPU, 2, 1, 1, 0);
    run_cell(ZO_OFFLOAD_NONE, ZO_OFFLOAD_NONE, 3, 1, 0, 0); /* stage 3, parameters resident */
  } else {
    run_cell(ZO_OFFLOAD_NONE, ZO_OFFLOAD_NONE, 1, 1, 0, 1); /* stage 1 */
    /* stage 0: all-reduce, no gather buffer */
    run_cell(ZO_OFFLOAD_NONE, ZO_OFFLOAD_NONE, 0, 0, 0, 1);
  }
  CHECK_OK(zo_comm_barrier(g_comm));
  CHECK_EQ(zo_test_count_entries(g_dir), 0); /* every swap file removed */
  rmdir(g_dir);
  zo_comm_destroy(g_comm);
  return zo_test_finish("test_plan");
}
