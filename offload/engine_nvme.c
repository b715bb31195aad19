/*
 * engine_nvme.c - optimizer state on NVMe (offload_optimizer.device "nvme"):
 * sub-groups laid out in the state files, and the read / update / write
 * pipeline across steps. Not here: the I/O itself (swap/).
 */
#include <limits.h>
#include <stdlib.h>

#include "engine_internal.h"

/* ---------------------------------------------------------------- layout */

size_t eng_extent_unit(const zo_engine_t *e) { return eng_extent_unit_at(e, e->swap_align); }

/* Queue a read or write of elements [el, el + n_el) of state kind k. */
zo_status eng_swap_io(zo_engine_t *e, int write, int k, uint64_t el, void *buf, uint64_t n_el, zo_swap_req_t **req) {
  const uint64_t off = el * e->esz[k], nbytes = n_el * e->esz[k];
  /* Inside zo_engine_step() the caller waits for every read: ahead of queued write-backs. */
  zo_status st = write        ? zo_swap_submit_write(e->swap, e->files[k], off, buf, nbytes, req)
                 : e->nv_in_step ? zo_swap_submit_read_urgent(e->swap, e->files[k], off, buf, nbytes, req)
                                 : zo_swap_submit_read(e->swap, e->files[k], off, buf, nbytes, req);
  if (write) e->ctr.nvme_write_bytes += nbytes;
  else e->ctr.nvme_read_bytes += nbytes;
  return st;
}

/* Wait *req on @sw (optimizer state or params.swp), timed as exposed swap wait; *req becomes NULL. */
zo_status eng_swap_wait(zo_engine_t *e, zo_swap_t *sw, zo_swap_req_t **req) {
  double t0 = zo_clock_s();
  zo_status st = zo_swap_wait(sw, *req);
  *req = NULL;
  e->ctr.swap_wait_s += zo_clock_s() - t0;
  return st;
}

/* Elements of a padded extent for n elements (nvme layout). */
uint64_t eng_padded_el(const zo_engine_t *e, size_t n) { return zo_round_up(n, eng_extent_unit(e)); }

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
static int sg_landed(const zo_engine_t *e, const sub_group *g) {
  for (int q = g->first_piece; q < g->first_piece + g->n_pieces; q++) {
    if (!atomic_load_explicit(&e->pieces[q].p->landed, memory_order_acquire)) return 0;
  }
  return 1;
}

/* Collect the slot's finished requests; *done = 1 when none is left. With
 * @wait, blocks for all of them (keeps the first error). */
zo_status eng_slot_settle(zo_engine_t *e, sg_slot *sl, int wait, int *done) {
  zo_status first = ZO_OK;
  *done = 1;
  for (int k = 0; k < SL_KINDS; k++) {
    if (!sl->req[k]) continue;
    if (!wait) {
      int d;
      ZO_CHECK(zo_swap_poll(e->swap, sl->req[k], &d));
      if (!d) {
        *done = 0;
        continue;
      }
    }
    zo_status st = eng_swap_wait(e, e->swap, &sl->req[k]);
    if (first == ZO_OK) first = st;
  }
  return first;
}

static zo_status sg_submit_adam(zo_engine_t *e, sub_group *g) {
  sg_slot *sl = &e->slots[g->slot];
  for (int q = g->first_piece; q < g->first_piece + g->n_pieces; q++) {
    piece *pc = &e->pieces[q];
    size_t b = pc->file_el - g->file_el;
    ZO_CHECK(eng_wb_alloc(e, pc->p, pc->off, pc->n, &pc->task, 0));
    ZO_CHECK(eng_submit_adam(e, &e->nv_hp, pc->p, pc->off, pc->n, (char *)sl->buf[ST_GRAD] + b * e->esz[ST_GRAD],
                             (char *)sl->buf[ST_MASTER] + b * e->esz[ST_MASTER],
                         (char *)sl->buf[ST_EXP_AVG] + b * e->esz[ST_EXP_AVG],
                         (char *)sl->buf[ST_EXP_AVG_SQ] + b * e->esz[ST_EXP_AVG_SQ], &pc->task));
  }
  g->phase = SG_UPDATING;
  return ZO_OK;
}

