/*
 * train_config.c - reads zo-train's "model", "data" and "train" blocks with
 * jansson. Unknown keys inside these blocks are errors (they are ours, so a
 * typo should not train the wrong model silently).
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "train_config.h"
#include "zoffload/status.h"

const char *const train_app_blocks[] = {"model", "data", "train", NULL};

void train_settings_defaults(train_settings *ts) {
  memset(ts, 0, sizeof *ts);
  ts->model = (gpt_config){.n_layer = 4, .n_head = 4, .d_model = 128, .seq_len = 128, .vocab = 256};
  snprintf(ts->data_path, sizeof ts->data_path, "%s", DATA_DEFAULT_PATH);
  ts->val_fraction = 0.05;
  ts->data_seed = 1;
  ts->steps = 300;
  ts->seed = 1337;
  ts->val_windows = 64;
  ts->sample_bytes = 240;
  ts->temperature = 0.8;
  ts->model_streamed = 1;
}

typedef struct {
  const char *file;
  char *err;
  size_t errlen;
} ctx;

static int fail(ctx *c, const char *path, const char *fmt, const char *got) {
  char ep[256], eg[512]; /* a key of the file's in the path, a value of its: escaped (zo_escape) */
  snprintf(c->err, c->errlen, "%s: %s: %s%s", c->file, zo_escape(ep, sizeof ep, path, strlen(path)),
           fmt, got ? zo_escape(eg, sizeof eg, got, strlen(got)) : "");
  return -1;
}

static const char *type_name(const json_t *v) {
  switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    default: return "null";
  }
}

/* Integer in [lo, hi]; reals with an integral value (5e3) are accepted. */
static int get_int(ctx *c, json_t *obj, const char *block, const char *key, int64_t lo, int64_t hi,
                   int64_t *out) {
  json_t *v = json_object_get(obj, key);
  if (!v) return 0;
  char path[128], msg[160];
  snprintf(path, sizeof path, "%s.%s", block, key);
  /* compared as integers: (double)INT64_MAX is 2^63, which no int64_t holds */
  int64_t x;
  if (json_is_integer(v)) {
    x = (int64_t)json_integer_value(v);
  } else if (json_is_real(v) && floor(json_real_value(v)) == json_real_value(v)) {
    const double d = json_real_value(v);
    if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0)) {
      snprintf(msg, sizeof msg, "expected an integer in [%lld, %lld], got %.17g", (long long)lo,
               (long long)hi, d);
      return fail(c, path, msg, NULL);
    }
    x = (int64_t)d;
  } else {
    return fail(c, path, "expected an integer, got ", type_name(v));
  }
  if (x < lo || x > hi) {
    snprintf(msg, sizeof msg, "expected an integer in [%lld, %lld], got %lld", (long long)lo,
             (long long)hi, (long long)x);
    return fail(c, path, msg, NULL);
  }
  *out = x;
  return 0;
}

static int get_num(ctx *c, json_t *obj, const char *block, const char *key, double lo, double hi,
                   double *out) {
  json_t *v = json_object_get(obj, key);
  if (!v) return 0;
  char path[128], msg[160];
  snprintf(path, sizeof path, "%s.%s", block, key);
  if (!json_is_number(v)) return fail(c, path, "expected a number, got ", type_name(v));
  double d = json_number_value(v);
  if (!(d >= lo && d <= hi)) {
    snprintf(msg, sizeof msg, "expected a number in [%g, %g], got %g", lo, hi, d);
    return fail(c, path, msg, NULL);
  }
  *out = d;
  return 0;
}

