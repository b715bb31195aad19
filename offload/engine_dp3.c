/*
 * engine_dp3.c - ZeRO stage 3 on several ranks: the parameters are
 * partitioned too. Each rank's host tier (offload_param "cpu", or params.swp
 * with "nvme") holds only its block of every tensor's working weights
 * (part_n = ceil(n / world) elements, the last rank's padded), and every
 * fetch all-gathers the whole
 * tensor into a region of a pinned host ring, from which the fetch
 * coordinator (engine_fetch.c) copies it to the device as it would copy the
 * host tier of one rank. Gradients are reduce-scattered as at stage 2
 * (engine_dp.c), so a rank's bytes of parameters, gradients and optimizer
 * state are each about 1/world of the model's.
 *
 * Collectives must be started in the same order on every rank, but what the
 * coordinator prefetches, evicts and keeps depends on timing (which copies
 * have landed). So gathers do not follow the device's state: there is
 * exactly one gather per fetch call, whatever is on the device. Along the
 * trace they are started ahead, in trace order, while the ring and
 * stage3_prefetch_bucket_size allow; the ring's regions are freed only when
 * their fetch call consumes them. Both depend on the sequence of calls
 * alone, which every rank shares, so every rank starts the same gathers in
 * the same order. Without a trace (the first step, zo_engine_set_trace(e, 0),
 * a fetch off the trace) each fetch gathers on demand; gathers started ahead
 * that no fetch will consume are finished and dropped at that point, which
 * again every rank reaches at the same call. The volume is ZeRO's: two
 * all-gathers of the parameters a step (forward and backward) and one
 * reduce-scatter of the gradients, 3 x parameters. Source: Rajbhandari et
 * al., "ZeRO" (SC'20), section 7.2.3; DeepSpeed's stage-3 parameter
 * coordinator keeps every rank's fetch order the same for the same reason.
 */
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"

/* One all-gather of a tensor's working weights, for one fetch. */
typedef struct dp_gat {
  zo_param_t *p;
  int pos;             /* trace position it serves, or -1 (a demand fetch) */
  size_t off;          /* region of the ring (eng_pg.ring): the tensor padded to part_n x world */
  struct pg_bucket *b; /* the all-gather it is part of */
  uint64_t seq; /* its place in the order of all entries (buckets find their members by it) */
  int h2d;      /* a host-to-device copy out of the region was queued (p->ready marks it) */
  /* This rank's block: *dst is where the all-gather sends it from. own_start() copies it there at once when it
   * is in memory; from params.swp it is read ahead into a staging slot (unread: waiting for a slot; rd: the
   * read in flight) and copied to dst when the bucket is launched. */
  char *dst;
  int own; /* the block is at dst */
  int unread;
  int slot; /* staging slot holding or receiving the read, or -1 */
  zo_swap_req_t *rd;
} dp_gat;

/* Staging slots for reads of own blocks ahead of their gathers: at most this many (offload_param.buffer_count
 * gives how many there are). */
#define PG_SLOTS 64

/* The part's state (e->pg), stage 3 on several ranks, from finalize to destroy. */
struct eng_pg {
  host_buf ring; /* all-gathered working weights, one region per fetch */
  /* the ring in use: ring.ptr, or with parameters partitioned in device memory (e->pdev) a region of the
   * device block; gathers there are device to device, in buckets of one */
  char *ring_base;
  size_t ring_nbytes;
  int dev;            /* the ring is device memory (e->pdev over NCCL) */
  zo_event_t *own_ev; /* dev: this rank's block is in the region (copy stream) */
  dp_gat *q;          /* gathers in flight or not yet consumed, in fetch order: circular */
  int q_first, q_n, q_cap;
  size_t head;  /* next free byte of ring */
  int next;     /* next trace position to gather for */
  uint64_t seq; /* entries queued so far */
  /* a duplicate of e->comm for the gathers: their order is fixed by the fetch calls, that of the gradient
   * reductions by when copies land, so they may not share one */
  zo_comm_t *comm;
  /* offload_param nvme: the fetch coordinator's staging buffers (borrowed; eng_pg_set_stages), which no fetch
   * uses at stage 3 on several ranks: reads of this rank's blocks ahead of their gathers */
  void *slot[PG_SLOTS];
  int slot_busy[PG_SLOTS];
  int n_slots;
  uint64_t reads_ahead, reads_waited; /* reads done when their bucket was launched, or waited for */
};

