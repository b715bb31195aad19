#!/bin/bash
# zo_report_smoke.sh ZO_REPORT DIR - zo-report --json parses and holds the main sections; text and --help run.
set -u
rep=$1 dir=$2
fail() { echo "zo_report_smoke: FAIL: $*"; exit 1; }
out=$("$rep" --json --path "$dir") || fail "zo-report --json exited $?"
for key in '"zoffload"' '"cpu"' '"simd_best"' '"avx512f"' '"numa_nodes"' '"physical_cores"' '"gpu"' '"nccl"' \
           '"io_uring"' '"READ_FIXED"' '"sqpoll"' '"o_direct"' '"memlock"' '"soft_bytes"' '"jemalloc"' '"build_type"'; do
  grep -q "$key" <<<"$out" || fail "key $key missing from --json output"
done
# GPU section: a "gpus" array always; without a device, "gpu_error" says why (exit status still 0).
grep -q '"gpus": \[' <<<"$out" || fail '"gpus" array missing from --json output'
if grep -q '"gpus": \[\]' <<<"$out"; then
  grep -q '"gpu_error": "no CUDA device (' <<<"$out" || fail 'no GPU listed but no "gpu_error": "no CUDA device (...)"'
  "$rep" | grep -q "no CUDA device (" || fail "text output does not say 'no CUDA device (...)'"
else
  for key in '"compute_capability"' '"memory_bytes"' '"pcie"' '"numa_node"' '"bf16_dense_tflops"' '"host_register"' \
             '"driver_version"' '"runtime_version"'; do
    grep -q "$key" <<<"$out" || fail "GPU listed but key $key missing from --json output"
  done
fi
if command -v python3 >/dev/null; then
  python3 -c 'import json,sys; json.load(sys.stdin)' <<<"$out" || fail "--json output is not valid JSON"
  python3 -c '
import json, sys
g = json.load(sys.stdin)["gpu"]
assert isinstance(g["gpus"], list), "gpu.gpus is not an array"
assert g["gpus"] or g["gpu_error"].startswith("no CUDA device ("), "no gpus and no gpu_error"
for d in g["gpus"]:
    for k in ("name", "memory_bytes", "compute_capability", "pcie", "numa_node", "bf16_dense_tflops", "host_register"):
        assert k in d or "error" in d, "gpus[%d] lacks %s" % (d.get("index", -1), k)
' <<<"$out" || fail "GPU section of --json is not as documented"
fi
"$rep" --path "$dir" | grep -q "io_uring:" || fail "text output lacks the io_uring section"
"$rep" --help | grep -q -- "--path" || fail "--help does not list --path"
"$rep" --bogus >/dev/null 2>&1; [ $? -eq 2 ] || fail "a bad flag should exit 2"
# --speeds: a "speeds" section with a source per figure; the disk figures from --config (no disk I/O here), the
# rest measured into a cache under DIR (never $HOME); a second run reads them from that cache.
cfg=$dir/zo_report_speeds.json cache=$dir/zo_report_speeds_cache.json
rm -f "$cache"
printf '{"train_batch_size": 1, "zoffload": {"adam_threads": 1, "speeds": {"nvme_read_gbps": 1.5, "nvme_write_gbps": 0.75}}}\n' >"$cfg"
out=$(ZO_SPEEDS_CACHE=$cache "$rep" --json --speeds --path "$dir" --config "$cfg") || fail "zo-report --speeds exited $?"
for key in '"speeds"' '"nvme_read"' '"gbps": 1.5' '"source": "config zoffload.speeds.nvme_read_gbps"' '"h2d"' \
           '"source": "measured: ' '"gelems_per_s"'; do
  grep -qF "$key" <<<"$out" || fail "--speeds: $key missing from --json output"
done
[ -f "$cache" ] || fail "--speeds did not write the cache $cache"
txt=$(ZO_SPEEDS_CACHE=$cache "$rep" --speeds --config "$cfg") || fail "zo-report --speeds (text) exited $?"
grep -q "^  adam .* G elements/s (cache $cache (measured " <<<"$txt" || fail "--speeds text: adam not read from the cache"
grep -q "^  nvme_read .*1.5 GB/s (config zoffload.speeds.nvme_read_gbps)" <<<"$txt" || fail "--speeds text: nvme_read"
"$rep" --config "$dir/no-such.json" >/dev/null 2>&1; [ $? -eq 2 ] || fail "an unreadable --config should exit 2"
rm -f "$cfg" "$cache"
echo "zo_report_smoke: ok"
