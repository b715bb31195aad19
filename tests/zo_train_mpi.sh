#!/usr/bin/env bash
# zo_train_mpi.sh ZO_TRAIN CONFIG CORPUS MPIRUN... - zo-train under `mpirun -np N` against one rank training on
# the same global batch (fp32 working weights, so that only the order of summation can differ):
#  - np 2, no clipping: the logged losses are identical to the last bit to one rank with twice the gradient
#    accumulation, at stage 0 (state on the device), 1 (device, cpu) and 2 (cpu, nvme). Why exact: each rank
#    runs one micro-batch of 4 windows and the one-rank run the same two micro-batches one after the other;
#    the one rank accumulates g1/2 + g2/2 in fp32, the two ranks sum g1 + g2 (a two-term sum is the same in
#    either order) and Adam multiplies by 1/2: both are the rounding of (g1 + g2)/2, since halving is exact.
#    Clipping is off because the global norm is summed per shard on several ranks and per tensor on one.
#  - np 3 (uneven shards: 34688 parameters do not divide by 3), clipping on: every logged loss within a
#    relative 1e-5 of one rank with three micro-batches. Three terms summed in another order, and 1/3 not
#    exact, give gradients that differ by a few ulp (~1e-7 relative); Adam's update is scale-free, so the
#    weights drift by about that much per step, ~1e-6 after the 30 steps here at most, and the loss by less;
#    1e-5 leaves a margin of ten. Measured here: 1.1e-7 at step 30.
#  - per rank, the NVMe optimizer state at stage 2 is about 1/3 of one rank's (extents padded to 4 KiB).
#  - stage 3 (parameters partitioned on the host tier or NVMe, gathered at every fetch) likewise, both ways; without
#    offload_param on the host device the parameters are partitioned in its (host) memory, and match one rank too.
#  - a rank killed with SIGKILL mid-run ends the job: mpirun exits non-zero within 30 s naming the signal,
#    instead of the other rank waiting forever in a collective.
# Exit 0 pass, 1 fail.
set -u
zo=$1 cfg=$2 corpus=$3
shift 3
mpirun=("$@")
work=$(mktemp -d "${TMPDIR:-/tmp}/zo-mpi.XXXXXX")
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
py=/usr/bin/python3
# mk DST MICRO GAS STAGE OPTIMIZER_TIER CLIP: the test config, fp32, with those settings
mk() {
  "$py" - "$cfg" "$@" "$work/nvme" <<'EOF'
import json, sys
src, dst, mb, gas, stage, opt, clip, nvme = sys.argv[1:9]
c = json.load(open(src))
c.pop("train_batch_size", None)
c["train_micro_batch_size_per_gpu"], c["gradient_accumulation_steps"] = int(mb), int(gas)
c["bf16"] = {"enabled": False}
c["gradient_clipping"] = float(clip)
z = c["zero_optimization"]
z["stage"] = int(stage)
z["offload_optimizer"] = {"device": opt, "nvme_path": nvme, "pin_memory": True}
z.pop("offload_param", None)
if z["stage"] == 3:  # stage 3 partitions the parameters too: on the optimizer's tier (cpu or nvme)
    z["offload_param"] = {"device": opt if opt in ("cpu", "nvme") else "cpu", "nvme_path": nvme, "pin_memory": True}
json.dump(c, open(dst, "w"), indent=1)
EOF
}
mkdir -p "$work/nvme"
losses() { grep -o '"\(loss\|val_loss\)": *[-0-9.eE+]*' "$1"; }
# run NAME NP CONFIG STEPS: zo-train on NP ranks (1: no mpirun)
run() {
  local name=$1 np=$2 c=$3 steps=$4
  local cmd=("$zo" --config "$c" --data "$corpus" --threads 1 --no-sample --steps "$steps" --log-json "$work/$name.jsonl")
  if [ "$np" = 1 ]; then "${cmd[@]}" >"$work/$name.out" 2>&1
  else "${mpirun[@]}" -np "$np" "${cmd[@]}" >"$work/$name.out" 2>&1; fi \
    || { tail -20 "$work/$name.out"; fail "$name exited non-zero"; }
  losses "$work/$name.jsonl" >"$work/$name.loss"
  [ -s "$work/$name.loss" ] || fail "$name logged no loss"
  [ -z "$(ls -A "$work/nvme")" ] || fail "$name left swap files: $(ls -A "$work/nvme")"
}

