/*
 * speeds.c - the machine speeds of zoffload/speeds.h: each figure from the config, the speeds cache (a JSON
 * file this file reads and replaces) or a short measurement with the engine's own swap engine, copies and Adam
 * pool. Not the planner that uses them, and not a benchmark sweep (tools/zo-swapbench, zo-adambench).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "base_internal.h"
#include "zoffload/adam.h"
#include "zoffload/comm.h"
#include "zoffload/dtype.h"
#include "zoffload/pinned.h"
#include "zoffload/speeds.h"
#include "zoffload/swap.h"

#define SP_MIB ((size_t)1 << 20)
#define SP_DISK_BYTES ((size_t)256 << 20) /* default zo_speeds_opts.disk_bytes */
#define SP_DISK_MIN \
  ((size_t)16 << 20) /* a disk short of 4 x this (or of 4 x disk_bytes, when smaller) is skipped */
#define SP_DISK_REQ \
  ((size_t)8 << 20)       /* bytes per swap request at least (the engine's are sub-group pieces) */
#define SP_DISK_SLICES 16 /* requests in flight at most */
#define SP_DISK_BUF_MAX \
  ((size_t)256 << 20) /* pinned bytes for those requests at most (one request at least) */
#define SP_LINK_BYTES ((size_t)64 << 20) /* default zo_speeds_opts.link_bytes */
#define SP_LINK_SLOT_S 0.1               /* an emulated link: a copy of at most this many seconds */
#define SP_ADAM_ELEMS ((size_t)4 << 20)  /* default zo_speeds_opts.adam_elems */
#define SP_ADAM_MIN 4096
#define SP_PASSES 3
#define SP_MAX_PASSES 15
#define SP_PASS_BUDGET_S 0.4 /* another pass of a figure only while its passes took less */
#define SP_RANK_BASE \
  99999800 /* swap directories zoffload-rank99999800.. (zo-swapbench: 9999999N) */
#define SP_RANK_TRIES 64
#define SP_CACHE_MAX ((size_t)16 << 20) /* a larger file at the cache path is not a speeds cache */
#define SP_MARKER "zoffload_speeds"
#define SP_FORMAT 1
#define SP_KEY_CAP (PATH_MAX + 512)

enum { F_NVME_READ, F_NVME_WRITE, F_H2D, F_D2H, F_ADAM, F_COUNT };
static const char *const k_name[F_COUNT] = {"nvme_read", "nvme_write", "h2d", "d2h", "adam"};
static const char *const k_cfg_key[F_COUNT] = {"nvme_read_gbps", "nvme_write_gbps", "h2d_gbps",
                                               "d2h_gbps", "adam_gparams_per_s"};
static const char *const k_label[F_COUNT] = {"NVMe read", "NVMe write", "host->device",
                                             "device->host", "CPU Adam"};

/* One figure being settled: where it goes in zo_speeds, and what is known of it. */
typedef struct figure {
  double *value;
  char *src; /* [ZO_SPEEDS_SRC_CAP] */
  int open;  /* 1: from neither the config nor a missing path/device: the cache or a measurement */
  int measured;         /* 1: measured by this call (written to the cache) */
  char key[SP_KEY_CAP]; /* the cache entry's key */
  char path[PATH_MAX];  /* disk figures: the real path of the nvme path (kept in the entry) */
  char how[ZO_SPEEDS_SRC_CAP]; /* how it was measured, kept in the cache entry */
} figure;

/* A measurement's outcome: the figure and how it was measured, or why not (into figure.src by the
 * caller). */
typedef struct meas {
  double value;
  char how[ZO_SPEEDS_SRC_CAP];
} meas;

static pthread_mutex_t g_lock =
    PTHREAD_MUTEX_INITIALIZER; /* one zo_speeds_get at a time in the process */

/* ------------------------------------------------------------------------------------------------
 * helpers */

/* snprintf into @dst (@cap bytes), cut when longer: a cut source or key still reads and still
 * matches itself. */
