#!/usr/bin/env bash
# SIGKILL a rank mid-collective, over shared memory (one host) and over TCP (GSYNC_SHM_DISABLE=1).
# With a 60 s timeout, every survivor must raise gsync::error peer_lost (exit 42) within 5 s, and
# no shared-memory segment of any rank may be left in /dev/shm. Then: a segment left by a rank
# that dies is removed by gsyncrun.
set -u
prog=$1 gsyncrun=$2
tmp=${TMPDIR:-/tmp}/gsync_kill_$$
fail() { echo "FAIL: $*"; exit 1; }
for mode in shm tcp; do
  export GSYNC_TIMEOUT_S=60 GSYNC_WORLD_SIZE=3
  [ "$mode" = tcp ] && export GSYNC_SHM_DISABLE=1 || unset GSYNC_SHM_DISABLE
  for attempt in 1 2 3; do
    export GSYNC_MASTER_PORT=$(( 10000 + RANDOM % 20000 ))
    pids=()
    for r in 0 1 2; do GSYNC_RANK=$r "$prog" --loop >"$tmp.$r.out" 2>"$tmp.$r.err" & pids+=($!); done
    # Kill mid-collective: once every rank has finished its first allreduce (at most 30 s), plus
    # a random 0-300 ms.
    for _ in $(seq 300); do
      [ "$(cat "$tmp".*.out 2>/dev/null | grep -c READY)" -ge 3 ] && break
      sleep 0.1
    done
    sleep "0.$(printf '%03d' $((RANDOM % 300)))"
    start=$(date +%s%N)
    kill -9 "${pids[1]}"
    codes=()
    for p in "${pids[@]}"; do wait "$p"; codes+=($?); done
    ms=$(( ($(date +%s%N) - start) / 1000000 ))
    cat "$tmp".*.err
    if grep -q "cannot listen" "$tmp.0.err"; then rm -f "$tmp".*.err "$tmp".*.out; echo "port taken; retrying"; continue; fi
    rm -f "$tmp".*.err "$tmp".*.out
    break
  done
  echo "$mode: exit codes ${codes[*]}, survivors done ${ms} ms after the kill"
  [ "${codes[0]}" = 42 ] && [ "${codes[1]}" = 137 ] && [ "${codes[2]}" = 42 ] || fail "$mode: survivors did not report peer_lost"
  [ "$ms" -lt 5000 ] || fail "$mode: survivors took ${ms} ms"
  for p in "${pids[@]}"; do
    left=$(ls /dev/shm 2>/dev/null | grep "^gsync-$p-" || true)
    [ -z "$left" ] || fail "$mode: left in /dev/shm: $left"
  done
done
unset GSYNC_SHM_DISABLE GSYNC_MASTER_PORT GSYNC_WORLD_SIZE
out=$("$gsyncrun" -n 2 -- "$prog" --orphan-shm 2>&1)
echo "$out"
seg=$(echo "$out" | sed -n 's/.*created \/\(gsync-[0-9]*-orphan\).*/\1/p' | head -1)
[ -n "$seg" ] || fail "the orphan segment was not created"
[ ! -e "/dev/shm/$seg" ] || { rm -f "/dev/shm/$seg"; fail "gsyncrun left /dev/shm/$seg behind"; }
echo PASS
