/*
 * engine_accum.c - gradient accumulation over micro-batches (zo_engine_grad_accumulate's staging) and the bounded
 * gradient path: each contribution leaves the caller's buffer through a ring of pinned staging buckets and is
 * cast or added into the host gradient shard p->grad in the accumulation dtype (fp32 when
 * gradient_accumulation_steps > 1, as DeepSpeed stage 1/2 accumulate the partition in fp32;
 * data_types.grad_accum_dtype overrides). Several ranks reduce each micro-batch
 * through engine_dp.c's ring instead and add there (red_land). Device Adam (offload_optimizer "none" on a GPU)
 * adds on the device instead, with a kernel, into its device gradient shard (eng_acc_device). With
 * offload_optimizer "nvme" every hand-over
 * goes through one bucket, chunk by chunk, to grad.swp (engine_gradnv.c). Not here: the public hand-over calls and the single
 * hand-over's direct copy (engine_grad.c), the landed work (engine_adam.c).
 */
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>

#include "engine_internal.h"
#include "half.h"
#include "nvtx.h"

/* The chunk a bucket carries: shard elements [off, off + n) of p, in dtype, added (or cast) into
 * p->grad. */
typedef struct acc_chunk {
  zo_param_t *p;
  size_t off, n;
  zo_dtype dtype;
  int add;
  int b; /* its bucket: the ring at b * bucket_el */
  void *bucket;
  /* 1 from enqueue until its host function has queued the add (the copy stream's thread stores
   * 0) */
  atomic_int queued;
  /* the add on the Adam pool, from that host function until acc_reclaim() waits for it */
  zo_adam_task_t *task;
  zo_status st; /* the host function's failure to queue it */
} acc_chunk;

/* The part's state (e->acc), from create to destroy. */
struct eng_acc {
  int n_accum;   /* tensors with accumulated contributions in this step (checkpoint save refuses) */
  host_buf ring; /* one rank, ok: nb pinned buckets of bucket_el fp32 */
  size_t bucket_el;
  int nb, next;
  acc_chunk *chunks; /* one descriptor per chunk of every shard (p->acc_chunks points into it) */
  size_t n_chunks;
  acc_chunk *last[2]; /* per bucket: the chunk staged through it last (its add reads the bucket) */
  /* per bucket: recorded behind that chunk's host function (it has queued the add) */
  zo_event_t *ev[2];
};

zo_status eng_acc_create(zo_engine_t *e) {
  const zo_config_t *c = &e->cfg;
  e->acc = calloc(1, sizeof *e->acc);
  if (!e->acc) return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "engine: out of host memory");
  /* fp32 with accumulation on every tier (DeepSpeed's default grad_accum_dtype under bf16), so every tier sums
   * micro-batches to the same bits; data_types.grad_accum_dtype overrides (e.g. "bf16" to halve the device
   * bytes of offload_optimizer "none") */
  if (c->grad_accum_dtype >= 0)
    e->adtype = (zo_dtype)c->grad_accum_dtype;
  else
    e->adtype = c->gradient_accumulation_steps > 1 ? ZO_DTYPE_F32 : e->gdtype;
  return ZO_OK;
}

int eng_acc_pending(const struct eng_acc *a) { return a->n_accum; }

void eng_acc_note(struct eng_acc *a, zo_param_t *p) {
  if (p->n_acc++ == 0) a->n_accum++;
}

void eng_acc_end_step(struct eng_acc *a) { a->n_accum = 0; }

size_t eng_acc_host_mem(const struct eng_acc *a, size_t *host_bytes, size_t *pinned_bytes) {
  if (!a) return 0;
  *host_bytes += a->ring.nbytes;
  if (a->ring.pinned) *pinned_bytes += a->ring.nbytes;
  return a->ring.nbytes;
}

/* Descriptors: one per bucket-sized chunk of every shard, so a chunk's add reads its own while later chunks
 * are queued behind it (the buckets themselves are reused in copy-stream order: no host wait). */
