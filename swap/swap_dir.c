/*
 * swap_dir.c - who owns the private swap directory nvme_path/zoffload-rank<R>:
 * made atomically with its owner marker inside, locked while in use,
 * recognised and emptied when a dead run left it, removed at the end. Not the
 * swap files (swap_file.c), which only have their names recorded here.
 *
 * Why ownership is race-free. The lock is flock(LOCK_EX) on the directory
 * itself (an open descriptor of it), never on a file inside it, and
 *  (1) the directory appears at its path only already locked and marked: it is
 *      made under a private temporary name, locked, marked, then moved into
 *      place with renameat2(RENAME_NOREPLACE), which fails if the path exists;
 *  (2) only the lock's holder removes it (marker, then rmdir), and it does so
 *      before it drops the lock (close);
 *  (3) a contender opens the path, takes the lock without waiting, and then
 *      checks that the inode it locked is still linked (st_nlink > 0) and is
 *      still the one at the path (same st_dev and st_ino); if not, its owner
 *      removed it between our open and our lock, and we start over.
 * By (2) nobody else removes the inode while we hold its lock, so what (3)
 * checked stays true until we let go: at most one process owns the directory
 * at the path. By (1) no one ever sees a directory its creator does not own
 * yet, so a contender either owns it or is refused "busy", never ENOENT.
 * The scheme this replaces (flock on a ".lock" file that destroy unlinked)
 * let a contender lock the unlinked file of a removed directory while a third
 * process made a new one: two owners, and ENOENT for the first.
 *
 * The marker (ZO_SWAP_DIR_MARKER) reads "zoffload swap directory v1\n",
 * "pid <pid>\n", one "file <name>\n" per swap file, "end\n". The owner rewrites
 * it (truncate, then write) before it creates each file, so it names every
 * file in the directory; one cut short has no "end" line and counts as
 * foreign. A directory whose lock is free (a dead run left it) is emptied only
 * when its marker is whole and every other entry is a regular file the marker
 * names (or the alignment probe); otherwise nothing in it is touched.
 * A crash between the temporary mkdir and the rename would leave an empty
 * hidden ".zoffload-rank<R>.<pid>.<n>.new" in nvme_path; nothing reads it.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base_internal.h"
#include "swap_dir.h"

#define MAGIC "zoffload swap directory v1\n"
#define MARKER_MAX_BYTES (16u << 20) /* larger is not ours */
#define OPEN_TRIES 1000 /* start-overs in (3): each means another process made progress */

static atomic_uint g_tmp_seq; /* temporary names of this process */

static zo_status sys_status(int err) {
  return err == ENOMEM ? ZO_ERR_OUT_OF_MEMORY : ZO_ERR_SYSTEM;
}

int zo_swap_dir_reserved(const char *name) {
  return !strcmp(name, ZO_SWAP_DIR_MARKER) || !strcmp(name, ZO_SWAP_DIR_PROBE);
}

/* ---- the marker ------------------------------------------------------------------------- */

int zo_swap_dir_record(zo_swap_dir_t *d, const char *const *names, size_t n) {
  if (d->marker_fd < 0) return -EBADF;
  size_t cap = sizeof MAGIC + 64;
  for (size_t i = 0; i < n; i++) {
    size_t l = strlen(names[i]);
    if (l > 4096 || cap > MARKER_MAX_BYTES) return -ENAMETOOLONG;
    cap += l + 8;
  }
  char *b = malloc(cap);
  if (!b) return -ENOMEM;
  size_t len = (size_t)snprintf(b, cap, MAGIC "pid %ld\n", (long)getpid());
  for (size_t i = 0; i < n; i++) len += (size_t)snprintf(b + len, cap - len, "file %s\n", names[i]);
  len += (size_t)snprintf(b + len, cap - len, "end\n");
  int ret = ftruncate(d->marker_fd, 0) == 0 ? 0 : -errno;
  for (size_t done = 0; !ret && done < len;) {
    ssize_t w = pwrite(d->marker_fd, b + done, len - done, (off_t)done);
    if (w > 0)
      done += (size_t)w;
    else if (w == 0 || errno != EINTR)
      ret = w == 0 ? -EIO : -errno;
  }
  free(b);
  return ret;
}

