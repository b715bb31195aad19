/*
 * placement.c - the placement planner and the step-time model
 * (zoffload/placement.h): how much of each offloaded kind of state stays in
 * host memory, and what one optimizer step costs for a placement. Reads the
 * engine and its plan (plan.c) and budget (budget.c); sets only the two
 * budgets (e->opt_res_el, e->pcache_el) that plan.c places by. Not here: the
 * measurement of the rates (speeds.c), the data paths (engine_nvme.c,
 * engine_fetch.c).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"
#include "plan_internal.h"
#include "zoffload/placement.h"
#include "zoffload/speeds.h"

/* Host memory the planner leaves to the OS, the page cache and the data loader: max(2 GiB, MemTotal / 7). */
#define PLACE_HEADROOM_MIN ((size_t)2 << 30)
#define PLACE_HEADROOM_DIV 7

static size_t sub0(size_t a, size_t b) { return a > b ? a - b : 0; }

/* ---------------------------------------------------------------- the model */

/* A placement as the model sees it: the plan's sub-groups (the last n_res resident) and tensors (those with
 * cached[i] in host memory; NULL: none). */
typedef struct pm_layout {
  const zo_plan *pl;
  int n_res;
  const unsigned char *cached;
} pm_layout;

static double secs(double bytes, double rate) { return rate > 0 ? bytes / rate : 0; }

