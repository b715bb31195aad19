/*
 * fuzz_safetensors.c - fuzz target over the safetensors writer and reader
 * (offload/checkpoint/safetensors.c). By the input's first byte:
 *   even - the rest is a safetensors file: zo_safetensors_parse() must
 *          accept it (and then hand out tensors inside the buffer: every byte
 *          is read) or refuse it with a message free of control bytes;
 *   odd  - the rest describes 1-4 tensors (names of any bytes, shapes, fp32
 *          values of any bits, F32 or BF16): a fresh engine registers and loads
 *          them, zo_engine_export_safetensors() writes them, and
 *          zo_safetensors_read() must give back the same names, shapes and
 *          bytes (BF16: zo_cast's rounding of the same values) in order; a
 *          name the export refuses must be refused with a message.
 * Seeds: a real export of a small engine, and a few tensor descriptions.
 * Built as fuzz_config.c is (tests/fuzz.cmake): libFuzzer with clang, else
 * fuzz_driver.h's main().
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt_rig.h"
#include "fuzz_driver.h"
#include "zoffload/adam.h"
#include "zoffload/checkpoint.h"
#include "zoffload/engine.h"

enum { MAX_T = 4, MAX_N = 64 };
static char g_root[512], g_out[600];
static zo_device_t *g_dev;

static void quiet(zo_log_level lvl, const char *msg, void *user) {
  (void)lvl, (void)msg, (void)user;
}

static long g_parsed, g_refused, g_trips, g_read_back,
    g_export_refused; /* what the inputs reached */

static void cleanup(void) {
  fprintf(
      stderr,
      "fuzz_safetensors: %ld files parsed, %ld refused; %ld round trips: %ld read back equal, %ld names "
      "refused by the export\n",
      g_parsed, g_refused, g_trips, g_read_back, g_export_refused);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_root);
  if (g_root[0] && system(cmd)) {}
  zo_device_destroy(g_dev);
}

static void clean_message(const char *what) {
  const char *e = zo_last_error();
  if (!e[0]) {
    fprintf(stderr, "fuzz_safetensors: %s refused with no message\n", what);
    abort();
  }
  for (const char *c = e; *c; c++)
    if ((unsigned char)*c < 0x20 || *c == 0x7f) {
      fprintf(stderr, "fuzz_safetensors: %s: a control byte 0x%02x in the message: %s\n", what,
              (unsigned char)*c, e);
      abort();
    }
}

/* ---- one tensor description, as the round trip expects it back */
typedef struct want {
  char name[128];
  int ndim;
  int64_t dims[2];
  size_t n;
  float v[MAX_N];
  uint8_t bytes[MAX_N * 4]; /* as exported: fp32 bits or bf16 */
} want;

typedef struct rt {
  want *w;
  int nt, seen;
  const char *dtype;
  size_t esz;
} rt;

static void must(zo_status st, const char *what) {
  if (st == ZO_OK) return;
  fprintf(stderr, "fuzz_safetensors: %s: %s\n", what, zo_last_error());
  abort();
}

static void fail(const rt *r, const char *what) {
  fprintf(stderr, "fuzz_safetensors: round trip, tensor %d of %d: %s\n", r->seen, r->nt, what);
  abort();
}

static int check_tensor(void *user, const char *name, const char *dtype, int ndim,
                        const int64_t *dims, const void *data, size_t nbytes) {
  rt *r = user;
  if (r->seen >= r->nt) fail(r, "more tensors than were written");
  const want *w = &r->w[r->seen];
  if (strcmp(name, w->name)) fail(r, "another name");
  if (strcmp(dtype, r->dtype)) fail(r, "another dtype");
  if (ndim != w->ndim || memcmp(dims, w->dims, (size_t)ndim * sizeof *dims))
    fail(r, "another shape");
  if (nbytes != w->n * r->esz || memcmp(data, w->bytes, nbytes)) fail(r, "other bytes");
  r->seen++;
  return 0;
}

static int touch(void *user, const char *name, const char *dtype, int ndim, const int64_t *dims,
                 const void *data, size_t nbytes) {
  uint64_t *sum = user;
  *sum += strlen(name) + strlen(dtype) + (uint64_t)ndim;
  for (int d = 0; d < ndim; d++) *sum += (uint64_t)dims[d];
  for (size_t i = 0; i < nbytes; i++)
    *sum += ((const uint8_t *)data)[i]; /* ASan sees any read past the buffer */
  return 0;
}

/* Take @n bytes from the input (zeros past its end). */
static void take(const uint8_t **d, size_t *left, void *out, size_t n) {
  size_t k = n < *left ? n : *left;
  memcpy(out, *d, k);
  memset((uint8_t *)out + k, 0, n - k);
  *d += k, *left -= k;
}

