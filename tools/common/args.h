/*
 * args.h - option values shared by the tools (tools/common/args.c), and the one-line error for a
 * flag getopt_long refused; getopt_long parses the flags.
 */
#ifndef ZO_TOOLS_ARGS_H
#define ZO_TOOLS_ARGS_H

#include <getopt.h>
#include <stddef.h>
#include <stdint.h>

/*
 * zo_tool_parse_count() - "1000000", "1e9", "250M", "2G", "64MiB", "1GB":
 * a non-negative integral count; suffixes K M G T are powers of 1024 with
 * @binary (byte sizes) and of 1000 without (parameter counts); an optional
 * "B" or "iB" may follow the suffix. Returns 0 with *@out set, or -1 for
 * anything else (negative, fractional, overflow, trailing text).
 */
int zo_tool_parse_count(const char *s, int binary, uint64_t *out);

/*
 * zo_tool_parse_int() - a decimal integer in [@lo, @hi] (strtoll: leading
 * blanks and a sign allowed; no suffixes, no exponent), the whole string.
 * Returns 0 with *@out set, or -1 (empty, trailing text, overflow, out of
 * range; *@out unchanged). The caller prints its own message.
 */
int zo_tool_parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out);

/*
 * zo_tool_parse_double() - a finite decimal or exponent number in [@lo, @hi]
 * (strtod: leading blanks, a sign, "1e-3", "0x1p3" allowed), the whole string.
 * Returns 0 with *@out set, or -1 (empty, trailing text, NaN, infinite,
 * ERANGE overflow or underflow, out of range; *@out unchanged).
 */
int zo_tool_parse_double(const char *s, double lo, double hi, double *out);

/*
 * zo_tool_parse_bytes() - the tools' one parser of byte-size flags (zo-train --device-memory-limit,
 * zo-stepbench --block-size, zo-arenabench --capacity, zo-swapbench --size, ...): the library's
 * zo_parse_bytes() (zoffload/parse.h), the same the config's byte keys go through: "4K" = 4096,
 * "64MiB", "80G" = 80 x 2^30, "1GB" = 10^9, "1.5G"; zero accepted (callers that need more check).
 * Returns 0 with *@out set, or -1 (*@out unchanged; the caller prints its own message).
 */
int zo_tool_parse_bytes(const char *s, uint64_t *out);

/* Longest list zo_tool_split_list() takes, terminating NUL included. */
#define ZO_TOOL_LIST_MAX 1024

/*
 * zo_tool_split_list() - calls @fn(token, index, @ctx) for each token of the
 * comma list @s, index 0 first; empty tokens are skipped ("a,,b" is two
 * tokens, "," none). @fn returns 0 to go on, nonzero to stop. Returns the
 * number of tokens (0: an empty list, the caller decides), -1 when @fn
 * refused one (copied into @bad, @bad_n bytes, when @bad is not NULL), or -2
 * when @s is ZO_TOOL_LIST_MAX characters or longer (@fn not called).
 */
int zo_tool_split_list(const char *s, int (*fn)(const char *tok, int index, void *ctx), void *ctx,
                       char *bad, size_t bad_n);

/*
 * zo_tool_nearest_option() - the name of the long option in @longopts (getopt_long's table, ended by
 * a NULL name) nearest @word (a flag without its leading dashes and without "=VALUE"): at most 2
 * edits (optimal string alignment: insert, delete, replace, or swap two adjacent characters, each
 * 1) and at most a third of the longer name's length, so a short word suggests nothing; the first
 * of equals wins. An exact match is returned as is. NULL when none is that near.
 */
const char *zo_tool_nearest_option(const char *word, const struct option *longopts);

/*
 * zo_tool_option_error() - the one line for a flag getopt_long refused, on stderr, then the exit
 * status 2 for the caller to return. Call it where getopt_long returned '?' or ':' (@c), run with
 * opterr = 0 (getopt_long prints nothing itself) and, to tell a missing value apart, an optstring
 * that starts with ':'. Reads optind and optopt as getopt_long left them. The lines, @tool first:
 *   "zo-train: error: unknown flag --print-evry; did you mean --print-every? (zo-train --help
 *   lists the flags)", or without the suggestion when no flag is near (zo_tool_nearest_option);
 *   "... flag --sa is ambiguous: --save, --save-every (...)" for a prefix of several flags;
 *   "... --steps needs a value (...)"; "... --help takes no value (...)".
 */
int zo_tool_option_error(const char *tool, int c, int argc, char **argv,
                         const struct option *longopts);

#endif
