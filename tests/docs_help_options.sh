#!/usr/bin/env bash
# docs_help_options.sh - each tool's man page (docs/man/TOOL.1.md) documents exactly the options its --help
# prints. Not a test of the tools' behaviour: of the documentation's agreement with them.
#
# Usage: docs_help_options.sh SRCDIR NAME=COMMAND...   e.g. zo-train=build/tools/zo-train
# For each NAME: runs `COMMAND --help` (a .sh COMMAND through bash); the options of --help are the long
# options that start an indented help line (`  --steps N`, `  -h, --help`, `  --bf16 | --fp32`) and those
# in a usage line's brackets (`[--steps N]`); the options of the page are those named by an entry line of
# its OPTIONS section (a line "- `--steps N`" or "- `--bf16`, `--fp32`"). Every option of --help must have
# an entry, every entry must be an option of --help, and the page must have the man page's sections.
# Exit 0 when all agree, 1 naming each disagreement.
set -uo pipefail
[ $# -ge 2 ] || { echo "usage: $0 SRCDIR NAME=COMMAND..." >&2; exit 2; }
src=$1; shift
fail=0
for pair in "$@"; do
  name=${pair%%=*} cmd=${pair#*=}
  page="$src/docs/man/$name.1.md"
  if [ ! -r "$page" ]; then echo "docs_help_options: $name: no man page $page"; fail=1; continue; fi
  # The environment only spares zo-train its start-up re-exec and thread pools; --help's text does not use it.
  case "$cmd" in
    *.sh) help=$(bash "$cmd" --help 2>&1) ;;
    *) help=$(GOMP_SPINCOUNT=10000 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "$cmd" --help 2>&1) ;;
  esac
  rc=$?
  if [ $rc -ne 0 ] || [ -z "$help" ]; then echo "docs_help_options: $name: '$cmd --help' exited $rc"; fail=1; continue; fi
  # One awk per tool: file 1 is the --help text, file 2 the page.
  printf '%s\n' "$help" | awk -v name="$name" -v page="docs/man/$name.1.md" '
    function opts_of(str, set,    o) {   # every --option token of str into set
      while (match(str, /--[a-z][a-z0-9_-]*/)) { set[substr(str, RSTART, RLENGTH)] = 1; str = substr(str, RSTART + RLENGTH) }
    }
    FNR == NR {
      line = $0
      if (line ~ /^ +(-[A-Za-z], +)?--[a-z]/) {            # an option line: its leading option(s)
        sub(/^ +(-[A-Za-z], +)?/, "", line)
        match(line, /^--[a-z][a-z0-9_-]*( \| --[a-z][a-z0-9_-]*)*/)
        opts_of(substr(line, 1, RLENGTH), help)
      }
      line = $0
      while (match(line, /\[--[a-z][a-z0-9_-]*/)) {       # a usage line: [--option ...]
        help[substr(line, RSTART + 1, RLENGTH - 1)] = 1; line = substr(line, RSTART + RLENGTH)
      }
      next
    }
    /^## / { sec[substr($0, 4)] = 1; on = ($0 == "## OPTIONS"); next }
    on && /^- `/ {                                          # an entry: its code spans name the option(s)
      line = $0
      while (match(line, /`-[^`]*`/)) {
        w = substr(line, RSTART + 1, RLENGTH - 2); sub(/ .*/, "", w)
        if (w ~ /^--[a-z][a-z0-9_-]*$/) doc[w] = 1
        line = substr(line, RSTART + RLENGTH)
      }
    }
    END {
      bad = 0; n = 0
      split("NAME|SYNOPSIS|DESCRIPTION|OPTIONS|EXIT STATUS|EXAMPLES|SEE ALSO", need, "|")
      for (k in need) if (!(need[k] in sec)) { print "docs_help_options: " name ": " page " has no \"## " need[k] "\" section"; bad = 1 }
      for (o in help) { n++; if (!(o in doc)) { print "docs_help_options: " name ": " o " is in --help but has no entry in the OPTIONS section of " page; bad = 1 } }
      for (o in doc) if (!(o in help)) { print "docs_help_options: " name ": " page "\047s OPTIONS has " o ", which --help does not list"; bad = 1 }
      if (n == 0) { print "docs_help_options: " name ": no options found in --help"; bad = 1 }
      if (!bad) print "docs_help_options: " name ": " n " options, page and --help agree"
      exit bad
    }' - "$page" || fail=1
done
exit $fail
