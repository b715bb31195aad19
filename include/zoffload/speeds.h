/*
 * zoffload/speeds.h - the machine speeds a placement planner splits state
 * across pinned RAM and NVMe by, and predicts the step time from: swap read
 * and write, host<->device copies, fused CPU Adam. Each figure comes with
 * where it came from: the config, a cache of earlier measurements, or a short
 * measurement made here with the engine's own swap engine, copies and Adam
 * pool. Not the planner, and not a benchmark (zo-swapbench, zo-adambench and
 * zo-stepbench sweep settings; this measures the one setting the config names).
 */
#ifndef ZOFFLOAD_SPEEDS_H
#define ZOFFLOAD_SPEEDS_H

#include <stddef.h>

#include "zoffload/config.h"
#include "zoffload/device.h"
#include "zoffload/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes of each zo_speeds *_src string, NUL included (longer sources are cut). */
#define ZO_SPEEDS_SRC_CAP 160

/*
 * zo_speeds - five figures, each > 0 and finite, or 0 when unknown (then its
 * source says why). Bandwidths are bytes per second (not GB/s: multiply by
 * 1e-9 for the config's unit). A plain value: copy it freely.
 *
 * Each *_src says where its figure came from, one of:
 *   "config zoffload.speeds.nvme_read_gbps"              given in the config (the value verbatim, x 1e9)
 *   "cache /root/.cache/zoffload/speeds.json (measured 2026-11-27 17:05:11)"
 *   "measured: 256.0 MiB O_DIRECT io_uring, block 1.0 MiB, qd 8, median of 3 passes 0.0836 s"
 *   "no nvme path", "no device"                          the call asked for none (value 0)
 *   "not measured: <why>"                                 e.g. the disk is short of space (value 0, warned)
 */
typedef struct zo_speeds {
  /* swap reads at the nvme path: zo_swap reads (zoffload/swap.h) of a swap file into pinned host
   * memory, with the config's aio.block_size and aio.queue_depth */
  double nvme_read_bytes_per_s;
  double nvme_write_bytes_per_s; /* swap writes at the nvme path, the same way */
  /* pinned host -> device copies (zo_memcpy), synchronized; on the host device backend memcpy
   * speed, or the emulated link (zoffload.host_link_gbps) */
  double h2d_bytes_per_s;
  double d2h_bytes_per_s; /* device -> pinned host copies, the same way */
  /* elements per second of the fused CPU Adam update (fp32 master, the config's
   * optimizer_state_dtype, gradient and working dtypes as the engine derives them) on an Adam pool
   * of zoffload.adam_threads threads: the whole pool, not one thread */
  double adam_elems_per_s;
  char nvme_read_src[ZO_SPEEDS_SRC_CAP], nvme_write_src[ZO_SPEEDS_SRC_CAP];
  char h2d_src[ZO_SPEEDS_SRC_CAP], d2h_src[ZO_SPEEDS_SRC_CAP];
  char adam_src[ZO_SPEEDS_SRC_CAP];
} zo_speeds;

/* How much zo_speeds_get_ex() measures, and whether it uses the cache; zero-filled means the
 * defaults. */
typedef struct zo_speeds_opts {
  /* bytes written, then read, per pass: 0 for 256 MiB; at least 1 MiB (rounded down to whole MiB).
   * Never more than a quarter of the free space of the nvme path. */
  size_t disk_bytes;
  /* bytes per copy: 0 for 64 MiB; at least 1 MiB. On an emulated link, at most what the link moves
   * in 0.1 s. */
  size_t link_bytes;
  size_t adam_elems; /* elements per Adam pass: 0 for 4 Mi (4194304); 4096 to SIZE_MAX / 16. */
  int max_passes; /* passes per figure, the median kept: 0 for 3; 1..15. After the first, a pass starts
                         only while that figure's passes have taken less than 0.4 s. */
  int remeasure; /* 1: as ZO_SPEEDS_REMEASURE=1, measure what the config does not give, ignoring the cache
                         (the cache is still updated) */
  int no_cache; /* 1: neither read nor write the cache */
} zo_speeds_opts;

/*
 * zo_speeds_get() - the machine's speeds for the planner: zo_speeds_get_ex()
 * with the default options (about 1 s of measuring when nothing is cached).
 */
