/*
 * engine_nvme.c - optimizer state on NVMe (offload_optimizer.device "nvme"):
 * sub-groups laid out in the state files, and the read / update / write
 * pipeline across steps. Not here: the I/O itself (swap/).
 */
#include <limits.h>
#include <stdlib.h>
#include <sys/uio.h>

#include "engine_internal.h"
#include "pinned_internal.h"
#include "plan_internal.h"

/* A run of shard pieces' state: elements [off, off + n) of @p's shard, at file_el in every state
 * file. */
typedef struct piece {
  zo_param_t *p;
  size_t off, n;        /* element range inside the shard */
  uint64_t file_el;     /* element offset of element `off` in each state file */
  zo_adam_task_t *task; /* Adam update in flight */
} piece;

/* The pipeline's state (e->nv; NULL unless offload_optimizer.device is nvme): created with the engine (eng_nv_create:
 * the swap), filled at finalize (eng_nv_alloc), freed at destroy (eng_nv_free). No other file touches its fields. */
struct eng_nv {
  zo_swap_t *swap; /* optimizer state */
  zo_swap_file_t *files
      [SL_KINDS]; /* the state files and [ST_GRAD] grad.swp; NULL when every sub-group is resident */
  piece *pieces;
  int n_pieces;
  sub_group *sgs;
  int n_sgs;
  /* [n_slots]: the streaming slots, then one permanent slot per resident sub-group */
  sg_slot *slots;
  int n_slots;
  int n_stream_slots; /* slots [0, n_stream_slots) stream sub-groups through pinned buffers */
  size_t slot_el;     /* elements per streaming slot buffer (largest streamed sub-group) */
  /* Split optimizer state (zoffload.optimizer_max_in_cpu): file elements [res_file_el, ...) belong to the resident
   * sub-groups and live in res[k] (element res_file_el at index 0), never in the files, which hold [0, res_file_el). */
  uint64_t res_file_el;
  host_buf res[SL_KINDS];
  /* residency on: elements per piece (a multiple of the norm chunk); gradient chunks are cut at
   * piece boundaries so that none spans two sub-groups. 0: not cut */
  size_t piece_el;
  int res_busy;  /* resident sub-groups whose update is in flight */
  int *sg_order; /* sub-groups in the order they are updated (their gradients complete) */
  int pos_read;  /* position in sg_order of the next state read to issue */
  int n_done;    /* sub-groups updated in this step */
  int adam_ok;   /* updates may start (hp is this step's) */
  int in_step;   /* inside zo_engine_step(), which waits on every state read */
  /* delayed update: this step's updates run behind the next step's compute (every gradient of this
   * step has landed; the next step's land into the sub-groups they claim) */
  int dpu_run;
  double claim_wait_s; /* the gradient hand-over's waits for it (eng_nv_dpu_claim), and how many */
  int n_claim_waits;
  zo_adam_hparams hp;
};

/* ---------------------------------------------------------------- lifecycle */

/* the optimizer state files, and [ST_GRAD] the gradients' (not state: never checkpointed) */
static const char *const k_state_file[SL_KINDS] = {"master.swp", "exp_avg.swp", "exp_avg_sq.swp",
                                                   "grad.swp"};

zo_status eng_nv_create(struct eng_nv **out, const char *const *paths, unsigned n_paths,
                        const zo_swap_opts *so) {
  *out = NULL;
  struct eng_nv *nv = calloc(1, sizeof *nv);
  if (!nv) return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "engine: out of host memory");
  zo_status st = zo_swap_create_striped(paths, n_paths, so, &nv->swap);
  if (st != ZO_OK) {
    free(nv);
    return st;
  }
  *out = nv;
  return ZO_OK;
}

/* Pool task: bytes [b, end) of the buffer at @arg zeroed. */
static void zero_range(void *arg, size_t b, size_t end, int thread) {
  (void)thread;
  memset((char *)arg + b, 0, end - b);
}

/* NVMe optimizer state (finalize): the plan's sub-groups and pieces, the state files, the sub-group
 * buffers. */
