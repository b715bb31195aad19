#!/usr/bin/env bash
# zo-placement-bench.sh - zoffload.placement "auto" against "config" on one preset, one run after the other on this
# machine (docs/placement.md). Each run trains STEPS steps of the preset as written, then the same file with
# "zoffload": {"placement": "auto"} added, with the machine's speeds measured again just before each run
# (ZO_SPEEDS_REMEASURE=1: the disk of a VM changes speed from minute to minute). Prints per run the placement,
# the NVMe bytes read and written in the last step, the last step's time (last_step_ms) against its prediction
# (predicted_step_ms), the peak RSS, then the checks: losses identical step by step, last step auto / config at
# most --max-ratio, each last step within --max-error of its prediction, auto's peak RSS at most --max-rss-gib.
# The last line is one JSON object. Exit 0 when every check passes, 1 when one fails, 2 on a usage error.
#
# usage: zo-placement-bench.sh --zo-train BIN --config FILE --nvme-path DIR [--steps N] [--max-ratio X]
#                              [--max-error X] [--max-rss-gib X] [--out DIR] [--help]
#   --zo-train BIN      the zo-train to run (required)
#   --config FILE       the preset, as written (required); the auto run adds "zoffload": {"placement": "auto"}
#   --nvme-path DIR     the swap directory of both runs (required)
#   --steps N           steps of each run (default 3); the config's steps_per_print must log step N
#   --max-ratio X       the limit on auto's last step over config's (default 0.45)
#   --max-error X       the limit on |last step / predicted - 1| of each run (default 0.25)
#   --max-rss-gib X     the limit on auto's peak RSS, GiB (default 20)
#   --out DIR           keep the configs, logs and --log-json files there (default: a new temporary directory)
#   -h, --help          this text
set -u
zo="" cfg="" nvme="" steps=3 max_ratio=0.45 max_err=0.25 max_rss=20 out=""
help() { sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
usage() { help >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --zo-train) zo=$2; shift 2 ;;
    --config) cfg=$2; shift 2 ;;
    --nvme-path) nvme=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --max-ratio) max_ratio=$2; shift 2 ;;
    --max-error) max_err=$2; shift 2 ;;
    --max-rss-gib) max_rss=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) help; exit 0 ;;
    *) echo "zo-placement-bench: unknown argument '$1'" >&2; usage ;;
  esac
done
[ -n "$zo" ] && [ -n "$cfg" ] && [ -n "$nvme" ] || usage
[ -x "$zo" ] || { echo "zo-placement-bench: --zo-train '$zo' is not an executable" >&2; exit 2; }
[ -d "$nvme" ] || { echo "zo-placement-bench: --nvme-path '$nvme' is not a directory" >&2; exit 2; }
case $steps in ''|*[!0-9]*|0) echo "zo-placement-bench: --steps '$steps': expected a count >= 1" >&2; exit 2 ;; esac
[ -n "$out" ] || out=$(mktemp -d "${TMPDIR:-/tmp}/zo-placement-bench.XXXXXX")
mkdir -p "$out" || exit 2
py=$(command -v python3) || { echo "zo-placement-bench: needs python3" >&2; exit 2; }

# the auto variant: the same file with zoffload.placement "auto"
"$py" - "$cfg" "$out/auto.json" <<'EOF' || exit 2
import json, sys
c = json.load(open(sys.argv[1]))
c.setdefault("zoffload", {})["placement"] = "auto"
json.dump(c, open(sys.argv[2], "w"), indent=1)
EOF
cp "$cfg" "$out/config.json"

for run in config auto; do
  echo "zo-placement-bench: $run: $zo --config $out/$run.json --steps $steps ($(date -u +%H:%M:%S), load $(cut -d' ' -f1-3 /proc/loadavg))"
  ZO_SPEEDS_REMEASURE=1 /usr/bin/time -f "%M" -o "$out/$run.rss" "$zo" --config "$out/$run.json" --nvme-path "$nvme" \
    --steps "$steps" --no-sample --log-json "$out/$run.jsonl" >"$out/$run.out" 2>&1
  rc=$?
  if [ $rc -ne 0 ]; then
    tail -5 "$out/$run.out"
    echo "zo-placement-bench: the $run run exited $rc (its output: $out/$run.out)"
    exit 1
  fi
  grep -E '^zo-train: (rates|placement|predicted step)' "$out/$run.out" | sed 's/^/  /'
  grep -A8 'measured against predicted' "$out/$run.out" | sed 's/^/  /'
done

"$py" - "$out" "$steps" "$max_ratio" "$max_err" "$max_rss" <<'EOF'
import json, sys
out, steps, max_ratio, max_err, max_rss = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
rows, rss = {}, {}
for run in ("config", "auto"):
    rows[run] = [json.loads(l) for l in open(f"{out}/{run}.jsonl")]
    rss[run] = int(open(f"{out}/{run}.rss").read().split()[-1]) * 1024 / 2**30  # GiB (time -f %M: KiB)
def last(run):
    r = rows[run]
    if not r or r[-1]["step"] != steps:
        sys.exit(f"zo-placement-bench: the {run} run logged no row for step {steps} (steps_per_print must divide it)")
    prev = r[-2] if len(r) > 1 and r[-2]["step"] == steps - 1 else None
    rd = r[-1]["nvme_read_bytes"] - (prev["nvme_read_bytes"] if prev else 0)
    wr = r[-1]["nvme_write_bytes"] - (prev["nvme_write_bytes"] if prev else 0)
    return r[-1], (rd, wr) if prev else (None, None)
print(f"{'run':7} {'last step ms':>13} {'predicted ms':>13} {'meas/pred':>9} {'read GB':>8} {'written GB':>10} {'peak RSS GiB':>13}")
res = {}
for run in ("config", "auto"):
    r, (rd, wr) = last(run)
    pred = r.get("predicted_step_ms")
    res[run] = dict(last_step_ms=r["last_step_ms"], predicted_step_ms=pred, read_bytes=rd, write_bytes=wr, rss_gib=rss[run])
    fmt = lambda b: "-" if b is None else f"{b / 1e9:.2f}"
    print(f"{run:7} {r['last_step_ms']:13.1f} {pred if pred else float('nan'):13.1f} "
          f"{(r['last_step_ms'] / pred) if pred else float('nan'):9.3f} {fmt(rd):>8} {fmt(wr):>10} {rss[run]:13.2f}")
losses = [[(x["loss"], x["val_loss"]) for x in rows[run]] for run in ("config", "auto")]
ratio = res["auto"]["last_step_ms"] / res["config"]["last_step_ms"]
checks = [
    ("losses identical step by step", losses[0] == losses[1] and len(losses[0]) > 0, f"{len(losses[0])} rows"),
    (f"last step auto / config <= {max_ratio}", ratio <= max_ratio, f"{ratio:.3f}"),
    (f"auto peak RSS <= {max_rss} GiB", rss["auto"] <= max_rss, f"{rss['auto']:.2f} GiB"),
]
for run in ("config", "auto"):
    p = res[run]["predicted_step_ms"]
    err = abs(res[run]["last_step_ms"] / p - 1) if p else float("inf")
    checks.append((f"{run}: last step within {max_err:.0%} of predicted", err <= max_err, f"{err:.1%} off"))
ok = True
for name, passed, fig in checks:
    print(f"{'PASS' if passed else 'FAIL'}: {name} ({fig})")
    ok &= passed
print(json.dumps(dict(steps=steps, ratio=ratio, config=res["config"], auto=res["auto"], losses_identical=checks[0][1],
                      passed=ok)))
sys.exit(0 if ok else 1)
EOF
