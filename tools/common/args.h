/* args.h - argument values shared by the benchmark tools (tools/common/args.c). */
#ifndef ZO_TOOLS_ARGS_H
#define ZO_TOOLS_ARGS_H

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

#endif