zo_status eng_nv_alloc(zo_engine_t *e, const zo_plan *plan) {
  struct eng_nv *nv = e->nv;
  zo_status st;
  /* the plan's sub-groups and pieces, with the pipeline's bookkeeping beside them */
  nv->pieces = calloc(plan->n_pieces ? plan->n_pieces : 1, sizeof *nv->pieces);
  nv->sgs = calloc(plan->n_sgs ? plan->n_sgs : 1, sizeof *nv->sgs);
  if (!nv->pieces || !nv->sgs)
    return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "engine: out of host memory");
  for (int i = 0; i < e->n_params; i++) e->params[i]->file_el = plan->tensor[i].file_el;
  for (int q = 0; q < plan->n_pieces; q++) {
    const zo_plan_piece *pc = &plan->piece[q];
    nv->pieces[q] =
        (piece){.p = e->params[pc->tensor], .off = pc->off, .n = pc->n, .file_el = pc->file_el};
  }
  for (int g = 0; g < plan->n_sgs; g++) {
    const zo_plan_sub_group *sg = &plan->sg[g];
    nv->sgs[g] = (sub_group){.first_piece = sg->first_piece,
                             .n_pieces = sg->n_pieces,
                             .file_el = sg->file_el,
                             .n_el = sg->n_el};
  }
  nv->n_pieces = plan->n_pieces, nv->n_sgs = plan->n_sgs, nv->slot_el = plan->slot_el;
  nv->res_file_el = plan->state_file_el;
  nv->piece_el = e->opt_res_el ? plan->piece_el : 0;
  for (int k = 0; k < SL_KINDS; k++) {
    const size_t fbytes = zo_plan_bytes(plan, k_state_file[k]);
    if (!fbytes) continue; /* every sub-group resident: no files */
    st = zo_swap_file_create(nv->swap, k_state_file[k], fbytes, &nv->files[k]);
    if (st != ZO_OK)
      return zo_error_prefix(st, k == ST_GRAD ? "engine: gradient file"
                                              : "engine: optimizer state file");
    eng_ledger_note(e, ZO_TIER_NVME, k_state_file[k], zo_swap_file_size(nv->files[k]), 0, 0);
  }
  const int nbuf = plan->n_slots;
  nv->slots = calloc((size_t)nbuf + (size_t)plan->n_res_sgs + 1, sizeof *nv->slots);
  nv->sg_order = calloc(nv->n_sgs, sizeof *nv->sg_order);
  if (!nv->slots || !nv->sg_order)
    return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "engine: out of host memory");
  nv->n_slots = nv->n_stream_slots = nbuf;
  for (int s = 0; s < nbuf; s++) nv->slots[s].sg = -1;
  for (int i = 0; i < nv->n_sgs;
       i++) { /* first step: backward runs in reverse registration order */
    nv->sg_order[i] = nv->n_sgs - 1 - i;
    nv->sgs[nv->n_sgs - 1 - i].pos = i;
    nv->sgs[i].slot = -1;
  }
  static const char *const k_sg_buf[SL_KINDS] = {"sub_group_buffers.master",
                                                 "sub_group_buffers.exp_avg",
                                                 "sub_group_buffers.exp_avg_sq",
                                                 "sub_group_buffers.grad"};
  size_t slot_bytes[SL_KINDS];
  for (int k = 0; k < SL_KINDS; k++) slot_bytes[k] = zo_plan_bytes(plan, k_sg_buf[k]);
  for (int s = 0; s < nbuf; s++) {
    for (int k = 0; k < SL_KINDS; k++) {
      int pinned;
      st = zo_host_alloc(slot_bytes[k], 1, &nv->slots[s].buf[k], &pinned);
      if (st != ZO_OK)
        return zo_error_prefix(
            st,
            "engine: sub-group buffer %d of %d (%zu elements; lower "
            "zero_optimization.sub_group_size or offload_optimizer.buffer_count)",
            s + 1, nbuf, nv->slot_el);
      eng_ledger_note(e, ZO_TIER_HOST, k_sg_buf[k], slot_bytes[k], 1, -1);
      ZO_CHECK(eng_pin_check(e, k_sg_buf[k], nv->slots[s].buf[k], slot_bytes[k]));
    }
  }
  /* The resident sub-groups: their state and gradient sums in host memory, one permanent slot each pointing into
   * it (engine_nvme.c); loaded from the start, never read or written back. */
  static const char *const k_res_buf[SL_KINDS] = {"resident_state.master", "resident_state.exp_avg",
                                                  "resident_state.exp_avg_sq",
                                                  "resident_state.grad"};
  for (int k = 0; k < SL_KINDS && plan->res_el; k++) {
    const size_t bytes = zo_plan_bytes(plan, k_res_buf[k]);
    st = eng_host_buf_alloc_as(e, &nv->res[k], k_res_buf[k], bytes, 0);
    if (st != ZO_OK)
      return zo_error_prefix(st,
                             "engine: optimizer state kept in host memory (%zu elements; lower "
                             "zoffload.optimizer_max_in_cpu)",
                             plan->res_el);
    /* zeroed on the Adam threads: the pages are faulted in parallel (tens of GB: one thread took most of a minute)
     * and the gradient sums start at zero */
    ZO_CHECK(
        zo_adam_pool_parallel_for(e->pool, zero_range, nv->res[k].ptr, bytes, (size_t)64 << 20));
  }
  for (int g = 0; g < nv->n_sgs; g++) {
    sub_group *sg = &nv->sgs[g];
    if (!plan->sg[g].resident) continue;
    sg_slot *sl = &nv->slots[nv->n_slots];
    for (int k = 0; k < SL_KINDS; k++)
      sl->buf[k] = (char *)nv->res[k].ptr + (sg->file_el - nv->res_file_el) * e->esz[k];
    sl->sg = g;
    sg->slot = nv->n_slots++;
    sg->resident = 1;
    sg->phase = SG_LOADED;
  }
  /* Register the sub-group buffers with the ring: their reads and writes go out as fixed-buffer
   * I/O. */
  struct iovec iov[SL_KINDS * 64];
  unsigned n_iov = 0;
  for (int s = 0; s < nbuf && n_iov + SL_KINDS <= sizeof iov / sizeof iov[0]; s++)
    for (int k = 0; k < SL_KINDS; k++)
      iov[n_iov++] = (struct iovec){.iov_base = nv->slots[s].buf[k], .iov_len = slot_bytes[k]};
  if (zo_swap_register_buffers(nv->swap, iov, n_iov) != ZO_OK)
    zo_warn("swap: cannot register %u sub-group buffers with io_uring (%s); using unregistered I/O",
            n_iov, zo_last_error());
  ZO_CHECK(
      eng_gnv_alloc(e, plan)); /* the gradient hand-over's buffers to grad.swp (engine_gradnv.c) */
  zo_info(
      "nvme optimizer state: %d tensors in %d sub-groups of up to %zu elements, %d buffer sets, "
      "swap: %s",
      e->n_params, nv->n_sgs, nv->slot_el, nbuf, zo_swap_describe(nv->swap));
  if (plan->n_res_sgs)
    zo_info(
        "nvme optimizer state: %d of %d sub-groups (%zu of %llu elements) resident in host memory, the rest "
        "streamed",
        plan->n_res_sgs, nv->n_sgs, plan->res_el,
        (unsigned long long)(plan->state_file_el + plan->res_el));
  return ZO_OK;
}

