/*
 * swap_file.c - the swap files of the NVMe tier: preallocated files in the
 * locked private directory (named in its owner marker, opened O_DIRECT or
 * buffered, given a fixed-file slot, removed), first-fit extents inside them,
 * and the optional CRC32C per chunk, recorded on write and checked on read.
 * Not the transfers (swap.c) nor the directory's ownership (swap_dir.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <isa-l/crc.h>

#include "base_internal.h"
#include "swap_state.h"

/* ---- checksums: CRC32C per chunk, in host memory ----------------------------------------- */

uint32_t zo_swap_crc32c(uint32_t crc, const void *buf, size_t nbytes) {
  /* ISA-L's crc32_iscsi() applies neither the initial nor the final inversion itself. */
  uint32_t c = ~crc;
  const unsigned char *p = buf;
  while (nbytes) {
    int n = nbytes > (1u << 30) ? (1 << 30) : (int)nbytes;
    c = crc32_iscsi((unsigned char *)p, n, c);
    p += n;
    nbytes -= (size_t)n;
  }
  return ~c;
}

void zo_swap_crc_forget(zo_swap_file_t *f, uint64_t off, uint64_t nbytes) {
  if (!f->csum_chunk || !nbytes) return;
  uint64_t c0 = off / f->csum_chunk, c1 = (off + nbytes - 1) / f->csum_chunk;
  for (uint64_t c = c0; c <= c1 && c < f->n_chunks; c++)
    f->crc_valid[c / 64] &= ~(1ull << (c % 64));
}

/* Chunk @c's byte range [*start, *end) in the file. */
static void chunk_range(const zo_swap_file_t *f, uint64_t c, uint64_t *start, uint64_t *end) {
  *start = c * f->csum_chunk;
  *end = *start + f->csum_chunk;
  if (*end > f->size) *end = f->size;
}

/* Record the CRCs of the chunks that @buf (file range [off, off+n)) covers whole; forget partial ones. */
void zo_swap_crc_record(zo_swap_file_t *f, uint64_t off, const char *buf, size_t n) {
  if (!f->csum_chunk) return;
  uint64_t c0 = off / f->csum_chunk, c1 = (off + n - 1) / f->csum_chunk;
  for (uint64_t c = c0; c <= c1 && c < f->n_chunks; c++) {
    uint64_t s, e;
    chunk_range(f, c, &s, &e);
    if (s >= off && e <= off + n) {
      f->crc[c] = zo_swap_crc32c(0, buf + (s - off), (size_t)(e - s));
      f->crc_valid[c / 64] |= 1ull << (c % 64);
    } else {
      f->crc_valid[c / 64] &= ~(1ull << (c % 64));
    }
  }
}

/* Verify the chunks a completed read covers whole; ZO_ERR_CORRUPT on the first mismatch. */
zo_status zo_swap_crc_verify(zo_swap_file_t *f, uint64_t off, const char *buf, size_t n) {
  if (!f->csum_chunk) return ZO_OK;
  uint64_t c0 = off / f->csum_chunk, c1 = (off + n - 1) / f->csum_chunk;
  for (uint64_t c = c0; c <= c1 && c < f->n_chunks; c++) {
    if (!(f->crc_valid[c / 64] >> (c % 64) & 1)) continue;
    uint64_t s, e;
    chunk_range(f, c, &s, &e);
    if (s < off || e > off + n) continue;
    uint32_t got = zo_swap_crc32c(0, buf + (s - off), (size_t)(e - s));
    if (got != f->crc[c])
      return zo_error_set(
          ZO_ERR_CORRUPT,
          "swap: read '%s' at offset %" PRIu64 ", length %" PRIu64
          " bytes: CRC32C mismatch (expected 0x%08x, got 0x%08x): the data on disk changed",
          f->path, s, e - s, f->crc[c], got);
  }
  return ZO_OK;
}

/* ---- files: created, opened, preallocated, removed --------------------------------------- */

static void file_free(zo_swap_file_t *f) {
  for (unsigned i = 0; f->xparts && i + 1 < f->sw->n_dirs; i++) free(f->xparts[i].path);
  free(f->xparts);
  while (f->free_ext) {
    zo_swap_ext_t *x = f->free_ext;
    f->free_ext = x->next;
    free(x);
  }
  free(f->crc);
  free(f->crc_valid);
  free(f);
}