static zo_status acc_alloc_chunks(zo_engine_t *e) {
  struct eng_acc *a = e->acc;
  size_t total = 0;
  for (int i = 0; i < e->n_params; i++)
    total += (e->params[i]->shard_n + a->bucket_el - 1) / a->bucket_el;
  a->chunks = calloc(total ? total : 1, sizeof *a->chunks);
  if (!a->chunks)
    return zo_error_set(ZO_ERR_OUT_OF_MEMORY,
                        "engine: out of host memory for %zu gradient chunk descriptors", total);
  a->n_chunks = total;
  for (int b = 0; b < a->nb; b++) ZO_CHECK(zo_event_create(e->dev, &a->ev[b]));
  for (int i = 0, k = 0; i < e->n_params; i++) {
    zo_param_t *p = e->params[i];
    p->acc_chunks = &a->chunks[k];
    for (size_t off = 0; off < p->shard_n; off += a->bucket_el, k++) {
      acc_chunk *c = &a->chunks[k];
      c->p = p, c->off = off;
      c->n = p->shard_n - off < a->bucket_el ? p->shard_n - off : a->bucket_el;
      atomic_init(&c->queued, 0);
    }
  }
  return ZO_OK;
}

/* cpu, none: every shard's norm partials (eng_grad_landed's task), one per ENG_NORM_CHUNK
 * elements. */
static zo_status acc_alloc_norm_parts(zo_engine_t *e) {
  if (e->tier == ZO_OFFLOAD_NVME)
    return ZO_OK; /* the norm is taken on the way to grad.swp (engine_gradnv.c) */
  size_t total = 0;
  for (int i = 0; i < e->n_params; i++)
    total += (e->params[i]->shard_n + ENG_NORM_CHUNK - 1) / ENG_NORM_CHUNK;
  e->norm_parts = calloc(total ? total : 1, sizeof *e->norm_parts);
  if (!e->norm_parts)
    return zo_error_set(ZO_ERR_OUT_OF_MEMORY,
                        "engine: out of host memory for %zu gradient norm partials", total);
  for (int i = 0, k = 0; i < e->n_params; i++) {
    e->params[i]->norm_part = &e->norm_parts[k];
    k += (int)((e->params[i]->shard_n + ENG_NORM_CHUNK - 1) / ENG_NORM_CHUNK);
  }
  return ZO_OK;
}

zo_status eng_acc_alloc(zo_engine_t *e, size_t bytes) {
  ZO_CHECK(zo_event_create(e->dev, &e->grad_read));
  ZO_CHECK(acc_alloc_norm_parts(e));
  int nb;
  eng_acc_ring_shape(e, eng_device_adam(e), &e->acc->bucket_el, &nb);
  if (!nb) return ZO_OK;
  ZO_CHECK(eng_host_buf_alloc_as(e, &e->acc->ring, "grad_staging", bytes, 1));
  e->acc->nb = nb;
  if (e->tier == ZO_OFFLOAD_NVME) return ZO_OK; /* staged synchronously: no chunk descriptors */
  return acc_alloc_chunks(e);
}

void eng_acc_free(zo_engine_t *e) {
  struct eng_acc *a = e->acc;
  if (a) {
    free(a->chunks);
    for (int b = 0; b < a->nb; b++) zo_event_destroy(a->ev[b]);
  }
  free(e->norm_parts);
  e->norm_parts = NULL;
  if (a) eng_host_buf_free(&a->ring);
  zo_event_destroy(e->grad_read);
  e->grad_read = NULL;
  free(a);
  e->acc = NULL;
}

/* Pool task: elements [b, end) of chunk c's bucket added (or cast) into p->grad. Element-wise: any split gives
 * the bits of one pass. */
static void acc_add_range(void *arg, size_t b, size_t end, int thread) {
  (void)thread;
  acc_chunk *c = arg;
  const zo_dtype at = c->p->eng->adtype;
  eng_acc_add((char *)c->p->grad + (c->off + b) * zo_dtype_size(at), at,
              (const char *)c->bucket + b * zo_dtype_size(c->dtype), c->dtype, end - b, c->add);
}

/* Runs on the copy stream's thread (a host function) once a chunk's copy has landed in its bucket: queues the
 * add on the Adam pool and returns, O(1) and no CUDA call (host functions of a stream share one driver thread;
 * an add here would hold up the stream's later copies). Urgent: ahead of queued Adam updates; in queue order
 * among themselves, so the micro-batches' adds into one chunk, and the norm behind them (eng_grad_landed), run
 * in hand-over order. The bucket is copied into again only after acc_reclaim() has waited for the add. */
