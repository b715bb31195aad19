#!/usr/bin/env bash
# zo_train_presets_fit.sh ZO_TRAIN CONFIG_DIR - which presets in CONFIG_DIR fit which machine, by `zo-train --dry-run`
# planned for that machine (--assume-host-memory: MemTotal, which zoffload.pinned_fraction applies to, and
# MemAvailable; --assume-nvme-free: each nvme_path's free bytes; --device-memory-limit: the GPU), against the lists
# below (README.md's preset table says the same). A preset that stops fitting, a new preset not in a list, or a
# dry run that neither fits (0) nor refuses naming a key (1) fails. Not a test of the byte counts themselves
# (zo_train_dryrun.sh). Exit 0 pass, 1 fail.
#   gpu: the lent GPU machine: 128 GiB of RAM, of which the kernel reports MemTotal 125.9 GiB (135.2e9 bytes, seen on
#        the H200 machine), planned as 125.0 GiB to keep a margin; an 80 GB GPU (--device cuda, planned: no GPU
#        here); 64 GiB disk
#   cpu: this CI machine: 24 GiB, no GPU (--device host: the model's bytes are host memory too), 64 GiB disk
set -u
zo=$1 cfgdir=$2
work=$(mktemp -d "${TMPDIR:-/tmp}/zo-presets-fit.XXXXXX")
trap 'rm -rf "$work"' EXIT
declare -A FITS=(
  [default]="gpu cpu" [fp16]="gpu cpu" [none]="gpu cpu" [nvme]="gpu cpu" [infinity]="gpu cpu"
  [gpt2-124m]="gpu" [gpt2-1.5b]="gpu" [gpt-10b]="gpu" [gpt-10b-infinity]="gpu" [gpt-2b-nvme]="gpu cpu" [gpt-4b-nvme]="gpu cpu"
  [gpt-6.7b-nvme]="" [gpt-100b-infinity]=""
)
gpu_args=(--device cuda --device-memory-limit 80000000000 --assume-host-memory 134217728000 --assume-nvme-free 68719476736)
cpu_args=(--device host --assume-host-memory 25769803776 --assume-nvme-free 68719476736)
failures=0
for cfg in "$cfgdir"/*.json; do
  name=$(basename "$cfg" .json)
  if [ -z "${FITS[$name]+set}" ]; then
    echo "FAIL $name: a preset this test does not list; add it to FITS (and to README.md's preset table)"
    failures=$((failures + 1))
    continue
  fi
  for m in gpu cpu; do
    if [ $m = gpu ]; then args=("${gpu_args[@]}"); else args=("${cpu_args[@]}"); fi
    GOMP_SPINCOUNT=10000 OMP_NUM_THREADS=1 "$zo" --config "$cfg" --dry-run --nvme-path "$work" "${args[@]}" \
      >"$work/out" 2>&1
    rc=$?
    want=1
    case " ${FITS[$name]} " in *" $m "*) want=0 ;; esac
    refused=$(grep -E '^(device|host|pinned|nvme) +[0-9].* NO ' "$work/out" | awk '{print $1}' | tr '\n' ' ')
    printf '%-20s %-3s fits %-3s (expected %-3s) %s\n' "$name" $m "$([ $rc -eq 0 ] && echo yes || echo no)" \
      "$([ $want -eq 0 ] && echo yes || echo no)" "${refused:+over: $refused}"
    if [ $rc -ne 0 ] && [ $rc -ne 1 ]; then
      echo "FAIL $name ($m): exit status $rc"; cat "$work/out"; failures=$((failures + 1))
    elif [ $rc -eq 1 ] && ! grep -q 'zo-train: error: start-up budget: ' "$work/out"; then
      echo "FAIL $name ($m): refused, but not by the start-up budget:"; cat "$work/out"; failures=$((failures + 1))
    elif [ $rc -ne $want ]; then
      echo "FAIL $name ($m): expected it to $([ $want -eq 0 ] && echo fit || echo be refused)"
      grep -E 'error:|^(tier|device|host|pinned|nvme) ' "$work/out"
      failures=$((failures + 1))
    fi
  done
done
[ $failures -eq 0 ] && echo "PASS" || echo "FAIL: $failures"
[ $failures -eq 0 ]
