/*
 * report.c - what zo-train prints while and after it trains (report.h): the step lines (short, or
 * long with --verbose) with elapsed time and ETA, the --log-json objects, the summary with the
 * overlap efficiency, and each rank's bytes. It trains nothing and validates nothing (main.c).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "progress.h"
#include "report.h"
#include "zoffload/status.h"

/* Cumulative means per step and the figures of one logged step, for --log-json. */
typedef struct step_log {
  int64_t step, n_steps; /* the logged step; the steps this run took (the means' divisor) */
  double loss, val, lr, tok_s, tflops, mfu, loss_scale, grad_norm;
  int skipped;
  double step_s, fwd_s, bwd_s, opt_s, adam_s, swap_s, fetch_s; /* sums over the steps so far */
  double last_step_s,
      pred_step_s; /* the logged step alone, and its prediction (zoffload/placement.h); < 0: none */
  double elapsed_s,
      eta_s; /* since the loop started; the run's remaining steps at its mean rate (< 0: none) */
  /* the run's constants a step's lower bound is computed from (scripts/limit_ratio.py): tokens and
   * model FLOPs a step, the MFU's peak (<= 0: none), parameters, ranks, and the link's rates the
   * run measured at start-up or took from the speeds cache (<= 0: none; @h2d_src says which) */
  double tokens_step, flops_tok, peak_tflops, h2d_Bps, d2h_Bps;
  int64_t params, ranks;
  const char *h2d_src;
} step_log;

/* @v as a JSON real when > 0, else null */
static json_t *real_or_null(double v) { return v > 0 ? json_real(v) : json_null(); }

