/*
 * zo-swapbench - measures what the NVMe tier can do on a given directory: sweeps the zoffload swap
 * engine over block sizes, queue depths and ring options against a plain O_DIRECT pread/pwrite baseline
 * and fio's io_uring engine on the same file, and prints the "aio" config block to paste.
 * It is a benchmark and tuning tool (DeepSpeed's ds_io / ds_nvme_tune); it is not a test of correctness.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "zoffload/device.h"
#include "zoffload/pinned.h"
#include "zoffload/status.h"
#include "zoffload/swap.h"

#include "args.h"
#include "linkbench.h"

/* Ring options the swap API may offer; 0 means the header does not have them yet and the
 * sweep reports "n/a" for that axis. */
#define SB_HAVE_REGBUF 1
#define SB_HAVE_SQPOLL 1
/* The private directory is nvme_path/zoffload-rank<SB_RANK>: a rank no training run uses, so a bench
 * beside a live run does not collide with it; a bench killed midway is cleaned up by the next one. */
#define SB_RANK 99999999

#define KiB ((uint64_t)1024)
#define MiB ((uint64_t)1024 * 1024)
#define GiB ((uint64_t)1024 * 1024 * 1024)

#define SB_MAX_LIST 32
#define SB_REQ_BYTES (64 * MiB)  /* zoffload: a measurement is submitted as requests of this size */
#define SB_BUF_BYTES (256 * MiB) /* zoffload: host buffer, reused cyclically across requests */
#define SB_PASS_CHUNK (16 * MiB) /* read pass: bytes per swap read and H2D copy at most (8+ chunks in flight) */
/* SQPOLL variants: the kernel poller spins this long after the last submission before it sleeps.
 * The library default (1 s) would leave it burning a core through the next engine's measurement
 * (on a 2-core machine that halves everyone's throughput); 20 ms never expires within a transfer. */
#define SB_SQPOLL_IDLE_MS 20u

enum { OP_READ = 0, OP_WRITE = 1 };
enum { ENG_ZO = 0, ENG_PREAD = 1, ENG_FIO = 2 };
static const char *const op_name[] = {"read", "write"};
static const char *const eng_name[] = {"zoffload", "pread", "fio"};

/* -1: not applicable / not offered by the API (printed "n/a"); 0 off; 1 on. */
typedef struct variant {
  int regbuf;
  int sqpoll;
} variant;

typedef struct result {
  int op, engine;
  uint64_t block_size;  /* bytes requested on the command line */
  uint64_t block_used;  /* bytes per piece actually used (zoffload rounds to its alignment) */
  unsigned queue_depth;
  int regbuf, sqpoll;   /* -1 n/a */
  double gbps;          /* best of the repetitions, 1e9 bytes per second */
  double gbps_mean;
  double seconds;       /* of the best repetition */
  uint64_t bytes;       /* moved by the best repetition */
  int reps;
  int ok;               /* 0: the measurement failed (error text in note) */
  char note[256];
} result;

typedef struct opts {
  const char *path;
  uint64_t size;
  uint64_t bs[SB_MAX_LIST];
  int n_bs;
  unsigned qd[SB_MAX_LIST];
  int n_qd;
  int do_op[2];
  int reps;
  const char *json;
  const char *plot;
  int quick;
  int no_fio;
  int fio_variants; /* also run fio with --fixedbufs --registerfiles / --sqthread_poll */
  uint64_t bytes;   /* bytes per measurement at most (from offset 0 of the file) */
  double max_sec;   /* seconds per measurement at most (0: no limit) */
  zo_device_kind device; /* the device of the NVMe -> pinned -> device read pass: HOST or CUDA */
} opts;

/* The NVMe -> pinned -> device read pass (after the sweep, on the first variant's handle and file). */
typedef struct dev_pass {
  int ran;                /* 1: attempted (ok says whether it worked); 0: skipped, note says why */
  int ok;
  uint64_t block_size;    /* the best zoffload read setting of the sweep */
  unsigned queue_depth;
  size_t chunk_bytes;     /* bytes per swap read and per H2D copy */
  unsigned slots;         /* pinned chunks in flight */
  uint64_t bytes;         /* moved */
  double seconds, gbps;   /* first submit to last copy complete; bytes / seconds (1e9 B/s) */
  double disk_read_gbps;  /* best read of the sweep, any engine */
  const char *disk_engine;
  double h2d_gbps;        /* H2D limit at chunk_bytes, this run (g_link) */
  double limit_gbps;      /* min(disk_read_gbps, h2d_gbps) */
  double ratio;           /* gbps / limit_gbps */
  char note[256];
} dev_pass;

static result *g_res;
static size_t g_nres, g_capres;
static volatile sig_atomic_t g_stop;
static zo_device_t *g_dev;  /* the device of the read pass */
static linkbench g_link;    /* its link limit, measured at the pass's chunk size */
static dev_pass g_pass;

/* ---- small helpers ---------------------------------------------------------------------------- */

/* SIGINT / SIGTERM: stop measuring, report what was measured, exit 128 + the (first) signal. */
static void on_signal(int sig) {
  if (!g_stop) g_stop = sig;
  zo_request_stop(); /* an emulated link of the device pass stops throttling */
}

/* "1G", "512K", "4MiB", "1048576" -> bytes (binary suffixes). Returns 0 on success. */
static int parse_size(const char *s, uint64_t *out) {
  char *end;
  errno = 0;
  if (!s || !isdigit((unsigned char)*s)) return -1;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno) return -1;
  uint64_t mul = 1;
  switch (toupper((unsigned char)*end)) {
    case 'K': mul = KiB; end++; break;
    case 'M': mul = MiB; end++; break;
    case 'G': mul = GiB; end++; break;
    case 'T': mul = GiB * 1024; end++; break;
    default: break;
  }
  if (mul > 1 && (*end == 'i' || *end == 'I')) end++;
  if (*end == 'B' || *end == 'b') end++;
  if (*end) return -1;
  if (v && mul > UINT64_MAX / v) return -1;
  *out = (uint64_t)v * mul;
  return 0;
}

static void fmt_size(uint64_t b, char *out, size_t n) {
  if (b >= GiB && b % GiB == 0)
    snprintf(out, n, "%" PRIu64 "G", b / GiB);
  else if (b >= MiB && b % MiB == 0)
    snprintf(out, n, "%" PRIu64 "M", b / MiB);
  else if (b >= KiB && b % KiB == 0)
    snprintf(out, n, "%" PRIu64 "K", b / KiB);
  else
    snprintf(out, n, "%" PRIu64, b);
}

static const char *tri(int v) { return v < 0 ? "n/a" : v ? "on" : "off"; }

static result *res_add(void) {
  if (g_nres == g_capres) {
    size_t cap = g_capres ? 2 * g_capres : 64;
    result *r = realloc(g_res, cap * sizeof *r);
    if (!r) {
      fprintf(stderr, "zo-swapbench: out of memory\n");
      exit(2);
    }
    g_res = r;
    g_capres = cap;
  }
  result *r = &g_res[g_nres++];
  memset(r, 0, sizeof *r);
  return r;
}

/* ---- progress bar (stderr, only on a terminal) -------------------------------------------------- */

static int g_tty;
static unsigned g_steps, g_step;

static void progress(const char *what) {
  if (!g_tty) return;
  const int width = 30;
  unsigned filled = g_steps ? (unsigned)((uint64_t)g_step * width / g_steps) : 0;
  char bar[64];
  for (int i = 0; i < width; i++) bar[i] = i < (int)filled ? '#' : '.';
  bar[width] = 0;
  fprintf(stderr, "\r[%s] %3u/%-3u %-40.40s", bar, g_step, g_steps, what);
  fflush(stderr);
}

static void progress_done(void) {
  if (g_tty) fprintf(stderr, "\r%-90s\r", "");
}

/* ---- host buffers --------------------------------------------------------------------------------- */

static void *buf_alloc(size_t n, size_t align) {
  void *p = NULL;
  if (align < 4096) align = 4096;
  if (posix_memalign(&p, align, n)) return NULL;
  /* Touch every page now, so no page fault lands in a timed region; a pattern, not zeros. */
  uint64_t *w = p;
  for (size_t i = 0; i < n / 8; i++) w[i] = 0x9e3779b97f4a7c15ull * (i + 1);
  return p;
}

/* ---- engine 1: zoffload swap -------------------------------------------------------------------- */

typedef struct zo_bench {
  zo_swap_t *sw;
  zo_swap_file_t *f;
  zo_pinned_pool_t *pool;
  char *buf;
  size_t buf_bytes;
  int sqpoll;
} zo_bench;

static void zo_bench_close(zo_bench *zb) {
  zo_swap_destroy(zb->sw); /* closes and unlinks the file, removes the private directory */
  if (zb->buf) zo_pinned_free(zb->pool, zb->buf);
  zo_pinned_pool_destroy(zb->pool);
  memset(zb, 0, sizeof *zb);
}

/*
 * One measurement: the first @bytes of the file in SB_REQ_BYTES requests, a window of them
 * outstanding (enough to keep queue_depth pieces busy twice over, as the engine sees many tensors in
 * flight), the next submitted as the oldest completes; no new request after @max_sec. Returns 0 with
 * the seconds taken and the bytes moved, or -1 with the error printed.
 */
