#!/usr/bin/env bash
# zo_train_crash.sh ZO_TRAIN CONFIG CORPUS [KILLS] - crash safety of checkpoints: zo-train saving
# after every step (--save-every 1, --keep-last 2, resuming from `latest` each time) is killed with
# SIGKILL KILLS times (default 60), each at a pseudo-random moment (fixed seed) 0-500 ms after the run
# printed its first checkpoint, so no kill depends on how fast the machine starts a process; after each
# kill a new process must load `latest` (every checksum verified) and name its step. The tiny model
# spends most of its time in saves, so most kills land inside one (counted by the .tmp-* directory
# or .latest.PID.N.tmp a killed save leaves behind). Exit 0 pass, 1 fail.
set -u
zo=$1 cfg=$2 corpus=$3 kills=${4:-60}
work=$(mktemp -d "${TMPDIR:-/tmp}/zo-crash.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
root="$work/ckpt"
RANDOM=20261124
mid_save=0 mid_latest=0 loaded=0 last=0
for ((i = 1; i <= kills; i++)); do
  "$zo" --config "$cfg" --data "$corpus" --threads 1 --no-sample --steps 1000000 --save "$root" --save-every 1 \
        --keep-last 2 --resume latest >"$work/run.out" 2>&1 &
  pid=$!
  until grep -q '^zo-train: checkpoint ' "$work/run.out"; do # this run's first save is done
    kill -0 "$pid" 2>/dev/null || { cat "$work/run.out"; fail "kill $i: zo-train exited before its first checkpoint"; }
    sleep 0.02
  done
  sleep "0.$(printf '%03d' $((RANDOM % 500)))"
  kill -9 "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  [ -n "$(ls -A "$root" 2>/dev/null | grep '^\.tmp-')" ] && mid_save=$((mid_save + 1))
  compgen -G "$root/.latest.*.tmp" >/dev/null && mid_latest=$((mid_latest + 1))
  [ -e "$root/latest" ] || continue
  name=$(cat "$root/latest")
  step=$((10#${name#step-}))
  "$zo" --config "$cfg" --data "$corpus" --threads 1 --no-sample --steps "$step" --resume "$root" \
        >"$work/load.out" 2>&1 || { cat "$work/run.out" "$work/load.out"; fail "kill $i: latest ($name) does not load"; }
  grep -q "resumed from $root at step $step" "$work/load.out" || { cat "$work/load.out"; fail "kill $i: wrong step"; }
  [ "$step" -ge "$last" ] || fail "kill $i: latest went back from step $last to $step"
  last=$step loaded=$((loaded + 1))
done
echo "$kills kills: $mid_save inside a save (a .tmp-* directory left), $mid_latest while replacing latest;"
echo "latest loaded with every checksum verified $loaded times, reaching step $last"
[ "$loaded" -eq "$kills" ] || fail "latest was missing after $((kills - loaded)) of $kills kills"
[ "$mid_save" -ge 1 ] || fail "no kill landed inside a save"
echo PASS
