/*
 * safetensors.c - zo_engine_export_safetensors(): the consolidated master
 * weights in Hugging Face's safetensors format (a JSON header made with
 * jansson, then the raw little-endian tensors), and a checking reader of such
 * files (zo_safetensors_parse/read: for tests and tools; it does not load
 * into an engine). Not the checkpoint (checkpoint/save.c), which also keeps the
 * optimizer state.
 * Format: https://github.com/huggingface/safetensors (README, "Format").
 */
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

#include "engine_internal.h"
#include "zoffload/adam.h"
#include "zoffload/checkpoint.h"

static zo_status write_all(int fd, const void *buf, size_t n, uint64_t off, const char *path) {
  size_t done;
  const int rc = zo_pwrite_all(fd, buf, n, off, &done);
  if (rc == 0) return ZO_OK;
  return zo_error_set(ZO_ERR_IO, "safetensors: writing '%s' at offset %" PRIu64 " (%zu bytes): %s",
                      path, off + done, n - done, rc > 0 ? "short write" : strerror(errno));
}

/* The JSON header: tensors in registration order, back to back, in @dtype. *hdr: its compact text (NULL when
 * out of memory, for the caller to report); *max_n: the most elements a tensor's master weights take in a host
 * buffer (padded for the all-gather with several ranks). */
static zo_status st_header(const zo_engine_t *e, zo_dtype dtype, char **hdr, size_t *max_n) {
  const size_t esz = zo_dtype_size(dtype);
  json_t *h = json_object();
  json_object_set_new(h, "__metadata__",
                      json_pack("{s:s, s:s}", "format", "pt", "producer", "zoffload"));
  uint64_t off = 0;
  *max_n = 0;
  for (int i = 0; i < e->n_params; i++) {
    const zo_param_t *p = e->params[i];
    json_t *shape = json_array();
    if (p->ndim == 0) json_array_append_new(shape, json_integer((json_int_t)p->n));
    for (int d = 0; d < p->ndim; d++) json_array_append_new(shape, json_integer(p->dims[d]));
    const uint64_t nb = (uint64_t)p->n * esz;
    json_t *ent =
        json_pack("{s:s, s:o, s:[I,I]}", "dtype", dtype == ZO_DTYPE_F32 ? "F32" : "BF16", "shape",
                  shape, "data_offsets", (json_int_t)off, (json_int_t)(off + nb));
    /* the header is UTF-8 JSON whose "__metadata__" key is not a tensor: a name that is not valid UTF-8 (jansson
     * refuses the key) or is that key would leave the tensor out of the header, silently */
    int refused = !ent || !strcmp(p->name, "__metadata__");
    if (refused)
      json_decref(ent);
    else
      refused = json_object_set_new(h, p->name, ent) != 0; /* (which takes ent either way) */
    if (refused) {
      char en[96];
      json_decref(h);
      return zo_error_set(ZO_ERR_INVALID_ARG, "export_safetensors: tensor '%s': its name %s",
                          zo_escape(en, sizeof en, p->name, strlen(p->name)),
                          ent ? "is not valid UTF-8 or is \"__metadata__\"" : "is not valid UTF-8");
    }
    off += nb;
    const size_t whole = e->world > 1 ? eng_dp_padded(e, p) : p->n; /* padded for the all-gather */
    if (whole > *max_n) *max_n = whole;
  }
  *hdr = json_dumps(h, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_decref(h);
  return ZO_OK;
}

/* Pad *hdr with spaces to *padded bytes, so that the data after it starts 8-byte aligned (*hdr grows). */
static zo_status st_pad_header(char **hdr, size_t *padded) {
  size_t hlen = strlen(*hdr), n = (hlen + 7) / 8 * 8;
  char *hp = realloc(*hdr, n + 1);
  if (!hp) return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "export_safetensors: out of memory");
  memset(hp + hlen, ' ', n - hlen);
  *hdr = hp;
  *padded = n;
  return ZO_OK;
}

/* @path as the export may replace it: absent or a regular file (never a symbolic link, a device, a directory or a
 * FIFO: refused, naming it and what it is, before anything is written). */
