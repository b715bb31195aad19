/*
 * data.c - zo-train's corpus loader (models/, part of zo_gpt): read a file or a
 * directory of files, split into train / val blocks by a splitmix64 hash, cut
 * byte windows. Not a tokenizer and not a streaming reader (the corpus lives in
 * memory).
 */
#include "data.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rng.h"
#include "seterr.h"

struct data_loader {
  uint8_t *split_bytes[2]; /* [DATA_TRAIN], [DATA_VAL] */
  size_t split_n[2];
  size_t total;
  char **files; /* [n_files] paths in read order */
  int n_files;
};

/* Growable byte buffer. */
typedef struct {
  uint8_t *p;
  size_t n, cap;
} bytes_t;

static int bytes_reserve(bytes_t *b, size_t extra) {
  if (b->n + extra <= b->cap) return 0;
  size_t cap = b->cap ? b->cap : 65536;
  while (cap < b->n + extra) cap *= 2;
  uint8_t *p = realloc(b->p, cap);
  if (!p) return -1;
  b->p = p;
  b->cap = cap;
  return 0;
}

/* Append the whole file at @path to @b. */
static int read_file_into(const char *path, bytes_t *b, char *err, size_t errlen) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    seterr(err, errlen, "corpus file '%s': cannot open: %s", path, strerror(errno));
    return -1;
  }
  struct stat st;
  if (fstat(fd, &st) == 0 && st.st_size > 0 && bytes_reserve(b, (size_t)st.st_size) != 0) {
    close(fd);
    seterr(err, errlen, "corpus file '%s': out of memory (%lld bytes)", path,
           (long long)st.st_size);
    return -1;
  }
  for (;;) {
    if (bytes_reserve(b, 65536) != 0) {
      close(fd);
      seterr(err, errlen, "corpus file '%s': out of memory after %zu bytes", path, b->n);
      return -1;
    }
    ssize_t r = read(fd, b->p + b->n, b->cap - b->n);
    if (r < 0) {
      if (errno == EINTR) continue;
      seterr(err, errlen, "corpus file '%s': read failed at %zu: %s", path, b->n, strerror(errno));
      close(fd);
      return -1;
    }
    if (r == 0) break;
    b->n += (size_t)r;
  }
  close(fd);
  return 0;
}

