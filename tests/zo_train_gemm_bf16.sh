#!/usr/bin/env bash
# zo_train_gemm_bf16.sh ZO_TRAIN CONFIG CORPUS - train.cpu_gemm "bf16" (the CPU model's bf16 products, oneDNN) and
# "auto" (bf16 products where the CPU runs them, fp32 elsewhere):
#   1. where oneDNN makes bf16 products here, the run says so (the model line names the bf16 products and oneDNN's
#      kernel) and trains: 6 steps whose losses stay within 0.05 of the same config with "fp32" products, and differ
#      from them (the operands are rounded to bf16: a run that silently took the fp32 path would give the same bits);
#      "auto" gives the "bf16" run's bits and says why it chose them. Where oneDNN cannot (a CPU without AVX-512),
#      "auto" gives the "fp32" run's bits and says why, and "bf16" is refused (step 3 checks both).
#   2. refusals naming train.cpu_gemm: a value other than "fp32" / "bf16" / "auto", bf16 products without
#      bf16.enabled, and with train.model_memory "resident"; "auto" there takes fp32 products and says why.
#   3. a CPU without oneDNN's bf16 matmul, as oneDNN sees one under ONEDNN_MAX_CPU_ISA=AVX2 (an instruction set
#      every CPU this project runs on has): "bf16" refused at start-up and by --dry-run, naming train.cpu_gemm and
#      the fix; "auto" trains with fp32 products (the "fp32" run's bits) and says why.
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
variant bf16 "c['steps_per_print'] = 1; c['train']['cpu_gemm'] = 'bf16'"
variant fp32 "c['steps_per_print'] = 1; c['train']['cpu_gemm'] = 'fp32'"
variant auto "c['steps_per_print'] = 1; c['train']['cpu_gemm'] = 'auto'"
run() { # NAME [ENV=VALUE...]: 6 steps of NAME.json, log in NAME.out, losses in NAME.jsonl
  local v=$1; shift
  env "$@" "$zo" --config "$work/${v%%-*}.json" --data "$corpus" --steps 6 --no-sample --log-json "$work/$v.jsonl" \
    >"$work/$v.out" 2>&1 || { tail -20 "$work/$v.out"; fail "the $v run failed"; }
}
losses() { /usr/bin/python3 -c "import json,sys; print(' '.join(repr(json.loads(l)['loss']) for l in open(sys.argv[1])))" "$1"; }
run fp32
grep -q "products in bf16" "$work/fp32.out" && fail "the fp32 run names bf16 products"
run auto
if grep -q 'train.cpu_gemm "auto": bf16 products' "$work/auto.out"; then
  echo "$(grep -m1 'train.cpu_gemm "auto"' "$work/auto.out")"
  run bf16
  grep -q "products in bf16 with fp32 accumulation, oneDNN " "$work/bf16.out" || { grep "model cpu" "$work/bf16.out"; fail "the bf16 run does not name its bf16 products"; }
  [ "$(losses "$work/auto.jsonl")" = "$(losses "$work/bf16.jsonl")" ] || fail "\"auto\" chose bf16 products but gave other losses than \"bf16\""
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
else
  grep -q 'train.cpu_gemm "auto": fp32 products (OpenBLAS [A-Za-z0-9]*): this CPU .*cannot run' "$work/auto.out" \
    || { head -20 "$work/auto.out"; fail "\"auto\" says neither bf16 nor fp32 products with a reason"; }
  echo "this CPU: $(grep -m1 'train.cpu_gemm "auto"' "$work/auto.out")"
  [ "$(losses "$work/auto.jsonl")" = "$(losses "$work/fp32.jsonl")" ] || fail "\"auto\" chose fp32 products but gave other losses than \"fp32\""
fi
refused() { # NAME PYTHON-EXPRESSION EXPECTED-TEXT
  variant "$1" "$2"
  if "$zo" --config "$work/$1.json" --data "$corpus" --steps 1 --no-sample >"$work/$1.out" 2>&1; then
    fail "$1: accepted"
  fi
  grep -q "$3" "$work/$1.out" || { cat "$work/$1.out"; fail "$1: the error does not say '$3'"; }
  echo "$1: $(grep -m1 'error' "$work/$1.out")"
}
refused bad_value "c['train']['cpu_gemm'] = 'fp16'" 'train.cpu_gemm: expected "fp32", "bf16" or "auto", got fp16'
refused no_bf16 "c['bf16'] = {'enabled': False}; c['train']['cpu_gemm'] = 'bf16'" 'train.cpu_gemm'
refused resident "c['train']['model_memory'] = 'resident'; c['train']['cpu_gemm'] = 'bf16'" 'train.cpu_gemm'
# "auto" where bf16 products do not apply: fp32 products, and the reason
variant auto_resident "c['train']['cpu_gemm'] = 'auto'; c['train']['model_memory'] = 'resident'"
"$zo" --config "$work/auto_resident.json" --data "$corpus" --steps 1 --no-sample >"$work/auto_resident.out" 2>&1 \
  || { tail -5 "$work/auto_resident.out"; fail "auto_resident: refused"; }
grep -q 'train.cpu_gemm "auto": fp32 products .*model resident' "$work/auto_resident.out" \
  || { head -20 "$work/auto_resident.out"; fail "auto_resident: no line saying fp32 products because the model is resident"; }
echo "auto_resident: $(grep -m1 'train.cpu_gemm "auto"' "$work/auto_resident.out" | cut -c1-160)"
# 3. oneDNN held to AVX2: what a CPU without AVX-512 gets
isa="ONEDNN_MAX_CPU_ISA=AVX2"
for dry in "" --dry-run; do
  if env "$isa" "$zo" --config "$work/bf16.json" --data "$corpus" --steps 1 --no-sample $dry >"$work/avx2_bf16.out" 2>&1; then
    fail "$isa: \"bf16\" accepted${dry:+ by $dry}"
  fi
  grep -q 'error: train.cpu_gemm: "bf16": this CPU .*cannot run oneDNN.s bf16 products.*set train.cpu_gemm to "auto"' \
    "$work/avx2_bf16.out" || { cat "$work/avx2_bf16.out"; fail "$isa: the refusal${dry:+ of $dry} does not name train.cpu_gemm and the fix"; }
  grep -q "fits" "$work/avx2_bf16.out" && fail "$isa: $dry said the configuration fits before refusing"
done
echo "$isa, \"bf16\" (run and --dry-run): $(grep -m1 error "$work/avx2_bf16.out" | cut -c1-200)"
run auto-avx2 "$isa"
grep -q 'train.cpu_gemm "auto": fp32 products (OpenBLAS [A-Za-z0-9]*): this CPU .*oneDNN held to AVX2.*cannot run' \
  "$work/auto-avx2.out" || { head -20 "$work/auto-avx2.out"; fail "$isa: \"auto\" does not say fp32 products and why"; }
[ "$(losses "$work/auto-avx2.jsonl")" = "$(losses "$work/fp32.jsonl")" ] \
  || fail "$isa: \"auto\" gave other losses than the fp32 products"
echo "$isa, \"auto\": fp32 products, the fp32 run's losses to the bit: $(losses "$work/auto-avx2.jsonl")"
echo "PASS"
