#!/usr/bin/env bash
# isa_avx2.sh COMMAND [ARGS...] - COMMAND as a CPU without AVX-512 runs it, on any CPU with AVX2: the AVX-512 paths
# turned off by each component's own switch (CPU Adam ZO_SIMD=avx2, oneDNN ONEDNN_MAX_CPU_ISA=AVX2, OpenBLAS
# OPENBLAS_CORETYPE=Haswell), set for COMMAND alone. The ctest label `isa` runs the ISA-dependent tests through it, so
# that an AVX-512 machine proves the AVX2 paths in every run. Prints what it forced and what the CPU has; exit:
# COMMAND's, or 77 when the CPU has no AVX2 (nothing to force down to).
set -u
flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
has() { case "$flags" in *" $1 "*) echo yes ;; *) echo no ;; esac; }
[ "$(has avx2)" = yes ] && [ "$(has fma)" = yes ] || { echo "SKIP: this CPU has no AVX2 and FMA"; exit 77; }
export ZO_SIMD=avx2 ONEDNN_MAX_CPU_ISA=AVX2 OPENBLAS_CORETYPE=Haswell
echo "isa: ZO_SIMD=$ZO_SIMD ONEDNN_MAX_CPU_ISA=$ONEDNN_MAX_CPU_ISA OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE" \
  "(this CPU: avx512f $(has avx512f), avx512_bf16 $(has avx512_bf16))"
exec "$@"
