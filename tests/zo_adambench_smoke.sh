#!/usr/bin/env bash
# zo_adambench_smoke.sh ZO_ADAMBENCH - runs zo-adambench --quick --json and checks the JSON
# carries the fields the issue names, with positive figures, plus --help and bad-flag handling.
# Exit 0 pass, 1 fail.
set -u
bench=$1
work=$(mktemp -d "${TMPDIR:-/tmp}/zo-adambench.XXXXXX")
trap 'rm -rf "$work"' EXIT
failures=0
fail() {
  echo "FAIL $*"
  failures=$((failures + 1))
}

# 1. the quick run itself
"$bench" --quick --json "$work/out.json" >"$work/stdout" 2>"$work/stderr"
rc=$?
if [ $rc -ne 0 ]; then
  fail "zo-adambench --quick exited $rc; stderr:"
  cat "$work/stderr"
fi
[ -s "$work/out.json" ] || fail "no JSON written to $work/out.json"
ntarget=$(grep -cE '^  (PASS|MISS|N/A ) target [123]:' "$work/stdout")
[ "$ntarget" -eq 3 ] || fail "expected 3 target lines (PASS/MISS/N/A), got $ntarget"

# 2. the JSON: every required key, positive figures, one result per variant x size x thread count
result_keys="variant simd grad_dtype state_dtype copy_out n threads params_per_s gbps pct_of_roofline"
roof_keys="pattern n threads gbps"
nvariants=10 nsizes=2 nthreads=2
want_results=$((nvariants * nsizes * nthreads))
if command -v jq >/dev/null 2>&1; then
  got=$(jq '.results | length' "$work/out.json")
  [ "$got" = "$want_results" ] || fail "results: want $want_results entries, got $got"
  got=$(jq '.roofline | length' "$work/out.json")
  [ "$got" -gt 0 ] 2>/dev/null || fail "roofline: no entries ($got)"
  for k in $result_keys; do
    missing=$(jq --arg k "$k" '[.results[] | select(has($k) | not)] | length' "$work/out.json")
    [ "$missing" = 0 ] || fail "results: $missing entries lack \"$k\""
  done
  for k in $roof_keys; do
    missing=$(jq --arg k "$k" '[.roofline[] | select(has($k) | not)] | length' "$work/out.json")
    [ "$missing" = 0 ] || fail "roofline: $missing entries lack \"$k\""
  done
  bad=$(jq '[.results[] | select((.params_per_s > 0 and .gbps > 0 and .pct_of_roofline > 0) | not)] | length' \
    "$work/out.json")
  [ "$bad" = 0 ] || fail "results: $bad entries with a figure <= 0"
  bad=$(jq '[.roofline[] | select((.gbps > 0) | not)] | length' "$work/out.json")
  [ "$bad" = 0 ] || fail "roofline: $bad entries with gbps <= 0"
  bad=$(jq '[.results[] | select(.nonfinite == true)] | length' "$work/out.json")
  [ "$bad" = 0 ] || fail "results: $bad entries report a nonfinite gradient (the bench's gradients are finite)"
else # no jq: count keys with grep (jansson writes one key per line with JSON_INDENT)
  for k in $result_keys; do
    got=$(grep -c "^      \"$k\":" "$work/out.json")
    [ "$got" -ge "$want_results" ] || fail "results: \"$k\" appears $got times, want >= $want_results"
  done
  grep -q '^  "roofline": \[' "$work/out.json" || fail "no \"roofline\" array"
  grep -q '^  "results": \[' "$work/out.json" || fail "no \"results\" array"
  grep -qE '"(gbps|params_per_s|pct_of_roofline)": (-|0[,.]?$|0,)' "$work/out.json" && fail "a figure <= 0"
fi

# 3. forced SIMD levels run their roofline and Adam kernels (skip a level this CPU lacks)
for lvl in scalar avx2 avx512; do
  "$bench" --sizes 1003,20000 --threads 1,all --reps 2 --simd $lvl --variants adamw_fp32g,adamw_bf16g_out_bf16s \
    >"$work/lvl.out" 2>"$work/lvl.err"
  rc=$?
  if [ $rc -ne 0 ] && grep -q 'not supported' "$work/lvl.err"; then
    echo "note: --simd $lvl not supported here, skipped"
  elif [ $rc -ne 0 ]; then
    fail "--simd $lvl exited $rc: $(cat "$work/lvl.err")"
  elif ! grep -q "^adam     adamw_fp32g  *$lvl " "$work/lvl.out"; then
    fail "--simd $lvl: no adamw_fp32g row at level $lvl"
  fi
done

# 4. --help lists every flag and exits 0; bad input exits non-zero with one error line
"$bench" --help >"$work/help" 2>&1 || fail "--help exited non-zero"
for f in --sizes --threads --reps --warmup --simd --variants --no-thp --quick --json --strict --help; do
  grep -q -- "$f" "$work/help" || fail "--help does not mention $f"
done
for bad in "--sizes 0" "--sizes 2^x" "--threads 0" "--reps 0" "--simd avx9" "--variants nope" "--bogus"; do
  # shellcheck disable=SC2086
  "$bench" $bad >"$work/bad.out" 2>"$work/bad.err"
  rc=$?
  [ $rc -ne 0 ] || fail "'$bad' exited 0"
done

if [ $failures -ne 0 ]; then
  echo "zo_adambench_smoke: $failures failure(s)"
  exit 1
fi
echo "zo_adambench_smoke: ok ($(grep -cE '^(adam|sqnorm) ' "$work/stdout") result rows; $(grep -E 'target 1:' "$work/stdout"))"
exit 0
