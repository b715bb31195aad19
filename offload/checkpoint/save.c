/*
 * checkpoint/save.c - zo_engine_save(): the engine's master weights, Adam state
 * (any tier), step and loss scaler in a crash-safe directory per step, with
 * a JSON manifest (jansson) and CRC32C per tensor (ISA-L, through
 * zo_swap_crc32c), and the file helpers checkpoint/load.c shares. Not the
 * load (checkpoint/load.c), not the safetensors export (safetensors.c) and
 * not the optimizer: it only moves bytes the engine already holds.
 */
#include "zoffload/checkpoint.h"

#include <dirent.h>
#include <signal.h>
#include <stdarg.h>
#include <math.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint_internal.h"
#include "engine_internal.h"

#ifndef ZO_VERSION_STRING
#define ZO_VERSION_STRING "unknown"
#endif

const char *const ck_kind[ST_KINDS] = {"master", "exp_avg", "exp_avg_sq"};

/* ------------------------------------------------------------------ */
/* shapes */

zo_status zo_engine_set_param_shape(zo_param_t *p, int ndim, const int64_t *dims) {
  if (!p || !dims || ndim < 1 || ndim > ZO_PARAM_MAX_DIMS)
    return zo_error_set(ZO_ERR_INVALID_ARG,
                        "set_param_shape: NULL argument or ndim %d not in 1..%d", ndim,
                        ZO_PARAM_MAX_DIMS);
  uint64_t prod = 1;
  for (int i = 0; i < ndim; i++) {
    if (dims[i] < 1 || __builtin_mul_overflow(prod, (uint64_t)dims[i], &prod))
      return zo_error_set(ZO_ERR_INVALID_ARG, "set_param_shape '%s': dimension %d is %" PRId64,
                          p->name, i, dims[i]);
  }
  if (prod != p->n)
    return zo_error_set(ZO_ERR_INVALID_ARG,
                        "set_param_shape '%s': the shape holds %" PRIu64
                        " elements, the tensor %zu",
                        p->name, prod, p->n);
  p->ndim = ndim;
  memcpy(p->dims, dims, (size_t)ndim * sizeof *dims);
  return ZO_OK;
}

/* ------------------------------------------------------------------ */
/* file helpers: every error names the file */

static zo_status sys_err(zo_status st, const char *what, const char *path) {
  return zo_error_set(st, "checkpoint: %s '%s': %s", what, path, strerror(errno));
}

/* @out = "@a/@b" (@b may hold a printf-style suffix already formatted); errors when it does not fit */
zo_status ck_join(char *out, size_t cap, const char *a, const char *b) {
  int n = snprintf(out, cap, "%s/%s", a, b);
  if (n < 0 || (size_t)n >= cap)
    return zo_error_set(ZO_ERR_INVALID_ARG, "checkpoint: path '%s/%s' is too long", a, b);
  return ZO_OK;
}

/* write all of buf at offset; ENOSPC and short writes named with the offset */
static zo_status pwrite_all(int fd, const void *buf, size_t n, uint64_t off, const char *path) {
  size_t done;
  const int rc = zo_pwrite_all(fd, buf, n, off, &done);
  if (rc == 0) return ZO_OK;
  if (rc > 0) errno = EIO;
  return zo_error_set(ZO_ERR_IO, "checkpoint: writing '%s' at offset %" PRIu64 " (%zu bytes): %s",
                      path, off + done, n - done, strerror(errno));
}

zo_status ck_pread_all(int fd, void *buf, size_t n, uint64_t off, const char *path) {
  size_t done;
  const int rc = zo_pread_all(fd, buf, n, off, &done);
  if (rc == 0) return ZO_OK;
  return zo_error_set(ZO_ERR_IO, "checkpoint: reading '%s' at offset %" PRIu64 " (%zu bytes): %s",
                      path, off + done, n - done,
                      rc > 0 ? "unexpected end of file" : strerror(errno));
}

static zo_status fsync_path(const char *path, int dir) {
  int fd = open(path, (dir ? O_DIRECTORY : 0) | O_RDONLY | O_CLOEXEC);
  if (fd < 0) return sys_err(ZO_ERR_SYSTEM, "cannot open", path);
  int r = fsync(fd);
  int err = errno;
  close(fd);
  errno = err;
  return r ? sys_err(ZO_ERR_IO, "fsync of", path) : ZO_OK;
}

/* A new file in this save's own temporary directory: O_EXCL|O_NOFOLLOW, so nothing that exists is opened. */
static int create_new(const char *path) {
  return open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
}

static int format_file_name(const char *n);

/* Write @n bytes as a whole new file (create_new) and fsync it; ck_fault(@half) with half of them written. */
static zo_status write_bytes(const char *path, const void *buf, size_t n, const char *half) {
  int fd = create_new(path);
  if (fd < 0) return sys_err(ZO_ERR_IO, "cannot create", path);
  zo_status st = pwrite_all(fd, buf, n / 2, 0, path);
  if (st == ZO_OK) ck_fault(half);
  if (st == ZO_OK) st = pwrite_all(fd, (const char *)buf + n / 2, n - n / 2, n / 2, path);
  if (st == ZO_OK && fsync(fd)) st = sys_err(ZO_ERR_IO, "fsync of", path);
  close(fd);
  return st;
}

static zo_status write_file(const char *path, const char *text) {
  return write_bytes(path, text, strlen(text), "manifest-half");
}

void ck_fault(const char *stage) {
  const char *at = getenv("ZO_CKPT_KILL_AT");
  if (at && !strcmp(at, stage)) {
    fprintf(stderr, "zoffload: ZO_CKPT_KILL_AT=%s: killing this process (pid %ld) mid-save\n",
            stage, (long)getpid());
    kill(getpid(), SIGKILL);
  }
}

int ck_file_name_ok(const char *n) {
  size_t len = strlen(n);
  if (len < 1 || len > 64 ||
      !((n[0] >= 'a' && n[0] <= 'z') || (n[0] >= 'A' && n[0] <= 'Z') ||
        (n[0] >= '0' && n[0] <= '9')))
    return 0;
  for (size_t i = 0; i < len; i++) {
    const char c = n[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
          c == '.' || c == '-'))
      return 0;
  }
  return !format_file_name(n);
}