/* Close one descriptor and give back its fixed-file slot. */
static void fd_close(zo_swap_t *sw, int *fd, int *slot) {
  if (*slot >= 0) {
    int minus1 = -1;
    io_uring_register_files_update(&sw->ring, (unsigned)*slot, &minus1, 1);
    sw->slot_used[*slot] = 0;
    *slot = -1;
  }
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

/* Close @f's descriptors (every part's) and give back their fixed-file slots. */
static void file_close(zo_swap_t *sw, zo_swap_file_t *f) {
  fd_close(sw, &f->fd, &f->slot);
  for (unsigned i = 0; f->xparts && i + 1 < sw->n_dirs; i++)
    fd_close(sw, &f->xparts[i].fd, &f->xparts[i].slot);
}

/* Unlink every part of @f that was made; 0, or the errno of the first failure (named in @bad). */
static int file_unlink(zo_swap_t *sw, zo_swap_file_t *f, const char **bad) {
  int err = 0;
  for (unsigned i = 0; i < sw->n_dirs; i++) {
    if (i && (!f->xparts || !f->xparts[i - 1].path)) continue;
    if (unlinkat(zo_swap_dir_at(sw, i)->fd, f->name, 0) != 0 && errno != ENOENT && !err) {
      err = errno;
      *bad = zo_swap_part_path(f, i);
    }
  }
  return err;
}

/* Close, unlink and free every file of @sw (destroy); an unlink that fails is a warning. */
void zo_swap_files_close_all(zo_swap_t *sw) {
  while (sw->files) {
    zo_swap_file_t *f = sw->files;
    sw->files = f->next;
    file_close(sw, f);
    const char *bad = NULL;
    int e = file_unlink(sw, f, &bad);
    if (e) zo_warn("swap: unlink '%s': %s", bad, strerror(e));
    file_free(f);
  }
}


uint64_t zo_swap_file_size(const zo_swap_file_t *f) { return f ? f->size : 0; }
const char *zo_swap_file_path(const zo_swap_file_t *f) { return f ? f->path : ""; }
int zo_swap_file_checksummed(const zo_swap_file_t *f) { return f && f->csum_chunk; }

/* Rewrite the owner marker with the names of our files and @extra (a file about to be made); 0 or -errno. */
static int record_files(zo_swap_t *sw, const char *extra) {
  size_t n = extra ? 1 : 0;
  for (const zo_swap_file_t *f = sw->files; f; f = f->next) n++;
  const char **names = malloc((n ? n : 1) * sizeof *names);
  if (!names) return -ENOMEM;
  size_t i = 0;
  for (const zo_swap_file_t *f = sw->files; f; f = f->next) names[i++] = f->name;
  if (extra) names[i++] = extra;
  int ret = 0;
  for (unsigned d = 0; d < sw->n_dirs && !ret; d++)
    ret = zo_swap_dir_record(zo_swap_dir_at(sw, d), names, n);
  free(names);
  return ret;
}

zo_status zo_swap_file_create(zo_swap_t *sw, const char *name, uint64_t nbytes,
                              zo_swap_file_t **out) {
  return zo_swap_file_create_ex(sw, name, nbytes, NULL, out);
}

/* The arguments of zo_swap_file_create_ex; whether the file is checksummed and in chunks of how many bytes. */
static zo_status file_check_args(const zo_swap_t *sw, const char *name, uint64_t nbytes,
                                 const zo_swap_file_opts *fo, int *checksum, size_t *chunk) {
  size_t nl = strlen(name);
  int ctrl = 0; /* a newline would split the name's line in the owner marker */
  for (const unsigned char *c = (const unsigned char *)name; *c; c++)
    ctrl |= *c < 0x20 || *c == 0x7f;
  if (!nl || nl >= 200 || ctrl || strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, "..") ||
      zo_swap_dir_reserved(name))
    return zo_error_set(
        ZO_ERR_INVALID_ARG,
        "swap: bad swap file name '%s' (need 1..199 bytes, no '/' or control characters, not . .. %s "
        "or %s)",
        name, ZO_SWAP_DIR_MARKER, ZO_SWAP_DIR_PROBE);
  if (nbytes > (uint64_t)INT64_MAX)
    return zo_error_set(ZO_ERR_INVALID_ARG, "swap: file '%s': size %" PRIu64 " bytes too large",
                        name, nbytes);
  *checksum = (fo && fo->checksum) || sw->checksum_default;
  *chunk = fo && fo->checksum_chunk ? fo->checksum_chunk : sw->align;
  if (*checksum && *chunk % sw->align)
    return zo_error_set(ZO_ERR_INVALID_ARG,
                        "swap: file '%s': checksum_chunk %zu bytes is not a multiple of %zu", name,
                        *chunk, sw->align);
  return ZO_OK;
}

