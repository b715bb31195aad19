/*
 * options.c - zo-swapbench's command line: --help text and the options, their values parsed through
 * tools/common/args.c and checked against each other. Measures nothing.
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "swapbench.h"

static void usage(FILE *out) {
  fprintf(
      out,
      "usage: zo-swapbench --path DIR [--path DIR2 ...] [options]\n"
      "Measures the zoffload NVMe swap engine (io_uring, O_DIRECT) on DIR against an O_DIRECT\n"
      "pread/pwrite baseline and fio's io_uring engine, and prints the \"aio\" config block to paste.\n"
      "For each setting: GB/s (median of the repetitions, with their min and max), IOPS,\n"
      "completion latency p50/p99/p99.9 (each I/O request, submit to completion) and the CPU\n"
      "time per GB moved.\n"
      "\n"
      "  --path DIR[,DIR...]   directory on the disk to measure (required); repeat it or give a\n"
      "                        comma list (at most %d) to measure each directory alone and then\n"
      "                        the swap files striped across all of them, as a config's\n"
      "                        \"nvme_path\": [DIR, DIR2] stripes them; private\n"
      "                        zoffload-rank9999999N directories (one per ring variant)\n"
      "                        are made in each and removed after\n"
      "  --stripe-size BYTES   bytes per stripe of the striped run, a multiple of 4K\n"
      "                        (default 1M, as zoffload stripes with the default aio.block_size)\n"
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
      "  --repeat | --reps N   repetitions per measurement, 1..%d; the median is reported\n"
      "                        with the min and max (default 3; --quick: 2)\n"
      "  --json FILE           write every result, the comparisons and the best settings as JSON\n"
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
      "Progress goes to stderr: a bar with the elapsed time, the rate and the ETA on a terminal,\n"
      "else a line every 10 s. A directory on tmpfs (memory) or not on a block device is warned\n"
      "about: its figures are not a drive's.\n"
      "CPU time is this process's user + system time (its threads, io_uring workers and SQPOLL\n"
      "poller included) for zoffload and pread, and fio's job's usr_cpu + sys_cpu for fio.\n"
      "Latency: zoffload times each block_size piece from its submission to its reaped completion,\n"
      "pread each call, fio reports its clat; all per request of block size bytes.\n"
      "Each ring variant gets one swap handle and one preallocated O_DIRECT file, written once\n"
      "untimed and kept for the whole sweep (zo_swap_set_queue switches block size and queue\n"
      "depth); the host buffer is pinned (mlock). Each measurement moves the first --bytes of the\n"
      "file or runs --max-seconds, for every engine alike (fio: --io_size, --runtime); the\n"
      "repetitions of all engines are interleaved, their order rotated each time, and the\n"
      "median is reported. The pread baseline (queue-depth threads, interleaved block stripes; one\n"
      "thread at QD 1) and fio run on the first variant's file. SQPOLL variants use a %u ms\n"
      "poller idle time, and the next engine starts after the poller sleeps. Registered buffers\n"
      "(+ files) and SQPOLL are swept when the swap API offers them (this build: registered\n"
      "buffers %s, SQPOLL %s).\n"
      "\n"
      "After the sweep, when reads were swept: the link limit (zo_memcpy_async loops between\n"
      "pinned host and device memory: H2D, D2H, both at once; best of 3) and a read pass that\n"
      "swaps chunks into pinned memory and copies each to the device as it lands, at the best\n"
      "zoffload read setting, against min(best read of the sweep, H2D limit) of the same run.\n",
      SB_MAX_PATHS, SB_MAX_REPS, SB_SQPOLL_IDLE_MS, SB_HAVE_REGBUF ? "yes" : "n/a",
      SB_HAVE_SQPOLL ? "yes" : "n/a");
}

/* A block-size (@is_size) or queue-depth list being parsed, one zo_tool_split_list() token at a time. */
typedef struct u64_list {
  uint64_t *v; /* [SB_MAX_LIST] */
  int n;
  int is_size;
} u64_list;

