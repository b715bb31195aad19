/*
 * report.c - zo-stepbench's results: the summary lines, the targets of issue
 * 5 that a run can judge, and the --json file. It prints and writes what
 * main.c measured and summarized; it measures nothing.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>

#include "stepbench.h"

/* @r with three decimals into @buf (@cap bytes), or "-" where it is not finite (no prediction to divide by). */
static const char *ratio_str(char *buf, size_t cap, double r) {
  if (isfinite(r))
    snprintf(buf, cap, "%.3f", r);
  else
    snprintf(buf, cap, "-");
  return buf;
}

/* The measured step (the mean over the steps after warmup, as step_s) and swap bytes against the placement's
 * predicted ones, one row each. */
static void report_predicted(const opts *o, const bench *b) {
  const summary *m = &b->sum;
  const zo_step_prediction *p = &b->place.pred;
  char r[3][16];
  printf(
      "  measured against predicted (placement \"%s\", bound by %s), per step, mean over steps %d..%d:\n",
      o->placement == ZO_PLACEMENT_AUTO ? "auto" : "config", p->bound ? p->bound : "?",
      o->warmup + 1, o->steps);
  printf("    %-11s %12s %12s %8s\n", "", "measured", "predicted", "ratio");
  printf("    %-11s %9.1f ms %9.1f ms %8s\n", "step", m->s.step_s * 1e3, p->step_s * 1e3,
         ratio_str(r[0], sizeof r[0], m->step_over_predicted));
  printf("    %-11s %9.4f GB %9.4f GB %8s\n", "nvme read", m->nvme_read_bytes / 1e9,
         (double)p->nvme_read_bytes / 1e9, ratio_str(r[1], sizeof r[1], m->read_over_predicted));
  printf("    %-11s %9.4f GB %9.4f GB %8s\n", "nvme write", m->nvme_write_bytes / 1e9,
         (double)p->nvme_write_bytes / 1e9, ratio_str(r[2], sizeof r[2], m->write_over_predicted));
}

void report_summary(const opts *o, const bench *b) {
  const step_rec s = b->sum.s;
  const int n = b->sum.n, world = b->world;
  const zo_config_t *cfg = &b->cfg;
  const linkbench lim = b->lim;
  const baseline base = b->base;
  const size_t wsz = b->wsz;
  const double comm_ratio = b->sum.comm_ratio, opt_bytes_per_param = b->sum.opt_bytes_per_param;
  const double disk_ratio = b->sum.disk_ratio, link_ratio = b->sum.link_ratio;
  const double link_h2d_gbps = b->sum.link_h2d_gbps, link_d2h_gbps = b->sum.link_d2h_gbps;
  const double link_h2d_ratio = b->sum.link_h2d_ratio, link_d2h_ratio = b->sum.link_d2h_ratio;

  printf("\nsummary over steps %d..%d (%d step%s):\n", o->warmup + 1, o->steps, n,
         n == 1 ? "" : "s");
  printf("  step_s %.4f  compute_s %.4f  transfer_s %.4f  adam_s %.4f  -> overlap efficiency "
         "(max(compute, transfer, adam) / step) %.3f\n",
         s.step_s, s.compute_s, s.transfer_s, s.info.adam_s, s.overlap_efficiency);
  printf(
      "  exposed: fetch wait %.4f s (engine says %.4f), grad_ready %.4f s, engine_step %.4f s (grad wait %.4f, swap %.4f, adam %.4f, "
      "copy %.4f)\n",
      s.fetch_wait_s, s.info.fetch_wait_s, s.grad_ready_s, s.engine_step_s, s.info.grad_wait_s,
      s.info.swap_s, s.info.adam_s, s.info.copy_s);
  if (world > 1)
    printf(
        "  communication, %d ranks, stage %d, overlap_comm %s: exposed %.4f s per step (%.3f of the step); %.4g bytes sent per "
        "rank per step = %.3f x ZeRO's %s x params x %zu B (a ring's minimum: (W-1)/W = %.3f)\n",
        world, cfg->zero.stage, cfg->zero.overlap_comm ? "on" : "off", s.info.comm_s,
        s.info.comm_s / s.step_s, (double)s.info.comm_bytes, comm_ratio,
        cfg->zero.stage == 3 ? "3" : "2", wsz, (double)(world - 1) / world);
  printf("  optimizer window %.4f s: %.3g params/s, nvme %.1f bytes/param, disk %.3f GB/s",
         s.opt_window_s, s.params_per_s, opt_bytes_per_param, s.disk_gbps);
  if (base.ok)
    printf(" = %.3f of baseline %.3f GB/s\n", disk_ratio, base.gbps);
  else
    printf(" (no baseline)\n");
  if (o->device == ZO_DEVICE_HOST)
    printf(
        "  link: %.3f GB/s achieved (H2D %.3g B, D2H %.3g B per step; lanes busy %.4f / %.4f s; setting %.3g GB/s)\n",
        s.link_gbps, (double)s.h2d_bytes / n, (double)s.d2h_bytes / n, s.h2d_busy_s, s.d2h_busy_s,
        o->link_gbps);
  else
    printf(
        "  link: %.3f GB/s achieved (H2D %.3g B, D2H %.3g B per step; bytes from the %s counters)\n",
        s.link_gbps, (double)s.h2d_bytes / n, (double)s.d2h_bytes / n,
        b->dev_link_stats ? "device's" : "engine's");
  if (lim.ok)
    printf("  link vs limit: %.3f of full duplex %.3f GB/s; H2D %.3f GB/s = %.3f of %.3f; "
           "D2H %.3f GB/s = %.3f of %.3f\n",
           link_ratio, lim.duplex_gbps, link_h2d_gbps, link_h2d_ratio, lim.h2d_gbps, link_d2h_gbps,
           link_d2h_ratio, lim.d2h_gbps);
  else
    printf("  link vs limit: n/a (limit not measured: %s)\n", lim.note);
  report_predicted(o, b);
}