/* train.KEY, one of two strings: *out 0 for @s0, 1 for @s1 (untouched when the key is absent). */
/* train.@key: one of the NULL-terminated @choices (its index into *@out), else an error listing them. */
static int get_choice(ctx *c, json_t *obj, const char *key, const char *const *choices, int *out) {
  json_t *v = json_object_get(obj, key);
  if (!v) return 0;
  for (int i = 0; json_is_string(v) && choices[i]; i++)
    if (!strcmp(json_string_value(v), choices[i])) return *out = i, 0;
  char path[128], msg[160] = "expected ";
  snprintf(path, sizeof path, "train.%s", key);
  for (int i = 0; choices[i]; i++) {
    const size_t len = strlen(msg);
    snprintf(msg + len, sizeof msg - len, "%s\"%s\"",
             i == 0           ? ""
             : choices[i + 1] ? ", "
                              : " or ",
             choices[i]);
  }
  strncat(msg, ", got ", sizeof msg - strlen(msg) - 1);
  return fail(c, path, msg, json_is_string(v) ? json_string_value(v) : type_name(v));
}

static int check_keys(ctx *c, json_t *obj, const char *block, const char *const *known) {
  const char *key;
  json_t *v;
  json_object_foreach(obj, key, v) {
    int ok = 0;
    for (const char *const *k = known; *k; k++) ok |= !strcmp(*k, key);
    if (!ok) {
      char path[192], list[256] = "";
      snprintf(path, sizeof path, "%s.%s", block, key);
      for (const char *const *k = known; *k; k++) {
        strncat(list, *k, sizeof list - strlen(list) - 3);
        if (k[1]) strncat(list, ", ", sizeof list - strlen(list) - 1);
      }
      return fail(c, path, "unknown key; expected one of: ", list);
    }
  }
  return 0;
}

static json_t *get_block(ctx *c, json_t *root, const char *name, int *rc) {
  json_t *b = json_object_get(root, name);
  *rc = 0;
  if (b && !json_is_object(b)) *rc = fail(c, name, "expected an object, got ", type_name(b));
  return json_is_object(b) ? b : NULL;
}

int train_config_read(const char *path, char **text, size_t *len, char *err, size_t errlen) {
  *text = NULL, *len = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    snprintf(err, errlen, "cannot read config '%s': %s", path, strerror(errno));
    return -1;
  }
  struct stat sb;
  if (fstat(fd, &sb) == 0 &&
      S_ISDIR(sb.st_mode)) { /* open(O_RDONLY) of a directory succeeds; read() fails */
    snprintf(err, errlen, "config '%s' is a directory, not a JSON file", path);
    close(fd);
    return -1;
  }
  char *buf = NULL;
  size_t n = 0, cap = 0;
  for (;;) {
    if (cap - n < 2) { /* room for a byte and the NUL */
      size_t ncap = cap ? cap * 2 : 65536;
      char *nb = realloc(buf, ncap);
      if (!nb) {
        snprintf(err, errlen, "cannot read config '%s': out of host memory at %zu bytes", path, n);
        goto fail;
      }
      buf = nb, cap = ncap;
    }
    ssize_t r = read(fd, buf + n, cap - n - 1);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      snprintf(err, errlen, "cannot read config '%s' at byte %zu: %s", path, n, strerror(errno));
      goto fail;
    }
    if (r == 0) break;
    n += (size_t)r;
  }
  close(fd);
  buf[n] = 0;
  *text = buf, *len = n;
  return 0;
fail:
  free(buf);
  close(fd);
  return -1;
}

