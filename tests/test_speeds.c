/*
 * test_speeds.c - the machine speeds for the planner (zoffload/speeds.h): figures the config gives are used
 * verbatim; measured ones are positive and finite, and written to the cache; a second call reads them from the
 * cache; a damaged cache is warned about, measured again and rewritten; ZO_SPEEDS_REMEASURE ignores it; another
 * program's file at the cache path is warned about and left byte for byte; no nvme path / no device give 0 with
 * that as the source; an emulated link is what the link figures see; an application's own figure
 * (zo_speeds_figure) is measured once and then read from the same cache. Plumbing only: no speed is compared with a
 * threshold (the machine may be busy), except that an emulated link cannot be beaten.
 * Usage: test_speeds [SCRATCH_BASE] (the swap directory and the cache go in a new directory under it).
 */
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <pthread.h>
#include <unistd.h>

#include <jansson.h>

#include "zo_test.h"
#include "zoffload/config.h"
#include "zoffload/device.h"
#include "zoffload/speeds.h"

/* Warnings logged since the last reset, joined. */
static char g_warn[16384];
static size_t g_warn_len;
static pthread_mutex_t g_warn_lock =
    PTHREAD_MUTEX_INITIALIZER; /* the handler may run on library threads */

static void on_log(zo_log_level level, const char *msg, void *user) {
  (void)user;
  pthread_mutex_lock(&g_warn_lock);
  if (level == ZO_LOG_WARN && g_warn_len < sizeof g_warn - 1) {
    int n = snprintf(g_warn + g_warn_len, sizeof g_warn - g_warn_len, "%s\n", msg);
    if (n > 0) g_warn_len += (size_t)n;
    if (g_warn_len > sizeof g_warn - 1) g_warn_len = sizeof g_warn - 1;
  }
  pthread_mutex_unlock(&g_warn_lock);
  if (getenv("ZO_TEST_VERBOSE"))
    fprintf(stderr, "  [%s] %s\n", level == ZO_LOG_WARN ? "warn" : "log", msg);
}

static void warn_reset(void) {
  pthread_mutex_lock(&g_warn_lock);
  g_warn_len = 0, g_warn[0] = 0;
  pthread_mutex_unlock(&g_warn_lock);
}

/* Small measurements: the test checks plumbing, not speed. */
static const zo_speeds_opts k_small = {.disk_bytes = 8u << 20,
                                       .link_bytes = 4u << 20,
                                       .adam_elems = 1u << 18,
                                       .max_passes = 2};

static double fig(const zo_speeds *s, int i) {
  const double v[5] = {s->nvme_read_bytes_per_s, s->nvme_write_bytes_per_s, s->h2d_bytes_per_s,
                       s->d2h_bytes_per_s, s->adam_elems_per_s};
  return v[i];
}
static const char *src(const zo_speeds *s, int i) {
  const char *v[5] = {s->nvme_read_src, s->nvme_write_src, s->h2d_src, s->d2h_src, s->adam_src};
  return v[i];
}
static const char *const k_fig[5] = {"nvme_read", "nvme_write", "h2d", "d2h", "adam"};