static zo_status st_target_check(const char *path) {
  mode_t found = 0;
  int r = zo_tmpfile_target_check(path, &found);
  if (r > 0)
    return zo_error_set(ZO_ERR_IO, "safetensors: '%s' is %s, not a regular file: not replacing it",
                        path, zo_file_kind(found));
  if (r < 0)
    return zo_error_set(ZO_ERR_IO, "safetensors: cannot stat '%s': %s", path, strerror(-r));
  return ZO_OK;
}

/* Remove the temporary files of @path that exports killed mid-write left (zo_tmpfile_sweep: of gone processes, regular
 * files only), create a fresh temporary file beside @path into *fd, its name into @tmp (PATH_MAX; zo_tmpfile_open:
 * never a file that exists, so a planted link is not followed), and write the padded header's length (little-endian
 * u64), then the header. */
static zo_status st_write_header(const char *path, char *tmp, const char *hdr, size_t padded,
                                 int *fd) {
  ZO_CHECK(st_target_check(path));
  zo_tmpfile_sweep(path);
  if ((*fd = zo_tmpfile_open(path, tmp, PATH_MAX)) < 0) {
    int e = -*fd;
    *fd = -1;
    tmp[0] = 0;
    return zo_error_set(ZO_ERR_IO, "safetensors: cannot create a temporary file beside '%s': %s",
                        path, strerror(e));
  }
  uint8_t len8[8];
  for (int b = 0; b < 8; b++)
    len8[b] = (uint8_t)((uint64_t)padded >> (8 * b)); /* little-endian u64 */
  ZO_CHECK(write_all(*fd, len8, 8, 0, tmp));
  return write_all(*fd, hdr, padded, 8, tmp);
}

/* Every tensor's master weights (all-gathered over the ranks into @f32), cast to @dtype in @out and written by the
 * writer at @pos onwards. A collective with several ranks: every rank makes every call whatever @st (the outcome
 * so far) is; returns the first failure. */
static zo_status st_write_tensors(zo_engine_t *e, zo_dtype dtype, int writer, int fd,
                                  const char *tmp, uint64_t pos, float *f32, void *out,
                                  zo_status st) {
  const size_t esz = zo_dtype_size(dtype);
  for (int i = 0; i < e->n_params; i++) {
    zo_param_t *p = e->params[i];
    float *mine = e->world > 1 ? f32 + (size_t)e->rank * p->part_n : f32;
    zo_status s2 = zo_engine_get_master(e, p, mine, NULL, NULL);
    if (s2 != ZO_OK && st == ZO_OK) st = zo_error_prefix(s2, "safetensors '%s'", p->name);
    /* this rank's shard at its block; the last rank's padding is not written out */
    if (e->world > 1) {
      memset(mine + p->shard_n, 0, (p->part_n - p->shard_n) * sizeof(float));
      s2 = zo_comm_all_gather(e->comm, mine, f32, p->part_n * sizeof(float));
      if (s2 != ZO_OK && st == ZO_OK)
        st = zo_error_prefix(s2, "safetensors: gathering '%s'", p->name);
    }
    if (writer && st == ZO_OK && dtype != ZO_DTYPE_F32)
      st = zo_cast(out, dtype, f32, ZO_DTYPE_F32, p->n, 0);
    if (writer && st == ZO_OK) st = write_all(fd, out, p->n * esz, pos, tmp);
    pos += p->n * esz;
  }
  return st;
}

/* The writer: @tmp made durable (closed, *fd = -1) and renamed to @path, unless @path became something other than a
 * regular file meanwhile (refused as st_target_check). */
static zo_status st_place(int *fd, const char *tmp, const char *path) {
  if (fsync(*fd))
    return zo_error_set(ZO_ERR_IO, "safetensors: fsync of '%s': %s", tmp, strerror(errno));
  close(*fd);
  *fd = -1;
  mode_t found = 0;
  int r = zo_tmpfile_place(tmp, path, &found);
  if (r > 0)
    return zo_error_set(ZO_ERR_IO, "safetensors: '%s' is %s, not a regular file: not replacing it",
                        path, zo_file_kind(found));
  if (r < 0)
    return zo_error_set(ZO_ERR_IO, "safetensors: cannot rename '%s' to '%s': %s", tmp, path,
                        strerror(-r));
  return ZO_OK;
}