json_t *report_targets(const opts *o, const bench *b) {
  const step_rec s = b->sum.s;
  const baseline base = b->base;
  const uint64_t N = b->N;
  const double disk_ratio = b->sum.disk_ratio, opt_bytes_per_param = b->sum.opt_bytes_per_param;
  json_t *targets = json_array();
  printf("\ntargets (issue 5):\n");
  {
    json_t *t = json_object();
    json_object_set_new(
        t, "name",
        json_string(
            "optimizer step disk bandwidth >= 0.85 x baseline (1e9 params, state on nvme)"));
    json_object_set_new(t, "threshold", json_real(0.85));
    if (o->oopt == ZO_OFFLOAD_NVME && base.ok) {
      int pass = disk_ratio >= 0.85;
      printf(
          "  %s disk: optimizer step %.3f GB/s / baseline %.3f GB/s = %.3f (target >= 0.85; %.1f bytes/param; "
          "%" PRIu64 " params%s)\n",
          pass ? "PASS" : "MISS", s.disk_gbps, base.gbps, disk_ratio, opt_bytes_per_param, N,
          N >= 1000000000ull ? "" : ", the target is stated for 1e9");
      json_object_set_new(t, "status", json_string(pass ? "PASS" : "MISS"));
      json_object_set_new(t, "ratio", json_real(disk_ratio));
    } else {
      printf("  n/a  disk: needs --offload-optimizer nvme and the baseline\n");
      json_object_set_new(t, "status", json_string("n/a"));
    }
    json_array_append_new(targets, t);
  }
  {
    json_t *t = json_object();
    json_object_set_new(t, "name",
                        json_string("overlap efficiency >= 0.9 when compute exceeds transfer"));
    json_object_set_new(t, "threshold", json_real(0.9));
    if (s.compute_s > s.transfer_s && s.compute_s > 0) {
      int pass = s.overlap_efficiency >= 0.9;
      printf(
          "  %s overlap: max(compute %.4f, transfer %.4f, adam %.4f) / step %.4f = %.3f (target >= 0.9)\n",
          pass ? "PASS" : "MISS", s.compute_s, s.transfer_s, s.info.adam_s, s.step_s,
          s.overlap_efficiency);
      json_object_set_new(t, "status", json_string(pass ? "PASS" : "MISS"));
      json_object_set_new(t, "ratio", json_real(s.overlap_efficiency));
    } else {
      printf("  n/a  overlap: compute %.4f s does not exceed transfer %.4f s\n", s.compute_s,
             s.transfer_s);
      json_object_set_new(t, "status", json_string("n/a"));
    }
    json_array_append_new(targets, t);
  }
  printf("  n/a  zo-train step time <= 1.2x all-in-device: measured by zo-train, not here\n");
  return targets;
}