/* Replace @path (`latest`) with @text crash-safely: a fresh temporary file beside it (zo_tmpfile_open: never one
 * that exists), fsynced, renamed over @path unless @path is there and not a regular file (refused, naming it). */
static zo_status replace_file(const char *path, const char *text) {
  char tmp[PATH_MAX];
  int fd = zo_tmpfile_open(path, tmp, sizeof tmp);
  if (fd < 0)
    return zo_error_set(ZO_ERR_IO, "checkpoint: cannot create a temporary file beside '%s': %s",
                        path, strerror(-fd));
  zo_status st = pwrite_all(fd, text, strlen(text), 0, tmp);
  if (st == ZO_OK && fsync(fd)) st = sys_err(ZO_ERR_IO, "fsync of", tmp);
  close(fd);
  mode_t found = 0;
  int r = st == ZO_OK ? zo_tmpfile_place(tmp, path, &found) : 0;
  if (st == ZO_OK && r > 0)
    st = zo_error_set(ZO_ERR_IO, "checkpoint: '%s' is %s, not a regular file: not replacing it",
                      path, zo_file_kind(found));
  else if (st == ZO_OK && r < 0)
    st = zo_error_set(ZO_ERR_IO, "checkpoint: cannot rename '%s' to '%s': %s", tmp, path,
                      strerror(-r));
  if (st != ZO_OK) unlink(tmp);
  return st;
}

/* Open @path to read without following a symbolic link in its last component and without blocking (a FIFO or a
 * device in place of a checkpoint file would block or never end); refuse anything but a regular file, naming it.
 * *@size (may be NULL) receives its size. The descriptor is blocking again on return. */
zo_status ck_open_regular(const char *path, int *fd_out, uint64_t *size) {
  *fd_out = -1;
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0 && errno == ELOOP)
    return zo_error_set(
        ZO_ERR_IO, "checkpoint: '%s' is a symbolic link: a checkpoint holds regular files only",
        path);
  if (fd < 0) return sys_err(ZO_ERR_IO, "cannot open", path);
  struct stat sb;
  if (fstat(fd, &sb)) {
    zo_status st = sys_err(ZO_ERR_IO, "cannot stat", path);
    close(fd);
    return st;
  }
  if (!S_ISREG(sb.st_mode)) {
    close(fd);
    return zo_error_set(
        ZO_ERR_IO,
        "checkpoint: '%s' is not a regular file (%s): a checkpoint holds regular files only", path,
        S_ISFIFO(sb.st_mode)                         ? "a FIFO"
        : S_ISDIR(sb.st_mode)                        ? "a directory"
        : S_ISCHR(sb.st_mode) || S_ISBLK(sb.st_mode) ? "a device"
        : S_ISSOCK(sb.st_mode)                       ? "a socket"
                                                     : "not a plain file");
  }
  int fl = fcntl(fd, F_GETFL);
  if (fl >= 0) (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  if (size) *size = (uint64_t)sb.st_size;
  *fd_out = fd;
  return ZO_OK;
}

/* The whole of a small regular file (open_regular), at most @max bytes (else an error naming the file and the
 * limit), NUL-terminated in *@text (malloc'd), its length in *@n. */
zo_status ck_read_small(const char *path, size_t max, char **text, size_t *n) {
  *text = NULL, *n = 0;
  int fd;
  uint64_t size;
  ZO_CHECK(ck_open_regular(path, &fd, &size));
  if (size > max) {
    close(fd);
    return zo_error_set(ZO_ERR_CORRUPT,
                        "checkpoint: '%s' is %" PRIu64
                        " bytes, more than the %zu this file may hold",
                        path, size, max);
  }
  char *b = malloc((size_t)size + 1);
  if (!b) {
    close(fd);
    return zo_error_set(ZO_ERR_OUT_OF_MEMORY,
                        "checkpoint: reading '%s' (%" PRIu64 " bytes): out of memory", path, size);
  }
  zo_status st = ck_pread_all(fd, b, (size_t)size, 0, path);
  close(fd);
  if (st != ZO_OK) {
    free(b);
    return st;
  }
  b[size] = 0;
  *text = b, *n = (size_t)size;
  return ZO_OK;
}

/* "step-" and at least 12 decimal digits (zo_engine_save's "step-%012lld"), the rest of the name from @end on;
 * the step in *@step. Returns 1 when @name starts so. */
static int parse_step_name(const char *name, int64_t *step, const char **end) {
  if (strncmp(name, "step-", 5)) return 0;
  const char *d = name + 5;
  int64_t v = 0;
  int nd = 0;
  for (; *d >= '0' && *d <= '9'; d++, nd++)
    if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, *d - '0', &v)) return 0;
  if (nd < 12) return 0;
  *step = v, *end = d;
  return 1;
}

/* "rankNNNNN.bin", "manifest.json" or "manifest-rankNNNNN.json": the only files zo_engine_save() writes */
static int format_file_name(const char *n) {
  if (!strcmp(n, "manifest.json")) return 1;
  const char *r = !strncmp(n, "rank", 4) ? n + 4 : !strncmp(n, "manifest-rank", 13) ? n + 13 : NULL;
  if (!r) return 0;
  for (int i = 0; i < 5; i++)
    if (r[i] < '0' || r[i] > '9') return 0;
  return !strcmp(r + 5, n[0] == 'r' ? ".bin" : ".json");
}

/* What a checkpoint directory @dir may hold besides the format's own files: the caller's files its manifest.json
 * lists under "files" (zo_save_opts.files), as an object name -> null; NULL when there is no readable manifest or
 * it lists none. *@has_manifest: dir/manifest.json is a regular file. */
static json_t *listed_files(const char *dir, int *has_manifest) {
  char f[PATH_MAX], *text = NULL;
  size_t n = 0;
  struct stat sb;
  *has_manifest = ck_join(f, sizeof f, dir, "manifest.json") == ZO_OK && lstat(f, &sb) == 0 &&
                  S_ISREG(sb.st_mode);
  if (!*has_manifest || ck_read_small(f, CKPT_MANIFEST_MAX, &text, &n) != ZO_OK) return NULL;
  json_t *m = json_loadb(text, n, 0, NULL), *out = NULL;
  free(text);
  json_t *files = json_object_get(m, "files");
  for (size_t i = 0; i < json_array_size(files); i++) {
    const char *name = json_string_value(json_object_get(json_array_get(files, i), "name"));
    if (!name || !ck_file_name_ok(name) || (!out && !(out = json_object()))) continue;
    json_object_set_new(out, name, json_null());
  }
  json_decref(m);
  return out;
}

