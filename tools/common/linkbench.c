/*
 * linkbench.c - timed zo_memcpy_async loops between pinned host memory and device memory: the link
 * limit zo-stepbench and zo-swapbench report their pipelines against (see linkbench.h). It only
 * measures; it holds no pipeline and changes no device setting.
 */
#include "linkbench.h"

#include <stdint.h>
#include <string.h>
#include <time.h>

#include "zoffload/pinned.h"
#include "zoffload/status.h"

#define LB_TARGET_BYTES ((size_t)256 << 20) /* per direction per run */
#define LB_MIN_COPIES 4
#define LB_MAX_COPIES 4096

static double lb_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Host func queued after a stream's copies: the time they completed. Calls nothing of zoffload or CUDA. */
static void lb_stamp(void *arg) { *(double *)arg = lb_now(); }

typedef struct lb_ctx {
  zo_device_t *dev;
  zo_stream_t *s[2];
  void *host[2], *dmem[2]; /* [0]: H2D source / destination, [1]: D2H */
  size_t chunk;
  int copies;
} lb_ctx;

/* Queue @c->copies copies of one direction on stream @si, then the end stamp. */
static zo_status lb_enqueue(lb_ctx *c, int si, zo_copy_kind kind, double *end) {
  for (int i = 0; i < c->copies; i++) {
    zo_status st = kind == ZO_COPY_H2D
                       ? zo_memcpy_async(c->s[si], c->dmem[0], c->host[0], c->chunk, kind)
                       : zo_memcpy_async(c->s[si], c->host[1], c->dmem[1], c->chunk, kind);
    if (st != ZO_OK) return st;
  }
  return zo_launch_host_func(c->s[si], lb_stamp, end);
}

/*
 * One run: @dirs 1 = H2D only, 2 = D2H only, 3 = both (H2D on stream 0, D2H on stream 1). Fills the
 * seconds each direction took from the first enqueue (0 for a direction not run). Synchronizes both
 * streams before returning, also on error.
 */
static zo_status lb_run(lb_ctx *c, int dirs, double *h2d_s, double *d2h_s) {
  double end[2] = {0, 0};
  zo_status st = ZO_OK;
  double t0 = lb_now();
  if (dirs & 1) st = lb_enqueue(c, 0, ZO_COPY_H2D, &end[0]);
  if (st == ZO_OK && (dirs & 2)) st = lb_enqueue(c, 1, ZO_COPY_D2H, &end[1]);
  zo_status s0 = zo_stream_synchronize(c->s[0]);
  zo_status s1 = zo_stream_synchronize(c->s[1]);
  if (st == ZO_OK) st = s0 != ZO_OK ? s0 : s1;
  *h2d_s = (dirs & 1) ? end[0] - t0 : 0;
  *d2h_s = (dirs & 2) ? end[1] - t0 : 0;
  return st;
}

