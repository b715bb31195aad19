/*
 * engine_gradnv.c - gradients beside the optimizer state on NVMe (offload_optimizer "nvme"): each hand-over chunk
 * goes to grad.swp (the accumulation dtype, the state files' extents) through a few bounded I/O buffers, cast on
 * the first contribution of a step and read-added-written on later ones, with the norm taken from the final chunk
 * while it is in memory. ZeRO-Infinity swaps gradients out with the optimizer state (DeepSpeed
 * partitioned_optimizer_swapper.swap_out_gradients). A sub-group whose state already sits in a slot when its first
 * gradient of the step arrives keeps the step's gradients in that slot's gradient buffer instead (no grad.swp write
 * and read back; the slot stays until its update): the same arithmetic into another buffer, the same bits. Not here: the staging copies (engine_accum.c), the reduction
 * over ranks (engine_dp.c), reading a sub-group's gradient into its slot for Adam (engine_nvme.c).
 */
#include <math.h>
#include <stdlib.h>

#include "engine_internal.h"
#include "plan_internal.h"
#include "zoffload/adam.h"

/* The norm's summation chunk (cpu_adam: ZO_SQNORM_CHUNK): a shard's squared norm is the sum, in order, of the
 * sums of its 64 Ki-element chunks, so adding chunk by chunk here gives the bits of the whole-shard pass. */
enum { GNV_NORM_CHUNK = 65536 };

/* Gradients in grad.swp (e->gnv; offload_optimizer "nvme"): allocated at finalize (eng_gnv_alloc), freed at destroy
 * (eng_gnv_free); NULL before. No other file touches its fields. */
struct eng_gnv {
  host_buf host; /* the n I/O buffers of el elements (accumulation dtype), one pinned allocation */
  size_t el;     /* elements per buffer: the plan's grad_io_el (eng_gnv_el) */
  int n, next;   /* buffers, and the one the next chunk takes (in turn) */
  zo_swap_req_t *req[2]; /* the write out of each buffer in flight */
  zo_param_t *p[2];      /* and whose gradient it writes, from which shard element */
  size_t o[2];
};

zo_status eng_gnv_alloc(zo_engine_t *e, const zo_plan *plan) {
  struct eng_gnv *gn = calloc(1, sizeof *gn);
  if (!gn) return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "engine: out of host memory");
  e->gnv = gn;
  gn->el = plan->grad_io_el;
  gn->n = 2;
  const size_t gnv_each =
      zo_plan_bytes(plan, "grad_swap_buffers"); /* one allocation, noted as the plan's two */
  ZO_CHECK(
      eng_host_buf_alloc(&gn->host, gnv_each * (size_t)gn->n, 1)); /* plan.c: the product fits */
  for (int b = 0; b < gn->n; b++)
    eng_ledger_note(e, ZO_TIER_HOST, "grad_swap_buffers", gnv_each, 1, -1);
  ZO_CHECK(eng_pin_check(e, "grad_swap_buffers", gn->host.ptr, gn->host.nbytes));
  memset(gn->host.ptr, 0, gn->host.nbytes); /* the padding of a short chunk is written too */
  return ZO_OK;
}

void eng_gnv_free(zo_engine_t *e) {
  if (!e->gnv) return;
  eng_gnv_drain(e); /* gradient writes in flight (after an error) */
  eng_host_buf_free(&e->gnv->host);
  free(e->gnv);
  e->gnv = NULL;
}

const host_buf *eng_gnv_host(const struct eng_gnv *gn) {
  static const host_buf none;
  return gn ? &gn->host : &none;
}

/* @p's final contribution is on disk: it lands (eng_grad_land: the norm's verdict, the outcome of its writes, then
 * the flag the pipeline reads). */
static void gnv_landed(zo_param_t *p) {
  const zo_status st = p->gnv_st;
  p->gnv_st = ZO_OK;
  p->gnv_final = 0;
  eng_grad_land(p, st);
}

/* The write out of buffer @b has completed (or is waited here): collect it; its tensor lands when it was the
 * last write of its final contribution. */
