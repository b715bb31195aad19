/*
 * plan_internal.h - the memory plan's calls shared by finalize (engine.c),
 * the budget (budget.c) and the plan itself (plan.c). Not installed; the
 * public half is zoffload/plan.h.
 */
#ifndef ZO_PLAN_INTERNAL_H
#define ZO_PLAN_INTERNAL_H

#include "zoffload/budget.h"
#include "zoffload/plan.h"

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