/* A file record of @nbytes, not opened yet: its path, one free extent over its aligned length, and the checksum
 * arrays when @checksum (chunks of @chunk bytes). */
static zo_status file_new(zo_swap_t *sw, const char *name, uint64_t nbytes, int checksum,
                          size_t chunk, zo_swap_file_t **out) {
  zo_swap_file_t *f = calloc(1, sizeof *f);
  if (!f) return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "swap: out of memory for file '%s'", name);
  f->sw = sw;
  f->size = nbytes;
  f->slot = -1;
  f->fd = -1;
  snprintf(f->path, sizeof f->path, "%s/%.199s", sw->pdir.path, name);
  f->name = f->path + strlen(sw->pdir.path) + 1;
  if (sw->n_dirs > 1) {
    f->xparts = calloc(sw->n_dirs - 1, sizeof *f->xparts);
    if (!f->xparts) goto oom;
    for (unsigned i = 1; i < sw->n_dirs; i++) {
      zo_swap_part_t *pt = &f->xparts[i - 1];
      pt->fd = pt->slot = -1;
      size_t n = strlen(sw->xdirs[i - 1].path) + strlen(name) + 2;
      if (!(pt->path = malloc(n))) goto oom;
      snprintf(pt->path, n, "%s/%s", sw->xdirs[i - 1].path, name);
    }
  }
  uint64_t usable = nbytes / sw->align * sw->align;
  if (usable) {
    f->free_ext = malloc(sizeof *f->free_ext);
    if (!f->free_ext) goto oom;
    *f->free_ext = (zo_swap_ext_t){0, usable, NULL};
    f->free_bytes = usable;
  }
  if (checksum) {
    f->csum_chunk = chunk;
    f->n_chunks = (nbytes + chunk - 1) / chunk;
    f->crc = malloc((f->n_chunks ? f->n_chunks : 1) * sizeof *f->crc);
    f->crc_valid = calloc((f->n_chunks + 63) / 64 + 1, sizeof *f->crc_valid);
    if (!f->crc || !f->crc_valid) goto oom;
  }
  *out = f;
  return ZO_OK;
oom:
  file_free(f);
  return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "swap: out of memory for file '%s' (%" PRIu64 " bytes)",
                      name, nbytes);
}

/* Create part @part of f's file in its private directory, with O_DIRECT unless the file system refuses it
 * (then buffered, for this file and the swap's later ones); the descriptor in *fd. */
static zo_status file_open(zo_swap_t *sw, zo_swap_file_t *f, unsigned part, const char *name,
                           int *fd) {
  const int flags = O_CREAT | O_EXCL | O_NOFOLLOW | O_RDWR | O_CLOEXEC;
  const zo_swap_dir_t *d = zo_swap_dir_at(sw, part);
  if (part == 0) f->direct = 1;
  if (sw->refuse_direct || !f->direct) {
    *fd = -1;
    errno = EINVAL;
  } else {
    *fd = openat(d->fd, name, flags | O_DIRECT, 0600);
  }
  if (*fd < 0 && errno == EINVAL) {
    /* Some file systems create the file and then refuse O_DIRECT: start over buffered. */
    unlinkat(d->fd, name, 0);
    f->direct = 0;
    *fd = openat(d->fd, name, flags, 0600);
    if (*fd >= 0) {
      sw->direct = 0;
      zo_warn_once("O_DIRECT refused on %s, using buffered I/O", d->path);
    }
  }
  if (*fd < 0) {
    int e = errno;
    return zo_error_set(e == EEXIST || e == ELOOP    ? ZO_ERR_INVALID_ARG
                        : e == ENOSPC || e == EDQUOT ? ZO_ERR_IO
                                                     : sys_status(e),
                        "swap: create '%s': %s", zo_swap_part_path(f, part), strerror(e));
  }
  return ZO_OK;
}

/* Reserve @nbytes of part @part (descriptor @fd) on disk (fallocate, else ftruncate); on failure the part is
 * closed and removed. */
