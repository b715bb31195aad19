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

#endif