/* A block or stripe size: bytes as zo_tool_parse_bytes reads them, a multiple of 4K up to 1G. 0, or -1. */
static int parse_4k_size(const char *s, uint64_t *out) {
  return zo_tool_parse_bytes(s, out) || *out == 0 || *out % 4096 || *out > GiB ? -1 : 0;
}

static int list_add(const char *tok, int index, void *ctx) {
  u64_list *l = ctx;
  uint64_t v;
  int64_t q;
  if (index >= SB_MAX_LIST) return -1;
  if (l->is_size) {
    if (parse_4k_size(tok, &v)) return -1;
  } else {
    if (zo_tool_parse_int(tok, 1, 32768, &q)) return -1;
    v = (uint64_t)q;
  }
  l->v[index] = v;
  l->n = index + 1;
  return 0;
}

/* Block sizes (multiples of 4K up to 1G) or queue depths (1..32768); 0, or -1 for a bad or empty list. */
static int parse_list(const char *s, int is_size, uint64_t *out, int *n) {
  u64_list l = {out, 0, is_size};
  int count = zo_tool_split_list(s, list_add, &l, NULL, 0);
  *n = l.n;
  return count > 0 ? 0 : -1;
}

static int path_add(const char *tok, int index, void *ctx) {
  opts *o = ctx;
  (void)index;
  if (o->n_paths >= SB_MAX_PATHS) return -1;
  char *dup = strdup(tok);
  if (!dup) return -1;
  o->paths[o->n_paths++] = dup;
  return 0;
}

static int op_add(const char *tok, int index, void *ctx) {
  opts *o = ctx;
  (void)index;
  if (!strcmp(tok, "read"))
    o->do_op[OP_READ] = 1;
  else if (!strcmp(tok, "write"))
    o->do_op[OP_WRITE] = 1;
  else
    return -1;
  return 0;
}

/* The option values as given, parsed after every flag was seen (defaults depend on --quick). */
typedef struct raw_values {
  const char *size, *bs, *qd, *bytes, *sec, *stripe;
} raw_values;

