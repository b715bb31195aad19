/*
 * config_internal.h - private to the config parser: what config.c (the
 * values) shares with config_keys.c (unknown keys and the closest known one),
 * config_nonfinite.c (Infinity and NaN before jansson reads the text) and
 * config_describe.c (the resolved config as text).
 * Not installed.
 */
#ifndef ZO_CONFIG_INTERNAL_H
#define ZO_CONFIG_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <jansson.h>

#include "zoffload/status.h"

#define PATH_CAP \
  256 /* bytes of a JSON path in messages ("zero_optimization.offload_param.device") */

typedef struct parse_ctx {
  const char *src; /* document name for messages */
  /* unknown keys seen so far in this parse (the first few are named: config_keys.c) */
  int64_t *n_unknown;
} parse_ctx;

/* Record "src: path: <fmt>" as the last error and return ZO_ERR_CONFIG (config.c). */
zo_status __attribute__((format(printf, 3, 4)))
cfg_err(const parse_ctx *c, const char *path, const char *fmt, ...);

/* zoffload.comm's names, indexed by zo_comm_choice (config.c). */
extern const char *const cfg_comm_names[3];

/* True when key is in the NULL-terminated list. */
static inline int in_list(const char *key, const char *const *list) {
  for (; list && *list; list++)
    if (!strcmp(key, *list)) return 1;
  return 0;
}

/* ---- config_keys.c: unknown keys ---------------------------------------------------------- */

/* Known keys under @base (NULL: the unknown key's own block), for the suggestion. */
typedef struct key_set {
  const char *base;
  const char *const *keys; /* NULL-terminated */
} key_set;

/* The sets given inline, and their count: the last two arguments of cfg_unknown_key() and
 * cfg_did_you_mean(). */
#define KEY_SETS(...) \
  ((const key_set[]){__VA_ARGS__}), sizeof((const key_set[]){__VA_ARGS__}) / sizeof(key_set)

/* "; did you mean <base>.<key>?" for @key at @path (whose block is @path less ".key") into @out, or "" when no known
 * key of @sets is close. Returns @out. */
const char *cfg_did_you_mean(char *out, size_t cap, const char *path, const char *key,
                             const key_set *sets, size_t n_sets);

/*
 * cfg_unknown_key() - @key at @path is in a block zoffload reads and is none of its keys: an error (DeepSpeed's
 * config models refuse unknown fields too), naming the closest known key when one is close. Returns ZO_ERR_CONFIG.
 */
zo_status cfg_unknown_key(const parse_ctx *c, const char *path, const char *key,
                          const key_set *sets, size_t n_sets);

/* An unknown top-level key (the application's, perhaps): a warning naming it, for the first few of
 * a parse. */
void cfg_warn_unknown(const parse_ctx *c, const char *path);

/* At the end of a parse: one line counting the unknown keys cfg_warn_unknown() did not name, if
 * any. */
void cfg_warn_unknown_total(const parse_ctx *c);

/* ---- config_nonfinite.c: Infinity, -Infinity and NaN --------------------------------------- */

/* The first byte of the string a literal becomes ("\u001fInfinity"). */
#define NONFINITE_MARK "\x1f"

/*
 * cfg_nonfinite_to_strings() - *@out: a malloc'd copy of @s (@len bytes) with each literal Infinity, -Infinity and
 * NaN outside a string quoted as NONFINITE_MARK + literal, and its length in *@out_len; *@out stays NULL when @s has
 * none (parse @s itself). ZO_ERR_OUT_OF_MEMORY or ZO_OK.
 */
zo_status cfg_nonfinite_to_strings(const char *s, size_t len, char **out, size_t *out_len);

/* True when @v is the string cfg_nonfinite_to_strings() made of @lit. */
int cfg_is_nonfinite(const json_t *v, const char *lit);

#endif /* ZO_CONFIG_INTERNAL_H */
