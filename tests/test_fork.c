/*
 * test_fork.c - fork() after zo_engine_create(): the child cannot use its
 * copy of the parent's engine (every call answers ZO_ERR_INVALID_USAGE at
 * once, naming both pids), its zo_engine_destroy() returns at once without
 * touching the parent's threads, and its zo_checkpoint_unlock() of an
 * inherited handle leaves the parent's checkpoint root lock in place. The
 * parent's engine then steps and is destroyed as usual. Not the multi-rank
 * or CUDA paths: one rank on the host device.
 *
 * usage: test_fork [SCRATCH_BASE]   Exit 0 pass, 1 fail, 77 skip.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "zo_test.h"
#include "zoffload/checkpoint.h"
#include "zoffload/config.h"
#include "zoffload/engine.h"

enum { N = 4096 };

/* Child exit codes: which check failed (0: all passed). */
enum { C_OK = 0, C_FINALIZE = 10, C_LOAD, C_GRAD_READY, C_STEP, C_MESSAGE, C_LOCK_AGAIN };

static int child_refused(zo_status st, int code, long parent) {
  if (st != ZO_ERR_INVALID_USAGE) {
    fprintf(stderr, "child: call %d returned %s, expected ZO_ERR_INVALID_USAGE (%s)\n", code,
            zo_status_string(st), zo_last_error());
    return code;
  }
  char want[64];
  snprintf(want, sizeof want, "created by process %ld", parent);
  if (!strstr(zo_last_error(), want) || !strstr(zo_last_error(), "forked child")) {
    fprintf(stderr, "child: call %d: message '%s' does not name the parent %ld and the child\n",
            code, zo_last_error(), parent);
    return C_MESSAGE;
  }
  return C_OK;
}

/* What the child does with its copies: every use refused at once, then let go of without harm. Returns the first
 * failed check's code; goes on past a failure, so the let-go runs (and a hang or crash there shows) either way. */
static int child(zo_engine_t *e, zo_param_t *p, const void *dgrad, zo_checkpoint_lock_t *lock,
                 const char *root, long parent) {
  /* a hang (a wait on the parent's Adam or stream threads) ends the child with SIGALRM */
  alarm(10);
  int rc = C_OK, r;
  static float vals[N];
  zo_step_info info;
#define CHILD_CHECK(expr) \
  if ((r = (expr)) && !rc) rc = r
  CHILD_CHECK(child_refused(zo_engine_finalize(e), C_FINALIZE, parent));
  CHILD_CHECK(child_refused(zo_engine_load_param(e, p, vals), C_LOAD, parent));
  CHILD_CHECK(child_refused(zo_engine_grad_ready(e, p, dgrad, zo_engine_grad_dtype(e)),
                            C_GRAD_READY, parent));
  CHILD_CHECK(child_refused(zo_engine_step(e, &info), C_STEP, parent));
#undef CHILD_CHECK
  /* the root is the parent's: the child is refused it (the parent holds the flock), not handed the parent's entry */
  zo_checkpoint_lock_t *mine = NULL;
  if (zo_checkpoint_lock(root, &mine) == ZO_OK) {
    fprintf(stderr, "child: zo_checkpoint_lock on the parent's root succeeded\n");
    zo_checkpoint_unlock(mine);
    if (!rc) rc = C_LOCK_AGAIN;
  }
  /* the inherited handle: must not remove or unlock the parent's file */
  zo_checkpoint_unlock(lock);
  zo_engine_destroy(e); /* must return at once, touching nothing of the parent's */
  return rc;
}