/* Whether a file named @n in a checkpoint directory is one a save wrote: the format's own, one @listed (the
 * manifest's "files"), or, beside a manifest, the client state files the Python front wrote into a checkpoint
 * directory after the save before "files" existed. */
static int file_ours(const char *n, json_t *listed, int has_manifest) {
  return format_file_name(n) || (listed && json_object_get(listed, n)) ||
         (has_manifest &&
          (!strcmp(n, "client_state.safetensors") || !strcmp(n, "client_state.pt")));
}

/* Whether @path is a directory this format wrote: a real directory (not a link) holding only regular files a save
 * wrote (file_ours), and manifest.json among them unless @partial (a killed save's temporary directory).
 * Else -1 with the reason in @why (escaped: names on disk are untrusted). */
static int ours(const char *path, int partial, char *why, size_t cap) {
  struct stat sb;
  if (lstat(path, &sb) || !S_ISDIR(sb.st_mode)) {
    snprintf(why, cap, "not a directory");
    return -1;
  }
  DIR *d = opendir(path);
  if (!d) {
    snprintf(why, cap, "cannot list it: %s", strerror(errno));
    return -1;
  }
  int has_manifest, rc = 0;
  json_t *listed = listed_files(path, &has_manifest);
  struct dirent *de;
  char f[PATH_MAX], esc[96];
  while (rc == 0 && (de = readdir(d))) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
    if (!file_ours(de->d_name, listed, has_manifest) ||
        ck_join(f, sizeof f, path, de->d_name) != ZO_OK || lstat(f, &sb) || !S_ISREG(sb.st_mode)) {
      snprintf(why, cap, "it holds '%s', which this format does not write",
               zo_escape(esc, sizeof esc, de->d_name, strlen(de->d_name)));
      rc = -1;
    }
  }
  closedir(d);
  json_decref(listed);
  if (rc == 0 && !partial && !has_manifest) {
    snprintf(why, cap, "it holds no manifest.json");
    rc = -1;
  }
  return rc;
}

/* Remove a directory ours() accepted: its files, then itself. */
static int remove_ours(const char *path) {
  int has_manifest;
  json_t *listed = listed_files(path, &has_manifest); /* before manifest.json goes */
  DIR *d = opendir(path);
  if (!d) {
    json_decref(listed);
    return -1;
  }
  struct dirent *de;
  char f[PATH_MAX];
  int rc = 0;
  while ((de = readdir(d)))
    if (file_ours(de->d_name, listed, has_manifest) &&
        ck_join(f, sizeof f, path, de->d_name) == ZO_OK && unlink(f))
      rc = -1;
  closedir(d);
  json_decref(listed);
  return rmdir(path) || rc ? -1 : 0;
}

/* CRC32C of [off, off + n) of an open file, read in CKPT_CHUNK pieces into @buf */
zo_status ck_file_crc(int fd, uint64_t off, uint64_t n, void *buf, const char *path,
                      uint32_t *crc) {
  uint32_t c = 0;
  while (n > 0) {
    size_t k = n < CKPT_CHUNK ? (size_t)n : CKPT_CHUNK;
    ZO_CHECK(ck_pread_all(fd, buf, k, off, path));
    c = zo_swap_crc32c(c, buf, k);
    off += k, n -= k;
  }
  *crc = c;
  return ZO_OK;
}

/* ------------------------------------------------------------------ */
/* save */

/* Where one kind of one tensor goes in the rank file. */
typedef struct run {
  uint64_t off, nbytes;
  uint32_t crc;
} run;

uint32_t ck_config_hash(const zo_config_t *cfg) {
  size_t n = zo_config_describe(cfg, NULL, 0);
  char *s = malloc(n + 1);
  if (!s) return 0;
  zo_config_describe(cfg, s, n + 1);
  uint32_t h = zo_swap_crc32c(0, s, n);
  free(s);
  return h;
}

/* Copy @n bytes of @src_fd at @src_off to @dst_fd at @dst_off, in the kernel (copy_file_range), falling back
 * to pread/pwrite through @buf where the file systems do not support it (EXDEV on older kernels, EINVAL). */
static zo_status copy_range(int src_fd, uint64_t src_off, const char *src, int dst_fd,
                            uint64_t dst_off, const char *dst, uint64_t n, void *buf) {
  loff_t in = (loff_t)src_off, out = (loff_t)dst_off;
  while (n > 0) {
    ssize_t c = copy_file_range(src_fd, &in, dst_fd, &out, n, 0);
    if (c < 0 && errno == EINTR) continue;
    if (c < 0 && (errno == EXDEV || errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP))
      break;
    if (c < 0)
      return zo_error_set(ZO_ERR_IO,
                          "checkpoint: copying '%s' at offset %lld to '%s' at offset %lld: %s", src,
                          (long long)in, dst, (long long)out, strerror(errno));
    if (c == 0)
      return zo_error_set(ZO_ERR_IO,
                          "checkpoint: copying '%s' at offset %lld: unexpected end of file", src,
                          (long long)in);
    n -= (uint64_t)c;
  }
  while (n > 0) { /* fallback */
    size_t k = n < CKPT_CHUNK ? (size_t)n : CKPT_CHUNK;
    ZO_CHECK(ck_pread_all(src_fd, buf, k, (uint64_t)in, src));
    ZO_CHECK(pwrite_all(dst_fd, buf, k, (uint64_t)out, dst));
    in += (loff_t)k, out += (loff_t)k, n -= k;
  }
  return ZO_OK;
}

/* Copy @n bytes of swap file @f from its (logical) offset @off to @dst_fd at @dst_off: one copy_range per
 * stretch that is contiguous in one of its part files (@sfd, one descriptor per part; striped files). */
