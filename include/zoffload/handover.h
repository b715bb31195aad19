/*
 * zoffload/handover.h - the gradient hand-over space of a training front: a
 * bounded space of the caller's memory (a ring in device memory, or bytes of
 * gradient tensors the caller keeps alive) through which gradients go to the
 * engine, one zo_engine_grad_fence() per space's worth instead of one per
 * tensor. It does the bookkeeping only: the caller owns the memory, writes
 * each gradient at the offset it is given and frees what it kept when told
 * a fence was made. Not a memory allocator, and no part of the engine's own
 * pipeline (it calls the public engine API alone: zo_engine_grad_ready(),
 * zo_engine_grad_accumulate(), zo_engine_grad_fence()).
 *
 * Use, per gradient of a micro-batch:
 *   zo_grad_handover_reserve(h, nbytes, &off, &fenced)  the place of its bytes
 *                                (fenced: everything handed over before has
 *                                been read; the whole space is free again)
 *   write the gradient at base + off (cast, copy)
 *   zo_grad_handover_put(h, p, base + off, dtype, last)  grad_ready in the last
 *                                micro-batch of the step, else grad_accumulate
 * and zo_grad_handover_fence() where the caller needs its buffers back (the
 * end of a backward), zo_grad_handover_reset() after zo_engine_step().
 *
 * Thread-safety: a hand-over is driven by the thread that drives its engine,
 * one call at a time (as the engine, zoffload/engine.h).
 */
#ifndef ZOFFLOAD_HANDOVER_H
#define ZOFFLOAD_HANDOVER_H

#include <stddef.h>

#include "zoffload/device.h"
#include "zoffload/dtype.h"
#include "zoffload/engine.h"
#include "zoffload/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zo_grad_handover zo_grad_handover_t;

/* ZO_GRAD_HANDOVER_ALIGN - the default alignment of each reservation's start, in bytes (a cache line; also what
 * zo_cast()'s vector paths read best). */
#define ZO_GRAD_HANDOVER_ALIGN 64

/*
 * zo_grad_handover_create() - a hand-over space for engine @e.
 * @e:              the engine the gradients go to (borrowed: it must outlive the
 *                  hand-over). Finalized or not: nothing is called on it here.
 * @capacity_bytes: the space's bytes; a reservation fits when its offset plus
 *                  its bytes is at most this. 0: unbounded (reservations never
 *                  fence; only zo_grad_handover_fence() frees the space).
 * @align_bytes:    each reservation starts at a multiple of this many bytes
 *                  from the space's start (its bytes rounded up to it): a power
 *                  of two from 1 to 4096; 0 means ZO_GRAD_HANDOVER_ALIGN. 1 when
 *                  the space only counts bytes kept elsewhere (a framework's
 *                  tensors), so no padding is counted.
 * @fence_stream:   the stream zo_engine_grad_fence() is given (a stream of
 *                  @e's device, the caller's compute stream: the fence is then
 *                  ordered on it and returns at once), or NULL (the fence
 *                  blocks the calling thread). Borrowed.
 * @out:            the new hand-over, its space empty.
 * Returns ZO_OK; ZO_ERR_INVALID_ARG (NULL @e or @out, @align_bytes not a
 * power of two or above 4096: named); ZO_ERR_OUT_OF_MEMORY (host memory for
 * the handle). On an error *@out is NULL.
 */
ZO_API zo_status zo_grad_handover_create(zo_engine_t *e, size_t capacity_bytes, size_t align_bytes,
                                         zo_stream_t *fence_stream, zo_grad_handover_t **out);

/* zo_grad_handover_destroy() - free @h (no fence: the caller fences first if it frees its memory). NULL ok. */
ZO_API void zo_grad_handover_destroy(zo_grad_handover_t *h);

/*
 * zo_grad_handover_reserve() - the place of a gradient of @nbytes bytes in
 * the space: *@offset, in bytes from the space's start, a multiple of the
 * alignment. It fits when the space's next free offset plus @nbytes is at
 * most the capacity; the next reservation then starts @nbytes rounded up to
 * the alignment further on. When it does not fit, the hand-over first calls
 * zo_engine_grad_fence() on its stream (every gradient handed over so far
 * has been read out of the caller's memory, for the work that follows on
 * that stream, or for the calling thread when it is NULL), the whole space is
 * free again and the reservation starts at offset 0; *@fenced says so (1),
 * so the caller can release what it kept alive for the engine; else 0.
 * @fenced may be NULL. @nbytes 0 is a reservation of nothing at the next
 * free offset. Synchronous (the fence's own waiting as zo_engine_grad_fence()).
 * Returns ZO_OK; ZO_ERR_INVALID_ARG (NULL @h or @offset; @nbytes above the
 * capacity, both named: it would never fit; an unbounded space whose offsets
 * pass SIZE_MAX); or the fence's error (ZO_ERR_INVALID_USAGE before
 * zo_engine_finalize(), the device's error). On an error nothing is reserved
 * and the space is as before (after a failed fence the gradients handed over
 * may still be read: keep their memory).
 */
ZO_API zo_status zo_grad_handover_reserve(zo_grad_handover_t *h, size_t nbytes, size_t *offset,
                                          int *fenced);

/*
 * zo_grad_handover_put() - hand one micro-batch's gradient of @p over:
 * zo_engine_grad_ready() when @last (the last micro-batch of the optimizer
 * step), else zo_engine_grad_accumulate(). @grad, @grad_dtype: as those calls
 * take them (device memory, the whole tensor; usually the reservation's place
 * in the space, but any buffer the caller keeps until the next fence). Returns
 * when the engine call returns (the copy out of @grad enqueued); @grad is read
 * until the next fence (zo_grad_handover_reserve() that reports one, or
 * zo_grad_handover_fence()) or zo_engine_step(). Returns ZO_OK;
 * ZO_ERR_INVALID_ARG (NULL @h); or the engine call's own status and message
 * (zoffload/engine.h: ZO_ERR_INVALID_ARG for a tensor of another engine or a
 * dtype not accepted, ZO_ERR_INVALID_USAGE for grad_ready twice in a step or an
 * accumulation with nothing to accumulate into, the copy's device error).
 */
ZO_API zo_status zo_grad_handover_put(zo_grad_handover_t *h, zo_param_t *p, const void *grad,
                                      zo_dtype grad_dtype, int last);

/*
 * zo_grad_handover_fence() - zo_engine_grad_fence() on the hand-over's stream
 * now: every gradient handed over so far has been read (for the work that
 * follows on that stream, or for the calling thread when it is NULL); the
 * whole space is free again (the next reservation starts at offset 0).
 * Returns ZO_OK; ZO_ERR_INVALID_ARG (NULL @h); or the fence's error
 * (ZO_ERR_INVALID_USAGE before zo_engine_finalize(), the device's error), the
 * space then unchanged.
 */
ZO_API zo_status zo_grad_handover_fence(zo_grad_handover_t *h);

/*
 * zo_grad_handover_reset() - the whole space is free again without a fence:
 * for after zo_engine_step(), which has read every gradient handed over
 * (zoffload/engine.h: the buffers are the caller's again). NULL ok.
 */
ZO_API void zo_grad_handover_reset(zo_grad_handover_t *h);

/*
 * zo_grad_handover_used() - the bytes of the space in use: the next free
 * offset (0 right after a fence or reset). 0 for NULL.
 */
ZO_API size_t zo_grad_handover_used(const zo_grad_handover_t *h);

#ifdef __cplusplus
}
#endif

#endif /* ZOFFLOAD_HANDOVER_H */
