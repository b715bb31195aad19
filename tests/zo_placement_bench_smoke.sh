#!/usr/bin/env bash
# zo_placement_bench_smoke.sh ZO_TRAIN - tools/zo-placement-bench.sh runs end to end on a small NVMe config
# (configs/infinity.json, 3 steps, the speeds given so nothing is measured) and prints its table, one line per check
# and its JSON; a bad argument is refused. No timing is judged.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bench="$here/../tools/zo-placement-bench.sh"
work=$(mktemp -d "${TMPDIR:-/tmp}/zo-pbench.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/nvme"
python3 - "$here/../configs/infinity.json" "$work/cfg.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["train"].update({"steps": 3, "val_windows": 16, "sample_bytes": 0})
c["steps_per_print"] = 1
c["zoffload"] = {"speeds": {"nvme_read_gbps": 2, "nvme_write_gbps": 2, "h2d_gbps": 10, "d2h_gbps": 10,
                            "adam_gparams_per_s": 1}}
json.dump(c, open(sys.argv[2], "w"))
PY
out=$(bash "$bench" --zo-train "$1" --config "$work/cfg.json" --nvme-path "$work/nvme" --out "$work/out" 2>&1)
rc=$?
printf '%s\n' "$out"
[ "$rc" = 0 ] || [ "$rc" = 1 ] || { echo "FAIL: the benchmark exited $rc"; exit 1; }
for want in '^config  *[0-9.]* *[0-9.]*' '^auto  *[0-9.]* *[0-9.]*' '^PASS: losses identical step by step' \
            '^\(PASS\|FAIL\): last step auto / config <= 0.45' '^{"steps": 3, "ratio": [0-9.]*'; do
  printf '%s\n' "$out" | grep -q "$want" || { echo "FAIL: no line matching '$want'"; exit 1; }
done
err=$(bash "$bench" --zo-train "$1" --config "$work/cfg.json" --nvme-path "$work/nvme" --steps 0 2>&1); rc=$?
[ "$rc" = 2 ] && printf '%s' "$err" | grep -q -- "--steps '0'" || { echo "FAIL: --steps 0: exit $rc, '$err'"; exit 1; }
[ -z "$(ls -A "$work/nvme")" ] || { echo "FAIL: swap files left behind"; exit 1; }
echo "zo_placement_bench_smoke: ok"
