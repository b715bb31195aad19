/*
 * test_ckpt_tmpfiles.c - the temporary files of zo_engine_save() and
 * zo_engine_export_safetensors() (zoffload/checkpoint.h) never open what
 * someone planted at their names, and neither call renames over anything but
 * a regular file. A symbolic link to a victim file is planted at every name
 * they use or used: ROOT/.latest.tmp and ROOT/.latest.PID.N.tmp, the step's
 * temporary directory ROOT/.tmp-step-N.PID, OUT.tmp and DIR/.OUT.PID.N.tmp
 * (N = 0..9, PID this process's); each victim keeps its bytes, and each save
 * or export either succeeds beside the links or fails naming what it found.
 * `latest`, or the export's target, as a symbolic link, a FIFO, a directory or
 * (as root) a character device is refused and left as it was. The export
 * removes leftovers DIR/.OUT.PID.N.tmp of its own target whose PID no longer
 * runs, and only regular files: not a live process's, a link, a FIFO, a
 * directory or another target's. zo-train's side runs in zo_train_tmpfiles.sh.
 *
 * usage: test_ckpt_tmpfiles [SCRATCH_BASE]   Exit 0 pass, 1 fail, 77 skip.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ckpt_rig.h"
#include "zo_test.h"
#include "zoffload/checkpoint.h"
#include "zoffload/device.h"
#include "zoffload/engine.h"

#define VICTIM_TEXT "the victim's own bytes\n"
#define NAMES 10 /* .PID.0.tmp .. .PID.9.tmp */


/* @path as a new file holding VICTIM_TEXT; 1 when made. */
static int make_victim(const char *path) {
  FILE *f = fopen(path, "w");
  if (!f) return 0;
  fputs(VICTIM_TEXT, f);
  return fclose(f) == 0;
}

/* 1 when @path is still a regular file holding exactly VICTIM_TEXT; else prints what it holds. */
static int victim_intact(const char *path) {
  char b[256] = "";
  struct stat sb;
  FILE *f = lstat(path, &sb) == 0 && S_ISREG(sb.st_mode) ? fopen(path, "r") : NULL;
  size_t n = f ? fread(b, 1, sizeof b - 1, f) : 0;
  if (f) fclose(f);
  b[n] = 0;
  if (f && !strcmp(b, VICTIM_TEXT)) return 1;
  fprintf(stderr, "victim '%s' changed: now holds \"%s\"\n", path, b);
  return 0;
}

/* 1 when @path is a symbolic link (lstat). */
static int is_link(const char *path) {
  struct stat sb;
  return lstat(path, &sb) == 0 && S_ISLNK(sb.st_mode);
}

/* The whole of a small regular file @path into @out; "" when it cannot be read. */
static const char *slurp(const char *path, char *out, size_t cap) {
  FILE *f = fopen(path, "r");
  size_t n = f ? fread(out, 1, cap - 1, f) : 0;
  if (f) fclose(f);
  out[n] = 0;
  return out;
}

/* Plant symbolic links to @victim at @dir/.@base.PID.N.tmp for N = 0..NAMES-1, and at @legacy when not NULL. */
static void plant(const char *dir, const char *base, const char *legacy, const char *victim) {
  char p[1024];
  for (int n = 0; n < NAMES; n++) {
    snprintf(p, sizeof p, "%s/.%s.%ld.%d.tmp", dir, base, (long)getpid(), n);
    CHECK(symlink(victim, p) == 0);
  }
  if (legacy) CHECK(symlink(victim, legacy) == 0);
}

/* 1 when @path exists (lstat) and is of type @type (S_IFREG, S_IFLNK, S_IFIFO, S_IFDIR). */
static int is_type(const char *path, mode_t type) {
  struct stat sb;
  return lstat(path, &sb) == 0 && (sb.st_mode & S_IFMT) == type;
}

/* The pid of a child that has exited and been reaped: no process runs as it (until the number is reused). */
static long dead_pid(void) {
  pid_t c = fork();
  if (c == 0) _exit(0);
  if (c < 0 || waitpid(c, NULL, 0) != c) return -1;
  return (long)c;
}

