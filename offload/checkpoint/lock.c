/*
 * checkpoint/lock.c - one run per checkpoint root: zo_checkpoint_lock() /
 * zo_checkpoint_unlock(), which zo_engine_save() also takes for each save,
 * and whether the process a leftover is named after is gone. Not the
 * checkpoint format (checkpoint/save.c) and not the swap directory's ownership
 * (swap/swap_dir.c), whose approach this follows.
 *
 * The lock is flock(LOCK_EX) on ROOT/.zoffload-lock, a regular file opened
 * O_RDWR, as swap_dir.c locks with flock and names its owner in a marker. It
 * is a file and not the directory itself (swap_dir.c's choice) because a
 * checkpoint root is often on NFS, where flock is emulated with a POSIX write
 * lock that a read-only descriptor of a directory cannot take (EBADF). The
 * same three rules keep it race-free:
 *  (1) the holder writes its record (pid, host, start time, command) into
 *      the file only after taking the lock: truncate, then one pwrite;
 *  (2) only the holder removes the file (truncate, unlink) and it does so
 *      before it lets go (close);
 *  (3) a contender opens the name (O_CREAT, no O_EXCL: every contender gets
 *      the same inode while it is linked), takes the lock without waiting,
 *      then checks that the inode is still linked and still the one at the
 *      name; if not, its holder removed it in between, and it starts over.
 * So at most one process holds the file at the name. A contender that finds
 * it locked reads the record: whole (magic to "end") and, on this host, of a
 * live process with the recorded start time, it names that owner; torn,
 * empty or stale (the holder is between (1)'s lock and write, or a killed
 * run's record not yet rewritten), it looks again for up to a second.
 *
 * Inside one process the lock is shared: the roots held live in a list keyed
 * by the root's device and inode with a count of handles, so zo-train's lock
 * for the run, Python's save_checkpoint() lock and zo_engine_save()'s own do
 * not refuse each other; saves on one root in one process run one at a time
 * (a mutex per root), so a leftover named after this process is never a
 * save in progress. A fork()ed child inherits the descriptor, and with it the
 * parent's flock (flock follows the open file description, unlike fcntl
 * locks, which a child does not inherit): so the child neither uses nor lets
 * go of an entry it inherited (owner_pid): zo_checkpoint_lock() there takes
 * the root anew (and is refused: the parent holds it), and
 * zo_checkpoint_unlock() of an inherited handle does nothing to the file:
 * no truncate, unlink or LOCK_UN (the last two would hand the root to a
 * second run while the parent still saves there). Its descriptors are left
 * open in the child (O_CLOEXEC: an exec drops them); a close would be safe
 * too, as the parent's descriptor keeps the open file description and so the
 * lock, but it needs g_mu, which a parent thread may have held at the fork.
 * When the file system has no flock (ENOLCK, EOPNOTSUPP, ENOSYS: Lustre
 * without -o flock) the root is used unlocked, with one warning.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint_internal.h"
#include "engine_internal.h"

#define LOCK_MAGIC "zoffload checkpoint root lock v1\n"
#define RECORD_MAX 4096   /* the record's bytes; a larger file is not one */
#define COMMAND_MAX 1024  /* bytes of the command line kept (escaped) */
#define BUSY_TRIES 100    /* looks at a torn or stale record, 10 ms apart */
#define RELINK_TRIES 1000 /* start-overs in (3): each means another process made progress */

/* One root this process holds. */
typedef struct root_ent {
  dev_t dev;
  ino_t ino;
  int dirfd;      /* the root, for the lock file's name after a rename of the root */
  int fd;         /* ROOT/.zoffload-lock, flock held while locked; -1 when unlocked */
  int refs;       /* handles */
  long owner_pid; /* the process that took the lock; a fork()ed child's copy is not its own */
  pthread_mutex_t save_mu; /* one zo_engine_save() at a time on this root in this process */
  char root[PATH_MAX];     /* as first given, for messages */
  struct root_ent *next;
} root_ent;