void eng_nv_wait_tasks(struct eng_nv *nv) {
  for (int q = 0; nv && q < nv->n_pieces; q++)
    if (nv->pieces[q].task) zo_adam_task_wait(nv->pieces[q].task, NULL);
}

void eng_nv_free(zo_engine_t *e) {
  struct eng_nv *nv = e->nv;
  if (!nv) return;
  for (int s = 0; s < nv->n_stream_slots; s++) /* the resident slots point into nv->res */
    for (int k = 0; k < SL_KINDS; k++)
      if (nv->slots[s].buf[k]) zo_host_free(nv->slots[s].buf[k], nv->slot_el * e->esz[k], 1);
  for (int k = 0; k < SL_KINDS; k++) eng_host_buf_free(&nv->res[k]);
  free(nv->slots);
  free(nv->pieces);
  free(nv->sgs);
  free(nv->sg_order);
  zo_swap_destroy(nv->swap); /* closes and removes the files and the private directory */
  free(nv);
  e->nv = NULL;
}

/* ---------------------------------------------------------------- views for the other parts */

zo_swap_t *eng_nv_swap(const struct eng_nv *nv) { return nv ? nv->swap : NULL; }

zo_swap_file_t *eng_nv_file(const struct eng_nv *nv, int k) { return nv ? nv->files[k] : NULL; }

uint64_t eng_nv_file_bytes(const struct eng_nv *nv, int k) {
  return nv && nv->files[k] ? zo_swap_file_size(nv->files[k]) : 0;
}

size_t eng_nv_res_bytes(const struct eng_nv *nv, int k) { return nv ? nv->res[k].nbytes : 0; }

size_t eng_nv_stream_el(const struct eng_nv *nv) {
  return nv ? (size_t)nv->n_stream_slots * nv->slot_el : 0;
}

sg_slot *eng_nv_slot(struct eng_nv *nv, int s) { return &nv->slots[s]; }

size_t eng_nv_slot_el(const struct eng_nv *nv) { return nv->slot_el; }

int eng_nv_n_sgs(const struct eng_nv *nv) { return nv->n_sgs; }

int eng_nv_dpu_running(const struct eng_nv *nv) { return nv->dpu_run; }

sub_group *eng_nv_sg(struct eng_nv *nv, int i) { return &nv->sgs[i]; }

int eng_nv_sg_index(const struct eng_nv *nv, const sub_group *g) { return (int)(g - nv->sgs); }

size_t eng_nv_piece_el(const struct eng_nv *nv) { return nv->piece_el; }

void eng_nv_allow_adam(struct eng_nv *nv, const zo_adam_hparams *hp) {
  nv->hp = *hp;
  nv->adam_ok = 1;
}

/* ---------------------------------------------------------------- layout */

/* Queue a read or write of elements [el, el + n_el) of state kind k. */
zo_status eng_swap_io(zo_engine_t *e, int write, int k, uint64_t el, void *buf, uint64_t n_el,
                      zo_swap_req_t **req) {
  const struct eng_nv *nv = e->nv;
  const uint64_t off = el * e->esz[k], nbytes = n_el * e->esz[k];
  /* Inside zo_engine_step() the caller waits for every read: ahead of queued write-backs. */
  zo_status st = write ? zo_swap_submit_write(nv->swap, nv->files[k], off, buf, nbytes, req)
                 : nv->in_step
                     ? zo_swap_submit_read_urgent(nv->swap, nv->files[k], off, buf, nbytes, req)
                     : zo_swap_submit_read(nv->swap, nv->files[k], off, buf, nbytes, req);
  if (write)
    e->ctr.nvme_write_bytes += nbytes;
  else
    e->ctr.nvme_read_bytes += nbytes;
  return st;
}

