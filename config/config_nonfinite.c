/*
 * config_nonfinite.c - the literals Infinity, -Infinity and NaN in a config's
 * text, quoted before jansson reads it (JSON has no such literals). Not the
 * keys that accept them: config.c decides that.
 *
 * Python's json.dumps() (so HF accelerate's "steps_per_print": float("inf")) writes the literals Infinity,
 * -Infinity and NaN, which JSON and jansson refuse. Before jansson reads the text, each such literal outside a
 * string becomes the string NONFINITE_MARK + literal ("\u001fInfinity"): steps_per_print reads Infinity as
 * "never"; every other key refuses the value as it refuses any string, and messages show the literal bare.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base_internal.h"
#include "config_internal.h"

static const char *const k_nonfinite[] = {"-Infinity", "Infinity", "NaN"};

/* The literal at s[i] (outside a string, not inside a longer word), or NULL. */
static const char *nonfinite_at(const char *s, size_t len, size_t i) {
  if (i > 0 &&
      (isalnum((unsigned char)s[i - 1]) || s[i - 1] == '_' || s[i - 1] == '-' || s[i - 1] == '.'))
    return NULL;
  for (size_t k = 0; k < sizeof k_nonfinite / sizeof k_nonfinite[0]; k++) {
    size_t n = strlen(k_nonfinite[k]);
    if (len - i >= n && !memcmp(s + i, k_nonfinite[k], n) &&
        (i + n == len || !(isalnum((unsigned char)s[i + n]) || s[i + n] == '_')))
      return k_nonfinite[k];
  }
  return NULL;
}

/*
 * cfg_nonfinite_to_strings() - *@out: a malloc'd copy of @s (@len bytes) with each literal quoted as above, and its
 * length in *@out_len; *@out stays NULL when @s has none (parse @s itself). Error positions jansson reports later
 * on a line holding one are off by 8 columns per literal before them. ZO_ERR_OUT_OF_MEMORY or ZO_OK.
 */
zo_status cfg_nonfinite_to_strings(const char *s, size_t len, char **out, size_t *out_len) {
  *out = NULL;
  for (int pass = 0; pass < 2; pass++) {
    size_t n_lit = 0, o = 0;
    int in_str = 0;
    for (size_t i = 0; i < len; i++) {
      const char *lit = NULL;
      if (in_str) {
        if (s[i] == '\\' && i + 1 < len) {
          if (pass) (*out)[o++] = s[i];
          i++;
        } else if (s[i] == '"') {
          in_str = 0;
        }
      } else if (s[i] == '"') {
        in_str = 1;
      } else if ((s[i] == '-' || s[i] == 'I' || s[i] == 'N') && (lit = nonfinite_at(s, len, i))) {
        n_lit++;
        if (pass) o += (size_t)sprintf(*out + o, "\"\\u001f%s\"", lit);
        i += strlen(lit) - 1;
        continue;
      }
      if (pass) (*out)[o++] = s[i];
    }
    if (!pass) {
      if (!n_lit) return ZO_OK;
      /* each literal gains "\u001f and a closing quote: 8 bytes; n_lit <= len, so no overflow */
      *out = malloc(len + 8 * n_lit + 1);
      if (!*out)
        return zo_error_set(ZO_ERR_OUT_OF_MEMORY, "config: out of host memory (%zu bytes)",
                            len + 8 * n_lit + 1);
    } else {
      *out_len = o;
    }
  }
  return ZO_OK;
}

/* True when @v is the string cfg_nonfinite_to_strings() made of @lit. */
int cfg_is_nonfinite(const json_t *v, const char *lit) {
  return json_is_string(v) && json_string_value(v)[0] == NONFINITE_MARK[0] &&
         !strcmp(json_string_value(v) + 1, lit);
}