static json_t *step_json(const step_rec *r, int idx) {
  json_t *j = json_object();
  json_object_set_new(j, "step", json_integer(idx + 1));
  json_object_set_new(j, "step_s", json_real(r->step_s));
  json_object_set_new(j, "compute_s", json_real(r->compute_s));
  json_object_set_new(j, "fetch_wait_s", json_real(r->fetch_wait_s));
  json_object_set_new(j, "grad_ready_s", json_real(r->grad_ready_s));
  json_object_set_new(j, "engine_step_s", json_real(r->engine_step_s));
  json_object_set_new(j, "opt_window_s", json_real(r->opt_window_s));
  json_object_set_new(j, "nvme_bytes", json_integer((json_int_t)r->nvme_bytes));
  json_object_set_new(j, "opt_nvme_bytes", json_integer((json_int_t)r->opt_nvme_bytes));
  json_object_set_new(j, "nvme_read_bytes", json_integer((json_int_t)r->nvme_read_bytes));
  json_object_set_new(j, "nvme_write_bytes", json_integer((json_int_t)r->nvme_write_bytes));
  json_object_set_new(j, "h2d_bytes", json_integer((json_int_t)r->h2d_bytes));
  json_object_set_new(j, "d2h_bytes", json_integer((json_int_t)r->d2h_bytes));
  json_object_set_new(j, "h2d_busy_s", json_real(r->h2d_busy_s));
  json_object_set_new(j, "d2h_busy_s", json_real(r->d2h_busy_s));
  json_object_set_new(j, "link_stall_s", json_real(r->link_stall_s));
  json_object_set_new(j, "disk_gbps", json_real(r->disk_gbps));
  json_object_set_new(j, "link_gbps", json_real(r->link_gbps));
  json_object_set_new(j, "params_per_s", json_real(r->params_per_s));
  json_object_set_new(j, "transfer_s", json_real(r->transfer_s));
  json_object_set_new(j, "adam_s", json_real(r->info.adam_s));
  json_object_set_new(j, "overlap_efficiency", json_real(r->overlap_efficiency));
  json_object_set_new(j, "device_peak_bytes", json_integer((json_int_t)r->device_peak_bytes));
  json_t *info = json_object();
  json_object_set_new(info, "skipped", json_integer(r->info.skipped));
  json_object_set_new(info, "grad_norm", json_real(r->info.grad_norm));
  json_object_set_new(info, "grad_wait_s", json_real(r->info.grad_wait_s));
  json_object_set_new(info, "adam_s", json_real(r->info.adam_s));
  json_object_set_new(info, "swap_s", json_real(r->info.swap_s));
  json_object_set_new(info, "copy_s", json_real(r->info.copy_s));
  json_object_set_new(info, "fetch_wait_s", json_real(r->info.fetch_wait_s));
  json_object_set_new(j, "engine_info", info);
  return j;
}

/* The run's settings, as the config object of the JSON. */
static json_t *config_json(const opts *o, const bench *b) {
  const zo_config_t *cfg = &b->cfg;
  const uint64_t N = b->N;
  const int L = b->L;
  const zo_dtype wdt = b->wdt;
  json_t *c = json_object();
  json_object_set_new(c, "params", json_integer((json_int_t)N));
  json_object_set_new(c, "layers", json_integer(L));
  json_object_set_new(c, "steps", json_integer(o->steps));
  json_object_set_new(c, "warmup", json_integer(o->warmup));
  json_object_set_new(c, "compute_ms_per_layer", json_real(o->compute_ms));
  json_object_set_new(c, "offload_param", json_string(zo_offload_device_name(o->oparam)));
  json_object_set_new(c, "offload_optimizer", json_string(zo_offload_device_name(o->oopt)));
  json_object_set_new(c, "stage", json_integer(cfg->zero.stage));
  json_object_set_new(c, "device_limit", json_integer((json_int_t)o->device_limit));
  json_object_set_new(c, "device", json_string(zo_device_kind_name(o->device)));
  json_object_set_new(c, "link_gbps",
                      o->device == ZO_DEVICE_HOST ? json_real(o->link_gbps) : json_null());
  json_object_set_new(c, "sub_group_size", json_integer(cfg->zero.sub_group_size));
  json_object_set_new(c, "buffer_count", json_integer(cfg->zero.offload_optimizer.buffer_count));
  json_object_set_new(c, "param_buffer_count", json_integer(cfg->zero.offload_param.buffer_count));
  json_object_set_new(c, "block_size", json_integer(cfg->aio.block_size));
  json_object_set_new(c, "queue_depth", json_integer(cfg->aio.queue_depth));
  json_object_set_new(c, "adam_threads", json_integer(o->adam_threads));
  json_object_set_new(c, "gas", json_integer(o->gas));
  json_object_set_new(c, "placement",
                      json_string(o->placement == ZO_PLACEMENT_AUTO ? "auto" : "config"));
  json_object_set_new(c, "optimizer_max_in_cpu", json_integer(o->optimizer_max_in_cpu));
  json_object_set_new(c, "param_max_in_cpu",
                      o->param_max_in_cpu >= 0 ? json_integer(o->param_max_in_cpu) : json_null());
  json_object_set_new(c, "placement_host_bytes", json_integer(o->placement_host_bytes));
  json_object_set_new(c, "dtype", json_string(zo_dtype_name(wdt)));
  json_object_set_new(c, "nvme_path", json_string(o->nvme_path));
  return c;
}