/* getopt over argv into *o and *raw. Returns -1 to go on, or the exit status (message printed). */
static int parse_flags(int argc, char **argv, opts *o, raw_values *raw) {
  enum {
    O_PATH_ = 256,
    O_SIZE,
    O_BYTES,
    O_MAXSEC,
    O_BS,
    O_QD,
    O_OPS,
    O_REPS,
    O_JSON,
    O_PLOT,
    O_QUICK,
    O_NOFIO,
    O_FIOVAR,
    O_HELP,
    O_DEVICE,
    O_STRIPE
  };
  static const struct option lo[] = {{"path", required_argument, 0, O_PATH_},
                                     {"size", required_argument, 0, O_SIZE},
                                     {"bytes", required_argument, 0, O_BYTES},
                                     {"max-seconds", required_argument, 0, O_MAXSEC},
                                     {"block-sizes", required_argument, 0, O_BS},
                                     {"queue-depths", required_argument, 0, O_QD},
                                     {"ops", required_argument, 0, O_OPS},
                                     {"reps", required_argument, 0, O_REPS},
                                     {"json", required_argument, 0, O_JSON},
                                     {"plot", required_argument, 0, O_PLOT},
                                     {"quick", no_argument, 0, O_QUICK},
                                     {"no-fio", no_argument, 0, O_NOFIO},
                                     {"fio-variants", no_argument, 0, O_FIOVAR},
                                     {"help", no_argument, 0, O_HELP},
                                     {"device", required_argument, 0, O_DEVICE},
                                     {"repeat", required_argument, 0, O_REPS},
                                     {"stripe-size", required_argument, 0, O_STRIPE},
                                     {0, 0, 0, 0}};
  int c;
  opterr = 0; /* zo_tool_option_error() says it in one line, with the nearest flag */
  while ((c = getopt_long(argc, argv, ":h", lo, NULL)) != -1) {
    switch (c) {
      case O_PATH_:
        if (zo_tool_split_list(optarg, path_add, o, NULL, 0) <= 0) {
          fprintf(stderr, "zo-swapbench: --path: need 1..%d directories, got '%s'\n", SB_MAX_PATHS,
                  optarg);
          return 2;
        }
        break;
      case O_STRIPE: raw->stripe = optarg; break;
      case O_SIZE: raw->size = optarg; break;
      case O_BYTES: raw->bytes = optarg; break;
      case O_MAXSEC: raw->sec = optarg; break;
      case O_BS: raw->bs = optarg; break;
      case O_QD: raw->qd = optarg; break;
      case O_OPS: {
        o->do_op[0] = o->do_op[1] = 0;
        char bad[ZO_TOOL_LIST_MAX];
        int n = zo_tool_split_list(optarg, op_add, o, bad, sizeof bad);
        if (n < 0) {
          fprintf(stderr, "zo-swapbench: --ops: unknown op '%s' (read, write)\n",
                  n == -1 ? bad : optarg);
          return 2;
        }
        break;
      }
      case O_REPS: {
        int64_t r;
        if (zo_tool_parse_int(optarg, 1, SB_MAX_REPS, &r)) {
          fprintf(stderr, "zo-swapbench: --repeat: need 1..%d, got '%s'\n", SB_MAX_REPS, optarg);
          return 2;
        }
        o->reps = (int)r;
        break;
      }
      case O_JSON: o->json = optarg; break;
      case O_PLOT: o->plot = optarg; break;
      case O_QUICK: o->quick = 1; break;
      case O_NOFIO: o->no_fio = 1; break;
      case O_FIOVAR: o->fio_variants = 1; break;
      case O_DEVICE:
        if (zo_device_kind_parse(optarg, &o->device) != ZO_OK || o->device == ZO_DEVICE_AUTO) {
          fprintf(stderr, "zo-swapbench: --device: need host or cuda, got '%s'\n", optarg);
          return 2;
        }
        break;
      case 'h':
      case O_HELP: usage(stdout); return 0;
      default: return zo_tool_option_error("zo-swapbench", c, argc, argv, lo);
    }
  }
  if (optind < argc) {
    fprintf(stderr, "zo-swapbench: unexpected argument '%s'\n", argv[optind]);
    usage(stderr);
    return 2;
  }
  if (!o->n_paths) {
    fprintf(stderr, "zo-swapbench: --path DIR is required\n");
    usage(stderr);
    return 2;
  }
  if (!o->do_op[0] && !o->do_op[1]) {
    fprintf(stderr, "zo-swapbench: --ops: nothing to measure\n");
    return 2;
  }
  return -1;
}

/* Queue depths the measurement can use: io_uring takes up to 32768 entries (parse_list), but a measurement moves
 * --bytes in blocks of the smallest --block-sizes, so more blocks than that are never in flight, and the pread
 * baseline would allocate queue depth x block size bytes of buffers (and as many threads) for nothing. Refused
 * here, before anything is allocated. Returns -1 to go on, or 2 (message printed). */
static int check_queue_depths(const opts *o) {
  uint64_t bs_min = o->bs[0];
  for (int i = 1; i < o->n_bs; i++)
    if (o->bs[i] < bs_min) bs_min = o->bs[i];
  const uint64_t qd_use = o->bytes / bs_min ? o->bytes / bs_min : 1;
  for (int i = 0; i < o->n_qd; i++)
    if (o->qd[i] > qd_use) {
      fprintf(stderr,
              "zo-swapbench: --queue-depths: %u is more than the %" PRIu64 " blocks of %" PRIu64
              " bytes "
              "(the smallest --block-sizes) in the %" PRIu64
              " bytes a measurement moves (--bytes, at most --size); "
              "use a queue depth of at most %" PRIu64 " or a larger --size/--bytes\n",
              o->qd[i], qd_use, bs_min, o->bytes, qd_use);
      return 2;
    }
  return -1;
}

