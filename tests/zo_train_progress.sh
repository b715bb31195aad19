#!/usr/bin/env bash
# zo_train_progress.sh ZO_TRAIN CONFIG CORPUS - zo-train's step lines: --print-every N logs every N steps and
# the last (validation, the short line with elapsed time and ETA, a --log-json object with elapsed_s and
# eta_s); without it, the config's steps_per_print plus progress lines (no validation, no JSON) after the
# run's steps 1, 2, 5, ...; --verbose gives the long line; the summary's overlap efficiency is
# max(compute, adam, swap) / step from the figures it prints beside it. Exit 0 pass, 1 fail.
set -u
zo=$1 cfg=$2 corpus=$3
work=$(mktemp -d "${TMPDIR:-/tmp}/zo-progress.XXXXXX")
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
fail() { echo "FAIL $*"; exit 1; }
run() { # NAME ARGS...: stdout to NAME.out (a pipe, as under tee or a scheduler), JSON lines to NAME.jsonl
  local name=$1
  shift
  timeout -k 10 120 "$zo" --config "$work/config.json" --data "$corpus" --no-sample --threads 1 \
    --log-json "$work/$name.jsonl" "$@" 2>&1 | cat >"$work/$name.out"
  [ "${PIPESTATUS[0]}" -eq 0 ] || { tail -5 "$work/$name.out"; fail "$name: zo-train $* failed"; }
}
steps_of() { sed -n 's/^step  *\([0-9]*\)\/.*/\1/p' "$1" | tr '\n' ' ' | sed 's/ $//'; }
short='^step  *[0-9]*/[0-9]* \| loss [0-9.]*( \| val [0-9.]*)? \| *[0-9]* tok/s \| [0-9.ms h]* elapsed \| ETA [0-9.ms h]*$'

# 1. --print-every 2 over 5 steps: logged steps 2, 4 and the last, 5
sed 's/"steps_per_print": *[0-9]*/"steps_per_print": 100/' "$cfg" >"$work/config.json"
grep -q '"steps_per_print": 100' "$work/config.json" || fail "$cfg: no steps_per_print to set"
run every --steps 5 --print-every 2
[ "$(steps_of "$work/every.out")" = "0 2 4 5" ] || { cat "$work/every.out"; fail "--print-every 2: step lines $(steps_of "$work/every.out"), want 0 2 4 5"; }
n=$(grep -c '^step  *[245]/5 | loss [0-9.]* | val [0-9.]* |' "$work/every.out")
[ "$n" -eq 3 ] || fail "--print-every 2: $n of 3 logged lines with a val loss"
bad=$(grep '^step  *[1-9]' "$work/every.out" | grep -Ev "$short")
[ -z "$bad" ] || fail "--print-every 2: not the short line: $bad"
len=$(grep '^step  *[1-9]' "$work/every.out" | awk '{ if (length($0) > m) m = length($0) } END { print m }')
[ "$len" -le 100 ] || fail "--print-every 2: a short line of $len characters (want <= 100)"
[ "$(grep -c '"step":' "$work/every.jsonl")" -eq 3 ] || fail "--print-every 2: $(wc -l <"$work/every.jsonl") JSON lines, want 3"
grep -q '"step":5,.*"elapsed_s":[0-9.e+-]*,"eta_s":0\.0' "$work/every.jsonl" \
  || { tail -1 "$work/every.jsonl"; fail "--print-every 2: step 5's JSON has no elapsed_s or an eta_s other than 0"; }
grep -q '"step":2,.*"eta_s":[0-9.e+-]*[1-9]' "$work/every.jsonl" || fail "--print-every 2: step 2's eta_s is not > 0"
grep -q 'ETA 0.0 s$' <(grep '^step  *5/5' "$work/every.out") || fail "the last step's ETA is not 0.0 s"
echo "ok   --print-every 2: $(grep '^step  *4/5' "$work/every.out")"

