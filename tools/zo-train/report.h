/*
 * report.h - what zo-train prints while and after it trains (report.c): step lines, --log-json
 * objects and the run's summary. Rank 0 prints (the other ranks' stdout is /dev/null); not the
 * training or the validation itself (main.c).
 */
#ifndef ZO_TRAIN_REPORT_H
#define ZO_TRAIN_REPORT_H

#include "job.h"

/*
 * train_report_progress() - a progress line for the step just done (p->step) without validation:
 * "step N/TOTAL | loss L | R tok/s | E elapsed | ETA T" (tok/s since the last step line, ETA at
 * this run's mean wall-clock rate). Restarts the line window (p->t_line, p->tokens_line). The
 * printing functions here erase a live line first.
 */
void train_report_progress(const train_job *j, train_progress *p, double loss, int skipped);

/*
 * train_report_live() - on a terminal (the caller checks), the step just done as a live line
 * redrawn in place between the printed lines, at most five times a second: the progress line's
 * figures, no newline. Any other output first calls train_report_live_clear().
 */
void train_report_live(const train_job *j, train_progress *p, double loss);

/* train_report_live_clear() - the live line erased (nothing when none is drawn). */
void train_report_live_clear(void);

/*
 * train_report_logged() - a logged step (p->step): the short line with the validation loss @val,
 * or with @verbose the long one (lr, TFLOP/s, MFU, cumulative ms per step in forward, backward,
 * optimizer, Adam, swap and fetch waits, bytes per tier, the arena), and the --log-json object
 * (j->jf) with every figure of the long line plus elapsed_s and eta_s. p->t_val0 is when the
 * validation began: the windows' rates end there. Restarts both windows.
 */
void train_report_logged(train_job *j, train_progress *p, double loss, double val,
                         double loss_scale, const zo_step_info *info, int verbose);

/*
 * train_report_summary() - after the loop (p->step one past the last): losses, where a step's
 * time went with the overlap efficiency (max(compute, adam, swap) / step: 1 = all but the longest
 * part hidden), throughput, the predicted step against the measured one, and with several ranks
 * each rank's bytes (a collective: every rank calls it). Returns 0, or 1 after printing the error.
 */
int train_report_summary(const train_job *j, const train_progress *p);

#endif