zo_status eng_pg_alloc(zo_engine_t *e, const zo_plan *plan) {
  e->pg = calloc(1, sizeof *e->pg);
  if (!e->pg) return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "engine: out of host memory");
  struct eng_pg *pg = e->pg;
  pg->ring_nbytes = plan->pg_ring_bytes;
  if (plan->dev_pg_ring_off != SIZE_MAX) {
    pg->dev = 1;
    eng_pg_rebase(e, plan); /* ring_base in the device block */
    ZO_CHECK(zo_event_create(e->dev, &pg->own_ev));
  } else {
    ZO_CHECK(eng_host_buf_alloc_as(e, &pg->ring, "pg_ring", plan->pg_ring_bytes, 1));
    pg->ring_base = pg->ring.ptr;
  }
  zo_status st =
      zo_comm_split(e->comm, 0, e->rank, &pg->comm); /* collective: every rank finalizes */
  if (st != ZO_OK) return zo_error_prefix(st, "engine: a communicator for the parameter gathers");
  if (eng_nccl_comms(e))
    eng_ledger_note(e, ZO_TIER_DEVICE, "comm_staging", ZO_COMM_NCCL_STAGE_BYTES, 0, -1);
  pg->q_cap = 64;
  pg->q = calloc((size_t)pg->q_cap, sizeof *pg->q);
  if (!pg->q)
    return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "engine: out of host memory for the gather queue");
  return ZO_OK;
}

void eng_pg_set_stages(struct eng_pg *pg, const struct eng_fetch *f) {
  pg->n_slots = 0;
  while (pg->n_slots < PG_SLOTS && (pg->slot[pg->n_slots] = eng_fetch_stage(f, pg->n_slots)))
    pg->n_slots++;
}

int eng_pg_on_device(const struct eng_pg *pg) { return pg && pg->dev; }

static dp_gat *g_at(const struct eng_pg *pg, int i) {
  return &pg->q[(pg->q_first + i) % pg->q_cap];
}
static zo_status pop_oldest(zo_engine_t *e);

void eng_pg_rebase(zo_engine_t *e, const zo_plan *plan) {
  struct eng_pg *pg = e->pg;
  if (!pg || !pg->dev) return;
  pg->ring_base = e->dev_block ? (char *)e->dev_block + plan->dev_pg_ring_off : NULL;
}

void eng_pg_free(zo_engine_t *e) {
  struct eng_pg *pg = e->pg;
  if (!pg) return;
  /* Every bucket opened is launched and finished, as on every other rank (which ones were launched by now
   * depends on when reads landed); after an error too, so that no peer is left waiting in a collective. */
  while (pg->q_n) pop_oldest(e);
  if (pg->reads_ahead + pg->reads_waited)
    zo_debug(
        "engine: rank %d read %llu of its blocks from params.swp ahead of their all-gathers, waited for "
        "%llu",
        e->rank, (unsigned long long)pg->reads_ahead, (unsigned long long)pg->reads_waited);
  free(pg->q);
  eng_host_buf_free(&pg->ring);
  zo_event_destroy(pg->own_ev);
  zo_comm_destroy(pg->comm);
  free(pg);
  e->pg = NULL;
}

size_t eng_pg_host_mem(const struct eng_pg *g, size_t *host_bytes, size_t *pinned_bytes) {
  if (!g) return 0;
  *host_bytes += g->ring.nbytes;
  if (g->ring.pinned) *pinned_bytes += g->ring.nbytes;
  return g->ring.nbytes;
}

void eng_pg_rewind(struct eng_pg *g) {
  if (g) g->next = 0;
}

static zo_status q_grow(struct eng_pg *pg) {
  const int cap = 2 * pg->q_cap;
  dp_gat *q = calloc((size_t)cap, sizeof *q);
  if (!q)
    return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "engine: out of host memory for the gather queue");
  for (int i = 0; i < pg->q_n; i++) q[i] = *g_at(pg, i);
  free(pg->q);
  pg->q = q, pg->q_first = 0, pg->q_cap = cap;
  return ZO_OK;
}

/*
 * This rank's block of @g's tensor (part_n elements) into g->dst. From device memory (e->pdev), param_host (cpu,
 * and nvme tensors cached there by offload_param.max_in_cpu) or the write-back ring while the newest update is
 * still there, it is copied now (g->own). From params.swp it is read ahead: g->unread until read_more() gives it
 * a staging slot, then the read is in flight (g->rd) until own_finish() copies it to dst. The weights cannot
 * change in between: a tensor's update comes after the last fetch of the step, which consumes this gather.
 */
