#!/usr/bin/env bash
# A rank dies (_exit) in the middle of a stream of allreduces (tests/mp_check.cpp: 16 MiB on host
# memory; tests/mp_cuda_ipc.cpp: 4 MiB of device memory over CUDA IPC on the runtime's stand-in).
# With a 60 s timeout, every survivor must raise gsync::error peer_lost (exit 42) within 5 s; then
# the same under gsyncrun, which must exit non-zero and stop the job promptly.
set -u
prog=$1 gsyncrun=$2
# A port below the kernel's ephemeral range, so no outgoing connection of another test holds it;
# if it is taken anyway (rank 0 cannot listen), try another one.
export GSYNC_TIMEOUT_S=60 GSYNC_WORLD_SIZE=3
for attempt in 1 2 3; do
  export GSYNC_MASTER_PORT=$(( 10000 + RANDOM % 20000 ))
  start=$(date +%s%N)
  pids=()
  for r in 0 1 2; do GSYNC_RANK=$r "$prog" --die-rank 1 --die-after-ms 300 2>"${TMPDIR:-/tmp}/gsync_rank_exit_$$_$r.err" & pids+=($!); done
  codes=()
  wait "${pids[0]}"; codes+=($?)
  taken=0
  if grep -q "cannot listen" "${TMPDIR:-/tmp}/gsync_rank_exit_$$_0.err"; then taken=1; kill "${pids[1]}" "${pids[2]}" 2>/dev/null; fi
  for p in "${pids[1]}" "${pids[2]}"; do wait "$p"; codes+=($?); done
  ms=$(( ($(date +%s%N) - start) / 1000000 ))
  cat "${TMPDIR:-/tmp}"/gsync_rank_exit_$$_*.err
  if [ "$taken" = 1 ]; then
    rm -f "${TMPDIR:-/tmp}"/gsync_rank_exit_$$_*.err
    echo "port $GSYNC_MASTER_PORT was taken; retrying"
    continue
  fi
  rm -f "${TMPDIR:-/tmp}"/gsync_rank_exit_$$_*.err /dev/shm/gsync-"${pids[1]}"-*  # what the dead rank left (no launcher here)
  break
done
echo "exit codes: ${codes[*]} after ${ms} ms"
[ "${codes[0]}" = 42 ] && [ "${codes[1]}" = 3 ] && [ "${codes[2]}" = 42 ] || { echo "FAIL: survivors did not report peer_lost"; exit 1; }
[ "$ms" -lt 8000 ] || { echo "FAIL: took ${ms} ms"; exit 1; }
unset GSYNC_MASTER_PORT GSYNC_WORLD_SIZE
start=$(date +%s%N)
"$gsyncrun" -n 4 -- "$prog" --die-rank 2 --die-after-ms 300
rc=$?
ms=$(( ($(date +%s%N) - start) / 1000000 ))
echo "gsyncrun exit code $rc after ${ms} ms"
[ "$rc" -ne 0 ] || { echo "FAIL: gsyncrun returned 0"; exit 1; }
[ "$ms" -lt 10000 ] || { echo "FAIL: gsyncrun took ${ms} ms"; exit 1; }
echo PASS