static zo_status gnv_finish(zo_engine_t *e, int b) {
  struct eng_gnv *gn = e->gnv;
  if (!gn->req[b]) return ZO_OK;
  zo_param_t *p = gn->p[b];
  zo_status st = eng_swap_wait(e, eng_nv_swap(e->nv), &gn->req[b]);
  gn->p[b] = NULL;
  if (st != ZO_OK) {
    st = zo_error_prefix(st, "gradient of '%s' [%zu, ...) to grad.swp", p->name, gn->o[b]);
    if (p->gnv_st == ZO_OK) p->gnv_st = st;
  }
  if (--p->gnv_pending == 0 && p->gnv_final) gnv_landed(p);
  return st;
}

zo_status eng_gnv_poll(zo_engine_t *e) {
  struct eng_gnv *gn = e->gnv;
  for (int b = 0; gn && b < gn->n; b++) {
    int done = 0;
    if (!gn->req[b]) continue;
    ZO_CHECK(zo_swap_poll(eng_nv_swap(e->nv), gn->req[b], &done));
    if (done) ZO_CHECK(gnv_finish(e, b));
  }
  return ZO_OK;
}

zo_status eng_gnv_drain(zo_engine_t *e) {
  struct eng_gnv *gn = e->gnv;
  zo_status first = ZO_OK;
  for (int b = 0; gn && b < gn->n; b++) {
    zo_status st = gnv_finish(e, b);
    if (first == ZO_OK) first = st;
  }
  return first;
}

/* One chunk on its way to grad.swp, on the Adam pool (tiles of one norm chunk each, split across its threads): the
 * cast or add of the contribution into the buffer and, for the final one, the squared norms of its norm chunks. */
typedef struct {
  void *buf;
  const void *src;
  zo_dtype at, st;
  int add, last;
  double *part;
} gnv_job;

static void gnv_add_norm_range(void *arg, size_t b, size_t end, int thread) {
  (void)thread;
  const gnv_job *j = arg;
  const size_t asz = zo_dtype_size(j->at);
  eng_acc_add((char *)j->buf + b * asz, j->at, (const char *)j->src + b * zo_dtype_size(j->st),
              j->st, end - b, j->add);
  if (!j->last) return;
  eng_note_grad_bytes((end - b) * asz);
  for (size_t k = b / GNV_NORM_CHUNK; k * GNV_NORM_CHUNK < end; k++) {
    const size_t o = k * GNV_NORM_CHUNK, n = end - o < GNV_NORM_CHUNK ? end - o : GNV_NORM_CHUNK;
    /* cannot fail: a known dtype, n > 0 */
    (void)zo_grad_sqnorm_ex((const char *)j->buf + o * asz, j->at, n, ZO_SIMD_AUTO, 1, &j->part[k],
                            NULL);
  }
}

/* buf[0, m) = (add ? buf : 0) + src[0, m) in the accumulation dtype and, with @last, the norm chunks' squared
 * norms added to *sqnorm in order (the bits of one pass from the buffer's start): on the pool, waited here. */
static zo_status gnv_add_norm(zo_engine_t *e, void *buf, const void *src, zo_dtype st, size_t m,
                              int add, int last, double *sqnorm) {
  const size_t nparts = (e->gnv->el + GNV_NORM_CHUNK - 1) / GNV_NORM_CHUNK;
  if (!e->norm_parts &&
      !(e->norm_parts = calloc(nparts ? nparts : 1, sizeof *e->norm_parts))) /* eng_acc_free */
    return zo_error_set(ZO_ERR_OUT_OF_MEMORY,
                        "engine: out of host memory for %zu gradient norm partials", nparts);
  gnv_job j = {buf, src, e->adtype, st, add, last, e->norm_parts};
  zo_adam_task_t *t;
  /* urgent: ahead of queued sub-group updates; the engine thread waits for it as it did its own pass */
  ZO_CHECK(zo_adam_pool_submit_for(e->pool, gnv_add_norm_range, &j, m, GNV_NORM_CHUNK,
                                   ZO_ADAM_TASK_URGENT, &t));
  ZO_CHECK(zo_adam_task_wait(t, NULL));
  for (size_t k = 0; last && k * GNV_NORM_CHUNK < m; k++) *sqnorm += e->norm_parts[k];
  return ZO_OK;
}