/* ---------------------------------------------------------------- pipeline */

/*
 * The NVMe optimizer-state pipeline. A sub-group's state (master, exp_avg,
 * exp_avg_sq) moves through one slot of pinned buffers:
 *
 *   IDLE --read--> READING --> LOADED --grads--> GRADS --Adam--> UPDATING --> WRITING --> LOADED (clean)
 *
 * The slot's 4th buffer takes the sub-group's gradient from grad.swp (GRADS)
 * once every gradient in it is on disk (engine_gradnv.c), just before Adam.
 *
 * Reads do not depend on gradients, so they are issued as soon as a slot is
 * free, in the order the sub-groups' gradients completed in the last step
 * (first step: reverse registration order, the order of backward): the
 * next step's first reads start during forward, right after the last
 * write-backs. A sub-group's Adam starts as soon as its state is loaded and
 * every gradient in it has landed, when no step-wide fact is needed first
 * (no clipping, no fp16, no delayed update); otherwise at zo_engine_step().
 * Its write-back is issued the moment Adam is done; the slot keeps the
 * (clean) state afterwards and is taken by the next read only when that
 * sub-group is not needed before the one being read. The pipeline moves on
 * every engine call (fetch, release, grad_ready) without blocking; the swap
 * progress thread keeps the disk busy in between.
 */
static int sg_landed(const struct eng_nv *nv, const sub_group *g) {
  if (nv->dpu_run) return 1; /* the step waited for all; the flags are the next step's meanwhile */
  for (int q = g->first_piece; q < g->first_piece + g->n_pieces; q++) {
    if (!atomic_load_explicit(&nv->pieces[q].p->landed, memory_order_acquire)) return 0;
  }
  return 1;
}

/* Collect the slot's finished requests; *done = 1 when none is left. With
 * @wait, blocks for all of them (keeps the first error). */
zo_status eng_slot_settle(zo_engine_t *e, sg_slot *sl, int wait, int *done) {
  zo_swap_t *sw = e->nv->swap;
  zo_status first = ZO_OK;
  *done = 1;
  for (int k = 0; k < SL_KINDS; k++) {
    if (!sl->req[k]) continue;
    if (!wait) {
      int d;
      ZO_CHECK(zo_swap_poll(sw, sl->req[k], &d));
      if (!d) {
        *done = 0;
        continue;
      }
    }
    zo_status st = eng_swap_wait(e, sw, &sl->req[k]);
    if (first == ZO_OK) first = st;
  }
  return first;
}

static zo_status sg_submit_adam(zo_engine_t *e, sub_group *g) {
  struct eng_nv *nv = e->nv;
  sg_slot *sl = &nv->slots[g->slot];
  for (int q = g->first_piece; q < g->first_piece + g->n_pieces; q++) {
    piece *pc = &nv->pieces[q];
    size_t b = pc->file_el - g->file_el;
    ZO_CHECK(eng_wb_alloc(e, pc->p, pc->off, pc->n, &pc->task, 0));
    ZO_CHECK(eng_submit_adam(e, &nv->hp, pc->p, pc->off, pc->n,
                             (char *)sl->buf[ST_GRAD] + b * e->esz[ST_GRAD],
                             (char *)sl->buf[ST_MASTER] + b * e->esz[ST_MASTER],
                             (char *)sl->buf[ST_EXP_AVG] + b * e->esz[ST_EXP_AVG],
                             (char *)sl->buf[ST_EXP_AVG_SQ] + b * e->esz[ST_EXP_AVG_SQ],
                             &pc->task));
  }
  g->phase = SG_UPDATING;
  return ZO_OK;
}

/* Every gradient of @g is on disk (landed) and its state loaded: read its gradients (grad.swp) into
 * the slot. */
static zo_status sg_read_grads(zo_engine_t *e, sub_group *g) {
  struct eng_nv *nv = e->nv;
  sg_slot *sl = &nv->slots[g->slot];
  /* urgent: small beside the state, and Adam waits on it, while the next sub-groups' state
   * streams */
  const uint64_t nbytes = g->n_el * e->esz[ST_GRAD];
  ZO_CHECK(zo_swap_submit_read_urgent(nv->swap, nv->files[ST_GRAD], g->file_el * e->esz[ST_GRAD],
                                      sl->buf[ST_GRAD], nbytes, &sl->req[ST_GRAD]));
  e->ctr.nvme_read_bytes += nbytes;
  g->phase = SG_GRADS;
  g->grads_in = 1;
  return ZO_OK;
}

/* One staging buffer under the delayed update (eng_dpu_one_stage): whether the uploads that read
 * @g's tensors' working weights there have left it, so that its Adam may write them; with @wait,
 * blocks until they have. */
static zo_status sg_staging_free(zo_engine_t *e, const sub_group *g, int wait, int *free_) {
  *free_ = 1;
  if (!eng_dpu_one_stage(e)) return ZO_OK;
  for (int q = g->first_piece; q < g->first_piece + g->n_pieces && *free_; q++) {
    zo_param_t *p = e->nv->pieces[q].p;
    if (!p->ready) continue;
    if (wait)
      ZO_CHECK(zo_event_synchronize(p->ready));
    else
      ZO_CHECK(zo_event_query(p->ready, free_));
  }
  return ZO_OK;
}

