/*
 * test_data.c - zo-train's corpus loader: directory order and skipping,
 * block split (sizes add up, whole blocks, deterministic), random batches
 * (inside the split, targets = inputs shifted), the fixed val set, errors.
 * Not a test of the model.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data.h"
#include "zo_test.h"

static char g_dir[256];

static void write_file(const char *name, const void *p, size_t n) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", g_dir, name);
  FILE *f = fopen(path, "wb");
  if (!f) {
    perror(path);
    exit(1);
  }
  if (n) fwrite(p, 1, n, f);
  fclose(f);
}

static char *path_of(const char *name) {
  static char path[512];
  snprintf(path, sizeof path, "%s/%s", g_dir, name);
  return path;
}

int main(void) {
  char err[512];
  data_loader *d = NULL;
  if (zo_test_scratch_dir(NULL, "zo_test_data", g_dir, sizeof g_dir)) return ZO_TEST_SKIP;

  /* ---- directory: sorted order, skipped names, symlinks, subdirectories ---- */
  char sub[512];
  snprintf(sub, sizeof sub, "%s/corpus", g_dir);
  CHECK(mkdir(sub, 0755) == 0);
  const char *A = "alpha alpha alpha alpha alpha\n", *Bt = "bravo bravo\n", *Ct = "charlie\n";
  write_file("corpus/b_file", Bt, strlen(Bt));
  write_file("corpus/a_file", A, strlen(A));
  write_file("corpus/c_file", Ct, strlen(Ct));
  write_file("corpus/a_file.dat", "XXXXXXXX", 8);
  write_file("corpus/a_file.u8", "YYYYYYYY", 8);
  CHECK(symlink("a_file", path_of("corpus/z_link")) == 0);
  CHECK(mkdir(path_of("corpus/sub"), 0755) == 0);
  write_file("corpus/sub/inner", "ZZZZ", 4);

  CHECK(data_open(sub, 0.0, 1, 4, &d, err, sizeof err) == 0);
  if (d) {
    CHECK_EQ(data_num_files(d), 3);
    CHECK(strstr(data_file_name(d, 0), "a_file") != NULL);
    CHECK(strstr(data_file_name(d, 1), "b_file") != NULL);
    CHECK(strstr(data_file_name(d, 2), "c_file") != NULL);
    CHECK(data_file_name(d, 3) == NULL);
    size_t want = strlen(A) + strlen(Bt) + strlen(Ct), n = 0;
    CHECK_EQ(data_total_bytes(d), want);
    const uint8_t *tr = data_split_bytes(d, DATA_TRAIN, &n);
    CHECK_EQ(n, want);
    char cat[256];
    snprintf(cat, sizeof cat, "%s%s%s", A, Bt, Ct);
    CHECK(tr && memcmp(tr, cat, want) == 0);
    data_split_bytes(d, DATA_VAL, &n);
    CHECK_EQ(n, 0);
    uint8_t in[4], tg[4];
    uint64_t st = 1;
    CHECK(data_next_batch(d, DATA_VAL, 1, 4, &st, in, tg) != 0); /* empty val */
    data_close(d);
    d = NULL;
  } else {
    fprintf(stderr, "data_open: %s\n", err);
  }

  /* ---- split of a multi-block corpus ---- */
  const size_t NB = 100, tail = 1000,
               total = NB * DATA_BLOCK_BYTES + tail; /* 101 blocks, last partial */
  uint8_t *corpus = malloc(total);
  uint64_t x = 88172645463325252ull;
  for (size_t i = 0; i < total; i++) { /* xorshift bytes: windows are unique in practice */
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    corpus[i] = (uint8_t)(x >> 32);
  }
  write_file("big.txt", corpus, total);
  CHECK(data_open(path_of("big.txt"), 0.2, 42, 64, &d, err, sizeof err) == 0);
  if (d) {
    size_t ntr = 0, nva = 0;
    const uint8_t *tr = data_split_bytes(d, DATA_TRAIN, &ntr);
    const uint8_t *va = data_split_bytes(d, DATA_VAL, &nva);
    CHECK_EQ(ntr + nva, total);
    CHECK_EQ(data_total_bytes(d), total);
    CHECK_EQ(data_num_files(d), 1);
    /* each block lies whole, in order, in exactly one split */
    size_t ptr = 0, pva = 0, nvb = 0;
    for (size_t k = 0; k * DATA_BLOCK_BYTES < total; k++) {
      size_t len = total - k * DATA_BLOCK_BYTES < DATA_BLOCK_BYTES ? total - k * DATA_BLOCK_BYTES
                                                                   : DATA_BLOCK_BYTES;
      const uint8_t *blk = corpus + k * DATA_BLOCK_BYTES;
      if (ptr + len <= ntr && memcmp(tr + ptr, blk, len) == 0) {
        ptr += len;
      } else if (pva + len <= nva && memcmp(va + pva, blk, len) == 0) {
        pva += len;
        nvb++;
      } else {
        FAIL_AT("block %zu found in neither split", k);
        break;
      }
    }
    CHECK_EQ(ptr, ntr);
    CHECK_EQ(pva, nva);
    printf("split: %zu train bytes, %zu val bytes, %zu of 101 blocks in val (val_fraction 0.2)\n",
           ntr, nva, nvb);
    CHECK(nvb >= 5 && nvb <= 40);

    /* same seed: same split; another seed: another split */
    data_loader *d2 = NULL, *d3 = NULL;
    CHECK(data_open(path_of("big.txt"), 0.2, 42, 64, &d2, err, sizeof err) == 0);
    CHECK(data_open(path_of("big.txt"), 0.2, 43, 64, &d3, err, sizeof err) == 0);
    if (d2 && d3) {
      size_t n2 = 0, n3 = 0;
      const uint8_t *v2 = data_split_bytes(d2, DATA_VAL, &n2),
                    *v3 = data_split_bytes(d3, DATA_VAL, &n3);
      CHECK(n2 == nva && memcmp(v2, va, nva) == 0);
      CHECK(n3 != nva || memcmp(v3, va, nva) != 0);
    }
    data_close(d2);
    data_close(d3);

    /* random batches: windows inside the split, targets shifted by one */
    enum { BB = 16, T = 64 };
    uint8_t in[BB * T], tg[BB * T], in2[BB * T], tg2[BB * T], win[T + 1];
    for (int split = 0; split < 2; split++) {
      const uint8_t *sb = split ? va : tr;
      size_t sn = split ? nva : ntr;
      uint64_t st = 7, st2 = 7;
      int bad = 0;
      for (int it = 0; it < 20; it++) {
        CHECK(data_next_batch(d, (data_split)split, BB, T, &st, in, tg) == 0);
        for (int b = 0; b < BB && bad < 10; b++) {
          memcpy(win, in + b * T, T);
          win[T] = tg[b * T + T - 1];
          if (memcmp(in + b * T + 1, tg + b * T, T - 1) != 0 || !memmem(sb, sn, win, T + 1)) {
            if (!bad)
              fprintf(stderr, "%s:%d: split %d batch %d row %d is not a window of the split\n",
                      __FILE__, __LINE__, split, it, b);
            bad++;
          }
        }
      }
      CHECK_EQ(bad, 0);
      CHECK(data_next_batch(d, (data_split)split, BB, T, &st2, in2, tg2) == 0);
      CHECK(st2 != 7);
      uint64_t st3 = 7;
      CHECK(data_next_batch(d, (data_split)split, BB, T, &st3, in, tg) == 0);
      CHECK(memcmp(in, in2, sizeof in) == 0 && memcmp(tg, tg2, sizeof tg) == 0);
    }
    CHECK(data_next_batch(d, DATA_TRAIN, 0, T, &x, in, tg) != 0);
    /* window longer than the split */
    CHECK(data_next_batch(d, DATA_TRAIN, 1, (int)ntr, &x, in, tg) != 0);

    /* fixed val set */
    int nw = data_val_windows(d, T, 1000000);
    CHECK_EQ(nw, (nva - 1) / T);
    CHECK_EQ(data_val_windows(d, T, 5), 5);
    CHECK(data_val_batch(d, T, 3, 2, in, tg) == 0);
    CHECK(memcmp(in, va + 3 * T, T) == 0 && memcmp(tg, va + 3 * T + 1, T) == 0);
    CHECK(memcmp(in + T, va + 4 * T, T) == 0 && memcmp(tg + T, va + 4 * T + 1, T) == 0);
    CHECK(data_val_batch(d, T, nw - 1, 1, in, tg) == 0);
    CHECK(data_val_batch(d, T, nw - 1, 2, in, tg) != 0);
    data_close(d);
    d = NULL;
  } else {
    fprintf(stderr, "data_open: %s\n", err);
  }

  /* exactly seq_len+1 bytes in train: every window starts at 0 */
  write_file("tiny.txt", "0123456789", 10);
  CHECK(data_open(path_of("tiny.txt"), 0.0, 1, 9, &d, err, sizeof err) == 0);
  if (d) {
    uint8_t in[4 * 9], tg[4 * 9];
    uint64_t st = 3;
    CHECK(data_next_batch(d, DATA_TRAIN, 4, 9, &st, in, tg) == 0);
    CHECK(memcmp(in + 27, "012345678", 9) == 0 && memcmp(tg + 27, "123456789", 9) == 0);
    data_close(d);
    d = NULL;
  }

  /* ---- errors ---- */
  CHECK(data_open(path_of("does_not_exist"), 0.1, 1, 8, &d, err, sizeof err) != 0 && d == NULL);
  printf("missing: %s\n", err);
  CHECK(strstr(err, "does_not_exist") != NULL && strstr(err, "No such file") != NULL);
  write_file("empty.txt", "", 0);
  CHECK(data_open(path_of("empty.txt"), 0.1, 1, 8, &d, err, sizeof err) != 0 && d == NULL);
  printf("empty file: %s\n", err);
  CHECK(strstr(err, "empty.txt") != NULL && strstr(err, "is empty") != NULL);
  CHECK(mkdir(path_of("only_dat"), 0755) == 0);
  write_file("only_dat/x.dat", "12345", 5);
  CHECK(data_open(path_of("only_dat"), 0.1, 1, 8, &d, err, sizeof err) != 0);
  printf("empty dir: %s\n", err);
  CHECK(strstr(err, "only_dat") != NULL && strstr(err, "is empty") != NULL);
  CHECK(data_open(path_of("tiny.txt"), 0.0, 1, 64, &d, err, sizeof err) != 0);
  printf("too small: %s\n", err);
  CHECK(strstr(err, "has 10 bytes; need at least 65 for seq_len 64") != NULL);
  /* one block cannot feed two splits */
  CHECK(data_open(path_of("corpus"), 0.5, 1, 4, &d, err, sizeof err) != 0);
  CHECK(strstr(err, "need at least") != NULL);
  CHECK(data_open(path_of("big.txt"), 1.0, 1, 4, &d, err, sizeof err) != 0);
  CHECK(strstr(err, "data.val_fraction") != NULL);
  if (geteuid() != 0) { /* root reads anything */
    write_file("secret.txt", "hidden text", 11);
    chmod(path_of("secret.txt"), 0);
    CHECK(data_open(path_of("secret.txt"), 0.0, 1, 4, &d, err, sizeof err) != 0);
    printf("unreadable: %s\n", err);
    CHECK(strstr(err, "secret.txt") != NULL);
  }

  /* ---- the default corpus, when installed ---- */
  struct stat st;
  if (stat(DATA_DEFAULT_PATH, &st) == 0) {
    CHECK(data_open(DATA_DEFAULT_PATH, 0.1, 1337, 128, &d, err, sizeof err) == 0);
    if (d) {
      size_t ntr = 0, nva = 0;
      data_split_bytes(d, DATA_TRAIN, &ntr);
      data_split_bytes(d, DATA_VAL, &nva);
      printf("default corpus: %d files, %zu bytes (train %zu, val %zu)\n", data_num_files(d),
             data_total_bytes(d), ntr, nva);
      CHECK(ntr + nva == data_total_bytes(d));
      for (int i = 0; i < data_num_files(d); i++) {
        const char *f = data_file_name(d, i);
        CHECK(strstr(f, ".dat") == NULL || strcmp(f + strlen(f) - 4, ".dat") != 0);
      }
      data_close(d);
      d = NULL;
    }
  }

  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", g_dir);
  free(corpus);
  return zo_test_finish("test_data");
}