static zo_status file_preallocate(zo_swap_t *sw, zo_swap_file_t *f, unsigned part, int fd,
                                  const char *name, uint64_t nbytes) {
  if (!nbytes) return ZO_OK;
  int rc = fallocate(fd, 0, 0, (off_t)nbytes);
  int e = rc ? errno : 0;
  if (rc && (e == EOPNOTSUPP || e == ENOSYS)) {
    rc = ftruncate(fd, (off_t)nbytes);
    e = rc ? errno : 0;
  }
  if (!rc) return ZO_OK;
  zo_status st = zo_error_set(e == ENOSPC || e == EDQUOT || e == EFBIG ? ZO_ERR_IO : sys_status(e),
                              "swap: preallocate '%s' at offset 0, length %" PRIu64 " bytes: %s%s",
                              zo_swap_part_path(f, part), nbytes, strerror(e),
                              e == EFBIG ? " (file size limit: see ulimit -f / RLIMIT_FSIZE)" : "");
  close(fd);
  unlinkat(zo_swap_dir_at(sw, part)->fd, name, 0);
  return st;
}

/* A fixed-file slot for @fd when the ring has a free one; one try: a file without a slot just uses its
 * descriptor. */
static void file_take_slot(zo_swap_t *sw, int *fd, int *slot) {
  if (!sw->fixed_files) return;
  for (unsigned i = 0; i < SWAP_FILE_SLOTS; i++) {
    if (sw->slot_used[i]) continue;
    if (io_uring_register_files_update(&sw->ring, i, fd, 1) == 1) {
      sw->slot_used[i] = 1;
      *slot = (int)i;
    }
    break;
  }
}

/* Create, preallocate and give a slot to every part of @f; on failure the parts made are closed and
 * removed. */
static zo_status file_make_parts(zo_swap_t *sw, zo_swap_file_t *f, const char *name) {
  zo_status st = ZO_OK;
  unsigned made = 0;
  for (unsigned i = 0; i < sw->n_dirs && st == ZO_OK; i++) {
    int *fd = i ? &f->xparts[i - 1].fd : &f->fd;
    int *slot = i ? &f->xparts[i - 1].slot : &f->slot;
    const uint64_t size = zo_swap_stripe_part_size(sw, f->size, i);
    st = file_open(sw, f, i, name, fd);
    if (st == ZO_OK) st = file_preallocate(sw, f, i, *fd, name, size);
    if (st != ZO_OK) {
      *fd = -1; /* closed and removed by the failing step */
      break;
    }
    file_take_slot(sw, fd, slot);
    made++;
  }
  if (st != ZO_OK)
    for (unsigned i = 0; i < made; i++) {
      fd_close(sw, i ? &f->xparts[i - 1].fd : &f->fd, i ? &f->xparts[i - 1].slot : &f->slot);
      unlinkat(zo_swap_dir_at(sw, i)->fd, name, 0);
    }
  return st;
}

zo_status zo_swap_file_create_ex(zo_swap_t *sw, const char *name, uint64_t nbytes,
                                 const zo_swap_file_opts *fo, zo_swap_file_t **out) {
  if (out) *out = NULL;
  if (!sw || !name || !out)
    return zo_error_set(ZO_ERR_INVALID_ARG, "swap: zo_swap_file_create: %s is NULL",
                        !sw     ? "sw"
                        : !name ? "name"
                                : "out");
  int checksum;
  size_t chunk;
  ZO_CHECK(file_check_args(sw, name, nbytes, fo, &checksum, &chunk));
  zo_swap_file_t *f = NULL;
  ZO_CHECK(file_new(sw, name, nbytes, checksum, chunk, &f));
  /* Named in the owner marker before it exists, so a crash never leaves a file a later run would not recognise. */
  int rec = record_files(sw, name);
  zo_status st = ZO_OK;
  if (rec < 0)
    st = zo_error_set(sys_status(-rec),
                      "swap: file '%s': cannot record it in the owner marker '%s/%s': %s", name,
                      sw->pdir.path, ZO_SWAP_DIR_MARKER, strerror(-rec));
  if (st == ZO_OK) st = file_make_parts(sw, f, name);
  if (st != ZO_OK) {
    file_free(f);
    return st;
  }
  f->next = sw->files;
  if (sw->files) sw->files->prev = f;
  sw->files = f;
  *out = f;
  return ZO_OK;
}

zo_status zo_swap_file_remove(zo_swap_t *sw, zo_swap_file_t *f) {
  if (!f) return ZO_OK;
  if (!sw || f->sw != sw)
    return zo_error_set(ZO_ERR_INVALID_ARG, "swap: file '%s' does not belong to this swap",
                        f->path);
  if (f->n_reqs)
    return zo_error_set(ZO_ERR_INVALID_USAGE, "swap: remove '%s': %u requests not yet waited",
                        f->path, f->n_reqs);
  if (f->prev)
    f->prev->next = f->next;
  else
    sw->files = f->next;
  if (f->next) f->next->prev = f->prev;
  file_close(sw, f);
  zo_status st = ZO_OK;
  const char *bad = NULL;
  int e = file_unlink(sw, f, &bad);
  if (e) st = zo_error_set(ZO_ERR_SYSTEM, "swap: unlink '%s': %s", bad, strerror(e));
  file_free(f);
  record_files(sw, NULL); /* if this fails, the marker names a file that is gone: harmless */
  return st;
}

