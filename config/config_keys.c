/*
 * config_keys.c - unknown keys in a config: an error in the blocks zoffload
 * reads, naming the closest known key (optimal string alignment distance);
 * a counted warning at the top level, where the application's own blocks
 * live. Not the lists of known keys: each sits beside its block's parser in
 * config.c.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base_internal.h"
#include "zoffload/parse.h"
#include "config_internal.h"

/* Unknown keys named one warning line each; the rest are counted into one summary line at the end. */
#define UNKNOWN_NAMED 8

/*
 * closest_key() - the known key nearest @key that is close enough to suggest (zo_name_suggestion_distance: within
 * 2 edits, and at most a third of the longer name's length); an exact match counts only in a set with its own @base (a key one level off). First
 * best wins. Returns the key, its set's base in *@base_out; NULL when none is that close.
 */
static const char *closest_key(const char *key, const key_set *sets, size_t n_sets,
                               const char **base_out) {
  const char *best = NULL;
  int best_d = ZO_NAME_DIST_MAX;
  for (size_t s = 0; s < n_sets; s++)
    for (const char *const *k = sets[s].keys; k && *k; k++) {
      const int d = zo_name_suggestion_distance(key, strlen(key), *k);
      if ((d == 0 && !sets[s].base) || d >= best_d) continue;
      best = *k;
      best_d = d;
      *base_out = sets[s].base;
    }
  return best;
}

/* "did you mean <base>.<key>?" for @key at @path (whose block is @path less ".key"), or "" when nothing is close. */
const char *cfg_did_you_mean(char *out, size_t cap, const char *path, const char *key,
                             const key_set *sets, size_t n_sets) {
  const char *base = NULL, *best = closest_key(key, sets, n_sets, &base);
  out[0] = 0;
  if (!best) return out;
  size_t plen = strlen(path), klen = strlen(key);
  int own_len = plen > klen ? (int)(plen - klen - 1) : 0; /* the block's path: path less ".key" */
  if (base)
    snprintf(out, cap, "; did you mean %s%s%s?", base, base[0] ? "." : "", best);
  else
    snprintf(out, cap, "; did you mean %.*s%s%s?", own_len, path, own_len ? "." : "", best);
  return out;
}

/*
 * cfg_unknown_key() - @key at @path is in a block zoffload reads and is none of its keys: an error (DeepSpeed's
 * config models refuse unknown fields too), naming the closest known key when one is close.
 */
zo_status cfg_unknown_key(const parse_ctx *c, const char *path, const char *key,
                          const key_set *sets, size_t n_sets) {
  char hint[PATH_CAP + 32];
  cfg_did_you_mean(hint, sizeof hint, path, key, sets, n_sets);
  if (hint[0]) return cfg_err(c, path, "not a DeepSpeed or zoffload key%s", hint);
  size_t plen = strlen(path), klen = strlen(key);
  if (plen <= klen + 1) /* a key so long that the path was cut (pj) */
    return cfg_err(c, path, "not a DeepSpeed or zoffload key (docs/configuration.md lists them)");
  return cfg_err(c, path,
                 "not a DeepSpeed or zoffload key of %.*s (docs/configuration.md lists them)",
                 (int)(plen - klen - 1), path);
}

/* Bytes of an unknown key a warning shows; a longer one is cut there and its length given (a 10 MB key is one
 * short line, not the first kilobyte of it). */
#define UNKNOWN_SHOWN 60

void cfg_warn_unknown(const parse_ctx *c, const char *path) {
  char epath[4 * UNKNOWN_SHOWN +
             4]; /* the key is the file's: escaped as cfg_err() does, so no control byte reaches a
                                        terminal (each byte at most 4: \xNN) */
  if (++*c->n_unknown > UNKNOWN_NAMED) return;
  size_t n = strlen(path);
  if (n <= UNKNOWN_SHOWN)
    zo_warn("config: %s is not a DeepSpeed or zoffload key; ignored",
            zo_escape(epath, sizeof epath, path, n));
  else
    zo_warn("config: %s... (%zu bytes) is not a DeepSpeed or zoffload key; ignored",
            zo_escape(epath, sizeof epath, path, UNKNOWN_SHOWN), n);
}

void cfg_warn_unknown_total(const parse_ctx *c) {
  int64_t n_unknown = *c->n_unknown;
  if (n_unknown > UNKNOWN_NAMED)
    zo_warn("config: ... and %" PRId64
            " more keys that are not DeepSpeed or zoffload keys (%" PRId64 " in all); ignored",
            n_unknown - UNKNOWN_NAMED, n_unknown);
}