struct zo_checkpoint_lock {
  root_ent *ent;
};

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER; /* g_roots and every refs */
static root_ent *g_roots;

/* ---- the record ------------------------------------------------------------------------- */

/* Field 22 of /proc/@pid/stat: the process's start in clock ticks after boot; 0 when unknown. */
static unsigned long long proc_start_ticks(long pid) {
  char p[64], b[1024];
  snprintf(p, sizeof p, "/proc/%ld/stat", pid);
  int fd = open(p, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, b, sizeof b - 1);
  close(fd);
  if (n <= 0) return 0;
  b[n] = 0;
  char *s = strrchr(b, ')'); /* the command name may hold spaces and ')' */
  if (!s) return 0;
  unsigned long long v = 0;
  /* after ')': state (field 3) ... starttime (field 22) */
  if (sscanf(s + 1,
             " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
             &v) != 1)
    return 0;
  return v;
}

/* This process's start as wall-clock seconds (boot time + start ticks); now when /proc does not say. */
static time_t proc_start_time(unsigned long long ticks) {
  time_t now = time(NULL);
  FILE *f = fopen("/proc/stat", "re");
  if (!f || !ticks) {
    if (f) fclose(f);
    return now;
  }
  char line[256];
  long long btime = -1;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "btime %lld", &btime) == 1) break;
  fclose(f);
  long hz = sysconf(_SC_CLK_TCK);
  return btime > 0 && hz > 0 ? (time_t)(btime + (long long)(ticks / (unsigned long long)hz)) : now;
}

static void host_name(char *out, size_t cap) {
  if (gethostname(out, cap) != 0) snprintf(out, cap, "unknown");
  out[cap - 1] = 0;
}

/* This process's command line, arguments joined by spaces, escaped (zo_escape), into @out. */
static void command_line(char *out, size_t cap) {
  char raw[COMMAND_MAX];
  ssize_t n = -1;
  int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    n = read(fd, raw, sizeof raw);
    close(fd);
  }
  if (n <= 0) {
    snprintf(out, cap, "unknown");
    return;
  }
  while (n > 0 && raw[n - 1] == 0) n--;
  for (ssize_t i = 0; i < n; i++)
    if (!raw[i]) raw[i] = ' ';
  zo_escape(out, cap, raw, (size_t)n);
}

/* Write this process's record into the locked file @fd: 0 or -errno. */
static int record_write(int fd) {
  char host[256], cmd[COMMAND_MAX * 4 + 8], when[64], b[RECORD_MAX];
  const unsigned long long ticks = proc_start_ticks((long)getpid());
  const time_t t = proc_start_time(ticks);
  struct tm tm;
  localtime_r(&t, &tm);
  strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S %z", &tm);
  host_name(host, sizeof host);
  command_line(cmd, sizeof cmd);
  int len = snprintf(b, sizeof b,
                     LOCK_MAGIC "pid %ld\nhost %s\nstarted %s\nproc_start %llu\ncommand %s\nend\n",
                     (long)getpid(), host, when, ticks, cmd);
  if (len < 0 || len >= (int)sizeof b)
    len = (int)sizeof b - 1; /* the command cut: still a record without "end" */
  if (ftruncate(fd, 0) != 0) return -errno;
  size_t done;
  int rc = zo_pwrite_all(fd, b, (size_t)len, 0, &done);
  return rc == 0 ? 0 : rc > 0 ? -EIO : -errno;
}

typedef struct owner {
  long pid;
  unsigned long long proc_start;
  char host[256], started[64], command[COMMAND_MAX * 4 + 8];
} owner;

/* The value of the line "@key VALUE" in @text into @out; 0 when there is none. */
static int field(const char *text, const char *key, char *out, size_t cap) {
  size_t kl = strlen(key);
  for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
    if (strncmp(l, key, kl) || l[kl] != ' ') continue;
    const char *v = l + kl + 1, *e = strchr(v, '\n');
    size_t n = e ? (size_t)(e - v) : strlen(v);
    if (n >= cap) n = cap - 1;
    memcpy(out, v, n);
    out[n] = 0;
    return 1;
  }
  return 0;
}

