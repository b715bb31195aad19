/*
 * swapbench.h - what the files of zo-swapbench share: settings, the result and option records, the
 * globals of one run, and the functions each file offers the others. Private to tools/zo-swapbench/.
 */
#ifndef ZO_SWAPBENCH_H
#define ZO_SWAPBENCH_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "zoffload/device.h"
#include "zoffload/pinned.h"
#include "zoffload/status.h"
#include "zoffload/swap.h"

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
#define SB_MAX_PATHS 8 /* --path entries */
#define SB_MAX_REPS 64
#define SB_REQ_BYTES (64 * MiB)  /* zoffload: a measurement is submitted as requests of this size */
#define SB_BUF_BYTES (256 * MiB) /* zoffload: host buffer, reused cyclically across requests */
#define SB_PASS_CHUNK \
  (16 * MiB) /* read pass: bytes per swap read and H2D copy at most (8+ chunks in flight) */
/* SQPOLL variants: the kernel poller spins this long after the last submission before it sleeps.
 * The library default (1 s) would leave it burning a core through the next engine's measurement
 * (on a 2-core machine that halves everyone's throughput); 20 ms never expires within a transfer. */
#define SB_SQPOLL_IDLE_MS 20u

enum { OP_READ = 0, OP_WRITE = 1 };
enum { ENG_ZO = 0, ENG_PREAD = 1, ENG_FIO = 2 };
extern const char *const op_name[2];
extern const char *const eng_name[3];

/* -1: not applicable / not offered by the API (printed "n/a"); 0 off; 1 on. */
typedef struct variant {
  int regbuf;
  int sqpoll;
} variant;

/* One repetition of one measurement. Figures < 0 were not measured. */
typedef struct meas {
  double sec;     /* first submit to last completion */
  uint64_t moved; /* bytes */
  double gbps;    /* moved / sec, 1e9 bytes per second */
  double iops;    /* I/O requests (pieces of block_used bytes) completed per second */
  double p50_us, p99_us, p999_us; /* completion latency of those requests, submit to completion */
  double cpu_s;                   /* CPU seconds (user + system) the engine's process used */
} meas;

typedef struct result {
  int target; /* index into g_targets: one path, or the files striped across all */
  int op, engine;
  uint64_t block_size; /* bytes requested on the command line */
  uint64_t block_used; /* bytes per piece actually used (zoffload rounds to its alignment) */
  unsigned queue_depth;
  int regbuf, sqpoll;             /* -1 n/a */
  double gbps;                    /* median of the repetitions, 1e9 bytes per second */
  double gbps_min, gbps_max;      /* spread of the repetitions */
  double iops;                    /* median; < 0 not measured */
  double p50_us, p99_us, p999_us; /* medians over the repetitions; < 0 not measured */
  double cpu_s_per_gb;            /* median CPU seconds per 1e9 bytes moved; < 0 not measured */
  double seconds;                 /* of the median repetition */
  uint64_t bytes;                 /* moved by the median repetition */
  int reps;
  int ok;      /* 0: the measurement failed (error text in note) or was not run */
  int skipped; /* not run: the sweep was interrupted first */
  char note[256];
} result;

/* What a sweep runs on: one --path alone, or the swap files striped across every --path. */
typedef struct bench_target {
  const char *paths[SB_MAX_PATHS];
  int n_paths;
  int striped;
  char label[64]; /* "path 1", "striped x2" */
} bench_target;

typedef struct opts {
  const char *paths[SB_MAX_PATHS];
  int n_paths;
  uint64_t stripe; /* bytes per stripe of the striped run */
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
  int fio_variants;      /* also run fio with --fixedbufs --registerfiles / --sqthread_poll */
  uint64_t bytes;        /* bytes per measurement at most (from offset 0 of the file) */
  double max_sec;        /* seconds per measurement at most (0: no limit) */
  zo_device_kind device; /* the device of the NVMe -> pinned -> device read pass: HOST or CUDA */
} opts;