static void write_json(FILE *jf, const step_log *l, const zo_engine_mem *mem) {
  json_t *o = json_object();
  const double per = 1e3 / (double)l->n_steps; /* cumulative means per step, milliseconds */
  json_object_set_new(o, "step", json_integer(l->step));
  json_object_set_new(o, "loss", json_real(l->loss));
  json_object_set_new(o, "val_loss", json_real(l->val));
  json_object_set_new(o, "lr", json_real(l->lr));
  json_object_set_new(o, "tokens_per_s", json_real(l->tok_s));
  json_object_set_new(o, "model_tflops", json_real(l->tflops));
  json_object_set_new(o, "mfu", real_or_null(l->mfu));
  json_object_set_new(o, "loss_scale", json_real(l->loss_scale));
  json_object_set_new(o, "grad_norm",
                      isfinite(l->grad_norm) ? json_real(l->grad_norm) : json_null());
  json_object_set_new(o, "skipped", json_boolean(l->skipped));
  json_object_set_new(o, "step_ms", json_real(l->step_s * per));
  json_object_set_new(o, "last_step_ms", json_real(l->last_step_s * 1e3));
  json_object_set_new(o, "elapsed_s", json_real(l->elapsed_s));
  json_object_set_new(o, "eta_s", l->eta_s >= 0 ? json_real(l->eta_s) : json_null());
  json_object_set_new(o, "predicted_step_ms", real_or_null(l->pred_step_s * 1e3));
  json_object_set_new(o, "forward_ms", json_real(l->fwd_s * per));
  json_object_set_new(o, "backward_ms", json_real(l->bwd_s * per));
  json_object_set_new(o, "optimizer_ms", json_real(l->opt_s * per));
  json_object_set_new(o, "adam_ms", json_real(l->adam_s * per));
  json_object_set_new(o, "swap_wait_ms", json_real(l->swap_s * per));
  json_object_set_new(o, "fetch_wait_ms", json_real(l->fetch_s * per));
  /* what a step must do, and the rates it could do it at */
  json_object_set_new(o, "tokens_per_step", json_real(l->tokens_step));
  json_object_set_new(o, "flops_per_token", json_real(l->flops_tok));
  json_object_set_new(o, "peak_tflops", real_or_null(l->peak_tflops));
  json_object_set_new(o, "parameters", json_integer((json_int_t)l->params));
  json_object_set_new(o, "ranks", json_integer((json_int_t)l->ranks));
  json_object_set_new(o, "h2d_rate_bytes_per_s", real_or_null(l->h2d_Bps));
  json_object_set_new(o, "d2h_rate_bytes_per_s", real_or_null(l->d2h_Bps));
  json_object_set_new(o, "link_rate_source", l->h2d_src ? json_string(l->h2d_src) : json_null());
  /* bytes held now and moved so far */
  json_object_set_new(o, "device_bytes", json_integer((json_int_t)mem->device_bytes));
  json_object_set_new(o, "device_peak_bytes", json_integer((json_int_t)mem->device_peak_bytes));
  json_object_set_new(o, "host_bytes", json_integer((json_int_t)mem->host_bytes));
  json_object_set_new(o, "pinned_bytes", json_integer((json_int_t)mem->pinned_bytes));
  json_object_set_new(o, "nvme_bytes", json_integer((json_int_t)mem->nvme_bytes));
  json_object_set_new(o, "param_bytes", json_integer((json_int_t)mem->param_bytes));
  json_object_set_new(o, "grad_bytes", json_integer((json_int_t)mem->grad_bytes));
  json_object_set_new(o, "state_bytes", json_integer((json_int_t)mem->state_bytes));
  json_object_set_new(o, "comm_buffer_bytes", json_integer((json_int_t)mem->comm_bytes));
  json_object_set_new(o, "nvme_read_bytes", json_integer((json_int_t)mem->nvme_read_bytes));
  json_object_set_new(o, "nvme_write_bytes", json_integer((json_int_t)mem->nvme_write_bytes));
  json_object_set_new(o, "h2d_bytes", json_integer((json_int_t)mem->h2d_bytes));
  json_object_set_new(o, "d2h_bytes", json_integer((json_int_t)mem->d2h_bytes));
  /* the device arena (zoffload/arena.h) */
  json_object_set_new(o, "arena_capacity_bytes", json_integer((json_int_t)mem->arena.capacity));
  json_object_set_new(o, "arena_live_bytes", json_integer((json_int_t)mem->arena.live_bytes));
  json_object_set_new(o, "arena_peak_live_bytes",
                      json_integer((json_int_t)mem->arena.peak_live_bytes));
  json_object_set_new(o, "arena_free_bytes", json_integer((json_int_t)mem->arena.free_bytes));
  json_object_set_new(o, "arena_largest_free_bytes",
                      json_integer((json_int_t)mem->arena.largest_free));
  json_object_set_new(o, "arena_fragmentation", json_real(mem->arena.fragmentation));
  json_object_set_new(o, "arena_compactions", json_integer((json_int_t)mem->arena.compactions));
  json_object_set_new(o, "arena_bytes_moved", json_integer((json_int_t)mem->arena.bytes_moved));
  json_object_set_new(o, "arena_compact_ms", json_real(mem->arena.compact_seconds * 1e3));
  json_dumpf(o, jf, JSON_COMPACT | JSON_REAL_PRECISION(17));
  fputc('\n', jf);
  fflush(jf);
  json_decref(o);
}

/* The run's remaining steps at its mean wall-clock rate so far (validation and saves included:
 * what a user waits for); -1 before the first step. */
static double run_eta(const train_job *j, const train_progress *p, double elapsed) {
  const int64_t done = p->step - j->pos.step, total = j->ts.steps - j->pos.step;
  return zo_tool_eta_s(elapsed, (double)done, (double)total);
}

/* The job's tokens per second from the last step line to @t_end. */
static double line_tok_s(const train_progress *p, double t_end) {
  const double t = t_end - p->t_line;
  return t > 0 ? p->tokens_line / t : 0;
}

/* A live line is on the terminal: the next output erases it first. */
static int g_live;

