/*
 * plan.c - the memory plan (zoffload/plan.h): every buffer finalize allocates
 * and the layout it places the tensors by, from the configuration, the
 * registered tensors and the swap alignment. The planning itself
 * (zo_plan_compute) is a pure function of a zo_plan_input (plan_internal.h);
 * zo_plan_make fills one from the engine, reading it and changing nothing in
 * it. Allocates nothing but the plan. Not here: what the machine has
 * (budget.c), the allocations themselves (engine.c finalize_tiers).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"
#include "plan_internal.h"

static const char *const k_kind[ST_KINDS] = {"master", "exp_avg", "exp_avg_sq"};

static void add_buf(zo_plan *p, zo_tier t, const char *purpose, size_t bytes, int count, int pinned,
                    int path) {
  if (!bytes || count < 1 || p->n_bufs == ZO_PLAN_MAX_BUFS) return;
  zo_plan_buf *b = &p->buf[p->n_bufs++];
  b->tier = t;
  snprintf(b->purpose, sizeof b->purpose, "%s", purpose);
  b->bytes = bytes, b->count = count, b->pinned = pinned, b->path = t == ZO_TIER_NVME ? path : -1;
  const size_t total = mul_sat(bytes, (size_t)count);
  if (t == ZO_TIER_DEVICE) p->device_bytes = add_sat(p->device_bytes, total);
  if (t == ZO_TIER_HOST) p->host_bytes = add_sat(p->host_bytes, total);
  if (t == ZO_TIER_HOST && pinned) p->pinned_bytes = add_sat(p->pinned_bytes, total);
  if (t == ZO_TIER_NVME) p->nvme_bytes[path] = add_sat(p->nvme_bytes[path], total);
}

/* Parameters partitioned over ranks: stage 3 on several ranks (eng_dp3 of the input). */
static int in_dp3(const zo_plan_input *in) { return in->world > 1 && in->cfg->zero.stage == 3; }

/* Bytes per element of a gradient reduction (engine_dp.c eng_dp_red_dtype): the widest hand-over accepted (fp32
 * hand-overs too when accepted); reduced in device memory, in fp32 whenever the accumulation is fp32. */
static size_t dp_red_size(const zo_plan_input *in) {
  if (in->dp_device && in->adtype == ZO_DTYPE_F32 && in->acc_in_size < 4) return 4;
  return in->acc_in_size;
}

/* Several ranks (engine_dp.c): the gradient reduction ring and the gather buffer of the updated weights. */
static void dp_host_bytes(const zo_plan_input *in, size_t *grad_bytes, size_t *gather_bytes) {
  const zo_config_t *c = in->cfg;
  size_t largest = 0, total = 0, gather = 0, gather_largest = 0;
  for (int i = 0; i < in->n_tensors; i++) {
    const zo_plan_input_tensor *p = &in->tensor[i];
    const size_t el = c->zero.stage == 0 ? p->n : p->dp_padded, padded = p->dp_padded;
    if (el > largest) largest = el;
    if (padded > gather_largest) gather_largest = padded;
    total = add_sat(total, el);
    gather = add_sat(gather, padded);
  }
  /* the updated weights are gathered in waves of allgather_bucket_size elements (at least the largest tensor) */
  const size_t ag = c->zero.allgather_bucket_size > 0 ? (size_t)c->zero.allgather_bucket_size : 0;
  if (ag < gather) gather = ag;
  if (gather < gather_largest) gather = gather_largest;
  /* overlap_comm: reductions stay in flight while backward goes on, in a ring of reduce_bucket_size
   * elements (at least the largest tensor; at most every gradient of a step); else one tensor at a time */
  size_t ring = largest;
  if (c->zero.overlap_comm) {
    const size_t bucket = c->zero.reduce_bucket_size > 0 ? (size_t)c->zero.reduce_bucket_size : 0;
    ring = bucket < total ? bucket : total;
    if (ring < largest) ring = largest;
  }
  *grad_bytes = in->world > 1 ? mul_sat(ring, dp_red_size(in)) : 0;
  /* stage 0 needs no gather: every rank updates the whole tensor; stage 3 gathers at fetch (engine_dp3.c) */
  *gather_bytes = in->world > 1 && (c->zero.stage == 1 || c->zero.stage == 2)
                      ? mul_sat(gather, zo_dtype_size(in->wdtype))
                      : 0;
}

/* One rank with accumulation (or fp32 hand-overs): the pinned staging buckets gradients pass through
 * (engine_accum.c), one buffer of n_buckets x bucket elements x the hand-over's bytes. */
static void plan_grad_staging(const zo_plan_input *in, zo_plan *pl) {
  const int n_buckets = in->acc_n_buckets > 0 ? in->acc_n_buckets : 0;
  pl->grad_staging_bytes = mul_sat(mul_sat(in->acc_bucket_el, in->acc_in_size), (size_t)n_buckets);
  add_buf(pl, ZO_TIER_HOST, "grad_staging", pl->grad_staging_bytes, 1, 1, -1);
}