static void model(const zo_engine_t *e, const pm_layout *L, const zo_step_rates *r,
                  zo_step_prediction *o) {
  const zo_plan *pl = L->pl;
  const zo_config_t *c = &e->cfg;
  memset(o, 0, sizeof *o);
  const double wsz = (double)zo_dtype_size(e->wdtype), gsz = (double)zo_dtype_size(e->adtype);
  const double hsz = (double)zo_dtype_size(e->gdtype), esz = (double)pl->state_esz;
  const double gas = (double)c->gradient_accumulation_steps;
  const double F = r->fetches_per_step > 0 ? r->fetches_per_step : 2 * gas;
  const double unit = pl->extent_unit ? (double)pl->extent_unit : 1;
  double P = 0, p_read = 0, p_write = 0, h2d = 0;
  for (int i = 0; i < e->n_params; i++) {
    const zo_param_t *p = e->params[i];
    P += (double)p->shard_n;
    if (e->ptier == ZO_OFFLOAD_NONE) {
      if (e->tier != ZO_OFFLOAD_NONE)
        h2d += (double)p->shard_n * wsz; /* the new weights, once a step */
      continue;
    }
    const int persistent = (int64_t)p->n <= c->zero.stage3_param_persistence_threshold;
    h2d +=
        (persistent ? 1 : F) * (double)p->n * wsz; /* a persistent tensor: refreshed once, stays */
    if (e->ptier == ZO_OFFLOAD_NVME && !(L->cached && L->cached[i])) {
      const double padded = ceil((double)p->n / unit) * unit * wsz;
      if (!persistent) p_read += F * padded;
      p_write += ceil((double)p->shard_n / unit) * unit * wsz;
    }
  }
  const double d2h = gas * P * hsz;
  /* the optimizer's NVMe traffic: the streamed sub-groups */
  double s_read_a = 0, s_read_b = 0, s_write = 0, g_read_a = 0, g_read_b = 0, g_write = 0, fill = 0;
  if (e->tier == ZO_OFFLOAD_NVME) {
    const int n_str = pl->n_sgs - L->n_res;
    int slots =
        c->zero.offload_optimizer.buffer_count < 1 ? 1 : c->zero.offload_optimizer.buffer_count;
    if (slots > n_str) slots = n_str;
    double es = 0, held = 0, largest = 0;
    for (int g = 0; g < n_str; g++) {
      const double n = (double)pl->sg[g].n_el;
      es += n;
      if (g >= n_str - slots)
        held += n; /* read ahead into the free buffers during forward: its gradients stay */
      if (n > largest) largest = n;
    }
    if (slots < n_str) {
      s_read_a = held * esz;        /* the first sub-groups in update order, read during forward */
      s_read_b = (es - held) * esz; /* the others, inside the update */
      fill = largest * esz;         /* the first of them, which nothing overlaps */
      g_read_b = (es - held) * gsz; /* their gradients, back from grad.swp for Adam */
      g_write = (es - held) * gsz;  /* written at the hand-over */
      g_read_a = (es - held) * gsz * (gas - 1); /* accumulation: read, added, written again */
      g_write += (es - held) * gsz * (gas - 1);
    }
    /* else every streamed sub-group stays in its buffer: written through, never read back */
    s_write = es * esz;
  }
  o->param_read_bytes = (uint64_t)p_read, o->param_write_bytes = (uint64_t)p_write;
  o->state_read_bytes = (uint64_t)(s_read_a + s_read_b), o->state_write_bytes = (uint64_t)s_write;
  o->grad_read_bytes = (uint64_t)(g_read_a + g_read_b), o->grad_write_bytes = (uint64_t)g_write;
  o->nvme_read_bytes = o->param_read_bytes + o->state_read_bytes + o->grad_read_bytes;
  o->nvme_write_bytes = o->param_write_bytes + o->state_write_bytes + o->grad_write_bytes;
  o->h2d_bytes = (uint64_t)h2d, o->d2h_bytes = (uint64_t)d2h;
  const double rd = r->nvme_read_Bps, wr = r->nvme_write_Bps;
  o->nvme_read_s = secs(p_read + s_read_a + s_read_b + g_read_a + g_read_b, rd);
  o->nvme_write_s = secs(p_write + s_write + g_write, wr);
  o->h2d_s = secs(h2d, r->h2d_Bps), o->d2h_s = secs(d2h, r->d2h_Bps);
  o->compute_s = r->compute_s > 0 ? r->compute_s : 0;
  /* device Adam (offload_optimizer "none" on a GPU) is the device's: counted in compute */
  o->adam_s = eng_device_adam(e) ? 0 : secs(P, r->adam_el_per_s);
  /* forward + backward. A fetch from NVMe is demand-driven along the trace and its prefetch window
   * (stage3_prefetch_bucket_size) is about a layer: its reads add to the compute rather than hide under it. The
   * phase's other disk work (gradient writes and read-adds, the next sub-groups' state read into free buffers) is
   * asynchronous, reads and writes in flight together (an NVMe device serves both at once). */
  const double fetch = secs(p_read, rd);
  const double async_a = fmax(secs(s_read_a + g_read_a, rd), secs(g_write, wr));
  /* the link's copies are on the same path: a fetch's host-to-device copy follows its read, a gradient's
   * device-to-host copy is waited before it is added into the host shard */
  const double link = o->h2d_s + o->d2h_s;
  double a = o->compute_s + fetch + link;
  if (fetch + link + async_a > a) a = fetch + link + async_a;
  /* the update: Adam against the disk's remaining work (reads and writes together), plus the first streamed
   * sub-group's read, which nothing overlaps */
  const double disk_b = fmax(secs(s_read_b + g_read_b, rd), secs(s_write + p_write, wr));
  double b = o->adam_s > disk_b ? o->adam_s : disk_b;
  if (disk_b > 0) b += secs(fill, rd);
  const int early = c->gradient_clipping == 0 && !c->fp16.enabled && !e->dpu;
  if (e->dpu) { /* the last step's update (Adam, nvme: its disk work) overlaps this compute */
    o->fwd_bwd_s = a > b ? a : b;
    o->update_s = 0;
  } else if (early) {
    /* updates start as gradients land: one phase, the disk's work and Adam overlapping */
    double t = a;
    const double disk = fetch + fmax(secs(s_read_a + g_read_a + s_read_b + g_read_b, rd),
                                     secs(g_write + s_write + p_write, wr));
    if (disk > t) t = disk;
    if (o->adam_s > t) t = o->adam_s;
    o->fwd_bwd_s = t, o->update_s = 0;
  } else {
    o->fwd_bwd_s = a, o->update_s = b;
  }
  o->step_s = o->fwd_bwd_s + o->update_s;
  /* what bounds it: the resource with the most busy time */
  const double disk = fmax(o->nvme_read_s, o->nvme_write_s);
  o->bound = "compute";
  double most = o->compute_s;
  if (disk > most) most = disk, o->bound = "nvme";
  if (o->adam_s > most) most = o->adam_s, o->bound = "adam";
  if (link > most) o->bound = "link";
}