void train_report_live_clear(void) {
  if (!g_live) return;
  fputs("\r\033[K", stdout); /* to the line's start, erase to its end */
  fflush(stdout);
  g_live = 0;
}

/* The short step line: step/total, loss, @val_s (" | val X", or ""), tok/s, elapsed, ETA, then
 * @end ("\n"; the live line's erase-to-end instead). */
static void short_line(const train_job *j, const train_progress *p, double loss, const char *val_s,
                       double tok_s, double elapsed, double eta, int skipped, const char *end) {
  char e[32], r[32];
  printf("step %5lld/%lld | loss %.4f%s | %7.0f tok/s | %s elapsed | ETA %s%s%s",
         (long long)p->step, (long long)j->ts.steps, loss, val_s, tok_s,
         zo_tool_duration(elapsed, e, sizeof e), zo_tool_duration(eta, r, sizeof r),
         skipped ? " | overflow: skipped" : "", end);
}

void train_report_live(const train_job *j, train_progress *p, double loss) {
  const double now = zo_clock_s(), elapsed = now - p->t_start;
  if (g_live && now - p->t_live < 0.2) return;
  p->t_live = now;
  fputc('\r', stdout);
  short_line(j, p, loss, "", line_tok_s(p, now), elapsed, run_eta(j, p, elapsed), 0, "\033[K");
  fflush(stdout);
  g_live = 1;
}

void train_report_progress(const train_job *j, train_progress *p, double loss, int skipped) {
  const double now = zo_clock_s(), elapsed = now - p->t_start;
  train_report_live_clear();
  short_line(j, p, loss, "", line_tok_s(p, now), elapsed, run_eta(j, p, elapsed), skipped, "\n");
  fflush(stdout);
  p->t_line = zo_clock_s();
  p->tokens_line = 0;
}

