#!/usr/bin/env bash
# zo_train_ckpt_diskfull.sh ZO_TRAIN CONFIG CORPUS - a save that runs out of disk (a 1 MiB tmpfs:
# one checkpoint of the tiny model, 0.64 MB, fits; a second does not) fails with an error naming
# the file and "No space left on device", removes its partial directory, and leaves the previous
# checkpoint and `latest` loadable. Needs root to mount the tmpfs: exit 77 (skip) otherwise.
# Exit 0 pass, 1 fail.
set -u
zo=$1 cfg=$2 corpus=$3
work=$(mktemp -d "${TMPDIR:-/tmp}/zo-diskfull.XXXXXX")
mkdir -p "$work/mnt"
trap 'umount "$work/mnt" 2>/dev/null; rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
if ! mount -t tmpfs -o size=1m tmpfs "$work/mnt" 2>/dev/null; then
  echo "skip: cannot mount a tmpfs here (needs root)"
  exit 77
fi
root="$work/mnt/ckpt"
"$zo" --config "$cfg" --data "$corpus" --threads 2 --no-sample --steps 20 --save "$root" --save-every 10 \
      --keep-last 5 >"$work/out" 2>&1 && { cat "$work/out"; fail "the second save fitted: the tmpfs is too large"; }
grep -q "checkpoint step-000000000010\|checkpoint .*/step-000000000010 " "$work/out" || { cat "$work/out"; fail "no first checkpoint"; }
grep -q "zo-train: error: --save: checkpoint: writing '.*' at offset [0-9]* .*No space left on device" "$work/out" \
  || { cat "$work/out"; fail "the full disk was not reported naming the file and offset"; }
echo "ok   full disk: $(grep error: "$work/out")"
[ "$(cat "$root/latest")" = "step-000000000010" ] || fail "latest does not name step 10: $(cat "$root/latest")"
[ -z "$(ls -A "$root" | grep '^\.')" ] || fail "the failed save left $(ls -A "$root" | grep '^\.')"
"$zo" --config "$cfg" --data "$corpus" --threads 2 --no-sample --steps 12 --resume "$root" >"$work/load.out" 2>&1 \
  || { cat "$work/load.out"; fail "the previous checkpoint does not load"; }
grep -q "resumed from $root at step 10" "$work/load.out" || fail "resumed at the wrong step"
echo "ok   the previous checkpoint (step 10) loads and trains on; nothing of the failed save is left"
echo PASS