int train_settings_load(const char *path, const char *text, size_t len, train_settings *ts,
                        char *err, size_t errlen) {
  ctx c = {path, err, errlen};
  json_error_t je;
  json_t *root = json_loadb(text, len, 0, &je);
  char eb[256];
  if (!root) {
    snprintf(err, errlen, "%s:%d:%d: malformed JSON: %s", path, je.line, je.column,
             zo_escape(eb, sizeof eb, je.text,
                       strlen(je.text))); /* jansson quotes the bytes near the error */
    return -1;
  }
  int rc = -1;
  if (!json_is_object(root)) {
    fail(&c, "(top level)", "expected an object, got ", type_name(root));
    goto out;
  }
  int brc;
  json_t *m = get_block(&c, root, "model", &brc);
  if (brc) goto out;
  if (m) {
    static const char *const keys[] = {"n_layer", "n_head", "d_model", "seq_len", "vocab", NULL};
    int64_t v;
    if (check_keys(&c, m, "model", keys)) goto out;
    v = ts->model.n_layer;
    if (get_int(&c, m, "model", "n_layer", 1, 256, &v)) goto out;
    ts->model.n_layer = (int)v;
    v = ts->model.n_head;
    if (get_int(&c, m, "model", "n_head", 1, 256, &v)) goto out;
    ts->model.n_head = (int)v;
    v = ts->model.d_model;
    if (get_int(&c, m, "model", "d_model", 1, 65536, &v)) goto out;
    ts->model.d_model = (int)v;
    v = ts->model.seq_len;
    if (get_int(&c, m, "model", "seq_len", 1, 65536, &v)) goto out;
    ts->model.seq_len = (int)v;
    v = ts->model.vocab;
    if (get_int(&c, m, "model", "vocab", 2, 65536, &v))
      goto out; /* tokens are bytes; rows >= 256 are never inputs */
    ts->model.vocab = (int)v;
  }
  json_t *d = get_block(&c, root, "data", &brc);
  if (brc) goto out;
  if (d) {
    static const char *const keys[] = {"path", "val_fraction", "seed", NULL};
    if (check_keys(&c, d, "data", keys)) goto out;
    json_t *p = json_object_get(d, "path");
    if (p) {
      if (!json_is_string(p)) {
        fail(&c, "data.path", "expected a string, got ", type_name(p));
        goto out;
      }
      if (json_string_length(p) == 0 || json_string_length(p) >= sizeof ts->data_path) {
        fail(&c, "data.path", "expected a non-empty path shorter than 4096 bytes", NULL);
        goto out;
      }
      snprintf(ts->data_path, sizeof ts->data_path, "%s", json_string_value(p));
    }
    if (get_num(&c, d, "data", "val_fraction", 1e-6, 0.5, &ts->val_fraction)) goto out;
    int64_t s = (int64_t)ts->data_seed;
    if (get_int(&c, d, "data", "seed", 0, INT64_MAX, &s)) goto out;
    ts->data_seed = (uint64_t)s;
  }
  json_t *t = get_block(&c, root, "train", &brc);
  if (brc) goto out;
  if (t) {
    static const char *const keys[] = {"steps",        "seed",
                                       "val_windows",  "sample_bytes",
                                       "temperature",  "activation_checkpointing",
                                       "model_memory", "cpu_gemm",
                                       "cuda_kernels", NULL};
    int64_t v;
    if (check_keys(&c, t, "train", keys)) goto out;
    if (get_int(&c, t, "train", "steps", 1, INT64_MAX / 2, &ts->steps)) goto out;
    v = (int64_t)ts->seed;
    if (get_int(&c, t, "train", "seed", 0, INT64_MAX, &v)) goto out;
    ts->seed = (uint64_t)v;
    v = ts->val_windows;
    if (get_int(&c, t, "train", "val_windows", 1, 1 << 20, &v)) goto out;
    ts->val_windows = (int)v;
    v = ts->sample_bytes;
    if (get_int(&c, t, "train", "sample_bytes", 0, 1 << 20, &v)) goto out;
    ts->sample_bytes = (int)v;
    if (get_num(&c, t, "train", "temperature", 0, 100, &ts->temperature)) goto out;
    json_t *ac = json_object_get(t, "activation_checkpointing");
    if (ac && !json_is_boolean(ac)) {
      fail(&c, "train.activation_checkpointing", "expected true or false, got ", type_name(ac));
      goto out;
    }
    if (ac) ts->activation_checkpointing = json_is_true(ac);
    static const char *const memory[] = {"resident", "streamed", NULL}, *const gemm[] = {"fp32",
                                                                                         "bf16",
                                                                                         "auto",
                                                                                         NULL};
    if (get_choice(&c, t, "model_memory", memory, &ts->model_streamed) ||
        get_choice(&c, t, "cpu_gemm", gemm, &ts->cpu_gemm))
      goto out;
    static const char *const kernels[] = {"baseline", "fused", NULL};
    if (get_choice(&c, t, "cuda_kernels", kernels, &ts->cuda_kernels)) goto out;
  }
  rc = 0;
out:
  json_decref(root);
  return rc;
}