/* Stage 3 on several ranks (engine_dp3.c): the ring the working weights are all-gathered into. */
static size_t pg_ring_bytes(const zo_plan_input *in) {
  if (!in_dp3(in)) return 0;
  size_t largest = 0, total = 0;
  for (int i = 0; i < in->n_tensors; i++) {
    const size_t el = in->tensor[i].dp_padded;
    if (el > largest) largest = el;
    total = add_sat(total, el);
  }
  /* stage3_prefetch_bucket_size elements gathered ahead, and room for the fetch in use beside them; no more than
   * two uses of every tensor (a step's forward and backward) */
  const int64_t pb = in->cfg->zero.stage3_prefetch_bucket_size;
  const size_t bucket = pb > 0 ? (size_t)pb : 0;
  size_t el = add_sat(bucket, largest);
  if (el > mul_sat(2, total)) el = mul_sat(2, total);
  if (el < mul_sat(2, largest)) el = mul_sat(2, largest);
  return mul_sat(el, zo_dtype_size(in->wdtype));
}

/* NVMe optimizer state: cut the shards into pieces of at most sub_group_size elements and pack consecutive
 * pieces into sub-groups; each sub-group is one contiguous, aligned range in every state file. */
static zo_status plan_sub_groups(const zo_plan_input *in, zo_plan *pl) {
  const size_t unit = pl->extent_unit;
  /* With resident sub-groups, pieces start at multiples of the gradient norm's 64 Ki-element chunk too: the
   * gradient hand-over is cut at piece boundaries (no chunk spans two sub-groups), and its norm is summed by those
   * chunks from each shard's start (the same bits whatever the cut). Both are powers of two. */
  const size_t punit = in->opt_res_el && unit < 65536 ? 65536 : unit;
  size_t sgs = (size_t)in->cfg->zero.sub_group_size;
  if (zo_size_round_up(sgs < punit ? punit : sgs, punit, &sgs)) sgs = SIZE_MAX / punit * punit;
  pl->piece_el = sgs;
  /* The plan is made before the budget says whether anything fits: refuse one whose own arrays (about 80 bytes
   * a piece) would be more than 1.3 GiB (a tiny sub_group_size for huge tensors). Each count is at most
   * ZO_ENGINE_MAX_ELEMS / unit, so the size_t sum cannot wrap. */
  enum { ZO_PLAN_MAX_PIECES = 1 << 24 };
  size_t n_pieces = 0;
  for (int i = 0; i < in->n_tensors; i++)
    n_pieces += in->tensor[i].shard_n / sgs + (in->tensor[i].shard_n % sgs != 0);
  if (n_pieces > ZO_PLAN_MAX_PIECES)
    return zo_error_set(
        ZO_ERR_CONFIG,
        "zero_optimization.sub_group_size: %lld elements cut the tensors (%zu elements in "
        "all) into %zu pieces, more than %d; raise it",
        (long long)in->cfg->zero.sub_group_size, in->total_el, n_pieces, ZO_PLAN_MAX_PIECES);
  const int cap = (int)n_pieces;
  pl->piece = calloc(cap ? cap : 1, sizeof *pl->piece);
  pl->sg = calloc(cap ? cap : 1, sizeof *pl->sg);
  if (!pl->piece || !pl->sg)
    return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "engine: out of host memory");
  uint64_t file_el = 0;
  for (int i = 0; i < in->n_tensors; i++) {
    const zo_plan_input_tensor *p = &in->tensor[i];
    pl->tensor[i].file_el = file_el;
    for (size_t off = 0; off < p->shard_n; off += sgs) {
      zo_plan_piece *pc = &pl->piece[pl->n_pieces++];
      pc->tensor = i;
      pc->off = off;
      pc->n = p->shard_n - off < sgs ? p->shard_n - off : sgs;
      pc->file_el = file_el + off;
    }
    file_el += zo_round_up(p->shard_n, unit);
  }
  /* Greedy packing: a sub-group holds whole pieces whose padded extents fit in sub_group_size elements. */
  size_t max_el = 0;
  for (int k = 0; k < pl->n_pieces;) {
    zo_plan_sub_group *g = &pl->sg[pl->n_sgs++];
    g->first_piece = k;
    g->file_el = pl->piece[k].file_el;
    uint64_t end = g->file_el;
    do {
      end = pl->piece[k].file_el + zo_round_up(pl->piece[k].n, unit);
      k++;
    } while (k < pl->n_pieces &&
             pl->piece[k].file_el + zo_round_up(pl->piece[k].n, unit) - g->file_el <= sgs);
    g->n_pieces = k - g->first_piece;
    g->n_el = end - g->file_el;
  }
  const zo_plan_sub_group *last = &pl->sg[pl->n_sgs - 1];
  const uint64_t total_el = last->file_el + last->n_el;
  /* Resident: the last sub-groups whose elements fit in zoffload.optimizer_max_in_cpu (or the planner's budget);
   * the files hold the rest, [0, state_file_el). The last ones are the first whose gradients complete in backward. */
  uint64_t res = 0;
  int first_res = pl->n_sgs;
  while (first_res > 0 && res + pl->sg[first_res - 1].n_el <= (uint64_t)in->opt_res_el)
    res += pl->sg[--first_res].n_el;
  pl->n_res_sgs = pl->n_sgs - first_res;
  pl->state_file_el = first_res < pl->n_sgs ? pl->sg[first_res].file_el : total_el;
  pl->res_el = (size_t)res;
  for (int g = 0; g < pl->n_sgs; g++) {
    pl->sg[g].resident = g >= first_res;
    if (!pl->sg[g].resident && pl->sg[g].n_el > max_el) max_el = pl->sg[g].n_el;
  }
  pl->slot_el = max_el; /* the largest streamed sub-group; 0 when every one is resident */
  return ZO_OK;
}