static zo_status own_start(zo_engine_t *e, dp_gat *g) {
  zo_param_t *p = g->p;
  const size_t wsz = zo_dtype_size(e->wdtype);
  g->slot = -1;
  g->own = 1;
  if (e->pdev &&
      e->pg->dev) /* device to device, on the copy stream, behind the update that wrote it */
    return zo_memcpy_async(e->copy_stream, g->dst, e->param_dev + p->pw_el * wsz, p->part_n * wsz,
                           ZO_COPY_D2D);
  if (e->pdev) { /* host collectives (mpi): down into the host ring, behind the update that wrote it */
    e->ctr.d2h_bytes += p->part_n * wsz;
    return eng_dev_copy(e, g->dst, e->param_dev + p->pw_el * wsz, p->part_n * wsz, ZO_COPY_D2H);
  }
  if (p->pw_host) {
    memcpy(g->dst, (const char *)e->param_host.ptr + p->pw_el * wsz, p->part_n * wsz);
    return ZO_OK;
  }
  const wb_entry *w = eng_wb_written(e->wb, p, p->shard_n);
  if (w) {
    memcpy(g->dst, eng_wb_data(e->wb, w), p->shard_n * wsz);
    return ZO_OK;
  }
  g->own = 0, g->unread = 1;
  return ZO_OK;
}

/* Free staging slots to the queued blocks still to read, oldest first (so the blocks holding slots are always
 * the oldest unread ones, and the oldest bucket's members get theirs as the buckets before it launch). */
static zo_status read_more(zo_engine_t *e) {
  struct eng_pg *pg = e->pg;
  const size_t wsz = zo_dtype_size(e->wdtype);
  int s = 0;
  for (int i = 0; i < pg->q_n; i++) {
    dp_gat *g = g_at(pg, i);
    if (!g->unread) continue;
    while (s < pg->n_slots && pg->slot_busy[s]) s++;
    if (s == pg->n_slots) return ZO_OK;
    ZO_CHECK(eng_wb_drain(e, g->p, 0, 0)); /* params.swp must hold the last update */
    const size_t nbytes = zo_round_up(g->p->part_n * wsz, e->swap_align);
    zo_status st =
        zo_swap_submit_read(e->pswap, e->pfile, g->p->pw_el * wsz, pg->slot[s], nbytes, &g->rd);
    if (st != ZO_OK)
      return zo_error_prefix(st, "reading this rank's block of '%s' from params.swp", g->p->name);
    e->ctr.nvme_read_bytes += nbytes;
    pg->slot_busy[s] = 1, g->slot = s, g->unread = 0;
  }
  return ZO_OK;
}

/* @g's block to g->dst once its read is done: waiting with @wait (first giving it a slot), else polling;
 * *ready = g->own after. */
static zo_status own_finish(zo_engine_t *e, dp_gat *g, int wait, int *ready) {
  struct eng_pg *pg = e->pg;
  *ready = g->own;
  if (g->own) return ZO_OK;
  if (g->unread) ZO_CHECK(read_more(e));
  if (g->unread) { /* a bug: the slots are held by younger blocks */
    if (!wait) return ZO_OK;
    return zo_error_set(ZO_ERR_INVALID_USAGE, "engine: no staging slot to read the block of '%s'",
                        g->p->name);
  }
  int done = 0;
  zo_status st = zo_swap_poll(e->pswap, g->rd, &done);
  if (st == ZO_OK && !done && !wait) return ZO_OK;
  if (done)
    pg->reads_ahead++;
  else
    pg->reads_waited++;
  zo_status ws = eng_swap_wait(e, e->pswap, &g->rd); /* collects the status and frees the request */
  if (st == ZO_OK) st = ws;
  pg->slot_busy[g->slot] = 0;
  if (st != ZO_OK) {
    g->slot = -1;
    return zo_error_prefix(st, "reading this rank's block of '%s' from params.swp", g->p->name);
  }
  memcpy(g->dst, pg->slot[g->slot], g->p->part_n * zo_dtype_size(e->wdtype));
  g->slot = -1, g->own = 1, *ready = 1;
  return read_more(e); /* the slot to the next block waiting for one */
}

