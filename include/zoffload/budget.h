/*
 * zoffload/budget.h - the start-up budget: what an engine will hold on each
 * tier (device memory, host memory, the pinned part of it, NVMe space) for
 * the tensors registered so far, against what the machine has, before any of
 * it is allocated. A configuration that cannot fit is refused at
 * zo_engine_finalize() with one message per tier, naming the config key to
 * change and a value that would fit, instead of being found out by the
 * kernel's OOM killer halfway through pinning 40 GB.
 *
 * What counts as "available":
 *   device  zo_device_mem_available(): free bytes under
 *           zoffload.device_memory_limit (cudaMemGetInfo on CUDA);
 *   host    min(MemAvailable of /proc/meminfo, the cgroup v2 memory.max of
 *           this process's cgroup less its memory.current); on the host
 *           device backend the device bytes are host memory too and are
 *           added to the host line;
 *   pinned  the smaller of zoffload.pinned_fraction (default 0.85) of
 *           MemTotal of /proc/meminfo and RLIMIT_MEMLOCK (unlimited with
 *           CAP_IPC_LOCK). The rule: the engine page-locks at most that
 *           fraction of the machine, since locked pages cannot be reclaimed
 *           and the OS, the driver, a data loader and the page cache need the
 *           rest; a plan over it is refused, naming the rule and what to
 *           change (offload_optimizer.device "nvme", pin_memory false, a
 *           smaller sub_group_size or buffer_count, or the fraction). Under
 *           the fraction but over RLIMIT_MEMLOCK the pool falls back to
 *           pageable memory (slower copies), so that only warns. For tests,
 *           the environment variable ZO_TEST_MEMTOTAL (bytes, decimal
 *           digits, 1 to SIZE_MAX - 1; any other value is
 *           ZO_ERR_INVALID_ARG naming it) stands in for MemTotal;
 *   nvme    statvfs(f_bavail * f_frsize) of each distinct nvme_path (one line
 *           when optimizer state and parameters share a file system).
 * Engine bytes are the memory plan's (zoffload/plan.h), which
 * zo_engine_finalize() allocates exactly: working weights, state
 * and gradients on the device for offload "none"; the host gradient buffer,
 * working-dtype staging, cpu master/state, parameter host tier, NVMe
 * staging, sub-group buffers and write-back ring; swap file sizes with their
 * per-shard extent padding. On the device, parameter offload needs at least
 * the largest tensor besides the resident block; that minimum is the need.
 *
 * Thread-safety: as the engine (one thread at a time).
 */
#ifndef ZOFFLOAD_BUDGET_H
#define ZOFFLOAD_BUDGET_H

#include <stddef.h>

#include "zoffload/engine.h"
#include "zoffload/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum zo_tier {
  ZO_TIER_DEVICE = 0,
  ZO_TIER_HOST = 1,
  ZO_TIER_PINNED = 2,
  ZO_TIER_NVME = 3
} zo_tier;

/* zo_tier_name() - "device", "host", "pinned" or "nvme". */
ZO_API const char *zo_tier_name(zo_tier t);

/* One tier (or, for nvme, one file system) of the budget. Bytes throughout. */
typedef struct zo_budget_line {
  zo_tier tier;
  char where[256];     /* the device's name, "host", or the nvme_path */
  size_t engine_bytes; /* what the engine will hold here */
  size_t app_bytes;    /* what the caller said it holds besides (zo_engine_budget @app) */
  /* engine_bytes + app_bytes (+ device bytes on a host device's host line); SIZE_MAX when the sum
   * does not fit in size_t, which never fits */
  size_t need;
  size_t available; /* what is there; SIZE_MAX: no limit known */
  char source
      [160]; /* where `available` comes from, e.g. "MemAvailable", "cgroup memory.max", "statvfs" */
  int fits; /* need <= available (pinned: need <= zoffload.pinned_fraction of MemTotal, see `warn`) */
  int warn; /* pinned under the MemTotal rule but over RLIMIT_MEMLOCK: fits, but copies will be
                           pageable */
  char advice[512]; /* when !fits or warn: the key to change and a value that would fit */
} zo_budget_line;

