#!/usr/bin/env bash
# Elastic training through a rank's death: examples/data_parallel_mlp --elastic under
# `gsyncrun --elastic`, one rank SIGKILLs itself in the middle of a step (rank 0, which serves the
# store, included); the others must shrink (communicator::shrink), re-shard, redo the step and
# finish with a finite, decreasing loss (the program exits 4 otherwise).
#
#   mp_elastic.sh GSYNCRUN DATA_PARALLEL_MLP
#
# For each row: N ranks over shared memory or TCP (GSYNC_SHM_DISABLE=1, with a job key), victim V
# dies in step S. Checks: gsyncrun exits 0 and reports V killed by signal 9; the new rank 0 reports
# exactly one recovery and N-1 ranks at the end. Prints each row with the shrink's duration as the
# new rank 0 measured it (from catching the error to the new communicator), and exits 1 if any
# row failed.
set -u
gsyncrun=${1:?usage: mp_elastic.sh GSYNCRUN DATA_PARALLEL_MLP}
dp=${2:?usage: mp_elastic.sh GSYNCRUN DATA_PARALLEL_MLP}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gsync_elastic.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
unset GSYNC_TIMEOUT_S GSYNC_ALGO GSYNC_SHM_DISABLE GSYNC_JOB_KEY GSYNC_RANK GSYNC_WORLD_SIZE GSYNC_MASTER_PORT GSYNC_HOST_ID
failed=0
printf '%-3s %-6s %-4s %-4s %-10s %s\n' N victim step via shrink_ms verdict
row() {
  local n=$1 victim=$2 via=$3 step=$4 env=()
  [ "$via" = tcp ] && env=(GSYNC_SHM_DISABLE=1 "GSYNC_JOB_KEY=$(od -An -tx1 -N24 /dev/urandom | tr -d ' \n')")
  env "${env[@]}" timeout 120 "$gsyncrun" -n "$n" --elastic -- "$dp" --steps 16 --batch 8 --print-every 0 \
    --elastic --die-rank "$victim" --die-step "$step" >"$tmp/out" 2>&1
  local rc=$? why=""
  [ $rc = 0 ] || why="exit $rc"
  [ -z "$why" ] && ! grep -q "rank $victim (pid [0-9]*) killed by signal 9" "$tmp/out" && why="rank $victim was not killed"
  [ -z "$why" ] && ! grep -q "elastic: 1 recoveries, $((n - 1)) ranks at the end" "$tmp/out" && why="no recovery to $((n - 1)) ranks reported"
  local ms
  ms=$(grep -o 'shrank to [0-9]* ranks in [0-9.]* ms' "$tmp/out" | head -1 | awk '{print $6}')
  printf '%-3s %-6s %-4s %-4s %-10s %s\n' "$n" "$victim" "$step" "$via" "${ms:--}" "${why:-ok}"
  if [ -n "$why" ]; then
    failed=1
    sed 's/^/    /' "$tmp/out" | tail -30
  fi
}
row 4 0 shm 5
row 4 2 tcp 3
row 8 0 tcp 4
row 8 5 shm 6
row 8 7 tcp 2
exit $failed