/*
 * A bucket: one all-gather for consecutive fetches along the trace, up to allgather_bucket_size elements, so that
 * small tensors (biases, norms) do not pay a collective's latency each. Every rank contributes its blocks of the
 * members one after another; what arrives is rank-major (rank 0's blocks of every member, then rank 1's...), so
 * on completion each member's blocks are copied into its own region of the ring, where the tensor is whole. A
 * bucket of one gathers straight into its member's region.
 */
struct pg_bucket {
  zo_comm_req_t *req; /* NULL once complete, or not launched yet */
  int launched; /* the all-gather was started: buckets are launched in queue order, every rank alike */
  char *send, *recv;
  char *packed;    /* W x per_rank elements, rank-major; NULL for a bucket of one */
  size_t per_rank; /* elements of one rank's contribution: the members' part_n summed */
  int refs;        /* members not yet consumed */
  int n_members;
  uint64_t first_seq; /* the first member's dp_gat.seq; the others follow it */
};

/* A region of the ring for a fetch of @p at @pos, queued with no gather yet; *ok = 0 when the ring
 * is full. */
static zo_status reserve(zo_engine_t *e, zo_param_t *p, int pos, int *ok) {
  struct eng_pg *pg = e->pg;
  const size_t bytes = eng_dp_padded(e, p) * zo_dtype_size(e->wdtype);
  size_t off = 0;
  *ok = 0;
  if (!eng_ring_take(pg->ring_nbytes, pg->head, pg->q_n ? g_at(pg, 0)->off : 0, pg->q_n, bytes,
                     &off))
    return ZO_OK;
  if (pg->q_n == pg->q_cap) ZO_CHECK(q_grow(pg));
  dp_gat *g = &pg->q[(pg->q_first + pg->q_n) % pg->q_cap];
  *g = (dp_gat){.p = p, .pos = pos, .off = off, .seq = pg->seq++, .slot = -1};
  pg->q_n++;
  pg->head = off + bytes;
  *ok = 1;
  return ZO_OK;
}

/* One all-gather for the newest @k queued entries (reserve()d, in fetch order): each member's own block is
 * started towards the bucket's send buffer; progress() launches the collective when all are there. */
static zo_status open_bucket(zo_engine_t *e, int k) {
  struct eng_pg *pg = e->pg;
  const size_t wsz = zo_dtype_size(e->wdtype);
  struct pg_bucket *b = calloc(1, sizeof *b);
  if (!b)
    return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "engine: out of host memory for a gather bucket");
  const int first = pg->q_n - k;
  for (int i = 0; i < k; i++) b->per_rank += g_at(pg, first + i)->p->part_n;
  b->refs = b->n_members = k;
  b->first_seq = g_at(pg, first)->seq;
  if (k == 1) {
    dp_gat *g = g_at(pg, first);
    b->recv = pg->ring_base + g->off;
    b->send = b->recv + (size_t)e->rank * g->p->part_n * wsz; /* this rank's, padded */
  } else {
    const size_t nbytes = (size_t)e->world * b->per_rank * wsz;
    b->packed = malloc(nbytes);
    if (!b->packed) {
      free(b);
      return zo_error_set(ZO_ERR_OUT_OF_MEMORY,
                          "engine: out of host memory for a gather bucket of %zu bytes", nbytes);
    }
    b->recv = b->packed;
    b->send = b->recv + (size_t)e->rank * b->per_rank * wsz;
  }
  size_t at = 0;
  for (int i = 0; i < k; i++) { /* members belong to the bucket from here on: pop_oldest frees it */
    dp_gat *g = g_at(pg, first + i);
    g->b = b;
    g->dst = b->send + at * wsz;
    at += g->p->part_n;
  }
  for (int i = 0; i < k; i++) ZO_CHECK(own_start(e, g_at(pg, first + i)));
  return read_more(e);
}

/* Start @b's all-gather (its members' blocks are all at their dst). */
static zo_status launch(zo_engine_t *e, struct pg_bucket *b, const dp_gat *first) {
  struct eng_pg *pg = e->pg;
  const size_t wsz = zo_dtype_size(e->wdtype);
  zo_status st = ZO_OK;
  if (pg->dev) { /* the collective runs on the communicator's stream, after the copy */
    st = zo_event_record(pg->own_ev, e->copy_stream);
    if (st == ZO_OK) st = zo_stream_wait_event(zo_comm_stream(pg->comm), pg->own_ev);
  }
  if (st == ZO_OK) st = zo_comm_iall_gather(pg->comm, b->send, b->recv, b->per_rank * wsz, &b->req);
  if (st != ZO_OK)
    return zo_error_prefix(st, "all-gather of '%s' (and %d more) over %d ranks", first->p->name,
                           b->n_members - 1, e->world);
  b->launched = 1;
  e->ctr.dp_bytes +=
      (size_t)(e->world - 1) * b->per_rank * wsz; /* ring all-gather: W-1 blocks from each rank */
  return ZO_OK;
}