/* Parameter offload: each tensor is fetched whole, so the live-parameter bound must hold the largest and (nvme) the
 * staging buffers the largest read from params.swp; refused here, so --dry-run and the budget refuse what finalize
 * would. */
static zo_status plan_check_largest(const zo_plan_input *in, const zo_plan *pl) {
  const zo_config_t *c = in->cfg;
  const size_t largest = pl->largest_el, lfile = pl->largest_file_el;
  if (in->ptier != ZO_OFFLOAD_NONE && (int64_t)largest > c->zero.stage3_max_live_parameters)
    return zo_error_set(
        ZO_ERR_CONFIG,
        "zero_optimization.stage3_max_live_parameters: %lld elements cannot hold the "
        "largest tensor (%zu elements); raise it to at least %zu",
        (long long)c->zero.stage3_max_live_parameters, largest, largest);
  if (in->ptier == ZO_OFFLOAD_NVME && (int64_t)lfile > c->zero.offload_param.buffer_size)
    return zo_error_set(
        ZO_ERR_CONFIG,
        "zero_optimization.offload_param.buffer_size: %lld elements cannot hold the "
        "largest tensor%s (%zu elements); raise it to at least %zu",
        (long long)c->zero.offload_param.buffer_size,
        pl->pcache_tensors
            ? " read from params.swp (the first tensors are cached in host memory by "
              "offload_param.max_in_cpu)"
            : "",
        lfile, lfile);
  return ZO_OK;
}

/* ---------------------------------------------------------------- the host cache of nvme parameters */

/* The host cache of nvme parameters (offload_param.max_in_cpu): how many tensors, from the first registered on,
 * a budget of @budget_el elements holds whole (each pw_held elements; the first that does not fit ends the run);
 * *@held_el their elements. 0 unless offload_param is "nvme". */
static int plan_cache_count(const zo_plan_input *in, size_t budget_el, size_t *held_el) {
  size_t sum = 0; /* <= budget_el throughout, so the sum cannot wrap */
  int n = 0;
  if (in->ptier == ZO_OFFLOAD_NVME)
    for (; n < in->n_tensors; n++) {
      const size_t held = in->tensor[n].pw_held;
      if (held > budget_el - sum) break;
      sum += held;
    }
  if (held_el) *held_el = sum;
  return n;
}

zo_status eng_set_param_cache(zo_engine_t *e, size_t el) {
  if (!e) return zo_error_set(ZO_ERR_INVALID_ARG, "set_param_cache: NULL engine");
  ZO_CHECK(eng_check_usable(e, "set_param_cache"));
  if (e->finalized)
    return zo_error_set(ZO_ERR_INVALID_USAGE,
                        "set_param_cache: the host cache of nvme parameters (%zu elements) is "
                        "set before zo_engine_finalize(); the engine is already finalized",
                        el);
  e->pcache_el = el;
  return ZO_OK;
}

/* Per tensor: its regions in the device block (working weights unless they are offloaded; master, state and
 * gradient shard for offload_optimizer "none"; 256-byte aligned), its offset in the flat shard and where its working
 * copy lives (param_host or params.swp, and its offset there). Returns the device block's bytes so far; sets the
 * plan's element totals and largest tensors. */
static size_t plan_tensors(const zo_plan_input *in, zo_plan *pl) {
  const size_t wsz = pl->wsz, gsz = zo_dtype_size(in->adtype);
  const int pres = in->ptier == ZO_OFFLOAD_NONE;
  size_t dev = 0, shard_total = 0, largest = 0, pw_total = 0, cached = 0, largest_file = 0;
  /* nvme: the first tensors within the host cache's budget keep their working copy in param_host */
  pl->pcache_tensors = plan_cache_count(in, in->pcache_el, &pl->pcache_el);
  for (int i = 0; i < in->n_tensors; i++) {
    const zo_plan_input_tensor *p = &in->tensor[i];
    zo_plan_tensor *t = &pl->tensor[i];
    for (int r = 0; r < 5; r++) t->dev_off[r] = SIZE_MAX;
    if (pres) t->dev_off[0] = dev, dev = add_sat(dev, round_sat(mul_sat(p->n, wsz), 256));
    if (in->tier == ZO_OFFLOAD_NONE) {
      for (int k = 0; k < ST_KINDS; k++) {
        t->dev_off[1 + k] = dev;
        const size_t b = round_sat(mul_sat(p->shard_n, in->esz[k]), 256);
        dev = add_sat(dev, b), pl->dev_state_bytes = add_sat(pl->dev_state_bytes, b);
      }
      t->dev_off[4] = dev;
      const size_t b = round_sat(mul_sat(p->shard_n, gsz), 256);
      dev = add_sat(dev, b), pl->dev_state_bytes = add_sat(pl->dev_state_bytes, b);
    }
    t->flat_off = shard_total;
    shard_total = add_sat(shard_total, p->shard_n);
    if (p->n > largest) largest = p->n;
    /* the host-tier working copy: several ranks at stage 3 hold their block; nvme pads every extent of params.swp,
     * not those of the tensors cached in param_host (a layout of its own) */
    const size_t held = p->pw_held;
    t->pw_host = in->ptier == ZO_OFFLOAD_CPU || i < pl->pcache_tensors;
    if (i < pl->pcache_tensors) {
      t->pw_el = cached;
      cached = add_sat(cached, held);
      continue;
    }
    t->pw_el = pw_total;
    pw_total =
        add_sat(pw_total, in->ptier == ZO_OFFLOAD_NVME ? round_sat(held, pl->extent_unit) : held);
    if (in->ptier == ZO_OFFLOAD_NVME && p->n > largest_file) largest_file = p->n;
  }
  pl->shard_total_el = shard_total, pl->largest_el = largest, pl->pw_total_el = pw_total;
  pl->largest_file_el = largest_file;
  return dev;
}