/* ---------------------------------------------------------------- prediction */

/* The layout of plan @pl for the engine as configured (e->pcache_el): which tensors are cached. */
static unsigned char *cached_of(const zo_engine_t *e, const zo_plan *pl) {
  unsigned char *c = calloc((size_t)e->n_params + 1, 1);
  if (c)
    for (int i = 0; i < e->n_params; i++) c[i] = (unsigned char)(pl->tensor[i].pw_host != 0);
  return c;
}

zo_status zo_engine_predict(const zo_engine_t *e, const zo_step_rates *r, zo_step_prediction *out) {
  if (!e || !r || !out) return zo_error_set(ZO_ERR_INVALID_ARG, "predict: NULL argument");
  zo_plan *pl = NULL;
  if (e->finalized) {
    /* as allocated: the plan finalize kept (its layout is the engine's) */
    if (!e->plan)
      return zo_error_set(ZO_ERR_INVALID_USAGE, "predict: the engine kept no plan (a bug)");
    pl = e->plan;
  } else {
    ZO_CHECK(zo_plan_make(e, "predict", ZO_DEVICE_AUTO, &pl));
  }
  unsigned char *cached = cached_of(e, pl);
  zo_status st = cached ? ZO_OK : zo_error_set(ZO_ERR_OUT_OF_MEMORY, "predict: out of host memory");
  if (st == ZO_OK) {
    pm_layout L = {pl, pl->n_res_sgs, cached};
    model(e, &L, r, out);
  }
  free(cached);
  if (!e->finalized) zo_plan_free(pl);
  return st;
}

/* ---------------------------------------------------------------- the planner */

/* Budget lines of @b by tier: the room left on the host line (less @headroom) and the pinned line, the least room
 * of the nvme lines, and what the worst nvme line lacks (0 when every one fits). */
static void limits(const zo_budget *b, const zo_place_opts *o, size_t headroom, size_t *host,
                   size_t *pinned, size_t *nvme_room, size_t *nvme_deficit) {
  *host = *pinned = *nvme_room = SIZE_MAX;
  *nvme_deficit = 0;
  size_t dev_need = 0;
  for (int i = 0; i < b->n_lines; i++)
    if (b->line[i].tier == ZO_TIER_DEVICE && o->device_not_host) dev_need = b->line[i].need;
  for (int i = 0; i < b->n_lines; i++) {
    const zo_budget_line *l = &b->line[i];
    if (l->tier == ZO_TIER_HOST) {
      const size_t avail = o->assume_host_available ? o->assume_host_available : l->available;
      *host = avail == SIZE_MAX ? SIZE_MAX : sub0(sub0(avail, headroom), sub0(l->need, dev_need));
    } else if (l->tier == ZO_TIER_PINNED) {
      const size_t avail = o->assume_pinned_limit ? o->assume_pinned_limit : l->available;
      *pinned = avail == SIZE_MAX ? SIZE_MAX : sub0(avail, l->need);
    } else if (l->tier == ZO_TIER_NVME) {
      const size_t avail = o->assume_nvme_free ? o->assume_nvme_free : l->available;
      if (avail == SIZE_MAX) continue;
      if (sub0(avail, l->need) < *nvme_room) *nvme_room = sub0(avail, l->need);
      if (sub0(l->need, avail) > *nvme_deficit) *nvme_deficit = sub0(l->need, avail);
    }
  }
}

/* How many of @pl's sub-groups, the last ones first, fit in @room bytes at @el_bytes an element; their bytes in
 * *@bytes. */
