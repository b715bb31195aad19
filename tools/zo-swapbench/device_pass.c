/*
 * device_pass.c - zo-swapbench's NVMe -> pinned -> device read pass after the sweep, against the link
 * limit measured in the same run: the pass, its text lines and its JSON. Not the sweep.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "swapbench.h"

/* ---- NVMe -> pinned -> device ----------------------------------------------------------------------------- */

/*
 * The read path of a fetch from the NVMe tier: swap reads of chunk_bytes into a ring of pinned chunks of the
 * bench buffer, each followed, as soon as it lands, by an H2D copy of that chunk to device memory (two
 * device chunks, alternating); a pinned chunk is read into again once its copy has completed (an event per
 * chunk). The handle runs at the best zoffload read setting of the sweep. The link limit is measured first,
 * at the same chunk size, in g_link. Returns 0 (done, or skipped: p->ran 0), -1 when it failed (p->note).
 */
/* The disk's read limit: the best read of any engine, and that engine's name. */
static void pass_disk_limit(dev_pass *p) {
  for (int e = ENG_ZO; e <= ENG_FIO; e++) {
    const result *r = best_of(OP_READ, e);
    if (r && r->gbps > p->disk_read_gbps) {
      p->disk_read_gbps = r->gbps;
      p->disk_engine = eng_name[e];
    }
  }
}

/* The pass's setting: the best read's block size and queue depth, chunks of at most SB_PASS_CHUNK (an eighth of
 * the bench buffer, aligned), up to 16 of them in flight. */
static void pass_geometry(const zo_bench *zb, const result *best, dev_pass *p) {
  p->block_size = best->block_size;
  p->queue_depth = best->queue_depth;
  size_t align = zo_swap_alignment(zb->sw);
  size_t chunk = zb->buf_bytes / 8 < SB_PASS_CHUNK ? zb->buf_bytes / 8 : (size_t)SB_PASS_CHUNK;
  chunk = chunk / align * align;
  if (chunk < align) chunk = align;
  unsigned slots = (unsigned)(zb->buf_bytes / chunk);
  if (slots > 16) slots = 16;
  p->chunk_bytes = chunk;
  p->slots = slots;
}

/* The pass's ring: pinned chunks of the bench buffer (slot k), their reads and events, two device chunks. */
typedef struct {
  zo_stream_t *s;
  zo_event_t *ev[16];
  void *dbuf[2];
  zo_swap_req_t *reqs[16];
  size_t lens[16];
  size_t chunk;
  unsigned slots;
} pass_ring;

/* Set the handle to the best read setting and create the device chunks, the stream and the events. */
static zo_status ring_open(zo_bench *zb, const result *best, pass_ring *r, const char **what) {
  *what = "set_queue";
  zo_status st = zo_swap_set_queue(zb->sw, (size_t)best->block_size, best->queue_depth);
  for (int i = 0; st == ZO_OK && i < 2; i++) {
    *what = "device buffer";
    st = zo_device_malloc(g_dev, r->chunk, &r->dbuf[i]);
  }
  if (st == ZO_OK) {
    *what = "stream";
    st = zo_stream_create(g_dev, &r->s);
  }
  for (unsigned i = 0; st == ZO_OK && i < r->slots; i++) {
    *what = "event";
    st = zo_event_create(g_dev, &r->ev[i]);
  }
  return st;
}

