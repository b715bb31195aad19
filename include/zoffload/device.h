/*
 * zoffload/device.h - the device the engine caches parameters on: memory,
 * streams, events and asynchronous copies, with CUDA's ordering semantics.
 * Two backends sit behind it: `host` (an emulated device in host memory, for
 * machines with no GPU) and `cuda` (an NVIDIA GPU through the CUDA runtime,
 * built when the toolkit is found at configure time). This header is the
 * whole interface; it holds no kernels and no collectives (see zoffload/comm.h).
 *
 * Ordering model (both backends, as in CUDA):
 *  - Work queued on one stream runs in issue order, one op after another.
 *  - Different streams run concurrently; the only cross-stream ordering is
 *    zo_stream_wait_event().
 *  - Every *_async / enqueue call "returns when enqueued": the op may not have
 *    started yet. It is complete once zo_stream_synchronize(), a
 *    zo_event_synchronize() of an event recorded after it, a successful
 *    zo_event_query()/zo_stream_query() reporting completion, or
 *    zo_device_synchronize() has returned.
 *  - Memory visibility: once one of the calls above has reported an op
 *    complete, the calling host thread sees every byte that op wrote (and
 *    every byte written by ops ordered before it).
 *
 * Where the cuda backend differs (CUDA's own rules, not emulated away):
 *  - Host functions (zo_launch_host_func) of different streams may run one
 *    at a time on one CUDA thread: a host func must never wait for another
 *    stream's host func, nor for the host thread that enqueues work.
 *  - A copy between device memory and PAGEABLE host memory may block the
 *    caller until earlier work on its stream has completed (the driver stages
 *    it). Host memory from a zoffload pinned pool is registered with CUDA
 *    (see zoffload/pinned.h, zo_pinned_is_registered()); copies to and from
 *    registered memory do not block.
 *  - zo_device_free() calls cudaFree, which may wait for the whole GPU.
 *  - A failed asynchronous op surfaces as ZO_ERR_CUDA at the next
 *    synchronize or query; errors such as an illegal address poison the
 *    whole CUDA context, so every later CUDA call of the process fails too.
 *  - Every call on a cuda device makes its GPU the calling thread's current
 *    device (cudaSetDevice) when it is not already, as a one-GPU CUDA
 *    library does; a thread that drives several GPUs sets its own again.
 */
#ifndef ZOFFLOAD_DEVICE_H
#define ZOFFLOAD_DEVICE_H

#include <stddef.h>

#include "zoffload/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zo_device zo_device_t;
typedef struct zo_stream zo_stream_t;
typedef struct zo_event zo_event_t;

typedef enum zo_device_kind {
  ZO_DEVICE_HOST = 0, /* emulated device: "device memory" is host memory with a capacity */
  ZO_DEVICE_CUDA = 1, /* an NVIDIA GPU through the CUDA runtime */
  ZO_DEVICE_AUTO = 2, /* for zo_device_create() only: CUDA when built with it and a GPU is
                         visible, else host. zo_device_get_kind() never returns it. */
} zo_device_kind;

/* Direction of a copy; H = host memory (pageable or pinned), D = device memory. */
typedef enum zo_copy_kind {
  ZO_COPY_H2D = 0,
  ZO_COPY_D2H = 1,
  ZO_COPY_D2D = 2,
  ZO_COPY_H2H = 3,
} zo_copy_kind;

/* Alignment in bytes of every pointer zo_device_malloc() returns. */
#define ZO_DEVICE_ALIGN 256

/* ---------------------------------------------------------------- device */