int main(int argc, char **argv) {
  const char *base = argc > 1 ? argv[1] : "/tmp";
  char root[512], lockfile[600];
  snprintf(root, sizeof root, "%s/test_fork.%ld", base, (long)getpid());
  snprintf(lockfile, sizeof lockfile, "%s/.zoffload-lock", root);
  if (mkdir(root, 0755) != 0 && errno != EEXIST) {
    printf("skip: cannot create %s: %s\n", root, strerror(errno));
    return ZO_TEST_SKIP;
  }
  zo_config_t cfg;
  zo_config_defaults(&cfg);
  cfg.train_batch_size = cfg.train_micro_batch_size_per_gpu = 1;
  cfg.gradient_accumulation_steps = 1;
  cfg.optimizer.type = ZO_OPT_ADAMW;
  cfg.optimizer.adam_w_mode = 1;
  cfg.optimizer.lr = 1e-2;
  cfg.zero.stage = 2;
  cfg.zero.offload_optimizer.device = ZO_OFFLOAD_CPU; /* Adam on the pool's threads */
  cfg.zoffload.adam_threads = 2;

  zo_device_t *dev = NULL;
  zo_engine_t *e = NULL;
  zo_param_t *p = NULL;
  void *dgrad = NULL;
  zo_checkpoint_lock_t *lock = NULL;
  static float vals[N], grad[N];
  for (int i = 0; i < N; i++) vals[i] = (float)i / N, grad[i] = 1.f;
  if (!CHECK_OK(zo_device_create(ZO_DEVICE_HOST, 0, 0, &dev)) ||
      !CHECK_OK(zo_device_malloc(dev, sizeof grad, &dgrad)) ||
      !CHECK_OK(zo_engine_create(&cfg, dev, NULL, &e)) ||
      !CHECK_OK(zo_engine_register_param(e, "w", N, &p)) || !CHECK_OK(zo_engine_finalize(e)) ||
      !CHECK_OK(zo_engine_load_param(e, p, vals)) ||
      !CHECK_OK(zo_memcpy(dev, dgrad, grad, sizeof grad, ZO_COPY_H2D)) ||
      !CHECK_OK(zo_checkpoint_lock(root, &lock)))
    return 1;
  const zo_dtype gd = zo_engine_grad_dtype(e);
  /* one step first, so the pool's threads and the copy stream have run */
  zo_step_info info;
  CHECK_OK(zo_engine_grad_ready(e, p, dgrad, gd));
  CHECK_OK(zo_engine_step(e, &info));
  fflush(NULL);

  const pid_t pid = fork();
  if (pid < 0) {
    perror("fork");
    return 1;
  }
  if (pid == 0)
    _exit(child(e, p, dgrad, lock, root,
                (long)getppid())); /* _exit: no atexit of the parent's stdio */

  int status = 0;
  CHECK_EQ(waitpid(pid, &status, 0), pid);
  if (WIFSIGNALED(status))
    FAIL_AT("child killed by signal %d (%s)", WTERMSIG(status),
            WTERMSIG(status) == SIGALRM ? "hung" : "crashed");
  else
    CHECK_EQ(WEXITSTATUS(status), C_OK);

  /* the parent's lock: still at its name, still held (a second process would be refused; inside this process the
   * lock is shared, so look from another process) */
  struct stat st;
  CHECK(stat(lockfile, &st) == 0);
  const pid_t probe = fork();
  if (probe == 0) {
    /* a fresh process image would not share the entry; the child's own zo_checkpoint_lock ignores inherited
     * entries, so this is a second holder asking */
    zo_checkpoint_lock_t *l2 = NULL;
    _exit(zo_checkpoint_lock(root, &l2) == ZO_ERR_INVALID_USAGE ? 0 : 2);
  }
  CHECK_EQ(waitpid(probe, &status, 0), probe);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);

  /* the parent's engine works as before */
  CHECK_OK(zo_engine_grad_ready(e, p, dgrad, gd));
  CHECK_OK(zo_engine_step(e, &info));
  CHECK_EQ(zo_engine_steps_applied(e), 2);
  zo_checkpoint_unlock(lock);
  CHECK(stat(lockfile, &st) != 0); /* the owner removes it */
  zo_engine_destroy(e);
  zo_device_free(dev, dgrad);
  zo_device_destroy(dev);
  rmdir(root);
  if (zo_test_failures) return 1;
  printf("test_fork: ok\n");
  return 0;
}