/* Updated in the pipeline's step (a sub-group the delayed update finished and the next step claimed
 * counts). */
static int sg_updated(const sub_group *g) { return g->done || g->dpu_next; }

/* Adam of @g is done (checked, or waited with @wait): publish the working weights (delayed update:
 * at eng_nv_dpu_finish) and issue the write-back. *done = 0 while a task still runs. */
static zo_status sg_finish_adam(zo_engine_t *e, sub_group *g, int wait, int *done) {
  struct eng_nv *nv = e->nv;
  *done = 1;
  for (int q = g->first_piece; q < g->first_piece + g->n_pieces; q++) {
    piece *pc = &nv->pieces[q];
    if (!pc->task) continue;
    if (!wait) {
      ZO_CHECK(zo_adam_task_poll(pc->task, done));
      if (!*done) return ZO_OK;
    }
    if (nv->dpu_run) /* the device computes with the old weights until the next step */
      ZO_CHECK(eng_wait_adam(&pc->task, pc->p, pc->off, pc->n));
    else
      ZO_CHECK(eng_finish_adam(e, &pc->task, pc->p, pc->off, pc->n));
  }
  g->done = 1;
  nv->n_done++;
  if (g->resident) { /* updated in place in host memory: nothing to write */
    g->phase = SG_LOADED;
    nv->res_busy--;
    return ZO_OK;
  }
  sg_slot *sl = &nv->slots[g->slot];
  for (int k = 0; k < ST_KINDS; k++)
    ZO_CHECK(eng_swap_io(e, 1, k, g->file_el, sl->buf[k], g->n_el, &sl->req[k]));
  g->phase = SG_WRITING;
  if (!e->cfg.zero.offload_optimizer.pipeline_write) { /* on disk before anything else moves */
    int d;
    ZO_CHECK(eng_slot_settle(e, sl, 1, &d));
    g->phase = SG_LOADED;
  }
  return ZO_OK;
}

/* A slot for reading the sub-group at order position @pos: a free one, else
 * one holding clean state that is not needed before @pos (done in this step,
 * or needed furthest away). -1 when none. */
static int slot_for_read(const struct eng_nv *nv, int pos) {
  int best = -1, far = pos;
  for (int s = 0; s < nv->n_stream_slots; s++) {
    int gi = nv->slots[s].sg;
    if (gi < 0) return s;
    const sub_group *g = &nv->sgs[gi];
    if (g->phase != SG_LOADED || (g->gheld && !g->done))
      continue; /* held: this step's gradients are in it */
    int next = sg_updated(g) ? INT_MAX : g->pos;
    if (next > far) far = next, best = s;
  }
  return best;
}

static zo_status nv_read_ahead(zo_engine_t *e, int *progress) {
  struct eng_nv *nv = e->nv;
  if (!e->cfg.zero.offload_optimizer
           .pipeline_read) { /* one sub-group at a time, read when its update can start */
    if (!nv->adam_ok) return ZO_OK;
    for (int s = 0; s < nv->n_stream_slots; s++) {
      const int gi = nv->slots[s].sg;
      const sub_group *h = gi >= 0 ? &nv->sgs[gi] : NULL;
      if (h && (h->phase == SG_READING || h->phase == SG_GRADS || h->phase == SG_UPDATING ||
                (h->phase == SG_LOADED && !h->done)))
        return ZO_OK;
    }
  }
  while (nv->pos_read < nv->n_sgs) {
    sub_group *g = &nv->sgs[nv->sg_order[nv->pos_read]];
    if (sg_updated(g) || g->phase == SG_READING || g->phase == SG_LOADED || g->phase == SG_GRADS ||
        g->phase == SG_UPDATING) {
      nv->pos_read++; /* in memory already (or updated) */
      continue;
    }
    if (g->phase == SG_WRITING)
      return ZO_OK; /* last step's write-back: it stays loaded once on disk */
    int s = slot_for_read(nv, g->pos);
    if (s < 0) return ZO_OK;
    sg_slot *sl = &nv->slots[s];
    if (sl->sg >= 0) { /* evict clean state */
      nv->sgs[sl->sg].phase = SG_IDLE;
      nv->sgs[sl->sg].slot = -1;
      nv->sgs[sl->sg].grads_in = 0;
    }
    for (int k = 0; k < ST_KINDS; k++)
      ZO_CHECK(eng_swap_io(e, 0, k, g->file_el, sl->buf[k], g->n_el, &sl->req[k]));
    g->grads_in = sg_landed(nv, g); /* its gradients are on disk already: read with the state */
    if (g->grads_in)
      ZO_CHECK(
          eng_swap_io(e, 0, ST_GRAD, g->file_el, sl->buf[ST_GRAD], g->n_el, &sl->req[ST_GRAD]));
    sl->sg = (int)(g - nv->sgs);
    g->slot = s;
    g->phase = SG_READING;
    nv->pos_read++;
    *progress = 1;
  }
  return ZO_OK;
}