/*
 * zo_device_create() - open device @ordinal of backend @kind.
 * @kind:            ZO_DEVICE_HOST, ZO_DEVICE_CUDA, or ZO_DEVICE_AUTO (CUDA
 *                   when built with CUDA and zo_device_cuda_count() > 0, else
 *                   host; the choice never depends on @ordinal).
 * @ordinal:         >= 0. For the host backend any ordinal works and each call
 *                   makes an independent emulated device. For CUDA, the
 *                   runtime's device number (after CUDA_VISIBLE_DEVICES); see
 *                   zo_device_default_ordinal(). Several handles may open the
 *                   same GPU; each keeps its own accounting.
 * @mem_limit_bytes: device memory capacity in bytes that zo_device_malloc()
 *                   enforces. Host: 0 = unlimited. CUDA: a cap on what this
 *                   handle allocates; 0 = the GPU's total memory (memory
 *                   other users of the GPU hold still makes cudaMalloc fail
 *                   earlier, as ZO_ERR_OUT_OF_MEMORY).
 * @out:             receives the handle; set to NULL on failure.
 * CUDA: the name reads "cuda:0 NVIDIA H100 80GB HBM3 (sm_90, 79.1 GiB)", plus
 * ", limit X" when @mem_limit_bytes is set; the GPU becomes the calling
 * thread's current device, and zoffload pinned host pools of the process
 * start registering their memory with CUDA (zoffload/pinned.h).
 * Synchronous. Thread-safe. Returns ZO_OK; ZO_ERR_INVALID_ARG (NULL @out,
 * @ordinal < 0, unknown @kind, CUDA @ordinal >= the number of visible GPUs);
 * ZO_ERR_UNSUPPORTED for ZO_DEVICE_CUDA: "CUDA backend not built" (configured
 * without the toolkit), or "no CUDA device: <why>" (cudaGetDeviceCount found
 * none or failed, e.g. no driver); ZO_ERR_CUDA when a CUDA call failed (the
 * message names it and the device); ZO_ERR_OUT_OF_MEMORY / ZO_ERR_SYSTEM when
 * the handle or its locks cannot be made.
 */
ZO_API zo_status zo_device_create(zo_device_kind kind, int ordinal, size_t mem_limit_bytes,
                                  zo_device_t **out);

/*
 * zo_device_destroy() - synchronize the device (waits all queued work), then
 * destroy every stream and event still open on it (their handles become
 * invalid) and free every allocation still live. NULL is a no-op. Not
 * thread-safe against other calls on the same device.
 */
ZO_API void zo_device_destroy(zo_device_t *dev);

/* zo_device_get_kind() - the backend of @dev (HOST or CUDA, never AUTO). @dev must not be NULL.
 * Thread-safe. */
ZO_API zo_device_kind zo_device_get_kind(const zo_device_t *dev);

/* zo_device_kind_name() - "host", "cuda", "auto", or "?" for unknown values. Thread-safe. */
ZO_API const char *zo_device_kind_name(zo_device_kind kind);

/*
 * zo_device_kind_parse() - the kind named @name: "host", "cuda" or "auto"
 * (exact, lower case) into *@out. Thread-safe. Returns ZO_OK, or
 * ZO_ERR_INVALID_ARG (NULL argument, or another name; *@out unchanged).
 */
ZO_API zo_status zo_device_kind_parse(const char *name, zo_device_kind *out);

/*
 * zo_device_cuda_count() - how many CUDA devices the runtime sees (after
 * CUDA_VISIBLE_DEVICES): what ZO_DEVICE_AUTO decides on. 0 when built without
 * CUDA, when there is no driver or no GPU. Creates no device and no CUDA
 * context (cudaGetDeviceCount only). Thread-safe.
 */
ZO_API int zo_device_cuda_count(void);

/* The largest local rank zo_device_local_rank() accepts. */
#define ZO_LOCAL_RANK_MAX 65535

/*
 * zo_device_local_rank() - this process's rank on its node, as its launcher
 * set it: the first of these variables that is set and not empty, in this
 * order: LOCAL_RANK (torchrun, the deepspeed launcher), then
 * OMPI_COMM_WORLD_LOCAL_RANK (Open MPI's mpirun), then MPI_LOCALRANKID
 * (MPICH and Intel MPI's Hydra), then SLURM_LOCALID (srun); none set: 0.
 * @local_rank: out, in [0, ZO_LOCAL_RANK_MAX].
 * @var:        out, may be NULL: the variable read (a static string), or NULL
 *              when none was set.
 * Thread-safe (reads the environment only). Returns ZO_OK; ZO_ERR_INVALID_ARG
 * (NULL @local_rank); ZO_ERR_CONFIG when the variable found is not a plain
 * decimal integer in [0, ZO_LOCAL_RANK_MAX] (no sign, no spaces): the message
 * names the variable and its value, and the outputs are unchanged. A later
 * variable is not consulted when an earlier one is malformed.
 */
