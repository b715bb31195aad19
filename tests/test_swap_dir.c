/*
 * test_swap_dir.c - the private swap directory and disk-limit errors: a
 * directory left by a dead run is removed, one held by a live run (another
 * process, or another handle here) is refused, one not marked as ours or
 * holding files its marker does not name is refused and left untouched, modes 0700/0600, symlinks
 * refused, ranks kept apart; a full disk (ENOSPC) and RLIMIT_FSIZE (EFBIG)
 * give ZO_ERR_IO naming file, offset and length.
 * Usage: test_swap_dir [DIR]; swap dirs go under DIR (default $TMPDIR, else /tmp).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "swap_internal.h"
#include "zo_test.h"
#include "zoffload/swap.h"

#define CHECK_MSG(sub) CHECK_HAS(zo_last_error(), sub)

static int g_warnings;
static char g_last_warning[2048];
static void capture_log(zo_log_level level, const char *msg, void *user) {
  (void)user;
  if (level == ZO_LOG_WARN) {
    g_warnings++;
    snprintf(g_last_warning, sizeof g_last_warning, "%s", msg);
  }
}

/* A child makes a swap with one file and dies without destroy; returns its pid. */
static pid_t dead_run(const char *root, int rank) {
  pid_t pid = fork();
  if (pid == 0) {
    zo_swap_opts o = {.rank = rank};
    zo_swap_t *sw = NULL;
    zo_swap_file_t *f = NULL;
    if (zo_swap_create(root, &o, &sw) != ZO_OK ||
        zo_swap_file_create(sw, "master.swp", 1 << 20, &f) != ZO_OK)
      _exit(3);
    _exit(0); /* "crash": no destroy */
  }
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  return pid;
}