zo_status zo_engine_export_safetensors(zo_engine_t *e, const char *path, zo_dtype dtype) {
  ENG_CHECK_OWNER(e, "export_safetensors");
  if (!e || !path) return zo_error_set(ZO_ERR_INVALID_ARG, "export_safetensors: NULL argument");
  if (dtype != ZO_DTYPE_F32 && dtype != ZO_DTYPE_BF16)
    return zo_error_set(ZO_ERR_INVALID_ARG, "export_safetensors: dtype %s: expected fp32 or bf16",
                        zo_dtype_name(dtype));
  if (!e->finalized)
    return zo_error_set(ZO_ERR_INVALID_USAGE, "export_safetensors: engine not finalized");
  /* Several ranks: a collective call; each tensor's master shards are all-gathered and rank 0 writes the file.
   * Every rank makes every collective call whatever happens to it, and all return rank 0's outcome. */
  const int writer = e->rank == 0;
  char *hdr = NULL;
  size_t max_n, padded = 0;
  ZO_CHECK(st_header(e, dtype, &hdr, &max_n));
  char tmp[PATH_MAX] = "";
  float *f32 = malloc(max_n * sizeof(float) + 64);
  void *out = dtype == ZO_DTYPE_F32 ? (void *)f32 : malloc(max_n * zo_dtype_size(dtype) + 64);
  int fd = -1;
  zo_status st = ZO_OK;
  if (!hdr || !f32 || !out) {
    st = zo_error_set(ZO_ERR_OUT_OF_MEMORY, "export_safetensors: out of memory (%zu bytes)",
                      max_n * sizeof(float));
    goto out;
  }
  if ((st = st_pad_header(&hdr, &padded)) != ZO_OK) goto out;
  if (writer) st = st_write_header(path, tmp, hdr, padded, &fd);
  st = st_write_tensors(e, dtype, writer, fd, tmp, 8 + padded, f32, out, st);
  /* every rank hears of rank 0's writes, and rank 0 of the others' shards */
  if ((st = eng_dp_agree(e, st, "export_safetensors")) != ZO_OK) goto fail;
  if (!writer) goto out;
  if ((st = st_place(&fd, tmp, path)) != ZO_OK) goto fail;
  goto out;
fail:
  if (fd >= 0) close(fd);
  fd = -1;
  if (writer && tmp[0]) unlink(tmp);
out:
  if (e->world > 1) { /* rank 0's fsync and rename, for everyone */
    zo_status s0 = eng_dp_from_rank0(e, st, "export_safetensors: putting the file into place");
    if (st == ZO_OK) st = s0;
  }
  if (fd >= 0) close(fd);
  if (out != f32) free(out);
  free(f32);
  free(hdr);
  return st;
}

/* ------------------------------------------------------------------ */
/* reader */

#define ST_HEADER_MAX ((uint64_t)100 << 20) /* the format's own limit on the header, 100 MB */

