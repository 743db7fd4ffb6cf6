#!/usr/bin/env bash
# A full /dev/shm (issue 31, "clear resource errors"): in a mount namespace of its own, /dev/shm is
# a 512 KiB tmpfs, too small for one rank's rings; a 3-rank job under gsyncrun must still run
# right (over TCP), and every rank must say that it could not reserve its shared memory, how
# much /dev/shm holds and how to raise it, and that its peers reach it over TCP instead. No rank
# may die of SIGBUS (a segment used without reserving its memory first).
#
#   mp_shm_full.sh GSYNCRUN GSYNC_MP_CHECK
#
# Exit 77 (skipped) when not root or no mount namespace can be made here.
set -u
gsyncrun=${1:?usage: mp_shm_full.sh GSYNCRUN GSYNC_MP_CHECK}
check=${2:?usage: mp_shm_full.sh GSYNCRUN GSYNC_MP_CHECK}
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root (a mount namespace with a small /dev/shm)"; exit 77; }
if ! unshare -m true 2>/dev/null; then echo "SKIP: unshare -m is not allowed here"; exit 77; fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
unset GSYNC_SHM_DISABLE GSYNC_SHM_BYTES
unshare -m bash -c 'mount -t tmpfs -o size=512k gsync-test-shm /dev/shm && exec "$0" -n 3 -- "$1"' "$gsyncrun" "$check" >"$out" 2>&1
rc=$?
cat "$out"
fail() { echo "FAIL: $*"; exit 1; }
[ "$rc" = 0 ] || fail "the job exited $rc (expected 0: TCP instead of shared memory)"
for r in 0 1 2; do
  grep -q "^\[$r\] rank $r/3: all results correct" "$out" || fail "rank $r did not report correct results"
  line=$(grep -m1 "^\[$r\] .*WARN: cannot reserve" "$out") || fail "rank $r did not say it could not reserve its shared memory"
  for want in "/dev/shm holds 512 KiB" "KiB free" "--shm-size" "GSYNC_SHM_BYTES" "over TCP"; do
    case $line in *"$want"*) ;; *) fail "rank $r's warning lacks '$want': $line" ;; esac
  done
done
echo PASS