/* Every gradient of @g is on disk (landed) and its state loaded: read its gradients (grad.swp) into the slot. */
static zo_status sg_read_grads(zo_engine_t *e, sub_group *g) {
  sg_slot *sl = &e->slots[g->slot];
  /* urgent: small beside the state, and Adam waits on it, while the next sub-groups' state streams */
  const uint64_t nbytes = g->n_el * e->esz[ST_GRAD];
  ZO_CHECK(zo_swap_submit_read_urgent(e->swap, e->files[ST_GRAD], g->file_el * e->esz[ST_GRAD], sl->buf[ST_GRAD],
                                      nbytes, &sl->req[ST_GRAD]));
  e->ctr.nvme_read_bytes += nbytes;
  g->phase = SG_GRADS;
  g->grads_in = 1;
  return ZO_OK;
}

/* Adam of @g is done (checked, or waited with @wait): publish the working
 * weights and issue the write-back. *done = 0 while a task still runs. */
static zo_status sg_finish_adam(zo_engine_t *e, sub_group *g, int wait, int *done) {
  *done = 1;
  for (int q = g->first_piece; q < g->first_piece + g->n_pieces; q++) {
    piece *pc = &e->pieces[q];
    if (!pc->task) continue;
    if (!wait) {
      ZO_CHECK(zo_adam_task_poll(pc->task, done));
      if (!*done) return ZO_OK;
    }
    ZO_CHECK(eng_finish_adam(e, &pc->task, pc->p, pc->off, pc->n));
  }
  g->done = 1;
  e->nv_done++;
  if (g->resident) { /* updated in place in host memory: nothing to write */
    g->phase = SG_LOADED;
    e->nv_res_busy--;
    return ZO_OK;
  }
  sg_slot *sl = &e->slots[g->slot];
  for (int k = 0; k < ST_KINDS; k++) ZO_CHECK(eng_swap_io(e, 1, k, g->file_el, sl->buf[k], g->n_el, &sl->req[k]));
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
static int slot_for_read(const zo_engine_t *e, int pos) {
  int best = -1, far = pos;
  for (int s = 0; s < e->n_stream_slots; s++) {
    int gi = e->slots[s].sg;
    if (gi < 0) return s;
    const sub_group *g = &e->sgs[gi];
    if (g->phase != SG_LOADED || (g->gheld && !g->done)) continue; /* held: this step's gradients are in it */
    int next = g->done ? INT_MAX : g->pos;
    if (next > far) far = next, best = s;
  }
  return best;
}

static zo_status nv_read_ahead(zo_engine_t *e, int *progress) {
  if (!e->cfg.zero.offload_optimizer.pipeline_read) { /* one sub-group at a time, read when its update can start */
    if (!e->nv_adam_ok) return ZO_OK;
    for (int s = 0; s < e->n_stream_slots; s++) {
      const int gi = e->slots[s].sg;
      const sub_group *h = gi >= 0 ? &e->sgs[gi] : NULL;
      if (h && (h->phase == SG_READING || h->phase == SG_GRADS || h->phase == SG_UPDATING ||
                (h->phase == SG_LOADED && !h->done)))
        return ZO_OK;
    }
  }
  while (e->nv_pos_read < e->n_sgs) {
    sub_group *g = &e->sgs[e->sg_order[e->nv_pos_read]];
    if (g->done || g->phase == SG_READING || g->phase == SG_LOADED || g->phase == SG_GRADS || g->phase == SG_UPDATING) {
      e->nv_pos_read++; /* in memory already (or updated) */
      continue;
    }
    if (g->phase == SG_WRITING) return ZO_OK; /* last step's write-back: it stays loaded once on disk */
    int s = slot_for_read(e, g->pos);
    if (s < 0) return ZO_OK;
    sg_slot *sl = &e->slots[s];
    if (sl->sg >= 0) { /* evict clean state */
      e->sgs[sl->sg].phase = SG_IDLE;
      e->sgs[sl->sg].slot = -1;
      e->sgs[sl->sg].grads_in = 0;
    }
    for (int k = 0; k < ST_KINDS; k++) ZO_CHECK(eng_swap_io(e, 0, k, g->file_el, sl->buf[k], g->n_el, &sl->req[k]));
    g->grads_in = sg_landed(e, g); /* its gradients are on disk already: read with the state */
    if (g->grads_in) ZO_CHECK(eng_swap_io(e, 0, ST_GRAD, g->file_el, sl->buf[ST_GRAD], g->n_el, &sl->req[ST_GRAD]));
    sl->sg = (int)(g - e->sgs);
    g->slot = s;
    g->phase = SG_READING;
    e->nv_pos_read++;
    *progress = 1;
  }
  return ZO_OK;
}

/* Move the pipeline forward as far as it goes without blocking. */
zo_status eng_nv_advance(zo_engine_t *e) {
  if (e->tier != ZO_OFFLOAD_NVME) return ZO_OK;
  ZO_CHECK(eng_gnv_poll(e)); /* gradient writes on disk: their tensors land */
  int progress;
  do {
    progress = 0;
    for (int s = 0; s < e->n_slots; s++) {
      sg_slot *sl = &e->slots[s];
      if (sl->sg < 0) continue;
      sub_group *g = &e->sgs[sl->sg];
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
      } else if (g->resident && g->phase == SG_LOADED && !g->done && e->nv_adam_ok && sg_landed(e, g)) {
        /* One resident update in flight at a time: queued behind it, the streamed sub-groups' updates free their
         * buffers for the next reads soon, and the disk stays busy while the CPU updates resident state. */
        if (e->nv_res_busy) continue;
        if (!g->grads_in)
          return zo_error_set(ZO_ERR_INVALID_USAGE, "engine: resident sub-group %d has no gradients in memory (a bug)",
                              (int)(g - e->sgs));
        ZO_CHECK(sg_submit_adam(e, g));
        e->nv_res_busy++;
        progress = 1;
      } else if (g->phase == SG_LOADED && !g->done && e->nv_adam_ok && sg_landed(e, g)) {
        if (g->grads_in) ZO_CHECK(sg_submit_adam(e, g)); /* read with the state */
        else ZO_CHECK(sg_read_grads(e, g));
        progress = 1;
      }
    }
    ZO_CHECK(nv_read_ahead(e, &progress));
  } while (progress);
  return ZO_OK;
}