# 2. the config's steps_per_print (100) and no --print-every over 6 steps: progress lines after steps 1, 2
#    and 5 (no validation, no JSON), step 6 logged (the last)
run default --steps 6
[ "$(steps_of "$work/default.out")" = "0 1 2 5 6" ] || { cat "$work/default.out"; fail "default: step lines $(steps_of "$work/default.out"), want 0 1 2 5 6"; }
[ "$(grep -c '^step  *[125]/6 | loss [0-9.]* | ' "$work/default.out")" -eq 3 ] && ! grep -q '^step  *[125]/6 .*val' "$work/default.out" \
  || fail "default: the progress lines after steps 1, 2, 5 carry a val loss or are missing"
[ "$(grep -c '"step":' "$work/default.jsonl")" -eq 1 ] && grep -q '"step":6,' "$work/default.jsonl" \
  || fail "default: JSON lines $(grep -o '"step":[0-9]*' "$work/default.jsonl" | tr '\n' ' '), want step 6 only"
echo "ok   default schedule: $(grep -c '^step' "$work/default.out") step lines, $(grep '^step  *1/6' "$work/default.out")"

# 3. --verbose: the long line, elapsed and ETA at its end
run verbose --steps 2 --print-every 1 --verbose
n=$(grep -c '^step  *[12]/2 | loss .* | lr .* | ms/step .* | arena .* | [0-9.ms h]* elapsed, ETA [0-9.ms h]*$' "$work/verbose.out")
[ "$n" -eq 2 ] || { grep '^step' "$work/verbose.out"; fail "--verbose: $n of 2 long lines"; }
echo "ok   --verbose: $(grep '^step  *2/2' "$work/verbose.out" | cut -c1-120)..."

# 4. on a terminal (script(1) gives a pty): the step in a live line (carriage return, the progress figures,
#    erase to the end of the line, no newline), erased before the next printed line
if command -v script >/dev/null; then
  timeout -k 10 120 script -qec "OMP_NUM_THREADS=1 '$zo' --config '$work/config.json' --data '$corpus' --no-sample \
    --threads 1 --steps 4 --print-every 3" /dev/null >"$work/tty.raw" 2>&1 || { tail -5 "$work/tty.raw"; fail "tty run failed"; }
  esc=$(printf '\033')
  grep -q "step     1/4 | loss [0-9.]* | *[0-9]* tok/s | [0-9.ms h]* elapsed | ETA [0-9.ms h]*${esc}\[K" "$work/tty.raw" \
    || { cat -v "$work/tty.raw" | tail -8; fail "tty: no live line for step 1"; }
  grep -q "${esc}\[Kstep     3/4 | loss [0-9.]* | val " "$work/tty.raw" \
    || { cat -v "$work/tty.raw" | tail -8; fail "tty: the live line not erased before step 3's line"; }
  tr '\r' '\n' <"$work/tty.raw" | grep -q '^step     1/4 .*val' && fail "tty: step 1 was validated"
  echo "ok   terminal: live line $(tr '\r' '\n' <"$work/tty.raw" | grep -m1 '^step     1/4' | cat -v)"
else
  echo "note: no script(1): the terminal's live line is not checked"
fi

# 5. the summary's overlap efficiency: max(compute, adam, swap) / step of the figures on its own line
line=$(grep '^zo-train: per step' "$work/every.out")
[ -n "$line" ] || fail "no summary line"
read -r step compute adam swap eff < <(sed -n \
  's/.*per step \([0-9.]*\) ms = compute \([0-9.]*\) .*(adam \([0-9.]*\), swap \([0-9.]*\)) | overlap efficiency (max(compute, adam, swap) \/ step) \([0-9.]*\)$/\1 \2 \3 \4 \5/p' <<<"$line")
[ -n "${eff:-}" ] || fail "summary line not as expected: $line"
awk -v s="$step" -v c="$compute" -v a="$adam" -v w="$swap" -v e="$eff" 'BEGIN {
  m = c; if (a > m) m = a; if (w > m) m = w
  want = m / s; d = want - e; if (d < 0) d = -d
  exit !(d <= 0.002 + 0.06 * want) }' || fail "overlap efficiency $eff is not max($compute, $adam, $swap) / $step: $line"
echo "ok   summary: overlap efficiency $eff = max($compute, $adam, $swap) / $step"
echo "all passed"