/* The baseline chosen, and both runs. */
static json_t *baseline_json(const bench *b) {
  const baseline base = b->base;
  const baseline *base_runs = b->base_runs;
  json_t *j = json_object();
  json_object_set_new(j, "ok", json_boolean(base.ok));
  json_object_set_new(j, "bytes", json_integer((json_int_t)base.bytes));
  json_object_set_new(j, "gbps", json_real(base.gbps));
  json_object_set_new(j, "chosen",
                      json_string(
                          "the better (read+write GB/s) of a run before the steps and one after"));
  json_object_set_new(j, "read_gbps", json_real(base.read_gbps));
  json_object_set_new(j, "write_gbps", json_real(base.write_gbps));
  json_object_set_new(j, "read_s", json_real(base.read_s));
  json_object_set_new(j, "write_s", json_real(base.write_s));
  json_t *runs = json_array();
  for (int i = 0; i < 2; i++) {
    json_t *r = json_object();
    json_object_set_new(r, "when", json_string(i ? "after" : "before"));
    json_object_set_new(r, "ok", json_boolean(base_runs[i].ok));
    json_object_set_new(r, "bytes", json_integer((json_int_t)base_runs[i].bytes));
    json_object_set_new(r, "gbps", json_real(base_runs[i].gbps));
    json_object_set_new(r, "read_gbps", json_real(base_runs[i].read_gbps));
    json_object_set_new(r, "write_gbps", json_real(base_runs[i].write_gbps));
    json_array_append_new(runs, r);
  }
  json_object_set_new(j, "runs", runs);
  return j;
}

/* Memory at the end and the communication against ZeRO's volume. */
static void memory_comm_json(json_t *root, const bench *b) {
  const zo_engine_mem mend = b->mend;
  const step_rec s = b->sum.s;
  const int world = b->world;
  const double paper_bytes = b->sum.paper_bytes, comm_ratio = b->sum.comm_ratio;
  json_t *mem = json_object();
  json_object_set_new(mem, "device_bytes", json_integer((json_int_t)mend.device_bytes));
  json_object_set_new(mem, "device_peak_bytes", json_integer((json_int_t)mend.device_peak_bytes));
  json_object_set_new(mem, "host_bytes", json_integer((json_int_t)mend.host_bytes));
  json_object_set_new(mem, "pinned_bytes", json_integer((json_int_t)mend.pinned_bytes));
  json_object_set_new(mem, "nvme_bytes", json_integer((json_int_t)mend.nvme_bytes));
  json_object_set_new(root, "memory", mem);
  json_t *cm = json_object();
  json_object_set_new(cm, "ranks", json_integer(world));
  json_object_set_new(cm, "stage", json_integer(b->cfg.zero.stage));
  json_object_set_new(cm, "overlap_comm", json_boolean(b->cfg.zero.overlap_comm));
  json_object_set_new(cm, "exposed_s", json_real(s.info.comm_s));
  json_object_set_new(cm, "bytes_per_rank", json_integer((json_int_t)s.info.comm_bytes));
  json_object_set_new(cm, "zero_paper_bytes", json_real(paper_bytes));
  json_object_set_new(cm, "ratio", world > 1 ? json_real(comm_ratio) : json_null());
  json_object_set_new(cm, "ring_minimum_ratio", json_real((double)(world - 1) / world));
  json_object_set_new(root, "communication", cm);
}

