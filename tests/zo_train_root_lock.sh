#!/usr/bin/env bash
# zo_train_root_lock.sh ZO_TRAIN CONFIG CORPUS [ROUNDS] - one run per --save root, and leftovers removed only
# when the process they are named after is gone (10-step runs of the tiny model saving every 5 steps):
#   - a run holding a root (its lock file names it; stopped with SIGSTOP meanwhile): a second run there exits 1
#     at start-up, before training, its message naming the first's pid and host; the first, continued, finishes
#     and its checkpoint is whole;
#   - ROUNDS (default 20) times, two runs released together through a FIFO gate on one root: a run that fails
#     was refused at start-up naming the other (never one dying after training), at least one succeeds, and the
#     root holds a whole checkpoint (`latest` names step 10, which resumes with every checksum checked) and
#     nothing else (no temporary directory, no lock file); in at least one round one run is refused (in practice
#     all but a few: the runs overlap unless the machine stalls one for a whole run);
#   - a root holding leftovers of an interrupted save (.tmp-step-N.PID and .old-step-N.PID directories, a
#     .latest.PID.N.tmp file) of a process that is gone and of one that is alive: a run removes the first and
#     names them, and leaves the second alone, naming it in a warning.
# Exit 0 pass, 1 fail.
set -u
zo=$1 cfg=$2 corpus=$3 rounds=${4:-20}
work=$(mktemp -d "${TMPDIR:-/tmp}/zo-rootlock.XXXXXX")
live=
trap '[ -n "$live" ] && kill $live 2>/dev/null; rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
train() { timeout 120 "$zo" --config "$cfg" --data "$corpus" --threads 1 --no-sample --nvme-path "$work" "$@"; }
# train_bg OUT ARGS...: zo-train in the background once it reads a line from the gate, a FIFO this script holds
# open for reading and writing (so no open of it waits), each start taking one line (sh reads a FIFO a byte at a
# time); sh execs zo-train, so $! is its pid; ctest's TIMEOUT bounds a hang. open_gate N: N lines, one write.
mkfifo "$work/gate"
exec {gate}<>"$work/gate"
train_bg() {
  sh -c 'read x <"$0"; exec "$@"' "$work/gate" "$zo" --config "$cfg" --data "$corpus" --threads 1 --no-sample \
     --nvme-path "$work" "${@:2}" >"$1" 2>&1 &
}
open_gate() { local s= i; for ((i = 0; i < $1; i++)); do s+=$'go\n'; done; printf '%s' "$s" >&"$gate"; }
host=$(hostname)
# refused_by OUT PID: OUT is a run refused at start-up naming PID on this host
refused_by() {
  grep -qF "zo-train: error: --save: checkpoint: root " "$1" && grep -qF "is in use by another run: pid $2 on host $host, started " "$1" &&
    ! grep -q "^step " "$1"
}
# whole ROOT: `latest` names step 10, which resumes; nothing else but the two checkpoints is left
whole() {
  [ "$(cat "$1/latest")" = step-000000000010 ] || fail "$2: latest is '$(cat "$1/latest")'"
  local left
  left=$(ls -A "$1" | grep -v '^latest$' | grep -v '^step-0000000000\(05\|10\)$')
  [ -z "$left" ] || fail "$2: the root holds $left"
  train --steps 10 --resume "$1" >"$work/resume.out" 2>&1 ||
    { cat "$work/resume.out"; fail "$2: the checkpoint does not resume"; }
  grep -q "resumed from $1 at step 10" "$work/resume.out" || fail "$2: no resume line"
}

# One run holds the root (stopped while its lock file names it, so it surely still runs): the second is refused
root=$work/held
train_bg "$work/a.out" --steps 10 --save-every 5 --save "$root"
pa=$!
open_gate 1
for _ in $(seq 1000); do # until its lock file names it (a zoffload without the lock never does)
  grep -qx "pid $pa" "$root/.zoffload-lock" 2>/dev/null && break
  kill -0 $pa 2>/dev/null || break
  sleep 0.005
done
kill -STOP $pa 2>/dev/null
train --steps 10 --save-every 5 --save "$root" >"$work/b.out" 2>&1
rb=$?
kill -CONT $pa 2>/dev/null
wait $pa
ra=$?
[ $ra = 0 ] || { cat "$work/a.out"; fail "the run holding the root: exit $ra"; }
[ $rb = 1 ] && refused_by "$work/b.out" $pa || { cat "$work/b.out"; fail "the second run: exit $rb, not refused naming pid $pa"; }
whole "$root" "the held root"
echo "ok: a second run on a held root refused at start-up: $(grep -m1 -o 'checkpoint: root .* on host [^,]*' "$work/b.out")"

refusals=0 won=0
for r in $(seq 1 "$rounds"); do
  root=$work/root$r
  train_bg "$work/a.out" --steps 10 --save-every 5 --save "$root"
  pa=$!
  train_bg "$work/b.out" --steps 10 --save-every 5 --save "$root"
  pb=$!
  open_gate 2
  wait $pa
  ra=$?
  wait $pb
  rb=$?
  [ $ra = 0 ] || [ $rb = 0 ] || { cat "$work/a.out" "$work/b.out"; fail "round $r: both runs failed ($ra, $rb)"; }
  [ $ra = 0 ] || refused_by "$work/a.out" $pb || { cat "$work/a.out"; fail "round $r: run A exit $ra, not refused naming B"; }
  [ $rb = 0 ] || refused_by "$work/b.out" $pa || { cat "$work/b.out"; fail "round $r: run B exit $rb, not refused naming A"; }
  [ $ra = 0 ] && [ $rb = 0 ] || refusals=$((refusals + 1))
  [ $ra = 0 ] && [ $rb != 0 ] && won=$((won + 1))
  whole "$root" "round $r"
done
if [ "$rounds" -gt 0 ]; then
  [ $refusals -gt 0 ] || fail "$rounds rounds of two runs released together on one root, and no run was refused"
  echo "ok: $rounds rounds of two runs released together on one root: $refusals with one run refused at start-up" \
       "naming the other (A won $won), $((rounds - refusals)) one after the other; every root whole"
fi

# Leftovers of a gone process (pid above PID_MAX_LIMIT, never a live one) and of a live one (a sleep of ours)
dead=4194305
sleep 300 &
live=$!
root=$work/leftovers
mkdir -p "$root"
for p in $dead $live; do
  for d in .tmp-step-000000000007.$p .old-step-000000000007.$p; do
    mkdir "$root/$d" && echo '{}' >"$root/$d/manifest.json"
  done
  echo step-000000000007 >"$root/.latest.$p.0.tmp"
done
train --steps 3 --save "$root" >"$work/left.out" 2>&1 || { cat "$work/left.out"; fail "the run beside the leftovers"; }
for n in .tmp-step-000000000007 .old-step-000000000007 .latest; do
  f=$n.$dead && [ $n = .latest ] && f=$n.$dead.0.tmp
  [ -e "$root/$f" ] && fail "$f, a leftover of a gone process, is still there"
  grep -qF "removed '$root/$f', left by an interrupted save" "$work/left.out" || { cat "$work/left.out"; fail "$f: not named"; }
  f=$n.$live && [ $n = .latest ] && f=$n.$live.0.tmp
  [ -e "$root/$f" ] || fail "$f, a leftover of live pid $live, was removed"
  grep -qF "left '$root/$f' alone: process $live, which wrote it, is alive" "$work/left.out" ||
    { cat "$work/left.out"; fail "$f: kept without saying why"; }
done
echo "ok: leftovers of gone pid $dead removed, of live pid $live kept"
