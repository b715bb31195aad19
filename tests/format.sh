#!/usr/bin/env bash
# format.sh SOURCE_DIR - every C, C header and CUDA file the repository tracks is as clang-format formats it with
# the root .clang-format (`clang-format --dry-run --Werror`): each file that is not is named, with the first
# lines clang-format would change. The style was set with clang-format 14; another major version formats a few
# constructs differently, so the test runs only with 14 and skips (77) otherwise, or without clang-format or git.
set -u
cd "${1:-.}" || exit 1
command -v clang-format >/dev/null || { echo "skip: no clang-format"; exit 77; }
ver=$(clang-format --version | sed -n 's/.*version \([0-9]*\).*/\1/p')
[ "$ver" = 14 ] || { echo "skip: clang-format $ver, the style is checked with 14"; exit 77; }
files=$(git ls-files '*.c' '*.h' '*.cu' '*.cuh' 2>/dev/null) || { echo "skip: not a git checkout"; exit 77; }
[ -n "$files" ] || { echo "skip: not a git checkout"; exit 77; }
fail=0 n=0
for f in $files; do
  n=$((n + 1))
  if ! out=$(clang-format --dry-run --Werror "$f" 2>&1); then
    echo "FAIL: $f is not formatted (clang-format -i $f):"
    echo "$out" | head -6
    fail=1
  fi
done
[ "$n" -gt 100 ] || { echo "FAIL: only $n files found: the scan is broken"; exit 1; }
[ $fail = 0 ] && echo "ok: $n C/CUDA files formatted as .clang-format says"
exit $fail
