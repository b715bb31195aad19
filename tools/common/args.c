/*
 * args.c - the option values the tools share: integers, doubles, counts, byte
 * sizes and comma lists (--params, --capacity, --sizes, --block-sizes,
 * --max-seconds), and the one line for a flag getopt_long refused, with the
 * nearest known flag. Flag parsing itself is getopt_long; value messages are
 * the caller's.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"

#include "zoffload/parse.h"

int zo_tool_parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out) {
  char *end = NULL;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

int zo_tool_parse_count(const char *s, int binary, uint64_t *out) {
  char *end = NULL;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || !(v >= 0)) return -1;
  double m = 1;
  if (*end) {
    switch (*end) {
      case 'k':
      case 'K': m = binary ? 1024.0 : 1e3; break;
      case 'm':
      case 'M': m = binary ? 1048576.0 : 1e6; break;
      case 'g':
      case 'G': m = binary ? 1073741824.0 : 1e9; break;
      case 't':
      case 'T': m = binary ? 1099511627776.0 : 1e12; break;
      default: return -1;
    }
    if (end[1] && !(end[1] == 'i' && end[2] == 'B' && !end[3]) && !(end[1] == 'B' && !end[2]))
      return -1;
  }
  v *= m;
  if (v > 1.8e19 || v != floor(v)) return -1;
  *out = (uint64_t)v;
  return 0;
}

int zo_tool_parse_double(const char *s, double lo, double hi, double *out) {
  char *end = NULL;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end || !isfinite(v) || !(v >= lo) || !(v <= hi)) return -1;
  *out = v;
  return 0;
}

int zo_tool_parse_bytes(const char *s, uint64_t *out) {
  return zo_parse_bytes(s, out) == ZO_OK ? 0 : -1; /* the config's parser: one meaning of "80G" */
}

int zo_tool_split_list(const char *s, int (*fn)(const char *tok, int index, void *ctx), void *ctx,
                       char *bad, size_t bad_n) {
  char buf[ZO_TOOL_LIST_MAX];
  if (strlen(s) >= sizeof buf) return -2;
  memcpy(buf, s, strlen(s) + 1);
  int count = 0;
  char *save = NULL;
  for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save), count++) {
    if (fn(tok, count, ctx) != 0) {
      if (bad && bad_n) snprintf(bad, bad_n, "%s", tok);
      return -1;
    }
  }
  return count;
}

/* zo_tool_nearest_option() on the first @n bytes of @word: the config's key-suggestion rule
 * (zo_name_suggestion_distance, zoffload/parse.h), first best wins. */
static const char *nearest(const char *word, size_t n, const struct option *longopts) {
  const char *best = NULL;
  int best_d = ZO_NAME_DIST_MAX;
  for (const struct option *o = longopts; o->name; o++) {
    const int d = zo_name_suggestion_distance(word, n, o->name);
    if (d < best_d) best = o->name, best_d = d;
  }
  return best;
}

const char *zo_tool_nearest_option(const char *word, const struct option *longopts) {
  return nearest(word, strcspn(word, "="), longopts);
}

int zo_tool_option_error(const char *tool, int c, int argc, char **argv,
                         const struct option *longopts) {
  const char *w = optind > 0 && optind <= argc ? argv[optind - 1] : "";
  /* an unknown short flag inside a cluster ("-steps"): getopt_long has not moved past its word */
  if (optopt && optind < argc && argv[optind][0] == '-' && argv[optind][1] == optopt)
    w = argv[optind];
  char help[96];
  snprintf(help, sizeof help, "(%s --help lists the flags)", tool);
  const int is_long = w[0] == '-' && w[1] == '-' && w[2];
  /* "-steps": a long flag with one dash, which getopt_long read as -s -t ... */
  const int one_dash = !is_long && w[0] == '-' && w[1] && w[1] != '-' && w[2] && optopt == w[1];
  if (!is_long && !one_dash) {
    const int ch = optopt > 32 && optopt < 127 ? optopt : '?';
    if (c == ':')
      fprintf(stderr, "%s: error: -%c needs a value %s\n", tool, ch, help);
    else
      fprintf(stderr, "%s: error: unknown flag -%c %s\n", tool, ch, help);
    return 2;
  }
  const char *name = w + (is_long ? 2 : 1);
  const size_t n = strcspn(name, "=");
  const struct option *exact = NULL;
  int n_prefix = 0;
  for (const struct option *o = longopts; o->name; o++) {
    if (strlen(o->name) == n && !strncmp(o->name, name, n)) exact = o;
    if (!strncmp(o->name, name, n)) n_prefix++;
  }
  if (is_long && exact && c == ':') {
    fprintf(stderr, "%s: error: --%s needs a value %s\n", tool, exact->name, help);
    return 2;
  }
  if (is_long && exact && name[n] == '=' && exact->has_arg == no_argument) {
    fprintf(stderr, "%s: error: --%s takes no value %s\n", tool, exact->name, help);
    return 2;
  }
  if (is_long && !exact && n_prefix > 1) { /* getopt_long takes a unique prefix only */
    fprintf(stderr, "%s: error: flag --%.*s is ambiguous:", tool, (int)n, name);
    const char *sep = " ";
    for (const struct option *o = longopts; o->name; o++)
      if (!strncmp(o->name, name, n)) fprintf(stderr, "%s--%s", sep, o->name), sep = ", ";
    fprintf(stderr, " %s\n", help);
    return 2;
  }
  const char *near = nearest(name, n, longopts);
  if (near)
    fprintf(stderr, "%s: error: unknown flag %.*s; did you mean --%s? %s\n", tool,
            (int)(name - w + n), w, near, help);
  else
    fprintf(stderr, "%s: error: unknown flag %.*s %s\n", tool, (int)(name - w + n), w, help);
  return 2;
}
