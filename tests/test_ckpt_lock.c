/*
 * test_ckpt_lock.c - one run per checkpoint root (zo_checkpoint_lock(),
 * zoffload/checkpoint.h): while a child process holds a root, this process's
 * zo_checkpoint_lock() and zo_engine_save() on it (also through a symbolic
 * link to it) are refused naming the child's pid, host and command, and
 * nothing is written; handles inside one process share the lock; a killed
 * holder's root is taken over; a lock file that is a symbolic link or a hard
 * link is refused and its target left alone; a root locked by a process that
 * wrote no record is refused after a second. Leftovers of an interrupted save
 * (.tmp-step-N.PID, .old-step-N.PID, .latest.PID.N.tmp) go only when no
 * process runs as PID: those of a live process are kept. Two zo-train runs on
 * one root run in zo_train_root_lock.sh.
 *
 * usage: test_ckpt_lock [SCRATCH_BASE]   Exit 0 pass, 1 fail, 77 skip.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ckpt_rig.h"
#include "zo_test.h"
#include "zoffload/checkpoint.h"
#include "zoffload/device.h"
#include "zoffload/engine.h"

#define DEAD_PID 4194305L /* PID_MAX_LIMIT (2^22) + 1: no Linux process ever has it */


/*
 * A child holding @root: how 1 takes it with zo_checkpoint_lock(), how 2 only flock()s ROOT/.zoffload-lock and
 * writes no record. Returns its pid once it holds the root (-1 on failure); it waits to be killed.
 */
static pid_t holder(const char *root, int how) {
  int pfd[2];
  if (pipe(pfd)) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    close(pfd[0]);
    char c = 1;
    if (how == 1) {
      zo_checkpoint_lock_t *l;
      if (zo_checkpoint_lock(root, &l) != ZO_OK) c = 0;
    } else {
      char p[1024];
      snprintf(p, sizeof p, "%s/.zoffload-lock", root);
      int fd = open(p, O_RDWR | O_CREAT, 0644);
      if (fd < 0 || flock(fd, LOCK_EX)) c = 0;
    }
    if (write(pfd[1], &c, 1) != 1) _exit(1);
    for (;;) pause();
  }
  close(pfd[1]);
  char c = 0;
  if (pid < 0 || read(pfd[0], &c, 1) != 1 || c != 1) {
    if (pid > 0) kill(pid, SIGKILL), waitpid(pid, NULL, 0);
    pid = -1;
  }
  close(pfd[0]);
  return pid;
}

static void end(pid_t pid) {
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
}

/* zo_save_opts.on_removed: appends "<name> " to the string at @user */
static void record_removed(const char *path, int leftover, void *user) {
  char *log = user;
  const char *name = strrchr(path, '/');
  (void)leftover;
  snprintf(log + strlen(log), 2048 - strlen(log), "%s ", name ? name + 1 : path);
}

/* A leftover of an interrupted save named @name under @root: a directory holding a manifest, or a file. */
static void leftover(const char *root, const char *name, int dir) {
  char p[1024];
  snprintf(p, sizeof p, "%s/%s", root, name);
  if (dir) {
    CHECK(mkdir(p, 0755) == 0);
    snprintf(p, sizeof p, "%s/%s/manifest.json", root, name);
  }
  FILE *f = fopen(p, "w");
  CHECK(f && fputs("{}\n", f) >= 0 && fclose(f) == 0);
}

static int exists(const char *root, const char *name) {
  char p[1024];
  struct stat sb;
  snprintf(p, sizeof p, "%s/%s", root, name);
  return lstat(p, &sb) == 0;
}

