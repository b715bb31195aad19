#!/usr/bin/env bash
# qemu_no_avx512.sh SOURCE_DIR BUILD_DIR - the CPU-dispatched paths on a CPU that reports no AVX-512, not one told
# to avoid it (isa_avx2.sh does that): a build for any x86-64 (-DZO_NATIVE=OFF) in BUILD_DIR, its programs run under
# qemu-x86_64 -cpu Haswell, whose CPUID has AVX2 and FMA and no AVX-512, so CPU Adam, OpenBLAS and oneDNN each
# detect the CPU themselves (OPENBLAS_CORETYPE unset for them):
#   1. test_adam_pool passes on the avx2 kernels; test_gpt_grad passes on OpenBLAS's Haswell kernels;
#   2. test_gemm_bf16 skips: oneDNN makes no bf16 matmul (status 3, unimplemented);
#   3. zo-train with train.cpu_gemm "auto" trains 3 steps with fp32 products, saying "this CPU (no AVX-512)",
#      Adam SIMD avx2; "bf16" is refused at start-up and by --dry-run, naming the key.
# No timing is judged (the emulation is 20-50x slower than the CPU). Exit 0 pass, 1 fail, 77 without qemu-x86_64
# (Debian's qemu-user, which scripts/deps.sh installs).
set -u
src=$1 bld=$2
fail() { echo "FAIL: $*"; exit 1; }
command -v qemu-x86_64 >/dev/null || { echo "SKIP: no qemu-x86_64 (apt-get install qemu-user)"; exit 77; }
cmake -S "$src" -B "$bld" -DCMAKE_BUILD_TYPE=Release -DZO_NATIVE=OFF -DZO_WITH_CUDA=OFF -DZO_WITH_NCCL=OFF \
  >"$bld.configure.log" 2>&1 || { tail -20 "$bld.configure.log"; fail "configure"; }
cmake --build "$bld" -j2 --target zo-train test_adam_pool test_gemm_bf16 test_gpt_grad >"$bld.build.log" 2>&1 \
  || { tail -20 "$bld.build.log"; fail "build"; }
work=$(mktemp -d "${TMPDIR:-/tmp}/zo-qemu.XXXXXX")
trap 'rm -rf "$work"' EXIT
# GOMP_SPINCOUNT set: zo-train re-executes itself without it (omp_env.c), and the new image would run natively
q() { env -u OPENBLAS_CORETYPE -u ONEDNN_MAX_CPU_ISA -u ZO_SIMD GOMP_SPINCOUNT=10000 ZO_SPEEDS_CACHE="$work/speeds.json" \
        qemu-x86_64 -cpu Haswell "$@" 2>&1 | grep -v "TCG doesn't support requested feature"; return "${PIPESTATUS[0]}"; }
q "$bld/tests/test_adam_pool" >"$work/pool.out" || { tail -5 "$work/pool.out"; fail "test_adam_pool"; }
grep -q "avx2, dynamic tiles" "$work/pool.out" || { grep pool "$work/pool.out"; fail "the default pool is not on the avx2 kernels"; }
echo "test_adam_pool: $(grep -m1 'default pool' "$work/pool.out" | cut -c1-100)"
q "$bld/tests/test_gpt_grad" >"$work/grad.out" || { tail -5 "$work/grad.out"; fail "test_gpt_grad"; }
echo "test_gpt_grad: $(tail -1 "$work/grad.out")"
q "$bld/tests/test_gemm_bf16" >"$work/gemm.out"
rc=$?
[ $rc -eq 77 ] && grep -q "oneDNN status 3" "$work/gemm.out" || { cat "$work/gemm.out"; fail "test_gemm_bf16 exit $rc, expected a skip for oneDNN status 3"; }
echo "test_gemm_bf16: $(head -1 "$work/gemm.out" | cut -c1-100)"
cfg=$src/tests/configs/tiny_gemm_bf16.json
for v in auto bf16; do sed "s/\"cpu_gemm\": \"[a-z0-9]*\"/\"cpu_gemm\": \"$v\"/" "$cfg" >"$work/$v.json"; done
q "$bld/tools/zo-train" --config "$work/auto.json" --steps 3 --no-sample >"$work/auto.out" \
  || { tail -10 "$work/auto.out"; fail "zo-train with train.cpu_gemm \"auto\""; }
grep -q 'train.cpu_gemm "auto": fp32 products (OpenBLAS Haswell): this CPU (no AVX-512) cannot run' "$work/auto.out" \
  || { grep -i "cpu_gemm\|model cpu" "$work/auto.out"; fail "\"auto\" does not say fp32 products on a CPU without AVX-512"; }
grep -q "Adam SIMD: avx2" "$work/auto.out" || fail "zo-train's Adam is not on the avx2 kernels"
grep -q "^step *3/3 | loss" "$work/auto.out" || { tail -5 "$work/auto.out"; fail "no step 3"; }
echo "zo-train \"auto\": $(grep -m1 'train.cpu_gemm' "$work/auto.out" | cut -c1-110)...; $(grep -m1 '^step *3/3' "$work/auto.out" | cut -d'|' -f1-3)"
for dry in "" --dry-run; do
  if q "$bld/tools/zo-train" --config "$work/bf16.json" --steps 1 --no-sample $dry >"$work/bf16.out"; then
    fail "\"bf16\" accepted${dry:+ by $dry}"
  fi
  grep -q 'error: train.cpu_gemm: "bf16": this CPU (no AVX-512) cannot run' "$work/bf16.out" \
    || { cat "$work/bf16.out"; fail "\"bf16\"${dry:+ ($dry)}: no refusal naming train.cpu_gemm"; }
done
echo "zo-train \"bf16\" (run and --dry-run): $(grep -m1 error "$work/bf16.out" | cut -c1-110)..."
echo PASS