/* device Adam: the per-tensor partial sums of the gradient norm (gpu/adam_device.h), bytes */
static size_t dev_norm_bytes(const zo_plan_input *in) {
  return mul_sat(mul_sat((size_t)in->n_tensors, ZO_DEV_SQNORM_BLOCKS), sizeof(double));
}

/* Device: the block (the tensors' regions, then device Adam's norm sums and, on several ranks, its upload stage),
 * the largest tensor a fetch needs beside it, and the NCCL communicators' staging. */
static zo_status plan_device(const zo_plan_input *in, zo_plan *pl) {
  const int dadam = in->device_adam;
  size_t dev = plan_tensors(in, pl);
  /* device Adam: the per-tensor partial sums of the gradient norm (gpu/adam_device.h), at the end of the block */
  pl->dev_norm_off = SIZE_MAX;
  if (dadam) pl->dev_norm_off = dev, dev = add_sat(dev, round_sat(dev_norm_bytes(in), 256));
  /* device Adam on several ranks: a reduced block (host) is uploaded here, then cast or added into the shard */
  pl->dev_stage_off = SIZE_MAX;
  pl->dp_dev_grad_off = pl->dp_dev_gather_off = SIZE_MAX;
  pl->dev_param_off = pl->dev_pg_ring_off = SIZE_MAX;
  pl->pg_ring_bytes = pg_ring_bytes(in);
  if (in->pdev) { /* parameters partitioned in device memory: this rank's blocks, and over NCCL the gathers' ring */
    pl->dev_param_off = dev, dev = add_sat(dev, round_sat(mul_sat(pl->pw_total_el, pl->wsz), 256));
    if (in->dp_device)
      pl->dev_pg_ring_off = dev, dev = add_sat(dev, round_sat(pl->pg_ring_bytes, 256));
  }
  dp_host_bytes(in, &pl->dp_grad_bytes, &pl->dp_gather_bytes);
  if (in->dp_device && in->world > 1) {
    /* collectives in device memory: the reduction ring and the gather buffer in the block; a rank's reduced
     * block lands on the host only when the optimizer is offloaded (plan_host) */
    pl->dp_dev_grad_off = dev, dev = add_sat(dev, round_sat(pl->dp_grad_bytes, 256));
    if (pl->dp_gather_bytes)
      pl->dp_dev_gather_off = dev, dev = add_sat(dev, round_sat(pl->dp_gather_bytes, 256));
  } else if (dadam && in->world > 1) {
    size_t shard_largest = 0;
    for (int i = 0; i < in->n_tensors; i++)
      if (in->tensor[i].shard_n > shard_largest) shard_largest = in->tensor[i].shard_n;
    pl->dev_stage_off = dev,
    dev = add_sat(dev, round_sat(mul_sat(shard_largest, in->acc_in_size), 256));
  }
  ZO_CHECK(plan_check_largest(in, pl));
  pl->largest_dev_bytes = round_sat(mul_sat(pl->largest_el, pl->wsz), ZO_DEVICE_ALIGN);
  add_buf(pl, ZO_TIER_DEVICE, "device_block", dev, 1, 0, -1);
  pl->device_need_bytes = in->ptier == ZO_OFFLOAD_NONE
                              ? pl->device_bytes
                              : add_sat(pl->device_bytes, pl->largest_dev_bytes);
  /* NCCL communicators' staging of host buffers (gpu/comm_nccl.c): device memory each communicator holds from its
   * creation, outside the arena; in the device need, not in the resident block. */
  const int n_nccl = in->n_nccl_comms;
  if (n_nccl > 0) {
    const size_t blk = pl->device_bytes;
    add_buf(pl, ZO_TIER_DEVICE, "comm_staging", ZO_COMM_NCCL_STAGE_BYTES, n_nccl, 0, -1);
    pl->device_bytes = blk;
    pl->device_need_bytes =
        add_sat(pl->device_need_bytes, mul_sat(ZO_COMM_NCCL_STAGE_BYTES, (size_t)n_nccl));
  }
  return ZO_OK;
}

/* Host: gradients (landing buffer of the device-to-host copies), cpu state, staging of the working copy, device
 * Adam's norm sums, the several-rank buffers; then the offloaded parameters (param_host: all of them under cpu, the
 * cached ones under nvme; params.swp and its staging for the others). */