/* A real, or null where it is not finite (jansson has no NaN). */
static json_t *real_or_null(double v) { return isfinite(v) ? json_real(v) : json_null(); }

/* The placement zo_engine_place() gave, its predicted step and the rates it was predicted from. */
static json_t *placement_json(const opts *o, const bench *b) {
  const zo_placement *pl = &b->place;
  const zo_step_prediction *p = &pl->pred;
  const zo_step_rates *r = &b->rates;
  json_t *j = json_object();
  json_object_set_new(j, "mode",
                      json_string(o->placement == ZO_PLACEMENT_AUTO ? "auto" : "config"));
  json_object_set_new(j, "optimizer_max_in_cpu",
                      json_integer((json_int_t)pl->optimizer_max_in_cpu));
  json_object_set_new(j, "param_max_in_cpu", json_integer((json_int_t)pl->param_max_in_cpu));
  json_object_set_new(j, "optimizer_resident_el",
                      json_integer((json_int_t)pl->optimizer_resident_el));
  json_object_set_new(j, "optimizer_total_el", json_integer((json_int_t)pl->optimizer_total_el));
  json_object_set_new(j, "resident_sub_groups", json_integer(pl->resident_sub_groups));
  json_object_set_new(j, "sub_groups", json_integer(pl->sub_groups));
  json_object_set_new(j, "param_cached_el", json_integer((json_int_t)pl->param_cached_el));
  json_object_set_new(j, "param_total_el", json_integer((json_int_t)pl->param_total_el));
  json_object_set_new(j, "host_bytes", json_integer((json_int_t)pl->host_bytes));
  json_object_set_new(j, "pinned_bytes", json_integer((json_int_t)pl->pinned_bytes));
  json_object_set_new(j, "nvme_bytes", json_integer((json_int_t)pl->nvme_bytes));
  json_object_set_new(j, "candidates", json_integer(pl->candidates));
  json_t *pr = json_object();
  json_object_set_new(pr, "bound", json_string(p->bound ? p->bound : "?"));
  json_object_set_new(pr, "step_ms", json_real(p->step_s * 1e3));
  json_object_set_new(pr, "fwd_bwd_ms", json_real(p->fwd_bwd_s * 1e3));
  json_object_set_new(pr, "update_ms", json_real(p->update_s * 1e3));
  json_object_set_new(pr, "compute_ms", json_real(p->compute_s * 1e3));
  json_object_set_new(pr, "adam_ms", json_real(p->adam_s * 1e3));
  json_object_set_new(pr, "nvme_read_ms", json_real(p->nvme_read_s * 1e3));
  json_object_set_new(pr, "nvme_write_ms", json_real(p->nvme_write_s * 1e3));
  json_object_set_new(pr, "h2d_ms", json_real(p->h2d_s * 1e3));
  json_object_set_new(pr, "d2h_ms", json_real(p->d2h_s * 1e3));
  json_object_set_new(pr, "nvme_read_bytes", json_integer((json_int_t)p->nvme_read_bytes));
  json_object_set_new(pr, "nvme_write_bytes", json_integer((json_int_t)p->nvme_write_bytes));
  json_object_set_new(pr, "h2d_bytes", json_integer((json_int_t)p->h2d_bytes));
  json_object_set_new(pr, "d2h_bytes", json_integer((json_int_t)p->d2h_bytes));
  json_object_set_new(j, "predicted", pr);
  static const char *const k_rate[6] = {"nvme_read_Bps", "nvme_write_Bps", "h2d_Bps",
                                        "d2h_Bps",       "adam_el_per_s",  "compute_s"};
  const double v[6] = {r->nvme_read_Bps, r->nvme_write_Bps, r->h2d_Bps,
                       r->d2h_Bps,       r->adam_el_per_s,  r->compute_s};
  json_t *rates = json_object(), *src = json_object();
  for (int i = 0; i < 6; i++) {
    json_object_set_new(rates, k_rate[i], json_real(v[i]));
    json_object_set_new(src, k_rate[i], json_string(r->src[i]));
  }
  json_object_set_new(rates, "fetches_per_step", json_real(r->fetches_per_step));
  json_object_set_new(rates, "src", src);
  json_object_set_new(j, "rates", rates);
  return j;
}

