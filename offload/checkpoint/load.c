/*
 * checkpoint/load.c - zo_engine_load() / zo_engine_load_ex(): a checkpoint
 * zo_engine_save() wrote (checkpoint/save.c), checked whole before anything is
 * applied: the manifest's every field against this engine, each tensor's
 * CRC32C, then the bytes into the engine's tiers. Not the save.
 */
#include "zoffload/checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint_internal.h"
#include "engine_internal.h"

typedef struct load_ctx {
  const char *dir, *mpath;
  json_t *m;
  const zo_load_opts *o; /* never NULL (zeros: zo_engine_load's behaviour) */
  /* not_strict: this engine's tensor names (an object name -> null), for the unexpected ones */
  json_t *enames;
  int n_missing, n_unexpected;
} load_ctx;

static zo_status bad(const load_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A ZO_ERR_CONFIG naming the manifest file; @fmt names the field. Strings taken from the file go
 * through esc(). */
static zo_status bad(const load_ctx *c, const char *fmt, ...) {
  char msg[640];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return zo_error_set(ZO_ERR_CONFIG, "checkpoint '%s': %s", c->mpath, msg);
}

/* A string read from the manifest, escaped for a message (zo_escape), into @out of 96 bytes;
 * "(missing)" for NULL. */
static const char *esc(char out[96], const char *s) {
  return s ? zo_escape(out, 96, s, strlen(s)) : "(missing)";
}

/* The checkpoint directory @path names: itself when it holds manifest.json, else the one its
 * `latest` names. */
static zo_status resolve_dir(const char *path, char *dir, size_t cap) {
  char f[PATH_MAX], esc[96];
  struct stat sb;
  ZO_CHECK(ck_join(f, sizeof f, path, "manifest.json"));
  /* whatever it is: the manifest's own reading names it when it is not a file */
  if (lstat(f, &sb) == 0) {
    snprintf(dir, cap, "%s", path);
    return ZO_OK;
  }
  ZO_CHECK(ck_join(f, sizeof f, path, "latest"));
  if (lstat(f, &sb) && errno == ENOENT)
    return zo_error_set(ZO_ERR_IO, "checkpoint: '%s' holds neither manifest.json nor latest", path);
  char *text;
  size_t n;
  ZO_CHECK(ck_read_small(f, 4096, &text, &n));
  size_t len =
      strcspn(text, "\n"); /* one line: the directory's name (a NUL in it ends strcspn early) */
  /* a valid name, and nothing after its line */
  const int ok = ck_dir_name_ok(text, len) && (len == n || (text[len] == '\n' && len + 1 == n));
  zo_status st = ZO_OK;
  if (!ok)
    st = zo_error_set(ZO_ERR_CORRUPT,
                      "checkpoint: '%s' does not name a checkpoint directory (it holds \"%s\")", f,
                      zo_escape(esc, sizeof esc, text, n));
  else {
    text[len] = 0;
    st = ck_join(dir, cap, path, text);
  }
  free(text);
  return st;
}

/* Steps, loss-scaler iterations: at most 2^48 (far past any run; keeps step + 1 and the bias
 * correction exact). */
#define CKPT_MAX_STEP ((int64_t)1 << 48)

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
  int used; /* read and applied: the tensor is in the checkpoint (not_strict), and the kind is wanted (weights_only) */
} lrun;

/* An integer field of @o in [lo, hi] into *@v; else an error naming @what.@key, the value and the
 * range. */
static zo_status get_range(const load_ctx *c, json_t *o, const char *what, const char *key,
                           int64_t lo, int64_t hi, int64_t *v) {
  json_t *x = json_object_get(o, key);
  if (!json_is_integer(x))
    return bad(c, "%s%s%s: %s, expected an integer in %lld..%lld", what, what[0] ? "." : "", key,
               x ? "not an integer" : "missing", (long long)lo, (long long)hi);
  const json_int_t i = json_integer_value(x);
  if (i < lo || i > hi)
    return bad(c, "%s%s%s: %lld, expected %lld..%lld", what, what[0] ? "." : "", key, (long long)i,
               (long long)lo, (long long)hi);
  *v = (int64_t)i;
  return ZO_OK;
}

/* The engine's counters and loss scaler as the manifest gives them, each checked before any is
 * applied. */
typedef struct saved_scalars {
  int64_t step, ls_iter, ls_last_overflow, ls_hysteresis;
  double loss_scale;
} saved_scalars;