static int fit_sub_groups(const zo_plan *pl, size_t el_bytes, size_t room, size_t *bytes) {
  int n = 0;
  *bytes = 0;
  while (n < pl->n_sgs) {
    const size_t nb = mul_sat((size_t)pl->sg[pl->n_sgs - 1 - n].n_el, el_bytes);
    if (add_sat(*bytes, nb) > room) break;
    *bytes = add_sat(*bytes, nb), n++;
  }
  return n;
}

/* @out's description of the engine's placement as it stands (the budgets e->opt_res_el and e->pcache_el) for a
 * device of @kind, and its predicted step; the limits and the candidate count are the caller's. */
static zo_status describe(const zo_engine_t *e, zo_device_kind kind, const zo_step_rates *r,
                          zo_placement *out) {
  zo_plan *pl;
  ZO_CHECK(zo_plan_make(e, "place", kind, &pl));
  unsigned char *c = cached_of(e, pl);
  if (!c) {
    zo_plan_free(pl);
    return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "place: out of host memory");
  }
  out->optimizer_max_in_cpu = e->opt_res_el, out->param_max_in_cpu = e->pcache_el;
  out->resident_sub_groups = pl->n_res_sgs, out->sub_groups = pl->n_sgs;
  out->optimizer_resident_el = pl->res_el,
  out->optimizer_total_el = (size_t)pl->state_file_el + pl->res_el;
  out->param_total_el = out->param_cached_el = 0;
  for (int i = 0; i < e->n_params && e->ptier == ZO_OFFLOAD_NVME; i++) {
    out->param_total_el += e->params[i]->n;
    if (c[i]) out->param_cached_el += e->params[i]->n;
  }
  out->host_bytes = pl->host_bytes, out->pinned_bytes = pl->pinned_bytes;
  out->nvme_bytes = add_sat(pl->nvme_bytes[0], pl->nvme_bytes[1]);
  pm_layout L = {pl, pl->n_res_sgs, c};
  model(e, &L, r, &out->pred);
  free(c);
  zo_plan_free(pl);
  return ZO_OK;
}

/* "auto": the budgets of the split with the least predicted step, set in e->opt_res_el and e->pcache_el; @out gets
 * the limits and the number of candidates. */
