#!/usr/bin/env bash
# zo_train_ckpt_validate.sh ZO_TRAIN CONFIG CORPUS - a checkpoint is read as untrusted input and --keep-last
# removes only what it wrote. Three-step runs of the tiny model; each edited checkpoint must be refused on
# --resume with a non-zero exit, naming the file and the field:
#   - manifest step 2^63-1, app_state.step 2^62, app_state.step 2 beside an engine step 3, an fp16 loss
#     scale of 0, -1 or 1e38, a tensor's numel changed (the message prints the registered count), rank_files
#     naming other paths (../../../../etc/passwd, /dev/zero), 100k entries or none, a shape of [2^62, 2^62, 4] or
#     of 9 dimensions;
#   - a bf16 checkpoint under an fp16 config and the reverse (the message names both precisions);
#   - a FIFO in place of the shard file, the manifest or `latest` (refused at once, never a hang);
#   - `latest` of random bytes: the message shows them escaped (\xNN), never a raw control byte; so does
#     a config whose value holds an ESC, or whose bytes are not JSON;
# and --keep-last 1 leaves alone a step directory holding a file of someone else's, a "step-N-notes"
# directory, a .tmp-step-* directory that is not a killed save's, and a step directory newer than the run's,
# while it removes (and names) its own older checkpoints. Exit 0 pass, 1 fail.
set -u
zo=$1 cfg=$2 corpus=$3
work=$(mktemp -d "${TMPDIR:-/tmp}/zo-ckptval.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
train() { timeout 60 "$zo" --config "$1" --data "$corpus" --threads 2 --no-sample --nvme-path "$work" "${@:2}"; }
# edit FILE PYTHON: FILE's JSON as m, changed by the Python statement, written back
edit() { python3 -c "import json,sys; f=sys.argv[1]; m=json.load(open(f)); $2; json.dump(m, open(f,'w'))" "$1"; }
# refused NAME CKPT CONFIG PATTERN...: --resume CKPT exits non-zero within the timeout, its stderr matching each
refused() {
  local name=$1 ck=$2 c=$3
  shift 3
  local steps=6
  [ "$name" = past-steps ] && steps=2
  train "$c" --steps $steps --resume "$ck" >"$work/$name.out" 2>&1
  local rc=$?
  [ $rc -ne 0 ] || { cat "$work/$name.out"; fail "$name: resumed (exit 0)"; }
  [ $rc -ne 124 ] || fail "$name: hung (killed after 60 s)"
  for pat in "$@"; do
    grep -qF -- "$pat" "$work/$name.out" || { cat "$work/$name.out"; fail "$name: no '$pat' in the message"; }
  done
  echo "ok $name: $(grep -m1 error "$work/$name.out")"
}
python3 - "$cfg" "$work/fp16.json" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))
c["bf16"] = {"enabled": False}
c["fp16"] = {"enabled": True, "initial_scale_power": 8}
json.dump(c, open(sys.argv[2], "w"))
EOF
train "$cfg" --steps 3 --save "$work/bf" >"$work/bf.out" 2>&1 || { cat "$work/bf.out"; fail "the bf16 run"; }
train "$work/fp16.json" --steps 3 --save "$work/fp" >"$work/fp.out" 2>&1 || { cat "$work/fp.out"; fail "the fp16 run"; }
fresh() { rm -rf "$work/$2" && cp -r "$work/$1" "$work/$2" && echo "$work/$2/step-000000000003"; }
m=manifest.json

d=$(fresh bf c1); edit "$d/$m" 'm["step"] = 2**63 - 1'
refused step-max "$d" "$cfg" "$d/$m" "step: 9223372036854775807, expected 0..281474976710656"
d=$(fresh bf c2); edit "$d/$m" 'm["app_state"]["step"] = 2**62'
refused app-step-huge "$d" "$cfg" "$d" "app_state.step"
d=$(fresh bf c3); edit "$d/$m" 'm["app_state"]["step"] = 2'
refused app-step-behind "$d" "$cfg" "$d" "app_state.step - skipped" "engine step 3"
for v in 0 -1 1e38; do
  d=$(fresh fp c-ls$v); edit "$d/$m" "m['loss_scaler']['loss_scale'] = $v"
  refused "loss-scale-$v" "$d" "$work/fp16.json" "$d/$m" "loss_scaler.loss_scale"