enum { ZO_BUDGET_MAX_LINES = 6 };

typedef struct zo_budget {
  zo_budget_line line[ZO_BUDGET_MAX_LINES];
  int n_lines;
  int fits; /* every line fits */
} zo_budget;

/*
 * zo_engine_budget() - size every tier for the tensors registered so far and
 * compare with what the machine has: the plan of zo_engine_plan(), made and
 * freed inside. Allocates nothing else and changes nothing in @e; callable
 * any time before zo_engine_finalize(), e.g. for a dry run.
 * @app: bytes the caller will hold besides the engine, indexed by zo_tier
 *       (e.g. a model's activations on ZO_TIER_DEVICE, or a CPU model's
 *       weights on ZO_TIER_HOST); NULL for none. Memory the caller has
 *       already allocated is already missing from `available`: do not count
 *       it again.
 * @out: filled; out->fits says whether everything fits.
 * Returns ZO_OK (whether or not it fits), ZO_ERR_INVALID_ARG (NULL @e or
 * @out), ZO_ERR_INVALID_USAGE (after finalize, or no tensor registered),
 * ZO_ERR_CONFIG (the plan's sub_group_size refusal, see zo_engine_plan()),
 * ZO_ERR_OUT_OF_MEMORY (the plan's small tables), ZO_ERR_INVALID_ARG (a
 * ZO_TEST_MEMTOTAL that is not a byte count, see "pinned" above).
 */
ZO_API zo_status zo_engine_budget(zo_engine_t *e, const size_t app[4], zo_budget *out);

/*
 * zo_engine_budget_for() - zo_engine_budget() of the plan for a device of
 * @kind (see zo_engine_plan(): ZO_DEVICE_AUTO is the engine's own device, as
 * zo_engine_budget(); ZO_DEVICE_CUDA plans a GPU run, e.g. a dry run on a
 * host device standing in for a GPU). What is available is still measured on
 * @e's device and this machine. Returns what zo_engine_budget() returns, and
 * ZO_ERR_INVALID_ARG for a @kind not HOST, CUDA or AUTO, ZO_ERR_UNSUPPORTED
 * for what zo_engine_check_device() refuses on @kind.
 */
ZO_API zo_status zo_engine_budget_for(zo_engine_t *e, zo_device_kind kind, const size_t app[4],
                                      zo_budget *out);

/*
 * zo_host_memory_available() - bytes of host memory this process may still
 * take: the smaller of /proc/meminfo's MemAvailable and the room left under
 * the cgroup v2 memory.max of its cgroup and their ancestors, as the budget's
 * host line measures it; SIZE_MAX when neither can be read. @source (@cap
 * bytes; may be NULL) gets where the figure comes from ("MemAvailable" or the
 * cgroup's memory.max). Reads /proc and /sys on every call; thread-safe.
 */
ZO_API size_t zo_host_memory_available(char *source, size_t cap);

/*
 * zo_budget_check() - ZO_OK when @b fits, else ZO_ERR_OUT_OF_MEMORY with a
 * message holding one sentence per tier that does not fit: the tier, the
 * bytes needed and available, where the figure comes from, the key to change
 * and a value that would fit, e.g.
 *   "host memory: needs 49.4 GB (engine 49.4 GB), 23.1 GB available
 *    (MemAvailable): set zero_optimization.sub_group_size to at most 3.6e8 ..."
 * Pinned warnings are logged (zo_warn), not errors.
 */
ZO_API zo_status zo_budget_check(const zo_budget *b);

/*
 * zo_budget_print() - the budget as a table on @f (a FILE *), one line per
 * tier: need, engine and caller shares, available and its source, verdict.
 */
ZO_API void zo_budget_print(const zo_budget *b, void *f);

#ifdef __cplusplus
}
#endif
#endif /* ZOFFLOAD_BUDGET_H */
