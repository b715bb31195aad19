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
#include <unistd.h>

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

/* The two lines that say what will be swept. */
static void print_plan(const opts *o, int use_fio) {
  char szs[32];
  fmt_size(o->size, szs, sizeof szs);
  printf("zo-swapbench: path %s, file %s (%" PRIu64
         " bytes), %d block sizes x %d queue depths, ops %s%s%s, "
         "reps %d\n",
         o->path, szs, o->size, o->n_bs, o->n_qd, o->do_op[0] ? "read" : "",
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
  g_tty = isatty(STDERR_FILENO);
  catch_signals();
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
