#!/usr/bin/env bash
# No split brain after a stop (issue 50): tests/mp_faults.cpp --mode resume under `gsyncrun
# --elastic`. One rank is stopped (SIGSTOP) in the middle of the allreduce loop, long enough for
# the others to find it lost and shrink; it is resumed (SIGCONT) once they have. The resumed rank
# must fail with errc::excluded (exit 75) instead of going on alone, the survivors must resume
# from the same step and finish with every result right, and gsyncrun --elastic must exit 0.
#
#   mp_stop_resume.sh MP_FAULTS GSYNCRUN [REPEATS]
#
# Prints a row per run and exits 1 if any failed.
set -u
prog=${1:?usage: mp_stop_resume.sh MP_FAULTS GSYNCRUN [REPEATS]}
gsyncrun=${2:?usage: mp_stop_resume.sh MP_FAULTS GSYNCRUN [REPEATS]}
repeats=${3:-1}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gsync_stop_resume.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
unset GSYNC_TIMEOUT_S GSYNC_ALGO GSYNC_SHM_DISABLE GSYNC_JOB_KEY GSYNC_RANK GSYNC_WORLD_SIZE GSYNC_MASTER_PORT GSYNC_HOST_ID
failed=0
runs=0
printf '%-3s %-6s %-4s %-8s %s\n' N victim via resumed verdict
source "$(dirname "${BASH_SOURCE[0]}")/support/wait_for.sh"
row() {
  local n=$1 victim=$2 via=$3 env=(GSYNC_LIVENESS_S=2) out=$tmp/out.$((++runs))  # a file per run: the job truncates its own when it starts, maybe after the waits below began
  [ "$via" = tcp ] && env+=(GSYNC_SHM_DISABLE=1 "GSYNC_JOB_KEY=$(od -An -tx1 -N24 /dev/urandom | tr -d ' \n')")
  env "${env[@]}" timeout 120 "$gsyncrun" -n "$n" --elastic -- "$prog" --mode resume --victim "$victim" --post-s 3 \
    --watchdog-s 90 >"$out" 2>&1 &
  local job=$! why="" pid="" resumed=-
  if wait_for "$out" 'READY resume' "$n" 30; then
    pid=$(grep -o "READY resume rank $victim pid [0-9][0-9]*" "$out" | head -1 | awk '{print $6}')
    sleep 1
    kill -STOP "$pid"
    if wait_for "$out" 'SHRUNK rank' $((n - 1)) 40; then
      resumed=$(grep -o 'SHRUNK rank [0-9]*: world [0-9]* of [0-9]*' "$out" | head -1 | awk '{print $7}')
    else
      why="the survivors did not shrink"
    fi
    kill -CONT "$pid"
  else
    why="the ranks did not start"
  fi
  wait "$job"
  local rc=$?
  [ -z "$why" ] && [ $rc != 0 ] && why="gsyncrun exit $rc"
  [ -z "$why" ] && ! grep -q "EXCLUDED rank $victim:" "$out" && why="the resumed rank was not excluded"
  [ -z "$why" ] && ! grep -q "rank $victim (pid [0-9]*) exited with status 75 (excluded by a shrink)" "$out" && why="gsyncrun did not let the excluded rank go"
  [ -z "$why" ] && [ "$(grep -c "DONE rank [0-9]*: world [0-9]* of $((n - 1))," "$out")" != $((n - 1)) ] && why="not every survivor finished"
  [ -z "$why" ] && grep -q "DONE rank $victim:" "$out" && why="the resumed rank went on"
  printf '%-3s %-6s %-4s %-8s %s\n' "$n" "$victim" "$via" "$resumed" "${why:-ok}"
  if [ -n "$why" ]; then
    failed=1
    sed 's/^/    /' "$out" | tail -30
  fi
}
for ((k = 0; k < repeats; ++k)); do
  row 4 0 shm
  row 4 2 tcp
  row 5 4 shm
  row 3 1 tcp
done
exit $failed
