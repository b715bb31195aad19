#!/usr/bin/env bash
# zo_train_stripe.sh ZO_TRAIN CONFIG CORPUS - "nvme_path" as a list: zo-train with the optimizer state and
# the parameters on nvme (stage 3), their swap files striped across two directories, gives losses identical
# to the last bit to one directory; a checkpoint saved striped resumes on one directory and one saved on one
# directory resumes striped, both bit-identical to the uninterrupted run; each directory holds a part of
# every swap file while training (the engine says "striped") and nothing after; a bad list entry is named
# by its JSON path and index. Exit 0 pass, 1 fail.
set -u
zo=$1 cfg=$2 corpus=$3
work=$(mktemp -d "${TMPDIR:-/tmp}/zo-stripe.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
mkdir -p "$work/a" "$work/b" "$work/one"
# The tiny config at stage 3 with both offload blocks on nvme, nvme_path given as @1 (JSON).
conf() {
  sed -e 's/"stage": 2/"stage": 3/' \
      -e "s|\"device\": \"cpu\",|\"device\": \"nvme\", \"nvme_path\": $1,|" \
      -e "s|\"device\": \"none\",|\"device\": \"nvme\", \"nvme_path\": $1,|" "$cfg"
}
conf "\"$work/one\"" >"$work/one.json"
conf "[\"$work/a\", \"$work/b\"]" >"$work/striped.json"
[ "$(grep -c "\"nvme_path\": \[\"$work/a\", \"$work/b\"\]" "$work/striped.json")" = 2 ] ||
  fail "could not write the nvme_path list into a copy of $cfg"
steps=20
# run NAME CONFIG [ARGS...]: zo-train, its losses by step in NAME.loss
run() {
  local name=$1 c=$2
  shift 2
  ZO_LOG_LEVEL=info "$zo" --config "$c" --data "$corpus" --steps "$steps" --threads 2 \
    --log-json "$work/$name.jsonl" "$@" >"$work/$name.out" 2>&1 ||
    { tail -20 "$work/$name.out"; fail "zo-train $name exited non-zero"; }
  grep -o '"step":[0-9]*,"loss":[-0-9.eE+]*' "$work/$name.jsonl" >"$work/$name.loss"
  [ -s "$work/$name.loss" ] || fail "no losses logged for $name"
  for d in a b one; do
    [ -z "$(ls -A "$work/$d")" ] || fail "$name left files in $d: $(ls -A "$work/$d")"
  done
}
same() { # same NAME REF: NAME's losses are REF's at the same steps
  local n
  n=$(wc -l <"$work/$1.loss")
  if ! tail -n "$n" "$work/$2.loss" | cmp -s - "$work/$1.loss"; then
    diff <(tail -n "$n" "$work/$2.loss") "$work/$1.loss" | head -5
    fail "losses of $1 differ from $2"
  fi
  echo "ok   $1: $n loss values identical to $2"
}
run one "$work/one.json"
run striped "$work/striped.json"
grep -q "dir $work/a/zoffload-rank0 + $work/b/zoffload-rank0 (striped" "$work/striped.out" ||
  fail "the striped run does not say its swap is striped: $(grep -m1 'swap:' "$work/striped.out")"
same striped one
# checkpoints: saved striped, resumed on one directory; saved on one, resumed striped
run striped-save "$work/striped.json" --steps 10 --save "$work/ck1"
run resume-one "$work/one.json" --resume "$work/ck1"
same resume-one one
run one-save "$work/one.json" --steps 10 --save "$work/ck2"
run resume-striped "$work/striped.json" --resume "$work/ck2"
same resume-striped one
# the start-up budget: a list on two file systems needs each one's share (half the swap files and a stripe),
# not the whole on the first; checked with --dry-run against --assume-nvme-free at that share and one byte less
shm=
if [ "$(stat -f -c %T /dev/shm 2>/dev/null)" = tmpfs ] && shm=$(mktemp -d /dev/shm/zo-stripe.XXXXXX); then
  trap 'rm -rf "$work" "$shm"' EXIT
  conf "[\"$work/a\", \"$shm\"]" >"$work/two-fs.json"
  "$zo" --config "$work/two-fs.json" --data "$corpus" --dry-run >"$work/dry.out" 2>&1 ||
    { cat "$work/dry.out"; fail "dry run of two file systems exited non-zero"; }
  total=$(awk '$1 == "nvme" && $2 ~ /\.swp$/ {s += $4} END {print s + 0}' "$work/dry.out")
  need=$(awk '$1 == "nvme" && $2 ~ /^[0-9]+$/ {print $2; exit}' "$work/dry.out")
  want=$((total / 2 + (total % 2) + 65536)) # aio.block_size 65536 in the tiny config
  [ "$total" -gt 0 ] && [ "$need" = "$want" ] ||
    fail "nvme need $need on two file systems, want half of $total + a stripe = $want: $(grep '^nvme' "$work/dry.out")"
  "$zo" --config "$work/two-fs.json" --data "$corpus" --dry-run --assume-nvme-free "$need" >/dev/null 2>&1 ||
    fail "two file systems with $need bytes free each: refused"
  "$zo" --config "$work/two-fs.json" --data "$corpus" --dry-run --assume-nvme-free $((need - 1)) >/dev/null 2>&1 &&
    fail "two file systems with $((need - 1)) bytes free each: accepted"
  echo "ok   budget: $need bytes on each of two file systems for $total bytes of swap files"
fi
# bad entries: named by path and index
conf "[\"$work/a\", 5]" >"$work/bad.json"
"$zo" --config "$work/bad.json" --data "$corpus" --steps 1 >"$work/bad.out" 2>&1 && fail "nvme_path [dir, 5] accepted"
grep -q "zero_optimization.offload_optimizer.nvme_path\[1\]" "$work/bad.out" ||
  fail "a bad entry is not named by its index: $(cat "$work/bad.out")"
conf "[\"$work/a\", \"$work/a\"]" >"$work/dup.json"
"$zo" --config "$work/dup.json" --data "$corpus" --steps 1 >"$work/dup.out" 2>&1 && fail "nvme_path [a, a] accepted"
grep -q "nvme_path\[1\].*also entry 0" "$work/dup.out" || fail "a repeated entry is not named: $(cat "$work/dup.out")"
echo PASS
