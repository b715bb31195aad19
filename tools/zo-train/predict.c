/*
 * predict.c - zo-train's side of the placement planner and the step-time model (predict.h).
 */
#include "predict.h"

#include <math.h>
#include <string.h>

#include "zoffload/status.h"

/* gpt.c's cost model of its tiled sgemm: a multiply-add per 0.015 ns on one thread (NS_MAC there). */
#define TRAIN_NS_MAC 0.015
/* train.cpu_gemm "bf16": oneDNN 2.6's bf16 matmul measured on one core of this project's EPYC at the 2b preset's
 * shapes (64 tokens, d_model 2560): 162-184 GFLOP/s, about a multiply-add per 0.0115 ns (gemm_bf16.h) */
#define TRAIN_NS_MAC_BF16 0.0115

double train_cpu_cost_rate(int threads, int gemm_bf16) {
  return (threads > 0 ? threads : 1) * 2.0 /
         ((gemm_bf16 ? TRAIN_NS_MAC_BF16 : TRAIN_NS_MAC) * 1e-9);
}

double train_compute_estimate(double flops_step, double tflops, int cuda, int threads,
                              int gemm_bf16, double peak_tflops, char *src, size_t src_cap) {
  if (tflops > 0) {
    snprintf(src, src_cap, "%.3g FLOP over --compute-tflops %g", flops_step, tflops);
    return flops_step / (tflops * 1e12);
  }
  if (!cuda) {
    const double rate = train_cpu_cost_rate(threads, gemm_bf16);
    snprintf(src, src_cap, "%.3g FLOP at %.0f GFLOP/s (%s, %d thread%s)", flops_step, rate / 1e9,
             gemm_bf16 ? "oneDNN's bf16 products as measured" : "gpt.c's sgemm cost model", threads,
             threads == 1 ? "" : "s");
    return flops_step / rate;
  }
  if (peak_tflops > 0) {
    snprintf(src, src_cap, "%.3g FLOP at 40%% of the device's %.0f TFLOP/s peak", flops_step,
             peak_tflops);
    return flops_step / (0.4 * peak_tflops * 1e12);
  }
  snprintf(src, src_cap, "unknown (no GPU here to rate: pass --compute-tflops)");
  return 0;
}

static const char *const k_rate_name[6] = {"nvme read",    "nvme write", "host->device",
                                           "device->host", "adam",       "compute"};

int train_predict_start(train_predict *tp, zo_engine_t *eng, double compute_s,
                        const char *compute_src, zo_device_kind kind, const size_t app[4],
                        int64_t assume_host, int64_t assume_nvme, int standin, int is_auto,
                        int print) {
  memset(tp, 0, sizeof *tp);
  tp->compute_est_s = compute_s;
  snprintf(tp->compute_src, sizeof tp->compute_src, "%s", compute_src);
  if (zo_step_rates_get(eng, compute_s, 0, &tp->rates) != ZO_OK) {
    fprintf(stderr, "zo-train: error: machine speeds: %s\n", zo_last_error());
    return 1;
  }
  snprintf(tp->rates.src[5], sizeof tp->rates.src[5], "%s", compute_src);
  zo_place_opts po = {.kind = kind,
                      .app = app,
                      .assume_host_available = assume_host > 0 ? (size_t)assume_host : 0,
                      .assume_nvme_free = assume_nvme > 0 ? (size_t)assume_nvme : 0,
                      .device_not_host = standin};
  zo_placement pl;
  if (zo_engine_place(eng, &tp->rates, &po, &pl) != ZO_OK) {
    fprintf(stderr, "zo-train: error: %s\n", zo_last_error());
    return 1;
  }
  tp->step = pl.pred;
  tp->ok = 1;
  if (print) { /* the rates with their sources, the placement and its predicted step */
    const double v[6] = {tp->rates.nvme_read_Bps, tp->rates.nvme_write_Bps, tp->rates.h2d_Bps,
                         tp->rates.d2h_Bps,       tp->rates.adam_el_per_s,  tp->rates.compute_s};
    printf("zo-train: rates:");
    for (int i = 0; i < 6; i++) {
      if (i == 4)
        printf(" %s %.3g Gelem/s (%s);", k_rate_name[i], v[i] / 1e9, tp->rates.src[i]);
      else if (i == 5)
        printf(" %s %.3f s/step (%s)\n", k_rate_name[i], v[i], tp->rates.src[i]);
      else
        printf(" %s %.2f GB/s (%s);", k_rate_name[i], v[i] / 1e9, tp->rates.src[i]);
    }
    printf("zo-train: %s ", is_auto ? "placement \"auto\":" : "placement \"config\":");
    zo_placement_print(&pl, stdout);
    printf("zo-train: ");
    zo_step_prediction_print(&pl.pred, stdout);
    fflush(stdout);
  }
  return 0;
}

