#!/usr/bin/env bash
# A rank dies (_exit) while every rank keeps slow device allreduces queued over CUDA IPC (on the
# runtime's stand-in, tests/mp_cuda_ipc.cpp --survive). Each survivor must learn of it, must not
# read the dead rank's memory once the failure is known (on a GPU that read would kill its CUDA
# context), and must then shrink and run correct device allreduces: exit 0 on both survivors.
# Then a rank stops (SIGSTOP) in a loop of device allreduces over CUDA IPC: with a 60 s operation
# timeout and GSYNC_LIVENESS_S=2, the others must fail with peer_lost (exit 42) within 8 s.
set -u
prog=$1
export GSYNC_TIMEOUT_S=60 GSYNC_WORLD_SIZE=3 GSYNC_LIVENESS_S=2
# Runs ranks 0-2 of "$prog" with the arguments given (a fresh port; another if rank 0 cannot
# listen); sets codes (ranks 0 and 2, then 1 when $wait_middle is 1) and ms; rank 1 is killed
# when it is not waited for. Leaves no /dev/shm segment of any rank behind (no launcher here).
run3() {
  local wait_middle=$1; shift
  for attempt in 1 2 3; do
    export GSYNC_MASTER_PORT=$(( 10000 + RANDOM % 20000 ))
    local start=$(date +%s%N) err="${TMPDIR:-/tmp}/gsync_survivors_$$"
    pids=()
    for r in 0 1 2; do GSYNC_RANK=$r "$prog" "$@" 2>"${err}_$r.err" & pids+=($!); done
    codes=()
    wait "${pids[0]}"; codes+=($?)
    local taken=0
    if grep -q "cannot listen" "${err}_0.err"; then taken=1; kill "${pids[1]}" "${pids[2]}" 2>/dev/null; fi
    wait "${pids[2]}"; codes+=($?)
    if [ "$wait_middle" = 1 ]; then wait "${pids[1]}"; codes+=($?); else kill -KILL "${pids[1]}" 2>/dev/null; wait "${pids[1]}" 2>/dev/null; fi
    ms=$(( ($(date +%s%N) - start) / 1000000 ))
    cat "${err}"_*.err
    for p in "${pids[@]}"; do rm -f /dev/shm/gsync-"$p"-*; done
    rm -f "${err}"_*.err
    [ "$taken" = 1 ] && { echo "port $GSYNC_MASTER_PORT was taken; retrying"; continue; }
    return
  done
}
run3 1 --die-rank 1 --die-after-ms 500 --survive
echo "exit codes: ${codes[*]} after ${ms} ms"
[ "${codes[0]}" = 0 ] && [ "${codes[1]}" = 0 ] && [ "${codes[2]}" = 3 ] || { echo "FAIL: the survivors did not go on correctly (44: read the dead rank's memory, 45: wrong results after shrink)"; exit 1; }
[ "$ms" -lt 30000 ] || { echo "FAIL: took ${ms} ms"; exit 1; }
run3 0 --stop-rank 1 --die-after-ms 300
echo "stopped rank: exit codes of ranks 0 and 2: ${codes[*]} after ${ms} ms"
[ "${codes[0]}" = 42 ] && [ "${codes[1]}" = 42 ] || { echo "FAIL: a stopped local peer was not reported as peer_lost"; exit 1; }
[ "$ms" -lt 8000 ] || { echo "FAIL: took ${ms} ms (the op timeout, not the heartbeat, found it?)"; exit 1; }
echo PASS
