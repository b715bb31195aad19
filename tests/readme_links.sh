#!/usr/bin/env bash
# readme_links.sh - every relative link of the documentation names something in the repository.
#
# Usage: readme_links.sh SRCDIR
# Checks README.md, docs/**/*.md and tests/README.md: each markdown link [text](target) outside fenced code
# blocks and inline code whose target is not http(s):// or mailto: must name a file or directory of the
# repository (relative to the linking file; leaving the repository counts as broken), and a #anchor must be
# the GitHub slug of a heading of that .md file (lower case, punctuation but '-' and '_' dropped, spaces
# to '-', "-N" for repeats). Nothing is fetched. Exit 0 when all resolve, 1 naming each broken link.
set -uo pipefail
[ $# -eq 1 ] || { echo "usage: $0 SRCDIR" >&2; exit 2; }
src=$(cd "$1" && pwd -P)

# links FILE: prints "LINE<TAB>TARGET" for each link outside code
links() {
  awk '/^ *```/ { fence = !fence; next }
       fence { next }
       { s = $0; gsub(/`[^`]*`/, "", s)
         while (match(s, /\]\([^) ]+\)/)) { print NR "\t" substr(s, RSTART + 2, RLENGTH - 3); s = substr(s, RSTART + RLENGTH) } }' "$1"
}
# anchors FILE: the heading slugs of FILE, one a line
anchors() {
  awk '/^ *```/ { fence = !fence; next }
       fence || !/^#+ / { next }
       { h = tolower($0); sub(/^#+ +/, "", h); sub(/ +#* *$/, "", h)
         gsub(/[^a-z0-9 _-]/, "", h); gsub(/ /, "-", h)
         if (h in seen) { seen[h]++; print h "-" seen[h] } else { seen[h] = 0; print h } }' "$1"
}

# normpath PATH: PATH (absolute) with "." and ".." resolved lexically, into $REPLY (no fork per link)
normpath() {
  local IFS=/ part out=()
  for part in $1; do
    case "$part" in ''|.) ;; ..) [ ${#out[@]} -gt 0 ] && unset 'out[${#out[@]}-1]' ;; *) out+=("$part") ;; esac
  done
  REPLY="/${out[*]}"
}
declare -A slugs # dest file -> its anchors, newline separated

files=("$src/README.md" "$src/tests/README.md")
while IFS= read -r f; do files+=("$f"); done < <(find "$src/docs" -name '*.md' | sort)
fail=0 n=0
for f in "${files[@]}"; do
  [ -r "$f" ] || { echo "readme_links: ${f#$src/} is missing"; fail=1; continue; }
  dir=$(dirname "$f")
  while IFS=$'\t' read -r line target; do
    case "$target" in http://*|https://*|mailto:*) continue ;; esac
    n=$((n + 1))
    path=${target%%#*} anchor=
    case "$target" in *'#'*) anchor=${target#*#} ;; esac
    if [ -z "$path" ]; then dest=$f; else normpath "$dir/$path"; dest=$REPLY; fi
    where="${f#$src/}:$line: ($target)"
    case "$dest/" in "$src"/*) ;; *) echo "readme_links: $where leaves the repository"; fail=1; continue ;; esac
    if [ ! -e "$dest" ]; then echo "readme_links: $where: no such file ${dest#$src/}"; fail=1; continue; fi
    if [ -n "$anchor" ]; then
      case "$dest" in *.md) ;; *) echo "readme_links: $where: an anchor into a file that is not markdown"; fail=1; continue ;; esac
      [ -n "${slugs[$dest]+set}" ] || slugs[$dest]=$'\n'$(anchors "$dest")$'\n'
      [[ "${slugs[$dest]}" == *$'\n'"$anchor"$'\n'* ]] ||
        { echo "readme_links: $where: no heading '#$anchor' in ${dest#$src/}"; fail=1; }
    fi
  done < <(links "$f")
done
[ $fail -eq 0 ] && echo "readme_links: $n relative links in ${#files[@]} files, all resolve"
exit $fail