zo_status eng_gnv_unhold(zo_engine_t *e, sub_group *g) {
  if (!g->gheld) return ZO_OK;
  if (g->resident) /* chunks are cut at piece boundaries when sub-groups are resident: never spans one */
    return zo_error_set(ZO_ERR_INVALID_USAGE,
                        "engine: gradients of resident sub-group %d would go to grad.swp (a bug)",
                        eng_nv_sg_index(e->nv, g));
  g->gheld = 0;
  g->grads_in = 0;
  const size_t asz = zo_dtype_size(e->adtype);
  zo_swap_req_t *rq;
  zo_swap_t *sw = eng_nv_swap(e->nv);
  ZO_CHECK(zo_swap_submit_write_urgent(sw, eng_nv_file(e->nv, ST_GRAD), g->file_el * asz,
                                       eng_nv_slot(e->nv, g->slot)->buf[ST_GRAD], g->n_el * asz,
                                       &rq));
  e->ctr.nvme_write_bytes += g->n_el * asz;
  zo_status st = eng_swap_wait(e, sw, &rq);
  if (st != ZO_OK)
    return zo_error_prefix(st, "gradients of sub-group %d [%llu, +%llu) to grad.swp",
                           eng_nv_sg_index(e->nv, g), (unsigned long long)g->file_el,
                           (unsigned long long)g->n_el);
  return ZO_OK;
}

/* Where the chunk of file elements [f, f + m) goes: the sub-group holding it in its slot, or NULL (grad.swp). The
 * first gradient of a step to reach a sub-group decides: held when its state sits in a slot that nothing else
 * needs before its update (loaded, being read without its gradients, or last step's write-back, which leaves the
 * gradient buffer alone) and the chunk lies inside it; a chunk spanning sub-groups goes to grad.swp, and a held one
 * it touches is written out first (eng_gnv_unhold). */
static zo_status gnv_holder(zo_engine_t *e, uint64_t f, size_t m, sub_group **out) {
  *out = NULL;
  sub_group *one = NULL;
  int n_touch = 0, may_hold = 1;
  for (int i = 0; i < eng_nv_n_sgs(e->nv); i++) {
    sub_group *g = eng_nv_sg(e->nv, i);
    if (g->file_el >= f + m || g->file_el + g->n_el <= f) continue;
    ZO_CHECK(eng_nv_dpu_claim(e, g, &may_hold)); /* the delayed update is done with it first */
    n_touch++, one = g;
    if (g->file_el > f || g->file_el + g->n_el < f + m) { /* spans beyond this sub-group */
      g->gtouched = 1;
      ZO_CHECK(eng_gnv_unhold(e, g));
      one = NULL, n_touch = 2;
    }
  }
  if (n_touch != 1 || !one) return ZO_OK;
  sub_group *g = one;
  if (!g->gtouched) {
    g->gtouched = 1;
    if (may_hold && g->slot >= 0 && !g->done && !g->grads_in &&
        !eng_nv_slot(e->nv, g->slot)->req[ST_GRAD] &&
        (g->phase == SG_LOADED || g->phase == SG_READING || g->phase == SG_WRITING))
      g->gheld = 1, g->grads_in = 1;
  }
  if (g->gheld) *out = g;
  return ZO_OK;
}

