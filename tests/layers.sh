#!/usr/bin/env bash
# layers.sh SOURCE_DIR - the include graph points down. Every quoted #include in
# the library's folders and tools/ is resolved to the header it names, and that
# header's layer must be below the including file's layer (or the same module):
#
#   5 tools/                                  (the programs)
#   4 models/                                 (the GPT zo-train trains, and its wiring to the engine: a user of it)
#   3 offload/ + engine.h budget.h checkpoint.h plan.h placement.h speeds.h handover.h zoffload.h   (the engine)
#   2 host/ config/ swap/ cpu_adam/ comm/ + pinned.h config.h swap.h adam.h comm.h   (comm/ runs on gpu/'s devices)
#   1 gpu/ + device.h arena.h                  (host/ uses gpu/'s cuda_host.h hook)
#   0 base/ + status.h dtype.h parse.h
#
# Peers of one layer (swap and cpu_adam, say) do not include each other, and the
# tools and models/ use the library through its public headers only (as a user
# would; the tools include models/ headers too).
# offload/ holds the engine alone: every file in it has a name of the engine's
# (engine*, budget, plan, placement, speeds, handover) or lies in its checkpoint/ room. Public headers follow the
# same rule among themselves. Exit 0 pass, 1 fail (every violation listed).
set -u
cd "${1:-.}" || exit 1

declare -A layer module
# Public headers: the module and layer each belongs to.
for h in status dtype parse; do module[include/zoffload/$h.h]=base; done
for h in device arena; do module[include/zoffload/$h.h]=gpu; done
module[include/zoffload/comm.h]=comm
module[include/zoffload/pinned.h]=host
module[include/zoffload/config.h]=config
module[include/zoffload/swap.h]=swap
module[include/zoffload/adam.h]=cpu_adam
for h in engine budget checkpoint plan placement speeds handover zoffload; do module[include/zoffload/$h.h]=offload; done
layer[base]=0 layer[gpu]=1 layer[host]=2 layer[config]=2 layer[swap]=2 layer[cpu_adam]=2 layer[comm]=2
layer[offload]=3 layer[models]=4 layer[tools]=5

fail=0
bad() { echo "FAIL: $*"; fail=1; }

# The module of a repository path: its top folder (public headers by the table above).
module_of() {
  case $1 in
    include/zoffload/*) echo "${module[$1]:-?}" ;;
    *) echo "${1%%/*}" ;;
  esac
}

# Resolve a quoted include as the compiler would: next to the file, then in
# include/ and in the folders the build puts on the include path.
resolve() { # file include
  local dir=${1%/*} inc=$2 d
  for d in "$dir" include base gpu comm host config swap cpu_adam offload models tools/common tools/zo-train; do
    [ -f "$d/$inc" ] && { echo "$d/$inc"; return; }
  done
  echo ""
}

n_files=0 n_edges=0
files=$(git ls-files 2>/dev/null -- base gpu comm host config swap cpu_adam offload models tools include \
        | grep -E '\.(c|h|cu|cc)$') || files=""
[ -n "$files" ] || files=$(find base gpu comm host config swap cpu_adam offload models tools include -name '*.[ch]' -o -name '*.cu')
for f in $files; do
  n_files=$((n_files + 1))
  from=$(module_of "$f")
  [ "$from" = "?" ] && { bad "$f: a public header with no module in layers.sh's table"; continue; }
  lf=${layer[$from]:-}
  [ -n "$lf" ] || { bad "$f: folder '$from' has no layer in layers.sh"; continue; }
  while IFS= read -r inc; do
    n_edges=$((n_edges + 1))
    target=$(resolve "$f" "$inc")
    [ -n "$target" ] || { bad "$f includes \"$inc\", which is no file of the repository"; continue; }
    to=$(module_of "$target")
    [ "$to" = "$from" ] && continue
    lt=${layer[$to]:-}
    [ -n "$lt" ] || { bad "$f includes $target, in no layer"; continue; }
    if [ "$from" = tools ] && [ "${target#include/}" = "$target" ] && [ "$to" != models ]; then
      bad "$f includes $target: the tools use the library through its public headers (include/zoffload) only"
    elif [ "$from" = models ] && [ "${target#include/}" = "$target" ]; then
      bad "$f includes $target: models/ uses the library through its public headers (include/zoffload) only"
    elif [ "$lt" -ge "$lf" ]; then
      bad "$f (layer $lf, $from) includes $target (layer $lt, $to): includes must point down"
    fi
  done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f")
done

# offload/ holds the engine alone.
for f in $(ls offload); do
  case $f in
    CMakeLists.txt | engine*.[ch] | budget.c | plan.c | plan_internal.h | placement.c | speeds.c | handover.c | checkpoint) ;;
    *) bad "offload/$f is not one of the engine's files (engine*, budget, plan, placement, speeds, handover, checkpoint/)" ;;
  esac
done
# offload/checkpoint/ holds the checkpoints alone: save, load, the run lock, the safetensors export.
for f in $(ls offload/checkpoint); do
  case $f in
    save.c | load.c | lock.c | safetensors.c | checkpoint_internal.h) ;;
    *) bad "offload/checkpoint/$f is not one of the checkpoint files (save, load, lock, safetensors, checkpoint_internal.h)" ;;
  esac
done

[ "$n_edges" -gt 100 ] || bad "only $n_edges includes read in $n_files files: the scan is broken"
[ $fail = 0 ] && echo "ok: $n_edges quoted includes in $n_files files all point down"
exit $fail
