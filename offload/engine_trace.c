/*
 * engine_trace.c - the trace of the fetch order (e->trace): the order one
 * step fetched its tensors in, recorded as it goes, adopted at the step's end
 * as the order the next steps are expected to follow, and the position in it.
 * The fetch coordinator (engine_fetch.c) prefetches and evicts along it, the
 * stage-3 gathers (engine_dp3.c) gather ahead along it. Calls no other engine
 * file. Not thread-safe (the engine's owner thread only).
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"

struct eng_trace {
  int *order, len;            /* the adopted trace: tensor indices in fetch order */
  int valid;                  /* adopted, and this step has not left it */
  int pos;                    /* position of the next fetch in it */
  int off;                    /* zo_engine_set_trace(e, 0): fetches neither recorded nor followed */
  int *rec, rec_len, rec_cap; /* this step's fetch order so far */
};

zo_status eng_trace_create(zo_engine_t *e) {
  e->trace = calloc(1, sizeof *e->trace);
  return e->trace ? ZO_OK : zo_error_set(ZO_ERR_OUT_OF_MEMORY, "engine: out of host memory");
}

void eng_trace_free(zo_engine_t *e) {
  struct eng_trace *t = e->trace;
  if (!t) return;
  free(t->order);
  free(t->rec);
  free(t);
  e->trace = NULL;
}

int eng_trace_follow(const struct eng_trace *t) { return t->valid && !t->off; }

int eng_trace_len(const struct eng_trace *t) { return t->len; }

int eng_trace_pos(const struct eng_trace *t) { return t->pos; }

int eng_trace_at(const struct eng_trace *t, int pos) { return t->order[pos]; }

int eng_trace_recorded(const struct eng_trace *t) { return t->rec_len; }

int eng_trace_off(const struct eng_trace *t) { return t->off; }

void eng_trace_set_off(struct eng_trace *t, int off) { t->off = off; }

int eng_trace_next_use(const struct eng_trace *t, int idx) {
  for (int j = t->pos; j < t->len; j++)
    if (t->order[j] == idx) return j;
  return INT_MAX;
}

zo_status eng_trace_record(struct eng_trace *t, int idx, int *left) {
  *left = 0;
  if (t->off) return ZO_OK;
  if (t->rec_len == t->rec_cap) {
    int cap = t->rec_cap ? 2 * t->rec_cap : 256;
    int *n = realloc(t->rec, cap * sizeof *n);
    if (!n) return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "engine: out of host memory");
    t->rec = n;
    t->rec_cap = cap;
  }
  t->rec[t->rec_len++] = idx;
  if (!t->valid) return ZO_OK;
  if (t->pos < t->len && t->order[t->pos] == idx) {
    t->pos++;
    return ZO_OK;
  }
  t->valid = 0;
  *left = 1;
  return ZO_OK;
}

zo_status eng_trace_adopt(struct eng_trace *t) {
  if (t->rec_len == 0) return ZO_OK;
  int same = t->valid && t->len == t->rec_len && t->pos == t->len;
  if (!same) {
    free(t->order);
    t->order = malloc(t->rec_len * sizeof *t->order);
    if (!t->order) {
      t->len = 0, t->valid = 0;
      return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "engine: out of host memory");
    }
    memcpy(t->order, t->rec, t->rec_len * sizeof *t->order);
    t->len = t->rec_len;
  }
  t->valid = 1;
  t->pos = 0;
  t->rec_len = 0;
  return ZO_OK;
}
