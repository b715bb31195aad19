/*
 * engine_dp.c - the engine on several data-parallel ranks (ZeRO stages 0-2,
 * parameters resident on the device): each tensor is split in world blocks
 * of part_n = ceil(n / world) elements (the last rank's block padded with
 * zeros, never dropped), and rank r owns block r's master weights and Adam
 * state (stage >= 1). Per step:
 *   gradients  the whole tensor, copied to a host buffer padded to
 *              part_n x world, is summed over the ranks: reduce-scatter into
 *              the rank's block (stage 1-2), all-reduce of the whole tensor
 *              (stage 0, where every rank updates everything). The engine
 *              divides by world inside Adam (the mean, as DeepSpeed), and
 *              the global norm and the fp16 overflow verdict are all-reduced
 *              (engine_step.c), so every rank clips and skips alike.
 *   weights    after Adam, every rank's block of the new working weights is
 *              all-gathered in place in a padded host buffer and the whole
 *              tensor uploaded to the device copy.
 * Device Adam (offload_optimizer "none" on a GPU) goes the same way through
 * host buffers: the reduced block is uploaded and cast or added into the
 * device gradient shard by a kernel, and the rank's new working block is
 * copied down for the all-gather.
 * Collectives go through zo_comm_t. On the nccl backend (eng_dp_dev) both
 * rings are regions of the device block instead and nothing whole crosses
 * PCIe: the gradient is copied device to device into the reduction ring
 * (widened to fp32 when the accumulation is fp32, so the sum over ranks is
 * rounded as one rank's accumulation), reduce-scattered there by NCCL on the
 * communicator's stream, and the rank's block is added into the device
 * gradient shard (device Adam) or copied down, 1/world of the tensor, into
 * the pinned "dp_land" buffer for the offloaded optimizer; after Adam the
 * rank's new block is copied (device Adam) or uploaded (1/world) into the
 * device gather buffer, all-gathered there, and copied device to device into
 * the working weights. On the mpi backend the rings are pinned host buffers
 * and whole tensors go down and up. With
 * zero_optimization.overlap_comm each reduction is started as soon as its
 * gradient's copy has landed and completes while backward goes on: they
 * wait, oldest first, in a ring of reduce_bucket_size elements, moved on at
 * every engine call (fetch, release, grad_ready) and finished at
 * zo_engine_step(); time blocked waiting for one is the exposed
 * communication (zo_step_info.comm_s). Without overlap_comm each reduction
 * completes inside its grad_ready(). Stage 3's parameter gathers are
 * engine_dp3.c's. Source: Rajbhandari et al., "ZeRO: Memory Optimizations
 * Toward Training Trillion Parameter Models" (SC'20), sections 5.1-5.2.
 * Delayed parameter update (stages 1-2): the all-gather of a step's update
 * happens when it is published, at the next zo_engine_step(), on every rank
 * at the same call (engine_step.c dpu_publish).
 */
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"

/* One gradient reduction in flight, in a region of the reduction buffer (eng_dp.grad). */
typedef struct dp_red {
  zo_param_t *p;
  zo_dtype dtype;     /* of the hand-over (and of the reduction) */
  int add;            /* add into p->grad (earlier contributions of this step), else overwrite */
  int last;           /* zo_engine_grad_ready(): the landed work follows */
  size_t off;         /* region of the reduction buffer */
  zo_event_t *copied; /* the device-to-host copy of the gradient into the region */
  zo_comm_req_t *req; /* the reduce-scatter (all-reduce at stage 0), once started */
} dp_red;

/* The part's state (e->dp), several ranks, from finalize to destroy. */
struct eng_dp {
  /* host collectives: the whole gradient of one tensor, padded, reduced in place; every tensor's working weights,
   * padded, all-gathered in place */
  host_buf grad, gather;
  /* device collectives (eng_dp_dev): the same two in the device block instead, and where a rank's reduced block
   * lands on the host for an offloaded optimizer */
  int dev;
  host_buf land;
  zo_event_t
      *gathered; /* device collectives: a rank's new block is in the gather buffer (copy stream) */
  /* the two in use: grad.ptr and gather.ptr, or the device block's regions */
  char *red, *gat;
  size_t red_nbytes, gather_nbytes;
  dp_red *q; /* reductions in flight, oldest first: circular (n_params entries), q_n from q_first */
  int q_first, q_n;
  size_t head; /* next free byte of grad (a ring: regions are freed oldest first) */
};