static int zo_transfer(zo_bench *zb, int is_write, uint64_t bytes, double max_sec, double *sec, uint64_t *moved) {
  size_t nreq = (size_t)((bytes + SB_REQ_BYTES - 1) / SB_REQ_BYTES);
  uint64_t inflight = (uint64_t)zo_swap_block_size(zb->sw) * zo_swap_queue_depth(zb->sw);
  size_t window = (size_t)((2 * inflight + SB_REQ_BYTES - 1) / SB_REQ_BYTES);
  if (window < 2) window = 2;
  if (window > nreq) window = nreq;
  zo_swap_req_t **reqs = calloc(nreq, sizeof *reqs);
  size_t *lens = calloc(nreq, sizeof *lens);
  if (!reqs || !lens) {
    free(reqs);
    free(lens);
    return -1;
  }
  int rc = 0;
  size_t head = 0, tail = 0; /* requests [tail, head) outstanding */
  uint64_t done = 0;
  double t0 = zo_clock_s(), deadline = max_sec > 0 ? t0 + max_sec : 0;
  while (rc == 0 && (tail < head || head < nreq)) {
    while (rc == 0 && head < nreq && head - tail < window && !(deadline && head > tail && zo_clock_s() > deadline)) {
      uint64_t off = (uint64_t)head * SB_REQ_BYTES;
      size_t len = bytes - off < SB_REQ_BYTES ? (size_t)(bytes - off) : (size_t)SB_REQ_BYTES;
      char *b = zb->buf + (size_t)(off % zb->buf_bytes);
      if (b + len > zb->buf + zb->buf_bytes) b = zb->buf; /* buf_bytes is a multiple of SB_REQ_BYTES or >= bytes */
      zo_status st = is_write ? zo_swap_submit_write(zb->sw, zb->f, off, b, len, &reqs[head])
                              : zo_swap_submit_read(zb->sw, zb->f, off, b, len, &reqs[head]);
      if (st != ZO_OK) {
        fprintf(stderr, "\nzo-swapbench: submit: %s: %s\n", zo_status_string(st), zo_last_error());
        rc = -1;
        break;
      }
      lens[head++] = len;
    }
    if (deadline && zo_clock_s() > deadline) nreq = head; /* time is up: finish what is in flight */
    if (tail < head) {
      zo_status st = zo_swap_wait(zb->sw, reqs[tail]);
      if (st != ZO_OK && rc == 0) {
        fprintf(stderr, "\nzo-swapbench: %s: %s: %s\n", op_name[is_write], zo_status_string(st), zo_last_error());
        rc = -1;
      }
      done += lens[tail++];
    }
  }
  while (tail < head) zo_swap_wait(zb->sw, reqs[tail++]); /* after an error: collect the rest */
  *sec = zo_clock_s() - t0;
  *moved = done;
  free(reqs);
  free(lens);
  /* Let an SQPOLL thread go to sleep before anything else is timed (see SB_SQPOLL_IDLE_MS). */
  if (zb->sqpoll) usleep(2 * SB_SQPOLL_IDLE_MS * 1000);
  return rc;
}

/* One handle per ring variant for the whole sweep: created at the largest queue depth (the ring's
 * size), switched between block sizes and queue depths with zo_swap_set_queue(), one preallocated file
 * written once untimed. The host buffer comes from the pinned pool (mlocked, pre-touched). */
static int zo_bench_open(zo_bench *zb, const opts *o, unsigned qd_max, variant v, int rank) {
  memset(zb, 0, sizeof *zb);
  zo_swap_opts so;
  memset(&so, 0, sizeof so);
  so.block_size = (size_t)o->bs[0];
  so.queue_depth = qd_max;
  so.rank = rank;
#if SB_HAVE_SQPOLL
  so.sqpoll = v.sqpoll > 0;
  so.sqpoll_idle_ms = SB_SQPOLL_IDLE_MS;
#endif
#if SB_HAVE_REGBUF
  so.register_files = v.regbuf > 0; /* the "registered" variant registers the file and the buffer */
#endif
  zo_status st = zo_swap_create(o->path, &so, &zb->sw);
  if (st != ZO_OK) {
    fprintf(stderr, "zo-swapbench: %s: %s\n", zo_status_string(st), zo_last_error());
    return -1;
  }
  zb->sqpoll = zo_swap_uses_sqpoll(zb->sw);
  st = zo_swap_file_create(zb->sw, "swapbench.dat", o->size, &zb->f);
  if (st != ZO_OK) {
    fprintf(stderr, "zo-swapbench: %s: %s\n", zo_status_string(st), zo_last_error());
    zo_bench_close(zb);
    return -1;
  }
  zb->buf_bytes = o->size < SB_BUF_BYTES ? (size_t)o->size : (size_t)SB_BUF_BYTES;
  zo_pinned_opts po = ZO_PINNED_OPTS_INIT;
  po.decay_ms = 0;
  st = zo_pinned_pool_create(&po, &zb->pool);
  if (st == ZO_OK) st = zo_pinned_alloc(zb->pool, zb->buf_bytes, zo_swap_alignment(zb->sw), 0, (void **)&zb->buf);
  if (st != ZO_OK) {
    fprintf(stderr, "zo-swapbench: pinned buffer of %zu bytes: %s: %s\n", zb->buf_bytes, zo_status_string(st),
            zo_last_error());
    zo_bench_close(zb);
    return -1;
  }
  /* Touch every page now (mlock already faulted them in when it was granted), with a pattern. */
  uint64_t *w = (uint64_t *)zb->buf;
  for (size_t i = 0; i < zb->buf_bytes / 8; i++) w[i] = 0x9e3779b97f4a7c15ull * (i + 1);
#if SB_HAVE_REGBUF
  if (v.regbuf > 0) {
    struct iovec iov = {zb->buf, zb->buf_bytes};
    st = zo_swap_register_buffers(zb->sw, &iov, 1);
    if (st != ZO_OK) { /* e.g. RLIMIT_MEMLOCK too low: measure unregistered, reported as regbuf off */
      static int warned;
      if (!warned++)
        fprintf(stderr, "zo-swapbench: register buffers: %s: %s; measuring without\n", zo_status_string(st),
                zo_last_error());
    }
  }
#else
  (void)v;
#endif
  /* Write the whole file once, untimed, so reads hit written extents (an unwritten extent reads as
   * zeros without touching the disk) and timed writes overwrite allocated, written blocks. */
  double sec;
  uint64_t moved;
  if (zo_swap_set_queue(zb->sw, 4 * MiB, qd_max < 8 ? qd_max : 8) != ZO_OK ||
      zo_transfer(zb, 1, o->size, 0, &sec, &moved) != 0) {
    zo_bench_close(zb);
    return -1;
  }
  return 0;
}

/* ---- engine 2: O_DIRECT pread/pwrite threads -------------------------------------------------------- */

/* Baseline: queue_depth threads (one thread at QD 1), each with its own block_size buffer, issuing
 * blocking pread/pwrite of block_size bytes. Thread t owns blocks t, t+Q, t+2Q, ... of the file
 * (disjoint interleaved stripes), so at any moment about Q sequential-neighbour blocks are in flight,
 * as with the ring. Short transfers are continued; errors stop that thread. */
typedef struct pr_shared {
  int fd, is_write;
  uint64_t size, bs;  /* size: bytes to move at most, from offset 0 */
  double deadline;    /* no new block after this (zo_clock_s() clock); 0: none */
  uint64_t moved;     /* bytes moved, summed under mu */
  unsigned nthreads;
  pthread_barrier_t start;
  int err;
  uint64_t err_off;
  pthread_mutex_t mu;
} pr_shared;

typedef struct pr_thread {
  pr_shared *sh;
  unsigned idx;
  char *buf;
  pthread_t tid;
} pr_thread;

static void *pr_main(void *arg) {
  pr_thread *t = arg;
  pr_shared *sh = t->sh;
  pthread_barrier_wait(&sh->start);
  uint64_t moved = 0;
  for (uint64_t blk = t->idx; blk * sh->bs < sh->size; blk += sh->nthreads) {
    if (sh->deadline && moved && zo_clock_s() > sh->deadline) break;
    uint64_t off = blk * sh->bs;
    size_t len = sh->size - off < sh->bs ? (size_t)(sh->size - off) : (size_t)sh->bs;
    size_t done = 0;
    while (done < len) {
      ssize_t n = sh->is_write ? pwrite(sh->fd, t->buf + done, len - done, (off_t)(off + done))
                               : pread(sh->fd, t->buf + done, len - done, (off_t)(off + done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        pthread_mutex_lock(&sh->mu);
        if (!sh->err) {
          sh->err = n < 0 ? errno : EIO;
          sh->err_off = off + done;
        }
        pthread_mutex_unlock(&sh->mu);
        return NULL;
      }
      done += (size_t)n;
    }
    moved += len;
  }
  pthread_mutex_lock(&sh->mu);
  sh->moved += moved;
  pthread_mutex_unlock(&sh->mu);
  return NULL;
}

static int pread_transfer(const char *path, int direct, int is_write, uint64_t size, double max_sec, uint64_t bs,
                          unsigned qd, double *sec, uint64_t *moved, char *note, size_t note_n) {
  int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW | (direct ? O_DIRECT : 0));
  if (fd < 0) {
    snprintf(note, note_n, "open '%s': %s", path, strerror(errno));
    return -1;
  }
  pr_shared sh;
  memset(&sh, 0, sizeof sh);
  sh.fd = fd;
  sh.is_write = is_write;
  sh.size = size;
  sh.bs = bs;
  sh.nthreads = qd;
  pthread_mutex_init(&sh.mu, NULL);
  pthread_barrier_init(&sh.start, NULL, qd + 1);
  pr_thread *th = calloc(qd, sizeof *th);
  int rc = 0;
  unsigned started = 0;
  if (!th) {
    snprintf(note, note_n, "out of memory");
    rc = -1;
  }
  for (unsigned i = 0; th && i < qd; i++) {
    th[i].sh = &sh;
    th[i].idx = i;
    th[i].buf = buf_alloc((size_t)bs, 4096);
    if (!th[i].buf) {
      snprintf(note, note_n, "out of memory for %u buffers of %" PRIu64 " bytes", qd, bs);
      rc = -1;
      break;
    }
  }
  if (rc == 0) {
    for (; started < qd; started++) {
      int e = pthread_create(&th[started].tid, NULL, pr_main, &th[started]);
      if (e) {
        snprintf(note, note_n, "pthread_create: %s", strerror(e));
        rc = -1;
        break;
      }
    }
  }
  if (rc == 0) {
    double t0 = zo_clock_s();
    if (max_sec > 0) sh.deadline = t0 + max_sec; /* read by the threads after the barrier */
    pthread_barrier_wait(&sh.start);
    for (unsigned i = 0; i < qd; i++) pthread_join(th[i].tid, NULL);
    *sec = zo_clock_s() - t0;
    *moved = sh.moved;
    if (sh.err) {
      snprintf(note, note_n, "%s '%s' at offset %" PRIu64 ": %s", is_write ? "pwrite" : "pread", path, sh.err_off,
               strerror(sh.err));
      rc = -1;
    }
  } else if (started) {
    /* Threads already waiting on the barrier cannot be released without the missing ones; cancel them. */
    for (unsigned i = 0; i < started; i++) pthread_cancel(th[i].tid);
    for (unsigned i = 0; i < started; i++) pthread_join(th[i].tid, NULL);
  }
  if (th)
    for (unsigned i = 0; i < qd; i++) free(th[i].buf);
  free(th);
  pthread_barrier_destroy(&sh.start);
  pthread_mutex_destroy(&sh.mu);
  close(fd);
  return rc;
}