static void plan_host(const zo_plan_input *in, zo_plan *pl) {
  const zo_config_t *c = in->cfg;
  const size_t wsz = pl->wsz, gsz = zo_dtype_size(in->adtype), shard_total = pl->shard_total_el;
  const int pin = c->zero.offload_optimizer.pin_memory;
  if (in->tier != ZO_OFFLOAD_NONE) {
    /* nvme: the gradients live in grad.swp beside the state (plan_nvme_state), not in host memory */
    if (in->tier == ZO_OFFLOAD_CPU)
      add_buf(pl, ZO_TIER_HOST, "grad_host", mul_sat(shard_total, gsz), 1, pin, -1);
    if (in->dpu && in->tier == ZO_OFFLOAD_CPU) /* nvme: the next step's go to grad.swp (claimed) */
      add_buf(pl, ZO_TIER_HOST, "grad_host2", mul_sat(shard_total, gsz), 1, 1, -1);
    if (in->tier == ZO_OFFLOAD_CPU)
      for (int k = 0; k < ST_KINDS; k++) {
        char name[40];
        snprintf(name, sizeof name, "state_host.%s", k_kind[k]);
        add_buf(pl, ZO_TIER_HOST, name, mul_sat(shard_total, in->esz[k]), 1, pin, -1);
      }
  }
  if ((in->ptier == ZO_OFFLOAD_NONE || in->pdev) && in->tier != ZO_OFFLOAD_NONE) {
    add_buf(pl, ZO_TIER_HOST, "stage_host", mul_sat(shard_total, wsz), 1, 1, -1);
    /* the last step's uploads read the other; nvme on one rank waits for them instead
     * (eng_dpu_one_stage) */
    if (in->dpu && !(in->tier == ZO_OFFLOAD_NVME && in->world == 1 && in->ptier == ZO_OFFLOAD_NONE))
      add_buf(pl, ZO_TIER_HOST, "stage_host2", mul_sat(shard_total, wsz), 1, 1, -1);
  }
  if (in->device_adam)
    add_buf(pl, ZO_TIER_HOST, "device_adam.norm_host", dev_norm_bytes(in), 1, 1, -1);
  plan_grad_staging(in, pl);
  if (pl->dp_dev_grad_off == SIZE_MAX) { /* host collectives (plan_device placed device ones) */
    add_buf(pl, ZO_TIER_HOST, "dp_grad", pl->dp_grad_bytes, 1, 1, -1);
    add_buf(pl, ZO_TIER_HOST, "dp_gather", pl->dp_gather_bytes, 1, 1, -1);
  } else if (in->tier != ZO_OFFLOAD_NONE) {
    size_t part_largest = 0; /* a rank's block: what lands on the host */
    for (int i = 0; i < in->n_tensors; i++) {
      const size_t b = in->tensor[i].dp_padded / (size_t)in->world;
      if (b > part_largest) part_largest = b;
    }
    pl->dp_land_bytes = mul_sat(part_largest, dp_red_size(in));
    add_buf(pl, ZO_TIER_HOST, "dp_land", pl->dp_land_bytes, 1, 1, -1);
  }
  if (pl->dev_pg_ring_off == SIZE_MAX)
    add_buf(pl, ZO_TIER_HOST, "pg_ring", pl->pg_ring_bytes, 1, 1, -1);
  if ((in->ptier == ZO_OFFLOAD_CPU && !in->pdev) || pl->pcache_el)
    add_buf(pl, ZO_TIER_HOST, "param_host",
            mul_sat(in->ptier == ZO_OFFLOAD_CPU ? pl->pw_total_el : pl->pcache_el, wsz), 1,
            c->zero.offload_param.pin_memory, -1);
  if (in->ptier ==
      ZO_OFFLOAD_NVME) { /* every tensor cached: no file (0 bytes are not planned), no staging */
    add_buf(pl, ZO_TIER_NVME, "params.swp", mul_sat(pl->pw_total_el, wsz), 1, 0, 1);
    pl->pstage_el = round_sat(pl->largest_file_el, pl->extent_unit);
    pl->n_pstage = !pl->pstage_el                           ? 0
                   : c->zero.offload_param.buffer_count > 0 ? c->zero.offload_param.buffer_count
                                                            : 1;
    add_buf(pl, ZO_TIER_HOST, "offload_param.staging", mul_sat(pl->pstage_el, wsz), pl->n_pstage, 1,
            -1);
  }
}

/* NVMe state: the sub-groups give the files' extents (master, exp_avg, exp_avg_sq and grad.swp) and the size of the
 * host buffer sets they pass through. */
