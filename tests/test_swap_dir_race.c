/*
 * test_swap_dir_race.c - ownership of one private swap directory under
 * contention: N processes each run M create/destroy rounds on the same
 * nvme_path and rank. At most one may own it at a time (an owner creates an
 * O_EXCL sentinel beside the directory and a swap file inside it, and removes
 * both before destroy: EEXIST on the sentinel means two owners), and every
 * refusal must be the clean "in use by a live process" one, never ENOENT.
 * Count-based (rounds, not seconds), so its outcome does not depend on load.
 * Usage: test_swap_dir_race [DIR] [PROCS] [ROUNDS]; swap dirs go under DIR.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "zo_test.h"
#include "zoffload/swap.h"

static void quiet(zo_log_level level, const char *msg, void *user) {
  (void)level, (void)msg, (void)user;
}

/*
 * One contender: @rounds create/destroy rounds. Writes to @fd one line per
 * problem (at most 5) and a final "owned N busy M" line; exit 0 when it saw
 * no problem.
 */
static int contender(const char *root, int rounds, int fd) {
  zo_log_set_handler(quiet, NULL, ZO_LOG_ERROR);
  char sentinel[4200];
  snprintf(sentinel, sizeof sentinel, "%s/owner.sentinel", root);
  int owned = 0, busy = 0, problems = 0;
  char line[4600];
  for (int i = 0; i < rounds; i++) {
    zo_swap_t *sw = NULL;
    zo_status st = zo_swap_create(root, NULL, &sw);
    if (st != ZO_OK) {
      if (st == ZO_ERR_INVALID_USAGE && strstr(zo_last_error(), "is in use by a live process")) {
        busy++;
      } else if (problems++ < 5) {
        int n =
            snprintf(line, sizeof line, "pid %ld round %d: create refused unclean: status %d: %s\n",
                     (long)getpid(), i, (int)st, zo_last_error());
        if (write(fd, line, (size_t)n) != n) return 2;
      }
      sched_yield();
      continue;
    }
    owned++;
    int s = open(sentinel, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
    if (s < 0 && problems++ < 5) {
      int n = snprintf(line, sizeof line, "pid %ld round %d: TWO OWNERS: sentinel %s: %s\n",
                       (long)getpid(), i, sentinel, strerror(errno));
      if (write(fd, line, (size_t)n) != n) return 2;
    }
    zo_swap_file_t *f = NULL;
    st = zo_swap_file_create(sw, "m.swp", 4096, &f);
    if (st != ZO_OK && problems++ < 5) {
      int n = snprintf(line, sizeof line, "pid %ld round %d: owner cannot make a swap file: %s\n",
                       (long)getpid(), i, zo_last_error());
      if (write(fd, line, (size_t)n) != n) return 2;
    }
    sched_yield(); /* let the others try while we own it */
    if (s >= 0) {
      close(s);
      unlink(sentinel);
    }
    zo_swap_destroy(sw);
  }
  int n = snprintf(line, sizeof line, "owned %d busy %d\n", owned, busy);
  if (write(fd, line, (size_t)n) != n) return 2;
  return problems ? 1 : 0;
}

int main(int argc, char **argv) {
  char root[4096];
  if (zo_test_scratch_dir(argc > 1 ? argv[1] : NULL, "zo-test-swap-dir-race", root, sizeof root))
    return ZO_TEST_SKIP;
  int procs = argc > 2 ? atoi(argv[2]) : 4, rounds = argc > 3 ? atoi(argv[3]) : 1000;
  if (procs < 2 || procs > 64 || rounds < 1) {
    fprintf(stderr, "usage: test_swap_dir_race [DIR] [PROCS 2..64] [ROUNDS >= 1]\n");
    return 1;
  }
  pid_t pids[64];
  int fds[64];
  for (int p = 0; p < procs; p++) {
    int pf[2];
    if (pipe(pf) != 0 || (pids[p] = fork()) < 0) {
      FAIL_AT("pipe/fork: %s", strerror(errno));
      return 1;
    }
    if (pids[p] == 0) {
      close(pf[0]);
      _exit(contender(root, rounds, pf[1]));
    }
    close(pf[1]);
    fds[p] = pf[0];
  }
  long owned = 0, busy = 0;
  for (int p = 0; p < procs; p++) {
    char out[8192] = "";
    size_t len = 0;
    ssize_t n;
    while (len + 1 < sizeof out && (n = read(fds[p], out + len, sizeof out - 1 - len)) > 0)
      len += (size_t)n;
    out[len] = 0;
    close(fds[p]);
    int status = 0;
    waitpid(pids[p], &status, 0);
    const char *tail = strstr(out, "owned ");
    long o = 0, b = 0;
    if (tail && sscanf(tail, "owned %ld busy %ld", &o, &b) == 2) owned += o, busy += b;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      FAIL_AT("contender %d (pid %ld):\n%s", p, (long)pids[p], out);
  }
  printf("%d processes x %d rounds: %ld owned, %ld refused busy\n", procs, rounds, owned, busy);
  CHECK(owned > 0);
  CHECK_EQ(owned + busy, (long)procs * rounds);
  CHECK_EQ(zo_test_count_entries(root), 0); /* no directory, sentinel or temporary left behind */
  if (rmdir(root) != 0) FAIL_AT("rmdir %s: %s", root, strerror(errno));
  return zo_test_finish("test_swap_dir_race");
}