/* The sizes, lists and limits, with their --quick or plain defaults, checked against each other.
 * Returns -1 to go on, or 2 (message printed). */
static int parse_values(opts *o, const raw_values *raw) {
  o->size = o->quick ? 16 * MiB : GiB;
  if (raw->size && (zo_tool_parse_bytes(raw->size, &o->size) || o->size == 0)) {
    fprintf(stderr, "zo-swapbench: --size: cannot parse '%s' (e.g. 1G, 512M, 1073741824)\n",
            raw->size);
    return 2;
  }
  if (parse_list(raw->bs    ? raw->bs
                 : o->quick ? "128K,1M"
                            : "128K,256K,512K,1M,2M,4M,8M",
                 1, o->bs, &o->n_bs)) {
    fprintf(
        stderr,
        "zo-swapbench: --block-sizes: need a comma list of multiples of 4K up to 1G, got '%s'\n",
        raw->bs);
    return 2;
  }
  uint64_t qd64[SB_MAX_LIST];
  if (parse_list(raw->qd    ? raw->qd
                 : o->quick ? "1,8"
                            : "1,2,4,8,16,32,64,128",
                 0, qd64, &o->n_qd)) {
    fprintf(stderr, "zo-swapbench: --queue-depths: need a comma list of 1..32768, got '%s'\n",
            raw->qd);
    return 2;
  }
  for (int i = 0; i < o->n_qd; i++) o->qd[i] = (unsigned)qd64[i];
  /* Whole-file transfers in aligned pieces: round the size up to 64 KiB (a multiple of any O_DIRECT
   * alignment in practice). */
  uint64_t rounded;
  if (__builtin_add_overflow(o->size, 64 * KiB - 1, &rounded)) {
    fprintf(stderr, "zo-swapbench: --size: %" PRIu64 " bytes is more than a file can have\n",
            o->size);
    return 2;
  }
  o->size = rounded / (64 * KiB) * (64 * KiB);
  o->bytes = o->size < 512 * MiB ? o->size : 512 * MiB;
  if (raw->bytes && (zo_tool_parse_bytes(raw->bytes, &o->bytes) || o->bytes == 0)) {
    fprintf(stderr, "zo-swapbench: --bytes: cannot parse '%s' (e.g. 512M)\n", raw->bytes);
    return 2;
  }
  if (o->bytes > o->size) o->bytes = o->size;
  o->bytes = (o->bytes + 64 * KiB - 1) / (64 * KiB) *
             (64 * KiB); /* <= o->size, a multiple of 64 KiB: cannot wrap */
  if (check_queue_depths(o) >= 0) return 2;
  if (!o->reps) o->reps = o->quick ? 2 : 3; /* no --reps (which is 1 at least) */
  o->stripe = MiB;
  if (raw->stripe && parse_4k_size(raw->stripe, &o->stripe)) {
    fprintf(stderr, "zo-swapbench: --stripe-size: need a multiple of 4K up to 1G, got '%s'\n",
            raw->stripe);
    return 2;
  }
  o->max_sec = o->quick ? 0 : 0.3;
  if (raw->sec && zo_tool_parse_double(raw->sec, 0, 3600, &o->max_sec)) {
    fprintf(stderr, "zo-swapbench: --max-seconds: need 0..3600, got '%s'\n", raw->sec);
    return 2;
  }
  return -1;
}

int sb_parse_options(int argc, char **argv, opts *o) {
  memset(o, 0, sizeof *o);
  o->device = ZO_DEVICE_HOST;
  o->do_op[OP_READ] = o->do_op[OP_WRITE] = 1;
  raw_values raw = {0};
  int rc = parse_flags(argc, argv, o, &raw);
  return rc >= 0 ? rc : parse_values(o, &raw);
}
