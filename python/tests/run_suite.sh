#!/usr/bin/env bash
# Runs PyTorch's distributed test suite (torch_suite.py) against one backend at one world size and
# prints its counts: "BACKEND WORLD: ran R, passed P, failed F, errors E, skipped S".
#   run_suite.sh PYTHON BACKEND WORLD [unittest options, e.g. -k all_reduce]
# Exit: the suite's (0 when nothing failed).
set -u
py=$1 backend=$2 world=$3
shift 3
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Without CI: under CI=true PyTorch's harness writes XML reports through xmlrunner, which Debian lacks.
env -u CI BACKEND=$backend WORLD_SIZE=$world TEMP_DIR=$tmp OMP_NUM_THREADS=1 \
  "$py" "$here/torch_suite.py" -v "$@" >"$tmp/out.log" 2>&1
rc=$?
grep -E "^(FAIL|ERROR):" "$tmp/out.log" | sort | uniq
ran=$(grep -oE "^Ran [0-9]+ tests" "$tmp/out.log" | grep -oE "[0-9]+" || echo 0)
fail=$(grep -oE "failures=[0-9]+" "$tmp/out.log" | grep -oE "[0-9]+" || echo 0)
err=$(grep -oE "errors=[0-9]+" "$tmp/out.log" | grep -oE "[0-9]+" || echo 0)
skip=$(grep -oE "skipped=[0-9]+" "$tmp/out.log" | grep -oE "[0-9]+" || echo 0)
echo "$backend $world: ran $ran, passed $((ran - fail - err - skip)), failed $fail, errors $err, skipped $skip"
[ -n "${GSYNC_SUITE_LOG:-}" ] && cp "$tmp/out.log" "$GSYNC_SUITE_LOG"
# A suite that ran nothing (an import failed before unittest started) is a failure, whatever it returned.
[ "$ran" -gt 0 ] || { tail -20 "$tmp/out.log"; exit 1; }
exit $rc