zo_status eng_dp_check(const zo_engine_t *e) {
  /* stage 3 with offload_param "none": refused on a GPU by zo_engine_check_device (a dry run plans by it too) */
  /* stages 1-2: the last step's update is all-gathered when it is published, at the next step (engine_step.c) */
  if (e->dpu && e->cfg.zero.stage == 3)
    return zo_error_set(
        ZO_ERR_UNSUPPORTED,
        "zoffload.delayed_param_update with zero_optimization.stage 3 on %d ranks is "
        "not built; use stage 1 or 2, or set it to false",
        e->world);
  if (e->cfg.zero.stage == 0 && e->tier != ZO_OFFLOAD_NONE)
    return zo_error_set(ZO_ERR_CONFIG,
                        "zero_optimization.stage 0 with offload_optimizer.device \"%s\": offload "
                        "needs stage 1 or more",
                        zo_offload_device_name(e->tier));
  return ZO_OK;
}

/* Elements one reduction of @p moves: the tensor padded to world blocks (the whole tensor at stage 0). */
static size_t red_elems(const zo_engine_t *e, const zo_param_t *p) {
  return e->cfg.zero.stage == 0 ? p->n : eng_dp_padded(e, p);
}

zo_status eng_dp_agree(zo_engine_t *e, zo_status mine, const char *what) {
  if (e->world == 1) return mine;
  double failed = mine != ZO_OK;
  zo_status st = zo_comm_all_reduce_f64(e->comm, &failed, 1);
  if (st != ZO_OK) return zo_error_prefix(st, "%s: agreeing over the ranks", what);
  if (mine != ZO_OK) return mine;
  if (failed > 0)
    return zo_error_set(ZO_ERR_IO, "%s: %.0f other rank(s) failed (their own messages say why)",
                        what, failed);
  return ZO_OK;
}

zo_status eng_dp_from_rank0(zo_engine_t *e, zo_status st0, const char *what) {
  if (e->world == 1) return st0;
  double code = st0;
  zo_status st = zo_comm_broadcast(e->comm, &code, sizeof code, 0);
  if (st != ZO_OK) return zo_error_prefix(st, "%s: hearing rank 0", what);
  if (e->rank == 0) return st0;
  if (code == ZO_OK) return ZO_OK;
  return zo_error_set((zo_status)code, "%s: rank 0 failed (its message says why)", what);
}

zo_status eng_dp_alloc(zo_engine_t *e, const zo_plan *plan) {
  e->dp = calloc(1, sizeof *e->dp);
  if (!e->dp) return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "engine: out of host memory");
  struct eng_dp *d = e->dp;
  d->red_nbytes = plan->dp_grad_bytes, d->gather_nbytes = plan->dp_gather_bytes;
  if (plan->dp_dev_grad_off != SIZE_MAX) {
    d->dev = 1;
    eng_dp_rebase(e, plan); /* red and gat in the device block */
    ZO_CHECK(eng_host_buf_alloc_as(e, &d->land, "dp_land", plan->dp_land_bytes, 1));
    ZO_CHECK(zo_event_create(e->dev, &d->gathered));
  } else {
    ZO_CHECK(eng_host_buf_alloc_as(e, &d->grad, "dp_grad", plan->dp_grad_bytes, 1));
    ZO_CHECK(eng_host_buf_alloc_as(e, &d->gather, "dp_gather", plan->dp_gather_bytes, 1));
    d->red = d->grad.ptr, d->gat = d->gather.ptr;
  }
  d->q = calloc((size_t)e->n_params, sizeof *d->q);
  if (!d->q)
    return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "engine: out of host memory for the reduction queue");
  for (int i = 0; i < e->n_params; i++) ZO_CHECK(zo_event_create(e->dev, &d->q[i].copied));
  return ZO_OK;
}

static dp_red *q_at(const zo_engine_t *e, int i) {
  return &e->dp->q[(e->dp->q_first + i) % e->n_params];
}