# ---- two ranks: bit-identical to one rank with twice the accumulation
mk "$work/ref2.json" 4 2 2 cpu 0
run ref2 1 "$work/ref2.json" 20
for sc in "0 none" "1 none" "1 cpu" "2 cpu" "2 nvme" "3 cpu" "3 nvme"; do
  set -- $sc
  mk "$work/s$1-$2.json" 4 1 "$1" "$2" 0
  run "np2-s$1-$2" 2 "$work/s$1-$2.json" 20
  grep -q "batch 8 = 4 micro x 1 accum x 2 ranks" "$work/np2-s$1-$2.out" || fail "np2-s$1-$2: batch line"
  cmp -s "$work/ref2.loss" "$work/np2-s$1-$2.loss" \
    || { paste "$work/ref2.loss" "$work/np2-s$1-$2.loss" | head -6; fail "np 2, stage $1, state $2: losses differ from one rank"; }
  lab="optimizer state $2"
  [ "$1" = 3 ] && lab="$lab, parameters $2"
  echo "ok   np 2, stage $1, $lab: $(wc -l <"$work/ref2.loss") losses identical to one rank (micro 4 x accum 2)"
done
[ "$(grep -c '^zo-train: rank [01] of 2' "$work/np2-s2-nvme.out")" = 2 ] || fail "no per-rank memory lines"
[ "$(grep -c '^step ' "$work/np2-s2-nvme.out")" -gt 0 ] || fail "rank 0 printed no steps"

# ---- three ranks: within the stated tolerance of one rank with three micro-batches, clipping on
mk "$work/ref3.json" 4 3 2 nvme 1.0
run ref3 1 "$work/ref3.json" 30
nv1=$(grep -o '"nvme_bytes": *[0-9]*' "$work/ref3.jsonl" | tail -1 | grep -o '[0-9]*$')
for sc in "1 none" "2 cpu" "2 nvme" "3 cpu" "3 nvme"; do
  set -- $sc
  mk "$work/t$1-$2.json" 4 1 "$1" "$2" 1.0
  run "np3-s$1-$2" 3 "$work/t$1-$2.json" 30
  worst=$("$py" - "$work/ref3.loss" "$work/np3-s$1-$2.loss" <<'EOF'
import sys
a = [float(l.split(":")[1]) for l in open(sys.argv[1])]
b = [float(l.split(":")[1]) for l in open(sys.argv[2])]
assert len(a) == len(b) and a, (len(a), len(b))
print("%.3g" % max(abs(x - y) / abs(x) for x, y in zip(a, b)))
EOF
  ) || fail "np 3 stage $1 $2: cannot compare losses"
  "$py" -c "import sys; sys.exit(0 if float('$worst') <= 1e-5 else 1)" \
    || { paste "$work/ref3.loss" "$work/np3-s$1-$2.loss"; fail "np 3, stage $1, state $2: relative loss difference $worst > 1e-5"; }
  lab="optimizer state $2"
  [ "$1" = 3 ] && lab="$lab, parameters $2"
  echo "ok   np 3, stage $1, $lab: losses within $worst (relative; limit 1e-5) of one rank (micro 4 x accum 3)"
done
# What a rank holds as the stage rises (rank 0's last log line; fp32, 34688 parameters of 4 B): stage 1 keeps
# the whole working weights and a third of the gradients and optimizer state (gradients are partitioned from
# stage 1 on here: the engine never holds a whole gradient beyond its reduction ring), stage 2 the same, stage 3
# a third of everything. A third means within 28 elements (one element of padding per tensor) of P / 3.
"$py" - "$work" <<'EOF' || fail "bytes per rank by stage"
import json, sys
w = sys.argv[1]
P = 34688 * 4
def last(name):
    return [json.loads(l) for l in open("%s/%s.jsonl" % (w, name))][-1]
