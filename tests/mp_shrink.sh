#!/usr/bin/env bash
# Shrinking after real deaths (issue 31: "a rank that fails during the shrink is excluded too"):
# tests/mp_faults.cpp --mode shrink under `gsyncrun --elastic`. Rank V SIGKILLs itself after an
# allreduce; the survivors shrink, and rank J SIGKILLs itself in the middle of that shrink (once
# it took a join slot, once its join is recorded, or once the members are decided, before the
# new communicator is set up; as the coordinator, or as a member). With --split the ranks first
# shrink their half of the world (colour rank % 2), then the world.
#
#   mp_shrink.sh MP_FAULTS GSYNCRUN [IBV_EMU_LIB]
#
# Checks per row: gsyncrun exits 0 and reports both victims killed by signal 9; every survivor
# printed SHRUNK (mp_faults checked its new rank, size and an allreduce's sum over the ranks still
# alive). Prints each row with the slowest survivor's shrink time; exits 1 if any row failed.
# With IBV_EMU_LIB (the stand-in libibverbs, tests/support/ibv_emu/), the verbs rows instead: the
# ranks on two hosts (tests/support/verbs_env.sh: verbs across them, shared memory inside each),
# each job on a fabric of its own; every survivor's SHRUNK line must also count, among the shrunk
# world's peers, as many over verbs as survivors on the other host and none over TCP (the new
# communicator sets its links up again, and must find verbs again).
set -u
prog=${1:?usage: mp_shrink.sh MP_FAULTS GSYNCRUN [IBV_EMU_LIB]}
gsyncrun=${2:?usage: mp_shrink.sh MP_FAULTS GSYNCRUN [IBV_EMU_LIB]}
ibv_lib=${3:-}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gsync_mp_shrink.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
if [ -n "$ibv_lib" ]; then
  source "$(dirname "${BASH_SOURCE[0]}")/support/verbs_env.sh"
  verbs_setup "$ibv_lib" || { echo "SKIP: no stand-in libibverbs at $ibv_lib"; exit 77; }
  trap 'rm -rf "$tmp"; verbs_cleanup' EXIT
fi
unset GSYNC_TIMEOUT_S GSYNC_ALGO GSYNC_SHM_DISABLE GSYNC_JOB_KEY GSYNC_RANK GSYNC_WORLD_SIZE GSYNC_MASTER_PORT GSYNC_HOST_ID
failed=0
printf '%-3s %-6s %-6s %-7s %-6s %-5s %-10s %-7s %s\n' N victim in_shrink stage split via shrink_ms row_ms verdict
# row N VICTIM SHRINK_VICTIM STAGE shm|tcp|verbs [--split]
row() {
  local n=$1 victim=$2 sv=$3 stage=$4 via=$5 split=${6:-} env=(GSYNC_LIVENESS_S=2) wrap=() t0
  t0=$(date +%s%N)
  [ "$via" = tcp ] && env+=(GSYNC_SHM_DISABLE=1 "GSYNC_JOB_KEY=$(od -An -tx1 -N24 /dev/urandom | tr -d ' \n')")
  if [ "$via" = verbs ]; then
    verbs_fabric
    env+=("GSYNC_JOB_KEY=$(od -An -tx1 -N24 /dev/urandom | tr -d ' \n')")
    wrap=("${verbs_rank[@]}")
  fi
  env "${env[@]}" timeout 120 "$gsyncrun" -n "$n" --elastic -- "${wrap[@]}" "$prog" --mode shrink --victim "$victim" \
    --shrink-victim "$sv" --stage "$stage" --watchdog-s 60 $split >"$tmp/out" 2>&1
  local rc=$? why=""
  [ "$via" = verbs ] && rm -f "/dev/shm/$GSYNC_IBV_EMU"
  [ $rc = 0 ] || why="exit $rc"
  for v in "$victim" "$sv"; do
    [ -z "$why" ] && ! grep -q "rank $v (pid [0-9]*) killed by signal 9" "$tmp/out" && why="rank $v was not killed"
  done
  local shrunk
  shrunk=$(grep -c 'SHRUNK rank' "$tmp/out")
  [ -z "$why" ] && [ "$shrunk" != $((n - 2)) ] && why="$shrunk of $((n - 2)) survivors shrank"
  if [ -z "$why" ] && [ "$via" = verbs ]; then  # the shrunk world's links: verbs to every survivor on the other host
    local r x want_v want_s line
    for ((r = 0; r < n; r++)); do
      [ "$r" = "$victim" ] || [ "$r" = "$sv" ] && continue
      want_v=0 want_s=0
      for ((x = 0; x < n; x++)); do
        [ "$x" = "$victim" ] || [ "$x" = "$sv" ] || [ "$x" = "$r" ] && continue
        if [ "$(verbs_host $x "$n")" = "$(verbs_host $r "$n")" ]; then want_s=$((want_s + 1)); else want_v=$((want_v + 1)); fi
      done
      line=$(grep -m1 "^\[$r\] SHRUNK rank $r: " "$tmp/out")
      if ! printf '%s\n' "$line" | grep -q "links: verbs $want_v shm $want_s tcp 0\$"; then
        why="rank $r: not verbs $want_v shm $want_s tcp 0 in the shrunk world: ${line:-<no SHRUNK line>}"
        break
      fi
    done
  fi
  local ms
  ms=$(grep -o 'in [0-9.]* ms' "$tmp/out" | awk '{print $2}' | sort -n | tail -1)
  printf '%-3s %-6s %-6s %-7s %-6s %-5s %-10s %-7s %s\n' "$n" "$victim" "$sv" "$stage" "${split:+yes}" "$via" "${ms:--}" \
    $((($(date +%s%N) - t0) / 1000000)) "${why:-ok}"
  if [ -n "$why" ]; then
    failed=1
    sed 's/^/    /' "$tmp/out" | tail -30
  fi
}
if [ -z "$ibv_lib" ]; then
row 4 1 3 agreed shm
row 5 0 1 agreed tcp          # rank 1 coordinates the shrink and dies in it: rank 2 takes over (3 of 5 go on)
row 6 2 4 joined tcp
row 6 3 0 agreed shm --split  # rank 0 coordinates the world's and its half's shrink
row 8 5 2 joined shm
row 5 4 2 slot tcp            # killed between taking its join slot and filling it
else
# Over verbs (hosts: ranks 0..ceil(N/2)-1, then the rest): victims on either host; the shrunk
# worlds keep ranks on both.
row 4 1 3 agreed verbs         # one of each host dies: 0 and 2 go on, across the hosts
row 6 3 0 agreed verbs --split # rank 0, the coordinator, dies in the shrinks of its half and of the
                               # world: halves (rank % 2) across both hosts shrink, then the world
fi
exit $failed
