#!/usr/bin/env bash
# zo_stepbench_budget.sh ZO_STEPBENCH DIR - the command a new user tried, DeepSpeed's default
# sub_group_size (1e9) with 1e9 parameters' optimizer state on nvme: once pinned host memory until
# the OOM killer came (15 minutes); now refused by the start-up budget within seconds, before the
# disk baseline, naming zero_optimization.sub_group_size and a value that fits. The case needs a
# machine where it cannot fit (under 40 GiB available): exit 77 (skip) on bigger ones.
# Exit 0 pass, 1 fail.
set -u
sb=$1 dir=$2
avail_kb=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo)
if [ "$avail_kb" -gt $((40 * 1024 * 1024)) ]; then
  echo "skip: $((avail_kb / 1048576)) GiB available: this configuration fits here"
  exit 77
fi
mkdir -p "$dir"
export ZO_SPEEDS_CACHE="$dir/speeds.json" # refused before the planner measures anything; never under $HOME if not
start=$(date +%s.%N)
timeout 60 "$sb" --params 1e9 --layers 24 --nvme-path "$dir" --steps 2 >"$dir/out" 2>&1
rc=$?
secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
cat "$dir/out" | tail -3
[ $rc -ne 0 ] && [ $rc -ne 124 ] || { echo "FAIL: exit status $rc (124: still running after 60 s)"; exit 1; }
grep -q "start-up budget: .*host memory: needs [0-9]* bytes.*set zero_optimization.sub_group_size to at most [0-9]*" \
  "$dir/out" || { echo "FAIL: no refusal naming sub_group_size"; exit 1; }
grep -q "^baseline" "$dir/out" && { echo "FAIL: the disk baseline ran before the refusal"; exit 1; }
ls "$dir" | grep -q "zo-stepbench-baseline\|zoffload-" && { echo "FAIL: files left in $dir: $(ls "$dir")"; exit 1; }
echo "refused in $secs s"
echo PASS
