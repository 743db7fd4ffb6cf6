# Sourced by the multi-process test scripts that run ranks as processes over the verbs link, through
# the stand-in libibverbs (tests/support/ibv_emu/README.md), on two "hosts": rank r of n is on host
# ib-a when r < (n + 1) / 2, else on ib-b (as tests/support/verbs_world.hpp places its threads), so
# that every pair across the two goes over verbs and every pair inside one over shared memory.
#
# verbs_setup LIB       exports GSYNC_IBVERBS_LIB=LIB and GSYNC_IBV_EMU_LID=auto (each process a LID
#                       of its own), raises the locked-memory limit or, where it cannot, relaxes the
#                       stand-in's memlock rule (GSYNC_IBV_EMU_LAX=memlock); 1 when LIB is no file.
# verbs_fabric          exports GSYNC_IBV_EMU: a new fabric for one job (gsync-ibv-emu-mp-PID-K);
#                       verbs_cleanup removes every fabric of this script (call it at exit).
# verbs_host R N        prints the host of rank R of N.
# verbs_rank            an array to put before gsyncrun's PROGRAM ("${verbs_rank[@]}" PROGRAM ARGS):
#                       sets GSYNC_HOST_ID from GSYNC_RANK and GSYNC_WORLD_SIZE, then execs PROGRAM
#                       (same pid), since gsyncrun gives every rank the same environment.
# verbs_links_check N FILE...
#                       checks the GSYNC_DEBUG=INFO logs of one job of N ranks (gsyncrun's output, or
#                       one file per rank): the set-up logged "verbs: rank X <-> rank Y" exactly once
#                       for every ordered pair X, Y on different hosts and never for a pair on one
#                       host, and no rank's "peers:" line names TCP. Prints what is wrong, or nothing.
#                       Without it a silent fall-back to TCP would pass every check of the results.

verbs_setup() {
  [ -f "$1" ] || return 1
  export GSYNC_IBVERBS_LIB=$1 GSYNC_IBV_EMU_LID=auto
  unset GSYNC_IB_DISABLE GSYNC_IB_HCA GSYNC_IB_INTRA GSYNC_IBV_EMU_LAX GSYNC_IBV_EMU_DEVICES
  # Each rank registers a ring and a mirror per verbs peer (1 MiB each by default).
  ulimit -l unlimited 2>/dev/null || export GSYNC_IBV_EMU_LAX=memlock
  verbs_fabrics=0
  return 0
}

verbs_fabric() {
  verbs_fabrics=$((verbs_fabrics + 1))
  export GSYNC_IBV_EMU=gsync-ibv-emu-mp-$$-$verbs_fabrics
}

verbs_cleanup() {
  rm -f /dev/shm/gsync-ibv-emu-mp-$$-*
}

verbs_host() {
  if [ "$1" -lt $((($2 + 1) / 2)) ]; then echo ib-a; else echo ib-b; fi
}

# shellcheck disable=SC2016  # expanded by the rank's shell
verbs_rank=(sh -c 'if [ "$GSYNC_RANK" -lt $(((GSYNC_WORLD_SIZE + 1) / 2)) ]; then GSYNC_HOST_ID=ib-a; else GSYNC_HOST_ID=ib-b; fi
export GSYNC_HOST_ID
exec "$@"' verbs-rank)

verbs_links_check() {
  local n=$1 x y want="" got tcp peers
  shift
  for ((x = 0; x < n; x++)); do
    for ((y = 0; y < n; y++)); do
      [ "$(verbs_host $x "$n")" != "$(verbs_host $y "$n")" ] && want+="$x $y"$'\n'
    done
  done
  got=$(grep -ho 'INFO: verbs: rank [0-9]* <-> rank [0-9]*' "$@" | awk '{print $4, $7}' | sort)
  want=$(printf '%s' "$want" | sort)
  if [ "$got" != "$want" ]; then
    echo "verbs pairs logged ($(printf '%s' "$got" | grep -c .)) are not the $(printf '%s' "$want" | grep -c .) across the hosts:" \
      "missing [$(comm -23 <(echo "$want") <(echo "$got") | grep . | paste -sd, -)]" \
      "extra [$(comm -13 <(echo "$want") <(echo "$got") | grep . | paste -sd, -)]" \
      "$(grep -ho 'INFO: verbs: not used.*' "$@" | head -1)"
    return
  fi
  tcp=$(grep -h 'INFO: peers: ' "$@" | grep -c 'over tcp')
  peers=$(grep -hc 'INFO: peers: ' "$@" | awk '{s += $1} END {print s + 0}')
  [ "$n" -gt 1 ] && [ "$peers" != "$n" ] && { echo "$peers of $n ranks logged their peers"; return; }
  [ "$tcp" = 0 ] || echo "$tcp ranks reach a peer over TCP: $(grep -h 'INFO: peers: .*over tcp' "$@" | head -1)"
}
