#!/usr/bin/env bash
# zo_train_placement.sh ZO_TRAIN CONFIG CORPUS - split placement (zoffload/placement.h) through zo-train, on a
# config with optimizer state and parameters on NVMe (configs/infinity.json, a few steps):
#  - the same losses to the last bit for "placement": "config", for explicit budgets
#    (zoffload.optimizer_max_in_cpu, offload_param.max_in_cpu), and for "auto" with a small and with no host cap
#    (zoffload.placement_host_bytes), each run's NVMe reads per step falling as more stays in host memory;
#  - auto with a cap keeps part of the state on NVMe, without one keeps all of it in host memory;
#  - --dry-run prints a "predicted step" line; every --log-json row carries predicted_step_ms and last_step_ms;
#  - a checkpoint written under one placement resumes under another (auto -> config -> auto) with the losses of
#    the uninterrupted run.
# The rates are given in the config (zoffload.speeds), so no run measures the disk. Exit 0 pass, 1 fail.
set -u
zo=$1 cfg=$2 corpus=$3
work=$(mktemp -d "${TMPDIR:-/tmp}/zo-place.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
mkdir -p "$work/nvme"
export ZO_SPEEDS_CACHE="$work/speeds.json"
py=$(command -v /usr/bin/python3 || command -v python3)
# variant NAME JSON-EDIT: the base config with one python edit applied to c
variant() {
  "$py" - "$cfg" "$work/$1.json" "$2" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))
c["train"].update({"steps": 6, "val_windows": 16, "sample_bytes": 0})
c["steps_per_print"] = 1
c.setdefault("zoffload", {})["speeds"] = {"nvme_read_gbps": 2, "nvme_write_gbps": 2, "h2d_gbps": 10,
                                          "d2h_gbps": 10, "adam_gparams_per_s": 1}
exec(sys.argv[3])
json.dump(c, open(sys.argv[2], "w"))
EOF
}
run() { # NAME [ARGS...]
  local name=$1
  shift
  "$zo" --config "$work/$name.json" --data "$corpus" --nvme-path "$work/nvme" --threads 2 --no-sample \
        --log-json "$work/$name.jsonl" "$@" >"$work/$name.out" 2>&1 || { cat "$work/$name.out"; fail "$name exited non-zero"; }
  grep -o '"\(loss\|val_loss\)": *[-0-9.eE+]*' "$work/$name.jsonl" >"$work/$name.loss"
  [ -s "$work/$name.loss" ] || fail "no losses logged for $name"
}
# bytes read from NVMe per step (the last two rows' difference)
reads() { tail -2 "$work/$1.jsonl" | grep -o '"nvme_read_bytes": *[0-9]*' | sed 's/.*: *//' | paste -sd' ' | awk '{print $2 - $1}'; }

variant config 'pass'
variant explicit 'c["zoffload"]["optimizer_max_in_cpu"] = 400000; c["zero_optimization"]["offload_param"]["max_in_cpu"] = 200000'
variant auto_cap 'c["zoffload"].update({"placement": "auto", "placement_host_bytes": 6000000})'
variant auto 'c["zoffload"]["placement"] = "auto"'
for v in config explicit auto_cap auto; do
  run $v
  if ! cmp -s "$work/config.loss" "$work/$v.loss"; then
    diff "$work/config.loss" "$work/$v.loss" | head -5
    fail "losses of $v differ from placement config"
  fi
  echo "ok   $v: $(wc -l <"$work/$v.loss") loss values identical; nvme read per step $(reads $v) B"
done
grep -q '"predicted_step_ms": *[0-9]' "$work/config.jsonl" || fail "no predicted_step_ms in the config run's rows"
grep -q '"last_step_ms": *[0-9]' "$work/auto.jsonl" || fail "no last_step_ms in the auto run's rows"
[ "$(grep -c predicted_step_ms "$work/auto.jsonl")" = "$(wc -l <"$work/auto.jsonl")" ] || fail "a row without predicted_step_ms"
grep -q 'placement "auto": placement: optimizer state' "$work/auto_cap.out" || fail "auto did not print its placement"
grep -q 'measured against predicted' "$work/auto.out" || fail "no measured-against-predicted summary"
# the cap keeps part of the optimizer state on NVMe; no cap keeps all of it in host memory
cap_line=$(grep 'placement "auto"' "$work/auto_cap.out")
echo "$cap_line" | grep -Eq 'optimizer state [1-9][0-9]* of [0-9]+ elements in host memory \(([0-9]+) of ([0-9]+) sub' \
  || fail "auto with a 6 MB cap kept no optimizer state in host memory: $cap_line"
echo "$cap_line" | grep -Eq '\(([0-9]+) of \1 sub-groups\)' && fail "auto with a 6 MB cap kept every sub-group: $cap_line"
grep 'placement "auto"' "$work/auto.out" | grep -Eq '\(([0-9]+) of \1 sub-groups\)' \
  || fail "auto without a cap did not keep every sub-group: $(grep 'placement "auto"' "$work/auto.out")"
rc=$(reads config) re=$(reads explicit) ra=$(reads auto_cap) rf=$(reads auto)
[ "$re" -lt "$rc" ] && [ "$ra" -lt "$rc" ] && [ "$rf" -lt "$ra" ] \
  || fail "NVMe reads per step do not fall with more kept in host memory: config $rc, explicit $re, auto_cap $ra, auto $rf"
# dry run: the predicted step
"$zo" --config "$work/auto_cap.json" --nvme-path "$work/nvme" --dry-run >"$work/dry.out" 2>&1 || { cat "$work/dry.out"; fail "dry run"; }
grep -q 'predicted step [0-9.]* ms' "$work/dry.out" || fail "the dry run printed no predicted step"
echo "ok   dry run: $(grep -o 'predicted step [0-9.]* ms' "$work/dry.out")"
# a checkpoint under one placement resumes under another: auto_cap 2 steps -> config to 4 -> auto to 6
run auto_cap --steps 2 --save "$work/ck"
run config --steps 4 --resume "$work/ck" --save "$work/ck"
cp "$work/config.loss" "$work/mid.loss"
run auto --steps 6 --resume "$work/ck"
tail -4 "$work/mid.loss" | cat - "$work/auto.loss" >"$work/resumed.loss"
grep -o '"\(loss\|val_loss\)": *[-0-9.eE+]*' "$work/explicit.jsonl" | tail -8 >"$work/want.loss"
cmp -s "$work/want.loss" "$work/resumed.loss" || { diff "$work/want.loss" "$work/resumed.loss"; fail "the resumed losses differ"; }
echo "ok   checkpoint auto_cap -> config -> auto: steps 3-6 identical to the uninterrupted run"
[ -z "$(ls -A "$work/nvme")" ] || fail "swap files left behind: $(ls -A "$work/nvme")"
echo PASS