static void round_trip(const uint8_t *d, size_t left) {
  want w[MAX_T];
  uint8_t hdr[2];
  take(&d, &left, hdr, 2);
  const int nt = 1 + hdr[0] % MAX_T;
  const int bf16 = hdr[1] & 1;
  for (int t = 0; t < nt; t++) {
    uint8_t h[3];
    take(&d, &left, h, 3);
    size_t len = 1 + h[0] % 12;
    take(&d, &left, w[t].name, len);
    w[t].name[len] = 0;
    for (size_t i = 0; i < len; i++)
      if (!w[t].name[i]) w[t].name[i] = 'x'; /* a C string: a NUL would end the name early */
    w[t].n = 1 + h[1] % MAX_N;
    const size_t rows = 1 + h[2] % 8;
    w[t].ndim = w[t].n % rows == 0 && rows > 1 ? 2 : 1;
    w[t].dims[0] = w[t].ndim == 2 ? (int64_t)rows : (int64_t)w[t].n;
    w[t].dims[1] = w[t].ndim == 2 ? (int64_t)(w[t].n / rows) : 0;
    take(&d, &left, w[t].v,
         w[t].n * sizeof(float)); /* any bits: NaN payloads, infinities, subnormals */
  }
  zo_config_t c;
  ckpt_rig_config(&c);
  zo_engine_t *e = NULL;
  zo_param_t *p[MAX_T];
  int ok = zo_engine_create(&c, g_dev, NULL, &e) == ZO_OK;
  int registered = 0;
  for (int t = 0; t < nt && ok; t++, registered++)
    if (zo_engine_register_param(e, w[t].name, w[t].n, &p[t]) != ZO_OK)
      break; /* a duplicate name: refused */
  if (ok && registered == nt) {
    for (int t = 0; t < nt && ok; t++)
      if (w[t].ndim == 2) must(zo_engine_set_param_shape(p[t], 2, w[t].dims), "set_param_shape");
    must(zo_engine_finalize(e), "finalize");
    for (int t = 0; t < nt; t++) must(zo_engine_load_param(e, p[t], w[t].v), "load_param");
    const zo_dtype dt = bf16 ? ZO_DTYPE_BF16 : ZO_DTYPE_F32;
    for (int t = 0; t < nt; t++) {
      if (bf16) {
        must(zo_cast(w[t].bytes, ZO_DTYPE_BF16, w[t].v, ZO_DTYPE_F32, w[t].n, 0), "cast");
      } else {
        memcpy(w[t].bytes, w[t].v, w[t].n * sizeof(float));
      }
    }
    g_trips++;
    if (zo_engine_export_safetensors(e, g_out, dt) != ZO_OK) {
      g_export_refused++;
      if (zo_last_error()[0] == 0) abort();
      clean_message("export");
      if (!strstr(zo_last_error(), "UTF-8")) { /* the one refusal expected here */
        fprintf(stderr, "fuzz_safetensors: export refused: %s\n", zo_last_error());
        abort();
      }
    } else {
      rt r = {w, nt, 0, bf16 ? "BF16" : "F32", bf16 ? 2 : 4};
      if (zo_safetensors_read(g_out, check_tensor, &r) != ZO_OK) {
        fprintf(stderr, "fuzz_safetensors: the export does not read back: %s\n", zo_last_error());
        abort();
      }
      if (r.seen != nt) fail(&r, "fewer tensors than were written");
      g_read_back++;
    }
  }
  zo_engine_destroy(e);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
#ifdef ZO_LIBFUZZER
  fuzz_find_seed_dir(*argc, *argv);
#else
  (void)argc, (void)argv;
#endif
  zo_log_set_handler(quiet, NULL, ZO_LOG_DEBUG);
  const char *t = getenv("TMPDIR");
  snprintf(g_root, sizeof g_root, "%s/zo-fuzz-st.XXXXXX", t && t[0] ? t : "/tmp");
  if (!mkdtemp(g_root)) abort();
  must(zo_device_create(ZO_DEVICE_HOST, 0, 0, &g_dev), "device");
  atexit(cleanup);
  snprintf(g_out, sizeof g_out, "%s/out.safetensors", g_root);
  /* seeds: tensor descriptions (odd first byte), then a real export read back as a file (even first byte) */
  uint8_t s[1 + 2 + 4 * (3 + 12 + MAX_N * 4)];
  for (int k = 0; k < 3; k++) {
    size_t n = 0;
    s[n++] = 1, s[n++] = (uint8_t)(k + 1), s[n++] = (uint8_t)k;
    for (int t = 0; t <= k; t++) {
      s[n++] = 5, s[n++] = (uint8_t)(8 * (t + 1) - 1), s[n++] = 3;
      memcpy(s + n, "h.0.w.bias", 6), s[n + 5] = (uint8_t)('0' + t), n += 6;
      for (int j = 0; j < 8 * (t + 1); j++, n += 4) {
        float f = (float)j * 0.25f - 1.0f;
        memcpy(s + n, &f, 4);
      }
    }
    char nm[32];
    snprintf(nm, sizeof nm, "seed-tensors-%d", k);
    fuzz_add_seed(nm, s, n);
  }
  /* one tensor "wte" of 2 x 2 in BF16: 1.0, 2.0, 3.0, -0.5 */
  static const uint8_t desc[] = {1, 0, 1, 2,  3, 1, 'w', 't', 'e', 0, 0, 128, 63,
                                 0, 0, 0, 64, 0, 0, 64,  64,  0,   0, 0, 191};
  round_trip(desc + 1, sizeof desc - 1); /* writes g_out: a real export */
  FILE *f = fopen(g_out, "rb");
  if (!f) {
    fprintf(stderr, "fuzz_safetensors: the seed export was not written\n");
    abort();
  }
  uint8_t *b = malloc(1 << 16);
  b[0] = 0;
  size_t n = fread(b + 1, 1, (1 << 16) - 1, f);
  fclose(f);
  fuzz_add_seed("seed-export.safetensors", b, n + 1);
  free(b);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size && (data[0] & 1)) {
    round_trip(data + 1, size - 1);
    return 0;
  }
  uint64_t sum = 0;
  const uint8_t *b = size ? data + 1 : data;
  if (zo_safetensors_parse(b, size ? size - 1 : 0, touch, &sum) != ZO_OK) {
    clean_message("parse");
    g_refused++;
  } else {
    g_parsed++;
  }
  return 0;
}
