#!/usr/bin/env bash
# zo_train_spincount.sh - zo-train runs with libgomp's spin limited to GOMP_SPINCOUNT=10000 (tools/zo-train/omp_env.c)
# unless the user set OMP_WAIT_POLICY or GOMP_SPINCOUNT, which win. Read from libgomp's own OMP_DISPLAY_ENV report
# (the last one: the re-executed process's). Usage: zo_train_spincount.sh <zo-train>
set -uo pipefail
zo="$1"
spin() { env "$@" OMP_DISPLAY_ENV=verbose "$zo" --help 2>&1 >/dev/null | sed -n "s/^ *GOMP_SPINCOUNT = '\([0-9]*\)'.*/\1/p" | tail -1; }
fail=0
check() { # what got want
  if [ "$2" = "$3" ]; then echo "ok: $1: GOMP_SPINCOUNT $2"; else echo "FAIL: $1: GOMP_SPINCOUNT '$2', expected '$3'"; fail=1; fi
}
check "default" "$(spin -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT)" 10000
check "GOMP_SPINCOUNT=777 set" "$(spin -u OMP_WAIT_POLICY GOMP_SPINCOUNT=777)" 777
check "OMP_WAIT_POLICY=passive set" "$(spin -u GOMP_SPINCOUNT OMP_WAIT_POLICY=passive)" 0
exit $fail