/* The record in the locked-by-another file @fd into *@o: 1 when it is whole and, on this host, of a live process
 * that started when it says (so it names the owner); 0 when it is torn, empty or stale. */
static int record_read(int fd, owner *o) {
  char b[RECORD_MAX + 1], v[64];
  size_t n = 0;
  if (zo_pread_all(fd, b, RECORD_MAX, 0, &n) < 0) return 0;
  b[n] = 0;
  const size_t ml = strlen(LOCK_MAGIC);
  if (n < ml + 4 || memcmp(b, LOCK_MAGIC, ml) || strcmp(b + n - 4, "end\n") || strlen(b) != n)
    return 0;
  memset(o, 0, sizeof *o);
  if (!field(b, "pid", v, sizeof v) || sscanf(v, "%ld", &o->pid) != 1 || o->pid <= 0) return 0;
  if (field(b, "proc_start", v, sizeof v)) sscanf(v, "%llu", &o->proc_start);
  if (!field(b, "host", o->host, sizeof o->host)) snprintf(o->host, sizeof o->host, "unknown");
  if (!field(b, "started", o->started, sizeof o->started))
    snprintf(o->started, sizeof o->started, "unknown");
  if (!field(b, "command", o->command, sizeof o->command))
    snprintf(o->command, sizeof o->command, "unknown");
  char me[256];
  host_name(me, sizeof me);
  if (strcmp(me, o->host)) return 1; /* another host's process: its word is all there is */
  if (kill((pid_t)o->pid, 0) != 0 && errno == ESRCH) return 0;
  return !o->proc_start || proc_start_ticks(o->pid) == o->proc_start;
}

/* ---- taking and letting go ------------------------------------------------------------------ */

int zo_ckpt_pid_gone(long pid) {
  /* ours: this process's saves on a root run one at a time; no process has a pid outside 1..INT_MAX */
  return pid == (long)getpid() || pid <= 0 || pid > INT_MAX || zo_pid_gone(pid);
}

static zo_status sys_status(int err) {
  return err == ENOMEM ? ZO_ERR_OUT_OF_MEMORY : ZO_ERR_SYSTEM;
}

/*
 * Take the lock file of the root open at @dirfd (@root, for messages) into *@fd_out (-1: the file system has no
 * flock; warned). Refuses a lock file that is not a regular file or has other links, and a live owner (named).
 */
