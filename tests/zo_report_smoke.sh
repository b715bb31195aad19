#!/bin/bash
# zo_report_smoke.sh ZO_REPORT DIR - zo-report --json parses and holds the main sections; text and --help run.
set -u
rep=$1 dir=$2
fail() { echo "zo_report_smoke: FAIL: $*"; exit 1; }
out=$("$rep" --json --path "$dir") || fail "zo-report --json exited $?"
for key in '"zoffload"' '"cpu"' '"simd_best"' '"avx512f"' '"numa_nodes"' '"physical_cores"' '"gpu"' '"nccl"' \
           '"io_uring"' '"READ_FIXED"' '"sqpoll"' '"o_direct"' '"memlock"' '"soft_bytes"' '"jemalloc"' '"build_type"'; do
  grep -q "$key" <<<"$out" || fail "key $key missing from --json output"
done
if command -v python3 >/dev/null; then
  python3 -c 'import json,sys; json.load(sys.stdin)' <<<"$out" || fail "--json output is not valid JSON"
fi
"$rep" --path "$dir" | grep -q "io_uring:" || fail "text output lacks the io_uring section"
"$rep" --help | grep -q -- "--path" || fail "--help does not list --path"
"$rep" --bogus >/dev/null 2>&1; [ $? -eq 2 ] || fail "a bad flag should exit 2"
echo "zo_report_smoke: ok"