static zo_status copy_swap_range(zo_swap_file_t *f, const int *sfd, uint64_t off, int dst_fd,
                                 uint64_t dst_off, const char *dst, uint64_t n, void *buf) {
  while (n > 0) {
    unsigned part;
    uint64_t poff, contig;
    ZO_CHECK(zo_swap_file_locate(f, off, &part, &poff, &contig));
    uint64_t k = contig < n ? contig : n;
    ZO_CHECK(
        copy_range(sfd[part], poff, zo_swap_file_part_path(f, part), dst_fd, dst_off, dst, k, buf));
    off += k, dst_off += k, n -= k;
  }
  return ZO_OK;
}

/* Write every tensor's three kinds of state into @path; fill runs[i * ST_KINDS + k]. */
static zo_status write_rank_file(zo_engine_t *e, const char *path, run *runs, void *buf) {
  int fd = create_new(path);
  if (fd < 0) return sys_err(ZO_ERR_IO, "cannot create", path);
  int sfd[ST_KINDS][ZO_SWAP_MAX_PATHS];
  for (int k = 0; k < ST_KINDS; k++)
    for (int j = 0; j < ZO_SWAP_MAX_PATHS; j++) sfd[k][j] = -1;
  zo_status st = ZO_OK;
  if (e->tier == ZO_OFFLOAD_NVME) {
    /* no files: every sub-group resident; a striped file has one part per directory */
    for (int k = 0; k < ST_KINDS && st == ZO_OK && eng_nv_file(e->nv, k); k++) {
      zo_swap_file_t *f = eng_nv_file(e->nv, k);
      for (unsigned j = 0; j < zo_swap_file_n_parts(f) && st == ZO_OK; j++) {
        const char *sp = zo_swap_file_part_path(f, j);
        sfd[k][j] =
            open(sp, O_RDONLY | O_CLOEXEC); /* buffered: O_DIRECT writes already reached the file */
        if (sfd[k][j] < 0) st = sys_err(ZO_ERR_IO, "cannot open swap file", sp);
      }
    }
  }
  uint64_t off = 0;
  for (int i = 0; i < e->n_params && st == ZO_OK; i++) {
    zo_param_t *p = e->params[i];
    for (int k = 0; k < ST_KINDS && st == ZO_OK; k++) {
      run *r = &runs[i * ST_KINDS + k];
      r->off = off;
      r->nbytes = (uint64_t)p->shard_n * e->esz[k];
      if (e->tier == ZO_OFFLOAD_NVME) {
        /* the streamed part from its file, the resident part (zoffload.optimizer_max_in_cpu) from host memory */
        for (size_t o = 0, n; o < p->shard_n && st == ZO_OK; o += n) {
          void *res[SL_KINDS];
          n = eng_nv_span(e, p, o, p->shard_n - o, res);
          st = res[k] ? pwrite_all(fd, res[k], n * e->esz[k], off + o * e->esz[k], path)
                      : copy_swap_range(eng_nv_file(e->nv, k), sfd[k], (p->file_el + o) * e->esz[k],
                                        fd, off + o * e->esz[k], path, n * e->esz[k], buf);
        }
        if (st == ZO_OK) st = ck_file_crc(fd, off, r->nbytes, buf, path, &r->crc);
      } else if (eng_device_adam(e)) { /* device memory: through a host copy */
        void *h = malloc(r->nbytes ? r->nbytes : 1);
        st = h ? eng_dev_copy(e, h, p->state[k], r->nbytes, ZO_COPY_D2H)
               : zo_error_set(ZO_ERR_OUT_OF_MEMORY, "checkpoint: out of host memory for '%s'",
                              p->name);
        if (st == ZO_OK)
          r->crc = zo_swap_crc32c(0, h, r->nbytes), st = pwrite_all(fd, h, r->nbytes, off, path);
        free(h);
      } else {
        r->crc = zo_swap_crc32c(0, p->state[k], r->nbytes);
        st = pwrite_all(fd, p->state[k], r->nbytes, off, path);
      }
      off = zo_round_up(off + r->nbytes, CKPT_ALIGN);
    }
  }
  if (st == ZO_OK && fsync(fd)) st = sys_err(ZO_ERR_IO, "fsync of", path);
  for (int k = 0; k < ST_KINDS; k++)
    for (int j = 0; j < ZO_SWAP_MAX_PATHS; j++)
      if (sfd[k][j] >= 0) close(sfd[k][j]);
  close(fd);
  return st;
}

/* Rank 0's manifest lists the caller's files (zo_save_opts.files): name, size, CRC32C; an empty list when none. */
static json_t *files_json(const zo_save_opts *opts) {
  json_t *files = json_array();
  for (int i = 0; opts && i < opts->n_files; i++) {
    const zo_save_file *f = &opts->files[i];
    char crc[16];
    snprintf(crc, sizeof crc, "%08x", zo_swap_crc32c(0, f->data, f->nbytes));
    json_array_append_new(files, json_pack("{s:s, s:I, s:s}", "name", f->name, "nbytes",
                                           (json_int_t)f->nbytes, "crc32c", crc));
  }
  return files;
}