static void stale_and_live(const char *root) {
  /* dead run: its directory and file remain, the next start removes them and warns */
  pid_t dead = dead_run(root, 0);
  char dir[4200], path[4300];
  snprintf(dir, sizeof dir, "%s/zoffload-rank0", root);
  snprintf(path, sizeof path, "%s/master.swp", dir);
  struct stat st;
  CHECK_EQ(stat(path, &st), 0);
  g_warnings = 0;
  zo_swap_t *sw = NULL;
  CHECK_OK(zo_swap_create(root, NULL, &sw));
  CHECK_EQ(g_warnings, 1);
  char want[4400];
  snprintf(want, sizeof want, "removed stale swap directory %s left by pid %ld", dir, (long)dead);
  CHECK_HAS(g_last_warning, want);
  errno = 0;
  CHECK_EQ(stat(path, &st), -1);
  CHECK_EQ(errno, ENOENT);
  if (!sw) return;
  CHECK_EQ(zo_test_count_entries(dir), 1); /* the owner marker */
  /* live run in this process: a second handle on the same rank is refused, naming our pid */
  zo_swap_t *sw2 = (zo_swap_t *)1;
  CHECK_ST(zo_swap_create(root, NULL, &sw2), ZO_ERR_INVALID_USAGE);
  CHECK(sw2 == NULL);
  snprintf(want, sizeof want,
           "swap directory %s is in use by a live process (pid %ld); use another nvme_path or rank",
           dir, (long)getpid());
  CHECK_MSG(want);
  /* ... and it did not disturb the live one */
  zo_swap_file_t *f = NULL;
  CHECK_OK(zo_swap_file_create(sw, "exp_avg.swp", 1 << 16, &f));
  /* another rank on the same nvme_path is fine */
  zo_swap_opts r1 = {.rank = 1};
  CHECK_OK(zo_swap_create(root, &r1, &sw2));
  if (sw2) CHECK(strstr(zo_swap_dir(sw2), "/zoffload-rank1") != NULL);
  zo_swap_destroy(sw2);
  zo_swap_opts rbad = {.rank = -1};
  CHECK_ST(zo_swap_create(root, &rbad, &sw2), ZO_ERR_INVALID_ARG);
  /* live run in another process: the child tries and reports what it got */
  int pipefd[2];
  REQUIRE(pipe(pipefd) == 0);
  pid_t pid = fork();
  if (pid == 0) {
    close(pipefd[0]);
    zo_swap_t *c = NULL;
    zo_status st = zo_swap_create(root, NULL, &c);
    char msg[4096];
    int n = snprintf(msg, sizeof msg, "%d %s", (int)st, zo_last_error());
    if (write(pipefd[1], msg, (size_t)n) != n) _exit(2);
    _exit(0);
  }
  close(pipefd[1]);
  char got[4096] = "";
  ssize_t n = read(pipefd[0], got, sizeof got - 1);
  got[n > 0 ? n : 0] = 0;
  close(pipefd[0]);
  waitpid(pid, NULL, 0);
  snprintf(want, sizeof want, "%d swap: swap directory %s is in use by a live process (pid %ld)",
           (int)ZO_ERR_INVALID_USAGE, dir, (long)getpid());
  CHECK_HAS(got, want);
  CHECK_EQ(stat(zo_swap_file_path(f), &st), 0); /* the child's refusal left our files alone */
  zo_swap_destroy(sw);
  errno = 0;
  CHECK_EQ(stat(dir, &st), -1);
  CHECK_EQ(errno, ENOENT);
  /* a stale directory with loose modes is tightened to 0700 */
  dead_run(root, 2);
  snprintf(dir, sizeof dir, "%s/zoffload-rank2", root);
  CHECK_EQ(chmod(dir, 0755), 0);
  zo_swap_opts r2 = {.rank = 2};
  CHECK_OK(zo_swap_create(root, &r2, &sw));
  CHECK_EQ(stat(dir, &st), 0);
  CHECK_EQ(st.st_mode & 07777, 0700);
  zo_swap_destroy(sw);
  /* a stale directory holding something its marker does not name (a subdirectory) is refused, untouched */
  dead_run(root, 3);
  snprintf(dir, sizeof dir, "%s/zoffload-rank3", root);
  snprintf(path, sizeof path, "%s/sub", dir);
  CHECK_EQ(mkdir(path, 0700), 0);
  zo_swap_opts r3 = {.rank = 3};
  sw = NULL;
  CHECK_ST(zo_swap_create(root, &r3, &sw), ZO_ERR_INVALID_ARG);
  snprintf(want, sizeof want, "swap: stale swap directory %s (left by pid", dir);
  CHECK_MSG(want);
  CHECK_MSG("holds 'sub' (a directory), which is not one of its swap files; nothing removed");
  snprintf(path, sizeof path, "%s/master.swp", dir);
  CHECK_EQ(stat(path, &st), 0); /* the dead run's swap file was not removed either */
  snprintf(path, sizeof path, "%s/sub", dir);
  rmdir(path);
  CHECK_OK(zo_swap_create(root, &r3, &sw));
  zo_swap_destroy(sw);
}

/* Write @text to the new file @dir/@name. */
static void put_file(const char *dir, const char *name, const char *text) {
  char p[4400];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  FILE *f = fopen(p, "wx");
  if (!CHECK(f != NULL)) return;
  fputs(text, f);
  fclose(f);
}

/* 1 when @dir/@name exists and holds exactly @text. */
static int file_is(const char *dir, const char *name, const char *text) {
  char p[4400], got[256] = "";
  snprintf(p, sizeof p, "%s/%s", dir, name);
  FILE *f = fopen(p, "r");
  if (!f) return 0;
  size_t n = fread(got, 1, sizeof got - 1, f);
  fclose(f);
  got[n] = 0;
  return !strcmp(got, text);
}

/*
 * Only a directory that carries our owner marker and holds nothing but the
 * swap files it names is ever emptied; anything else is refused, naming the
 * directory and the foreign entry, and left exactly as it was.
 */