static zo_status choose(zo_engine_t *e, const zo_step_rates *r, const zo_place_opts *o,
                        zo_placement *out) {
  const int opt_nv = e->tier == ZO_OFFLOAD_NVME, par_nv = e->ptier == ZO_OFFLOAD_NVME;
  /* The base: nothing kept in host memory (with residency's piece rounding when the optimizer may keep some). */
  e->opt_res_el = opt_nv ? 1 : 0, e->pcache_el = 0;
  zo_plan *base = NULL;
  zo_status st = zo_plan_make(e, "place", o->kind, &base);
  zo_budget b;
  if (st == ZO_OK) st = zo_plan_budget(e, base, o->app, &b);
  size_t total = SIZE_MAX;
  if (st == ZO_OK) st = zo_plan_mem_total(&total);
  unsigned char *cached = st == ZO_OK ? calloc((size_t)e->n_params + 1, 1) : NULL;
  if (st == ZO_OK && !cached) st = zo_error_set(ZO_ERR_OUT_OF_MEMORY, "place: out of host memory");
  if (st != ZO_OK) {
    zo_plan_free(base);
    free(cached);
    return st;
  }
  const size_t headroom = total == SIZE_MAX ? PLACE_HEADROOM_MIN
                          : total / PLACE_HEADROOM_DIV > PLACE_HEADROOM_MIN
                              ? total / PLACE_HEADROOM_DIV
                              : PLACE_HEADROOM_MIN;
  size_t host_room, pinned_room, nvme_room, deficit;
  limits(&b, o, headroom, &host_room, &pinned_room, &nvme_room, &deficit);
  const int64_t cap =
      e->cfg.zoffload.placement_host_bytes; /* the user's cap on the host memory kept state takes */
  if (cap > 0 && (uint64_t)cap < host_room) host_room = (size_t)cap;
  const size_t wsz = zo_dtype_size(e->wdtype), gsz = zo_dtype_size(e->adtype);
  const size_t opt_el_bytes =
      base->state_esz + gsz; /* a resident element: its state and gradient sum */
  const int pin = e->cfg.zero.offload_param.pin_memory;
  out->host_limit = host_room, out->pinned_limit = pinned_room, out->nvme_limit = nvme_room;

  /* Candidates: the first k tensors cached (parameters on nvme), then the most sub-groups the rest holds. */
  double best = INFINITY;
  int best_k = 0, best_res = 0;
  size_t best_bytes = SIZE_MAX, cache_bytes = 0, res_bytes;
  for (int k = 0; k <= (par_nv ? e->n_params : 0); k++) {
    if (k > 0) {
      const zo_param_t *p = e->params[k - 1];
      cache_bytes = add_sat(cache_bytes, mul_sat(eng_dp3(e) ? p->part_n : p->n, wsz));
      cached[k - 1] = 1;
    }
    if (cache_bytes > host_room || (pin && cache_bytes > pinned_room)) break;
    const int n_res =
        opt_nv ? fit_sub_groups(base, opt_el_bytes, host_room - cache_bytes, &res_bytes) : 0;
    if (!opt_nv) res_bytes = 0;
    /* the NVMe space it frees must cover what the base lacks */
    const size_t bytes = add_sat(res_bytes, cache_bytes);
    if (bytes < deficit) continue;
    pm_layout L = {base, n_res, cached};
    zo_step_prediction pr;
    model(e, &L, r, &pr);
    out->candidates++;
    if (pr.step_s < best * (1 - 1e-9) || (pr.step_s <= best * (1 + 1e-9) && bytes < best_bytes))
      best = pr.step_s, best_k = k, best_res = n_res, best_bytes = bytes;
  }
  if (!isfinite(best)) {
    /* No split frees enough NVMe space: keep as much as host memory holds (the least the disk then lacks) and let
     * the start-up budget refuse it, naming what to change. */
    best_k = 0, best_res = opt_nv ? fit_sub_groups(base, opt_el_bytes, host_room, &res_bytes) : 0;
    zo_warn(
        "zoffload.placement \"auto\": no split frees the %zu bytes the NVMe files lack; keeping what host memory "
        "holds (%zu bytes)",
        deficit, opt_nv ? res_bytes : 0);
  }
  /* Set the budgets: exactly the chosen sub-groups' and tensors' elements. */
  size_t res_el = 0, cache_el = 0;
  for (int g = 0; g < best_res; g++) res_el += (size_t)base->sg[base->n_sgs - 1 - g].n_el;
  for (int i = 0; i < best_k; i++) cache_el += eng_dp3(e) ? e->params[i]->part_n : e->params[i]->n;
  e->opt_res_el =
      opt_nv ? (res_el ? res_el : 1) : 0; /* 1: piece rounding as planned, nothing resident */
  e->pcache_el = cache_el;
  zo_plan_free(base);
  free(cached);
  return ZO_OK;
}

zo_status zo_engine_place(zo_engine_t *e, const zo_step_rates *r, const zo_place_opts *opts,
                          zo_placement *out) {
  if (!e || !r || !out) return zo_error_set(ZO_ERR_INVALID_ARG, "place: NULL argument");
  ZO_CHECK(eng_check_usable(e, "place"));
  if (e->finalized)
    return zo_error_set(ZO_ERR_INVALID_USAGE, "place: the engine is already finalized");
  const zo_place_opts none = {0};
  const zo_place_opts *o = opts ? opts : &none;
  memset(out, 0, sizeof *out);
  if (e->cfg.zoffload.placement !=
      ZO_PLACEMENT_AUTO) { /* "config": the config's own placement, predicted */
    out->host_limit = out->pinned_limit = out->nvme_limit = SIZE_MAX;
    out->candidates = 1;
    return describe(e, o->kind, r, out);
  }
  const size_t keep_opt = e->opt_res_el, keep_par = e->pcache_el;
  zo_status st = choose(e, r, o, out);
  if (st != ZO_OK) {
    e->opt_res_el = keep_opt, e->pcache_el = keep_par;
    return st;
  }
  ZO_CHECK(describe(e, o->kind, r, out)); /* the chosen plan, predicted as it will be allocated */
  e->placed = 1;
  return ZO_OK;
}