want = {"np3-s1-none": (1, 3, 3), "np3-s2-cpu": (1, 3, 3), "np3-s3-cpu": (3, 3, 3)}
for name, (dp, dg, ds) in want.items():
    m = last(name)
    got = (m["param_bytes"] / P, m["grad_bytes"] / P, m["state_bytes"] / (3 * P))
    for g, d, what in zip(got, (dp, dg, ds), ("parameters", "gradients", "optimizer state")):
        assert abs(g - 1.0 / d) <= 28 * 4 / P + 1e-12, (name, what, g, 1.0 / d)
    print("ok   %s: per rank %.4f of the parameters, %.4f of the gradients, %.4f of the optimizer state "
          "(+ %d B of collective buffers)" % (name.replace("np3-s", "3 ranks, stage ").replace("-", ", "), got[0],
                                             got[1], got[2], m["comm_buffer_bytes"]))
EOF
# nvme bytes per rank (rank 0's log) against one rank's: a third, plus 4 KiB of padding per extent
nv3=$(grep -o '"nvme_bytes": *[0-9]*' "$work/np3-s2-nvme.jsonl" | tail -1 | grep -o '[0-9]*$')
[ -n "$nv1" ] && [ -n "$nv3" ] && [ "$nv3" -le $((nv1 / 3 + 3 * 14 * 4096)) ] && [ "$nv3" -lt "$nv1" ] \
  || fail "nvme bytes per rank $nv3 with 3 ranks vs $nv1 with one"
echo "ok   NVMe optimizer state per rank: $nv3 B on 3 ranks, $nv1 B on one"

# ---- checkpoints on several ranks: every rank writes its shard file and manifest into rank 0's temporary directory,
# rank 0 puts it into place once all agree. 10 steps + save, then a new job resuming for 10 more, logs the losses
# of the straight 20-step run to the last bit (stage 2 on cpu on 2 and 3 ranks; stage 3 with parameters and state
# on nvme on 2); a checkpoint of 2 ranks is refused on 3, naming the world size.
for sc in "2 2 cpu" "3 2 cpu" "2 3 nvme"; do
  set -- $sc
  np=$1 c="$work/s$2-$3.json"
  [ -f "$c" ] || mk "$c" 4 1 "$2" "$3" 0
  ck="$work/ckpt-np$np-s$2-$3"
  "${mpirun[@]}" -np "$np" "$zo" --config "$c" --data "$corpus" --threads 1 --no-sample --steps 20 --save "$ck" \
    --save-every 10 --log-json "$work/ck-straight.jsonl" >"$work/ck-straight.out" 2>&1 \
    || { tail -20 "$work/ck-straight.out"; fail "np $np stage $2 $3: the run saving checkpoints failed"; }
  [ "$(ls "$ck/step-000000000010" | grep -c '^rank0000[0-9].bin$')" = "$np" ] || fail "np $np: not one shard file per rank"
  "${mpirun[@]}" -np "$np" "$zo" --config "$c" --data "$corpus" --threads 1 --no-sample --steps 20 \
    --resume "$ck/step-000000000010" --log-json "$work/ck-resumed.jsonl" >"$work/ck-resumed.out" 2>&1 \
    || { tail -20 "$work/ck-resumed.out"; fail "np $np stage $2 $3: resuming failed"; }
  grep -q "resumed from .* at step 10" "$work/ck-resumed.out" || fail "np $np: did not resume at step 10"
  losses "$work/ck-straight.jsonl" | tail -4 >"$work/ck-a"
  losses "$work/ck-resumed.jsonl" | tail -4 >"$work/ck-b"
  cmp -s "$work/ck-a" "$work/ck-b" || { paste "$work/ck-a" "$work/ck-b"; fail "np $np stage $2 $3: resumed losses differ"; }
  echo "ok   np $np, stage $2, $3: 10 steps + checkpoint + a new job resuming for 10 = 20 straight, last bit ($np shard files)"
done
"${mpirun[@]}" -np 3 "$zo" --config "$work/s2-cpu.json" --data "$corpus" --threads 1 --no-sample --steps 12 \
  --resume "$work/ckpt-np2-s2-cpu/step-000000000010" >"$work/ck-wrong.out" 2>&1 && fail "a 2-rank checkpoint loaded on 3 ranks"
