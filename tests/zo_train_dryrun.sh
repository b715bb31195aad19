#!/usr/bin/env bash
# zo_train_dryrun.sh ZO_TRAIN CONFIG_DIR - `zo-train --dry-run` on the model presets: the engine's bytes per tier
# in the printed budget equal the arithmetic below (written from the shapes in gpt.h and the tier layouts of
# zoffload/budget.h, not from the engine's code), a dry run allocates nothing, and a config that cannot fit
# exits 1 naming the key to change. Without a GPU the cuda presets are planned with --device cuda and a stated
# device capacity (80 GiB); when this zo-train has no CUDA compute, with --device host. Exit 0 pass, 1 fail.
set -u
zo=$1 cfgdir=$2
py=$(command -v python3 || echo /usr/bin/python3)
work=$(mktemp -d "${TMPDIR:-/tmp}/zo-dryrun.XXXXXX")
trap 'rm -rf "$work"' EXIT
failures=0
dev=cuda
if ! "$zo" --help | grep -q 'dry-run'; then echo "FAIL: zo-train has no --dry-run"; exit 1; fi
# gpt-10b with offload_optimizer.pin_memory false: the pageable layout, which no preset uses itself
"$py" -c 'import json, sys; c = json.load(open(sys.argv[1])); c["zero_optimization"]["offload_optimizer"]["pin_memory"] = False
json.dump(c, open(sys.argv[2], "w"))' "$cfgdir/gpt-10b.json" "$work/gpt-10b-pageable.json" || exit 1
for preset in gpt2-124m gpt2-1.5b gpt-10b gpt-10b-pageable gpt-10b-infinity gpt-2b-nvme; do
  cfg=$cfgdir/$preset.json
  [ -f "$cfg" ] || cfg=$work/$preset.json
  args=(--config "$cfg" --dry-run --device cuda --device-memory-limit 85899345920 --nvme-path "$work")
  /usr/bin/time -f "%e s %M KiB" -o "$work/time" "$zo" "${args[@]}" >"$work/out" 2>"$work/err"
  rc=$?
  if grep -q 'built without CUDA compute' "$work/err"; then
    dev=host
    args=(--config "$cfg" --dry-run --device host --nvme-path "$work")
    /usr/bin/time -f "%e s %M KiB" -o "$work/time" "$zo" "${args[@]}" >"$work/out" 2>"$work/err"
    rc=$?
  fi
  echo "== $preset (--device $dev): rc $rc, $(cat "$work/time")"
  cat "$work/out" "$work/err"
  if [ $rc -ne 0 ] && [ $rc -ne 1 ]; then echo "FAIL $preset: exit status $rc"; failures=$((failures + 1)); continue; fi
  if [ $rc -eq 1 ] && ! grep -qE 'zo-train: error: start-up budget: .*(set|point|raise|lower|use) ' "$work/err"; then
    echo "FAIL $preset: refused without naming what to change"; failures=$((failures + 1))
  fi
  # A dry run allocates nothing: its peak RSS stays far below even the smallest preset's host bytes.
  if [ "$(awk 'END {print $3}' "$work/time")" -gt 262144 ]; then
    echo "FAIL $preset: the dry run's peak RSS is over 256 MiB"; failures=$((failures + 1))
  fi
  if ! "$py" - "$cfg" "$work/out" <<'EOF'; then failures=$((failures + 1)); fi
import json, sys
cfg = json.load(open(sys.argv[1]))
m, z = cfg["model"], cfg["zero_optimization"]
L, C, T, V = m["n_layer"], m["d_model"], m["seq_len"], m["vocab"]
sizes = [V * C, T * C]
for _ in range(L):
    sizes += [C, C, 3 * C * C, 3 * C, C * C, C, C, C, 4 * C * C, 4 * C, 4 * C * C, C]
sizes += [C, C]
N = sum(sizes)
ru = lambda x, a: (x + a - 1) // a * a
w = 2                                                   # bf16 working weights and gradients
state_bf16 = cfg.get("zoffload", {}).get("optimizer_state_dtype") == "bf16"
st = 4 + (2 + 2 if state_bf16 else 4 + 4)               # master fp32 + exp_avg + exp_avg_sq
opt = z.get("offload_optimizer", {}).get("device", "none")
par = z.get("offload_param", {}).get("device", "none")
rows = {}
for line in open(sys.argv[2]):
    f = line.split()
    if len(f) > 5 and f[0] in ("device", "host", "pinned", "nvme") and f[1].isdigit():
        rows[f[0]] = int(f[2])                           # engine_bytes column
