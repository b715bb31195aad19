#!/usr/bin/env bash
# zo_stepbench_ranks.sh BIN DIR MPIRUN... - zo-stepbench --ranks under mpirun -np 2 and 3 at stage 2
# (optimizer state on cpu): the summary and JSON report the exposed communication per step and the bytes sent
# per rank per step, and those bytes equal what a ring algorithm must send for a reduce-scatter and an
# all-gather of every tensor: 2 x (W-1) x ceil(n/W) elements x 2 B (bf16) summed over the layers, which is
# ratio (W-1)/W (plus padding) of ZeRO's 2 x params. Only rank 0 prints. Checks the tool reports what the engine
# moved; it does not judge the speed. Stage 3 (parameters on cpu): a gather per fetch, forward and backward, and the
# reduce-scatter: 3 x (W-1) x ceil(n/W) elements, ZeRO's 3 x params.
set -u
bin=$1 parent=$2
shift 2
dir=$(mktemp -d "$parent/stepbench-ranks.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
export ZO_SPEEDS_CACHE="$dir/speeds.json" # the placement planner's speeds (link, Adam): cached here, never under $HOME
fail() { echo "FAIL: $*"; exit 1; }
params=1000003 layers=5 # 200000 elements a layer, the last 200003: uneven over 2 and 3 ranks
# stage 2: a reduce-scatter and an all-gather of every tensor a step (ZeRO: 2 x params); stage 3 with the
# parameters on cpu: a gather for every fetch, forward and backward, and the reduce-scatter (ZeRO: 3 x params)
for np in 2 3; do
  for stage in 2 3; do
    extra=()
    [ $stage = 3 ] && extra=(--offload-param cpu)
    out="$dir/np$np-s$stage"
    "$@" -np $np "$bin" --ranks --params $params --layers $layers --nvme-path "$dir" --offload-optimizer cpu \
      "${extra[@]}" --steps 4 --warmup 2 --compute-ms-per-layer 1 --adam-threads 1 --json "$out.json" >"$out.out" 2>&1 \
      || { tail -20 "$out.out"; fail "np $np stage $stage exited non-zero"; }
    [ "$(grep -c '^zo-stepbench:' "$out.out")" = 1 ] || fail "np $np: more than one rank printed"
    grep -q "communication, $np ranks, stage $stage, overlap_comm off: exposed" "$out.out" \
      || fail "np $np stage $stage: no communication line"
    /usr/bin/python3 - "$out.json" $np $params $layers $stage <<'PY' || fail "np $np stage $stage: JSON communication figures"
import json, sys
j = json.load(open(sys.argv[1])); W, N, L, S = map(int, sys.argv[2:6])
c = j["communication"]
per = N // L
sizes = [per] * (L - 1) + [N - per * (L - 1)]
k = 2 if S == 2 else 3
want = sum(k * (W - 1) * -(-n // W) * 2 for n in sizes)  # ring volume of k collectives per tensor, bf16
assert c["ranks"] == W and c["stage"] == S, c
assert c["bytes_per_rank"] == want, (c["bytes_per_rank"], want)
assert abs(c["ratio"] - want / (k * N * 2.0)) < 1e-12 and abs(c["ratio"] - (W - 1) / W) < 1e-4, c
assert c["exposed_s"] > 0, c
print("ok   np %d, stage %d: %d bytes sent per rank per step = %.4f x ZeRO's %d x params x 2 B (ring minimum %.4f); "
      "exposed communication %.4f s per step" % (W, S, c["bytes_per_rank"], c["ratio"], k, (W - 1) / W, c["exposed_s"]))
PY
  done
done
echo PASS
