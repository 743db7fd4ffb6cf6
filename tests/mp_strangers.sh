#!/usr/bin/env bash
# Strangers cannot stall or break a job (issue 50): a local process without the key
# (tests/stranger.py) watches /proc/net/tcp and holds K silent connections to every listener the
# job opens (the store, each rank's data, heartbeat and recovery listeners), from the moment it
# appears, reconnecting whenever one is dropped. A 4-rank keyed job, over shared memory (its ranks
# connect at set-up) and over TCP (every pair dials on first use, during the run), must still
# finish with every result right, within twice its time without the stranger (plus 4 s: the
# stranger takes most of a core, and CI machines have two), and its log must stay short
# (refusals rate-limited). Runs in a network namespace of its own, so that no other program's
# listener is touched.
#
# Then a shrink under the same stranger: `mp_faults --mode shrink` (4 ranks, GSYNC_LIVENESS_S=1, the
# probe's setting under which a held recovery listener split a job), rank 3 killed once the stranger
# holds every listener: the three others must shrink to one communicator of 3 (checked sums), and
# gsyncrun --elastic exit 0, within twice the time without the stranger (plus 4 s).
#
#   mp_strangers.sh GSYNCRUN GSYNC_MP_CHECK STRANGER_PY MP_FAULTS
#
# Exit 77 (skipped) when not root or no network namespace can be made here.
set -u
gsyncrun=${1:?usage: mp_strangers.sh GSYNCRUN GSYNC_MP_CHECK STRANGER_PY MP_FAULTS}
check=${2:?usage: mp_strangers.sh GSYNCRUN GSYNC_MP_CHECK STRANGER_PY MP_FAULTS}
stranger=${3:?usage: mp_strangers.sh GSYNCRUN GSYNC_MP_CHECK STRANGER_PY MP_FAULTS}
faults=${4:?usage: mp_strangers.sh GSYNCRUN GSYNC_MP_CHECK STRANGER_PY MP_FAULTS}
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
run_job() {  # run_job OUT shm|tcp|shrink: prints the job's seconds, returns its status
  local t0 t1 rc
  t0=$(now)
  case $2 in
    shm) timeout 300 "$gsyncrun" -n 4 -x GSYNC_TIMEOUT_S=120 -- "$check" >"$1" 2>&1 ;;
    tcp) timeout 300 "$gsyncrun" -n 4 -x GSYNC_SHM_DISABLE=1 -x GSYNC_TIMEOUT_S=120 -- "$check" --delay-ms 1500 >"$1" 2>&1 ;;
    shrink) timeout 300 "$gsyncrun" -n 4 --elastic -x GSYNC_LIVENESS_S=1 -x GSYNC_TIMEOUT_S=120 -- "$faults" --mode shrink --victim 3 \
      --pause-ms 1500 --watchdog-s 100 >"$1" 2>&1 ;;
  esac
  rc=$?
  t1=$(now)
  echo "$t0 $t1" | awk '{printf "%.2f\n", $2 - $1}'
  return $rc
}
failed=0
printf '%-4s %-10s %-8s %-8s %-6s %s\n' via stranger seconds limit warns verdict
for via in shm tcp shrink; do
  base=$(run_job "$tmp/base" $via) || { echo "FAIL: the job failed without a stranger"; cat "$tmp/base"; exit 1; }
  printf '%-4s %-10s %-8s %-8s %-6s %s\n' $via none "$base" - "$(grep -c WARN "$tmp/base")" ok
  for k in 8 80; do
    rm -f "$tmp/stranger.$k" "$tmp/stranger.$k.ready"
    python3 "$stranger" "$k" 400 "$tmp/stranger.$k" &
    sp=$!
    for ((i = 0; i < 200; ++i)); do  # until it has noted the listeners that exist already
      [ -e "$tmp/stranger.$k.ready" ] && break
      sleep 0.05
    done
    secs=$(run_job "$tmp/out.$k" $via)
    rc=$?
    kill "$sp" 2>/dev/null
    wait "$sp" 2>/dev/null
    limit=$(echo "$base" | awk '{printf "%.2f\n", 2 * $1 + 4}')
    why=""
    [ $rc = 0 ] || why="job exit $rc"
    pat="all results correct" want=4  # what a good run prints, and how many times
    [ $via = shrink ] && pat="SHRUNK rank [0-9]*: world [0-2] of 3 in" want=3
    [ -z "$why" ] && [ "$(grep -c "$pat" "$tmp/out.$k")" != "$want" ] && why="not every rank reported correct results"
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