ZO_API zo_status zo_device_local_rank(int *local_rank, const char **var);

/*
 * zo_device_local_ordinal() - the CUDA device this process should use: its
 * local rank (zo_device_local_rank()), one rank per visible GPU, as torch
 * and DeepSpeed do (no wrap-around: two ranks on one GPU is refused).
 * @n_devices: the CUDA devices this process sees (zo_device_cuda_count());
 *             0: not checked (zo_device_create() reports the missing GPU).
 * @ordinal:   out.
 * Thread-safe. Returns ZO_OK; ZO_ERR_INVALID_ARG (NULL @ordinal, negative
 * @n_devices); ZO_ERR_CONFIG as zo_device_local_rank(), or when the local
 * rank is >= @n_devices (the message names the variable, its value, the
 * device count and CUDA_VISIBLE_DEVICES). *@ordinal is unchanged on error.
 */
ZO_API zo_status zo_device_local_ordinal(int n_devices, int *ordinal);

/*
 * zo_device_default_ordinal() - zo_device_local_rank() for callers that
 * cannot fail: the local rank, or 0 when the variable is malformed (which
 * also warns once, naming it). It does not check the ordinal against the
 * GPUs present (zo_device_local_ordinal() does; zo_device_create() too).
 * Thread-safe.
 */
ZO_API int zo_device_default_ordinal(void);

/*
 * zo_device_name() - human-readable description, e.g.
 * "host (emulated device, limit 64.0 MiB)". Valid until zo_device_destroy().
 * NULL @dev gives "(null device)". Thread-safe.
 */
ZO_API const char *zo_device_name(const zo_device_t *dev);

/*
 * zo_device_peak_tflops() - the dense (no sparsity) bf16 tensor-core peak of
 * @dev in TFLOP/s (fp32 accumulation), for model-FLOPs utilisation (MFU);
 * 0 for a host device or a GPU not in the table (see
 * zo_gpu_bf16_peak_tflops()). Thread-safe.
 */
ZO_API double zo_device_peak_tflops(const zo_device_t *dev);

/*
 * zo_gpu_bf16_peak_tflops() - dense bf16 tensor-core peak in TFLOP/s from
 * NVIDIA's datasheets, keyed by compute capability @major.@minor and a word
 * of the product name @name (cudaDeviceProp.name, matched as a whole word,
 * so "L4" is not "L40S"; specific names first, e.g. "H100 PCIe" 756 before
 * "H100" 989). 0 when not listed. Thread-safe, pure.
 */
ZO_API double zo_gpu_bf16_peak_tflops(int major, int minor, const char *name);

/*
 * zo_device_numa_node() - the NUMA node (the kernel's number, as in
 * /sys/devices/system/node) the GPU's PCI device is attached to, read from
 * sysfs at zo_device_create(); -1 for the host backend, NULL, or when the
 * kernel does not say (single-node machines often report -1). Thread-safe.
 */
ZO_API int zo_device_numa_node(const zo_device_t *dev);

/* zo_device_ordinal() - the ordinal passed to zo_device_create(); -1 for NULL. */
ZO_API int zo_device_ordinal(const zo_device_t *dev);

/*
 * zo_device_host_addressable() - 1 when device pointers of @dev may be
 * dereferenced by host code (host backend), 0 otherwise (CUDA, NULL).
 * Copies must still use the zo_copy_kind matching where the bytes live.
 */
ZO_API int zo_device_host_addressable(const zo_device_t *dev);