void eng_dp_rebase(zo_engine_t *e, const zo_plan *plan) {
  struct eng_dp *d = e->dp;
  if (!d || !d->dev) return;
  char *b = e->dev_block;
  d->red = b ? b + plan->dp_dev_grad_off : NULL;
  d->gat = b && plan->dp_dev_gather_off != SIZE_MAX ? b + plan->dp_dev_gather_off : NULL;
}

void eng_dp_free(zo_engine_t *e) {
  struct eng_dp *d = e->dp;
  if (!d) return;
  if (d->q) {
    for (int i = 0; i < d->q_n; i++)
      zo_comm_wait(q_at(e, i)->req); /* after an error: let MPI finish them */
    for (int i = 0; i < e->n_params; i++) zo_event_destroy(d->q[i].copied);
    free(d->q);
  }
  eng_host_buf_free(&d->grad);
  eng_host_buf_free(&d->gather);
  eng_host_buf_free(&d->land);
  zo_event_destroy(d->gathered);
  free(d);
  e->dp = NULL;
}

size_t eng_dp_host_mem(const struct eng_dp *d, size_t *host_bytes, size_t *pinned_bytes) {
  if (!d) return 0;
  const host_buf *b[3] = {&d->grad, &d->gather, &d->land};
  size_t sum = 0;
  for (int i = 0; i < 3; i++) {
    *host_bytes += b[i]->nbytes, sum += b[i]->nbytes;
    if (b[i]->pinned) *pinned_bytes += b[i]->nbytes;
  }
  return sum;
}

/* The copy has landed: start the collective on the region (every rank starts them in grad_ready order). */
static zo_status red_start(zo_engine_t *e, dp_red *r) {
  const size_t gsz = zo_dtype_size(r->dtype);
  zo_param_t *p = r->p;
  char *buf = e->dp->red + r->off;
  zo_status st;
  if (e->cfg.zero.stage == 0) {
    st = zo_comm_iall_reduce(e->comm, buf, p->n, r->dtype, &r->req);
  } else {
    st = zo_comm_ireduce_scatter(e->comm, buf, buf + (size_t)e->rank * p->part_n * gsz, p->part_n,
                                 r->dtype, &r->req);
  }
  /* what a bandwidth-optimal (ring) algorithm sends from each rank: (W-1)/W of the tensor for a reduce-scatter,
   * twice that for an all-reduce (Patarasuk & Yuan 2009) */
  e->ctr.dp_bytes += (e->cfg.zero.stage == 0 ? 2 : 1) * (size_t)(e->world - 1) * p->part_n * gsz;
  if (st != ZO_OK) return zo_error_prefix(st, "gradient of '%s' over %d ranks", p->name, e->world);
  return ZO_OK;
}

/* Device Adam: this rank's reduced block @mine (host, @dt) into p->grad in device memory: uploaded straight into
 * it (the first contribution in the accumulation dtype) or into the staging region and cast or added there
 * (zo_grad_acc_device), then with @last the norm partials of the sum; all on the copy stream, which is
 * synchronized before returning because the reduction buffer's region is reused as soon as this returns. */
static zo_status red_land_device(zo_engine_t *e, zo_param_t *p, const void *mine, zo_dtype dt,
                                 int add, int last) {
  const size_t nb = p->shard_n * zo_dtype_size(dt);
  const int dev = e->dp->dev; /* @mine in device memory already: nothing crosses PCIe */
  const zo_copy_kind kind = dev ? ZO_COPY_D2D : ZO_COPY_H2D;
  if (p->shard_n && !add && dt == e->adtype) {
    ZO_CHECK(zo_memcpy_async(e->copy_stream, p->grad, mine, nb, kind));
  } else if (p->shard_n) {
    const void *src = mine;
    if (!dev) {
      ZO_CHECK(zo_memcpy_async(e->copy_stream, e->dstage_dev, mine, nb, kind));
      src = e->dstage_dev;
    }
    zo_status st = zo_grad_acc_device(e->copy_stream, p->grad, e->adtype, src, dt, p->shard_n, add);
    if (st != ZO_OK) return zo_error_prefix(st, "gradient of '%s'", p->name);
  }
  if (!dev) e->ctr.h2d_bytes += nb;
  if (last)
    ZO_CHECK(zo_grad_sqnorm_device(e->copy_stream, p->grad, e->adtype, p->shard_n,
                                   e->dnorm_dev + (size_t)p->index * ZO_DEV_SQNORM_BLOCKS));
  /* device collectives: the ring's region is next written by a copy on this stream, after this; a host region
   * may be rewritten as soon as this returns */
  return dev ? ZO_OK : zo_stream_synchronize(e->copy_stream);
}