/* The NVMe -> pinned -> device read pass (after the sweep, on the first variant's handle and file). */
typedef struct dev_pass {
  int ran; /* 1: attempted (ok says whether it worked); 0: skipped, note says why */
  int ok;
  uint64_t block_size; /* the best zoffload read setting of the sweep */
  unsigned queue_depth;
  size_t chunk_bytes;    /* bytes per swap read and per H2D copy */
  unsigned slots;        /* pinned chunks in flight */
  uint64_t bytes;        /* moved */
  double seconds, gbps;  /* first submit to last copy complete; bytes / seconds (1e9 B/s) */
  double disk_read_gbps; /* best read of the sweep, any engine */
  const char *disk_engine;
  double h2d_gbps;   /* H2D limit at chunk_bytes, this run (g_link) */
  double limit_gbps; /* min(disk_read_gbps, h2d_gbps) */
  double ratio;      /* gbps / limit_gbps */
  char note[256];
} dev_pass;

typedef struct zo_bench {
  zo_swap_t *sw;
  zo_swap_file_t *f;
  zo_pinned_pool_t *pool;
  char *buf;
  size_t buf_bytes;
  int sqpoll;
} zo_bench;


/* ---- the run's state (main.c) --------------------------------------------------------------------- */

extern result *g_res; /* every measurement of the sweep, in order */
extern size_t g_nres, g_capres;
extern volatile sig_atomic_t g_stop; /* the first SIGINT / SIGTERM, 0 while none came */
extern zo_device_t *g_dev;           /* the device of the read pass */
extern linkbench g_link;             /* its link limit, measured at the pass's chunk size */
extern dev_pass g_pass;
extern bench_target g_targets[SB_MAX_PATHS + 1];
extern int g_ntargets;

/* ---- options.c ---------------------------------------------------------------------------------- */

/* Parses and checks the command line into *o (defaults filled in). Returns -1 to go on, or the exit
 * status after printing why not: 0 after --help, 2 for a bad option or value. */
int sb_parse_options(int argc, char **argv, opts *o);

/* ---- engines.c: zoffload swap and O_DIRECT pread/pwrite ------------------------------------------- */

/* One swap handle per ring variant on @t's directories (striped when several), its file written once
 * untimed; 0, or -1 with the error printed. */
int zo_bench_open(zo_bench *zb, const opts *o, const bench_target *t, unsigned qd_max, variant v,
                  int rank);
void zo_bench_close(zo_bench *zb);
/* One zoffload measurement of the first @bytes into *m (seconds, bytes, GB/s, IOPS and latency of
 * the swap's pieces; not the CPU); 0, or -1 with the error printed. */
int zo_transfer(zo_bench *zb, int is_write, uint64_t bytes, double max_sec, meas *m);
/* One pread/pwrite measurement with @qd threads into *m (latency of each call; not the CPU); 0, or
 * -1 with the error in @note. */
int pread_transfer(const char *path, int direct, int is_write, uint64_t size, double max_sec,
                   uint64_t bs, unsigned qd, meas *m, char *note, size_t note_n);

/* ---- fio.c ------------------------------------------------------------------------------------------ */

/* 1 when the shell finds @name on PATH. */
int have_program(const char *name);
/* One fio run into *m (fio's own bandwidth, IOPS, clat percentiles and job CPU); 0, or -1 with the
 * error in @note. */
int fio_transfer(const char *path, int is_write, uint64_t size, uint64_t bytes, double max_sec,
                 uint64_t bs, unsigned qd, variant v, meas *m, char *note, size_t note_n);

/* ---- sweep.c ---------------------------------------------------------------------------------------- */

/* The sweep of every target (each path alone, then striped across all), then the device read pass;
 * the number of failed measurements, or -1 when a handle could not be opened or switched. */
int run_sweep(const opts *o, int use_fio);

/* ---- device_pass.c ---------------------------------------------------------------------------------- */

/* The NVMe -> pinned -> device read pass into *p; 0 (done or skipped), -1 failed (p->note). */
int device_pass(zo_bench *zb, const opts *o, dev_pass *p);
void print_device_pass(void);
json_t *device_pass_json(void);

/* ---- report.c --------------------------------------------------------------------------------------- */

/* "1G", "512M", "4K" or plain bytes, whichever divides @b. */
void fmt_size(uint64_t b, char *out, size_t n);
/* "n/a", "off" or "on" for -1, 0, 1. */
const char *tri(int v);
/* The fastest (median GB/s) successful result of @op on @engine on the first path, NULL when none. */
const result *best_of(int op, int engine);
/* The same on target @t. */
const result *best_of_t(int t, int op, int engine);
/* Table, best settings, targets, device pass, JSON and chart; the exit status (0, or 1 when a
 * measurement or a file failed). */
int sb_report(const opts *o, int use_fio, int failures);

#endif
