#!/usr/bin/env bash
# Shrinking after real deaths (issue 31: "a rank that fails during the shrink is excluded too"):
# tests/mp_faults.cpp --mode shrink under `gsyncrun --elastic`. Rank V SIGKILLs itself after an
# allreduce; the survivors shrink, and rank J SIGKILLs itself in the middle of that shrink (once
# it took a join slot, once its join is recorded, or once the members are decided, before the
# new communicator is set up; as the coordinator, or as a member). With --split the ranks first
# shrink their half of the world (colour rank % 2), then the world.
#
#   mp_shrink.sh MP_FAULTS GSYNCRUN
#
# Checks per row: gsyncrun exits 0 and reports both victims killed by signal 9; every survivor
# printed SHRUNK (mp_faults checked its new rank, size and an allreduce's sum over the ranks still
# alive). Prints each row with the slowest survivor's shrink time; exits 1 if any row failed.
set -u
prog=${1:?usage: mp_shrink.sh MP_FAULTS GSYNCRUN}
gsyncrun=${2:?usage: mp_shrink.sh MP_FAULTS GSYNCRUN}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gsync_mp_shrink.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
unset GSYNC_TIMEOUT_S GSYNC_ALGO GSYNC_SHM_DISABLE GSYNC_JOB_KEY GSYNC_RANK GSYNC_WORLD_SIZE GSYNC_MASTER_PORT GSYNC_HOST_ID
failed=0
printf '%-3s %-6s %-6s %-7s %-6s %-4s %-10s %s\n' N victim in_shrink stage split via shrink_ms verdict
# row N VICTIM SHRINK_VICTIM STAGE shm|tcp [--split]
row() {
  local n=$1 victim=$2 sv=$3 stage=$4 via=$5 split=${6:-} env=(GSYNC_LIVENESS_S=2)
  [ "$via" = tcp ] && env+=(GSYNC_SHM_DISABLE=1 "GSYNC_JOB_KEY=$(od -An -tx1 -N24 /dev/urandom | tr -d ' \n')")
  env "${env[@]}" timeout 120 "$gsyncrun" -n "$n" --elastic -- "$prog" --mode shrink --victim "$victim" \
    --shrink-victim "$sv" --stage "$stage" --watchdog-s 60 $split >"$tmp/out" 2>&1
  local rc=$? why=""
  [ $rc = 0 ] || why="exit $rc"
  for v in "$victim" "$sv"; do
    [ -z "$why" ] && ! grep -q "rank $v (pid [0-9]*) killed by signal 9" "$tmp/out" && why="rank $v was not killed"
  done
  local shrunk
  shrunk=$(grep -c 'SHRUNK rank' "$tmp/out")
  [ -z "$why" ] && [ "$shrunk" != $((n - 2)) ] && why="$shrunk of $((n - 2)) survivors shrank"
  local ms
  ms=$(grep -o 'in [0-9.]* ms' "$tmp/out" | awk '{print $2}' | sort -n | tail -1)
  printf '%-3s %-6s %-6s %-7s %-6s %-4s %-10s %s\n' "$n" "$victim" "$sv" "$stage" "${split:+yes}" "$via" "${ms:--}" "${why:-ok}"
  if [ -n "$why" ]; then
    failed=1
    sed 's/^/    /' "$tmp/out" | tail -30
  fi
}
row 4 1 3 agreed shm
row 5 0 1 agreed tcp          # rank 1 coordinates the shrink and dies in it: rank 2 takes over (3 of 5 go on)
row 6 2 4 joined tcp
row 6 3 0 agreed shm --split  # rank 0 coordinates the world's and its half's shrink
row 8 5 2 joined shm
row 5 4 2 slot tcp            # killed between taking its join slot and filling it
exit $failed