ZO_API zo_status zo_speeds_get(const zo_config_t *cfg, zo_device_t *dev, const char *nvme_path,
                               zo_speeds *out);

/*
 * zo_speeds_get_ex() - fill @out, each figure from the first of:
 *  1. the config: zoffload.speeds.<key> when not 0 (GB/s or 1e9 elements/s),
 *     used verbatim, whatever @dev and @nvme_path are;
 *  2. nothing to measure: @nvme_path NULL gives both disk figures 0 with
 *     source "no nvme path", @dev NULL both link figures 0, "no device";
 *  3. the cache (below), unless ZO_SPEEDS_REMEASURE=1 in the environment
 *     (any value but "" and "0") or opts->remeasure or opts->no_cache;
 *  4. a measurement, then written to the cache.
 * @cfg:       the run's configuration; NULL means zo_config_defaults() with
 *             bf16 on (bf16 gradients and working copy). Read: aio.block_size,
 *             aio.queue_depth, zoffload.swap_checksum, zoffload.swap_sqpoll,
 *             zoffload.adam_threads, zoffload.optimizer_state_dtype,
 *             bf16/fp16.enabled, data_types.grad_accum_dtype,
 *             gradient_accumulation_steps, the optimizer's hyperparameters,
 *             zoffload.host_link_gbps and zoffload.speeds.
 * @dev:       the device the engine will use, or NULL.
 * @nvme_path: the directory the engine's swap files will be in (an
 *             offload_optimizer or offload_param nvme_path), or NULL.
 * @opts:      NULL for the defaults (see zo_speeds_opts).
 * @out:       filled completely on ZO_OK (figures 0 where unknown).
 *
 * What is measured, and how (each figure the median of up to max_passes
 * timed passes; nothing else of this process should run meanwhile):
 *  - disk: a swap handle on @nvme_path with the engine's options (the
 *    config's block size, queue depth, checksums and SQPOLL, registered
 *    files, a progress thread) and its private directory
 *    nvme_path/zoffload-rank99999800 (or the next free of 64 such ranks when
 *    a live process holds one; a dead run's is cleaned up as zo_swap_create()
 *    does), one preallocated swap file of disk_bytes: whole-file writes, then
 *    whole-file reads, in requests of max(8 MiB, block size) from a ring of
 *    pinned (mlocked) buffers, 4 to 16 requests queued (2 x block size x
 *    queue depth bytes where 256 MiB of buffers allow). File and directory
 *    are removed before returning. The bytes moved are cut to a quarter of
 *    the free space; when that leaves less than 16 MiB (or disk_bytes, if
 *    smaller) nothing is written: both figures are 0, "not measured: the
 *    disk is short: ...". On a file system that refuses O_DIRECT the
 *    figures are buffered I/O's and the source says so.
 *  - link: zo_memcpy() of link_bytes from a pinned host buffer to a
 *    zo_device_malloc() buffer and back (after one untimed copy each way).
 *    On a host device whose link is not emulated while the config has
 *    zoffload.host_link_gbps (as the engine sets it at create), that link is
 *    set for the measurement and unset after, so the planner sees the
 *    emulated rate. A device short of memory gets a smaller copy (down to
 *    1 MiB).
 *  - Adam: zo_adam_pool_update() of adam_elems elements on a new Adam pool
 *    made as the engine makes its own (zoffload.adam_threads threads, bound,
 *    on @dev's NUMA node, this rank's share of the cores under a launcher),
 *    after one untimed pass.
 * The cache: a JSON file, $ZO_SPEEDS_CACHE when set and not empty, else
 * $XDG_CACHE_HOME/zoffload/speeds.json (an absolute XDG_CACHE_HOME), else
 * $HOME/.cache/zoffload/speeds.json; none (nothing cached) when none of
 * these is set. Its entries are keyed by what each figure depends on: the
 * host name; for the disk also the file system @nvme_path is on (its st_dev:
 * every directory of one disk shares a measurement), the block size, queue
 * depth, checksum and SQPOLL settings; for the link the
 * device's kind (and name, on a GPU) and the emulated link rate; for Adam
 * the thread count, SIMD level and the three dtypes. A measured figure is
 * added to the entries there, and the file replaced atomically (a new
 * temporary file beside it, fsynced, renamed over it; missing directories
 * are made, mode 0700). Two processes writing at once may
 * each lose the other's new entries (measured again next time), never
 * corrupt the file.
 * The file is replaced only when zoffload wrote it (its top-level
 * "zoffload_speeds" marker) or it is missing or empty; a file that is not
 * JSON but starts with the marker is taken as a damaged one of ours. A
 * damaged or unreadable cache, or one entry of it, is a warning naming the
 * file, and its figures are measured again; another program's file, or a
 * symbolic link, FIFO or directory at the path, is warned about and left
 * alone (figures measured, not cached). Cache problems never fail the call.
 * Logs one zo_info() line per figure: its value and source, e.g.
 * "speeds: NVMe read 3.213 GB/s (measured: 256.0 MiB O_DIRECT io_uring, ...)";
 * problems are zo_warn() lines.
 * Thread-safe: calls are serialised by a process-wide lock (measurements
 * would disturb each other). @dev may be used by other threads meanwhile,
 * but the link figures then count their copies too.
 * Returns ZO_OK, also when a figure could not be measured (no room on the
 * disk, no memory for its buffers, a device or swap call failed: that figure
 * is 0, its source "not measured: " and the error, and a warning says so);
 * ZO_ERR_INVALID_ARG when @out is NULL, @nvme_path is empty or not an
 * existing directory, or an option is out of range (@out untouched).
 */