/* Read the marker in @dirfd into *@text (malloc'd, NUL-terminated); 0 or -errno (-ENOENT: none). */
static int marker_read(int dirfd, char **text) {
  *text = NULL;
  int fd = openat(dirfd, ZO_SWAP_DIR_MARKER, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return -errno;
  struct stat st;
  int ret = 0;
  if (fstat(fd, &st) != 0)
    ret = -errno;
  else if (!S_ISREG(st.st_mode))
    ret = -EINVAL;
  else if (st.st_size > (off_t)MARKER_MAX_BYTES)
    ret = -EFBIG;
  char *t = ret ? NULL : malloc((size_t)st.st_size + 1);
  if (!ret && !t) ret = -ENOMEM;
  size_t len = 0;
  while (!ret && len < (size_t)st.st_size) {
    ssize_t r = pread(fd, t + len, (size_t)st.st_size - len, (off_t)len);
    if (r > 0)
      len += (size_t)r;
    else if (r == 0)
      break;
    else if (errno != EINTR)
      ret = -errno;
  }
  close(fd);
  if (ret) {
    free(t);
    return ret;
  }
  t[len] = 0;
  *text = t;
  return 0;
}

/* The owner pid in a whole marker @text, or -1 when @text is not one (no magic, no pid, no end line). */
static long marker_pid(const char *text) {
  size_t ml = strlen(MAGIC), tl = text ? strlen(text) : 0;
  if (tl < ml || memcmp(text, MAGIC, ml) != 0) return -1;
  if (tl < 5 || strcmp(text + tl - 5, "\nend\n") != 0) return -1;
  long pid = -1;
  char nl = 0;
  if (sscanf(text + ml, "pid %ld%c", &pid, &nl) != 2 || nl != '\n' || pid <= 0) return -1;
  return pid;
}

/* 1 when the whole marker @text has the line "file @name". */
static int marker_names(const char *text, const char *name) {
  size_t nl = strlen(name);
  for (const char *p = strchr(text, '\n'); p && p[1]; p = strchr(p + 1, '\n')) {
    const char *line = p + 1;
    if (!strncmp(line, "file ", 5) && !strncmp(line + 5, name, nl) && line[5 + nl] == '\n')
      return 1;
  }
  return 0;
}

/* ---- taking over a directory a dead run left --------------------------------------------- */

/* An entry of a stale directory we may remove: a regular file the whole marker names, or the probe. */
static int removable(const char *text, const char *name, mode_t mode) {
  return S_ISREG(mode) && strcmp(name, ZO_SWAP_DIR_MARKER) != 0 &&
         (!strcmp(name, ZO_SWAP_DIR_PROBE) || marker_names(text, name));
}

/*
 * We hold the lock on d->fd, the directory at d->path, and did not make it:
 * check every entry first, then remove the swap files, then mark it ours.
 */
static zo_status take_stale(zo_swap_dir_t *d) {
  char *text = NULL;
  int mret = marker_read(d->fd, &text);
  long pid = mret == 0 ? marker_pid(text) : -1;
  zo_status st = ZO_OK;
  unsigned n_removed = 0;
  for (int pass = 0; pass < 2 && st == ZO_OK; pass++) { /* 0: check everything; 1: remove */
    int fd = dup(d->fd);
    DIR *dir = fd >= 0 ? fdopendir(fd) : NULL;
    if (!dir) {
      int e = errno;
      if (fd >= 0) close(fd);
      st = zo_error_set(sys_status(e), "swap: read swap directory %s: %s", d->path, strerror(e));
      break;
    }
    rewinddir(dir);
    int n_entries = 0;
    struct dirent *de;
    errno = 0;
    while (st == ZO_OK && (de = readdir(dir))) {
      if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
      n_entries++;
      struct stat es;
      if (fstatat(d->fd, de->d_name, &es, AT_SYMLINK_NOFOLLOW) != 0) {
        int e = errno;
        st = zo_error_set(sys_status(e), "swap: stale swap directory %s: '%s': %s", d->path,
                          de->d_name, strerror(e));
      } else if (pid < 0 && strcmp(de->d_name, ZO_SWAP_DIR_MARKER) != 0) {
        st = zo_error_set(
            ZO_ERR_INVALID_ARG,
            "swap: swap directory %s was not made by zoffload (owner marker %s: %s) and holds '%s' "
            "(%s); nothing removed: move it away or use another nvme_path or rank",
            d->path, ZO_SWAP_DIR_MARKER, mret ? strerror(-mret) : "not a zoffload marker",
            de->d_name, zo_file_kind(es.st_mode));
      } else if (pid >= 0 && strcmp(de->d_name, ZO_SWAP_DIR_MARKER) != 0 &&
                 !removable(text, de->d_name, es.st_mode)) {
        st = zo_error_set(
            ZO_ERR_INVALID_ARG,
            "swap: stale swap directory %s (left by pid %ld) holds '%s' (%s), which is not one of its "
            "swap files; nothing removed: move it away or use another nvme_path or rank",
            d->path, pid, de->d_name, zo_file_kind(es.st_mode));
      } else if (pass == 1 && strcmp(de->d_name, ZO_SWAP_DIR_MARKER) != 0) {
        if (unlinkat(d->fd, de->d_name, 0) != 0) {
          int e = errno;
          st =
              zo_error_set(ZO_ERR_SYSTEM,
                           "swap: cannot empty stale swap directory %s (left by pid %ld): '%s': %s",
                           d->path, pid, de->d_name, strerror(e));
        } else {
          n_removed++;
        }
      }
      errno = 0;
    }
    if (st == ZO_OK && errno) {
      int e = errno;
      st = zo_error_set(ZO_ERR_SYSTEM, "swap: read swap directory %s: %s", d->path, strerror(e));
    }
    closedir(dir);
    if (st == ZO_OK && pid < 0) /* empty, or only a marker that is not ours */
      st = zo_error_set(
          ZO_ERR_INVALID_ARG,
          "swap: swap directory %s was not made by zoffload (owner marker %s: %s; %s); nothing removed: "
          "remove it or use another nvme_path or rank",
          d->path, ZO_SWAP_DIR_MARKER, mret ? strerror(-mret) : "not a zoffload marker",
          n_entries ? "it holds only that marker" : "it is empty");
  }
  free(text);
  if (st != ZO_OK) return st;
  d->marker_fd = openat(d->fd, ZO_SWAP_DIR_MARKER, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
  int ret = d->marker_fd < 0 ? -errno : zo_swap_dir_record(d, NULL, 0);
  if (ret < 0)
    return zo_error_set(sys_status(-ret), "swap: rewrite owner marker '%s/%s': %s", d->path,
                        ZO_SWAP_DIR_MARKER, strerror(-ret));
  zo_warn("swap: removed stale swap directory %s left by pid %ld (%u files)", d->path, pid,
          n_removed);
  return ZO_OK;
}

/* ---- making, opening, closing ------------------------------------------------------------ */

/*
 * Make the directory under the temporary name @tmp, lock and mark it, and move
 * it to d->path. 0: owned; -EEXIST: something is at d->path by now; else
 * -errno with *@step naming what failed. Leaves nothing behind on failure.
 */
static int make_dir(zo_swap_dir_t *d, const char *tmp, const char **step) {
  *step = "mkdir";
  if (mkdir(tmp, 0700) != 0) return -errno;
  int ret = 0;
  int fd = open(tmp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  int mfd = -1;
  struct stat st;
  if (fd < 0) {
    ret = -errno;
    *step = "open";
  } else if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    ret = -errno;
    *step = "flock";
  } else if (fstat(fd, &st) != 0 || ((st.st_mode & 07777) != 0700 && fchmod(fd, 0700) != 0)) {
    ret = -errno;
    *step = "chmod 0700";
  } else if ((mfd = openat(fd, ZO_SWAP_DIR_MARKER,
                           O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600)) < 0) {
    ret = -errno;
    *step = "create the owner marker";
  } else {
    d->marker_fd = mfd;
    ret = zo_swap_dir_record(d, NULL, 0);
    *step = "write the owner marker";
    if (!ret && renameat2(AT_FDCWD, tmp, AT_FDCWD, d->path, RENAME_NOREPLACE) != 0) {
      ret = -errno;
      *step = "renameat2(RENAME_NOREPLACE)";
    }
  }
  if (!ret) {
    d->fd = fd;
    d->owned = 1;
    return 0;
  }
  if (mfd >= 0) {
    close(mfd);
    unlinkat(fd, ZO_SWAP_DIR_MARKER, 0);
  }
  d->marker_fd = -1;
  rmdir(tmp);
  if (fd >= 0) close(fd);
  return ret == -ENOTEMPTY ? -EEXIST : ret;
}

/* The owner pid its marker names, for the "busy" message; -1 when unknown. */
static long owner_pid(int dirfd) {
  char *text = NULL;
  long pid = marker_read(dirfd, &text) == 0 ? marker_pid(text) : -1;
  free(text);
  return pid;
}

zo_status zo_swap_dir_open(zo_swap_dir_t *d, const char *nvme_path, int rank) {
  d->fd = d->marker_fd = -1;
  d->owned = 0;
  size_t plen = strlen(nvme_path);
  while (plen > 1 && nvme_path[plen - 1] == '/') plen--;
  int n = snprintf(d->path, sizeof d->path, "%.*s/zoffload-rank%d", (int)plen, nvme_path, rank);
  if (n < 0 || (size_t)n + 256 >= sizeof d->path)
    return zo_error_set(ZO_ERR_INVALID_ARG, "swap: nvme_path '%s': %s", nvme_path,
                        strerror(ENAMETOOLONG));
  for (int tries = 0; tries < OPEN_TRIES; tries++) {
    int fd = open(d->path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) {
      char tmp[PATH_MAX + 64];
      snprintf(tmp, sizeof tmp, "%.*s/.zoffload-rank%d.%ld.%u.new", (int)plen, nvme_path, rank,
               (long)getpid(), atomic_fetch_add(&g_tmp_seq, 1));
      const char *step = "";
      int ret = make_dir(d, tmp, &step);
      if (ret == 0) return ZO_OK;
      /* EEXIST: another process made it first (the rename), or a crashed process with our pid left the
       * temporary name (the mkdir; the next try takes the next number). */
      if (ret == -EEXIST) continue;
      if (ret == -EINVAL && !strcmp(step, "renameat2(RENAME_NOREPLACE)"))
        return zo_error_set(
            ZO_ERR_UNSUPPORTED,
            "swap: nvme_path '%s': the file system refuses renameat2(RENAME_NOREPLACE) (%s), which "
            "zoffload needs to make '%s' atomically",
            nvme_path, strerror(-ret), d->path);
      return zo_error_set(sys_status(-ret),
                          "swap: nvme_path '%s': cannot make '%s' (%s of '%s'): %s", nvme_path,
                          d->path, step, tmp, strerror(-ret));
    }
    if (fd < 0) {
      int e = errno;
      struct stat ls;
      if ((e == ELOOP || e == ENOTDIR) && lstat(d->path, &ls) == 0) {
        if (S_ISLNK(ls.st_mode))
          return zo_error_set(ZO_ERR_INVALID_ARG,
                              "swap: swap directory '%s' is a symbolic link; refusing to follow it",
                              d->path);
        if (!S_ISDIR(ls.st_mode))
          return zo_error_set(ZO_ERR_INVALID_ARG,
                              "swap: swap directory '%s' exists and is not a directory", d->path);
      }
      return zo_error_set(e == ELOOP || e == ENOTDIR ? ZO_ERR_INVALID_ARG : sys_status(e),
                          "swap: open '%s': %s", d->path, strerror(e));
    }
    struct stat st, at_path;
    if (fstat(fd, &st) != 0) {
      int e = errno;
      close(fd);
      return zo_error_set(ZO_ERR_SYSTEM, "swap: fstat '%s': %s", d->path, strerror(e));
    }
    if (st.st_uid != geteuid()) {
      close(fd);
      return zo_error_set(ZO_ERR_INVALID_ARG,
                          "swap: swap directory '%s' belongs to uid %u, not to us (uid %u)",
                          d->path, (unsigned)st.st_uid, (unsigned)geteuid());
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
      int e = errno;
      long pid = e == EWOULDBLOCK ? owner_pid(fd) : -1;
      close(fd);
      if (e != EWOULDBLOCK)
        return zo_error_set(ZO_ERR_SYSTEM, "swap: flock '%s': %s", d->path, strerror(e));
      if (pid > 0)
        return zo_error_set(
            ZO_ERR_INVALID_USAGE,
            "swap: swap directory %s is in use by a live process (pid %ld); use another nvme_path or "
            "rank",
            d->path, pid);
      return zo_error_set(
          ZO_ERR_INVALID_USAGE,
          "swap: swap directory %s is in use by a live process (pid unknown: its owner marker is "
          "gone, it is being removed); use another nvme_path or rank",
          d->path);
    }
    /* (3): the inode we locked must still be linked, and be the one at the path. */
    if (fstat(fd, &st) != 0 || st.st_nlink == 0 || lstat(d->path, &at_path) != 0 ||
        at_path.st_dev != st.st_dev || at_path.st_ino != st.st_ino) {
      close(fd);
      continue;
    }
    d->fd = fd;
    zo_status ret = take_stale(d);
    if (ret == ZO_OK && (st.st_mode & 07777) != 0700 && fchmod(fd, 0700) != 0) {
      int e = errno;
      ret = zo_error_set(ZO_ERR_SYSTEM, "swap: chmod 0700 '%s': %s", d->path, strerror(e));
    }
    if (ret != ZO_OK) {
      zo_swap_dir_close(d); /* not owned: removes nothing */
      return ret;
    }
    d->owned = 1;
    return ZO_OK;
  }
  return zo_error_set(
      ZO_ERR_INVALID_USAGE,
      "swap: swap directory %s is in use by a live process (it changed hands %d times while we tried "
      "to lock it); use another nvme_path or rank",
      d->path, OPEN_TRIES);
}

void zo_swap_dir_close(zo_swap_dir_t *d) {
  if (d->marker_fd >= 0) close(d->marker_fd);
  if (d->owned) { /* (2): remove it while we still hold the lock */
    if (unlinkat(d->fd, ZO_SWAP_DIR_MARKER, 0) != 0)
      zo_warn("swap: unlink '%s/%s': %s", d->path, ZO_SWAP_DIR_MARKER, strerror(errno));
    if (rmdir(d->path) != 0) zo_warn("swap: rmdir '%s': %s", d->path, strerror(errno));
  }
  if (d->fd >= 0) close(d->fd);
  d->fd = d->marker_fd = -1;
  d->owned = 0;
}
