#!/usr/bin/env bash
# zo_train_signal.sh ZO_TRAIN CONFIG CORPUS - SIGTERM / SIGINT stop zo-train promptly, cleanly and visibly:
#  1. SIGTERM mid-training with --save: exit 143, a checkpoint of the last completed step, which resumes to the
#     same losses as an uninterrupted run over the following steps;
#  2. SIGINT: exit 130;
# (A link slow enough to hold a step for minutes can no longer be configured: zoffload.host_link_gbps is at
# least 0.1 GB/s, zo_train_errors checks the refusal of 1e-9. That the emulated link stops throttling on a stop
# request is test_stop's check, through the device API at 1 byte/s.)
# Every run sits under `timeout -s KILL`; the bound on the time to exit is generous (30 s; each case measured
# at under 0.1 s when the machine is idle), never a tight one. Exit 0 pass, 1 fail.
set -u
zo=$1 cfg=$2 corpus=$3
work=$(mktemp -d "${TMPDIR:-/tmp}/zo-signal.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
bound=30
now() { date +%s.%N; }

# start NAME CONFIG ARGS...: zo-train in the background (pid in $pid), output in $work/NAME.out
start() {
  local name=$1 c=$2
  shift 2
  timeout -s KILL 300 "$zo" --config "$c" --data "$corpus" --threads 1 --no-sample "$@" >"$work/$name.out" 2>&1 &
  pid=$!
}
# wait_line NAME PATTERN: until the run prints PATTERN (or dies)
wait_line() {
  until grep -q "$2" "$work/$1.out"; do
    kill -0 "$pid" 2>/dev/null || { cat "$work/$1.out"; fail "$1: exited before printing '$2'"; }
    sleep 0.05
  done
}
# stop NAME SIG WANT_RC: send SIG, wait, check the exit status and the time it took
stop() {
  local name=$1 sig=$2 want=$3 t0 rc dt
  kill -"$sig" "$pid"
  t0=$(now)
  wait "$pid"
  rc=$?
  dt=$(echo "$(now) - $t0" | bc)
  echo "$name: SIG$sig -> exit $rc after $dt s"
  tail -n 4 "$work/$name.out" | sed 's/^/  | /'
  [ "$rc" -eq "$want" ] || { cat "$work/$name.out"; fail "$name: SIG$sig gave exit status $rc, want $want"; }
  awk -v d="$dt" -v b="$bound" 'BEGIN { exit !(d < b) }' || fail "$name: took $dt s to exit after SIG$sig (bound $bound s)"
}
losses() { grep -o '"step": *[0-9]*, *"loss": *[-0-9.eE+]*, *"val_loss": *[-0-9.eE+]*' "$1" | tr -d ' ' |
           awk -F'[:,]' -v s="$2" '$2 > s'; }

# 1. SIGTERM mid-training, --save: the last completed step is saved and resumes as if never stopped
root="$work/ck"
start term "$cfg" --steps 1000000 --save "$root"
wait_line term '^step     0/'
sleep 0.5
stop term TERM 143
grep -q '^zo-train: interrupted (Terminated) after step [0-9]*' "$work/term.out" || fail "term: no 'interrupted' line"
n=$(sed -n 's/^zo-train: interrupted (Terminated) after step \([0-9]*\).*/\1/p' "$work/term.out")
[ "$n" -ge 1 ] || fail "term: stopped after step $n: no step completed in 0.5 s"
want=$(printf 'step-%012d' "$n")
grep -q "^zo-train: checkpoint $root/$want " "$work/term.out" || { cat "$work/term.out"; fail "term: no checkpoint of step $n"; }
[ "$(cat "$root/latest" 2>/dev/null)" = "$want" ] || fail "term: latest is '$(cat "$root/latest" 2>/dev/null)', want $want"
end=$((n + 12))
"$zo" --config "$cfg" --data "$corpus" --threads 1 --no-sample --steps "$end" --resume "$root" \
      --log-json "$work/resumed.jsonl" >"$work/resumed.out" 2>&1 || { cat "$work/resumed.out"; fail "resume failed"; }
grep -q "resumed from $root at step $n" "$work/resumed.out" || { cat "$work/resumed.out"; fail "resumed at the wrong step"; }
"$zo" --config "$cfg" --data "$corpus" --threads 1 --no-sample --steps "$end" \
      --log-json "$work/straight.jsonl" >"$work/straight.out" 2>&1 || { cat "$work/straight.out"; fail "plain run failed"; }
a=$(losses "$work/resumed.jsonl" "$n") b=$(losses "$work/straight.jsonl" "$n")
[ -n "$a" ] || fail "the resumed run logged no step after $n"
[ "$a" = "$b" ] || { echo "resumed: $a"; echo "uninterrupted: $b"; fail "steps $((n + 1))..$end differ after the resume"; }
echo "resumed from step $n: steps $((n + 1))..$end logged the same losses as an uninterrupted run ($(echo "$a" | wc -l) lines)"

# 2. SIGINT
start int "$cfg" --steps 1000000
wait_line int '^step     0/'
sleep 0.3
stop int INT 130

echo PASS