static json_t *manifest_json(zo_engine_t *e, int64_t tag, const run *runs, const char *rank_file,
                             json_t *app, const zo_save_opts *opts) {
  json_t *m = json_object(), *tensors = json_array();
  json_object_set_new(m, "format", json_string(CKPT_FORMAT));
  json_object_set_new(m, "format_version", json_integer(CKPT_FORMAT_VERSION));
  json_object_set_new(m, "zoffload_version", json_string(ZO_VERSION_STRING));
  json_object_set_new(m, "world_size", json_integer(e->world));
  json_object_set_new(m, "rank_files", json_pack("[s]", rank_file));
  json_object_set_new(m, "tag", json_integer(tag));
  json_object_set_new(m, "step", json_integer(e->step));
  json_object_set_new(m, "loss_scaler",
                      json_pack("{s:f, s:I, s:I, s:i}", "loss_scale", e->loss_scale, "iter",
                                (json_int_t)e->ls_iter, "last_overflow",
                                (json_int_t)e->ls_last_overflow, "hysteresis", e->ls_hysteresis));
  char h[32];
  snprintf(h, sizeof h, "crc32c:%08x", ck_config_hash(&e->cfg));
  json_object_set_new(m, "config_hash", json_string(h));
  json_object_set_new(m, "working_dtype", json_string(zo_dtype_name(e->wdtype)));
  json_object_set_new(m, "state_dtype", json_string(zo_dtype_name(e->sdtype)));
  for (int i = 0; i < e->n_params; i++) {
    const zo_param_t *p = e->params[i];
    json_t *shape = json_array();
    if (p->ndim == 0) json_array_append_new(shape, json_integer((json_int_t)p->n));
    for (int d = 0; d < p->ndim; d++) json_array_append_new(shape, json_integer(p->dims[d]));
    json_t *t = json_pack("{s:s, s:o, s:I, s:I, s:I, s:s}", "name", p->name, "shape", shape,
                          "numel", (json_int_t)p->n, "shard_offset", (json_int_t)p->shard_off,
                          "shard_numel", (json_int_t)p->shard_n, "file", rank_file);
    for (int k = 0; k < ST_KINDS; k++) {
      const run *r = &runs[i * ST_KINDS + k];
      char crc[16];
      snprintf(crc, sizeof crc, "%08x", r->crc);
      json_object_set_new(t, ck_kind[k],
                          json_pack("{s:s, s:I, s:I, s:s}", "dtype",
                                    zo_dtype_name(k == ST_MASTER ? ZO_DTYPE_F32 : e->sdtype),
                                    "offset", (json_int_t)r->off, "nbytes", (json_int_t)r->nbytes,
                                    "crc32c", crc));
    }
    json_array_append_new(tensors, t);
  }
  json_object_set_new(m, "tensors", tensors);
  if (app) json_object_set(m, "app_state", app);
  if (e->rank == 0) json_object_set_new(m, "files", files_json(opts));
  return m;
}

/* A step directory of this format under @root: its name and step. */
typedef struct ckpt_ent {
  int64_t step;
  char *name;
} ckpt_ent;

static int ent_newer_first(const void *x, const void *y) {
  const ckpt_ent *a = x, *b = y;
  return a->step < b->step ? 1 : a->step > b->step ? -1 : strcmp(b->name, a->name);
}

/* Names exactly "step-" + 12 or more digits under @root (no other suffix), newest step first; returns the count
 * (-1 when @root cannot be listed), *ents malloc'd (free each name). What is inside is not looked at here. */
static int list_checkpoints(const char *root, ckpt_ent **ents) {
  *ents = NULL;
  DIR *d = opendir(root);
  if (!d) return -1;
  int n = 0, cap = 0;
  struct dirent *de;
  while ((de = readdir(d))) {
    int64_t step;
    const char *end;
    if (!parse_step_name(de->d_name, &step, &end) || *end) continue;
    if (n == cap) {
      cap = cap ? 2 * cap : 16;
      ckpt_ent *nn = realloc(*ents, (size_t)cap * sizeof *nn);
      if (!nn) break;
      *ents = nn;
    }
    if (!((*ents)[n].name = strdup(de->d_name))) break;
    (*ents)[n++].step = step;
  }
  closedir(d);
  if (n > 1) qsort(*ents, (size_t)n, sizeof **ents, ent_newer_first);
  return n;
}

/* keep_last: of the step directories older than this save's @tag, keep the newest @keep_last - 1 (this save is
 * the other one) and remove the rest, one log line each. Never one newer than @tag (another run's, or a resumed
 * run's future), and never one holding anything this format does not write: that one is named and left alone. */
static void prune_checkpoints(const char *root, int64_t tag, int keep_last,
                              const zo_save_opts *opts) {
  ckpt_ent *ents;
  int n = list_checkpoints(root, &ents), kept = 1;
  char path[PATH_MAX], why[256];
  for (int i = 0; i < n; i++) {
    if (ents[i].step < tag && ck_join(path, sizeof path, root, ents[i].name) == ZO_OK) {
      if (ours(path, 0, why, sizeof why)) {
        if (kept >= keep_last)
          zo_warn("checkpoint: keep_last %d: left '%s' alone: %s", keep_last, path, why);
      } else if (kept < keep_last) {
        kept++;
      } else if (remove_ours(path))
        zo_warn("checkpoint: keep_last %d: could not remove all of '%s': %s", keep_last, path,
                strerror(errno));
      else {
        zo_info("checkpoint: keep_last %d: removed '%s'", keep_last, path);
        if (opts && opts->on_removed) opts->on_removed(path, 0, opts->user);
      }
    }
    free(ents[i].name);
  }
  free(ents);
}

/* Decimal digits from @s to its end (at most 18 of them) into *@v; 1 when @s is only those. */
static int all_digits(const char *s, long long *v) {
  int n = 0;
  *v = 0;
  for (; *s; s++, n++)
    if (*s < '0' || *s > '9' || n >= 18)
      return 0;
    else
      *v = *v * 10 + (*s - '0');
  return n > 0;
}

int ck_dir_name_ok(const char *s, size_t len) {
  int ok = len > 0 && len < 256 && s[0] != '.';
  for (size_t i = 0; i < len && ok; i++) ok = s[i] > 0x20 && s[i] < 0x7f && s[i] != '/';
  return ok;
}

int ck_hex8(const char *s) {
  int ok = s && strlen(s) == 8;
  for (int j = 0; ok && j < 8; j++)
    ok = (s[j] >= '0' && s[j] <= '9') || (s[j] >= 'a' && s[j] <= 'f') ||
         (s[j] >= 'A' && s[j] <= 'F');
  return ok;
}

/* Whether @name is ".tmp-NAME.PID" or ".old-NAME.PID" (@prefix ".tmp-" or ".old-"), as zo_engine_save names them
 * for the checkpoint NAME (step-N or a caller's name); PID into *@pid. */
static int leftover_name(const char *name, const char *prefix, long long *pid) {
  const char *dot = strrchr(name, '.');
  if (strncmp(name, prefix, 5) || !dot || dot < name + 5 ||
      !ck_dir_name_ok(name + 5, (size_t)(dot - name - 5)))
    return 0;
  return all_digits(dot + 1, pid);
}

