/*
 * plan_internal.h - the memory plan's calls shared by finalize (engine.c),
 * the budget (budget.c) and the plan itself (plan.c). Not installed; the
 * public half is zoffload/plan.h.
 */
#ifndef ZO_PLAN_INTERNAL_H
#define ZO_PLAN_INTERNAL_H

#include "base_internal.h"
#include "zoffload/budget.h"
#include "zoffload/plan.h"

/* Saturating size arithmetic (zo_size_* store SIZE_MAX on overflow): a byte count too large for size_t becomes
 * SIZE_MAX, which the budget refuses (it never fits) instead of comparing a wrapped value. Shared by the plan, the
 * budget and the placement planner. */
static inline size_t mul_sat(size_t a, size_t b) {
  size_t r;
  zo_size_mul(a, b, &r);
  return r;
}
static inline size_t add_sat(size_t a, size_t b) {
  size_t r;
  zo_size_add(a, b, &r);
  return r;
}
static inline size_t round_sat(size_t x, size_t align) {
  size_t r;
  zo_size_round_up(x, align, &r);
  return r;
}

/* zo_engine_plan() for device @kind (ZO_DEVICE_AUTO: the engine's own) with @what naming the caller in the messages
 * of its usage checks ("budget", "finalize"). */
zo_status zo_plan_make(const zo_engine_t *e, const char *what, zo_device_kind kind, zo_plan **out);
/* Bytes (count x bytes, saturated) of the plan's buffers named @name, or of every buffer whose name starts
 * with @name when it ends with '.' (e.g. "state_host."); 0 when there is none. */
size_t zo_plan_sum(const zo_plan *p, const char *name);
/* Bytes of one buffer named @name (exactly); 0 when the plan has none. */
size_t zo_plan_bytes(const zo_plan *p, const char *name);
/* The budget of plan @p of engine @e (zo_engine_budget() without making the plan; budget.c). */
zo_status zo_plan_budget(const zo_engine_t *e, const zo_plan *p, const size_t app[4], zo_budget *out);

/* MemTotal of /proc/meminfo (or ZO_TEST_MEMTOTAL) into *@out, bytes; SIZE_MAX when unreadable (budget.c). */
zo_status zo_plan_mem_total(size_t *out);

#endif /* ZO_PLAN_INTERNAL_H */