/*
 * zo_device_malloc() - allocate @nbytes of device memory.
 * @nbytes: bytes, > 0. Accounting counts exactly @nbytes (not the rounding).
 * @dptr:   receives a ZO_DEVICE_ALIGN (256)-byte aligned device pointer; the
 *          contents are undefined (like cudaMalloc). NULL on failure.
 * Synchronous: does not wait for or order with any stream. Thread-safe.
 * Returns ZO_OK; ZO_ERR_INVALID_ARG (NULL @dev or @dptr, @nbytes == 0);
 * ZO_ERR_OUT_OF_MEMORY when used + @nbytes would exceed the limit, with the
 * message "device memory: cannot allocate X bytes: Y in use of limit Z", or
 * when the backing allocation fails (CUDA: cudaMalloc out of memory; the
 * message gives the GPU's free and total bytes); ZO_ERR_CUDA for other
 * cudaMalloc failures.
 */
ZO_API zo_status zo_device_malloc(zo_device_t *dev, size_t nbytes, void **dptr);

/*
 * zo_device_free() - free a pointer returned by zo_device_malloc() on @dev.
 * NULL @dptr is a no-op. It is not ordered with streams: the caller must
 * ensure no queued work still uses the memory (CUDA: cudaFree, which may
 * also wait for the whole GPU). (Best effort, host
 * backend: device ranges are checked again when a copy runs; a copy that
 * finds its memory freed is skipped and becomes the stream's sticky
 * ZO_ERR_INVALID_USAGE. A range already reused by a new malloc is not caught.)
 * Thread-safe. Returns ZO_OK; ZO_ERR_INVALID_ARG (NULL @dev, or @dptr not a
 * live pointer from zo_device_malloc() on @dev, e.g. freed twice or an
 * interior pointer).
 */
ZO_API zo_status zo_device_free(zo_device_t *dev, void *dptr);

/*
 * zo_device_mem_info() - device memory accounting, in bytes.
 * @used_bytes:  bytes currently allocated (sum of live malloc sizes).
 * @peak_bytes:  the highest @used_bytes since create.
 * @limit_bytes: the capacity malloc enforces; SIZE_MAX when unlimited.
 * Any output pointer may be NULL. Thread-safe (a consistent snapshot).
 * Returns ZO_OK or ZO_ERR_INVALID_ARG (NULL @dev).
 */
ZO_API zo_status zo_device_mem_info(const zo_device_t *dev, size_t *used_bytes, size_t *peak_bytes,
                                    size_t *limit_bytes);

/*
 * zo_device_mem_available() - bytes a zo_device_malloc() could get now: the
 * room left under the limit, and on CUDA no more than the GPU's free memory
 * (cudaMemGetInfo; the CUDA context and other processes hold some). SIZE_MAX
 * on an unlimited host device. A snapshot: concurrent allocations change it.
 * Thread-safe. Returns ZO_OK; ZO_ERR_INVALID_ARG (NULL); ZO_ERR_CUDA.
 */
ZO_API zo_status zo_device_mem_available(zo_device_t *dev, size_t *bytes);

/*
 * zo_device_synchronize() - wait until all work queued on every stream of
 * @dev before this call has completed (CUDA: the streams of this handle, wrapped
 * ones included, not the whole GPU). Thread-safe. Returns ZO_OK;
 * ZO_ERR_INVALID_ARG (NULL @dev); or the first sticky error found on one of
 * the streams (see zo_stream_synchronize()), after waiting for all of them.
 */
ZO_API zo_status zo_device_synchronize(zo_device_t *dev);

/* ---------------------------------------------------------------- streams */

/*
 * zo_stream_create() - a new in-order work queue on @dev (host backend: one
 * worker thread). Thread-safe. Returns ZO_OK; ZO_ERR_INVALID_ARG (NULL
 * @dev or @out); ZO_ERR_OUT_OF_MEMORY; ZO_ERR_SYSTEM (thread creation failed).
 */
ZO_API zo_status zo_stream_create(zo_device_t *dev, zo_stream_t **out);

/*
 * zo_stream_destroy() - wait for the work queued on @s, then destroy it.
 * NULL is a no-op. Events recorded on @s stay valid (and complete). Must not
 * race with other calls on @s. A handle from zo_stream_wrap() only waits:
 * the wrapped native stream is the caller's and stays alive.
 */
ZO_API void zo_stream_destroy(zo_stream_t *s);