grep -q "world_size: saved with 2 ranks, this engine has 3" "$work/ck-wrong.out" || { tail "$work/ck-wrong.out"; fail "no world size named"; }
echo "ok   a 2-rank checkpoint on 3 ranks refused: $(grep -m1 -o 'world_size: saved with 2 ranks, this engine has 3' "$work/ck-wrong.out")"

# ---- the safetensors export on several ranks: shards all-gathered, rank 0 writes; byte for byte the file of the
# one-rank run it matches to the last bit (2 ranks, stage 2 and stage 3 on nvme, fp32)
"$zo" --config "$work/ref2.json" --data "$corpus" --threads 1 --no-sample --steps 10 \
  --export-safetensors "$work/one.safetensors" >"$work/x1.out" 2>&1 || { tail "$work/x1.out"; fail "one-rank export"; }
for sc in "2 cpu" "3 nvme"; do
  set -- $sc
  "${mpirun[@]}" -np 2 "$zo" --config "$work/s$1-$2.json" --data "$corpus" --threads 1 --no-sample --steps 10 \
    --export-safetensors "$work/two-s$1.safetensors" >"$work/x2.out" 2>&1 || { tail "$work/x2.out"; fail "2-rank export"; }
  cmp -s "$work/one.safetensors" "$work/two-s$1.safetensors" || fail "stage $1: the 2-rank export differs from one rank's"
  echo "ok   safetensors export on 2 ranks, stage $1 ($2): $(stat -c %s "$work/two-s$1.safetensors") bytes, identical to one rank's"
done

# ---- stage 3 without offload_param on several ranks of the host device: the parameters partitioned in host memory,
# which is that device's (as offload_param "cpu"); identical to one rank, as above (on a GPU it is refused: not built)
mk "$work/s3.json" 4 1 3 cpu 0
"$py" - "$work/s3.json" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))
c["zero_optimization"].pop("offload_param")
json.dump(c, open(sys.argv[1], "w"))
EOF
run np2-s3-dev 2 "$work/s3.json" 20
cmp -s "$work/ref2.loss" "$work/np2-s3-dev.loss" \
  || { paste "$work/ref2.loss" "$work/np2-s3-dev.loss" | head -6; fail "np 2, stage 3, no offload_param: losses differ from one rank"; }
echo "ok   np 2, stage 3, optimizer state cpu, no offload_param (host memory): $(wc -l <"$work/ref2.loss") losses identical to one rank"

# ---- a rank killed mid-run: the job ends within a bound
mk "$work/kill.json" 4 1 2 cpu 0
"${mpirun[@]}" -np 2 "$zo" --config "$work/kill.json" --data "$corpus" --threads 1 --no-sample --steps 100000 \
  >"$work/kill.out" 2>&1 &
mpid=$!
victim=
for _ in $(seq 1 300); do # up to 30 s for the ranks to start training
  for p in $(pgrep -f -- "--config $work/kill.json"); do
    [ "$p" = "$mpid" ] && continue
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1" && victim=$p
  done
  [ -n "$victim" ] && grep -q '^step     0' "$work/kill.out" && break
  sleep 0.1
done
[ -n "$victim" ] || fail "rank 1 never started"
sleep 0.5
t0=$(date +%s.%N)
kill -9 "$victim"
for _ in $(seq 1 300); do kill -0 "$mpid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$mpid" 2>/dev/null && fail "the job still runs 30 s after rank 1 was killed"
wait "$mpid"
rc=$?
dt=$("$py" -c "import time; print('%.1f' % (time.time() - $t0))")
[ "$rc" -ne 0 ] || fail "mpirun exited 0 after a rank was killed"
grep -q "signal 9" "$work/kill.out" || { tail "$work/kill.out"; fail "no message names the killed rank"; }
echo "ok   rank 1 killed with SIGKILL: the job ended in ${dt} s (bound 30 s), exit $rc: $(grep -m1 -o 'process rank 1 [^.]*signal 9[^.]*' "$work/kill.out" | tr -s ' ')"
echo PASS