/* Move the pipeline forward as far as it goes without blocking. */
zo_status eng_nv_advance(zo_engine_t *e) {
  if (e->tier != ZO_OFFLOAD_NVME) return ZO_OK;
  struct eng_nv *nv = e->nv;
  ZO_CHECK(eng_gnv_poll(e)); /* gradient writes on disk: their tensors land */
  int progress;
  do {
    progress = 0;
    for (int s = 0; s < nv->n_slots; s++) {
      sg_slot *sl = &nv->slots[s];
      if (sl->sg < 0) continue;
      sub_group *g = &nv->sgs[sl->sg];
      int done;
      if (g->phase == SG_READING || g->phase == SG_WRITING) {
        ZO_CHECK(eng_slot_settle(e, sl, 0, &done));
        if (done) g->phase = SG_LOADED, progress = 1;
      } else if (g->phase == SG_GRADS) {
        ZO_CHECK(eng_slot_settle(e, sl, 0, &done));
        if (done) {
          ZO_CHECK(sg_submit_adam(e, g));
          progress = 1;
        }
      } else if (g->phase == SG_UPDATING) {
        ZO_CHECK(sg_finish_adam(e, g, 0, &done));
        progress |= done;
      } else if (g->resident && g->phase == SG_LOADED && !sg_updated(g) && nv->adam_ok &&
                 sg_landed(nv, g)) {
        /* One resident update in flight at a time: queued behind it, the streamed sub-groups' updates free their
         * buffers for the next reads soon, and the disk stays busy while the CPU updates resident state. The
         * delayed update queues them all at once: the pool works through them while the caller makes no engine
         * call (a GPU's host thread waiting on its stream), and they come first in the order (the last layers). */
        if (nv->res_busy && !nv->dpu_run) continue;
        int free_;
        ZO_CHECK(sg_staging_free(e, g, 0, &free_));
        if (!free_) continue;
        if (!g->grads_in)
          return zo_error_set(ZO_ERR_INVALID_USAGE,
                              "engine: resident sub-group %d has no gradients in memory (a bug)",
                              (int)(g - nv->sgs));
        ZO_CHECK(sg_submit_adam(e, g));
        nv->res_busy++;
        progress = 1;
      } else if (g->phase == SG_LOADED && !sg_updated(g) && nv->adam_ok && sg_landed(nv, g)) {
        int free_;
        ZO_CHECK(sg_staging_free(e, g, 0, &free_));
        if (!free_) continue;
        if (g->grads_in)
          ZO_CHECK(sg_submit_adam(e, g)); /* read with the state */
        else
          ZO_CHECK(sg_read_grads(e, g));
        progress = 1;
      }
    }
    ZO_CHECK(nv_read_ahead(e, &progress));
  } while (progress);
  return ZO_OK;
}

/* zo_engine_step(): every gradient has landed; update the sub-groups not yet updated, blocking only
 * on what the next one in order needs; with @target, only until that one is updated (those before
 * it in order first). Through nv_finish_step(). */