/*
 * Launch the buckets not yet launched, oldest first, whose members' blocks have arrived; stop at the first
 * that has not (collectives start in queue order, the same on every rank). With @upto, wait for reads until
 * that entry's bucket is launched.
 */
static zo_status progress(zo_engine_t *e, const dp_gat *upto) {
  struct eng_pg *pg = e->pg;
  for (int i = 0; i < pg->q_n;) {
    const dp_gat *g = g_at(pg, i);
    struct pg_bucket *b = g->b;
    if (!b || b->launched) { /* no bucket: only after a failed open_bucket() */
      i++;
      continue;
    }
    const int wait = upto && upto->seq >= b->first_seq;
    int all = 1;
    for (int m = 0; m < b->n_members; m++) {
      int ready;
      ZO_CHECK(own_finish(e, g_at(pg, i + m), wait, &ready));
      all &= ready;
    }
    if (!all) return ZO_OK;
    ZO_CHECK(launch(e, b, g));
    i += b->n_members;
  }
  return ZO_OK;
}

/* Complete @g's bucket (waiting with @wait, else testing); on completion copy every member's blocks
 * into place. */
static zo_status bucket_finish(zo_engine_t *e, dp_gat *g, int wait, int *done) {
  struct pg_bucket *b = g->b;
  *done = 0;
  if (!b->launched) ZO_CHECK(progress(e, wait ? g : NULL));
  if (!b->launched) return ZO_OK;
  *done = 1;
  if (!b->req) return ZO_OK;
  zo_status st = eng_comm_finish(e, b->req, wait, done);
  if (st != ZO_OK || *done) b->req = NULL; /* freed by wait/test */
  if (st != ZO_OK)
    return zo_error_prefix(st, "all-gather of '%s' over %d ranks", g->p->name, e->world);
  if (!*done || !b->packed) return ZO_OK;
  /* members are consecutive in the queue from first_seq, and all still queued: popped only after
   * this */
  const size_t wsz = zo_dtype_size(e->wdtype);
  const int first = (int)(b->first_seq - g_at(e->pg, 0)->seq);
  size_t at = 0;
  for (int i = 0; i < b->n_members; i++) {
    const dp_gat *mi = g_at(e->pg, first + i);
    const size_t part = mi->p->part_n;
    for (int q = 0; q < e->world; q++)
      memcpy(e->pg->ring_base + mi->off + (size_t)q * part * wsz,
             b->packed + ((size_t)q * b->per_rank + at) * wsz, part * wsz);
    at += part;
  }
  free(b->packed);
  b->packed = NULL;
  return ZO_OK;
}

zo_status eng_pg_issue(zo_engine_t *e) {
  if (!eng_trace_follow(e->trace)) return ZO_OK;
  struct eng_pg *pg = e->pg;
  /* elements gathered ahead of the current position */
  int64_t ahead = 0;
  for (int i = 0; i < pg->q_n; i++) ahead += (int64_t)g_at(pg, i)->p->n;
  /* in device memory (pg->dev) every gather is its own collective: a bucket's rank-major unpacking would be W
   * device copies a member */
  const int64_t bucket_cap =
      e->cfg.zero.allgather_bucket_size > 0 && !pg->dev ? e->cfg.zero.allgather_bucket_size : 1;
  while (pg->next < eng_trace_len(e->trace)) {
    /* one bucket: the next fetches along the trace while they fit the prefetch budget, the ring and
     * the bucket */
    int k = 0;
    int64_t in_bucket = 0;
    while (pg->next < eng_trace_len(e->trace) && k < 256) {
      zo_param_t *p = e->params[eng_trace_at(e->trace, pg->next)];
      if ((pg->q_n && ahead + (int64_t)p->n > e->cfg.zero.stage3_prefetch_bucket_size) ||
          (k && in_bucket + (int64_t)p->n > bucket_cap))
        break;
      int ok;
      ZO_CHECK(reserve(e, p, pg->next, &ok));
      if (!ok) break;
      ahead += (int64_t)p->n, in_bucket += (int64_t)p->n;
      pg->next++, k++;
    }
    if (!k) break;
    ZO_CHECK(open_bucket(e, k));
  }
  return progress(e, NULL); /* what has been read (or needs no read) starts now */
}