static zo_status check_scalars(const zo_engine_t *e, const load_ctx *c, saved_scalars *v) {
  json_t *ls = json_object_get(c->m, "loss_scaler");
  ZO_CHECK(get_range(c, c->m, "", "step", 0, CKPT_MAX_STEP, &v->step));
  if (!json_is_object(ls))
    return bad(c, "loss_scaler: %s, expected an object", ls ? "not an object" : "missing");
  ZO_CHECK(get_range(c, ls, "loss_scaler", "iter", 0, CKPT_MAX_STEP, &v->ls_iter));
  ZO_CHECK(get_range(c, ls, "loss_scaler", "last_overflow", -1, v->ls_iter, &v->ls_last_overflow));
  const int fp16 = e->cfg.fp16.enabled;
  ZO_CHECK(get_range(c, ls, "loss_scaler", "hysteresis", fp16 ? 1 : 0, 1 << 30, &v->ls_hysteresis));
  json_t *x = json_object_get(ls, "loss_scale");
  /* 2^64: the largest initial scale fp16.initial_scale_power allows; below fp16.min_loss_scale a dynamic scaler
   * never goes. 0, negative, inf or NaN would make every step overflow or every gradient inf. */
  const double lo = fp16 && e->cfg.fp16.loss_scale <= 0 ? e->cfg.fp16.min_loss_scale
                                                        : ldexp(1.0, -64),
               hi = ldexp(1.0, 64);
  if (!json_is_number(x))
    return bad(c, "loss_scaler.loss_scale: %s, expected a number", x ? "not a number" : "missing");
  v->loss_scale = json_number_value(x);
  if (!isfinite(v->loss_scale) || v->loss_scale < lo || v->loss_scale > hi)
    return bad(c, "loss_scaler.loss_scale: %g, expected %g..%g%s", v->loss_scale, lo, hi,
               fp16 && e->cfg.fp16.loss_scale <= 0 ? " (from fp16.min_loss_scale to 2^64)" : "");
  return ZO_OK;
}

/* Tensor @p's manifest entry @t checked against the engine, its runs into @lr (ST_KINDS of them). With
 * weights_only the Adam state's dtype and size are not compared (it is not read). */
static zo_status check_entry(zo_engine_t *e, load_ctx *c, json_t *t, const zo_param_t *p,
                             const char *rank_file, lrun *runs) {
  char e1[96];
  uint64_t numel, so, sn;
  if (get_u64(t, "numel", &numel) || numel != p->n || get_u64(t, "shard_offset", &so) ||
      so != p->shard_off || get_u64(t, "shard_numel", &sn) || sn != p->shard_n)
    return bad(
        c,
        "tensor '%s': numel, shard_offset or shard_numel missing or other than this engine's (registered "
        "with %zu elements, this rank's shard %zu at %zu)",
        p->name, p->n, p->shard_n, p->shard_off);
  /* shape: 1..8 dims >= 0 whose product, overflow-checked, is numel (the engine's save writes
   * [numel] or its dims) */
  json_t *sh = json_object_get(t, "shape");
  uint64_t prod = 1;
  int shape_ok = json_is_array(sh) && json_array_size(sh) >= 1 && json_array_size(sh) <= 8;
  for (size_t d = 0; shape_ok && d < json_array_size(sh); d++) {
    json_t *v = json_array_get(sh, d);
    shape_ok = json_is_integer(v) && json_integer_value(v) >= 0 &&
               !__builtin_mul_overflow(prod, (uint64_t)json_integer_value(v), &prod);
  }
  if (!shape_ok || prod != numel)
    return bad(
        c, "tensor '%s': shape: expected 1 to 8 dimensions >= 0 whose product is numel %" PRIu64,
        p->name, numel);
  const char *f = json_string_value(json_object_get(t, "file"));
  if (!f || strcmp(f, rank_file))
    return bad(c, "tensor '%s': file '%s', expected '%s' (this rank's)", p->name, esc(e1, f),
               rank_file);
  for (int k = 0; k < ST_KINDS; k++) {
    json_t *r = json_object_get(t, ck_kind[k]);
    const char *crc = json_string_value(json_object_get(r, "crc32c"));
    const char *dt = json_string_value(json_object_get(r, "dtype"));
    lrun *lr = &runs[k];
    if (!ck_hex8(crc))
      return bad(c, "tensor '%s': %s.crc32c: '%s', expected 8 hex digits", p->name, ck_kind[k],
                 esc(e1, crc));
    if (get_u64(r, "offset", &lr->off) || get_u64(r, "nbytes", &lr->nbytes) || !dt ||
        lr->off > UINT64_MAX - lr->nbytes)
      return bad(c, "tensor '%s': %s: offset, nbytes or dtype missing or malformed", p->name,
                 ck_kind[k]);
    lr->crc = (uint32_t)strtoul(crc, NULL, 16);
    lr->used = !c->o->weights_only || k == ST_MASTER;
    if (lr->used && (lr->nbytes != (uint64_t)p->shard_n * e->esz[k] ||
                     strcmp(dt, zo_dtype_name(k == ST_MASTER ? ZO_DTYPE_F32 : e->sdtype))))
      return bad(c,
                 "tensor '%s': %s is %s, %" PRIu64 " bytes; this engine's is %s, %" PRIu64 " bytes",
                 p->name, ck_kind[k], esc(e1, dt), lr->nbytes,
                 zo_dtype_name(k == ST_MASTER ? ZO_DTYPE_F32 : e->sdtype),
                 (uint64_t)p->shard_n * e->esz[k]);
  }
  return ZO_OK;
}

