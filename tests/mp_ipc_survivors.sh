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
for attempt in 1 2 3; do
  export GSYNC_MASTER_PORT=$(( 10000 + RANDOM % 20000 ))
  start=$(date +%s%N)
  pids=()
  for r in 0 1 2; do GSYNC_RANK=$r "$prog" --die-rank 1 --die-after-ms 500 --survive 2>"${TMPDIR:-/tmp}/gsync_survivors_$$_$r.err" & pids+=($!); done
  codes=()
  wait "${pids[0]}"; codes+=($?)
  taken=0
  if grep -q "cannot listen" "${TMPDIR:-/tmp}/gsync_survivors_$$_0.err"; then taken=1; kill "${pids[1]}" "${pids[2]}" 2>/dev/null; fi
  for p in "${pids[1]}" "${pids[2]}"; do wait "$p"; codes+=($?); done
  ms=$(( ($(date +%s%N) - start) / 1000000 ))
  cat "${TMPDIR:-/tmp}"/gsync_survivors_$$_*.err
  for p in "${pids[@]}"; do rm -f /dev/shm/gsync-"$p"-*; done  # the dead rank's (no launcher here)
  rm -f "${TMPDIR:-/tmp}"/gsync_survivors_$$_*.err
  [ "$taken" = 1 ] && { echo "port $GSYNC_MASTER_PORT was taken; retrying"; continue; }
  break
done
echo "exit codes: ${codes[*]} after ${ms} ms"
[ "${codes[0]}" = 0 ] && [ "${codes[1]}" = 3 ] && [ "${codes[2]}" = 0 ] || { echo "FAIL: the survivors did not go on correctly (44: read the dead rank's memory, 45: wrong results after shrink)"; exit 1; }
[ "$ms" -lt 30000 ] || { echo "FAIL: took ${ms} ms"; exit 1; }
for attempt in 1 2 3; do
  export GSYNC_MASTER_PORT=$(( 10000 + RANDOM % 20000 ))
  start=$(date +%s%N)
  pids=()
  for r in 0 1 2; do GSYNC_RANK=$r "$prog" --stop-rank 1 --die-after-ms 300 2>"${TMPDIR:-/tmp}/gsync_stopped_$$_$r.err" & pids+=($!); done
  codes=()
  wait "${pids[0]}"; codes+=($?)
  taken=0
  if grep -q "cannot listen" "${TMPDIR:-/tmp}/gsync_stopped_$$_0.err"; then taken=1; kill "${pids[2]}" 2>/dev/null; fi
  wait "${pids[2]}"; codes+=($?)
  ms=$(( ($(date +%s%N) - start) / 1000000 ))
  kill -KILL "${pids[1]}" 2>/dev/null; wait "${pids[1]}" 2>/dev/null
  cat "${TMPDIR:-/tmp}"/gsync_stopped_$$_*.err
  for p in "${pids[@]}"; do rm -f /dev/shm/gsync-"$p"-*; done  # the stopped rank's, and the others' (they _exit)
  rm -f "${TMPDIR:-/tmp}"/gsync_stopped_$$_*.err
  [ "$taken" = 1 ] && { echo "port $GSYNC_MASTER_PORT was taken; retrying"; continue; }
  break
done
echo "stopped rank: exit codes of ranks 0 and 2: ${codes[*]} after ${ms} ms"
[ "${codes[0]}" = 42 ] && [ "${codes[1]}" = 42 ] || { echo "FAIL: a stopped local peer was not reported as peer_lost"; exit 1; }
[ "$ms" -lt 8000 ] || { echo "FAIL: took ${ms} ms (the op timeout, not the heartbeat, found it?)"; exit 1; }
echo PASS
