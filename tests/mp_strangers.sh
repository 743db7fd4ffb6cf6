#!/usr/bin/env bash
# Strangers cannot stall or break a job (issue 50): a local process without the key
# (tests/stranger.py) watches /proc/net/tcp and holds K silent connections to every listener the
# job opens (the store, each rank's data, heartbeat and recovery listeners), from the moment it
# appears, reconnecting whenever one is dropped. A 4-rank keyed job over TCP (every pair dials on
# first use, during the run) must still finish with every result right, within twice its time
# without the stranger (plus 2 s for the stranger's own CPU on a small machine), and its log must
# stay short (refusals rate-limited). Runs in a network namespace of its own, so that no other
# program's listener is touched.
#
#   mp_strangers.sh GSYNCRUN GSYNC_MP_CHECK STRANGER_PY
#
# Exit 77 (skipped) when not root or no network namespace can be made here.
set -u
gsyncrun=${1:?usage: mp_strangers.sh GSYNCRUN GSYNC_MP_CHECK STRANGER_PY}
check=${2:?usage: mp_strangers.sh GSYNCRUN GSYNC_MP_CHECK STRANGER_PY}
stranger=${3:?usage: mp_strangers.sh GSYNCRUN GSYNC_MP_CHECK STRANGER_PY}
if [ "${GSYNC_STRANGERS_INNER:-}" != 1 ]; then
  [ "$(id -u)" = 0 ] || { echo "SKIP: needs root (a network namespace of its own)"; exit 77; }
  if ! unshare -n true 2>/dev/null; then echo "SKIP: unshare -n is not allowed here"; exit 77; fi
  exec env GSYNC_STRANGERS_INNER=1 unshare -n bash "$0" "$@"
fi
ip link set lo up || exit 1
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gsync_strangers.XXXXXX")
trap 'rm -rf "$tmp"; kill $(jobs -p) 2>/dev/null' EXIT
unset GSYNC_TIMEOUT_S GSYNC_ALGO GSYNC_JOB_KEY GSYNC_RANK GSYNC_WORLD_SIZE GSYNC_MASTER_PORT GSYNC_HOST_ID GSYNC_DEBUG
now() { date +%s.%N; }
# Two jobs: over shared memory (its ranks connect at set-up, while the stranger fills the new
# listeners), and over TCP after a pause (every pair then dials on first use into listeners the
# stranger holds).
run_job() {  # run_job OUT shm|tcp: prints the job's seconds, returns its status
  local t0 t1 rc env=()
  [ "$2" = tcp ] && env=(-x GSYNC_SHM_DISABLE=1)
  t0=$(now)
  timeout 300 "$gsyncrun" -n 4 "${env[@]}" -x GSYNC_TIMEOUT_S=120 -- "$check" $([ "$2" = tcp ] && echo --delay-ms 1500) >"$1" 2>&1
  rc=$?
  t1=$(now)
  echo "$t0 $t1" | awk '{printf "%.2f\n", $2 - $1}'
  return $rc
}
failed=0
printf '%-4s %-10s %-8s %-8s %-6s %s\n' via stranger seconds limit warns verdict
for via in shm tcp; do
  base=$(run_job "$tmp/base" $via) || { echo "FAIL: the job failed without a stranger"; cat "$tmp/base"; exit 1; }
  printf '%-4s %-10s %-8s %-8s %-6s %s\n' $via none "$base" - "$(grep -c WARN "$tmp/base")" ok
  for k in 8 80; do
    python3 "$stranger" "$k" 400 "$tmp/stranger.$k" &
    sp=$!
    sleep 0.5
    secs=$(run_job "$tmp/out.$k" $via)
    rc=$?
    kill "$sp" 2>/dev/null
    wait "$sp" 2>/dev/null
    limit=$(echo "$base" | awk '{printf "%.2f\n", 2 * $1 + 2}')
    why=""
    [ $rc = 0 ] || why="job exit $rc"
    [ -z "$why" ] && [ "$(grep -c 'all results correct' "$tmp/out.$k")" != 4 ] && why="not every rank reported correct results"
    [ -z "$why" ] && awk -v s="$secs" -v l="$limit" 'BEGIN { exit !(s > l) }' && why="took ${secs} s, over ${limit} s"
    warns=$(grep -c WARN "$tmp/out.$k")
    [ -z "$why" ] && [ "$warns" -gt 200 ] && why="$warns warnings: refusals are not rate-limited"
    printf '%-4s %-10s %-8s %-8s %-6s %s (%s)\n' $via "$k/port" "$secs" "$limit" "$warns" "${why:-ok}" "$(cat "$tmp/stranger.$k" 2>/dev/null)"
    if [ -n "$why" ]; then
      failed=1
      tail -20 "$tmp/out.$k" | sed 's/^/    /'
    fi
  done
done
exit $failed