/* The reduction is done: this rank's block into p->grad (copied, or cast and added to the micro-batches
 * accumulated before it: engine_accum.c), then, for the last contribution, the landed work (norm, early Adam). */
static zo_status red_land(zo_engine_t *e, dp_red *r) {
  const size_t gsz = zo_dtype_size(r->dtype);
  zo_param_t *p = r->p;
  const char *buf = e->dp->red + r->off;
  const char *mine = e->cfg.zero.stage == 0 ? buf : buf + (size_t)e->rank * p->part_n * gsz;
  r->req = NULL;
  e->dp->q_first = (e->dp->q_first + 1) % e->n_params;
  e->dp->q_n--;
  if (e->dp->dev && !eng_device_adam(e)) { /* the block in device memory: only it crosses PCIe */
    const size_t nb = p->shard_n * gsz;
    zo_status st = eng_dev_copy(e, e->dp->land.ptr, mine, nb, ZO_COPY_D2H);
    if (st != ZO_OK)
      return zo_error_prefix(st, "gradient of '%s': its reduced block to the host", p->name);
    e->ctr.d2h_bytes += nb;
    mine = e->dp->land.ptr;
  }
  /* p->grad: host memory (cpu), or device memory with device Adam (none), which the host never reads or writes:
   * red_land_device (test_devadam_emu_np2 and test_engine_dp_np2_fakecuda run it where a host access faults) */
  if (e->tier == ZO_OFFLOAD_NVME) { /* to grad.swp (engine_gradnv.c), the norm on the way */
    if (r->last) p->sqnorm = 0.0;
    zo_status st = eng_gnv_put(e, p, 0, p->shard_n, mine, r->dtype, r->add, r->last);
    if (r->last)
      eng_gnv_land(e, p, st);
    else if (st != ZO_OK && p->gnv_st == ZO_OK)
      p->gnv_st = st; /* reported at the step (eng_gnv_land) */
  } else if (eng_device_adam(e)) {
    /* device memory: uploaded, cast or added there, the norm behind it */
    if (!r->add) p->landed_st = ZO_OK; /* the step's first contribution */
    zo_status st = red_land_device(e, p, mine, r->dtype, r->add, r->last);
    if (st != ZO_OK && p->landed_st == ZO_OK)
      p->landed_st = st; /* reported at the step (step_grad_norm) */
  } else {
    /* a memcpy when the dtypes agree */
    eng_acc_add(p->grad, e->adtype, mine, r->dtype, p->shard_n, r->add);
    if (r->last) eng_grad_land(p, ZO_OK);
  }
  return ZO_OK;
}

zo_status eng_dp_progress(zo_engine_t *e, int wait_oldest) {
  /* start, in queue order, the reductions whose copies have landed */
  for (int i = 0; i < e->dp->q_n; i++) {
    dp_red *r = q_at(e, i);
    if (r->req) continue;
    int done = 0;
    if (i == 0 && wait_oldest) {
      ZO_CHECK(zo_event_synchronize(r->copied));
      done = 1;
    } else {
      ZO_CHECK(zo_event_query(r->copied, &done));
    }
    if (!done) break;
    ZO_CHECK(red_start(e, r));
  }
  /* land, oldest first, those that completed; the oldest waited for when asked */
  while (e->dp->q_n) {
    dp_red *r = q_at(e, 0);
    if (!r->req) break;
    int done = 0;
    zo_status st = eng_comm_finish(e, r->req, wait_oldest, &done);
    wait_oldest = 0;
    if (st != ZO_OK) {
      r->req = NULL; /* freed by wait/test */
      e->dp->q_first = (e->dp->q_first + 1) % e->n_params;
      e->dp->q_n--;
      return zo_error_prefix(st, "gradient of '%s' over %d ranks", r->p->name, e->world);
    }
    if (!done) break;
    ZO_CHECK(red_land(e, r));
  }
  return ZO_OK;
}