/*
 * zo_stream_wrap() - a stream handle on @dev for a native stream the caller
 * owns (CUDA: a cudaStream_t, e.g. the training framework's compute stream),
 * so zoffload copies, host funcs and events order with the caller's kernels.
 * @native_stream: the cudaStream_t, passed as void *. NULL (0) is CUDA's
 *                 legacy default stream; cudaStreamPerThread works too and
 *                 means the per-thread stream of whichever thread makes each
 *                 call; otherwise it must be a live stream of @dev's GPU
 *                 (checked with cudaStreamGetDevice when the runtime has it).
 * The handle behaves like one from zo_stream_create() (sticky errors,
 * zo_device_synchronize() and zo_device_destroy() wait for it), except that
 * zo_stream_destroy() / zo_device_destroy() synchronize the native stream
 * and never destroy it. The native stream must outlive the handle. Several
 * handles may wrap the same native stream. Thread-safe.
 * Returns ZO_OK; ZO_ERR_INVALID_ARG (NULL @dev or @out, a stream of another
 * GPU); ZO_ERR_CUDA (the stream handle is not valid); ZO_ERR_UNSUPPORTED on
 * the host backend, which has no native streams; ZO_ERR_OUT_OF_MEMORY.
 */
ZO_API zo_status zo_stream_wrap(zo_device_t *dev, void *native_stream, zo_stream_t **out);

/*
 * zo_stream_native() - the native stream behind @s: the cudaStream_t (as
 * void *) of a CUDA stream, created or wrapped; NULL on the host backend or
 * for NULL @s (and for a wrapped legacy default stream, which is 0).
 * Thread-safe. Enqueue work on it directly to order it with @s's ops.
 */
ZO_API void *zo_stream_native(zo_stream_t *s);

/*
 * zo_memcpy_async() - copy @nbytes from @src to @dst in stream order.
 * @kind says where each side lives: the device side(s) must lie wholly inside
 * one live allocation of @s's device (zo_device_malloc()), or, on CUDA, be
 * device (or managed) memory of that GPU by cudaPointerGetAttributes, first
 * and last byte (memory a framework allocated, e.g. torch's tensors); the
 * host side(s) must not overlap zo_device_malloc() memory of the device.
 * @src and @dst ranges must not overlap. @nbytes == 0 is a
 * no-op. Returns when enqueued; completion as in the header comment. The
 * caller keeps both buffers alive and @src unchanged until the copy is
 * complete (host backend: pageable memory is NOT staged at enqueue).
 * Thread-safe (ops from several threads are ordered by arrival).
 * Returns ZO_OK; ZO_ERR_INVALID_ARG (NULL @s, NULL pointer with
 * @nbytes > 0, unknown @kind, a side not where @kind says, overlap);
 * ZO_ERR_CUDA when CUDA refused to enqueue it (also made @s's sticky error).
 * CUDA: H2H copies run as a host func on the stream (CUDA would run them
 * synchronously in the caller); pageable host memory: see the header comment.
 */
ZO_API zo_status zo_memcpy_async(zo_stream_t *s, void *dst, const void *src, size_t nbytes,
                                 zo_copy_kind kind);

/*
 * zo_memset_async() - set @nbytes of device memory at @dptr to the byte
 * @value in stream order (like cudaMemsetAsync). The range must lie inside
 * one live allocation. @nbytes == 0 is a no-op. Returns when enqueued.
 * Thread-safe. Returns ZO_OK or ZO_ERR_INVALID_ARG.
 */
ZO_API zo_status zo_memset_async(zo_stream_t *s, void *dptr, int value, size_t nbytes);

/*
 * zo_launch_host_func() - run @fn(@arg) in stream order on a library thread,
 * like cudaLaunchHostFunc: it starts after all earlier work on @s completed,
 * and later work on @s starts after it returns. @fn must not call zoffload
 * device functions (it may block the stream, and a synchronize on its own
 * stream would deadlock), nor CUDA. Host backend: each stream has its own
 * thread; cuda backend: CUDA's callback thread, which may serialize host
 * funcs of all streams (see the header comment). Returns when enqueued.
 * Thread-safe.
 * Returns ZO_OK; ZO_ERR_INVALID_ARG (NULL @s or @fn).
 */
