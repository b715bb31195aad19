#!/usr/bin/env bash
# zo_train_tmpfiles.sh ZO_TRAIN CONFIG CORPUS - zo-train's outputs never write through what someone planted, and
# never replace anything but a regular file (three-step runs of the tiny model):
#   - a symbolic link to a victim file at ROOT/.latest.tmp (the name `latest` was once written under) and at
#     OUT.tmp (the export's): the run saves and exports beside them, every victim keeps its bytes, `latest` and
#     OUT are regular files;
#   - --export-safetensors naming a symbolic link, a FIFO, a directory or (as root) a character device with
#     /dev/full's numbers, and a --save root whose `latest` is a symbolic link: refused at start-up, before
#     training, naming the path and what it is; each is left exactly as it was.
# Exit 0 pass, 1 fail.
set -u
zo=$1 cfg=$2 corpus=$3
work=$(mktemp -d "${TMPDIR:-/tmp}/zo-tmpfiles.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
train() { timeout 60 "$zo" --config "$cfg" --data "$corpus" --threads 1 --no-sample --nvme-path "$work" --steps 3 "$@"; }
victim=$work/victim
echo "the victim's own bytes" >"$victim"
intact() { [ -f "$victim" ] && [ ! -L "$victim" ] && [ "$(cat "$victim")" = "the victim's own bytes" ] ||
  fail "$1: the victim now holds '$(head -c 60 "$victim" | tr -c '[:print:]' '?')'"; }

# links at the temporary names
root=$work/root
mkdir "$root"
ln -s "$victim" "$root/.latest.tmp"
ln -s "$victim" "$work/model.safetensors.tmp"
train --save "$root" --export-safetensors "$work/model.safetensors" >"$work/plant.out" 2>&1 ||
  { cat "$work/plant.out"; fail "the run beside the planted links"; }
intact "links at .latest.tmp and model.safetensors.tmp"
[ -f "$root/latest" ] && [ ! -L "$root/latest" ] && [ "$(cat "$root/latest")" = step-000000000003 ] ||
  fail "latest is not a regular file naming step 3: $(ls -l "$root/latest")"
[ -f "$work/model.safetensors" ] && [ ! -L "$work/model.safetensors" ] || fail "the export is not a regular file"
echo "ok: links at .latest.tmp and model.safetensors.tmp left alone, the victim unchanged"

# refused targets: NAME MAKE: what MAKE made at $work/NAME is refused as --export-safetensors, and stays as it was
refused() {
  local name=$1 out=$work/$1 what=$3
  eval "$2" || { echo "skip $name: cannot make it here"; return; }
  local before
  before=$(stat -c '%F %t:%T %s %Y' "$out")
  train --export-safetensors "$out" >"$work/$name.out" 2>&1
  local rc=$?
  [ $rc = 1 ] || { cat "$work/$name.out"; fail "$name: exit $rc, expected 1"; }
  grep -qF "zo-train: error: --export-safetensors: '$out' is $what, not a regular file: not replacing it" \
    "$work/$name.out" || { cat "$work/$name.out"; fail "$name: not refused naming it"; }
  grep -q "^step " "$work/$name.out" && fail "$name: refused only after training"
  [ "$(stat -c '%F %t:%T %s %Y' "$out")" = "$before" ] || fail "$name: changed: $(stat -c '%F %t:%T %s' "$out")"
  ls -A "$work" | grep -q "^\.$name\..*\.tmp$" && fail "$name: a temporary file left beside it"
  echo "ok $name: $(grep -m1 -o "'.*' is .*: not replacing it" "$work/$name.out")"
}
refused link 'ln -s "$victim" "$out"' "a symbolic link"
intact "the export to a link"
refused fifo 'mkfifo "$out"' "a FIFO"
refused dir 'mkdir "$out"' "a directory"
if [ "$(id -u)" = 0 ]; then
  refused chardev 'mknod "$out" c 1 7' "a device"
else
  echo "skip chardev: only root makes device nodes"
fi

# `latest` of the --save root a link: refused at start-up, the link and its target as they were
root=$work/root2
mkdir "$root"
ln -s "$victim" "$root/latest"
train --save "$root" >"$work/latest.out" 2>&1 && { cat "$work/latest.out"; fail "latest as a link: the run went on"; }
grep -qF "'$root/latest' is a symbolic link, not a regular file: not replacing it" "$work/latest.out" ||
  { cat "$work/latest.out"; fail "latest as a link: not named"; }
grep -q "^step " "$work/latest.out" && fail "latest as a link: refused only after training"
[ -L "$root/latest" ] || fail "latest as a link: replaced"
intact "latest as a link"
echo "ok latest: $(grep -m1 -o "'.*' is .*: not replacing it" "$work/latest.out")"