static zo_status plan_nvme_state(const zo_plan_input *in, zo_plan *pl) {
  const size_t gsz = zo_dtype_size(in->adtype);
  ZO_CHECK(plan_sub_groups(in, pl));
  for (int k = 0; k < ST_KINDS; k++) {
    char name[40];
    snprintf(name, sizeof name, "%s.swp", k_kind[k]);
    add_buf(pl, ZO_TIER_NVME, name, mul_sat(pl->state_file_el, in->esz[k]), 1, 0, 0);
  }
  /* the gradients: grad.swp in the accumulation dtype, the same extents */
  add_buf(pl, ZO_TIER_NVME, "grad.swp", mul_sat(pl->state_file_el, gsz), 1, 0, 0);
  /* the resident sub-groups' state and gradient sums: host memory for the whole run, not page-locked (only the CPU
   * reads and writes them: Adam, and the gradient hand-over's adds from its pinned buckets) */
  for (int k = 0; k < ST_KINDS; k++) {
    char name[40];
    snprintf(name, sizeof name, "resident_state.%s", k_kind[k]);
    add_buf(pl, ZO_TIER_HOST, name, mul_sat(pl->res_el, in->esz[k]), 1, 0, -1);
  }
  add_buf(pl, ZO_TIER_HOST, "resident_state.grad", mul_sat(pl->res_el, gsz), 1, 0, -1);
  int nbuf = in->cfg->zero.offload_optimizer.buffer_count < 1
                 ? 1
                 : in->cfg->zero.offload_optimizer.buffer_count;
  if (nbuf > pl->n_sgs - pl->n_res_sgs) nbuf = pl->n_sgs - pl->n_res_sgs;
  pl->n_slots = nbuf;
  for (int k = 0; k < ST_KINDS; k++) {
    char name[40];
    snprintf(name, sizeof name, "sub_group_buffers.%s", k_kind[k]);
    add_buf(pl, ZO_TIER_HOST, name, mul_sat(pl->slot_el, in->esz[k]), nbuf, 1, -1);
  }
  add_buf(pl, ZO_TIER_HOST, "sub_group_buffers.grad", mul_sat(pl->slot_el, gsz), nbuf, 1, -1);
  /* the hand-over's chunks go to grad.swp through these (engine_gradnv.c): two, so one write stays in flight */
  pl->grad_io_el = in->grad_io_el;
  add_buf(pl, ZO_TIER_HOST, "grad_swap_buffers", mul_sat(pl->grad_io_el, gsz), 2, 1, -1);
  return ZO_OK;
}

/* The write-back ring (parameters on nvme): offload_param.buffer_count tensors of the largest size in params.swp,
 * and at least two of them and two sub-groups (bytes of the working dtype); none when every tensor is cached. */
static void plan_write_back(const zo_plan_input *in, zo_plan *pl) {
  if (!pl->pstage_el) return;
  size_t el = mul_sat((size_t)(pl->n_pstage > 2 ? pl->n_pstage : 2), pl->pstage_el);
  if (in->tier == ZO_OFFLOAD_NVME && mul_sat(2, pl->slot_el) > el) el = mul_sat(2, pl->slot_el);
  pl->wb_bytes = round_sat(mul_sat(el, pl->wsz), pl->swap_align);
  add_buf(pl, ZO_TIER_HOST, "write_back_ring", pl->wb_bytes, 1, 1, -1);
}

zo_status zo_plan_compute(const zo_plan_input *in, const char *what, zo_plan **out) {
  if (!what) what = "plan";
  if (!in || !out || !in->cfg || (in->n_tensors > 0 && !in->tensor))
    return zo_error_set(ZO_ERR_INVALID_ARG, "%s: NULL argument", what);
  *out = NULL;
  if (in->n_tensors < 1) return zo_error_set(ZO_ERR_INVALID_ARG, "%s: no tensor to plan", what);
  /* NVMe extents are padded to the extent unit: a plan with a tier on nvme needs one */
  if ((in->tier == ZO_OFFLOAD_NVME || in->ptier == ZO_OFFLOAD_NVME) && !in->extent_unit)
    return zo_error_set(ZO_ERR_INVALID_ARG, "%s: an nvme tier needs an extent unit (0 given)",
                        what);
  zo_plan *pl = calloc(1, sizeof *pl);
  if (pl) pl->tensor = calloc((size_t)in->n_tensors, sizeof *pl->tensor);
  if (!pl || !pl->tensor) {
    zo_plan_free(pl);
    return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "engine: out of host memory");
  }
  pl->n_tensors = in->n_tensors;
  pl->wsz = zo_dtype_size(in->wdtype);
  pl->state_esz = in->esz[0] + in->esz[1] + in->esz[2];
  pl->swap_align = in->swap_align;
  if (in->tier == ZO_OFFLOAD_NVME || in->ptier == ZO_OFFLOAD_NVME)
    pl->extent_unit = in->extent_unit;

  zo_status st = plan_device(in, pl);
  if (st == ZO_OK) plan_host(in, pl);
  if (st == ZO_OK && in->tier == ZO_OFFLOAD_NVME) st = plan_nvme_state(in, pl);
  if (st != ZO_OK) {
    zo_plan_free(pl);
    return st;
  }
  if (in->ptier == ZO_OFFLOAD_NVME) plan_write_back(in, pl);
  *out = pl;
  return ZO_OK;
}

/* The planner's input from engine @e for device @kind (ZO_DEVICE_AUTO: the engine's own; checked by the caller):
 * fills *@in, allocating its tensor array (plan_input_free). */