int main(int argc, char **argv) {
  if (argc == 3 &&
      !strcmp(argv[1], "--try-lock")) { /* the other process of step 2: 0 when refused as busy */
    zo_checkpoint_lock_t *l;
    zo_status st = zo_checkpoint_lock(argv[2], &l);
    printf("%s\n", st == ZO_OK ? "locked" : zo_last_error());
    return st == ZO_ERR_INVALID_USAGE ? 0 : 1;
  }
  char dir[512], root[700], rlink[700], lockf[800], victim[800], want[600], host[256], name[256];
  if (zo_test_scratch_dir(argc > 1 ? argv[1] : NULL, "ckpt-lock", dir, sizeof dir))
    return ZO_TEST_SKIP;
  snprintf(root, sizeof root, "%s/root", dir);
  snprintf(rlink, sizeof rlink, "%s/root-link", dir);
  snprintf(lockf, sizeof lockf, "%s/.zoffload-lock", root);
  snprintf(victim, sizeof victim, "%s/victim", dir);
  gethostname(host, sizeof host);
  host[sizeof host - 1] = 0;
  zo_checkpoint_lock_t *l1 = NULL, *l2 = NULL;

  /* 1. a child holds the root: refused naming it, also through a link to the root and in zo_engine_save */
  pid_t child = holder(root, 1);
  CHECK(child > 0);
  CHECK(access(lockf, F_OK) == 0);
  CHECK_ST(zo_checkpoint_lock(root, &l1), ZO_ERR_INVALID_USAGE);
  CHECK(l1 == NULL);
  snprintf(want, sizeof want, "is in use by another run: pid %ld on host %s, started ", (long)child,
           host);
  CHECK_HAS(zo_last_error(), want);
  CHECK_HAS(zo_last_error(), "command: ");
  CHECK_HAS(zo_last_error(), "test_ckpt_lock");
  CHECK_HAS(zo_last_error(), lockf);
  CHECK(symlink("root", rlink) == 0); /* beside it */
  CHECK_ST(zo_checkpoint_lock(rlink, &l1), ZO_ERR_INVALID_USAGE);
  CHECK_HAS(zo_last_error(), want);
  ckpt_rig r;
  if (!CHECK_OK(ckpt_rig_open(&r, 0))) return zo_test_finish("test_ckpt_lock");
  zo_save_opts o = {.tag = 1};
  CHECK_ST(zo_engine_save(r.e, root, &o, NULL, 0), ZO_ERR_INVALID_USAGE);
  CHECK_HAS(zo_last_error(), want);
  /* the lock file alone: nothing saved, nothing removed */
  CHECK_EQ(zo_test_count_entries(root), 1);

  /* 2. the holder killed: its root is taken over (the kernel dropped its lock; its record is stale) */
  end(child);
  CHECK_OK(zo_checkpoint_lock(root, &l1));
  CHECK_OK(zo_checkpoint_lock(rlink, &l2));         /* handles in one process share the lock */
  CHECK_OK(zo_engine_save(r.e, root, &o, NULL, 0)); /* so does this process's save */
  char rec[4096];
  FILE *f = fopen(lockf, "r");
  size_t n = f ? fread(rec, 1, sizeof rec - 1, f) : 0;
  if (f) fclose(f);
  rec[n] = 0;
  snprintf(want, sizeof want, "pid %ld\nhost %s\n", (long)getpid(), host);
  CHECK_HAS(rec, want);
  /* another process meanwhile (a new program: a fork() would share our lock): refused, naming us */
  char cmd[2048], msg[4096];
  snprintf(cmd, sizeof cmd, "/proc/%ld/exe --try-lock '%s' 2>&1", (long)getpid(), root);
  f = popen(cmd, "r");
  n = f ? fread(msg, 1, sizeof msg - 1, f) : 0;
  msg[n] = 0;
  CHECK(f && pclose(f) == 0);
  snprintf(want, sizeof want, "is in use by another run: pid %ld on host %s, started ",
           (long)getpid(), host);
  CHECK_HAS(msg, want);
  zo_checkpoint_unlock(l2);
  CHECK(access(lockf, F_OK) == 0); /* one handle left */
  zo_checkpoint_unlock(l1);
  CHECK(access(lockf, F_OK) != 0); /* the last one removes the lock file */
  zo_checkpoint_unlock(NULL);

  /* 3. locked by a process that wrote no record: refused after a second, saying so */
  child = holder(root, 2);
  CHECK(child > 0);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  CHECK_ST(zo_checkpoint_lock(root, &l1), ZO_ERR_INVALID_USAGE);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  CHECK_HAS(zo_last_error(), "names no live owner");
  const double waited = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  CHECK(waited > 0.5 && waited < 10);
  end(child);
  CHECK(unlink(lockf) == 0);

  /* 4. the lock file a symbolic link, or a hard link to someone's file: refused, the file untouched */
  f = fopen(victim, "w");
  CHECK(f && fputs("mine\n", f) >= 0 && fclose(f) == 0);
  CHECK(symlink(victim, lockf) == 0);
  CHECK_ST(zo_checkpoint_lock(root, &l1), ZO_ERR_IO);
  CHECK_HAS(zo_last_error(), "is a symbolic link");
  CHECK_ST(zo_engine_save(r.e, root, &o, NULL, 0), ZO_ERR_IO);
  CHECK(unlink(lockf) == 0);
  CHECK(link(victim, lockf) == 0);
  CHECK_ST(zo_checkpoint_lock(root, &l1), ZO_ERR_IO);
  CHECK_HAS(zo_last_error(), "has 2 links");
  CHECK(unlink(lockf) == 0);
  f = fopen(victim, "r");
  n = f ? fread(rec, 1, sizeof rec - 1, f) : 0;
  if (f) fclose(f);
  rec[n] = 0;
  CHECK(!strcmp(rec, "mine\n"));

  /* 5. leftovers: of a process that is gone, removed (and named); of a live one, kept */
  pid_t live = fork();
  if (live == 0)
    for (;;) pause();
  CHECK(live > 0);
  const char *dead_names[] = {".tmp-step-000000000007.%ld", ".old-step-000000000007.%ld",
                              ".latest.%ld.0.tmp"};
  char removed[2048] = "", expect[2048] = "";
  for (int k = 0; k < 3; k++) {
    snprintf(name, sizeof name, dead_names[k], DEAD_PID);
    leftover(root, name, k < 2);
    snprintf(name, sizeof name, dead_names[k], (long)live);
    leftover(root, name, k < 2);
  }
  o.tag = 8, o.on_removed = record_removed, o.user = removed;
  CHECK_OK(zo_engine_save(r.e, root, &o, NULL, 0));
  for (int k = 0; k < 3; k++) {
    snprintf(name, sizeof name, dead_names[k], DEAD_PID);
    CHECK(!exists(root, name));
    snprintf(name, sizeof name, dead_names[k], (long)live);
    CHECK(exists(root, name));
  }
  for (int k = 0; k < 3; k++) { /* readdir order: compare as sets */
    snprintf(name, sizeof name, dead_names[k], DEAD_PID);
    strcat(expect, name);
    CHECK_HAS(removed, name);
    snprintf(name, sizeof name, dead_names[k], (long)live);
    if (strstr(removed, name))
      FAIL_AT("removed '%s', a leftover of live pid %ld", name, (long)live);
  }
  CHECK_EQ(strlen(removed), strlen(expect) + 3);
  end(live);
  removed[0] = 0;
  o.tag = 9; /* now that it is gone, its leftovers go too */
  CHECK_OK(zo_engine_save(r.e, root, &o, NULL, 0));
  for (int k = 0; k < 3; k++) {
    snprintf(name, sizeof name, dead_names[k], (long)live);
    CHECK(!exists(root, name));
    CHECK_HAS(removed, name);
  }
  CHECK(access(lockf, F_OK) != 0);
  ckpt_rig_close(&r);
  if (!zo_test_failures) {
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  }
  return zo_test_finish("test_ckpt_lock");
}