zo_status eng_comm_finish(zo_engine_t *e, zo_comm_req_t *req, int wait, int *done) {
  if (!wait) return zo_comm_test(req, done);
  const double t0 = zo_clock_s();
  zo_status st = zo_comm_wait(req);
  e->ctr.dp_comm_s += zo_clock_s() - t0;
  *done = 1;
  return st;
}

zo_status eng_dp_drain(zo_engine_t *e) {
  while (e->dp->q_n) ZO_CHECK(eng_dp_progress(e, 1));
  return ZO_OK;
}

zo_status eng_dp_grad(zo_engine_t *e, zo_param_t *p, const void *grad, zo_dtype dtype, int last) {
  struct eng_dp *d = e->dp;
  /* device collectives reduce in fp32 whenever the accumulation is fp32 (16-bit hand-overs widened on the way
   * into the ring: the sum over ranks is then rounded as one rank's accumulation of the same contributions) */
  const zo_dtype rdt = d->dev && e->adtype == ZO_DTYPE_F32 ? ZO_DTYPE_F32 : dtype;
  const size_t gsz = zo_dtype_size(rdt), bytes = red_elems(e, p) * gsz;
  size_t off = 0;
  while (
      d->q_n == e->n_params ||
      !eng_ring_take(d->red_nbytes, d->head, d->q_n ? q_at(e, 0)->off : 0, d->q_n, bytes, &off)) {
    /* full: the oldest must finish first */
    if (!d->q_n)
      return zo_error_set(ZO_ERR_INVALID_USAGE,
                          "engine: gradient of '%s' (%zu bytes) larger than the reduction "
                          "buffer (%zu bytes)",
                          p->name, bytes, d->red_nbytes); /* a bug: sized at finalize */
    ZO_CHECK(eng_dp_progress(e, 1));
  }
  dp_red *r = &d->q[(d->q_first + d->q_n) % e->n_params];
  r->p = p, r->off = off, r->req = NULL, r->dtype = rdt, r->add = p->n_acc > 0, r->last = last;
  char *buf = d->red + off;
  if (e->compute_stream) { /* the gradient is final once the compute queued so far is done */
    ZO_CHECK(zo_event_record(e->compute_mark, e->compute_stream));
    ZO_CHECK(zo_stream_wait_event(e->copy_stream, e->compute_mark));
  }
  if (d->dev) { /* device to device: the padding of the last block zeroed, the gradient copied or widened */
    if (bytes > p->n * gsz)
      ZO_CHECK(zo_memset_async(e->copy_stream, buf + p->n * gsz, 0, bytes - p->n * gsz));
    if (rdt == dtype) {
      ZO_CHECK(zo_memcpy_async(e->copy_stream, buf, grad, p->n * gsz, ZO_COPY_D2D));
    } else {
      zo_status st = zo_grad_acc_device(e->copy_stream, buf, rdt, grad, dtype, p->n, 0);
      if (st != ZO_OK) return zo_error_prefix(st, "gradient of '%s'", p->name);
    }
  } else {
    memset(buf + p->n * gsz, 0, bytes - p->n * gsz); /* the padding of the last block */
    ZO_CHECK(zo_memcpy_async(e->copy_stream, buf, grad, p->n * gsz, ZO_COPY_D2H));
    e->ctr.d2h_bytes += p->n * gsz;
  }
  ZO_CHECK(zo_event_record(r->copied, e->copy_stream));
  ZO_CHECK(zo_event_record(e->grad_read,
                           e->copy_stream)); /* zo_engine_grad_fence: the caller's buffer is read */
  e->grad_read_set = 1;
  d->q_n++;
  d->head = off + bytes;
  if (!e->cfg.zero.overlap_comm)
    return eng_dp_drain(e); /* one reduction at a time, done before returning */
  return eng_dp_progress(e, 0);
}