/* Whether @name is ".latest.PID.N.tmp", replace_file()'s temporary name for `latest`; PID into *@pid. */
static int latest_tmp_name(const char *name, long long *pid) {
  char pid_s[24], n_s[24];
  const char *p = name + 8, *d1, *d2;
  long long n;
  if (strncmp(name, ".latest.", 8) || !(d1 = strchr(p, '.')) || !(d2 = strchr(d1 + 1, '.')) ||
      strcmp(d2, ".tmp") || d1 - p >= (long)sizeof pid_s || d2 - d1 - 1 >= (long)sizeof n_s)
    return 0;
  memcpy(pid_s, p, (size_t)(d1 - p));
  pid_s[d1 - p] = 0;
  memcpy(n_s, d1 + 1, (size_t)(d2 - d1 - 1));
  n_s[d2 - d1 - 1] = 0;
  return all_digits(pid_s, pid) && all_digits(n_s, &n);
}

/* Remove leftovers of a killed save under @root: .tmp-NAME.PID and .old-NAME.PID directories holding only
 * this format's files, and the files .latest.PID.N.tmp (and .latest.tmp, the name before them), where no process
 * runs as PID any more (zo_ckpt_pid_gone: a save of a live process is never touched); each named in a log line and
 * to @opts->on_removed. Anything else is left alone; what is named so but is not this format's, or is of a live
 * process, is named in a warning. The caller holds the root's lock. */
static void remove_leftovers(const char *root, const zo_save_opts *opts) {
  DIR *d = opendir(root);
  if (!d) return;
  struct dirent *de;
  char path[PATH_MAX], why[256];
  struct stat sb;
  while ((de = readdir(d))) {
    long long pid = -1; /* -1: the name carries none (.latest.tmp) */
    const int dir =
        leftover_name(de->d_name, ".tmp-", &pid) || leftover_name(de->d_name, ".old-", &pid);
    const int file =
        !dir && (latest_tmp_name(de->d_name, &pid) || !strcmp(de->d_name, ".latest.tmp"));
    if ((!dir && !file) || ck_join(path, sizeof path, root, de->d_name) != ZO_OK) continue;
    if (pid >= 0 && !zo_ckpt_pid_gone((long)pid)) {
      zo_warn("checkpoint: left '%s' alone: process %lld, which wrote it, is alive", path, pid);
    } else if (dir && ours(path, 1, why, sizeof why)) {
      zo_warn("checkpoint: left '%s' alone: %s", path, why);
    } else if (dir ? remove_ours(path) == 0
                   : lstat(path, &sb) == 0 && S_ISREG(sb.st_mode) && unlink(path) == 0) {
      zo_info("checkpoint: removed '%s', left by an interrupted save", path);
      if (opts && opts->on_removed) opts->on_removed(path, 1, opts->user);
    }
  }
  closedir(d);
}

/* The manifest file of this rank: manifest.json with one rank; with several, manifest-rankNNNNN.json of every rank
 * (and rank 0's copy as manifest.json, which marks the directory as a checkpoint). */
void ck_manifest_name(const zo_engine_t *e, char *out, size_t cap) {
  if (e->world == 1)
    snprintf(out, cap, "manifest.json");
  else
    snprintf(out, cap, "manifest-rank%05d.json", e->rank);
}

/* The arguments of zo_engine_save; *app: opts->app_state parsed (NULL when none), for the caller to release. */
static zo_status save_check(const zo_engine_t *e, const char *root, const zo_save_opts *opts,
                            json_t **app) {
  *app = NULL;
  if (!e || !root || !root[0])
    return zo_error_set(ZO_ERR_INVALID_ARG, "save: NULL engine or empty root");
  if (!e->finalized) return zo_error_set(ZO_ERR_INVALID_USAGE, "save: engine not finalized");
  if (e->n_grads > 0)
    return zo_error_set(ZO_ERR_INVALID_USAGE,
                        "save: %d gradients handed over for a step not taken yet; save between "
                        "zo_engine_step() and the next zo_engine_grad_ready()",
                        e->n_grads);
  if (eng_acc_pending(e->acc) > 0)
    return zo_error_set(
        ZO_ERR_INVALID_USAGE,
        "save: %d tensors hold micro-batch gradients accumulated for a step "
        "not taken yet (zo_engine_grad_accumulate), which a checkpoint does not keep; save between "
        "zo_engine_step() and the next zo_engine_grad_accumulate()",
        eng_acc_pending(e->acc));
  if (opts && opts->name) { /* what resolve_dir() accepts in `latest` */
    size_t len = strlen(opts->name);
    char q[96];
    if (!ck_dir_name_ok(opts->name, len))
      return zo_error_set(ZO_ERR_INVALID_ARG,
                          "save: name \"%s\": a checkpoint name is 1..255 bytes of printable "
                          "ASCII without '/' or space, not starting with '.'",
                          zo_escape(q, sizeof q, opts->name, len));
    if (opts->keep_last > 0)
      return zo_error_set(ZO_ERR_INVALID_ARG,
                          "save: keep_last %d with the name \"%s\": named checkpoints are never "
                          "pruned; keep_last must be 0",
                          opts->keep_last, zo_escape(q, sizeof q, opts->name, len));
  }
  if (opts && (opts->n_files < 0 || opts->n_files > ZO_SAVE_FILES_MAX ||
               (opts->n_files > 0 && !opts->files)))
    return zo_error_set(ZO_ERR_INVALID_ARG, "save: n_files %d: expected 0..%d with files not NULL",
                        opts->n_files, ZO_SAVE_FILES_MAX);
  for (int i = 0; opts && i < opts->n_files; i++) {
    const zo_save_file *f = &opts->files[i];
    char q[96];
    if (!f->name || !ck_file_name_ok(f->name))
      return zo_error_set(
          ZO_ERR_INVALID_ARG,
          "save: files[%d].name \"%s\": a file name is 1..64 bytes of "
          "[A-Za-z0-9_.-] starting with a letter or digit, not manifest*.json or rankNNNNN.bin",
          i, f->name ? zo_escape(q, sizeof q, f->name, strlen(f->name)) : "(NULL)");
    if (!f->data && f->nbytes)
      return zo_error_set(ZO_ERR_INVALID_ARG, "save: files[%d] '%s': NULL data of %zu bytes", i,
                          f->name, f->nbytes);
    for (int j = 0; j < i; j++)
      if (!strcmp(opts->files[j].name, f->name))
        return zo_error_set(ZO_ERR_INVALID_ARG, "save: files[%d] and files[%d] are both named '%s'",
                            j, i, f->name);
  }
  if (opts && opts->app_state) {
    json_error_t je;
    json_t *a = json_loads(opts->app_state, 0, &je);
    if (!a || !json_is_object(a)) {
      json_decref(a);
      return zo_error_set(ZO_ERR_INVALID_ARG, "save: app_state is not a JSON object (%s)",
                          a ? "not an object" : je.text);
    }
    *app = a;
  }
  return ZO_OK;
}

