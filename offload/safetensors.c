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
  if (e->world > 1)
    return zo_error_set(ZO_ERR_UNSUPPORTED, "export_safetensors: %d ranks (gathering shards is not built yet)", e->world);
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
    if (p->n > max_n) max_n = p->n;
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
  if ((fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) < 0) {
    st = zo_error_set(ZO_ERR_IO, "safetensors: cannot create '%s': %s", tmp, strerror(errno));
    goto out;
  }
  uint8_t len8[8];
  for (int b = 0; b < 8; b++) len8[b] = (uint8_t)((uint64_t)padded >> (8 * b)); /* little-endian u64 */
  if ((st = write_all(fd, len8, 8, 0, tmp)) != ZO_OK) goto fail;
  if ((st = write_all(fd, hdr, padded, 8, tmp)) != ZO_OK) goto fail;
  uint64_t pos = 8 + padded;
  for (int i = 0; i < e->n_params; i++) {
    zo_param_t *p = e->params[i];
    if ((st = zo_engine_get_master(e, p, f32, NULL, NULL)) != ZO_OK) {
      zo_error_prefix(st, "safetensors '%s'", p->name);
      goto fail;
    }
    if (dtype != ZO_DTYPE_F32 && (st = zo_cast(out, dtype, f32, ZO_DTYPE_F32, p->n, 0)) != ZO_OK) goto fail;
    if ((st = write_all(fd, out, p->n * esz, pos, tmp)) != ZO_OK) goto fail;
    pos += p->n * esz;
  }
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
  unlink(tmp);
out:
  if (fd >= 0) close(fd);
  if (out != f32) free(out);
  free(f32);
  free(hdr);
  return st;
}
