/*
 * swap_stripe.c - a swap handle over several directories (drives): their
 * private directories, the map from a logical file offset to the part file and
 * offset holding it (fixed-size stripes dealt round-robin), and the piece
 * latency histogram. Not the transfers (swap.c) nor the files (swap_file.c).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base_internal.h"
#include "swap_state.h"

zo_swap_dir_t *zo_swap_dir_at(zo_swap_t *sw, unsigned i) {
  return i == 0 ? &sw->pdir : &sw->xdirs[i - 1];
}

zo_status zo_swap_paths_check(const char *const *paths, unsigned n) {
  /* The same directory twice (another spelling of it included) would collide on its private
   * directory: name both entries instead of reporting a live owner. */
  struct stat st[ZO_SWAP_MAX_PATHS];
  for (unsigned i = 0; i < n && i < ZO_SWAP_MAX_PATHS; i++) {
    if (!paths[i][0]) return zo_error_set(ZO_ERR_INVALID_ARG, "swap: nvme_path[%u] is empty", i);
    if (stat(paths[i], &st[i]) != 0)
      return zo_error_set(ZO_ERR_INVALID_ARG, "swap: nvme_path[%u] '%s': %s", i, paths[i],
                          strerror(errno));
    if (!S_ISDIR(st[i].st_mode))
      return zo_error_set(ZO_ERR_INVALID_ARG, "swap: nvme_path[%u] '%s': %s", i, paths[i],
                          strerror(ENOTDIR));
    for (unsigned j = 0; j < i; j++)
      if (st[j].st_dev == st[i].st_dev && st[j].st_ino == st[i].st_ino)
        return zo_error_set(ZO_ERR_INVALID_ARG,
                            "swap: nvme_path[%u] '%s' is the directory of nvme_path[%u] '%s'; "
                            "give each directory once",
                            i, paths[i], j, paths[j]);
  }
  return ZO_OK;
}

zo_status zo_swap_dirs_open(zo_swap_t *sw, const char *const *paths, unsigned n, int rank) {
  sw->n_dirs = 1;
  if (n < 2) return ZO_OK;
  sw->xdirs = calloc(n - 1, sizeof *sw->xdirs);
  if (!sw->xdirs)
    return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "swap: out of memory for %u directories", n);
  for (unsigned i = 1; i < n; i++) { sw->xdirs[i - 1].fd = sw->xdirs[i - 1].marker_fd = -1; }
  for (unsigned i = 1; i < n; i++) {
    zo_status st_dir = zo_swap_dir_open(&sw->xdirs[i - 1], paths[i], rank);
    if (st_dir != ZO_OK) {
      sw->n_dirs = i; /* the ones opened so far are closed by zo_swap_dirs_close() */
      return zo_error_prefix(st_dir, "nvme_path[%u]", i);
    }
    sw->n_dirs = i + 1;
  }
  return ZO_OK;
}

void zo_swap_dirs_close(zo_swap_t *sw) {
  for (unsigned i = 1; i < sw->n_dirs && sw->xdirs; i++) zo_swap_dir_close(&sw->xdirs[i - 1]);
  free(sw->xdirs);
  sw->xdirs = NULL;
}

void zo_swap_stripe_map(const zo_swap_t *sw, uint64_t off, unsigned *part, uint64_t *poff,
                        uint64_t *contig) {
  if (sw->n_dirs < 2) {
    *part = 0;
    *poff = off;
    *contig = UINT64_MAX;
    return;
  }
  const uint64_t s = off / sw->stripe, in = off % sw->stripe;
  *part = (unsigned)(s % sw->n_dirs);
  *poff = s / sw->n_dirs * sw->stripe + in;
  *contig = sw->stripe - in;
}

uint64_t zo_swap_stripe_part_size(const zo_swap_t *sw, uint64_t nbytes, unsigned part) {
  if (sw->n_dirs < 2) return nbytes;
  const uint64_t n_stripes = (nbytes + sw->stripe - 1) / sw->stripe;
  if (part >= n_stripes) return 0;
  /* the last stripe of this part, and how much of it the file covers */
  const uint64_t last = (n_stripes - 1 - part) / sw->n_dirs * sw->n_dirs + part;
  const uint64_t tail = last == n_stripes - 1 ? nbytes - last * sw->stripe : sw->stripe;
  return last / sw->n_dirs * sw->stripe + tail;
}