/* Read o->bytes chunk by chunk, each landed chunk copied H2D at once, until done or past @deadline (0: none). */
static zo_status ring_run(zo_bench *zb, const opts *o, pass_ring *r, double deadline, zo_status st,
                          uint64_t *moved, const char **what) {
  const size_t chunk = r->chunk;
  const unsigned slots = r->slots;
  uint64_t nchunks = (o->bytes + chunk - 1) / chunk, head = 0, tail = 0;
  while (st == ZO_OK && tail < nchunks) {
    while (st == ZO_OK && head < nchunks && head - tail < slots &&
           !(deadline && head > tail && zo_clock_s() > deadline)) {
      unsigned k = (unsigned)(head % slots);
      uint64_t off = head * chunk;
      r->lens[k] = o->bytes - off < chunk ? (size_t)(o->bytes - off) : chunk;
      *what = "wait for the copy out of a pinned chunk";
      st = zo_event_synchronize(r->ev[k]); /* its previous H2D has read it */
      if (st != ZO_OK) break;
      *what = "swap read";
      st = zo_swap_submit_read(zb->sw, zb->f, off, zb->buf + (size_t)k * chunk, r->lens[k],
                               &r->reqs[k]);
      if (st == ZO_OK) head++;
    }
    if (st != ZO_OK) break;
    if (deadline && zo_clock_s() > deadline)
      nchunks = head; /* time is up: finish what is in flight */
    if (tail == head) break;
    unsigned k = (unsigned)(tail % slots);
    *what = "swap read";
    st = zo_swap_wait(zb->sw, r->reqs[k]);
    r->reqs[k] = NULL;
    if (st != ZO_OK) break;
    *what = "H2D copy";
    st = zo_memcpy_async(r->s, r->dbuf[tail & 1], zb->buf + (size_t)k * chunk, r->lens[k],
                         ZO_COPY_H2D);
    if (st == ZO_OK) st = zo_event_record(r->ev[k], r->s);
    *moved += r->lens[k];
    tail++;
  }
  return st;
}

/* Collect reads still in flight (after an error) and the stream's copies; the first error wins. */
static zo_status ring_drain(zo_bench *zb, pass_ring *r, zo_status st, const char **what) {
  for (unsigned k = 0; k < r->slots; k++)
    if (r->reqs[k]) zo_swap_wait(zb->sw, r->reqs[k]);
  if (r->s) {
    zo_status ss = zo_stream_synchronize(r->s);
    if (st == ZO_OK && ss != ZO_OK) {
      *what = "H2D copy";
      st = ss;
    }
  }
  return st;
}

/* Destroy the events, the stream and the device chunks (NULL ones are skipped). */
static void ring_free(pass_ring *r) {
  for (unsigned k = 0; k < r->slots; k++) zo_event_destroy(r->ev[k]);
  zo_stream_destroy(r->s);
  for (int i = 0; i < 2; i++)
    if (r->dbuf[i]) zo_device_free(g_dev, r->dbuf[i]);
}

/* The pass's rate against the lower of the disk's read limit and the H2D link limit. */
static int pass_result(dev_pass *p, uint64_t moved) {
  p->bytes = moved;
  p->gbps = p->seconds > 0 ? (double)moved / p->seconds / 1e9 : 0;
  p->limit_gbps = p->disk_read_gbps < p->h2d_gbps ? p->disk_read_gbps : p->h2d_gbps;
  p->ratio = p->limit_gbps > 0 ? p->gbps / p->limit_gbps : 0;
  p->ok = p->gbps > 0;
  if (!p->ok) snprintf(p->note, sizeof p->note, "moved nothing measurable");
  return p->ok ? 0 : -1;
}

int device_pass(zo_bench *zb, const opts *o, dev_pass *p) {
  memset(p, 0, sizeof *p);
  const result *best = o->do_op[OP_READ] ? best_of(OP_READ, ENG_ZO) : NULL;
  if (!g_dev || !best) {
    snprintf(p->note, sizeof p->note, "%s",
             !g_dev              ? "no device"
             : o->do_op[OP_READ] ? "no zoffload read measurement succeeded"
                                 : "reads were not swept (--ops)");
    return 0;
  }
  p->ran = 1;
  pass_disk_limit(p);
  pass_geometry(zb, best, p);
  if (linkbench_measure(g_dev, p->chunk_bytes, 3, &g_link) != 0) {
    snprintf(p->note, sizeof p->note, "link limit: %.200s", g_link.note);
    return -1;
  }
  p->h2d_gbps = g_link.h2d_gbps;

  pass_ring r = {.chunk = p->chunk_bytes, .slots = p->slots};
  const char *what = "set_queue";
  uint64_t moved = 0;
  zo_status st = ring_open(zb, best, &r, &what);
  double t0 = zo_clock_s(), deadline = o->max_sec > 0 ? t0 + o->max_sec : 0;
  st = ring_run(zb, o, &r, deadline, st, &moved, &what);
  st = ring_drain(zb, &r, st, &what);
  p->seconds = zo_clock_s() - t0;
  if (st != ZO_OK)
    snprintf(p->note, sizeof p->note, "%s: %s: %s", what, zo_status_string(st), zo_last_error());
  ring_free(&r);
  if (st != ZO_OK) return -1;
  return pass_result(p, moved);
}