/* Start the all-gather of @p's working weights into its region of the gather buffer (at p->dp_off). */
static zo_status gather_start(zo_engine_t *e, zo_param_t *p, zo_comm_req_t **req) {
  const size_t wsz = zo_dtype_size(e->wdtype);
  struct eng_dp *d = e->dp;
  char *t = d->gat + p->dp_off * wsz, *block = t + (size_t)e->rank * p->part_n * wsz;
  if (d->dev) { /* the rank's block into device memory (copied there, or uploaded: 1/world of the tensor) */
    if (p->part_n > p->shard_n)
      ZO_CHECK(zo_memset_async(e->copy_stream, block + p->shard_n * wsz, 0,
                               (p->part_n - p->shard_n) * wsz));
    if (p->shard_n) {
      const int dadam = eng_device_adam(e);
      ZO_CHECK(zo_memcpy_async(e->copy_stream, block, eng_working_dst(e, p, 0), p->shard_n * wsz,
                               dadam ? ZO_COPY_D2D : ZO_COPY_H2D));
      if (!dadam) e->ctr.h2d_bytes += p->shard_n * wsz;
    }
    /* the collective runs on the communicator's stream, after those copies */
    ZO_CHECK(zo_event_record(d->gathered, e->copy_stream));
    ZO_CHECK(zo_stream_wait_event(zo_comm_stream(e->comm), d->gathered));
  } else {
    memset(block, 0, p->part_n * wsz); /* the padding past the tensor's end */
  }
  if (p->shard_n &&
      !d->dev) { /* device Adam: the kernel wrote it in device memory, on the copy stream */
    if (eng_device_adam(e))
      ZO_CHECK(eng_dev_copy(e, block, eng_working_dst(e, p, 0), p->shard_n * wsz, ZO_COPY_D2H));
    else
      memcpy(block, eng_working_dst(e, p, 0), p->shard_n * wsz);
  }
  e->ctr.dp_bytes +=
      (size_t)(e->world - 1) * p->part_n * wsz; /* ring all-gather: W-1 blocks from each rank */
  zo_status st = zo_comm_iall_gather(e->comm, block, t, p->part_n * wsz, req);
  if (st != ZO_OK)
    return zo_error_prefix(st, "all-gather of '%s' over %d ranks", p->name, e->world);
  return ZO_OK;
}

/* Wait @req, then queue the upload of the whole tensor. */
static zo_status gather_finish(zo_engine_t *e, zo_param_t *p, zo_comm_req_t *req) {
  const size_t wsz = zo_dtype_size(e->wdtype);
  int done;
  zo_status st = eng_comm_finish(e, req, 1, &done);
  if (st != ZO_OK)
    return zo_error_prefix(st, "all-gather of '%s' over %d ranks", p->name, e->world);
  const struct eng_dp *d = e->dp;
  const char *t = d->gat + p->dp_off * wsz;
  ZO_CHECK(zo_memcpy_async(e->copy_stream, p->weights, t, p->n * wsz,
                           d->dev ? ZO_COPY_D2D : ZO_COPY_H2D));
  if (!d->dev) e->ctr.h2d_bytes += p->n * wsz;
  return ZO_OK;
}

zo_status eng_dp_publish(zo_engine_t *e, zo_param_t *p) {
  /* stage 0: every rank updated the whole tensor; stage 3: fetches gather (engine_dp3.c) */
  if (e->world == 1 || e->cfg.zero.stage == 0 || e->cfg.zero.stage == 3) return ZO_OK;
  const size_t cap = e->dp->gather_nbytes / zo_dtype_size(e->wdtype);
  const int first = p ? p->index : 0, end = p ? p->index + 1 : e->n_params;
  zo_comm_req_t **reqs = calloc((size_t)e->n_params, sizeof *reqs);
  if (!reqs)
    return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "engine: out of host memory for %d requests",
                        e->n_params);
  zo_status st = ZO_OK;
  /* In waves that fill the gather buffer: every gather of a wave in flight at once, then each upload as its
   * gather lands; the next wave reuses the buffer once those uploads are done. */
  for (int i = first; i < end && st == ZO_OK;) {
    st = zo_stream_synchronize(e->copy_stream);
    const int w0 = i;
    size_t used = 0;
    while (st == ZO_OK && i < end && (i == w0 || used + eng_dp_padded(e, e->params[i]) <= cap)) {
      zo_param_t *q = e->params[i];
      q->dp_off = used;
      used += eng_dp_padded(e, q);
      st = gather_start(e, q, &reqs[i]);
      if (st == ZO_OK) i++;
    }
    for (int j = w0; j < i; j++) { /* every started request is waited, even after an error */
      zo_status s2 = st == ZO_OK ? gather_finish(e, e->params[j], reqs[j]) : zo_comm_wait(reqs[j]);
      if (st == ZO_OK) st = s2;
    }
  }
  free(reqs);
  return st;
}
