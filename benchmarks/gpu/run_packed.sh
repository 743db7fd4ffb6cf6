#!/usr/bin/env bash
# The GPU check with binaries built elsewhere (benchmarks/gpu/pack.sh): the cuda tests, then the
# IPC, kernel and staged benchmarks and the CUDA examples, each under a time limit, all within
# BUDGET seconds (default 480). Full output to $OUT/all.log, benchmark tables to $OUT/bench_*.md,
# a summary on stdout. Usage: bash benchmarks/gpu/run_packed.sh [DIR]
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
D=$(cd "${1:-$root/.gpu-pack}" && pwd); B=$D/bin
O=${OUT:-/tmp/out}; mkdir -p "$O"
LOG=$O/all.log
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:/usr/local/cuda/targets/x86_64-linux/lib:$D/lib
export GSYNC_TIMEOUT_S=${GSYNC_TIMEOUT_S:-40}
T0=$(date +%s); BUDGET=${BUDGET:-480}
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
results=()
# t NAME LIMIT CMD...: run with min(LIMIT, budget left); full output to all.log, tail on failure to stdout
t() {
  local name=$1 lim=$2; shift 2
  local l; l=$(left); (( l < lim )) && lim=$l
  if (( lim < 5 )); then results+=("$name: NOT RUN (budget)"); return; fi
  local a=$(date +%s%N)
  { echo "=== $name ($*) limit ${lim}s"; } >>"$LOG"
  timeout -k 3 "$lim" "$@" >"$O/cur.log" 2>&1; local rc=$?
  local dt=$(( ($(date +%s%N) - a) / 1000000 ))ms
  cat "$O/cur.log" >>"$LOG"; echo "=== $name rc=$rc ${dt}" >>"$LOG"
  results+=("$name: rc=$rc ${dt}")
  echo "--- $name rc=$rc ${dt}"
  if [[ $rc != 0 ]]; then tail -c 1500 "$O/cur.log"; fi
  case $name in bench_*) cp "$O/cur.log" "$O/$name.md";; esac
}
nvidia-smi --query-gpu=name,driver_version,compute_mode,memory.total --format=csv 2>&1 | tee -a "$LOG"
nvidia-smi -q 2>/dev/null | grep -iE 'MPS|Compute Mode|Virtualization' | tee -a "$LOG"
uname -r; nproc
miss=$(ldd "$B/gsync_cuda_kernels" | grep "not found"); [[ -n $miss ]] && echo "MISSING LIBS: $miss"
ldd "$B/gsync_cuda_kernels" | grep -E "cudart|crypto|stdc"
R=$B/gsyncrun
t kernels 60 "$B/gsync_cuda_kernels"
t device_sync 60 "$B/gsync_cuda_device_sync"
t device_collectives 90 "$B/gsync_cuda_device_collectives"
for n in 2 4 1; do for a in one_shot two_shot; do
  t ipc_${a}_$n 45 env GSYNC_DEBUG=INFO GSYNC_CUDA_IPC_BUFFER=1M GSYNC_ALGO=$a "$R" -n $n -- "$B/gsync_cuda_ipc_collectives"
done; done
for n in 2 4; do t device_collectives_mp_$n 60 env GSYNC_CUDA_STAGING_BYTES=1M "$R" -n $n -- "$B/gsync_cuda_device_collectives"; done
t bench_ipc_2 120 env GSYNC_TIMEOUT_S=120 "$R" -n 2 -- "$B/gsync-gpu-ipc-bench" 256
t bench_ipc_4 150 env GSYNC_TIMEOUT_S=120 "$R" -n 4 -- "$B/gsync-gpu-ipc-bench" 256
t bench_kernels 60 "$B/gsync-gpu-kernel-bench" 256
t bench_staged_2 90 env GSYNC_TIMEOUT_S=120 "$R" -n 2 -- "$B/gsync-gpu-staged-bench" 256
t bench_staged_4 90 env GSYNC_TIMEOUT_S=120 "$R" -n 4 -- "$B/gsync-gpu-staged-bench" 256
t example_cuda_allreduce_2 40 "$R" -n 2 -- "$B/cuda_allreduce"
t example_dp 90 sh -c "'$R' -n 2 -- '$B/data_parallel_mlp' --steps 20 --print-every 0 --json /tmp/dp_ref.json >/dev/null && exec '$R' -n 2 -- '$B/cuda_data_parallel' --steps 20 --compare /tmp/dp_ref.json --tol 1e-4"
rm -f "$O/cur.log"
echo; echo "== summary"; printf '%s\n' "${results[@]}"
for f in "$O"/bench_*.md; do [[ -f $f ]] && { echo "## $f"; grep -E '^\||^#|GB/s' "$f" | head -40; }; done