static zo_status check_manifest(zo_engine_t *e, load_ctx *c, lrun *runs, char *rank_file,
                                size_t rf_cap) {
  json_t *m = c->m;
  char e1[96];
  zo_status st = ZO_OK;
  if (!json_is_object(m)) return bad(c, "expected a JSON object");
  const char *fmt = json_string_value(json_object_get(m, "format"));
  if (!fmt || strcmp(fmt, CKPT_FORMAT))
    return bad(c, "format: \"%s\", expected \"" CKPT_FORMAT "\"", esc(e1, fmt));
  json_t *fv = json_object_get(m, "format_version");
  if (!json_is_integer(fv) || json_integer_value(fv) != CKPT_FORMAT_VERSION)
    return bad(c, "format_version: this zoffload reads version %d", CKPT_FORMAT_VERSION);
  json_t *ws = json_object_get(m, "world_size");
  if (!json_is_integer(ws) || json_integer_value(ws) != e->world)
    return bad(c, "world_size: saved with %lld ranks, this engine has %d",
               json_is_integer(ws) ? (long long)json_integer_value(ws) : -1LL, e->world);
  /* The precision before the loss scaler's fields: fp16's dynamic scale is state of fp16 alone, so a resume that
   * switches to or from fp16 is refused naming both (was: "loss_scaler.hysteresis: 0, expected 1.." for bf16 to
   * fp16, and fp16 to bf16 trained on with fp16's scale). bf16 and fp32 have no scaler: either resumes as the other. */
  const char *wd = json_string_value(json_object_get(m, "working_dtype")),
             *ewd = zo_dtype_name(e->wdtype);
  if (!c->o->weights_only && wd && strcmp(wd, ewd) &&
      (e->wdtype == ZO_DTYPE_F16 || !strcmp(wd, "fp16"))) {
    const char *key = e->wdtype == ZO_DTYPE_F16    ? "fp16.enabled"
                      : e->wdtype == ZO_DTYPE_BF16 ? "bf16.enabled"
                                                   : "no fp16 or bf16";
    return zo_error_set(
        ZO_ERR_CONFIG,
        "checkpoint '%s' was written with %s, the config asks for %s (%s): fp16's loss "
        "scaler does not carry over to or from another precision; resume with %s, or load the master "
        "weights only (zo_load_opts.weights_only, DeepSpeed's load_optimizer_states=False)",
        c->dir, esc(e1, wd), ewd, key, e1);
  }
  const char *sd = json_string_value(json_object_get(m, "state_dtype"));
  if (!c->o->weights_only && (!sd || strcmp(sd, zo_dtype_name(e->sdtype))))
    return bad(c, "state_dtype: saved as %s, this engine keeps %s (zoffload.optimizer_state_dtype)",
               esc(e1, sd), zo_dtype_name(e->sdtype));
  json_t *ts = json_object_get(m, "tensors");
  if (!json_is_array(ts)) return bad(c, "tensors: expected an array");
  /* the one zo_engine_save() names for this rank */
  snprintf(rank_file, rf_cap, "rank%05d.bin", e->rank);
  /* rank_files: the one file this rank's manifest describes, as zo_engine_save() writes it; nothing else is opened,
   * and a list naming other paths (../../etc/passwd, /dev/zero) or 100k entries is a forged manifest */
  json_t *rf = json_object_get(m, "rank_files");
  if (!json_is_array(rf) || json_array_size(rf) != 1 || !json_is_string(json_array_get(rf, 0)) ||
      strcmp(json_string_value(json_array_get(rf, 0)), rank_file)) {
    char got[128];
    if (!json_is_array(rf))
      snprintf(got, sizeof got, "no array");
    else if (json_array_size(rf) != 1)
      snprintf(got, sizeof got, "%zu entries", json_array_size(rf));
    else if (!json_is_string(json_array_get(rf, 0)))
      snprintf(got, sizeof got, "an entry that is not a string");
    else
      snprintf(got, sizeof got, "'%s'", esc(e1, json_string_value(json_array_get(rf, 0))));
    return bad(c, "rank_files: expected [\"%s\"] (this rank's file), got %s", rank_file, got);
  }
  if (!c->o->not_strict) {
    if (json_array_size(ts) != (size_t)e->n_params)
      return bad(c, "tensors: the checkpoint has %zu, this engine registered %d",
                 json_array_size(ts), e->n_params);
    for (int i = 0; i < e->n_params; i++) {
      json_t *t = json_array_get(ts, (size_t)i);
      const zo_param_t *p = e->params[i];
      const char *nm = json_string_value(json_object_get(t, "name"));
      if (!nm || strcmp(nm, p->name))
        return bad(c, "tensors[%d].name: '%s' where this engine registered '%s'", i, esc(e1, nm),
                   p->name);
      ZO_CHECK(check_entry(e, c, t, p, rank_file, &runs[i * ST_KINDS]));
    }
    return ZO_OK;
  }
  /* not strict: matched by name, through an index of the manifest's names and one of the
   * engine's */
  json_t *idx = json_object();
  if (!idx || !(c->enames = json_object()))
    st = zo_error_set(ZO_ERR_OUT_OF_MEMORY, "load: out of memory");
  for (size_t j = 0; j < json_array_size(ts) && st == ZO_OK; j++) {
    const char *nm = json_string_value(json_object_get(json_array_get(ts, j), "name"));
    if (!nm)
      st = bad(c, "tensors[%zu].name: missing or not a string", j);
    else if (json_object_get(idx, nm))
      st = bad(c, "tensors[%zu].name: '%s' is listed twice", j, esc(e1, nm));
    else if (json_object_set_new(idx, nm, json_integer((json_int_t)j)))
      st = zo_error_set(ZO_ERR_OUT_OF_MEMORY, "load: out of memory");
  }
  for (int i = 0; i < e->n_params && st == ZO_OK; i++) {
    const zo_param_t *p = e->params[i];
    if (json_object_set_new_nocheck(c->enames, p->name, json_null())) {
      st = zo_error_set(ZO_ERR_OUT_OF_MEMORY, "load: out of memory");
      break;
    }
    json_t *j = json_object_get(idx, p->name);
    if (!j) {
      c->n_missing++; /* its runs stay unused */
      continue;
    }
    st = check_entry(e, c, json_array_get(ts, (size_t)json_integer_value(j)), p, rank_file,
                     &runs[i * ST_KINDS]);
  }
  for (size_t j = 0; j < json_array_size(ts) && st == ZO_OK; j++)
    if (!json_object_get(c->enames,
                         json_string_value(json_object_get(json_array_get(ts, j), "name"))))
      c->n_unexpected++;
  json_decref(idx);
  return st;
}

