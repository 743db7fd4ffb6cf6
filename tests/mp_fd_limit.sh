#!/usr/bin/env bash
# Descriptor limits at set-up (bootstrap/fd_limit.hpp), 24 ranks over TCP (shared memory off):
# 1. a soft limit of 40 under a higher hard limit: set-up raises it and the job runs;
# 2. a hard limit of 22 on every rank: the job fails at once, and the ranks (rank 0 and those
#    waiting for it through the store) say which limit ran out and how to raise it.
set -u
prog=$1 gsyncrun=$2
export GSYNC_SHM_DISABLE=1
out=$(mktemp)
trap 'rm -f "$out"' EXIT
if [ "$(ulimit -Hn)" = unlimited ] || [ "$(ulimit -Hn)" -ge 400 ]; then
  GSYNC_DEBUG=INFO "$gsyncrun" -n 24 -- sh -c 'ulimit -Sn 40; exec "$0"' "$prog" >"$out" 2>&1
  rc=$?
  grep -c "all results correct" "$out" | grep -qx 24 || { cat "$out"; echo "FAIL: the job with a low soft limit did not run (rc $rc)"; exit 1; }
  grep -q "file descriptor limit (ulimit -n) 40 raised to" "$out" || { echo "FAIL: no log line for the raised limit"; exit 1; }
  echo "soft limit 40: raised, 24 ranks correct"
else
  echo "hard limit $(ulimit -Hn) < 400: the raise is not checked"
fi
"$gsyncrun" -n 24 -- sh -c 'ulimit -n 22; exec "$0"' "$prog" >"$out" 2>&1
rc=$?
head -c 3000 "$out"
[ "$rc" -ne 0 ] || { echo "FAIL: the job ran with 22 descriptors per rank"; exit 1; }
grep -q "out of file descriptors (this process may open 22, hard limit 22)" "$out" || { echo "FAIL: no rank named the limit"; exit 1; }
grep -q "raise the limit (ulimit -n" "$out" || { echo "FAIL: no advice on raising it"; exit 1; }
echo "hard limit 22: failed with the limit named (rc $rc)"
