/*
 * zo-swapbench - measures what the NVMe tier can do on a given directory: sweeps the zoffload swap
 * engine over block sizes, queue depths and ring options against a plain O_DIRECT pread/pwrite baseline
 * and fio's io_uring engine on the same file, and prints the "aio" config block to paste.
 * It is a benchmark and tuning tool (DeepSpeed's ds_io / ds_nvme_tune); it is not a test of correctness.
 * This file is the run's outline; options.c, engines.c, fio.c, sweep.c, device_pass.c and report.c
 * hold the parts (swapbench.h says what each offers).
 */
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "fsname.h"
#include "swapbench.h"

/* ---- the run's state (swapbench.h) --------------------------------------------------------------- */

const char *const op_name[2] = {"read", "write"};
const char *const eng_name[3] = {"zoffload", "pread", "fio"};
result *g_res;
size_t g_nres, g_capres;
volatile sig_atomic_t g_stop;
zo_device_t *g_dev;
linkbench g_link;
dev_pass g_pass;

/* SIGINT / SIGTERM: stop measuring, report what was measured, exit 128 + the (first) signal. */
static void on_signal(int sig) {
  if (!g_stop) g_stop = sig;
  zo_request_stop(); /* an emulated link of the device pass stops throttling */
}

static void catch_signals(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
}

/* The device first: --device cuda on a machine without a GPU ends here (77), before any disk work.
 * Returns -1 with g_dev set, or the exit status. */
static int open_device(const opts *o) {
  zo_status dst =
      zo_device_create(o->device, o->device == ZO_DEVICE_CUDA ? zo_device_default_ordinal() : 0, 0,
                       &g_dev);
  if (dst == ZO_OK) return -1;
  if (dst == ZO_ERR_UNSUPPORTED && o->device == ZO_DEVICE_CUDA) {
    fprintf(stderr, "zo-swapbench: --device cuda: no CUDA device (%s)\n", zo_last_error());
    return 77;
  }
  fprintf(stderr, "zo-swapbench: --device %s: %s: %s\n", zo_device_kind_name(o->device),
          zo_status_string(dst), zo_last_error());
  return 1;
}

/* Warn about a directory whose figures are not a drive's: tmpfs or ramfs (memory), or a file system
 * that is not on a block device (network, FUSE, an overlay). btrfs and zfs report an anonymous
 * device number for a real disk: not warned. Returns the device number (0 when unknown). */
static dev_t check_path(const char *path) {
  struct statfs sf;
  struct stat st;
  if (statfs(path, &sf) != 0 || stat(path, &st) != 0) return 0; /* the swap layer names the error */
  char buf[32];
  unsigned long type = (unsigned long)sf.f_type;
  const char *fs = zo_tool_fs_name(type, buf, sizeof buf);
  if (zo_tool_fs_is_memory(type))
    fprintf(stderr,
            "zo-swapbench: warning: %s is on %s, which is memory: these figures measure RAM, "
            "not a drive; point --path at a directory on the NVMe drive\n",
            path, fs);
  else if (major(st.st_dev) == 0 && !zo_tool_fs_anon_dev(type))
    fprintf(stderr,
            "zo-swapbench: warning: %s is on %s, not on a block device: these figures include "
            "that layer and are not a drive's own\n",
            path, fs);
  return st.st_dev;
}

/* The targets: each path alone, then (with several) the files striped across all. */
static void make_targets(const opts *o) {
  dev_t dev[SB_MAX_PATHS];
  int same = 1;
  g_ntargets = 0;
  for (int i = 0; i < o->n_paths; i++) {
    dev[i] = check_path(o->paths[i]);
    if (i && dev[i] != dev[0]) same = 0;
    bench_target *t = &g_targets[g_ntargets++];
    t->paths[0] = o->paths[i];
    t->n_paths = 1;
    snprintf(t->label, sizeof t->label, "%s", o->paths[i]);
  }
  if (o->n_paths < 2) return;
  bench_target *t = &g_targets[g_ntargets++];
  for (int i = 0; i < o->n_paths; i++) t->paths[i] = o->paths[i];
  t->n_paths = o->n_paths;
  t->striped = 1;
  snprintf(t->label, sizeof t->label, "striped x%d", o->n_paths);
  if (same && dev[0])
    printf("note: the %d --path directories are on one device (%u:%u): striping across them cannot "
           "add bandwidth here; the striped run shows what striping costs\n",
           o->n_paths, major(dev[0]), minor(dev[0]));
}

/* The lines that say what will be swept. */
static void print_plan(const opts *o, int use_fio) {
  char szs[32], sts[32];
  fmt_size(o->size, szs, sizeof szs);
  fmt_size(o->stripe, sts, sizeof sts);
  printf("zo-swapbench: path%s ", o->n_paths > 1 ? "s" : "");
  for (int i = 0; i < o->n_paths; i++) printf("%s%s", i ? ", " : "", o->paths[i]);
  if (o->n_paths > 1) printf(" (each alone, then striped across all in %s stripes)", sts);
  printf("; file %s (%" PRIu64
         " bytes), %d block sizes x %d queue depths, ops %s%s%s, %d repetitions\n",
         szs, o->size, o->n_bs, o->n_qd, o->do_op[0] ? "read" : "",
         o->do_op[0] && o->do_op[1] ? "," : "", o->do_op[1] ? "write" : "", o->reps);
  printf("registered buffers: %s; SQPOLL: %s; fio: %s\n",
         SB_HAVE_REGBUF ? "swept" : "n/a (not in this swap API)",
         SB_HAVE_SQPOLL ? "swept" : "n/a (not in this swap API)",
         use_fio     ? (o->fio_variants ? "io_uring engine, ring variants mirrored"
                                        : "io_uring engine, plain")
         : o->no_fio ? "off (--no-fio)"
                     : "not installed (apt-get install fio)");
  fflush(stdout);
}

int main(int argc, char **argv) {
  opts o;
  int rc = sb_parse_options(argc, argv, &o); /* options.c */
  if (rc >= 0) return rc;
  rc = open_device(&o);
  if (rc >= 0) return rc;

  int use_fio = !o.no_fio && have_program("fio");
  setvbuf(stdout, NULL, _IOLBF, 0); /* a pipe gets each line as it is printed */
  catch_signals();
  make_targets(&o);
  print_plan(&o, use_fio);

  int failures = run_sweep(&o, use_fio); /* sweep.c, then device_pass.c */
  if (failures < 0) {
    zo_device_destroy(g_dev);
    return 1;
  }
  if (g_stop) fprintf(stderr, "zo-swapbench: interrupted; reporting what was measured\n");

  rc = sb_report(&o, use_fio, failures); /* report.c */
  free(g_res);
  zo_device_destroy(g_dev);
  if (g_stop && rc == 0) rc = 128 + (int)g_stop; /* interrupted: say so, as a shell does */
  return rc;
}