/* The checkpoint directory @path names into @dir, this rank's manifest file in it into @mpath (both PATH_MAX),
 * and that manifest parsed into *m. */
static zo_status load_manifest(const zo_engine_t *e, const char *path, char *dir, char *mpath,
                               json_t **m) {
  char mfile[48], e1[96];
  ZO_CHECK(resolve_dir(path, dir, PATH_MAX));
  ck_manifest_name(e, mfile, sizeof mfile);
  ZO_CHECK(ck_join(mpath, PATH_MAX, dir, mfile));
  char *mtext = NULL;
  size_t mlen = 0;
  ZO_CHECK(ck_read_small(mpath, CKPT_MANIFEST_MAX, &mtext, &mlen));
  json_error_t je;
  zo_status st = ZO_OK;
  if (!(*m = json_loadb(mtext, mlen, JSON_REJECT_DUPLICATES, &je)))
    st = zo_error_set(ZO_ERR_CONFIG, "checkpoint '%s':%d:%d: malformed JSON: %s", mpath, je.line,
                      je.column,
                      zo_escape(e1, sizeof e1, je.text,
                                strlen(je.text))); /* jansson quotes the bytes near the error */
  free(mtext);
  return st;
}

/* Every checksum of this rank's file, before anything changes. */
static zo_status load_check_crcs(const zo_engine_t *e, int fd, const lrun *runs, void *buf,
                                 const char *fpath) {
  for (int i = 0; i < e->n_params; i++) {
    for (int k = 0; k < ST_KINDS; k++) {
      const lrun *r = &runs[i * ST_KINDS + k];
      if (!r->used) continue;
      uint32_t crc;
      zo_status st = ck_file_crc(fd, r->off, r->nbytes, buf, fpath, &crc);
      if (st != ZO_OK) return zo_error_prefix(st, "tensor '%s' %s", e->params[i]->name, ck_kind[k]);
      if (crc != r->crc)
        return zo_error_set(ZO_ERR_CORRUPT,
                            "checkpoint '%s': tensor '%s' %s at offset %" PRIu64 " (%" PRIu64
                            " bytes): CRC32C %08x, the manifest says %08x",
                            fpath, e->params[i]->name, ck_kind[k], r->off, r->nbytes, crc, r->crc);
    }
  }
  return ZO_OK;
}

