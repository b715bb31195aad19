/*
 * job.h - what one zo-train run holds (train_job: the plan, the engine, the model, the corpus) and
 * the training loop's position and running sums (train_progress), shared by main.c, which runs
 * the job, and report.c, which prints its progress and summary. No functions here.
 */
#ifndef ZO_TRAIN_JOB_H
#define ZO_TRAIN_JOB_H

#include <stdint.h>
#include <stdio.h>

#include "ckpt.h"
#include "data.h"
#include "gpt.h"
#include "predict.h"
#include "train_config.h"
#include "train_model.h"
#include "zoffload/checkpoint.h"
#include "zoffload/comm.h"
#include "zoffload/config.h"
#include "zoffload/engine.h"

/* What the plan decided and what the run holds; job_free() releases it all. */
typedef struct train_job {
  train_settings ts;
  zo_config_t cfg;
  zo_comm_t *comm, *nccl; /* the ranks; the engine's collectives over NCCL where it has them */
  int rank, world;
  int B, gas, T; /* micro-batch, gradient accumulation, seq_len: B x world x T tokens fit an int */
  zo_device_kind dev_kind; /* resolved: cuda or host */
  int cuda, standin;       /* compute on a GPU; a host device standing in for one (dry run) */
  int np;                  /* parameter tensors */
  size_t total;            /* parameters */
  double flops_tok, peak_tflops;
  data_loader *data;
  int n_val; /* validation windows */
  zo_device_t *dev;
  zo_engine_t *eng;
  zo_checkpoint_lock_t *save_lock; /* --save DIR held for the run (rank 0) */
  train_model *model;
  FILE *jf; /* --log-json, rank 0 */
  /* the placement's predicted step, and each step's against its measured time */
  train_predict pred;
  gpt_param_spec *specs; /* [np] */
  zo_param_t **params;   /* [np] */
  uint8_t *in, *tg;      /* (B x world, T): the global micro-batch */
  train_position pos;    /* where training starts: step 0, or the resumed checkpoint's */
} train_job;

/* The training loop's position and its running sums (seconds unless named otherwise). */
typedef struct train_progress {
  uint64_t rng;
  int64_t step;       /* the step in progress; after the loop, one past the last completed */
  int64_t skipped;    /* overflow-skipped steps, the resumed ones included */
  int64_t saved_step; /* the step of the last checkpoint this run wrote, -1: none */
  int stop_all;       /* every rank saw a stop by the end of the last step (see train()) */
  double t_fetch, t_opt, t_swap, t_adam, t_steps, t_comm, comm_bytes;
  double t_start, t_window;
  int64_t tokens_window; /* the job's tokens since the last logged step */
  double t_line;         /* when the last step line (logged or progress only) was printed */
  int64_t tokens_line;   /* the job's tokens since then */
  double t_val0;         /* when the validation of the step being logged began */
  double t_live;         /* when the live line (stdout a terminal) was last drawn */
  double first_val, last_val, last_loss;
  double fwd0, bwd0,
      eval_fwd; /* model seconds at the start; forward seconds spent on validation since */
  double last_step_s,
      last_compute_s; /* the last step alone: its time, its compute (forward + backward less fetch
                                         waits), which the next step's prediction takes */
  int64_t steps_run;  /* steps this run has taken */
  double last_busy_s[2],
      last_busy_bytes[2]; /* the last step's swap I/O per direction (zo_engine_nvme_busy) */
  /* --kernel-times: GPU milliseconds by kernel class (gemm, attention, other) of the steps after the run's
   * first, their count, and the first step's (the mean when no other ran) */
  double kt_ms[3], kt_first[3];
  int64_t kt_steps;
} train_progress;

#endif
