/*
 * safetensors.c - zo_engine_export_safetensors(): the consolidated master
 * weights in Hugging Face's safetensors format (a JSON header made with
 * jansson, then the raw little-endian tensors). Not a reader, and not the
 * checkpoint (checkpoint.c), which also keeps the optimizer state.
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
#include <unistd.h>

#include "engine_internal.h"
#include "zoffload/adam.h"
#include "zoffload/checkpoint.h"

static zo_status write_all(int fd, const void *buf, size_t n, uint64_t off, const char *path) {
  const char *b = buf;
  while (n > 0) {
    ssize_t w = pwrite(fd, b, n, (off_t)off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0)
      return zo_error_set(ZO_ERR_IO, "safetensors: writing '%s' at offset %" PRIu64 " (%zu bytes): %s", path, off, n,
                          w == 0 ? "short write" : strerror(errno));
    b += w, n -= (size_t)w, off += (uint64_t)w;
  }
  return ZO_OK;
}

zo_status zo_engine_export_safetensors(zo_engine_t *e, const char *path, zo_dtype dtype) {
  if (!e || !path) return zo_error_set(ZO_ERR_INVALID_ARG, "export_safetensors: NULL argument");
  if (dtype != ZO_DTYPE_F32 && dtype != ZO_DTYPE_BF16)
    return zo_error_set(ZO_ERR_INVALID_ARG, "export_safetensors: dtype %s: expected fp32 or bf16", zo_dtype_name(dtype));
  if (!e->finalized) return zo_error_set(ZO_ERR_INVALID_USAGE, "export_safetensors: engine not finalized");
  /* Several ranks: a collective call; each tensor's master shards are all-gathered and rank 0 writes the file.
   * Every rank makes every collective call whatever happens to it, and all return rank 0's outcome. */
  const int writer = e->rank == 0;
  const size_t esz = zo_dtype_size(dtype);
  /* header: tensors in registration order, back to back */
  json_t *h = json_object();
  json_object_set_new(h, "__metadata__", json_pack("{s:s, s:s}", "format", "pt", "producer", "zoffload"));
  uint64_t off = 0;
  size_t max_n = 0;
  for (int i = 0; i < e->n_params; i++) {
    const zo_param_t *p = e->params[i];
    json_t *shape = json_array();
    if (p->ndim == 0) json_array_append_new(shape, json_integer((json_int_t)p->n));
    for (int d = 0; d < p->ndim; d++) json_array_append_new(shape, json_integer(p->dims[d]));
    const uint64_t nb = (uint64_t)p->n * esz;
    json_object_set_new(h, p->name, json_pack("{s:s, s:o, s:[I,I]}", "dtype", dtype == ZO_DTYPE_F32 ? "F32" : "BF16",
                                              "shape", shape, "data_offsets", (json_int_t)off,
                                              (json_int_t)(off + nb)));
    off += nb;
    const size_t whole = e->world > 1 ? eng_dp_padded(e, p) : p->n; /* padded for the all-gather */
    if (whole > max_n) max_n = whole;
  }
  char *hdr = json_dumps(h, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_decref(h);
  char tmp[PATH_MAX];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  float *f32 = malloc(max_n * sizeof(float) + 64);
  void *out = dtype == ZO_DTYPE_F32 ? (void *)f32 : malloc(max_n * esz + 64);
  int fd = -1;
  zo_status st = ZO_OK;
  if (!hdr || !f32 || !out) {
    st = zo_error_set(ZO_ERR_OUT_OF_MEMORY, "export_safetensors: out of memory (%zu bytes)", max_n * sizeof(float));
    goto out;
  }
  size_t hlen = strlen(hdr), padded = (hlen + 7) / 8 * 8; /* the data starts 8-byte aligned */
  char *hp = realloc(hdr, padded + 1);
  if (!hp) {
    st = zo_error_set(ZO_ERR_OUT_OF_MEMORY, "export_safetensors: out of memory");
    goto out;
  }
  hdr = hp;
  memset(hdr + hlen, ' ', padded - hlen);
  if (writer && (fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) < 0)
    st = zo_error_set(ZO_ERR_IO, "safetensors: cannot create '%s': %s", tmp, strerror(errno));
  uint8_t len8[8];
  for (int b = 0; b < 8; b++) len8[b] = (uint8_t)((uint64_t)padded >> (8 * b)); /* little-endian u64 */
  if (writer && st == ZO_OK) st = write_all(fd, len8, 8, 0, tmp);
  if (writer && st == ZO_OK) st = write_all(fd, hdr, padded, 8, tmp);
  uint64_t pos = 8 + padded;
  for (int i = 0; i < e->n_params; i++) {
    zo_param_t *p = e->params[i];
    float *mine = e->world > 1 ? f32 + (size_t)e->rank * p->part_n : f32;
    zo_status s2 = zo_engine_get_master(e, p, mine, NULL, NULL);
    if (s2 != ZO_OK && st == ZO_OK) st = zo_error_prefix(s2, "safetensors '%s'", p->name);
    if (e->world > 1) { /* this rank's shard at its block; the last rank's padding is not written out */
      memset(mine + p->shard_n, 0, (p->part_n - p->shard_n) * sizeof(float));
      s2 = zo_comm_all_gather(e->comm, mine, f32, p->part_n * sizeof(float));
      if (s2 != ZO_OK && st == ZO_OK) st = zo_error_prefix(s2, "safetensors: gathering '%s'", p->name);
    }
    if (writer && st == ZO_OK && dtype != ZO_DTYPE_F32) st = zo_cast(out, dtype, f32, ZO_DTYPE_F32, p->n, 0);
    if (writer && st == ZO_OK) st = write_all(fd, out, p->n * esz, pos, tmp);
    pos += p->n * esz;
  }
  /* every rank hears of rank 0's writes, and rank 0 of the others' shards */
  if ((st = eng_dp_agree(e, st, "export_safetensors")) != ZO_OK) goto fail;
  if (!writer) goto out;
  if (fsync(fd)) {
    st = zo_error_set(ZO_ERR_IO, "safetensors: fsync of '%s': %s", tmp, strerror(errno));
    goto fail;
  }
  close(fd);
  fd = -1;
  if (rename(tmp, path)) {
    st = zo_error_set(ZO_ERR_IO, "safetensors: cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
    goto fail;
  }
  goto out;
fail:
  if (fd >= 0) close(fd);
  fd = -1;
  if (writer) unlink(tmp);
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
