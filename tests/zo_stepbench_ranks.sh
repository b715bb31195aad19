#!/usr/bin/env bash
# zo_stepbench_ranks.sh BIN DIR MPIRUN... - zo-stepbench --ranks under mpirun -np 2 and 3 at stage 2
# (optimizer state on cpu): the summary and JSON report the exposed communication per step and the bytes sent
# per rank per step, and those bytes equal what a ring algorithm must send for a reduce-scatter and an
# all-gather of every tensor: 2 x (W-1) x ceil(n/W) elements x 2 B (bf16) summed over the layers, which is
# ratio (W-1)/W (plus padding) of ZeRO's 2 x params. Only rank 0 prints. Checks the tool reports what the engine
# moved; it does not judge the speed.
set -u
bin=$1 parent=$2
shift 2
dir=$(mktemp -d "$parent/stepbench-ranks.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
params=1000003 layers=5 # 200000 elements a layer, the last 200003: uneven over 2 and 3 ranks
for np in 2 3; do
  "$@" -np $np "$bin" --ranks --params $params --layers $layers --nvme-path "$dir" --offload-optimizer cpu \
    --steps 3 --warmup 1 --compute-ms-per-layer 1 --adam-threads 1 --json "$dir/np$np.json" >"$dir/np$np.out" 2>&1 \
    || { tail -20 "$dir/np$np.out"; fail "np $np exited non-zero"; }
  [ "$(grep -c '^zo-stepbench:' "$dir/np$np.out")" = 1 ] || fail "np $np: more than one rank printed"
  grep -q "communication, $np ranks, stage 2, overlap_comm off: exposed" "$dir/np$np.out" || fail "np $np: no communication line"
  /usr/bin/python3 - "$dir/np$np.json" $np $params $layers <<'PY' || fail "np $np: JSON communication figures"
import json, sys
j = json.load(open(sys.argv[1])); W, N, L = map(int, sys.argv[2:5])
c = j["communication"]
per = N // L
sizes = [per] * (L - 1) + [N - per * (L - 1)]
want = sum(2 * (W - 1) * -(-n // W) * 2 for n in sizes)  # reduce-scatter + all-gather, bf16
assert c["ranks"] == W and c["stage"] == 2, c
assert c["bytes_per_rank"] == want, (c["bytes_per_rank"], want)
assert abs(c["ratio"] - want / (2.0 * N * 2)) < 1e-12 and abs(c["ratio"] - (W - 1) / W) < 1e-4, c
assert c["exposed_s"] > 0, c
print("ok   np %d: %d bytes sent per rank per step = %.4f x ZeRO's 2 x params x 2 B (ring minimum %.4f); "
      "exposed communication %.4f s per step" % (W, c["bytes_per_rank"], c["ratio"], (W - 1) / W, c["exposed_s"]))
PY
done
echo PASS
