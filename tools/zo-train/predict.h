/*
 * predict.h - zo-train's side of the placement planner and the step-time
 * model (zoffload/placement.h): the machine's rates and the model's compute
 * estimate, the placement chosen (or the config's, predicted) at start-up,
 * each step's predicted time beside its measured one, and the end-of-run
 * comparison per part.
 */
#ifndef ZO_TRAIN_PREDICT_H
#define ZO_TRAIN_PREDICT_H

#include <stdint.h>
#include <stdio.h>

#include "zoffload/engine.h"
#include "zoffload/placement.h"

typedef struct train_predict {
  zo_step_rates rates;  /* compute_s: the estimate, then the last step's measured compute */
  double compute_est_s; /* the start-up estimate (FLOPs / rate) */
  char compute_src[320];
  zo_step_prediction step; /* the prediction for the step in progress (made before it) */
  int ok;                  /* rates and prediction available */
  /* sums over the steps after the first (the first warms up: no read-ahead from an earlier step) */
  int n;
  double pred_s, pred_fb_s, pred_up_s, meas_s, meas_fb_s, meas_up_s;
  double pred_rd, pred_wr, meas_rd, meas_wr, pred_adam_s, meas_adam_s;
} train_predict;

/* The CPU model's FLOP/s by the cost model (gpt.c's NS_MAC a multiply-add a thread; with @gemm_bf16, the bf16
 * products' measured rate) on @threads threads: where the compute probe (probe.h) is not measured. */
double train_cpu_cost_rate(int threads, int gemm_bf16);

/* The compute of one optimizer step, seconds: @flops_step over @tflops x 1e12 FLOP/s when given (> 0); else on the
 * CPU gpt.c's cost model (2 FLOP per multiply-add at NS_MAC ns each, per thread; with @gemm_bf16, train.cpu_gemm
 * "bf16", the bf16 products' measured rate) over @threads; else on a GPU 40% of @peak_tflops when known; else 0
 * (unknown). @src names the source. */
double train_compute_estimate(double flops_step, double tflops, int cuda, int threads,
                              int gemm_bf16, double peak_tflops, char *src, size_t src_cap);

/* Start-up: the rates (zo_step_rates_get), then zo_engine_place (placement "auto" chooses; "config" predicts), with
 * @app, @kind and the --assume figures (< 0: none); @standin: the host device stands in for a GPU (its bytes
 * are not host memory); @is_auto: zoffload.placement is "auto"; with @print (rank 0), prints the rates and their
 * sources, the placement and "predicted step". Returns 0, or 1 after printing the error. */
int train_predict_start(train_predict *tp, zo_engine_t *eng, double compute_s,
                        const char *compute_src, zo_device_kind kind, const size_t app[4],
                        int64_t assume_host, int64_t assume_nvme, int standin, int is_auto,
                        int print);

/* Before a step: predict it with the last step's measured compute (@compute_s > 0; else the estimate) and the
 * throughput the disk gave the last step's own swap I/O, per direction (@busy_s seconds with a request in flight,
 * @bytes completed: zo_engine_nvme_busy() differences), used when it moved at least 256 MiB over 0.1 s (else the
 * start-up rate stays). */
void train_predict_before_step(train_predict *tp, zo_engine_t *eng, double compute_s,
                               const double busy_s[2], const double bytes[2]);

/* After a step (not the run's first): its measured parts, for the summary. */
void train_predict_after_step(train_predict *tp, double step_s, double fwd_bwd_s, double update_s,
                              double adam_s, double read_bytes, double write_bytes);

/* End of run: measured against predicted per part, one table on stdout. */
void train_predict_report(const train_predict *tp);

#endif /* ZO_TRAIN_PREDICT_H */