void train_report_logged(train_job *j, train_progress *p, double loss, double val,
                         double loss_scale, const zo_step_info *info, int verbose) {
  const double tw = p->t_val0 - p->t_window; /* the window ends where validation began */
  zo_engine_mem mem;
  zo_engine_mem_info(j->eng, &mem);
  char db[32], hb[32], nb[32], al[32], ac[32];
  zo_format_bytes(al, sizeof al, (double)mem.arena.live_bytes);
  zo_format_bytes(ac, sizeof ac, (double)mem.arena.capacity);
  zo_format_bytes(db, sizeof db, (double)mem.device_bytes);
  zo_format_bytes(hb, sizeof hb, (double)mem.host_bytes);
  zo_format_bytes(nb, sizeof nb, (double)mem.nvme_bytes);
  const double tok_s = p->tokens_window / tw, tflops = tok_s * j->flops_tok / 1e12;
  const double mfu = j->peak_tflops > 0 ? tflops / j->peak_tflops : 0;
  const double t_fwd = train_model_forward_seconds(j->model) - p->fwd0 - p->eval_fwd;
  const double t_bwd = train_model_backward_seconds(j->model) - p->bwd0;
  const double per = 1e3 / (double)(p->step - j->pos.step); /* cumulative ms per step */
  char mfu_s[32] = "";
  if (mfu > 0) snprintf(mfu_s, sizeof mfu_s, " MFU %.1f%%", 100 * mfu);
  const double now = zo_clock_s(), elapsed = now - p->t_start;
  const double eta = run_eta(j, p, elapsed);
  train_report_live_clear();
  if (verbose) {
    char e[32], r[32];
    printf(
        "step %5lld/%lld | loss %.4f | val %.4f | lr %.3e | %7.0f tok/s %.2f TFLOP/s%s | ms/step %.1f: fwd %.1f "
        "bwd %.1f opt %.1f (adam %.1f swap %.1f) fetch wait %.1f | device %s (peak %.1f MiB) host %s nvme %s | "
        "arena %s of %s live, frag %.2f, %llu compactions | %s elapsed, ETA %s%s\n",
        (long long)p->step, (long long)j->ts.steps, loss, val, info->lr, tok_s, tflops, mfu_s,
        p->t_steps * per, t_fwd * per, t_bwd * per, p->t_opt * per, p->t_adam * per,
        p->t_swap * per, p->t_fetch * per, db, mem.device_peak_bytes / 1048576.0, hb, nb, al, ac,
        mem.arena.fragmentation, (unsigned long long)mem.arena.compactions,
        zo_tool_duration(elapsed, e, sizeof e), zo_tool_duration(eta, r, sizeof r),
        info->skipped ? " | overflow: skipped" : "");
  } else {
    char vb[32];
    snprintf(vb, sizeof vb, " | val %.4f", val);
    short_line(j, p, loss, vb, line_tok_s(p, p->t_val0), elapsed, eta, info->skipped, "\n");
  }
  fflush(stdout);
  if (j->jf) {
    step_log l = {.step = p->step,
                  .n_steps = p->step - j->pos.step,
                  .loss = loss,
                  .val = val,
                  .lr = info->lr,
                  .tok_s = tok_s,
                  .tflops = tflops,
                  .mfu = mfu,
                  .loss_scale = loss_scale,
                  .grad_norm = info->grad_norm,
                  .skipped = info->skipped,
                  .step_s = p->t_steps,
                  .fwd_s = t_fwd,
                  .bwd_s = t_bwd,
                  .opt_s = p->t_opt,
                  .adam_s = p->t_adam,
                  .swap_s = p->t_swap,
                  .fetch_s = p->t_fetch,
                  .last_step_s = p->last_step_s,
                  .pred_step_s = j->pred.ok ? j->pred.step.step_s : -1,
                  .elapsed_s = elapsed,
                  .eta_s = eta,
                  .tokens_step = (double)j->B * j->T * j->gas * j->world,
                  .flops_tok = j->flops_tok,
                  .peak_tflops = j->peak_tflops,
                  .h2d_Bps = j->pred.ok ? j->pred.rates.h2d_Bps : 0,
                  .d2h_Bps = j->pred.ok ? j->pred.rates.d2h_Bps : 0,
                  .params = (int64_t)j->total,
                  .ranks = j->world,
                  .h2d_src = j->pred.ok ? j->pred.rates.src[2] : NULL};
    write_json(j->jf, &l, &mem);
  }
  p->t_window = p->t_line = zo_clock_s(); /* the validation's time is not training time */
  p->tokens_window = p->tokens_line = 0;
}

/*
 * Several ranks: each rank's bytes on every tier and its communication, gathered to rank 0 and printed one line
 * a rank (what each process holds: with stage >= 1 the optimizer state is about 1/world of one rank's). A
 * collective: every rank calls it. Returns 0, or -1 with zo_last_error() set.
 */
static int log_ranks(zo_comm_t *comm, const zo_engine_mem *mem, double comm_s, double comm_bytes) {
  const int world = zo_comm_size(comm);
  enum { K = 10 };
  double mine[K] = {(double)mem->device_bytes,
                    (double)mem->host_bytes,
                    (double)mem->pinned_bytes,
                    (double)mem->nvme_bytes,
                    comm_s,
                    comm_bytes,
                    (double)mem->param_bytes,
                    (double)mem->grad_bytes,
                    (double)mem->state_bytes,
                    (double)mem->comm_bytes};
  double *all = calloc((size_t)world * K, sizeof *all);
  if (!all) return -1;
  if (zo_comm_all_gather(comm, mine, all, sizeof mine) != ZO_OK) {
    free(all);
    return -1;
  }
  for (int r = 0; r < world; r++) {
    const double *v = all + (size_t)r * K;
    static const int order[] = {0, 1, 2, 3, 6,
                                7, 8, 9, 5}; /* the byte counts, in the order printed */
    char b[9][32];
    for (int k = 0; k < 9; k++) zo_format_bytes(b[k], sizeof b[k], v[order[k]]);
    printf(
        "zo-train: rank %d of %d | device %s host %s (pinned %s) nvme %s | parameters %s, gradients %s, optimizer "
        "state %s, collective buffers %s | per step: collectives %.1f ms, %s sent\n",
        r, world, b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], v[4] * 1e3, b[8]);
  }
  free(all);
  return 0;
}

