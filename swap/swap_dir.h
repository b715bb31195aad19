/*
 * swap_dir.h - ownership of the private swap directory nvme_path/zoffload-rank<R>
 * (swap_dir.c): made, locked, recognised as ours, emptied when a dead run left
 * it, removed. Not installed; not the swap files (swap_file.c) nor their I/O (swap.c).
 */
#ifndef ZO_SWAP_DIR_H
#define ZO_SWAP_DIR_H

#include <limits.h>
#include <stddef.h>

#include "zoffload/status.h"

#define ZO_SWAP_DIR_MARKER ".zoffload-owner" /* owner marker inside the directory */
#define ZO_SWAP_DIR_PROBE ".align-probe"     /* swap.c's O_DIRECT alignment probe */

typedef struct zo_swap_dir {
  char path[PATH_MAX]; /* nvme_path/zoffload-rank<R>, no trailing '/' */
  int fd;              /* the directory itself, flock(LOCK_EX) held while owned; -1 */
  int marker_fd;       /* ZO_SWAP_DIR_MARKER, open for rewriting; -1 */
  int owned;           /* we hold the lock on the directory now at path */
} zo_swap_dir_t;

/*
 * zo_swap_dir_open() - make or take over nvme_path/zoffload-rank<rank> and own
 * it until zo_swap_dir_close(). @d is filled in (fd = -1 on failure).
 * A directory left by a dead run is emptied only when it carries our marker and
 * holds nothing but regular files the marker names; anything else is refused
 * naming the directory and the first foreign entry, and nothing is removed.
 * Returns ZO_OK; ZO_ERR_INVALID_ARG (path too long, symlink, not a directory,
 * another user's, foreign or unmarked contents); ZO_ERR_INVALID_USAGE "swap
 * directory X is in use by a live process (pid N)"; ZO_ERR_UNSUPPORTED when
 * the file system has no renameat2(RENAME_NOREPLACE); ZO_ERR_SYSTEM or
 * ZO_ERR_OUT_OF_MEMORY for failed system calls. Sets the last error.
 */
zo_status zo_swap_dir_open(zo_swap_dir_t *d, const char *nvme_path, int rank);

/*
 * zo_swap_dir_record() - rewrite the marker with our pid and @names[n] (the
 * swap files that exist or are about to be made). Call it before creating a
 * file, so a crash never leaves a file the marker does not name. Returns 0 or
 * -errno.
 */
int zo_swap_dir_record(zo_swap_dir_t *d, const char *const *names, size_t n);

/* zo_swap_dir_reserved() - 1 when @name is one the directory itself uses (marker, probe). */
int zo_swap_dir_reserved(const char *name);

/*
 * zo_swap_dir_close() - when owned: remove the marker and the (by now empty)
 * directory, then release the lock; warn on failures. Closes what is open.
 * The caller removes its swap files first. Safe on a closed or failed @d.
 */
void zo_swap_dir_close(zo_swap_dir_t *d);

#endif /* ZO_SWAP_DIR_H */