want = {}
if par == "none":
    want["device"] = sum(ru(n * w, 256) for n in sizes)
else:
    want["device"] = ru(max(sizes) * w, 256)
# Gradients: summed over micro-batches in fp32 when gradient_accumulation_steps > 1, then the hand-over passes
# through the staging ring: 1 bucket (2 with overlap_comm) of min(reduce_bucket_size, the largest tensor) fp32.
gas = cfg.get("gradient_accumulation_steps", 1)
g = 4 if gas > 1 else w
ring = (2 if z.get("overlap_comm", z.get("stage") == 3) else 1) * min(z.get("reduce_bucket_size", 500000000), max(sizes)) * 4 if gas > 1 else 0
pin = z.get("offload_optimizer", {}).get("pin_memory", True)
if opt == "cpu" and par == "none":
    want["host"] = N * g + ring + N * st + N * w   # gradients, staging, master + Adam state, bf16 staging
    # offload_optimizer.pin_memory false (gpt-10b-pageable): the gradients and state pageable; the bf16 staging stays pinned
    want["pinned"] = want["host"] if pin else ring + N * w
ok = True
if opt == "cpu" and par == "nvme":
    # Optimizer state and gradients in host memory, the working weights in params.swp (each tensor's extent padded to
    # the swap alignment over the working element), offload_param.buffer_count staging buffers of the largest tensor
    # and the write-back ring of max(buffer_count, 2) of them (gpt-10b-infinity).
    fits = False
    nb = cfg["zero_optimization"]["offload_param"].get("buffer_count", 5)
    for align in (4096, 512):
        unit = align // w
        nvme = sum(ru(n, unit) for n in sizes) * w
        stage_el = ru(max(sizes), unit)
        host = N * g + ring + N * st + nb * stage_el * w + ru(max(nb, 2) * stage_el * w, align)
        if rows.get("host") == host and rows.get("nvme") == nvme:
            fits = True
            print(f"  arithmetic: swap alignment {align}: host {host}, nvme {nvme}")
    if not fits:
        print(f"FAIL: host/nvme engine bytes {rows.get('host')}/{rows.get('nvme')} match no alignment's arithmetic")
        ok = False
if opt == "nvme" and par == "cpu":
    # The extent unit is the swap alignment (the file system's O_DIRECT alignment: 512 or 4096 bytes) over the
    # narrowest element (2 bytes). Sub-groups: pieces of at most sub_group_size, packed greedily while the padded
    # extents fit in sub_group_size elements; 4 buffer sets of the largest one.
    # The gradients live in grad.swp (g bytes per element, the same extents; the accumulation dtype counts in the
    # narrowest element) and pass through one staging bucket and two swap buffers of min(reduce_bucket_size,
    # the largest tensor, sub_group_size) elements rounded up to 64 Ki elements; a 4th buffer per sub-group set.
    fits = False
    for align in (4096, 512):
        unit = align // min(2 if state_bf16 else 4, g)
        sgs = ru(max(z["sub_group_size"], unit), unit)
        gel = ru(min(z.get("reduce_bucket_size", 500000000), max(sizes), z["sub_group_size"]), max(unit, 65536))
        pieces, file_el = [], 0
        for n in sizes:
            for off in range(0, n, sgs):
                pieces.append((file_el + off, min(sgs, n - off)))
            file_el += ru(n, unit)
        slot, k = 0, 0
        while k < len(pieces):
            start = pieces[k][0]
            end = pieces[k][0] + ru(pieces[k][1], unit)
            k += 1
            while k < len(pieces) and pieces[k][0] + ru(pieces[k][1], unit) - start <= sgs:
                end = pieces[k][0] + ru(pieces[k][1], unit)
                k += 1
            slot = max(slot, end - start)
        nbuf = 4
        # host working weights, sub-group buffers (state and gradient), gradient staging bucket and swap buffers
        host = N * w + nbuf * slot * (st + g) + gel * (4 if gas > 1 else w) + 2 * gel * g
        nvme = file_el * (st + g)
        if rows.get("host") == host and rows.get("nvme") == nvme:
            fits = True
            print(f"  arithmetic: swap alignment {align}: {len(pieces)} pieces, slot {slot} elements")
    if not fits:
        print(f"FAIL: host/nvme engine bytes {rows.get('host')}/{rows.get('nvme')} match no alignment's arithmetic")
        ok = False
