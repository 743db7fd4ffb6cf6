#pragma once
/// \file
/// Kernel launches that report their own errors only: `cudaGetLastError()` after `<<<>>>` would
/// also report (and clear) an earlier, unrelated launch error of the user's as gsync's, and hide
/// it from the user; a launch call returns this launch's error and leaves the user's alone.

#if !defined(__CUDACC__)
#error "gsync/cuda/launch.cuh launches CUDA kernels: compile this file with nvcc (or clang in CUDA mode)"
#endif

#include <cuda_runtime.h>

#include <utility>

#include "gsync/cuda/runtime.hpp"

namespace gsync::cuda {

/// Queues `kernel<<<grid, block, 0, stream>>>(args...)`; throws `errc::cuda` naming `what` when
/// this launch fails.
template <class... P, class... A>
void launch(const char* what, void (*kernel)(P...), unsigned grid, unsigned block, cudaStream_t stream, A&&... args) {
#if CUDART_VERSION >= 12000
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(block);
  cfg.stream = stream;
  check(cudaLaunchKernelEx(&cfg, kernel, std::forward<A>(args)...), what);
#else
  kernel<<<grid, block, 0, stream>>>(std::forward<A>(args)...);
  check(cudaPeekAtLastError(), what);  // before CUDA 12: may name an earlier error of the user's, but leaves it set
#endif
}

}  // namespace gsync::cuda