static void setf(char *dst, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void setf(char *dst, size_t cap, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(dst, cap, fmt, ap);
  va_end(ap);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* The median of @n (>= 1) values, sorted in place. */
static double median(double *t, int n) {
  qsort(t, (size_t)n, sizeof *t, cmp_double);
  return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

/* One timed pass of a measurement: *sec its seconds. */
typedef zo_status (*pass_fn)(void *ctx, int pass, double *sec);

/* Up to @max_passes passes (another only while they took less than SP_PASS_BUDGET_S); their median
 * into *sec. */
static zo_status timed_passes(pass_fn fn, void *ctx, int max_passes, double *sec, int *n_done) {
  double t[SP_MAX_PASSES], total = 0;
  int n = 0;
  while (n < max_passes && (n == 0 || total < SP_PASS_BUDGET_S)) {
    ZO_CHECK(fn(ctx, n, &t[n]));
    total += t[n++];
  }
  *n_done = n;
  *sec = median(t, n);
  return *sec > 0 ? ZO_OK : zo_error_set(ZO_ERR_SYSTEM, "a pass took no measurable time");
}

static void host_name(char *buf, size_t cap) {
  if (gethostname(buf, cap) != 0) snprintf(buf, cap, "unknown");
  buf[cap - 1] = 0;
}

static void now_text(char *buf, size_t cap) {
  time_t t = time(NULL);
  struct tm tm;
  if (!localtime_r(&t, &tm) || !strftime(buf, cap, "%Y-%m-%d %H:%M:%S", &tm))
    snprintf(buf, cap, "unknown time");
}

/* ZO_SPEEDS_REMEASURE set to anything but "" and "0". */
static int env_remeasure(void) {
  const char *v = getenv("ZO_SPEEDS_REMEASURE");
  return v && v[0] && strcmp(v, "0") != 0;
}

/* ------------------------------------------------------------------------------------------------
 * cache */

zo_status zo_speeds_cache_path(char *buf, size_t cap) {
  if (!buf || !cap)
    return zo_error_set(ZO_ERR_INVALID_ARG, "speeds: cache path buffer is NULL or empty");
  const char *env = getenv("ZO_SPEEDS_CACHE"), *xdg = getenv("XDG_CACHE_HOME"),
             *home = getenv("HOME");
  int n;
  if (env && env[0])
    n = snprintf(buf, cap, "%s", env);
  else if (xdg && xdg[0] == '/')
    n = snprintf(buf, cap, "%s/zoffload/speeds.json", xdg); /* XDG: relative is invalid */
  else if (home && home[0])
    n = snprintf(buf, cap, "%s/.cache/zoffload/speeds.json", home);
  else {
    buf[0] = 0;
    return zo_error_set(ZO_ERR_UNSUPPORTED,
                        "speeds: no cache: ZO_SPEEDS_CACHE, XDG_CACHE_HOME and HOME are unset");
  }
  if (n < 0 || (size_t)n >= cap) {
    buf[0] = 0;
    return zo_error_set(ZO_ERR_INVALID_ARG,
                        "speeds: the cache path needs %d bytes, the buffer has %zu", n + 1, cap);
  }
  return ZO_OK;
}

/* The speeds cache of one call: its entries as read, and whether the file may be replaced. */
typedef struct cache {
  char path[PATH_MAX]; /* "" when there is none */
  /* key -> {"value", "how", "measured_at"}; an empty object when nothing could be read */
  json_t *entries;
  int writable; /* 1: missing, empty, or zoffload's own (marker): may be replaced */
  int dirty;    /* 1: entries added by this call */
} cache;

/* Text that starts as a cache of ours does: '{' then the marker key (written first), whitespace
 * around. */
static int starts_with_marker(const char *s, size_t n) {
  size_t i = 0;
  while (i < n && (s[i] == ' ' || s[i] == '\n' || s[i] == '\r' || s[i] == '\t')) i++;
  if (i >= n || s[i++] != '{') return 0;
  while (i < n && (s[i] == ' ' || s[i] == '\n' || s[i] == '\r' || s[i] == '\t')) i++;
  static const char m[] = "\"" SP_MARKER "\"";
  return n - i >= sizeof m - 1 && !memcmp(s + i, m, sizeof m - 1);
}

/* Read the cache at c->path (set) into c; every problem is a warning naming the file. */
static void cache_read(cache *c) {
  /* O_NONBLOCK: a FIFO does not hang us */
  int fd = open(c->path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT)
      c->writable = 1;
    else if (errno == ELOOP)
      zo_warn("speeds: cache %s is a symbolic link; left alone (figures are measured, not cached)",
              c->path);
    else
      zo_warn("speeds: cache %s cannot be read: %s; figures are measured, not cached", c->path,
              strerror(errno));
    return;
  }
  struct stat sb;
  char *text = NULL;
  json_t *root = NULL;
  const int fs = fstat(fd, &sb);
  if (fs != 0 || !S_ISREG(sb.st_mode)) {
    zo_warn("speeds: cache %s is %s, not a file; left alone (figures are measured, not cached)",
            c->path, fs != 0 ? "unreadable" : zo_file_kind(sb.st_mode));
    goto done;
  }
  if ((uint64_t)sb.st_size > SP_CACHE_MAX) {
    zo_warn(
        "speeds: cache %s holds %lld bytes, more than a speeds cache; left alone (figures are measured, not "
        "cached)",
        c->path, (long long)sb.st_size);
    goto done;
  }
  const size_t n = (size_t)sb.st_size;
  text = malloc(n + 1);
  if (!text) {
    zo_warn(
        "speeds: cache %s: out of host memory reading %zu bytes; figures are measured, not cached",
        c->path, n);
    goto done;
  }
  size_t got = 0;
  int rc = n ? zo_pread_all(fd, text, n, 0, &got) : 0;
  if (rc != 0) {
    zo_warn("speeds: cache %s cannot be read: %s; figures are measured, not cached", c->path,
            rc > 0 ? "it shrank while being read" : strerror(errno));
    goto done;
  }
  if (n == 0) {
    zo_warn("speeds: cache %s is empty; figures are measured and the file rewritten", c->path);
    c->writable = 1;
    goto done;
  }
  json_error_t je;
  root = json_loadb(text, n, JSON_REJECT_DUPLICATES, &je);
  if (!root) {
    if (starts_with_marker(text, n)) {
      char ebuf[256]; /* jansson quotes the bytes near the error: escaped, as config.c does */
      zo_warn(
          "speeds: cache %s is damaged (line %d, column %d: %s); figures are measured and the file rewritten",
          c->path, je.line, je.column, zo_escape(ebuf, sizeof ebuf, je.text, strlen(je.text)));
      c->writable = 1;
    } else {
      zo_warn("speeds: %s is not a zoffload speeds cache (not JSON, no \"" SP_MARKER
              "\" marker); left alone "
              "(figures are measured, not cached)",
              c->path);
    }
    goto done;
  }
  json_t *mk = json_is_object(root) ? json_object_get(root, SP_MARKER) : NULL;
  if (!mk) {
    zo_warn("speeds: %s is not a zoffload speeds cache (no \"" SP_MARKER
            "\" marker); left alone (figures are "
            "measured, not cached)",
            c->path);
    goto done;
  }
  c->writable = 1;
  json_t *ent = json_object_get(root, "entries");
  if (!json_is_integer(mk) || json_integer_value(mk) != SP_FORMAT || !json_is_object(ent)) {
    zo_warn("speeds: cache %s is damaged or of another format (\"" SP_MARKER
            "\" is not %d, or no \"entries\" "
            "object); figures are measured and the file rewritten",
            c->path, SP_FORMAT);
    goto done;
  }
  json_object_update(c->entries, ent);
done:
  json_decref(root);
  free(text);
  close(fd);
}

/* Make the directories above @path that are missing (mode 0700, as XDG asks). 0, or -errno of the
 * first failure. */
static int make_parents(const char *path) {
  char p[PATH_MAX];
  snprintf(p, sizeof p, "%s", path);
  for (char *s = strchr(p + 1, '/'); s; s = strchr(s + 1, '/')) {
    *s = 0;
    if (mkdir(p, 0700) != 0 && errno != EEXIST) return -errno;
    *s = '/';
  }
  return 0;
}

/* Drop the entries of nvme paths that no longer exist (temporary directories): their figures cannot be asked for
 * again, and the file would grow with every run on a new one. */
static void cache_prune(cache *c) {
  const char *key;
  json_t *e, *path;
  void *tmp;
  struct stat sb;
  json_object_foreach_safe(c->entries, tmp, key, e) {
    if (json_is_string(path = json_object_get(e, "path")) &&
        stat(json_string_value(path), &sb) != 0 && errno == ENOENT)
      json_object_del(c->entries, key);
  }
}

/* Replace the cache file with c's entries, atomically (base/tmpfile.c); a failure is a warning. */
static void cache_write(cache *c) {
  cache_prune(c);
  json_t *root = json_object();
  char *text = NULL;
  char tmp[PATH_MAX + 64] = "";
  int fd = -1;
  if (!root || json_object_set_new(root, SP_MARKER, json_integer(SP_FORMAT)) ||
      json_object_set_new(root, "about",
                          json_string(
                              "machine speeds zoffload measured (zoffload/speeds.h), keyed by "
                              "what each depends on; delete the file to measure again")) ||
      json_object_set(root, "entries", c->entries) ||
      !(text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER))) {
    zo_warn("speeds: cache %s: out of host memory; not written", c->path);
    goto done;
  }
  int r = make_parents(c->path);
  if (r < 0) {
    zo_warn("speeds: cache %s: cannot make its directory: %s; not written", c->path, strerror(-r));
    goto done;
  }
  fd = zo_tmpfile_open(c->path, tmp, sizeof tmp);
  if (fd < 0) {
    zo_warn("speeds: cache %s: cannot create a temporary file beside it: %s; not written", c->path,
            strerror(-fd));
    tmp[0] = 0;
    goto done;
  }
  const size_t n = strlen(text);
  text[n] = '\n'; /* json_dumps leaves no newline: the NUL becomes one, written with the text */
  if (zo_pwrite_all(fd, text, n + 1, 0, NULL) != 0 || fsync(fd) != 0) {
    zo_warn("speeds: cache %s: writing %s: %s; not written", c->path, tmp, strerror(errno));
    goto done;
  }
  close(fd);
  fd = -1;
  mode_t found = 0;
  r = zo_tmpfile_place(tmp, c->path, &found);
  if (r == 1)
    zo_warn("speeds: cache %s is %s now; left alone, not written", c->path, zo_file_kind(found));
  else if (r < 0)
    zo_warn("speeds: cache %s: cannot rename %s over it: %s; not written", c->path, tmp,
            strerror(-r));
  else
    tmp[0] = 0; /* placed */
done:
  if (fd >= 0) close(fd);
  if (tmp[0]) unlink(tmp);
  free(text);
  json_decref(root);
}

/* The entry @key of c: 1 with its value and date, or 0 when there is none or it is damaged
 * (warned). */
static int cache_lookup(const cache *c, const char *key, double *value, char *at, size_t cap) {
  json_t *e = json_object_get(c->entries, key);
  if (!e) return 0;
  json_t *jv = json_object_get(e, "value"), *ja = json_object_get(e, "measured_at");
  const double x = json_is_number(jv) ? json_number_value(jv) : NAN;
  if (!(isfinite(x) && x > 0) || !json_is_string(ja)) {
    zo_warn("speeds: cache %s: entry \"%s\" is damaged; measuring it again", c->path, key);
    return 0;
  }
  *value = x;
  snprintf(at, cap, "%s", json_string_value(ja));
  return 1;
}

/* Add (or replace) entry @key; @path: the nvme path a disk figure was measured at (for
 * cache_prune), else NULL. */
static void cache_put(cache *c, const char *key, double value, const char *how, const char *at,
                      const char *path) {
  json_t *e = json_pack("{s:f, s:s, s:s}", "value", value, "how", how, "measured_at", at);
  if (e && path) json_object_set_new(e, "path", json_string(path));
  if (e && json_object_set_new(c->entries, key, e) == 0) c->dirty = 1;
}

/* ------------------------------------------------------------------------------------------------
 * disk */

typedef struct disk_ctx {
  zo_swap_t *sw;
  zo_swap_file_t *f;
  char *buf;       /* n_slices x slice bytes, pinned */
  size_t slice;    /* bytes per request */
  size_t n_slices; /* requests in flight at most */
  uint64_t total;  /* bytes per pass: the whole file */
  int is_write;
} disk_ctx;

/* One pass: the whole file in slice-sized requests, n_slices in flight, each in its own part of the
 * buffer. */
static zo_status disk_pass(void *arg, int pass, double *sec) {
  disk_ctx *d = arg;
  (void)pass;
  zo_swap_req_t *req[SP_DISK_SLICES];
  const uint64_t nreq = (d->total + d->slice - 1) / d->slice;
  uint64_t head = 0, tail = 0;
  zo_status st = ZO_OK;
  const double t0 = zo_clock_s();
  for (;;) {
    while (st == ZO_OK && head < nreq && head - tail < d->n_slices) {
      const uint64_t off = head * d->slice;
      const size_t len = d->total - off < d->slice ? (size_t)(d->total - off) : d->slice;
      char *b = d->buf + (size_t)(head % d->n_slices) * d->slice;
      zo_swap_req_t **r = &req[head % d->n_slices];
      st = d->is_write ? zo_swap_submit_write(d->sw, d->f, off, b, len, r)
                       : zo_swap_submit_read(d->sw, d->f, off, b, len, r);
      if (st == ZO_OK) head++;
    }
    if (tail == head) break;
    zo_status s2 = zo_swap_wait(d->sw, req[tail++ % d->n_slices]);
    if (st == ZO_OK)
      st = s2; /* after an error nothing new is submitted; what is in flight is collected */
  }
  *sec = zo_clock_s() - t0;
  return st;
}

/*
 * Measure the swap engine at @path as zo_speeds_get_ex() says: writes when @want_w (or untimed, once, before
 * reads), reads when @want_r. ZO_OK with *w / *r filled (value 0 for one not wanted); else the error, with the
 * reason as the thread's last error (a disk short of space is ZO_ERR_IO).
 */
static zo_status measure_disk(const zo_config_t *cfg, const char *path, size_t want_bytes,
                              int max_passes, int want_r, int want_w, meas *r, meas *w) {
  struct statvfs vs;
  if (statvfs(path, &vs) != 0)
    return zo_error_set(ZO_ERR_SYSTEM, "statvfs '%s': %s", path, strerror(errno));
  uint64_t avail;
  if (__builtin_mul_overflow((uint64_t)vs.f_bavail, (uint64_t)vs.f_frsize, &avail))
    avail = UINT64_MAX;
  uint64_t total = want_bytes / SP_MIB * SP_MIB;
  if (avail / 4 < total) total = avail / 4 / SP_MIB * SP_MIB;
  const uint64_t need = want_bytes < SP_DISK_MIN ? want_bytes / SP_MIB * SP_MIB : SP_DISK_MIN;
  char b1[32], b2[32], b3[32];
  if (total < need)
    return zo_error_set(ZO_ERR_IO,
                        "the disk is short: %s free at '%s', the measurement needs %s (4 x %s)",
                        zo_format_bytes(b1, sizeof b1, (double)avail), path,
                        zo_format_bytes(b2, sizeof b2, 4.0 * need),
                        zo_format_bytes(b3, sizeof b3, (double)need));

  /* the engine's swap options (offload/engine.c create_swap), in a private directory of our own
   * rank */
  zo_swap_opts so = {.block_size = (size_t)cfg->aio.block_size,
                     .queue_depth = (unsigned)cfg->aio.queue_depth,
                     .register_files = 1,
                     .sqpoll = cfg->zoffload.swap_sqpoll,
                     .sqpoll_idle_ms = 50,
                     .checksum = cfg->zoffload.swap_checksum,
                     .progress_thread = 1};
  zo_swap_t *sw = NULL;
  zo_swap_file_t *f = NULL;
  zo_pinned_pool_t *pool = NULL;
  void *buf = NULL;
  zo_status st = ZO_ERR_INVALID_USAGE;
  for (int k = 0; k < SP_RANK_TRIES && st == ZO_ERR_INVALID_USAGE; k++) {
    so.rank = SP_RANK_BASE + k;
    st = zo_swap_create(path, &so,
                        &sw); /* ZO_ERR_INVALID_USAGE: a live process holds this rank's directory */
  }
  if (st != ZO_OK) return st;
  const size_t align = zo_swap_alignment(sw), bs = zo_swap_block_size(sw);
  const unsigned qd = zo_swap_queue_depth(sw);
  total = total / align * align;
  disk_ctx d = {.sw = sw, .total = total};
  if (total == 0) {
    st = zo_error_set(ZO_ERR_IO, "the disk is short: %s free at '%s'",
                      zo_format_bytes(b1, sizeof b1, (double)avail), path);
    goto done;
  }
  /* requests of max(8 MiB, block size), enough of them in flight to keep 2 x block size x queue depth bytes queued,
   * within SP_DISK_BUF_MAX of pinned memory */
  size_t slice = zo_round_up(bs > SP_DISK_REQ ? bs : SP_DISK_REQ, align), inflight;
  if (slice > total) slice = (size_t)total;
  if (zo_size_mul(bs, (size_t)qd * 2, &inflight)) inflight = SIZE_MAX;
  size_t n_slices = inflight / slice + (inflight % slice != 0);
  const uint64_t nreq = (total + slice - 1) / slice;
  if (n_slices < 4) n_slices = 4;
  if (n_slices > SP_DISK_SLICES) n_slices = SP_DISK_SLICES;
  if (n_slices > nreq) n_slices = (size_t)nreq;
  while (n_slices > 1 && slice > SP_DISK_BUF_MAX / n_slices) n_slices--; /* division: no overflow */
  d.slice = slice, d.n_slices = n_slices;

  zo_pinned_opts po = ZO_PINNED_OPTS_INIT;
  po.decay_ms = 0;
  ZO_CHECK_GOTO(zo_pinned_pool_create(&po, &pool), st, done);
  ZO_CHECK_GOTO(zo_pinned_alloc(pool, slice * n_slices, align, 0, &buf), st, done);
  d.buf = buf;
  { /* registered with the ring, as the engine registers its sub-group buffers: fixed-buffer I/O, as its reads and
     * writes go out (zo-swapbench here: 1.04 GB/s read unregistered, 2.08 registered; this probe went from about
     * 1.05 to 1.25) */
    struct iovec iov = {.iov_base = buf, .iov_len = slice * n_slices};
    /* refused: plain I/O, as the engine then does (it warns) */
    (void)zo_swap_register_buffers(sw, &iov, 1);
  }
  uint64_t *wds =
      buf; /* a pattern, not zeros (a disk may compress zeros); touches every page before timing */
  for (size_t i = 0; i < slice * n_slices / sizeof *wds; i++)
    wds[i] = 0x9e3779b97f4a7c15ull * (i + 1);
  ZO_CHECK_GOTO(zo_swap_file_create(sw, "speeds.swp", total, &f), st, done);
  d.f = f;

  char mode[96];
  setf(mode, sizeof mode, "%s %s, block %s, qd %u",
       zo_swap_is_direct(sw) ? "O_DIRECT" : "buffered (O_DIRECT refused)",
       zo_swap_uses_io_uring(sw) ? "io_uring" : "pread/pwrite threads",
       zo_format_bytes(b2, sizeof b2, (double)bs), qd);
  zo_format_bytes(b1, sizeof b1, (double)total);
  double sec;
  int n;
  /* Reads first, of blocks written by one untimed pass (unwritten ones read as zeros), then the timed writes, so that
   * the timed reads do not follow the timed write passes. (On this project's VM the order made no difference that
   * showed: 1.0-1.15 GB/s read either way, where the engine's update phase got up to 1.9: see docs/placement.md.) */
  d.is_write = 1;
  ZO_CHECK_GOTO(disk_pass(&d, 0, &sec), st, done);
  if (want_r) {
    d.is_write = 0;
    ZO_CHECK_GOTO(timed_passes(disk_pass, &d, max_passes, &sec, &n), st, done);
    r->value = (double)total / sec;
    setf(r->how, sizeof r->how, "measured: %s %s, median of %d passes %.3g s", b1, mode, n, sec);
  }
  if (want_w) {
    d.is_write = 1;
    ZO_CHECK_GOTO(timed_passes(disk_pass, &d, max_passes, &sec, &n), st, done);
    w->value = (double)total / sec;
    setf(w->how, sizeof w->how, "measured: %s %s, median of %d passes %.3g s", b1, mode, n, sec);
  }
done:
  zo_swap_destroy(sw); /* closes and unlinks the file, removes the private directory */
  if (buf) zo_pinned_free(pool, buf);
  zo_pinned_pool_destroy(pool);
  return st;
}

/* ------------------------------------------------------------------------------------------------
 * link */

/* The link rate the engine's copies on @dev will see, GB/s; 0 unlimited (or real: a GPU's). */
static double link_gbps(const zo_config_t *cfg, zo_device_t *dev) {
  zo_link_stats ls;
  const double cur = zo_device_link_stats(dev, &ls) == ZO_OK ? ls.gbps : 0;
  if (cur == 0 && zo_device_get_kind(dev) == ZO_DEVICE_HOST && cfg->zoffload.host_link_gbps > 0)
    return cfg->zoffload
        .host_link_gbps; /* the engine sets it at create (offload/engine.c create_device) */
  return cur;
}

typedef struct link_ctx {
  zo_device_t *dev;
  void *host, *dmem;
  size_t nbytes;
  zo_copy_kind kind;
} link_ctx;

static zo_status link_pass(void *arg, int pass, double *sec) {
  link_ctx *l = arg;
  (void)pass;
  const double t0 = zo_clock_s();
  zo_status st = l->kind == ZO_COPY_H2D
                     ? zo_memcpy(l->dev, l->dmem, l->host, l->nbytes, ZO_COPY_H2D)
                     : zo_memcpy(l->dev, l->host, l->dmem, l->nbytes, ZO_COPY_D2H);
  *sec = zo_clock_s() - t0;
  return st;
}

static zo_status measure_link(const zo_config_t *cfg, zo_device_t *dev, size_t want_bytes,
                              int max_passes, meas *h2d, meas *d2h) {
  const double gbps = link_gbps(cfg, dev);
  zo_link_stats ls;
  const double before = zo_device_link_stats(dev, &ls) == ZO_OK ? ls.gbps : 0;
  size_t nbytes = want_bytes / SP_MIB * SP_MIB;
  if (gbps > 0 && (double)nbytes > gbps * 1e9 * SP_LINK_SLOT_S)
    nbytes = (size_t)(gbps * 1e9 * SP_LINK_SLOT_S) / SP_MIB * SP_MIB;
  if (nbytes < SP_MIB) nbytes = SP_MIB;
  link_ctx l = {.dev = dev};
  zo_pinned_pool_t *pool = NULL;
  zo_status st;
  int set_link = 0;
  for (;;) { /* a device short of memory: a smaller copy, down to 1 MiB */
    st = zo_device_malloc(dev, nbytes, &l.dmem);
    if (st != ZO_ERR_OUT_OF_MEMORY || nbytes <= SP_MIB) break;
    nbytes = nbytes / 2 / SP_MIB * SP_MIB;
  }
  if (st != ZO_OK) return zo_error_prefix(st, "device buffer of %zu bytes", nbytes);
  l.nbytes = nbytes;
  zo_pinned_opts po = ZO_PINNED_OPTS_INIT;
  po.decay_ms = 0;
  ZO_CHECK_GOTO(zo_pinned_pool_create(&po, &pool), st, done);
  ZO_CHECK_GOTO(zo_pinned_alloc(pool, nbytes, 4096, 0, &l.host), st, done);
  memset(l.host, 0x5a, nbytes); /* every page touched before timing */
  if (gbps != before) {
    ZO_CHECK_GOTO(zo_device_set_link_gbps(dev, gbps), st, done);
    set_link = 1;
  }
  /* untimed: the device buffer's first touch (host backend), CUDA's lazy set-up */
  ZO_CHECK_GOTO(zo_memcpy(dev, l.dmem, l.host, nbytes, ZO_COPY_H2D), st, done);
  ZO_CHECK_GOTO(zo_memcpy(dev, l.host, l.dmem, SP_MIB, ZO_COPY_D2H), st, done);
  char b[32], emu[48] = "";
  zo_format_bytes(b, sizeof b, (double)nbytes);
  if (zo_device_get_kind(dev) == ZO_DEVICE_HOST && gbps > 0)
    snprintf(emu, sizeof emu, ", emulated link %g GB/s", gbps);
  else if (zo_device_get_kind(dev) == ZO_DEVICE_HOST)
    snprintf(emu, sizeof emu, ", no emulated link");
  meas *m[2] = {h2d, d2h};
  for (int dir = 0; dir < 2; dir++) {
    double sec;
    int n;
    l.kind = dir ? ZO_COPY_D2H : ZO_COPY_H2D;
    ZO_CHECK_GOTO(timed_passes(link_pass, &l, max_passes, &sec, &n), st, done);
    m[dir]->value = (double)nbytes / sec;
    setf(m[dir]->how, sizeof m[dir]->how, "measured: %s zo_memcpy %s, median of %d passes %.3g s%s",
         b, dir ? "device -> pinned host" : "pinned host -> device", n, sec, emu);
  }
done:
  if (set_link) {
    zo_status s2 = zo_device_set_link_gbps(dev, before); /* as the caller had it */
    if (st == ZO_OK) st = s2;
  }
  zo_device_free(dev, l.dmem);
  if (l.host) zo_pinned_free(pool, l.host);
  zo_pinned_pool_destroy(pool);
  return st;
}

/* ------------------------------------------------------------------------------------------------
 * Adam */

/* The dtypes of the engine's Adam update (offload/engine.c create_tiers, engine_accum.c
 * eng_acc_create). */
typedef struct adam_types {
  zo_dtype grad, state, out;
} adam_types;

static adam_types engine_adam_types(const zo_config_t *cfg) {
  adam_types t;
  t.out = cfg->bf16.enabled ? ZO_DTYPE_BF16 : cfg->fp16.enabled ? ZO_DTYPE_F16 : ZO_DTYPE_F32;
  t.grad = cfg->grad_accum_dtype >= 0             ? (zo_dtype)cfg->grad_accum_dtype
           : cfg->gradient_accumulation_steps > 1 ? ZO_DTYPE_F32
                                                  : t.out;
  t.state = cfg->zoffload.optimizer_state_dtype == ZO_DTYPE_BF16 ? ZO_DTYPE_BF16 : ZO_DTYPE_F32;
  return t;
}

/* An Adam pool made as the engine makes its own (offload/engine.c create_pool). */
static zo_status adam_pool_make(const zo_config_t *cfg, zo_device_t *dev, zo_adam_pool_t **pool) {
  zo_adam_pool_opts po = {.n_threads = cfg->zoffload.adam_threads,
                          .numa_node = dev ? zo_device_numa_node(dev) : -1,
                          .bind = 1,
                          .simd = ZO_SIMD_AUTO};
  zo_launch_info li;
  if (zo_launch_info_get(&li) == ZO_OK && li.local_size > 1)
    po.share_index = li.local_rank, po.share_count = li.local_size;
  zo_status st = zo_adam_pool_create(&po, pool);
  if (st == ZO_OK || po.numa_node < 0) return st;
  po.numa_node = -1; /* as the engine: every node when the device's cannot be used */
  return zo_adam_pool_create(&po, pool);
}

typedef struct adam_ctx {
  zo_adam_pool_t *pool;
  zo_adam_hparams hp;
  zo_adam_shard sh;
} adam_ctx;

static zo_status adam_pass(void *arg, int pass, double *sec) {
  adam_ctx *a = arg;
  a->hp.step = pass + 2; /* the untimed pass was step 1 */
  const double t0 = zo_clock_s();
  zo_status st = zo_adam_pool_update(a->pool, &a->hp, &a->sh, 0, NULL);
  *sec = zo_clock_s() - t0;
  return st;
}

/* A buffer of @n elements of @esz bytes, 64-byte aligned, zero-filled (every page touched). */
static void *adam_buf(size_t n, size_t esz, size_t *nbytes) {
  size_t b;
  if (zo_size_mul(n, esz, &b) || zo_size_round_up(b, 4096, &b)) return NULL;
  void *p = aligned_alloc(4096, b);
  if (p) memset(p, 0, b);
  *nbytes = b;
  return p;
}

static zo_status measure_adam(const zo_config_t *cfg, zo_adam_pool_t *pool, size_t n,
                              int max_passes, meas *out) {
  const adam_types t = engine_adam_types(cfg);
  size_t bytes[5];
  void *b[5] = {adam_buf(n, 4, &bytes[0]), adam_buf(n, zo_dtype_size(t.grad), &bytes[1]),
                adam_buf(n, zo_dtype_size(t.state), &bytes[2]),
                adam_buf(n, zo_dtype_size(t.state), &bytes[3]),
                adam_buf(n, zo_dtype_size(t.out), &bytes[4])};
  zo_status st = ZO_OK;
  for (int i = 0; i < 5; i++)
    if (!b[i])
      st = zo_error_set(ZO_ERR_OUT_OF_MEMORY, "out of host memory for %zu Adam elements", n);
  if (st != ZO_OK) goto done;
  /* weights and gradients of a training run's size (not zeros: every lane does the work it does in
   * training) */
  float *master = b[0], pat[4096];
  for (size_t i = 0; i < n; i++) master[i] = 0.02f * (float)((int)(i % 97) - 48) / 48.0f;
  for (int i = 0; i < 4096; i++) pat[i] = 1e-3f * (float)((i * 37) % 101 - 50) / 50.0f;
  const size_t gsz = zo_dtype_size(t.grad);
  for (size_t off = 0; off < n && st == ZO_OK; off += 4096)
    st = zo_cast((char *)b[1] + off * gsz, t.grad, pat, ZO_DTYPE_F32,
                 n - off < 4096 ? n - off : 4096, 1);
  if (st != ZO_OK) goto done;
  adam_ctx a = {.pool = pool};
  a.hp =
      (zo_adam_hparams){.lr = (float)cfg->optimizer.lr,
                        .beta1 = (float)cfg->optimizer.beta1,
                        .beta2 = (float)cfg->optimizer.beta2,
                        .eps = (float)cfg->optimizer.eps,
                        .weight_decay = (float)cfg->optimizer.weight_decay,
                        .mode = cfg->optimizer.adam_w_mode ? ZO_ADAM_MODE_ADAMW : ZO_ADAM_MODE_L2,
                        .bias_correction = cfg->optimizer.bias_correction,
                        .step = 1,
                        .grad_scale = 1.0f};
  a.sh = (zo_adam_shard){.param = master,
                         .grad = b[1],
                         .grad_dtype = t.grad,
                         .exp_avg = b[2],
                         .exp_avg_sq = b[3],
                         .state_dtype = t.state,
                         .param_out = b[4],
                         .out_dtype = t.out,
                         .n = n};
  /* untimed: first touch, wake-up */
  ZO_CHECK_GOTO(zo_adam_pool_update(pool, &a.hp, &a.sh, 0, NULL), st, done);
  double sec;
  int np;
  ZO_CHECK_GOTO(timed_passes(adam_pass, &a, max_passes, &sec, &np), st, done);
  out->value = (double)n / sec;
  const int nt = zo_adam_pool_threads(pool);
  setf(out->how, sizeof out->how,
       "measured: %zu elements, grad %s, state %s, out %s, %d thread%s %s, median of %d "
       "passes %.3g s",
       n, zo_dtype_name(t.grad), zo_dtype_name(t.state), zo_dtype_name(t.out), nt,
       nt == 1 ? "" : "s", zo_simd_name(zo_simd_resolve(ZO_SIMD_AUTO)), np, sec);
done:
  for (int i = 0; i < 5; i++) free(b[i]);
  return st;
}

/* ------------------------------------------------------------------------------------------------
 * the call */

/* Settle @f from a measurement @m of status @st: measured, or 0 and why (warned). */
static void settle(figure *f, int which, zo_status st, const meas *m) {
  if (st == ZO_OK) {
    *f->value = m->value;
    setf(f->src, ZO_SPEEDS_SRC_CAP, "%s", m->how);
    setf(f->how, sizeof f->how, "%s", m->how);
    f->measured = 1;
  } else {
    *f->value = 0;
    setf(f->src, ZO_SPEEDS_SRC_CAP, "not measured: %s", zo_last_error());
    zo_warn("speeds: %s: not measured: %s", k_label[which], zo_last_error());
  }
  f->open = 0;
}

static void log_figure(const figure *f, int which) {
  const double v = *f->value;
  if (v <= 0)
    zo_info("speeds: %s unknown (%s)", k_label[which], f->src);
  else if (which == F_ADAM)
    zo_info("speeds: %s %.4g G elements/s (%s)", k_label[which], v * 1e-9, f->src);
  else
    zo_info("speeds: %s %.4g GB/s (%s)", k_label[which], v * 1e-9, f->src);
}

/* The options with their defaults filled in; ZO_ERR_INVALID_ARG naming one out of range. */
static zo_status resolve_opts(const zo_speeds_opts *in, zo_speeds_opts *o) {
  *o = in ? *in : (zo_speeds_opts){0};
  if (!o->disk_bytes) o->disk_bytes = SP_DISK_BYTES;
  if (!o->link_bytes) o->link_bytes = SP_LINK_BYTES;
  if (!o->adam_elems) o->adam_elems = SP_ADAM_ELEMS;
  if (!o->max_passes) o->max_passes = SP_PASSES;
  if (o->disk_bytes < SP_MIB || o->link_bytes < SP_MIB)
    return zo_error_set(ZO_ERR_INVALID_ARG,
                        "speeds: opts disk_bytes %zu and link_bytes %zu: each 0 or at least %zu",
                        o->disk_bytes, o->link_bytes, SP_MIB);
  if (o->adam_elems < SP_ADAM_MIN || o->adam_elems > SIZE_MAX / 16)
    return zo_error_set(ZO_ERR_INVALID_ARG, "speeds: opts adam_elems %zu: 0, or %d to %zu",
                        o->adam_elems, SP_ADAM_MIN, SIZE_MAX / 16);
  if (o->max_passes < 1 || o->max_passes > SP_MAX_PASSES)
    return zo_error_set(ZO_ERR_INVALID_ARG, "speeds: opts max_passes %d: 0, or 1 to %d",
                        o->max_passes, SP_MAX_PASSES);
  return ZO_OK;
}

/* The cache keys: what each figure depends on (zoffload/speeds.h). */
static void make_keys(figure *f, const zo_config_t *cfg, zo_device_t *dev, const char *nvme_path,
                      const zo_adam_pool_t *pool) {
  char host[256];
  host_name(host, sizeof host);
  if (f[F_NVME_READ].open || f[F_NVME_WRITE].open) {
    char *real = realpath(nvme_path, NULL);
    struct stat sb;
    const unsigned long long st_dev =
        stat(real ? real : nvme_path, &sb) == 0 ? (unsigned long long)sb.st_dev : 0;
    for (int i = F_NVME_READ; i <= F_NVME_WRITE; i++) {
      setf(f[i].path, sizeof f[i].path, "%s", real ? real : nvme_path);
      /* keyed by the file system the path is on (its device), not the directory: every directory of one disk
       * (a run's temporary ones too) shares one measurement */
      setf(f[i].key, sizeof f[i].key,
           "%s host=%s st_dev=%llu block_size=%lld queue_depth=%lld "
           "checksum=%d sqpoll=%d",
           k_name[i], host, st_dev, (long long)cfg->aio.block_size, (long long)cfg->aio.queue_depth,
           cfg->zoffload.swap_checksum, cfg->zoffload.swap_sqpoll);
    }
    free(real);
  }
  if (f[F_H2D].open || f[F_D2H].open) {
    /* the host backend copies at memcpy speed whatever its name says; a GPU by its name, less a
     * memory limit */
    const int host_dev = zo_device_get_kind(dev) == ZO_DEVICE_HOST;
    const char *name = host_dev ? "host" : zo_device_name(dev), *limit = strstr(name, ", limit ");
    const int name_len = limit ? (int)(limit - name) : (int)strlen(name);
    for (int i = F_H2D; i <= F_D2H; i++)
      setf(f[i].key, sizeof f[i].key, "%s host=%s device=%.*s link_gbps=%.17g", k_name[i], host,
           name_len, name, link_gbps(cfg, dev));
  }
  if (f[F_ADAM].open && pool) {
    const adam_types t = engine_adam_types(cfg);
    setf(f[F_ADAM].key, sizeof f[F_ADAM].key,
         "adam host=%s threads=%d simd=%s grad=%s state=%s out=%s", host,
         zo_adam_pool_threads(pool), zo_simd_name(zo_simd_resolve(ZO_SIMD_AUTO)),
         zo_dtype_name(t.grad), zo_dtype_name(t.state), zo_dtype_name(t.out));
  }
}

zo_status zo_speeds_get(const zo_config_t *cfg, zo_device_t *dev, const char *nvme_path,
                        zo_speeds *out) {
  return zo_speeds_get_ex(cfg, dev, nvme_path, NULL, out);
}

zo_status zo_speeds_get_ex(const zo_config_t *cfg, zo_device_t *dev, const char *nvme_path,
                           const zo_speeds_opts *opts, zo_speeds *out) {
  if (!out) return zo_error_set(ZO_ERR_INVALID_ARG, "speeds: out is NULL");
  zo_speeds_opts o;
  ZO_CHECK(resolve_opts(opts, &o));
  if (nvme_path) {
    struct stat sb;
    if (!nvme_path[0])
      return zo_error_set(ZO_ERR_INVALID_ARG, "speeds: nvme_path is empty (NULL: no disk figures)");
    if (stat(nvme_path, &sb) != 0)
      return zo_error_set(ZO_ERR_INVALID_ARG, "speeds: nvme_path '%s': %s", nvme_path,
                          strerror(errno));
    if (!S_ISDIR(sb.st_mode))
      return zo_error_set(ZO_ERR_INVALID_ARG, "speeds: nvme_path '%s' is %s, not a directory",
                          nvme_path, zo_file_kind(sb.st_mode));
  }
  zo_config_t defaults;
  if (!cfg) {
    zo_config_defaults(&defaults);
    defaults.bf16.enabled = 1;
    cfg = &defaults;
  }
  zo_speeds res;
  memset(&res, 0, sizeof res);
  figure *f = calloc(F_COUNT, sizeof *f);
  cache c = {.entries = json_object()};
  if (!f || !c.entries) {
    free(f);
    json_decref(c.entries);
    return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "speeds: out of host memory");
  }
  double *val[F_COUNT] = {&res.nvme_read_bytes_per_s, &res.nvme_write_bytes_per_s,
                          &res.h2d_bytes_per_s, &res.d2h_bytes_per_s, &res.adam_elems_per_s};
  char *src[F_COUNT] = {res.nvme_read_src, res.nvme_write_src, res.h2d_src, res.d2h_src,
                        res.adam_src};
  const double given[F_COUNT] = {cfg->zoffload.speeds.nvme_read_gbps,
                                 cfg->zoffload.speeds.nvme_write_gbps,
                                 cfg->zoffload.speeds.h2d_gbps, cfg->zoffload.speeds.d2h_gbps,
                                 cfg->zoffload.speeds.adam_gparams_per_s};
  pthread_mutex_lock(&g_lock);
  /* 1. the config; 2. nothing to measure */
  int n_open = 0;
  for (int i = 0; i < F_COUNT; i++) {
    f[i].value = val[i], f[i].src = src[i];
    if (given[i] > 0) {
      *val[i] = given[i] * 1e9;
      setf(src[i], ZO_SPEEDS_SRC_CAP, "config zoffload.speeds.%s", k_cfg_key[i]);
    } else if (i <= F_NVME_WRITE && !nvme_path) {
      setf(src[i], ZO_SPEEDS_SRC_CAP, "no nvme path");
    } else if ((i == F_H2D || i == F_D2H) && !dev) {
      setf(src[i], ZO_SPEEDS_SRC_CAP, "no device");
    } else {
      f[i].open = 1;
      n_open++;
    }
  }
  zo_adam_pool_t *pool = NULL;
  if (f[F_ADAM].open) { /* the pool first: its thread count keys the cache */
    zo_status st = adam_pool_make(cfg, dev, &pool);
    if (st != ZO_OK) {
      settle(&f[F_ADAM], F_ADAM, zo_error_prefix(st, "Adam pool"), NULL);
      n_open--;
    }
  }
  /* 3. the cache */
  if (n_open && !o.no_cache) {
    if (zo_speeds_cache_path(c.path, sizeof c.path) == ZO_OK)
      cache_read(&c);
    else
      zo_info("%s; nothing is cached", zo_last_error());
  }
  make_keys(f, cfg, dev, nvme_path, pool);
  if (n_open && c.path[0] && !o.remeasure && !env_remeasure()) {
    for (int i = 0; i < F_COUNT; i++) {
      char at[64];
      if (!f[i].open || !cache_lookup(&c, f[i].key, f[i].value, at, sizeof at)) continue;
      setf(f[i].src, ZO_SPEEDS_SRC_CAP, "cache %s (measured %s)", c.path, at);
      f[i].open = 0;
    }
  }
  /* 4. measurements */
  meas m[F_COUNT];
  memset(m, 0, sizeof m);
  if (f[F_NVME_READ].open || f[F_NVME_WRITE].open) {
    zo_status st = measure_disk(cfg, nvme_path, o.disk_bytes, o.max_passes, f[F_NVME_READ].open,
                                f[F_NVME_WRITE].open, &m[F_NVME_READ], &m[F_NVME_WRITE]);
    for (int i = F_NVME_READ; i <= F_NVME_WRITE; i++)
      if (f[i].open) settle(&f[i], i, st, &m[i]);
  }
  if (f[F_H2D].open || f[F_D2H].open) {
    zo_status st = measure_link(cfg, dev, o.link_bytes, o.max_passes, &m[F_H2D], &m[F_D2H]);
    for (int i = F_H2D; i <= F_D2H; i++)
      if (f[i].open) settle(&f[i], i, st, &m[i]);
  }
  if (f[F_ADAM].open)
    settle(&f[F_ADAM], F_ADAM, measure_adam(cfg, pool, o.adam_elems, o.max_passes, &m[F_ADAM]),
           &m[F_ADAM]);
  zo_adam_pool_destroy(pool);
  /* the cache gets what was measured */
  if (c.path[0] && !o.no_cache) {
    char at[64];
    now_text(at, sizeof at);
    for (int i = 0; i < F_COUNT; i++)
      if (f[i].measured)
        cache_put(&c, f[i].key, *f[i].value, f[i].how, at, NULL); /* disk: per device, kept */
    if (c.dirty && c.writable) cache_write(&c);
  }
  for (int i = 0; i < F_COUNT; i++) log_figure(&f[i], i);
  pthread_mutex_unlock(&g_lock);
  json_decref(c.entries);
  free(f);
  *out = res;
  return ZO_OK;
}

