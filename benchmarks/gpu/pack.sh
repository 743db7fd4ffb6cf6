#!/usr/bin/env bash
# Builds the GPU checks here (a machine with nvcc, no GPU needed) and packs them, with the CUDA
# runtime and libcrypto as fallbacks, into DIR (default .gpu-pack), for a GPU machine that cannot
# build (no network for packages, no Asio/doctest): carry DIR there and run
#   bash benchmarks/gpu/run_packed.sh DIR
# Usage: bash benchmarks/gpu/pack.sh [DIR] [build dir]
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
dir=${1:-$here/.gpu-pack}
build=${2:-$here/build}
cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=Release -DGSYNC_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null
# One target per invocation, several at once: CMake's Makefiles build listed targets one by one.
targets=(gsync_cuda_kernels gsync_cuda_device_collectives gsync_cuda_device_sync gsync_cuda_ipc_collectives cuda_allreduce
         cuda_data_parallel data_parallel_mlp gsyncrun gsync-gpu-kernel-bench gsync-gpu-staged-bench gsync-gpu-ipc-bench)
printf '%s\n' "${targets[@]}" | xargs -P "$(nproc)" -I{} cmake --build "$build" --target {} >/dev/null
mkdir -p "$dir/bin" "$dir/lib"
cp "$build"/tests/gsync_cuda_* "$build"/benchmarks/gpu/gsync-gpu-* "$build"/examples/cuda_allreduce "$build"/examples/cuda_data_parallel \
   "$build"/examples/data_parallel_mlp "$build"/tools/gsyncrun "$dir/bin/"
strip "$dir"/bin/*
for l in libcudart.so.13 libcrypto.so.3; do
  p=$(ldd "$dir/bin/gsync_cuda_kernels" | awk -v l=$l '$1 == l { print $3 }')
  [ -n "$p" ] && cp -L "$p" "$dir/lib/"
done
du -sh "$dir"