/* One entry of a manifest's "files" (zo_save_opts.files), checked. */
typedef struct lfile {
  const char *name; /* inside the manifest's JSON */
  uint64_t nbytes;
  uint32_t crc;
} lfile;

/* The manifest's "files" checked whole: absent (another rank's manifest, or a checkpoint from before it existed)
 * or an array of at most ZO_SAVE_FILES_MAX objects {name: a ck_file_name_ok() name listed once, nbytes: 0..2^48,
 * crc32c: 8 hex digits}; into @out (ZO_SAVE_FILES_MAX entries) and *@n. */
static zo_status check_files(const load_ctx *c, lfile *out, int *n) {
  json_t *fs = json_object_get(c->m, "files");
  char e1[96];
  *n = 0;
  if (!fs) return ZO_OK;
  if (!json_is_array(fs) || json_array_size(fs) > ZO_SAVE_FILES_MAX)
    return bad(c, "files: expected an array of at most %d entries", ZO_SAVE_FILES_MAX);
  for (size_t i = 0; i < json_array_size(fs); i++) {
    json_t *f = json_array_get(fs, i);
    lfile *l = &out[i];
    l->name = json_string_value(json_object_get(f, "name"));
    if (!l->name || !ck_file_name_ok(l->name))
      return bad(
          c,
          "files[%zu].name: '%s', expected 1..64 bytes of [A-Za-z0-9_.-] (not the format's own names)",
          i, esc(e1, l->name));
    for (size_t j = 0; j < i; j++)
      if (!strcmp(out[j].name, l->name))
        return bad(c, "files[%zu].name: '%s' is listed twice", i, l->name);
    const char *crc = json_string_value(json_object_get(f, "crc32c"));
    if (!ck_hex8(crc))
      return bad(c, "files[%zu].crc32c: '%s', expected 8 hex digits", i, esc(e1, crc));
    int64_t nb;
    char what[32];
    snprintf(what, sizeof what, "files[%zu]", i);
    ZO_CHECK(get_range(c, f, what, "nbytes", 0, CKPT_MAX_STEP, &nb));
    l->nbytes = (uint64_t)nb;
    l->crc = (uint32_t)strtoul(crc, NULL, 16);
    *n = (int)i + 1;
  }
  return ZO_OK;
}

/* The file @f of the checkpoint directory @dir opened (a regular file, not followed), its size and CRC32C as the
 * manifest lists them; with @data, read whole into *@data (malloc'd), else checked through @buf (CKPT_CHUNK). */
static zo_status verify_file(const char *dir, const lfile *f, void *buf, void **data) {
  char path[PATH_MAX];
  int fd = -1;
  uint64_t size = 0;
  uint32_t crc = 0;
  ZO_CHECK(ck_join(path, sizeof path, dir, f->name));
  ZO_CHECK(ck_open_regular(path, &fd, &size));
  zo_status st = ZO_OK;
  void *all = NULL;
  if (size != f->nbytes)
    st = zo_error_set(ZO_ERR_CORRUPT,
                      "checkpoint '%s': %" PRIu64 " bytes, the manifest says %" PRIu64, path, size,
                      f->nbytes);
  else if (data && !(all = malloc(size ? (size_t)size : 1)))
    st = zo_error_set(ZO_ERR_OUT_OF_MEMORY, "checkpoint '%s': out of memory for %" PRIu64 " bytes",
                      path, size);
  else if (data && (st = ck_pread_all(fd, all, (size_t)size, 0, path)) == ZO_OK)
    crc = zo_swap_crc32c(0, all, (size_t)size);
  else if (!data)
    st = ck_file_crc(fd, 0, size, buf, path, &crc);
  if (st == ZO_OK && crc != f->crc)
    st = zo_error_set(ZO_ERR_CORRUPT,
                      "checkpoint '%s' (%" PRIu64 " bytes): CRC32C %08x, the manifest says %08x",
                      path, size, crc, f->crc);
  close(fd);
  if (st == ZO_OK && data)
    *data = all;
  else
    free(all);
  return st;
}

