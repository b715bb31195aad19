#!/usr/bin/env bash
# zo_train_gemm_bf16.sh ZO_TRAIN CONFIG CORPUS - train.cpu_gemm "bf16" (the CPU model's bf16 products, oneDNN):
#   1. the run says so (the model line names the bf16 products and oneDNN's kernel) and trains: 6 steps whose
#      losses stay within 0.05 of the same config with "fp32" products, and differ from them (the operands are
#      rounded to bf16: a run that silently took the fp32 path would give the same bits);
#   2. refusals naming train.cpu_gemm: a value other than "fp32" / "bf16", bf16 products without bf16.enabled, and
#      with train.model_memory "resident".
# The thread-count check (the same bits at --threads 1 and 2) is zo_train_threads_bitwise.sh on CONFIG.
# Exit 0 pass, 1 fail.
set -u
zo=$1 cfg=$2 corpus=$3
work=$(mktemp -d "${TMPDIR:-/tmp}/zo-gemm-bf16.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
variant() { # NAME PYTHON-EXPRESSION-ON-c
  /usr/bin/python3 -c "import json,sys; c=json.load(open(sys.argv[1])); $2; json.dump(c, open(sys.argv[2], 'w'))" \
    "$cfg" "$work/$1.json" || fail "making $1.json"
}
variant bf16 "c['steps_per_print'] = 1"
variant fp32 "c['steps_per_print'] = 1; c['train']['cpu_gemm'] = 'fp32'"
for v in bf16 fp32; do
  "$zo" --config "$work/$v.json" --data "$corpus" --steps 6 --no-sample --log-json "$work/$v.jsonl" >"$work/$v.out" 2>&1 \
    || { tail -20 "$work/$v.out"; fail "the $v run failed"; }
done
grep -q "products in bf16 with fp32 accumulation, oneDNN " "$work/bf16.out" || { grep "model cpu" "$work/bf16.out"; fail "the bf16 run does not name its bf16 products"; }
grep -q "products in bf16" "$work/fp32.out" && fail "the fp32 run names bf16 products"
/usr/bin/python3 - "$work/bf16.jsonl" "$work/fp32.jsonl" <<'PY' || exit 1
import json, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[1])]
b = [json.loads(l)["loss"] for l in open(sys.argv[2])]
print("bf16 products:", " ".join("%.6f" % x for x in a))
print("fp32 products:", " ".join("%.6f" % x for x in b))
if len(a) != 6 or len(b) != 6:
    sys.exit("FAIL: expected 6 logged steps each")
if a == b:
    sys.exit("FAIL: the bf16 products gave the fp32 products' bits")
worst = max(abs(x - y) for x, y in zip(a, b))
if worst > 0.05:
    sys.exit("FAIL: the losses part by %.4f (limit 0.05)" % worst)
print("largest loss difference %.2e" % worst)
PY
refused() { # NAME PYTHON-EXPRESSION EXPECTED-TEXT
  variant "$1" "$2"
  if "$zo" --config "$work/$1.json" --data "$corpus" --steps 1 --no-sample >"$work/$1.out" 2>&1; then
    fail "$1: accepted"
  fi
  grep -q "$3" "$work/$1.out" || { cat "$work/$1.out"; fail "$1: the error does not say '$3'"; }
  echo "$1: $(grep -m1 'error' "$work/$1.out")"
}
refused bad_value "c['train']['cpu_gemm'] = 'fp16'" 'train.cpu_gemm'
refused no_bf16 "c['bf16'] = {'enabled': False}" 'train.cpu_gemm'
refused resident "c['train']['model_memory'] = 'resident'" 'train.cpu_gemm'
echo "PASS"