static int starts(const char *s, const char *prefix) {
  return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* Every figure positive, finite and with a source starting with @prefix. */
static void check_all(const zo_speeds *s, const char *prefix, int line) {
  for (int i = 0; i < 5; i++) {
    if (!(isfinite(fig(s, i)) && fig(s, i) > 0))
      FAIL_AT("line %d: %s = %g, want positive and finite (src \"%s\")", line, k_fig[i], fig(s, i),
              src(s, i));
    if (!starts(src(s, i), prefix))
      FAIL_AT("line %d: %s src \"%s\", want it to start with \"%s\"", line, k_fig[i], src(s, i),
              prefix);
  }
}

static char *read_all(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *buf = malloc(1 << 20);
  *n = buf ? fread(buf, 1, (1 << 20) - 1, f) : 0;
  if (buf) buf[*n] = 0;
  fclose(f);
  return buf;
}

static void write_all(const char *path, const char *text) {
  FILE *f = fopen(path, "wb");
  if (!f) {
    FAIL_AT("cannot write %s", path);
    return;
  }
  fputs(text, f);
  fclose(f);
}

static void base_config(zo_config_t *c) {
  zo_config_defaults(c);
  c->bf16.enabled = 1;
  c->zoffload.adam_threads =
      1; /* a busy 2-core machine: one thread is enough to test the plumbing */
  c->aio.block_size = 1 << 20;
  c->aio.queue_depth = 4;
}

/* The config gives every figure: used verbatim, whatever path and device, nothing measured or cached. */
static void test_config_given(const char *dir, zo_device_t *dev, const char *cache) {
  zo_config_t c;
  base_config(&c);
  c.zoffload.speeds.nvme_read_gbps = 3.5;
  c.zoffload.speeds.nvme_write_gbps = 2.25;
  c.zoffload.speeds.h2d_gbps = 24;
  c.zoffload.speeds.d2h_gbps = 0.001;
  c.zoffload.speeds.adam_gparams_per_s = 1.5;
  zo_speeds s;
  CHECK_OK(zo_speeds_get_ex(&c, dev, dir, &k_small, &s));
  CHECK(s.nvme_read_bytes_per_s == 3.5e9);
  CHECK(s.nvme_write_bytes_per_s == 2.25e9);
  CHECK(s.h2d_bytes_per_s == 24e9);
  CHECK(s.d2h_bytes_per_s == 0.001 * 1e9);
  CHECK(s.adam_elems_per_s == 1.5e9);
  CHECK(!strcmp(s.nvme_read_src, "config zoffload.speeds.nvme_read_gbps"));
  CHECK(!strcmp(s.nvme_write_src, "config zoffload.speeds.nvme_write_gbps"));
  CHECK(!strcmp(s.h2d_src, "config zoffload.speeds.h2d_gbps"));
  CHECK(!strcmp(s.d2h_src, "config zoffload.speeds.d2h_gbps"));
  CHECK(!strcmp(s.adam_src, "config zoffload.speeds.adam_gparams_per_s"));
  struct stat sb;
  CHECK(stat(cache, &sb) != 0); /* nothing measured: no cache written */
  /* with no path and no device the config's figures still hold */
  CHECK_OK(zo_speeds_get_ex(&c, NULL, NULL, &k_small, &s));
  CHECK(s.nvme_read_bytes_per_s == 3.5e9 && s.h2d_bytes_per_s == 24e9);
  CHECK(!strcmp(s.h2d_src, "config zoffload.speeds.h2d_gbps"));
  /* one given, the rest not: that one from the config, the others measured */
  base_config(&c);
  c.zoffload.speeds.d2h_gbps = 7;
  CHECK_OK(zo_speeds_get_ex(&c, dev, NULL, &k_small, &s));
  CHECK(s.d2h_bytes_per_s == 7e9);
  CHECK(!strcmp(s.d2h_src, "config zoffload.speeds.d2h_gbps"));
  CHECK(starts(s.h2d_src, "measured: "));
  CHECK(s.h2d_bytes_per_s > 0);
  CHECK(!strcmp(s.nvme_read_src, "no nvme path") && s.nvme_read_bytes_per_s == 0);
  CHECK(unlink(cache) == 0); /* measured h2d and Adam were cached: start the next test from none */
}

/* No path, no device: those figures 0 with that as the source; Adam measured. */
static void test_nothing_to_measure(void) {
  zo_config_t c;
  base_config(&c);
  zo_speeds s;
  CHECK_OK(zo_speeds_get_ex(&c, NULL, NULL, &k_small, &s));
  CHECK(s.nvme_read_bytes_per_s == 0 && s.nvme_write_bytes_per_s == 0);
  CHECK(!strcmp(s.nvme_read_src, "no nvme path") && !strcmp(s.nvme_write_src, "no nvme path"));
  CHECK(s.h2d_bytes_per_s == 0 && s.d2h_bytes_per_s == 0);
  CHECK(!strcmp(s.h2d_src, "no device") && !strcmp(s.d2h_src, "no device"));
  CHECK(isfinite(s.adam_elems_per_s) && s.adam_elems_per_s > 0);
  CHECK(starts(s.adam_src, "measured: ") || starts(s.adam_src, "cache "));
}

/* Measure, cache, read back, remeasure, damaged and foreign caches. */
static void test_cache(const char *dir, zo_device_t *dev, const char *cache) {
  zo_config_t c;
  base_config(&c);
  zo_speeds s1, s2, s3;
  zo_speeds_opts o;
  unlink(cache);
  /* 1. measured, positive and finite, written to the cache (its directory made) */
  warn_reset();
  CHECK_OK(zo_speeds_get_ex(&c, dev, dir, &k_small, &s1));
  check_all(&s1, "measured: ", __LINE__);
  CHECK_HAS(s1.nvme_read_src, "8.0 MiB");
  CHECK_HAS(s1.nvme_write_src, "qd 4");
  size_t n;
  char *text = read_all(cache, &n);
  CHECK(text != NULL);
  if (text) {
    CHECK(starts(text, "{\n  \"zoffload_speeds\": 1"));
    CHECK_HAS(text, "\"nvme_read host=");
    CHECK_HAS(text, "\"adam host=");
    CHECK_HAS(text, "\"measured_at\"");
  }
  /* the swap directory zoffload-rank99999800 is gone again */
  CHECK_EQ(zo_test_count_entries(dir), 0);
  /* 2. read back from the cache, exactly */
  CHECK_OK(zo_speeds_get_ex(&c, dev, dir, &k_small, &s2));
  check_all(&s2, "cache ", __LINE__);
  for (int i = 0; i < 5; i++) {
    if (fig(&s2, i) != fig(&s1, i))
      FAIL_AT("%s from the cache %.17g, measured %.17g", k_fig[i], fig(&s2, i), fig(&s1, i));
    CHECK_HAS(src(&s2, i), cache);
    CHECK_HAS(src(&s2, i), "(measured 2");
  }
  CHECK_EQ((long long)g_warn_len, 0);
  /* a changed setting is another key: measured (block size), the rest from the cache */
  zo_config_t c2 = c;
  c2.aio.block_size = 2 << 20;
  CHECK_OK(zo_speeds_get_ex(&c2, dev, dir, &k_small, &s3));
  CHECK(starts(s3.nvme_read_src, "measured: ") && starts(s3.nvme_write_src, "measured: "));
  CHECK(starts(s3.h2d_src, "cache ") && starts(s3.adam_src, "cache "));
  /* another directory of the same file system: the disk's figures from the cache (one measurement per disk, however
   * many temporary directories the runs use) */
  char other[4400];
  snprintf(other, sizeof other, "%s-other", dir);
  CHECK(mkdir(other, 0700) == 0);
  CHECK_OK(zo_speeds_get_ex(&c, NULL, other, &k_small, &s3));
  CHECK(starts(s3.nvme_read_src, "cache ") && starts(s3.nvme_write_src, "cache "));
  CHECK(rmdir(other) == 0);
  CHECK_OK(zo_speeds_get_ex(&c, dev, dir, &k_small, &s3));
  check_all(&s3, "cache ", __LINE__);
  /* 3. ZO_SPEEDS_REMEASURE=1 ignores the cache (and updates it); "0" does not */
  setenv("ZO_SPEEDS_REMEASURE", "1", 1);
  CHECK_OK(zo_speeds_get_ex(&c, dev, dir, &k_small, &s3));
  check_all(&s3, "measured: ", __LINE__);
  setenv("ZO_SPEEDS_REMEASURE", "0", 1);
  CHECK_OK(zo_speeds_get_ex(&c, dev, dir, &k_small, &s3));
  check_all(&s3, "cache ", __LINE__);
  unsetenv("ZO_SPEEDS_REMEASURE");
  o = k_small;
  o.remeasure = 1;
  CHECK_OK(zo_speeds_get_ex(&c, dev, dir, &o, &s3));
  check_all(&s3, "measured: ", __LINE__);
  /* no_cache: measured, the file neither read nor written */
  free(text);
  text = read_all(cache, &n);
  o = k_small;
  o.no_cache = 1;
  CHECK_OK(zo_speeds_get_ex(&c, dev, dir, &o, &s3));
  check_all(&s3, "measured: ", __LINE__);
  size_t n2;
  char *again = read_all(cache, &n2);
  CHECK(text && again && n == n2 && !memcmp(text, again, n));
  free(again);
  /* 4. damaged (cut in half): warned naming the file, measured, rewritten whole */
  if (text) {
    text[n / 2] = 0;
    write_all(cache, text);
  }
  warn_reset();
  CHECK_OK(zo_speeds_get_ex(&c, dev, dir, &k_small, &s3));
  check_all(&s3, "measured: ", __LINE__);
  CHECK_HAS(g_warn, cache);
  CHECK_HAS(g_warn, "is damaged");
  CHECK_OK(zo_speeds_get_ex(&c, dev, dir, &k_small, &s3));
  check_all(&s3, "cache ", __LINE__);
  /* one damaged entry: that figure measured again, the others cached */
  free(text);
  text = read_all(cache, &n);
  json_t *root = text ? json_loads(text, 0, NULL) : NULL, *ent = json_object_get(root, "entries"),
         *e;
  const char *key;
  int damaged = 0;
  json_object_foreach(ent, key, e) {
    if (!starts(key, "adam host=")) continue;
    json_object_set_new(e, "value", json_string("fast")); /* valid JSON, a damaged entry */
    damaged++;
  }
  CHECK_EQ(damaged, 1);
  char *dumped = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  CHECK(dumped != NULL);
  if (dumped) write_all(cache, dumped);
  free(dumped);
  json_decref(root);
  warn_reset();
  CHECK_OK(zo_speeds_get_ex(&c, dev, dir, &k_small, &s3));
  CHECK(starts(s3.adam_src, "measured: "));
  CHECK(starts(s3.nvme_read_src, "cache ") && starts(s3.h2d_src, "cache "));
  CHECK_HAS(g_warn, "entry \"adam host=");
  CHECK_OK(zo_speeds_get_ex(&c, dev, dir, &k_small, &s3));
  check_all(&s3, "cache ", __LINE__);
  free(text);
  /* 5. another program's files at the cache path: warned, measured, left byte for byte */
  static const char *const foreign[] = {"{\"mine\": true, \"entries\": {}}\n", "hello, not JSON\n",
                                        "[1, 2, 3]"};
  for (int k = 0; k < 3; k++) {
    write_all(cache, foreign[k]);
    warn_reset();
    CHECK_OK(zo_speeds_get_ex(&c, dev, dir, &k_small, &s3));
    check_all(&s3, "measured: ", __LINE__);
    CHECK_HAS(g_warn, cache);
    CHECK_HAS(g_warn, "is not a zoffload speeds cache");
    text = read_all(cache, &n);
    CHECK(text && !strcmp(text, foreign[k]));
    free(text);
  }
  /* a symbolic link at the cache path: left alone, its target untouched */
  char target[4400];
  snprintf(target, sizeof target, "%s.target", cache);
  write_all(target, "target\n");
  unlink(cache);
  CHECK(symlink(target, cache) == 0);
  warn_reset();
  CHECK_OK(zo_speeds_get_ex(&c, dev, dir, &k_small, &s3));
  check_all(&s3, "measured: ", __LINE__);
  CHECK_HAS(g_warn, "is a symbolic link");
  text = read_all(target, &n);
  CHECK(text && !strcmp(text, "target\n"));
  free(text);
  struct stat sb;
  CHECK(lstat(cache, &sb) == 0 && S_ISLNK(sb.st_mode));
  unlink(cache);
  unlink(target);
}

/* An emulated link (zoffload.host_link_gbps on a host device): the link figures see it, cannot beat it, and the
 * device's own setting is as before afterwards; it is another cache key than the unlimited link. */
static void test_emulated_link(zo_device_t *dev) {
  zo_config_t c;
  base_config(&c);
  c.zoffload.host_link_gbps = 2;
  zo_speeds s;
  CHECK_OK(zo_speeds_get_ex(&c, dev, NULL, &k_small, &s));
  CHECK(starts(s.h2d_src, "measured: ") && starts(s.d2h_src, "measured: "));
  CHECK_HAS(s.h2d_src, "emulated link 2 GB/s");
  CHECK(s.h2d_bytes_per_s > 0 && s.h2d_bytes_per_s <= 2e9 * 1.001);
  CHECK(s.d2h_bytes_per_s > 0 && s.d2h_bytes_per_s <= 2e9 * 1.001);
  zo_link_stats ls;
  CHECK_OK(zo_device_link_stats(dev, &ls));
  CHECK(ls.gbps == 0);
  CHECK_OK(zo_speeds_get_ex(&c, dev, NULL, &k_small, &s));
  CHECK(starts(s.h2d_src, "cache "));
  /* a link the caller set stays as set */
  CHECK_OK(zo_device_set_link_gbps(dev, 3));
  c.zoffload.host_link_gbps = 0;
  CHECK_OK(zo_speeds_get_ex(&c, dev, NULL, &k_small, &s));
  CHECK(s.h2d_bytes_per_s > 0 && s.h2d_bytes_per_s <= 3e9 * 1.001);
  CHECK_OK(zo_device_link_stats(dev, &ls));
  CHECK(ls.gbps == 3);
  CHECK_OK(zo_device_set_link_gbps(dev, 0));
}

static void test_args(const char *dir) {
  zo_speeds s;
  memset(&s, 0x7f, sizeof s);
  CHECK_ST(zo_speeds_get(NULL, NULL, NULL, NULL), ZO_ERR_INVALID_ARG);
  CHECK_ST(zo_speeds_get_ex(NULL, NULL, "", &k_small, &s), ZO_ERR_INVALID_ARG);
  CHECK_HAS(zo_last_error(), "nvme_path is empty");
  char missing[4200];
  snprintf(missing, sizeof missing, "%s/no-such-dir", dir);
  CHECK_ST(zo_speeds_get_ex(NULL, NULL, missing, &k_small, &s), ZO_ERR_INVALID_ARG);
  CHECK_HAS(zo_last_error(), "no-such-dir");
  char file[4200];
  snprintf(file, sizeof file, "%s/a-file", dir);
  write_all(file, "x");
  CHECK_ST(zo_speeds_get_ex(NULL, NULL, file, &k_small, &s), ZO_ERR_INVALID_ARG);
  CHECK_HAS(zo_last_error(), "not a directory");
  unlink(file);
  zo_speeds_opts o = k_small;
  o.max_passes = 16;
  CHECK_ST(zo_speeds_get_ex(NULL, NULL, NULL, &o, &s), ZO_ERR_INVALID_ARG);
  o = k_small;
  o.disk_bytes = 4096;
  CHECK_ST(zo_speeds_get_ex(NULL, NULL, NULL, &o, &s), ZO_ERR_INVALID_ARG);
  o = k_small;
  o.adam_elems = 100;
  CHECK_ST(zo_speeds_get_ex(NULL, NULL, NULL, &o, &s), ZO_ERR_INVALID_ARG);
  unsigned char *b = (unsigned char *)&s; /* untouched on error */
  CHECK(b[0] == 0x7f && b[sizeof s - 1] == 0x7f);
}

/* Where the cache is: ZO_SPEEDS_CACHE, else an absolute XDG_CACHE_HOME, else HOME; none without them. */
static void test_cache_path(const char *cache, const char *dir) {
  char buf[4200], *home = getenv("HOME") ? strdup(getenv("HOME")) : NULL;
  CHECK_OK(zo_speeds_cache_path(buf, sizeof buf));
  CHECK(!strcmp(buf, cache));
  CHECK_ST(zo_speeds_cache_path(buf, 4), ZO_ERR_INVALID_ARG);
  /* the directories named below are under the scratch directory (absolute: XDG_CACHE_HOME must be); only the
   * path is resolved, nothing is written there */
  char *abs = realpath(dir, NULL), xdg[4200], want[4300], fake_home[4200];
  if (!CHECK(abs != NULL)) {
    free(home);
    return;
  }
  snprintf(xdg, sizeof xdg, "%s/xdg-cache", abs);
  snprintf(fake_home, sizeof fake_home, "%s/home", abs);
  free(abs);
  unsetenv("ZO_SPEEDS_CACHE");
  setenv("XDG_CACHE_HOME", xdg, 1);
  CHECK_OK(zo_speeds_cache_path(buf, sizeof buf));
  snprintf(want, sizeof want, "%s/zoffload/speeds.json", xdg);
  CHECK(!strcmp(buf, want));
  setenv("XDG_CACHE_HOME", "relative", 1); /* the XDG spec: a relative path is ignored */
  setenv("HOME", fake_home, 1);
  CHECK_OK(zo_speeds_cache_path(buf, sizeof buf));
  snprintf(want, sizeof want, "%s/.cache/zoffload/speeds.json", fake_home);
  CHECK(!strcmp(buf, want));
  unsetenv("XDG_CACHE_HOME");
  unsetenv("HOME");
  CHECK_ST(zo_speeds_cache_path(buf, sizeof buf), ZO_ERR_UNSUPPORTED);
  /* nothing to cache in: measured all the same */
  zo_config_t c;
  base_config(&c);
  zo_speeds s;
  CHECK_OK(zo_speeds_get_ex(&c, NULL, NULL, &k_small, &s));
  CHECK(starts(s.adam_src, "measured: ") && s.adam_elems_per_s > 0);
  if (home) setenv("HOME", home, 1);
  free(home);
  setenv("ZO_SPEEDS_CACHE", cache, 1);
}

/* zo_speeds_figure(): an application's own figure, measured once, then read from the same cache file beside the
 * library's entries; ZO_SPEEDS_REMEASURE and @remeasure measure again; a failed measurement is returned with its
 * reason and cached nowhere; bad keys and a measurement that is not a positive number are refused. */
typedef struct fig_ctx {
  int calls;
  double value;
  zo_status st;
} fig_ctx;

static zo_status fig_measure(void *ctx, double *value, char *how, size_t cap) {
  fig_ctx *f = ctx;
  f->calls++;
  *value = f->value;
  snprintf(how, cap, f->st == ZO_OK ? "timed %d" : "the probe broke (%d)", f->calls);
  return f->st;
}

static void test_figure(const char *cache) {
  fig_ctx f = {.value = 0.25, .st = ZO_OK};
  double v = -1;
  char src[ZO_SPEEDS_SRC_CAP];
  const char *key = "test figure: model L=2 C=64 threads=2";
  CHECK_OK(zo_speeds_figure(key, fig_measure, &f, 1, &v, src,
                            sizeof src)); /* remeasure: whatever a run left */
  CHECK_EQ(f.calls, 1);
  CHECK(v == 0.25);
  CHECK(!strcmp(src, "measured: timed 1"));
  f.value = 9; /* the cache answers now, not the measurement */
  CHECK_OK(zo_speeds_figure(key, fig_measure, &f, 0, &v, src, sizeof src));
  CHECK_EQ(f.calls, 1);
  CHECK(v == 0.25);
  CHECK(!strncmp(src, "cache ", 6) && strstr(src, cache) && strstr(src, "(measured "));
  /* the entry sits in the library's file, keyed with the host name */
  json_t *root = json_load_file(cache, 0, NULL);
  json_t *ent = root ? json_object_get(root, "entries") : NULL;
  int found = 0;
  const char *k;
  json_t *e;
  json_object_foreach(ent, k, e) {
    if (!strncmp(k, "app test figure: model L=2 C=64 threads=2 host=", 47)) {
      found = 1;
      CHECK(json_real_value(json_object_get(e, "value")) == 0.25);
      CHECK(!strcmp(json_string_value(json_object_get(e, "how")), "timed 1"));
    }
  }
  CHECK(found);
  CHECK(json_object_get(root, "zoffload_speeds") != NULL);
  json_decref(root);
  /* another key is another figure; the environment's remeasure too */
  CHECK_OK(zo_speeds_figure("test figure: another", fig_measure, &f, 0, &v, src, sizeof src));
  CHECK_EQ(f.calls, 2);
  CHECK(v == 9);
  setenv("ZO_SPEEDS_REMEASURE", "1", 1);
  f.value = 0.5;
  CHECK_OK(zo_speeds_figure(key, fig_measure, &f, 0, &v, src, sizeof src));
  unsetenv("ZO_SPEEDS_REMEASURE");
  CHECK_EQ(f.calls, 3);
  CHECK(v == 0.5);
  /* a failed measurement: its status and reason, nothing cached (the next call measures again) */
  fig_ctx bad = {.value = 1, .st = ZO_ERR_OUT_OF_MEMORY};
  CHECK_ST(zo_speeds_figure("test figure: broken", fig_measure, &bad, 0, &v, src, sizeof src),
           ZO_ERR_OUT_OF_MEMORY);
  CHECK(v == 0);
  CHECK(!strcmp(src, "not measured: the probe broke (1)"));
  CHECK(strstr(zo_last_error(), "the probe broke (1)") != NULL);
  CHECK_ST(zo_speeds_figure("test figure: broken", fig_measure, &bad, 0, &v, src, sizeof src),
           ZO_ERR_OUT_OF_MEMORY);
  CHECK_EQ(bad.calls, 2);
  fig_ctx nan_fig = {.value = NAN, .st = ZO_OK}, neg = {.value = -1, .st = ZO_OK};
  CHECK_ST(zo_speeds_figure("test figure: nan", fig_measure, &nan_fig, 0, &v, src, sizeof src),
           ZO_ERR_INVALID_ARG);
  CHECK(v == 0 && strstr(src, "not a positive finite number"));
  CHECK_ST(zo_speeds_figure("test figure: negative", fig_measure, &neg, 0, &v, src, sizeof src),
           ZO_ERR_INVALID_ARG);
  /* arguments */
  char longkey[1100];
  memset(longkey, 'k', sizeof longkey - 1);
  longkey[sizeof longkey - 1] = 0;
  CHECK_ST(zo_speeds_figure(NULL, fig_measure, &f, 0, &v, src, sizeof src), ZO_ERR_INVALID_ARG);
  CHECK_ST(zo_speeds_figure(key, NULL, &f, 0, &v, src, sizeof src), ZO_ERR_INVALID_ARG);
  CHECK_ST(zo_speeds_figure(key, fig_measure, &f, 0, NULL, src, sizeof src), ZO_ERR_INVALID_ARG);
  CHECK_ST(zo_speeds_figure(key, fig_measure, &f, 0, &v, src, 0), ZO_ERR_INVALID_ARG);
  CHECK_ST(zo_speeds_figure("", fig_measure, &f, 0, &v, src, sizeof src), ZO_ERR_INVALID_ARG);
  CHECK_ST(zo_speeds_figure(longkey, fig_measure, &f, 0, &v, src, sizeof src), ZO_ERR_INVALID_ARG);
  CHECK_ST(zo_speeds_figure("tab\there", fig_measure, &f, 0, &v, src, sizeof src),
           ZO_ERR_INVALID_ARG);
  CHECK(strstr(zo_last_error(), "byte 3 is 0x09"));
  CHECK_EQ(f.calls, 3); /* no refused call measured */
}

int main(int argc, char **argv) {
  char dir[4096], swapdir[4200], cache[4300];
  if (zo_test_scratch_dir(argc > 1 ? argv[1] : NULL, "test_speeds", dir, sizeof dir))
    return ZO_TEST_SKIP;
  snprintf(swapdir, sizeof swapdir, "%s/nvme", dir);
  /* directories made by the first write */
  snprintf(cache, sizeof cache, "%s/cache/sub/speeds.json", dir);
  if (mkdir(swapdir, 0700) != 0) return ZO_TEST_SKIP;
  setenv("ZO_SPEEDS_CACHE", cache, 1); /* never $HOME */
  unsetenv("ZO_SPEEDS_REMEASURE");
  zo_log_set_handler(on_log, NULL, ZO_LOG_INFO);
  zo_device_t *dev = NULL;
  if (!CHECK_OK(zo_device_create(ZO_DEVICE_HOST, 0, 0, &dev))) return zo_test_finish("test_speeds");

  test_args(dir);
  test_config_given(swapdir, dev, cache);
  test_nothing_to_measure();
  test_cache(swapdir, dev, cache);
  test_emulated_link(dev);
  test_cache_path(cache, dir);
  test_figure(cache);

  zo_device_destroy(dev);
  char cmd[8800];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "test_speeds: could not remove %s\n", dir);
  return zo_test_finish("test_speeds");
}
