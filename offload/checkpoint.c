/*
 * checkpoint.c - zo_engine_save() / zo_engine_load(): the engine's master
 * weights, Adam state (any tier), step and loss scaler in a crash-safe
 * directory per step, with a JSON manifest (jansson) and CRC32C per tensor
 * (ISA-L, through zo_swap_crc32c). Not the safetensors export (safetensors.c)
 * and not the optimizer: it only moves bytes the engine already holds.
 */
#include "zoffload/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine_internal.h"

#define CKPT_FORMAT "zoffload-checkpoint"
#define CKPT_FORMAT_VERSION 1
#define CKPT_ALIGN 4096
#define CKPT_CHUNK ((size_t)8 << 20) /* bytes per read while checksumming */
#ifndef ZO_VERSION_STRING
#define ZO_VERSION_STRING "unknown"
#endif

static const char *const k_kind[ST_KINDS] = {"master", "exp_avg", "exp_avg_sq"};

/* ------------------------------------------------------------------ */
/* shapes */

zo_status zo_engine_set_param_shape(zo_param_t *p, int ndim, const int64_t *dims) {
  if (!p || !dims || ndim < 1 || ndim > ZO_PARAM_MAX_DIMS)
    return zo_error_set(ZO_ERR_INVALID_ARG, "set_param_shape: NULL argument or ndim %d not in 1..%d", ndim,
                        ZO_PARAM_MAX_DIMS);
  uint64_t prod = 1;
  for (int i = 0; i < ndim; i++) {
    if (dims[i] < 1 || __builtin_mul_overflow(prod, (uint64_t)dims[i], &prod))
      return zo_error_set(ZO_ERR_INVALID_ARG, "set_param_shape '%s': dimension %d is %" PRId64, p->name, i, dims[i]);
  }
  if (prod != p->n)
    return zo_error_set(ZO_ERR_INVALID_ARG, "set_param_shape '%s': the shape holds %" PRIu64 " elements, the tensor %zu",
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
static zo_status join(char *out, size_t cap, const char *a, const char *b) {
  int n = snprintf(out, cap, "%s/%s", a, b);
  if (n < 0 || (size_t)n >= cap) return zo_error_set(ZO_ERR_INVALID_ARG, "checkpoint: path '%s/%s' is too long", a, b);
  return ZO_OK;
}

/* write all of buf at offset; ENOSPC and short writes named with the offset */
static zo_status pwrite_all(int fd, const void *buf, size_t n, uint64_t off, const char *path) {
  const char *b = buf;
  while (n > 0) {
    ssize_t w = pwrite(fd, b, n, (off_t)off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      if (w == 0) errno = EIO;
      return zo_error_set(ZO_ERR_IO, "checkpoint: writing '%s' at offset %" PRIu64 " (%zu bytes): %s", path, off, n,
                          strerror(errno));
    }
    b += w, n -= (size_t)w, off += (uint64_t)w;
  }
  return ZO_OK;
}

static zo_status pread_all(int fd, void *buf, size_t n, uint64_t off, const char *path) {
  char *b = buf;
  while (n > 0) {
    ssize_t r = pread(fd, b, n, (off_t)off);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0)
      return zo_error_set(ZO_ERR_IO, "checkpoint: reading '%s' at offset %" PRIu64 " (%zu bytes): %s", path, off, n,
                          r == 0 ? "unexpected end of file" : strerror(errno));
    b += r, n -= (size_t)r, off += (uint64_t)r;
  }
  return ZO_OK;
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

/* write a whole small file, fsync it */
static zo_status write_file(const char *path, const char *text) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return sys_err(ZO_ERR_IO, "cannot create", path);
  zo_status st = pwrite_all(fd, text, strlen(text), 0, path);
  if (st == ZO_OK && fsync(fd)) st = sys_err(ZO_ERR_IO, "fsync of", path);
  close(fd);
  return st;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(path);
}
/* rm -rf @path (quietly: a missing path is fine) */
static void remove_tree(const char *path) { nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

/* CRC32C of [off, off + n) of an open file, read in CKPT_CHUNK pieces into @buf */
static zo_status file_crc(int fd, uint64_t off, uint64_t n, void *buf, const char *path, uint32_t *crc) {
  uint32_t c = 0;
  while (n > 0) {
    size_t k = n < CKPT_CHUNK ? (size_t)n : CKPT_CHUNK;
    ZO_CHECK(pread_all(fd, buf, k, off, path));
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

static uint32_t config_hash(const zo_config_t *cfg) {
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
static zo_status copy_range(int src_fd, uint64_t src_off, const char *src, int dst_fd, uint64_t dst_off,
                            const char *dst, uint64_t n, void *buf) {
  loff_t in = (loff_t)src_off, out = (loff_t)dst_off;
  while (n > 0) {
    ssize_t c = copy_file_range(src_fd, &in, dst_fd, &out, n, 0);
    if (c < 0 && errno == EINTR) continue;
    if (c < 0 && (errno == EXDEV || errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP)) break;
    if (c < 0)
      return zo_error_set(ZO_ERR_IO, "checkpoint: copying '%s' at offset %lld to '%s' at offset %lld: %s", src,
                          (long long)in, dst, (long long)out, strerror(errno));
    if (c == 0)
      return zo_error_set(ZO_ERR_IO, "checkpoint: copying '%s' at offset %lld: unexpected end of file", src,
                          (long long)in);
    n -= (uint64_t)c;
  }
  while (n > 0) { /* fallback */
    size_t k = n < CKPT_CHUNK ? (size_t)n : CKPT_CHUNK;
    ZO_CHECK(pread_all(src_fd, buf, k, (uint64_t)in, src));
    ZO_CHECK(pwrite_all(dst_fd, buf, k, (uint64_t)out, dst));
    in += (loff_t)k, out += (loff_t)k, n -= k;
  }
  return ZO_OK;
}

/* Write every tensor's three kinds of state into @path; fill runs[i * ST_KINDS + k]. */
static zo_status write_rank_file(zo_engine_t *e, const char *path, run *runs, void *buf) {
  int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return sys_err(ZO_ERR_IO, "cannot create", path);
  int sfd[ST_KINDS] = {-1, -1, -1};
  zo_status st = ZO_OK;
  if (e->tier == ZO_OFFLOAD_NVME) {
    for (int k = 0; k < ST_KINDS && st == ZO_OK; k++) {
      const char *sp = zo_swap_file_path(e->files[k]);
      sfd[k] = open(sp, O_RDONLY | O_CLOEXEC); /* buffered: O_DIRECT writes already reached the file */
      if (sfd[k] < 0) st = sys_err(ZO_ERR_IO, "cannot open swap file", sp);
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
        st = copy_range(sfd[k], p->file_el * e->esz[k], zo_swap_file_path(e->files[k]), fd, off, path, r->nbytes,
                        buf);
        if (st == ZO_OK) st = file_crc(fd, off, r->nbytes, buf, path, &r->crc);
      } else {
        r->crc = zo_swap_crc32c(0, p->state[k], r->nbytes);
        st = pwrite_all(fd, p->state[k], r->nbytes, off, path);
      }
      off = round_up(off + r->nbytes, CKPT_ALIGN);
    }
  }
  if (st == ZO_OK && fsync(fd)) st = sys_err(ZO_ERR_IO, "fsync of", path);
  for (int k = 0; k < ST_KINDS; k++)
    if (sfd[k] >= 0) close(sfd[k]);
  close(fd);
  return st;
}

static json_t *manifest_json(zo_engine_t *e, int64_t tag, const run *runs, const char *rank_file, json_t *app) {
  json_t *m = json_object(), *tensors = json_array();
  json_object_set_new(m, "format", json_string(CKPT_FORMAT));
  json_object_set_new(m, "format_version", json_integer(CKPT_FORMAT_VERSION));
  json_object_set_new(m, "zoffload_version", json_string(ZO_VERSION_STRING));
  json_object_set_new(m, "world_size", json_integer(e->world));
  json_object_set_new(m, "rank_files", json_pack("[s]", rank_file));
  json_object_set_new(m, "tag", json_integer(tag));
  json_object_set_new(m, "step", json_integer(e->step));
  json_object_set_new(m, "loss_scaler", json_pack("{s:f, s:I, s:I, s:i}", "loss_scale", e->loss_scale, "iter",
                                                  (json_int_t)e->ls_iter, "last_overflow",
                                                  (json_int_t)e->ls_last_overflow, "hysteresis", e->ls_hysteresis));
  char h[32];
  snprintf(h, sizeof h, "crc32c:%08x", config_hash(&e->cfg));
  json_object_set_new(m, "config_hash", json_string(h));
  json_object_set_new(m, "working_dtype", json_string(zo_dtype_name(e->wdtype)));
  json_object_set_new(m, "state_dtype", json_string(zo_dtype_name(e->sdtype)));
  for (int i = 0; i < e->n_params; i++) {
    const zo_param_t *p = e->params[i];
    json_t *shape = json_array();
    if (p->ndim == 0) json_array_append_new(shape, json_integer((json_int_t)p->n));
    for (int d = 0; d < p->ndim; d++) json_array_append_new(shape, json_integer(p->dims[d]));
    json_t *t = json_pack("{s:s, s:o, s:I, s:I, s:I, s:s}", "name", p->name, "shape", shape, "numel",
                          (json_int_t)p->n, "shard_offset", (json_int_t)p->shard_off, "shard_numel",
                          (json_int_t)p->shard_n, "file", rank_file);
    for (int k = 0; k < ST_KINDS; k++) {
      const run *r = &runs[i * ST_KINDS + k];
      char crc[16];
      snprintf(crc, sizeof crc, "%08x", r->crc);
      json_object_set_new(t, k_kind[k],
                          json_pack("{s:s, s:I, s:I, s:s}", "dtype", zo_dtype_name(k == ST_MASTER ? ZO_DTYPE_F32 : e->sdtype),
                                    "offset", (json_int_t)r->off, "nbytes", (json_int_t)r->nbytes, "crc32c", crc));
    }
    json_array_append_new(tensors, t);
  }
  json_object_set_new(m, "tensors", tensors);
  if (app) json_object_set(m, "app_state", app);
  return m;
}

/* step-* directories under @root, newest first; returns the count (-1 on error), *names malloc'd */
static int list_checkpoints(const char *root, char ***names) {
  *names = NULL;
  DIR *d = opendir(root);
  if (!d) return -1;
  int n = 0, cap = 0;
  struct dirent *de;
  while ((de = readdir(d))) {
    if (strncmp(de->d_name, "step-", 5) != 0) continue;
    if (n == cap) {
      cap = cap ? 2 * cap : 16;
      char **nn = realloc(*names, (size_t)cap * sizeof *nn);
      if (!nn) break;
      *names = nn;
    }
    (*names)[n++] = strdup(de->d_name);
  }
  closedir(d);
  for (int i = 1; i < n; i++) /* insertion sort, descending: names are zero-padded step numbers */
    for (int j = i; j > 0 && strcmp((*names)[j - 1], (*names)[j]) < 0; j--) {
      char *t = (*names)[j];
      (*names)[j] = (*names)[j - 1];
      (*names)[j - 1] = t;
    }
  return n;
}

/* Remove leftovers of a killed save (.tmp-*, .old-*, .latest.tmp) under @root. */
static void remove_leftovers(const char *root) {
  DIR *d = opendir(root);
  if (!d) return;
  struct dirent *de;
  char path[PATH_MAX];
  while ((de = readdir(d))) {
    if (strncmp(de->d_name, ".tmp-", 5) && strncmp(de->d_name, ".old-", 5) && strcmp(de->d_name, ".latest.tmp"))
      continue;
    if (join(path, sizeof path, root, de->d_name) == ZO_OK) remove_tree(path);
  }
  closedir(d);
}

/* The manifest file of this rank: manifest.json with one rank; with several, manifest-rankNNNNN.json of every rank
 * (and rank 0's copy as manifest.json, which marks the directory as a checkpoint). */
static void manifest_name(const zo_engine_t *e, char *out, size_t cap) {
  if (e->world == 1) snprintf(out, cap, "manifest.json");
  else snprintf(out, cap, "manifest-rank%05d.json", e->rank);
}

zo_status zo_engine_save(zo_engine_t *e, const char *root, const zo_save_opts *opts, char *saved_dir, size_t cap) {
  if (!e || !root || !root[0]) return zo_error_set(ZO_ERR_INVALID_ARG, "save: NULL engine or empty root");
  if (!e->finalized) return zo_error_set(ZO_ERR_INVALID_USAGE, "save: engine not finalized");
  if (e->n_grads > 0)
    return zo_error_set(ZO_ERR_INVALID_USAGE, "save: %d gradients handed over for a step not taken yet; save between "
                        "zo_engine_step() and the next zo_engine_grad_ready()", e->n_grads);
  const int64_t tag = opts && opts->tag >= 0 ? opts->tag : e->step;
  const int keep_last = opts && opts->keep_last > 0 ? opts->keep_last : 0;
  json_t *app = NULL;
  if (opts && opts->app_state) {
    json_error_t je;
    app = json_loads(opts->app_state, 0, &je);
    if (!app || !json_is_object(app)) {
      json_decref(app);
      return zo_error_set(ZO_ERR_INVALID_ARG, "save: app_state is not a JSON object (%s)", app ? "not an object" : je.text);
    }
  }
  ZO_CHECK(zo_engine_synchronize(e));
  if (e->tier == ZO_OFFLOAD_NVME) ZO_CHECK(eng_nv_quiesce(e)); /* every state write-back on disk */

  /* Several ranks (a collective call): rank 0 alone makes the root and clears leftovers, and names the temporary
   * directory every rank writes its part into. */
  zo_status st0 = ZO_OK;
  if (e->rank == 0) {
    if (mkdir(root, 0755) && errno != EEXIST) st0 = sys_err(ZO_ERR_IO, "cannot create checkpoint root", root);
    else remove_leftovers(root);
  }
  if ((st0 = eng_dp_from_rank0(e, st0, "save: creating the checkpoint root")) != ZO_OK) {
    json_decref(app);
    return st0;
  }
  char name[64], tmpn[96], oldn[96], tmp[PATH_MAX], final[PATH_MAX], old[PATH_MAX], file[PATH_MAX], latest[PATH_MAX],
      ltmp[PATH_MAX], rank_file[32], mfile[48];
  snprintf(name, sizeof name, "step-%012" PRId64, tag);
  snprintf(rank_file, sizeof rank_file, "rank%05d.bin", e->rank);
  manifest_name(e, mfile, sizeof mfile);
  double pid = (double)getpid(); /* rank 0's, in every rank's names */
  if (e->world > 1 && (st0 = zo_comm_broadcast(e->comm, &pid, sizeof pid, 0)) != ZO_OK) {
    json_decref(app);
    return zo_error_prefix(st0, "save: hearing rank 0's temporary directory");
  }
  snprintf(tmpn, sizeof tmpn, ".tmp-%s.%d", name, (int)pid);
  snprintf(oldn, sizeof oldn, ".old-%s.%d", name, (int)pid);
  zo_status pst = join(tmp, sizeof tmp, root, tmpn);
  if (pst == ZO_OK) pst = join(final, sizeof final, root, name);
  if (pst == ZO_OK) pst = join(old, sizeof old, root, oldn);
  if (pst == ZO_OK) pst = join(latest, sizeof latest, root, "latest");
  if (pst == ZO_OK) pst = join(ltmp, sizeof ltmp, root, ".latest.tmp");
  if (pst == ZO_OK) pst = join(file, sizeof file, tmp, mfile); /* the longest name inside tmp */
  if (pst != ZO_OK) {
    json_decref(app);
    return pst;
  }

  zo_status st = ZO_OK;
  run *runs = calloc((size_t)e->n_params * ST_KINDS, sizeof *runs);
  void *buf = malloc(CKPT_CHUNK);
  char *text = NULL;
  json_t *m = NULL;
  int placing = 0; /* rank 0 of several: past the agreement, every other rank waits for its word */
  /* Every rank makes every collective call below whatever happens to it, so none waits for one never made. */
  if (!runs || !buf) st = zo_error_set(ZO_ERR_OUT_OF_MEMORY, "save: out of memory (%zu bytes)", CKPT_CHUNK);
  if (st == ZO_OK && e->rank == 0 && mkdir(tmp, 0755)) st = sys_err(ZO_ERR_IO, "cannot create", tmp);
  if (e->world > 1) { /* everyone hears of rank 0's directory */
    zo_status s0 = eng_dp_from_rank0(e, e->rank == 0 ? st : ZO_OK, "save: creating the temporary directory");
    if (st == ZO_OK) st = s0;
  }
  /* every rank: its shard file and its manifest */
  join(file, sizeof file, tmp, rank_file);
  if (st == ZO_OK) st = write_rank_file(e, file, runs, buf);
  if (st == ZO_OK) {
    m = manifest_json(e, tag, runs, rank_file, app);
    text = json_dumps(m, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
    if (!text) st = zo_error_set(ZO_ERR_OUT_OF_MEMORY, "save: cannot format the manifest");
  }
  if (st == ZO_OK) st = join(file, sizeof file, tmp, mfile);
  if (st == ZO_OK) st = write_file(file, text);
  if (st == ZO_OK && e->world > 1 && e->rank == 0) st = join(file, sizeof file, tmp, "manifest.json");
  if (st == ZO_OK && e->world > 1 && e->rank == 0) st = write_file(file, text);
  if ((st = eng_dp_agree(e, st, "save: writing the ranks' parts")) != ZO_OK) goto fail;
  if (e->rank != 0) { /* rank 0 puts the directory into place and says how that went */
    st = eng_dp_from_rank0(e, ZO_OK, "save: putting the checkpoint into place");
    if (st == ZO_OK && saved_dir && cap) snprintf(saved_dir, cap, "%s", final);
    goto out;
  }
  placing = e->world > 1;
  if ((st = fsync_path(tmp, 1)) != ZO_OK) goto fail;
  /* Into place. A directory of the same step (an earlier run's, or one a kill left before `latest` moved)
   * goes aside first and is removed once the new one is durable. */
  int had_old = 0;
  if (rename(final, old) == 0) {
    had_old = 1;
  } else if (errno != ENOENT) {
    st = sys_err(ZO_ERR_IO, "cannot move aside", final);
    goto fail;
  }
  if (rename(tmp, final)) {
    st = sys_err(ZO_ERR_IO, "cannot rename into place", tmp);
    if (had_old) rename(old, final);
    goto fail;
  }
  if ((st = fsync_path(root, 1)) != ZO_OK) goto out;
  char line[80];
  snprintf(line, sizeof line, "%s\n", name);
  if ((st = write_file(ltmp, line)) != ZO_OK) goto out;
  if (rename(ltmp, latest)) {
    st = sys_err(ZO_ERR_IO, "cannot rename into place", ltmp);
    goto out;
  }
  if ((st = fsync_path(root, 1)) != ZO_OK) goto out;
  if (had_old) remove_tree(old);
  if (keep_last > 0) { /* the newest keep_last by step; `latest` names the one just written */
    char **names;
    int n = list_checkpoints(root, &names);
    for (int i = 0; i < n; i++) {
      if (i >= keep_last && strcmp(names[i], name) != 0) {
        if (join(file, sizeof file, root, names[i]) == ZO_OK) remove_tree(file);
      }
      free(names[i]);
    }
    free(names);
  }
  if (saved_dir && cap) snprintf(saved_dir, cap, "%s", final);
  goto out;
fail:
  if (e->rank == 0) remove_tree(tmp);
out:
  if (placing) (void)eng_dp_from_rank0(e, st, "save: putting the checkpoint into place"); /* the others wait for it */
  free(text);
  json_decref(m);
  json_decref(app);
  free(runs);
  free(buf);
  return st;
}

/* ------------------------------------------------------------------ */
/* load */

typedef struct load_ctx {
  const char *dir, *mpath;
  json_t *m;
} load_ctx;

static zo_status bad(const load_ctx *c, const char *fmt, const char *a, const char *b) {
  char msg[512];
  snprintf(msg, sizeof msg, fmt, a ? a : "", b ? b : "");
  return zo_error_set(ZO_ERR_CONFIG, "checkpoint '%s': %s", c->mpath, msg);
}

/* The checkpoint directory @path names: itself when it holds manifest.json, else the one its `latest` names. */
static zo_status resolve_dir(const char *path, char *dir, size_t cap) {
  char f[PATH_MAX];
  ZO_CHECK(join(f, sizeof f, path, "manifest.json"));
  if (access(f, F_OK) == 0) {
    snprintf(dir, cap, "%s", path);
    return ZO_OK;
  }
  ZO_CHECK(join(f, sizeof f, path, "latest"));
  FILE *fp = fopen(f, "r");
  if (!fp)
    return zo_error_set(ZO_ERR_IO, "checkpoint: '%s' holds neither manifest.json nor latest (%s)", path,
                        strerror(errno));
  char name[256] = "";
  char *ok = fgets(name, sizeof name, fp);
  fclose(fp);
  name[strcspn(name, "\n")] = 0;
  if (!ok || !name[0] || strchr(name, '/') || name[0] == '.')
    return zo_error_set(ZO_ERR_CORRUPT, "checkpoint: '%s' does not name a checkpoint directory", f);
  return join(dir, cap, path, name);
}

static int get_u64(json_t *o, const char *key, uint64_t *v) {
  json_t *x = json_object_get(o, key);
  if (!json_is_integer(x) || json_integer_value(x) < 0) return -1;
  *v = (uint64_t)json_integer_value(x);
  return 0;
}

/* Per tensor of the engine: its manifest entry's runs (checked against the engine). */
typedef struct lrun {
  uint64_t off, nbytes;
  uint32_t crc;
} lrun;

static zo_status check_manifest(zo_engine_t *e, load_ctx *c, lrun *runs, char *rank_file, size_t rf_cap) {
  json_t *m = c->m;
  const char *fmt = json_string_value(json_object_get(m, "format"));
  if (!fmt || strcmp(fmt, CKPT_FORMAT)) return bad(c, "format: expected \"" CKPT_FORMAT "\"%s%s", NULL, NULL);
  json_t *fv = json_object_get(m, "format_version");
  if (!json_is_integer(fv) || json_integer_value(fv) != CKPT_FORMAT_VERSION)
    return bad(c, "format_version: this zoffload reads version 1%s%s", NULL, NULL);
  json_t *ws = json_object_get(m, "world_size");
  if (!json_is_integer(ws) || json_integer_value(ws) != e->world) {
    char a[32], b[32];
    snprintf(a, sizeof a, "%lld", json_is_integer(ws) ? (long long)json_integer_value(ws) : -1LL);
    snprintf(b, sizeof b, "%d", e->world);
    return bad(c, "world_size: saved with %s ranks, this engine has %s", a, b);
  }
  const char *sd = json_string_value(json_object_get(m, "state_dtype"));
  if (!sd || strcmp(sd, zo_dtype_name(e->sdtype)))
    return bad(c, "state_dtype: saved as %s, this engine keeps %s (zoffload.optimizer_state_dtype)", sd,
               zo_dtype_name(e->sdtype));
  json_t *ts = json_object_get(m, "tensors");
  if (!json_is_array(ts)) return bad(c, "tensors: expected an array%s%s", NULL, NULL);
  if ((int)json_array_size(ts) != e->n_params) {
    char a[32], b[32];
    snprintf(a, sizeof a, "%zu", json_array_size(ts));
    snprintf(b, sizeof b, "%d", e->n_params);
    return bad(c, "tensors: the checkpoint has %s, this engine registered %s", a, b);
  }
  rank_file[0] = 0;
  for (int i = 0; i < e->n_params; i++) {
    json_t *t = json_array_get(ts, (size_t)i);
    const zo_param_t *p = e->params[i];
    const char *nm = json_string_value(json_object_get(t, "name"));
    if (!nm || strcmp(nm, p->name)) return bad(c, "tensor %s where this engine registered '%s'", nm ? nm : "?", p->name);
    uint64_t numel, so, sn;
    if (get_u64(t, "numel", &numel) || numel != p->n || get_u64(t, "shard_offset", &so) || so != p->shard_off ||
        get_u64(t, "shard_numel", &sn) || sn != p->shard_n)
      return bad(c, "tensor '%s': numel or shard differs from this engine's (registered with %s elements)", p->name,
                 NULL);
    const char *f = json_string_value(json_object_get(t, "file"));
    if (!f || strchr(f, '/') || f[0] == '.') return bad(c, "tensor '%s': bad file name%s", p->name, NULL);
    if (!rank_file[0]) snprintf(rank_file, rf_cap, "%s", f);
    if (strcmp(rank_file, f)) return bad(c, "tensor '%s': a second rank file '%s' for one rank", p->name, f);
    for (int k = 0; k < ST_KINDS; k++) {
      json_t *r = json_object_get(t, k_kind[k]);
      const char *crc = json_string_value(json_object_get(r, "crc32c"));
      const char *dt = json_string_value(json_object_get(r, "dtype"));
      lrun *lr = &runs[i * ST_KINDS + k];
      char *end = NULL;
      if (!crc) return bad(c, "tensor '%s': %s has no crc32c", p->name, k_kind[k]);
      unsigned long cv = strtoul(crc, &end, 16);
      if (get_u64(r, "offset", &lr->off) || get_u64(r, "nbytes", &lr->nbytes) || !end || *end || !dt)
        return bad(c, "tensor '%s': %s: offset, nbytes, dtype or crc32c missing or malformed", p->name, k_kind[k]);
      lr->crc = (uint32_t)cv;
      if (lr->nbytes != (uint64_t)p->shard_n * e->esz[k] ||
          strcmp(dt, zo_dtype_name(k == ST_MASTER ? ZO_DTYPE_F32 : e->sdtype)))
        return bad(c, "tensor '%s': %s has another dtype or size than this engine's", p->name, k_kind[k]);
    }
  }
  return ZO_OK;
}

zo_status zo_engine_load(zo_engine_t *e, const char *path, char **app_state) {
  if (app_state) *app_state = NULL;
  if (!e || !path) return zo_error_set(ZO_ERR_INVALID_ARG, "load: NULL argument");
  if (!e->finalized) return zo_error_set(ZO_ERR_INVALID_USAGE, "load: engine not finalized");
  if (e->n_grads > 0) return zo_error_set(ZO_ERR_INVALID_USAGE, "load: in the middle of a step");
  char dir[PATH_MAX], mpath[PATH_MAX], rank_file[256], fpath[PATH_MAX], mfile[48];
  /* Several ranks: a collective call; every rank checks its own part, they agree, then each applies its part */
  zo_status st = resolve_dir(path, dir, sizeof dir);
  manifest_name(e, mfile, sizeof mfile);
  if (st == ZO_OK) st = join(mpath, sizeof mpath, dir, mfile);
  json_error_t je;
  load_ctx c = {.dir = dir, .mpath = mpath, .m = NULL};
  if (st == ZO_OK && !(c.m = json_load_file(mpath, JSON_REJECT_DUPLICATES, &je))) {
    if (access(mpath, R_OK)) st = sys_err(ZO_ERR_IO, "cannot read", mpath);
    else st = zo_error_set(ZO_ERR_CONFIG, "checkpoint '%s':%d:%d: malformed JSON: %s", mpath, je.line, je.column,
                           je.text);
  }
  int fd = -1;
  json_t *ls = NULL, *stp = NULL; /* set before any path on which the load goes on past `verified` */
  void *buf = malloc(CKPT_CHUNK);
  lrun *runs = calloc((size_t)e->n_params * ST_KINDS, sizeof *runs);
  if (st == ZO_OK && (!buf || !runs)) st = zo_error_set(ZO_ERR_OUT_OF_MEMORY, "load: out of memory");
  if (st == ZO_OK) st = check_manifest(e, &c, runs, rank_file, sizeof rank_file);
  if (st != ZO_OK) goto verified;
  ls = json_object_get(c.m, "loss_scaler");
  stp = json_object_get(c.m, "step");
  if (!json_is_integer(stp) || !json_is_number(json_object_get(ls, "loss_scale")) ||
      !json_is_integer(json_object_get(ls, "iter")) || !json_is_integer(json_object_get(ls, "last_overflow")) ||
      !json_is_integer(json_object_get(ls, "hysteresis"))) {
    st = bad(&c, "step or loss_scaler missing or malformed%s%s", NULL, NULL);
    goto verified;
  }
  if ((st = join(fpath, sizeof fpath, dir, rank_file)) != ZO_OK) goto verified;
  if ((fd = open(fpath, O_RDONLY | O_CLOEXEC)) < 0) {
    st = sys_err(ZO_ERR_IO, "cannot open", fpath);
    goto verified;
  }
  /* 1. every checksum, before anything changes */
  for (int i = 0; i < e->n_params && st == ZO_OK; i++) {
    for (int k = 0; k < ST_KINDS; k++) {
      const lrun *r = &runs[i * ST_KINDS + k];
      uint32_t crc;
      if ((st = file_crc(fd, r->off, r->nbytes, buf, fpath, &crc)) != ZO_OK) {
        zo_error_prefix(st, "tensor '%s' %s", e->params[i]->name, k_kind[k]);
        break;
      }
      if (crc != r->crc) {
        st = zo_error_set(ZO_ERR_CORRUPT, "checkpoint '%s': tensor '%s' %s at offset %" PRIu64 " (%" PRIu64
                          " bytes): CRC32C %08x, the manifest says %08x", fpath, e->params[i]->name, k_kind[k],
                          r->off, r->nbytes, crc, r->crc);
        break;
      }
    }
  }
verified:
  if ((st = eng_dp_agree(e, st, "load: checking the ranks' parts")) != ZO_OK) goto out;
  /* 2. apply: state onto its tier, working weights rebuilt from the master weights */
  if ((st = zo_engine_synchronize(e)) != ZO_OK) goto out;
  if (e->tier == ZO_OFFLOAD_NVME && (st = eng_nv_quiesce(e)) != ZO_OK) goto out;
  for (int i = 0; i < e->n_params && st == ZO_OK; i++) {
    zo_param_t *p = e->params[i];
    const lrun *r = &runs[i * ST_KINDS];
    if (e->tier != ZO_OFFLOAD_NVME) {
      for (int k = 0; k < ST_KINDS && st == ZO_OK; k++) st = pread_all(fd, p->state[k], r[k].nbytes, r[k].off, fpath);
      if (st == ZO_OK) st = eng_upload_shard(e, p, 0, p->shard_n, p->state[ST_MASTER]);
      continue;
    }
    /* nvme: through slot 0 in slot-sized pieces, written with the swap layer (io_uring; its checksums stay valid) */
    sg_slot *sl = &e->slots[0];
    for (size_t off = 0; off < p->shard_n && st == ZO_OK; off += e->slot_el) {
      size_t n = p->shard_n - off < e->slot_el ? p->shard_n - off : e->slot_el;
      uint64_t n_el = eng_padded_el(e, n);
      for (int k = 0; k < ST_KINDS && st == ZO_OK; k++) {
        memset((char *)sl->buf[k] + n * e->esz[k], 0, (n_el - n) * e->esz[k]);
        st = pread_all(fd, sl->buf[k], n * e->esz[k], r[k].off + off * e->esz[k], fpath);
      }
      for (int k = 0; k < ST_KINDS && st == ZO_OK; k++)
        st = eng_swap_io(e, 1, k, p->file_el + off, sl->buf[k], n_el, &sl->req[k]);
      int done;
      if (st == ZO_OK) st = eng_slot_settle(e, sl, 1, &done);
      if (st == ZO_OK) st = eng_upload_shard(e, p, off, n, sl->buf[ST_MASTER]);
    }
    if (st != ZO_OK) zo_error_prefix(st, "load '%s'", p->name);
  }
  /* several ranks: every rank's shard of the working weights, all-gathered (stages 1-2; a collective, so every
   * rank calls it even after a failure of its own above) */
  if (e->world > 1) {
    zo_status s2 = eng_dp_publish(e, NULL);
    if (st == ZO_OK) st = s2;
  }
  if (st == ZO_OK) st = zo_event_record(e->weights_ready, e->copy_stream);
  if (st != ZO_OK) goto out;
  e->step = json_integer_value(stp);
  e->loss_scale = json_number_value(json_object_get(ls, "loss_scale"));
  e->ls_iter = json_integer_value(json_object_get(ls, "iter"));
  e->ls_last_overflow = json_integer_value(json_object_get(ls, "last_overflow"));
  e->ls_hysteresis = (int)json_integer_value(json_object_get(ls, "hysteresis"));
  char h[32];
  snprintf(h, sizeof h, "crc32c:%08x", config_hash(&e->cfg));
  const char *saved_h = json_string_value(json_object_get(c.m, "config_hash"));
  if (!saved_h || strcmp(saved_h, h))
    zo_warn("checkpoint '%s': saved with another config (%s, now %s); resuming with the current one", dir,
            saved_h ? saved_h : "no hash", h);
  json_t *app = json_object_get(c.m, "app_state");
  if (app_state && app && !(*app_state = json_dumps(app, JSON_COMPACT | JSON_PRESERVE_ORDER)))
    st = zo_error_set(ZO_ERR_OUT_OF_MEMORY, "load: cannot format app_state");
out:
  if (fd >= 0) close(fd);
  json_decref(c.m);
  free(buf);
  free(runs);
  return st;
}