/* ---- extents: first fit over a sorted free list, coalesced on free ------------------------ */

uint64_t zo_swap_file_free_bytes(const zo_swap_file_t *f) { return f ? f->free_bytes : 0; }

uint64_t zo_swap_file_largest_free(const zo_swap_file_t *f) {
  uint64_t m = 0;
  for (const zo_swap_ext_t *x = f ? f->free_ext : NULL; x; x = x->next)
    if (x->len > m) m = x->len;
  return m;
}

zo_status zo_swap_extent_alloc(zo_swap_file_t *f, uint64_t nbytes, uint64_t *offset) {
  if (!f || !offset)
    return zo_error_set(ZO_ERR_INVALID_ARG, "swap: extent_alloc: %s is NULL",
                        !f ? "file" : "offset");
  if (!nbytes)
    return zo_error_set(ZO_ERR_INVALID_ARG, "swap: extent_alloc in '%s': zero bytes", f->path);
  uint64_t a = f->sw->align;
  if (nbytes > UINT64_MAX - a)
    return zo_error_set(ZO_ERR_INVALID_ARG,
                        "swap: extent_alloc in '%s': %" PRIu64 " bytes too large", f->path, nbytes);
  uint64_t need = (nbytes + a - 1) / a * a;
  zo_swap_ext_t **pp = &f->free_ext;
  while (*pp && (*pp)->len < need) pp = &(*pp)->next;
  if (!*pp)
    return zo_error_set(ZO_ERR_OUT_OF_MEMORY,
                        "swap: swap file '%s' has no free extent of %" PRIu64 " bytes (%" PRIu64
                        " bytes free, largest free extent %" PRIu64 " bytes, file size %" PRIu64
                        ")",
                        f->path, need, f->free_bytes, zo_swap_file_largest_free(f), f->size);
  zo_swap_ext_t *x = *pp;
  *offset = x->off;
  x->off += need;
  x->len -= need;
  if (!x->len) {
    *pp = x->next;
    free(x);
  }
  f->free_bytes -= need;
  return ZO_OK;
}

zo_status zo_swap_extent_free(zo_swap_file_t *f, uint64_t offset, uint64_t nbytes) {
  if (!f) return zo_error_set(ZO_ERR_INVALID_ARG, "swap: extent_free: file is NULL");
  uint64_t a = f->sw->align;
  uint64_t len = nbytes > UINT64_MAX - a ? 0 : (nbytes + a - 1) / a * a;
  if (!nbytes || !len || offset % a || offset > f->size || len > f->size - offset)
    return zo_error_set(ZO_ERR_INVALID_ARG,
                        "swap: extent_free in '%s': offset %" PRIu64 ", length %" PRIu64
                        " bytes is not an aligned extent inside the file (size %" PRIu64
                        ", alignment %" PRIu64 ")",
                        f->path, offset, nbytes, f->size, a);
  zo_swap_ext_t *prev = NULL, *next = f->free_ext;
  while (next && next->off < offset) {
    prev = next;
    next = next->next;
  }
  if ((prev && prev->off + prev->len > offset) || (next && offset + len > next->off))
    return zo_error_set(ZO_ERR_INVALID_ARG,
                        "swap: extent_free in '%s': offset %" PRIu64 ", length %" PRIu64
                        " bytes overlaps free space (double free?)",
                        f->path, offset, len);
  zo_swap_crc_forget(f, offset, len);
  f->free_bytes += len;
  if (prev && prev->off + prev->len == offset) { /* grow prev, maybe absorb next */
    prev->len += len;
    if (next && prev->off + prev->len == next->off) {
      prev->len += next->len;
      prev->next = next->next;
      free(next);
    }
    return ZO_OK;
  }
  if (next && offset + len == next->off) {
    next->off = offset;
    next->len += len;
    return ZO_OK;
  }
  zo_swap_ext_t *x = malloc(sizeof *x);
  if (!x) {
    f->free_bytes -= len; /* leaked from the allocator's view, never handed out twice */
    return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "swap: out of memory for a free extent of '%s'",
                        f->path);
  }
  *x = (zo_swap_ext_t){offset, len, next};
  if (prev)
    prev->next = x;
  else
    f->free_ext = x;
  return ZO_OK;
}
