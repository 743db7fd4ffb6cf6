#!/usr/bin/env bash
# The GPU check: on a machine with an NVIDIA GPU and this repository, one command that configures,
# builds and runs, in under 8 minutes:
#   1. the `cuda` tests (kernels against the host code bit for bit; every collective on device
#      memory against a double-precision reference, ranks as threads and as 2 and 4 processes
#      sharing the GPU; the CUDA example);
#   2. the kernels' bandwidth as a fraction of the device's own copy bandwidth, and the pinned
#      host <-> device bandwidth (the staged path's bound);
#   3. staged allreduce busbw at 2 and 4 processes against the host allreduce in the same run;
#   4. CUDA IPC: the time to open a peer's arena, one-shot and two-shot allreduce at 2 and 4
#      processes against host staging in the same run and against the device memory bound.
# Everything goes to $OUT (default benchmarks/results/gpu/<date>/): check.log and one .md per table.
# Usage: bash benchmarks/gpu/check.sh [build dir]
set -uo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$here/build-gpu}
out=${OUT:-$here/benchmarks/results/gpu/$(date -u +%Y-%m-%d)}
mkdir -p "$out"
log=$out/check.log
exec > >(tee -a "$log") 2>&1
step() { echo; echo "== $* ($(date -u +%H:%M:%S))"; }

step "machine"
nvidia-smi --query-gpu=name,driver_version,compute_mode,pcie.link.gen.current,pcie.link.width.current,memory.total --format=csv || true
nvidia-smi -q | grep -iE 'MPS|Compute Mode' || true
nproc

step "configure and build"
if ! command -v cmake >/dev/null || ! dpkg -s libasio-dev doctest-dev >/dev/null 2>&1; then
  bash "$here/tools/setup.sh" || true
fi
cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=Release -DGSYNC_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null || exit 1
cmake --build "$build" -j "$(nproc)" --target gsync_cuda_kernels gsync_cuda_device_collectives gsync_cuda_device_sync gsync_cuda_ipc_collectives cuda_allreduce cuda_data_parallel data_parallel_mlp gsyncrun \
  gsync-gpu-kernel-bench gsync-gpu-staged-bench gsync-gpu-ipc-bench || exit 1

step "cuda tests"
ctest --test-dir "$build" -L cuda --output-on-failure --timeout 240 | tee "$out/cuda_tests.txt"

step "kernel bandwidth (256 MiB)"
"$build/benchmarks/gpu/gsync-gpu-kernel-bench" 256 | tee "$out/kernels.md"

for n in 2 4; do
  step "staged allreduce, $n processes on one GPU"
  timeout 150 "$build/tools/gsyncrun" -n "$n" -- "$build/benchmarks/gpu/gsync-gpu-staged-bench" 256 | tee "$out/staged_$n.md"
done
for n in 2 4; do
  step "CUDA IPC allreduce, $n processes on one GPU"
  timeout 150 "$build/tools/gsyncrun" -n "$n" -- "$build/benchmarks/gpu/gsync-gpu-ipc-bench" 256 | tee "$out/ipc_$n.md"
done
step "done: $out"