/* What each figure means. */
static json_t *definitions_json(void) {
  json_t *d = json_object();
  json_object_set_new(
      d, "step_s",
      json_string(
          "wall time of forward + backward + zo_engine_step, mean over steps after warmup"));
  json_object_set_new(
      d, "disk_gbps",
      json_string(
          "swap bytes read+written from the first zo_engine_grad_ready of a step to the return of zo_engine_step, over that window (1e9 B/s)"));
  json_object_set_new(
      d, "baseline_disk_gbps",
      json_string(
          "2 x bytes / (read pass + write pass time) of an io_uring O_DIRECT loop, same block size and queue depth, file the size of the swap state (written once untimed first), same path, same run; the better of a run before the steps and one after"));
  json_object_set_new(
      d, "overlap_efficiency",
      json_string(
          "max(compute_s, transfer_s, adam_s) / step_s; transfer_s = max(H2D lane time, D2H lane time, step swap bytes / baseline_disk_gbps), a lane's time being its busy time on the emulated link, else its bytes / its link_limit: 1 = all but the longest part hidden behind it, below 1 = exposed time; zo-train reports the same ratio over compute, adam and swap"));
  json_object_set_new(
      d, "link_gbps",
      json_string(
          "(H2D + D2H bytes over the link) / step_s; link_h2d_gbps and link_d2h_gbps per direction; bytes from zo_device_link_stats, or the engine's counters (link_bytes_from)"));
  json_object_set_new(
      d, "link_limit",
      json_string(
          "before the engine starts, best of 3: zo_memcpy_async loops of chunk_bytes (one layer in the working dtype) between pinned host and device memory, H2D alone, D2H alone, and both at once on two streams (duplex_gbps = both directions' bytes / time until both finished); host device: the emulated link, or memcpy when unlimited"));
  json_object_set_new(
      d, "link_ratio",
      json_string(
          "link_gbps / link_limit.duplex_gbps; link_h2d_ratio = link_h2d_gbps / link_limit.h2d_gbps, link_d2h_ratio likewise (1.0: the step is bound by the link)"));
  json_object_set_new(d, "params_per_s", json_string("params / optimizer window"));
  json_object_set_new(
      d, "predicted_step_ms",
      json_string(
          "zo_engine_place()'s step-time model (zoffload/placement.h) for the run's placement, before finalize: rates from zo_step_rates_get() (placement.rates and their sources), compute = layers x 2 passes x compute_ms_per_layer x gas (a CPU spin), 2 x gas fetches of each layer per step"));
  json_object_set_new(d, "step_over_predicted",
                      json_string(
                          "step_s (the mean over the steps after warmup) / predicted_step_ms"));
  json_object_set_new(
      d, "nvme_read_bytes",
      json_string(
          "swap bytes read per step (zo_engine_mem nvme_read_bytes, from before forward to the return of zo_engine_step), mean over the steps after warmup; nvme_write_bytes likewise; predicted_nvme_*_bytes the model's; *_over_predicted measured / predicted"));
  json_object_set_new(
      d, "communication",
      json_string(
          "--ranks: exposed_s = time blocked in collectives per step (zo_step_info.comm_s); bytes_per_rank = what a ring algorithm sends from one rank for them (zo_step_info.comm_bytes); ratio = bytes_per_rank / zero_paper_bytes (2 x params x bytes per element for stages 0-2, 3 x for stage 3)"));
  return d;
}