zo_status eng_gnv_put(zo_engine_t *e, zo_param_t *p, size_t off, size_t n, const void *src,
                      zo_dtype st, int add, int last) {
  struct eng_gnv *gn = e->gnv;
  zo_swap_t *sw = eng_nv_swap(e->nv);
  zo_swap_file_t *gfile = eng_nv_file(e->nv, ST_GRAD);
  const size_t piece_el = eng_nv_piece_el(e->nv);
  const size_t asz = zo_dtype_size(e->adtype), ssz = zo_dtype_size(st), unit = eng_extent_unit(e);
  for (size_t o = off, m; o < off + n; o += m) {
    m = off + n - o < gn->el ? off + n - o : gn->el;
    if (piece_el) { /* resident sub-groups: cut at piece boundaries (multiples of the norm chunk), so that a chunk
                       lies in one sub-group */
      const size_t end = (o / piece_el + 1) * piece_el;
      if (o + m > end) m = end - o;
    }
    sub_group *g;
    ZO_CHECK(gnv_holder(e, p->file_el + o, m, &g));
    if (g) { /* in its slot: cast or add there, no I/O */
      void *dst =
          (char *)eng_nv_slot(e->nv, g->slot)->buf[ST_GRAD] + (p->file_el + o - g->file_el) * asz;
      ZO_CHECK(
          gnv_add_norm(e, dst, (const char *)src + (o - off) * ssz, st, m, add, last, &p->sqnorm));
      continue;
    }
    const int b = gn->next;
    gn->next = (gn->next + 1) % gn->n;
    void *buf = (char *)gn->host.ptr + (size_t)b * gn->el * asz;
    ZO_CHECK(gnv_finish(e, b));
    /* [o, o + m) lies at file_el + o: aligned at both ends (o is a multiple of the extent unit; the end is padded
     * up to one, inside the shard's padded extent) */
    const uint64_t n_el = zo_round_up(m, unit);
    if (add) {
      /* the last write of this range (from the other buffer) may still be in flight: on disk before it is read
       * (the swap orders nothing between requests) */
      for (int b2 = 0; b2 < gn->n; b2++)
        if (gn->req[b2] && gn->p[b2] == p && gn->o[b2] == o) ZO_CHECK(gnv_finish(e, b2));
      zo_swap_req_t *rq;
      ZO_CHECK(zo_swap_submit_read_urgent(sw, gfile, (p->file_el + o) * asz, buf, n_el * asz, &rq));
      e->ctr.nvme_read_bytes += n_el * asz;
      zo_status rs = eng_swap_wait(e, sw, &rq);
      if (rs != ZO_OK)
        return zo_error_prefix(rs, "gradient of '%s' [%zu, %zu) from grad.swp", p->name, o, o + m);
    }
    ZO_CHECK(
        gnv_add_norm(e, buf, (const char *)src + (o - off) * ssz, st, m, add, last, &p->sqnorm));
    /* urgent: ahead of the state's bulk reads and write-backs, so the buffer comes back soon */
    ZO_CHECK(zo_swap_submit_write_urgent(sw, gfile, (p->file_el + o) * asz, buf, n_el * asz,
                                         &gn->req[b]));
    e->ctr.nvme_write_bytes += n_el * asz;
    gn->p[b] = p, gn->o[b] = o;
    p->gnv_pending++;
  }
  return ZO_OK;
}

zo_status eng_gnv_reopen(zo_engine_t *e) {
  struct eng_nv *nv = e->nv;
  for (int i = 0; i < eng_nv_n_sgs(nv); i++) {
    sub_group *g = eng_nv_sg(nv, i);
    /* under the delayed update a sub-group not claimed by this step's gradients is the last step's */
    if (eng_nv_dpu_running(nv) && !g->dpu_next) continue;
    if (!g->grads_in || g->gheld) continue;
    int done;
    if (g->slot >= 0) ZO_CHECK(eng_slot_settle(e, eng_nv_slot(nv, g->slot), 1, &done));
    g->grads_in = 0;
  }
  return ZO_OK;
}

zo_status eng_gnv_land(zo_engine_t *e, zo_param_t *p, zo_status st) {
  (void)e;
  if (st != ZO_OK && p->gnv_st == ZO_OK) p->gnv_st = st;
  p->gnv_final = 1;
  if (p->gnv_pending == 0) gnv_landed(p);
  return st;
}