done
refused past-steps "$work/bf" "$cfg" "step 3, past --steps 2"
# rank_files names this rank's file and nothing else; a tensor's shape multiplies to its numel (issue 41: were accepted)
i=0
for rf in '["../../../../etc/passwd"]' '["/dev/zero"]' '["rank%05d.bin" % k for k in range(100000)]' '[]' '[7]'; do
  i=$((i + 1)); d=$(fresh bf c-rf$i); edit "$d/$m" "m['rank_files'] = $rf"
  refused "rank-files-$i" "$d" "$cfg" "$d/$m" 'rank_files: expected ["rank00000.bin"]'
done
d=$(fresh bf c-shape); edit "$d/$m" 'm["tensors"][0]["shape"] = [2**62, 2**62, 4]'
refused shape-huge "$d" "$cfg" "$d/$m" "shape: expected 1 to 8 dimensions >= 0 whose product is numel"
d=$(fresh bf c-shape9); edit "$d/$m" 'm["tensors"][0]["shape"] = [1] * 9'
refused shape-9-dims "$d" "$cfg" "$d/$m" "shape: expected 1 to 8 dimensions"
# the caller's files (zo_save_opts.files): the list's form, and each listed file whole (size and CRC32C)
d=$(fresh bf c-files1); edit "$d/$m" 'm["files"] = [{"name": "../../etc/passwd", "nbytes": 1, "crc32c": "00000000"}]'
refused files-dotdot "$d" "$cfg" "$d/$m" "files[0].name: '../../etc/passwd', expected 1..64 bytes"
d=$(fresh bf c-files2); printf 'abc' > "$d/extra.bin"
edit "$d/$m" 'm["files"] = [{"name": "extra.bin", "nbytes": 3, "crc32c": "00000000"}]'
refused files-crc "$d" "$cfg" "$d/extra.bin" "CRC32C"
# a switch to or from fp16 names both precisions before any loss scaler field (was: "loss_scaler.hysteresis: 0")
refused bf16-to-fp16 "$work/bf" "$work/fp16.json" \
  "checkpoint '$work/bf/step-000000000003' was written with bf16, the config asks for fp16 (fp16.enabled)"
grep -q hysteresis "$work/bf16-to-fp16.out" && fail "bf16-to-fp16: the message is about the loss scaler's fields"
refused fp16-to-bf16 "$work/fp" "$cfg" \
  "checkpoint '$work/fp/step-000000000003' was written with fp16, the config asks for bf16 (bf16.enabled)"
d=$(fresh bf c4); edit "$d/$m" 'm["tensors"][0]["numel"] += 1'
refused numel "$d" "$cfg" "$d/$m" "registered with " " elements"
grep -q "registered with  elements" "$work/numel.out" && fail "numel: an empty number in the message"
grep -qE "registered with [0-9]+ elements" "$work/numel.out" || fail "numel: no registered count"

# FIFOs: refused at once, naming the file
d=$(fresh bf c5); rm "$d/rank00000.bin" && mkfifo "$d/rank00000.bin"
refused fifo-shard "$d" "$cfg" "$d/rank00000.bin" "not a regular file"
d=$(fresh bf c6); rm "$d/$m" && mkfifo "$d/$m"
refused fifo-manifest "$d" "$cfg" "$d/$m" "not a regular file"
fresh bf c7 >/dev/null; rm "$work/c7/latest" && mkfifo "$work/c7/latest"
refused fifo-latest "$work/c7" "$cfg" "$work/c7/latest" "not a regular file"

