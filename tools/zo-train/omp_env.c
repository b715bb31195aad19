/*
 * omp_env.c - zo-train's OpenMP spin limit: before main(), a zo-train started
 * without OMP_WAIT_POLICY or GOMP_SPINCOUNT re-executes itself once with
 * GOMP_SPINCOUNT=ZO_TRAIN_SPINCOUNT. Not a general environment editor, and
 * not part of the library (libzoffload never touches the environment).
 *
 * Why: libgomp reads its environment once, in its constructor, before any
 * code of zo-train runs (a .preinit_array hook is too early: glibc sets
 * environ again after it), and it has no call that changes the spin. Unset,
 * a thread that waits at a barrier or for the next parallel region spins
 * 300000 pause instructions (~3.3 ms at the 11 ns a pause takes on this 2-core
 * VM) before it sleeps; with another process on the other core, the spinning
 * thread holds a core while the thread it waits for waits for one.
 * Measured (tools/zo-contention-bench.sh, default config, 20 steps, three
 * busy processes on 2 cores, the gpt.c work thresholds in place):
 * unset 33 to 48 s of steps against ~1.7 s idle (20 to 28x); passive
 * (spin 0) 12.4 to 14.4 s against 3.0 to 3.2 s (4.0 to 4.8x, fair share
 * 2.5x); 10000 13.5 to 14.0 s (4.2 to 4.6x). Idle (10 steps, six
 * interleaved runs each, load average ~3.5 from other jobs): unset 79.8 to
 * 83.7 ms a step, 10000 79.6 to 81.7, 1000 82.2 to 85.4, passive 85.3 to
 * 88.4. 10000 (~110 us here) keeps the idle speed of spinning between
 * back-to-back regions and stops spinning soon after a peer is descheduled.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define ZO_TRAIN_SPINCOUNT "10000"

__attribute__((constructor)) static void zo_train_omp_env(int argc, char **argv) {
  (void)argc;
  if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT"))
    return; /* the user's choice, or the second start */
  if (setenv("GOMP_SPINCOUNT", ZO_TRAIN_SPINCOUNT, 1) != 0) return;
  if (!argv || !argv[0]) return;
  execv("/proc/self/exe", argv);
  /* exec failed (no /proc): go on with libgomp's default spin; say so once */
  fprintf(
      stderr,
      "zo-train: warning: could not re-execute with GOMP_SPINCOUNT=%s (/proc/self/exe); OpenMP threads "
      "spin libgomp's default 300000 rounds (set OMP_WAIT_POLICY=passive under CPU contention)\n",
      ZO_TRAIN_SPINCOUNT);
  unsetenv("GOMP_SPINCOUNT");
}