zo_status zo_checkpoint_read_file(const char *dir, const char *name, void **data, size_t *nbytes) {
  char mpath[PATH_MAX], e1[96];
  if (data) *data = NULL;
  if (nbytes) *nbytes = 0;
  if (!dir || !name || !data || !nbytes)
    return zo_error_set(ZO_ERR_INVALID_ARG, "checkpoint_read_file: NULL argument");
  if (!ck_file_name_ok(name))
    return zo_error_set(ZO_ERR_INVALID_ARG,
                        "checkpoint_read_file: '%s' is not a name zo_save_opts.files takes",
                        zo_escape(e1, sizeof e1, name, strlen(name)));
  ZO_CHECK(ck_join(mpath, sizeof mpath, dir, "manifest.json"));
  load_ctx c = {.dir = dir, .mpath = mpath};
  char *text = NULL;
  size_t n = 0;
  ZO_CHECK(ck_read_small(mpath, CKPT_MANIFEST_MAX, &text, &n));
  json_error_t je;
  c.m = json_loadb(text, n, JSON_REJECT_DUPLICATES, &je);
  free(text);
  if (!c.m)
    return zo_error_set(ZO_ERR_CONFIG, "checkpoint '%s':%d:%d: malformed JSON: %s", mpath, je.line,
                        je.column, zo_escape(e1, sizeof e1, je.text, strlen(je.text)));
  lfile fs[ZO_SAVE_FILES_MAX];
  int nf = 0;
  zo_status st = json_is_object(c.m) ? check_files(&c, fs, &nf) : bad(&c, "expected a JSON object");
  int k = -1;
  for (int i = 0; i < nf && st == ZO_OK && k < 0; i++)
    if (!strcmp(fs[i].name, name)) k = i;
  if (st == ZO_OK && k < 0)
    st = zo_error_set(ZO_ERR_IO, "checkpoint '%s' lists no file '%s'%s", mpath, name,
                      json_object_get(c.m, "files")
                          ? ""
                          : " (it has no \"files\" list: written before there was one)");
  if (st == ZO_OK && (st = verify_file(dir, &fs[k], NULL, data)) == ZO_OK)
    *nbytes = (size_t)fs[k].nbytes;
  json_decref(c.m);
  return st;
}

/* This rank's part checked against the engine: the manifest (into runs and *sv), then its file (@fpath,
 * PATH_MAX; opened into *fd): every run inside it, every checksum right. */
static zo_status load_verify(zo_engine_t *e, load_ctx *c, lrun *runs, void *buf, char *fpath,
                             int *fd, saved_scalars *sv) {
  char rank_file[256];
  uint64_t fsize = 0;
  lfile files[ZO_SAVE_FILES_MAX];
  int n_files = 0;
  ZO_CHECK(check_manifest(e, c, runs, rank_file, sizeof rank_file));
  ZO_CHECK(check_scalars(e, c, sv));
  ZO_CHECK(check_files(c, files, &n_files));
  for (int i = 0; i < n_files;
       i++) /* the caller's files (rank 0's manifest lists them): whole, or nothing loads */
    ZO_CHECK(verify_file(c->dir, &files[i], buf, NULL));
  ZO_CHECK(ck_join(fpath, PATH_MAX, c->dir, rank_file));
  ZO_CHECK(ck_open_regular(fpath, fd, &fsize));
  for (int i = 0; i < e->n_params * ST_KINDS;
       i++) /* every run inside the file (offset + nbytes checked above) */
    if (runs[i].used && runs[i].off + runs[i].nbytes > fsize)
      return zo_error_set(ZO_ERR_CORRUPT,
                          "checkpoint '%s': tensor '%s' %s at offset %" PRIu64 " (%" PRIu64
                          " bytes) "
                          "ends past the end of '%s' (%" PRIu64 " bytes)",
                          c->mpath, e->params[i / ST_KINDS]->name, ck_kind[i % ST_KINDS],
                          runs[i].off, runs[i].nbytes, fpath, fsize);
  return load_check_crcs(e, *fd, runs, buf, fpath);
}

/* NVMe tier: p's state through slot 0 in slot-sized pieces, written with the swap layer (io_uring; its checksums
 * stay valid), and its working weights uploaded. */