/* Several ranks (a collective call): rank 0 alone makes the root, locks it for the save (*@lock: the caller
 * releases it; refused while another process holds it), checks that `latest` can be replaced, and clears
 * leftovers. */
static zo_status save_root(zo_engine_t *e, const char *root, const zo_save_opts *opts,
                           zo_checkpoint_lock_t **lock) {
  zo_status st0 = ZO_OK;
  *lock = NULL;
  if (e->rank == 0) {
    char latest[PATH_MAX];
    mode_t found = 0;
    st0 = zo_ckpt_save_begin(root, lock);
    if (st0 == ZO_OK && !(opts && opts->no_latest) &&
        (st0 = ck_join(latest, sizeof latest, root, "latest")) == ZO_OK &&
        zo_tmpfile_target_check(latest, &found) > 0)
      st0 = zo_error_set(
          ZO_ERR_IO, "checkpoint: '%s' is %s, not a regular file: not replacing it (nothing saved)",
          latest, zo_file_kind(found));
    if (st0 == ZO_OK) remove_leftovers(root, opts);
  }
  return eng_dp_from_rank0(e, st0, "save: creating the checkpoint root");
}

/* The names and paths of one save under its root. */
typedef struct save_paths {
  char name[256], rank_file[32], mfile[48];
  char tmp[PATH_MAX], final[PATH_MAX], old[PATH_MAX], file[PATH_MAX], latest[PATH_MAX];
} save_paths;

/* Every name of the save of step @tag under @root; the temporary and set-aside directories carry rank 0's pid
 * (a collective call with several ranks). */
static zo_status save_names(zo_engine_t *e, const char *root, int64_t tag, const char *name,
                            save_paths *sp) {
  char tmpn[300], oldn[300];
  if (name)
    snprintf(sp->name, sizeof sp->name, "%s", name); /* save_check: 1..255 bytes */
  else
    snprintf(sp->name, sizeof sp->name, "step-%012" PRId64, tag);
  snprintf(sp->rank_file, sizeof sp->rank_file, "rank%05d.bin", e->rank);
  ck_manifest_name(e, sp->mfile, sizeof sp->mfile);
  double pid = (double)getpid(); /* rank 0's, in every rank's names */
  zo_status st;
  if (e->world > 1 && (st = zo_comm_broadcast(e->comm, &pid, sizeof pid, 0)) != ZO_OK)
    return zo_error_prefix(st, "save: hearing rank 0's temporary directory");
  snprintf(tmpn, sizeof tmpn, ".tmp-%s.%d", sp->name, (int)pid);
  snprintf(oldn, sizeof oldn, ".old-%s.%d", sp->name, (int)pid);
  ZO_CHECK(ck_join(sp->tmp, sizeof sp->tmp, root, tmpn));
  ZO_CHECK(ck_join(sp->final, sizeof sp->final, root, sp->name));
  ZO_CHECK(ck_join(sp->old, sizeof sp->old, root, oldn));
  ZO_CHECK(ck_join(sp->latest, sizeof sp->latest, root, "latest"));
  return ck_join(sp->file, sizeof sp->file, sp->tmp, sp->mfile); /* the longest name inside tmp */
}

/* Every rank: its shard file and its manifest into the temporary directory (rank 0 of several: its manifest as
 * manifest.json too). *m and *text: the manifest, for the caller to release. */
static zo_status save_write_parts(zo_engine_t *e, save_paths *sp, int64_t tag, json_t *app,
                                  const zo_save_opts *opts, run *runs, void *buf, json_t **m,
                                  char **text) {
  ck_join(sp->file, sizeof sp->file, sp->tmp,
          sp->rank_file); /* fits: tmp/mfile, the longest, did */
  ZO_CHECK(write_rank_file(e, sp->file, runs, buf));
  ck_fault("rank-file");
  *m = manifest_json(e, tag, runs, sp->rank_file, app, opts);
  *text = json_dumps(*m, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
  if (!*text) return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "save: cannot format the manifest");
  ZO_CHECK(ck_join(sp->file, sizeof sp->file, sp->tmp, sp->mfile));
  ZO_CHECK(write_file(sp->file, *text));
  if (e->world > 1 && e->rank == 0) {
    ZO_CHECK(ck_join(sp->file, sizeof sp->file, sp->tmp, "manifest.json"));
    ZO_CHECK(write_file(sp->file, *text));
  }
  ck_fault("manifest");
  /* the caller's files after the manifest that lists them: a killed save's directory holds none it does not list */
  for (int i = 0; e->rank == 0 && opts && i < opts->n_files; i++) {
    ZO_CHECK(ck_join(sp->file, sizeof sp->file, sp->tmp, opts->files[i].name));
    ZO_CHECK(write_bytes(sp->file, opts->files[i].data, opts->files[i].nbytes, "file-half"));
  }
  ck_fault("files");
  return ZO_OK;
}

/* Rank 0: the temporary directory into place as the checkpoint's directory, then `latest` onto it, and keep_last
 * applied. A directory of the same name (a reused tag, an earlier run's step, or one a kill left before `latest`
 * moved) is swapped with the new one in one step (renameat2 RENAME_EXCHANGE: the name always holds a whole
 * checkpoint, the old or the new), and the old one, now at the temporary name, is removed once `latest` is durable;
 * a kill before that leaves it as a leftover the next save removes. Where the file system cannot exchange (EINVAL:
 * not ext4, XFS, btrfs, tmpfs...), the old one is renamed aside first, which leaves the name empty for a moment.
 * Until the switch, a failure removes the temporary directory. */