int train_report_summary(const train_job *j, const train_progress *p) {
  const int64_t step = p->step;
  double wall = zo_clock_s() - p->t_start;
  /* no step ran: no train loss, and the val loss is the one of the start */
  if (step - 1 <= j->pos.step) {
    char why[96] = "";
    if (j->pos.step >= j->ts.steps)
      snprintf(why, sizeof why, " (resumed at step %lld, which is --steps)",
               (long long)j->pos.step);
    printf("zo-train: done: no steps trained%s | val loss %.4f (%s weights) | skipped steps %lld\n",
           why, p->first_val, j->pos.step ? "the checkpoint's" : "the initial",
           (long long)p->skipped);
    return 0;
  }
  printf(
      "zo-train: done: %lld steps in %.1f s%s | train loss %.4f | val loss %.4f -> %.4f | skipped steps %lld\n",
      (long long)(step - 1 - j->pos.step), wall, j->pos.step ? " (after the resumed ones)" : "",
      p->last_loss, p->first_val, p->last_val, (long long)p->skipped);
  /* where a step's time went, and how much of the offload work was hidden */
  const double t_fwd = train_model_forward_seconds(j->model) - p->fwd0 - p->eval_fwd;
  const double t_bwd = train_model_backward_seconds(j->model) - p->bwd0;
  const double n = (double)(step - 1 - j->pos.step), compute = (t_fwd + t_bwd - p->t_fetch) / n;
  /* overlap efficiency: the longest part alone over the step (1 = everything else hidden behind
   * it), the definition zo-stepbench reports too */
  const double bound = fmax(compute, fmax(p->t_adam / n, p->t_swap / n));
  printf(
      "zo-train: per step %.1f ms = compute %.1f (forward + backward less fetch waits) + exposed: fetch %.1f, "
      "optimizer step %.1f (adam %.1f, swap %.1f) | overlap efficiency (max(compute, adam, swap) / step) %.3f\n",
      p->t_steps / n * 1e3, compute * 1e3, p->t_fetch / n * 1e3, p->t_opt / n * 1e3,
      p->t_adam / n * 1e3, p->t_swap / n * 1e3, bound / (p->t_steps / n));
  zo_engine_mem mem;
  zo_engine_mem_info(j->eng, &mem);
  const double tok_s = n * j->B * j->T * j->gas * j->world / p->t_steps,
               tflops = tok_s * j->flops_tok / 1e12;
  char mfu_s[48] = "";
  if (j->peak_tflops > 0)
    snprintf(mfu_s, sizeof mfu_s, " | MFU %.1f%%", 100 * tflops / j->peak_tflops);
  /* The device's peak counts the arena whole (reserved at finalize, 90% of the free memory on a GPU by default);
   * what the engine used of it is its peak live bytes. */
  printf(
      "zo-train: throughput %.0f tok/s | %.2f model TFLOP/s%s | peak device memory %.1f MiB (the engine's arena: "
      "%.1f MiB reserved, peak live %.1f MiB)\n",
      tok_s, tflops, mfu_s, mem.device_peak_bytes / 1048576.0, mem.arena.capacity / 1048576.0,
      mem.arena.peak_live_bytes / 1048576.0);
  if (j->rank == 0)
    train_predict_report(&j->pred); /* which resource bounds the run, measured against predicted */
  if (j->world > 1 && log_ranks(j->comm, &mem, p->t_comm / n, p->comm_bytes / n) != 0) {
    fprintf(stderr, "zo-train: error: %s\n", zo_last_error());
    return 1;
  }
  return 0;
}