/* ---------------------------------------------------------------- printing */

void zo_step_prediction_print(const zo_step_prediction *p, void *fp) {
  FILE *f = fp ? fp : stdout;
  fprintf(
      f,
      "predicted step %.1f ms (bound by %s): forward+backward %.1f ms, update %.1f ms | busy: compute %.1f, "
      "nvme read %.1f (%.2f GB), nvme write %.1f (%.2f GB), adam %.1f, h2d %.1f, d2h %.1f ms\n",
      p->step_s * 1e3, p->bound ? p->bound : "?", p->fwd_bwd_s * 1e3, p->update_s * 1e3,
      p->compute_s * 1e3, p->nvme_read_s * 1e3, p->nvme_read_bytes / 1e9, p->nvme_write_s * 1e3,
      p->nvme_write_bytes / 1e9, p->adam_s * 1e3, p->h2d_s * 1e3, p->d2h_s * 1e3);
}

void zo_placement_print(const zo_placement *pl, void *fp) {
  FILE *f = fp ? fp : stdout;
  char h[32], pn[32], nv[32], hl[32];
  zo_format_bytes(h, sizeof h, (double)pl->host_bytes);
  zo_format_bytes(pn, sizeof pn, (double)pl->pinned_bytes);
  zo_format_bytes(nv, sizeof nv, (double)pl->nvme_bytes);
  if (pl->host_limit == SIZE_MAX)
    snprintf(hl, sizeof hl, "no limit");
  else
    zo_format_bytes(hl, sizeof hl, (double)pl->host_limit);
  fprintf(
      f,
      "placement: optimizer state %zu of %zu elements in host memory (%d of %d sub-groups), the rest on nvme "
      "| working weights %zu of %zu offloaded elements in host memory | host %s (pinned %s), nvme %s | "
      "room for kept state %s | %d placements compared\n",
      pl->optimizer_resident_el, pl->optimizer_total_el, pl->resident_sub_groups, pl->sub_groups,
      pl->param_cached_el, pl->param_total_el, h, pn, nv, hl, pl->candidates);
}

/* ---------------------------------------------------------------- rates */

zo_status zo_step_rates_get(zo_engine_t *e, double compute_s, double fetches_per_step,
                            zo_step_rates *r) {
  if (!e || !r) return zo_error_set(ZO_ERR_INVALID_ARG, "step rates: NULL argument");
  memset(r, 0, sizeof *r);
  const zo_config_t *c = &e->cfg;
  const char *path = e->tier == ZO_OFFLOAD_NVME    ? c->zero.offload_optimizer.nvme_path
                     : e->ptier == ZO_OFFLOAD_NVME ? c->zero.offload_param.nvme_path
                                                   : NULL;
  zo_speeds sp;
  ZO_CHECK(zo_speeds_get(c, e->dev, path, &sp));
  r->nvme_read_Bps = sp.nvme_read_bytes_per_s, r->nvme_write_Bps = sp.nvme_write_bytes_per_s;
  r->h2d_Bps = sp.h2d_bytes_per_s, r->d2h_Bps = sp.d2h_bytes_per_s;
  r->adam_el_per_s = sp.adam_elems_per_s;
  r->compute_s = compute_s > 0 ? compute_s : 0;
  r->fetches_per_step = fetches_per_step > 0 ? fetches_per_step : 0;
  snprintf(r->src[0], sizeof r->src[0], "%s", sp.nvme_read_src);
  snprintf(r->src[1], sizeof r->src[1], "%s", sp.nvme_write_src);
  snprintf(r->src[2], sizeof r->src[2], "%s", sp.h2d_src);
  snprintf(r->src[3], sizeof r->src[3], "%s", sp.d2h_src);
  snprintf(r->src[4], sizeof r->src[4], "%s", sp.adam_src);
  snprintf(r->src[5], sizeof r->src[5], "%s",
           compute_s > 0 ? "the caller" : "unknown (not in the prediction)");
  return ZO_OK;
}