int zo_swap_part_fd(const zo_swap_file_t *f, unsigned part, int use_slot, int *fixed) {
  int fd = part ? f->xparts[part - 1].fd : f->fd;
  int slot = part ? f->xparts[part - 1].slot : f->slot;
  *fixed = use_slot && slot >= 0;
  return *fixed ? slot : fd;
}

const char *zo_swap_part_path(const zo_swap_file_t *f, unsigned part) {
  return part ? f->xparts[part - 1].path : f->path;
}

unsigned zo_swap_n_dirs(const zo_swap_t *sw) { return sw ? sw->n_dirs : 0; }
size_t zo_swap_stripe_size(const zo_swap_t *sw) {
  return sw && sw->n_dirs > 1 ? (size_t)sw->stripe : 0;
}

unsigned zo_swap_file_n_parts(const zo_swap_file_t *f) { return f ? f->sw->n_dirs : 0; }

const char *zo_swap_file_part_path(const zo_swap_file_t *f, unsigned part) {
  return f && part < f->sw->n_dirs ? zo_swap_part_path(f, part) : "";
}

zo_status zo_swap_file_locate(const zo_swap_file_t *f, uint64_t offset, unsigned *part,
                              uint64_t *part_offset, uint64_t *contig_bytes) {
  if (!f || !part || !part_offset || !contig_bytes)
    return zo_error_set(ZO_ERR_INVALID_ARG, "swap: file_locate: NULL argument");
  if (offset >= f->size)
    return zo_error_set(ZO_ERR_INVALID_ARG,
                        "swap: file_locate '%s': offset %" PRIu64 " is past the size %" PRIu64,
                        f->path, offset, f->size);
  uint64_t c;
  zo_swap_stripe_map(f->sw, offset, part, part_offset, &c);
  *contig_bytes = c < f->size - offset ? c : f->size - offset;
  return ZO_OK;
}

/* ---- piece latency histogram ------------------------------------------------------------------ */

static unsigned lat_bucket(uint64_t ns) {
  if (ns < 32) return (unsigned)ns;
  unsigned e = 63u - (unsigned)__builtin_clzll(ns); /* >= 5 */
  if (e > 40) return SWAP_LAT_BUCKETS - 1;
  return 32u + (e - 5u) * SWAP_LAT_SUB + (unsigned)((ns >> (e - 4u)) & (SWAP_LAT_SUB - 1));
}

/* The middle of bucket @b, in nanoseconds. */
static double lat_bucket_mid(unsigned b) {
  if (b < 32) return b;
  unsigned e = (b - 32u) / SWAP_LAT_SUB + 5u, sub = (b - 32u) % SWAP_LAT_SUB;
  double lo = (double)(1ull << e) + (double)sub * (double)(1ull << (e - 4u));
  return lo + (double)(1ull << (e - 4u)) / 2;
}

void zo_swap_lat_record(zo_swap_t *sw, int is_write, double sec) {
  if (sec < 0) sec = 0;
  sw->lat_hist[is_write != 0][lat_bucket((uint64_t)(sec * 1e9))]++;
  if (sec > sw->lat_max[is_write != 0]) sw->lat_max[is_write != 0] = sec;
}

zo_status zo_swap_latency_of(const zo_swap_t *sw, int is_write, zo_swap_latency_t *out) {
  memset(out, 0, sizeof *out);
  const uint64_t *h = sw->lat_hist[is_write != 0];
  uint64_t n = 0;
  double sum = 0;
  for (unsigned b = 0; b < SWAP_LAT_BUCKETS; b++) {
    n += h[b];
    sum += (double)h[b] * lat_bucket_mid(b);
  }
  out->n = n;
  if (!n) return ZO_OK;
  out->mean_us = sum / (double)n / 1e3;
  out->max_us = sw->lat_max[is_write != 0] * 1e6;
  const double q[3] = {0.50, 0.99, 0.999};
  double *v[3] = {&out->p50_us, &out->p99_us, &out->p999_us};
  for (int k = 0; k < 3; k++) {
    uint64_t rank = (uint64_t)(q[k] * (double)n + 0.999999), seen = 0; /* ceil, at least 1 */
    if (rank < 1) rank = 1;
    for (unsigned b = 0; b < SWAP_LAT_BUCKETS; b++) {
      seen += h[b];
      if (seen >= rank) {
        *v[k] = lat_bucket_mid(b) / 1e3;
        break;
      }
    }
    if (*v[k] > out->max_us) *v[k] = out->max_us; /* the top bucket's middle may pass the max */
  }
  return ZO_OK;
}
