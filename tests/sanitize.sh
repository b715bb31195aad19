#!/usr/bin/env bash
# sanitize.sh MODE SOURCE_DIR BUILD_ROOT - a second build of the library and its tests under a sanitizer,
# then those tests run there; any sanitizer report fails (halt_on_error). MODE:
#   asan  AddressSanitizer + UndefinedBehaviorSanitizer (and LeakSanitizer) over the unit-test programs,
#         then the four fuzz targets (config, engine call sequences, checkpoint reader, safetensors) for
#         FUZZ_SECONDS each (default 15): coverage-guided libFuzzer when clang has it, else the
#         deterministic mutation drivers in those files
#   tsan  ThreadSanitizer over the pipeline tests: the engine (copy-stream callbacks, Adam pool, NVMe
#         pipeline), the Adam thread pool, the swap queue and its progress thread, the device backend
# The tree is BUILD_ROOT/san-MODE (CUDA, NCCL, MPI and oneDNN off: they are not what is checked here; libdnnl's
# start-up code frees memory ASan never saw allocated, third-party like libomp's below).
# Exit 0 clean, 1 on a report or failure.
set -u
mode=$1 src=$2 root=$3
dir="$root/san-$mode"
fail() { echo "FAIL: $*"; exit 1; }
cc=gcc fuzzer=OFF
if command -v clang >/dev/null && echo 'int LLVMFuzzerTestOneInput(const char *d, long n) { return 0; }' |
   clang -x c -fsanitize=fuzzer,address - -o "$root/.fuzzer-probe" 2>/dev/null; then
  cc=clang
  [ "$mode" = asan ] && fuzzer=ON
fi
rm -f "$root/.fuzzer-probe"
case $mode in
  asan) san="address,undefined"
        [ $fuzzer = ON ] && san="$san,fuzzer-no-link"
        tests="test_config test_config_auto test_adam test_cast test_adam_fused test_adam_pool test_swap test_swap_io
               test_swap_crc test_swap_dir test_swap_queue test_device test_pinned_cuda test_arena test_comm
               test_engine test_engine_dp test_budget test_checkpoint test_data test_gpt_grad test_grad_nvme
               test_param_cache"
        # (test_pinned is left out: ASan makes mlock a no-op, and that test checks the locked bytes)
        export ASAN_OPTIONS=halt_on_error=1:detect_leaks=1:abort_on_error=0:print_summary=1
        export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
        # clang's libomp loads its OMPT tool libarcher (a TSan helper) at start-up, which frees memory ASan
        # never saw allocated (third-party, not ours): no OMPT tool under ASan
        export OMP_TOOL=disabled ;;
  tsan) san="thread"
        tests="test_engine test_param_cache test_adam_pool test_swap_queue test_swap_io test_device"
        export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$src/tests/tsan.supp"
        export OMP_TOOL=disabled # libomp's OMPT tool (libarcher) trips TSan's allocator check at start-up
        # Without archer TSan cannot see libomp's barriers, so a buffer an OpenMP team filled (zo_cast of a 1 Mi-element
        # tensor in test_engine's load test) and the copy stream then read was reported as a race (false: the
        # region's join orders them). OpenMP regions run on their caller's thread here; the engine's own threads
        # (copy streams, the Adam pool, the swap queue) are what this build checks.
        export OMP_THREAD_LIMIT=1 ;;
  *) fail "mode: asan or tsan, got '$mode'" ;;
esac
t0=$(date +%s)
CC=$cc cmake -S "$src" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DZO_SANITIZE="$san" -DZO_FUZZ_LIBFUZZER=$fuzzer \
      -DZO_WITH_CUDA=OFF -DZO_WITH_NCCL=OFF -DZO_WITH_MPI=OFF -DZO_WITH_ONEDNN=OFF -DZO_NATIVE=ON >"$dir.configure.log" 2>&1 \
  || { cat "$dir.configure.log"; fail "configure ($cc, -fsanitize=$san)"; }
targets=$tests
[ "$mode" = asan ] && targets="$targets fuzz_config fuzz_engine_seq fuzz_checkpoint fuzz_safetensors"
# shellcheck disable=SC2086
cmake --build "$dir" -j"$(nproc)" --target $targets >"$dir.build.log" 2>&1 || { tail -30 "$dir.build.log"; fail "build"; }
t1=$(date +%s)
regex="^($(echo $tests | tr ' ' '|'))\$"
ctest --test-dir "$dir" -R "$regex" -j"$(nproc)" --output-on-failure >"$dir.ctest.log" 2>&1
rc=$?
grep -E "tests passed|Total Test time" "$dir.ctest.log"
[ $rc -eq 0 ] || { grep -E -A30 "ERROR: |runtime error|WARNING: ThreadSanitizer|\*\*\*Failed" "$dir.ctest.log" | head -80; fail "$mode: tests"; }
grep -qE "ERROR: AddressSanitizer|runtime error:|WARNING: ThreadSanitizer|ERROR: LeakSanitizer" "$dir.ctest.log" \
  && fail "$mode: a sanitizer report in a passing run"
echo "$mode ($cc, -fsanitize=$san): built in $((t1 - t0)) s, $(echo $tests | wc -w) test programs clean in $(( $(date +%s) - t1 )) s"
if [ "$mode" = asan ]; then
  # fuzz NAME SECONDS SEEDS... -- ARGS...: one fuzz target for SECONDS over a fresh corpus holding the seed files
  # (the checkpoint and safetensors targets also make their own seeds at start-up); scratch files under the tree.
  fuzz() {
    local name=$1 secs=$2 corpus="$dir/corpus-$1" log="$dir.$1.log"
    shift 2
    rm -rf "$corpus" "$dir/fuzz-tmp" && mkdir -p "$corpus" "$dir/fuzz-tmp"
    while [ $# -gt 0 ] && [ "$1" != -- ]; do cp "$1" "$corpus"/; shift; done
    shift
    (cd "$dir" && TMPDIR="$dir/fuzz-tmp" "./tests/$name" -max_total_time="$secs" "$@" "$corpus") >"$log" 2>&1
    local frc=$?
    if [ $fuzzer = ON ]; then
      local execs
      execs=$(grep -o 'Done [0-9]* runs in [0-9]* second' "$log" | tail -1)
      [ $frc -eq 0 ] && [ -n "$execs" ] || { tail -40 "$log"; fail "$name (libFuzzer): crash or hang"; }
      echo "$name (libFuzzer, ASan+UBSan): $execs(s), 0 crashes, 0 hangs; corpus grew to $(ls "$corpus" | wc -l) inputs"
    else
      tail -1 "$log"
      [ $frc -eq 0 ] || { tail -40 "$log"; fail "$name: crash or hang"; }
    fi
  }
  # FUZZ_SECONDS per target (default 15; the note of issue 20 gives 600-second runs of each).
  secs=${FUZZ_SECONDS:-15}
  fuzz fuzz_config "$secs" "$src"/configs/*.json "$src"/tests/config/*.json "$src"/tests/configs/*.json -- -timeout=2 \
       -dict="$src/tests/fuzz_config.dict"
  fuzz fuzz_engine_seq "$secs" "$src"/tests/fuzz_engine_seq/* -- -timeout=20 -max_len=512 -rss_limit_mb=2560
  fuzz fuzz_checkpoint "$secs" -- -timeout=10
  fuzz fuzz_safetensors "$secs" -- -timeout=10
fi
echo PASS