/* ---- engine 3: fio's io_uring engine ------------------------------------------------------------------ */

static int have_program(const char *name) {
  char cmd[256];
  snprintf(cmd, sizeof cmd, "command -v %s >/dev/null 2>&1", name);
  return system(cmd) == 0;
}

/* Run fio once on @path (':' escaped, as fio splits file names on it) and return bw_bytes of the op. */
static int fio_transfer(const char *path, int is_write, uint64_t size, uint64_t bytes, double max_sec, uint64_t bs,
                        unsigned qd, variant v, double *gbps, double *sec, uint64_t *moved, char *note, size_t note_n) {
  char a_file[PATH_MAX * 2 + 32], a_size[64], a_io[64], a_rt[64], a_bs[64], a_qd[64], a_rw[32];
  char *w = a_file + snprintf(a_file, sizeof a_file, "--filename=");
  for (const char *p = path; *p && w < a_file + sizeof a_file - 3; p++) {
    if (*p == ':') *w++ = '\\';
    *w++ = *p;
  }
  *w = 0;
  snprintf(a_size, sizeof a_size, "--size=%" PRIu64, size);
  snprintf(a_io, sizeof a_io, "--io_size=%" PRIu64, bytes);
  snprintf(a_rt, sizeof a_rt, "--runtime=%ldms", max_sec > 0 ? (long)(max_sec * 1000 + 0.5) : 0L);
  snprintf(a_bs, sizeof a_bs, "--bs=%" PRIu64, bs);
  snprintf(a_qd, sizeof a_qd, "--iodepth=%u", qd);
  snprintf(a_rw, sizeof a_rw, "--rw=%s", is_write ? "write" : "read");
  char *argv[20] = {"fio", "--name=x", a_file, a_size, a_io, a_bs, a_qd, "--ioengine=io_uring", "--direct=1", a_rw,
                    "--output-format=json"};
  int argc = 11;
  if (max_sec > 0) argv[argc++] = a_rt;
  if (v.regbuf > 0) {
    argv[argc++] = "--fixedbufs";
    argv[argc++] = "--registerfiles";
  }
  if (v.sqpoll > 0) argv[argc++] = "--sqthread_poll";
  argv[argc] = NULL;

  int pipefd[2];
  if (pipe(pipefd) != 0) {
    snprintf(note, note_n, "pipe: %s", strerror(errno));
    return -1;
  }
  pid_t pid = fork();
  if (pid < 0) {
    snprintf(note, note_n, "fork: %s", strerror(errno));
    close(pipefd[0]);
    close(pipefd[1]);
    return -1;
  }
  if (pid == 0) {
    dup2(pipefd[1], STDOUT_FILENO);
    close(pipefd[0]);
    close(pipefd[1]);
    int devnull = open("/dev/null", O_WRONLY);
    if (devnull >= 0) dup2(devnull, STDERR_FILENO);
    execvp("fio", argv);
    _exit(127);
  }
  close(pipefd[1]);
  size_t cap = 1 << 16, len = 0;
  char *out = malloc(cap);
  for (;;) {
    if (!out) break;
    if (len + 4096 > cap) {
      char *n = realloc(out, cap * 2);
      if (!n) {
        free(out);
        out = NULL;
        break;
      }
      out = n;
      cap *= 2;
    }
    ssize_t n = read(pipefd[0], out + len, cap - len - 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    len += (size_t)n;
  }
  close(pipefd[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!out) {
    snprintf(note, note_n, "out of memory reading fio output");
    return -1;
  }
  out[len] = 0;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    snprintf(note, note_n, "fio exited with status %d", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    free(out);
    return -1;
  }
  /* fio may print notes before its JSON document. */
  char *brace = strchr(out, '{');
  json_error_t jerr;
  json_t *root = brace ? json_loads(brace, JSON_DISABLE_EOF_CHECK, &jerr) : NULL;
  free(out);
  if (!root) {
    snprintf(note, note_n, "fio output is not JSON");
    return -1;
  }
  int rc = -1;
  json_t *job = json_array_get(json_object_get(root, "jobs"), 0);
  json_t *opj = json_object_get(job, is_write ? "write" : "read");
  json_t *bw = json_object_get(opj, "bw_bytes");
  json_t *iob = json_object_get(opj, "io_bytes");
  json_t *rt = json_object_get(opj, "runtime"); /* ms */
  json_t *jerr_code = json_object_get(job, "error");
  if (jerr_code && json_integer_value(jerr_code) != 0) {
    snprintf(note, note_n, "fio job error %" JSON_INTEGER_FORMAT, json_integer_value(jerr_code));
  } else if (!json_is_number(bw) || json_number_value(bw) <= 0) {
    snprintf(note, note_n, "fio JSON has no %s.bw_bytes", is_write ? "write" : "read");
  } else {
    *gbps = json_number_value(bw) / 1e9;
    *moved = json_is_number(iob) ? (uint64_t)json_number_value(iob) : bytes;
    *sec = json_is_number(rt) ? json_number_value(rt) / 1e3 : (double)*moved / (*gbps * 1e9);
    rc = 0;
  }
  json_decref(root);
  return rc;
}

/* ---- the sweep ---------------------------------------------------------------------------------------- */

/* One measurement slot: the repetitions of one engine at one setting. */
typedef struct slot {
  size_t res;         /* index into g_res */
  double gb[64];
  int n;
  int failed;
  double best_sec;
  double best_gb;
  uint64_t best_bytes;
} slot;

static size_t slot_new(int op, int engine, uint64_t bs, uint64_t used, unsigned qd, variant v) {
  result *r = res_add();
  r->op = op;
  r->engine = engine;
  r->block_size = bs;
  r->block_used = used;
  r->queue_depth = qd;
  r->regbuf = v.regbuf;
  r->sqpoll = v.sqpoll;
  return g_nres - 1;
}

static void slot_add(slot *sl, double sec, double gbps, uint64_t bytes) {
  if (sl->n < 64) sl->gb[sl->n++] = gbps;
  if (gbps > sl->best_gb) {
    sl->best_gb = gbps;
    sl->best_sec = sec;
    sl->best_bytes = bytes;
  }
}

static void slot_finish(slot *sl) {
  result *r = &g_res[sl->res];
  double best = 0, sum = 0;
  for (int i = 0; i < sl->n; i++) {
    sum += sl->gb[i];
    if (sl->gb[i] > best) best = sl->gb[i];
  }
  r->ok = !sl->failed && sl->n > 0;
  r->gbps = r->ok ? best : 0;
  r->gbps_mean = r->ok ? sum / sl->n : 0;
  r->reps = sl->n;
  r->seconds = sl->best_sec;
  r->bytes = sl->best_bytes;
}

/* Say what actually ran for a zoffload slot: the library warns and goes on without an option the
 * kernel refuses. */
static void zo_slot_describe(slot *sl, zo_bench *zb, variant v) {
  result *r = &g_res[sl->res];
  if (!sl->failed) snprintf(r->note, sizeof r->note, "%s", zo_swap_describe(zb->sw));
#if SB_HAVE_REGBUF
  if (v.regbuf > 0 && zo_swap_n_registered_buffers(zb->sw) == 0) r->regbuf = 0;
#endif
#if SB_HAVE_SQPOLL
  if (v.sqpoll > 0 && !zo_swap_uses_sqpoll(zb->sw)) r->sqpoll = 0;
#endif
  (void)v;
}

static int device_pass(zo_bench *zb, const opts *o, dev_pass *p);

/*
 * One swap handle per ring variant (each its own rank, so they can be open together) with its own
 * preallocated file, written once untimed, kept for the whole sweep; zo_swap_set_queue() moves every
 * handle to each (block size, queue depth). Then, per op (write first, so reads see written blocks) and
 * per repetition, every engine runs once in turn - the zoffload variants, pread/pwrite, fio - the order
 * rotated by one each repetition, so no engine always runs right after the same neighbour (a write
 * burst the host is still flushing, a poller going to sleep). Interleaving the repetitions spreads the
 * noise of a shared machine over all engines alike. Each measurement moves the first o->bytes bytes of
 * the file, or what o->max_sec allows. pread and fio use the file of the first variant.
 */
static int run_sweep(const opts *o, int use_fio) {
  variant vars[4];
  int nv = 0;
  for (int rb = SB_HAVE_REGBUF ? 0 : -1; rb <= (SB_HAVE_REGBUF ? 1 : -1); rb++)
    for (int sq = SB_HAVE_SQPOLL ? 0 : -1; sq <= (SB_HAVE_SQPOLL ? 1 : -1); sq++) vars[nv++] = (variant){rb, sq};
  int nops = o->do_op[OP_READ] + o->do_op[OP_WRITE];
  int n_fio = use_fio ? (o->fio_variants ? nv : 1) : 0;
  int n_eng = nv + 1 + n_fio;
  unsigned qd_max = 0;
  for (int i = 0; i < o->n_qd; i++)
    if (o->qd[i] > qd_max) qd_max = o->qd[i];
  g_steps = (unsigned)(nv + o->n_bs * o->n_qd * nops * o->reps * n_eng);
  g_step = 0;
  int failures = 0;
  char what[96];
  zo_bench zb[4];
  memset(zb, 0, sizeof zb);
  for (int vi = 0; vi < nv && !g_stop; vi++) {
    snprintf(what, sizeof what, "fill file regbuf=%s sqpoll=%s", tri(vars[vi].regbuf), tri(vars[vi].sqpoll));
    progress(what);
    if (zo_bench_open(&zb[vi], o, qd_max, vars[vi], SB_RANK - vi) != 0) {
      for (int k = 0; k < nv; k++) zo_bench_close(&zb[k]);
      return -1;
    }
    g_step++;
  }
  const char *path = g_stop ? "" : zo_swap_file_path(zb[0].f);
  int direct = g_stop ? 1 : zo_swap_is_direct(zb[0].sw);
  for (int bi = 0; bi < o->n_bs && !g_stop; bi++) {
    for (int qi = 0; qi < o->n_qd && !g_stop; qi++) {
      uint64_t bs = o->bs[bi];
      unsigned qd = o->qd[qi];
      char bss[32];
      fmt_size(bs, bss, sizeof bss);
      for (int vi = 0; vi < nv; vi++) {
        if (zo_swap_set_queue(zb[vi].sw, (size_t)bs, qd) != ZO_OK) {
          fprintf(stderr, "\nzo-swapbench: set_queue bs=%s qd=%u: %s\n", bss, qd, zo_last_error());
          for (int k = 0; k < nv; k++) zo_bench_close(&zb[k]);
          return -1;
        }
      }
      for (int op = OP_WRITE; op >= OP_READ && !g_stop; op--) {
        if (!o->do_op[op]) continue;
        slot sl[12];
        memset(sl, 0, sizeof sl);
        for (int k = 0; k < n_eng; k++) {
          if (k < nv)
            sl[k].res = slot_new(op, ENG_ZO, bs, zo_swap_block_size(zb[k].sw), qd, vars[k]);
          else if (k == nv)
            sl[k].res = slot_new(op, ENG_PREAD, bs, bs, qd, (variant){-1, -1});
          else
            sl[k].res = slot_new(op, ENG_FIO, bs, bs, qd, o->fio_variants ? vars[k - nv - 1] : (variant){0, 0});
        }
        for (int rep = 0; rep < o->reps && !g_stop; rep++) {
          for (int kk = 0; kk < n_eng && !g_stop; kk++) {
            int k = (kk + rep) % n_eng;
            result *r = &g_res[sl[k].res];
            snprintf(what, sizeof what, "%s %s bs=%s qd=%u rep %d", eng_name[r->engine], op_name[op], bss, qd,
                     rep + 1);
            progress(what);
            g_step++;
            if (sl[k].failed) continue;
            double sec = 0, g = 0;
            uint64_t moved = 0;
            int rc;
            if (r->engine == ENG_ZO) {
              rc = zo_transfer(&zb[k], op == OP_WRITE, o->bytes, o->max_sec, &sec, &moved);
              if (rc) snprintf(r->note, sizeof r->note, "%s", zo_last_error());
              g = sec > 0 ? (double)moved / sec / 1e9 : 0;
            } else if (r->engine == ENG_PREAD) {
              rc = pread_transfer(path, direct, op == OP_WRITE, o->bytes, o->max_sec, bs, qd, &sec, &moved, r->note,
                                  sizeof r->note);
              g = sec > 0 ? (double)moved / sec / 1e9 : 0;
            } else {
              variant v = {r->regbuf, r->sqpoll};
              rc = fio_transfer(path, op == OP_WRITE, o->size, o->bytes, o->max_sec, bs, qd, v, &g, &sec, &moved,
                                r->note, sizeof r->note);
            }
            if (rc != 0) {
              fprintf(stderr, "\nzo-swapbench: %s %s bs=%" PRIu64 " qd=%u: %s\n", eng_name[r->engine], op_name[op],
                      bs, qd, r->note);
              sl[k].failed = 1;
              continue;
            }
            slot_add(&sl[k], sec, g, moved);
          }
        }
        for (int k = 0; k < n_eng; k++) {
          slot_finish(&sl[k]);
          if (k < nv) zo_slot_describe(&sl[k], &zb[k], vars[k]);
          if (!g_res[sl[k].res].ok && !g_stop) failures++;
        }
      }
    }
  }
  if (!g_stop && nv > 0) {
    progress("nvme -> pinned -> device read pass");
    if (device_pass(&zb[0], o, &g_pass) != 0 && !g_stop) {
      fprintf(stderr, "\nzo-swapbench: nvme -> pinned -> device read pass: %s\n", g_pass.note);
      failures++;
    }
  }
  for (int vi = 0; vi < nv; vi++) zo_bench_close(&zb[vi]);
  progress_done();
  return failures;
}

/* ---- reporting ------------------------------------------------------------------------------------------ */

static const result *find(int op, int engine, uint64_t bs, unsigned qd) {
  const result *best = NULL;
  for (size_t i = 0; i < g_nres; i++) {
    const result *r = &g_res[i];
    if (r->op == op && r->engine == engine && r->block_size == bs && r->queue_depth == qd && r->ok &&
        (!best || r->gbps > best->gbps))
      best = r;
  }
  return best;
}

static const result *best_of(int op, int engine) {
  const result *best = NULL;
  for (size_t i = 0; i < g_nres; i++) {
    const result *r = &g_res[i];
    if (r->op == op && r->engine == engine && r->ok && (!best || r->gbps > best->gbps)) best = r;
  }
  return best;
}

/* ---- NVMe -> pinned -> device ----------------------------------------------------------------------------- */

/*
 * The read path of a fetch from the NVMe tier: swap reads of chunk_bytes into a ring of pinned chunks of the
 * bench buffer, each followed, as soon as it lands, by an H2D copy of that chunk to device memory (two
 * device chunks, alternating); a pinned chunk is read into again once its copy has completed (an event per
 * chunk). The handle runs at the best zoffload read setting of the sweep. The link limit is measured first,
 * at the same chunk size, in g_link. Returns 0 (done, or skipped: p->ran 0), -1 when it failed (p->note).
 */
static int device_pass(zo_bench *zb, const opts *o, dev_pass *p) {
  memset(p, 0, sizeof *p);
  const result *best = o->do_op[OP_READ] ? best_of(OP_READ, ENG_ZO) : NULL;
  if (!g_dev || !best) {
    snprintf(p->note, sizeof p->note, "%s",
             !g_dev                ? "no device"
             : o->do_op[OP_READ] ? "no zoffload read measurement succeeded"
                                 : "reads were not swept (--ops)");
    return 0;
  }
  p->ran = 1;
  for (int e = ENG_ZO; e <= ENG_FIO; e++) { /* the disk's read limit: the best read of any engine */
    const result *r = best_of(OP_READ, e);
    if (r && r->gbps > p->disk_read_gbps) {
      p->disk_read_gbps = r->gbps;
      p->disk_engine = eng_name[e];
    }
  }
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

  if (linkbench_measure(g_dev, chunk, 3, &g_link) != 0) {
    snprintf(p->note, sizeof p->note, "link limit: %.200s", g_link.note);
    return -1;
  }
  p->h2d_gbps = g_link.h2d_gbps;

  zo_stream_t *s = NULL;
  zo_event_t *ev[16] = {0};
  void *dbuf[2] = {NULL, NULL};
  zo_swap_req_t *reqs[16] = {0};
  size_t lens[16] = {0};
  uint64_t nchunks = (o->bytes + chunk - 1) / chunk, head = 0, tail = 0, moved = 0;
  const char *what = "set_queue";
  zo_status st = zo_swap_set_queue(zb->sw, (size_t)best->block_size, best->queue_depth);
  for (int i = 0; st == ZO_OK && i < 2; i++) {
    what = "device buffer";
    st = zo_device_malloc(g_dev, chunk, &dbuf[i]);
  }
  if (st == ZO_OK) {
    what = "stream";
    st = zo_stream_create(g_dev, &s);
  }
  for (unsigned i = 0; st == ZO_OK && i < slots; i++) {
    what = "event";
    st = zo_event_create(g_dev, &ev[i]);
  }
  double t0 = zo_clock_s(), deadline = o->max_sec > 0 ? t0 + o->max_sec : 0;
  while (st == ZO_OK && tail < nchunks) {
    while (st == ZO_OK && head < nchunks && head - tail < slots && !(deadline && head > tail && zo_clock_s() > deadline)) {
      unsigned k = (unsigned)(head % slots);
      uint64_t off = head * chunk;
      lens[k] = o->bytes - off < chunk ? (size_t)(o->bytes - off) : chunk;
      what = "wait for the copy out of a pinned chunk";
      st = zo_event_synchronize(ev[k]); /* its previous H2D has read it */
      if (st != ZO_OK) break;
      what = "swap read";
      st = zo_swap_submit_read(zb->sw, zb->f, off, zb->buf + (size_t)k * chunk, lens[k], &reqs[k]);
      if (st == ZO_OK) head++;
    }
    if (st != ZO_OK) break;
    if (deadline && zo_clock_s() > deadline) nchunks = head; /* time is up: finish what is in flight */
    if (tail == head) break;
    unsigned k = (unsigned)(tail % slots);
    what = "swap read";
    st = zo_swap_wait(zb->sw, reqs[k]);
    reqs[k] = NULL;
    if (st != ZO_OK) break;
    what = "H2D copy";
    st = zo_memcpy_async(s, dbuf[tail & 1], zb->buf + (size_t)k * chunk, lens[k], ZO_COPY_H2D);
    if (st == ZO_OK) st = zo_event_record(ev[k], s);
    moved += lens[k];
    tail++;
  }
  for (unsigned k = 0; k < slots; k++) /* after an error: collect reads still in flight */
    if (reqs[k]) zo_swap_wait(zb->sw, reqs[k]);
  if (s) {
    zo_status ss = zo_stream_synchronize(s);
    if (st == ZO_OK && ss != ZO_OK) {
      what = "H2D copy";
      st = ss;
    }
  }
  p->seconds = zo_clock_s() - t0;
  if (st != ZO_OK) snprintf(p->note, sizeof p->note, "%s: %s: %s", what, zo_status_string(st), zo_last_error());
  for (unsigned k = 0; k < slots; k++) zo_event_destroy(ev[k]);
  zo_stream_destroy(s);
  for (int i = 0; i < 2; i++)
    if (dbuf[i]) zo_device_free(g_dev, dbuf[i]);
  if (st != ZO_OK) return -1;
  p->bytes = moved;
  p->gbps = p->seconds > 0 ? (double)moved / p->seconds / 1e9 : 0;
  p->limit_gbps = p->disk_read_gbps < p->h2d_gbps ? p->disk_read_gbps : p->h2d_gbps;
  p->ratio = p->limit_gbps > 0 ? p->gbps / p->limit_gbps : 0;
  p->ok = p->gbps > 0;
  if (!p->ok) snprintf(p->note, sizeof p->note, "moved nothing measurable");
  return p->ok ? 0 : -1;
}

static void print_device_pass(void) {
  printf("\nNVMe -> pinned -> device read pass (%s):\n", zo_device_name(g_dev));
  if (!g_pass.ran) {
    printf("  n/a: %s\n", g_pass.note);
    return;
  }
  linkbench_print(stdout, "  ", &g_link);
  if (!g_pass.ok) {
    printf("  failed: %s\n", g_pass.note);
    return;
  }
  char bss[32];
  fmt_size(g_pass.block_size, bss, sizeof bss);
  printf("  %.3f GB/s: %" PRIu64 " bytes in %.3f s (%zu-byte chunks, %u pinned, bs=%s qd=%u) = %.3f of min(disk read "
         "%.3f GB/s [%s], H2D %.3f GB/s)\n",
         g_pass.gbps, g_pass.bytes, g_pass.seconds, g_pass.chunk_bytes, g_pass.slots, bss, g_pass.queue_depth,
         g_pass.ratio, g_pass.disk_read_gbps, g_pass.disk_engine ? g_pass.disk_engine : "-", g_pass.h2d_gbps);
}

static json_t *device_pass_json(void) {
  json_t *j = json_object();
  json_object_set_new(j, "ran", json_boolean(g_pass.ran));
  json_object_set_new(j, "ok", json_boolean(g_pass.ok || !g_pass.ran)); /* skipped is not a failure */
  if (g_pass.ran && g_pass.ok) {
    json_object_set_new(j, "achieved_gbps", json_real(g_pass.gbps));
    json_object_set_new(j, "seconds", json_real(g_pass.seconds));
    json_object_set_new(j, "bytes", json_integer((json_int_t)g_pass.bytes));
    json_object_set_new(j, "limit_gbps", json_real(g_pass.limit_gbps));
    json_object_set_new(j, "ratio", json_real(g_pass.ratio));
    json_object_set_new(j, "disk_read_gbps", json_real(g_pass.disk_read_gbps));
    json_object_set_new(j, "disk_read_engine", json_string(g_pass.disk_engine ? g_pass.disk_engine : "-"));
    json_object_set_new(j, "h2d_limit_gbps", json_real(g_pass.h2d_gbps));
  }
  if (g_pass.ran) {
    json_object_set_new(j, "chunk_bytes", json_integer((json_int_t)g_pass.chunk_bytes));
    json_object_set_new(j, "pinned_chunks", json_integer(g_pass.slots));
    json_object_set_new(j, "read_block_size", json_integer((json_int_t)g_pass.block_size));
    json_object_set_new(j, "read_queue_depth", json_integer(g_pass.queue_depth));
  }
  if (g_pass.note[0]) json_object_set_new(j, "note", json_string(g_pass.note));
  json_object_set_new(j, "definition", json_string(
      "swap reads of chunk_bytes into pinned chunks, each copied H2D as soon as it lands, at the sweep's best "
      "zoffload read setting; achieved_gbps = bytes / (first submit to last copy complete); limit_gbps = "
      "min(best read GB/s of any engine in the sweep, H2D limit at chunk_bytes measured in this run)"));
  return j;
}

static void print_table(const opts *o, int use_fio) {
  printf("\n%-5s %6s %4s %6s %6s | %8s %8s %8s | %7s %7s\n", "op", "bs", "qd", "regbuf", "sqpoll", "zoffload",
         "pread", "fio", "zo/pr", "zo/fio");
  printf("------------------------------------+----------------------------+----------------\n");
  for (int op = OP_READ; op <= OP_WRITE; op++) {
    if (!o->do_op[op]) continue;
    for (size_t i = 0; i < g_nres; i++) {
      const result *r = &g_res[i];
      if (r->op != op || r->engine != ENG_ZO) continue;
      const result *p = find(op, ENG_PREAD, r->block_size, r->queue_depth);
      const result *f = use_fio ? find(op, ENG_FIO, r->block_size, r->queue_depth) : NULL;
      char bss[32], zs[16], ps[16], fs[16], rp[16], rf[16];
      fmt_size(r->block_size, bss, sizeof bss);
      snprintf(zs, sizeof zs, r->ok ? "%.3f" : "error", r->gbps);
      snprintf(ps, sizeof ps, p ? "%.3f" : "-", p ? p->gbps : 0);
      snprintf(fs, sizeof fs, f ? "%.3f" : "-", f ? f->gbps : 0);
      snprintf(rp, sizeof rp, p && r->ok ? "%.2f" : "-", p && r->ok ? r->gbps / p->gbps : 0);
      snprintf(rf, sizeof rf, f && r->ok ? "%.2f" : "-", f && r->ok ? r->gbps / f->gbps : 0);
      printf("%-5s %6s %4u %6s %6s | %8s %8s %8s | %7s %7s\n", op_name[op], bss, r->queue_depth, tri(r->regbuf),
             tri(r->sqpoll), zs, ps, fs, rp, rf);
    }
  }
  printf("(GB/s = 1e9 bytes/s; best of %d repetition%s, each the first %" PRIu64 " bytes of a %" PRIu64
         "-byte file or %.2f s, whichever ends first; O_DIRECT, page cache bypassed)\n",
         o->reps, o->reps == 1 ? "" : "s", o->bytes, o->size, o->max_sec > 0 ? o->max_sec : INFINITY);
}

typedef struct target {
  const char *name;
  double ratio;   /* < 0: not measurable */
  double need;
  char detail[200];
} target;

static void eval_targets(const opts *o, int use_fio, target *t, int *nt) {
  *nt = 0;
  for (int op = OP_READ; op <= OP_WRITE; op++) {
    if (!o->do_op[op]) continue;
    const result *zb = best_of(op, ENG_ZO);
    /* 1: against fio's best, at fio's best block size and queue depth (zoffload's best variant there). */
    target *a = &t[(*nt)++];
    a->name = op == OP_READ ? "best read  >= 95% of fio's best (same bs, qd)" : "best write >= 95% of fio's best (same bs, qd)";
    a->need = 0.95;
    a->ratio = -1;
    const result *fb = use_fio ? best_of(op, ENG_FIO) : NULL;
    if (!use_fio) {
      snprintf(a->detail, sizeof a->detail, "fio not run");
    } else if (!fb) {
      snprintf(a->detail, sizeof a->detail, "no fio measurement succeeded");
    } else {
      const result *z = find(op, ENG_ZO, fb->block_size, fb->queue_depth);
      char bss[32];
      fmt_size(fb->block_size, bss, sizeof bss);
      if (z) {
        a->ratio = z->gbps / fb->gbps;
        snprintf(a->detail, sizeof a->detail, "zoffload %.3f vs fio %.3f GB/s at bs=%s qd=%u", z->gbps, fb->gbps, bss,
                 fb->queue_depth);
      } else {
        snprintf(a->detail, sizeof a->detail, "zoffload failed at bs=%s qd=%u", bss, fb->queue_depth);
      }
    }
    /* 2: against the pread/pwrite baseline's best. */
    target *b = &t[(*nt)++];
    b->name = op == OP_READ ? "best read  >= pread baseline's best" : "best write >= pwrite baseline's best";
    b->need = 1.0;
    b->ratio = -1;
    const result *pb = best_of(op, ENG_PREAD);
    if (zb && pb) {
      b->ratio = zb->gbps / pb->gbps;
      snprintf(b->detail, sizeof b->detail, "zoffload %.3f vs pread %.3f GB/s", zb->gbps, pb->gbps);
    } else {
      snprintf(b->detail, sizeof b->detail, "no %s measurement succeeded", zb ? "pread" : "zoffload");
    }
  }
}

static void print_best(const opts *o, int use_fio) {
  printf("\nBest settings:\n");
  for (int op = OP_READ; op <= OP_WRITE; op++) {
    if (!o->do_op[op]) continue;
    const result *z = best_of(op, ENG_ZO);
    const result *p = best_of(op, ENG_PREAD);
    const result *f = use_fio ? best_of(op, ENG_FIO) : NULL;
    char b1[32] = "-", b2[32] = "-", b3[32] = "-";
    if (z) fmt_size(z->block_size, b1, sizeof b1);
    if (p) fmt_size(p->block_size, b2, sizeof b2);
    if (f) fmt_size(f->block_size, b3, sizeof b3);
    printf("  %-5s zoffload %.3f GB/s (bs=%s qd=%u regbuf=%s sqpoll=%s)", op_name[op], z ? z->gbps : 0, b1,
           z ? z->queue_depth : 0, tri(z ? z->regbuf : -1), tri(z ? z->sqpoll : -1));
    printf("; pread %.3f GB/s (bs=%s qd=%u)", p ? p->gbps : 0, b2, p ? p->queue_depth : 0);
    if (use_fio) printf("; fio %.3f GB/s (bs=%s qd=%u)", f ? f->gbps : 0, b3, f ? f->queue_depth : 0);
    printf("\n");
  }
  /* The setting to paste: the best read setting when reads were swept (the optimizer state is read
   * before it is written each step and both use the same handle), else the best write. */
  const result *zr = o->do_op[OP_READ] ? best_of(OP_READ, ENG_ZO) : NULL;
  const result *zw = o->do_op[OP_WRITE] ? best_of(OP_WRITE, ENG_ZO) : NULL;
  const result *pick = zr ? zr : zw;
  if (zr && zw && (zr->block_size != zw->block_size || zr->queue_depth != zw->queue_depth)) {
    /* One handle serves both directions: pick the setting with the best sum of read and write GB/s. */
    double best_sum = 0;
    for (size_t i = 0; i < g_nres; i++) {
      const result *r = &g_res[i];
      if (r->engine != ENG_ZO || r->op != OP_READ || !r->ok) continue;
      const result *w = find(OP_WRITE, ENG_ZO, r->block_size, r->queue_depth);
      if (w && r->gbps + w->gbps > best_sum) {
        best_sum = r->gbps + w->gbps;
        pick = r;
      }
    }
  }
  if (pick) {
    printf("\nPaste into the config (%s):\n", zr && zw ? "best combined read+write setting" : "best setting");
    printf("  \"aio\": {\"block_size\": %" PRIu64 ", \"queue_depth\": %u}\n", pick->block_size, pick->queue_depth);
    const result *pr = find(OP_READ, ENG_ZO, pick->block_size, pick->queue_depth);
    const result *pw = find(OP_WRITE, ENG_ZO, pick->block_size, pick->queue_depth);
    printf("  (at that setting the fastest ring options were: read regbuf=%s sqpoll=%s, write regbuf=%s "
           "sqpoll=%s)\n",
           tri(pr ? pr->regbuf : -1), tri(pr ? pr->sqpoll : -1), tri(pw ? pw->regbuf : -1),
           tri(pw ? pw->sqpoll : -1));
  }
}

static json_t *res_json(const result *r) {
  json_t *j = json_object();
  json_object_set_new(j, "op", json_string(op_name[r->op]));
  json_object_set_new(j, "engine", json_string(eng_name[r->engine]));
  json_object_set_new(j, "block_size", json_integer((json_int_t)r->block_size));
  json_object_set_new(j, "block_size_used", json_integer((json_int_t)r->block_used));
  json_object_set_new(j, "queue_depth", json_integer(r->queue_depth));
  json_object_set_new(j, "registered_buffers", r->regbuf < 0 ? json_string("n/a") : json_boolean(r->regbuf));
  json_object_set_new(j, "sqpoll", r->sqpoll < 0 ? json_string("n/a") : json_boolean(r->sqpoll));
  json_object_set_new(j, "gbps", json_real(r->gbps));
  json_object_set_new(j, "gbps_mean", json_real(r->gbps_mean));
  json_object_set_new(j, "seconds", json_real(r->seconds));
  json_object_set_new(j, "bytes", json_integer((json_int_t)r->bytes));
  json_object_set_new(j, "reps", json_integer(r->reps));
  json_object_set_new(j, "ok", json_boolean(r->ok));
  if (r->note[0]) json_object_set_new(j, "note", json_string(r->note));
  return j;
}

static int write_json(const opts *o, int use_fio, const target *t, int nt) {
  json_t *root = json_object();
  json_t *cfg = json_object();
  json_object_set_new(cfg, "path", json_string(o->path));
  json_object_set_new(cfg, "file_size", json_integer((json_int_t)o->size));
  json_object_set_new(cfg, "bytes_per_measurement", json_integer((json_int_t)o->bytes));
  json_object_set_new(cfg, "max_seconds_per_measurement", json_real(o->max_sec));
  json_object_set_new(cfg, "reps", json_integer(o->reps));
  json_object_set_new(cfg, "quick", json_boolean(o->quick));
  json_object_set_new(cfg, "fio", json_boolean(use_fio));
  json_object_set_new(cfg, "fio_variants", json_boolean(use_fio && o->fio_variants));
  json_object_set_new(cfg, "registered_buffers_available", json_boolean(SB_HAVE_REGBUF));
  json_object_set_new(cfg, "sqpoll_available", json_boolean(SB_HAVE_SQPOLL));
  json_object_set_new(cfg, "device", json_string(zo_device_kind_name(o->device)));
  json_object_set_new(root, "config", cfg);
  json_t *arr = json_array();
  for (size_t i = 0; i < g_nres; i++) json_array_append_new(arr, res_json(&g_res[i]));
  json_object_set_new(root, "results", arr);
  json_t *best = json_object();
  for (int op = OP_READ; op <= OP_WRITE; op++) {
    if (!o->do_op[op]) continue;
    const result *z = best_of(op, ENG_ZO);
    if (!z) continue;
    json_t *b = res_json(z);
    const result *p = find(op, ENG_PREAD, z->block_size, z->queue_depth);
    const result *f = use_fio ? find(op, ENG_FIO, z->block_size, z->queue_depth) : NULL;
    const result *pb = best_of(op, ENG_PREAD);
    const result *fb = use_fio ? best_of(op, ENG_FIO) : NULL;
    if (p) json_object_set_new(b, "pread_gbps_same_setting", json_real(p->gbps));
    if (f) json_object_set_new(b, "fio_gbps_same_setting", json_real(f->gbps));
    if (pb) json_object_set_new(b, "pread_best", res_json(pb));
    if (fb) json_object_set_new(b, "fio_best", res_json(fb));
    json_t *aio = json_object();
    json_object_set_new(aio, "block_size", json_integer((json_int_t)z->block_size));
    json_object_set_new(aio, "queue_depth", json_integer(z->queue_depth));
    json_object_set_new(b, "aio", aio);
    json_object_set_new(best, op_name[op], b);
  }
  json_object_set_new(root, "best", best);
  json_t *tj = json_array();
  for (int i = 0; i < nt; i++) {
    json_t *x = json_object();
    json_object_set_new(x, "target", json_string(t[i].name));
    json_object_set_new(x, "need", json_real(t[i].need));
    json_object_set_new(x, "ratio", t[i].ratio < 0 ? json_null() : json_real(t[i].ratio));
    json_object_set_new(x, "status", json_string(t[i].ratio < 0 ? "n/a" : t[i].ratio >= t[i].need ? "PASS" : "MISS"));
    json_object_set_new(x, "detail", json_string(t[i].detail));
    json_array_append_new(tj, x);
  }
  json_object_set_new(root, "targets", tj);
  json_t *dj = json_object();
  json_object_set_new(dj, "kind", json_string(zo_device_kind_name(o->device)));
  json_object_set_new(dj, "name", json_string(g_dev ? zo_device_name(g_dev) : "none"));
  json_object_set_new(root, "device", dj);
  json_object_set_new(root, "link_limit", linkbench_json(&g_link));
  json_object_set_new(root, "nvme_to_device", device_pass_json());
  int rc = json_dump_file(root, o->json, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  json_decref(root);
  if (rc != 0) {
    fprintf(stderr, "zo-swapbench: cannot write '%s': %s\n", o->json, strerror(errno));
    return -1;
  }
  printf("\nWrote %s\n", o->json);
  return 0;
}

/* gnuplot: one panel per op, GB/s against queue depth, one line per block size; zoffload solid (its
 * best ring variant at each point), fio dashed, pread dotted. */
static int write_plot(const opts *o, int use_fio) {
  char gp[PATH_MAX + 8];
  snprintf(gp, sizeof gp, "%s.gp", o->plot);
  FILE *f = fopen(gp, "w");
  if (!f) {
    fprintf(stderr, "zo-swapbench: cannot write '%s': %s\n", gp, strerror(errno));
    return -1;
  }
  int nops = o->do_op[0] + o->do_op[1];
  int cairo = system("gnuplot -e 'set terminal pngcairo' >/dev/null 2>&1") == 0;
  fprintf(f, "# written by zo-swapbench; run: gnuplot '%s'\n", gp);
  fprintf(f, "set terminal %s size %d,520\nset output '%s'\n", cairo ? "pngcairo" : "png", 640 * nops, o->plot);
  fprintf(f, "set logscale x 2\nset xlabel 'queue depth'\nset ylabel 'GB/s'\nset grid\nset key outside right\n");
  fprintf(f, "set multiplot layout 1,%d title 'zo-swapbench: %s, file %" PRIu64 " bytes'\n", nops, o->path, o->size);
  for (int op = OP_READ; op <= OP_WRITE; op++) {
    if (!o->do_op[op]) continue;
    fprintf(f, "$%s << EOD\n", op_name[op]);
    /* Columns: qd zoffload pread fio; one block (two blank lines apart) per block size. */
    for (int bi = 0; bi < o->n_bs; bi++) {
      for (int qi = 0; qi < o->n_qd; qi++) {
        const result *z = find(op, ENG_ZO, o->bs[bi], o->qd[qi]);
        const result *p = find(op, ENG_PREAD, o->bs[bi], o->qd[qi]);
        const result *x = use_fio ? find(op, ENG_FIO, o->bs[bi], o->qd[qi]) : NULL;
        fprintf(f, "%u ", o->qd[qi]);
        if (z) fprintf(f, "%.4f ", z->gbps); else fprintf(f, "NaN ");
        if (p) fprintf(f, "%.4f ", p->gbps); else fprintf(f, "NaN ");
        if (x) fprintf(f, "%.4f\n", x->gbps); else fprintf(f, "NaN\n");
      }
      fprintf(f, "\n\n");
    }
    fprintf(f, "EOD\nset title '%s'\nplot ", op_name[op]);
    for (int bi = 0; bi < o->n_bs; bi++) {
      char bss[32];
      fmt_size(o->bs[bi], bss, sizeof bss);
      fprintf(f, "%s$%s index %d using 1:2 with linespoints lc %d dt 1 title 'zoffload %s'", bi ? ", \\\n  " : "",
              op_name[op], bi, bi + 1, bss);
      if (use_fio)
        fprintf(f, ", \\\n  $%s index %d using 1:4 with lines lc %d dt 2 title 'fio %s'", op_name[op], bi, bi + 1, bss);
      fprintf(f, ", \\\n  $%s index %d using 1:3 with lines lc %d dt 3 title 'pread %s'", op_name[op], bi, bi + 1, bss);
    }
    fprintf(f, "\n");
  }
  fprintf(f, "unset multiplot\n");
  fclose(f);
  if (!have_program("gnuplot")) {
    fprintf(stderr, "zo-swapbench: gnuplot is not installed (apt-get install gnuplot-nox); wrote the script %s, "
                    "run gnuplot on it to draw %s\n", gp, o->plot);
    return -1;
  }
  char cmd[2 * PATH_MAX + 64];
  snprintf(cmd, sizeof cmd, "gnuplot '%s'", gp);
  if (system(cmd) != 0) {
    fprintf(stderr, "zo-swapbench: gnuplot failed on %s\n", gp);
    return -1;
  }
  printf("Wrote %s (script %s)\n", o->plot, gp);
  return 0;
}

/* ---- command line ------------------------------------------------------------------------------------- */

static void usage(FILE *out) {
  fprintf(out,
          "usage: zo-swapbench --path DIR [options]\n"
          "Measures the zoffload NVMe swap engine (io_uring, O_DIRECT) on DIR against an O_DIRECT\n"
          "pread/pwrite baseline and fio's io_uring engine, and prints the \"aio\" config block to paste.\n"
          "\n"
          "  --path DIR            directory on the disk to measure (required); private\n"
          "                        zoffload-rank9999999N directories (one per ring variant)\n"
          "                        are made in it and removed after\n"
          "  --size BYTES          file size, suffixes K M G T (binary) (default 1G; --quick: 16M)\n"
          "  --bytes BYTES         bytes moved per measurement at most, from the file's start\n"
          "                        (default min(size, 512M))\n"
          "  --max-seconds S       seconds per measurement at most; 0: no limit\n"
          "                        (default 0.3; --quick: 0)\n"
          "  --block-sizes LIST    comma list of block sizes, multiples of 4K\n"
          "                        (default 128K,256K,512K,1M,2M,4M,8M; --quick: 128K,1M)\n"
          "  --queue-depths LIST   comma list of queue depths 1..32768\n"
          "                        (default 1,2,4,8,16,32,64,128; --quick: 1,8)\n"
          "  --ops LIST            read, write or read,write (default read,write)\n"
          "  --reps R              repetitions per measurement, best is reported (default 1)\n"
          "  --json FILE           write every result, the best settings and the targets as JSON\n"
          "  --plot FILE.png       draw GB/s against queue depth with gnuplot (script: FILE.png.gp)\n"
          "  --quick               a short sweep on a small file (seconds; for tests)\n"
          "  --no-fio              do not run fio even when it is installed\n"
          "  --fio-variants        also run fio with the ring variants swept for zoffload\n"
          "                        (--fixedbufs --registerfiles, --sqthread_poll); the fio\n"
          "                        figure at a setting is then its best variant (default: plain)\n"
          "  --device D            host|cuda: the device of the NVMe -> pinned -> device read pass;\n"
          "                        cuda is the GPU of LOCAL_RANK (default 0) and exits 77 with\n"
          "                        \"no CUDA device\" when there is none (default host: the emulated\n"
          "                        device, copies at memcpy speed)\n"
          "  --help                this text\n"
          "\n"
          "SIGINT / SIGTERM stop the sweep: what was measured is reported, and the exit status is 128 + the signal.\n"
          "Each ring variant gets one swap handle and one preallocated O_DIRECT file, written once\n"
          "untimed and kept for the whole sweep (zo_swap_set_queue switches block size and queue\n"
          "depth); the host buffer is pinned (mlock). Each measurement moves the first --bytes of the\n"
          "file or runs --max-seconds, for every engine alike (fio: --io_size, --runtime); the\n"
          "repetitions of all engines are interleaved, their order rotated each time, and the best\n"
          "is reported. The pread baseline (queue-depth threads, interleaved block stripes; one\n"
          "thread at QD 1) and fio run on the first variant's file. SQPOLL variants use a %u ms\n"
          "poller idle time, and the next engine starts after the poller sleeps. Registered buffers\n"
          "(+ files) and SQPOLL are swept when the swap API offers them (this build: registered\n"
          "buffers %s, SQPOLL %s).\n"
          "\n"
          "After the sweep, when reads were swept: the link limit (zo_memcpy_async loops between\n"
          "pinned host and device memory: H2D, D2H, both at once; best of 3) and a read pass that\n"
          "swaps chunks into pinned memory and copies each to the device as it lands, at the best\n"
          "zoffload read setting, against min(best read of the sweep, H2D limit) of the same run.\n",
          SB_SQPOLL_IDLE_MS, SB_HAVE_REGBUF ? "yes" : "n/a", SB_HAVE_SQPOLL ? "yes" : "n/a");
}

static int parse_list(const char *s, int is_size, uint64_t *out, int *n) {
  char tmp[1024];
  if (strlen(s) >= sizeof tmp) return -1;
  strcpy(tmp, s);
  *n = 0;
  for (char *save = NULL, *tok = strtok_r(tmp, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    if (*n >= SB_MAX_LIST) return -1;
    uint64_t v;
    if (is_size) {
      if (parse_size(tok, &v) || v == 0 || v % 4096 || v > GiB) return -1;
    } else {
      char *end;
      errno = 0;
      unsigned long x = strtoul(tok, &end, 10);
      if (errno || *end || x == 0 || x > 32768) return -1;
      v = x;
    }
    out[(*n)++] = v;
  }
  return *n ? 0 : -1;
}

int main(int argc, char **argv) {
  opts o;
  memset(&o, 0, sizeof o);
  o.reps = 1;
  o.device = ZO_DEVICE_HOST;
  o.do_op[OP_READ] = o.do_op[OP_WRITE] = 1;
  const char *size_s = NULL, *bs_s = NULL, *qd_s = NULL;
  const char *bytes_s = NULL, *sec_s = NULL;
  enum { O_PATH_ = 256, O_SIZE, O_BYTES, O_MAXSEC, O_BS, O_QD, O_OPS, O_REPS, O_JSON, O_PLOT, O_QUICK, O_NOFIO, O_FIOVAR, O_HELP, O_DEVICE };
  static const struct option lo[] = {
      {"path", required_argument, 0, O_PATH_},      {"size", required_argument, 0, O_SIZE},
      {"bytes", required_argument, 0, O_BYTES},     {"max-seconds", required_argument, 0, O_MAXSEC},
      {"block-sizes", required_argument, 0, O_BS},  {"queue-depths", required_argument, 0, O_QD},
      {"ops", required_argument, 0, O_OPS},         {"reps", required_argument, 0, O_REPS},
      {"json", required_argument, 0, O_JSON},       {"plot", required_argument, 0, O_PLOT},
      {"quick", no_argument, 0, O_QUICK},           {"no-fio", no_argument, 0, O_NOFIO},
      {"fio-variants", no_argument, 0, O_FIOVAR},   {"help", no_argument, 0, O_HELP},
      {"device", required_argument, 0, O_DEVICE},   {0, 0, 0, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
    switch (c) {
      case O_PATH_: o.path = optarg; break;
      case O_SIZE: size_s = optarg; break;
      case O_BYTES: bytes_s = optarg; break;
      case O_MAXSEC: sec_s = optarg; break;
      case O_BS: bs_s = optarg; break;
      case O_QD: qd_s = optarg; break;
      case O_OPS: {
        o.do_op[0] = o.do_op[1] = 0;
        char tmp[64];
        snprintf(tmp, sizeof tmp, "%s", optarg);
        for (char *save = NULL, *t = strtok_r(tmp, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
          if (!strcmp(t, "read")) o.do_op[OP_READ] = 1;
          else if (!strcmp(t, "write")) o.do_op[OP_WRITE] = 1;
          else {
            fprintf(stderr, "zo-swapbench: --ops: unknown op '%s' (read, write)\n", t);
            return 2;
          }
        }
        break;
      }
      case O_REPS: {
        int64_t r;
        if (zo_tool_parse_int(optarg, 1, 64, &r)) {
          fprintf(stderr, "zo-swapbench: --reps: need 1..64, got '%s'\n", optarg);
          return 2;
        }
        o.reps = (int)r;
        break;
      }
      case O_JSON: o.json = optarg; break;
      case O_PLOT: o.plot = optarg; break;
      case O_QUICK: o.quick = 1; break;
      case O_NOFIO: o.no_fio = 1; break;
      case O_FIOVAR: o.fio_variants = 1; break;
      case O_DEVICE:
        if (zo_device_kind_parse(optarg, &o.device) != ZO_OK || o.device == ZO_DEVICE_AUTO) {
          fprintf(stderr, "zo-swapbench: --device: need host or cuda, got '%s'\n", optarg);
          return 2;
        }
        break;
      case 'h':
      case O_HELP: usage(stdout); return 0;
      default: usage(stderr); return 2;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "zo-swapbench: unexpected argument '%s'\n", argv[optind]);
    usage(stderr);
    return 2;
  }
  if (!o.path) {
    fprintf(stderr, "zo-swapbench: --path DIR is required\n");
    usage(stderr);
    return 2;
  }
  if (!o.do_op[0] && !o.do_op[1]) {
    fprintf(stderr, "zo-swapbench: --ops: nothing to measure\n");
    return 2;
  }
  o.size = o.quick ? 16 * MiB : GiB;
  if (size_s && (parse_size(size_s, &o.size) || o.size == 0)) {
    fprintf(stderr, "zo-swapbench: --size: cannot parse '%s' (e.g. 1G, 512M, 1073741824)\n", size_s);
    return 2;
  }
  if (parse_list(bs_s ? bs_s : o.quick ? "128K,1M" : "128K,256K,512K,1M,2M,4M,8M", 1, o.bs, &o.n_bs)) {
    fprintf(stderr, "zo-swapbench: --block-sizes: need a comma list of multiples of 4K up to 1G, got '%s'\n", bs_s);
    return 2;
  }
  uint64_t qd64[SB_MAX_LIST];
  if (parse_list(qd_s ? qd_s : o.quick ? "1,8" : "1,2,4,8,16,32,64,128", 0, qd64, &o.n_qd)) {
    fprintf(stderr, "zo-swapbench: --queue-depths: need a comma list of 1..32768, got '%s'\n", qd_s);
    return 2;
  }
  for (int i = 0; i < o.n_qd; i++) o.qd[i] = (unsigned)qd64[i];
  /* Whole-file transfers in aligned pieces: round the size up to 64 KiB (a multiple of any O_DIRECT
   * alignment in practice). */
  uint64_t rounded;
  if (__builtin_add_overflow(o.size, 64 * KiB - 1, &rounded)) {
    fprintf(stderr, "zo-swapbench: --size: %" PRIu64 " bytes is more than a file can have\n", o.size);
    return 2;
  }
  o.size = rounded / (64 * KiB) * (64 * KiB);
  o.bytes = o.size < 512 * MiB ? o.size : 512 * MiB;
  if (bytes_s && (parse_size(bytes_s, &o.bytes) || o.bytes == 0)) {
    fprintf(stderr, "zo-swapbench: --bytes: cannot parse '%s' (e.g. 512M)\n", bytes_s);
    return 2;
  }
  if (o.bytes > o.size) o.bytes = o.size;
  o.bytes = (o.bytes + 64 * KiB - 1) / (64 * KiB) * (64 * KiB); /* <= o.size, a multiple of 64 KiB: cannot wrap */
  /* Queue depths the measurement can use: io_uring takes up to 32768 entries (parse_list), but a measurement moves
   * --bytes in blocks of the smallest --block-sizes, so more blocks than that are never in flight, and the pread
   * baseline would allocate queue depth x block size bytes of buffers (and as many threads) for nothing. Refused
   * here, before anything is allocated. */
  uint64_t bs_min = o.bs[0];
  for (int i = 1; i < o.n_bs; i++)
    if (o.bs[i] < bs_min) bs_min = o.bs[i];
  const uint64_t qd_use = o.bytes / bs_min ? o.bytes / bs_min : 1;
  for (int i = 0; i < o.n_qd; i++)
    if (o.qd[i] > qd_use) {
      fprintf(stderr, "zo-swapbench: --queue-depths: %u is more than the %" PRIu64 " blocks of %" PRIu64 " bytes "
              "(the smallest --block-sizes) in the %" PRIu64 " bytes a measurement moves (--bytes, at most --size); "
              "use a queue depth of at most %" PRIu64 " or a larger --size/--bytes\n", o.qd[i], qd_use, bs_min,
              o.bytes, qd_use);
      return 2;
    }
  o.max_sec = o.quick ? 0 : 0.3;
  if (sec_s) {
    char *end;
    errno = 0;
    o.max_sec = strtod(sec_s, &end);
    if (errno || *end || end == sec_s || !(o.max_sec >= 0) || o.max_sec > 3600) {
      fprintf(stderr, "zo-swapbench: --max-seconds: need 0..3600, got '%s'\n", sec_s);
      return 2;
    }
  }

  /* The device first: --device cuda on a machine without a GPU ends here (77), before any disk work. */
  zo_status dst = zo_device_create(o.device, o.device == ZO_DEVICE_CUDA ? zo_device_default_ordinal() : 0, 0, &g_dev);
  if (dst != ZO_OK) {
    if (dst == ZO_ERR_UNSUPPORTED && o.device == ZO_DEVICE_CUDA) {
      fprintf(stderr, "zo-swapbench: --device cuda: no CUDA device (%s)\n", zo_last_error());
      return 77;
    }
    fprintf(stderr, "zo-swapbench: --device %s: %s: %s\n", zo_device_kind_name(o.device), zo_status_string(dst),
            zo_last_error());
    return 1;
  }

  int use_fio = !o.no_fio && have_program("fio");
  g_tty = isatty(STDERR_FILENO);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);

  char szs[32];
  fmt_size(o.size, szs, sizeof szs);
  printf("zo-swapbench: path %s, file %s (%" PRIu64 " bytes), %d block sizes x %d queue depths, ops %s%s%s, "
         "reps %d\n",
         o.path, szs, o.size, o.n_bs, o.n_qd, o.do_op[0] ? "read" : "", o.do_op[0] && o.do_op[1] ? "," : "",
         o.do_op[1] ? "write" : "", o.reps);
  printf("registered buffers: %s; SQPOLL: %s; fio: %s\n", SB_HAVE_REGBUF ? "swept" : "n/a (not in this swap API)",
         SB_HAVE_SQPOLL ? "swept" : "n/a (not in this swap API)",
         use_fio ? (o.fio_variants ? "io_uring engine, ring variants mirrored" : "io_uring engine, plain")
                 : o.no_fio ? "off (--no-fio)" : "not installed (apt-get install fio)");
  fflush(stdout);

  int failures = run_sweep(&o, use_fio);
  if (failures < 0) {
    zo_device_destroy(g_dev);
    return 1;
  }
  if (g_stop) fprintf(stderr, "zo-swapbench: interrupted; reporting what was measured\n");

  print_table(&o, use_fio);
  print_best(&o, use_fio);
  target t[4];
  int nt;
  eval_targets(&o, use_fio, t, &nt);
  printf("\nTargets (issue 4):\n");
  for (int i = 0; i < nt; i++) {
    if (t[i].ratio < 0)
      printf("  n/a   %s: %s\n", t[i].name, t[i].detail);
    else
      printf("  %s  %s: ratio %.3f (need %.2f) - %s\n", t[i].ratio >= t[i].need ? "PASS" : "MISS", t[i].name,
             t[i].ratio, t[i].need, t[i].detail);
  }
  print_device_pass();
  if (failures) printf("\n%d measurement%s failed (see above)\n", failures, failures == 1 ? "" : "s");
  int rc = failures ? 1 : 0;
  if (o.json && write_json(&o, use_fio, t, nt) != 0) rc = 1;
  if (o.plot && write_plot(&o, use_fio) != 0) rc = 1;
  free(g_res);
  zo_device_destroy(g_dev);
  if (g_stop && rc == 0) rc = 128 + (int)g_stop; /* interrupted: say so, as a shell does */
  return rc;
}