/* ------------------------------------------------------------------------------------------------
 * app figures */

zo_status zo_speeds_figure(const char *key, zo_speeds_measure_fn measure, void *ctx, int remeasure,
                           double *value, char *src, size_t src_cap) {
  if (!key || !measure || !value || !src || !src_cap)
    return zo_error_set(ZO_ERR_INVALID_ARG, "speeds: zo_speeds_figure: %s is NULL or empty",
                        !key       ? "key"
                        : !measure ? "measure"
                        : !value   ? "value"
                                   : "src");
  const size_t klen = strlen(key);
  if (klen == 0 || klen > 1024)
    return zo_error_set(ZO_ERR_INVALID_ARG,
                        "speeds: zo_speeds_figure: key of %zu bytes (1 to 1024)", klen);
  for (size_t i = 0; i < klen; i++)
    if (key[i] < 0x20 || key[i] > 0x7e)
      return zo_error_set(ZO_ERR_INVALID_ARG,
                          "speeds: zo_speeds_figure: key byte %zu is 0x%02x, not printable ASCII",
                          i, (unsigned char)key[i]);
  *value = 0;
  src[0] = 0;
  char host[256], *full = malloc(klen + sizeof host + 16);
  cache c = {.entries = json_object()};
  if (!full || !c.entries) {
    free(full);
    json_decref(c.entries);
    return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "speeds: out of host memory");
  }
  host_name(host, sizeof host);
  sprintf(full, "app %s host=%s", key, host);
  pthread_mutex_lock(&g_lock);
  if (zo_speeds_cache_path(c.path, sizeof c.path) == ZO_OK)
    cache_read(&c);
  else
    zo_info("%s; nothing is cached", zo_last_error());
  char at[64], how[ZO_SPEEDS_SRC_CAP] = "";
  zo_status st = ZO_OK;
  if (c.path[0] && !remeasure && !env_remeasure() && cache_lookup(&c, full, value, at, sizeof at)) {
    setf(src, src_cap, "cache %s (measured %s)", c.path, at);
  } else if ((st = measure(ctx, value, how, sizeof how)) != ZO_OK) {
    zo_error_set(st, "not measured: %s", how[0] ? how : zo_status_string(st));
  } else if (!(isfinite(*value) && *value > 0)) {
    st = zo_error_set(ZO_ERR_INVALID_ARG,
                      "not measured: the measurement of \"%s\" gave %g, not a positive finite "
                      "number",
                      key, *value);
  }
  if (st != ZO_OK) {
    *value = 0;
    setf(src, src_cap, "%s", zo_last_error());
  } else if (!src[0]) {
    setf(src, src_cap, "measured: %s", how);
    if (c.path[0]) {
      now_text(at, sizeof at);
      cache_put(&c, full, *value, how, at, NULL);
      if (c.dirty && c.writable) cache_write(&c);
    }
  }
  pthread_mutex_unlock(&g_lock);
  json_decref(c.entries);
  free(full);
  return st;
}
