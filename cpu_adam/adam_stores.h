/*
 * adam_stores.h - the store kind (regular or non-temporal) of the fused Adam
 * update's in-place streams param, m and v: the ZO_ADAM_STORES setting and the
 * pure decision the pool's store probe (pool.c) makes from its timings.
 * Not installed; no kernels here. Store kinds never change results, only speed.
 */
#ifndef ZO_ADAM_STORES_H
#define ZO_ADAM_STORES_H

/* ZO_ADAM_STORES values (include/zoffload/adam.h documents them). */
typedef enum zo_adam_stores {
  ZO_STORES_AUTO = 0,    /* pools probe once (see pool.c); elsewhere regular */
  ZO_STORES_REGULAR = 1, /* p, m, v regular stores */
  ZO_STORES_NT = 2,      /* p, m, v streamed wherever aligned */
  ZO_STORES_PROBE =
      3, /* tests: as auto, but the probe runs on the first update task whatever its size */
} zo_adam_stores;

/* Parse ZO_ADAM_STORES (read on every call; unset or empty: auto; an unknown value warns once, auto). */
zo_adam_stores zo_adam_stores_env(void);

/* Pairs of (regular, non-temporal) timings the probe takes before it decides. */
#define ZO_STORES_PROBE_PAIRS 3
/* Non-temporal p, m, v only when the median pair's t_regular / t_nt is at least this (and none is <= 1). */
#define ZO_STORES_NT_WIN 1.15

/*
 * zo_adam_stores_decide() - the probe's choice from @pairs pairs of times
 * (seconds; t_regular[k] and t_nt[k] ran back to back on equal halves of the
 * same memory-bound work). *ratio: the median of t_regular[k] / t_nt[k]
 * (> 1: streaming is faster), 0 when a time is not positive or finite;
 * *lowest (may be NULL): the smallest of those ratios, 0 likewise.
 * Returns 1 (stream p, m, v) when the median is >= ZO_STORES_NT_WIN and no
 * pair found streaming slower or equal (every ratio > 1), else 0 (regular
 * stores). The pool feeds it undisturbed pairs only (pool.c): unfiltered,
 * under load (load average 2-4 on the 2-core EPYC, other jobs' builds),
 * single probes there read medians from 0.21x to 1.56x where streaming is
 * 2-5% slower; filtered, 0.92x-0.99x, with a lowest pair of 0.87x (the pair
 * that runs regular first: its dirty lines are written back during the
 * streaming segment). The Zen 3 of issue 40 should read ~2.7x. Not every
 * pair >= 1.15x: that bias would keep a machine where streaming gains
 * 1.2-1.3x on regular stores. Pure: no clock, no state. @pairs in [1, 64].
 */
int zo_adam_stores_decide(const double *t_regular, const double *t_nt, int pairs, double *ratio,
                          double *lowest);

#endif /* ZO_ADAM_STORES_H */