int linkbench_measure(zo_device_t *dev, size_t chunk_bytes, int reps, linkbench *out) {
  memset(out, 0, sizeof *out);
  out->chunk_bytes = chunk_bytes;
  out->reps = reps;
  if (!dev || chunk_bytes == 0 || reps < 1) {
    snprintf(out->note, sizeof out->note, "bad arguments (device %p, chunk %zu bytes, reps %d)",
             (void *)dev, chunk_bytes, reps);
    return -1;
  }
  size_t n = (LB_TARGET_BYTES + chunk_bytes - 1) / chunk_bytes;
  out->copies = n < LB_MIN_COPIES ? LB_MIN_COPIES : n > LB_MAX_COPIES ? LB_MAX_COPIES : (int)n;

  lb_ctx c;
  memset(&c, 0, sizeof c);
  c.dev = dev;
  c.chunk = chunk_bytes;
  c.copies = out->copies;
  zo_pinned_pool_t *pool = NULL;
  zo_pinned_opts po = ZO_PINNED_OPTS_INIT;
  po.decay_ms = 0;
  const char *what = "pinned pool";
  zo_status st = zo_pinned_pool_create(&po, &pool);
  for (int i = 0; st == ZO_OK && i < 2; i++) {
    what = "pinned host buffer";
    st = zo_pinned_alloc(pool, chunk_bytes, 4096, 0, &c.host[i]);
    if (st == ZO_OK) memset(c.host[i], 0x5a + i, chunk_bytes); /* touch every page before timing */
  }
  for (int i = 0; st == ZO_OK && i < 2; i++) {
    what = "device buffer";
    st = zo_device_malloc(dev, chunk_bytes, &c.dmem[i]);
  }
  for (int i = 0; st == ZO_OK && i < 2; i++) {
    what = "stream";
    st = zo_stream_create(dev, &c.s[i]);
  }
  if (st != ZO_OK) {
    snprintf(out->note, sizeof out->note, "%s of %zu bytes: %s: %s", what, chunk_bytes,
             zo_status_string(st), zo_last_error());
    goto done;
  }
  out->host_pinned = zo_pinned_is_pinned(pool, c.host[0]) && zo_pinned_is_pinned(pool, c.host[1]);
  out->host_registered =
      zo_pinned_is_registered(pool, c.host[0]) && zo_pinned_is_registered(pool, c.host[1]);

  /* Warm-up: one copy each way (first-touch faults of device memory on the host backend, CUDA's lazy setup). */
  double h, d;
  int saved = c.copies;
  c.copies = 1;
  st = lb_run(&c, 3, &h, &d);
  c.copies = saved;
  const double per_dir = (double)chunk_bytes * (double)c.copies;
  for (int r = 0; st == ZO_OK && r < reps; r++) {
    static const int modes[3] = {1, 2, 3};
    for (int m = 0; st == ZO_OK && m < 3; m++) {
      st = lb_run(&c, modes[m], &h, &d);
      if (st != ZO_OK) break;
      double gh = h > 0 ? per_dir / h / 1e9 : 0, gd = d > 0 ? per_dir / d / 1e9 : 0;
      if (modes[m] == 1 && gh > out->h2d_gbps) out->h2d_gbps = gh;
      if (modes[m] == 2 && gd > out->d2h_gbps) out->d2h_gbps = gd;
      if (modes[m] == 3) {
        double both = 2.0 * per_dir / (h > d ? h : d) / 1e9;
        if (both > out->duplex_gbps) {
          out->duplex_gbps = both;
          out->duplex_h2d_gbps = gh;
          out->duplex_d2h_gbps = gd;
        }
      }
    }
  }
  if (st != ZO_OK) {
    snprintf(out->note, sizeof out->note, "copy loop: %s: %s", zo_status_string(st),
             zo_last_error());
    goto done;
  }
  out->ok = out->h2d_gbps > 0 && out->d2h_gbps > 0 && out->duplex_gbps > 0;
  if (!out->ok) snprintf(out->note, sizeof out->note, "a run took no measurable time");

done:
  for (int i = 0; i < 2; i++) zo_stream_destroy(c.s[i]); /* waits for anything still queued */
  for (int i = 0; i < 2; i++)
    if (c.dmem[i]) zo_device_free(dev, c.dmem[i]);
  for (int i = 0; i < 2; i++)
    if (c.host[i]) zo_pinned_free(pool, c.host[i]);
  zo_pinned_pool_destroy(pool);
  return out->ok ? 0 : -1;
}

json_t *linkbench_json(const linkbench *l) {
  json_t *j = json_object();
  json_object_set_new(j, "ok", json_boolean(l->ok));
  json_object_set_new(j, "chunk_bytes", json_integer((json_int_t)l->chunk_bytes));
  json_object_set_new(j, "copies", json_integer(l->copies));
  json_object_set_new(j, "reps", json_integer(l->reps));
  json_object_set_new(j, "h2d_gbps", l->ok ? json_real(l->h2d_gbps) : json_null());
  json_object_set_new(j, "d2h_gbps", l->ok ? json_real(l->d2h_gbps) : json_null());
  json_object_set_new(j, "duplex_gbps", l->ok ? json_real(l->duplex_gbps) : json_null());
  json_object_set_new(j, "duplex_h2d_gbps", l->ok ? json_real(l->duplex_h2d_gbps) : json_null());
  json_object_set_new(j, "duplex_d2h_gbps", l->ok ? json_real(l->duplex_d2h_gbps) : json_null());
  json_object_set_new(j, "host_pinned", json_boolean(l->host_pinned));
  json_object_set_new(j, "host_registered", json_boolean(l->host_registered));
  if (l->note[0]) json_object_set_new(j, "note", json_string(l->note));
  return j;
}

void linkbench_print(FILE *f, const char *indent, const linkbench *l) {
  if (!l->ok) {
    fprintf(f, "%slink limit: not measured (%s)\n", indent, l->note);
    return;
  }
  fprintf(
      f,
      "%slink limit (%d x %zu B copies per direction, best of %d): H2D %.3f GB/s, D2H %.3f GB/s, full duplex "
      "%.3f GB/s (H2D %.3f + D2H %.3f)\n",
      indent, l->copies, l->chunk_bytes, l->reps, l->h2d_gbps, l->d2h_gbps, l->duplex_gbps,
      l->duplex_h2d_gbps, l->duplex_d2h_gbps);
  fprintf(f, "%s  host buffers: %s, %s\n", indent,
          l->host_pinned ? "pinned" : "pageable (mlock refused)",
          l->host_registered ? "registered with CUDA" : "not registered with CUDA");
}