static zo_status eng_plan_input(const zo_engine_t *e, zo_device_kind kind, zo_plan_input *in) {
  memset(in, 0, sizeof *in);
  zo_plan_input_tensor *t = calloc((size_t)(e->n_params > 0 ? e->n_params : 1), sizeof *t);
  if (!t) return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "engine: out of host memory");
  for (int i = 0; i < e->n_params; i++) {
    const zo_param_t *p = e->params[i];
    t[i].n = p->n, t[i].shard_n = p->shard_n, t[i].dp_padded = eng_dp_padded(e, p),
    t[i].pw_held = eng_pw_held(e, p);
  }
  in->tensor = t;
  in->n_tensors = e->n_params;
  in->cfg = &e->cfg;
  in->world = e->world;
  in->device = kind == ZO_DEVICE_AUTO ? zo_device_get_kind(e->dev) : kind;
  /* device Adam, as eng_device_adam() says for an engine on that device: offload_optimizer "none" on a GPU */
  in->device_adam = kind == ZO_DEVICE_AUTO ? eng_device_adam(e)
                                           : e->tier == ZO_OFFLOAD_NONE && kind == ZO_DEVICE_CUDA;
  in->tier = e->tier, in->ptier = e->ptier, in->dpu = e->dpu;
  in->wdtype = e->wdtype, in->adtype = e->adtype;
  in->acc_in_size = eng_acc_in_size(e);
  eng_acc_ring_shape(e, in->device_adam, &in->acc_bucket_el, &in->acc_n_buckets);
  if (e->tier == ZO_OFFLOAD_NVME) in->grad_io_el = eng_gnv_el(e);
  for (int k = 0; k < ST_KINDS; k++) in->esz[k] = e->esz[k];
  in->swap_align = e->ptier == ZO_OFFLOAD_NVME && !e->swap_align ? 4096 : e->swap_align;
  if (e->tier == ZO_OFFLOAD_NVME || e->ptier == ZO_OFFLOAD_NVME)
    in->extent_unit = eng_extent_unit_at(e, in->swap_align);
  in->pcache_el = e->pcache_el;
  in->opt_res_el = e->opt_res_el;
  in->n_nccl_comms = eng_nccl_comms(e);
  in->dp_device = eng_dp_dev(e);
  /* a GPU plan on a host device standing in for the GPU (zo-train --dry-run --device cuda): the collectives the
   * run would use, zoffload.comm "auto" or "nccl" being NCCL when this zoffload has it (zo-train's choice) */
  if (kind == ZO_DEVICE_CUDA && zo_device_get_kind(e->dev) != ZO_DEVICE_CUDA && e->world > 1 &&
      e->cfg.zoffload.comm != ZO_COMM_MPI &&
      (e->cfg.zoffload.comm == ZO_COMM_NCCL || ZO_HAVE_NCCL)) {
    in->dp_device = 1;
    in->n_nccl_comms = 1 + eng_dp3(e);
  }
  /* a GPU plan (a dry run on the host device) partitions stage 3's parameters in device memory */
  in->pdev = e->pdev || (kind == ZO_DEVICE_CUDA && e->pconv);
  in->total_el = e->total_el;
  return ZO_OK;
}

static void plan_input_free(zo_plan_input *in) {
  free((void *)in->tensor);
  in->tensor = NULL;
}

zo_status zo_plan_make(const zo_engine_t *e, const char *what, zo_device_kind kind, zo_plan **out) {
  if (kind != ZO_DEVICE_AUTO && kind != ZO_DEVICE_HOST && kind != ZO_DEVICE_CUDA)
    return zo_error_set(ZO_ERR_INVALID_ARG,
                        "%s: device kind %d is not ZO_DEVICE_AUTO, ZO_DEVICE_HOST or "
                        "ZO_DEVICE_CUDA",
                        what, (int)kind);
  ZO_CHECK(eng_check_usable(e, what));
  if (e->finalized)
    return zo_error_set(ZO_ERR_INVALID_USAGE, "%s: the engine is already finalized", what);
  if (e->n_params == 0)
    return zo_error_set(ZO_ERR_INVALID_USAGE, "%s: no parameter was registered", what);
  /* The device planned for: the engine's own (what its finalize allocates), or the one a dry run plans for on a
   * machine without it (zo-train --dry-run --device cuda). What zo_engine_create refuses for that device is refused
   * by the plan too (create did already for the engine's own). */
  const zo_device_kind pk = kind == ZO_DEVICE_AUTO ? zo_device_get_kind(e->dev) : kind;
  if (e->pconv) { /* checked as configured: offload_param "none" */
    zo_config_t *c = malloc(sizeof *c);
    if (!c) return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "engine: out of host memory");
    *c = e->cfg;
    c->zero.offload_param.device = ZO_OFFLOAD_NONE;
    const zo_status cst = zo_engine_check_device(c, pk, e->world);
    free(c);
    ZO_CHECK(cst);
  } else {
    ZO_CHECK(zo_engine_check_device(&e->cfg, pk, e->world));
  }
  zo_plan_input in;
  ZO_CHECK(eng_plan_input(e, kind, &in));
  const zo_status st = zo_plan_compute(&in, what, out);
  plan_input_free(&in);
  return st;
}

zo_status zo_engine_plan(const zo_engine_t *e, zo_device_kind kind, zo_plan **out) {
  if (!e || !out) return zo_error_set(ZO_ERR_INVALID_ARG, "plan: NULL argument");
  *out = NULL;
  return zo_plan_make(e, "plan", kind, out);
}

void zo_plan_free(zo_plan *p) {
  if (!p) return;
  free(p->tensor);
  free(p->piece);
  free(p->sg);
  free(p);
}

/* @name matches @purpose exactly, or as a prefix when it ends with '.' ("state_host." matches every kind). */
static int name_matches(const char *purpose, const char *name) {
  const size_t n = strlen(name);
  return n && name[n - 1] == '.' ? !strncmp(purpose, name, n) : !strcmp(purpose, name);
}

