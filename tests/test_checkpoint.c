/*
 * test_checkpoint.c - zo_engine_save / zo_engine_load (zoffload/checkpoint.h)
 * at the API: a saved engine and a fresh one loaded from it take the next
 * steps to the same master weights bit for bit; app_state round-trips;
 * keep_last prunes; leftovers of a killed save go; and each error the header
 * lists comes back with its status and names the thing (state dtype, tensor,
 * malformed manifest, missing file, usage mid-step, bad app_state). The
 * every-tier, crash and disk-full cases run through zo-train in
 * zo_train_resume.sh, zo_train_crash.sh and zo_train_ckpt_diskfull.sh.
 *
 * usage: test_checkpoint [--backend host|cuda] [SCRATCH_BASE]   Exit 0 pass, 1 fail, 77 skip. ctest
 * test_checkpoint_fakecuda runs the cuda backend against the stand-in runtime (tests/fake_cudart.c).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base_internal.h"
#include "zo_test.h"
#include "zoffload/adam.h"
#include "zoffload/checkpoint.h"
#include "zoffload/engine.h"
#include "zo_test_backend.h"

/* REQUIRE_OK for main(): stop with the verdict so far */
#define REQ(expr)                                                  \
  do {                                                             \
    if (!CHECK_OK(expr)) return zo_test_finish("test_checkpoint"); \
  } while (0)

