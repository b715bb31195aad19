/*
 * tmpfile.c - the library's one way to replace a file crash-safely: a new
 * temporary file beside the target that opens nothing existing, and a rename
 * over the target only while the target is absent or a regular file. Not the
 * swap files (swap/swap_file.c) and not who owns a directory (swap/swap_dir.c,
 * offload/checkpoint_lock.c).
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
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base_internal.h"

#define TMP_BASE_MAX 200 /* bytes of the target's name kept in the temporary name (NAME_MAX is 255) */

int zo_tmpfile_open(const char *target, char *tmp, size_t cap) {
  const char *slash = strrchr(target, '/');
  const char *base = slash ? slash + 1 : target;
  const int dir_len = slash ? (int)(slash - target) + 1 : 0; /* with the '/' */
  size_t blen = strlen(base);
  if (!blen) return -EISDIR; /* "dir/": no file name */
  if (blen > TMP_BASE_MAX) blen = TMP_BASE_MAX;
  for (int n = 0; n < ZO_TMPFILE_TRIES; n++) {
    int len = snprintf(tmp, cap, "%.*s.%.*s.%ld.%d.tmp", dir_len, target, (int)blen, base, (long)getpid(), n);
    if (len < 0 || (size_t)len >= cap) return -ENAMETOOLONG;
    int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd >= 0) return fd;
    if (errno != EEXIST) return -errno;
  }
  return -EEXIST;
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