if opt == "nvme" and par == "nvme":
    # Parameters, optimizer state and gradients on NVMe (gpt-2b-nvme, 2e9 parameters): the engine's host bytes are
    # bounded buffers (sub-group sets, staging, rings), under 1.5 GB; no gradient shard in host memory (4 GB).
    got = rows.get("host", 0)
    print(f"  host: engine {got} bytes, bound 1500000000 (gradient shard {N * g} bytes not held)")
    if not 0 < got < 1500000000:
        print("FAIL: nvme tiers: the engine's host bytes are not bounded")
        ok = False
for k, v in want.items():
    got = rows.get(k)
    print(f"  {k}: engine {got} bytes, arithmetic {v}" + ("" if got == v else "  <-- MISMATCH"))
    ok &= got == v
print(f"  N = {N} parameters")
sys.exit(0 if ok else 1)
EOF
done
# The CUDA model (train.model_memory streamed, the default) holds no whole-model gradient buffer: three bf16
# scratches, group 0's (wte, wpe) and two of the largest layer group's, each tensor rounded up to 256 bytes. Its
# caller bytes are the resident mode's (the whole model's bf16 gradients) less that difference, and the 10B presets'
# device need stays under 32 GB (gpt-10b) and 16 GB (gpt-10b-infinity: parameters off the device).
if [ $dev = cuda ]; then
  for pl in gpt-10b:32000000000 gpt-10b-infinity:16000000000; do
    preset=${pl%%:*} limit=${pl#*:}
    for mm in streamed resident; do
      "$zo" --config "$cfgdir/$preset.json" --dry-run --device cuda --model-memory $mm --nvme-path "$work" \
        >"$work/out-$mm" 2>&1
    done
    echo "== $preset, cuda gradient scratches:"; grep -hE '^device +[0-9]' "$work/out-streamed" "$work/out-resident"
    if ! "$py" - "$cfgdir/$preset.json" "$work/out-streamed" "$work/out-resident" "$limit" <<'EOF2'; then
import json, sys
m = json.load(open(sys.argv[1]))["model"]
L, C, T, V = m["n_layer"], m["d_model"], m["seq_len"], m["vocab"]
block = [C, C, 3 * C * C, 3 * C, C * C, C, C, C, 4 * C * C, 4 * C, 4 * C * C, C]
ru = lambda n: (2 * n + 255) // 256 * 256
g0 = ru(V * C) + ru(T * C)
gmax = max(sum(ru(n) for n in block), 2 * ru(C))
full = 2 * (V * C + T * C + L * sum(block) + 2 * C)
def dev(path):
    for line in open(path):
        f = line.split()
        if len(f) > 4 and f[0] == "device" and f[1].isdigit():
            return int(f[1]), int(f[3])
    return None, None
need, caller = dev(sys.argv[2])
_, caller_res = dev(sys.argv[3])
ok = need is not None and caller_res is not None
if ok:
    print(f"  need {need} (limit {sys.argv[4]}); caller resident - streamed {caller_res - caller}, "
          f"arithmetic {full - g0 - 2 * gmax} (whole model {full}, scratches {g0} + 2 x {gmax})")
    ok = need <= int(sys.argv[4]) and caller_res - caller == full - g0 - 2 * gmax
if not ok:
    print("FAIL: the cuda model's gradient bytes")
sys.exit(0 if ok else 1)
EOF2
      failures=$((failures + 1))
    fi
  done
fi
# Device Adam (offload_optimizer "none" on a GPU): the dry run refuses exactly what zo_engine_create refuses on the
# GPU (zo_engine_check_device, the message create gives; test_engine_devadam checks that create gives it on the
# stand-in runtime), and accepts what create accepts. gpt2-124m fits with gradient_accumulation_steps 1 and 2
# (device Adam sums the micro-batches on the device, in an fp32 gradient region: the device block grows by 2
# bytes a parameter over bf16); parameter offload with it is refused. Only where this zo-train plans on
# --device cuda.
if [ "$dev" = cuda ]; then
  "$py" -c "import json, sys
c = json.load(open(sys.argv[1])); c['gradient_accumulation_steps'] = 2
c['train_batch_size'] = c['train_micro_batch_size_per_gpu'] * 2; json.dump(c, open(sys.argv[2], 'w'))" \
    "$cfgdir/gpt2-124m.json" "$work/ga2.json"
  block1=
  for acc in 1 2 p; do
    c=$cfgdir/gpt2-124m.json
    extra=
    [ $acc = 2 ] && c=$work/ga2.json
    [ $acc = p ] && extra="--offload-param cpu"
    # shellcheck disable=SC2086
    "$zo" --config "$c" --dry-run --device cuda --device-memory-limit 85899345920 --offload-optimizer none $extra \
      >"$work/out" 2>"$work/err"
    rc=$?
    block=$(awk '$1 == "device" && $2 == "device_block" {print $5}' "$work/out")
    echo "== gpt2-124m --offload-optimizer none${extra:+ $extra}, gradient_accumulation_steps ${acc/p/1}: rc $rc, device_block $block"
    tail -n 1 "$work/out" "$work/err"
    if [ $acc != p ] && { [ $rc -ne 0 ] || ! grep -q 'the configuration fits' "$work/out"; }; then
      echo "FAIL: device Adam with $acc micro-batch(es): the dry run should fit (create accepts it)"
      failures=$((failures + 1))
    fi
    [ $acc = 1 ] && block1=$block
    if [ $acc = 2 ] && [ "$block" != $((block1 + 2 * 124475904)) ]; then
      echo "FAIL: device Adam with accumulation: device_block $block, expected $block1 + 2 bytes x 124475904 (fp32 sum)"
      failures=$((failures + 1))
    fi
    # The plan the dry run prints is the GPU run's (zo_engine_plan for ZO_DEVICE_CUDA; test_engine_devadam checks it
    # equals finalize's allocations on the stand-in): the device block by the arithmetic below, the norm partials'
    # pinned host copy (148 tensors x 256 doubles) as the engine's only host bytes, and no host staging ring even
    # with accumulation (device Adam sums on the device).
    if [ $acc != p ] && ! "$py" - "$cfgdir/gpt2-124m.json" "$work/out" ${acc} <<'EOF3'; then failures=$((failures + 1)); fi
import json, sys
m = json.load(open(sys.argv[1]))["model"]
L, C, T, V = m["n_layer"], m["d_model"], m["seq_len"], m["vocab"]
sizes = [V * C, T * C]
for _ in range(L):
    sizes += [C, C, 3 * C * C, 3 * C, C * C, C, C, C, 4 * C * C, 4 * C, 4 * C * C, C]
sizes += [C, C]
ru = lambda x: (x + 255) // 256 * 256
g = 4 if sys.argv[3] == "2" else 2                 # the gradient region: fp32 sum with accumulation, else bf16
norm = len(sizes) * 256 * 8                        # double[n_tensors x 256] norm partials (ZO_DEV_SQNORM_BLOCKS)
block = sum(ru(2 * n) + 3 * ru(4 * n) + ru(g * n) for n in sizes) + ru(norm)
plan, budget = {}, {}
for line in open(sys.argv[2]):
    f = line.split()
    if len(f) == 6 and f[0] in ("device", "host", "nvme") and f[2].isdigit():
        plan[f[1]] = (int(f[2]), int(f[3]), f[5])  # count, bytes each, pinned
    if len(f) > 5 and f[0] in ("device", "host", "pinned") and f[1].isdigit():
        budget[f[0]] = int(f[2])                   # engine_bytes
ok = True
def want(what, got, exp):
    global ok
    print(f"  {what}: {got}, expected {exp}" + ("" if got == exp else "  <-- MISMATCH"))
    ok &= got == exp
want("plan device_block", plan.get("device_block"), (1, block, "-"))
want("plan device_adam.norm_host", plan.get("device_adam.norm_host"), (1, norm, "yes"))
want("plan grad_staging (none on a GPU)", plan.get("grad_staging"), None)
want("budget engine bytes (device, host, pinned)", (budget.get("device"), budget.get("host"), budget.get("pinned")),
     (block, norm, norm))
sys.exit(0 if ok else 1)
EOF3
    if [ $acc = p ] && { [ $rc -ne 1 ] || ! grep -q 'zo-train: error: zero_optimization.offload_optimizer.device "none" on a cuda device (device Adam) needs offload_param.device "none"' "$work/err"; }; then
      echo "FAIL: device Adam with parameter offload: the dry run should refuse it as zo_engine_create does"
      failures=$((failures + 1))
    fi
  done
fi
[ $failures -eq 0 ] && echo "PASS" || echo "FAIL: $failures"
[ $failures -eq 0 ]