#define CHECK_STR(got, want) \
  (strcmp((got), (want)) == 0 ? 1 : FAIL_AT("%s = \"%s\", expected \"%s\"", #got, (got), (want)))

enum { NP = 3 };
static const size_t k_n[NP] = {1000, 37, 4096};
static const char *const k_names[NP] = {"wte", "ln.bias", "fc.weight"};

typedef struct rig {
  zo_device_t *dev;
  zo_engine_t *e;
  zo_param_t *p[NP];
  void *dgrad;
} rig;

static zo_status rig_open(rig *r, int state_bf16, const char *rename0) {
  memset(r, 0, sizeof *r);
  zo_config_t c;
  zo_config_defaults(&c);
  c.train_batch_size = c.train_micro_batch_size_per_gpu = c.gradient_accumulation_steps = 1;
  c.optimizer.type = ZO_OPT_ADAMW;
  c.optimizer.adam_w_mode = 1;
  c.optimizer.lr = 1e-2;
  c.zero.stage = 2;
  c.zero.offload_optimizer.device = ZO_OFFLOAD_CPU;
  c.zoffload.adam_threads = 1;
  c.zoffload.optimizer_state_dtype = state_bf16 ? ZO_DTYPE_BF16 : ZO_DTYPE_F32;
  zo_status st = zo_test_device_create(0, &r->dev);
  if (st == ZO_OK) st = zo_engine_create(&c, r->dev, NULL, &r->e);
  for (int i = 0; i < NP && st == ZO_OK; i++)
    st = zo_engine_register_param(r->e, i == 0 && rename0 ? rename0 : k_names[i], k_n[i], &r->p[i]);
  if (st == ZO_OK) st = zo_device_malloc(r->dev, 3 * 4096 * 4, &r->dgrad);
  if (st == ZO_OK) st = zo_engine_finalize(r->e);
  float *v = malloc(4096 * sizeof(float));
  uint64_t seed = 7;
  for (int i = 0; i < NP && st == ZO_OK; i++) {
    for (size_t j = 0; j < k_n[i]; j++) v[j] = zo_test_rand_pm1f(&seed);
    st = zo_engine_load_param(r->e, r->p[i], v);
  }
  free(v);
  return st;
}

static void rig_close(rig *r) {
  zo_engine_destroy(r->e);
  zo_device_destroy(r->dev);
}

/* one step with gradients that depend on (step, tensor) only; each tensor's gradient in its own part of dgrad */
static zo_status rig_step(rig *r, int step) {
  float g[4096], h[4096];
  const zo_dtype gd = zo_engine_grad_dtype(r->e);
  zo_status st = ZO_OK;
  size_t off = 0;
  for (int i = 0; i < NP && st == ZO_OK; i++) {
    uint64_t seed = 1000u * (uint64_t)step + (uint64_t)i;
    for (size_t j = 0; j < k_n[i]; j++) g[j] = zo_test_rand_pm1f(&seed) * 0.1f;
    void *dst = (char *)r->dgrad + off; /* device memory: filled by a copy, never by a host write */
    st = zo_cast(h, gd, g, ZO_DTYPE_F32, k_n[i], 1);
    if (st == ZO_OK) st = zo_memcpy(r->dev, dst, h, k_n[i] * zo_dtype_size(gd), ZO_COPY_H2D);
    if (st == ZO_OK) st = zo_engine_grad_ready(r->e, r->p[i], dst, gd);
    off += (k_n[i] * zo_dtype_size(gd) + 255) / 256 * 256;
  }
  zo_step_info info;
  return st == ZO_OK ? zo_engine_step(r->e, &info) : st;
}

static int same_master(rig *a, rig *b) {
  float x[4096], y[4096];
  for (int i = 0; i < NP; i++) {
    if (zo_engine_get_master(a->e, a->p[i], x, NULL, NULL) ||
        zo_engine_get_master(b->e, b->p[i], y, NULL, NULL))
      return 0;
    if (memcmp(x, y, k_n[i] * sizeof(float))) return 0;
  }
  return 1;
}

static int count_tensor(void *user, const char *name, const char *dtype, int ndim,
                        const int64_t *dims, const void *data, size_t nbytes) {
  int *seen = user;
  (void)dtype, (void)ndim, (void)dims, (void)data;
  if (strcmp(name, k_names[*seen]) || nbytes != k_n[*seen] * sizeof(float)) return 1;
  (*seen)++;
  return 0;
}

static int count_dirs(const char *root, const char *prefix) {
  DIR *d = opendir(root);
  int n = 0;
  struct dirent *de;
  while (d && (de = readdir(d)))
    if (!strncmp(de->d_name, prefix, strlen(prefix))) n++;
  if (d) closedir(d);
  return n;
}

/* zo_save_opts.on_removed: appends "<leftover>:<path relative to the root> " to the string at @user */
static void record_removed(const char *path, int leftover, void *user) {
  char *log = user;
  const char *name = strrchr(path, '/');
  snprintf(log + strlen(log), 1024 - strlen(log), "%d:%s ", leftover, name ? name + 1 : path);
}

int main(int argc, char **argv) {
  int rc = zo_test_backend_arg("test_checkpoint", "[SCRATCH_BASE]", &argc, &argv);
  if (rc) return rc;
  char root[512], path[1024], *app = NULL;
  snprintf(root, sizeof root, "%s/ckpt-test.%d", argc > 1 ? argv[1] : ".", (int)getpid());
  rig a, b;
  REQ(rig_open(&a, 0, NULL));
  for (int s = 1; s <= 3; s++) REQ(rig_step(&a, s));

  /* bad app_state, and saving mid-step, are refused; nothing is written */
  zo_save_opts o = {.tag = 3, .app_state = "[1, 2]", .keep_last = 2};
  CHECK_ST(zo_engine_save(a.e, root, &o, NULL, 0), ZO_ERR_INVALID_ARG);
  CHECK_HAS(zo_last_error(), "app_state");
  o.app_state = "{\"data\": {\"rng\": \"00ff\"}, \"epoch\": 2}";
  REQ(zo_engine_grad_ready(a.e, a.p[0], a.dgrad, zo_engine_grad_dtype(a.e)));
  CHECK_ST(zo_engine_save(a.e, root, &o, NULL, 0), ZO_ERR_INVALID_USAGE);
  CHECK_HAS(zo_last_error(), "between");
  rig_close(&a);
  REQ(rig_open(&a, 0, NULL));
  for (int s = 1; s <= 3; s++) REQ(rig_step(&a, s));

  /* save at 3, a leftover of a killed save beside it, then resume into a fresh engine */
  REQ(zo_engine_save(a.e, root, &o, path, sizeof path));
  CHECK_HAS(path, "step-000000000003");
  char junk[1100];
  /* a pid no process has: above 2^22 */
  snprintf(junk, sizeof junk, "%s/.tmp-step-000000000009.4194305", root);
  CHECK(mkdir(junk, 0755) == 0);
  REQ(rig_open(&b, 0, NULL));
  REQ(zo_engine_load(b.e, root, &app));
  CHECK(app && strstr(app, "\"epoch\": 2") == NULL && strstr(app, "\"epoch\":2") != NULL);
  free(app);
  CHECK(same_master(&a, &b));
  for (int s = 4; s <= 6; s++) {
    REQ(rig_step(&a, s));
    REQ(rig_step(&b, s));
  }
  CHECK(
      same_master(&a,
                  &b)); /* Adam state and step came back too: the next updates agree bit for bit */

  /* zo_engine_load_ex: weights_only (DeepSpeed's load_module_only) into a fresh engine with another lr: the masters
   * of step 3, but Adam's moments, step and lr schedule as a fresh engine's, so its next step is a first Adam step
   * from those masters (r: a fresh engine given them by zo_engine_load_param) bit for bit; the checkpoint's state
   * dtype (f32) need not be this engine's (bf16). not_strict: matched by name, the unmatched ones reported. */
  {
    rig full, f, r, s16;
    static float m[4096];
    REQ(rig_open(&full, 0, NULL));
    REQ(zo_engine_load(full.e, root, NULL));
    REQ(rig_open(&f, 0, NULL));
    REQ(rig_open(&r, 0, NULL));
    REQ(zo_engine_set_lr(f.e, 3e-3));
    REQ(zo_engine_set_lr(r.e, 3e-3));
    zo_load_opts lo = {.weights_only = 1};
    REQ(zo_engine_load_ex(f.e, root, &lo, &app));
    CHECK(app && strstr(app, "\"epoch\":2") != NULL); /* app_state still comes back */
    free(app);
    CHECK_EQ(lo.n_missing, 0);
    CHECK_EQ(zo_engine_steps_applied(f.e), 0);
    CHECK_EQ(zo_engine_steps_applied(full.e), 3);
    CHECK(same_master(&f, &full));
    for (int i = 0; i < NP; i++) {
      REQ(zo_engine_get_master(full.e, full.p[i], m, NULL, NULL));
      REQ(zo_engine_load_param(r.e, r.p[i], m));
    }
    REQ(rig_step(&f, 4));
    REQ(rig_step(&r, 4));
    CHECK(same_master(&f, &r));
    CHECK_EQ(zo_engine_steps_applied(f.e), 1);
    REQ(rig_open(&s16, 1, NULL));
    REQ(zo_engine_load_ex(s16.e, root, &lo, NULL));
    CHECK(same_master(&s16, &full));
    rig_close(&s16);
    rig_close(&r);
    rig_close(&f);

    rig n, fresh;
    char unmatched[1024] = "";
    REQ(rig_open(&n, 0, "tok_embeddings"));
    REQ(rig_open(&fresh, 0, NULL));
    zo_load_opts ns = {.not_strict = 1, .on_unmatched = record_removed, .user = unmatched};
    REQ(zo_engine_load_ex(n.e, root, &ns, NULL));
    CHECK_STR(unmatched, "0:tok_embeddings 1:wte ");
    CHECK_EQ(ns.n_missing, 1);
    CHECK_EQ(ns.n_unexpected, 1);
    CHECK_EQ(zo_engine_steps_applied(n.e), 3);
    static float x[4096], y[4096];
    REQ(zo_engine_get_master(n.e, n.p[0], x, NULL, NULL)); /* missing: keeps its values */
    REQ(zo_engine_get_master(fresh.e, fresh.p[0], y, NULL, NULL));
    CHECK(memcmp(x, y, k_n[0] * sizeof(float)) == 0);
    for (int i = 1; i < NP; i++) { /* matched: the checkpoint's */
      REQ(zo_engine_get_master(n.e, n.p[i], x, NULL, NULL));
      REQ(zo_engine_get_master(full.e, full.p[i], y, NULL, NULL));
      CHECK(memcmp(x, y, k_n[i] * sizeof(float)) == 0);
    }
    rig_close(&fresh);
    rig_close(&n);
    rig_close(&full);
  }

  /* keep_last 2 over saves at 4, 5, 6: only 5 and 6 stay; the leftover is gone; on_removed names each */
  char removed[1024] = "";
  o.on_removed = record_removed, o.user = removed;
  for (int t = 4; t <= 6; t++) {
    o.tag = t;
    REQ(zo_engine_save(a.e, root, &o, NULL, 0));
  }
  CHECK_STR(removed, "1:.tmp-step-000000000009.4194305 0:step-000000000003 0:step-000000000004 ");
  o.on_removed = NULL, o.user = NULL;
  CHECK_EQ(count_dirs(root, "step-"), 2);
  CHECK_EQ(count_dirs(root, ".tmp-"), 0);
  snprintf(path, sizeof path, "%s/step-000000000005", root);
  CHECK(access(path, F_OK) == 0);

  /* named checkpoints (DeepSpeed's string tags) under a root of their own: no_latest leaves `latest` alone, a
   * second save moves it onto the name, a fresh engine resumes from it; a bad name and keep_last with a name are
   * refused. zo_engine_set_lr(): lr 0 leaves the master weights as they were, a negative lr restores the schedule */
  {
    char nroot[600], line[64] = "";
    snprintf(nroot, sizeof nroot, "%s/named", root);
    zo_save_opts on = {.tag = 3, .name = "global_step6", .no_latest = 1};
    REQ(zo_engine_save(a.e, nroot, &on, path, sizeof path));
    CHECK_HAS(path, "named/global_step6");
    snprintf(path, sizeof path, "%s/latest", nroot);
    CHECK(access(path, F_OK) != 0); /* no `latest` written */
    on.no_latest = 0;
    REQ(zo_engine_save(a.e, nroot, &on, NULL, 0));
    FILE *lf = fopen(path, "r");
    CHECK(lf && fgets(line, sizeof line, lf));
    if (lf) fclose(lf);
    CHECK_STR(line, "global_step6\n");
    rig d;
    REQ(rig_open(&d, 0, NULL));
    REQ(zo_engine_load(d.e, nroot, NULL));
    CHECK(same_master(&a, &d));
    on.name = "../up";
    CHECK_ST(zo_engine_save(a.e, nroot, &on, NULL, 0), ZO_ERR_INVALID_ARG);
    CHECK_HAS(zo_last_error(), "\"../up\"");
    on.name = "global step";
    CHECK_ST(zo_engine_save(a.e, nroot, &on, NULL, 0), ZO_ERR_INVALID_ARG);
    on.name = "ok", on.keep_last = 2;
    CHECK_ST(zo_engine_save(a.e, nroot, &on, NULL, 0), ZO_ERR_INVALID_ARG);
    CHECK_HAS(zo_last_error(), "keep_last");
    static float before[4096], after[4096];
    REQ(zo_engine_set_lr(d.e, 0.0));
    REQ(zo_engine_get_master(d.e, d.p[2], before, NULL, NULL));
    REQ(rig_step(&d, 7));
    REQ(zo_engine_get_master(d.e, d.p[2], after, NULL, NULL));
    CHECK(memcmp(before, after, sizeof before) == 0);
    CHECK_ST(zo_engine_set_lr(d.e, NAN), ZO_ERR_INVALID_ARG);
    CHECK_ST(zo_engine_set_lr(d.e, 1e3), ZO_ERR_INVALID_ARG);
    CHECK_HAS(zo_last_error(), "set_lr");
    REQ(zo_engine_set_lr(d.e, -1));
    REQ(rig_step(&d, 8));
    REQ(zo_engine_get_master(d.e, d.p[2], after, NULL, NULL));
    CHECK(memcmp(before, after, sizeof before) != 0);
    rig_close(&d);
  }

  /* errors, each naming the thing; the engine is unchanged after each */
  rig c;
  REQ(rig_open(&c, 1, NULL));
  CHECK_ST(zo_engine_load(c.e, root, NULL), ZO_ERR_CONFIG);
  CHECK_HAS(zo_last_error(), "state_dtype");
  rig_close(&c);
  REQ(rig_open(&c, 0, "tok_embeddings"));
  CHECK_ST(zo_engine_load(c.e, root, NULL), ZO_ERR_CONFIG);
  CHECK_HAS(zo_last_error(), "tok_embeddings");
  rig_close(&c);
  REQ(rig_open(&c, 0, NULL));
  CHECK_ST(zo_engine_load(c.e, "/nonexistent/ckpt", NULL), ZO_ERR_IO);
  CHECK_HAS(zo_last_error(), "/nonexistent/ckpt");
  snprintf(path, sizeof path, "%s/step-000000000005/manifest.json", root);
  CHECK(truncate(path, 40) == 0); /* a manifest cut short */
  snprintf(path, sizeof path, "%s/step-000000000005", root);
  CHECK_ST(zo_engine_load(c.e, path, NULL), ZO_ERR_CONFIG);
  CHECK_HAS(zo_last_error(), "malformed JSON");
  snprintf(path, sizeof path, "%s/step-000000000006/rank00000.bin", root);
  CHECK(unlink(path) == 0);
  CHECK_ST(zo_engine_load(c.e, root, NULL), ZO_ERR_IO);
  CHECK_HAS(zo_last_error(), "rank00000.bin");
  rig_close(&b);
  REQ(rig_open(&b, 0, NULL)); /* a fresh engine's weights */
  CHECK(same_master(&b, &c)); /* c is untouched by the failed loads */
  REQ(zo_engine_grad_ready(c.e, c.p[0], c.dgrad, zo_engine_grad_dtype(c.e)));
  CHECK_ST(zo_engine_load(c.e, root, NULL), ZO_ERR_INVALID_USAGE);
  rig_close(&c);
  rig_close(&b);

  /* zo_escape: what a message quoting file content prints */
  char esc[32];
  CHECK_STR(zo_escape(esc, sizeof esc, "a\x1b[2Jb\\\xff", 8), "a\\x1b[2Jb\\x5c\\xff");
  CHECK_STR(zo_escape(esc, 8, "abcdefghij", 10), "abcd...");
  CHECK_STR(zo_escape(esc, 8, "abcdefg", 7), "abcdefg");
  CHECK_STR(zo_escape(esc, 8, "\x01\x02", 2), "\\x01...");
  CHECK_STR(zo_escape(esc, sizeof esc, NULL, 3), "(null)");

  /* zo_format_bytes: the sizes every message and report prints (were three copies: device, budget, zo-train) */
  CHECK_STR(zo_format_bytes(esc, sizeof esc, 0), "0 B");
  CHECK_STR(zo_format_bytes(esc, sizeof esc, 1023), "1023 B");
  CHECK_STR(zo_format_bytes(esc, sizeof esc, 1024), "1.0 KiB");
  CHECK_STR(zo_format_bytes(esc, sizeof esc, 1.5 * 1024 * 1024 * 1024), "1.5 GiB");
  CHECK_STR(zo_format_bytes(esc, sizeof esc, 85e9), "79.2 GiB");
  CHECK_STR(zo_format_bytes(esc, sizeof esc, 1024.0 * 1024 * 1024 * 1024 * 1024 * 3), "3.0 PiB");
  CHECK_STR(zo_format_bytes(esc, 6, 64.0 * 1024 * 1024), "64.0 ");
  /* zo_pwrite_all / zo_pread_all: whole transfers, the count moved when one stops */
  {
    snprintf(path, sizeof path, "%s/io_all.bin", root);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    CHECK(fd >= 0);
    char w[100], r[200];
    size_t done = 7;
    for (int i = 0; i < 100; i++) w[i] = (char)i;
    CHECK(zo_pwrite_all(fd, w, sizeof w, 10, &done) == 0 && done == 100);
    CHECK(zo_pread_all(fd, r, 100, 10, &done) == 0 && done == 100 && memcmp(r, w, 100) == 0);
    CHECK(zo_pread_all(fd, r, 200, 60, &done) == 1 && done == 50); /* end of file after 50 bytes */
    close(fd);
    CHECK(zo_pread_all(fd, r, 10, 0, &done) == -1 && errno == EBADF && done == 0);
    CHECK(zo_pwrite_all(fd, w, 10, 0, NULL) == -1 && errno == EBADF);
    unlink(path);
  }

  /* keep_last never removes a checkpoint newer than this save's, nor a directory of someone else's */
  snprintf(path, sizeof path, "%s/step-000000000099", root); /* newer: copied from step 6 */
  char cmd[4096];
  snprintf(cmd, sizeof cmd,
           "mkdir -p '%s' && cp '%s/step-000000000006/'* '%s/' && mkdir '%s/step-000000000001' && "
           "echo x > '%s/step-000000000001/notes.txt'",
           path, root, path, root, root);
  CHECK(system(cmd) == 0);
  o.tag = 7, o.keep_last = 1;
  REQ(zo_engine_save(a.e, root, &o, NULL, 0));
  CHECK(access(path, F_OK) == 0);
  snprintf(path, sizeof path, "%s/step-000000000001/notes.txt", root);
  CHECK(access(path, F_OK) == 0);
  snprintf(path, sizeof path, "%s/step-000000000006", root);
  CHECK(access(path, F_OK) != 0);
  /* ... and a save does not replace a same-step directory that is not a checkpoint */
  o.tag = 1;
  CHECK_ST(zo_engine_save(a.e, root, &o, NULL, 0), ZO_ERR_IO);
  CHECK_HAS(zo_last_error(), "notes.txt");

  /* safetensors: the export reads back through zo_safetensors_read; a name that is not UTF-8 is refused */
  snprintf(path, sizeof path, "%s/w.safetensors", root);
  REQ(zo_engine_export_safetensors(a.e, path, ZO_DTYPE_F32));
  int seen = 0;
  REQ(zo_safetensors_read(path, count_tensor, &seen));
  CHECK_EQ(seen, NP);
  CHECK_ST(zo_safetensors_parse("\x07\0\0\0\0\0\0\0{\"a\":1}", 15, NULL, NULL), ZO_ERR_CORRUPT);
  CHECK_HAS(zo_last_error(), "tensor 'a'");
  REQ(rig_open(&c, 0, "w\xff\xfe"));
  CHECK_ST(zo_engine_export_safetensors(c.e, path, ZO_DTYPE_F32), ZO_ERR_INVALID_ARG);
  CHECK_HAS(zo_last_error(), "w\\xff\\xfe");
  rig_close(&c);
  rig_close(&a);
  snprintf(path, sizeof path, "rm -rf '%s'", root);
  CHECK(system(path) == 0);
  return zo_test_finish("test_checkpoint");
}