void train_predict_before_step(train_predict *tp, zo_engine_t *eng, double compute_s,
                               const double busy_s[2], const double bytes[2]) {
  if (!tp->ok) return;
  tp->rates.compute_s = compute_s > 0 ? compute_s : tp->compute_est_s;
  if (compute_s > 0)
    snprintf(tp->rates.src[5], sizeof tp->rates.src[5], "the last step's, measured");
  double *rate[2] = {&tp->rates.nvme_read_Bps, &tp->rates.nvme_write_Bps};
  for (int w = 0; w < 2; w++)
    if (bytes[w] >= 256.0 * 1048576 && busy_s[w] >= 0.1) {
      *rate[w] = bytes[w] / busy_s[w];
      snprintf(tp->rates.src[w], sizeof tp->rates.src[w],
               "the last step's own swap I/O: %.2f GB in %.2f s", bytes[w] / 1e9, busy_s[w]);
    }
  zo_step_prediction p;
  if (zo_engine_predict(eng, &tp->rates, &p) == ZO_OK) tp->step = p;
}

void train_predict_after_step(train_predict *tp, double step_s, double fwd_bwd_s, double update_s,
                              double adam_s, double read_bytes, double write_bytes) {
  if (!tp->ok) return;
  tp->n++;
  tp->pred_s += tp->step.step_s, tp->meas_s += step_s;
  tp->pred_fb_s += tp->step.fwd_bwd_s, tp->meas_fb_s += fwd_bwd_s;
  tp->pred_up_s += tp->step.update_s, tp->meas_up_s += update_s;
  tp->pred_adam_s += tp->step.adam_s, tp->meas_adam_s += adam_s;
  tp->pred_rd += (double)tp->step.nvme_read_bytes, tp->meas_rd += read_bytes;
  tp->pred_wr += (double)tp->step.nvme_write_bytes, tp->meas_wr += write_bytes;
}

void train_predict_report(const train_predict *tp) {
  if (!tp->ok || tp->n == 0) return;
  const double n = tp->n;
  printf(
      "zo-train: measured against predicted, per step over the %d step%s after the first (bound by %s):\n",
      tp->n, tp->n == 1 ? "" : "s", tp->step.bound ? tp->step.bound : "?");
  printf("  %-24s %12s %12s %8s\n", "part", "measured", "predicted", "ratio");
  const struct {
    const char *name, *unit;
    double m, p, scale;
  } row[] = {
      {"step", "ms", tp->meas_s, tp->pred_s, 1e3},
      {"forward+backward", "ms", tp->meas_fb_s, tp->pred_fb_s, 1e3},
      {"update (zo_engine_step)", "ms", tp->meas_up_s, tp->pred_up_s, 1e3},
      {"adam", "ms", tp->meas_adam_s, tp->pred_adam_s, 1e3},
      {"nvme read", "GB", tp->meas_rd, tp->pred_rd, 1e-9},
      {"nvme write", "GB", tp->meas_wr, tp->pred_wr, 1e-9},
  };
  for (size_t i = 0; i < sizeof row / sizeof row[0]; i++) {
    const double m = row[i].m / n * row[i].scale, p = row[i].p / n * row[i].scale;
    char ratio[16] = "-";
    if (p > 0) snprintf(ratio, sizeof ratio, "%.3f", m / p);
    printf("  %-24s %9.1f %-2s %9.1f %-2s %8s\n", row[i].name, m, row[i].unit, p, row[i].unit,
           ratio);
  }
  fflush(stdout);
}