static zo_status load_param_nvme(zo_engine_t *e, zo_param_t *p, const lrun *r, int fd,
                                 const char *fpath) {
  zo_status st = ZO_OK;
  sg_slot *sl = eng_nv_slot(e->nv, 0);
  const size_t slot_el = eng_nv_slot_el(e->nv);
  for (size_t off = 0, n; off < p->shard_n && st == ZO_OK; off += n) {
    void *res[SL_KINDS];
    n = eng_nv_span(e, p, off, p->shard_n - off, res);
    if (res[ST_MASTER]) { /* resident (zoffload.optimizer_max_in_cpu): straight into host memory */
      for (int k = 0; k < ST_KINDS && st == ZO_OK; k++)
        if (r[k].used)
          st = ck_pread_all(fd, res[k], n * e->esz[k], r[k].off + off * e->esz[k], fpath);
      if (st == ZO_OK) st = eng_upload_shard(e, p, off, n, res[ST_MASTER]);
      continue;
    }
    if (n > slot_el) n = slot_el;
    uint64_t n_el = eng_padded_el(e, n);
    for (int k = 0; k < ST_KINDS && st == ZO_OK; k++) {
      if (!r[k].used) continue; /* weights_only: the state on the swap file stays */
      memset((char *)sl->buf[k] + n * e->esz[k], 0, (n_el - n) * e->esz[k]);
      st = ck_pread_all(fd, sl->buf[k], n * e->esz[k], r[k].off + off * e->esz[k], fpath);
    }
    for (int k = 0; k < ST_KINDS && st == ZO_OK; k++)
      if (r[k].used) st = eng_swap_io(e, 1, k, p->file_el + off, sl->buf[k], n_el, &sl->req[k]);
    int done;
    if (st == ZO_OK) st = eng_slot_settle(e, sl, 1, &done);
    if (st == ZO_OK) st = eng_upload_shard(e, p, off, n, sl->buf[ST_MASTER]);
  }
  return st;
}

/* Apply the verified part: state onto its tier, working weights rebuilt from the master weights. */
static zo_status load_apply(zo_engine_t *e, const lrun *runs, int fd, const char *fpath) {
  ZO_CHECK(zo_engine_synchronize(e));
  if (e->tier == ZO_OFFLOAD_NVME) ZO_CHECK(eng_nv_quiesce(e));
  zo_status st = ZO_OK;
  for (int i = 0; i < e->n_params && st == ZO_OK; i++) {
    zo_param_t *p = e->params[i];
    const lrun *r = &runs[i * ST_KINDS];
    if (!r[ST_MASTER].used)
      continue; /* not_strict: not in the checkpoint; keeps its values and state */
    /* device memory: through a host copy; the working copy from the master read */
    if (eng_device_adam(e)) {
      void *h[ST_KINDS] = {0};
      for (int k = 0; k < ST_KINDS && st == ZO_OK; k++) {
        if (!r[k].used) continue;
        h[k] = malloc(r[k].nbytes ? r[k].nbytes : 1);
        st = h[k]
                 ? ck_pread_all(fd, h[k], r[k].nbytes, r[k].off, fpath)
                 : zo_error_set(ZO_ERR_OUT_OF_MEMORY, "load: out of host memory for '%s'", p->name);
        if (st == ZO_OK) st = eng_dev_copy(e, p->state[k], h[k], r[k].nbytes, ZO_COPY_H2D);
      }
      if (st == ZO_OK) st = eng_upload_shard(e, p, 0, p->shard_n, h[ST_MASTER]);
      for (int k = 0; k < ST_KINDS; k++) free(h[k]);
      continue;
    }
    if (e->tier != ZO_OFFLOAD_NVME) {
      for (int k = 0; k < ST_KINDS && st == ZO_OK; k++)
        if (r[k].used) st = ck_pread_all(fd, p->state[k], r[k].nbytes, r[k].off, fpath);
      if (st == ZO_OK) st = eng_upload_shard(e, p, 0, p->shard_n, p->state[ST_MASTER]);
      continue;
    }
    st = load_param_nvme(e, p, r, fd, fpath);
    if (st != ZO_OK) zo_error_prefix(st, "load '%s'", p->name);
  }
  /* several ranks: every rank's shard of the working weights, all-gathered (stages 1-2; a collective, so every
   * rank calls it even after a failure of its own above) */
  if (e->world > 1) {
    zo_status s2 = eng_dp_publish(e, NULL);
    if (st == ZO_OK) st = s2;
  }
  if (st == ZO_OK) st = zo_event_record(e->weights_ready, e->copy_stream);
  return st;
}