ZO_API zo_status zo_launch_host_func(zo_stream_t *s, void (*fn)(void *arg), void *arg);

/*
 * zo_stream_synchronize() - wait until all work queued on @s before this call
 * has completed. Thread-safe. Returns ZO_OK; ZO_ERR_INVALID_ARG (NULL @s);
 * or the stream's sticky error: the status of the first queued op that
 * failed (message names the op). The error stays: every later synchronize
 * of @s returns it again. Later ops still run, so waits never hang.
 * CUDA: the sticky error is the first CUDA error an enqueue or a
 * synchronize/query of @s met (ZO_ERR_CUDA, message naming the call, the
 * device and cudaGetErrorString()); CUDA itself may stop running later work
 * after such an error (see the header comment).
 */
ZO_API zo_status zo_stream_synchronize(zo_stream_t *s);

/*
 * zo_stream_query() - *@idle = 1 when all work queued on @s has completed,
 * else 0. Does not block. Thread-safe. Returns ZO_OK, ZO_ERR_INVALID_ARG, or
 * the stream's sticky error (with *@idle still set).
 */
ZO_API zo_status zo_stream_query(zo_stream_t *s, int *idle);

/* ---------------------------------------------------------------- events */

/*
 * zo_event_create() - a new event on @dev, not yet recorded. Thread-safe.
 * Returns ZO_OK; ZO_ERR_INVALID_ARG (NULL @dev or @out); ZO_ERR_OUT_OF_MEMORY.
 */
ZO_API zo_status zo_event_create(zo_device_t *dev, zo_event_t **out);

/*
 * zo_event_destroy() - destroy @ev; NULL is a no-op. Safe while streams still
 * wait on it (zo_stream_wait_event() copied what it needs), as in CUDA.
 */
ZO_API void zo_event_destroy(zo_event_t *ev);

/*
 * zo_event_record() - CUDA semantics: capture the work queued on @s up to now;
 * the event completes when that work has completed. A later record replaces
 * the capture (even on another stream). @ev and @s must belong to the same
 * device. Returns when recorded (never blocks on work). Thread-safe.
 * Returns ZO_OK or ZO_ERR_INVALID_ARG (NULL, different devices).
 */
ZO_API zo_status zo_event_record(zo_event_t *ev, zo_stream_t *s);

/*
 * zo_event_query() - *@done = 1 when the captured work has completed (or the
 * event was never recorded), else 0. Does not block. Thread-safe.
 * Returns ZO_OK or ZO_ERR_INVALID_ARG; CUDA: ZO_ERR_CUDA (with *@done = 1)
 * when the captured work failed.
 */
ZO_API zo_status zo_event_query(zo_event_t *ev, int *done);

/*
 * zo_event_synchronize() - wait until the work captured by the latest record
 * (as of this call) has completed; returns at once when never recorded.
 * Thread-safe. Returns ZO_OK or ZO_ERR_INVALID_ARG; CUDA: ZO_ERR_CUDA when
 * the captured work failed.
 */
ZO_API zo_status zo_event_synchronize(zo_event_t *ev);

/*
 * zo_stream_wait_event() - work queued on @s after this call waits until the
 * work captured by @ev at the time of this call has completed (a later
 * re-record of @ev does not change it; a never-recorded @ev adds no wait).
 * @ev may belong to another device of the same backend. Returns when
 * enqueued (never blocks). Thread-safe. Returns ZO_OK or ZO_ERR_INVALID_ARG.
 */
ZO_API zo_status zo_stream_wait_event(zo_stream_t *s, zo_event_t *ev);

/* ---------------------------------------------------------------- link emulation */

