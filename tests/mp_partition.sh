#!/usr/bin/env bash
# A network partition never gives two jobs (issue 50): four fake hosts of one rank each
# (benchmarks/netcluster.sh: network namespaces joined by a bridge), tests/mp_faults.cpp --mode
# resume (allreduces checked every step, a shrink on failure). Once every rank runs, host 0's link
# goes down: rank 0 alone on one side, ranks 1-3 on the other. The larger side must shrink to the
# three of them and finish with every result right; rank 0, on the smaller side, must fail with
# errc::excluded (exit 75) instead of going on alone.
#
#   mp_partition.sh NETCLUSTER_SH MP_FAULTS [REPEATS]
#
# Exit 77 (skipped) when not root or netcluster.sh cannot build its namespaces here.
set -u
nc=${1:?usage: mp_partition.sh NETCLUSTER_SH MP_FAULTS [REPEATS]}
prog=${2:?usage: mp_partition.sh NETCLUSTER_SH MP_FAULTS [REPEATS]}
repeats=${3:-1}
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root (network namespaces)"; exit 77; }
work=$(mktemp -d "${TMPDIR:-/tmp}/gsync_partition.XXXXXX")
export NETCLUSTER_STATE=$work/cluster
cleanup() {
  [ -f "$NETCLUSTER_STATE" ] && bash "$nc" down >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT
id=$(bash "$nc" up 4 1000 2>"$work/up.err")
rc=$?
[ $rc = 77 ] && { cat "$work/up.err"; exit 77; }
[ $rc = 0 ] || { cat "$work/up.err"; echo "FAIL: netcluster.sh up"; exit 1; }
source "$(dirname "${BASH_SOURCE[0]}")/support/wait_for.sh"
failed=0
printf '%-5s %-10s %s\n' trial shrunk_s verdict
for ((k = 1; k <= repeats; ++k)); do
  out=$work/out.$k  # a file per run: the job truncates its own when it starts, maybe after the waits below began
  GSYNC_LIVENESS_S=2 bash "$nc" run "$id" --timeout-s 90 --grace-s 40 -- "$prog" --mode resume --victim 0 --post-s 3 \
    --watchdog-s 80 >"$out" 2>&1 &
  job=$!
  why=""
  t0=""
  if wait_for "$out" 'READY resume' 4 30; then
    sleep 1
    bash "$nc" exec "$id" 0 -- ip link set "gsnc${id}h0" down
    t0=$SECONDS
    wait_for "$out" 'SHRUNK rank' 3 60 || why="the larger side did not shrink"
  else
    why="the ranks did not start"
  fi
  shrunk=$((SECONDS - ${t0:-$SECONDS}))
  wait "$job"
  bash "$nc" exec "$id" 0 -- ip link set "gsnc${id}h0" up
  [ -z "$why" ] && ! grep -q '^\[0\] EXCLUDED rank 0:' "$out" && why="rank 0 was not excluded"
  [ -z "$why" ] && grep -q '^\[0\] \(SHRUNK\|DONE\)' "$out" && why="rank 0 went on alone"
  [ -z "$why" ] && [ "$(grep -c 'DONE rank [123]: world [012] of 3,' "$out")" != 3 ] && why="ranks 1-3 did not all finish as 3"
  printf '%-5s %-10s %s\n' "$k" "$shrunk" "${why:-ok}"
  if [ -n "$why" ]; then
    failed=1
    tail -30 "$out" | sed 's/^/    /'
  fi
done
exit $failed