static zo_status nv_update_sgs(zo_engine_t *e, const sub_group *target, double *adam_s) {
  struct eng_nv *nv = e->nv;
  nv->adam_ok = 1;
  int no_slot = 0; /* sub-groups whose read could not start before the step for want of a slot */
  double no_slot_s = 0;
  const sub_group *counted =
      NULL; /* the last of them (it stays first in order until it gets a slot) */
  for (;;) {
    ZO_CHECK(eng_nv_advance(e));
    if (target && sg_updated(target)) return ZO_OK;
    if (nv->n_done == nv->n_sgs) {
      if (no_slot)
        zo_debug(
            "step %lld: %d of %d sub-groups found no free buffer and were read inside the step (waited "
            "%.2f ms); zero_optimization.offload_optimizer.buffer_count %d, up to %d would read them during "
            "forward and backward",
            (long long)e->step + 1, no_slot, nv->n_sgs, no_slot_s * 1e3, nv->n_stream_slots,
            nv->n_stream_slots + no_slot);
      return ZO_OK;
    }
    sub_group *g = NULL; /* the first sub-group in order not yet updated */
    for (int i = 0; i < nv->n_sgs && !g; i++)
      if (!sg_updated(&nv->sgs[nv->sg_order[i]])) g = &nv->sgs[nv->sg_order[i]];
    int done, free_ = 1;
    if (g->phase == SG_LOADED) ZO_CHECK(sg_staging_free(e, g, 0, &free_));
    if (g->phase == SG_READING) {
      ZO_CHECK(eng_slot_settle(e, &nv->slots[g->slot], 1, &done));
      g->phase = SG_LOADED;
    } else if (!free_) { /* the last uploads out of its staging first */
      ZO_CHECK(sg_staging_free(e, g, 1, &free_));
    } else if (g->phase == SG_GRADS) {
      ZO_CHECK(eng_slot_settle(e, &nv->slots[g->slot], 1, &done));
      ZO_CHECK(sg_submit_adam(e, g));
    } else if (g->phase == SG_UPDATING) {
      double t0 = zo_clock_s();
      ZO_CHECK(sg_finish_adam(e, g, 1, &done));
      *adam_s += zo_clock_s() - t0;
    } else {
      /* IDLE, or WRITING (last step's write-back): no slot to read it into
       * yet. Every slot holds work in flight (loaded state that is done or
       * needed later would have been taken): finish the most advanced one,
       * which leaves clean state that the next read may take. */
      static const int most_advanced_first[] = {SG_UPDATING, SG_GRADS, SG_WRITING, SG_READING};
      sg_slot *w = NULL; /* within a phase, the one started first (earliest in the order) */
      for (int i = 0; i < 4 && !w; i++)
        for (int s = 0; s < nv->n_slots; s++) {
          const int gi = nv->slots[s].sg;
          if (gi >= 0 && nv->sgs[gi].phase == most_advanced_first[i] &&
              (!w || nv->sgs[gi].pos < nv->sgs[w->sg].pos))
            w = &nv->slots[s];
        }
      if (!w)
        return zo_error_set(ZO_ERR_INVALID_USAGE,
                            "engine: nvme pipeline stalled at sub-group %d (phase %d)",
                            (int)(g - nv->sgs), g->phase); /* a bug: never expected */
      sub_group *h = &nv->sgs[w->sg];
      double t0 = zo_clock_s();
      if (g->phase == SG_IDLE && g != counted) counted = g, no_slot++;
      if (h->phase == SG_UPDATING) {
        ZO_CHECK(sg_finish_adam(e, h, 1, &done));
        *adam_s += zo_clock_s() - t0;
      } else if (h->phase == SG_GRADS) {
        ZO_CHECK(eng_slot_settle(e, w, 1, &done));
        ZO_CHECK(sg_submit_adam(e, h));
      } else {
        ZO_CHECK(eng_slot_settle(e, w, 1, &done));
        h->phase = SG_LOADED;
      }
      no_slot_s += zo_clock_s() - t0;
    }
  }
}

/* nv_update_sgs() with nv->in_step set: the state reads it waits on go ahead of queued write-backs. */
static zo_status nv_finish_step(zo_engine_t *e, const sub_group *target, double *adam_s) {
  e->nv->in_step = 1;
  const zo_status st = nv_update_sgs(e, target, adam_s);
  e->nv->in_step = 0;
  return st;
}

zo_status eng_nv_finish_step(zo_engine_t *e, const zo_adam_hparams *hp, double *adam_s) {
  struct eng_nv *nv = e->nv;
  if (!nv->adam_ok) nv->hp = *hp;
  return nv_finish_step(e, NULL, adam_s);
}

/* After the step: the next step's order is the order in which sub-groups became complete in this
 * one; then the reads for it start. After a delayed update, the sub-groups the next step's
 * gradients claimed keep that step's flags, and every gradient's landed flag stays (that
 * step's). */
static zo_status nv_end_step(zo_engine_t *e, int after_dpu) {
  struct eng_nv *nv = e->nv;
  for (int i = 0; i < nv->n_sgs; i++) {
    sub_group *g = &nv->sgs[i];
    g->ready_at = 0;
    for (int q = g->first_piece; q < g->first_piece + g->n_pieces; q++)
      if (nv->pieces[q].p->grad_seq > g->ready_at) g->ready_at = nv->pieces[q].p->grad_seq;
  }
  for (int i = 1; i < nv->n_sgs;
       i++) { /* insertion sort by ready_at, stable: usually already in order */
    int x = nv->sg_order[i], j = i - 1;
    while (j >= 0 && nv->sgs[nv->sg_order[j]].ready_at > nv->sgs[x].ready_at) {
      nv->sg_order[j + 1] = nv->sg_order[j];
      j--;
    }
    nv->sg_order[j + 1] = x;
  }
  for (int i = 0; i < nv->n_sgs; i++) {
    sub_group *g = &nv->sgs[i];
    nv->sgs[nv->sg_order[i]].pos = i;
    if (!(after_dpu && g->dpu_next)) {
      g->grads_in = 0; /* the next step's gradients are not in yet */
      g->gtouched = g->gheld = 0;
    }
    g->done = g->dpu_next = 0;
  }
  for (int i = 0; i < e->n_params && !after_dpu; i++)
    atomic_store_explicit(&e->params[i]->landed, 0, memory_order_relaxed);
  nv->n_done = 0;
  nv->pos_read = 0;
  nv->adam_ok = 0;
  nv->dpu_run = 0;
  return eng_nv_advance(e);
}

zo_status eng_nv_end_step(zo_engine_t *e) { return nv_end_step(e, 0); }

/* ---------------------------------------------------------------- delayed update */