static int ends_with(const char *s, const char *suf) {
  size_t n = strlen(s), k = strlen(suf);
  return n >= k && memcmp(s + n - k, suf, k) == 0;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static int add_file(data_loader *d, const char *path) {
  char **f = realloc(d->files, (size_t)(d->n_files + 1) * sizeof *f);
  if (!f) return -1;
  d->files = f;
  d->files[d->n_files] = strdup(path);
  if (!d->files[d->n_files]) return -1;
  d->n_files++;
  return 0;
}

/* The names in directory @path, less ".", ".." and *.dat / *.u8 (zo-train's own outputs), in *@names[*@nn]. */
static int list_dir_names(const char *path, char ***names_out, size_t *nn_out, char *err,
                          size_t errlen) {
  DIR *dir = opendir(path);
  if (!dir) {
    seterr(err, errlen, "corpus '%s': cannot open directory: %s", path, strerror(errno));
    return -1;
  }
  char **names = NULL;
  size_t nn = 0, cap = 0;
  int rc = 0;
  struct dirent *e;
  errno = 0;
  while ((e = readdir(dir)) != NULL) {
    const char *nm = e->d_name;
    if (strcmp(nm, ".") == 0 || strcmp(nm, "..") == 0) continue;
    if (ends_with(nm, ".dat") || ends_with(nm, ".u8")) continue;
    if (nn == cap) {
      size_t nc = cap ? cap * 2 : 64;
      char **p = realloc(names, nc * sizeof *p);
      if (!p) {
        rc = -1;
        break;
      }
      names = p;
      cap = nc;
    }
    if (!(names[nn] = strdup(nm))) {
      rc = -1;
      break;
    }
    nn++;
  }
  closedir(dir);
  if (rc != 0) seterr(err, errlen, "corpus '%s': out of memory listing the directory", path);
  *names_out = names;
  *nn_out = nn;
  return rc;
}

/* Read the file @name of directory @path into @b if it is a regular file (symlinks, directories, devices: skipped). */
static int read_dir_entry(data_loader *d, const char *path, const char *name, bytes_t *b, char *err,
                          size_t errlen) {
  size_t plen = strlen(path);
  size_t need = plen + 1 + strlen(name) + 1;
  char *full = malloc(need);
  if (!full) {
    seterr(err, errlen, "corpus '%s': out of memory", path);
    return -1;
  }
  snprintf(full, need, "%s%s%s", path, (plen && path[plen - 1] == '/') ? "" : "/", name);
  int rc = 0;
  struct stat st;
  if (lstat(full, &st) != 0) {
    seterr(err, errlen, "corpus file '%s': cannot stat: %s", full, strerror(errno));
    rc = -1;
  } else if (S_ISREG(st.st_mode)) {
    rc = read_file_into(full, b, err, errlen);
    if (rc == 0 && add_file(d, full) != 0) {
      seterr(err, errlen, "corpus '%s': out of memory", path);
      rc = -1;
    }
  }
  free(full);
  return rc;
}

/* Read a directory's eligible regular files in sorted name order. */
static int read_dir(data_loader *d, const char *path, bytes_t *b, char *err, size_t errlen) {
  char **names = NULL;
  size_t nn = 0;
  int rc = list_dir_names(path, &names, &nn, err, errlen);
  if (rc == 0 && nn > 1)
    qsort(names, nn, sizeof *names, cmp_str); /* names is NULL for an empty directory (UBSan) */
  for (size_t i = 0; i < nn && rc == 0; i++) rc = read_dir_entry(d, path, names[i], b, err, errlen);
  for (size_t i = 0; i < nn; i++) free(names[i]);
  free(names);
  return rc;
}

void data_close(data_loader *d) {
  if (!d) return;
  free(d->split_bytes[0]);
  free(d->split_bytes[1]);
  for (int i = 0; i < d->n_files; i++) free(d->files[i]);
  free(d->files);
  free(d);
}

/* The arguments data_open() refuses before it touches the file system. */
static int check_open_args(const char *path, double val_fraction, int seq_len, char *err,
                           size_t errlen) {
  if (!path || !*path) {
    seterr(err, errlen, "data.path: empty");
    return -1;
  }
  if (!(val_fraction >= 0.0 && val_fraction < 1.0)) {
    seterr(err, errlen, "data.val_fraction: %g is out of range [0, 1)", val_fraction);
    return -1;
  }
  if (seq_len < 1) {
    seterr(err, errlen, "corpus '%s': seq_len %d must be >= 1", path, seq_len);
    return -1;
  }
  return 0;
}

/* Read the corpus at @path (a directory or a regular file, @st its stat) into @b; non-empty, or an error. */
static int read_corpus(data_loader *d, const char *path, const struct stat *st, bytes_t *b,
                       char *err, size_t errlen) {
  int rc;
  if (S_ISDIR(st->st_mode)) {
    rc = read_dir(d, path, b, err, errlen);
  } else if (S_ISREG(st->st_mode)) {
    rc = read_file_into(path, b, err, errlen);
    if (rc == 0 && add_file(d, path) != 0) {
      seterr(err, errlen, "corpus '%s': out of memory", path);
      rc = -1;
    }
  } else {
    seterr(err, errlen, "corpus '%s': not a regular file or directory", path);
    rc = -1;
  }
  if (rc != 0) return -1;
  if (b->n == 0) {
    seterr(err, errlen, "corpus '%s' is empty (0 bytes in %d file%s)", path, d->n_files,
           d->n_files == 1 ? "" : "s");
    return -1;
  }
  return 0;
}

/* Mark each of @nblk blocks val (1) or train (0) by its splitmix64 hash; at least one of each where possible. */
static void mark_val_blocks(uint8_t *is_val, size_t nblk, double val_fraction,
                            uint64_t split_seed) {
  const uint64_t key = splitmix64(split_seed);
  /* threshold on the top 53 bits, exact for val_fraction in [0, 1) */
  const uint64_t thr = (uint64_t)(val_fraction * 9007199254740992.0);
  size_t nval = 0, imin = 0, imax = 0;
  uint64_t hmin = UINT64_MAX, hmax = 0;
  for (size_t k = 0; k < nblk; k++) {
    uint64_t h = splitmix64((uint64_t)k ^ key);
    is_val[k] = (h >> 11) < thr;
    nval += is_val[k];
    if (h <= hmin) hmin = h, imin = k;
    if (h >= hmax) hmax = h, imax = k;
  }
  if (val_fraction > 0.0 && nval == 0) is_val[imin] = 1;
  if (nval == nblk && nblk > 1) is_val[imax] = 0;
}

/* Copy the blocks of @b into d->split_bytes[DATA_TRAIN] and [DATA_VAL], in order, as @is_val assigns them. */
static int copy_splits(data_loader *d, const bytes_t *b, const uint8_t *is_val, size_t nblk,
                       const char *path, char *err, size_t errlen) {
  size_t n_split[2] = {0, 0};
  for (size_t k = 0; k < nblk; k++) {
    size_t len = k + 1 == nblk ? b->n - k * DATA_BLOCK_BYTES : DATA_BLOCK_BYTES;
    n_split[is_val[k]] += len;
  }
  for (int s = 0; s < 2; s++) {
    d->split_n[s] = n_split[s];
    d->split_bytes[s] = malloc(n_split[s] ? n_split[s] : 1);
    if (!d->split_bytes[s]) {
      seterr(err, errlen, "corpus '%s': out of memory (%zu bytes)", path, n_split[s]);
      return -1;
    }
  }
  size_t pos[2] = {0, 0};
  for (size_t k = 0; k < nblk; k++) {
    size_t len = k + 1 == nblk ? b->n - k * DATA_BLOCK_BYTES : DATA_BLOCK_BYTES;
    int s = is_val[k];
    memcpy(d->split_bytes[s] + pos[s], b->p + k * DATA_BLOCK_BYTES, len);
    pos[s] += len;
  }
  return 0;
}

/* Split the corpus @b into train / val by blocks of DATA_BLOCK_BYTES. */
static int split_corpus(data_loader *d, const bytes_t *b, double val_fraction, uint64_t split_seed,
                        const char *path, char *err, size_t errlen) {
  const size_t nblk = (b->n + DATA_BLOCK_BYTES - 1) / DATA_BLOCK_BYTES;
  uint8_t *is_val = calloc(nblk, 1);
  if (!is_val) {
    seterr(err, errlen, "corpus '%s': out of memory", path);
    return -1;
  }
  mark_val_blocks(is_val, nblk, val_fraction, split_seed);
  int rc = copy_splits(d, b, is_val, nblk, path, err, errlen);
  free(is_val);
  return rc;
}

/* Each split in use holds at least one window of seq_len + 1 bytes. */
static int check_split_sizes(const data_loader *d, const char *path, double val_fraction,
                             int seq_len, char *err, size_t errlen) {
  const size_t need = (size_t)seq_len + 1;
  if (d->split_n[DATA_TRAIN] < need || (val_fraction > 0.0 && d->split_n[DATA_VAL] < need)) {
    seterr(
        err, errlen,
        "corpus '%s' has %zu bytes; need at least %zu for seq_len %d (train %zu bytes, val %zu bytes, "
        "val_fraction %g; each split needs seq_len+1 bytes)",
        path, d->total, val_fraction > 0.0 ? 2 * need : need, seq_len, d->split_n[DATA_TRAIN],
        d->split_n[DATA_VAL], val_fraction);
    return -1;
  }
  return 0;
}

int data_open(const char *path, double val_fraction, uint64_t split_seed, int seq_len,
              data_loader **out, char *err, size_t errlen) {
  if (!out) {
    seterr(err, errlen, "data_open: out is NULL");
    return -1;
  }
  *out = NULL;
  if (check_open_args(path, val_fraction, seq_len, err, errlen) != 0) return -1;
  struct stat st;
  if (stat(path, &st) != 0) {
    seterr(err, errlen, "corpus '%s': %s", path, strerror(errno));
    return -1;
  }
  data_loader *d = calloc(1, sizeof *d);
  if (!d) {
    seterr(err, errlen, "corpus '%s': out of memory", path);
    return -1;
  }
  bytes_t b = {0};
  if (read_corpus(d, path, &st, &b, err, errlen) != 0) goto fail;
  d->total = b.n;
  if (split_corpus(d, &b, val_fraction, split_seed, path, err, errlen) != 0) goto fail;
  free(b.p);
  b.p = NULL;
  if (check_split_sizes(d, path, val_fraction, seq_len, err, errlen) != 0) goto fail;
  *out = d;
  return 0;

fail:
  free(b.p);
  data_close(d);
  return -1;
}

size_t data_total_bytes(const data_loader *d) { return d ? d->total : 0; }
int data_num_files(const data_loader *d) { return d ? d->n_files : 0; }

const char *data_file_name(const data_loader *d, int i) {
  if (!d || i < 0 || i >= d->n_files) return NULL;
  return d->files[i];
}

const uint8_t *data_split_bytes(const data_loader *d, data_split split, size_t *n) {
  if (!d || (split != DATA_TRAIN && split != DATA_VAL)) {
    if (n) *n = 0;
    return NULL;
  }
  if (n) *n = d->split_n[split];
  return d->split_bytes[split];
}

int data_next_batch(const data_loader *d, data_split split, int B, int T, uint64_t *rng_state,
                    uint8_t *inputs, uint8_t *targets) {
  if (!d || !rng_state || !inputs || !targets || B < 1 || T < 1) return -1;
  if (split != DATA_TRAIN && split != DATA_VAL) return -1;
  const size_t n = d->split_n[split];
  if (n < (size_t)T + 1) return -1;
  const uint8_t *src = d->split_bytes[split];
  const uint64_t range = (uint64_t)(n - (size_t)T); /* starts 0 .. n-T-1 */
  for (int b = 0; b < B; b++) {
    uint64_t r = splitmix64_next(rng_state);
    /* Lemire's multiply-shift maps r onto [0, range) */
    size_t start = (size_t)(((unsigned __int128)r * range) >> 64);
    memcpy(inputs + (size_t)b * T, src + start, (size_t)T);
    memcpy(targets + (size_t)b * T, src + start + 1, (size_t)T);
  }
  return 0;
}

int data_val_windows(const data_loader *d, int T, int max_windows) {
  if (!d || T < 1 || max_windows < 1) return 0;
  size_t n = d->split_n[DATA_VAL];
  if (n < (size_t)T + 1) return 0;
  size_t w = (n - 1) / (size_t)T;
  return w < (size_t)max_windows ? (int)w : max_windows;
}

int data_val_batch(const data_loader *d, int T, int first, int B, uint8_t *inputs,
                   uint8_t *targets) {
  if (!d || !inputs || !targets || T < 1 || B < 1 || first < 0) return -1;
  size_t n = d->split_n[DATA_VAL];
  size_t avail = n >= (size_t)T + 1 ? (n - 1) / (size_t)T : 0;
  if ((size_t)first + (size_t)B > avail) return -1;
  const uint8_t *src = d->split_bytes[DATA_VAL];
  for (int b = 0; b < B; b++) {
    size_t start = ((size_t)first + (size_t)b) * (size_t)T;
    memcpy(inputs + (size_t)b * T, src + start, (size_t)T);
    memcpy(targets + (size_t)b * T, src + start + 1, (size_t)T);
  }
  return 0;
}