ZO_API zo_status zo_speeds_get_ex(const zo_config_t *cfg, zo_device_t *dev, const char *nvme_path,
                                  const zo_speeds_opts *opts, zo_speeds *out);

/*
 * zo_speeds_cache_path() - the cache file zo_speeds_get() uses now (see
 * there), into @buf (@cap bytes, NUL-terminated). Thread-safe (reads the
 * environment). Returns ZO_OK; ZO_ERR_INVALID_ARG when @buf is NULL or @cap
 * too small for the path; ZO_ERR_UNSUPPORTED when ZO_SPEEDS_CACHE,
 * XDG_CACHE_HOME and HOME are all unset or empty (nothing is cached).
 */
ZO_API zo_status zo_speeds_cache_path(char *buf, size_t cap);

/*
 * zo_speeds_measure_fn - an application's measurement for zo_speeds_figure():
 * sets *@value (> 0 and finite, in the unit the application keys it by) and a
 * one-line @how (@how_cap bytes), and returns ZO_OK; or returns another
 * zo_status with the reason in @how, and nothing is cached.
 */
typedef zo_status (*zo_speeds_measure_fn)(void *ctx, double *value, char *how, size_t how_cap);

/*
 * zo_speeds_figure() - one figure that the application measures itself (a
 * model's compute time a micro-batch, say), kept in zo_speeds_get_ex()'s
 * cache beside the library's figures, under the entry
 * "app <@key> host=<host name>". @key names everything the figure depends on
 * besides the host (shapes, batch, thread count, kernels): 1 to 1024 bytes,
 * printable ASCII. The figure is, in order: the cache's entry (unless
 * ZO_SPEEDS_REMEASURE=1 in the environment or @remeasure), else
 * @measure(@ctx, ...), whose value is then cached with its @how and the date.
 * *@value: the figure; @src (@src_cap bytes, NUL-terminated, cut when longer):
 * "cache PATH (measured DATE)" or "measured: HOW". The file's rules (where it
 * is, when it is replaced, warnings for a damaged one) are
 * zo_speeds_get_ex()'s. Synchronous; thread-safe (one zo_speeds_* call at a
 * time in the process; @measure runs under that lock and must not call one).
 * Returns ZO_OK; ZO_ERR_INVALID_ARG for a NULL @key, @measure, @value or @src,
 * a zero @src_cap, a key that is empty, longer or not printable ASCII, or a
 * @measure that returned ZO_OK with a value not positive and finite; or
 * @measure's status (*@value 0; @src and zo_last_error() "not measured: "
 * and its @how).
 */
ZO_API zo_status zo_speeds_figure(const char *key, zo_speeds_measure_fn measure, void *ctx,
                                  int remeasure, double *value, char *src, size_t src_cap);

#ifdef __cplusplus
}
#endif
#endif /* ZOFFLOAD_SPEEDS_H */