/* With zoffload.delayed_param_update the step's sub-group updates are not waited: zo_engine_step()
 * allows them with its hyperparameters (eng_nv_dpu_start) and returns, and they run while the
 * device computes the next step, moved on by every engine call as in the step itself: state reads
 * into free slots, Adam, write-backs, all overlapping. The new working weights stay in the staging
 * buffer until the next zo_engine_step() (or zo_engine_synchronize) finishes what is left
 * (eng_nv_dpu_finish) and queues their uploads. The next step's gradients go to grad.swp and the
 * resident gradient buffers, where the delayed step's gradients still are: the first gradient to
 * reach a sub-group claims it (eng_nv_dpu_claim), which finishes its delayed update first.
 * Sub-groups complete in the order of the last backward, which is the order the next backward
 * reaches them, so the early ones are usually done by then; the claim waits only when the CPU or
 * the disk fell behind. */
zo_status eng_nv_dpu_start(zo_engine_t *e, const zo_adam_hparams *hp) {
  struct eng_nv *nv = e->nv;
  eng_nv_allow_adam(nv, hp);
  nv->dpu_run = 1;
  /* the next step's gradients land as they come; sg_landed() holds for this step's meanwhile */
  for (int i = 0; i < e->n_params; i++)
    atomic_store_explicit(&e->params[i]->landed, 0, memory_order_relaxed);
  return eng_nv_advance(e);
}

zo_status eng_nv_dpu_finish(zo_engine_t *e) {
  struct eng_nv *nv = e->nv;
  if (!nv->dpu_run) return ZO_OK;
  double adam_s = 0; /* not reported, as in eng_nv_dpu_claim */
  if (nv->n_claim_waits)
    zo_debug("step %lld: the gradient hand-over waited %.2f ms for the delayed update of %d of %d "
             "sub-groups",
             (long long)e->step + 1, nv->claim_wait_s * 1e3, nv->n_claim_waits, nv->n_sgs);
  nv->claim_wait_s = 0, nv->n_claim_waits = 0;
  ZO_CHECK(nv_finish_step(e, NULL, &adam_s));
  /* every shard's new working weights, in tensor order (a fetch waits for its own tensor's) */
  for (int i = 0; i < e->n_params; i++)
    ZO_CHECK(eng_queue_upload(e, e->params[i], 0, e->params[i]->shard_n));
  return nv_end_step(e, 1);
}

zo_status eng_nv_dpu_claim(zo_engine_t *e, sub_group *g, int *may_hold) {
  struct eng_nv *nv = e->nv;
  *may_hold = !nv->dpu_run || g->resident;
  if (!nv->dpu_run || g->dpu_next) return ZO_OK;
  if (!g->done) {
    double adam_s = 0;
    const double t0 = zo_clock_s();
    ZO_CHECK(nv_finish_step(e, g, &adam_s)); /* the hand-over waits: its reads go first */
    nv->claim_wait_s += zo_clock_s() - t0;
    nv->n_claim_waits++;
  }
  g->done = g->grads_in = g->gtouched = g->gheld = 0;
  g->dpu_next = 1;
  return ZO_OK;
}

/* Bring the pipeline to rest: reads finished and dropped, updates finished
 * and written, write-backs on disk; every slot free (load_param, get_master
 * and destroy use the slots directly). Keeps the first error. */
zo_status eng_nv_quiesce(zo_engine_t *e) {
  struct eng_nv *nv = e->nv;
  zo_status first = ZO_OK;
  for (int s = 0; s < nv->n_slots; s++) {
    sg_slot *sl = &nv->slots[s];
    int done;
    if (sl->sg >= 0 && nv->sgs[sl->sg].phase == SG_UPDATING) {
      zo_status st = sg_finish_adam(e, &nv->sgs[sl->sg], 1, &done);
      if (first == ZO_OK) first = st;
    }
    zo_status st = eng_slot_settle(e, sl, 1, &done);
    if (first == ZO_OK) first = st;
    if (sl->sg >= 0 && nv->sgs[sl->sg].resident)
      continue; /* permanent: its state and gradients stay in memory */
    /* this step's gradients so far: to grad.swp before the slot goes */
    if (sl->sg >= 0 && nv->sgs[sl->sg].gheld) {
      st = nv->sgs[sl->sg].done ? (nv->sgs[sl->sg].gheld = 0, ZO_OK)
                                : eng_gnv_unhold(e, &nv->sgs[sl->sg]);
      if (first == ZO_OK) first = st;
    }
    if (sl->sg >= 0) {
      nv->sgs[sl->sg].phase = SG_IDLE;
      nv->sgs[sl->sg].slot = -1;
      nv->sgs[sl->sg].grads_in = 0;
    }
    sl->sg = -1;
  }
  nv->pos_read = 0;
  return first;
}

/* ---------------------------------------------------------------- resident range */

size_t eng_nv_span(const zo_engine_t *e, const zo_param_t *p, size_t off, size_t n,
                   void *res[SL_KINDS]) {
  const struct eng_nv *nv = e->nv;
  const uint64_t el = p->file_el + off, r = nv->res_file_el;
  for (int k = 0; k < SL_KINDS; k++) res[k] = NULL;
  if (el >= r) {
    for (int k = 0; k < SL_KINDS; k++) res[k] = (char *)nv->res[k].ptr + (el - r) * e->esz[k];
    return n;
  }
  return el + n <= r ? n : (size_t)(r - el);
}