void print_device_pass(void) {
  printf("\nNVMe -> pinned -> device read pass (%s):\n", zo_device_name(g_dev));
  if (!g_pass.ran) {
    printf("  not run: %s\n", g_pass.note[0] ? g_pass.note
                              : g_stop       ? "interrupted"
                                             : "no reads swept");
    return;
  }
  linkbench_print(stdout, "  ", &g_link);
  if (!g_pass.ok) {
    printf("  failed: %s\n", g_pass.note);
    return;
  }
  char bss[32];
  fmt_size(g_pass.block_size, bss, sizeof bss);
  printf("  %.3f GB/s: %" PRIu64
         " bytes in %.3f s (%zu-byte chunks, %u pinned, bs=%s qd=%u) = %.3f of min(disk read "
         "%.3f GB/s [%s], H2D %.3f GB/s)\n",
         g_pass.gbps, g_pass.bytes, g_pass.seconds, g_pass.chunk_bytes, g_pass.slots, bss,
         g_pass.queue_depth, g_pass.ratio, g_pass.disk_read_gbps,
         g_pass.disk_engine ? g_pass.disk_engine : "-", g_pass.h2d_gbps);
}

json_t *device_pass_json(void) {
  json_t *j = json_object();
  json_object_set_new(j, "ran", json_boolean(g_pass.ran));
  json_object_set_new(j, "ok",
                      json_boolean(g_pass.ok || !g_pass.ran)); /* skipped is not a failure */
  if (g_pass.ran && g_pass.ok) {
    json_object_set_new(j, "achieved_gbps", json_real(g_pass.gbps));
    json_object_set_new(j, "seconds", json_real(g_pass.seconds));
    json_object_set_new(j, "bytes", json_integer((json_int_t)g_pass.bytes));
    json_object_set_new(j, "limit_gbps", json_real(g_pass.limit_gbps));
    json_object_set_new(j, "ratio", json_real(g_pass.ratio));
    json_object_set_new(j, "disk_read_gbps", json_real(g_pass.disk_read_gbps));
    json_object_set_new(j, "disk_read_engine",
                        json_string(g_pass.disk_engine ? g_pass.disk_engine : "-"));
    json_object_set_new(j, "h2d_limit_gbps", json_real(g_pass.h2d_gbps));
  }
  if (g_pass.ran) {
    json_object_set_new(j, "chunk_bytes", json_integer((json_int_t)g_pass.chunk_bytes));
    json_object_set_new(j, "pinned_chunks", json_integer(g_pass.slots));
    json_object_set_new(j, "read_block_size", json_integer((json_int_t)g_pass.block_size));
    json_object_set_new(j, "read_queue_depth", json_integer(g_pass.queue_depth));
  }
  if (g_pass.note[0]) json_object_set_new(j, "note", json_string(g_pass.note));
  json_object_set_new(
      j, "definition",
      json_string(
          "swap reads of chunk_bytes into pinned chunks, each copied H2D as soon as it lands, at the sweep's best "
          "zoffload read setting; achieved_gbps = bytes / (first submit to last copy complete); limit_gbps = "
          "min(best read GB/s of any engine in the sweep, H2D limit at chunk_bytes measured in this run)"));
  return j;
}