static void foreign_dirs(const char *root) {
  char dir[4200], want[4600];
  const char *thesis = "\\documentclass{book} years of work\n";
  zo_swap_t *sw = (zo_swap_t *)1;
  /* a user's own directory that happens to have the name */
  snprintf(dir, sizeof dir, "%s/zoffload-rank0", root);
  CHECK_EQ(mkdir(dir, 0700), 0);
  put_file(dir, "thesis.tex", thesis);
  g_warnings = 0;
  CHECK_ST(zo_swap_create(root, NULL, &sw), ZO_ERR_INVALID_ARG);
  CHECK(sw == NULL);
  snprintf(
      want, sizeof want,
      "swap: swap directory %s was not made by zoffload (owner marker .zoffload-owner: No such file or directory) and holds 'thesis.tex' (a regular file); nothing removed",
      dir);
  CHECK_MSG(want);
  CHECK_EQ(g_warnings, 0);
  CHECK(file_is(dir, "thesis.tex", thesis));
  CHECK_EQ(zo_test_count_entries(dir), 1);
  /* a marker of some other program's with the same name is not ours either */
  put_file(dir, ".zoffload-owner", "owner: bob\n");
  CHECK_ST(zo_swap_create(root, NULL, &sw), ZO_ERR_INVALID_ARG);
  CHECK_MSG("not a zoffload marker) and holds 'thesis.tex'");
  CHECK(file_is(dir, "thesis.tex", thesis));
  CHECK(file_is(dir, ".zoffload-owner", "owner: bob\n"));
  char p[4400];
  snprintf(p, sizeof p, "%s/.zoffload-owner", dir);
  unlink(p);
  snprintf(p, sizeof p, "%s/thesis.tex", dir);
  unlink(p);
  /* an empty directory without our marker is not ours to remove */
  CHECK_ST(zo_swap_create(root, NULL, &sw), ZO_ERR_INVALID_ARG);
  CHECK_MSG("it is empty");
  struct stat st;
  CHECK_EQ(stat(dir, &st), 0);
  rmdir(dir);

  /* a dead run's directory with a user's file added: refused, and the swap file stays too */
  dead_run(root, 0);
  put_file(dir, "notes.txt", "keep me\n");
  CHECK_ST(zo_swap_create(root, NULL, &sw), ZO_ERR_INVALID_ARG);
  CHECK_MSG(
      "holds 'notes.txt' (a regular file), which is not one of its swap files; nothing removed");
  CHECK(file_is(dir, "notes.txt", "keep me\n"));
  snprintf(p, sizeof p, "%s/master.swp", dir);
  CHECK_EQ(stat(p, &st), 0);
  snprintf(p, sizeof p, "%s/notes.txt", dir);
  unlink(p);
  /* a marker cut short (no "end" line) is not trusted */
  snprintf(p, sizeof p, "%s/.zoffload-owner", dir);
  CHECK_EQ(truncate(p, 30), 0);
  CHECK_ST(zo_swap_create(root, NULL, &sw), ZO_ERR_INVALID_ARG);
  CHECK_MSG("not a zoffload marker) and holds 'master.swp'");
  snprintf(p, sizeof p, "%s/master.swp", dir);
  CHECK_EQ(stat(p, &st), 0);
  /* with the marker whole again, the dead run's files go, with the warning */
  dead_run(root, 5);
  char dir5[4200];
  snprintf(dir5, sizeof dir5, "%s/zoffload-rank5", root);
  char from[4400], to[4400];
  snprintf(from, sizeof from, "%s/.zoffload-owner", dir5);
  snprintf(to, sizeof to, "%s/.zoffload-owner", dir);
  CHECK_EQ(rename(from, to), 0); /* names master.swp, like the one cut short did */
  snprintf(from, sizeof from, "%s/master.swp", dir5);
  unlink(from);
  rmdir(dir5);
  g_warnings = 0;
  CHECK_OK(zo_swap_create(root, NULL, &sw));
  CHECK_EQ(g_warnings, 1);
  CHECK_HAS(g_last_warning, "(1 files)"); /* master.swp */
  if (sw != (zo_swap_t *)1 && sw) {
    CHECK_EQ(zo_test_count_entries(dir), 1); /* only our marker */
    /* names that would break the marker's lines, or are the marker's own, are refused */
    zo_swap_file_t *f = NULL;
    CHECK_ST(zo_swap_file_create(sw, "a\nfile b", 4096, &f), ZO_ERR_INVALID_ARG);
    CHECK_MSG("control characters");
    CHECK_ST(zo_swap_file_create(sw, ".zoffload-owner", 4096, &f), ZO_ERR_INVALID_ARG);
    zo_swap_destroy(sw);
  }
  errno = 0;
  CHECK_EQ(stat(dir, &st), -1);
  CHECK_EQ(errno, ENOENT);
}

