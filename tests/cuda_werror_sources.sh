#!/usr/bin/env bash
# cuda_werror_sources.sh SOURCE_DIR BUILD_DIR - the CI check for CUDA sources on a machine without a GPU: when the
# build found nvcc, every .cu file of the tree (outside build directories) is compiled into this build (an entry of
# BUILD_DIR/compile_commands.json and its object file) for sm_80 and sm_90, with nvcc's and the host compiler's
# warnings as errors (-Werror=all-warnings -Xcompiler=-Werror, models/CMakeLists.txt ZO_CUDA_WERROR). A .cu file
# left out of the build, or built without -Werror or without one of the two architectures, fails. Not a compile of
# its own: the build did that. Exit 0 pass, 1 fail, 77 when this build has no CUDA compiler.
set -u
src=$1 bd=$2
nvcc=$(sed -n 's/^CMAKE_CUDA_COMPILER:[A-Z]*=//p' "$bd/CMakeCache.txt" 2>/dev/null)
if [ -z "$nvcc" ] || [ "$nvcc" = CMAKE_CUDA_COMPILER-NOTFOUND ] || [ ! -x "$nvcc" ]; then
  echo "skip: this build found no nvcc (CMAKE_CUDA_COMPILER in $bd/CMakeCache.txt)"
  exit 77
fi
[ -f "$bd/compile_commands.json" ] || { echo "FAIL: no $bd/compile_commands.json (CMAKE_EXPORT_COMPILE_COMMANDS)"; exit 1; }
python3 - "$src" "$bd/compile_commands.json" <<'EOF'
import json, os, re, sys
src, db = os.path.realpath(sys.argv[1]), sys.argv[2]
cus = []
for root, dirs, files in os.walk(src):
    dirs[:] = [d for d in dirs if not (d.startswith("build") or d.startswith(".") or d in ("out", "gpu-results", "shared"))]
    cus += [os.path.join(root, f) for f in files if f.endswith(".cu")]
entries = {}
for e in json.load(open(db)):
    f = os.path.realpath(os.path.join(e["directory"], e["file"]))
    entries.setdefault(f, []).append(e)
want = {"sm_80": r"\bsm_80\b", "sm_90": r"\bsm_90\b", "-Werror=all-warnings": r"(^|\s)-Werror=all-warnings(\s|$)",
        "-Xcompiler=-Werror": r"-Xcompiler[= ](\S*,)?-Werror(,|\s|$)"}
bad = 0
for cu in sorted(cus):
    rel = os.path.relpath(cu, src)
    es = entries.get(os.path.realpath(cu))
    if not es:
        print(f"FAIL {rel}: not compiled into this build (no entry in compile_commands.json): add it to a target")
        bad += 1
        continue
    for e in es:
        cmd = e.get("command") or " ".join(e.get("arguments", []))
        missing = [k for k, rx in want.items() if not re.search(rx, cmd)]
        m = re.search(r"\s-o\s+(\S+)", cmd)
        obj = os.path.join(e["directory"], m.group(1)) if m else None
        if missing:
            print(f"FAIL {rel}: compiled without {', '.join(missing)}: {cmd}")
            bad += 1
        elif not obj or not os.path.exists(obj):
            print(f"FAIL {rel}: its object {obj} is not built")
            bad += 1
        else:
            print(f"ok   {rel}: sm_80, sm_90, -Werror=all-warnings -Xcompiler=-Werror ({os.path.relpath(obj, os.path.dirname(db))})")
print(f"{len(cus)} .cu files, {bad} failed")
sys.exit(1 if bad or not cus else 0)
EOF