/*
 * Host-device link emulation (host backend only). A real GPU sits behind a
 * PCIe link of a few to a few tens of GB/s; the host backend copies at memcpy
 * speed, so without emulation every fetch looks free. With a link bandwidth
 * set, every H2D and D2H copy (zo_memcpy_async() in its stream's worker, and
 * zo_memcpy()) of B bytes occupies the link for B / gbps seconds and does not
 * complete before its slot ends:
 *  - The link is full duplex, one lane per direction, like PCIe with one copy
 *    engine per direction: all H2D copies of the device, from every stream,
 *    share the H2D lane and run one after another in the order they reach
 *    it; D2H copies share the D2H lane; an H2D and a D2H copy overlap.
 *  - A copy reaches its lane when its stream's worker starts it (stream order
 *    first, as on a GPU). Its slot starts at max(now, lane busy-until) and
 *    ends B / gbps seconds later (busy-until is one device-wide timestamp per
 *    direction, under a mutex); the worker does the memcpy, then sleeps until
 *    the slot ends (CLOCK_MONOTONIC), then reports the copy complete. A
 *    memcpy slower than its slot is not charged extra: the link never makes
 *    a copy faster than memcpy.
 *  - D2D, H2H copies and memsets are not throttled (they do not cross the link).
 * GB/s means 1e9 bytes per second.
 */

/*
 * Traffic over the emulated link since zo_device_create(), per direction.
 * The cuda backend keeps the byte and copy counts too (counted when a copy is
 * enqueued, zo_memcpy() included), with gbps and the busy/stall times 0: its
 * link is real and not timed here.
 */
typedef struct zo_link_stats {
  double gbps; /* current setting; 0 = unlimited */
  /* bytes of completed-or-running H2D copies (counted when started) */
  unsigned long long h2d_bytes;
  unsigned long long d2h_bytes;              /* same for D2H */
  unsigned long long h2d_copies, d2h_copies; /* copy counts */
  double h2d_busy_s, d2h_busy_s;             /* sum of slot lengths B / gbps (0 while unlimited) */
  double h2d_stall_s, d2h_stall_s; /* time copies waited for the lane held by earlier copies */
} zo_link_stats;

/*
 * zo_device_set_link_gbps() - set the emulated host-device link bandwidth of
 * @dev in GB/s (1e9 bytes/s) per direction; 0 = unlimited (the default).
 * Applies to copies that start after the call; a copy already running keeps
 * its slot. While a stop is requested (zo_request_stop(), zoffload/status.h;
 * a sleeping copy looks every ZO_STOP_POLL_MS) the link is not emulated:
 * copies take memory speed, bytes unchanged, so a step in progress ends at
 * once and correctly. Thread-safe. Returns ZO_OK; ZO_ERR_INVALID_ARG (NULL @dev, @gbps
 * negative, NaN or above 1e9); ZO_ERR_UNSUPPORTED for a backend with a real
 * link (CUDA).
 */
ZO_API zo_status zo_device_set_link_gbps(zo_device_t *dev, double gbps);

/*
 * zo_device_link_stats() - snapshot of @dev's link traffic into @out (zeroed
 * first). Counters are cumulative and never reset; take differences around
 * the interval of interest. Thread-safe. Returns ZO_OK; ZO_ERR_INVALID_ARG
 * (NULL @dev or @out); ZO_ERR_UNSUPPORTED when the backend keeps no counters
 * (both backends keep them).
 */
ZO_API zo_status zo_device_link_stats(const zo_device_t *dev, zo_link_stats *out);

/* ---------------------------------------------------------------- sync copy */

/*
 * zo_memcpy() - synchronous copy on no stream: returns when the bytes are at
 * @dst. Same pointer rules as zo_memcpy_async(). Unlike cudaMemcpy on the
 * legacy default stream it does NOT wait for other streams: synchronize
 * first when queued work touches the same memory (CUDA: it runs on a private
 * non-blocking stream of the device). Thread-safe.
 * Returns ZO_OK, ZO_ERR_INVALID_ARG, or ZO_ERR_CUDA.
 */
ZO_API zo_status zo_memcpy(zo_device_t *dev, void *dst, const void *src, size_t nbytes,
                           zo_copy_kind kind);

/* zo_copy_kind_name() - "H2D", "D2H", "D2D", "H2H", or "?" for unknown values. */
ZO_API const char *zo_copy_kind_name(zo_copy_kind kind);

#ifdef __cplusplus
}
#endif
#endif /* ZOFFLOAD_DEVICE_H */