static void modes_and_symlinks(const char *root) {
  zo_swap_t *sw = NULL;
  CHECK_OK(zo_swap_create(root, NULL, &sw));
  if (!sw) return;
  struct stat st;
  CHECK_EQ(stat(zo_swap_dir(sw), &st), 0);
  CHECK_EQ(st.st_mode & 07777, 0700);
  char lock[4300];
  snprintf(lock, sizeof lock, "%s/.zoffload-owner", zo_swap_dir(sw));
  CHECK_EQ(stat(lock, &st), 0);
  CHECK_EQ(st.st_mode & 07777, 0600);
  zo_swap_file_t *f = NULL;
  CHECK_OK(zo_swap_file_create(sw, "master.swp", 4096, &f));
  if (f) {
    CHECK_EQ(stat(zo_swap_file_path(f), &st), 0);
    CHECK_EQ(st.st_mode & 07777, 0600);
  }
  /* a symlink planted where a swap file goes is not followed */
  char target[4300], link[4300];
  snprintf(target, sizeof target, "%s/victim", root);
  snprintf(link, sizeof link, "%s/evil.swp", zo_swap_dir(sw));
  int fd = open(target, O_CREAT | O_WRONLY, 0644);
  CHECK(fd >= 0);
  if (fd >= 0) close(fd);
  CHECK_EQ(symlink(target, link), 0);
  zo_swap_file_t *g = NULL;
  CHECK(zo_swap_file_create(sw, "evil.swp", 4096, &g) != ZO_OK);
  CHECK(g == NULL);
  CHECK_EQ(stat(target, &st), 0);
  CHECK_EQ(st.st_size, 0); /* the target was not preallocated */
  unlink(link);
  unlink(target);
  zo_swap_destroy(sw);

  /* a symlinked private directory is refused and left alone */
  char elsewhere[4300], pd[4300];
  snprintf(elsewhere, sizeof elsewhere, "%s/elsewhere", root);
  snprintf(pd, sizeof pd, "%s/zoffload-rank7", root);
  CHECK_EQ(mkdir(elsewhere, 0700), 0);
  CHECK_EQ(symlink(elsewhere, pd), 0);
  zo_swap_opts r7 = {.rank = 7};
  sw = (zo_swap_t *)1;
  CHECK_ST(zo_swap_create(root, &r7, &sw), ZO_ERR_INVALID_ARG);
  CHECK(sw == NULL);
  CHECK_MSG("is a symbolic link");
  CHECK_EQ(lstat(pd, &st), 0);
  CHECK(S_ISLNK(st.st_mode));
  CHECK_EQ(zo_test_count_entries(elsewhere), 0);
  unlink(pd);
  /* a plain file in its place is refused too */
  fd = open(pd, O_CREAT | O_WRONLY, 0600);
  if (fd >= 0) close(fd);
  CHECK_ST(zo_swap_create(root, &r7, &sw), ZO_ERR_INVALID_ARG);
  CHECK_MSG("not a directory");
  unlink(pd);
  rmdir(elsewhere);
}

/*
 * ENOSPC: a preallocation larger than a 1 MiB tmpfs mounted in this process's
 * own mount namespace (main() unshares it while single-threaded), so no other
 * process ever sees a full disk: filling the shared disk instead made tests
 * running beside this one fail with ENOSPC. Needs CAP_SYS_ADMIN; without it
 * the ENOSPC case is skipped with a note. EFBIG: RLIMIT_FSIZE under a write.
 */
static int g_private_mounts; /* main() made a private mount namespace */