# `latest` of random bytes (an ESC among them): quoted escaped
fresh bf c8 >/dev/null
printf 'step-\033[31mRED\001\377\n' >"$work/c8/latest"
refused latest-bytes "$work/c8" "$cfg" "$work/c8/latest" 'step-\x1b[31mRED\x01\xff\x0a'
LC_ALL=C grep -q $'\033' "$work/latest-bytes.out" && fail "latest-bytes: a raw ESC byte reached the output"
head -c 300 /dev/urandom >"$work/c8/latest"
train "$cfg" --steps 6 --resume "$work/c8" >"$work/latest-random.out" 2>&1 && fail "latest-random: resumed"
LC_ALL=C grep -q '[[:cntrl:]]' <(tr -d '\n' <"$work/latest-random.out") && fail "latest-random: a control byte reached the output"
echo "ok latest-random: $(grep -m1 -o 'does not name.\{0,60\}' "$work/latest-random.out")"

# a config value with an ESC in it, and raw control bytes in a malformed config: quoted escaped
python3 -c "
import json, sys
c = json.load(open(sys.argv[1])); c['optimizer']['type'] = '\x1b[2Jx'; json.dump(c, open(sys.argv[2], 'w'))" "$cfg" "$work/esc.json"
train "$work/esc.json" --steps 1 >"$work/config-esc.out" 2>&1 && fail "config-esc: accepted"
grep -qF 'got "\x1b[2Jx"' "$work/config-esc.out" || { cat "$work/config-esc.out"; fail "config-esc: value not quoted escaped"; }
printf '{"train_batch_size": \033[2J\001}' >"$work/raw.json"
train "$work/raw.json" --steps 1 >"$work/config-raw.out" 2>&1 && fail "config-raw: accepted"
for f in config-esc config-raw; do
  LC_ALL=C grep -q $'\033' "$work/$f.out" && { cat -v "$work/$f.out"; fail "$f: a raw ESC byte reached the output"; }
  echo "ok $f: $(grep -m1 -o 'optimizer.type.*\|malformed JSON.*' "$work/$f.out")"
done

# --keep-last 1 removes only its own older checkpoints
k=$work/keep
mkdir -p "$k/step-000000000000" "$k/step-000000000001-notes" "$k/.tmp-step-000000000002.77" "$k/step-000000000099"
echo "my thesis" >"$k/step-000000000000/thesis.txt"
echo "notes" >"$k/step-000000000001-notes/notes.txt"
echo "draft" >"$k/.tmp-step-000000000002.77/draft.txt"
cp "$work/bf/step-000000000003/"* "$k/step-000000000099/" # a complete checkpoint, newer than this run's
train "$cfg" --steps 4 --save "$k" --save-every 1 --keep-last 1 >"$work/keep.out" 2>&1 || { cat "$work/keep.out"; fail "keep-last run"; }
for f in step-000000000000/thesis.txt step-000000000001-notes/notes.txt .tmp-step-000000000002.77/draft.txt \
         step-000000000099/manifest.json step-000000000004/manifest.json; do
  [ -e "$k/$f" ] || { cat "$work/keep.out"; ls -la "$k"; fail "keep-last: $f is gone"; }
done
for s in 1 2 3; do
  [ ! -e "$k/step-00000000000$s" ] || { cat "$work/keep.out"; fail "keep-last: step $s was kept"; }
  grep -qF "removed '$k/step-00000000000$s'" "$work/keep.out" || { cat "$work/keep.out"; fail "keep-last: removal of step $s not named"; }
done
grep -qF "left '$k/step-000000000000' alone: it holds 'thesis.txt'" "$work/keep.out" || { cat "$work/keep.out"; fail "keep-last: thesis not named"; }
grep -qF "left '$k/.tmp-step-000000000002.77' alone" "$work/keep.out" || { cat "$work/keep.out"; fail "keep-last: .tmp not named"; }
echo "ok keep-last: $(grep -c removed "$work/keep.out") removals named; $(ls -A "$k" | tr '\n' ' ')"
echo PASS