static zo_status take(int dirfd, const char *root, int *fd_out) {
  *fd_out = -1;
  int busy_looks = 0;
  for (int tries = 0; tries < RELINK_TRIES; tries++) {
    struct stat ls;
    if (fstatat(dirfd, ZO_CKPT_LOCK_NAME, &ls, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(ls.st_mode))
      return zo_error_set(ZO_ERR_IO,
                          "checkpoint: lock file '%s/" ZO_CKPT_LOCK_NAME
                          "' is %s, not a regular file: "
                          "not opening it; remove it",
                          root, zo_file_kind(ls.st_mode));
    int fd = openat(dirfd, ZO_CKPT_LOCK_NAME,
                    O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
    if (fd < 0) {
      int e = errno;
      if (e == ELOOP)
        return zo_error_set(ZO_ERR_IO,
                            "checkpoint: lock file '%s/" ZO_CKPT_LOCK_NAME
                            "' is a symbolic link: not "
                            "following it; remove it",
                            root);
      if (e == ENOENT)
        continue; /* unlinked between the stat and the open (a holder letting go): again */
      return zo_error_set(e == EACCES || e == EROFS ? ZO_ERR_IO : sys_status(e),
                          "checkpoint: cannot open lock file '%s/" ZO_CKPT_LOCK_NAME "': %s", root,
                          strerror(e));
    }
    struct stat st, at;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      int e = errno;
      close(fd);
      return S_ISREG(st.st_mode) || e
                 ? zo_error_set(ZO_ERR_SYSTEM, "checkpoint: fstat '%s/" ZO_CKPT_LOCK_NAME "': %s",
                                root, strerror(e))
                 : zo_error_set(ZO_ERR_IO,
                                "checkpoint: lock file '%s/" ZO_CKPT_LOCK_NAME "' is %s, "
                                "not a regular file; remove it",
                                root, zo_file_kind(st.st_mode));
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
      int e = errno;
      if (e == EWOULDBLOCK) {
        owner o;
        if (record_read(fd, &o)) {
          close(fd);
          return zo_error_set(
              ZO_ERR_INVALID_USAGE,
              "checkpoint: root '%s' is in use by another run: pid %ld on host %s, started %s, "
              "command: %s (lock file '%s/" ZO_CKPT_LOCK_NAME "'); wait for it to end or save "
              "elsewhere",
              root, o.pid, o.host, o.started, o.command, root);
        }
        close(fd);
        if (++busy_looks >= BUSY_TRIES)
          return zo_error_set(
              ZO_ERR_INVALID_USAGE,
              "checkpoint: root '%s' is in use by another run (its lock file '%s/" ZO_CKPT_LOCK_NAME
              "' is locked but names no live owner after 1 s); wait for it to end or save elsewhere",
              root, root);
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
        continue;
      }
      close(fd);
      if (e == ENOLCK || e == EOPNOTSUPP || e == ENOSYS || e == EINVAL) {
        zo_warn(
            "checkpoint: the file system of '%s' does not lock files (flock: %s): the root is used unlocked, "
            "and two runs saving there are not kept apart",
            root, strerror(e));
        return ZO_OK;
      }
      return zo_error_set(sys_status(e), "checkpoint: flock '%s/" ZO_CKPT_LOCK_NAME "': %s", root,
                          strerror(e));
    }
    /* (3): still linked, and the one at the name */
    if (fstat(fd, &st) != 0 || st.st_nlink == 0 ||
        fstatat(dirfd, ZO_CKPT_LOCK_NAME, &at, AT_SYMLINK_NOFOLLOW) != 0 ||
        at.st_dev != st.st_dev || at.st_ino != st.st_ino) {
      close(fd);
      continue;
    }
    if (st.st_nlink > 1) { /* a hard link to someone's file: the record would be written into it */
      close(fd);
      return zo_error_set(ZO_ERR_IO,
                          "checkpoint: lock file '%s/" ZO_CKPT_LOCK_NAME
                          "' has %lu links: not writing "
                          "into it; remove it",
                          root, (unsigned long)st.st_nlink);
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    int r = record_write(fd);
    if (r < 0) {
      (void)unlinkat(dirfd, ZO_CKPT_LOCK_NAME, 0); /* (2): ours, still locked */
      close(fd);
      return zo_error_set(r == -ENOSPC || r == -EIO ? ZO_ERR_IO : sys_status(-r),
                          "checkpoint: writing lock file '%s/" ZO_CKPT_LOCK_NAME "': %s", root,
                          strerror(-r));
    }
    *fd_out = fd;
    return ZO_OK;
  }
  return zo_error_set(
      ZO_ERR_INVALID_USAGE,
      "checkpoint: root '%s' is in use by another run (its lock file changed "
      "hands %d times while we tried to lock it); wait for it to end or save elsewhere",
      root, RELINK_TRIES);
}

/* (2): the record emptied and the file removed while still locked, then the lock dropped. */
static void let_go(root_ent *r) {
  if (r->fd >= 0) {
    struct stat st, at;
    if (ftruncate(r->fd, 0) != 0)
      zo_warn("checkpoint: truncating '%s/" ZO_CKPT_LOCK_NAME "': %s", r->root, strerror(errno));
    if (fstat(r->fd, &st) == 0 &&
        fstatat(r->dirfd, ZO_CKPT_LOCK_NAME, &at, AT_SYMLINK_NOFOLLOW) == 0 &&
        st.st_dev == at.st_dev && st.st_ino == at.st_ino &&
        unlinkat(r->dirfd, ZO_CKPT_LOCK_NAME, 0) != 0)
      zo_warn("checkpoint: removing '%s/" ZO_CKPT_LOCK_NAME "': %s", r->root, strerror(errno));
    close(r->fd);
  }
  if (r->dirfd >= 0) close(r->dirfd);
  pthread_mutex_destroy(&r->save_mu);
  free(r);
}

zo_status zo_checkpoint_lock(const char *root, zo_checkpoint_lock_t **lock) {
  if (lock) *lock = NULL;
  if (!root || !root[0] || !lock)
    return zo_error_set(ZO_ERR_INVALID_ARG, "checkpoint_lock: NULL or empty argument");
  if (strlen(root) >= PATH_MAX - 64)
    return zo_error_set(ZO_ERR_INVALID_ARG, "checkpoint: root '%.64s...' is too long", root);
  zo_checkpoint_lock_t *h = malloc(sizeof *h);
  if (!h) return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "checkpoint_lock: out of memory");
  if (mkdir(root, 0755) != 0 && errno != EEXIST) {
    int e = errno;
    free(h);
    return zo_error_set(ZO_ERR_IO, "checkpoint: cannot create checkpoint root '%s': %s", root,
                        strerror(e));
  }
  int dirfd =
      open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC); /* the root may be a link the user made */
  struct stat st;
  if (dirfd < 0 || fstat(dirfd, &st) != 0) {
    int e = errno;
    if (dirfd >= 0) close(dirfd);
    free(h);
    return zo_error_set(ZO_ERR_IO, "checkpoint: cannot open checkpoint root '%s': %s", root,
                        strerror(e));
  }
  pthread_mutex_lock(&g_mu);
  root_ent *r = g_roots;
  const long me = (long)getpid();
  while (r && (r->dev != st.st_dev || r->ino != st.st_ino || r->owner_pid != me))
    r = r->next; /* not a parent's */
  zo_status s = ZO_OK;
  if (r) {
    r->refs++;
    close(dirfd);
  } else if (!(r = calloc(1, sizeof *r))) {
    close(dirfd);
    s = zo_error_set(ZO_ERR_OUT_OF_MEMORY, "checkpoint_lock: out of memory");
  } else if ((s = take(dirfd, root, &r->fd)) != ZO_OK) {
    close(dirfd);
    free(r);
  } else {
    r->dev = st.st_dev, r->ino = st.st_ino, r->dirfd = dirfd, r->refs = 1, r->owner_pid = me;
    snprintf(r->root, sizeof r->root, "%s", root);
    pthread_mutex_init(&r->save_mu, NULL);
    r->next = g_roots;
    g_roots = r;
  }
  pthread_mutex_unlock(&g_mu);
  if (s != ZO_OK) {
    free(h);
    return s;
  }
  h->ent = r;
  *lock = h;
  return ZO_OK;
}

