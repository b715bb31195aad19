/*
 * handover.c - the gradient hand-over space (zoffload/handover.h): where each gradient goes in the caller's
 * bounded space, one fence when the next does not fit, grad_ready or grad_accumulate. Bookkeeping over the
 * public engine API only; not the engine's own staging (engine_accum.c, engine_dp.c).
 */
#include <stdlib.h>

#include "base_internal.h"
#include "zoffload/handover.h"

struct zo_grad_handover {
  zo_engine_t *eng;    /* borrowed */
  zo_stream_t *stream; /* the fence's stream, or NULL: the fence blocks (borrowed) */
  size_t capacity;     /* bytes; 0 unbounded */
  size_t align;        /* a power of two, 1 to 4096 */
  size_t head;         /* the next free offset, a multiple of align */
};

zo_status zo_grad_handover_create(zo_engine_t *e, size_t capacity_bytes, size_t align_bytes,
                                  zo_stream_t *fence_stream, zo_grad_handover_t **out) {
  if (out) *out = NULL;
  if (!e || !out)
    return zo_error_set(ZO_ERR_INVALID_ARG, "grad_handover_create: NULL %s", e ? "out" : "engine");
  if (align_bytes == 0) align_bytes = ZO_GRAD_HANDOVER_ALIGN;
  if (align_bytes > 4096 || (align_bytes & (align_bytes - 1)))
    return zo_error_set(ZO_ERR_INVALID_ARG,
                        "grad_handover_create: alignment %zu bytes is not a power of two from 1 "
                        "to 4096",
                        align_bytes);
  zo_grad_handover_t *h = calloc(1, sizeof *h);
  if (!h) return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "grad_handover_create: out of host memory");
  h->eng = e;
  h->stream = fence_stream;
  h->capacity = capacity_bytes;
  h->align = align_bytes;
  *out = h;
  return ZO_OK;
}

void zo_grad_handover_destroy(zo_grad_handover_t *h) { free(h); }

zo_status zo_grad_handover_fence(zo_grad_handover_t *h) {
  if (!h) return zo_error_set(ZO_ERR_INVALID_ARG, "grad_handover_fence: NULL hand-over");
  const zo_status st = zo_engine_grad_fence(h->eng, h->stream);
  if (st == ZO_OK) h->head = 0;
  return st;
}

zo_status zo_grad_handover_reserve(zo_grad_handover_t *h, size_t nbytes, size_t *offset,
                                   int *fenced) {
  if (fenced) *fenced = 0;
  if (!h || !offset)
    return zo_error_set(ZO_ERR_INVALID_ARG, "grad_handover_reserve: NULL %s",
                        h ? "offset" : "hand-over");
  if (h->capacity && nbytes > h->capacity)
    return zo_error_set(ZO_ERR_INVALID_ARG,
                        "grad_handover_reserve: a gradient of %zu bytes cannot fit in the "
                        "hand-over space of %zu bytes",
                        nbytes, h->capacity);
  size_t padded, end, next;
  if (zo_size_round_up(nbytes, h->align, &padded))
    return zo_error_set(ZO_ERR_INVALID_ARG, "grad_handover_reserve: %zu bytes overflow size_t",
                        nbytes);
  if (h->capacity && (zo_size_add(h->head, nbytes, &end) || end > h->capacity)) {
    /* everything handed over is read: the whole space is free */
    const zo_status st = zo_grad_handover_fence(h);
    if (st != ZO_OK) return st;
    if (fenced) *fenced = 1;
  }
  if (zo_size_add(h->head, padded, &next))
    return zo_error_set(ZO_ERR_INVALID_ARG,
                        "grad_handover_reserve: %zu bytes past the %zu in use overflow size_t",
                        nbytes, h->head);
  *offset = h->head;
  h->head = next;
  return ZO_OK;
}

zo_status zo_grad_handover_put(zo_grad_handover_t *h, zo_param_t *p, const void *grad,
                               zo_dtype grad_dtype, int last) {
  if (!h) return zo_error_set(ZO_ERR_INVALID_ARG, "grad_handover_put: NULL hand-over");
  return last ? zo_engine_grad_ready(h->eng, p, grad, grad_dtype)
              : zo_engine_grad_accumulate(h->eng, p, grad, grad_dtype);
}

void zo_grad_handover_reset(zo_grad_handover_t *h) {
  if (h) h->head = 0;
}

size_t zo_grad_handover_used(const zo_grad_handover_t *h) { return h ? h->head : 0; }