/* Wait for the oldest entry's gather (launching it first if need be) and the copy out of it, then free its
 * region (and its bucket with the last member). */
static zo_status pop_oldest(zo_engine_t *e) {
  struct eng_pg *pg = e->pg;
  dp_gat *g = g_at(pg, 0);
  zo_status st = ZO_OK;
  int done;
  if (g->b) st = bucket_finish(e, g, 1, &done);
  if (g->rd) { /* after a failure: the read must still land before the slot is reused */
    zo_status ws = eng_swap_wait(e, e->pswap, &g->rd);
    if (st == ZO_OK) st = ws;
  }
  if (g->slot >= 0) pg->slot_busy[g->slot] = 0;
  g->slot = -1, g->unread = 0;
  if (st == ZO_OK && g->h2d) st = zo_event_synchronize(g->p->ready);
  if (g->b) {
    if (--g->b->refs == 0) {
      if (g->b->req) zo_comm_wait(g->b->req); /* only after an error above */
      free(g->b->packed);
      free(g->b);
    }
  }
  pg->q_first = (pg->q_first + 1) % pg->q_cap;
  pg->q_n--;
  return st;
}

zo_status eng_pg_demand(zo_engine_t *e, zo_param_t *p) {
  for (;;) {
    int ok;
    ZO_CHECK(reserve(e, p, -1, &ok));
    if (ok) return open_bucket(e, 1);
    if (!e->pg->q_n) /* a bug: the ring holds two of the largest tensors */
      return zo_error_set(ZO_ERR_INVALID_USAGE, "engine: gather ring of %zu bytes cannot hold '%s'",
                          e->pg->ring_nbytes, p->name);
    ZO_CHECK(pop_oldest(e)); /* entries left by demand fetches already done */
  }
}

/* The entry for @pos (-1: the newest), or NULL. */
static dp_gat *find(const struct eng_pg *pg, int pos) {
  if (pos < 0) return pg->q_n ? g_at(pg, pg->q_n - 1) : NULL;
  for (int i = 0; i < pg->q_n; i++)
    if (g_at(pg, i)->pos == pos) return g_at(pg, i);
  return NULL;
}

zo_status eng_pg_src(zo_engine_t *e, int pos, int wait, const void **src) {
  *src = NULL;
  dp_gat *g = find(e->pg, pos);
  if (!g) {
    if (wait) /* a bug: every fetch gathers first */
      return zo_error_set(ZO_ERR_INVALID_USAGE, "engine: no gather for trace position %d", pos);
    return ZO_OK;
  }
  int done = 0;
  ZO_CHECK(bucket_finish(e, g, wait, &done));
  if (!done) return ZO_OK;
  *src = e->pg->ring_base + g->off;
  return ZO_OK;
}

void eng_pg_mark_h2d(zo_engine_t *e, int pos) {
  dp_gat *g = find(e->pg, pos);
  if (g) g->h2d = 1;
}

zo_status eng_pg_consume(zo_engine_t *e, int pos) {
  /* Demand entries of earlier fetches and this one's: every entry up to it is done with. */
  dp_gat *g = find(e->pg, pos);
  if (!g)
    return zo_error_set(ZO_ERR_INVALID_USAGE, "engine: no gather to consume at trace position %d",
                        pos);
  while (e->pg->q_n && g_at(e->pg, 0) != g) ZO_CHECK(pop_oldest(e));
  return pop_oldest(e);
}

zo_status eng_pg_drop_pending(zo_engine_t *e) {
  zo_status st = ZO_OK;
  while (e->pg->q_n) {
    zo_status s2 = pop_oldest(e);
    if (st == ZO_OK) st = s2;
  }
  e->pg->next = eng_trace_pos(e->trace);
  return st;
}

void eng_pg_drop_device_copies(zo_engine_t *e) {
  for (int i = 0; i < e->n_params; i++) {
    zo_param_t *p = e->params[i];
    if (p->blk && !p->in_use && p->pstate == P_RESIDENT) eng_drop_device_copy(e, p);
  }
}