/* Log lines down to INFO (the sweep's "removed" lines), kept to check each names its path; library threads may log
 * concurrently, hence the flag. */
static char g_log[8192];
static atomic_flag g_log_busy = ATOMIC_FLAG_INIT;
static void keep_log(zo_log_level level, const char *msg, void *user) {
  (void)level, (void)user;
  while (atomic_flag_test_and_set(&g_log_busy)) {}
  size_t n = strlen(g_log);
  snprintf(g_log + n, sizeof g_log - n, "%s\n", msg);
  atomic_flag_clear(&g_log_busy);
}

int main(int argc, char **argv) {
  char dir[512], root[700], victim[800], p[1024], q[1024], b[256];
  if (zo_test_scratch_dir(argc > 1 ? argv[1] : NULL, "ckpt-tmpfiles", dir, sizeof dir))
    return ZO_TEST_SKIP;
  snprintf(root, sizeof root, "%s/root", dir);
  snprintf(victim, sizeof victim, "%s/victim", dir);
  CHECK(make_victim(victim));
  CHECK(mkdir(root, 0755) == 0);
  ckpt_rig r;
  if (!CHECK_OK(ckpt_rig_open(&r, 1))) return zo_test_finish("test_ckpt_tmpfiles");

  /* 1. links at .latest.tmp and at .latest.PID.0..9.tmp: the save goes on beside them; `latest` is a regular file */
  snprintf(p, sizeof p, "%s/.latest.tmp", root);
  plant(root, "latest", p, victim);
  zo_save_opts o = {.tag = 1};
  CHECK_OK(zo_engine_save(r.e, root, &o, NULL, 0));
  snprintf(p, sizeof p, "%s/latest", root);
  CHECK(!is_link(p));
  CHECK_HAS(slurp(p, b, sizeof b), "step-000000000001\n");
  CHECK(victim_intact(victim));
  snprintf(p, sizeof p, "%s/.latest.tmp", root);
  CHECK(is_link(p)); /* not ours to remove: left as it was */

  /* 2. a link at this save's temporary directory .tmp-step-N.PID: refused naming it; the linked directory and the
   * victim untouched, nothing placed */
  char vdir[900];
  snprintf(vdir, sizeof vdir, "%s/victim-dir", dir);
  CHECK(mkdir(vdir, 0755) == 0);
  snprintf(p, sizeof p, "%s/.tmp-step-000000000002.%ld", root, (long)getpid());
  CHECK(symlink(vdir, p) == 0);
  o.tag = 2;
  CHECK_ST(zo_engine_save(r.e, root, &o, NULL, 0), ZO_ERR_IO);
  CHECK_HAS(zo_last_error(), p);
  CHECK_HAS(zo_last_error(), "a symbolic link");
  CHECK_EQ(zo_test_count_entries(vdir), 0);
  snprintf(q, sizeof q, "%s/step-000000000002", root);
  CHECK(access(q, F_OK) != 0);
  CHECK(unlink(p) == 0);

  /* 3. `latest` itself a link (or a FIFO): the save is refused naming it, before anything is written; the link and
   * its target stay */
  snprintf(p, sizeof p, "%s/latest", root);
  CHECK(unlink(p) == 0);
  CHECK(symlink(victim, p) == 0);
  o.tag = 3;
  CHECK_ST(zo_engine_save(r.e, root, &o, NULL, 0), ZO_ERR_IO);
  CHECK_HAS(zo_last_error(), p);
  CHECK_HAS(zo_last_error(), "a symbolic link, not a regular file");
  CHECK(is_link(p));
  CHECK(victim_intact(victim));
  snprintf(q, sizeof q, "%s/step-000000000003", root);
  CHECK(access(q, F_OK) != 0);
  CHECK(unlink(p) == 0);
  CHECK(mkfifo(p, 0644) == 0);
  CHECK_ST(zo_engine_save(r.e, root, &o, NULL, 0), ZO_ERR_IO);
  CHECK_HAS(zo_last_error(), "a FIFO");
  struct stat sb;
  CHECK(lstat(p, &sb) == 0 && S_ISFIFO(sb.st_mode));
  CHECK(unlink(p) == 0);
  o.no_latest = 1; /* `latest` left alone: no check of it, the save goes on */
  CHECK(mkfifo(p, 0644) == 0);
  CHECK_OK(zo_engine_save(r.e, root, &o, NULL, 0));
  CHECK(lstat(p, &sb) == 0 && S_ISFIFO(sb.st_mode));
  CHECK(unlink(p) == 0);

  /* 4. the export: links at OUT.tmp and DIR/.OUT.PID.0..9.tmp are stepped around; OUT is a regular file */
  char out[900];
  snprintf(out, sizeof out, "%s/model.safetensors", dir);
  snprintf(p, sizeof p, "%s.tmp", out);
  plant(dir, "model.safetensors", p, victim);
  CHECK_OK(zo_engine_export_safetensors(r.e, out, ZO_DTYPE_F32));
  CHECK(victim_intact(victim));
  CHECK(lstat(out, &sb) == 0 && S_ISREG(sb.st_mode));
  CHECK_OK(zo_safetensors_read(out, NULL, NULL));

  /* 5. the export's target a link, a FIFO, a directory, a character device (as root): refused naming it and what it
   * is, left as it was, no temporary file left beside it */
  const char *kinds[] = {"link", "fifo", "dir", "chardev"};
  for (int k = 0; k < 4; k++) {
    snprintf(out, sizeof out, "%s/out-%s", dir, kinds[k]);
    int made = 0;
    if (k == 0) made = symlink(victim, out) == 0;
    if (k == 1) made = mkfifo(out, 0644) == 0;
    if (k == 2) made = mkdir(out, 0755) == 0;
    if (k == 3)
      made = mknod(out, S_IFCHR | 0666, makedev(1, 7)) == 0; /* /dev/full's numbers, here */
    if (!made) {
      CHECK(k == 3 && errno == EPERM); /* only root makes device nodes */
      printf("test_ckpt_tmpfiles: %s target skipped: %s\n", kinds[k], strerror(errno));
      continue;
    }
    const int before = zo_test_count_entries(dir);
    CHECK_ST(zo_engine_export_safetensors(r.e, out, ZO_DTYPE_BF16), ZO_ERR_IO);
    CHECK_HAS(zo_last_error(), out);
    CHECK_HAS(zo_last_error(), "not a regular file: not replacing it");
    CHECK(lstat(out, &sb) == 0);
    CHECK(k != 0 || S_ISLNK(sb.st_mode));
    CHECK(k != 1 || S_ISFIFO(sb.st_mode));
    CHECK(k != 2 || (S_ISDIR(sb.st_mode) && zo_test_count_entries(out) == 0));
    CHECK(k != 3 || (S_ISCHR(sb.st_mode) && sb.st_rdev == makedev(1, 7)));
    CHECK_EQ(zo_test_count_entries(dir), before);
  }
  CHECK(victim_intact(victim));

  /* 6. leftovers of an export killed mid-write: DIR/.OUT.PID.N.tmp of this target and a gone PID, a regular file,
   * is removed (one log line naming it); one of a live PID, a link, a FIFO, a directory named so, another target's
   * and names that only look alike stay */
  char sd[800], lp[12][1200];
  snprintf(sd, sizeof sd, "%s/sweep", dir);
  CHECK(mkdir(sd, 0755) == 0);
  const long dead = dead_pid(), live = (long)getpid();
  CHECK(dead > 0);
  snprintf(out, sizeof out, "%s/model.safetensors", sd);
  snprintf(lp[0], sizeof lp[0], "%s/.model.safetensors.%ld.3.tmp", sd, dead); /* removed */
  snprintf(lp[1], sizeof lp[1], "%s/.model.safetensors.%ld.3.tmp", sd, live); /* live pid: kept */
  snprintf(lp[2], sizeof lp[2], "%s/.model.safetensors.%ld.4.tmp", sd, dead); /* symlink: kept */
  snprintf(lp[3], sizeof lp[3], "%s/.model.safetensors.%ld.5.tmp", sd, dead); /* FIFO: kept */
  /* another target: kept */
  snprintf(lp[4], sizeof lp[4], "%s/.other.safetensors.%ld.3.tmp", sd, dead);
  snprintf(lp[5], sizeof lp[5], "%s/.model.safetensors.%ld.6.tmp", sd, dead); /* directory: kept */
  /* target model.safetensors.1 */
  snprintf(lp[6], sizeof lp[6], "%s/.model.safetensors.1.%ld.3.tmp", sd, dead);
  /* not the pattern */
  snprintf(lp[7], sizeof lp[7], "%s/.model.safetensors.%ld.3.tmp.x", sd, dead);
  /* never made by us */
  snprintf(lp[8], sizeof lp[8], "%s/.model.safetensors.0%ld.3.tmp", sd, dead);
  snprintf(lp[9], sizeof lp[9], "%s/model.safetensors.%ld.3.tmp", sd, dead); /* no leading dot */
  for (int i = 0; i < 10; i++) {
    if (i == 2)
      CHECK(symlink(victim, lp[i]) == 0);
    else if (i == 3)
      CHECK(mkfifo(lp[i], 0644) == 0);
    else if (i == 5)
      CHECK(mkdir(lp[i], 0755) == 0);
    else
      CHECK(make_victim(lp[i]));
  }
  /* a target name over 200 bytes: its temporary names carry the first 200, and so does the sweep */
  char longname[240], longout[1200];
  memset(longname, 'L', 230);
  longname[230] = 0;
  snprintf(longout, sizeof longout, "%s/%s", sd, longname);
  snprintf(lp[10], sizeof lp[10], "%s/.%.200s.%ld.0.tmp", sd, longname, dead); /* removed */
  /* 199 bytes: not its: kept */
  snprintf(lp[11], sizeof lp[11], "%s/.%.199s.%ld.0.tmp", sd, longname, dead);
  CHECK(make_victim(lp[10]));
  CHECK(make_victim(lp[11]));
  g_log[0] = 0;
  zo_log_set_handler(keep_log, NULL, ZO_LOG_INFO);
  CHECK_OK(zo_engine_export_safetensors(r.e, out, ZO_DTYPE_F32));
  CHECK_OK(zo_engine_export_safetensors(r.e, longout, ZO_DTYPE_F32));
  zo_log_set_handler(NULL, NULL, ZO_LOG_WARN);
  CHECK(is_type(out, S_IFREG));
  CHECK_OK(zo_safetensors_read(out, NULL, NULL));
  CHECK(is_type(longout, S_IFREG));
  CHECK(access(lp[0], F_OK) != 0 && errno == ENOENT);
  CHECK(access(lp[10], F_OK) != 0 && errno == ENOENT);
  CHECK_HAS(g_log, lp[0]);
  CHECK_HAS(g_log, lp[10]);
  CHECK(victim_intact(lp[1]));
  CHECK(is_type(lp[2], S_IFLNK));
  CHECK(is_type(lp[3], S_IFIFO));
  CHECK(victim_intact(lp[4]));
  CHECK(is_type(lp[5], S_IFDIR));
  for (int i = 6; i < 10; i++) CHECK(victim_intact(lp[i]));
  CHECK(victim_intact(lp[11]));
  CHECK(victim_intact(victim));
  /* the 12 leftovers less the 2 removed, and the two exports: no temporary file of these exports left */
  CHECK_EQ(zo_test_count_entries(sd), 12 - 2 + 2);
  ckpt_rig_close(&r);
  if (!zo_test_failures) {
    snprintf(p, sizeof p, "rm -rf '%s'", dir);
    if (system(p) != 0) fprintf(stderr, "could not remove %s\n", dir);
  }
  return zo_test_finish("test_ckpt_tmpfiles");
}