/* The step counter and loss scaler from the checkpoint (not with weights_only: they belong to the optimizer's
 * state); a warning when it was saved with another config; the application's state into *app_state (may be NULL). */
static zo_status load_scalars_app(zo_engine_t *e, const load_ctx *c, const saved_scalars *sv,
                                  char **app_state) {
  if (!c->o->weights_only) {
    e->step = sv->step;
    e->loss_scale = sv->loss_scale;
    e->ls_iter = sv->ls_iter;
    e->ls_last_overflow = sv->ls_last_overflow;
    e->ls_hysteresis = (int)sv->ls_hysteresis;
  }
  char h[32], e1[96];
  snprintf(h, sizeof h, "crc32c:%08x", ck_config_hash(&e->cfg));
  const char *saved_h = json_string_value(json_object_get(c->m, "config_hash"));
  if (!saved_h || strcmp(saved_h, h))
    zo_warn(
        "checkpoint '%s': saved with another config (%s, now %s); resuming with the current one",
        c->dir, saved_h ? esc(e1, saved_h) : "no hash", h);
  json_t *app = json_object_get(c->m, "app_state");
  if (app_state && app && !(*app_state = json_dumps(app, JSON_COMPACT | JSON_PRESERVE_ORDER)))
    return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "load: cannot format app_state");
  return ZO_OK;
}

/* not_strict: each unmatched tensor to opts->on_unmatched, missing ones (registration order) then
 * unexpected ones */
static void report_unmatched(const zo_engine_t *e, const load_ctx *c, const lrun *runs) {
  const zo_load_opts *o = c->o;
  if (!o->not_strict || !o->on_unmatched) return;
  for (int i = 0; i < e->n_params; i++)
    if (!runs[i * ST_KINDS + ST_MASTER].used) o->on_unmatched(e->params[i]->name, 0, o->user);
  json_t *ts = json_object_get(c->m, "tensors");
  for (size_t j = 0; j < json_array_size(ts); j++) {
    const char *nm = json_string_value(json_object_get(json_array_get(ts, j), "name"));
    if (nm && !json_object_get(c->enames, nm)) o->on_unmatched(nm, 1, o->user);
  }
}

zo_status zo_engine_load(zo_engine_t *e, const char *path, char **app_state) {
  return zo_engine_load_ex(e, path, NULL, app_state);
}

zo_status zo_engine_load_ex(zo_engine_t *e, const char *path, zo_load_opts *opts,
                            char **app_state) {
  ENG_CHECK_OWNER(e, "load");
  static const zo_load_opts k_defaults = {0};
  if (app_state) *app_state = NULL;
  if (!e || !path) return zo_error_set(ZO_ERR_INVALID_ARG, "load: NULL argument");
  if (!e->finalized) return zo_error_set(ZO_ERR_INVALID_USAGE, "load: engine not finalized");
  if (e->n_grads > 0 || eng_acc_pending(e->acc) > 0)
    return zo_error_set(ZO_ERR_INVALID_USAGE, "load: in the middle of a step");
  char dir[PATH_MAX], mpath[PATH_MAX], fpath[PATH_MAX];
  /* Several ranks: a collective call; every rank checks its own part, they agree, then each applies
   * its part */
  load_ctx c = {.dir = dir, .mpath = mpath, .m = NULL, .o = opts ? opts : &k_defaults};
  zo_status st = load_manifest(e, path, dir, mpath, &c.m);
  int fd = -1;
  saved_scalars sv = {0};
  void *buf = malloc(CKPT_CHUNK);
  lrun *runs = calloc((size_t)e->n_params * ST_KINDS, sizeof *runs);
  if (st == ZO_OK && (!buf || !runs))
    st = zo_error_set(ZO_ERR_OUT_OF_MEMORY, "load: out of memory");
  /* 1. every rank's part checked, every checksum, before anything changes */
  if (st == ZO_OK) st = load_verify(e, &c, runs, buf, fpath, &fd, &sv);
  if ((st = eng_dp_agree(e, st, "load: checking the ranks' parts")) != ZO_OK) goto out;
  report_unmatched(e, &c, runs);
  /* 2. apply */
  st = load_apply(e, runs, fd, fpath);
  if (st == ZO_OK) st = load_scalars_app(e, &c, &sv, app_state);
  if (st == ZO_OK && opts) {
    opts->n_missing = c.n_missing;
    opts->n_unexpected = c.n_unexpected;
  }
out:
  if (fd >= 0) close(fd);
  json_decref(c.enames);
  json_decref(c.m);
  free(buf);
  free(runs);
  return st;
}