static const struct {
  const char *name;
  int size;
} k_st_dtypes[] = {{"F64", 8}, {"F32", 4}, {"F16", 2},  {"BF16", 2},    {"I64", 8},
                   {"I32", 4}, {"I16", 2}, {"I8", 1},   {"U64", 8},     {"U32", 4},
                   {"U16", 2}, {"U8", 1},  {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};

typedef struct st_entry {
  const char *name, *dtype;
  int ndim;
  int64_t dims[ZO_PARAM_MAX_DIMS];
  uint64_t begin, end;
} st_entry;

static int st_by_begin(const void *x, const void *y) {
  const st_entry *a = x, *b = y;
  return a->begin < b->begin ? -1 : a->begin > b->begin ? 1 : (a->end > b->end) - (a->end < b->end);
}

static zo_status st_bad(const char *name, const char *what) {
  char e[96];
  return zo_error_set(ZO_ERR_CORRUPT, "safetensors: tensor '%s': %s",
                      zo_escape(e, sizeof e, name, strlen(name)), what);
}

/* One header entry into @t; every field checked against the data's size @data_n. */
static zo_status st_entry_check(const char *key, json_t *v, uint64_t data_n, st_entry *t) {
  t->name = key;
  if (!json_is_object(v)) return st_bad(key, "expected an object {dtype, shape, data_offsets}");
  t->dtype = json_string_value(json_object_get(v, "dtype"));
  int esz = 0;
  for (size_t i = 0; t->dtype && i < sizeof k_st_dtypes / sizeof k_st_dtypes[0]; i++)
    if (!strcmp(t->dtype, k_st_dtypes[i].name)) esz = k_st_dtypes[i].size;
  if (!esz)
    return st_bad(key,
                  "dtype: missing or not a safetensors dtype (F64, F32, F16, BF16, I64 ... BOOL)");
  json_t *sh = json_object_get(v, "shape"), *off = json_object_get(v, "data_offsets");
  if (!json_is_array(sh) || json_array_size(sh) > ZO_PARAM_MAX_DIMS)
    return st_bad(key, "shape: expected 0..8 dims");
  t->ndim = (int)json_array_size(sh);
  uint64_t nbytes = (uint64_t)esz;
  for (int d = 0; d < t->ndim; d++) {
    json_t *x = json_array_get(sh, (size_t)d);
    if (!json_is_integer(x) || json_integer_value(x) < 0 ||
        json_integer_value(x) > ((json_int_t)1 << 62))
      return st_bad(key, "shape: a dim is not an integer in 0..2^62");
    t->dims[d] = (int64_t)json_integer_value(x);
    if (__builtin_mul_overflow(nbytes, (uint64_t)t->dims[d], &nbytes))
      return st_bad(key, "shape: bytes overflow");
  }
  json_t *b = json_array_get(off, 0), *e = json_array_get(off, 1);
  if (!json_is_array(off) || json_array_size(off) != 2 || !json_is_integer(b) ||
      !json_is_integer(e) || json_integer_value(b) < 0 ||
      json_integer_value(e) < json_integer_value(b))
    return st_bad(key, "data_offsets: expected [begin, end], 0 <= begin <= end");
  t->begin = (uint64_t)json_integer_value(b), t->end = (uint64_t)json_integer_value(e);
  if (t->end > data_n) return st_bad(key, "data_offsets: end past the end of the file");
  if (t->end - t->begin != nbytes)
    return st_bad(key, "data_offsets: end - begin is not the shape's bytes");
  return ZO_OK;
}

zo_status zo_safetensors_parse(const void *buf, size_t n, zo_safetensors_visit_fn fn, void *user) {
  if (!buf && n) return zo_error_set(ZO_ERR_INVALID_ARG, "safetensors_parse: NULL buffer");
  const uint8_t *b = buf;
  if (n < 8)
    return zo_error_set(ZO_ERR_CORRUPT,
                        "safetensors: %zu bytes, fewer than the 8 of the header length", n);
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = hlen << 8 | b[i];
  if (hlen > ST_HEADER_MAX || hlen > n - 8)
    return zo_error_set(ZO_ERR_CORRUPT,
                        "safetensors: header length %" PRIu64 " at offset 0: more than %s", hlen,
                        hlen > ST_HEADER_MAX ? "the format's 100 MB" : "the file holds after it");
  if (hlen < 2 || b[8] != '{')
    return zo_error_set(ZO_ERR_CORRUPT,
                        "safetensors: the header at offset 8 does not start with '{'");
  json_error_t je;
  json_t *h = json_loadb((const char *)b + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &je);
  char e1[96];
  if (!h)
    return zo_error_set(ZO_ERR_CORRUPT, "safetensors: header at offset %d: malformed JSON: %s",
                        8 + je.position, zo_escape(e1, sizeof e1, je.text, strlen(je.text)));
  const uint64_t data_n = n - 8 - hlen;
  const uint8_t *data = b + 8 + hlen;
  zo_status st = ZO_OK;
  st_entry *ts = NULL;
  size_t nt = 0;
  if (!json_is_object(h)) {
    st = zo_error_set(ZO_ERR_CORRUPT, "safetensors: the header is not a JSON object");
    goto out;
  }
  ts = calloc(json_object_size(h) + 1, sizeof *ts);
  if (!ts) {
    st = zo_error_set(ZO_ERR_OUT_OF_MEMORY, "safetensors: out of memory (%zu tensors)",
                      json_object_size(h));
    goto out;
  }
  const char *key;
  json_t *v;
  json_object_foreach(h, key, v) {
    if (!strcmp(key, "__metadata__")) {
      const char *mk;
      json_t *mv;
      if (!json_is_object(v))
        st = zo_error_set(ZO_ERR_CORRUPT, "safetensors: __metadata__ is not an object");
      json_object_foreach(v, mk, mv) if (st == ZO_OK && !json_is_string(mv)) st =
          zo_error_set(ZO_ERR_CORRUPT, "safetensors: __metadata__ '%s': not a string",
                       zo_escape(e1, sizeof e1, mk, strlen(mk)));
    } else {
      st = st_entry_check(key, v, data_n, &ts[nt++]);
    }
    if (st != ZO_OK) goto out;
  }
  qsort(ts, nt, sizeof *ts, st_by_begin);
  uint64_t at = 0; /* the data covered so far: every tensor starts where the one before ends */
  for (size_t i = 0; i < nt; i++) {
    if (ts[i].begin != at) {
      st = st_bad(ts[i].name, ts[i].begin < at ? "data_offsets: overlaps another tensor's"
                                               : "data_offsets: a hole in the data before it");
      goto out;
    }
    at = ts[i].end;
  }
  if (at != data_n) {
    st = zo_error_set(ZO_ERR_CORRUPT,
                      "safetensors: %" PRIu64 " bytes of data after the last tensor", data_n - at);
    goto out;
  }
  for (size_t i = 0; i < nt && fn; i++)
    if (fn(user, ts[i].name, ts[i].dtype, ts[i].ndim, ts[i].dims, data + ts[i].begin,
           (size_t)(ts[i].end - ts[i].begin))) {
      st = zo_error_set(ZO_ERR_INVALID_USAGE, "safetensors: the visitor stopped at tensor '%s'",
                        zo_escape(e1, sizeof e1, ts[i].name, strlen(ts[i].name)));
      break;
    }
out:
  free(ts);
  json_decref(h);
  return st;
}

zo_status zo_safetensors_read(const char *path, zo_safetensors_visit_fn fn, void *user) {
  if (!path) return zo_error_set(ZO_ERR_INVALID_ARG, "safetensors_read: NULL path");
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0)
    return zo_error_set(ZO_ERR_IO, "safetensors: cannot open '%s': %s", path, strerror(errno));
  struct stat sb;
  if (fstat(fd, &sb) || !S_ISREG(sb.st_mode)) {
    close(fd);
    return zo_error_set(ZO_ERR_IO, "safetensors: '%s' is not a regular file", path);
  }
  const size_t n = (size_t)sb.st_size;
  uint8_t *b = malloc(n ? n : 1);
  if (!b) {
    close(fd);
    return zo_error_set(ZO_ERR_OUT_OF_MEMORY,
                        "safetensors: reading '%s' (%zu bytes): out of memory", path, n);
  }
  size_t got;
  zo_pread_all(fd, b, n, 0, &got);
  close(fd);
  zo_status st = got == n ? zo_safetensors_parse(b, n, fn, user)
                          : zo_error_set(ZO_ERR_IO, "safetensors: reading '%s' at offset %zu: %s",
                                         path, got, "unexpected end of file or read error");
  if (st != ZO_OK && got == n) zo_error_prefix(st, "'%s'", path);
  free(b);
  return st;
}