static void acc_chunk_landed(void *arg) {
  acc_chunk *c = arg;
  c->st = zo_adam_pool_submit_for(c->p->eng->pool, acc_add_range, c, c->n, 0, ZO_ADAM_TASK_URGENT,
                                  &c->task);
  atomic_store_explicit(&c->queued, 0, memory_order_release);
}

/* Chunk c's add has run (its task waited for: c->task is free again, and so is its bucket). Its host function
 * may not have run yet: then wait for the event behind it (its bucket has not been reused since: that would
 * have reclaimed c). */
static zo_status acc_reclaim(struct eng_acc *a, acc_chunk *c) {
  if (atomic_load_explicit(&c->queued, memory_order_acquire))
    ZO_CHECK(zo_event_synchronize(a->ev[c->b]));
  zo_status st = c->st;
  c->st = ZO_OK;
  if (c->task) {
    zo_status s2 = zo_adam_task_wait(c->task, NULL);
    c->task = NULL;
    if (st == ZO_OK) st = s2;
  }
  if (st != ZO_OK)
    return zo_error_prefix(st, "gradient of '%s' [%zu, %zu): add on the Adam pool", c->p->name,
                           c->off, c->off + c->n);
  return ZO_OK;
}

zo_status eng_acc_drain(struct eng_acc *a) {
  zo_status first = ZO_OK;
  for (size_t k = 0; k < a->n_chunks; k++) {
    zo_status st = acc_reclaim(a, &a->chunks[k]);
    if (first == ZO_OK) first = st;
  }
  return first;
}

/* Chunk @k of @p, free again (the add of the same chunk of the previous micro-batch has run), with the next
 * bucket of the ring, free again too (the add of the chunk staged through it last has read it). Either nearly
 * always has; else this waits for it. */
static zo_status acc_take_chunk(zo_engine_t *e, zo_param_t *p, size_t k, acc_chunk **out) {
  struct eng_acc *a = e->acc;
  acc_chunk *c = &p->acc_chunks[k];
  ZO_CHECK(acc_reclaim(a, c));
  const int b = a->next;
  if (a->last[b]) ZO_CHECK(acc_reclaim(a, a->last[b]));
  a->last[b] = c;
  c->b = b;
  c->bucket = (char *)a->ring.ptr + (size_t)b * a->bucket_el * eng_acc_in_size(e);
  a->next = (a->next + 1) % a->nb;
  *out = c;
  return ZO_OK;
}

/* offload_optimizer "nvme": each chunk copied into the bucket, then (on this thread, once the copy has landed)
 * written to grad.swp or added there (engine_gradnv.c); the final contribution's norm on the way. */
static zo_status acc_stage_nvme(zo_engine_t *e, zo_param_t *p, const char *src, zo_dtype dtype,
                                int last) {
  const size_t gsz = zo_dtype_size(dtype);
  const int add = p->n_acc > 0;
  if (last) p->sqnorm = 0.0;
  zo_status st = ZO_OK;
  const struct eng_acc *a = e->acc;
  for (size_t off = 0; off < p->shard_n && st == ZO_OK; off += a->bucket_el) {
    const size_t n = p->shard_n - off < a->bucket_el ? p->shard_n - off : a->bucket_el;
    ZO_CHECK(zo_memcpy_async(e->copy_stream, a->ring.ptr, src + off * gsz, n * gsz, ZO_COPY_D2H));
    ZO_CHECK(
        zo_event_record(e->grad_read, e->copy_stream)); /* the caller's buffer is read up to here */
    e->grad_read_set = 1;
    e->ctr.d2h_bytes += n * gsz;
    ZO_CHECK(zo_event_synchronize(e->grad_read));
    st = eng_gnv_put(e, p, off, n, a->ring.ptr, dtype, add, last);
  }
  if (last) return eng_gnv_land(e, p, st); /* lands once its writes are on disk */
  return st;
}