size_t zo_plan_sum(const zo_plan *p, const char *name) {
  size_t s = 0;
  for (int i = 0; i < p->n_bufs; i++)
    if (name_matches(p->buf[i].purpose, name))
      s = add_sat(s, mul_sat(p->buf[i].bytes, (size_t)p->buf[i].count));
  return s;
}

size_t zo_plan_bytes(const zo_plan *p, const char *name) {
  for (int i = 0; i < p->n_bufs; i++)
    if (!strcmp(p->buf[i].purpose, name)) return p->buf[i].bytes;
  return 0;
}

void zo_plan_print(const zo_plan *p, void *fp) {
  FILE *f = fp ? fp : stdout;
  if (!p) return;
  fprintf(f, "%-7s %-28s %6s %20s %20s  %s\n", "tier", "buffer", "count", "bytes_each",
          "total_bytes", "pinned");
  for (int i = 0; i < p->n_bufs; i++) {
    const zo_plan_buf *b = &p->buf[i];
    fprintf(f, "%-7s %-28s %6d %20zu %20zu  %s\n", zo_tier_name(b->tier), b->purpose, b->count,
            b->bytes, mul_sat(b->bytes, (size_t)b->count),
            b->tier != ZO_TIER_HOST ? "-"
            : b->pinned             ? "yes"
                                    : "no");
  }
  fprintf(f, "plan: device %zu", p->device_bytes);
  if (p->device_need_bytes != p->device_bytes)
    fprintf(f, " (needs %zu with the largest tensor's copy beside it)", p->device_need_bytes);
  fprintf(
      f,
      ", host %zu (pinned %zu), nvme %zu (offload_optimizer.nvme_path) + %zu (offload_param.nvme_path) bytes",
      p->host_bytes, p->pinned_bytes, p->nvme_bytes[0], p->nvme_bytes[1]);
  if (p->n_sgs)
    fprintf(f, "; %d sub-groups of up to %zu elements, %d buffer sets", p->n_sgs, p->slot_el,
            p->n_slots);
  if (p->pcache_tensors)
    fprintf(
        f,
        "; %d of %d tensors' working weights (%zu elements) cached in param_host (offload_param.max_in_cpu)",
        p->pcache_tensors, p->n_tensors, p->pcache_el);
  fprintf(f, "\n");
}

/* ---------------------------------------------------------------- the ledger */

int zo_engine_allocations(const zo_engine_t *e, const zo_plan_buf **bufs) {
  if (!e || !bufs) return 0;
  *bufs = e->ledger;
  return e->n_ledger;
}

/* ---------------------------------------------------------------- buffer shapes the parts allocate by */

size_t eng_acc_in_size(const zo_engine_t *e) {
  return eng_acc_ok(e) ? sizeof(float) : zo_dtype_size(e->gdtype);
}

void eng_acc_ring_shape(const zo_engine_t *e, int dev_adam, size_t *bucket_el, int *n_buckets) {
  *bucket_el = 0, *n_buckets = 0;
  if (e->world > 1) return; /* several ranks stage in the reduction ring (engine_dp.c) */
  if (dev_adam)
    return; /* device Adam adds on the device, into its gradient shard (eng_acc_device) */
  if (e->tier ==
      ZO_OFFLOAD_NVME) { /* every hand-over: one bucket, written out to grad.swp (engine_gradnv.c) */
    *bucket_el = eng_gnv_el(e), *n_buckets = 1;
    return;
  }
  if (!eng_acc_staged(e)) return;
  size_t largest = 0;
  for (int i = 0; i < e->n_params; i++)
    if (e->params[i]->shard_n > largest) largest = e->params[i]->shard_n;
  /* A ring only for a further backward's contributions (zoffload.early_adam false, nothing accumulated
   * otherwise): off the common path, so small (ENG_REOPEN_BUCKET_EL: 8 MiB of bf16) */
  if (!eng_acc_ok(e) && largest > ENG_REOPEN_BUCKET_EL) largest = ENG_REOPEN_BUCKET_EL;
  /* reduce_bucket_size elements (DeepSpeed's unit), capped at this rank's largest shard */
  const int64_t rb = e->cfg.zero.reduce_bucket_size;
  *bucket_el = rb > 0 && (uint64_t)rb < largest ? (size_t)rb : largest;
  if (*bucket_el == 0) *bucket_el = 1;
  /* overlap_comm: two buckets, so the next chunk's copy is queued while the last one's add runs */
  *n_buckets = e->cfg.zero.overlap_comm ? 2 : 1;
}

size_t eng_gnv_el(const zo_engine_t *e) {
  size_t largest = 0;
  for (int i = 0; i < e->n_params; i++)
    if (e->params[i]->shard_n > largest) largest = e->params[i]->shard_n;
  const int64_t rb = e->cfg.zero.reduce_bucket_size;
  size_t el = rb > 0 && (uint64_t)rb < largest ? (size_t)rb : largest;
  const int64_t sgs = e->cfg.zero.sub_group_size; /* no larger than a sub-group's buffer */
  if (sgs > 0 && (uint64_t)sgs < el) el = (size_t)sgs;
  size_t unit = eng_extent_unit_at(e, e->swap_align ? e->swap_align : 4096);
  if (unit < ENG_NORM_CHUNK)
    unit = ENG_NORM_CHUNK; /* both powers of two: the larger is a multiple of the other */
  size_t r;
  if (zo_size_round_up(el ? el : 1, unit, &r)) r = unit;
  return r;
}
