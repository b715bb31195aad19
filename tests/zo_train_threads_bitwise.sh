#!/usr/bin/env bash
# zo_train_threads_bitwise.sh ZO_TRAIN CONFIG CORPUS [STEPS] - the thread count does not change a bit of training:
# CONFIG with steps_per_print 1 (a derived copy), STEPS steps (default 5) at --threads 1 and at --threads 2
# --fixed-threads (every thread even on a busy machine), under each OPENBLAS_CORETYPE of ZO_CORETYPES (default
# "Haswell Zen SkylakeX": OpenBLAS's kernels differ, and with its own threading the Haswell ones, also picked for
# Zen, gave other bits on 2 threads). Every step's loss, val_loss and grad_norm in --log-json (17 digits, jansson's
# round trip of the double) and the last step's checkpoint shard (--save: weights, Adam moments) must be the same
# bytes. OPENBLAS_CORETYPE is set for zo-train's runs only. Exit 0 pass, 1 fail.
set -u
zo=$1 cfg=$2 corpus=$3 steps=${4:-5}
work=$(mktemp -d "${TMPDIR:-/tmp}/zo-threads-bitwise.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
sed 's/"steps_per_print": *[0-9]*/"steps_per_print": 1/' "$cfg" >"$work/config.json"
grep -q '"steps_per_print": 1\b' "$work/config.json" || fail "$cfg: no steps_per_print to set to 1"
# step N's "loss", "val_loss" and "grad_norm" as written, one line a step
fields() { sed 's/.*"step": *\([0-9]*\).*"loss": *\([^,]*\),.*"val_loss": *\([^,]*\),.*"grad_norm": *\([^,]*\),.*/\1 \2 \3 \4/' "$1"; }
# A core type runs only where the CPU executes its kernels (an OPENBLAS_CORETYPE beyond the CPU dies of SIGILL):
# Haswell and Zen need AVX2 and FMA, SkylakeX AVX-512 (F, CD, DQ, BW, VL). The skipped ones are named.
flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
runs() { local f; for f in "$@"; do case "$flags" in *" $f "*) ;; *) echo "$f"; return 1 ;; esac; done; }
coretypes=
for ct in ${ZO_CORETYPES:-Haswell Zen SkylakeX}; do
  case $ct in
    SkylakeX | SkylakeX*) need="avx512f avx512cd avx512dq avx512bw avx512vl" ;;
    *) need="avx2 fma" ;;
  esac
  if miss=$(runs $need); then coretypes="$coretypes $ct"
  else echo "SKIP OPENBLAS_CORETYPE=$ct: this CPU has no $miss"; fi
done
[ -n "$coretypes" ] || fail "no core type of '${ZO_CORETYPES:-Haswell Zen SkylakeX}' runs on this CPU"
for ct in $coretypes; do
  for t in 1 2; do
    fixed=; [ $t -gt 1 ] && fixed=--fixed-threads
    out="$work/$ct-t$t"
    OPENBLAS_CORETYPE=$ct "$zo" --config "$work/config.json" --data "$corpus" --steps "$steps" --threads $t $fixed \
      --no-sample --log-json "$out.jsonl" --save "$out.ckpt" >"$out.out" 2>&1 \
      || { tail -20 "$out.out"; fail "$ct: the run at --threads $t failed"; }
  done
  core=$(grep -m1 -o 'OpenBLAS [A-Za-z0-9]*' "$work/$ct-t1.out" | awk '{print $2}')
  [ -n "$core" ] || { head -20 "$work/$ct-t1.out"; fail "$ct: zo-train names no OpenBLAS core"; }
  fields "$work/$ct-t1.jsonl" >"$work/$ct-t1.f"
  fields "$work/$ct-t2.jsonl" >"$work/$ct-t2.f"
  [ "$(wc -l <"$work/$ct-t1.f")" -eq "$steps" ] && grep -q '^[0-9]* [-0-9.eE+]* [-0-9.eE+]* [-0-9.eE+]*$' "$work/$ct-t1.f" \
    || { head -3 "$work/$ct-t1.jsonl"; fail "$ct: expected $steps logged steps with loss, val_loss and grad_norm"; }
  if ! cmp -s "$work/$ct-t1.f" "$work/$ct-t2.f"; then
    echo "step loss val_loss grad_norm: --threads 1 | --threads 2"
    paste -d'|' "$work/$ct-t1.f" "$work/$ct-t2.f" | awk -F'|' '$1 != $2' | head -10
    fail "OPENBLAS_CORETYPE=$ct (OpenBLAS $core): the logged values differ between --threads 1 and 2"
  fi
  last=$(printf 'step-%012d' "$steps")
  for t in 1 2; do [ -s "$work/$ct-t$t.ckpt/$last/rank00000.bin" ] || fail "$ct: no checkpoint $last at --threads $t"; done
  cmp "$work/$ct-t1.ckpt/$last/rank00000.bin" "$work/$ct-t2.ckpt/$last/rank00000.bin" \
    || fail "OPENBLAS_CORETYPE=$ct (OpenBLAS $core): step $steps's checkpoint differs between --threads 1 and 2"
  echo "OPENBLAS_CORETYPE=$ct (OpenBLAS $core): $steps steps at --threads 1 and 2: same losses, val losses, gradient" \
    "norms and checkpoint; step $steps: $(tail -1 "$work/$ct-t1.f" | cut -d' ' -f2-)"
done
echo PASS
