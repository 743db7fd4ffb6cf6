#pragma once
/// \file
/// Checked CUDA runtime calls: a failed call becomes a `gsync::error` (`errc::cuda`) that names
/// the call and carries CUDA's own error name and text. Needs the CUDA runtime headers (nvcc, or
/// a host compiler with the CUDA include path: the CMake target gsync::cuda gives both).

#include <cuda_runtime_api.h>

#include <string>

#include "gsync/core/error.hpp"

namespace gsync::cuda {

/// Throws `errc::cuda` for a failed CUDA call `what` (e.g. "cudaMemcpyAsync"); returns otherwise.
inline void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) [[likely]] return;
  throw error(errc::cuda, std::string(what) + " failed: " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

/// Multiprocessors of the current device (what the kernels size their grids by), looked up once
/// per device per thread.
inline int multiprocessors() {
  int dev = 0;
  check(cudaGetDevice(&dev), "cudaGetDevice");
  thread_local int cached_dev = -1, cached = 0;
  if (dev != cached_dev) {
    check(cudaDeviceGetAttribute(&cached, cudaDevAttrMultiProcessorCount, dev), "cudaDeviceGetAttribute");
    cached_dev = dev;
  }
  return cached;
}

}  // namespace gsync::cuda