void zo_checkpoint_unlock(zo_checkpoint_lock_t *lock) {
  if (!lock) return;
  root_ent *r = lock->ent;
  free(lock);
  if (r->owner_pid != (long)getpid()) {
    /* A fork()ed child's copy of its parent's handle: the file and its flock are the parent's (see the top). The
     * entry stays in the child's list (a copy, freed with the child) and g_mu is not taken: another thread of the
     * parent may have held it at the fork. */
    return;
  }
  pthread_mutex_lock(
      &g_mu); /* held through let_go: another thread of ours must not find the file still locked */
  if (--r->refs == 0) {
    for (root_ent **p = &g_roots; *p; p = &(*p)->next)
      if (*p == r) {
        *p = r->next;
        break;
      }
    let_go(r);
  }
  pthread_mutex_unlock(&g_mu);
}

zo_status zo_ckpt_save_begin(const char *root, zo_checkpoint_lock_t **lock) {
  ZO_CHECK(zo_checkpoint_lock(root, lock));
  pthread_mutex_lock(&(*lock)->ent->save_mu);
  return ZO_OK;
}

void zo_ckpt_save_end(zo_checkpoint_lock_t *lock) {
  if (!lock) return;
  pthread_mutex_unlock(&lock->ent->save_mu);
  zo_checkpoint_unlock(lock);
}