int report_json(const opts *o, const bench *b, json_t *targets) {
  const step_rec s = b->sum.s;
  const baseline base = b->base;
  const linkbench lim = b->lim;
  const uint64_t N = b->N;
  const summary *m = &b->sum;
  json_t *root = json_object();
  json_object_set_new(root, "tool", json_string("zo-stepbench"));
  json_object_set_new(root, "config", config_json(o, b));
  json_object_set_new(root, "params", json_integer((json_int_t)N));
  json_object_set_new(root, "step_s", json_real(s.step_s));
  json_object_set_new(root, "compute_s", json_real(s.compute_s));
  json_object_set_new(root, "transfer_s", json_real(s.transfer_s));
  json_object_set_new(root, "adam_s", json_real(s.info.adam_s));
  json_object_set_new(root, "disk_gbps", json_real(s.disk_gbps));
  json_object_set_new(root, "baseline_disk_gbps", base.ok ? json_real(base.gbps) : json_null());
  json_object_set_new(root, "disk_ratio", base.ok ? json_real(m->disk_ratio) : json_null());
  json_object_set_new(root, "overlap_efficiency", json_real(s.overlap_efficiency));
  json_object_set_new(root, "params_per_s", json_real(s.params_per_s));
  json_object_set_new(root, "link_gbps", json_real(s.link_gbps));
  json_object_set_new(root, "link_h2d_gbps", json_real(m->link_h2d_gbps));
  json_object_set_new(root, "link_d2h_gbps", json_real(m->link_d2h_gbps));
  json_object_set_new(root, "link_ratio", lim.ok ? json_real(m->link_ratio) : json_null());
  json_object_set_new(root, "link_h2d_ratio", lim.ok ? json_real(m->link_h2d_ratio) : json_null());
  json_object_set_new(root, "link_d2h_ratio", lim.ok ? json_real(m->link_d2h_ratio) : json_null());
  json_object_set_new(root, "device", json_string(zo_device_kind_name(o->device)));
  json_object_set_new(root, "device_name", json_string(zo_device_name(b->dev)));
  json_object_set_new(root, "link_bytes_from",
                      json_string(b->dev_link_stats ? "device" : "engine"));
  json_object_set_new(root, "link_limit", linkbench_json(&lim));
  json_object_set_new(root, "opt_window_s", json_real(s.opt_window_s));
  json_object_set_new(root, "opt_nvme_bytes_per_param", json_real(m->opt_bytes_per_param));
  json_object_set_new(root, "predicted_step_ms", json_real(b->place.pred.step_s * 1e3));
  json_object_set_new(root, "step_over_predicted", real_or_null(m->step_over_predicted));
  json_object_set_new(root, "nvme_read_bytes", json_real(m->nvme_read_bytes));
  json_object_set_new(root, "nvme_write_bytes", json_real(m->nvme_write_bytes));
  json_object_set_new(root, "predicted_nvme_read_bytes",
                      json_integer((json_int_t)b->place.pred.nvme_read_bytes));
  json_object_set_new(root, "predicted_nvme_write_bytes",
                      json_integer((json_int_t)b->place.pred.nvme_write_bytes));
  json_object_set_new(root, "nvme_read_over_predicted", real_or_null(m->read_over_predicted));
  json_object_set_new(root, "nvme_write_over_predicted", real_or_null(m->write_over_predicted));
  json_object_set_new(root, "placement", placement_json(o, b));
  json_t *ex = json_object();
  json_object_set_new(ex, "fetch_wait_s", json_real(s.fetch_wait_s));
  json_object_set_new(ex, "grad_ready_s", json_real(s.grad_ready_s));
  json_object_set_new(ex, "engine_step_s", json_real(s.engine_step_s));
  json_object_set_new(ex, "grad_wait_s", json_real(s.info.grad_wait_s));
  json_object_set_new(ex, "swap_s", json_real(s.info.swap_s));
  json_object_set_new(ex, "copy_s", json_real(s.info.copy_s));
  json_object_set_new(ex, "engine_fetch_wait_s", json_real(s.info.fetch_wait_s));
  json_object_set_new(ex, "link_stall_s", json_real(s.link_stall_s));
  json_object_set_new(root, "exposed", ex);
  json_object_set_new(root, "baseline", baseline_json(b));
  memory_comm_json(root, b);
  json_t *arr = json_array();
  for (int k = 0; k < o->steps; k++) json_array_append_new(arr, step_json(&b->rec[k], k));
  json_object_set_new(root, "per_step", arr);
  json_object_set_new(root, "targets", targets);
  json_object_set_new(root, "definitions", definitions_json());
  if (json_dump_file(root, o->json, JSON_INDENT(2) | JSON_PRESERVE_ORDER) != 0) {
    fprintf(stderr, "zo-stepbench: cannot write JSON to '%s'\n", o->json);
    json_decref(root);
    return -1;
  }
  printf("\nJSON written to %s\n", o->json);
  json_decref(root);
  return 0;
}