zo_status eng_acc_stage(zo_engine_t *e, zo_param_t *p, const void *grad, zo_dtype dtype, int last) {
  if (!e->acc->nb)
    return zo_error_set(ZO_ERR_INVALID_USAGE,
                        "gradient of '%s': no staging ring (a bug: sized at finalize)", p->name);
  const size_t gsz = zo_dtype_size(dtype);
  const char *src = (const char *)grad + p->shard_off * gsz;
  if (e->tier == ZO_OFFLOAD_NVME) return acc_stage_nvme(e, p, src, dtype, last);
  const int add = p->n_acc > 0;
  for (size_t k = 0; k * e->acc->bucket_el < p->shard_n; k++) {
    acc_chunk *c;
    ZO_CHECK(acc_take_chunk(e, p, k, &c));
    c->dtype = dtype, c->add = add;
    ZO_CHECK(
        zo_memcpy_async(e->copy_stream, c->bucket, src + c->off * gsz, c->n * gsz, ZO_COPY_D2H));
    ZO_CHECK(
        zo_event_record(e->grad_read, e->copy_stream)); /* the caller's buffer is read up to here */
    e->grad_read_set = 1;
    e->ctr.d2h_bytes += c->n * gsz;
    atomic_store_explicit(&c->queued, 1, memory_order_relaxed);
    ZO_CHECK(zo_launch_host_func(e->copy_stream, acc_chunk_landed, c));
    ZO_CHECK(zo_event_record(e->acc->ev[c->b], e->copy_stream)); /* acc_reclaim */
  }
  if (last) ZO_CHECK(zo_launch_host_func(e->copy_stream, eng_grad_landed, p));
  return ZO_OK;
}

zo_status eng_acc_device(zo_engine_t *e, zo_param_t *p, const void *grad, zo_dtype dtype) {
  const size_t gsz = zo_dtype_size(dtype);
  const char *src = (const char *)grad + p->shard_off * gsz;
  const int add = p->n_acc > 0;
  if (!p->shard_n) return ZO_OK;
  /* the first contribution, already in the accumulation dtype: a plain copy */
  if (!add && dtype == e->adtype) {
    ZO_CHECK(zo_memcpy_async(e->copy_stream, p->grad, src, p->shard_n * gsz, ZO_COPY_D2D));
  } else {
    zo_status st =
        zo_grad_acc_device(e->copy_stream, p->grad, e->adtype, src, dtype, p->shard_n, add);
    if (st != ZO_OK) return zo_error_prefix(st, "gradient of '%s'", p->name);
  }
  ZO_CHECK(
      zo_event_record(e->grad_read, e->copy_stream)); /* the caller's buffer is read up to here */
  e->grad_read_set = 1;
  return ZO_OK;
}

zo_status eng_acc_check(const zo_engine_t *e, const zo_param_t *p, const void *grad, zo_dtype dtype,
                        const char *what, int reopened_ok) {
  if (!e || !p || !grad) return zo_error_set(ZO_ERR_INVALID_ARG, "%s: NULL argument", what);
  if (p->eng != e)
    return zo_error_set(ZO_ERR_INVALID_ARG, "%s '%s': a tensor of another engine", what, p->name);
  if (!e->finalized)
    return zo_error_set(ZO_ERR_INVALID_USAGE, "%s '%s': engine not finalized", what, p->name);
  if (dtype != e->gdtype && !(dtype == ZO_DTYPE_F32 && eng_acc_ok(e)))
    return zo_error_set(ZO_ERR_INVALID_ARG,
                        "%s '%s': gradient dtype %s, expected %s (zo_engine_grad_dtype)%s", what,
                        p->name, zo_dtype_name(dtype), zo_dtype_name(e->gdtype),
                        eng_acc_ok(e) && e->gdtype != ZO_DTYPE_F32 ? " or fp32"
                        : dtype == ZO_DTYPE_F32
                            ? " (fp32 is accepted with gradient_accumulation_steps > 1 or "
                              "data_types.grad_accum_dtype set)"
                            : "");
  if (p->has_grad && !(reopened_ok && p->reopen))
    return zo_error_set(
        ZO_ERR_INVALID_USAGE,
        "%s '%s': gradient already handed over in this step "
        "(zo_engine_grad_ready was called; the next contribution belongs to the next step)",
        what, p->name);
  return ZO_OK;
}

/* The compute queued so far produced the gradient: the copy stream waits for it. */
zo_status eng_acc_after_compute(zo_engine_t *e) {
  if (!e->compute_stream) return ZO_OK;
  ZO_CHECK(zo_event_record(e->compute_mark, e->compute_stream));
  return zo_stream_wait_event(e->copy_stream, e->compute_mark);
}