static void disk_full(const char *root) {
  char mnt[4200];
  snprintf(mnt, sizeof mnt, "%s/tmpfs-1m", root);
  if (!g_private_mounts || mkdir(mnt, 0700) != 0) {
    printf("note: no private mount namespace (needs root); ENOSPC not covered\n");
    return;
  }
  if (mount("tmpfs", mnt, "tmpfs", 0, "size=1m") != 0) {
    printf("note: cannot mount a tmpfs (%s); ENOSPC not covered\n", strerror(errno));
    rmdir(mnt);
    return;
  }
  zo_swap_opts o = {.block_size = 64 * 1024, .queue_depth = 1};
  zo_swap_t *sw = NULL;
  CHECK_OK(zo_swap_create(mnt, &o, &sw));
  if (sw) {
    const uint64_t want = 4ull << 20; /* 4 MiB on a 1 MiB file system */
    zo_swap_file_t *f = NULL;
    zo_status st = zo_swap_file_create(sw, "huge.swp", want, &f);
    CHECK_EQ(st, ZO_ERR_IO);
    if (st == ZO_OK) zo_swap_file_remove(sw, f);
    CHECK_MSG("huge.swp");
    CHECK_MSG("No space left on device");
    char w[128];
    snprintf(w, sizeof w, "offset 0, length %llu bytes", (unsigned long long)want);
    CHECK_MSG(w);
    printf("ok: oversize preallocation: %s\n", zo_last_error());
    zo_swap_destroy(sw);
  }
  if (umount(mnt) != 0) FAIL_AT("umount %s: %s", mnt, strerror(errno));
  rmdir(mnt);
}

static void disk_limits(const char *root) {
  disk_full(root);
  zo_swap_opts o = {.block_size = 64 * 1024,
                    .queue_depth = 1}; /* in order: the short piece fails first */
  zo_swap_t *sw = NULL;
  CHECK_OK(zo_swap_create(root, &o, &sw));
  if (!sw) return;
  /* RLIMIT_FSIZE lowered after the file exists: a write straddling the limit comes back short,
   * is resumed, and the rest fails with EFBIG at the limit's offset. */
  zo_swap_file_t *f = NULL;
  const size_t a = zo_swap_alignment(sw);
  CHECK_OK(zo_swap_file_create(sw, "master.swp", 1 << 20, &f));
  unsigned char *buf = aligned_alloc(a, 1 << 20);
  if (f && buf) {
    memset(buf, 0x5A, 1 << 20);
    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    lim = old;
    lim.rlim_cur = 512 * 1024 + 4096;
    signal(SIGXFSZ, SIG_IGN);
    if (setrlimit(RLIMIT_FSIZE, &lim) != 0) {
      printf("note: cannot lower RLIMIT_FSIZE; EFBIG not covered\n");
    } else {
      zo_status st = zo_swap_write(sw, f, 0, buf, 1 << 20);
      setrlimit(RLIMIT_FSIZE, &old);
      CHECK_EQ(st, ZO_ERR_IO);
      CHECK_MSG("master.swp");
      CHECK_MSG("File too large");
      char w[128];
      snprintf(w, sizeof w, "at offset %zu, length", (size_t)(512 * 1024 + 4096));
      CHECK_MSG(w);
      printf("ok: write past RLIMIT_FSIZE: %s\n", zo_last_error());
      /* with the limit back, the same write works */
      CHECK_OK(zo_swap_write(sw, f, 0, buf, 1 << 20));
    }
  }
  free(buf);
  zo_swap_destroy(sw);
}

int main(int argc, char **argv) {
  char root[4096];
  if (zo_test_scratch_dir(argc > 1 ? argv[1] : NULL, "zo-test-swap-dir", root, sizeof root))
    return ZO_TEST_SKIP;
  zo_log_set_handler(capture_log, NULL, ZO_LOG_WARN);
  /* A mount namespace of our own for disk_full()'s tmpfs, while no thread exists yet (unshare of
   * CLONE_NEWNS implies CLONE_FS, refused in a multi-threaded process). */
  g_private_mounts =
      unshare(CLONE_NEWNS) == 0 && mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0;
  stale_and_live(root);
  foreign_dirs(root);
  modes_and_symlinks(root);
  disk_limits(root);
  CHECK_EQ(zo_test_count_entries(root), 0);
  if (rmdir(root) != 0) FAIL_AT("rmdir %s: %s", root, strerror(errno));
  return zo_test_finish("test_swap_dir");
}