static zo_status save_place(const save_paths *sp, const char *root, int64_t tag, int keep_last,
                            const zo_save_opts *opts) {
  zo_status st;
  int had_old = 0, exchanged = 0;
  struct stat fsb;
  char why[256];
  if ((st = fsync_path(sp->tmp, 1)) != ZO_OK) goto fail;
  ck_fault("synced");
  if (lstat(sp->final, &fsb) == 0) {
    if (ours(sp->final, 0, why, sizeof why)) {
      st = zo_error_set(
          ZO_ERR_IO,
          "checkpoint: '%s' exists and is not a checkpoint this format wrote (%s): not "
          "replacing it",
          sp->final, why);
      goto fail;
    }
    if (renameat2(AT_FDCWD, sp->tmp, AT_FDCWD, sp->final, RENAME_EXCHANGE) == 0) {
      exchanged = 1;
    } else if (errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP) {
      st = sys_err(ZO_ERR_IO, "cannot exchange with the new checkpoint", sp->final);
      goto fail;
    } else if (rename(sp->final, sp->old) == 0) {
      had_old = 1;
    } else if (errno != ENOENT) {
      st = sys_err(ZO_ERR_IO, "cannot move aside", sp->final);
      goto fail;
    }
  }
  if (!exchanged && rename(sp->tmp, sp->final)) {
    st = sys_err(ZO_ERR_IO, "cannot rename into place", sp->tmp);
    if (had_old) rename(sp->old, sp->final);
    goto fail;
  }
  ck_fault("placed");
  ZO_CHECK(fsync_path(root, 1));
  ck_fault("root-synced");
  if (!(opts && opts->no_latest)) {
    char line[300];
    snprintf(line, sizeof line, "%s\n", sp->name);
    ZO_CHECK(replace_file(sp->latest, line));
    ZO_CHECK(fsync_path(root, 1));
  }
  ck_fault("latest");
  if ((exchanged && remove_ours(sp->tmp)) || (had_old && remove_ours(sp->old)))
    zo_warn("checkpoint: could not remove '%s', the replaced copy of %s",
            exchanged ? sp->tmp : sp->old, sp->name);
  ck_fault("old-removed");
  if (keep_last > 0) prune_checkpoints(root, tag, keep_last, opts);
  return ZO_OK;
fail:
  remove_ours(sp->tmp); /* holds only what this save wrote */
  return st;
}

/* This save's temporary directory: made new (mkdir), never one that exists. Something at its name is not a leftover
 * remove_leftovers() could take (this process's own name: another kind of file, or not this format's): named. */
static zo_status make_tmp_dir(const char *tmp) {
  if (mkdir(tmp, 0755) == 0) return ZO_OK;
  struct stat sb;
  if (errno == EEXIST && lstat(tmp, &sb) == 0)
    return zo_error_set(
        ZO_ERR_IO,
        "checkpoint: cannot create this save's temporary directory '%s': it exists and "
        "is %s this save did not make; not writing into it (move it away)",
        tmp, zo_file_kind(sb.st_mode));
  return sys_err(ZO_ERR_IO, "cannot create", tmp);
}

zo_status zo_engine_save(zo_engine_t *e, const char *root, const zo_save_opts *opts,
                         char *saved_dir, size_t cap) {
  ENG_CHECK_OWNER(e, "save");
  json_t *app;
  ZO_CHECK(save_check(e, root, opts, &app));
  const int64_t tag = opts && opts->tag >= 0 ? opts->tag : e->step;
  const int keep_last = opts && opts->keep_last > 0 ? opts->keep_last : 0;
  save_paths sp;
  zo_checkpoint_lock_t *lock = NULL; /* rank 0: the root's, for this save */
  zo_status st = zo_engine_synchronize(e);
  if (st == ZO_OK && e->tier == ZO_OFFLOAD_NVME)
    st = eng_nv_quiesce(e); /* every state write-back on disk */
  /* Several ranks (a collective call): rank 0 alone makes and locks the root and clears leftovers, and names the
   * temporary directory every rank writes its part into. */
  if (st == ZO_OK) st = save_root(e, root, opts, &lock);
  if (st == ZO_OK) st = save_names(e, root, tag, opts ? opts->name : NULL, &sp);
  if (st == ZO_OK) ck_fault("locked");
  if (st != ZO_OK) {
    zo_ckpt_save_end(lock);
    json_decref(app);
    return st;
  }

  run *runs = calloc((size_t)e->n_params * ST_KINDS, sizeof *runs);
  void *buf = malloc(CKPT_CHUNK);
  char *text = NULL;
  json_t *m = NULL;
  int placing = 0; /* rank 0 of several: past the agreement, every other rank waits for its word */
  /* Every rank makes every collective call below whatever happens to it, so none waits for one never made. */
  if (!runs || !buf)
    st = zo_error_set(ZO_ERR_OUT_OF_MEMORY, "save: out of memory (%zu bytes)", CKPT_CHUNK);
  if (st == ZO_OK && e->rank == 0) st = make_tmp_dir(sp.tmp);
  if (st == ZO_OK) ck_fault("tmp-made");
  if (e->world > 1) { /* everyone hears of rank 0's directory */
    zo_status s0 =
        eng_dp_from_rank0(e, e->rank == 0 ? st : ZO_OK, "save: creating the temporary directory");
    if (st == ZO_OK) st = s0;
  }
  if (st == ZO_OK) st = save_write_parts(e, &sp, tag, app, opts, runs, buf, &m, &text);
  if ((st = eng_dp_agree(e, st, "save: writing the ranks' parts")) != ZO_OK) {
    if (e->rank == 0) remove_ours(sp.tmp); /* holds only what this save wrote */
    goto out;
  }
  if (e->rank != 0) { /* rank 0 puts the directory into place and says how that went */
    st = eng_dp_from_rank0(e, ZO_OK, "save: putting the checkpoint into place");
  } else {
    placing = e->world > 1;
    st = save_place(&sp, root, tag, keep_last, opts);
  }
  if (st == ZO_OK && saved_dir && cap) snprintf(saved_dir, cap, "%s", sp.final);
out:
  if (placing)
    (void)eng_dp_from_rank0(e, st,
                            "save: putting the checkpoint into place"); /* the others wait for it */
  zo_ckpt_save_end(lock);
  free(text);
  json_decref(m);
  json_decref(app);
  free(runs);
  free(buf);
  return st;
}
