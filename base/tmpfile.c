/*
 * tmpfile.c - the library's one way to replace a file crash-safely: a new
 * temporary file beside the target that opens nothing existing, and a rename
 * over the target only while the target is absent or a regular file. Not the
 * swap files (swap/swap_file.c) and not who owns a directory (swap/swap_dir.c,
 * offload/checkpoint/lock.c).
 *
 * Why this is safe in a directory others can write to. The temporary file is
 * made with O_CREAT|O_EXCL|O_NOFOLLOW, so whatever sits at its name (a planted
 * symbolic link to a victim, a FIFO, a device node, someone's file) makes the
 * open fail with EEXIST and the next name is tried: nothing existing is opened,
 * truncated or written. The rename replaces a directory entry and never
 * follows one; refusing any target that lstat(2) does not call a regular file
 * keeps a symbolic link, a device node (zo-train --export-safetensors
 * /dev/full, run as root), a directory or a FIFO where the user put it. Between
 * that lstat and the rename only someone who can write the directory can swap
 * the entry, and that someone could remove it anyway: the rename gives them
 * nothing they did not have.
 *
 * A writer killed between the open and the rename leaves its temporary file
 * behind; zo_tmpfile_sweep() removes those of one target whose process is
 * gone. It proves each is ours by its whole name (what zo_tmpfile_open makes
 * for that target, a PID and N as it prints them), removes only what lstat(2)
 * calls a regular file, and unlinks a directory entry, which follows nothing.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base_internal.h"

#define TMP_BASE_MAX \
  200 /* bytes of the target's name kept in the temporary name (NAME_MAX is 255) */

/* @target split as zo_tmpfile_open names its temporary files: *@base its last component, *@dir_len the bytes before it
 * (with the '/'), and the returned length of the part of *@base the names carry (0: "dir/", no file name). */
static size_t tmp_base(const char *target, const char **base, int *dir_len) {
  const char *slash = strrchr(target, '/');
  *base = slash ? slash + 1 : target;
  *dir_len = slash ? (int)(slash - target) + 1 : 0; /* with the '/' */
  size_t blen = strlen(*base);
  return blen > TMP_BASE_MAX ? TMP_BASE_MAX : blen;
}

int zo_tmpfile_open(const char *target, char *tmp, size_t cap) {
  const char *base;
  int dir_len;
  const size_t blen = tmp_base(target, &base, &dir_len);
  if (!blen) return -EISDIR; /* "dir/": no file name */
  for (int n = 0; n < ZO_TMPFILE_TRIES; n++) {
    int len = snprintf(tmp, cap, "%.*s.%.*s.%ld.%d.tmp", dir_len, target, (int)blen, base,
                       (long)getpid(), n);
    if (len < 0 || (size_t)len >= cap) return -ENAMETOOLONG;
    int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd >= 0) return fd;
    if (errno != EEXIST) return -errno;
  }
  return -EEXIST;
}

int zo_pid_gone(long pid) {
  if (pid <= 0 || pid > INT_MAX || pid == (long)getpid())
    return 0; /* no process's, or this one's: not gone */
  return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

int zo_pid_exited(long pid) {
  if (zo_pid_gone(pid)) return 1;
  if (pid <= 0 || pid > INT_MAX || pid == (long)getpid()) return 0;
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%ld/stat", pid);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  const size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  const char *p = strrchr(buf, ')'); /* "pid (comm) S ...": comm may hold spaces and parentheses */
  return p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X');
}

/* The decimal number at *@p as "%ld" / "%d" print it (digits, no sign, no leading zero but in "0"), at most @max,
 * into *@v; *@p moved past it. 0 when there is none. */
static int tmp_number(const char **p, long max, long *v) {
  const char *s = *p;
  long n = 0;
  if (*s < '0' || *s > '9' || (s[0] == '0' && s[1] >= '0' && s[1] <= '9')) return 0;
  for (; *s >= '0' && *s <= '9'; s++) {
    if (n > (max - (*s - '0')) / 10) return 0;
    n = n * 10 + (*s - '0');
  }
  *p = s;
  *v = n;
  return 1;
}

/* 1 when @name is ".BASE.PID.N.tmp" with BASE the @blen bytes at @base, PID in 1..INT_MAX (into *@pid) and N in
 * 0..ZO_TMPFILE_TRIES-1: a name zo_tmpfile_open gives a temporary file of that target. */
static int tmp_name_ours(const char *name, const char *base, size_t blen, long *pid) {
  long n;
  if (name[0] != '.' || strncmp(name + 1, base, blen) || name[1 + blen] != '.') return 0;
  const char *p = name + 2 + blen;
  if (!tmp_number(&p, INT_MAX, pid) || *pid <= 0 || *p++ != '.') return 0;
  if (!tmp_number(&p, ZO_TMPFILE_TRIES - 1, &n)) return 0;
  return !strcmp(p, ".tmp");
}

void zo_tmpfile_sweep(const char *target) {
  const char *base;
  int dir_len;
  const size_t blen = tmp_base(target, &base, &dir_len);
  char dir[PATH_MAX], path[PATH_MAX];
  if (!blen || dir_len >= (int)sizeof dir) return;
  if (dir_len)
    snprintf(dir, sizeof dir, "%.*s", dir_len, target); /* "/" stays "/" */
  else
    snprintf(dir, sizeof dir, ".");
  DIR *d = opendir(dir);
  if (!d) return;
  const int dfd = dirfd(d);
  struct dirent *de;
  struct stat sb;
  long pid;
  while ((de = readdir(d))) {
    if (!tmp_name_ours(de->d_name, base, blen, &pid) || !zo_pid_gone(pid)) continue;
    if (fstatat(dfd, de->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(sb.st_mode)) continue;
    if (unlinkat(dfd, de->d_name, 0) != 0) continue;
    snprintf(path, sizeof path, "%.*s%s", dir_len, target, de->d_name);
    zo_info("removed '%s', left by an interrupted write of '%s' (process %ld, gone)", path, target,
            pid);
  }
  closedir(d);
}

int zo_tmpfile_target_check(const char *target, mode_t *found) {
  struct stat sb;
  if (lstat(target, &sb) != 0) return errno == ENOENT ? 0 : -errno;
  if (S_ISREG(sb.st_mode)) return 0;
  if (found) *found = sb.st_mode;
  return 1;
}

int zo_tmpfile_place(const char *tmp, const char *target, mode_t *found) {
  int r = zo_tmpfile_target_check(target, found);
  if (r != 0) return r;
  return rename(tmp, target) == 0 ? 0 : -errno;
}

const char *zo_file_kind(mode_t mode) {
  return S_ISREG(mode)    ? "a regular file"
         : S_ISDIR(mode)  ? "a directory"
         : S_ISLNK(mode)  ? "a symbolic link"
         : S_ISCHR(mode)  ? "a character device"
         : S_ISBLK(mode)  ? "a block device"
         : S_ISFIFO(mode) ? "a FIFO"
         : S_ISSOCK(mode) ? "a socket"
                          : "not a regular file";
}
