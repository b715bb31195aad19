/*
 * fuzz_checkpoint.c - fuzz target over what reads a checkpoint: the manifest
 * (offload/checkpoint/save.c's checks of every field against the engine), the
 * `latest` file, and zo-train's app_state (tools/zo-train/ckpt.c), through
 * train_ckpt_load() as --resume calls it. Start-up (LLVMFuzzerInitialize)
 * makes a small fp16 engine and saves a real checkpoint of it in a temporary
 * directory; its manifest and its `latest` line are the seeds. Each input is
 * then, by its first byte: 'L' - the rest as a root's `latest` (naming a
 * directory that holds the real checkpoint's files); anything else - the
 * whole input as manifest.json beside the real rank00000.bin. A refusal must
 * carry a message with no control byte in it (file content is quoted through
 * zo_escape); anything else is a crash (abort). Built as fuzz_config.c is
 * (tests/fuzz.cmake): libFuzzer with clang, else fuzz_driver.h's main().
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt_rig.h"
#include "ckpt.h"
#include "fuzz_driver.h"
#include "zoffload/checkpoint.h"
#include "zoffload/engine.h"

enum { NP = 3 };
static zo_device_t *g_dev;
static zo_engine_t *g_eng;
static gpt_config g_model = {.n_layer = 2, .n_head = 2, .d_model = 32, .seq_len = 32, .vocab = 256};
static char g_root[512], g_in[600], g_ldir[600];

static void quiet(zo_log_level lvl, const char *msg, void *user) {
  (void)lvl, (void)msg, (void)user;
}

static long g_loaded, g_refused; /* what the inputs reached */

static void cleanup(void) {
  fprintf(stderr, "fuzz_checkpoint: %ld inputs resumed, %ld refused\n", g_loaded, g_refused);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_root);
  if (g_root[0] && system(cmd)) {}
  zo_engine_destroy(g_eng);
  zo_device_destroy(g_dev);
}

static void die(const char *what) {
  fprintf(stderr, "fuzz_checkpoint: start-up: %s: %s\n", what, zo_last_error());
  abort();
}

static void write_file(const char *path, const void *p, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f) die(path);
  if (n && fwrite(p, 1, n, f) != n) die(path);
  fclose(f);
}

static char *read_all(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) die(path);
  char *b = malloc(1 << 20);
  *n = fread(b, 1, 1 << 20, f);
  fclose(f);
  return b;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
#ifdef ZO_LIBFUZZER
  fuzz_find_seed_dir(*argc, *argv);
#else
  (void)argc, (void)argv;
#endif
  /* warnings are expected; every path of the logger still runs */
  zo_log_set_handler(quiet, NULL, ZO_LOG_DEBUG);
  const char *t = getenv("TMPDIR");
  snprintf(g_root, sizeof g_root, "%s/zo-fuzz-ckpt.XXXXXX", t && t[0] ? t : "/tmp");
  if (!mkdtemp(g_root)) die("mkdtemp");
  atexit(cleanup);
  zo_config_t c;
  ckpt_rig_config(&c);
  c.fp16.enabled = 1; /* the loss scaler's fields are checked in their fp16 ranges */
  static const char *const names[NP] = {"wte", "h.0.ln.bias", "lm_head.weight"};
  static const size_t ns[NP] = {96, 7, 64};
  const int64_t dims[2] = {8, 8};
  zo_param_t *p[NP];
  if (zo_device_create(ZO_DEVICE_HOST, 0, 0, &g_dev) || zo_engine_create(&c, g_dev, NULL, &g_eng))
    die("engine");
  for (int i = 0; i < NP; i++)
    if (zo_engine_register_param(g_eng, names[i], ns[i], &p[i])) die("register");
  if (zo_engine_set_param_shape(p[2], 2, dims) || zo_engine_finalize(g_eng)) die("finalize");
  float v[96];
  for (int i = 0; i < NP; i++) {
    for (size_t j = 0; j < ns[i]; j++) v[j] = (float)(i + 1) * 0.01f * (float)j;
    if (zo_engine_load_param(g_eng, p[i], v)) die("load_param");
  }
  char ref[600], err[512], saved[700], path[800], src[800];
  snprintf(ref, sizeof ref, "%s/ref", g_root);
  train_position pos = {.step = 0, .rng = 0x1234, .skipped = 0};
  if (train_ckpt_save(g_eng, ref, &pos, 42, &g_model, 0, saved, sizeof saved, err, sizeof err))
    die(err);
  /* g_in: manifest.json from each input beside the real shard file; g_ldir: a root whose step directory holds both */
  snprintf(g_in, sizeof g_in, "%s/in", g_root);
  snprintf(g_ldir, sizeof g_ldir, "%s/l", g_root);
  snprintf(path, sizeof path, "%s/step-000000000000", g_ldir);
  if (mkdir(g_in, 0755) || mkdir(g_ldir, 0755) || mkdir(path, 0755)) die("mkdir");
  static const char *const files[] = {"rank00000.bin", "manifest.json"};
  for (int f = 0; f < 2; f++) {
    snprintf(src, sizeof src, "%s/%s", saved, files[f]);
    snprintf(path, sizeof path, "%s/step-000000000000/%s", g_ldir, files[f]);
    if (link(src, path)) die("link");
    snprintf(path, sizeof path, "%s/%s", g_in, files[f]);
    if (f == 0 && link(src, path)) die("link");
  }
  size_t n;
  char *m = read_all(src, &n); /* the real manifest, app_state included */
  fuzz_add_seed("seed-manifest.json", m, n);
  free(m);
  static const char latest[] = "Lstep-000000000000\n";
  fuzz_add_seed("seed-latest", latest, sizeof latest - 1);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char path[700], err[1024] = "";
  const char *from;
  if (size && data[0] == 'L') {
    snprintf(path, sizeof path, "%s/latest", g_ldir);
    write_file(path, data + 1, size - 1);
    from = g_ldir;
  } else {
    snprintf(path, sizeof path, "%s/manifest.json", g_in);
    write_file(path, data, size);
    from = g_in;
  }
  train_position pos;
  if (train_ckpt_load(g_eng, from, &g_model, &pos, err, sizeof err) == 0) {
    if (pos.step < 0 || pos.skipped < 0 || pos.skipped > pos.step)
      abort(); /* a position the loop cannot take */
    g_loaded++;
    return 0;
  }
  g_refused++;
  if (!err[0]) abort(); /* every refusal has a message */
  for (const char *c = err; *c; c++)
    if ((unsigned char)*c < 0x20 || *c == 0x7f) {
      fprintf(stderr, "fuzz_checkpoint: a control byte 0x%02x in the message: %s\n",
              (unsigned char)*c, err);
      abort();
    }
  return 0;
}
