#!/usr/bin/env bash
# Alternated launches at 2 ranks, 64-512 KiB: the cross-core hand-off rate (gsync-membw --handoff),
# then gsync-perf, then Open MPI's MPI_Allreduce (vader), one line each; ROUNDS rounds, PAUSE s apart.
#   bash benchmarks/results/issue52/phase/phase_runs.sh [ROUNDS] [PAUSE] > rows.txt
set -euo pipefail
rounds=${1:-30}
pause=${2:-20}
b=${BUILD:-build}
for r in $(seq 1 "$rounds"); do
  h=$("$b/benchmarks/gsync-membw" --handoff | awk '{print $4}')
  g=$("$b/tools/gsyncrun" -n 2 -- "$b/tools/gsync-perf" -b 64K -e 512K -n 200 -w 10 -c 1 2>&1 |
    awk '/^\[0\] +[0-9]/ {printf " %s", $9}')
  o=$(mpirun --allow-run-as-root --oversubscribe -np 2 "$b/benchmarks/ompi_allreduce" -b 64K -e 512K -n 200 -w 10 -c 1 2>&1 |
    awk '/^ +[0-9]/ {printf " %s", $8}')
  echo "$(date -u +%H:%M:%S) handoff $h gsync$g ompi$o"
  sleep "$pause"
done