/* zo_engine_step(): every gradient has landed; update the sub-groups not yet
 * updated, blocking only on what the next one in order needs. */
zo_status eng_nv_finish_step(zo_engine_t *e, double *adam_s) {
  e->nv_adam_ok = 1;
  int no_slot = 0; /* sub-groups whose read could not start before the step for want of a slot */
  double no_slot_s = 0;
  const sub_group *counted = NULL; /* the last of them (it stays first in order until it gets a slot) */
  for (;;) {
    ZO_CHECK(eng_nv_advance(e));
    if (e->nv_done == e->n_sgs) {
      if (no_slot)
        zo_debug("step %lld: %d of %d sub-groups found no free buffer and were read inside the step (waited "
                 "%.2f ms); zero_optimization.offload_optimizer.buffer_count %d, up to %d would read them during "
                 "forward and backward", (long long)e->step + 1, no_slot, e->n_sgs, no_slot_s * 1e3, e->n_stream_slots,
                 e->n_stream_slots + no_slot);
      return ZO_OK;
    }
    sub_group *g = NULL; /* the first sub-group in order not yet updated */
    for (int i = 0; i < e->n_sgs && !g; i++)
      if (!e->sgs[e->sg_order[i]].done) g = &e->sgs[e->sg_order[i]];
    int done;
    if (g->phase == SG_READING) {
      ZO_CHECK(eng_slot_settle(e, &e->slots[g->slot], 1, &done));
      g->phase = SG_LOADED;
    } else if (g->phase == SG_GRADS) {
      ZO_CHECK(eng_slot_settle(e, &e->slots[g->slot], 1, &done));
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
        for (int s = 0; s < e->n_slots; s++) {
          const int gi = e->slots[s].sg;
          if (gi >= 0 && e->sgs[gi].phase == most_advanced_first[i] && (!w || e->sgs[gi].pos < e->sgs[w->sg].pos))
            w = &e->slots[s];
        }
      if (!w)
        return zo_error_set(ZO_ERR_INVALID_USAGE, "engine: nvme pipeline stalled at sub-group %d (phase %d)",
                            (int)(g - e->sgs), g->phase); /* a bug: never expected */
      sub_group *h = &e->sgs[w->sg];
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

/* After the step: the next step's order is the order in which sub-groups
 * became complete in this one; then the reads for it start. */
zo_status eng_nv_end_step(zo_engine_t *e) {
  for (int i = 0; i < e->n_sgs; i++) {
    sub_group *g = &e->sgs[i];
    g->ready_at = 0;
    for (int q = g->first_piece; q < g->first_piece + g->n_pieces; q++)
      if (e->pieces[q].p->grad_seq > g->ready_at) g->ready_at = e->pieces[q].p->grad_seq;
  }
  for (int i = 1; i < e->n_sgs; i++) { /* insertion sort by ready_at, stable: usually already in order */
    int x = e->sg_order[i], j = i - 1;
    while (j >= 0 && e->sgs[e->sg_order[j]].ready_at > e->sgs[x].ready_at) {
      e->sg_order[j + 1] = e->sg_order[j];
      j--;
    }
    e->sg_order[j + 1] = x;
  }
  for (int i = 0; i < e->n_sgs; i++) {
    e->sgs[e->sg_order[i]].pos = i;
    e->sgs[i].done = 0;
    e->sgs[i].grads_in = 0; /* the next step's gradients are not in yet */
    e->sgs[i].gtouched = e->sgs[i].gheld = 0;
  }
  for (int i = 0; i < e->n_params; i++) atomic_store_explicit(&e->params[i]->landed, 0, memory_order_relaxed);
  e->nv_done = 0;
  e->nv_pos_read = 0;
  e->nv_adam_ok = 0;
  return eng_nv_advance(e);
}

/* Bring the pipeline to rest: reads finished and dropped, updates finished
 * and written, write-backs on disk; every slot free (load_param, get_master
 * and destroy use the slots directly). Keeps the first error. */
zo_status eng_nv_quiesce(zo_engine_t *e) {
  zo_status first = ZO_OK;
  for (int s = 0; s < e->n_slots; s++) {
    sg_slot *sl = &e->slots[s];
    int done;
    if (sl->sg >= 0 && e->sgs[sl->sg].phase == SG_UPDATING) {
      zo_status st = sg_finish_adam(e, &e->sgs[sl->sg], 1, &done);
      if (first == ZO_OK) first = st;
    }
    zo_status st = eng_slot_settle(e, sl, 1, &done);
    if (first == ZO_OK) first = st;
    if (sl->sg >= 0 && e->sgs[sl->sg].resident) continue; /* permanent: its state and gradients stay in memory */
    if (sl->sg >= 0 && e->sgs[sl->sg].gheld) { /* this step's gradients so far: to grad.swp before the slot goes */
      st = e->sgs[sl->sg].done ? (e->sgs[sl->sg].gheld = 0, ZO_OK) : eng_gnv_unhold(e, &e->sgs[sl->sg]);
      if (first == ZO_OK) first = st;
    }
    if (sl->sg >= 0) {
      e->sgs[sl->sg].phase = SG_IDLE;
      e->sgs[sl->sg].slot = -1;
      e->sgs[sl->sg].grads_in = 0;
    }
    sl->sg = -1;
  }
  e->nv_pos_read = 0;
  return first;
}

/* ---------------------------------------------------------------- resident range */

size_t eng_nv_span(const zo_engine_t *e, const zo_param_t *p, size_t off, size_t n, void *res[SL_KINDS]) {
  const uint64_t el = p->file_el + off, r = e->res_file_el;
  for (int k = 0; k < SL_KINDS; k++) res[k] = NULL;
  if (el >= r) {
    for (int k = 0; k < SL_KINDS; k++) res[k] = (char *)e->res[k].ptr + (el - r) * e->esz[k];
    return n;
  }
  return el + n <= r ? n : (size_t)(r - el);
}
