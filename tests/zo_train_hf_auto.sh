#!/usr/bin/env bash
# zo_train_hf_auto.sh ZO_TRAIN HF_CONFIG CORPUS - a ZeRO-3 NVMe config written as the Hugging Face
# docs write it ("auto" at every key the HF Trainer fills in) runs in zo-train for 2 steps with a small
# model block added: every "auto" is filled in and printed once, the run trains with state and
# parameters on NVMe, and leaves no swap files. Exit 0 pass, 1 fail.
set -u
zo=$1 hf=$2 corpus=$3
work=$(mktemp -d "${TMPDIR:-/tmp}/zo-hfauto.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
python3 - "$hf" "$work/cfg.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["model"] = {"n_layer": 2, "n_head": 2, "d_model": 32, "seq_len": 32}
c["train"] = {"val_windows": 8, "sample_bytes": 0}
json.dump(c, open(sys.argv[2], "w"), indent=1)
PY
mkdir -p "$work/nvme"
"$zo" --config "$work/cfg.json" --data "$corpus" --nvme-path "$work/nvme" --steps 2 --threads 2 --no-sample \
      --log-json "$work/log.jsonl" >"$work/out" 2>&1 || { cat "$work/out"; fail "zo-train exited non-zero"; }
n_auto=$(grep -c '"auto"' "$hf")
n_log=$(grep -c '^zo-train: config: .* "auto" -> ' "$work/out")
[ "$n_log" -eq "$n_auto" ] || { grep '"auto" ->' "$work/out"; fail "$n_log values printed for $n_auto \"auto\" keys"; }
[ "$(grep '"auto" ->' "$work/out" | sort | uniq -d | wc -l)" -eq 0 ] || fail "a value was printed twice"
grep -q 'zero_optimization.reduce_bucket_size "auto" -> 1024 (hidden_size^2)' "$work/out" || fail "reduce_bucket_size"
grep -q 'zero_optimization.stage3_param_persistence_threshold "auto" -> 320' "$work/out" || fail "persistence"
grep -q "optimizer state: nvme | parameters: nvme" "$work/out" || fail "not on nvme"
grep -q '"step":2,"loss":' "$work/log.jsonl" || fail "no loss logged for step 2"
[ -z "$(ls -A "$work/nvme")" ] || fail "swap files left: $(ls -A "$work/nvme")"
echo "$n_log \"auto\" values filled in and printed once each; 2 steps with state and parameters on nvme"
echo PASS
